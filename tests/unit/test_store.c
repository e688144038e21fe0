/*
 * test_store - the store interface, on either backend (test_store_fx.h:
 * LMDB, or PostgreSQL with IDEMRELAY_PG_URL set): claims and their
 * expiry, the spool and its delivery state, durability across reopen,
 * bad arguments and concurrent use. Each test gets a fresh store,
 * removed afterwards. What only one backend has is tested in
 * test_store_lmdb.c (with test_store_codec.c and test_store_raw.c) and
 * test_store_pg.c (with test_store_pg_*.c).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>

#include "../../store/store.h"
#include "../../util/buf.h"
#include "test_store_help.h"

static void test_open_reopen(void **state)
{
	struct fx *f = *state;
	struct store_claim c;
	struct store_stats s;
	int hashes[] = { 1, 2, 3 };

	assert_int_equal(spool(f->st, NULL, hashes, 3, NOW + 10 * SEC), 0);
	fx_reopen(f, TEST_MAP);
	CHECK_INT("claim 2 after reopen", claim_found(f->st, 2, NOW, &c), 1);
	CHECK_STR("claim 2 qid", c.qid, "QIDNOMSG0000");
	CHECK_INT("claim 2 expires", c.expires, NOW + 10 * SEC);
	CHECK_INT("stats", store_stats(f->st, &s, 0), 0);
	CHECK_INT("stats claims", s.claims, 3);
	CHECK_INT("stats queued", s.queued, 0);
	CHECK_INT("stats: no oldest", s.oldest, 0);
	CHECK_INT("stats: one node, this one", s.nodes, 1);
	/* the nodes alone, as delivery counts them every few seconds: nothing else read */
	CHECK_INT("stats, nodes", store_stats(f->st, &s, STORE_STATS_NODES), 0);
	CHECK_INT("stats, nodes: one", s.nodes, 1);
	CHECK_INT("stats, nodes: claims not counted", s.claims, 0);
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
	struct store_txn *t;
	char what[64];

	assert_int_equal(store_txn_begin(f->st, NULL, 0, &t), 0);
	for (i = 0; i < n; i++) {
		hash_of(h[i], cases[i].hash);
		if (cases[i].want < 0)
			continue;
		claim_of(&c, "0123456789AB", cases[i].hash, cases[i].expires);
		store_txn_claim_put(t, KH, h[i], &c);
	}
	CHECK_INT("commit", store_txn_commit(t), 0);
	CHECK_INT("claims_get", claims_of(f->st, KH, (const uint8_t (*)[STORE_HASH_LEN]) h, n,
					    NOW, got), 0);
	for (i = 0; i < n; i++) {
		snprintf(what, sizeof(what), "hash %d found", cases[i].hash);
		CHECK_INT(what, got[i].qid[0] != '\0', cases[i].want > 0);
		if (cases[i].want <= 0) {	/* none live: all zero */
			CHECK_INT("absent: expires", got[i].expires, 0);
			CHECK_INT("absent: fingerprint", got[i].fingerprint[31], 0);
			continue;
		}
		CHECK_STR("qid", got[i].qid, "0123456789AB");
		CHECK_INT("fingerprint", got[i].fingerprint[31], cases[i].hash);
		CHECK_INT("accepted", got[i].accepted, NOW - SEC);
		CHECK_INT("expires", got[i].expires, cases[i].expires);
	}
	CHECK_INT("claims_get n=0", claims_of(f->st, KH, NULL, 0, NOW, NULL), 0);
	if (!(store_caps(f->st) & STORE_CAP_LOCAL_READS))	/* not the event loop's to read */
		CHECK_INT("claims_get, reads not local", store_claims_get(f->st, NULL, KH,
			  (const uint8_t (*)[STORE_HASH_LEN]) h, n, NOW, got), STORE_EINVAL);
	free(h);
	free(got);
}

