/*
 * NAME
 *	listen 3h
 * SUMMARY
 *	a TCP listener on an address and port
 * DESCRIPTION
 *	listen_tcp() binds a non-blocking, close-on-exec stream socket to a
 *	numeric IPv4 or IPv6 address (IPv6 only, never mapped IPv4) with
 *	SO_REUSEADDR, and listens with the given backlog. Any failure is
 *	fatal: it happens at start-up, and names what the listener was for.
 */
#ifndef UTIL_LISTEN_H
#define UTIL_LISTEN_H

/* listen_bind - a socket bound as listen_tcp() binds it: fd, or -1 with errno (start-up checks) */
int listen_bind(const char *address, int port);
/* listen_tcp - the listening descriptor; fatal, with what in the message, on failure */
int listen_tcp(const char *what, const char *address, int port, int backlog);

#endif
