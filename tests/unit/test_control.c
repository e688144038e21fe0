/*
 * test_control - the admin thread's story expiry and its reading of a
 * request line (daemon/control.c, compiled in here to reach its expire()
 * and serve()). A batch of store_hist_expire()
 * may delete fewer stories than it went through: an expiry entry whose
 * story went another way is deleted uncounted. That is not the end of a
 * backlog: one pass deletes every story due. Always on LMDB, whose
 * index a stale entry is planted in behind the store's back.
 */
#include "../../daemon/control.c"

#include <lmdb.h>
#include <sys/time.h>
#include <sys/wait.h>

#include "test_store_files.h"
#include "test_store_help.h"

/* stale_entry - an expiry entry at NOW for a QID that has no story (the store closed) */
static void stale_entry(const char *path)
{
	uint64_t v = (uint64_t) NOW ^ 0x8000000000000000ull;
	uint8_t ik[8 + 12];
	int i;

	for (i = 0; i < 8; i++)
		ik[i] = (uint8_t) (v >> (56 - 8 * i));
	memcpy(ik + 8, "STALE0000001", 12);
	env_put_expiry(path, ik, sizeof(ik));
}

/*
 * test_expire_past_stale - more stories due than a batch, and a stale
 * entry first in the index: the first batch deletes one story fewer than
 * it went through, and the pass still ends with none left. With the loop
 * going on only while a batch was full, the rest waited EXPIRE_EVERY.
 */
static void test_expire_past_stale(void **state)
{
	enum { N = EXPIRE_BATCH + 10, PER_TXN = 500 };
	struct fx *f = *state;
	struct control ctl;
	struct store_txn *t;
	struct store_msg m;
	struct timeval tv;
	uint64_t stories, keys;
	int64_t later;
	int i;

	store_close(f->st);
	f->st = NULL;
	stale_entry(f->path);
	fx_reopen(f, TEST_MAP);
	msg_new(&m, "000000000000", 1, 10);
	for (i = 0; i < N; i++) {
		if (i % PER_TXN == 0)
			assert_int_equal(store_txn_begin(f->st, NULL, 0, &t), 0);
		snprintf(m.qid, sizeof(m.qid), "0000000%05d", i);
		store_txn_msg_put(t, &m);
		m.rcpts[0].state = STORE_RCPT_SENT;
		store_txn_msg_update(t, &m);	/* delivered: its story due in a day */
		m.rcpts[0].state = STORE_RCPT_QUEUED;
		if (i % PER_TXN == PER_TXN - 1 || i == N - 1)
			CHECK_INT("commit", store_txn_commit(t), 0);
	}
	store_msg_free(&m);
	CHECK_INT("hist stats", stories_of(f->st, &stories, &keys), 0);
	CHECK_INT("stories", stories, N);
	/*
	 * Three days on, every story is due; and the pass's budget, counted
	 * from that time, cannot run out: the loop's end is the batches' own.
	 */
	gettimeofday(&tv, NULL);
	later = (int64_t) tv.tv_sec * SEC + 3 * 86400 * SEC;
	memset(&ctl, 0, sizeof(ctl));
	ctl.st = f->st;
	expire(&ctl, later);
	CHECK_INT("hist stats", stories_of(f->st, &stories, &keys), 0);
	CHECK_INT("stories left after one pass", stories, 0);
	CHECK_INT("the pass failed", ctl.expire_failed, 0);
	CHECK_INT("the pass is over (next in EXPIRE_EVERY)", ctl.last_expire, later);
	store_close(f->st);
	f->st = NULL;
	CHECK_INT("expiry entries left", raw_count(f->path, "hexpiry"), 0);
	fx_reopen(f, TEST_MAP);
}

/* no_delivery - queue_admin_sched's unschedule: nothing is being delivered */
static int no_delivery(void *arg, const char *qid)
{
	(void) arg;
	(void) qid;
	return 0;
}

/* ask - serve() one request as the admin thread reads it whole; the reply into out */
static void ask(struct control *ctl, const char *req, struct buf *out)
{
	char line[256];

	snprintf(line, sizeof(line), "%s", req);
	buf_reset(out);
	serve(ctl, -1, line, strlen(line), 0, out);
}

