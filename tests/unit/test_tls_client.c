/*
 * test_tls_client - the client TLS context of tls/tls_client.c, and its
 * trust stores: loaded once per CA source and shared by the contexts (the
 * loads counted with ld's --wrap), again after a minute (the clock moved
 * by the same means) and under another effective uid, and verifying
 * through the shared store with tls_client_connect() against an
 * in-process server. (The handshake
 * through the bridge in test_deliver_bridge.c; STARTTLS, AUTH and the
 * rest end to end, in tests/e2e/cases_upstream_tls.py.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "../../tls/tls_client.h"
#include "../../util/deadline.h"
#include "../../util/hash.h"

/* a fixed self-signed certificate, and its digests as the openssl command gives them */
static const char pin_cert[] =
	"-----BEGIN CERTIFICATE-----\n"
	"MIIBfTCCASOgAwIBAgIUF777sZL/e1kwNjKRz4ed1H31YeIwCgYIKoZIzj0EAwIw\n"
	"EzERMA8GA1UEAwwIcGluLnRlc3QwIBcNMjYxMjAyMDQxNTA4WhgPMjEyNjExMDgw\n"
	"NDE1MDhaMBMxETAPBgNVBAMMCHBpbi50ZXN0MFkwEwYHKoZIzj0CAQYIKoZIzj0D\n"
	"AQcDQgAEkGuXU6WGOOrTwaw46lIoM+gT14S4V5juSjYeE05xiqsDtrxqpZTFNqzz\n"
	"ySgDZB/GIpQaaNM4DNIjmPEziR9CS6NTMFEwHQYDVR0OBBYEFAhMZw4Cpw7oYNIe\n"
	"v0V9IOdK5OOwMB8GA1UdIwQYMBaAFAhMZw4Cpw7oYNIev0V9IOdK5OOwMA8GA1Ud\n"
	"EwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSAAwRQIgbqqY8ehlIlUO/fcgDGwtHz5k\n"
	"/i117lTf2UQ8OdvCuVYCIQDr+GmqBM7GsFGuN2qHvJUPlxhZgYSe0gaFaDR17Ljb\n"
	"aA==\n"
	"-----END CERTIFICATE-----\n";
/* openssl x509 -noout -fingerprint -sha256 */
static const char pin_crt_hex[] =
	"30c9c3c4589ac3fa0e2b190cfe5635b33767b2e7f56575d7697205ba7e4016d4";
/* openssl x509 -noout -pubkey | openssl pkey -pubin -outform der | openssl dgst -sha256 */
static const char pin_spki_hex[] =
	"5baa27a14f6870a94e48d33706f445bcda69944415fcfb96f0e219a881cefdde";

/* hex - 32 bytes as 64 lowercase digits */
static const char *hex(const uint8_t d[32], char out[65])
{
	hash_hex(d, 32, out);
	return out;
}

/* test_digests - the pins an operator copies from openssl are the ones compared */
static void test_digests(void **state)
{
	BIO *bio = BIO_new_mem_buf(pin_cert, -1);
	X509 *cert = PEM_read_bio_X509(bio, NULL, NULL, NULL);
	uint8_t crt[32], spki[32];
	char h[65];

	(void) state;
	assert_non_null(cert);
	assert_int_equal(tls_client_digests(cert, crt, spki), 0);
	if (strcmp(hex(crt, h), pin_crt_hex) != 0)
		fail_msg("certificate digest: got %s, want %s", h, pin_crt_hex);
	if (strcmp(hex(spki, h), pin_spki_hex) != 0)
		fail_msg("public key digest: got %s, want %s", h, pin_spki_hex);
	X509_free(cert);
	BIO_free(bio);
}

