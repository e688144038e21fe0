/*
 * NAME
 *	test_deliver_rate 1
 * SUMMARY
 *	unit tests: upstream rate limits and throttling feedback (deliver/deliver_rate.c)
 * DESCRIPTION
 *	The token bucket: rows of (rate, times a token is taken) and the wait
 *	each take must get. The feedback state machine: rows of events
 *	(deliveries, throttling replies, time passing) and the state after
 *	each: concurrency, rate, throttled, the pause's end, and whether the
 *	event started or ended throttling. The reply classifier: lines and
 *	whether each asks to slow down. No clock is read: every time is given
 *	(but the pause test_admit's throttling reply starts, which is now).
 *	Admission: why a session may not start, and when to ask again.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "../../deliver/deliver_rate.h"
#include "../../util/clock.h"
#include "test_util.h"

#define N(a)	(sizeof(a) / sizeof((a)[0]))
#define SEC	1000000LL		/* us */
#define MS	1000LL

/* the bucket: each take at t (us) must wait want (us) */
struct take {
	int64_t t, want;
};

struct bucket_case {
	const char *name;
	double rate;
	struct take takes[8];
	size_t n;
};

/* fb_init - no throttling, the limits configured, as deliver_rate_new() starts */
static void fb_init(struct deliver_feedback *fb, int conc_max, double rate_max)
{
	memset(fb, 0, sizeof(*fb));
	deliver_feedback_limits(fb, conc_max, rate_max);
}

static const struct bucket_case bucket_cases[] = {
	{ "no limit: never a wait", 0, { { 0, 0 }, { 0, 0 }, { 1, 0 } }, 3 },
	{ "10/s, evenly spaced: no wait", 10, { { 0, 0 }, { 100 * MS, 0 }, { 200 * MS, 0 } }, 3 },
	{ "10/s, three at once: slots 100 ms apart", 10, { { 0, 0 }, { 0, 100 * MS },
							   { 0, 200 * MS } }, 3 },
	{ "10/s, a burst after idling: one token kept, not ten", 10,
	  { { 0, 0 }, { 5 * SEC, 0 }, { 5 * SEC, 100 * MS }, { 5 * SEC, 200 * MS } }, 4 },
	{ "14/s (SES): 71 ms apart", 14, { { 0, 0 }, { 0, 71428 }, { 0, 142856 } }, 3 },
	{ "a taker late for its slot waits for the rest of it", 4,
	  { { 0, 0 }, { 0, 250 * MS }, { 400 * MS, 100 * MS } }, 3 },
	{ "0.005/s (recipient_rate 1, rate 20 throttled to 0.1/s): two at once, 200 s apart",
	  0.005, { { 0, 0 }, { 0, 200 * SEC }, { 1 * SEC, 399 * SEC } }, 3 },
};

/* test_bucket - every row's waits */
static void test_bucket(void **state)
{
	size_t i, k;

	(void) state;
	for (i = 0; i < N(bucket_cases); i++) {
		const struct bucket_case *c = &bucket_cases[i];
		struct deliver_bucket b = { .rate = c->rate };

		for (k = 0; k < c->n; k++) {
			int64_t got = deliver_bucket_take(&b, c->takes[k].t);

			if (got != c->takes[k].want)
				fail_msg("%s: take %zu at %lld: wait %lld, want %lld", c->name, k,
					 (long long) c->takes[k].t, (long long) got,
					 (long long) c->takes[k].want);
		}
	}
}

/* the bucket's rate over many takes: 1000 takes at 50/s span 19.98 s */
static void test_bucket_rate(void **state)
{
	struct deliver_bucket b = { .rate = 50 };
	int64_t now = 0, wait;
	int i;

	(void) state;
	for (i = 0; i < 1000; i++) {
		wait = deliver_bucket_take(&b, now);
		now += wait;
	}
	assert_int_equal(now, 999 * 20 * MS);
}

/*
 * demand far ahead of the rate (sessions taking at once): each take gets
 * the next slot, however far ahead, never one at once (take 61, a minute
 * ahead, went at once)
 */
