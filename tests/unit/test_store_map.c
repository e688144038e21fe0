/*
 * test_store_map - the map grows at run time (store_map.c): across the
 * journal's region, with a reopen after each of its steps as a crash there
 * would leave it, up to a ceiling; and the bytes a message leaves behind.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <lmdb.h>

#include "../../store/store.h"
#include "../../store/lmdb/store_int.h"
#include "../../util/buf.h"
#include "test_store_fx.h"

#define START	(32u << 20)	/* the smallest map with a journal: its region at 24 MB */
#define GROWN	(64u << 20)
#define NOW	1700000000000000LL

/* fx_setup_start - a store at the start size */
static int fx_setup_start(void **state)
{
	return fx_setup_map(state, START);
}

/* put - spool message i with len bytes of data; 0 or a STORE_E* code */
static int put(struct store *st, int i, size_t len)
{
	struct store_rcpt r = { .addr = "r@example.net" };
	struct store_msg m;
	struct store_txn *t;
	int rc;

	memset(&m, 0, sizeof(m));
	snprintf(m.qid, sizeof(m.qid), "MAP%09d", i);
	m.accepted = NOW;
	m.from = "s@example.com";
	m.client = "helo [192.0.2.1]";
	m.rcpts = &r;
	m.n_rcpts = 1;
	m.data = xmalloc(len);
	memset(m.data, 'a' + i % 26, len);
	m.data_len = len;
	if ((rc = store_txn_begin(st, NULL, 0, &t)) == 0) {
		store_txn_msg_put(t, &m);
		rc = store_txn_commit(t);
	}
	free(m.data);
	return rc;
}

/* check - message i is there whole (or, gone, absent) */
static void check(struct store *st, int i, size_t len, int gone)
{
	struct store_msg m;
	char qid[STORE_QID_SIZE];
	int rc;

	snprintf(qid, sizeof(qid), "MAP%09d", i);
	rc = store_msg_load(st, qid, &m);
	if (gone) {
		CHECK_INT(qid, rc, STORE_ENOTFOUND);
		return;
	}
	CHECK_INT(qid, rc, 0);
	CHECK_INT("data_len", m.data_len, len);
	if (m.data[0] != 'a' + i % 26 || m.data[len - 1] != 'a' + i % 26)
		fail_msg("%s: data differs", qid);
	store_msg_free(&m);
}

/* map - LMDB's map size now */
static uint64_t map(struct store *st)
{
	struct store_stats s;

	CHECK_INT("stats", store_stats(st, &s, 0), 0);
	return s.space.size;
}

/*
 * grow_after - grow from START to GROWN stopping after steps, reopen at
 * START as a restart would, and check: the map the store opens with, and
 * that pages written over the old journal region (more than 24 MB of
 * messages) and deletes after the growth survive another reopen, with no
 * record of the old region applied over them.
 */
static void grow_after(struct fx *f, int steps)
{
	uint64_t want = steps >= 2 ? lmdb_map_jbase(GROWN) : lmdb_map_jbase(START);
	int i, n = 0;

	for (i = 0; i < 20; i++)
		CHECK_INT("put before", put(f->st, n++, 50000), 0);
	CHECK_INT("grow", lmdb_map_grow(lmdb_of(f->st), GROWN, steps), 0);
	fx_reopen(f, START);
	CHECK_INT("map after the reopen", map(f->st), want);
	for (i = 0; i < n; i++)
		check(f->st, i, 50000, 0);
	if (steps < 2) {
		CHECK_INT("grow again", lmdb_map_grow(lmdb_of(f->st), GROWN, 3), 0);
		CHECK_INT("map grown", map(f->st), lmdb_map_jbase(GROWN));
	}
	/* 30 MB more: LMDB's pages now cover where the old region was */
	for (i = 0; i < 600; i++)
		CHECK_INT("put over the old region", put(f->st, n++, 50000), 0);
	for (i = 0; i < 10; i++) {
		char qid[STORE_QID_SIZE];

		snprintf(qid, sizeof(qid), "MAP%09d", i);
		CHECK_INT("drop", store_msg_drop(f->st, qid), 0);
	}
	fx_reopen(f, START);
	CHECK_INT("map after the second reopen", map(f->st), lmdb_map_jbase(GROWN));
	for (i = 0; i < n; i++)
		check(f->st, i, 50000, i < 10);
}

static void test_grow_step1(void **state)
{
	grow_after(*state, 1);
}

static void test_grow_step2(void **state)
{
	grow_after(*state, 2);
}

static void test_grow_step3(void **state)
{
	grow_after(*state, 3);
}

/* test_grow_by_itself - store_upkeep() doubles the map as it fills, up to the ceiling */
static void test_grow_by_itself(void **state)
{
	struct fx *f = *state;
	int i, rc = 0;

	store_lmdb_set_map_max(f->st, 3 * (uint64_t) START);
	for (i = 0; i < 4000 && (rc = put(f->st, i, 50000)) == 0; i++)
		(void) store_upkeep(f->st);
	CHECK_INT("filling ends in", rc, STORE_ENOSPC);
	CHECK_INT("map at the ceiling", map(f->st), lmdb_map_jbase(3 * (uint64_t) START));
	if (i < 1500)
		fail_msg("accepted: got %d messages of 50 KB, want more than 1500 in 96 MB", i);
	fx_reopen(f, START);
	CHECK_INT("map after a reopen", map(f->st), lmdb_map_jbase(3 * (uint64_t) START));
	while (i-- > 0)
		check(f->st, i, 50000, 0);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup_start, fx_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_grow_step1),
		T(test_grow_step2),
		T(test_grow_step3),
		T(test_grow_by_itself),
	};

	return cmocka_run_group_tests_name("store_map", tests, NULL, NULL);
}
