/*
 * test_store_lmdb - what only the LMDB backend has (store/lmdb/): its map
 * as stats see it, opens that fail, a full map, records corrupted under
 * its feet, its record codecs and their older versions, stores from
 * before claims were filed under their key, and the read-only open
 * idemrelayctl uses. Always on LMDB, whatever IDEMRELAY_PG_URL says.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>
#include <lmdb.h>

#include "../../store/store.h"
#include "../../store/lmdb/store_int.h"
#include "../../util/buf.h"
#include "test_store_files.h"
#include "test_store_help.h"

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

/* test_open_lmdb - the map as stats see it, and opens that fail */
static void test_open_lmdb(void **state)
{
	struct fx *f = *state;
	struct store *st = NULL;
	struct store_stats s;
	char err[256] = "", bad[160];

	CHECK_INT("stats", store_stats(f->st, &s, 0), 0);
	/* LMDB's map: map_size less the journal's region past it */
	CHECK_INT("stats map_size", s.space.size, TEST_MAP - STORE_JOURNAL_SIZE);
	if (s.space.used == 0 || s.space.used > s.space.size)
		fail_msg("stats map_used: got %llu, want in (0, %llu]",
			 (unsigned long long) s.space.used, (unsigned long long) s.space.size);

	/* only the last component is created */
	snprintf(bad, sizeof(bad), "%s/no/such", f->dir);
	if (store_lmdb_open(&st, bad, TEST_MAP, err, sizeof(err)) == 0 || st != NULL)
		fail_msg("store_open %s: got success, want failure", bad);
	if (strstr(err, "mkdir") == NULL)
		fail_msg("store_open error text: got \"%s\", want the failed step", err);
	snprintf(bad, sizeof(bad), "%s/store/data.mdb", f->dir);
	if (store_lmdb_open(&st, bad, TEST_MAP, err, sizeof(err)) == 0)
		fail_msg("store_open on a file: got success, want failure");
	store_close(NULL);
}

/* test_old_expiry_index - a store from before claims went with their stories */
static void test_old_expiry_index(void **state)
{
	struct fx *f = *state;
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi dbi;

	store_close(f->st);
	f->st = NULL;
	CHECK_INT("a new store has none", raw_exists(f->path, "expiry"), 0);
	env = raw_env(f->path);
	assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
	assert_int_equal(mdb_dbi_open(txn, "expiry", MDB_CREATE, &dbi), 0);
	assert_int_equal(mdb_txn_commit(txn), 0);
	raw_put(env, "expiry", "0123456789abcdef", 16, "", 0);
	mdb_env_close(env);
	CHECK_INT("made one", raw_exists(f->path, "expiry"), 1);
	fx_reopen(f, TEST_MAP);
	store_close(f->st);
	f->st = NULL;
	CHECK_INT("the open dropped it", raw_exists(f->path, "expiry"), 0);
	fx_reopen(f, TEST_MAP);
}

/* a version-1 message record reads without what a story starts from */
static void test_msg_record_versions(void **state)
{
	struct store_msg m, got;
	uint8_t *rec, *v1;
	size_t len, seed = 1 + STORE_HASH_LEN + 8, at;

	(void) state;
	msg_new(&m, "SEED00000001", 2, 300);
	m.has_key = 1;
	memset(m.keyhash, 0xa5, STORE_HASH_LEN);
	m.ttl = 7200LL * 1000000;
	m.smtputf8 = 1;
	/* the same record as version 1 wrote it: no flags, key hash or ttl */
	len = lmdb_msg_rec_size(&m);
	rec = xmalloc(len);
	lmdb_msg_rec_encode(rec, len, &m);
	at = len - m.data_len - 8 - seed;
	v1 = xmalloc(len - seed);
	memcpy(v1, rec, at);
	memcpy(v1 + at, rec + at + seed, len - at - seed);
	v1[0] = 1;
	memset(&got, 0, sizeof(got));
	strcpy(got.qid, m.qid);
	CHECK_INT("version 1", lmdb_msg_rec_decode(v1, len - seed, &got, 1), 0);
	CHECK_INT("v1 has_key", got.has_key, 0);
	CHECK_INT("v1 smtputf8", got.smtputf8, 0);
	CHECK_INT("v1 ttl", got.ttl, 0);
	CHECK_INT("v1 data_len", got.data_len, m.data_len);
	CHECK_INT("v1 data", memcmp(got.data, m.data, m.data_len), 0);
	CHECK_STR("v1 from", got.from, m.from);
	store_msg_free(&got);
	/* version 2 as written before SMTPUTF8: the flags byte had only has_key */
	rec[at] = 1;
	memset(&got, 0, sizeof(got));
	strcpy(got.qid, m.qid);
	CHECK_INT("pre-SMTPUTF8 v2", lmdb_msg_rec_decode(rec, len, &got, 1), 0);
	CHECK_INT("pre-SMTPUTF8 has_key", got.has_key, 1);
	CHECK_INT("pre-SMTPUTF8 smtputf8", got.smtputf8, 0);
	store_msg_free(&got);
	v1[0] = 3;
	CHECK_INT("version 3", lmdb_msg_rec_decode(v1, len - seed, &got, 1), STORE_EINVAL);
	free(v1);
	free(rec);
	store_msg_free(&m);
}


/* raw_op - put (v non-NULL) or delete one record of db opened with flags, store closed */
static void raw_op(MDB_env *env, const char *db, unsigned flags, const void *k, size_t klen,
		   const void *v, size_t vlen)
{
	MDB_val key = { klen, (void *) k }, val = { vlen, (void *) v };
	MDB_txn *txn;
	MDB_dbi dbi;

	assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
	assert_int_equal(mdb_dbi_open(txn, db, flags, &dbi), 0);
	assert_int_equal(v ? mdb_put(txn, dbi, &key, &val, 0) : mdb_del(txn, dbi, &key, NULL), 0);
	assert_int_equal(mdb_txn_commit(txn), 0);
}

/*
 * A store from before claims were filed under their key: a claim under
 * its claim hash alone, listed by a key index entry. It is still found,
 * listed under its key, and forgotten with its entry; a new claim for the
 * same recipient is filed under the key and shadows it.
 */
