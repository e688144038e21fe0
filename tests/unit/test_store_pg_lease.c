/*
 * test_store_pg_lease - delivery leases on PostgreSQL (store/pg/): their
 * fencing; renewal (also past a row a delivery write holds, while an
 * accepting commit is in flight, and reading back only its leases lost);
 * a deferred message going back to the shared queue and its flush (also
 * after a reroute, and retaken by this node before the deferral's write
 * read its result, or after a write fenced out); a take that skips a
 * route, and one reading none of its backlog; a flush of all that leaves
 * due messages alone; drop against another node's lease; a batch of
 * outcomes whose one lease went elsewhere. Skipped without
 * IDEMRELAY_PG_URL.
 */
#include "test_store_pg_fx.h"

/*
 * Calls by one thread, counted: the integers decoded from results
 * (n_ints >= 0). This binary wraps store_pg_int (Makefile).
 */
static pthread_t counter;
static int n_ints = -1;

int64_t __real_store_pg_int(const PGresult *r, int row, int col);

int64_t __wrap_store_pg_int(const PGresult *r, int row, int col)
{
	if (n_ints >= 0 && pthread_equal(pthread_self(), counter))
		n_ints++;
	return __real_store_pg_int(r, row, col);
}

/* a node's lease fences every write; when it runs out, another node takes the message */
static void test_lease_fencing(void **state)
{
	struct fx *f = *state;
	struct store *b = node_open(f, "node-b");

	spool_one(f->st, "LEASE0000001", 1);
	CHECK_INT("acceptance leased it to A", listed(f->st), 1);
	CHECK_INT("B takes nothing while A's lease is live", taken(b, clock_us()), 0);
	CHECK_INT("B without a lease", store_msg_set_inflight(b, "LEASE0000001", 1), STORE_ELEASE);
	CHECK_INT("A with it", store_msg_set_inflight(f->st, "LEASE0000001", 1), 0);

	sql(f, "UPDATE messages SET lease_until = 0", NULL);	/* A's lease runs out */
	CHECK_INT("B takes it", taken(b, clock_us()), 1);
	CHECK_INT("B again: its own now", taken(b, clock_us()), 0);
	CHECK_INT("A fenced off", store_msg_set_inflight(f->st, "LEASE0000001", 0), STORE_ELEASE);
	CHECK_INT("A's update fenced off", sent(f->st, "LEASE0000001"), STORE_ELEASE);
	CHECK_INT("A forgot it", listed(f->st), 0);
	CHECK_INT("B delivers", sent(b, "LEASE0000001"), 0);
	CHECK_INT("B is done with it", listed(b), 0);
	CHECK_INT("A after it left", sent(f->st, "LEASE0000001"), STORE_ENOTFOUND);
	store_close(b);
}

static void test_lease_renew(void **state)
{
	struct fx *f = *state;
	struct store *b = node_open(f, "node-b");

	spool_one(f->st, "RENEW0000001", 1);
	spool_one(f->st, "RENEW0000002", 2);
	CHECK_INT("renew", store_lease_renew(f->st), 0);
	CHECK_INT("A holds both", listed(f->st), 2);
	CHECK_INT("B takes none", taken(b, clock_us()), 0);
	sql(f, "UPDATE messages SET lease_until = 0 WHERE qid = 'RENEW0000002'", NULL);
	CHECK_INT("B takes the one whose lease ran out", taken(b, clock_us()), 1);
	CHECK_INT("renew again", store_lease_renew(f->st), 0);
	CHECK_INT("A holds what it renewed", listed(f->st), 1);
	CHECK_INT("B renews", store_lease_renew(b), 0);
	CHECK_INT("B holds its own", listed(b), 1);
	store_lease_release(f->st, "RENEW0000001", 0);
	CHECK_INT("A released it", listed(f->st), 0);
	CHECK_INT("B takes it", taken(b, clock_us()), 1);
	store_close(b);
}

/*
 * row_held - o's transaction holds qid's row (FOR UPDATE) until o ends it;
 * the server ends it after 5 s idle, if a failed check leaves it behind
 */
