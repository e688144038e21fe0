/*
 * NAME
 *	deliver_smtp 3
 * SUMMARY
 *	delivery upstream with libesmtp: one connection per batch
 * DESCRIPTION
 *	deliver_smtp_batch() puts every job of a batch into one libesmtp
 *	session (one smtp_add_message() each), so they go over one
 *	connection, and tries upstream.hosts in order until one accepts a
 *	connection (each host's addresses in resolver order).
 *
 *	Per message: the envelope sender, the queued recipients, DSN (RET,
 *	ENVID per message; NOTIFY, ORCPT per recipient), BODY=8BITMIME,
 *	SIZE (the stored size, which is what goes out). The content is read
 *	from the stored data by xmsg_read(), in chunks, after a throw-away
 *	header block of our own: libesmtp 1.1.0 edits the header block of
 *	every message (adds Date:, From:, Message-Id:, strips Return-Path:,
 *	drops repeated headers) and cannot be told not to, so it gets one to
 *	edit, and takes the stored message, headers and all, for body, which
 *	it sends unchanged. The bridge's filter (deliver_filter.h) cuts that
 *	block out of the stream, from where xmsg_read()'s rewind (libesmtp
 *	calls it after the 354, before the content) says the content starts,
 *	and hides CHUNKING from libesmtp, which would otherwise send BDAT. When libesmtp asks past the end, the
 *	final dot is the next thing it writes, so that is where the inflight
 *	mark is made durable. If that fails, xmsg_read() sets errno, which
 *	makes libesmtp drop the connection before the final dot.
 *
 *	Whether the final dot was answered is known from the
 *	SMTP_EV_MESSAGESENT event, not from the transfer status: after a
 *	timeout that status still holds the 354 of DATA. An xmsg goes
 *	through explicit states:
 *
 *	    ENVELOPE -> CONTENT -> MARKED -> REPLIED	normal
 *	    ENVELOPE or CONTENT -> REFUSED		DATA refused
 *	    CONTENT -> NOMARK				mark not written: no dot
 *	    CONTENT -> LOST				a write failed: no mark, no dot
 *	    MARKED -> CUT				the filter refused: no dot
 *	    MARKED -> UNACKED				the dot never reached the peer
 *
 *	and deliver_classify() turns state and replies into outcomes.
 *
 *	UNACKED: a message marked but unanswered is ambiguous only if its
 *	final dot reached the server. The bridge knows (deliver_bridge.h):
 *	it writes each message's content up to its dot and notes where the
 *	dot ended in the TCP stream, and when the upstream side ends
 *	(reset, closed, timed out) it checks whether the peer's TCP had
 *	acknowledged that far. A dot never written upstream, or still
 *	unacknowledged then, did not arrive: a plain deferral, whichever
 *	upstream.ambiguous says (SPEC section 5).
 *
 *	LOST: libesmtp ignores write errors, so a server that hangs up in
 *	the middle of the content would otherwise look, at the end, like
 *	one that may have the whole message. The delivery threads block
 *	SIGPIPE; a pending SIGPIPE at the end of the content says a write
 *	failed, and the attempt is simply deferred. A message small enough
 *	to sit in the socket buffers goes out with its final dot before any
 *	write can fail: whether a hang-up then is ambiguous (Postfix:
 *	"message may be sent more than once") is the bridge's to say
 *	(UNACKED above).
 *
 *	SMTPUTF8 (RFC 6531), which libesmtp 1.1.0 does not know: a message
 *	submitted with it goes out with it where the upstream offers it (the
 *	bridge's filter appends it to the MAIL line, deliver_filter.h). Where
 *	the upstream does not, a message that needs it (a UTF-8 address in
 *	the envelope, or UTF-8 in its header block) bounces 5.6.7, and one
 *	that does not (all ASCII there) goes out without it, as Postfix does.
 *	The monitor reads the EHLO reply; when it lacks SMTPUTF8 and the batch
 *	holds a message that needs it, the bridge is cut before the next
 *	command (nothing of any message was sent), those messages bounce, and
 *	the rest of the batch is run again, as below for 8BITMIME.
 *
 *	If the upstream does not offer 8BITMIME, libesmtp refuses the whole
 *	session when any message asks for BODY=8BITMIME; the batch is then
 *	run again without BODY= (the content is sent unchanged, as Postfix
 *	does with MIME conversion disabled).
 *
 *	The bridge, TLS and AUTH (xsess_security, xsess_connect,
 *	deliver_bridge.h, deliver_tls.h, deliver_auth.h). Every connection
 *	goes through the bridge: it connects (within upstream.timeout, to
 *	any address), and with upstream.tls = "starttls" (required, never
 *	opportunistic) or "implicit" establishes TLS (1.2+, certificate and
 *	host name verified against the system CAs unless upstream.tls_verify
 *	= false), then hands libesmtp a plain loopback connection: libESMTP
 *	1.1.0 has no implicit TLS and its STARTTLS has bugs we cannot work
 *	around (deliver_tls.c). A host without STARTTLS, or with a
 *	certificate that fails, is a failed address, and the next one is
 *	tried. upstream.user logs in with libesmtp's SASL client (PLAIN,
 *	LOGIN), only ever over TLS. The guard sees each command before
 *	libesmtp writes it: MAIL before a successful AUTH cuts the bridge
 *	first, so that nothing more is forwarded, and such a batch is
 *	deferred with nothing sent. A failed AUTH is deferred (4.7.8), not
 *	bounced, as with Postfix's default smtp_sasl_auth_soft_bounce.
 * BUGS
 *	A session that failed on AUTH is deferred without trying the next
 *	host: the credentials are the same there.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <auth-client.h>		/* before libesmtp.h: smtp_auth_set_context() */
