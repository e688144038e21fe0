/*
 * test_deliver_release - the operator's hold and release of a message the
 * scheduler has taken and is loading (deliver/deliver.c: job_load,
 * deliver_schedule; deliver_admin.c: deliver_drop, deliver_release), on a
 * store of one node (LMDB).
 *
 * test_release_while_loading: the hold lands after a delivery thread
 * took the message (busy: deliver_drop leaves it alone) and before its
 * load, which finds it held and lets it go; the release lands after that
 * load and before the thread is done with the message. The release's
 * schedule must outlive the end of the attempt before it, as a lease
 * taken again does on a shared store: dropped because the message was
 * still busy, it left a queued message that no thread would ever take
 * again until a restart (idemrelayctl retry answered that it is not
 * queued). The message's load is where the test steps in: the store's
 * table, the test's own msg_load (as test_deliver_notice swaps its
 * writes), runs the operator's hold before the real load and the
 * release after it, through queue_admin_request(), as the control
 * socket does.
 */
#include <pthread.h>
#include <time.h>

#include "../../conf/conf.h"
#include "../../deliver/deliver_impl.h"
#include "../../queue/queue_admin.h"
#include "../../util/buf.h"
#include "../../util/log.h"
#include "test_store_help.h"

#define WAIT_US		(10 * SEC)	/* the message is sent within this */
#define TARGET		"REL000000001"

static int sent;			/* atomic: times the transport was given TARGET */

/* sent_send - the test's transport: every message sent, TARGET counted */
static void sent_send(struct deliver *d, const struct conf_upstream *up,
		      struct deliver_job **jobs, size_t n)
{
	size_t i;

	(void) d;
	(void) up;
	for (i = 0; i < n; i++) {
		if (strcmp(jobs[i]->m.qid, TARGET) == 0)
			__atomic_add_fetch(&sent, 1, __ATOMIC_SEQ_CST);
		snprintf(jobs[i]->relay, sizeof(jobs[i]->relay), "test");
		deliver_set_all(jobs[i], DELIVER_SENT, "2.0.0", "250 2.0.0 Ok");
	}
}

static const struct deliver_transport sent_transport = {
	.name = "test", .batch = 5, .send = sent_send
};

static struct store_ops load_ops;
static const struct store_ops *real_ops;
static struct deliver *running;		/* atomic: the scheduler the operator acts on */
static const struct conf *running_conf;
static int armed;			/* atomic: TARGET's next load is stepped into */
static int held_loaded;			/* atomic: that load found it held */

/* operator - idemrelayctl's cmd of TARGET, through the control socket's entry point */
static void operator(struct store *st, const char *cmd)
{
	struct queue_admin_sched s;
	struct buf out = BUF_INIT;
	char args[] = TARGET;

	while (__atomic_load_n(&running, __ATOMIC_SEQ_CST) == NULL)	/* deliver_start() returning */
		nanosleep(&(struct timespec) { 0, 1000000 }, NULL);
	s = deliver_admin_sched(running);
	queue_admin_request(st, &s, running_conf, cmd, args, clock_us(), &out);
	buf_putc(&out, 0);
	if (strstr(out.data, "\"ok\":true") == NULL)
		fail_msg("%s %s: %s", cmd, TARGET, out.data);
	buf_free(&out);
}

/*
 * stepped_load - the real load; TARGET's first, once armed, between the
 * operator's hold and release
 */
static int stepped_load(struct store *st, const char *qid, struct store_msg *m)
{
	int err;

	if (strcmp(qid, TARGET) != 0 || !__atomic_exchange_n(&armed, 0, __ATOMIC_SEQ_CST))
		return real_ops->msg_load(st, qid, m);
	operator(st, "hold");
	err = real_ops->msg_load(st, qid, m);
	if (err == 0 && m->held)
		__atomic_store_n(&held_loaded, 1, __ATOMIC_SEQ_CST);
	operator(st, "release");
	return err;
}

static void test_release_while_loading(void **state)
{
	struct fx *f = *state;
	struct store_msg m;
	struct conf c;
	char err[512];
	int64_t deadline;

	log_setup("test_deliver_release", 0, LOG_LEVEL_WARN);
	assert_int_equal(conf_load(&c, NULL, err, sizeof(err)), 0);
	c.upstream.connections = 1;
	real_ops = f->st->ops;
	load_ops = *real_ops;
	load_ops.msg_load = stepped_load;
	f->st->ops = &load_ops;
	msg_new(&m, TARGET, 1, 64);
	m.accepted = m.next_attempt = clock_us();
	assert_int_equal(spool(f->st, &m, NULL, 0, 0), 0);
	store_msg_free(&m);
	__atomic_store_n(&sent, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&held_loaded, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&armed, 1, __ATOMIC_SEQ_CST);
	running_conf = &c;
	__atomic_store_n(&running, deliver_start(&c, f->st, NULL, &sent_transport),
			 __ATOMIC_SEQ_CST);
	for (deadline = clock_us() + WAIT_US; __atomic_load_n(&sent, __ATOMIC_SEQ_CST) == 0
	     && clock_us() < deadline;)
		nanosleep(&(struct timespec) { 0, 10000000 }, NULL);
	deliver_stop(running);
	running = NULL;
	f->st->ops = real_ops;
	assert_int_equal(__atomic_load_n(&armed, __ATOMIC_SEQ_CST), 0);
	assert_int_equal(__atomic_load_n(&held_loaded, __ATOMIC_SEQ_CST), 1);
	if (__atomic_load_n(&sent, __ATOMIC_SEQ_CST) != 1)
		fail_msg("released while its held load was finishing: sent %d times in %lld s,"
			 " want once", __atomic_load_n(&sent, __ATOMIC_SEQ_CST),
			 (long long) (WAIT_US / SEC));
	assert_int_equal(store_msg_load(f->st, TARGET, &m), STORE_ENOTFOUND);
	conf_free(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_release_while_loading, fx_setup, fx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
