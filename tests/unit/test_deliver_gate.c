/*
 * NAME
 *	test_deliver_gate 1
 * SUMMARY
 *	unit tests: the bridge's reply gate (deliver/esmtp/deliver_gate.c)
 * DESCRIPTION
 *	Each row is a connection: what libesmtp wrote (through the filter,
 *	which counts the replies owed), then the server's bytes, fed whole,
 *	one byte per call and cut in two everywhere: what libesmtp gets must
 *	be the same each way, only whole replies it can read, only owed
 *	ones. Then the server goes: what the gate answers in its stead, and
 *	whether libesmtp must be hung up on (a final dot's reply owed, or a
 *	content after a 354).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../../deliver/esmtp/deliver_filter.h"
#include "../../deliver/esmtp/deliver_gate.h"
#include "test_util.h"

#define N(a)	(sizeof(a) / sizeof((a)[0]))
#define OUT_MAX	16384
#define WHY	"lost"
#define A421(v)	"421 4.4.2 " DELIVER_GATE_MARK " " WHY ", no reply to " v "\r\n"
#define EHLO_MAIL "EHLO relay\r\nMAIL FROM:<a@b>\r\n"
#define BURST	EHLO_MAIL "RCPT TO:<c@d>\r\nRCPT TO:<e@f>\r\nDATA\r\n"

struct gate_case {
	const char *name;
	const char *up;			/* what libesmtp wrote */
	const char *down;		/* what the server sent */
	const char *want;		/* what libesmtp gets of it */
	int gone;			/* the gate refused the server's bytes */
	const char *answer;		/* once gone: the gate's answers (not when gone
					 * already: test_broken_answers) */
	int hangup;
};

static const struct gate_case cases[] = {
	{ "greeting", "", "220 sink ESMTP\r\n", "220 sink ESMTP\r\n", 0, "", 0 },
	{ "EHLO reply whole", "EHLO relay\r\n", "220 hi\r\n250-sink\r\n250 PIPELINING\r\n",
	  "220 hi\r\n250-sink\r\n250 PIPELINING\r\n", 0, "", 0 },
	{ "reset after the MAIL reply, the burst unanswered", BURST,
	  "220 hi\r\n250 ok\r\n250 ok\r\n", "220 hi\r\n250 ok\r\n250 ok\r\n", 0,
	  A421("RCPT") A421("RCPT") A421("DATA"), 0 },
	{ "reset after one RCPT reply", BURST, "220 hi\r\n250 ok\r\n250 ok\r\n451 no\r\n",
	  "220 hi\r\n250 ok\r\n250 ok\r\n451 no\r\n", 0, A421("RCPT") A421("DATA"), 0 },
	{ "an unfinished line is no reply", "EHLO relay\r\n", "220 hi\r\n250 o",
	  "220 hi\r\n", 0, A421("EHLO"), 0 },
	{ "a reply is held until its last line", "", "220-one\r\n",
	  "", 0, A421("the greeting"), 0 },
	{ "multi-line whole", "", "220-one\r\n220 two\r\n", "220-one\r\n220 two\r\n", 0, "", 0 },
	{ "another code in the reply", "", "220-one\r\n250 two\r\n", "", 1,
	  A421("the greeting"), 0 },
	{ "bare code", "", "220\r\n", "", 1, NULL, 0 },
	{ "not a code", "EHLO relay\r\n", "220 hi\r\nhello\r\n", "220 hi\r\n", 1, NULL, 0 },
	{ "1xx", "", "199 what\r\n", "", 1, NULL, 0 },
	{ "a reply nobody asked for", "", "220 hi\r\n250 extra\r\n", "220 hi\r\n", 1, NULL, 0 },
	{ "enhanced codes differ", EHLO_MAIL,
	  "220 hi\r\n250-sink\r\n250 ENHANCEDSTATUSCODES\r\n250-2.1.0 a\r\n250 2.1.5 b\r\n",
	  "220 hi\r\n250-sink\r\n250 ENHANCEDSTATUSCODES\r\n", 1, NULL, 0 },
	{ "enhanced codes alike", EHLO_MAIL,
	  "220 hi\r\n250-sink\r\n250 ENHANCEDSTATUSCODES\r\n250-2.1.0 a\r\n250 2.1.0 b\r\n",
	  "220 hi\r\n250-sink\r\n250 ENHANCEDSTATUSCODES\r\n250-2.1.0 a\r\n250 2.1.0 b\r\n",
	  0, "", 0 },
	{ "a continuation without one", EHLO_MAIL,
	  "220 hi\r\n250-sink\r\n250 ENHANCEDSTATUSCODES\r\n250-2.1.0 a\r\n250 b\r\n",
	  "220 hi\r\n250-sink\r\n250 ENHANCEDSTATUSCODES\r\n", 1, NULL, 0 },
	{ "no ENHANCEDSTATUSCODES: not checked", EHLO_MAIL,
	  "220 hi\r\n250 sink\r\n250-2.1.0 a\r\n250 b\r\n",
	  "220 hi\r\n250 sink\r\n250-2.1.0 a\r\n250 b\r\n", 0, "", 0 },
	{ "EHLO's own lines are not checked", "EHLO relay\r\n",
	  "220 hi\r\n250-1.2.3 sink\r\n250 ENHANCEDSTATUSCODES\r\n",
	  "220 hi\r\n250-1.2.3 sink\r\n250 ENHANCEDSTATUSCODES\r\n", 0, "", 0 },
	{ "QUIT gets 221", "EHLO relay\r\nQUIT\r\n", "220 hi\r\n250 ok\r\n",
	  "220 hi\r\n250 ok\r\n", 0,
	  "221 2.0.0 " DELIVER_GATE_MARK " " WHY ", no reply to QUIT\r\n", 0 },
	{ "a final dot's reply is never made up", BURST ".\r\n",
	  "220 hi\r\n250 ok\r\n250 ok\r\n250 ok\r\n250 ok\r\n354 go\r\n",
	  "220 hi\r\n250 ok\r\n250 ok\r\n250 ok\r\n250 ok\r\n354 go\r\n", 0, "", 1 },
	{ "a content after the 354: hang up", BURST,
	  "220 hi\r\n250 ok\r\n250 ok\r\n250 ok\r\n250 ok\r\n354 go\r\n",
	  "220 hi\r\n250 ok\r\n250 ok\r\n250 ok\r\n250 ok\r\n354 go\r\n", 0, "", 1 },
	{ "334 to AUTH is no content", "EHLO relay\r\nAUTH LOGIN\r\n",
	  "220 hi\r\n250 ok\r\n334 VXNlcm5hbWU6\r\n", "220 hi\r\n250 ok\r\n334 VXNlcm5hbWU6\r\n",
	  0, "", 0 },
};

