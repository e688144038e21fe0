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
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "../smtp/smtp.h"
#include "../util/buf.h"
#include "../util/log.h"
#include "auth.h"
#include "commit.h"
#include "control.h"
#include "io.h"
#include "keys.h"
#include "metrics.h"
#include "qid.h"
#include "server.h"
#include "tls.h"

#define READ_CHUNK	65536
#define OUT_MAX		(256 * 1024)	/* unread replies before we stop reading */
#define AUTH_FAIL_DELAY	1000000		/* microseconds before a 535 goes out */
#define AUTH_THREADS	2		/* password checks in parallel */

enum tag { TAG_LISTEN, TAG_CONN, TAG_SIGNAL, TAG_COMMIT, TAG_AUTH };

struct listener {
	enum tag tag;			/* first: epoll data points here */
	int fd;
	const struct conf_listen *cf;	/* not owned */
	struct smtp_config smtp_cf;	/* the server's, with this listener's TLS and AUTH */
};

struct conn {
	enum tag tag;			/* first: epoll data points here */
	struct server *srv;		/* not owned */
	const struct listener *l;	/* not owned */
	struct io *io;			/* owned: the socket, plain or TLS; NULL once closed */
	struct smtp_session *s;		/* owned */
	struct buf in;			/* unconsumed input, owned */
	char addr[INET6_ADDRSTRLEN];
	int relay_ok;			/* client inside access.networks */
	int64_t last_active;		/* microseconds */
	uint32_t events;		/* epoll interest */
	struct commit_req *req;		/* in flight, owned */
	const char *sync_reply;		/* answer decided inside the message hook */
	char sync_buf[256];
	struct auth_req *auth;		/* password check in flight, owned */
	int64_t auth_due;		/* when the delayed 535 goes out, 0: none */
	int dead;			/* socket gone; free when req and auth return */
	struct conn *prev, *next;	/* server's list */
};

struct server {
	const struct conf *cf;		/* not owned */
	struct store *st;		/* not owned */
	struct deliver *dl;		/* not owned */
	struct commit *cm;		/* owned */
	struct smtp_config smtp_cf;
	struct smtp_hooks hooks;
	struct tls *tls;		/* owned; NULL without tls { } */
	struct auth_users *users;	/* owned until server_run() hands it to auth */
	struct auth *auth;		/* owned; checking threads, while running */
	size_t n_auth_delayed;		/* connections with auth_due set */
	int epfd, sigfd;
	struct listener *ls;		/* owned array */
	size_t n_ls;
	struct conn *conns;
	size_t n_conns;
	size_t n_inflight;		/* commit requests not yet answered */
	int64_t stopping;		/* when SIGTERM came, 0 while running */
	enum tag commit_tag, signal_tag, auth_tag;
};

/* now_us - wall clock in microseconds */
static int64_t now_us(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (int64_t) tv.tv_sec * 1000000 + tv.tv_usec;
}

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
	srv->n_conns--;
	if (c->auth_due)
		srv->n_auth_delayed--;
	smtp_session_free(c->s);
	buf_free(&c->in);
	free(c);
}

/*
 * conn_close - drop the socket. The struct is freed by conn_reap() at the
 * end of the loop iteration, once no commit request points at it: events
 * already fetched in this iteration may still name it.
 */
static void conn_close(struct conn *c)
{
	io_close(c->io);		/* TLS says goodbye; the socket leaves the epoll set */
	c->io = NULL;
	c->dead = 1;
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
	    && !smtp_session_starttls(c->s) && smtp_session_out(c->s)->len < OUT_MAX;
}

/*
 * conn_interest - during a handshake, what it waits for; else EPOLLIN while
 * accepting input, EPOLLOUT while output is pending. A TLS read may wait
 * for EPOLLOUT, and a TLS write for EPOLLIN.
 */
