/*
 * NAME
 *	deliver_filter 3h
 * SUMMARY
 *	the bridge's stream filter: libesmtp's own header block taken out
 * DESCRIPTION
 *	libesmtp 1.1.0 processes the header block of every message it sends,
 *	and cannot be told not to: it adds Date:, From: and Message-Id: when
 *	they are missing, strips Return-Path:, Original-Recipient: and
 *	Resent-Reply-To:, and drops second copies of the headers it knows
 *	(Date, From, Message-Id, Sender, To, Cc, Bcc, Reply-To,
 *	Disposition-Notification-To; not Subject, which it does not know:
 *	libESMTP's headers.c). So
 *	deliver_smtp_msg.c gives it a header block of its own to process: the
 *	line DELIVER_FILTER_SENTINEL and an empty line. The stored message
 *	follows, headers and body, and libesmtp takes all of it for body,
 *	which it copies unchanged (dot-stuffed). The bridge (deliver_bridge.h)
 *	passes libesmtp's writes through this filter, which takes libesmtp's
 *	block out again, and the server's EHLO reply, line by line as the gate
 *	(deliver_gate.h) holds it:
 *
 *	deliver_filter_rewind(), libesmtp rewound the message: it calls the
 *	message callback so (length pointer NULL) once per message it sends,
 *	right after reading the 354 to DATA and before it writes a byte of the
 *	content (libESMTP's protocol.c, cmd_data2(); also cmd_bdat(), never
 *	reached, as CHUNKING is hidden). So everything libesmtp wrote before
 *	is through the filter by then: libesmtp flushed it before reading the
 *	reply, and the server answered the DATA line only once it had it (the
 *	bridge says where the rewind falls in libesmtp's stream,
 *	deliver_bridge_rewind()). This arms the cut; the server's replies play no part in
 *	it, so no 3xx or 334 (AUTH) a server sends, in whatever reply, can arm
 *	or disarm it. A rewind in the middle of the content fails the filter.
 *
 *	deliver_filter_up(), libesmtp's writes to the server: once armed, the
 *	content up to and including its first empty line is dropped. It must
 *	start with the sentinel line and end within DELIVER_FILTER_BLOCK_MAX
 *	bytes; if not, the filter fails for good, and the bridge hangs up
 *	rather than pass on something else: the final dot never goes out, and
 *	the message is deferred. A lone ".", libesmtp's answer to a 354 when
 *	the server refused every recipient, comes without a rewind: it passes
 *	as a command. The sentinel line never does: a command line starting
 *	with it is a content that came with no rewind, and fails the filter
 *	the same way, so that its block never reaches a server's mailbox.
 *
 *	deliver_filter_ehlo_line(), a whole line of the server's EHLO reply,
 *	before libesmtp gets any of it (the gate passes on whole replies
 *	only), each keyword read as libESMTP reads one (after blanks, up to an
 *	octet that cannot be in one): CHUNKING is hidden (the keyword
 *	overwritten, same length):
 *	libesmtp sends BDAT whenever the server offers it, and the cut would
 *	break BDAT's byte counts. BINARYMIME is left alone: libesmtp uses it
 *	only when asked to, and deliver_smtp_msg.c never asks. And the AUTH
 *	line's mechanisms but PLAIN and LOGIN are blanked (read as libESMTP
 *	reads them, "AUTH=" too): libesmtp tries every mechanism it has a
 *	plugin for in the server's order, CRAM-MD5 and NTLM among them, and
 *	upstream AUTH uses only those two (deliver_auth.h).
 *
 *	It also finds where each message's content ends: the first
 *	<CRLF>.<CRLF> after a cut block (libesmtp dot-stuffs the content, so
 *	nothing earlier can look like it), and says where in its output that
 *	final dot ended (dot_end), so that the bridge can learn whether the
 *	server's TCP acknowledged every byte up to it (deliver_bridge.h).
 *	The lone "." has no block and is not counted.
 *
 *	The MAIL parameters SMTPUTF8 (RFC 6531), which libesmtp 1.1.0 does
 *	not know, and BODY=8BITMIME (RFC 6152), for which libesmtp would
 *	refuse a whole session where the server does not offer it: the filter
 *	notes the SMTPUTF8 and 8BITMIME lines of the server's EHLO reply
 *	(offered), and appends what was offered of " BODY=8BITMIME" and
 *	" SMTPUTF8" to libesmtp's MAIL FROM line of each message the caller
 *	marked so (deliver_filter_mail_params(): flags per message, in the
 *	order they were added to libesmtp's session, which is the order
 *	libesmtp sends them in). That makes the output longer than the input,
 *	by DELIVER_FILTER_GROW at most per call: more than one such MAIL line
 *	in one write fails the filter (libesmtp writes its next MAIL only
 *	after the reply to the last message's dot).
 *
 *	And it keeps count of the replies the server owes, for the bridge's
 *	reply deadline: one for the greeting, one per command line libesmtp
 *	writes outside the content (AUTH's answers to 334 included), one per
 *	final dot. deliver_filter_verb() names each; the gate (deliver_gate.h)
 *	counts the whole replies libesmtp was given.
 *
 *	deliver_filter_up() works a byte at a time across calls: reads may
 *	split libesmtp's stream anywhere. The SIZE= libesmtp sends is
 *	deliver_smtp_msg.c's estimate, the stored message's size: exactly what
 *	goes out once the block is cut.
 */
