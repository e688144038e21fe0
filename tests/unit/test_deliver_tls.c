/*
 * test_deliver_tls - the client TLS context of relay/deliver_tls.c, and the
 * bridge against an in-process implicit-TLS server: it serves this process
 * and refuses another's connection. (STARTTLS, AUTH and the rest end to
 * end, in tests/e2e/cases_upstream_tls.py.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/x509v3.h>

#include "../../relay/deliver_tls.h"

static void test_ctx_host(void **state)
{
	char err[256], longname[300];
	SSL_CTX *ctx;

	(void) state;
	ctx = deliver_tls_ctx_new(1, err, sizeof(err));
	if (ctx == NULL)
		fail_msg("deliver_tls_ctx_new: %s", err);
	assert_int_equal(SSL_CTX_get_min_proto_version(ctx), TLS1_2_VERSION);
	assert_int_equal(SSL_CTX_get_verify_mode(ctx), SSL_VERIFY_PEER);
	assert_int_equal(deliver_tls_ctx_host(ctx, "smtp.example.com"), 0);
	assert_int_equal(deliver_tls_ctx_host(ctx, "192.0.2.1"), 0);
	assert_int_equal(deliver_tls_ctx_host(ctx, "2001:db8::1"), 0);
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = 0;
	assert_int_equal(deliver_tls_ctx_host(ctx, longname), -1);
	SSL_CTX_free(ctx);

	ctx = deliver_tls_ctx_new(0, err, sizeof(err));
	assert_non_null(ctx);
	assert_int_equal(SSL_CTX_get_verify_mode(ctx), SSL_VERIFY_NONE);
	assert_int_equal(deliver_tls_ctx_host(ctx, "smtp.example.com"), 0);
	SSL_CTX_free(ctx);
}

/* a one-connection implicit-TLS server: greeting, then 221 to anything */
struct tserver {
	SSL_CTX *ctx;
	int lfd;
	struct sockaddr_in addr;
	pthread_t thread;
};

/* tserver_ctx - a server context with a fresh self-signed certificate for localhost */
static SSL_CTX *tserver_ctx(void)
{
	EVP_PKEY *key = EVP_EC_gen("P-256");
	X509 *x = X509_new();
	X509_NAME *name;
	X509_EXTENSION *ext;
	X509V3_CTX v3;
	SSL_CTX *ctx;

	assert_non_null(key);
	assert_non_null(x);
	X509_set_version(x, 2);
	ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
	X509_gmtime_adj(X509_getm_notBefore(x), -60);
	X509_gmtime_adj(X509_getm_notAfter(x), 3600);
	X509_set_pubkey(x, key);
	name = X509_get_subject_name(x);
	X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *) "localhost",
				   -1, -1, 0);
	X509_set_issuer_name(x, name);
	X509V3_set_ctx(&v3, x, x, NULL, NULL, 0);
	ext = X509V3_EXT_conf_nid(NULL, &v3, NID_subject_alt_name, "DNS:localhost");
	assert_non_null(ext);
	X509_add_ext(x, ext, -1);
	X509_EXTENSION_free(ext);
	assert_true(X509_sign(x, key, EVP_sha256()) > 0);
	ctx = SSL_CTX_new(TLS_server_method());
	assert_non_null(ctx);
	assert_int_equal(SSL_CTX_use_certificate(ctx, x), 1);
	assert_int_equal(SSL_CTX_use_PrivateKey(ctx, key), 1);
	X509_free(x);
	EVP_PKEY_free(key);
	return ctx;
}

static void *tserver_main(void *arg)
{
	struct tserver *t = arg;
	char buf[512];
	SSL *ssl;
	int fd;

	if ((fd = accept(t->lfd, NULL, NULL)) < 0)
		return NULL;
	ssl = SSL_new(t->ctx);
	SSL_set_fd(ssl, fd);
	if (SSL_accept(ssl) == 1) {
		SSL_write(ssl, "220 tserver ready\r\n", 19);
		if (SSL_read(ssl, buf, sizeof(buf)) > 0)
			SSL_write(ssl, "221 bye\r\n", 9);
		SSL_shutdown(ssl);
	}
	SSL_free(ssl);
	close(fd);
	return NULL;
}

