/*
 * test_dsn - RFC 3464 bounce messages (deliver/dsn.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../../deliver/dsn.h"
#include "../../smtp/smtp.h"

static const char original[] =
	"Received: from x\r\n\tby relay.test\r\n"
	"From: a@x.test\r\nSubject: hello\r\n\r\n"
	"body line\r\n--not-a-boundary\r\n";

static const struct dsn_rcpt rcpts[] = {
	{ "bad@y.test", "rfc822;B+2Bad@y.test", "5.1.1", "550 5.1.1 no such user", "mx.y.test" },
	{ "late@y.test", NULL, "4.4.7", "delivery time expired; last error: 450 4.2.0 later",
	  NULL },
};

/* report - a report over the original with the given RET */
static struct dsn_report report(int ret)
{
	struct dsn_report r;

	memset(&r, 0, sizeof(r));
	r.hostname = "relay.test";
	r.qid = "01ABCDEFGHIJ";
	r.dsn_qid = "01ABCDEFGHIK";
	r.sender = "a@x.test";
	r.envid = "env-1";
	r.ret = ret;
	r.arrival = 1700000000LL * 1000000;
	r.now = 1700000100LL * 1000000;
	r.rcpts = rcpts;
	r.n_rcpts = 2;
	r.msg = original;
	r.msg_len = strlen(original);
	return r;
}

/* has - does the text contain the string? */
static void has(const struct buf *b, const char *want)
{
	if (strstr(b->data, want) == NULL)
		fail_msg("missing \"%s\" in:\n%s", want, b->data);
}

/* hasnt - the opposite */
static void hasnt(const struct buf *b, const char *bad)
{
	if (strstr(b->data, bad) != NULL)
		fail_msg("unexpected \"%s\" in:\n%s", bad, b->data);
}

/* lines_crlf - every line ends with CRLF, no bare CR or LF */
static void lines_crlf(const struct buf *b)
{
	size_t i;

	for (i = 0; i < b->len; i++) {
		if (b->data[i] == '\n' && (i == 0 || b->data[i - 1] != '\r'))
			fail_msg("bare LF at %zu", i);
		if (b->data[i] == '\r' && (i + 1 >= b->len || b->data[i + 1] != '\n'))
			fail_msg("bare CR at %zu", i);
	}
	assert_true(b->len >= 2 && b->data[b->len - 2] == '\r' && b->data[b->len - 1] == '\n');
}

static void test_full(void **state)
{
	struct dsn_report r = report(SMTP_RET_FULL);
	struct buf b = BUF_INIT;

	(void) state;
	assert_int_equal(dsn_build(&r, &b), 0);
	lines_crlf(&b);
	has(&b, "From: MAILER-DAEMON@relay.test (Mail Delivery System)\r\n");
	has(&b, "To: <a@x.test>\r\n");
	has(&b, "Subject: Undelivered Mail Returned to Sender\r\n");
	has(&b, "Date: Tue, 14 Nov 2023 22:15:00 +0000\r\n");
	has(&b, "Message-ID: <01ABCDEFGHIK@relay.test>\r\n");
	has(&b, "Auto-Submitted: auto-replied\r\n");
	has(&b, "Content-Type: multipart/report; report-type=delivery-status;\r\n"
	    "\tboundary=\"01ABCDEFGHIJ.1700000100/relay.test\"\r\n");
	has(&b, "\r\n\r\n--01ABCDEFGHIJ.1700000100/relay.test\r\n"
	    "Content-Description: Notification");
	has(&b, "<bad@y.test>: host mx.y.test said: 550 5.1.1 no such user\r\n");
	has(&b, "Content-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; relay.test\r\n"
	    "X-Idemrelay-Queue-ID: 01ABCDEFGHIJ\r\nOriginal-Envelope-Id: env-1\r\n");
	has(&b, "Arrival-Date: Tue, 14 Nov 2023 22:13:20 +0000\r\n");
	has(&b, "\r\nFinal-Recipient: rfc822; bad@y.test\r\n"
	    "Original-Recipient: rfc822; B+ad@y.test\r\n"
	    "Action: failed\r\nStatus: 5.1.1\r\nRemote-MTA: dns; mx.y.test\r\n"
	    "Diagnostic-Code: smtp; 550 5.1.1 no such user\r\n");
	has(&b, "\r\nFinal-Recipient: rfc822; late@y.test\r\nAction: failed\r\nStatus: 4.4.7\r\n"
	    "Diagnostic-Code: smtp; delivery time expired; last error: 450 4.2.0 later\r\n");
	/* the original, whole and unchanged, then the closing delimiter */
	has(&b, "Content-Type: message/rfc822\r\n\r\n");
	has(&b, original);
	has(&b, "--not-a-boundary\r\n\r\n--01ABCDEFGHIJ.1700000100/relay.test--\r\n");
	hasnt(&b, "Content-Transfer-Encoding");
	buf_free(&b);
}

