/*
 * test_story - the store's stories and key index, on either backend
 * (test_store_fx.h): a story through spool, delivery updates, drop,
 * duplicate counts (and relay/dupcount.c, which holds them until they are
 * written) and expiry, forgetting a key. Each test gets a fresh store.
 * LMDB's history record codec is in test_store_codec.c, its read-only
 * open in test_store_lmdb.c.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "../../store/store.h"
#include "../../store/store_backend.h"
#include "../../queue/commit.h"
#include "../../relay/dupcount.h"
#include "../../util/buf.h"
#include "test_commit_help.h"
#include "test_store_help.h"

#define TTL		(3600 * SEC)

static int64_t now_us(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (int64_t) tv.tv_sec * SEC + tv.tv_usec;
}

/* story_msg - test_store_help's message, accepted now, by user (NULL: no AUTH) */
static void story_msg(struct store_msg *m, const char *qid, size_t n, const char *user)
{
	msg_new(m, qid, n, 20);
	m->accepted = m->next_attempt = now_us();
	free(m->user);
	m->user = user ? xstrdup(user) : NULL;
}

/* accept_msg - what commit_one() writes: message (with its story's seed), claims, key index */
static void accept_msg(struct store *st, struct store_msg *m, int key, const int *claims)
{
	struct store_txn *t;
	struct store_claim c;
	uint8_t kh[STORE_HASH_LEN], ch[STORE_HASH_LEN];
	size_t i;

	hash_of(kh, key);
	m->has_key = key != 0;
	memcpy(m->keyhash, kh, STORE_HASH_LEN);
	m->ttl = TTL;
	assert_int_equal(store_txn_begin(st, NULL, 0, &t), 0);
	store_txn_msg_put(t, m);
	memset(&c, 0, sizeof(c));
	strcpy(c.qid, m->qid);
	c.accepted = m->accepted;
	c.expires = m->accepted + TTL;
	for (i = 0; key && i < m->n_rcpts; i++) {
		hash_of(ch, claims[i]);
		store_txn_claim_put(t, kh, ch, &c);
	}
	CHECK_INT("accept commit", store_txn_commit(t), 0);
}

/* claim_live - is claim i, filed under key, live? */
static int claim_live(struct store *st, int key, int i)
{
	uint8_t h[1][STORE_HASH_LEN], kh[STORE_HASH_LEN];
	struct store_claim c;

	hash_of(h[0], i);
	hash_of(kh, key);
	assert_int_equal(claims_of(st, kh, (const uint8_t (*)[STORE_HASH_LEN]) h, 1, now_us(), &c),
			 0);
	return c.qid[0] != '\0';
}

static void test_story_lifecycle(void **state)
{
	struct fx *f = *state;
	struct store_msg m, live;
	struct store_story s;
	int claims[2] = { 1, 2 };
	int64_t before = now_us();

	story_msg(&m, "0000000000A1", 2, NULL);
	accept_msg(f->st, &m, 9, claims);
	CHECK_INT("story", store_story_get(f->st, m.qid, &s), 0);
	CHECK_INT("queued", s.queued, 1);
	CHECK_INT("has key", s.has_key, 1);
	CHECK_INT("ttl", s.ttl, TTL);
	CHECK_STR("client", s.m.client, "helo.example [192.0.2.1]");
	CHECK_INT("size", s.m.data_len, m.data_len);
	if (s.m.data != NULL)
		fail_msg("a story carries no data");
	store_story_free(&s);

	/* an attempt: one sent, one deferred */
	CHECK_INT("load", store_msg_load(f->st, m.qid, &live), 0);
	live.rcpts[0].state = STORE_RCPT_SENT;
	live.rcpts[0].reply = xstrdup("250 2.0.0 ok");
	live.rcpts[1].reply = xstrdup("451 4.3.0 later");
	live.attempts = 1;
	CHECK_INT("update", store_msg_update(f->st, &live), 0);
	CHECK_INT("story", store_story_get(f->st, m.qid, &s), 0);
	CHECK_INT("still queued", s.queued, 1);
	CHECK_INT("rcpt 0", s.m.rcpts[0].state, STORE_RCPT_SENT);
	CHECK_STR("rcpt 1 reply", s.m.rcpts[1].reply, "451 4.3.0 later");
	CHECK_INT("expires while queued", s.expires, 0);
	store_story_free(&s);

	/* the last attempt: it leaves the spool, the story stays */
	live.rcpts[1].state = STORE_RCPT_BOUNCED;
	free(live.rcpts[1].reply);
	live.rcpts[1].reply = xstrdup("550 5.1.1 no");
	CHECK_INT("final update", store_msg_update(f->st, &live), 0);
	store_msg_free(&live);
	CHECK_INT("spool", store_msg_load(f->st, m.qid, &live), STORE_ENOTFOUND);
	CHECK_INT("story", store_story_get(f->st, m.qid, &s), 0);
	CHECK_INT("left", s.queued, 0);
	CHECK_INT("attempts", s.m.attempts, 2);
	CHECK_INT("rcpt 1", s.m.rcpts[1].state, STORE_RCPT_BOUNCED);
	CHECK_STR("rcpt 1 reply", s.m.rcpts[1].reply, "550 5.1.1 no");
	CHECK_STR("from kept", s.m.from, "sender@example.com");
	if (s.finished < before || s.expires < s.finished + TTL)
		fail_msg("finished %lld, expires %lld: want expiry ttl after leaving",
			 (long long) s.finished, (long long) s.expires);
	store_story_free(&s);
	CHECK_INT("claims stay", claim_live(f->st, 9, 1) + claim_live(f->st, 9, 2), 2);
	store_msg_free(&m);
	CHECK_INT("unknown", store_story_get(f->st, "0000000000ZZ", &s), STORE_ENOTFOUND);
}

