/*
 * NAME
 *	store_pg_queue 3
 * SUMMARY
 *	the spool on PostgreSQL: messages loaded, updated, marked, dropped, walked
 * SYNOPSIS
 *	#include "store/store.h"
 * DESCRIPTION
 *	A message is one row of messages (envelope, data, delivery state,
 *	lease, story) and one row of rcpts per recipient. It is in the spool
 *	while queued; the row stays as its story after (store_pg_hist.c).
 *	Every field of struct store_msg has a column and comes back as it
 *	went in; data is bytea, sent and read in binary.
 *
 *	A delivery write alone (store.c: its transaction's one write) is
 *	fenced by the lease this node holds. When its fence finds nothing
 *	to write, store_pg_why() tells the commit's caller why: the
 *	message is not queued (STORE_ENOTFOUND), the update's recipients
 *	do not match (STORE_EINVAL), or its lease is another node's
 *	(STORE_ELEASE).
 *
 *	store_pg_msg_drop() is the operator's, from any node: refused while
 *	another node holds a live lease on the message, since that node may
 *	be sending it now. Not so store_pg_msg_change(), which any node may
 *	do at any time: the holder of a lease finishes its attempt, and no
 *	node takes a held message again until it is released; it also makes
 *	one message, or every one not on hold, due for every node
 *	(idemrelayctl retry and flush on any node).
 * DIAGNOSTICS
 *	0 or a STORE_E* code. A row that cannot be a message (a recipient
 *	missing, a QID too long) is STORE_EINVAL, and logged.
 */
#include <stdlib.h>
#include <string.h>

#include "../../util/buf.h"
#include "../../util/clock.h"
#include "../../util/log.h"
#include "store_pg_int.h"

/* a message's columns (msg_row()), and a recipient's (rcpts_fill()) */
#define PG_MSG_COLS	"m.qid, m.accepted, m.sender, m.envid, m.ret, m.body, m.smtputf8, " \
	"m.client, m.auth_user, m.data_len, m.has_key, m.keyhash, m.ttl, m.attempts, " \
	"m.next_attempt, m.inflight, m.queued, m.updated, m.finished, m.expires, " \
	"m.forgotten, m.dropped, m.duplicates, m.mismatches, m.held, " \
	"CASE WHEN m.lease_until >= " PG_DB_NOW " THEN m.lease_owner END, " \
	"coalesce(m.lease_since, m.accepted), m.route"
#define PG_MSG_NCOLS	28
#define PG_RCPT_COLS	"r.qid, r.idx, r.addr, r.notify, r.orcpt, r.state, r.reply"

/* when - a time of the database's clock (0: none) on this host's, off the difference */
static int64_t when(const PGresult *r, int row, int col, int64_t off)
{
	int64_t t = store_pg_int(r, row, col);

	return t != 0 ? t - off : 0;
}

/*
 * msg_row - a row of PG_MSG_COLS into s (and s->m): owned copies, no
 * recipients; its times on this host's clock (off: store_pg_clock_off())
 */
static int msg_row(const PGresult *r, int row, struct store_story *s, int64_t off)
{
	struct store_msg *m = &s->m;

	memset(s, 0, sizeof(*s));
	if (store_pg_qid(r, row, 0, m->qid) != 0)
		return STORE_EINVAL;
	m->accepted = when(r, row, 1, off);
	m->from = store_pg_strdup(r, row, 2);
	m->envid = store_pg_strdup(r, row, 3);
	m->ret = (int) store_pg_int(r, row, 4);
	m->body = (int) store_pg_int(r, row, 5);
	m->smtputf8 = (int) store_pg_int(r, row, 6);
	m->client = store_pg_strdup(r, row, 7);
	m->user = store_pg_strdup(r, row, 8);
	m->data_len = (size_t) store_pg_int(r, row, 9);
	m->has_key = (int) store_pg_int(r, row, 10);
	if (m->has_key && store_pg_copy(r, row, 11, m->keyhash, STORE_HASH_LEN) != 0)
		m->has_key = 0;
	m->ttl = store_pg_int(r, row, 12);
	m->attempts = (int) store_pg_int(r, row, 13);
	m->next_attempt = store_pg_int(r, row, 14);
	m->inflight = (int) store_pg_int(r, row, 15);
	s->queued = (int) store_pg_int(r, row, 16);
	s->has_key = m->has_key;
	memcpy(s->keyhash, m->keyhash, STORE_HASH_LEN);
	s->ttl = store_story_ttl(m);
	s->updated = when(r, row, 17, off);
	s->finished = when(r, row, 18, off);
	s->expires = when(r, row, 19, off);
	s->forgotten = when(r, row, 20, off);
	s->dropped = (int) store_pg_int(r, row, 21);
	s->duplicates = (uint32_t) store_pg_int(r, row, 22);
	s->mismatches = (uint32_t) store_pg_int(r, row, 23);
	m->held = (int) store_pg_int(r, row, 24);
	m->lease_node = store_pg_strdup(r, row, 25);
	m->lease_since = m->lease_node ? when(r, row, 26, off) : 0;
	m->route = store_pg_strdup(r, row, 27);
	if (m->from == NULL || m->client == NULL) {
		store_msg_free(m);
		return STORE_EINVAL;
	}
	return 0;
}

