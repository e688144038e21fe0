/*
 * NAME
 *	test_smtp_session 1
 * SUMMARY
 *	unit tests: the SMTP session (commands, order, pipelining, DATA,
 *	BDAT, waiting for the message hook, timeouts)
 * DESCRIPTION
 *	Scripted sessions: each row is a client's input and the exact
 *	output wanted (greeting included). Every row is fed in one call (as
 *	a pipelining client does), one byte per call and in chunks of 7 (BDAT
 *	rows also cut in two at every point); all must give the same output. A fake message hook records what it was given
 *	and answers at once; other tests make it wait.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../../smtp/smtp.h"
#include "../../smtp/smtp_session.h"	/* for the bounded-memory checks */
#include "../../util/log.h"
#include "test_smtp.h"

#define IN(x)	.in = x, .len = sizeof(x) - 1
#define MSG(x)	.data = x, .data_len = sizeof(x) - 1


 /*
  * The fake world behind the hooks.
  */
struct fake {
	int     async;			/* message hook does not reply itself */
	const char *reply;		/* message hook's answer */
	int     calls;			/* message hook calls */
	struct buf data;		/* last message, stolen from the tx */
	struct buf from;		/* last sender */
	struct buf rcpts;		/* last recipients, "a,b," */
	int     bare_eol;
	int     smtputf8;		/* the last tx declared SMTPUTF8 */
	char    deny[300];		/* rcpt hook's last refusal */
};

/* fake_rcpt - refuse recipients whose local-part starts with "deny" */
static const char *fake_rcpt(void *ctx, const struct smtp_tx *tx, const char *addr)
{
	struct fake *f = ctx;

	(void) tx;
	if (strncmp(addr, "deny", 4) != 0)
		return NULL;
	snprintf(f->deny, sizeof(f->deny), "554 5.7.1 <%s>: Relay access denied", addr);
	return f->deny;
}

/* fake_message - record the message, steal its data, maybe reply */
static void fake_message(void *ctx, struct smtp_session *s, struct smtp_tx *tx)
{
	struct fake *f = ctx;
	size_t i;

	f->calls++;
	buf_free(&f->data);
	f->data = tx->data;
	tx->data = (struct buf) BUF_INIT;
	buf_reset(&f->from);
	buf_printf(&f->from, "%s", tx->from);
	buf_reset(&f->rcpts);
	for (i = 0; i < tx->n_rcpts; i++)
		buf_printf(&f->rcpts, "%s,", tx->rcpts[i].addr);
	f->bare_eol = tx->bare_eol;
	f->smtputf8 = tx->smtputf8;
	if (!f->async)
		smtp_session_reply(s, f->reply ? f->reply : "250 2.0.0 Ok: queued as TESTQID");
}

static const struct smtp_hooks fake_hooks = {.rcpt = fake_rcpt, .message = fake_message};

/* fake_free - release what the fake recorded */
static void fake_free(struct fake *f)
{
	buf_free(&f->data);
	buf_free(&f->from);
	buf_free(&f->rcpts);
}

/* new_session_utf8 - the usual test configuration, SMTPUTF8 offered or not */
static struct smtp_session *new_session_utf8(struct fake *f, int bare_lf_reject, int smtputf8)
{
	struct smtp_config cfg = {.hostname = "mx.test", .message_size = 1000, .max_rcpts = 3};
	struct smtp_session *s;

	cfg.bare_lf_reject = bare_lf_reject;
	cfg.smtputf8 = smtputf8;
	s = smtp_session_new(&cfg, &fake_hooks, f);
	smtp_session_greet(s);
	return s;
}

/* new_session - the usual test configuration (no SMTPUTF8: the EHLO_R reply) */
static struct smtp_session *new_session(struct fake *f, int bare_lf_reject)
{
	return new_session_utf8(f, bare_lf_reject, 0);
}

#define NEED_RCPT "503 5.5.1 Error: need RCPT command\r\n"
#define UNKNOWN	"500 5.5.2 Error: command not recognized\r\n"
#define TOOLONG	"500 5.5.2 Line too long\r\n"
#define ENVELOPE "EHLO c\r\nMAIL FROM:<a@b.c>\r\nRCPT TO:<x@y.z>\r\nDATA\r\n"
#define ENVELOPE_R GREET EHLO_R OK_MAIL OK_RCPT GO

struct script {
	const char *name;
	const char *in;
	size_t len;
	const char *want;		/* whole output, greeting included */
	int bare_lf_reject;
	int bare_eol;			/* tx->bare_eol at the last hook call */
	const char *hook_reply;		/* NULL: "250 2.0.0 Ok: queued as TESTQID" */
	size_t rest;			/* octets left unconsumed (after QUIT) */
	int closing;
	int calls;			/* message hook calls */
	const char *data;		/* last message stored, NULL: unchecked */
	size_t data_len;
	const char *rcpts;		/* last recipients, NULL: unchecked */
	int smtputf8;			/* the listener offers SMTPUTF8 */
	int tx_utf8;			/* tx->smtputf8 at the last hook call */
};

/* run_script - feed first octets, then chunks of step (0: all); check */
static int run_script(const struct script *c, size_t first, size_t step, const char *how)
{
	struct fake f;
	struct smtp_session *s;
	size_t i;
	int bad = 0;

	memset(&f, 0, sizeof(f));
	f.reply = c->hook_reply;
	s = new_session_utf8(&f, c->bare_lf_reject, c->smtputf8);
	i = feed_chunks(s, c->in, c->len, first, step);
	if (smtp_session_closing(s) && smtp_session_feed(s, "NOOP\r\n", 6) != 0) {
		print_error("%s (%s): feed consumed input after closing\n", c->name, how);
		bad = 1;
	}
	bad |= check_output(s, c->name, how, c->want);
	if (c->len - i != c->rest || smtp_session_closing(s) != c->closing
	    || f.calls != c->calls || smtp_session_waiting(s)
	    || (c->calls && (f.bare_eol != c->bare_eol || f.smtputf8 != c->tx_utf8))) {
		print_error("%s (%s): got rest=%zu closing=%d calls=%d waiting=%d bare=%d "
			    "smtputf8=%d, want rest=%zu closing=%d calls=%d waiting=0 bare=%d "
			    "smtputf8=%d\n", c->name, how,
			    c->len - i, smtp_session_closing(s), f.calls,
			    smtp_session_waiting(s), f.bare_eol, f.smtputf8, c->rest, c->closing,
			    c->calls, c->bare_eol, c->tx_utf8);
		bad = 1;
	}
	if (c->data)
		bad |= check_bytes(c->name, how, "message", f.data.data, f.data.len,
				   c->data, c->data_len);
	if (c->rcpts)
		bad |= check_bytes(c->name, how, "recipients", f.rcpts.data, f.rcpts.len,
				   c->rcpts, strlen(c->rcpts));
	smtp_session_free(s);
	fake_free(&f);
	return bad;
}

/* run_row - run_script with no first cut, as run_rows calls it */
static int run_row(const void *row, size_t step, const char *how)
{
	return run_script(row, 0, step, how);
}

/* run_scripts - each row in every feed mode */
static int run_scripts(const struct script *cases, size_t n)
{
	return run_rows(cases, sizeof(cases[0]), n, run_row);
}

/* run_scripts_cut - as run_scripts, and cut in two at every point */
static int run_scripts_cut(const struct script *cases, size_t n)
{
	char how[64];
	size_t i, cut;
	int fails = run_scripts(cases, n);

	for (i = 0; i < n; i++) {
		for (cut = 1; cut < cases[i].len; cut++) {
			snprintf(how, sizeof(how), "cut at %zu", cut);
			if (run_script(cases + i, cut, 0, how)) {
				fails++;
				break;
			}
		}
	}
	return fails;
}

 /*
  * Commands and their order.
  */
