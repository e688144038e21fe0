/*
 * NAME
 *	server 3
 * SUMMARY
 *	listeners, connections and the epoll event loop
 * DESCRIPTION
 *	A connection (struct conn) joins a socket to an smtp_session. Input
 *	is read into conn->in and fed to the engine, which consumes all of it
 *	unless it waits for the answer to a message; while it waits, EPOLLIN
 *	is off, so the buffer stays bounded by one read.
 *
 *	A connection whose client went away while its message was being
 *	committed is kept, marked dead, until the commit answers: the request
 *	points at it. The same holds for a password being checked.
 *
 *	A connection talks through its transport (io.h), plain or TLS, so
 *	that both share this one path. STARTTLS: once the engine's 220 is
 *	flushed, the plain transport is swapped for TLS over the same socket
 *	and the handshake runs; the engine has dropped whatever came after
 *	the command. Implicit TLS listeners shake hands before the greeting.
 *	A handshake counts against command_timeout, and one that times out
 *	is closed without a reply (there is no channel to send it on).
 *
 *	AUTH: the engine hands credentials to on_auth(), which queues them
 *	for a checking thread (auth.h). A success is answered at once; a
 *	failure only after AUTH_FAIL_DELAY, a per-connection deadline the
 *	loop sweeps, so a guessing client is slowed without slowing anyone
 *	else. Authenticated clients may relay; with keys.scope = "user"
 *	their claims are filed under their user name.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../smtp/smtp.h"
#include "../util/clock.h"
#include "../util/buf.h"
#include "../util/listen.h"
#include "../util/log.h"
#include "auth.h"
#include "../queue/commit.h"
#include "dupcount.h"
#include "../tls/io.h"
#include "../queue/keys.h"
#include "budget.h"
#include "../queue/metrics.h"
#include "pace.h"
#include "../queue/qid.h"
#include "server.h"
#include "server_int.h"
#include "../tls/tls.h"

/* ep_set - add or change a descriptor's epoll interest */
static void ep_set(struct server *srv, int op, int fd, uint32_t events, void *ptr)
{
	struct epoll_event ev;

	memset(&ev, 0, sizeof(ev));
	ev.events = events;
	ev.data.ptr = ptr;
	if (epoll_ctl(srv->epfd, op, fd, &ev) < 0)
		msg_panic("epoll_ctl(%d, fd %d): %m", op, fd);
}

/* conn_free - release a connection */
static void conn_free(struct conn *c)
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
	if (c->auth_queued) {		/* never submitted: nothing will come back */
		anvil_auth_cancel(c->client, &c->auth_wait);
		c->auth_queued = 0;
		explicit_bzero(c->auth->pass, sizeof(c->auth->pass));
		free(c->auth);
		c->auth = NULL;
	}
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
static void conn_reap(struct server *srv)
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
 * conn_interest - during a handshake, what it waits for; else EPOLLIN while
 * accepting input, EPOLLOUT while output is pending. A TLS read may wait
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
		if (conn_accepting(c))
			ev |= c->io->read_wants ? c->io->read_wants : EPOLLIN;
		if (smtp_session_out(c->s)->len)
			ev |= c->io->write_wants ? c->io->write_wants : EPOLLOUT;
		ev |= c->io->flush_wants;
	}
	if (ev & EPOLLIN)
		c->in_unwanted = 0;
	if (ev != c->events && !(c->io->ready && c->events == (ev | EPOLLIN) && !c->in_unwanted)) {
		ep_set(c->srv, EPOLL_CTL_MOD, c->io->fd, ev, c);
		c->events = ev;
	}
}

static int conn_starttls(struct conn *c);

static int conn_write(struct conn *c);

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
 * conn_process - feed buffered input; answers decided inside the hook
 * resume the session. TLS may hold decrypted input that no epoll event
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
		if (c->sync_reply != NULL) {
			smtp_session_reply(c->s, c->sync_reply);
			c->sync_reply = NULL;
			continue;
		}
		if (c->sync_auth) {
			smtp_session_auth_reply(c->s, c->sync_auth);
			c->sync_auth = 0;
			continue;
		}
		if (c->in.len && smtp_session_out(c->s)->len >= OUT_MAX) {
			if (conn_write(c) < 0)
				return -1;
			if (smtp_session_out(c->s)->len < OUT_MAX)
				continue;
			break;
		}
		if (c->in.len || !conn_accepting(c) || io_pending(c->io) == 0)
			break;
		buf_reserve(&c->in, READ_CHUNK);
		got = io_read(c->io, c->in.data + c->in.len, READ_CHUNK);
		if (got == IO_AGAIN)
			break;
		if (got <= 0) {
			conn_lost(c, got < 0 ? c->io->err : NULL);
			return -1;
		}
		c->in.len += (size_t) got;
		more += (size_t) got;
	}
	budget_account(c);
	if (more)
		pace_input(c, more);
	return conn_flush(c);
}

