/*
 * NAME
 *	deadline 3h
 * SUMMARY
 *	absolute deadlines on the monotonic clock, and waiting for one socket
 * DESCRIPTION
 *	A step-by-step exchange (connect, a few commands, a handshake) gets
 *	one deadline for the whole, not a timeout per step: deadline_in()
 *	makes it, and deadline_wait() polls one descriptor until it is ready
 *	or the deadline passes.
 *
 *	A thread may name, with deadline_stop_on(), a descriptor that ends
 *	its waits early once readable: a stop (delivery threads name theirs,
 *	so that no connect or handshake holds up the daemon's exit).
 */
#ifndef UTIL_DEADLINE_H
#define UTIL_DEADLINE_H

#include <time.h>

/* deadline_in - now plus ms milliseconds (CLOCK_MONOTONIC) */
struct timespec deadline_in(int ms);

/* deadline_wait - poll fd for events until the deadline or a stop: 1 ready, 0 not */
int deadline_wait(int fd, short events, const struct timespec *deadline);

/* deadline_stop_on - this thread's waits end when fd is readable; -1: none */
void deadline_stop_on(int fd);

/* deadline_stop_fd - this thread's stop descriptor, for a poll of its own; -1: none */
int deadline_stop_fd(void);

#endif
