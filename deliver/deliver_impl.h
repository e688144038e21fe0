/*
 * NAME
 *	deliver_impl 3h
 * SUMMARY
 *	what the delivery files share: the scheduler and one message's job
 * DESCRIPTION
 *	deliver.c owns the scheduler (deliver_admin.c its operator's entry
 *	points): it loads a job and hands a batch of jobs to the transport
 *	(a struct deliver_transport, below: deliver_maildir.c's, or
 *	esmtp/deliver_smtp.c's);
 *	deliver_record.c records each job's results: log lines, store
 *	update, retry time, bounce notifications. A transport only fills in
 *	job->res[] and job->relay; every recipient still queued at load time
 *	has a result, "deferred, not attempted" until the transport says
 *	otherwise. Not for use outside deliver/ and its transports
 *	(deliver/esmtp/).
 */
#ifndef DELIVER_DELIVER_IMPL_H
#define DELIVER_DELIVER_IMPL_H

#include <pthread.h>
#include <stdint.h>

#include "../conf/conf.h"
#include "../store/store.h"
#include "deliver.h"
#include "deliver_policy.h"
#include "deliver_queue.h"
#include "deliver_rate.h"

#define US			1000000LL

#define DELIVER_REPLY_MAX	1024	/* one result's reply text */
#define DELIVER_RELAY_MAX	320	/* "host[address]:port" */

struct deliver {
	const struct conf *c;		/* not owned */
	const struct deliver_transport *t;	/* not owned */
	struct store *st;		/* not owned */
	struct commit *cm;		/* not owned; NULL: marks in their own transactions */
	pthread_mutex_t lock;		/* protects q, stop, take_now and retry */
	struct conf_retry retry;	/* c->retry, or SIGHUP's: deliver_retry_settings() */
	pthread_cond_t wake;		/* new work, earlier work, or stop */
	/* a shared store (STORE_CAP_SHARED): the taker thread leases due mail from it */
	int shared;
	pthread_t taker;
	pthread_cond_t take_wake;	/* flush, or stop */
	int take_now;			/* a flush asked the taker to look at once */
	struct dq q;			/* owned */
	int stop;
	int stopping_fd;		/* eventfd, readable from deliver_stop() on: each
					 * delivery thread's deadline_stop_on(), and so its
					 * bridges' (esmtp/deliver_bridge.c) */
	pthread_t *threads;		/* owned */
	size_t n_threads;		/* upstream.connections (1: a one-thread transport),
					 * and each route's connections */
	struct deliver_rate **rates;	/* owned, one per upstream group: [0] the default
					 * upstream's, [1 + i] route i's (the queue's groups);
					 * NULL: a transport with no limits (Maildir) */
	int marks_refused;		/* inflight marks refused in a row, by any
					 * thread (atomic): how long the rest of a
					 * session waits (esmtp/deliver_smtp.c) */
};

/* one recipient's result of this attempt */
struct deliver_result {
	int attempted;			/* the recipient was queued at load time */
	enum deliver_outcome outcome;
	char dsn[DELIVER_DSN_SIZE];			/* "4.4.1" */
	char reply[DELIVER_REPLY_MAX];	/* upstream reply or our own words */
};

/* one message being delivered */
struct deliver_job {
	struct store_msg m;		/* owned: store_msg_free() */
	struct deliver_result *res;	/* owned; one per m.rcpts[] */
	char relay[DELIVER_RELAY_MAX];	/* "host[ip]:port", "maildir"; "": logged "none" */
	char remote_mta[256];		/* upstream host for the DSN, "" if none */
	int queued;			/* after deliver_replied: a recipient is left to try,
					 * at m.next_attempt */
	int decided;			/* deliver_replied done: the outcome is final */
	int recorded;			/* and written to the store */
	int64_t unwritten;		/* job_record: the store refused it since then; 0 not */
	int no_dot;			/* no final dot went out, yet the mark may be
					 * durable: it failed (an unknown outcome, then a
					 * refused retry), or it was set after the bridge
					 * was over or cut (nothing goes up after those):
					 * job_revive */
	int64_t reviving;		/* job_revive: asked since then (us); 0 not */
	int64_t until;			/* postponed: due again then (clock_us) */
	int postponed;			/* deliver_job_postpone: deferred to until,
					 * no attempt charged */
	int held;			/* not sent, nothing to record: back in the
					 * schedule as it was (its group was closed) */
};

