/*
 * NAME
 *	store_pg_pend 3
 * SUMMARY
 *	batches answered 451 while PostgreSQL could not be reached to read their commit: settled first
 * SYNOPSIS
 *	#include "store/pg/store_pg_int.h"
 * DESCRIPTION
 *	When the COMMIT's answer is lost and PostgreSQL cannot be
 *	reached to read the outcome or to write the void, the batch is
 *	answered 451 all the same, and its QIDs, with the transaction's
 *	id when known and its backend (pid, start), are kept in the node
 *	(store_pg_pend_add(): struct pg_pend, logged). Its commit may
 *	have committed: the rows then carry the lease its INSERT took,
 *	this node's, which no renewal extends (the node counts only
 *	leases of commits it knows, store_pg_txn.c), and no copy of them
 *	is kept for delivery (store_pg_keep.c files copies of known
 *	commits only). They are settled before the node does anything
 *	else with the database: every connection taken from the pool
 *	(store_pg_take(), the one way to the database but the anchor's
 *	look and reads of an unknown outcome) goes first through
 *	store_pg_pend_settle(), one caller settling while the others
 *	wait for it, each no longer than its take's deadline
 *	(PG_WAIT_US), and a caller whose settling fails, or whose wait
 *	runs out, gets no connection (STORE_EAGAIN): so the take of due
 *	messages, the lease renewal and the next batch (whose begin reads
 *	a retry's claims: the claim of a committed 451 read as live
 *	would have replayed a 250 for a message about to be voided) all
 *	come after it. Settling a batch: the id not known is read from its backend if it still
 *	runs a transaction (a COMMIT waiting for the standby; a read
 *	refused leaves the batch kept: taken for "over", a COMMIT still
 *	waiting was voided with the void's own id, settled at once);
 *	then its QIDs are voided, always, with the id if pg_xact_status()
 *	knows it (committed or in progress: dropped by the settle of
 *	store_pg_wait.c once decided; aborted: a void of nothing,
 *	settled at once; "aborted" is not trusted to skip the void: an id
 *	read from a backend long after the fact may be another client's
 *	through PgBouncer), else (not known, too old, in the future: a
 *	server another since) with the void's own id, decided once it
 *	commits, so that the settle drops whatever of the batch exists;
 *	a status read refused otherwise (a statement timeout, a cancel, a
 *	recovery conflict) leaves the batch kept, as above. The look
 *	beside a settling statement that does not answer (store_pg_wait.c:
 *	does its backend wait for replication?) takes its connection
 *	without settling (store_pg_take_beside()): the settling thread
 *	holds pmu, and took it again, for ever.
 *
 *	Replays. Unlike a batch voided while its commit waits (its rows
 *	seen by none, store_pg_wait.c), a kept batch may have committed
 *	long before it is settled, and another node may meanwhile have
 *	answered a retry of its key 250 with its QID (SPEC 4: then it must
 *	be delivered). Such a node records the replay before it answers:
 *	a claim read under the key's lock whose message is still under
 *	another node's acceptance lease (no take since) is marked
 *	(messages.replayed) in the same transaction, which then commits
 *	instead of ending with ROLLBACK (store_pg_claim.c, store_pg_txn.c).
 *	The settling voids under the batch's key locks (kept with it,
 *	waited for at most PG_VOID_LOCK), so that a replay that read the
 *	claim has committed, and one to come sees the void; it leaves the
 *	QIDs marked replayed to be delivered (logged). Only a batch still
 *	in progress is voided without them: it holds them itself, and no
 *	one sees its rows. The settle of voids also leaves a message marked
 *	replayed (its void goes): see store_pg_wait.c.
 *
 *	Taken meanwhile. PostgreSQL unreachable from this node for longer
 *	than store.lease counted from the batch's INSERT, while other nodes
 *	reach it (this node cut off alone), or all nodes coming back
 *	together after such an outage: another node's take looks at the
 *	lease's expiry only, not at whether its owner lives (holds its
 *	slot lock), so it may take the message before this node has
 *	settled (this node settles at its first use of the database: its
 *	delivery poller tries every second, after the reconnect backoff,
 *	at most PG_BACKOFF_MAX). The settling leaves a message taken since
 *	its acceptance (messages.lease_since) to be delivered, as one
 *	replayed (logged; the settle of voids does too): by then it may be
 *	sent, in part or whole, and a retry of its key answered 250 with
 *	its QID, which no replay mark records once the message was taken
 *	(store_pg_claim.c). Voided, a sent message would lose its claim (a
 *	retry of its key then a second delivery), a deferred one be dropped
 *	(a 250 lost). So a message answered 451 is delivered, once.
 *
 *	Not covered. (1) That delivery of a message answered 451, above:
 *	without a key, the client's retry is a second message. (2) The
 *	node killed (-9, a crash) while it keeps unsettled batches: they
 *	live in its memory only; its next start gives up the previous
 *	life's leases (store_pg.c), and any node then takes and delivers
 *	them; never restarted, another node does once the lease runs out.
 *	A clean stop (store_close) tries once to settle them
 *	(store_pg_pend_close(): a take, bounded by its deadline and the
 *	result limit); what it cannot, it logs, QID by QID, at error
 *	level, and leaves as a kill does. Closing (2) would take a small
 *	local file of the kept batches, written (and synced) before their
 *	451 and settled by the next start before it gives up the old
 *	leases; the PostgreSQL backend has no local directory of its own
 *	yet to keep it in. (3) A replay by this node itself, in a batch
 *	that read the claim once the commit was visible and answered
 *	before this node knew the outcome was lost: only other nodes'
 *	replays are recorded (a write for every duplicate of a message not
 *	yet delivered would cost every retry on one node).
 * DIAGNOSTICS
 *	store_pg_pend_settle() returns 0 or STORE_EAGAIN (some batch not
 *	settled: the caller must not use the connection).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../util/buf.h"
#include "../../util/clock.h"
#include "../../util/log.h"
#include "store_pg_int.h"

/*
 * store_pg_pend_add - t, answered 451, could not be read back (read: 0)
 * or was read but not voided (read: 1): kept, to be settled before the
 * node's next use of the database (see the header)
 */
