/*
 * NAME
 *	smtp_data 3h
 * SUMMARY
 *	DATA reader: end-of-data detection, dot-unstuffing, line endings
 * DESCRIPTION
 *	A byte-driven state machine: input may be cut anywhere, down to one
 *	byte per call, and the result is the same. The message ends only at
 *	<CRLF>.<CRLF> where the CR LF before the dot is a real pair (the
 *	start of the message counts as following one). Lines starting with
 *	a dot lose it. A bare CR or LF is stored as CRLF and noted in
 *	bare_eol. Past limit octets the output is emptied and nothing more is
 *	stored, but the input is still scanned for the end; too_big says so.
 *	Lines longer than SMTP_TEXT_LINE_MAX octets (RFC 5322 section 2.1.1,
 *	the CRLF not counted) are counted in long_lines, as stored (after
 *	unstuffing); a NUL octet sets nul. What to do about either is the
 *	caller's: refuse the message, or fold its lines with
 *	smtp_data_fold() when relaying it.
 *
 *	The same reader takes BDAT chunks (RFC 3030) in raw mode: no
 *	dot-unstuffing and no end detection, since the chunk sizes say where
 *	the message ends, but the same line-ending policy and limit. The
 *	reader's state runs on from one chunk to the next, so a CR that ends
 *	one chunk and an LF that starts the next are one real CRLF;
 *	smtp_data_finish() closes the message after the LAST chunk.
 */
#ifndef SMTP_SMTP_DATA_H
#define SMTP_SMTP_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "../util/buf.h"

#define SMTP_TEXT_LINE_MAX 998	/* octets in a text line, CRLF not counted */

enum smtp_data_state {
	SMTP_DATA_BOL,			/* after a real CRLF (or at the start) */
	SMTP_DATA_TEXT,			/* inside a line */
	SMTP_DATA_CR,			/* CR seen, not yet known to be bare */
	SMTP_DATA_DOT,			/* "." seen at BOL, not yet emitted */
	SMTP_DATA_DOT_CR,		/* ".\r" seen at BOL */
	SMTP_DATA_DONE,			/* <CRLF>.<CRLF> consumed */
};

struct smtp_data {
	enum smtp_data_state state;
	int raw;			/* BDAT: no dot-unstuffing, no end */
	uint64_t limit;			/* message_size; 0: none */
	int too_big;			/* stopped storing at limit */
	int bare_eol;			/* a bare CR or LF was seen */
	uint64_t line_len;		/* octets stored of the line so far */
	size_t long_lines;		/* lines over SMTP_TEXT_LINE_MAX octets */
	int nul;			/* a NUL octet was seen */
};

void smtp_data_init(struct smtp_data *d, uint64_t limit, int raw);	/* raw: BDAT */

/*
 * smtp_data_feed - scan input, append message content to out. Returns
 * the octets consumed: all of them, or up to and including the LF of the
 * terminator, after which smtp_data_done() is true.
 */
size_t smtp_data_feed(struct smtp_data *d, struct buf *out,
		      const char *in, size_t len);

int smtp_data_done(const struct smtp_data *d);

/*
 * smtp_data_finish - end a raw (BDAT) message: a pending CR is bare, and
 * a message that does not end in CRLF gets one (within the limit).
 * smtp_data_done() is true afterwards.
 */
void smtp_data_finish(struct smtp_data *d, struct buf *out);

/*
 * smtp_data_fold - copy a message whose lines all end in CRLF, breaking
 * each line over max octets as Postfix's smtp_line_length_limit does:
 * CRLF and a space after max octets, then after every max - 1 octets
 * more, so that no line is longer than max. Returns the lines folded.
 */
size_t smtp_data_fold(struct buf *out, const char *in, size_t len, size_t max);

#endif