/* conn_handshake - drive a TLS handshake; when done, the session starts over */
static int conn_handshake(struct conn *c)
{
	char desc[128];
	int r = io_handshake(c->io);

	if (r < 0) {
		msg_info("tls: handshake failed from unknown[%s]: %s", c->addr, c->io->err);
		conn_close(c);
		return -1;
	}
	if (r == 0) {
		conn_interest(c);
		return 0;
	}
	io_describe(c->io, desc, sizeof(desc));
	msg_info("tls: client=[%s] %s", c->addr, desc);
	smtp_session_set_tls(c->s);
	pace_arm(c);
	if (c->l->cf->tls_implicit)
		smtp_session_greet(c->s);
	return conn_process(c);
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

/* on_refused - the engine's own refusals (size, bare CR/LF), logged as Postfix does */
static void on_refused(void *ctx, struct smtp_session *s, const struct smtp_tx *tx,
		       const char *stage, const char *reply)
{
	(void) s;
	conn_reject_log(ctx, stage, reply, tx, NULL);
}

/* on_rcpt - relay only for access.networks and AUTH users */
static const char *on_rcpt(void *ctx, const struct smtp_tx *tx, const char *addr)
{
	struct conn *c = ctx;
	static __thread char reply[SMTP_LINE_MAX + 64];

	if (c->relay_ok || smtp_session_user(c->s))
		return NULL;
	snprintf(reply, sizeof(reply), "554 5.7.1 <%.300s>: Relay access denied", addr);
	conn_reject_log(c, "RCPT", reply, tx, addr);
	return reply;
}

/* auth_next - the client's check is over: the next of its line goes to the threads */
static void auth_next(struct conn *c)
{
	struct anvil_wait *w;
	struct conn *n;

	if (!c->auth_turn)
		return;
	c->auth_turn = 0;
	if ((w = anvil_auth_end(c->client)) == NULL)
		return;
	n = (struct conn *) ((char *) w - offsetof(struct conn, auth_wait));
	n->auth_queued = 0;
	n->auth_turn = 1;
	auth_submit(n->srv->auth, n->auth);
}

/*
 * auth_done - a password check came back (or was decided at once): 235
 * now, 535 after the delay. Inside the hook, the 235 waits in sync_auth
 * for conn_process(), which is the one that feeds the engine.
 */
static void auth_done(struct auth_req *req)
{
	struct conn *c = req->ctx;

	c->auth = NULL;
	auth_next(c);
	if (req->ok)
		msg_info("auth: client=[%s] sasl_username=%s status=ok%s", c->addr, req->user,
			 req->cached ? " (remembered)" : "");
	else
		msg_warn("auth: client=[%s] sasl_username=%s status=failed", c->addr, req->user);
	if (!c->dead && req->ok && c->in_auth_hook) {
		c->sync_auth = 1;
	} else if (!c->dead && req->ok) {
		smtp_session_auth_reply(c->s, 1);
		conn_process(c);
	} else if (!c->dead) {
		c->auth_due = clock_us() + AUTH_FAIL_DELAY;
		c->srv->n_auth_delayed++;
	}
	explicit_bzero(req->pass, sizeof(req->pass));
	free(req);
}

/* auth_delayed - send the 535s whose delay is over */
static void auth_delayed(struct server *srv)
{
	struct conn *c, *next;
	int64_t now = clock_us();

	for (c = srv->conns; c && srv->n_auth_delayed; c = next) {
		next = c->next;
		if (c->auth_due == 0 || c->auth_due > now)
			continue;
		c->auth_due = 0;
		srv->n_auth_delayed--;
		if (c->dead)
			continue;
		smtp_session_auth_reply(c->s, 0);
		conn_process(c);
	}
}

/* on_auth - credentials from AUTH: to a checking thread, off the event loop */
static void on_auth(void *ctx, struct smtp_session *s, const char *mech,
		    const char *user, const char *pass)
{
	struct conn *c = ctx;
	struct auth_req *req;
	size_t ulen = strlen(user), plen = strlen(pass);

	(void) s;
	(void) mech;
	req = xcalloc(1, sizeof(*req));
	req->done = auth_done;
	req->ctx = c;
	memcpy(req->user, user, ulen < AUTH_NAME_MAX ? ulen : AUTH_NAME_MAX);
	if (!anvil_auth_rate(c->srv->anvil, c->client, c->addr, clock_mono_us())) {
		metrics_inc(METRICS_CLIENT_AUTH_REFUSED);
		msg_warn("auth: client=[%s] sasl_username=%s status=refused (AUTH rate limit)",
			 c->addr, req->user);
		free(req);
		c->sync_auth = -1;		/* 454 once the hook returns */
		return;
	}
	c->auth = req;
	c->in_auth_hook = 1;
	if (plen > AUTH_PASS_MAX || c->srv->auth == NULL) {
		req->ok = 0;			/* cannot be right: refused unhashed, after the delay */
		auth_done(req);
	} else if (auth_cached(c->srv->auth, req, pass)) {
		req->ok = req->cached = 1;	/* this very user and password passed before */
		auth_done(req);
	} else {
		memcpy(req->pass, pass, plen);
		/* one check at a time per client: its others wait behind it, not before others */
		if (anvil_auth_begin(c->client, &c->auth_wait)) {
			c->auth_turn = 1;
			auth_submit(c->srv->auth, req);
		} else {
			c->auth_queued = 1;
		}
	}
	c->in_auth_hook = 0;
}

/*
 * conn_refuse_client - a client past its limit: 421 in the clear (none on
 * an implicit-TLS port, where it could not be read), and close
 */
static void conn_refuse_client(struct server *srv, const struct listener *l, int fd,
			       const char *addr, enum anvil_verdict v)
{
	char busy[512];
	int n;

	metrics_inc(v == ANVIL_COUNT ? METRICS_CLIENT_COUNT_REFUSED : METRICS_CLIENT_RATE_REFUSED);
	n = snprintf(busy, sizeof(busy), "421 4.7.0 %s Error: too many connections%s from %s\r\n",
		     srv->cf->hostname, v == ANVIL_RATE ? " a minute" : "", addr);
	if (!l->cf->tls_implicit && n > 0 && (size_t) n < sizeof(busy))
		(void) !write(fd, busy, (size_t) n);
	close(fd);
}

/* conn_accept - take new connections from a listener */
static void conn_accept(struct server *srv, struct listener *l)
{
	struct sockaddr_storage ss;
	struct anvil_client *client;
	enum anvil_verdict v;
	char addr[INET6_ADDRSTRLEN];
	socklen_t sl;
	struct conn *c;
	struct io *io;
	int fd, one = 1, relay_ok;

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
			static const char busy[] = "421 4.7.0 Too many connections, try again later\r\n";

			anvil_disconnect(srv->anvil, client);
			if (!l->cf->tls_implicit)	/* no 421 in the clear on a TLS port */
				(void) !write(fd, busy, sizeof(busy) - 1);
			close(fd);
			pace_refused(srv);
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
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
		ep_set(srv, EPOLL_CTL_ADD, fd, EPOLLIN, c);
		if (!io->ready)
			continue;		/* implicit TLS: the greeting follows the handshake */
		smtp_session_greet(c->s);
		conn_flush(c);
	}
}

