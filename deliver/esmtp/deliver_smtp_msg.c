/*
 * NAME
 *	deliver_smtp_msg 3
 * SUMMARY
 *	one message in a libesmtp session: envelope, content, outcome
 * DESCRIPTION
 *	deliver_smtp_msg_add() puts a job into the batch's libesmtp session
 *	(deliver_smtp.c): the envelope sender, the queued recipients, DSN
 *	(RET, ENVID per message; NOTIFY, ORCPT per recipient), SIZE (the
 *	stored size, which is what goes out), and which of SMTPUTF8 and
 *	BODY=8BITMIME the bridge's filter adds where offered. The content is read
 *	from the stored data by xmsg_read(), in chunks, after a throw-away
 *	header block of our own: libesmtp 1.1.0 edits the header block of
 *	every message (adds Date:, From:, Message-Id:, strips Return-Path:,
 *	drops repeated headers) and cannot be told not to, so it gets one to
 *	edit, and takes the stored message, headers and all, for body, which
 *	it sends unchanged. The bridge's filter (deliver_filter.h) cuts that
 *	block out of the stream, from where xmsg_read()'s rewind (libesmtp
 *	calls it after the 354, before the content) says the content starts.
 *	When libesmtp asks past the end, the final dot is the next thing it
 *	writes, so that is where the inflight mark is made durable. If that
 *	fails, xmsg_read() sets errno, which makes libesmtp drop the
 *	connection before the final dot; the batch's messages after it, never
 *	begun, wait uncharged, a second, longer while marks keep being refused
 *	(deliver_smtp.c, xsess_nomark_rest).
 *
 *	Whether the final dot was answered is known from the
 *	SMTP_EV_MESSAGESENT event, not from the transfer status: after a
 *	timeout that status still holds the 354 of DATA. An xmsg goes
 *	through explicit states (deliver_smtp_msg_enter()):
 *
 *	    ENVELOPE -> CONTENT -> MARKED -> REPLIED	normal
 *	    ENVELOPE or CONTENT -> REFUSED		DATA refused
 *	    CONTENT -> NOMARK				mark not written: no dot
 *	    CONTENT -> LOST				the server gone first: no mark, no dot
 *	    MARKED -> CUT				the filter refused: no dot
 *	    MARKED -> UNACKED				the dot never reached the peer
 *
 *	and deliver_smtp_msg_collect() turns state and replies into outcomes
 *	(deliver_classify()), as soon as the final dot is answered
 *	(deliver_smtp_msg_settle()) or, for the rest, when the session ends.
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
 *	one that may have the whole message. The bridge knows: when its
 *	upstream side has ended by the end of the content
 *	(deliver_bridge_over()), no mark is made and the attempt is simply
 *	deferred. A message small enough to sit in the socket buffers reaches
 *	its end before the bridge can tell: whether a hang-up then is
 *	ambiguous (Postfix: "message may be sent more than once") is the
 *	bridge's to say (UNACKED above).
 *
 *	SMTPUTF8 (RFC 6531): a message needs it if it was submitted with it
 *	and has a UTF-8 address in the envelope or UTF-8 in its header block;
 *	where the upstream lacks it, deliver_smtp_utf8_bounce() bounces those
 *	5.6.7, as Postfix does, and keeps the others for another round.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libesmtp.h>

#include "../../smtp/smtp.h"
#include "../../util/buf.h"
#include "../../util/log.h"
#include "deliver_bridge.h"
#include "deliver_filter.h"
#include "deliver_gate.h"
#include "deliver_smtp_impl.h"

#define XMSG_CHUNK	65536		/* bytes handed to libesmtp per callback */

/* the header block libesmtp edits instead of ours; the bridge's filter cuts it */
static const char xmsg_block[] = DELIVER_FILTER_SENTINEL "\r\n";

static const char *const xmsg_state_name[] = {
	"envelope", "content", "marked", "nomark", "lost", "replied", "refused", "cut",
	"unacked",
};

