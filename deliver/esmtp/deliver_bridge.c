/*
 * NAME
 *	deliver_bridge 3
 * SUMMARY
 *	the loopback bridge between libesmtp and the upstream
 * DESCRIPTION
 *	See deliver_bridge.h for what it is. Notes on why:
 *
 *	Every connection goes through it, plain ones too, for three reasons.
 *	libesmtp's header edits are undone on the way (deliver_filter.h),
 *	which needs the bytes libesmtp writes. The TCP connect gets the
 *	timeout libesmtp lacks, and any address, IPv6 included (libesmtp
 *	1.1.0 takes no IPv6 literal). And libESMTP's STARTTLS is not used
 *	(tls/tls_client.c): the pre-TLS part of STARTTLS (deliver_bridge_starttls.c)
 *	and the handshake are done here, in the delivery thread, so each failure
 *	is known with its reason before libesmtp starts.
 *
 *	Then a thread copies between libesmtp's connection and the
 *	upstream, both non-blocking transports (io.h: plain, or TLS), in one
 *	loop for both kinds: each transport says what it waits for.
 *
 *	libesmtp is told a loopback address that nothing can listen on:
 *	127.0.0.1 port 0 (a bind to port 0 takes an ephemeral port, so no
 *	socket ever has it), which needs no reserving. Its connect() never
 *	gets there: connect() (deliver_connect.c)
 *	hands it to deliver_bridge_attach(), which turns libesmtp's socket
 *	into one end of an AF_UNIX socketpair and starts the thread of the
 *	bridge that this thread opened last on the other end. libesmtp
 *	connects on the thread that called deliver_bridge_open(), so a
 *	thread-local pointer is all the bookkeeping; a connect() from
 *	anywhere else, another process included, is refused by the kernel.
 *	One TCP connection per delivery, not two (measured in BENCHMARKS.md),
 *	no listener, no accept.
 *
 *	When the bridge could go is in deliver_bridge.h: a libESMTP release
 *	with the STARTTLS fix and a way to send a message untouched (or an
 *	MSA header policy of ours), and a new home for the watch.
 *
 *	When the filter refuses what libesmtp writes, the thread hangs up on
 *	both sides at once, so nothing after the refused bytes reaches the
 *	upstream, and says why (deliver_bridge_end).
 *
 *	libesmtp reads the server through the gate (deliver_gate.h): whole
 *	replies that libESMTP 1.1.0 can read, and only those owed. When the
 *	server side is over (closed, reset, a write failed, a reply's
 *	deadline passed, a reply the gate refused, delivery stopping, or the
 *	session cut by the delivery thread: deliver_bridge_cut) the
 *	bridge does not hang up on libesmtp then: with replies to pipelined
 *	commands owed, a hang-up crashes libESMTP 1.1.0 (issue 25; the
 *	mechanism is in deliver_gate.h). It stops reading and writing the
 *	upstream and lets the gate answer each command libesmtp goes on
 *	writing, until libesmtp has quit, and hangs up on it only where it
 *	owes just the reply to a final dot, or is writing the content that
 *	such a reply follows (a reply the gate never makes up).
 *
 *	Whether a final dot reached the server is the kernel's to say, not
 *	libesmtp's: a small message and its dot are written into the socket
 *	buffers at once, so a server that resets the connection after 1,000
 *	bytes leaves libesmtp with no write error, just a lost connection
 *	after the dot. So the bridge writes each message's content up to and
 *	including its final dot (found by the filter) as a write of its own,
 *	and its watch (deliver_watch.h) notes where in the TCP stream that
 *	ended and, when the upstream side ends, whether the peer's TCP had
 *	acknowledged that far. The watch also keeps each reply's deadline,
 *	which no byte of a trickled reply moves; when one passes, the bridge
 *	hangs up on both sides and says so (deliver_bridge_ended).
 * DIAGNOSTICS
 *	Failures to set up are returned as text for the caller's log line
 *	and deferral reason; another process's connect() is refused, unlogged.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "../../util/buf.h"
#include "../../util/deadline.h"
#include "../../util/log.h"
#include "deliver_bridge.h"
#include "deliver_bridge_impl.h"
#include "deliver_filter.h"
#include "deliver_gate.h"
#include "../../tls/tls_client.h"
#include "deliver_watch.h"
#include "../../tls/io.h"

#define BRIDGE_BUF	16384

/*
 * The bridge this thread opened last, until libesmtp's connect() takes it:
 * libesmtp connects on the thread that called deliver_bridge_open(), so
 * nothing else needs to know which bridge a connect() is for.
 */
