/*
 * NAME
 *	test_smtp_data 1
 * SUMMARY
 *	unit tests: the DATA reader (end of data, smuggling, dot-stuffing),
 *	and its raw mode for BDAT
 * DESCRIPTION
 *	Every row is fed three ways: whole, one byte per call, and cut in
 *	two at every position. Each way must give the same verdict: ended or
 *	not, octets left unconsumed after the terminator's LF, the exact
 *	stored bytes, bare_eol and too_big. Raw rows are finished with
 *	smtp_data_finish() after the last octet, as at BDAT LAST.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../../smtp/smtp_data.h"
#include "test_util.h"



struct data_case {
	const char *name;
	const char *in;
	size_t len;
	uint64_t limit;
	int done;			/* terminator seen */
	size_t rest;			/* when done: octets left after the LF */
	const char *want;		/* stored bytes ("" once too big) */
	size_t want_len;
	int bare_eol;
	int too_big;
};

struct result {
	int done;
	size_t consumed;
	struct buf out;
	int bare_eol;
	int too_big;
};

/* feed_split - feed in chunks of at most step octets (0: all at once) */
static void feed_split(const struct data_case *c, int raw, size_t first, size_t step,
		       struct result *r)
{
	struct smtp_data d;
	size_t i = 0, n, got;

	if (raw)
		smtp_data_init_raw(&d, c->limit);
	else
		smtp_data_init(&d, c->limit);
	memset(r, 0, sizeof(*r));
	while (i < c->len && !smtp_data_done(&d)) {
		n = c->len - i;
		if (i == 0 && first && first < n)
			n = first;
		else if (i > 0 && step && step < n)
			n = step;
		got = smtp_data_feed(&d, &r->out, c->in + i, n);
		i += got;
		if (got < n && !smtp_data_done(&d))
			break;			/* short without the end: a bug */
		if (raw && smtp_data_done(&d))
			break;			/* raw data never ends by itself */
	}
	if (raw && !smtp_data_done(&d))
		smtp_data_finish(&d, &r->out);
	/* once done, the reader takes nothing more */
	if (smtp_data_done(&d) && smtp_data_feed(&d, &r->out, "x", 1) != 0)
		i = (size_t) -1;
	r->done = smtp_data_done(&d);
	r->consumed = i;
	r->bare_eol = d.bare_eol;
	r->too_big = d.too_big;
}

/* check - compare one way of feeding with the row */
static int check(const struct data_case *c, const char *how, struct result *r)
{
	size_t want_consumed = c->done ? c->len - c->rest : c->len;
	int bad = 0;

	if (r->done != c->done || r->consumed != want_consumed
	    || r->bare_eol != c->bare_eol || r->too_big != c->too_big)
		bad = 1;
	if (c->want && (r->out.len != c->want_len
			|| memcmp(r->out.data ? r->out.data : "", c->want, c->want_len) != 0))
		bad = 1;
	if (bad)
		print_error("%s (%s): got done=%d consumed=%zu bare=%d big=%d \"%s\", "
			    "want done=%d consumed=%zu bare=%d big=%d \"%s\"\n",
			    c->name, how, r->done, r->consumed, r->bare_eol, r->too_big,
			    esc(r->out.data, r->out.len), c->done, want_consumed,
			    c->bare_eol, c->too_big,
			    c->want ? esc(c->want, c->want_len) : "(unchecked)");
	buf_free(&r->out);
	return bad;
}

/* run_cases - every row, fed whole, byte by byte, and cut at every point */
static int run_cases(const struct data_case *cases, size_t n, int raw)
{
	struct result r;
	char how[64];
	size_t i, cut;
	int fails = 0;

	for (i = 0; i < n; i++) {
		feed_split(cases + i, raw, 0, 0, &r);
		fails += check(cases + i, "whole", &r);
		feed_split(cases + i, raw, 1, 1, &r);
		fails += check(cases + i, "byte by byte", &r);
		for (cut = 1; cut < cases[i].len && cut < 300; cut++) {
			feed_split(cases + i, raw, cut, 0, &r);
			snprintf(how, sizeof(how), "cut at %zu", cut);
			if (check(cases + i, how, &r)) {
				fails++;
				break;
			}
		}
	}
	return fails;
}

