/*
 * NAME
 *	dsn 3h
 * SUMMARY
 *	RFC 3464 delivery status notifications (bounces), as message text
 * DESCRIPTION
 *	dsn_build() writes a complete multipart/report message (CRLF line
 *	ends) telling the sender which recipients failed and why: a text
 *	part for people, a message/delivery-status part for programs, and
 *	the original message (RET=FULL, or by default when it is small) or
 *	only its headers (RET=HDRS, a large message, or hdrs_only; the text
 *	part says so when the whole was asked for or by default). For a message that
 *	came with SMTPUTF8 (utf8), the report is RFC 6533's: UTF-8 addresses
 *	kept (type "utf-8" where not ASCII), message/global-delivery-status,
 *	message/global or message/global-headers; it must then go out with
 *	SMTPUTF8 itself. It is a pure
 *	function of its arguments: the caller gives the clock and the QIDs.
 */
#ifndef DELIVER_DSN_H
#define DELIVER_DSN_H

#include <stddef.h>
#include <stdint.h>

#include "../util/buf.h"

/* the original message goes back whole up to this size when RET is not given */
#define DSN_FULL_LIMIT	50000

struct dsn_rcpt {
	const char *addr;	/* Final-Recipient */
	const char *orcpt;	/* ORCPT as given ("rfc822;a+2Bb@c"), or NULL */
	const char *status;	/* "5.1.1" */
	const char *diag;	/* upstream reply "550 5.1.1 ...", or NULL */
	const char *remote_mta;	/* upstream host name, or NULL */
};

struct dsn_report {
	const char *hostname;	/* Reporting-MTA, and MAILER-DAEMON@hostname */
	const char *qid;	/* the original message */
	const char *dsn_qid;	/* the notification's own QID (Message-ID) */
	const char *sender;	/* original envelope sender: where this goes */
	const char *envid;	/* ENVID, or NULL */
	int ret;		/* enum smtp_ret */
	int hdrs_only;		/* the headers alone, whatever ret says: no room for the whole */
	int64_t arrival;	/* when the original was accepted, Unix us */
	int64_t now;		/* Date:, Unix us */
	const struct dsn_rcpt *rcpts;
	size_t n_rcpts;
	const char *msg;	/* the original message, CRLF lines */
	size_t msg_len;
	int utf8;		/* the original came with SMTPUTF8: RFC 6533 */
};

/* dsn_build - append the notification to out; returns 1 if it holds 8-bit data */
int dsn_build(const struct dsn_report *r, struct buf *out);

/* dsn_returns_full - 1 if r returns the whole original, 0 if its headers only */
int dsn_returns_full(const struct dsn_report *r);

#endif