#include <libesmtp.h>

#include "../../smtp/smtp.h"
#include "../../util/buf.h"
#include "../../util/log.h"
#include "deliver_auth.h"
#include "deliver_bridge.h"
#include "deliver_filter.h"
#include "../deliver_impl.h"
#include "deliver_tls.h"

#define XMSG_CHUNK	65536		/* bytes handed to libesmtp per callback */
#define XSESS_MAX_ADDRS	8		/* addresses tried per upstream host */

/* the header block libesmtp edits instead of ours; the bridge's filter cuts it */
static const char xmsg_block[] = DELIVER_FILTER_SENTINEL "\r\n";

enum xmsg_state {
	XMSG_ENVELOPE,			/* added to the session, no content read yet */
	XMSG_CONTENT,			/* libesmtp is reading the content */
	XMSG_MARKED,			/* end of content: mark durable, final dot follows */
	XMSG_NOMARK,			/* mark not written: transfer abandoned before the dot */
	XMSG_LOST,			/* a write failed first: abandoned before the dot */
	XMSG_REPLIED,			/* reply to the final dot read */
	XMSG_REFUSED,			/* DATA refused before the end */
	XMSG_CUT,			/* marked, but the bridge refused the content: no dot */
	XMSG_UNACKED,			/* marked, but the dot never reached the peer's TCP */
};

static const char *const xmsg_state_name[] = {
	"envelope", "content", "marked", "nomark", "lost", "replied", "refused", "cut",
	"unacked",
};

struct xsess;

/* one message in a libesmtp session */
struct xmsg {
	struct xsess *xs;		/* not owned */
	struct deliver_job *job;	/* not owned */
	smtp_message_t sm;		/* owned by the libesmtp session */
	smtp_recipient_t *sr;		/* owned array, by m.rcpts index; NULL if not sent */
	enum xmsg_state state;
	int block_fed;			/* xmsg_block given since the last rewind */
	size_t pos;			/* next byte of m.data to feed */
	unsigned dot_nth;		/* MARKED: its dot is this connection's nth */
	int collected;			/* its results are in job->res */
};

/* one libesmtp session over a batch */
struct xsess {
	struct deliver *d;		/* not owned */
	smtp_session_t s;		/* owned */
	struct xmsg *msgs;		/* owned array */
	struct deliver_job **jobs;	/* not owned; msgs[i].job is jobs[i] */
	size_t n;
	int body8;			/* pass BODY=8BITMIME on */
	int any8;			/* some message asked for it */
	int no8bit;			/* upstream said it has no 8BITMIME */
	unsigned char *utf8_want;	/* owned, per message: declared SMTPUTF8 */
	int utf8_needed;		/* some message needs SMTPUTF8 (xmsg_needs_utf8) */
	int in_ehlo;			/* libesmtp wrote EHLO, its reply is being read */
	int utf8_seen;			/* that reply listed SMTPUTF8 */
	int no_utf8;			/* it did not, and utf8_needed: bridge cut */
	int connected;			/* a session ran with relay below */
	char relay[DELIVER_RELAY_MAX];	/* "host[ip]:port" */
	char host[256];			/* upstream host name of relay */
	char why[DELIVER_REPLY_MAX];	/* why no session ran */
	char why_dsn[DELIVER_DSN_SIZE];
	char error[128];		/* libesmtp's error after the session */
	char last_reply[256];		/* last line read from the server */
	unsigned dots;			/* messages marked on this connection */
	char ended[256];		/* how the bridge saw the upstream end; "" if not */
	int timed_out;			/* the bridge's reply deadline passed */

	/* upstream TLS and AUTH (deliver_tls.h, deliver_auth.h) */
	SSL_CTX *tls_ctx;		/* owned; NULL with upstream.tls = "none" */
	auth_context_t auth;		/* owned; NULL without upstream.user */
	struct deliver_bridge *bridge;	/* owned; this connection attempt's */
	struct deliver_auth_guard guard;	/* this connection's */
};

/* upstream_timeout_ms - upstream.timeout for libesmtp and the bridge: 1 s to INT_MAX ms */
static int upstream_timeout_ms(const struct conf *c)
{
	if (c->upstream.timeout >= INT_MAX / 1000)
		return INT_MAX;
	return c->upstream.timeout < 1 ? 1000 : (int) c->upstream.timeout * 1000;
}

/* xmsg_enter - change a message's state, and say so at debug level */
static void xmsg_enter(struct xmsg *x, enum xmsg_state to)
{
	if (log_enabled(LOG_LEVEL_DEBUG))
		msg_debug("%s: smtp %s -> %s", x->job->m.qid, xmsg_state_name[x->state],
			  xmsg_state_name[to]);
	x->state = to;
}

/*
 * xsess_broken_pipe - did a write on the upstream connection fail since
 * the last call? libesmtp ignores write errors, but the delivery threads
 * block SIGPIPE, so a write on a connection the server has closed
 * leaves one pending for this thread (Linux never discards a blocked
 * signal, even an ignored one). Taking it clears it.
 */
