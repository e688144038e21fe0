/*
 * NAME
 *	smtp 3h
 * SUMMARY
 *	the SMTP protocol engine: bytes in, replies out
 * DESCRIPTION
 *	An smtp_session is a server-side SMTP state machine with no
 *	knowledge of sockets or storage. The caller feeds it the bytes read
 *	from the client with smtp_session_feed(); the engine appends replies
 *	to smtp_session_out(), which the caller writes to the client and
 *	consumes. Decisions that need the outside world are hooks:
 *
 *	rcpt	after a syntactically valid RCPT TO (relay access, limits).
 *	message	after end of DATA, or after BDAT ... LAST. The engine then
 *		waits: it consumes no more input until the caller answers
 *		with smtp_session_reply().
 *	auth	after AUTH PLAIN or LOGIN gave credentials. The engine waits
 *		until smtp_session_auth_reply(), so that the caller can check
 *		them off the event loop and delay a refusal.
 *
 *	TLS itself is the caller's: after STARTTLS the engine queues the
 *	220, discards every octet fed to it (smtp_session_starttls() is
 *	true) until the caller has done the handshake and called
 *	smtp_session_set_tls(), and then starts over (RFC 3207 section 4.2).
 *	Discarding is what defeats command injection before the handshake
 *	(CVE-2011-0411). AUTH is offered and accepted only once TLS is up.
 *
 *	The transaction (struct smtp_tx) is separate from the session: RSET,
 *	HELO/EHLO and the end of each message free the transaction, not the
 *	session.
 *
 *	Strictness (SPEC section 6): end of data is <CRLF>.<CRLF> only; bare
 *	CR or LF in the message becomes CRLF (or, with bare_lf_reject, the
 *	message is refused with 550 5.5.2); a text line over 998 octets or a
 *	NUL octet is counted in the tx for the relay to deal with (or, with
 *	long_lines_reject or nul_reject, the message is refused with 550
 *	5.6.0); command lines over 512 octets get
 *	500 5.5.2; memory is bounded by message_size, never by line length
 *	or chunk size. BDAT chunks (RFC 3030) are taken as they are, with no
 *	dot-unstuffing, under the same line-ending policy.
 *
 *	SMTPUTF8 (RFC 6531), where offered: a MAIL that declares it may give
 *	UTF-8 local-parts and domains in MAIL and RCPT (valid UTF-8, no
 *	controls); tx->smtputf8 tells the relay. Without the declaration a
 *	UTF-8 address gets 553 5.6.7. The message content is octets either
 *	way: the engine never looked at a header's charset.
 */
#ifndef SMTP_SMTP_H
#define SMTP_SMTP_H

#include <stddef.h>
#include <stdint.h>

#include "../util/buf.h"

#define SMTP_LINE_MAX	512	/* command line, including CRLF */

/* DSN NOTIFY bits (RFC 3461); 0 means not given */
#define SMTP_NOTIFY_NEVER	1
#define SMTP_NOTIFY_SUCCESS	2
#define SMTP_NOTIFY_FAILURE	4
#define SMTP_NOTIFY_DELAY	8

/* NONE is 0 in both: smtp_tx_new() gives them as zeroed memory */
enum smtp_ret { SMTP_RET_NONE = 0, SMTP_RET_FULL, SMTP_RET_HDRS };
enum smtp_body { SMTP_BODY_NONE = 0, SMTP_BODY_7BIT, SMTP_BODY_8BITMIME };

struct smtp_rcpt {
	char *addr;		/* owned; mailbox without angle brackets */
	int notify;		/* SMTP_NOTIFY_* bits */
	char *orcpt;		/* owned; ORCPT value as given ("rfc822;x"), or NULL */
	const char *id;		/* in a tx: its identity (smtp_rcpt_id), tx->ids' */
};

/*
 * smtp_rcpt_id - a recipient's identity, the one rule for "the same
 * recipient": its local part byte for byte, its domain (after the last @)
 * with ASCII letters in lower case (RFC 5321 section 2.4: a local part may
 * be case-sensitive, a domain is not). The engine takes a RCPT whose
 * identity the transaction holds already as decided (250, not counted
 * against max_rcpts), so a tx holds each identity once; a claim is filed
 * under it (SPEC section 4). 0, or -1 if addr is longer than the parser
 * takes an address (out is then no identity).
 */
#define SMTP_RCPT_ID_MAX	256
int smtp_rcpt_id(const char *addr, char out[SMTP_RCPT_ID_MAX]);