static void test_commands(void **state)
{
	static const struct script cases[] = {
		{.name = "greeting only", IN(""),
		 .want = GREET},
		{.name = "EHLO", IN("EHLO client.example\r\n"),
		 .want = GREET EHLO_R},
		{.name = "HELO", IN("HELO client\r\n"),
		 .want = GREET "250 mx.test\r\n"},
		{.name = "HELO needs a name", IN("HELO\r\nEHLO a b\r\nEHLO a\x01\r\n"),
		 .want = GREET "501 5.5.4 Syntax: HELO hostname\r\n501 5.5.4 Syntax: EHLO hostname\r\n"
		 "501 5.5.4 Syntax: EHLO hostname\r\n"},
		{.name = "full transaction", IN(ENVELOPE "Subject: t\r\n\r\nhi\r\n.\r\nQUIT\r\n"),
		 .want = ENVELOPE_R QUEUED BYE,
		 .closing = 1,
		 .calls = 1,
		 MSG("Subject: t\r\n\r\nhi\r\n"),
		 .rcpts = "x@y.z,"},
		{.name = "QUIT leaves the rest", IN("QUIT\r\nNOOP\r\n"),
		 .want = GREET BYE,
		 .rest = 6,
		 .closing = 1},
		{.name = "QUIT drops the tx", IN("MAIL FROM:<a@b.c>\r\nRCPT TO:<x@y.z>\r\nQUIT\r\n"),
		 .want = GREET OK_MAIL OK_RCPT BYE,
		 .closing = 1},
		{.name = "MAIL without HELO is accepted", IN("MAIL FROM:<a@b.c>\r\n"),
		 .want = GREET OK_MAIL},
		{.name = "out of order", IN("RCPT TO:<x@y.z>\r\nDATA\r\nMAIL FROM:<a@b.c>\r\n"
				   "MAIL FROM:<a@b.c>\r\nDATA\r\n"),
		 .want = GREET NEED_MAIL NEED_RCPT OK_MAIL "503 5.5.1 Error: nested MAIL command\r\n" NEED_RCPT},
		{.name = "EHLO ends the tx", IN("MAIL FROM:<a@b.c>\r\nEHLO c\r\nRCPT TO:<x@y.z>\r\n"),
		 .want = GREET OK_MAIL EHLO_R NEED_MAIL},
		{.name = "RSET", IN("MAIL FROM:<a@b.c>\r\nRCPT TO:<x@y.z>\r\nRSET\r\nDATA\r\nRSET x\r\n"
			   "MAIL FROM:<a@b.c>\r\n"),
		 .want = GREET OK_MAIL OK_RCPT OK NEED_RCPT "501 5.5.4 Syntax: RSET\r\n" OK_MAIL},
		{.name = "NOOP VRFY HELP", IN("NOOP\r\nNOOP hello\r\nVRFY root\r\nVRFY\r\nHELP\r\nhelp me\r\n"),
		 .want = GREET OK OK
		 "252 2.5.0 Cannot VRFY user, but will accept message and attempt delivery\r\n"
		 "501 5.5.4 Syntax: VRFY address\r\n"
		 "214 2.0.0 Commands: EHLO HELO MAIL RCPT DATA BDAT RSET NOOP QUIT VRFY HELP STARTTLS AUTH\r\n"
		 "214 2.0.0 Commands: EHLO HELO MAIL RCPT DATA BDAT RSET NOOP QUIT VRFY HELP STARTTLS AUTH\r\n"},
		{.name = "unknown and empty", IN("FOO\r\n\r\nEXPN x\r\nSTARTTLS\r\nAUTH PLAIN\r\nmail FROM:<a@b.c>\r\n"),
		 .want = GREET UNKNOWN "500 5.5.2 Error: bad syntax\r\n" UNKNOWN
		 "502 5.5.1 Error: command not implemented\r\n"
		 "503 5.5.1 Error: authentication not enabled\r\n" OK_MAIL},
		{.name = "bad addresses", IN("MAIL FROM:<;sleep 66;>\r\nMAIL FROM:a@b.c\r\nMAIL FROM:<a@b.c>\r\n"
				    "RCPT TO:<;sleep 66;>\r\nRCPT TO:<>\r\nRCPT TO x\r\n"),
		 .want = GREET "501 5.1.7 Bad sender address syntax\r\n501 5.1.7 Bad sender address syntax\r\n"
		 OK_MAIL "501 5.1.3 Bad recipient address syntax\r\n"
		 "501 5.1.3 Bad recipient address syntax\r\n501 5.5.4 Syntax: RCPT TO:<address>\r\n"},
		{.name = "null sender", IN("MAIL FROM:<>\r\n"),
		 .want = GREET OK_MAIL},
		{.name = "MAIL parameters", IN("MAIL FROM:<a@b.c> SIZE=2000\r\nMAIL FROM:<a@b.c> FOO=1\r\n"
				      "MAIL FROM:<a@b.c> ENVID=a\rb\r\nMAIL FROM:<a@b.c> SIZE=1 SIZE=1\r\n"
				      "MAIL FROM:<a@b.c> SIZE=10 BODY=8BITMIME RET=HDRS ENVID=x\r\n"
				      "RCPT TO:<x@y.z> NOTIFY=NEVER,DELAY\r\nRCPT TO:<x@y.z> NOTIFY=NEVER\r\n"),
		 .want = GREET "552 5.3.4 Message size exceeds fixed limit\r\n"
		 "555 5.5.4 Unsupported option: FOO\r\n"
		 "501 5.5.4 Syntax error in parameters\r\n"
		 "501 5.5.4 Duplicate SIZE parameter\r\n" OK_MAIL
		 "501 5.5.4 Bad NOTIFY parameter syntax\r\n" OK_RCPT},
		{.name = "NUL in command lines", IN("NOOP a\0b\r\nMAIL FROM:<a@b.c> ENVID=a\0b\r\n"
					   "MAIL FROM:<a\0@b.c>\r\n\0QUIT\r\nRSET\0\r\n"),
		 .want = GREET "500 5.5.2 Error: NUL in command line\r\n"
		 "501 5.5.4 Syntax error in parameters\r\n"
		 "501 5.1.7 Bad sender address syntax\r\n" UNKNOWN UNKNOWN},
		{.name = "bare LF ends a command line", IN("NOOP\nMAIL FROM:<a@b.c>\n"),
		 .want = GREET OK OK_MAIL},
		{.name = "trailing spaces", IN("DATA \r\nNOOP  \r\nMAIL FROM:<a@b.c> \r\n"),
		 .want = GREET NEED_RCPT OK OK_MAIL},
		{.name = "DATA with an argument", IN("MAIL FROM:<a@b.c>\r\nRCPT TO:<x@y.z>\r\nDATA now\r\n"),
		 .want = GREET OK_MAIL OK_RCPT "501 5.5.4 Syntax: DATA\r\n"},
	};

	(void) state;
	assert_int_equal(run_scripts(cases, sizeof(cases) / sizeof(cases[0])), 0);
}

 /*
  * Recipients: limit, duplicates, the rcpt hook.
  */
static void test_recipients(void **state)
{
	static const struct script cases[] = {
		{.name = "too many recipients", IN("MAIL FROM:<a@b.c>\r\nRCPT TO:<r1@x.y>\r\nRCPT TO:<r1@x.y>\r\nRCPT TO:<r2@x.y>\r\n"
		   "RCPT TO:<r3@x.y>\r\nRCPT TO:<r4@x.y>\r\nDATA\r\nhi\r\n.\r\n"),
		 .want = GREET OK_MAIL OK_RCPT OK_RCPT OK_RCPT OK_RCPT "452 4.5.3 Too many recipients\r\n"
		 GO QUEUED,
		 .calls = 1,
		 MSG("hi\r\n"),
		 .rcpts = "r1@x.y,r2@x.y,r3@x.y,"},
		{.name = "rcpt hook refuses", IN("MAIL FROM:<a@b.c>\r\nRCPT TO:<deny@x.y>\r\nDATA\r\nRCPT TO:<ok@x.y>\r\n"),
		 .want = GREET OK_MAIL "554 5.7.1 <deny@x.y>: Relay access denied\r\n" NEED_RCPT OK_RCPT},
	};

	(void) state;
	assert_int_equal(run_scripts(cases, sizeof(cases) / sizeof(cases[0])), 0);
}

 /*
  * DATA through the session: smuggling, size, bare LF, pipelining.
  */
