/*
 * NAME
 *	test_smtp_limits 1
 * SUMMARY
 *	unit tests: what a client can cost an SMTP session (the error and
 *	junk limits, what each end of a message counts, bounded memory and
 *	output, random input)
 * DESCRIPTION
 *	Scripted sessions and event rows (test_smtp_script.h), fed in one
 *	call, one byte per call and in chunks of 7, and tables of the counts
 *	a session keeps; then loops that no table says better: 1001
 *	recipients (and the identities they cost: smtp_rcpt_id() is wrapped,
 *	the Makefile's test_smtp_limits_LDFLAGS), a client that never reads,
 *	random input under valgrind.
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

int __real_smtp_rcpt_id(const char *addr, char out[SMTP_RCPT_ID_MAX]);
static unsigned long rcpt_ids;		/* smtp_rcpt_id() calls */

/* __wrap_smtp_rcpt_id - count the recipient identities computed (ld's --wrap) */
int __wrap_smtp_rcpt_id(const char *addr, char out[SMTP_RCPT_ID_MAX])
{
	rcpt_ids++;
	return __real_smtp_rcpt_id(addr, out);
}

 /*
  * The error limits (Postfix's hard error and junk command limits), with
  * hard_errors 3 and junk_commands 2: the reply that makes the third error
  * is followed by the 421, and nothing more is read.
  */
#define TOO_MANY "421 4.7.0 mx.test Error: too many errors\r\n"
#define NOOP_R	"250 2.0.0 Ok\r\n"
#define LONG_LINE "x" X64 X64 X64 X64 X64 X64 X64 X64 X64 "\r\n"
#define CHUNKS5	"BDAT 2\r\nabBDAT 2\r\nabBDAT 2\r\nabBDAT 2\r\nabBDAT 2\r\nab"	/* > hard_errors */
#define ERRORS	.closed = SMTP_CLOSE_ERRORS, .rest = 6	/* the NOOP after the 421 */