struct smtp_tx {
	char *from;		/* owned; reverse-path without brackets, "" for <> */
	enum smtp_body body;
	enum smtp_ret ret;
	char *envid;		/* owned; ENVID xtext-decoded, or NULL */
	uint64_t size;		/* SIZE= as declared, 0 if absent */
	int smtputf8;		/* MAIL declared SMTPUTF8 (RFC 6531) */
	struct smtp_rcpt *rcpts;	/* owned array; each identity once (smtp_rcpt_id) */
	size_t n_rcpts;
	size_t cap_rcpts;
	void *ids;		/* owned tsearch tree of the rcpts' identities, each owned */
	struct buf data;	/* message content: dot-unstuffed (DATA) or as
				 * chunked (BDAT); every line ends CRLF */
	int bare_eol;		/* a bare CR or LF was seen in the message */
	size_t long_lines;	/* lines over SMTP_TEXT_LINE_MAX (998) octets */
	int nul;		/* a NUL octet was seen in the message */
};

struct smtp_config {
	const char *hostname;	/* greeting, EHLO reply; not copied: outlives sessions */
	uint64_t message_size;	/* SIZE limit: 552 5.3.4 past it */
	int max_rcpts;		/* 452 4.5.3 past it; 0: no limit */
	int bare_lf_reject;	/* 550 5.5.2 for a message with bare CR/LF */
	int long_lines_reject;	/* 550 5.6.0 for a line over 998 octets */
	int nul_reject;		/* 550 5.6.0 for a message with a NUL octet */
	int starttls;		/* offer STARTTLS while TLS is not up */
	int starttls_required;	/* before TLS only EHLO HELO STARTTLS NOOP RSET
				 * QUIT; the rest gets 530 5.7.0 */
	int auth;		/* offer AUTH PLAIN LOGIN once TLS is up (needs
				 * the auth hook) */
	int auth_required;	/* MAIL before AUTH: 530 5.7.0 (RFC 6409) */
	int hard_errors;	/* 421 and close after this many 4xx/5xx
				 * replies without a message accepted; 0: none */
	int junk_commands;	/* NOOP, RSET, VRFY, HELP past this many without
				 * a message accepted count as errors; 0: none */
	int smtputf8;		/* offer SMTPUTF8 (RFC 6531): UTF-8 addresses */
	size_t out_max;		/* no command is taken while this much output
				 * waits (a client that does not read); 0: none */
};

struct smtp_session;

struct smtp_hooks {
	/*
	 * rcpt - decide a syntactically valid recipient. Return NULL to
	 * accept (250 2.1.5 Ok), or a complete reply line without CRLF,
	 * e.g. "554 5.7.1 <a@b>: Relay access denied". May be NULL.
	 */
	const char *(*rcpt) (void *ctx, const struct smtp_tx *tx, const char *addr);

	/*
	 * message - end of DATA (or BDAT LAST) for a message within
	 * limits. The engine waits (feed consumes nothing more) until
	 * smtp_session_reply().
	 * The tx stays valid, and owned by the engine, until then; the hook
	 * may steal tx->data (leaving an empty buffer in its place).
	 */
	void (*message) (void *ctx, struct smtp_session *s, struct smtp_tx *tx);

	/*
	 * auth - credentials from AUTH (mech "PLAIN" or "LOGIN"); user is
	 * 1-255 octets without controls or spaces, pass has no NUL. Both
	 * are the engine's and are wiped after the call: copy them. The
	 * engine waits (feed consumes nothing) until
	 * smtp_session_auth_reply(), which the hook may call itself.
	 */
	void (*auth) (void *ctx, struct smtp_session *s, const char *mech,
		      const char *user, const char *pass);

	/*
	 * refused - the engine refused mail on its own policy, for the log:
	 * stage "MAIL" (a declared SIZE over message_size; tx has only the
	 * sender) or "END-OF-MESSAGE" (552 over message_size, 550 bare CR
	 * or LF), with the reply line. May be NULL.
	 */
	void (*refused) (void *ctx, struct smtp_session *s, const struct smtp_tx *tx,
			 const char *stage, const char *reply);
};

struct smtp_session *smtp_session_new(const struct smtp_config *cfg,
				      const struct smtp_hooks *hooks, void *ctx);
void smtp_session_free(struct smtp_session *s);	/* NULL-safe */

/* smtp_session_greet - queue the 220 greeting */
void smtp_session_greet(struct smtp_session *s);

/*
 * smtp_session_feed - process client bytes; returns how many were
 * consumed. Fewer than len only while waiting for smtp_session_reply()
 * or once the session is closing; the caller keeps the rest and feeds it
 * again after the reply.
 */
size_t smtp_session_feed(struct smtp_session *s, const char *in, size_t len);

/* smtp_session_reply - answer the message hook (one reply line, no CRLF) and resume */
void smtp_session_reply(struct smtp_session *s, const char *reply);

/*
 * smtp_session_auth_reply - answer the auth hook: ok 1 gives 235 and
 * makes the user authenticated; 0 gives 535 (and 421 and close after
 * three of them); -1 gives 454 4.7.0, no verdict (a rate
 * limit). Resumes input.
 */
void smtp_session_auth_reply(struct smtp_session *s, int ok);

