/*
 * NAME
 *	deliver 3
 * SUMMARY
 *	delivery scheduler and threads
 * DESCRIPTION
 *	deliver_start() loads every queued QID from the store into an
 *	in-memory queue (deliver_queue.c) and starts the delivery threads:
 *	for SMTP one for each session of each upstream group (the default's
 *	upstream.connections and each route's), one for a Maildir. (They are
 *	not util/workq.c's workers: they wait on a schedule ordered by time,
 *	gathering batches, not on a FIFO of jobs; a dispatcher feeding a
 *	work queue would add a hop and a wake-up to every batch.) A thread
 *	sleeps until a batch may start: once the earliest due message has
 *	waited DELIVER_GATHER for others to come due, or at once when a full
 *	batch is due. Messages accepted one by one then share a connection
 *	and one outcome transaction instead of paying for one each (a TCP
 *	handshake, a bridge thread and an fsync per message, measured in
 *	BENCHMARKS.md). It takes up to t->batch due messages, which become
 *	busy so that no other thread takes them, loads them (up to
 *	DELIVER_BATCH_BYTES of message data; the rest is handed back), hands
 *	them to the transport in one go (one upstream connection for the
 *	lot), then records each result.
 *
 *	The inflight mark found on a message at load time means an attempt
 *	died after its final dot may have gone out (the mark is always
 *	cleared by the update that records an outcome). upstream.ambiguous
 *	decides: "assume-delivered" makes the queued recipients unconfirmed
 *	and the message is never sent again; "retry" clears the mark and
 *	delivers again.
 *
 *	A message the operator holds (store_msg_change) is not listed at
 *	start nor taken from a shared queue; one held after it was scheduled
 *	is found held at load and leaves the schedule, and deliver_release()
 *	brings it back.
 *
 *	On a store shared by several nodes (STORE_CAP_SHARED) the in-memory
 *	queue holds only what this node is about to deliver, each message
 *	under this node's lease: what it accepted itself (leased by the
 *	commit) and what the taker thread leased from the shared queue once
 *	due (store_queue_take(), every DELIVER_TAKE_EVERY or at a flush),
 *	passing over the mail of a group that may start no session and has
 *	some waiting here already (closed_routes).
 *	A message deferred goes back to the shared queue (its lease given
 *	up by the write that defers it) and leaves the local one; any node
 *	takes it when due. The taker renews the leases held every third of
 *	store.lease. Delivery writes are fenced by the lease and ride in
 *	the submissions' group commit as on LMDB, sharing its round trip
 *	and WAL flush: a lost lease (STORE_ELEASE) fails that transaction,
 *	whose submissions the writer then commits one by one and whose
 *	delivery writes each alone (queue/commit.c), so it fails that
 *	message alone, which is then left to the node that holds it; its
 *	inflight mark fails too, so no final dot goes out from a node that
 *	lost the lease.
 *
 *	A transport with limits (deliver_esmtp) has its upstream's rate and
 *	concurrency, and their throttling feedback (deliver_rate.h), for each
 *	upstream group: the default upstream's (group 0) and each route's
 *	(conf_route.c; group 1 + i). On a shared store the taker counts the
 *	nodes alive every DELIVER_NODES_EVERY, and each node sends its part
 *	of each rate.
 *
 *	Admission: a session starts only when its group may start one (not
 *	paused, a connection free: deliver_rate_admit), admitted once, by
 *	its own group. A message's queue entry knows its group once the
 *	message was loaded (dq_set_group), and the queue passes over the
 *	entries of a group that may start no session (groups_close, dq_close)
 *	at no cost per entry, so a batch is of one known group, admitted when
 *	taken (take_batch), or of messages never loaded, admitted group by
 *	group once loaded (send_group). A group that may not start one then
 *	gets its jobs back in the schedule as they were, nothing written (on
 *	a shared store under this node's lease, which the taker renews), and
 *	the thread goes on. A thread with nothing else due sleeps until a
 *	pause or a session ends: a paused or busy group holds only its own
 *	mail. A loaded batch goes to the transport one group at a time
 *	(send_routes), by the route each message stored at acceptance.
 *
 *	What an attempt's results become (log lines, bounces, the store's
 *	update, the retry time) is deliver_record.c's; the operator's flush,
 *	retry, release, reroute and drop are deliver_admin.c's.
 * DIAGNOSTICS
 *	QID: in the queue with no recipient left; removing
 *	QID: delivery was interrupted after the final dot may have been sent; ...
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "../util/clock.h"
#include "../util/deadline.h"
#include "../util/log.h"
#include "../queue/metrics.h"
#include "deliver_impl.h"

#define DELIVER_BATCH_BYTES	(64u << 20)	/* message data loaded per batch, at most */
#define DELIVER_MAX_SLEEP	60	/* seconds: re-check even if nothing is due */
#define DELIVER_GATHER		10000	/* us a due message waits for others to share its batch */
#define DELIVER_TAKE_EVERY	(1 * US)	/* shared store: due mail looked for this often */
#define DELIVER_NODES_EVERY	(5 * US)	/* shared store: the nodes alive counted this often */

