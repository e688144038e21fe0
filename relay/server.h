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
#include "deliver.h"

struct server;

struct server *server_new(struct conf *c, const char *conf_path, struct store *st);
void server_listen(struct server *srv);		/* bind every listener; fatal on failure */
void server_set_store(struct server *srv, struct store *st);
struct commit *server_commit(struct server *srv);
void server_set_deliver(struct server *srv, struct deliver *dl);
int server_run(struct server *srv);		/* 0 after a clean shutdown */
void server_free(struct server *srv);

#endif
