/*
 * NAME
 *	tls_io 3
 * SUMMARY
 *	a TLS session as a transport: the server's session life
 * DESCRIPTION
 *	SSL_read/SSL_write on a non-blocking socket, behind io.h. OpenSSL
 *	may need the socket readable to write, or writable to read; its
 *	SSL_ERROR_WANT_* codes become IO_AGAIN and the epoll event to wait
 *	for. A write that has to be retried is retried with the same length
 *	(the buffer may move and grow meanwhile: ACCEPT_MOVING_WRITE_BUFFER).
 *
 *	A server session (tls_io_new) reads from the socket and writes into
 *	its holding BIO (tls_hold.c): flush sends what a turn wrote, a
 *	handshake step that waits for the client sends its flight itself,
 *	and a session that closes says goodbye (tls_goodbye): the
 *	close_notify joins the records held, and the loop closes once all
 *	are sent, waiting for EPOLLOUT in front of a full socket as for its
 *	unwritten replies. Whether its handshake ends with a session ticket
 *	is tls_ticket.c's to say. A client session (tls_io_wrap, after
 *	tls_client.c's handshake) writes to the socket: it holds nothing.
 *
 *	Read-ahead (the context's): OpenSSL reads as much as its buffer
 *	takes, not a record header and then its body: a command and its
 *	record cost one read(2), not two, and records that arrive together
 *	one read between them (a client's CCS and Finished, pipelined
 *	commands). What it holds beyond the record returned no epoll event
 *	announces: tls_pending() says so (SSL_has_pending() counts the
 *	read-ahead), and the event loop reads it before it waits for input
 *	(relay/conn.c, conn_process()).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <openssl/err.h>

#include "../util/buf.h"
#include "../util/log.h"
#include "tls.h"
#include "tls_int.h"

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
		tls_errtext(t->io.err, sizeof(t->io.err), "%s", what);
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

/*
 * tls_write - octets taken, IO_AGAIN or IO_ERROR; a retry repeats the
 * length. A server session (partial writes: a record a call) asks for one
 * record, and only one the holding BIO has room for: OpenSSL gives its
 * write buffer back after a write it made whole (SSL_MODE_RELEASE_BUFFERS),
 * but keeps it for a record of a longer write, or one the BIO refused:
 * 17 KB more for a client that stops reading. A client session writes
 * what it is given (its records go to the socket, none held)
 */
static ssize_t tls_write(struct io *io, const void *buf, size_t len)
{
	struct tls_io *t = (struct tls_io *) io;
	ssize_t r;
	int     n;

	if (len > SSL3_RT_MAX_PLAIN_LENGTH && (SSL_get_mode(t->ssl) & SSL_MODE_ENABLE_PARTIAL_WRITE))
		len = SSL3_RT_MAX_PLAIN_LENGTH;
	else if (len > INT_MAX)
		len = INT_MAX;
	if (t->retry_len && t->retry_len <= len)
		len = t->retry_len;
	ERR_clear_error();
	errno = 0;
	io->write_wants = 0;
	if ((r = tls_hold_room(&t->hold, len + TLS_RECORD_MORE)) == 0) {
		io->write_wants = EPOLLOUT;
		return IO_AGAIN;
	}
	if (r == IO_ERROR) {
		tls_fail(t, "write");
		return IO_ERROR;
	}
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

/* tls_handshake - 1 done, 0 again (hs_wants set), -1 failed (err set) */
static int tls_handshake(struct io *io)
{
	struct tls_io *t = (struct tls_io *) io;
	ssize_t r;
	int     n;

	ERR_clear_error();
	errno = 0;
	if ((r = tls_hold_send(&t->hold)) == IO_AGAIN) {	/* the last flight first */
		io->hs_wants = EPOLLOUT;
		return 0;
	}
	if (r == IO_ERROR)
		goto fail;
	tls_ticket_plan(&t->tkt, t->ssl);
	n = SSL_accept(t->ssl);
	if (n == 1) {			/* a ticket, if any, goes with the first reply */
		io->ready = 1;
		io->hs_wants = 0;
		tls_ticket_count(&t->tkt, t->ssl);
		return 1;
	}
	r = tls_result(t, n, &io->hs_wants, "handshake");
	if (r == IO_AGAIN) {		/* the client answers what it has been sent */
		if ((r = tls_hold_send(&t->hold)) == IO_AGAIN)
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
	if ((r = tls_hold_send(&t->hold)) == IO_AGAIN) {
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

/* tls_io_describe - protocol and cipher, for logs */
void tls_io_describe(const struct io *io, char *buf, size_t len)
{
	const struct tls_io *t = (const struct tls_io *) io;

	snprintf(buf, len, "tls=%s cipher=%s bits=%d", SSL_get_version(t->ssl),
		 SSL_get_cipher_name(t->ssl), SSL_get_cipher_bits(t->ssl, NULL));
}

/* tls_trim - an idle session gives back the held records' buffer once it is empty */
static void tls_trim(struct io *io)
{
	tls_hold_trim(&((struct tls_io *) io)->hold);
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
	buf_free(&t->hold.held);
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
	.trim = tls_trim,
	.close = tls_close,
};

/* tls_io_alloc - the transport over fd, not ready: its SSL to come */
static struct tls_io *tls_io_alloc(int fd)
{
	struct tls_io *t = xcalloc(1, sizeof(*t));

	t->io.ops = &tls_ops;
	t->io.fd = fd;
	t->hold.fd = fd;
	return t;
}

/*
 * tls_io_new - a server TLS session on fd, handshake pending; NULL if
 * OpenSSL fails. addr: the client's address, for its tickets (NULL: a
 * ticket after every full handshake)
 */
struct io *tls_io_new(struct tls *tl, int fd, const char *addr)
{
	struct tls_io *t = tls_io_alloc(fd);
	BIO    *rb = NULL, *wb = NULL;
	char    err[IO_ERR_MAX];

	ERR_clear_error();
	errno = 0;
	if ((t->ssl = SSL_new(tl->ctx)) == NULL || (rb = BIO_new_socket(fd, BIO_NOCLOSE)) == NULL
	    || (wb = tls_hold_bio(&t->hold)) == NULL) {
		tls_errtext(err, sizeof(err), "SSL_new");
		msg_warn("tls: %s", err);
		BIO_free(rb);		/* not yet the SSL's */
		tls_close(&t->io);	/* not ready: no goodbye, nothing held */
		return NULL;
	}
	SSL_set_bio(t->ssl, rb, wb);	/* reads from the socket, writes held */
	SSL_set_accept_state(t->ssl);
	t->io.hs_wants = EPOLLIN;	/* the ClientHello */
	tls_ticket_find(&t->tkt, tl->tkt, addr);
	return &t->io;
}

/* tls_io_wrap - a TLS session whose handshake is done, as a transport; takes both */
struct io *tls_io_wrap(SSL *ssl, int fd)
{
	struct tls_io *t = tls_io_alloc(fd);

	t->ssl = ssl;
	t->io.ready = 1;
	return &t->io;
}
