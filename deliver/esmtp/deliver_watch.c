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
#include <errno.h>
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
	if (log_enabled(LOG_LEVEL_DEBUG))
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

/* deliver_watch_tick - how long the bridge may wait; 0: a deadline passed */
int deliver_watch_tick(struct deliver_watch *w, const char *owed, unsigned long replies,
		       int wrote)
{
	int64_t now = clock_mono_us(), left;
	uint64_t acked;
	int unacked;

	if (owed == NULL) {
		/*
		 * Nothing owed, no deadline: the next wait starts here. What
		 * the peer acknowledged is not read (a system call in every
		 * turn of the bridge's loop): a wait starts with a write,
		 * which reads it below; if one starts without, the count
		 * read later is taken as progress, from that moment.
		 */
		w->replies = replies;
		w->since_us = now;
		return -1;
	}
	if (wrote || replies != w->replies) {
		/* a new wait: from the last byte written, or the last reply */
		w->replies = replies;
		w->since_us = now;
		if (tcp_acked(w->fd, &acked) == 0)
			w->acked = acked;
	}
	if ((unacked = tcp_unacked(w->fd)) > 0 && tcp_acked(w->fd, &acked) == 0
	    && acked != w->acked) {
		w->acked = acked;	/* the server is still taking our bytes */
		w->since_us = now;
	}
	left = w->timeout_ms - (now - w->since_us) / 1000;
	if (left <= 0) {
		if (unacked > 0)
			snprintf(w->why, sizeof(w->why), "timeout sending to the server (%d octets"
				 " unacknowledged for %d s)", unacked, w->timeout_ms / 1000);
		else
			snprintf(w->why, sizeof(w->why), "timeout waiting for the reply to %s",
				 owed);
		return 0;
	}
	return unacked > 0 && left > WATCH_TICK_MS ? WATCH_TICK_MS : (int) left;
}
