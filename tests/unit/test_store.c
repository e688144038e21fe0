/*
 * test_store - the LMDB store (the store/ files): claims and their expiry, the
 * spool and its delivery state, durability across reopen, map full,
 * corrupt records and concurrent use. Each test gets a fresh store in a
 * temporary directory, removed afterwards (test_store_fx.h).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>
#include <lmdb.h>

#include "../../store/store.h"
#include "../../store/lmdb/store_int.h"
#include "../../util/buf.h"
#include "test_store_fx.h"

#define NOW		1700000000000000LL	/* microseconds */
#define SEC		1000000LL

static const uint8_t KH[STORE_HASH_LEN] = { 0x4b };	/* the key every claim here is under */

/* hash_of - a distinct test hash per number */
static void hash_of(uint8_t h[STORE_HASH_LEN], int i)
{
	int j;

	for (j = 0; j < STORE_HASH_LEN; j++)
		h[j] = (uint8_t) (i * 31 + j * 7 + (i >> 8));
	h[0] = (uint8_t) i;
	h[1] = (uint8_t) (i >> 8);
}

/* claim_of - a claim record for a test */
static void claim_of(struct store_claim *c, const char *qid, int fp, int64_t expires)
{
	memset(c, 0, sizeof(*c));
	strcpy(c->qid, qid);
	memset(c->fingerprint, fp, STORE_HASH_LEN);
	c->accepted = NOW - SEC;
	c->expires = expires;
}

/* msg_new - a message with n recipients, every field owned */
static void msg_new(struct store_msg *m, const char *qid, size_t n, size_t data_len)
{
	size_t i;
	char a[64];

	memset(m, 0, sizeof(*m));
	strcpy(m->qid, qid);
	m->accepted = NOW;
	m->from = xstrdup("sender@example.com");
	m->envid = xstrdup("env-1");
	m->ret = 2;
	m->body = 2;
	m->client = xstrdup("helo.example [192.0.2.1]");
	m->user = xstrdup("alice");
	m->rcpts = xcalloc(n, sizeof(*m->rcpts));
	m->n_rcpts = n;
	for (i = 0; i < n; i++) {
		snprintf(a, sizeof(a), "rcpt%zu@example.net", i);
		m->rcpts[i].addr = xstrdup(a);
		m->rcpts[i].notify = (int) (i % 15);
		m->rcpts[i].orcpt = i % 2 ? NULL : xstrdup("rfc822;orig@example.net");
	}
	m->data = xmalloc(data_len + 1);
	for (i = 0; i < data_len; i++)
		m->data[i] = (char) (i * 7 + 3);
	m->data_len = data_len;
	m->next_attempt = NOW;
}

/* spool - one committed transaction: the message and a claim per hash */
static int spool(struct store *st, const struct store_msg *m, const int *hashes, size_t n,
		 int64_t expires)
{
	struct store_txn *t;
	struct store_claim c;
	uint8_t h[STORE_HASH_LEN];
	size_t i;
	int rc;

	if ((rc = store_txn_begin(st, &t)) != 0)
		return rc;
	if (m)
		store_txn_msg_put(t, m);
	for (i = 0; i < n; i++) {
		hash_of(h, hashes[i]);
		claim_of(&c, m ? m->qid : "QIDNOMSG0000", 1, expires);
		store_txn_claim_put(t, KH, h, &c);
	}
	return store_txn_commit(t);
}

/* claim_found_under - 1 live, 0 absent, for a claim filed under keyhash; fails on an error */
static int claim_found_under(struct store *st, const uint8_t keyhash[STORE_HASH_LEN], int hash,
			     int64_t now, struct store_claim *out)
{
	uint8_t h[1][STORE_HASH_LEN];
	struct store_claim c;
	int found = -1, rc;

	hash_of(h[0], hash);
	if ((rc = store_claims_get(st, keyhash, (const uint8_t (*)[STORE_HASH_LEN]) h, 1, now, &c,
				   &found)) != 0)
		fail_msg("claims_get(%d): got %d (%s), want 0", hash, rc, store_strerror(rc));
	if (out)
		*out = c;
	return found;
}

/* claim_found - the same under KH */
static int claim_found(struct store *st, int hash, int64_t now, struct store_claim *out)
{
	return claim_found_under(st, KH, hash, now, out);
}