static void test_data(void **state)
{
	static const struct script cases[] = {
		{.name = "smuggled transaction stays in the message", IN(ENVELOPE "a\n.\nMAIL FROM:<e@x.y>\r\nRCPT TO:<v@x.y>\r\nDATA\r\nevil\r\n.\r\nQUIT\r\n"),
		 .want = ENVELOPE_R QUEUED BYE,
		 .closing = 1,
		 .calls = 1,
		 .bare_eol = 1,
		 MSG("a\r\n.\r\nMAIL FROM:<e@x.y>\r\nRCPT TO:<v@x.y>\r\nDATA\r\nevil\r\n"),
		 .rcpts = "x@y.z,"},
		{.name = "smuggling with \\r\\n.\\r", IN(ENVELOPE "a\r\n.\rMAIL FROM:<e@x.y>\r\n.\r\n"),
		 .want = ENVELOPE_R QUEUED,
		 .calls = 1,
		 .bare_eol = 1,
		 MSG("a\r\n\r\nMAIL FROM:<e@x.y>\r\n")},
		{.name = "dot-unstuffing", IN(ENVELOPE "..x\r\n.y\r\n.\r\n"),
		 .want = ENVELOPE_R QUEUED,
		 .calls = 1,
		 MSG(".x\r\ny\r\n")},
		{.name = "bare LF normalized", IN(ENVELOPE "a\nb\r\n.\r\n"),
		 .want = ENVELOPE_R QUEUED,
		 .calls = 1,
		 .bare_eol = 1,
		 MSG("a\r\nb\r\n")},
		{.name = "bare LF rejected", IN(ENVELOPE "a\nb\r\n.\r\nNOOP\r\n"),
		 .want = ENVELOPE_R "550 5.5.2 Message contains bare CR or LF\r\n" OK,
		 .bare_lf_reject = 1},
		{.name = "bare CR rejected", IN(ENVELOPE "a\rb\r\n.\r\n"),
		 .want = ENVELOPE_R "550 5.5.2 Message contains bare CR or LF\r\n",
		 .bare_lf_reject = 1},
		{.name = "clean message with bare_lf reject", IN(ENVELOPE "a\r\n.\r\n"),
		 .want = ENVELOPE_R QUEUED,
		 .bare_lf_reject = 1,
		 .calls = 1,
		 MSG("a\r\n")},
		{.name = "message too big, session goes on", IN(ENVELOPE
		   "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789"
		   "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789"
		   "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789"
		   "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789"
		   "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789"
		   "\r\n"
		   "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789"
		   "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789"
		   "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789"
		   "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789"
		   "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789"
		   "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789"
		   "\r\n.\r\nRCPT TO:<x@y.z>\r\nNOOP\r\n"),
		 .want = ENVELOPE_R "552 5.3.4 Message size exceeds fixed limit\r\n" NEED_MAIL OK},
		{.name = "two messages pipelined", IN(ENVELOPE "one\r\n.\r\nMAIL FROM:<>\r\nRCPT TO:<y@y.z>\r\nRCPT TO:<z@y.z>\r\nDATA\r\n"
		   "two\r\n.\r\nQUIT\r\n"),
		 .want = ENVELOPE_R QUEUED OK_MAIL OK_RCPT OK_RCPT GO QUEUED BYE,
		 .closing = 1,
		 .calls = 2,
		 MSG("two\r\n"),
		 .rcpts = "y@y.z,z@y.z,"},
		{.name = "tx is reset after the message", IN(ENVELOPE "x\r\n.\r\nRCPT TO:<x@y.z>\r\nDATA\r\n"),
		 .want = ENVELOPE_R QUEUED NEED_MAIL NEED_RCPT,
		 .calls = 1},
		{.name = "hook refuses", IN(ENVELOPE "x\r\n.\r\nNOOP\r\n"),
		 .want = ENVELOPE_R "554 5.7.0 idempotency key already used\r\n" OK,
		 .hook_reply = "554 5.7.0 idempotency key already used",
		 .calls = 1},
		{.name = "hook reply malformed", IN(ENVELOPE "x\r\n.\r\n"),
		 .want = ENVELOPE_R "451 4.3.0 Error: internal error\r\n",
		 .hook_reply = "bogus",
		 .calls = 1},
		{.name = "hook reply cut at CRLF", IN(ENVELOPE "x\r\n.\r\n"),
		 .want = ENVELOPE_R "250 2.0.0 Ok\r\n",
		 .hook_reply = "250 2.0.0 Ok\r\n250 injected",
		 .calls = 1},
		{.name = "QUIT inside DATA is data", IN(ENVELOPE "QUIT\r\n.\r\n"),
		 .want = ENVELOPE_R QUEUED,
		 .calls = 1,
		 MSG("QUIT\r\n")},
	};

	(void) state;
	assert_int_equal(run_scripts(cases, sizeof(cases) / sizeof(cases[0])), 0);
}

/* repeat - n copies of c, as a malloc'ed string */
static char *repeat(const char *head, char c, size_t n, const char *tail)
{
	size_t h = strlen(head), t = strlen(tail);
	char *p = malloc(h + n + t + 1);

	memcpy(p, head, h);
	memset(p + h, c, n);
	memcpy(p + h + n, tail, t + 1);
	return p;
}

 /*
  * Command lines over SMTP_LINE_MAX: 500 5.5.2, then business as usual.
  */
static void test_long_lines(void **state)
{
	char *l600 = repeat("NOOP ", 'x', 593, "\r\n");		/* 600 octets */
	char *l512 = repeat("NOOP ", 'x', 505, "\r\n");		/* 512: the limit */
	char *l513 = repeat("NOOP ", 'x', 506, "\r\n");		/* 513 */
	char *lf512 = repeat("NOOP ", 'x', 506, "\n");		/* 512 with bare LF */
	char *mail = repeat("MAIL FROM:<", 'a', 600, "@b.c>\r\n");
	char in[4][2048];
	struct script cases[] = {
		{.name = "600-octet line", .in = in[0],
		 .want = GREET TOOLONG OK},
		{.name = "512 ok, 513 too long", .in = in[1],
		 .want = GREET OK TOOLONG OK},
		{.name = "long line inside a tx", .in = in[2],
		 .want = GREET OK_MAIL TOOLONG OK_RCPT},
		{.name = "long MAIL, then MAIL", .in = in[3],
		 .want = GREET TOOLONG OK_MAIL},
	};

	(void) state;
	snprintf(in[0], sizeof(in[0]), "%sNOOP\r\n", l600);
	snprintf(in[1], sizeof(in[1]), "%s%s%s", l512, l513, lf512);
	snprintf(in[2], sizeof(in[2]), "MAIL FROM:<a@b.c>\r\n%sRCPT TO:<x@y.z>\r\n", l600);
	snprintf(in[3], sizeof(in[3]), "%sMAIL FROM:<a@b.c>\r\n", mail);
	cases[0].len = strlen(in[0]);
	cases[1].len = strlen(in[1]);
	cases[2].len = strlen(in[2]);
	cases[3].len = strlen(in[3]);
	assert_int_equal(run_scripts(cases, sizeof(cases) / sizeof(cases[0])), 0);
	free(l600);
	free(l512);
	free(l513);
	free(lf512);
	free(mail);
}

/*
 * feed_junk - a MiB of 'x' in chunks of 4096, each consumed whole, in
 * the message (in_data) or not; memory stays bounded by the line limit
 * and message_size (1000 here) throughout.
 */
static void feed_junk(struct smtp_session *s, int in_data)
{
	char chunk[4096];
	size_t i;

	memset(chunk, 'x', sizeof(chunk));
	for (i = 0; i < 256; i++) {
		assert_int_equal(smtp_session_in_data(s), in_data);
		assert_int_equal(smtp_session_feed(s, chunk, sizeof(chunk)), sizeof(chunk));
		assert_true(s->line.cap <= 2 * SMTP_LINE_MAX);
		assert_true(s->tx == NULL || s->tx->data.cap <= 2 * 1000);
	}
}

 /*
  * A client that never sends LF costs at most one line of memory.
  */
static void test_line_memory(void **state)
{
	struct fake f;
	struct smtp_session *s;

	(void) state;
	memset(&f, 0, sizeof(f));
	s = new_session(&f, 0);
	feed_junk(s, 0);
	assert_int_equal(smtp_session_feed(s, "\r\nNOOP\r\n", 8), 8);
	assert_string_equal(smtp_session_out(s)->data, GREET TOOLONG OK);
	smtp_session_free(s);
	fake_free(&f);
}

 /*
  * BDAT (RFC 3030): chunks are raw octets counted by the command, never
  * commands and never dot-stuffed; refused chunks are still consumed.
  */
#define ENV_B	"EHLO c\r\nMAIL FROM:<a@b.c>\r\nRCPT TO:<x@y.z>\r\n"
#define ENV_B_R	GREET EHLO_R OK_MAIL OK_RCPT
#define GOT(n)	"250 2.0.0 Ok: " #n " octets received\r\n"
#define TOOBIG	"552 5.3.4 Message size exceeds fixed limit\r\n"
#define BARE	"550 5.5.2 Message contains bare CR or LF\r\n"
#define BDAT_SYNTAX "501 5.5.4 Syntax: BDAT chunk-size [LAST]\r\n"

