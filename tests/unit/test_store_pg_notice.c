/*
 * test_store_pg_notice - a bounce on PostgreSQL: its non-delivery notice,
 * put with its outcome (or before it), whose COMMIT waits past the hold,
 * aborts, or races another node's take; whose answer is lost with
 * PostgreSQL away: not voided, and the deferral its delivery writes next
 * refused; its wait ended by the statement's limit, by its cap, by the
 * delivery's stop; its backend ended when its pipeline was cut in its
 * middle. Skipped without IDEMRELAY_PG_URL.
 */
#include "test_store_pg_fx.h"

/* notices_of - how many non-delivery notices (null sender) the fixture's schema holds */
static long long notices_of(struct fx *f)
{
	char q[256];

	snprintf(q, sizeof(q), "SET search_path = \"%s\"; SELECT count(*) FROM messages "
		 "WHERE sender = ''", f->schema);
	return sql_int(f->url, q);
}

static int notice_first;	/* notice_bounce() puts the notice before the outcome */

static size_t notice_size = 100;	/* the data of notice_bounce()'s notice */

/*
 * notice_bounce - the transaction of a bounce (deliver_record.c): m's
 * outcome, its recipient 0 bounced and 1 deferred (due now, its lease
 * kept; or later, given up), then (or first: notice_first) its notice,
 * marked so, whose COMMIT is held past the hold (for the test's lock,
 * hook NULL), or hook cuts it; its rc
 */
static int notice_bounce(struct fx *f, struct store_msg *m, const char *notice, int later,
			 void (*hook) (PGconn *c))
{
	struct store_txn *t;
	struct store_msg n;
	int rc;

	m->rcpts[0].state = STORE_RCPT_BOUNCED;
	free(m->rcpts[0].reply);
	m->rcpts[0].reply = xstrdup("550 5.1.1 no such user");
	free(m->rcpts[1].reply);
	m->rcpts[1].reply = xstrdup("451 4.3.0 try again later");
	m->attempts = 1;
	m->next_attempt = clock_us() + (later ? 3600 * SEC : 0);
	m->inflight = 0;
	msg_new(&n, notice, 1, notice_size);
	n.from[0] = 0;
	n.notice = 1;
	assert_int_equal(store_txn_begin(f->st, NULL, 0, &t), 0);
	if (!notice_first)
		store_txn_msg_update(t, m);
	store_txn_msg_put(t, &n);
	if (notice_first)
		store_txn_msg_update(t, m);
	hook_fx = f;
	hook_qid = notice;
	commit_hook = hook;
	result_us = SEC / 2;		/* the hold of a COMMIT that waits, but not for the standby */
	rc = store_txn_commit(t);
	result_us = PG_RESULT_US;
	commit_hook = NULL;
	store_msg_free(&n);
	return rc;
}

/*
 * notice_once - once the bounce's COMMIT went through, and the node
 * settled what it had to, the delivery writes m deferred, its notice
 * taken as not queued: refused; one notice (n in all), recipient 0 bounced
 */
static void notice_once(struct fx *f, struct store_msg *m, const char *notice, int n)
{
	struct store_story s;
	int rc;

	((struct pg_store *) f->st)->settle_at = 0;	/* the next take settles voids */
	CHECK_INT("nothing due", taken(f->st, NOW), 0);
	m->rcpts[0].state = STORE_RCPT_QUEUED;
	rc = store_msg_update(f->st, m);
	CHECK_INT("the notice, once", notices_of(f), n);
	CHECK_INT("its own", qid_rows(f, "messages", notice), 1);
	CHECK_INT("the story", store_story_get(f->st, m->qid, &s), 0);
	CHECK_INT("recipient 0 bounced, for good", s.m.rcpts[0].state, STORE_RCPT_BOUNCED);
	CHECK_INT("recipient 1 deferred", s.m.rcpts[1].state, STORE_RCPT_QUEUED);
	store_story_free(&s);
	CHECK_INT("the deferral refused: its lease is not the node's to write with",
		  rc, STORE_ELEASE);
	CHECK_INT("nothing voided", void_count(f), 0);
}

/* the test's lock that commit_held()'s trigger waits for */
#define HELD_LOCK	"4243"

/*
 * the test's lock, released by a thread once the store waits for the
 * bounce's outcome; or, with stop, kept, and the delivery stopped then
 */
