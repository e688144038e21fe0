/*
 * NAME
 *	tls 3
 * SUMMARY
 *	inbound TLS with OpenSSL: the server context and the TLS transport
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
 *	Session tickets: one after a full TLS 1.3 handshake, not OpenSSL's
 *	default two. Each is a session encoded, encrypted and written on
 *	every connection (a tenth of a full handshake's CPU for the two),
 *	while the clients that open a connection per message (PHPMailer,
 *	nodemailer, Django) rarely resume; one is all that a client that
 *	does resume needs, as every resumption brings a fresh one. A client
 *	address that let TLS_TKT_UNUSED tickets go unused in a row (full
 *	handshakes since it last resumed) gets one only every TLS_TKT_SAMPLE
 *	full handshakes after that: the encoding, encryption and write are
 *	spared for a client that never resumes, for both sides, and a client
 *	that starts to resume finds a ticket within that many connections;
 *	a resumption always brings a fresh ticket and gives the address its
 *	tickets back. The memory is a table of TLS_TKT_SLOTS slots by a hash
 *	of the address, each the count of one address: a collision at worst
 *	gives one address the other's count. Postfix's smtpd sends one
 *	ticket after every full handshake.
 *
 *	Read-ahead: OpenSSL reads as much as its buffer takes, not a record
 *	header and then its body: a command and its record cost one read(2),
 *	not two, and records that arrive together one read between them (a
 *	client's CCS and Finished, pipelined commands). What it holds beyond
 *	the record returned no epoll event announces: tls_pending() says so
 *	(SSL_has_pending() counts the read-ahead), and the event loop reads
 *	it before it waits for input (relay/server.c).
 *
 *	Held records: a server session's records are written into a BIO of
 *	our own that holds them, and tls_flush() sends what it holds in one
 *	write(2); the event loop flushes before it waits (io.h). What one
 *	turn of the loop writes to a client thus goes out in one segment:
 *	the 221 with the close_notify after it, a session ticket with the
 *	reply to the EHLO that came with the client's Finished; each write
 *	saved is a loopback segment sent and received and a wake-up of the
 *	client. A handshake step that waits for the client flushes its
 *	flight itself. A write that would take what is held past TLS_HOLD_MAX
 *	first tries to send it, and waits for EPOLLOUT if the socket takes
 *	too little: a session whose client stops reading holds TLS_HOLD_MAX
 *	or one record at most, in a buffer of one record's room. A session
 *	that closes says goodbye (tls_goodbye): the close_notify joins the
 *	records held, and the loop closes once all are sent, waiting for
 *	EPOLLOUT in front of a full socket as for its unwritten replies.
 *
 *	The transport: SSL_read/SSL_write on a non-blocking socket. OpenSSL
 *	may need the socket readable to write, or writable to read; its
 *	SSL_ERROR_WANT_* codes become IO_AGAIN and the epoll event to wait
 *	for. A write that has to be retried is retried with the same length
 *	(the buffer may move and grow meanwhile: ACCEPT_MOVING_WRITE_BUFFER).
 *	OpenSSL's error codes are turned into text here, where they enter.
 * DIAGNOSTICS
 *	tls_new() and tls_reload() return what went wrong, naming the file;
 *	the loaded certificate's subject and SHA-256 fingerprint are logged.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "../util/buf.h"
#include "../util/hash.h"
#include "../util/log.h"
#include "tls.h"

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

#define TLS_FP_LEN	(2 * 32 + 1)

#define TLS_HOLD_MAX	16384		/* held octets past which a write sends them first */
#define TLS_RECORD_MAX	(SSL3_RT_HEADER_LENGTH + SSL3_RT_MAX_PLAIN_LENGTH + 256)	/* RFC 8446 5.2 */
#define TLS_HOLD_ROOM	(TLS_RECORD_MAX + 1)	/* the held buffer's most: one record, its NUL */

#define TLS_TKT_SLOTS	4096		/* client addresses remembered for tickets */
#define TLS_TKT_UNUSED	2		/* tickets an address may leave unused in a row */
#define TLS_TKT_SAMPLE	32		/* past them, one full handshake in this many gets one */

/* an address's full TLS 1.3 handshakes since it last resumed */
struct tls_tkt {
	uint64_t key;			/* the address's hash; 0: free */
	uint32_t full;
};

struct tls {
	SSL_CTX *ctx;			/* owned reference; each SSL holds its own */
	char   *cert, *key;		/* owned paths */
	char   *groups;			/* owned: tls.groups, or NULL for the default */
	char    fingerprint[TLS_FP_LEN];
	struct tls_tkt *tkt;		/* owned: TLS_TKT_SLOTS */
};