static void test_bdat(void **state)
{
	static const struct script cases[] = {
		{.name = "single chunk LAST", IN(ENV_B "BDAT 18 LAST\r\nSubject: t\r\n\r\nhi\r\nQUIT\r\n"),
		 .want = ENV_B_R QUEUED BYE,
		 .closing = 1,
		 .calls = 1,
		 MSG("Subject: t\r\n\r\nhi\r\n"),
		 .rcpts = "x@y.z,"},
		{.name = "three chunks", IN(ENV_B "BDAT 3\r\nabcBDAT 5\r\ndef\r\nBDAT 5 LAST\r\nghi\r\n"),
		 .want = ENV_B_R GOT(3) GOT(5) QUEUED,
		 .calls = 1,
		 MSG("abcdef\r\nghi\r\n")},
		{.name = "commands between chunks", IN(ENV_B "BDAT 2\r\nabNOOP\r\nVRFY x\r\nbdat  2  last\r\ncd"),
		 .want = ENV_B_R GOT(2) OK
		 "252 2.5.0 Cannot VRFY user, but will accept message and attempt delivery\r\n" QUEUED,
		 .calls = 1,
		 MSG("abcd\r\n")},
		{.name = "dot lines are data, not unstuffed", IN(ENV_B "BDAT 11 LAST\r\na\r\n.\r\n..b\r\nNOOP\r\n"),
		 .want = ENV_B_R QUEUED OK,
		 .calls = 1,
		 MSG("a\r\n.\r\n..b\r\n")},
		{.name = "smuggled MAIL in a chunk is data", IN(ENV_B "BDAT 22\r\n\r\n.\r\nMAIL FROM:<x@y>\r\n"
		   "BDAT 17 LAST\r\nRCPT TO:<v@x.y>\r\nQUIT\r\n"),
		 .want = ENV_B_R GOT(22) QUEUED BYE,
		 .closing = 1,
		 .calls = 1,
		 MSG("\r\n.\r\nMAIL FROM:<x@y>\r\nRCPT TO:<v@x.y>\r\n"),
		 .rcpts = "x@y.z,"},
		{.name = "QUIT in a chunk is data", IN(ENV_B "BDAT 6 LAST\r\nQUIT\r\n"),
		 .want = ENV_B_R QUEUED,
		 .calls = 1,
		 MSG("QUIT\r\n")},
		{.name = "BDAT 0 LAST: empty message", IN(ENV_B "BDAT 0 LAST\r\nNOOP\r\n"),
		 .want = ENV_B_R QUEUED OK,
		 .calls = 1,
		 MSG("")},
		{.name = "BDAT 0 LAST after chunks", IN(ENV_B "BDAT 4\r\nab\r\nBDAT 0 LAST\r\n"),
		 .want = ENV_B_R GOT(4) QUEUED,
		 .calls = 1,
		 MSG("ab\r\n")},
		{.name = "CRLF split across chunks is not bare", IN(ENV_B "BDAT 2\r\na\rBDAT 4 LAST\r\n\nb\r\n"),
		 .want = ENV_B_R GOT(2) QUEUED,
		 .bare_lf_reject = 1,
		 .calls = 1,
		 MSG("a\r\nb\r\n")},
		{.name = "bare LF normalized", IN(ENV_B "BDAT 2\r\na\nBDAT 3 LAST\r\nb\nc"),
		 .want = ENV_B_R GOT(2) QUEUED,
		 .calls = 1,
		 .bare_eol = 1,
		 MSG("a\r\nb\r\nc\r\n")},
		{.name = "bare LF rejected at LAST", IN(ENV_B "BDAT 2\r\na\nBDAT 2 LAST\r\nb\nRCPT TO:<x@y.z>\r\nNOOP\r\n"),
		 .want = ENV_B_R GOT(2) BARE NEED_MAIL OK,
		 .bare_lf_reject = 1},
		{.name = "CR ending the message is bare", IN(ENV_B "BDAT 2 LAST\r\na\r"),
		 .want = ENV_B_R BARE,
		 .bare_lf_reject = 1},
		{.name = "CR ending the message normalized", IN(ENV_B "BDAT 2 LAST\r\na\r"),
		 .want = ENV_B_R QUEUED,
		 .calls = 1,
		 .bare_eol = 1,
		 MSG("a\r\n")},
		{.name = "missing final CRLF appended", IN(ENV_B "BDAT 5 LAST\r\nhello"),
		 .want = ENV_B_R QUEUED,
		 .bare_lf_reject = 1,
		 .calls = 1,
		 MSG("hello\r\n")},
		{.name = "no extra CRLF after a final bare LF", IN(ENV_B "BDAT 2 LAST\r\na\n"),
		 .want = ENV_B_R QUEUED,
		 .calls = 1,
		 .bare_eol = 1,
		 MSG("a\r\n")},
		{.name = "BDAT before MAIL: chunk skipped", IN("BDAT 6 LAST\r\nQUIT\r\nNOOP\r\n"),
		 .want = GREET NEED_RCPT OK},
		{.name = "BDAT before RCPT: chunk skipped", IN("MAIL FROM:<a@b.c>\r\nBDAT 6\r\nRSET\r\n"
		   "BDAT 3 LAST\r\nxyzRCPT TO:<x@y.z>\r\nBDAT 3 LAST\r\nabc"),
		 .want = GREET OK_MAIL NEED_RCPT NEED_RCPT OK_RCPT QUEUED,
		 .calls = 1,
		 MSG("abc\r\n")},
		{.name = "refused BDAT 0 LAST", IN("BDAT 0 LAST\r\nNOOP\r\n"),
		 .want = GREET NEED_RCPT OK},
		{.name = "bad syntax: the rest is commands", IN("BDAT\r\nBDAT x\r\nBDAT -1\r\nBDAT 5 LAST x\r\n"
		   "BDAT 5 NOTLAST\r\nBDAT 5LAST\r\nBDAT 123456789012345678901\r\n"
		   "BDAT 18446744073709551616\r\nBDAT 0\r\nBDAT 4\0\r\nNOOP\r\n"),
		 .want = GREET BDAT_SYNTAX BDAT_SYNTAX BDAT_SYNTAX BDAT_SYNTAX BDAT_SYNTAX BDAT_SYNTAX
		 BDAT_SYNTAX BDAT_SYNTAX "501 5.5.4 Error: empty BDAT chunk without LAST\r\n"
		 "500 5.5.2 Error: NUL in command line\r\n" OK},
		{.name = "bad syntax inside a tx", IN(ENV_B "BDAT 3 x\r\nBDAT 3 LAST\r\nabc"),
		 .want = ENV_B_R BDAT_SYNTAX QUEUED,
		 .calls = 1,
		 MSG("abc\r\n")},
		{.name = "20 digits", IN(ENV_B "BDAT 00000000000000000003 LAST\r\nabc"),
		 .want = ENV_B_R QUEUED,
		 .calls = 1,
		 MSG("abc\r\n")},
		{.name = "DATA and RCPT after BDAT", IN(ENV_B "BDAT 3\r\nabcDATA\r\nRCPT TO:<q@y.z>\r\n"
		   "MAIL FROM:<a@b.c>\r\nBDAT 3 LAST\r\ndef"),
		 .want = ENV_B_R GOT(3) "503 5.5.1 Error: DATA after BDAT\r\n"
		 "503 5.5.1 Error: RCPT after BDAT\r\n" "503 5.5.1 Error: nested MAIL command\r\n" QUEUED,
		 .calls = 1,
		 MSG("abcdef\r\n"),
		 .rcpts = "x@y.z,"},
		{.name = "RSET between chunks", IN(ENV_B "BDAT 3\r\nabcRSET\r\nBDAT 3 LAST\r\nxyz"
		   "MAIL FROM:<a@b.c>\r\nRCPT TO:<x@y.z>\r\nBDAT 3 LAST\r\ndef"),
		 .want = ENV_B_R GOT(3) OK NEED_RCPT OK_MAIL OK_RCPT QUEUED,
		 .calls = 1,
		 MSG("def\r\n")},
		{.name = "RSET forgets a pending CR", IN(ENV_B "BDAT 2\r\na\rRSET\r\n"
		   "MAIL FROM:<a@b.c>\r\nRCPT TO:<x@y.z>\r\nBDAT 2 LAST\r\n\nb"),
		 .want = ENV_B_R GOT(2) OK OK_MAIL OK_RCPT BARE,
		 .bare_lf_reject = 1},
		{.name = "EHLO between chunks ends the tx", IN(ENV_B "BDAT 3\r\nabcEHLO d\r\nBDAT 3 LAST\r\nxyzNOOP\r\n"),
		 .want = ENV_B_R GOT(3) EHLO_R NEED_RCPT OK},
		{.name = "two BDAT messages pipelined", IN(ENV_B "BDAT 5 LAST\r\none\r\n"
		   "MAIL FROM:<>\r\nRCPT TO:<y@y.z>\r\nBDAT 5 LAST\r\ntwo\r\nQUIT\r\n"),
		 .want = ENV_B_R QUEUED OK_MAIL OK_RCPT QUEUED BYE,
		 .closing = 1,
		 .calls = 2,
		 MSG("two\r\n"),
		 .rcpts = "y@y.z,"},
		{.name = "DATA in the tx after a BDAT message", IN(ENV_B "BDAT 2 LAST\r\nab"
		   "MAIL FROM:<>\r\nRCPT TO:<y@y.z>\r\nDATA\r\n..cd\r\n.\r\n"),
		 .want = ENV_B_R QUEUED OK_MAIL OK_RCPT GO QUEUED,
		 .calls = 2,
		 MSG(".cd\r\n")},
		{.name = "hook refuses after LAST", IN(ENV_B "BDAT 1 LAST\r\nxRCPT TO:<x@y.z>\r\n"),
		 .want = ENV_B_R "554 5.7.0 idempotency key already used\r\n" NEED_MAIL,
		 .hook_reply = "554 5.7.0 idempotency key already used",
		 .calls = 1},
	};

	(void) state;
	assert_int_equal(run_scripts_cut(cases, sizeof(cases) / sizeof(cases[0])), 0);
}

 /*
  * BDAT past message_size (1000 here): the chunk that crosses the limit
  * gets 552, later chunks of the tx are discarded with 552 too, LAST
  * ends the tx.
  */
