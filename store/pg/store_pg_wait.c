/*
 * NAME
 *	store_pg_wait 3
 * SUMMARY
 *	commits that wait for replication: held, decided by their transaction id, voided, settled
 * SYNOPSIS
 *	#include "store/pg/store_pg_int.h"
 * DESCRIPTION
 *	With a synchronous standby away, PostgreSQL writes a COMMIT on the
 *	primary and then waits for the standby (wait event SyncRep) before
 *	it answers. Such a transaction is not "not committed": it is
 *	still in progress (pg_xact_status() says so, and no other session
 *	sees its rows), and it becomes committed and visible as soon as the
 *	standby answers. Nothing the node does can take it back: cancelling
 *	the wait or ending its backend makes it visible without the standby
 *	("already committed locally"), and closing the connection leaves the
 *	backend waiting. So the node never cancels it, and never reads it
 *	as "not committed" from the absence of its rows.
 *
 *	Hold. A COMMIT without an
 *	answer after a second is looked at (pg_stat_activity, on the node's
 *	anchor connection: a pooled one may all be taken): if its backend
 *	waits for replication, the reply is held for up to store.commit_wait
 *	(default 15 s, well within a client's 10 minutes at the end of
 *	DATA), and the outcome is PostgreSQL's when it comes. The hold ends
 *	at the committing thread's stop as at its limit (deadline_stop_fd():
 *	the writer's at the daemon's SIGTERM, queue/commit.c; a delivery
 *	thread's at deliver_stop()): the daemon's exit waited for it.
 *	Anything else that does not answer is given up after PG_RESULT_US,
 *	as before.
 *	The hold is at most half of store.lease (conf/conf.c): the batch's
 *	messages were put under a lease of the accepting node, taken at
 *	their INSERT, which is still live when they are voided, so that no
 *	other node can have taken one that became visible a moment before.
 *
 *	Void. When the hold runs out, the batch is answered 451 4.3.0, and
 *	to keep that promise (SPEC 4: a refused message is never delivered
 *	unless a later submission of its key is answered 250) its QIDs are
 *	first made void: a row per QID in voids, with the transaction's id,
 *	written in a transaction of its own with synchronous_commit = local,
 *	so that it commits while the standby is away. The transaction was
 *	in progress just before: every snapshot that sees its rows sees the
 *	void too, unless it became visible in the moment between; then its
 *	messages were still under the accepting node's lease (the hold is
 *	at most half of it, see above), which delivers nothing it refused,
 *	so no node took one, and from the void on none will. Aborted
 *	before: 451, nothing to void.
 *
 *	A void QID counts for nothing: the claims lookup of a batch on any
 *	node (store_pg_claim.c) treats a claim of a void QID as absent, so a
 *	retry of the key is a new message (250 with a new QID, or 451 while
 *	the voided transaction still holds the key's lock); the take of due
 *	messages (store_pg_lease.c) skips it, so no node delivers it. A take
 *	racing with the void waits for it, or the void for the take, which
 *	it then sees (a message taken first is not voided); and a take that
 *	began before the void committed and reaches the row after it finds
 *	the row held by the void under its accepting node's lease, tested
 *	again on the row's last version (store_pg_sql_void, for VOID_HOLD:
 *	past the end of any take under way). A void of a message taken for
 *	delivery all the same (a take that outlasted the hold) is one the
 *	settle will delete alone: the claim counts as soon as the take is
 *	seen.
 *
 *	A message whose claim another node replayed (messages.replayed,
 *	store_pg_claim.c) is not voided: a later submission of its key was
 *	answered 250 with it; nor one a node took for delivery since its
 *	acceptance (messages.lease_since: a kept batch's,
 *	store_pg_pend.c); and the settle below, if it finds one so marked
 *	since its void (the transaction became visible in the moment
 *	before the void, or a take raced with a kept batch's void),
 *	deletes the void but leaves the message and its claims, to be
 *	delivered. The settle takes the key locks of the messages it
 *	settles first, each tried, never waited for (a void whose key is
 *	held waits for the next settle): a batch that read such a claim
 *	before the void was seen holds its key's lock until its replay is
 *	committed, maybe as long as its commit waits for the standby.
 *
 *	Settle. Any node, every PG_SETTLE_US from its delivery poller, looks
 *	for voids whose transaction PostgreSQL has decided (not in progress;
 *	NULL when the id is too old to be known, decided long ago), then in
 *	a second statement, whose snapshot so sees the decided rows, deletes
 *	each void with its message (never delivered: it was never taken,
 *	and a message whose lease another node holds is left alone) and the
 *	claims naming it. A dead node's voids are settled by any other node.
 *	Settling also commits with synchronous_commit = local: a standby
 *	that lacks a settling still has its voids, and it is done again.
 *
 *	Kept connections. A connection whose backend waits for replication
 *	is not closed when given up (closing does not end the wait: the
 *	server would keep one backend more per timeout): it stays counted
 *	in the pool (PG_POOL_MAX holds, and a batch that finds no connection
 *	in time gets 451 without having sent COMMIT), and is closed once its
 *	wait has ended. The count of such connections is the gauge of
 *	commits waiting for replication; an episode is logged once when it
 *	starts and once when it ends.
 *
 *	The transaction's id. A batch that reads keys gets it with their
 *	locks (pg_current_xact_id(), store_pg_claim.c), a reply that comes
 *	before COMMIT anyway. One without keys has it read from
 *	pg_stat_activity when the outcome is to be decided: a backend that
 *	waits for replication still shows it; a backend gone, or no longer
 *	in a transaction, is a transaction over, read back by whether its
 *	first message exists. The backend is found there, as for the hold's
 *	look, by the server's pid and backend_start, read when the
 *	connection was opened (store_pg.c): through PgBouncer PQbackendPID()
 *	is PgBouncer's own number, which names no backend, so no wait was
 *	seen and a commit still waiting was read back as not committed (its
 *	451 unvoided, then delivered); and a pid alone may have been reused
 *	by another backend, whose transaction would decide the batch.
 *
 *	An id that reads as committed counts only with the batch's rows read
 *	back: after a failover the status may be read on a promoted standby,
 *	where the id may be another transaction's; without its rows the batch
 *	is answered 451 and voided (which drops its messages if they are
 *	somewhere after all).
 *
 *	A batch that put no message but replayed claims, and a delivery's
 *	batch, are decided otherwise (store_pg_decide.c).
 *
 *	Cut in mid-send. A batch whose connection went after part of its
 *	pipeline reached the server leaves a backend that ran what came and
 *	waits for the rest ('active', ClientRead), holding the key's locks:
 *	the batch is voided or answered 451 as above, and so is a retry of
 *	the key until the server's TCP keepalive ends that backend (store_pg.c's
 *	settings: about 11 s). The node does not end it itself, as it does a
 *	bounce's (store_pg_decide.c): the rest of the pipeline may still be on
 *	the way (a shutdown() sends what was queued; PgBouncer forwards until
 *	it reads the end), and a COMMIT reaching the backend between the look
 *	at pg_stat_activity and the signal would be ended in its wait for the
 *	synchronous standby, committed here but perhaps not there, its status
 *	read committed and the batch answered 250 though a failover could
 *	lose it (review 9 showed it; no statement can end a backend only if
 *	its COMMIT has not come).
 *
 *	Unreachable. When PostgreSQL cannot be reached to read the outcome
 *	or to write the void, the batch is answered 451 all the same, and
 *	its QIDs are kept in the node and settled (voided) before the
 *	node's next use of the database: its take, its renewal, its next
 *	batch, whose begin reads a retry's claims (store_pg_pend.c).
 *
 *	Not covered (store_pg_pend.c says more): a node cut off from
 *	PostgreSQL for longer than store.lease, while the others reach it
 *	or as they come back with it, may be beaten by another node's take,
 *	which looks at the lease's expiry, not at its owner's life; and a
 *	node killed while it keeps such batches forgets them (its next start
 *	gives up its leases): either delivers a message answered 451; as
 *	does a replay's mark that stands though its batch got 451
 *	(store_pg_decide.c).
 *	Delivery writes that ride in a voided or kept batch are only told
 *	it failed.
 * DIAGNOSTICS
 *	store_pg_commit_resolve() returns 0 (committed) or STORE_EAGAIN; a
 *	delivery's batch left to PostgreSQL, STORE_ELEASE.
 */
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../util/buf.h"
#include "../../util/clock.h"
#include "../../util/deadline.h"
#include "../../util/log.h"
#include "store_pg_int.h"