static void conn_interest(struct conn *c)
{
	uint32_t ev = 0;

	if (!c->io->ready) {
		ev = c->io->hs_wants;
	} else {
		if (conn_accepting(c))
			ev |= c->io->read_wants ? c->io->read_wants : EPOLLIN;
		if (smtp_session_out(c->s)->len)
			ev |= c->io->write_wants ? c->io->write_wants : EPOLLOUT;
	}
	if (ev != c->events) {
		ep_set(c->srv, EPOLL_CTL_MOD, c->io->fd, ev, c);
		c->events = ev;
	}
}

static int conn_starttls(struct conn *c);

/* conn_flush - write pending output; close when done and closing. 0, or -1 if closed */
static int conn_flush(struct conn *c)
{
	struct buf *out = smtp_session_out(c->s);
	ssize_t n;

	while (out->len) {
		n = io_write(c->io, out->data, out->len);
		if (n == IO_AGAIN)
			break;
		if (n < 0) {
			conn_close(c);
			return -1;
		}
		buf_consume(out, (size_t) n);
	}
	if (out->len == 0 && smtp_session_closing(c->s)) {
		conn_close(c);
		return -1;
	}
	/* the 220 is out in the clear: from here on the socket speaks TLS */
	if (out->len == 0 && smtp_session_starttls(c->s) && !smtp_session_tls(c->s))
		return conn_starttls(c);
	conn_interest(c);
	return 0;
}

/*
 * conn_process - feed buffered input; answers decided inside the hook
 * resume the session. TLS may hold decrypted input that no epoll event
 * will announce: it is read here while the engine takes input.
 */
static int conn_process(struct conn *c)
{
	size_t n;
	ssize_t got;

	for (;;) {
		n = smtp_session_feed(c->s, c->in.data, c->in.len);
		buf_consume(&c->in, n);
		if (c->sync_reply != NULL) {
			smtp_session_reply(c->s, c->sync_reply);
			c->sync_reply = NULL;
			continue;
		}
		if (c->in.len || !conn_accepting(c) || io_pending(c->io) == 0)
			break;
		buf_reserve(&c->in, READ_CHUNK);
		got = io_read(c->io, c->in.data + c->in.len, READ_CHUNK);
		if (got == IO_AGAIN)
			break;
		if (got <= 0) {
			conn_close(c);
			return -1;
		}
		c->in.len += (size_t) got;
	}
	return conn_flush(c);
}

/* conn_handshake - drive a TLS handshake; when done, the session starts over */
static int conn_handshake(struct conn *c)
{
	char desc[128];
	int r = io_handshake(c->io);

	if (r < 0) {
		msg_info("tls: handshake failed from [%s]: %s", c->addr, c->io->err);
		conn_close(c);
		return -1;
	}
	if (r == 0) {
		conn_interest(c);
		return 0;
	}
	io_describe(c->io, desc, sizeof(desc));
	msg_info("tls: client=[%s] %s", c->addr, desc);
	c->last_active = now_us();
	smtp_session_set_tls(c->s);
	if (c->l->cf->tls_implicit)
		smtp_session_greet(c->s);
	return conn_process(c);
}

/*
 * conn_starttls - the 220 is flushed: TLS over the same socket. The input
 * read before is gone (the engine dropped it); what the client sends now
 * is its ClientHello, read by OpenSSL itself.
 */
static int conn_starttls(struct conn *c)
{
	int fd = io_plain_release(c->io);

	buf_reset(&c->in);
	if ((c->io = tls_io_new(c->srv->tls, fd)) == NULL) {
		c->dead = 1;			/* tls_io_new closed the socket */
		return -1;
	}
	c->last_active = now_us();
	return conn_handshake(c);
}

/* log_rcpts - " to=<a> to=<b>" for a log line */
static void log_rcpts(struct buf *b, const struct store_msg *m, const uint8_t *skip, int want)
{
	size_t i;

	for (i = 0; i < m->n_rcpts; i++)
		if (skip == NULL || skip[i] == want)
			buf_printf(b, " to=<%s>", m->rcpts[i].addr);
}

/*
 * A submission: the commit request and what the event loop keeps beside
 * it. req comes first, so the commit callback's pointer is the submission.
 */