/* test_ctx_conf - what upstream.tls_* make of the context */
static void test_ctx_conf(void **state)
{
	static const struct {
		const char *ca;		/* upstream.tls_ca */
		int pins, verify;
		int want_ctx, want_mode;
		const char *want_err;	/* in err when no context */
	} rows[] = {
		{NULL, 0, 1, 1, SSL_VERIFY_PEER, NULL},
		{NULL, 0, 0, 1, SSL_VERIFY_NONE, NULL},
		{NULL, 1, 1, 1, SSL_VERIFY_PEER, NULL},
		{"/nonexistent/ca.pem", 0, 1, 0, 0,
		 "upstream.tls_ca /nonexistent/ca.pem: No such file or directory"},
		{"/dev/null", 0, 1, 0, 0, "upstream.tls_ca /dev/null: "},
		{"/etc/ssl/certs", 0, 1, 1, SSL_VERIFY_PEER, NULL},
	};
	uint8_t pin[1][32] = {{0}};
	char err[256];
	struct conf c;
	SSL_CTX *ctx;
	size_t i;

	(void) state;
	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		memset(&c, 0, sizeof(c));
		c.upstream.tls_verify = rows[i].verify;
		c.upstream.tls_ca = (char *) rows[i].ca;
		c.upstream.tls_fingerprint = rows[i].pins ? pin : NULL;
		c.upstream.n_tls_fingerprint = rows[i].pins;
		c.upstream.tls_servername = "mx.example.net";
		err[0] = 0;
		ctx = tls_client_ctx_conf(&c.upstream, err, sizeof(err));
		if ((ctx != NULL) != rows[i].want_ctx)
			fail_msg("row %zu: got %s (%s), want %s", i, ctx ? "a context" : "none", err,
				 rows[i].want_ctx ? "a context" : "none");
		if (ctx == NULL) {
			if (strncmp(err, rows[i].want_err, strlen(rows[i].want_err)) != 0)
				fail_msg("row %zu: err \"%s\", want \"%s...\"", i, err,
					 rows[i].want_err);
			continue;
		}
		assert_int_equal(SSL_CTX_get_verify_mode(ctx), rows[i].want_mode);
		/* the servername replaces an address: a name is what gets checked */
		assert_int_equal(tls_client_ctx_host(ctx, "192.0.2.1"), 0);
		if (rows[i].verify && !rows[i].pins) {
			const char *name = X509_VERIFY_PARAM_get0_host(SSL_CTX_get0_param(ctx), 0);

			if (name == NULL || strcmp(name, "mx.example.net") != 0)
				fail_msg("row %zu: name checked %s, want mx.example.net", i,
					 name ? name : "(none)");
		}
		SSL_CTX_free(ctx);
	}
}

static void test_ctx_host(void **state)
{
	char err[256], longname[300];
	SSL_CTX *ctx;

	(void) state;
	ctx = tls_client_ctx_conf(&(struct conf_upstream) { .tls_verify = 1 }, err, sizeof(err));
	if (ctx == NULL)
		fail_msg("tls_client_ctx_conf: %s", err);
	assert_int_equal(SSL_CTX_get_min_proto_version(ctx), TLS1_2_VERSION);
	assert_int_equal(SSL_CTX_get_verify_mode(ctx), SSL_VERIFY_PEER);
	assert_int_equal(tls_client_ctx_host(ctx, "smtp.example.com"), 0);
	assert_int_equal(tls_client_ctx_host(ctx, "192.0.2.1"), 0);
	assert_int_equal(tls_client_ctx_host(ctx, "2001:db8::1"), 0);
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = 0;
	assert_int_equal(tls_client_ctx_host(ctx, longname), -1);
	SSL_CTX_free(ctx);

	ctx = tls_client_ctx_conf(&(struct conf_upstream) { .tls_verify = 0 }, err, sizeof(err));
	assert_non_null(ctx);
	assert_int_equal(SSL_CTX_get_verify_mode(ctx), SSL_VERIFY_NONE);
	assert_int_equal(tls_client_ctx_host(ctx, "smtp.example.com"), 0);
	SSL_CTX_free(ctx);
}

/*
 * ld --wrap: the CA stores tls_client.c loads; its clock, moved on by
 * ahead_us, and standing still at frozen_us when that is set, so that
 * the time the loads and contexts take (valgrind's too) ages no store;
 * and its effective uid, euid_as when that is set
 */
static int loads;
static int64_t ahead_us, frozen_us;
static uid_t euid_as = (uid_t) -1;

int __real_X509_STORE_load_file(X509_STORE *st, const char *file);
int __real_X509_STORE_load_path(X509_STORE *st, const char *dir);
int __real_X509_STORE_set_default_paths(X509_STORE *st);
int64_t __real_clock_mono_us(void);
uid_t __real_geteuid(void);

int __wrap_X509_STORE_load_file(X509_STORE *st, const char *file)
{
	loads++;
	return __real_X509_STORE_load_file(st, file);
}

