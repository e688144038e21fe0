/*
 * test_store_pg_schema - the PostgreSQL schema (store/pg/): its version (a
 * newer one refused, a client finding none); the generic plans of a
 * node's statements find their rows by an index at scale, on an idle
 * queue and on young tables; a version 1 schema upgraded; one of version
 * 10 whose reads go on while migration 11 builds its index, with no
 * deadlock beside a node of version 10, and its drop of the old index
 * bounded; a migration past a statement's limit, and a start waiting for
 * it that fails within the limit when the server hangs. Skipped without
 * IDEMRELAY_PG_URL. store_pg_schema.c is included for its migrations'
 * texts, which build the old schemas.
 */
#include <dirent.h>
#include <signal.h>

#include "test_store_pg_fx.h"
#include "../../store/pg/store_pg_schema.c"

static void test_schema_version(void **state)
{
	struct fx *f = *state;
	struct store *st = NULL;
	char err[512] = "", *url, empty[96], want[96], back[64];

	store_close(f->st);
	f->st = NULL;
	sql(f, "UPDATE idemrelay_schema SET version = 99", NULL);
	CHECK_INT("newer schema", store_pg_open(&st, f->url, TEST_NODE, TEST_LEASE, err,
						sizeof(err)), STORE_EINVAL);
	snprintf(want, sizeof(want), "schema version 99 is newer than this idemrelay (%d); "
		 "upgrade idemrelay", PG_SCHEMA_VERSION);
	if (strstr(err, want) == NULL)
		fail_msg("newer schema: got \"%s\"", err);
	snprintf(back, sizeof(back), "%d", PG_SCHEMA_VERSION);
	sql(f, "UPDATE idemrelay_schema SET version = %s", back);
	fx_open(f, TEST_MAP);

	/* a client (idemrelayctl) creates nothing */
	snprintf(empty, sizeof(empty), "%s_empty", f->schema);
	sql(f, "CREATE SCHEMA %s", empty);
	url = fx_pg_url(fx_pg(), empty);
	CHECK_INT("client, no schema", store_pg_open(&st, url, NULL, 0, err, sizeof(err)),
		  STORE_ENOTFOUND);
	sql(f, "DROP SCHEMA %s", empty);
	free(url);
	CHECK_INT("client", store_pg_open(&st, f->url, NULL, 0, err, sizeof(err)), 0);
	CHECK_INT("client has no slot", store_node_id(st), -1);
	CHECK_INT("client takes nothing", taken(st, clock_us()), 0);
	store_close(st);
}

/* listed_in - whether text holds one of the NULL-ended list's strings */
static int listed_in(const char *text, const char *const *list)
{
	for (; *list; list++)
		if (strstr(text, *list))
			return 1;
	return 0;
}

/*
 * plans_on - every statement prepared on c, EXPLAINed with its generic
 * plan (the sessions force them; NULL for every parameter): a sequential
 * scan of a table that grows with the traffic fails, but where the
 * statement says why it may (the expiry is planned at each call; the leases of a
 * previous life are given up once, at the start; a flush of every
 * message reads what is queued). Every such scan is named before the
 * test fails. How many statements.
 */
static int plans_on(PGconn *c, int young)
{
	static const char *const big[] = { " on messages", " on rcpts", " on claims", " on voids" };
	/* the partial indexes of every queued message; only what reads the queue as a whole */
	static const char *const queue_wide[] = { " messages_take", NULL };
	static const char *const whole_queue[] = { "FOR UPDATE SKIP LOCKED", "lease_token = ANY(",
		NULL };
	static const char *const allowed[] = { "NOT queued AND expires <=",
		"WHERE lease_owner = $1", "WHERE queued AND next_attempt > $1",
		"FROM voids WHERE pg_xact_status", NULL };
	/* on young tables only: the take and the renewal, once a second, not per message */
	static const char *const allowed_young[] = {
		"ORDER BY next_attempt LIMIT $4 FOR UPDATE SKIP LOCKED", "lease_token = ANY(", NULL };
	PGresult *r = PQexec(c, "SELECT name, statement, cardinality(parameter_types) "
			     "FROM pg_prepared_statements");
	int i, j, k, n = 0, bad = 0;
	size_t b;
	struct buf q = BUF_INIT;

	assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
	for (i = 0; i < PQntuples(r); i++) {
		const char *text = PQgetvalue(r, i, 1);
		PGresult *e;

		if (listed_in(text, allowed) || (young && listed_in(text, allowed_young))
		    || atoi(PQgetvalue(r, i, 2)) == 0)	/* BEGIN, COMMIT, the id: no table */
			continue;
		buf_reset(&q);
		buf_printf(&q, "EXPLAIN EXECUTE %s(", PQgetvalue(r, i, 0));
		for (k = 0; k < atoi(PQgetvalue(r, i, 2)); k++)
			buf_printf(&q, "%sNULL", k ? ", " : "");
		buf_printf(&q, ")");
		e = PQexec(c, q.data);
		if (PQresultStatus(e) != PGRES_TUPLES_OK)
			fail_msg("%s: %s", text, PQerrorMessage(c));
		for (j = 0; j < PQntuples(e); j++) {
			const char *line = PQgetvalue(e, j, 0);

			for (b = 0; b < sizeof(big) / sizeof(big[0]); b++)
				if (strstr(line, big[b]) && strstr(line, "Seq Scan")) {
					print_error("in the generic plan of %s: %s\n", text, line);
					bad++;
				}
			if (listed_in(line, queue_wide) && !listed_in(text, whole_queue)) {
				print_error("in the generic plan of %s: %s (every queued message)\n",
					    text, line);
				bad++;
			}
		}
		PQclear(e);
		n++;
	}
	PQclear(r);
	buf_free(&q);
	if (bad)
		fail_msg("%d scans of a table that grows or of its queue, in generic plans (above)",
			 bad);
	return n;
}

