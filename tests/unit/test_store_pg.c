/*
 * test_store_pg - what only the PostgreSQL backend has (store/pg/): node
 * names and slots, a second node of one name refused, the schema's
 * version (a newer one refused, a client finding none), an unreachable
 * server, delivery leases and their fencing, a take that skips a route
 * reading none of its backlog, renewal (also while an
 * accepting commit is in flight), a deferred message
 * going back to the shared queue, drop against another node's lease, two
 * nodes racing on one key, and a commit whose outcome was unknown read
 * back, one that committed while PostgreSQL could not be reached to read
 * it (451, then voided before the node's next use of the database, with
 * or without the id the key locks give; a settling whose void stalls never
 * hangs the node, and voids one whose id reads as aborted, but not one
 * another node replayed or took for delivery, while it was cut off past
 * the lease; a replay whose own commit's answer is lost read back by its
 * mark, once that COMMIT has ended (none, one that never ran: 451); kept while its status read is refused for a
 * passing reason, a cancel, as its COMMIT still waits; settled at a clean
 * stop, and by a take it was kept during; a void's settle waits for a
 * replay in flight, and leaves a message whose take commits while it
 * deletes; a take begun before a void committed leaves its message),
 * what a batch of duplicates and the counts' flush
 * write (rows, and whether it commits), a result that
 * never comes, statements prepared per connection (a
 * batch's BEGIN and COMMIT too), a message and its recipients read in
 * one statement, a
 * lost lease in a group commit failing only its own write, its marks and
 * outcomes of several messages one statement a kind; a verdict
 * another node made on a mark whose node sent no final dot undone
 * (store_msg_revive), also while it commits, and each case where it must
 * not be; the mark's
 * columns written by the statements, not by the trigger's function; a
 * key's messages found through its claims, messages having no key index; the
 * queue walked past a message whose recipients are missing; the expiry on
 * one node at a time; a version 1
 * schema upgraded, and one of version 10 whose reads go on while migration 11
 * builds its index; a server with no connection slot free while the node
 * has connections of its own (no outage: callers wait for one of them);
 * the settings a URL's options give kept over ours; the pooler probe
 * skipped when the server has no slot for its connections; a bounce's
 * notice, put with its outcome, whose COMMIT waits past the hold, or
 * whose answer is lost with PostgreSQL away: not voided, and the deferral
 * its delivery writes next refused; its wait ended by the delivery's
 * stop, its backend ended when its pipeline was cut in its middle; a
 * backend left idle in a node's transaction (the node cut off) ended by
 * the server.
 * Each test has a schema of its own (test_store_fx.h); a second
 * node is a second handle on it. Skipped without IDEMRELAY_PG_URL.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../store/store.h"
#include "../../store/pg/store_pg_int.h"
#include "../../util/buf.h"
#include "../../util/clock.h"
#include "../../util/deadline.h"
#include "test_store_help.h"
#include "test_commit_help.h"

/* what the tests change in the backend, through its link seam (store_pg_seam.c) */
static void (*commit_hook) (PGconn *c);		/* a commit sent, its results not read */
static int64_t result_us = PG_RESULT_US;		/* the longest wait for a result */
static const struct store_change due_now = { -1, 0, NULL, NOW };	/* a retry, a flush */

/* store_pg_result_limit - this test's, instead of store_pg_seam.c's */
int64_t store_pg_result_limit(void)
{
	return result_us;
}

/* store_pg_commit_sent - this test's: commit_hook, if set */
void store_pg_commit_sent(PGconn *c)
{
	if (commit_hook)
		commit_hook(c);
}

#define ROUNDS		30

/* node_open - a second node on the fixture's schema */
static struct store *node_open(struct fx *f, const char *name)
{
	struct store *st = NULL;
	char err[512] = "";
	int rc;

	if ((rc = store_pg_open(&st, f->url, name, TEST_LEASE, err, sizeof(err))) != 0)
		fail_msg("open node %s: got %d (%s), want 0", name, rc, err);
	return st;
}

/* sql - run sql with the fixture's schema first in the search path */
static void sql(struct fx *f, const char *fmt, const char *arg)
{
	char text[1024], q[1200];

	snprintf(text, sizeof(text), fmt, arg ? arg : "");
	snprintf(q, sizeof(q), "SET search_path = \"%s\"; %s", f->schema, text);
	fx_pg_sql(q);
}

/* count_cb - count the messages offered */
static int count_cb(void *arg, const struct store_msg *m)
{
	(void) m;
	(*(int *) arg)++;
	return 0;
}

/* taken - how many due messages node st takes at now */
static int taken(struct store *st, int64_t now)
{
	int n = 0;

	CHECK_INT("queue_take", store_queue_take(st, now, 100, NULL, 0, count_cb, &n), 0);
	return n;
}

/* listed - how many messages node st holds leased */
static int listed(struct store *st)
{
	int n = 0;

	CHECK_INT("queue_list", store_queue_walk(st, STORE_WALK_MINE, count_cb, &n), 0);
	return n;
}

/* spool_one - a message of one recipient with a claim, leased to st by its acceptance */
static void spool_one(struct store *st, const char *qid, int hash)
{
	struct store_msg m;

	msg_new(&m, qid, 1, 100);
	CHECK_INT(qid, spool(st, &m, &hash, 1, NOW + SEC), 0);
	store_msg_free(&m);
}

/* sent - st's update of qid: its one recipient sent */
static int sent(struct store *st, const char *qid)
{
	struct store_msg m;
	int rc;

	msg_new(&m, qid, 1, 100);
	m.rcpts[0].state = STORE_RCPT_SENT;
	rc = store_msg_update(st, &m);
	store_msg_free(&m);
	return rc;
}

static void test_nodes(void **state)
{
	struct fx *f = *state;
	struct store *b, *again = NULL;
	char err[512] = "";
	int i;

	CHECK_STR("backend", store_backend(f->st), "postgresql");
	CHECK_INT("shared", store_caps(f->st), STORE_CAP_SHARED);
	CHECK_INT("first node's slot", store_node_id(f->st), 0);
	CHECK_INT("same name again", store_pg_open(&again, f->url, TEST_NODE, TEST_LEASE, err,
						   sizeof(err)), STORE_EINVAL);
	if (again != NULL || strstr(err, "node " TEST_NODE " is running already") == NULL)
		fail_msg("second node of one name: got \"%s\", want it refused as running", err);
	b = node_open(f, "node-b");
	CHECK_INT("second node's slot", store_node_id(b), 1);
	store_close(b);
	b = node_open(f, "node-c");
	CHECK_INT("third node's slot", store_node_id(b), 2);
	store_close(b);
	b = node_open(f, "node-b");
	CHECK_INT("a name keeps its slot", store_node_id(b), 1);
	store_close(b);
	fx_reopen(f, TEST_MAP);
	CHECK_INT("after a restart", store_node_id(f->st), 0);
	/* a restart at once finds the slot's lock given up, every time */
	for (i = 0; i < 20; i++) {
		b = node_open(f, "node-b");
		store_close(b);
	}
}

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
	CHECK_INT("renew", store_lease_renew(f->st, clock_us()), 0);
	CHECK_INT("A holds both", listed(f->st), 2);
	CHECK_INT("B takes none", taken(b, clock_us()), 0);
	sql(f, "UPDATE messages SET lease_until = 0 WHERE qid = 'RENEW0000002'", NULL);
	CHECK_INT("B takes the one whose lease ran out", taken(b, clock_us()), 1);
	CHECK_INT("renew again", store_lease_renew(f->st, clock_us()), 0);
	CHECK_INT("A holds what it renewed", listed(f->st), 1);
	CHECK_INT("B renews", store_lease_renew(b, clock_us()), 0);
	CHECK_INT("B holds its own", listed(b), 1);
	store_lease_release(f->st, "RENEW0000001", 0);
	CHECK_INT("A released it", listed(f->st), 0);
	CHECK_INT("B takes it", taken(b, clock_us()), 1);
	store_close(b);
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
	/* the server ends the holder if a failed check leaves it behind */
	snprintf(q, sizeof(q), "SET search_path = \"%s\"; SET idle_in_transaction_session_timeout"
		 " = '5s'; BEGIN; SELECT 1 FROM messages WHERE qid = 'RENEWLK00001' FOR UPDATE",
		 f->schema);
	r = PQexec(o, q);
	CHECK_INT("the other transaction holds the row", PQresultStatus(r), PGRES_TUPLES_OK);
	PQclear(r);
	snprintf(q, sizeof(q), "SET search_path = \"%s\"; SELECT lease_until FROM messages "
		 "WHERE qid = 'RENEWLK00002'", f->schema);
	r = PQexec(o, q);			/* text results: PQexec */
	before = atoll(PQgetvalue(r, 0, 0));
	PQclear(r);
	began = clock_us();
	CHECK_INT("renew", store_lease_renew(f->st, clock_us()), 0);
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
	CHECK_INT("renew while the COMMIT waits", store_lease_renew(f->st, clock_us()), 0);
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

/*
 * Calls by one thread, counted: the locks of one mutex, or the key locks
 * derived (with counted NULL, n_keyed >= 0), or the integers decoded from
 * results (n_ints >= 0). This binary wraps the three (Makefile).
 */
static pthread_mutex_t *counted;
static pthread_t counter;
static int n_counted, n_keyed = -1, n_ints = -1;
static struct pg_store *late_st;	/* at its lock late_at, a batch kept */
static int late_at;

static void pend_fake(struct pg_store *st, const char *qid, int64_t xid);
int __real_pthread_mutex_lock(pthread_mutex_t *m);
int64_t __real_store_pg_key_lock(const uint8_t keyhash[STORE_HASH_LEN]);

int __wrap_pthread_mutex_lock(pthread_mutex_t *m)
{
	struct pg_store *st = late_st;

	if (m == counted && pthread_equal(pthread_self(), counter) && ++n_counted == late_at
	    && st != NULL) {
		late_st = NULL;
		pend_fake(st, "LATEPEND0001", 0);	/* locks mu: counted, past late_at */
	}
	return __real_pthread_mutex_lock(m);
}

int64_t __wrap_store_pg_key_lock(const uint8_t keyhash[STORE_HASH_LEN])
{
	if (n_keyed >= 0 && pthread_equal(pthread_self(), counter))
		n_keyed++;
	return __real_store_pg_key_lock(keyhash);
}

int64_t __real_store_pg_int(const PGresult *r, int row, int col);

int64_t __wrap_store_pg_int(const PGresult *r, int row, int col)
{
	if (n_ints >= 0 && pthread_equal(pthread_self(), counter))
		n_ints++;
	return __real_store_pg_int(r, row, col);
}

/* test_take_locks_once - a connection of the pool, no batch kept to settle: mu locked once */
static void test_take_locks_once(void **state)
{
	struct fx *f = *state;
	struct pg_store *pst = (struct pg_store *) f->st;
	PGconn *c;

	CHECK_INT("a first take", store_pg_take(pst, &c), 0);
	store_pg_give(pst, c);		/* idle now */
	counter = pthread_self();
	n_counted = 0;
	counted = &pst->mu;
	CHECK_INT("take", store_pg_take(pst, &c), 0);
	counted = NULL;
	store_pg_give(pst, c);
	CHECK_INT("locks of mu", n_counted, 1);
}

/*
 * A batch kept while a take connected (mu dropped: it looked at the
 * kept batches before) is settled on that connection before the caller
 * has it: the take found none idle, and the batch was kept at its next
 * lock of mu, after its look
 */
static void test_take_settles_late(void **state)
{
	struct fx *f = *state;
	struct pg_store *pst = (struct pg_store *) f->st;
	PGconn *c;

	pthread_mutex_lock(&pst->mu);	/* none idle: the take connects */
	while (pst->n_idle > 0) {
		PQfinish(pst->idle[--pst->n_idle]);
		pst->n_open--;
	}
	pthread_mutex_unlock(&pst->mu);
	counter = pthread_self();
	n_counted = 0;
	late_at = 2;
	late_st = pst;
	counted = &pst->mu;
	CHECK_INT("take", store_pg_take(pst, &c), 0);
	counted = NULL;
	CHECK_INT("a batch kept during the take", late_st == NULL, 1);
	CHECK_INT("settled before the connection was had", (int) pst->n_pend, 0);
	store_pg_give(pst, c);
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
	CHECK_INT("and renewed", store_lease_renew(f->st, clock_us()), 0);
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

struct racer {
	struct store *st;
	const char *node;
	pthread_barrier_t *start;
	char qids[ROUNDS][STORE_QID_SIZE];	/* what each round answered */
	int err;
};

/* race_round - one submission of round r's key: a duplicate names the winner's QID */
static int race_round(struct racer *w, int r)
{
	uint8_t kh[1][STORE_HASH_LEN] = { { 0 } }, h[STORE_HASH_LEN];
	struct store_claim c;
	struct store_txn *t;
	struct store_msg m;
	char qid[STORE_QID_SIZE];
	int rc;

	kh[0][0] = 0x52;
	kh[0][1] = (uint8_t) r;
	hash_of(h, 9000 + r);
	snprintf(qid, sizeof(qid), "RACE%02d%.6s", r, w->node);
	if ((rc = store_txn_begin(w->st, (const uint8_t (*)[STORE_HASH_LEN]) kh, 1, &t)) != 0)
		return rc;
	if ((rc = store_txn_claim_get(t, kh[0], h, NOW, &c)) == 0) {
		strcpy(w->qids[r], c.qid);	/* a duplicate: the other node's */
		txn_abort(t);
		return 0;
	}
	msg_new(&m, qid, 1, 50);
	store_txn_msg_put(t, &m);
	store_msg_free(&m);
	claim_of(&c, qid, 1, NOW + SEC);
	store_txn_claim_put(t, kh[0], h, &c);
	if ((rc = store_txn_commit(t)) == 0)
		strcpy(w->qids[r], qid);
	return rc;
}

/* racer_main - every round at the same instant as the other node */
static void *racer_main(void *arg)
{
	struct racer *w = arg;
	int r, rc, tries;

	for (r = 0; r < ROUNDS && w->err == 0; r++) {
		pthread_barrier_wait(w->start);
		for (tries = 0; (rc = race_round(w, r)) == STORE_EAGAIN && tries < 5; tries++)
			;
		w->err = rc;
	}
	return NULL;
}

/* two nodes, one key per round, submitted at once: one message, one QID for both */
static void test_race_two_nodes(void **state)
{
	struct fx *f = *state;
	struct racer w[2];
	pthread_t th[2];
	pthread_barrier_t start;
	uint8_t kh[STORE_HASH_LEN] = { 0x52 };
	char (*qids)[STORE_QID_SIZE], what[64];
	size_t n;
	int i, r;

	memset(w, 0, sizeof(w));
	pthread_barrier_init(&start, NULL, 2);
	w[0].st = f->st;
	w[0].node = "nodeA";
	w[1].st = node_open(f, "node-b");
	w[1].node = "nodeB";
	for (i = 0; i < 2; i++) {
		w[i].start = &start;
		assert_int_equal(pthread_create(&th[i], NULL, racer_main, &w[i]), 0);
	}
	for (i = 0; i < 2; i++) {
		pthread_join(th[i], NULL);
		CHECK_INT("racer error", w[i].err, 0);
	}
	for (r = 0; r < ROUNDS; r++) {
		snprintf(what, sizeof(what), "round %d: one QID for both", r);
		CHECK_STR(what, w[0].qids[r], w[1].qids[r]);
		kh[1] = (uint8_t) r;
		CHECK_INT("key qids", store_key_qids(f->st, kh, &qids, &n), 0);
		snprintf(what, sizeof(what), "round %d: messages under the key", r);
		CHECK_INT(what, n, 1);
		CHECK_STR(what, qids[0], w[0].qids[r]);
		free(qids);
	}
	store_close(w[1].st);
	pthread_barrier_destroy(&start);
}

static struct fx *hook_fx;
static const char *hook_qid;

/* cut_after_commit - the commit hook: wait until the commit is visible, then cut the connection */
static void cut_after_commit(PGconn *c)
{
	char q[256];
	int64_t deadline = clock_mono_us() + 5 * SEC;
	PGconn *o = PQconnectdb(hook_fx->url);
	PGresult *r;
	int seen = 0, sv[2];

	snprintf(q, sizeof(q), "SELECT 1 FROM messages WHERE qid = '%s'", hook_qid);
	while (!seen && clock_mono_us() < deadline) {
		r = PQexec(o, q);
		seen = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
		PQclear(r);
		if (!seen)
			usleep(10000);
	}
	PQfinish(o);
	if (!seen)
		fail_msg("the commit did not become visible within 5 s");
	/* its result is lost on the way: the connection's socket now reads end of file */
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0 || dup2(sv[0], PQsocket(c)) < 0)
		fail_msg("socketpair: %s", strerror(errno));
	close(sv[0]);
	close(sv[1]);
}

