/*
 * NAME
 *	test_smtp_auth 1
 * SUMMARY
 *	unit tests: STARTTLS and AUTH in the SMTP session
 * DESCRIPTION
 *	Scripted sessions as in test_smtp_session, with steps: client input,
 *	"TLS is up" (smtp_session_set_tls()), and for the asynchronous tests
 *	the auth hook's verdict. Each row is run with every input step fed
 *	in one call, one byte per call and in chunks of 7; all must give
 *	the exact output wanted. The fake auth hook knows alice/secret and
 *	bob/hunter2 and answers at once, or later when told to.
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
#include "test_smtp.h"


 /*
  * The fake world behind the hooks.
  */
struct fake {
	int     async;			/* auth hook does not answer itself */
	struct buf checks;		/* "MECH user pass;" per auth hook call */
	int     messages;
};

/* fake_auth - alice/secret and bob/hunter2 are right */
static void fake_auth(void *ctx, struct smtp_session *s, const char *mech,
		      const char *user, const char *pass)
{
	struct fake *f = ctx;
	int ok = (strcmp(user, "alice") == 0 && strcmp(pass, "secret") == 0)
	    || (strcmp(user, "bob") == 0 && strcmp(pass, "hunter2") == 0);

	buf_printf(&f->checks, "%s %s %s;", mech, user, pass);
	if (strcmp(user, "carol") == 0)
		smtp_session_auth_reply(s, -1);	/* over the rate limit: no verdict */
	else if (!f->async)
		smtp_session_auth_reply(s, ok);
}

/* fake_message - count, accept */
static void fake_message(void *ctx, struct smtp_session *s, struct smtp_tx *tx)
{
	struct fake *f = ctx;

	(void) tx;
	f->messages++;
	smtp_session_reply(s, "250 2.0.0 Ok: queued as TESTQID");
}

static const struct smtp_hooks fake_hooks = {
	.message = fake_message,
	.auth = fake_auth,
};

enum op { END, IN, TLS };

struct step {
	enum op op;
	const char *in;
	size_t len;
};

#define FEED(x)	{IN, x, sizeof(x) - 1}
#define TLS_UP	{TLS, NULL, 0}

/* listener kinds */
#define L_PLAIN		0	/* STARTTLS offered, AUTH configured */
#define L_NOTLS		1	/* neither configured */
#define L_SUBMIT	2	/* starttls and auth required (587) */
#define L_IMPLICIT	3	/* TLS before the greeting, auth required (465) */
#define L_NOAUTH	4	/* STARTTLS offered, no AUTH */
#define L_STRICT	5	/* L_IMPLICIT with hard_errors 3 */

struct script {
	const char *name;
	int     listener;		/* L_* */
	struct step steps[6];
	const char *want;		/* whole output, greeting included */
	const char *user;		/* authenticated at the end, NULL: none */
	const char *checks;		/* auth hook calls, NULL: none */
	int     closing;
	int     starttls;		/* smtp_session_starttls() at the end */
	int     messages;
};

/* new_session - the listener's configuration */
static struct smtp_session *new_session(struct fake *f, int listener)
{
	struct smtp_config cfg = {.hostname = "mx.test", .message_size = 1000, .max_rcpts = 3};
	struct smtp_session *s;

	cfg.starttls = listener == L_PLAIN || listener == L_SUBMIT || listener == L_NOAUTH;
	cfg.starttls_required = listener == L_SUBMIT;
	cfg.auth = listener != L_NOTLS && listener != L_NOAUTH;
	cfg.auth_required = listener == L_SUBMIT || listener == L_IMPLICIT || listener == L_STRICT;
	cfg.hard_errors = listener == L_STRICT ? 3 : 0;
	s = smtp_session_new(&cfg, &fake_hooks, f);
	if (listener == L_IMPLICIT || listener == L_STRICT)
		smtp_session_set_tls(s);
	smtp_session_greet(s);
	return s;
}

#define EHLO_STARTTLS EHLO_HEAD "250-STARTTLS\r\n" EHLO_TAIL
#define EHLO_AUTH EHLO_HEAD "250-AUTH PLAIN LOGIN\r\n" EHLO_TAIL
#define READY	"220 2.0.0 Ready to start TLS\r\n"
#define NEED_TLS "530 5.7.0 Must issue a STARTTLS command first\r\n"
#define NEED_AUTH "530 5.7.0 Authentication required\r\n"
#define AUTH_OK	"235 2.7.0 Authentication successful\r\n"
#define AUTH_NO	"535 5.7.8 Error: authentication failed\r\n"
#define ENCRYPT	"538 5.7.11 Encryption required for requested authentication mechanism\r\n"
#define ABORTED	"501 5.7.0 Authentication aborted\r\n"
#define UNDECODABLE "501 5.5.2 Cannot decode response\r\n"
#define USERNAME "334 VXNlcm5hbWU6\r\n"
#define PASSWORD "334 UGFzc3dvcmQ6\r\n"
#define TOO_MANY "421 4.7.0 mx.test Error: too many failed authentication attempts\r\n"