struct release {
	PGconn *c;			/* owned: the test's connection, which holds the lock */
	FILE *log;			/* not owned: where the log goes meanwhile (log_capture) */
	int stop;			/* -1, or the committing thread's stop (deadline_stop_on()) */
};

/*
 * release_run - release r's lock once the store says it waits for the
 * outcome, or after 10 s; or then make r's stop readable
 */
static void *release_run(void *arg)
{
	struct release *r = arg;
	PGresult *res;

	(void) logged_within(r->log, "has no outcome yet");
	if (r->stop >= 0) {
		(void) !eventfd_write(r->stop, 1);	/* as deliver_stop() */
		return NULL;
	}
	res = PQexec(r->c, "SELECT pg_advisory_unlock(" HELD_LOCK ")");
	PQclear(res);
	return NULL;
}

/* inflight_of - messages.inflight of qid: 1, 0, or -1 no such message */
static long long inflight_of(struct fx *f, const char *qid)
{
	char q[256];

	snprintf(q, sizeof(q), "SET search_path = \"%s\"; SELECT (SELECT inflight FROM messages "
		 "WHERE qid = '%s')", f->schema, qid);
	return sql_int(f->url, q);
}

/*
 * bounce_ended - the bounce of m (notice_bounce) answered rc, the delivery
 * goes on as deliver_record.c does: committed, nothing more; else the
 * recipient deferred. The end is either the bounce with its notice, once,
 * or the recipient queued, the mark cleared, to be asked again and
 * bounced with one notice: never the mark left without a notice, which
 * the next take reads as an ambiguous delivery (delivered-unconfirmed
 * under upstream.ambiguous = assume-delivered: the bounce lost, no notice).
 */
static void bounce_ended(struct fx *f, struct store_msg *m, const char *notice, int later, int rc)
{
	struct store_story s;
	char qid[sizeof(m->qid)];
	int dr = 0;

	memcpy(qid, m->qid, sizeof(qid));
	if (rc != 0) {			/* the notice taken as not queued: the recipient deferred */
		m->rcpts[0].state = STORE_RCPT_QUEUED;
		dr = store_msg_update(f->st, m);
	}
	CHECK_INT("the story", store_story_get(f->st, qid, &s), 0);
	if (qid_rows(f, "messages", notice) == 1) {
		CHECK_INT("recipient 0 bounced, with its notice", s.m.rcpts[0].state,
			  STORE_RCPT_BOUNCED);
		if (rc != 0)
			CHECK_INT("the deferral after a notice that went through: refused", dr,
				  STORE_ELEASE);
	} else {
		CHECK_INT("no notice: the inflight mark (else an ambiguous delivery, no notice ever)",
			  inflight_of(f, qid), 0);
		CHECK_INT("no notice: recipient 0 queued to bounce again", s.m.rcpts[0].state,
			  STORE_RCPT_QUEUED);
		CHECK_INT("no notice: the deferral written", dr, 0);
		/* the next attempt bounces it again, with one notice */
		sql(f, "DROP TRIGGER IF EXISTS commit_held ON messages", NULL);
		store_msg_free(m);
		assert_int_equal(store_msg_load(f->st, qid, m), 0);
		CHECK_INT("the bounce again", notice_bounce(f, m, notice, later, NULL), 0);
		CHECK_INT("its notice, once", qid_rows(f, "messages", notice), 1);
	}
	store_story_free(&s);
	CHECK_INT("nothing voided", void_count(f), 0);
}

/*
 * marked_load - qid spooled (two recipients, one claim of hash) with its
 * inflight mark, loaded into m as a delivery holds it
 */
static void marked_load(struct fx *f, const char *qid, int hash, struct store_msg *m)
{
	msg_new(m, qid, 2, 100);
	CHECK_INT("spool", spool(f->st, m, &hash, 1, NOW + SEC), 0);
	store_msg_free(m);
	CHECK_INT("its mark", store_msg_set_inflight(f->st, qid, 1), 0);
	CHECK_INT("the load", store_msg_load(f->st, qid, m), 0);
}

