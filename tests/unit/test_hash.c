/*
 * test_hash - util/hash.c's hex: the one encoder (hash_hex) and the one
 * decoder (hash_unhex) that the store, TLS, configuration and control
 * socket share; the decoder takes exactly what it says and nothing else.
 * And hash_slot() spreading sequential QIDs for every multiplier it may
 * draw: hash.c is included to set its multiplier (slot_mult).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../../queue/qid.h"
#include "../../util/hash.c"
#include "test_rand.h"

#define SLOT_MULTS	2000		/* multipliers tried */
#define SLOT_KEYS	1000		/* a batch's QIDs ... */
#define SLOT_CAP	2048		/* ... in the PostgreSQL run table: at most half full */

static const uint8_t bytes4[4] = { 0x00, 0xab, 0x7f, 0xf0 };

struct unhex_case {
	const char *in;
	int rc;				/* 0: decodes to bytes4 */
};

static const struct unhex_case unhex_cases[] = {
	{ "00ab7ff0", 0 },
	{ "00AB7Ff0", 0 },		/* either case */
	{ "00:ab:7f:f0", 0 },		/* as openssl prints a fingerprint */
	{ "00:ab7ff0", 0 },
	{ "00ab7ff", -1 },		/* a digit short */
	{ "00ab7ff00", -1 },		/* a digit over */
	{ "00ab7ff0:", -1 },
	{ ":00ab7ff0", -1 },
	{ "00::ab7ff0", -1 },
	{ "0:0ab7ff0", -1 },		/* a colon inside a pair */
	{ " 0ab7ff0", -1 },		/* sscanf("%2x") took these */
	{ "+0ab7ff0", -1 },
	{ "0x007ff0", -1 },
	{ "00ab7fg0", -1 },
	{ "", -1 },
};

/* hash_fnv: FNV-1a 64's published values, and a string hashed in two calls as in one */
static void test_fnv(void **state)
{
	static const struct {
		const char *in;
		uint64_t want;
	} t[] = {
		{ "", 0xcbf29ce484222325ULL },
		{ "a", 0xaf63dc4c8601ec8cULL },
		{ "foobar", 0x85944171f73967e8ULL },
	};
	size_t i;

	(void) state;
	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (hash_fnv(HASH_FNV_INIT, t[i].in, strlen(t[i].in)) != t[i].want)
			fail_msg("hash_fnv(\"%s\") = %016llx, want %016llx", t[i].in,
				 (unsigned long long) hash_fnv(HASH_FNV_INIT, t[i].in, strlen(t[i].in)),
				 (unsigned long long) t[i].want);
	assert_true(hash_fnv(hash_fnv(HASH_FNV_INIT, "foo", 3), "bar", 3) == t[2].want);
}

static void test_unhex(void **state)
{
	uint8_t got[4];
	size_t i;
	int rc;

	(void) state;
	for (i = 0; i < sizeof(unhex_cases) / sizeof(unhex_cases[0]); i++) {
		const struct unhex_case *c = &unhex_cases[i];

		memset(got, 0x55, sizeof(got));
		rc = hash_unhex(c->in, got, sizeof(got));
		if (rc != c->rc)
			fail_msg("hash_unhex(\"%s\"): got %d, want %d", c->in, rc, c->rc);
		if (rc == 0 && memcmp(got, bytes4, sizeof(got)) != 0)
			fail_msg("hash_unhex(\"%s\"): got %02x%02x%02x%02x, want 00ab7ff0", c->in,
				 got[0], got[1], got[2], got[3]);
	}
}

/* a digest and its first bytes both ways */
static void test_hex_round_trip(void **state)
{
	uint8_t d[HASH_LEN], back[HASH_LEN];
	char hex[2 * HASH_LEN + 1];

	(void) state;
	hash_hex(bytes4, 4, hex);
	assert_string_equal(hex, "00ab7ff0");
	hash_hex(bytes4, 0, hex);
	assert_string_equal(hex, "");
	hash_once("abc", 3, d);
	hash_hex(d, HASH_LEN, hex);
	assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	assert_int_equal(hash_unhex(hex, back, HASH_LEN), 0);
	assert_memory_equal(back, d, HASH_LEN);
	hash_hex(d, 11, hex);
	assert_string_equal(hex, "ba7816bf8f01cfea414140");
}

/* probes - key comparisons to find each of n FNVs again in SLOT_CAP slots, probed in turn */
static size_t probes(const uint64_t *fnv, size_t n)
{
	static char taken[SLOT_CAP];
	size_t i, j, cost = 0;

	memset(taken, 0, sizeof(taken));
	for (i = 0; i < n; i++) {
		for (j = hash_slot(fnv[i], SLOT_CAP); taken[j]; j = (j + 1) % SLOT_CAP)
			cost++;
		taken[j] = 1;
		cost++;
	}
	return cost;
}

/*
 * hash_slot: the FNVs of SLOT_KEYS QIDs in a row (a node's clock, and a
 * shared store's with the node's number below it, as qid_next() makes
 * them under load) cost a few comparisons a lookup for each of
 * SLOT_MULTS multipliers. Random slots give 1.5 on average at this
 * load; these give 1.7 at most. Multiply-shift alone crowded them in 35
 * of these 4,000 tables (up to 185 comparisons a lookup)
 */
static void test_slot_sequential_qids(void **state)
{
	static uint64_t fnv[2][SLOT_KEYS];
	char qid[QID_LEN + 1];
	uint64_t base;
	size_t cost;
	int m, i, k;

	(void) state;
	srand(28);
	(void) hash_slot(0, 2);		/* slot_init() done: its draw replaced below */
	for (m = 0; m < SLOT_MULTS; m++) {
		base = 1796000000000000ULL + (rand64() >> 32);	/* microseconds, in 2026 */
		for (i = 0; i < SLOT_KEYS; i++) {
			qid_encode(base + (uint64_t) i, qid);
			fnv[0][i] = hash_fnv(HASH_FNV_INIT, qid, QID_LEN);
			qid_encode((base + (uint64_t) i) << QID_NODE_BITS | 5, qid);
			fnv[1][i] = hash_fnv(HASH_FNV_INIT, qid, QID_LEN);
		}
		slot_mult = rand64() | 1;
		for (k = 0; k < 2; k++)
			if ((cost = probes(fnv[k], SLOT_KEYS)) > 3 * SLOT_KEYS)
				fail_msg("multiplier %016llx, QIDs %s node from %llu: %zu comparisons "
					 "for %d lookups, want at most %d", (unsigned long long) slot_mult,
					 k ? "with a" : "without a", (unsigned long long) base, cost,
					 SLOT_KEYS, 3 * SLOT_KEYS);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fnv),
		cmocka_unit_test(test_unhex),
		cmocka_unit_test(test_hex_round_trip),
		cmocka_unit_test(test_slot_sequential_qids),
	};

	return cmocka_run_group_tests_name("hash", tests, NULL, NULL);
}