static void row_held(struct fx *f, PGconn *o, const char *qid)
{
	char q[256];
	PGresult *r;

	snprintf(q, sizeof(q), "SET search_path = \"%s\"; SET idle_in_transaction_session_timeout"
		 " = '5s'; BEGIN; SELECT 1 FROM messages WHERE qid = '%s' FOR UPDATE", f->schema, qid);
	r = PQexec(o, q);
	CHECK_INT(qid, PQresultStatus(r), PGRES_TUPLES_OK);
	PQclear(r);
}

/*
 * a renewal does not wait for a row a delivery write holds (it deadlocked
 * with marks that also wrote the previous outcome): that lease is kept,
 * unrenewed this time, and the others are renewed at once
 */
static void test_lease_renew_skips_locked(void **state)
{
	struct fx *f = *state;
	int64_t before, began;
	PGconn *o = PQconnectdb(f->url);
	PGresult *r;
	char q[256];

	spool_one(f->st, "RENEWLK00001", 1);
	spool_one(f->st, "RENEWLK00002", 2);
	/* another transaction holds the first one's row */
	row_held(f, o, "RENEWLK00001");
	snprintf(q, sizeof(q), "SET search_path = \"%s\"; SELECT lease_until FROM messages "
		 "WHERE qid = 'RENEWLK00002'", f->schema);
	r = PQexec(o, q);			/* text results: PQexec */
	before = atoll(PQgetvalue(r, 0, 0));
	PQclear(r);
	began = clock_us();
	CHECK_INT("renew", store_lease_renew(f->st), 0);
	if (clock_us() - began > 2 * SEC)
		fail_msg("the renewal waited %.1f s for the locked row",
			 (double) (clock_us() - began) / SEC);
	CHECK_INT("both still held", listed(f->st), 2);
	r = PQexec(o, q);
	if (atoll(PQgetvalue(r, 0, 0)) <= before)
		fail_msg("the lease of the row nobody held was not renewed");
	PQclear(r);
	PQfinish(o);
}

/* slow_spool_main - spool_one in a thread: its COMMIT waits at the server */
static void *slow_spool_main(void *arg)
{
	spool_one(arg, "RENEWCM00001", 1);
	return NULL;
}

/* commit_sleeping - does a COMMIT wait in pg_sleep (the trigger of test_renew_during_commit)? */
static int commit_sleeping(PGconn *o)
{
	PGresult *r = PQexec(o, "SELECT count(*) FROM pg_stat_activity "
			     "WHERE wait_event = 'PgSleep' AND query = 'COMMIT'");
	int n = PQresultStatus(r) == PGRES_TUPLES_OK ? atoi(PQgetvalue(r, 0, 0)) : 0;

	PQclear(r);
	return n;
}

/*
 * a renewal while a message's commit is in flight (its row and lease
 * returned, the COMMIT waiting at the server in a deferred trigger)
 * cannot see the row: the node holds that lease only once the commit is
 * known, so the renewal does not forget it and the node's own inflight
 * mark on it is not refused as another node's (it was: test_expiry_keeps_up
 * under load, e2e test_nodes_renewal_during_commit)
 */
static void test_renew_during_commit(void **state)
{
	struct fx *f = *state;
	PGconn *o = PQconnectdb(f->url);
	pthread_t th;
	int i;

	sql(f, "CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS "
	    "$$ BEGIN PERFORM pg_sleep(2); RETURN NULL; END $$; "
	    "CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON messages DEFERRABLE "
	    "INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit()", NULL);
	assert_int_equal(pthread_create(&th, NULL, slow_spool_main, f->st), 0);
	for (i = 0; i < 1000 && !commit_sleeping(o); i++)
		usleep(10000);
	if (i == 1000)
		fail_msg("the COMMIT never waited in the trigger");
	usleep(200000);			/* the INSERT's result, flushed before COMMIT, is read */
	CHECK_INT("renew while the COMMIT waits", store_lease_renew(f->st), 0);
	pthread_join(th, NULL);
	PQfinish(o);
	sql(f, "DROP TRIGGER slow_commit ON messages", NULL);
	CHECK_INT("the acceptance's lease is held", listed(f->st), 1);
	CHECK_INT("the node's own mark", store_msg_set_inflight(f->st, "RENEWCM00001", 1), 0);
	CHECK_INT("its delivery", sent(f->st, "RENEWCM00001"), 0);
}

