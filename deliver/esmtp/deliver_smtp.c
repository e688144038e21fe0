/*
 * NAME
 *	deliver_smtp 3
 * SUMMARY
 *	delivery upstream with libesmtp: one connection per batch
 * DESCRIPTION
 *	deliver_esmtp's send() puts every job of a batch into one libesmtp
 *	session (one smtp_add_message() each, deliver_smtp_msg.c), so they go
 *	over one connection, and tries upstream.hosts in order until one
 *	accepts a connection (each host's addresses in resolver order).
 *	libesmtp's event callback (xsess_event) settles each message as its
 *	final dot is answered; its monitor callback (xsess_monitor) sees every
 *	command before it is written and every reply line.
 *
 *	SMTPUTF8 (RFC 6531), which libesmtp 1.1.0 does not know: a message
 *	submitted with it goes out with it where the upstream offers it (the
 *	bridge's filter appends it to the MAIL line, deliver_filter.h). Where
 *	the upstream does not, a message that needs it (a UTF-8 address in
 *	the envelope, or UTF-8 in its header block) bounces 5.6.7, and one
 *	that does not (all ASCII there) goes out without it, as Postfix does.
 *	The filter reads the EHLO reply; when it lacked SMTPUTF8 (or libesmtp
 *	fell back to HELO) and the batch holds a message that needs it, the
 *	monitor cuts the bridge before the first MAIL is written (nothing of
 *	any message was sent), those messages bounce, and the rest of the
 *	batch is run again.
 *
 *	BODY=8BITMIME is the filter's to add too, where the upstream offers
 *	8BITMIME; where it does not, the content goes unchanged without it,
 *	as Postfix does with MIME conversion disabled (libesmtp, told, would
 *	refuse the whole session).
 *
 *	The bridge, TLS and AUTH (xsess_security, xsess_connect,
 *	deliver_bridge.h, tls/tls_client.h, deliver_auth.h). Every connection
 *	goes through the bridge: it connects (within upstream.timeout, to
 *	any address), and with upstream.tls = "starttls" (required, never
 *	opportunistic) or "implicit" establishes TLS (1.2+, certificate and
 *	host name verified against the system CAs unless upstream.tls_verify
 *	= false), then hands libesmtp a plain loopback connection: libESMTP
 *	1.1.0 has no implicit TLS and its STARTTLS has bugs we cannot work
 *	around (tls/tls_client.c). A host without STARTTLS, or with a
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
#include <limits.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "../../util/buf.h"
#include "../../util/clock.h"
#include "../../util/log.h"
#include "deliver_auth.h"
#include "deliver_bridge.h"
#include "deliver_esmtp.h"
#include "deliver_filter.h"
#include "deliver_gate.h"
#include "deliver_smtp_impl.h"
#include "../../tls/tls_client.h"

#define XSESS_MAX_ADDRS	8		/* addresses tried per upstream host */
#define XSESS_REFUSED	"refused to talk to me: "	/* the bridge's words for a greeting refused */
#define XSESS_NOMARK_WAIT	1		/* s: the rest of a batch after a refused mark waits, */
#define XSESS_NOMARK_MAX	60		/* doubling while marks are refused in a row */

/* upstream_timeout_ms - the group's timeout (1 s at least: conf.c) for libesmtp and the bridge */
static int upstream_timeout_ms(const struct conf_upstream *u)
{
	return u->timeout >= INT_MAX / 1000 ? INT_MAX : (int) u->timeout * 1000;
}

