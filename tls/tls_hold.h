/*
 * NAME
 *	tls_hold 3h
 * SUMMARY
 *	the holding BIO: a server session's records, sent once a turn
 * DESCRIPTION
 *	OpenSSL writes a server session's records into a struct tls_hold
 *	through tls_hold_bio(); tls_hold_send() writes what is held to the
 *	socket in one write(2). TLS_HOLD_MAX and the buffer's room bound
 *	what a session whose client stops reading keeps (tls_hold.c).
 *	The BIO method is made at the first tls_hold_bio(), once a process.
 */
#ifndef TLS_TLS_HOLD_H
#define TLS_TLS_HOLD_H

#include <openssl/bio.h>
#include <openssl/ssl.h>

#include "../util/buf.h"

#define TLS_HOLD_MAX	16384		/* held octets past which a write sends them first */
#define TLS_RECORD_MAX	(SSL3_RT_HEADER_LENGTH + SSL3_RT_MAX_PLAIN_LENGTH + 256)	/* RFC 8446 5.2 */
#define TLS_HOLD_ROOM	(TLS_RECORD_MAX + 1)	/* the held buffer's most: one record, its NUL */
#define TLS_RECORD_MORE	(TLS_RECORD_MAX - SSL3_RT_MAX_PLAIN_LENGTH)	/* a record's most past its data */

struct tls_hold {
	int     fd;			/* the socket; not owned */
	struct buf held;		/* owned: records written, not yet sent */
};

BIO *tls_hold_bio(struct tls_hold *h);		/* a BIO writing into h; NULL if OpenSSL fails */
int tls_hold_send(struct tls_hold *h);		/* 0 all sent, IO_AGAIN, IO_ERROR (errno) */
int tls_hold_room(struct tls_hold *h, size_t len);	/* 1 yes, 0 not now, IO_ERROR */
void tls_hold_trim(struct tls_hold *h);		/* nothing held: give the room back */

#endif
