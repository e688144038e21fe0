/*
 * NAME
 *	store_pg_lease 3
 * SUMMARY
 *	delivery leases: taking due messages, renewing, the leases a node holds
 * SYNOPSIS
 *	#include "store/store.h"
 * DESCRIPTION
 *	Any node delivers any due message, under a lease: an owner (the
 *	node's name), an expiry and a fencing token from lease_seq, new at
 *	every take. The node keeps the token of each lease it holds in a
 *	small hash map (qid -> token, under its own mutex, with the copy of
 *	a message just put kept on its entry: store_pg_keep.c); every later
 *	delivery write of that message is fenced by it (store_pg_txn.c),
 *	so a node whose lease ran out and went to another node can no
 *	longer write anything of that delivery.
 *
 *	store_pg_queue_take() leases up to max due messages with FOR UPDATE
 *	SKIP LOCKED: nodes taking at once take different messages and never
 *	wait for each other. It passes over the routes the node names (those
 *	it would not send to now: deliver.c's closed_routes). A void
 *	message (store_pg_wait.c) is never taken; the take settles the
 *	voids now and then. Batches answered 451
 *	while PostgreSQL could not be reached are settled (voided) before
 *	the take or a renewal runs: by the pool, whose connections they use
 *	(store_pg_pend.c); their messages were never in the lease map.
 *	Lease expiry is compared on the database's
 *	clock, so a node's clock skew cannot break a lease; next_attempt is
 *	the node's clock, as on LMDB. store_pg_lease_renew() extends every
 *	lease held but those a delivery write has locked at that moment
 *	(SKIP LOCKED: never a wait, so never a deadlock; the next renewal
 *	comes a third of a lease later); those no longer this node's (taken
 *	by another node since, or finished) are forgotten.
 * DIAGNOSTICS
 *	0 or a STORE_E* code; a non-zero return of a callback stops the
 *	calls and is returned.
 */
#include <stdlib.h>
#include <string.h>

#include "../../util/buf.h"
#include "../../util/hash.h"
#include "../../util/log.h"
#include "store_pg_int.h"

#define DELETED		"\1"

/* slot_of - qid's slot, or the free one it would take (lmu held, cap > 0) */
static struct pg_lease *slot_of(struct pg_store *st, const char *qid, int for_insert)
{
	size_t mask = st->cap_leases - 1, i;
	struct pg_lease *tomb = NULL, *e;

	for (i = (size_t) hash_fnv(HASH_FNV_INIT, qid, strlen(qid)) & mask;; i = (i + 1) & mask) {
		e = &st->leases[i];
		if (e->qid[0] == 0)
			return for_insert && tomb ? tomb : e;
		if (strcmp(e->qid, DELETED) == 0) {
			if (tomb == NULL)
				tomb = e;
		} else if (strcmp(e->qid, qid) == 0) {
			return e;
		}
	}
}

/*
 * grow - the map rebuilt without the deleted ones, at four times the
 * live at least: as large as the leases held, where twice the slots at
 * every rebuild grew it with every lease ever held (lmu held)
 */
static void grow(struct pg_store *st)
{
	struct pg_lease *old = st->leases;
	size_t oldcap = st->cap_leases, i;

	st->cap_leases = 64;
	while (st->n_leases * 4 >= st->cap_leases)
		st->cap_leases *= 2;
	st->leases = xcalloc(st->cap_leases, sizeof(*st->leases));
	st->n_used = st->n_leases;
	for (i = 0; i < oldcap; i++)
		if (old[i].qid[0] && strcmp(old[i].qid, DELETED) != 0)
			*slot_of(st, old[i].qid, 1) = old[i];
	free(old);
}

/* store_pg_lease_entry - qid's entry, or NULL if this node holds no lease on it (lmu held) */
struct pg_lease *store_pg_lease_entry(struct pg_store *st, const char *qid)
{
	struct pg_lease *e;

	if (st->cap_leases == 0 || (e = slot_of(st, qid, 0))->qid[0] == 0)
		return NULL;
	return e;
}

/*
 * store_pg_lease_get - the token of the lease this node holds on qid;
 * STORE_ENOTFOUND, *token untouched
 */