/*
 * notice_decided - the bounce of qid, inflight-marked (its dot answered
 * 550), whose COMMIT the trigger holds on the test's lock, released once
 * the store waits for the outcome (or after 10 s), or kept until the
 * store has answered (keep: its backend stuck; keep 2, the delivery
 * stopped once the store waits, as deliver_stop() does: the answer must
 * come at the stop, well before the cap); then the delivery goes on
 * (bounce_ended)
 */
static void notice_decided(struct fx *f, const char *qid, const char *notice, int later, int keep)
{
	struct release rel = { PQconnectdb(f->url), NULL, -1 };
	struct store_msg m;
	PGresult *r;
	pthread_t th;
	char q[512], text[8192];
	int hash = 93, rc, fd;
	long long leased = 0;
	int64_t began;

	marked_load(f, qid, hash, &m);
	r = PQexec(rel.c, "SELECT pg_advisory_lock(" HELD_LOCK ")");
	CHECK_INT("the test holds the lock", PQresultStatus(r), PGRES_TUPLES_OK);
	PQclear(r);
	fd = log_capture(&rel.log);
	if (keep == 2) {
		assert_true((rel.stop = eventfd(0, EFD_CLOEXEC)) >= 0);
		deadline_stop_on(rel.stop);
	}
	if (keep != 1)
		assert_int_equal(pthread_create(&th, NULL, release_run, &rel), 0);
	began = clock_mono_us();
	rc = notice_bounce(f, &m, notice, later, NULL);
	began = clock_mono_us() - began;
	if (keep) {
		snprintf(q, sizeof(q), "SET search_path = \"%s\"; SELECT count(*) FROM messages "
			 "WHERE qid = '%s' AND lease_until > %s", f->schema, qid, PG_DB_NOW);
		leased = sql_int(f->url, q);
		PQclear(PQexec(rel.c, "SELECT pg_advisory_unlock(" HELD_LOCK ")"));
	}
	if (keep != 1)
		pthread_join(th, NULL);
	if (keep == 2) {
		deadline_stop_on(-1);
		close(rel.stop);
	}
	log_captured(fd, rel.log, text, sizeof(text));
	PQfinish(rel.c);
	/* the COMMIT over, whatever the store did: its message's row free */
	sql(f, "SET lock_timeout = '10s'; SELECT 1 FROM messages WHERE qid = '%s' FOR UPDATE", qid);
	if (keep) {			/* never ended: it went through once the lock came */
		CHECK_INT("a COMMIT that runs, left to PostgreSQL", rc, STORE_ELEASE);
		CHECK_INT("left before the lease of the row it holds ran out", leased, 1);
		CHECK_INT("the COMMIT that ran, not ended", qid_rows(f, "messages", notice), 1);
	}
	if (keep == 2 && began >= 10 * SEC)
		fail_msg("the store answered %.1f s after the bounce began, past its stop",
			 (double) began / SEC);
	bounce_ended(f, &m, notice, later, rc);
	store_msg_free(&m);
}

/*
 * commit_held - the trigger that holds a bounce's COMMIT on HELD_LOCK,
 * then passes or fails (1); or polls it (2), its client not checked: a
 * COMMIT that runs, where PostgreSQL itself ends one of a cut connection
 * within a second (client_connection_check_interval, store_pg.c)
 */
static void commit_held(struct fx *f, int fails)
{
	char q[640];

	snprintf(q, sizeof(q), "CREATE OR REPLACE FUNCTION commit_held() RETURNS trigger LANGUAGE "
		 "plpgsql AS $$ BEGIN IF NEW.sender = '' THEN %s %s "
		 "END IF; RETURN NULL; END $$; "
		 "DROP TRIGGER IF EXISTS commit_held ON messages; CREATE CONSTRAINT TRIGGER "
		 "commit_held AFTER INSERT ON messages DEFERRABLE INITIALLY DEFERRED FOR EACH ROW "
		 "EXECUTE FUNCTION commit_held()", fails == 2 ? "PERFORM set_config("
		 "'client_connection_check_interval', '0', true); WHILE NOT pg_try_advisory_xact_lock("
		 HELD_LOCK ") LOOP PERFORM pg_sleep(0.05); END LOOP;"
		 : "PERFORM pg_advisory_xact_lock(" HELD_LOCK ");",
		 fails == 1 ? "RAISE EXCEPTION 'the COMMIT fails';" : "");
	sql(f, "%s", q);
}

