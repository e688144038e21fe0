/*
 * test_store_raw - what the LMDB backend makes of databases written
 * under its feet, the store closed meanwhile: a store of an older format
 * (0.1's) read and brought up to date, one from before 0.1 and one of a
 * newer format refused by both opens, records corrupted refused, skipped,
 * logged safely or replaced. Always on LMDB, whatever IDEMRELAY_PG_URL says.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <lmdb.h>

#include "../../store/store.h"
#include "../../store/lmdb/store_int.h"
#include "../../util/buf.h"
#include "test_store_files.h"
#include "test_store_help.h"

static int commits, fail_at;	/* mdb_txn_commit calls since armed; the one to fail, 0 none */

/* mdb_txn_commit - LMDB's, but the fail_at-th call aborts instead (EIO): a crash before it */
int mdb_txn_commit(MDB_txn *txn)
{
	static int (*real)(MDB_txn *);

	if (real == NULL)
		real = (int (*)(MDB_txn *)) dlsym(RTLD_NEXT, "mdb_txn_commit");
	if (fail_at && ++commits == fail_at) {
		mdb_txn_abort(txn);
		return EIO;
	}
	return real(txn);
}

/* raw_exists - is there a named database? the store must be closed */
static int raw_exists(const char *path, const char *db)
{
	MDB_env *env = raw_env(path);
	MDB_txn *txn;
	MDB_dbi dbi;
	int rc;

	assert_int_equal(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
	rc = mdb_dbi_open(txn, db, 0, &dbi);
	mdb_txn_abort(txn);
	mdb_env_close(env);
	return rc == 0;
}

/*
 * raw_as_01 - the store made as idemrelay 0.1 left it: no format
 * recorded, no staging databases (cnew, hnew), an empty keys DB, and
 * meta's claims_by_key if by_key (0.1 wrote it into every store whose
 * claims were filed under their key; a store without it is older)
 */
static void raw_as_01(MDB_env *env, int by_key)
{
	MDB_val fmt = { strlen(META_FORMAT), META_FORMAT };
	MDB_val bk = { strlen(META_CLAIMS_BY_KEY), META_CLAIMS_BY_KEY }, one = { 1, "1" };
	MDB_dbi dbi;
	MDB_txn *txn;

	assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
	assert_int_equal(mdb_dbi_open(txn, "meta", 0, &dbi), 0);
	assert_int_equal(mdb_del(txn, dbi, &fmt, NULL), 0);
	if (by_key)
		assert_int_equal(mdb_put(txn, dbi, &bk, &one, 0), 0);
	assert_int_equal(mdb_dbi_open(txn, "cnew", 0, &dbi), 0);
	assert_int_equal(mdb_drop(txn, dbi, 1), 0);
	assert_int_equal(mdb_dbi_open(txn, "hnew", 0, &dbi), 0);
	assert_int_equal(mdb_drop(txn, dbi, 1), 0);
	assert_int_equal(mdb_dbi_open(txn, "keys", MDB_CREATE | MDB_DUPSORT, &dbi), 0);
	assert_int_equal(mdb_txn_commit(txn), 0);
}

/*
 * test_store_01 - a store as idemrelay 0.1, the first package, wrote it:
 * read by the read-only open as it is (nothing staged), then brought to
 * this format by the first writable open (cnew and hnew made, format 2
 * recorded)
 */
static void test_store_01(void **state)
{
	struct fx *f = *state;
	struct store *st = NULL;
	struct store_msg m, got;
	char err[256] = "", fmt[16];
	MDB_env *env;

	msg_new(&m, "VZERO0000001", 1, 10);
	assert_int_equal(spool(f->st, &m, NULL, 0, 0), 0);
	env = raw_open(f);
	raw_as_01(env, 1);
	mdb_env_close(env);

	if (store_lmdb_open_readonly(&st, f->path, err, sizeof(err)) != 0)
		fail_msg("read-only open of 0.1's store: \"%s\"", err);
	CHECK_INT("its message read", store_msg_load(st, m.qid, &got), 0);
	store_msg_free(&got);
	store_close(st);
	CHECK_INT("nothing staged yet", raw_exists(f->path, "cnew"), 0);

	fx_open(f, TEST_MAP);
	CHECK_INT("its message, writable", store_msg_load(f->st, m.qid, &got), 0);
	store_msg_free(&got);
	raw_shut(f);
	raw_meta(f->path, META_FORMAT, fmt, sizeof(fmt));
	CHECK_STR("our format recorded", fmt, "2");
	CHECK_INT("cnew made", raw_exists(f->path, "cnew"), 1);
	CHECK_INT("hnew made", raw_exists(f->path, "hnew"), 1);
	fx_open(f, TEST_MAP);
	store_msg_free(&m);
}

/*
 * test_before_01 - a store written before idemrelay 0.1 (here one claim
 * filed under its claim hash alone, with its keys DB entry, as such a
 * store had them) is refused by both opens, one message saying so, and
 * left as it was
 */
static void test_before_01(void **state)
{
	struct fx *f = *state;
	struct store *st = NULL;
	struct store_claim c;
	uint8_t h[STORE_HASH_LEN], rec[STORE_CLAIM_REC_LEN], entry[STORE_HASH_LEN + 12];
	char err[256] = "", fmt[16];
	MDB_env *env;

	env = raw_open(f);
	raw_as_01(env, 0);
	hash_of(h, 77);
	claim_of(&c, "OLDCLAIM0001", 5, NOW + SEC);
	raw_op(env, "claims", 0, h, STORE_HASH_LEN, rec, lmdb_claim_encode(rec, &c));
	memcpy(entry, h, STORE_HASH_LEN);
	memcpy(entry + STORE_HASH_LEN, c.qid, 12);
	raw_op(env, "keys", MDB_DUPSORT, KH, STORE_HASH_LEN, entry, sizeof(entry));
	mdb_env_close(env);

	CHECK_INT("open refused", store_lmdb_open(&st, f->path, TEST_MAP, err, sizeof(err)),
		  STORE_EINVAL);
	if (st != NULL || strstr(err, "written by an idemrelay older than 0.1, the first package,"
				 " which this one does not read") == NULL)
		fail_msg("open of a store from before 0.1: \"%s\"", err);
	err[0] = 0;
	CHECK_INT("read-only open refused", store_lmdb_open_readonly(&st, f->path, err,
								     sizeof(err)), STORE_EINVAL);
	if (strstr(err, "older than 0.1") == NULL)
		fail_msg("read-only open of a store from before 0.1: \"%s\"", err);
	raw_meta(f->path, META_FORMAT, fmt, sizeof(fmt));
	CHECK_STR("no format recorded", fmt, "");
	CHECK_INT("its key index left", raw_count(f->path, "keys"), 1);
	CHECK_INT("no staging made", raw_exists(f->path, "cnew"), 0);
}

/*
 * test_new_store_crash - a new store's first open, cut short after the
 * commit that made its databases (the journal's commit fails): that
 * commit recorded the format, so the next open takes the store as ours,
 * not as one from before 0.1
 */
static void test_new_store_crash(void **state)
{
	struct fx *f = *state;
	char err[256] = "", fmt[16];

	raw_shut(f);
	assert_int_equal(unlink(in_store(f, "data.mdb")), 0);
	assert_int_equal(unlink(in_store(f, "lock.mdb")), 0);
	commits = 0;
	fail_at = 2;
	CHECK_INT("the first open crashed", store_lmdb_open(&f->st, f->path, TEST_MAP, err,
							     sizeof(err)) != 0, 1);
	fail_at = 0;
	CHECK_INT("after its databases were made", raw_exists(f->path, "claims"), 1);
	raw_meta(f->path, META_FORMAT, fmt, sizeof(fmt));
	CHECK_STR("with its format", fmt, "2");
	fx_open(f, TEST_MAP);
}

/*
 * test_format - a store records the format it was written in; one of a
 * greater format (a newer idemrelay's, whose claims this build might not
 * see) is refused by both opens, saying why, and left as it was
 */
static void test_format(void **state)
{
	struct fx *f = *state;
	struct store *st = NULL;
	char err[256] = "", got[16];
	MDB_env *env;

	raw_shut(f);
	raw_meta(f->path, META_FORMAT, got, sizeof(got));
	CHECK_STR("the format recorded", got, "2");

	env = raw_env(f->path);
	raw_op(env, "meta", 0, META_FORMAT, strlen(META_FORMAT), "1", 1);	/* an older one */
	raw_close(f, env);
	raw_shut(f);
	raw_meta(f->path, META_FORMAT, got, sizeof(got));
	CHECK_STR("a writable open records its own", got, "2");

	env = raw_env(f->path);
	raw_op(env, "meta", 0, META_FORMAT, strlen(META_FORMAT), "3", 1);	/* a newer one */
	mdb_env_close(env);
	CHECK_INT("open refused", store_lmdb_open(&st, f->path, TEST_MAP, err, sizeof(err)),
		  STORE_EINVAL);
	if (st != NULL || strstr(err, "written by a newer idemrelay") == NULL)
		fail_msg("open of a newer store: \"%s\"", err);
	err[0] = 0;
	CHECK_INT("read-only open refused", store_lmdb_open_readonly(&st, f->path, err,
								     sizeof(err)), STORE_EINVAL);
	if (strstr(err, "written by a newer idemrelay") == NULL)
		fail_msg("read-only open of a newer store: \"%s\"", err);
	raw_meta(f->path, META_FORMAT, got, sizeof(got));
	CHECK_STR("left as it was", got, "3");

	env = raw_env(f->path);
	raw_op(env, "meta", 0, META_FORMAT, strlen(META_FORMAT), "2", 1);
	raw_close(f, env);
}

/* test_corrupt_records - garbage written under the store's feet */
static void test_corrupt_records(void **state)
{
	struct fx *f = *state;
	struct store_msg m, got;
	struct store_txn *t;
	struct store_claim c, claims[2];
	struct list_acc a;
	uint8_t h[2][STORE_HASH_LEN], ck[2 * STORE_HASH_LEN], *orphan;
	int hash = 1;
	MDB_env *env;
	char qid[STORE_QID_SIZE];
	size_t orphan_len;

	msg_new(&m, "GOOD00000001", 1, 10);
	assert_int_equal(spool(f->st, &m, &hash, 1, NOW + SEC), 0);
	store_msg_free(&m);
	msg_new(&m, "QBAD00000001", 1, 10);
	assert_int_equal(spool(f->st, &m, NULL, 0, 0), 0);
	store_msg_free(&m);
	msg_new(&m, "MBAD00000001", 1, 10);
	assert_int_equal(spool(f->st, &m, NULL, 0, 0), 0);
	orphan_len = lmdb_queue_rec_size(&m);
	orphan = xmalloc(orphan_len);
	lmdb_queue_rec_encode(orphan, orphan_len, &m);
	store_msg_free(&m);
	env = raw_open(f);
	hash_of(h[1], 2);
	memcpy(ck, KH, STORE_HASH_LEN);		/* filed under its key, then its hash */
	memcpy(ck + STORE_HASH_LEN, h[1], STORE_HASH_LEN);
	raw_put(env, "claims", ck, sizeof(ck), "\x01\x05junk", 7);
	raw_put(env, "queue", "QBAD00000001", 12, "\x01\xff", 2);
	raw_put(env, "msg", "MBAD00000001", 12, "\x02garbage", 8);
	raw_put(env, "queue", "ORPHAN000001", 12, orphan, orphan_len);
	free(orphan);
	raw_put(env, "meta", "last_qid", 8, "", 0);
	raw_close(f, env);

	hash_of(h[0], 1);
	CHECK_INT("claims_get with a corrupt one",
		  store_claims_get(f->st, NULL, KH, (const uint8_t (*)[STORE_HASH_LEN]) h, 2, NOW,
				   claims),
		  STORE_EINVAL);
	CHECK_INT("good claim alone", claim_found(f->st, 1, NOW, NULL), 1);
	assert_int_equal(store_txn_begin(f->st, NULL, 0, &t), 0);
	CHECK_INT("in a transaction, corrupt", claim_in(t, KH, h[1], NOW, &c), STORE_EINVAL);
	CHECK_INT("sticky", store_txn_error(t), STORE_EINVAL);
	txn_abort(t);

	CHECK_INT("corrupt queue record", store_msg_load(f->st, "QBAD00000001", &got), STORE_EINVAL);
	CHECK_INT("corrupt msg record", store_msg_load(f->st, "MBAD00000001", &got), STORE_EINVAL);
	CHECK_INT("queue without msg", store_msg_load(f->st, "ORPHAN000001", &got), STORE_EINVAL);
	CHECK_INT("inflight on corrupt", store_msg_set_inflight(f->st, "QBAD00000001", 1),
		  STORE_EINVAL);
	CHECK_INT("good message", store_msg_load(f->st, "GOOD00000001", &got), 0);
	store_msg_free(&got);
	/* a corrupt last_qid is ignored: the keys give the greatest QID, the other figures stand */
	CHECK_INT("last_qid corrupt", last_qid_of(f->st, qid), 0);
	CHECK_STR("last_qid from the keys", qid, "QBAD00000001");

	memset(&a, 0, sizeof(a));
	a.stop_at = -1;
	CHECK_INT("queue_list skips corrupt", store_queue_walk(f->st, STORE_WALK_MINE, list_cb, &a),
		  0);
	CHECK_INT("listed", a.n, 3);	/* GOOD, MBAD (its queue record is fine), ORPHAN */
	memset(&a, 0, sizeof(a));
	a.stop_at = -1;
	CHECK_INT("queue walk skips corrupt", store_queue_walk(f->st, 0, list_cb, &a), 0);
	CHECK_INT("walked", a.n, 1);
	CHECK_STR("walked the good one", a.seen[0], "GOOD00000001");
	/* held: not for delivery's start, still in the whole walk */
	CHECK_INT("hold", store_msg_change(f->st, "GOOD00000001",
					   &(struct store_change) { 1, 0, NULL, 0 }), 0);
	memset(&a, 0, sizeof(a));
	a.stop_at = -1;
	CHECK_INT("list with one held", store_queue_walk(f->st, STORE_WALK_MINE, list_cb, &a), 0);
	CHECK_INT("listed, not the held one", a.n, 2);
	memset(&a, 0, sizeof(a));
	a.stop_at = -1;
	CHECK_INT("walk with one held", store_queue_walk(f->st, 0, list_cb, &a), 0);
	CHECK_INT("walked the held one", a.n, 1);

	/* a corrupt claim can be replaced */
	assert_int_equal(store_txn_begin(f->st, NULL, 0, &t), 0);
	claim_of(&c, "GOOD00000001", 1, NOW - SEC);
	store_txn_claim_put(t, KH, h[1], &c);
	CHECK_INT("overwrite corrupt claim", store_txn_commit(t), 0);
	CHECK_INT("dropped orphan", store_msg_drop(f->st, "ORPHAN000001"), 0);
	CHECK_INT("dropped corrupt", store_msg_drop(f->st, "MBAD00000001"), 0);
}

/*
 * test_walk_corrupt_key - the walk's warning for a corrupt record names its
 * QID when its key is one, and leaves a key that cannot be one (control
 * characters, a byte past ASCII) out of the log: its bytes were printed
 * as they were
 */
static void test_walk_corrupt_key(void **state)
{
	static const char bad[] = "BAD\nKEY\x1b[2J\xff";
	struct fx *f = *state;
	struct list_acc a;
	char text[4096];
	FILE *tmp;
	MDB_env *env;
	int old, rc;

	env = raw_open(f);
	raw_put(env, "queue", "QBAD00000002", 12, "\x01\xff", 2);
	raw_put(env, "queue", bad, sizeof(bad) - 1, "\x01\xff", 2);
	raw_close(f, env);

	memset(&a, 0, sizeof(a));
	a.stop_at = -1;
	old = log_capture(&tmp);
	rc = store_queue_walk(f->st, 0, list_cb, &a);
	log_captured(old, tmp, text, sizeof(text));
	CHECK_INT("the walk skips both", rc, 0);
	CHECK_INT("walked", a.n, 0);
	if (strstr(text, "QBAD00000002: store: corrupt queue or message record skipped") == NULL)
		fail_msg("no warning naming the QID: %s", text);
	if (strstr(text, "warning: store: corrupt queue or message record skipped") == NULL)
		fail_msg("no warning without a QID for the other: %s", text);
	if (strchr(text, '\x1b') != NULL || strchr(text, '\xff') != NULL || strstr(text, "KEY") != NULL)
		fail_msg("the corrupt key's bytes logged: %s", text);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_store_01),
		T(test_before_01),
		T(test_new_store_crash),
		T(test_format),
		T(test_corrupt_records),
		T(test_walk_corrupt_key),
	};

	unsetenv("IDEMRELAY_PG_URL");	/* these are LMDB's: never the PostgreSQL fixture */
	return cmocka_run_group_tests_name("store_raw", tests, NULL, NULL);
}