/* msg_check - compare every field, saying which differs */
static void msg_check(const char *name, const struct store_msg *got, const struct store_msg *want)
{
	char what[128];
	size_t i;

	CHECK_STR(name, got->qid, want->qid);
	CHECK_INT("accepted", got->accepted, want->accepted);
	CHECK_STR("from", got->from, want->from);
	CHECK_STR("envid", got->envid, want->envid);
	CHECK_INT("ret", got->ret, want->ret);
	CHECK_INT("body", got->body, want->body);
	CHECK_STR("client", got->client, want->client);
	CHECK_STR("user", got->user, want->user);
	CHECK_INT("attempts", got->attempts, want->attempts);
	CHECK_INT("next_attempt", got->next_attempt, want->next_attempt);
	CHECK_INT("inflight", got->inflight, want->inflight);
	CHECK_INT("n_rcpts", got->n_rcpts, want->n_rcpts);
	for (i = 0; i < want->n_rcpts; i++) {
		snprintf(what, sizeof(what), "%s rcpt %zu addr", name, i);
		CHECK_STR(what, got->rcpts[i].addr, want->rcpts[i].addr);
		snprintf(what, sizeof(what), "%s rcpt %zu notify", name, i);
		CHECK_INT(what, got->rcpts[i].notify, want->rcpts[i].notify);
		snprintf(what, sizeof(what), "%s rcpt %zu orcpt", name, i);
		CHECK_STR(what, got->rcpts[i].orcpt, want->rcpts[i].orcpt);
		snprintf(what, sizeof(what), "%s rcpt %zu state", name, i);
		CHECK_INT(what, got->rcpts[i].state, want->rcpts[i].state);
		snprintf(what, sizeof(what), "%s rcpt %zu reply", name, i);
		CHECK_STR(what, got->rcpts[i].reply, want->rcpts[i].reply);
	}
	snprintf(what, sizeof(what), "%s data_len", name);
	CHECK_INT(what, got->data_len, want->data_len);
	if (want->data_len && memcmp(got->data, want->data, want->data_len) != 0)
		fail_msg("%s: data differs", name);
	if (got->data == NULL || got->data[got->data_len] != 0)
		fail_msg("%s: data not NUL-terminated past data_len", name);
}

/* raw_env - the same environment opened directly, store closed */
static MDB_env *raw_env(const char *path)
{
	MDB_env *env;

	assert_int_equal(mdb_env_create(&env), 0);
	assert_int_equal(mdb_env_set_maxdbs(env, 8), 0);
	assert_int_equal(mdb_env_set_mapsize(env, TEST_MAP), 0);
	assert_int_equal(mdb_env_open(env, path, 0, 0600), 0);
	return env;
}

