/*
 * NAME
 *	deliver_bridge_impl 3h
 * SUMMARY
 *	what the bridge and its STARTTLS dialogue share
 * DESCRIPTION
 *	deliver_bridge.c sets up each bridge (struct deliver_bridge) and runs
 *	its thread; deliver_bridge_starttls.c holds the plain-text part of
 *	STARTTLS that deliver_bridge_open() talks before the handshake. Not
 *	for use outside deliver/esmtp/deliver_bridge*.c.
 */
#ifndef DELIVER_ESMTP_DELIVER_BRIDGE_IMPL_H
#define DELIVER_ESMTP_DELIVER_BRIDGE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <time.h>

#include "../../tls/io.h"
#include "deliver_bridge.h"
#include "deliver_filter.h"
#include "deliver_gate.h"
#include "deliver_watch.h"

struct deliver_bridge {
	pthread_t thread;
	int running;			/* thread started (at the attach), not joined */
	int cfd;			/* the bridge's end of libesmtp's socketpair: the
					 * thread's */
	int tfd;			/* TCP to the upstream until up has it; owned */
	struct io *up;			/* the upstream, plain or TLS; owned, by the thread
					 * once it runs */
	int stop[2];			/* pipe: a byte asks the thread to end; owned */
	atomic_int cut;			/* forward nothing more from libesmtp */
	atomic_uint rewinds;		/* libesmtp's rewinds (deliver_bridge_rewind) */
	unsigned rewound;		/* the thread's: those the filter was told of */
	struct deliver_filter filter;	/* the thread's */
	struct deliver_gate gate;	/* the thread's until joined */
	char broke[160];		/* why the thread hung up on its own; "" if not */
	struct deliver_watch watch;	/* the upstream's TCP; the thread's until joined */
	char ended[IO_ERR_MAX + 64];	/* how the upstream side ended; "" if it did not */
	int timed_out;			/* it ended on a deadline */
	atomic_int over;		/* the upstream side ended (bridge_settle) */
	atomic_uint paced;		/* deliver_bridge_pacing() calls: odd while libesmtp's
					 * thread waits for a rate token */
	int timeout_ms;
	char tls[160];			/* tls_io_describe(); "" for plain */
	char greeting[DELIVER_GATE_REPLY_MAX];	/* STARTTLS: the server's 220, for libesmtp */
	size_t greeting_len;
	int stopping_fd;		/* readable when delivery stops (deadline_stop_fd()); -1 none */
};

/*
 * deliver_bridge_starttls - the plain part of STARTTLS on b->tfd: greeting
 * (kept in b->greeting for libesmtp), EHLO helo, STARTTLS required, 220,
 * and nothing after it; within the deadline. 0, or -1 with why and dsn set.
 */
int deliver_bridge_starttls(struct deliver_bridge *b, const char *helo,
			    const struct timespec *deadline, char *why, size_t whylen,
			    char dsn[DELIVER_DSN_SIZE]);

#endif
