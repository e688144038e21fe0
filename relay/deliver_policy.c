/*
 * NAME
 *	deliver_policy 3
 * SUMMARY
 *	backoff, outcome classification, reply text, libesmtp header scan
 * DESCRIPTION
 *	Pure functions; see deliver_policy.h. The outcome table, per
 *	recipient, first match wins:
 *
 *	    RCPT 5xx                              bounced    (RCPT reply)
 *	    RCPT 4xx                              deferred   (RCPT reply)
 *	    marked, final 2xx, RCPT 2xx           sent       (DATA reply)
 *	    marked, final 5xx                     bounced    (DATA reply)
 *	    marked, final 4xx                     deferred   (DATA reply)
 *	    marked, anything else                 ambiguous  (no reply)
 *	    MAIL 5xx                              bounced    (MAIL reply)
 *	    MAIL 4xx                              deferred   (MAIL reply)
 *	    final 5xx (DATA refused), RCPT 2xx    bounced    (DATA reply)
 *	    final 4xx                             deferred   (DATA reply)
 *	    anything else                         deferred   (no reply)
 *
 *	"marked" means the durable inflight mark was written, so the final
 *	dot may have left: only then can the outcome be ambiguous. With
 *	BDAT and PIPELINING libesmtp sends the content before it reads the
 *	RCPT replies, so a marked recipient with no RCPT reply is ambiguous
 *	too.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "../util/buf.h"
#include "deliver_policy.h"

/* deliver_backoff - min(max, first * 2^(attempts-1)), without overflow */
int64_t deliver_backoff(int64_t first, int64_t max, int attempts)
{
	int64_t wait = first > 0 ? first : 1;
	int i;

	if (max < 1)
		max = 1;
	for (i = 1; i < attempts && wait < max; i++)
		wait = wait > max / 2 ? max : wait * 2;
	return wait < max ? wait : max;
}

/* verdict - build a verdict */
static struct deliver_verdict verdict(enum deliver_outcome o, enum deliver_source s)
{
	struct deliver_verdict v = { o, s };

	return v;
}

/* deliver_classify - one recipient's outcome; the table is in the file header */
struct deliver_verdict deliver_classify(int mail_code, int rcpt_code, int data_code,
					int marked, int final)
{
	int mail = mail_code / 100, rcpt = rcpt_code / 100, data = data_code / 100;

	if (rcpt == 5)
		return verdict(DELIVER_BOUNCED, DELIVER_SRC_RCPT);
	if (rcpt == 4)
		return verdict(DELIVER_DEFERRED, DELIVER_SRC_RCPT);
	if (marked) {
		if (final && data == 2 && rcpt == 2)
			return verdict(DELIVER_SENT, DELIVER_SRC_DATA);
		if (final && data == 5)
			return verdict(DELIVER_BOUNCED, DELIVER_SRC_DATA);
		if (final && data == 4)
			return verdict(DELIVER_DEFERRED, DELIVER_SRC_DATA);
		return verdict(DELIVER_AMBIGUOUS, DELIVER_SRC_SESSION);
	}
	if (mail == 5)
		return verdict(DELIVER_BOUNCED, DELIVER_SRC_MAIL);
	if (mail == 4)
		return verdict(DELIVER_DEFERRED, DELIVER_SRC_MAIL);
	if (final && data == 5 && rcpt == 2)
		return verdict(DELIVER_BOUNCED, DELIVER_SRC_DATA);
	if (final && data == 4)
		return verdict(DELIVER_DEFERRED, DELIVER_SRC_DATA);
	return verdict(DELIVER_DEFERRED, DELIVER_SRC_SESSION);
}

/* deliver_outcome_name - log word for an outcome */
const char *deliver_outcome_name(enum deliver_outcome o)
{
	switch (o) {
	case DELIVER_SENT:
		return "sent";
	case DELIVER_BOUNCED:
		return "bounced";
	case DELIVER_AMBIGUOUS:
		return "ambiguous";
	case DELIVER_DEFERRED:
		break;
	}
	return "deferred";
}

/* deliver_reply_format - one clean line: "code [x.y.z] text" */
void deliver_reply_format(char *out, size_t outlen, int code, int enh_class,
			  int enh_subject, int enh_detail, const char *text)
{
	size_t n = 0;
	int space = 0, w;

	if (outlen == 0)
		return;
	if (enh_class > 0)
		w = snprintf(out, outlen, "%d %d.%d.%d", code, enh_class, enh_subject, enh_detail);
	else
		w = snprintf(out, outlen, "%d", code);
	if (w < 0)
		w = 0;
	n = (size_t) w < outlen ? (size_t) w : outlen - 1;
	space = 1;
	for (; text && *text && n + 1 < outlen; text++) {
		unsigned char c = (unsigned char) *text;

		if (c < 0x20 || c == 0x7f || c == ' ') {
			space = 1;
			continue;
		}
		if (space) {
			out[n++] = ' ';
			space = 0;
			if (n + 1 >= outlen)
				break;
		}
		out[n++] = (char) c;
	}
	out[n] = 0;
}

