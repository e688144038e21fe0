/*
 * NAME
 *	store_pg_schema 3
 * SUMMARY
 *	the PostgreSQL schema: created, upgraded by forward migrations, a newer one refused
 * SYNOPSIS
 *	#include "store/pg/store_pg_int.h"
 * DESCRIPTION
 *	idemrelay_schema(version) says which version the schema is at;
 *	migrations[v] brings version v to v + 1 (migrations[0] creates
 *	everything, as version 1). store_pg_schema() runs, under a session
 *	advisory lock so that nodes starting together migrate once, every
 *	migration the schema lacks, in order, each in one transaction with
 *	the version it reaches; a schema newer than this build knows is
 *	refused, since an older node would write rows the newer schema
 *	does not expect. The lock is held for that alone: no write of the
 *	node's own (its slot, its old leases: store_pg.c) is made under it,
 *	so that a start whose COMMIT waits for a synchronous standby that
 *	is away never holds up the starts of other nodes. A start waiting
 *	for it says which backend holds it and what that one is doing, and
 *	gives up at a stop. The tables are described in idemrelay(8),
 *	"PostgreSQL schema".
 *
 *	The tables live in the connection's current schema (search_path):
 *	several idemrelay installations, or tests, may share a database in
 *	schemas of their own. Advisory lock keys include the schema's name.
 *
 *	A message's row is its spool entry while queued and its story after
 *	(data NULL once it leaves the spool, data_len kept), until expires.
 *	Claims name a message; they are not bound to it by a foreign key,
 *	since a claim may outlive its message's story being written, and a
 *	story its claims being forgotten. Recipients go with their message
 *	(by a foreign key until version 9, by the deleting statements since).
 *
 *	Version 2 adds who made a message's inflight mark (mark_token, the
 *	lease's token) and, when another lease's update finished the message
 *	clearing that mark, on whose mark that verdict was made (verdict_on).
 *	The releases of versions 2 to 7 kept them by a trigger
 *	(idemrelay_mark()) whatever statement wrote the flag, for nodes of
 *	versions 1 to 3 still running.
 *
 *	Version 3 adds voids: the QIDs of batches answered 451 4.3.0 while
 *	their commit still waited, which count for nothing until settled
 *	(store_pg_wait.c).
 *
 *	Version 4's release ran that trigger's function only for a statement
 *	that did not write the two columns itself as the function would
 *	have: its statements wrote them (PG_MARK_COLS, store_pg_txn.c), so
 *	that a mark or an outcome cost no PL/pgSQL call (the trigger was
 *	5.5% of the node's backends' CPU in a fresh run, 3.1% after: the
 *	WHEN clause and the old row's fetch), while a node of an older
 *	version, during an upgrade, still got the columns kept. Such a node
 *	cannot run beside this build (version 8 drops the trigger, below;
 *	idemrelay(8)), so this build's migrations to versions 2 and 4 make
 *	no trigger, and the one to 8 drops it where an older release made it.
 *
 *	Version 5 adds held (the operator's hold: no node takes the message
 *	until released) and lease_since (when a node took its lease from
 *	the shared queue; NULL: the accepting node's, since acceptance).
 *
 *	Version 6 adds route: the name of the route a message was given at
 *	acceptance, NULL for the default upstream (and on older rows).
 *	Version 7 drops messages_keyhash: no statement reads messages by
 *	key (a key's messages are found through its claims, claims_keyhash),
 *	while every message with a key paid an entry at its INSERT and
 *	another at its outcome's update, and on a database that has run,
 *	with random keys, a full-page image of another leaf after each
 *	checkpoint.
 *
 *	Version 8 drops the trigger of version 2 and its function: every
 *	statement of a build of schema 4 or later writes the mark's columns
 *	itself (PG_MARK_COLS), and the trigger cost every UPDATE of inflight
 *	its WHEN clause, the old row's fetch and a tuple lock (a node of
 *	schema 3 or older still running would no longer get the columns
 *	kept: idemrelay(8) says to pass through a release of schema 4 to 7
 *	first). It drops messages_lease too: the renewal and the list of
 *	this node's leases find their rows by QID (the primary key), while
 *	every message put or taken paid an entry in it. Together about 180
 *	WAL bytes a fresh message of 4,880 (store_pg_lease.c).
 *
 *	Version 9 drops rcpts' foreign key to messages: its check at each
 *	recipient's INSERT locked the message's row just inserted (FOR KEY
 *	SHARE: a WAL record and a dirtied page a recipient, 55 WAL bytes and
 *	8 us of a fresh message's 230), and the two statements that delete
 *	messages (the expiry, store_pg_hist.c; a void settled,
 *	store_pg_wait.c) delete their recipients themselves, as its ON
 *	DELETE CASCADE did. A node of version 8 or older still running
 *	meanwhile leaves the recipients of the messages it deletes behind:
 *	rows nothing reads (a QID is never issued twice).
 *
 *	Version 10 adds messages.replayed: another node answered a
 *	duplicate 250 with the message's QID while it was still under its
 *	accepting node's lease (store_pg_claim.c); a batch that node
 *	answered 451 without knowing its commit committed is then not
 *	voided (store_pg_pend.c). A constant default: no table rewrite. A
 *	node of version 9 or older still running meanwhile neither writes
 *	nor reads it (as before the column).
 *
 *	Version 11 adds messages_take, an index by route ('' the default
 *	upstream's), then next_attempt: the take reads each route's due
 *	mail apart, never a route it passes over (store_pg_lease.c). The
 *	migration only builds it, in its transaction: SHARE on messages,
 *	so reads go on and writes wait for the build (a node of version
 *	10's acceptances, takes and renewals), and no other lock on the
 *	table, so no cycle with a transaction that read messages and then
 *	writes (the build once dropped the old index in the same
 *	transaction: ACCESS EXCLUSIVE asked while holding SHARE, which
 *	deadlocked with such a transaction of a node of version 10, the
 *	migration cancelled, at every start under traffic). The old
 *	messages_due, which the new one replaces (one index still, so no
 *	message pays another entry), is dropped after the commit, by DROP
 *	INDEX CONCURRENTLY (no lock that blocks reads or writes; it waits
 *	for the transactions that use messages to end), by the node that
 *	migrated and again at every node's start (drop_due_10()), so that
 *	a drop interrupted is finished later. It waits DUE_DROP_WAIT at
 *	most (lock_timeout: its waits for those transactions are lock
 *	waits): a transaction that never ends (a commit waiting for a
 *	synchronous standby that is away) would hold this start, and the
 *	schema lock every other start waits for; the index then stays
 *	(perhaps invalid, still kept up), for a later start to drop. A node
 *	of version 10 takes as before, but reads the index entry of every
 *	queued message for it, and the row of every one due, and sorts
 *	those (idemrelay(8): upgrade the nodes in quick succession).
 *
 *	idemrelay_fenced(got, want) raises SQLSTATE IR001 when a fenced
 *	write found fewer rows than it meant to: a lease went to another
 *	node. Raised inside the batch's transaction, it aborts the whole
 *	of it, so that no write of a message whose lease was lost commits.
 * DIAGNOSTICS
 *	0, or a STORE_E* code with the reason in err.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../../util/buf.h"
#include "../../util/log.h"
#include "store_pg_int.h"

/* drop_due_10()'s longest wait for the transactions that use messages */
#define DUE_DROP_WAIT	"'3s'"
/* a migration's longest wait for another transaction's lock */
#define MIGRATION_WAIT	"'10s'"
#define DUE_KEPT	"the index schema 11 replaced (messages_due) stays, dropped at a later start"

