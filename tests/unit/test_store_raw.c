/*
 * test_store_raw - what the LMDB backend makes of databases written
 * under its feet, the store closed meanwhile: stores of older formats
 * (an expiry index, claims filed under their hash alone, an older format
 * number) read and brought up to date, also after a crash amid that
 * (mdb_txn_commit interposed: its fail_at-th call fails), one of a newer
 * format refused by both opens, records corrupted refused, skipped, logged
 * safely or replaced. Always on LMDB, whatever IDEMRELAY_PG_URL says.
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

/* test_old_expiry_index - a store from before claims went with their stories */
static void test_old_expiry_index(void **state)
{
	struct fx *f = *state;
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi dbi;

	raw_shut(f);
	CHECK_INT("a new store has none", raw_exists(f->path, "expiry"), 0);
	env = raw_env(f->path);
	assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
	assert_int_equal(mdb_dbi_open(txn, "expiry", MDB_CREATE, &dbi), 0);
	assert_int_equal(mdb_txn_commit(txn), 0);
	raw_put(env, "expiry", "0123456789abcdef", 16, "", 0);
	mdb_env_close(env);
	CHECK_INT("made one", raw_exists(f->path, "expiry"), 1);
	fx_reopen(f, TEST_MAP);
	raw_shut(f);
	CHECK_INT("the open dropped it", raw_exists(f->path, "expiry"), 0);
	fx_reopen(f, TEST_MAP);
}

/*
 * A store from before claims were filed under their key: claims under
 * their claim hash alone, each listed by a key index entry. The first
 * writable open moves them under their key, where a claim written since
 * for the same recipient wins (in claims, or staged in cnew), and empties
 * the index; they are then found, listed and forgotten as any claim, and
 * none comes back once forgotten.
 */
static void test_old_claims(void **state)
{
	struct fx *f = *state;
	uint8_t h[3][STORE_HASH_LEN], rec[STORE_CLAIM_REC_LEN], entry[STORE_HASH_LEN + 12];
	uint8_t k[STORE_CLAIM_KEY_LEN];
	const char *old[3] = { "OLDCLAIM0001", "OLDCLAIM0002", "OLDCLAIM0003" };
	struct store_forget out;
	struct store_claim c, got;
	char (*qids)[STORE_QID_SIZE];
	size_t n, len, before;
	int i;
	MDB_env *env;

	env = raw_open(f);
	for (i = 0; i < 3; i++) {
		hash_of(h[i], 77 + i);
		claim_of(&c, old[i], 5, NOW + SEC);
		len = lmdb_claim_encode(rec, &c);
		raw_op(env, "claims", 0, h[i], STORE_HASH_LEN, rec, len);
		memcpy(entry, h[i], STORE_HASH_LEN);
		memcpy(entry + STORE_HASH_LEN, old[i], 12);
		raw_op(env, "keys", MDB_DUPSORT, KH, STORE_HASH_LEN, entry, sizeof(entry));
	}
	/* the second recipient claimed again since, under the key */
	claim_of(&c, "NEWCLAIM0002", 6, NOW + SEC);
	len = lmdb_claim_encode(rec, &c);
	lmdb_claim_key(k, KH, h[1]);
	raw_op(env, "claims", 0, k, sizeof(k), rec, len);
	/* and the third, its claim still staged */
	claim_of(&c, "NEWCLAIM0003", 7, NOW + SEC);
	len = lmdb_claim_encode(rec, &c);
	lmdb_claim_key(k, KH, h[2]);
	raw_op(env, "cnew", 0, k, sizeof(k), rec, len);
	mdb_env_close(env);
	before = raw_count(f->path, "claims");
	fx_reopen(f, TEST_MAP);
	raw_shut(f);
	CHECK_INT("index emptied", raw_count(f->path, "keys"), 0);
	CHECK_INT("three old keys gone, one moved", raw_count(f->path, "claims"), before - 2);
	fx_reopen(f, TEST_MAP);

	CHECK_INT("moved claim found", claim_found_under(f->st, KH, 77, NOW, &got), 1);
	CHECK_STR("its qid", got.qid, "OLDCLAIM0001");
	CHECK_INT("newer claim found", claim_found_under(f->st, KH, 78, NOW, &got), 1);
	CHECK_STR("the newer one wins", got.qid, "NEWCLAIM0002");
	CHECK_INT("staged claim found", claim_found_under(f->st, KH, 79, NOW, &got), 1);
	CHECK_STR("the staged one wins", got.qid, "NEWCLAIM0003");
	CHECK_INT("listed under its key", store_key_qids(f->st, KH, &qids, &n), 0);
	CHECK_INT("three", n, 3);
	CHECK_STR("newer", qids[0], "NEWCLAIM0002");
	CHECK_STR("staged", qids[1], "NEWCLAIM0003");
	CHECK_STR("moved", qids[2], "OLDCLAIM0001");
	free(qids);

	CHECK_INT("forget", store_key_forget(f->st, KH, NULL, NOW, &out), 0);
	CHECK_INT("the three claims deleted", out.claims, 3);
	CHECK_INT("three messages", out.n_qids, 3);
	store_forget_free(&out);
	for (i = 0; i < 3; i++)
		CHECK_INT("gone", claim_found_under(f->st, KH, 77 + i, NOW, NULL), 0);
	CHECK_INT("nothing listed", store_key_qids(f->st, KH, &qids, &n), STORE_ENOTFOUND);
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
	int found[2], hash = 1;
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
				   claims, found),
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

