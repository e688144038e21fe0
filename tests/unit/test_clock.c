/*
 * test_clock - util/clock.c's written times: clock_date(), the one RFC 5322
 * date-time that the Received header and a bounce's Date: and
 * Arrival-Date: share (the day in two digits), and
 * clock_iso().
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "../../util/clock.h"

struct date_case {
	int64_t s;			/* Unix seconds */
	const char *want;
};

static const struct date_case date_cases[] = {
	{ 0, "Thu, 01 Jan 1970 00:00:00 +0000" },
	{ 951782400, "Tue, 29 Feb 2000 00:00:00 +0000" },	/* leap day */
	{ 1796428799, "Fri, 04 Dec 2026 23:59:59 +0000" },
	{ 1796480243, "Sat, 05 Dec 2026 14:17:23 +0000" },
	{ 1796807107, "Wed, 09 Dec 2026 09:05:07 +0000" },
	{ 1796860800, "Thu, 10 Dec 2026 00:00:00 +0000" },
};

/* each case, its microseconds ignored; a buffer too short still gets a string */
static void test_date(void **state)
{
	char got[64];
	size_t i;

	(void) state;
	for (i = 0; i < sizeof(date_cases) / sizeof(date_cases[0]); i++) {
		clock_date(got, sizeof(got), date_cases[i].s * 1000000 + 999999);
		if (strcmp(got, date_cases[i].want) != 0)
			fail_msg("clock_date(%lld): got \"%s\", want \"%s\"",
				 (long long) date_cases[i].s, got, date_cases[i].want);
	}
	assert_ptr_equal(clock_date(got, 6, 0), got);
	assert_string_equal(got, "Thu, ");
}

static void test_iso(void **state)
{
	char got[32];

	(void) state;
	assert_string_equal(clock_iso(got, sizeof(got), 1796480243LL * 1000000),
			    "2026-12-05T14:17:23Z");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_date),
		cmocka_unit_test(test_iso),
	};

	return cmocka_run_group_tests_name("clock", tests, NULL, NULL);
}