#ifndef DELIVER_ESMTP_DELIVER_FILTER_H
#define DELIVER_ESMTP_DELIVER_FILTER_H

#include <stdatomic.h>
#include <stddef.h>
#include <sys/types.h>

#define DELIVER_FILTER_SENTINEL	"X-Idemrelay-Cut: 1\r\n"
#define DELIVER_FILTER_BLOCK_MAX 4096	/* sentinel, Date:, From: <sender>, Message-Id: */
#define DELIVER_FILTER_UTF8	1	/* a message's MAIL wants SMTPUTF8 */
#define DELIVER_FILTER_8BIT	2	/* ... BODY=8BITMIME */
#define DELIVER_FILTER_TLS	4	/* offered: STARTTLS (deliver_bridge_starttls.c) */
#define DELIVER_FILTER_GROW	(sizeof(" BODY=8BITMIME SMTPUTF8") - 1)
#define DELIVER_FILTER_VERBS	16	/* owed replies named (more pipelined: unnamed) */
#define DELIVER_FILTER_VERB	16
#define DELIVER_FILTER_DOT	"the final dot"	/* what a final dot's reply is called */

struct deliver_filter {
	/* libesmtp's writes */
	int armed;			/* libesmtp rewound: the block comes next */
	size_t cut;			/* bytes of the block dropped so far */
	int eoh;			/* how much of "\r\n\r\n" the last bytes were */
	int body;			/* in a message's content, after its block */
	int dotst;			/* how much of "\r\n.\r\n" the last bytes were */
	ssize_t dot_end;		/* after deliver_filter_up(): offset just past a
					 * final dot in its output; -1 if none */
	/* the replies owed */
	unsigned long cmds;		/* replies due: the greeting, commands, final dots */
	char verbs[DELIVER_FILTER_VERBS][DELIVER_FILTER_VERB];	/* by cmds % VERBS */
	unsigned long dot_reply;	/* 1 + the number of the last final dot's reply; 0 none */
	char verb[DELIVER_FILTER_VERB];	/* the first word of the command being written */
	size_t verb_len;
	int verb_done;			/* past that word */
	char why[128];			/* why the filter failed; "" while it has not */
	/* MAIL parameters: SMTPUTF8, BODY=8BITMIME */
	atomic_int offered;		/* DELIVER_FILTER_UTF8, _8BIT, _TLS: what the server's
					 * EHLO reply listed (read on libesmtp's thread
					 * too: the bridge's) */
	const unsigned char *mail_params;	/* not owned; per message: what it wants */
	size_t n_mail_params;
	unsigned mails;			/* MAIL FROM lines passed */
	int cmd_mid;			/* inside a command line */
	int cmd_match;			/* octets of "MAIL FROM:" matched; -1: not MAIL */
	int cmd_sentinel;		/* octets of the sentinel matched; -1: not it */
};

/* deliver_filter_init - a filter for a new connection */
void deliver_filter_init(struct deliver_filter *f);

/*
 * deliver_filter_mail_params - per message, in libesmtp's order: the MAIL
 * parameters (DELIVER_FILTER_UTF8, _8BIT) to send where offered. want stays
 * the caller's, and must outlive the filter's use.
 */
void deliver_filter_mail_params(struct deliver_filter *f, const unsigned char *want, size_t n);

/*
 * deliver_filter_rewind - libesmtp rewound the message: what it writes
 * next is a message's content, the block first (f->why if it was in the
 * middle of one)
 */
void deliver_filter_rewind(struct deliver_filter *f);

/*
 * deliver_filter_ehlo_line - one whole line of the server's EHLO reply
 * (len octets, its line end included), in place: CHUNKING and AUTH
 * mechanisms but PLAIN and LOGIN hidden, SMTPUTF8, 8BITMIME and STARTTLS
 * noted in f->offered
 */
void deliver_filter_ehlo_line(struct deliver_filter *f, char *line, size_t len);

/*
 * deliver_filter_up - libesmtp's bytes as the server gets them, in place
 * (buf has room for len + DELIVER_FILTER_GROW: MAIL parameters may be added);
 * returns how many, or -1 when the filter has failed (why in f->why).
 * f->dot_end says where a message's final dot ended in them, if it did.
 */
ssize_t deliver_filter_up(struct deliver_filter *f, char *buf, size_t len);

/*
 * deliver_filter_verb - what the nth reply of the connection answers:
 * "the greeting" (0), a command's verb ("DATA"), "the final dot", "a
 * pipelined command" once its name was overwritten; NULL if nothing was
 * written that it could answer. nth: the gate's released, the oldest owed.
 */
const char *deliver_filter_verb(const struct deliver_filter *f, unsigned long nth);

/*
 * deliver_filter_dot_owed - is a reply to a final dot owed, replies (the
 * gate's released) given? (then the outcome is out there)
 */
int deliver_filter_dot_owed(const struct deliver_filter *f, unsigned long replies);

#endif
