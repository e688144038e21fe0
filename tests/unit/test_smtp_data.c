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
 *	smtp_data_finish() after the last octet, as at BDAT LAST. The lines
 *	over 998 octets and the NUL octets are counted alike at every cut;
 *	smtp_data_fold() breaks lines as Postfix's SMTP client does.
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
	size_t long_lines;
	int nul;
};

/* feed_split - feed in chunks of at most step octets (0: all at once) */
static void feed_split(const struct data_case *c, int raw, size_t first, size_t step,
		       struct result *r)
{
	struct smtp_data d;
	size_t i = 0, n, got;

	smtp_data_init(&d, c->limit, raw);
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
	r->long_lines = d.long_lines;
	r->nul = d.nul;
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

/* add_line - n copies of c, then CRLF (or nothing: crlf 0) */
static void add_line(struct buf *b, char c, size_t n, int crlf)
{
	size_t i;

	for (i = 0; i < n; i++)
		buf_append(b, &c, 1);
	if (crlf)
		buf_append(b, "\r\n", 2);
}

 /*
  * Lines over 998 octets are counted as stored: a stuffed dot is not an
  * octet of the line, a bare CR or LF ends one, and BDAT's last line,
  * closed by finish, counts too. A NUL anywhere is noted. Each row is
  * fed whole, byte by byte, and cut near its start, its end, and every
  * 97 octets between.
  */
static void test_line_counts(void **state)
{
	enum { DATA, RAW_ };
	struct {
		const char *name;
		int raw;
		struct buf in;
		size_t long_lines;
		int nul;
	} rows[10];
	struct data_case c;
	struct result r;
	size_t i, n = 0, cut;
	int fails = 0;

	(void) state;
	memset(rows, 0, sizeof(rows));
#define ROW(nm, rw, ll, nl) (rows[n].name = (nm), rows[n].raw = (rw), \
			     rows[n].long_lines = (ll), rows[n].nul = (nl), &rows[n++].in)
	add_line(ROW("998 octets", DATA, 0, 0), 'a', 998, 1);
	add_line(ROW("999 octets", DATA, 1, 0), 'a', 999, 1);
	add_line(ROW("two long, one not", DATA, 2, 0), 'a', 1500, 1);
	add_line(&rows[n - 1].in, 'b', 10, 1);
	add_line(&rows[n - 1].in, 'c', 2999, 1);
	add_line(ROW("a stuffed dot is not counted", DATA, 0, 0), '.', 999, 1);
	add_line(ROW("a dot line of 999 after unstuffing", DATA, 1, 0), '.', 1000, 1);
	add_line(ROW("a bare LF ends a line", DATA, 0, 0), 'x', 10, 0);
	buf_append(&rows[n - 1].in, "\n", 1);
	add_line(&rows[n - 1].in, 'a', 995, 1);
	buf_append(ROW("NUL", DATA, 0, 1), "a\r\n\0.\r\n", 7);
	add_line(ROW("raw 999 octets", RAW_, 1, 0), 'a', 999, 1);
	add_line(ROW("raw unterminated last line", RAW_, 1, 0), 'z', 1100, 0);
	buf_append(ROW("raw NUL", RAW_, 0, 1), "\0", 1);
#undef ROW
	for (i = 0; i < n; i++) {
		if (!rows[i].raw)
			buf_append(&rows[i].in, ".\r\n", 3);
		memset(&c, 0, sizeof(c));
		c.name = rows[i].name;
		c.in = rows[i].in.data;
		c.len = rows[i].in.len;
		for (cut = 0; cut < c.len; cut += cut < 8 || cut + 8 > c.len ? 1 : 97) {
			feed_split(&c, rows[i].raw, cut, cut == 1, &r);
			if (r.long_lines != rows[i].long_lines || r.nul != rows[i].nul || !r.done) {
				print_error("%s (cut at %zu): got long_lines=%zu nul=%d done=%d, "
					    "want %zu %d 1\n", c.name, cut, r.long_lines, r.nul,
					    r.done, rows[i].long_lines, rows[i].nul);
				fails++;
			}
			buf_free(&r.out);
		}
		buf_free(&rows[i].in);
	}
	assert_int_equal(fails, 0);
}

 /*
  * Folding: each line over max octets broken with CRLF SPACE, after max
  * octets and then every max - 1, so no line is longer than max; other
  * lines untouched; the count is of the lines folded. (max 4 here.)
  */
static void test_fold(void **state)
{
	static const struct {
		const char *name, *in, *want;
		size_t folded;
	} rows[] = {
		{"empty", "", "", 0},
		{"short lines", "ab\r\nabcd\r\n\r\n", "ab\r\nabcd\r\n\r\n", 0},
		{"one over", "abcde\r\n", "abcd\r\n e\r\n", 1},
		{"continuations of max - 1", "abcdefghijk\r\n", "abcd\r\n efg\r\n hij\r\n k\r\n", 1},
		{"exactly max + max - 1", "abcdefg\r\n", "abcd\r\n efg\r\n", 1},
		{"two of three", "abcdef\r\nxy\r\n123456\r\n",
		 "abcd\r\n ef\r\nxy\r\n1234\r\n 56\r\n", 2},
		{"a CR inside is an octet", "ab\rcdef\r\n", "ab\rc\r\n def\r\n", 1},
		{"an unterminated tail is left", "abcdefgh", "abcdefgh", 0},
	};
	struct buf out = BUF_INIT;
	size_t i, n;
	int fails = 0;

	(void) state;
	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		buf_reset(&out);
		n = smtp_data_fold(&out, rows[i].in, strlen(rows[i].in), 4);
		if (n != rows[i].folded || out.len != strlen(rows[i].want)
		    || memcmp(out.data ? out.data : "", rows[i].want, out.len) != 0) {
			print_error("%s: got %zu \"%s\", want %zu \"%s\"\n", rows[i].name, n,
				    esc(out.data, out.len), rows[i].folded,
				    esc(rows[i].want, strlen(rows[i].want)));
			fails++;
		}
	}
	buf_free(&out);
	assert_int_equal(fails, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_smuggling),
		cmocka_unit_test(test_end_and_unstuffing),
		cmocka_unit_test(test_size_limit),
		cmocka_unit_test(test_long_line),
		cmocka_unit_test(test_raw),
		cmocka_unit_test(test_line_counts),
		cmocka_unit_test(test_fold),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
