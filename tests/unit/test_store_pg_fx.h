/*
 * test_store_pg_fx - what the PostgreSQL backend's tests share
 * (test_store_pg, test_store_pg_schema, _lease, _commit, _unreachable,
 * _settle, _revive, _notice): the backend's link seam (store_pg_seam.c)
 * as the tests set it (the wait for a result, a hook at each commit
 * sent), a second node, SQL on the fixture's schema, takes counted and
 * a node's leases read, a message spooled and sent; a commit's answer
 * cut off with the database away and brought back, a batch kept as
 * answered 451, takes timed; a call held in a thread at a gate the test
 * opens. Each test has a schema of its own (test_store_fx.h); a second
 * node is a second handle on it.
 */
#ifndef TESTS_UNIT_TEST_STORE_PG_FX_H
#define TESTS_UNIT_TEST_STORE_PG_FX_H

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

/* node_open - a second node on the fixture's schema */
static inline struct store *node_open(struct fx *f, const char *name)
{
	struct store *st = NULL;
	char err[512] = "";
	int rc;

	if ((rc = store_pg_open(&st, f->url, name, TEST_LEASE, err, sizeof(err))) != 0)
		fail_msg("open node %s: got %d (%s), want 0", name, rc, err);
	return st;
}

/* sql - run sql with the fixture's schema first in the search path */
static inline void sql(struct fx *f, const char *fmt, const char *arg)
{
	char text[1024], q[1200];

	snprintf(text, sizeof(text), fmt, arg ? arg : "");
	snprintf(q, sizeof(q), "SET search_path = \"%s\"; %s", f->schema, text);
	fx_pg_sql(q);
}

/* count_cb - count the messages offered */
static inline int count_cb(void *arg, const struct store_msg *m)
{
	(void) m;
	(*(int *) arg)++;
	return 0;
}

/* taken - how many due messages node st takes at now */
static inline int taken(struct store *st, int64_t now)
{
	int n = 0;

	CHECK_INT("queue_take", store_queue_take(st, now, 100, NULL, 0, count_cb, &n), 0);
	return n;
}

/*
 * listed - how many messages node st holds leased: rows queued, not held,
 * under its name and a token that its lease map has for them (its own
 * connection, not the node's: nothing the node counts or plans)
 */
static inline int listed(struct store *st)
{
	struct pg_store *p = (struct pg_store *) st;
	PGconn *o = PQconnectdb(p->url);
	const char *node[1] = { p->node };
	PGresult *r;
	int64_t token;
	int i, n = 0;

	r = PQexecParams(o, "SELECT qid, lease_token FROM messages WHERE lease_owner = $1 AND "
			 PG_ROW_QUEUED("") " AND NOT held", 1, NULL, node, NULL, NULL, 0);
	if (PQresultStatus(r) != PGRES_TUPLES_OK)
		fail_msg("leases of %s: %s", p->node, PQerrorMessage(o));
	for (i = 0; i < PQntuples(r); i++)
		if (store_pg_lease_get(p, PQgetvalue(r, i, 0), &token) == 0
		    && token == atoll(PQgetvalue(r, i, 1)))
			n++;
	PQclear(r);
	PQfinish(o);
	return n;
}

/* spool_one - a message of one recipient with a claim, leased to st by its acceptance */
static inline void spool_one(struct store *st, const char *qid, int hash)
{
	struct store_msg m;

	msg_new(&m, qid, 1, 100);
	CHECK_INT(qid, spool(st, &m, &hash, 1, NOW + SEC), 0);
	store_msg_free(&m);
}

/* sent - st's update of qid: its one recipient sent */
static inline int sent(struct store *st, const char *qid)
{
	struct store_msg m;
	int rc;

	msg_new(&m, qid, 1, 100);
	m.rcpts[0].state = STORE_RCPT_SENT;
	rc = store_msg_update(st, &m);
	store_msg_free(&m);
	return rc;
}

static struct fx *hook_fx;
static const char *hook_qid;

/* sql_int - the first column of the first row of query on the schema, as text read as a number */
static inline long long sql_int(const char *url, const char *query)
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
static inline long long void_count(struct fx *f)
{
	char q[256];

	snprintf(q, sizeof(q), "SET search_path = \"%s\"; SELECT count(*) FROM voids", f->schema);
	return sql_int(f->url, q);
}

/* qid_rows - rows of table (messages, claims, rcpts) that name qid */
static inline long long qid_rows(struct fx *f, const char *table, const char *qid)
{
	char q[256];

	snprintf(q, sizeof(q), "SET search_path = \"%s\"; SELECT count(*) FROM %s WHERE qid = '%s'",
		 f->schema, table, qid);
	return sql_int(f->url, q);
}

