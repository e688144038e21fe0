/*
 * NAME
 *	deliver_admin 3
 * SUMMARY
 *	the operator's entry points into the delivery scheduler
 * DESCRIPTION
 *	What the control socket (daemon/control.c) asks of the schedule
 *	deliver.c keeps: a flush of every waiting message, and, through the
 *	struct queue_admin_sched that deliver_admin_sched() fills for
 *	queue_admin.c, one message's retry, its release from hold, its
 *	reroute, and its drop from the schedule. Each takes
 *	the scheduler's lock for the in-memory queue alone; on a shared
 *	store (STORE_CAP_SHARED) the shared queue is the store's, and the
 *	taker thread is woken to read it at once rather than at its next
 *	turn.
 */
#include <stdint.h>

#include "../util/clock.h"
#include "../util/log.h"
#include "deliver_impl.h"

/* deliver_wake_taker - the taker reads the shared queue at once, not at its next turn */
void deliver_wake_taker(struct deliver *d)
{
	pthread_mutex_lock(&d->lock);
	d->take_now = 1;
	pthread_cond_signal(&d->take_wake);
	pthread_mutex_unlock(&d->lock);
}

/* deliver_flush - every waiting message is due now (a shared store's too) */
void deliver_flush(struct deliver *d)
{
	struct store_change now = { -1, 0, NULL, clock_us() };
	size_t i;
	int err;

	if ((err = store_msg_change(d->st, NULL, &now)) != 0)
		msg_warn("control: flush: the shared queue: %s", store_strerror(err));
	for (i = 0; d->rates && i <= d->c->n_routes; i++)
		deliver_rate_unpause(d->rates[i]);	/* now means now, throttled or not */
	pthread_mutex_lock(&d->lock);
	dq_flush(&d->q, clock_us());
	pthread_cond_broadcast(&d->wake);
	pthread_mutex_unlock(&d->lock);
	deliver_wake_taker(d);
}

/*
 * deliver_retry - make one waiting message due now (idemrelayctl retry).
 * Due is not attempted while its upstream group may start no session
 * (the queue passes the group over): that is said (waiting), not "due".
 */
static enum queue_admin_retry deliver_retry(void *arg, const char *qid, const char *route)
{
	struct deliver *d = arg;
	const struct conf_upstream *up;
	struct deliver_rate *r;
	enum dq_state state;
	int64_t when;

	pthread_mutex_lock(&d->lock);
	if ((state = dq_state(&d->q, qid)) == DQ_WAITING && dq_add(&d->q, qid, clock_us()))
		pthread_cond_signal(&d->wake);
	pthread_mutex_unlock(&d->lock);
	if (d->shared && state == DQ_UNKNOWN) {	/* waiting in the shared queue, maybe */
		if (store_msg_change(d->st, qid, &(struct store_change) { -1, 0, NULL, clock_us() }))
			return QUEUE_ADMIN_UNKNOWN;
		deliver_wake_taker(d);
	} else if (state != DQ_WAITING)
		return state == DQ_BUSY_NOW ? QUEUE_ADMIN_ACTIVE : QUEUE_ADMIN_UNKNOWN;
	if ((up = conf_route_upstream(d->c, route)) == NULL || (r = deliver_group_rate(d, up)) == NULL)
		return QUEUE_ADMIN_DUE;
	return deliver_rate_check(r, clock_us(), &when) == DELIVER_ADMITTED
	    ? QUEUE_ADMIN_DUE : QUEUE_ADMIN_WAITING;
}

/*
 * deliver_release - a message released from hold (idemrelayctl release):
 * scheduled at when (still busy, once done: deliver_schedule); on a
 * shared store the shared queue has it, for whichever node takes it first
 */
static void deliver_release(void *arg, const char *qid, int64_t when)
{
	struct deliver *d = arg;

	if (d->shared)
		deliver_wake_taker(d);
	else
		deliver_schedule(d, qid, when);
}

/*
 * deliver_reroute - a message's route changed (idemrelayctl reroute): its
 * queue entry, of no known group until its next load, is due now (the
 * old route's pause, connections and retry time are not its own); one
 * being delivered is so once that attempt ends, unless it is done with
 * then; one waiting in the shared queue was made due there by the
 * reroute's store write (queue_admin.c), and the taker looks at once
 */
static void deliver_reroute(void *arg, const char *qid)
{
	struct deliver *d = arg;
	enum dq_state state;

	pthread_mutex_lock(&d->lock);
	if ((state = dq_state(&d->q, qid)) != DQ_UNKNOWN && dq_regroup(&d->q, qid, clock_us()))
		pthread_cond_signal(&d->wake);
	pthread_mutex_unlock(&d->lock);
	if (state == DQ_UNKNOWN && d->shared)
		deliver_wake_taker(d);
}

/*
 * deliver_drop - take a waiting message out of the schedule (idemrelayctl
 * drop, hold). On a shared store its lease is let go with it: kept, the
 * taker would renew it for as long as this node runs, and no node's take
 * (a release's included) would find the message again.
 */
static int deliver_drop(void *arg, const char *qid)
{
	struct deliver *d = arg;
	enum dq_state state;

	pthread_mutex_lock(&d->lock);
	if ((state = dq_state(&d->q, qid)) == DQ_WAITING)
		dq_done(&d->q, qid, -1);
	pthread_mutex_unlock(&d->lock);
	if (state == DQ_WAITING && d->shared)
		store_lease_release(d->st, qid, 0);
	return state == DQ_BUSY_NOW;
}

/* deliver_admin_sched - d's schedule as the operator's actions take it */
struct queue_admin_sched deliver_admin_sched(struct deliver *d)
{
	return (struct queue_admin_sched) { d, deliver_drop, deliver_release, deliver_retry,
					    deliver_reroute };
}
