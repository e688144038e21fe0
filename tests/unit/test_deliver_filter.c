/*
 * NAME
 *	test_deliver_filter 1
 * SUMMARY
 *	unit tests: the bridge's stream filter (deliver/esmtp/deliver_filter.c)
 * DESCRIPTION
 *	Every row is fed whole, one byte per call, and cut in two at every
 *	position; each way must give the same output and the same verdict
 *	(refused or not). The cut is armed by libesmtp's rewind alone
 *	(deliver_filter_rewind()), never by a reply; the server's replies go
 *	through the gate, as in the bridge. Then whole conversations: two
 *	messages on one connection, replies split anywhere.
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
#define BLOCK	DELIVER_FILTER_SENTINEL "Date: Mon, 1 Jan 2024 00:00:00 +0000\r\n" \
		"From: s@example.org\r\nMessage-Id: <1.2@host>\r\n\r\n"
#define OUT_MAX	8192

/* piece - how many bytes to feed at offset i: first, then step (0: all the rest) */
static size_t piece(size_t i, size_t len, size_t first, size_t step)
{
	size_t k = i == 0 && first ? first : step ? step : len - i;

	return k > len - i ? len - i : k;
}

/* each_way - check a row fed whole, byte by byte, and cut in two everywhere */
static void each_way(const void *c, size_t len, void (*check)(const void *, size_t, size_t))
{
	size_t cut;

	check(c, 0, 0);
	check(c, 0, 1);
	for (cut = 1; cut < len; cut++)
		check(c, cut, 0);
}

/* ---------------------------------------------------------------- server to libesmtp */

/*
 * the server's replies reach the filter only as whole lines of an EHLO
 * reply, through the gate (deliver_gate.h), as in the bridge: each row is
 * what libesmtp wrote, then the server's bytes, after a greeting, and what
 * libesmtp gets of them; no reply arms the cut
 */
struct down_case {
	const char *name;
	const char *up;			/* libesmtp's commands: the replies owed */
	const char *in;			/* the server's, after "220 hi" */
	const char *want;		/* what libesmtp gets of them */
};

#define EHLO	"EHLO relay\r\n"

static const struct down_case down_cases[] = {
	{ "greeting", "", "", "" },
	{ "354 does not arm", "DATA\r\n", "354 go ahead\r\n", "354 go ahead\r\n" },
	{ "354 alone: no text, refused (the gate)", "DATA\r\n", "354\r\n", "" },
	{ "pipelined replies, 354 last", "MAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\nDATA\r\n",
	  "250 2.1.0 ok\r\n250 2.1.5 ok\r\n354 go\r\n",
	  "250 2.1.0 ok\r\n250 2.1.5 ok\r\n354 go\r\n" },
	{ "multi-line 354", "DATA\r\n", "354-one\r\n354 two\r\n", "354-one\r\n354 two\r\n" },
	{ "another 3xx", "DATA\r\n", "350 whatever\r\n", "350 whatever\r\n" },
	{ "334 is AUTH", "AUTH LOGIN\r\n", "334 VXNlcm5hbWU6\r\n", "334 VXNlcm5hbWU6\r\n" },
	{ "a 3xx line in a 250 reply: refused (the gate)", EHLO, "250-sink\r\n354-x\r\n250 ok\r\n",
	  "" },
	{ "354 inside a line", "NOOP\r\nNOOP\r\n", "250 354 ok\r\n250-x 354\r\n250 y\r\n",
	  "250 354 ok\r\n250-x 354\r\n250 y\r\n" },
	{ "554 to DATA", "DATA\r\n", "554 5.5.1 no valid recipients\r\n",
	  "554 5.5.1 no valid recipients\r\n" },
	{ "EHLO with CHUNKING", EHLO,
	  "250-sink\r\n250-PIPELINING\r\n250-CHUNKING\r\n250-SIZE 1000\r\n250 8BITMIME\r\n",
	  "250-sink\r\n250-PIPELINING\r\n250-X-HIDDEN\r\n250-SIZE 1000\r\n250 8BITMIME\r\n" },
	{ "CHUNKING last, lower case", EHLO, "250-sink\r\n250 chunking\r\n",
	  "250-sink\r\n250 X-HIDDEN\r\n" },
	{ "CHUNKING with a parameter", EHLO, "250-CHUNKING x\r\n250 ok\r\n",
	  "250-X-HIDDEN x\r\n250 ok\r\n" },
	{ "CHUNKING, bare LF", EHLO, "250-CHUNKING\n250 ok\n", "250-X-HIDDEN\n250 ok\n" },
	{ "CHUNKINGS is another word", EHLO, "250-CHUNKINGS\r\n250 ok\r\n",
	  "250-CHUNKINGS\r\n250 ok\r\n" },
	{ "CHUNKING in text", EHLO, "250-sink CHUNKING\r\n250 CHUNK\r\n",
	  "250-sink CHUNKING\r\n250 CHUNK\r\n" },
	{ "CHUNKING outside an EHLO reply is text", "NOOP\r\n", "250 CHUNKING\r\n",
	  "250 CHUNKING\r\n" },
	{ "CHUNKING after blanks, as libESMTP reads it (cb_ehlo: skipblank)", EHLO,
	  "250-sink\r\n250-  CHUNKING\r\n250 \tchunking\r\n",
	  "250-sink\r\n250-  X-HIDDEN\r\n250 \tX-HIDDEN\r\n" },
	{ "CHUNKING ended by a special, as libESMTP reads it", EHLO, "250-CHUNKING;x\r\n250 ok\r\n",
	  "250-X-HIDDEN;x\r\n250 ok\r\n" },
	{ "CHUNKING=x is another word", EHLO, "250-CHUNKING=x\r\n250 ok\r\n",
	  "250-CHUNKING=x\r\n250 ok\r\n" },
	{ "AUTH: mechanisms but PLAIN and LOGIN blanked, as libESMTP reads them", EHLO,
	  "250-sink\r\n250-AUTH NTLM LOGIN\r\n250-auth  cram-md5\tplain GSSAPI\r\n"
	  "250 AUTH=CRAM-MD5 Login PLAINX\r\n",
	  "250-sink\r\n250-AUTH      LOGIN\r\n250-auth          \tplain       \r\n"
	  "250 AUTH=         Login       \r\n" },
	{ "AUTH: a special ends the list; AUTHX and text left alone", EHLO,
	  "250-AUTH NTLM;x\r\n250-AUTHX NTLM\r\n250 sink AUTH NTLM\r\n",
	  "250-AUTH     ;x\r\n250-AUTHX NTLM\r\n250 sink AUTH NTLM\r\n" },
	{ "BINARYMIME left alone", EHLO, "250-BINARYMIME\r\n250 ok\r\n",
	  "250-BINARYMIME\r\n250 ok\r\n" },
	{ "354 then a line that does not end", "DATA\r\nNOOP\r\n", "354 go\r\n25", "354 go\r\n" },
};