static const char SQL_WAITS[] =
	"SELECT coalesce(wait_event = 'SyncRep', false) FROM pg_stat_activity a WHERE "
	PG_BACKEND_IS("a");

/*
 * the 32-bit backend_xid made whole: the id nearest the snapshot's xmax
 * with those low bits. Not the nearest at or below it: xmax is the last
 * transaction completed plus one, and one still running (a COMMIT that
 * waits for the standby) may have a greater id; taken below, it was an
 * id 2^32 back, which pg_xact_status() does not know, and a commit still
 * waiting was read back as not committed (answered 451, then delivered).
 */
static const char SQL_BACKEND_XID[] =
	"SELECT a.backend_xid IS NOT NULL, s.x + (((coalesce(a.backend_xid::text::int8, 0) - "
	"(s.x & 4294967295) + 2147483648) & 4294967295) - 2147483648) FROM pg_stat_activity a, "
	"(SELECT pg_snapshot_xmax(pg_current_snapshot())::text::int8 AS x) s WHERE " PG_BACKEND_IS("a");


/*
 * How long a void holds its messages under their accepting node's lease
 * (store_pg_sql_void): past the end of any take that began before it, a
 * statement being given up at PG_RESULT_US (10 s), its backend ending
 * within a second once its connection is cut (store_pg.c's
 * client_connection_check_interval). In microseconds, as lease_until.
 */
