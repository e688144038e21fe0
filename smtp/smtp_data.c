/*
 * NAME
 *	smtp_data 3
 * SUMMARY
 *	DATA reader: end-of-data detection, dot-unstuffing, line endings
 * DESCRIPTION
 *	SMTP smuggling (CVE-2023-51764 and relatives) works when two hops
 *	disagree on where a message ends. This reader agrees with RFC 5321
 *	section 4.1.1.4 and nothing else: only <CR><LF>.<CR><LF> ends the
 *	message, and the CR LF before the dot must be a real pair. A bare CR
 *	or bare LF is stored as CRLF, so the stored message has one kind of
 *	line ending and no next hop can read a different end into it.
 *
 *	State is kept between calls and nothing is emitted until it is
 *	decided (a CR waits for the next byte to know whether it is bare, a
 *	dot at the start of a line waits to know whether it terminates), so
 *	any split of the input gives the same result. Runs of ordinary bytes
 *	are copied in one go.
 *
 *	The stored size is bounded by the limit: past it, what was stored is
 *	released and storing stops, but scanning goes on, so the client still
 *	gets its reply at the real end of data. Long lines cost nothing extra: there is no line buffer.
 *
 *	The length of each stored line is counted on the way (a line over
 *	998 octets is one that an RFC 5322 next hop may refuse or cut), and
 *	a NUL noted; smtp_data_fold() breaks long lines the way Postfix's
 *	SMTP client does, for the relay to apply to what it relays.
 *
 *	BDAT chunks (RFC 3030) go through the same code in raw mode, where
 *	a dot at the start of a line is just an octet: the chunk sizes, not
 *	the content, say where a BDAT message ends, so there is nothing to
 *	smuggle and nothing to unstuff. Line endings are still made uniform,
 *	because the next hop may well receive the message with DATA.
 */
#include <string.h>

#include "smtp_data.h"

/* smtp_data_init - start reading a message; raw: sent in BDAT chunks */
void smtp_data_init(struct smtp_data *d, uint64_t limit, int raw)
{
	*d = (struct smtp_data) { .state = SMTP_DATA_BOL, .raw = raw, .limit = limit };
}

/* smtp_data_done - was the terminator seen? */
int smtp_data_done(const struct smtp_data *d)
{
	return d->state == SMTP_DATA_DONE;
}

/* smtp_data_emit - store message bytes, within the limit */
static void smtp_data_emit(struct smtp_data *d, struct buf *out,
			   const char *p, size_t n)
{
	if (d->too_big)
		return;
	if (d->limit && (uint64_t) out->len + n > d->limit) {
		/* the message will be refused: give the memory back now */
		d->too_big = 1;
		buf_free(out);
		return;
	}
	buf_append(out, p, n);
}

/* smtp_data_text - store octets of a line, counting them and noting a NUL */
static void smtp_data_text(struct smtp_data *d, struct buf *out, const char *p, size_t n)
{
	d->line_len += n;
	if (!d->nul && memchr(p, 0, n) != NULL)
		d->nul = 1;
	smtp_data_emit(d, out, p, n);
}

/* smtp_data_eol - end a stored line with CRLF; count it if it was long */
static void smtp_data_eol(struct smtp_data *d, struct buf *out)
{
	if (d->line_len > SMTP_TEXT_LINE_MAX)
		d->long_lines++;
	d->line_len = 0;
	smtp_data_emit(d, out, "\r\n", 2);
}

/* smtp_data_bare - a bare CR or LF: store it as CRLF, remember it */
static void smtp_data_bare(struct smtp_data *d, struct buf *out)
{
	d->bare_eol = 1;
	smtp_data_eol(d, out);
}

/*
 * smtp_data_expect - a state that waits for one octet: want moves to
 * yes and is consumed (1); anything else moves to no, where the same
 * octet is looked at again (0)
 */
static size_t smtp_data_expect(struct smtp_data *d, char c, char want,
			       enum smtp_data_state yes, enum smtp_data_state no)
{
	d->state = c == want ? yes : no;
	return c == want;
}

/* smtp_data_feed - scan input; stop after the terminator */
size_t smtp_data_feed(struct smtp_data *d, struct buf *out,
		      const char *in, size_t len)
{
	size_t i = 0, j;
	char c;

	/*
	 * Each case either consumes the byte (i++, or smtp_data_expect()
	 * giving 1) or changes state and looks at the same byte again.
	 */
	while (i < len && d->state != SMTP_DATA_DONE) {
		c = in[i];
		switch (d->state) {
		case SMTP_DATA_BOL:
			if (d->raw)
				d->state = SMTP_DATA_TEXT;	/* BDAT: a dot is an octet */
			else
				i += smtp_data_expect(d, c, '.', SMTP_DATA_DOT, SMTP_DATA_TEXT);
			continue;
		case SMTP_DATA_TEXT:
			for (j = i; j < len && in[j] != '\r' && in[j] != '\n'; j++)
				 /* void */ ;
			if (j > i) {
				smtp_data_text(d, out, in + i, j - i);
				i = j;
			} else if (c == '\r') {
				d->state = SMTP_DATA_CR;
				i++;
			} else {
				smtp_data_bare(d, out);
				i++;
			}
			continue;
		case SMTP_DATA_CR:
			if (c == '\n') {
				smtp_data_eol(d, out);
				d->state = SMTP_DATA_BOL;
				i++;
			} else {
				/* the pending CR was bare; a CR now is pending again */
				smtp_data_bare(d, out);
				if (c == '\r')
					i++;
				else
					d->state = SMTP_DATA_TEXT;
			}
			continue;
		case SMTP_DATA_DOT:
			/* not CR, so not the terminator: the dot was stuffing, drop it */
			i += smtp_data_expect(d, c, '\r', SMTP_DATA_DOT_CR, SMTP_DATA_TEXT);
			continue;
		case SMTP_DATA_DOT_CR:
			/* ".\r" + other: drop the dot, the CR is bare */
			i += smtp_data_expect(d, c, '\n', SMTP_DATA_DONE, SMTP_DATA_CR);
			continue;
		case SMTP_DATA_DONE:
			break;
		}
	}
	return i;
}

/* smtp_data_finish - the last BDAT chunk is in: close the last line */
void smtp_data_finish(struct smtp_data *d, struct buf *out)
{
	/* in raw mode only BOL, TEXT and CR are reachable */
	if (d->state == SMTP_DATA_CR)
		smtp_data_bare(d, out);
	/* every stored LF ends a CRLF, so a last octet other than LF means
	 * an unterminated last line (an empty or refused message has none) */
	if (d->line_len > 0)
		smtp_data_eol(d, out);
	d->state = SMTP_DATA_DONE;
}

/* smtp_data_fold - break lines over max octets with CRLF SPACE (max >= 2) */
size_t smtp_data_fold(struct buf *out, const char *in, size_t len, size_t max)
{
	const char *end, *eol;
	size_t folded = 0, n, room;

	if (len == 0)
		return 0;		/* in may be NULL */
	for (end = in + len; in < end; in = eol) {
		eol = memchr(in, '\n', (size_t) (end - in));
		eol = eol ? eol + 1 : end;	/* the line with its CRLF */
		n = (size_t) (eol - in);
		if (n > max + 2 && eol[-1] == '\n' && eol[-2] == '\r') {
			folded++;
			for (room = max; n > room + 2; room = max - 1) {
				buf_append(out, in, room);
				buf_append(out, "\r\n ", 3);
				in += room;
				n -= room;
			}
		}
		buf_append(out, in, n);
	}
	return folded;
}
