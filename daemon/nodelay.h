/*
 * NAME
 *	nodelay 3h
 * SUMMARY
 *	the daemon's own connect(): TCP_NODELAY, and a hook before it
 * DESCRIPTION
 *	nodelay.c defines connect() in bin/idemrelay (see there). If
 *	nodelay_connect_hook is set, it is asked first: 1 means it made the
 *	connection itself, and connect() returns 0; anything else, the
 *	connection is made as asked. Set it once, before any thread starts.
 */
#ifndef DAEMON_NODELAY_H
#define DAEMON_NODELAY_H

#include <sys/socket.h>

extern int (*nodelay_connect_hook) (int fd, const struct sockaddr *sa, socklen_t len);

#endif
