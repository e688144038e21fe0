/*
 * test_store_compact - the compaction at the daemon's start
 * (store/lmdb/store_compact.c): a store whose backlog left a long free
 * list is copied packed in place, every message, claim and story kept,
 * and its journal still covers a lost meta page afterwards; a short free
 * list is left alone; another process holding the store (its flock on
 * lock.mdb) puts the compaction off; a copy a crash left beside data.mdb
 * is removed and the store is whole.
 */
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_store_files.h"
#include "test_store_help.h"
#include "../../store/lmdb/store_int.h"

#define BIG		(1u << 20)	/* a backlog message's size */
#define N_BIG		40		/* the backlog: 40 MB, then delivered */
#define N_LIVE		5		/* messages still queued, with a claim each */
#define REGION		(TEST_MAP - STORE_JOURNAL_SIZE)	/* where the journal's region starts */

/* inode - data.mdb's inode number: a compaction makes a new file */
static ino_t inode(const struct fx *f)
{
	struct stat sb;

	assert_int_equal(stat(in_store(f, "data.mdb"), &sb), 0);
	return sb.st_ino;
}

/* free_pages - pages on LMDB's free list */
static uint64_t free_pages(const struct fx *f)
{
	uint64_t n;

	assert_int_equal(lmdb_space_freelist(lmdb_of(f->st), &n), 0);
	return n;
}

/* live_qid - the QID of live message i */
static void live_qid(char qid[STORE_QID_SIZE], int i)
{
	snprintf(qid, STORE_QID_SIZE, "CMPLIVE%05d", i);
}

/* backlog - N_LIVE messages queued with a claim each, and N_BIG more spooled and delivered */
static void backlog(struct fx *f)
{
	char qid[STORE_QID_SIZE];
	struct store_msg m;
	int i;

	for (i = 0; i < N_LIVE; i++) {
		live_qid(qid, i);
		msg_new(&m, qid, 2, 3000);
		CHECK_INT("spool a live one", spool(f->st, &m, &i, 1, NOW + 3600 * SEC), 0);
		store_msg_free(&m);
	}
	for (i = 0; i < N_BIG; i++) {
		snprintf(qid, sizeof(qid), "CMPBIG%06d", i);
		msg_new(&m, qid, 1, BIG);
		CHECK_INT("spool a big one", spool(f->st, &m, NULL, 0, 0), 0);
		store_msg_free(&m);
	}
	for (i = 0; i < N_BIG; i++) {
		snprintf(qid, sizeof(qid), "CMPBIG%06d", i);
		CHECK_INT("drop", store_msg_drop(f->st, qid), 0);
	}
}

/* all_there - every live message whole, each claim live */
static void all_there(struct fx *f)
{
	char qid[STORE_QID_SIZE];
	struct store_msg got, want;
	int i;

	for (i = 0; i < N_LIVE; i++) {
		live_qid(qid, i);
		CHECK_INT(qid, store_msg_load(f->st, qid, &got), 0);
		msg_new(&want, qid, 2, 3000);
		msg_check(qid, &got, &want);
		store_msg_free(&got);
		store_msg_free(&want);
		CHECK_INT("claim", claim_found(f->st, i, NOW, NULL), 1);
	}
}

/* test_compact_backlog - the free list goes, everything else stays, and the store goes on */
static void test_compact_backlog(void **state)
{
	struct fx *f = *state;
	struct lmdb_store *st = lmdb_of(f->st);
	struct store_msg m;
	uint64_t before;
	ino_t was = inode(f);
	int tag = 99;

	backlog(f);
	if ((before = free_pages(f)) < N_BIG * (BIG / 4096))
		fail_msg("free pages after the backlog: got %llu, want at least %u",
			 (unsigned long long) before, N_BIG * (BIG / 4096));
	CHECK_INT("compact", store_lmdb_compact(f->st), 0);
	if (inode(f) == was)
		fail_msg("data.mdb is the same file: not compacted");
	if (free_pages(f) > before / 100)
		fail_msg("free pages: got %llu, want at most %llu", (unsigned long long) free_pages(f),
			 (unsigned long long) before / 100);
	CHECK_INT("no copy left", access(in_store(f, "data.mdb.compact"), F_OK), -1);
	assert_non_null(st->j);		/* found in the copy, where the meta DB says */
	all_there(f);

	msg_new(&m, "CMPAFTER0001", 1, 20000);
	CHECK_INT("spool after", spool(f->st, &m, &tag, 1, NOW + 3600 * SEC), 0);
	fx_reopen(f, TEST_MAP);
	all_there(f);
	CHECK_INT("the one after", claim_found(f->st, tag, NOW, NULL), 1);
	store_msg_free(&m);
	CHECK_INT("load the one after", store_msg_load(f->st, "CMPAFTER0001", &m), 0);
	store_msg_free(&m);
}

/* test_compact_not_due - a short free list: the file stays as it is */
static void test_compact_not_due(void **state)
{
	struct fx *f = *state;
	char qid[STORE_QID_SIZE];
	struct store_msg m;
	ino_t was;
	int i;

	for (i = 0; i < N_LIVE; i++) {
		live_qid(qid, i);
		msg_new(&m, qid, 2, 3000);
		CHECK_INT("spool", spool(f->st, &m, &i, 1, NOW + 3600 * SEC), 0);
		store_msg_free(&m);
	}
	was = inode(f);
	CHECK_INT("compact", store_lmdb_compact(f->st), 0);
	CHECK_INT("the same file", inode(f) == was, 1);
	all_there(f);
}

