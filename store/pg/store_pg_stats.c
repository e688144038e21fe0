/*
 * NAME
 *	store_pg_stats 3
 * SUMMARY
 *	the PostgreSQL backend's figures: claims, queued, the greatest QID, the nodes alive
 * SYNOPSIS
 *	#include "store/pg/store_pg_int.h"
 * DESCRIPTION
 *	store_pg_stats() is the backend's store_stats(): the node's own
 *	counts (commits, outages, commits waiting for replication, voids)
 *	under its lock, then one statement on a connection of the pool
 *	(store_pg_run(): kept batches are settled first). The queued are
 *	counted (few, and indexed); the claims, and the stories when
 *	asked, are estimated past PG_ROWS_EXACT rows (PG_ROWS). A call for
 *	the nodes alive alone reads only them.
 * DIAGNOSTICS
 *	0, or a STORE_E* code (the database unreachable: STORE_EAGAIN).
 */
#include <string.h>

#include "../../util/log.h"
#include "store_pg_int.h"

/*
 * The nodes alive: those whose node lock (PG_NODE_LOCK, held
 * by a running node's session from its open to its close) is held now.
 * A bigint advisory lock shows in pg_locks as classid (high 32 bits)
 * and objid (low 32 bits).
 */
#define SQL_NODES	"(SELECT count(*) FROM nodes n WHERE EXISTS (SELECT 1 FROM pg_locks l" \
	" WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1" \
	" AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())" \
	" AND ((l.classid::bigint << 32) | l.objid::bigint) = " PG_NODE_LOCK("n.slot") "))"
#define SQL_LAST	"(SELECT max(qid) FROM messages)"
/* the queued are few and indexed (messages_take): counted; the rest estimated when large */
#define SQL_STATS	"SELECT " SQL_NODES ", " PG_ROWS("claims") ", count(*), min(accepted), " SQL_LAST

/*
 * store_pg_stats - claims, queued and the oldest, the greatest QID in byte
 * order (the qid columns are COLLATE "C"; a story keeps its row for its
 * ttl, so a QID that left the spool counts until then), the nodes alive,
 * stories if asked, commits, the database reachable
 */
int store_pg_stats(struct store *base, struct store_stats *s, unsigned what)
{
	struct pg_store *st = (struct pg_store *) base;
	PGresult *r;
	int err;

	memset(s, 0, sizeof(*s));
	pthread_mutex_lock(&st->mu);
	s->reach.outages = st->outages;
	s->reach.repl_waiting = st->repl_waiting;
	s->reach.repl_waits = st->repl_waits;
	s->reach.voided = st->voided;
	pthread_mutex_unlock(&st->mu);
	err = store_pg_run(st, what == STORE_STATS_NODES ? "SELECT " SQL_NODES
			   : (what & STORE_STATS_STORIES) ? SQL_STATS ", " PG_ROWS("messages")
			   " FROM messages WHERE queued" : SQL_STATS " FROM messages WHERE queued",
			   NULL, &r, "stats");
	if (err != 0)
		return err;
	s->nodes = (int) store_pg_int(r, 0, 0);
	if (what == STORE_STATS_NODES) {	/* the nodes alive alone */
		PQclear(r);
		return 0;
	}
	s->claims = (uint64_t) store_pg_int(r, 0, 1);
	s->queued = (uint64_t) store_pg_int(r, 0, 2);
	s->oldest = PQgetisnull(r, 0, 3) ? 0 : store_pg_int(r, 0, 3) - store_pg_clock_off(st);
	if (!PQgetisnull(r, 0, 4) && store_pg_qid(r, 0, 4, s->last_qid) != 0) {
		msg_warn("store: the greatest QID is not one, ignored");	/* the rest stand */
		s->last_qid[0] = 0;
	}
	if (what & STORE_STATS_STORIES)
		s->stories = (uint64_t) store_pg_int(r, 0, 5);
	PQclear(r);
	return 0;
}