static __thread struct deliver_bridge *current;

/*
 * bridge_connect - non-blocking TCP connect within the deadline; fd or -1.
 * TCP_NODELAY: Nagle would hold the last small segment of a message's
 * content, its final dot, behind an unacknowledged one until the
 * upstream's delayed ACK, 40 ms later, for every message (BENCHMARKS.md);
 * SMTP goes in turns, so Nagle buys nothing here.
 */
static int bridge_connect(const struct sockaddr *sa, socklen_t salen,
			  const struct timespec *deadline, char *why, size_t whylen)
{
	int fd, one = 1, err = 0;
	socklen_t len = sizeof(err);

	if ((fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0) {
		snprintf(why, whylen, "socket: %s", strerror(errno));
		return -1;
	}
	(void) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, sa, salen) < 0) {
		if (errno != EINPROGRESS)
			err = errno;
		else if (!deadline_wait(fd, POLLOUT, deadline))
			err = ETIMEDOUT;
		else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
			err = errno;
	}
	if (err) {
		snprintf(why, whylen, "connect: %s", strerror(err));
		close(fd);
		return -1;
	}
	return fd;
}

/*
 * bridge_address - is sa DELIVER_BRIDGE_ADDRESS? Only this thread's
 * connect() to it reaches the bridge (deliver_bridge_attach); anyone
 * else's, or one without deliver_connect.c's connect(), is refused by the
 * kernel: no socket can listen on port 0.
 */
static int bridge_address(const struct sockaddr *sa, socklen_t len)
{
	const struct sockaddr_in *in = (const struct sockaddr_in *) sa;

	return sa != NULL && len >= sizeof(*in) && in->sin_family == AF_INET
	    && in->sin_port == 0 && in->sin_addr.s_addr == htonl(INADDR_LOOPBACK);
}

/* a direction of the copy: bytes waiting to be written */
struct pending {
	char buf[BRIDGE_BUF + DELIVER_FILTER_GROW + DELIVER_GATE_REPLY_MAX];
					/* the filter adds MAIL parameters; the gate
					 * a reply it held */
	size_t off, len;
	size_t dot;			/* just past a final dot in buf; 0 if none */
};

/* poll_events - the poll(2) events a transport's IO_AGAIN waits for */
static short poll_events(uint32_t wants)
{
	return (short) ((wants & EPOLLIN ? POLLIN : 0) | (wants & EPOLLOUT ? POLLOUT : 0));
}

/*
 * pending_write - write some of p to io, never past a final dot in one
 * write: 2 the dot's last byte went, 1 moved, 0 waits (for *ev), -1 failed
 */
static int pending_write(struct pending *p, struct io *io, short *ev)
{
	size_t end = p->dot > p->off ? p->dot : p->len;
	ssize_t n = io_write(io, p->buf + p->off, end - p->off);
	int r = 1;

	if (n == IO_AGAIN) {
		*ev |= poll_events(io->write_wants);
		return 0;
	}
	if (n < 0)
		return -1;
	p->off += (size_t) n;
	if (p->dot && p->off == p->dot) {
		p->dot = 0;
		r = 2;
	}
	if (p->off == p->len)
		p->off = p->len = 0;
	return r;
}

/*
 * bridge_settle - the upstream side ends (reset, closed, timed out, or
 * libesmtp hung up): how, and had the peer's TCP acknowledged the last
 * final dot? Read at once, before anything is closed.
 */
static void bridge_settle(struct deliver_bridge *b, const char *ended)
{
	atomic_store(&b->over, 1);	/* for libesmtp's thread: deliver_bridge_over() */
	if (b->ended[0] == 0 && ended)
		snprintf(b->ended, sizeof(b->ended), "%s", ended);
	deliver_watch_settle(&b->watch);
}

/*
 * bridge_rewound - tell the filter of libesmtp's rewinds, after a read
 * from libesmtp and before its bytes are filtered. After: libesmtp counts
 * a rewind before it writes a byte of the content, so bytes of a content
 * come with its rewind counted. And every byte libesmtp wrote before the
 * rewind was read earlier (the server has answered the DATA they end with),
 * so the cut starts at the first byte of the read, exactly where the
 * rewind fell; a server that answers before it has the DATA line only
 * makes the filter refuse a block that does not start with the sentinel.
 */