/* deliver_smtp_msg_enter - change a message's state, and say so at debug level */
void deliver_smtp_msg_enter(struct xmsg *x, enum xmsg_state to)
{
	msg_debug("%s: smtp %s -> %s", x->job->m.qid, xmsg_state_name[x->state],
		  xmsg_state_name[to]);
	x->state = to;
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
		deliver_smtp_msg_enter(x, XMSG_CONTENT);
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
	if (x->state == XMSG_CONTENT && (deliver_bridge_over(x->xs->bridge) || x->xs->guard.cut)) {
		/* the server is gone before the end, or we cut it: no mark, and no dot */
		deliver_smtp_msg_enter(x, XMSG_LOST);
	} else if (x->state == XMSG_CONTENT) {
		if ((err = deliver_mark(x->xs->d, m->qid, x->xs->jobs, x->xs->n)) == 0) {
			__atomic_store_n(&x->xs->d->marks_refused, 0, __ATOMIC_RELAXED);
			if (deliver_bridge_over(x->xs->bridge) || x->xs->guard.cut) {
				/*
				 * The mark's reply came after the server was gone
				 * (the bridge's watch ended it while we waited, or
				 * we cut it): the dot would go nowhere, yet another
				 * node may have found the mark and given its
				 * verdict. Lost, and undone as for a refused mark.
				 */
				msg_warn("%s: the upstream session ended while the inflight mark"
					 " was set; no final dot", m->qid);
				x->job->no_dot = 1;
				deliver_smtp_msg_enter(x, XMSG_LOST);
			} else {
				x->dot_nth = ++x->xs->dots;
				deliver_smtp_msg_enter(x, XMSG_MARKED);
			}
		} else {
			__atomic_add_fetch(&x->xs->d->marks_refused, 1, __ATOMIC_RELAXED);
			msg_error("%s: cannot set the inflight mark: %s; abandoning the transfer"
				  " before the final dot", m->qid, store_strerror(err));
			/*
			 * No dot goes out, whatever the error: the mark may be
			 * durable all the same (a first try whose outcome was
			 * unknown, then a retry refused for the lease another
			 * node took meanwhile), so a verdict on it is undone.
			 */
			x->job->no_dot = 1;
			deliver_smtp_msg_enter(x, XMSG_NOMARK);
		}
	}
	/* libesmtp checks errno after reading: non-zero drops the connection */
	errno = x->state == XMSG_NOMARK ? EIO : x->state == XMSG_LOST ? EPIPE : saved;
	return NULL;
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

/*
 * xtext_fits - does s fit the 256 octets into which libESMTP 1.1.0
 * xtext-encodes ENVID and ORCPT (tokens.c, encode_xtext(): "+XX" for
 * octets outside "!"-"~" and for "+" and "=")? One longer went out as
 * "(null)" (up to 3 octets written past the buffer on the way): such a
 * parameter is not passed on.
 */
static int xtext_fits(const char *s)
{
	size_t n = 0;

	for (; *s; s++)
		n += *s > ' ' && *s <= '~' && *s != '+' && *s != '=' ? 1 : 3;
	return n < 256;
}

/* xmsg_add_rcpt - one recipient with its DSN parameters */
static int xmsg_add_rcpt(struct xmsg *x, size_t i)
{
	const struct store_rcpt *r = &x->job->m.rcpts[i];
	char *type, *addr;
	int ok = 1;

	if ((x->sr[i] = smtp_add_recipient(x->sm, r->addr)) == NULL)
		return -1;
	if (r->notify)
		ok &= smtp_dsn_set_notify(x->sr[i], notify_flags(r->notify));
	/* ORCPT is kept as given (xtext); libesmtp encodes it again */
	if (r->orcpt
	    && smtp_orcpt_split(r->orcpt, strlen(r->orcpt), SMTP_XTEXT_LENIENT, &type, &addr) == 0) {
		if (xtext_fits(addr))
			ok &= smtp_dsn_set_orcpt(x->sr[i], type, addr);
		free(type);
		free(addr);
	}
	return ok ? 0 : -1;
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
	if (!smtp_ascii(m->from, strlen(m->from)))
		return 1;
	for (i = 0; i < m->n_rcpts; i++)
		if (!smtp_ascii(m->rcpts[i].addr, strlen(m->rcpts[i].addr)))
			return 1;
	eoh = m->data ? memmem(m->data, m->data_len, "\r\n\r\n", 4) : NULL;
	return m->data && !smtp_ascii(m->data, eoh ? (size_t) (eoh - m->data) : m->data_len);
}

/* deliver_smtp_msg_add - put one job into the session */
int deliver_smtp_msg_add(struct xsess *xs, struct xmsg *x, struct deliver_job *j)
{
	const struct store_msg *m = &j->m;
	size_t i;
	int ok = 1;

	x->xs = xs;
	x->job = j;
	x->state = XMSG_ENVELOPE;
	x->sr = xcalloc(m->n_rcpts, sizeof(*x->sr));
	xs->params[x - xs->msgs] = (unsigned char) ((m->smtputf8 ? DELIVER_FILTER_UTF8 : 0)
		| (m->body == SMTP_BODY_8BITMIME ? DELIVER_FILTER_8BIT : 0));
	xs->utf8_needed |= xmsg_needs_utf8(m);
	if ((x->sm = smtp_add_message(xs->s)) == NULL)
		return -1;
	smtp_message_set_application_data_release(x->sm, x, NULL);	/* for xsess_event */
	ok &= smtp_set_reverse_path(x->sm, m->from);
	ok &= smtp_set_messagecb(x->sm, xmsg_read, x);
	ok &= smtp_size_set_estimate(x->sm, (unsigned long) m->data_len);
	if (m->ret == SMTP_RET_FULL)
		ok &= smtp_dsn_set_ret(x->sm, Ret_FULL);
	else if (m->ret == SMTP_RET_HDRS)
		ok &= smtp_dsn_set_ret(x->sm, Ret_HDRS);
	if (m->envid && xtext_fits(m->envid))
		ok &= smtp_dsn_set_envid(x->sm, m->envid);
	for (i = 0; i < m->n_rcpts; i++)
		if (j->res[i].attempted && xmsg_add_rcpt(x, i) < 0)
			ok = 0;
	return ok ? 0 : -1;
}

/* xmsg_session_why - our words when no reply explains a recipient's outcome */
static void xmsg_session_why(const struct xmsg *x, enum deliver_outcome o,
			     char *out, size_t outlen, const char **dsn)
{
	const struct xsess *xs = x->xs;
	const char *last = xs->last_reply[0] ? xs->last_reply : "none";

	*dsn = "4.4.2";
	if (x->state == XMSG_NOMARK) {
		/* a mark slower than upstream.timeout also ends the bridge: not the reason */
		*dsn = "4.3.0";
		snprintf(out, outlen, "could not record the inflight mark; transfer to %s"
			 " abandoned before the final dot%s", xs->relay, xs->timed_out
			 ? " (the upstream connection timed out while the store was asked)" : "");
		return;
	}
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

/*
 * xcode - a status's code, 0 (no reply) when the bridge made the reply up
 * for a server that was gone (deliver_gate.h): the outcome is then the
 * session's, told in its own words (xmsg_session_why)
 */
static int xcode(const smtp_status_t *st)
{
	return deliver_gate_ours(st->text) ? 0 : st->code;
}

/* deliver_smtp_msg_collect - the outcome of each recipient of one message, once */
void deliver_smtp_msg_collect(struct xmsg *x)
{
	struct deliver_job *j = x->job;
	const smtp_status_t *ms, *ts, *rs, *st;
	int marked = x->state == XMSG_MARKED || x->state == XMSG_REPLIED;
	int final = x->state == XMSG_REPLIED || x->state == XMSG_REFUSED;
	struct deliver_verdict v;
	char line[DELIVER_REPLY_MAX];
	const char *dsn;
	size_t i;

	if (x->collected)
		return;
	x->collected = 1;
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
		v = deliver_classify(xcode(ms), xcode(rs), xcode(ts), marked, final);
		dsn = NULL;
		st = v.source == DELIVER_SRC_RCPT ? rs : v.source == DELIVER_SRC_MAIL ? ms : ts;
		if (v.source == DELIVER_SRC_SESSION)
			xmsg_session_why(x, v.outcome, line, sizeof(line), &dsn);
		else		/* the reply that decided it, as one line */
			deliver_reply_format(line, sizeof(line), st->code, st->enh_class,
					     st->enh_subject, st->enh_detail, st->text);
		deliver_set(j, i, v.outcome, dsn, line);
	}
}

/*
 * deliver_smtp_utf8_bounce - the upstream lacks SMTPUTF8: bounce the jobs
 * that need it (as Postfix words it), keep the others in jobs; how many
 * are left
 */
size_t deliver_smtp_utf8_bounce(struct deliver_job **jobs, size_t n, const char *relay)
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
 * deliver_smtp_msg_settle - the final dot was answered: the results now,
 * decided and written with the next message's mark (deliver_replied), so
 * that a kill -9 later in the batch does not leave this delivery
 * unconfirmed
 */
void deliver_smtp_msg_settle(struct xmsg *x)
{
	size_t i, sent = 0, deferred = 0, attempted = 0;

	deliver_smtp_msg_collect(x);
	for (i = 0; i < x->job->m.n_rcpts; i++) {
		if (!x->job->res[i].attempted)
			continue;
		attempted++;
		sent += x->job->res[i].outcome == DELIVER_SENT;
		deferred += x->job->res[i].outcome == DELIVER_DEFERRED;
	}
	if (sent && x->xs->rate)
		deliver_rate_sent(x->xs->rate);	/* the rate the upstream takes */
	/* throttled at its dot: smtp_send postpones it, uncharged (deliver_rate.h) */
	if (x->xs->throttled && deferred == attempted)
		return;
	deliver_replied(x->xs->d, x->job);
}