void store_pg_pend_add(struct pg_txn *t, int read)
{
	struct pg_store *st = t->st;
	struct pg_conn *n;
	struct pg_pend b;

	memset(&b, 0, sizeof(b));
	b.qids = xcalloc(t->n_put, sizeof(*b.qids));
	memcpy(b.qids, t->put_qids, t->n_put * sizeof(*b.qids));
	b.n = t->n_put;
	b.xid = t->xid;
	if ((b.n_locks = t->n_locked) > 0) {
		b.locks = xcalloc(b.n_locks, sizeof(*b.locks));
		memcpy(b.locks, t->locked, b.n_locks * sizeof(*b.locks));
	}
	if ((n = store_pg_conn(t->c)) != NULL && n->pid != 0) {
		b.pid = n->pid;
		b.started = n->started;
	}
	pthread_mutex_lock(&st->mu);	/* not pmu: a settling holds it over network I/O */
	st->pend = store_pg_grow(st->pend, st->n_pend, &st->cap_pend, sizeof(*st->pend));
	st->pend[st->n_pend++] = b;
	pthread_mutex_unlock(&st->mu);
	msg_warn("store: a commit's %s (PostgreSQL unreachable): its %zu message%s answered "
		 "451 (%s%s), settled before the node uses the database again",
		 read ? "outcome was read, but its void cannot be written" : "outcome cannot be read",
		 t->n_put, t->n_put == 1 ? "" : "s", t->put_qids[0], t->n_put > 1 ? ", ..." : "");
}

/* pend_kept - the QIDs the void left, replayed or taken by another node: logged */
static size_t pend_kept(const PGresult *r)
{
	int i;

	for (i = 0; i < PQntuples(r); i++)
		msg_warn("%s: answered 451 while PostgreSQL was unreachable, but another node "
			 "took it for delivery, or answered a later submission of its key 250 "
			 "with it: not voided, it will be delivered", PQgetvalue(r, i, 0));
	return (size_t) PQntuples(r);
}

