/*
 * NAME
 *	deliver_tls 3h
 * SUMMARY
 *	upstream TLS for the bridge (deliver_bridge.h)
 * DESCRIPTION
 *	libesmtp 1.1.0 speaks to the upstream in plain text only; TLS is
 *	done by the bridge, with OpenSSL, through these.
 *
 *	deliver_tls_ctx_conf() makes the client context from upstream.tls_*
 *	(deliver_tls_ctx_new() the plain one it starts from): TLS 1.2 or later,
 *	upstream.tls_ca or else the system CA store (OpenSSL's default paths,
 *	so SSL_CERT_FILE and SSL_CERT_DIR apply) unless verification is off,
 *	or only the pins of upstream.tls_fingerprint; and, per connection
 *	attempt (deliver_tls_ctx_host), the configured host name, checked
 *	against the certificate by OpenSSL and sent as SNI.
 *
 *	deliver_tls_connect() does the client handshake on a connected
 *	socket and returns the session as a transport (io.h), the same kind
 *	the bridge uses for a plain upstream.
 */
#ifndef DELIVER_ESMTP_DELIVER_TLS_H
#define DELIVER_ESMTP_DELIVER_TLS_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <openssl/ssl.h>

#include "../../conf/conf.h"
#include "../../tls/io.h"
#include "../deliver_policy.h"

/* deliver_tls_ctx_new - a client context; verify 0: accept any certificate */
SSL_CTX *deliver_tls_ctx_new(int verify, char *err, size_t errlen);

/*
 * deliver_tls_ctx_conf - the context upstream.tls_* ask for: with
 * tls_fingerprint, a certificate is accepted if and only if it or its
 * public key matches a pin; else with tls_verify, its chain must lead to
 * tls_ca (or the system store) and name the host (or tls_servername).
 * NULL with err (naming the setting) when tls_ca cannot be loaded.
 */
SSL_CTX *deliver_tls_ctx_conf(const struct conf *c, char *err, size_t errlen);

/* deliver_tls_digests - SHA-256 of the certificate and of its SubjectPublicKeyInfo */
int deliver_tls_digests(X509 *cert, uint8_t crt[32], uint8_t spki[32]);

/* deliver_tls_ctx_host - the name the next connection checks and sends (SNI) */
int deliver_tls_ctx_host(SSL_CTX *ctx, const char *host);

/* deliver_tls_describe - "TLSv1.3 with cipher X (256/256 bits)" */
void deliver_tls_describe(const SSL *ssl, char *out, size_t outlen);

/*
 * deliver_tls_connect - the client handshake on the connected non-blocking
 * socket fd, within the deadline (CLOCK_MONOTONIC), the certificate checked
 * as the context says. Returns a transport that owns fd, described in desc;
 * NULL on failure, with why and an RFC 3463 code in dsn (fd still the
 * caller's).
 */
struct io *deliver_tls_connect(SSL_CTX *ctx, int fd, const struct timespec *deadline,
			       char *desc, size_t desclen, char *why, size_t whylen,
			       char dsn[DELIVER_DSN_SIZE]);

#endif
