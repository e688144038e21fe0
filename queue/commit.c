/*
 * NAME
 *	commit 3
 * SUMMARY
 *	the group-commit writer thread
 * DESCRIPTION
 *	Why a thread: the fsync of a commit takes hundreds of microseconds
 *	to milliseconds. While the writer waits for the disk, the event loop
 *	keeps reading DATA from other sessions, and everything that finishes
 *	meanwhile rides in the next transaction. The batch size adapts to
 *	the load by itself; there is no timer and no added latency when idle.
 *	It is bounded by COMMIT_BATCH_BYTES of message data (the rest waits
 *	for the next transaction, first in line): a store that copies what
 *	it sends (PostgreSQL's statements) then holds at most that much more
 *	than the sessions do, whatever a burst of large messages brings.
 *
 *	Delivery threads' writes (inflight marks, outcomes) ride in the same
 *	transactions. While submissions are coming in (the last batch's
 *	commit ended less than COMMIT_BUSY_US ago), a delivery write that
 *	finds none waiting is held for one to share its fsync: a submission
 *	that arrives while a delivery-only commit is on the disk would wait
 *	for it, then pay its own (measured in BENCHMARKS.md). The hold lasts COMMIT_HOLD_US
 *	from the later of the oldest held write's arrival and the end of
 *	the last acceptance's commit, and never ends while a lone session's
 *	acceptance commits on the event loop (commit_now): a delivery-only
 *	commit begun then would take LMDB's writer lock as it ends and put
 *	itself ahead of the next acceptance, which comes a round trip later.
 *	When nothing is being submitted, delivery writes go at once.
 *	Delivery writes that ride in a commit_now() are announced to their
 *	threads by the event loop's next commit_reap(), after the reply
 *	went out (waking them first cost the reply ~10 us, measured), by
 *	the next commit_now() (a client pipelining hundreds of submissions
 *	in one read would hold every delivery thread until the read was
 *	done), or by commit_told_flush() once the event loop has stopped;
 *	their threads sleep until then.
 *	Those of a commit_now() that failed go back to the writer, which
 *	tries them again: the event loop never waits for them.
 *
 *	Between rounds, holding no transaction, the writer gives the store
 *	its upkeep (store_upkeep(): on LMDB, file and map grown ahead of the
 *	commits). A store may refuse every transaction (STORE_HREFUSING: on
 *	LMDB, after a failed sync): the batch whose commit failed gets no 250
 *	(each of its submissions is tried alone, and refused, so each gets
 *	452 4.3.1), and before its next round the writer's upkeep opens the
 *	store again from what is durable, then commits what has come
 *	meanwhile; while the disk keeps failing it tries again every
 *	COMMIT_REOPEN_US, and every submission gets 452 4.3.1. The other
 *	threads' reads wait for that upkeep (a few milliseconds), then find
 *	the store as the disk has it. commit_now() leaves a refusing store,
 *	and any upkeep, to the writer.
 */
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>

#include "../util/clock.h"
#include "../util/buf.h"
#include "../util/deadline.h"
#include "../util/log.h"
#include "commit.h"
#include "metrics.h"

#define COMMIT_HOLD_US	1000	/* a delivery write alone waits this long for a submission */
#define COMMIT_BUSY_US	2000	/* ... when the last submission batch ended this recently */
#define COMMIT_REOPEN_US 1000000	/* a broken store that did not reopen is tried again */
#define COMMIT_BATCH_BYTES (16u << 20)	/* message data per transaction (one message at least) */

struct commit {
	struct store *st;		/* not owned */
	void (*committed) (void *, const char *);
	void *arg;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct commit_req *pending;	/* in submission order, under lock */
	struct commit_req **pending_end;	/* under lock: the last one's next */
	struct workq *back;		/* owned: decided requests, to the event loop */
	struct commit_op *ops;		/* LIFO, under lock: delivery writes to carry */
	pthread_cond_t marked;		/* a batch of ops is durable */
	int stop;			/* under lock */
	int stopping_fd;		/* the writer's stop (deadline_stop_on()): commit_stopping() */
	char (*spooled)[STORE_QID_SIZE];	/* owned, writer thread's: a batch's new QIDs */
	size_t spooled_cap;
	int64_t last_batch;		/* under lock: clock_mono_us() when submissions were last committed */
	int64_t ops_at;			/* under lock: when the oldest of ops came */
	int now_busy;			/* under lock: commit_now() is committing */
	struct commit_op *told;		/* under lock: durable in a commit_now(), not yet announced */
	struct workq_item poke;		/* on back while poked: commit_reap() announces told */
	int poked;			/* under lock */
	int busy;			/* under lock: the writer is in a round */
	int upkeep;			/* under lock: store_upkeep() is due (after commit_now) */
	int64_t upkeep_at;		/* writer thread's: a store still refusing is tended again then */
	int64_t hold_us, busy_us;	/* under lock: COMMIT_HOLD_US, COMMIT_BUSY_US (tests widen them) */
};