#define END	"\r\n.\r\n"

 /*
  * SMTP smuggling: none of these ends the message. Each vector is put
  * between "a" and "b", then followed by a real end, so the row checks
  * both that the vector did not end it and what was stored.
  */
static void test_smuggling(void **state)
{
	static const struct data_case cases[] = {
		/* without the real end: not done, everything consumed */
		{"\\n.\\n open", S("a\n.\nb"), 0, 0, 0, S("a\r\n.\r\nb"), 1, 0},
		{"\\r.\\r open", S("a\r.\rb"), 0, 0, 0, S("a\r\n.\r\nb"), 1, 0},
		{"\\n.\\r\\n open", S("a\n.\r\nb"), 0, 0, 0, S("a\r\n.\r\nb"), 1, 0},
		{"\\r\\n.\\n open", S("a\r\n.\nb"), 0, 0, 0, S("a\r\n\r\nb"), 1, 0},
		{"\\r\\n.\\r open", S("a\r\n.\rb"), 0, 0, 0, S("a\r\n\r\nb"), 1, 0},
		{"\\r.\\r\\n open", S("a\r.\r\nb"), 0, 0, 0, S("a\r\n.\r\nb"), 1, 0},
		{"\\r\\n.\\r\\r\\n open", S("a\r\n.\r\r\nb"), 0, 0, 0, S("a\r\n\r\n\r\nb"), 1, 0},
		{"\\r\\n\\0.\\r\\n open", S("a\r\n\0.\r\nb"), 0, 0, 0, S("a\r\n\0.\r\nb"), 0, 0},
		/* with the real end after the vector */
		{"\\n.\\n", S("a\n.\nb" END "MAIL"), 0, 1, 4, S("a\r\n.\r\nb\r\n"), 1, 0},
		{"\\r.\\r", S("a\r.\rb" END "MAIL"), 0, 1, 4, S("a\r\n.\r\nb\r\n"), 1, 0},
		{"\\n.\\r\\n", S("a\n.\r\nb" END "MAIL"), 0, 1, 4, S("a\r\n.\r\nb\r\n"), 1, 0},
		{"\\r\\n.\\n", S("a\r\n.\nb" END "MAIL"), 0, 1, 4, S("a\r\n\r\nb\r\n"), 1, 0},
		{"\\r\\n.\\r", S("a\r\n.\rb" END "MAIL"), 0, 1, 4, S("a\r\n\r\nb\r\n"), 1, 0},
		{"\\r.\\r\\n", S("a\r.\r\nb" END "MAIL"), 0, 1, 4, S("a\r\n.\r\nb\r\n"), 1, 0},
		{"\\r\\n.\\r\\r\\n", S("a\r\n.\r\r\nb" END "MAIL"), 0, 1, 4, S("a\r\n\r\n\r\nb\r\n"), 1, 0},
		{"\\r\\n\\0.\\r\\n", S("a\r\n\0.\r\nb" END "MAIL"), 0, 1, 4, S("a\r\n\0.\r\nb\r\n"), 0, 0},
		/* the vectors right after the 354 (which counts as a CRLF) */
		{"start .\\n", S(".\nb"), 0, 0, 0, S("\r\nb"), 1, 0},
		{"start .\\r", S(".\rb"), 0, 0, 0, S("\r\nb"), 1, 0},
		{"start .\\r\\r\\n", S(".\r\r\nb"), 0, 0, 0, S("\r\n\r\nb"), 1, 0},
		{"start \\0.\\r\\n", S("\0.\r\nb"), 0, 0, 0, S("\0.\r\nb"), 0, 0},
		{"start \\n.\\n", S("\n.\n"), 0, 0, 0, S("\r\n.\r\n"), 1, 0},
		{"start \\r.\\r", S("\r.\r"), 0, 0, 0, S("\r\n."), 1, 0},
		/* pending states at the end of input are not emitted yet */
		{"pending CR", S("a\r"), 0, 0, 0, S("a"), 0, 0},
		{"pending dot", S("a\r\n."), 0, 0, 0, S("a\r\n"), 0, 0},
		{"pending dot CR", S("a\r\n.\r"), 0, 0, 0, S("a\r\n"), 0, 0},
		/* a whole smuggled transaction stays inside the message */
		{"smuggled tx", S("x\n.\nMAIL FROM:<e@x>\r\nRCPT TO:<v@x>\r\nDATA\r\nevil\r\n" END),
		 0, 1, 0, S("x\r\n.\r\nMAIL FROM:<e@x>\r\nRCPT TO:<v@x>\r\nDATA\r\nevil\r\n\r\n"), 1, 0},
	};

	(void) state;
	assert_int_equal(run_cases(cases, sizeof(cases) / sizeof(cases[0]), 0), 0);
}

 /*
  * The real end, dot-unstuffing, line endings.
  */
