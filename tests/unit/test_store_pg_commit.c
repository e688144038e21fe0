/*
 * test_store_pg_commit - what a PostgreSQL batch writes and reads
 * (store/pg/): two nodes racing on one key; a commit whose outcome was
 * unknown read back; what a batch of duplicates and the counts' flush
 * write (rows, and whether it commits); the accepting node's first load
 * from its own copy; a lost lease in a group commit failing only its own
 * write; marks and outcomes of several messages one statement a kind; a
 * story's recipients expired with it; the expiry on one node at a time;
 * the queue walked past a message whose recipients are missing; a key's
 * messages found through its claims, messages having no key index; a
 * COMMIT held for the synchronous standby answered at the daemon's stop.
 * Skipped without IDEMRELAY_PG_URL.
 */
#include "test_store_pg_fx.h"
#include "test_commit_help.h"

#define ROUNDS		30

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
	if ((rc = claim_in(t, kh[0], h, NOW, &c)) == 0) {
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
		CHECK_INT("a duplicate", claim_in(t, KH, h, NOW, &c), 0);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_race_two_nodes),
		T(test_unknown_commit),
		T(test_duplicates_write),
		T(test_keep_first_load),
		T(test_group_commit_lost_lease),
		T(test_runs_merged),
		T(test_rcpts_go_with_message),
		T(test_walk_skips_corrupt),
		T(test_expire_one_at_a_time),
		T(test_key_without_index),
		T(test_commit_hold_stopped),
	};

	return PG_RUN("store_pg_commit", tests);
}
