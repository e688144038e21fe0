/*
 * test_tls_client - the client TLS context of tls/tls_client.c. (The
 * handshake through the bridge in test_deliver_bridge.c; STARTTLS, AUTH
 * and the rest end to end, in tests/e2e/cases_upstream_tls.py.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <openssl/pem.h>

#include "../../tls/tls_client.h"
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ctx_host),
		cmocka_unit_test(test_digests),
		cmocka_unit_test(test_ctx_conf),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