int __wrap_X509_STORE_load_path(X509_STORE *st, const char *dir)
{
	loads++;
	return __real_X509_STORE_load_path(st, dir);
}

int __wrap_X509_STORE_set_default_paths(X509_STORE *st)
{
	loads++;
	return __real_X509_STORE_set_default_paths(st);
}

int64_t __wrap_clock_mono_us(void)
{
	return (frozen_us ? frozen_us : __real_clock_mono_us()) + ahead_us;
}

uid_t __wrap_geteuid(void)
{
	return euid_as != (uid_t) -1 ? euid_as : __real_geteuid();
}

#define MINUTE_US	(60 * 1000000LL)

/* cert_new - a certificate for cn (a CA if ca), signed by issuer's key (NULL: its own) */
static X509 *cert_new(EVP_PKEY *key, const char *cn, int ca, X509 *issuer, EVP_PKEY *ikey)
{
	X509 *x = X509_new();
	X509_EXTENSION *ext;
	X509V3_CTX v3;
	char san[64];

	assert_non_null(x);
	X509_set_version(x, 2);
	ASN1_INTEGER_set(X509_get_serialNumber(x), ca ? 1 : 2);
	X509_gmtime_adj(X509_getm_notBefore(x), -60);
	X509_gmtime_adj(X509_getm_notAfter(x), 3600);
	X509_set_pubkey(x, key);
	X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC,
				   (const unsigned char *) cn, -1, -1, 0);
	X509_set_issuer_name(x, X509_get_subject_name(issuer ? issuer : x));
	X509V3_set_ctx(&v3, issuer ? issuer : x, x, NULL, NULL, 0);
	snprintf(san, sizeof(san), "DNS:%s", cn);
	ext = X509V3_EXT_conf_nid(NULL, &v3, ca ? NID_basic_constraints : NID_subject_alt_name,
				  ca ? "critical,CA:TRUE" : san);
	assert_non_null(ext);
	X509_add_ext(x, ext, -1);
	X509_EXTENSION_free(ext);
	assert_true(X509_sign(x, ikey ? ikey : key, EVP_sha256()) > 0);
	return x;
}

/* the CA as a file and as a c_rehash directory, a certificate it signed, and one it did not */
static char ca_dir[] = "/tmp/test_tls_client.XXXXXX";
static char ca_file[64], ca_hashed[64], ca_root[64];
static X509 *signed_crt, *other_crt;
static EVP_PKEY *server_key;

static int ca_setup(void **state)
{
	EVP_PKEY *ca_key = EVP_EC_gen("P-256");
	X509 *ca;
	FILE *f;
	char link[128];

	(void) state;
	signal(SIGPIPE, SIG_IGN);	/* the server hangs up after its handshake */
	server_key = EVP_EC_gen("P-256");
	assert_non_null(ca_key);
	assert_non_null(server_key);
	ca = cert_new(ca_key, "Test CA", 1, NULL, NULL);
	signed_crt = cert_new(server_key, "mx.test", 0, ca, ca_key);
	other_crt = cert_new(server_key, "mx.test", 0, NULL, NULL);
	assert_non_null(mkdtemp(ca_dir));
	snprintf(ca_file, sizeof(ca_file), "%s/ca.pem", ca_dir);
	snprintf(ca_hashed, sizeof(ca_hashed), "%s/hashed", ca_dir);
	snprintf(ca_root, sizeof(ca_root), "%s/root.pem", ca_dir);	/* test_ca_uid's */
	assert_int_equal(mkdir(ca_hashed, 0700), 0);
	assert_non_null(f = fopen(ca_file, "w"));
	assert_true(PEM_write_X509(f, ca));
	fclose(f);
	/* as c_rehash names it: a lookup by the issuer's name finds it */
	snprintf(link, sizeof(link), "%s/%08lx.0", ca_hashed, X509_subject_name_hash(ca));
	assert_int_equal(symlink(ca_file, link), 0);
	X509_free(ca);
	EVP_PKEY_free(ca_key);
	return 0;
}

