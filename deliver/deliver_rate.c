/*
 * NAME
 *	deliver_rate 3
 * SUMMARY
 *	upstream rate and concurrency limits, throttling feedback
 * DESCRIPTION
 *	See deliver_rate.h. The bucket is GCRA with a burst of one: tat is
 *	when the next token is free; taking one moves it on by 1/rate, and
 *	a taker that comes before tat waits until then. Several connections
 *	taking at once each get their own, later, slot, however far ahead.
 *
 *	The feedback's "rate seen" is the upstream's: deliveries in the
 *	second before the refusal, counted in 10 ms slots (a count, not a
 *	span's rate: a burst of 100 in a tenth of a second was 100 a second
 *	to a provider's meter, not 1,000). Setting the rate a little under
 *	it keeps the next second under a limit of "N a second" that the
 *	refusal revealed.
 * DIAGNOSTICS
 *	upstream RELAY: throttling: REPLY; concurrency C, rate R/s, deliveries paused for S s
 *	upstream: throttling ended: concurrency C, rate R/s
 */
#include <ctype.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "../queue/metrics.h"
#include "../util/buf.h"
#include "../util/clock.h"
#include "../util/deadline.h"
#include "../util/log.h"
#include "deliver_policy.h"
#include "deliver_rate.h"

#define US		1000000LL
#define FB_PAUSE	1		/* s: the first episode's pause, doubled by each after */
#define FB_PAUSE_MAX	60		/* s: the longest pause */
#define FB_STEP		(1 * US)	/* a recovery step this often */
#define FB_SLOT		(US / DELIVER_FB_SLOTS)	/* 10 ms */
#define FB_WALL		(2 * US)	/* refused this soon after a pause: the next one doubles */
#define FB_CUT		0.8		/* the rate after a refusal, of the rate seen */
#define FB_RAISE	1.05		/* a recovery step's rate: a probe, not a burst */
#define FB_RATE_MIN	0.1		/* messages a second, at least */

/* step - us between two tokens at rate */
static int64_t step(double rate)
{
	return (int64_t) ((double) US / rate);
}

/* deliver_bucket_take - the next token's slot, and the wait for it */
int64_t deliver_bucket_take(struct deliver_bucket *b, int64_t now)
{
	int64_t wait;

	b->taken++;
	if (b->rate <= 0)
		return 0;
	if (b->tat < now)
		b->tat = now;
	wait = b->tat - now;
	b->tat += step(b->rate);
	return wait;
}

/*
 * deliver_bucket_rate - a new rate at now: the slots taken ahead of now
 * are spread at it (tat moves; deliver_bucket_slot() moves each with it),
 * so that a reload or the end of throttling frees what a lower rate had
 * reserved, and a lower rate holds back what a higher one had
 */
void deliver_bucket_rate(struct deliver_bucket *b, double rate, int64_t now)
{
	if (rate == b->rate)
		return;
	if (rate <= 0)
		b->tat = 0;
	else if (b->rate > 0 && b->tat > now)
		b->tat = now + (int64_t) ((double) (b->tat - now) * b->rate / rate);
	b->rate = rate;
}

/*
 * deliver_bucket_slot - when the token of the take that made b->taken
 * ticket is free, at the bucket's rate now: the slots after it are
 * contiguous up to tat (a take that found tat past found every slot past)
 */
int64_t deliver_bucket_slot(const struct deliver_bucket *b, int64_t ticket)
{
	if (b->rate <= 0)
		return 0;
	return b->tat - (b->taken - ticket + 1) * step(b->rate);
}

/* deliver_feedback_limits - new limits; a throttled state keeps below them */
void deliver_feedback_limits(struct deliver_feedback *fb, int conc_max, double rate_max)
{
	fb->conc_max = conc_max > 0 ? conc_max : 1;
	fb->rate_max = rate_max > 0 ? rate_max : 0;
	if (!fb->throttled) {
		fb->conc = fb->conc_max;
		fb->rate = fb->rate_max;
		return;
	}
	if (fb->conc > fb->conc_max)
		fb->conc = fb->conc_max;
	if (fb->rate_max > 0 && (fb->rate == 0 || fb->rate > fb->rate_max))
		fb->rate = fb->rate_max;
}

/* deliver_feedback_sent - note a delivery, in its 10 ms slot */
void deliver_feedback_sent(struct deliver_feedback *fb, int64_t now)
{
	int64_t slot = now / FB_SLOT;
	size_t i = (size_t) (slot % DELIVER_FB_SLOTS);

	if (fb->slot_at[i] != slot) {
		fb->slot_at[i] = slot;
		fb->slot_n[i] = 0;
	}
	fb->slot_n[i]++;
}