/* a bounce decided (notice_decided) under a COMMIT held (commit_held): a test's row */
struct decided {
	const char *qid, *notice;
	int later;			/* recipient 1 deferred to later (its lease given up) */
	int held;			/* commit_held()'s: the COMMIT passes, fails, is polled */
	int keep;			/* notice_decided()'s: the lock released, kept, stopped */
	int64_t lease_us;		/* the spool's lease and the cap; 0: TEST_LEASE */
};

/* decided_rows - each of n bounces decided in turn, as its row says */
static void decided_rows(struct fx *f, const struct decided *rows, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		commit_held(f, rows[i].held);
		((struct pg_store *) f->st)->lease_us = rows[i].lease_us ? rows[i].lease_us : TEST_LEASE;
		notice_decided(f, rows[i].qid, rows[i].notice, rows[i].later, rows[i].keep);
		((struct pg_store *) f->st)->lease_us = TEST_LEASE;
	}
}

/*
 * A bounce's notice is written in one transaction with its outcome
 * (deliver_record.c). When its COMMIT is held past the hold (here by a
 * deferred trigger waiting for the test's lock), the store waits for
 * PostgreSQL's decision before it answers: it goes through once the lock
 * is released, and the bounce stands with its notice. Told STORE_EAGAIN
 * (the notice taken as not queued), the delivery would write the
 * recipient deferred: landing after that COMMIT, it queued a bounced
 * recipient again, to be bounced with a second notice; and the notice,
 * voided, was dropped by the settle once the COMMIT ended. Its message
 * still queued (another recipient deferred), due now or later.
 */
static void test_notice_commit_waits(void **state)
{
	static const struct decided rows[] = {
		{ "NOTICEWAIT01", "NOTICEWAIT91", 0, 0, 0, 0 },
		{ "NOTICEWAIT02", "NOTICEWAIT92", 1, 0, 0, 0 },
	};

	decided_rows(*state, rows, 2);
}

/*
 * The same with the notice put before its outcome: the mark
 * (store_msg.notice), not the order of the writes, tells a delivery's
 * puts, waited for. Told by the order, the batch was voided at the hold
 * (STORE_EAGAIN), then its notice dropped by the settle.
 */
static void test_notice_first_commit_waits(void **state)
{
	static const struct decided row = { "NOTICEFRST01", "NOTICEFRST91", 0, 0, 0, 0 };

	notice_first = 1;
	decided_rows(*state, &row, 1);
	notice_first = 0;
}

/*
 * The same COMMIT held, then failing (the trigger raises once the lock
 * is released): no notice, and the bounce's outcome neither, so the
 * message keeps the inflight mark its dot had. Left to PostgreSQL, the
 * leases given up and the deferral refused (84cce52), the next take
 * read that mark as an ambiguous delivery: recorded
 * delivered-unconfirmed, the recipient refused 550, and no notice ever
 * sent. Or held for good, its trigger polling the lock: a backend
 * running its COMMIT is never ended (ended past its commit record, it
 * skips the synchronous standby), and
 * the store leaves it to PostgreSQL (STORE_ELEASE) once half
 * store.lease (8 s here) has gone by, before the lease of the row it
 * holds runs out; it goes through once the lock comes.
 */
static void test_notice_commit_aborts(void **state)
{
	static const struct decided rows[] = {
		{ "NOTICEFAIL01", "NOTICEFAIL91", 0, 1, 0, 0 },
		{ "NOTICEFAIL02", "NOTICEFAIL92", 0, 2, 1, 8 * SEC },
	};

	decided_rows(*state, rows, 2);
}

/*
 * A notice whose COMMIT is waited for past store.lease, taken meanwhile by
 * another node: the test's lock released while a second session (another
 * node's statement on the bounced row) queues behind the transaction,
 * which then gives the notice's lease to that node
 */
struct taken {
	struct release rel;
	struct fx *f;
	const char *qid, *notice;
	char err[256];
};