/* down_feed - the server's bytes through the gate: in at first, then in pieces of step */
static size_t down_feed(struct deliver_filter *f, struct deliver_gate *g, const char *in,
			size_t len, size_t first, size_t step, char *out)
{
	size_t i = 0, n = 0, k;

	while (i < len) {
		k = piece(i, len, first, step);
		n += deliver_gate_down(g, f, in + i, k, out + n);
		i += k;
	}
	return n;
}

/* ehlo_feed - libesmtp's EHLO and the greeting, then the server's EHLO reply, whole */
static void ehlo_feed(struct deliver_filter *f, struct deliver_gate *g, const char *reply)
{
	char buf[OUT_MAX];

	memcpy(buf, EHLO, strlen(EHLO));
	assert_true(deliver_filter_up(f, buf, strlen(EHLO)) >= 0);
	down_feed(f, g, "220 hi\r\n", 8, 0, 0, buf);
	down_feed(f, g, reply, strlen(reply), 0, 0, buf);
	assert_false(g->gone);
}

/* down_check - one row, one way of feeding it */
static void down_check(const void *row, size_t first, size_t step)
{
	const struct down_case *c = row;
	struct deliver_filter f;
	struct deliver_gate g;
	char buf[OUT_MAX], out[OUT_MAX];
	size_t n;

	deliver_filter_init(&f);
	deliver_gate_init(&g);
	memcpy(buf, c->up, strlen(c->up));
	assert_true(deliver_filter_up(&f, buf, strlen(c->up)) >= 0);
	assert_int_equal(down_feed(&f, &g, "220 hi\r\n", 8, 0, 0, out), 8);
	n = down_feed(&f, &g, c->in, strlen(c->in), first, step, out);
	if (n != strlen(c->want) || memcmp(out, c->want, n) != 0)
		fail_msg("%s (first %zu, step %zu): got \"%s\", want \"%s\"", c->name, first,
			 step, esc(out, n), esc(c->want, strlen(c->want)));
	if (f.armed)
		fail_msg("%s (first %zu, step %zu): armed", c->name, first, step);
}

static void test_down(void **state)
{
	size_t i;

	(void) state;
	for (i = 0; i < N(down_cases); i++)
		each_way(&down_cases[i], strlen(down_cases[i].in), down_check);
}

/* ---------------------------------------------------------------- libesmtp to server */

struct up_case {
	const char *name;
	int rewound;			/* libesmtp rewound first */
	const char *in;
	const char *want;		/* NULL: refused */
};

