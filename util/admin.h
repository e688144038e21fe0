/*
 * NAME
 *	admin 3h
 * SUMMARY
 *	a small request/response listener on a thread of its own
 * DESCRIPTION
 *	The pattern both admin listeners (the control socket and /metrics)
 *	share: one thread polls a listening socket, a stop event, and up to
 *	ADMIN_CLIENTS connections at once. Each connection has one request
 *	and one response, and ADMIN_DEADLINE_MS in all for both, counted
 *	from its accept: a client that sends a byte now and then, or never
 *	reads, is cut off at the deadline, and never stops the others.
 *
 *	ops->complete says when the bytes read so far are a whole request;
 *	ops->serve then answers it into a buffer (on the admin thread: it
 *	must be quick), which the loop writes without blocking. A request
 *	the client ended by closing its side is served as it came; one cut
 *	short (by the deadline or by ADMIN_REQUEST_MAX) is served too, with
 *	cut set, so that each listener decides what a partial request means.
 *	A response that was not taken by the deadline is dropped with its
 *	connection. ops->tick, if set, runs about every ops->tick_ms,
 *	whether or not clients come.
 *
 *	With ops->pulse, a connection gets a blank line as its request's
 *	serve begins and one every ADMIN_PULSE_MS while it runs, from a
 *	thread of their own, until the answer, a stop (admin_stop) too: a
 *	client can tell a daemon that is at it (an
 *	action over a long queue) from one that is stopped or hung, or has
 *	not taken its request yet. A request whose client has gone (closed,
 *	not only its side) by the time it would be served is not: no one
 *	reads the answer, and the client gave up on what it asked.
 */
#ifndef UTIL_ADMIN_H
#define UTIL_ADMIN_H

#include <stddef.h>

#include "buf.h"

#define ADMIN_CLIENTS		16	/* connections served at once; more wait in the backlog */
#define ADMIN_DEADLINE_MS	2000	/* per connection, request and response together */
#define ADMIN_REQUEST_MAX	4096	/* bytes of one request */
#define ADMIN_PULSE_MS		1000	/* with ops->pulse: a blank line so often while serving */

struct admin_ops {
	const char *name;		/* in log lines */
	int (*complete) (const char *req, size_t len);	/* req is NUL-terminated */
	void (*serve) (void *arg, int fd, char *req, size_t len, int cut,
		       struct buf *out);	/* req NUL-terminated; out empty: close */
	void (*tick) (void *arg);	/* NULL: none */
	int tick_ms;
	int pulse;			/* blank lines while serving (see above) */
	void *arg;
};

struct admin;

/* admin_start - serve lfd (taken; -1: ticks only) on a new thread; fatal if it cannot start */
struct admin *admin_start(int lfd, const struct admin_ops *ops);
/* admin_stop - stop and join; open connections are closed unanswered; NULL-safe */
void admin_stop(struct admin *a);

#endif
