/*
 * NAME
 *	store_pg 3h
 * SUMMARY
 *	the PostgreSQL store backend: one database shared by several nodes
 * DESCRIPTION
 *	Claims, messages (envelope and content), queue state, delivery
 *	history and replies live in PostgreSQL, so that any node answers
 *	any duplicate and delivers any message; a node's disk holds
 *	nothing that matters. The daemon creates and upgrades the schema
 *	(store_pg_schema.c) and refuses a newer one.
 *
 *	url is a libpq connection string or URI; node the node's name
 *	(unique among running nodes: a second node of the same name is
 *	refused); lease_us how long a delivery lease lasts unless renewed.
 *	node NULL opens it as a client (idemrelayctl): no node registered,
 *	no leases, no slot (store_node_id() -1), the schema not created
 *	(STORE_ENOTFOUND if it is absent) and not upgraded.
 */
#ifndef STORE_PG_STORE_PG_H
#define STORE_PG_STORE_PG_H

#include <stddef.h>
#include <stdint.h>

#include "../store.h"

int store_pg_open(struct store **out, const char *url, const char *node, int64_t lease_us,
		  char *err, size_t errlen);
/* store.commit_wait: how long a reply is held while its commit waits for replication */
void store_pg_set_commit_wait(struct store *st, int64_t us);

#endif