/* test_global - RFC 6533: an SMTPUTF8 message's report keeps UTF-8, typed utf-8 */
static void test_global(void **state)
{
	static const struct dsn_rcpt u8rcpts[] = {
		{ "\xc3\xa9l\xc3\xa8ve@\xc3\xa9" "cole.test", NULL, "5.6.7",
		  "SMTPUTF8 is required, but was not offered by host mx.test", NULL },
		{ "ascii@y.test", NULL, "5.1.1", "550 5.1.1 \xc3\xa9 \xc0\xaf \xc2\x85 x", NULL },
	};
	struct dsn_report r = report(SMTP_RET_FULL);
	struct buf b = BUF_INIT;

	(void) state;
	r.utf8 = 1;
	r.sender = "\xe7\x94\xa8\xe6\x88\xb7@\xe4\xbe\x8b\xe5\xad\x90.\xe6\xb5\x8b\xe8\xaf\x95";
	r.rcpts = u8rcpts;
	assert_int_equal(dsn_build(&r, &b), 1);	/* 8-bit: goes with SMTPUTF8 */
	lines_crlf(&b);
	has(&b, "To: <\xe7\x94\xa8\xe6\x88\xb7@\xe4\xbe\x8b\xe5\xad\x90.\xe6\xb5\x8b\xe8\xaf\x95>\r\n");
	has(&b, "report-type=global-delivery-status;");
	has(&b, "Content-Type: text/plain; charset=utf-8\r\n");
	has(&b, "Content-Type: message/global-delivery-status\r\n");
	has(&b, "Final-Recipient: utf-8; \xc3\xa9l\xc3\xa8ve@\xc3\xa9" "cole.test\r\n");
	has(&b, "Final-Recipient: rfc822; ascii@y.test\r\n");
	has(&b, "Status: 5.6.7\r\n");
	/* valid UTF-8 kept; an overlong '/' and a C1 control made harmless */
	has(&b, "Diagnostic-Code: smtp; 550 5.1.1 \xc3\xa9 ?? ?? x\r\n");
	has(&b, "Content-Type: message/global\r\nContent-Transfer-Encoding: 8bit\r\n");
	buf_free(&b);
	r = report(SMTP_RET_HDRS);
	r.utf8 = 1;
	dsn_build(&r, &b);
	has(&b, "Content-Type: message/global-headers\r\n");
	buf_free(&b);
}

static void test_headers_only(void **state)
{
	struct dsn_report r = report(SMTP_RET_HDRS);
	struct buf b = BUF_INIT;

	(void) state;
	dsn_build(&r, &b);
	lines_crlf(&b);
	has(&b, "Content-Type: text/rfc822-headers\r\n\r\nReceived: from x\r\n\tby relay.test\r\n"
	    "From: a@x.test\r\nSubject: hello\r\n\r\n--01ABCDEFGHIJ");
	hasnt(&b, "body line");
	buf_free(&b);
}

/* big_message - DSN_FULL_LIMIT + 100 bytes: a Subject, a blank line, a body of x */
static char *big_message(void)
{
	char *big = malloc(DSN_FULL_LIMIT + 100);

	assert_non_null(big);
	memcpy(big, "Subject: big\r\n\r\n", 16);
	memset(big + 16, 'x', DSN_FULL_LIMIT + 100 - 18);
	memcpy(big + DSN_FULL_LIMIT + 100 - 2, "\r\n", 2);
	return big;
}

static void test_default_ret(void **state)
{
	struct dsn_report r = report(SMTP_RET_NONE);
	struct buf b = BUF_INIT;
	char *big;

	(void) state;
	/* small: whole message */
	dsn_build(&r, &b);
	has(&b, "body line");
	buf_free(&b);

	/* large: headers only */
	big = big_message();
	r.msg = big;
	r.msg_len = DSN_FULL_LIMIT + 100;
	dsn_build(&r, &b);
	has(&b, "text/rfc822-headers\r\n\r\nSubject: big\r\n\r\n--");
	hasnt(&b, "xxxx");
	buf_free(&b);
	free(big);
}

/*
 * test_headers_said - the text part says when only the headers come back
 * though the whole was asked for (RET=FULL, or by default): the whole
 * finding no room (hdrs_only) or a large message; not for RET=HDRS
 */
