/*
 * NAME
 *	tls 3
 * SUMMARY
 *	inbound TLS with OpenSSL: the server context
 * DESCRIPTION
 *	The context: TLS 1.2 and up (RFC 8996 retired 1.0 and 1.1), no
 *	compression (CRIME), the server's cipher order, no renegotiation
 *	(a client could make us pay for handshakes without end), and a
 *	missing close_notify taken as a plain end of stream: SMTP frames its
 *	own data, so truncation cannot go unnoticed.
 *
 *	Key exchange: the groups of tls.groups, by default X25519, P-256 and
 *	P-384, each well under a millisecond of the event loop's CPU per
 *	handshake. OpenSSL's own defaults add the finite-field groups up to
 *	ffdhe8192 (about 100 ms of CPU each): one client offering only that,
 *	ten times a second, held the loop that every session shares. TLS
 *	1.2's DHE suites are offered only when tls.groups names an ffdhe
 *	group, for the same reason.
 *
 *	The chain sent is the cert file's, as it is: no SSL_MODE_AUTO_CHAIN.
 *	With a file of one certificate, OpenSSL would otherwise try to build
 *	a chain on every handshake (an X509_STORE_CTX made, verified and
 *	freed) from the context's store, which holds nothing here: work for
 *	each connection that can only ever find what the file already gave.
 *
 *	TLS 1.3 suites: OpenSSL's three, in the server's order, AES-128-GCM
 *	with SHA-256 first (OpenSSL's own order, which clients send, puts
 *	AES-256-GCM with SHA-384 first). Both are sound; the handshake's key
 *	schedule and transcript hash then run on SHA-256, which current x86-64
 *	CPUs compute in hardware (SHA-NI), and not SHA-384: about 6 % of the
 *	server's handshake CPU and 3 % of the client's, measured on an AMD
 *	EPYC. TLS 1.2's list puts AES-128 first too. A client that lists
 *	ChaCha20-Poly1305 first, in TLS 1.3 or 1.2, gets it all the same
 *	(SSL_OP_PRIORITIZE_CHACHA): such a client has, as a rule, no AES in
 *	hardware (phones, small ARM boards), where AES-GCM costs several
 *	times what ChaCha20 does. The handshake is the same either way (its
 *	key schedule on SHA-256); only the records' cipher differs.
 *
 *	The context sends one session ticket after a full TLS 1.3 handshake
 *	(SSL_CTX_set_num_tickets), and tls_ticket.c says which handshakes
 *	get even that; it reads ahead (tls_io.c says why). Each session is a
 *	transport (tls_io.c), whose records are held for one write a turn
 *	(tls_hold.c). OpenSSL's errors become text here (tls_errtext), for
 *	the client side's too.
 * DIAGNOSTICS
 *	tls_new() and tls_reload() return what went wrong, naming the file;
 *	the loaded certificate's subject and SHA-256 fingerprint are logged.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "../util/buf.h"
#include "../util/hash.h"
#include "../util/log.h"
#include "tls.h"
#include "tls_int.h"

/* TLS 1.2 suites, best first */
#define TLS_CIPHERS "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:" \
	"ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:" \
	"ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"
#define TLS_CIPHERS_DHE ":DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384:" \
	"DHE-RSA-CHACHA20-POLY1305"

/*
 * TLS 1.3 suites: OpenSSL's three, AES-128-GCM (SHA-256) first; ChaCha20
 * for a client that lists it first (SSL_OP_PRIORITIZE_CHACHA)
 */
#define TLS_SUITES "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"

#define TLS_GROUPS_DEFAULT "X25519:P-256:P-384"

/* tls_errtext - what (printf's), then the first queued OpenSSL error or errno, as text; clears the queue */
void tls_errtext(char *buf, size_t len, const char *fmt, ...)
{
	const char *sys = errno ? strerror(errno) : "connection closed";
	unsigned long e = ERR_get_error();
	char    what[300], reason[200];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	if (e)
		ERR_error_string_n(e, reason, sizeof(reason));
	snprintf(buf, len, "%s: %s", what, e ? reason : sys);
	ERR_clear_error();
}

/* tls_ctx_open - a context as both sides want it: TLS 1.2 and up, no compression, no renegotiation */
SSL_CTX *tls_ctx_open(const SSL_METHOD *method, char *err, size_t errlen)
{
	SSL_CTX *ctx;

	ERR_clear_error();
	errno = 0;
	if ((ctx = SSL_CTX_new(method)) == NULL
	    || SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1) {
		tls_errtext(err, errlen, "cannot create a TLS context");
		SSL_CTX_free(ctx);
		return NULL;
	}
	SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
	return ctx;
}

