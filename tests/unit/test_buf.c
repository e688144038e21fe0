/*
 * test_buf - util/buf.c's growth: buf_reserve doubles from 256;
 * buf_reserve_max doubles too but stops at its bound while that is
 * enough, and goes past it only by what one reservation needs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "../../util/buf.h"

struct reserve_case {
	size_t  len, extra, max;	/* max SIZE_MAX: buf_reserve */
	size_t  cap;			/* want */
};

static const struct reserve_case reserve_cases[] = {
	{ 0, 10, SIZE_MAX, 256 },
	{ 0, 16384, SIZE_MAX, 32768 },	/* one record: doubled past it */
	{ 0, 16384, 16646, 16646 },	/* capped at the bound */
	{ 0, 100, 16646, 256 },		/* small stays small */
	{ 8000, 8000, 16646, 16384 },	/* doubling under the bound */
	{ 10000, 8000, 16646, 18001 },	/* past it: what is needed, no more */
	{ 0, 100, 64, 101 },
};

/* test_reserve - the capacity each reservation leaves, from a buffer grown to len */
static void test_reserve(void **state)
{
	size_t  i;

	(void) state;
	for (i = 0; i < sizeof(reserve_cases) / sizeof(reserve_cases[0]); i++) {
		const struct reserve_case *c = &reserve_cases[i];
		struct buf b = BUF_INIT;

		if (c->len) {
			buf_reserve(&b, c->len);
			b.len = c->len;
		}
		buf_reserve_max(&b, c->extra, c->max);
		if (b.cap != c->cap)
			fail_msg("case %zu: len %zu + %zu, max %zu: got cap %zu, want %zu",
				 i, c->len, c->extra, c->max, b.cap, c->cap);
		buf_free(&b);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reserve),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
