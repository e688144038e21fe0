/*
 * NAME
 *	pace 3h
 * SUMMARY
 *	how fast a client must talk: record deadlines, a minimum data rate,
 *	shorter limits under stress, and who goes first at the connection
 *	limit
 * DESCRIPTION
 *	A timer that restarts on every octet lets a client that sends one
 *	octet every few seconds hold its connection forever (slowloris), and
 *	a few hundred of them lock everyone else out. So deadlines run per
 *	record, as Postfix's smtpd_per_request_deadline does:
 *
 *	command	a whole command line (or AUTH response line) within
 *		command_timeout of the previous record or reply, however the
 *		octets trickle in. A TLS handshake counts against it too.
 *	data	a message (DATA, or a BDAT chunk) starts with data_timeout of
 *		credit; every octet received adds 1/min_data_rate seconds,
 *		but never more than data_timeout ahead of now (Postfix's
 *		smtpd_min_data_rate). A client below the rate runs out after
 *		about data_timeout; one that keeps up never does. With
 *		min_data_rate = 0, any octet restarts data_timeout (the old
 *		per-read timer).
 *	waiting	while the daemon works (commit, password check), no clock
 *		runs: the record's deadline starts again when it answers.
 *
 *	Stress (Postfix's ${stress?10}{300}): while the open connections are
 *	at least 3/4 of limits.connections, no deadline is more than
 *	stress_timeout after its record started or the last octet of data
 *	came, and a message's credit is capped at stress_timeout.
 *
 *	At the limit a new client is not refused while a slow one can make
 *	room: the open session with the least time left is dropped with the
 *	timeout reply, provided it has spent at least a second of its stress
 *	budget (so that a burst of new connections cannot push out sessions
 *	that are busy talking). Sessions in a hook are never dropped.
 */
#ifndef RELAY_PACE_H
#define RELAY_PACE_H

#include <stddef.h>
#include <stdint.h>

struct conn;
struct server;

/* pace_arm - a record is done or the daemon answered: the next record's deadline */
void pace_arm(struct conn *c);

/* pace_input - n octets were read and fed: credit data, re-arm after a record */
void pace_input(struct conn *c, size_t n);

/*
 * pace_sweep - time out clients past their deadline, and give back the
 * transport buffers of sessions with no input for a second (once a second)
 */
void pace_sweep(struct server *srv);

/* pace_refused - a connection was refused at the limit: counted, logged per episode */
void pace_refused(struct server *srv);

/* pace_make_room - at the limit: drop the slowest session; 1 if one went */
int pace_make_room(struct server *srv);

#endif