static void test_txn_sees_own_claims(void **state)
{
	struct fx *f = *state;
	struct store_txn *t;
	struct store_claim c, got;
	uint8_t h[STORE_HASH_LEN];

	hash_of(h, 7);
	claim_of(&c, "AAAAAAAAAAAA", 9, NOW + SEC);
	assert_int_equal(store_txn_begin(f->st, NULL, 0, &t), 0);
	CHECK_INT("before put", claim_in(t, KH, h, NOW, &got), STORE_ENOTFOUND);
	store_txn_claim_put(t, KH, h, &c);
	CHECK_INT("after put", claim_in(t, KH, h, NOW, &got), 0);
	CHECK_STR("qid", got.qid, "AAAAAAAAAAAA");
	CHECK_INT("after put, expired", claim_in(t, KH, h, NOW + SEC, &got),
		  STORE_ENOTFOUND);
	CHECK_INT("no sticky error", store_txn_error(t), 0);
	if (store_caps(f->st) & STORE_CAP_LOCAL_READS)	/* else a read waits for t's key lock */
		CHECK_INT("outside, before commit", claim_found(f->st, 7, NOW, NULL), 0);
	txn_abort(t);
	CHECK_INT("after abort", claim_found(f->st, 7, NOW, NULL), 0);
	txn_abort(NULL);
}

/*
 * test_batch_claims_order - one transaction of two submissions, the
 * second taking over a claim of the first (other content accepted under
 * the key): the later write of one claim wins, however a backend groups
 * the batch's rows (PostgreSQL: one INSERT per table, store_pg_seg_for)
 */
static void test_batch_claims_order(void **state)
{
	struct fx *f = *state;
	struct store_msg a, b;
	struct store_txn *t;
	struct store_claim c, got;
	uint8_t h1[STORE_HASH_LEN], h2[STORE_HASH_LEN];

	msg_new(&a, "ORDER0000001", 1, 10);
	msg_new(&b, "ORDER0000002", 1, 10);
	hash_of(h1, 31);
	hash_of(h2, 32);
	assert_int_equal(store_txn_begin(f->st, NULL, 0, &t), 0);
	store_txn_msg_put(t, &a);
	claim_of(&c, a.qid, 1, NOW + SEC);
	store_txn_claim_put(t, KH, h1, &c);
	store_txn_msg_put(t, &b);
	claim_of(&c, b.qid, 2, NOW + SEC);
	store_txn_claim_put(t, KH, h2, &c);
	store_txn_claim_put(t, KH, h1, &c);	/* b takes h1 over */
	CHECK_INT("commit", store_txn_commit(t), 0);
	CHECK_INT("h1 found", claim_found(f->st, 31, NOW, &got), 1);
	CHECK_STR("h1 is b's: the later write", got.qid, b.qid);
	CHECK_INT("h2 found", claim_found(f->st, 32, NOW, &got), 1);
	CHECK_STR("h2 is b's", got.qid, b.qid);
	store_msg_free(&a);
	store_msg_free(&b);
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
		m.accepted = NOW + (int64_t) i * SEC;	/* in QID order, as QIDs are made */
		CHECK_INT(cases[i].name, spool(f->st, &m, NULL, 0, 0), 0);
		CHECK_INT(cases[i].name, store_msg_load(f->st, qid, &got), 0);
		msg_check(cases[i].name, &got, &m);
		store_msg_free(&got);
		store_msg_free(&m);
		store_msg_free(&m);	/* zeroed: a second free is harmless */
	}
	store_msg_free(NULL);
	CHECK_INT("stats", store_stats(f->st, &s, 0), 0);
	CHECK_INT("stats queued", s.queued, sizeof(cases) / sizeof(cases[0]));
	CHECK_INT("stats oldest", s.oldest, NOW);
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
	CHECK_INT("stats", store_stats(f->st, &s, 0), 0);
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

