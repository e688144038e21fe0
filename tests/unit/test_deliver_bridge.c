/*
 * test_deliver_bridge - the bridge of deliver/esmtp/deliver_bridge.c against
 * in-process servers: implicit TLS (it is handed over to the thread that
 * opened it; another program's connect() is refused, another thread is
 * not given it; an untrusted certificate fails), and plain SMTP,
 * where the stream filter takes libesmtp's header block out of the content
 * from libesmtp's rewind on (deliver_bridge_rewind), hides CHUNKING, and
 * makes the bridge hang up when the block is missing.
 * The test plays libesmtp's part on the loopback side. (STARTTLS, AUTH and
 * libesmtp itself end to end, in tests/e2e; here only that a refusal's
 * text before STARTTLS reaches the reason cleaned of controls.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/x509v3.h>

#include "../../deliver/esmtp/deliver_bridge.h"
#include "../../deliver/esmtp/deliver_bridge_impl.h"
#include "../../deliver/esmtp/deliver_filter.h"
#include "../../deliver/esmtp/deliver_gate.h"
#include "../../tls/tls_client.h"
#include "../../util/deadline.h"
#include "test_util.h"

#define BLOCK	DELIVER_FILTER_SENTINEL "Date: Mon, 1 Jan 2024 00:00:00 +0000\r\n" \
		"From: a@b\r\n\r\n"

/*
 * a one-connection server: with a context, implicit TLS (greeting, then
 * 221 to anything); without, plain SMTP enough for the filter, recording
 * what it received
 */