static void test_bucket_demand(void **state)
{
	struct deliver_bucket b = { .rate = 1 };
	int64_t now = 1000 * SEC, wait;
	int i;

	(void) state;
	for (i = 0; i < 400; i++)
		if ((wait = deliver_bucket_take(&b, now)) != i * SEC)
			fail_msg("take %d at once at 1/s: wait %lld us, want %d s", i,
				 (long long) wait, i);
}

/*
 * a change of rate moves the slots taken ahead of it: at 10/s, twenty
 * taken at once reach 2 s ahead; at 1/s from 0 they reach 20 s, each in
 * its place, and a new take waits for all of them (no burst over the new
 * rate); back to 10/s at 10 s, what is left (10 s) takes 1 s
 */
static void test_bucket_rate_change(void **state)
{
	struct deliver_bucket b = { .rate = 10 };
	int i;

	(void) state;
	for (i = 0; i < 20; i++)
		assert_int_equal(deliver_bucket_take(&b, 0), i * 100 * MS);
	deliver_bucket_rate(&b, 1, 0);
	for (i = 1; i <= 20; i++)
		assert_int_equal(deliver_bucket_slot(&b, i), (i - 1) * SEC);
	deliver_bucket_rate(&b, 10, 10 * SEC);
	assert_int_equal(deliver_bucket_slot(&b, 20), 10 * SEC + 900 * MS);
	assert_int_equal(deliver_bucket_take(&b, 10 * SEC), 1 * SEC);
	deliver_bucket_rate(&b, 0, 10 * SEC);
	assert_int_equal(deliver_bucket_slot(&b, 21), 0);
	assert_int_equal(deliver_bucket_take(&b, 11 * SEC), 0);
}

/*
 * review D: a throttle (421 4.7.0) cuts upstream.rate 1000 to 0.8/s, and
 * recipient_rate 10 with it to 0.008/s (125 s a token); twenty sessions
 * each take a RCPT token, the last 2375 s ahead. A reload without
 * upstream.rate (or the end of throttling) brings 10/s back, and the
 * twenty reserved slots with it (2 s), so that a session's next RCPT a
 * second later waits a second, where it waited 2499 s
 */
static void test_rate_reload_frees_reservations(void **state)
{
	struct conf_upstream up = { .connections = 20, .rate = 1000, .recipient_rate = 10 };
	struct deliver_rate *r = deliver_rate_new(NULL, &up);
	int64_t now, wait;
	int i;

	(void) state;
	deliver_rate_sent(r);
	deliver_rate_throttled(r, "mx.example", "421 4.7.0 rate limited, try later");
	assert_true(r->rcpts.rate > 0.0079 && r->rcpts.rate < 0.0081);
	now = clock_mono_us();
	for (i = 0; i < 20; i++)
		wait = deliver_bucket_take(&r->rcpts, now);
	assert_int_equal(wait, 2375 * SEC);
	up.rate = 0;
	deliver_rate_configure(r, &up);
	assert_true(r->rcpts.rate == 10);
	wait = deliver_bucket_take(&r->rcpts, now + SEC);
	if (wait > 1100 * MS)
		fail_msg("next RCPT after the reload waits %.0f s, want about 1 s", (double) wait / SEC);
	deliver_rate_free(r);
}

struct sleeper {
	struct deliver_rate *r;
	atomic_int gone, done;
};

/* sleeper_gone - the session's gone() */
static int sleeper_gone(const void *arg)
{
	return atomic_load(&((const struct sleeper *) arg)->gone);
}

/* sleeper_main - a RCPT waiting for its token */
static void *sleeper_main(void *arg)
{
	struct sleeper *s = arg;

	deliver_rate_take(s->r, &s->r->rcpts, sleeper_gone, s);
	atomic_store(&s->done, 1);
	return NULL;
}

/* sleeper_waits - ms until the sleeper is done (up to limit) */
static int sleeper_waits(struct sleeper *s, int limit)
{
	int ms;

	for (ms = 0; ms < limit && !atomic_load(&s->done); ms += 10)
		usleep(10 * 1000);
	return ms;
}

