/*
 * NAME
 *	store_pg_hist 3
 * SUMMARY
 *	history on PostgreSQL: stories, a key's claims, forgetting, counts, expiry
 * SYNOPSIS
 *	#include "store/store.h"
 * DESCRIPTION
 *	A message's row is its story: while queued the spool's live state,
 *	after it left the spool what became of it, until it expires ttl
 *	later (store_pg_queue.c writes both). A key's claims are the claims
 *	rows with its key hash (an index), so showing, forgetting and
 *	expiring them is a range of that index.
 *
 *	store_pg_hist_expire() runs on one node at a time, under a
 *	transaction advisory lock that another node does not wait for: if
 *	one is expiring, the others return at once (0 done). It deletes up to max
 *	expired stories, with their recipients and those of their claims
 *	that still name them and expired by then (a claim renewed for
 *	another message is that message's), in one short transaction. Its
 *	now is moved to the database's clock, as every story's end was.
 * DIAGNOSTICS
 *	0 (store_pg_hist_expire: how many it deleted), STORE_ENOTFOUND where
 *	the interface says, or a STORE_E* code.
 */
#include <stdlib.h>
#include <string.h>

#include "../../util/buf.h"
#include "../../util/log.h"
#include "store_pg_int.h"

#define EXPIRY_LOCK "hashtextextended('idemrelay expiry ' || coalesce(current_schema(), ''), 0)"

/* qids_of - column 0 of every row as an owned QID array; STORE_ENOTFOUND (and none) if empty */
static int qids_of(const PGresult *r, char (**qids)[STORE_QID_SIZE], size_t *n)
{
	int i, rows = PQntuples(r);

	*qids = xcalloc(rows ? (size_t) rows : 1, sizeof(**qids));
	*n = 0;
	for (i = 0; i < rows; i++)
		if (store_pg_qid(r, i, 0, (*qids)[*n]) == 0)
			(*n)++;
	if (*n > 0)
		return 0;
	free(*qids);
	*qids = NULL;
	return STORE_ENOTFOUND;
}

/* store_pg_story_get - a QID's story; the spool's live state while queued */
int store_pg_story_get(struct store *base, const char *qid, struct store_story *s)
{
	int err = store_pg_msg_fetch((struct pg_store *) base, qid, 0, s);

	if (err == 0 && s->queued)
		s->finished = s->expires = 0;
	return err;
}

/* store_pg_key_qids - the QIDs holding claims under a key, oldest first */
int store_pg_key_qids(struct store *base, const uint8_t keyhash[STORE_HASH_LEN],
		      char (**qids)[STORE_QID_SIZE], size_t *n)
{
	struct pg_params p;
	PGresult *r;
	int err;

	*qids = NULL;
	*n = 0;
	store_pg_params_init(&p);
	store_pg_p_bytes(&p, keyhash, STORE_HASH_LEN);
	err = store_pg_run((struct pg_store *) base, "SELECT DISTINCT qid FROM claims WHERE keyhash = $1 "
		  "ORDER BY qid", &p, &r, "key qids");
	store_pg_params_free(&p);
	if (err != 0)
		return err;
	err = qids_of(r, qids, n);
	PQclear(r);
	return err;
}

/*
 * store_pg_key_forget - delete a key's claims (user non-NULL: of that AUTH
 * user's messages), noting in each story when, in one statement
 */
int store_pg_key_forget(struct store *base, const uint8_t keyhash[STORE_HASH_LEN],
			const char *user, int64_t now, struct store_forget *out)
{
	struct pg_params p;
	PGresult *r;
	int err, i;

	memset(out, 0, sizeof(*out));
	store_pg_params_init(&p);
	store_pg_p_bytes(&p, keyhash, STORE_HASH_LEN);
	store_pg_p_text(&p, user);
	store_pg_p_i64(&p, now + store_pg_clock_off((struct pg_store *) base));
	err = store_pg_run((struct pg_store *) base,
		  "WITH d AS (DELETE FROM claims c WHERE c.keyhash = $1 AND ($2::text IS NULL "
		  "OR EXISTS (SELECT 1 FROM messages m WHERE m.qid = c.qid AND m.auth_user = $2)) "
		  "RETURNING c.qid), q AS (SELECT qid, count(*) AS n FROM d GROUP BY qid), "
		  "u AS (UPDATE messages m SET forgotten = $3 FROM q WHERE m.qid = q.qid) "
		  "SELECT qid, n FROM q ORDER BY qid", &p, &r, "key forget");
	store_pg_params_free(&p);
	if (err != 0)
		return err;
	err = qids_of(r, &out->qids, &out->n_qids);
	for (i = 0; i < PQntuples(r); i++)
		out->claims += (size_t) store_pg_int(r, i, 1);
	PQclear(r);
	if (err != 0)
		store_forget_free(out);
	return err;
}

