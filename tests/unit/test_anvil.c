/*
 * test_anvil - per-client connection limits (relay/anvil.c): a table of
 * connection sequences, each step an address, connect or disconnect, and
 * the verdict wanted; and clients a peer chooses spread over the table
 * (test_chosen_clients: every slot it picks is seen through a --wrap of
 * hash_slot, Makefile).
 */
#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "../../relay/anvil.h"

#define BUCKETS		4096		/* anvil.c's ANVIL_BUCKETS */
#define CHAIN_MAX	32		/* 3,000 random keys: some 6 at most */

size_t __real_hash_slot(uint64_t x, size_t cap);
static size_t load[BUCKETS];		/* clients placed in each slot */

/* __wrap_hash_slot - hash_slot, each slot of anvil's table counted */
size_t __wrap_hash_slot(uint64_t x, size_t cap)
{
	size_t b = __real_hash_slot(x, cap);

	if (cap == BUCKETS)
		load[b]++;
	return b;
}

#define MIN	60000000LL

struct step {
	const char *addr;		/* NULL: end of the row */
	int disconnect;			/* close the last connection of addr instead */
	int exempt;
	int64_t at;			/* microseconds */
	enum anvil_verdict want;
};

struct row {
	const char *name;
	int count, rate, prefix;
	struct step steps[12];
};

/* sa_of - a sockaddr for a text address, v4 or v6 */
static socklen_t sa_of(const char *text, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (strchr(text, ':')) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *) ss;

		s6->sin6_family = AF_INET6;
		assert_int_equal(inet_pton(AF_INET6, text, &s6->sin6_addr), 1);
		return sizeof(*s6);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *) ss;

		s4->sin_family = AF_INET;
		assert_int_equal(inet_pton(AF_INET, text, &s4->sin_addr), 1);
		return sizeof(*s4);
	}
}

static void test_limits(void **state)
{
	static const struct row rows[] = {
		{"count", 2, 0, 64, {
			{"10.0.0.1", 0, 0, 0, ANVIL_OK}, {"10.0.0.1", 0, 0, 1, ANVIL_OK},
			{"10.0.0.1", 0, 0, 2, ANVIL_COUNT}, {"10.0.0.2", 0, 0, 3, ANVIL_OK},
			{"10.0.0.1", 1, 0, 4, ANVIL_OK}, {"10.0.0.1", 0, 0, 5, ANVIL_OK},
			{"10.0.0.1", 0, 0, 6, ANVIL_COUNT}, {NULL}}},
		{"exempt clients are never counted", 1, 1, 64, {
			{"127.0.0.1", 0, 1, 0, ANVIL_OK}, {"127.0.0.1", 0, 1, 0, ANVIL_OK},
			{"127.0.0.1", 0, 1, 0, ANVIL_OK}, {"127.0.0.1", 0, 0, 0, ANVIL_OK},
			{"127.0.0.1", 0, 0, 0, ANVIL_COUNT}, {NULL}}},
		{"rate a minute", 0, 2, 64, {
			{"10.0.0.1", 0, 0, 0, ANVIL_OK}, {"10.0.0.1", 1, 0, 1, ANVIL_OK},
			{"10.0.0.1", 0, 0, 2, ANVIL_OK}, {"10.0.0.1", 1, 0, 3, ANVIL_OK},
			{"10.0.0.1", 0, 0, 4, ANVIL_RATE}, {"10.0.0.1", 0, 0, MIN - 1, ANVIL_RATE},
			{"10.0.0.1", 0, 0, MIN, ANVIL_OK}, {NULL}}},
		{"an IPv6 client is its /64", 2, 0, 64, {
			{"2001:db8::1", 0, 0, 0, ANVIL_OK}, {"2001:db8::ffff:2", 0, 0, 0, ANVIL_OK},
			{"2001:db8:0:0:8000::3", 0, 0, 0, ANVIL_COUNT},
			{"2001:db8:0:1::1", 0, 0, 0, ANVIL_OK}, {NULL}}},
		{"a /48 prefix", 1, 0, 48, {
			{"2001:db8:0:1::1", 0, 0, 0, ANVIL_OK}, {"2001:db8:0:2::1", 0, 0, 0, ANVIL_COUNT},
			{"2001:db8:1::1", 0, 0, 0, ANVIL_OK}, {NULL}}},
		{"a mapped IPv4 address is that address", 1, 0, 64, {
			{"::ffff:10.0.0.1", 0, 0, 0, ANVIL_OK}, {"::ffff:10.0.0.2", 0, 0, 0, ANVIL_OK},
			{"10.0.0.1", 0, 0, 0, ANVIL_COUNT}, {NULL}}},
		{"off", 0, 0, 64, {
			{"10.0.0.1", 0, 0, 0, ANVIL_OK}, {"10.0.0.1", 0, 0, 0, ANVIL_OK}, {NULL}}},
	};
	struct anvil_client *open[12];
	struct sockaddr_storage ss;
	size_t r, i, k;

	(void) state;
	for (r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		struct anvil *a = anvil_new();

		anvil_set(a, rows[r].count, rows[r].rate, 0, rows[r].prefix);
		for (i = 0; rows[r].steps[i].addr; i++) {
			const struct step *st = &rows[r].steps[i];
			struct anvil_client *cl = NULL;
			enum anvil_verdict got;

			sa_of(st->addr, &ss);
			if (st->disconnect) {
				for (k = i; k-- > 0;)
					if (open[k] && strcmp(rows[r].steps[k].addr, st->addr) == 0)
						break;
				anvil_disconnect(a, open[k]);
				open[k] = open[i] = NULL;
				continue;
			}
			got = anvil_connect(a, (struct sockaddr *) &ss, st->addr, st->exempt, st->at,
					    &cl);
			if (got != st->want)
				print_error("%s, step %zu (%s): got %d, want %d\n", rows[r].name, i,
					    st->addr, (int) got, (int) st->want);
			assert_int_equal(got, st->want);
			assert_true(got == ANVIL_OK || cl == NULL);
			open[i] = cl;
		}
		anvil_free(a);
	}
}

