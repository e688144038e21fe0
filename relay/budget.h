/*
 * NAME
 *	budget 3h
 * SUMMARY
 *	the message data held in memory across sessions, bounded by
 *	limits.data_memory, and memory given back after a burst
 * DESCRIPTION
 *	Every session receiving a message holds it in memory until it is
 *	committed; ten concurrent 20 MB messages held 410 MB. The server
 *	counts what sessions hold (the message being received, and the
 *	copy being committed, three times: the store copies it into its own
 *	pages for the transaction and into the redo record) and, once the total reaches data_memory, stops
 *	reading from sessions in DATA or BDAT (back-pressure: their clients'
 *	TCP windows fill and they wait).
 *
 *	Deadlock: if every session held a partial message and none could
 *	read, none would finish. So one session, the leader, always reads:
 *	the one in DATA holding the most (closest to its end). It finishes,
 *	its message is committed and freed, and the next leader goes on. A
 *	leader whose client stalls is dropped by its own data deadline
 *	(pace.h), which frees its share. A paused session's deadlines do
 *	not run (pace.c re-arms them), and it is never dropped to make room:
 *	the wait is ours, not the client's. Memory is thus bounded by
 *	data_memory plus what the leaders hold: about a message or two of
 *	limits.message_size.
 *
 *	Giving memory back: buffers past BUDGET_MMAP_THRESHOLD are always
 *	mmapped by malloc (a fixed M_MMAP_THRESHOLD turns off glibc's
 *	sliding threshold, which after the first large free() put later
 *	large buffers into the arenas, where they stayed), and after a
 *	burst, once nothing is held, malloc_trim() returns the arenas' free
 *	pages. Between bursts an arena keeps a free top of up to a burst's
 *	size (M_TRIM_THRESHOLD): fixing the mmap threshold also fixed the
 *	trim threshold at glibc's 128 KB, so each free of a 100 KB message's
 *	buffers gave their pages back and the next message faulted them in
 *	again (half the page faults of a 100 KB load, a third of its CPU).
 */
#ifndef RELAY_BUDGET_H
#define RELAY_BUDGET_H

struct conn;
struct server;

/* budget_setup - malloc's thresholds; call before any thread starts */
void budget_setup(void);

/* budget_account - a session's holding may have changed: count it again */
void budget_account(struct conn *c);

/* budget_release - the connection is being freed: its holding goes */
void budget_release(struct conn *c);

/* budget_paused - a session in DATA that must not read now */
int budget_paused(const struct conn *c);

/* budget_resume - once there is room again, paused sessions read again */
void budget_resume(struct server *srv);

/* budget_trim - once a second: after a burst, give the free memory back */
void budget_trim(struct server *srv);

#endif