/*
 * deliver_reload - new retry settings, for attempts from now on, and the
 * upstream groups' rates. The retry settings replace the set in force
 * whole, under the lock, and readers take a copy of it
 * (deliver_retry_settings): a reader sees the old set or the new one,
 * never a mix, and nothing is shared to be freed, so no reader can hold
 * a set a reload frees. The conf given to deliver_start() is left as it
 * is (main owns it, and it is const here).
 */
void deliver_reload(struct deliver *d, const struct conf *nc)
{
	const struct conf_route *r;
	size_t i;

	pthread_mutex_lock(&d->lock);
	d->retry = nc->retry;
	pthread_mutex_unlock(&d->lock);
	if (d->rates == NULL)
		return;
	/*
	 * Every group's rates; not its connections, which count threads. The
	 * routes in use stay until a restart: each takes the rates of its
	 * namesake in nc, one nc no longer has keeps its own.
	 */
	deliver_rate_configure(d->rates[0], &nc->upstream);
	for (i = 0; i < d->c->n_routes; i++)
		if ((r = conf_route_named(nc, d->c->routes[i].name)) != NULL)
			deliver_rate_configure(d->rates[i + 1], &r->up);
}

/* deliver_retry_settings - a copy of the retry settings in force */
struct conf_retry deliver_retry_settings(struct deliver *d)
{
	struct conf_retry r;

	pthread_mutex_lock(&d->lock);
	r = d->retry;
	pthread_mutex_unlock(&d->lock);
	return r;
}

/*
 * deliver_schedule - (re)queue a QID, and wake a thread if that moves when the
 * next batch may start: a message joining a batch that is gathering
 * wakes no one (the caller does not hold the lock). The QID may still be
 * busy, its attempt before about to be done with it: leased from the
 * shared queue again (that attempt let its lease go), or released from
 * hold by the operator (that attempt's load found it held). Then it
 * comes back when done (dq_add), else it would wait for no one: a lease
 * renewed and never delivered, a queued message no thread takes.
 */
void deliver_schedule(struct deliver *d, const char *qid, int64_t when)
{
	int64_t now = clock_us(), before;

	pthread_mutex_lock(&d->lock);
	before = dq_batch_start(&d->q, now, DELIVER_GATHER, d->t->batch);
	if (dq_add(&d->q, qid, when)
	    && dq_batch_start(&d->q, now, DELIVER_GATHER, d->t->batch) != before)
		pthread_cond_signal(&d->wake);
	pthread_mutex_unlock(&d->lock);
}

/*
 * finished - a busy QID is done: reschedule at next, or forget it (next
 * < 0). On a shared store it is always forgotten and its lease let go
 * (if a write has not already; lease: the one it was loaded under, 0 if
 * unknown): the shared queue has it, unless this node leased it again
 * meanwhile (deliver_schedule), and that lease is kept. One rerouted
 * while busy (deliver_reroute) and not done with is due at once, the
 * new way: its deferral kept it due now in the store (the retry was
 * earned on the old route; store_msg_update), and the taker is woken.
 * The flag is read where the entry is done with, under one hold of the
 * lock: a reroute in between would mark an entry about to be forgotten,
 * and think it announced. The lease goes first, as before: this node's
 * taker leasing the message again meanwhile finds it busy (dq_add).
 */