static const char *const migrations[PG_SCHEMA_VERSION] = {
	/* 0 -> 1: everything */
	"CREATE TABLE idemrelay_schema (version int NOT NULL);"
	"INSERT INTO idemrelay_schema (version) VALUES (0);"
	"CREATE TABLE nodes (name text PRIMARY KEY,"
	"  slot int UNIQUE NOT NULL CHECK (slot BETWEEN 0 AND 255));"
	"CREATE TABLE claims (hash bytea PRIMARY KEY, keyhash bytea NOT NULL,"
	"  qid text COLLATE \"C\" NOT NULL, fingerprint bytea NOT NULL,"
	"  accepted bigint NOT NULL, expires bigint NOT NULL);"
	"CREATE INDEX claims_keyhash ON claims (keyhash);"
	"CREATE TABLE messages (qid text COLLATE \"C\" PRIMARY KEY, node text NOT NULL,"
	"  accepted bigint NOT NULL, sender text NOT NULL, envid text, ret int NOT NULL,"
	"  body int NOT NULL, smtputf8 bool NOT NULL, client text NOT NULL, auth_user text,"
	"  data bytea, data_len bigint NOT NULL, has_key bool NOT NULL, keyhash bytea,"
	"  ttl bigint NOT NULL, attempts int NOT NULL, next_attempt bigint NOT NULL,"
	"  inflight bool NOT NULL, queued bool NOT NULL,"
	"  lease_owner text, lease_until bigint, lease_token bigint,"
	"  updated bigint NOT NULL DEFAULT 0, finished bigint NOT NULL DEFAULT 0,"
	"  expires bigint NOT NULL DEFAULT 0, forgotten bigint NOT NULL DEFAULT 0,"
	"  dropped bool NOT NULL DEFAULT false, duplicates int NOT NULL DEFAULT 0,"
	"  mismatches int NOT NULL DEFAULT 0);"
	/* message data is mostly compressed already (base64, images): no CPU spent on it */
	"ALTER TABLE messages ALTER COLUMN data SET STORAGE EXTERNAL;"
	"CREATE INDEX messages_due ON messages (next_attempt) WHERE queued;"
	"CREATE INDEX messages_expiry ON messages (expires) WHERE NOT queued;"
	"CREATE INDEX messages_keyhash ON messages (keyhash) WHERE has_key;"
	"CREATE INDEX messages_lease ON messages (lease_token) WHERE queued;"
	"CREATE TABLE rcpts (qid text COLLATE \"C\" NOT NULL REFERENCES messages ON DELETE CASCADE,"
	"  idx int NOT NULL, addr text NOT NULL, notify int NOT NULL, orcpt text,"
	"  state int NOT NULL, reply text, PRIMARY KEY (qid, idx));"
	"CREATE SEQUENCE lease_seq;"
	"CREATE FUNCTION idemrelay_fenced(got bigint, want bigint) RETURNS bigint"
	"  LANGUAGE plpgsql AS $f$ BEGIN"
	"  IF got <> want THEN RAISE EXCEPTION 'lease lost: % of % fenced writes found their lease',"
	"    got, want USING ERRCODE = '" PG_SQLSTATE_FENCE "'; END IF;"
	"  RETURN got; END $f$;",
	/*
	 * 1 -> 2: an inflight mark names the lease that made it (mark_token),
	 * and an update under another lease that clears it while finishing
	 * the message (a verdict on a mark found at load) keeps that name
	 * (verdict_on): store_pg_revive.c undoes such a verdict for the node
	 * that made the mark and knows it sent no final dot. The statements
	 * write them (PG_MARK_COLS); the trigger its release added for older
	 * nodes is not made (see the header)
	 */
	"ALTER TABLE messages ADD COLUMN mark_token bigint, ADD COLUMN verdict_on bigint;",
	/*
	 * 2 -> 3: the QIDs of batches answered 451 while their commit still
	 * waited (for a synchronous standby), with that transaction's id:
	 * they count for nothing until settled (store_pg_wait.c)
	 */
	"CREATE TABLE voids (qid text COLLATE \"C\" PRIMARY KEY, xid xid8 NOT NULL,"
	"  node text NOT NULL, made bigint NOT NULL);",
	/*
	 * 3 -> 4: nothing here; its release gave the mark's trigger a WHEN
	 * clause, and this build makes no trigger (see the header)
	 */
	"",
	/*
	 * 4 -> 5: the operator's hold (idemrelayctl hold), and when a lease
	 * was taken, for idemrelayctl's "active on NODE since TIME"
	 */
	"ALTER TABLE messages ADD COLUMN held bool NOT NULL DEFAULT false,"
	"  ADD COLUMN lease_since bigint;",
	/*
	 * 5 -> 6: the route chosen at acceptance (routes in idemrelay.conf(5));
	 * NULL, as on every older row: the default upstream
	 */
	"ALTER TABLE messages ADD COLUMN route text;",
	/* 6 -> 7: an index nothing reads */
	"DROP INDEX messages_keyhash;",
	/*
	 * 7 -> 8: the statements of builds of schema 4 on keep the mark's
	 * columns themselves, and a lease is found by its QID
	 */
	"DROP TRIGGER IF EXISTS messages_mark ON messages;"
	"DROP FUNCTION IF EXISTS idemrelay_mark();"
	"DROP INDEX messages_lease;",
	/*
	 * 8 -> 9: recipients go with their message by the statements that
	 * delete messages, not by a foreign key
	 */
	"ALTER TABLE rcpts DROP CONSTRAINT rcpts_qid_fkey;",
	/*
	 * 9 -> 10: a message whose claim another node replayed (answered 250
	 * with its QID) while it was under its accepting node's lease: never
	 * voided since (store_pg_claim.c, store_pg_pend.c)
	 */
	"ALTER TABLE messages ADD COLUMN replayed bool NOT NULL DEFAULT false;",
	/*
	 * 10 -> 11: the take reads each route's due mail in a part of the
	 * index of its own, never a skipped route's (store_pg_lease.c).
	 * Only built here (SHARE on messages: writes wait, reads go on, no
	 * lock upgrade); messages_due goes after the commit (drop_due_10())
	 */
	"CREATE INDEX messages_take ON messages ((coalesce(route, '')), next_attempt) WHERE queued;",
};