/* gate_check - one row, the server's bytes fed at first then in steps (0: the rest) */
static void gate_check(const void *row, size_t first, size_t step)
{
	const struct gate_case *c = row;
	struct deliver_filter f;
	struct deliver_gate g;
	char up[OUT_MAX], out[OUT_MAX];
	size_t len = strlen(c->down), i = 0, n = 0, k;

	deliver_filter_init(&f);
	deliver_gate_init(&g);
	memcpy(up, c->up, strlen(c->up));
	assert_true(deliver_filter_up(&f, up, strlen(c->up)) >= 0);
	while (i < len) {
		k = i == 0 && first ? first : step ? step : len - i;
		k = k > len - i ? len - i : k;
		n += deliver_gate_down(&g, &f, c->down + i, k, out + n);
		i += k;
	}
	if (n != strlen(c->want) || memcmp(out, c->want, n) != 0)
		fail_msg("%s (first %zu, step %zu): got \"%s\", want \"%s\"", c->name, first, step,
			 esc(out, n), esc(c->want, strlen(c->want)));
	if (g.gone != c->gone)
		fail_msg("%s (first %zu, step %zu): gone %d, want %d (%s)", c->name, first, step,
			 g.gone, c->gone, g.why);
	deliver_gate_gone(&g, WHY);
	n = deliver_gate_answer(&g, &f, out, sizeof(out));
	if (c->gone) {		/* answered with the gate's own why: test_broken_answers */
		assert_non_null(strstr(g.why, "broke the protocol"));
		return;
	}
	if (n != strlen(c->answer) || memcmp(out, c->answer, n) != 0)
		fail_msg("%s (first %zu, step %zu): answered \"%s\", want \"%s\"", c->name, first,
			 step, esc(out, n), esc(c->answer, strlen(c->answer)));
	if (g.hangup != c->hangup)
		fail_msg("%s: hangup %d, want %d", c->name, g.hangup, c->hangup);
	assert_int_equal(deliver_gate_answer(&g, &f, out, sizeof(out)), 0);	/* once */
}

