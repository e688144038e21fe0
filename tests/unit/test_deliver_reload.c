/*
 * test_deliver_reload - SIGHUP's retry settings under delivery load
 * (deliver/deliver.c: deliver_reload, deliver_retry_settings). Four
 * delivery threads defer 200 spooled messages through a transport of the
 * test's own while the test swaps between two sets of retry settings as
 * fast as it can: A defers for 100 s, B gives up at once (give_up 1 s:
 * a bounce). Every outcome must come from one whole set: a message
 * deferred for 300 s would be B's wait with A's give_up, a mix. After
 * the last reload (B) a new message bounces: the settings took effect.
 * And the conf given to deliver_start() is never written to.
 *
 * The rates reload for every upstream group: the default upstream's and
 * each route's in use, found by name in the new configuration (a route
 * it no longer has keeps its rates; one it adds waits for a restart).
 *
 * Why no reader can see a freed or half-written set: deliver_reload()
 * replaces the set in struct deliver under the scheduler's lock and each
 * reader copies it out under the same lock, so a reader has a copy of
 * one whole set and nothing shared outlives it (no reclaim needed). And
 * an attempt's outcome reads the settings once (deliver_replied: give_up
 * and the backoff of one set): test_reload_between_reads puts a SIGHUP
 * right after that read (ld --wrap of deliver_retry_settings, Makefile),
 * where the swaps of test_reload_under_load land there only by chance.
 */
#include <pthread.h>
#include <time.h>

#include "../../conf/conf.h"
#include "../../deliver/deliver_impl.h"
#include "../../util/log.h"
#include "test_conf_help.h"
#include "test_store_help.h"

#define N_MSGS		200
#define WAIT_A		100		/* A: retry.first = retry.max, seconds */
#define WAIT_B		300		/* B: the same, with give_up 1 s */

static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;
static size_t seen;			/* jobs the transport was given */
static int64_t sent_at[N_MSGS + 2];	/* us, by message number (1 .. N_MSGS + 1) */

/* defer_send - the test's transport: every recipient deferred, the time noted */
static void defer_send(struct deliver *d, const struct conf_upstream *up,
		       struct deliver_job **jobs, size_t n)
{
	size_t i;

	(void) d;
	(void) up;
	for (i = 0; i < n; i++) {
		pthread_mutex_lock(&seen_lock);
		sent_at[atoi(jobs[i]->m.qid + 1)] = clock_us();
		seen++;
		pthread_mutex_unlock(&seen_lock);
		snprintf(jobs[i]->relay, sizeof(jobs[i]->relay), "test");
		deliver_set_all(jobs[i], DELIVER_DEFERRED, "4.0.0", "deferred by the test");
	}
}

static const struct deliver_transport defer_transport = {
	.name = "test", .batch = 5, .send = defer_send
};

/* seen_now - how many jobs the transport was given */
static size_t seen_now(void)
{
	size_t n;

	pthread_mutex_lock(&seen_lock);
	n = seen;
	pthread_mutex_unlock(&seen_lock);
	return n;
}

/*
 * spool_one - message i, one recipient, a null sender (no bounce message),
 * due now, accepted 10 s ago: past B's give_up, far from A's
 */
static void spool_one(struct store *st, int i)
{
	struct store_msg m;
	char qid[STORE_QID_SIZE];

	snprintf(qid, sizeof(qid), "R%011d", i);
	msg_new(&m, qid, 1, 64);
	free(m.from);
	m.from = xstrdup("");
	m.accepted = clock_us() - 10 * SEC;
	m.next_attempt = clock_us();
	assert_int_equal(spool(st, &m, NULL, 0, 0), 0);
	store_msg_free(&m);
}

/* outcome - message i after its attempt: the wait it was deferred for (s), or 0 bounced */
static int64_t outcome(struct store *st, int i)
{
	struct store_msg m;
	char qid[STORE_QID_SIZE];
	int64_t wait;
	int err;

	snprintf(qid, sizeof(qid), "R%011d", i);
	if ((err = store_msg_load(st, qid, &m)) == STORE_ENOTFOUND)
		return 0;
	assert_int_equal(err, 0);
	wait = m.rcpts[0].state == STORE_RCPT_QUEUED ? (m.next_attempt - sent_at[i]) / SEC : 0;
	store_msg_free(&m);
	return wait;
}

struct conf_retry __real_deliver_retry_settings(struct deliver *d);
static const struct conf *reload_after;	/* atomic: the next read's reload, NULL if none */

/*
 * __wrap_deliver_retry_settings - deliver_record.c's reads of the retry
 * settings (deliver.c's own are not wrapped): the set in force, and when
 * a reload is armed (reload_after), that SIGHUP at once after the read
 */