int store_pg_lease_get(struct pg_store *st, const char *qid, int64_t *token)
{
	struct pg_lease *e;

	pthread_mutex_lock(&st->lmu);
	if ((e = store_pg_lease_entry(st, qid)) != NULL)
		*token = e->token;
	pthread_mutex_unlock(&st->lmu);
	return e != NULL ? 0 : STORE_ENOTFOUND;
}

/* store_pg_lease_set - this node holds qid's lease, with token (a copy of another token's goes) */
void store_pg_lease_set(struct pg_store *st, const char *qid, int64_t token)
{
	struct pg_lease *e;

	pthread_mutex_lock(&st->lmu);
	if (2 * (st->n_used + 1) > st->cap_leases)
		grow(st);
	e = slot_of(st, qid, 1);
	if (e->qid[0] == 0 || strcmp(e->qid, DELETED) == 0) {
		if (e->qid[0] == 0)
			st->n_used++;
		st->n_leases++;
		strcpy(e->qid, qid);
	} else if (e->token != token) {
		store_pg_keep_unhang(st, e);
	}
	e->token = token;
	pthread_mutex_unlock(&st->lmu);
}

/*
 * store_pg_lease_del - this node no longer holds qid's lease: the one of
 * that token if token != 0 (a newer lease, taken since the write that
 * gave this one up committed, stays)
 */
void store_pg_lease_del(struct pg_store *st, const char *qid, int64_t token)
{
	struct pg_lease *e;

	pthread_mutex_lock(&st->lmu);
	if ((e = store_pg_lease_entry(st, qid)) != NULL && (token == 0 || e->token == token)) {
		store_pg_keep_unhang(st, e);	/* a copy dies with its lease */
		strcpy(e->qid, DELETED);
		st->n_leases--;
	}
	pthread_mutex_unlock(&st->lmu);
}

/*
 * held - every lease this node holds, as p's next three parameters:
 * their tokens (int8[]), the node, their QIDs (text[], in the same
 * order); rows are found by QID, the primary key, and checked by token.
 * Their number (0: nothing added)
 */
static size_t held(struct pg_store *st, struct pg_params *p)
{
	char (*qids)[STORE_QID_SIZE];
	struct pg_arr tokens;
	size_t i, n = 0;

	store_pg_arr_init(&tokens, PG_OID_INT8);
	pthread_mutex_lock(&st->lmu);
	qids = xcalloc(st->n_leases ? st->n_leases : 1, sizeof(*qids));
	for (i = 0; i < st->cap_leases; i++)
		if (st->leases[i].qid[0] && strcmp(st->leases[i].qid, DELETED) != 0) {
			memcpy(qids[n++], st->leases[i].qid, sizeof(*qids));
			store_pg_a_i64(&tokens, st->leases[i].token);
		}
	pthread_mutex_unlock(&st->lmu);
	if (n > 0) {
		store_pg_p_arr(p, &tokens);
		store_pg_p_text(p, st->node);
		store_pg_p_qids(p, qids, n);
	} else
		store_pg_arr_free(&tokens);
	free(qids);
	return n;
}

/*
 * store_pg_queue_take - lease up to max due messages to this node, but
 * those of the routes skipped; cb for each
 */
