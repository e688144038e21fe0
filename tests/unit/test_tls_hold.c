/*
 * test_tls_hold - the server TLS transport holds what it writes until it is
 * flushed (tls/tls_hold.c, io.h): a turn's records go out in one write(2) and one
 * segment. A client SSL on the other end of a socketpair, both driven here.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "../../tls/tls.h"
#include "../../tls/tls_int.h"	/* for struct tls_io: the held records' buffer */
#include "../../util/hash.h"
#include "../../relay/pace.c"		/* pace_sweep, which trims idle sessions */

/* a session for pace_sweep: neither waiting nor paused, nor closing */
int smtp_session_waiting(const struct smtp_session *s) { (void) s; return 0; }
int smtp_session_closing(const struct smtp_session *s) { (void) s; return 0; }
int smtp_session_in_data(const struct smtp_session *s) { (void) s; return 0; }
unsigned long smtp_session_records(const struct smtp_session *s) { (void) s; return 7; }
const char *smtp_session_where(const struct smtp_session *s) { (void) s; return "EHLO"; }
void smtp_session_close(struct smtp_session *s, enum smtp_close why) { (void) s, (void) why; fail_msg("timed out"); }
void conn_close(struct conn *c) { (void) c; fail_msg("closed"); }
int conn_flush(struct conn *c) { (void) c; return 0; }

static size_t ossl_live;		/* octets OpenSSL has allocated, not freed */

/* count_malloc - OpenSSL's malloc, counted; the size kept before the block */
static void *count_malloc(size_t n, const char *file, int line)
{
	size_t *b = malloc(n + 16);

	(void) file, (void) line;
	if (b == NULL)
		return NULL;
	b[0] = n;
	ossl_live += n;
	return (char *) b + 16;
}

/* count_free - OpenSSL's free, counted */
static void count_free(void *q, const char *file, int line)
{
	size_t *b = q ? (size_t *) ((char *) q - 16) : NULL;

	(void) file, (void) line;
	if (b == NULL)
		return;
	ossl_live -= b[0];
	free(b);
}

/* count_realloc - OpenSSL's realloc, counted */
static void *count_realloc(void *q, size_t n, const char *file, int line)
{
	size_t *b;

	if (q == NULL)
		return count_malloc(n, file, line);
	b = realloc((char *) q - 16, n + 16);
	if (b == NULL)
		return NULL;
	ossl_live += n - b[0];
	b[0] = n;
	return (char *) b + 16;
}

struct pair {
	char    dir[64], cert[96], key[96];
	struct tls *tls;
	struct io *io;			/* the server's end */
	SSL_CTX *cctx;
	SSL    *cssl;			/* the client's end */
	int     cfd;
};

/* make_cert - a self-signed P-256 certificate and its key, as PEM files */
static void make_cert(struct pair *p)
{
	EVP_PKEY *pk = EVP_EC_gen("P-256");
	X509   *x = X509_new();
	FILE   *f;

	assert_non_null(pk);
	assert_non_null(x);
	ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
	X509_gmtime_adj(X509_getm_notBefore(x), 0);
	X509_gmtime_adj(X509_getm_notAfter(x), 3600);
	X509_set_pubkey(x, pk);
	X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC,
				   (const unsigned char *) "hold.test", -1, -1, 0);
	X509_set_issuer_name(x, X509_get_subject_name(x));
	assert_true(X509_sign(x, pk, EVP_sha256()) > 0);
	assert_non_null(f = fopen(p->cert, "w"));
	assert_int_equal(PEM_write_X509(f, x), 1);
	fclose(f);
	assert_non_null(f = fopen(p->key, "w"));
	assert_int_equal(PEM_write_PrivateKey(f, pk, NULL, NULL, 0, NULL, NULL), 1);
	fclose(f);
	X509_free(x);
	EVP_PKEY_free(pk);
}

/* on_wire - octets the client could read now, without reading them */
static ssize_t on_wire(const struct pair *p)
{
	char    b[4096];
	ssize_t n = recv(p->cfd, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT);

	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return 0;
	return n;
}