/* conn_read - read what the client sent and process it */
static void conn_read(struct conn *c)
{
	ssize_t n;

	buf_reserve(&c->in, READ_CHUNK);
	n = io_read(c->io, c->in.data + c->in.len, READ_CHUNK);
	if (n == IO_AGAIN) {
		conn_flush(c);		/* the event may have been for output too */
		return;
	}
	if (n <= 0) {
		conn_lost(c, n == IO_ERROR ? c->io->err : NULL);
		return;
	}
	c->in.len += (size_t) n;
	if (conn_process(c) == 0)
		pace_input(c, (size_t) n);
}

/*
 * conn_event - epoll says the socket is ready. Hang-ups and errors are
 * found by reading. Input is read only while the engine takes it (a TLS
 * write waiting for EPOLLIN is retried by flushing, not by reading more),
 * and a TLS read waiting for EPOLLOUT is retried on it.
 */
static void conn_event(struct conn *c, uint32_t ev)
{
	if (!c->io->ready)
		conn_handshake(c);
	else if ((ev & (EPOLLHUP | EPOLLERR)) || ((ev & EPOLLIN) && conn_accepting(c))
		 || ((ev & EPOLLOUT) && c->io->read_wants == EPOLLOUT))
		conn_read(c);
	else {
		if (ev & EPOLLIN)	/* left in the set (conn_interest): now off */
			c->in_unwanted = 1;
		conn_flush(c);
	}
}

