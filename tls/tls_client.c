/*
 * NAME
 *	tls_client 3
 * SUMMARY
 *	upstream TLS: client contexts and the client handshake
 * DESCRIPTION
 *	See tls_client.h for what each part is for. Notes on why:
 *
 *	libESMTP 1.1.0's own STARTTLS is not used. It makes one process-
 *	wide context from ~/.config/libesmtp (or ~/.authenticate) and frees
 *	it with the first session that used it; it keeps bytes the server
 *	pipelined behind its 220 to STARTTLS and reads them as if they had
 *	come over TLS (fixed on the libesmtp-1.1 branch, 1.1.1, commit
 *	4ea8209, never tagged); and when a TLS 1.3 server's session
 *	tickets arrive before libesmtp has flushed its next command, it
 *	polls for reading first and waits out the whole timeout (seen with
 *	QUIT after a refused certificate). So the bridge
 *	(deliver/esmtp/deliver_bridge.c) does TLS for both "starttls" and
 *	"implicit", and libesmtp only ever sees plain text on a loopback
 *	socket.
 *
 *	Contexts are made per upstream session and hold the host name in
 *	their verify parameters, so OpenSSL checks the name (RFC 6125, IP
 *	addresses included) as part of the chain, and SSL_VERIFY_PEER fails
 *	the handshake before any SMTP goes over it. SNI is set per SSL
 *	from the same name. upstream.tls_servername, when set, is that
 *	name instead of the host: an address in host still gets a name
 *	checked and sent.
 *
 *	The CAs (tls_ca, or the system store) are not the context's own:
 *	loading the system's (some 150 certificates) took 50-80 ms of CPU,
 *	paid by every delivery batch. An X509_STORE per CA source is loaded
 *	once and handed to each new context (reference counted; OpenSSL
 *	locks lookups in it, so threads verify against it at once), and
 *	loaded again after a minute, so that edits to the CA files and the
 *	system's updates still reach new connections, as they reach
 *	Postfix's reused smtp(8) processes; and again under another
 *	effective uid: the start-up check loads it as root, and a tls_ca
 *	that the user the daemon drops to cannot read must defer the first
 *	delivery. Nothing of a connection is in the store: the host name is
 *	in the context's verify parameters.
 *
 *	Pins (upstream.tls_fingerprint) replace OpenSSL's whole chain check
 *	through the context's certificate verify callback, so a self-signed
 *	or expired certificate that matches is accepted and nothing else is,
 *	whatever the CAs say; the result goes through the same verify
 *	result, so the handshake fails before any SMTP as with a chain.
 * DIAGNOSTICS
 *	Returned as text for the caller's log line and deferral reason.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509v3.h>

#include "../conf/conf.h"
#include "../util/buf.h"
#include "../util/clock.h"
#include "../util/hash.h"
#include "../util/deadline.h"
#include "../util/log.h"
#include "tls.h"
#include "tls_client.h"
#include "tls_int.h"

/* ---------------------------------------------------------------- contexts */