struct submission {
	struct commit_req req;
	struct conn *c;			/* not owned */
	char keylog[KEYS_MAX_LEN + 32];	/* "key=K (source)", logged once */
	int64_t t0;			/* end of DATA, for the accept latency */
};

/* req_free - release a submission and what it owns */
static void req_free(struct commit_req *req)
{
	size_t i;

	if (req == NULL)
		return;
	for (i = 0; i < req->msg.n_rcpts; i++) {
		free(req->msg.rcpts[i].addr);
		free(req->msg.rcpts[i].orcpt);
	}
	free(req->msg.rcpts);
	free(req->msg.from);
	free(req->msg.user);
	free(req->msg.envid);
	free(req->msg.client);
	free(req->msg.data);
	free(req->hashes);
	free(req->claimed);
	free((struct submission *) req);
}

/* answer - the SMTP reply and the log line for a decided request */
static const char *answer(struct conn *c, struct commit_req *req, const char *keylog,
			  char *reply, size_t len)
{
	struct buf line = BUF_INIT;

	metrics_answered(req->outcome, req->shadow_hit, now_us() - ((struct submission *) req)->t0);
	control_answered(req->outcome, req->orig_qid);
	switch (req->outcome) {
	case COMMIT_QUEUED:
	case COMMIT_PARTIAL:
		snprintf(reply, len, "250 2.0.0 Ok: queued as %s", req->msg.qid);
		buf_printf(&line, "%s: client=%s %s from=<%s>", req->msg.qid,
			   req->msg.client, keylog, req->msg.from);
		log_rcpts(&line, &req->msg, req->claimed, 0);
		if (req->msg.user)
			buf_printf(&line, " sasl_username=%s", req->msg.user);
		buf_printf(&line, " size=%zu status=queued", req->msg.data_len);
		if (req->shadow_hit)
			buf_printf(&line, " shadow=duplicate-of-%s", req->orig_qid);
		msg_info("%s", line.data);
		if (req->outcome == COMMIT_PARTIAL) {
			buf_reset(&line);
			buf_printf(&line, "%s: client=%s from=<%s>", req->orig_qid,
				   req->msg.client, req->msg.from);
			log_rcpts(&line, &req->msg, req->claimed, 1);
			buf_printf(&line, " status=duplicate partial=%s", req->msg.qid);
			msg_info("%s", line.data);
		}
		break;
	case COMMIT_DUPLICATE:
		snprintf(reply, len, "250 2.0.0 Ok: queued as %s (duplicate)", req->orig_qid);
		buf_printf(&line, "%s: client=%s %s from=<%s>", req->orig_qid,
			   req->msg.client, keylog, req->msg.from);
		log_rcpts(&line, &req->msg, NULL, 0);
		buf_printf(&line, " status=duplicate");
		msg_info("%s", line.data);
		break;
	case COMMIT_MISMATCH:
		snprintf(reply, len, "554 5.7.0 idempotency key already used for different "
			 "content (queued as %s)", req->orig_qid);
		msg_info("%s: client=%s %s from=<%s> status=mismatch", req->orig_qid,
			 req->msg.client, keylog, req->msg.from);
		break;
	case COMMIT_FAILED:
		snprintf(reply, len, "452 4.3.1 Insufficient system storage");
		msg_warn("%s: client=%s from=<%s> status=refused store: %s", req->msg.qid,
			 req->msg.client, req->msg.from, store_strerror(req->error));
		break;
	}
	(void) c;
	buf_free(&line);
	return reply;
}

/* commit_done - a commit answered: reply, and resume the session */
static void commit_done(struct commit_req *req)
{
	struct submission *sub = (struct submission *) req;
	struct conn *c = sub->c;
	char reply[256];

	c->srv->n_inflight--;
	c->req = NULL;
	answer(c, req, sub->keylog, reply, sizeof(reply));
	req_free(req);
	if (c->dead)
		return;
	smtp_session_reply(c->s, reply);
	conn_process(c);
}