/*
 * plans_fill - 20,000 messages with their recipients and claims; queued
 * is which are queued ("g % 2 = 0": half, "false": none, stories all).
 * Each row is the seed's, as JSON with its keys replaced; the record is
 * built in a LATERAL call once a row ("(f(...)).*" calls f once for each
 * column: 70 s for the messages on a slow machine, past the seed's lease).
 */
static void plans_fill(struct fx *f, const char *queued)
{
	sql(f, "INSERT INTO messages SELECT x.* FROM messages m, generate_series(1, 20000) g, "
	    "LATERAL jsonb_populate_record(NULL::messages, to_jsonb(m) || jsonb_build_object("
	    "'qid', 'PLANS' || lpad(g::text, 7, '0'), 'queued', %s, 'lease_owner', NULL, "
	    "'lease_token', 1000000 + g, 'next_attempt', 4102444800000000, 'expires', "
	    "CASE WHEN g %% 2 = 0 THEN 0 ELSE 4102444800000000 END)) x "
	    "WHERE m.qid = 'PLANSEED0001'", queued);
	sql(f, "INSERT INTO rcpts SELECT x.* FROM rcpts r, generate_series(1, 20000) g, "
	    "LATERAL jsonb_populate_record(NULL::rcpts, to_jsonb(r) || jsonb_build_object("
	    "'qid', 'PLANS' || lpad(g::text, 7, '0'))) x WHERE r.qid = 'PLANSEED0001'", NULL);
	sql(f, "INSERT INTO claims SELECT x.* FROM claims c, generate_series(1, 20000) g, "
	    "LATERAL jsonb_populate_record(NULL::claims, to_jsonb(c) || jsonb_build_object("
	    "'hash', '\\x' || md5(g::text), 'keyhash', '\\x' || md5('k' || g), "
	    "'qid', 'PLANS' || lpad(g::text, 7, '0'))) x WHERE c.qid = 'PLANSEED0001'", NULL);
}

/*
 * plans_work - a node's work, each statement prepared on a connection of
 * the pool as it goes: accept, mark, defer, take, renew, deliver, a
 * duplicate, a flush, stats (b flushes); and the operator's: a key's
 * queued messages, a lease let go, a drop
 */
static void plans_work(struct fx *f, struct store *b)
{
	struct store_msg m;
	uint64_t stories, keys;
	char (*qids)[STORE_QID_SIZE] = NULL;
	size_t n = 0;
	int held;

	spool_one(f->st, "PLANS0A00001", 2);
	CHECK_INT("duplicate", claim_found(f->st, 2, NOW, NULL), 1);
	CHECK_INT("mark", store_msg_set_inflight(f->st, "PLANS0A00001", 1), 0);
	CHECK_INT("load", store_msg_load(f->st, "PLANS0A00001", &m), 0);
	m.inflight = 0;
	m.attempts = 1;
	m.next_attempt = clock_us() + 3600 * SEC;
	CHECK_INT("defer", store_msg_update(f->st, &m), 0);
	CHECK_INT("flush one", store_msg_change(b, "PLANS0A00001", &due_now), 0);
	CHECK_INT("take", taken(f->st, clock_us()), 1);
	CHECK_INT("renew", store_lease_renew(f->st), 0);
	CHECK_INT("list", listed(f->st) > 0, 1);
	m.rcpts[0].state = STORE_RCPT_SENT;
	CHECK_INT("sent", store_msg_update(f->st, &m), 0);
	store_msg_free(&m);
	CHECK_INT("stats", stories_of(f->st, &stories, &keys), 0);
	spool_one(f->st, "PLANS0A00002", 3);
	CHECK_INT("key's queued", store_key_queued(f->st, KH, NULL, &qids, &n), 0);
	CHECK_INT("queued under the key", n >= 1, 1);
	free(qids);
	held = listed(f->st);
	store_lease_release(f->st, "PLANS0A00002", 0);
	CHECK_INT("released", listed(f->st), held - 1);
	CHECK_INT("drop", store_msg_drop(f->st, "PLANS0A00002"), 0);
}