static int ca_teardown(void **state)
{
	char link[sizeof(ca_hashed) + 256 + 2];
	DIR *d;
	struct dirent *de;

	(void) state;
	if ((d = opendir(ca_hashed)) != NULL) {
		while ((de = readdir(d)) != NULL)
			if (de->d_name[0] != '.') {
				snprintf(link, sizeof(link), "%s/%s", ca_hashed, de->d_name);
				unlink(link);
			}
		closedir(d);
	}
	rmdir(ca_hashed);
	unlink(ca_file);
	unlink(ca_root);
	rmdir(ca_dir);
	X509_free(signed_crt);
	X509_free(other_crt);
	EVP_PKEY_free(server_key);
	return 0;
}

/* a server that offers crt for one handshake */
struct server {
	int fd;
	X509 *crt;
};

static void *server_main(void *arg)
{
	struct server *sv = arg;
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	SSL *ssl;

	if (ctx && SSL_CTX_use_certificate(ctx, sv->crt) == 1
	    && SSL_CTX_use_PrivateKey(ctx, server_key) == 1 && (ssl = SSL_new(ctx)) != NULL) {
		SSL_set_fd(ssl, sv->fd);
		SSL_accept(ssl);
		SSL_free(ssl);
	}
	SSL_CTX_free(ctx);
	close(sv->fd);
	return NULL;
}

/* handshake - ctx's handshake with a server offering crt, as host: "" if accepted, else why */
static const char *handshake(SSL_CTX *ctx, X509 *crt, const char *host)
{
	static char why[256];
	struct server sv = {.crt = crt};
	struct timespec deadline = deadline_in(10000);
	pthread_t th;
	struct io *io;
	char desc[128];
	int sv_fd[2];

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv_fd), 0);
	sv.fd = sv_fd[1];
	assert_int_equal(pthread_create(&th, NULL, server_main, &sv), 0);
	fcntl(sv_fd[0], F_SETFL, O_NONBLOCK);
	assert_int_equal(tls_client_ctx_host(ctx, host), 0);
	why[0] = 0;
	if ((io = tls_client_connect(ctx, sv_fd[0], &deadline, desc, sizeof(desc), why,
				     sizeof(why))) != NULL)
		io_close(io);
	else
		close(sv_fd[0]);
	pthread_join(th, NULL);
	return why;
}

/* ctx_for - a verifying context whose CAs are ca (NULL: the system's) */
static SSL_CTX *ctx_for(const char *ca)
{
	struct conf_upstream u = {.tls_verify = 1, .tls_ca = (char *) ca};
	char err[256];
	SSL_CTX *ctx;

	if ((ctx = tls_client_ctx_conf(&u, err, sizeof(err))) == NULL)
		fail_msg("tls_client_ctx_conf(%s): %s", ca ? ca : "system", err);
	return ctx;
}

/*
 * test_ca_shared - each CA source is loaded once for any number of
 * contexts, which share its store; a minute on, it is loaded again
 */
static void test_ca_shared(void **state)
{
	const char *sources[] = {NULL, ca_file, ca_hashed};
	SSL_CTX *ctx[10], *later;
	size_t s, i;

	(void) state;
	frozen_us = __real_clock_mono_us();
	for (s = 0; s < 3; s++) {
		ahead_us += MINUTE_US;	/* what earlier tests loaded is old now */
		loads = 0;
		for (i = 0; i < 10; i++) {
			ctx[i] = ctx_for(sources[s]);
			if (SSL_CTX_get_cert_store(ctx[i]) != SSL_CTX_get_cert_store(ctx[0]))
				fail_msg("%s: context %zu has a store of its own",
					 sources[s] ? sources[s] : "system", i);
		}
		assert_int_equal(loads, 1);
		ahead_us += MINUTE_US - 1000000;	/* 59 s on: still the same */
		later = ctx_for(sources[s]);
		assert_ptr_equal(SSL_CTX_get_cert_store(later), SSL_CTX_get_cert_store(ctx[0]));
		SSL_CTX_free(later);
		assert_int_equal(loads, 1);
		ahead_us += 1000000;	/* a minute: loaded again */
		later = ctx_for(sources[s]);
		assert_ptr_not_equal(SSL_CTX_get_cert_store(later), SSL_CTX_get_cert_store(ctx[0]));
		assert_int_equal(loads, 2);
		/* the contexts made before keep the store they were given */
		for (i = 0; i < 10; i++)
			SSL_CTX_free(ctx[i]);
		SSL_CTX_free(later);
	}
	frozen_us = 0;
}