static void finished(struct deliver *d, const char *qid, int64_t lease, int64_t next)
{
	int again = 0;

	if (d->shared)
		store_lease_release(d->st, qid, lease);
	pthread_mutex_lock(&d->lock);
	if (d->shared) {
		again = next >= 0 && dq_regrouped(&d->q, qid);
		next = -1;
	}
	dq_done(&d->q, qid, next);
	if (dq_state(&d->q, qid) == DQ_WAITING)
		pthread_cond_signal(&d->wake);
	pthread_mutex_unlock(&d->lock);
	if (again)			/* rerouted meanwhile: due now, for any node */
		deliver_wake_taker(d);
}

/* deliver_job_finished - the same for a loaded job: its lease alone is let go */
void deliver_job_finished(struct deliver *d, const struct deliver_job *j, int64_t next)
{
	finished(d, j->m.qid, j->m.lease, next);
}

/* job_free - release a job; the struct may be reused */
static void job_free(struct deliver_job *j)
{
	store_msg_free(&j->m);
	free(j->res);
	memset(j, 0, sizeof(*j));
}

/*
 * job_load - load a due message. Returns 1 with a job ready for the
 * backend, 0 when there is nothing to send (the QID was finished here).
 */
static int job_load(struct deliver *d, const char *qid, struct deliver_job *j)
{
	const struct conf *c = d->c;
	int64_t now = clock_us();
	size_t i, n_queued = 0;
	int err;

	memset(j, 0, sizeof(*j));
	if ((err = store_msg_load(d->st, qid, &j->m)) != 0) {
		if (err == STORE_ENOTFOUND) {	/* dropped, or done by another path */
			finished(d, qid, 0, -1);	/* whichever lease is held */
			return 0;
		}
		msg_warn("%s: cannot load for delivery: %s", qid, store_strerror(err));
		now += deliver_retry_settings(d).first * US;
		if (!d->shared || err != STORE_EINVAL) {	/* the database away: anyone's once back */
			finished(d, qid, 0, now);
			return 0;
		}
		/*
		 * a shared row that cannot be a message, which no write can say
		 * when to try again: its lease kept, it is this node's to try
		 * after retry.first, as on one node, not every node's at once,
		 * again and again
		 */
		pthread_mutex_lock(&d->lock);
		dq_done(&d->q, qid, now);
		pthread_mutex_unlock(&d->lock);
		return 0;
	}
	if (j->m.held)		/* held since it was scheduled: its release schedules it */
		goto done;
	j->res = xcalloc(j->m.n_rcpts, sizeof(*j->res));
	for (i = 0; i < j->m.n_rcpts; i++) {
		if (j->m.rcpts[i].state != STORE_RCPT_QUEUED)
			continue;
		j->res[i].attempted = 1;
		deliver_set(j, i, DELIVER_DEFERRED, "4.3.0", "delivery not attempted");
		n_queued++;
	}
	if (n_queued == 0) {
		msg_warn("%s: in the queue with no recipient left; removing", qid);
		j->m.inflight = 0;
		if (store_msg_update(d->st, &j->m) == 0)
			msg_info_as("qmgr", "%s: removed", qid);
		goto done;
	}
	if (j->m.inflight) {
		if (!c->upstream.ambiguous_retry) {
			deliver_set_all(j, DELIVER_AMBIGUOUS, "4.4.2",
					"delivery was interrupted after the final dot may have"
					" been sent; not sending again");
			deliver_record_batch(d, &j, 1);
			job_free(j);
			return 0;
		}
		msg_info("%s: delivery was interrupted after the final dot may have been sent;"
			 " sending again (upstream.ambiguous = retry)", qid);
		if ((err = store_msg_set_inflight(d->st, qid, 0)) != 0)
			msg_warn("%s: cannot clear the inflight mark: %s", qid,
				 store_strerror(err));
		j->m.inflight = 0;
	}
	return 1;

done:
	deliver_job_finished(d, j, -1);
	job_free(j);
	return 0;
}

/* deliver_wait - sleep on cv until when (DELIVER_MAX_SLEEP at most), or a signal (lock held) */
static void deliver_wait(struct deliver *d, pthread_cond_t *cv, int64_t when)
{
	int64_t now = clock_us();
	struct timespec ts;

	if (when > now + DELIVER_MAX_SLEEP * US)
		when = now + DELIVER_MAX_SLEEP * US;
	ts = clock_ts(when);
	pthread_cond_timedwait(cv, &d->lock, &ts);
}

