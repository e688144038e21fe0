/*
 * NAME
 *	store_pg_decide 3
 * SUMMARY
 *	a COMMIT's outcome decided without its answer: a delivery's waited for, replays read back
 * SYNOPSIS
 *	#include "store/pg/store_pg_int.h"
 * DESCRIPTION
 *	A batch whose COMMIT got no answer is resolved by store_pg_wait.c,
 *	which reads its transaction's status and voids what may still
 *	commit. Two kinds of batch are decided here instead: one that put
 *	no message, whose replays' marks are read back, and a delivery's,
 *	which is never voided.
 *
 *	Replays only. A batch that wrote nothing but replayed claims of
 *	another node's acceptance wrote their marks (store_pg_claim.c): with
 *	its outcome unknown, the marks are read back, and if every one is
 *	there (this batch's, or another node's: either way the messages are
 *	delivered) its duplicates are answered 250 as the marks say; else
 *	451. They are read under the batch's key locks, waited for at most
 *	PG_VOID_LOCK: its backend holds them until its COMMIT ends, so a
 *	COMMIT still running (a slow flush, a deferred trigger, a lock) is
 *	waited for, where a read at once took a mark not visible yet for
 *	one not committed. A mark that could not be read (the database
 *	away, or the locks not had in time: a COMMIT still waiting, for the
 *	standby say) may stand all the same, so that a message none of
 *	whose submissions got 250 is delivered.
 *
 *	A delivery's puts. A bounce's non-delivery notice is put in one
 *	transaction with the bounce's outcome (deliver_record.c), marked so
 *	(store_msg.notice). No client was answered 451 for it: voided, it
 *	was dropped by the settle once the COMMIT went through, the outcome
 *	bounced and its notice lost. So a batch that put a notice
 *	(pg_txn.notice) is neither voided nor kept: still in progress, or
 *	its outcome not readable, its decision is waited for
 *	(store_pg_delivery_decided()). The transaction holds the
 *	rows it updated until it ends: they are looked at every PG_SLICE_MS,
 *	locked without a wait, and once free the notice's row tells,
 *	committed (0) or not (STORE_EAGAIN: the delivery writes its
 *	recipients deferred, to be bounced again with a new notice; their
 *	leases renewed while the rows were locked, so that no take finds one
 *	run out first). Left to PostgreSQL, the leases given up (84cce52), a
 *	COMMIT that failed later left the inflight mark of the bounced
 *	message's dot, read by the next take as an ambiguous delivery:
 *	delivered-unconfirmed, no notice. A backend still waiting for the
 *	node in the transaction after PG_LOOK_US (its COMMIT never came: its
 *	connection cut before that, or the pipeline's rest lost on the way)
 *	is ended, which aborts it: decided, and read as above. The
 *	transaction's BEGIN and COMMIT go in one pipeline with no sync
 *	between, so such a backend is never idle in it as PostgreSQL counts
 *	it: having got part of the pipeline it waits for the rest ('active',
 *	wait event ClientRead, as an idle one does), and only a look for an
 *	idle one left it holding the rows until TCP keepalive ended it. Only
 *	the transaction of the id read for the batch is ended (a pooler may
 *	have given that backend to another client), and never one that runs
 *	a statement: ended in its COMMIT past the point where it can abort,
 *	PostgreSQL cancels its wait for the standby and the commit shows on
 *	the primary before the standby has it, and one look at the backend
 *	cannot tell a COMMIT that waits for the standby (one still flushing
 *	its record, or about to wait). A COMMIT that runs is waited for: one
 *	that waits for a lock held by a transaction that waits for the
 *	standby (a renewal of the message's lease, committed as the standby
 *	went away) is logged, decided once the standby answers. A COMMIT
 *	that waits for the standby itself has its commit record written: on
 *	this server it can only commit. That one, one whose rows cannot be
 *	read because PostgreSQL stays away longer than a statement's limit
 *	(tried once more at that limit, whatever the reconnect backoff: its
 *	doubling may put the node's next try past the limit, and an outage
 *	over before it was then found only after it, the decision left to
 *	PostgreSQL, and an aborted COMMIT's inflight mark left without a
 *	notice), one not decided once half store.lease less that limit
 *	has gone by since it was sent (the leases of the rows it holds locked
 *	are not renewed, and past them another node may take the messages;
 *	PostgreSQL away then is tried once more too, since at the defaults
 *	this cap comes before the limit; but while the rows are held, never
 *	before its backend was looked at once and two looks more could see
 *	its end, PG_LOOK_US and two PG_SLICE_MS: at a store.lease under
 *	about 22 s the cap came first, and a backend waiting for the rest of
 *	the pipeline was left to keepalive, the inflight mark then read
 *	without a notice), and one not decided when the
 *	delivery stops (its thread's stop descriptor, deadline_stop_fd(), as
 *	a connect's wait watches it: the daemon's exit waited for the cap),
 *	are left to PostgreSQL (undecided()): the node
 *	forgets the leases of the messages it wrote and returns
 *	STORE_ELEASE, so that the deferral the
 *	delivery then writes is refused, where it could land once the COMMIT
 *	had gone through and queue a bounced recipient again, to be bounced
 *	with a second notice; the next take reads what PostgreSQL decided.
 *	One of those that did not go through after all (unreachable past the
 *	limit and lost on the way; a failover to a standby without it)
 *	leaves the inflight mark, read as after a crash. A backend waiting
 *	for the rest of the pipeline that is not ended here (PostgreSQL away
 *	from the node, or a stop first) holds the rows until TCP keepalive
 *	ends it: PostgreSQL's idle_in_transaction_session_timeout
 *	(store_pg.c) does not count it idle.
 * DIAGNOSTICS
 *	store_pg_delivery_decided() returns 0 (committed), STORE_EAGAIN (not
 *	committed) or STORE_ELEASE (left to PostgreSQL); store_pg_replays_read_back()
 *	0 (every mark there) or STORE_EAGAIN.
 */