/*
 * the clients of one /16, and of one IPv6 /48 at prefix 128 whose two
 * halves XOR to one value (ed96749 hashed w[0] ^ w[1]: all in one chain),
 * are spread over the table
 */
static void test_chosen_clients(void **state)
{
	struct sockaddr_storage ss;
	struct anvil_client *cl;
	char addr[64];
	size_t i, b, most;
	int v6;

	(void) state;
	for (v6 = 0; v6 <= 1; v6++) {
		struct anvil *a = anvil_new();

		anvil_set(a, 50, 0, 0, 128);
		memset(load, 0, sizeof(load));
		for (i = 0; i < 3000; i++) {
			if (v6)
				snprintf(addr, sizeof(addr), "2001:db8:1:%zx:2001:db8:1:%zx", i, i);
			else
				snprintf(addr, sizeof(addr), "10.0.%zu.%zu", i / 256, i % 256);
			sa_of(addr, &ss);
			assert_int_equal(anvil_connect(a, (struct sockaddr *) &ss, addr, 0, 0, &cl),
					 ANVIL_OK);
		}
		assert_int_equal(anvil_clients(a), 3000);
		for (b = most = 0; b < BUCKETS; b++)
			most = load[b] > most ? load[b] : most;
		if (most > CHAIN_MAX)
			print_error("%s: %zu clients in one slot\n", v6 ? "IPv6" : "IPv4", most);
		assert_true(most <= CHAIN_MAX);
		anvil_free(a);
	}
}