#define PLAIN_ALICE	"AGFsaWNlAHNlY3JldA=="	/* \0alice\0secret */
#define PLAIN_WRONG	"AGFsaWNlAHdyb25n"	/* \0alice\0wrong */
#define PLAIN_BOB	"AGJvYgBodW50ZXIy"	/* \0bob\0hunter2 */
#define PLAIN_CAROL	"AGNhcm9sAHg="	/* \0carol\0x */
#define TLS_EHLO	"EHLO c\r\nSTARTTLS\r\n"	/* then TLS_UP, "EHLO c\r\n" */
#define TLS_EHLO_R	GREET EHLO_STARTTLS READY EHLO_AUTH

/* run_script - every input step fed in chunks of step (0: whole); check */
static int run_script(const void *row, size_t step, const char *how)
{
	const struct script *c = row;
	struct fake f;
	struct smtp_session *s;
	const struct step *st;
	const char *user;
	int bad = 0;

	memset(&f, 0, sizeof(f));
	s = new_session(&f, c->listener);
	for (st = c->steps; st < c->steps + 6 && st->op != END; st++) {
		if (st->op == TLS) {
			if (!smtp_session_starttls(s)) {
				print_error("%s (%s): TLS step while no STARTTLS is pending\n",
					    c->name, how);
				bad = 1;
			}
			smtp_session_set_tls(s);
			continue;
		}
		feed_chunks(s, st->in, st->len, 0, step);
	}
	bad |= check_output(s, c->name, how, c->want);
	user = smtp_session_user(s);
	if ((user == NULL) != (c->user == NULL) || (user && strcmp(user, c->user) != 0)) {
		print_error("%s (%s): user got %s, want %s\n", c->name, how,
			    user ? user : "(none)", c->user ? c->user : "(none)");
		bad = 1;
	}
	bad |= check_bytes(c->name, how, "auth hook calls", f.checks.data, f.checks.len,
			   c->checks ? c->checks : "", c->checks ? strlen(c->checks) : 0);
	if (smtp_session_closing(s) != c->closing || smtp_session_starttls(s) != c->starttls
	    || smtp_session_waiting(s) || f.messages != c->messages) {
		print_error("%s (%s): got closing=%d starttls=%d waiting=%d messages=%d, "
			    "want closing=%d starttls=%d waiting=0 messages=%d\n", c->name, how,
			    smtp_session_closing(s), smtp_session_starttls(s),
			    smtp_session_waiting(s), f.messages, c->closing, c->starttls,
			    c->messages);
		bad = 1;
	}
	smtp_session_free(s);
	buf_free(&f.checks);
	return bad;
}

/* run_scripts - each row in every feed mode */
static int run_scripts(const struct script *cases, size_t n)
{
	return run_rows(cases, sizeof(cases[0]), n, run_script);
}

 /*
  * STARTTLS (RFC 3207) and what the listener requires before it.
  */