/* taken_run - the other node, on its own connection (see struct taken) */
static void *taken_run(void *arg)
{
	struct taken *x = arg;
	char q[512];
	PGconn *t2 = PQconnectdb(x->f->url);
	PGresult *res;

	(void) logged_within(x->rel.log, "has no outcome yet");
	/* another node's statement that locks the bounced row (a renewal, an operator's change) */
	snprintf(q, sizeof(q), "SET search_path = \"%s\"; BEGIN; SELECT 1 FROM messages "
		 "WHERE qid = '%s' FOR UPDATE", x->f->schema, x->qid);
	PQsendQuery(t2, q);
	usleep(300000);			/* it queues behind the bounce's transaction */
	PQclear(PQexec(x->rel.c, "SELECT pg_advisory_unlock(" HELD_LOCK ")"));
	while ((res = PQgetResult(t2)) != NULL) {
		if (PQresultStatus(res) == PGRES_FATAL_ERROR)
			snprintf(x->err, sizeof(x->err), "%s", PQerrorMessage(t2));
		PQclear(res);
	}
	/* meanwhile another node takes the notice, whose lease ran out while its COMMIT waited */
	snprintf(q, sizeof(q), "UPDATE messages SET lease_owner = 'nodeB', lease_until = %s + 60000000 "
		 "WHERE qid = '%s'; COMMIT", PG_DB_NOW, x->notice);
	res = PQexec(t2, q);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		snprintf(x->err, sizeof(x->err), "%s", PQerrorMessage(t2));
	PQclear(res);
	PQfinish(t2);
	return NULL;
}

/*
 * The bounce's COMMIT went through while the store waited, but the notice
 * was leased by another node before the store read it back: its row tells,
 * committed (0), and the bounce stands with one notice, where the lease
 * read as not committed queued the bounced recipient again. The COMMIT's
 * trigger polls the gate with client_connection_check_interval off: the
 * store cut its connection at the hold, and waiting for the lock its
 * backend was ended within the check's second, before the release came
 * on a loaded machine (the notice never committed).
 */
static void test_notice_commit_taken(void **state)
{
	struct fx *f = *state;
	struct taken x = { { PQconnectdb(f->url), NULL, -1 }, f, "TAKENBOUNCE1", "TAKENNOTICE1", "" };
	struct store_story s;
	struct store_msg m;
	char text[8192], q[512];
	pthread_t th;
	int hash = 77, rc, fd;

	commit_held(f, 2);
	marked_load(f, x.qid, hash, &m);
	PQclear(PQexec(x.rel.c, "SELECT pg_advisory_lock(" HELD_LOCK ")"));
	fd = log_capture(&x.rel.log);
	assert_int_equal(pthread_create(&th, NULL, taken_run, &x), 0);
	rc = notice_bounce(f, &m, x.notice, 0, NULL);
	pthread_join(th, NULL);
	log_captured(fd, x.rel.log, text, sizeof(text));
	PQfinish(x.rel.c);
	assert_string_equal(x.err, "");	/* the other node's statements ran */
	if (rc != 0) {			/* the delivery's deferral, as deliver_record.c writes it */
		m.rcpts[0].state = STORE_RCPT_QUEUED;
		(void) store_msg_update(f->st, &m);
	}
	CHECK_INT("the notice committed", qid_rows(f, "messages", x.notice), 1);
	snprintf(q, sizeof(q), "SET search_path = \"%s\"; SELECT count(*) FROM messages "
		 "WHERE qid = '%s' AND lease_owner = 'nodeB'", f->schema, x.notice);
	CHECK_INT("its lease another node's", sql_int(f->url, q), 1);
	CHECK_INT("the store reads it committed", rc, 0);
	CHECK_INT("the story", store_story_get(f->st, x.qid, &s), 0);
	CHECK_INT("recipient 0 stays bounced (else bounced again: a second notice)",
		  s.m.rcpts[0].state, STORE_RCPT_BOUNCED);
	store_story_free(&s);
	store_msg_free(&m);
	sql(f, "DROP TRIGGER IF EXISTS commit_held ON messages", NULL);
}

/*
 * The same when the bounce's COMMIT went through but its answer was lost
 * and PostgreSQL could not be reached to read it: the notice was kept to
 * be voided at the node's next use of the database (and dropped, the
 * transaction's id unknown), and the deferral landed. Now the batch is
 * left to PostgreSQL, its lease given up (STORE_ELEASE).
 */