static void test_old_claims(void **state)
{
	struct fx *f = *state;
	uint8_t h[1][STORE_HASH_LEN], rec[STORE_CLAIM_REC_LEN], entry[STORE_HASH_LEN + 12];
	struct store_forget out;
	struct store_claim c, got;
	struct store_txn *t;
	char (*qids)[STORE_QID_SIZE];
	size_t n, len;
	int found = 0;
	MDB_env *env;

	store_close(f->st);
	f->st = NULL;
	env = raw_env(f->path);
	hash_of(h[0], 77);
	claim_of(&c, "OLDCLAIM0001", 5, NOW + SEC);
	len = lmdb_claim_encode(rec, &c);
	raw_op(env, "claims", 0, h[0], STORE_HASH_LEN, rec, len);
	memcpy(entry, h[0], STORE_HASH_LEN);
	memcpy(entry + STORE_HASH_LEN, "OLDCLAIM0001", 12);
	raw_op(env, "keys", MDB_DUPSORT, KH, STORE_HASH_LEN, entry, sizeof(entry));
	raw_op(env, "meta", 0, "claims_by_key", 13, NULL, 0);	/* as before the mark */
	mdb_env_close(env);
	fx_reopen(f, TEST_MAP);

	CHECK_INT("old claim found", store_claims_get(f->st, KH, (const uint8_t (*)[STORE_HASH_LEN]) h,
						      1, NOW, &got, &found), 0);
	CHECK_INT("found", found, 1);
	CHECK_STR("its qid", got.qid, "OLDCLAIM0001");
	CHECK_INT("listed under its key", store_key_qids(f->st, KH, &qids, &n), 0);
	CHECK_INT("one", n, 1);
	CHECK_STR("qid", qids[0], "OLDCLAIM0001");
	free(qids);
	/* the store still has old claims: reopening does not mark it */
	fx_reopen(f, TEST_MAP);
	CHECK_INT("still found", claim_found_under(f->st, KH, 77, NOW, NULL), 1);

	/* a new claim for the same recipient is filed under the key and wins */
	claim_of(&c, "NEWCLAIM0001", 6, NOW + SEC);
	assert_int_equal(store_txn_begin(f->st, NULL, 0, &t), 0);
	store_txn_claim_put(t, KH, h[0], &c);
	CHECK_INT("renew", store_txn_commit(t), 0);
	CHECK_INT("new one", store_claims_get(f->st, KH, (const uint8_t (*)[STORE_HASH_LEN]) h, 1,
					      NOW, &got, &found), 0);
	CHECK_STR("new qid", got.qid, "NEWCLAIM0001");

	CHECK_INT("forget", store_key_forget(f->st, KH, NULL, NOW, &out), 0);
	CHECK_INT("both claims deleted", out.claims, 2);
	CHECK_INT("two messages", out.n_qids, 2);
	store_forget_free(&out);
	CHECK_INT("gone", claim_found_under(f->st, KH, 77, NOW, NULL), 0);
	CHECK_INT("nothing listed", store_key_qids(f->st, KH, &qids, &n), STORE_ENOTFOUND);
}