/* commit_decide - SPEC section 4's table for one submission */
void commit_decide(struct commit_req *req, const struct store_claim *claims)
{
	size_t i, n = req->msg.n_rcpts;
	size_t n_found = 0;
	ssize_t mismatch = -1;

	req->shadow_hit = 0;
	req->orig_qid[0] = 0;
	memset(req->claimed, 0, n);
	if (req->hashes == NULL) {
		req->outcome = COMMIT_QUEUED;
		return;
	}
	for (i = 0; i < n; i++) {
		if (claims[i].qid[0] == '\0')	/* none live (store_claims_get) */
			continue;
		n_found++;
		req->claimed[i] = 1;
		if (mismatch < 0 && memcmp(claims[i].fingerprint, req->fingerprint, HASH_LEN) != 0)
			mismatch = (ssize_t) i;
	}
	if (n_found == 0) {
		req->outcome = COMMIT_QUEUED;
		return;
	}
	for (i = 0; i < n && claims[i].qid[0] == '\0'; i++)
		 /* void */ ;
	strcpy(req->orig_qid, claims[mismatch >= 0 ? (size_t) mismatch : i].qid);
	if (req->shadow || (mismatch >= 0 && req->mismatch_accept)) {
		req->shadow_hit = req->shadow != 0;	/* shadow: count it, relay it anyway */
		memset(req->claimed, 0, n);
		req->outcome = COMMIT_QUEUED;
	} else if (mismatch >= 0) {
		req->outcome = COMMIT_MISMATCH;
	} else if (n_found == n) {
		req->outcome = COMMIT_DUPLICATE;
	} else {
		req->outcome = COMMIT_PARTIAL;
	}
}

/* commit_one - decide one request inside the open transaction and write it */
static void commit_one(struct store_txn *t, struct commit_req *req, int64_t now)
{
	size_t i, n = req->msg.n_rcpts, kept = 0;
	struct store_claim *claims = NULL, claim;
	struct store_rcpt *all = req->msg.rcpts;

	if (req->hashes) {
		claims = xcalloc(n, sizeof(*claims));
		(void) store_claims_get(NULL, t, req->msg.keyhash,	/* a failure is t's */
					(const uint8_t (*)[STORE_HASH_LEN]) req->hashes, n, now,
					claims);
	}
	commit_decide(req, claims);
	if (req->outcome == COMMIT_DUPLICATE || req->outcome == COMMIT_PARTIAL)
		for (i = 0; i < n; i++)		/* answered with these claims' QIDs */
			if (req->claimed[i])
				store_txn_replay(t, req->msg.keyhash, req->hashes[i]);
	if (req->outcome != COMMIT_QUEUED && req->outcome != COMMIT_PARTIAL)
		goto out;

	/* spool only the recipients that are new */
	req->msg.rcpts = xcalloc(n, sizeof(*all));
	for (i = 0; i < n; i++)
		if (!req->claimed[i])
			req->msg.rcpts[kept++] = all[i];
	req->msg.n_rcpts = kept;
	req->msg.accepted = now;
	req->msg.has_key = req->hashes != NULL;	/* what its story starts from */
	req->msg.ttl = req->ttl;
	store_txn_msg_put(t, &req->msg);
	free(req->msg.rcpts);
	req->msg.rcpts = all;
	req->msg.n_rcpts = n;

	if (req->hashes == NULL)
		goto out;
	memset(&claim, 0, sizeof(claim));
	strcpy(claim.qid, req->msg.qid);
	memcpy(claim.fingerprint, req->fingerprint, HASH_LEN);
	claim.accepted = now;
	claim.expires = now + req->ttl;
	for (i = 0; i < n; i++) {
		/* shadow mode keeps the first claim, so the duplicate rate stays measurable */
		if (claims[i].qid[0] != '\0' && (req->shadow || !req->mismatch_accept))
			continue;
		store_txn_claim_put(t, req->msg.keyhash, req->hashes[i], &claim);
	}
out:
	free(claims);
}