/* server_smtp_limits - the engine's limits from the configuration (start, SIGHUP) */
static void server_smtp_limits(struct smtp_config *sc, const struct conf *cf)
{
	sc->message_size = cf->limits.message_size;
	sc->max_rcpts = cf->limits.recipients;
	sc->bare_lf_reject = cf->limits.bare_lf_reject;
	sc->long_lines_reject = cf->limits.long_lines == CONF_LONG_LINES_REJECT;
	sc->nul_reject = !cf->limits.nul_pass;
	sc->hard_errors = cf->limits.hard_errors;
	sc->junk_commands = cf->limits.junk_commands;
	sc->out_max = OUT_MAX;
}

/* server_limits - what the configuration says of sessions and clients (start, SIGHUP) */
static void server_limits(struct server *srv)
{
	const struct conf *cf = srv->cf;
	size_t i;

	server_smtp_limits(&srv->smtp_cf, cf);
	for (i = 0; i < srv->n_ls; i++)	/* sessions point at these */
		server_smtp_limits(&srv->ls[i].smtp_cf, cf);
	anvil_set(srv->anvil, cf->limits.client_connections, cf->limits.client_connection_rate,
		  cf->limits.client_auth_rate, cf->limits.client_ipv6_prefix);
}

/*
 * server_load_secrets - certificate, key and users, read while still
 * privileged (before the privilege drop), so they may be root's alone
 */
static void server_load_secrets(struct server *srv)
{
	char err[512];

	if (srv->cf->tls_cert && tls_new(&srv->tls, srv->cf->tls_cert, srv->cf->tls_key,
					 srv->cf->tls_groups, err, sizeof(err)) < 0)
		msg_fatal("tls: %s", err);
	if (srv->cf->auth_users) {
		if (auth_users_load(&srv->users, srv->cf->auth_users, err, sizeof(err)) < 0)
			msg_fatal("auth: %s", err);
		msg_info("auth: %zu users from %s", auth_users_count(srv->users),
			 srv->cf->auth_users);
	}
}

/*
 * server_reload_conf - SIGHUP: read the configuration again and take what
 * can change while running: access.networks, limits, retry, log. The rest
 * (listeners, store, keys, upstream) needs a restart; a configuration
 * that does not load changes nothing.
 */
static void server_reload_conf(struct server *srv)
{
	const char *changed[CONF_RESTART_MAX];
	struct conf nc, *cf = srv->cf;
	struct conf_net *nets;
	size_t i, n;
	char err[512];

	if (conf_load(&nc, srv->conf_path, err, sizeof(err)) < 0) {
		msg_warn("reload: %s; keeping the configuration in use", err);
		return;
	}
	nets = cf->networks;			/* only this thread reads them */
	n = cf->n_networks;
	cf->networks = nc.networks;
	cf->n_networks = nc.n_networks;
	nc.networks = nets;
	nc.n_networks = n;
	for (i = 0, n = conf_restart_changed(cf, &nc, changed, CONF_RESTART_MAX); i < n; i++)
		msg_warn("reload: %s changed: it takes a restart; keeping the one in use",
			 changed[i]);
	cf->limits = nc.limits;
	cf->auth_cache_ttl = nc.auth_cache_ttl;
	server_limits(srv);
	if (srv->dl.reload)
		srv->dl.reload(srv->dl.arg, &nc);
	cf->log = nc.log;
	log_setup("idemrelay", cf->log.syslog, (enum log_level) cf->log.level);
	msg_info("reload: %s: %zu networks, message_size=%llu recipients=%d retry=%llds..%llds",
		 srv->conf_path ? srv->conf_path : "<default>", cf->n_networks,
		 (unsigned long long) cf->limits.message_size, cf->limits.recipients,
		 (long long) nc.retry.first, (long long) nc.retry.max);
	conf_free(&nc);
}