/* group_of - the group of upstream up (the default's or a route's); -1: no limits */
static int group_of(struct deliver *d, const struct conf_upstream *up)
{
	size_t i;

	if (d->rates == NULL)
		return -1;
	for (i = 0; i < d->c->n_routes; i++)
		if (up == &d->c->routes[i].up)
			return (int) i + 1;
	return 0;
}

/*
 * groups_close - close the queue's groups that may start no session now
 * (dq_close), open the others (lock held): when one may change without a
 * session's end (a pause's end, a recovery step), INT64_MAX if none may
 */
static int64_t groups_close(struct deliver *d, int64_t now)
{
	int64_t wake = INT64_MAX, when;
	enum deliver_admit a;
	int g;

	for (g = 0; d->rates && g <= (int) d->c->n_routes; g++) {
		a = deliver_rate_check(d->rates[g], now, &when);
		dq_close(&d->q, g, a != DELIVER_ADMITTED);
		if (when > 0 && when < wake)
			wake = when;
	}
	return wake;
}

/*
 * take_batch - the next batch once it may start, or 0 when stopped (lock
 * held). A batch is of one upstream group (dq_take_due): messages loaded
 * before remember theirs, and those of a group that may start no session
 * (paused, or every connection it allows in use: deliver_rate_admit) are
 * passed over, left as they are, until it may; a thread with nothing
 * else due sleeps until a pause ends or a session does. A batch of a
 * known group is admitted here, once (*admitted: the group, counted
 * until its session's group_done()); one of messages never loaded
 * (*admitted -1) is admitted group by group once loaded (send_group).
 */
static size_t take_batch(struct deliver *d, char (*qids)[STORE_QID_SIZE], int *admitted)
{
	int64_t now, start, wake, when;
	enum deliver_admit a;
	size_t n, i;
	int g;

	while (!d->stop) {
		now = clock_us();
		wake = groups_close(d, now);
		start = dq_batch_start(&d->q, now, DELIVER_GATHER, d->t->batch);
		if (start <= now && (n = dq_take_due(&d->q, now, qids, d->t->batch, &g)) > 0) {
			if (g < 0 || (a = deliver_rate_admit(d->rates[g], now, &when))
			    == DELIVER_ADMITTED) {
				*admitted = g;
				return n;
			}
			/* a session began since groups_close() (send_group's): wait as before */
			msg_debug("delivery: upstream%s: %s", d->rates[g]->route,
				  deliver_admit_why(a));
			for (i = 0; i < n; i++)
				dq_put_back(&d->q, qids[i]);
			continue;
		}
		deliver_wait(d, &d->wake, wake < start ? wake : start);
	}
	return 0;
}

/* group_done - a session of group g ended: its connection is free for another */
static void group_done(struct deliver *d, int g)
{
	deliver_rate_done(d->rates[g]);
	pthread_mutex_lock(&d->lock);
	pthread_cond_broadcast(&d->wake);
	pthread_mutex_unlock(&d->lock);
}

/* deliver_group_rate - the limits of upstream group up: the default's or a route's */
struct deliver_rate *deliver_group_rate(struct deliver *d, const struct conf_upstream *up)
{
	int g = group_of(d, up);

	return g < 0 ? NULL : d->rates[g];
}

/*
 * hold - group g may start no session (a): its loaded jobs go back to
 * the schedule unsent, as they were (time, attempts, the lease on a
 * shared store), nothing written; take_batch passes them over until it
 * may. Their group is known now. The threads are woken: the session
 * that kept the group closed may have ended (group_done) while these
 * jobs were still busy here, so that the threads it woke found nothing
 * and sleep for up to DELIVER_MAX_SLEEP. A thread woken while the group
 * is still closed passes them over (groups_close) and sleeps again:
 * each job is held once a load, so this wakes no thread in a loop.
 */
static void hold(struct deliver *d, struct deliver_job **jobs, size_t n, int g,
		 enum deliver_admit a)
{
	size_t i;

	pthread_mutex_lock(&d->lock);
	for (i = 0; i < n; i++) {
		dq_put_back(&d->q, jobs[i]->m.qid);
		jobs[i]->held = 1;
	}
	pthread_cond_broadcast(&d->wake);
	pthread_mutex_unlock(&d->lock);
	for (i = 0; i < n; i++)
		msg_debug("%s: waits: upstream%s: %s", jobs[i]->m.qid, d->rates[g]->route,
			  deliver_admit_why(a));
}

