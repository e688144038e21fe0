/*
 * NAME
 *	clock 3
 * SUMMARY
 *	the wall clock as the store keeps time
 */
#include <stddef.h>
#include <stdio.h>
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

/* clock_ts - us microseconds (either clock) as a struct timespec, for a timed wait */
struct timespec clock_ts(int64_t us)
{
	return (struct timespec) { .tv_sec = us / 1000000, .tv_nsec = us % 1000000 * 1000 };
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

/*
 * clock_date - an RFC 5322 date-time in UTC, for the Received header and
 * a bounce's Date: and Arrival-Date:. The names are written here, not by
 * strftime(), so that no locale can change them. The day has two digits,
 * as Postfix's mail_date() documents it ("Mon, 09 Dec 1996"): each FWS a
 * single space, as RFC 5322 section 3.3 recommends. A time gmtime_r()
 * cannot give is written as the epoch.
 */
const char *clock_date(char *out, size_t len, int64_t us)
{
	static const char *const days[] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" };
	static const char *const months[] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
		"Jul", "Aug", "Sep", "Oct", "Nov", "Dec"
	};
	time_t t = (time_t) (us / 1000000);
	struct tm tm;

	if (gmtime_r(&t, &tm) == NULL) {
		t = 0;
		gmtime_r(&t, &tm);
	}
	snprintf(out, len, "%s, %02d %s %d %02d:%02d:%02d +0000", days[tm.tm_wday], tm.tm_mday,
		 months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
	return out;
}

/* clock_mono_us - CLOCK_MONOTONIC in microseconds */
int64_t clock_mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
