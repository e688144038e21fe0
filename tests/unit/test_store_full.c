/*
 * test_store_full - a full store still records every outcome: the reserve
 * acceptance may not use (store_space.c), and an outcome written into a
 * map with no room left for its story (store_msg.c: the transaction is
 * not used again after a failed put).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <lmdb.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "../../store/store.h"
#include "../../store/lmdb/store_int.h"
#include "../../util/buf.h"
#include "test_store_help.h"

#define SMALL_MAP	(2u << 20)	/* no journal: every page is LMDB's */
#define MAX_MSGS	4000

static size_t n_rcpts;		/* of each message msg_make() makes */

/* fx_setup_small - a 2 MB map, filled by a few hundred messages of one recipient */
static int fx_setup_small(void **state)
{
	n_rcpts = 1;
	return fx_setup_map(state, SMALL_MAP);
}


/* msg_make - test_store_help's message number i, queued, n_rcpts recipients, len bytes, a key */
static void msg_make(struct store_msg *m, int i, size_t len)
{
	char qid[STORE_QID_SIZE];

	snprintf(qid, sizeof(qid), "FULL%08d", i);
	msg_new(m, qid, n_rcpts, len);
	m->has_key = 1;
	m->keyhash[0] = (uint8_t) i;
	m->ttl = 3600 * SEC;
}

/* accept_one - an acceptance as the writer makes it: message (within the room), one claim */
static int accept_one(struct store *st, int i, size_t len)
{
	struct store_claim c;
	struct store_msg m;
	struct store_txn *t;
	uint8_t h[STORE_HASH_LEN] = { 0 };
	int rc;

	msg_make(&m, i, len);
	memset(&c, 0, sizeof(c));
	strcpy(c.qid, m.qid);
	c.accepted = NOW;
	c.expires = NOW + m.ttl;
	memcpy(h, &i, sizeof(i));
	if ((rc = store_txn_begin(st, NULL, 0, &t)) == 0) {
		store_txn_msg_put(t, &m);
		store_txn_claim_put(t, m.keyhash, h, &c);
		rc = store_txn_commit(t);
	}
	store_msg_free(&m);
	return rc;
}

/* fill - accept messages until the store refuses; how many it took */
static int fill(struct store *st, size_t len)
{
	int i, rc = 0;

	for (i = 0; i < MAX_MSGS && rc == 0; i++)
		if ((rc = accept_one(st, i, len)) != 0)
			CHECK_INT("filling ends in", rc, STORE_ENOSPC);
	if (rc == 0)
		fail_msg("filling: %d messages and no refusal", MAX_MSGS);
	return i - 1;
}

/* outcome_load - message i, loaded, with a delivery's outcome: deferred (with a reply) or sent */
static int outcome_load(struct store *st, int i, enum store_rcpt_state state, const char *reply,
			struct store_msg *m)
{
	char qid[STORE_QID_SIZE];
	size_t r;
	int rc;

	snprintf(qid, sizeof(qid), "FULL%08d", i);
	if ((rc = store_msg_load(st, qid, m)) != 0)
		return rc;
	for (r = 0; r < m->n_rcpts; r++) {
		m->rcpts[r].state = state;
		free(m->rcpts[r].reply);
		m->rcpts[r].reply = xstrdup(reply);
	}
	m->attempts++;
	m->inflight = 0;
	return 0;
}

/* outcome - record a delivery of message i: deferred (with a reply) or sent */
static int outcome(struct store *st, int i, enum store_rcpt_state state, const char *reply)
{
	struct store_msg m;
	int rc;

	if ((rc = outcome_load(st, i, state, reply, &m)) != 0)
		return rc;
	rc = store_msg_update(st, &m);
	store_msg_free(&m);
	return rc;
}

