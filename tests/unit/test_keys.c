/*
 * test_keys - key derivation, fingerprints, claim hashes, QIDs and the
 * acceptance decision (queue/keys.c, queue/qid.c, commit_decide()).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../../queue/commit.h"
#include "../../queue/keys.h"
#include "../../queue/qid.h"

static const char *hdrs[] = { "X-Idempotency-Key", "Idempotency-Key" };

static void conf_keys(struct conf *c)
{
	memset(c, 0, sizeof(*c));
	c->keys.headers = hdrs;
	c->keys.n_headers = 2;
	c->keys.message_id = 1;
	c->keys.envid = 1;
	c->keys.strip_header = 1;
}

struct key_case {
	const char *name;
	const char *msg;
	const char *envid;
	int require;
	enum keys_source source;
	const char *key;		/* NULL: don't care (hashed) */
	int error;
};

static const struct key_case key_cases[] = {
	{ "header", "X-Idempotency-Key: abc\r\nSubject: x\r\n\r\nbody\r\n", NULL, 0,
	  KEYS_HEADER, "abc", 0 },
	{ "header case-insensitive, trimmed", "x-IDEMPOTENCY-key:   k 1  \r\n\r\nb\r\n", NULL, 0,
	  KEYS_HEADER, "k 1", 0 },
	{ "header folded", "X-Idempotency-Key: a\r\n b\r\n\r\nb\r\n", NULL, 0,
	  KEYS_HEADER, "a b", 0 },
	{ "first listed header wins", "Idempotency-Key: second\r\nX-Idempotency-Key: first\r\n\r\n",
	  NULL, 0, KEYS_HEADER, "first", 0 },
	{ "first occurrence wins", "X-Idempotency-Key: one\r\nX-Idempotency-Key: two\r\n\r\n",
	  NULL, 0, KEYS_HEADER, "one", 0 },
	{ "header beats envid", "X-Idempotency-Key: h\r\n\r\n", "env", 0, KEYS_HEADER, "h", 0 },
	{ "envid", "Message-ID: <m@x>\r\n\r\n", "env1", 0, KEYS_ENVID, "env1", 0 },
	{ "message-id", "Message-ID: <m@x>\r\n\r\n", NULL, 0, KEYS_MESSAGE_ID, NULL, 0 },
	{ "header in body ignored", "Subject: s\r\n\r\nX-Idempotency-Key: no\r\n", NULL, 0,
	  KEYS_NONE, NULL, 0 },
	{ "no key", "Subject: s\r\n\r\nb\r\n", NULL, 0, KEYS_NONE, NULL, 0 },
	{ "no key, required", "Subject: s\r\n\r\nb\r\n", NULL, 1, KEYS_NONE, NULL, 1 },
	{ "empty key", "X-Idempotency-Key:   \r\n\r\n", NULL, 0, KEYS_NONE, NULL, 1 },
	{ "key with control char", "X-Idempotency-Key: a\x01z\r\n\r\n", NULL, 0, KEYS_NONE, NULL, 1 },
	{ "key with 8-bit char", "X-Idempotency-Key: caf\xc3\xa9\r\n\r\n", NULL, 0, KEYS_NONE, NULL, 1 },
};

static void test_derive(void **state)
{
	struct conf c;
	struct keys_result r;
	size_t i;
	int rc;

	(void) state;
	for (i = 0; i < sizeof(key_cases) / sizeof(key_cases[0]); i++) {
		const struct key_case *k = key_cases + i;

		conf_keys(&c);
		c.keys.require = k->require;
		rc = keys_derive(&c, k->msg, strlen(k->msg), "s@x", k->envid, &r);
		if ((rc < 0) != k->error)
			fail_msg("%s: got rc %d, want error=%d (%s)", k->name, rc, k->error,
				 r.error ? r.error : "");
		if (k->error) {
			if (strncmp(r.error, "550 5.7.0 ", 10) != 0)
				fail_msg("%s: got reply %s, want 550 5.7.0", k->name, r.error);
			keys_free(&r);
			continue;
		}
		if (r.source != k->source)
			fail_msg("%s: got source %s, want %s", k->name,
				 keys_source_name(r.source), keys_source_name(k->source));
		if (k->key && strcmp(r.key, k->key) != 0)
			fail_msg("%s: got key \"%s\", want \"%s\"", k->name, r.key, k->key);
		keys_free(&r);
	}
}

