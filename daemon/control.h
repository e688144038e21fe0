/*
 * NAME
 *	control 3h
 * SUMMARY
 *	the daemon's control socket, and the stories' duplicate counts
 * DESCRIPTION
 *	If `control` is set, control_open() listens on that UNIX socket
 *	(mode 0600; a stale socket is removed, a live one is fatal), and
 *	control_start() starts the admin thread, which serves it for
 *	idemrelayctl: one request line in, one JSON object line out, then
 *	the connection closes; before it, a blank line as the request's
 *	serve begins and one a second while it runs (util/admin.h: a
 *	client tells a daemon at it from one stopped). A line with a
 *	control character before its end (LF or CR LF) is refused whole.
 *
 *	    ping                  {"ok":true,"pid":N}
 *	    flush                 every deferred message due now
 *	    retry QID             one message due now
 *	    drop SEL              out of the schedule and the spool
 *	    hold SEL              on hold, out of the schedule
 *	    release SEL           off hold, back in the schedule
 *	                          SEL: QID | ALL | key USER|- HEX... |
 *	                          from PATTERN [to PATTERN] | to PATTERN
 *	    forget [--force|--drop] USER|- HEX...
 *	                          delete the claims filed under these key
 *	                          index hashes (USER: only that AUTH user's);
 *	                          refused ("still queued", with "queued")
 *	                          while a message of theirs is queued, unless
 *	                          --force, or --drop (it is dropped first)
 *	    count QID             duplicates/mismatches answered with QID
 *	    stats                 the counters since start
 *
 *	Failures are {"ok":false,"error":"..."}. The replies of retry, drop,
 *	hold, release and forget are queue/queue_admin.c's.
 *
 *	Duplicate counts (relay/dupcount.h) are written to the stories once
 *	a second in one write transaction, and at stop; `count` adds what is
 *	not written yet, so it is exact while the daemon runs. The admin
 *	thread also expires old stories. It runs whether or not a
 *	control socket is configured.
 */
#ifndef DAEMON_CONTROL_H
#define DAEMON_CONTROL_H

#include "../conf/conf.h"
#include "../store/store.h"
#include "../deliver/deliver.h"
#include "../relay/dupcount.h"

struct control;

/*
 * control_open() binds the socket before the store is opened, and
 * control_close() removes it after the store is closed (an exit before
 * that, a fatal error, removes it too): from the one to
 * the other a request waits in the socket's backlog until served (from
 * control_start() to control_stop()) or given up, so that idemrelayctl
 * never finds no daemon and acts on the store beside one starting or
 * stopping (where nothing would refuse a drop of a message being
 * delivered, nor schedule a release written after the queue was read).
 */
struct control *control_open(const struct conf *c);
void control_start(struct control *ctl, struct store *st, struct deliver *dl,
		   struct dupcount *dc);
void control_stop(struct control *ctl);		/* writes pending counts, joins */
void control_close(struct control *ctl);

/* control_socket_check - can the socket be made at path? 0, or -1 with why */
int control_socket_check(const char *path, char *why, size_t whylen);

#endif
