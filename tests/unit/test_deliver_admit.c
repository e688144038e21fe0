/*
 * test_deliver_admit - delivery admission by upstream group
 * (deliver/deliver.c: take_batch, send_group, hold; deliver_rate.c). A
 * default upstream of one connection and a route, through a transport of
 * the test's own that holds the default's first session until told.
 *
 * test_admit_by_group: the route's message goes out while the default's
 * session is held, under its own group's count alone (the default's is
 * still the one session, the route's one): a session is admitted once, by
 * its own group. The default's second message, loaded in the same batch
 * (a flush makes both due at once), finds its one connection in use and
 * is held (hold()'s debug line, read from stderr, says so), unsent and
 * unwritten (its store record as it was: no deferral, no attempt), and
 * goes out once the first session ends.
 *
 * test_hold_wakes: the default's first session ends just after the
 * second message was refused and before hold() puts it back: the ld
 * --wrap of deliver_rate_admit (Makefile: test_deliver_admit_LDFLAGS)
 * ends it there and, through the wrap of deliver_rate_check, waits until
 * its thread looked at every group again (finding nothing due, as the
 * message is still busy), under the scheduler's lock, so that it sleeps
 * before the message is put back. hold() must wake it: the message goes
 * out while the route's session, which follows the hold in the same
 * thread, is held open (10 s at most), not once that session ends or
 * DELIVER_MAX_SLEEP (60 s) passes.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "../../conf/conf.h"
#include "../../deliver/deliver_impl.h"
#include "../../util/log.h"
#include "test_store_help.h"

#define WAIT_US		(20 * SEC)	/* the deadline of every wait here */
#define ROUTE_OPEN_US	(10 * SEC)	/* test_hold_wakes: the route's session held this long at most */
#define FAR		(3600 * SEC)	/* scheduled this far off until the flush */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t moved = PTHREAD_COND_INITIALIZER;
static int held;			/* the default's first session waits while set */
static int sent[4];			/* by message number: sessions it was in */
static int dflt_active[4], route_active[4];	/* the groups' counts in its session */
/* test_hold_wakes */
static struct deliver *watched;		/* the scheduler whose calls are watched; NULL none */
static pthread_t first_thread;		/* the thread of message 1's session */
static int end_at_refusal;		/* the default's next refusal ends message 1's session */
static int rechecked;			/* since, message 1's thread looked at every group */
static int route_held;			/* message 3's session waits for message 2's */
static int route_waited;		/* message 3's session waited for message 2's */
static int sent_2_in_route;		/* which was sent while message 3's session was open */

enum deliver_admit __real_deliver_rate_admit(struct deliver_rate *r, int64_t now, int64_t *when);
enum deliver_admit __real_deliver_rate_check(struct deliver_rate *r, int64_t now, int64_t *when);
enum deliver_admit __wrap_deliver_rate_admit(struct deliver_rate *r, int64_t now, int64_t *when);
enum deliver_admit __wrap_deliver_rate_check(struct deliver_rate *r, int64_t now, int64_t *when);

/* num - a test QID's number: "D000000000001" is 1 */
static int num(const char *qid)
{
	return atoi(qid + 1);
}

/* deadline - the timespec of clock_us() + us, for pthread_cond_timedwait (CLOCK_REALTIME) */
static struct timespec deadline(int64_t us)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	us += (int64_t) ts.tv_nsec / 1000;
	ts.tv_sec += (time_t) (us / SEC);
	ts.tv_nsec = (long) (us % SEC) * 1000;
	return ts;
}