static void test_starttls(void **state)
{
	static const struct script cases[] = {
		{.name = "offered before TLS, AUTH not", .listener = L_PLAIN,
		 .steps = {FEED("EHLO c\r\n")},
		 .want = GREET EHLO_STARTTLS},
		{.name = "not offered without tls", .listener = L_NOTLS,
		 .steps = {FEED("EHLO c\r\nSTARTTLS\r\nNOOP\r\n")},
		 .want = GREET EHLO_R "502 5.5.1 Error: command not implemented\r\n" OK},
		{.name = "220, then AUTH offered and STARTTLS not", .listener = L_PLAIN,
		 .steps = {FEED(TLS_EHLO), TLS_UP, FEED("EHLO c\r\n")},
		 .want = TLS_EHLO_R},
		{.name = "pending until TLS is up", .listener = L_PLAIN,
		 .steps = {FEED("STARTTLS\r\n")},
		 .want = GREET READY,
		 .starttls = 1},
		{.name = "CVE-2011-0411: pipelined input after STARTTLS is discarded",
		 .listener = L_PLAIN,
		 .steps = {FEED("EHLO c\r\nSTARTTLS\r\nRSET\r\nMAIL FROM:<a@b.c>\r\nQUIT\r\n")},
		 .want = GREET EHLO_STARTTLS READY,
		 .starttls = 1},
		{.name = "injected commands never run after TLS either", .listener = L_PLAIN,
		 .steps = {FEED("STARTTLS\r\nMAIL FROM:<a@b.c>\r\n"), TLS_UP,
			   FEED("RCPT TO:<x@y.z>\r\n")},
		 .want = GREET READY NEED_MAIL},
		{.name = "discarded input may be cut anywhere", .listener = L_PLAIN,
		 .steps = {FEED("STARTTLS\r\nMAIL FROM:<a@b"), TLS_UP, FEED("NOOP\r\n")},
		 .want = GREET READY OK},
		{.name = "TLS forgets the transaction and HELO", .listener = L_PLAIN,
		 .steps = {FEED("HELO c\r\nMAIL FROM:<a@b.c>\r\nSTARTTLS\r\n"), TLS_UP,
			   FEED("RCPT TO:<x@y.z>\r\nMAIL FROM:<a@b.c>\r\n")},
		 .want = GREET "250 mx.test\r\n" OK_MAIL READY NEED_MAIL OK_MAIL},
		{.name = "STARTTLS twice", .listener = L_PLAIN,
		 .steps = {FEED("STARTTLS\r\n"), TLS_UP, FEED("STARTTLS\r\nNOOP\r\n")},
		 .want = GREET READY "554 5.5.1 Error: TLS already active\r\n" OK},
		{.name = "STARTTLS takes no argument", .listener = L_PLAIN,
		 .steps = {FEED("STARTTLS now\r\nstarttls\r\n")},
		 .want = GREET "501 5.5.4 Syntax: STARTTLS\r\n" READY,
		 .starttls = 1},
		{.name = "required: only EHLO HELO STARTTLS NOOP RSET QUIT before TLS",
		 .listener = L_SUBMIT,
		 .steps = {FEED("EHLO c\r\nHELO c\r\nNOOP\r\nRSET\r\nMAIL FROM:<a@b.c>\r\n"
				"RCPT TO:<x@y.z>\r\nDATA\r\nVRFY x\r\nHELP\r\nAUTH PLAIN "
				PLAIN_ALICE "\r\nFOO\r\nQUIT\r\n")},
		 .want = GREET EHLO_STARTTLS "250 mx.test\r\n" OK OK NEED_TLS NEED_TLS NEED_TLS
		 NEED_TLS NEED_TLS NEED_TLS "500 5.5.2 Error: command not recognized\r\n" BYE,
		 .closing = 1},
		{.name = "required: a refused BDAT's chunk is skipped, not run", .listener = L_SUBMIT,
		 .steps = {FEED("BDAT 6 LAST\r\nQUIT\r\nNOOP\r\n")},
		 .want = GREET NEED_TLS OK},
		{.name = "required: after TLS, AUTH then MAIL", .listener = L_SUBMIT,
		 .steps = {FEED(TLS_EHLO), TLS_UP, FEED("EHLO c\r\nMAIL FROM:<a@b.c>\r\nAUTH PLAIN "
		   PLAIN_ALICE "\r\nMAIL FROM:<a@b.c>\r\nRCPT TO:<x@y.z>\r\nDATA\r\nhi\r\n.\r\n")},
		 .want = TLS_EHLO_R NEED_AUTH AUTH_OK OK_MAIL OK_RCPT GO QUEUED,
		 .user = "alice",
		 .checks = "PLAIN alice secret;",
		 .messages = 1},
		{.name = "implicit TLS: AUTH offered at once, STARTTLS never", .listener = L_IMPLICIT,
		 .steps = {FEED("EHLO c\r\nSTARTTLS\r\n")},
		 .want = GREET EHLO_AUTH "554 5.5.1 Error: TLS already active\r\n"},
		{.name = "no AUTH configured: not offered after TLS either", .listener = L_NOAUTH,
		 .steps = {FEED(TLS_EHLO), TLS_UP, FEED("EHLO c\r\nAUTH PLAIN " PLAIN_ALICE "\r\n")},
		 .want = GREET EHLO_STARTTLS READY EHLO_R
		 "503 5.5.1 Error: authentication not enabled\r\n"},
		{.name = "QUIT is not discarded before STARTTLS", .listener = L_PLAIN,
		 .steps = {FEED("QUIT\r\nSTARTTLS\r\n")},
		 .want = GREET BYE,
		 .closing = 1},
	};

	(void) state;
	assert_int_equal(run_scripts(cases, sizeof(cases) / sizeof(cases[0])), 0);
}

 /*
  * AUTH PLAIN and LOGIN (RFC 4954): forms, policy, failures.
  */