static void test_drop_and_counts(void **state)
{
	struct fx *f = *state;
	struct store_msg m;
	struct store_story s;
	struct store_count c[2];
	struct store_stats ss;
	uint64_t before = 0;
	int claims[1] = { 3 };

	story_msg(&m, "0000000000B1", 1, NULL);
	accept_msg(f->st, &m, 4, claims);
	memset(c, 0, sizeof(c));
	strcpy(c[0].qid, m.qid);
	c[0].duplicates = 2;
	c[0].mismatches = 1;
	strcpy(c[1].qid, "0000000000ZZ");	/* no story: skipped */
	c[1].duplicates = 9;
	CHECK_INT("count", store_hist_count(f->st, c, 2), 0);
	CHECK_INT("count again", store_hist_count(f->st, c, 1), 0);
	CHECK_INT("stats", store_stats(f->st, &ss, 0), 0);
	if (!fx_pg())	/* LMDB: its transactions, as LMDB counts them */
		before = lmdb_txns(f->st);
	CHECK_INT("count of the unknown alone", store_hist_count(f->st, c + 1, 1), 0);
	CHECK_INT("stats after", store_stats(f->st, &ss, 0), 0);
	if (!fx_pg())
		CHECK_INT("nothing written", lmdb_txns(f->st), before);
	CHECK_INT("drop", store_msg_drop(f->st, m.qid), 0);
	CHECK_INT("story", store_story_get(f->st, m.qid, &s), 0);
	CHECK_INT("dropped", s.dropped, 1);
	CHECK_INT("queued", s.queued, 0);
	CHECK_INT("duplicates", s.duplicates, 4);
	CHECK_INT("mismatches", s.mismatches, 2);
	CHECK_INT("rcpt still queued", s.m.rcpts[0].state, STORE_RCPT_QUEUED);
	store_story_free(&s);
	CHECK_INT("no story for the unknown", store_story_get(f->st, "0000000000ZZ", &s),
		  STORE_ENOTFOUND);
	store_msg_free(&m);
}