/*
 * put_off_by - with fd holding the lock (how) another process would, a
 * compaction is put off, the store serving as it was and lock.mdb still
 * held shared by the store (no one may take it exclusively meanwhile);
 * once fd is closed, the store is compacted
 */
static void put_off_by(struct fx *f, int fd, int how)
{
	uint64_t before;
	ino_t was;
	int other;

	backlog(f);
	before = free_pages(f);
	was = inode(f);
	assert_int_equal(flock(fd, how), 0);
	CHECK_INT("compact while another holds it", store_lmdb_compact(f->st), 0);
	CHECK_INT("the same file", inode(f) == was, 1);
	CHECK_INT("the same free list", free_pages(f), before);
	all_there(f);
	close(fd);			/* its lock goes with it */
	assert_true((other = open(in_store(f, "lock.mdb"), O_RDONLY)) >= 0);
	CHECK_INT("lock.mdb still held shared by the store", flock(other, LOCK_EX | LOCK_NB), -1);
	close(other);
	CHECK_INT("compact alone", store_lmdb_compact(f->st), 0);
	CHECK_INT("a new file", inode(f) != was, 1);
	all_there(f);
}

/* test_compact_put_off - another process has the store open (its shared flock on lock.mdb) */
static void test_compact_put_off(void **state)
{
	struct fx *f = *state;
	int fd;

	assert_true((fd = open(in_store(f, "lock.mdb"), O_RDONLY)) >= 0);
	put_off_by(f, fd, LOCK_SH);
}

/*
 * test_compact_copy_fails - the copy cannot be written (here: its name is
 * taken by a directory; on a full disk, no room): the store serves as it
 * was, the same file, its messages there, and it takes a commit
 */
static void test_compact_copy_fails(void **state)
{
	struct fx *f = *state;
	struct store_msg m;
	int tag = 78;
	ino_t was;

	backlog(f);
	was = inode(f);
	assert_int_equal(mkdir(in_store(f, "data.mdb.compact"), 0700), 0);
	CHECK_INT("compact", store_lmdb_compact(f->st), 0);
	CHECK_INT("the same file", inode(f) == was, 1);
	all_there(f);
	msg_new(&m, "CMPFAIL00001", 1, 100);
	CHECK_INT("a commit after", spool(f->st, &m, &tag, 1, NOW + 3600 * SEC), 0);
	store_msg_free(&m);
	assert_int_equal(rmdir(in_store(f, "data.mdb.compact")), 0);
}

/* test_compact_crash_copy - a copy a crash left half written: removed, the store whole */
static void test_compact_crash_copy(void **state)
{
	struct fx *f = *state;
	char junk[8192];
	ino_t was;
	int fd;

	backlog(f);
	memset(junk, 0x5a, sizeof(junk));
	assert_true((fd = open(in_store(f, "data.mdb.compact"), O_WRONLY | O_CREAT, 0600)) >= 0);
	assert_int_equal(write(fd, junk, sizeof(junk)), (ssize_t) sizeof(junk));
	close(fd);
	fx_reopen(f, TEST_MAP);		/* the start after the crash */
	all_there(f);
	was = inode(f);
	CHECK_INT("compact", store_lmdb_compact(f->st), 0);
	CHECK_INT("compacted", inode(f) != was, 1);
	CHECK_INT("no copy left", access(in_store(f, "data.mdb.compact"), F_OK), -1);
	all_there(f);
	fx_reopen(f, TEST_MAP);
	all_there(f);
}

/*
 * test_compact_journal - after a compaction the journal still covers the
 * last commit: its meta page lost (LMDB's part of data.mdb put back as it
 * was before the commit, the journal's region as the commit left it), the
 * next open gives the commit back
 */
static void test_compact_journal(void **state)
{
	struct fx *f = *state;
	struct store_msg m;
	int tag = 77;

	backlog(f);
	CHECK_INT("compact", store_lmdb_compact(f->st), 0);
	store_close(f->st);
	f->st = NULL;
	copy_file(in_store(f, "data.mdb"), in_store(f, "data.mdb.before"));
	fx_open(f, TEST_MAP);
	msg_new(&m, "CMPJRNL00001", 1, 20000);
	CHECK_INT("spool", spool(f->st, &m, &tag, 1, NOW + 3600 * SEC), 0);
	store_msg_free(&m);
	store_close(f->st);
	f->st = NULL;
	/* LMDB's part as before the commit; the region as after it */
	copy_range(in_store(f, "data.mdb.before"), in_store(f, "data.mdb"), 0, REGION);
	fx_open(f, TEST_MAP);
	CHECK_INT("the commit replayed", store_msg_load(f->st, "CMPJRNL00001", &m), 0);
	store_msg_free(&m);
	CHECK_INT("its claim", claim_found(f->st, tag, NOW, NULL), 1);
	all_there(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_compact_backlog, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_compact_not_due, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_compact_put_off, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_compact_copy_fails, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_compact_crash_copy, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_compact_journal, fx_setup, fx_teardown),
	};

	return cmocka_run_group_tests_name("store_compact", tests, NULL, NULL);
}
