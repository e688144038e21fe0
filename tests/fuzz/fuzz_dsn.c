/*
 * fuzz_dsn - the delivery status notification (deliver/dsn.c) built from
 * hostile parts: the sender, ENVID and recipients a client gave, the
 * ORCPT as stored (read back LENIENT), an upstream's reply text, and the
 * original message. Beside it RFC 3461 xtext read both ways
 * (smtp_xtext_decode(), smtp_orcpt_split()) on the same bytes.
 *
 * Input: byte 0: bit 0 SMTPUTF8 (RFC 6533's global report), bits 1-2 RET
 * (none, FULL, HDRS), bit 3 hdrs_only, bits 4-5 recipients less one;
 * then NUL-separated fields: sender, ENVID, and per recipient its
 * address, ORCPT, status, diagnostic and Remote-MTA (an empty ENVID,
 * ORCPT, diagnostic or Remote-MTA is none; a status is the relay's own,
 * "5.0.0" unless the field is digits and dots, as deliver_dsn_code()
 * writes); what is left is the
 * original message, NULs and all. Properties (abort()):
 *
 *   - xtext: whatever STRICT accepts, LENIENT accepts and reads alike
 *     (smtp.h), for the bare xtext and for an ORCPT's split; and STRICT
 *     accepts exactly RFC 3461's xtext (xchar: 33-126 but "+" and "=";
 *     hexchar: "+" and two of 0-9 A-F) whose decoded octets are
 *     printable US-ASCII (32-126, sections 4.2 and 4.4), read as a
 *     reference written here from the grammar decodes it;
 *   - the header block is the fields dsn.c writes, each line CRLF-ended,
 *     nothing else (no value starts a field or a line of its own);
 *   - the boundary occurs at a line's start exactly four times: the
 *     three parts' delimiters and the closing one, which ends the
 *     notification; the original can neither end a part early nor add one;
 *   - the two report parts are text: printable US-ASCII lines with CRLF
 *     (valid UTF-8 too in a global report), and each line of the status
 *     part is empty or one of its fields, one Final-Recipient a recipient;
 *   - the third part is the original whole, or its header block, as
 *     dsn_returns_full() says, with a CRLF added only where it lacked one;
 *   - dsn_build() says 8-bit exactly when an octet above 127 was written.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../deliver/dsn.h"
#include "../../smtp/smtp.h"
#include "../../util/buf.h"

#define FIELDS_MAX	(2 + 3 * 5)

static const char *const head_names[] = {
	"From: ", "To: ", "Subject: ", "Date: ", "Message-ID: ", "Auto-Submitted: ",
	"MIME-Version: ", "Content-Type: ", "\tboundary=\"", "Content-Transfer-Encoding: ", NULL
};

static const char *const status_names[] = {
	"Content-Description: ", "Content-Type: ", "Reporting-MTA: dns; ",
	"X-Idemrelay-Queue-ID: ", "Original-Envelope-Id: ", "Arrival-Date: ",
	"Final-Recipient: ", "Original-Recipient: ", "Action: failed", "Status: ",
	"Remote-MTA: dns; ", "Diagnostic-Code: smtp; ", NULL
};

/* named - does the line start with one of names? */
static int named(const char *l, size_t n, const char *const *names)
{
	for (; *names; names++)
		if (n >= strlen(*names) && memcmp(l, *names, strlen(*names)) == 0)
			return 1;
	return 0;
}

/* hexval - an upper-case hex digit's value, or -1 */
static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* ref_xtext - RFC 3461 xtext decoded to printable US-ASCII into out (len at most); -1 if not */
static int ref_xtext(const char *v, size_t len, char *out, size_t *n)
{
	size_t i;
	int c;

	for (*n = 0, i = 0; i < len; i++) {
		if (v[i] == '+') {
			if (i + 2 >= len || hexval(v[i + 1]) < 0 || hexval(v[i + 2]) < 0)
				return -1;
			c = hexval(v[i + 1]) * 16 + hexval(v[i + 2]);
			if (c < 32 || c > 126)
				return -1;
			i += 2;
		} else if ((unsigned char) v[i] < 33 || (unsigned char) v[i] > 126 || v[i] == '=') {
			return -1;
		} else {
			c = v[i];
		}
		out[(*n)++] = (char) c;
	}
	return 0;
}

