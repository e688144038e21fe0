/*
 * test_store_codec - the LMDB backend's record codecs (store/lmdb/
 * store_codec.c): the message record and its versions, the route behind
 * its flag 4, the delivery state record's flags, the history record; every truncation refused without a leak,
 * every bit flip survived. Records only: no store is opened.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../store/store.h"
#include "../../store/lmdb/store_int.h"
#include "../../util/buf.h"
#include "test_store_help.h"

/*
 * the message record's versions: 2 as written before SMTPUTF8 (its flags
 * byte had only has_key) reads alike; 1 (before idemrelay 0.1) and 3 are
 * refused
 */
static void test_msg_record_versions(void **state)
{
	struct store_msg m, got;
	uint8_t *rec;
	size_t len, at;

	(void) state;
	msg_new(&m, "SEED00000001", 2, 300);
	m.has_key = 1;
	memset(m.keyhash, 0xa5, STORE_HASH_LEN);
	m.ttl = 7200LL * 1000000;
	m.smtputf8 = 1;
	len = lmdb_msg_rec_size(&m);
	rec = xmalloc(len);
	lmdb_msg_rec_encode(rec, len, &m);
	at = len - m.data_len - 8 - (1 + STORE_HASH_LEN + 8);	/* the flags byte */
	rec[at] = 1;
	memset(&got, 0, sizeof(got));
	strcpy(got.qid, m.qid);
	CHECK_INT("pre-SMTPUTF8 v2", lmdb_msg_rec_decode(rec, len, &got, 1), 0);
	CHECK_INT("pre-SMTPUTF8 has_key", got.has_key, 1);
	CHECK_INT("pre-SMTPUTF8 smtputf8", got.smtputf8, 0);
	CHECK_INT("pre-SMTPUTF8 ttl", got.ttl, m.ttl);
	store_msg_free(&got);
	rec[0] = 1;
	CHECK_INT("version 1", lmdb_msg_rec_decode(rec, len, &got, 1), STORE_EINVAL);
	rec[0] = 3;
	CHECK_INT("version 3", lmdb_msg_rec_decode(rec, len, &got, 1), STORE_EINVAL);
	free(rec);
	store_msg_free(&m);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_msg_record_versions),
		cmocka_unit_test(test_codec_truncated),
		cmocka_unit_test(test_queue_flags),
		cmocka_unit_test(test_msg_record_route),
		cmocka_unit_test(test_story_codec),
	};

	return cmocka_run_group_tests_name("store_codec", tests, NULL, NULL);
}
