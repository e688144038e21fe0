/*
 * NAME
 *	deliver_policy 3h
 * SUMMARY
 *	the pure decisions of delivery: backoff, outcome, replies
 * DESCRIPTION
 *	Everything here is a function of its arguments (no store, no
 *	sockets, no clock), so that the unit tests can pin it down.
 *
 *	deliver_backoff() is the wait before the next attempt:
 *	min(max, first * 2^(attempts-1)) seconds.
 *
 *	deliver_classify() turns what libesmtp reported for one recipient
 *	into an outcome (see the table in deliver_policy.c).

 */
#ifndef DELIVER_DELIVER_POLICY_H
#define DELIVER_DELIVER_POLICY_H

#include <stddef.h>
#include <stdint.h>

#define DELIVER_DSN_SIZE	16	/* an RFC 3463 code ("4.7.5") and its NUL, with room */

/* deliver_backoff - seconds to wait after attempts (>= 1); first, max >= 1 s */
int64_t deliver_backoff(int64_t first, int64_t max, int attempts);

/* per-recipient outcome of one attempt */
enum deliver_outcome {
	DELIVER_DEFERRED,	/* try again later */
	DELIVER_SENT,		/* upstream took responsibility */
	DELIVER_BOUNCED,	/* permanent failure */
	DELIVER_AMBIGUOUS,	/* final dot out, no reply: upstream.ambiguous decides */
};

/* which reply explains the outcome */
enum deliver_source {
	DELIVER_SRC_SESSION,	/* no reply: connection or protocol failure */
	DELIVER_SRC_MAIL,	/* the MAIL FROM reply */
	DELIVER_SRC_RCPT,	/* the RCPT TO reply */
	DELIVER_SRC_DATA,	/* the DATA / end-of-data reply */
};

struct deliver_verdict {
	enum deliver_outcome outcome;
	enum deliver_source source;
};

/*
 * deliver_classify - one recipient's outcome. Codes are SMTP reply codes,
 * 0 when no reply was read. marked: the inflight mark was durably set
 * (the final dot followed); final: a reply to DATA / the final dot was
 * read after the content (data_code is that reply).
 */
struct deliver_verdict deliver_classify(int mail_code, int rcpt_code, int data_code,
					int marked, int final);

/*
 * deliver_reply_format - "550 5.1.1 text" on one line: CR/LF and other
 * controls become spaces, runs of spaces collapse, the result is
 * truncated to fit (outlen > 0). enh_class 0 means no enhanced code.
 */
void deliver_reply_format(char *out, size_t outlen, int code, int enh_class,
			  int enh_subject, int enh_detail, const char *text);

/*
 * deliver_dsn_code - the RFC 3463 status of a reply line as made by
 * deliver_reply_format(): its enhanced code if it has one (the class
 * forced to agree with the reply code), else X.0.0. Returns 0, or -1
 * if the line does not start with a 2xx/4xx/5xx code (out is "4.0.0").
 */
int deliver_dsn_code(char out[DELIVER_DSN_SIZE], const char *reply);

#endif