/* xtext - STRICT's reading is LENIENT's wherever STRICT reads at all, and the grammar's */
static void xtext(const char *v, size_t len)
{
	static char ref[1 << 16];
	struct buf s = BUF_INIT, l = BUF_INIT;
	char *st, *sa, *lt, *la;
	size_t rn;
	int rrc = ref_xtext(v, len, ref, &rn), src;

	src = smtp_xtext_decode(&s, v, len, SMTP_XTEXT_STRICT);
	if (src == 0 && (smtp_xtext_decode(&l, v, len, SMTP_XTEXT_LENIENT) != 0 || s.len != l.len
			 || (s.len && memcmp(s.data, l.data, s.len) != 0)))
		abort();
	if ((src == 0) != (rrc == 0) || (src == 0 && (s.len != rn || (rn && memcmp(s.data, ref, rn)))))
		abort();			/* STRICT is not RFC 3461's xtext */
	buf_free(&s);
	buf_free(&l);
	if (smtp_orcpt_split(v, len, SMTP_XTEXT_STRICT, &st, &sa) != 0)
		return;
	if (smtp_orcpt_split(v, len, SMTP_XTEXT_STRICT, NULL, NULL) != 0
	    || smtp_orcpt_split(v, len, SMTP_XTEXT_LENIENT, &lt, &la) != 0)
		abort();
	if (strcmp(st, lt) != 0 || strcmp(sa, la) != 0)
		abort();
	free(st);
	free(sa);
	free(lt);
	free(la);
}

/* text - a report part's bytes: CRLF lines of printable ASCII (UTF-8 too if utf8) */
static void text(const char *p, size_t n, int utf8)
{
	size_t i, k;

	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char) p[i];

		if (c == '\r' && i + 1 < n && p[i + 1] == '\n')
			i++;
		else if (utf8 && c >= 0x80 && (k = smtp_utf8_len(p + i, n - i)) > 0)
			i += k - 1;
		else if ((c < 0x20 && c != '\t') || c >= 0x7f)
			abort();
	}
}