static void test_notice_commit_unreachable(void **state)
{
	struct fx *f = *state;
	struct pg_store *st = (struct pg_store *) f->st;
	struct store_msg m;
	int hash = 99;

	marked_load(f, "NOTICEAWAY01", hash, &m);
	CHECK_INT("left to PostgreSQL", notice_bounce(f, &m, "NOTICEAWAY91", 0, cut_off),
		  STORE_ELEASE);
	back(st);
	notice_once(f, &m, "NOTICEAWAY91", 1);
	store_msg_free(&m);
}

/*
 * a statement's limit while the bounce's outcome is decided: the
 * reconnect backoff (0.1 s, doubled at each failure) tries at about 2 s,
 * then not before about 3.6 s
 */
#define AWAY_LIMIT	(5 * SEC / 2)

/* a COMMIT waits at the gate */
#define GATE_WAIT "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() " \
	"AND query = 'COMMIT' AND wait_event = 'advisory'"

/*
 * cut_gated - the commit hook: once the COMMIT waits at the gate, its
 * answer lost and the database away (cut_away); AWAY_LIMIT the limit
 */
static void cut_gated(PGconn *c)
{
	char q[160];

	snprintf(q, sizeof(q), "SELECT count(*) FROM pg_stat_activity WHERE pid = %d "
		 "AND query = 'COMMIT' AND wait_event = 'advisory'", PQbackendPID(c));
	(void) seen_within(q);		/* the test's held_start says if it was not */
	cut_away(c);
	result_us = AWAY_LIMIT;
}

/* held_bounce - the bounce of h->m (notice_bounce), its COMMIT cut at the gate */
static int held_bounce(struct held *h)
{
	return notice_bounce(hook_fx, h->m, "NOTICEGONE91", 0, cut_gated);
}

/*
 * outage_end - PostgreSQL reachable for st again before at has passed
 * since from: once st's next try, backed off, falls half a second past
 * at, or a quarter second before at if it never does. st finds out when
 * it tries. The dead URL, to be freed once no connection can be opened
 * with it.
 */
static char *outage_end(struct pg_store *st, int64_t from, int64_t at)
{
	int64_t next = 0;
	char *dead;

	while (clock_mono_us() < from + at - SEC / 4 && next <= from + at + SEC / 2) {
		usleep(10000);
		pthread_mutex_lock(&st->mu);
		next = st->down ? st->next_try : 0;
		pthread_mutex_unlock(&st->mu);
	}
	pthread_mutex_lock(&st->mu);
	dead = st->url;
	st->url = away_url;
	pthread_mutex_unlock(&st->mu);
	return dead;
}

/*
 * aborted_away - a bounce's COMMIT (its outcome and its notice, one
 * transaction) held at the gate, its answer lost and the node cut off
 * from PostgreSQL; its backend ended, so that it aborts; PostgreSQL back
 * for the node before at, the end of the store's wait (a statement's
 * limit of PostgreSQL away, or the cap of half store.lease less that
 * limit, whichever comes first), but after its last try before it (the
 * reconnect backoff doubles). The end is the good one (bounce_ended):
 * here no notice, the recipient queued, the mark cleared, bounced again
 * with one notice. The store looked no more once that end had passed,
 * and its backoff put its next try past it: left to PostgreSQL, the
 * leases given up and the deferral refused, the mark kept without a
 * notice, read by the next take as an ambiguous delivery.
 */
static void aborted_away(struct fx *f, const char *qid, int64_t lease_us, int64_t at)
{
	struct pg_store *st = (struct pg_store *) f->st;
	struct store_msg m;
	struct held h;
	char text[8192], *dead;
	int64_t from;
	PGconn *g;
	FILE *log;
	int hash = 96, fd, waited, aborted;

	st->lease_us = lease_us;
	marked_load(f, qid, hash, &m);
	hook_fx = f;
	g = gate_shut(f);
	fd = log_capture(&log);
	held_start(&h, held_bounce, f->st, &m, GATE_WAIT);
	waited = logged_within(log, "has no outcome yet");
	from = clock_mono_us();
	(void) sql_int(f->url, "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM "
		       "pg_stat_activity WHERE datname = current_database() AND query = 'COMMIT' "
		       "AND wait_event = 'advisory') x");
	aborted = seen_within("SELECT 1 - count(*) FROM pg_stat_activity WHERE datname = "
			      "current_database() AND query = 'COMMIT' AND wait_event = 'advisory'");
	gate_open(g);			/* the COMMIT aborted: nothing more to hold */
	dead = outage_end(st, from, at);
	pthread_join(h.th, NULL);
	log_captured(fd, log, text, sizeof(text));
	free(dead);
	pthread_mutex_lock(&st->mu);
	st->next_try = 0;		/* its next try due: the delivery goes on */
	pthread_mutex_unlock(&st->mu);
	st->lease_us = TEST_LEASE;
	bounce_ended(f, &m, "NOTICEGONE91", 0, h.rc);
	CHECK_INT("the store waited for PostgreSQL's decision", waited, 1);
	CHECK_INT("the COMMIT's backend ended", aborted, 1);
	store_msg_free(&m);
}

