/*
 * NAME
 *	tls_int 3h
 * SUMMARY
 *	inside tls/: the server context and a TLS session as a transport
 * DESCRIPTION
 *	struct tls is the server's context (tls.c); struct tls_io a TLS
 *	session as a struct io (tls_io.c), the server's with its holding BIO
 *	(tls_hold.h) and its ticket slot (tls_ticket.h), or the client's
 *	(tls_client.c, through tls_io_wrap). tls_ctx_open() starts both
 *	sides' contexts, and tls_errtext() turns OpenSSL's errors into text
 *	for both.
 */
#ifndef TLS_TLS_INT_H
#define TLS_TLS_INT_H

#include <stddef.h>

#include <openssl/ssl.h>

#include "io.h"
#include "tls_hold.h"
#include "tls_ticket.h"

#define TLS_FP_LEN	(2 * 32 + 1)

struct tls {
	SSL_CTX *ctx;			/* owned reference; each SSL holds its own */
	const char *cert, *key, *groups;	/* the configuration's (it outlives us); groups NULL: default */
	char    fingerprint[TLS_FP_LEN];
	struct tls_tkt tkt[TLS_TKT_SLOTS];	/* the client addresses' ticket counts */
};

struct tls_io {
	struct io io;			/* first: a struct io * points here */
	SSL    *ssl;			/* owned */
	int     fatal;			/* after a fatal error: no close_notify */
	int     bye;			/* the close_notify is written (tls_goodbye) */
	size_t  retry_len;		/* a write to repeat with this length */
	struct tls_ticket tkt;		/* the client address's slot */
	struct tls_hold hold;		/* records written, not yet sent (tls_flush) */
};

struct io *tls_io_wrap(SSL *ssl, int fd);	/* takes both; handshake done */

SSL_CTX *tls_ctx_open(const SSL_METHOD *method, char *err, size_t errlen);	/* both sides' */

/*
 * tls_errtext - what (printf's format), ": ", and the first queued
 * OpenSSL error, or errno's text, or "connection closed" (an end of
 * file); clears the queue
 */
void tls_errtext(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
