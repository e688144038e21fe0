/*
 * NAME
 *	store_pg_revive 3
 * SUMMARY
 *	a verdict on this node's inflight mark undone: the message queued again
 * SYNOPSIS
 *	#include "store/store.h"
 * DESCRIPTION
 *	A node writes a message's inflight mark before its final dot. When
 *	that commit's outcome is unknown (the connection lost after COMMIT
 *	was sent) it sends no dot and holds a deferral; cut off from the
 *	database longer than store.lease, it loses the lease, and the node
 *	that takes the message finds the mark (it was committed after all),
 *	takes it for an ambiguous delivery and, by default, finishes it
 *	unconfirmed: a 250 never delivered. store_pg_msg_revive() is that
 *	first node's answer once its held write is refused: since schema
 *	version 2 a mark names the lease that made it (mark_token) and a
 *	verdict under another lease that cleared it keeps that name
 *	(verdict_on; both written by every statement that marks or
 *	finishes a message, PG_MARK_COLS: schema 8 dropped the trigger).
 *
 *	In one transaction, the message's row locked: it is revived only if
 *	the verdict was made on the mark of the caller's lease (verdict_on),
 *	the message is finished and has not been dropped, its key not
 *	forgotten (its application may have sent it again), its data length
 *	is the caller's, and every recipient is in the caller's state or
 *	unconfirmed (the verdict's): one sent or bounced since, or in
 *	another number, refuses it. Those the verdict made unconfirmed get
 *	the caller's state and reply back; the message is queued, due now,
 *	for any node (no lease), with the caller's attempts, its story open
 *	again (finished and expires 0), and its data written back from the
 *	caller's copy if the verdict let it go.
 *
 *	While another node holds it queued with the caller's mark still on
 *	it, its verdict is to come: STORE_ELEASE, to ask again. A second
 *	revive finds verdict_on cleared: nothing to revive. A row another
 *	transaction holds (a COMMIT waiting for the standby holds it for as
 *	long) is waited for REVIVE_LOCK at most, then STORE_EAGAIN, to ask
 *	again: without a lock_timeout the wait ran to PG_RESULT_US, then the
 *	connection was closed, its backend still waiting for the row.
 * DIAGNOSTICS
 *	0 revived, STORE_ELEASE, STORE_ENOTFOUND (nothing to revive, or the
 *	message is gone), or a STORE_E* code of the database.
 */
#include <stdlib.h>
#include <string.h>

#include "../../util/buf.h"
#include "../../util/clock.h"
#include "../../util/log.h"
#include "store_pg_int.h"

#define REVIVE_LOCK	"'2s'"		/* the longest wait for the message's row */

/*
 * the message's row, locked, and whether its verdict may be undone for
 * the caller's mark ($2) and data ($3): 0; 1 not yet (another node holds
 * it queued on that mark: its verdict is to come); 2 no (queued, marked,
 * dropped, its key forgotten, the verdict on another mark, other data).
 * Then whether the verdict let its data go.
 */
static const char SQL_ROW[] =
	"SELECT CASE WHEN m.queued AND m.inflight AND m.mark_token = $2 THEN 1 "
	"WHEN m.queued OR m.inflight OR m.dropped OR m.forgotten <> 0 OR m.verdict_on "
	"IS DISTINCT FROM $2 OR m.data_len <> $3 THEN 2 ELSE 0 END, m.data IS NULL "
	"FROM messages m WHERE m.qid = $1 FOR UPDATE";

/*
 * its recipients, read once the row is locked, in a statement of its
 * own: READ COMMITTED gives it a snapshot taken after the lock, so it
 * sees what a verdict whose commit the lock waited for wrote. Read in
 * the statement that waits (a join, 3de552f), they were as before that
 * verdict, where the row was as after it. FOR UPDATE OF their rows too
 * would read them new, but writes a lock into each one and takes them
 * in an order each writer of recipients would have to share.
 */
static const char SQL_RCPTS[] =
	"SELECT r.idx, r.state FROM rcpts r WHERE r.qid = $1 ORDER BY r.idx";

/*
 * the message queued again, no lease: any node takes it when due; with
 * it (rs) the recipients that rcpts_back() found get the caller's state;
 * its data the caller's ($9) if the verdict let it go, else NULL
 */
static const char SQL_QUEUE[] = "WITH rs AS (UPDATE rcpts r SET state = v.state, "
	"reply = v.reply FROM unnest($4::int4[], $5::int4[], $6::text[]) AS v(idx, state, reply) "
	"WHERE r.qid = $1 AND r.idx = v.idx) UPDATE messages SET queued = true, verdict_on = NULL, "
	"next_attempt = $7, attempts = $8, updated = $7, finished = 0, expires = 0, "
	"lease_owner = NULL, data = coalesce($9, data) WHERE qid = $1";