static void test_end_and_unstuffing(void **state)
{
	static const struct data_case cases[] = {
		{"empty message", S(".\r\n"), 0, 1, 0, S(""), 0, 0},
		{"empty message + next", S(".\r\nQUIT\r\n"), 0, 1, 6, S(""), 0, 0},
		{"simple", S("Subject: hi\r\n\r\nbody" END), 0, 1, 0, S("Subject: hi\r\n\r\nbody\r\n"), 0, 0},
		{"pipelined after", S("x" END "QUIT\r\n"), 0, 1, 6, S("x\r\n"), 0, 0},
		{"empty line then end", S("\r\n.\r\n"), 0, 1, 0, S("\r\n"), 0, 0},
		{"CR CR LF then end", S("a\r\r\n.\r\n"), 0, 1, 0, S("a\r\n\r\n"), 1, 0},
		{"LF CR LF then end", S("a\n\r\n.\r\n"), 0, 1, 0, S("a\r\n\r\n"), 1, 0},
		{"unstuff ..", S("..\r\n.\r\n"), 0, 1, 0, S(".\r\n"), 0, 0},
		{"unstuff ..x", S("..x\r\n.\r\n"), 0, 1, 0, S(".x\r\n"), 0, 0},
		{"unstuff .x", S(".x\r\n.\r\n"), 0, 1, 0, S("x\r\n"), 0, 0},
		{"unstuff ...", S("a\r\n...\r\n.\r\n"), 0, 1, 0, S("a\r\n..\r\n"), 0, 0},
		{"dot mid-line kept", S("a.b\r\n.a\r\n" END), 0, 1, 0, S("a.b\r\na\r\n\r\n"), 0, 0},
		{"dot after bare LF kept", S("a\n.b" END), 0, 1, 0, S("a\r\n.b\r\n"), 1, 0},
		{"bare LF", S("a\nb" END), 0, 1, 0, S("a\r\nb\r\n"), 1, 0},
		{"bare CR", S("a\rb" END), 0, 1, 0, S("a\r\nb\r\n"), 1, 0},
		{"bare CR CR", S("a\r\rb" END), 0, 1, 0, S("a\r\n\r\nb\r\n"), 1, 0},
		{"NUL kept", S("a\0b" END), 0, 1, 0, S("a\0b\r\n"), 0, 0},
		{"8-bit kept", S("\xc3\xa9\xff" END), 0, 1, 0, S("\xc3\xa9\xff\r\n"), 0, 0},
		{"dot space", S(". \r\n.\r\n"), 0, 1, 0, S(" \r\n"), 0, 0},
	};

	(void) state;
	assert_int_equal(run_cases(cases, sizeof(cases) / sizeof(cases[0]), 0), 0);
}

 /*
  * Size limit: store up to the limit, keep scanning for the end.
  */