static void test_forget(void **state)
{
	struct fx *f = *state;
	struct store_msg m1, m2, m3;
	struct store_story s;
	struct store_forget out;
	char (*qids)[STORE_QID_SIZE];
	uint8_t kh[STORE_HASH_LEN];
	size_t n;
	int c1[2] = { 10, 11 }, c2[1] = { 12 }, c3[1] = { 13 };

	/* two messages under key 5 (alice's, then bob's), one under key 6 */
	story_msg(&m1, "0000000000C1", 2, "alice");
	story_msg(&m2, "0000000000C2", 1, "bob");
	story_msg(&m3, "0000000000C3", 1, NULL);
	accept_msg(f->st, &m1, 5, c1);
	accept_msg(f->st, &m2, 5, c2);
	accept_msg(f->st, &m3, 6, c3);
	hash_of(kh, 5);
	CHECK_INT("qids", store_key_qids(f->st, kh, &qids, &n), 0);
	CHECK_INT("n", n, 2);
	CHECK_STR("oldest first", qids[0], "0000000000C1");
	CHECK_STR("then", qids[1], "0000000000C2");
	free(qids);
	CHECK_INT("queued", store_key_queued(f->st, kh, NULL, &qids, &n), 0);
	CHECK_INT("both queued", n, 2);
	free(qids);
	CHECK_INT("bob's queued", store_key_queued(f->st, kh, "bob", &qids, &n), 0);
	CHECK_INT("one of bob's", n, 1);
	CHECK_STR("bob's", qids[0], "0000000000C2");
	free(qids);
	CHECK_INT("carol's queued", store_key_queued(f->st, kh, "carol", &qids, &n), 0);
	CHECK_INT("none of carol's", n, 0);
	free(qids);

	CHECK_INT("forget bob's", store_key_forget(f->st, kh, "bob", 77, &out), 0);
	CHECK_INT("claims", out.claims, 1);
	CHECK_INT("n_qids", out.n_qids, 1);
	CHECK_STR("qid", out.qids[0], "0000000000C2");
	store_forget_free(&out);
	CHECK_INT("bob's claim gone", claim_live(f->st, 5, 12), 0);
	CHECK_INT("alice's stay", claim_live(f->st, 5, 10) + claim_live(f->st, 5, 11), 2);
	CHECK_INT("carol has none", store_key_forget(f->st, kh, "carol", 78, &out),
		  STORE_ENOTFOUND);

	CHECK_INT("forget all", store_key_forget(f->st, kh, NULL, 79, &out), 0);
	CHECK_INT("claims", out.claims, 2);
	CHECK_STR("qid", out.qids[0], "0000000000C1");
	store_forget_free(&out);
	CHECK_INT("alice's gone", claim_live(f->st, 5, 10) + claim_live(f->st, 5, 11), 0);
	CHECK_INT("other key untouched", claim_live(f->st, 6, 13), 1);
	CHECK_INT("nothing left", store_key_forget(f->st, kh, NULL, 80, &out), STORE_ENOTFOUND);
	CHECK_INT("no qids", store_key_qids(f->st, kh, &qids, &n), STORE_ENOTFOUND);
	CHECK_INT("story", store_story_get(f->st, "0000000000C1", &s), 0);
	CHECK_INT("forgotten at", s.forgotten, 79);
	store_story_free(&s);
	/* the spool is untouched: forgetting is about claims */
	CHECK_INT("still queued", store_story_get(f->st, "0000000000C1", &s), 0);
	CHECK_INT("queued", s.queued, 1);
	store_story_free(&s);
	/* a message that left the spool keeps its claims, but is not queued under its key */
	hash_of(kh, 6);
	CHECK_INT("drop the third", store_msg_drop(f->st, "0000000000C3"), 0);
	CHECK_INT("its qid", store_key_qids(f->st, kh, &qids, &n), 0);
	CHECK_INT("listed", n, 1);
	free(qids);
	CHECK_INT("not queued", store_key_queued(f->st, kh, NULL, &qids, &n), 0);
	CHECK_INT("none queued", n, 0);
	free(qids);
	store_msg_free(&m1);
	store_msg_free(&m2);
	store_msg_free(&m3);
}

static void test_expire(void **state)
{
	struct fx *f = *state;
	struct store_msg m, m2, live;
	struct store_story s;
	struct store_stats st;
	uint64_t stories, keys;
	int claims[2] = { 20, 21 }, renewed[1] = { 21 };

	story_msg(&m, "0000000000D1", 2, NULL);
	accept_msg(f->st, &m, 7, claims);
	/* other content under the key, accepted anyway: claim 21 is D2's now */
	story_msg(&m2, "0000000000D2", 1, NULL);
	accept_msg(f->st, &m2, 7, renewed);
	CHECK_INT("stats", stories_of(f->st, &stories, &keys), 0);
	CHECK_INT("stories", stories, 2);
	CHECK_INT("keys: one per claim, D2 holding 21 now", keys, 2);
	/* queued: never expires; its story is made from the message record, key and ttl too */
	CHECK_INT("expire queued", store_hist_expire(f->st, now_us() + 10 * TTL, 100), 0);
	CHECK_INT("story stays", store_story_get(f->st, m.qid, &s), 0);
	CHECK_INT("queued story has its key", s.has_key, 1);
	CHECK_INT("queued story ttl", s.ttl, TTL);
	store_story_free(&s);

	CHECK_INT("load", store_msg_load(f->st, m.qid, &live), 0);
	live.rcpts[0].state = live.rcpts[1].state = STORE_RCPT_SENT;
	CHECK_INT("update", store_msg_update(f->st, &live), 0);
	store_msg_free(&live);
	CHECK_INT("not yet", store_hist_expire(f->st, now_us(), 100), 0);
	CHECK_INT("story stays", store_story_get(f->st, m.qid, &s), 0);
	CHECK_INT("written story has its key", s.has_key, 1);
	CHECK_INT("written story expires a ttl after", s.expires - s.finished, TTL + 1);
	store_story_free(&s);
	CHECK_INT("claims before", store_stats(f->st, &st, 0), 0);
	CHECK_INT("claims", st.claims, 2);
	CHECK_INT("later: one deleted", store_hist_expire(f->st, now_us() + 2 * TTL, 100), 1);
	CHECK_INT("story gone", store_story_get(f->st, m.qid, &s), STORE_ENOTFOUND);
	CHECK_INT("stats", stories_of(f->st, &stories, &keys), 0);
	CHECK_INT("stories: D2's is left", stories, 1);
	CHECK_INT("key entries: D2's is left", keys, 1);
	/* its claims went with it, but not the one D2 took over */
	CHECK_INT("claims after", store_stats(f->st, &st, 0), 0);
	CHECK_INT("claims", st.claims, 1);
	CHECK_INT("D2's claim", claim_live(f->st, 7, 21), 1);
	store_msg_free(&m);
	store_msg_free(&m2);
}

