/*
 * test_deliver_admit - delivery admission by upstream group
 * (deliver/deliver.c: take_batch, send_group; deliver_rate.c). A default
 * upstream of one connection and a route of two, through a transport of
 * the test's own that holds the default's first session until told. The
 * route's message goes out while the default's session is held, under
 * its own group's count alone (the default's is still the one session,
 * the route's one): a session is admitted once, by its own group. The
 * default's second message, which finds its one connection in use, waits
 * unsent and unwritten (its store record as it was: no deferral, no
 * attempt) and goes out once the first session ends.
 */
#include <pthread.h>
#include <time.h>

#include "../../conf/conf.h"
#include "../../deliver/deliver_impl.h"
#include "../../util/log.h"
#include "test_store_help.h"

#define WAIT_US		(20 * SEC)	/* the deadline of every wait here */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t moved = PTHREAD_COND_INITIALIZER;
static int held = 1;			/* the default's first session waits while set */
static int sent[4];			/* by message number: sessions it was in */
static int dflt_active[4], route_active[4];	/* the groups' counts in its session */

/* num - a test QID's number: "D000000000001" is 1 */
static int num(const char *qid)
{
	return atoi(qid + 1);
}

/* active - a group's sessions counted now */
static int active(struct deliver_rate *r)
{
	int n;

	pthread_mutex_lock(&r->lock);
	n = r->active;
	pthread_mutex_unlock(&r->lock);
	return n;
}

/* hold_send - the test's transport: notes each job's session, holds message 1's */
static void hold_send(struct deliver *d, const struct conf_upstream *up,
		      struct deliver_job **jobs, size_t n)
{
	size_t i;

	(void) up;
	pthread_mutex_lock(&lock);
	for (i = 0; i < n; i++) {
		sent[num(jobs[i]->m.qid)]++;
		dflt_active[num(jobs[i]->m.qid)] = active(d->rate);
		route_active[num(jobs[i]->m.qid)] = active(d->route_rates[0]);
	}
	pthread_cond_broadcast(&moved);
	for (i = 0; i < n; i++)
		while (num(jobs[i]->m.qid) == 1 && held)
			pthread_cond_wait(&moved, &lock);
	pthread_mutex_unlock(&lock);
	for (i = 0; i < n; i++) {
		snprintf(jobs[i]->relay, sizeof(jobs[i]->relay), "test");
		deliver_set_all(jobs[i], DELIVER_SENT, "2.0.0", "250 sent by the test");
	}
}

static const struct deliver_transport hold_transport = {
	.name = "test", .limited = 1, .batch = 5, .send = hold_send
};

/* wait_sent - until message i was in a session (0 when the deadline passed) */
static int wait_sent(int i)
{
	struct timespec ts;
	int64_t until = clock_us() + WAIT_US;
	int ok;

	pthread_mutex_lock(&lock);
	while (!sent[i] && clock_us() < until) {
		ts.tv_sec = (time_t) ((clock_us() + 100000) / SEC);
		ts.tv_nsec = (long) ((clock_us() + 100000) % SEC) * 1000;
		pthread_cond_timedwait(&moved, &lock, &ts);
	}
	ok = sent[i];
	pthread_mutex_unlock(&lock);
	return ok;
}

/* spool_one - message i, due now, of route (NULL: the default upstream) */
static void spool_one(struct store *st, int i, const char *route, int64_t due)
{
	struct store_msg m;
	char qid[STORE_QID_SIZE];

	snprintf(qid, sizeof(qid), "D%012d", i);
	msg_new(&m, qid, 1, 64);
	m.route = route ? xstrdup(route) : NULL;
	m.next_attempt = due;
	assert_int_equal(spool(st, &m, NULL, 0, 0), 0);
	store_msg_free(&m);
}

static void test_admit_by_group(void **state)
{
	struct fx *f = *state;
	struct conf c;
	struct conf_route r;
	struct store_msg m;
	struct deliver *d;
	char err[512];
	int64_t due;

	log_setup("test_deliver_admit", 0, LOG_LEVEL_WARN);
	assert_int_equal(conf_load(&c, NULL, err, sizeof(err)), 0);
	c.upstream.connections = 1;
	memset(&r, 0, sizeof(r));
	r.name = "tenant-a";
	r.listener = -1;
	r.up = c.upstream;
	r.up.connections = 2;
	c.routes = &r;
	c.n_routes = 1;
	spool_one(f->st, 1, NULL, clock_us());
	d = deliver_start(&c, f->st, NULL, &hold_transport);
	assert_int_equal(d->n_threads, 3);	/* a thread for each session of each group */
	assert_true(wait_sent(1));

	due = clock_us();
	spool_one(f->st, 2, NULL, due);
	deliver_enqueue(d, "D000000000002");
	spool_one(f->st, 3, "tenant-a", due);
	deliver_enqueue(d, "D000000000003");
	if (!wait_sent(3))
		fail_msg("the route's message waited for the default's session");
	assert_int_equal(dflt_active[3], 1);	/* message 1's session, not this one */
	assert_int_equal(route_active[3], 1);	/* this one, counted once */
	pthread_mutex_lock(&lock);
	assert_int_equal(sent[2], 0);		/* the default's one connection is in use */
	pthread_mutex_unlock(&lock);
	assert_int_equal(store_msg_load(f->st, "D000000000002", &m), 0);
	assert_int_equal(m.attempts, 0);	/* nothing written while it waits */
	assert_int_equal(m.next_attempt, due);
	assert_null(m.rcpts[0].reply);
	store_msg_free(&m);

	pthread_mutex_lock(&lock);
	held = 0;
	pthread_cond_broadcast(&moved);
	pthread_mutex_unlock(&lock);
	if (!wait_sent(2))
		fail_msg("the default's second message was not sent after its first session");
	assert_int_equal(dflt_active[2], 1);
	deliver_stop(d);
	assert_int_equal(sent[1] + sent[2] + sent[3], 3);	/* each in one session */
	c.routes = NULL;
	c.n_routes = 0;
	conf_free(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_admit_by_group, fx_setup, fx_teardown),
	};

	return cmocka_run_group_tests_name("deliver_admit", tests, NULL, NULL);
}