#include <poll.h>
#include <stdint.h>

#include "../../util/clock.h"
#include "../../util/deadline.h"
#include "../../util/log.h"
#include "store_pg_int.h"

/*
 * A delivery's rows (see the header): those its transaction no longer
 * holds, locked without a wait, and their leases, still this node's,
 * renewed; how many were free, of how many asked
 */
static const char SQL_ENDED[] =
	"WITH ended AS (SELECT qid FROM messages WHERE qid = ANY($1::text[]) FOR UPDATE SKIP LOCKED), "
	"u AS (UPDATE messages m SET lease_until = " PG_DB_NOW " + $2 FROM ended e "
	"WHERE m.qid = e.qid AND m.lease_owner = $3 AND " PG_ROW_QUEUED("m.") ") "
	"SELECT (SELECT count(*) FROM ended), cardinality($1::text[])";

/*
 * A delivery's backend: does it wait for the standby, or behind one that
 * does (a lock its transaction waits for)? If it waits for the node in
 * the delivery's transaction ($3: the id's low bits), idle in it or for
 * the rest of its pipeline (ClientRead, either way), its COMMIT never
 * came, it is ended; never one that runs a statement, its COMMIT
 * perhaps, which, ended, could skip the standby (see the header).
 */
static const char SQL_END_STUCK[] =
	"SELECT w.waits, w.behind, CASE WHEN a.wait_event = 'ClientRead' "
	"AND a.backend_xid::text::int8 = $3 THEN pg_terminate_backend(a.pid) END, a.pid "
	"FROM pg_stat_activity a, LATERAL (SELECT coalesce(a.wait_event = 'SyncRep', false) AS "
	"waits, EXISTS (SELECT 1 FROM pg_stat_activity b WHERE b.pid = ANY "
	"(pg_blocking_pids(a.pid)) AND b.wait_event = 'SyncRep') AS behind) w WHERE " PG_BACKEND_IS("a");

/*
 * undecided - t put a delivery's messages and its outcome could not be
 * learnt (see the header), why: nothing voided, the leases of the
 * messages it wrote forgotten; STORE_ELEASE
 */
static int undecided(struct pg_txn *t, const char *why)
{
	const struct pg_seg *s;
	size_t i, j;

	for (i = 0; i < t->n_segs; i++)
		for (s = &t->segs[i], j = 0; s->kind == PG_SEG_UPDATES && j < s->n; j++)
			store_pg_lease_del(t->st, s->qids[j], 0);
	msg_warn("store: a delivery's commit %s: its %zu message%s (%s%s) not voided, the leases "
		 "of those it wrote given up: the next take reads what PostgreSQL decided", why,
		 t->n_put, t->n_put == 1 ? "" : "s", t->put_qids[0], t->n_put > 1 ? ", ..." : "");
	return STORE_ELEASE;
}