static const struct up_case up_cases[] = {
	{ "not armed: commands pass", 0, "MAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\nDATA\r\n",
	  "MAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\nDATA\r\n" },
	{ "block with libesmtp's headers", 1,
	  BLOCK "Received: x\r\nTo: a\r\nTo: b\r\n\r\nbody\r\n.\r\n",
	  "Received: x\r\nTo: a\r\nTo: b\r\n\r\nbody\r\n.\r\n" },
	{ "bare block", 1, DELIVER_FILTER_SENTINEL "\r\nSubject: s\r\n\r\nb\r\n.\r\n",
	  "Subject: s\r\n\r\nb\r\n.\r\n" },
	{ "header-only message", 1, BLOCK "Subject: s\r\n.\r\n", "Subject: s\r\n.\r\n" },
	{ "message starting with an empty line", 1, BLOCK "\r\nbody\r\n.\r\n",
	  "\r\nbody\r\n.\r\n" },
	{ "stuffed dot after the block", 1, BLOCK "..x\r\n.\r\n", "..x\r\n.\r\n" },
	{ "then commands pass", 1, BLOCK "m\r\n.\r\nMAIL FROM:<a@b>\r\n",
	  "m\r\n.\r\nMAIL FROM:<a@b>\r\n" },
	{ "lone dot: no recipient took it", 0, ".\r\nQUIT\r\n", ".\r\nQUIT\r\n" },
	{ "a dot first after a rewind", 1, ".\r\nQUIT\r\n", NULL },
	{ "no block", 1, "Subject: s\r\n\r\nbody\r\n.\r\n", NULL },
	{ "another sentinel", 1, "X-Idemrelay-Cut: 2\r\n\r\nbody\r\n.\r\n", NULL },
	{ "sentinel without CRLF", 1, "X-Idemrelay-Cut: 1\n\r\n\r\nbody\r\n.\r\n", NULL },
	{ "a command like the sentinel", 0, "X-Idemrelay-Cu\r\nX-Idemrelay-Cut\r\n",
	  "X-Idemrelay-Cu\r\nX-Idemrelay-Cut\r\n" },
};

/* up_feed - libesmtp's bytes like down_feed's: the bytes forwarded, -1 once refused */
static ssize_t up_feed(struct deliver_filter *f, const char *in, size_t len, size_t first,
		       size_t step, char *out)
{
	size_t i = 0, n = 0, k;
	ssize_t got;

	while (i < len) {
		k = piece(i, len, first, step);
		memcpy(out + n, in + i, k);
		if ((got = deliver_filter_up(f, out + n, k)) < 0)
			return n == 0 ? -1 : (ssize_t) n;	/* n > 0: forwarded, then refused */
		n += (size_t) got;
		i += k;
	}
	return (ssize_t) n;
}

/* up_check - one row, one way of feeding it */
static void up_check(const void *row, size_t first, size_t step)
{
	const struct up_case *c = row;
	struct deliver_filter f;
	char out[OUT_MAX];
	ssize_t n;

	deliver_filter_init(&f);
	if (c->rewound)
		deliver_filter_rewind(&f);
	n = up_feed(&f, c->in, strlen(c->in), first, step, out);
	if (c->want == NULL) {
		if (n != -1 || f.why[0] == 0)
			fail_msg("%s (first %zu, step %zu): forwarded \"%s\", want refused",
				 c->name, first, step, n < 0 ? "" : esc(out, (size_t) n));
		assert_int_equal(deliver_filter_up(&f, out, 1), -1);	/* for good */
		return;
	}
	if (n < 0 || (size_t) n != strlen(c->want) || memcmp(out, c->want, (size_t) n) != 0)
		fail_msg("%s (first %zu, step %zu): got %s\"%s\", want \"%s\"", c->name, first,
			 step, n < 0 ? "refused: " : "", n < 0 ? f.why : esc(out, (size_t) n),
			 esc(c->want, strlen(c->want)));
	assert_int_equal(f.armed, 0);
}

static void test_up(void **state)
{
	size_t i;

	(void) state;
	for (i = 0; i < N(up_cases); i++)
		each_way(&up_cases[i], strlen(up_cases[i].in), up_check);
}

/* ---------------------------------------------------------------- SMTPUTF8 */

#define EHLO_U8	"250-sink\r\n250-PIPELINING\r\n250-SMTPUTF8\r\n250 8BITMIME\r\n"
#define EHLO_NO	"250-sink\r\n250-PIPELINING\r\n250 8BITMIME\r\n"
#define U8	"\xe7\x94\xa8\xe6\x88\xb7@\xe4\xbe\x8b\xe5\xad\x90.\xe6\xb5\x8b\xe8\xaf\x95"

struct utf8_case {
	const char *name;
	const char *ehlo;		/* the server's EHLO reply, fed first */
	const char *want_flags;		/* per message: '1' SMTPUTF8 wanted, '2'
					 * BODY=8BITMIME, '3' both */
	const char *in;			/* libesmtp's commands */
	const char *want;
};