/* lines - every line of p[0..n) (CRLF-ended) is empty or named; Final-Recipient: lines counted */
static size_t lines(const char *p, size_t n, const char *const *names)
{
	const char *end = p + n, *e;
	size_t finals = 0;

	for (; p < end; p = e + 2) {
		if ((e = memmem(p, (size_t) (end - p), "\r\n", 2)) == NULL)
			abort();
		if (e > p && !named(p, (size_t) (e - p), names))
			abort();
		finals += (size_t) (e - p) >= 17 && memcmp(p, "Final-Recipient: ", 17) == 0;
	}
	return finals;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char copy[1 << 16];
	const char *f[FIELDS_MAX], *msg, *bnd_at, *q, *body, *part[4];
	struct dsn_rcpt rc[3];
	struct dsn_report r;
	struct buf out = BUF_INIT;
	char bnd[300], delim[310];
	size_t n_f, need, i, blen, found, ret_len, eoh;
	int eight, high;

	if (size < 1 || size > sizeof(copy))
		return 0;
	memcpy(copy, data + 1, size - 1);
	memset(&r, 0, sizeof(r));
	r.utf8 = data[0] & 1;
	r.ret = (data[0] >> 1) & 3;
	if (r.ret > SMTP_RET_HDRS)
		r.ret = SMTP_RET_NONE;
	r.hdrs_only = (data[0] >> 3) & 1;
	r.n_rcpts = ((data[0] >> 4) & 3) % 3 + 1;
	need = 2 + 5 * r.n_rcpts;
	msg = copy;
	for (n_f = 0; n_f < need; n_f++) {	/* fields; the rest is the message */
		q = memchr(msg, 0, (size_t) (copy + size - 1 - msg));
		if (q == NULL)
			return 0;
		f[n_f] = msg;
		msg = q + 1;
	}
	for (i = 0; i < need; i++)
		xtext(f[i], strlen(f[i]));
	r.hostname = "mx.example.org";
	r.qid = "0f3a9c2b7d1e";
	r.dsn_qid = "0f3a9c2b7d2a";
	r.sender = f[0];
	r.envid = f[1][0] ? f[1] : NULL;
	r.arrival = 1765000000000000LL;
	r.now = 1765000300000000LL;
	for (i = 0; i < r.n_rcpts; i++) {
		rc[i].addr = f[2 + 5 * i];
		rc[i].orcpt = f[3 + 5 * i][0] ? f[3 + 5 * i] : NULL;
		rc[i].status = f[4 + 5 * i][0] && strlen(f[4 + 5 * i]) < 12
		    && strspn(f[4 + 5 * i], "0123456789.") == strlen(f[4 + 5 * i])
		    ? f[4 + 5 * i] : "5.0.0";
		rc[i].diag = f[5 + 5 * i][0] ? f[5 + 5 * i] : NULL;
		rc[i].remote_mta = f[6 + 5 * i][0] ? f[6 + 5 * i] : NULL;
	}
	r.rcpts = rc;
	r.msg = msg;
	r.msg_len = (size_t) (copy + size - 1 - msg);

	eight = dsn_build(&r, &out);
	buf_putc(&out, 0);		/* a NUL after it, for the string functions below */
	out.len--;

	/* the header block */
	if ((eoh = (size_t) ((q = memmem(out.data, out.len, "\r\n\r\n", 4)) - out.data)) == 0 || !q)
		abort();
	text(out.data, eoh + 2, r.utf8);
	lines(out.data, eoh + 2, head_names);

	/* the boundary, and where it starts a line */
	if ((bnd_at = strstr(out.data, "\r\n\tboundary=\"")) == NULL || bnd_at > q)
		abort();
	bnd_at += 13;
	blen = strcspn(bnd_at, "\"");
	if (blen == 0 || blen >= sizeof(bnd) - 1)
		abort();
	memcpy(bnd, bnd_at, blen);
	bnd[blen] = 0;
	snprintf(delim, sizeof(delim), "\r\n--%s", bnd);
	found = 0;
	for (q = out.data; (q = memmem(q, (size_t) (out.data + out.len - q), delim,
				       strlen(delim))) != NULL; q += 2) {
		if (found < 4)
			part[found] = q + strlen(delim);
		found++;
	}
	if (found != 4)
		abort();		/* the original ended a part, or added one */
	for (i = 0; i < 3; i++)
		if (memcmp(part[i], "\r\n", 2) != 0)
			abort();
	if (strcmp(part[3], "--\r\n") != 0)
		abort();

	/* the report parts: text, every status line a field */
	q = out.data + eoh + 4;
	text(q, (size_t) (part[2] - strlen(delim) - q), r.utf8);
	body = memmem(part[1], (size_t) (part[2] - part[1]), "\r\n\r\n", 4);
	if (body == NULL)
		abort();
	if (lines(part[1] + 2, (size_t) (part[2] - strlen(delim) + 2 - part[1] - 2),
		  status_names) != r.n_rcpts)
		abort();

	/* the original, or its headers */
	body = memmem(part[2], (size_t) (part[3] - part[2]), "\r\n\r\n", 4);
	if (body == NULL)
		abort();
	body += 4;
	if (dsn_returns_full(&r)) {
		ret_len = r.msg_len;
	} else if (r.msg_len >= 2 && msg[0] == '\r' && msg[1] == '\n') {
		ret_len = 0;
	} else {
		q = memmem(msg, r.msg_len, "\r\n\r\n", 4);
		ret_len = q ? (size_t) (q - msg) + 2 : r.msg_len;
	}
	if ((size_t) (part[3] - strlen(delim) - body) < ret_len
	    || memcmp(body, msg, ret_len) != 0)
		abort();
	i = (size_t) (part[3] - strlen(delim) - body) - ret_len;	/* what follows it */
	if (i != (ret_len > 0 && (ret_len < 2 || memcmp(msg + ret_len - 2, "\r\n", 2) != 0) ? 2 : 0))
		abort();

	for (high = 0, i = 0; i < out.len && !high; i++)
		high = (unsigned char) out.data[i] >= 0x80;
	if (eight != (high || r.utf8) || (!eight && high))
		abort();
	buf_free(&out);
	return 0;
}
