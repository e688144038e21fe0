/*
 * NAME
 *	server 3h
 * SUMMARY
 *	the SMTP listener and event loop
 * DESCRIPTION
 *	One thread runs every client session with epoll: sockets are
 *	non-blocking, each connection owns one smtp_session, and the end of
 *	each message becomes a commit request (commit.h). Duplicates are
 *	answered from a read transaction without waiting for the writer.
 *	server_run() returns after SIGTERM or SIGINT, once every transaction
 *	in progress has been answered or aborted.
 */
#ifndef RELAY_SERVER_H
#define RELAY_SERVER_H

#include "../conf/conf.h"
#include "../store/store.h"

struct server;

/*
 * Where committed messages go: delivery sits above acceptance, so the
 * daemon wires it in (daemon/main.c) and relay/ never includes it.
 * enqueue runs on the writer thread, reload on the event loop.
 */
struct server_delivery {
	void (*enqueue) (void *arg, const char *qid);
	void (*reload) (void *arg, const struct conf *nc);	/* SIGHUP's new settings */
	void *arg;
};

struct server *server_new(struct conf *c, const char *conf_path, struct store *st);
void server_listen(struct server *srv);		/* bind every listener; fatal on failure */
void server_set_store(struct server *srv, struct store *st);
struct commit *server_commit(struct server *srv);
struct dupcount *server_dupcount(struct server *srv);	/* owned by the server */
void server_set_delivery(struct server *srv, const struct server_delivery *dl);
int server_run(struct server *srv);		/* 0 after a clean shutdown */
void server_free(struct server *srv);

#endif
