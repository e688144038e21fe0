/*
 * NAME
 *	deliver_smtp_impl 3h
 * SUMMARY
 *	what the libesmtp session and its messages share
 * DESCRIPTION
 *	deliver_smtp.c runs one libesmtp session per batch (struct xsess):
 *	its setup, the connection attempts through the bridge, libesmtp's
 *	event and monitor callbacks. deliver_smtp_msg.c holds each message in
 *	it (struct xmsg): what is added to the session, the content libesmtp
 *	reads, the states, and the outcome of each recipient. Not for use
 *	outside deliver/esmtp/deliver_smtp*.c.
 */
#ifndef DELIVER_ESMTP_DELIVER_SMTP_IMPL_H
#define DELIVER_ESMTP_DELIVER_SMTP_IMPL_H

#include <stddef.h>

#include <openssl/ssl.h>
#include <auth-client.h>		/* before libesmtp.h: smtp_auth_set_context() */
#include <libesmtp.h>

#include "../deliver_impl.h"
#include "deliver_auth.h"

enum xmsg_state {
	XMSG_ENVELOPE,			/* added to the session, no content read yet */
	XMSG_CONTENT,			/* libesmtp is reading the content */
	XMSG_MARKED,			/* end of content: mark durable, final dot follows */
	XMSG_NOMARK,			/* mark not written: transfer abandoned before the dot */
	XMSG_LOST,			/* the server was gone first: abandoned before the dot */
	XMSG_REPLIED,			/* reply to the final dot read */
	XMSG_REFUSED,			/* DATA refused before the end */
	XMSG_CUT,			/* marked, but the bridge refused the content: no dot */
	XMSG_UNACKED,			/* marked, but the dot never reached the peer's TCP */
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
	const struct conf_upstream *up;	/* not owned: the batch's upstream group */
	struct deliver_rate *rate;	/* not owned: its limits (deliver_rate.h); NULL: none */
	smtp_session_t s;		/* owned */
	struct xmsg *msgs;		/* owned array */
	struct deliver_job **jobs;	/* not owned; msgs[i].job is jobs[i] */
	size_t n;
	unsigned char *params;		/* owned, per message: the MAIL parameters it
					 * wants where offered (deliver_filter.h) */
	int utf8_needed;		/* some message needs SMTPUTF8 (deliver_smtp_msg.c) */
	int wrote;			/* libesmtp wrote a command: the greeting is read */
	int no_utf8;			/* the server did not offer it, and utf8_needed:
					 * bridge cut before the first MAIL */
	char relay[DELIVER_RELAY_MAX];	/* "host[ip]:port" */
	char host[256];			/* upstream host name of relay */
	char why[DELIVER_REPLY_MAX];	/* why no session ran */
	char why_dsn[DELIVER_DSN_SIZE];
	char error[128];		/* libesmtp's error after the session */
	char last_reply[256];		/* last line read from the server */
	unsigned dots;			/* messages marked on this connection */
	char ended[256];		/* how the bridge saw the upstream end; "" if not */
	int timed_out;			/* the bridge's reply deadline passed */
	int stood_in;			/* the bridge answered for a server gone (deliver_gate.h) */
	int throttled;			/* the server asked us to slow down (deliver_rate.h) */
	char throttle[256];		/* ... in this reply line */

	/* upstream TLS and AUTH (tls/tls_client.h, deliver_auth.h) */
	SSL_CTX *tls_ctx;		/* owned; NULL with upstream.tls = "none" */
	auth_context_t auth;		/* owned; NULL without upstream.user */
	struct deliver_bridge *bridge;	/* owned; this connection attempt's */
	struct deliver_auth_guard guard;	/* this connection's */
};

/* deliver_smtp_msg_add - put one job into the session as xs->msgs[x - xs->msgs] */
int deliver_smtp_msg_add(struct xsess *xs, struct xmsg *x, struct deliver_job *j);

/* deliver_smtp_msg_enter - change a message's state, and say so at debug level */
void deliver_smtp_msg_enter(struct xmsg *x, enum xmsg_state to);

/*
 * deliver_smtp_msg_settle - the final dot was answered: the results now,
 * written with the next message's mark
 */
void deliver_smtp_msg_settle(struct xmsg *x);

/* deliver_smtp_msg_collect - the outcome of each recipient of one message, once */
void deliver_smtp_msg_collect(struct xmsg *x);

/*
 * deliver_smtp_utf8_bounce - the upstream (relay) lacks SMTPUTF8: bounce
 * the jobs that need it, keep the others in jobs; how many are left
 */
size_t deliver_smtp_utf8_bounce(struct deliver_job **jobs, size_t n, const char *relay);

#endif