/* drain - defer each message once, then deliver it: every write must succeed */
static void drain(struct store *st, int n)
{
	struct store_stats s;
	char what[64];
	int i;

	for (i = 0; i < n; i++) {
		snprintf(what, sizeof(what), "deferral of message %d of %d", i, n);
		CHECK_INT(what, outcome(st, i, STORE_RCPT_QUEUED,
					"451 4.3.0 the upstream is busy, try again later"), 0);
	}
	for (i = 0; i < n; i++) {
		snprintf(what, sizeof(what), "outcome of message %d of %d", i, n);
		CHECK_INT(what, outcome(st, i, STORE_RCPT_SENT,
					"250 2.0.0 Ok: queued as 4XyZabcdEF0123"), 0);
	}
	CHECK_INT("stats", store_stats(st, &s, 0), 0);
	CHECK_INT("queued after the drain", s.queued, 0);
}

/*
 * keyless_one - a new message without a key or claim, as a non-delivery
 * notice is spooled, marked one (notice) or not: alone (with 0), or in
 * the transaction of a delivery update (message 0's deferral), after it
 * (with 1: as a bounce writes its notice with its outcome) or before it
 * (with -1)
 */
static int keyless_one(struct store *st, int i, size_t len, int notice, int with)
{
	struct store_msg m, o;
	struct store_txn *t;
	int rc;

	if (with && (rc = outcome_load(st, 0, STORE_RCPT_QUEUED,
				       "451 4.3.0 the upstream is busy, try again later", &o)) != 0)
		return rc;
	msg_make(&m, i, len);
	m.has_key = 0;
	m.notice = notice;
	if ((rc = store_txn_begin(st, NULL, 0, &t)) == 0) {
		if (with > 0)
			store_txn_msg_update(t, &o);
		store_txn_msg_put(t, &m);
		if (with < 0)
			store_txn_msg_update(t, &o);
		rc = store_txn_commit(t);
	}
	store_msg_free(&m);
	if (with)
		store_msg_free(&o);
	return rc;
}

/*
 * test_reserve - acceptance stops while every queued message's deferral,
 * outcome and removal still fit, a keyless new message too, even in the
 * transaction of a delivery update; a bounce's non-delivery notice (the
 * mark, with its outcome whatever the order of the writes) is taken
 * there, as delivery's other writes are; then they all do, and
 * acceptance resumes. Without the reserve the map fills and outcomes
 * are refused.
 */
static void test_reserve(void **state)
{
	struct fx *f = *state;
	int n;

	n = fill(f->st, 1500);
	if (n < 50)
		fail_msg("accepted: got %d messages into a 2 MB map, want at least 50", n);
	CHECK_INT("a keyless acceptance in the reserve",
		  keyless_one(f->st, MAX_MSGS + 2, 1500, 0, 0), STORE_ENOSPC);
	CHECK_INT("an acceptance after a delivery update, in the reserve",
		  keyless_one(f->st, MAX_MSGS + 2, 1500, 0, 1), STORE_ENOSPC);
	CHECK_INT("a notice in the reserve", keyless_one(f->st, MAX_MSGS + 3, 1500, 1, 1), 0);
	CHECK_INT("a notice put before its outcome, in the reserve",
		  keyless_one(f->st, MAX_MSGS + 5, 1500, 1, -1), 0);
	CHECK_INT("acceptance, still at the reserve", accept_one(f->st, MAX_MSGS + 4, 1500),
		  STORE_ENOSPC);
	CHECK_INT("the notice delivered", outcome(f->st, MAX_MSGS + 3, STORE_RCPT_SENT,
						  "250 2.0.0 Ok"), 0);
	CHECK_INT("the other notice delivered", outcome(f->st, MAX_MSGS + 5, STORE_RCPT_SENT,
							"250 2.0.0 Ok"), 0);
	drain(f->st, n);
	CHECK_INT("acceptance after the drain", accept_one(f->st, MAX_MSGS + 1, 1500), 0);
}

/* notices_until_refused - put notices of len bytes, numbered from *next, until refused; how many */
static int notices_until_refused(struct store *st, int *next, size_t len)
{
	int k, rc = 0;

	for (k = 0; k < 2000 && (rc = keyless_one(st, *next, len, 1, 1)) == 0; k++)
		(*next)++;
	CHECK_INT("notices end in", rc, STORE_ENOSPC);
	return k;
}