static const struct utf8_case utf8_cases[] = {
	{ "offered, wanted", EHLO_U8, "1", "MAIL FROM:<" U8 "> SIZE=10\r\nRCPT TO:<" U8 ">\r\nDATA\r\n",
	  "MAIL FROM:<" U8 "> SIZE=10 SMTPUTF8\r\nRCPT TO:<" U8 ">\r\nDATA\r\n" },
	{ "offered, not wanted", EHLO_U8, "0", "MAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\n",
	  "MAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\n" },
	{ "not offered", EHLO_NO, "1", "MAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\n",
	  "MAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\n" },
	{ "the second message", EHLO_U8, "01", "MAIL FROM:<a@b>\r\nRSET\r\nMAIL FROM:<c@d>\r\n",
	  "MAIL FROM:<a@b>\r\nRSET\r\nMAIL FROM:<c@d> SMTPUTF8\r\n" },
	{ "lower case, bare LF", "250-sink\n250 smtputf8\n", "1", "MAIL FROM:<a@b>\n",
	  "MAIL FROM:<a@b> SMTPUTF8\n" },
	{ "SMTPUTF8X is another word", "250-SMTPUTF8X\r\n250 ok\r\n", "1", "MAIL FROM:<a@b>\r\n",
	  "MAIL FROM:<a@b>\r\n" },
	{ "MAIL FROM only at a line's start", EHLO_U8, "1",
	  "XMAIL FROM:<a@b>\r\nRCPT TO:<MAIL FROM:x@y>\r\n",
	  "XMAIL FROM:<a@b>\r\nRCPT TO:<MAIL FROM:x@y>\r\n" },
	{ "more messages than flags", EHLO_U8, "", "MAIL FROM:<a@b>\r\n", "MAIL FROM:<a@b>\r\n" },
	{ "8BITMIME offered, wanted", EHLO_NO, "2", "MAIL FROM:<a@b> SIZE=10\r\n",
	  "MAIL FROM:<a@b> SIZE=10 BODY=8BITMIME\r\n" },
	{ "both offered, both wanted", EHLO_U8, "3", "MAIL FROM:<a@b>\r\n",
	  "MAIL FROM:<a@b> BODY=8BITMIME SMTPUTF8\r\n" },
	{ "8BITMIME not offered", "250-sink\r\n250 SMTPUTF8\r\n", "3", "MAIL FROM:<a@b>\r\n",
	  "MAIL FROM:<a@b> SMTPUTF8\r\n" },
	{ "8BITMIME in lower case, last", "250-sink\r\n250 8bitmime\r\n", "2",
	  "MAIL FROM:<a@b>\r\n", "MAIL FROM:<a@b> BODY=8BITMIME\r\n" },
	{ "both after blanks", "250-sink\r\n250- 8BITMIME\r\n250 \t SMTPUTF8\r\n", "3",
	  "MAIL FROM:<a@b>\r\n", "MAIL FROM:<a@b> BODY=8BITMIME SMTPUTF8\r\n" },
};

/* utf8_check - one row, one way of feeding libesmtp's side */
static void utf8_check(const void *row, size_t first, size_t step)
{
	const struct utf8_case *c = row;
	unsigned char want[8];
	struct deliver_filter f;
	struct deliver_gate g;
	char out[OUT_MAX];
	size_t i, nf = strlen(c->want_flags);
	ssize_t n;

	for (i = 0; i < nf; i++)
		want[i] = (unsigned char) (c->want_flags[i] - '0');
	deliver_filter_init(&f);
	deliver_gate_init(&g);
	deliver_filter_mail_params(&f, want, nf);
	ehlo_feed(&f, &g, c->ehlo);
	n = up_feed(&f, c->in, strlen(c->in), first, step, out);
	if (n < 0 || (size_t) n != strlen(c->want) || memcmp(out, c->want, (size_t) n) != 0)
		fail_msg("%s (first %zu, step %zu): got %s\"%s\", want \"%s\"", c->name, first,
			 step, n < 0 ? "refused: " : "", n < 0 ? f.why : esc(out, (size_t) n),
			 esc(c->want, strlen(c->want)));
}

static void test_smtputf8(void **state)
{
	static const unsigned char both[2] = {1, 1};
	struct deliver_filter f;
	struct deliver_gate g;
	char out[OUT_MAX];
	size_t i;
	static const char two[] = "MAIL FROM:<a@b>\r\nRSET\r\nMAIL FROM:<c@d>\r\n";

	(void) state;
	for (i = 0; i < N(utf8_cases); i++)
		each_way(&utf8_cases[i], strlen(utf8_cases[i].in), utf8_check);
	/* two MAIL lines to mark in one write: more than the room there is */
	deliver_filter_init(&f);
	deliver_gate_init(&g);
	deliver_filter_mail_params(&f, both, 2);
	ehlo_feed(&f, &g, EHLO_U8);
	memcpy(out, two, sizeof(two) - 1);
	assert_int_equal(deliver_filter_up(&f, out, sizeof(two) - 1), -1);
	assert_true(f.why[0] != 0);
}

