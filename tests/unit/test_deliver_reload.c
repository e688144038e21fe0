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
 * Why no reader can see a freed or half-written set: deliver_reload()
 * replaces the set in struct deliver under the scheduler's lock and each
 * reader copies it out under the same lock, so a reader has a copy of
 * one whole set and nothing shared outlives it (no reclaim needed).
 */
#include <pthread.h>
#include <time.h>

#include "../../conf/conf.h"
#include "../../deliver/deliver_impl.h"
#include "../../util/log.h"
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_reload_under_load, fx_setup, fx_teardown),
	};

	return cmocka_run_group_tests_name("deliver_reload", tests, NULL, NULL);
}