static int xsess_broken_pipe(void)
{
	struct timespec zero = { 0, 0 };
	sigset_t set;
	int seen = 0;

	sigemptyset(&set);
	sigaddset(&set, SIGPIPE);
	while (sigtimedwait(&set, NULL, &zero) == SIGPIPE)
		seen = 1;
	return seen;
}

/*
 * xmsg_read - libesmtp's message callback. len NULL: rewind, which the
 * bridge is told of (deliver_bridge_rewind). Otherwise
 * the next chunk, or NULL at the end, where the inflight mark is set
 * (once; libesmtp may ask past the end more than once).
 */
static const char *xmsg_read(void **ctx, int *len, void *arg)
{
	struct xmsg *x = arg;
	const struct store_msg *m = &x->job->m;
	int saved = errno, err;
	size_t n;

	(void) ctx;
	if (len == NULL) {
		/* after the 354, before a byte of content: the filter's cut starts here */
		x->pos = 0;
		x->block_fed = 0;
		deliver_bridge_rewind(x->xs->bridge);
		return NULL;
	}
	if (x->state == XMSG_ENVELOPE)
		xmsg_enter(x, XMSG_CONTENT);
	if (!x->block_fed) {
		x->block_fed = 1;
		*len = (int) (sizeof(xmsg_block) - 1);
		return xmsg_block;
	}
	if (x->pos < m->data_len) {
		n = m->data_len - x->pos;
		if (n > XMSG_CHUNK)
			n = XMSG_CHUNK;
		*len = (int) n;
		x->pos += n;
		return m->data + x->pos - n;
	}
	*len = 0;
	if (x->state == XMSG_CONTENT && (xsess_broken_pipe() || x->xs->guard.cut)) {
		/* the server is gone before the end, or we cut it: no mark, and no dot */
		xmsg_enter(x, XMSG_LOST);
	} else if (x->state == XMSG_CONTENT) {
		if ((err = deliver_mark(x->xs->d, m->qid, x->xs->jobs, x->xs->n)) == 0) {
			x->dot_nth = ++x->xs->dots;
			xmsg_enter(x, XMSG_MARKED);
		} else {
			msg_error("%s: cannot set the inflight mark: %s; abandoning the transfer"
				  " before the final dot", m->qid, store_strerror(err));
			xmsg_enter(x, XMSG_NOMARK);
		}
	}
	/* libesmtp checks errno after reading: non-zero drops the connection */
	errno = x->state == XMSG_NOMARK ? EIO : x->state == XMSG_LOST ? EPIPE : saved;
	return NULL;
}

static void xmsg_settle(struct xmsg *x);

/* xsess_find - the xmsg of a libesmtp message */
static struct xmsg *xsess_find(struct xsess *xs, smtp_message_t sm)
{
	size_t i;

	for (i = 0; i < xs->n; i++)
		if (xs->msgs[i].sm == sm)
			return &xs->msgs[i];
	return NULL;
}

/*
 * xsess_cut - the guard said the conversation must end before the next
 * write: the bridge (every connection has one) forwards nothing libesmtp
 * writes from now on
 */
static void xsess_cut(struct xsess *xs)
{
	msg_info("upstream %s: %s", xs->relay, xs->guard.why);
	deliver_bridge_cut(xs->bridge);
}

/* xsess_event - libesmtp events; the variable arguments depend on the event */
static void xsess_event(smtp_session_t s, int event, void *arg, ...)
{
	struct xsess *xs = arg;
	struct xmsg *x;
	va_list ap;
	int *ok;

	(void) s;
	va_start(ap, arg);
	switch (event) {
	case SMTP_EV_MESSAGESENT:
		if ((x = xsess_find(xs, va_arg(ap, smtp_message_t))) == NULL)
			break;
		if (x->state == XMSG_MARKED) {
			xmsg_enter(x, XMSG_REPLIED);
			xmsg_settle(x);
		} else if (x->state == XMSG_ENVELOPE || x->state == XMSG_CONTENT)
			xmsg_enter(x, XMSG_REFUSED);
		break;
	case SMTP_EV_EXTNA_8BITMIME:	/* EHLO is over when libesmtp says this */
		xs->no8bit = 1;
		break;
	case SMTP_EV_EXTNA_DSN:
		/* go on without DSN parameters, as Postfix does */
		if ((ok = va_arg(ap, int *)) != NULL)
			*ok = 0;		/* this one is "quit now" */
		break;
	default:
		break;
	}
	va_end(ap);
}

/*
 * xsess_ehlo_line - what libesmtp read of its EHLO reply: SMTPUTF8 listed?
 * At the reply's last line, without it, a batch that needs it is cut
 * before libesmtp writes anything more (no message started).
 */
static void xsess_ehlo_line(struct xsess *xs, const char *buf, int len)
{
	const char *p = buf, *end = buf + len, *nl;
	size_t n;

	for (; p < end; p = nl + 1) {
		if ((nl = memchr(p, '\n', (size_t) (end - p))) == NULL)
			nl = end;
		n = (size_t) (nl - p);
		if (n > 0 && p[n - 1] == '\r')
			n--;
		if (n >= 12 && (p[3] == '-' || p[3] == ' ') && strncasecmp(p + 4, "SMTPUTF8", 8) == 0
		    && (n == 12 || p[12] == ' '))
			xs->utf8_seen = 1;
		if (n < 4 || p[3] != '-') {
			xs->in_ehlo = 0;	/* the last line */
			if (strncmp(p, "250", 3) == 0 && !xs->utf8_seen && xs->utf8_needed) {
				xs->no_utf8 = 1;
				deliver_bridge_cut(xs->bridge);
			}
			return;
		}
	}
}