/* received_header - the one header idemrelay adds */
static void received_header(struct buf *b, const struct server *srv, const struct conn *c,
			    const char *helo, const char *qid, const struct smtp_tx *tx)
{
	char date[64];
	time_t now = time(NULL);
	struct tm tm;

	gmtime_r(&now, &tm);
	strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S +0000", &tm);
	/* RFC 3848: ESMTPS over TLS, ESMTPSA authenticated too (AUTH needs TLS here) */
	buf_printf(b, "Received: from %s ([%s])\r\n\tby %s (idemrelay) with %s id %s",
		   *helo ? helo : "unknown", c->addr, srv->cf->hostname,
		   !smtp_session_tls(c->s) ? "ESMTP" : smtp_session_user(c->s) ? "ESMTPSA" : "ESMTPS",
		   qid);
	if (tx->n_rcpts == 1)
		buf_printf(b, "\r\n\tfor <%s>", tx->rcpts[0].addr);
	buf_printf(b, "; %s\r\n", date);
}

/* same_rcpt - one mailbox given twice (domain case folded) */
static int same_rcpt(const char *a, const char *b)
{
	const char *da = strrchr(a, '@'), *db = strrchr(b, '@');

	if (da == NULL || db == NULL)
		return strcmp(a, b) == 0;
	return da - a == db - b && strncmp(a, b, (size_t) (da - a)) == 0
	    && strcasecmp(da, db) == 0;
}

/* submission_new - envelope, recipients (each once) and claim hashes */
static struct submission *submission_new(struct conn *c, const struct smtp_tx *tx,
					 const struct keys_result *kr)
{
	const struct conf *cf = c->srv->cf;
	struct submission *sub = xcalloc(1, sizeof(*sub));
	struct commit_req *req = &sub->req;
	struct store_msg *m = &req->msg;
	const char *user = smtp_session_user(c->s);
	const char *scope = cf->keys.scope_user && user ? user : "";	/* per-tenant keys */
	size_t i, j;

	sub->c = c;
	req->ctx = sub;
	req->done = commit_done;
	req->shadow = cf->keys.shadow;
	req->mismatch_accept = cf->keys.mismatch_accept;
	req->ttl = cf->store.key_ttl * 1000000;
	memcpy(req->fingerprint, kr->fingerprint, HASH_LEN);
	m->from = xstrdup(tx->from);
	m->user = user ? xstrdup(user) : NULL;
	m->envid = tx->envid ? xstrdup(tx->envid) : NULL;
	m->ret = tx->ret;
	m->body = tx->body;
	m->rcpts = xcalloc(tx->n_rcpts, sizeof(*m->rcpts));
	for (i = 0; i < tx->n_rcpts; i++) {
		for (j = 0; j < m->n_rcpts && !same_rcpt(m->rcpts[j].addr, tx->rcpts[i].addr); j++)
			 /* void */ ;
		if (j < m->n_rcpts)
			continue;
		m->rcpts[m->n_rcpts].addr = xstrdup(tx->rcpts[i].addr);
		m->rcpts[m->n_rcpts].notify = tx->rcpts[i].notify;
		m->rcpts[m->n_rcpts].orcpt = tx->rcpts[i].orcpt ? xstrdup(tx->rcpts[i].orcpt) : NULL;
		m->n_rcpts++;
	}
	req->claimed = xcalloc(m->n_rcpts ? m->n_rcpts : 1, 1);
	if (kr->source != KEYS_NONE) {
		req->hashes = xcalloc(m->n_rcpts ? m->n_rcpts : 1, sizeof(*req->hashes));
		for (i = 0; i < m->n_rcpts; i++)
			keys_claim_hash(scope, kr->key, m->rcpts[i].addr, req->hashes[i]);
		keys_index_hash(kr->key, req->keyhash);
	}
	snprintf(sub->keylog, sizeof(sub->keylog), "key=%s (%s)",
		 kr->source == KEYS_NONE ? "none" : kr->key, keys_source_name(kr->source));
	return sub;
}