/* test_notice_commit_aborted_away - aborted_away(), its wait ended by the statement's limit */
static void test_notice_commit_aborted_away(void **state)
{
	aborted_away(*state, "NOTICEGONE01", TEST_LEASE, AWAY_LIMIT);
}

/*
 * test_notice_commit_aborted_capped - aborted_away(), its wait ended by
 * the cap first, as at the defaults (store.lease 30 s, a statement's
 * limit 10 s: the cap 5 s after the wait starts, the limit 10 s), scaled
 * to the test's limit: the cap half the limit. Without its own last try
 * the cap cut the wait short of it.
 */
static void test_notice_commit_aborted_capped(void **state)
{
	aborted_away(*state, "NOTICEGONE02", 2 * (AWAY_LIMIT + AWAY_LIMIT / 2), AWAY_LIMIT / 2);
}

/*
 * The delivery stopping (the daemon's SIGTERM: deliver_stop() makes the
 * thread's stop readable, deadline_stop_on()) while the store waits for
 * a bounce's COMMIT that runs (held for good, as in
 * test_notice_commit_aborts): the wait ends at the stop, the COMMIT left
 * to PostgreSQL as at the cap (STORE_ELEASE), and it goes through once
 * the lock comes. The wait went on to its cap, half store.lease less a
 * statement's limit (60 s here), holding up the daemon's exit.
 */
static void test_notice_commit_stopped(void **state)
{
	static const struct decided row = { "NOTICESTOP01", "NOTICESTOP91", 0, 2, 2, 120 * SEC };

	decided_rows(*state, &row, 1);
}

/* a bounce's pipeline cut after its UPDATE: the test's lock on the row, the node's socket */
struct partial {
	PGconn *lock;			/* owned: the test's connection, which holds the row */
	const char *url;
	int kept;			/* the node's socket, kept open (a cut that closes nothing); -1 */
};

/* sock_of_port - this process's descriptor of a socket at local port port; -1 none */
static int sock_of_port(int port)
{
	struct sockaddr_in a;
	socklen_t n;
	int fd;

	for (fd = 3; fd < 1024; fd++) {
		n = sizeof(a);
		if (getsockname(fd, (struct sockaddr *) &a, &n) == 0 && a.sin_family == AF_INET
		    && ntohs(a.sin_port) == port)
			return fd;
	}
	return -1;
}

/*
 * partial_run - once the bounce's UPDATE waits for the test's row lock
 * and the rest of its pipeline (the notice's INSERT) sits unsent in the
 * node's socket, that socket is cut where nothing closes it (kept), and
 * the row released: the backend gets the part sent, runs it and waits
 * for the rest, its COMMIT never coming. Each wait 10 s at most.
 */
static void *partial_run(void *arg)
{
	struct partial *x = arg;
	int64_t deadline = clock_mono_us() + 10 * SEC;
	PGconn *o = PQconnectdb(x->url);
	PGresult *r;
	char q[256];
	int port = -1, fd = -1, queued = 0, last = -1, sv[2];

	snprintf(q, sizeof(q), "SELECT client_port FROM pg_stat_activity WHERE %d = ANY"
		 "(pg_blocking_pids(pid))", PQbackendPID(x->lock));
	while (port < 0 && clock_mono_us() < deadline) {
		r = PQexec(o, q);
		if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
			port = atoi(PQgetvalue(r, 0, 0));
		PQclear(r);
		usleep(10000);
	}
	fd = port > 0 ? sock_of_port(port) : -1;
	while (fd >= 0 && clock_mono_us() < deadline
	       && !(ioctl(fd, SIOCOUTQ, &queued) == 0 && queued > 0 && queued == last)) {
		last = queued;
		usleep(100000);
	}
	if (fd >= 0 && queued > 0 && queued == last
	    && socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0) {
		x->kept = dup(fd);	/* the connection stays open: PostgreSQL sees no end */
		(void) dup2(sv[0], fd);	/* the node's next write fails */
		close(sv[0]);
		close(sv[1]);
	}
	PQclear(PQexec(x->lock, "ROLLBACK"));
	PQfinish(o);
	return NULL;
}

