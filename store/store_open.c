/*
 * NAME
 *	store_open 3
 * SUMMARY
 *	the one place a store backend is chosen
 * SYNOPSIS
 *	#include "store/store.h"
 *
 *	int store_open(struct store **out, const struct conf *cf,
 *		       enum store_role role, char *err, size_t errlen);
 *
 *	const char *store_dir(const struct conf *cf);
 *
 *	const char *store_name(const struct conf *cf);
 * DESCRIPTION
 *	store.backend names the backend; this file alone knows them, so
 *	the daemon, its -t check and idemrelayctl open a store the same
 *	way and never call a backend's own open. The backend's settings
 *	(store.map_size_max, store.commit_wait, the lease) are applied
 *	here too, once.
 *
 *	STORE_NODE is the daemon: this node, read-write, creating what is
 *	missing (the LMDB environment, the PostgreSQL schema and the
 *	node's slot; an LMDB store whose free list is long is compacted
 *	first, store_compact.c); on LMDB one daemon a store (STORE_EAGAIN:
 *	another daemon writes it). STORE_READER is idemrelayctl's and -t's: nothing
 *	created, no node registered (STORE_ENOTFOUND if there is no
 *	store yet). STORE_WRITER is idemrelayctl writing while the daemon
 *	is stopped: an existing store, never a new one; on LMDB one that no
 *	other process has open (STORE_EAGAIN: the daemon may be running).
 *	PostgreSQL's nodes take the queue from the shared database, so a
 *	client's write there is seen by them as another node's would be.
 *
 *	store_dir() is the directory on this node's disk that the store
 *	lives in (store.path), for the start to make and hand to the
 *	daemon's user and for -t to check; NULL for a store that lives
 *	elsewhere (a database). store_name() names its backend, open or
 *	not (idemrelayctl's stats, when it cannot be opened).
 * DIAGNOSTICS
 *	0, or a STORE_E* code and why in err: "FILE:LINE: store.url: ..."
 *	for a database that will not let us in; for a directory, the
 *	daemon adds which setting to look at, idemrelayctl says it as
 *	LMDB does ("no store at PATH").
 */
#include <stdio.h>

#include "../conf/conf.h"
#include "lmdb/store_lmdb.h"
#include "pg/store_pg.h"
#include "store.h"

/* open_pg - the shared database: a node, or a client (no node, no leases) */
static int open_pg(struct store **out, const struct conf *cf, enum store_role role,
		   char *err, size_t errlen)
{
	char why[512], where[256];
	int rc;

	if (role == STORE_NODE)
		rc = store_pg_open(out, cf->store.url, cf->node, cf->store.lease * 1000000LL,
				   why, sizeof(why));
	else
		rc = store_pg_open(out, cf->store.url, NULL, 0, why, sizeof(why));
	if (rc != 0) {
		snprintf(err, errlen, "%s: %s", conf_where(cf, "store.url", where, sizeof(where)),
			 why);
		return rc;
	}
	if (role == STORE_NODE)
		store_pg_set_commit_wait(*out, cf->store.commit_wait * 1000000LL);
	return 0;
}

/* open_lmdb - the embedded store in store.path */
static int open_lmdb(struct store **out, const struct conf *cf, enum store_role role,
		     char *err, size_t errlen)
{
	char why[512], where[256];
	int rc;

	switch (role) {
	case STORE_NODE:
		if ((rc = store_lmdb_open(out, cf->store.path, cf->store.map_size, why,
					  sizeof(why))) != 0) {
			snprintf(err, errlen, "%s: %s: %s, or choose another path",
				 conf_where(cf, "store.path", where, sizeof(where)),
				 rc == STORE_EAGAIN ? cf->store.path : why, rc == STORE_EAGAIN
				 ? "in use by another idemrelay: stop it"
				 : "check the directory and its permissions");
			return rc;
		}
		if ((rc = store_lmdb_compact(*out)) != 0) {	/* its free list, if long */
			store_close(*out);
			*out = NULL;
			snprintf(err, errlen, "%s: %s: compacting it failed (see the log)",
				 conf_where(cf, "store.path", where, sizeof(where)), cf->store.path);
			return rc;
		}
		break;
	case STORE_READER:
		if ((rc = store_lmdb_open_readonly(out, cf->store.path, err, errlen)) != 0)
			return rc;
		break;
	case STORE_WRITER:		/* never make one, nor write beside a daemon */
		if ((rc = store_lmdb_open_alone(out, cf->store.path, cf->store.map_size, err,
						errlen)) != 0)
			return rc;
		break;
	}
	store_lmdb_set_map_max(*out, cf->store.map_size_max);	/* and the ceiling stats show */
	return 0;
}

/* store_dir - the store's directory on this node's disk, or NULL if it has none */
const char *store_dir(const struct conf *cf)
{
	return cf->store.backend == CONF_STORE_LMDB ? cf->store.path : NULL;
}

/* store_name - the backend's name */
const char *store_name(const struct conf *cf)
{
	return cf->store.backend == CONF_STORE_POSTGRESQL ? "postgresql" : "lmdb";
}

/* store_open - the backend store.backend names, opened for role */
int store_open(struct store **out, const struct conf *cf, enum store_role role,
	       char *err, size_t errlen)
{
	if (cf->store.backend == CONF_STORE_POSTGRESQL)
		return open_pg(out, cf, role, err, errlen);
	return open_lmdb(out, cf, role, err, errlen);
}