/* queued - is qid in the queue? */
static int queued(struct store *st, const char *qid)
{
	struct store_msg m;

	if (store_msg_load(st, qid, &m) != 0)
		return 0;
	store_msg_free(&m);
	return 1;
}

/*
 * test_request_control_chars - a request line with a CR or LF before its
 * end, or any control character, is refused whole: cut at its first CR
 * or LF, "drop from P\nx to Q" was a drop by P alone (the message, which
 * Q does not match, dropped). A line ended by LF or CR LF is one request.
 */
static void test_request_control_chars(void **state)
{
	static const char *const bad[] = {
		"drop from *@example.com\nx to nobody@*\n",
		"drop from *@example.com\rx to nobody@*\r\n",
		"drop from *@example.com\nto nobody@*",
		"drop from *@example.com\001 to nobody@*\n",
		"drop from *@example.com\tto nobody@*\n",
		"ping\nflush\n",
	};
	struct fx *f = *state;
	struct control ctl;
	struct store_msg m;
	struct buf out = BUF_INIT;
	size_t i;

	msg_new(&m, "000000000001", 1, 10);	/* sender@example.com to rcpt0@example.net */
	CHECK_INT("spool", spool(f->st, &m, NULL, 0, 0), 0);
	memset(&ctl, 0, sizeof(ctl));
	ctl.st = f->st;
	ctl.sched.unschedule = no_delivery;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ask(&ctl, bad[i], &out);
		if (strstr(out.data, "\"error\":\"a control character in the request line") == NULL)
			fail_msg("request %zu answered %s", i, out.data);
	}
	CHECK_INT("still queued after the refused requests", queued(f->st, m.qid), 1);
	ask(&ctl, "ping\r\n", &out);
	if (strstr(out.data, "{\"ok\":true,\"pid\":") != out.data)
		fail_msg("ping CR LF answered %s", out.data);
	ask(&ctl, "drop from *@example.com to nobody@*\n", &out);
	if (strstr(out.data, "\"count\":0") == NULL)
		fail_msg("the whole line answered %s", out.data);
	CHECK_INT("still queued after a drop it does not match", queued(f->st, m.qid), 1);
	ask(&ctl, "drop from *@example.com to rcpt0@*\r\n", &out);
	if (strstr(out.data, "\"dropped\":[\"000000000001\"]") == NULL)
		fail_msg("the drop it matches answered %s", out.data);
	CHECK_INT("dropped", queued(f->st, m.qid), 0);
	store_msg_free(&m);
	buf_free(&out);
}

/*
 * test_socket_gone_at_a_fatal - a start that fails once the socket is
 * bound (the store cannot be opened, another daemon has it, delivery
 * cannot start) removes it: left there with nothing listening, it told
 * a non-root idemrelayctl "Permission denied: run as root" (mode 0600),
 * and root ECONNREFUSED. A child binds it, then dies of msg_fatal().
 */
static void test_socket_gone_at_a_fatal(void **state)
{
	char dir[] = "/tmp/test_control.XXXXXX", path[64];
	struct conf c = { 0 };
	struct stat sb;
	pid_t pid;
	int status;

	(void) state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/ctl.sock", dir);
	c.control = path;
	if ((pid = fork()) == 0) {
		(void) control_open(&c);
		if (lstat(path, &sb) != 0)
			_exit(2);	/* not bound */
		msg_fatal("a fatal error after the bind, as the store's open may be");
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	CHECK_INT("the child's exit status", WIFEXITED(status) ? WEXITSTATUS(status) : -1, 1);
	if (lstat(path, &sb) == 0)
		fail_msg("%s is left after the fatal error, with nothing listening", path);
	(void) unlink(path);
	assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_expire_past_stale, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_request_control_chars, fx_setup, fx_teardown),
		cmocka_unit_test(test_socket_gone_at_a_fatal),
	};

	unsetenv("IDEMRELAY_PG_URL");	/* LMDB's index: never the PostgreSQL fixture */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
