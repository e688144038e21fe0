/*
 * test_store_journal - the redo journal (store/lmdb/store_journal.c), a region
 * of data.mdb past LMDB's map. A crash that loses the last commit's meta
 * page is made by putting back LMDB's part of a copy of data.mdb taken
 * before that commit: the journal must then give the commit back, whole,
 * on the next open, even past the commit that wrapped to the region's
 * start; a torn record, a record of another store, or a record whose
 * commit failed must not be applied. A failed sync is made
 * by this file's own fsync() and fdatasync(), which LMDB calls too.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "test_store_files.h"
#include "test_store_help.h"
#include "../../store/lmdb/store_int.h"

#define J_BLOCK		4096	/* the first record's offset in the region */
#define REGION		(TEST_MAP - STORE_JOURNAL_SIZE)	/* where the region starts */

static int sync_armed, fail_next;	/* armed: the first fdatasync after an fsync fails */

/* fsync - the system's; armed, it makes the next fdatasync fail (region_write's fsync) */
int fsync(int fd)
{
	if (sync_armed)
		fail_next = 1;
	return (int) syscall(SYS_fsync, fd);
}

/* fdatasync - the system's, or EIO once when fsync said so */
int fdatasync(int fd)
{
	if (fail_next) {
		fail_next = sync_armed = 0;
		errno = EIO;
		return -1;
	}
	return (int) syscall(SYS_fdatasync, fd);
}

/* accept - what the commit of a submission writes: message, claim, key index */
static void accept(struct store_txn *t, struct store_msg *m, int tag)
{
	uint8_t h[STORE_HASH_LEN], kh[STORE_HASH_LEN];
	struct store_claim c;

	hash_of(h, tag);
	hash_of(kh, tag + 100);
	memset(&c, 0, sizeof(c));
	strcpy(c.qid, m->qid);
	c.accepted = NOW;
	c.expires = NOW + 3600LL * 1000000;
	m->has_key = 1;
	memcpy(m->keyhash, kh, STORE_HASH_LEN);
	m->ttl = 3600LL * 1000000;
	store_txn_msg_put(t, m);
	store_txn_claim_put(t, kh, h, &c);
}

/* tag_live - whether the claim of tag is live */
static int tag_live(struct store *st, int tag)
{
	uint8_t kh[STORE_HASH_LEN];

	hash_of(kh, tag + 100);
	return claim_found_under(st, kh, tag, NOW, NULL);
}

/* queued - whether a QID is in the spool */
static int queued(struct store *st, const char *qid)
{
	struct store_msg m;
	int rc = store_msg_load(st, qid, &m);

	if (rc == 0)
		store_msg_free(&m);
	assert_true(rc == 0 || rc == STORE_ENOTFOUND);
	return rc == 0;
}

/*
 * before_and_after - A spooled and synced, data.mdb saved; then one
 * commit B that spools B (a message with overflow pages) and delivers A
 * (its spool records deleted, its story rewritten); the store is closed
 * and LMDB's part of data.mdb put back as it was before B, the journal's
 * region kept as B left it.
 */
static void before_and_after(struct fx *f)
{
	struct store_msg a, b, *am;
	struct store_txn *t;

	msg_new(&a, "JRNA00000001", 1, 100);
	assert_int_equal(store_txn_begin(f->st, NULL, 0, &t), 0);
	accept(t, &a, 1);
	assert_int_equal(store_txn_commit(t), 0);
	store_close(f->st);
	f->st = NULL;
	copy_file(in_store(f, "data.mdb"), in_store(f, "data.mdb.before"));
	fx_reopen(f, TEST_MAP);

	msg_new(&b, "JRNB00000001", 1, 20000);
	am = &a;
	am->rcpts[0].state = STORE_RCPT_SENT;
	assert_int_equal(store_txn_begin(f->st, NULL, 0, &t), 0);
	accept(t, &b, 2);
	store_txn_msg_update(t, am);
	assert_int_equal(store_txn_commit(t), 0);
	store_close(f->st);
	f->st = NULL;
	copy_file(in_store(f, "data.mdb"), in_store(f, "data.mdb.after"));
	copy_file(in_store(f, "data.mdb.before"), in_store(f, "data.mdb"));
	copy_range(in_store(f, "data.mdb.after"), in_store(f, "data.mdb"), REGION,
		   STORE_JOURNAL_SIZE);
	store_msg_free(&a);
	store_msg_free(&b);
}

