/*
 * test_store_pg_keep - the copies a PostgreSQL node keeps of what it just
 * accepted (store/pg/store_pg_keep.c) are bounded by the memory they take,
 * counted whole: messages of a thousand recipients with long ORCPTs and
 * small bodies are dropped oldest first once PG_KEEP_BYTES is reached,
 * not kept four thousand at a time because their bodies are small. No
 * server: the ring is filled and read directly.
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

static void test_keep_bounded_by_memory(void **state)
{
	struct pg_store st;
	struct store_msg m, *k;
	size_t i, kept = 0, wide = (size_t) N_RCPTS * ORCPT_LEN;

	(void) state;
	memset(&st, 0, sizeof(st));
	st.node = "n1";
	store_pg_keep_init(&st);
	for (i = 0; i < N_MSGS; i++) {
		wide_msg(&m, (int) i);
		assert_non_null(k = store_pg_keep_copy(&st, &m));
		store_pg_keep_add(&st, k, 1);
		store_msg_free(&m);
	}
	for (i = 0; i < st.n_keep; i++)
		kept += st.keep[(st.keep_head + i) % PG_KEEP_MAX].m != NULL;
	/* each copy holds at least its ORCPTs: no more of them than the bound takes */
	if (kept * wide > PG_KEEP_BYTES)
		fail_msg("%zu copies of %zu octets of ORCPTs each kept: %zu MB, over the %u MB bound",
			 kept, wide, kept * wide >> 20, PG_KEEP_BYTES >> 20);
	assert_true(kept > 0);
	assert_true(st.keep_bytes <= PG_KEEP_BYTES);
	store_pg_keep_free(&st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_keep_bounded_by_memory),
	};

	return cmocka_run_group_tests_name("store_pg_keep", tests, NULL, NULL);
}