/* xsess_event - libesmtp events; the variable arguments depend on the event */
static void xsess_event(smtp_session_t s, int event, void *arg, ...)
{
	struct xmsg *x;	/* a message's: its application data (deliver_smtp_msg_add) */
	va_list ap;
	int *ok;

	(void) s;
	va_start(ap, arg);
	switch (event) {
	case SMTP_EV_MESSAGESENT:
		if ((x = smtp_message_get_application_data(va_arg(ap, smtp_message_t))) == NULL)
			break;
		if (x->state == XMSG_MARKED) {
			deliver_smtp_msg_enter(x, XMSG_REPLIED);
			deliver_smtp_msg_settle(x);
		} else if (x->state == XMSG_ENVELOPE || x->state == XMSG_CONTENT)
			deliver_smtp_msg_enter(x, XMSG_REFUSED);
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

/* bridge_over - deliver_rate_take()'s gone: the upstream side ended while it waits */
static int bridge_over(const void *bridge)
{
	return deliver_bridge_over(bridge);
}

/*
 * xsess_commands - the commands libesmtp is about to write. At a MAIL,
 * where the batch holds a message that needs SMTPUTF8 and the server did
 * not offer it (the bridge's filter read its EHLO reply,
 * deliver_bridge_offered), the bridge is cut first, so that nothing of any
 * message goes out. upstream.rate and upstream.recipient_rate: each MAIL
 * and RCPT waits for its token (deliver_rate.h), which the bridge does not
 * count as the upstream idle, unless the upstream throttled the session
 * or its side of the bridge is over (the gate answers what follows:
 * nothing goes out to take a token for; a wait ends within a second of
 * it). Nothing
 * is looked at once it is being cut.
 */
static void xsess_commands(struct xsess *xs, const char *buf, int len)
{
	const char *p = buf, *end = buf + len, *nl;
	int mail, pace;

	for (; p < end && !xs->guard.cut && !xs->no_utf8; p = nl + 1) {
		if ((nl = memchr(p, '\n', (size_t) (end - p))) == NULL)
			nl = end;
		mail = nl - p >= 10 && strncasecmp(p, "MAIL FROM:", 10) == 0;
		pace = xs->rate != NULL && !xs->throttled && !deliver_bridge_over(xs->bridge);
		if (mail && xs->utf8_needed
		    && !(deliver_bridge_offered(xs->bridge) & DELIVER_FILTER_UTF8)) {
			xs->no_utf8 = 1;
			deliver_bridge_cut(xs->bridge);
		} else if (pace && (mail || (nl - p >= 8 && strncasecmp(p, "RCPT TO:", 8) == 0))) {
			deliver_bridge_pacing(xs->bridge);	/* not the upstream's idleness */
			deliver_rate_take(xs->rate, mail ? &xs->rate->msgs : &xs->rate->rcpts,
					  bridge_over, xs->bridge);
			deliver_bridge_pacing(xs->bridge);
		}
	}
}

/*
 * xsess_throttle - the server's reply line asks us to slow down: the
 * upstream's limits come down and it pauses (deliver_rate.h), and this
 * session is cut, nothing more libesmtp writes reaching the server (the
 * bridge answers it), unless a final dot awaits its reply (a cut then
 * would make that message ambiguous): the rest of the batch waits for the
 * pause's end (smtp_send)
 */
static void xsess_throttle(struct xsess *xs, const char *line)
{
	size_t i;

	if (xs->throttled)
		return;
	xs->throttled = 1;
	snprintf(xs->throttle, sizeof(xs->throttle), "%s", line);
	deliver_rate_throttled(xs->rate, xs->relay, line);
	for (i = 0; i < xs->n; i++)
		if (xs->msgs[i].state == XMSG_MARKED)
			return;
	if (xs->bridge)			/* none: the bridge's STARTTLS read the greeting */
		deliver_bridge_cut(xs->bridge);
}

/*
 * xsess_monitor - everything libesmtp reads, and each command before it is
 * written: the guard (deliver_auth.h), the server's last line (for error
 * text), the debug trace (without AUTH secrets)
 */
static void xsess_monitor(const char *buf, int buflen, int writing, void *arg)
{
	struct xsess *xs = arg;
	char line[sizeof(xs->last_reply)];
	int end = buflen, start, was_cut = xs->guard.cut;

	if (!xs->guard.need_auth || xs->guard.cut) {
		/* nothing to watch */
	} else if (writing == SMTP_CB_READING && !xs->guard.authed) {
		deliver_auth_guard_read(&xs->guard, buf, (size_t) buflen);
		if (xs->guard.authed)
			msg_info("upstream %s: authenticated as %s (%s)", xs->relay,
				 xs->up->user, xs->guard.auth_mech);
	} else if (writing == SMTP_CB_WRITING) {
		(void) deliver_auth_guard_write(&xs->guard, buf, (size_t) buflen);
	}
	if (xs->guard.cut && !was_cut) {
		/* before this write, or after this reply: the bridge forwards nothing more */
		msg_info("upstream %s: %s", xs->relay, xs->guard.why);
		deliver_bridge_cut(xs->bridge);
	}
	if (writing == SMTP_CB_WRITING) {
		xsess_commands(xs, buf, buflen);
		xs->wrote = 1;
	} else if (writing == SMTP_CB_READING) {
		while (end > 0 && (buf[end - 1] == '\r' || buf[end - 1] == '\n'))
			end--;
		for (start = end; start > 0 && buf[start - 1] != '\n'; start--)
			continue;
		/* the last line the server sent, not one the bridge answered for it */
		snprintf(line, sizeof(line), "%.*s", end - start, buf + start);
		if (end > start && (end - start <= 4 || !deliver_gate_ours(line + 4))) {
			snprintf(xs->last_reply, sizeof(xs->last_reply), "%s", line);
			if (xs->rate && deliver_rate_reply_throttles(xs->last_reply, !xs->wrote))
				xsess_throttle(xs, xs->last_reply);
		}
	}
	deliver_auth_guard_trace(&xs->guard, xs->relay[0] ? xs->relay : "-", buf,
				 (size_t) buflen, writing == SMTP_CB_READING);
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
 * "starttls" or "implicit", is the bridge's (tls/tls_client.c), with our
 * context; AUTH is libesmtp's SASL client, watched by the guard
 * (deliver_auth.h).
 * Credentials only ever go over TLS: conf/conf.c refuses upstream.user without
 * it, and this defers if it ever gets one.
 */
static int xsess_security(struct xsess *xs)
{
	const struct conf_upstream *u = xs->up;
	char err[256];

	if (u->tls == CONF_TLS_NONE) {
		if (u->user)
			return xsess_refuse(xs, "4.7.0", "upstream.user is set without upstream.tls:"
					    " credentials are never sent in clear");
		return 0;
	}
	if ((xs->tls_ctx = tls_client_ctx_conf(u, err, sizeof(err))) == NULL)
		return xsess_refuse(xs, "4.3.0", err);
	if (u->user && ((xs->auth = deliver_auth_context(u)) == NULL
				 || !smtp_auth_set_context(xs->s, xs->auth)))
		return xsess_refuse(xs, "4.3.0", "cannot set up libesmtp's SASL client");
	return 0;
}

/* xsess_init - a libesmtp session holding every job */
static int xsess_init(struct xsess *xs, struct deliver *d, const struct conf_upstream *up,
		      struct deliver_job **jobs, size_t n)
{
	const struct conf *c = d->c;
	char why[64 + STORE_QID_SIZE];
	size_t i;
	int ms, w, ok = 1;

	memset(xs, 0, sizeof(*xs));
	xs->d = d;
	xs->up = up;
	xs->rate = deliver_group_rate(d, up);
	snprintf(xs->why_dsn, sizeof(xs->why_dsn), "4.4.1");
	if ((xs->s = smtp_create_session()) == NULL)
		return xsess_refuse(xs, "4.3.0", "cannot create a libesmtp session");
	xs->msgs = xcalloc(n, sizeof(*xs->msgs));
	xs->params = xcalloc(n ? n : 1, 1);
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
	ms = upstream_timeout_ms(up);
	ms = ms >= (INT_MAX - 5000) / 2 ? INT_MAX : ms * 2 + 5000;
	for (w = Timeout_GREETING; w <= Timeout_DATA2; w++)
		ok &= smtp_set_timeout(xs->s, w | Timeout_OVERRIDE_RFC2822_MINIMUM, ms) != 0;
	ok &= smtp_set_server(xs->s, DELIVER_BRIDGE_ADDRESS);	/* every attempt's bridge */
	ok &= smtp_set_eventcb(xs->s, xsess_event, xs);
	ok &= smtp_set_monitorcb(xs->s, xsess_monitor, xs, 0);
	if (!ok)
		return xsess_refuse(xs, "4.3.0", "cannot set up the libesmtp session");
	if (xsess_security(xs) < 0)
		return -1;
	for (i = 0; i < n; i++) {
		if (deliver_smtp_msg_add(xs, &xs->msgs[i], jobs[i]) < 0) {
			snprintf(why, sizeof(why), "cannot add %s to the libesmtp session",
				 jobs[i]->m.qid);
			return xsess_refuse(xs, "4.3.0", why);
		}
	}
	return 0;
}

/* xsess_free - destroy the session and the per-message arrays (xsess_init starts anew) */
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
	free(xs->params);
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
	char ip[NI_MAXHOST], port[16];
	size_t n = 0;
	int err;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;	/* the port goes into each address */
	snprintf(port, sizeof(port), "%d", h->port);
	if ((err = getaddrinfo(h->host, port, &hints, &res)) != 0) {
		snprintf(xs->why, sizeof(xs->why), "Host or domain name not found: %.200s: %s",
			 h->host, gai_strerror(err));
		snprintf(xs->why_dsn, sizeof(xs->why_dsn), "4.4.4");
		return 0;
	}
	for (ai = res; ai && n < max; ai = ai->ai_next) {
		if ((ai->ai_family != AF_INET && ai->ai_family != AF_INET6)
		    || getnameinfo(ai->ai_addr, ai->ai_addrlen, ip, sizeof(ip), NULL, 0,
				   NI_NUMERICHOST) != 0)
			continue;
		snprintf(out[n].relay, sizeof(out[n].relay), "%.200s[%.64s]:%d", h->host, ip,
			 h->port);
		memcpy(&out[n].sa, ai->ai_addr, ai->ai_addrlen);
		out[n].salen = ai->ai_addrlen;
		n++;
	}
	freeaddrinfo(res);
	return n;
}

/*
 * xsess_failed - one address did not work: log why, and keep it as the
 * batch's reason unless an earlier address got further than a connection
 * (a certificate or STARTTLS problem says more than "refused" from a
 * second address); -1
 */
static int xsess_failed(struct xsess *xs, const char *dsn, const char *why)
{
	msg_info("%s", why);
	if (xs->why[0] && strcmp(xs->why_dsn, "4.4.1") != 0 && strcmp(dsn, "4.4.1") == 0)
		return -1;
	return xsess_refuse(xs, dsn, why);
}

/*
 * xsess_connect - set up one connection attempt: the guard, and the
 * bridge, connected and with TLS established if asked (or the reason why
 * not)
 */
static int xsess_connect(struct xsess *xs, const char *host, struct xaddr *a)
{
	const struct conf *c = xs->d->c;
	const struct conf_upstream *u = xs->up;
	int ms = upstream_timeout_ms(u);
	char why[DELIVER_REPLY_MAX - DELIVER_RELAY_MAX - 32], dsn[DELIVER_DSN_SIZE];
	char line[DELIVER_REPLY_MAX];
	const char *helo = c->hostname ? c->hostname : "localhost";

	deliver_bridge_close(xs->bridge);
	xs->bridge = NULL;
	xs->last_reply[0] = 0;
	xs->ended[0] = 0;
	xs->timed_out = 0;
	xs->dots = 0;
	xs->no_utf8 = xs->wrote = 0;
	deliver_auth_guard_init(&xs->guard, u->user != NULL);
	ERR_clear_error();
	if (xs->tls_ctx && tls_client_ctx_host(xs->tls_ctx, host) < 0)
		return xsess_failed(xs, "4.7.0", "cannot set the host name TLS checks");
	xs->bridge = deliver_bridge_open(xs->tls_ctx, (struct sockaddr *) &a->sa, a->salen,
					 u->tls == CONF_TLS_STARTTLS ? helo : NULL,
					 ms, why, sizeof(why), dsn);
	if (xs->bridge == NULL) {
		/* STARTTLS: the bridge read the greeting, and says a refusal so */
		if (xs->rate && strncmp(why, XSESS_REFUSED, strlen(XSESS_REFUSED)) == 0
		    && deliver_rate_reply_throttles(why + strlen(XSESS_REFUSED), 1))
			xsess_throttle(xs, why + strlen(XSESS_REFUSED));
		snprintf(line, sizeof(line), "upstream %s: %s", a->relay,
			 deliver_stopping(xs->d) ? "delivery is stopping" : why);
		return xsess_failed(xs, dsn, line);
	}
	if (xs->tls_ctx)
		msg_info("upstream %s: %s TLS connection established%s: %s", a->relay,
			 u->tls_verify ? "Verified" : "Unverified",
			 u->tls == CONF_TLS_STARTTLS ? " (STARTTLS)" : "",
			 deliver_bridge_tls(xs->bridge));
	deliver_bridge_mail_params(xs->bridge, xs->params, xs->n);
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
		 deliver_bridge_ended(xs->bridge, &xs->timed_out, &xs->stood_in));
	for (i = 0; i < xs->n; i++) {
		x = &xs->msgs[i];
		if (x->state != XMSG_MARKED)
			continue;
		if (broke)
			deliver_smtp_msg_enter(x, XMSG_CUT);
		else if (!deliver_bridge_dot_acked(xs->bridge, x->dot_nth))
			deliver_smtp_msg_enter(x, XMSG_UNACKED);
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
	const struct conf_upstream *u = xs->up;
	struct xaddr addrs[XSESS_MAX_ADDRS];
	char err[128], why[DELIVER_REPLY_MAX];
	size_t h, i, n;
	int ran;

	for (h = 0; h < u->n_hosts; h++) {
		n = xsess_addrs(xs, &u->hosts[h], addrs, XSESS_MAX_ADDRS);
		snprintf(xs->host, sizeof(xs->host), "%.200s", u->hosts[h].host);
		for (i = 0; i < n; i++) {
			if (deliver_stopping(xs->d))
				return xsess_refuse(xs, "4.3.0", "delivery is stopping");
			snprintf(xs->relay, sizeof(xs->relay), "%s", addrs[i].relay);
			if (xsess_connect(xs, u->hosts[h].host, &addrs[i]) < 0) {
				if (!xs->throttled)
					continue;
				/* a greeting refused as throttling: the session's end, no more addresses */
				return 0;
			}
			ran = smtp_start_session(xs->s);
			xsess_end_bridge(xs);	/* libesmtp has hung up */
			ERR_clear_error();
			smtp_strerror(smtp_errno(), err, sizeof(err));
			if (xs->stood_in && xs->ended[0])	/* libesmtp saw no error: the bridge did */
				snprintf(err, sizeof(err), "%s", xs->ended);
			/* throttled: the upstream's other addresses would say the same */
			if (ran || xs->guard.cut || xs->no_utf8 || xs->dots > 0 || xs->throttled) {
				snprintf(xs->error, sizeof(xs->error), "%s", err);
				return 0;
			}
			/* nothing was sent (no dot went out): no connection, or greeting/EHLO refused */
			if (xs->last_reply[0] && !xs->stood_in)
				snprintf(why, sizeof(why), "host %s refused to talk to me: %s",
					 addrs[i].relay, xs->last_reply);
			else		/* the bridge knows a deadline or a stop from a hang-up */
				snprintf(why, sizeof(why), "connect to %s: %s", addrs[i].relay,
					 xs->ended[0] && (xs->timed_out || deliver_stopping(xs->d))
					 ? xs->ended : err);
			xsess_failed(xs, "4.4.1", why);
		}
	}
	xs->relay[0] = 0;
	return -1;
}

/*
 * xsess_postpone - the upstream throttled the session: a job none of
 * whose recipients was delivered, refused for good or left ambiguous
 * waits for the pause's end, not charged an attempt (deliver_record.c);
 * the reply was about the rate, not the message, whichever message's
 * command it answered
 */
static void xsess_postpone(struct xsess *xs)
{
	char why[DELIVER_REPLY_MAX], dsn[DELIVER_DSN_SIZE];
	int64_t until = deliver_rate_paused_until(xs->rate);
	size_t i;

	snprintf(why, sizeof(why), "host %s said: %s", xs->relay, xs->throttle);
	(void) deliver_dsn_code(dsn, xs->throttle);
	for (i = 0; i < xs->n; i++)
		(void) deliver_job_postpone(xs->jobs[i], until, dsn, why);
}

/*
 * xsess_nomark_rest - a message's inflight mark was refused (NOMARK): it
 * sent no final dot and libesmtp dropped the connection there, so the
 * messages after it in the batch never reached the server. Their attempt
 * was the store's failure, not theirs: each waits, not charged an attempt
 * (deliver_record.c), as after throttling (xsess_postpone). A store that
 * keeps refusing marks is given longer each time (XSESS_NOMARK_WAIT,
 * doubled for each refused in a row up to XSESS_NOMARK_MAX, as
 * deliver_backoff() doubles), so that the queue is not taken up again,
 * and a session opened upstream, every second while it does; its first
 * mark written ends that. The refused one is deferred as before.
 */
static void xsess_nomark_rest(struct xsess *xs)
{
	int refused = __atomic_load_n(&xs->d->marks_refused, __ATOMIC_RELAXED);
	int64_t wait = deliver_backoff(XSESS_NOMARK_WAIT, XSESS_NOMARK_MAX, refused) * US;
	char why[DELIVER_REPLY_MAX];
	size_t i, k;

	for (k = 0; k < xs->n && xs->msgs[k].state != XMSG_NOMARK; k++)
		continue;
	if (k == xs->n)
		return;
	snprintf(why, sizeof(why), "not sent: the session with %s was abandoned when the"
		 " inflight mark of %s could not be recorded (%d refused in a row: again in"
		 " %lld s)", xs->relay, xs->jobs[k]->m.qid, refused > 1 ? refused : 1,
		 (long long) (wait / US));
	for (i = k + 1; i < xs->n; i++)
		if (xs->msgs[i].state == XMSG_ENVELOPE)
			(void) deliver_job_postpone(xs->jobs[i], clock_us() + wait, "4.3.0", why);
}

/* smtp_send - deliver a batch over one connection to its upstream group */
static void smtp_send(struct deliver *d, const struct conf_upstream *up,
		      struct deliver_job **jobs, size_t n)
{
	struct xsess xs;
	int round;
	size_t i;
	struct deliver_job **own = xmalloc((n ? n : 1) * sizeof(*own));

	memcpy(own, jobs, n * sizeof(*own));
	jobs = own;		/* deliver_smtp_utf8_bounce() takes jobs out of it */
	for (round = 0; round < 2 && n > 0; round++) {	/* again without what needs SMTPUTF8 */
		if (xsess_init(&xs, d, up, jobs, n) < 0 || xsess_run(&xs) < 0) {
			for (i = 0; i < n; i++) {
				snprintf(jobs[i]->relay, sizeof(jobs[i]->relay), "none");
				deliver_set_all(jobs[i], DELIVER_DEFERRED, xs.why_dsn, xs.why);
			}
			xsess_free(&xs);
			break;
		}
		if (xs.no_utf8 && !xs.throttled) {
			/* cut at the first MAIL (after AUTH): no message was sent; bounce
			 * what needs it, go again */
			msg_info("upstream %s does not offer SMTPUTF8", xs.relay);
			n = deliver_smtp_utf8_bounce(jobs, n, xs.relay);
			xsess_free(&xs);
			continue;
		}
		for (i = 0; i < n; i++)
			deliver_smtp_msg_collect(&xs.msgs[i]);
		if (xs.throttled)
			xsess_postpone(&xs);
		else
			xsess_nomark_rest(&xs);
		xsess_free(&xs);
		break;
	}
	free(own);
}

/* 50 messages a connection: the batch's outcomes share a transaction */
const struct deliver_transport deliver_esmtp = {
	.name = "upstream", .limited = 1, .batch = 50, .send = smtp_send
};
