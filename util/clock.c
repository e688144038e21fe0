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

/*
 * clock_iso - UTC in ISO 8601 with its Z, as idemrelayctl and every JSON
 * reply write times: the same in every TZ, so two operators (or a log
 * and a ticket) agree
 */
const char *clock_iso(char *out, size_t len, int64_t us)
{
	time_t t = (time_t) (us / 1000000);
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
	return out;
}

/* clock_mono_us - CLOCK_MONOTONIC in microseconds */
int64_t clock_mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