/*
 * xsess_monitor - everything libesmtp reads, and each command before it is
 * written: the guard (deliver_auth.h), the server's last line (for error
 * text), the debug trace (without AUTH secrets)
 */
static void xsess_monitor(const char *buf, int buflen, int writing, void *arg)
{
	struct xsess *xs = arg;
	int end = buflen, start;

	if (!xs->guard.need_auth || xs->guard.cut) {
		/* nothing to watch */
	} else if (writing == SMTP_CB_READING && !xs->guard.authed) {
		deliver_auth_guard_read(&xs->guard, buf, (size_t) buflen);
		if (xs->guard.authed)
			msg_info("upstream %s: authenticated as %s (%s)", xs->relay,
				 xs->d->c->upstream.user, xs->guard.auth_mech);
	} else if (writing == SMTP_CB_WRITING
		   && deliver_auth_guard_write(&xs->guard, buf, (size_t) buflen)) {
		xsess_cut(xs);
	}
	if (writing == SMTP_CB_WRITING && buflen >= 5 && strncasecmp(buf, "EHLO ", 5) == 0)
		xs->in_ehlo = 1;
	else if (writing == SMTP_CB_READING && xs->in_ehlo)
		xsess_ehlo_line(xs, buf, buflen);
	if (writing == SMTP_CB_READING) {
		while (end > 0 && (buf[end - 1] == '\r' || buf[end - 1] == '\n'))
			end--;
		for (start = end; start > 0 && buf[start - 1] != '\n'; start--)
			continue;
		if (end > start)
			snprintf(xs->last_reply, sizeof(xs->last_reply), "%.*s", end - start,
				 buf + start);
	}
	deliver_auth_guard_trace(&xs->guard, xs->relay[0] ? xs->relay : "-", buf,
				 (size_t) buflen, writing == SMTP_CB_READING);
}

/* notify_flags - our NOTIFY bits as libesmtp's */
static enum notify_flags notify_flags(int notify)
{
	int f = 0;

	if (notify & SMTP_NOTIFY_NEVER)
		return Notify_NEVER;
	if (notify & SMTP_NOTIFY_SUCCESS)
		f |= Notify_SUCCESS;
	if (notify & SMTP_NOTIFY_FAILURE)
		f |= Notify_FAILURE;
	if (notify & SMTP_NOTIFY_DELAY)
		f |= Notify_DELAY;
	return (enum notify_flags) f;
}

/* xmsg_add_rcpt - one recipient with its DSN parameters */
static int xmsg_add_rcpt(struct xmsg *x, size_t i)
{
	const struct store_rcpt *r = &x->job->m.rcpts[i];
	char *type, *addr;
	const char *semi;
	int ok = 1;

	if ((x->sr[i] = smtp_add_recipient(x->sm, r->addr)) == NULL)
		return -1;
	if (r->notify)
		ok &= smtp_dsn_set_notify(x->sr[i], notify_flags(r->notify));
	/* ORCPT is kept as given (xtext); libesmtp encodes it again */
	if (r->orcpt && (semi = strchr(r->orcpt, ';')) != NULL && semi > r->orcpt) {
		type = xstrndup(r->orcpt, (size_t) (semi - r->orcpt));
		addr = deliver_xtext_decode(semi + 1);
		ok &= smtp_dsn_set_orcpt(x->sr[i], type, addr);
		free(type);
		free(addr);
	}
	return ok ? 0 : -1;
}

/* xmsg_add - put one job into the session */
/* ascii_only - no octet above 127 in p[0..len) */
static int ascii_only(const char *p, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++)
		if ((unsigned char) p[i] >= 0x80)
			return 0;
	return 1;
}

/*
 * xmsg_needs_utf8 - submitted with SMTPUTF8, and it matters: a UTF-8
 * address in the envelope or UTF-8 in the header block (RFC 6531 section
 * 3.2; what Postfix bounces 5.6.7 for when the next hop lacks SMTPUTF8)
 */
static int xmsg_needs_utf8(const struct store_msg *m)
{
	const char *eoh;
	size_t i;

	if (!m->smtputf8)
		return 0;
	if (!ascii_only(m->from, strlen(m->from)))
		return 1;
	for (i = 0; i < m->n_rcpts; i++)
		if (!ascii_only(m->rcpts[i].addr, strlen(m->rcpts[i].addr)))
			return 1;
	eoh = m->data ? memmem(m->data, m->data_len, "\r\n\r\n", 4) : NULL;
	return m->data && !ascii_only(m->data, eoh ? (size_t) (eoh - m->data) : m->data_len);
}

