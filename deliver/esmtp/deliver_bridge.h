/*
 * NAME
 *	deliver_bridge 3h
 * SUMMARY
 *	the loopback bridge between libesmtp and the upstream
 * DESCRIPTION
 *	Every upstream connection goes through a bridge: libesmtp 1.1.0 is
 *	handed one end of a socketpair where it connects, and a thread
 *	copies bytes between it and the upstream, plain or TLS, through the
 *	stream filter of deliver_filter.h (which undoes libesmtp's edits to
 *	the message headers).
 *
 *	deliver_bridge_open() connects to the upstream itself, within the
 *	timeout, and with a TLS context establishes TLS: from the first byte
 *	(implicit TLS, port 465) or after the server's greeting, EHLO and
 *	STARTTLS (required: no STARTTLS, no bridge). libesmtp is told a
 *	loopback address no socket can listen on (port 0); the
 *	next connect() to it on the same thread goes to deliver_bridge_attach()
 *	(libesmtp's connect(), deliver_connect.c) and gets the server's
 *	greeting. A connect() from anywhere else is refused.
 *
 *	When the bridge could go: it does what libESMTP 1.1.0 (the last
 *	tagged release, and Debian 12's) cannot. Each of these has to come
 *	first.
 *
 *	The header cut (deliver_filter.h), and with it the CHUNKING mask:
 *	libESMTP's header pass (headers.c) runs on every message. It goes
 *	with a libESMTP that can send a message untouched, or with an MSA
 *	header policy of our own that leaves the pass nothing to do: add a
 *	missing Date: and Message-Id: at submission (RFC 6409 section 8),
 *	refuse a message without From:, and refuse or remove there what
 *	libESMTP would strip or drop (Return-Path:, Original-Recipient:,
 *	Resent-Reply-To:, second copies of the headers it knows, listed in
 *	deliver_filter.h). That policy is a change to SPEC section 4, under
 *	which idemrelay changes nothing in a message but its Received: and
 *	key headers.
 *
 *	TLS: a released libESMTP whose STARTTLS has the faults listed in
 *	tls/tls_client.c fixed. Keeping the plain text a server pipelines
 *	behind its 220, and the shared context, are fixed on libESMTP's
 *	libesmtp-1.1 branch, version 1.1.1 (commit 4ea8209 and others,
 *	2022), never tagged nor merged into master (as of March 2025); the
 *	wait on TLS 1.3 session tickets is not known to be. And implicit
 *	TLS, which no libESMTP has, for upstream.tls = "implicit".
 *
 *	And the rest the bridge carries: SMTPUTF8 on MAIL (RFC 6531, which
 *	libESMTP does not know) and BODY=8BITMIME where offered (libESMTP
 *	refuses a session that asks for it where it is not); the connect
 *	within upstream.timeout, to any address; every reply's deadline and
 *	whether the final dot reached the server's TCP (deliver_watch.h).
 *	The last three need only the upstream socket, so they could move to
 *	libesmtp's connect() (deliver_connect.c), which has libESMTP's, and a
 *	watchdog over it. Until all of this is there the bridge stays; with
 *	the header cut gone it would shrink to TLS, the MAIL parameters and
 *	the watch.
 *
 *	A thread per bridge, not one event loop for all of them: weighed
 *	and kept (issue 13). There are upstream.connections bridges at most
 *	(4 by default), each asleep in poll(2) but while bytes move, so a
 *	shared loop would save a few idle threads and nothing per message:
 *	a byte still crosses the socketpair and wakes a thread either way.
 *	What it would cost: one connection's TLS work (a handshake, a large
 *	SSL_write) would hold up the others, and the pump's state, now on
 *	its thread's stack, would become a table of connections. The
 *	benches of the 2 December layout (BENCHMARKS.md) found the delivery
 *	path's time in the upstream's replies and the store's syncs, not in
 *	the bridge.
 */
#ifndef DELIVER_ESMTP_DELIVER_BRIDGE_H
#define DELIVER_ESMTP_DELIVER_BRIDGE_H

#include <stddef.h>
#include <sys/socket.h>

#include <openssl/ssl.h>
#include "../deliver_policy.h"

struct deliver_bridge;

/*
 * deliver_bridge_open - connect to sa within timeout_ms and, with a context,
 * establish TLS: from the first byte if helo is NULL, else after EHLO helo
 * and STARTTLS (ctx NULL: plain, helo unused). The certificate is checked
 * as the context says. NULL on failure, with why and an RFC 3463 code in
 * dsn ("4.4.1": no connection). The bridge stops with the thread that
 * opens it (deadline_stop_on()): once that descriptor is readable it
 * hangs up, unless the reply to a final dot is owed, which it waits for.
 * SIGPIPE is blocked on the calling thread (and so on the bridge's).
 */