/* plans_check - the generic plans on every idle connection of both nodes (plans_on) */
static void plans_check(struct fx *f, struct store *b, int young)
{
	int n = 0, k;
	size_t i;

	for (k = 0; k < 2; k++) {
		struct pg_store *s = (struct pg_store *) (k ? b : f->st);

		pthread_mutex_lock(&s->mu);
		for (i = 0; i < s->n_idle; i++) {
			/* the fixture's URL sets options (search_path): ours stay */
			PGresult *r = PQexec(s->idle[i], "SELECT current_setting('plan_cache_mode') "
					     "|| ' ' || current_setting('client_connection_check_interval')");

			assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
			assert_string_equal(PQgetvalue(r, 0, 0), "force_generic_plan 1s");
			PQclear(r);
			n += plans_on(s->idle[i], young);
		}
		pthread_mutex_unlock(&s->mu);
	}
	if (n < 8)
		fail_msg("only %d statements prepared: the node's work did not run", n);
}

/* plans_analyzed - plans_work's plans on 20,000 stories, queued as plans_fill() says, analyzed */
static void plans_analyzed(struct fx *f, const char *queued)
{
	struct store *b = node_open(f, "node-b");

	spool_one(f->st, "PLANSEED0001", 1);
	plans_fill(f, queued);
	sql(f, "ANALYZE messages; ANALYZE rcpts; ANALYZE claims", NULL);
	CHECK_INT("the seed's lease outlives a slow fill", store_lease_renew(f->st), 0);
	plans_work(f, b);
	plans_check(f, b, 0);
	store_close(b);
}

/*
 * On a store of 20,000 stories and queued messages, the statements of a
 * node's work find their rows by an index in their generic plans. The
 * take's (every second on every node) joined its LIMITed subquery with a
 * sequential scan of every message. (The outcome's hashed every queued
 * message, counting each one's recipients, 5 ms a call at 2,000 queued,
 * under the statistics of a bench run; these rows do not lead the planner
 * there: store_pg_txn.c says why it cannot go so now.)
 */
static void test_plans_scale(void **state)
{
	plans_analyzed(*state, "g % 2 = 0");
}

/*
 * The same plans made after an ANALYZE that found the queue nearly empty
 * (20,000 stories, one message queued), as autovacuum may between two
 * bursts: the planner then takes a partial index WHERE queued for one row,
 * and a statement that writes one queued row must not read it from there.
 * The outcome's plan walked every queued message for each row it wrote
 * (1.7 ms a call at 1,200 queued: delivery a quarter as fast); so could
 * the mark, the load, the drop, the release, a flush of one (plans_work
 * runs each).
 */
static void test_plans_idle_queue(void **state)
{
	plans_analyzed(*state, "false");
}

/*
 * The same plans made on a new database's tables, empty and never
 * analyzed, then kept while the tables grow (a connection keeps its
 * generic plans until an ANALYZE, which autovacuum runs a minute or more
 * later): they still find their rows by an index. The inflight mark and
 * the recipients' outcomes hashed a scan of the whole table (p50 2.2 ms
 * against 1.1, one session on a database of a minute). (A claim's lookup
 * joined a scan of every message in a bench run's plans; not in these.)
 * The take and the lease renewal,
 * once a second and not per message, may scan until that ANALYZE; they
 * are held to an index at scale (test_plans_scale).
 */
static void test_plans_young(void **state)
{
	struct fx *f = *state;
	struct store *b = node_open(f, "node-b");

	spool_one(f->st, "PLANSEED0001", 1);
	plans_work(f, b);
	plans_fill(f, "g % 2 = 0");
	plans_check(f, b, 1);
	store_close(b);
}

