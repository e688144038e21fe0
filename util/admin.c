/*
 * NAME
 *	admin 3
 * SUMMARY
 *	a small request/response listener on a thread of its own
 * DESCRIPTION
 *	See admin.h. One poll() over the stop event, the listener (left out
 *	while ADMIN_CLIENTS connections are open, so that more wait in the
 *	kernel's backlog instead of being refused) and every connection,
 *	each non-blocking and in one of two phases: reading its request, or
 *	writing its response. The poll timeout is the nearest deadline or
 *	tick, so a silent client costs nothing until its time is up.
 *
 *	The deadline is the whole budget for the request, counted from the
 *	accept, not from the last byte: a client trickling a byte a second
 *	would otherwise keep a connection for ever. The response gets a
 *	budget as long again.
 * DIAGNOSTICS
 *	NAME: poll: ... and NAME: accept: ... as warnings; the loop goes on
 *	after an accept failure and stops after a poll failure.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "admin.h"
#include "clock.h"
#include "log.h"

struct admin_client {
	int fd;				/* owned */
	int writing;			/* 0: reading the request; 1: writing out */
	int64_t deadline;		/* monotonic us: the end of this phase */
	size_t len;			/* of req */
	char req[ADMIN_REQUEST_MAX];
	struct buf out;			/* owned: the response */
	size_t sent;			/* bytes of out already written */
};

struct admin {
	pthread_t thread;
	int lfd;			/* owned, or -1 */
	int stopfd;			/* owned eventfd */
	int endfd;			/* owned eventfd: the pulser's stop, once the thread is joined */
	struct admin_ops ops;
	struct admin_client *c[ADMIN_CLIENTS];	/* owned; the first n are open */
	size_t n;
	pthread_t pulser;		/* with ops.pulse: the blank lines' thread */
	pthread_mutex_t lock;		/* serving, which the pulser reads */
	int serving;			/* the connection being served, or -1 */
};

/*
 * pulse - a blank line to the connection being served, fd from now on
 * (-1: none; PULSE_SAME: the same): it goes before the answer, which the
 * admin thread writes once it has set none under the lock
 */
