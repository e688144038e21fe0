/*
 * test_store_pg_unreachable - a commit that committed while PostgreSQL
 * could not be reached to read it (store/pg/store_pg_pend.c): the voids;
 * 451, then voided before the node's next use of the database, with or
 * without the id the key locks give, but not one another node replayed
 * or took for delivery while it was cut off past the lease; a replay
 * whose own commit's answer is lost read back by its mark, once that
 * COMMIT has ended (none, one that never ran: 451); kept while its status
 * read is refused for a passing reason, a cancel, as its COMMIT still
 * waits. Skipped without IDEMRELAY_PG_URL.
 */
#include "test_store_pg_fx.h"

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
	CHECK_INT("its claim, in a batch", claim_in(t, KH, h, NOW, &c), STORE_ENOTFOUND);
	hash_of(h, 32);
	CHECK_INT("the other, in a batch", claim_in(t, KH, h, NOW, &c), 0);
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
	CHECK_INT("the key is new", claim_in(t, KH, h, NOW, &c), STORE_ENOTFOUND);
	store_txn_msg_put(t, &m);
	claim_of(&c, m.qid, 1, NOW + SEC);
	store_txn_claim_put(t, KH, h, &c);
	CHECK_INT("the retry accepted", store_txn_commit(t), 0);
	store_msg_free(&m);
	CHECK_INT("its claim", claim_found(f->st, 51, NOW, &c), 1);
	CHECK_STR("under its QID", c.qid, "AWAYRETRY001");
}

/*
 * replay_on - a retry of the kept batch's key (claim hash h) on node st,
 * a duplicate answered with its QID: the claim found, its replay
 * committed (hook: the commit hook meanwhile); the commit's rc
 */
static int replay_on(struct store *st, const uint8_t h[STORE_HASH_LEN], void (*hook) (PGconn *c))
{
	struct store_txn *t;
	struct store_claim c;
	int rc;

	assert_int_equal(store_txn_begin(st, (const uint8_t (*)[STORE_HASH_LEN]) KH, 1, &t), 0);
	CHECK_INT("the other node finds the claim", claim_in(t, KH, h, NOW, &c), 0);
	CHECK_STR("its QID", c.qid, hook_qid);
	store_txn_replay(t, KH, h);
	commit_hook = hook;
	rc = store_txn_commit(t);
	commit_hook = NULL;
	return rc;
}

/*
 * settled_back - the node back, its kept batch (hook_qid, claim hash)
 * settled by its next take, then its voids by the one after: the message
 * kept to be delivered, its claim replaying it (kept), or voided and
 * dropped, its key new or (key_qid) another QID's
 */