struct tserver {
	SSL_CTX *ctx;			/* owned; NULL: plain */
	int lfd;
	struct sockaddr_in addr;
	pthread_t thread;
	char got[8192];			/* plain: every byte the client sent */
	size_t got_len;
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

/* tls_main - implicit TLS: greeting, then 221 to anything */
static void tls_main(struct tserver *t, int fd)
{
	char buf[512];
	SSL *ssl = SSL_new(t->ctx);

	SSL_set_fd(ssl, fd);
	if (SSL_accept(ssl) == 1) {
		SSL_write(ssl, "220 tserver ready\r\n", 19);
		if (SSL_read(ssl, buf, sizeof(buf)) > 0)
			SSL_write(ssl, "221 bye\r\n", 9);
		SSL_shutdown(ssl);
	}
	SSL_free(ssl);
}

/* plain_line - the next line the client sent (recorded), or -1 at the end */
static int plain_line(struct tserver *t, int fd, size_t *start)
{
	ssize_t n;
	char *nl;

	for (;;) {
		nl = memchr(t->got + *start, '\n', t->got_len - *start);
		if (nl) {
			*start = (size_t) (nl + 1 - t->got);
			return 0;
		}
		if (t->got_len == sizeof(t->got))
			return -1;
		if ((n = recv(fd, t->got + t->got_len, sizeof(t->got) - t->got_len, 0)) <= 0)
			return -1;
		t->got_len += (size_t) n;
	}
}

/* plain_main - plain SMTP: EHLO offers CHUNKING, DATA reads to the dot */
static void plain_main(struct tserver *t, int fd)
{
	size_t pos = 0, line;
	const char *cmd, *reply;

	send(fd, "220 pserver\r\n", 13, MSG_NOSIGNAL);
	for (;;) {
		line = pos;
		if (plain_line(t, fd, &pos) < 0)
			return;
		cmd = t->got + line;
		if (strncmp(cmd, "EHLO", 4) == 0)
			reply = "250-pserver\r\n250-CHUNKING\r\n250 PIPELINING\r\n";
		else if (strncmp(cmd, "DATA", 4) == 0)
			reply = "354 go\r\n";
		else if (strncmp(cmd, "QUIT", 4) == 0)
			reply = "221 bye\r\n";
		else if (pos - line == 3 && memcmp(cmd, ".\r\n", 3) == 0)
			reply = "250 stored\r\n";
		else if (strncmp(cmd, "MAIL", 4) == 0 || strncmp(cmd, "RCPT", 4) == 0)
			reply = "250 ok\r\n";
		else
			continue;		/* content */
		send(fd, reply, strlen(reply), MSG_NOSIGNAL);
		if (*reply == '2' && reply[1] == '2')
			return;
	}
}

static void *tserver_main(void *arg)
{
	struct tserver *t = arg;
	int fd;

	if ((fd = accept(t->lfd, NULL, NULL)) < 0)
		return NULL;
	if (t->ctx)
		tls_main(t, fd);
	else
		plain_main(t, fd);
	close(fd);
	return NULL;
}

static void tserver_start(struct tserver *t, SSL_CTX *ctx)
{
	socklen_t len = sizeof(t->addr);

	memset(t, 0, sizeof(*t));
	t->ctx = ctx;
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

/* address_of - "127.0.0.1:PORT" as a sockaddr */
static struct sockaddr_in address_of(const char *address)
{
	struct sockaddr_in a;

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons((uint16_t) atoi(strchr(address, ':') + 1));
	return a;
}

/*
 * dial - a plain TCP connect to "127.0.0.1:PORT", as another program would
 * make: the system call, not the connect() this test links
 * (deliver_connect.c), which would hand it to the bridge
 */
static int dial(const char *address)
{
	struct sockaddr_in a = address_of(address);
	int fd;

	if ((fd = socket(AF_INET, SOCK_STREAM, 0)) < 0)
		return -1;
	if (syscall(SYS_connect, fd, (struct sockaddr *) &a, sizeof(a)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/*
 * connect_to - libesmtp's connection to a bridge, as the daemon's
 * connect() makes it: handed over in-process; blocking, 5 s receive timeout
 */
static int connect_to(const char *address)
{
	struct timeval tv = { 5, 0 };
	struct sockaddr_in a = address_of(address);
	int fd;

	if ((fd = socket(AF_INET, SOCK_STREAM, 0)) < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (deliver_bridge_attach(fd, (struct sockaddr *) &a, sizeof(a)) != 1) {
		close(fd);
		return -1;
	}
	return fd;
}

/* other_thread - a connect() to a bridge from a thread that did not open it */
static void *other_thread(void *arg)
{
	struct sockaddr_in a = address_of(arg);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	intptr_t took = fd >= 0 && deliver_bridge_attach(fd, (struct sockaddr *) &a, sizeof(a));

	if (fd >= 0)
		close(fd);
	return (void *) took;
}

static void test_bridge_implicit(void **state)
{
	struct deliver_bridge *b;
	struct tserver t;
	char why[256], dsn[DELIVER_DSN_SIZE], buf[256];
	SSL_CTX *ctx;
	int fd;
	ssize_t n;
	pthread_t th;
	void *took;

	(void) state;
	tserver_start(&t, tserver_ctx());
	/* self-signed: no verification */
	ctx = tls_client_ctx_conf(&(struct conf_upstream) { .tls_verify = 0 }, why, sizeof(why));
	assert_non_null(ctx);
	assert_int_equal(tls_client_ctx_host(ctx, "localhost"), 0);
	b = deliver_bridge_open(ctx, (struct sockaddr *) &t.addr, sizeof(t.addr), NULL, 5000,
				    why, sizeof(why), dsn);
	if (b == NULL)
		fail_msg("deliver_bridge_open: %s (%s)", why, dsn);

	/*
	 * another program's connect() first, the system call without this
	 * test's connect(): refused, nothing listens there (the kernel's
	 * refusal, the same for any process, so no fork: a child would take
	 * the server thread's allocations for leaks under valgrind)
	 */
	if ((fd = dial(DELIVER_BRIDGE_ADDRESS)) >= 0 || errno != ECONNREFUSED)
		fail_msg("a connection not handed over was not refused: %s",
			 fd >= 0 ? "connected" : strerror(errno));
	/* another thread of this process: not its bridge */
	assert_int_equal(pthread_create(&th, NULL, other_thread,
					(void *) DELIVER_BRIDGE_ADDRESS), 0);
	assert_int_equal(pthread_join(th, &took), 0);
	if (took != NULL)
		fail_msg("a thread that did not open the bridge was handed it");

	/* this process: the server's greeting, over TLS behind the bridge */
	fd = connect_to(DELIVER_BRIDGE_ADDRESS);
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
	assert_non_null(strstr(deliver_bridge_tls(b), "TLSv1."));
	deliver_bridge_close(b);
	SSL_CTX_free(ctx);
	tserver_stop(&t);
}

static void test_bridge_untrusted(void **state)
{
	struct deliver_bridge *b;
	struct tserver t;
	char why[256], dsn[DELIVER_DSN_SIZE];
	SSL_CTX *ctx;

	(void) state;
	tserver_start(&t, tserver_ctx());
	ctx = tls_client_ctx_conf(&(struct conf_upstream) { .tls_verify = 1 }, why, sizeof(why));
	assert_non_null(ctx);
	assert_int_equal(tls_client_ctx_host(ctx, "localhost"), 0);
	b = deliver_bridge_open(ctx, (struct sockaddr *) &t.addr, sizeof(t.addr), NULL, 5000,
				    why, sizeof(why), dsn);
	assert_null(b);
	assert_string_equal(dsn, "4.7.5");
	if (strstr(why, "certificate verify failed") == NULL)
		fail_msg("why: %s", why);
	SSL_CTX_free(ctx);
	tserver_stop(&t);
}

/* expect - read from fd until want has come (5 s at most); fail otherwise */
static void expect(int fd, const char *want)
{
	char buf[4096];
	size_t len = 0;
	ssize_t n;

	for (;;) {
		buf[len] = 0;
		if (strstr(buf, want))
			return;
		if (len == sizeof(buf) - 1 || (n = recv(fd, buf + len, sizeof(buf) - 1 - len, 0)) <= 0)
			fail_msg("want \"%s\", got \"%s\"", esc(want, strlen(want)), esc(buf, len));
		len += (size_t) n;
	}
}

/* say - send a string on fd */
static void say(int fd, const char *s)
{
	assert_int_equal(send(fd, s, strlen(s), 0), (ssize_t) strlen(s));
}

/*
 * upstream_nodelay - the bridge's one connection to the server at addr has
 * TCP_NODELAY (bridge_connect): found among our descriptors by its peer
 */
static void upstream_nodelay(const struct sockaddr_in *addr)
{
	struct sockaddr_in peer;
	socklen_t len;
	int fd, v, found = 0;

	for (fd = 3; fd < 1024; fd++) {
		len = sizeof(peer);
		if (getpeername(fd, (struct sockaddr *) &peer, &len) < 0 || len != sizeof(peer)
		    || peer.sin_port != addr->sin_port || peer.sin_addr.s_addr != addr->sin_addr.s_addr)
			continue;
		len = sizeof(v);
		assert_int_equal(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, &len), 0);
		if (v == 0)
			fail_msg("the bridge's upstream socket: got TCP_NODELAY 0, want 1");
		found++;
	}
	assert_int_equal(found, 1);
}

/* plain_bridge - a plain server and a bridge to it, and our connection to the bridge */
static struct deliver_bridge *plain_bridge(struct tserver *t, int *fd)
{
	struct deliver_bridge *b;
	char why[256], dsn[DELIVER_DSN_SIZE];

	tserver_start(t, NULL);
	b = deliver_bridge_open(NULL, (struct sockaddr *) &t->addr, sizeof(t->addr), NULL, 5000,
				why, sizeof(why), dsn);
	if (b == NULL)
		fail_msg("deliver_bridge_open: %s (%s)", why, dsn);
	assert_string_equal(deliver_bridge_tls(b), "");
	upstream_nodelay(&t->addr);
	*fd = connect_to(DELIVER_BRIDGE_ADDRESS);
	assert_true(*fd >= 0);
	expect(*fd, "220 pserver\r\n");
	return b;
}

/* server_got - the server must have got exactly want */
static void server_got(const struct tserver *t, const char *want)
{
	if (t->got_len != strlen(want) || memcmp(t->got, want, t->got_len) != 0)
		fail_msg("server got \"%s\", want \"%s\"", esc(t->got, t->got_len),
			 esc(want, strlen(want)));
}

/* plain_finish - hang up, the bridge ends on its own, the server got want */
static void plain_finish(struct deliver_bridge *b, struct tserver *t, int fd, const char *want)
{
	close(fd);
	assert_null(deliver_bridge_end(b));
	deliver_bridge_close(b);
	tserver_stop(t);
	server_got(t, want);
}

static void test_bridge_plain_two_messages(void **state)
{
	static const char want[] = "EHLO relay\r\n"
	    "MAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\nDATA\r\n"
	    "Subject: one\r\nTo: x\r\nTo: y\r\n\r\nfirst\r\n.\r\n"
	    "MAIL FROM:<a@b>\r\nRCPT TO:<e@f>\r\nDATA\r\n"
	    "Return-Path: <z>\r\n.\r\n"
	    "QUIT\r\n";
	struct deliver_bridge *b;
	struct tserver t;
	int fd;

	(void) state;
	b = plain_bridge(&t, &fd);
	say(fd, "EHLO relay\r\n");
	expect(fd, "250-X-HIDDEN\r\n250 PIPELINING\r\n");
	say(fd, "MAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\nDATA\r\n");
	expect(fd, "354 go\r\n");
	deliver_bridge_rewind(b);	/* as libesmtp's message callback is told, then writes */
	say(fd, BLOCK "Subject: one\r\nTo: x\r\n");
	say(fd, "To: y\r\n\r\nfirst\r\n.\r\n");
	expect(fd, "250 stored\r\n");
	say(fd, "MAIL FROM:<a@b>\r\nRCPT TO:<e@f>\r\nDATA\r\n");
	expect(fd, "354 go\r\n");
	deliver_bridge_rewind(b);
	say(fd, DELIVER_FILTER_SENTINEL "\r");
	say(fd, "\nReturn-Path: <z>\r\n.\r\n");
	expect(fd, "250 stored\r\n");
	say(fd, "QUIT\r\n");
	expect(fd, "221 bye\r\n");
	plain_finish(b, &t, fd, want);
}

static void test_bridge_plain_refused(void **state)
{
	static const char want[] = "MAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\nDATA\r\n";
	struct deliver_bridge *b;
	struct tserver t;
	const char *why;
	char buf[64];
	int fd;

	(void) state;
	b = plain_bridge(&t, &fd);
	say(fd, want);
	expect(fd, "354 go\r\n");
	deliver_bridge_rewind(b);
	say(fd, "Subject: no block\r\n\r\nbody\r\n.\r\n");
	assert_true(recv(fd, buf, sizeof(buf), 0) <= 0);	/* hung up on, no reply */
	close(fd);
	why = deliver_bridge_end(b);
	if (why == NULL || strstr(why, "sentinel") == NULL)
		fail_msg("deliver_bridge_end: %s", why ? why : "(null)");
	deliver_bridge_close(b);
	tserver_stop(&t);
	server_got(&t, want);
}

/*
 * a cut: nothing more goes up, and libesmtp's commands, pipelined after it,
 * are answered for the server, never hung up on (with three replies owed,
 * a hang-up crashed libESMTP 1.1.0: deliver_gate.h)
 */
static void test_bridge_plain_cut(void **state)
{
	struct deliver_bridge *b;
	struct tserver t;
	int fd, timed_out, stood_in;

	(void) state;
	b = plain_bridge(&t, &fd);
	deliver_bridge_cut(b);
	say(fd, "MAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\nRCPT TO:<e@f>\r\nDATA\r\n");
	expect(fd, "421 4.4.2 " DELIVER_GATE_MARK " the session was cut short, no reply to DATA\r\n");
	say(fd, "QUIT\r\n");
	expect(fd, "221 2.0.0 " DELIVER_GATE_MARK);
	close(fd);
	assert_null(deliver_bridge_end(b));
	(void) deliver_bridge_ended(b, &timed_out, &stood_in);
	assert_true(stood_in && !timed_out);
	deliver_bridge_close(b);
	tserver_stop(&t);
	assert_int_equal(t.got_len, 0);
}

/* attach_to - deliver_bridge_attach() as deliver_connect.c's connect() calls it */
static int attach_to(int fd, const char *address)
{
	struct sockaddr_in a = address_of(address);

	return deliver_bridge_attach(fd, (struct sockaddr *) &a, sizeof(a));
}

/* libesmtp's connection handed over in-process: an AF_UNIX socket, flags kept */
static void test_bridge_attach(void **state)
{
	static const char want[] = "EHLO relay\r\nQUIT\r\n";
	struct timeval tv = { 5, 0 };
	struct deliver_bridge *b;
	struct sockaddr_in bridge;
	struct tserver t;
	char why[256], dsn[DELIVER_DSN_SIZE], server[32];
	int fd, domain = 0;
	socklen_t len = sizeof(domain);
	sigset_t pipe, mask;

	(void) state;
	tserver_start(&t, NULL);
	sigemptyset(&pipe);
	sigaddset(&pipe, SIGPIPE);
	assert_int_equal(pthread_sigmask(SIG_UNBLOCK, &pipe, NULL), 0);
	b = deliver_bridge_open(NULL, (struct sockaddr *) &t.addr, sizeof(t.addr), NULL, 5000,
				why, sizeof(why), dsn);
	if (b == NULL)
		fail_msg("deliver_bridge_open: %s (%s)", why, dsn);
	/* libesmtp's thread, and the bridge's it starts: writes to a side gone fail, EPIPE */
	assert_int_equal(pthread_sigmask(SIG_BLOCK, NULL, &mask), 0);
	assert_true(sigismember(&mask, SIGPIPE));
	snprintf(server, sizeof(server), "127.0.0.1:%u", ntohs(t.addr.sin_port));
	assert_true((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) >= 0);
	assert_int_equal(attach_to(fd, server), 0);	/* not a bridge: connect as asked */
	/* libesmtp's call: the library's own connect() hands it over */
	bridge = address_of(DELIVER_BRIDGE_ADDRESS);
	assert_int_equal(connect(fd, (struct sockaddr *) &bridge, sizeof(bridge)), 0);
	assert_int_equal(attach_to(fd, DELIVER_BRIDGE_ADDRESS), 0);	/* taken */
	assert_int_equal(getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len), 0);
	assert_int_equal(domain, AF_UNIX);
	assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	assert_true(fcntl(fd, F_GETFL) & O_NONBLOCK);
	assert_int_equal(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK), 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	expect(fd, "220 pserver\r\n");
	say(fd, "EHLO relay\r\n");
	expect(fd, "250-X-HIDDEN\r\n250 PIPELINING\r\n");
	say(fd, "QUIT\r\n");
	expect(fd, "221 bye\r\n");
	plain_finish(b, &t, fd, want);
}

/*
 * STARTTLS: a refused greeting's text reaches the reason on one clean
 * line, as every other reply's does (deliver_reply_format): no escape
 * sequence, CR or BEL for the log, the store and idemrelayctl
 */
static void test_bridge_starttls_reply_controls(void **state)
{
	static const char greet[] = "554 5.3.2 \033[2J\033[31mgo away\rFAKE\007\r\n";
	struct deliver_bridge b = { .tfd = -1 };
	struct timespec deadline = deadline_in(2000);
	char why[512], dsn[DELIVER_DSN_SIZE];
	int sv[2];

	(void) state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(send(sv[1], greet, strlen(greet), 0), (ssize_t) strlen(greet));
	shutdown(sv[1], SHUT_WR);
	b.tfd = sv[0];
	assert_int_equal(deliver_bridge_starttls(&b, "relay.example", &deadline, why,
						 sizeof(why), dsn), -1);
	assert_string_equal(why, "refused to talk to me: 554 5.3.2 [2J [31mgo away FAKE");
	assert_string_equal(dsn, "4.4.1");
	close(sv[0]);
	close(sv[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bridge_implicit),
		cmocka_unit_test(test_bridge_untrusted),
		cmocka_unit_test(test_bridge_plain_two_messages),
		cmocka_unit_test(test_bridge_plain_refused),
		cmocka_unit_test(test_bridge_plain_cut),
		cmocka_unit_test(test_bridge_attach),
		cmocka_unit_test(test_bridge_starttls_reply_controls),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