/*
 * A delivery thread's write (an inflight mark, a batch of outcomes)
 * waiting for the next transaction. It shares the submissions' fsync,
 * and a submission never waits behind it for LMDB's writer lock.
 */
struct commit_op {
	void (*fn) (struct store_txn *t, void *arg);	/* steps with a sticky error */
	void *arg;			/* not owned */
	int err;
	int done;
	struct commit_op *next;
};

/*
 * commit_batch - one transaction for the whole batch; 0 or a STORE_E*
 * code. It begins with every key the batch will claim: a shared store
 * locks them in one order, so racing batches on other nodes serialise on
 * a key and never deadlock.
 */
static int commit_batch(struct commit *cm, struct commit_req *batch, struct commit_op *ops)
{
	struct buf keys = BUF_INIT;
	struct store_txn *t;
	struct commit_req *req;
	int64_t now = clock_us(), n = 0;
	int err;

	for (req = batch; req; req = req->next)
		if (req->hashes)
			buf_append(&keys, req->msg.keyhash, STORE_HASH_LEN);
	err = store_txn_begin(cm->st, (const uint8_t (*)[STORE_HASH_LEN]) keys.data,
			      keys.len / STORE_HASH_LEN, &t);
	buf_free(&keys);
	if (err != 0)
		return err;
	for (req = batch; req && store_txn_error(t) == 0; req = req->next, n++)
		commit_one(t, req, now);
	for (; ops && store_txn_error(t) == 0; ops = ops->next)
		ops->fn(t, ops->arg);
	if (n > 0)			/* a batch of ops alone is no submission batch */
		metrics_observe(METRICS_COMMIT_BATCH, n);
	return store_txn_commit(t);
}

/*
 * commit_finish - hand a decided batch back to the event loop, then to
 * delivery. The event loop is woken first: with two cores, a delivery
 * thread woken first takes the core the event loop would have replied
 * on (tens of microseconds at the final dot, measured). The requests
 * belong to the event loop from workq_finish() on, so the QIDs to
 * deliver are copied out before.
 */
static void commit_finish(struct commit *cm, struct commit_req *fifo)
{
	struct commit_req *req;
	struct workq_item *back = NULL, **tail = &back;
	size_t n = 0, i;

	for (req = fifo; req; req = req->next) {
		if (req->outcome != COMMIT_QUEUED && req->outcome != COMMIT_PARTIAL)
			continue;
		if (n == cm->spooled_cap) {	/* grows to the largest batch, then stays */
			cm->spooled_cap = cm->spooled_cap ? 2 * cm->spooled_cap : 64;
			cm->spooled = xrealloc(cm->spooled, cm->spooled_cap * sizeof(*cm->spooled));
		}
		memcpy(cm->spooled[n++], req->msg.qid, STORE_QID_SIZE);
	}
	for (req = fifo; req; req = req->next) {	/* copied out before: see above */
		*tail = &req->item;
		tail = &req->item.next;
	}
	*tail = NULL;
	workq_finish(cm->back, back);
	for (i = 0; i < n; i++)
		cm->committed(cm->arg, cm->spooled[i]);
}

/*
 * hold_ops - delivery writes alone while submissions come: wait a little
 * for one, from the later of the oldest write's arrival and the last
 * acceptance's end, and while commit_now() commits one (lock held). A
 * commit_now() that takes the writes ends the hold.
 */
static void hold_ops(struct commit *cm)
{
	int64_t now, until;
	struct timespec ts;

	while (cm->pending == NULL && cm->ops != NULL && !cm->stop) {
		now = clock_mono_us();
		if (!cm->now_busy && now - cm->last_batch >= cm->busy_us)
			return;
		until = cm->now_busy ? now : cm->ops_at > cm->last_batch ? cm->ops_at : cm->last_batch;
		if ((until += cm->hold_us) <= now)
			return;
		ts = clock_ts(until);
		(void) pthread_cond_timedwait(&cm->wake, &cm->lock, &ts);
	}
}

/* ops_done - delivery writes of a committed (err 0) or failed batch: failed, each alone */
static void ops_done(struct commit *cm, struct commit_op *ops, int err)
{
	struct commit_op *op, *next;
	int alone;

	if (ops == NULL)
		return;
	/* commits that wait for a standby: each alone would wait as long again */
	alone = err != 0 && !(err == STORE_EAGAIN && (store_health(cm->st) & STORE_HSTALLED));
	for (op = ops; op; op = next) {
		next = op->next;
		op->next = NULL;	/* alone: a transaction of this op, no submission */
		op->err = err == 0 ? 0 : alone ? commit_batch(cm, NULL, op) : err;
		op->next = next;
	}
	pthread_mutex_lock(&cm->lock);
	for (op = ops; op; op = op->next)
		op->done = 1;
	pthread_cond_broadcast(&cm->marked);
	pthread_mutex_unlock(&cm->lock);
}