static PGconn *blocker;

/* kill_blocked - the commit hook: end the backend while it waits on a lock, COMMIT unrun */
static void kill_blocked(PGconn *c)
{
	char q[128];
	PGresult *r;

	usleep(200000);			/* it waits for the blocker's row by now */
	snprintf(q, sizeof(q), "SELECT pg_terminate_backend(%d)", PQbackendPID(c));
	r = PQexec(blocker, q);
	PQclear(r);
}

/* a commit whose result never came: read back, committed or not */
static void test_unknown_commit(void **state)
{
	struct fx *f = *state;
	struct store_msg m;
	PGresult *r;
	char q[256];
	int hash = 77;

	hook_fx = f;
	hook_qid = "UNKNOWN00001";
	commit_hook = cut_after_commit;
	msg_new(&m, hook_qid, 1, 100);
	CHECK_INT("committed, read back", spool(f->st, &m, &hash, 1, NOW + SEC), 0);
	commit_hook = NULL;
	store_msg_free(&m);
	CHECK_INT("its lease was read back too", store_msg_set_inflight(f->st, hook_qid, 1), 0);
	CHECK_INT("its claim", claim_found(f->st, 77, NOW, NULL), 1);

	/* another transaction holds the claim's row: the commit waits, then its backend ends */
	blocker = PQconnectdb(f->url);
	snprintf(q, sizeof(q), "BEGIN; UPDATE claims SET expires = expires WHERE qid = '%s'",
		 hook_qid);
	r = PQexec(blocker, q);
	CHECK_INT("blocker", PQresultStatus(r), PGRES_COMMAND_OK);
	PQclear(r);
	commit_hook = kill_blocked;
	msg_new(&m, "UNKNOWN00002", 1, 100);
	CHECK_INT("not committed, read back", spool(f->st, &m, &hash, 1, NOW + SEC), STORE_EAGAIN);
	commit_hook = NULL;
	store_msg_free(&m);
	r = PQexec(blocker, "ROLLBACK");
	PQclear(r);
	PQfinish(blocker);
	CHECK_INT("nothing of it", store_msg_load(f->st, "UNKNOWN00002", &m), STORE_ENOTFOUND);
	CHECK_INT("the store serves on", store_msg_set_inflight(f->st, hook_qid, 0), 0);
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

/* loaded_from - the sender of qid as store_msg_load() gives it, and its held flag */
static void loaded_from(struct store *st, const char *qid, const char *want, int held)
{
	struct store_msg l;

	CHECK_INT(qid, store_msg_load(st, qid, &l), 0);
	CHECK_STR("its sender", l.from, want);
	CHECK_INT("held", l.held, held);
	store_msg_free(&l);
}

/*
 * The accepting node's first load of a message it put is its own copy
 * (store_pg_keep.c), not a statement: a row changed behind the store's
 * back shows in the second load only. No copy is used once this node
 * wrote the message (a hold), or once the lease it was put under is no
 * longer held here.
 */
static void test_keep_first_load(void **state)
{
	struct fx *f = *state;
	struct pg_store *pst = (struct pg_store *) f->st;
	const struct store_change hold = { 1, 0, NULL, 0 };

	spool_one(f->st, "KEEPMSG00001", 41);
	spool_one(f->st, "KEEPMSG00002", 42);
	spool_one(f->st, "KEEPMSG00003", 43);
	sql(f, "UPDATE messages SET sender = 'changed@example.com' WHERE qid LIKE '%sKEEPMSG%%'", "");
	loaded_from(f->st, "KEEPMSG00001", "sender@example.com", 0);	/* the copy */
	loaded_from(f->st, "KEEPMSG00001", "changed@example.com", 0);	/* taken once */
	CHECK_INT("hold", store_msg_change(f->st, "KEEPMSG00002", &hold), 0);
	loaded_from(f->st, "KEEPMSG00002", "changed@example.com", 1);
	store_pg_lease_del(pst, "KEEPMSG00003", 0);	/* as a renewal that found it gone */
	loaded_from(f->st, "KEEPMSG00003", "changed@example.com", 0);
	CHECK_INT("no copy left", (int) pst->keep_bytes, 0);
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
	CHECK_INT("renew", store_lease_renew(f->st, clock_us()), 0);
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
	CHECK_INT("the seed's lease outlives a slow fill", store_lease_renew(f->st, clock_us()), 0);
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

/* the writer held in its first commit (commit_hook), so that what comes next shares one */
static sem_t writer_in, writer_go;

static void hold_writer(PGconn *c)
{
	(void) c;
	commit_hook = NULL;
	sem_post(&writer_in);
	sem_wait(&writer_go);
}

static int gc_answered;

static void gc_done(struct commit_req *r)
{
	(void) r;
	gc_answered++;
}

static void gc_committed(void *arg, const char *qid)
{
	(void) arg;
	(void) qid;
}

struct gc_mark {
	struct commit *cm;
	const char *qid;
	int err;
};

static void gc_mark_fn(struct store_txn *t, void *qid)
{
	store_txn_msg_set_inflight(t, qid, 1);
}

static void *gc_mark_thread(void *arg)
{
	struct gc_mark *g = arg;

	g->err = commit_run(g->cm, gc_mark_fn, (void *) g->qid);
	return NULL;
}

/*
 * test_group_commit_lost_lease - delivery writes ride in the submissions'
 * group commit on PostgreSQL too: a mark whose lease went to another node
 * fails the transaction it shares, and then it alone (STORE_ELEASE, no
 * mark written), while the submission beside it is committed and queued
 */
static void test_group_commit_lost_lease(void **state)
{
	static const char *const a[] = { "a@example.com" };
	struct fx *f = *state;
	struct store *b = node_open(f, "node-b");
	struct commit *cm = commit_start(f->st, gc_committed, NULL);
	struct commit_req *r0 = req_make("GCFIRST00001", "gc0", "x\r\n", a, 1, gc_done),
		*r1 = req_make("GCBESIDE0001", "gc1", "y\r\n", a, 1, gc_done);
	struct gc_mark g = { cm, "GCLOST000001", -1 };
	struct store_msg m;
	pthread_t th;
	int i;

	spool_one(f->st, "GCLOST000001", 1);
	sql(f, "UPDATE messages SET lease_until = 0", NULL);	/* A's lease runs out */
	CHECK_INT("B takes it", taken(b, clock_us()), 1);

	gc_answered = 0;
	assert_int_equal(sem_init(&writer_in, 0, 0), 0);
	assert_int_equal(sem_init(&writer_go, 0, 0), 0);
	commit_hook = hold_writer;
	commit_submit(cm, r0);
	sem_wait(&writer_in);		/* the writer is in r0's commit */
	assert_int_equal(pthread_create(&th, NULL, gc_mark_thread, &g), 0);
	commit_submit(cm, r1);
	usleep(100000);			/* the mark is waiting beside r1 */
	sem_post(&writer_go);
	pthread_join(th, NULL);
	for (i = 0; i < 5000 && gc_answered < 2; i++) {
		usleep(1000);
		commit_reap(cm);
	}
	CHECK_INT("both submissions answered", gc_answered, 2);
	CHECK_INT("the mark: lease lost", g.err, STORE_ELEASE);
	CHECK_INT("r0 queued", r0->outcome, COMMIT_QUEUED);
	CHECK_INT("r1 queued beside the lost mark", r1->outcome, COMMIT_QUEUED);
	CHECK_INT("r1 in the store", store_msg_load(f->st, "GCBESIDE0001", &m), 0);
	store_msg_free(&m);
	CHECK_INT("B's message", store_msg_load(b, "GCLOST000001", &m), 0);
	CHECK_INT("no mark written on it", m.inflight, 0);
	store_msg_free(&m);
	commit_stop(cm);
	sem_destroy(&writer_in);
	sem_destroy(&writer_go);
	req_free(r0);
	req_free(r1);
	store_close(b);
}

/* sql_int - the first column of the first row of query on the schema, as text read as a number */
static long long sql_int(const char *url, const char *query)
{
	PGconn *o = PQconnectdb(url);
	PGresult *r = PQexec(o, query);
	long long v;

	if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
		fail_msg("%s: %s", query, PQerrorMessage(o));
	v = PQgetisnull(r, 0, 0) ? -1 : strcmp(PQgetvalue(r, 0, 0), "t") == 0 ? 1
	    : strcmp(PQgetvalue(r, 0, 0), "f") == 0 ? 0 : atoll(PQgetvalue(r, 0, 0));
	PQclear(r);
	PQfinish(o);
	return v;
}

/* void_count - rows of voids */
static long long void_count(struct fx *f)
{
	char q[256];

	snprintf(q, sizeof(q), "SET search_path = \"%s\"; SELECT count(*) FROM voids", f->schema);
	return sql_int(f->url, q);
}

/* qid_rows - rows of table (messages, claims, rcpts) that name qid */
static long long qid_rows(struct fx *f, const char *table, const char *qid)
{
	char q[256];

	snprintf(q, sizeof(q), "SET search_path = \"%s\"; SELECT count(*) FROM %s WHERE qid = '%s'",
		 f->schema, table, qid);
	return sql_int(f->url, q);
}

/*
 * A void QID (a batch answered 451 while its commit waited for a
 * standby, store_pg_wait.c) counts for nothing: its claim is absent to
 * both lookups, the take passes it by; it is settled only once its
 * transaction is over: then message and claim are gone, never delivered.
 * The transaction here is one held open on a connection of the test's.
 */
static void test_voids(void **state)
{
	struct fx *f = *state;
	struct store_txn *t;
	struct store_claim c;
	struct store_msg m;
	uint8_t h[STORE_HASH_LEN];
	PGconn *open_tx = PQconnectdb(f->url);
	PGresult *r;
	char q[256];
	int hash = 31;

	msg_new(&m, "VOIDED000001", 1, 100);	/* keyed, as acceptance spools it */
	m.has_key = 1;
	memcpy(m.keyhash, KH, STORE_HASH_LEN);
	CHECK_INT("spool", spool(f->st, &m, &hash, 1, NOW + SEC), 0);
	store_msg_free(&m);
	spool_one(f->st, "KEPTMSG00001", 32);
	sql(f, "UPDATE messages SET lease_owner = NULL", NULL);	/* due for any node */
	/* the copies kept for delivery (store_pg_keep.c): a void's batch never committed */
	store_pg_keep_forget((struct pg_store *) f->st, NULL);
	r = PQexec(open_tx, "BEGIN; SELECT pg_current_xact_id()");
	CHECK_INT("a transaction in progress", PQresultStatus(r), PGRES_TUPLES_OK);
	snprintf(q, sizeof(q), "INSERT INTO voids VALUES ('VOIDED000001', '%s', 'x', 0)",
		 PQgetvalue(r, 0, 0));
	PQclear(r);
	sql(f, "%s", q);

	assert_int_equal(store_txn_begin(f->st, (const uint8_t (*)[STORE_HASH_LEN]) KH, 1, &t), 0);
	hash_of(h, 31);
	CHECK_INT("its claim, in a batch", store_txn_claim_get(t, KH, h, NOW, &c), STORE_ENOTFOUND);
	hash_of(h, 32);
	CHECK_INT("the other, in a batch", store_txn_claim_get(t, KH, h, NOW, &c), 0);
	txn_abort(t);
	CHECK_INT("only the other message taken", taken(f->st, NOW + SEC), 1);
	CHECK_INT("the void stays while its transaction runs", void_count(f), 1);

	r = PQexec(open_tx, "COMMIT");
	PQclear(r);
	PQfinish(open_tx);
	((struct pg_store *) f->st)->settle_at = 0;	/* the next take settles */
	CHECK_INT("nothing more taken", taken(f->st, NOW + SEC), 0);
	CHECK_INT("settled", void_count(f), 0);
	CHECK_INT("the message dropped", store_msg_load(f->st, "VOIDED000001", &m), STORE_ENOTFOUND);
	CHECK_INT("its claim deleted", qid_rows(f, "claims", "VOIDED000001"), 0);
	CHECK_INT("its recipients deleted (schema 9: no foreign key)",
		  qid_rows(f, "rcpts", "VOIDED000001"), 0);
	CHECK_INT("the other claim kept", claim_found(f->st, 32, NOW, NULL), 1);
	CHECK_INT("the key is new again", claim_found(f->st, 31, NOW, NULL), 0);
}

static char *away_url;		/* the node's own URL while it is given a dead one */

/* cut_fd - a connection's socket reads end of file from now on */
static void cut_fd(int fd)
{
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0 || dup2(sv[0], fd) < 0)
		fail_msg("socketpair: %s", strerror(errno));
	close(sv[0]);
	close(sv[1]);
}

/* cut_away - c's answer lost, and every other way to the database with it: nothing can be read */
static void cut_away(PGconn *c)
{
	struct pg_store *st = (struct pg_store *) hook_fx->st;
	size_t i;

	cut_fd(PQsocket(c));
	if (st->anchor)
		cut_fd(PQsocket(st->anchor));
	pthread_mutex_lock(&st->mu);
	for (i = 0; i < st->n_idle; i++)
		cut_fd(PQsocket(st->idle[i]));
	pthread_mutex_unlock(&st->mu);
	away_url = st->url;		/* new connections are refused */
	st->url = xstrdup("postgresql://idemrelay@127.0.0.1:1/none?connect_timeout=2");
}

/* seen_within - does query (a count) answer 1 within 5 s? */
static int seen_within(const char *query)
{
	int64_t deadline = clock_mono_us() + 5 * SEC;
	int seen;

	while (!(seen = sql_int(hook_fx->url, query) == 1) && clock_mono_us() < deadline)
		usleep(10000);
	return seen;
}

/* cut_off - the commit hook: once the commit is visible, its answer lost and the database away */
static void cut_off(PGconn *c)
{
	char q[256];

	snprintf(q, sizeof(q), "SELECT count(*) FROM messages WHERE qid = '%s'", hook_qid);
	if (!seen_within(q))
		fail_msg("the commit did not become visible within 5 s");
	cut_away(c);
}

/* back - the database reachable again for st, at once */
static void back(struct pg_store *st)
{
	free(st->url);
	st->url = away_url;
	pthread_mutex_lock(&st->mu);
	st->next_try = 0;
	pthread_mutex_unlock(&st->mu);
	st->anchor_checked = 0;
}

/*
 * kept_batch - a batch of one message under KH committed while its answer
 * is cut and PostgreSQL cannot be reached to read it: answered 451
 * (STORE_EAGAIN) and kept in the node; keyed: begun with the key, as an
 * acceptance (its locks give the transaction's id). h: the claim's hash;
 * hook: the commit hook that cuts (cut_off: once the commit is visible).
 */
static void kept_batch(struct fx *f, const char *qid, int hash, int keyed,
		       uint8_t h[STORE_HASH_LEN], void (*hook) (PGconn *c))
{
	struct store_txn *t;
	struct store_claim c;
	struct store_msg m;

	hook_fx = f;
	hook_qid = qid;
	hash_of(h, hash);
	msg_new(&m, qid, 1, 100);
	m.has_key = 1;
	memcpy(m.keyhash, KH, STORE_HASH_LEN);
	assert_int_equal(store_txn_begin(f->st, (const uint8_t (*)[STORE_HASH_LEN]) KH,
					 keyed ? 1 : 0, &t), 0);
	if (keyed)
		CHECK_INT("a new key", store_txn_claim_get(t, KH, h, NOW, &c), STORE_ENOTFOUND);
	store_txn_msg_put(t, &m);
	claim_of(&c, qid, 1, NOW + SEC);
	store_txn_claim_put(t, KH, h, &c);
	commit_hook = hook;
	CHECK_INT("committed, nothing can be read: 451", store_txn_commit(t), STORE_EAGAIN);
	commit_hook = NULL;
	store_msg_free(&m);
}

/*
 * A commit that committed while its answer was lost and PostgreSQL could
 * not be reached to read its outcome: answered 451, then settled by the
 * node's first use of the database, before anything else: its key is new
 * (a retry is a new message), no node takes it, not even once its lease
 * ran out (the outage outlasted store.lease) and another node asks
 * first after this node settled; its message is dropped. With the id read
 * with the key locks (an acceptance), and without (one read back).
 */
static void test_commit_unreachable(void **state)
{
	struct fx *f = *state;
	struct store_txn *t;
	struct store_claim c;
	struct store_msg m;
	struct store *other;
	uint8_t h[STORE_HASH_LEN];
	char what[64];
	const char *qids[2] = { "AWAYKEYED001", "AWAYNOKEY001" };
	int keyed, hash;

	for (keyed = 1; keyed >= 0; keyed--) {
		hash = keyed ? 51 : 52;
		kept_batch(f, qids[keyed ? 0 : 1], hash, keyed, h, cut_off);
		snprintf(what, sizeof(what), "%s: no copy kept for delivery", hook_qid);
		CHECK_INT(what, store_pg_keep_take((struct pg_store *) f->st, hook_qid, &m),
			  STORE_ENOTFOUND);
		CHECK_INT("it did commit", qid_rows(f, "messages", hook_qid), 1);
		/* away longer than the lease: it ran out meanwhile */
		sql(f, "UPDATE messages SET lease_until = 0 WHERE qid = '%s'", hook_qid);
		back((struct pg_store *) f->st);

		snprintf(what, sizeof(what), "%s: the key is new", hook_qid);
		CHECK_INT(what, claim_found(f->st, hash, NOW, NULL), 0);
		other = node_open(f, "other");
		snprintf(what, sizeof(what), "%s: another node takes nothing", hook_qid);
		CHECK_INT(what, taken(other, NOW + SEC), 0);
		store_close(other);
		snprintf(what, sizeof(what), "%s: nor this one", hook_qid);
		CHECK_INT(what, taken(f->st, NOW + SEC), 0);
		((struct pg_store *) f->st)->settle_at = 0;	/* the next take settles */
		CHECK_INT(what, taken(f->st, NOW + SEC), 0);
		snprintf(what, sizeof(what), "%s: dropped", hook_qid);
		CHECK_INT(what, qid_rows(f, "messages", hook_qid), 0);
		CHECK_INT("settled", void_count(f), 0);
	}
	/* a retry of the key is a new message, accepted */
	msg_new(&m, "AWAYRETRY001", 1, 100);
	m.has_key = 1;
	memcpy(m.keyhash, KH, STORE_HASH_LEN);
	hash_of(h, 51);
	assert_int_equal(store_txn_begin(f->st, (const uint8_t (*)[STORE_HASH_LEN]) KH, 1, &t), 0);
	CHECK_INT("the key is new", store_txn_claim_get(t, KH, h, NOW, &c), STORE_ENOTFOUND);
	store_txn_msg_put(t, &m);
	claim_of(&c, m.qid, 1, NOW + SEC);
	store_txn_claim_put(t, KH, h, &c);
	CHECK_INT("the retry accepted", store_txn_commit(t), 0);
	store_msg_free(&m);
	CHECK_INT("its claim", claim_found(f->st, 51, NOW, &c), 1);
	CHECK_STR("under its QID", c.qid, "AWAYRETRY001");
}

/*
 * A batch answered 451 and kept (its commit's outcome could not be read)
 * whose claim another node replayed before this one settled: that node
 * answered a retry of the key 250 with its QID, so the settling leaves
 * it to be delivered: its message and claim stay, the key replays it.
 */
static void test_commit_unreachable_replayed(void **state)
{
	struct fx *f = *state;
	struct store_txn *t;
	struct store_claim c;
	struct store *other;
	uint8_t h[STORE_HASH_LEN];

	kept_batch(f, "AWAYREPLAY01", 71, 1, h, cut_off);
	CHECK_INT("kept", (int) ((struct pg_store *) f->st)->n_pend, 1);

	/* a retry of the key, on another node, before this one settles: its 250 replays the QID */
	other = node_open(f, "other");
	assert_int_equal(store_txn_begin(other, (const uint8_t (*)[STORE_HASH_LEN]) KH, 1, &t), 0);
	CHECK_INT("the other node finds the claim", store_txn_claim_get(t, KH, h, NOW, &c), 0);
	CHECK_STR("its QID", c.qid, "AWAYREPLAY01");
	store_txn_replay(t, KH, h);	/* a duplicate: answered with it */
	CHECK_INT("the replay committed", store_txn_commit(t), 0);
	store_close(other);

	back((struct pg_store *) f->st);
	CHECK_INT("nothing taken", taken(f->st, NOW + SEC), 0);
	CHECK_INT("settled", (int) ((struct pg_store *) f->st)->n_pend, 0);
	((struct pg_store *) f->st)->settle_at = 0;	/* the next take settles voids */
	CHECK_INT("nothing taken", taken(f->st, NOW + SEC), 0);
	CHECK_INT("its message kept, to be delivered", qid_rows(f, "messages", "AWAYREPLAY01"), 1);
	CHECK_INT("its claim kept", qid_rows(f, "claims", "AWAYREPLAY01"), 1);
	CHECK_INT("not void", void_count(f), 0);
	CHECK_INT("the key replays it", claim_found(f->st, 71, NOW, &c), 1);
	CHECK_STR("under its QID", c.qid, "AWAYREPLAY01");
}

/* lost_after_mark - the commit hook: once hook_qid is marked replayed, the answer lost */
static void lost_after_mark(PGconn *c)
{
	char q[256];

	snprintf(q, sizeof(q), "SELECT count(*) FROM messages WHERE qid = '%s' AND replayed",
		 hook_qid);
	if (!seen_within(q))
		fail_msg("the replay's mark did not become visible within 5 s");
	cut_fd(PQsocket(c));
}

/*
 * The same, but the replay's own COMMIT loses its answer (note 14's F3
 * (b)): a batch of duplicates only, which wrote nothing but the mark.
 * The node reads the mark back: there, the batch committed, and its
 * retry is answered 250 with the QID, as the mark says; it was answered
 * 451 unread, while the mark stood and the message was delivered.
 */
static void test_commit_unreachable_replay_lost(void **state)
{
	struct fx *f = *state;
	struct store_txn *t;
	struct store_claim c;
	struct store *other;
	uint8_t h[STORE_HASH_LEN];

	kept_batch(f, "AWAYREPLAY02", 75, 1, h, cut_off);
	other = node_open(f, "other");
	assert_int_equal(store_txn_begin(other, (const uint8_t (*)[STORE_HASH_LEN]) KH, 1, &t), 0);
	CHECK_INT("the other node finds the claim", store_txn_claim_get(t, KH, h, NOW, &c), 0);
	store_txn_replay(t, KH, h);
	commit_hook = lost_after_mark;
	CHECK_INT("the replay's answer lost, its mark read back: 250", store_txn_commit(t), 0);
	commit_hook = NULL;
	store_close(other);

	back((struct pg_store *) f->st);
	CHECK_INT("nothing taken", taken(f->st, NOW + SEC), 0);
	CHECK_INT("settled", (int) ((struct pg_store *) f->st)->n_pend, 0);
	CHECK_INT("its message kept, to be delivered", qid_rows(f, "messages", "AWAYREPLAY02"), 1);
	CHECK_INT("the key replays it", claim_found(f->st, 75, NOW, &c), 1);
	CHECK_STR("under its QID", c.qid, "AWAYREPLAY02");
}

/*
 * The same, but the other node read the claim and did not answer with
 * its QID (review of 0099f5d, MEDIUM 2): a content mismatch refused
 * (554), or a new QID queued over the claim (mismatch "accept", shadow
 * mode). No submission of the 451 message was answered 250: the
 * settling voids and drops it, and the key is new, or the new QID's.
 */
static void test_commit_unreachable_not_replayed(void **state)
{
	static const char *const qids[] = { "AWAYNOREP001", "AWAYNOREP002" };
	struct fx *f = *state;
	struct store_txn *t;
	struct store_claim c;
	struct store_msg m;
	struct store *other;
	uint8_t h[STORE_HASH_LEN];
	char what[96];
	int v;

	for (v = 0; v < 2; v++) {
		kept_batch(f, qids[v], 72 + v, 1, h, cut_off);
		CHECK_INT("kept", (int) ((struct pg_store *) f->st)->n_pend, 1);

		/* a retry on another node reads the claim, and answers 554 or with a new QID */
		other = node_open(f, "other");
		assert_int_equal(store_txn_begin(other, (const uint8_t (*)[STORE_HASH_LEN]) KH, 1,
						 &t), 0);
		CHECK_INT("the other node finds the claim", store_txn_claim_get(t, KH, h, NOW, &c), 0);
		CHECK_STR("its QID", c.qid, hook_qid);
		if (v == 1) {
			msg_new(&m, "AWAYNEWQID01", 1, 100);
			m.has_key = 1;
			memcpy(m.keyhash, KH, STORE_HASH_LEN);
			store_txn_msg_put(t, &m);
			claim_of(&c, m.qid, 2, NOW + SEC);
			store_txn_claim_put(t, KH, h, &c);
			store_msg_free(&m);
		}
		CHECK_INT("the other node committed", store_txn_commit(t), 0);
		store_close(other);

		back((struct pg_store *) f->st);
		CHECK_INT("nothing taken", taken(f->st, NOW + SEC), 0);
		CHECK_INT("settled", (int) ((struct pg_store *) f->st)->n_pend, 0);
		((struct pg_store *) f->st)->settle_at = 0;	/* the next take settles voids */
		CHECK_INT("nothing taken", taken(f->st, NOW + SEC), 0);
		snprintf(what, sizeof(what), "%s: voided and dropped", hook_qid);
		CHECK_INT(what, qid_rows(f, "messages", hook_qid), 0);
		CHECK_INT("settled", void_count(f), 0);
		snprintf(what, sizeof(what), "%s: the key no longer replays it", hook_qid);
		CHECK_INT(what, claim_found(f->st, 72 + v, NOW, &c), v);
		if (v == 1)
			CHECK_STR("the new QID's", c.qid, "AWAYNEWQID01");
	}
}

/*
 * A node cut off alone for longer than store.lease while it keeps a
 * batch answered 451 (its commit's outcome lost): another node takes the
 * message once the lease runs out (idemrelay(8): a message answered 451
 * delivered), and the node, back, settles it: a message another node
 * took is not voided but left to be delivered (by then it may be sent,
 * or half sent, and a retry of its key may have been answered 250 with
 * its QID, which no replay mark records once it was taken), never
 * delivered twice. Taken, then sent (v 0): it stays sent, its claim
 * replays it; the settle used to drop it with its claim, so that a retry
 * was a second delivery. Taken, then deferred (v 1), a retry of its key
 * answered 250 with its QID: it stays queued, taken once when due; the
 * settle used to drop it, a message answered 250 lost.
 */
static void test_commit_unreachable_taken(void **state)
{
	static const char *const qids[] = { "AWAYTAKEN001", "AWAYTAKEN002" };
	struct fx *f = *state;
	struct store_txn *t;
	struct store_claim c;
	struct store_msg m;
	struct store *other;
	uint8_t h[STORE_HASH_LEN];
	int64_t later = clock_us() + 3600 * SEC;
	char what[96];
	int v;

	for (v = 0; v < 2; v++) {
		kept_batch(f, qids[v], 91 + v, 1, h, cut_off);
		sql(f, "UPDATE messages SET lease_until = 0 WHERE qid = '%s'", hook_qid);
		other = node_open(f, "other");
		snprintf(what, sizeof(what), "%s: the lease ran out, the other node takes it", hook_qid);
		CHECK_INT(what, taken(other, NOW + SEC), 1);
		msg_new(&m, hook_qid, 1, 100);
		if (v == 0) {
			m.rcpts[0].state = STORE_RCPT_SENT;
		} else {
			m.attempts = 1;
			m.next_attempt = later;
		}
		CHECK_INT(v ? "deferred" : "sent", store_msg_update(other, &m), 0);
		store_msg_free(&m);
		if (v == 1) {	/* a retry of the key, answered 250 with its QID */
			assert_int_equal(store_txn_begin(other, (const uint8_t (*)[STORE_HASH_LEN]) KH,
							 1, &t), 0);
			CHECK_INT("the other node finds the claim",
				  store_txn_claim_get(t, KH, h, NOW, &c), 0);
			store_txn_replay(t, KH, h);
			CHECK_INT("the replay committed", store_txn_commit(t), 0);
		}

		back((struct pg_store *) f->st);
		CHECK_INT("nothing taken", taken(f->st, NOW + SEC), 0);
		CHECK_INT("settled", (int) ((struct pg_store *) f->st)->n_pend, 0);
		((struct pg_store *) f->st)->settle_at = 0;	/* the next take settles voids */
		CHECK_INT("nothing taken", taken(f->st, NOW + SEC), 0);
		snprintf(what, sizeof(what), "%s: its message kept", hook_qid);
		CHECK_INT(what, qid_rows(f, "messages", hook_qid), 1);
		CHECK_INT("not void", void_count(f), 0);
		snprintf(what, sizeof(what), "%s: the key replays it", hook_qid);
		CHECK_INT(what, claim_found(f->st, 91 + v, NOW, &c), 1);
		CHECK_STR("under its QID", c.qid, hook_qid);
		if (v == 1) {
			CHECK_INT("due: one node takes it", taken(f->st, later), 1);
			CHECK_INT("once", taken(other, later), 0);
		}
		store_close(other);
	}
}

/* pend_fake - a batch of qid kept as answered 451 while nothing could be read (store_pg_pend.c) */
static void pend_fake(struct pg_store *st, const char *qid, int64_t xid)
{
	pthread_mutex_lock(&st->mu);
	st->pend = xrealloc(st->pend, (st->n_pend + 1) * sizeof(*st->pend));
	st->cap_pend = st->n_pend + 1;
	memset(&st->pend[st->n_pend], 0, sizeof(*st->pend));
	st->pend[st->n_pend].qids = xcalloc(1, sizeof(*st->pend->qids));
	snprintf(st->pend[st->n_pend].qids[0], STORE_QID_SIZE, "%s", qid);
	st->pend[st->n_pend].n = 1;
	st->pend[st->n_pend].xid = xid;
	st->n_pend++;
	pthread_mutex_unlock(&st->mu);
}

struct settle_taker {
	struct pg_store *st;
	int rc;
	sem_t done;
};

/* taker_run - one store_pg_take, its connection given back */
static void *taker_run(void *arg)
{
	struct settle_taker *k = arg;
	PGconn *c;

	k->rc = store_pg_take(k->st, &c);
	if (k->rc == 0)
		store_pg_give(k->st, c);
	sem_post(&k->done);
	return NULL;
}

/*
 * take_within - store_pg_take's answer in another thread, failing if it
 * does not come in 30 s: the thread is then left running, detached, with
 * its argument on the heap (never freed), not in this returned frame
 */
static int take_within(struct pg_store *st, const char *what)
{
	struct settle_taker *k = calloc(1, sizeof(*k));
	struct timespec ts;
	pthread_t th;
	int rc;

	assert_non_null(k);
	k->st = st;
	k->rc = -1;
	sem_init(&k->done, 0, 0);
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 30;
	assert_int_equal(pthread_create(&th, NULL, taker_run, k), 0);
	if (sem_timedwait(&k->done, &ts) != 0) {
		pthread_detach(th);
		fail_msg("%s: store_pg_take hangs (30 s)", what);
	}
	pthread_join(th, NULL);
	rc = k->rc;
	sem_destroy(&k->done);
	free(k);
	return rc;
}

/*
 * Settling a kept batch never hangs the node: its void stalls past the
 * result limit (another session's insert of the same QID, not committed)
 * while the anchor is gone, so the look at whether its backend waits for
 * replication runs on a connection of the pool, taken without settling
 * (it used to settle, and locked pmu again in the thread that held it);
 * and a take while another caller settles waits at most its deadline.
 */
static void test_settle_stalled(void **state)
{
	struct fx *f = *state;
	struct pg_store *st = (struct pg_store *) f->st;
	PGconn *o = PQconnectdb(f->url);
	PGresult *r;
	char q[256];

	pend_fake(st, "STALLVOID001", 0);
	snprintf(q, sizeof(q), "SET search_path = \"%s\"; BEGIN; INSERT INTO voids "
		 "VALUES ('STALLVOID001', '3', 'x', 0)", f->schema);
	r = PQexec(o, q);
	CHECK_INT("the other session's insert", PQresultStatus(r), PGRES_COMMAND_OK);
	PQclear(r);
	pthread_mutex_lock(&st->amu);
	PQfinish(st->anchor);
	st->anchor = NULL;
	st->anchor_checked = clock_mono_us() + 3600 * SEC;
	pthread_mutex_unlock(&st->amu);
	result_us = SEC / 2;

	CHECK_INT("the void stalls: no connection", take_within(st, "stalled void"), STORE_EAGAIN);
	CHECK_INT("still kept", (int) st->n_pend, 1);
	pthread_mutex_lock(&st->pmu);	/* as another caller settling */
	CHECK_INT("another settles: no connection", take_within(st, "settling"), STORE_EAGAIN);
	pthread_mutex_unlock(&st->pmu);

	r = PQexec(o, "ROLLBACK");
	PQclear(r);
	PQfinish(o);
	result_us = PG_RESULT_US;
	CHECK_INT("settled, a connection", take_within(st, "settle"), 0);
	CHECK_INT("nothing kept", (int) st->n_pend, 0);
	CHECK_INT("voided", void_count(f), 1);
}

/* taken_now - connections of the pool taken (open, neither idle nor kept) */
static size_t taken_now(struct pg_store *st)
{
	size_t n;

	pthread_mutex_lock(&st->mu);
	n = st->n_open - st->n_idle - st->n_kept;
	pthread_mutex_unlock(&st->mu);
	return n;
}

/*
 * A take while another caller settles the kept batches waits for it
 * holding no connection of the pool (it held one idle for up to its
 * deadline, and every other caller with it, the pool starved)
 */
static void test_take_waits_settle_unheld(void **state)
{
	struct fx *f = *state;
	struct pg_store *st = (struct pg_store *) f->st;
	struct settle_taker *k = calloc(1, sizeof(*k));
	struct timespec ts;
	pthread_t th;
	size_t before, during;
	int i;

	pend_fake(st, "UNHELDVOID01", 0);
	before = taken_now(st);
	pthread_mutex_lock(&st->pmu);	/* as another caller settling */
	k->st = st;
	k->rc = -1;
	sem_init(&k->done, 0, 0);
	assert_int_equal(pthread_create(&th, NULL, taker_run, k), 0);
	for (i = 0; i < 100 && (during = taken_now(st)) == before; i++)
		usleep(10000);		/* a connection would be out within a second */
	pthread_mutex_unlock(&st->pmu);
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 30;
	if (sem_timedwait(&k->done, &ts) != 0) {
		pthread_detach(th);
		fail_msg("store_pg_take hangs (30 s)");
	}
	pthread_join(th, NULL);
	CHECK_INT("no connection held while another settles", (int) (during - before), 0);
	CHECK_INT("then settled, a connection", k->rc, 0);
	CHECK_INT("nothing kept", (int) st->n_pend, 0);
	sem_destroy(&k->done);
	free(k);
}

/*
 * A batch kept as answered 451 is voided even when its id reads as
 * aborted: an id read from its backend long after the fact (through
 * PgBouncer, another client's since) says nothing of the batch, whose
 * commit may have committed; its message is dropped, never delivered.
 */
static void test_settle_aborted_id(void **state)
{
	struct fx *f = *state;
	struct pg_store *st = (struct pg_store *) f->st;
	PGconn *o = PQconnectdb(f->url);
	PGresult *r;
	struct store_msg m;
	int64_t xid;
	int hash = 61;

	msg_new(&m, "ABORTEDID001", 1, 100);	/* the batch did commit, keyed */
	m.has_key = 1;
	memcpy(m.keyhash, KH, STORE_HASH_LEN);
	CHECK_INT("spool", spool(f->st, &m, &hash, 1, NOW + SEC), 0);
	store_msg_free(&m);
	r = PQexec(o, "BEGIN; SELECT pg_current_xact_id()::text::int8");
	CHECK_INT("another transaction", PQresultStatus(r), PGRES_TUPLES_OK);
	xid = atoll(PQgetvalue(r, 0, 0));
	PQclear(r);
	r = PQexec(o, "ROLLBACK");
	PQclear(r);
	PQfinish(o);
	pend_fake(st, "ABORTEDID001", xid);	/* the id read was that one's */
	st->settle_at = 0;
	CHECK_INT("nothing taken", taken(f->st, NOW + SEC), 0);
	CHECK_INT("nothing kept", (int) st->n_pend, 0);
	CHECK_INT("voided and dropped", qid_rows(f, "messages", "ABORTEDID001"), 0);
	CHECK_INT("settled", void_count(f), 0);
	CHECK_INT("the key is new", claim_found(f->st, 61, NOW, NULL), 0);
}

/* cut_waiting - the commit hook: once the COMMIT waits for the test's lock, cut */
static void cut_waiting(PGconn *c)
{
	if (!seen_within("SELECT count(*) FROM pg_stat_activity WHERE query = 'COMMIT' "
			 "AND wait_event = 'advisory'"))
		fail_msg("the COMMIT never waited for the test's lock");
	cut_away(c);
}

/*
 * A kept batch whose status read is refused for a passing reason
 * (SQLSTATE 57014, as a cancel gives) while its COMMIT still waits stays
 * kept (d522b86): any refusal was taken for "another server since", the
 * batch voided with the void's own id and settled at once, nothing of it
 * visible yet; the COMMIT then ended committed, and its message, answered
 * 451, was taken and delivered. The batch has no key (its id is read from
 * its backend; a key's locks, held by the COMMIT, would stall that void).
 * Its COMMIT waits in a deferred trigger for a lock the test holds; a
 * pg_xact_status() of the test's schema, found before pg_catalog's
 * through the node's search_path, refuses the first read. The next
 * settling reads it in progress and voids it with its id, a void that
 * stays until the COMMIT is over: then the message is dropped, never
 * taken.
 */
static void test_settle_status_refused(void **state)
{
	struct fx *f = *state;
	struct pg_store *st = (struct pg_store *) f->st;
	PGconn *o = PQconnectdb(f->url);
	PGresult *r;
	uint8_t h[STORE_HASH_LEN];
	char path[96];

	sql(f, "CREATE FUNCTION commit_waits() RETURNS trigger LANGUAGE plpgsql AS "
	    "$$ BEGIN PERFORM pg_advisory_xact_lock(4242); RETURN NULL; END $$; "
	    "CREATE CONSTRAINT TRIGGER commit_waits AFTER INSERT ON messages DEFERRABLE "
	    "INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION commit_waits(); "
	    "CREATE SEQUENCE refusals; "
	    "CREATE FUNCTION pg_xact_status(xid8) RETURNS text LANGUAGE plpgsql AS "
	    "$$ BEGIN IF nextval('refusals') = 1 THEN RAISE EXCEPTION 'canceling statement "
	    "due to user request' USING ERRCODE = 'query_canceled'; END IF; "
	    "RETURN pg_catalog.pg_xact_status($1); END $$", NULL);
	r = PQexec(o, "SELECT pg_advisory_lock(4242)");
	CHECK_INT("the test holds the lock", PQresultStatus(r), PGRES_TUPLES_OK);
	PQclear(r);
	kept_batch(f, "REFUSEDREAD1", 81, 0, h, cut_waiting);
	CHECK_INT("kept", (int) st->n_pend, 1);
	free(away_url);			/* back with the test's pg_xact_status() first */
	snprintf(path, sizeof(path), "%s,pg_catalog", f->schema);
	away_url = fx_pg_url(fx_pg(), path);
	back(st);

	CHECK_INT("the status read refused: no connection", take_within(st, "refused"),
		  STORE_EAGAIN);
	CHECK_INT("the read was refused", sql_int(f->url, "SELECT CASE WHEN is_called "
						  "THEN last_value ELSE 0 END FROM refusals"), 1);
	CHECK_INT("still kept", (int) st->n_pend, 1);
	CHECK_INT("nothing voided", void_count(f), 0);
	st->settle_at = 0;		/* the next take settles voids too */
	CHECK_INT("nothing taken while the COMMIT waits", taken(f->st, NOW + SEC), 0);
	CHECK_INT("the batch settled", (int) st->n_pend, 0);
	CHECK_INT("voided with its id, in progress: the void stays", void_count(f), 1);

	r = PQexec(o, "SELECT pg_advisory_unlock(4242)");	/* the COMMIT goes on */
	PQclear(r);
	PQfinish(o);
	if (!seen_within("SELECT count(*) FROM messages WHERE qid = 'REFUSEDREAD1'"))
		fail_msg("the COMMIT did not end within 5 s");
	sql(f, "UPDATE messages SET lease_until = 0 WHERE qid = '%s'", "REFUSEDREAD1");
	st->settle_at = 0;
	CHECK_INT("its message, answered 451, never taken", taken(f->st, NOW + SEC), 0);
	CHECK_INT("voided and dropped", qid_rows(f, "messages", "REFUSEDREAD1"), 0);
	CHECK_INT("settled", void_count(f), 0);
}

/*
 * A node that stops cleanly while it keeps a batch answered 451 settles
 * it first when PostgreSQL answers (else each QID is logged at error
 * level, left as a kill leaves it)
 */
static void test_close_settles(void **state)
{
	struct fx *f = *state;
	struct store *other = node_open(f, "closer");

	struct pg_store *st;
	char text[8192];
	FILE *tmp;
	size_t i;
	int old;

	pend_fake((struct pg_store *) other, "CLOSEVOID001", 0);
	store_close(other);
	CHECK_INT("voided at the stop", void_count(f), 1);

	other = node_open(f, "closer");	/* PostgreSQL away: logged, nothing written */
	st = (struct pg_store *) other;
	pend_fake(st, "CLOSEKEPT001", 0);
	pthread_mutex_lock(&st->mu);
	for (i = 0; i < st->n_idle; i++)
		PQfinish(st->idle[i]);
	st->n_open -= st->n_idle;
	st->n_idle = 0;
	free(st->url);
	st->url = xstrdup("postgresql://idemrelay@127.0.0.1:1/none?connect_timeout=2");
	pthread_mutex_unlock(&st->mu);
	old = log_capture(&tmp);
	store_close(other);
	log_captured(old, tmp, text, sizeof(text));
	CHECK_INT("nothing more voided", void_count(f), 1);
	if (strstr(text, "CLOSEKEPT001: answered 451 while PostgreSQL was unreachable") == NULL
	    || strstr(text, "not settled at stop") == NULL)
		fail_msg("the kept QID is not logged at the stop: %s", text);
}

/* void_decided - a void of qid under the id of a transaction that rolled back */
static void void_decided(struct fx *f, const char *qid)
{
	PGconn *o = PQconnectdb(f->url);
	PGresult *r = PQexec(o, "BEGIN; SELECT pg_current_xact_id()");
	char q[256];

	CHECK_INT("a transaction", PQresultStatus(r), PGRES_TUPLES_OK);
	snprintf(q, sizeof(q), "INSERT INTO voids VALUES ('%s', '%s', 'x', 0)", qid,
		 PQgetvalue(r, 0, 0));
	PQclear(r);
	r = PQexec(o, "ROLLBACK");
	PQclear(r);
	PQfinish(o);
	sql(f, "%s", q);
}

/* msg_count - rows of messages named qid */
static int msg_count(struct fx *f, const char *qid)
{

	return (int) qid_rows(f, "messages", qid);
}

/*
 * A void written after another node took its message (a settling of
 * store_pg_pend.c whose look at the message came before that take
 * committed) goes alone: the message, maybe sent in part, is left to be
 * delivered, as the settling leaves one taken before it looked
 * (test_commit_unreachable_taken); it was dropped. Here the other node
 * took it and deferred it.
 */
static void test_settle_spares_taken(void **state)
{
	struct fx *f = *state;
	struct store *other = node_open(f, "other");
	struct store_msg m;
	int64_t later = clock_us() + 3600 * SEC;

	spool_one(f->st, "RACETAKEN001", 41);
	sql(f, "UPDATE messages SET lease_until = 0", NULL);	/* its lease ran out */
	CHECK_INT("the other node takes it", taken(other, NOW + SEC), 1);
	msg_new(&m, "RACETAKEN001", 1, 100);
	m.attempts = 1;
	m.next_attempt = later;
	CHECK_INT("deferred", store_msg_update(other, &m), 0);
	store_msg_free(&m);
	void_decided(f, "RACETAKEN001");
	((struct pg_store *) f->st)->settle_at = 0;	/* the next take settles voids */
	CHECK_INT("nothing taken", taken(f->st, NOW + SEC), 0);
	CHECK_INT("the void settled", void_count(f), 0);
	CHECK_INT("its message kept", msg_count(f, "RACETAKEN001"), 1);
	CHECK_INT("its claim kept", qid_rows(f, "claims", "RACETAKEN001"), 1);
	CHECK_INT("due: taken", taken(f->st, later), 1);
	store_close(other);
}

/*
 * A void settled while another node's batch has read its message's
 * claim (before the void was seen) and will answer 250 with its QID:
 * the settle leaves that void for the next one (its key's lock is
 * tried, never waited for: a batch may hold it for as long as its
 * commit waits for the standby), and settles the others meanwhile;
 * the next settle sees the replay recorded by that batch's commit, and
 * the message stays to be delivered. Each void's key lock is derived
 * once a settle (twice, for its lock and for its QID, before).
 */
static void test_settle_skips_held_key(void **state)
{
	struct fx *f = *state;
	struct store *other;
	struct store_txn *t;
	struct store_claim c;
	struct store_msg m;
	uint8_t h[STORE_HASH_LEN], k2[STORE_HASH_LEN] = { 0x4c };
	long long voids;
	int hash = 81, n, dropped, keyed;

	msg_new(&m, "VOIDREPLAY01", 1, 100);	/* this node's acceptance, committed */
	m.has_key = 1;
	memcpy(m.keyhash, KH, STORE_HASH_LEN);
	CHECK_INT("spool", spool(f->st, &m, &hash, 1, NOW + SEC), 0);
	store_msg_free(&m);
	msg_new(&m, "VOIDOTHER001", 1, 100);	/* another key's, its lock free */
	m.has_key = 1;
	memcpy(m.keyhash, k2, STORE_HASH_LEN);
	CHECK_INT("spool the other", spool(f->st, &m, NULL, 0, NOW + SEC), 0);
	store_msg_free(&m);
	other = node_open(f, "other");	/* its batch reads the claim: a replay */
	hash_of(h, 81);
	assert_int_equal(store_txn_begin(other, (const uint8_t (*)[STORE_HASH_LEN]) KH, 1, &t), 0);
	CHECK_INT("the other node finds the claim", store_txn_claim_get(t, KH, h, NOW, &c), 0);
	store_txn_replay(t, KH, h);	/* a duplicate: answered with it */
	void_decided(f, "VOIDREPLAY01");
	void_decided(f, "VOIDOTHER001");

	((struct pg_store *) f->st)->settle_at = 0;
	counter = pthread_self();
	n_keyed = 0;
	n = taken(f->st, NOW + SEC);
	keyed = n_keyed;
	n_keyed = -1;
	voids = void_count(f);
	dropped = msg_count(f, "VOIDOTHER001") == 0;
	CHECK_INT("the replay committed", store_txn_commit(t), 0);	/* its locks go first */
	store_close(other);
	CHECK_INT("nothing taken while the key is held", n, 0);
	CHECK_INT("each void's key lock derived once", keyed, 2);
	CHECK_INT("the held key's void left, the other settled", voids, 1);
	CHECK_INT("the other key's message dropped", dropped, 1);
	((struct pg_store *) f->st)->settle_at = 0;
	(void) taken(f->st, NOW + SEC);
	CHECK_INT("its message kept, to be delivered", msg_count(f, "VOIDREPLAY01"), 1);
	CHECK_INT("its void gone", void_count(f), 0);
	CHECK_INT("the key replays it", claim_found(f->st, 81, NOW, &c), 1);
}

/*
 * The row versions of messages, recipients and claims, each row named:
 * rows_snap() notes them, rows_written() counts the rows written since
 * (a row written twice in between counts once)
 */
#define ROW_VERSIONS "SELECT 'm' || qid AS k, ctid AS v FROM messages UNION ALL " \
	"SELECT 'r' || qid || '/' || idx, ctid FROM rcpts UNION ALL " \
	"SELECT 'c' || encode(hash, 'hex'), ctid FROM claims"

/* rows_snap - note the row versions, for rows_written() */
static void rows_snap(struct fx *f)
{
	sql(f, "SET client_min_messages = warning; DROP TABLE IF EXISTS seen; "
	    "CREATE TABLE seen AS " ROW_VERSIONS "%s", NULL);
}

/* rows_written - rows of messages, rcpts and claims written since rows_snap() */
static long long rows_written(struct fx *f)
{
	char q[1024];

	snprintf(q, sizeof(q), "SET search_path = \"%s\"; SELECT count(*) FROM (" ROW_VERSIONS
		 ") n FULL JOIN seen s USING (k) WHERE n.v IS DISTINCT FROM s.v", f->schema);
	return sql_int(f->url, q);
}

/*
 * dup_batch - one batch on st answering the claim of every hash as a
 * duplicate (read, and replayed with its QID, as the submission path
 * does); the rows it wrote, and whether it committed (else it rolled back)
 */
static long long dup_batch(struct fx *f, struct store *st, const int *hashes, size_t n,
			   int *committed)
{
	struct store_txn *t;
	struct store_claim c;
	uint8_t h[STORE_HASH_LEN];
	char q[256];
	size_t i;

	rows_snap(f);
	assert_int_equal(store_txn_begin(st, (const uint8_t (*)[STORE_HASH_LEN]) KH, 1, &t), 0);
	for (i = 0; i < n; i++) {
		hash_of(h, hashes[i]);
		CHECK_INT("a duplicate", store_txn_claim_get(t, KH, h, NOW, &c), 0);
		store_txn_replay(t, KH, h);
	}
	snprintf(q, sizeof(q), "SELECT pg_xact_status('%lld'::xid8) = 'committed'",
		 (long long) ((struct pg_txn *) t)->xid);
	CHECK_INT("the batch's id read with its locks", ((struct pg_txn *) t)->xid > 0, 1);
	CHECK_INT("answered", store_txn_commit(t), 0);
	*committed = (int) sql_int(f->url, q);
	return rows_written(f);
}

/*
 * What duplicates write (the dup window's updates of messages,
 * BENCHMARKS.md): no row, and a ROLLBACK, for a batch of duplicates on
 * the node that accepted them; on another node, the first batch records
 * the replay of each message still under its acceptance lease (a row
 * each, and a COMMIT), the later ones nothing. The counts' flush
 * (store_hist_count, once a second) writes a row per message it names,
 * however many duplicates and entries it adds to it.
 */
static void test_duplicates_write(void **state)
{
	static const int hashes[] = { 91, 92, 93 };
	static const char *const qids[] = { "DUPWRITE0001", "DUPWRITE0002", "DUPWRITE0003" };
	struct fx *f = *state;
	struct store_count cnt[7];
	struct store_story s;
	struct store *other;
	long long rows;
	int i, commits, committed;

	for (i = 0; i < 3; i++)
		spool_one(f->st, qids[i], hashes[i]);
	for (i = 0, rows = commits = 0; i < 5; i++) {
		rows += dup_batch(f, f->st, hashes, 3, &committed);
		commits += committed;
	}
	CHECK_INT("the accepting node's duplicates: rows written", rows, 0);
	CHECK_INT("... batches committed", commits, 0);
	other = node_open(f, "other");
	CHECK_INT("another node's first: the replays recorded",
		  dup_batch(f, other, hashes, 3, &committed), 3);
	CHECK_INT("... committed", committed, 1);
	for (i = 1, rows = commits = 0; i < 5; i++) {
		rows += dup_batch(f, other, hashes, 3, &committed);
		commits += committed;
	}
	CHECK_INT("its later duplicates: rows written", rows, 0);
	CHECK_INT("... batches committed", commits, 0);
	store_close(other);

	/* 7 entries, 28 duplicates and 2 mismatches of 3 messages: 3 rows */
	memset(cnt, 0, sizeof(cnt));
	for (i = 0; i < 7; i++) {
		strcpy(cnt[i].qid, qids[i % 3]);
		cnt[i].duplicates = (uint32_t) i + 1;
		cnt[i].mismatches = i == 2 || i == 5;
	}
	rows_snap(f);
	CHECK_INT("count", store_hist_count(f->st, cnt, 7), 0);
	CHECK_INT("the counts' rows written", rows_written(f), 3);
	CHECK_INT("story", store_story_get(f->st, qids[0], &s), 0);
	CHECK_INT("its duplicates", s.duplicates, 1 + 4 + 7);
	store_story_free(&s);
	CHECK_INT("story", store_story_get(f->st, qids[2], &s), 0);
	CHECK_INT("its duplicates", s.duplicates, 3 + 6);
	CHECK_INT("its mismatches", s.mismatches, 2);
	store_story_free(&s);
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
	PGresult *r;
	char q[256];
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
	snprintf(q, sizeof(q), "SET search_path = \"%s\"; SET idle_in_transaction_session_timeout"
		 " = '5s'; BEGIN; SELECT 1 FROM messages WHERE qid = 'FLUSHDUE0001' FOR UPDATE",
		 f->schema);
	r = PQexec(o, q);
	CHECK_INT("a delivery holds the due one", PQresultStatus(r), PGRES_TUPLES_OK);
	PQclear(r);
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

/* delivered, dropped, its key forgotten since: the revive is refused, nothing changed */
static void test_revive_refused(void **state)
{
	struct fx *f = *state;
	struct store *b = node_open(f, "node-b");
	struct store_forget fg;
	struct store_msg a, d, k;

	/* B delivered it, clearing A's mark without taking it for ambiguous */
	marked_and_lost(f, b, "REVIVE000003", 3, &a);
	CHECK_INT("B sends it", sent(b, "REVIVE000003"), 0);
	deferral(&a);
	CHECK_INT("delivered since", store_msg_revive(f->st, &a), STORE_ENOTFOUND);
	CHECK_INT("still delivered", sql_int(f->url, "SELECT state FROM rcpts WHERE "
					     "qid = 'REVIVE000003'"), STORE_RCPT_SENT);

	/* the operator dropped it once A's lease had run out */
	marked_and_lost(f, b, "REVIVE000004", 4, &d);
	CHECK_INT("drop", store_msg_drop(b, "REVIVE000004"), 0);
	deferral(&d);
	CHECK_INT("dropped since", store_msg_revive(f->st, &d), STORE_ENOTFOUND);

	/* B's verdict, then the operator forgot its key (its application may send it again) */
	marked_and_lost(f, b, "REVIVE000005", 5, &k);
	verdict(b, "REVIVE000005");
	CHECK_INT("forget", store_key_forget(b, KH, NULL, clock_us(), &fg), 0);
	store_forget_free(&fg);
	deferral(&k);
	CHECK_INT("forgotten since", store_msg_revive(f->st, &k), STORE_ENOTFOUND);

	CHECK_INT("none queued again", sql_int(f->url, "SELECT count(*) FROM messages WHERE queued"),
		  0);
	store_msg_free(&a);
	store_msg_free(&d);
	store_msg_free(&k);
	store_close(b);
}

/*
 * a group commit's marks and outcomes of several messages make one
 * statement however they interleave (one kind since marks are rows of
 * the updates), a message's own writes in their order: an outcome of a
 * message put in the same transaction stays after its INSERT
 */
static void test_runs_merged(void **state)
{
	struct fx *f = *state;
	static const char *const q[] = { "RUNS00000001", "RUNS00000002", "RUNS00000003",
		"RUNS00000004" };
	struct store_txn *t;
	struct store_msg m[4], p;
	size_t i;

	for (i = 0; i < 4; i++) {
		spool_one(f->st, q[i], (int) i + 1);
		msg_new(&m[i], q[i], 1, 100);
		m[i].rcpts[0].state = STORE_RCPT_SENT;
	}
	sql(f, "CREATE TABLE runs_before AS SELECT qid, attempts, next_attempt, updated FROM "
	    "messages WHERE qid = 'RUNS00000001'%s", "");
	CHECK_INT("begin", store_txn_begin(f->st, NULL, 0, &t), 0);
	store_txn_msg_set_inflight(t, q[0], 1);
	store_txn_msg_update(t, &m[1]);
	store_txn_msg_set_inflight(t, q[2], 1);
	store_txn_msg_update(t, &m[3]);
	CHECK_INT("one run: the marks and the outcomes", (int) ((struct pg_txn *) t)->n_segs, 1);
	msg_new(&p, "RUNS00000005", 1, 100);
	store_txn_msg_put(t, &p);
	p.rcpts[0].state = STORE_RCPT_SENT;
	store_txn_msg_update(t, &p);
	CHECK_INT("its outcome after its INSERT", (int) ((struct pg_txn *) t)->n_segs, 3);
	CHECK_INT("commit", store_txn_commit(t), 0);
	CHECK_INT("marked", sql_int(f->url, "SELECT count(*) FROM messages WHERE inflight AND qid IN "
				    "('RUNS00000001', 'RUNS00000003')"), 2);
	CHECK_INT("a mark keeps attempts, next attempt and updated", sql_int(f->url,
		  "SELECT count(*) FROM messages m JOIN runs_before b USING (qid, attempts, "
		  "next_attempt, updated) WHERE m.queued AND m.mark_token = m.lease_token"), 1);
	CHECK_INT("finished", sql_int(f->url, "SELECT count(*) FROM messages WHERE NOT queued AND "
				      "qid IN ('RUNS00000002', 'RUNS00000004', 'RUNS00000005')"), 3);
	for (i = 0; i < 4; i++)
		store_msg_free(&m[i]);
	store_msg_free(&p);
}

/*
 * schema 9: rcpts has no foreign key to messages (its check locked the
 * message's row at each recipient's INSERT); a story's expiry deletes its
 * recipients with it, and leaves another message's
 */
static void test_rcpts_go_with_message(void **state)
{
	struct fx *f = *state;

	CHECK_INT("no foreign key on rcpts", sql_int(f->url, "SELECT count(*) FROM pg_constraint "
						     "WHERE conrelid = 'rcpts'::regclass AND "
						     "contype = 'f'"), 0);
	spool_one(f->st, "RCPTSGONE001", 41);
	spool_one(f->st, "RCPTSKEPT001", 42);
	CHECK_INT("sent", sent(f->st, "RCPTSGONE001"), 0);
	CHECK_INT("expired", store_hist_expire(f->st, (int64_t) 1 << 62, 100), 1);
	CHECK_INT("its recipients gone", sql_int(f->url, "SELECT count(*) FROM rcpts WHERE "
						 "qid = 'RCPTSGONE001'"), 0);
	CHECK_INT("the queued one's kept", sql_int(f->url, "SELECT count(*) FROM rcpts WHERE "
						   "qid = 'RCPTSKEPT001'"), 1);
}

/*
 * the expiry runs on one node at a time: while another session holds the
 * expiry's lock, a node's expiry deletes nothing and returns at once
 * (never waits); once it is given up, the story expires
 */
static void test_expire_one_at_a_time(void **state)
{
	struct fx *f = *state;
	PGconn *o = PQconnectdb(f->url);
	PGresult *r;
	char q[512];

	spool_one(f->st, "EXPIRE000001", 43);
	CHECK_INT("sent", sent(f->st, "EXPIRE000001"), 0);
	snprintf(q, sizeof(q), "BEGIN; SELECT pg_advisory_xact_lock(hashtextextended("
		 "'idemrelay expiry ' || '%s', 0))", f->schema);
	r = PQexec(o, q);
	assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
	PQclear(r);
	CHECK_INT("expired while another expires", store_hist_expire(f->st, (int64_t) 1 << 62, 100),
		  0);
	CHECK_INT("its story kept", sql_int(f->url, "SELECT count(*) FROM messages WHERE "
					    "qid = 'EXPIRE000001'"), 1);
	PQclear(PQexec(o, "COMMIT"));
	CHECK_INT("expired after", store_hist_expire(f->st, (int64_t) 1 << 62, 100), 1);
	CHECK_INT("its story gone", sql_int(f->url, "SELECT count(*) FROM messages WHERE "
					    "qid = 'EXPIRE000001'"), 0);
	PQfinish(o);
}

/* walk_cb - the messages walked: each one's QID and its recipients' count, in order */
static int walk_cb(void *arg, const struct store_msg *m)
{
	char *seen = arg;

	snprintf(seen + strlen(seen), 256 - strlen(seen), "%s:%zu ", m->qid, m->n_rcpts);
	return 0;
}

/*
 * the walk reads every queued message with its recipients in one
 * statement, and passes over a message whose recipients are missing (none
 * left, or one gone from the middle) without losing the ones after it
 */
static void test_walk_skips_corrupt(void **state)
{
	struct fx *f = *state;
	static const struct { const char *qid; size_t n; } put[] = {
		{ "WALK00000001", 2 }, { "WALK00000002", 1 }, { "WALK00000003", 3 },
		{ "WALK00000004", 3 },
	};
	struct store_msg m;
	char seen[256] = "";
	size_t i;

	for (i = 0; i < sizeof(put) / sizeof(put[0]); i++) {
		msg_new(&m, put[i].qid, put[i].n, 10);
		CHECK_INT(put[i].qid, spool(f->st, &m, NULL, 0, 0), 0);
		store_msg_free(&m);
	}
	CHECK_INT("walk", store_queue_walk(f->st, 0, walk_cb, seen), 0);
	CHECK_STR("every message and its recipients", seen,
		  "WALK00000001:2 WALK00000002:1 WALK00000003:3 WALK00000004:3 ");
	sql(f, "DELETE FROM rcpts WHERE qid = 'WALK00000002' OR (qid = 'WALK00000003' AND idx = 1)",
	    NULL);
	seen[0] = 0;
	CHECK_INT("walk past the corrupt", store_queue_walk(f->st, 0, walk_cb, seen), 0);
	CHECK_STR("the corrupt passed over", seen, "WALK00000001:2 WALK00000004:3 ");
}

/*
 * schema 7: messages has no index on its key, and a key's messages are
 * still found, queued and forgotten through its claims; schema 8 dropped
 * the one on the lease token (a lease is found by its QID)
 */
static void test_key_without_index(void **state)
{
	struct fx *f = *state;
	char (*qids)[STORE_QID_SIZE] = NULL;
	struct store_forget fg;
	size_t n = 0;

	CHECK_INT("messages' indexes: the QID, due, expiry",
		  sql_int(f->url, "SELECT count(*) FROM pg_indexes WHERE schemaname = "
			  "current_schema() AND tablename = 'messages'"), 3);
	spool_one(f->st, "KEYIDX000001", 1);
	CHECK_INT("its key's messages", store_key_qids(f->st, KH, &qids, &n), 0);
	CHECK_INT("one", (int) n, 1);
	free(qids);
	CHECK_INT("queued under its key", store_key_queued(f->st, KH, NULL, &qids, &n), 0);
	CHECK_INT("still one", (int) n, 1);
	free(qids);
	CHECK_INT("forget the key", store_key_forget(f->st, KH, NULL, clock_us(), &fg), 0);
	store_forget_free(&fg);
	CHECK_INT("forgotten on the message", sql_int(f->url, "SELECT count(*) FROM messages "
						      "WHERE forgotten > 0"), 1);
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
		 "'r@example.net', 0, NULL, 0, NULL)", old, store_pg_migration(0));
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

/* lock_waits - whether a lock on the messages of schema s is waited for, within 30 s */
static int lock_waits(const char *s)
{
	char q[256];
	int i;

	snprintf(q, sizeof(q), "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = "
		 "'\"%s\".messages'::regclass", s);
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
		buf_printf(&q, "%s; ", store_pg_migration(v));
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
	waited = lock_waits(old);

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

/* migration_locks - whether a session other than pid locks the messages of schema s, within 30 s */
static int migration_locks(const char *s, int pid)
{
	char q[256];
	int i;

	snprintf(q, sizeof(q), "SELECT count(*) FROM pg_locks WHERE pid <> %d AND relation = "
		 "'\"%s\".messages'::regclass", pid, s);
	for (i = 0; i < 3000; i++) {
		if (sql_int(fx_pg(), q) > 0)
			return 1;
		usleep(10000);
	}
	return 0;
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
	char old[96], rerr[256] = "";
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
	locked = migration_locks(old, PQbackendPID(rd));
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

/*
 * the test's lock, released by a thread once the store waits for the
 * bounce's outcome; or, with stop, kept, and the delivery stopped then
 */
struct release {
	PGconn *c;			/* owned: the test's connection, which holds the lock */
	FILE *log;			/* not owned: where the log goes meanwhile (log_capture) */
	int lock;
	int stop;			/* -1, or the committing thread's stop (deadline_stop_on()) */
};

/* logged_within - has log (log_capture) said what within 10 s? */
static int logged_within(FILE *log, const char *what)
{
	int64_t deadline = clock_mono_us() + 10 * SEC;
	char text[8192];
	ssize_t n;

	while ((n = pread(fileno(log), text, sizeof(text) - 1, 0)) >= 0
	       && (text[n] = 0, strstr(text, what) == NULL) && clock_mono_us() < deadline)
		usleep(10000);
	return n >= 0 && strstr(text, what) != NULL;
}

/*
 * release_run - release r's lock once the store says it waits for the
 * outcome, or after 10 s; or then make r's stop readable
 */
static void *release_run(void *arg)
{
	struct release *r = arg;
	char q[64];
	PGresult *res;

	(void) logged_within(r->log, "has no outcome yet");
	if (r->stop >= 0) {
		(void) !eventfd_write(r->stop, 1);	/* as deliver_stop() */
		return NULL;
	}
	snprintf(q, sizeof(q), "SELECT pg_advisory_unlock(%d)", r->lock);
	res = PQexec(r->c, q);
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
static void notice_decided(struct fx *f, const char *qid, const char *notice, int later,
			   int lock, int keep)
{
	struct release rel = { PQconnectdb(f->url), NULL, lock, -1 };
	struct store_msg m;
	PGresult *r;
	pthread_t th;
	char q[512], text[8192];
	int hash = 90 + lock % 8, rc, fd;
	long long leased = 0;
	int64_t began;

	marked_load(f, qid, hash, &m);
	snprintf(q, sizeof(q), "SELECT pg_advisory_lock(%d)", lock);
	r = PQexec(rel.c, q);
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
		snprintf(q, sizeof(q), "SELECT pg_advisory_unlock(%d)", lock);
		PQclear(PQexec(rel.c, q));
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
 * commit_held - the trigger that holds a bounce's COMMIT on lock 4243,
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
		 "EXECUTE FUNCTION commit_held()", fails == 2 ? "PERFORM set_config('client_connection_check_interval', "
		 "'0', true); WHILE NOT pg_try_advisory_xact_lock(4243) LOOP PERFORM pg_sleep(0.05); "
		 "END LOOP;" : "PERFORM pg_advisory_xact_lock(4243);",
		 fails == 1 ? "RAISE EXCEPTION 'the COMMIT fails';" : "");
	sql(f, "%s", q);
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
	struct fx *f = *state;

	commit_held(f, 0);
	notice_decided(f, "NOTICEWAIT01", "NOTICEWAIT91", 0, 4243, 0);
	commit_held(f, 0);
	notice_decided(f, "NOTICEWAIT02", "NOTICEWAIT92", 1, 4243, 0);
}

/*
 * The same with the notice put before its outcome: the mark
 * (store_msg.notice), not the order of the writes, tells a delivery's
 * puts, waited for. Told by the order, the batch was voided at the hold
 * (STORE_EAGAIN), then its notice dropped by the settle.
 */
static void test_notice_first_commit_waits(void **state)
{
	struct fx *f = *state;

	notice_first = 1;
	commit_held(f, 0);
	notice_decided(f, "NOTICEFRST01", "NOTICEFRST91", 0, 4243, 0);
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
	struct fx *f = *state;

	commit_held(f, 1);
	notice_decided(f, "NOTICEFAIL01", "NOTICEFAIL91", 0, 4243, 0);
	commit_held(f, 2);
	((struct pg_store *) f->st)->lease_us = 8 * SEC;	/* the spool's lease, and the cap */
	notice_decided(f, "NOTICEFAIL02", "NOTICEFAIL92", 0, 4243, 1);
	((struct pg_store *) f->st)->lease_us = TEST_LEASE;
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
	int64_t deadline = clock_mono_us() + 10 * SEC;
	char text[8192], q[512];
	PGconn *t2 = PQconnectdb(x->f->url);
	PGresult *res;
	ssize_t n;

	while ((n = pread(fileno(x->rel.log), text, sizeof(text) - 1, 0)) >= 0
	       && (text[n] = 0, strstr(text, "has no outcome yet") == NULL)
	       && clock_mono_us() < deadline)
		usleep(10000);
	/* another node's statement that locks the bounced row (a renewal, an operator's change) */
	snprintf(q, sizeof(q), "SET search_path = \"%s\"; BEGIN; SELECT 1 FROM messages "
		 "WHERE qid = '%s' FOR UPDATE", x->f->schema, x->qid);
	PQsendQuery(t2, q);
	usleep(300000);			/* it queues behind the bounce's transaction */
	snprintf(q, sizeof(q), "SELECT pg_advisory_unlock(%d)", x->rel.lock);
	PQclear(PQexec(x->rel.c, q));
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
	struct taken x = { { PQconnectdb(f->url), NULL, 4243, -1 }, f, "TAKENBOUNCE1", "TAKENNOTICE1", "" };
	struct store_story s;
	struct store_msg m;
	char text[8192], q[512];
	pthread_t th;
	int hash = 77, rc, fd;

	commit_held(f, 2);
	marked_load(f, x.qid, hash, &m);
	PQclear(PQexec(x.rel.c, "SELECT pg_advisory_lock(4243)"));
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

/* a lock of the test's that a replay's COMMIT waits for, in a deferred trigger */
#define COMMIT_GATE	"4243"

/* the gate: its connection holds COMMIT_GATE; seen: a read-back waited for the key locks */
struct gate {
	PGconn *c;
	int seen;
};

/*
 * gate_run - COMMIT_GATE given up once a read-back is seen waiting for the
 * replay's key locks (for a backend that waits for the gate), or after 5 s
 * without one
 */
static void *gate_run(void *arg)
{
	struct gate *g = arg;
	int64_t deadline = clock_mono_us() + 5 * SEC;
	PGresult *r;

	while (!g->seen && clock_mono_us() < deadline) {
		r = PQexec(g->c, "SELECT count(*) FROM pg_stat_activity a, pg_stat_activity b "
			   "WHERE b.pid = ANY(pg_blocking_pids(a.pid)) "
			   "AND pg_backend_pid() = ANY(pg_blocking_pids(b.pid))");
		g->seen = PQresultStatus(r) == PGRES_TUPLES_OK && atoll(PQgetvalue(r, 0, 0)) > 0;
		PQclear(r);
		if (!g->seen)
			usleep(10000);
	}
	r = PQexec(g->c, "SELECT pg_advisory_unlock(" COMMIT_GATE ")");
	PQclear(r);
	return NULL;
}

/* cut_at_gate - the commit hook: once the COMMIT waits at the gate, its answer lost */
static void cut_at_gate(PGconn *c)
{
	char q[160];

	snprintf(q, sizeof(q), "SELECT count(*) FROM pg_stat_activity WHERE pid = %d "
		 "AND query = 'COMMIT' AND wait_event = 'advisory'", PQbackendPID(c));
	if (!seen_within(q))
		fail_msg("the replay's COMMIT did not wait at the gate within 5 s");
	cut_fd(PQsocket(c));
}

/*
 * A batch of duplicates only loses its COMMIT's answer while that COMMIT
 * still runs (held here in a deferred trigger; in life a slow flush, a
 * lock): the read-back waits for the batch's key locks, which its backend
 * holds until the COMMIT ends, then counts the marks: committed, so 250,
 * and the kept batch's settling leaves the message to be delivered. The
 * count used to be read at once: no mark yet, 451, and the mark then
 * committed, so that the message was delivered though no submission of
 * it got 250.
 */
static void test_replay_commit_running(void **state)
{
	struct fx *f = *state;
	struct store_txn *t;
	struct store_claim c;
	struct store *other;
	struct gate g = { PQconnectdb(f->url), 0 };
	uint8_t h[STORE_HASH_LEN];
	pthread_t th;
	PGresult *r;
	int rc;

	kept_batch(f, "AWAYREPLAY09", 77, 1, h, cut_off);
	sql(f, "CREATE FUNCTION commit_waits() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
	    "PERFORM pg_advisory_xact_lock(" COMMIT_GATE "); RETURN NULL; END $$; "
	    "CREATE CONSTRAINT TRIGGER commit_waits AFTER UPDATE OF replayed ON messages "
	    "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION commit_waits()", NULL);
	r = PQexec(g.c, "SELECT pg_advisory_lock(" COMMIT_GATE ")");
	CHECK_INT("the test holds the gate", PQresultStatus(r), PGRES_TUPLES_OK);
	PQclear(r);

	other = node_open(f, "other");
	assert_int_equal(store_txn_begin(other, (const uint8_t (*)[STORE_HASH_LEN]) KH, 1, &t), 0);
	CHECK_INT("the other node finds the claim", store_txn_claim_get(t, KH, h, NOW, &c), 0);
	store_txn_replay(t, KH, h);
	assert_int_equal(pthread_create(&th, NULL, gate_run, &g), 0);
	commit_hook = cut_at_gate;
	rc = store_txn_commit(t);
	commit_hook = NULL;
	pthread_join(th, NULL);
	PQfinish(g.c);
	store_close(other);
	CHECK_INT("the COMMIT ended committed: 250", rc, 0);
	CHECK_INT("the read-back waited for the key locks", g.seen, 1);

	back((struct pg_store *) f->st);
	CHECK_INT("nothing taken", taken(f->st, NOW + SEC), 0);
	CHECK_INT("settled", (int) ((struct pg_store *) f->st)->n_pend, 0);
	((struct pg_store *) f->st)->settle_at = 0;	/* the next take settles voids */
	CHECK_INT("nothing taken", taken(f->st, NOW + SEC), 0);
	CHECK_INT("its message kept, to be delivered", qid_rows(f, "messages", "AWAYREPLAY09"), 1);
	CHECK_INT("the key replays it", claim_found(f->st, 77, NOW, &c), 1);
	CHECK_STR("under its QID", c.qid, "AWAYREPLAY09");
}

/*
 * cut_and_end - the commit hook: once its mark waits for the blocker's
 * row, c's answer lost and its backend ended, the COMMIT unrun
 */
static void cut_and_end(PGconn *c)
{
	int pid = PQbackendPID(c);
	char q[160];

	snprintf(q, sizeof(q), "SELECT count(*) FROM pg_stat_activity WHERE pid = %d "
		 "AND wait_event_type = 'Lock'", pid);
	if (!seen_within(q))
		fail_msg("the replay's mark did not wait for the blocker within 5 s");
	cut_fd(PQsocket(c));
	snprintf(q, sizeof(q), "SELECT count(*) FROM pg_terminate_backend(%d)", pid);
	(void) sql_int(hook_fx->url, q);
}

/*
 * The other half: a batch of duplicates only whose COMMIT's answer is
 * lost and whose COMMIT never runs (its backend ended while its mark
 * waits for a row another session holds) reads back no mark: 451, and
 * the kept batch's settling voids the message, never delivered, and its
 * key is new.
 */
static void test_replay_commit_unrun(void **state)
{
	struct fx *f = *state;
	struct store_txn *t;
	struct store_claim c;
	struct store *other;
	PGconn *blocker = PQconnectdb(f->url);
	PGresult *r;
	uint8_t h[STORE_HASH_LEN];
	int rc;

	kept_batch(f, "AWAYREPLAY10", 78, 1, h, cut_off);
	r = PQexec(blocker, "BEGIN; SELECT 1 FROM messages WHERE qid = 'AWAYREPLAY10' FOR UPDATE");
	CHECK_INT("the blocker holds its row", PQresultStatus(r), PGRES_TUPLES_OK);
	PQclear(r);
	other = node_open(f, "other");
	assert_int_equal(store_txn_begin(other, (const uint8_t (*)[STORE_HASH_LEN]) KH, 1, &t), 0);
	CHECK_INT("the other node finds the claim", store_txn_claim_get(t, KH, h, NOW, &c), 0);
	store_txn_replay(t, KH, h);
	commit_hook = cut_and_end;
	rc = store_txn_commit(t);
	commit_hook = NULL;
	store_close(other);
	PQfinish(blocker);		/* before any check: its row lock would hold the teardown */
	CHECK_INT("no mark read back: 451", rc, STORE_EAGAIN);

	back((struct pg_store *) f->st);
	CHECK_INT("nothing taken", taken(f->st, NOW + SEC), 0);
	CHECK_INT("settled", (int) ((struct pg_store *) f->st)->n_pend, 0);
	((struct pg_store *) f->st)->settle_at = 0;	/* the next take settles voids */
	CHECK_INT("nothing taken", taken(f->st, NOW + SEC), 0);
	CHECK_INT("voided and dropped", qid_rows(f, "messages", "AWAYREPLAY10"), 0);
	CHECK_INT("the void settled", void_count(f), 0);
	CHECK_INT("the key is new", claim_found(f->st, 78, NOW, &c), 0);
}

/*
 * A void written after another node took its message (a take racing with
 * a kept batch's void, test_settle_spares_taken's case) while that node
 * still holds its lease, sending it: the settle leaves the void until the
 * lease ends, and meanwhile the claim counts, so that a retry of its key
 * replays the QID being sent. It counted for nothing: the retry was a new
 * message, and the message was sent twice.
 */
static void test_void_after_take(void **state)
{
	struct fx *f = *state;
	struct store *other = node_open(f, "other");
	struct store_claim c;
	int found;

	spool_one(f->st, "RACETAKEN002", 42);
	sql(f, "UPDATE messages SET lease_until = 0", NULL);	/* its lease ran out */
	CHECK_INT("the other node takes it", taken(other, NOW + SEC), 1);
	void_decided(f, "RACETAKEN002");
	((struct pg_store *) f->st)->settle_at = 0;	/* the next take settles voids */
	CHECK_INT("nothing taken", taken(f->st, NOW + SEC), 0);
	CHECK_INT("the void left while the other node's lease is live", void_count(f), 1);
	found = claim_found(f->st, 42, NOW, &c);
	store_close(other);
	CHECK_INT("a retry of its key finds the claim", found, 1);
	CHECK_STR("the QID being sent", c.qid, "RACETAKEN002");
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
	rc = store_lease_renew(f->st, clock_us());
	decoded = n_ints;
	n_ints = -1;
	CHECK_INT("renew", rc, 0);
	CHECK_INT("the leases still held", listed(f->st), 49);
	if (decoded > 50)
		fail_msg("integers decoded by a renewal of 50 leases, one lost: got %d, want "
			 "at most 50", decoded);
}

/* a store call in a thread of its own, held at the server while the test looks */
struct held {
	int (*call)(struct held *h);
	struct store *st;
	struct store_msg *m;
	pthread_t th;
	int rc, n;			/* its answer; what a take took */
};

/* held_main - the call, its answer kept */
static void *held_main(void *arg)
{
	struct held *h = arg;

	h->rc = h->call(h);
	return NULL;
}

/* held_take - st's take of the due messages, counted in n (taken(), without its check) */
static int held_take(struct held *h)
{
	return store_queue_take(h->st, NOW + SEC, 100, NULL, 0, count_cb, &h->n);
}

/* held_start - call on st (m) begun in a thread; fails if it is not seen waiting as query says */
static void held_start(struct held *h, int (*call)(struct held *h), struct store *st,
		       struct store_msg *m, const char *query)
{
	h->call = call;
	h->st = st;
	h->m = m;
	h->rc = h->n = 0;
	assert_int_equal(pthread_create(&h->th, NULL, held_main, h), 0);
	if (!seen_within(query))
		fail_msg("not seen within 5 s: %s", query);
}

/*
 * gate_shut - every later COMMIT that updated a message waits at the
 * gate (COMMIT_GATE, in a deferred trigger), held by the connection
 * returned, until gate_open
 */
static PGconn *gate_shut(struct fx *f)
{
	PGconn *g = PQconnectdb(f->url);
	PGresult *r;

	sql(f, "CREATE FUNCTION commit_waits() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
	    "PERFORM pg_advisory_xact_lock(" COMMIT_GATE "); RETURN NULL; END $$; "
	    "CREATE CONSTRAINT TRIGGER commit_waits AFTER UPDATE ON messages "
	    "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION commit_waits()", NULL);
	r = PQexec(g, "SELECT pg_advisory_lock(" COMMIT_GATE ")");
	CHECK_INT("the test holds the gate", PQresultStatus(r), PGRES_TUPLES_OK);
	PQclear(r);
	return g;
}

/* gate_open - the COMMITs waiting at the gate go on */
static void gate_open(PGconn *g)
{
	PGresult *r = PQexec(g, "SELECT pg_advisory_unlock(" COMMIT_GATE ")");

	PQclear(r);
	PQfinish(g);
}

/* a session of the database waits for a row another holds (not for the gate) */
#define ROW_WAIT(what) "SELECT count(*) FROM pg_stat_activity WHERE datname = " \
	"current_database() AND wait_event = 'transactionid' AND query LIKE '" what "%'"

/*
 * A settle whose snapshot was taken before another node's take of the
 * message committed (that node took it while its void was written, the
 * race of test_settle_spares_taken, its COMMIT held here at a gate): its
 * delete of the message waits for the take's row lock, then finds the
 * message taken, and leaves it with its claim and recipients, as a
 * settle that came later would. The delete asked only whether its
 * snapshot had seen a take: the message went, with its claim and its
 * recipients, and the taker's writes found nothing.
 */
static void test_settle_races_take(void **state)
{
	struct fx *f = *state;
	struct store *other = node_open(f, "other");
	struct held tk, st;
	PGconn *g;

	hook_fx = f;
	spool_one(f->st, "RACETAKEN003", 43);
	sql(f, "UPDATE messages SET lease_until = 0", NULL);	/* its lease ran out */
	g = gate_shut(f);
	held_start(&tk, held_take, other, NULL, "SELECT count(*) FROM pg_stat_activity WHERE "
		   "datname = current_database() AND wait_event = 'advisory'");
	void_decided(f, "RACETAKEN003");
	((struct pg_store *) f->st)->settle_at = 0;	/* the next take settles voids */
	held_start(&st, held_take, f->st, NULL, ROW_WAIT("WITH d AS (DELETE FROM voids"));
	gate_open(g);
	pthread_join(tk.th, NULL);
	pthread_join(st.th, NULL);
	CHECK_INT("the other node's take", tk.rc, 0);
	CHECK_INT("it took the message", tk.n, 1);
	CHECK_INT("the settling node's take", st.rc, 0);
	CHECK_INT("the void settled", void_count(f), 0);
	CHECK_INT("its message kept", msg_count(f, "RACETAKEN003"), 1);
	CHECK_INT("its claim kept", qid_rows(f, "claims", "RACETAKEN003"), 1);
	CHECK_INT("its recipient kept", qid_rows(f, "rcpts", "RACETAKEN003"), 1);
	CHECK_INT("the taker sends it", sent(other, "RACETAKEN003"), 0);
	store_close(other);
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

/* settle_then_take - a thread: the node's next use of the database, which settles its kept batch */
static void *settle_then_take(void *arg)
{
	(void) taken(arg, NOW + SEC);
	return NULL;
}

/*
 * A kept batch settled while another node's take of its message is in
 * flight (its row updated, not committed: held here in a transaction of
 * the test's, as a take whose commit waits for the standby would be):
 * the void waits for the take (FOR SHARE on the message), then sees it
 * and leaves the message to be delivered, with no void. It read the row
 * as not taken and wrote the void: until the take committed, every
 * claims lookup read the key as new (store_pg_claim.c's SQL_VOID: a void,
 * and no take seen), so that a retry was a second message, sent beside
 * it (and before 8888095 the settle then dropped the taken message).
 */
static void test_void_waits_for_take(void **state)
{
	struct fx *f = *state;
	PGconn *o = PQconnectdb(f->url);
	struct store_claim c;
	uint8_t h[STORE_HASH_LEN];
	pthread_t th;
	PGresult *r;
	char q[256];
	long long voids;
	int waited;

	kept_batch(f, "AWAYTAKING01", 79, 1, h, cut_off);
	sql(f, "UPDATE messages SET lease_until = 0 WHERE qid = 'AWAYTAKING01'", NULL);
	r = PQexec(o, "BEGIN; UPDATE messages SET lease_owner = 'other', lease_since = 1, "
		   "lease_until = 9223372036854775807, lease_token = nextval('lease_seq') "
		   "WHERE qid = 'AWAYTAKING01'");
	CHECK_INT("a take in flight", PQresultStatus(r), PGRES_COMMAND_OK);
	PQclear(r);
	back((struct pg_store *) f->st);
	assert_int_equal(pthread_create(&th, NULL, settle_then_take, f->st), 0);
	snprintf(q, sizeof(q), "SELECT count(*) FROM pg_stat_activity "
		 "WHERE %d = ANY(pg_blocking_pids(pid))", PQbackendPID(o));
	waited = seen_within(q);
	voids = void_count(f);
	r = PQexec(o, "COMMIT");
	PQclear(r);
	PQfinish(o);
	pthread_join(th, NULL);
	CHECK_INT("the take met in flight", waited, 1);
	CHECK_INT("no void while the take was in flight", voids, 0);
	CHECK_INT("settled", (int) ((struct pg_store *) f->st)->n_pend, 0);
	CHECK_INT("no void", void_count(f), 0);
	CHECK_INT("its message kept, to be delivered", msg_count(f, "AWAYTAKING01"), 1);
	CHECK_INT("the key replays it", claim_found(f->st, 79, NOW, &c), 1);
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

/* the gates of take_gates(): a take's first read of a message, a take's COMMIT */
#define TAKE_GATE	"4245"
#define TAKEN_GATE	"4246"

/* a session waits at TAKEN_GATE, or a take is over (its connection idle) */
#define TAKEN_WAIT "SELECT count(*) FROM pg_stat_activity a WHERE datname = current_database() " \
	"AND query LIKE 'UPDATE messages m SET lease_owner%' AND (state = 'idle' OR pid IN " \
	"(SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objid = " TAKEN_GATE \
	" AND NOT granted))"

/*
 * take_gates - a take (store_pg_lease.c's statement) waits at TAKE_GATE
 * where it first reads a message, after its snapshot, before it locks a
 * row (a row-level security policy, forced on the tables' owner); and a
 * COMMIT of a take of a message (lease_since written) at TAKEN_GATE (a
 * deferred trigger). The connection returned holds both until it ends.
 */
static PGconn *take_gates(struct fx *f)
{
	PGconn *g = PQconnectdb(f->url);
	PGresult *r;

	sql(f, "CREATE FUNCTION take_gate(k int8, always bool) RETURNS bool LANGUAGE plpgsql "
	    "AS $$ BEGIN IF always OR current_query() LIKE 'UPDATE messages m SET lease_owner%%' "
	    "THEN PERFORM pg_advisory_xact_lock_shared(k); END IF; RETURN true; END $$; "
	    "CREATE FUNCTION taken_waits() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
	    "PERFORM take_gate(" TAKEN_GATE ", true); RETURN NULL; END $$; "
	    "CREATE CONSTRAINT TRIGGER taken_waits AFTER UPDATE ON messages "
	    "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW "
	    "WHEN (OLD.lease_since IS DISTINCT FROM NEW.lease_since) EXECUTE FUNCTION taken_waits(); "
	    "CREATE POLICY take_waits ON messages USING (take_gate(" TAKE_GATE ", false)); "
	    "ALTER TABLE messages ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY", NULL);
	r = PQexec(g, "SELECT pg_advisory_lock(" TAKE_GATE "), pg_advisory_lock(" TAKEN_GATE ")");
	CHECK_INT("the test holds the gates", PQresultStatus(r), PGRES_TUPLES_OK);
	PQclear(r);
	return g;
}

/*
 * A take whose snapshot was taken before a kept batch's void committed,
 * and which reaches the message's row after it (held here at a gate in
 * between), leaves the message: the void holds it under its accepting
 * node's lease, which the take tests again on the row's last version.
 * The void only share-locked the row, which a committed locker leaves
 * as it was: the take took the message, reading voids in its snapshot,
 * and until it committed (held at a second gate) a retry of the key
 * was a new message (the void seen, the take not: store_pg_claim.c's
 * SQL_VOID), sent beside the message answered 451.
 */
static void test_void_beats_older_take(void **state)
{
	struct fx *f = *state;
	struct pg_store *a = (struct pg_store *) f->st;
	struct store *other;
	struct store_claim c;
	uint8_t h[STORE_HASH_LEN];
	struct held tk;
	PGresult *r;
	PGconn *g;
	long long voids;
	int settled, in_gap, found;

	kept_batch(f, "AWAYVOIDED01", 82, 1, h, cut_off);
	sql(f, "UPDATE messages SET lease_until = 0 WHERE qid = 'AWAYVOIDED01'", NULL);
	g = take_gates(f);
	other = node_open(f, "other");
	held_start(&tk, held_take, other, NULL, "SELECT count(*) FROM pg_stat_activity WHERE "
		   "datname = current_database() AND wait_event = 'advisory'");
	back(a);
	settled = take_within(a, "the kept batch settled");	/* its void, committed */
	voids = void_count(f);
	r = PQexec(g, "SELECT pg_advisory_unlock(" TAKE_GATE ")");
	PQclear(r);
	in_gap = seen_within(TAKEN_WAIT);
	found = claim_found(f->st, 82, NOW, &c);	/* a retry of the key, in the gap */
	PQfinish(g);
	pthread_join(tk.th, NULL);
	CHECK_INT("settled", settled, 0);
	CHECK_INT("voided", voids, 1);
	CHECK_INT("the take at its commit, or over", in_gap, 1);
	CHECK_INT("the other node's take", tk.rc, 0);
	CHECK_INT("a retry of its key, in the gap, is a new message", found, 0);
	CHECK_INT("a take whose snapshot predates the void leaves its message (else sent "
		  "beside that retry)", tk.n, 0);
	a->settle_at = 0;		/* the next take settles voids */
	CHECK_INT("nothing taken", taken(f->st, NOW + SEC), 0);
	CHECK_INT("the void settled", void_count(f), 0);
	CHECK_INT("its message dropped, never delivered", msg_count(f, "AWAYVOIDED01"), 0);
	CHECK_INT("nothing for the other node", taken(other, NOW + SEC), 0);
	store_close(other);
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
	struct fx *f = *state;

	commit_held(f, 2);
	((struct pg_store *) f->st)->lease_us = 120 * SEC;	/* the spool's lease, and the cap */
	notice_decided(f, "NOTICESTOP01", "NOTICESTOP91", 0, 4243, 2);
	((struct pg_store *) f->st)->lease_us = TEST_LEASE;
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
	rc = store_txn_claim_get(*t, KH, h, NOW, &c);
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
 * standby_away - every commit of the cluster that wrote waits for a
 * synchronous standby that never comes (away 1: seen so on a probe,
 * whose wait is then cancelled, within 5 s), or no longer (away 0: those
 * waiting go on); as the superuser (cluster.py's IDEMRELAY_PG_ADMIN)
 */
static void standby_away(int away)
{
	const char *url = getenv("IDEMRELAY_PG_ADMIN");
	int64_t deadline = clock_mono_us() + 5 * SEC;
	PGconn *a, *p;
	PGresult *r;
	PGcancel *k;
	char q[160], e[64];
	int seen = 0, tries = 0;

	if (url == NULL)
		fail_msg("IDEMRELAY_PG_ADMIN is not set (tests/pg/cluster.py run sets it)");
	a = PQconnectdb(url);
	PQclear(PQexec(a, away ? "ALTER SYSTEM SET synchronous_standby_names = 'nobody'"
		       : "ALTER SYSTEM RESET synchronous_standby_names"));
	PQclear(PQexec(a, "SELECT pg_reload_conf()"));
	p = PQconnectdb(url);
	snprintf(q, sizeof(q), "SELECT count(*) FROM pg_stat_activity WHERE pid = %d "
		 "AND wait_event = 'SyncRep'", PQbackendPID(p));
	while (away && !seen && clock_mono_us() < deadline) {
		/* a commit that wrote: it waits once the server has taken the setting */
		snprintf(e, sizeof(e), "CREATE TEMP TABLE away_probe%d ()", tries++);
		if (PQsendQuery(p, e) != 1)
			break;
		while (!seen && PQisBusy(p) && clock_mono_us() < deadline) {
			seen = sql_int(url, q) == 1;
			(void) PQconsumeInput(p);
		}
		if (PQisBusy(p) && (k = PQgetCancel(p)) != NULL) {
			(void) PQcancel(k, e, sizeof(e));	/* committed locally, with a warning */
			PQfreeCancel(k);
		}
		while ((r = PQgetResult(p)) != NULL)
			PQclear(r);
	}
	PQfinish(p);
	PQfinish(a);
	if (away && !seen) {
		standby_away(0);	/* else the fixture's teardown would wait */
		fail_msg("a commit did not wait for the synchronous standby within 5 s");
	}
}

/* a writer to stop once its commit waits for the standby (stop_run) */
struct stopper {
	FILE *log;			/* not owned: where the log goes meanwhile (log_capture) */
	struct commit *cm;
};

/* stop_run - the writer told the daemon stops once the store says its commits wait */
static void *stop_run(void *arg)
{
	struct stopper *s = arg;

	(void) logged_within(s->log, "commits wait for replication");
	commit_stopping(s->cm);		/* as the daemon's SIGTERM (server_stop()) */
	return NULL;
}

/*
 * The daemon stopping (SIGTERM: server_stop() makes the writer's stop
 * descriptor readable, commit_stopping(); deliver_stop() a delivery
 * thread's) while a submission's COMMIT waits for the synchronous
 * standby (here one that never comes: synchronous_standby_names names
 * none that runs): the hold ends at the stop as at store.commit_wait,
 * the submission answered 451 and voided; once the standby is back the
 * COMMIT goes through and the settle drops the message, never
 * delivered. The hold went on to store.commit_wait (60 s here), and the
 * daemon's exit, which waits for every commit's answer, with it.
 */
static void test_commit_hold_stopped(void **state)
{
	static const char *const a[] = { "a@example.com" };
	struct fx *f = *state;
	struct pg_store *st = (struct pg_store *) f->st;
	struct commit_req *r = req_make("HOLDSTOP0001", "hs", "x\r\n", a, 1, gc_done);
	struct stopper s = { NULL, commit_start(f->st, gc_committed, NULL) };
	pthread_t th;
	char text[8192];
	int fd, i;
	int64_t began;
	long long voids;

	st->commit_wait_us = 60 * SEC;
	gc_answered = 0;
	standby_away(1);
	fd = log_capture(&s.log);
	assert_int_equal(pthread_create(&th, NULL, stop_run, &s), 0);
	began = clock_mono_us();
	commit_submit(s.cm, r);
	for (i = 0; i < 1200 && gc_answered < 1; i++) {	/* 120 s at most */
		usleep(100000);
		commit_reap(s.cm);
	}
	began = clock_mono_us() - began;
	pthread_join(th, NULL);
	log_captured(fd, s.log, text, sizeof(text));
	voids = void_count(f);
	standby_away(0);		/* before any check: the COMMIT goes through */
	commit_stop(s.cm);
	st->commit_wait_us = PG_COMMIT_WAIT_US;
	if (began >= 10 * SEC)
		fail_msg("the submission was answered %.1f s after it came, past the stop",
			 (double) began / SEC);
	CHECK_INT("held for the standby", strstr(text, "commits wait for replication") != NULL, 1);
	CHECK_INT("answered at the stop", r->outcome, COMMIT_FAILED);
	CHECK_INT("451", r->error, STORE_EAGAIN);
	CHECK_INT("voided", voids, 1);
	req_free(r);
	hook_fx = f;
	if (!seen_within("SELECT count(*) = 0 FROM pg_stat_activity WHERE wait_event = 'SyncRep'"))
		fail_msg("the COMMIT still waits for the standby after 5 s");
	st->settle_at = 0;		/* the next take settles voids */
	CHECK_INT("nothing taken", taken(f->st, NOW + SEC), 0);
	CHECK_INT("the void settled", void_count(f), 0);
	CHECK_INT("its message dropped, never delivered", msg_count(f, "HOLDSTOP0001"), 0);
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

#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_nodes),
		T(test_stats_estimate),
		T(test_schema_version),
		cmocka_unit_test(test_unreachable),
		T(test_slots_taken),
		T(test_url_options),
		T(test_probe_no_slots),
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
		T(test_race_two_nodes),
		T(test_unknown_commit),
		T(test_voids),
		T(test_commit_unreachable),
		T(test_commit_unreachable_replayed),
		T(test_commit_unreachable_replay_lost),
		T(test_commit_unreachable_not_replayed),
		T(test_commit_unreachable_taken),
		T(test_settle_stalled),
		T(test_take_waits_settle_unheld),
		T(test_take_locks_once),
		T(test_take_settles_late),
		T(test_settle_aborted_id),
		T(test_settle_status_refused),
		T(test_close_settles),
		T(test_settle_skips_held_key),
		T(test_settle_spares_taken),
		T(test_duplicates_write),
		T(test_result_deadline),
		T(test_prepared),
		T(test_prepared_txn),
		T(test_fetch_one_statement),
		T(test_keep_first_load),
		T(test_plans_scale),
		T(test_plans_young),
		T(test_plans_idle_queue),
		T(test_group_commit_lost_lease),
		T(test_runs_merged),
		T(test_revive),
		T(test_revive_not_its_mark),
		T(test_revive_refused),
		T(test_mark_columns),
		T(test_rcpts_go_with_message),
		T(test_walk_skips_corrupt),
		T(test_expire_one_at_a_time),
		T(test_key_without_index),
		T(test_schema_upgrade),
		T(test_schema_11_reads_go_on),
		T(test_schema_11_no_deadlock),
		T(test_schema_11_drop_bounded),
		T(test_notice_commit_waits),
		T(test_notice_first_commit_waits),
		T(test_notice_commit_aborts),
		T(test_notice_commit_taken),
		T(test_notice_commit_unreachable),
		T(test_replay_commit_running),
		T(test_replay_commit_unrun),
		T(test_void_after_take),
		T(test_renew_reads_lost),
		T(test_settle_races_take),
		T(test_revive_racing_verdict),
		T(test_void_waits_for_take),
		T(test_revive_lock_waits_bounded),
		T(test_notice_commit_aborted_away),
		T(test_notice_commit_aborted_capped),
		T(test_void_beats_older_take),
		T(test_notice_commit_stopped),
		T(test_idle_transaction_ended),
		T(test_notice_commit_partial),
		T(test_notice_commit_partial_short),
		T(test_idle_limit_slow_send),
		T(test_commit_hold_stopped),
		T(test_server_keepalive),
	};

	if (fx_pg() == NULL) {
		printf("test_store_pg: IDEMRELAY_PG_URL is not set: skipped (make test-pg runs it)\n");
		return 0;
	}
	return cmocka_run_group_tests_name("store_pg", tests, NULL, NULL);
}