/* raw_meta - the meta record named name as a string ("" if none); the store must be closed */
static void raw_meta(const char *path, const char *name, char *out, size_t outlen)
{
	MDB_env *env = raw_env(path);
	MDB_val key = { strlen(name), (void *) name }, val;
	MDB_txn *txn;
	MDB_dbi dbi;

	out[0] = 0;
	assert_int_equal(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
	assert_int_equal(mdb_dbi_open(txn, "meta", 0, &dbi), 0);
	if (mdb_get(txn, dbi, &key, &val) == 0 && val.mv_size < outlen) {
		memcpy(out, val.mv_data, val.mv_size);
		out[val.mv_size] = 0;
	}
	mdb_txn_abort(txn);
	mdb_env_close(env);
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

	store_close(f->st);
	f->st = NULL;
	raw_meta(f->path, META_FORMAT, got, sizeof(got));
	CHECK_STR("the format recorded", got, "2");

	env = raw_env(f->path);
	raw_op(env, "meta", 0, META_FORMAT, strlen(META_FORMAT), "1", 1);	/* an older one */
	mdb_env_close(env);
	fx_reopen(f, TEST_MAP);
	store_close(f->st);
	f->st = NULL;
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
	mdb_env_close(env);
	fx_reopen(f, TEST_MAP);
}

static void test_map_full(void **state)
{
	struct fx *f = *state;
	struct store_msg m, got;
	struct store_stats s;
	int hash = 77, i, rc = 0, stored = 0;
	char qid[16];

	/* one message bigger than the whole map: nothing of it may remain */
	msg_new(&m, "BIG000000001", 2, 1u << 20);
	CHECK_INT("big message", spool(f->st, &m, &hash, 1, NOW + SEC), STORE_ENOSPC);
	store_msg_free(&m);
	CHECK_INT("no claim from the failed txn", claim_found(f->st, hash, NOW, NULL), 0);
	CHECK_INT("no message from the failed txn", store_msg_load(f->st, "BIG000000001", &got),
		  STORE_ENOTFOUND);
	CHECK_INT("stats", store_stats(f->st, &s, 0), 0);
	CHECK_INT("queued after failure", s.queued, 0);

	msg_new(&m, "SMALL0000001", 1, 100);
	CHECK_INT("small txn after failure", spool(f->st, &m, &hash, 1, NOW + SEC), 0);
	store_msg_free(&m);
	CHECK_INT("its claim", claim_found(f->st, hash, NOW, NULL), 1);

	/* fill it up; every message committed before the failure stays whole */
	for (i = 0; i < 1000; i++) {
		snprintf(qid, sizeof(qid), "FILL%08d", i);
		msg_new(&m, qid, 1, 3000);
		hash = 1000 + i;
		rc = spool(f->st, &m, &hash, 1, NOW + SEC);
		store_msg_free(&m);
		if (rc != 0)
			break;
		stored++;
	}
	CHECK_INT("filling ends in", rc, STORE_ENOSPC);
	if (stored < 5)
		fail_msg("filled: got %d messages, want at least 5", stored);
	CHECK_INT("failed claim absent", claim_found(f->st, 1000 + stored, NOW, NULL), 0);
	for (i = 0; i < stored; i++) {
		snprintf(qid, sizeof(qid), "FILL%08d", i);
		CHECK_INT(qid, store_msg_load(f->st, qid, &got), 0);
		CHECK_INT("data_len", got.data_len, 3000);
		store_msg_free(&got);
	}
	/* freeing space makes room again */
	for (i = 0; i < stored; i++) {
		snprintf(qid, sizeof(qid), "FILL%08d", i);
		assert_int_equal(store_msg_drop(f->st, qid), 0);
	}
	msg_new(&m, "AFTER0000001", 1, 3000);
	CHECK_INT("after freeing", spool(f->st, &m, NULL, 0, 0), 0);
	store_msg_free(&m);
	CHECK_INT("stats", store_stats(f->st, &s, 0), 0);
	if (s.space.used > s.space.size)
		fail_msg("map_used: got %llu, want <= %llu", (unsigned long long) s.space.used,
			 (unsigned long long) s.space.size);
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
	store_close(f->st);
	f->st = NULL;

	env = raw_env(f->path);
	hash_of(h[1], 2);
	memcpy(ck, KH, STORE_HASH_LEN);		/* filed under its key, then its hash */
	memcpy(ck + STORE_HASH_LEN, h[1], STORE_HASH_LEN);
	raw_put(env, "claims", ck, sizeof(ck), "\x01\x05junk", 7);
	raw_put(env, "queue", "QBAD00000001", 12, "\x01\xff", 2);
	raw_put(env, "msg", "MBAD00000001", 12, "\x02garbage", 8);
	raw_put(env, "queue", "ORPHAN000001", 12, orphan, orphan_len);
	free(orphan);
	raw_put(env, "meta", "last_qid", 8, "", 0);
	mdb_env_close(env);
	fx_reopen(f, TEST_MAP);

	hash_of(h[0], 1);
	CHECK_INT("claims_get with a corrupt one",
		  store_claims_get(f->st, KH, (const uint8_t (*)[STORE_HASH_LEN]) h, 2, NOW,
				   claims, found),
		  STORE_EINVAL);
	CHECK_INT("good claim alone", claim_found(f->st, 1, NOW, NULL), 1);
	assert_int_equal(store_txn_begin(f->st, NULL, 0, &t), 0);
	CHECK_INT("txn_claim_get corrupt", store_txn_claim_get(t, KH, h[1], NOW, &c), STORE_EINVAL);
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

static void test_codec_truncated(void **state)
{
	struct store_msg m, got;
	struct store_claim c, cg;
	uint8_t crec[STORE_CLAIM_REC_LEN], *rec, *q, *copy;
	size_t len, qlen, clen, i, bit;
	int rc;

	(void) state;
	msg_new(&m, "CODEC0000001", 3, 40);
	m.rcpts[1].reply = xstrdup("250 ok");
	len = lmdb_msg_rec_size(&m);
	rec = xmalloc(len);
	lmdb_msg_rec_encode(rec, len, &m);
	qlen = lmdb_queue_rec_size(&m);
	q = xmalloc(qlen);
	lmdb_queue_rec_encode(q, qlen, &m);
	claim_of(&c, "CODEC0000001", 4, NOW);
	clen = lmdb_claim_encode(crec, &c);

	for (i = 0; i < len; i++) {
		memset(&got, 0, sizeof(got));
		copy = xmalloc(i + 1);
		memcpy(copy, rec, i);
		if (lmdb_msg_rec_decode(copy, i, &got, 1) != STORE_EINVAL)
			fail_msg("msg record cut at %zu of %zu: got success, want EINVAL", i, len);
		if (got.rcpts || got.from || got.data)
			fail_msg("msg record cut at %zu: left allocations behind", i);
		free(copy);
	}
	for (i = 0; i < qlen; i++) {
		memset(&got, 0, sizeof(got));
		assert_int_equal(lmdb_msg_rec_decode(rec, len, &got, 1), 0);
		if (lmdb_queue_rec_decode(q, i, &got) != STORE_EINVAL)
			fail_msg("queue record cut at %zu of %zu: got success, want EINVAL", i, qlen);
		store_msg_free(&got);
	}
	for (i = 0; i < clen; i++)
		if (lmdb_claim_decode(crec, i, &cg) != STORE_EINVAL)
			fail_msg("claim record cut at %zu of %zu: got success, want EINVAL", i, clen);
	CHECK_INT("whole claim", lmdb_claim_decode(crec, clen, &cg), 0);
	CHECK_STR("whole claim qid", cg.qid, c.qid);

	/* flips: must not crash or leak; success is fine when the flip hit data */
	for (bit = 0; bit < len * 8; bit++) {
		copy = xmalloc(len);
		memcpy(copy, rec, len);
		copy[bit / 8] ^= (uint8_t) (1u << (bit % 8));
		memset(&got, 0, sizeof(got));
		rc = lmdb_msg_rec_decode(copy, len, &got, 1);
		if (rc != 0 && rc != STORE_EINVAL)
			fail_msg("flip %zu: got %d, want 0 or EINVAL", bit, rc);
		if (rc == 0 && lmdb_queue_rec_decode(q, qlen, &got) == 0
		    && got.n_rcpts != m.n_rcpts)
			fail_msg("flip %zu: queue record accepted with the wrong count", bit);
		store_msg_free(&got);
		free(copy);
	}
	free(rec);
	free(q);
	store_msg_free(&m);
}
/*
 * test_msg_record_route - the route chosen at acceptance rides in the
 * message record behind flag 4: it round-trips, every truncation of it is
 * refused, and a record without it (any record written before routes) is
 * the one written before, byte for byte but for nothing, and reads as the
 * default upstream
 */
static void test_msg_record_route(void **state)
{
	struct store_msg m, got;
	uint8_t *with, *without, *copy;
	size_t wlen, nlen, i, flags_at;

	(void) state;
	msg_new(&m, "ROUTE0000001", 2, 30);
	nlen = lmdb_msg_rec_size(&m);
	without = xmalloc(nlen);
	lmdb_msg_rec_encode(without, nlen, &m);
	m.route = xstrdup("tenant-a");
	wlen = lmdb_msg_rec_size(&m);
	with = xmalloc(wlen);
	lmdb_msg_rec_encode(with, wlen, &m);
	CHECK_INT("the route's bytes", wlen - nlen, 4 + strlen("tenant-a"));
	/* the flags byte comes 1 + 32 + 8 + 8 + data bytes before the end */
	flags_at = nlen - m.data_len - 8 - 8 - STORE_HASH_LEN - 1;
	CHECK_INT("no flag 4 without a route", without[flags_at] & 4, 0);
	CHECK_INT("flag 4 with one", with[flags_at] & 4, 4);
	CHECK_INT("the same record before the flags",
		  memcmp(with, without, flags_at), 0);
	memset(&got, 0, sizeof(got));
	strcpy(got.qid, m.qid);
	CHECK_INT("decode with", lmdb_msg_rec_decode(with, wlen, &got, 1), 0);
	CHECK_STR("route", got.route, "tenant-a");
	CHECK_STR("from", got.from, m.from);
	CHECK_INT("routed data", memcmp(got.data, m.data, m.data_len), 0);
	store_msg_free(&got);
	strcpy(got.qid, m.qid);
	CHECK_INT("decode without", lmdb_msg_rec_decode(without, nlen, &got, 1), 0);
	CHECK_STR("no route", got.route, NULL);
	CHECK_INT("data", memcmp(got.data, m.data, m.data_len), 0);
	store_msg_free(&got);
	for (i = 0; i < wlen; i++) {
		memset(&got, 0, sizeof(got));
		copy = xmalloc(i + 1);
		memcpy(copy, with, i);
		if (lmdb_msg_rec_decode(copy, i, &got, 1) != STORE_EINVAL)
			fail_msg("routed record cut at %zu of %zu: want EINVAL", i, wlen);
		if (got.route || got.from || got.rcpts)
			fail_msg("routed record cut at %zu: left allocations behind", i);
		free(copy);
	}
	free(with);
	free(without);
	store_msg_free(&m);
}

/*
 * test_queue_flags - the delivery state record's flags byte: inflight and
 * held each round-trip, each patch leaves the other alone, the held bit
 * peeks cheaply, and a bit no version wrote is refused
 */
static void test_queue_flags(void **state)
{
	static const struct {
		int inflight, held;
	} cases[] = { {0, 0}, {1, 0}, {0, 1}, {1, 1} };
	struct store_msg m, got;
	uint8_t *q;
	size_t qlen, i, flags_at = 1 + 4 + 8;
	int held;

	(void) state;
	msg_new(&m, "FLAGS0000001", 2, 10);
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		m.inflight = cases[i].inflight;
		m.held = cases[i].held;
		qlen = lmdb_queue_rec_size(&m);
		q = xmalloc(qlen);
		lmdb_queue_rec_encode(q, qlen, &m);
		memset(&got, 0, sizeof(got));
		got.n_rcpts = m.n_rcpts;
		got.rcpts = xcalloc(m.n_rcpts, sizeof(*got.rcpts));
		CHECK_INT("decode", lmdb_queue_rec_decode(q, qlen, &got), 0);
		if (got.inflight != m.inflight || got.held != m.held)
			fail_msg("case %zu: got inflight %d held %d, want %d %d", i, got.inflight,
				 got.held, m.inflight, m.held);
		CHECK_INT("peek", lmdb_queue_rec_peek(q, qlen, NULL, NULL, &held), 0);
		CHECK_INT("peek held", held, m.held);
		CHECK_INT("clear inflight", lmdb_queue_rec_patch(q, qlen, LMDB_QUEUE_INFLIGHT, 0), 0);
		CHECK_INT("peek after", lmdb_queue_rec_peek(q, qlen, NULL, NULL, &held), 0);
		CHECK_INT("held kept by the inflight patch", held, m.held);
		CHECK_INT("release", lmdb_queue_rec_patch(q, qlen, LMDB_QUEUE_HELD, 0), 0);
		CHECK_INT("set inflight", lmdb_queue_rec_patch(q, qlen, LMDB_QUEUE_INFLIGHT, 1), 0);
		CHECK_INT("decode patched", lmdb_queue_rec_decode(q, qlen, &got), 0);
		if (got.inflight != 1 || got.held != 0)
			fail_msg("case %zu patched: got inflight %d held %d, want 1 0", i,
				 got.inflight, got.held);
		q[flags_at] |= 4;		/* no version writes it */
		CHECK_INT("unknown flag", lmdb_queue_rec_decode(q, qlen, &got), STORE_EINVAL);
		store_msg_free(&got);
		free(q);
	}
	store_msg_free(&m);
}

/* test_story_codec - the history record, every field; truncations refused */
static void test_story_codec(void **state)
{
	struct store_story s, got;
	struct store_rcpt r[2] = { { "a@x", 0, NULL, STORE_RCPT_SENT, "250 ok" },
				   { "b@x", 0, NULL, STORE_RCPT_QUEUED, NULL } };
	uint8_t *buf;
	size_t len, i;

	(void) state;
	memset(&s, 0, sizeof(s));
	strcpy(s.m.qid, "0123456789AB");
	s.m.accepted = 11;
	s.m.from = "";
	s.m.client = "c [1.2.3.4]";
	s.m.user = "alice";
	s.m.rcpts = r;
	s.m.n_rcpts = 2;
	s.m.attempts = 3;
	s.m.data_len = 1234;
	s.updated = 12;
	s.finished = 13;
	s.expires = 14;
	s.forgotten = 15;
	s.ttl = 16;
	s.has_key = 1;
	memset(s.keyhash, 7, STORE_HASH_LEN);
	s.dropped = 1;
	s.m.smtputf8 = 1;
	s.duplicates = 5;
	s.mismatches = 6;
	s.m.route = "tenant-a";
	len = lmdb_hist_rec_size(&s);
	buf = xmalloc(len);
	lmdb_hist_rec_encode(buf, len, &s);
	memset(&got, 0, sizeof(got));
	CHECK_INT("decode", lmdb_hist_rec_decode(buf, len, &got), 0);
	CHECK_INT("accepted", got.m.accepted, 11);
	CHECK_STR("from", got.m.from, "");
	CHECK_STR("client", got.m.client, "c [1.2.3.4]");
	CHECK_STR("user", got.m.user, "alice");
	CHECK_STR("route", got.m.route, "tenant-a");
	CHECK_STR("envid", got.m.envid, NULL);
	CHECK_INT("n_rcpts", got.m.n_rcpts, 2);
	CHECK_STR("rcpt 1", got.m.rcpts[1].addr, "b@x");
	CHECK_INT("rcpt 0 state", got.m.rcpts[0].state, STORE_RCPT_SENT);
	CHECK_STR("rcpt 0 reply", got.m.rcpts[0].reply, "250 ok");
	CHECK_STR("rcpt 1 reply", got.m.rcpts[1].reply, NULL);
	CHECK_INT("attempts", got.m.attempts, 3);
	CHECK_INT("size", got.m.data_len, 1234);
	CHECK_INT("times", got.updated + got.finished + got.expires + got.forgotten + got.ttl,
		  12 + 13 + 14 + 15 + 16);
	CHECK_INT("flags", got.has_key * 10 + got.dropped, 11);
	CHECK_INT("smtputf8", got.m.smtputf8, 1);
	CHECK_INT("keyhash", got.keyhash[31], 7);
	CHECK_INT("counts", got.duplicates * 10 + got.mismatches, 56);
	store_story_free(&got);
	/* every truncation, and a trailing byte, is refused without a leak */
	for (i = 0; i < len; i++)
		if (lmdb_hist_rec_decode(buf, i, &got) != STORE_EINVAL)
			fail_msg("decode of %zu of %zu bytes: want STORE_EINVAL", i, len);
	buf = xrealloc(buf, len + 1);
	buf[len] = 0;
	CHECK_INT("trailing byte", lmdb_hist_rec_decode(buf, len + 1, &got), STORE_EINVAL);
	buf[0] = 9;
	CHECK_INT("version", lmdb_hist_rec_decode(buf, len, &got), STORE_EINVAL);
	free(buf);
}

static int walk_cb(void *arg, const struct store_msg *m)
{
	size_t *n = arg;

	if (m->data != NULL || m->data_len == 0 || m->from == NULL || m->n_rcpts != 1)
		fail_msg("walk: want the envelope without data");
	(*n)++;
	return 0;
}

static void test_readonly(void **state)
{
	struct fx *f = *state;
	struct store *ro;
	struct store_msg m;
	struct store_story s;
	struct store_txn *t;
	char err[256] = "", absent[128];
	struct store_stats ss;
	size_t n = 0;
	int hash = 30;

	snprintf(absent, sizeof(absent), "%s/nothing", f->dir);
	CHECK_INT("absent", store_lmdb_open_readonly(&ro, absent, err, sizeof(err)), STORE_ENOTFOUND);
	if (strstr(err, "no store at") == NULL)
		fail_msg("absent store: got %s", err);
	CHECK_INT("stats", store_stats(f->st, &ss, 0), 0);
	CHECK_INT("oldest of none", ss.oldest, 0);
	msg_new(&m, "0000000000E1", 1, 40);
	assert_int_equal(spool(f->st, &m, &hash, 1, NOW + SEC), 0);
	CHECK_INT("open ro", store_lmdb_open_readonly(&ro, f->path, err, sizeof(err)), 0);
	CHECK_INT("story", store_story_get(ro, m.qid, &s), 0);
	store_story_free(&s);
	CHECK_INT("walk", store_queue_walk(ro, 0, walk_cb, &n), 0);
	CHECK_INT("walked", n, 1);
	CHECK_INT("stats ro", store_stats(ro, &ss, 0), 0);
	CHECK_INT("oldest time", ss.oldest, m.accepted);
	if (store_txn_begin(ro, NULL, 0, &t) == 0) {
		txn_abort(t);
		fail_msg("a read-only store began a write transaction");
	}
	store_close(ro);
	store_msg_free(&m);
}

/* meta_last_qid - meta's last_qid record, "" when there is none */
static void meta_last_qid(struct store *base, char qid[STORE_QID_SIZE])
{
	struct lmdb_store *st = lmdb_of(base);
	MDB_val key = { sizeof(META_LAST_QID) - 1, META_LAST_QID }, val;
	MDB_txn *txn;

	qid[0] = 0;
	assert_int_equal(lmdb_read_begin(st, &txn), 0);
	if (mdb_get(txn, st->meta, &key, &val) == 0) {
		assert_true(val.mv_size < STORE_QID_SIZE);
		memcpy(qid, val.mv_data, val.mv_size);
		qid[val.mv_size] = 0;
	}
	lmdb_read_end(st, txn);
}

/*
 * test_last_qid_in_stories - a message that leaves with its story written
 * writes no last_qid (a meta page in every outcome's commit, issue 27):
 * its story's key says it, and when the story expires, meta does
 */
static void test_last_qid_in_stories(void **state)
{
	struct fx *f = *state;
	struct store_msg m;
	char qid[STORE_QID_SIZE];
	struct timeval tv;

	msg_new(&m, "00000000000E", 1, 1);
	assert_int_equal(spool(f->st, &m, NULL, 0, 0), 0);
	m.rcpts[0].state = STORE_RCPT_SENT;
	assert_int_equal(store_msg_update(f->st, &m), 0);
	store_msg_free(&m);
	meta_last_qid(f->st, qid);
	CHECK_STR("meta after an outcome with its story", qid, "");
	CHECK_INT("last_qid", last_qid_of(f->st, qid), 0);
	CHECK_STR("last_qid from the story", qid, "00000000000E");

	/* its story expires: meta keeps the QID from then on */
	gettimeofday(&tv, NULL);
	CHECK_INT("expire", store_hist_expire(f->st, (int64_t) tv.tv_sec * SEC + 3 * 86400 * SEC, 10), 1);
	meta_last_qid(f->st, qid);
	CHECK_STR("meta after the story expired", qid, "00000000000E");
	fx_reopen(f, TEST_MAP);
	CHECK_INT("last_qid", last_qid_of(f->st, qid), 0);
	CHECK_STR("last_qid after expiry and reopen", qid, "00000000000E");
}

/* wchar - bytes this process passed to write calls so far (/proc/self/io) */
static long long wchar(void)
{
	char line[128];
	long long v = -1;
	FILE *f = fopen("/proc/self/io", "r");

	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "wchar: %lld", &v) == 1)
			break;
	fclose(f);
	assert_true(v >= 0);
	return v;
}