/* deliver_feedback_seen - deliveries in the second up to now (its slots) */
double deliver_feedback_seen(const struct deliver_feedback *fb, int64_t now)
{
	int64_t slot = now / FB_SLOT;
	unsigned n = 0;
	size_t i;

	for (i = 0; i < DELIVER_FB_SLOTS; i++)
		if (fb->slot_n[i] && slot - fb->slot_at[i] >= 0
		    && slot - fb->slot_at[i] < DELIVER_FB_SLOTS)
			n += fb->slot_n[i];
	return (double) n;
}

/* deliver_feedback_throttle - a throttling reply at now */
int deliver_feedback_throttle(struct deliver_feedback *fb, int64_t now)
{
	int started = !fb->throttled;
	double base = fb->rate, seen = deliver_feedback_seen(fb, now);

	if (fb->throttled && now < fb->pause_until)
		return 0;		/* the same episode: sessions that were in flight */
	if (now >= fb->pause_until + FB_WALL)
		fb->episodes = 0;	/* a probe too far after a while of sending, not a wall */
	fb->conc = fb->conc > 1 ? fb->conc / 2 : 1;
	if (seen > 0 && (base == 0 || seen < base))
		base = seen;
	if (base > 0) {
		fb->rate = base * FB_CUT > FB_RATE_MIN ? base * FB_CUT : FB_RATE_MIN;
		fb->lift = fb->rate * 2;
	}
	fb->pause_until = now + deliver_backoff(FB_PAUSE, FB_PAUSE_MAX, fb->episodes + 1) * US;
	fb->step_at = fb->pause_until + FB_STEP;
	fb->episodes++;
	fb->throttled = 1;
	return started;
}

/* deliver_feedback_tick - one recovery step a second after the pause */
int deliver_feedback_tick(struct deliver_feedback *fb, int64_t now)
{
	if (!fb->throttled || now < fb->step_at)
		return 0;
	fb->step_at = now + FB_STEP;
	if (fb->conc < fb->conc_max)
		fb->conc++;
	if (fb->rate > 0) {
		fb->rate *= FB_RAISE;
		if (fb->rate_max > 0 && fb->rate >= fb->rate_max)
			fb->rate = fb->rate_max;
		else if (fb->rate_max == 0 && fb->rate >= fb->lift)
			fb->rate = 0;
	}
	if (fb->conc < fb->conc_max || fb->rate != fb->rate_max)
		return 0;
	fb->throttled = 0;
	fb->episodes = 0;
	return 1;
}

/* has_word - a word of s starts with w (any case): "rate" in "rate-limited", not "generated" */
static int has_word(const char *s, const char *w)
{
	size_t n = strlen(w);
	const char *p;

	for (p = s; *p; p++)
		if ((p == s || !isalpha((unsigned char) p[-1])) && strncasecmp(p, w, n) == 0)
			return 1;
	return 0;
}

/* has_code - the text starts with an enhanced status code ("4.7.0 ...") */
static int has_code(const char *text)
{
	return isdigit((unsigned char) text[0]) && text[1] == '.';
}

/* deliver_rate_reply_throttles - a reply asking to slow down */
int deliver_rate_reply_throttles(const char *line, int greeting)
{
	const char *text;

	if (strlen(line) < 3 || line[0] != '4' || !isdigit((unsigned char) line[1])
	    || !isdigit((unsigned char) line[2]) || (line[3] != 0 && line[3] != ' '
						       && line[3] != '-'))
		return 0;
	if (greeting && strncmp(line, "421", 3) == 0)
		return 1;
	text = line[3] ? line + 4 : line + 3;
	/*
	 * too many recipients (RFC 5321 4.5.3.1.10): the rest go in another
	 * transaction; a 452 says so unless its enhanced code says otherwise
	 */
	if (strncmp(text, "4.5.3", 5) == 0 || (strncmp(line, "452", 3) == 0 && !has_code(text)))
		return 0;
	if ((strncmp(text, "4.7.0", 5) == 0 && (text[5] == ' ' || text[5] == 0))
	    || (strncmp(text, "4.7.28", 6) == 0 && (text[6] == ' ' || text[6] == 0)))
		return 1;
	return has_word(text, "rate") || has_word(text, "too many") || has_word(text, "throttl");
}

/* share - a limit over the nodes alive (1 at least: deliver_rate_nodes) */
static double share(int limit, int nodes)
{
	return limit > 0 ? (double) limit / nodes : 0;
}

