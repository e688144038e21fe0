/*
 * NAME
 *	deliver_rate 3h
 * SUMMARY
 *	an upstream's rate and concurrency limits, and its throttling feedback
 * DESCRIPTION
 *	upstream.rate and upstream.recipient_rate are token buckets shared by
 *	the upstream's connections (struct deliver_bucket): each MAIL, and
 *	each RCPT, takes a token before it is written, waiting for it if
 *	need be. A bucket holds one token at most: messages go out evenly
 *	spaced, never in a burst that a provider's own limit would refuse.
 *	A change of rate (a reload, throttling, a recovery step, the nodes
 *	alive) moves the tokens already taken ahead of now to it, and their
 *	sleepers with them, within a second (deliver_bucket_rate()).
 *	On a store shared by several nodes each node takes its share of the
 *	limit: the rate divided by the nodes alive (deliver_rate_nodes()).
 *
 *	Throttling feedback (struct deliver_feedback), as Postfix's
 *	concurrency feedback: a throttling reply (deliver_rate_reply_throttles())
 *	halves the concurrency, sets the rate to 4/5 of what the upstream
 *	took in the second before (or of the rate in force, if lower), and
 *	pauses the upstream: no session starts, and the messages of the
 *	session refused wait for the pause's end, none charged an attempt.
 *	The pause is 1 s, doubled by an episode that follows within 2 s of
 *	the last pause's end (the upstream still refuses: a wall), 60 s at
 *	most. Refusals until the pause ends (other
 *	connections' sessions in flight) belong to the same episode. Then
 *	every second one connection more and a twentieth more rate, until
 *	upstream.connections and upstream.rate are back; without
 *	upstream.rate, the rate learned is lifted once it has doubled.
 *
 *	The deliver_bucket and deliver_feedback functions are pure (the
 *	time is an argument) for the unit tests; struct deliver_rate is
 *	the one upstream's state the delivery threads share, under its lock.
 *
 *	Each upstream group has one: the default upstream's (route NULL),
 *	whose state /metrics and idemrelayctl stats show, and each route's
 *	(conf_route.c), named in its log lines. A route's throttling slows
 *	and pauses that route alone.
 */
#ifndef DELIVER_DELIVER_RATE_H
#define DELIVER_DELIVER_RATE_H

#include <pthread.h>
#include <stdint.h>

#include "../conf/conf.h"

/* a token bucket of one token (GCRA) */
struct deliver_bucket {
	double rate;			/* tokens a second; 0: no limit */
	int64_t tat;			/* us: when the next token is free */
	int64_t taken;			/* takes so far: a take's ticket */
};

/* deliver_bucket_take - take the next token at now: us to wait for it (0: at once) */
int64_t deliver_bucket_take(struct deliver_bucket *b, int64_t now);

/* deliver_bucket_rate - a new rate at now; the slots taken ahead move with it */
void deliver_bucket_rate(struct deliver_bucket *b, double rate, int64_t now);

/* deliver_bucket_slot - when the take whose ticket (taken after it) is may go */
int64_t deliver_bucket_slot(const struct deliver_bucket *b, int64_t ticket);

#define DELIVER_FB_SLOTS	100	/* the second before now, in 10 ms slots */

struct deliver_feedback {
	int conc_max;			/* upstream.connections */
	double rate_max;		/* this node's share of upstream.rate; 0: none */
	int conc;			/* sessions allowed now */
	double rate;			/* messages a second now; 0: no limit */
	int throttled;
	int episodes;			/* since the last full recovery */
	int64_t pause_until;		/* us: no session starts before */
	int64_t step_at;		/* us: the next recovery step */
	double lift;			/* no rate_max: the rate learned is lifted here */
	int64_t slot_at[DELIVER_FB_SLOTS];	/* the 10 ms slot a count is of */
	unsigned slot_n[DELIVER_FB_SLOTS];	/* deliveries in it */
};

/*
 * deliver_feedback_limits - new limits (start, reload, nodes); a throttled
 * state keeps below them, one not throttled takes them whole
 */
void deliver_feedback_limits(struct deliver_feedback *fb, int conc_max, double rate_max);

/* deliver_feedback_sent - a message was delivered at now */
void deliver_feedback_sent(struct deliver_feedback *fb, int64_t now);

/* deliver_feedback_seen - messages a second delivered in the second up to now */
double deliver_feedback_seen(const struct deliver_feedback *fb, int64_t now);