struct conf_retry __wrap_deliver_retry_settings(struct deliver *d)
{
	struct conf_retry r = __real_deliver_retry_settings(d);
	const struct conf *nc = __atomic_exchange_n(&reload_after, NULL, __ATOMIC_SEQ_CST);

	if (nc != NULL)
		deliver_reload(d, nc);
	return r;
}

static const struct conf *arm_with;	/* what arm_send arms */

/* arm_send - defer_send, then a reload to arm_with armed for the outcome's first read */
static void arm_send(struct deliver *d, const struct conf_upstream *up,
		     struct deliver_job **jobs, size_t n)
{
	defer_send(d, up, jobs, n);
	__atomic_store_n(&reload_after, arm_with, __ATOMIC_SEQ_CST);
}

static const struct deliver_transport arm_transport = {
	.name = "test", .batch = 5, .send = arm_send
};

/*
 * test_reload_between_reads - a SIGHUP from A to B right after the
 * attempt's outcome first reads the retry settings: the message, under
 * A's give_up, is deferred for A's wait (100 s), not B's (300 s, the
 * mix the settings read again for the backoff gave)
 */
static void test_reload_between_reads(void **state)
{
	struct fx *f = *state;
	struct conf c, b;
	struct deliver *d;
	char err[512];
	int64_t w, deadline = clock_us() + 60 * SEC;

	log_setup("test_deliver_reload", 0, LOG_LEVEL_WARN);
	assert_int_equal(conf_load(&c, NULL, err, sizeof(err)), 0);
	c.upstream.connections = 1;
	c.retry = (struct conf_retry) { WAIT_A, WAIT_A, 100000 };
	b = c;
	b.retry = (struct conf_retry) { WAIT_B, WAIT_B, 1 };
	arm_with = &b;
	pthread_mutex_lock(&seen_lock);
	seen = 0;
	pthread_mutex_unlock(&seen_lock);
	spool_one(f->st, 1);
	d = deliver_start(&c, f->st, NULL, &arm_transport);
	while (seen_now() < 1) {
		if (clock_us() > deadline)
			fail_msg("the message was not attempted in 60 s");
		nanosleep(&(struct timespec) { 0, 1000000 }, NULL);
	}
	deliver_stop(d);	/* after its batch is recorded */
	if (__atomic_load_n(&reload_after, __ATOMIC_SEQ_CST) != NULL)
		fail_msg("the reload armed for the outcome's read did not happen");
	w = outcome(f->st, 1);
	if (w < WAIT_A - 1 || w > WAIT_A + 5)
		fail_msg("deferred for %lld s after a reload between the reads: want %d s"
			 " (A's give_up, A's wait; 0: bounced)", (long long) w, WAIT_A);
	conf_free(&c);
}

static void test_reload_under_load(void **state)
{
	struct fx *f = *state;
	struct conf c, a, b;
	struct deliver *d;
	char err[512], last[STORE_QID_SIZE];
	int64_t w, deadline;
	size_t n_a = 0, n_b = 0, k;
	int i;

	log_setup("test_deliver_reload", 0, LOG_LEVEL_WARN);	/* a line per attempt otherwise */
	assert_int_equal(conf_load(&c, NULL, err, sizeof(err)), 0);
	c.upstream.connections = 4;
	c.retry = (struct conf_retry) { WAIT_A, WAIT_A, 100000 };
	a = b = c;
	b.retry = (struct conf_retry) { WAIT_B, WAIT_B, 1 };
	for (i = 1; i <= N_MSGS; i++)
		spool_one(f->st, i);
	d = deliver_start(&c, f->st, NULL, &defer_transport);
	deadline = clock_us() + 60 * SEC;
	for (k = 0; seen_now() < N_MSGS; k++) {
		deliver_reload(d, k % 2 ? &b : &a);
		if (clock_us() > deadline)
			fail_msg("%zu of %d messages attempted in 60 s", seen_now(), N_MSGS);
	}
	deliver_reload(d, &b);
	spool_one(f->st, N_MSGS + 1);
	snprintf(last, sizeof(last), "R%011d", N_MSGS + 1);
	deliver_enqueue(d, last);
	while (seen_now() < N_MSGS + 1) {
		if (clock_us() > deadline)
			fail_msg("the message after the last reload was not attempted");
		nanosleep(&(struct timespec) { 0, 1000000 }, NULL);
	}
	deliver_stop(d);

	for (i = 1; i <= N_MSGS; i++) {
		w = outcome(f->st, i);
		if (w != 0 && (w < WAIT_A - 1 || w > WAIT_A + 5))
			fail_msg("message %d deferred for %llds: want %d s (A) or a bounce (B)", i,
				 (long long) w, WAIT_A);
		w ? n_a++ : n_b++;
	}
	print_message("%zu reloads; %zu deferred by A, %zu bounced by B\n", k, n_a, n_b);
	if (outcome(f->st, N_MSGS + 1) != 0)
		fail_msg("after the last reload (B, give_up 1 s) a message was not bounced");
	/* the conf main owns is its own: deliver_reload() wrote nothing into it */
	assert_int_equal(c.retry.first, WAIT_A);
	assert_int_equal(c.retry.max, WAIT_A);
	assert_int_equal(c.retry.give_up, 100000);
	conf_free(&c);
}