/* fast_duplicate - answer a duplicate or mismatch from a read transaction; 1 if answered */
static int fast_duplicate(struct conn *c, struct commit_req *req)
{
	size_t n = req->msg.n_rcpts;
	struct store_claim *claims;
	int *found;
	int answered = 0;

	if (req->hashes == NULL || req->shadow)
		return 0;
	claims = xcalloc(n, sizeof(*claims));
	found = xcalloc(n, sizeof(*found));
	if (store_claims_get(c->srv->st, (const uint8_t (*)[STORE_HASH_LEN]) req->hashes, n,
			     now_us(), claims, found) == 0) {
		commit_decide(req, found, claims);
		answered = req->outcome == COMMIT_DUPLICATE || req->outcome == COMMIT_MISMATCH;
	}
	free(claims);
	free(found);
	return answered;
}

/* on_message - end of DATA: derive the key, answer duplicates, else commit */
static void on_message(void *ctx, struct smtp_session *s, struct smtp_tx *tx)
{
	struct conn *c = ctx;
	struct server *srv = c->srv;
	struct keys_result kr;
	struct submission *sub;
	struct buf data = BUF_INIT;
	struct buf received = BUF_INIT;
	const char *helo = smtp_session_helo(s);
	int64_t t0 = now_us();

	metrics_inc(METRICS_SUBMISSIONS);
	if (keys_derive(srv->cf, tx->data.data ? tx->data.data : "", tx->data.len,
			tx->from, tx->envid, &kr) < 0) {
		msg_info("NOQUEUE: client=%s[%s] from=<%s> status=reject (%s)",
			 helo, c->addr, tx->from, kr.error);
		c->sync_reply = kr.error;
		return;
	}
	sub = submission_new(c, tx, &kr);
	sub->t0 = t0;
	buf_printf(&received, "%s [%s]", *helo ? helo : "unknown", c->addr);
	sub->req.msg.client = xstrndup(received.data, received.len);
	if (fast_duplicate(c, &sub->req)) {
		answer(c, &sub->req, sub->keylog, c->sync_buf, sizeof(c->sync_buf));
		c->sync_reply = c->sync_buf;
		req_free(&sub->req);
		buf_free(&received);
		return;
	}
	qid_next(sub->req.msg.qid);
	buf_reset(&received);
	received_header(&received, srv, c, helo, sub->req.msg.qid, tx);
	keys_rewrite(&data, received.data, tx->data.data ? tx->data.data : "", tx->data.len, &kr);
	buf_free(&received);
	sub->req.msg.data = data.data;
	sub->req.msg.data_len = data.len;
	c->req = &sub->req;
	srv->n_inflight++;
	commit_submit(srv->cm, &sub->req);
}

/* on_rcpt - relay only for access.networks and AUTH users */
static const char *on_rcpt(void *ctx, const struct smtp_tx *tx, const char *addr)
{
	struct conn *c = ctx;
	static __thread char reply[SMTP_LINE_MAX + 64];

	(void) tx;
	if (c->relay_ok || smtp_session_user(c->s))
		return NULL;
	snprintf(reply, sizeof(reply), "554 5.7.1 <%.300s>: Relay access denied", addr);
	msg_info("NOQUEUE: reject: RCPT from [%s]: 554 5.7.1 <%.300s>: Relay access denied",
		 c->addr, addr);
	return reply;
}

/* auth_done - a password check came back: 235 now, 535 after the delay */
static void auth_done(struct auth_req *req)
{
	struct conn *c = req->ctx;

	c->auth = NULL;
	if (req->ok)
		msg_info("auth: client=[%s] sasl_username=%s status=ok", c->addr, req->user);
	else
		msg_warn("auth: client=[%s] sasl_username=%s status=failed", c->addr, req->user);
	if (!c->dead && req->ok) {
		smtp_session_auth_reply(c->s, 1);
		conn_process(c);
	} else if (!c->dead) {
		c->auth_due = now_us() + AUTH_FAIL_DELAY;
		c->srv->n_auth_delayed++;
	}
	free(req);
}