/* a deferral gives the lease up: any node takes the message when due; a flush makes it due */
static void test_defer_and_flush(void **state)
{
	struct fx *f = *state;
	struct store *b = node_open(f, "node-b");
	struct store_msg m;
	int64_t later = clock_us() + 3600 * SEC;

	msg_new(&m, "DEFER0000001", 2, 100);
	CHECK_INT("spool", spool(f->st, &m, NULL, 0, 0), 0);
	m.rcpts[0].state = STORE_RCPT_SENT;
	m.attempts = 1;
	m.next_attempt = later;
	CHECK_INT("defer", store_msg_update(f->st, &m), 0);
	CHECK_INT("A gave the lease up", listed(f->st), 0);
	CHECK_INT("not due yet", taken(b, clock_us()), 0);
	CHECK_INT("B takes it when due", taken(b, later), 1);
	m.rcpts[1].state = STORE_RCPT_SENT;
	CHECK_INT("A's write fenced", store_msg_update(f->st, &m), STORE_ELEASE);
	CHECK_INT("B's write", store_msg_update(b, &m), 0);
	store_msg_free(&m);

	msg_new(&m, "DEFER0000002", 1, 100);
	CHECK_INT("spool", spool(f->st, &m, NULL, 0, 0), 0);
	m.next_attempt = later;
	CHECK_INT("defer", store_msg_update(f->st, &m), 0);
	CHECK_INT("flush on B", store_msg_change(b, NULL, &due_now), 0);
	CHECK_INT("A takes it at once", taken(f->st, clock_us()), 1);
	CHECK_INT("due of one unknown", store_msg_change(b, "NOSUCHQID000", &due_now), STORE_ENOTFOUND);
	store_msg_free(&m);
	store_close(b);
}

/*
 * test_defer_after_reroute - a message rerouted from another node while
 * this one's attempt is under way (deliver_reroute runs on the node that
 * got the command): the attempt's deferral, written under the route it
 * was loaded with, keeps it due now for any node, where it overwrote the
 * reroute's time with the retry earned on the old route. A deferral
 * under the route stored keeps its time.
 */
static void test_defer_after_reroute(void **state)
{
	struct fx *f = *state;
	struct store *b = node_open(f, "node-b");
	int64_t later = clock_us() + 3600 * SEC;

	/* rerouted on B during A's attempt, loaded on the default upstream */
	reroute_then_defer(f->st, b, "REROUTED0001", NULL, "r1", later);
	CHECK_INT("A gave the lease up", listed(f->st), 0);
	CHECK_INT("B takes it now, the new way", taken(b, clock_us()), 1);

	reroute_then_defer(f->st, b, "REROUTED0002", "r1", NULL, later);
	CHECK_INT("not due before its retry", taken(b, clock_us()), 0);
	CHECK_INT("due at it", taken(b, later), 1);
	store_close(b);
}

/* last_cb - remember the QID offered (the last one) */
static int last_cb(void *arg, const struct store_msg *m)
{
	strcpy(arg, m->qid);
	return 0;
}

/*
 * test_take_skips_routes - a take passes over the routes it is told to
 * skip (NULL: the default upstream), by name, and takes the others' mail
 */