static void test_auth(void **state)
{
	static const struct script cases[] = {
		{.name = "outside TLS: 538", .listener = L_PLAIN,
		 .steps = {FEED("EHLO c\r\nAUTH PLAIN " PLAIN_ALICE "\r\nAUTH LOGIN\r\n")},
		 .want = GREET EHLO_STARTTLS ENCRYPT ENCRYPT},
		{.name = "PLAIN with initial response", .listener = L_PLAIN,
		 .steps = {FEED(TLS_EHLO), TLS_UP, FEED("EHLO c\r\nAUTH PLAIN " PLAIN_ALICE "\r\n")},
		 .want = TLS_EHLO_R AUTH_OK,
		 .user = "alice",
		 .checks = "PLAIN alice secret;"},
		{.name = "PLAIN with a challenge, mechanism in lower case", .listener = L_IMPLICIT,
		 .steps = {FEED("auth plain\r\n" PLAIN_BOB "\r\n")},
		 .want = GREET "334 \r\n" AUTH_OK,
		 .user = "bob",
		 .checks = "PLAIN bob hunter2;"},
		{.name = "PLAIN with authzid = authcid", .listener = L_IMPLICIT,
		 .steps = {FEED("AUTH PLAIN YWxpY2UAYWxpY2UAc2VjcmV0\r\n")},
		 .want = GREET AUTH_OK,
		 .user = "alice",
		 .checks = "PLAIN alice secret;"},
		{.name = "PLAIN acting for another user: 535, no check", .listener = L_IMPLICIT,
		 .steps = {FEED("AUTH PLAIN Ym9iAGFsaWNlAHNlY3JldA==\r\n")},
		 .want = GREET AUTH_NO},
		{.name = "PLAIN not three fields", .listener = L_IMPLICIT,
		 .steps = {FEED("AUTH PLAIN YWxpY2UAc2VjcmV0\r\nAUTH PLAIN =\r\nAUTH PLAIN\r\n\r\n")},
		 .want = GREET UNDECODABLE UNDECODABLE "334 \r\n" UNDECODABLE},
		{.name = "PLAIN: bad user names and a NUL in the password", .listener = L_IMPLICIT,
		 .steps = {FEED("AUTH PLAIN AABzZWNyZXQ=\r\nAUTH PLAIN AGFsIGljZQBzZWNyZXQ=\r\n")},
		 .want = GREET AUTH_NO AUTH_NO},
		{.name = "LOGIN with challenges", .listener = L_IMPLICIT,
		 .steps = {FEED("AUTH LOGIN\r\nYWxpY2U=\r\nc2VjcmV0\r\n")},
		 .want = GREET USERNAME PASSWORD AUTH_OK,
		 .user = "alice",
		 .checks = "LOGIN alice secret;"},
		{.name = "LOGIN with the user name as initial response", .listener = L_IMPLICIT,
		 .steps = {FEED("AUTH LOGIN YWxpY2U=\r\nc2VjcmV0\r\n")},
		 .want = GREET PASSWORD AUTH_OK,
		 .user = "alice",
		 .checks = "LOGIN alice secret;"},
		{.name = "LOGIN: a NUL in the name fails only after the password",
		 .listener = L_IMPLICIT,
		 .steps = {FEED("AUTH LOGIN\r\nYWwAaWNl\r\nc2VjcmV0\r\n")},
		 .want = GREET USERNAME PASSWORD AUTH_NO},
		{.name = "* cancels at every step", .listener = L_IMPLICIT,
		 .steps = {FEED("AUTH PLAIN\r\n*\r\nAUTH LOGIN\r\n*\r\nAUTH LOGIN\r\nYWxpY2U=\r\n*\r\n"
				"NOOP\r\n")},
		 .want = GREET "334 \r\n" ABORTED USERNAME ABORTED USERNAME PASSWORD ABORTED OK},
		{.name = "not base64", .listener = L_IMPLICIT,
		 .steps = {FEED("AUTH PLAIN AGFsaWNlAHNlY3JldA=\r\nAUTH PLAIN !!!!\r\n"
				"AUTH LOGIN\r\nYWxpY2U\r\nAUTH LOGIN\r\nYW=j\r\nAUTH PLAIN\r\n"
				"AGFsaWNlAHNlY3JldA== \r\nNOOP\r\n")},
		 .want = GREET UNDECODABLE UNDECODABLE USERNAME UNDECODABLE USERNAME UNDECODABLE
		 "334 \r\n" UNDECODABLE OK},
		{.name = "padding out of place, a tab inside", .listener = L_IMPLICIT,
		 .steps = {FEED("AUTH PLAIN ====\r\nAUTH PLAIN A===\r\nAUTH PLAIN AB==CD==\r\n"
				"AUTH LOGIN\r\nYWxp\tY2U=\r\nNOOP\r\n")},
		 .want = GREET UNDECODABLE UNDECODABLE UNDECODABLE USERNAME UNDECODABLE OK},
		{.name = "wrong password, then right", .listener = L_IMPLICIT,
		 .steps = {FEED("AUTH PLAIN " PLAIN_WRONG "\r\nAUTH LOGIN YWxpY2U=\r\nd3Jvbmc=\r\n"
				"AUTH PLAIN " PLAIN_ALICE "\r\n")},
		 .want = GREET AUTH_NO PASSWORD AUTH_NO AUTH_OK,
		 .user = "alice",
		 .checks = "PLAIN alice wrong;LOGIN alice wrong;PLAIN alice secret;"},
		{.name = "third failure: 421 and close", .listener = L_IMPLICIT,
		 .steps = {FEED("AUTH PLAIN " PLAIN_WRONG "\r\nAUTH PLAIN AABzZWNyZXQ=\r\n"
				"AUTH PLAIN " PLAIN_WRONG "\r\nAUTH PLAIN " PLAIN_ALICE "\r\n")},
		 .want = GREET AUTH_NO AUTH_NO AUTH_NO TOO_MANY,
		 .checks = "PLAIN alice wrong;PLAIN alice wrong;",
		 .closing = 1},
		{.name = "once per session", .listener = L_IMPLICIT,
		 .steps = {FEED("AUTH PLAIN " PLAIN_ALICE "\r\nAUTH PLAIN " PLAIN_BOB "\r\n"
				"EHLO c\r\nRSET\r\nAUTH LOGIN\r\n")},
		 .want = GREET AUTH_OK "503 5.5.1 Error: already authenticated\r\n" EHLO_AUTH OK
		 "503 5.5.1 Error: already authenticated\r\n",
		 .user = "alice",
		 .checks = "PLAIN alice secret;"},
		{.name = "not inside a transaction", .listener = L_PLAIN,
		 .steps = {FEED("STARTTLS\r\n"), TLS_UP, FEED("MAIL FROM:<a@b.c>\r\nAUTH PLAIN "
		   PLAIN_ALICE "\r\nRSET\r\nAUTH PLAIN " PLAIN_ALICE "\r\n")},
		 .want = GREET READY OK_MAIL "503 5.5.1 Error: MAIL transaction in progress\r\n"
		 OK AUTH_OK,
		 .user = "alice",
		 .checks = "PLAIN alice secret;"},
		{.name = "syntax and unknown mechanisms", .listener = L_IMPLICIT,
		 .steps = {FEED("AUTH\r\nAUTH CRAM-MD5\r\nAUTH PLAINX\r\nAUTH PLAIN a b\r\n"
				"AUTH PLAIN  " PLAIN_ALICE "\r\n")},
		 .want = GREET "501 5.5.4 Syntax: AUTH mechanism [initial-response]\r\n"
		 "504 5.5.4 Unrecognized authentication type\r\n"
		 "504 5.5.4 Unrecognized authentication type\r\n"
		 "501 5.5.4 Syntax: AUTH mechanism [initial-response]\r\n"
		 "501 5.5.4 Syntax: AUTH mechanism [initial-response]\r\n"},
		{.name = "auth required: MAIL refused until AUTH", .listener = L_IMPLICIT,
		 .steps = {FEED("MAIL FROM:<a@b.c>\r\nAUTH PLAIN " PLAIN_ALICE "\r\nMAIL FROM:<a@b.c>\r\n"
				"RCPT TO:<x@y.z>\r\nDATA\r\nhi\r\n.\r\n")},
		 .want = GREET NEED_AUTH AUTH_OK OK_MAIL OK_RCPT GO QUEUED,
		 .user = "alice",
		 .checks = "PLAIN alice secret;",
		 .messages = 1},
		{.name = "AUTH survives RSET and HELO", .listener = L_PLAIN,
		 .steps = {FEED(TLS_EHLO), TLS_UP, FEED("EHLO c\r\nAUTH LOGIN\r\nYm9i\r\naHVudGVyMg==\r\n"
		   "RSET\r\nHELO c\r\nMAIL FROM:<a@b.c>\r\n")},
		 .want = TLS_EHLO_R USERNAME PASSWORD AUTH_OK OK "250 mx.test\r\n" OK_MAIL,
		 .user = "bob",
		 .checks = "LOGIN bob hunter2;"},
	};

	(void) state;
	assert_int_equal(run_scripts(cases, sizeof(cases) / sizeof(cases[0])), 0);
}

 /*
  * A response line over SMTP_LINE_MAX ends the exchange with 500 5.5.6;
  * the line never reaches the hook.
  */