static void test_gate(void **state)
{
	size_t i, cut, len;

	(void) state;
	for (i = 0; i < N(cases); i++) {
		len = strlen(cases[i].down);
		gate_check(&cases[i], 0, 0);
		gate_check(&cases[i], 0, 1);
		for (cut = 1; cut < len; cut++)
			gate_check(&cases[i], cut, 0);
	}
}

/* the server broke the protocol: the gate answers what is owed, with its own why */
static void test_broken_answers(void **state)
{
	struct deliver_filter f;
	struct deliver_gate g;
	char up[] = BURST, out[OUT_MAX];
	const char down[] = "220 hi\r\n250 ok\r\n250 ok\r\n250-x\r\n251 y\r\n";
	size_t n;

	(void) state;
	deliver_filter_init(&f);
	deliver_gate_init(&g);
	assert_true(deliver_filter_up(&f, up, strlen(up)) >= 0);
	n = deliver_gate_down(&g, &f, down, strlen(down), out);
	assert_int_equal(n, strlen("220 hi\r\n250 ok\r\n250 ok\r\n"));
	assert_true(g.gone);
	n = deliver_gate_answer(&g, &f, out, sizeof(out));
	out[n] = 0;
	if (strstr(out, "no reply to RCPT\r\n421 4.4.2 " DELIVER_GATE_MARK) == NULL
	    || strstr(out, "no reply to DATA\r\n") == NULL || strstr(out, "another code") == NULL)
		fail_msg("answered \"%s\"", esc(out, n));
}

/* the longest line passes; one octet more breaks the protocol */
static void test_line_max(void **state)
{
	struct deliver_filter f;
	struct deliver_gate g;
	static char line[DELIVER_GATE_LINE_MAX + 2], out[OUT_MAX];
	size_t n, len;

	(void) state;
	for (len = DELIVER_GATE_LINE_MAX; len <= DELIVER_GATE_LINE_MAX + 1; len++) {
		memset(line, 'x', len);
		memcpy(line, "220 ", 4);
		memcpy(line + len - 2, "\r\n", 2);
		deliver_filter_init(&f);
		deliver_gate_init(&g);
		n = deliver_gate_down(&g, &f, line, len, out);
		assert_int_equal(n, len == DELIVER_GATE_LINE_MAX ? len : 0);
		assert_int_equal(g.gone, len != DELIVER_GATE_LINE_MAX);
	}
}

/* a NUL inside a line breaks the protocol (libESMTP's strchr() would stop there) */
static void test_nul(void **state)
{
	struct deliver_filter f;
	struct deliver_gate g;
	const char down[] = "220 h\0i\r\n";
	char out[OUT_MAX];

	(void) state;
	deliver_filter_init(&f);
	deliver_gate_init(&g);
	assert_int_equal(deliver_gate_down(&g, &f, down, sizeof(down) - 1, out), 0);
	assert_true(g.gone);
}

/* a status text the gate made up, as libesmtp keeps it with and without enhanced codes */
static void test_ours(void **state)
{
	static const struct { const char *text; int want; } rows[] = {
		{ DELIVER_GATE_MARK " lost, no reply to RCPT\r\n", 1 },
		{ "4.4.2 " DELIVER_GATE_MARK " lost\r\n", 1 },
		{ "ok " DELIVER_GATE_MARK, 0 },
		{ "2.1.5 ok\r\n", 0 },
		{ "", 0 },
	};
	size_t i;

	(void) state;
	for (i = 0; i < N(rows); i++)
		if (deliver_gate_ours(rows[i].text) != rows[i].want)
			fail_msg("\"%s\": %d, want %d", rows[i].text, !rows[i].want, rows[i].want);
	assert_int_equal(deliver_gate_ours(NULL), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gate),
		cmocka_unit_test(test_broken_answers),
		cmocka_unit_test(test_line_max),
		cmocka_unit_test(test_nul),
		cmocka_unit_test(test_ours),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
