/*
 * test_store_pg_revive - a verdict another node made on a mark whose node
 * sent no final dot undone (store_msg_revive), also while it commits, and
 * each case where it must not be; the mark's columns written by the
 * statements, not by the trigger's function; a revive's wait for a row
 * lock bounded. Skipped without IDEMRELAY_PG_URL.
 */
#include "test_store_pg_fx.h"

/*
 * marked_and_lost - A (the fixture's node) accepts qid, loads it as its
 * delivery would (into *a) and writes its inflight mark; then its lease
 * runs out and node b takes the message
 */
static void marked_and_lost(struct fx *f, struct store *b, const char *qid, int hash,
			    struct store_msg *a)
{
	char q[128];

	spool_one(f->st, qid, hash);
	CHECK_INT("A loads it", store_msg_load(f->st, qid, a), 0);
	if (a->lease == 0)
		fail_msg("%s: loaded with no lease named, want A's", qid);
	CHECK_INT("A's mark", store_msg_set_inflight(f->st, qid, 1), 0);
	snprintf(q, sizeof(q), "UPDATE messages SET lease_until = 0 WHERE qid = '%s'", qid);
	sql(f, "%s", q);
	CHECK_INT("B takes it", taken(b, clock_us()), 1);
}

/* verdict - node st loads qid, finds the mark, and finishes it unconfirmed as deliver_record.c does */
static void verdict(struct store *st, const char *qid)
{
	struct store_msg m;

	CHECK_INT("the verdict's load", store_msg_load(st, qid, &m), 0);
	CHECK_INT("the mark found", m.inflight, 1);
	m.rcpts[0].state = STORE_RCPT_UNCONFIRMED;
	free(m.rcpts[0].reply);
	m.rcpts[0].reply = xstrdup("delivery was interrupted after the final dot may have been sent");
	m.inflight = 0;
	CHECK_INT("the verdict", store_msg_update(st, &m), 0);
	store_msg_free(&m);
}

/* deferral - A's outcome of the attempt whose mark it could not confirm: no dot, deferred */
static void deferral(struct store_msg *a)
{
	free(a->rcpts[0].reply);
	a->rcpts[0].reply = xstrdup("could not record the inflight mark");
	a->attempts++;
	a->next_attempt = clock_us() + 3600 * SEC;
	a->inflight = 0;
}

/*
 * A's mark commits but A never sends the dot, and its lease runs out; B
 * takes the message, finds the mark and finishes it unconfirmed. A's held
 * deferral is refused, and A's revive queues the message again: its data
 * back, its recipient pending with A's reply, due now for any node.
 */
static void test_revive(void **state)
{
	struct fx *f = *state;
	struct store *b = node_open(f, "node-b");
	struct store_msg a, m;
	struct store_story s;
	const char *qid = "REVIVE000001";

	marked_and_lost(f, b, qid, 1, &a);
	CHECK_INT("B holds it, A's mark on it: its verdict is to come", store_msg_revive(f->st, &a),
		  STORE_ELEASE);
	verdict(b, qid);
	deferral(&a);
	CHECK_INT("A's held deferral refused", store_msg_update(f->st, &a), STORE_ENOTFOUND);
	CHECK_INT("A revives it", store_msg_revive(f->st, &a), 0);

	CHECK_INT("story", store_story_get(f->st, qid, &s), 0);
	CHECK_INT("queued again", s.queued, 1);
	CHECK_INT("not finished", s.finished, 0);
	CHECK_INT("no mark", s.m.inflight, 0);
	CHECK_INT("A's attempt counted, B's verdict not", s.m.attempts, 1);
	CHECK_INT("recipient pending again", s.m.rcpts[0].state, STORE_RCPT_QUEUED);
	CHECK_STR("A's reply", s.m.rcpts[0].reply, "could not record the inflight mark");
	if (s.m.next_attempt > clock_us())
		fail_msg("revived due at %lld, want now", (long long) s.m.next_attempt);
	store_story_free(&s);
	CHECK_INT("queued, for the figures", sql_int(f->url, "SELECT count(*) FROM messages "
						   "WHERE queued"), 1);

	CHECK_INT("any node takes it: B", taken(b, clock_us()), 1);
	CHECK_INT("B loads it", store_msg_load(b, qid, &m), 0);
	CHECK_INT("its data's size", m.data_len, a.data_len);
	if (memcmp(m.data, a.data, a.data_len) != 0)
		fail_msg("the revived data differ from A's copy");
	CHECK_INT("no mark on it", m.inflight, 0);
	store_msg_free(&m);
	CHECK_INT("a second revive: nothing to revive", store_msg_revive(f->st, &a),
		  STORE_ENOTFOUND);
	CHECK_INT("B delivers it", sent(b, qid), 0);
	CHECK_INT("after it was delivered", store_msg_revive(f->st, &a), STORE_ENOTFOUND);
	store_msg_free(&a);
	store_close(b);
}