/* auth_delayed - send the 535s whose delay is over */
static void auth_delayed(struct server *srv)
{
	struct conn *c, *next;
	int64_t now = now_us();

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
	if (plen > AUTH_PASS_MAX || c->srv->auth == NULL) {
		req->ok = 0;			/* cannot be right: refused after the delay */
		c->auth = req;
		auth_done(req);
		return;
	}
	memcpy(req->pass, pass, plen);
	c->auth = req;
	auth_submit(c->srv->auth, req);
}

/* conn_accept - take new connections from a listener */
static void conn_accept(struct server *srv, struct listener *l)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	struct conn *c;
	struct io *io;
	int fd, one = 1;

	for (;;) {
		sl = sizeof(ss);
		fd = accept4(l->fd, (struct sockaddr *) &ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				msg_warn("accept: %m");
			return;
		}
		if (srv->n_conns >= (size_t) srv->cf->limits.connections) {
			static const char busy[] = "421 4.7.0 Too many connections, try again later\r\n";

			if (!l->cf->tls_implicit)	/* no 421 in the clear on a TLS port */
				(void) !write(fd, busy, sizeof(busy) - 1);
			close(fd);
			msg_warn("connection limit %d reached", srv->cf->limits.connections);
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		io = l->cf->tls_implicit ? tls_io_new(srv->tls, fd) : io_plain_new(fd);
		if (io == NULL)
			continue;			/* logged; the socket is closed */
		c = xcalloc(1, sizeof(*c));
		c->tag = TAG_CONN;
		c->srv = srv;
		c->l = l;
		c->io = io;
		c->last_active = now_us();
		if (ss.ss_family == AF_INET6)
			inet_ntop(AF_INET6, &((struct sockaddr_in6 *) &ss)->sin6_addr, c->addr, sizeof(c->addr));
		else
			inet_ntop(AF_INET, &((struct sockaddr_in *) &ss)->sin_addr, c->addr, sizeof(c->addr));
		c->relay_ok = conf_net_match(srv->cf, (struct sockaddr *) &ss);
		c->s = smtp_session_new(&l->smtp_cf, &srv->hooks, c);
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
		if (n == IO_ERROR)
			msg_debug("lost connection from [%s]: %s", c->addr, c->io->err);
		conn_close(c);
		return;
	}
	c->in.len += (size_t) n;
	c->last_active = now_us();
	conn_process(c);
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
	else
		conn_flush(c);
}

/* conn_timeouts - drop clients idle past command_timeout or data_timeout */
static void conn_timeouts(struct server *srv)
{
	struct conn *c, *next;
	int64_t now = now_us(), limit;

	for (c = srv->conns; c; c = next) {
		next = c->next;
		if (c->dead || smtp_session_waiting(c->s))
			continue;
		limit = smtp_session_in_data(c->s) ? srv->cf->limits.data_timeout
		    : srv->cf->limits.command_timeout;
		if (now - c->last_active < limit * 1000000)
			continue;
		if (!c->io->ready) {	/* nothing can be said mid-handshake */
			msg_info("timeout during TLS handshake from [%s]", c->addr);
			conn_close(c);
			continue;
		}
		msg_info("timeout after %s from [%s]",
			 smtp_session_in_data(c->s) ? "DATA" : "command", c->addr);
		smtp_session_timeout(c->s);
		conn_flush(c);
	}
}

/*
 * server_load_secrets - certificate, key and users, read while still
 * privileged (before the privilege drop), so they may be root's alone
 */
static void server_load_secrets(struct server *srv)
{
	char err[512];

	if (srv->cf->tls_cert && tls_new(&srv->tls, srv->cf->tls_cert, srv->cf->tls_key,
					 err, sizeof(err)) < 0)
		msg_fatal("tls: %s", err);
	if (srv->cf->auth_users) {
		if (auth_users_load(&srv->users, srv->cf->auth_users, err, sizeof(err)) < 0)
			msg_fatal("auth: %s", err);
		msg_info("auth: %zu users from %s", auth_users_count(srv->users),
			 srv->cf->auth_users);
	}
}

/* server_reload - SIGHUP: new certificate and users; what fails to load is kept as it was */
static void server_reload(struct server *srv)
{
	struct auth_users *u;
	char err[512];

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
	}
}

