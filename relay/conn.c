/*
 * NAME
 *	conn 3
 * SUMMARY
 *	a client connection's life: accept, limits, input, output, TLS, close
 * DESCRIPTION
 *	A connection (struct conn) joins a socket to an smtp_session. Input
 *	is read into conn->in and fed to the engine, which consumes all of it
 *	unless it waits for the answer to a message, or for its client to
 *	read the replies (out_max); until it has taken the rest, nothing is
 *	read (EPOLLIN goes off at its first event: conn_interest()), so the
 *	buffer stays bounded by one read.
 *
 *	conn_accept() takes new sockets: the client's own limits first
 *	(anvil.h), then limits.connections, where pace_make_room() may drop
 *	a session to make room; a client refused gets a 421 in the clear
 *	(none on an implicit-TLS port, where it could not be read). Each
 *	session's deadlines are pace.c's, its share of the message memory
 *	budget.c's.
 *
 *	A connection whose client went away while its message was being
 *	committed is kept, marked dead, until the commit answers: the request
 *	points at it. The same holds for a password being checked
 *	(conn_auth.c). conn_reap() frees it once nothing points at it.
 *
 *	A connection talks through its transport (io.h), plain or TLS, so
 *	that both share this one path. STARTTLS: once the engine's 220 is
 *	flushed, the plain transport is swapped for TLS over the same socket
 *	and the handshake runs; the engine has dropped whatever came after
 *	the command. Implicit TLS listeners shake hands before the greeting.
 *	A handshake counts against command_timeout, and one that times out
 *	is closed without a reply (there is no channel to send it on).
 *
 *	Refusals are logged here in Postfix's form (conn_reject_log()), for
 *	the engine's own, the relay check's and submit.c's alike.
 * DIAGNOSTICS
 *	"connect from unknown[ADDR]", "disconnect from unknown[ADDR]" with
 *	the command counts, "lost connection after CMD from unknown[ADDR]",
 *	"tls: handshake failed from unknown[ADDR]: why".
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../queue/metrics.h"
#include "../smtp/smtp.h"
#include "../tls/io.h"
#include "../tls/tls.h"
#include "../util/buf.h"
#include "../util/clock.h"
#include "../util/log.h"
#include "budget.h"
#include "pace.h"
#include "server_int.h"

/* conn_free - release a connection */
void conn_free(struct conn *c)
{
	struct server *srv = c->srv;

	if (c->prev)
		c->prev->next = c->next;
	else
		srv->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	budget_release(c);
	anvil_disconnect(srv->anvil, c->client);
	srv->n_conns--;
	if (c->dead)
		srv->n_dead--;
	if (c->auth_due)
		srv->n_auth_delayed--;
	smtp_session_free(c->s);
	buf_free(&c->in);
	free(c);
}

/*
 * conn_close - drop the socket, and log the disconnect as Postfix does,
 * with the command counts. The struct is freed by conn_reap() at the end
 * of the loop iteration, once no commit request points at it: events
 * already fetched in this iteration may still name it.
 */
void conn_close(struct conn *c)
{
	char stats[512];

	if (c->dead)
		return;
	conn_auth_cancel(c);
	if (smtp_session_why(c->s) == SMTP_CLOSE_ERRORS) {
		metrics_inc(METRICS_ERRORS_CLOSED);
		msg_info("too many errors after %s from unknown[%s]", smtp_session_where(c->s),
			 c->addr);
	}
	smtp_session_stats(c->s, stats, sizeof(stats));
	msg_info("disconnect from unknown[%s]%s", c->addr, stats);
	io_close(c->io);		/* TLS says goodbye; the socket leaves the epoll set */
	c->io = NULL;
	c->dead = 1;
	c->srv->n_dead++;
}

/* conn_lost - the client went away (or its socket failed) before we closed */
static void conn_lost(struct conn *c, const char *err)
{
	if (!smtp_session_closing(c->s))
		msg_info("lost connection after %s from unknown[%s]", smtp_session_where(c->s),
			 c->addr);
	if (err)
		msg_debug("lost connection from unknown[%s]: %s", c->addr, err);
	conn_close(c);
}

/* conn_reap - free closed connections nothing points at any more */
void conn_reap(struct server *srv)
{
	struct conn *c, *next;

	for (c = srv->conns; c; c = next) {
		next = c->next;
		if (c->dead && c->req == NULL && c->auth == NULL)
			conn_free(c);
	}
}

/*
 * conn_accepting - the engine takes input: not waiting, not closing, not
 * between STARTTLS and the handshake, and the client reads its replies
 * (a pipelining client that never reads would otherwise grow the output
 * without bound).
 */
static int conn_accepting(struct conn *c)
{
	return !smtp_session_waiting(c->s) && !smtp_session_closing(c->s)
	    && !smtp_session_starttls(c->s) && smtp_session_out(c->s)->len < OUT_MAX
	    && !budget_paused(c);
}

