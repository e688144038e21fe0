/*
 * NAME
 *	deliver_watch 3
 * SUMMARY
 *	what the bridge knows of the upstream's TCP: dots acknowledged, replies late
 * DESCRIPTION
 *	See deliver_watch.h. Notes on why:
 *
 *	The dot's place in the TCP stream is the bytes the peer acknowledged
 *	plus the send queue (tcpi_bytes_acked + SIOCOUTQ), read until no ACK
 *	came between the two reads, right after the write that ends with
 *	the dot (the bridge never writes past a dot in the same write). When
 *	the connection ends, tcpi_bytes_acked is read again. What Linux (6.18
 *	here) was seen to report, which this relies on: bytes_acked counts
 *	the SYN (1 after connect), as the mark does, so the two compare;
 *	after an RST with data still unacknowledged, bytes_acked stays at the
 *	last ACK, SIOCOUTQ still counts the lost bytes (it is not emptied) and
 *	TCP_INFO still answers; a FIN carries the ACK of everything the peer
 *	had received. A count that cannot be read leaves the dot taken as
 *	acknowledged: ambiguous, the old answer, never a silent resend.
 *
 *	The reply deadline is not libesmtp's: libesmtp restarts its timer
 *	on every read, so a server sending a byte a second holds a delivery
 *	thread for as long as it likes (issue 11, item 6). It runs from when
 *	the server has everything we wrote, since a large message can sit in
 *	the socket buffers for a while after its last write; until then the
 *	acknowledgements are sampled every WATCH_TICK_MS.
 * DIAGNOSTICS
 *	Debug: whether each connection's last dot was acknowledged.
 */
#include <linux/sockios.h>
#include <linux/tcp.h>		/* the kernel's struct tcp_info: glibc's lacks bytes_acked */
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "../../util/clock.h"
#include "../../util/log.h"
#include "deliver_watch.h"

#define WATCH_TICK_MS	250	/* how often a transfer's progress is sampled */

/* tcp_acked - the bytes the peer's TCP acknowledged, SYN included; -1 unknown */
static int tcp_acked(int fd, uint64_t *acked)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	memset(&ti, 0, sizeof(ti));
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0
	    || len < offsetof(struct tcp_info, tcpi_bytes_acked) + sizeof(ti.tcpi_bytes_acked))
		return -1;
	*acked = ti.tcpi_bytes_acked;
	return 0;
}

/* tcp_unacked - bytes written and not yet acknowledged (SIOCOUTQ); -1 unknown */
static int tcp_unacked(int fd)
{
	int outq;

	return ioctl(fd, SIOCOUTQ, &outq) < 0 || outq < 0 ? -1 : outq;
}

/*
 * tcp_written - the sequence just past everything written to the socket,
 * in tcp_acked()'s count: acked plus the send queue, read again until no
 * ACK moved the one between the two reads
 */
static int tcp_written(int fd, uint64_t *seq)
{
	uint64_t a1, a2;
	int outq, tries;

	for (tries = 0; tries < 8; tries++) {
		if (tcp_acked(fd, &a1) < 0 || (outq = tcp_unacked(fd)) < 0
		    || tcp_acked(fd, &a2) < 0)
			return -1;
		if (a1 == a2) {
			*seq = a1 + (uint64_t) outq;
			return 0;
		}
	}
	return -1;
}

/* deliver_watch_init - a watch over the TCP socket fd */
void deliver_watch_init(struct deliver_watch *w, int fd, int timeout_ms)
{
	memset(w, 0, sizeof(*w));
	w->fd = fd;
	w->timeout_ms = timeout_ms;
	w->since_us = clock_mono_us();
}

/* deliver_watch_dot_out - a final dot's last byte is in the kernel: note where */
void deliver_watch_dot_out(struct deliver_watch *w)
{
	w->dots_out++;
	w->dot_seq_known = tcp_written(w->fd, &w->dot_seq) == 0;
}

/* deliver_watch_settle - the upstream side ends: had its TCP acked the last dot? */
void deliver_watch_settle(struct deliver_watch *w)
{
	uint64_t acked;

	if (w->dots_out == 0)
		return;
	w->dot_acked = !w->dot_seq_known || tcp_acked(w->fd, &acked) < 0
	    || acked >= w->dot_seq;
	msg_debug("upstream TCP: final dot %u %s", w->dots_out,
		  w->dot_acked ? "acknowledged" : "not acknowledged");
}

/* deliver_watch_dot_acked - did the nth final dot reach the server's TCP? */
int deliver_watch_dot_acked(const struct deliver_watch *w, unsigned nth)
{
	if (nth == 0 || nth > w->dots_out)
		return 0;		/* never written upstream */
	return nth < w->dots_out || w->dot_acked;
}

/*
 * watch_sample - how far the peer's TCP has taken our bytes: progress
 * since the last sample moves the wait's start to now. The first sample
 * of a wait counts as progress if bytes are in flight (the wait started
 * at a write, and the peer may have taken some since): a deadline is
 * never early, and at most WATCH_TICK_MS late. Nothing in flight: no
 * more samples until the next wait (only a write adds bytes).
 */
static void watch_sample(struct deliver_watch *w, int64_t now)
{
	uint64_t acked;

	w->sample_us = now;
	if ((w->unacked = tcp_unacked(w->fd)) <= 0) {
		w->unacked = 0;
		w->sampling = 0;
		return;
	}
	if (tcp_acked(w->fd, &acked) < 0)
		return;
	if (!w->acked_known || acked != w->acked)
		w->since_us = now;	/* the server is still taking our bytes */
	w->acked = acked;
	w->acked_known = 1;
}

/*
 * deliver_watch_tick - how long the bridge may wait; 0: a deadline passed.
 * The peer's progress is sampled only once a wait has lasted
 * WATCH_TICK_MS, then every WATCH_TICK_MS while bytes are in flight, and
 * before a deadline is called: a reply that comes sooner (the usual
 * case) costs no system call here.
 */
int deliver_watch_tick(struct deliver_watch *w, const char *owed, unsigned long replies,
		       int wrote)
{
	int64_t now = clock_mono_us(), left, next;

	if (owed == NULL || wrote || replies != w->replies) {
		/* a new wait: from the last byte written, or the last reply */
		w->replies = replies;
		w->since_us = w->sample_us = now;
		w->sampling = 1;
		w->acked_known = 0;
		w->unacked = 0;
		if (owed == NULL)
			return -1;
	}
	left = w->timeout_ms - (now - w->since_us) / 1000;
	if (w->sampling && (left <= 0 || now - w->sample_us >= WATCH_TICK_MS * 1000LL)) {
		watch_sample(w, now);
		left = w->timeout_ms - (now - w->since_us) / 1000;
	}
	if (left <= 0) {
		if (w->unacked > 0)
			snprintf(w->why, sizeof(w->why), "timeout sending to the server (%d octets"
				 " unacknowledged for %d s)", w->unacked, w->timeout_ms / 1000);
		else
			snprintf(w->why, sizeof(w->why), "timeout waiting for the reply to %s",
				 owed);
		return 0;
	}
	if (!w->sampling)
		return left > INT32_MAX ? INT32_MAX : (int) left;
	next = WATCH_TICK_MS - (now - w->sample_us) / 1000;
	if (next < 1)
		next = 1;
	return (int) (left < next ? left : next);
}