/* a story that expires before one of its claims leaves that claim (and says so) */
static void test_expire_claim_outlives(void **state)
{
	struct fx *f = *state;
	struct store_msg m, live;
	struct store_stats st;
	struct store_txn *t;
	struct store_claim c;
	uint8_t ch[STORE_HASH_LEN], kh[STORE_HASH_LEN];
	int claims[1] = { 30 };

	story_msg(&m, "0000000000E1", 1, NULL);
	accept_msg(f->st, &m, 8, claims);
	/* renewed for the same message with a far expiry (not what the daemon does) */
	memset(&c, 0, sizeof(c));
	strcpy(c.qid, m.qid);
	c.expires = now_us() + 100 * TTL;
	hash_of(ch, 30);
	hash_of(kh, 8);
	assert_int_equal(store_txn_begin(f->st, NULL, 0, &t), 0);
	store_txn_claim_put(t, kh, ch, &c);
	assert_int_equal(store_txn_commit(t), 0);
	CHECK_INT("load", store_msg_load(f->st, m.qid, &live), 0);
	live.rcpts[0].state = STORE_RCPT_SENT;
	CHECK_INT("update", store_msg_update(f->st, &live), 0);
	store_msg_free(&live);
	CHECK_INT("expire", store_hist_expire(f->st, now_us() + 2 * TTL, 100), 1);
	CHECK_INT("stats", store_stats(f->st, &st, 0), 0);
	CHECK_INT("the live claim stays", st.claims, 1);
	store_msg_free(&m);
}

/* a backlog goes a batch at a time, each saying how many went, until none is due */
static void test_expire_backlog(void **state)
{
	static const int batches[] = { 10, 10, 5, 0 };
	struct fx *f = *state;
	struct store_msg m, live;
	struct store_stats st;
	uint64_t stories, keys;
	char qid[STORE_QID_SIZE];
	int claims[1];
	size_t i;

	for (i = 0; i < 25; i++) {
		snprintf(qid, sizeof(qid), "00000000B%03zu", i);
		story_msg(&m, qid, 1, NULL);
		claims[0] = 40 + (int) i;
		accept_msg(f->st, &m, 10, claims);
		CHECK_INT("load", store_msg_load(f->st, m.qid, &live), 0);
		live.rcpts[0].state = STORE_RCPT_SENT;
		CHECK_INT("update", store_msg_update(f->st, &live), 0);
		store_msg_free(&live);
		store_msg_free(&m);
	}
	for (i = 0; i < sizeof(batches) / sizeof(batches[0]); i++)
		CHECK_INT("batch", store_hist_expire(f->st, now_us() + 2 * TTL, 10), batches[i]);
	CHECK_INT("stats", stories_of(f->st, &stories, &keys), 0);
	CHECK_INT("no story left", stories, 0);
	CHECK_INT("no key entry left", keys, 0);
	CHECK_INT("claims", store_stats(f->st, &st, 0), 0);
	CHECK_INT("no claim left", st.claims, 0);
}