static void tserver_start(struct tserver *t, SSL_CTX *ctx)
{
	socklen_t len = sizeof(t->addr);

	t->ctx = ctx;
	memset(&t->addr, 0, sizeof(t->addr));
	t->addr.sin_family = AF_INET;
	t->addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	t->lfd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(t->lfd >= 0);
	assert_int_equal(bind(t->lfd, (struct sockaddr *) &t->addr, sizeof(t->addr)), 0);
	assert_int_equal(listen(t->lfd, 1), 0);
	assert_int_equal(getsockname(t->lfd, (struct sockaddr *) &t->addr, &len), 0);
	assert_int_equal(pthread_create(&t->thread, NULL, tserver_main, t), 0);
}

static void tserver_stop(struct tserver *t)
{
	shutdown(t->lfd, SHUT_RDWR);
	pthread_join(t->thread, NULL);
	close(t->lfd);
	SSL_CTX_free(t->ctx);
}

/* connect_to - a blocking TCP connection to "127.0.0.1:PORT", 5s receive timeout */
static int connect_to(const char *address)
{
	struct timeval tv = { 5, 0 };
	struct sockaddr_in a;
	int fd;

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons((uint16_t) atoi(strchr(address, ':') + 1));
	if ((fd = socket(AF_INET, SOCK_STREAM, 0)) < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *) &a, sizeof(a)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static void test_bridge_implicit(void **state)
{
	struct deliver_tls_bridge *b;
	struct tserver t;
	char why[256], dsn[16], buf[256];
	SSL_CTX *ctx;
	int fd, status;
	ssize_t n;
	pid_t pid;

	(void) state;
	tserver_start(&t, tserver_ctx());
	ctx = deliver_tls_ctx_new(0, why, sizeof(why));	/* self-signed: no verification */
	assert_non_null(ctx);
	assert_int_equal(deliver_tls_ctx_host(ctx, "localhost"), 0);
	b = deliver_tls_bridge_open(ctx, (struct sockaddr *) &t.addr, sizeof(t.addr), NULL, 5000,
				    why, sizeof(why), dsn);
	if (b == NULL)
		fail_msg("deliver_tls_bridge_open: %s (%s)", why, dsn);

	/* another process connects first: hung up on, never given the server */
	if ((pid = fork()) == 0) {
		fd = connect_to(deliver_tls_bridge_address(b));
		n = fd < 0 ? -1 : recv(fd, buf, sizeof(buf), 0);
		_exit(n == 0 ? 0 : 1);
	}
	assert_true(pid > 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("a connection from another process was not refused");

	/* this process: the server's greeting, over TLS behind the bridge */
	fd = connect_to(deliver_tls_bridge_address(b));
	assert_true(fd >= 0);
	n = recv(fd, buf, sizeof(buf) - 1, 0);
	assert_true(n > 0);
	buf[n] = 0;
	assert_string_equal(buf, "220 tserver ready\r\n");
	assert_int_equal(send(fd, "QUIT\r\n", 6, 0), 6);
	n = recv(fd, buf, sizeof(buf) - 1, 0);
	assert_true(n > 0);
	buf[n] = 0;
	assert_string_equal(buf, "221 bye\r\n");
	close(fd);
	assert_non_null(strstr(deliver_tls_bridge_tls(b), "TLSv1."));
	deliver_tls_bridge_close(b);
	SSL_CTX_free(ctx);
	tserver_stop(&t);
}

static void test_bridge_untrusted(void **state)
{
	struct deliver_tls_bridge *b;
	struct tserver t;
	char why[256], dsn[16];
	SSL_CTX *ctx;

	(void) state;
	tserver_start(&t, tserver_ctx());
	ctx = deliver_tls_ctx_new(1, why, sizeof(why));
	assert_non_null(ctx);
	assert_int_equal(deliver_tls_ctx_host(ctx, "localhost"), 0);
	b = deliver_tls_bridge_open(ctx, (struct sockaddr *) &t.addr, sizeof(t.addr), NULL, 5000,
				    why, sizeof(why), dsn);
	assert_null(b);
	assert_string_equal(dsn, "4.7.5");
	if (strstr(why, "server certificate not trusted") == NULL)
		fail_msg("why: %s", why);
	SSL_CTX_free(ctx);
	tserver_stop(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ctx_host),
		cmocka_unit_test(test_bridge_implicit),
		cmocka_unit_test(test_bridge_untrusted),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