/*
 * deliver_feedback_throttle - a throttling reply at now: 1 if that starts
 * throttling, 0 if throttled already (a new episode or the same one)
 */
int deliver_feedback_throttle(struct deliver_feedback *fb, int64_t now);

/* deliver_feedback_tick - recover as time goes: 1 when throttling ends */
int deliver_feedback_tick(struct deliver_feedback *fb, int64_t now);

/*
 * deliver_rate_reply_throttles - is this reply line ("421 4.7.0 ...") the
 * upstream asking to slow down? A 421 greeting; any 4xx with 4.7.0 or
 * 4.7.28, or a word starting "rate", "too many", "throttl" in its text;
 * never a 452 or 4.5.3 (too many recipients: a message's own, not a rate)
 */
int deliver_rate_reply_throttles(const char *line, int greeting);

/* one upstream's limits as the delivery threads share them */
struct deliver_rate {
	pthread_mutex_t lock;		/* protects everything below */
	struct deliver_bucket msgs, rcpts;
	struct deliver_feedback fb;
	int rate, rcpt_rate;		/* upstream.rate, upstream.recipient_rate; 0: none */
	int nodes;			/* alive, sharing the limits; 1 at least */
	int active;			/* sessions running */
	uint64_t episodes;		/* throttling episodes since start */
	char route[72];			/* " (route NAME)" for the log; "": the default
					 * upstream, /metrics' upstream */
	char name[65];			/* the route's name; "": the default upstream */
};

/*
 * deliver_rate_new - the limits of an upstream group, up's connections, rate
 * and recipient_rate; route: its route's name, NULL for the default upstream
 */
struct deliver_rate *deliver_rate_new(const char *route, const struct conf_upstream *up);
void deliver_rate_free(struct deliver_rate *r);	/* NULL-safe */

/* deliver_rate_configure - up's rate and recipient_rate (SIGHUP); connections stay */
void deliver_rate_configure(struct deliver_rate *r, const struct conf_upstream *up);

/* deliver_rate_nodes - n nodes alive share the limits */
void deliver_rate_nodes(struct deliver_rate *r, int n);

/*
 * Why a session may not start now. The rates never refuse one: each MAIL
 * and RCPT of a session waits for its token (deliver_rate_take).
 */
enum deliver_admit {
	DELIVER_ADMITTED,		/* it may */
	DELIVER_ADMIT_PAUSED,		/* throttled, in its pause */
	DELIVER_ADMIT_LOWERED,		/* every session of a concurrency throttling
					 * lowered is running */
	DELIVER_ADMIT_BUSY,		/* every one of its connections is in use */
};

/* deliver_admit_why - the reason in words, for the log ("paused", ...) */
const char *deliver_admit_why(enum deliver_admit a);

/*
 * deliver_rate_admit - may a session start at now? DELIVER_ADMITTED: it
 * counts as running until deliver_rate_done(); else why not. *when: when
 * to ask again (us, clock_us): the pause's end, the next recovery step
 * (also for an upstream admitted while throttled, so that time heals),
 * 0 for no time of its own, or -1: when a running session ends
 */
enum deliver_admit deliver_rate_admit(struct deliver_rate *r, int64_t now, int64_t *when);

/* deliver_rate_check - the same answer, without counting a session */
enum deliver_admit deliver_rate_check(struct deliver_rate *r, int64_t now, int64_t *when);
void deliver_rate_done(struct deliver_rate *r);

/* deliver_rate_unpause - end a pause now (idemrelayctl flush); the limits stay down */
void deliver_rate_unpause(struct deliver_rate *r);

/*
 * deliver_rate_take - sleep until a MAIL (b: r->msgs), a RCPT (r->rcpts)
 * may be written, delivery stops, or gone(arg) (NULL: never) says the
 * session is over; a change of rate while it sleeps moves its slot
 */
void deliver_rate_take(struct deliver_rate *r, struct deliver_bucket *b,
		       int (*gone)(const void *), const void *arg);

/* deliver_rate_sent - the upstream took a message */
void deliver_rate_sent(struct deliver_rate *r);

/* deliver_rate_throttled - the upstream answered line, a throttling reply */
void deliver_rate_throttled(struct deliver_rate *r, const char *relay, const char *line);

/* deliver_rate_paused_until - clock_us when the pause ends; 0 if none */
int64_t deliver_rate_paused_until(struct deliver_rate *r);

#endif
