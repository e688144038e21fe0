/*
 * test_store_lmdb - what only the LMDB backend has (store/lmdb/): its map
 * as stats see it, opens that fail, a full map, the read-only open
 * idemrelayctl uses, and the staging B-trees (cnew, hnew): the pages a
 * commit writes on a large store, the greatest QID outliving its story,
 * corrupt staged records, the expiry's count. Its record codecs are
 * test_store_codec's, databases written under its feet test_store_raw's.
 * Always on LMDB, whatever IDEMRELAY_PG_URL says.
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
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi dbi;

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

	/* a store missing a database the daemon's open makes: the read-only open names it */
	env = raw_open(f);
	assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
	assert_int_equal(mdb_dbi_open(txn, "hist", 0, &dbi), 0);
	assert_int_equal(mdb_drop(txn, dbi, 1), 0);
	assert_int_equal(mdb_txn_commit(txn), 0);
	mdb_env_close(env);
	CHECK_INT("hist missing", store_lmdb_open_readonly(&ro, f->path, err, sizeof(err)),
		  STORE_ENOTFOUND);
	if (strstr(err, ": hist: ") == NULL)
		fail_msg("hist missing: got \"%s\", want the database named", err);
	fx_reopen(f, TEST_MAP);
	CHECK_INT("made again by the daemon's open",
		  store_lmdb_open_readonly(&ro, f->path, err, sizeof(err)), 0);
	store_close(ro);
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

	raw_shut(f);
	memset(longkey, 'L', sizeof(longkey));
	memset(ck, 0xc5, sizeof(ck));
	env = raw_env(f->path);
	raw_put(env, "hnew", "HBAD00000001", 12, "\x7fgarbage", 8);
	raw_put(env, "hnew", longkey, sizeof(longkey), "\x7fgarbage", 8);
	raw_put(env, "cnew", ck, sizeof(ck), "\x01\x05junk", 7);
	raw_put(env, "cnew", "short", 5, "\x01\x05junk", 7);
	raw_close(f, env);

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
	raw_shut(f);
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

	raw_shut(f);
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
	raw_shut(f);
	if (raw_count(f->path, "hist") == 0 || raw_count(f->path, "hnew") == 0)
		fail_msg("want stories both moved to hist and still in hnew");
	fx_reopen(f, TEST_MAP);
	gettimeofday(&tv, NULL);
	later = (int64_t) tv.tv_sec * SEC + 3 * 86400 * SEC;
	CHECK_INT("expired: the stories alone", store_hist_expire(f->st, later, 2 * N), N);
	CHECK_INT("nothing left", store_hist_expire(f->st, later, 2 * N), 0);
	raw_shut(f);
	CHECK_INT("expiry entries left", raw_count(f->path, "hexpiry"), 0);
	CHECK_INT("stories left in hist", raw_count(f->path, "hist"), 0);
	CHECK_INT("stories left in hnew", raw_count(f->path, "hnew"), 0);
	fx_reopen(f, TEST_MAP);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_open_lmdb),
		cmocka_unit_test_setup_teardown(test_map_full, fx_setup_tiny, fx_teardown),
		T(test_readonly),
		T(test_last_qid_in_stories),
		T(test_outcome_pages),
		T(test_accept_pages),
		T(test_staged_corrupt),
		T(test_expire_counts),
	};

	unsetenv("IDEMRELAY_PG_URL");	/* these are LMDB's: never the PostgreSQL fixture */
	return cmocka_run_group_tests_name("store_lmdb", tests, NULL, NULL);
}