/*
 * row_verdict - lock the message's row (SQL_ROW, p its $1 to $3): may its
 * verdict be undone? 0, STORE_ELEASE (not yet), STORE_ENOTFOUND; and in
 * *data_gone whether the verdict let its data go
 */
static int row_verdict(struct pg_store *st, PGconn *c, struct pg_params *p, int *data_gone)
{
	PGresult *r;
	int64_t v;
	int err;

	if ((err = store_pg_exec(st, c, SQL_ROW, p, &r, "revive")) != 0)
		return err;
	v = PQntuples(r) == 1 ? store_pg_int(r, 0, 0) : 2;	/* no row: nothing to revive */
	*data_gone = v == 0 && store_pg_int(r, 0, 1);
	PQclear(r);
	return v == 0 ? 0 : v == 1 ? STORE_ELEASE : STORE_ENOTFOUND;
}

/*
 * rcpts_back - the recipients to give m's state back (those the verdict
 * made unconfirmed) as three arrays, from SQL_RCPTS' rows; STORE_ENOTFOUND
 * if they are not m's, one ended some other way since, or none is left
 * to deliver
 */
static int rcpts_back(const PGresult *r, const struct store_msg *m, struct pg_arr *idx,
		      struct pg_arr *state, struct pg_arr *reply)
{
	int i, pending = 0;
	enum store_rcpt_state was;

	if (PQntuples(r) != (int) m->n_rcpts)
		return STORE_ENOTFOUND;
	for (i = 0; i < PQntuples(r); i++) {
		if (store_pg_int(r, i, 0) != i)
			return STORE_ENOTFOUND;
		was = (enum store_rcpt_state) store_pg_int(r, i, 1);
		if (m->rcpts[i].state == STORE_RCPT_QUEUED)
			pending = 1;
		if (was == m->rcpts[i].state)
			continue;
		if (was != STORE_RCPT_UNCONFIRMED)
			return STORE_ENOTFOUND;	/* delivered or bounced since */
		store_pg_a_i32(idx, i);
		store_pg_a_i32(state, (int32_t) m->rcpts[i].state);
		store_pg_a_text(reply, m->rcpts[i].reply);
	}
	return pending ? 0 : STORE_ENOTFOUND;
}

/* revive_in - the checks and writes, in the transaction open on c */
static int revive_in(struct pg_store *st, PGconn *c, const struct store_msg *m)
{
	struct pg_arr idx, state, reply;
	struct pg_params p;
	PGresult *r = NULL;
	int err, data_gone = 0;

	store_pg_params_init(&p);
	store_pg_p_text(&p, m->qid);
	store_pg_p_i64(&p, m->lease);
	store_pg_p_i64(&p, (int64_t) m->data_len);
	store_pg_arr_init(&idx, PG_OID_INT4);
	store_pg_arr_init(&state, PG_OID_INT4);
	store_pg_arr_init(&reply, PG_OID_TEXT);
	if ((err = row_verdict(st, c, &p, &data_gone)) == 0
	    && (err = store_pg_exec(st, c, SQL_RCPTS, &p, &r, "revive")) == 0)
		err = rcpts_back(r, m, &idx, &state, &reply);
	PQclear(r);
	store_pg_p_arr(&p, &idx);	/* $4, $5, $6 after the row's */
	store_pg_p_arr(&p, &state);
	store_pg_p_arr(&p, &reply);
	store_pg_p_i64(&p, clock_us());
	store_pg_p_i32(&p, m->attempts);
	store_pg_p_bytes(&p, !data_gone ? NULL : m->data ? m->data : "", m->data_len);
	if (err == 0 && (err = store_pg_exec(st, c, SQL_QUEUE, &p, &r, "revive")) == 0)
		PQclear(r);
	store_pg_params_free(&p);
	return err;
}

/* store_pg_msg_revive - undo another node's verdict on this node's mark (see the header) */
int store_pg_msg_revive(struct store *base, const struct store_msg *m)
{
	struct pg_store *st = (struct pg_store *) base;
	PGconn *c;
	int err;

	if (st->node == NULL || m->lease == 0 || !store_msg_valid(m))
		return STORE_ENOTFOUND;
	store_pg_keep_forget(st, m->qid);
	if ((err = store_pg_take(st, &c)) != 0)
		return err;
	if ((err = store_pg_simple(st, c, "BEGIN; SET LOCAL lock_timeout = " REVIVE_LOCK,
				   "revive")) == 0)
		err = revive_in(st, c, m);
	/* a COMMIT whose outcome is unknown: asked again, verdict_on says if it took */
	err = store_pg_end(st, c, err, NULL, "revive");
	store_pg_give_sized(st, c, m->data_len);
	return err;
}