/* STARTTLS offered (deliver_bridge_starttls.c asks), read as any keyword */
static void test_offered_starttls(void **state)
{
	static const struct {
		const char *ehlo;
		int want;
	} rows[] = {
		{ "250-sink\r\n250-STARTTLS\r\n250 8BITMIME\r\n", DELIVER_FILTER_TLS | DELIVER_FILTER_8BIT },
		{ "250-sink\r\n250 \tstarttls\r\n", DELIVER_FILTER_TLS },
		{ "250-sink\r\n250-STARTTLSX\r\n250 X-STARTTLS\r\n", 0 },
		{ "250-sink STARTTLS\r\n250 8BITMIME\r\n", DELIVER_FILTER_8BIT },
	};
	struct deliver_filter f;
	struct deliver_gate g;
	size_t i;

	(void) state;
	for (i = 0; i < N(rows); i++) {
		deliver_filter_init(&f);
		deliver_gate_init(&g);
		ehlo_feed(&f, &g, rows[i].ehlo);
		if (atomic_load(&f.offered) != rows[i].want)
			fail_msg("row %zu: offered got %d, want %d", i, atomic_load(&f.offered),
				 rows[i].want);
	}
}

/*
 * a block with no rewind before it: refused by its sentinel's 16th octet
 * however it is split, so neither the block nor a final dot gets through
 */
static void test_sentinel_without_rewind(void **state)
{
	static const char in[] = "DATA\r\n" BLOCK "x\r\n.\r\n";
	size_t len = sizeof(in) - 1, first, step;
	struct deliver_filter f;
	char out[OUT_MAX];
	ssize_t n;

	(void) state;
	for (first = 0; first < len; first++) {
		for (step = 0; step <= 1; step++) {
			deliver_filter_init(&f);
			n = up_feed(&f, in, len, first, step, out);
			if (f.why[0] == 0 || n >= (ssize_t) (sizeof("DATA\r\nX-Idemrelay-Cut:") - 1))
				fail_msg("first %zu, step %zu: forwarded \"%s\", want refused by"
					 " the sentinel's key", first, step,
					 n < 0 ? "" : esc(out, (size_t) n));
		}
	}
}

/* a rewind in the middle of the content: libesmtp is off script */
static void test_rewind_mid_content(void **state)
{
	static const char part[] = DELIVER_FILTER_SENTINEL "Date: x";
	static const char body[] = BLOCK "line\r\n";
	struct deliver_filter f;
	char buf[sizeof(body)];

	(void) state;
	/* half the block cut */
	deliver_filter_init(&f);
	deliver_filter_rewind(&f);
	memcpy(buf, part, sizeof(part) - 1);
	assert_int_equal(deliver_filter_up(&f, buf, sizeof(part) - 1), 0);
	deliver_filter_rewind(&f);
	memcpy(buf, ".\r\n", 3);
	assert_int_equal(deliver_filter_up(&f, buf, 3), -1);
	assert_non_null(strstr(f.why, "middle of the content"));

	/* in the body, before its final dot */
	deliver_filter_init(&f);
	deliver_filter_rewind(&f);
	memcpy(buf, body, sizeof(body) - 1);
	assert_int_equal(deliver_filter_up(&f, buf, sizeof(body) - 1), 6);
	deliver_filter_rewind(&f);
	memcpy(buf, ".\r\n", 3);
	assert_int_equal(deliver_filter_up(&f, buf, 3), -1);
	assert_non_null(strstr(f.why, "middle of the content"));

	/* before any of the content, a second rewind is harmless */
	deliver_filter_init(&f);
	deliver_filter_rewind(&f);
	deliver_filter_rewind(&f);
	memcpy(buf, part, sizeof(part) - 1);
	assert_int_equal(deliver_filter_up(&f, buf, sizeof(part) - 1), 0);
	assert_int_equal(f.why[0], 0);
}

/*
 * the final dot: found once, at the right place, however the content is
 * split; a dot-stuffed line, a dot inside a line and "\r\n.\r" followed by
 * more text are not it; a lone "." (no block) is not a message's dot
 */
