/*
 * test_store_pg_settle - a batch kept as answered 451 settled
 * (store/pg/store_pg_pend.c): a settling whose void stalls never hangs
 * the node; a take waits for another caller's settle holding no
 * connection, and locks the pool's mutex once when nothing is kept; a
 * batch kept during a take settled before the caller has its
 * connection; one whose id reads as aborted voided; settled at a clean
 * stop; a void skips a key another batch holds, and spares a message
 * another node took, also when that take commits while the void
 * deletes, and when it began before the void committed; a void's settle
 * waits for a take in flight. Skipped without IDEMRELAY_PG_URL.
 */
#include "test_store_pg_fx.h"

/*
 * Calls by one thread, counted: the locks of one mutex, or the key locks
 * derived (with counted NULL, n_keyed >= 0). This binary wraps the two
 * (Makefile).
 */
static pthread_mutex_t *counted;
static pthread_t counter;
static int n_counted, n_keyed = -1;
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

/*
 * A void written after another node took its message (a settling of
 * store_pg_pend.c whose look at the message came before that take
 * committed) goes alone: the message, maybe sent in part, is left to be
 * delivered, as the settling leaves one taken before it looked
 * (test_store_pg_unreachable's test_commit_unreachable_taken); it was
 * dropped. Here the other node took it and deferred it.
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
	CHECK_INT("the other node finds the claim", claim_in(t, KH, h, NOW, &c), 0);
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

/* held_take - st's take of the due messages, counted in n (taken(), without its check) */
static int held_take(struct held *h)
{
	return store_queue_take(h->st, NOW + SEC, 100, NULL, 0, count_cb, &h->n);
}

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_settle_stalled),
		T(test_take_waits_settle_unheld),
		T(test_take_locks_once),
		T(test_take_settles_late),
		T(test_settle_aborted_id),
		T(test_close_settles),
		T(test_settle_skips_held_key),
		T(test_settle_spares_taken),
		T(test_void_after_take),
		T(test_settle_races_take),
		T(test_void_waits_for_take),
		T(test_void_beats_older_take),
	};

	return PG_RUN("store_pg_settle", tests);
}