static void test_take_skips_routes(void **state)
{
	struct fx *f = *state;
	struct store *b = node_open(f, "node-b");
	static const char *const qids[] = { "SKIPROUTE001", "SKIPROUTE002", "SKIPROUTE003" };
	static const char *const routes[] = { NULL, "r1", "r2" };
	const char *skip[2];
	char got[STORE_QID_SIZE] = "";
	int64_t later = clock_us() + 3600 * SEC;
	struct store_msg m;
	size_t i;

	for (i = 0; i < 3; i++) {
		msg_new(&m, qids[i], 1, 100);
		m.route = routes[i] ? xstrdup(routes[i]) : NULL;
		CHECK_INT("spool", spool(f->st, &m, NULL, 0, 0), 0);
		m.next_attempt = later;
		CHECK_INT("defer", store_msg_update(f->st, &m), 0);
		store_msg_free(&m);
	}
	skip[0] = NULL, skip[1] = "r1";
	CHECK_INT("take, the default and r1 skipped",
		  store_queue_take(b, later, 100, skip, 2, last_cb, got), 0);
	assert_string_equal(got, "SKIPROUTE003");
	skip[0] = "r1";
	CHECK_INT("take, r1 skipped", store_queue_take(b, later, 100, skip, 1, last_cb, got), 0);
	assert_string_equal(got, "SKIPROUTE001");
	CHECK_INT("take, nothing skipped", taken(b, later), 1);
	CHECK_INT("every one leased", taken(b, later), 0);
	store_close(b);
}

/*
 * take_work - the work of b's take skipping route "slow" (EXPLAIN ANALYZE
 * in a transaction rolled back): the buffers it reads (hit and read) and
 * the rows its scans read and passed over
 */
static void take_work(struct store *b, long *buffers, long *passed)
{
	struct pg_store *s = (struct pg_store *) b;
	const char *line;
	long hit = 0, rd = 0, k;
	char q[512];
	size_t i;
	int j;

	*buffers = *passed = -1;
	pthread_mutex_lock(&s->mu);
	for (i = 0; i < s->n_idle && *buffers < 0; i++) {
		PGresult *r = PQexec(s->idle[i], "SELECT name FROM pg_prepared_statements "
				     "WHERE statement LIKE 'UPDATE messages m SET lease_owner%'");

		assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
		if (PQntuples(r) == 1) {
			snprintf(q, sizeof(q), "BEGIN; EXPLAIN (ANALYZE, BUFFERS) EXECUTE %s('node-b', "
				 "60000000, %lld, 10, '{slow}')", PQgetvalue(r, 0, 0),
				 (long long) clock_us());
			PQclear(r);
			r = PQexec(s->idle[i], q);
			if (PQresultStatus(r) != PGRES_TUPLES_OK)
				fail_msg("%s: %s", q, PQerrorMessage(s->idle[i]));
			if (sscanf(PQgetvalue(r, 1, 0), " Buffers: shared hit=%ld read=%ld", &hit, &rd) < 1)
				fail_msg("no buffers in the take's plan: %s", PQgetvalue(r, 1, 0));
			*buffers = hit + rd;
			for (*passed = 0, j = 0; j < PQntuples(r); j++)
				if ((line = strstr(PQgetvalue(r, j, 0), "Rows Removed by Filter: "))
				    && sscanf(line + 24, "%ld", &k) == 1)
					*passed += k;
			PQclear(PQexec(s->idle[i], "ROLLBACK"));
		}
		PQclear(r);
	}
	pthread_mutex_unlock(&s->mu);
	if (*buffers < 0)
		fail_msg("the take's statement is prepared on no idle connection");
}

/*
 * test_take_skips_backlog - a take that skips a route reads a batch's
 * worth, not that route's backlog: 20,000 due messages of route "slow",
 * older than 5 others (3 of the default upstream's, 2 of a route no node
 * here knows). It read past every one of them in one scan by
 * next_attempt (20,003 rows passed over, 992 buffers; 115 ms and 9,845
 * buffers at 200,000).
 */