/* a verdict on another lease's mark is not A's to undo; nor one on a mark cleared and made again */
static void test_revive_not_its_mark(void **state)
{
	struct fx *f = *state;
	struct store *b = node_open(f, "node-b"), *c = node_open(f, "node-c");
	struct store_msg a;
	const char *qid = "REVIVE000002";

	marked_and_lost(f, b, qid, 2, &a);
	/* B, upstream.ambiguous = retry: clears A's mark and delivers again, marking */
	CHECK_INT("B clears A's mark", store_msg_set_inflight(b, qid, 0), 0);
	CHECK_INT("mark cleared, no verdict: nothing to revive", store_msg_revive(f->st, &a),
		  STORE_ENOTFOUND);
	CHECK_INT("B's own mark", store_msg_set_inflight(b, qid, 1), 0);
	CHECK_INT("B's mark on it: not A's to wait for", store_msg_revive(f->st, &a),
		  STORE_ENOTFOUND);
	sql(f, "UPDATE messages SET lease_until = 0%s", NULL);
	CHECK_INT("C takes it", taken(c, clock_us()), 1);
	verdict(c, qid);
	deferral(&a);
	CHECK_INT("refused: the verdict was on B's mark", store_msg_revive(f->st, &a),
		  STORE_ENOTFOUND);
	CHECK_INT("still finished", sql_int(f->url, "SELECT count(*) FROM messages WHERE queued"), 0);
	store_msg_free(&a);
	store_close(c);
	store_close(b);
}

/* since_sent - B delivered it, clearing A's mark without taking it for ambiguous */
static void since_sent(struct store *b, const char *qid)
{
	CHECK_INT("B sends it", sent(b, qid), 0);
}

/* since_dropped - the operator dropped it once A's lease had run out */
static void since_dropped(struct store *b, const char *qid)
{
	CHECK_INT("drop", store_msg_drop(b, qid), 0);
}

/* since_forgotten - B's verdict, then the operator forgot its key (its sender may send again) */
static void since_forgotten(struct store *b, const char *qid)
{
	struct store_forget fg;

	verdict(b, qid);
	CHECK_INT("forget", store_key_forget(b, KH, NULL, clock_us(), &fg), 0);
	store_forget_free(&fg);
}

/* delivered, dropped, its key forgotten since: the revive is refused, nothing changed */
static void test_revive_refused(void **state)
{
	static const struct {
		const char *qid, *what;
		int hash;
		void (*since) (struct store *b, const char *qid);
		const char *still;	/* what the revive left as it was, read after it */
		long long want;
	} rows[] = {
		{ "REVIVE000003", "delivered since", 3, since_sent,
		  "SELECT state FROM rcpts WHERE qid = 'REVIVE000003'", STORE_RCPT_SENT },
		{ "REVIVE000004", "dropped since", 4, since_dropped,
		  "SELECT count(*) FROM messages WHERE qid = 'REVIVE000004' AND queued", 0 },
		{ "REVIVE000005", "forgotten since", 5, since_forgotten,
		  "SELECT count(*) FROM messages WHERE qid = 'REVIVE000005' AND queued", 0 },
	};
	struct fx *f = *state;
	struct store *b = node_open(f, "node-b");
	struct store_msg a;
	char what[64];
	size_t i;

	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		marked_and_lost(f, b, rows[i].qid, rows[i].hash, &a);
		rows[i].since(b, rows[i].qid);
		deferral(&a);
		CHECK_INT(rows[i].what, store_msg_revive(f->st, &a), STORE_ENOTFOUND);
		snprintf(what, sizeof(what), "%s: as it was", rows[i].qid);
		CHECK_INT(what, sql_int(f->url, rows[i].still), rows[i].want);
		store_msg_free(&a);
	}
	CHECK_INT("none queued again", sql_int(f->url, "SELECT count(*) FROM messages WHERE queued"),
		  0);
	store_close(b);
}

/*
 * schema 8: no trigger keeps mark_token and verdict_on any more (it
 * did for nodes of schema 3 and older); a mark and a verdict on another
 * lease's mark write them themselves, and an outcome on the node's own
 * mark leaves no verdict
 */
static void test_mark_columns(void **state)
{
	struct fx *f = *state;
	struct store *b = node_open(f, "node-b");
	struct store_msg a;
	const char *qid = "MARKCOLS0001";

	CHECK_INT("no trigger of ours on messages", sql_int(f->url, "SELECT count(*) FROM pg_trigger "
							    "WHERE tgrelid = 'messages'::regclass "
							    "AND NOT tgisinternal"), 0);
	marked_and_lost(f, b, qid, 1, &a);
	CHECK_INT("A's mark names A's lease", sql_int(f->url, "SELECT mark_token FROM messages "
						     "WHERE qid = 'MARKCOLS0001'"), a.lease);
	verdict(b, qid);
	CHECK_INT("B's verdict was on A's mark", sql_int(f->url, "SELECT verdict_on FROM messages "
							 "WHERE qid = 'MARKCOLS0001'"), a.lease);
	spool_one(f->st, "MARKCOLS0002", 2);
	CHECK_INT("a mark", store_msg_set_inflight(f->st, "MARKCOLS0002", 1), 0);
	CHECK_INT("its own outcome", sent(f->st, "MARKCOLS0002"), 0);
	CHECK_INT("no verdict on its own mark", sql_int(f->url, "SELECT count(*) FROM messages "
							"WHERE qid = 'MARKCOLS0002' AND "
							"verdict_on IS NULL AND mark_token = "
							"lease_token AND NOT inflight"), 1);
	store_msg_free(&a);
	store_close(b);
}

