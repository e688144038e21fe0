/*
 * NAME
 *	deliver 3
 * SUMMARY
 *	delivery scheduler and threads
 * DESCRIPTION
 *	deliver_start() loads every queued QID from the store into an
 *	in-memory queue (deliver_queue.c) and starts the delivery threads:
 *	upstream.connections of them for SMTP, one for a Maildir. (They are
 *	not util/workq.c's workers: they wait on a schedule ordered by time,
 *	gathering batches, not on a FIFO of jobs; a dispatcher feeding a
 *	work queue would add a hop and a wake-up to every batch.) A thread
 *	sleeps until a batch may start: once the earliest due message has
 *	waited DELIVER_GATHER for others to come due, or at once when a full
 *	batch is due. Messages accepted one by one then share a connection
 *	and one outcome transaction instead of paying for one each (a TCP
 *	handshake, a bridge thread and an fsync per message, measured in
 *	BENCHMARKS.md). It takes up to d->batch due messages, which become
 *	busy so that no other thread takes them, loads them (up to DELIVER_BATCH_BYTES of message data;
 *	the rest is handed back), hands them to the transport in one go (one
 *	upstream connection for the lot), then records each result.
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
 *	due (store_queue_take(), every DELIVER_TAKE_EVERY or at a flush).
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
 *	concurrency, and their throttling feedback (deliver_rate.h): a
 *	thread starts a session only when the upstream is not paused and a
 *	connection is free. On a shared store the taker counts the nodes
 *	alive every DELIVER_NODES_EVERY, and each node sends its part of
 *	upstream.rate.
 *
 *	Routes (conf_route.c): a loaded batch is handed to the transport one
 *	upstream group at a time (send_routes), by the route each message
 *	stored at acceptance; the delivery threads are shared by every group.
 *	Each group's session is admitted by its own limits: while the default
 *	upstream is paused, a thread still takes due batches (take_batch) for
 *	the routes' mail in them, and the default's messages wait for the
 *	pause's end, uncharged, as a paused route's do (postpone).
 *
 *	What an attempt's results become (log lines, bounces, the store's
 *	update, the retry time) is deliver_record.c's.
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
 * deliver_reload - new retry settings, for attempts from now on. They
 * replace the set in force whole, under the lock, and readers take a
 * copy of it (deliver_retry_settings): a reader sees the old set or the new one,
 * never a mix, and nothing is shared to be freed, so no reader can hold
 * a set a reload frees. The conf given to deliver_start() is left as it
 * is (main owns it, and it is const here).
 */