static void test_take_skips_backlog(void **state)
{
	struct fx *f = *state;
	struct store *b = node_open(f, "node-b");
	const char *skip[] = { "slow" };
	char got[STORE_QID_SIZE] = "";
	long buffers, passed;
	int n = 0;

	spool_one(f->st, "PLANSEED0001", 1);
	sql(f, "INSERT INTO messages SELECT x.* FROM messages m, generate_series(1, 20005) g, "
	    "LATERAL jsonb_populate_record(NULL::messages, to_jsonb(m) || jsonb_build_object("
	    "'qid', 'BACKLOG' || lpad(g::text, 5, '0'), 'lease_owner', NULL, 'next_attempt', g, "
	    "'route', CASE WHEN g <= 20000 THEN 'slow' WHEN g <= 20003 THEN NULL ELSE 'other' END"
	    ")) x WHERE m.qid = 'PLANSEED0001'%s", "; ANALYZE messages");
	CHECK_INT("take 2", store_queue_take(b, clock_us(), 2, skip, 1, last_cb, got), 0);
	assert_string_equal(got, "BACKLOG20002");
	take_work(b, &buffers, &passed);
	if (passed > 50 || buffers > 200)
		fail_msg("the take passed over %ld rows and read %ld buffers, want at most 50 "
			 "and 200", passed, buffers);
	CHECK_INT("take the rest", store_queue_take(b, clock_us(), 10, skip, 1, count_cb, &n), 0);
	CHECK_INT("the rest, none of the skipped route", n, 3);
	store_close(b);
}

/* retake_* - the commit hook of test_defer_retaken: once the deferral is
 * committed, and before its transaction has read that, the node leases the
 * message again (its taker, at the moment it came due) */
static struct fx *retake_fx;
static int retake_n;

static void retake_after_commit(PGconn *c)
{
	PGconn *o = PQconnectdb(retake_fx->url);
	PGresult *r;
	char q[256];
	int i, free_now = 0;

	(void) c;
	commit_hook = NULL;
	snprintf(q, sizeof(q), "SET search_path = \"%s\"; SELECT lease_owner IS NULL FROM "
		 "messages WHERE qid = 'RETAKE000001'", retake_fx->schema);
	for (i = 0; i < 500 && !free_now; i++) {
		r = PQexec(o, q);
		free_now = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1
		    && strcmp(PQgetvalue(r, 0, 0), "t") == 0;
		PQclear(r);
		if (!free_now)
			usleep(10000);
	}
	PQfinish(o);
	retake_n = taken(retake_fx->st, clock_us() + 3600 * SEC);
}

/*
 * A deferral gives the lease up at its commit; the node's taker may lease
 * the message again before the writing thread has read that commit's
 * result. The write then forgets only the lease it gave up: the new one is
 * held (and renewed). Forgetting it left the message leased to this node
 * in the database, never renewed, and not delivered until it ran out.
 */
static void test_defer_retaken(void **state)
{
	struct fx *f = *state;
	struct store_msg m, loaded;

	msg_new(&m, "RETAKE000001", 1, 100);
	CHECK_INT("spool", spool(f->st, &m, NULL, 0, 0), 0);
	CHECK_INT("load", store_msg_load(f->st, "RETAKE000001", &loaded), 0);
	if (loaded.lease == 0)
		fail_msg("not loaded under the acceptance's lease");
	m.attempts = 1;
	m.next_attempt = clock_us() + 1800 * SEC;
	retake_fx = f;
	retake_n = -1;
	commit_hook = retake_after_commit;
	CHECK_INT("defer", store_msg_update(f->st, &m), 0);
	commit_hook = NULL;
	CHECK_INT("taken again as the deferral committed", retake_n, 1);
	CHECK_INT("the new lease is held", listed(f->st), 1);
	CHECK_INT("and renewed", store_lease_renew(f->st), 0);
	CHECK_INT("held after the renewal", listed(f->st), 1);
	CHECK_INT("a write under it", store_msg_set_inflight(f->st, "RETAKE000001", 1), 0);
	/* the deferred attempt finishes (deliver_job_finished): its lease alone goes */
	store_lease_release(f->st, "RETAKE000001", loaded.lease);
	CHECK_INT("the new lease kept by the old one's release", listed(f->st), 1);
	CHECK_INT("a write under it still", store_msg_set_inflight(f->st, "RETAKE000001", 0), 0);
	store_lease_release(f->st, "RETAKE000001", 0);
	CHECK_INT("released: whichever lease", listed(f->st), 0);
	store_msg_free(&loaded);
	store_msg_free(&m);
}

/* fenced_* - the commit hook of test_fenced_retaken: while the fenced-out
 * write is in flight, B's lease runs out and A's taker leases the message
 * anew */