/*
 * rcpts_fill - m's recipients from rows of PG_RCPT_COLS, from
 * column col on (ordered by qid, idx), starting at *row, which moves past
 * them; each index once, from 0 up, or STORE_EINVAL
 */
static int rcpts_fill(const PGresult *r, int *row, int col, struct store_msg *m)
{
	char qid[STORE_QID_SIZE];
	size_t n = 0, cap = 0;
	struct store_rcpt *v = NULL;
	int rows = PQntuples(r);

	for (; *row < rows; (*row)++) {
		if (store_pg_qid(r, *row, col, qid) != 0 || strcmp(qid, m->qid) != 0)
			break;		/* the next message's */
		if (store_pg_int(r, *row, col + 1) != (int64_t) n || PQgetisnull(r, *row, col + 2))
			goto bad;
		v = store_pg_grow(v, n, &cap, sizeof(*v));
		v[n].addr = store_pg_strdup(r, *row, col + 2);
		v[n].notify = (int) store_pg_int(r, *row, col + 3);
		v[n].orcpt = store_pg_strdup(r, *row, col + 4);
		v[n].state = (enum store_rcpt_state) store_pg_int(r, *row, col + 5);
		v[n].reply = store_pg_strdup(r, *row, col + 6);
		n++;
	}
	if (n == 0)
		goto bad;
	m->rcpts = v;
	m->n_rcpts = n;
	return 0;
bad:
	m->rcpts = v;
	m->n_rcpts = n;
	msg_warn("%s: store: recipients missing or out of order", m->qid);
	return STORE_EINVAL;
}

/*
 * A message and its recipients in one statement, a row per recipient:
 * the message's columns on each (the data on the first only), then the
 * recipient's. Two statements before, in
 * one round trip: the second was a fifth of a fresh message's statements.
 */
#define SQL_FETCH_FROM " FROM messages m JOIN rcpts r ON r.qid = m.qid WHERE m.qid = $1"
static const char SQL_FETCH_LOAD[] =
	"SELECT " PG_MSG_COLS ", CASE WHEN r.idx = 0 THEN m.data END, " PG_RCPT_COLS
	SQL_FETCH_FROM " AND " PG_ROW_QUEUED("m.") " ORDER BY r.idx";
static const char SQL_FETCH_STORY[] =
	"SELECT " PG_MSG_COLS ", " PG_RCPT_COLS SQL_FETCH_FROM " ORDER BY r.idx";

/*
 * store_pg_msg_fetch - a message and its recipients into s, in one
 * statement, for store_pg_msg_load() (load: queued only, with its data)
 * and store_pg_story_get(); 0, or STORE_ENOTFOUND, STORE_EINVAL (a row
 * that cannot be a message, logged) or an error with s empty
 */