/* the lost commit comes back whole from the journal */
static void test_replay(void **state)
{
	struct fx *f = *state;
	struct store_story s;
	struct store_msg b, want;

	before_and_after(f);
	fx_reopen(f, TEST_MAP);
	assert_int_equal(store_msg_load(f->st, "JRNB00000001", &b), 0);
	msg_new(&want, "JRNB00000001", 1, 20000);	/* as before_and_after() spooled it */
	msg_check("B", &b, &want);
	store_msg_free(&want);
	store_msg_free(&b);
	CHECK_INT("B claim", tag_live(f->st, 2), 1);
	CHECK_INT("A left the spool", queued(f->st, "JRNA00000001"), 0);
	assert_int_equal(store_story_get(f->st, "JRNA00000001", &s), 0);
	CHECK_INT("A story finished", s.finished != 0, 1);
	CHECK_INT("A story recipient", s.m.rcpts[0].state, STORE_RCPT_SENT);
	store_story_free(&s);

	/* applied once: the next open finds nothing to do, and commits go on */
	fx_reopen(f, TEST_MAP);
	CHECK_INT("B still queued", queued(f->st, "JRNB00000001"), 1);
}

/*
 * A store of an older format whose last commit lost its meta page: this
 * build's first open records its format, a commit of its own, but only
 * after the journal gave the lost commit back, since the record is found
 * by the transaction id that commit would take. The commit that brought
 * the store to this format stands for an older build's commit before B.
 */
static void test_replay_old_store(void **state)
{
	struct fx *f = *state;
	struct store_msg b;
	struct store_txn *t;
	MDB_env *env;
	char got[16];

	env = raw_open(f);
	raw_op(env, "meta", 0, META_FORMAT, strlen(META_FORMAT), "1", 1);
	mdb_env_close(env);
	copy_file(in_store(f, "data.mdb"), in_store(f, "data.mdb.before"));
	fx_reopen(f, TEST_MAP);
	msg_new(&b, "JRNB00000001", 1, 100);
	assert_int_equal(store_txn_begin(f->st, NULL, 0, &t), 0);
	accept(t, &b, 2);
	assert_int_equal(store_txn_commit(t), 0);
	raw_shut(f);
	copy_file(in_store(f, "data.mdb"), in_store(f, "data.mdb.after"));
	copy_file(in_store(f, "data.mdb.before"), in_store(f, "data.mdb"));
	copy_range(in_store(f, "data.mdb.after"), in_store(f, "data.mdb"), REGION,
		   STORE_JOURNAL_SIZE);
	env = raw_env(f->path);		/* the older format again, one commit later */
	raw_op(env, "meta", 0, META_FORMAT, strlen(META_FORMAT), "1", 1);
	mdb_env_close(env);
	fx_reopen(f, TEST_MAP);
	CHECK_INT("B queued", queued(f->st, "JRNB00000001"), 1);
	CHECK_INT("B claim", tag_live(f->st, 2), 1);
	raw_shut(f);
	raw_meta(f->path, META_FORMAT, got, sizeof(got));
	CHECK_STR("then its format recorded", got, LMDB_TEXT(LMDB_FORMAT));
	fx_reopen(f, TEST_MAP);
	store_msg_free(&b);
}

/* a record torn by the crash was never acknowledged: the store opens without it */
static void test_torn_record(void **state)
{
	struct fx *f = *state;
	int fd;

	before_and_after(f);
	assert_true((fd = open(in_store(f, "data.mdb"), O_RDWR)) >= 0);
	assert_int_equal(pwrite(fd, "X", 1, REGION + J_BLOCK + 100), 1);
	close(fd);
	fx_reopen(f, TEST_MAP);
	CHECK_INT("B not queued", queued(f->st, "JRNB00000001"), 0);
	CHECK_INT("B claim", tag_live(f->st, 2), 0);
	CHECK_INT("A still queued", queued(f->st, "JRNA00000001"), 1);
}

/* another store's journal, whose record would fit the transaction id, is not applied */
static void test_other_store(void **state)
{
	struct fx *f = *state;
	struct fx g;

	before_and_after(f);
	/* g: a second store the same steps made, so its ids run the same */
	memset(&g, 0, sizeof(g));
	snprintf(g.dir, sizeof(g.dir), "%s", f->dir);
	snprintf(g.path, sizeof(g.path), "%s/other", f->dir);
	fx_reopen(&g, TEST_MAP);
	before_and_after(&g);
	copy_range(in_store(&g, "data.mdb"), in_store(f, "data.mdb"), REGION, STORE_JOURNAL_SIZE);
	fx_reopen(f, TEST_MAP);
	CHECK_INT("B not queued", queued(f->st, "JRNB00000001"), 0);
	CHECK_INT("A still queued", queued(f->st, "JRNA00000001"), 1);
	/* g's own journal still gives its commit back */
	fx_reopen(&g, TEST_MAP);
	CHECK_INT("g: B queued", queued(g.st, "JRNB00000001"), 1);
	store_close(g.st);
}

/*
 * A commit that fails (no file write may go past where LMDB's part ends,
 * so neither LMDB's new pages nor the record can be written) returns its
 * error, and the next open does not bring the message back.
 */