static void fenced_retake(PGconn *c)
{
	(void) c;
	commit_hook = NULL;
	sql(retake_fx, "UPDATE messages SET lease_until = 0 WHERE qid = 'FENCED000001'", NULL);
	retake_n = taken(retake_fx->st, clock_us());
}

/*
 * A write fenced out (B took the message since A read its lease) forgets
 * only the lease it was fenced with: one A took meanwhile stays held.
 * Forgetting any lease of the message left A's new one unrenewed and its
 * delivery fenced out of its own writes until the lease ran out.
 */
static void test_fenced_retaken(void **state)
{
	struct fx *f = *state;
	struct store *b = node_open(f, "node-b");
	struct store_msg m;

	msg_new(&m, "FENCED000001", 1, 100);
	CHECK_INT("spool", spool(f->st, &m, NULL, 0, 0), 0);
	sql(f, "UPDATE messages SET lease_until = 0 WHERE qid = 'FENCED000001'", NULL);
	CHECK_INT("B takes it when A's lease ran out", taken(b, clock_us()), 1);
	m.rcpts[0].state = STORE_RCPT_SENT;
	retake_fx = f;
	retake_n = -1;
	commit_hook = fenced_retake;
	CHECK_INT("A's write fenced", store_msg_update(f->st, &m), STORE_ELEASE);
	commit_hook = NULL;
	CHECK_INT("A took it again meanwhile", retake_n, 1);
	CHECK_INT("the new lease is held", listed(f->st), 1);
	CHECK_INT("a write under it", store_msg_set_inflight(f->st, "FENCED000001", 1), 0);
	CHECK_INT("B's write fenced", store_msg_set_inflight(b, "FENCED000001", 0),
		  STORE_ELEASE);
	store_msg_free(&m);
	store_close(b);
}

static void test_drop_leased(void **state)
{
	struct fx *f = *state;
	struct store *b = node_open(f, "node-b");
	struct store_story s;

	spool_one(f->st, "DROP00000001", 1);
	CHECK_INT("B drops A's", store_msg_drop(b, "DROP00000001"), STORE_ELEASE);
	sql(f, "UPDATE messages SET lease_until = 0", NULL);
	CHECK_INT("B drops it once A's lease ran out", store_msg_drop(b, "DROP00000001"), 0);
	CHECK_INT("story", store_story_get(f->st, "DROP00000001", &s), 0);
	CHECK_INT("dropped", s.dropped, 1);
	CHECK_INT("queued", s.queued, 0);
	store_story_free(&s);
	CHECK_INT("A forgot the lease", store_msg_set_inflight(f->st, "DROP00000001", 1),
		  STORE_ENOTFOUND);
	CHECK_INT("again", store_msg_drop(f->st, "DROP00000001"), STORE_ENOTFOUND);
	store_close(b);
}

/* a batch of outcomes: the one whose lease went elsewhere fails alone */
static void test_update_many_lease(void **state)
{
	struct fx *f = *state;
	struct store *b = node_open(f, "node-b");
	struct store_msg x, y, *batch[2] = { &x, &y };
	int errs[2] = { -1, -1 };

	spool_one(f->st, "MANYL0000001", 1);
	spool_one(f->st, "MANYL0000002", 2);
	sql(f, "UPDATE messages SET lease_until = 0 WHERE qid = 'MANYL0000002'", NULL);
	CHECK_INT("B takes the second", taken(b, clock_us()), 1);
	msg_new(&x, "MANYL0000001", 1, 100);
	msg_new(&y, "MANYL0000002", 1, 100);
	x.rcpts[0].state = y.rcpts[0].state = STORE_RCPT_SENT;
	CHECK_INT("batch", store_msg_update_many(f->st, batch, 2, errs), STORE_ELEASE);
	CHECK_INT("errs[0]", errs[0], 0);
	CHECK_INT("errs[1]", errs[1], STORE_ELEASE);
	CHECK_INT("B's own write", store_msg_update(b, &y), 0);
	store_msg_free(&x);
	store_msg_free(&y);
	store_close(b);
}