static int xmsg_add(struct xsess *xs, struct xmsg *x, struct deliver_job *j)
{
	const struct store_msg *m = &j->m;
	size_t i;
	int ok = 1;

	x->xs = xs;
	x->job = j;
	x->state = XMSG_ENVELOPE;
	x->sr = xcalloc(m->n_rcpts, sizeof(*x->sr));
	xs->utf8_want[x - xs->msgs] = (unsigned char) (m->smtputf8 != 0);
	xs->utf8_needed |= xmsg_needs_utf8(m);
	if ((x->sm = smtp_add_message(xs->s)) == NULL)
		return -1;
	ok &= smtp_set_reverse_path(x->sm, m->from);
	ok &= smtp_set_messagecb(x->sm, xmsg_read, x);
	ok &= smtp_size_set_estimate(x->sm, (unsigned long) m->data_len);
	if (m->body == SMTP_BODY_8BITMIME) {
		xs->any8 = 1;
		/* not BODY=7BIT: libesmtp would then require 8BITMIME of the server */
		if (xs->body8)
			ok &= smtp_8bitmime_set_body(x->sm, E8bitmime_8BITMIME);
	}
	if (m->ret == SMTP_RET_FULL)
		ok &= smtp_dsn_set_ret(x->sm, Ret_FULL);
	else if (m->ret == SMTP_RET_HDRS)
		ok &= smtp_dsn_set_ret(x->sm, Ret_HDRS);
	if (m->envid)
		ok &= smtp_dsn_set_envid(x->sm, m->envid);
	for (i = 0; i < m->n_rcpts; i++)
		if (j->res[i].attempted && xmsg_add_rcpt(x, i) < 0)
			ok = 0;
	return ok ? 0 : -1;
}

/* xsess_refuse - no session: why, and the RFC 3463 code */
static int xsess_refuse(struct xsess *xs, const char *dsn, const char *why)
{
	snprintf(xs->why, sizeof(xs->why), "%s", why);
	snprintf(xs->why_dsn, sizeof(xs->why_dsn), "%s", dsn);
	return -1;
}

/*
 * xsess_security - upstream TLS and AUTH. TLS, required with either
 * "starttls" or "implicit", is the bridge's (deliver_tls.c), with our
 * context; AUTH is libesmtp's SASL client, watched by the guard
 * (deliver_auth.h).
 * Credentials only ever go over TLS: conf.c refuses upstream.user without
 * it, and this defers if it ever gets one.
 */
static int xsess_security(struct xsess *xs)
{
	const struct conf *c = xs->d->c;
	char err[256];

	if (c->upstream.tls == CONF_TLS_NONE) {
		if (c->upstream.user)
			return xsess_refuse(xs, "4.7.0", "upstream.user is set without upstream.tls:"
					    " credentials are never sent in clear");
		return 0;
	}
	if ((xs->tls_ctx = deliver_tls_ctx_conf(c, err, sizeof(err))) == NULL)
		return xsess_refuse(xs, "4.3.0", err);
	if (c->upstream.user && ((xs->auth = deliver_auth_context(c)) == NULL
				 || !smtp_auth_set_context(xs->s, xs->auth)))
		return xsess_refuse(xs, "4.3.0", "cannot set up libesmtp's SASL client");
	return 0;
}

/* xsess_init - a libesmtp session holding every job */
static int xsess_init(struct xsess *xs, struct deliver *d, struct deliver_job **jobs,
		      size_t n, int body8)
{
	const struct conf *c = d->c;
	int ms;
	size_t i;
	int w, ok = 1;

	memset(xs, 0, sizeof(*xs));
	xs->d = d;
	xs->body8 = body8;
	snprintf(xs->why_dsn, sizeof(xs->why_dsn), "4.4.1");
	if ((xs->s = smtp_create_session()) == NULL) {
		snprintf(xs->why, sizeof(xs->why), "cannot create a libesmtp session");
		snprintf(xs->why_dsn, sizeof(xs->why_dsn), "4.3.0");
		return -1;
	}
	xs->msgs = xcalloc(n, sizeof(*xs->msgs));
	xs->utf8_want = xcalloc(n ? n : 1, 1);
	xs->jobs = jobs;
	xs->n = n;
	if (c->hostname)
		ok &= smtp_set_hostname(xs->s, c->hostname);
	/*
	 * The bridge bounds every reply by upstream.timeout, a deadline no byte
	 * of a trickled reply moves (deliver_watch.h); libesmtp's own timers
	 * restart on every read, so they are only a backstop, set longer so
	 * that the bridge, which can say what was late, always goes first.
	 */
	ms = upstream_timeout_ms(c);
	ms = ms >= (INT_MAX - 5000) / 2 ? INT_MAX : ms * 2 + 5000;
	for (w = Timeout_GREETING; w <= Timeout_DATA2; w++)
		ok &= smtp_set_timeout(xs->s, w | Timeout_OVERRIDE_RFC2822_MINIMUM, ms) != 0;
	ok &= smtp_set_eventcb(xs->s, xsess_event, xs);
	ok &= smtp_set_monitorcb(xs->s, xsess_monitor, xs, 0);
	if (!ok) {
		snprintf(xs->why, sizeof(xs->why), "cannot set up the libesmtp session");
		snprintf(xs->why_dsn, sizeof(xs->why_dsn), "4.3.0");
		return -1;
	}
	if (xsess_security(xs) < 0)
		return -1;
	for (i = 0; i < n; i++) {
		if (xmsg_add(xs, &xs->msgs[i], jobs[i]) < 0) {
			snprintf(xs->why, sizeof(xs->why), "cannot add %s to the libesmtp session",
				 jobs[i]->m.qid);
			snprintf(xs->why_dsn, sizeof(xs->why_dsn), "4.3.0");
			return -1;
		}
	}
	return 0;
}