/* updated_param - the QIDs t updated as $1 of p */
static void updated_param(const struct pg_txn *t, struct pg_params *p)
{
	const struct pg_seg *s;
	struct pg_arr a;
	size_t i, j;

	store_pg_arr_init(&a, PG_OID_TEXT);
	for (i = 0; i < t->n_segs; i++)
		for (s = &t->segs[i], j = 0; s->kind == PG_SEG_UPDATES && j < s->n; j++)
			store_pg_a_text(&a, s->qids[j]);
	store_pg_params_init(p);
	store_pg_p_arr(p, &a);
}

/*
 * ended - is t's transaction over: are the rows it updated, which it
 * holds locked until it ends, free? Those still this node's get their
 * leases renewed while locked, so that no take finds one run out before
 * the delivery writes its deferral. 1 yes, 0 not yet, -1 not known.
 */
static int ended(struct pg_txn *t)
{
	struct pg_params p;
	PGresult *r;
	int rc = -1;

	updated_param(t, &p);
	store_pg_p_i64(&p, t->st->lease_us);
	store_pg_p_text(&p, t->st->node ? t->st->node : "");
	if (store_pg_side_run(t->st, 1, SQL_ENDED, &p, &r, "delivery's commit ended") == 0) {
		rc = store_pg_int(r, 0, 0) == store_pg_int(r, 0, 1);
		PQclear(r);
	}
	store_pg_params_free(&p);
	return rc;
}

/*
 * end_stuck - t's backend ended if it is idle in t's transaction (see
 * the header): 1 it waits for the standby, 2 behind one, else 0
 */
static int end_stuck(struct pg_txn *t)
{
	struct pg_params p;
	PGresult *r;
	int rc = 0;

	if (store_pg_backend_param(t->c, &p) == 0) {
		store_pg_p_i64(&p, t->xid ? t->xid & 0xffffffffLL : -1);
		if (store_pg_side_run(t->st, 0, SQL_END_STUCK, &p, &r, "delivery's backend") == 0) {
			if (PQntuples(r) == 1)
				rc = store_pg_int(r, 0, 0) ? 1 : store_pg_int(r, 0, 1) ? 2 : 0;
			if (PQntuples(r) == 1 && !PQgetisnull(r, 0, 2))
				msg_warn("store: a delivery's COMMIT never reached its backend, "
					 "waiting in its transaction: the backend (pid %d) ended",
					 (int) store_pg_int(r, 0, 3));
			PQclear(r);
		}
	}
	store_pg_params_free(&p);
	return rc;
}

/*
 * stopped - has this thread's stop come (deadline_stop_fd(): a delivery
 * thread's), waited for at most PG_SLICE_MS? Without one, a pause.
 */
static int stopped(void)
{
	struct pollfd p = { .fd = deadline_stop_fd(), .events = POLLIN };

	return poll(&p, 1, PG_SLICE_MS) > 0 && (p.revents & POLLIN);
}

/*
 * store_pg_delivery_decided - t put a delivery's messages and its COMMIT's outcome is not
 * known: PostgreSQL's decision waited for (see the header), until half
 * store.lease less a statement's limit has gone by (the hold, at most
 * that limit, came before this; while the rows are held, no sooner than
 * its backend was looked at and its end could be seen), or
 * PostgreSQL has been away for that limit, whichever comes first; away
 * then, it is tried once more; or until this thread's stop. 0
 * committed, STORE_EAGAIN not; STORE_ELEASE left undecided.
 */
