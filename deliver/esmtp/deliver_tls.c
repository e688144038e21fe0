/*
 * NAME
 *	deliver_tls 3
 * SUMMARY
 *	upstream TLS: client contexts and the client handshake
 * DESCRIPTION
 *	See deliver_tls.h for what each part is for. Notes on why:
 *
 *	libESMTP 1.1.0's own STARTTLS is not used. It makes one process-
 *	wide context from ~/.config/libesmtp (or ~/.authenticate) and frees
 *	it with the first session that used it; it keeps bytes the server
 *	pipelined behind its 220 to STARTTLS and reads them as if they had
 *	come over TLS (fixed in 1.1.1); and when a TLS 1.3 server's session
 *	tickets arrive before libesmtp has flushed its next command, it
 *	polls for reading first and waits out the whole timeout (seen with
 *	QUIT after a refused certificate). So the bridge (deliver_bridge.c)
 *	does TLS for both "starttls" and "implicit", and libesmtp only ever
 *	sees plain text on a loopback socket.
 *
 *	Contexts are made per upstream session and hold the host name in
 *	their verify parameters, so OpenSSL checks the name (RFC 6125, IP
 *	addresses included) as part of the chain, and SSL_VERIFY_PEER fails
 *	the handshake before any SMTP goes over it. SNI is set per SSL
 *	from the same name.
 * DIAGNOSTICS
 *	Returned as text for the caller's log line and deferral reason.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "../../util/buf.h"
#include "../../util/deadline.h"
#include "../../util/log.h"
#include "deliver_tls.h"
#include "../../tls/tls.h"

/* ---------------------------------------------------------------- contexts */

/* what a context knows of the connection it is for (SSL_CTX ex_data) */
struct tls_peer {
	char host[256];			/* configured name or address */
	int verify;
	int is_ip;			/* no SNI for an address (RFC 6066) */
};

static int tls_peer_index = -1;
static pthread_once_t tls_peer_once = PTHREAD_ONCE_INIT;

/* tls_peer_free - ex_data destructor: the context is going away */
static void tls_peer_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl,
			  void *argp)
{
	(void) parent, (void) ad, (void) idx, (void) argl, (void) argp;
	free(ptr);
}

/* tls_peer_init - once: the ex_data slot */
static void tls_peer_init(void)
{
	tls_peer_index = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, tls_peer_free);
}

/* tls_peer_of - a context's tls_peer, NULL if not ours */
static struct tls_peer *tls_peer_of(const SSL_CTX *ctx)
{
	return tls_peer_index < 0 ? NULL : SSL_CTX_get_ex_data(ctx, tls_peer_index);
}

/* tls_err - the oldest queued OpenSSL error as text, queue cleared */
static void tls_err(char *out, size_t outlen, const char *what)
{
	unsigned long e = ERR_get_error();
	char buf[200];

	if (e)
		ERR_error_string_n(e, buf, sizeof(buf));
	else
		snprintf(buf, sizeof(buf), "%s", errno ? strerror(errno) : "unknown error");
	ERR_clear_error();
	snprintf(out, outlen, "%s: %s", what, buf);
}

