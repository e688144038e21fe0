/*
 * NAME
 *	deliver_tls 3h
 * SUMMARY
 *	upstream TLS for deliver_smtp.c
 * DESCRIPTION
 *	libesmtp 1.1.0 speaks to the upstream in plain text only; TLS is
 *	done here, with OpenSSL.
 *
 *	deliver_tls_ctx_new() makes the client context: TLS 1.2 or later,
 *	the system CA store (OpenSSL's default paths, so SSL_CERT_FILE and
 *	SSL_CERT_DIR apply) unless verification is off, and, per connection
 *	attempt (deliver_tls_ctx_host), the configured host name, checked
 *	against the certificate by OpenSSL and sent as SNI.
 *
 *	The bridge: deliver_tls_bridge_open() connects to the upstream and
 *	establishes TLS itself, from the first byte (implicit TLS, port
 *	465) or after the server's greeting, EHLO and STARTTLS (required:
 *	no STARTTLS, no bridge). It then listens on an ephemeral 127.0.0.1
 *	port; libesmtp connects there, gets the server's greeting, and a
 *	thread copies bytes between the two. Only a connection from a
 *	socket of this process is served.
 */
#ifndef RELAY_DELIVER_TLS_H
#define RELAY_DELIVER_TLS_H

#include <stddef.h>
#include <sys/socket.h>

#include <openssl/ssl.h>

/* deliver_tls_ctx_new - a client context; verify 0: accept any certificate */
SSL_CTX *deliver_tls_ctx_new(int verify, char *err, size_t errlen);

/* deliver_tls_ctx_host - the name the next connection checks and sends (SNI) */
int deliver_tls_ctx_host(SSL_CTX *ctx, const char *host);

/* deliver_tls_describe - "TLSv1.3 with cipher X (256/256 bits)" */
void deliver_tls_describe(const SSL *ssl, char *out, size_t outlen);

struct deliver_tls_bridge;

/*
 * deliver_tls_bridge_open - connect to sa and establish TLS within
 * timeout_ms: from the first byte if helo is NULL, else after EHLO helo
 * and STARTTLS. The certificate is checked as the context says. NULL on
 * failure, with why and an RFC 3463 code in dsn ("4.4.1": no connection).
 */
struct deliver_tls_bridge *deliver_tls_bridge_open(SSL_CTX *ctx, const struct sockaddr *sa,
						   socklen_t salen, const char *helo,
						   int timeout_ms, char *why, size_t whylen,
						   char dsn[16]);

/* deliver_tls_bridge_address - where libesmtp connects: "127.0.0.1:PORT" */
const char *deliver_tls_bridge_address(const struct deliver_tls_bridge *b);

/* deliver_tls_bridge_tls - the TLS connection's description */
const char *deliver_tls_bridge_tls(const struct deliver_tls_bridge *b);

/* deliver_tls_bridge_cut - forward nothing more from libesmtp; hang up */
void deliver_tls_bridge_cut(struct deliver_tls_bridge *b);

/* deliver_tls_bridge_close - stop the thread, close everything; NULL-safe */
void deliver_tls_bridge_close(struct deliver_tls_bridge *b);

#endif
