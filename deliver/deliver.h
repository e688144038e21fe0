/*
 * NAME
 *	deliver 3h
 * SUMMARY
 *	delivery of spooled messages upstream (libesmtp) or into a Maildir
 * DESCRIPTION
 *	deliver_start() starts upstream.connections delivery threads and
 *	loads the queue from the store: everything spooled and not finished
 *	is scheduled again (a message whose inflight mark is set died after
 *	its final dot may have gone out: it follows upstream.ambiguous).
 *	deliver_enqueue() hands over a message just committed; it never
 *	blocks acceptance for longer than a mutex.
 *
 *	Per recipient: 2xx sent; 4xx, or failure before the final dot,
 *	deferred with exponential backoff retry.first .. retry.max, bounced
 *	after retry.give_up; 5xx bounced, with an RFC 3464 delivery status
 *	notification queued to the sender unless the sender is null. The
 *	ambiguous case (final dot sent, no reply) is marked unconfirmed and
 *	never resent, unless upstream.ambiguous = "retry". A throttling reply
 *	(deliver_rate.h) is about the rate, not the message: the session's
 *	messages that got nowhere wait for the upstream's pause to end, with
 *	no attempt counted and their backoff as it was.
 *
 *	upstream.rate and upstream.recipient_rate space the MAIL and RCPT
 *	commands of every connection; upstream.connections sessions at most,
 *	fewer while throttling feedback holds them down (deliver_rate.h).
 *
 *	Log lines, one per recipient event, Postfix-like:
 *	  QID: to=<r>, relay=host[ip]:port, delay=0.12, dsn=2.0.0, status=sent (250 ...)
 */
#ifndef DELIVER_DELIVER_H
#define DELIVER_DELIVER_H

#include "../conf/conf.h"
#include "../queue/queue_admin.h"
#include "../store/store.h"

struct deliver;

struct commit;

/*
 * A transport takes a batch of messages where they go: each is an entry
 * of struct deliver_transport (deliver_impl.h), and the program names the
 * one its configuration asks for. deliver_maildir writes into
 * upstream.maildir; deliver_esmtp (esmtp/deliver_esmtp.h) sends upstream.
 */
struct deliver_transport;
extern const struct deliver_transport deliver_maildir;

/*
 * deliver_start - deliver through transport t; cm, if given, carries the
 * inflight marks in its group commits
 */
struct deliver *deliver_start(const struct conf *c, struct store *st, struct commit *cm,
			      const struct deliver_transport *t);
void deliver_enqueue(struct deliver *d, const char *qid);
void deliver_flush(struct deliver *d);		/* retry every deferred message now */
/* deliver_reload - take new retry settings and upstream rates (SIGHUP) */
void deliver_reload(struct deliver *d, const struct conf *nc);
/*
 * deliver_admin_sched - d's schedule as the operator's actions take it
 * (queue/queue_admin.h): a message out of it (drop, hold), back in it
 * (release), due now (retry), its route changed (reroute)
 */
struct queue_admin_sched deliver_admin_sched(struct deliver *d);
void deliver_stop(struct deliver *d);		/* finish or abort in-progress work, join; NULL-safe */

#endif