/* xsess_free - destroy the session and the per-message arrays */
static void xsess_free(struct xsess *xs)
{
	size_t i;

	if (xs->s)
		smtp_destroy_session(xs->s);
	if (xs->auth)
		auth_destroy_context(xs->auth);
	SSL_CTX_free(xs->tls_ctx);
	deliver_bridge_close(xs->bridge);
	for (i = 0; xs->msgs && i < xs->n; i++)
		free(xs->msgs[i].sr);
	free(xs->msgs);
	free(xs->utf8_want);
	xs->utf8_want = NULL;
	xs->s = NULL;
	xs->auth = NULL;
	xs->tls_ctx = NULL;
	xs->bridge = NULL;
	xs->msgs = NULL;
}

struct xaddr {
	struct sockaddr_storage sa;	/* for the bridge */
	socklen_t salen;
	char relay[DELIVER_RELAY_MAX];	/* for logs: "name[ip]:port" */
};

/* xsess_addrs - where to connect for one upstream host, in resolver order */
static size_t xsess_addrs(struct xsess *xs, const struct conf_upstream_host *h,
			  struct xaddr *out, size_t max)
{
	struct addrinfo hints, *res, *ai;
	char ip[INET6_ADDRSTRLEN];
	const void *a;
	size_t n = 0;
	int err;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	if ((err = getaddrinfo(h->host, NULL, &hints, &res)) != 0) {
		snprintf(xs->why, sizeof(xs->why), "Host or domain name not found: %.200s: %s",
			 h->host, gai_strerror(err));
		snprintf(xs->why_dsn, sizeof(xs->why_dsn), "4.4.4");
		return 0;
	}
	for (ai = res; ai && n < max; ai = ai->ai_next) {
		if (ai->ai_family == AF_INET)
			a = &((struct sockaddr_in *) ai->ai_addr)->sin_addr;
		else if (ai->ai_family == AF_INET6)
			a = &((struct sockaddr_in6 *) ai->ai_addr)->sin6_addr;
		else
			continue;
		if (inet_ntop(ai->ai_family, a, ip, sizeof(ip)) == NULL)
			continue;
		snprintf(out[n].relay, sizeof(out[n].relay), "%.200s[%s]:%d", h->host, ip, h->port);
		memcpy(&out[n].sa, ai->ai_addr, ai->ai_addrlen);
		out[n].salen = ai->ai_addrlen;
		if (ai->ai_family == AF_INET)
			((struct sockaddr_in *) &out[n].sa)->sin_port = htons((uint16_t) h->port);
		else
			((struct sockaddr_in6 *) &out[n].sa)->sin6_port = htons((uint16_t) h->port);
		n++;
	}
	freeaddrinfo(res);
	return n;
}

/*
 * xsess_failed - one address did not work: log why, and keep it as the
 * batch's reason unless an earlier address got further than a connection
 * (a certificate or STARTTLS problem says more than "refused" from a
 * second address)
 */
static void xsess_failed(struct xsess *xs, const char *dsn, const char *why)
{
	msg_info("%s", why);
	if (xs->why[0] && strcmp(xs->why_dsn, "4.4.1") != 0 && strcmp(dsn, "4.4.1") == 0)
		return;
	snprintf(xs->why, sizeof(xs->why), "%s", why);
	snprintf(xs->why_dsn, sizeof(xs->why_dsn), "%s", dsn);
}

/*
 * xsess_connect - set up one connection attempt: the guard, and the
 * bridge, connected and with TLS established if asked (or the reason why
 * not)
 */
static int xsess_connect(struct xsess *xs, const char *host, struct xaddr *a)
{
	const struct conf *c = xs->d->c;
	int ms = upstream_timeout_ms(c);
	char why[DELIVER_REPLY_MAX - DELIVER_RELAY_MAX - 32], dsn[DELIVER_DSN_SIZE];
	char line[DELIVER_REPLY_MAX];
	const char *helo = c->hostname ? c->hostname : "localhost";

	deliver_bridge_close(xs->bridge);
	xs->bridge = NULL;
	xs->last_reply[0] = 0;
	xs->ended[0] = 0;
	xs->timed_out = 0;
	xs->dots = 0;
	xs->in_ehlo = xs->utf8_seen = xs->no_utf8 = 0;
	deliver_auth_guard_init(&xs->guard, c->upstream.user != NULL);
	(void) xsess_broken_pipe();	/* forget earlier sessions' */
	ERR_clear_error();
	if (xs->tls_ctx && deliver_tls_ctx_host(xs->tls_ctx, host) < 0) {
		xsess_failed(xs, "4.7.0", "cannot set the host name TLS checks");
		return -1;
	}
	xs->bridge = deliver_bridge_open(xs->tls_ctx, (struct sockaddr *) &a->sa, a->salen,
					 c->upstream.tls == CONF_TLS_STARTTLS ? helo : NULL,
					 ms, why, sizeof(why), dsn);
	if (xs->bridge == NULL) {
		snprintf(line, sizeof(line), "upstream %s: %s", a->relay, why);
		xsess_failed(xs, dsn, line);
		return -1;
	}
	if (xs->tls_ctx)
		msg_info("upstream %s: %s TLS connection established%s: %s", a->relay,
			 c->upstream.tls_verify ? "Verified" : "Unverified",
			 c->upstream.tls == CONF_TLS_STARTTLS ? " (STARTTLS)" : "",
			 deliver_bridge_tls(xs->bridge));
	deliver_bridge_mail_utf8(xs->bridge, xs->utf8_want, xs->n);
	if (!smtp_set_server(xs->s, deliver_bridge_address(xs->bridge))) {
		xsess_failed(xs, "4.3.0", "libesmtp refused the server address");
		return -1;
	}
	return 0;
}