/* server_reload - SIGHUP: configuration, certificate and users; what fails to load is kept */
static void server_reload(struct server *srv)
{
	struct auth_users *u;
	char err[512];

	server_reload_conf(srv);
	if (srv->tls && tls_reload(srv->tls, err, sizeof(err)) < 0)
		msg_warn("reload: tls: %s; keeping the certificate in use (sha256=%s)", err,
			 tls_fingerprint(srv->tls));
	if (srv->cf->auth_users && srv->auth) {
		if (auth_users_load(&u, srv->cf->auth_users, err, sizeof(err)) < 0) {
			msg_warn("reload: auth: %s; keeping the users in use", err);
		} else {
			msg_info("reload: auth: %zu users from %s", auth_users_count(u),
				 srv->cf->auth_users);
			auth_set_users(srv->auth, u);
		}
		auth_cache_ttl(srv->auth, srv->cf->auth_cache_ttl * 1000000);
	}
}

/* server_new - set up everything but the sockets */
struct server *server_new(struct conf *cf, const char *conf_path, struct store *st)
{
	struct server *srv = xcalloc(1, sizeof(*srv));

	budget_setup();			/* before the threads: the thresholds are process-wide */
	srv->cf = cf;
	srv->conf_path = conf_path;
	srv->st = st;
	srv->smtp_cf.hostname = cf->hostname;
	srv->hooks.rcpt = on_rcpt;
	srv->hooks.message = submit_message;
	srv->hooks.auth = on_auth;
	srv->hooks.refused = on_refused;
	srv->commit_tag = TAG_COMMIT;
	srv->signal_tag = TAG_SIGNAL;
	srv->auth_tag = TAG_AUTH;
	srv->sigfd = -1;
	srv->dc = dupcount_new();
	srv->anvil = anvil_new();
	server_limits(srv);
	if ((srv->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0)
		msg_fatal("epoll_create1: %m");
	server_load_secrets(srv);
	return srv;
}

/* server_set_store - the store, opened after the listeners were bound, and its writer */
void server_set_store(struct server *srv, struct store *st, struct commit *cm)
{
	srv->st = st;
	srv->cm = cm;
}

/* server_dupcount - the duplicate counts, which the admin thread writes */
struct dupcount *server_dupcount(struct server *srv)
{
	return srv->dc;
}

/* server_set_delivery - what SIGHUP's settings mean to delivery; before server_run() */
void server_set_delivery(struct server *srv, const struct server_delivery *dl)
{
	srv->dl = *dl;
}

/* server_listen - bind every listener, block the signals we take by signalfd */
void server_listen(struct server *srv)
{
	sigset_t set;
	size_t i;

	srv->ls = xcalloc(srv->cf->n_listen, sizeof(*srv->ls));
	for (i = 0; i < srv->cf->n_listen; i++) {
		srv->ls[i].tag = TAG_LISTEN;
		srv->ls[i].cf = srv->cf->listen + i;
		srv->ls[i].smtp_cf = srv->smtp_cf;
		srv->ls[i].smtp_cf.starttls = srv->tls && !srv->ls[i].cf->tls_implicit;
		srv->ls[i].smtp_cf.starttls_required = srv->ls[i].cf->starttls_required;
		srv->ls[i].smtp_cf.auth = srv->users != NULL;
		srv->ls[i].smtp_cf.auth_required = srv->ls[i].cf->auth_required;
		srv->ls[i].smtp_cf.smtputf8 = srv->ls[i].cf->smtputf8;
		if ((srv->ls[i].cf->tls_implicit || srv->ls[i].cf->starttls_required) && !srv->tls)
			msg_fatal("listen %s port %d: TLS without tls { }", srv->ls[i].cf->address,
				  srv->ls[i].cf->port);
		srv->ls[i].fd = listen_tcp("listen", srv->ls[i].cf->address, srv->ls[i].cf->port, 1024);
		ep_set(srv, EPOLL_CTL_ADD, srv->ls[i].fd, EPOLLIN, srv->ls + i);
		msg_info("listening on %s port %d", srv->cf->listen[i].address, srv->cf->listen[i].port);
	}
	srv->n_ls = srv->cf->n_listen;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	if ((srv->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC)) < 0)
		msg_fatal("signalfd: %m");
	ep_set(srv, EPOLL_CTL_ADD, srv->sigfd, EPOLLIN, &srv->signal_tag);
}