#define PULSE_SAME	(-2)
static void pulse(struct admin *a, int fd)
{
	pthread_mutex_lock(&a->lock);
	if (fd != PULSE_SAME)
		a->serving = fd;
	if (a->serving >= 0)
		(void) send(a->serving, "\n", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
	pthread_mutex_unlock(&a->lock);
}

/*
 * pulser - the thread: pulse() every ADMIN_PULSE_MS until the admin thread
 * has ended (a stop while a request is served waits for its answer)
 */
static void *pulser(void *arg)
{
	struct admin *a = arg;
	struct pollfd p = { a->endfd, POLLIN, 0 };

	while (poll(&p, 1, ADMIN_PULSE_MS) <= 0)
		pulse(a, PULSE_SAME);
	return NULL;
}

/* client_close - close and forget connection i (the last takes its place) */
static void client_close(struct admin *a, size_t i)
{
	struct admin_client *c = a->c[i];

	close(c->fd);
	buf_free(&c->out);
	free(c);
	a->c[i] = a->c[--a->n];
}

/*
 * client_serve - answer the request (NUL-terminated), or all of it there
 * will be, unless its client has gone: it gave up on it
 */
static void client_serve(struct admin *a, struct admin_client *c, int cut)
{
	struct pollfd gone = { c->fd, 0, 0 };

	if (poll(&gone, 1, 0) != 1 || !(gone.revents & POLLHUP)) {
		if (a->ops.pulse)
			pulse(a, c->fd);
		a->ops.serve(a->ops.arg, c->fd, c->req, c->len, cut, &c->out);
		if (a->ops.pulse)
			pulse(a, -1);
	}
	c->writing = 1;
	c->deadline = clock_mono_us() + ADMIN_DEADLINE_MS * 1000LL;
}

/* client_read - take what the client sent; 0, or -1 when it should close */
static int client_read(struct admin *a, struct admin_client *c)
{
	ssize_t n;

	n = read(c->fd, c->req + c->len, sizeof(c->req) - 1 - c->len);
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -1;
	if (n == 0) {
		client_serve(a, c, 0);
		return 0;
	}
	c->len += (size_t) n;
	c->req[c->len] = 0;
	if (a->ops.complete(c->req, c->len))
		client_serve(a, c, 0);
	else if (c->len + 1 >= sizeof(c->req))
		client_serve(a, c, 1);
	return 0;
}

/* client_write - write what the client will take; 0, or -1 when done or failed */
static int client_write(struct admin_client *c)
{
	ssize_t w;

	while (c->sent < c->out.len) {
		w = send(c->fd, c->out.data + c->sent, c->out.len - c->sent, MSG_NOSIGNAL);
		if (w < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -1;
		c->sent += (size_t) w;
	}
	return -1;			/* all of it: close */
}

/* accept_some - take waiting connections while there is room */
static void accept_some(struct admin *a)
{
	struct admin_client *c;
	int fd;

	while (a->n < ADMIN_CLIENTS) {
		fd = accept4(a->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
				msg_warn("%s: accept: %m", a->ops.name);
			return;
		}
		c = xcalloc(1, sizeof(*c));
		c->fd = fd;
		c->deadline = clock_mono_us() + ADMIN_DEADLINE_MS * 1000LL;
		a->c[a->n++] = c;
	}
}

/* poll_timeout - milliseconds to the nearest deadline or tick; -1: none */
static int poll_timeout(const struct admin *a, int64_t now, int64_t next_tick)
{
	int64_t until = a->ops.tick ? next_tick : INT64_MAX;
	size_t i;

	for (i = 0; i < a->n; i++)
		if (a->c[i]->deadline < until)
			until = a->c[i]->deadline;
	if (until == INT64_MAX)
		return -1;
	return until <= now ? 0 : (int) ((until - now + 999) / 1000);
}

/* admin_main - the listener thread */
static void *admin_main(void *arg)
{
	struct admin *a = arg;
	struct pollfd p[2 + ADMIN_CLIENTS];
	int64_t now = clock_mono_us(), next_tick = now + a->ops.tick_ms * 1000LL;
	size_t i, np, nc;
	int listening;

	for (;;) {
		p[0] = (struct pollfd) { a->stopfd, POLLIN, 0 };
		listening = a->lfd >= 0 && a->n < ADMIN_CLIENTS;
		p[1] = (struct pollfd) { listening ? a->lfd : -1, POLLIN, 0 };
		nc = a->n;
		for (i = 0; i < nc; i++)
			p[2 + i] = (struct pollfd) { a->c[i]->fd,
				a->c[i]->writing ? POLLOUT : POLLIN, 0 };
		np = 2 + nc;
		if (poll(p, np, poll_timeout(a, now, next_tick)) < 0 && errno != EINTR) {
			msg_warn("%s: poll: %m", a->ops.name);
			break;
		}
		if (p[0].revents)
			break;
		now = clock_mono_us();
		/* walk down, so that a close (the last moves to i) skips no one */
		for (i = nc; i-- > 0;) {
			struct admin_client *c = a->c[i];
			int rc = 0;

			if (p[2 + i].revents & (POLLIN | POLLHUP | POLLERR)) {
				if (!c->writing)
					rc = client_read(a, c);
			}
			if (rc == 0 && c->writing && (p[2 + i].revents || c->sent == 0))
				rc = client_write(c);
			if (rc == 0 && now >= c->deadline) {
				if (c->writing)
					rc = -1;	/* the response was not taken in time */
				else {
					client_serve(a, c, 1);
					rc = client_write(c);
				}
			}
			if (rc < 0)
				client_close(a, i);
		}
		if (p[1].revents & POLLIN)
			accept_some(a);
		if (a->ops.tick && now >= next_tick) {
			a->ops.tick(a->ops.arg);
			next_tick = now + a->ops.tick_ms * 1000LL;
		}
	}
	while (a->n > 0)
		client_close(a, a->n - 1);
	return NULL;
}

/* admin_start - the thread, serving lfd if it is set */
struct admin *admin_start(int lfd, const struct admin_ops *ops)
{
	struct admin *a = xcalloc(1, sizeof(*a));
	int err;

	a->lfd = lfd;
	a->ops = *ops;
	if ((a->stopfd = eventfd(0, EFD_CLOEXEC)) < 0 || (a->endfd = eventfd(0, EFD_CLOEXEC)) < 0)
		msg_fatal("%s: eventfd: %m", ops->name);
	a->serving = -1;
	pthread_mutex_init(&a->lock, NULL);
	if ((err = pthread_create(&a->thread, NULL, admin_main, a)) != 0
	    || (ops->pulse && (err = pthread_create(&a->pulser, NULL, pulser, a)) != 0))
		msg_fatal("%s: cannot start a thread: %s", ops->name, strerror(err));
	return a;
}

/* admin_stop - stop the thread, join it, close everything */
void admin_stop(struct admin *a)
{
	uint64_t one = 1;

	if (a == NULL)
		return;
	(void) !write(a->stopfd, &one, sizeof(one));
	pthread_join(a->thread, NULL);
	(void) !write(a->endfd, &one, sizeof(one));
	if (a->ops.pulse)
		pthread_join(a->pulser, NULL);
	pthread_mutex_destroy(&a->lock);
	if (a->lfd >= 0)
		close(a->lfd);
	close(a->stopfd);
	close(a->endfd);
	free(a);
}
