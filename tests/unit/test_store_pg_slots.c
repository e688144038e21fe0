/*
 * test_store_pg_slots - the PostgreSQL transaction's two open-addressing
 * tables, the claims cache (store_pg_claim.c) and each key's last run
 * (store_pg_txn.c), against claims a client chose to collide: claim
 * hashes are SHA-256 over the client's idempotency key and recipient, so
 * by trial (a few thousand a claim, offline) it can make their first 8
 * bytes, or the FNV of their hex, agree in the low bits that picked a
 * slot (FNV is unkeyed, the tables' sizes powers of two). Such a batch
 * was one probe chain in each table: N claims N²/2 comparisons on the
 * writer thread under the key locks. Here the hashes are made to agree
 * in those bits directly (the trial's outcome), and the batch must
 * still cost a few key comparisons a claim (strcmp, wrapped:
 * test_store_pg_slots_LDFLAGS in the Makefile) and leave the cache no
 * long run of taken slots. No server: the transaction only buffers.
 * store_pg_claim.c is included for its cache's entries.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../../store/pg/store_pg_claim.c"
#include "test_rand.h"

#define N_CLAIMS	256		/* a batch's claims, all in one probe chain before */
#define OLD_BITS	12		/* the low bits they agree in: tables up to 4096 */
#define OLD_MASK	((1u << OLD_BITS) - 1)

static unsigned long compares;		/* strcmp calls since reset */

int __real_strcmp(const char *a, const char *b);

/* __wrap_strcmp - every strcmp of the library, counted */
int __wrap_strcmp(const char *a, const char *b)
{
	compares++;
	return __real_strcmp(a, b);
}

/*
 * colliding - a claim hash whose first 8 bytes gave the cache's old slot
 * ((h ^ h >> 29) mod 2^k) 0, and whose first 11 bytes in hex (the run
 * table's key) have FNV 0 mod 2^OLD_BITS: bytes 8-10 tried in turn
 */
static void colliding(uint8_t hash[STORE_HASH_LEN])
{
	uint64_t h = rand64() & ~(uint64_t) OLD_MASK, f;
	char hex[STORE_QID_SIZE];
	uint32_t n;
	int i;

	h |= (h >> 29) & OLD_MASK;
	for (i = 0; i < 8; i++)
		hash[i] = (uint8_t) (h >> (56 - 8 * i));
	for (i = 11; i < STORE_HASH_LEN; i++)
		hash[i] = (uint8_t) rand();
	for (n = 0;; n++) {
		hash[8] = (uint8_t) (n >> 16);
		hash[9] = (uint8_t) (n >> 8);
		hash[10] = (uint8_t) n;
		hash_hex(hash, 11, hex);
		f = hash_fnv(HASH_FNV_INIT, hex, strlen(hex));
		if ((f & OLD_MASK) == 0)
			break;
	}
	assert_int_equal((h ^ h >> 29) & OLD_MASK, 0);
}

/* longest_run - the most consecutive taken slots of t's cache (its wrap included) */
static size_t longest_run(const struct pg_txn *t)
{
	size_t i, run = 0, most = 0;

	for (i = 0; i < 2 * t->cap_cache; i++) {
		run = t->cache[i % t->cap_cache].used ? run + 1 : 0;
		if (run > most)
			most = run;
	}
	return most > t->cap_cache ? t->cap_cache : most;
}

/*
 * a batch of N_CLAIMS claims chosen to collide under the old slots: each
 * found again, a few key comparisons a claim where the chain made N²/2
 * (43,280 with the table's rebuilds), and no run of taken cache slots
 * near the batch's length, which the chain was. The slots are random
 * now, so the bounds are far from what random slots give (300 runs: at
 * most 369 comparisons, runs of at most 34 slots of 512 half full)
 */
static void test_chosen_claims_spread(void **state)
{
	static uint8_t hash[N_CLAIMS][STORE_HASH_LEN];
	uint8_t keyhash[STORE_HASH_LEN] = { 0x6b };
	struct store_claim c;
	struct pg_txn t;
	size_t run;
	int i;

	(void) state;
	srand(28);
	for (i = 0; i < N_CLAIMS; i++)
		colliding(hash[i]);
	memset(&t, 0, sizeof(t));
	memset(&c, 0, sizeof(c));
	snprintf(c.qid, sizeof(c.qid), "SLOTS0000001");
	compares = 0;
	for (i = 0; i < N_CLAIMS; i++)
		store_pg_txn_claim_put(&t.base, keyhash, hash[i], &c);
	if (compares > 8 * N_CLAIMS)
		fail_msg("key comparisons for %d claims: got %lu, want at most %d", N_CLAIMS,
			 compares, 8 * N_CLAIMS);
	assert_int_equal(t.n_cache, N_CLAIMS);
	for (i = 0; i < N_CLAIMS; i++)
		if (cache_find(&t, keyhash, hash[i]) == NULL)
			fail_msg("claim %d not found in the cache", i);
	if ((run = longest_run(&t)) > N_CLAIMS / 2)
		fail_msg("longest run of taken cache slots: got %zu of %zu, want at most %d",
			 run, t.cap_cache, N_CLAIMS / 2);
	store_pg_segs_free(&t);
	free(t.cache);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_chosen_claims_spread),
	};

	return cmocka_run_group_tests_name("store_pg_slots", tests, NULL, NULL);
}