/* announce - the delivery writes told durable: done, their threads woken (lock held) */
static void announce(struct commit *cm)
{
	struct commit_op *op, *next;

	if (cm->told == NULL)
		return;
	for (op = cm->told; op; op = next) {
		next = op->next;	/* op is its thread's, and gone once done is seen */
		op->done = 1;
	}
	cm->told = NULL;
	pthread_cond_broadcast(&cm->marked);
}

/* op_tail - the last of a list of ops */
static struct commit_op *op_tail(struct commit_op *ops)
{
	while (ops->next)
		ops = ops->next;
	return ops;
}

/* tell_later - committed delivery writes, announced by the next commit_reap(); 1: poke it */
static int tell_later(struct commit *cm, struct commit_op *ops)
{
	struct commit_op *tail = op_tail(ops);
	int poke;

	pthread_mutex_lock(&cm->lock);
	tail->next = cm->told;
	cm->told = ops;
	poke = !cm->poked;
	cm->poked = 1;
	pthread_mutex_unlock(&cm->lock);
	return poke;
}

/* ops_push - delivery writes for the writer's next round (lock held) */
static void ops_push(struct commit *cm, struct commit_op *ops)
{
	if (cm->ops == NULL)
		cm->ops_at = clock_mono_us();
	op_tail(ops)->next = cm->ops;
	cm->ops = ops;
	pthread_cond_signal(&cm->wake);
}

/*
 * commit_round - one transaction for fifo (submission order) and ops; a
 * failed batch is retried one submission at a time, so that one oversized
 * message fails only itself, and each op alone (ops_done). later (a
 * commit_now()): ops that committed are announced by the next
 * commit_reap() (1 returned: poke it), not here; ops that did not
 * commit go back to the writer, which tries them again (and each alone
 * if that fails): never on the event loop, where each would wait for the
 * store as long again
 */
static int commit_round(struct commit *cm, struct commit_req *fifo, struct commit_op *ops,
			int later)
{
	struct commit_req *req, *next;
	int err, e, poke = 0;

	err = commit_batch(cm, fifo, ops);
	if (!later || ops == NULL)
		ops_done(cm, ops, err);
	else if (err == 0)
		poke = tell_later(cm, ops);
	else {
		pthread_mutex_lock(&cm->lock);
		ops_push(cm, ops);
		pthread_mutex_unlock(&cm->lock);
	}
	for (req = fifo; req && err != 0; req = req->next) {
		e = err;
		/* the database away: one at a time would fail the same way, each slowly */
		if ((fifo->next != NULL || ops != NULL) && err != STORE_EAGAIN) {
			next = req->next;
			req->next = NULL;
			e = commit_batch(cm, req, NULL);
			req->next = next;
		}
		if (e != 0) {
			req->outcome = COMMIT_FAILED;
			req->error = e;
		}
	}
	return poke;
}

/*
 * commit_upkeep - the store's upkeep between rounds (writer thread): when
 * asked (after a round, or by commit_now), and whenever the store
 * refuses; one that still refuses is tended again COMMIT_REOPEN_US on
 */
static void commit_upkeep(struct commit *cm, int asked)
{
	int refusing = (store_health(cm->st) & STORE_HREFUSING) != 0, err;
	int64_t now = clock_mono_us();

	if ((!asked && !refusing) || (refusing && now < cm->upkeep_at))
		return;
	err = store_upkeep(cm->st);
	/* one that began to refuse in this upkeep is tended again at once */
	cm->upkeep_at = refusing && err != 0 ? now + COMMIT_REOPEN_US : 0;
}

/* wait_work - sleep until there is work, or a refusing store's upkeep is due (lock held) */
static void wait_work(struct commit *cm)
{
	struct timespec ts;

	while (cm->pending == NULL && cm->ops == NULL && !cm->upkeep && !cm->stop) {
		if (!(store_health(cm->st) & STORE_HREFUSING)) {
			pthread_cond_wait(&cm->wake, &cm->lock);
			continue;
		}
		if (clock_mono_us() >= cm->upkeep_at)
			return;
		ts = clock_ts(cm->upkeep_at);
		(void) pthread_cond_timedwait(&cm->wake, &cm->lock, &ts);
	}
}