/* client_read - what the client's SSL_read gives (-1: its close_notify came) */
static int client_read(struct pair *p, char *buf, int len)
{
	int     n = SSL_read(p->cssl, buf, len - 1);

	if (n <= 0)
		return SSL_get_error(p->cssl, n) == SSL_ERROR_ZERO_RETURN ? -1 : 0;
	buf[n] = '\0';
	return n;
}

/* setup - a server transport and a client SSL over a socketpair, handshake done */
static int setup(void **state)
{
	struct pair *p = calloc(1, sizeof(*p));
	char    err[256];
	int     sv[2], done = 0, cdone = 0, i, r;

	snprintf(p->dir, sizeof(p->dir), "/tmp/test_tls_hold.XXXXXX");
	assert_non_null(mkdtemp(p->dir));
	snprintf(p->cert, sizeof(p->cert), "%s/cert.pem", p->dir);
	snprintf(p->key, sizeof(p->key), "%s/key.pem", p->dir);
	make_cert(p);
	if (tls_new(&p->tls, p->cert, p->key, NULL, err, sizeof(err)) < 0)
		fail_msg("tls_new: %s", err);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
	assert_non_null(p->io = tls_io_new(p->tls, sv[0], "192.0.2.1"));
	p->cfd = sv[1];
	assert_non_null(p->cctx = SSL_CTX_new(TLS_client_method()));
	SSL_CTX_set_verify(p->cctx, SSL_VERIFY_NONE, NULL);
	assert_non_null(p->cssl = SSL_new(p->cctx));
	assert_int_equal(SSL_set_fd(p->cssl, p->cfd), 1);
	for (i = 0; i < 100 && !(done && cdone); i++) {
		if (!cdone && (r = SSL_connect(p->cssl)) == 1)
			cdone = 1;
		else if (!cdone && SSL_get_error(p->cssl, r) != SSL_ERROR_WANT_READ)
			fail_msg("SSL_connect failed");
		if (!done && (r = io_handshake(p->io)) < 0)
			fail_msg("handshake: %s", p->io->err);
		done |= r == 1;
	}
	assert_true(done && cdone);
	assert_int_equal(SSL_version(p->cssl), TLS1_3_VERSION);
	*state = p;
	return 0;
}

/* teardown - both ends, the files */
static int teardown(void **state)
{
	struct pair *p = *state;

	io_close(p->io);
	SSL_free(p->cssl);
	SSL_CTX_free(p->cctx);
	close(p->cfd);
	tls_free(p->tls);
	unlink(p->cert);
	unlink(p->key);
	rmdir(p->dir);
	free(p);
	return 0;
}

/*
 * test_reply_takes_the_ticket - the session ticket after the handshake
 * waits for the first reply; a reply waits for the flush; both then reach
 * the client, which reads the reply
 */
static void test_reply_takes_the_ticket(void **state)
{
	struct pair *p = *state;
	static const char reply[] = "250 ok\r\n";
	char    got[256];

	assert_int_equal(on_wire(p), 0);	/* the ticket is held */
	assert_int_equal(io_write(p->io, reply, sizeof(reply) - 1), sizeof(reply) - 1);
	assert_int_equal(on_wire(p), 0);	/* and so is the reply */
	assert_int_equal(io_flush(p->io), 0);
	assert_int_equal(p->io->flush_wants, 0);
	assert_true(on_wire(p) > (ssize_t) sizeof(reply));
	assert_int_equal(client_read(p, got, sizeof(got)), sizeof(reply) - 1);
	assert_string_equal(got, reply);
	assert_int_equal(io_flush(p->io), 0);	/* nothing held: nothing sent */
	assert_int_equal(on_wire(p), 0);
}

/*
 * test_goodbye_with_the_last_reply - the 221 is held until the close,
 * which sends it with the close_notify
 */
static void test_goodbye_with_the_last_reply(void **state)
{
	struct pair *p = *state;
	static const char bye[] = "221 2.0.0 Bye\r\n";
	char    got[256];

	assert_int_equal(io_flush(p->io), 0);
	while (client_read(p, got, sizeof(got)) > 0)	/* the ticket alone: nothing */
		;
	assert_int_equal(io_write(p->io, bye, sizeof(bye) - 1), sizeof(bye) - 1);
	assert_int_equal(on_wire(p), 0);
	io_close(p->io);
	p->io = NULL;
	assert_int_equal(client_read(p, got, sizeof(got)), sizeof(bye) - 1);
	assert_string_equal(got, bye);
	assert_int_equal(client_read(p, got, sizeof(got)), -1);	/* close_notify */
}