/* test_dupcount - counts held in memory, read exactly, written once */
static void test_dupcount(void **state)
{
	static const struct {
		int outcome;
		const char *qid;
	} add[] = {
		{ COMMIT_DUPLICATE, "0000000000D1" },
		{ COMMIT_PARTIAL, "0000000000D1" },	/* counts as a duplicate */
		{ COMMIT_MISMATCH, "0000000000D1" },
		{ COMMIT_QUEUED, "0000000000D1" },	/* not an answer from a claim */
		{ COMMIT_FAILED, "0000000000D1" },
		{ COMMIT_DUPLICATE, "" },		/* no QID named */
		{ COMMIT_DUPLICATE, NULL },
		{ COMMIT_DUPLICATE, "0000000000ZZ" },	/* no story: dropped at persist */
	};
	struct fx *f = *state;
	struct dupcount *dc = dupcount_new();
	struct store_msg m;
	int claims[1] = { 5 };
	uint64_t dups, mism;
	size_t i, n;

	story_msg(&m, "0000000000D1", 1, NULL);
	accept_msg(f->st, &m, 6, claims);
	for (i = 0; i < sizeof(add) / sizeof(add[0]); i++)
		dupcount_add(dc, add[i].outcome, add[i].qid);
	CHECK_INT("pending: known", dupcount_get(dc, f->st, m.qid, &dups, &mism), 0);
	CHECK_INT("pending: duplicates", dups, 2);
	CHECK_INT("pending: mismatches", mism, 1);
	CHECK_INT("persist", dupcount_persist(dc, f->st, &n), 0);
	CHECK_INT("persisted QIDs", n, 2);
	CHECK_INT("written: known", dupcount_get(dc, f->st, m.qid, &dups, &mism), 0);
	CHECK_INT("written: duplicates", dups, 2);
	CHECK_INT("written: mismatches", mism, 1);
	dupcount_add(dc, COMMIT_DUPLICATE, m.qid);
	CHECK_INT("both: known", dupcount_get(dc, f->st, m.qid, &dups, &mism), 0);
	CHECK_INT("both: duplicates", dups, 3);
	CHECK_INT("persist again", dupcount_persist(dc, f->st, &n), 0);
	CHECK_INT("persisted again", n, 1);
	CHECK_INT("nothing left", dupcount_persist(dc, f->st, &n), 0);
	CHECK_INT("nothing persisted", n, 0);
	CHECK_INT("after: duplicates", (dupcount_get(dc, f->st, m.qid, &dups, &mism), dups), 3);
	CHECK_INT("unknown", dupcount_get(dc, f->st, "0000000000ZZ", &dups, &mism), -1);
	CHECK_INT("unknown: nothing", dups + mism, 0);
	dupcount_add(dc, COMMIT_DUPLICATE, m.qid);	/* freed unwritten */
	dupcount_free(dc);
	dupcount_free(NULL);
	store_msg_free(&m);
}

/*
 * test_story_expires - a story expires when store_story_expires() says,
 * from the time its message left and its ttl (acceptance's, or the
 * default for none), whether it left by delivery or by a drop: the
 * PostgreSQL backend has the rule in SQL too (PG_STORY_EXPIRES)
 */
static void test_story_expires(void **state)
{
	static const struct {
		const char *qid;
		int64_t ttl;
		int drop;
	} cases[] = {
		{ "0000000000E1", TTL, 0 },
		{ "0000000000E2", 0, 0 },
		{ "0000000000E3", TTL, 1 },
		{ "0000000000E4", 0, 1 },
	};
	struct fx *f = *state;
	struct store_txn *t;
	struct store_story s;
	struct store_msg m;
	char name[64];
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		story_msg(&m, cases[i].qid, 1, NULL);
		m.ttl = cases[i].ttl;
		assert_int_equal(store_txn_begin(f->st, NULL, 0, &t), 0);
		store_txn_msg_put(t, &m);
		CHECK_INT("spool", store_txn_commit(t), 0);
		m.rcpts[0].state = STORE_RCPT_SENT;
		if (cases[i].drop)
			CHECK_INT("drop", store_msg_drop(f->st, m.qid), 0);
		else
			CHECK_INT("delivered", store_msg_update(f->st, &m), 0);
		store_msg_free(&m);
		CHECK_INT("story", store_story_get(f->st, cases[i].qid, &s), 0);
		snprintf(name, sizeof(name), "%s expires (ttl %lld, %s)", cases[i].qid,
			 (long long) cases[i].ttl, cases[i].drop ? "dropped" : "delivered");
		CHECK_INT(name, s.expires, store_story_expires(s.finished, cases[i].ttl));
		store_story_free(&s);
	}
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_story_lifecycle),
		T(test_drop_and_counts),
		T(test_story_expires),
		T(test_forget),
		T(test_expire),
		T(test_expire_claim_outlives),
		T(test_expire_backlog),
		T(test_dupcount),
	};

	return cmocka_run_group_tests_name("story", tests, NULL, NULL);
}
