/*
 * NAME
 *	io 3h
 * SUMMARY
 *	a client connection's transport: plain TCP or TLS, one small vtable
 * DESCRIPTION
 *	The event loop reads and writes clients through struct io, never
 *	through the socket, so that plain and TLS connections share one
 *	path (as Redis's connection.h does). Everything is non-blocking.
 *	read returns the octets read, 0 at the end of the stream, IO_AGAIN
 *	or IO_ERROR; write the octets written, IO_AGAIN or IO_ERROR. After
 *	IO_AGAIN, read_wants or write_wants says which epoll event lets the
 *	operation go on: a TLS read may have to wait until the socket is
 *	writable, a TLS write until it is readable.
 *
 *	A transport that is not ready (TLS before its handshake) is driven
 *	with handshake() until it returns 1; meanwhile hs_wants says what to
 *	wait for. pending() is input the transport holds already, which no
 *	epoll event will announce (TLS decrypts a record at a time).
 *
 *	write may hold what it took, to go out with what follows in one
 *	write(2) and one segment (the TLS server session does: a reply
 *	and its session ticket, the 221 and the close_notify): flush()
 *	sends it, and must be called before the loop waits. It returns 0
 *	when nothing is held any more, IO_AGAIN with flush_wants set
 *	(EPOLLOUT) while the socket takes no more, or IO_ERROR.
 *	goodbye() is the flush of a session that closes: the transport
 *	says goodbye where it has a way to (TLS: the close_notify, once,
 *	held with the last reply) and sends what it holds; the caller
 *	closes when it returns 0, and waits for EPOLLOUT while it says
 *	IO_AGAIN, so a last reply in front of a full socket is not lost.
 *	trim() gives back the memory an idle session's transport keeps
 *	for its next writes (TLS: the held records' buffer, once empty).
 *
 *	io_plain_new() wraps an accepted socket; tls_io_new() (tls.h) a TLS
 *	server session over one. io_close() says goodbye where the transport
 *	has a way to, closes the socket and frees the io.
 */
#ifndef TLS_IO_H
#define TLS_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define IO_AGAIN	(-1)
#define IO_ERROR	(-2)
#define IO_ERR_MAX	160

struct io;

struct io_ops {				/* NULL: the transport has none (plain TCP) */
	const char *name;
	ssize_t (*read) (struct io *io, void *buf, size_t len);
	ssize_t (*write) (struct io *io, const void *buf, size_t len);
	int     (*handshake) (struct io *io);	/* 1 done, 0 again, -1 failed */
	int     (*flush) (struct io *io);	/* 0 nothing held, IO_AGAIN, IO_ERROR */
	int     (*goodbye) (struct io *io);	/* as flush, after saying goodbye */
	size_t  (*pending) (const struct io *io);
	void    (*trim) (struct io *io);	/* idle: give its buffers' memory back */
	void    (*close) (struct io *io);	/* goodbye, close(fd), free */
};

struct io {
	const struct io_ops *ops;
	int     fd;			/* owned */
	int     ready;			/* handshake done (plain: always) */
	uint32_t hs_wants;		/* EPOLLIN/EPOLLOUT the handshake waits for */
	uint32_t read_wants;		/* after read's IO_AGAIN; 0 otherwise */
	uint32_t write_wants;		/* after write's IO_AGAIN; 0 otherwise */
	uint32_t flush_wants;		/* after flush's IO_AGAIN: EPOLLOUT; 0 otherwise */
	char    err[IO_ERR_MAX];	/* why the last IO_ERROR or failed handshake */
};

struct io *io_plain_new(int fd);
int io_plain_release(struct io *io);	/* free a plain io, keep its socket: the fd */

static inline ssize_t io_read(struct io *io, void *buf, size_t len)
{
	return io->ops->read(io, buf, len);
}

static inline ssize_t io_write(struct io *io, const void *buf, size_t len)
{
	return io->ops->write(io, buf, len);
}

static inline int io_handshake(struct io *io)
{
	return io->ops->handshake ? io->ops->handshake(io) : 1;
}

static inline int io_flush(struct io *io)
{
	return io->ops->flush ? io->ops->flush(io) : 0;
}

static inline int io_goodbye(struct io *io)
{
	return io->ops->goodbye ? io->ops->goodbye(io) : 0;
}

static inline size_t io_pending(const struct io *io)
{
	return io->ops->pending ? io->ops->pending(io) : 0;
}

static inline void io_trim(struct io *io)
{
	if (io->ops->trim)
		io->ops->trim(io);
}

static inline void io_close(struct io *io)	/* NULL-safe */
{
	if (io)
		io->ops->close(io);
}

#endif
