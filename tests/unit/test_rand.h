/*
 * test_rand - seeded pseudo-random numbers for the unit tests: a test
 * calls srand() with its own seed, so that a failure replays
 */
#ifndef TESTS_UNIT_TEST_RAND_H
#define TESTS_UNIT_TEST_RAND_H

#include <stdint.h>
#include <stdlib.h>

/* rand64 - 64 bits of rand() */
static inline uint64_t rand64(void)
{
	uint64_t x = 0;
	int i;

	for (i = 0; i < 4; i++)
		x = x << 16 | (uint64_t) (rand() & 0xffff);
	return x;
}

#endif