static void test_long_key(void **state)
{
	struct conf c;
	struct keys_result r;
	char msg[2100];

	(void) state;
	conf_keys(&c);
	snprintf(msg, sizeof(msg), "X-Idempotency-Key: %0200d\r\n\r\n", 7);
	assert_int_equal(keys_derive(&c, msg, strlen(msg), "", NULL, &r), 0);
	assert_int_equal(strlen(r.key), 200);
	keys_free(&r);
	snprintf(msg, sizeof(msg), "X-Idempotency-Key:   %0200d   \r\n\r\n", 7);	/* trimmed first */
	assert_int_equal(keys_derive(&c, msg, strlen(msg), "", NULL, &r), 0);
	assert_int_equal(strlen(r.key), 200);
	keys_free(&r);
	snprintf(msg, sizeof(msg), "X-Idempotency-Key: %0201d\r\n\r\n", 7);
	assert_int_equal(keys_derive(&c, msg, strlen(msg), "", NULL, &r), -1);
	keys_free(&r);
	/* blanks around the value do not count, however many (fuzz_keys found it) */
	snprintf(msg, sizeof(msg), "X-Idempotency-Key: %1000sk1%1000s\r\n \r\n\r\n", "", "");
	assert_int_equal(keys_derive(&c, msg, strlen(msg), "", NULL, &r), 0);
	assert_string_equal(r.key, "k1");
	keys_free(&r);
}

static void test_message_id_normalised(void **state)
{
	struct conf c;
	struct keys_result a, b;
	const char *m1 = "Message-ID: <id@example>\r\n\r\n";
	const char *m2 = "message-id:   < id@example >  \r\n\r\n";

	(void) state;
	conf_keys(&c);
	keys_derive(&c, m1, strlen(m1), "", NULL, &a);
	keys_derive(&c, m2, strlen(m2), "", NULL, &b);
	assert_int_equal(a.source, KEYS_MESSAGE_ID);
	assert_string_equal(a.key, b.key);
	assert_int_equal(strlen(a.key), 64);
	keys_free(&a);
	keys_free(&b);
}

/*
 * test_msgid_key - the key of a Message-ID, one function for keys_derive()
 * and idemrelayctl: the blanks around, one pair of <> and the blanks inside
 * them go, no more
 * (idemrelayctl stripped every '<' and '>', and found no claim for "<<a@x>>")
 */
static void test_msgid_key(void **state)
{
	static const struct { const char *id, *part; } t[] = {
		{ "<a@x>", "a@x" }, { "< a@x >", "a@x" }, { "a@x", "a@x" },
		{ "<<a@x>>", "<a@x>" }, { "<a@x", "a@x" }, { "<>", NULL }, { "< >", NULL },
		{ " \t<a@x> ", "a@x" }, { "\t< a@x >\t", "a@x" },	/* as typed: blanks around */
	};
	char key[2 * HASH_LEN + 1], want[2 * HASH_LEN + 1], msg[200];
	uint8_t d[HASH_LEN];
	struct keys_result r;
	struct conf c;
	size_t i;

	(void) state;
	conf_keys(&c);
	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		if (t[i].part == NULL) {
			assert_int_equal(keys_msgid_key(t[i].id, strlen(t[i].id), key), -1);
			continue;
		}
		assert_int_equal(keys_msgid_key(t[i].id, strlen(t[i].id), key), 0);
		hash_once(t[i].part, strlen(t[i].part), d);
		hash_hex(d, HASH_LEN, want);
		if (strcmp(key, want) != 0)
			fail_msg("%s: not the hash of %s", t[i].id, t[i].part);
		snprintf(msg, sizeof(msg), "Message-ID: %s\r\n\r\n", t[i].id);
		assert_int_equal(keys_derive(&c, msg, strlen(msg), "", NULL, &r), 0);
		if (strcmp(r.key, key) != 0)
			fail_msg("%s: keys_derive %s, keys_msgid_key %s", t[i].id, r.key, key);
		keys_free(&r);
	}
}