/* publish - the state to /metrics (lock held) */
static void publish(struct deliver_rate *r)
{
	struct metrics_upstream u;

	u.rate = r->fb.rate;
	u.concurrency = r->fb.conc;
	u.active = r->active;
	u.throttled = r->fb.throttled;
	u.nodes = r->nodes;
	u.episodes = r->episodes;
	metrics_upstream_set(r->name, &u);
}

/* apply - the buckets' rates after a change of the feedback (lock held) */
static void apply(struct deliver_rate *r)
{
	double rcpt = share(r->rcpt_rate, r->nodes);
	int64_t now = clock_mono_us();

	deliver_bucket_rate(&r->msgs, r->fb.rate, now);
	/* recipients slow down with the messages */
	if (rcpt > 0 && r->fb.rate_max > 0 && r->fb.rate > 0)
		rcpt *= r->fb.rate / r->fb.rate_max;
	deliver_bucket_rate(&r->rcpts, rcpt, now);
	publish(r);
}

/* tick - recover as time goes; say when throttling ends (lock held) */
static void tick(struct deliver_rate *r, int64_t now)
{
	char rate[32] = "no rate limit";

	if (!deliver_feedback_tick(&r->fb, now)) {
		if (r->fb.throttled)
			apply(r);
		return;
	}
	apply(r);
	if (r->fb.rate > 0)
		snprintf(rate, sizeof(rate), "rate %.1f/s", r->fb.rate);
	msg_info("upstream%s: throttling ended: concurrency %d, %s", r->route, r->fb.conc, rate);
}

/* deliver_rate_new - the configured limits */
struct deliver_rate *deliver_rate_new(const char *route, const struct conf_upstream *up)
{
	struct deliver_rate *r = xcalloc(1, sizeof(*r));

	if (route) {
		snprintf(r->route, sizeof(r->route), " (route %.60s)", route);
		snprintf(r->name, sizeof(r->name), "%s", route);
	}
	pthread_mutex_init(&r->lock, NULL);
	r->nodes = 1;
	r->fb.conc_max = up->connections;	/* limits() passes it on */
	deliver_rate_configure(r, up);	/* fb not throttled: all of them */
	return r;
}

/* deliver_rate_free - NULL-safe */
void deliver_rate_free(struct deliver_rate *r)
{
	if (r == NULL)
		return;
	pthread_mutex_destroy(&r->lock);
	free(r);
}

/* limits - the feedback's limits and the buckets after a change of settings (lock held) */
static void limits(struct deliver_rate *r)
{
	deliver_feedback_limits(&r->fb, r->fb.conc_max, share(r->rate, r->nodes));
	apply(r);
}

/* deliver_rate_configure - new rates */
void deliver_rate_configure(struct deliver_rate *r, const struct conf_upstream *up)
{
	pthread_mutex_lock(&r->lock);
	r->rate = up->rate;
	r->rcpt_rate = up->recipient_rate;
	limits(r);
	pthread_mutex_unlock(&r->lock);
}

/* deliver_rate_nodes - the nodes alive share the limits */
void deliver_rate_nodes(struct deliver_rate *r, int n)
{
	pthread_mutex_lock(&r->lock);
	if (n < 1)
		n = 1;
	if (n != r->nodes) {
		msg_info("upstream%s: %d node%s alive share its rate", r->route, n,
			 n == 1 ? "" : "s");
		r->nodes = n;
		limits(r);
	}
	pthread_mutex_unlock(&r->lock);
}

/* deliver_admit_why - the reason in words */
const char *deliver_admit_why(enum deliver_admit a)
{
	static const char *const why[] = {
		[DELIVER_ADMITTED] = "admitted",
		[DELIVER_ADMIT_PAUSED] = "paused: its upstream asked to slow down",
		[DELIVER_ADMIT_LOWERED] = "its concurrency, lowered by throttling, is in use",
		[DELIVER_ADMIT_BUSY] = "all its connections are busy",
	};

	return why[a];
}

/*
 * admission - may a session start at now, and when to ask again (lock
 * held); a recovery step due is taken first (time heals)
 */
static enum deliver_admit admission(struct deliver_rate *r, int64_t now, int64_t *when)
{
	tick(r, now);
	*when = r->fb.throttled ? r->fb.step_at : 0;
	if (r->fb.throttled && now < r->fb.pause_until) {
		*when = r->fb.pause_until;
		return DELIVER_ADMIT_PAUSED;
	}
	if (r->active < r->fb.conc)
		return DELIVER_ADMITTED;
	if (r->fb.throttled && r->fb.conc < r->fb.conc_max)
		return DELIVER_ADMIT_LOWERED;	/* the next step adds a connection */
	if (!r->fb.throttled)
		*when = -1;
	return DELIVER_ADMIT_BUSY;
}