/*
 * send_group - one upstream group's jobs to the transport, in a session
 * take_batch admitted (admitted), or admitted here by the group's own
 * limits (deliver_rate.h); if it may not start, the jobs wait (hold).
 * Their queue entries know their group from now on.
 */
static void send_group(struct deliver *d, const struct conf_upstream *up, int g,
		       struct deliver_job **jobs, size_t n, int admitted)
{
	enum deliver_admit a;
	int64_t when;
	size_t i;

	if (g >= 0) {
		pthread_mutex_lock(&d->lock);
		for (i = 0; i < n; i++)
			dq_set_group(&d->q, jobs[i]->m.qid, g);
		pthread_mutex_unlock(&d->lock);
	}
	if (g >= 0 && !admitted
	    && (a = deliver_rate_admit(d->rates[g], clock_us(), &when)) != DELIVER_ADMITTED) {
		hold(d, jobs, n, g, a);
		return;
	}
	d->t->send(d, up, jobs, n);
	if (g >= 0)
		group_done(d, g);
}

/*
 * send_routes - hand a loaded batch to the transport, one upstream group
 * at a time: the jobs of each route stored with them go over a connection
 * of their own, to their own hosts with their own TLS and credentials. A
 * message whose route is no longer in the configuration (a restart with
 * other routes) is deferred, as Postfix defers mail whose transport is
 * misconfigured, never sent to another group: the operator restores the
 * route (or reroutes), and retry.give_up bounds the wait as for any
 * deferral. The jobs are reordered, grouped by route. admitted: the group
 * whose session take_batch admitted (-1: none), let go if none of its
 * jobs is left. Returns how many jobs to record: the first ones; those
 * held back unsent come after them.
 */
static size_t send_routes(struct deliver *d, struct deliver_job **jobs, size_t n, int admitted)
{
	const struct conf_upstream *up;
	struct deliver_job *t;
	char why[DELIVER_REPLY_MAX];
	size_t i, j, k;
	int g;

	for (i = 0; i < n; i = k) {
		for (k = j = i + 1; j < n; j++)
			if (conf_route_same(jobs[j]->m.route, jobs[i]->m.route)) {
				t = jobs[k], jobs[k] = jobs[j], jobs[j] = t;
				k++;
			}
		if ((up = conf_route_upstream(d->c, jobs[i]->m.route)) != NULL) {
			g = group_of(d, up);
			send_group(d, up, g, jobs + i, k - i, g >= 0 && g == admitted);
			if (g >= 0 && g == admitted)
				admitted = -1;
			continue;
		}
		snprintf(why, sizeof(why), "route %s is not in the configuration",
			 jobs[i]->m.route);
		for (j = i; j < k; j++) {
			msg_warn("%s: %s: deferred", jobs[j]->m.qid, why);
			deliver_set_all(jobs[j], DELIVER_DEFERRED, "4.3.5", why);
		}
	}
	if (admitted >= 0)
		group_done(d, admitted);	/* rerouted, or not loaded: no session */
	for (i = j = 0; i < n; i++)
		if (!jobs[i]->held) {
			t = jobs[j], jobs[j] = jobs[i], jobs[i] = t;
			j++;
		}
	return j;
}

/* deliver_thread - take due batches and deliver them until stopped */
static void *deliver_thread(void *arg)
{
	struct deliver *d = arg;
	char (*qids)[STORE_QID_SIZE] = xcalloc(d->t->batch, sizeof(*qids));
	struct deliver_job *jobs = xcalloc(d->t->batch, sizeof(*jobs));
	struct deliver_job **ready = xcalloc(d->t->batch, sizeof(*ready));
	size_t n, i, n_ready, n_sent, bytes;
	int admitted = -1;

	/* Postfix's names: its smtp client, or local for a mailbox */
	log_service(d->c->upstream.maildir ? "local" : "smtp");
	deadline_stop_on(d->stopping_fd);	/* a connect or handshake ends at a stop */
	for (;;) {
		pthread_mutex_lock(&d->lock);
		n = take_batch(d, qids, &admitted);
		pthread_mutex_unlock(&d->lock);
		if (n == 0)
			break;
		for (i = n_ready = bytes = 0; i < n; i++) {
			/* bounded memory: leave the rest to the next pass */
			if (bytes >= DELIVER_BATCH_BYTES) {
				finished(d, qids[i], 0, clock_us());
				continue;
			}
			if (!job_load(d, qids[i], &jobs[n_ready]))
				continue;
			bytes += jobs[n_ready].m.data_len;
			ready[n_ready] = &jobs[n_ready];
			n_ready++;
		}
		if ((n_sent = send_routes(d, ready, n_ready, admitted)) > 0)
			deliver_record_batch(d, ready, n_sent);
		for (i = 0; i < n_ready; i++)
			job_free(ready[i]);
	}
	free(ready);
	free(jobs);
	free(qids);
	return NULL;
}