/* test_full_socket_waits - past what the socket takes, a flush asks for EPOLLOUT */
static void test_full_socket_waits(void **state)
{
	struct pair *p = *state;
	static char big[4096];
	size_t  sent = 0;
	ssize_t n = 0;
	char    got[sizeof(big) + 1];
	int     i, r;

	memset(big, 'x', sizeof(big));
	for (i = 0; i < 4096 && (n = io_write(p->io, big, sizeof(big))) > 0; i++)
		sent += (size_t) n;
	assert_int_equal(n, IO_AGAIN);		/* held past TLS_HOLD_MAX, socket full */
	assert_true(sent > 16384);
	assert_int_equal(io_flush(p->io), IO_AGAIN);
	assert_int_not_equal(p->io->flush_wants, 0);
	while (sent > 0) {			/* the client reads; the rest follows */
		if ((r = client_read(p, got, sizeof(got))) > 0) {
			sent -= (size_t) r;
			continue;
		}
		assert_int_equal(r, 0);
		r = io_flush(p->io);
		assert_true(r == 0 || r == IO_AGAIN);
	}
	assert_int_equal(io_flush(p->io), 0);
	assert_int_equal(p->io->flush_wants, 0);
}

/*
 * test_goodbye_waits_for_a_full_socket - a closing session's 221 held in
 * front of a full socket: io_goodbye says IO_AGAIN (EPOLLOUT) until the
 * client has made room, then sends the 221 and the close_notify
 */