/* deliver_tls_ctx_new - a client context; verify 0: accept any certificate */
SSL_CTX *deliver_tls_ctx_new(int verify, char *err, size_t errlen)
{
	struct tls_peer *p;
	SSL_CTX *ctx;

	pthread_once(&tls_peer_once, tls_peer_init);
	ERR_clear_error();
	if (tls_peer_index < 0 || (ctx = SSL_CTX_new(TLS_client_method())) == NULL) {
		tls_err(err, errlen, "cannot create a TLS context");
		return NULL;
	}
	p = xcalloc(1, sizeof(*p));
	p->verify = verify;
	if (!SSL_CTX_set_ex_data(ctx, tls_peer_index, p)) {
		free(p);
		tls_err(err, errlen, "cannot create a TLS context");
		SSL_CTX_free(ctx);
		return NULL;
	}
	(void) SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
	SSL_CTX_set_verify(ctx, verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
	if (verify && !SSL_CTX_set_default_verify_paths(ctx)) {
		/* no CA store: every certificate will be refused, with a reason */
		tls_err(err, errlen, "cannot load the system CA store");
		msg_warn("%s", err);
	}
	ERR_clear_error();
	return ctx;
}

/* deliver_tls_ctx_host - the name the next connection checks and sends (SNI) */
int deliver_tls_ctx_host(SSL_CTX *ctx, const char *host)
{
	struct tls_peer *p = tls_peer_of(ctx);
	X509_VERIFY_PARAM *param = SSL_CTX_get0_param(ctx);
	unsigned char ip[16];

	if (p == NULL || strlen(host) >= sizeof(p->host))
		return -1;
	snprintf(p->host, sizeof(p->host), "%s", host);
	p->is_ip = inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1;
	if (!p->verify)
		return 0;
	/* set1_host(NULL) and set1_ip(NULL) clear what the previous host left */
	if (!X509_VERIFY_PARAM_set1_host(param, NULL, 0)
	    || !X509_VERIFY_PARAM_set1_ip(param, NULL, 0))
		return -1;
	X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
	if (p->is_ip ? !X509_VERIFY_PARAM_set1_ip_asc(param, host)
	    : !X509_VERIFY_PARAM_set1_host(param, host, 0))
		return -1;
	return 0;
}

/* deliver_tls_describe - "TLSv1.3 with cipher X (256/256 bits)" */
void deliver_tls_describe(const SSL *ssl, char *out, size_t outlen)
{
	const SSL_CIPHER *c = SSL_get_current_cipher(ssl);
	int alg = 0, bits = c ? SSL_CIPHER_get_bits(c, &alg) : 0;

	snprintf(out, outlen, "%s with cipher %s (%d/%d bits)", SSL_get_version(ssl),
		 c ? SSL_CIPHER_get_name(c) : "none", bits, alg);
}

/* ---------------------------------------------------------------- handshake */

/*
 * deliver_tls_connect - the client handshake on fd within the deadline,
 * the certificate checked as the context says
 */
struct io *deliver_tls_connect(SSL_CTX *ctx, int fd, const struct timespec *deadline,
			       char *desc, size_t desclen, char *why, size_t whylen,
			       char dsn[16])
{
	const struct tls_peer *p = tls_peer_of(ctx);
	SSL *ssl;
	long vr;
	int r, e;

	ERR_clear_error();
	snprintf(dsn, 16, "4.7.5");
	if ((ssl = SSL_new(ctx)) == NULL || !SSL_set_fd(ssl, fd)
	    || (p && p->host[0] && !p->is_ip && !SSL_set_tlsext_host_name(ssl, p->host))) {
		tls_err(why, whylen, "cannot set up TLS");
		goto fail;
	}
	while ((r = SSL_connect(ssl)) != 1) {
		e = SSL_get_error(ssl, r);
		if ((e == SSL_ERROR_WANT_READ && deadline_wait(fd, POLLIN, deadline))
		    || (e == SSL_ERROR_WANT_WRITE && deadline_wait(fd, POLLOUT, deadline)))
			continue;
		vr = SSL_get_verify_result(ssl);
		if (p && p->verify && vr != X509_V_OK) {
			snprintf(why, whylen, "server certificate not trusted: %s",
				 X509_verify_cert_error_string(vr));
			ERR_clear_error();
		} else if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
			snprintf(why, whylen, "TLS handshake timed out");
		} else {
			tls_err(why, whylen, "TLS handshake failed");
		}
		goto fail;
	}
	if (p && p->verify && SSL_get0_peer_certificate(ssl) == NULL) {
		/* no certificate (anonymous cipher) leaves the verify result X509_V_OK */
		snprintf(why, whylen, "server certificate missing");
		goto fail;
	}
	deliver_tls_describe(ssl, desc, desclen);
	return tls_io_wrap(ssl, fd);

fail:
	SSL_free(ssl);
	ERR_clear_error();
	return NULL;
}