static void test_error_limits(void **state)
{
	static const struct script cases[] = {
		{.name = "two errors", .limits = 1, IN("X\r\nX\r\n"),
		 .want = GREET UNKNOWN UNKNOWN},
		{.name = "three errors", .limits = 1, IN("X\r\nX\r\nX\r\nNOOP\r\n"),
		 .want = GREET UNKNOWN UNKNOWN UNKNOWN TOO_MANY, ERRORS},
		{.name = "junk within the limit", .limits = 1, IN("NOOP\r\nRSET\r\nX\r\nX\r\n"),
		 .want = GREET NOOP_R "250 2.0.0 Ok\r\n" UNKNOWN UNKNOWN},
		{.name = "junk past the limit", .limits = 1,
		 IN("NOOP\r\nNOOP\r\nVRFY x\r\nHELP\r\nNOOP\r\nNOOP\r\n"),
		 .want = GREET NOOP_R NOOP_R
		 "252 2.5.0 Cannot VRFY user, but will accept message and attempt delivery\r\n"
		 "214 2.0.0 Commands: EHLO HELO MAIL RCPT DATA BDAT RSET NOOP QUIT VRFY HELP "
		 "STARTTLS AUTH\r\n" NOOP_R TOO_MANY, ERRORS},
		{.name = "a message taken clears both", .limits = 1,
		 IN("X\r\nX\r\nNOOP\r\nNOOP\r\n" ENVELOPE "m\r\n.\r\nX\r\nX\r\nNOOP\r\nNOOP\r\n"),
		 .want = GREET UNKNOWN UNKNOWN NOOP_R NOOP_R EHLO_R OK_MAIL OK_RCPT GO QUEUED
		 UNKNOWN UNKNOWN NOOP_R NOOP_R, .calls = 1},
		{.name = "a message refused counts", .limits = 1,
		 IN("X\r\nX\r\n" ENVELOPE "m\r\n.\r\nNOOP\r\n"),
		 .hook_reply = "451 4.3.0 Error: try again",
		 .want = GREET UNKNOWN UNKNOWN EHLO_R OK_MAIL OK_RCPT GO
		 "451 4.3.0 Error: try again\r\n" TOO_MANY, ERRORS, .calls = 1},
		{.name = "lines too long count", .limits = 1,
		 IN(LONG_LINE LONG_LINE LONG_LINE "NOOP\r\n"),
		 .want = GREET TOOLONG TOOLONG TOOLONG TOO_MANY, ERRORS},
		{.name = "errors of any command", .limits = 1,
		 IN("MAIL FROM:<a\r\nRCPT TO:<a@b.c>\r\nDATA\r\nQUIT\r\n"),
		 .want = GREET "501 5.1.7 Bad sender address syntax\r\n" NEED_MAIL NEED_RCPT TOO_MANY,
		 ERRORS},
		{.name = "a message too big counts (DATA)", .limits = 1,
		 IN("X\r\nX\r\n" ENVELOPE K1024 "\r\n.\r\nNOOP\r\n"),
		 .want = GREET UNKNOWN UNKNOWN EHLO_R OK_MAIL OK_RCPT GO TOOBIG TOO_MANY, ERRORS},
		{.name = "a message too big counts (BDAT)", .limits = 1,
		 IN("X\r\nX\r\n" ENV_B "BDAT 1024 LAST\r\n" K1024 "NOOP\r\n"),
		 .want = GREET UNKNOWN UNKNOWN EHLO_R OK_MAIL OK_RCPT TOOBIG TOO_MANY, ERRORS},
		{.name = "chunks after one too big: one error", .limits = 1,
		 IN("X\r\n" ENV_B "BDAT 1024\r\n" K1024 CHUNKS5 "BDAT 2 LAST\r\ncdNOOP\r\n"),
		 .want = GREET UNKNOWN EHLO_R OK_MAIL OK_RCPT
		 TOOBIG TOOBIG TOOBIG TOOBIG TOOBIG TOOBIG TOOBIG NOOP_R},
	};

	(void) state;
	assert_int_equal(run_scripts(cases, sizeof(cases) / sizeof(cases[0])), 0);
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
	struct smtp_session *s;
	struct fake f;
	int bad = 0;

	memset(&f, 0, sizeof(f));
	f.reply = r->hook_reply;
	s = new_session(&f, r->bare_lf_reject, 0, 0);
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
  * Memory: a client that never sends LF costs at most one line; a huge
  * chunk is streamed, bounded by message_size; a refused chunk of any
  * announced size is consumed, never run.
  */
#define QUIT4	"QUIT\r\nQUIT\r\nQUIT\r\nQUIT\r\n"

static void test_line_memory(void **state)
{
	static const struct events rows[] = {
		{.name = "a line that never ends",
		 .steps = {
			 {.ev = EV_JUNK_LINE, .out = GREET},
			 {FEED("\r\nNOOP\r\n"), .out = GREET TOOLONG OK},
		 }},
	};

	(void) state;
	assert_int_equal(run_event_rows(rows, sizeof(rows) / sizeof(rows[0])), 0);
}

static void test_bdat_memory(void **state)
{
	static const struct events rows[] = {
		{.name = "a MiB in one chunk",
		 .steps = {
			 {FEED(ENV_B "BDAT 1048576 LAST\r\n"), .in_data = 1, .out = ENV_B_R},
			 {.ev = EV_JUNK_CHUNK, .out = ENV_B_R TOOBIG},
			 {FEED("NOOP\r\n"), .out = ENV_B_R TOOBIG OK},
		 }},
		{.name = "the largest size there is, refused: everything after is chunk",
		 .steps = {
			 {FEED("BDAT 18446744073709551615\r\n"), .in_data = 1,
			  .out = GREET NEED_RCPT},
			 {FEED(QUIT4 QUIT4 QUIT4 QUIT4), .in_data = 1, .out = GREET NEED_RCPT},
		 }},
	};

	(void) state;
	assert_int_equal(run_event_rows(rows, sizeof(rows) / sizeof(rows[0])), 0);
}

 /*
  * A limit of 0 is none (the configuration never gives one): 30 errors
  * and 30 NOOPs close nothing, and a recipient past any count is taken.
  * Each RCPT computes one identity, never one per recipient held (the
  * repeat check ran on the thread that serves every session: N recipients
  * cost N²/2), and a repeat in another case is still seen, the first
  * RCPT's NOTIFY and ORCPT kept (idemrelay.conf(5)).
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
	rcpt_ids = 0;
	for (i = 0; i < 1001; i++) {
		char line[64];

		snprintf(line, sizeof(line), "RCPT TO:<r%d@y.z>\r\n", i);
		buf_reset(smtp_session_out(s));
		smtp_session_feed(s, line, strlen(line));
		if (strcmp(smtp_session_out(s)->data, OK_RCPT) != 0)
			fail_msg("recipient %d: got %s, want %s", i, smtp_session_out(s)->data, OK_RCPT);
	}
	buf_reset(smtp_session_out(s));
	smtp_session_feed(s, S("RCPT TO:<r7@Y.z> NOTIFY=NEVER ORCPT=rfc822;o@y.z\r\n"));
	assert_string_equal(smtp_session_out(s)->data, OK_RCPT);
	assert_int_equal(s->tx->rcpts[7].notify, 0);	/* the first RCPT's DSN parameters */
	assert_null(s->tx->rcpts[7].orcpt);
	if (rcpt_ids != 1002 || s->tx->n_rcpts != 1001)
		fail_msg("1002 RCPTs, one a repeat: got %lu identities, %zu recipients, want 1002, 1001",
			 rcpt_ids, s->tx->n_rcpts);
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
		s = new_session(&f, (int) (round & 1), 0, 0);
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
		cmocka_unit_test(test_error_limits),
		cmocka_unit_test(test_message_end_counts),
		cmocka_unit_test(test_zero_limits),
		cmocka_unit_test(test_line_memory),
		cmocka_unit_test(test_bdat_memory),
		cmocka_unit_test(test_out_max),
		cmocka_unit_test(test_random_input),
	};

	log_setup("test_smtp_limits", 0, LOG_LEVEL_ERROR);	/* expected warnings */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