static void test_bdat_size(void **state)
{
	char *k1 = repeat("", 'k', 1000, "");
	char *k6 = repeat("", 'k', 600, "");
	char *k998 = repeat("", 'k', 998, "\r\n");
	char *k999 = repeat("", 'k', 999, "");
	char in[6][3000];
	struct script cases[] = {
		{.name = "exactly the limit", .in = in[0],
		 .want = ENV_B_R QUEUED,
		 .calls = 1},
		{.name = "final CRLF crosses the limit", .in = in[1],
		 .want = ENV_B_R TOOBIG NEED_MAIL},
		{.name = "second chunk crosses: the rest refused alike", .in = in[2],
		 .want = ENV_B_R GOT(600) TOOBIG TOOBIG TOOBIG NEED_MAIL OK},
		{.name = "oversize LAST chunk, session goes on", .in = in[3],
		 .want = ENV_B_R TOOBIG NEED_MAIL OK_MAIL},
		{.name = "oversize, DATA refused, RSET clears", .in = in[4],
		 .want = ENV_B_R TOOBIG "503 5.5.1 Error: DATA after BDAT\r\n" OK OK_MAIL OK_RCPT QUEUED,
		 .calls = 1,
		 MSG("ok\r\n")},
		{.name = "failed BDAT 0 LAST ends the tx", .in = in[5],
		 .want = ENV_B_R TOOBIG TOOBIG NEED_MAIL},
	};
	size_t i;

	(void) state;
	snprintf(in[0], sizeof(in[0]), ENV_B "BDAT 1000 LAST\r\n%s", k998);
	snprintf(in[1], sizeof(in[1]), ENV_B "BDAT 999 LAST\r\n%sRCPT TO:<x@y.z>\r\n", k999);
	snprintf(in[2], sizeof(in[2]), ENV_B "BDAT 600\r\n%sBDAT 600\r\n%sBDAT 3\r\nabc"
		 "BDAT 2 LAST\r\nxyRCPT TO:<x@y.z>\r\nNOOP\r\n", k6, k6);
	snprintf(in[3], sizeof(in[3]), ENV_B "BDAT 1001 LAST\r\n%sxRCPT TO:<x@y.z>\r\n"
		 "MAIL FROM:<a@b.c>\r\n", k1);
	snprintf(in[4], sizeof(in[4]), ENV_B "BDAT 1001\r\n%sxDATA\r\nRSET\r\n"
		 "MAIL FROM:<a@b.c>\r\nRCPT TO:<x@y.z>\r\nBDAT 4 LAST\r\nok\r\n", k1);
	snprintf(in[5], sizeof(in[5]), ENV_B "BDAT 1001\r\n%sxBDAT 0 LAST\r\n"
		 "RCPT TO:<x@y.z>\r\n", k1);
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		cases[i].len = strlen(in[i]);
	assert_int_equal(run_scripts(cases, sizeof(cases) / sizeof(cases[0])), 0);
	free(k1);
	free(k6);
	free(k998);
	free(k999);
}

 /*
  * A huge chunk is streamed: memory stays bounded by message_size, and
  * a refused chunk of any announced size is consumed, never run.
  */
static void test_bdat_memory(void **state)
{
	struct fake f;
	struct smtp_session *s;
	size_t i;

	(void) state;
	memset(&f, 0, sizeof(f));
	s = new_session(&f, 0);
	smtp_session_feed(s, S(ENV_B "BDAT 1048576 LAST\r\n"));
	feed_junk(s, 1);
	assert_false(smtp_session_in_data(s));
	assert_int_equal(smtp_session_feed(s, S("NOOP\r\n")), 6);
	assert_string_equal(smtp_session_out(s)->data, ENV_B_R TOOBIG OK);
	smtp_session_free(s);

	/* the largest size there is, refused: everything after is chunk */
	s = new_session(&f, 0);
	smtp_session_feed(s, S("BDAT 18446744073709551615\r\n"));
	for (i = 0; i < 16; i++)
		assert_int_equal(smtp_session_feed(s, S("QUIT\r\n")), 6);
	assert_true(smtp_session_in_data(s));
	assert_false(smtp_session_closing(s));
	assert_string_equal(smtp_session_out(s)->data, GREET NEED_RCPT);
	smtp_session_free(s);
	assert_int_equal(f.calls, 0);
	fake_free(&f);
}

/*
 * check_stalled - a client stalled inside a message times out: 421 after
 * the output so far (before), the message is dropped, and the rest of
 * it is not consumed.
 */
static void check_stalled(struct smtp_session *s, const char *before, const char *rest)
{
	char want[1024];

	snprintf(want, sizeof(want), "%s" TIMEOUT, before);
	assert_true(smtp_session_in_data(s));
	smtp_session_timeout(s);
	assert_true(smtp_session_closing(s));
	assert_false(smtp_session_in_data(s));
	assert_string_equal(smtp_session_out(s)->data, want);
	assert_int_equal(smtp_session_feed(s, rest, strlen(rest)), 0);
}

 /*
  * After BDAT LAST the engine waits for the hook like after DATA, also
  * for BDAT 0 LAST, whose chunk has no octets to wait for.
  */
static void test_bdat_wait(void **state)
{
	static const char in1[] = ENV_B "BDAT 3\r\nabcBDAT 2 LAST\r\ndeNOOP\r\n";
	static const char in2[] = ENV_B "BDAT 3\r\nabcBDAT 0 LAST\r\nNOOP\r\n";
	const char *const ins[] = {in1, in2};
	size_t k, len, got;
	struct fake f;
	struct smtp_session *s;

	(void) state;
	memset(&f, 0, sizeof(f));
	f.async = 1;
	for (k = 0; k < 2; k++) {
		s = new_session(&f, 0);
		len = strlen(ins[k]);
		got = smtp_session_feed(s, ins[k], len);
		assert_int_equal(got, len - 6);
		assert_true(smtp_session_waiting(s));
		assert_false(smtp_session_in_data(s));
		assert_int_equal(smtp_session_feed(s, ins[k] + got, len - got), 0);
		smtp_session_reply(s, "250 2.0.0 Ok: queued as LATER");
		assert_int_equal(smtp_session_feed(s, ins[k] + got, len - got), 6);
		assert_string_equal(smtp_session_out(s)->data,
				    ENV_B_R GOT(3) "250 2.0.0 Ok: queued as LATER\r\n" OK);
		smtp_session_free(s);
	}
	assert_int_equal(f.calls, 2);
	assert_memory_equal(f.data.data, "abc\r\n", 6);

	/* a client stalled inside a chunk times out; nothing is handed on */
	s = new_session(&f, 0);
	smtp_session_feed(s, S(ENV_B "BDAT 10 LAST\r\nabc"));
	check_stalled(s, ENV_B_R, "defghij");
	smtp_session_free(s);
	assert_int_equal(f.calls, 2);
	fake_free(&f);
}

 /*
  * The message hook answers later: feed stops after the message and
  * consumes nothing until smtp_session_reply().
  */
static void test_wait_resume(void **state)
{
	static const char in[] = ENVELOPE "hello\r\n.\r\nNOOP\r\nQUIT\r\n";
	size_t len = sizeof(in) - 1, got;
	struct fake f;
	struct smtp_session *s;
	struct buf *out;

	(void) state;
	memset(&f, 0, sizeof(f));
	f.async = 1;
	s = new_session(&f, 0);
	out = smtp_session_out(s);

	got = smtp_session_feed(s, in, len);
	assert_int_equal(got, len - strlen("NOOP\r\nQUIT\r\n"));
	assert_true(smtp_session_waiting(s));
	assert_false(smtp_session_in_data(s));
	assert_int_equal(f.calls, 1);
	assert_string_equal(out->data, ENVELOPE_R);
	assert_int_equal(smtp_session_feed(s, in + got, len - got), 0);

	smtp_session_reply(s, "250 2.0.0 Ok: queued as LATER");
	assert_false(smtp_session_waiting(s));
	assert_int_equal(smtp_session_feed(s, in + got, len - got), len - got);
	assert_string_equal(out->data, ENVELOPE_R "250 2.0.0 Ok: queued as LATER\r\n" OK BYE);
	assert_true(smtp_session_closing(s));
	assert_memory_equal(f.data.data, "hello\r\n", 7);

	/* a reply nobody asked for changes nothing */
	smtp_session_reply(s, "250 2.0.0 Ok");
	assert_string_equal(out->data, ENVELOPE_R "250 2.0.0 Ok: queued as LATER\r\n" OK BYE);
	smtp_session_free(s);
	fake_free(&f);
}

 /*
  * The caller consumes output as it writes it.
  */
static void test_out_consume(void **state)
{
	struct fake f;
	struct smtp_session *s;
	struct buf *out;

	(void) state;
	memset(&f, 0, sizeof(f));
	s = new_session(&f, 0);
	out = smtp_session_out(s);
	buf_consume(out, out->len);
	smtp_session_feed(s, "NOOP\r\n", 6);
	assert_string_equal(out->data, OK);
	buf_consume(out, 4);
	smtp_session_feed(s, "RSET\r\n", 6);
	assert_string_equal(out->data, "2.0.0 Ok\r\n" OK);
	assert_string_equal(smtp_session_helo(s), "");
	smtp_session_feed(s, "EHLO client.example\r\n", 21);
	assert_string_equal(smtp_session_helo(s), "client.example");
	smtp_session_free(s);
	fake_free(&f);
}

 /*
  * Timeouts and shutdown: 421, closing, nothing more consumed.
  */
