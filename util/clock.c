/*
 * NAME
 *	clock 3
 * SUMMARY
 *	the wall clock as the store keeps time
 */
#include <stddef.h>
#include <sys/time.h>

#include "clock.h"

/* clock_us - the wall clock in Unix microseconds */
int64_t clock_us(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (int64_t) tv.tv_sec * 1000000 + tv.tv_usec;
}