/*
 * old_claims_put - n claims of the format before claims went under their
 * key (under their claim hash alone, hash_of(i), each with its keys index
 * entry under a key of its own, hash_of(n + i)), in one transaction
 */
static void old_claims_put(MDB_env *env, int n)
{
	uint8_t h[STORE_HASH_LEN], kh[STORE_HASH_LEN], rec[STORE_CLAIM_REC_LEN];
	uint8_t entry[STORE_HASH_LEN + 12];
	MDB_val key = { sizeof(h), h }, val = { 0, rec }, ent = { sizeof(entry), entry };
	struct store_claim c;
	MDB_dbi claims, keys;
	MDB_txn *txn;
	int i;

	assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
	assert_int_equal(mdb_dbi_open(txn, "claims", 0, &claims), 0);
	assert_int_equal(mdb_dbi_open(txn, "keys", MDB_DUPSORT, &keys), 0);
	for (i = 0; i < n; i++) {
		hash_of(h, i);
		hash_of(kh, n + i);
		claim_of(&c, "OLDCLAIM0001", 5, NOW + SEC);
		val.mv_size = lmdb_claim_encode(rec, &c);
		memcpy(entry, h, STORE_HASH_LEN);
		memcpy(entry + STORE_HASH_LEN, "OLDCLAIM0001", 12);
		key.mv_data = h;
		assert_int_equal(mdb_put(txn, claims, &key, &val, 0), 0);
		key.mv_data = kh;
		assert_int_equal(mdb_put(txn, keys, &key, &ent, 0), 0);
	}
	assert_int_equal(mdb_txn_commit(txn), 0);
}

/*
 * moved_all - the store opened: every seventh of old_claims_put()'s n
 * claims found under its key; then shut, its keys index empty
 */
static void moved_all(struct fx *f, int n)
{
	struct store_claim got;
	uint8_t kh[STORE_HASH_LEN];
	int i;

	fx_open(f, TEST_MAP);
	for (i = 0; i < n; i += n / 7) {
		hash_of(kh, n + i);
		CHECK_INT("moved claim found", claim_found_under(f->st, kh, i, NOW, &got), 1);
	}
	raw_shut(f);
	CHECK_INT("index emptied", raw_count(f->path, "keys"), 0);
}

#define OLD_CLAIMS	20000		/* moved in one transaction: 4 to 6 MB more */
#define ROOM		(2u << 20)	/* left in the map; moved in parts, under 1 MB */

/*
 * old_claims_filled - OLD_CLAIMS claims of the format before claims went
 * under their key, each under a key of its own, then LMDB's map (the
 * store's, the journal's region past it) filled but for about ROOM bytes
 */