/*
 * deliver_mark - durably mark a message: its final dot is about to go out.
 * The outcomes of jobs[] that deliver_replied() decided and that are not
 * yet written go in the same transaction, so that an outcome waits for
 * no more than the next message's mark (or the end of the batch).
 */
int deliver_mark(struct deliver *d, const char *qid, struct deliver_job *const *jobs,
		 size_t n);

/*
 * deliver_replied - every result of j is known (its final dot was
 * answered): decide it now (once), log it, and have it written with the
 * next mark, or after the batch; a bounce with a non-delivery notice is
 * written at once, in one transaction with its notice
 */
void deliver_replied(struct deliver *d, struct deliver_job *j);


/* deliver_job.c: one job's results */

/* deliver_set - record one recipient's result (dsn NULL: taken from reply) */
void deliver_set(struct deliver_job *j, size_t i, enum deliver_outcome o,
		 const char *dsn, const char *reply);

/* deliver_set_all - the same result for every attempted recipient */
void deliver_set_all(struct deliver_job *j, enum deliver_outcome o,
		     const char *dsn, const char *reply);

/*
 * deliver_job_postpone - j got nowhere (throttled, or another's mark
 * refused): due again at until (clock_us), no attempt charged, every
 * recipient in the attempt deferred with dsn and why; 1 if so, 0 for a
 * job already decided or with a recipient's final outcome (left as is)
 */
int deliver_job_postpone(struct deliver_job *j, int64_t until, const char *dsn,
			 const char *why);

/* deliver.c: the scheduler's side of a job's end */

/* deliver_schedule - (re)queue a QID due at when; a busy one once its attempt is done */
void deliver_schedule(struct deliver *d, const char *qid, int64_t when);

/* deliver_job_finished - the same for a loaded job: the lease it was loaded under alone is let go */
void deliver_job_finished(struct deliver *d, const struct deliver_job *j, int64_t next);

/* deliver_wake_taker - a shared store: the taker reads the shared queue at once */
void deliver_wake_taker(struct deliver *d);

/* deliver_record.c: what a job's results become */

/*
 * deliver_record_batch - decide the jobs not decided yet, write every
 * outcome (in one transaction if it can), reschedule or forget each
 * message; an outcome the store refused is tried again, once a second,
 * until written or delivery stops
 */
void deliver_record_batch(struct deliver *d, struct deliver_job **jobs, size_t n);

/*
 * deliver_group_rate - the limits of the upstream group up (the default
 * upstream or a route's); NULL for a transport with none
 */
struct deliver_rate *deliver_group_rate(struct deliver *d, const struct conf_upstream *up);

/* deliver_stopping - has deliver_stop() been called? */
int deliver_stopping(struct deliver *d);

/*
 * deliver_retry_settings - the retry settings in force: a copy of one whole set,
 * the start's or the last SIGHUP's, never some of each (lock not held)
 */
struct conf_retry deliver_retry_settings(struct deliver *d);

/*
 * A transport (deliver.h): where a batch of loaded jobs goes. Its send()
 * fills in every job's res[] and relay, and marks each message
 * (deliver_mark()) before its final dot, or the Maildir's rename.
 */
struct deliver_transport {
	const char *name;		/* "maildir", "upstream": the start's log line */
	int one_thread;			/* one delivery thread, not upstream.connections */
	int limited;			/* upstream.rate and throttling feedback apply */
	size_t batch;			/* messages per batch at most */
	/* every job of a batch has the one upstream group up (a route's, or the default) */
	void (*send)(struct deliver *d, const struct conf_upstream *up,
		     struct deliver_job **jobs, size_t n);
};

#endif