static void settled_back(struct fx *f, int hash, int kept, const char *key_qid)
{
	struct store_claim c;
	char what[96];

	back((struct pg_store *) f->st);
	CHECK_INT("nothing taken", taken(f->st, NOW + SEC), 0);
	CHECK_INT("settled", (int) ((struct pg_store *) f->st)->n_pend, 0);
	((struct pg_store *) f->st)->settle_at = 0;	/* the next take settles voids */
	CHECK_INT("nothing taken", taken(f->st, NOW + SEC), 0);
	snprintf(what, sizeof(what), "%s: %s", hook_qid,
		 kept ? "its message kept, to be delivered" : "voided and dropped");
	CHECK_INT(what, qid_rows(f, "messages", hook_qid), kept);
	snprintf(what, sizeof(what), "%s: its claim %s", hook_qid, kept ? "kept" : "gone");
	CHECK_INT(what, qid_rows(f, "claims", hook_qid), kept);
	CHECK_INT("no void left", void_count(f), 0);
	snprintf(what, sizeof(what), "%s: the key %s", hook_qid,
		 kept ? "replays it" : key_qid ? "another QID's" : "is new");
	CHECK_INT(what, claim_found(f->st, hash, NOW, &c), kept || key_qid);
	if (kept || key_qid)
		CHECK_STR("under its QID", c.qid, kept ? hook_qid : key_qid);
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
	struct store *other;
	uint8_t h[STORE_HASH_LEN];

	kept_batch(f, "AWAYREPLAY01", 71, 1, h, cut_off);
	CHECK_INT("kept", (int) ((struct pg_store *) f->st)->n_pend, 1);

	/* a retry of the key, on another node, before this one settles: its 250 replays the QID */
	other = node_open(f, "other");
	CHECK_INT("the replay committed", replay_on(other, h, NULL), 0);
	store_close(other);
	settled_back(f, 71, 1, NULL);
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
	struct store *other;
	uint8_t h[STORE_HASH_LEN];

	kept_batch(f, "AWAYREPLAY02", 75, 1, h, cut_off);
	other = node_open(f, "other");
	CHECK_INT("the replay's answer lost, its mark read back: 250",
		  replay_on(other, h, lost_after_mark), 0);
	store_close(other);
	settled_back(f, 75, 1, NULL);
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
	static const char *const new_qids[] = { NULL, "AWAYNEWQID01" };
	struct fx *f = *state;
	struct store_txn *t;
	struct store_claim c;
	struct store_msg m;
	struct store *other;
	uint8_t h[STORE_HASH_LEN];
	int v;

	for (v = 0; v < 2; v++) {
		kept_batch(f, qids[v], 72 + v, 1, h, cut_off);
		CHECK_INT("kept", (int) ((struct pg_store *) f->st)->n_pend, 1);

		/* a retry on another node reads the claim, and answers 554 or with a new QID */
		other = node_open(f, "other");
		assert_int_equal(store_txn_begin(other, (const uint8_t (*)[STORE_HASH_LEN]) KH, 1,
						 &t), 0);
		CHECK_INT("the other node finds the claim", claim_in(t, KH, h, NOW, &c), 0);
		CHECK_STR("its QID", c.qid, hook_qid);
		if (new_qids[v] != NULL) {
			msg_new(&m, new_qids[v], 1, 100);
			m.has_key = 1;
			memcpy(m.keyhash, KH, STORE_HASH_LEN);
			store_txn_msg_put(t, &m);
			claim_of(&c, m.qid, 2, NOW + SEC);
			store_txn_claim_put(t, KH, h, &c);
			store_msg_free(&m);
		}
		CHECK_INT("the other node committed", store_txn_commit(t), 0);
		store_close(other);
		settled_back(f, 72 + v, 0, new_qids[v]);
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
		if (v == 1)	/* a retry of the key, answered 250 with its QID */
			CHECK_INT("the replay committed", replay_on(other, h, NULL), 0);
		settled_back(f, 91 + v, 1, NULL);
		if (v == 1) {
			CHECK_INT("due: one node takes it", taken(f->st, later), 1);
			CHECK_INT("once", taken(other, later), 0);
		}
		store_close(other);
	}
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
	assert_int_equal(pthread_create(&th, NULL, gate_run, &g), 0);
	rc = replay_on(other, h, cut_at_gate);
	pthread_join(th, NULL);
	PQfinish(g.c);
	store_close(other);
	CHECK_INT("the COMMIT ended committed: 250", rc, 0);
	CHECK_INT("the read-back waited for the key locks", g.seen, 1);
	settled_back(f, 77, 1, NULL);
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
	rc = replay_on(other, h, cut_and_end);
	store_close(other);
	PQfinish(blocker);		/* before any check: its row lock would hold the teardown */
	CHECK_INT("no mark read back: 451", rc, STORE_EAGAIN);
	settled_back(f, 78, 0, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_voids),
		T(test_commit_unreachable),
		T(test_commit_unreachable_replayed),
		T(test_commit_unreachable_replay_lost),
		T(test_commit_unreachable_not_replayed),
		T(test_commit_unreachable_taken),
		T(test_settle_status_refused),
		T(test_replay_commit_running),
		T(test_replay_commit_unrun),
	};

	return PG_RUN("store_pg_unreachable", tests);
}