/* delivered - spool m with one claim and record its delivery in one transaction, as fill -a does */
static void delivered(struct store_txn *t, struct store_msg *m, int i)
{
	uint8_t h[STORE_HASH_LEN];
	struct store_claim c;

	store_txn_msg_put(t, m);
	hash_of(h, i);
	claim_of(&c, m->qid, 1, NOW + 3600 * SEC);
	store_txn_claim_put(t, KH, h, &c);
	m->rcpts[0].state = STORE_RCPT_SENT;
	store_txn_msg_update(t, m);
	m->rcpts[0].state = STORE_RCPT_QUEUED;
}

/*
 * test_outcome_pages - on a store of 6,000 stories (hist three levels
 * deep, its expiry index two), recording a delivery writes about what
 * it does on a new store: its story goes to hnew, moved to hist a page
 * of stories at a time (issue 27 target 2). The pages are counted as the
 * bytes the commits write (LMDB's pages and the journal's record).
 * Every story is still found, counted and expired, moved or not.
 */
static void test_outcome_pages(void **state)
{
	enum { OLD = 6000, BATCH = 500, MEASURED = 40 };
	struct fx *f = *state;
	struct store_story story;
	struct store_txn *t;
	struct store_msg m;
	struct timeval tv;
	char qid[STORE_QID_SIZE];
	uint64_t stories, keys;
	long long bytes = 0, w;
	double pages;
	int i;

	msg_new(&m, "000000000000", 1, 100);
	m.has_key = 1;			/* its claims go with its story */
	memcpy(m.keyhash, KH, STORE_HASH_LEN);
	for (i = 0; i < OLD; i++) {
		if (i % BATCH == 0)
			assert_int_equal(store_txn_begin(f->st, NULL, 0, &t), 0);
		snprintf(m.qid, sizeof(m.qid), "0000000%05d", i);
		delivered(t, &m, i);
		if (i % BATCH == BATCH - 1)
			CHECK_INT("fill commit", store_txn_commit(t), 0);
	}
	for (i = OLD; i < OLD + MEASURED; i++) {
		snprintf(m.qid, sizeof(m.qid), "0000000%05d", i);
		assert_int_equal(spool(f->st, &m, NULL, 0, 0), 0);
		m.rcpts[0].state = STORE_RCPT_SENT;
		w = wchar();
		CHECK_INT("outcome", store_msg_update(f->st, &m), 0);
		bytes += wchar() - w;
		m.rcpts[0].state = STORE_RCPT_QUEUED;
	}
	store_msg_free(&m);
	pages = (double) bytes / 4096 / MEASURED;
	print_message("pages an outcome's commit writes, %d stories: %.2f\n", OLD, pages);
	if (pages > 7.5)
		fail_msg("pages an outcome writes on a store of %d stories: got %.2f, want <= 7.5",
			 OLD, pages);

	/* found, counted and expired wherever they are */
	CHECK_INT("story of the first", store_story_get(f->st, "000000000000", &story), 0);
	store_story_free(&story);
	snprintf(qid, sizeof(qid), "0000000%05d", OLD + MEASURED - 1);
	CHECK_INT("story of the last", store_story_get(f->st, qid, &story), 0);
	CHECK_INT("last delivered", story.m.rcpts[0].state, STORE_RCPT_SENT);
	store_story_free(&story);
	CHECK_INT("last_qid", last_qid_of(f->st, qid), 0);
	snprintf(m.qid, sizeof(m.qid), "0000000%05d", OLD + MEASURED - 1);
	CHECK_STR("last_qid", qid, m.qid);
	CHECK_INT("hist stats", stories_of(f->st, &stories, &keys), 0);
	CHECK_INT("stories", stories, OLD + MEASURED);
	gettimeofday(&tv, NULL);
	CHECK_INT("expire all", store_hist_expire(f->st, (int64_t) tv.tv_sec * SEC + 3 * 86400 * SEC,
						   OLD + MEASURED + 10), OLD + MEASURED);
	CHECK_INT("hist stats", stories_of(f->st, &stories, &keys), 0);
	CHECK_INT("stories after expiry", stories, 0);
	CHECK_INT("claims after expiry", keys, 0);
	CHECK_INT("last_qid", last_qid_of(f->st, qid), 0);
	CHECK_STR("last_qid after expiry", qid, m.qid);
}