/*
 * test_notices_keep_floor - notices (each put after a delivery update in
 * its transaction) may use the room kept for the queued messages'
 * delivery writes, not the floor: a notice is about as large as its
 * original, whose pages come back only once its outcome has committed.
 * Put until refused (60 KB ones, then 1500 bytes
 * ones, to leave the map as full as notices can), every queued message's
 * deferral and outcome still commits, the notices' too. Without the
 * floor (notices taken unchecked) the map fills and outcomes are refused.
 */
static void test_notices_keep_floor(void **state)
{
	struct fx *f = *state;
	struct store_stats s;
	char what[64];
	int n = fill(f->st, 1500), next = MAX_MSGS + 10, big, small, i;

	big = notices_until_refused(f->st, &next, 60000);
	if (big < 1)
		fail_msg("no 60 KB notice taken into the room kept for the queued messages");
	small = notices_until_refused(f->st, &next, 1500);
	print_message("%d queued, %d notices of 60 KB and %d of 1500 bytes taken\n", n, big,
		      small);
	for (i = 0; i < n; i++) {
		snprintf(what, sizeof(what), "deferral of message %d of %d", i, n);
		CHECK_INT(what, outcome(f->st, i, STORE_RCPT_QUEUED,
					"451 4.3.0 the upstream is busy, try again later"), 0);
	}
	for (i = 0; i < n; i++) {
		snprintf(what, sizeof(what), "outcome of message %d of %d", i, n);
		CHECK_INT(what, outcome(f->st, i, STORE_RCPT_SENT,
					"250 2.0.0 Ok: queued as 4XyZabcdEF0123"), 0);
	}
	for (i = MAX_MSGS + 10; i < next; i++) {
		snprintf(what, sizeof(what), "outcome of notice %d", i);
		CHECK_INT(what, outcome(f->st, i, STORE_RCPT_SENT, "250 2.0.0 Ok"), 0);
	}
	CHECK_INT("stats", store_stats(f->st, &s, 0), 0);
	CHECK_INT("queued after the drain", s.queued, 0);
}

/*
 * test_reserve_rcpts - the reserve grows with recipients, not messages
 * alone: a story holds each recipient's address and final reply, so
 * messages of 100 recipients each leave no room for their stories when
 * only a message's worth is kept for each, and a story is then dropped.
 */
static void test_reserve_rcpts(void **state)
{
	static const char reply[] = "250 2.0.0 Ok: queued as 4XyZabcdEF0123 (upstream id)";
	struct fx *f = *state;
	struct store_story s;
	char qid[STORE_QID_SIZE], what[64];
	int n, i;

	n_rcpts = 100;
	n = fill(f->st, 200);
	if (n < 5)
		fail_msg("accepted: got %d messages of 100 recipients into a 2 MB map, want 5", n);
	CHECK_INT("queued recipients, kept by the commits", lmdb_of(f->st)->queued_rcpts, n * 100);
	fx_reopen(f, SMALL_MAP);
	CHECK_INT("queued recipients, counted at open", lmdb_of(f->st)->queued_rcpts, n * 100);
	for (i = 0; i < n; i++) {
		snprintf(what, sizeof(what), "outcome of message %d of %d", i, n);
		CHECK_INT(what, outcome(f->st, i, STORE_RCPT_SENT, reply), 0);
	}
	CHECK_INT("queued recipients after the drain", lmdb_of(f->st)->queued_rcpts, 0);
	for (i = 0; i < n; i++) {
		snprintf(qid, sizeof(qid), "FULL%08d", i);
		snprintf(what, sizeof(what), "story of message %d of %d", i, n);
		CHECK_INT(what, store_story_get(f->st, qid, &s), 0);
		CHECK_INT("its recipients", s.m.n_rcpts, 100);
		CHECK_STR("a final reply", s.m.rcpts[99].reply, reply);
		store_story_free(&s);
	}
}

/* test_reserve_reopen - the reserve holds across a restart while full */
static void test_reserve_reopen(void **state)
{
	struct fx *f = *state;
	int n = fill(f->st, 300);

	fx_reopen(f, SMALL_MAP);
	CHECK_INT("refused after reopen", accept_one(f->st, MAX_MSGS + 1, 300), STORE_ENOSPC);
	drain(f->st, n);
}

