/*
 * NAME
 *	deliver_gate 3h
 * SUMMARY
 *	the bridge's reply gate: libesmtp reads whole, well-formed, owed
 *	replies, and never the end of a connection with two replies owed
 * DESCRIPTION
 *	libESMTP 1.1.0 (the last release, Debian 12's libesmtp 1.1.0) crashes
 *	on a connection that ends, or on a reply it cannot parse, while it
 *	waits for three or more replies. Its protocol engine (protocol.c,
 *	do_session()) counts the commands it wrote (nresp) and, while that
 *	count is not zero and sio_poll() says the socket is readable, calls
 *	the reply handler of the current state, protocol_states[rsp_state]
 *	.rsp, without looking at rsp_state again between replies. A handler
 *	whose read_smtp_response() fails (end of file, a read error, a
 *	syntax error, continuation lines whose code or enhanced code differs
 *	from the first line's, a line that does not end within 1,023
 *	octets) sets rsp_state to S_quit; the next readable poll, the end of
 *	file again, calls rsp_quit(), which fails to read as well and sets
 *	rsp_state to -1; the next one calls protocol_states[-1].rsp, a
 *	pointer read from before the table: SIGSEGV. With PIPELINING it
 *	writes every RCPT and the DATA of a message in one go (MAIL alone,
 *	then n RCPT and DATA: n + 1 replies owed), so an upstream that resets
 *	after the reply to MAIL with two recipients, or after the first
 *	RCPT's reply with three, took the daemon down (issue 25). rsp_rset()
 *	ignores a failed read, which only moves the crash one reply later.
 *	The libesmtp-1.1 branch and master have the same loop. On Linux a
 *	reset also drops what the server sent and the bridge had not read
 *	yet, so an upstream that resets "after" its last reply of a burst
 *	can leave several replies owed all the same.
 *
 *	libesmtp cannot be told to stop, and its count of replies owed
 *	includes commands it has not flushed yet (the RCPTs it is still
 *	pipelining), so no end of file given "early enough" is safe. The gate
 *	makes sure a failed read never happens with more than one reply owed:
 *
 *	deliver_gate_down(): what the server sends reaches libesmtp one whole
 *	reply at a time (each line of an EHLO reply through the filter first,
 *	deliver_filter_ehlo_line()), and
 *	only if libesmtp 1.1.0's reader takes it: lines of at most
 *	DELIVER_GATE_LINE_MAX octets ending in LF, no NUL, a code of three
 *	digits from 200 to 599 and a space or "-", every line with the first
 *	line's code and, once an EHLO reply listed ENHANCEDSTATUSCODES (an
 *	EHLO, HELO or greeting reply is never checked, as libesmtp does not),
 *	with the first line's enhanced code if that one has one, as
 *	libESMTP's strtol() reads it; at most DELIVER_GATE_REPLY_MAX octets;
 *	and only a reply owed (a reply while nothing is owed is unsolicited).
 *	A reply that is not so, in whole or in part, is never passed on: the
 *	server is then treated as gone (why in g->why), as when its side of
 *	the connection ends. A line the server did not finish (no LF) is no
 *	reply, like Postfix's "lost connection".
 *
 *	deliver_gate_gone() and deliver_gate_answer(): once the server is
 *	gone the gate answers for it: every command libesmtp wrote and got
 *	no reply to gets "421 4.4.2 DELIVER_GATE_MARK why" (QUIT "221
 *	2.0.0"), which libesmtp's handlers take like any refusal: the RCPTs
 *	and DATA fail, the session goes on to QUIT and ends. Two things are
 *	never answered: a final dot (its reply is the server's alone: a made
 *	up one would hide an ambiguous delivery, SPEC section 5), and the
 *	content after a 354. Then g->hangup says the bridge must hang up on
 *	libesmtp at once: it then owes one reply, or is writing the content
 *	that only that reply follows, so its failed read is the last one.
 *
 *	deliver_gate_ours(): a reply's text (as libesmtp keeps it) is the
 *	gate's, not the server's: deliver_smtp_msg.c counts a recipient so
 *	answered as unanswered.
 */
#ifndef DELIVER_ESMTP_DELIVER_GATE_H
#define DELIVER_ESMTP_DELIVER_GATE_H

#include <stddef.h>

#include "deliver_filter.h"

#define DELIVER_GATE_LINE_MAX	1000	/* octets of a reply line, LF included */
#define DELIVER_GATE_REPLY_MAX	4096	/* octets of a whole reply */
#define DELIVER_GATE_MARK	"idemrelay bridge:"	/* starts a text the gate made up */
#define DELIVER_GATE_WHY	160

struct deliver_gate {
	char line[DELIVER_GATE_LINE_MAX + 1];	/* the line being read, NUL-terminated at its end */
	size_t line_len;
	char held[DELIVER_GATE_REPLY_MAX];	/* complete lines of the reply being read */
	size_t held_len;
	unsigned lines;			/* lines in held */
	char code[3];			/* the reply's code, from its first line */
	int trip_set;			/* the first line has an enhanced code: trip */
	long trip[3];
	int enhanced;			/* an EHLO reply listed ENHANCEDSTATUSCODES */
	int ehlo_enh;			/* the EHLO reply being read does */
	unsigned long released;		/* replies libesmtp was given: the server's, ours */
	int data_open;			/* the last one was a 3xx to DATA: content follows */
	int gone;			/* the server is gone: the gate answers */
	int answered;			/* it answered at least once */
	int hangup;			/* hang up on libesmtp now */
	char why[DELIVER_GATE_WHY];	/* why the server is gone */
};

/* deliver_gate_init - a gate for a new connection */
void deliver_gate_init(struct deliver_gate *g);

/*
 * deliver_gate_down - the server's bytes (the filter counts the replies
 * owed, and edits the EHLO reply's lines): whole replies libesmtp takes, in
 * out (room for len + DELIVER_GATE_REPLY_MAX); how many. A reply it would
 * not take, or one not owed, makes the server gone (g->gone, g->why);
 * nothing more passes.
 */
size_t deliver_gate_down(struct deliver_gate *g, struct deliver_filter *f,
			 const char *in, size_t len, char *out);

/* deliver_gate_gone - the server is gone (why): what it had not finished is dropped */
void deliver_gate_gone(struct deliver_gate *g, const char *why);

/*
 * deliver_gate_answer - once gone: the replies owed to libesmtp's commands
 * (deliver_filter.h counts them), up to a final dot's, in out (outlen
 * octets); how many. g->hangup once a final dot's reply is owed or a
 * content follows a 354: then hang up on libesmtp.
 */
size_t deliver_gate_answer(struct deliver_gate *g, const struct deliver_filter *f,
			   char *out, size_t outlen);

/* deliver_gate_ours - is this reply text (libesmtp's status text) one the gate made up? */
int deliver_gate_ours(const char *text);

#endif