static void test_auth_long_line(void **state)
{
	char in[2048];
	struct script c = {.name = "long response", .listener = L_IMPLICIT,
		.want = GREET "334 \r\n500 5.5.6 Authentication exchange line is too long\r\n" OK};

	(void) state;
	memcpy(in, "AUTH PLAIN\r\n", 12);
	memset(in + 12, 'A', 1000);
	memcpy(in + 1012, "\r\nNOOP\r\n", 9);
	c.steps[0] = (struct step) {IN, in, strlen(in)};
	assert_int_equal(run_scripts(&c, 1), 0);
}

 /*
  * hard_errors (idemrelay.conf(5): every 4xx and 5xx reply counts) sees an
  * AUTH exchange's replies alike whether the credentials came with the
  * command or after its 334: the AUTH rate limit's 454, an undecodable
  * response, a line too long.
  */
#define LIMITED	"454 4.7.0 Error: too many AUTH attempts, try again later\r\n"
#define ERRORS	"421 4.7.0 mx.test Error: too many errors\r\n"
#define CAROL3	"PLAIN carol x;PLAIN carol x;PLAIN carol x;"

static void test_auth_errors_count(void **state)
{
	static const struct script cases[] = {
		{.name = "454s with an initial response", .listener = L_STRICT,
		 .steps = {FEED("AUTH PLAIN " PLAIN_CAROL "\r\nAUTH PLAIN " PLAIN_CAROL
				"\r\nAUTH PLAIN " PLAIN_CAROL "\r\nNOOP\r\n")},
		 .want = GREET LIMITED LIMITED LIMITED ERRORS, .checks = CAROL3, .closing = 1},
		{.name = "454s after a 334", .listener = L_STRICT,
		 .steps = {FEED("AUTH PLAIN\r\n" PLAIN_CAROL "\r\nAUTH PLAIN\r\n" PLAIN_CAROL
				"\r\nAUTH PLAIN\r\n" PLAIN_CAROL "\r\nNOOP\r\n")},
		 .want = GREET "334 \r\n" LIMITED "334 \r\n" LIMITED "334 \r\n" LIMITED ERRORS,
		 .checks = CAROL3, .closing = 1},
		{.name = "undecodable responses after a 334", .listener = L_STRICT,
		 .steps = {FEED("AUTH LOGIN\r\n!\r\nAUTH PLAIN\r\n!\r\nAUTH PLAIN\r\n!\r\nNOOP\r\n")},
		 .want = GREET USERNAME UNDECODABLE "334 \r\n" UNDECODABLE "334 \r\n" UNDECODABLE
		 ERRORS, .closing = 1},
		{.name = "aborted exchanges (501 too)", .listener = L_STRICT,
		 .steps = {FEED("AUTH PLAIN\r\n*\r\nAUTH PLAIN\r\n*\r\nAUTH PLAIN\r\n*\r\nNOOP\r\n")},
		 .want = GREET "334 \r\n" ABORTED "334 \r\n" ABORTED "334 \r\n" ABORTED ERRORS,
		 .closing = 1},
	};
	char in[3 * 1014 + 7];
	struct script c = {.name = "response lines too long", .listener = L_STRICT,
		.want = GREET "334 \r\n500 5.5.6 Authentication exchange line is too long\r\n"
		"334 \r\n500 5.5.6 Authentication exchange line is too long\r\n"
		"334 \r\n500 5.5.6 Authentication exchange line is too long\r\n" ERRORS,
		.closing = 1};
	size_t i;

	(void) state;
	assert_int_equal(run_scripts(cases, sizeof(cases) / sizeof(cases[0])), 0);
	for (i = 0; i < 3; i++) {
		memcpy(in + i * 1014, "AUTH PLAIN\r\n", 12);
		memset(in + i * 1014 + 12, 'A', 1000);
		memcpy(in + i * 1014 + 1012, "\r\n", 2);
	}
	memcpy(in + 3 * 1014, "NOOP\r\n", 7);
	c.steps[0] = (struct step) {IN, in, sizeof(in)};
	assert_int_equal(run_scripts(&c, 1), 0);
}

 /*
  * A 535 counts toward hard_errors once, whether the hook gave it at once
  * or later (the relay's checking threads, after the failure delay): with
  * hard_errors 3, an unknown command, a failed AUTH and a NOOP leave the
  * session open, and the next unknown command closes it.
  */