/*
 * a schema at version 1, made by that version's own text, with a message
 * marked: a node's start upgrades it; the old mark names no lease, so a
 * verdict on it is nobody's to undo; a mark made after names its lease
 */
static void test_schema_upgrade(void **state)
{
	struct fx *f = *state;
	struct store *st = NULL;
	struct store_msg m;
	struct buf q = BUF_INIT;
	char err[512] = "", old[96], *url;

	snprintf(old, sizeof(old), "%s_v1", f->schema);
	sql(f, "CREATE SCHEMA %s", old);
	buf_printf(&q, "SET search_path = \"%s\"; %s; UPDATE idemrelay_schema SET version = 1; "
		 "INSERT INTO messages (qid, node, accepted, sender, ret, body, smtputf8, client, "
		 "data, data_len, has_key, ttl, attempts, next_attempt, inflight, queued) VALUES "
		 "('UPGRADE00001', 'old', 0, 's@example.com', 0, 0, false, 'c', '\\x61', 1, false, "
		 "0, 0, 0, true, true); INSERT INTO rcpts VALUES ('UPGRADE00001', 0, "
		 "'r@example.net', 0, NULL, 0, NULL)", old, migrations[0]);
	fx_pg_sql(q.data);
	url = fx_pg_url(fx_pg(), old);
	CHECK_INT("version 1", sql_int(url, "SELECT max(version) FROM idemrelay_schema"), 1);
	CHECK_INT("open upgrades", store_pg_open(&st, url, "node-up", TEST_LEASE, err,
						 sizeof(err)), 0);
	CHECK_INT("version now", sql_int(url, "SELECT max(version) FROM idemrelay_schema"),
		  PG_SCHEMA_VERSION);

	CHECK_INT("the old message taken", taken(st, clock_us()), 1);
	CHECK_INT("loaded", store_msg_load(st, "UPGRADE00001", &m), 0);
	CHECK_INT("its old mark", m.inflight, 1);
	m.rcpts[0].state = STORE_RCPT_UNCONFIRMED;
	m.inflight = 0;
	CHECK_INT("a verdict on it", store_msg_update(st, &m), 0);
	CHECK_INT("the old mark named nobody", sql_int(url, "SELECT verdict_on FROM messages "
						      "WHERE qid = 'UPGRADE00001'"), -1);
	m.rcpts[0].state = STORE_RCPT_QUEUED;
	CHECK_INT("nothing to revive", store_msg_revive(st, &m), STORE_ENOTFOUND);
	store_msg_free(&m);

	msg_new(&m, "UPGRADE00002", 1, 10);
	CHECK_INT("spool after the upgrade", spool(st, &m, NULL, 0, 0), 0);
	CHECK_INT("a new mark", store_msg_set_inflight(st, "UPGRADE00002", 1), 0);
	CHECK_INT("names its lease", sql_int(url, "SELECT mark_token = lease_token FROM messages "
					     "WHERE qid = 'UPGRADE00002'"), 1);
	store_msg_free(&m);
	store_close(st);
	free(url);
	buf_reset(&q);
	buf_printf(&q, "SET client_min_messages = warning; DROP SCHEMA \"%s\" CASCADE", old);
	fx_pg_sql(q.data);
	buf_free(&q);
}

struct migrator {
	const char *url;
	struct store *st;
	char err[512];
	int rc;
	sem_t done;
};

/* migrator_run - a node's start on an older schema: it migrates it */
static void *migrator_run(void *arg)
{
	struct migrator *g = arg;

	g->rc = store_pg_open(&g->st, g->url, "node-mig", TEST_LEASE, g->err, sizeof(g->err));
	sem_post(&g->done);
	return NULL;
}

/*
 * messages_locked - whether a lock on the messages of schema s, one that
 * cond says (of pg_locks), is seen within 30 s
 */
static int messages_locked(const char *s, const char *cond)
{
	char q[256];
	int i;

	snprintf(q, sizeof(q), "SELECT count(*) FROM pg_locks WHERE %s AND relation = "
		 "'\"%s\".messages'::regclass", cond, s);
	for (i = 0; i < 3000; i++) {
		if (sql_int(fx_pg(), q) > 0)
			return 1;
		usleep(10000);
	}
	return 0;
}