/*
 * count_nodes - the nodes alive on a shared store share upstream.rate:
 * each node sends its part (deliver_rate.h). Between a node's start or
 * end and the next count, the parts add up to a little more or less than
 * the rate; a store that cannot be read keeps the last count.
 */
static void count_nodes(struct deliver *d)
{
	struct store_stats s;
	size_t i;
	int err;

	if (d->rates == NULL)
		return;
	if ((err = store_stats(d->st, &s, STORE_STATS_NODES)) != 0) {
		msg_debug("delivery: nodes alive not counted: %s", store_strerror(err));
		return;
	}
	for (i = 0; i <= d->c->n_routes; i++)
		deliver_rate_nodes(d->rates[i], s.nodes);
}

/* take_one - store_queue_take() callback: leased to this node, due now */
static int take_one(void *arg, const struct store_msg *m)
{
	deliver_schedule(arg, m->qid, clock_us());
	return 0;
}

/*
 * take_room - how many due messages the taker may lease (lock held): the
 * local queue holds what every delivery thread can take in one batch
 * (want), not counting the messages waiting for a group that may start
 * no session (its upstream paused or busy), which would otherwise keep
 * the other groups' mail in the shared queue; the take passes over such
 * a group's (closed_routes), so its backlog is not leased by this node
 */
static size_t take_room(struct deliver *d, size_t want)
{
	size_t open = dq_count(&d->q) - dq_closed(&d->q);

	return open < want ? want - open : 0;
}

/*
 * closed_routes - the routes whose mail the taker passes over (lock held),
 * into skip (NULL: the default upstream), how many: those of a group that
 * may start no session now (paused, or every connection it allows in use)
 * and has mail waiting here already, enough for when it may. One with
 * none waiting here is taken, so that a connection freed finds work.
 */
static size_t closed_routes(struct deliver *d, int64_t now, const char **skip)
{
	int64_t when;
	size_t n = 0;
	int g;

	for (g = 0; d->rates && g <= (int) d->c->n_routes; g++)
		if (dq_waiting(&d->q, g) > 0
		    && deliver_rate_check(d->rates[g], now, &when) != DELIVER_ADMITTED)
			skip[n++] = g == 0 ? NULL : d->c->routes[g - 1].name;
	return n;
}

/*
 * take_thread - a shared store: renew the leases held, and lease due mail
 * while the local queue has room for it (take_room), every
 * DELIVER_TAKE_EVERY or at once after a flush
 */
static void *take_thread(void *arg)
{
	struct deliver *d = arg;
	size_t room, n_skip, want = d->t->batch * d->n_threads;
	const char **skip = xcalloc(d->c->n_routes + 1, sizeof(*skip));
	int64_t now, renew_at = 0, count_at = 0;
	int err;

	log_service("qmgr");		/* Postfix's queue manager: what is due */
	for (;;) {
		pthread_mutex_lock(&d->lock);
		if (!d->stop && !d->take_now)
			deliver_wait(d, &d->take_wake, clock_us() + DELIVER_TAKE_EVERY);
		d->take_now = 0;
		room = take_room(d, want);
		n_skip = closed_routes(d, clock_us(), skip);
		pthread_mutex_unlock(&d->lock);
		if (deliver_stopping(d))
			break;
		now = clock_us();
		if (now >= renew_at) {
			if ((err = store_lease_renew(d->st)) != 0)
				msg_debug("delivery: leases not renewed: %s", store_strerror(err));
			renew_at = now + d->c->store.lease * US / 3;
		}
		if (now >= count_at) {
			count_nodes(d);
			count_at = now + DELIVER_NODES_EVERY;
		}
		if (room > 0
		    && (err = store_queue_take(d->st, now, room, skip, n_skip, take_one, d)) != 0)
			msg_debug("delivery: nothing taken from the shared queue: %s",
				  store_strerror(err));
	}
	free(skip);
	return NULL;
}

