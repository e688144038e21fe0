/*
 * NAME
 *	deliver_connect 3
 * SUMMARY
 *	libesmtp's connect(): handed to the bridge, or TCP_NODELAY set
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
 *	links it (the daemon, the tests, fuzz_deliver).
 *
 *	Any other connection is connected as asked, with TCP_NODELAY on
 *	stream sockets of the Internet families. libesmtp writes a message through a 2 KB buffer and never sets
 *	TCP_NODELAY, nor lets the application reach its socket. The last
 *	write of a message, the one with the final dot, is then a small
 *	segment behind an unacknowledged one: Nagle holds it until the
 *	upstream's delayed ACK, 40 ms later, for every message (measured in
 *	BENCHMARKS.md: delivery capped at under 100 messages a second).
 *
 *	SMTP replies and commands are exchanged in turns, so Nagle buys
 *	nothing here (the bridge's own connect upstream gets it too).
 */
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/socket.h>

#include "deliver_bridge.h"

static int (*real_connect)(int, const struct sockaddr *, socklen_t);
static pthread_once_t real_once = PTHREAD_ONCE_INIT;

/* find_real - libc's connect(), the next definition after ours */
static void find_real(void)
{
	real_connect = (int (*)(int, const struct sockaddr *, socklen_t))
	    dlsym(RTLD_NEXT, "connect");
}

/* connect - set TCP_NODELAY, then connect as asked */
int connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	int one = 1, type = 0, saved = errno;
	socklen_t tl = sizeof(type);

	if (deliver_bridge_attach(fd, sa, len) == 1) {
		errno = saved;
		return 0;
	}
	pthread_once(&real_once, find_real);
	if (real_connect == NULL) {
		errno = ENOSYS;
		return -1;
	}
	if (sa != NULL && (sa->sa_family == AF_INET || sa->sa_family == AF_INET6)
	    && getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && type == SOCK_STREAM)
		(void) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	errno = saved;
	return real_connect(fd, sa, len);
}