static void test_timeout(void **state)
{
	struct fake f;
	struct smtp_session *s;

	(void) state;
	memset(&f, 0, sizeof(f));

	/* idle in the command phase */
	s = new_session(&f, 0);
	smtp_session_timeout(s);
	assert_true(smtp_session_closing(s));
	assert_string_equal(smtp_session_out(s)->data, GREET TIMEOUT);
	assert_int_equal(smtp_session_feed(s, "NOOP\r\n", 6), 0);
	smtp_session_timeout(s);		/* only once */
	smtp_session_shutdown(s);
	assert_string_equal(smtp_session_out(s)->data, GREET TIMEOUT);
	smtp_session_free(s);

	/* stalled in DATA: the message is dropped, never handed on */
	s = new_session(&f, 0);
	smtp_session_feed(s, S(ENVELOPE "partial"));
	check_stalled(s, ENVELOPE_R, "\r\n.\r\n");
	assert_int_equal(f.calls, 0);
	smtp_session_free(s);

	/* shutdown */
	s = new_session(&f, 0);
	smtp_session_feed(s, "MAIL FROM:<a@b.c>\r\n", 19);
	smtp_session_shutdown(s);
	assert_true(smtp_session_closing(s));
	assert_string_equal(smtp_session_out(s)->data, GREET OK_MAIL SHUTDOWN);
	smtp_session_free(s);
	fake_free(&f);
}

 /*
  * Shutdown while the hook holds the message: its reply goes first.
  */
static void test_shutdown_while_waiting(void **state)
{
	struct fake f;
	struct smtp_session *s;
	static const char in[] = ENVELOPE "x\r\n.\r\nNOOP\r\n";

	(void) state;
	memset(&f, 0, sizeof(f));
	f.async = 1;
	s = new_session(&f, 0);
	assert_int_equal(smtp_session_feed(s, in, sizeof(in) - 1), sizeof(in) - 1 - 6);
	assert_true(smtp_session_waiting(s));
	smtp_session_shutdown(s);
	assert_true(smtp_session_waiting(s));
	assert_false(smtp_session_closing(s));
	assert_string_equal(smtp_session_out(s)->data, ENVELOPE_R);
	smtp_session_reply(s, "250 2.0.0 Ok: queued as Q1");
	assert_true(smtp_session_closing(s));
	assert_string_equal(smtp_session_out(s)->data, ENVELOPE_R
			    "250 2.0.0 Ok: queued as Q1\r\n" SHUTDOWN);
	assert_int_equal(smtp_session_feed(s, "NOOP\r\n", 6), 0);
	smtp_session_free(s);

	/* freeing a session whose hook never answered is clean too */
	s = new_session(&f, 0);
	smtp_session_feed(s, in, sizeof(in) - 1);
	assert_true(smtp_session_waiting(s));
	smtp_session_free(s);
	smtp_session_free(NULL);
	fake_free(&f);
}

 /*
  * SMTPUTF8 (RFC 6531): offered in EHLO where configured; a declaring
  * MAIL opens UTF-8 addresses for the transaction, and only for it.
  */
#define EHLO_U8	EHLO_HEAD "250-8BITMIME\r\n250-ENHANCEDSTATUSCODES\r\n250-DSN\r\n" \
		"250-CHUNKING\r\n250 SMTPUTF8\r\n"
#define U8FROM	"\xe7\x94\xa8\xe6\x88\xb7@\xe4\xbe\x8b\xe5\xad\x90.\xe6\xb5\x8b\xe8\xaf\x95"
#define U8TO	"\xc3\xa9l\xc3\xa8ve@\xc3\xa9" "cole.example"
#define U8SUBJ	"Subject: \xe4\xbd\xa0\xe5\xa5\xbd\r\n\r\nbody\r\n"
#define NEED_U8F "553 5.6.7 Must declare SMTPUTF8 to send UTF-8 sender address\r\n"
#define NEED_U8T "553 5.6.7 Must declare SMTPUTF8 to send UTF-8 recipient address\r\n"
#define OFF_U8F	"553 5.6.7 UTF-8 sender address refused: SMTPUTF8 is not offered\r\n"

static void test_smtputf8(void **state)
{
	static const struct script cases[] = {
		{.name = "EHLO offers SMTPUTF8", .smtputf8 = 1, IN("EHLO c\r\n"),
		 .want = GREET EHLO_U8},
		{.name = "EHLO without it", .smtputf8 = 0, IN("EHLO c\r\n"),
		 .want = GREET EHLO_R},
		{.name = "UTF-8 envelope", .smtputf8 = 1,
		 IN("EHLO c\r\nMAIL FROM:<" U8FROM "> SMTPUTF8\r\nRCPT TO:<" U8TO ">\r\n"
		    "DATA\r\n" U8SUBJ ".\r\n"),
		 .want = GREET EHLO_U8 OK_MAIL OK_RCPT GO QUEUED, .calls = 1, .tx_utf8 = 1,
		 MSG(U8SUBJ), .rcpts = U8TO ","},
		{.name = "ASCII envelope declaring it", .smtputf8 = 1,
		 IN("EHLO c\r\nMAIL FROM:<a@b.c> SMTPUTF8\r\nRCPT TO:<x@y.z>\r\nDATA\r\n"
		    U8SUBJ ".\r\n"),
		 .want = GREET EHLO_U8 OK_MAIL OK_RCPT GO QUEUED, .calls = 1, .tx_utf8 = 1},
		{.name = "UTF-8 headers without it", .smtputf8 = 1,
		 IN(ENVELOPE U8SUBJ ".\r\n"),
		 .want = GREET EHLO_U8 OK_MAIL OK_RCPT GO QUEUED, .calls = 1, .tx_utf8 = 0,
		 MSG(U8SUBJ)},
		{.name = "UTF-8 sender undeclared", .smtputf8 = 1,
		 IN("EHLO c\r\nMAIL FROM:<" U8FROM ">\r\nRCPT TO:<x@y.z>\r\n"),
		 .want = GREET EHLO_U8 NEED_U8F NEED_MAIL},
		{.name = "UTF-8 sender, not offered", .smtputf8 = 0,
		 IN("EHLO c\r\nMAIL FROM:<" U8FROM ">\r\nMAIL FROM:<a@b.c> SMTPUTF8\r\n"),
		 .want = GREET EHLO_R OFF_U8F "555 5.5.4 Unsupported option: SMTPUTF8\r\n"},
		{.name = "UTF-8 recipient undeclared", .smtputf8 = 1,
		 IN("EHLO c\r\nMAIL FROM:<a@b.c>\r\nRCPT TO:<" U8TO ">\r\nRCPT TO:<x@y.z>\r\n"
		    "DATA\r\nx\r\n.\r\n"),
		 .want = GREET EHLO_U8 OK_MAIL NEED_U8T OK_RCPT GO QUEUED, .calls = 1,
		 .rcpts = "x@y.z,"},
		{.name = "declaration ends with the tx", .smtputf8 = 1,
		 IN("EHLO c\r\nMAIL FROM:<a@b.c> SMTPUTF8\r\nRSET\r\nMAIL FROM:<a@b.c>\r\n"
		    "RCPT TO:<" U8TO ">\r\n"),
		 .want = GREET EHLO_U8 OK_MAIL OK OK_MAIL NEED_U8T},
		{.name = "overlong CRLF in an address", .smtputf8 = 1,
		 IN("EHLO c\r\nMAIL FROM:<a@b.c> SMTPUTF8\r\nRCPT TO:<x\xc0\x8d\xc0\x8ay@z>\r\n"),
		 .want = GREET EHLO_U8 OK_MAIL "501 5.1.3 Bad recipient address syntax\r\n"},
		{.name = "C1 NEL in an address", .smtputf8 = 1,
		 IN("EHLO c\r\nMAIL FROM:<a\xc2\x85@b.c> SMTPUTF8\r\n"),
		 .want = GREET EHLO_U8 "501 5.1.7 Bad sender address syntax\r\n"},
		{.name = "UTF-8 smuggling end of data stays CRLF.CRLF", .smtputf8 = 1,
		 IN("EHLO c\r\nMAIL FROM:<" U8FROM "> SMTPUTF8\r\nRCPT TO:<x@y.z>\r\nDATA\r\n"
		    "a\xc0\x8d\xc0\x8a.\xc0\x8d\xc0\x8aMAIL FROM:<e@f>\r\n.\r\n"),
		 .want = GREET EHLO_U8 OK_MAIL OK_RCPT GO QUEUED, .calls = 1, .tx_utf8 = 1,
		 MSG("a\xc0\x8d\xc0\x8a.\xc0\x8d\xc0\x8aMAIL FROM:<e@f>\r\n")},
	};

	(void) state;
	assert_int_equal(run_scripts(cases, sizeof(cases) / sizeof(cases[0])), 0);
}

 /*
  * No hooks at all: recipients are accepted, messages are not.
  */
