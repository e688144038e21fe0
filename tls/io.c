/*
 * NAME
 *	io 3
 * SUMMARY
 *	the plain TCP transport
 * DESCRIPTION
 *	read(2) and write(2) on a non-blocking socket, behind io.h. The TLS
 *	transport is in tls_io.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "../util/buf.h"
#include "../util/log.h"
#include "io.h"

/* plain_read - read(2); EAGAIN is IO_AGAIN */
static ssize_t plain_read(struct io *io, void *buf, size_t len)
{
	ssize_t n;

	do
		n = read(io->fd, buf, len);
	while (n < 0 && errno == EINTR);
	io->read_wants = 0;
	if (n >= 0)
		return n;
	if (errno == EAGAIN || errno == EWOULDBLOCK) {
		io->read_wants = EPOLLIN;
		return IO_AGAIN;
	}
	snprintf(io->err, sizeof(io->err), "read: %s", strerror(errno));
	return IO_ERROR;
}

/* plain_write - write(2); EAGAIN is IO_AGAIN */
static ssize_t plain_write(struct io *io, const void *buf, size_t len)
{
	ssize_t n;

	do
		n = write(io->fd, buf, len);
	while (n < 0 && errno == EINTR);
	io->write_wants = 0;
	if (n > 0)
		return n;
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
		io->write_wants = EPOLLOUT;
		return IO_AGAIN;
	}
	snprintf(io->err, sizeof(io->err), "write: %s", n < 0 ? strerror(errno) : "nothing written");
	return IO_ERROR;
}

/* plain_close - close the socket, free */
static void plain_close(struct io *io)
{
	if (io->fd >= 0)
		close(io->fd);
	free(io);
}

/* TCP has no handshake, holds nothing back, says no goodbye: the rest is NULL (io.h) */
static const struct io_ops plain_ops = {
	.name = "plain",
	.read = plain_read,
	.write = plain_write,
	.close = plain_close,
};

/* io_plain_new - wrap an accepted non-blocking socket */
struct io *io_plain_new(int fd)
{
	struct io *io = xcalloc(1, sizeof(*io));

	io->ops = &plain_ops;
	io->fd = fd;
	io->ready = 1;
	return io;
}

/* io_plain_release - free a plain io and hand its socket back (STARTTLS) */
int io_plain_release(struct io *io)
{
	int fd = io->fd;

	if (io->ops != &plain_ops)
		msg_panic("io_plain_release: a %s transport", io->ops->name);
	free(io);
	return fd;
}
