/*
 * NAME
 *	smtp_parse 3h
 * SUMMARY
 *	SMTP command argument parsing (engine-internal)
 * DESCRIPTION
 *	Strict parsers for what follows the MAIL, RCPT and BDAT verbs: the
 *	path (RFC 5321 section 4.1.2, with RFC 6531's UTF-8), the ESMTP
 *	parameters (SIZE, BODY, RET, ENVID, SMTPUTF8; NOTIFY, ORCPT), xtext (RFC 3461 section 4) and the BDAT chunk
 *	size (RFC 3030 section 3). Every parser
 *	takes a pointer and a length, so a NUL byte is just another invalid
 *	character. On failure the complete SMTP reply line (no CRLF) is
 *	written into the caller's reply buffer.
 */
#ifndef SMTP_SMTP_PARSE_H
#define SMTP_SMTP_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include "smtp.h"

#define SMTP_REPLY_MAX	256	/* one reply line, no CRLF */
#define SMTP_LOCAL_MAX	64	/* local-part octets (RFC 5321 4.5.3.1.1) */
#define SMTP_ADDR_MAX	254	/* mailbox octets, as in RFC 3696 errata */
#define SMTP_DOMAIN_MAX	253
#define SMTP_LABEL_MAX	63
#define SMTP_ENVID_MAX	100	/* decoded ENVID (RFC 3461 4.4) */
#define SMTP_ORCPT_MAX	500	/* ORCPT value as given (RFC 3461 4.2) */
#define SMTP_BDAT_DIGITS_MAX 20	/* chunk-size digits (RFC 3030 3) */

/*
 * smtp_parse_path - parse "<...>" at p. allow_null accepts "<>". On
 * success returns 0, sets *addr (owned by the caller; "" for <>, source
 * route stripped) and *used (octets up to and including '>').
 */
int smtp_parse_path(const char *p, size_t len, int allow_null,
		    char **addr, size_t *used);

/*
 * smtp_parse_mail - parse "FROM:<path> [params]" into tx (from, size,
 * body, ret, envid, smtputf8). limit is message_size (0: none); utf8:
 * SMTPUTF8 is offered. 0 or -1 + reply.
 */
int smtp_parse_mail(const char *args, size_t len, uint64_t limit, int utf8,
		    struct smtp_tx *tx, char reply[SMTP_REPLY_MAX]);

/*
 * smtp_parse_rcpt - parse "TO:<path> [params]" into r; utf8: the
 * transaction declared SMTPUTF8 (a UTF-8 path is allowed). 0 or -1 + reply
 */
int smtp_parse_rcpt(const char *args, size_t len, int utf8, struct smtp_rcpt *r,
		    char reply[SMTP_REPLY_MAX]);

/*
 * smtp_parse_bdat - parse "chunk-size [LAST]" after BDAT. 0 and *size,
 * *last, or -1 + reply (501: the chunk's length is then unknown).
 */
int smtp_parse_bdat(const char *args, size_t len, uint64_t *size, int *last,
		    char reply[SMTP_REPLY_MAX]);

#endif