/* server_new - set up everything but the sockets */
struct server *server_new(const struct conf *cf, struct store *st)
{
	struct server *srv = xcalloc(1, sizeof(*srv));

	srv->cf = cf;
	srv->st = st;
	srv->smtp_cf.hostname = cf->hostname;
	srv->smtp_cf.message_size = cf->limits.message_size;
	srv->smtp_cf.max_rcpts = cf->limits.recipients;
	srv->smtp_cf.bare_lf_reject = cf->limits.bare_lf_reject;
	srv->hooks.rcpt = on_rcpt;
	srv->hooks.message = on_message;
	srv->hooks.auth = on_auth;
	srv->commit_tag = TAG_COMMIT;
	srv->signal_tag = TAG_SIGNAL;
	srv->auth_tag = TAG_AUTH;
	srv->sigfd = -1;
	if ((srv->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0)
		msg_fatal("epoll_create1: %m");
	server_load_secrets(srv);
	return srv;
}

/* committed - a message is durable: hand it to delivery (writer thread) */
static void committed(void *arg, const char *qid)
{
	struct server *srv = arg;

	if (srv->dl)
		deliver_enqueue(srv->dl, qid);
}

/* server_set_store - the store, opened after the listeners were bound */
void server_set_store(struct server *srv, struct store *st)
{
	srv->st = st;
}

/* server_set_deliver - where committed messages go */
void server_set_deliver(struct server *srv, struct deliver *dl)
{
	srv->dl = dl;
}

/* listen_one - bind one listener */
static int listen_one(const struct conf_listen *l)
{
	struct sockaddr_storage ss;
	struct sockaddr_in *sin = (struct sockaddr_in *) &ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *) &ss;
	socklen_t sl;
	int fd, one = 1;

	memset(&ss, 0, sizeof(ss));
	if (inet_pton(AF_INET, l->address, &sin->sin_addr) == 1) {
		sin->sin_family = AF_INET;
		sin->sin_port = htons((uint16_t) l->port);
		sl = sizeof(*sin);
	} else if (inet_pton(AF_INET6, l->address, &sin6->sin6_addr) == 1) {
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons((uint16_t) l->port);
		sl = sizeof(*sin6);
	} else {
		msg_fatal("listen: bad address %s", l->address);
	}
	if ((fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0)
		msg_fatal("socket: %m");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ss.ss_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *) &ss, sl) < 0)
		msg_fatal("bind %s port %d: %m", l->address, l->port);
	if (listen(fd, 1024) < 0)
		msg_fatal("listen %s port %d: %m", l->address, l->port);
	return fd;
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
		if ((srv->ls[i].cf->tls_implicit || srv->ls[i].cf->starttls_required) && !srv->tls)
			msg_fatal("listen %s port %d: TLS without tls { }", srv->ls[i].cf->address,
				  srv->ls[i].cf->port);
		srv->ls[i].fd = listen_one(srv->cf->listen + i);
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

	srv->stopping = now_us();
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

/* on_signal - SIGTERM/SIGINT stop; SIGHUP reloads */
static void on_signal(struct server *srv)
{
	struct signalfd_siginfo si;

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
}

/* server_run - the event loop */
int server_run(struct server *srv)
{
	struct epoll_event evs[256];
	int64_t last_sweep = now_us();
	int i, n;

	srv->cm = commit_start(srv->st, committed, srv);
	ep_set(srv, EPOLL_CTL_ADD, commit_fd(srv->cm), EPOLLIN, &srv->commit_tag);
	if (srv->users) {
		srv->auth = auth_start(srv->users, AUTH_THREADS);
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
			if (srv->conns == NULL || now_us() - srv->stopping > 10 * 1000000)
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
		if (now_us() - last_sweep >= 1000000) {
			last_sweep = now_us();
			conn_timeouts(srv);
		}
		conn_reap(srv);
	}
	commit_stop(srv->cm);
	srv->cm = NULL;
	auth_stop(srv->auth);		/* answers what is queued; sessions are not freed yet */
	srv->auth = NULL;
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
	free(srv);
}
