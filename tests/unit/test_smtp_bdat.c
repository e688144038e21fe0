/*
 * NAME
 *	test_smtp_bdat 1
 * SUMMARY
 *	unit tests: BDAT in the SMTP session (RFC 3030: chunks, their
 *	order among commands, size, bare line ends)
 * DESCRIPTION
 *	Scripted sessions as in test_smtp_session (test_smtp_script.h):
 *	each row is a client's input and the exact output wanted, fed in one
 *	call, one byte per call, in chunks of 7, and (test_bdat) also cut in
 *	two at every point, since a chunk's octets are counted across feeds.
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


/* run_scripts_cut - as run_scripts, and cut in two at every point */
static int run_scripts_cut(const struct script *cases, size_t n)
{
	char how[64];
	size_t i, cut, len;
	int fails = run_scripts(cases, n);

	for (i = 0; i < n; i++) {
		len = cases[i].len ? cases[i].len : strlen(cases[i].in);
		for (cut = 1; cut < len; cut++) {
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
  * BDAT (RFC 3030): chunks are raw octets counted by the command, never
  * commands and never dot-stuffed; refused chunks are still consumed.
  */
#define BDAT_SYNTAX "501 5.5.4 Syntax: BDAT chunk-size [LAST]\r\n"

static void test_bdat(void **state)
{
	static const struct script cases[] = {
		{.name = "single chunk LAST", IN(ENV_B "BDAT 18 LAST\r\nSubject: t\r\n\r\nhi\r\nQUIT\r\n"),
		 .want = ENV_B_R QUEUED BYE,
		 .closed = SMTP_CLOSE_QUIT,
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
		 .closed = SMTP_CLOSE_QUIT,
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
		 .closed = SMTP_CLOSE_QUIT,
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
	assert_int_equal(run_scripts(cases, sizeof(cases) / sizeof(cases[0])), 0);
	free(k1);
	free(k6);
	free(k998);
	free(k999);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bdat),
		cmocka_unit_test(test_bdat_size),
	};

	log_setup("test_smtp_bdat", 0, LOG_LEVEL_ERROR);	/* expected warnings */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