/* load_one - store_queue_walk(STORE_WALK_MINE) callback: schedule what the store holds */
static int load_one(void *arg, const struct store_msg *m)
{
	struct deliver *d = arg;

	dq_add(&d->q, m->qid, m->next_attempt);
	return 0;
}

/* deliver_start - load the queue and start the threads */
struct deliver *deliver_start(const struct conf *c, struct store *st, struct commit *cm,
			      const struct deliver_transport *t)
{
	struct deliver *d = xcalloc(1, sizeof(*d));
	size_t i;
	int err;

	d->c = c;
	d->retry = c->retry;
	d->t = t;
	d->st = st;
	d->cm = cm;
	d->shared = (store_caps(st) & STORE_CAP_SHARED) != 0;
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->wake, NULL);
	pthread_cond_init(&d->take_wake, NULL);
	dq_init(&d->q, t->limited ? c->n_routes + 1 : 0);
	if ((d->stopping_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
		msg_fatal("delivery: eventfd: %s", strerror(errno));
	/* conf.c: upstream.connections is 1 at least; a maildir, or a host at least */
	d->n_threads = t->one_thread ? 1 : (size_t) c->upstream.connections;
	if (t->limited) {
		d->rates = xcalloc(c->n_routes + 1, sizeof(*d->rates));
		d->rates[0] = deliver_rate_new(NULL, &c->upstream);
		for (i = 0; i < c->n_routes; i++) {
			d->rates[i + 1] = deliver_rate_new(c->routes[i].name, &c->routes[i].up);
			/* a thread for each of its sessions: no group waits for another's */
			d->n_threads += (size_t) c->routes[i].up.connections;
		}
	}
	if ((err = store_queue_walk(st, STORE_WALK_MINE, load_one, d)) != 0)
		msg_fatal("delivery: cannot list the queue: %s", store_strerror(err));
	msg_info("delivery: %zu queued, %zu thread%s, %s %s", dq_count(&d->q), d->n_threads,
		 d->n_threads == 1 ? "" : "s", t->name,
		 c->upstream.maildir ? c->upstream.maildir : c->upstream.hosts[0].host);
	if (d->shared)
		count_nodes(d);		/* before the first session */
	d->threads = xcalloc(d->n_threads, sizeof(*d->threads));
	for (i = 0; i < d->n_threads; i++)
		if ((err = pthread_create(&d->threads[i], NULL, deliver_thread, d)) != 0)
			msg_fatal("delivery: cannot start a thread: %s", strerror(err));
	if (d->shared && (err = pthread_create(&d->taker, NULL, take_thread, d)) != 0)
		msg_fatal("delivery: cannot start a thread: %s", strerror(err));
	return d;
}

/* deliver_enqueue - a message was just committed: deliver it now */
void deliver_enqueue(struct deliver *d, const char *qid)
{
	deliver_schedule(d, qid, clock_us());
}

/* deliver_stop - stop taking work, let sessions in progress end, join */
void deliver_stop(struct deliver *d)
{
	size_t i;

	if (d == NULL)
		return;
	pthread_mutex_lock(&d->lock);
	d->stop = 1;
	pthread_cond_broadcast(&d->wake);
	pthread_cond_signal(&d->take_wake);
	pthread_mutex_unlock(&d->lock);
	(void) !eventfd_write(d->stopping_fd, 1);	/* stays readable: wakes every bridge */
	for (i = 0; i < d->n_threads; i++)
		pthread_join(d->threads[i], NULL);
	if (d->shared)
		pthread_join(d->taker, NULL);
	free(d->threads);
	for (i = 0; d->rates && i <= d->c->n_routes; i++)
		deliver_rate_free(d->rates[i]);
	free(d->rates);
	close(d->stopping_fd);
	dq_free(&d->q);
	pthread_cond_destroy(&d->wake);
	pthread_cond_destroy(&d->take_wake);
	pthread_mutex_destroy(&d->lock);
	free(d);
}

/* deliver_stopping - has deliver_stop() been called? (backends cut retries short) */
int deliver_stopping(struct deliver *d)
{
	int stop;

	pthread_mutex_lock(&d->lock);
	stop = d->stop;
	pthread_mutex_unlock(&d->lock);
	return stop;
}
