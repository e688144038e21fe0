/*
 * NAME
 *	server_int 3h
 * SUMMARY
 *	what server.c (the event loop), conn.c (connections), conn_auth.c
 *	(their AUTH), submit.c (the end of each message), pace.c (deadlines)
 *	and budget.c (message data in memory) share; internal to relay/
 */
#ifndef RELAY_SERVER_INT_H
#define RELAY_SERVER_INT_H

#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <time.h>

#include "../conf/conf.h"
#include "../smtp/smtp.h"
#include "../store/store.h"
#include "../util/buf.h"
#include "anvil.h"
#include "../queue/commit.h"
#include "server.h"

#define READ_CHUNK	65536
#define OUT_MAX		(32 * 1024)	/* unread replies before no command is taken */
#define AUTH_FAIL_DELAY	1000000		/* microseconds before a 535 goes out */
#define AUTH_THREADS	2		/* password checks in parallel */

enum tag { TAG_LISTEN, TAG_CONN, TAG_SIGNAL, TAG_COMMIT, TAG_AUTH };

struct listener {
	enum tag tag;			/* first: epoll data points here */
	int fd;
	const struct conf_listen *cf;	/* not owned */
	struct smtp_config smtp_cf;	/* the limits, with this listener's TLS and AUTH */
};

struct conn {
	enum tag tag;			/* first: epoll data points here */
	struct server *srv;		/* not owned */
	const struct listener *l;	/* not owned */
	struct io *io;			/* owned: the socket, plain or TLS; NULL once closed */
	struct smtp_session *s;		/* owned */
	struct buf in;			/* unconsumed input, owned */
	char addr[INET6_ADDRSTRLEN];
	int relay_ok;			/* client inside access.networks */
	struct anvil_client *client;	/* its count in srv->anvil; NULL: exempt */
	int64_t armed, deadline;	/* monotonic microseconds (pace.h) */
	unsigned long records;		/* the session's records when armed */
	int in_data;			/* the deadline is a message's credit */
	size_t held;			/* message octets counted in srv->held (budget.h) */
	int paused;			/* not reading: the data budget is spent */
	uint32_t events;		/* epoll interest */
	int in_unwanted;		/* EPOLLIN came while not taken: off for real */
	struct commit_req *req;		/* in flight, owned */
	struct auth_req *auth;		/* password check in flight, owned */
	struct anvil_wait auth_wait;	/* auth in its client's line, until its turn */
	int64_t auth_due;		/* when the delayed 535 goes out, 0: none */
	int dead;			/* socket gone; free when req and auth return */
	struct conn *prev, *next;	/* server's list */
};

struct server {
	struct conf *cf;		/* not owned; SIGHUP updates what can change */
	const char *conf_path;		/* not owned; NULL: the embedded default */
	struct store *st;		/* not owned */
	struct dupcount *dc;		/* not owned: counts for the stories, main's */
	struct server_delivery dl;	/* SIGHUP's settings for delivery (server_set_queue) */
	struct commit *cm;		/* not owned: the queue core's writer, main's */
	struct smtp_hooks hooks;
	struct tls *tls;		/* owned; NULL without tls { } */
	struct auth_users *users;	/* owned until server_run() hands it to auth */
	struct auth *auth;		/* owned; checking threads, while running */
	size_t n_auth_delayed;		/* connections with auth_due set */
	int epfd, sigfd;
	struct listener *ls;		/* owned array */
	size_t n_ls;
	struct conn *conns;
	size_t n_conns;
	struct anvil *anvil;		/* owned: per-client counts (anvil.h) */
	size_t n_dead;			/* of them closed, waiting to be freed */
	size_t held, held_peak;		/* message octets in memory, the peak since a trim */
	struct conn *leader;		/* reads even when the budget is spent; not owned */
	size_t n_paused;		/* connections with paused set */
	unsigned long limit_refused;	/* at the connection limit, since limit_since */
	int64_t limit_since;		/* clock_us() */
	int64_t limit_report;		/* monotonic: episode's last line; 0: no episode */
	size_t n_inflight;		/* commit requests not yet answered */
	int64_t stopping;		/* when SIGTERM came, 0 while running */
	enum tag commit_tag, signal_tag, auth_tag;
};

/* server_ep_set - add or change a descriptor's epoll interest (server.c) */
void server_ep_set(struct server *srv, int op, int fd, uint32_t events, void *ptr);

/* conn.c */
void conn_accept(struct server *srv, struct listener *l);	/* take new connections */
void conn_event(struct conn *c, uint32_t ev);	/* epoll says the socket is ready */
int conn_process(struct conn *c);
int conn_flush(struct conn *c);		/* write pending output; 0, or -1 if closed */
void conn_close(struct conn *c);	/* drop the socket, log the disconnect */
void conn_reap(struct server *srv);	/* free closed connections nothing points at */
void conn_free(struct conn *c);
void conn_interest(struct conn *c);	/* epoll interest from the state */
/* conn_reject_log - "NOQUEUE: reject: STAGE from unknown[ADDR]: REPLY; from=<> to=<> ..." */
void conn_reject_log(struct conn *c, const char *stage, const char *reply,
		     const struct smtp_tx *tx, const char *to);
/* conn_log_head - "NOQUEUE: reject: STAGE from unknown[ADDR]: REPLY; from=<S>" (or "QID: discard") */
void conn_log_head(struct buf *b, const struct conn *c, const char *qid, const char *stage,
		   const char *reply, const char *from);
/* conn_log_tail - " proto=ESMTP helo=<H>" */
void conn_log_tail(struct buf *b, int esmtp, const char *helo);

/* conn_auth - the engine's AUTH hook: credentials to a checking thread (conn_auth.c) */
void conn_auth(void *ctx, struct smtp_session *s, const char *mech, const char *user,
	       const char *pass);
void conn_auth_delayed(struct server *srv);	/* send the 535s whose delay is over */
void conn_auth_cancel(struct conn *c);	/* a closing connection's check not yet submitted */

/* submit_message - the engine's message hook: key, duplicates, commit (submit.c) */
void submit_message(void *ctx, struct smtp_session *s, struct smtp_tx *tx);

#endif
