/*
 * NAME
 *	deliver_policy 3
 * SUMMARY
 *	backoff, outcome classification, reply text
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
 *	dot may have left: only then can the outcome be ambiguous. A marked
 *	recipient with no RCPT reply is ambiguous too (with BDAT and
 *	PIPELINING a client sends the content before it reads the RCPT
 *	replies; the bridge hides CHUNKING from libesmtp, but this table
 *	does not depend on that).
 */
#include <ctype.h>
#include <stdio.h>

#include "deliver_policy.h"

/* deliver_backoff - min(max, first * 2^(attempts-1)), without overflow */
int64_t deliver_backoff(int64_t first, int64_t max, int attempts)
{
	int64_t wait = first;
	int i;

	for (i = 1; i < attempts && wait < max; i++)
		wait = wait > max / 2 ? max : wait * 2;
	return wait < max ? wait : max;
}

/* deliver_classify - one recipient's outcome; the table is in the file header */
struct deliver_verdict deliver_classify(int mail_code, int rcpt_code, int data_code,
					int marked, int final)
{
	int mail = mail_code / 100, rcpt = rcpt_code / 100, data = data_code / 100;

	if (rcpt == 5)
		return (struct deliver_verdict) { DELIVER_BOUNCED, DELIVER_SRC_RCPT };
	if (rcpt == 4)
		return (struct deliver_verdict) { DELIVER_DEFERRED, DELIVER_SRC_RCPT };
	if (marked) {
		if (final && data == 2 && rcpt == 2)
			return (struct deliver_verdict) { DELIVER_SENT, DELIVER_SRC_DATA };
		if (final && data == 5)
			return (struct deliver_verdict) { DELIVER_BOUNCED, DELIVER_SRC_DATA };
		if (final && data == 4)
			return (struct deliver_verdict) { DELIVER_DEFERRED, DELIVER_SRC_DATA };
		return (struct deliver_verdict) { DELIVER_AMBIGUOUS, DELIVER_SRC_SESSION };
	}
	if (mail == 5)
		return (struct deliver_verdict) { DELIVER_BOUNCED, DELIVER_SRC_MAIL };
	if (mail == 4)
		return (struct deliver_verdict) { DELIVER_DEFERRED, DELIVER_SRC_MAIL };
	if (final && data == 5 && rcpt == 2)
		return (struct deliver_verdict) { DELIVER_BOUNCED, DELIVER_SRC_DATA };
	if (final && data == 4)
		return (struct deliver_verdict) { DELIVER_DEFERRED, DELIVER_SRC_DATA };
	return (struct deliver_verdict) { DELIVER_DEFERRED, DELIVER_SRC_SESSION };
}

/* deliver_reply_format - one clean line: "code [x.y.z] text" */
void deliver_reply_format(char *out, size_t outlen, int code, int enh_class,
			  int enh_subject, int enh_detail, const char *text)
{
	size_t n;
	int space = 1, w;

	if (enh_class > 0)
		w = snprintf(out, outlen, "%d %d.%d.%d", code, enh_class, enh_subject, enh_detail);
	else
		w = snprintf(out, outlen, "%d", code);
	n = (size_t) w < outlen ? (size_t) w : outlen - 1;
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
int deliver_dsn_code(char out[DELIVER_DSN_SIZE], const char *reply)
{
	int cls, subj = 0, det = 0, n = 0;

	if (!isdigit((unsigned char) reply[0]) || !isdigit((unsigned char) reply[1])
	    || !isdigit((unsigned char) reply[2]) || (reply[3] != ' ' && reply[3] != 0)
	    || ((cls = reply[0] - '0') != 2 && cls != 4 && cls != 5)) {
		snprintf(out, DELIVER_DSN_SIZE, "4.0.0");
		return -1;
	}
	if (reply[3] == ' ' && (reply[4] == '2' || reply[4] == '4' || reply[4] == '5')
	    && sscanf(reply + 5, ".%3d.%3d%n", &subj, &det, &n) == 2 && n > 0
	    && (reply[5 + n] == ' ' || reply[5 + n] == 0) && subj >= 0 && det >= 0
	    && subj <= 999 && det <= 999)
		snprintf(out, DELIVER_DSN_SIZE, "%c.%d.%d", '0' + cls, subj, det);
	else
		snprintf(out, DELIVER_DSN_SIZE, "%c.0.0", '0' + cls);
	return 0;
}