int store_pg_msg_fetch(struct pg_store *st, const char *qid, int load, struct store_story *s)
{
	struct pg_params p;
	PGresult *r = NULL;
	PGconn *c;
	size_t len = 0;
	int err, row = 0;

	memset(s, 0, sizeof(*s));
	if (!store_qid_ok(qid))
		return STORE_EINVAL;
	if ((err = store_pg_take(st, &c)) != 0)
		return err;
	store_pg_params_init(&p);
	store_pg_p_text(&p, qid);
	err = store_pg_exec(st, c, load ? SQL_FETCH_LOAD : SQL_FETCH_STORY, &p, &r,
			    load ? "load" : "story");
	store_pg_params_free(&p);
	if (err == 0 && PQntuples(r) == 0)
		err = STORE_ENOTFOUND;
	if (err == 0 && load)		/* the data: on the first row, after the message's columns */
		len = (size_t) PQgetlength(r, 0, PG_MSG_NCOLS);
	store_pg_give_sized(st, c, len);
	if (err == 0 && (err = msg_row(r, 0, s, store_pg_clock_off(st))) == 0 && load) {
		if (PQgetisnull(r, 0, PG_MSG_NCOLS) || len != s->m.data_len) {
			msg_warn("%s: store: message data missing or of the wrong size", qid);
			err = STORE_EINVAL;
		} else {
			s->m.data = xmalloc(len + 1);
			memcpy(s->m.data, PQgetvalue(r, 0, PG_MSG_NCOLS), len);
			s->m.data[len] = 0;
		}
	}
	if (err == 0)			/* the recipients' columns come after */
		err = rcpts_fill(r, &row, PG_MSG_NCOLS + (load != 0), &s->m);
	if (err != 0)
		store_story_free(s);
	PQclear(r);
	return err;
}

/*
 * store_pg_msg_load - a queued message with owned copies of every field:
 * the copy this node kept when it put the message, for its first load
 * (store_pg_keep.c), else read from the database
 */
int store_pg_msg_load(struct store *base, const char *qid, struct store_msg *m)
{
	struct pg_store *st = (struct pg_store *) base;
	struct store_story s;
	int err;

	if (store_pg_keep_take(st, qid, m) == 0)
		return 0;	/* just put by this node, its lease still held */
	err = store_pg_msg_fetch(st, qid, 1, &s);
	*m = s.m;
	if (err == 0)		/* 0 (the row's) unless leased to this node */
		(void) store_pg_lease_get(st, qid, &m->lease);
	return err;
}

/*
 * store_pg_why - a fenced write of qid found nothing: STORE_ENOTFOUND if
 * it is not queued, STORE_EINVAL if it has not n_rcpts recipients (when
 * n_rcpts is not 0), else STORE_ELEASE. Unless EINVAL, this node forgets
 * the lease of token, the one the write was fenced with (0: it had none);
 * a newer lease, taken since the write read its token, stays.
 */
int store_pg_why(struct pg_store *st, const char *qid, size_t n_rcpts, int64_t token)
{
	struct pg_params p;
	PGresult *r;
	int err;

	store_pg_params_init(&p);
	store_pg_p_text(&p, qid);
	err = store_pg_run(st, "SELECT m.queued, (SELECT count(*) FROM rcpts r WHERE r.qid = m.qid) "
			   "FROM messages m WHERE m.qid = $1", &p, &r, "why");
	store_pg_params_free(&p);
	if (err != 0)
		return err;
	if (PQntuples(r) != 1 || !store_pg_int(r, 0, 0))
		err = STORE_ENOTFOUND;
	else if (n_rcpts != 0 && store_pg_int(r, 0, 1) != (int64_t) n_rcpts)
		err = STORE_EINVAL;
	else
		err = STORE_ELEASE;
	PQclear(r);
	if (err != STORE_EINVAL && token != 0)
		store_pg_lease_del(st, qid, token);
	return err;
}

/* store_pg_msg_drop - out of the spool, story kept; refused while another node's lease is live */
int store_pg_msg_drop(struct store *base, const char *qid)
{
	struct pg_store *st = (struct pg_store *) base;
	struct pg_params p;
	int64_t now = clock_us() + store_pg_clock_off(st);	/* its story's end */
	int64_t token = 0;	/* 0: this node holds no lease on it */
	PGresult *r;
	int err;

	store_pg_keep_forget(st, qid);
	(void) store_pg_lease_get(st, qid, &token);
	store_pg_params_init(&p);
	store_pg_p_text(&p, qid);
	store_pg_p_i64(&p, now);
	store_pg_p_text(&p, st->node);
	store_pg_p_i64(&p, STORE_STORY_TTL);
	err = store_pg_run(st, "UPDATE messages SET queued = false, data = NULL, dropped = true, "
		  "updated = $2, finished = $2, expires = " PG_STORY_EXPIRES("$2", "ttl", "$4") ", "
		  "lease_owner = NULL WHERE qid = $1 AND " PG_ROW_QUEUED("") " AND "
		  "(lease_owner IS NULL OR lease_owner = $3 OR lease_until < " PG_DB_NOW ")",
		  &p, &r, "drop");
	store_pg_params_free(&p);
	if (err != 0)
		return err;
	if (strcmp(PQcmdTuples(r), "1") != 0)
		err = store_pg_why(st, qid, 0, token);
	else
		store_pg_lease_del(st, qid, 0);
	PQclear(r);
	return err;
}