/* tls_ctx_kex - the key exchange groups, the TLS 1.2 suites that go with them, TLS 1.3's */
static int tls_ctx_kex(SSL_CTX *ctx, const char *groups, char *err, size_t errlen)
{
	const char *g = groups ? groups : TLS_GROUPS_DEFAULT;
	int     dhe = strcasestr(g, "ffdhe") != NULL;

	if (SSL_CTX_set_cipher_list(ctx, dhe ? TLS_CIPHERS TLS_CIPHERS_DHE : TLS_CIPHERS) != 1
	    || SSL_CTX_set_ciphersuites(ctx, TLS_SUITES) != 1) {
		tls_errtext(err, errlen, "TLS settings");
		return -1;
	}
	if (SSL_CTX_set1_groups_list(ctx, g) != 1) {
		tls_errtext(err, errlen, "groups \"%.200s\"", g);
		return -1;
	}
	if (dhe)
		SSL_CTX_set_dh_auto(ctx, 1);
	return 0;
}

/* tls_ctx_new - a server context from cert and key, or NULL and err */
static SSL_CTX *tls_ctx_new(const char *cert, const char *key, const char *groups,
			    char fp[TLS_FP_LEN], char *err, size_t errlen)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	char    what[300];
	SSL_CTX *ctx;
	X509   *x;

	if ((ctx = tls_ctx_open(TLS_server_method(), err, errlen)) == NULL)
		return NULL;
	if (tls_ctx_kex(ctx, groups, err, errlen) < 0)
		goto fail;
	SSL_CTX_set_options(ctx, SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_PRIORITIZE_CHACHA
			    | SSL_OP_IGNORE_UNEXPECTED_EOF);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER
			 | SSL_MODE_RELEASE_BUFFERS | SSL_MODE_NO_AUTO_CHAIN);
	SSL_CTX_set_read_ahead(ctx, 1);
	if (SSL_CTX_set_num_tickets(ctx, 1) != 1) {
		tls_errtext(err, errlen, "TLS settings");
		goto fail;
	}
	if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
		tls_errtext(err, errlen, "cert %s", cert);
		goto fail;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
		tls_errtext(err, errlen, "key %s", key);
		goto fail;
	}
	if (SSL_CTX_check_private_key(ctx) != 1) {
		tls_errtext(err, errlen, "key %s does not match cert %s", key, cert);
		goto fail;
	}
	if ((x = SSL_CTX_get0_certificate(ctx)) == NULL
	    || X509_digest(x, EVP_sha256(), md, &mdlen) != 1 || mdlen != 32) {
		tls_errtext(err, errlen, "cert %s", cert);
		goto fail;
	}
	hash_hex(md, mdlen, fp);
	X509_NAME_oneline(X509_get_subject_name(x), what, sizeof(what));
	msg_info("tls: loaded cert=%s subject=%s sha256=%s", cert, what, fp);
	return ctx;

fail:
	SSL_CTX_free(ctx);
	return NULL;
}

/* tls_new - the context for the configured files and groups (NULL: the default) */
int tls_new(struct tls **out, const char *cert, const char *key, const char *groups,
	    char *err, size_t errlen)
{
	struct tls *t;

	*out = NULL;
	t = xcalloc(1, sizeof(*t));
	t->cert = cert;
	t->key = key;
	t->groups = groups;
	if (tls_reload(t, err, errlen) < 0) {	/* the first load */
		tls_free(t);
		return -1;
	}
	*out = t;
	return 0;
}

/* tls_reload - new connections get a context from the files as they are now */
int tls_reload(struct tls *t, char *err, size_t errlen)
{
	char    fp[TLS_FP_LEN];
	SSL_CTX *ctx;

	if ((ctx = tls_ctx_new(t->cert, t->key, t->groups, fp, err, errlen)) == NULL)
		return -1;
	SSL_CTX_free(t->ctx);		/* live connections keep their reference */
	t->ctx = ctx;
	memcpy(t->fingerprint, fp, sizeof(fp));
	return 0;
}

/* tls_free - release the context; NULL-safe */
void tls_free(struct tls *t)
{
	if (t == NULL)
		return;
	SSL_CTX_free(t->ctx);
	free(t);
}

/* tls_fingerprint - SHA-256 of the certificate new connections get, in hex */
const char *tls_fingerprint(const struct tls *t)
{
	return t->fingerprint;
}
