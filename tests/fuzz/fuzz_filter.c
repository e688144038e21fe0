/*
 * fuzz_filter - the bridge's stream filter (deliver/esmtp/deliver_filter.h) on an
 * arbitrary conversation, the server's side through the reply gate
 * (deliver_gate.h) as in the bridge. The input is a list of chunks: one byte whose
 * high bit says the direction (set: the server's replies, down to
 * libesmtp; clear: libesmtp's writes, up to the server) and whose low
 * bits give a length, then that many bytes. An empty chunk up (a 0 byte)
 * is libesmtp's rewind (deliver_filter_rewind()), which arms the cut.
 *
 * The same conversation goes through two filters and gates: one gets each
 * chunk whole, the other one byte at a time, in the same order. Properties:
 *
 *   - where reads split the streams never matters: both filters give
 *     the same bytes in each direction, and fail at the same point;
 *     the one slack: a command line refused for starting with the
 *     sentinel fails at its 16th octet, so fed a byte at a time the
 *     filter has passed on what came before in that write, and the
 *     line's first 15 octets, which fed whole it has not (the line
 *     never ends: nothing of it is a command, or content);
 *   - down, the gate passes whole replies only, the filter only ever
 *     rewrites a keyword in place: never more bytes come out than went
 *     in, and both give up on the server at the same point;
 *   - up, what a call passes on is the end of what it was given (the
 *     cut is always a prefix of one write), and once the filter has
 *     failed it passes nothing more;
 *   - each block cut out is the sentinel line, then header lines, then
 *     the empty line, and nothing past it: "\r\n\r\n" ends it and
 *     appears nowhere before its end.
 *
 * A third filter and gate get the chunks whole too, with every message
 * marked for BODY=8BITMIME and SMTPUTF8 (deliver_filter_mail_params()),
 * each up chunk in a buffer of exactly its length plus
 * DELIVER_FILTER_GROW: what it passes up is the first filter's output
 * with what the EHLO reply offered of " BODY=8BITMIME" and " SMTPUTF8"
 * inserted before line ends only, at most DELIVER_FILTER_GROW octets a
 * call, up to where it failed (two such MAIL lines in one write fail it),
 * and the same bytes down unless it failed.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../deliver/esmtp/deliver_filter.h"
#include "../../deliver/esmtp/deliver_gate.h"

#define OUT_MAX	(64 * 1024)

#define MAILS_MAX	256

struct side {
	struct deliver_filter f;
	struct deliver_gate g;
	char down[OUT_MAX + DELIVER_GATE_REPLY_MAX], up[OUT_MAX];
	size_t down_len, up_len, down_in;
	int failed;			/* the chunk index at which up failed, or -1 */
	char cut[OUT_MAX];		/* what the block being cut has dropped so far */
	size_t cut_len;
	int over;			/* up outgrew OUT_MAX (the third filter's): not compared */
};

/* feed_params - one chunk whole through the filter with MAIL parameters */
static void feed_params(struct side *s, int to_server, const uint8_t *p, size_t len, int chunk)
{
	char *buf;
	ssize_t kept;

	if (!to_server) {
		s->down_len += deliver_gate_down(&s->g, &s->f, (const char *) p, len,
						 s->down + s->down_len);
		return;
	}
	if (len == 0)
		deliver_filter_rewind(&s->f);
	buf = malloc(len + DELIVER_FILTER_GROW);	/* exactly the room promised */
	memcpy(buf, p, len);
	if ((kept = deliver_filter_up(&s->f, buf, len)) < 0) {
		if (s->failed < 0)
			s->failed = chunk;
	} else if ((size_t) kept > len + DELIVER_FILTER_GROW || s->failed >= 0) {
		abort();
	} else if (s->up_len + (size_t) kept > sizeof(s->up)) {
		s->over = 1;
	} else {
		memcpy(s->up + s->up_len, buf, (size_t) kept);
		s->up_len += (size_t) kept;
	}
	free(buf);
}

/*
 * check_params - the third filter's output is the first's with parameters
 * inserted before line ends, as offered; all of it unless it failed
 */
static void check_params(const struct side *w, const struct side *m)
{
	static const char *const adds[] = { " BODY=8BITMIME SMTPUTF8", " BODY=8BITMIME", " SMTPUTF8" };
	static const int need[] = { DELIVER_FILTER_8BIT | DELIVER_FILTER_UTF8, DELIVER_FILTER_8BIT,
				    DELIVER_FILTER_UTF8 };
	size_t i = 0, j = 0, k, n;

	if (m->over || (w->failed >= 0 && (m->failed < 0 || m->failed > w->failed)))
		abort();
	while (j < m->up_len) {
		if (i < w->up_len && w->up[i] == m->up[j]) {
			i++, j++;
			continue;
		}
		if (i == w->up_len || (w->up[i] != '\r' && w->up[i] != '\n'))
			abort();	/* changed, not inserted before a line end */
		for (k = 0; k < 3; k++) {
			n = strlen(adds[k]);
			if (m->up_len - j >= n && memcmp(m->up + j, adds[k], n) == 0)
				break;
		}
		if (k == 3 || (m->f.offered & need[k]) != need[k])
			abort();	/* not a parameter, or one not offered */
		j += n;
	}
	if (m->failed < 0 && i != w->up_len)
		abort();		/* it dropped what the first passed */
}

