/*
 * test_deadline - util/deadline.c: a deadline is now plus the milliseconds
 * asked on the monotonic clock, bracketed by two reads of that clock, and
 * deadline_wait() returns at once for a ready descriptor or a stop, and
 * for a silent one not before the deadline.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>
#include <poll.h>
#include <cmocka.h>

#include "../../util/clock.h"
#include "../../util/deadline.h"

/* us - a deadline in monotonic microseconds */
static int64_t us(const struct timespec *t)
{
	return (int64_t) t->tv_sec * 1000000 + t->tv_nsec / 1000;
}

/* each deadline lies between the clock read before and after, plus ms */
static void test_deadline_in(void **state)
{
	static const int ms[] = { 0, 1, 999, 1000, 1001, 1500, 60000, 3600000 };
	struct timespec t;
	int64_t before, after;
	size_t i;

	(void) state;
	for (i = 0; i < sizeof(ms) / sizeof(ms[0]); i++) {
		before = clock_mono_us();
		t = deadline_in(ms[i]);
		after = clock_mono_us();
		if (t.tv_nsec < 0 || t.tv_nsec >= 1000000000)
			fail_msg("deadline_in(%d): tv_nsec %ld: want 0..999999999", ms[i], t.tv_nsec);
		if (us(&t) < before + ms[i] * 1000LL || us(&t) > after + ms[i] * 1000LL)
			fail_msg("deadline_in(%d): got %lld us, want %lld..%lld", ms[i],
				 (long long) us(&t), (long long) (before + ms[i] * 1000LL),
				 (long long) (after + ms[i] * 1000LL));
	}
}

/* a readable pipe is ready at once; a passed deadline on a silent one is not */
static void test_wait_ready_or_passed(void **state)
{
	struct timespec t = deadline_in(60000);
	int p[2];

	(void) state;
	assert_int_equal(pipe(p), 0);
	assert_int_equal(write(p[1], "x", 1), 1);
	if (deadline_wait(p[0], POLLIN, &t) != 1)
		fail_msg("a readable pipe: got not ready, want ready");
	t = deadline_in(0);
	if (deadline_wait(p[1], POLLIN, &t) != 0)
		fail_msg("a silent end past its deadline: got ready, want not");
	close(p[0]);
	close(p[1]);
}

/* a silent descriptor is waited for until the deadline (poll's 1 ms granularity aside) */
static void test_wait_until_deadline(void **state)
{
	struct timespec t = deadline_in(50);
	int64_t now;
	int p[2];

	(void) state;
	assert_int_equal(pipe(p), 0);
	if (deadline_wait(p[0], POLLIN, &t) != 0)
		fail_msg("a silent pipe: got ready, want not");
	now = clock_mono_us();
	if (now < us(&t) - 1000)
		fail_msg("returned %lld us before the deadline, want at most 1000",
			 (long long) (us(&t) - now));
	if (now > us(&t) + 10000000)
		fail_msg("returned %lld us after the deadline, want it near",
			 (long long) (now - us(&t)));
	close(p[0]);
	close(p[1]);
}

/* a stop that is readable ends a wait long before its deadline */
static void test_wait_stopped(void **state)
{
	struct timespec t = deadline_in(60000);
	int p[2], stop[2];

	(void) state;
	assert_int_equal(pipe(p), 0);
	assert_int_equal(pipe(stop), 0);
	assert_int_equal(write(stop[1], "x", 1), 1);
	deadline_stop_on(stop[0]);
	assert_int_equal(deadline_stop_fd(), stop[0]);
	if (deadline_wait(p[0], POLLIN, &t) != 0)
		fail_msg("stopped: got ready, want not");
	if (clock_mono_us() > us(&t) - 50000000)
		fail_msg("stopped: the wait ran to near its deadline");
	deadline_stop_on(-1);
	close(p[0]);
	close(p[1]);
	close(stop[0]);
	close(stop[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_deadline_in),
		cmocka_unit_test(test_wait_ready_or_passed),
		cmocka_unit_test(test_wait_until_deadline),
		cmocka_unit_test(test_wait_stopped),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
