/*
 * test_store_pg - a PostgreSQL node and its connections (store/pg/): node
 * names and slots, a second node of one name refused; an unreachable
 * server; the claims counted while few, estimated past 100,000; a server
 * with no connection slot free while the node has connections of its own
 * (no outage: callers wait for one of them); the settings a URL's options
 * give kept over ours; the pooler probe skipped when the server has no
 * slot for its connections; a result that never comes; statements
 * prepared per connection (a batch's BEGIN and COMMIT too); a message and
 * its recipients read in one statement; a backend left idle in a node's
 * transaction (the node cut off) ended by the server, and not a batch
 * whose data is slow to send; the server's TCP keepalive the node's own.
 * The other test_store_pg_* files test the rest of the backend
 * (test_store_pg_fx.h says which). Skipped without IDEMRELAY_PG_URL.
 */
#include "test_store_pg_fx.h"

static void test_nodes(void **state)
{
	static const struct {
		const char *what, *name;	/* a node opened and closed, in turn */
		int slot;
	} nodes[] = {
		{ "second node's slot", "node-b", 1 },
		{ "third node's slot", "node-c", 2 },
		{ "a name keeps its slot", "node-b", 1 },
	};
	struct fx *f = *state;
	struct store *b, *again = NULL;
	char err[512] = "";
	size_t n;
	int i;

	CHECK_INT("shared", store_caps(f->st), STORE_CAP_SHARED);
	CHECK_INT("first node's slot", store_node_id(f->st), 0);
	CHECK_INT("same name again", store_pg_open(&again, f->url, TEST_NODE, TEST_LEASE, err,
						   sizeof(err)), STORE_EINVAL);
	if (again != NULL || strstr(err, "node " TEST_NODE " is running already") == NULL)
		fail_msg("second node of one name: got \"%s\", want it refused as running", err);
	for (n = 0; n < sizeof(nodes) / sizeof(nodes[0]); n++) {
		b = node_open(f, nodes[n].name);
		CHECK_INT(nodes[n].what, store_node_id(b), nodes[n].slot);
		store_close(b);
	}
	fx_reopen(f, TEST_MAP);
	CHECK_INT("after a restart", store_node_id(f->st), 0);
	/* a restart at once finds the slot's lock given up, every time */
	for (i = 0; i < 20; i++) {
		b = node_open(f, "node-b");
		store_close(b);
	}
}

/*
 * admin_sql - sql as the cluster's superuser (cluster.py's
 * IDEMRELAY_PG_ADMIN), in the tests' database (a function's rights are
 * the database's); 0 or -1
 */
static int admin_sql(const char *sql)
{
	const char *keys[] = { "dbname", "dbname", NULL }, *url = getenv("IDEMRELAY_PG_ADMIN");
	PGconn *t = PQconnectdb(fx_pg()), *c;
	const char *vals[] = { url ? url : "", PQdb(t), NULL };
	PGresult *r;
	int ok;

	c = PQconnectdbParams(keys, vals, 1);
	r = PQexec(c, sql);
	ok = PQresultStatus(r) == PGRES_COMMAND_OK;
	PQclear(r);
	PQfinish(c);
	PQfinish(t);
	return ok ? 0 : -1;
}

/* count_rows - the one integer sql returns on the fixture's schema; -1 if it fails */
static int count_rows(struct fx *f, const char *sql)
{
	PGconn *c = PQconnectdb(f->url);
	PGresult *r = PQexec(c, sql);
	int n = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1
		? atoi(PQgetvalue(r, 0, 0)) : -1;

	PQclear(r);
	PQfinish(c);
	return n;
}

/*
 * test_register_refused - a new name whose slot the server does not
 * confirm (here the statement that waits for the standby is refused:
 * its function's EXECUTE revoked) is refused with the server's reason,
 * its row taken back, and starts once it is confirmed. The reason was
 * said to be a synchronous standby that did not answer, whatever it was.
 */
