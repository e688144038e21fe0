/*
 * NAME
 *	deliver_connect 3
 * SUMMARY
 *	libesmtp's connect(), handed to the bridge
 * DESCRIPTION
 *	libesmtp connects where it is told and lets the application reach
 *	neither the connect nor the socket. This connect() is linked into
 *	the program with the bridge (deliver_bridge.c calls connect() and
 *	this file is its library's definition of it), so it comes before
 *	libc's for libesmtp too (ELF interposition): first
 *	deliver_bridge_attach() may take the connection over, when it is
 *	the bridge's address on the thread that opened it: libesmtp's
 *	socket becomes one end of a socketpair whose other end the bridge
 *	copies from. So the hand-over is delivery's own, whatever program
 *	links it (the daemon, the tests, fuzz_deliver). Any other connection
 *	is connected as asked, by the system call that libc's connect()
 *	wraps: libesmtp's always goes through the bridge, whose own
 *	connection upstream sets TCP_NODELAY itself (deliver_bridge.c), and
 *	libpq sets its own.
 */
#include <errno.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "deliver_bridge.h"

/* connect - the bridge's, or connect as asked */
int connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	int saved = errno;

	if (deliver_bridge_attach(fd, sa, len) == 1) {
		errno = saved;
		return 0;
	}
	errno = saved;
	return (int) syscall(SYS_connect, fd, sa, len);
}