/* store_pg_hist_count - add answered duplicates and mismatches to stories, in one statement */
int store_pg_hist_count(struct store *base, const struct store_count *c, size_t n)
{
	struct pg_params p;
	struct pg_arr q, d, m;
	PGresult *r;
	size_t i;
	int err;

	if (n == 0)
		return 0;
	store_pg_arr_init(&q, PG_OID_TEXT);
	store_pg_arr_init(&d, PG_OID_INT8);
	store_pg_arr_init(&m, PG_OID_INT8);
	for (i = 0; i < n; i++) {
		if (!store_qid_ok(c[i].qid))
			continue;
		store_pg_a_text(&q, c[i].qid);
		store_pg_a_i64(&d, c[i].duplicates);
		store_pg_a_i64(&m, c[i].mismatches);
	}
	store_pg_params_init(&p);
	store_pg_p_arr(&p, &q);
	store_pg_p_arr(&p, &d);
	store_pg_p_arr(&p, &m);
	err = store_pg_run((struct pg_store *) base,
		  "UPDATE messages m SET duplicates = m.duplicates + v.d, "
		  "mismatches = m.mismatches + v.mm FROM (SELECT qid, sum(d)::int AS d, "
		  "sum(mm)::int AS mm FROM unnest($1::text[], $2::int8[], $3::int8[]) "
		  "AS u(qid, d, mm) GROUP BY qid) v WHERE m.qid = v.qid", &p, &r, "count");
	store_pg_params_free(&p);
	PQclear(r);
	return err;
}

/*
 * The expiry's statement, its now and max written in as numbers: planned
 * for them at each call, where the pool's sessions force generic plans
 * (store_pg.c) and a generic plan takes a LIMIT $2 for a tenth of the
 * stories and joins them with every claim by a sequential scan. Nothing
 * is read unless this call gets the expiry's lock (an init plan: tried
 * once, held to the statement's end); while another node expires, 0 at
 * once. A transaction of four statements before (BEGIN with SET LOCAL
 * plan_cache_mode, the lock, the deletes, COMMIT): four round trips.
 */
#define SQL_EXPIRE "WITH e AS (SELECT qid, keyhash, expires FROM messages " \
	"WHERE (SELECT pg_try_advisory_xact_lock(" EXPIRY_LOCK ")) AND NOT queued " \
	"AND expires <= %lld ORDER BY expires LIMIT %zu FOR UPDATE SKIP LOCKED), " \
	"dc AS (DELETE FROM claims c USING e WHERE c.keyhash = e.keyhash " \
	"AND c.qid = e.qid AND c.expires <= e.expires RETURNING 1), " \
	"dr AS (DELETE FROM rcpts r USING e WHERE r.qid = e.qid), " \
	"dm AS (DELETE FROM messages m USING e WHERE m.qid = e.qid RETURNING 1) " \
	"SELECT (SELECT count(*) FROM dm), (SELECT count(*) FROM dc)"

/*
 * store_pg_hist_expire - delete up to max stories past their expiry, and
 * their claims, on one node at a time (see the header)
 */
int store_pg_hist_expire(struct store *base, int64_t now, size_t max)
{
	char sql[sizeof(SQL_EXPIRE) + 48];
	PGresult *r;
	int err, done;

	if (max == 0)
		return 0;
	now += store_pg_clock_off((struct pg_store *) base);	/* stories end on the database's */
	snprintf(sql, sizeof(sql), SQL_EXPIRE, (long long) now, max);
	if ((err = store_pg_run((struct pg_store *) base, sql, NULL, &r, "expire")) != 0)
		return err;
	done = (int) store_pg_int(r, 0, 0);
	PQclear(r);
	return done;
}