/* server_stop - stop accepting; abort sessions that are not being committed */
static void server_stop(struct server *srv)
{
	struct conn *c, *next;
	size_t i;

	srv->stopping = clock_us();
	for (i = 0; i < srv->n_ls; i++) {
		close(srv->ls[i].fd);
		srv->ls[i].fd = -1;
	}
	for (c = srv->conns; c; c = next) {
		next = c->next;
		if (c->dead || c->req)
			continue;
		if (!c->io->ready) {	/* mid-handshake: nothing to say it on */
			conn_close(c);
			continue;
		}
		smtp_session_shutdown(c->s);
		conn_flush(c);
	}
}

/* on_signal - SIGTERM/SIGINT stop; SIGHUP reloads (in master's name) */
static void on_signal(struct server *srv)
{
	struct signalfd_siginfo si;
	const char *was = log_service("master");

	while (read(srv->sigfd, &si, sizeof(si)) == sizeof(si)) {
		if (si.ssi_signo == SIGHUP) {
			msg_info("reload: SIGHUP received");
			server_reload(srv);
			continue;
		}
		if (!srv->stopping) {
			msg_info("stopping on signal %u", si.ssi_signo);
			server_stop(srv);
		}
	}
	log_service(was);
}

/* server_run - the event loop */
int server_run(struct server *srv)
{
	struct epoll_event evs[256];
	int64_t last_sweep = clock_us();
	int i, n;

	log_service("smtpd");		/* the sessions', as Postfix's smtpd logs them */
	ep_set(srv, EPOLL_CTL_ADD, commit_fd(srv->cm), EPOLLIN, &srv->commit_tag);
	if (srv->users) {
		srv->auth = auth_start(srv->users, AUTH_THREADS);
		auth_cache_ttl(srv->auth, srv->cf->auth_cache_ttl * 1000000);
		srv->users = NULL;		/* the checking threads' now */
		ep_set(srv, EPOLL_CTL_ADD, auth_fd(srv->auth), EPOLLIN, &srv->auth_tag);
	}
	for (;;) {
		if (srv->stopping && srv->n_inflight == 0) {
			struct conn *c;

			/* every commit answered: say goodbye to whoever is left */
			for (c = srv->conns; c; c = c->next) {
				if (c->dead)
					continue;
				if (!c->io->ready) {
					conn_close(c);
					continue;
				}
				if (!smtp_session_closing(c->s))
					smtp_session_shutdown(c->s);
				conn_flush(c);
			}
			conn_reap(srv);
			if (srv->conns == NULL || clock_us() - srv->stopping > 10 * 1000000)
				break;
		}
		/* a delayed 535 is due within a second: look every 100ms */
		n = epoll_wait(srv->epfd, evs, 256, srv->n_auth_delayed ? 100 : 1000);
		if (n < 0 && errno != EINTR)
			msg_fatal("epoll_wait: %m");
		for (i = 0; i < n; i++) {
			enum tag *tag = evs[i].data.ptr;

			switch (*tag) {
			case TAG_LISTEN:
				if (!srv->stopping)
					conn_accept(srv, (struct listener *) tag);
				break;
			case TAG_SIGNAL:
				on_signal(srv);
				break;
			case TAG_COMMIT:
				commit_reap(srv->cm);
				break;
			case TAG_AUTH:
				auth_reap(srv->auth);
				break;
			case TAG_CONN:{
					struct conn *c = (struct conn *) tag;

					if (!c->dead)
						conn_event(c, evs[i].events);
					break;
				}
			}
		}
		if (srv->n_auth_delayed)
			auth_delayed(srv);
		if (srv->n_paused)
			budget_resume(srv);
		if (clock_us() - last_sweep >= 1000000) {
			last_sweep = clock_us();
			pace_sweep(srv);
			budget_trim(srv);
			anvil_sweep(srv->anvil, clock_mono_us());
		}
		conn_reap(srv);
	}
	auth_stop(srv->auth);		/* answers what is queued; sessions are not freed yet */
	srv->auth = NULL;
	log_service(NULL);
	return 0;
}

/* server_free - release the server */
void server_free(struct server *srv)
{
	size_t i;

	if (srv == NULL)
		return;
	while (srv->conns)
		conn_free(srv->conns);
	for (i = 0; i < srv->n_ls; i++)
		if (srv->ls[i].fd >= 0)
			close(srv->ls[i].fd);
	free(srv->ls);
	if (srv->sigfd >= 0)
		close(srv->sigfd);
	close(srv->epfd);
	auth_stop(srv->auth);
	auth_users_free(srv->users);
	tls_free(srv->tls);
	dupcount_free(srv->dc);
	anvil_free(srv->anvil);
	free(srv);
}