/* the top client, and a sweep that forgets only idle ones past their minute */
static void test_top_and_sweep(void **state)
{
	struct anvil *a = anvil_new();
	struct anvil_client *c1, *c2, *c3;
	struct sockaddr_storage ss;

	(void) state;
	anvil_set(a, 50, 0, 0, 64);
	assert_null(anvil_top(a));
	sa_of("10.0.0.1", &ss);
	assert_int_equal(anvil_connect(a, (struct sockaddr *) &ss, "a", 0, 0, &c1), ANVIL_OK);
	sa_of("10.0.0.2", &ss);
	assert_int_equal(anvil_connect(a, (struct sockaddr *) &ss, "b", 0, 0, &c2), ANVIL_OK);
	assert_int_equal(anvil_connect(a, (struct sockaddr *) &ss, "b", 0, 0, &c3), ANVIL_OK);
	assert_ptr_equal(c2, c3);
	assert_ptr_equal(anvil_top(a), c2);
	assert_int_equal(anvil_count(c2), 2);
	assert_int_equal(anvil_clients(a), 2);
	anvil_disconnect(a, c1);
	anvil_sweep(a, MIN - 1);
	assert_int_equal(anvil_clients(a), 2);		/* its minute is not over */
	anvil_sweep(a, MIN);
	assert_int_equal(anvil_clients(a), 1);		/* c1 is gone; c2 has connections */
	anvil_disconnect(a, c2);
	anvil_disconnect(a, c3);
	anvil_disconnect(a, c3);			/* one too many: ignored */
	assert_null(anvil_top(a));
	anvil_sweep(a, MIN);
	assert_int_equal(anvil_clients(a), 0);
	anvil_free(a);
}

/* AUTHs a minute per client: counted apart from connections, exempt never */
static void test_auth_rate(void **state)
{
	struct anvil *a = anvil_new();
	struct anvil_client *cl;
	struct sockaddr_storage ss;

	(void) state;
	anvil_set(a, 0, 0, 2, 64);
	sa_of("10.0.0.1", &ss);
	assert_int_equal(anvil_connect(a, (struct sockaddr *) &ss, "a", 0, 0, &cl), ANVIL_OK);
	assert_non_null(cl);
	assert_int_equal(anvil_auth_rate(a, cl, "a", 0), 1);
	assert_int_equal(anvil_auth_rate(a, cl, "a", 1), 1);
	assert_int_equal(anvil_auth_rate(a, cl, "a", 2), 0);
	assert_int_equal(anvil_auth_rate(a, cl, "a", MIN - 1), 0);
	assert_int_equal(anvil_auth_rate(a, cl, "a", MIN), 1);	/* a new minute */
	assert_int_equal(anvil_auth_rate(a, NULL, "x", MIN), 1);	/* exempt */
	anvil_disconnect(a, cl);
	anvil_sweep(a, MIN + 1);
	assert_int_equal(anvil_clients(a), 1);		/* its AUTH minute is not over */
	anvil_sweep(a, 2 * MIN);
	assert_int_equal(anvil_clients(a), 0);
	anvil_free(a);
}

/*
 * With every limit off, a client is still counted: its password checks go
 * one at a time (idemrelay.conf(5), auth), and the one holding the most
 * connections is still the one to give one up at limits.connections
 */
static void test_limits_off(void **state)
{
	struct anvil *a = anvil_new();
	struct anvil_client *c1, *c2;
	struct anvil_wait w1, w2;
	struct sockaddr_storage ss;

	(void) state;
	anvil_set(a, 0, 0, 0, 64);
	sa_of("10.0.0.1", &ss);
	assert_int_equal(anvil_connect(a, (struct sockaddr *) &ss, "a", 0, 0, &c1), ANVIL_OK);
	assert_int_equal(anvil_connect(a, (struct sockaddr *) &ss, "a", 0, 0, &c2), ANVIL_OK);
	assert_non_null(c1);
	assert_ptr_equal(c1, c2);
	assert_ptr_equal(anvil_top(a), c1);
	assert_int_equal(anvil_auth_begin(c1, &w1), 1);
	assert_int_equal(anvil_auth_begin(c2, &w2), 0);	/* behind the first */
	assert_ptr_equal(anvil_auth_end(c1), &w2);
	assert_null(anvil_auth_end(c2));
	anvil_disconnect(a, c1);
	anvil_disconnect(a, c2);
	anvil_sweep(a, MIN);
	assert_int_equal(anvil_clients(a), 0);
	anvil_free(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_chosen_clients),
		cmocka_unit_test(test_top_and_sweep),
		cmocka_unit_test(test_auth_rate),
		cmocka_unit_test(test_limits_off),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
