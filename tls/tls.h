/*
 * NAME
 *	tls 3h
 * SUMMARY
 *	inbound TLS: the server context, and TLS as an io transport
 * DESCRIPTION
 *	tls_new() builds the OpenSSL server context from the certificate
 *	chain and key files: TLS 1.2 and up, no compression, the server's
 *	cipher preference, no renegotiation, the key exchange groups of
 *	tls.groups (tls.c says why not OpenSSL's defaults). It runs at
 *	start-up, before the privileges are dropped, so the key may be
 *	readable by root only. It keeps the paths and groups it is given,
 *	not copies: they must outlive it (the configuration's do).
 *
 *	tls_reload() (SIGHUP) builds a new context from the same files and
 *	uses it for new connections; on any failure the old one stays and
 *	the reason is returned. Connections keep the context they started
 *	with (OpenSSL counts the references). After a privilege drop the
 *	files must be readable by the unprivileged user for a reload to work.
 *
 *	tls_io_new() starts a server-side TLS session on a connected socket,
 *	as a struct io (io.h) whose handshake is still to be done; the
 *	client's address decides whether it gets a session ticket
 *	(tls_ticket.c).
 */
#ifndef TLS_TLS_H
#define TLS_TLS_H

#include <stddef.h>

#include <openssl/ssl.h>

#include "io.h"

struct tls;

int tls_new(struct tls **out, const char *cert, const char *key, const char *groups,
	    char *err, size_t errlen);			/* groups NULL: X25519, P-256, P-384 */
int tls_reload(struct tls *t, char *err, size_t errlen);	/* 0, or -1 and the old context stays */
void tls_free(struct tls *t);				/* NULL-safe */
const char *tls_fingerprint(const struct tls *t);	/* SHA-256 of the certificate in use, hex */
struct io *tls_io_new(struct tls *t, int fd, const char *addr);	/* takes the socket */
void tls_io_describe(const struct io *io, char *buf, size_t len);	/* its handshake done */

#endif