int store_pg_delivery_decided(struct pg_txn *t)
{
	int64_t start = clock_mono_us(), now, away = 0, end;
	int64_t cap = start + t->st->lease_us / 2 - store_pg_result_limit();
	int64_t held = start + PG_LOOK_US + 2 * PG_SLICE_MS * 1000LL;
	int over, waits = 0, behind = 0, last = 0, rc;

	msg_warn("store: a delivery's commit (%s%s) has no outcome yet: waiting for PostgreSQL's",
		 t->put_qids[0], t->n_put > 1 ? ", ..." : "");
	for (;;) {
		if ((over = ended(t)) == 1 && (rc = store_pg_read_back(t)) != PG_NOT_KNOWN)
			return rc;
		now = clock_mono_us();
		if (over == 0 && cap < held)
			cap = held;	/* the rows held: its backend looked at once, and its end */
		away = over >= 0 ? 0 : away ? away : now;
		if (!away)
			last = 0;
		/* the end: the cap, or a statement's limit of PostgreSQL away if that comes first */
		end = away && away + store_pg_result_limit() < cap ? away + store_pg_result_limit() : cap;
		if (now >= end) {
			if (!away || last++)
				break;
			pthread_mutex_lock(&t->st->mu);	/* away at the end: one more try now, */
			t->st->next_try = 0;		/* whatever the backoff */
			pthread_mutex_unlock(&t->st->mu);
			continue;
		}
		if (over == 0 && now - start >= PG_LOOK_US && (waits = end_stuck(t)) == 1)
			break;
		if (waits == 2 && !behind++)
			msg_warn("store: a delivery's commit (%s) waits behind one that waits for the "
				 "synchronous standby: PostgreSQL decides it once the standby answers",
				 t->put_qids[0]);
		if (stopped())
			return undecided(t, "is not decided at stop");
	}
	return undecided(t, waits == 1 ? "is written and waits for the synchronous standby"
			 : "is still in progress or cannot be read");
}

/* a batch's key locks (sorted: the order every batch takes them in), waited for (lock_timeout) */
const char store_pg_sql_key_locks[] =
	"SELECT pg_advisory_xact_lock(k) FROM unnest($1::int8[]) AS k";

/*
 * replays_count - how many of t's replayed QIDs are marked, read on c
 * under t's key locks (waited for at most PG_VOID_LOCK): its backend, if
 * its COMMIT still runs, holds them until that COMMIT ends, so the count
 * is final; -1 not known (the locks did not come, or c failed)
 */
static int64_t replays_count(struct pg_txn *t, PGconn *c)
{
	struct pg_params lp, p;
	struct pg_arr a;
	PGresult *r;
	int64_t n = -1;
	size_t i;
	int err;

	store_pg_arr_init(&a, PG_OID_INT8);
	for (i = 0; i < t->n_locked; i++)
		store_pg_a_i64(&a, t->locked[i]);
	store_pg_params_init(&lp);
	store_pg_p_arr(&lp, &a);
	store_pg_params_init(&p);
	store_pg_p_qids(&p, t->replays, t->n_replays);
	err = store_pg_simple(t->st, c, "BEGIN; SET LOCAL lock_timeout = " PG_VOID_LOCK,
			      "replays read back");
	if (err == 0 && (err = store_pg_exec(t->st, c, store_pg_sql_key_locks, &lp, &r,
					     "replays' key locks")) == 0)
		PQclear(r);
	if (err == 0 && store_pg_exec(t->st, c, "SELECT count(*) FROM unnest($1::text[]) AS q "
				      "WHERE (SELECT replayed FROM messages m WHERE m.qid = q)", &p, &r,
				      "replays read back") == 0) {
		n = store_pg_int(r, 0, 0);
		PQclear(r);
	}
	(void) store_pg_end(t->st, c, err, NULL, "replays read back");	/* it read only */
	store_pg_params_free(&lp);
	store_pg_params_free(&p);
	return n;
}

/*
 * store_pg_replays_read_back - t wrote only marks and its COMMIT got no answer: are
 * the marks of the claims it replayed all there (see the header)? 0 so,
 * else STORE_EAGAIN
 */
int store_pg_replays_read_back(struct pg_txn *t)
{
	PGconn *c;
	int64_t n;

	if (store_pg_take(t->st, &c) != 0)
		return STORE_EAGAIN;
	n = replays_count(t, c);
	store_pg_give(t->st, c);
	msg_warn("store: a commit's outcome was unknown (connection lost): its replays read "
		 "back: %s", n == (int64_t) t->n_replays ? "marked" : n < 0 ? "not known" : "not marked");
	return n == (int64_t) t->n_replays ? 0 : STORE_EAGAIN;
}