#define VOID_HOLD	"60000000"

/*
 * xid 0: not known, and the transaction over: the void's own, decided
 * once it commits. A message whose claim another node replayed
 * (store_pg_claim.c), or that a node took for delivery since its
 * acceptance (lease_since: its node was cut off past store.lease,
 * store_pg_pend.c), is not voided: its QIDs are the rows returned. Each
 * message is read FOR SHARE: a take in flight (its row updated, not yet
 * committed) is waited for, and seen; a take that comes meanwhile passes
 * the row by (SKIP LOCKED), and the next sees the void. A take that
 * began before the void committed and reaches the row after it reads
 * voids in its snapshot, so each message voided is held under its
 * accepting node's lease for VOID_HOLD (u): the row updated, READ
 * COMMITTED has that take test the lease again on its last version, and
 * pass it by; a row only share-locked, it took the message. The settle
 * drops the message with its void (the lease is its own node's); one
 * left to be delivered (replayed meanwhile) is taken once the hold ends.
 */
const char store_pg_sql_void[] =
	"WITH r AS (SELECT q, coalesce((SELECT m.replayed OR m.lease_since IS NOT NULL "
	"FROM messages m WHERE m.qid = q FOR SHARE), false) AS kept FROM unnest($1::text[]) AS q), "
	"u AS (UPDATE messages m SET lease_owner = m.node, lease_until = " PG_DB_NOW " + " VOID_HOLD
	" FROM r WHERE m.qid = r.q AND NOT r.kept), "
	"i AS (INSERT INTO voids (qid, xid, node, made) "
	"SELECT q, coalesce(nullif($2::int8, 0)::text::xid8, pg_current_xact_id()), $3, "
	PG_DB_NOW " FROM r WHERE NOT kept ON CONFLICT (qid) DO NOTHING) SELECT q FROM r WHERE kept";


/* with the key of each one's message, if it has one: its lock is taken before the settle */
static const char SQL_DECIDED[] =
	"SELECT v.qid, m.keyhash FROM voids v LEFT JOIN messages m ON m.qid = v.qid AND m.has_key "
	"WHERE pg_xact_status(v.xid) IS DISTINCT FROM 'in progress' LIMIT 1000";

/* the voids of $1 whose message's key lock ($2; NULL: no key) is had: each tried, none waited for */
static const char SQL_TRY_LOCKS[] =
	"SELECT q FROM unnest($1::text[], $2::int8[]) AS u(q, k) "
	"WHERE k IS NULL OR pg_try_advisory_xact_lock(k)";