/*
 * a token's sleeper follows the rate: asleep for a slot 100 s ahead (at
 * 0.01/s), it goes within a second or so of a reload to 100/s (its slot
 * is now), and of its session's end (gone); a reload to a lower rate
 * keeps it asleep
 */
static void test_take_follows_the_rate(void **state)
{
	struct conf_upstream up = { .connections = 1, .recipient_rate = 1 };
	struct sleeper s = { 0 };
	pthread_t t;
	int pass;

	(void) state;
	for (pass = 0; pass < 2; pass++) {
		s.r = deliver_rate_new(NULL, &up);
		atomic_store(&s.gone, 0);
		atomic_store(&s.done, 0);
		s.r->rcpts.rate = 0.01;
		assert_int_equal(deliver_bucket_take(&s.r->rcpts, clock_mono_us()), 0);
		assert_int_equal(pthread_create(&t, NULL, sleeper_main, &s), 0);
		usleep(300 * 1000);
		pthread_mutex_lock(&s.r->lock);
		deliver_bucket_rate(&s.r->rcpts, 0.005, clock_mono_us());
		pthread_mutex_unlock(&s.r->lock);
		assert_int_equal(sleeper_waits(&s, 1500), 1500);
		if (pass == 0) {
			up.recipient_rate = 100;
			deliver_rate_configure(s.r, &up);
		} else
			atomic_store(&s.gone, 1);
		if (sleeper_waits(&s, 2500) >= 2500)
			fail_msg("pass %d: the sleeper still sleeps 2.5 s after the %s", pass,
				 pass ? "session ended" : "reload to 100/s");
		pthread_join(t, NULL);
		deliver_rate_free(s.r);
		up.recipient_rate = 1;
	}
}

enum ev_kind {
	EV_SENT,		/* n deliveries spread over the second before t */
	EV_THROTTLE,		/* a throttling reply at t */
	EV_TICK,		/* time passes to t */
	EV_TICKS,		/* n ticks, at t, t + 1 s, ...: the state after the last */
	EV_LIMITS,		/* new limits: n connections, rate r */
};

struct event {
	enum ev_kind kind;
	int64_t t;
	int n;
	double r;
	/* the state after it */
	int conc;
	double rate;
	int throttled;
	int64_t pause_until;	/* checked when throttled */
	int said;		/* the call returned 1: started (THROTTLE), ended (TICK) */
};

struct fb_case {
	const char *name;
	int conns;
	double rate;
	struct event ev[12];
	size_t n;
};