/*
 * smtp_session_set_tls - TLS is up: after the STARTTLS handshake, or for
 * implicit TLS before smtp_session_greet(). The session forgets what it
 * knew (HELO/EHLO, transaction, partial input) and takes commands again.
 */
void smtp_session_set_tls(struct smtp_session *s);

/* pending output: the caller writes it and buf_consume()s what was written */
struct buf *smtp_session_out(struct smtp_session *s);

int smtp_session_closing(const struct smtp_session *s);	/* close once output is flushed */
int smtp_session_waiting(const struct smtp_session *s);	/* in the message or auth hook */
int smtp_session_in_data(const struct smtp_session *s);	/* message octets: data_timeout */
const char *smtp_session_helo(const struct smtp_session *s);	/* "" before HELO/EHLO */
int smtp_session_esmtp(const struct smtp_session *s);	/* greeted with EHLO */
int smtp_session_starttls(const struct smtp_session *s);	/* 220 queued: flush, handshake */
int smtp_session_tls(const struct smtp_session *s);	/* smtp_session_set_tls() was called */
const char *smtp_session_user(const struct smtp_session *s);	/* AUTH user, or NULL */

/* why a session closed (smtp_session_why()) */
enum smtp_close {
	SMTP_CLOSE_NONE,		/* open, or closed by the caller */
	SMTP_CLOSE_QUIT,		/* the client said QUIT */
	SMTP_CLOSE_TIMEOUT,		/* the caller's deadline: 421 4.4.2 */
	SMTP_CLOSE_ERRORS,		/* too many errors (failed AUTH, hard_errors) */
	SMTP_CLOSE_SHUTDOWN,		/* the daemon stops: 421 4.3.2 */
};

/*
 * smtp_session_close - queue the 421 of why (SMTP_CLOSE_TIMEOUT or
 * SMTP_CLOSE_SHUTDOWN) and close; while a hook holds the session, after
 * its answer, so that a message taken is never answered 421 alone
 */
void smtp_session_close(struct smtp_session *s, enum smtp_close why);

/*
 * For the caller's deadlines and logs: records counts what the client
 * completed (a command line, an AUTH response line, a whole message, a
 * BDAT chunk), so that a deadline can run per record rather than per
 * read; where names the last command ("CONNECT" before any, "DATA",
 * "END-OF-MESSAGE" once a message is in) as Postfix's "lost connection
 * after CMD" does; stats formats the command counts of its disconnect
 * line (" ehlo=1 mail=1 rcpt=1/2 data=1 quit=1 commands=5/6").
 */
unsigned long smtp_session_records(const struct smtp_session *s);
const char *smtp_session_where(const struct smtp_session *s);
void smtp_session_stats(const struct smtp_session *s, char *buf, size_t len);
enum smtp_close smtp_session_why(const struct smtp_session *s);

/* smtp_session_data_len - octets of message the transaction holds, 0 without one */
size_t smtp_session_data_len(const struct smtp_session *s);

/*
 * RFC 3461 xtext, read two ways: STRICT for what a client sends (ENVID,
 * ORCPT: "+" and two upper-case hex digits, other octets 33-126 but "=",
 * decoding to printable US-ASCII as 4.2 and 4.4 require); LENIENT for a
 * stored ORCPT that delivery passes on, which must never fail a queued
 * message whatever the store holds (a row edited by hand, another
 * version): "+XX" in either case decoded, all else kept. The two agree
 * on whatever STRICT accepts.
 */
enum smtp_xtext { SMTP_XTEXT_STRICT, SMTP_XTEXT_LENIENT };

/* smtp_xtext_decode - append in[0..len) decoded to out (NULL: check only): 0, or -1 (STRICT) */
int smtp_xtext_decode(struct buf *out, const char *in, size_t len, enum smtp_xtext how);

/*
 * smtp_orcpt_split - "addr-type;xtext" (RFC 3461 4.2) as its type (before
 * the first ";", not empty; STRICT: atext, and an xtext follows) and its
 * decoded address, both owned by the caller. type alone decides: NULL,
 * checked only, nothing allocated (addr is not used). 0, or -1 (nothing
 * set).
 */
int smtp_orcpt_split(const char *v, size_t len, enum smtp_xtext how, char **type, char **addr);

/*
 * smtp_utf8_len - octets of the one valid, non-ASCII UTF-8 character at p
 * (no overlong form, surrogate, code point past U+10FFFF or C1 control),
 * or 0: what an SMTPUTF8 address may hold beyond ASCII
 */
size_t smtp_utf8_len(const char *p, size_t len);

/* smtp_ascii - no octet above 127 in p[0..len)? (SMTPUTF8 and 8BITMIME ask) */
int smtp_ascii(const char *p, size_t len);

/* smtp_auth_name_ok - an AUTH user name (1-255 octets, no space or control): the users file's too */
int smtp_auth_name_ok(const char *p, size_t n);

#endif