/*
 * Deletes see one snapshot, taken after SQL_DECIDED saw the transactions
 * end: a void goes with its message (never delivered) and the claims
 * that name it, unless another node holds a live lease on the message;
 * a message replayed, or taken for delivery (a take that raced with a
 * void of store_pg_pend.c), loses its void only. The message's delete
 * decides, and its claims and recipients go only with a message it
 * deleted: it may wait for the row lock of a take that commits
 * meanwhile, and READ COMMITTED then tests its WHERE again on the row
 * that take left (a test on what the snapshot saw deleted a message
 * taken since). Kept: a message seen, not deleted.
 */
static const char SQL_SETTLE[] =
	"WITH d AS (DELETE FROM voids v WHERE v.qid = ANY($1::text[]) AND NOT EXISTS "
	"(SELECT 1 FROM messages m WHERE m.qid = v.qid AND m.lease_owner IS NOT NULL "
	"AND m.lease_owner <> m.node AND m.lease_until >= " PG_DB_NOW ") RETURNING v.qid), "
	"dropped AS (DELETE FROM messages m USING d WHERE m.qid = d.qid AND NOT m.replayed "
	"AND m.lease_since IS NULL RETURNING m.qid, m.keyhash, m.has_key), "
	"gone AS (DELETE FROM claims c USING dropped x WHERE x.has_key AND c.keyhash = x.keyhash "
	"AND c.qid = x.qid RETURNING 1), "
	"dr AS (DELETE FROM rcpts r USING dropped x WHERE r.qid = x.qid) "
	"SELECT d.qid, x.qid IS NOT NULL, (SELECT count(*) FROM gone), x.qid IS NULL AND "
	"EXISTS (SELECT 1 FROM messages m WHERE m.qid = d.qid) FROM d "
	"LEFT JOIN dropped x ON x.qid = d.qid";

/*
 * side_take - a connection beside one that hangs: the anchor (its own
 * connection, free when the pool is all taken: amu held until
 * side_give), else one of the pool, taken without settling the batches
 * kept (store_pg_pend.c): the statement that hangs may be a settling's,
 * whose thread holds pmu
 */
static int side_take(struct pg_store *st, PGconn **c)
{
	if (st->node != NULL) {
		pthread_mutex_lock(&st->amu);
		if (st->anchor && PQstatus(st->anchor) == CONNECTION_OK && !PQisBusy(st->anchor)
		    && PQtransactionStatus(st->anchor) == PQTRANS_IDLE) {
			*c = st->anchor;
			return 0;
		}
		pthread_mutex_unlock(&st->amu);
	}
	return store_pg_take_beside(st, c);	/* never a settling: this may be one's */
}

/* side_give - the connection of side_take back */
static void side_give(struct pg_store *st, PGconn *c)
{
	if (c == st->anchor)
		pthread_mutex_unlock(&st->amu);
	else
		store_pg_give(st, c);
}

/*
 * store_pg_end - commit the transaction open on c if err is 0 (as it
 * began: PG_LOCAL_BEGIN's without waiting for the standby), else roll it
 * back; *r, if r is given, goes if the commit fails
 */
int store_pg_end(struct pg_store *st, PGconn *c, int err, PGresult **r, const char *what)
{
	if (err == 0 && (err = store_pg_simple(st, c, "COMMIT", what)) != 0 && r != NULL) {
		PQclear(*r);
		*r = NULL;
	}
	if (PQstatus(c) == CONNECTION_OK && PQtransactionStatus(c) != PQTRANS_IDLE)
		(void) store_pg_simple(st, c, "ROLLBACK", what);
	return err;
}

/*
 * store_pg_side_run - one statement beside a connection that hangs; local: in a
 * transaction of its own that commits without waiting for the standby
 */
int store_pg_side_run(struct pg_store *st, int local, const char *sql, struct pg_params *p,
		      PGresult **r, const char *what)
{
	PGconn *c;
	int err;

	*r = NULL;
	if ((err = side_take(st, &c)) != 0)
		return err;
	if (local)
		err = store_pg_simple(st, c, PG_LOCAL_BEGIN, what);
	if (err == 0)
		err = store_pg_exec(st, c, sql, p, r, what);
	if (local)
		err = store_pg_end(st, c, err, r, what);
	side_give(st, c);
	return err;
}