/* schema_version - the schema's version; 0 if there is none yet */
static int schema_version(struct pg_store *st, PGconn *c, int *version)
{
	PGresult *r;
	int err;

	*version = 0;
	if ((err = store_pg_exec(st, c, "SELECT to_regclass('idemrelay_schema') IS NOT NULL", NULL,
				 &r, "schema version")) != 0)
		return err;
	if (PQntuples(r) != 1 || !store_pg_int(r, 0, 0)) {
		PQclear(r);
		return 0;
	}
	PQclear(r);
	if ((err = store_pg_exec(st, c, "SELECT max(version) FROM idemrelay_schema", NULL, &r,
				 "schema version")) != 0)
		return err;
	*version = PQntuples(r) == 1 ? (int) store_pg_int(r, 0, 0) : 0;
	PQclear(r);
	return 0;
}

/*
 * drop_due_10 - drop the index messages_take replaced at version 11,
 * outside any transaction block and concurrently: no read or write of
 * messages waits for it; it waits for those under way, DUE_DROP_WAIT at
 * most (the session's lock_timeout restored after). Done at every
 * node's start, so that one given up or interrupted is finished later
 * (an index a failed concurrent drop left invalid included); a failure
 * only warns, in one line (the old index costs upkeep, nothing else)
 */