int store_pg_queue_take(struct store *base, int64_t now, size_t max, const char *const *skip,
			size_t n_skip, int (*cb) (void *, const struct store_msg *), void *arg)
{
	struct pg_store *st = (struct pg_store *) base;
	struct pg_params p;
	struct pg_arr names;
	struct store_msg m;
	PGresult *r;
	size_t k;
	int err, i;

	if (st->node == NULL || max == 0)
		return 0;		/* a client (idemrelayctl) delivers nothing */
	store_pg_anchor_check(st);
	store_pg_voids_settle(st);
	store_pg_params_init(&p);
	store_pg_p_text(&p, st->node);
	store_pg_p_i64(&p, st->lease_us);
	store_pg_p_i64(&p, now);
	store_pg_p_i64(&p, (int64_t) max);
	store_pg_arr_init(&names, PG_OID_TEXT);	/* $5 the routes skipped, '' the default upstream */
	for (k = 0; k < n_skip; k++)
		store_pg_a_text(&names, skip[k] ? skip[k] : "");
	store_pg_p_arr(&p, &names);
	/*
	 * = ANY(ARRAY(...)): a join with the subquery was a hash of every
	 * message in its generic plan. The void test is on the rows taken
	 * (at most max index lookups), not on every due message the inner
	 * scan reads (1 us each: a backlog's take twice as slow); a void
	 * message only holds a place until it is settled, seconds after its
	 * transaction ends, and no take commits while it waits anyway.
	 * A scalar subquery: NOT EXISTS was a hash of all voids. The routes
	 * of the queued mail, '' the default's (a route's name is never
	 * empty), are found one index descent each (g, in messages_take,
	 * schema 11), those of routes this node does not know too; each one
	 * not skipped gives its max first due messages, in its own part of
	 * the index, and the first max of those are taken: a skipped route's
	 * backlog is never read (it was, in one scan by next_attempt: 115 ms
	 * and 9,845 buffer hits a take past 200,000 of its rows, against
	 * 1.1 ms; test_take_skips_backlog). The price: where several routes
	 * have mail due, rows of one beyond the max taken are locked for the
	 * statement, and so passed over by a node taking at that moment; and
	 * each row so locked and not taken has its lock (FOR UPDATE, a tuple
	 * lock) written in the row itself: its page dirtied and a WAL record,
	 * for at most max rows of each route with mail due, less those taken.
	 */
	err = store_pg_run(st, "UPDATE messages m SET lease_owner = $1, lease_until = " PG_DB_NOW " + $2, "
		  "lease_since = " PG_DB_NOW ", lease_token = nextval('lease_seq') "
		  "WHERE m.qid = ANY(ARRAY(WITH RECURSIVE g(route) AS ("
		  "(SELECT coalesce(route, '') FROM messages WHERE queued ORDER BY 1 LIMIT 1) UNION ALL "
		  "SELECT (SELECT coalesce(route, '') FROM messages WHERE queued AND coalesce(route, '') "
		  "> g.route ORDER BY 1 LIMIT 1) FROM g WHERE g.route IS NOT NULL) "
		  "SELECT t.qid FROM g, LATERAL (SELECT qid, next_attempt FROM messages WHERE queued "
		  "AND NOT held AND coalesce(route, '') = g.route AND next_attempt <= $3 "
		  "AND (lease_owner IS NULL OR lease_until < " PG_DB_NOW ") "
		  "ORDER BY next_attempt LIMIT $4 FOR UPDATE SKIP LOCKED) t "
		  "WHERE g.route <> ALL($5) "
		  "ORDER BY t.next_attempt LIMIT $4)) "
		  "AND (SELECT true FROM voids v WHERE v.qid = m.qid) IS NULL "
		  "RETURNING m.qid, m.next_attempt, m.lease_token", &p, &r, "queue take");
	store_pg_params_free(&p);
	if (err != 0)
		return err;
	/* every lease taken is held, the callbacks' stop or not: cb for each until a non-zero */
	memset(&m, 0, sizeof(m));
	for (i = 0; i < PQntuples(r); i++)
		if (store_pg_qid(r, i, 0, m.qid) == 0) {
			store_pg_lease_set(st, m.qid, store_pg_int(r, i, 2));
			m.next_attempt = store_pg_int(r, i, 1);
			if (err == 0)
				err = cb(arg, &m);
		}
	PQclear(r);
	return err;
}