static void bridge_rewound(struct deliver_bridge *b)
{
	unsigned n = atomic_load(&b->rewinds);

	for (; b->rewound != n; b->rewound++)
		deliver_filter_rewind(&b->filter);
}

/* the state of one pump: both directions and how each side stands */
struct pump {
	struct pending up;		/* libesmtp's bytes for the server */
	struct pending down;		/* the server's (or the gate's) for libesmtp */
	char raw[BRIDGE_BUF];		/* read from the server */
	int client_eof;
	int client_dry;			/* a short read emptied libesmtp's socket: poll first */
	int server_dry;			/* the same for a plain upstream */
};

/*
 * bridge_gone - the server side is over (closed, reset, timed out, broke
 * the protocol, or delivery stops): note how, and from now on the gate
 * answers what libesmtp is owed (deliver_gate.h); nothing more goes up.
 */
static void bridge_gone(struct deliver_bridge *b, struct pump *pm, const char *why)
{
	bridge_settle(b, why);		/* now: before anything else is read */
	deliver_gate_gone(&b->gate, why);	/* the pump reads b->gate.gone */
	pm->up.off = pm->up.len = pm->up.dot = 0;	/* never written: the watch knows */
}

/*
 * bridge_cut_seen - libesmtp's caller cut the session (deliver_bridge_cut):
 * for libesmtp the server is gone from now, so that the gate answers what
 * it is owed, as when the server hangs up. A hang-up instead, with three
 * replies owed (pipelined RCPTs and DATA, and a throttling reply to the
 * first RCPT), crashed libESMTP 1.1.0 (deliver_gate.h).
 */
static void bridge_cut_seen(struct deliver_bridge *b, struct pump *pm)
{
	if (atomic_load(&b->cut) && !b->gate.gone)
		bridge_gone(b, pm, "the session was cut short");
}

/*
 * bridge_late - a deadline passed (why): the server is gone for libesmtp,
 * unless a final dot's reply is owed, which is never made up; then 1:
 * hang up on it (it owes just that one)
 */
static int bridge_late(struct deliver_bridge *b, struct pump *pm, const char *why)
{
	b->timed_out = 1;
	if (deliver_filter_dot_owed(&b->filter, b->gate.released))
		return 1;
	bridge_gone(b, pm, why);
	return 0;
}

/* bridge_down - the server's bytes through the gate (and the filter's EHLO lines) into pm->down */
static void bridge_down(struct deliver_bridge *b, struct pump *pm, const char *in, size_t n)
{
	pm->down.len = deliver_gate_down(&b->gate, &b->filter, in, n, pm->down.buf);
	if (b->gate.gone)		/* it refused a reply (never called once gone) */
		bridge_gone(b, pm, b->gate.why);
}

/*
 * bridge_server_read - read the server into pm->down through the filter
 * and the gate: 1 moved, 0 waits (for *ev), and the end or a reply the
 * gate refuses makes the server gone
 */
static int bridge_server_read(struct deliver_bridge *b, struct pump *pm, short *ev)
{
	char err[IO_ERR_MAX + 64];
	ssize_t n;

	if (pm->server_dry) {		/* nothing to read until poll says so */
		*ev |= POLLIN;
		return 0;
	}
	if ((n = io_read(b->up, pm->raw, BRIDGE_BUF)) == IO_AGAIN) {
		*ev |= poll_events(b->up->read_wants);
		return 0;
	}
	if (n <= 0) {
		if (n == 0)
			snprintf(err, sizeof(err), "the server closed the connection");
		else
			snprintf(err, sizeof(err), "lost connection with the server (%s)",
				 b->up->err[0] ? b->up->err : "read failed");
		bridge_gone(b, pm, err);	/* a line it left unfinished is no reply */
		return 1;
	}
	pm->server_dry = b->tls[0] == 0 && n < BRIDGE_BUF;	/* plain: its socket is empty */
	bridge_down(b, pm, pm->raw, (size_t) n);
	return 1;
}

/*
 * bridge_client_read - read libesmtp through the filter into pm->up (gone:
 * counted by the filter, then dropped): 1 moved, 0 waits (for *ev), -1 the
 * bridge must end (cut, filter refused, error)
 */