/* schema_10 - a schema "<fixture's>_v10" at version 10 with one queued message; its URL */
static const char *schema_10(struct fx *f, char *old, size_t len)
{
	struct buf q = BUF_INIT;
	const char *url;
	int v;

	snprintf(old, len, "%s_v10", f->schema);
	sql(f, "CREATE SCHEMA %s", old);
	buf_printf(&q, "SET search_path = \"%s\"; ", old);
	for (v = 0; v < 10; v++)
		buf_printf(&q, "%s; ", migrations[v]);
	buf_printf(&q, "UPDATE idemrelay_schema SET version = 10; "
		 "INSERT INTO messages (qid, node, accepted, sender, ret, body, smtputf8, client, "
		 "data, data_len, has_key, ttl, attempts, next_attempt, inflight, queued) VALUES "
		 "('MIGRATE00001', 'old', 0, 's@example.com', 0, 0, false, 'c', '\\x61', 1, false, "
		 "0, 0, 0, false, true)");
	fx_pg_sql(q.data);
	buf_free(&q);
	url = fx_pg_url(fx_pg(), old);
	CHECK_INT("version 10", sql_int(url, "SELECT max(version) FROM idemrelay_schema"), 10);
	return url;
}

/*
 * migrated_11 - g's start ended (within 30 s) at version 11, with only
 * messages_take left; the message taken; g freed, schema old dropped
 */
static void migrated_11(struct migrator *g, pthread_t th, const char *old)
{
	struct timespec ts;
	char q[128];

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 30;
	if (sem_timedwait(&g->done, &ts) != 0) {
		pthread_detach(th);
		fail_msg("the migration hangs (30 s)");
	}
	pthread_join(th, NULL);
	if (g->rc != 0)
		fail_msg("open migrates: got %d (%s), want 0", g->rc, g->err);
	CHECK_INT("version now", sql_int(g->url, "SELECT max(version) FROM idemrelay_schema"), 11);
	CHECK_INT("messages_due dropped", sql_int(g->url, "SELECT count(*) FROM pg_indexes WHERE "
		  "schemaname = current_schema() AND indexname = 'messages_due'"), 0);
	CHECK_INT("messages_take by route, then next_attempt, queued rows", sql_int(g->url,
		  "SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() AND "
		  "indexname = 'messages_take' AND indexdef LIKE '%(COALESCE(route, ''''::text), "
		  "next_attempt) WHERE queued'"), 1);
	CHECK_INT("the message taken", taken(g->st, clock_us()), 1);
	store_close(g->st);
	free((char *) g->url);
	sem_destroy(&g->done);
	free(g);
	snprintf(q, sizeof(q), "SET client_min_messages = warning; DROP SCHEMA \"%s\" CASCADE", old);
	fx_pg_sql(q);
}

/*
 * Migration 10 -> 11 builds messages_take while nodes of version 10 may
 * still run: reads of messages go on while the index is built (a
 * migration that dropped the old index first held ACCESS EXCLUSIVE on
 * the table for the whole build, and every read queued behind it). A
 * write not committed (session W) holds the migration back; a read by
 * QID (session R, lock_timeout 500 ms) must not queue behind it; once W
 * commits the migration ends, and messages_due is dropped after it.
 */
static void test_schema_11_reads_go_on(void **state)
{
	struct fx *f = *state;
	struct migrator *g = calloc(1, sizeof(*g));
	char old[96], rerr[256] = "";
	PGconn *w, *rd;
	PGresult *r;
	pthread_t th;
	int waited, read_ok;

	assert_non_null(g);
	g->url = schema_10(f, old, sizeof(old));
	w = PQconnectdb(g->url);		/* a node of version 10 writing */
	r = PQexec(w, "BEGIN; UPDATE messages SET attempts = 1 WHERE qid = 'MIGRATE00001'");
	CHECK_INT("W's write", PQresultStatus(r), PGRES_COMMAND_OK);
	PQclear(r);
	sem_init(&g->done, 0, 0);
	assert_int_equal(pthread_create(&th, NULL, migrator_run, g), 0);
	waited = messages_locked(old, "NOT granted");	/* a lock waited for */

	rd = PQconnectdb(g->url);		/* a node of version 10 reading */
	r = PQexec(rd, "SET lock_timeout = '500ms'; "
		   "SELECT attempts FROM messages WHERE qid = 'MIGRATE00001'");
	read_ok = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
	snprintf(rerr, sizeof(rerr), "%s", PQerrorMessage(rd));
	PQclear(r);
	PQfinish(rd);

	r = PQexec(w, "COMMIT");
	PQclear(r);
	PQfinish(w);
	CHECK_INT("the migration waited for W", waited, 1);
	if (!read_ok)
		fail_msg("a read of messages during the migration: %s", rerr);
	CHECK_INT("W's write kept", sql_int(g->url, "SELECT attempts FROM messages"), 1);
	migrated_11(g, th, old);
}