static void test_final_dot(void **state)
{
	static const char in[] = BLOCK "a\r\n..x\r\n.\r\r\nb.\r\n\r\n.\r\nMAIL FROM:<>\r\n";
	static const char body[] = "a\r\n..x\r\n.\r\r\nb.\r\n\r\n.\r\n";
	size_t len = sizeof(in) - 1, cut, at, got_at, total;
	struct deliver_filter f;
	char buf[sizeof(in)];
	ssize_t n;

	(void) state;
	for (cut = 1; cut < len; cut++) {
		deliver_filter_init(&f);
		deliver_filter_rewind(&f);
		got_at = 0;
		total = 0;
		for (at = 0; at < len; at += cut) {
			size_t k = at + cut > len ? len - at : cut;

			memcpy(buf, in + at, k);
			n = deliver_filter_up(&f, buf, k);
			assert_true(n >= 0);
			if (f.dot_end >= 0) {
				if (got_at)
					fail_msg("cut %zu: a second final dot at %zu", cut, total);
				got_at = total + (size_t) f.dot_end;
			}
			total += (size_t) n;
		}
		if (got_at != sizeof(body) - 1)
			fail_msg("cut %zu: the dot ends at %zu, want at %zu", cut, got_at,
				 sizeof(body) - 1);
	}
	deliver_filter_init(&f);	/* no rewind: the 354 went to a refused message */
	memcpy(buf, ".\r\n", 3);
	assert_int_equal(deliver_filter_up(&f, buf, 3), 3);
	assert_int_equal(f.dot_end, -1);
}

/*
 * the replies owed, after each step of a conversation, fed whole and byte
 * by byte; the server's bytes go on through the gate, which counts the
 * replies libesmtp was given (the bridge's way)
 */
static const struct owed_step {
	int down;			/* 1: the server's; 0: libesmtp's; 2: it rewinds */
	const char *in;
	const char *owed;		/* NULL: none */
	int dot;			/* a final dot's reply among those owed */
} owed_steps[] = {
	{ 0, "", "the greeting", 0 },
	{ 1, "220 sink ESMTP\r\n", NULL, 0 },
	{ 0, "EHLO me\r\n", "EHLO", 0 },
	{ 1, "250-sink\r\n250-PIPELINING\r\n", "EHLO", 0 },
	{ 1, "250 DSN\r\n", NULL, 0 },
	{ 0, "AUTH LOGIN\r\n", "AUTH", 0 },
	{ 1, "334 VXNlcm5hbWU6\r\n", NULL, 0 },
	{ 0, "c2VjcmV0\r\n", "an AUTH answer", 0 },	/* a secret is never a name */
	{ 1, "235 2.7.0 ok\r\n", NULL, 0 },
	{ 0, "MAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\ndata\r\n", "MAIL", 0 },
	{ 1, "250 ok\r\n", "RCPT", 0 },
	{ 1, "250 ok\r\n", "DATA", 0 },
	{ 1, "354", "DATA", 0 },
	{ 1, " go\r\n", NULL, 0 },
	{ 2, "", NULL, 0 },
	{ 0, BLOCK "x\r\n.", NULL, 0 },
	{ 0, "\r\n", "the final dot", 1 },
	{ 0, "QUIT\r\n", "the final dot", 1 },	/* pipelined behind the dot */
	{ 1, "250 2.0.0 ok\r\n", "QUIT", 0 },
	{ 1, "221 bye\r\n", NULL, 0 },
};

/* owed_run - feed the steps, step bytes at a time (0: whole): what is owed, and whether a dot's reply is */
static void owed_run(size_t step)
{
	struct deliver_filter f;
	struct deliver_gate g;
	char buf[OUT_MAX], gated[OUT_MAX + DELIVER_GATE_REPLY_MAX];
	const char *got;
	size_t i, at, k, len;

	deliver_filter_init(&f);
	deliver_gate_init(&g);
	for (i = 0; i < N(owed_steps); i++) {
		len = strlen(owed_steps[i].in);
		if (owed_steps[i].down == 2)
			deliver_filter_rewind(&f);
		for (at = 0; at < len; at += k) {
			k = piece(at, len, 0, step);
			memcpy(buf, owed_steps[i].in + at, k);
			if (owed_steps[i].down)
				deliver_gate_down(&g, &f, buf, k, gated);
			else
				assert_true(deliver_filter_up(&f, buf, k) >= 0);
		}
		assert_false(g.gone);
		got = deliver_filter_verb(&f, g.released);
		if ((got == NULL) != (owed_steps[i].owed == NULL)
		    || (got && strcmp(got, owed_steps[i].owed) != 0))
			fail_msg("step %zu (by %zu): owed \"%s\", want \"%s\"", i, step,
				 got ? got : "(none)",
				 owed_steps[i].owed ? owed_steps[i].owed : "(none)");
		if (deliver_filter_dot_owed(&f, g.released) != owed_steps[i].dot)
			fail_msg("step %zu (by %zu): a final dot's reply owed %d, want %d", i, step,
				 deliver_filter_dot_owed(&f, g.released), owed_steps[i].dot);
	}
}

static void test_owed(void **state)
{
	(void) state;
	owed_run(0);
	owed_run(1);
	owed_run(3);
}

/*
 * more commands pipelined than the names kept (DELIVER_FILTER_VERBS): no
 * final dot's reply is owed among them, and one is once a dot is written
 */