static void test_fingerprint(void **state)
{
	struct conf c;
	struct keys_result a, b;
	const char *m1 = "Date: Mon\r\nX-Idempotency-Key: k\r\n\r\nhello\r\n";
	const char *m2 = "Date: Tue\r\nX-Idempotency-Key: k\r\n\r\nhello\r\n";
	const char *m3 = "Date: Tue\r\nX-Idempotency-Key: k\r\n\r\nhello!\r\n";

	(void) state;
	conf_keys(&c);
	keys_derive(&c, m1, strlen(m1), "a@x", NULL, &a);
	keys_derive(&c, m2, strlen(m2), "a@x", NULL, &b);
	assert_memory_equal(a.fingerprint, b.fingerprint, HASH_LEN);	/* headers excluded */
	keys_free(&b);
	keys_derive(&c, m3, strlen(m3), "a@x", NULL, &b);
	assert_memory_not_equal(a.fingerprint, b.fingerprint, HASH_LEN);
	keys_free(&b);
	keys_derive(&c, m1, strlen(m1), "b@x", NULL, &b);
	assert_memory_not_equal(a.fingerprint, b.fingerprint, HASH_LEN);	/* sender included */
	keys_free(&a);
	keys_free(&b);
}

static void test_rewrite(void **state)
{
	struct conf c;
	struct keys_result r;
	struct buf out = BUF_INIT;
	const char *m = "From: a\r\nX-Idempotency-Key: k\r\n cont\r\nTo: b\r\n"
	    "Idempotency-Key: other\r\n\r\nX-Idempotency-Key: body\r\n";

	(void) state;
	conf_keys(&c);
	keys_derive(&c, m, strlen(m), "", NULL, &r);
	keys_rewrite(&out, "Received: x\r\n", m, strlen(m), &r);
	assert_string_equal(out.data, "Received: x\r\nFrom: a\r\nTo: b\r\n\r\nX-Idempotency-Key: body\r\n");
	buf_free(&out);
	keys_free(&r);

	c.keys.strip_header = 0;
	keys_derive(&c, m, strlen(m), "", NULL, &r);
	keys_rewrite(&out, "", m, strlen(m), &r);
	assert_string_equal(out.data, m);
	buf_free(&out);
	keys_free(&r);
}

/* issue 31: a list naming one header twice notes each field once */
static void test_duplicate_names(void **state)
{
	static const char *twice[] = { "X-Idempotency-Key", "Idempotency-Key", "x-IDEMPOTENCY-key" };
	struct conf c;
	struct keys_result r;
	struct buf out = BUF_INIT;
	const char *m = "From: a\r\nX-Idempotency-Key: k\r\nTo: b\r\n"
	    "Idempotency-Key: other\r\nX-IDEMPOTENCY-KEY: again\r\n\r\nbody\r\n";

	(void) state;
	conf_keys(&c);
	c.keys.headers = twice;
	c.keys.n_headers = 3;
	assert_int_equal(keys_derive(&c, m, strlen(m), "", NULL, &r), 0);
	assert_string_equal(r.key, "k");
	if (r.n_strip != 3)
		fail_msg("got %zu spans, want 3 (one per key header field)", r.n_strip);
	assert_int_equal(keys_rewrite(&out, "Received: x\r\n", m, strlen(m), &r), 0);
	assert_string_equal(out.data, "Received: x\r\nFrom: a\r\nTo: b\r\n\r\nbody\r\n");
	buf_free(&out);
	keys_free(&r);
}

