/*
 * test_budget - relay/budget.c's malloc thresholds: a message's buffer
 * freed and allocated again is not faulted in anew each time (the trim
 * threshold), and a buffer past the mmap threshold goes back to the
 * system on free.
 */
#include <malloc.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <cmocka.h>

#include "../../relay/budget.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN	1	/* ASan's allocator, not glibc's: the thresholds are not its */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN	1
#endif
#endif

#define MSG_BUF		(200 * 1024)	/* a 100 KB message's buffer, doubled */
#define ROUNDS		200

/* faults - minor page faults of the process so far */
static long faults(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_minflt;
}

/* touch - fill p, which the compiler must take for used (else it drops malloc and free) */
static void touch(char *p, size_t n)
{
	memset(p, 1, n);
	__asm__ volatile ("" : : "r" (p) : "memory");
}

/* rounds - a message buffer's life, ROUNDS times (arg: its faults, out) */
static void *rounds(void *arg)
{
	long before;
	char *p;
	int i;

	p = malloc(MSG_BUF);
	touch(p, MSG_BUF);
	free(p);
	before = faults();
	for (i = 0; i < ROUNDS; i++) {
		p = malloc(MSG_BUF);
		touch(p, MSG_BUF);
		free(p);
	}
	*(long *) arg = faults() - before;
	return NULL;
}

/*
 * a buffer below the mmap threshold, freed and allocated again on a
 * thread of its own (an arena of its own, as the writer's and the
 * delivery threads' are): its pages stay
 */
static void test_buffer_reused(void **state)
{
	pthread_t t;
	long n = 0;

	(void) state;
	budget_setup();
#ifdef UNDER_ASAN
	return;			/* budget_setup() ran; what follows is glibc's */
#endif
	assert_int_equal(pthread_create(&t, NULL, rounds, &n), 0);
	pthread_join(t, NULL);
	/* given back at each free, it was about MSG_BUF / 4096 = 50 faults a round */
	if (n > ROUNDS)
		fail_msg("%ld page faults in %d rounds of a %d KB buffer: its pages were "
			 "given back at each free", n, ROUNDS, MSG_BUF / 1024);
}

/* a buffer past the mmap threshold is mmapped, after a larger one too: its free gives it back */
static void test_large_given_back(void **state)
{
	struct mallinfo2 a, b;
	char *p;

	(void) state;
	budget_setup();
#ifdef UNDER_ASAN
	return;
#endif
	p = malloc(4 << 20);		/* glibc's sliding threshold would rise past it here */
	touch(p, 4 << 20);
	free(p);
	a = mallinfo2();
	p = malloc(3 << 20);		/* below it, still past ours */
	touch(p, 3 << 20);
	b = mallinfo2();
	if (b.hblkhd < a.hblkhd + (3 << 20))
		fail_msg("a 3 MB buffer after a 4 MB one was not mmapped (%zu bytes mmapped, "
			 "%zu before)", b.hblkhd, a.hblkhd);
	free(p);
	b = mallinfo2();
	if (b.hblkhd != a.hblkhd)
		fail_msg("a 3 MB buffer's free kept %zu bytes", b.hblkhd - a.hblkhd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_buffer_reused),
		cmocka_unit_test(test_large_given_back),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
