/*
 * NAME
 *	clock 3
 * SUMMARY
 *	the wall clock as the store keeps time
 */
#include <stddef.h>
#include <sys/time.h>
#include <time.h>

#include "clock.h"

/* clock_us - the wall clock in Unix microseconds */
int64_t clock_us(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (int64_t) tv.tv_sec * 1000000 + tv.tv_usec;
}

/* clock_mono_us - CLOCK_MONOTONIC in microseconds */
int64_t clock_mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
