/*
 * test_store_pg_keep - the copies a PostgreSQL node keeps of what it just
 * accepted (store/pg/store_pg_keep.c): they are bounded by the memory they
 * take, counted whole (messages of a thousand recipients with long ORCPTs
 * and small bodies are no longer kept once PG_KEEP_BYTES is reached, not
 * kept four thousand at a time because their bodies are small); and a
 * copy hangs on its lease: taken once, forgotten, dropped with its lease
 * or with a lease of another token; and the lease map stays as large as
 * the leases held. No server: the lease map is filled and read directly.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../store/store.h"
#include "../../store/pg/store_pg_int.h"
#include "../../util/buf.h"
#include "test_store_help.h"

#define N_MSGS		200		/* put, each kept */
#define N_RCPTS		1000		/* a message */
#define ORCPT_LEN	200		/* octets of each recipient's ORCPT */

/* wide_msg - message i: a small body, N_RCPTS recipients with long ORCPTs */
static void wide_msg(struct store_msg *m, int i)
{
	char qid[STORE_QID_SIZE];
	size_t r;

	snprintf(qid, sizeof(qid), "K%011d", i);
	msg_new(m, qid, N_RCPTS, 64);
	for (r = 0; r < N_RCPTS; r++) {
		free(m->rcpts[r].orcpt);
		m->rcpts[r].orcpt = xmalloc(ORCPT_LEN + 1);
		memset(m->rcpts[r].orcpt, 'o', ORCPT_LEN);
		m->rcpts[r].orcpt[ORCPT_LEN] = 0;
	}
}

/* node - a node's store, no server: a lease map and a ring */
static void node(struct pg_store *st)
{
	memset(st, 0, sizeof(*st));
	st->node = "n1";
	pthread_mutex_init(&st->lmu, NULL);
}

/* node_free - its copies, then its lease map */
static void node_free(struct pg_store *st)
{
	store_pg_keep_forget(st, NULL);
	free(st->leases);
	pthread_mutex_destroy(&st->lmu);
}

/* copies - how many copies hang on the lease map */
static size_t copies(struct pg_store *st)
{
	size_t i, n = 0;

	for (i = 0; i < st->cap_leases; i++)
		n += st->leases[i].copy != NULL;
	return n;
}

/* put - message qid (one recipient) put under the lease of token, and its copy filed */
static void put(struct pg_store *st, const char *qid, int64_t token)
{
	struct store_msg m;

	msg_new(&m, qid, 1, 64);
	store_pg_lease_set(st, qid, token);
	store_pg_keep_add(st, store_pg_keep_copy(st, &m), token);
	store_msg_free(&m);
}

static void test_keep_bounded_by_memory(void **state)
{
	struct pg_store st;
	struct store_msg m, *k;
	size_t i, kept, wide = (size_t) N_RCPTS * ORCPT_LEN;

	(void) state;
	node(&st);
	for (i = 0; i < N_MSGS; i++) {
		wide_msg(&m, (int) i);
		assert_non_null(k = store_pg_keep_copy(&st, &m));
		store_pg_lease_set(&st, m.qid, 1);
		store_pg_keep_add(&st, k, 1);
		store_msg_free(&m);
	}
	kept = copies(&st);
	/* each copy holds at least its ORCPTs: no more of them than the bound takes */
	if (kept * wide > PG_KEEP_BYTES)
		fail_msg("%zu copies of %zu octets of ORCPTs each kept: %zu MB, over the %u MB bound",
			 kept, wide, kept * wide >> 20, PG_KEEP_BYTES >> 20);
	assert_true(kept > 0);
	assert_true(st.keep_bytes <= PG_KEEP_BYTES);
	node_free(&st);
}

/*
 * a copy is taken once, and only under the lease it was put with; a
 * delivery write's forget, a lease given up and a lease taken anew with
 * another token each drop it, and the memory counted goes with it
 */
static void test_keep_hangs_on_lease(void **state)
{
	struct pg_store st;
	struct store_msg m;

	(void) state;
	node(&st);
	put(&st, "KEEPLEASE001", 7);
	assert_int_equal(store_pg_keep_take(&st, "KEEPLEASE001", &m), 0);
	assert_string_equal(m.qid, "KEEPLEASE001");
	assert_int_equal(m.lease, 7);
	store_msg_free(&m);
	assert_int_equal(store_pg_keep_take(&st, "KEEPLEASE001", &m), STORE_ENOTFOUND);
	assert_int_equal(st.keep_bytes, 0);

	put(&st, "KEEPLEASE002", 8);
	put(&st, "KEEPLEASE003", 9);
	put(&st, "KEEPLEASE004", 10);
	assert_int_equal(copies(&st), 3);
	store_pg_keep_forget(&st, "KEEPLEASE002");	/* a delivery write */
	store_pg_lease_del(&st, "KEEPLEASE003", 9);	/* given up */
	store_pg_lease_set(&st, "KEEPLEASE004", 11);	/* taken anew */
	assert_int_equal(copies(&st), 0);
	assert_int_equal(st.keep_bytes, 0);
	assert_int_equal(store_pg_keep_take(&st, "KEEPLEASE002", &m), STORE_ENOTFOUND);
	assert_int_equal(store_pg_keep_take(&st, "KEEPLEASE004", &m), STORE_ENOTFOUND);

	msg_new(&m, "KEEPLEASE005", 1, 64);
	store_pg_keep_add(&st, store_pg_keep_copy(&st, &m), 12);	/* no lease held: not kept */
	store_msg_free(&m);
	assert_int_equal(copies(&st), 0);
	assert_int_equal(st.keep_bytes, 0);
	node_free(&st);
}

/* a copy kept past PG_KEEP_US is not taken (another node may have written its row): dropped */
static void test_keep_stale_dropped(void **state)
{
	struct pg_store st;
	struct store_msg m;

	(void) state;
	node(&st);
	put(&st, "KEEPSTALE001", 7);
	store_pg_lease_entry(&st, "KEEPSTALE001")->copy_at = 0;	/* filed long ago */
	assert_int_equal(store_pg_keep_take(&st, "KEEPSTALE001", &m), STORE_ENOTFOUND);
	assert_int_equal(copies(&st), 0);
	assert_int_equal(st.keep_bytes, 0);
	node_free(&st);
}

/*
 * the lease map stays as large as the leases held: 100,000 leases taken
 * and given up one at a time leave it at its first size, where each
 * rebuild doubled it (the slots of given-up leases filling it as live
 * ones would), a node's map growing with every lease it ever held
 */
static void test_lease_map_bounded(void **state)
{
	char qid[STORE_QID_SIZE];
	struct pg_store st;
	int i;

	(void) state;
	node(&st);
	for (i = 0; i < 100000; i++) {
		snprintf(qid, sizeof(qid), "LEASE%07d", i);
		store_pg_lease_set(&st, qid, i + 1);
		store_pg_lease_del(&st, qid, i + 1);
	}
	if (st.cap_leases > 256)
		fail_msg("a lease map of %zu slots for %zu leases held", st.cap_leases, st.n_leases);
	node_free(&st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_keep_bounded_by_memory),
		cmocka_unit_test(test_keep_hangs_on_lease),
		cmocka_unit_test(test_keep_stale_dropped),
		cmocka_unit_test(test_lease_map_bounded),
	};

	return cmocka_run_group_tests_name("store_pg_keep", tests, NULL, NULL);
}