static int bridge_client_read(struct deliver_bridge *b, struct pump *pm, struct io *client,
			      short *ev)
{
	ssize_t n, kept;

	if (pm->client_dry) {		/* nothing to read until poll says so */
		*ev |= POLLIN;
		return 0;
	}
	if ((n = io_read(client, pm->up.buf, BRIDGE_BUF)) == IO_AGAIN) {
		*ev |= poll_events(client->read_wants);
		return 0;
	}
	if (n == 0) {
		pm->client_eof = 1;
		return 1;
	}
	if (n < 0)
		return -1;
	pm->client_dry = n < BRIDGE_BUF;	/* a socketpair, plain */
	bridge_cut_seen(b, pm);		/* written after the cut: never forwarded */
	bridge_rewound(b);
	if ((kept = deliver_filter_up(&b->filter, pm->up.buf, (size_t) n)) < 0) {
		snprintf(b->broke, sizeof(b->broke), "%s", b->filter.why);
		return -1;
	}
	pm->up.len = b->gate.gone ? 0 : (size_t) kept;
	pm->up.dot = !b->gate.gone && b->filter.dot_end > 0 ? (size_t) b->filter.dot_end : 0;
	return 1;
}

/*
 * bridge_pump - copy between libesmtp and the upstream through the filter
 * and the gate until libesmtp ends, the filter refuses libesmtp's bytes,
 * or the gate says to hang up once the server side is over. Each
 * transport says, after IO_AGAIN, what it waits for (TLS may need to read
 * to write). A reply's deadline passed, or nothing moved for the timeout
 * (libesmtp's waits for rate tokens aside), is the server's end
 * (bridge_late), or the bridge's while the reply to a final dot is owed.
 */
static void bridge_pump(struct deliver_bridge *b, struct io *client)
{
	struct pump *pm = xcalloc(1, sizeof(*pm));	/* too large for a thread's stack */
	int stopping = 0, moved, wrote, r, wait;
	unsigned paced;
	struct pollfd p[4];
	const char *ended = NULL;
	char err[IO_ERR_MAX + 64];

	deliver_watch_init(&b->watch, b->up->fd, b->timeout_ms);
	bridge_down(b, pm, b->greeting, b->greeting_len);	/* STARTTLS: read already */
	for (;;) {
		moved = wrote = 0;
		p[0].events = p[1].events = 0;
		bridge_cut_seen(b, pm);
		/*
		 * Delivery stops: a connection owed no final dot's reply has
		 * nothing out there, so it goes now (a message marked but not
		 * dotted is retried: its dot was never written), once libesmtp
		 * has every reply. One waiting for a dot's reply waits for it,
		 * as long as the deadline lets.
		 */
		if (stopping && !b->gate.gone && pm->down.len == 0
		    && !deliver_filter_dot_owed(&b->filter, b->gate.released))
			bridge_gone(b, pm, "delivery is stopping");
		if (b->gate.gone && pm->down.len == 0) {
			pm->down.len = deliver_gate_answer(&b->gate, &b->filter, pm->down.buf,
							   sizeof(pm->down.buf));
			if (pm->down.len == 0 && b->gate.hangup)
				break;
		}
		if (pm->up.len == 0 && !pm->client_eof
		    && (r = bridge_client_read(b, pm, client, &p[0].events)) != 0) {
			if (r < 0)
				break;
			moved = 1;
		}
		if (!b->gate.gone && pm->up.len > 0
		    && (r = pending_write(&pm->up, b->up, &p[1].events)) != 0) {
			if (r < 0) {
				snprintf(err, sizeof(err), "lost connection writing to the server (%s)",
					 b->up->err[0] ? b->up->err : "write failed");
				bridge_gone(b, pm, err);
			} else if (r == 2) {
				deliver_watch_dot_out(&b->watch);
			}
			moved = wrote = 1;
		}
		if (!b->gate.gone && pm->down.len == 0 && bridge_server_read(b, pm, &p[1].events))
			moved = 1;
		if (pm->down.len > 0 && (r = pending_write(&pm->down, client, &p[0].events)) != 0) {
			if (r < 0)
				break;
			moved = 1;
		}
		if (pm->client_eof && (b->gate.gone || pm->up.len == 0))
			break;
		wait = -1;
		if (!b->gate.gone) {
			wait = deliver_watch_tick(&b->watch,
						  deliver_filter_verb(&b->filter, b->gate.released),
						  b->gate.released, wrote);
			if (wait == 0) {
				if (bridge_late(b, pm, b->watch.why)) {
					ended = b->watch.why;
					break;
				}
				continue;
			}
		}
		if (moved)
			continue;
		/* a side we wait for nothing from is left out: its hang-up would spin the loop */
		p[0].fd = p[0].events ? client->fd : -1;
		p[1].fd = p[1].events && !b->gate.gone ? b->up->fd : -1;
		p[2] = (struct pollfd) { .fd = b->stop[0], .events = POLLIN };
		p[3] = (struct pollfd) { .fd = stopping ? -1 : b->stopping_fd, .events = POLLIN };
		paced = atomic_load(&b->paced);
		while ((r = poll(p, 4, wait > 0 ? wait : b->timeout_ms)) < 0 && errno == EINTR)
			continue;
		if (r > 0 && p[0].revents)
			pm->client_dry = 0;
		if (r > 0 && p[1].revents)
			pm->server_dry = 0;
		if (r > 0 && p[2].revents && atomic_load(&b->cut)) {
			/* a cut, not an end: the loop's head makes the server gone */
			(void) !read(b->stop[0], err, sizeof(err));
			p[2].revents = 0;
		}
		if (r > 0 && p[3].revents) {
			stopping = 1;		/* the loop's head decides */
			if (r == 1)
				continue;
		}
		if (r == 0 && wait > 0)
			continue;	/* the watch decides */
		if (r == 0 && !b->gate.gone) {
			/* libesmtp's thread waited for rate tokens: our own pacing, not idleness */
			if ((paced & 1) || atomic_load(&b->paced) != paced)
				continue;
			/* a transfer stalled, or libesmtp is held up (a slow inflight mark) */
			snprintf(err, sizeof(err), "timeout: nothing moved for %d s", b->timeout_ms / 1000);
			if (bridge_late(b, pm, err)) {
				ended = err;
				break;
			}
			continue;
		}
		if (r < 0 || p[2].revents)
			break;
	}
	bridge_settle(b, ended);
	free(pm);
}