static void test_owed_many(void **state)
{
	struct deliver_filter f;
	char buf[OUT_MAX];
	size_t len = 0;
	int i;

	(void) state;
	deliver_filter_init(&f);
	len += (size_t) snprintf(buf, sizeof(buf), "MAIL FROM:<a@b>\r\n");
	for (i = 0; i < DELIVER_FILTER_VERBS + 4; i++)
		len += (size_t) snprintf(buf + len, sizeof(buf) - len, "RCPT TO:<r%d@b>\r\n", i);
	len += (size_t) snprintf(buf + len, sizeof(buf) - len, "DATA\r\n");
	assert_true(deliver_filter_up(&f, buf, len) >= 0);
	assert_string_equal(deliver_filter_verb(&f, 1), "a pipelined command");
	assert_int_equal(deliver_filter_dot_owed(&f, 1), 0);
	deliver_filter_rewind(&f);
	len = (size_t) snprintf(buf, sizeof(buf), BLOCK "x\r\n.\r\n");
	assert_true(deliver_filter_up(&f, buf, len) >= 0);
	assert_int_equal(deliver_filter_dot_owed(&f, 1), 1);
	assert_int_equal(deliver_filter_dot_owed(&f, f.cmds - 1), 1);
	assert_int_equal(deliver_filter_dot_owed(&f, f.cmds), 0);
}

static void test_block_too_long(void **state)
{
	struct deliver_filter f;
	char *in = malloc(DELIVER_FILTER_BLOCK_MAX + 100);
	size_t len = strlen(DELIVER_FILTER_SENTINEL);

	(void) state;
	memcpy(in, DELIVER_FILTER_SENTINEL, len);
	memset(in + len, 'a', DELIVER_FILTER_BLOCK_MAX + 100 - len);
	deliver_filter_init(&f);
	deliver_filter_rewind(&f);
	assert_int_equal(deliver_filter_up(&f, in, DELIVER_FILTER_BLOCK_MAX), 0);
	assert_int_equal(deliver_filter_up(&f, in + DELIVER_FILTER_BLOCK_MAX, 100), -1);
	assert_non_null(strstr(f.why, "no end"));
	free(in);
}

/* ---------------------------------------------------------------- conversations */

/*
 * a step of a conversation: the server's bytes and what libesmtp gets of
 * them through the gate, or libesmtp's and what must pass, or libesmtp's
 * rewind (as deliver_smtp_msg.c's message callback tells the bridge)
 */
struct step {
	int down;			/* 1: the server's; 0: libesmtp's; 2: it rewinds */
	const char *in;
	const char *want;		/* what passes (up, NULL: refused) */
};

#define S_DOWN(x)	{ 1, x, x }
#define S_UP(x, w)	{ 0, x, w }
#define S_REWIND	{ 2, "", "" }

static const struct step two_messages[] = {
	S_DOWN("220 sink ESMTP\r\n"),
	S_UP("EHLO relay\r\n", "EHLO relay\r\n"),
	{ 1, "250-sink\r\n250-CHUNKING\r\n250 PIPELINING\r\n",
	  "250-sink\r\n250-X-HIDDEN\r\n250 PIPELINING\r\n" },
	S_UP("MAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\nDATA\r\n",
	     "MAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\nDATA\r\n"),
	{ 1, "250 ok\r\n2", "250 ok\r\n" },	/* a line is held until it ends */
	{ 1, "5", "" },
	{ 1, "0 ok\r\n35", "250 ok\r\n" },
	{ 1, "4 go\r\n", "354 go\r\n" },
	S_REWIND,
	S_UP(BLOCK "Subject: one\r\n", "Subject: one\r\n"),
	S_UP("\r\nfirst\r\n.\r\n", "\r\nfirst\r\n.\r\n"),
	S_DOWN("250 ok\r\n"),
	S_UP("MAIL FROM:<a@b>\r\nRCPT TO:<e@f>\r\nDATA\r\n",
	     "MAIL FROM:<a@b>\r\nRCPT TO:<e@f>\r\nDATA\r\n"),
	S_DOWN("250 ok\r\n250 ok\r\n354 go\r\n"),
	S_REWIND,
	S_UP(DELIVER_FILTER_SENTINEL "Date: d\r", ""),
	S_UP("\n\r", ""),
	S_UP("\nSubject: two\r\n\r\nsecond\r\n.\r\nQUIT\r\n",
	     "Subject: two\r\n\r\nsecond\r\n.\r\nQUIT\r\n"),
	S_DOWN("250 ok\r\n221 bye\r\n"),
};