/* deliver_dsn_code - RFC 3463 status of "NNN [c.s.d] text" */
int deliver_dsn_code(char out[16], const char *reply)
{
	int cls, subj = 0, det = 0, n = 0;

	if (!isdigit((unsigned char) reply[0]) || !isdigit((unsigned char) reply[1])
	    || !isdigit((unsigned char) reply[2]) || (reply[3] != ' ' && reply[3] != 0)
	    || ((cls = reply[0] - '0') != 2 && cls != 4 && cls != 5)) {
		snprintf(out, 16, "4.0.0");
		return -1;
	}
	if (reply[3] == ' ' && (reply[4] == '2' || reply[4] == '4' || reply[4] == '5')
	    && sscanf(reply + 5, ".%3d.%3d%n", &subj, &det, &n) == 2 && n > 0
	    && (reply[5 + n] == ' ' || reply[5 + n] == 0) && subj >= 0 && det >= 0
	    && subj <= 999 && det <= 999)
		snprintf(out, 16, "%c.%d.%d", '0' + cls, subj, det);
	else
		snprintf(out, 16, "%c.0.0", '0' + cls);
	return 0;
}

/* the headers libesmtp keeps to one copy, and the ones it strips */
static const char *const hdr_single[] = {
	"Date", "From", "Message-Id", "Sender", "To", "Cc", "Bcc", "Reply-To",
	"Disposition-Notification-To",
};
#define HDR_N_SINGLE	(sizeof(hdr_single) / sizeof(hdr_single[0]))

/* hdr_is - does the header name (not NUL-terminated) equal want, ignoring case? */
static int hdr_is(const char *name, size_t len, const char *want)
{
	return strlen(want) == len && strncasecmp(name, want, len) == 0;
}

/* line_end - offset just past the CRLF ending the line at p (or len) */
static size_t line_end(const char *data, size_t len, size_t p)
{
	const char *q;

	while (p < len) {
		if ((q = memchr(data + p, '\n', len - p)) == NULL)
			return len;
		p = (size_t) (q - data) + 1;
		if (p >= 2 && data[p - 2] == '\r')
			return p;
	}
	return len;
}

/*
 * deliver_hdr_scan - walk the header block as libesmtp does: a line ends
 * at CRLF only; a header is a line plus the lines after it that start
 * with SP or TAB; the block ends at an empty line or the end of data;
 * a header's name is what precedes the first ':' in it, compared exactly
 * (ignoring case) with the names libesmtp knows.
 */
unsigned deliver_hdr_scan(const char *data, size_t len)
{
	unsigned bits = 0, seen[HDR_N_SINGLE] = { 0 };
	size_t p = 0, q, i, namelen;
	const char *colon;

	if (len > 0 && (data[0] == ' ' || data[0] == '\t'))
		bits |= DELIVER_HDR_FOLDED_START;
	for (;;) {
		if (p >= len) {
			bits |= DELIVER_HDR_NO_BODY;
			break;
		}
		if (len - p >= 2 && data[p] == '\r' && data[p + 1] == '\n')
			break;
		q = line_end(data, len, p);
		while (q < len && (data[q] == ' ' || data[q] == '\t'))
			q = line_end(data, len, q);
		if ((colon = memchr(data + p, ':', q - p)) != NULL) {
			namelen = (size_t) (colon - (data + p));
			if (hdr_is(data + p, namelen, "Return-Path")
			    || hdr_is(data + p, namelen, "Original-Recipient"))
				bits |= DELIVER_HDR_STRIPPED;
			for (i = 0; i < HDR_N_SINGLE; i++) {
				if (!hdr_is(data + p, namelen, hdr_single[i]))
					continue;
				if (seen[i]++)
					bits |= DELIVER_HDR_STRIPPED;
			}
		}
		p = q;
	}
	if (!seen[0])
		bits |= DELIVER_HDR_NO_DATE;
	if (!seen[1])
		bits |= DELIVER_HDR_NO_FROM;
	if (!seen[2])
		bits |= DELIVER_HDR_NO_MSGID;
	return bits;
}

/* deliver_hdr_describe - human words for deliver_hdr_scan bits */
void deliver_hdr_describe(unsigned bits, char *out, size_t outlen)
{
	static const struct {
		unsigned bit;
		const char *text;
	} words[] = {
		{ DELIVER_HDR_NO_DATE, "added Date:" },
		{ DELIVER_HDR_NO_FROM, "added From:" },
		{ DELIVER_HDR_NO_MSGID, "added Message-Id:" },
		{ DELIVER_HDR_STRIPPED,
		  "dropped a Return-Path:, Original-Recipient: or repeated header" },
		{ DELIVER_HDR_NO_BODY, "appended an empty line" },
	};
	size_t i, n = 0;
	int w;

	if (outlen == 0)
		return;
	out[0] = 0;
	for (i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
		if (!(bits & words[i].bit))
			continue;
		w = snprintf(out + n, outlen - n, "%s%s", n ? ", " : "", words[i].text);
		if (w < 0 || (size_t) w >= outlen - n)
			break;
		n += (size_t) w;
	}
}

/* hexval - value of a hex digit, -1 if not one (xtext uses upper case) */
static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* deliver_xtext_decode - "+2B" -> "+"; malformed escapes are kept as they are */
char *deliver_xtext_decode(const char *s)
{
	char *out = xmalloc(strlen(s) + 1), *o = out;
	int hi, lo;

	while (*s) {
		if (s[0] == '+' && (hi = hexval((unsigned char) s[1])) >= 0
		    && (lo = hexval((unsigned char) s[2])) >= 0) {
			*o++ = (char) (hi * 16 + lo);
			s += 3;
		} else {
			*o++ = *s++;
		}
	}
	*o = 0;
	return out;
}