/* the test's transport, rate limited (deliver_start() makes a deliver_rate per group) */
static const struct deliver_transport limited_transport = {
	.name = "test", .limited = 1, .batch = 5, .send = defer_send
};

#define ROUTE(name, rest) \
	"  { name = \"" name "\"; auth_user = \"" name "\";\n" \
	"    upstream = { host = \"127.0.0.1\"; port = 2; " rest " }; },\n"

/* load_routes - a configuration of a default upstream and routes (text) */
static void load_routes(struct conf *c, const char *upstream, const char *routes)
{
	char text[2048], err[512];

	snprintf(text, sizeof(text), "upstream = { host = \"127.0.0.1\"; port = 2; %s };\n"
		 "routes = (\n%s);\n", upstream, routes);
	*strrchr(text, ',') = ' ';	/* the last route's comma */
	if (load_text(c, text, err, sizeof(err)) != 0)
		fail_msg("conf_load: %s", err);
}

/* check_rates - an upstream group's rates in force, and its connections (never reloaded) */
static void check_rates(const char *what, struct deliver_rate *r, int rate, int rcpt_rate,
			int conns)
{
	pthread_mutex_lock(&r->lock);
	if (r->rate != rate || r->rcpt_rate != rcpt_rate || r->fb.conc_max != conns)
		fail_msg("%s: rate %d, recipient_rate %d, connections %d; want %d, %d, %d", what,
			 r->rate, r->rcpt_rate, r->fb.conc_max, rate, rcpt_rate, conns);
	pthread_mutex_unlock(&r->lock);
}

/*
 * test_reload_route_rates - SIGHUP's upstream rates reach every group:
 * reloading only the default's left a route's rate and recipient_rate as
 * they were at start (a route's upstream group takes the top-level
 * upstream's settings, rate "read again on SIGHUP")
 */
static void test_reload_route_rates(void **state)
{
	struct fx *f = *state;
	struct conf c, a, b;
	struct deliver *d;
	int dc, rc;			/* the default's connections, r2's: as at start */

	load_routes(&c, "rate = 4;", ROUTE("r1", "rate = 10; recipient_rate = 30; connections = 2;")
		    ROUTE("r2", "rate = 5;"));
	/* r2's limits change; r1 is gone (it stays in use); r3 is new (it waits for a restart) */
	load_routes(&a, "rate = 3;", ROUTE("r3", "rate = 100;")
		    ROUTE("r2", "rate = 7; recipient_rate = 9; connections = 5;"));
	/* r1 back, other limits; r2's taken off */
	load_routes(&b, "", ROUTE("r2", "") ROUTE("r1", "rate = 20; recipient_rate = 1;"));
	dc = c.upstream.connections;
	rc = c.routes[1].up.connections;
	d = deliver_start(&c, f->st, NULL, &limited_transport);
	check_rates("default at start", d->rates[0], 4, 0, dc);
	check_rates("r1 at start", d->rates[1], 10, 30, 2);
	check_rates("r2 at start", d->rates[2], 5, 0, rc);

	deliver_reload(d, &a);
	check_rates("default after reload a", d->rates[0], 3, 0, dc);
	check_rates("r1, gone from a, kept", d->rates[1], 10, 30, 2);
	check_rates("r2 after reload a", d->rates[2], 7, 9, rc);
	deliver_reload(d, &b);
	check_rates("default after reload b", d->rates[0], 0, 0, dc);
	check_rates("r1 after reload b", d->rates[1], 20, 1, 2);
	check_rates("r2 after reload b", d->rates[2], 0, 0, rc);
	deliver_stop(d);
	conf_free(&c);
	conf_free(&a);
	conf_free(&b);
	unlink(tmp_path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_reload_under_load, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_reload_route_rates, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_reload_between_reads, fx_setup, fx_teardown),
	};

	return cmocka_run_group_tests_name("deliver_reload", tests, NULL, NULL);
}