/*
 * test_schema_11_no_deadlock - migration 10 -> 11 beside a transaction
 * of a node of version 10 that read messages (session R: ACCESS SHARE)
 * and then writes it: the write waits for the build's SHARE, and the
 * migration asks no other lock on the table, so it commits, then the
 * write goes on (or the build is over, and the write goes on at once:
 * only the concurrent drop of messages_due waits for R). The migration
 * dropped messages_due in its transaction: ACCESS EXCLUSIVE asked while
 * holding SHARE, R's write waiting for that SHARE: "deadlock detected",
 * the node's start failed (at every start under traffic).
 */
static void test_schema_11_no_deadlock(void **state)
{
	struct fx *f = *state;
	struct migrator *g = calloc(1, sizeof(*g));
	char old[96], rerr[256] = "", cond[32];
	PGconn *rd;
	PGresult *r;
	pthread_t th;
	int locked, write_ok;

	assert_non_null(g);
	CHECK_INT("a fresh schema: messages_take only", sql_int(f->url, "SELECT count(*) FROM "
		  "pg_indexes WHERE schemaname = current_schema() AND indexname IN "
		  "('messages_due', 'messages_take')"), 1);
	g->url = schema_10(f, old, sizeof(old));
	rd = PQconnectdb(g->url);		/* a node of version 10: a read, then a write */
	r = PQexec(rd, "BEGIN; SELECT qid FROM messages LIMIT 1");
	CHECK_INT("R's read", PQresultStatus(r), PGRES_TUPLES_OK);
	PQclear(r);
	sem_init(&g->done, 0, 0);
	assert_int_equal(pthread_create(&th, NULL, migrator_run, g), 0);
	snprintf(cond, sizeof(cond), "pid <> %d", PQbackendPID(rd));	/* the migration's */
	locked = messages_locked(old, cond);
	r = PQexec(rd, "UPDATE messages SET attempts = 2 WHERE qid = 'MIGRATE00001'");
	write_ok = PQresultStatus(r) == PGRES_COMMAND_OK;
	snprintf(rerr, sizeof(rerr), "%s", PQerrorMessage(rd));
	PQclear(r);
	r = PQexec(rd, write_ok ? "COMMIT" : "ROLLBACK");
	PQclear(r);
	PQfinish(rd);
	CHECK_INT("the migration locked messages", locked, 1);
	if (!write_ok)
		fail_msg("R's write after its read, during the migration: %s", rerr);
	CHECK_INT("R's write kept", sql_int(g->url, "SELECT attempts FROM messages"), 2);
	migrated_11(g, th, old);
}

/* a session of a node of version 10 whose transaction read messages and stays open */
struct holder {
	PGconn *c;
	sem_t done;			/* the test is done with it */
	atomic_int ended;		/* its transaction is ending: 30 s went by */
};

/* holder_run - end h's transaction once the test is done with it, or after 30 s */
static void *holder_run(void *arg)
{
	struct holder *h = arg;
	struct timespec ts;
	PGresult *r;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 30;
	while (sem_timedwait(&h->done, &ts) != 0 && errno == EINTR)
		;
	atomic_store(&h->ended, 1);
	r = PQexec(h->c, "COMMIT");
	PQclear(r);
	PQfinish(h->c);
	return NULL;
}

/* due_count - the indexes named messages_due in url's schema */
static long long due_count(const char *url)
{
	return sql_int(url, "SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() "
		       "AND indexname = 'messages_due'");
}

/*
 * test_schema_11_drop_bounded - a transaction that read messages and
 * does not end (a node of version 10 whose commit waits for a
 * synchronous standby that is away) holds DROP INDEX CONCURRENTLY
 * messages_due back: the start gives the drop up within its bound, says
 * so, and starts at version 11, messages_due kept; the next start, that
 * transaction over, drops it, left invalid by the drop given up. The
 * drop waited for that transaction with no bound of its own, the schema
 * lock held, every other start behind it, until PG_RESULT_US cut the
 * connection: "cannot register", the start failed (at every start while
 * that transaction lasts).
 */