/*
 * conn_reading - read from the socket: the engine takes input and took all
 * of the last read. Input it left (replies unread, out_max) is fed first,
 * once they are written (conn_flush): a client that pipelines and reads a
 * little at a time must not have its commands read on into our memory,
 * a read each time its replies fall below OUT_MAX.
 */
static int conn_reading(struct conn *c)
{
	return c->in.len == 0 && conn_accepting(c);
}

/*
 * conn_interest - during a handshake, what it waits for; else EPOLLIN while
 * reading input, EPOLLOUT while output is pending. A TLS read may wait
 * for EPOLLOUT, and a TLS write for EPOLLIN.
 *
 * EPOLLIN that the engine stops taking (a message being committed, most
 * often, while its client waits for the reply) stays in the set until an
 * event comes for it, and only then is it taken off (conn_event): a client
 * that waits sends nothing, so the two epoll_ctl calls a message of
 * taking it off and putting it back are saved, and input is still never
 * read while the engine does not take it.
 */
void conn_interest(struct conn *c)
{
	uint32_t ev = 0;
	int paused = c->io->ready && budget_paused(c);

	if (paused != c->paused) {	/* budget_resume() looks for these */
		c->paused = paused;
		c->srv->n_paused += paused ? 1 : (size_t) -1;
	}

	if (!c->io->ready) {
		ev = c->io->hs_wants;
	} else {
		if (conn_reading(c))
			ev |= c->io->read_wants ? c->io->read_wants : EPOLLIN;
		if (smtp_session_out(c->s)->len)
			ev |= c->io->write_wants ? c->io->write_wants : EPOLLOUT;
		ev |= c->io->flush_wants;
	}
	if (ev & EPOLLIN)
		c->in_unwanted = 0;
	if (ev != c->events && !(c->io->ready && c->events == (ev | EPOLLIN) && !c->in_unwanted)) {
		server_ep_set(c->srv, EPOLL_CTL_MOD, c->io->fd, ev, c);
		c->events = ev;
	}
}

/* conn_write - write what the socket takes now; -1 if the connection is lost */
static int conn_write(struct conn *c)
{
	struct buf *out = smtp_session_out(c->s);
	ssize_t n;

	while (out->len) {
		if ((n = io_write(c->io, out->data, out->len)) == IO_AGAIN)
			break;
		if (n < 0) {
			conn_lost(c, c->io->err);
			return -1;
		}
		buf_consume(out, (size_t) n);
	}
	return 0;
}

/*
 * conn_starttls - the 220 is flushed: TLS over the same socket. The input
 * read before is gone (the engine dropped it); what the client sends now
 * is its ClientHello, read by OpenSSL itself once epoll says it is there
 * (a read before could only say EAGAIN: the client waits for the 220).
 */
static int conn_starttls(struct conn *c)
{
	int fd = io_plain_release(c->io);

	buf_reset(&c->in);
	if ((c->io = tls_io_new(c->srv->tls, fd, c->addr)) == NULL) {
		conn_close(c);			/* tls_io_new closed the socket */
		return -1;
	}
	pace_arm(c);			/* the handshake gets command_timeout */
	conn_interest(c);		/* the ClientHello answers the 220: not here yet */
	return 0;
}

/*
 * conn_flush_close - a closing session's output is written: close once
 * the transport has sent what it holds too (the last replies, the 221 or
 * 421, and TLS's close_notify after them: io_goodbye). A full socket waits
 * for EPOLLOUT as unwritten output does, within the session's deadline
 * (pace.c) or the drain's. 0 while waiting, -1 when closed
 */
static int conn_flush_close(struct conn *c)
{
	int r = io_goodbye(c->io);

	if (r == IO_AGAIN) {
		conn_interest(c);
		return 0;
	}
	if (r == IO_ERROR) {
		conn_lost(c, c->io->err);
		return -1;
	}
	conn_close(c);
	return -1;
}

/*
 * conn_flush - write pending output; close when done and closing (what
 * the transport holds sent too: conn_flush_close); go on
 * with input the engine left for unread replies once they are written,
 * in c->in or held by the transport (TLS read-ahead: no event for it).
 * Before the loop waits, the transport sends what it held back (io.h):
 * all this turn wrote, in one segment. 0, or -1 if closed
 */
int conn_flush(struct conn *c)
{
	struct buf *out = smtp_session_out(c->s);

	if (conn_write(c) < 0)
		return -1;
	if (out->len == 0 && (c->in.len || io_pending(c->io)) && conn_accepting(c))
		return conn_process(c);		/* ends in conn_flush: left input only */
	if (out->len == 0 && smtp_session_closing(c->s))
		return conn_flush_close(c);
	/* the 220 is out in the clear: from here on the socket speaks TLS */
	if (out->len == 0 && smtp_session_starttls(c->s) && !smtp_session_tls(c->s))
		return conn_starttls(c);
	if (io_flush(c->io) == IO_ERROR) {
		conn_lost(c, c->io->err);
		return -1;
	}
	conn_interest(c);
	return 0;
}