static void test_no_hooks(void **state)
{
	struct smtp_config cfg = {.hostname = NULL};
	struct smtp_session *s;

	(void) state;
	s = smtp_session_new(&cfg, NULL, NULL);
	smtp_session_greet(s);
	smtp_session_feed(s, S("EHLO c\r\nMAIL FROM:<a@b.c>\r\nRCPT TO:<x@y.z>\r\nDATA\r\nx\r\n.\r\n"));
	assert_string_equal(smtp_session_out(s)->data,
			    "220 localhost ESMTP idemrelay\r\n"
			    "250-localhost\r\n250-PIPELINING\r\n250-SIZE\r\n250-8BITMIME\r\n"
			    "250-ENHANCEDSTATUSCODES\r\n250-DSN\r\n250 CHUNKING\r\n"
			    OK_MAIL OK_RCPT GO "451 4.3.0 Error: no message handler\r\n");
	smtp_session_free(s);
}

 /*
  * A limit of 0 is none (the configuration never gives one): 30 errors
  * and 30 NOOPs close nothing, and a recipient past any count is taken.
  */
static void test_zero_limits(void **state)
{
	struct smtp_config cfg = {.hostname = "mx.test"};
	struct smtp_session *s;
	int i;

	(void) state;
	s = smtp_session_new(&cfg, NULL, NULL);
	for (i = 0; i < 30; i++)
		smtp_session_feed(s, S("FOO\r\nNOOP\r\n"));
	assert_false(smtp_session_closing(s));
	buf_reset(smtp_session_out(s));
	smtp_session_feed(s, S("MAIL FROM:<a@b.c>\r\n"));
	for (i = 0; i < 1001; i++) {
		char line[64];

		snprintf(line, sizeof(line), "RCPT TO:<r%d@y.z>\r\n", i);
		buf_reset(smtp_session_out(s));
		smtp_session_feed(s, line, strlen(line));
		if (strcmp(smtp_session_out(s)->data, OK_RCPT) != 0)
			fail_msg("recipient %d: got %s, want %s", i, smtp_session_out(s)->data, OK_RCPT);
	}
	smtp_session_free(s);
}

 /*
  * Robustness: pseudo-random input made of SMTP fragments and junk, in
  * pseudo-random chunks. Nothing may crash or leak (run under valgrind);
  * memory stays bounded.
  */
static void test_random_input(void **state)
{
	static const char *const frags[] = {
		"EHLO x\r\n", "HELO x\r\n", "MAIL FROM:<a@b.c>\r\n", "MAIL FROM:<>\r\n",
		"RCPT TO:<x@y.z>\r\n", "RCPT TO:<deny@y.z>\r\n", "DATA\r\n", "RSET\r\n",
		"NOOP\r\n", "VRFY x\r\n", "HELP\r\n", "QUIT\r\n", ".\r\n", "\r\n.\r\n",
		"\n.\n", "\r.\r", ".", "\r", "\n", "\0", "\r\n", "..", "SIZE=9999 ",
		"ENVID=+41 ", "NOTIFY=NEVER ", "ORCPT=rfc822;a ", "<", ">", "@", "\"",
		"MAIL FROM:<a@b.c> SIZE=1 BODY=8BITMIME\r\n", "RCPT TO:<a@b.c> NOTIFY=",
		"BDAT 1\r\n", "BDAT 7\r\n", "BDAT 40\r\n", "BDAT 3 LAST\r\n", "BDAT 0 LAST\r\n",
		"BDAT 2000 LAST\r\n", "BDAT x\r\n",
		"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
	};
	struct buf in = BUF_INIT;
	uint64_t seed = 42;
	struct fake f;
	struct smtp_session *s;
	size_t round;

	(void) state;
	memset(&f, 0, sizeof(f));
	for (round = 0; round < 200; round++) {
		random_input(&in, frags, sizeof(frags) / sizeof(frags[0]), 400, 8, &seed);
		s = new_session(&f, (int) (round & 1));
		feed_random(s, &in, 64, &seed, NULL);
		assert_true(s->line.cap <= 2 * SMTP_LINE_MAX);
		if (s->tx)
			assert_true(s->tx->n_rcpts <= 3);
		smtp_session_free(s);
	}
	buf_free(&in);
	fake_free(&f);
}

 /*
  * The error limits (Postfix's hard error and junk command limits), with
  * hard_errors 3 and junk_commands 2: the reply that makes the third error
  * is followed by the 421, and nothing more is read.
  */
#define TOO_MANY "421 4.7.0 mx.test Error: too many errors\r\n"
#define NOOP_R	"250 2.0.0 Ok\r\n"
#define LONG_LINE "x" X64 X64 X64 X64 X64 X64 X64 X64 X64 "\r\n"
#define X64	"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
#define K1024	X64 X64 X64 X64 X64 X64 X64 X64 X64 X64 X64 X64 X64 X64 X64 X64	/* > message_size */
#define CHUNKS5	"BDAT 2\r\nabBDAT 2\r\nabBDAT 2\r\nabBDAT 2\r\nabBDAT 2\r\nab"	/* > hard_errors */

struct limit_row {
	const char *name, *in, *hook_reply, *want;
	int closing;
	size_t rest;			/* octets left unread after the 421 */
};

static void test_error_limits(void **state)
{
	static const struct limit_row rows[] = {
		{"two errors", "X\r\nX\r\n", NULL, GREET UNKNOWN UNKNOWN, 0, 0},
		{"three errors", "X\r\nX\r\nX\r\nNOOP\r\n", NULL,
		 GREET UNKNOWN UNKNOWN UNKNOWN TOO_MANY, 1, 6},
		{"junk within the limit", "NOOP\r\nRSET\r\nX\r\nX\r\n", NULL,
		 GREET NOOP_R "250 2.0.0 Ok\r\n" UNKNOWN UNKNOWN, 0, 0},
		{"junk past the limit", "NOOP\r\nNOOP\r\nVRFY x\r\nHELP\r\nNOOP\r\nNOOP\r\n", NULL,
		 GREET NOOP_R NOOP_R
		 "252 2.5.0 Cannot VRFY user, but will accept message and attempt delivery\r\n"
		 "214 2.0.0 Commands: EHLO HELO MAIL RCPT DATA BDAT RSET NOOP QUIT VRFY HELP "
		 "STARTTLS AUTH\r\n" NOOP_R TOO_MANY, 1, 6},
		{"a message taken clears both", "X\r\nX\r\nNOOP\r\nNOOP\r\n" ENVELOPE "m\r\n.\r\n"
		 "X\r\nX\r\nNOOP\r\nNOOP\r\n", NULL,
		 GREET UNKNOWN UNKNOWN NOOP_R NOOP_R EHLO_R OK_MAIL OK_RCPT GO QUEUED UNKNOWN UNKNOWN NOOP_R
		 NOOP_R, 0, 0},
		{"a message refused counts", "X\r\nX\r\n" ENVELOPE "m\r\n.\r\nNOOP\r\n",
		 "451 4.3.0 Error: try again",
		 GREET UNKNOWN UNKNOWN EHLO_R OK_MAIL OK_RCPT GO "451 4.3.0 Error: try again\r\n" TOO_MANY, 1, 6},
		{"lines too long count", LONG_LINE LONG_LINE LONG_LINE "NOOP\r\n", NULL,
		 GREET TOOLONG TOOLONG TOOLONG TOO_MANY, 1, 6},
		{"errors of any command", "MAIL FROM:<a\r\nRCPT TO:<a@b.c>\r\nDATA\r\nQUIT\r\n", NULL,
		 GREET "501 5.1.7 Bad sender address syntax\r\n"
		 NEED_MAIL NEED_RCPT TOO_MANY, 1, 6},
		{"a message too big counts (DATA)", "X\r\nX\r\n" ENVELOPE K1024 "\r\n.\r\nNOOP\r\n", NULL,
		 GREET UNKNOWN UNKNOWN EHLO_R OK_MAIL OK_RCPT GO TOOBIG TOO_MANY, 1, 6},
		{"a message too big counts (BDAT)", "X\r\nX\r\n" ENV_B "BDAT 1024 LAST\r\n" K1024 "NOOP\r\n",
		 NULL, GREET UNKNOWN UNKNOWN EHLO_R OK_MAIL OK_RCPT TOOBIG TOO_MANY, 1, 6},
		{"chunks after one too big: one error", "X\r\n" ENV_B "BDAT 1024\r\n" K1024 CHUNKS5
		 "BDAT 2 LAST\r\ncdNOOP\r\n", NULL, GREET UNKNOWN EHLO_R OK_MAIL OK_RCPT
		 TOOBIG TOOBIG TOOBIG TOOBIG TOOBIG TOOBIG TOOBIG NOOP_R, 0, 0},
	};
	struct smtp_config cfg = {.hostname = "mx.test", .message_size = 1000, .max_rcpts = 3,
		.hard_errors = 3, .junk_commands = 2};
	struct smtp_session *s;
	struct fake f;
	size_t i, got;
	int fails = 0;

	(void) state;
	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		memset(&f, 0, sizeof(f));
		f.reply = rows[i].hook_reply;
		s = smtp_session_new(&cfg, &fake_hooks, &f);
		smtp_session_greet(s);
		got = feed_chunks(s, rows[i].in, strlen(rows[i].in), 0, 0);
		fails += check_output(s, rows[i].name, "whole", rows[i].want);
		if (smtp_session_closing(s) != rows[i].closing
		    || strlen(rows[i].in) - got != rows[i].rest
		    || (rows[i].closing && smtp_session_why(s) != SMTP_CLOSE_ERRORS)) {
			print_error("%s: got closing=%d rest=%zu why=%d, want closing=%d rest=%zu\n",
				    rows[i].name, smtp_session_closing(s), strlen(rows[i].in) - got,
				    (int) smtp_session_why(s), rows[i].closing, rows[i].rest);
			fails++;
		}
		smtp_session_free(s);
		fake_free(&f);
	}
	assert_int_equal(fails, 0);
}

 /*
  * What each end of a transaction counts, with hard_errors off so that the
  * count shows: a message refused or taken counts the same whichever of
  * DATA, BDAT LAST or BDAT 0 LAST carried it (one error, or the count
  * cleared; one record for the message or its last chunk; "after
  * END-OF-MESSAGE"), and however many of its chunks were answered 552
  * (RFC 3030: those already pipelined are read and discarded, not
  * punished), even if RSET abandons it; each BDAT refused when announced
  * counts once, as Postfix counts each failed command. Every row starts
  * with one error.
  */
