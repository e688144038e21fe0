/*
 * NAME
 *	deadline 3
 * SUMMARY
 *	absolute deadlines on the monotonic clock
 * DESCRIPTION
 *	See deadline.h. The monotonic clock, so that setting the system
 *	time neither cuts a wait short nor stretches it.
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>

#include "clock.h"
#include "deadline.h"

static __thread int stop_fd = -1;	/* deadline_stop_on() */

/* deadline_in - now plus ms milliseconds (CLOCK_MONOTONIC) */
struct timespec deadline_in(int ms)
{
	return clock_ts(clock_mono_us() + (int64_t) ms * 1000);
}

/* deadline_left - milliseconds until the deadline, at least 0 */
static int deadline_left(const struct timespec *deadline)
{
	int64_t ms = ((int64_t) deadline->tv_sec * 1000000 + deadline->tv_nsec / 1000
		      - clock_mono_us()) / 1000;

	return ms < 0 ? 0 : ms > 0x7fffffff ? 0x7fffffff : (int) ms;
}

/* deadline_wait - poll fd for events until the deadline or a stop: 1 ready, 0 not */
int deadline_wait(int fd, short events, const struct timespec *deadline)
{
	struct pollfd p[2] = {
		{ .fd = fd, .events = events },
		{ .fd = stop_fd, .events = POLLIN },	/* a negative fd is left out */
	};
	int n;

	while ((n = poll(p, 2, deadline_left(deadline))) < 0 && errno == EINTR)
		continue;
	return n > 0 && p[0].revents != 0;
}

/* deadline_stop_on - this thread's waits end when fd is readable; -1: none */
void deadline_stop_on(int fd)
{
	stop_fd = fd;
}

/* deadline_stop_fd - this thread's stop descriptor, for a poll of its own; -1: none */
int deadline_stop_fd(void)
{
	return stop_fd;
}