/* store_pg_backend_param - c's server backend (PG_BACKEND_IS) as $1, $2; 0, or -1 not known */
int store_pg_backend_param(PGconn *c, struct pg_params *p)
{
	struct pg_conn *n = store_pg_conn(c);

	store_pg_params_init(p);
	if (n == NULL || n->pid == 0)
		return -1;
	store_pg_p_i32(p, n->pid);
	store_pg_p_i64(p, n->started);
	return 0;
}

/* store_pg_repl_check - does c's backend wait for replication? 1 yes, 0 no or not known */
int store_pg_repl_check(struct pg_store *st, PGconn *c)
{
	struct pg_params p;
	PGresult *r;
	int yes = 0;

	if (c == st->anchor || PQstatus(c) != CONNECTION_OK)
		return 0;
	if (store_pg_backend_param(c, &p) == 0
	    && store_pg_side_run(st, 0, SQL_WAITS, &p, &r, "replication wait") == 0) {
		yes = PQntuples(r) == 1 && store_pg_int(r, 0, 0);
		PQclear(r);
	}
	store_pg_params_free(&p);
	return yes;
}

/* store_pg_repl_set - c's backend starts (waits) or stops waiting for replication (mu held) */
void store_pg_repl_set(struct pg_store *st, PGconn *c, int waits)
{
	struct pg_conn *n = store_pg_conn(c);

	if (n == NULL || !!(n->flags & PG_CONN_WAITS) == !!waits)
		return;
	n->flags = waits ? n->flags | PG_CONN_WAITS : n->flags & ~PG_CONN_WAITS;
	if (waits && st->repl_waiting++ == 0) {
		st->repl_waits++;
		st->repl_since = clock_mono_us();
		msg_warn("store: commits wait for replication to the synchronous standby: "
			 "replies are held up to %.0f s, then 451 4.3.0 and the message voided",
			 (double) st->commit_wait_us / 1e6);
	} else if (!waits && --st->repl_waiting == 0) {
		msg_info("store: commits no longer wait for replication, after %.1f s",
			 (double) (clock_mono_us() - st->repl_since) / 1e6);
	}
}

/* store_pg_repl_note - count c as waiting for replication, or no longer */
void store_pg_repl_note(struct pg_store *st, PGconn *c, int waits)
{
	pthread_mutex_lock(&st->mu);
	store_pg_repl_set(st, c, waits);
	pthread_mutex_unlock(&st->mu);
}

/* wait_over - has a kept connection's wait ended: its results to the end came, or it failed */
static int wait_over(PGconn *c)
{
	PGresult *r;
	int nulls = 0, pipe = PQpipelineStatus(c) != PQ_PIPELINE_OFF;

	if (PQconsumeInput(c) != 1 || PQstatus(c) != CONNECTION_OK)
		return 1;
	while (!PQisBusy(c)) {
		if ((r = PQgetResult(c)) == NULL) {
			if (!pipe || ++nulls > 2)
				return 1;
			continue;
		}
		nulls = 0;
		if (PQresultStatus(r) == PGRES_PIPELINE_SYNC) {
			PQclear(r);
			return 1;
		}
		PQclear(r);
	}
	return 0;
}

/* store_pg_reap - close the kept connections whose wait ended (mu held) */
void store_pg_reap(struct pg_store *st)
{
	size_t i = 0;
	PGconn *c;

	while (i < st->n_kept) {
		c = st->kept[i];
		if (!wait_over(c)) {
			i++;
			continue;
		}
		store_pg_repl_set(st, c, 0);
		PQfinish(c);
		st->n_open--;
		st->kept[i] = st->kept[--st->n_kept];
		pthread_cond_signal(&st->freed);
	}
}

/*
 * store_pg_commit_hold - wait for the answer to t's COMMIT: up to
 * PG_RESULT_US, or store.commit_wait while its backend waits for
 * replication, that hold ending at this thread's stop too (its stop
 * descriptor, deadline_stop_fd(): the writer's at the daemon's SIGTERM,
 * a delivery thread's at deliver_stop()), as at its limit. 0 the answer
 * can be read; -1 not: the connection is kept (it waits for
 * replication) or cut, or failed.
 */