/*
 * pend_void - b's QIDs made void on c, with xid, in a transaction of
 * its own that does not wait for the standby, but those another node
 * replayed (see the header); locked: under b's key locks first, waited
 * for at most PG_VOID_LOCK (a batch may hold one as long as its commit
 * waits for the standby: then this settle fails and is tried again), so
 * that a replay that read the claim is committed, and one to come sees
 * the void
 */
static int pend_void(struct pg_store *st, PGconn *c, const struct pg_pend *b, int64_t xid,
		     int locked, size_t *kept)
{
	struct pg_params p, lp;
	struct pg_arr l;
	PGresult *r = NULL;
	size_t i;
	int err;

	store_pg_params_init(&p);
	store_pg_params_init(&lp);
	store_pg_arr_init(&l, PG_OID_INT8);
	for (i = 0; i < b->n_locks; i++)
		store_pg_a_i64(&l, b->locks[i]);
	store_pg_p_qids(&p, b->qids, b->n);
	store_pg_p_i64(&p, xid);
	store_pg_p_text(&p, st->node ? st->node : "");
	store_pg_p_arr(&lp, &l);
	err = store_pg_simple(st, c, PG_LOCAL_BEGIN "; SET LOCAL lock_timeout = " PG_VOID_LOCK, "void");
	if (err == 0 && locked && b->n_locks > 0
	    && (err = store_pg_exec(st, c, store_pg_sql_key_locks, &lp, &r, "void key locks")) == 0) {
		PQclear(r);
		r = NULL;
	}
	if (err == 0)
		err = store_pg_exec(st, c, store_pg_sql_void, &p, &r, "void");
	err = store_pg_end(st, c, err, &r, "void");
	*kept = err == 0 ? pend_kept(r) : 0;
	PQclear(r);
	store_pg_params_free(&p);
	store_pg_params_free(&lp);
	return err;
}

/*
 * pend_one - settle b on c: its QIDs voided, with its id (settled as any
 * void once decided: at once if it aborted), or with the void's own when
 * the id is not known or in the future and the transaction is over. Always
 * voided, an abort too: an id read from a backend long after the fact
 * (through PgBouncer, another client's since) may have aborted while
 * b's committed. Under its key locks, unless it still runs (it holds
 * them; its rows are seen by none). An id not known is its backend's,
 * if it still runs a transaction (a COMMIT that waits for the standby;
 * through PgBouncer maybe another client's since, which only delays the
 * settling); else the transaction is over. 0 settled; else c failed or
 * a read or the void was refused: b stays (a backend's id not read taken
 * for "over", a COMMIT still waiting would have been voided with the
 * void's own id and settled at once).
 */
static int pend_one(struct pg_store *st, PGconn *c, struct pg_pend *b)
{
	size_t kept;
	int x;

	if ((b->xid == 0 && b->pid != 0
	     && store_pg_backend_xid(st, c, b->pid, b->started, 1, &b->xid) < 0)
	    || (x = store_pg_xact(st, c, b->xid)) < 0)
		return STORE_EAGAIN;
	if (pend_void(st, c, b, x == XACT_UNKNOWN ? 0 : b->xid, x != XACT_RUNNING, &kept) != 0)
		return STORE_EAGAIN;
	if (kept == b->n)
		return 0;
	pthread_mutex_lock(&st->mu);
	st->settle_at = 0;		/* a decided one goes at the next take */
	pthread_mutex_unlock(&st->mu);
	msg_warn("store: a commit answered 451 while PostgreSQL was unreachable: its %zu message%s "
		 "voided (%s%s), never delivered", b->n - kept, b->n - kept == 1 ? "" : "s",
		 b->qids[0], b->n > 1 ? ", ..." : "");
	return 0;
}

/*
 * pend_done - the entry of qids settled (1: gone from the list) or not (0:
 * its id as read kept), under mu; entries move when one is added
 */
static void pend_done(struct pg_store *st, const struct pg_pend *b, int settled)
{
	size_t i;

	pthread_mutex_lock(&st->mu);
	for (i = 0; i < st->n_pend && st->pend[i].qids != b->qids; i++)
		 /* void */ ;
	if (i < st->n_pend && settled) {
		free(st->pend[i].qids);
		free(st->pend[i].locks);
		st->pend[i] = st->pend[--st->n_pend];
	} else if (i < st->n_pend) {
		st->pend[i].xid = b->xid;
	}
	pthread_mutex_unlock(&st->mu);
}