static void test_headers_said(void **state)
{
	static const char cut[] = "The headers of your\r\nmessage are attached below;"
	    " its body could not be returned.\r\n";
	struct dsn_report r = report(SMTP_RET_FULL);
	struct buf b = BUF_INIT;
	char *big;

	(void) state;
	r.hdrs_only = 1;
	dsn_build(&r, &b);
	lines_crlf(&b);
	has(&b, "be delivered to one or more recipients. The headers of your\r\n");
	has(&b, cut);
	hasnt(&b, "It's attached below.");
	has(&b, "Content-Type: text/rfc822-headers\r\n\r\nReceived: from x\r\n");
	hasnt(&b, "body line");
	buf_free(&b);

	/* by default, a large message */
	big = big_message();
	r = report(SMTP_RET_NONE);
	r.msg = big;
	r.msg_len = DSN_FULL_LIMIT + 100;
	dsn_build(&r, &b);
	has(&b, cut);
	hasnt(&b, "It's attached below.");
	buf_free(&b);
	free(big);

	/* the headers as asked, or the whole: attached as they were asked */
	r = report(SMTP_RET_HDRS);
	dsn_build(&r, &b);
	has(&b, "recipients. It's attached below.\r\n");
	hasnt(&b, "body could not be returned");
	buf_free(&b);
	r = report(SMTP_RET_NONE);
	dsn_build(&r, &b);
	has(&b, "recipients. It's attached below.\r\n");
	hasnt(&b, "body could not be returned");
	buf_free(&b);
}

static void test_eight_bit(void **state)
{
	static const char msg8[] = "Subject: caf\xc3\xa9\r\n\r\nna\xc3\xafve\r\n";
	struct dsn_report r = report(SMTP_RET_FULL);
	struct buf b = BUF_INIT;

	(void) state;
	r.msg = msg8;
	r.msg_len = strlen(msg8);
	assert_int_equal(dsn_build(&r, &b), 1);
	has(&b, "MIME-Version: 1.0\r\nContent-Type: multipart/report");
	has(&b, "\tboundary=\"01ABCDEFGHIJ.1700000100/relay.test\"\r\n"
	    "Content-Transfer-Encoding: 8bit\r\n");
	has(&b, "Content-Type: message/rfc822\r\nContent-Transfer-Encoding: 8bit\r\n\r\n");
	buf_free(&b);

	/* headers only, 8-bit only in the body: 7-bit notice */
	r.ret = SMTP_RET_HDRS;
	r.msg = "Subject: x\r\n\r\n\xff\r\n";
	r.msg_len = strlen(r.msg);
	assert_int_equal(dsn_build(&r, &b), 0);
	buf_free(&b);
}

static void test_injection(void **state)
{
	static const struct dsn_rcpt evil[] = {
		{ "x@y\r\nBcc: victim@z", NULL, "5.0.0", "550 hi\r\nX-Evil: 1", NULL },
	};
	struct dsn_report r = report(SMTP_RET_FULL);
	struct buf b = BUF_INIT;

	(void) state;
	r.sender = "a@b\r\nBcc: victim@z";
	r.envid = "e\r\nX-Evil: 2";
	r.rcpts = evil;
	r.n_rcpts = 1;
	dsn_build(&r, &b);
	lines_crlf(&b);
	hasnt(&b, "\r\nBcc:");
	hasnt(&b, "\r\nX-Evil:");
	has(&b, "To: <a@b??Bcc: victim@z>\r\n");
	buf_free(&b);
}

static void test_boundary_collision(void **state)
{
	static const char tricky[] =
		"Subject: x\r\n\r\n--01ABCDEFGHIJ.1700000100/relay.test--\r\n";
	struct dsn_report r = report(SMTP_RET_FULL);
	struct buf b = BUF_INIT;

	(void) state;
	r.msg = tricky;
	r.msg_len = strlen(tricky);
	dsn_build(&r, &b);
	has(&b, "boundary=\"01ABCDEFGHIJ.1700000100/relay.test=_\"");
	has(&b, "\r\n--01ABCDEFGHIJ.1700000100/relay.test=_--\r\n");
	buf_free(&b);
}

/* the dates are clock_date()'s: the day in two digits, as in the Received header */
static void test_date(void **state)
{
	struct dsn_report r = report(SMTP_RET_HDRS);
	struct buf b = BUF_INIT;

	(void) state;
	r.arrival = 1796428799LL * 1000000;
	r.now = 1796480243LL * 1000000;
	dsn_build(&r, &b);
	has(&b, "\r\nDate: Sat, 05 Dec 2026 14:17:23 +0000\r\n");
	has(&b, "\r\nArrival-Date: Fri, 04 Dec 2026 23:59:59 +0000\r\n");
	buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_full),
		cmocka_unit_test(test_global),
		cmocka_unit_test(test_headers_only),
		cmocka_unit_test(test_default_ret),
		cmocka_unit_test(test_headers_said),
		cmocka_unit_test(test_eight_bit),
		cmocka_unit_test(test_injection),
		cmocka_unit_test(test_boundary_collision),
		cmocka_unit_test(test_date),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