/*
 * partial_cut - the bounce of qid whose pipeline is cut after part of it
 * (partial_run), its store.lease lease_us while the store waits (the
 * spool's is the fixture's); then the delivery goes on (bounce_ended)
 */
static void partial_cut(struct fx *f, const char *qid, const char *notice, int64_t lease_us)
{
	struct partial x = { PQconnectdb(f->url), f->url, -1 };
	struct store_msg m;
	PGresult *r;
	pthread_t th;
	char q[128];
	int hash = 88, rc;

	marked_load(f, qid, hash, &m);
	snprintf(q, sizeof(q), "BEGIN; SELECT 1 FROM messages WHERE qid = '%s' FOR UPDATE", qid);
	r = PQexec(x.lock, q);
	CHECK_INT("the test holds the row", PQresultStatus(r), PGRES_TUPLES_OK);
	PQclear(r);
	assert_int_equal(pthread_create(&th, NULL, partial_run, &x), 0);
	notice_size = 24u << 20;	/* more than the sockets hold between the two */
	((struct pg_store *) f->st)->lease_us = lease_us;
	rc = notice_bounce(f, &m, notice, 0, NULL);
	((struct pg_store *) f->st)->lease_us = TEST_LEASE;
	notice_size = 100;
	pthread_join(th, NULL);
	if (x.kept >= 0)
		close(x.kept);		/* the backend, if it is still there, sees the end */
	PQfinish(x.lock);
	CHECK_INT("the pipeline was cut in its middle", x.kept >= 0, 1);
	bounce_ended(f, &m, notice, 0, rc);
	CHECK_INT("decided: its COMMIT never came, its backend ended", rc, STORE_EAGAIN);
	store_msg_free(&m);
}

/*
 * A bounce's pipeline (its outcome's UPDATE, its notice's INSERT, COMMIT)
 * cut after part of it reached PostgreSQL (here the UPDATE and part of a
 * 24 MB notice, the rest unsent when the node's connection went; in life
 * a network gone in mid-send): the backend runs what came and waits for
 * the rest, the transaction open and the bounced row locked. It is not
 * idle in its transaction as PostgreSQL counts it ('active', ClientRead):
 * the store, which ended only an idle one, waited for the cap and left
 * it to PostgreSQL, the bounced message's inflight mark kept without a
 * notice (an ambiguous delivery at the next take, no notice ever); and
 * the backend held the row until TCP keepalive. Now it is ended as an
 * idle one is: decided, not committed (STORE_EAGAIN), and the recipient
 * deferred, to be bounced again with one notice.
 */
static void test_notice_commit_partial(void **state)
{
	partial_cut(*state, "NOTICEPART01", "NOTICEPART91", TEST_LEASE);
}

/*
 * The same at a short store.lease (2 s here: half of it less the limit,
 * 0.5 s, comes before the backend is looked at, after PG_LOOK_US): the
 * store left at the cap without looking at the backend once (note 16:
 * under about 22 s at the defaults); now, while the rows are held, it
 * waits until it has looked and could see the end.
 */
static void test_notice_commit_partial_short(void **state)
{
	partial_cut(*state, "NOTICEPART02", "NOTICEPART92", 2 * SEC);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_notice_commit_waits),
		T(test_notice_first_commit_waits),
		T(test_notice_commit_aborts),
		T(test_notice_commit_taken),
		T(test_notice_commit_unreachable),
		T(test_notice_commit_aborted_away),
		T(test_notice_commit_aborted_capped),
		T(test_notice_commit_stopped),
		T(test_notice_commit_partial),
		T(test_notice_commit_partial_short),
	};

	return PG_RUN("store_pg_notice", tests);
}