static void old_claims_filled(struct fx *f)
{
	uint8_t pad[65536] = { 0 };
	MDB_val pkey = { sizeof(int), NULL }, pval = { sizeof(pad), pad };
	MDB_env *env = raw_open(f);
	MDB_dbi pads;
	MDB_txn *txn;
	int i, n, rc;

	assert_int_equal(mdb_env_set_mapsize(env, lmdb_map_size(TEST_MAP)), 0);
	old_claims_put(env, OLD_CLAIMS);
	assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
	assert_int_equal(mdb_dbi_open(txn, "pad", MDB_CREATE | MDB_INTEGERKEY, &pads), 0);
	assert_int_equal(mdb_txn_commit(txn), 0);
	for (n = 0, rc = 0; rc == 0; n++) {	/* the map filled, a pad at a time */
		pkey.mv_data = &n;
		assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
		if ((rc = mdb_put(txn, pads, &pkey, &pval, 0)) == 0)
			rc = mdb_txn_commit(txn);
		else
			mdb_txn_abort(txn);
	}
	assert_int_equal(rc, MDB_MAP_FULL);
	assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
	/* the last pads put taken away again */
	for (i = n - 2; i > n - 2 - (int) (ROOM / sizeof(pad)); i--) {
		pkey.mv_data = &i;
		assert_int_equal(mdb_del(txn, pads, &pkey, NULL), 0);
	}
	assert_int_equal(mdb_txn_commit(txn), 0);
	/* one commit more: LMDB gives pages freed by a commit to the one after the next */
	i = -1;
	pkey.mv_data = &i;
	pval.mv_size = sizeof(i);
	assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
	assert_int_equal(mdb_put(txn, pads, &pkey, &pval, 0), 0);
	assert_int_equal(mdb_txn_commit(txn), 0);
	mdb_env_close(env);
}

/*
 * Old claims at a nearly full map: moved in transactions of their own,
 * each reusing what the one before last freed, they leave room for the
 * store to open; moved in one, they did not (MDB_MAP_FULL: no start)
 */
static void test_old_claims_full_map(void **state)
{
	struct fx *f = *state;

	old_claims_filled(f);
	moved_all(f, OLD_CLAIMS);
	fx_open(f, TEST_MAP);
}

#define PART_CLAIMS	1024		/* store_claim.c's CLAIMS_MOVED: old claims moved a part */
#define CRASH_CLAIMS	(2 * PART_CLAIMS + 100)	/* three parts */

/*
 * An old store (format 1, CRASH_CLAIMS claims under their hash alone)
 * whose first writable open crashed after the first part of the move (its
 * next commit failed): the format record says 2 already, written with the
 * first part, so that a build of an older format refuses a store half
 * moved (LMDB_FORMAT); the next writable open moves the rest, found by the
 * keys index, not by the record. The commit to
 * fail is found by trial, one more each open, the store as it was until a
 * part commits (the keys index shorter by one part)
 */
static void test_old_claims_crash(void **state)
{
	struct fx *f = *state;
	char err[512], got[16];
	size_t left = CRASH_CLAIMS;
	MDB_env *env = raw_open(f);

	old_claims_put(env, CRASH_CLAIMS);
	raw_op(env, "meta", 0, META_FORMAT, strlen(META_FORMAT), "1", 1);
	mdb_env_close(env);

	for (fail_at = 1; fail_at < 20 && left == CRASH_CLAIMS; fail_at++) {
		commits = 0;
		CHECK_INT("the open crashed", store_lmdb_open(&f->st, f->path, TEST_MAP, err,
							      sizeof(err)) != 0, 1);
		left = raw_count(f->path, "keys");
	}
	fail_at = 0;
	CHECK_INT("a crash after the first part: claims left to move", left,
		  CRASH_CLAIMS - PART_CLAIMS);
	raw_meta(f->path, META_FORMAT, got, sizeof(got));
	CHECK_STR("ours recorded with the first part", got, "2");

	moved_all(f, CRASH_CLAIMS);
	raw_meta(f->path, META_FORMAT, got, sizeof(got));
	CHECK_STR("then ours", got, "2");
	fx_open(f, TEST_MAP);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_old_expiry_index),
		T(test_old_claims),
		T(test_old_claims_full_map),
		T(test_old_claims_crash),
		T(test_format),
		T(test_corrupt_records),
		T(test_walk_corrupt_key),
	};

	unsetenv("IDEMRELAY_PG_URL");	/* these are LMDB's: never the PostgreSQL fixture */
	return cmocka_run_group_tests_name("store_raw", tests, NULL, NULL);
}