/*
 * xsess_end_bridge - libesmtp is done with the connection. If the bridge
 * hung up because its filter refused libesmtp's content, nothing after
 * that reached the server: the message being sent, its mark written,
 * never got its final dot. A message marked but unanswered whose dot the
 * server's TCP never acknowledged did not arrive either.
 */
static void xsess_end_bridge(struct xsess *xs)
{
	const char *broke = deliver_bridge_end(xs->bridge);
	struct xmsg *x;
	size_t i;

	snprintf(xs->ended, sizeof(xs->ended), "%s",
		 deliver_bridge_ended(xs->bridge, &xs->timed_out));
	for (i = 0; i < xs->n; i++) {
		x = &xs->msgs[i];
		if (x->state != XMSG_MARKED)
			continue;
		if (broke)
			xmsg_enter(x, XMSG_CUT);
		else if (!deliver_bridge_dot_acked(xs->bridge, x->dot_nth))
			xmsg_enter(x, XMSG_UNACKED);
	}
	if (broke)
		msg_warn("upstream %s: the bridge hung up before the final dot: %s", xs->relay,
			 broke);
	deliver_bridge_close(xs->bridge);
	xs->bridge = NULL;
}

/* xsess_run - connect to the first upstream address that works and run the session */
static int xsess_run(struct xsess *xs)
{
	const struct conf *c = xs->d->c;
	struct xaddr addrs[XSESS_MAX_ADDRS];
	char err[128], why[DELIVER_REPLY_MAX];
	size_t h, i, n;
	int ran;

	for (h = 0; h < c->upstream.n_hosts; h++) {
		n = xsess_addrs(xs, &c->upstream.hosts[h], addrs, XSESS_MAX_ADDRS);
		for (i = 0; i < n; i++) {
			if (deliver_stopping(xs->d)) {
				snprintf(xs->why, sizeof(xs->why), "delivery is stopping");
				snprintf(xs->why_dsn, sizeof(xs->why_dsn), "4.3.0");
				return -1;
			}
			snprintf(xs->relay, sizeof(xs->relay), "%s", addrs[i].relay);
			if (xsess_connect(xs, c->upstream.hosts[h].host, &addrs[i]) < 0)
				continue;
			ran = smtp_start_session(xs->s);
			xsess_end_bridge(xs);	/* libesmtp has hung up */
			ERR_clear_error();
			if (ran || xs->guard.cut || xs->no_utf8 || xs->dots > 0) {
				xs->connected = 1;
				snprintf(xs->host, sizeof(xs->host), "%.200s",
					 c->upstream.hosts[h].host);
				smtp_strerror(smtp_errno(), xs->error, sizeof(xs->error));
				return 0;
			}
			/* nothing was sent (no dot went out): no connection, or greeting/EHLO refused */
			smtp_strerror(smtp_errno(), err, sizeof(err));
			if (xs->last_reply[0])
				snprintf(why, sizeof(why), "host %s refused to talk to me: %s",
					 addrs[i].relay, xs->last_reply);
			else
				snprintf(why, sizeof(why), "connect to %s: %s", addrs[i].relay, err);
			xsess_failed(xs, "4.4.1", why);
		}
	}
	xs->relay[0] = 0;
	return -1;
}

/* xstatus_line - a libesmtp status as one reply line */
static void xstatus_line(const smtp_status_t *st, char *out, size_t outlen)
{
	deliver_reply_format(out, outlen, st->code, st->enh_class, st->enh_subject,
			     st->enh_detail, st->text);
}

/* xmsg_session_why - our words when no reply explains a recipient's outcome */
static void xmsg_session_why(const struct xmsg *x, enum deliver_outcome o,
			     char *out, size_t outlen, const char **dsn)
{
	const struct xsess *xs = x->xs;
	const char *last = xs->last_reply[0] ? xs->last_reply : "none";

	*dsn = "4.4.2";
	if (xs->timed_out && o != DELIVER_AMBIGUOUS) {
		/* "timeout waiting for the reply to DATA from HOST" */
		snprintf(out, outlen, "%s from %s", xs->ended, xs->relay);
		return;
	}
	if (o == DELIVER_AMBIGUOUS) {
		snprintf(out, outlen, "no reply from %s after the final dot (%s)", xs->relay,
			 xs->ended[0] ? xs->ended : xs->error);
		return;
	}
	switch (x->state) {
	case XMSG_NOMARK:
		*dsn = "4.3.0";
		snprintf(out, outlen, "could not record the inflight mark; transfer to %s"
			 " abandoned before the final dot", xs->relay);
		break;
	case XMSG_CUT:
		*dsn = "4.3.0";
		snprintf(out, outlen, "the bridge refused libesmtp's content; transfer to %s"
			 " cut before the final dot", xs->relay);
		break;
	case XMSG_UNACKED:
		snprintf(out, outlen, "lost connection with %s before the final dot was"
			 " acknowledged (%s)", xs->relay, xs->ended[0] ? xs->ended : xs->error);
		break;
	case XMSG_CONTENT:
	case XMSG_LOST:
		snprintf(out, outlen, "lost connection with %s while sending the message (%s)",
			 xs->relay, xs->error);
		break;
	default:
		snprintf(out, outlen, "conversation with %.200s ended before the message was sent"
			 " (%s; last reply: %.200s)", xs->relay, xs->error, last);
		break;
	}
}