#define UNKNOWN	"500 5.5.2 Error: command not recognized\r\n"

static void test_auth_failure_counts(void **state)
{
	static const char before[] = "XXXX\r\nAUTH PLAIN " PLAIN_WRONG "\r\n", after[] =
	    "NOOP\r\nXXXX\r\nNOOP\r\n";
	static const char want[] = GREET UNKNOWN AUTH_NO OK UNKNOWN ERRORS;
	struct script c = {.name = "a 535 at once", .listener = L_STRICT,
		.steps = {FEED("XXXX\r\nAUTH PLAIN " PLAIN_WRONG "\r\nNOOP\r\nXXXX\r\nNOOP\r\n")},
		.want = want, .checks = "PLAIN alice wrong;", .closing = 1};
	struct fake f;
	struct smtp_session *s;
	size_t m, step;
	int bad = 0;

	(void) state;
	assert_int_equal(run_scripts(&c, 1), 0);
	for (m = 0; m < sizeof(feed_modes) / sizeof(feed_modes[0]); m++) {
		step = feed_modes[m].step;
		memset(&f, 0, sizeof(f));
		f.async = 1;
		s = new_session(&f, L_STRICT);
		feed_chunks(s, S(before), 0, step);
		assert_true(smtp_session_waiting(s));
		smtp_session_auth_reply(s, 0);	/* the 535, later */
		feed_chunks(s, S(after), 0, step);
		bad |= check_output(s, "a 535 later", feed_modes[m].how, want);
		assert_true(smtp_session_closing(s));
		smtp_session_free(s);
		buf_free(&f.checks);
	}
	assert_int_equal(bad, 0);
}

 /*
  * The hook answers later: nothing is consumed meanwhile; a 421 due in
  * the meantime comes after the answer.
  */
