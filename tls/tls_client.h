/*
 * NAME
 *	tls_client 3h
 * SUMMARY
 *	outbound TLS: client contexts and the client handshake
 * DESCRIPTION
 *	The client side of tls.h's server: libesmtp 1.1.0 speaks to the
 *	upstream in plain text only; TLS is done by delivery's bridge
 *	(deliver/esmtp/deliver_bridge.h), with OpenSSL, through these.
 *
 *	tls_client_ctx_conf() makes the client context from upstream.tls_*:
 *	TLS 1.2 or later, upstream.tls_ca or else the system CA store
 *	(OpenSSL's default paths, so SSL_CERT_FILE and SSL_CERT_DIR apply)
 *	unless verification is off (the CAs loaded at most once a minute,
 *	shared by the contexts made meanwhile), or only the pins of
 *	upstream.tls_fingerprint; and, per connection attempt
 *	(tls_client_ctx_host), the configured host name, checked against
 *	the certificate by OpenSSL and sent as SNI.
 *
 *	tls_client_connect() does the client handshake on a connected
 *	socket and returns the session as a transport (io.h), the same kind
 *	the bridge uses for a plain upstream.
 */
#ifndef TLS_TLS_CLIENT_H
#define TLS_TLS_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <openssl/ssl.h>

#include "../conf/conf.h"
#include "io.h"

/*
 * tls_client_ctx_conf - the context upstream.tls_* ask for: with
 * tls_fingerprint, a certificate is accepted if and only if it or its
 * public key matches a pin; else with tls_verify, its chain must lead to
 * tls_ca (or the system store) and name the host (or tls_servername).
 * NULL with err (naming the setting) when tls_ca cannot be loaded. The
 * context keeps u's servername and pins: u must outlive it (a conf's does).
 */
SSL_CTX *tls_client_ctx_conf(const struct conf_upstream *u, char *err, size_t errlen);

/* tls_client_digests - SHA-256 of the certificate and of its SubjectPublicKeyInfo */
int tls_client_digests(X509 *cert, uint8_t crt[32], uint8_t spki[32]);

/* tls_client_ctx_host - the name the next connection checks and sends (SNI) */
int tls_client_ctx_host(SSL_CTX *ctx, const char *host);

/*
 * tls_client_connect - the client handshake on the connected non-blocking
 * socket fd, within the deadline (CLOCK_MONOTONIC), the certificate checked
 * as the context says. Returns a transport that owns fd, described in desc
 * as tls_io_describe() describes the server's (tls.h); NULL on failure, with why (fd
 * still the caller's).
 */
struct io *tls_client_connect(SSL_CTX *ctx, int fd, const struct timespec *deadline,
			      char *desc, size_t desclen, char *why, size_t whylen);

#endif