struct deliver_bridge *deliver_bridge_open(SSL_CTX *ctx, const struct sockaddr *sa,
					   socklen_t salen, const char *helo, int timeout_ms,
					   char *why, size_t whylen, char dsn[DELIVER_DSN_SIZE]);

/*
 * deliver_bridge_attach - for a connect(fd, sa, len): if sa is the bridges'
 * address and this thread opened a bridge that no connect() took yet,
 * make fd one end of an AF_UNIX socketpair (its file flags kept), start
 * that bridge's thread on the other end, and return 1: fd is connected.
 * 0: not that bridge, or it could not be done; connect as asked (and be
 * refused, if it was a bridge's address). For libesmtp's connect()
 * (deliver_connect.c).
 */
int deliver_bridge_attach(int fd, const struct sockaddr *sa, socklen_t len);

/* where libesmtp is told to connect, for every bridge: no socket can listen there */
#define DELIVER_BRIDGE_ADDRESS	"127.0.0.1:0"

/* deliver_bridge_tls - the TLS connection's description; "" for plain */
const char *deliver_bridge_tls(const struct deliver_bridge *b);

/*
 * deliver_bridge_mail_params - before libesmtp connects: per message, in
 * the order of its session, the MAIL parameters to send where the server
 * offers them (DELIVER_FILTER_UTF8, _8BIT: deliver_filter.h); want stays
 * the caller's until the end
 */
void deliver_bridge_mail_params(struct deliver_bridge *b, const unsigned char *want, size_t n);

/*
 * deliver_bridge_offered - which of those the server's EHLO reply listed
 * (the filter's reading, deliver_filter.h)? Final once libesmtp has read
 * that reply, which reached it through the filter.
 */
int deliver_bridge_offered(const struct deliver_bridge *b);

/*
 * deliver_bridge_rewind - libesmtp rewound a message (its message callback
 * called with no length pointer, on libesmtp's thread): the next bytes it
 * writes are that message's content, for the filter to cut
 * (deliver_filter_rewind())
 */
void deliver_bridge_rewind(struct deliver_bridge *b);

/*
 * deliver_bridge_over - has the upstream side ended (reset, closed, timed
 * out, cut)? Then nothing more libesmtp writes reaches the server.
 */
int deliver_bridge_over(const struct deliver_bridge *b);

/*
 * deliver_bridge_pacing - libesmtp's thread starts, or ends, a wait for a
 * rate token (deliver_rate_take), called before and after it: the upstream
 * is not idle while we hold our own commands back, so the wait is no
 * part of "nothing moved for upstream.timeout"
 */
void deliver_bridge_pacing(struct deliver_bridge *b);

/*
 * deliver_bridge_cut - forward nothing more from libesmtp (from the next
 * byte it writes): the server is gone for it, and the gate answers what
 * it is owed (deliver_gate.h) until it quits
 */
void deliver_bridge_cut(struct deliver_bridge *b);

/*
 * deliver_bridge_end - libesmtp is done: wait for the thread to end. NULL,
 * or why the bridge hung up on its own before forwarding libesmtp's
 * content (the filter refused it: no final dot went out)
 */
const char *deliver_bridge_end(struct deliver_bridge *b);

/*
 * deliver_bridge_dot_acked - after deliver_bridge_end: did the nth final
 * dot (1: the first message's content this connection carried) reach the
 * server? 1: it was written and the server's TCP had acknowledged every
 * byte up to it when the upstream side ended (or that could not be
 * told), or a later one was written; 0: it was never written upstream, or
 * was still unacknowledged when the server reset or closed the connection
 * or the bridge gave up: the message did not arrive (SPEC section 5).
 */
int deliver_bridge_dot_acked(const struct deliver_bridge *b, unsigned nth);

/*
 * deliver_bridge_ended - after deliver_bridge_end: how the upstream side
 * ended ("the server closed the connection", "lost connection with the
 * server (...)", "timeout waiting for the reply to DATA"), "" when
 * libesmtp hung up first; *timed_out set when a deadline passed
 * (deliver_watch.h), which the bridge enforces: every reply has one of
 * the timeout given to deliver_bridge_open(); *stood_in when the bridge
 * answered libesmtp for a server that was gone (deliver_gate.h), in
 * replies whose texts start with DELIVER_GATE_MARK
 */
const char *deliver_bridge_ended(const struct deliver_bridge *b, int *timed_out,
				 int *stood_in);

/* deliver_bridge_close - end the thread, close everything; NULL-safe */
void deliver_bridge_close(struct deliver_bridge *b);

#endif
