/*
 * NAME
 *	clock 3h
 * SUMMARY
 *	the wall clock as the store keeps time
 * DESCRIPTION
 *	clock_us() is the wall clock in Unix microseconds: acceptance and
 *	expiry times, next attempts, stories, QIDs. One definition, so that
 *	every part of the relay reads time the same way. clock_mono_us()
 *	is for intervals inside the process, which a clock step must not
 *	stretch or cut. clock_iso() and clock_date() write a time for
 *	people and programs, the second as a message header dates it.
 */
#ifndef UTIL_CLOCK_H
#define UTIL_CLOCK_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* clock_us - the wall clock in Unix microseconds */
int64_t clock_us(void);

/* clock_mono_us - CLOCK_MONOTONIC in microseconds */
int64_t clock_mono_us(void);
/* clock_ts - us microseconds (either clock) as a struct timespec, for a timed wait */
struct timespec clock_ts(int64_t us);

/* clock_iso - us as UTC in ISO 8601 with its Z ("2026-12-05T08:40:00Z"); out */
const char *clock_iso(char *out, size_t len, int64_t us);
/*
 * clock_date - us as an RFC 5322 date-time in UTC, the day in two digits
 * ("Sat, 05 Dec 2026 08:40:00 +0000"), whatever the locale; out
 */
const char *clock_date(char *out, size_t len, int64_t us);

#endif