/*
 * take_fifo - the pending submissions, oldest first, up to
 * COMMIT_BATCH_BYTES of data; the rest stays pending, ahead of any that
 * come later (lock held)
 */
static struct commit_req *take_fifo(struct commit *cm)
{
	struct commit_req *fifo = cm->pending, *req;
	size_t bytes = 0;

	for (req = fifo; req; req = req->next) {
		bytes += req->msg.data_len;
		if (req->next && bytes + req->next->msg.data_len > COMMIT_BATCH_BYTES)
			break;
	}
	if (req == NULL) {
		cm->pending = NULL;
		cm->pending_end = &cm->pending;
	} else {
		cm->pending = req->next;
		req->next = NULL;
	}
	return fifo;
}

/* commit_main - the writer thread */
static void *commit_main(void *arg)
{
	struct commit *cm = arg;
	struct commit_req *batch;
	struct commit_op *ops;
	int upkeep, stop;

	log_service("cleanup");		/* as Postfix's: writes what smtpd took into the queue */
	deadline_stop_on(cm->stopping_fd);	/* a hold for the standby ends at the stop */
	for (;;) {
		pthread_mutex_lock(&cm->lock);
		wait_work(cm);
		hold_ops(cm);
		batch = take_fifo(cm);
		ops = cm->ops;
		cm->ops = NULL;
		upkeep = cm->upkeep || batch != NULL;
		cm->upkeep = 0;
		cm->busy = batch != NULL || ops != NULL || upkeep;	/* commit_now() waits */
		stop = cm->stop;
		pthread_mutex_unlock(&cm->lock);
		commit_upkeep(cm, 0);		/* a refusing store before the round: it then commits */
		if (batch != NULL || ops != NULL) {	/* none: commit_now() took what was held */
			(void) commit_round(cm, batch, ops, 0);
			commit_finish(cm, batch);
		}
		commit_upkeep(cm, upkeep);	/* warns by itself */
		pthread_mutex_lock(&cm->lock);
		cm->busy = 0;
		if (batch != NULL)
			cm->last_batch = clock_mono_us();
		pthread_mutex_unlock(&cm->lock);
		if (stop && batch == NULL && ops == NULL)
			break;
	}
	return NULL;
}

/* decided - workq_ops: a request's done callback, or the poke, in the event loop */
static void decided(void *arg, struct workq_item *it)
{
	struct commit *cm = arg;
	struct commit_req *req;

	if (it != &cm->poke) {		/* the poke is no request's item */
		req = (struct commit_req *) ((char *) it - offsetof(struct commit_req, item));
		req->done(req);
		return;
	}
	pthread_mutex_lock(&cm->lock);
	announce(cm);
	cm->poked = 0;			/* off the list: it may go on again */
	pthread_mutex_unlock(&cm->lock);
}

/* commit_start - start the writer thread */
struct commit *commit_start(struct store *st, void (*committed) (void *, const char *),
			    void *arg)
{
	struct commit *cm = xcalloc(1, sizeof(*cm));
	pthread_condattr_t attr;

	cm->st = st;
	cm->committed = committed;
	cm->arg = arg;
	cm->pending_end = &cm->pending;
	cm->hold_us = COMMIT_HOLD_US;
	if ((cm->stopping_fd = eventfd(0, EFD_CLOEXEC)) < 0)
		msg_fatal("eventfd: %m");
	cm->busy_us = COMMIT_BUSY_US;
	pthread_mutex_init(&cm->lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);	/* hold_ops() waits on it */
	pthread_cond_init(&cm->wake, &attr);
	pthread_cond_init(&cm->marked, NULL);	/* commit_run() waits on it, untimed */
	pthread_condattr_destroy(&attr);
	cm->back = workq_start(&(struct workq_ops) { .name = "commit", .done = decided, .arg = cm },
			       0);
	if (pthread_create(&cm->thread, NULL, commit_main, cm) != 0)
		msg_fatal("cannot start the commit thread");
	return cm;
}

/* commit_submit - queue a request for the next transaction */
void commit_submit(struct commit *cm, struct commit_req *req)
{
	req->next = NULL;
	pthread_mutex_lock(&cm->lock);
	*cm->pending_end = req;
	cm->pending_end = &req->next;
	pthread_cond_signal(&cm->wake);
	pthread_mutex_unlock(&cm->lock);
}