static void test_auth_async(void **state)
{
	static const char in[] = "AUTH PLAIN " PLAIN_ALICE "\r\nMAIL FROM:<a@b.c>\r\n";
	size_t len = sizeof(in) - 1, got;
	struct fake f;
	struct smtp_session *s;
	int i;

	(void) state;
	memset(&f, 0, sizeof(f));
	f.async = 1;
	s = new_session(&f, L_IMPLICIT);
	got = smtp_session_feed(s, in, len);
	assert_int_equal(got, len - strlen("MAIL FROM:<a@b.c>\r\n"));
	assert_true(smtp_session_waiting(s));
	assert_int_equal(smtp_session_feed(s, in + got, len - got), 0);
	smtp_session_reply(s, "250 2.0.0 Ok");	/* the wrong answer changes nothing */
	assert_true(smtp_session_waiting(s));
	smtp_session_auth_reply(s, 1);
	assert_false(smtp_session_waiting(s));
	assert_int_equal(smtp_session_feed(s, in + got, len - got), len - got);
	assert_string_equal(smtp_session_out(s)->data, GREET AUTH_OK OK_MAIL);
	assert_string_equal(smtp_session_user(s), "alice");
	smtp_session_auth_reply(s, 1);		/* nobody asked: ignored */
	assert_string_equal(smtp_session_out(s)->data, GREET AUTH_OK OK_MAIL);
	smtp_session_free(s);

	/* shutdown while the hook holds the credentials: the verdict first */
	s = new_session(&f, L_IMPLICIT);
	smtp_session_feed(s, S("AUTH LOGIN YWxpY2U=\r\nd3Jvbmc=\r\n"));
	assert_true(smtp_session_waiting(s));
	smtp_session_close(s, SMTP_CLOSE_SHUTDOWN);
	smtp_session_close(s, SMTP_CLOSE_TIMEOUT);
	assert_false(smtp_session_closing(s));
	smtp_session_auth_reply(s, 0);
	assert_true(smtp_session_closing(s));
	assert_string_equal(smtp_session_out(s)->data, GREET PASSWORD AUTH_NO SHUTDOWN);
	assert_null(smtp_session_user(s));
	smtp_session_free(s);

	/* a timeout in the middle of an exchange; freeing while waiting */
	s = new_session(&f, L_IMPLICIT);
	smtp_session_feed(s, S("AUTH LOGIN\r\nYWxpY2U=\r\n"));
	smtp_session_close(s, SMTP_CLOSE_TIMEOUT);
	assert_true(smtp_session_closing(s));
	assert_string_equal(smtp_session_out(s)->data, GREET USERNAME PASSWORD TIMEOUT);
	smtp_session_free(s);
	s = new_session(&f, L_IMPLICIT);
	smtp_session_feed(s, S("AUTH PLAIN " PLAIN_ALICE "\r\n"));
	assert_true(smtp_session_waiting(s));
	smtp_session_free(s);

	/* the failure limit holds for asynchronous verdicts too */
	s = new_session(&f, L_IMPLICIT);
	for (i = 0; i < 3; i++) {
		assert_false(smtp_session_closing(s));
		smtp_session_feed(s, S("AUTH PLAIN " PLAIN_WRONG "\r\n"));
		smtp_session_auth_reply(s, 0);
	}
	assert_true(smtp_session_closing(s));
	assert_string_equal(smtp_session_out(s)->data, GREET AUTH_NO AUTH_NO AUTH_NO TOO_MANY);
	smtp_session_free(s);
	buf_free(&f.checks);
}

 /*
  * smtp_session_set_tls() at the wrong moment changes nothing.
  */