static void test_failed_commit(void **state)
{
	struct fx *f = *state;
	struct store_msg a, big;
	struct store_txn *t;
	struct rlimit old, lim;
	off_t end;
	int fd;

	msg_new(&a, "JRNA00000001", 1, 100);
	assert_int_equal(store_txn_begin(f->st, NULL, 0, &t), 0);
	accept(t, &a, 1);
	assert_int_equal(store_txn_commit(t), 0);

	assert_true((fd = open(in_store(f, "data.mdb"), O_RDONLY)) >= 0);
	end = lseek(fd, 0, SEEK_HOLE);		/* LMDB's part: the region lies past a hole */
	close(fd);
	assert_true(end > 0 && end < REGION);
	signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	lim = old;
	lim.rlim_cur = (rlim_t) end;
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
	msg_new(&big, "JRNF00000001", 1, 16000);	/* new pages past the end of data.mdb */
	assert_int_equal(store_txn_begin(f->st, NULL, 0, &t), 0);
	accept(t, &big, 3);
	assert_int_not_equal(store_txn_commit(t), 0);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, SIG_DFL);

	fx_reopen(f, TEST_MAP);
	CHECK_INT("failed message not queued", queued(f->st, "JRNF00000001"), 0);
	CHECK_INT("failed claim", tag_live(f->st, 3), 0);
	CHECK_INT("A queued", queued(f->st, "JRNA00000001"), 1);
	store_msg_free(&a);
	store_msg_free(&big);
}

/*
 * A record that can be written only in part (the file-size limit falls
 * inside it) is voided, and the commit goes the LMDB way and succeeds.
 */
static void test_record_cut(void **state)
{
	struct fx *f = *state;
	struct store_msg a, b;
	struct store_txn *t;
	struct rlimit old, lim;
	uint8_t txnid[8], zero[8] = { 0 };
	int fd;

	msg_new(&a, "JRNA00000001", 1, 100);	/* its record takes the region's first block */
	assert_int_equal(store_txn_begin(f->st, NULL, 0, &t), 0);
	accept(t, &a, 1);
	assert_int_equal(store_txn_commit(t), 0);

	signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	lim = old;
	lim.rlim_cur = (rlim_t) (REGION + 2 * J_BLOCK + 100);	/* inside the next record */
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
	msg_new(&b, "JRNB00000001", 1, 3000);
	assert_int_equal(store_txn_begin(f->st, NULL, 0, &t), 0);
	accept(t, &b, 2);
	CHECK_INT("commit without the record", store_txn_commit(t), 0);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, SIG_DFL);

	assert_true((fd = open(in_store(f, "data.mdb"), O_RDONLY)) >= 0);
	assert_int_equal(pread(fd, txnid, 8, REGION + 2 * J_BLOCK + 8), 8);
	close(fd);
	CHECK_INT("the cut record is voided", memcmp(txnid, zero, 8), 0);
	fx_reopen(f, TEST_MAP);
	CHECK_INT("B queued", queued(f->st, "JRNB00000001"), 1);
	CHECK_INT("B's claim", tag_live(f->st, 2), 1);
	store_msg_free(&a);
	store_msg_free(&b);
}

/* put_one - one message of len bytes, with the claim of tag, spooled in a commit of its own */
static void put_one(struct fx *f, const char *qid, int tag, size_t len)
{
	struct store_txn *t;
	struct store_msg m;

	msg_new(&m, qid, 1, len);
	assert_int_equal(store_txn_begin(f->st, NULL, 0, &t), 0);
	accept(t, &m, tag);
	assert_int_equal(store_txn_commit(t), 0);
	store_msg_free(&m);
}

/* rec_txnid - the transaction id of the record at off in the journal's region */
static uint64_t rec_txnid(const struct fx *f, uint64_t off)
{
	uint8_t b[8];
	uint64_t v = 0;
	int fd, i;

	assert_true((fd = open(in_store(f, "data.mdb"), O_RDONLY)) >= 0);
	assert_int_equal(pread(fd, b, 8, (off_t) (REGION + off + 8)), 8);
	close(fd);
	for (i = 7; i >= 0; i--)
		v = v << 8 | b[i];
	return v;
}

/*
 * A store that lost its last commit's meta page, opened next with a map
 * too small to spare a journal (store.map_size lowered under 32 MB): the
 * region its meta DB names, past the map it had, still gives the commit
 * back, and commits then go synced without a journal.
 */