struct end_row {
	const char *name, *in, *hook_reply;
	int bare_lf_reject;
	int errors;			/* s->errors after the input */
	unsigned long records;		/* smtp_session_records() */
	const char *where;		/* smtp_session_where() */
};

#define EOM	"END-OF-MESSAGE"
#define NO_RCPT	"X\r\nMAIL FROM:<a@b.c>\r\nRCPT TO:<deny@x.y>\r\n"

/* run_end_row - feed one row in the mode given; 1 (and why) if its counts are not the row's */
static int run_end_row(const void *row, size_t step, const char *how)
{
	const struct end_row *r = row;
	struct smtp_config cfg = {.hostname = "mx.test", .message_size = 1000, .max_rcpts = 3};
	struct smtp_session *s;
	struct fake f;
	int bad = 0;

	memset(&f, 0, sizeof(f));
	f.reply = r->hook_reply;
	cfg.bare_lf_reject = r->bare_lf_reject;
	s = smtp_session_new(&cfg, &fake_hooks, &f);
	feed_chunks(s, r->in, strlen(r->in), 0, step);
	if (s->errors != r->errors || smtp_session_records(s) != r->records
	    || strcmp(smtp_session_where(s), r->where) != 0 || smtp_session_in_data(s)) {
		print_error("%s (%s): got errors=%d records=%lu where=%s in_data=%d, "
			    "want errors=%d records=%lu where=%s in_data=0\n", r->name, how,
			    s->errors, smtp_session_records(s), smtp_session_where(s),
			    smtp_session_in_data(s), r->errors, r->records, r->where);
		bad = 1;
	}
	smtp_session_free(s);
	fake_free(&f);
	return bad;
}

static void test_message_end_counts(void **state)
{
	static const struct end_row rows[] = {
		{"DATA taken", "X\r\n" ENVELOPE "m\r\n.\r\n", NULL, 0, 0, 6, EOM},
		{"BDAT LAST taken", "X\r\n" ENV_B "BDAT 3 LAST\r\nm\r\n", NULL, 0, 0, 6, EOM},
		{"BDAT 0 LAST taken", "X\r\n" ENV_B "BDAT 3\r\nm\r\nBDAT 0 LAST\r\n", NULL, 0, 0, 8, EOM},
		{"DATA refused by the hook", "X\r\n" ENVELOPE "m\r\n.\r\n", "451 4.3.0 Error: later", 0,
		 2, 6, EOM},
		{"BDAT LAST refused by the hook", "X\r\n" ENV_B "BDAT 3 LAST\r\nm\r\n",
		 "451 4.3.0 Error: later", 0, 2, 6, EOM},
		{"BDAT 0 LAST refused by the hook", "X\r\n" ENV_B "BDAT 3\r\nm\r\nBDAT 0 LAST\r\n",
		 "451 4.3.0 Error: later", 0, 2, 8, EOM},
		{"DATA too big", "X\r\n" ENVELOPE K1024 "\r\n.\r\n", NULL, 0, 2, 6, EOM},
		{"BDAT LAST too big", "X\r\n" ENV_B "BDAT 1024 LAST\r\n" K1024, NULL, 0, 2, 6, EOM},
		{"BDAT 0 LAST after a chunk too big", "X\r\n" ENV_B "BDAT 1024\r\n" K1024
		 "BDAT 0 LAST\r\n", NULL, 0, 2, 8, EOM},
		{"chunks after one too big", "X\r\n" ENV_B "BDAT 1024\r\n" K1024 "BDAT 2\r\nab"
		 "BDAT 2 LAST\r\ncd", NULL, 0, 2, 10, EOM},
		{"more chunks after one too big than hard_errors", "X\r\n" ENV_B "BDAT 1024\r\n" K1024
		 CHUNKS5 CHUNKS5 CHUNKS5 CHUNKS5 CHUNKS5 "BDAT 2 LAST\r\ncd", NULL, 0, 2, 58, EOM},
		{"RSET after a chunk too big", "X\r\n" ENV_B "BDAT 1024\r\n" K1024 "RSET\r\n",
		 NULL, 0, 2, 7, "RSET"},
		{"DATA with a bare LF", "X\r\n" ENVELOPE "a\nb\r\n.\r\n", NULL, 1, 2, 6, EOM},
		{"BDAT LAST with a bare LF", "X\r\n" ENV_B "BDAT 3 LAST\r\na\nb", NULL, 1, 2, 6, EOM},
		{"BDAT 0 LAST with a bare LF", "X\r\n" ENV_B "BDAT 3\r\na\nbBDAT 0 LAST\r\n", NULL, 1,
		 2, 8, EOM},
		{"DATA, no recipient accepted", NO_RCPT "DATA\r\n", NULL, 0, 3, 4, "DATA"},
		{"BDAT LAST, no recipient accepted", NO_RCPT "BDAT 3 LAST\r\nabc", NULL, 0, 3, 5, "BDAT"},
		{"BDAT 0 LAST, no recipient accepted", NO_RCPT "BDAT 0 LAST\r\n", NULL, 0, 3, 5, "BDAT"},
		{"each BDAT refused", "X\r\nBDAT 2\r\nabBDAT 2 LAST\r\ncd", NULL, 0, 3, 5, "BDAT"},
		{"RSET mid-BDAT, then LAST refused", "X\r\n" ENV_B "BDAT 2\r\nabRSET\r\n"
		 "BDAT 2 LAST\r\ncd", NULL, 0, 2, 9, "BDAT"},
	};

	(void) state;
	assert_int_equal(run_rows(rows, sizeof(rows[0]), sizeof(rows) / sizeof(rows[0]),
				  run_end_row), 0);
}

 /*
  * out_max: with that much output unwritten no command line is taken, so
  * a client that pipelines without reading is answered at most one
  * command's replies past it; once the output is written, the rest is.
  */
static void test_out_max(void **state)
{
	struct smtp_config cfg = {.hostname = "mx.test", .out_max = 1000};
	struct buf in = BUF_INIT;
	struct smtp_session *s;
	size_t i, got, total = 0, answered = 0;

	(void) state;
	for (i = 0; i < 200; i++)
		buf_append(&in, "EHLO x\r\n", 8);
	s = smtp_session_new(&cfg, &fake_hooks, NULL);
	smtp_session_greet(s);
	while (total < in.len) {
		got = smtp_session_feed(s, in.data + total, in.len - total);
		assert_true(got > 0);
		assert_true(got < in.len - total || total + got == in.len);
		/* the cap was reached before the last line taken, never by more than its reply */
		assert_true(smtp_session_out(s)->len < 1000 + 200);
		total += got;
		answered += got / 8;
		buf_consume(smtp_session_out(s), smtp_session_out(s)->len);
	}
	assert_int_equal(answered, 200);
	assert_false(smtp_session_closing(s));
	smtp_session_free(s);
	buf_free(&in);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_commands),
		cmocka_unit_test(test_recipients),
		cmocka_unit_test(test_data),
		cmocka_unit_test(test_long_lines),
		cmocka_unit_test(test_line_memory),
		cmocka_unit_test(test_bdat),
		cmocka_unit_test(test_bdat_size),
		cmocka_unit_test(test_bdat_memory),
		cmocka_unit_test(test_bdat_wait),
		cmocka_unit_test(test_wait_resume),
		cmocka_unit_test(test_out_consume),
		cmocka_unit_test(test_timeout),
		cmocka_unit_test(test_shutdown_while_waiting),
		cmocka_unit_test(test_smtputf8),
		cmocka_unit_test(test_no_hooks),
		cmocka_unit_test(test_zero_limits),
		cmocka_unit_test(test_random_input),
		cmocka_unit_test(test_error_limits),
		cmocka_unit_test(test_message_end_counts),
		cmocka_unit_test(test_out_max),
	};

	log_setup("test_smtp_session", 0, LOG_LEVEL_ERROR);	/* expected warnings */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
