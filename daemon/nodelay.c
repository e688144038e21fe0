/*
 * NAME
 *	nodelay 3
 * SUMMARY
 *	TCP_NODELAY on every outgoing TCP connection, libesmtp's included
 * DESCRIPTION
 *	libesmtp writes a message through a 2 KB buffer and never sets
 *	TCP_NODELAY, nor lets the application reach its socket. The last
 *	write of a message, the one with the final dot, is then a small
 *	segment behind an unacknowledged one: Nagle holds it until the
 *	upstream's delayed ACK, 40 ms later, for every message (measured in
 *	BENCHMARKS.md: delivery capped at under 100 messages a second).
 *
 *	SMTP replies and commands are exchanged in turns, so Nagle buys
 *	nothing here. This connect() is in the executable, so it comes
 *	before libc's for libesmtp too (ELF interposition); it sets the
 *	option on stream sockets of the Internet families and calls the
 *	real connect(). It is linked into bin/idemrelay only.
 *
 *	Before that, deliver_bridge_attach() may take the connection over:
 *	libesmtp's connect() to the bridge its thread opened becomes one end
 *	of a socketpair whose other end the bridge copies from.
 */
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/socket.h>

#include "../deliver/esmtp/deliver_bridge.h"

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