/*
 * test_full_map_outcome - a map filled to the last page, the reserve
 * too (by deferrals with long replies, as a store from before the
 * reserve may be): an outcome whose story does not fit is recorded
 * without it, instead of failing on a transaction LMDB already gave up
 * (MDB_BAD_TXN, "store I/O error").
 */
static void test_full_map_outcome(void **state)
{
	struct fx *f = *state;
	int n = fill(f->st, 1500), i, rc = 0;
	char what[64], *reply = xmalloc(SMALL_MAP / 4);

	memset(reply, 'r', SMALL_MAP / 16 - 1);
	memcpy(reply, "451 ", 4);
	reply[SMALL_MAP / 16 - 1] = 0;
	for (i = 0; i < n && rc == 0; i++)
		rc = outcome(f->st, i, STORE_RCPT_QUEUED, reply);
	CHECK_INT("the reserve used up by deferrals", rc, STORE_ENOSPC);

	/* a story far larger than what is left: its put fails, the deletes do not */
	memset(reply, 'r', SMALL_MAP / 4 - 1);
	memcpy(reply, "250 ", 4);
	reply[SMALL_MAP / 4 - 1] = 0;
	for (i = 0; i < n; i++) {
		snprintf(what, sizeof(what), "outcome of message %d of %d", i, n);
		rc = outcome(f->st, i, STORE_RCPT_SENT, i % 2 ? reply : "250 2.0.0 Ok");
		if (rc != 0)
			fail_msg("%s: got %d (%s), want 0", what, rc, store_strerror(rc));
	}
	free(reply);
}

/* test_reserve_size - the reserve's floor follows the map; each queued message and recipient adds */
static void test_reserve_size(void **state)
{
	(void) state;
	CHECK_INT("floor of a 1 GB map", lmdb_space_reserve(4096, 262144, 0, 0), 256);
	CHECK_INT("floor of a 2 MB map", lmdb_space_reserve(4096, 512, 0, 0), 64);
	CHECK_INT("floor of a 256 KB map", lmdb_space_reserve(4096, 64, 0, 0), 16);
	CHECK_INT("1000 queued", lmdb_space_reserve(4096, 262144, 1000, 1000),
		  256 + (1000 * (STORE_RESERVE_PER_MSG + STORE_RESERVE_PER_RCPT) + 4095) / 4096);
	CHECK_INT("10 queued of 100 recipients", lmdb_space_reserve(4096, 262144, 10, 1000),
		  256 + (10 * STORE_RESERVE_PER_MSG + 1000 * STORE_RESERVE_PER_RCPT + 4095) / 4096);
}

/*
 * test_disk_full_wording - a write the file system refuses (the file size
 * limit stands in for a full disk) is "no space", not an I/O error
 */
static void test_disk_full_wording(void **state)
{
	struct fx *f = *state;
	struct rlimit rl, old;
	struct stat sb;
	char data[160];
	int rc;

	signal(SIGXFSZ, SIG_IGN);
	snprintf(data, sizeof(data), "%s/data.mdb", f->path);
	assert_int_equal(stat(data, &sb), 0);
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	rl = old;
	rl.rlim_cur = (rlim_t) sb.st_size;
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &rl), 0);
	rc = accept_one(f->st, 1, 512u << 10);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	CHECK_INT("a commit past the file size limit", rc, STORE_ENOSPC);
	if (strstr(store_strerror(rc), "no space left on device") == NULL)
		fail_msg("wording: got \"%s\", want it to say no space left on device",
			 store_strerror(rc));
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup_small, fx_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_reserve),
		T(test_notices_keep_floor),
		T(test_reserve_rcpts),
		T(test_reserve_reopen),
		T(test_full_map_outcome),
		cmocka_unit_test(test_reserve_size),
		T(test_disk_full_wording),
	};

	return cmocka_run_group_tests_name("store_full", tests, NULL, NULL);
}