static void test_set_tls_misuse(void **state)
{
	struct fake f;
	struct smtp_session *s;

	(void) state;
	memset(&f, 0, sizeof(f));
	s = new_session(&f, L_PLAIN);
	smtp_session_feed(s, S("EHLO c\r\nMAIL FROM:<a@b.c>\r\nRCPT TO:<x@y.z>\r\nDATA\r\n"));
	smtp_session_set_tls(s);		/* in DATA: refused */
	assert_false(smtp_session_tls(s));
	assert_string_equal(smtp_session_helo(s), "c");
	smtp_session_free(s);

	s = new_session(&f, L_IMPLICIT);
	assert_true(smtp_session_tls(s));
	smtp_session_set_tls(s);		/* twice: refused */
	smtp_session_feed(s, S("EHLO c\r\n"));
	assert_string_equal(smtp_session_out(s)->data, GREET EHLO_AUTH);
	smtp_session_free(s);
}

/* random_peer - TLS comes up three times in four when asked; the hook says yes or no */
static void random_peer(struct smtp_session *s, uint64_t *seed)
{
	if (smtp_session_starttls(s) && test_rand(seed) % 4)
		smtp_session_set_tls(s);
	if (smtp_session_waiting(s))
		smtp_session_auth_reply(s, (int) (test_rand(seed) & 1));
}

 /*
  * Robustness: pseudo-random fragments of STARTTLS and AUTH sessions in
  * pseudo-random chunks, on every kind of listener; TLS comes up when
  * asked for, and the hook answers sometimes at once, sometimes later.
  * Nothing may crash or leak (run under valgrind).
  */
static void test_random_input(void **state)
{
	static const char *const frags[] = {
		"EHLO x\r\n", "STARTTLS\r\n", "AUTH PLAIN\r\n", "AUTH LOGIN\r\n",
		"AUTH PLAIN " PLAIN_ALICE "\r\n", "AUTH PLAIN " PLAIN_WRONG "\r\n",
		"AUTH LOGIN YWxpY2U=\r\n", PLAIN_BOB "\r\n", "YWxpY2U=\r\n", "c2VjcmV0\r\n",
		"*\r\n", "=\r\n", "MAIL FROM:<a@b.c>\r\n", "RCPT TO:<x@y.z>\r\n",
		"DATA\r\n", "x\r\n.\r\n", "BDAT 5 LAST\r\n", "RSET\r\n", "NOOP\r\n",
		"QUIT\r\n", "\r\n", "\n", "=", "A", "\0", "AUTH ",
	};
	struct buf in = BUF_INIT;
	uint64_t seed = 7;
	struct fake f;
	struct smtp_session *s;
	size_t round;

	(void) state;
	memset(&f, 0, sizeof(f));
	for (round = 0; round < 300; round++) {
		random_input(&in, frags, sizeof(frags) / sizeof(frags[0]), 200, 10, &seed);
		f.async = (int) (round & 1);
		s = new_session(&f, (int) (round % 5));
		feed_random(s, &in, 48, &seed, random_peer);
		smtp_session_free(s);
		buf_reset(&f.checks);
	}
	buf_free(&in);
	buf_free(&f.checks);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_starttls),
		cmocka_unit_test(test_auth),
		cmocka_unit_test(test_auth_long_line),
		cmocka_unit_test(test_auth_async),
		cmocka_unit_test(test_auth_errors_count),
		cmocka_unit_test(test_auth_failure_counts),
		cmocka_unit_test(test_set_tls_misuse),
		cmocka_unit_test(test_random_input),
	};

	log_setup("test_smtp_auth", 0, LOG_LEVEL_ERROR);	/* expected warnings */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