void deliver_reload(struct deliver *d, const struct conf *nc)
{
	pthread_mutex_lock(&d->lock);
	d->retry = nc->retry;
	pthread_mutex_unlock(&d->lock);
	/* the rates; not upstream.connections, which is the number of threads */
	if (d->rate)
		deliver_rate_configure(d->rate, (int) d->n_threads, nc->upstream.rate,
				       nc->upstream.recipient_rate);
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
 * wakes no one (the caller does not hold the lock). A QID leased from
 * the shared queue (leased) may still be busy: the attempt before let
 * its lease go and is about to be done with it; then it comes back when
 * done (dq_again), else this lease would be renewed and never delivered.
 */
void deliver_schedule(struct deliver *d, const char *qid, int64_t when, int leased)
{
	int64_t now = clock_us(), before;

	pthread_mutex_lock(&d->lock);
	before = dq_batch_start(&d->q, now, DELIVER_GATHER, d->batch);
	if ((leased ? dq_again : dq_add) (&d->q, qid, when)
	    && dq_batch_start(&d->q, now, DELIVER_GATHER, d->batch) != before)
		pthread_cond_signal(&d->wake);
	pthread_mutex_unlock(&d->lock);
}

/*
 * finished - a busy QID is done: reschedule at next, or forget it (next
 * < 0). On a shared store it is always forgotten and its lease let go
 * (if a write has not already; lease: the one it was loaded under, 0 if
 * unknown): the shared queue has it, unless this node leased it again
 * meanwhile (deliver_schedule), and that lease is kept.
 */
static void finished(struct deliver *d, const char *qid, int64_t lease, int64_t next)
{
	if (d->shared) {
		store_lease_release(d->st, qid, lease);
		next = -1;
	}
	pthread_mutex_lock(&d->lock);
	dq_done(&d->q, qid, next);
	if (dq_state(&d->q, qid) == DQ_WAITING)
		pthread_cond_signal(&d->wake);
	pthread_mutex_unlock(&d->lock);
}

/* deliver_finished - the same for a QID whose load failed: whichever lease is held */
void deliver_finished(struct deliver *d, const char *qid, int64_t next)
{
	finished(d, qid, 0, next);
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
	int64_t now = clock_us(), first;
	size_t i, n_queued = 0;
	int err;

	memset(j, 0, sizeof(*j));
	if ((err = store_msg_load(d->st, qid, &j->m)) != 0) {
		if (err == STORE_ENOTFOUND) {	/* dropped, or done by another path */
			deliver_finished(d, qid, -1);
			return 0;
		}
		msg_warn("%s: cannot load for delivery: %s", qid, store_strerror(err));
		first = deliver_retry_settings(d).first;
		deliver_finished(d, qid, now + (first > 0 ? first : 60) * US);
		return 0;
	}
	if (j->m.held) {	/* held since it was scheduled: its release schedules it */
		deliver_job_finished(d, j, -1);
		job_free(j);
		return 0;
	}
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
		deliver_job_finished(d, j, -1);
		job_free(j);
		return 0;
	}
	if (j->m.inflight) {
		if (!c->upstream.ambiguous_retry) {
			snprintf(j->relay, sizeof(j->relay), "none");
			deliver_set_all(j, DELIVER_AMBIGUOUS, "4.4.2",
					"delivery was interrupted after the final dot may have"
					" been sent; not sending again");
			deliver_finish_one(d, j);
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
}

/* sched_wait - sleep until when, new work or stop (lock held) */
static void sched_wait(struct deliver *d, int64_t when)
{
	int64_t now = clock_us();
	struct timespec ts;

	if (when > now + DELIVER_MAX_SLEEP * US)
		when = now + DELIVER_MAX_SLEEP * US;
	ts.tv_sec = (time_t) (when / US);
	ts.tv_nsec = (long) (when % US) * 1000;
	pthread_cond_timedwait(&d->wake, &d->lock, &ts);
}

/*
 * take_batch - the next batch once it may start, and the default
 * upstream's limits let a session start (deliver_rate_admit: not paused,
 * a connection free), or 0 when stopped (lock held). A session admitted
 * counts until deliver_thread's deliver_rate_done(); *held is then 0.
 * With routes, a default upstream in its pause does not hold the routes'
 * mail: the batch is taken all the same, *held is when the pause ends,
 * and the default's own messages in it wait for that (send_group), none
 * charged, each put off once a pause. A default upstream whose
 * connections are all busy still holds every thread (a session ends
 * soon; putting its mail off a second at a time would churn the queue).
 */
static size_t take_batch(struct deliver *d, char (*qids)[STORE_QID_SIZE], int64_t *held)
{
	int64_t now, start, admit, step;
	size_t n;

	while (!d->stop) {
		now = clock_us();
		start = dq_batch_start(&d->q, now, DELIVER_GATHER, d->batch);
		/* throttled: wake for each recovery step (after now), even with nothing due */
		step = d->rate ? deliver_rate_recover(d->rate, now) : 0;
		admit = start <= now && d->rate ? deliver_rate_admit(d->rate, now) : 0;
		if (admit != 0 && !(admit > 0 && d->c->n_routes > 0
				    && admit == deliver_rate_paused_until(d->rate))) {
			/* -1: a session's end wakes us (deliver_thread) */
			sched_wait(d, admit < 0 ? now + DELIVER_MAX_SLEEP * US : admit);
			continue;
		}
		if (start <= now && (n = dq_take_due(&d->q, now, qids, d->batch)) > 0) {
			*held = admit;
			return n;
		}
		if (start <= now && d->rate && admit == 0)
			deliver_rate_done(d->rate);
		sched_wait(d, step && step < start ? step : start);
	}
	return 0;
}

/* session_done - a batch's session ended: its connection is free for another thread */
static void session_done(struct deliver *d, int64_t held)
{
	if (d->rate == NULL || held != 0)
		return;
	deliver_rate_done(d->rate);
	pthread_mutex_lock(&d->lock);
	pthread_cond_broadcast(&d->wake);
	pthread_mutex_unlock(&d->lock);
}

/* deliver_group_rate - the limits of upstream group up: the default's or a route's */
struct deliver_rate *deliver_group_rate(struct deliver *d, const struct conf_upstream *up)
{
	size_t i;

	for (i = 0; d->rate && i < d->c->n_routes; i++)
		if (up == &d->c->routes[i].up)
			return d->route_rates[i];
	return d->rate;
}

/*
 * postpone - an upstream group is paused (throttled) or has all its
 * connections busy: its jobs wait, none charged an attempt, until the
 * pause ends, or a second (when a connection frees cannot be known here)
 */
static void postpone(struct deliver_job **jobs, size_t n, const char *route, int64_t until)
{
	char why[DELIVER_REPLY_MAX];
	size_t i;

	snprintf(why, sizeof(why), "%s%s: %s", route ? "route " : "upstream",
		 route ? route : "", until > 0
		 ? "its upstream asked to slow down" : "all its connections are busy");
	if (until <= 0)
		until = clock_us() + US;
	for (i = 0; i < n; i++) {
		snprintf(jobs[i]->relay, sizeof(jobs[i]->relay), "none");
		(void) deliver_job_postpone(jobs[i], until, "4.4.2", why);
	}
}

/*
 * send_group - one upstream group's jobs to the transport. The default
 * upstream's session was admitted by take_batch, unless held says when
 * it may be (then its jobs wait: postpone); a route's is admitted here
 * by its own limits (deliver_rate.h), or its jobs wait.
 */
static void send_group(struct deliver *d, const struct conf_upstream *up, const char *route,
		       struct deliver_job **jobs, size_t n, int64_t held)
{
	struct deliver_rate *r = route ? deliver_group_rate(d, up) : NULL;
	int64_t when;

	if (route == NULL && held != 0) {
		postpone(jobs, n, NULL, held);
		return;
	}
	if (r && (when = deliver_rate_admit(r, clock_us())) != 0) {
		postpone(jobs, n, route, when);
		return;
	}
	d->t->send(d, up, jobs, n);
	if (r)
		deliver_rate_done(r);
}

/* same_route - do two stored routes name the same one (NULL: the default)? */
static int same_route(const char *a, const char *b)
{
	return a == b || (a && b && strcmp(a, b) == 0);
}

/*
 * send_routes - hand a loaded batch to the transport, one upstream group
 * at a time: the jobs of each route stored with them go over a connection
 * of their own, to their own hosts with their own TLS and credentials. A
 * message whose route is no longer in the configuration (a restart with
 * other routes) is deferred, as Postfix defers mail whose transport is
 * misconfigured, never sent to another group: the operator restores the
 * route (or reroutes), and retry.give_up bounds the wait as for any
 * deferral. The jobs are reordered, grouped by route. held: the
 * default upstream admitted no session (take_batch).
 */
static void send_routes(struct deliver *d, struct deliver_job **jobs, size_t n, int64_t held)
{
	const struct conf_upstream *up;
	struct deliver_job *t;
	char why[DELIVER_REPLY_MAX];
	size_t i, j, k;

	for (i = 0; i < n; i = k) {
		for (k = j = i + 1; j < n; j++)
			if (same_route(jobs[j]->m.route, jobs[i]->m.route)) {
				t = jobs[k], jobs[k] = jobs[j], jobs[j] = t;
				k++;
			}
		if ((up = conf_route_upstream(d->c, jobs[i]->m.route)) != NULL) {
			send_group(d, up, jobs[i]->m.route, jobs + i, k - i, held);
			continue;
		}
		snprintf(why, sizeof(why), "route %s is not in the configuration",
			 jobs[i]->m.route);
		for (j = i; j < k; j++) {
			msg_warn("%s: %s: deferred", jobs[j]->m.qid, why);
			snprintf(jobs[j]->relay, sizeof(jobs[j]->relay), "none");
			deliver_set_all(jobs[j], DELIVER_DEFERRED, "4.3.5", why);
		}
	}
}

/* deliver_thread - take due batches and deliver them until stopped */
static void *deliver_thread(void *arg)
{
	struct deliver *d = arg;
	char (*qids)[STORE_QID_SIZE] = xcalloc(d->batch, sizeof(*qids));
	struct deliver_job *jobs = xcalloc(d->batch, sizeof(*jobs));
	struct deliver_job **ready = xcalloc(d->batch, sizeof(*ready));
	size_t n, i, n_ready, bytes;
	int64_t held = 0;

	/* Postfix's names: its smtp client, or local for a mailbox */
	log_service(d->c->upstream.maildir ? "local" : "smtp");
	deadline_stop_on(d->stopping_fd);	/* a connect or handshake ends at a stop */
	for (;;) {
		pthread_mutex_lock(&d->lock);
		n = take_batch(d, qids, &held);
		pthread_mutex_unlock(&d->lock);
		if (n == 0)
			break;
		for (i = n_ready = bytes = 0; i < n; i++) {
			/* bounded memory: leave the rest to the next pass */
			if (bytes >= DELIVER_BATCH_BYTES) {
				deliver_finished(d, qids[i], clock_us());
				continue;
			}
			if (!job_load(d, qids[i], &jobs[n_ready]))
				continue;
			bytes += jobs[n_ready].m.data_len;
			ready[n_ready] = &jobs[n_ready];
			n_ready++;
		}
		if (n_ready == 0) {
			session_done(d, held);
			continue;
		}
		send_routes(d, ready, n_ready, held);
		session_done(d, held);
		deliver_record_batch(d, ready, n_ready);
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
	int n, err;
	size_t i;

	if (d->rate == NULL)
		return;
	if ((err = store_nodes_alive(d->st, &n)) != 0) {
		msg_debug("delivery: nodes alive not counted: %s", store_strerror(err));
		return;
	}
	deliver_rate_nodes(d->rate, n);
	for (i = 0; i < d->c->n_routes; i++)
		deliver_rate_nodes(d->route_rates[i], n);
}

/* take_one - store_queue_take() callback: leased to this node, due now */
static int take_one(void *arg, const struct store_msg *m)
{
	deliver_schedule(arg, m->qid, clock_us(), 1);
	return 0;
}

/*
 * take_thread - a shared store: renew the leases held, and lease due mail
 * while the local queue has room for it (what every delivery thread can
 * take in one batch), every DELIVER_TAKE_EVERY or at once after a flush
 */
static void *take_thread(void *arg)
{
	struct deliver *d = arg;
	size_t room, want = d->batch * d->n_threads;
	int64_t now, renew_at = 0, count_at = 0;
	struct timespec ts;
	int err;

	log_service("qmgr");		/* Postfix's queue manager: what is due */
	for (;;) {
		pthread_mutex_lock(&d->lock);
		if (!d->stop && !d->take_now) {
			now = clock_us() + DELIVER_TAKE_EVERY;
			ts.tv_sec = (time_t) (now / US);
			ts.tv_nsec = (long) (now % US) * 1000;
			pthread_cond_timedwait(&d->take_wake, &d->lock, &ts);
		}
		d->take_now = 0;
		room = dq_count(&d->q) < want ? want - dq_count(&d->q) : 0;
		pthread_mutex_unlock(&d->lock);
		if (deliver_stopping(d))
			break;
		now = clock_us();
		if (now >= renew_at) {
			if ((err = store_lease_renew(d->st, now)) != 0)
				msg_debug("delivery: leases not renewed: %s", store_strerror(err));
			renew_at = now + d->lease / 3;
		}
		if (now >= count_at) {
			count_nodes(d);
			count_at = now + DELIVER_NODES_EVERY;
		}
		if (room > 0 && (err = store_queue_take(d->st, now, room, take_one, d)) != 0)
			msg_debug("delivery: nothing taken from the shared queue: %s",
				  store_strerror(err));
	}
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
	d->lease = c->store.lease * US;
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->wake, NULL);
	pthread_cond_init(&d->take_wake, NULL);
	dq_init(&d->q);
	if ((d->stopping_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
		msg_fatal("delivery: eventfd: %s", strerror(errno));
	if (c->upstream.maildir == NULL && c->upstream.n_hosts == 0)
		msg_fatal("delivery: no upstream.host and no upstream.maildir");
	d->n_threads = t->one_thread || c->upstream.connections <= 0 ? 1
	    : (size_t) c->upstream.connections;
	d->batch = t->batch;
	if (t->limited) {
		d->rate = deliver_rate_new(NULL, (int) d->n_threads, c->upstream.rate,
					   c->upstream.recipient_rate);
		d->route_rates = xcalloc(c->n_routes ? c->n_routes : 1, sizeof(*d->route_rates));
		for (i = 0; i < c->n_routes; i++)
			d->route_rates[i] = deliver_rate_new(c->routes[i].name,
							     c->routes[i].up.connections,
							     c->routes[i].up.rate,
							     c->routes[i].up.recipient_rate);
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
	if (d == NULL || qid == NULL)
		return;
	deliver_schedule(d, qid, clock_us(), 0);
}

/* wake_taker - the taker reads the shared queue at once, not at its next turn */
static void wake_taker(struct deliver *d)
{
	pthread_mutex_lock(&d->lock);
	d->take_now = 1;
	pthread_cond_signal(&d->take_wake);
	pthread_mutex_unlock(&d->lock);
}

/* deliver_flush - every waiting message is due now */
void deliver_flush(struct deliver *d)
{
	size_t i;
	int err;

	if (d == NULL)
		return;
	if (d->shared && (err = store_queue_due(d->st, NULL, clock_us())) != 0)
		msg_warn("control: flush: the shared queue: %s", store_strerror(err));
	if (d->rate)
		deliver_rate_unpause(d->rate);	/* now means now, throttled or not */
	for (i = 0; d->rate && i < d->c->n_routes; i++)
		deliver_rate_unpause(d->route_rates[i]);
	pthread_mutex_lock(&d->lock);
	dq_flush(&d->q, clock_us());
	pthread_cond_broadcast(&d->wake);
	pthread_mutex_unlock(&d->lock);
	wake_taker(d);
}

/* deliver_retry - make one waiting message due now (idemrelayctl retry) */
int deliver_retry(struct deliver *d, const char *qid)
{
	enum dq_state state;

	if (d == NULL)
		return -1;
	pthread_mutex_lock(&d->lock);
	if ((state = dq_state(&d->q, qid)) == DQ_WAITING && dq_add(&d->q, qid, clock_us()))
		pthread_cond_signal(&d->wake);
	pthread_mutex_unlock(&d->lock);
	if (d->shared && state == DQ_UNKNOWN) {	/* waiting in the shared queue, maybe */
		if (store_queue_due(d->st, qid, clock_us()) != 0)
			return -1;
		wake_taker(d);
		return 0;
	}
	return state == DQ_WAITING ? 0 : state == DQ_BUSY_NOW ? 1 : -1;
}

/*
 * deliver_release - a message released from hold (idemrelayctl release):
 * scheduled at when; on a shared store the shared queue has it, for
 * whichever node takes it first
 */
void deliver_release(struct deliver *d, const char *qid, int64_t when)
{
	if (d == NULL)
		return;
	if (!d->shared) {
		deliver_schedule(d, qid, when, 0);
		return;
	}
	wake_taker(d);
}

/*
 * deliver_drop - take a waiting message out of the schedule (idemrelayctl
 * drop, hold). On a shared store its lease is let go with it: kept, the
 * taker would renew it for as long as this node runs, and no node's take
 * (a release's included) would find the message again.
 */
int deliver_drop(struct deliver *d, const char *qid)
{
	enum dq_state state;

	if (d == NULL)
		return 0;
	pthread_mutex_lock(&d->lock);
	if ((state = dq_state(&d->q, qid)) == DQ_WAITING)
		dq_done(&d->q, qid, -1);
	pthread_mutex_unlock(&d->lock);
	if (state == DQ_WAITING && d->shared)
		store_lease_release(d->st, qid, 0);
	return state == DQ_BUSY_NOW;
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
	deliver_rate_free(d->rate);
	for (i = 0; d->route_rates && i < d->c->n_routes; i++)
		deliver_rate_free(d->route_rates[i]);
	free(d->route_rates);
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