/* xmsg_collect - the outcome of each recipient of one message */
static void xmsg_collect(struct xmsg *x)
{
	struct deliver_job *j = x->job;
	const smtp_status_t *ms, *ts, *rs;
	int marked = x->state == XMSG_MARKED || x->state == XMSG_REPLIED;
	int final = x->state == XMSG_REPLIED || x->state == XMSG_REFUSED;
	struct deliver_verdict v;
	char line[DELIVER_REPLY_MAX];
	const char *dsn;
	size_t i;

	snprintf(j->relay, sizeof(j->relay), "%s", x->xs->relay);
	snprintf(j->remote_mta, sizeof(j->remote_mta), "%s", x->xs->host);
	if (x->xs->guard.cut) {
		/* cut before the write it objected to: nothing of this reached the server */
		deliver_set_all(j, DELIVER_DEFERRED, x->xs->guard.dsn, x->xs->guard.why);
		return;
	}
	ms = smtp_reverse_path_status(x->sm);
	ts = smtp_message_transfer_status(x->sm);
	for (i = 0; i < j->m.n_rcpts; i++) {
		if (!j->res[i].attempted || x->sr[i] == NULL)
			continue;
		rs = smtp_recipient_status(x->sr[i]);
		v = deliver_classify(ms->code, rs->code, ts->code, marked, final);
		dsn = NULL;
		switch (v.source) {
		case DELIVER_SRC_RCPT:
			xstatus_line(rs, line, sizeof(line));
			break;
		case DELIVER_SRC_MAIL:
			xstatus_line(ms, line, sizeof(line));
			break;
		case DELIVER_SRC_DATA:
			xstatus_line(ts, line, sizeof(line));
			break;
		case DELIVER_SRC_SESSION:
			xmsg_session_why(x, v.outcome, line, sizeof(line), &dsn);
			break;
		}
		deliver_set(j, i, v.outcome, dsn, line);
	}
}

/*
 * utf8_bounce - the upstream lacks SMTPUTF8: bounce the jobs that need it
 * (as Postfix words it), keep the others in jobs; how many are left
 */
static size_t utf8_bounce(struct deliver_job **jobs, size_t n, const char *relay)
{
	char why[DELIVER_REPLY_MAX];
	size_t i, k = 0;

	snprintf(why, sizeof(why), "SMTPUTF8 is required, but was not offered by host %s",
		 relay);
	for (i = 0; i < n; i++) {
		if (!xmsg_needs_utf8(&jobs[i]->m)) {
			jobs[k++] = jobs[i];
			continue;
		}
		snprintf(jobs[i]->relay, sizeof(jobs[i]->relay), "%s", relay);
		deliver_set_all(jobs[i], DELIVER_BOUNCED, "5.6.7", why);
	}
	return k;
}

/*
 * xmsg_settle - the final dot was answered: the results now, decided and
 * written with the next message's mark (deliver_replied), so that a kill
 * -9 later in the batch does not leave this delivery unconfirmed
 */
static void xmsg_settle(struct xmsg *x)
{
	xmsg_collect(x);
	x->collected = 1;
	deliver_replied(x->xs->d, x->job);
}

/* deliver_smtp_batch - deliver a batch over one upstream connection */
void deliver_smtp_batch(struct deliver *d, struct deliver_job **jobs, size_t n)
{
	struct xsess xs;
	int body8 = 1, round;
	sigset_t block;
	size_t i;
	struct deliver_job **own = xmalloc((n ? n : 1) * sizeof(*own));

	/* see xsess_broken_pipe(): SIGPIPE stays pending in this thread */
	sigemptyset(&block);
	sigaddset(&block, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &block, NULL);

	memcpy(own, jobs, n * sizeof(*own));
	jobs = own;		/* utf8_bounce() takes jobs out of it */
	for (round = 0; round < 3 && n > 0; round++) {
		if (xsess_init(&xs, d, jobs, n, body8) < 0 || xsess_run(&xs) < 0) {
			for (i = 0; i < n; i++) {
				snprintf(jobs[i]->relay, sizeof(jobs[i]->relay), "none");
				deliver_set_all(jobs[i], DELIVER_DEFERRED, xs.why_dsn, xs.why);
			}
			xsess_free(&xs);
			break;
		}
		if (xs.no_utf8) {
			/* cut after EHLO: nothing was sent; bounce what needs it, go again */
			msg_info("upstream %s does not offer SMTPUTF8", xs.relay);
			n = utf8_bounce(jobs, n, xs.relay);
			xsess_free(&xs);
			continue;
		}
		if (xs.no8bit && xs.any8 && body8) {
			/* libesmtp quit after EHLO: nothing was sent; go again without BODY= */
			msg_warn("upstream %s does not offer 8BITMIME: sending 8-bit messages"
				 " without BODY=8BITMIME", xs.relay);
			xsess_free(&xs);
			body8 = 0;
			continue;
		}
		for (i = 0; i < n; i++)
			if (!xs.msgs[i].collected)
				xmsg_collect(&xs.msgs[i]);
		xsess_free(&xs);
		break;
	}
	free(own);
}