static const struct step refused_second[] = {
	S_DOWN("354 go\r\n"),
	S_REWIND,
	S_UP(BLOCK "one\r\n.\r\n", "one\r\n.\r\n"),
	S_DOWN("250 ok\r\n"),
	S_UP("MAIL FROM:<a@b>\r\nRCPT TO:<e@f>\r\nDATA\r\n",
	     "MAIL FROM:<a@b>\r\nRCPT TO:<e@f>\r\nDATA\r\n"),
	S_DOWN("354 go\r\n"),
	S_REWIND,
	S_UP("Subject: no block\r\n\r\ntwo\r\n.\r\n", NULL),
	S_UP("QUIT\r\n", NULL),
};

/*
 * the cut is armed by the rewind, not by a reply: 3xx where no content
 * follows (in an EHLO reply's text, to AUTH besides 334) arms nothing,
 * and a rewind arms the cut whatever the reply before it was
 */
static const struct step replies_do_not_arm[] = {
	S_DOWN("220 sink ESMTP\r\n"),
	S_UP("EHLO relay\r\n", "EHLO relay\r\n"),
	S_DOWN("250-sink\r\n250-354 looks like a go-ahead\r\n250 AUTH LOGIN\r\n"),
	S_UP("AUTH LOGIN\r\n", "AUTH LOGIN\r\n"),
	S_DOWN("334 VXNlcm5hbWU6\r\n"),
	S_UP("dXNlcg==\r\n", "dXNlcg==\r\n"),
	S_DOWN("330 UGFzc3dvcmQ6\r\n"),
	S_UP("cGFzcw==\r\n", "cGFzcw==\r\n"),
	S_DOWN("235 2.7.0 ok\r\n"),
	S_UP("MAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\nDATA\r\n",
	     "MAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\nDATA\r\n"),
	S_DOWN("250 ok\r\n250 ok\r\n354 go\r\n"),
	S_REWIND,
	S_UP(BLOCK "Subject: s\r\n\r\nbody\r\n.\r\n", "Subject: s\r\n\r\nbody\r\n.\r\n"),
	S_DOWN("250 ok\r\n"),
	S_UP("QUIT\r\n", "QUIT\r\n"),
};

static const struct step rewind_alone_arms[] = {
	S_UP("MAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\nDATA\r\n",
	     "MAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\nDATA\r\n"),
	S_REWIND,			/* the 354 did not go through this filter */
	S_UP(BLOCK "Subject: s\r\n\r\nbody\r\n.\r\nQUIT\r\n",
	     "Subject: s\r\n\r\nbody\r\n.\r\nQUIT\r\n"),
};

/* run_steps - a conversation through one filter and gate; returns the blocks cut (armed no more) */
static unsigned run_steps(const struct step *steps, size_t n)
{
	struct deliver_filter f;
	struct deliver_gate g;
	char out[OUT_MAX];
	size_t i, len;
	ssize_t got;
	unsigned blocks = 0;
	int armed;

	deliver_filter_init(&f);
	deliver_gate_init(&g);
	for (i = 0; i < n; i++) {
		len = strlen(steps[i].in);
		memcpy(out, steps[i].in, len);
		if (steps[i].down == 2) {
			deliver_filter_rewind(&f);
			continue;
		}
		if (steps[i].down)
			got = (ssize_t) deliver_gate_down(&g, &f, steps[i].in, len, out);
		else {
			armed = f.armed;
			got = deliver_filter_up(&f, out, len);
			blocks += armed && !f.armed;
		}
		if (steps[i].want == NULL) {
			if (got != -1)
				fail_msg("step %zu: forwarded \"%s\", want refused", i,
					 esc(out, (size_t) got));
			continue;
		}
		if (got < 0 || (size_t) got != strlen(steps[i].want)
		    || memcmp(out, steps[i].want, (size_t) got) != 0)
			fail_msg("step %zu: got %s\"%s\", want \"%s\"", i, got < 0 ? "refused: " : "",
				 got < 0 ? f.why : esc(out, (size_t) got),
				 esc(steps[i].want, strlen(steps[i].want)));
	}
	return blocks;
}

static void test_two_messages(void **state)
{
	(void) state;
	assert_int_equal(run_steps(two_messages, N(two_messages)), 2);
	assert_int_equal(run_steps(refused_second, N(refused_second)), 1);
}

static void test_rewind_arms(void **state)
{
	(void) state;
	assert_int_equal(run_steps(replies_do_not_arm, N(replies_do_not_arm)), 1);
	assert_int_equal(run_steps(rewind_alone_arms, N(rewind_alone_arms)), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_down),
		cmocka_unit_test(test_up),
		cmocka_unit_test(test_block_too_long),
		cmocka_unit_test(test_rewind_mid_content),
		cmocka_unit_test(test_sentinel_without_rewind),
		cmocka_unit_test(test_two_messages),
		cmocka_unit_test(test_rewind_arms),
		cmocka_unit_test(test_final_dot),
		cmocka_unit_test(test_smtputf8),
		cmocka_unit_test(test_offered_starttls),
		cmocka_unit_test(test_owed),
		cmocka_unit_test(test_owed_many),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