struct tls_io {
	struct io io;			/* first: a struct io * points here */
	SSL    *ssl;			/* owned */
	int     fatal;			/* after a fatal error: no close_notify */
	int     bye;			/* the close_notify is written (tls_goodbye) */
	size_t  retry_len;		/* a write to repeat with this length */
	struct tls_tkt *tkt;		/* the client address's slot; NULL: none */
	uint64_t tkt_key;		/* the address's hash */
	struct buf held;		/* records written, not yet sent (tls_flush) */
};

static BIO_METHOD *hold_method;		/* the holding BIO's, while a struct tls lives */
static int hold_users;

/*
 * tls_send - write what is held; 0 when all is out, IO_AGAIN with the
 * rest still held, IO_ERROR (errno says why)
 */
static int tls_send(struct tls_io *t)
{
	ssize_t n;

	while (t->held.len) {
		n = write(t->io.fd, t->held.data, t->held.len);
		if (n > 0) {
			buf_consume(&t->held, (size_t) n);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return IO_AGAIN;
		if (n == 0)
			errno = EPIPE;
		return IO_ERROR;
	}
	if (t->held.cap > TLS_HOLD_ROOM)
		buf_free(&t->held);	/* one write of several records: its room goes back */
	return 0;
}

/*
 * hold_write - BIO write: the octets join those held; a write that would
 * take them past TLS_HOLD_MAX sends them first (so at most TLS_HOLD_MAX
 * or one record is held)
 */
static int hold_write(BIO *b, const char *data, int len)
{
	struct tls_io *t = BIO_get_data(b);
	int     r;

	BIO_clear_retry_flags(b);
	if (len <= 0)
		return 0;
	if (t->held.len && t->held.len + (size_t) len > TLS_HOLD_MAX
	    && (r = tls_send(t)) < 0) {
		if (r == IO_ERROR)
			return -1;
		if (t->held.len + (size_t) len > TLS_HOLD_MAX) {
			BIO_set_retry_write(b);
			return -1;
		}
	}
	buf_reserve_max(&t->held, (size_t) len, TLS_HOLD_ROOM);
	buf_append(&t->held, data, (size_t) len);
	return len;
}

/* hold_ctrl - a flush is the loop's to make (tls_flush); the rest is not ours */
static long hold_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	struct tls_io *t = BIO_get_data(b);

	(void) num;
	(void) ptr;
	switch (cmd) {
	case BIO_CTRL_FLUSH:
		return 1;
	case BIO_CTRL_WPENDING:
		return t ? (long) t->held.len : 0;
	default:
		return 0;
	}
}

/* hold_create - a new holding BIO is ready at once */
static int hold_create(BIO *b)
{
	BIO_set_init(b, 1);
	return 1;
}

/* hold_method_get - the holding BIO's method, made by the first struct tls */
static int hold_method_get(void)
{
	if (hold_users++ > 0)
		return 0;
	if ((hold_method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK,
					"idemrelay hold")) == NULL
	    || BIO_meth_set_write(hold_method, hold_write) != 1
	    || BIO_meth_set_ctrl(hold_method, hold_ctrl) != 1
	    || BIO_meth_set_create(hold_method, hold_create) != 1) {
		BIO_meth_free(hold_method);
		hold_method = NULL;
		hold_users--;
		return -1;
	}
	return 0;
}

/* hold_method_put - the last struct tls is gone */
static void hold_method_put(void)
{
	if (--hold_users > 0)
		return;
	BIO_meth_free(hold_method);
	hold_method = NULL;
}

/* tls_errtext - the first queued OpenSSL error (or errno) as text; clears the queue */
void tls_errtext(char *buf, size_t len, const char *what)
{
	unsigned long e = ERR_get_error();
	char    reason[200];

	if (e == 0)
		snprintf(buf, len, "%s: %s", what, errno ? strerror(errno) : "connection closed");
	else {
		ERR_error_string_n(e, reason, sizeof(reason));
		snprintf(buf, len, "%s: %s", what, reason);
	}
	ERR_clear_error();
}

