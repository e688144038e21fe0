/*
 * NAME
 *	dsn 3
 * SUMMARY
 *	build RFC 3464 delivery status notifications
 * DESCRIPTION
 *	See dsn.h. Layout (RFC 6522 multipart/report):
 *
 *	    headers: From MAILER-DAEMON, To the sender, Subject, Date,
 *	             Message-ID, Auto-Submitted, MIME
 *	    part 1   text/plain, one line per failed recipient; it says so
 *	             when only the headers are returned though RET was not
 *	             HDRS (RFC 3461 and RFC 3464 let a notice return
 *	             just the headers)
 *	    part 2   message/delivery-status (message/global-delivery-status
 *	             for an SMTPUTF8 message, RFC 6533): per-message fields, then
 *	             per recipient Final-Recipient, Original-Recipient,
 *	             Action: failed, Status, Remote-MTA, Diagnostic-Code
 *	    part 3   message/rfc822 (whole message) or text/rfc822-headers
 *
 *	Every value that came from outside (addresses, ENVID, upstream
 *	replies) is written through put_text(), so no CR, LF or control
 *	character can start a header of its own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../smtp/smtp.h"
#include "../util/clock.h"
#include "dsn.h"

/*
 * put_text - append text with controls and 8-bit bytes made harmless;
 * utf8: valid UTF-8 characters are kept (RFC 6533), other octets not
 */
static void put_text(struct buf *b, const char *s, int utf8)
{
	size_t n;

	for (; s && *s; s++) {
		unsigned char c = (unsigned char) *s;

		if (utf8 && c >= 0x80 && (n = smtp_utf8_len(s, strlen(s))) > 0) {
			buf_append(b, s, n);
			s += n - 1;
			continue;
		}
		buf_putc(b, c >= 0x20 && c < 0x7f ? (char) c : (c == '\t' ? ' ' : '?'));
	}
}

/* put_field - "Name: value" and CRLF, the value cleaned (put_text); nothing when there is none */
static void put_field(struct buf *b, const char *name, const char *value, int utf8)
{
	if (value == NULL)
		return;
	buf_printf(b, "%s", name);
	put_text(b, value, utf8);
	buf_printf(b, "\r\n");
}

/* put_addr_type - "rfc822; " or, for a UTF-8 address in a global report, "utf-8; " */
static void put_addr_type(struct buf *b, const char *addr, int utf8)
{
	int ascii = addr == NULL || smtp_ascii(addr, strlen(addr));

	buf_printf(b, utf8 && !ascii ? "utf-8; " : "rfc822; ");
}

/* header_len - length of the header block, each line with its CRLF, no empty line */
static size_t header_len(const char *msg, size_t len)
{
	const char *p;

	if (len >= 2 && msg[0] == '\r' && msg[1] == '\n')
		return 0;
	p = memmem(msg, len, "\r\n\r\n", 4);
	return p ? (size_t) (p - msg) + 2 : len;
}

/* make_boundary - a boundary that does not occur in the original */
static void make_boundary(const struct dsn_report *r, char *out, size_t outlen)
{
	size_t n;

	n = (size_t) snprintf(out, outlen, "%s.%lld/", r->qid, (long long) (r->now / 1000000));
	if (n < outlen)
		for (const char *h = r->hostname; *h && n + 1 < outlen; h++)
			out[n++] = (*h > ' ' && *h < 0x7f && *h != '"') ? *h : '_';
	out[n < outlen ? n : outlen - 1] = 0;
	while (r->msg_len && memmem(r->msg, r->msg_len, out, strlen(out)) != NULL
	       && strlen(out) + 2 < outlen)
		strcat(out, "=_");
}

/* put_orcpt - "Original-Recipient: rfc822; decoded" from the ORCPT parameter */
static void put_orcpt(struct buf *b, const char *orcpt)
{
	char *type, *addr;

	if (smtp_orcpt_split(orcpt, strlen(orcpt), SMTP_XTEXT_LENIENT, &type, &addr) < 0)
		return;
	buf_printf(b, "Original-Recipient: ");
	put_text(b, type, 0);
	buf_printf(b, "; ");
	put_text(b, addr, 0);
	buf_printf(b, "\r\n");
	free(type);
	free(addr);
}

/* put_text_part - the part for people */
static void put_text_part(const struct dsn_report *r, struct buf *b, const char *bnd)
{
	size_t i;

	buf_printf(b, "--%s\r\n", bnd);
	buf_printf(b, "Content-Description: Notification\r\n"
		   "Content-Type: text/plain; charset=%s\r\n\r\n", r->utf8 ? "utf-8" : "us-ascii");
	buf_printf(b, "This is the mail system at host ");
	put_text(b, r->hostname, 0);
	buf_printf(b, ".\r\n\r\n"
		   "I'm sorry to have to inform you that your message could not\r\n"
		   "be delivered to one or more recipients. ");
	if (dsn_returns_full(r) || r->ret == SMTP_RET_HDRS)
		buf_printf(b, "It's attached below.\r\n\r\n");
	else
		buf_printf(b, "The headers of your\r\nmessage are attached below;"
			   " its body could not be returned.\r\n\r\n");
	for (i = 0; i < r->n_rcpts; i++) {
		const struct dsn_rcpt *rc = &r->rcpts[i];

		buf_printf(b, "<");
		put_text(b, rc->addr, r->utf8);
		buf_printf(b, ">: ");
		if (rc->remote_mta) {
			buf_printf(b, "host ");
			put_text(b, rc->remote_mta, 0);
			buf_printf(b, " said: ");
		}
		if (rc->diag)
			put_text(b, rc->diag, r->utf8);
		else
			buf_printf(b, "delivery failed (status %s)", rc->status);
		buf_printf(b, "\r\n\r\n");
	}
}