/* raw_put - write one record behind the store's back */
static void raw_put(MDB_env *env, const char *db, const void *k, size_t klen,
		    const void *v, size_t vlen)
{
	MDB_val key = { klen, (void *) k }, val = { vlen, (void *) v };
	MDB_txn *txn;
	MDB_dbi dbi;

	assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
	assert_int_equal(mdb_dbi_open(txn, db, 0, &dbi), 0);
	assert_int_equal(mdb_put(txn, dbi, &key, &val, 0), 0);
	assert_int_equal(mdb_txn_commit(txn), 0);
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

static void test_open_reopen(void **state)
{
	struct fx *f = *state;
	struct store *st = NULL;
	struct store_claim c;
	struct store_stats s;
	char err[256] = "", bad[160];
	int hashes[] = { 1, 2, 3 };

	assert_int_equal(spool(f->st, NULL, hashes, 3, NOW + 10 * SEC), 0);
	fx_reopen(f, TEST_MAP);
	CHECK_INT("claim 2 after reopen", claim_found(f->st, 2, NOW, &c), 1);
	CHECK_STR("claim 2 qid", c.qid, "QIDNOMSG0000");
	CHECK_INT("claim 2 expires", c.expires, NOW + 10 * SEC);
	CHECK_INT("stats", store_stats(f->st, &s), 0);
	CHECK_INT("stats claims", s.claims, 3);
	CHECK_INT("stats queued", s.queued, 0);
	/* LMDB's map: map_size less the journal's region past it */
	CHECK_INT("stats map_size", s.map_size, TEST_MAP - STORE_JOURNAL_SIZE);
	if (s.map_used == 0 || s.map_used > s.map_size)
		fail_msg("stats map_used: got %llu, want in (0, %llu]",
			 (unsigned long long) s.map_used, (unsigned long long) s.map_size);

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

static void test_claims(void **state)
{
	static const struct {
		int hash;
		int64_t expires;
		int want;
	} cases[] = {
		{ 10, NOW + SEC, 1 },
		{ 11, NOW + 1, 1 },
		{ 12, NOW, 0 },			/* expires == now: expired */
		{ 13, NOW - SEC, 0 },
		{ 14, 0, -1 },			/* never written */
		{ 15, NOW + 100 * SEC, 1 },
	};
	struct fx *f = *state;
	size_t i, n = sizeof(cases) / sizeof(cases[0]);
	uint8_t (*h)[STORE_HASH_LEN] = xcalloc(n, sizeof(*h));
	struct store_claim c, *got = xcalloc(n, sizeof(*got));
	int *found = xcalloc(n, sizeof(*found));
	struct store_txn *t;
	char what[64];

	assert_int_equal(store_txn_begin(f->st, &t), 0);
	for (i = 0; i < n; i++) {
		hash_of(h[i], cases[i].hash);
		if (cases[i].want < 0)
			continue;
		claim_of(&c, "0123456789AB", cases[i].hash, cases[i].expires);
		store_txn_claim_put(t, KH, h[i], &c);
	}
	CHECK_INT("commit", store_txn_commit(t), 0);
	CHECK_INT("claims_get", store_claims_get(f->st, KH, (const uint8_t (*)[STORE_HASH_LEN]) h, n,
						   NOW, got, found), 0);
	for (i = 0; i < n; i++) {
		snprintf(what, sizeof(what), "hash %d found", cases[i].hash);
		CHECK_INT(what, found[i], cases[i].want > 0);
		if (!found[i])
			continue;
		CHECK_STR("qid", got[i].qid, "0123456789AB");
		CHECK_INT("fingerprint", got[i].fingerprint[31], cases[i].hash);
		CHECK_INT("accepted", got[i].accepted, NOW - SEC);
		CHECK_INT("expires", got[i].expires, cases[i].expires);
	}
	CHECK_INT("claims_get n=0", store_claims_get(f->st, KH, NULL, 0, NOW, NULL, NULL), 0);
	free(h);
	free(got);
	free(found);
}

static void test_txn_sees_own_claims(void **state)
{
	struct fx *f = *state;
	struct store_txn *t;
	struct store_claim c, got;
	uint8_t h[STORE_HASH_LEN];

	hash_of(h, 7);
	claim_of(&c, "AAAAAAAAAAAA", 9, NOW + SEC);
	assert_int_equal(store_txn_begin(f->st, &t), 0);
	CHECK_INT("before put", store_txn_claim_get(t, KH, h, NOW, &got), STORE_ENOTFOUND);
	store_txn_claim_put(t, KH, h, &c);
	CHECK_INT("after put", store_txn_claim_get(t, KH, h, NOW, &got), 0);
	CHECK_STR("qid", got.qid, "AAAAAAAAAAAA");
	CHECK_INT("after put, expired", store_txn_claim_get(t, KH, h, NOW + SEC, &got),
		  STORE_ENOTFOUND);
	CHECK_INT("no sticky error", store_txn_error(t), 0);
	CHECK_INT("outside, before commit", claim_found(f->st, 7, NOW, NULL), 0);
	store_txn_abort(t);
	CHECK_INT("after abort", claim_found(f->st, 7, NOW, NULL), 0);
	store_txn_abort(NULL);
}

/*
 * test_claim_live - a claim answers while it has not expired, and after
 * that while its message is queued; then it answers no more, whatever is
 * left of its record (which goes with its story: test_story.c)
 */
static void test_claim_live(void **state)
{
	/* claims on hash n belong to message QID0000000n0 if queued */
	static const struct {
		const char *name;
		int hash;
		int64_t expires;
		int queued;
		int live;		/* at NOW */
	} cases[] = {
		{ "fresh", 1, NOW + SEC, 0, 1 },
		{ "fresh, queued", 2, NOW + SEC, 1, 1 },
		{ "expired", 3, NOW - SEC, 0, 0 },
		{ "expired, queued", 4, NOW - SEC, 1, 1 },
		{ "expires now", 5, NOW, 0, 0 },
		{ "long expired, queued", 6, NOW - 100 * SEC, 1, 1 },
		{ "long expired", 7, NOW - 50 * SEC, 0, 0 },
	};
	struct fx *f = *state;
	size_t i, n = sizeof(cases) / sizeof(cases[0]);
	struct store_msg m;
	char qid[16], what[64];
	int hash;

	for (i = 0; i < n; i++) {
		snprintf(qid, sizeof(qid), "QID0000000%d0", cases[i].hash);
		msg_new(&m, qid, 1, 10);
		hash = cases[i].hash;
		assert_int_equal(spool(f->st, &m, &hash, 1, cases[i].expires), 0);
		store_msg_free(&m);
		if (!cases[i].queued)
			assert_int_equal(store_msg_drop(f->st, qid), 0);
	}
	for (i = 0; i < n; i++) {
		snprintf(what, sizeof(what), "%s: live", cases[i].name);
		CHECK_INT(what, claim_found(f->st, cases[i].hash, NOW, NULL), cases[i].live);
	}
	/* their messages delivered, the queued ones answer no more once expired */
	for (i = 0; i < n; i++) {
		snprintf(qid, sizeof(qid), "QID0000000%d0", cases[i].hash);
		if (cases[i].queued)
			assert_int_equal(store_msg_drop(f->st, qid), 0);
	}
	for (i = 0; i < n; i++) {
		snprintf(what, sizeof(what), "%s: live after delivery", cases[i].name);
		CHECK_INT(what, claim_found(f->st, cases[i].hash, NOW, NULL),
			  cases[i].expires > NOW);
	}
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

static void test_msg_roundtrip(void **state)
{
	static const struct {
		const char *name;
		size_t n_rcpts;
		size_t data_len;
		int nulls;		/* envid, user, every orcpt NULL */
		int empty_from;
		int binary;		/* data full of NULs and CRs */
	} cases[] = {
		{ "plain", 1, 100, 0, 0, 0 },
		{ "nulls", 3, 100, 1, 0, 0 },
		{ "null sender", 2, 10, 0, 1, 0 },
		{ "binary data", 2, 4096, 0, 0, 1 },
		{ "empty data", 1, 0, 0, 0, 0 },
		{ "many recipients", 100, 1000, 0, 0, 0 },
		{ "multi-MB data", 2, 7u << 20, 0, 0, 1 },
	};
	struct fx *f = *state;
	struct store_msg m, got;
	struct store_stats s;
	char qid[16];
	size_t i, j;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(qid, sizeof(qid), "RT%010zu", i);
		msg_new(&m, qid, cases[i].n_rcpts, cases[i].data_len);
		if (cases[i].nulls) {
			free(m.envid);
			free(m.user);
			m.envid = m.user = NULL;
			for (j = 0; j < m.n_rcpts; j++) {
				free(m.rcpts[j].orcpt);
				m.rcpts[j].orcpt = NULL;
			}
		}
		if (cases[i].empty_from)
			m.from[0] = 0;
		if (cases[i].binary)
			for (j = 0; j < m.data_len; j++)
				m.data[j] = j % 3 ? 0 : (j % 5 ? '\r' : '\n');
		m.attempts = (int) i;
		m.next_attempt = NOW + (int64_t) i;
		CHECK_INT(cases[i].name, spool(f->st, &m, NULL, 0, 0), 0);
		CHECK_INT(cases[i].name, store_msg_load(f->st, qid, &got), 0);
		msg_check(cases[i].name, &got, &m);
		store_msg_free(&got);
		store_msg_free(&m);
		store_msg_free(&m);	/* zeroed: a second free is harmless */
	}
	store_msg_free(NULL);
	CHECK_INT("stats", store_stats(f->st, &s), 0);
	CHECK_INT("stats queued", s.queued, sizeof(cases) / sizeof(cases[0]));
	CHECK_INT("load missing", store_msg_load(f->st, "NOSUCHQID000", &got), STORE_ENOTFOUND);
	CHECK_INT("load bad qid", store_msg_load(f->st, "", &got), STORE_EINVAL);
	CHECK_INT("load long qid", store_msg_load(f->st, "0123456789012345678901234", &got),
		  STORE_EINVAL);
}

static void test_msg_update(void **state)
{
	static const struct {
		const char *name;
		enum store_rcpt_state states[3];
		const char *replies[3];
		int stays;
	} steps[] = {
		{ "one sent", { STORE_RCPT_SENT, STORE_RCPT_QUEUED, STORE_RCPT_QUEUED },
		  { "250 2.0.0 ok", "451 4.3.0 later", NULL }, 1 },
		{ "one bounced", { STORE_RCPT_SENT, STORE_RCPT_QUEUED, STORE_RCPT_BOUNCED },
		  { "250 2.0.0 ok", "451 4.3.0 again", "550 5.1.1 no such user" }, 1 },
		{ "all final", { STORE_RCPT_SENT, STORE_RCPT_UNCONFIRMED, STORE_RCPT_BOUNCED },
		  { "250 2.0.0 ok", NULL, "550 5.1.1 no such user" }, 0 },
	};
	struct fx *f = *state;
	struct store_msg m, got;
	struct store_stats s;
	size_t i, j;
	int hash = 42;

	msg_new(&m, "UPD000000001", 3, 500);
	assert_int_equal(spool(f->st, &m, &hash, 1, NOW - SEC), 0);
	for (i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		for (j = 0; j < 3; j++) {
			m.rcpts[j].state = steps[i].states[j];
			free(m.rcpts[j].reply);
			m.rcpts[j].reply = steps[i].replies[j] ? xstrdup(steps[i].replies[j]) : NULL;
		}
		m.attempts++;
		m.next_attempt += 60 * SEC;
		m.inflight = 0;
		CHECK_INT(steps[i].name, store_msg_update(f->st, &m), 0);
		if (!steps[i].stays)
			break;
		CHECK_INT(steps[i].name, store_msg_load(f->st, m.qid, &got), 0);
		msg_check(steps[i].name, &got, &m);
		store_msg_free(&got);
		CHECK_INT("claim live while queued", claim_found(f->st, hash, NOW, NULL), 1);
	}
	CHECK_INT("left the spool", store_msg_load(f->st, m.qid, &got), STORE_ENOTFOUND);
	CHECK_INT("update after leaving", store_msg_update(f->st, &m), STORE_ENOTFOUND);
	CHECK_INT("claim expired once delivered", claim_found(f->st, hash, NOW, NULL), 0);
	CHECK_INT("claim still stored", claim_found(f->st, hash, 0, NULL), 1);
	CHECK_INT("stats", store_stats(f->st, &s), 0);
	CHECK_INT("queued", s.queued, 0);
	store_msg_free(&m);

	/* an update whose recipient count disagrees is refused */
	msg_new(&m, "UPD000000002", 2, 5);
	assert_int_equal(spool(f->st, &m, NULL, 0, 0), 0);
	m.n_rcpts = 1;
	CHECK_INT("count mismatch", store_msg_update(f->st, &m), STORE_EINVAL);
	m.n_rcpts = 2;
	m.rcpts[1].state = 17;
	CHECK_INT("bad state", store_msg_update(f->st, &m), STORE_EINVAL);
	m.rcpts[1].state = STORE_RCPT_QUEUED;
	CHECK_INT("still loads", store_msg_load(f->st, m.qid, &got), 0);
	store_msg_free(&got);
	store_msg_free(&m);
}

/* one transaction for a delivery batch; a bad member fails only itself */
static void test_msg_update_many(void **state)
{
	struct fx *f = *state;
	struct store_msg a, b, gone, got;
	struct store_msg *batch[3] = { &a, &b, &gone };
	int errs[3] = { -1, -1, -1 };

	msg_new(&a, "MANY00000001", 1, 10);
	msg_new(&b, "MANY00000002", 2, 10);
	msg_new(&gone, "MANY00000003", 1, 10);
	assert_int_equal(spool(f->st, &a, NULL, 0, 0), 0);
	assert_int_equal(spool(f->st, &b, NULL, 0, 0), 0);
	a.rcpts[0].state = STORE_RCPT_SENT;
	b.rcpts[0].state = STORE_RCPT_SENT;
	b.attempts = 1;
	b.inflight = 0;

	/* all good: one transaction */
	CHECK_INT("batch of two", store_msg_update_many(f->st, batch, 2, errs), 0);
	CHECK_INT("errs[0]", errs[0], 0);
	CHECK_INT("errs[1]", errs[1], 0);
	CHECK_INT("all sent: left the spool", store_msg_load(f->st, a.qid, &got), STORE_ENOTFOUND);
	CHECK_INT("one queued: stays", store_msg_load(f->st, b.qid, &got), 0);
	CHECK_INT("its attempts", got.attempts, 1);
	CHECK_INT("its first recipient", got.rcpts[0].state, STORE_RCPT_SENT);
	store_msg_free(&got);

	/* a member that is not in the spool: the others are still recorded */
	b.rcpts[1].state = STORE_RCPT_BOUNCED;
	batch[0] = &gone;
	batch[1] = &b;
	CHECK_INT("batch with a missing member", store_msg_update_many(f->st, batch, 2, errs),
		  STORE_ENOTFOUND);
	CHECK_INT("errs[0]", errs[0], STORE_ENOTFOUND);
	CHECK_INT("errs[1]", errs[1], 0);
	CHECK_INT("recorded alone", store_msg_load(f->st, b.qid, &got), STORE_ENOTFOUND);
	store_msg_free(&a);
	store_msg_free(&b);
	store_msg_free(&gone);
}

static void test_inflight(void **state)
{
	struct fx *f = *state;
	struct store_msg m, got;

	msg_new(&m, "INF000000001", 2, 64);
	m.rcpts[0].reply = xstrdup("451 try later");
	assert_int_equal(spool(f->st, &m, NULL, 0, 0), 0);
	CHECK_INT("set", store_msg_set_inflight(f->st, m.qid, 1), 0);
	fx_reopen(f, TEST_MAP);
	CHECK_INT("load", store_msg_load(f->st, m.qid, &got), 0);
	m.inflight = 1;
	msg_check("inflight after reopen", &got, &m);
	store_msg_free(&got);
	CHECK_INT("clear", store_msg_set_inflight(f->st, m.qid, 0), 0);
	CHECK_INT("load", store_msg_load(f->st, m.qid, &got), 0);
	m.inflight = 0;
	msg_check("inflight cleared", &got, &m);
	store_msg_free(&got);
	CHECK_INT("missing", store_msg_set_inflight(f->st, "NOSUCHQID000", 1), STORE_ENOTFOUND);
	store_msg_free(&m);
}

struct list_acc {
	char seen[16][STORE_QID_SIZE];
	int64_t next[16];
	int n;
	int stop_at;
};

/* list_cb - collect queue entries; stop with 99 at stop_at */
static int list_cb(void *arg, const char *qid, int64_t next)
{
	struct list_acc *a = arg;

	if (a->n == a->stop_at)
		return 99;
	strcpy(a->seen[a->n], qid);
	a->next[a->n++] = next;
	return 0;
}

static void test_queue_list_drop(void **state)
{
	static const char *order[] = { "000000000005", "00000000000A", "000000000001",
		"0000000000ZZ", "000000000003" };
	static const char *want[] = { "000000000001", "000000000003", "000000000005",
		"00000000000A", "0000000000ZZ" };
	struct fx *f = *state;
	struct list_acc a;
	struct store_msg m, got;
	char what[64];
	int i;

	for (i = 0; i < 5; i++) {
		msg_new(&m, order[i], 1, 3);
		m.next_attempt = NOW + i;
		assert_int_equal(spool(f->st, &m, NULL, 0, 0), 0);
		store_msg_free(&m);
	}
	memset(&a, 0, sizeof(a));
	a.stop_at = -1;
	CHECK_INT("list", store_queue_list(f->st, list_cb, &a), 0);
	CHECK_INT("listed", a.n, 5);
	for (i = 0; i < 5; i++) {
		snprintf(what, sizeof(what), "entry %d", i);
		CHECK_STR(what, a.seen[i], want[i]);
	}
	CHECK_INT("next_attempt of 000000000001", a.next[0], NOW + 2);
	memset(&a, 0, sizeof(a));
	a.stop_at = 2;
	CHECK_INT("stopped list", store_queue_list(f->st, list_cb, &a), 99);
	CHECK_INT("stopped after", a.n, 2);

	CHECK_INT("drop", store_msg_drop(f->st, "000000000005"), 0);
	CHECK_INT("dropped load", store_msg_load(f->st, "000000000005", &got), STORE_ENOTFOUND);
	CHECK_INT("drop again", store_msg_drop(f->st, "000000000005"), STORE_ENOTFOUND);
	CHECK_INT("drop bad qid", store_msg_drop(f->st, ""), STORE_EINVAL);
	memset(&a, 0, sizeof(a));
	a.stop_at = -1;
	CHECK_INT("list after drop", store_queue_list(f->st, list_cb, &a), 0);
	CHECK_INT("listed after drop", a.n, 4);
	CHECK_STR("entry 2 after drop", a.seen[2], "00000000000A");
}

static void test_last_qid(void **state)
{
	static const struct {
		const char *put;
		const char *want;
	} steps[] = {
		{ NULL, "" },
		{ "00000000000B", "00000000000B" },
		{ "00000000000A", "00000000000B" },	/* smaller: no change */
		{ "00000000000C", "00000000000C" },
		{ "00000000000C1", "00000000000C1" },	/* longer sorts after */
	};
	struct fx *f = *state;
	struct store_msg m;
	char qid[STORE_QID_SIZE];
	size_t i;

	for (i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		if (steps[i].put) {
			msg_new(&m, steps[i].put, 1, 1);
			assert_int_equal(spool(f->st, &m, NULL, 0, 0), 0);
			store_msg_free(&m);
		}
		CHECK_INT("last_qid", store_last_qid(f->st, qid), 0);
		CHECK_STR(steps[i].put ? steps[i].put : "empty store", qid, steps[i].want);
	}
	/* dropping the newest message does not lower it */
	assert_int_equal(store_msg_drop(f->st, "00000000000C1"), 0);
	fx_reopen(f, TEST_MAP);
	CHECK_INT("last_qid", store_last_qid(f->st, qid), 0);
	CHECK_STR("after drop and reopen", qid, "00000000000C1");

	/* nor does delivering it: it leaves the spool through store_msg_update() */
	msg_new(&m, "00000000000D", 1, 1);
	assert_int_equal(spool(f->st, &m, NULL, 0, 0), 0);
	m.rcpts[0].state = STORE_RCPT_SENT;
	assert_int_equal(store_msg_update(f->st, &m), 0);
	store_msg_free(&m);
	CHECK_INT("delivered: gone", store_msg_load(f->st, "00000000000D", &m), STORE_ENOTFOUND);
	fx_reopen(f, TEST_MAP);
	CHECK_INT("last_qid", store_last_qid(f->st, qid), 0);
	CHECK_STR("after delivery and reopen", qid, "00000000000D");
}

static void test_bad_arguments(void **state)
{
	struct fx *f = *state;
	struct store_txn *t;
	struct store_msg m, got;
	struct store_claim c;
	uint8_t h[STORE_HASH_LEN];
	int hash = 5;

	msg_new(&m, "BADARG000001", 1, 1);
	free(m.from);
	m.from = NULL;
	hash_of(h, hash);
	assert_int_equal(store_txn_begin(f->st, &t), 0);
	store_txn_msg_put(t, &m);
	CHECK_INT("sticky after NULL from", store_txn_error(t), STORE_EINVAL);
	claim_of(&c, m.qid, 1, NOW + SEC);
	store_txn_claim_put(t, KH, h, &c);		/* a no-op now */
	CHECK_INT("claim_get after failure", store_txn_claim_get(t, KH, h, NOW, &c), STORE_EINVAL);
	CHECK_INT("commit of failed txn", store_txn_commit(t), STORE_EINVAL);
	CHECK_INT("nothing written", claim_found(f->st, hash, NOW, NULL), 0);
	m.from = xstrdup("x@y");
	CHECK_INT("nothing spooled", store_msg_load(f->st, m.qid, &got), STORE_ENOTFOUND);

	/* QID too long, empty claim QID, no recipients, same QID twice */
	assert_int_equal(store_txn_begin(f->st, &t), 0);
	memset(m.qid, 'Q', sizeof(m.qid));
	store_txn_msg_put(t, &m);
	CHECK_INT("long qid", store_txn_commit(t), STORE_EINVAL);
	assert_int_equal(store_txn_begin(f->st, &t), 0);
	claim_of(&c, "", 1, NOW + SEC);
	store_txn_claim_put(t, KH, h, &c);
	CHECK_INT("empty claim qid", store_txn_commit(t), STORE_EINVAL);
	strcpy(m.qid, "BADARG000001");
	m.n_rcpts = 0;
	assert_int_equal(store_txn_begin(f->st, &t), 0);
	store_txn_msg_put(t, &m);
	CHECK_INT("no recipients", store_txn_commit(t), STORE_EINVAL);
	m.n_rcpts = 1;
	assert_int_equal(spool(f->st, &m, NULL, 0, 0), 0);
	CHECK_INT("same qid twice", spool(f->st, &m, NULL, 0, 0), STORE_EINVAL);
	CHECK_INT("commit NULL", store_txn_commit(NULL), STORE_EINVAL);
	store_msg_free(&m);
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
	CHECK_INT("stats", store_stats(f->st, &s), 0);
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
	CHECK_INT("stats", store_stats(f->st, &s), 0);
	if (s.map_used > s.map_size)
		fail_msg("map_used: got %llu, want <= %llu", (unsigned long long) s.map_used,
			 (unsigned long long) s.map_size);
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
	assert_int_equal(store_txn_begin(f->st, &t), 0);
	CHECK_INT("txn_claim_get corrupt", store_txn_claim_get(t, KH, h[1], NOW, &c), STORE_EINVAL);
	CHECK_INT("sticky", store_txn_error(t), STORE_EINVAL);
	store_txn_abort(t);

	CHECK_INT("corrupt queue record", store_msg_load(f->st, "QBAD00000001", &got), STORE_EINVAL);
	CHECK_INT("corrupt msg record", store_msg_load(f->st, "MBAD00000001", &got), STORE_EINVAL);
	CHECK_INT("queue without msg", store_msg_load(f->st, "ORPHAN000001", &got), STORE_EINVAL);
	CHECK_INT("inflight on corrupt", store_msg_set_inflight(f->st, "QBAD00000001", 1),
		  STORE_EINVAL);
	CHECK_INT("good message", store_msg_load(f->st, "GOOD00000001", &got), 0);
	store_msg_free(&got);
	CHECK_INT("last_qid corrupt", store_last_qid(f->st, qid), STORE_EINVAL);

	memset(&a, 0, sizeof(a));
	a.stop_at = -1;
	CHECK_INT("queue_list skips corrupt", store_queue_list(f->st, list_cb, &a), 0);
	CHECK_INT("listed", a.n, 3);	/* GOOD, MBAD (its queue record is fine), ORPHAN */

	/* a corrupt claim can be replaced */
	assert_int_equal(store_txn_begin(f->st, &t), 0);
	claim_of(&c, "GOOD00000001", 1, NOW - SEC);
	store_txn_claim_put(t, KH, h[1], &c);
	CHECK_INT("overwrite corrupt claim", store_txn_commit(t), 0);
	CHECK_INT("dropped orphan", store_msg_drop(f->st, "ORPHAN000001"), 0);
	CHECK_INT("dropped corrupt", store_msg_drop(f->st, "MBAD00000001"), 0);
}

/* test_codec_truncated - every prefix and many bit flips decode safely */
/* what a story starts from rides in the message record; a version-1 record reads without it */
static void test_msg_story_seed(void **state)
{
	struct fx *f = *state;
	struct store_msg m, got;
	uint8_t *rec, *v1;
	size_t len, seed = 1 + STORE_HASH_LEN + 8, at;

	msg_new(&m, "SEED00000001", 2, 300);
	m.has_key = 1;
	memset(m.keyhash, 0xa5, STORE_HASH_LEN);
	m.ttl = 7200LL * 1000000;
	m.smtputf8 = 1;
	CHECK_INT("spool", spool(f->st, &m, NULL, 0, 0), 0);
	CHECK_INT("load", store_msg_load(f->st, m.qid, &got), 0);
	CHECK_INT("has_key", got.has_key, 1);
	CHECK_INT("smtputf8", got.smtputf8, 1);
	CHECK_INT("keyhash", memcmp(got.keyhash, m.keyhash, STORE_HASH_LEN), 0);
	CHECK_INT("ttl", got.ttl, m.ttl);
	msg_check("seeded", &got, &m);
	store_msg_free(&got);

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
	CHECK_INT("version 1", lmdb_msg_rec_decode(v1, len - seed, &got), 0);
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
	CHECK_INT("pre-SMTPUTF8 v2", lmdb_msg_rec_decode(rec, len, &got), 0);
	CHECK_INT("pre-SMTPUTF8 has_key", got.has_key, 1);
	CHECK_INT("pre-SMTPUTF8 smtputf8", got.smtputf8, 0);
	store_msg_free(&got);
	v1[0] = 3;
	CHECK_INT("version 3", lmdb_msg_rec_decode(v1, len - seed, &got), STORE_EINVAL);
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
	assert_int_equal(store_txn_begin(f->st, &t), 0);
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
		if (lmdb_msg_rec_decode(copy, i, &got) != STORE_EINVAL)
			fail_msg("msg record cut at %zu of %zu: got success, want EINVAL", i, len);
		if (got.rcpts || got.from || got.data)
			fail_msg("msg record cut at %zu: left allocations behind", i);
		free(copy);
	}
	for (i = 0; i < qlen; i++) {
		memset(&got, 0, sizeof(got));
		assert_int_equal(lmdb_msg_rec_decode(rec, len, &got), 0);
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
		rc = lmdb_msg_rec_decode(copy, len, &got);
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

struct worker {
	struct store *st;
	int id;
	int err;
};

/* worker_main - spool and read back messages, as a writer thread would */
static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct store_msg m, got;
	char qid[16];
	int i, hash, rc;

	for (i = 0; i < 25 && w->err == 0; i++) {
		snprintf(qid, sizeof(qid), "T%d%010d", w->id, i);
		msg_new(&m, qid, 1, 200);
		hash = w->id * 1000 + i;
		if ((rc = spool(w->st, &m, &hash, 1, NOW + SEC)) != 0)
			w->err = rc;
		else if ((rc = store_msg_load(w->st, qid, &got)) != 0)
			w->err = rc;
		else
			store_msg_free(&got);
		store_msg_free(&m);
	}
	return NULL;
}

static void test_threads(void **state)
{
	struct fx *f = *state;
	struct worker w[4];
	pthread_t th[4];
	struct store_stats s;
	int i;

	for (i = 0; i < 4; i++) {
		w[i].st = f->st;
		w[i].id = i;
		w[i].err = 0;
		assert_int_equal(pthread_create(th + i, NULL, worker_main, w + i), 0);
	}
	for (i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		CHECK_INT("worker error", w[i].err, 0);
	}
	CHECK_INT("stats", store_stats(f->st, &s), 0);
	CHECK_INT("claims", s.claims, 100);
	CHECK_INT("queued", s.queued, 100);
	CHECK_INT("a claim of thread 3", claim_found(f->st, 3024, NOW, NULL), 1);
}

static void test_strerror(void **state)
{
	static const int codes[] = { 0, STORE_ENOTFOUND, STORE_ENOSPC, STORE_EIO, STORE_EINVAL, -99 };
	size_t i;

	(void) state;
	for (i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
		if (store_strerror(codes[i]) == NULL || *store_strerror(codes[i]) == 0)
			fail_msg("store_strerror(%d): got empty text", codes[i]);
	if (strstr(store_strerror(STORE_ENOSPC), "space") == NULL)
		fail_msg("store_strerror(ENOSPC): got \"%s\", want it to say space",
			 store_strerror(STORE_ENOSPC));
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_open_reopen),
		T(test_claims),
		T(test_txn_sees_own_claims),
		T(test_claim_live),
		T(test_old_expiry_index),
		T(test_msg_roundtrip),
		T(test_msg_story_seed),
		T(test_old_claims),
		T(test_msg_update),
		T(test_msg_update_many),
		T(test_inflight),
		T(test_queue_list_drop),
		T(test_last_qid),
		T(test_bad_arguments),
		cmocka_unit_test_setup_teardown(test_map_full, fx_setup_tiny, fx_teardown),
		T(test_corrupt_records),
		cmocka_unit_test(test_codec_truncated),
		T(test_threads),
		cmocka_unit_test(test_strerror),
	};

	return cmocka_run_group_tests_name("store", tests, NULL, NULL);
}
