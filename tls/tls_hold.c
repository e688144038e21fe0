/*
 * NAME
 *	tls_hold 3
 * SUMMARY
 *	the holding BIO: a server session's records, sent once a turn
 * DESCRIPTION
 *	A server session's records are written into a BIO of our own that
 *	holds them, and tls_hold_send() sends what it holds in one write(2);
 *	the event loop flushes before it waits (io.h). What one turn of the
 *	loop writes to a client thus goes out in one segment: the 221 with
 *	the close_notify after it, a session ticket with the reply to the
 *	EHLO that came with the client's Finished; each write saved is a
 *	loopback segment sent and received and a wake-up of the client.
 *
 *	A write that would take what is held past TLS_HOLD_MAX first tries
 *	to send it, and is refused (a retry, as a full socket's) if the
 *	socket takes too little: a session whose client stops reading holds
 *	TLS_HOLD_MAX or one record at most, in a buffer of one record's
 *	room. tls_io.c asks the same before it hands OpenSSL a record
 *	(tls_hold_room), so that OpenSSL keeps no copy of a refused record
 *	(another 17 KB) besides. A write of several records that grew the
 *	buffer past one record's room gives it back once sent; smaller
 *	buffers go back when the session is idle (tls_hold_trim).
 */
#include <errno.h>
#include <pthread.h>
#include <unistd.h>

#include "../util/buf.h"
#include "io.h"
#include "tls_hold.h"

static BIO_METHOD *hold_method;		/* made once, for the process's life */
static pthread_once_t hold_once = PTHREAD_ONCE_INIT;

/* tls_hold_send - write what is held: 0 when all is out, IO_AGAIN with the rest held, IO_ERROR */
int tls_hold_send(struct tls_hold *h)
{
	ssize_t n;

	while (h->held.len) {
		n = write(h->fd, h->held.data, h->held.len);
		if (n > 0) {
			buf_consume(&h->held, (size_t) n);
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
	if (h->held.cap > TLS_HOLD_ROOM)
		buf_free(&h->held);	/* one write of several records: its room goes back */
	return 0;
}

/*
 * tls_hold_trim - an idle session gives back the held records' buffer
 * once it is empty: smaller bursts than TLS_HOLD_ROOM would keep up to
 * 16 KB for the session's life (the write buffer that
 * SSL_MODE_RELEASE_BUFFERS gave back). Not after each send: that is an
 * allocation a reply
 */
void tls_hold_trim(struct tls_hold *h)
{
	if (h->held.len == 0)
		buf_free(&h->held);
}

/*
 * tls_hold_room - may len more octets be held: not if they would take
 * what is held past TLS_HOLD_MAX and sending it leaves too much (what is
 * held then is TLS_HOLD_MAX at most, or one record)
 */
int tls_hold_room(struct tls_hold *h, size_t len)
{
	if (h->held.len && h->held.len + len > TLS_HOLD_MAX && tls_hold_send(h) == IO_ERROR)
		return IO_ERROR;
	return h->held.len == 0 || h->held.len + len <= TLS_HOLD_MAX;
}

/* hold_write - BIO write: the octets join those held, if there is room */
static int hold_write(BIO *b, const char *data, int len)
{
	struct tls_hold *h = BIO_get_data(b);
	int     r;

	BIO_clear_retry_flags(b);
	if (len <= 0)
		return 0;
	if ((r = tls_hold_room(h, (size_t) len)) <= 0) {
		if (r == 0)
			BIO_set_retry_write(b);
		return -1;
	}
	buf_reserve_max(&h->held, (size_t) len, TLS_HOLD_ROOM);
	buf_append(&h->held, data, (size_t) len);
	return len;
}

/* hold_ctrl - a flush is the loop's to make (tls_flush); the rest is not ours */
static long hold_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	struct tls_hold *h = BIO_get_data(b);

	(void) num;
	(void) ptr;
	switch (cmd) {
	case BIO_CTRL_FLUSH:
		return 1;
	case BIO_CTRL_WPENDING:
		return h ? (long) h->held.len : 0;
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

/* hold_method_make - the holding BIO's method, once; left NULL if OpenSSL fails */
static void hold_method_make(void)
{
	BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "idemrelay hold");

	if (m == NULL || BIO_meth_set_write(m, hold_write) != 1
	    || BIO_meth_set_ctrl(m, hold_ctrl) != 1 || BIO_meth_set_create(m, hold_create) != 1)
		BIO_meth_free(m);
	else
		hold_method = m;
}

/* tls_hold_bio - a holding BIO that writes into h */
BIO *tls_hold_bio(struct tls_hold *h)
{
	BIO    *b = NULL;

	pthread_once(&hold_once, hold_method_make);
	if (hold_method && (b = BIO_new(hold_method)) != NULL)
		BIO_set_data(b, h);
	return b;
}
