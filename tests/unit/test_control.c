/*
 * test_control - the admin thread's story expiry (daemon/control.c,
 * compiled in here to reach its expire()). A batch of store_hist_expire()
 * may delete fewer stories than it went through: an expiry entry whose
 * story went another way is deleted uncounted. That is not the end of a
 * backlog: one pass deletes every story due. Always on LMDB, whose
 * index a stale entry is planted in behind the store's back.
 */
#include "../../daemon/control.c"

#include <lmdb.h>
#include <sys/time.h>

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_expire_past_stale, fx_setup, fx_teardown),
	};

	unsetenv("IDEMRELAY_PG_URL");	/* LMDB's index: never the PostgreSQL fixture */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