static void drop_due_10(struct pg_store *st, PGconn *c)
{
	PGresult *r = NULL;
	const char *state;
	char why[256];

	if (store_pg_simple(st, c, "SET lock_timeout = " DUE_DROP_WAIT, DUE_KEPT) == 0)
		r = PQexec(c, "DROP INDEX CONCURRENTLY IF EXISTS messages_due");	/* lock_timeout */
	state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
	if ((r == NULL || store_pg_result(st, c, r, DUE_KEPT) != 0)
	    && (state == NULL || strcmp(state, "55P03") != 0))	/* a lock timeout: said already */
		msg_warn("store: " DUE_KEPT ": %s", store_pg_conn_error(c, why, sizeof(why)));
	PQclear(r);
	(void) store_pg_simple(st, c, "RESET lock_timeout", DUE_KEPT);
}

/* holder - log who holds the schema lock, as pg_locks and pg_stat_activity show it */
static void holder(struct pg_store *st, PGconn *c)
{
	PGresult *r;

	if (store_pg_exec(st, c, "SELECT a.pid::text, coalesce(a.application_name, ''), "
			  "coalesce(a.state || coalesce(', waiting for ' || a.wait_event, ''), "
			  "'its state not shown to this role'), coalesce(a.wait_event, '') FROM pg_locks l JOIN "
			  "pg_stat_activity a ON a.pid = l.pid, (SELECT " PG_SCHEMA_LOCK " k) x "
			  "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND "
			  "l.classid = ((x.k >> 32) & 4294967295)::oid AND l.objid = (x.k & 4294967295)::oid "
			  "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
			  NULL, &r, "schema lock holder") != 0)
		return;
	if (PQntuples(r) == 1 && PQnfields(r) == 4)
		msg_info("store: waiting for the PostgreSQL schema lock (a node's schema migration): "
			 "backend %s (%s) holds it, %s%s", PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 1),
			 PQgetvalue(r, 0, 2), strcmp(PQgetvalue(r, 0, 3), "SyncRep") == 0 ?
			 " (its COMMIT waits for the synchronous standby)" : "");
	else
		msg_info("store: waiting for the PostgreSQL schema lock (a node's schema migration)");
	PQclear(r);
}

/* stopping - is a stop pending (SIGTERM, SIGINT: blocked by the daemon from its listen on)? */
static int stopping(void)
{
	sigset_t set;

	return sigpending(&set) == 0 && (sigismember(&set, SIGTERM) || sigismember(&set, SIGINT));
}

/*
 * schema_lock - the schema lock, asked for once a second, each time
 * within a statement's limit: a start behind another node's migration
 * waits as long as that takes, fails at the limit if the server stops
 * answering (a hung server still answers TCP keepalives), and ends at
 * a stop
 */