/* bridge_main - the bridge thread: copy between libesmtp and the upstream, hang up on both */
static void *bridge_main(void *arg)
{
	struct deliver_bridge *b = arg;
	struct io *client = io_plain_new(b->cfd);

	log_service("smtp");		/* SIGPIPE blocked: its opener's mask (deliver_bridge_open) */
	bridge_pump(b, client);
	io_close(client);
	io_close(b->up);
	b->up = NULL;
	return NULL;
}

/* deliver_bridge_open - connect, set up TLS if asked; libesmtp's connect() comes next */
struct deliver_bridge *deliver_bridge_open(SSL_CTX *ctx, const struct sockaddr *sa,
					   socklen_t salen, const char *helo, int timeout_ms,
					   char *why, size_t whylen, char dsn[DELIVER_DSN_SIZE])
{
	struct deliver_bridge *b = xcalloc(1, sizeof(*b));
	struct timespec deadline = deadline_in(timeout_ms);
	sigset_t block;

	/* writes to a side gone fail, EPIPE: this thread's (the handshake, libesmtp's) and
	 * the bridge's, which libesmtp's connect() starts here and which inherits the mask */
	sigemptyset(&block);
	sigaddset(&block, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &block, NULL);
	b->tfd = b->stop[0] = b->stop[1] = -1;
	b->stopping_fd = deadline_stop_fd();	/* the opener's: its thread's stop is the bridge's */
	atomic_init(&b->cut, 0);
	atomic_init(&b->rewinds, 0);
	atomic_init(&b->over, 0);
	atomic_init(&b->paced, 0);
	deliver_filter_init(&b->filter);
	deliver_gate_init(&b->gate);
	b->timeout_ms = timeout_ms;
	snprintf(dsn, DELIVER_DSN_SIZE, "4.4.1");
	if ((b->tfd = bridge_connect(sa, salen, &deadline, why, whylen)) < 0
	    || (ctx && helo && deliver_bridge_starttls(b, helo, &deadline, why, whylen, dsn) < 0))
		goto fail;
	b->up = ctx ? tls_client_connect(ctx, b->tfd, &deadline, b->tls, sizeof(b->tls), why,
					 whylen) : io_plain_new(b->tfd);
	if (b->up == NULL) {
		if (ctx)	/* the handshake failed, or the certificate was refused */
			snprintf(dsn, DELIVER_DSN_SIZE, "4.7.5");
		goto fail;
	}
	b->tfd = -1;			/* b->up has it */
	snprintf(dsn, DELIVER_DSN_SIZE, "4.3.0");
	if (pipe2(b->stop, O_CLOEXEC | O_NONBLOCK) < 0) {
		snprintf(why, whylen, "pipe: %s", strerror(errno));
		goto fail;
	}
	current = b;
	return b;

fail:
	deliver_bridge_close(b);
	return NULL;
}