/* tls_ctx_kex - the key exchange groups, the TLS 1.2 suites that go with them, TLS 1.3's */
static int tls_ctx_kex(SSL_CTX *ctx, const char *groups, char *err, size_t errlen)
{
	const char *g = groups ? groups : TLS_GROUPS_DEFAULT;
	int     dhe = strcasestr(g, "ffdhe") != NULL;
	char    what[300];

	if (SSL_CTX_set_cipher_list(ctx, dhe ? TLS_CIPHERS TLS_CIPHERS_DHE : TLS_CIPHERS) != 1
	    || SSL_CTX_set_ciphersuites(ctx, TLS_SUITES) != 1) {
		tls_errtext(err, errlen, "TLS settings");
		return -1;
	}
	if (SSL_CTX_set1_groups_list(ctx, g) != 1) {
		snprintf(what, sizeof(what), "groups \"%.200s\"", g);
		tls_errtext(err, errlen, what);
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

	ERR_clear_error();
	errno = 0;
	if ((ctx = SSL_CTX_new(TLS_server_method())) == NULL) {
		tls_errtext(err, errlen, "SSL_CTX_new");
		return NULL;
	}
	if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1) {
		tls_errtext(err, errlen, "TLS settings");
		goto fail;
	}
	if (tls_ctx_kex(ctx, groups, err, errlen) < 0)
		goto fail;
	SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_CIPHER_SERVER_PREFERENCE
			    | SSL_OP_PRIORITIZE_CHACHA | SSL_OP_NO_RENEGOTIATION
			    | SSL_OP_IGNORE_UNEXPECTED_EOF);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER
			 | SSL_MODE_RELEASE_BUFFERS | SSL_MODE_NO_AUTO_CHAIN);
	SSL_CTX_set_read_ahead(ctx, 1);
	if (SSL_CTX_set_num_tickets(ctx, 1) != 1) {
		tls_errtext(err, errlen, "TLS settings");
		goto fail;
	}
	if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
		snprintf(what, sizeof(what), "cert %s", cert);
		tls_errtext(err, errlen, what);
		goto fail;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
		snprintf(what, sizeof(what), "key %s", key);
		tls_errtext(err, errlen, what);
		goto fail;
	}
	if (SSL_CTX_check_private_key(ctx) != 1) {
		snprintf(what, sizeof(what), "key %s does not match cert %s", key, cert);
		tls_errtext(err, errlen, what);
		goto fail;
	}
	if ((x = SSL_CTX_get0_certificate(ctx)) == NULL
	    || X509_digest(x, EVP_sha256(), md, &mdlen) != 1 || mdlen != 32) {
		snprintf(what, sizeof(what), "cert %s", cert);
		tls_errtext(err, errlen, what);
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
	struct tls *t = xcalloc(1, sizeof(*t));

	*out = NULL;
	if (hold_method_get() < 0) {
		tls_errtext(err, errlen, "BIO_meth_new");
		free(t);
		return -1;
	}
	if ((t->ctx = tls_ctx_new(cert, key, groups, t->fingerprint, err, errlen)) == NULL) {
		hold_method_put();
		free(t);
		return -1;
	}
	t->cert = xstrdup(cert);
	t->key = xstrdup(key);
	t->groups = groups ? xstrdup(groups) : NULL;
	t->tkt = xcalloc(TLS_TKT_SLOTS, sizeof(*t->tkt));
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
	free(t->cert);
	free(t->key);
	free(t->groups);
	free(t->tkt);
	free(t);
	hold_method_put();
}

/* tls_fingerprint - SHA-256 of the certificate new connections get, in hex */
const char *tls_fingerprint(const struct tls *t)
{
	return t->fingerprint;
}

/* tls_result - an SSL call's failure as IO_AGAIN (and what to wait for), 0 (EOF) or IO_ERROR */
static ssize_t tls_result(struct tls_io *t, int ret, uint32_t *wants, const char *what)
{
	switch (SSL_get_error(t->ssl, ret)) {
	case SSL_ERROR_WANT_READ:
		*wants = EPOLLIN;
		return IO_AGAIN;
	case SSL_ERROR_WANT_WRITE:
		*wants = EPOLLOUT;
		return IO_AGAIN;
	case SSL_ERROR_ZERO_RETURN:
		return 0;
	default:
		t->fatal = 1;
		tls_errtext(t->io.err, sizeof(t->io.err), what);
		return IO_ERROR;
	}
}

/* tls_fail - a fatal error (no close_notify follows): what failed, errno's why */
static void tls_fail(struct tls_io *t, const char *what)
{
	t->fatal = 1;
	snprintf(t->io.err, sizeof(t->io.err), "%s: %s", what,
		 errno ? strerror(errno) : "connection closed");
}

/* tls_read - decrypted octets, 0 at the end, IO_AGAIN or IO_ERROR */
static ssize_t tls_read(struct io *io, void *buf, size_t len)
{
	struct tls_io *t = (struct tls_io *) io;
	int     n;

	ERR_clear_error();
	errno = 0;
	io->read_wants = 0;
	n = SSL_read(t->ssl, buf, len > INT_MAX ? INT_MAX : (int) len);
	if (n > 0)
		return n;
	return tls_result(t, n, &io->read_wants, "read");
}