static int schema_lock(struct pg_store *st, PGconn *c, char *err, size_t errlen)
{
	PGresult *r;
	int rc, got, waits = 0;

	while ((rc = store_pg_exec(st, c, "SELECT pg_try_advisory_lock(" PG_SCHEMA_LOCK ")", NULL,
				   &r, "schema lock")) == 0) {
		got = store_pg_int(r, 0, 0);
		PQclear(r);
		if (got)
			return 0;
		if (stopping()) {
			snprintf(err, errlen, "store: stopped while waiting for the PostgreSQL schema lock");
			return STORE_EAGAIN;
		}
		if (waits++ % 60 == 0)	/* once a minute */
			holder(st, c);
		sleep(1);
	}
	snprintf(err, errlen, "store: cannot take the schema lock: %s",
		 PQerrorMessage(c)[0] ? PQerrorMessage(c) : store_strerror(rc));
	return rc;
}

/* schema_current - store_pg_schema's work, under the schema lock if not a client */
static int schema_current(struct pg_store *st, PGconn *c, int client, char *err, size_t errlen)
{
	struct buf sql = BUF_INIT;
	char what[64];
	PGresult *r;
	int version, rc;

	if ((rc = schema_version(st, c, &version)) != 0) {
		snprintf(err, errlen, "store: cannot read the schema version: %s",
			 PQerrorMessage(c)[0] ? PQerrorMessage(c) : store_strerror(rc));
		return rc;
	}
	if (version > PG_SCHEMA_VERSION) {
		snprintf(err, errlen, "store: schema version %d is newer than this idemrelay (%d); "
			 "upgrade idemrelay", version, PG_SCHEMA_VERSION);
		return STORE_EINVAL;
	}
	if (client && version == 0) {
		snprintf(err, errlen, "store: no idemrelay schema in this database (no node ran yet)");
		return STORE_ENOTFOUND;
	}
	if (client && version < PG_SCHEMA_VERSION) {	/* as none: a node's start makes it current */
		snprintf(err, errlen, "store: schema version %d is older than this idemrelay (%d); "
			 "start a node to upgrade it", version, PG_SCHEMA_VERSION);
		return STORE_ENOTFOUND;
	}
	if (version < PG_SCHEMA_VERSION)	/* said first: a migration has no limit */
		msg_info("store: PostgreSQL schema at version %d, migrating to version %d", version,
			 PG_SCHEMA_VERSION);
	for (; version < PG_SCHEMA_VERSION; version++) {
		/*
		 * the migration and the version it reaches, in one transaction,
		 * with no limit (an index built over a large table outlasts it, and
		 * cut it rolled back at every start); its waits for other
		 * transactions' locks last MIGRATION_WAIT at most
		 */
		buf_reset(&sql);
		buf_printf(&sql, "SET LOCAL lock_timeout = " MIGRATION_WAIT ";%s;UPDATE "
			   "idemrelay_schema SET version = %d", migrations[version], version + 1);
		snprintf(what, sizeof(what), "schema migration to version %d", version + 1);
		r = PQexec(c, sql.data);
		rc = store_pg_result(st, c, r, what);
		PQclear(r);
		if (rc != 0) {
			snprintf(err, errlen, "store: schema migration to version %d failed: %s",
				 version + 1, store_strerror(rc));
			buf_free(&sql);
			return rc;
		}
		msg_info("store: PostgreSQL schema %s version %d", version ? "migrated to" : "created at",
			 version + 1);
	}
	buf_free(&sql);
	if (!client)
		drop_due_10(st, c);
	return 0;
}

/*
 * store_pg_schema - make the schema current, or refuse one newer than
 * this build, under the schema lock, given up before return; a client
 * (idemrelayctl, a node's start-up check) only reads it: STORE_ENOTFOUND
 * if there is none or it is older (a node's start makes it current),
 * STORE_EINVAL if it is newer
 */
int store_pg_schema(struct pg_store *st, PGconn *c, int client, char *err, size_t errlen)
{
	int rc;

	if (client)
		return schema_current(st, c, 1, err, errlen);
	if ((rc = schema_lock(st, c, err, errlen)) != 0)
		return rc;
	rc = schema_current(st, c, 0, err, errlen);
	(void) store_pg_simple(st, c, "SELECT pg_advisory_unlock(" PG_SCHEMA_LOCK ")", "schema unlock");
	return rc;
}
