/*
 * NAME
 *	test_smtp_session 1
 * SUMMARY
 *	unit tests: the SMTP session's command phase and DATA (commands,
 *	order, recipients, DATA, long lines, SMTPUTF8)
 * DESCRIPTION
 *	Scripted sessions (test_smtp_script.h): each row is a client's input
 *	and the exact output wanted (greeting included), with the state the
 *	session and the message hook are left in. Every row is fed in one
 *	call (as a pipelining client does), one byte per call and in chunks
 *	of 7; all must give the same output. The fake message hook records
 *	what it was given and answers at once. BDAT is test_smtp_bdat's,
 *	the events between feeds (a late answer, timeouts, shutdown)
 *	test_smtp_events', limits and bounded memory test_smtp_limits'.
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
#include "../../util/log.h"
#include "test_smtp_script.h"

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
		 .closed = SMTP_CLOSE_QUIT,
		 .calls = 1,
		 MSG("Subject: t\r\n\r\nhi\r\n"),
		 .rcpts = "x@y.z,"},
		{.name = "QUIT leaves the rest", IN("QUIT\r\nNOOP\r\n"),
		 .want = GREET BYE,
		 .rest = 6,
		 .closed = SMTP_CLOSE_QUIT},
		{.name = "QUIT drops the tx", IN("MAIL FROM:<a@b.c>\r\nRCPT TO:<x@y.z>\r\nQUIT\r\n"),
		 .want = GREET OK_MAIL OK_RCPT BYE,
		 .closed = SMTP_CLOSE_QUIT},
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
		 "214 2.0.0 Commands: EHLO HELO MAIL RCPT DATA BDAT RSET NOOP QUIT VRFY HELP STARTTLS AUTH\r\n",
		 .stats = " noop=2 vrfy=1/2 help=2 commands=5/6"},
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
		/* one mailbox, its domain in two cases: not counted twice (local parts are exact) */
		{.name = "one recipient, two spellings", IN("MAIL FROM:<a@b.c>\r\nRCPT TO:<r1@X.y>\r\n"
		   "RCPT TO:<r1@x.Y>\r\nRCPT TO:<R1@x.y>\r\nRCPT TO:<r2@x.y>\r\nRCPT TO:<r3@x.y>\r\n"
		   "DATA\r\nhi\r\n.\r\n"),
		 .want = GREET OK_MAIL OK_RCPT OK_RCPT OK_RCPT OK_RCPT "452 4.5.3 Too many recipients\r\n"
		 GO QUEUED,
		 .calls = 1,
		 MSG("hi\r\n"),
		 .rcpts = "r1@X.y,R1@x.y,r2@x.y,"},
		{.name = "rcpt hook refuses", IN("MAIL FROM:<a@b.c>\r\nRCPT TO:<deny@x.y>\r\nDATA\r\nRCPT TO:<ok@x.y>\r\n"),
		 .want = GREET OK_MAIL "554 5.7.1 <deny@x.y>: Relay access denied\r\n" NEED_RCPT OK_RCPT},
	};

	(void) state;
	assert_int_equal(run_scripts(cases, sizeof(cases) / sizeof(cases[0])), 0);
}

 /*
  * DATA through the session: smuggling, size, bare LF, pipelining.
  */
struct rcpt_id_case {
	const char *addr, *id;		/* id NULL: -1 */
};

/* smtp_rcpt_id: the one rule for one recipient, which the claims use too */
static void test_rcpt_id(void **state)
{
	static const struct rcpt_id_case cases[] = {
		{"u@Example.COM", "u@example.com"},
		{"U@x.y", "U@x.y"},			/* the local part is kept */
		{"\"A@B\"@C.d", "\"A@B\"@c.d"},		/* the last @ starts the domain */
		{"\xc3\x9c@\xc3\x84X.de", "\xc3\x9c@\xc3\x84x.de"},	/* UTF-8 octets as they are */
		{"", ""},
	};
	char id[SMTP_RCPT_ID_MAX], lng[SMTP_RCPT_ID_MAX + 1];
	size_t i;
	int rc;

	(void) state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		rc = smtp_rcpt_id(cases[i].addr, id);
		if (rc != 0 || strcmp(id, cases[i].id) != 0)
			fail_msg("smtp_rcpt_id(\"%s\"): got %d \"%s\", want 0 \"%s\"", cases[i].addr,
				 rc, rc == 0 ? id : "", cases[i].id);
	}
	memset(lng, 'A', sizeof(lng) - 1);
	lng[sizeof(lng) - 2] = 0;		/* 255 octets: the longest */
	lng[100] = '@';
	assert_int_equal(smtp_rcpt_id(lng, id), 0);
	assert_int_equal(id[101], 'a');
	assert_int_equal(id[99], 'A');
	lng[sizeof(lng) - 2] = 'A';
	lng[sizeof(lng) - 1] = 0;		/* 256 */
	assert_int_equal(smtp_rcpt_id(lng, id), -1);
}

static void test_data(void **state)
{
	static const struct script cases[] = {
		{.name = "smuggled transaction stays in the message", IN(ENVELOPE "a\n.\nMAIL FROM:<e@x.y>\r\nRCPT TO:<v@x.y>\r\nDATA\r\nevil\r\n.\r\nQUIT\r\n"),
		 .want = ENVELOPE_R QUEUED BYE,
		 .closed = SMTP_CLOSE_QUIT,
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
		 .closed = SMTP_CLOSE_QUIT,
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
	assert_int_equal(run_scripts(cases, sizeof(cases) / sizeof(cases[0])), 0);
	free(l600);
	free(l512);
	free(l513);
	free(lf512);
	free(mail);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_commands),
		cmocka_unit_test(test_recipients),
		cmocka_unit_test(test_rcpt_id),
		cmocka_unit_test(test_data),
		cmocka_unit_test(test_long_lines),
		cmocka_unit_test(test_smtputf8),
		cmocka_unit_test(test_no_hooks),
	};

	log_setup("test_smtp_session", 0, LOG_LEVEL_ERROR);	/* expected warnings */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