static void test_queue_list_drop(void **state)
{
	static const char *order[] = { "000000000005", "00000000000A", "000000000001",
		"0000000000ZZ", "000000000003" };
	static const char *want[] = { "000000000001", "000000000003", "000000000005",
		"00000000000A", "0000000000ZZ" };
	struct fx *f = *state;
	/* a shared store starts delivery with nothing (its taker leases): the whole walk there */
	unsigned how = store_caps(f->st) & STORE_CAP_SHARED ? 0 : STORE_WALK_MINE;
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
	if (how == 0) {
		CHECK_INT("start's list", store_queue_walk(f->st, STORE_WALK_MINE, list_cb, &a), 0);
		CHECK_INT("nothing at start", a.n, 0);
	}
	CHECK_INT("list", store_queue_walk(f->st, how, list_cb, &a), 0);
	CHECK_INT("listed", a.n, 5);
	for (i = 0; i < 5; i++) {
		snprintf(what, sizeof(what), "entry %d", i);
		CHECK_STR(what, a.seen[i], want[i]);
	}
	CHECK_INT("next_attempt of 000000000001", a.next[0], NOW + 2);
	memset(&a, 0, sizeof(a));
	a.stop_at = 2;
	CHECK_INT("stopped list", store_queue_walk(f->st, how, list_cb, &a), 99);
	CHECK_INT("stopped after", a.n, 2);

	CHECK_INT("drop", store_msg_drop(f->st, "000000000005"), 0);
	CHECK_INT("dropped load", store_msg_load(f->st, "000000000005", &got), STORE_ENOTFOUND);
	CHECK_INT("drop again", store_msg_drop(f->st, "000000000005"), STORE_ENOTFOUND);
	CHECK_INT("drop bad qid", store_msg_drop(f->st, ""), STORE_EINVAL);
	CHECK_INT("hold bad qid", store_msg_change(f->st, "", &(struct store_change) { 1, 0, NULL, 0 }),
		  STORE_EINVAL);
	CHECK_INT("mark bad qid", store_msg_set_inflight(f->st, "", 1), STORE_EINVAL);
	CHECK_INT("flush with a hold", store_msg_change(f->st, NULL, &(struct store_change)
						       { 1, 0, NULL, NOW }), STORE_EINVAL);
	CHECK_INT("flush without a time", store_msg_change(f->st, NULL, &(struct store_change)
							  { -1, 0, NULL, 0 }), STORE_EINVAL);
	store_lease_release(f->st, "", 0);	/* nothing to let go of */
	memset(&a, 0, sizeof(a));
	a.stop_at = -1;
	CHECK_INT("list after drop", store_queue_walk(f->st, how, list_cb, &a), 0);
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
		CHECK_INT("last_qid", last_qid_of(f->st, qid), 0);
		CHECK_STR(steps[i].put ? steps[i].put : "empty store", qid, steps[i].want);
	}
	/* dropping the newest message does not lower it */
	assert_int_equal(store_msg_drop(f->st, "00000000000C1"), 0);
	fx_reopen(f, TEST_MAP);
	CHECK_INT("last_qid", last_qid_of(f->st, qid), 0);
	CHECK_STR("after drop and reopen", qid, "00000000000C1");

	/* nor does delivering it: it leaves the spool through store_msg_update() */
	msg_new(&m, "00000000000D", 1, 1);
	assert_int_equal(spool(f->st, &m, NULL, 0, 0), 0);
	m.rcpts[0].state = STORE_RCPT_SENT;
	assert_int_equal(store_msg_update(f->st, &m), 0);
	store_msg_free(&m);
	CHECK_INT("delivered: gone", store_msg_load(f->st, "00000000000D", &m), STORE_ENOTFOUND);
	fx_reopen(f, TEST_MAP);
	CHECK_INT("last_qid", last_qid_of(f->st, qid), 0);
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
	assert_int_equal(store_txn_begin(f->st, NULL, 0, &t), 0);
	store_txn_msg_put(t, &m);
	CHECK_INT("sticky after NULL from", store_txn_error(t), STORE_EINVAL);
	claim_of(&c, m.qid, 1, NOW + SEC);
	store_txn_claim_put(t, KH, h, &c);		/* a no-op now */
	CHECK_INT("claim_get after failure", claim_in(t, KH, h, NOW, &c), STORE_EINVAL);
	CHECK_INT("commit of failed txn", store_txn_commit(t), STORE_EINVAL);
	CHECK_INT("nothing written", claim_found(f->st, hash, NOW, NULL), 0);
	m.from = xstrdup("x@y");
	CHECK_INT("nothing spooled", store_msg_load(f->st, m.qid, &got), STORE_ENOTFOUND);

	/* QID too long, empty claim QID, no recipients, same QID twice */
	assert_int_equal(store_txn_begin(f->st, NULL, 0, &t), 0);
	memset(m.qid, 'Q', sizeof(m.qid));
	store_txn_msg_put(t, &m);
	CHECK_INT("long qid", store_txn_commit(t), STORE_EINVAL);
	assert_int_equal(store_txn_begin(f->st, NULL, 0, &t), 0);
	claim_of(&c, "", 1, NOW + SEC);
	store_txn_claim_put(t, KH, h, &c);
	CHECK_INT("empty claim qid", store_txn_commit(t), STORE_EINVAL);
	strcpy(m.qid, "BADARG000001");
	m.n_rcpts = 0;
	assert_int_equal(store_txn_begin(f->st, NULL, 0, &t), 0);
	store_txn_msg_put(t, &m);
	CHECK_INT("no recipients", store_txn_commit(t), STORE_EINVAL);
	m.n_rcpts = 1;
	assert_int_equal(spool(f->st, &m, NULL, 0, 0), 0);
	CHECK_INT("same qid twice", spool(f->st, &m, NULL, 0, 0), STORE_EINVAL);
	CHECK_INT("commit NULL", store_txn_commit(NULL), STORE_EINVAL);
	store_msg_free(&m);
}



