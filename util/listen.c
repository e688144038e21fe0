/*
 * NAME
 *	listen 3
 * SUMMARY
 *	a TCP listener on an address and port
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "listen.h"
#include "log.h"

/*
 * listen_bind - a non-blocking stream socket bound to address and port as
 * a listener binds it: the descriptor, or -1 with errno (EAFNOSUPPORT:
 * not a numeric address)
 */
int listen_bind(const char *address, int port)
{
	struct sockaddr_storage ss;
	struct sockaddr_in *sin = (struct sockaddr_in *) &ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *) &ss;
	socklen_t sl;
	int fd, one = 1, e;

	memset(&ss, 0, sizeof(ss));
	if (inet_pton(AF_INET, address, &sin->sin_addr) == 1) {
		sin->sin_family = AF_INET;
		sin->sin_port = htons((uint16_t) port);
		sl = sizeof(*sin);
	} else if (inet_pton(AF_INET6, address, &sin6->sin6_addr) == 1) {
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons((uint16_t) port);
		sl = sizeof(*sin6);
	} else {
		errno = EAFNOSUPPORT;
		return -1;
	}
	if ((fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0)
		return -1;
	/* a port in TIME_WAIT is free, one listened on is not */
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ss.ss_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *) &ss, sl) < 0) {
		e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* listen_tcp - the listening descriptor; fatal, with what in the message, on failure */
int listen_tcp(const char *what, const char *address, int port, int backlog)
{
	int fd = listen_bind(address, port);

	if (fd < 0)
		msg_fatal("%s: bind %s port %d: %m", what, address, port);
	if (listen(fd, backlog) < 0)
		msg_fatal("%s: listen %s port %d: %m", what, address, port);
	return fd;
}