/* store_pg_lease_renew - extend every lease held, on the database's clock; forget those lost */
int store_pg_lease_renew(struct store *base)
{
	struct pg_store *st = (struct pg_store *) base;
	struct pg_params p;
	char qid[STORE_QID_SIZE];
	PGresult *r;
	int err, i, lost;

	if (st->node == NULL)
		return 0;
	store_pg_anchor_check(st);
	store_pg_params_init(&p);
	store_pg_p_i64(&p, st->lease_us);
	if (held(st, &p) == 0) {
		store_pg_params_free(&p);
		return 0;
	}
	/*
	 * Rows a delivery write has locked are skipped, not waited for: the
	 * renewal took rows in no order and deadlocked with a mark carrying
	 * the previous outcome (two rows). The leases still held are what the
	 * statement's snapshot shows as this node's, renewed or not this time;
	 * it answers with the others, lost, each a row (a scalar subquery, an
	 * index lookup each): the node forgets them as they are read, where it
	 * matched every lease held against every row still held (O(held x
	 * rows), under lmu).
	 *
	 * It commits without waiting for a synchronous standby
	 * (PG_LOCAL_COMMIT): with the standby away, a renewal whose COMMIT
	 * waited kept every row it renewed locked for the whole outage, so
	 * that each delivery write of those messages (a mark, an outcome)
	 * waited behind it, was cut at a statement's limit and tried again,
	 * and a stop waited for those cuts; and it committed, once the
	 * standby was back, an expiry reckoned when it began, maybe past.
	 * A renewal lost in a failover (a standby promoted without it) is a
	 * lease that runs out sooner than this node believes: another node
	 * may take the message while this one delivers it, as when a node
	 * is slow. The fence and the mark cover that: every delivery write
	 * of this node checks its token (the other node's take gave a new
	 * one), and the inflight mark, committed as the server says (waiting
	 * for the standby) before the final dot, is on any standby promoted:
	 * a dot sent means a mark the taker reads as an ambiguous delivery
	 * (upstream.ambiguous), never a message sent again blindly.
	 * The take stays synchronous: its token comes from lease_seq, whose
	 * WAL runs up to 32 values ahead of its uses, so a take lost in a
	 * failover may have used a token the new primary issues again, to
	 * another node's take of the same message, which the fence could not
	 * tell from this one's
	 */
	err = store_pg_run(st, "WITH c AS (SELECT qid FROM messages "
		  "WHERE qid = ANY($4::text[]) AND lease_token = ANY($2::int8[]) AND lease_owner = $3 "
		  "AND " PG_ROW_QUEUED("") " FOR UPDATE SKIP LOCKED), u AS (UPDATE messages m SET "
		  "lease_until = " PG_DB_NOW " + $1 FROM c WHERE m.qid = c.qid AND " PG_LOCAL_COMMIT ") "
		  "SELECT h.q, h.t FROM unnest($4::text[], $2::int8[]) AS h(q, t) "
		  "WHERE (SELECT true FROM messages m WHERE m.qid = h.q AND m.lease_token = h.t "
		  "AND m.lease_owner = $3 AND " PG_ROW_QUEUED("m.") ") IS NULL",
		  &p, &r, "lease renew");
	store_pg_params_free(&p);
	if (err != 0)
		return err;
	lost = PQntuples(r);
	for (i = 0; i < lost; i++)
		if (store_pg_qid(r, i, 0, qid) == 0)
			store_pg_lease_del(st, qid, store_pg_int(r, i, 1));
	if (lost)
		msg_info("store: %d lease%s lost to other nodes or finished", lost,
			 lost == 1 ? "" : "s");
	PQclear(r);
	return 0;
}

/*
 * store_pg_lease_release - this node is done with qid without a write
 * that gave its lease up (delivery abandoned it): give the lease up now,
 * for any node to take when due, rather than at its expiry. Only that of
 * token lease, unless 0: one the taker took since (the write that gave
 * the loaded one up committed, and the message was due) is a new
 * delivery's, already scheduled here. Committed without waiting for a
 * standby, as the renewal: lost in a failover, the lease runs out
 */
void store_pg_lease_release(struct store *base, const char *qid, int64_t lease)
{
	struct pg_store *st = (struct pg_store *) base;
	struct pg_params p;
	int64_t token;
	PGresult *r;

	if (store_pg_lease_get(st, qid, &token) != 0 || (lease != 0 && token != lease))
		return;
	store_pg_lease_del(st, qid, token);
	store_pg_params_init(&p);
	store_pg_p_text(&p, qid);
	store_pg_p_i64(&p, token);
	if (store_pg_run(st, "UPDATE messages SET lease_owner = NULL WHERE qid = $1 AND lease_token "
			 "= $2 AND " PG_ROW_QUEUED("") " AND " PG_LOCAL_COMMIT, &p, &r, "lease release") == 0)
		PQclear(r);
	store_pg_params_free(&p);
}