/* issue 31: every key header field goes, not only the first eight */
static void test_strip_all(void **state)
{
	static const char *const names[] = { "X-Idempotency-Key", "idempotency-key",
		"X-IDEMPOTENCY-KEY" };
	struct conf c;
	struct keys_result r;
	struct buf m = BUF_INIT, want = BUF_INIT, out = BUF_INIT;
	int i;

	(void) state;
	conf_keys(&c);
	buf_printf(&want, "Received: x\r\n");
	for (i = 0; i < 20; i++) {
		buf_printf(&m, "X-Other-%d: %d\r\n", i, i);
		buf_printf(&want, "X-Other-%d: %d\r\n", i, i);
		buf_printf(&m, "%s: k%d\r\n%s", names[i % 3], i, i % 4 == 1 ? "\tfolded\r\n" : "");
	}
	buf_printf(&m, "\r\nX-Idempotency-Key: in the body\r\n");
	buf_printf(&want, "\r\nX-Idempotency-Key: in the body\r\n");
	assert_int_equal(keys_derive(&c, m.data, m.len, "", NULL, &r), 0);
	assert_string_equal(r.key, "k0");
	if (r.n_strip != 20)
		fail_msg("got %zu spans, want 20", r.n_strip);
	assert_int_equal(keys_rewrite(&out, "Received: x\r\n", m.data, m.len, &r), 0);
	assert_string_equal(out.data, want.data);
	keys_free(&r);
	buf_free(&out);

	c.keys.strip_header = 0;	/* kept, all of them */
	assert_int_equal(keys_derive(&c, m.data, m.len, "", NULL, &r), 0);
	assert_int_equal(r.n_strip, 0);
	assert_int_equal(keys_rewrite(&out, "", m.data, m.len, &r), 0);
	assert_string_equal(out.data, m.data);
	keys_free(&r);
	buf_free(&out);
	buf_free(&m);
	buf_free(&want);
}

struct span_case {
	const char *name;
	size_t n;
	struct keys_span s[3];
	int ok;
};

/* over "From: a\r\nX-Idempotency-Key: k\r\nTo: b\r\n\r\n" (40 bytes) */
static const struct span_case span_cases[] = {
	{ "none", 0, { { 0, 0 } }, 1 },
	{ "one", 1, { { 9, 22 } }, 1 },
	{ "adjacent", 2, { { 0, 9 }, { 9, 22 } }, 1 },
	{ "to the end", 1, { { 31, 9 } }, 1 },
	{ "repeated", 2, { { 9, 22 }, { 9, 22 } }, 0 },
	{ "overlapping", 2, { { 0, 10 }, { 9, 22 } }, 0 },
	{ "unsorted", 2, { { 9, 22 }, { 0, 9 } }, 0 },
	{ "past the end", 1, { { 31, 10 } }, 0 },
	{ "starts past the end", 1, { { 41, 1 } }, 0 },
	{ "length wraps", 1, { { 9, (size_t) -1 } }, 0 },
	{ "empty", 2, { { 0, 9 }, { 9, 0 } }, 0 },
};

/* keys_rewrite refuses spans that are not sorted and disjoint, leaving out alone */
static void test_rewrite_spans(void **state)
{
	const char *m = "From: a\r\nX-Idempotency-Key: k\r\nTo: b\r\n\r\n";
	struct keys_result r;
	size_t i;

	(void) state;
	assert_int_equal(strlen(m), 40);
	for (i = 0; i < sizeof(span_cases) / sizeof(span_cases[0]); i++) {
		const struct span_case *k = span_cases + i;
		struct buf out = BUF_INIT;
		struct keys_span spans[3];
		int rc;

		memset(&r, 0, sizeof(r));
		memcpy(spans, k->s, sizeof(spans));
		r.strip = spans;
		r.n_strip = k->n;
		rc = keys_rewrite(&out, "R\r\n", m, strlen(m), &r);
		if (rc != (k->ok ? 0 : -1))
			fail_msg("%s: got rc %d, want %d", k->name, rc, k->ok ? 0 : -1);
		if (!k->ok && out.len != 0)
			fail_msg("%s: refused, yet wrote %zu bytes", k->name, out.len);
		if (k->ok && out.len != 3 + 40 - (k->n ? k->s[0].len : 0) - (k->n > 1 ? k->s[1].len : 0))
			fail_msg("%s: wrote %zu bytes", k->name, out.len);
		buf_free(&out);
	}
}