/* what a story starts from rides with the message: key hash, ttl, SMTPUTF8 */
static void test_msg_story_seed(void **state)
{
	struct fx *f = *state;
	struct store_msg m, got;

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
	store_msg_free(&m);
}

/*
 * the route chosen at acceptance is stored with the message: loaded for
 * delivery, in its story while queued and once finished; a message
 * without one (the default upstream) reads back without
 */
static void test_msg_route(void **state)
{
	static const char *const routes[] = { "tenant-a", NULL, "b.route_2" };
	struct fx *f = *state;
	struct store_msg m, got;
	struct store_story s;
	char qid[16];
	size_t i;

	for (i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		snprintf(qid, sizeof(qid), "ROUTE%07zu", i);
		msg_new(&m, qid, 1, 50);
		m.route = routes[i] ? xstrdup(routes[i]) : NULL;
		CHECK_INT("spool", spool(f->st, &m, NULL, 0, 0), 0);
		CHECK_INT("load", store_msg_load(f->st, qid, &got), 0);
		msg_check(qid, &got, &m);
		store_msg_free(&got);
		CHECK_INT("story queued", store_story_get(f->st, qid, &s), 0);
		CHECK_STR("story queued route", s.m.route, routes[i]);
		store_story_free(&s);
		/* rerouted (idemrelayctl reroute) and back: the rest of it as it was */
		CHECK_INT("set route", store_msg_change(f->st, qid, &(struct store_change) { -1, 1, "moved", 0 }),
			  0);
		CHECK_INT("load moved", store_msg_load(f->st, qid, &got), 0);
		CHECK_STR("moved route", got.route, "moved");
		free(got.route);
		got.route = routes[i] ? xstrdup(routes[i]) : NULL;
		msg_check("moved", &got, &m);
		store_msg_free(&got);
		/*
		 * held and set back in one change, due earlier (the old route's
		 * time not its own), then released: the route and time stay; a
		 * due later than its next attempt leaves that as it is, one
		 * earlier alone (a retry) makes it due then
		 */
		CHECK_INT("hold, set back", store_msg_change(f->st, qid, &(struct store_change)
							     { 1, 1, routes[i], m.next_attempt - 5 }),
			  0);
		CHECK_INT("load held", store_msg_load(f->st, qid, &got), 0);
		CHECK_INT("held", got.held, 1);
		CHECK_STR("route back", got.route, routes[i]);
		CHECK_INT("due earlier", got.next_attempt, m.next_attempt - 5);
		store_msg_free(&got);
		CHECK_INT("release", store_msg_change(f->st, qid, &(struct store_change) { 0, 0, "x", 0 }),
			  0);
		CHECK_INT("set, due later", store_msg_change(f->st, qid, &(struct store_change)
							    { -1, 1, routes[i], m.next_attempt + 5 }), 0);
		CHECK_INT("due alone (a retry)", store_msg_change(f->st, qid, &(struct store_change)
								 { -1, 0, NULL, m.next_attempt - 7 }), 0);
		CHECK_INT("load released", store_msg_load(f->st, qid, &got), 0);
		CHECK_INT("released", got.held, 0);
		CHECK_STR("route kept", got.route, routes[i]);
		CHECK_INT("due earlier", got.next_attempt, m.next_attempt - 7);
		store_msg_free(&got);
		m.rcpts[0].state = STORE_RCPT_SENT;
		CHECK_INT("delivered", store_msg_update(f->st, &m), 0);
		CHECK_INT("story finished", store_story_get(f->st, qid, &s), 0);
		CHECK_INT("finished", s.queued, 0);
		CHECK_STR("story finished route", s.m.route, routes[i]);
		store_story_free(&s);
		CHECK_INT("reroute finished", store_msg_change(f->st, qid,
							       &(struct store_change) { -1, 1, "x", 0 }),
			  STORE_ENOTFOUND);
		CHECK_INT("hold finished", store_msg_change(f->st, qid,
							    &(struct store_change) { 1, 0, NULL, 0 }),
			  STORE_ENOTFOUND);
		store_msg_free(&m);
	}
}

