/*
 * NAME
 *	server 3h
 * SUMMARY
 *	the SMTP listener and event loop
 * DESCRIPTION
 *	One thread runs every client session with epoll: sockets are
 *	non-blocking, each connection owns one smtp_session, and the end of
 *	each message becomes a commit request (queue/commit.h). Duplicates are
 *	answered from a read transaction without waiting for the writer
 *	where the store's reads are local (LMDB).
 *	server_run() returns after SIGTERM or SIGINT, once every transaction
 *	in progress has been answered or aborted.
 */
#ifndef RELAY_SERVER_H
#define RELAY_SERVER_H

#include "../conf/conf.h"
#include "../store/store.h"

struct server;

/*
 * SIGHUP's settings for delivery: acceptance and delivery are peers over
 * the queue core (queue/), so the daemon wires them (daemon/main.c) and
 * relay/ never includes deliver/. reload runs on the event loop.
 */
struct server_delivery {
	void (*reload) (void *arg, const struct conf *nc);	/* SIGHUP's new settings */
	void *arg;
};

struct commit;
struct dupcount;

struct server *server_new(struct conf *c, const char *conf_path);
void server_listen(struct server *srv);		/* bind every listener; fatal on failure */
/* server_set_queue - before server_run(): store, group commit, dupcount (the caller's), SIGHUP's hook */
void server_set_queue(struct server *srv, struct store *st, struct commit *cm,
		      struct dupcount *dc, const struct server_delivery *dl);
int server_run(struct server *srv);		/* 0 after a clean shutdown */
void server_free(struct server *srv);

#endif