int store_pg_commit_hold(struct pg_txn *t)
{
	struct pg_store *st = t->st;
	PGconn *c = t->c;
	int64_t start = clock_mono_us(), now, limit = store_pg_result_limit(), looked = 0;
	struct pg_conn *n;
	int waits = 0, stop = 0;
	struct pollfd p[2] = { { .events = POLLIN }, { .fd = deadline_stop_fd(), .events = POLLIN } };

	while (PQisBusy(c)) {
		now = clock_mono_us();
		if (!waits && now - start >= PG_LOOK_US && now - looked >= PG_LOOK_US) {
			looked = now;
			if ((waits = store_pg_repl_check(st, c)) != 0) {
				store_pg_repl_note(st, c, 1);
				limit = st->commit_wait_us;
			}
		}
		if (now - start >= limit || stop) {
			if (waits && (n = store_pg_conn(c)) != NULL)
				n->flags |= PG_CONN_KEPT;
			else if (!waits)
				store_pg_cut(c, "to a COMMIT", limit);
			return -1;
		}
		p[0].fd = PQsocket(c);
		p[0].revents = p[1].revents = 0;
		/* the stop once the COMMIT is seen to wait for the standby: it stays readable */
		(void) poll(p, waits ? 2 : 1, PG_SLICE_MS);
		stop = (p[1].revents & POLLIN) != 0;
		if (PQconsumeInput(c) != 1)
			break;		/* failed: PQgetResult says so */
	}
	if (waits)
		store_pg_repl_note(st, c, 0);
	return PQstatus(c) == CONNECTION_OK ? 0 : -1;
}

/*
 * store_pg_xact - pg_xact_status() of xid, read on c (NULL: beside,
 * store_pg_side_run()): XACT_UNKNOWN too for an id not known (0, nothing
 * read), too old to be known or in the future (SQLSTATE 22023,
 * STORE_EINVAL: a server another since); -1 the read failed otherwise (a
 * statement timeout, a cancel, a recovery conflict)
 */
int store_pg_xact(struct pg_store *st, PGconn *c, int64_t xid)
{
	static const char sql[] = "SELECT pg_xact_status($1::int8::text::xid8)";
	struct pg_params p;
	const char *v;
	PGresult *r;
	int err;

	if (xid == 0)
		return XACT_UNKNOWN;
	store_pg_params_init(&p);
	store_pg_p_i64(&p, xid);
	err = c ? store_pg_exec(st, c, sql, &p, &r, "transaction status")
	    : store_pg_side_run(st, 0, sql, &p, &r, "transaction status");
	store_pg_params_free(&p);
	if (err != 0)
		return err == STORE_EINVAL ? XACT_UNKNOWN : -1;
	v = PQntuples(r) == 1 && !PQgetisnull(r, 0, 0) ? PQgetvalue(r, 0, 0) : "";
	err = strcmp(v, "committed") == 0 ? XACT_COMMITTED : strcmp(v, "aborted") == 0
	    ? XACT_ABORTED : strcmp(v, "in progress") == 0 ? XACT_RUNNING : XACT_UNKNOWN;
	PQclear(r);
	return err;
}

/*
 * store_pg_backend_xid - the id of the transaction the backend (pid,
 * started) runs (SQL_BACKEND_XID), read on c (NULL: beside), up to tries
 * times 0.1 s apart while it has none yet: 1 found, 0 the backend is gone
 * or runs none (its transaction is over: its rows tell), -1 the read failed
 */
int store_pg_backend_xid(struct pg_store *st, PGconn *c, int pid, int64_t started, int tries,
			 int64_t *xid)
{
	struct pg_params p;
	PGresult *r;
	int i, found = -1;

	store_pg_params_init(&p);
	store_pg_p_i32(&p, pid);
	store_pg_p_i64(&p, started);
	for (i = 0; i < tries && found < 0; i++) {
		if (i)
			usleep(100000);
		if ((c ? store_pg_exec(st, c, SQL_BACKEND_XID, &p, &r, "backend transaction")
		     : store_pg_side_run(st, 0, SQL_BACKEND_XID, &p, &r, "backend transaction")) != 0)
			break;
		if (PQntuples(r) == 0)
			found = 0;
		else if (store_pg_int(r, 0, 0)) {
			*xid = store_pg_int(r, 0, 1);
			found = 1;
		}
		PQclear(r);
	}
	store_pg_params_free(&p);
	return found < 0 && i == tries ? 0 : found;
}