/*
 * store_pg_msg_change - hold, release, reroute or make due a queued
 * message, for every node, in one statement (STORE_ENOTFOUND unless one
 * queued row); or make every one not on hold due (qid NULL: idemrelayctl
 * flush passes the held ones over)
 */
int store_pg_msg_change(struct store *base, const char *qid, const struct store_change *c)
{
	struct pg_store *st = (struct pg_store *) base;
	struct pg_params p;
	PGresult *r;
	int err;

	store_pg_keep_forget(st, qid);
	store_pg_params_init(&p);
	store_pg_p_i64(&p, c->due > 0 ? c->due : INT64_MAX);
	if (qid) {
		store_pg_p_text(&p, qid);
		store_pg_p_text(&p, c->hold < 0 ? NULL : c->hold ? "true" : "false");
		store_pg_p_text(&p, c->set_route ? "true" : "false");
		store_pg_p_text(&p, c->route);
	}
	/* two statements: one plan for both would read every queued message for one */
	err = store_pg_run(st, qid ? "UPDATE messages SET next_attempt = least(next_attempt, $1), "
			   "held = coalesce($3::boolean, held), route = CASE WHEN $4::boolean THEN $5 "
			   "ELSE route END WHERE qid = $2 AND " PG_ROW_QUEUED("")
			   : "UPDATE messages SET next_attempt = $1 WHERE queued AND NOT held "
			   "AND next_attempt > $1", &p, &r, "change");
	store_pg_params_free(&p);
	if (err != 0)
		return err;
	if (qid && strcmp(PQcmdTuples(r), "1") != 0)
		err = STORE_ENOTFOUND;
	PQclear(r);
	return err;
}

/*
 * The walk: every queued message and its recipients in one statement (one
 * snapshot), a row per recipient as in a fetch; a message without any
 * comes as one row with NULL recipient columns, and is skipped as corrupt.
 * A read-only transaction of a statement for the messages and one for
 * the recipients before: four statements, four round trips.
 */
static const char SQL_WALK[] =
	"SELECT " PG_MSG_COLS ", " PG_RCPT_COLS " FROM messages m LEFT JOIN rcpts r "
	"ON r.qid = m.qid WHERE m.queued ORDER BY m.qid, r.idx";

/*
 * store_pg_queue_walk - every queued message of every node, envelope and
 * state, in QID order; for delivery's start (STORE_WALK_MINE) nothing: a
 * node just started holds no lease (store_pg_open() gave up those of its
 * previous life, before any commit), and its taker leases what is due
 */
int store_pg_queue_walk(struct store *base, unsigned how,
			int (*cb) (void *, const struct store_msg *), void *arg)
{
	struct pg_store *st = (struct pg_store *) base;
	struct store_story s;
	PGresult *r;
	int i, row, err;

	if (how & STORE_WALK_MINE)
		return 0;
	if ((err = store_pg_run(st, SQL_WALK, NULL, &r, "queue walk")) != 0)
		return err;
	for (i = 0; i < PQntuples(r) && err == 0; i = row) {
		row = i;
		if (msg_row(r, i, &s, store_pg_clock_off(st)) == 0
		    && rcpts_fill(r, &row, PG_MSG_NCOLS, &s.m) == 0)
			err = cb(arg, &s.m);
		else
			msg_warn("%s: store: corrupt message row skipped", PQgetvalue(r, i, 0));
		store_msg_free(&s.m);
		for (row = row > i ? row : i + 1; row < PQntuples(r)
		     && strcmp(PQgetvalue(r, row, 0), PQgetvalue(r, i, 0)) == 0; row++)
			;		/* the rest of a corrupt message's rows */
	}
	PQclear(r);
	return err;
}