/* pmu_lock - pmu by deadline (clock_us()): 0, or STORE_EAGAIN */
static int pmu_lock(struct pg_store *st, int64_t deadline)
{
	struct timespec ts = clock_ts(deadline);

	return pthread_mutex_timedlock(&st->pmu, &ts) == 0 ? 0 : STORE_EAGAIN;
}

/*
 * store_pg_pend_wait - no other caller settles the batches kept, by
 * deadline: 0, or STORE_EAGAIN (a caller waits so holding no connection)
 */
int store_pg_pend_wait(struct pg_store *st, int64_t deadline)
{
	if (pmu_lock(st, deadline) != 0)
		return STORE_EAGAIN;
	pthread_mutex_unlock(&st->pmu);
	return 0;
}

/*
 * store_pg_pend_settle - on c, just taken from the pool, before the caller
 * uses it: settle the batches kept by store_pg_pend_add (see the header). 0, or
 * STORE_EAGAIN: some could not be, or another caller was settling them
 * still at deadline (clock_us()), and the caller must not go on. One
 * caller settles (pmu) on its connection; the list itself is under mu,
 * so adding to it never waits for a settling's network I/O.
 */
int store_pg_pend_settle(struct pg_store *st, PGconn *c, int64_t deadline)
{
	struct pg_pend b;
	char first[STORE_QID_SIZE] = "";
	int err = 0, left = 1;

	if (pmu_lock(st, deadline) != 0)
		return STORE_EAGAIN;
	while (err == 0) {
		pthread_mutex_lock(&st->mu);
		if ((left = st->n_pend > 0) != 0)
			b = st->pend[st->n_pend - 1];	/* a copy: qids stays put, and ours */
		pthread_mutex_unlock(&st->mu);
		if (!left)
			break;
		err = pend_one(st, c, &b);
		pend_done(st, &b, err == 0);
		if (err != 0)
			memcpy(first, b.qids[0], STORE_QID_SIZE);
	}
	if (err != 0 && PQstatus(c) == CONNECTION_OK && clock_mono_us() >= st->pend_warn_at) {
		st->pend_warn_at = clock_mono_us() + PG_BACKOFF_MAX;
		msg_error("store: a batch answered 451 while PostgreSQL was unreachable cannot be "
			  "voided (%s): the node uses the database for nothing else until it is",
			  first);
	}
	pthread_mutex_unlock(&st->pmu);
	return err;
}

/*
 * store_pg_pend_close - the handle closes: one try to settle the batches
 * kept (a take: its deadline and the statements' result limit bound
 * it); each QID still kept is logged, left as a kill leaves them
 */
void store_pg_pend_close(struct pg_store *st)
{
	PGconn *c;
	size_t i, j;

	pthread_mutex_lock(&st->mu);
	if (st->n_pend == 0) {
		pthread_mutex_unlock(&st->mu);
		return;
	}
	st->next_try = 0;		/* once more now, whatever the backoff */
	pthread_mutex_unlock(&st->mu);
	if (store_pg_take(st, &c) == 0)
		store_pg_give(st, c);
	pthread_mutex_lock(&st->mu);
	for (i = 0; i < st->n_pend; i++)
		for (j = 0; j < st->pend[i].n; j++)
			msg_error("%s: answered 451 while PostgreSQL was unreachable, its commit's "
				  "outcome unknown: not settled at stop; any node may deliver it, "
				  "as after a kill", st->pend[i].qids[j]);
	pthread_mutex_unlock(&st->mu);
}

/* store_pg_pend_free - forget the batches kept (the handle closes) */
void store_pg_pend_free(struct pg_store *st)
{
	size_t i;

	for (i = 0; i < st->n_pend; i++) {
		free(st->pend[i].qids);
		free(st->pend[i].locks);
	}
	free(st->pend);
	st->pend = NULL;
	st->n_pend = st->cap_pend = 0;
}