/* put_status_part - the message/delivery-status part for programs */
static void put_status_part(const struct dsn_report *r, struct buf *b, const char *bnd)
{
	char date[64];
	size_t i;

	buf_printf(b, "--%s\r\n", bnd);
	buf_printf(b, "Content-Description: Delivery report\r\n"
		   "Content-Type: message/%sdelivery-status\r\n\r\n", r->utf8 ? "global-" : "");
	put_field(b, "Reporting-MTA: dns; ", r->hostname, 0);
	put_field(b, "X-Idemrelay-Queue-ID: ", r->qid, 0);
	put_field(b, "Original-Envelope-Id: ", r->envid, 0);
	buf_printf(b, "Arrival-Date: %s\r\n", clock_date(date, sizeof(date), r->arrival));
	for (i = 0; i < r->n_rcpts; i++) {
		const struct dsn_rcpt *rc = &r->rcpts[i];

		buf_printf(b, "\r\nFinal-Recipient: ");
		put_addr_type(b, rc->addr, r->utf8);
		put_text(b, rc->addr, r->utf8);
		buf_printf(b, "\r\n");
		if (rc->orcpt)
			put_orcpt(b, rc->orcpt);
		buf_printf(b, "Action: failed\r\n");
		put_field(b, "Status: ", rc->status, 0);
		put_field(b, "Remote-MTA: dns; ", rc->remote_mta, 0);
		put_field(b, "Diagnostic-Code: smtp; ", rc->diag, r->utf8);
	}
	buf_printf(b, "\r\n");
}

/* dsn_returns_full - does r return the whole original (else its headers)? */
int dsn_returns_full(const struct dsn_report *r)
{
	if (r->hdrs_only)
		return 0;
	return r->ret == SMTP_RET_FULL || (r->ret != SMTP_RET_HDRS && r->msg_len <= DSN_FULL_LIMIT);
}

/* dsn_build - the whole notification */
int dsn_build(const struct dsn_report *r, struct buf *out)
{
	char bnd[256], date[64];
	size_t ret_len;
	int full, eight;

	full = dsn_returns_full(r);
	ret_len = full ? r->msg_len : header_len(r->msg, r->msg_len);
	eight = !smtp_ascii(r->msg, ret_len);
	make_boundary(r, bnd, sizeof(bnd));

	buf_printf(out, "From: MAILER-DAEMON@");
	put_text(out, r->hostname, 0);
	buf_printf(out, " (Mail Delivery System)\r\nTo: <");
	put_text(out, r->sender, r->utf8);
	buf_printf(out, ">\r\nSubject: Undelivered Mail Returned to Sender\r\n");
	buf_printf(out, "Date: %s\r\nMessage-ID: <", clock_date(date, sizeof(date), r->now));
	put_text(out, r->dsn_qid, 0);
	buf_printf(out, "@");
	put_text(out, r->hostname, 0);
	buf_printf(out, ">\r\nAuto-Submitted: auto-replied\r\nMIME-Version: 1.0\r\n"
		   "Content-Type: multipart/report; report-type=%sdelivery-status;\r\n"
		   "\tboundary=\"%s\"\r\n", r->utf8 ? "global-" : "", bnd);
	if (r->utf8)
		eight = 1;	/* UTF-8 in the report itself: 8bit, sent with SMTPUTF8 */
	if (eight)
		buf_printf(out, "Content-Transfer-Encoding: 8bit\r\n");
	buf_printf(out, "\r\nThis is a MIME-encapsulated message.\r\n\r\n");

	put_text_part(r, out, bnd);
	put_status_part(r, out, bnd);

	buf_printf(out, "--%s\r\n", bnd);
	if (full)
		buf_printf(out, "Content-Description: Undelivered Message\r\n"
			   "Content-Type: message/%s\r\n", r->utf8 ? "global" : "rfc822");
	else
		buf_printf(out, "Content-Description: Undelivered Message Headers\r\n"
			   "Content-Type: %s\r\n", r->utf8 ? "message/global-headers"
			   : "text/rfc822-headers");
	if (eight)
		buf_printf(out, "Content-Transfer-Encoding: 8bit\r\n");
	buf_printf(out, "\r\n");
	buf_append(out, r->msg, ret_len);
	if (ret_len > 0 && (ret_len < 2 || r->msg[ret_len - 2] != '\r'
			    || r->msg[ret_len - 1] != '\n'))
		buf_printf(out, "\r\n");
	buf_printf(out, "\r\n--%s--\r\n", bnd);
	return eight;
}