/*
 * test_ca_uid - a store loaded under another effective uid is loaded
 * again: the start-up check runs as root, the deliveries after the
 * privilege drop, and a tls_ca root alone can read must defer the first
 * of them, not serve them from root's store for a minute
 */
static void test_ca_uid(void **state)
{
	const char *sources[] = {NULL, ca_file, ca_hashed};
	struct conf_upstream u = {.tls_verify = 1};
	char err[256];
	SSL_CTX *ctx, *later;
	FILE *f;
	size_t s;

	(void) state;
	frozen_us = __real_clock_mono_us();
	for (s = 0; s < 3; s++) {
		ahead_us += MINUTE_US;	/* what earlier tests loaded is old now */
		loads = 0;
		euid_as = 0;
		ctx = ctx_for(sources[s]);
		euid_as = 65534;
		later = ctx_for(sources[s]);
		if (SSL_CTX_get_cert_store(later) == SSL_CTX_get_cert_store(ctx))
			fail_msg("%s: uid 65534 was given uid 0's store",
				 sources[s] ? sources[s] : "system");
		assert_int_equal(loads, 2);
		SSL_CTX_free(later);
		later = ctx_for(sources[s]);	/* and keeps its own */
		assert_int_equal(loads, 2);
		SSL_CTX_free(later);
		SSL_CTX_free(ctx);
	}
	euid_as = (uid_t) -1;
	frozen_us = 0;

	/* a file mode 0600 root, loaded by root: refused at once to the uid the daemon drops to */
	if (__real_geteuid() != 0) {
		print_message("test_ca_uid: not root: skipped a tls_ca only root can read\n");
		return;
	}
	assert_non_null(f = fopen(ca_root, "w"));
	assert_true(PEM_write_X509(f, signed_crt));
	fclose(f);
	assert_int_equal(chmod(ca_root, 0600), 0);
	assert_int_equal(chmod(ca_dir, 0711), 0);
	u.tls_ca = ca_root;
	ctx = ctx_for(ca_root);
	assert_int_equal(seteuid(65534), 0);
	later = tls_client_ctx_conf(&u, err, sizeof(err));
	assert_int_equal(seteuid(0), 0);
	chmod(ca_dir, 0700);
	SSL_CTX_free(ctx);
	if (later != NULL)
		fail_msg("%s unreadable to uid 65534, and it had a context", ca_root);
	if (strncmp(err, "upstream.tls_ca ", 16) != 0 || strstr(err, "Permission denied") == NULL)
		fail_msg("%s unreadable to uid 65534: \"%s\", want the reason", ca_root, err);
}

/*
 * test_ca_verifies - contexts sharing a store (a file's, a directory's)
 * accept the certificate its CA signed and refuse another, each checking
 * its own host name
 */
static void test_ca_verifies(void **state)
{
	const char *sources[] = {ca_file, ca_hashed};
	const char *why;
	SSL_CTX *a, *b;
	size_t s;

	(void) state;
	for (s = 0; s < 2; s++) {
		a = ctx_for(sources[s]);
		b = ctx_for(sources[s]);
		assert_ptr_equal(SSL_CTX_get_cert_store(a), SSL_CTX_get_cert_store(b));
		if (*(why = handshake(a, signed_crt, "mx.test")))
			fail_msg("%s: the CA's certificate refused: %s", sources[s], why);
		why = handshake(b, other_crt, "mx.test");
		if (strncmp(why, "certificate verify failed: ", 27) != 0)
			fail_msg("%s: another certificate: \"%s\", want it refused", sources[s], why);
		why = handshake(b, signed_crt, "other.test");
		if (strcmp(why, "certificate name mismatch: wanted other.test") != 0)
			fail_msg("%s: another name: \"%s\", want a mismatch", sources[s], why);
		if (*(why = handshake(a, signed_crt, "mx.test")))
			fail_msg("%s: the CA's certificate refused again: %s", sources[s], why);
		SSL_CTX_free(a);
		SSL_CTX_free(b);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ctx_host),
		cmocka_unit_test(test_digests),
		cmocka_unit_test(test_ctx_conf),
		cmocka_unit_test(test_ca_shared),
		cmocka_unit_test(test_ca_uid),
		cmocka_unit_test(test_ca_verifies),
	};

	return cmocka_run_group_tests(tests, ca_setup, ca_teardown);
}