/*
 * deliver_bridge_attach - libesmtp's connect() to this thread's bridge, done
 * in-process: the thread starts on the other end before fd becomes this
 * end (a failure after that leaves it an end of file: it hangs up)
 */
int deliver_bridge_attach(int fd, const struct sockaddr *sa, socklen_t len)
{
	struct deliver_bridge *b = current;
	int sp[2], fl, fdfl, err, done = 0;

	if (b == NULL || !bridge_address(sa, len))
		return 0;
	current = NULL;			/* one connect() takes it, whatever comes of it */
	if ((fl = fcntl(fd, F_GETFL)) < 0 || (fdfl = fcntl(fd, F_GETFD)) < 0
	    || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sp) < 0)
		return 0;
	b->cfd = sp[1];
	if ((err = pthread_create(&b->thread, NULL, bridge_main, b)) != 0) {
		msg_warn("bridge: cannot start the thread: %s", strerror(err));
		close(sp[1]);
	} else {
		b->running = 1;		/* the thread owns sp[1] */
		done = dup2(sp[0], fd) >= 0 && fcntl(fd, F_SETFL, fl) == 0
		    && fcntl(fd, F_SETFD, fdfl) == 0;
	}
	close(sp[0]);
	return done;
}

/* deliver_bridge_tls - the TLS connection's description; "" for plain */
const char *deliver_bridge_tls(const struct deliver_bridge *b)
{
	return b->tls;
}

/* deliver_bridge_mail_params - which MAIL lines get which parameters (before libesmtp attaches) */
void deliver_bridge_mail_params(struct deliver_bridge *b, const unsigned char *want, size_t n)
{
	/* the thread starts at the attach, after this: pthread_create() orders it */
	deliver_filter_mail_params(&b->filter, want, n);
}

/* deliver_bridge_offered - the parameters the server offered (its EHLO reply, as filtered) */
int deliver_bridge_offered(const struct deliver_bridge *b)
{
	return atomic_load(&b->filter.offered);
}

/* deliver_bridge_rewind - libesmtp's content starts with the next byte it writes */
void deliver_bridge_rewind(struct deliver_bridge *b)
{
	atomic_fetch_add(&b->rewinds, 1);
}

/* deliver_bridge_over - has the upstream side ended? */
int deliver_bridge_over(const struct deliver_bridge *b)
{
	return atomic_load(&b->over);
}

/* deliver_bridge_pacing - a wait for a rate token starts or ends */
void deliver_bridge_pacing(struct deliver_bridge *b)
{
	atomic_fetch_add(&b->paced, 1);
}

/* deliver_bridge_cut - forward nothing more from libesmtp; the gate answers it */
void deliver_bridge_cut(struct deliver_bridge *b)
{
	atomic_store(&b->cut, 1);
	if (b->stop[1] >= 0)
		(void) !write(b->stop[1], "x", 1);
}

/* deliver_bridge_end - wait for the thread to end; why it hung up on its own */
const char *deliver_bridge_end(struct deliver_bridge *b)
{
	if (b->running) {
		if (write(b->stop[1], "x", 1) < 0 && errno != EAGAIN)
			msg_warn("bridge: cannot stop the thread: %s", strerror(errno));
		pthread_join(b->thread, NULL);
		b->running = 0;
	}
	return b->broke[0] ? b->broke : NULL;
}

/* deliver_bridge_dot_acked - did the nth final dot reach the server's TCP? */
int deliver_bridge_dot_acked(const struct deliver_bridge *b, unsigned nth)
{
	return deliver_watch_dot_acked(&b->watch, nth);
}

/* deliver_bridge_ended - how the upstream side ended; did it time out, did the gate stand in? */
const char *deliver_bridge_ended(const struct deliver_bridge *b, int *timed_out,
				 int *stood_in)
{
	*timed_out = b->timed_out;
	*stood_in = b->gate.answered;
	return b->ended;
}

/* deliver_bridge_close - end the thread, close everything; NULL-safe */
void deliver_bridge_close(struct deliver_bridge *b)
{
	if (b == NULL)
		return;
	if (current == b)
		current = NULL;
	(void) deliver_bridge_end(b);
	io_close(b->up);
	if (b->tfd >= 0)
		close(b->tfd);
	if (b->stop[0] >= 0)
		close(b->stop[0]);
	if (b->stop[1] >= 0)
		close(b->stop[1]);
	free(b);
}