static const struct fb_case fb_cases[] = {
	{ "configured rate: halved concurrency, 4/5 of the rate, 1 s pause, then back", 4, 20, {
		{ EV_SENT, 1 * SEC, 20, 0, 4, 20, 0, 0, 0 },
		{ EV_THROTTLE, 1 * SEC, 0, 0, 2, 16, 1, 2 * SEC, 1 },
		{ EV_THROTTLE, 1 * SEC + 500 * MS, 0, 0, 2, 16, 1, 2 * SEC, 0 },	/* same episode */
		{ EV_TICK, 2 * SEC + 500 * MS, 0, 0, 2, 16, 1, 2 * SEC, 0 },	/* no step yet */
		{ EV_TICK, 3 * SEC, 0, 0, 3, 16.8, 1, 2 * SEC, 0 },
		{ EV_TICK, 4 * SEC, 0, 0, 4, 17.64, 1, 2 * SEC, 0 },
		{ EV_TICKS, 5 * SEC, 2, 0, 4, 19.4481, 1, 2 * SEC, 0 },		/* 5 s, 6 s */
		{ EV_TICK, 7 * SEC, 0, 0, 4, 20, 0, 0, 1 },			/* rate capped: back */
	  }, 8 },
	{ "a lower limit seen: the rate follows what the upstream took", 8, 100, {
		{ EV_SENT, 1 * SEC, 10, 0, 8, 100, 0, 0, 0 },
		{ EV_THROTTLE, 1 * SEC, 0, 0, 4, 8, 1, 2 * SEC, 1 },
		{ EV_TICK, 3 * SEC, 0, 0, 5, 8.4, 1, 2 * SEC, 0 },
		{ EV_TICK, 4 * SEC, 0, 0, 6, 8.82, 1, 2 * SEC, 0 },
	  }, 4 },
	{ "no configured rate: learned, then lifted at twice", 2, 0, {
		{ EV_SENT, 1 * SEC, 20, 0, 2, 0, 0, 0, 0 },
		{ EV_THROTTLE, 1 * SEC, 0, 0, 1, 16, 1, 2 * SEC, 1 },
		{ EV_TICK, 3 * SEC, 0, 0, 2, 16.8, 1, 2 * SEC, 0 },
		{ EV_TICKS, 4 * SEC, 13, 0, 2, 31.678908, 1, 2 * SEC, 0 },	/* 16 x 1.05^14 */
		{ EV_TICK, 17 * SEC, 0, 0, 2, 0, 0, 0, 1 },			/* 1.05^15 > 2 */
	  }, 5 },
	{ "refused right after each pause: the pause doubles, throttling starts once", 4, 10, {
		{ EV_THROTTLE, 0, 0, 0, 2, 8, 1, 1 * SEC, 1 },
		{ EV_THROTTLE, 1 * SEC, 0, 0, 1, 6.4, 1, 3 * SEC, 0 },
		{ EV_THROTTLE, 3 * SEC, 0, 0, 1, 5.12, 1, 7 * SEC, 0 },
		{ EV_TICK, 8 * SEC, 0, 0, 2, 5.376, 1, 7 * SEC, 0 },
	  }, 4 },
	{ "refused 2 s or more after the last pause: a probe, the pause is short again", 4, 10, {
		{ EV_THROTTLE, 0, 0, 0, 2, 8, 1, 1 * SEC, 1 },
		{ EV_THROTTLE, 1 * SEC, 0, 0, 1, 6.4, 1, 3 * SEC, 0 },
		{ EV_THROTTLE, 5 * SEC, 0, 0, 1, 5.12, 1, 6 * SEC, 0 },
	  }, 3 },
	{ "a greeting refused before anything was sent: no rate to learn", 4, 0, {
		{ EV_THROTTLE, 0, 0, 0, 2, 0, 1, 1 * SEC, 1 },
		{ EV_TICK, 2 * SEC, 0, 0, 3, 0, 1, 1 * SEC, 0 },
		{ EV_TICK, 3 * SEC, 0, 0, 4, 0, 0, 0, 1 },
	  }, 3 },
	{ "the rate never drops below 0.1/s", 1, 0.1, {
		{ EV_THROTTLE, 0, 0, 0, 1, 0.1, 1, 1 * SEC, 1 },
	  }, 1 },
	{ "new limits: kept below while throttled, taken whole after", 4, 20, {
		{ EV_THROTTLE, 0, 0, 0, 2, 16, 1, 1 * SEC, 1 },
		{ EV_LIMITS, 0, 1, 10, 1, 10, 1, 1 * SEC, 0 },
		{ EV_TICK, 2 * SEC, 0, 0, 1, 10, 0, 0, 1 },
		{ EV_LIMITS, 2 * SEC, 4, 5, 4, 5, 0, 0, 0 },
	  }, 4 },
};

/* fb_event - apply one event; what the call said */
static int fb_event(struct deliver_feedback *fb, const struct event *e)
{
	int i;

	switch (e->kind) {
	case EV_SENT:
		for (i = 0; i < e->n; i++)
			deliver_feedback_sent(fb, e->t - SEC + (SEC / e->n) * (i + 1) - 1);
		return 0;
	case EV_THROTTLE:
		return deliver_feedback_throttle(fb, e->t);
	case EV_TICK:
		return deliver_feedback_tick(fb, e->t);
	case EV_TICKS:
		for (i = 0; i < e->n - 1; i++)
			(void) deliver_feedback_tick(fb, e->t + i * SEC);
		return deliver_feedback_tick(fb, e->t + i * SEC);
	case EV_LIMITS:
		deliver_feedback_limits(fb, e->n, e->r);
		return 0;
	}
	return 0;
}