/* wait_until - wait on moved (lock held) until *flag is set or us passed; the flag */
static int wait_until(const int *flag, int64_t us)
{
	int64_t until = clock_us() + us;
	struct timespec ts;

	while (!*flag && clock_us() < until) {
		ts = deadline(100000);
		pthread_cond_timedwait(&moved, &lock, &ts);
	}
	return *flag;
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

/*
 * hold_send - the test's transport: notes each job's session, holds
 * message 1's while held, and message 3's while route_held until message
 * 2 was sent (ROUTE_OPEN_US at most)
 */
static void hold_send(struct deliver *d, const struct conf_upstream *up,
		      struct deliver_job **jobs, size_t n)
{
	size_t i;

	(void) up;
	pthread_mutex_lock(&lock);
	for (i = 0; i < n; i++) {
		sent[num(jobs[i]->m.qid)]++;
		dflt_active[num(jobs[i]->m.qid)] = active(d->rates[0]);
		route_active[num(jobs[i]->m.qid)] = active(d->rates[1]);
		if (num(jobs[i]->m.qid) == 1)
			first_thread = pthread_self();
	}
	pthread_cond_broadcast(&moved);
	for (i = 0; i < n; i++) {
		while (num(jobs[i]->m.qid) == 1 && held)
			pthread_cond_wait(&moved, &lock);
		if (num(jobs[i]->m.qid) == 3 && route_held) {
			sent_2_in_route = wait_until(&sent[2], ROUTE_OPEN_US);
			route_waited = 1;
			pthread_cond_broadcast(&moved);
		}
	}
	pthread_mutex_unlock(&lock);
	for (i = 0; i < n; i++) {
		snprintf(jobs[i]->relay, sizeof(jobs[i]->relay), "test");
		deliver_set_all(jobs[i], DELIVER_SENT, "2.0.0", "250 sent by the test");
	}
}

static const struct deliver_transport hold_transport = {
	.name = "test", .limited = 1, .batch = 5, .send = hold_send
};

/*
 * __wrap_deliver_rate_admit - deliver_rate_admit(); when the default's
 * session is refused with end_at_refusal set (send_group, about to hold
 * the job), message 1's session ends first, and its thread goes back to
 * the schedule (rechecked) before the refusal is returned
 */
enum deliver_admit __wrap_deliver_rate_admit(struct deliver_rate *r, int64_t now, int64_t *when)
{
	enum deliver_admit a = __real_deliver_rate_admit(r, now, when);

	pthread_mutex_lock(&lock);
	if (a != DELIVER_ADMITTED && end_at_refusal && watched && r == watched->rates[0]) {
		end_at_refusal = 0;
		held = 0;
		rechecked = 0;
		pthread_cond_broadcast(&moved);
		if (!wait_until(&rechecked, WAIT_US))
			fail_msg("message 1's thread did not look at the schedule again");
	}
	pthread_mutex_unlock(&lock);
	return a;
}

/*
 * __wrap_deliver_rate_check - deliver_rate_check(); message 1's thread,
 * once its session ended, checking the last group (groups_close, under
 * the scheduler's lock, just before it sleeps or takes a batch): rechecked
 */
enum deliver_admit __wrap_deliver_rate_check(struct deliver_rate *r, int64_t now, int64_t *when)
{
	enum deliver_admit a = __real_deliver_rate_check(r, now, when);

	pthread_mutex_lock(&lock);
	if (watched && r == watched->rates[watched->c->n_routes]
	    && !held && pthread_equal(pthread_self(), first_thread)) {
		rechecked = 1;
		pthread_cond_broadcast(&moved);
	}
	pthread_mutex_unlock(&lock);
	return a;
}

/* wait_sent - until message i was in a session (0 when the deadline passed) */
static int wait_sent(int i)
{
	int ok;

	pthread_mutex_lock(&lock);
	ok = wait_until(&sent[i], WAIT_US);
	pthread_mutex_unlock(&lock);
	return ok;
}

/* spool_one - message i, due at due in the store, of route (NULL: the default upstream) */
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

/*
 * start - the test's state reset, the configuration (the default of one
 * connection, route tenant-a of route_conns), message 1 spooled and in
 * its held session
 */
static struct deliver *start(struct fx *f, struct conf *c, struct conf_route *r,
			     int route_conns)
{
	struct deliver *d;
	char err[512];

	memset(sent, 0, sizeof(sent));
	held = 1;
	watched = NULL;
	end_at_refusal = rechecked = route_held = route_waited = sent_2_in_route = 0;
	assert_int_equal(conf_load(c, NULL, err, sizeof(err)), 0);
	c->upstream.connections = 1;
	memset(r, 0, sizeof(*r));
	r->name = "tenant-a";
	r->listener = -1;
	r->up = c->upstream;
	r->up.connections = route_conns;
	c->routes = r;
	c->n_routes = 1;
	spool_one(f->st, 1, NULL, clock_us());
	d = deliver_start(c, f->st, NULL, &hold_transport);
	/* a thread for each session of each group */
	assert_int_equal(d->n_threads, (size_t) (1 + route_conns));
	assert_true(wait_sent(1));
	return d;
}

/*
 * two_due - messages 2 (the default's) and 3 (the route's), both in the
 * store due at due, made due in the schedule at once (flush), so that a
 * thread takes them in one batch of messages never loaded, 2 first
 */
static void two_due(struct fx *f, struct deliver *d, int64_t due)
{
	spool_one(f->st, 2, NULL, due);
	deliver_schedule(d, "D000000000002", clock_us() + FAR);
	spool_one(f->st, 3, "tenant-a", due);
	deliver_schedule(d, "D000000000003", clock_us() + FAR);
	deliver_flush(d);
}

/* release - message 1's session ends */
static void release(void)
{
	pthread_mutex_lock(&lock);
	held = 0;
	pthread_cond_broadcast(&moved);
	pthread_mutex_unlock(&lock);
}

/* finish - stop delivery and free the configuration */
static void finish(struct deliver *d, struct conf *c)
{
	deliver_stop(d);
	pthread_mutex_lock(&lock);
	watched = NULL;
	pthread_mutex_unlock(&lock);
	c->routes = NULL;
	c->n_routes = 0;
	conf_free(c);
}

static char log_path[] = "/tmp/test_deliver_admit.XXXXXX";
static int saved_stderr = -1;		/* while the log goes to log_path */

/* log_setup_fx - fx_setup(), and the log (stderr) to a new temporary file, debug lines too */
static int log_setup_fx(void **state)
{
	int fd;

	fflush(stderr);
	if ((fd = mkstemp(log_path)) < 0 || (saved_stderr = dup(STDERR_FILENO)) < 0
	    || dup2(fd, STDERR_FILENO) < 0)
		return -1;
	close(fd);
	log_setup("test_deliver_admit", 0, LOG_LEVEL_DEBUG);
	return fx_setup(state);
}

/*
 * log_teardown_fx - fx_teardown(), and stderr back; what else than log
 * lines went to the file (cmocka's words of a failure) is copied to it
 */
static int log_teardown_fx(void **state)
{
	char line[4096];
	FILE *fp;

	log_setup("test_deliver_admit", 0, LOG_LEVEL_WARN);
	fflush(stderr);
	dup2(saved_stderr, STDERR_FILENO);
	close(saved_stderr);
	saved_stderr = -1;
	if ((fp = fopen(log_path, "r")) != NULL) {
		while (fgets(line, sizeof(line), fp))
			if (strncmp(line, "test_deliver_admit", 18) != 0)
				fputs(line, stderr);
		fclose(fp);
	}
	unlink(log_path);
	return fx_teardown(state);
}

/* logged - has the log said text? */
static int logged(const char *text)
{
	char buf[65536];
	ssize_t n;
	int fd;

	assert_true((fd = open(log_path, O_RDONLY)) >= 0);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	return strstr(buf, text) != NULL;
}

static void test_admit_by_group(void **state)
{
	struct fx *f = *state;
	struct conf c;
	struct conf_route r;
	struct store_msg m;
	struct deliver *d;
	int64_t due;

	d = start(f, &c, &r, 2);
	due = clock_us();
	two_due(f, d, due);
	if (!wait_sent(3))
		fail_msg("the route's message waited for the default's session");
	assert_int_equal(dflt_active[3], 1);	/* message 1's session, not this one */
	assert_int_equal(route_active[3], 1);	/* this one, counted once */
	pthread_mutex_lock(&lock);
	assert_int_equal(sent[2], 0);		/* the default's one connection is in use */
	pthread_mutex_unlock(&lock);
	/* message 2 was looked at and held, before message 3's session (same batch) */
	assert_true(logged("D000000000002: waits: upstream: all its connections are busy"));
	assert_int_equal(store_msg_load(f->st, "D000000000002", &m), 0);
	assert_int_equal(m.attempts, 0);	/* nothing written while it waits */
	assert_int_equal(m.next_attempt, due);
	assert_null(m.rcpts[0].reply);
	store_msg_free(&m);

	release();
	if (!wait_sent(2))
		fail_msg("the default's second message was not sent after its first session");
	assert_int_equal(dflt_active[2], 1);
	finish(d, &c);
	assert_int_equal(sent[1] + sent[2] + sent[3], 3);	/* each in one session */
}

static void test_hold_wakes(void **state)
{
	struct fx *f = *state;
	struct conf c;
	struct conf_route r;
	struct deliver *d;

	log_setup("test_deliver_admit", 0, LOG_LEVEL_WARN);
	d = start(f, &c, &r, 1);		/* two threads: message 1's, and one more */
	pthread_mutex_lock(&lock);
	watched = d;
	end_at_refusal = 1;
	route_held = 1;
	pthread_mutex_unlock(&lock);
	two_due(f, d, clock_us());
	pthread_mutex_lock(&lock);
	if (!wait_until(&route_waited, WAIT_US))
		fail_msg("the route's message was not sent");
	assert_int_equal(end_at_refusal, 0);	/* message 2 was refused, and then held */
	if (!sent_2_in_route)
		fail_msg("message 2, put back after the default's session ended, waited"
			 " for the route's session to end");
	pthread_mutex_unlock(&lock);
	finish(d, &c);
	assert_int_equal(sent[1] + sent[2] + sent[3], 3);	/* each in one session */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_admit_by_group, log_setup_fx,
						log_teardown_fx),
		cmocka_unit_test_setup_teardown(test_hold_wakes, fx_setup, fx_teardown),
	};

	return cmocka_run_group_tests_name("deliver_admit", tests, NULL, NULL);
}