static void test_register_refused(void **state)
{
	struct fx *f = *state;
	struct store *b = NULL;
	char err[512] = "";
	int rc, rows;

	if (admin_sql("REVOKE EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text) "
		      "FROM PUBLIC") != 0)
		fail_msg("cannot revoke pg_logical_emit_message (IDEMRELAY_PG_ADMIN: cluster.py run)");
	rc = store_pg_open(&b, f->url, "node-new", TEST_LEASE, err, sizeof(err));
	(void) admin_sql("GRANT EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text) "
			 "TO PUBLIC");
	if (rc == 0) {
		store_close(b);
		fail_msg("a new name whose slot the server did not confirm was started");
	}
	if (strstr(err, "node node-new: cannot register: ") == NULL
	    || strstr(err, "permission denied") == NULL)
		fail_msg("refused: got \"%s\", want the server's reason", err);
	rows = count_rows(f, "SELECT count(*) FROM nodes WHERE name = 'node-new'");
	CHECK_INT("its row taken back", rows, 0);
	b = node_open(f, "node-new");
	CHECK_INT("its slot, once confirmed", store_node_id(b), 1);
	store_close(b);
}

static void test_unreachable(void **state)
{
	struct store *st = NULL;
	char err[512] = "";

	(void) state;
	CHECK_INT("refused", store_pg_open(&st, "postgresql://idemrelay@127.0.0.1:1/x",
					   TEST_NODE, TEST_LEASE, err, sizeof(err)), STORE_EAGAIN);
	if (st != NULL || strncmp(err, "connection to server", 20) != 0)
		fail_msg("unreachable: got \"%s\", want connection to server ...", err);
}

/*
 * Our session settings are made by a statement once connected (a pooler
 * refuses startup options); one the URL's options give stays as given,
 * the others are ours.
 */
static void test_url_options(void **state)
{
	struct fx *f = *state;
	struct store *st = NULL;
	char *url, err[512] = "";
	PGconn *c;
	PGresult *r;

	if (strchr(f->url, '?') == NULL || strstr(f->url, "options=") == NULL)
		fail_msg("the fixture's URL has no options: %s", f->url);
	url = xstrdup(f->url);
	url = xrealloc(url, strlen(url) + 64);
	strcat(url, "%20-cplan_cache_mode%3Dforce_custom_plan");
	if (store_pg_open(&st, url, NULL, 0, err, sizeof(err)) != 0)
		fail_msg("open a client on %s: %s", url, err);
	assert_int_equal(store_pg_take((struct pg_store *) st, &c), 0);
	r = PQexec(c, "SELECT current_setting('plan_cache_mode') || ' ' || "
		   "current_setting('client_connection_check_interval') || ' ' || "
		   "current_setting('search_path')");
	assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
	if (strncmp(PQgetvalue(r, 0, 0), "force_custom_plan 1s ", 21) != 0
	    || strstr(PQgetvalue(r, 0, 0), f->schema) == NULL)
		fail_msg("settings: got \"%s\", want \"force_custom_plan 1s %s\"", PQgetvalue(r, 0, 0),
			 f->schema);
	PQclear(r);
	store_pg_give((struct pg_store *) st, c);
	store_close(st);
	free(url);
}

/* db_limit - the fixture database's CONNECTION LIMIT set to n (-1: none), on c */
static void db_limit(PGconn *c, int n)
{
	char q[256];
	PGresult *r;

	snprintf(q, sizeof(q), "DO $$ BEGIN EXECUTE format('ALTER DATABASE %%I CONNECTION LIMIT %d', "
		 "current_database()); END $$", n);
	r = PQexec(c, q);
	if (PQresultStatus(r) != PGRES_COMMAND_OK)
		fail_msg("%s: %s", q, PQerrorMessage(c));
	PQclear(r);
}

struct taker {
	struct pg_store *st;
	PGconn *c;
	int rc;
	int64_t took_us;
};

/* taker_main - one store_pg_take(), timed */
static void *taker_main(void *arg)
{
	struct taker *k = arg;
	int64_t t0 = clock_mono_us();

	k->rc = store_pg_take(k->st, &k->c);
	k->took_us = clock_mono_us() - t0;
	return NULL;
}

/*
 * The database takes no more connections (its CONNECTION LIMIT reached,
 * "too many connections for database", as max_connections would say
 * "too many clients") while the node has connections of its own, every
 * one taken: a caller waits for one of them, given back 0.3 s later,
 * rather than fail; that is no outage. Once the limit is lifted, the next
 * connection opened ends the episode.
 */