/* check_block - a block the filter has just finished cutting */
static void check_block(const struct side *s)
{
	static const char sentinel[] = DELIVER_FILTER_SENTINEL;
	const char *end = memmem(s->cut, s->cut_len, "\r\n\r\n", 4);

	if (s->cut_len < sizeof(sentinel) - 1 + 2
	    || memcmp(s->cut, sentinel, sizeof(sentinel) - 1) != 0
	    || end == NULL || end + 4 != s->cut + s->cut_len)
		abort();
}

/* feed - one chunk through a filter, in pieces of step bytes (0: whole) */
static void feed(struct side *s, int to_server, const uint8_t *p, size_t len, size_t step,
		 int chunk)
{
	char buf[256 + DELIVER_FILTER_GROW];
	size_t off, n;
	ssize_t kept;
	int armed;

	if (to_server && len == 0)
		deliver_filter_rewind(&s->f);
	for (off = 0; off < len; off += n) {
		n = step && len - off > step ? step : len - off;
		if (!to_server) {
			s->down_in += n;
			s->down_len += deliver_gate_down(&s->g, &s->f, (const char *) p + off, n,
							 s->down + s->down_len);
			continue;
		}
		memcpy(buf, p + off, n);
		armed = s->f.armed;	/* a block ends where the filter is armed no more */
		kept = deliver_filter_up(&s->f, buf, n);
		if (kept < 0) {
			if (s->failed < 0)
				s->failed = chunk;
			continue;
		}
		if (s->failed >= 0 || (size_t) kept > n || memcmp(buf, p + off + n - kept, kept))
			abort();		/* not a suffix, or alive again after failing */
		memcpy(s->cut + s->cut_len, p + off, n - (size_t) kept);
		s->cut_len += n - (size_t) kept;
		if (armed && !s->f.armed) {
			check_block(s);
			s->cut_len = 0;
		} else if (s->cut_len > 0 && !s->f.armed) {
			abort();		/* dropped bytes, yet no block ended */
		}
		memcpy(s->up + s->up_len, buf, (size_t) kept);
		s->up_len += (size_t) kept;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct side whole, bytes, params;
	static unsigned char want[MAILS_MAX];
	static const char key[] = "X-Idemrelay-Cut:";	/* the filter's SENTINEL_KEY */
	size_t i = 0, len, extra, failed_len = 0;
	int chunk = 0, dir;

	if (size > OUT_MAX / 2)
		return 0;
	memset(&whole, 0, sizeof(whole));
	memset(&bytes, 0, sizeof(bytes));
	memset(&params, 0, sizeof(params));
	memset(want, DELIVER_FILTER_8BIT | DELIVER_FILTER_UTF8, sizeof(want));
	deliver_filter_init(&whole.f);
	deliver_filter_init(&bytes.f);
	deliver_filter_init(&params.f);
	deliver_filter_mail_params(&params.f, want, sizeof(want));
	deliver_gate_init(&whole.g);
	deliver_gate_init(&bytes.g);
	deliver_gate_init(&params.g);
	whole.failed = bytes.failed = params.failed = -1;
	while (i < size) {
		dir = data[i] & 0x80;
		len = data[i] & 0x7f;
		i++;
		if (len > size - i)
			len = size - i;
		feed(&whole, dir == 0, data + i, len, 0, chunk);
		feed(&bytes, dir == 0, data + i, len, 1, chunk);
		feed_params(&params, dir == 0, data + i, len, chunk);
		if (whole.failed == chunk)
			failed_len = len;
		i += len;
		chunk++;
	}
	if (whole.down_len > whole.down_in || bytes.down_len > bytes.down_in)
		abort();		/* down may rewrite or hold back, never add */
	if (whole.down_len != bytes.down_len || memcmp(whole.down, bytes.down, whole.down_len)
	    || whole.g.gone != bytes.g.gone)
		abort();
	if (whole.failed != bytes.failed || whole.up_len > bytes.up_len
	    || memcmp(whole.up, bytes.up, whole.up_len))
		abort();
	extra = bytes.up_len - whole.up_len;
	if (extra > 0 && (whole.failed < 0 || extra > failed_len || bytes.up_len < sizeof(key) - 2
			  || memcmp(bytes.up + bytes.up_len - (sizeof(key) - 2), key,
				    sizeof(key) - 2) != 0))
		abort();		/* more than the failed write up to a sentinel's key */
	if (params.failed < 0 && (params.down_len != whole.down_len
				  || memcmp(params.down, whole.down, whole.down_len)))
		abort();		/* the parameters change nothing down (failed: it counts no more) */
	check_params(&whole, &params);
	return 0;
}