/* test_feedback - every row's states */
static void test_feedback(void **state)
{
	struct deliver_feedback fb;
	size_t i, k;
	int said;

	(void) state;
	for (i = 0; i < N(fb_cases); i++) {
		const struct fb_case *c = &fb_cases[i];

		fb_init(&fb, c->conns, c->rate);
		for (k = 0; k < c->n; k++) {
			const struct event *e = &c->ev[k];

			said = fb_event(&fb, e);
			if (fb.conc != e->conc || fb.rate < e->rate - 1e-4 || fb.rate > e->rate + 1e-4
			    || fb.throttled != e->throttled || said != e->said
			    || (e->throttled && fb.pause_until != e->pause_until))
				fail_msg("%s: event %zu: conc %d rate %g throttled %d pause_until %lld"
					 " said %d; want %d %g %d %lld %d", c->name, k, fb.conc, fb.rate,
					 fb.throttled, (long long) fb.pause_until, said, e->conc,
					 e->rate, e->throttled, (long long) e->pause_until, e->said);
		}
	}
}

/* the rate seen: deliveries in the second up to now, whatever their number */
static void test_seen(void **state)
{
	struct deliver_feedback fb;
	int i;

	(void) state;
	fb_init(&fb, 1, 0);
	assert_true(deliver_feedback_seen(&fb, 10 * SEC) == 0);
	for (i = 0; i < 5; i++)
		deliver_feedback_sent(&fb, 9 * SEC + i * 100 * MS);	/* 9.0 .. 9.4 s */
	assert_true(deliver_feedback_seen(&fb, 9 * SEC + 900 * MS) == 5);
	assert_true(deliver_feedback_seen(&fb, 10 * SEC + 250 * MS) == 2);	/* 9.3, 9.4 */
	assert_true(deliver_feedback_seen(&fb, 20 * SEC) == 0);		/* slots long gone */
	fb_init(&fb, 1, 0);
	for (i = 0; i < 100; i++)		/* a burst of 100 in 0.1 s: 100 in the second */
		deliver_feedback_sent(&fb, 20 * SEC + i * MS);
	assert_true(deliver_feedback_seen(&fb, 20 * SEC + 200 * MS) == 100);
	for (i = 0; i < 2000; i++)		/* 1,000 a second for 2 s */
		deliver_feedback_sent(&fb, 30 * SEC + i * MS);
	i = (int) deliver_feedback_seen(&fb, 32 * SEC);
	if (i < 990 || i > 1010)
		fail_msg("rate seen at 1,000 a second: %d in the second, want about 1000", i);
}

struct reply_case {
	const char *line;
	int greeting;		/* the first reply of the connection */
	int throttles;
};

static const struct reply_case reply_cases[] = {
	{ "421 4.7.0 too many messages, slow down", 0, 1 },
	{ "421 4.3.2 service not available", 1, 1 },	/* any 421 greeting */
	{ "421", 1, 1 },
	{ "421 4.4.2 idle timeout", 0, 0 },		/* a 421 later needs the words */
	{ "451 4.7.0 Temporary server error", 0, 1 },
	{ "450 4.7.28 Our system has detected an unusual rate of unsolicited mail", 0, 1 },
	{ "454 Throttling failure: Maximum sending rate exceeded.", 0, 1 },
	{ "451 4.3.0 Too many connections from your host", 0, 1 },
	{ "452 4.5.3 Too many recipients", 0, 0 },	/* the message's, not a rate */
	{ "452 Too many recipients", 0, 0 },
	{ "452 too many recipients", 0, 0 },		/* no enhanced code: recipients */
	{ "452 4.7.0 rate limit exceeded, try again later", 0, 1 },	/* its code says rate */
	{ "452-4.7.0 too many messages", 0, 1 },
	{ "452 4.3.1 Insufficient system storage", 0, 0 },
	{ "451 4.5.3 Too many recipients", 0, 0 },
	{ "451-4.7.0 first line of several", 0, 1 },
	{ "451 4.7.500 Server busy. Please try again later", 0, 0 },
	{ "451 4.3.0 sink: temporary failure", 0, 0 },
	{ "450 4.2.0 mailbox busy", 0, 0 },
	{ "550 5.7.0 rate limit exceeded", 0, 0 },	/* permanent: not a throttle */
	{ "554 5.7.0 rate limit exceeded", 1, 0 },
	{ "250 2.0.0 ok: rate 1", 0, 0 },
	{ "4.7.0", 0, 0 },
	{ "45", 0, 0 },
	{ "", 1, 0 },
	{ "451 4.7.01 not quite", 0, 0 },
	{ "451 4.3.0 the message was generated badly", 0, 0 },	/* a word's start only */
};