/*
 * commit_now - commit req on the calling thread if the writer is idle and
 * nothing else waits, and the store's commits do not wait for a standby
 * (the event loop would wait with them, store.commit_wait): 1 if done
 * (req decided, its QID handed to delivery, not put on the done list), 0
 * if it must go through commit_submit(). Delivery writes waiting for a
 * submission ride along.
 */
int commit_now(struct commit *cm, struct commit_req *req)
{
	struct commit_op *ops;
	int upkeep, poke;

	/* commits that wait (a synchronous standby away) would hold the event loop */
	if (store_health(cm->st) & (STORE_HSTALLED | STORE_HREFUSING))
		return 0;
	pthread_mutex_lock(&cm->lock);
	announce(cm);			/* the last one's reply is queued: a pipelining client's next */
	if (cm->busy || cm->pending != NULL || cm->stop) {
		pthread_mutex_unlock(&cm->lock);
		return 0;
	}
	ops = cm->ops;
	cm->ops = NULL;
	cm->now_busy = 1;		/* writes that come meanwhile wait for the next */
	pthread_mutex_unlock(&cm->lock);

	req->next = NULL;
	poke = commit_round(cm, req, ops, 1);
	if (req->outcome == COMMIT_QUEUED || req->outcome == COMMIT_PARTIAL)
		cm->committed(cm->arg, req->msg.qid);
	if (poke)			/* no thread waits on it: the event loop reads it later */
		workq_finish(cm->back, &cm->poke);

	/* the upkeep is the writer's, never this thread's (a store this commit left refusing too) */
	upkeep = (store_health(cm->st) & STORE_HUPKEEP) != 0;
	pthread_mutex_lock(&cm->lock);
	cm->now_busy = 0;
	cm->last_batch = clock_mono_us();
	if (upkeep) {
		cm->upkeep = 1;
		pthread_cond_signal(&cm->wake);
	}
	pthread_mutex_unlock(&cm->lock);
	return 1;
}

/*
 * commit_run - run fn(t, arg) inside the next group commit and wait until
 * it is durable; returns 0 or a STORE_E* code. For delivery threads.
 */
int commit_run(struct commit *cm, void (*fn) (struct store_txn *, void *), void *arg)
{
	struct commit_op op = { fn, arg, 0, 0, NULL };

	pthread_mutex_lock(&cm->lock);
	if (cm->stop) {			/* the writer is draining: write it here */
		pthread_mutex_unlock(&cm->lock);
		return commit_batch(cm, NULL, &op);
	}
	ops_push(cm, &op);
	while (!op.done)		/* announced by ops_done(), or announce() */
		pthread_cond_wait(&cm->marked, &cm->lock);
	pthread_mutex_unlock(&cm->lock);
	return op.err;
}

/* commit_fd - the eventfd the event loop watches */
int commit_fd(const struct commit *cm)
{
	return workq_fd(cm->back);
}

/* commit_reap - run the done callbacks of finished requests, in order */
void commit_reap(struct commit *cm)
{
	workq_reap(cm->back);
}

/* commit_told_flush - once the event loop has stopped: what its commit_reap() did not announce */
void commit_told_flush(struct commit *cm)
{
	pthread_mutex_lock(&cm->lock);
	announce(cm);
	pthread_mutex_unlock(&cm->lock);
}

/* commit_stopping - the daemon stops: the writer's waits end (deadline_stop_on()); NULL-safe */
void commit_stopping(struct commit *cm)
{
	if (cm != NULL)
		(void) !eventfd_write(cm->stopping_fd, 1);	/* stays readable */
}

/* commit_stopped - has commit_stopping() been called? (its descriptor stays readable) */
int commit_stopped(const struct commit *cm)
{
	return poll(&(struct pollfd) { .fd = cm->stopping_fd, .events = POLLIN }, 1, 0) == 1;
}

/* commit_stop - drain, stop and join the writer */
void commit_stop(struct commit *cm)
{
	if (cm == NULL)
		return;
	pthread_mutex_lock(&cm->lock);
	cm->stop = 1;
	pthread_cond_signal(&cm->wake);
	pthread_mutex_unlock(&cm->lock);
	pthread_join(cm->thread, NULL);
	workq_stop(cm->back);		/* reaps what is left */
	close(cm->stopping_fd);
	free(cm->spooled);
	pthread_mutex_destroy(&cm->lock);
	pthread_cond_destroy(&cm->wake);
	pthread_cond_destroy(&cm->marked);
	free(cm);
}