/* key_of - a distinct key hash per number, past hash_of()'s 65,536 */
static void key_of(uint8_t kh[STORE_HASH_LEN], int i)
{
	hash_of(kh, i & 0xffff);
	kh[2] = (uint8_t) (i >> 16);
	kh[3] = 0xa5;
}

static int cmp_ll(const void *a, const void *b)
{
	long long x = *(const long long *) a, y = *(const long long *) b;

	return (x > y) - (x < y);
}

/*
 * test_accept_pages - on a store of 150,000 claims under keys of their own
 * (claims four levels deep), the commit that accepts a message writes
 * what it does on a new store in most cases: its claim goes to cnew, and
 * cnew's claims move to claims a page at a time (issue 27 target 2); the
 * median of 60 acceptances' bytes written, in pages. Every claim is
 * still found, counted, forgotten and expired, moved or not.
 */
static void test_accept_pages(void **state)
{
	enum { OLD = 150000, BATCH = 15000, MEASURED = 60 };
	struct fx *f = *state;
	struct store_txn *t;
	struct store_claim c;
	struct store_stats st;
	struct store_forget fo;
	struct store_msg m;
	uint8_t kh[STORE_HASH_LEN], h[STORE_HASH_LEN];
	long long bytes[MEASURED], w;
	uint64_t stories, keys;
	struct timeval tv;
	int i, k;

	for (i = 0; i < OLD; i += BATCH) {
		assert_int_equal(store_txn_begin(f->st, NULL, 0, &t), 0);
		for (k = i; k < i + BATCH; k++) {
			key_of(kh, k + 100000);
			hash_of(h, k);
			claim_of(&c, "000000000001", 1, NOW + 3600 * SEC);
			store_txn_claim_put(t, kh, h, &c);
		}
		CHECK_INT("fill commit", store_txn_commit(t), 0);
	}
	msg_new(&m, "000000000000", 1, 100);
	m.has_key = 1;
	for (i = 0; i < MEASURED; i++) {
		snprintf(m.qid, sizeof(m.qid), "0000001%05d", i);
		key_of(kh, OLD + i + 100000);
		hash_of(h, OLD + i);
		memcpy(m.keyhash, kh, STORE_HASH_LEN);
		claim_of(&c, m.qid, 1, NOW + 3600 * SEC);
		assert_int_equal(store_txn_begin(f->st, NULL, 0, &t), 0);
		store_txn_msg_put(t, &m);
		store_txn_claim_put(t, kh, h, &c);
		w = wchar();
		CHECK_INT("accept", store_txn_commit(t), 0);
		bytes[i] = wchar() - w;
	}
	qsort(bytes, MEASURED, sizeof(bytes[0]), cmp_ll);
	print_message("pages an acceptance's commit writes, %d claims: median %.1f, most %.1f\n",
		      OLD, bytes[MEASURED / 2] / 4096.0, bytes[MEASURED - 1] / 4096.0);
	if (bytes[MEASURED / 2] > 8 * 4096)
		fail_msg("pages an acceptance writes on a store of %d claims: median %.1f, want <= 8",
			 OLD, bytes[MEASURED / 2] / 4096.0);

	/* every claim found wherever it is, and counted once */
	for (i = 0; i < OLD + MEASURED; i += 997) {
		key_of(kh, i + 100000);
		if (claim_found_under(f->st, kh, i, NOW, &c) != 1)
			fail_msg("claim %d not found", i);
	}
	key_of(kh, OLD + MEASURED - 1 + 100000);
	CHECK_INT("the last claim", claim_found_under(f->st, kh, OLD + MEASURED - 1, NOW, &c), 1);
	CHECK_STR("the last claim's message", c.qid, m.qid);
	CHECK_INT("stats", store_stats(f->st, &st, 0), 0);
	CHECK_INT("claims", st.claims, OLD + MEASURED);
	/* forgotten: the last one (in cnew, or moved) and one from the fill */
	CHECK_INT("forget the last", store_key_forget(f->st, kh, NULL, NOW, &fo), 0);
	CHECK_INT("forgot one claim", fo.claims, 1);
	store_forget_free(&fo);
	CHECK_INT("the last claim forgotten", claim_found_under(f->st, kh, OLD + MEASURED - 1, NOW, NULL), 0);
	key_of(kh, 5 + 100000);
	CHECK_INT("forget one filled", store_key_forget(f->st, kh, NULL, NOW, &fo), 0);
	CHECK_INT("forgot its claim", fo.claims, 1);
	store_forget_free(&fo);
	CHECK_INT("stats", store_stats(f->st, &st, 0), 0);
	CHECK_INT("claims after two forgets", st.claims, OLD + MEASURED - 2);
	/* the queued messages' claims go with their stories */
	for (i = 0; i < MEASURED - 1; i++) {
		snprintf(m.qid, sizeof(m.qid), "0000001%05d", i);
		m.rcpts[0].state = STORE_RCPT_SENT;
		CHECK_INT("delivered", store_msg_update(f->st, &m), 0);
	}
	snprintf(m.qid, sizeof(m.qid), "0000001%05d", MEASURED - 1);
	CHECK_INT("the forgotten one delivered", store_msg_update(f->st, &m), 0);
	store_msg_free(&m);
	gettimeofday(&tv, NULL);
	CHECK_INT("expire", store_hist_expire(f->st, (int64_t) tv.tv_sec * SEC + 3 * 86400 * SEC, 100),
		  MEASURED);
	CHECK_INT("hist stats", stories_of(f->st, &stories, &keys), 0);
	CHECK_INT("claims left: the fill's", keys, OLD - 1);

}