/*
 * a deferral written under the route its attempt was loaded with, after
 * a reroute (which made the message due now), keeps it due now: the
 * retry it earned was the old route's. Under the route stored, a
 * deferral's time is kept.
 */
static void test_defer_after_reroute(void **state)
{
	struct fx *f = *state;
	struct store_msg got;
	int64_t later = clock_us() + 3600 * SEC;

	reroute_then_defer(f->st, f->st, "REROUTE00001", "tenant-a", "tenant-b", later);
	CHECK_INT("load", store_msg_load(f->st, "REROUTE00001", &got), 0);
	CHECK_STR("the new route", got.route, "tenant-b");
	if (got.next_attempt > clock_us())
		fail_msg("rerouted, then deferred under the old route: due in %lld us, want now",
			 (long long) (got.next_attempt - clock_us()));
	store_msg_free(&got);

	reroute_then_defer(f->st, f->st, "REROUTE00002", "tenant-b", NULL, later);
	CHECK_INT("load", store_msg_load(f->st, "REROUTE00002", &got), 0);
	CHECK_INT("its retry kept", got.next_attempt, later);
	store_msg_free(&got);
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
	CHECK_INT("stats", store_stats(f->st, &s, 0), 0);
	CHECK_INT("claims", s.claims, 100);
	CHECK_INT("queued", s.queued, 100);
	CHECK_INT("a claim of thread 3", claim_found(f->st, 3024, NOW, NULL), 1);
}

static void test_strerror(void **state)
{
	static const int codes[] = { 0, STORE_ENOTFOUND, STORE_ENOSPC, STORE_EIO, STORE_EINVAL,
		STORE_ELEASE, STORE_EAGAIN, -99 };
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
		T(test_batch_claims_order),
		T(test_claim_live),
		T(test_msg_roundtrip),
		T(test_msg_story_seed),
		T(test_msg_route),
		T(test_defer_after_reroute),
		T(test_msg_update),
		T(test_msg_update_many),
		T(test_inflight),
		T(test_queue_list_drop),
		T(test_last_qid),
		T(test_bad_arguments),
		T(test_threads),
		cmocka_unit_test(test_strerror),
	};

	return cmocka_run_group_tests_name("store", tests, NULL, NULL);
}