static void test_schema_11_drop_bounded(void **state)
{
	struct fx *f = *state;
	struct holder h = { 0 };
	struct store *st = NULL;
	char old[96], err[512] = "", text[4096], q[160];
	const char *url;
	PGresult *r;
	pthread_t th;
	FILE *tmp;
	int rc, fd, ended;

	url = schema_10(f, old, sizeof(old));
	h.c = PQconnectdb(url);
	r = PQexec(h.c, "BEGIN; SELECT qid FROM messages LIMIT 1");
	CHECK_INT("the holder's read", PQresultStatus(r), PGRES_TUPLES_OK);
	PQclear(r);
	sem_init(&h.done, 0, 0);
	assert_int_equal(pthread_create(&th, NULL, holder_run, &h), 0);
	fd = log_capture(&tmp);
	rc = store_pg_open(&st, url, "node-mig", TEST_LEASE, err, sizeof(err));
	ended = atomic_load(&h.ended);
	log_captured(fd, tmp, text, sizeof(text));
	sem_post(&h.done);
	pthread_join(th, NULL);
	sem_destroy(&h.done);
	if (rc != 0)
		fail_msg("open beside the holder: got %d (%s), want 0", rc, err);
	CHECK_INT("the start ended with the holder's transaction open", ended, 0);
	if (strstr(text, "messages_due) stays, dropped at a later start") == NULL)
		fail_msg("no warning of messages_due kept: %s", text);
	CHECK_INT("version now", sql_int(url, "SELECT max(version) FROM idemrelay_schema"), 11);
	CHECK_INT("messages_due kept", due_count(url), 1);
	CHECK_INT("messages_due left invalid", sql_int(url, "SELECT indisvalid FROM pg_index "
		  "WHERE indexrelid = 'messages_due'::regclass"), 0);
	CHECK_INT("the message taken", taken(st, clock_us()), 1);
	store_close(st);
	st = NULL;
	if ((rc = store_pg_open(&st, url, "node-mig", TEST_LEASE, err, sizeof(err))) != 0)
		fail_msg("the next open: got %d (%s), want 0", rc, err);
	CHECK_INT("messages_due dropped by the next start", due_count(url), 0);
	store_close(st);
	free((char *) url);
	snprintf(q, sizeof(q), "SET client_min_messages = warning; DROP SCHEMA \"%s\" CASCADE", old);
	fx_pg_sql(q);
}

/*
 * test_schema_migration_past_limit - a migration that takes longer than a
 * statement's limit (here 1 s; its build waits 2 s for the write of a node
 * of version 10, as on a large table the build itself takes longer than
 * 10 s) ends, and the node starts at version 11; a node starting meanwhile
 * waits for the schema lock as long, and starts too. The limit cut the
 * anchor in the middle of the migration, which rolled back, and the start
 * failed, again at every start: a large store could not be upgraded.
 */
static void test_schema_migration_past_limit(void **state)
{
	struct fx *f = *state;
	struct migrator *g = calloc(1, sizeof(*g));
	struct store *st = NULL;
	char old[96], err[512] = "";
	pthread_t th;
	PGconn *w;
	PGresult *r;
	int rc, waited;

	assert_non_null(g);
	g->url = schema_10(f, old, sizeof(old));
	w = PQconnectdb(g->url);	/* a node of version 10 writing, for 2 s */
	r = PQexec(w, "BEGIN; UPDATE messages SET attempts = 1 WHERE qid = 'MIGRATE00001'");
	CHECK_INT("W's write", PQresultStatus(r), PGRES_COMMAND_OK);
	PQclear(r);
	CHECK_INT("W's commit 2 s later", PQsendQuery(w, "SELECT pg_sleep(2); COMMIT"), 1);
	result_us = 1000000;
	sem_init(&g->done, 0, 0);
	assert_int_equal(pthread_create(&th, NULL, migrator_run, g), 0);
	waited = messages_locked(old, "NOT granted");	/* the migration waits for W */
	rc = store_pg_open(&st, g->url, "node-slow", TEST_LEASE, err, sizeof(err));
	result_us = PG_RESULT_US;
	while ((r = PQgetResult(w)) != NULL)
		PQclear(r);
	PQfinish(w);
	CHECK_INT("the migration waited for W", waited, 1);
	if (rc != 0)
		fail_msg("a start behind a migration of 2 s, past a limit of 1 s: got %d (%s), "
			 "want 0", rc, err);
	store_close(st);
	CHECK_INT("W's write kept", sql_int(g->url, "SELECT attempts FROM messages"), 1);
	migrated_11(g, th, old);	/* the migrating start's: past the limit too */
}

/* parent_of - pid's parent, from /proc; 0 if it is not on this machine */
static int parent_of(int pid)
{
	char path[64], line[512], *p;
	FILE *fp;
	int ppid = 0;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if ((fp = fopen(path, "r")) == NULL)
		return 0;
	if (fgets(line, sizeof(line), fp) != NULL && (p = strrchr(line, ')')) != NULL)
		(void) sscanf(p + 2, "%*c %d", &ppid);
	fclose(fp);
	return ppid;
}