/* next_of - qid's next_attempt, read on a connection of its own */
static long long next_of(struct fx *f, const char *qid)
{
	char q[256];

	snprintf(q, sizeof(q), "SET search_path = \"%s\"; SELECT next_attempt FROM messages "
		 "WHERE qid = '%s'", f->schema, qid);
	return sql_int(f->url, q);
}

/*
 * A flush of all makes due what is not due yet and leaves alone what
 * already is: its order in the queue stays, and the flush waits for no
 * row a delivery holds (deliveries hold due messages, not deferred ones).
 * A held message is passed over: released, it is tried at its own time.
 */
static void test_flush_all_skips_due(void **state)
{
	struct fx *f = *state;
	PGconn *o = PQconnectdb(f->url);
	struct store_msg m;
	int64_t began;

	msg_new(&m, "FLUSHDUE0001", 1, 100);
	m.next_attempt = NOW - 60 * SEC;
	CHECK_INT("spool the due one", spool(f->st, &m, NULL, 0, 0), 0);
	store_msg_free(&m);
	msg_new(&m, "FLUSHDUE0002", 1, 100);
	m.next_attempt = NOW + 3600 * SEC;
	CHECK_INT("spool the deferred one", spool(f->st, &m, NULL, 0, 0), 0);
	store_msg_free(&m);
	msg_new(&m, "FLUSHHELD001", 1, 100);
	m.next_attempt = NOW + 3600 * SEC;
	CHECK_INT("spool the held one", spool(f->st, &m, NULL, 0, 0), 0);
	store_msg_free(&m);
	CHECK_INT("hold it", store_msg_change(f->st, "FLUSHHELD001", &(struct store_change) { 1, 0, NULL, 0 }),
		  0);
	row_held(f, o, "FLUSHDUE0001");		/* as a delivery holds the due one */
	began = clock_us();
	CHECK_INT("flush all", store_msg_change(f->st, NULL, &due_now), 0);
	if (clock_us() - began > 2 * SEC)
		fail_msg("the flush waited %.1f s for the row a delivery held",
			 (double) (clock_us() - began) / SEC);
	PQfinish(o);
	CHECK_INT("the due one keeps its place", next_of(f, "FLUSHDUE0001") == NOW - 60 * SEC, 1);
	CHECK_INT("the deferred one is due", next_of(f, "FLUSHDUE0002") == NOW, 1);
	/* a flush passes a held message over: once released, it waits for its time */
	CHECK_INT("the held one keeps its time", next_of(f, "FLUSHHELD001") == NOW + 3600 * SEC, 1);
}

/*
 * A renewal reads back only its leases lost: it matched each lease
 * held against the rows still held, decoding them again for each, under
 * the lease map's lock (O(held x rows): 1,274 decodes for 50 leases, one
 * lost). The lease lost is forgotten, the others kept.
 */
static void test_renew_reads_lost(void **state)
{
	struct fx *f = *state;
	char qid[STORE_QID_SIZE];
	int i, rc, decoded;

	for (i = 0; i < 50; i++) {
		snprintf(qid, sizeof(qid), "RENEWMANY%03d", i);
		spool_one(f->st, qid, 200 + i);
	}
	sql(f, "UPDATE messages SET lease_owner = 'gone' WHERE qid = 'RENEWMANY049'", NULL);
	counter = pthread_self();
	n_ints = 0;
	rc = store_lease_renew(f->st);
	decoded = n_ints;
	n_ints = -1;
	CHECK_INT("renew", rc, 0);
	CHECK_INT("the leases still held", listed(f->st), 49);
	if (decoded > 50)
		fail_msg("integers decoded by a renewal of 50 leases, one lost: got %d, want "
			 "at most 50", decoded);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_lease_fencing),
		T(test_lease_renew),
		T(test_lease_renew_skips_locked),
		T(test_renew_during_commit),
		T(test_defer_and_flush),
		T(test_take_skips_routes),
		T(test_take_skips_backlog),
		T(test_defer_after_reroute),
		T(test_defer_retaken),
		T(test_fenced_retaken),
		T(test_flush_all_skips_due),
		T(test_drop_leased),
		T(test_update_many_lease),
		T(test_renew_reads_lost),
	};

	return PG_RUN("store_pg_lease", tests);
}