/* raw_has - is there a record under k in db? the store must be closed */
static int raw_has(const char *path, const char *db, const void *k, size_t klen)
{
	MDB_env *env = raw_env(path);
	MDB_val key = { klen, (void *) k }, val;
	MDB_txn *txn;
	MDB_dbi dbi;
	int rc;

	assert_int_equal(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
	assert_int_equal(mdb_dbi_open(txn, db, 0, &dbi), 0);
	rc = mdb_get(txn, dbi, &key, &val);
	mdb_txn_abort(txn);
	mdb_env_close(env);
	return rc == 0;
}

/*
 * test_staged_corrupt - records in cnew and hnew that do not decode, or
 * whose key cannot be a claim's or a QID, are deleted by the move that
 * meets them, with a warning that counts them: neither left in the
 * staging B-tree (read again at every move) nor moved (a story moved
 * without an expiry entry would stay for ever). The greatest QID still
 * outlives a story deleted so.
 */
static void test_staged_corrupt(void **state)
{
	enum { N = 200 };
	struct fx *f = *state;
	struct store_story story;
	struct store_txn *t;
	struct store_msg m;
	struct timeval tv;
	uint8_t ck[STORE_CLAIM_KEY_LEN];
	char qid[STORE_QID_SIZE], longkey[STORE_QID_SIZE + 8], text[8192];
	uint64_t stories, keys;
	FILE *tmp;
	MDB_env *env;
	int i, old;

	store_close(f->st);
	f->st = NULL;
	memset(longkey, 'L', sizeof(longkey));
	memset(ck, 0xc5, sizeof(ck));
	env = raw_env(f->path);
	raw_put(env, "hnew", "HBAD00000001", 12, "\x7fgarbage", 8);
	raw_put(env, "hnew", longkey, sizeof(longkey), "\x7fgarbage", 8);
	raw_put(env, "cnew", ck, sizeof(ck), "\x01\x05junk", 7);
	raw_put(env, "cnew", "short", 5, "\x01\x05junk", 7);
	mdb_env_close(env);
	fx_reopen(f, TEST_MAP);

	/* enough stories and claims for hnew and cnew to move at least once */
	msg_new(&m, "000000000000", 1, 10);
	m.has_key = 1;
	memcpy(m.keyhash, KH, STORE_HASH_LEN);
	old = log_capture(&tmp);
	assert_int_equal(store_txn_begin(f->st, NULL, 0, &t), 0);
	for (i = 0; i < N; i++) {
		snprintf(m.qid, sizeof(m.qid), "0000000%05d", i);
		delivered(t, &m, i);
	}
	i = store_txn_commit(t);
	log_captured(old, tmp, text, sizeof(text));
	CHECK_INT("commit", i, 0);
	store_msg_free(&m);
	CHECK_INT("corrupt story gone", store_story_get(f->st, "HBAD00000001", &story),
		  STORE_ENOTFOUND);
	CHECK_INT("last_qid", last_qid_of(f->st, qid), 0);
	CHECK_STR("last_qid outlives the corrupt story", qid, "HBAD00000001");
	gettimeofday(&tv, NULL);
	CHECK_INT("expire all", store_hist_expire(f->st, (int64_t) tv.tv_sec * SEC + 3 * 86400 * SEC,
						   N + 10), N);
	CHECK_INT("hist stats", stories_of(f->st, &stories, &keys), 0);
	CHECK_INT("no story left", stories, 0);
	CHECK_INT("no claim left", keys, 0);
	store_close(f->st);
	f->st = NULL;
	CHECK_INT("corrupt story left in hnew", raw_has(f->path, "hnew", "HBAD00000001", 12), 0);
	CHECK_INT("corrupt story moved to hist", raw_has(f->path, "hist", "HBAD00000001", 12), 0);
	CHECK_INT("long key left in hnew", raw_has(f->path, "hnew", longkey, sizeof(longkey)), 0);
	CHECK_INT("corrupt claim left in cnew", raw_has(f->path, "cnew", ck, sizeof(ck)), 0);
	CHECK_INT("corrupt claim moved", raw_has(f->path, "claims", ck, sizeof(ck)), 0);
	CHECK_INT("short key left in cnew", raw_has(f->path, "cnew", "short", 5), 0);
	fx_reopen(f, TEST_MAP);
	if (strstr(text, "store: 2 corrupt story records deleted from staging") == NULL)
		fail_msg("no warning counting the corrupt stories deleted");
	if (strstr(text, "store: 2 corrupt claim records deleted from staging") == NULL)
		fail_msg("no warning counting the corrupt claims deleted");
}

/*
 * test_expire_counts - store_hist_expire() says how many stories it
 * deleted, not how many expiry entries it went through: entries that
 * are no longer current (their story gone, or due at another time) are
 * deleted uncounted. Stories both in hist (moved, with an entry) and in
 * hnew (none yet).
 */
static void test_expire_counts(void **state)
{
	enum { N = 60 };
	struct fx *f = *state;
	struct store_txn *t;
	struct store_msg m;
	struct timeval tv;
	uint8_t ik[8 + 12];
	uint64_t v = (uint64_t) NOW ^ 0x8000000000000000ull;
	int64_t later;
	int i;

	store_close(f->st);
	f->st = NULL;
	for (i = 0; i < 8; i++)
		ik[i] = (uint8_t) (v >> (56 - 8 * i));
	memcpy(ik + 8, "STALE0000001", 12);	/* no story */
	env_put_expiry(f->path, ik, sizeof(ik));
	memcpy(ik + 8, "000000000003", 12);	/* a story due at another time */
	env_put_expiry(f->path, ik, sizeof(ik));
	env_put_expiry(f->path, "x", 1);	/* not even a time */
	fx_reopen(f, TEST_MAP);

	msg_new(&m, "000000000000", 1, 10);
	m.has_key = 1;
	memcpy(m.keyhash, KH, STORE_HASH_LEN);
	assert_int_equal(store_txn_begin(f->st, NULL, 0, &t), 0);
	for (i = 0; i < N; i++) {
		snprintf(m.qid, sizeof(m.qid), "0000000%05d", i);
		delivered(t, &m, i);
	}
	CHECK_INT("commit", store_txn_commit(t), 0);
	store_msg_free(&m);
	store_close(f->st);
	f->st = NULL;
	if (raw_count(f->path, "hist") == 0 || raw_count(f->path, "hnew") == 0)
		fail_msg("want stories both moved to hist and still in hnew");
	fx_reopen(f, TEST_MAP);
	gettimeofday(&tv, NULL);
	later = (int64_t) tv.tv_sec * SEC + 3 * 86400 * SEC;
	CHECK_INT("expired: the stories alone", store_hist_expire(f->st, later, 2 * N), N);
	CHECK_INT("nothing left", store_hist_expire(f->st, later, 2 * N), 0);
	store_close(f->st);
	f->st = NULL;
	CHECK_INT("expiry entries left", raw_count(f->path, "hexpiry"), 0);
	CHECK_INT("stories left in hist", raw_count(f->path, "hist"), 0);
	CHECK_INT("stories left in hnew", raw_count(f->path, "hnew"), 0);
	fx_reopen(f, TEST_MAP);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)

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

	store_close(f->st);
	f->st = NULL;
	env = raw_env(f->path);
	raw_put(env, "queue", "QBAD00000002", 12, "\x01\xff", 2);
	raw_put(env, "queue", bad, sizeof(bad) - 1, "\x01\xff", 2);
	mdb_env_close(env);
	fx_reopen(f, TEST_MAP);

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_open_lmdb),
		T(test_old_expiry_index),
		cmocka_unit_test(test_msg_record_versions),
		T(test_old_claims),
		T(test_format),
		cmocka_unit_test_setup_teardown(test_map_full, fx_setup_tiny, fx_teardown),
		T(test_corrupt_records),
		cmocka_unit_test(test_codec_truncated),
		cmocka_unit_test(test_queue_flags),
		cmocka_unit_test(test_msg_record_route),
		cmocka_unit_test(test_story_codec),
		T(test_readonly),
		T(test_last_qid_in_stories),
		T(test_outcome_pages),
		T(test_accept_pages),
		T(test_staged_corrupt),
		T(test_expire_counts),
		T(test_walk_corrupt_key),
	};

	unsetenv("IDEMRELAY_PG_URL");	/* these are LMDB's: never the PostgreSQL fixture */
	return cmocka_run_group_tests_name("store_lmdb", tests, NULL, NULL);
}