/* conn_fill - read once into c->in: the octets read, 0 if none now, -1 if the connection is lost */
static ssize_t conn_fill(struct conn *c)
{
	ssize_t n;

	buf_reserve(&c->in, READ_CHUNK);
	if ((n = io_read(c->io, c->in.data + c->in.len, READ_CHUNK)) == IO_AGAIN)
		return 0;
	if (n <= 0) {
		conn_lost(c, n == IO_ERROR ? c->io->err : NULL);
		return -1;
	}
	c->in.len += (size_t) n;
	return n;
}

/*
 * conn_process - feed buffered input; a hook that answers at once (a
 * duplicate, a remembered password) replies inside the feed, which goes
 * on with the next command (smtp.h). TLS may hold decrypted input that no epoll event
 * will announce: it is read here while the engine takes input, and its
 * octets count for the data rate as the caller's read does. When the
 * engine stops for unread replies (out_max), they are written as far as
 * the socket takes them, and feeding goes on only if that made room:
 * else the rest waits in c->in for EPOLLOUT (conn_flush).
 */
int conn_process(struct conn *c)
{
	size_t n, more = 0;
	ssize_t got;

	for (;;) {
		n = smtp_session_feed(c->s, c->in.data, c->in.len);
		buf_consume(&c->in, n);
		if (c->in.len && smtp_session_out(c->s)->len >= OUT_MAX) {
			if (conn_write(c) < 0)
				return -1;
			if (smtp_session_out(c->s)->len < OUT_MAX)
				continue;
			break;
		}
		if (c->in.len || !conn_accepting(c) || io_pending(c->io) == 0)
			break;
		if ((got = conn_fill(c)) < 0)
			return -1;
		if (got == 0)
			break;
		more += (size_t) got;
	}
	budget_account(c);
	if (more)
		pace_input(c, more);
	return conn_flush(c);
}

/* conn_handshake - drive a TLS handshake; when done, the session starts over */
static void conn_handshake(struct conn *c)
{
	char desc[128];
	int r = io_handshake(c->io);

	if (r < 0) {
		msg_info("tls: handshake failed from unknown[%s]: %s", c->addr, c->io->err);
		conn_close(c);
		return;
	}
	if (r == 0) {
		conn_interest(c);
		return;
	}
	tls_io_describe(c->io, desc, sizeof(desc));
	msg_info("tls: client=[%s] %s", c->addr, desc);
	smtp_session_set_tls(c->s);
	pace_arm(c);
	if (c->l->cf->tls_implicit)
		smtp_session_greet(c->s);
	conn_process(c);
}

/*
 * conn_log_head - Postfix's refusal line up to its recipients, "NOQUEUE:
 * reject: STAGE from unknown[ADDR]: REPLY; from=<S>", or with a QID
 * "QID: discard: ..." (a duplicate answered with it); from= where known
 */
void conn_log_head(struct buf *b, const struct conn *c, const char *qid, const char *stage,
		   const char *reply, const char *from)
{
	buf_printf(b, "%s: %s: %s from unknown[%s]: %.400s;", qid ? qid : "NOQUEUE",
		   qid ? "discard" : "reject", stage, c->addr, reply);
	if (from)
		buf_printf(b, " from=<%.300s>", from);
}

/* conn_log_tail - the end of Postfix's refusal line: " proto=ESMTP helo=<H>" */
void conn_log_tail(struct buf *b, int esmtp, const char *helo)
{
	buf_printf(b, " proto=%s", esmtp ? "ESMTP" : "SMTP");
	if (*helo)
		buf_printf(b, " helo=<%.255s>", helo);
}

/*
 * conn_reject_log - a refusal, one line in Postfix's form, so that its log
 * parsers count it: to= the recipient refused, or the transaction's first
 */
void conn_reject_log(struct conn *c, const char *stage, const char *reply,
		     const struct smtp_tx *tx, const char *to)
{
	struct buf line = BUF_INIT;

	conn_log_head(&line, c, NULL, stage, reply, tx ? tx->from : NULL);
	if (to == NULL && tx && tx->n_rcpts)
		to = tx->rcpts[0].addr;
	if (to)
		buf_printf(&line, " to=<%.300s>", to);
	conn_log_tail(&line, smtp_session_esmtp(c->s), smtp_session_helo(c->s));
	msg_info("%s", line.data);
	buf_free(&line);
}