/* tls_write - octets taken, IO_AGAIN or IO_ERROR; a retry repeats the length */
static ssize_t tls_write(struct io *io, const void *buf, size_t len)
{
	struct tls_io *t = (struct tls_io *) io;
	ssize_t r;
	int     n;

	if (len > INT_MAX)
		len = INT_MAX;
	if (t->retry_len && t->retry_len <= len)
		len = t->retry_len;
	ERR_clear_error();
	errno = 0;
	io->write_wants = 0;
	n = SSL_write(t->ssl, buf, (int) len);
	if (n > 0) {
		t->retry_len = 0;
		return n;
	}
	r = tls_result(t, n, &io->write_wants, "write");
	if (r == IO_AGAIN)
		t->retry_len = len;
	return r == 0 ? IO_ERROR : r;
}

/*
 * tls_tkt_want - does this handshake end with a ticket: a resumption
 * always; a full handshake while the address has left fewer than
 * TLS_TKT_UNUSED unused, and every TLS_TKT_SAMPLE-th after that. Known
 * from the ServerHello on, and asked before each step: the ticket is
 * written in the step that reads the client's Finished.
 */
static int tls_tkt_want(const struct tls_io *t)
{
	uint32_t full;

	if (SSL_session_reused(t->ssl))
		return 1;
	full = t->tkt->key == t->tkt_key ? t->tkt->full : 0;
	return full < TLS_TKT_UNUSED || full % TLS_TKT_SAMPLE == 0;
}

/* tls_tkt_count - a TLS 1.3 handshake is done: count it for its address */
static void tls_tkt_count(struct tls_io *t)
{
	struct tls_tkt *k = t->tkt;

	if (SSL_version(t->ssl) != TLS1_3_VERSION)
		return;				/* TLS 1.2's tickets follow its own rules */
	if (k->key != t->tkt_key) {
		k->key = t->tkt_key;
		k->full = 0;
	}
	if (SSL_session_reused(t->ssl))
		k->full = 0;
	else if (k->full < UINT32_MAX)
		k->full++;
}

/* tls_handshake - 1 done, 0 again (hs_wants set), -1 failed (err set) */
static int tls_handshake(struct io *io)
{
	struct tls_io *t = (struct tls_io *) io;
	ssize_t r;
	int     n;

	ERR_clear_error();
	errno = 0;
	if ((r = tls_send(t)) == IO_AGAIN) {	/* the last flight first */
		io->hs_wants = EPOLLOUT;
		return 0;
	}
	if (r == IO_ERROR)
		goto fail;
	if (t->tkt)
		SSL_set_num_tickets(t->ssl, (size_t) tls_tkt_want(t));
	n = SSL_accept(t->ssl);
	if (n == 1) {			/* a ticket, if any, goes with the first reply */
		io->ready = 1;
		io->hs_wants = 0;
		if (t->tkt)
			tls_tkt_count(t);
		return 1;
	}
	r = tls_result(t, n, &io->hs_wants, "handshake");
	if (r == IO_AGAIN) {		/* the client answers what it has been sent */
		if ((r = tls_send(t)) == IO_AGAIN)
			io->hs_wants = EPOLLOUT;
		if (r != IO_ERROR)
			return 0;
		goto fail;
	}
	if (r == IO_ERROR)
		return -1;		/* tls_result has said why */
	errno = 0;			/* the client closed */

fail:
	tls_fail(t, "handshake");
	return -1;
}

/* tls_flush - send what is held (io.h) */
static int tls_flush(struct io *io)
{
	struct tls_io *t = (struct tls_io *) io;
	int     r;

	io->flush_wants = 0;
	if ((r = tls_send(t)) == IO_AGAIN) {
		io->flush_wants = EPOLLOUT;
		return IO_AGAIN;
	}
	if (r == IO_ERROR)
		tls_fail(t, "write");
	return r;
}

/*
 * tls_pending - decrypted or buffered input no epoll event will announce.
 * SSL_has_pending() is 1 for part of a record too; once a read has said
 * it must wait (for the rest, or for the socket to take a write), that
 * part is nothing to read: an epoll event will come (else the loop would
 * read it again and again, never waiting)
 */
static size_t tls_pending(const struct io *io)
{
	const struct tls_io *t = (const struct tls_io *) io;
	int     n = SSL_pending(t->ssl);

	if (n > 0)
		return (size_t) n;
	return io->read_wants ? 0 : (size_t) SSL_has_pending(t->ssl);
}