/* held_update - st's write of m's outcome */
static int held_update(struct held *h)
{
	return store_msg_update(h->st, h->m);
}

/* held_revive - st's revive of m */
static int held_revive(struct held *h)
{
	return store_msg_revive(h->st, h->m);
}

/*
 * A revive whose lock on the message waits for B's verdict to commit
 * (its COMMIT held here at a gate) reads the recipients as that verdict
 * left them, unconfirmed, and gives them A's state back. Read in the
 * statement that waited, with the row, they were as before the verdict
 * (A's state): nothing was given back, and the message was queued with
 * its recipient unconfirmed, never to be delivered.
 */
static void test_revive_racing_verdict(void **state)
{
	struct fx *f = *state;
	struct store *b = node_open(f, "node-b");
	struct store_msg a, m;
	struct store_story s;
	struct held vd, rv;
	PGconn *g;
	const char *qid = "REVIVE000009";

	hook_fx = f;
	marked_and_lost(f, b, qid, 9, &a);
	deferral(&a);
	CHECK_INT("A's held deferral refused: B holds the lease", store_msg_update(f->st, &a),
		  STORE_ELEASE);
	CHECK_INT("the verdict's load", store_msg_load(b, qid, &m), 0);
	m.rcpts[0].state = STORE_RCPT_UNCONFIRMED;	/* as verdict() */
	free(m.rcpts[0].reply);
	m.rcpts[0].reply = xstrdup("delivery was interrupted after the final dot may have been sent");
	m.inflight = 0;
	g = gate_shut(f);
	held_start(&vd, held_update, b, &m, "SELECT count(*) FROM pg_stat_activity WHERE "
		   "datname = current_database() AND wait_event = 'advisory'");
	held_start(&rv, held_revive, f->st, &a, ROW_WAIT("SELECT CASE WHEN m.queued AND m.inflight"));
	gate_open(g);
	pthread_join(vd.th, NULL);
	pthread_join(rv.th, NULL);
	CHECK_INT("the verdict", vd.rc, 0);
	CHECK_INT("A revives it", rv.rc, 0);
	CHECK_INT("story", store_story_get(f->st, qid, &s), 0);
	CHECK_INT("queued again", s.queued, 1);
	CHECK_INT("recipient pending again", s.m.rcpts[0].state, STORE_RCPT_QUEUED);
	CHECK_STR("A's reply", s.m.rcpts[0].reply, "could not record the inflight mark");
	store_story_free(&s);
	store_msg_free(&m);
	store_msg_free(&a);
	store_close(b);
}

/*
 * A revive whose message's row another transaction holds (in life a
 * COMMIT waiting for the standby, here a test's lock) gives up its
 * wait at its lock_timeout, server side: STORE_EAGAIN, to ask again,
 * and nothing left waiting; it waited until the result limit, then
 * closed the connection, whose backend went on waiting for the row.
 */
static void test_revive_lock_waits_bounded(void **state)
{
	struct fx *f = *state;
	struct store *b = node_open(f, "node-b");
	struct store_msg a;
	PGconn *o = PQconnectdb(f->url);
	PGresult *r;
	long long waiting;
	const char *qid = "REVIVE000010";

	marked_and_lost(f, b, qid, 10, &a);
	verdict(b, qid);
	deferral(&a);
	r = PQexec(o, "BEGIN; SELECT 1 FROM messages WHERE qid = 'REVIVE000010' FOR UPDATE");
	CHECK_INT("the row held", PQresultStatus(r), PGRES_TUPLES_OK);
	PQclear(r);
	CHECK_INT("the revive, the row held", store_msg_revive(f->st, &a), STORE_EAGAIN);
	waiting = sql_int(f->url, "SELECT count(*) FROM pg_stat_activity WHERE datname = "
			  "current_database() AND wait_event = 'transactionid'");
	r = PQexec(o, "ROLLBACK");
	PQclear(r);
	PQfinish(o);
	CHECK_INT("no backend left waiting for the row", waiting, 0);
	CHECK_INT("asked again, once the row is free", store_msg_revive(f->st, &a), 0);
	store_msg_free(&a);
	store_close(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_revive),
		T(test_revive_not_its_mark),
		T(test_revive_refused),
		T(test_mark_columns),
		T(test_revive_racing_verdict),
		T(test_revive_lock_waits_bounded),
	};

	return PG_RUN("store_pg_revive", tests);
}