static void test_replay_smaller_map(void **state)
{
	struct fx *f = *state;

	before_and_after(f);
	fx_reopen(f, 16u << 20);
	CHECK_INT("B queued", queued(f->st, "JRNB00000001"), 1);
	CHECK_INT("B claim", tag_live(f->st, 2), 1);
	CHECK_INT("A left the spool", queued(f->st, "JRNA00000001"), 0);
	put_one(f, "JRNC00000001", 3, 100);
	fx_reopen(f, TEST_MAP);
	CHECK_INT("B queued at the map it had", queued(f->st, "JRNB00000001"), 1);
	CHECK_INT("C queued", queued(f->st, "JRNC00000001"), 1);
}

/*
 * The commit that wraps the journal to the region's start writes its
 * record over the head of the records before it. A crash in its flush
 * that loses the previous commit's meta page (that commit acknowledged,
 * its record at the region's far end) must still find that record. Seven
 * records of about 1 MB, then P of one block, then N of 1.5 MB, which no
 * longer fits after P: it goes to the first block and ends inside the
 * old second record, where a walk from record to record stopped.
 */
static void test_replay_after_wrap(void **state)
{
	struct fx *f = *state;
	char qid[STORE_QID_SIZE];
	uint64_t first;
	int i;

	for (i = 0; i < 7; i++) {
		snprintf(qid, sizeof(qid), "JRNW%08d", i);
		put_one(f, qid, 10 + i, 1000000);
	}
	/* the store open and idle: LMDB has written all of it to the file */
	copy_file(in_store(f, "data.mdb"), in_store(f, "data.mdb.before"));
	first = rec_txnid(f, J_BLOCK);
	put_one(f, "JRNP00000001", 1, 100);
	put_one(f, "JRNN00000001", 2, 1500000);
	CHECK_INT("N's record went to the region's start", rec_txnid(f, J_BLOCK) > first, 1);
	raw_shut(f);
	copy_file(in_store(f, "data.mdb"), in_store(f, "data.mdb.after"));
	copy_file(in_store(f, "data.mdb.before"), in_store(f, "data.mdb"));
	copy_range(in_store(f, "data.mdb.after"), in_store(f, "data.mdb"), REGION,
		   STORE_JOURNAL_SIZE);
	fx_reopen(f, TEST_MAP);
	CHECK_INT("P, acknowledged, queued", queued(f->st, "JRNP00000001"), 1);
	CHECK_INT("P's claim", tag_live(f->st, 1), 1);
	CHECK_INT("the seventh queued", queued(f->st, "JRNW00000006"), 1);
}

/* region_lost - the journal's region header overwritten: the next open makes one anew */
static void region_lost(struct fx *f)
{
	int fd;

	assert_true((fd = open(in_store(f, "data.mdb"), O_RDWR)) >= 0);
	assert_int_equal(pwrite(fd, "XXXXXXXX", 8, REGION), 8);
	close(fd);
}

/*
 * An open whose own commit (naming a journal region made anew: the old
 * one's header is gone) fails its sync must not serve on it. A reopen
 * after a failed sync stays refusing, and the next upkeep opens it; a
 * first open fails, or opens refusing.
 */
static void test_reopen_sync_fails(void **state)
{
	struct fx *f = *state;
	struct store_msg a;
	struct store_txn *t;
	struct store *st = NULL;
	char err[512];
	int rc;

	msg_new(&a, "JRNA00000001", 1, 100);
	assert_int_equal(store_txn_begin(f->st, NULL, 0, &t), 0);
	accept(t, &a, 1);
	assert_int_equal(store_txn_commit(t), 0);
	region_lost(f);
	lmdb_break(lmdb_of(f->st), "a test's failed sync");
	sync_armed = 1;
	CHECK_INT("the reopen's own sync failed: upkeep", store_upkeep(f->st) != 0, 1);
	CHECK_INT("the sync failed (armed and fired)", sync_armed, 0);
	CHECK_INT("still refusing", store_health(f->st) & STORE_HREFUSING, STORE_HREFUSING);
	CHECK_INT("the next upkeep opens it", store_upkeep(f->st), 0);
	CHECK_INT("refusing no more", store_health(f->st) & STORE_HREFUSING, 0);
	CHECK_INT("A queued", queued(f->st, "JRNA00000001"), 1);

	store_close(f->st);
	f->st = NULL;
	region_lost(f);
	sync_armed = 1;
	rc = store_lmdb_open(&st, f->path, TEST_MAP, err, sizeof(err));
	CHECK_INT("the first open's own sync failed (armed and fired)", sync_armed, 0);
	CHECK_INT("the first open fails or refuses",
		  rc != 0 || (store_health(st) & STORE_HREFUSING) != 0, 1);
	if (st)
		store_close(st);
	fx_reopen(f, TEST_MAP);
	CHECK_INT("A queued after", queued(f->st, "JRNA00000001"), 1);
	store_msg_free(&a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_replay, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_replay_old_store, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_torn_record, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_other_store, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_failed_commit, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_record_cut, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_replay_after_wrap, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_replay_smaller_map, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_reopen_sync_fails, fx_setup, fx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