/* tls_describe - protocol and cipher, for logs */
static void tls_describe(const struct io *io, char *buf, size_t len)
{
	const struct tls_io *t = (const struct tls_io *) io;

	if (!io->ready) {
		snprintf(buf, len, "tls=handshake");
		return;
	}
	snprintf(buf, len, "tls=%s cipher=%s bits=%d", SSL_get_version(t->ssl),
		 SSL_get_cipher_name(t->ssl), SSL_get_cipher_bits(t->ssl, NULL));
}

/*
 * tls_trim - an idle session gives back the held records' buffer once it
 * is empty: a burst past TLS_HOLD_MAX gives it back when sent, but
 * smaller ones would keep up to 16 KB for the session's life (the write
 * buffer that SSL_MODE_RELEASE_BUFFERS gave back). Not after each
 * flush: that is an allocation a reply
 */
static void tls_trim(struct io *io)
{
	struct tls_io *t = (struct tls_io *) io;

	if (t->held.len == 0)
		buf_free(&t->held);
}

/*
 * tls_goodbye - the close_notify joins what is held, once (with the
 * socket full past TLS_HOLD_MAX, the next call tries again); then as
 * tls_flush
 */
static int tls_goodbye(struct io *io)
{
	struct tls_io *t = (struct tls_io *) io;
	int     n;

	if (io->ready && !t->fatal && !t->bye) {
		ERR_clear_error();
		n = SSL_shutdown(t->ssl);
		t->bye = n >= 0 || SSL_get_error(t->ssl, n) != SSL_ERROR_WANT_WRITE;
		ERR_clear_error();
	}
	return tls_flush(io);
}

/*
 * tls_close - say goodbye (one try: the socket is non-blocking; the last
 * reply, the close_notify or an alert), then close and free
 */
static void tls_close(struct io *io)
{
	struct tls_io *t = (struct tls_io *) io;

	(void) tls_goodbye(io);
	SSL_free(t->ssl);
	if (io->fd >= 0)
		close(io->fd);
	buf_free(&t->held);
	free(t);
}

static const struct io_ops tls_ops = {
	.name = "tls",
	.read = tls_read,
	.write = tls_write,
	.handshake = tls_handshake,
	.flush = tls_flush,
	.goodbye = tls_goodbye,
	.pending = tls_pending,
	.describe = tls_describe,
	.trim = tls_trim,
	.close = tls_close,
};

/* tls_io_alloc - the transport over ssl and fd, not ready */
static struct tls_io *tls_io_alloc(SSL *ssl, int fd)
{
	struct tls_io *t = xcalloc(1, sizeof(*t));

	t->io.ops = &tls_ops;
	t->io.fd = fd;
	t->ssl = ssl;
	return t;
}

/*
 * tls_io_new - a server TLS session on fd, handshake pending; NULL if
 * OpenSSL fails. addr: the client's address, for its tickets (NULL: a
 * ticket after every full handshake)
 */
struct io *tls_io_new(struct tls *tl, int fd, const char *addr)
{
	struct tls_io *t;
	SSL    *ssl;
	BIO    *rb = NULL, *wb = NULL;
	char    err[IO_ERR_MAX];

	ERR_clear_error();
	errno = 0;
	if ((ssl = SSL_new(tl->ctx)) == NULL || (rb = BIO_new_socket(fd, BIO_NOCLOSE)) == NULL
	    || (wb = BIO_new(hold_method)) == NULL) {
		tls_errtext(err, sizeof(err), "SSL_new");
		msg_warn("tls: %s", err);
		BIO_free(rb);
		SSL_free(ssl);
		close(fd);
		return NULL;
	}
	SSL_set_bio(ssl, rb, wb);	/* reads from the socket, writes held */
	SSL_set_accept_state(ssl);
	t = tls_io_alloc(ssl, fd);
	BIO_set_data(wb, t);
	t->io.hs_wants = EPOLLIN;	/* the ClientHello */
	if (addr) {
		t->tkt_key = hash_fnv(HASH_FNV_INIT, addr, strlen(addr));
		t->tkt = &tl->tkt[t->tkt_key % TLS_TKT_SLOTS];	/* every slot, odd or even */
		t->tkt_key |= 1;	/* never 0, a free slot's key */
	}
	return &t->io;
}

/* tls_io_wrap - a TLS session whose handshake is done, as a transport; takes both */
struct io *tls_io_wrap(SSL *ssl, int fd)
{
	struct tls_io *t = tls_io_alloc(ssl, fd);

	t->io.ready = 1;
	return &t->io;
}