/* what a context knows of the connection it is for (SSL_CTX ex_data) */
struct tls_peer {
	char host[256];			/* the name checked: servername, or host */
	const char *servername;		/* upstream.tls_servername, or NULL */
	int verify;
	int is_ip;			/* no SNI for an address (RFC 6066) */
	uint8_t (*pins)[32];		/* upstream.tls_fingerprint; n_pins set: only a pin counts */
	size_t n_pins;
	uint8_t seen_crt[32], seen_spki[32];	/* the last certificate pins were held to */
	int seen;
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

/* tls_ctx_base - a client context with its tls_peer, nothing trusted yet */
static SSL_CTX *tls_ctx_base(int verify, char *err, size_t errlen)
{
	struct tls_peer *p;
	SSL_CTX *ctx;

	pthread_once(&tls_peer_once, tls_peer_init);
	if ((ctx = tls_ctx_open(TLS_client_method(), err, errlen)) == NULL)
		return NULL;
	p = xcalloc(1, sizeof(*p));
	p->verify = verify;
	if (tls_peer_index < 0 || !SSL_CTX_set_ex_data(ctx, tls_peer_index, p)) {
		free(p);
		tls_errtext(err, errlen, "cannot create a TLS context");
		SSL_CTX_free(ctx);
		return NULL;
	}
	SSL_CTX_set_verify(ctx, verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
	return ctx;
}

/* tls_client_digests - SHA-256 of the certificate and of its SubjectPublicKeyInfo */
int tls_client_digests(X509 *cert, uint8_t crt[32], uint8_t spki[32])
{
	unsigned char *der = NULL;
	unsigned int n = 0;
	int len;

	if (!X509_digest(cert, EVP_sha256(), crt, &n) || n != 32)
		return -1;
	/* the whole SPKI DER, as Postfix and RFC 7469 pin it (not just the key bits) */
	if ((len = i2d_X509_PUBKEY(X509_get_X509_PUBKEY(cert), &der)) <= 0)
		return -1;
	hash_once(der, (size_t) len, spki);
	OPENSSL_free(der);
	return 0;
}

/*
 * tls_pin_verify - replaces OpenSSL's chain check when pins are set: the
 * server's own certificate (or its public key) must match one, and then
 * neither a CA nor the name matters (Postfix's "fingerprint" level)
 */
static int tls_pin_verify(X509_STORE_CTX *sctx, void *arg)
{
	struct tls_peer *p = arg;
	X509 *cert = X509_STORE_CTX_get0_cert(sctx);
	size_t i;

	/* kept for the reason: a refused handshake leaves the session no peer certificate */
	p->seen = cert != NULL && tls_client_digests(cert, p->seen_crt, p->seen_spki) == 0;
	if (!p->seen) {
		X509_STORE_CTX_set_error(sctx, X509_V_ERR_UNSPECIFIED);
		return 0;
	}
	for (i = 0; i < p->n_pins; i++)
		if (memcmp(p->pins[i], p->seen_crt, 32) == 0
		    || memcmp(p->pins[i], p->seen_spki, 32) == 0) {
			X509_STORE_CTX_set_error(sctx, X509_V_OK);
			return 1;
		}
	X509_STORE_CTX_set_error(sctx, X509_V_ERR_CERT_REJECTED);
	return 0;
}

/*
 * the trust stores, one for each CA source (a tls_ca path, or NULL: the
 * system's), shared by the contexts made within TLS_CA_AGE of its loading
 */
#define TLS_CA_AGE	(60 * 1000000LL)	/* microseconds */

struct tls_ca {
	char *ca;			/* owned; NULL: the system store */
	X509_STORE *store;		/* one reference; each context holds its own; NULL: failed */
	int64_t loaded;			/* clock_mono_us() */
	uid_t euid;			/* geteuid() it was loaded under */
	struct tls_ca *next;
};

static struct tls_ca *tls_cas;
static pthread_mutex_t tls_ca_lock = PTHREAD_MUTEX_INITIALIZER;

/* tls_ca_load - a store of tls_ca (a PEM file, or a directory of c_rehash links), or the system's */
static X509_STORE *tls_ca_load(const char *ca, char *err, size_t errlen)
{
	X509_STORE *store = X509_STORE_new();
	struct stat st;

	if (store == NULL) {
		tls_errtext(err, errlen, "cannot create a CA store");
		return NULL;
	}
	if (ca == NULL) {
		if (X509_STORE_set_default_paths(store))
			return store;
		tls_errtext(err, errlen, "cannot load the system CA store");
	} else if (stat(ca, &st) < 0) {
		snprintf(err, errlen, "upstream.tls_ca %.256s: %s", ca, strerror(errno));
	} else if (S_ISDIR(st.st_mode) ? X509_STORE_load_path(store, ca)
		   : X509_STORE_load_file(store, ca)) {
		return store;
	} else {
		tls_errtext(err, errlen, "upstream.tls_ca %.256s", ca);
	}
	X509_STORE_free(store);
	return NULL;
}

/*
 * tls_ca_store - a reference to ca's store, loaded again when older than
 * TLS_CA_AGE or loaded under another effective uid (what root could read,
 * the user the daemon drops to may not)
 */
static X509_STORE *tls_ca_store(const char *ca, char *err, size_t errlen)
{
	int64_t now = clock_mono_us();
	uid_t euid = geteuid();
	X509_STORE *store;
	struct tls_ca *e;

	pthread_mutex_lock(&tls_ca_lock);
	for (e = tls_cas; e && (ca ? !e->ca || strcmp(e->ca, ca) != 0 : e->ca != NULL); e = e->next)
		;
	if (e == NULL) {		/* the sources are the configuration's: a few, for good */
		e = xcalloc(1, sizeof(*e));
		e->ca = ca ? xstrdup(ca) : NULL;
		e->next = tls_cas;
		tls_cas = e;
	}
	/* loaded under the lock: once, however many deliveries want it at that moment */
	if (e->store == NULL || now - e->loaded >= TLS_CA_AGE || e->euid != euid) {
		X509_STORE_free(e->store);	/* the contexts that hold it keep it */
		e->store = tls_ca_load(ca, err, errlen);
		e->loaded = now;
		e->euid = euid;
	}
	if ((store = e->store) != NULL)
		X509_STORE_up_ref(store);	/* the context's (an atomic add) */
	pthread_mutex_unlock(&tls_ca_lock);
	return store;
}

/*
 * tls_client_ctx_conf - the client context an upstream group's tls_* ask
 * for (the default upstream's or a route's): pins,
 * or a chain to tls_ca (else the system store), or no check at all
 */
SSL_CTX *tls_client_ctx_conf(const struct conf_upstream *u, char *err, size_t errlen)
{
	size_t npins = u->n_tls_fingerprint;
	struct tls_peer *p;
	X509_STORE *store;
	SSL_CTX *ctx;

	/* pins and tls_ca need verification on (conf.c) */
	if ((ctx = tls_ctx_base(u->tls_verify || npins || u->tls_ca, err, errlen)) == NULL)
		return NULL;
	p = tls_peer_of(ctx);
	p->servername = u->tls_servername;	/* the configuration's, which outlives ctx */
	p->pins = u->tls_fingerprint;
	p->n_pins = npins;
	if (npins) {
		SSL_CTX_set_cert_verify_callback(ctx, tls_pin_verify, p);
	} else if (p->verify && (store = tls_ca_store(u->tls_ca, err, errlen)) != NULL) {
		SSL_CTX_set_cert_store(ctx, store);	/* takes the reference given */
	} else if (u->tls_ca) {
		SSL_CTX_free(ctx);
		ERR_clear_error();
		return NULL;
	} else if (p->verify) {
		/* no CA store: every certificate will be refused, with a reason */
		msg_warn("%s", err);
	}
	ERR_clear_error();
	return ctx;
}

/* tls_client_ctx_host - the name the next connection checks and sends (SNI) */
int tls_client_ctx_host(SSL_CTX *ctx, const char *host)
{
	struct tls_peer *p = tls_peer_of(ctx);
	X509_VERIFY_PARAM *param = SSL_CTX_get0_param(ctx);
	unsigned char ip[16];

	if (p == NULL || strlen(host) >= sizeof(p->host))
		return -1;
	if (p->servername)
		host = p->servername;
	snprintf(p->host, sizeof(p->host), "%s", host);
	p->is_ip = inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1;
	if (!p->verify || p->n_pins)
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

/* ---------------------------------------------------------------- handshake */

/*
 * tls_verify_why - the reason a certificate was refused, in words an
 * operator can act on; a pin mismatch gives the server's digests to pin
 */
static void tls_verify_why(const struct tls_peer *p, long vr, char *why, size_t whylen)
{
	char hc[65], hs[65];

	if (p->n_pins && vr == X509_V_ERR_CERT_REJECTED) {
		if (!p->seen) {
			snprintf(why, whylen, "certificate fingerprint mismatch");
			return;
		}
		hash_hex(p->seen_crt, 32, hc);
		hash_hex(p->seen_spki, 32, hs);
		snprintf(why, whylen, "certificate fingerprint mismatch: the certificate is "
			 "sha256:%s, its public key sha256:%s", hc, hs);
	} else if (vr == X509_V_ERR_HOSTNAME_MISMATCH || vr == X509_V_ERR_IP_ADDRESS_MISMATCH) {
		snprintf(why, whylen, "certificate name mismatch: wanted %s", p->host);
	} else {
		snprintf(why, whylen, "certificate verify failed: %s",
			 X509_verify_cert_error_string(vr));
	}
}

/*
 * tls_client_connect - the client handshake on fd within the deadline,
 * the certificate checked as the context says
 */
struct io *tls_client_connect(SSL_CTX *ctx, int fd, const struct timespec *deadline,
			      char *desc, size_t desclen, char *why, size_t whylen)
{
	struct tls_peer *p = tls_peer_of(ctx);
	struct io *io;
	SSL *ssl;
	long vr;
	int r, e;

	ERR_clear_error();
	if ((ssl = SSL_new(ctx)) == NULL || !SSL_set_fd(ssl, fd)
	    || (p && p->host[0] && !p->is_ip && !SSL_set_tlsext_host_name(ssl, p->host))) {
		tls_errtext(why, whylen, "cannot set up TLS");
		goto fail;
	}
	if (p)
		p->seen = 0;
	while ((r = SSL_connect(ssl)) != 1) {
		e = SSL_get_error(ssl, r);
		if ((e == SSL_ERROR_WANT_READ && deadline_wait(fd, POLLIN, deadline))
		    || (e == SSL_ERROR_WANT_WRITE && deadline_wait(fd, POLLOUT, deadline)))
			continue;
		vr = SSL_get_verify_result(ssl);
		if (p && p->verify && vr != X509_V_OK) {
			tls_verify_why(p, vr, why, whylen);
			ERR_clear_error();
		} else if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
			snprintf(why, whylen, "TLS handshake timed out");
		} else {
			tls_errtext(why, whylen, "TLS handshake failed");
		}
		goto fail;
	}
	if (p && p->verify && SSL_get0_peer_certificate(ssl) == NULL) {
		/* no certificate (anonymous cipher) leaves the verify result X509_V_OK */
		snprintf(why, whylen, "server certificate missing");
		goto fail;
	}
	io = tls_io_wrap(ssl, fd);
	tls_io_describe(io, desc, desclen);	/* as the server's sessions are logged */
	return io;

fail:
	SSL_free(ssl);
	ERR_clear_error();
	return NULL;
}