static void test_claim_hash(void **state)
{
	uint8_t a[HASH_LEN], b[HASH_LEN];

	(void) state;
	/* filed under the identity (smtp_rcpt_id: domain case folded), as given */
	keys_claim_hash("", "k", "u@example.com", a);
	keys_claim_hash("", "k", "U@example.com", b);
	assert_memory_not_equal(a, b, HASH_LEN);
	keys_claim_hash("", "k", "u@Example.COM", b);
	assert_memory_not_equal(a, b, HASH_LEN);
	keys_claim_hash("alice", "k", "u@example.com", b);
	assert_memory_not_equal(a, b, HASH_LEN);	/* scope */
	keys_claim_hash("", "k2", "u@example.com", b);
	assert_memory_not_equal(a, b, HASH_LEN);
	/* no ambiguity between scope and key boundaries */
	keys_claim_hash("a", "bc", "u@x", a);
	keys_claim_hash("ab", "c", "u@x", b);
	assert_memory_not_equal(a, b, HASH_LEN);
}

static void test_qid(void **state)
{
	char a[QID_LEN + 1], b[QID_LEN + 1];
	uint64_t v;
	int i;

	(void) state;
	qid_next(a);
	assert_int_equal(strlen(a), 12);
	for (i = 0; i < 1000; i++) {
		qid_next(b);
		if (strcmp(a, b) >= 0)
			fail_msg("QIDs not increasing: %s then %s", a, b);
		assert_int_equal(strspn(b, "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"), 12);
		strcpy(a, b);
	}
	assert_int_equal(qid_decode(a, &v), 0);
	qid_encode(v, b);
	assert_string_equal(a, b);
	qid_seed("ZZZZZZZZZZZZ");	/* not a QID: ignored */
	qid_encode(v + 1000000000, b);	/* a QID from the future: seeded */
	qid_seed(b);
	qid_next(a);
	assert_true(strcmp(a, b) > 0);
	assert_int_equal(qid_decode("short", &v), -1);
	assert_int_equal(qid_decode("0000000000a0", &v), -1);
}

/* qid_valid: the one QID syntax (ctl, the control socket, qid_decode) */
static void test_qid_valid(void **state)
{
	static const struct {
		const char *s;
		int want;
	} t[] = {
		{ "0000000000VV", 1 }, { "ABCDEF012345", 1 }, { "VVVVVVVVVVVV", 1 },
		{ "0", 0 }, { "", 0 }, { "00000000000", 0 }, { "0000000000000", 0 },
		{ "0000000000ZZ", 0 },	/* W-Z: no digit of base 32 */
		{ "0000000000W0", 0 }, { "ORDER2026WXYZ", 0 }, { "00000000000000000000", 0 },
		{ "0000000000a0", 0 }, { "000000 00000", 0 }, { "00000000000V ", 0 },
		{ "000000-00000", 0 }, { "ABCDEFGHIJKLMNOPQRS", 0 },
	};
	char q[QID_LEN + 1];
	uint64_t v;
	size_t i;
	int j;

	(void) state;
	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		if (qid_valid(t[i].s) != t[i].want)
			fail_msg("qid_valid(\"%s\") = %d, want %d", t[i].s, !t[i].want, t[i].want);
		if ((qid_decode(t[i].s, &v) == 0) != t[i].want)
			fail_msg("qid_decode(\"%s\") disagrees with qid_valid", t[i].s);
	}
	assert_int_equal(qid_valid(NULL), 0);
	for (j = 0; j < 1000; j++) {	/* what qid_next() writes is valid */
		qid_next(q);
		if (!qid_valid(q))
			fail_msg("qid_next() wrote %s, qid_valid says no", q);
	}
}

/* nodes of a shared store: their number in the low bits, still increasing, never equal */
static void test_qid_node(void **state)
{
	char a[QID_LEN + 1], b[QID_LEN + 1];
	uint64_t va, vb, last = 0;
	int i;

	(void) state;
	qid_set_node(5);
	for (i = 0; i < 1000; i++) {
		qid_next(a);
		assert_int_equal(qid_decode(a, &va), 0);
		if ((va & 0xff) != 5)
			fail_msg("QID %s: node bits %llu, want 5", a, (unsigned long long) (va & 0xff));
		if (va <= last)
			fail_msg("QIDs not increasing: %llu then %llu", (unsigned long long) last,
				 (unsigned long long) va);
		last = va;
	}
	/* another node, same instant: a different QID in the same microsecond */
	qid_set_node(3);
	qid_next(b);
	assert_int_equal(qid_decode(b, &vb), 0);
	assert_int_equal(vb & 0xff, 3);
	assert_true(vb > va && strcmp(b, a) > 0);
	qid_set_node(-1);
}