/* test_reply - which replies ask to slow down */
static void test_reply(void **state)
{
	size_t i;
	int got;

	(void) state;
	for (i = 0; i < N(reply_cases); i++) {
		const struct reply_case *c = &reply_cases[i];

		if ((got = deliver_rate_reply_throttles(c->line, c->greeting)) != c->throttles)
			fail_msg("\"%s\" (greeting %d): throttles %d, want %d", c->line, c->greeting,
				 got, c->throttles);
	}
}

/*
 * test_admit - deliver_rate_admit() says why a session may not start, and
 * when to ask again: every connection in use (a session's end: -1);
 * throttled, in its pause (its end); after it, with the concurrency
 * throttling lowered in use (the next recovery step); deliver_rate_check()
 * gives the same answer without counting a session
 */
static void test_admit(void **state)
{
	struct deliver_rate *r = deliver_rate_new(NULL, &(struct conf_upstream) { .connections = 2 });
	int64_t now = clock_us(), when = 0, until;

	(void) state;
	assert_int_equal(deliver_rate_check(r, now, &when), DELIVER_ADMITTED);
	assert_int_equal(r->active, 0);
	assert_int_equal(deliver_rate_admit(r, now, &when), DELIVER_ADMITTED);
	assert_int_equal(deliver_rate_admit(r, now, &when), DELIVER_ADMITTED);
	assert_int_equal(deliver_rate_admit(r, now, &when), DELIVER_ADMIT_BUSY);
	assert_int_equal(when, -1);
	assert_int_equal(deliver_rate_check(r, now, &when), DELIVER_ADMIT_BUSY);
	assert_int_equal(r->active, 2);
	deliver_rate_done(r);
	deliver_rate_done(r);

	deliver_rate_throttled(r, "sink[127.0.0.1]:25", "421 4.7.0 slow down");
	until = deliver_rate_paused_until(r);
	assert_true(until > now);
	assert_int_equal(deliver_rate_admit(r, now, &when), DELIVER_ADMIT_PAUSED);
	assert_int_equal(when, until);
	assert_int_equal(r->active, 0);
	assert_string_equal(deliver_admit_why(DELIVER_ADMIT_PAUSED),
			    "paused: its upstream asked to slow down");

	/* after the pause: one connection of two, then the next step adds one */
	assert_int_equal(deliver_rate_admit(r, until, &when), DELIVER_ADMITTED);
	assert_int_equal(when, r->fb.step_at);
	assert_int_equal(deliver_rate_admit(r, until, &when), DELIVER_ADMIT_LOWERED);
	assert_int_equal(when, r->fb.step_at);
	assert_int_equal(deliver_rate_check(r, r->fb.step_at, &when), DELIVER_ADMITTED);
	deliver_rate_free(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bucket),
		cmocka_unit_test(test_bucket_rate),
		cmocka_unit_test(test_bucket_demand),
		cmocka_unit_test(test_bucket_rate_change),
		cmocka_unit_test(test_rate_reload_frees_reservations),
		cmocka_unit_test(test_take_follows_the_rate),
		cmocka_unit_test(test_feedback),
		cmocka_unit_test(test_seen),
		cmocka_unit_test(test_reply),
		cmocka_unit_test(test_admit),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
