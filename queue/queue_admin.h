/*
 * NAME
 *	queue_admin 3h
 * SUMMARY
 *	the operator's actions on the queue, written once for the daemon and idemrelayctl
 * DESCRIPTION
 *	drop, hold, release, reroute, retry and forget, as idemrelayctl asks them:
 *	through the daemon's control socket (daemon/control.c passes its
 *	scheduler), or by idemrelayctl itself when no daemon runs (no
 *	scheduler: the store alone knows the queue). Either way the same
 *	function finds the messages, applies the same refusals and writes
 *	the same reply: one JSON object, {"ok":true,...} or
 *	{"ok":false,"error":"..."}.
 */
#ifndef QUEUE_QUEUE_ADMIN_H
#define QUEUE_QUEUE_ADMIN_H

#include "../conf/conf.h"
#include "../util/buf.h"
#include "../store/store.h"

/* what the scheduler says of a message a retry made due (queue_admin_sched.retry) */
enum queue_admin_retry {
	QUEUE_ADMIN_UNKNOWN = -1,	/* not in the queue, as far as it knows */
	QUEUE_ADMIN_DUE,		/* due now */
	QUEUE_ADMIN_ACTIVE,		/* being delivered right now */
	QUEUE_ADMIN_WAITING,		/* due, but its upstream may start no session now
					 * (paused, or every connection in use) */
};

/* the daemon's delivery scheduler, as the actions need it; NULL when no daemon runs */
struct queue_admin_sched {
	void *arg;
	/* take qid out of the schedule: 0, or 1 if it is being delivered right now (left alone) */
	int (*unschedule) (void *arg, const char *qid);
	/* a message released from hold: schedule it at when */
	void (*release) (void *arg, const char *qid, int64_t when);
	/* attempt qid (its route: route, NULL the default) now: what became of it */
	enum queue_admin_retry (*retry) (void *arg, const char *qid, const char *route);
	/*
	 * qid's route changed: due now, its upstream group decided again when
	 * loaded; one being delivered, once that attempt ends (not done with)
	 */
	void (*reroute) (void *arg, const char *qid);
};

/* sel.keys at most: a key's forms, as given and as a Message-ID (ctl_key_hashes) */
#define QUEUE_ADMIN_MAX_KEYS	2

/*
 * queue_admin_request - an action as the control socket's request line
 * names it (daemon/control.h): cmd, then args (cut up in place). drop (out
 * of the queue, never delivered; refused while being delivered), hold or
 * release (on every node), reroute (each message's route decided again
 * from its AUTH user and sender with cf's routes) or forget (the claims
 * of a key's forms; now); a malformed one gets a usage error. The daemon
 * runs the requests it is sent, idemrelayctl the ones it would send when
 * none runs.
 */
void queue_admin_request(struct store *st, const struct queue_admin_sched *s,
			 const struct conf *cf, const char *cmd, char *args, int64_t now,
			 struct buf *out);

/* queue_admin_retry - one queued message attempted now (needs a scheduler) */
void queue_admin_retry(struct store *st, const struct queue_admin_sched *s, const char *qid,
		       struct buf *out);

#endif