static void test_size_limit(void **state)
{
	static const struct data_case cases[] = {
		{"exactly the limit", S("01234567" END), 10, 1, 0, S("01234567\r\n"), 0, 0},
		{"one over the limit", S("012345678" END), 10, 1, 0, S(""), 0, 1},
		{"far over, end found", S("0123456789abcdefghij\r\n.x\r\nmore\r\n" END "QUIT\r\n"),
		 10, 1, 6, S(""), 0, 1},
		{"over, smuggled end ignored", S("0123456789abc\n.\nxyz" END), 10, 1, 0, S(""), 1, 1},
		{"over, no end yet", S("0123456789abcdef"), 10, 0, 0, S(""), 0, 1},
		{"no limit", S("0123456789abcdef" END), 0, 1, 0, S("0123456789abcdef\r\n"), 0, 0},
	};

	(void) state;
	assert_int_equal(run_cases(cases, sizeof(cases) / sizeof(cases[0]), 0), 0);
}

 /*
  * Long lines: accepted unchanged, no line buffer.
  */
static void test_long_line(void **state)
{
	size_t n = 100000;
	char *in = malloc(n + 8);
	struct data_case c;
	struct result r;
	int fails = 0;

	(void) state;
	memset(in, 'x', n);
	memcpy(in + n, "\r\n.\r\n", 5);
	memset(&c, 0, sizeof(c));
	c.name = "100000-octet line";
	c.in = in;
	c.len = n + 5;
	c.done = 1;
	c.want = in;
	c.want_len = n + 2;
	feed_split(&c, 0, 0, 0, &r);
	fails += check(&c, "whole", &r);
	feed_split(&c, 0, 1, 1, &r);
	fails += check(&c, "byte by byte", &r);
	feed_split(&c, 0, 999, 1001, &r);
	fails += check(&c, "chunks of 1001", &r);
	free(in);
	assert_int_equal(fails, 0);
}

#define RAW	1, 0			/* done (finished), nothing left */

 /*
  * Raw mode (BDAT chunks): no end of data, no unstuffing, the same line
  * endings; finish closes the last line. Cutting the input anywhere is
  * what a chunk boundary does.
  */
static void test_raw(void **state)
{
	static const struct data_case cases[] = {
		{"raw empty", S(""), 0, RAW, S(""), 0, 0},
		{"raw terminator is data", S("a" END "MAIL FROM:<x@y>\r\n"), 0, RAW,
		 S("a\r\n.\r\nMAIL FROM:<x@y>\r\n"), 0, 0},
		{"raw dots kept", S(".\r\n..x\r\n.y\r\n"), 0, RAW, S(".\r\n..x\r\n.y\r\n"), 0, 0},
		{"raw final CRLF appended", S("abc"), 0, RAW, S("abc\r\n"), 0, 0},
		{"raw final CRLF kept", S("abc\r\n"), 0, RAW, S("abc\r\n"), 0, 0},
		{"raw bare LF", S("a\nb"), 0, RAW, S("a\r\nb\r\n"), 1, 0},
		{"raw bare LF at the end", S("a\n"), 0, RAW, S("a\r\n"), 1, 0},
		{"raw CR at the end", S("a\r"), 0, RAW, S("a\r\n"), 1, 0},
		{"raw CR CR at the end", S("a\r\r"), 0, RAW, S("a\r\n\r\n"), 1, 0},
		{"raw smuggling vectors", S("a\n.\nb\r.\rc\r\n.\nd"), 0, RAW,
		 S("a\r\n.\r\nb\r\n.\r\nc\r\n.\r\nd\r\n"), 1, 0},
		{"raw NUL kept", S("\0.\r\n"), 0, RAW, S("\0.\r\n"), 0, 0},
		{"raw exactly the limit", S("01234567"), 10, RAW, S("01234567\r\n"), 0, 0},
		{"raw final CRLF over the limit", S("012345678"), 10, RAW, S(""), 0, 1},
		{"raw over the limit", S("0123456789abc\r\n"), 10, RAW, S(""), 0, 1},
	};

	(void) state;
	assert_int_equal(run_cases(cases, sizeof(cases) / sizeof(cases[0]), 1), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_smuggling),
		cmocka_unit_test(test_end_and_unstuffing),
		cmocka_unit_test(test_size_limit),
		cmocka_unit_test(test_long_line),
		cmocka_unit_test(test_raw),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