/*
 * conn_refuse - a socket turned away at accept: the 421 in the clear (none
 * on an implicit-TLS port, where it could not be read), and close
 */
static void conn_refuse(const struct listener *l, int fd, const char *reply)
{
	if (!l->cf->tls_implicit)
		(void) !write(fd, reply, strlen(reply));
	close(fd);
}

/* conn_refuse_client - a client past its own limit (anvil.h) */
static void conn_refuse_client(struct server *srv, const struct listener *l, int fd,
			       const char *addr, enum anvil_verdict v)
{
	char busy[512];

	metrics_inc(v == ANVIL_COUNT ? METRICS_CLIENT_COUNT_REFUSED : METRICS_CLIENT_RATE_REFUSED);
	snprintf(busy, sizeof(busy), "421 4.7.0 %.255s Error: too many connections%s from %s\r\n",
		 srv->cf->hostname, v == ANVIL_RATE ? " a minute" : "", addr);
	conn_refuse(l, fd, busy);
}

/* conn_accept - take new connections from a listener */
void conn_accept(struct server *srv, struct listener *l)
{
	struct sockaddr_storage ss;
	struct anvil_client *client;
	enum anvil_verdict v;
	char addr[INET6_ADDRSTRLEN];
	socklen_t sl;
	struct conn *c;
	struct io *io;
	int fd, relay_ok;

	for (;;) {
		sl = sizeof(ss);
		fd = accept4(l->fd, (struct sockaddr *) &ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				msg_warn("accept: %m");
			return;
		}
		if (ss.ss_family == AF_INET6)
			inet_ntop(AF_INET6, &((struct sockaddr_in6 *) &ss)->sin6_addr, addr, sizeof(addr));
		else
			inet_ntop(AF_INET, &((struct sockaddr_in *) &ss)->sin_addr, addr, sizeof(addr));
		relay_ok = conf_net_match(srv->cf, (struct sockaddr *) &ss);
		/* the client's own limits first: one past them makes no one else room */
		if ((v = anvil_connect(srv->anvil, (struct sockaddr *) &ss, addr, relay_ok,
				       clock_mono_us(), &client)) != ANVIL_OK) {
			conn_refuse_client(srv, l, fd, addr, v);
			continue;
		}
		if (srv->n_conns - srv->n_dead >= (size_t) srv->cf->limits.connections
		    && !pace_make_room(srv)) {
			anvil_disconnect(srv->anvil, client);
			conn_refuse(l, fd, "421 4.7.0 Too many connections, try again later\r\n");
			pace_refused(srv);
			continue;
		}
		io = l->cf->tls_implicit ? tls_io_new(srv->tls, fd, addr) : io_plain_new(fd);
		if (io == NULL) {
			anvil_disconnect(srv->anvil, client);
			continue;			/* logged; the socket is closed */
		}
		c = xcalloc(1, sizeof(*c));
		c->tag = TAG_CONN;
		c->srv = srv;
		c->l = l;
		c->io = io;
		memcpy(c->addr, addr, sizeof(c->addr));
		c->relay_ok = relay_ok;
		c->client = client;
		c->s = smtp_session_new(&l->smtp_cf, &srv->hooks, c);
		pace_arm(c);
		msg_info("connect from unknown[%s]", c->addr);
		c->next = srv->conns;
		if (srv->conns)
			srv->conns->prev = c;
		srv->conns = c;
		srv->n_conns++;
		c->events = EPOLLIN;
		server_ep_set(srv, EPOLL_CTL_ADD, fd, EPOLLIN, c);
		if (!io->ready)
			continue;		/* implicit TLS: the greeting follows the handshake */
		smtp_session_greet(c->s);
		conn_flush(c);
	}
}

/* conn_read - read what the client sent and process it */
static void conn_read(struct conn *c)
{
	ssize_t n = conn_fill(c);

	if (n == 0)
		conn_flush(c);		/* the event may have been for output too */
	else if (n > 0 && conn_process(c) == 0)
		pace_input(c, (size_t) n);
}

/*
 * conn_event - epoll says the socket is ready. Hang-ups and errors are
 * found by reading. Input is read only while the engine takes it, all of
 * the last read (conn_reading: a TLS write waiting for EPOLLIN is retried
 * by flushing, not by reading more), and a TLS read waiting for EPOLLOUT
 * is retried on it.
 */
void conn_event(struct conn *c, uint32_t ev)
{
	if (!c->io->ready)
		conn_handshake(c);
	else if ((ev & (EPOLLHUP | EPOLLERR)) || ((ev & EPOLLIN) && conn_reading(c))
		 || ((ev & EPOLLOUT) && c->io->read_wants == EPOLLOUT))
		conn_read(c);
	else {
		if (ev & EPOLLIN)	/* left in the set (conn_interest): now off */
			c->in_unwanted = 1;
		conn_flush(c);
	}
}
