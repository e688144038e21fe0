/*
 * NAME
 *	deliver_watch 3h
 * SUMMARY
 *	what the bridge knows of the upstream's TCP: dots acknowledged, replies late
 * DESCRIPTION
 *	The bridge (deliver_bridge.h) keeps one watch per upstream connection,
 *	on the TCP socket itself (below TLS when there is TLS), for two
 *	things libesmtp cannot tell:
 *
 *	Whether a message's final dot reached the server's TCP.
 *	deliver_watch_dot_out() is called once the write that ends with the
 *	dot is in the kernel, deliver_watch_settle() when the upstream side
 *	ends (reset, closed, timed out, or libesmtp hung up); then
 *	deliver_watch_dot_acked() answers.
 *
 *	When a reply is late. Every reply the server owes (the filter names
 *	them, deliver_filter_verb()) has a deadline of upstream.timeout that
 *	no byte of the reply moves: it runs from when the peer's TCP had
 *	acknowledged the last byte written to it, or from the previous
 *	complete reply, whichever is later. While the peer is still taking
 *	our bytes (a large message), the wait has not started; a peer that
 *	acknowledges nothing for the timeout is a stalled transfer.
 *	deliver_watch_tick() says how long the bridge may poll, or that the
 *	deadline passed, and why.
 */
#ifndef DELIVER_ESMTP_DELIVER_WATCH_H
#define DELIVER_ESMTP_DELIVER_WATCH_H

#include <stdint.h>

struct deliver_watch {
	int fd;				/* the upstream's TCP socket; not owned */
	int timeout_ms;			/* upstream.timeout */
	/* final dots */
	unsigned dots_out;		/* messages' final dots written upstream */
	uint64_t dot_seq;		/* the last one's end: bytes acked + send queue */
	int dot_seq_known;		/* dot_seq could be read */
	int dot_acked;			/* at the end, the peer's TCP had acked dot_seq */
	/* the reply deadline */
	unsigned long replies;		/* complete replies when the wait (re)started */
	int64_t since_us;		/* the wait or the transfer's progress, monotonic */
	int sampling;			/* bytes may be unacknowledged: sample the peer's progress */
	int64_t sample_us;		/* the last sample, or the wait's start */
	int acked_known;		/* acked was read in this wait */
	uint64_t acked;			/* bytes the peer had acknowledged then */
	int unacked;			/* the send queue then */
	char why[160];			/* why the deadline passed; "" if it did not */
};

/* deliver_watch_init - a watch over the TCP socket fd */
void deliver_watch_init(struct deliver_watch *w, int fd, int timeout_ms);

/* deliver_watch_dot_out - a final dot's last byte is in the kernel: note where */
void deliver_watch_dot_out(struct deliver_watch *w);

/* deliver_watch_settle - the upstream side ends: had its TCP acked the last dot? */
void deliver_watch_settle(struct deliver_watch *w);

/*
 * deliver_watch_dot_acked - after settle: did the nth final dot (1: the
 * connection's first) reach the server's TCP? 1: written and acknowledged
 * (or that could not be read), or a later one was written; 0: never
 * written, or not acknowledged when the connection ended
 */
int deliver_watch_dot_acked(const struct deliver_watch *w, unsigned nth);

/*
 * deliver_watch_tick - after each turn of the bridge's copy loop: owed is
 * the filter's oldest reply owed (NULL: none), replies the gate's count
 * of complete replies, wrote whether bytes went upstream in this turn.
 * Returns how many ms the bridge may wait (-1: as long as it likes), or
 * 0 when a deadline passed (w->why says which).
 */
int deliver_watch_tick(struct deliver_watch *w, const char *owed, unsigned long replies,
		       int wrote);

#endif