static char *away_url;		/* the node's own URL while it is given a dead one */

/* cut_fd - a connection's socket reads end of file from now on */
static inline void cut_fd(int fd)
{
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0 || dup2(sv[0], fd) < 0)
		fail_msg("socketpair: %s", strerror(errno));
	close(sv[0]);
	close(sv[1]);
}

/* cut_away - c's answer lost, and every other way to the database with it: nothing can be read */
static inline void cut_away(PGconn *c)
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
static inline int seen_within(const char *query)
{
	int64_t deadline = clock_mono_us() + 5 * SEC;
	int seen;

	while (!(seen = sql_int(hook_fx->url, query) == 1) && clock_mono_us() < deadline)
		usleep(10000);
	return seen;
}

/* cut_off - the commit hook: once the commit is visible, its answer lost and the database away */
static inline void cut_off(PGconn *c)
{
	char q[256];

	snprintf(q, sizeof(q), "SELECT count(*) FROM messages WHERE qid = '%s'", hook_qid);
	if (!seen_within(q))
		fail_msg("the commit did not become visible within 5 s");
	cut_away(c);
}

/* back - the database reachable again for st, at once */
static inline void back(struct pg_store *st)
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
static inline void kept_batch(struct fx *f, const char *qid, int hash, int keyed,
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
		CHECK_INT("a new key", claim_in(t, KH, h, NOW, &c), STORE_ENOTFOUND);
	store_txn_msg_put(t, &m);
	claim_of(&c, qid, 1, NOW + SEC);
	store_txn_claim_put(t, KH, h, &c);
	commit_hook = hook;
	CHECK_INT("committed, nothing can be read: 451", store_txn_commit(t), STORE_EAGAIN);
	commit_hook = NULL;
	store_msg_free(&m);
}

struct settle_taker {
	struct pg_store *st;
	int rc;
	sem_t done;
};

/* taker_run - one store_pg_take, its connection given back */
static inline void *taker_run(void *arg)
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
static inline int take_within(struct pg_store *st, const char *what)
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

/* msg_count - rows of messages named qid */
static inline int msg_count(struct fx *f, const char *qid)
{

	return (int) qid_rows(f, "messages", qid);
}

/* logged_within - has log (log_capture) said what within 10 s? */
static inline int logged_within(FILE *log, const char *what)
{
	int64_t deadline = clock_mono_us() + 10 * SEC;
	char text[8192];
	ssize_t n;

	while ((n = pread(fileno(log), text, sizeof(text) - 1, 0)) >= 0
	       && (text[n] = 0, strstr(text, what) == NULL) && clock_mono_us() < deadline)
		usleep(10000);
	return n >= 0 && strstr(text, what) != NULL;
}

/* a lock of the test's that a replay's COMMIT waits for, in a deferred trigger */
#define COMMIT_GATE	"4243"

/* a store call in a thread of its own, held at the server while the test looks */
struct held {
	int (*call)(struct held *h);
	struct store *st;
	struct store_msg *m;
	pthread_t th;
	int rc, n;			/* its answer; what a take took */
};

/* held_main - the call, its answer kept */
static inline void *held_main(void *arg)
{
	struct held *h = arg;

	h->rc = h->call(h);
	return NULL;
}

/* held_start - call on st (m) begun in a thread; fails if it is not seen waiting as query says */
static inline void held_start(struct held *h, int (*call)(struct held *h), struct store *st,
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
static inline PGconn *gate_shut(struct fx *f)
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
static inline void gate_open(PGconn *g)
{
	PGresult *r = PQexec(g, "SELECT pg_advisory_unlock(" COMMIT_GATE ")");

	PQclear(r);
	PQfinish(g);
}

/* a session of the database waits for a row another holds (not for the gate) */
#define ROW_WAIT(what) "SELECT count(*) FROM pg_stat_activity WHERE datname = " \
	"current_database() AND wait_event = 'transactionid' AND query LIKE '" what "%'"

/* T - a test on a store of its own (test_store_fx.h) */
#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)

/* PG_RUN - main()'s end: the tests of group name run, or skipped without a server */
#define PG_RUN(name, tests) \
	(fx_pg() == NULL ? pg_skipped(name) : cmocka_run_group_tests_name(name, tests, NULL, NULL))

/* pg_skipped - say that test_<name> did not run: IDEMRELAY_PG_URL is not set */
static inline int pg_skipped(const char *name)
{
	printf("test_%s: IDEMRELAY_PG_URL is not set: skipped (make test-pg runs it)\n", name);
	return 0;
}

#endif
