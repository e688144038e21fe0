/*
 * NAME
 *	test_smtp_events 1
 * SUMMARY
 *	unit tests: what happens to an SMTP session between feeds (the
 *	message hook answering later, timeouts, shutdown, output written)
 * DESCRIPTION
 *	Event rows (test_smtp_script.h): each row is a list of events, input
 *	fed or fed again, the hook's late answer, a timeout, a shutdown,
 *	output written, and after each one the state wanted: octets left
 *	unread, the output not yet written, waiting, in the message, why
 *	closed, the hook's calls. Every input is fed in one call, one byte
 *	per call and in chunks of 7; all must give the same states.
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

#define ASK_LATER "250 2.0.0 Ok: queued as LATER"

 /*
  * The message hook answers later: feed stops after the message and
  * consumes nothing until smtp_session_reply(); a reply nobody asked for
  * changes nothing.
  */
static void test_wait_resume(void **state)
{
	static const struct events rows[] = {
		{.name = "DATA waits for the hook", .async = 1,
		 .steps = {
			 {FEED(ENVELOPE "hello\r\n.\r\nNOOP\r\nQUIT\r\n"), .left = 12,
			  .waiting = 1, .calls = 1, .out = ENVELOPE_R},
			 {.ev = EV_REST, .left = 12, .waiting = 1, .calls = 1, .out = ENVELOPE_R},
			 {.ev = EV_REPLY, .in = ASK_LATER, .calls = 1, .out = ENVELOPE_R LATER},
			 {.ev = EV_REST, .left = 0, .closed = SMTP_CLOSE_QUIT, .calls = 1,
			  .out = ENVELOPE_R LATER OK BYE},
			 {.ev = EV_REPLY, .in = "250 2.0.0 Ok", .closed = SMTP_CLOSE_QUIT, .calls = 1,
			  .out = ENVELOPE_R LATER OK BYE},
		 },
		 MSG("hello\r\n")},
	};

	(void) state;
	assert_int_equal(run_event_rows(rows, sizeof(rows) / sizeof(rows[0])), 0);
}

 /*
  * After BDAT LAST the engine waits for the hook like after DATA, also
  * for BDAT 0 LAST, whose chunk has no octets to wait for. A client
  * stalled inside a chunk times out: 421, nothing is handed on, the
  * rest of the chunk is not read.
  */
static void test_bdat_wait(void **state)
{
	static const struct events rows[] = {
		{.name = "BDAT LAST waits for the hook", .async = 1,
		 .steps = {
			 {FEED(ENV_B "BDAT 3\r\nabcBDAT 2 LAST\r\ndeNOOP\r\n"), .left = 6,
			  .waiting = 1, .calls = 1, .out = ENV_B_R GOT(3)},
			 {.ev = EV_REST, .left = 6, .waiting = 1, .calls = 1},
			 {.ev = EV_REPLY, .in = ASK_LATER, .calls = 1},
			 {.ev = EV_REST, .left = 0, .calls = 1, .out = ENV_B_R GOT(3) LATER OK},
		 },
		 MSG("abcde\r\n")},
		{.name = "BDAT 0 LAST waits for the hook", .async = 1,
		 .steps = {
			 {FEED(ENV_B "BDAT 3\r\nabcBDAT 0 LAST\r\nNOOP\r\n"), .left = 6,
			  .waiting = 1, .calls = 1, .out = ENV_B_R GOT(3)},
			 {.ev = EV_REST, .left = 6, .waiting = 1, .calls = 1},
			 {.ev = EV_REPLY, .in = ASK_LATER, .calls = 1},
			 {.ev = EV_REST, .left = 0, .calls = 1, .out = ENV_B_R GOT(3) LATER OK},
		 },
		 MSG("abc\r\n")},
		{.name = "stalled inside a chunk", .async = 1,
		 .steps = {
			 {FEED(ENV_B "BDAT 10 LAST\r\nabc"), .in_data = 1, .out = ENV_B_R},
			 {.ev = EV_TIMEOUT, .closed = SMTP_CLOSE_TIMEOUT, .out = ENV_B_R TIMEOUT},
			 {FEED("defghij"), .left = 7, .closed = SMTP_CLOSE_TIMEOUT},
		 }},
	};

	(void) state;
	assert_int_equal(run_event_rows(rows, sizeof(rows) / sizeof(rows[0])), 0);
}

 /*
  * The caller writes (consumes) output as it goes; the HELO/EHLO name.
  */