/* void_batch - the batch's QIDs made void, in a commit that does not wait for the standby */
static int void_batch(struct pg_txn *t)
{
	struct pg_params p;
	PGresult *r;
	int err;

	store_pg_params_init(&p);
	store_pg_p_qids(&p, t->put_qids, t->n_put);
	store_pg_p_i64(&p, t->xid);
	store_pg_p_text(&p, t->st->node ? t->st->node : "");
	err = store_pg_side_run(t->st, 1, store_pg_sql_void, &p, &r, "void");
	store_pg_params_free(&p);
	PQclear(r);
	return err;
}

/*
 * not_known - store_pg_read_back()'s rc; PG_NOT_KNOWN keeps the batch to
 * settle, or a delivery's is waited for (store_pg_decide.c)
 */
static int not_known(struct pg_txn *t, int rc)
{
	if (rc != PG_NOT_KNOWN)
		return rc;
	if (t->notice)
		return store_pg_delivery_decided(t);
	store_pg_pend_add(t, 0);
	return STORE_EAGAIN;
}

/* voided_warn - why t's messages are answered 451 and voided, and what then */
static void voided_warn(const struct pg_txn *t, const char *why, const char *then)
{
	msg_warn("store: %s: its %zu message%s answered 451 and voided (%s%s)%s", why, t->n_put,
		 t->n_put == 1 ? "" : "s", t->put_qids[0], t->n_put > 1 ? ", ..." : "", then);
}

/*
 * store_pg_commit_resolve - t's COMMIT got no answer: 0 committed (the
 * batch is answered 250), STORE_EAGAIN not, or voided, or kept to be
 * settled; a delivery's is waited for (STORE_ELEASE: left undecided, see
 * store_pg_decide.c); store_pg_read_back() reads a committed batch's leases, or
 * whether a transaction over (its backend gone) committed
 */
int store_pg_commit_resolve(struct pg_txn *t)
{
	struct pg_store *st = t->st;
	struct pg_conn *n = store_pg_conn(t->c);
	int x;

	if (t->n_put == 0)	/* nothing put: the marks tell, if it wrote nothing else */
		return t->n_replays > 0 && t->n_segs == 0 ? store_pg_replays_read_back(t) : STORE_EAGAIN;
	/* a batch that read no key: its id was not read with their locks */
	if (t->xid == 0 && (n == NULL || n->pid == 0
			    || store_pg_backend_xid(st, NULL, n->pid, n->started, 20, &t->xid) <= 0))
		return not_known(t, store_pg_read_back(t));	/* over: its rows tell, or not known */
	if ((x = store_pg_xact(st, NULL, t->xid)) < 0)
		x = XACT_UNKNOWN;	/* the read failed: its rows tell */
	/*
	 * Committed, and its rows are there (their leases read): a status read
	 * on another server than the one the COMMIT went to (a standby promoted
	 * meanwhile, where the id may be another transaction's) says nothing of
	 * ours, so a committed id whose rows cannot be read is not a 250: it is
	 * voided, which drops its messages if they are somewhere after all.
	 */
	if (x == XACT_COMMITTED && store_pg_read_back(t) == 0)
		return 0;
	if (x == XACT_ABORTED)
		return STORE_EAGAIN;
	if (x == XACT_UNKNOWN)
		return not_known(t, store_pg_read_back(t));
	if (t->notice)		/* still in progress, or committed where it cannot be read */
		return store_pg_delivery_decided(t);
	if (x == XACT_COMMITTED)
		voided_warn(t, "a commit reads as committed, but its messages cannot be read back", "");
	if (void_batch(t) != 0) {
		store_pg_pend_add(t, 1);	/* voided once the database answers */
		return STORE_EAGAIN;
	}
	pthread_mutex_lock(&st->mu);
	st->voided++;
	pthread_mutex_unlock(&st->mu);
	if (x == XACT_RUNNING)
		voided_warn(t, "a commit is still in progress", ", settled once PostgreSQL decides");
	return STORE_EAGAIN;
}