/* the SPEC section 4 table */
struct decide_case {
	const char *name;
	int n;
	int found[3];
	int same_fp[3];
	int shadow, accept;
	enum commit_outcome want;
	const char *orig;
	uint8_t claimed[3];
};

static const struct decide_case decide_cases[] = {
	{ "all new", 2, {0, 0}, {1, 1}, 0, 0, COMMIT_QUEUED, "", {0, 0} },
	{ "all claimed", 2, {1, 1}, {1, 1}, 0, 0, COMMIT_DUPLICATE, "Q0", {1, 1} },
	{ "partial", 3, {0, 1, 0}, {1, 1, 1}, 0, 0, COMMIT_PARTIAL, "Q1", {0, 1, 0} },
	{ "mismatch", 2, {1, 1}, {1, 0}, 0, 0, COMMIT_MISMATCH, "Q1", {1, 1} },
	{ "mismatch partial", 2, {0, 1}, {1, 0}, 0, 0, COMMIT_MISMATCH, "Q1", {0, 1} },
	{ "mismatch accepted", 2, {1, 1}, {0, 0}, 0, 1, COMMIT_QUEUED, "Q0", {0, 0} },
	{ "shadow duplicate", 2, {1, 1}, {1, 1}, 1, 0, COMMIT_QUEUED, "Q0", {0, 0} },
	{ "shadow mismatch", 1, {1}, {0}, 1, 0, COMMIT_QUEUED, "Q0", {0} },
};

static void test_decide(void **state)
{
	size_t i;
	int j;

	(void) state;
	for (i = 0; i < sizeof(decide_cases) / sizeof(decide_cases[0]); i++) {
		const struct decide_case *d = decide_cases + i;
		struct commit_req req;
		struct store_claim claims[3];
		uint8_t hashes[3][HASH_LEN];
		uint8_t claimed[3];

		memset(&req, 0, sizeof(req));
		memset(claims, 0, sizeof(claims));
		req.hashes = hashes;
		req.claimed = claimed;
		req.msg.n_rcpts = (size_t) d->n;
		req.shadow = d->shadow;
		req.mismatch_accept = d->accept;
		memset(req.fingerprint, 'F', HASH_LEN);
		for (j = 0; j < d->n; j++) {	/* a claim not found has no QID */
			if (d->found[j])
				snprintf(claims[j].qid, sizeof(claims[j].qid), "Q%d", j);
			memset(claims[j].fingerprint, d->same_fp[j] ? 'F' : 'G', HASH_LEN);
		}
		commit_decide(&req, claims);
		if (req.outcome != d->want)
			fail_msg("%s: got outcome %d, want %d", d->name, req.outcome, d->want);
		if (strcmp(req.orig_qid, d->orig) != 0)
			fail_msg("%s: got orig \"%s\", want \"%s\"", d->name, req.orig_qid, d->orig);
		if (memcmp(claimed, d->claimed, (size_t) d->n) != 0)
			fail_msg("%s: claimed[] differs", d->name);
		if (req.shadow_hit != d->shadow)
			fail_msg("%s: got shadow_hit %d", d->name, req.shadow_hit);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_derive),
		cmocka_unit_test(test_long_key),
		cmocka_unit_test(test_message_id_normalised),
		cmocka_unit_test(test_msgid_key),
		cmocka_unit_test(test_fingerprint),
		cmocka_unit_test(test_rewrite),
		cmocka_unit_test(test_duplicate_names),
		cmocka_unit_test(test_rewrite_spans),
		cmocka_unit_test(test_strip_all),
		cmocka_unit_test(test_claim_hash),
		cmocka_unit_test(test_qid),
		cmocka_unit_test(test_qid_node),
		cmocka_unit_test(test_qid_valid),
		cmocka_unit_test(test_decide),
	};

	return cmocka_run_group_tests_name("keys", tests, NULL, NULL);
}