/* deliver_rate_admit - a session may start now (counted), or why not */
enum deliver_admit deliver_rate_admit(struct deliver_rate *r, int64_t now, int64_t *when)
{
	enum deliver_admit a;

	pthread_mutex_lock(&r->lock);
	if ((a = admission(r, now, when)) == DELIVER_ADMITTED) {
		r->active++;
		publish(r);
	}
	pthread_mutex_unlock(&r->lock);
	return a;
}

/* deliver_rate_check - deliver_rate_admit's answer, no session counted */
enum deliver_admit deliver_rate_check(struct deliver_rate *r, int64_t now, int64_t *when)
{
	enum deliver_admit a;

	pthread_mutex_lock(&r->lock);
	a = admission(r, now, when);
	pthread_mutex_unlock(&r->lock);
	return a;
}

/* deliver_rate_unpause - the operator asked for delivery now */
void deliver_rate_unpause(struct deliver_rate *r)
{
	int64_t now = clock_us();

	pthread_mutex_lock(&r->lock);
	if (r->fb.throttled && r->fb.pause_until > now) {
		r->fb.pause_until = now;
		r->fb.step_at = now + FB_STEP;
	}
	pthread_mutex_unlock(&r->lock);
}

/* deliver_rate_done - a session ended */
void deliver_rate_done(struct deliver_rate *r)
{
	pthread_mutex_lock(&r->lock);
	if (r->active > 0)
		r->active--;
	publish(r);
	pthread_mutex_unlock(&r->lock);
}

/*
 * deliver_rate_take - sleep for a token of b, until delivery stops (the
 * thread's deadline_stop_fd(): a stop ends the bridge, and so the session,
 * too) or gone(arg) says the session is over. The slot is looked at again
 * at least every second: a rate changed meanwhile (a reload, throttling or
 * its end: apply()) moves it.
 */
void deliver_rate_take(struct deliver_rate *r, struct deliver_bucket *b,
		       int (*gone)(const void *), const void *arg)
{
	struct pollfd p = { .fd = deadline_stop_fd(), .events = POLLIN };
	struct timespec ts;
	int64_t wait, ticket;

	pthread_mutex_lock(&r->lock);
	wait = deliver_bucket_take(b, clock_mono_us());
	ticket = b->taken;
	pthread_mutex_unlock(&r->lock);
	while (wait > 0 && !(gone && gone(arg))) {
		ts = clock_ts(wait < US ? wait : US);
		if (ppoll(&p, 1, &ts, NULL) > 0)	/* microseconds: poll()'s are too coarse */
			return;
		pthread_mutex_lock(&r->lock);
		wait = deliver_bucket_slot(b, ticket) - clock_mono_us();
		pthread_mutex_unlock(&r->lock);
	}
}

/* deliver_rate_sent - the upstream took a message */
void deliver_rate_sent(struct deliver_rate *r)
{
	int64_t now = clock_us();

	pthread_mutex_lock(&r->lock);
	deliver_feedback_sent(&r->fb, now);
	tick(r, now);
	pthread_mutex_unlock(&r->lock);
}

/* deliver_rate_throttled - a throttling reply: slow down, pause; log the start once */
void deliver_rate_throttled(struct deliver_rate *r, const char *relay, const char *line)
{
	int64_t now = clock_us(), before;
	int started;

	pthread_mutex_lock(&r->lock);
	before = r->fb.pause_until;
	started = deliver_feedback_throttle(&r->fb, now);
	if (r->fb.pause_until != before) {
		r->episodes++;
		apply(r);
	}
	if (started)
		msg_info("upstream %s%s: throttling: %s; concurrency %d, rate %.1f/s,"
			 " deliveries paused for %.0f s", relay, r->route, line, r->fb.conc, r->fb.rate,
			 (double) (r->fb.pause_until - now) / US);
	else if (r->fb.pause_until != before)
		msg_debug("upstream %s: throttled again: %s; concurrency %d, rate %.1f/s",
			  relay, line, r->fb.conc, r->fb.rate);
	pthread_mutex_unlock(&r->lock);
}

/* deliver_rate_paused_until - when the pause ends; 0 if none */
int64_t deliver_rate_paused_until(struct deliver_rate *r)
{
	int64_t until;

	pthread_mutex_lock(&r->lock);
	until = r->fb.throttled ? r->fb.pause_until : 0;
	pthread_mutex_unlock(&r->lock);
	return until;
}