/*
 * settle_locks - the decided voids of r (SQL_DECIDED) as $1 of lp, and
 * their messages' key locks as its $2 (NULL: no key); how many have one
 */
static int settle_locks(const PGresult *r, struct pg_params *lp)
{
	uint8_t kh[STORE_HASH_LEN];
	struct pg_arr q, k;
	int row, n = 0;

	store_pg_arr_init(&q, PG_OID_TEXT);
	store_pg_arr_init(&k, PG_OID_INT8);
	for (row = 0; row < PQntuples(r); row++) {
		store_pg_a_text(&q, PQgetvalue(r, row, 0));
		if (!PQgetisnull(r, row, 1) && store_pg_copy(r, row, 1, kh, STORE_HASH_LEN) == 0) {
			store_pg_a_i64(&k, store_pg_key_lock(kh));
			n++;
		} else {
			store_pg_a_bytes(&k, NULL, 0);
		}
	}
	store_pg_params_init(lp);
	store_pg_p_arr(lp, &q);
	store_pg_p_arr(lp, &k);
	return n;
}

/* settle_qids - the QIDs of q's rows (column 0) as $1 of p; how many */
static int settle_qids(const PGresult *q, struct pg_params *p)
{
	struct pg_arr a;
	int row;

	store_pg_arr_init(&a, PG_OID_TEXT);
	for (row = 0; row < PQntuples(q); row++)
		store_pg_a_text(&a, PQgetvalue(q, row, 0));
	store_pg_p_arr(p, &a);
	return PQntuples(q);
}

/*
 * settle_run - SQL_SETTLE beside, in a transaction of its own that does
 * not wait for the standby, for the decided voids of d whose messages'
 * key locks it has (tried, never waited for: the rest wait for the next
 * settle, so a batch that holds a key for as long as its commit waits
 * for the standby delays neither the others nor the anchor): a batch of
 * another node that read a claim of one before its void was seen, and
 * replays it, has committed its record first (store_pg_claim.c), and
 * the message stays
 */
static int settle_run(struct pg_store *st, const PGresult *d, PGresult **r)
{
	struct pg_params lp, p;
	PGresult *lr = NULL;
	PGconn *c;
	int err, keys;

	*r = NULL;
	if ((err = side_take(st, &c)) != 0)
		return err;
	keys = settle_locks(d, &lp);
	store_pg_params_init(&p);
	err = store_pg_simple(st, c, PG_LOCAL_BEGIN, "voids settled");
	if (err == 0 && keys > 0)	/* else every one settles: no lock to try */
		err = store_pg_exec(st, c, SQL_TRY_LOCKS, &lp, &lr, "voids' key locks");
	if (err == 0 && settle_qids(keys > 0 ? lr : d, &p) > 0)
		err = store_pg_exec(st, c, SQL_SETTLE, &p, r, "voids settled");
	PQclear(lr);
	err = store_pg_end(st, c, err, r, "voids settled");
	side_give(st, c);
	store_pg_params_free(&p);
	store_pg_params_free(&lp);
	return err;
}

/*
 * store_pg_voids_settle - at most every PG_SETTLE_US: drop the messages
 * and claims of voids whose transaction is over (see the header)
 */
void store_pg_voids_settle(struct pg_store *st)
{
	PGresult *d, *r;
	int64_t now = clock_mono_us();
	int i;

	pthread_mutex_lock(&st->mu);
	if (now < st->settle_at) {
		pthread_mutex_unlock(&st->mu);
		return;
	}
	st->settle_at = now + PG_SETTLE_US;
	pthread_mutex_unlock(&st->mu);
	if (store_pg_run(st, SQL_DECIDED, NULL, &d, "voids") != 0)
		return;
	if (PQntuples(d) > 0 && settle_run(st, d, &r) == 0) {
		for (i = 0; i < PQntuples(r); i++)
			msg_info("%s: status=voided (refused with 451 while its commit waited; %s)",
				 PQgetvalue(r, i, 0), store_pg_int(r, i, 3)
				 ? "committed, and taken for delivery or its key answered 250 with it "
				 "by another node meanwhile: left to be delivered" : store_pg_int(r, i, 1)
				 ? "committed later: dropped, never delivered" : "never committed");
		PQclear(r);
	}
	PQclear(d);
}