static void test_out_consume(void **state)
{
	static const struct events rows[] = {
		{.name = "output written as it goes",
		 .steps = {
			 {.ev = EV_WRITTEN, .len = sizeof(GREET) - 1, .out = ""},
			 {FEED("NOOP\r\n"), .out = OK},
			 {.ev = EV_WRITTEN, .len = 4, .out = "2.0.0 Ok\r\n"},
			 {FEED("RSET\r\n"), .out = "2.0.0 Ok\r\n" OK, .helo = ""},
			 {FEED("EHLO client.example\r\n"), .out = "2.0.0 Ok\r\n" OK EHLO_R,
			  .helo = "client.example"},
		 }},
	};

	(void) state;
	assert_int_equal(run_event_rows(rows, sizeof(rows) / sizeof(rows[0])), 0);
}

 /*
  * Timeouts and shutdown: 421, closing, nothing more consumed; a second
  * timeout or a shutdown after it adds nothing.
  */
static void test_timeout(void **state)
{
	static const struct events rows[] = {
		{.name = "idle in the command phase",
		 .steps = {
			 {.ev = EV_TIMEOUT, .closed = SMTP_CLOSE_TIMEOUT, .out = GREET TIMEOUT},
			 {FEED("NOOP\r\n"), .left = 6, .closed = SMTP_CLOSE_TIMEOUT},
			 {.ev = EV_TIMEOUT, .closed = SMTP_CLOSE_TIMEOUT, .out = GREET TIMEOUT},
			 {.ev = EV_SHUTDOWN, .closed = SMTP_CLOSE_TIMEOUT, .out = GREET TIMEOUT},
		 }},
		{.name = "stalled in DATA: the message is dropped, never handed on",
		 .steps = {
			 {FEED(ENVELOPE "partial"), .in_data = 1, .out = ENVELOPE_R},
			 {.ev = EV_TIMEOUT, .closed = SMTP_CLOSE_TIMEOUT, .out = ENVELOPE_R TIMEOUT},
			 {FEED("\r\n.\r\n"), .left = 5, .closed = SMTP_CLOSE_TIMEOUT},
		 }},
		{.name = "shutdown",
		 .steps = {
			 {FEED("MAIL FROM:<a@b.c>\r\n"), .out = GREET OK_MAIL},
			 {.ev = EV_SHUTDOWN, .closed = SMTP_CLOSE_SHUTDOWN, .out = GREET OK_MAIL SHUTDOWN},
		 }},
	};

	(void) state;
	assert_int_equal(run_event_rows(rows, sizeof(rows) / sizeof(rows[0])), 0);
}

 /*
  * Shutdown while the hook holds the message: its reply goes first.
  * Freeing a session whose hook never answered is clean too (valgrind).
  */
#define HELD	ENVELOPE "x\r\n.\r\nNOOP\r\n"

static void test_shutdown_while_waiting(void **state)
{
	static const struct events rows[] = {
		{.name = "shutdown while waiting", .async = 1,
		 .steps = {
			 {FEED(HELD), .left = 6, .waiting = 1, .calls = 1, .out = ENVELOPE_R},
			 {.ev = EV_SHUTDOWN, .waiting = 1, .calls = 1, .out = ENVELOPE_R},
			 {.ev = EV_REPLY, .in = "250 2.0.0 Ok: queued as Q1", .closed = SMTP_CLOSE_SHUTDOWN,
			  .calls = 1, .out = ENVELOPE_R "250 2.0.0 Ok: queued as Q1\r\n" SHUTDOWN},
			 {FEED("NOOP\r\n"), .left = 6, .closed = SMTP_CLOSE_SHUTDOWN, .calls = 1},
		 }},
		{.name = "freed while waiting", .async = 1,
		 .steps = {
			 {FEED(HELD), .left = 6, .waiting = 1, .calls = 1, .out = ENVELOPE_R},
		 }},
	};

	(void) state;
	assert_int_equal(run_event_rows(rows, sizeof(rows) / sizeof(rows[0])), 0);
	smtp_session_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wait_resume),
		cmocka_unit_test(test_bdat_wait),
		cmocka_unit_test(test_out_consume),
		cmocka_unit_test(test_timeout),
		cmocka_unit_test(test_shutdown_while_waiting),
	};

	log_setup("test_smtp_events", 0, LOG_LEVEL_ERROR);	/* expected warnings */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