static void test_slots_taken(void **state)
{
	struct fx *f = *state;
	struct pg_store *st = (struct pg_store *) f->st;
	PGconn *adm = PQconnectdb(fx_pg()), *held[PG_POOL_MAX], *extra = NULL;
	struct taker k = { st, NULL, -100, 0 };
	size_t n = 0, i;
	pthread_t th;
	PGresult *r;
	int open, down, outages, cause, cause_after;

	if (PQstatus(adm) != CONNECTION_OK)
		fail_msg("connect %s: %s", fx_pg(), PQerrorMessage(adm));
	CHECK_INT("take one", store_pg_take(st, &held[n++]), 0);
	for (;;) {			/* and every other idle one: all the node's are taken */
		pthread_mutex_lock(&st->mu);
		i = st->n_idle;
		pthread_mutex_unlock(&st->mu);
		if (i == 0)
			break;
		CHECK_INT("take", store_pg_take(st, &held[n++]), 0);
	}
	r = PQexec(adm, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()");
	open = atoi(PQgetvalue(r, 0, 0));
	PQclear(r);
	db_limit(adm, open);
	assert_int_equal(pthread_create(&th, NULL, taker_main, &k), 0);
	usleep(300000);
	store_pg_give(st, held[0]);
	assert_int_equal(pthread_join(th, NULL), 0);
	pthread_mutex_lock(&st->mu);
	down = st->down;
	outages = (int) st->outages;
	cause = st->down_cause;
	pthread_mutex_unlock(&st->mu);
	db_limit(adm, -1);
	PQfinish(adm);
	held[0] = k.c;
	usleep(2 * PG_BACKOFF_MIN);	/* the next try is due */
	CHECK_INT("one more, opened", store_pg_take(st, &extra), 0);
	pthread_mutex_lock(&st->mu);
	cause_after = st->down_cause;
	pthread_mutex_unlock(&st->mu);
	for (i = 0; i < n; i++)
		store_pg_give(st, held[i]);
	store_pg_give(st, extra);

	CHECK_INT("the waiting caller's take", k.rc, 0);
	if (k.took_us < 200000 || k.took_us > 4000000)
		fail_msg("the caller waited %lld us, want about 300000", (long long) k.took_us);
	CHECK_INT("an outage", down, 0);
	CHECK_INT("outages", outages, 0);
	CHECK_INT("cause noted", cause, PG_DOWN_SLOTS);
	CHECK_INT("cause after a connection opened", cause_after, PG_DOWN_NONE);
}

/*
 * A client (idemrelayctl, idemrelay -t) on a database that takes one more
 * connection and no more: the pooler probe's two others are refused for
 * want of slots, so it is skipped, and the client opens on its one.
 */
static void test_probe_no_slots(void **state)
{
	struct fx *f = *state;
	PGconn *adm = PQconnectdb(fx_pg());
	struct store *st = NULL;
	char err[512] = "";
	PGresult *r;
	int rc, open;

	if (PQstatus(adm) != CONNECTION_OK)
		fail_msg("connect %s: %s", fx_pg(), PQerrorMessage(adm));
	r = PQexec(adm, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()");
	open = atoi(PQgetvalue(r, 0, 0));
	PQclear(r);
	db_limit(adm, open + 1);
	rc = store_pg_open(&st, f->url, NULL, 0, err, sizeof(err));
	db_limit(adm, -1);
	PQfinish(adm);
	if (rc != 0)
		fail_msg("open a client with one slot free: got %d (%s), want 0", rc, err);
	CHECK_INT("its connections", ((struct pg_store *) st)->n_open, 1);
	store_close(st);
}

/* a server that does not answer costs a bounded wait and the connection, never a hang */
static void test_result_deadline(void **state)
{
	struct fx *f = *state;
	struct store_txn *t;
	struct store_msg m;
	PGconn *blocker = PQconnectdb(f->url);
	PGresult *r;
	char q[128];
	int64_t start;
	int hash = 5;

	snprintf(q, sizeof(q), "SELECT pg_advisory_lock(%lld)", (long long) store_pg_key_lock(KH));
	r = PQexec(blocker, q);		/* holds the key's lock, as a batch stuck elsewhere would */
	CHECK_INT("blocker", PQresultStatus(r), PGRES_TUPLES_OK);
	PQclear(r);
	result_us = 500000;
	start = clock_mono_us();
	assert_int_equal(store_txn_begin(f->st, (const uint8_t (*)[STORE_HASH_LEN]) KH, 1, &t), 0);
	CHECK_INT("the lock never came", store_txn_commit(t), STORE_EAGAIN);
	result_us = PG_RESULT_US;
	if (clock_mono_us() - start > 3 * SEC)
		fail_msg("waited %lld ms, want about 500", (long long) (clock_mono_us() - start) / 1000);
	PQfinish(blocker);		/* the lock goes with it */
	msg_new(&m, "DEADLINE0001", 1, 10);
	CHECK_INT("serves again", spool(f->st, &m, &hash, 1, NOW + SEC), 0);
	store_msg_free(&m);
}

/*
 * test_stats_estimate - claims are counted while few; past 100,000 (by the
 * planner's estimate) the figure is the estimate, not a scan at each scrape.
 * The estimate is checked by its distance from the truth: rows inserted
 * after the ANALYZE are not in it.
 */
static void test_stats_estimate(void **state)
{
	struct fx *f = *state;
	struct store_stats st;
	uint64_t stories, keys;

	sql(f, "INSERT INTO claims SELECT int4send(g), '\\x01', 'Q' || g, '\\x00', 0, 0 "
	    "FROM generate_series(1, 1000) g%s", NULL);
	CHECK_INT("stats", store_stats(f->st, &st, 0), 0);
	CHECK_INT("few: counted", st.claims, 1000);
	sql(f, "INSERT INTO claims SELECT int4send(g), '\\x01', 'Q' || g, '\\x00', 0, 0 "
	    "FROM generate_series(1001, 150000) g; ANALYZE claims%s", NULL);
	sql(f, "INSERT INTO claims SELECT int4send(g), '\\x01', 'Q' || g, '\\x00', 0, 0 "
	    "FROM generate_series(150001, 150100) g%s", NULL);
	CHECK_INT("stats", store_stats(f->st, &st, 0), 0);
	CHECK_INT("many: the estimate of the ANALYZE", st.claims, 150000);
	CHECK_INT("history stats", stories_of(f->st, &stories, &keys), 0);
	CHECK_INT("keys: the same estimate", keys, 150000);
	CHECK_INT("stories: few, counted", stories, 0);
}

/* one_i64 - a statement of one bigint parameter, outside a pipeline: its one value, or -1 */
static int64_t one_i64(struct pg_store *pst, PGconn *c, const char *q, int64_t v)
{
	struct pg_params p;
	PGresult *r;
	int64_t got = -1;

	store_pg_params_init(&p);
	store_pg_p_i64(&p, v);
	if (store_pg_exec(pst, c, q, &p, &r, "test") == 0) {
		got = PQntuples(r) == 1 ? store_pg_int(r, 0, 0) : -1;
		PQclear(r);
	}
	store_pg_params_free(&p);
	return got;
}

/* prepared - how many statements of this text the connection's session has prepared */
static int64_t prepared(struct pg_store *pst, PGconn *c, const char *q)
{
	char text[256];
	PGresult *r;
	int64_t n = -1;

	snprintf(text, sizeof(text), "SELECT count(*) FROM pg_prepared_statements "
		 "WHERE statement = '%s'", q);
	if (store_pg_exec(pst, c, text, NULL, &r, "test") == 0) {
		n = store_pg_int(r, 0, 0);
		PQclear(r);
	}
	return n;
}

/* pipe_two - a pipeline of a and b (one bigint parameter each): each one's STORE_E* code */
static void pipe_two(struct pg_store *pst, PGconn *c, const char *a, const char *b, int *ea,
		     int *eb)
{
	struct pg_params p;
	PGresult *r;

	assert_int_equal(PQenterPipelineMode(c), 1);
	store_pg_params_init(&p);
	store_pg_p_i64(&p, 0);
	assert_int_equal(store_pg_send(c, a, &p), 0);
	assert_int_equal(store_pg_send(c, b, &p), 0);
	store_pg_params_free(&p);
	assert_int_equal(PQpipelineSync(c), 1);
	*ea = store_pg_pipe_next(pst, c, &r, "test a");
	PQclear(r);
	*eb = store_pg_pipe_next(pst, c, &r, "test b");
	PQclear(r);
	CHECK_INT("pipeline end", store_pg_pipe_end(c), 0);
}

/*
 * test_prepared - statements are prepared once per connection (outside a
 * pipeline and in one, a rollback keeping them); a prepare a pipeline never
 * made (an earlier statement failed) or the server refused is made at the
 * next use, and a refused prepare's error is its statement's
 */
static void test_prepared(void **state)
{
	struct fx *f = *state;
	struct pg_store *pst = (struct pg_store *) f->st;
	static const char add[] = "SELECT $1::int8 + 1", twice[] = "SELECT $1::int8 * 2",
		thrice[] = "SELECT $1::int8 * 3", div0[] = "SELECT 1 / $1::int8",
		bad[] = "SELECT $1::int8 FROM no_such_table";
	PGconn *c;
	int ea, eb;

	assert_int_equal(store_pg_take(pst, &c), 0);
	CHECK_INT("first use", one_i64(pst, c, add, 41), 42);
	CHECK_INT("prepared", prepared(pst, c, add), 1);
	CHECK_INT("second use", one_i64(pst, c, add, 1), 2);
	CHECK_INT("prepared once", prepared(pst, c, add), 1);

	/* the prepare of twice comes after a statement that fails: never made */
	pipe_two(pst, c, div0, twice, &ea, &eb);
	CHECK_INT("division by zero", ea, STORE_EINVAL);
	assert_int_not_equal(eb, 0);
	CHECK_INT("twice not prepared", prepared(pst, c, twice), 0);
	CHECK_INT("twice prepared at its next use", one_i64(pst, c, twice, 21), 42);
	CHECK_INT("and now prepared", prepared(pst, c, twice), 1);

	/* a prepare the server refuses: its error, then the pipeline's statements again */
	pipe_two(pst, c, bad, add, &ea, &eb);
	CHECK_INT("undefined table", ea, STORE_EIO);
	assert_int_not_equal(eb, 0);
	CHECK_INT("add still works", one_i64(pst, c, add, 2), 3);

	/* a rollback keeps what a transaction prepared */
	CHECK_INT("begin", store_pg_simple(pst, c, "BEGIN", "test"), 0);
	CHECK_INT("thrice in a transaction", one_i64(pst, c, thrice, 2), 6);
	CHECK_INT("rollback", store_pg_simple(pst, c, "ROLLBACK", "test"), 0);
	CHECK_INT("thrice after the rollback", one_i64(pst, c, thrice, 3), 9);
	CHECK_INT("thrice prepared once", prepared(pst, c, thrice), 1);

	/* in a pipeline: the prepare's result is skipped where it comes */
	pipe_two(pst, c, "SELECT $1::int8 - 1", "SELECT $1::int8 - 1", &ea, &eb);
	CHECK_INT("a", ea, 0);
	CHECK_INT("b, the same statement", eb, 0);
	CHECK_INT("prepared in the pipeline, once", prepared(pst, c, "SELECT $1::int8 - 1"), 1);
	store_pg_give(pst, c);
}

/*
 * a batch's BEGIN and COMMIT are prepared on the connection that sent
 * them, as its statements with parameters are; no batch reads its
 * transaction's id in a statement of its own (a statement and a reply
 * before COMMIT: it comes with the key locks, or from pg_stat_activity
 * when an outcome is unknown); the
 * recipients are written by the messages' INSERT and UPDATE, no
 * statement of their own
 */
static void test_prepared_txn(void **state)
{
	struct fx *f = *state;
	struct pg_store *pst = (struct pg_store *) f->st;
	size_t i;
	int used = 0;

	spool_one(f->st, "PREPTXN00001", 1);
	spool_one(f->st, "PREPTXN00002", 2);
	CHECK_INT("an outcome", sent(f->st, "PREPTXN00001"), 0);
	for (i = 0; i < pst->n_idle; i++) {
		PGresult *r = PQexec(pst->idle[i], "SELECT count(*) FILTER (WHERE statement LIKE "
				     "'%INSERT INTO messages%'), count(*) FILTER (WHERE statement IN "
				     "('BEGIN', 'COMMIT')), count(*) FILTER (WHERE statement LIKE "
				     "'%pg_current_xact_id%' AND statement NOT LIKE "
				     "'%pg_advisory_xact_lock%'), count(*) FILTER (WHERE statement LIKE "
				     "'INSERT INTO rcpts%' OR statement LIKE 'UPDATE rcpts%') "
				     "FROM pg_prepared_statements");

		assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
		if (atoi(PQgetvalue(r, 0, 0)) > 0) {
			used++;
			CHECK_INT("BEGIN and COMMIT prepared", atoi(PQgetvalue(r, 0, 1)), 2);
			CHECK_INT("no statement of the transaction's id", atoi(PQgetvalue(r, 0, 2)), 0);
		}
		CHECK_INT("no statement of the recipients alone", atoi(PQgetvalue(r, 0, 3)), 0);
		PQclear(r);
	}
	if (used == 0)
		fail_msg("no pool connection prepared the batch's INSERT");
}

/*
 * a message and its recipients come back in one statement, its data
 * once: loaded and read as a story whole, and no connection prepared a
 * statement of the recipients alone
 */
static void test_fetch_one_statement(void **state)
{
	struct fx *f = *state;
	struct pg_store *pst = (struct pg_store *) f->st;
	struct store_msg m, l;
	struct store_story s;
	size_t i;
	int joined = 0;

	msg_new(&m, "FETCH0000001", 3, 500);
	CHECK_INT("spool", spool(f->st, &m, NULL, 0, 0), 0);
	store_pg_keep_forget(pst, NULL);	/* loaded from the database, not the copy kept */
	CHECK_INT("load", store_msg_load(f->st, m.qid, &l), 0);
	CHECK_INT("its recipients", (int) l.n_rcpts, 3);
	CHECK_STR("the third", l.rcpts[2].addr, m.rcpts[2].addr);
	CHECK_INT("its data", (int) l.data_len, 500);
	if (memcmp(l.data, m.data, 500) != 0)
		fail_msg("the data loaded differ");
	store_msg_free(&l);
	CHECK_INT("story", store_story_get(f->st, m.qid, &s), 0);
	CHECK_INT("the story's recipients", (int) s.m.n_rcpts, 3);
	store_story_free(&s);
	store_msg_free(&m);
	for (i = 0; i < pst->n_idle; i++) {
		PGresult *r = PQexec(pst->idle[i], "SELECT count(*) FILTER (WHERE statement LIKE "
				     "'%FROM messages m JOIN rcpts r%'), count(*) FILTER (WHERE "
				     "statement LIKE 'SELECT r.qid%FROM rcpts r WHERE r.qid = $1%') "
				     "FROM pg_prepared_statements");

		assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
		joined += atoi(PQgetvalue(r, 0, 0));
		CHECK_INT("no statement of the recipients alone", atoi(PQgetvalue(r, 0, 1)), 0);
		PQclear(r);
	}
	if (joined < 2)
		fail_msg("the load and the story's statement: %d prepared, want 2", joined);
}

/* key_put - a batch of st under KH: a message put with its claim (hash), the key read new */
static int key_put(struct store *st, const char *qid, int hash, struct store_txn **t)
{
	struct store_claim c;
	struct store_msg m;
	uint8_t h[STORE_HASH_LEN];
	int rc;

	hash_of(h, hash);
	msg_new(&m, qid, 1, 100);
	m.has_key = 1;
	memcpy(m.keyhash, KH, STORE_HASH_LEN);
	assert_int_equal(store_txn_begin(st, (const uint8_t (*)[STORE_HASH_LEN]) KH, 1, t), 0);
	rc = claim_in(*t, KH, h, NOW, &c);
	store_txn_msg_put(*t, &m);
	claim_of(&c, qid, 1, NOW + SEC);
	store_txn_claim_put(*t, KH, h, &c);
	store_msg_free(&m);
	return rc;
}

/*
 * A node cut off without its connections closed (its network gone, its
 * host down) while its backend is idle in a transaction: a batch's, its
 * key locked and read, its writes and COMMIT not sent yet; or one that
 * holds a row between two statements (a settling's void, a revival).
 * The backend kept its locks until TCP keepalive ended it (hours, at the
 * system's defaults): another node's batch of the key waited for its
 * statement's limit and got 451, again and again, and the row could not
 * be had. Now the server ends a backend idle in a node's transaction for
 * its statement's limit (1 s for the cut node here): the other node's
 * batch gets the key and commits, the row is free, and the cut node's
 * batch, its writes sent after all, is not committed.
 */
static void test_idle_transaction_ended(void **state)
{
	struct fx *f = *state;
	struct store *cut;
	struct pg_store *cst;
	struct store_txn *t, *u;
	PGconn *held, *o = PQconnectdb(f->url);
	PGresult *r;
	int key, other, free_row, late;

	result_us = SEC;		/* the cut node's limit, and its backends' idle limit */
	cut = node_open(f, "cut");
	result_us = PG_RESULT_US;
	cst = (struct pg_store *) cut;
	spool_one(f->st, "IDLEROW00001", 41);
	CHECK_INT("the cut node's key is new", key_put(cut, "IDLEKEY00001", 42, &t),
		  STORE_ENOTFOUND);
	CHECK_INT("a connection", store_pg_take(cst, &held), 0);
	CHECK_INT("the cut node holds a row", store_pg_simple(cst, held, "BEGIN; SELECT 1 FROM "
							      "messages WHERE qid = 'IDLEROW00001' "
							      "FOR UPDATE", "row held"), 0);

	/* read first, checked once the cut node is gone: its locks would hold the teardown */
	key = key_put(f->st, "IDLEKEY00002", 43, &u);
	other = store_txn_commit(u);
	r = PQexec(o, "SET lock_timeout = '5s'; SELECT 1 FROM messages WHERE qid = 'IDLEROW00001' "
		   "FOR UPDATE");
	free_row = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
	PQclear(r);
	PQfinish(o);
	late = store_txn_commit(t);
	(void) store_pg_simple(cst, held, "ROLLBACK", "row held");
	store_pg_give(cst, held);
	store_close(cut);

	CHECK_INT("the other node gets the key: new", key, STORE_ENOTFOUND);
	CHECK_INT("and commits", other, 0);
	CHECK_INT("the row free", free_row, 1);
	CHECK_INT("the cut node's batch, sent late: not committed", late, STORE_EAGAIN);
	CHECK_INT("its message not there", qid_rows(f, "messages", "IDLEKEY00001"), 0);
	CHECK_INT("the other's there", qid_rows(f, "messages", "IDLEKEY00002"), 1);
}

/* a node's connection through a link of rate bytes a second toward its server */
struct slow_link {
	int app, real;			/* our end of the node's socketpair; the server's socket */
	long rate;
};

/* slow_write - all of n bytes to fd (blocking) */
static int slow_write(int fd, const char *b, ssize_t n)
{
	ssize_t w;

	while (n > 0) {
		if ((w = write(fd, b, (size_t) n)) < 0 && errno != EINTR)
			return -1;
		if (w > 0) {
			b += w;
			n -= w;
		}
	}
	return 0;
}

/* slow_run - relay both ways until either end closes, the node's bytes throttled */
static void *slow_run(void *arg)
{
	struct slow_link *s = arg;
	char b[65536];
	struct pollfd p[2];
	ssize_t n;

	for (;;) {
		p[0].fd = s->app;
		p[0].events = POLLIN;
		p[1].fd = s->real;
		p[1].events = POLLIN;
		if (poll(p, 2, 1000) < 0 && errno != EINTR)
			break;
		if (p[1].revents && ((n = read(s->real, b, sizeof(b))) <= 0
				     || slow_write(s->app, b, n) != 0))
			break;
		if (p[0].revents) {
			if ((n = read(s->app, b, 16384)) <= 0 || slow_write(s->real, b, n) != 0)
				break;
			usleep((useconds_t) (n * 1000000 / s->rate));
		}
	}
	close(s->app);
	close(s->real);
	return NULL;
}

/* slow_start - put fd (a node's connection) behind a slow link */
static void slow_start(struct slow_link *s, int fd, pthread_t *th)
{
	int sv[2];

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	s->real = dup(fd);
	(void) fcntl(s->real, F_SETFL, fcntl(s->real, F_GETFL) & ~O_NONBLOCK);
	(void) fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);	/* as libpq had it */
	assert_int_equal(dup2(sv[0], fd), fd);
	close(sv[0]);
	s->app = sv[1];
	assert_int_equal(pthread_create(th, NULL, slow_run, s), 0);
}

/*
 * review5: a keyed batch's key round trip ends with a sync, so its
 * backend is 'idle in transaction' until the first message of the
 * commit's pipeline has been read whole; PostgreSQL disables
 * idle_in_transaction_session_timeout only once ReadCommand() returns.
 * That message is the messages INSERT's Bind (prepared on the
 * connection), which carries every body of the batch: a batch whose
 * data takes longer than the limit to send is ended (25P03) and answered
 * 451, again at every retry. Here a 1 s limit and a 6 MB body over a
 * 2 MB/s link (in life: 10 s, a batch of 25 MB messages on a slower link).
 */
static void test_idle_limit_slow_send(void **state)
{
	struct fx *f = *state;
	struct slow_link s = { -1, -1, 2L << 20 };
	struct store *st;
	struct store_txn *t;
	struct store_claim c;
	struct store_msg m;
	uint8_t h[STORE_HASH_LEN];
	PGconn *first;
	pthread_t th;
	int rc;

	result_us = SEC;		/* the node's limit, and its backends' idle limit */
	st = node_open(f, "slow");
	result_us = PG_RESULT_US;
	CHECK_INT("a first batch (prepares the INSERT)", key_put(st, "SLOWKEY00001", 61, &t),
		  STORE_ENOTFOUND);
	first = ((struct pg_txn *) t)->c;
	CHECK_INT("commits", store_txn_commit(t), 0);
	msg_new(&m, "SLOWKEY00002", 1, 6u << 20);
	m.has_key = 1;
	memcpy(m.keyhash, KH, STORE_HASH_LEN);
	assert_int_equal(store_txn_begin(st, (const uint8_t (*)[STORE_HASH_LEN]) KH, 1, &t), 0);
	CHECK_INT("the same connection (its INSERT prepared)", ((struct pg_txn *) t)->c == first, 1);
	slow_start(&s, PQsocket(((struct pg_txn *) t)->c), &th);
	hash_of(h, 62);
	store_txn_msg_put(t, &m);
	claim_of(&c, "SLOWKEY00002", 1, NOW + SEC);
	store_txn_claim_put(t, KH, h, &c);
	store_msg_free(&m);
	rc = store_txn_commit(t);
	store_close(st);
	pthread_join(th, NULL);
	CHECK_INT("a batch whose data takes 3 s to send commits", rc, 0);
	CHECK_INT("its message there", qid_rows(f, "messages", "SLOWKEY00002"), 1);
}

/*
 * The server's TCP keepalive on a node's connection is the node's own
 * (5 s idle, then 2 s apart, 3 unanswered; 10 s for data unacknowledged),
 * read back from the server's settings: a node gone without its
 * connection closed while its backend waits for the rest of a pipeline (a
 * submission batch's, which the node does not end: store_pg_wait.c) left
 * that backend holding its locks for the system's keepalive: hours
 * (Linux: 7200 s idle, 75 s apart, 9; unacknowledged data, some 15 min).
 */
static void test_server_keepalive(void **state)
{
	struct fx *f = *state;
	PGconn *c;
	PGresult *r;

	assert_int_equal(store_pg_take((struct pg_store *) f->st, &c), 0);
	r = PQexec(c, "SELECT current_setting('tcp_keepalives_idle') || ' ' || "
		   "current_setting('tcp_keepalives_interval') || ' ' || "
		   "current_setting('tcp_keepalives_count') || ' ' || "
		   "current_setting('tcp_user_timeout')");
	CHECK_INT("read", PQresultStatus(r), PGRES_TUPLES_OK);
	CHECK_STR("the server's keepalive: idle, interval, count, user timeout",
		  PQgetvalue(r, 0, 0), "5 2 3 10000");
	PQclear(r);
	store_pg_give((struct pg_store *) f->st, c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_nodes),
		T(test_register_refused),
		T(test_stats_estimate),
		cmocka_unit_test(test_unreachable),
		T(test_slots_taken),
		T(test_url_options),
		T(test_probe_no_slots),
		T(test_result_deadline),
		T(test_prepared),
		T(test_prepared_txn),
		T(test_fetch_one_statement),
		T(test_idle_transaction_ended),
		T(test_idle_limit_slow_send),
		T(test_server_keepalive),
	};

	return PG_RUN("store_pg", tests);
}