static void test_goodbye_waits_for_a_full_socket(void **state)
{
	struct pair *p = *state;
	static const char bye[] = "221 2.0.0 Bye\r\n";
	static char junk[4096];
	char    got[sizeof(junk)];
	size_t  filled = 0;
	ssize_t n;
	int     i;

	assert_int_equal(io_flush(p->io), 0);
	while (client_read(p, got, sizeof(got)) > 0)	/* the ticket alone: nothing */
		;
	while ((n = write(p->io->fd, junk, sizeof(junk))) > 0)	/* not TLS: read raw below */
		filled += (size_t) n;
	assert_true(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
	assert_int_equal(io_write(p->io, bye, sizeof(bye) - 1), sizeof(bye) - 1);
	assert_int_equal(io_goodbye(p->io), IO_AGAIN);
	assert_int_equal(p->io->flush_wants, EPOLLOUT);
	assert_int_equal(io_goodbye(p->io), IO_AGAIN);	/* again: one close_notify */
	while (filled > 0) {
		n = recv(p->cfd, got, filled < sizeof(got) ? filled : sizeof(got), 0);
		assert_true(n > 0);
		filled -= (size_t) n;
	}
	for (i = 0; i < 100 && (n = io_goodbye(p->io)) == IO_AGAIN; i++)
		;
	assert_int_equal(n, 0);
	assert_int_equal(p->io->flush_wants, 0);
	assert_int_equal(client_read(p, got, sizeof(got)), sizeof(bye) - 1);
	assert_string_equal(got, bye);
	assert_int_equal(client_read(p, got, sizeof(got)), -1);	/* close_notify */
}

/*
 * test_idle_gives_memory_back - io_trim frees the held records' buffer
 * once it is empty, and keeps what is not sent
 */
static void test_idle_gives_memory_back(void **state)
{
	struct pair *p = *state;
	static char reply[4096];
	char    got[sizeof(reply) + 1];
	struct buf *held = &((struct tls_io *) p->io)->hold.held;
	int     n, r;

	memset(reply, 'r', sizeof(reply));
	assert_int_equal(io_write(p->io, reply, sizeof(reply)), sizeof(reply));
	io_trim(p->io);				/* held: kept */
	assert_true(held->len > sizeof(reply));
	assert_int_equal(io_flush(p->io), 0);
	for (n = 0; n < (int) sizeof(reply); n += r)
		assert_true((r = client_read(p, got, sizeof(got))) > 0);
	assert_true(held->cap > sizeof(reply));	/* a flush keeps the room */
	io_trim(p->io);
	assert_null(held->data);
	assert_int_equal(held->cap, 0);
	assert_int_equal(io_write(p->io, "250 ok\r\n", 8), 8);	/* and it is made anew */
	assert_int_equal(io_flush(p->io), 0);
	assert_int_equal(client_read(p, got, sizeof(got)), 8);
}

/*
 * test_sweep_trims_idle_only - pace_sweep gives the held buffer back for
 * a session with no input for a second, not for one that sent a record
 * just now (pace_input re-arms on every record: a busy pipelining session
 * freed and made its buffer anew once a second)
 */
static void test_sweep_trims_idle_only(void **state)
{
	struct pair *p = *state;
	struct buf *held = &((struct tls_io *) p->io)->hold.held;
	struct conf cf = { 0 };
	struct server srv = { 0 };
	struct conn c = { 0 };
	char    got[64];

	cf.limits.connections = 1000;
	cf.limits.command_timeout = 300;
	cf.limits.stress_timeout = 10;
	srv.cf = &cf;
	srv.conns = &c;
	srv.n_conns = 1;
	c.srv = &srv;
	c.io = p->io;
	assert_int_equal(io_write(p->io, "250 ok\r\n", 8), 8);
	assert_int_equal(io_flush(p->io), 0);
	while (client_read(p, got, sizeof(got)) > 0)
		;
	pace_arm(&c);				/* a record came just now */
	pace_sweep(&srv);
	assert_non_null(held->data);		/* busy: the room is kept */
	c.armed -= 2 * PACE_US;			/* nothing for two seconds */
	pace_sweep(&srv);
	assert_null(held->data);		/* idle: given back */
	assert_int_equal(held->cap, 0);
}

/*
 * test_stalled_peer_bounded - a peer that stops reading (its socket full),
 * 64 KB written: a
 * write that would take what is held past TLS_HOLD_MAX sends it first,
 * and the held buffer grows to one record's room at most (it doubled to
 * 32,768 for one 16 KB record)
 */
static void test_stalled_peer_bounded(void **state)
{
	struct pair *p = *state;
	static char big[65536];
	struct buf *held = &((struct tls_io *) p->io)->hold.held;
	size_t  sent = 0;
	ssize_t n = 0;
	int     i;

	memset(big, 'x', sizeof(big));
	assert_int_equal(io_flush(p->io), 0);	/* the ticket goes */
	while (write(p->io->fd, big, sizeof(big)) > 0)	/* the peer has stopped reading */
		;
	for (i = 0; i < 1024 && sent < sizeof(big); i++) {
		if ((n = io_write(p->io, big + sent, sizeof(big) - sent)) > 0)
			sent += (size_t) n;
		else if (n == IO_AGAIN && io_flush(p->io) == IO_AGAIN)
			break;			/* the socket is full: held, as a stalled peer's */
		assert_true(held->len <= TLS_RECORD_MAX);
		assert_true(held->cap <= TLS_HOLD_ROOM);
	}
	assert_true(sent > 0);
	assert_true(held->cap <= TLS_HOLD_ROOM);
	assert_true(TLS_HOLD_ROOM <= TLS_HOLD_MAX + TLS_RECORD_MAX);
}

/*
 * test_stalled_peer_memory - what a session whose peer stops reading
 * holds for its output, OpenSSL's allocations counted with the held
 * buffer's room: one record's room (TLS_HOLD_ROOM) and a little, not that
 * and OpenSSL's own copy of a refused record (~33 KB)
 */
static void test_stalled_peer_memory(void **state)
{
	struct pair *p = *state;
	static char big[65536];
	struct buf *held = &((struct tls_io *) p->io)->hold.held;
	size_t  sent = 0, base, got;
	ssize_t n;
	int     i;

	memset(big, 'x', sizeof(big));
	assert_int_equal(io_flush(p->io), 0);	/* the ticket goes */
	io_trim(p->io);
	while (write(p->io->fd, big, sizeof(big)) > 0)	/* the peer has stopped reading */
		;
	base = ossl_live;
	for (i = 0; i < 1024 && sent < sizeof(big); i++) {
		if ((n = io_write(p->io, big + sent, sizeof(big) - sent)) > 0)
			sent += (size_t) n;
		else if (n == IO_AGAIN && io_flush(p->io) == IO_AGAIN)
			break;			/* stalled */
	}
	assert_true(sent > 0 && sent < sizeof(big));
	got = ossl_live - base + held->cap;
	if (got > TLS_HOLD_ROOM + 1024)
		fail_msg("a stalled session holds %zu octets, want at most %d", got,
			 TLS_HOLD_ROOM + 1024);
	print_message("held %zu octets (OpenSSL %zu, the held buffer %zu)\n", got,
		      ossl_live - base, held->cap);
}

/*
 * full_handshake - a new client's full handshake from addr on a new
 * connection: did it end with a session ticket (held until the flush)
 */
static int full_handshake(struct pair *p, const char *addr)
{
	SSL    *cssl;
	struct io *io;
	int     sv[2], done = 0, cdone = 0, i, r, ticket;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
	assert_non_null(io = tls_io_new(p->tls, sv[0], addr));
	assert_non_null(cssl = SSL_new(p->cctx));
	assert_int_equal(SSL_set_fd(cssl, sv[1]), 1);
	for (i = 0; i < 100 && !(done && cdone); i++) {
		if (!cdone && (r = SSL_connect(cssl)) == 1)
			cdone = 1;
		else if (!cdone && SSL_get_error(cssl, r) != SSL_ERROR_WANT_READ)
			fail_msg("SSL_connect failed");
		if (!done && (r = io_handshake(io)) < 0)
			fail_msg("handshake: %s", io->err);
		done |= r == 1;
	}
	assert_true(done && cdone);
	assert_false(SSL_session_reused(cssl));
	assert_int_equal(io_flush(io), 0);	/* what is held now is a ticket */
	p->cfd = sv[1];
	ticket = on_wire(p) > 0;
	io_close(io);
	SSL_free(cssl);
	close(sv[1]);
	return ticket;
}

/*
 * test_ticket_slots_all_used - an address's count of full handshakes is
 * its own in the table's 4,096 slots: another address whose hash is the
 * next slot does not take its place (the key was made odd before it was
 * taken modulo the slots, and the even slots were never used)
 */
static void test_ticket_slots_all_used(void **state)
{
	struct pair *p = *state;
	const char *a = "198.51.100.7";
	uint64_t want = (hash_fnv(HASH_FNV_INIT, a, strlen(a)) % TLS_TKT_SLOTS) ^ 1;
	char    b[32];
	int     i, cfd = p->cfd;

	for (i = 0; i < 1 << 20; i++) {	/* an address for the slot next to a's */
		snprintf(b, sizeof(b), "10.%d.%d.%d", i >> 16, (i >> 8) & 255, i & 255);
		if (hash_fnv(HASH_FNV_INIT, b, strlen(b)) % TLS_TKT_SLOTS == want)
			break;
	}
	assert_true(i < 1 << 20);
	assert_true(full_handshake(p, a));	/* tls_ticket.c: TLS_TKT_UNUSED (2) with a ticket */
	assert_true(full_handshake(p, a));
	assert_false(full_handshake(p, a));	/* then one in TLS_TKT_SAMPLE (32) */
	assert_true(full_handshake(p, b));	/* its own slot: its first */
	assert_false(full_handshake(p, a));	/* a's count is still there */
	p->cfd = cfd;
}

int main(void)
{
	if (!CRYPTO_set_mem_functions(count_malloc, count_realloc, count_free))
		return 1;		/* before OpenSSL's first allocation */
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_stalled_peer_memory, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reply_takes_the_ticket, setup, teardown),
		cmocka_unit_test_setup_teardown(test_goodbye_with_the_last_reply, setup, teardown),
		cmocka_unit_test_setup_teardown(test_full_socket_waits, setup, teardown),
		cmocka_unit_test_setup_teardown(test_goodbye_waits_for_a_full_socket, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ticket_slots_all_used, setup, teardown),
		cmocka_unit_test_setup_teardown(test_idle_gives_memory_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stalled_peer_bounded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sweep_trims_idle_only, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