/*
 * freeze - sig (SIGSTOP, SIGCONT) to the server of backend, its postmaster
 * first, then every backend and helper of it (as tests/pg/cluster.py's
 * freeze); 0, or -1 if the server is not on this machine (the process of
 * that pid is no postgres) or not ours
 */
static int freeze(int backend, int sig)
{
	int post = parent_of(backend), pid;
	char path[64], name[32] = "";
	struct dirent *e;
	FILE *fp;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/comm", post);
	if ((fp = fopen(path, "r")) != NULL) {
		if (fgets(name, sizeof(name), fp) == NULL)
			name[0] = 0;
		fclose(fp);
	}
	if (post <= 1 || strncmp(name, "postgres", 8) != 0 || kill(post, sig) != 0
	    || (d = opendir("/proc")) == NULL)
		return -1;
	while ((e = readdir(d)) != NULL)
		if ((pid = atoi(e->d_name)) > 0 && parent_of(pid) == post)
			(void) kill(pid, sig);
	closedir(d);
	return 0;
}

/*
 * test_schema_lock_frozen - a start that waits for the schema lock (held
 * by another session, as by a node migrating) while the server hangs (its
 * processes stopped; the kernel still answers TCP keepalives) fails
 * within the limit (here 1 s) with a reason, and said that it waited.
 * It waited in pg_advisory_lock with no limit (d668bd1), nothing logged,
 * until the server came back.
 */
static void test_schema_lock_frozen(void **state)
{
	struct fx *f = *state;
	struct migrator g = { .url = f->url };
	PGconn *h = PQconnectdb(f->url);
	PGresult *r = PQexec(h, "SELECT pg_advisory_lock(" PG_SCHEMA_LOCK "); SELECT 1");
	char text[8192], q[192];
	struct timespec ts;
	pthread_t th;
	int64_t t0, took;
	int fd, seen, frozen, ended;
	FILE *tmp;

	CHECK_INT("the holder's lock", PQresultStatus(r), PGRES_TUPLES_OK);
	PQclear(r);
	hook_fx = f;
	result_us = SEC;
	sem_init(&g.done, 0, 0);
	fd = log_capture(&tmp);
	assert_int_equal(pthread_create(&th, NULL, migrator_run, &g), 0);
	snprintf(q, sizeof(q), "SELECT count(*) FROM pg_stat_activity WHERE pid NOT IN "
		 "(pg_backend_pid(), %d) AND query LIKE '%%advisory_lock(hashtextextended(%%'",
		 PQbackendPID(h));
	seen = seen_within(q);
	frozen = seen ? freeze(PQbackendPID(h), SIGSTOP) : -1;
	t0 = clock_mono_us();
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 8;
	ended = frozen == 0 && sem_timedwait(&g.done, &ts) == 0;
	took = clock_mono_us() - t0;
	if (frozen == 0)
		(void) freeze(PQbackendPID(h), SIGCONT);
	r = PQexec(h, "SELECT pg_advisory_unlock(" PG_SCHEMA_LOCK ")");
	PQclear(r);
	PQfinish(h);
	if (!ended)
		(void) sem_wait(&g.done);	/* the lock released: it ends */
	pthread_join(th, NULL);
	log_captured(fd, tmp, text, sizeof(text));
	result_us = PG_RESULT_US;
	if (g.rc == 0)
		store_close(g.st);
	CHECK_INT("the start seen at the schema lock", seen, 1);
	if (frozen != 0)
		skip();			/* the server is not on this machine */
	if (!ended)
		fail_msg("a start at the schema lock, the server frozen: no answer in 8 s "
			 "(limit 1 s)");
	if (g.rc == 0 || strstr(g.err, "schema") == NULL)
		fail_msg("a start at the schema lock, the server frozen: got %d (%s) after "
			 "%.1f s", g.rc, g.err, (double) took / 1e6);
	if (strstr(text, "waiting for the PostgreSQL schema lock") == NULL)
		fail_msg("the start did not say that it waited: %s", text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_schema_version),
		T(test_plans_scale),
		T(test_plans_young),
		T(test_plans_idle_queue),
		T(test_schema_upgrade),
		T(test_schema_11_reads_go_on),
		T(test_schema_11_no_deadlock),
		T(test_schema_11_drop_bounded),
		T(test_schema_migration_past_limit),
		T(test_schema_lock_frozen),
	};

	return PG_RUN("store_pg_schema", tests);
}
