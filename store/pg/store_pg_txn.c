/*
 * NAME
 *	store_pg_txn 3
 * SUMMARY
 *	the batch transaction: buffered writes, one pipelined commit, an unknown outcome read back
 * SYNOPSIS
 *	#include "store/store.h"
 * DESCRIPTION
 *	A group-commit batch is one PostgreSQL transaction, in two round
 *	trips: the keys' locks and claims (store_pg_claim.c), then every
 *	write and COMMIT. A transaction takes a connection of the pool at
 *	begin and sends nothing until it needs to.
 *
 *	Writes are buffered as runs of one kind (segments), each a set of
 *	arrays, one per column; store_pg_txn_commit() sends every run as one
 *	statement, in order, then COMMIT, in one pipeline. A row
 *	joins the last run of its kind unless a run from there on holds its
 *	key (one statement cannot update a row twice, and the rows of one
 *	message keep their order): mostly one statement a kind a batch.
 *
 *	A message put gets a lease to this node (owner, expiry on the
 *	database's clock, a token from lease_seq): the accepting node
 *	delivers it at once. The node counts the lease as held (its map,
 *	store_pg_lease.c) once the commit is known, not at the INSERT's
 *	result: a renewal in between cannot see the rows and forgets what
 *	it does not find. Delivery writes are fenced by the lease token
 *	this node holds (store_pg_lease.c); a message put in the same
 *	transaction is fenced by owner, its token not known yet. A fence
 *	that finds fewer rows than it meant aborts the transaction
 *	(idemrelay_fenced(), SQLSTATE IR001: STORE_ELEASE).
 *
 *	When the connection breaks after COMMIT was sent and before its
 *	result came, or the COMMIT waits for a synchronous standby past
 *	store.commit_wait, the outcome of a batch that put messages is
 *	unknown, and store_pg_wait.c resolves it by the transaction's id,
 *	read with the key locks (store_pg_claim.c), or for a batch without
 *	keys from pg_stat_activity while its backend lives: committed;
 *	aborted (STORE_EAGAIN); or still in progress, when the batch's
 *	messages are voided before STORE_EAGAIN (its 451) is returned (not
 *	a bounce's notice, put with its outcome: store_pg_decide.c). A
 *	transaction over (its backend gone, or idle) is read back by
 *	whether its first new message exists. Nothing of the batch is
 *	answered before this is known, but when PostgreSQL cannot be asked
 *	(PG_NOT_KNOWN): then the batch gets 451 and is kept to be settled
 *	before the node's next use of the database. The
 *	pipeline does not read the id in a statement of its own before
 *	COMMIT: flushed back at once, it made every commit two replies
 *	and two wake-ups of the node (a fresh message: 0.58 statements and
 *	TCP sends).
 * DIAGNOSTICS
 *	Steps record their first failure (sticky) and become no-ops; commit
 *	reports it, or the commit's own.
 */
#include <stdlib.h>
#include <string.h>

#include "../../util/buf.h"
#include "../../util/clock.h"
#include "../../util/hash.h"
#include "../../util/log.h"
#include "store_pg_int.h"


static const char SQL_CLAIMS[] =
	"INSERT INTO claims (hash, keyhash, qid, fingerprint, accepted, expires) "
	"SELECT * FROM unnest($1::bytea[], $2::bytea[], $3::text[], $4::bytea[], $5::int8[], "
	"$6::int8[]) ON CONFLICT (hash) DO UPDATE SET keyhash = excluded.keyhash, "
	"qid = excluded.qid, fingerprint = excluded.fingerprint, accepted = excluded.accepted, "
	"expires = excluded.expires";

/*
 * A run of messages put and their recipients: one statement, the
 * recipients' INSERT in a WITH (no foreign key since schema 9: the
 * statements that delete messages take their recipients along). Two
 * statements before: a tenth of a one-session message's.
 */
static const char SQL_MSGS[] =
	"WITH rs AS (INSERT INTO rcpts (qid, idx, addr, notify, orcpt, state, reply) "
	"SELECT * FROM unnest($21::text[], $22::int4[], $23::text[], $24::int4[], $25::text[], "
	"$26::int4[], $27::text[])) "
	"INSERT INTO messages (qid, node, accepted, sender, envid, ret, body, smtputf8, client, "
	"auth_user, data, data_len, has_key, keyhash, ttl, attempts, next_attempt, inflight, "
	"queued, lease_owner, lease_until, lease_token, route) "
	"SELECT u.qid, $1, u.accepted, u.sender, u.envid, u.ret, u.body, u.smtputf8, u.client, "
	"u.auth_user, u.data, u.data_len, u.has_key, u.keyhash, u.ttl, u.attempts, "
	"u.next_attempt, u.inflight, true, $1, " PG_DB_NOW " + $2, nextval('lease_seq'), u.route "
	"FROM unnest($3::text[], $4::int8[], $5::text[], $6::text[], $7::int4[], $8::int4[], "
	"$9::bool[], $10::text[], $11::text[], $12::bytea[], $13::int8[], $14::bool[], "
	"$15::bytea[], $16::int8[], $17::int4[], $18::int8[], $19::bool[], $20::text[]) AS "
	"u(qid, accepted, sender, envid, ret, body, smtputf8, client, auth_user, data, data_len, "
	"has_key, keyhash, ttl, attempts, next_attempt, inflight, route) "
	"RETURNING qid, lease_token";

/* fenced: by the token this node holds, or by owner for a message put in this transaction */
#define FENCE PG_ROW_QUEUED("m.") " AND (m.lease_token = v.token OR (v.token IS NULL AND m.lease_owner = $1))"

/*
 * The recipients' count is v's (v.qid, not m.qid): a condition on v alone
 * filters the few rows given, where one on m made the generic plan hash
 * every queued message and count each one's recipients (5 ms a call at
 * 2,000 queued; test_store_pg test_plans_scale).
 *
 * The recipients' states go in the same statement (rs), as a WITH that
 * runs whatever the rest finds: a fence that fails raises, and the whole
 * transaction goes. Their rows come through "LIMIT $18" (the recipients
 * given): a generic plan takes an array parameter for 10 rows, and a
 * table never analyzed yet for what it holds when the plan is made; on a
 * new database's empty tables, hashing a scan of the whole table costs
 * less than 10 index lookups, and that plan stays for the connection's
 * life (until an ANALYZE), while the table grows under it. A LIMIT of a
 * parameter is planned as a tenth of the rows, one: an index lookup per
 * row given, whatever the tables held when the plan was made (p50 2.2 ms
 * against 1.1 on a database of a minute, one session; test_store_pg
 * test_plans_young). Two statements before: a fifth of a fresh
 * message's.
 *
 * An inflight mark (set or cleared) is a row of the same statement with
 * no count of recipients (n NULL): it changes inflight and the mark's
 * columns only, and the count is not checked; so a group commit's marks
 * and the outcomes that ride with them are one statement, where they
 * were two (a fresh message: 0.5 statements fewer).
 *
 * An outcome names the route its attempt was loaded with (v.route): one
 * still queued whose stored route is another was rerouted during the
 * attempt, maybe from another node's control socket, whose reroute made
 * it due now (queue_admin.c). Its deferral then keeps it due now
 * (least(next, $2)), given up to any node: the retry time it earned was
 * the old route's, and overwriting the reroute's time with it made the
 * message wait that out.
 */
#define UPDATES_HEAD \
	"WITH v AS (SELECT * FROM unnest($3::text[], $4::int8[], $5::int4[], $6::int4[], " \
	"$7::int8[], $8::bool[], $9::bool[], $10::bool[], $11::text[]) AS v(qid, token, n, " \
	"attempts, next_attempt, flag, done, release, route)), " \
	"rs AS (UPDATE rcpts r SET state = w.state, reply = w.reply FROM (SELECT * FROM " \
	"unnest($14::text[], $15::int4[], $16::int4[], $17::text[]) LIMIT $18) AS w(qid, idx, " \
	"state, reply) WHERE r.qid = w.qid AND r.idx = w.idx), " \
	"u AS (UPDATE messages m SET "
#define UPDATES_ATTEMPTS \
	"attempts = coalesce(v.attempts, m.attempts) + CASE WHEN v.done THEN 1 ELSE 0 END, " \
	"next_attempt = CASE WHEN v.n IS NOT NULL AND NOT v.done AND " \
	"m.route IS DISTINCT FROM v.route THEN least(v.next_attempt, $2) " \
	"ELSE coalesce(v.next_attempt, m.next_attempt) END, "
#define UPDATES_TAIL \
	"updated = CASE WHEN v.n IS NULL THEN m.updated ELSE $2 END, queued = NOT v.done, " \
	PG_MARK_COLS("v.flag", "NOT v.done") ", " \
	"data = CASE WHEN v.done THEN NULL ELSE m.data END, " \
	"finished = CASE WHEN v.done THEN $2 ELSE m.finished END, " \
	"expires = CASE WHEN v.done THEN " PG_STORY_EXPIRES("$2", "m.ttl", "$12") " " \
	"ELSE m.expires END, " \
	"lease_owner = CASE WHEN v.done OR v.release THEN NULL ELSE m.lease_owner END " \
	"FROM v WHERE m.qid = v.qid AND " FENCE " AND " \
	"(v.n IS NULL OR (SELECT count(*) FROM rcpts r WHERE r.qid = v.qid) = v.n) RETURNING 1) " \
	"SELECT idemrelay_fenced(count(*), $13) FROM u"

/* outcomes alone */
static const char SQL_UPDATES[] = UPDATES_HEAD UPDATES_ATTEMPTS "inflight = v.flag, " UPDATES_TAIL;

/*
 * a run with marks: the same, its SET led by inflight, the text a mark's
 * statement always had (tests/e2e's proxy finds a mark's commit by it)
 */
static const char SQL_MARKS[] = UPDATES_HEAD "inflight = v.flag, " UPDATES_ATTEMPTS UPDATES_TAIL;

/* each kind's statement and columns, parameters from $3 (claims: $1) */
static const struct {
	const char *sql;
	int cols, rcols;
	Oid types[SEG_COLS];
	Oid rtypes[7];
} seg_shape[] = {
	[PG_SEG_CLAIMS] = { SQL_CLAIMS, 6, 0, { PG_OID_BYTEA, PG_OID_BYTEA, PG_OID_TEXT, PG_OID_BYTEA,
				    PG_OID_INT8, PG_OID_INT8 }, { 0 } },
	[PG_SEG_MSGS] = { SQL_MSGS, 18, 7, { PG_OID_TEXT, PG_OID_INT8, PG_OID_TEXT, PG_OID_TEXT, PG_OID_INT4,
				   PG_OID_INT4, PG_OID_BOOL, PG_OID_TEXT, PG_OID_TEXT, PG_OID_BYTEA,
				   PG_OID_INT8, PG_OID_BOOL, PG_OID_BYTEA, PG_OID_INT8, PG_OID_INT4,
				   PG_OID_INT8, PG_OID_BOOL, PG_OID_TEXT },
			  { PG_OID_TEXT, PG_OID_INT4, PG_OID_TEXT, PG_OID_INT4, PG_OID_TEXT,
			    PG_OID_INT4, PG_OID_TEXT } },
	[PG_SEG_UPDATES] = { SQL_UPDATES, 9, 4, { PG_OID_TEXT, PG_OID_INT8, PG_OID_INT4, PG_OID_INT4,
				     PG_OID_INT8, PG_OID_BOOL, PG_OID_BOOL, PG_OID_BOOL,
				     PG_OID_TEXT },
			     { PG_OID_TEXT, PG_OID_INT4, PG_OID_INT4, PG_OID_TEXT } },
};

/* store_pg_grow - v, of n elements of size and room for *cap, with room for one more */
void *store_pg_grow(void *v, size_t n, size_t *cap, size_t size)
{
	if (n < *cap)
		return v;
	*cap = *cap ? 2 * *cap : 16;
	return xrealloc(v, *cap * size);
}

/*
 * a key's last run (pg_txn.key_runs, open addressing on hash_slot() of the
 * key's FNV): the keys are QIDs this node made and hex of SHA-256 claim
 * hashes, whose FNV a client could aim at one slot by trying claim keys
 * (FNV is unkeyed, the table's size a power of two), hash_slot() keyed
 * per process, as the claims cache's (store_pg_claim.c). A message put
 * is found here too, with its copy and lease: a delivery write of it, a
 * claim naming it and its lease's row cost one lookup each, not a scan
 * of the messages put.
 */
struct pg_key_run {
	char key[STORE_QID_SIZE];
	size_t run;			/* the run's index + 1; 0: an empty slot */
	int put;			/* a message put under key: */
	int64_t token;			/* its lease's token as read, or 0 */
	struct store_msg *copy;		/* owned: its copy (store_pg_keep.c), or NULL */
};

/* seg_free - release a run's arrays */
static void seg_free(struct pg_seg *s)
{
	int i;

	for (i = 0; i < SEG_COLS; i++)
		store_pg_arr_free(&s->a[i]);
	for (i = 0; i < 7; i++)
		store_pg_arr_free(&s->r[i]);
	free(s->qids);
}

/* store_pg_segs_free - release the runs and their index of keys, with the copies on it */
void store_pg_segs_free(struct pg_txn *t)
{
	size_t i;

	for (i = 0; i < t->n_segs; i++)
		seg_free(&t->segs[i]);
	for (i = 0; i < t->cap_key_runs; i++)
		store_pg_keep_drop(t->key_runs[i].copy);
	free(t->segs);
	free(t->key_runs);
}

/* key_slot - the entry of key in v (cap a power of two), or the empty slot it would go in */
static struct pg_key_run *key_slot(struct pg_key_run *v, size_t cap, const char *key)
{
	size_t i = hash_slot(hash_fnv(HASH_FNV_INIT, key, strlen(key)), cap);

	while (v[i].run != 0 && strcmp(v[i].key, key) != 0)
		i = (i + 1) & (cap - 1);
	return &v[i];
}

/* key_run - the entry of key, filed if new (its run 0 until set) */
static struct pg_key_run *key_run(struct pg_txn *t, const char *key)
{
	struct pg_key_run *old = t->key_runs, *e;
	size_t oldcap = t->cap_key_runs, i;

	if (2 * (t->n_key_runs + 1) > t->cap_key_runs) {	/* at most half full */
		t->cap_key_runs = t->cap_key_runs ? 2 * t->cap_key_runs : 64;
		t->key_runs = xcalloc(t->cap_key_runs, sizeof(*t->key_runs));
		for (i = 0; i < oldcap; i++)
			if (old[i].run != 0)
				*key_slot(t->key_runs, t->cap_key_runs, old[i].key) = old[i];
		free(old);
	}
	e = key_slot(t->key_runs, t->cap_key_runs, key);
	if (e->run == 0) {
		t->n_key_runs++;
		snprintf(e->key, sizeof(e->key), "%s", key);
	}
	return e;
}

/* store_pg_put_of - the entry of the message qid that t put, or NULL */
struct pg_key_run *store_pg_put_of(struct pg_txn *t, const char *qid)
{
	struct pg_key_run *e;

	if (t->cap_key_runs == 0 || (e = key_slot(t->key_runs, t->cap_key_runs, qid))->run == 0)
		return NULL;
	return e->put ? e : NULL;
}

/*
 * store_pg_seg_for - the run to append a row of kind to, keyed by key
 * (a message's QID, a claim's hash): the last run of that kind, if no
 * run from it on holds key, so that the rows of one key keep their
 * order and the rows of different keys, which no statement relates (no
 * foreign key between the tables; each fence and count reads the row's
 * own message), make one statement a kind: a batch's submissions one
 * INSERT a table, and the marks and outcomes of a group commit's
 * deliveries one UPDATE together, not one each (a fresh run: 1.7 of each
 * a commit). Else a new run at the end. Each kind's last run and each
 * key's are kept, so a row costs the same however many came before: a
 * scan of the runs' keys made a batch's N rows N²/2 key comparisons on
 * the writer thread under the key locks (200 messages of 100 recipients:
 * 2 * 10^8, against 2 * 10^4 now; test_store_pg_runs).
 */
struct pg_seg *store_pg_seg_for(struct pg_txn *t, enum pg_seg_kind kind, const char *key)
{
	struct pg_key_run *e = key_run(t, key);
	struct pg_seg *s;
	int i;

	if (t->seg_last[kind] == 0 || e->run >= t->seg_last[kind]) {	/* key there or after */
		t->segs = store_pg_grow(t->segs, t->n_segs, &t->cap_segs, sizeof(*t->segs));
		s = &t->segs[t->n_segs++];
		memset(s, 0, sizeof(*s));
		s->kind = kind;
		for (i = 0; i < seg_shape[kind].cols; i++)
			store_pg_arr_init(&s->a[i], seg_shape[kind].types[i]);
		for (i = 0; i < seg_shape[kind].rcols; i++)
			store_pg_arr_init(&s->r[i], seg_shape[kind].rtypes[i]);
		t->seg_last[kind] = t->n_segs;
	}
	e->run = t->seg_last[kind];
	s = &t->segs[e->run - 1];
	s->qids = store_pg_grow(s->qids, s->n, &s->cap_qids, sizeof(*s->qids));
	strcpy(s->qids[s->n++], key);
	return s;
}

/*
 * store_pg_txn_begin - a transaction with a connection of the pool;
 * nothing sent unless keys are given (store_pg_txn_keys())
 */
int store_pg_txn_begin(struct store *base, const uint8_t (*keys)[STORE_HASH_LEN], size_t n,
		       struct store_txn **out)
{
	struct pg_txn *t;
	PGconn *c;
	int err;

	*out = NULL;
	if ((err = store_pg_take((struct pg_store *) base, &c)) != 0)
		return err;
	t = xcalloc(1, sizeof(*t));
	t->base.ops = &store_pg_ops;
	t->st = (struct pg_store *) base;
	t->c = c;
	t->clock_off = store_pg_clock_off(t->st);
	*out = &t->base;
	store_pg_txn_keys(t, keys, n);
	return 0;
}

/* store_pg_txn_msg_put - buffer a new message and its recipients */
void store_pg_txn_msg_put(struct store_txn *base, const struct store_msg *m)
{
	struct pg_txn *t = (struct pg_txn *) base;
	struct pg_key_run *e;
	struct pg_seg *s;
	size_t i;

	s = store_pg_seg_for(t, PG_SEG_MSGS, m->qid);
	store_pg_a_text(&s->a[0], m->qid);
	store_pg_a_i64(&s->a[1], m->accepted + t->clock_off);
	store_pg_a_text(&s->a[2], m->from);
	store_pg_a_text(&s->a[3], m->envid);
	store_pg_a_i32(&s->a[4], m->ret);
	store_pg_a_i32(&s->a[5], m->body);
	store_pg_a_bool(&s->a[6], m->smtputf8);
	store_pg_a_text(&s->a[7], m->client);
	store_pg_a_text(&s->a[8], m->user);
	store_pg_a_bytes(&s->a[9], m->data ? m->data : "", m->data_len);
	t->data_bytes += m->data_len;
	store_pg_a_i64(&s->a[10], (int64_t) m->data_len);
	store_pg_a_bool(&s->a[11], m->has_key);
	store_pg_a_bytes(&s->a[12], m->has_key ? m->keyhash : NULL, STORE_HASH_LEN);
	store_pg_a_i64(&s->a[13], m->ttl);
	store_pg_a_i32(&s->a[14], m->attempts);
	store_pg_a_i64(&s->a[15], m->next_attempt);
	store_pg_a_bool(&s->a[16], m->inflight);
	store_pg_a_text(&s->a[17], m->route);
	for (i = 0; i < m->n_rcpts; i++) {
		store_pg_a_text(&s->r[0], m->qid);
		store_pg_a_i32(&s->r[1], (int32_t) i);
		store_pg_a_text(&s->r[2], m->rcpts[i].addr);
		store_pg_a_i32(&s->r[3], m->rcpts[i].notify);
		store_pg_a_text(&s->r[4], m->rcpts[i].orcpt);
		store_pg_a_i32(&s->r[5], (int32_t) m->rcpts[i].state);
		store_pg_a_text(&s->r[6], m->rcpts[i].reply);
	}
	t->put_qids = store_pg_grow(t->put_qids, t->n_put, &t->cap_put, sizeof(*t->put_qids));
	strcpy(t->put_qids[t->n_put++], m->qid);
	e = key_run(t, m->qid);
	e->put = 1;
	store_pg_keep_drop(e->copy);	/* a QID put twice: its INSERT fails */
	e->copy = store_pg_keep_copy(t->st, m);
	t->notice |= m->notice;
}

/*
 * update_row - a row of the updates for a delivery write of qid (of
 * n_rcpts recipients, 0 for a mark), its QID and fence filled: the
 * token of the lease this node holds, in *token, or NULL (*token 0) for
 * a message put in this transaction; NULL and the transaction failed
 * (STORE_ELEASE) if this node holds none. The write is noted, for its
 * commit to explain a fence.
 */
static struct pg_seg *update_row(struct pg_txn *t, const char *qid, size_t n_rcpts,
				 int64_t *token)
{
	struct pg_seg *s;

	*token = 0;		/* a lease's token is never 0 (lease_seq) */
	snprintf(t->fenced_qid, sizeof(t->fenced_qid), "%s", qid);
	t->fenced_rcpts = n_rcpts;
	if (store_pg_put_of(t, qid)) {
		t->wrote_put = 1;	/* no copy is kept: it would be what was put */
	} else {
		store_pg_keep_forget(t->st, qid);	/* written: read from the database from now on */
		if (store_pg_lease_get(t->st, qid, token) != 0) {
			store_txn_fail(&t->base, STORE_ELEASE);
			return NULL;
		}
	}
	t->fenced = *token;
	s = store_pg_seg_for(t, PG_SEG_UPDATES, qid);
	store_pg_a_text(&s->a[0], qid);
	if (*token != 0)
		store_pg_a_i64(&s->a[1], *token);
	else
		store_pg_a_bytes(&s->a[1], NULL, 0);
	return s;
}

/*
 * store_pg_txn_msg_update - buffer a delivery update, fenced. All final:
 * it leaves the spool (data gone, the story kept until expires); still
 * queued and due later: its lease is given up, for any node to take.
 */
void store_pg_txn_msg_update(struct store_txn *base, const struct store_msg *m)
{
	struct pg_txn *t = (struct pg_txn *) base;
	struct pg_seg *s;
	int64_t token;
	size_t i;
	int queued = 0;

	for (i = 0; i < m->n_rcpts; i++)
		if (m->rcpts[i].state == STORE_RCPT_QUEUED)
			queued = 1;
	if ((s = update_row(t, m->qid, m->n_rcpts, &token)) == NULL)
		return;
	store_pg_a_i32(&s->a[2], (int32_t) m->n_rcpts);
	store_pg_a_i32(&s->a[3], m->attempts);
	store_pg_a_i64(&s->a[4], m->next_attempt);
	store_pg_a_bool(&s->a[5], m->inflight);
	store_pg_a_bool(&s->a[6], !queued);
	store_pg_a_bool(&s->a[7], queued && m->next_attempt > clock_us());
	/* a deferral's route, the attempt's: a reroute since is seen (read for deferrals alone) */
	store_pg_a_text(&s->a[8], queued ? m->route : NULL);
	for (i = 0; i < m->n_rcpts; i++) {
		store_pg_a_text(&s->r[0], m->qid);
		store_pg_a_i32(&s->r[1], (int32_t) i);
		store_pg_a_i32(&s->r[2], (int32_t) m->rcpts[i].state);
		store_pg_a_text(&s->r[3], m->rcpts[i].reply);
	}
	/* qid's lease, of token (0: put in this transaction), is given up at commit */
	if (!queued || m->next_attempt > clock_us()) {
		t->gone = store_pg_grow(t->gone, t->n_gone, &t->cap_gone, sizeof(*t->gone));
		memset(&t->gone[t->n_gone], 0, sizeof(*t->gone));
		strcpy(t->gone[t->n_gone].qid, m->qid);
		t->gone[t->n_gone++].token = token;
	}
}

/* store_pg_txn_msg_set_inflight - buffer the inflight mark, fenced: a row of the updates (above) */
void store_pg_txn_msg_set_inflight(struct store_txn *base, const char *qid, int on)
{
	struct pg_txn *t = (struct pg_txn *) base;
	struct pg_seg *s;
	int64_t token;

	if ((s = update_row(t, qid, 0, &token)) == NULL)
		return;
	store_pg_a_bytes(&s->a[2], NULL, 0);	/* no count: a mark */
	store_pg_a_bytes(&s->a[3], NULL, 0);	/* attempts and next_attempt kept */
	store_pg_a_bytes(&s->a[4], NULL, 0);
	store_pg_a_bool(&s->a[5], on);
	store_pg_a_bool(&s->a[6], 0);
	store_pg_a_bool(&s->a[7], 0);
	store_pg_a_text(&s->a[8], NULL);
	s->marks = 1;
}

/* conn_lost - did the connection break, or is it kept waiting for replication (no more results) */
static int conn_lost(PGconn *c)
{
	struct pg_conn *n = store_pg_conn(c);

	return PQstatus(c) != CONNECTION_OK || (n != NULL && (n->flags & PG_CONN_KEPT));
}

/* txn_free - give the connection back (rolled back if a transaction is open) and free */
static void txn_free(struct pg_txn *t)
{
	if (t->c && !conn_lost(t->c) && PQtransactionStatus(t->c) != PQTRANS_IDLE
	    && PQpipelineStatus(t->c) == PQ_PIPELINE_OFF)
		(void) store_pg_simple(t->st, t->c, "ROLLBACK", "rollback");
	store_pg_give_sized(t->st, t->c, t->data_bytes);
	store_pg_segs_free(t);
	free(t->cache);
	free(t->locked);
	free(t->replays);
	free(t->put_qids);
	free(t->gone);
	free(t);
}

/* seg_send - queue a run's statement; 0 or -1 */
static int seg_send(struct pg_txn *t, struct pg_seg *s)
{
	int upd = s->kind == PG_SEG_UPDATES, i, err;
	uint32_t n_rcpts = 0;
	struct pg_params p;

	store_pg_params_init(&p);
	if (s->kind != PG_SEG_CLAIMS) {
		store_pg_p_text(&p, t->st->node);
		store_pg_p_i64(&p, upd ? clock_us() + t->clock_off : t->st->lease_us);
	}
	for (i = 0; i < seg_shape[s->kind].cols; i++)
		store_pg_p_arr(&p, &s->a[i]);
	if (upd) {
		store_pg_p_i64(&p, STORE_STORY_TTL);	/* PG_STORY_EXPIRES's default */
		store_pg_p_i64(&p, (int64_t) s->n);
	}
	for (i = 0; i < seg_shape[s->kind].rcols; i++)
		n_rcpts = store_pg_p_arr(&p, &s->r[i]);	/* each column has one per recipient */
	if (upd)			/* the recipients' LIMIT (above) */
		store_pg_p_i64(&p, (int64_t) n_rcpts);
	err = store_pg_send(t->c, s->marks ? SQL_MARKS : seg_shape[s->kind].sql, &p);
	store_pg_params_free(&p);
	return err;
}

/*
 * leases_read - the leases got by messages put (qid, lease_token rows),
 * noted beside their QIDs: held from t's commit on (txn_commit()), or
 * its outcome read back. Recorded before it, a lease renewal meanwhile
 * (another connection, which cannot see the rows yet) found them gone
 * and forgot them, and the node then refused its own inflight marks and
 * outcomes on them as another node's.
 */
static void leases_read(struct pg_txn *t, const PGresult *r)
{
	char qid[STORE_QID_SIZE];
	struct pg_key_run *e;
	int i;

	for (i = 0; i < PQntuples(r); i++)
		if (store_pg_qid(r, i, 0, qid) == 0 && (e = store_pg_put_of(t, qid)) != NULL)
			e->token = store_pg_int(r, i, 1);
}

/*
 * store_pg_read_back - the commit of t, which put messages, has an
 * unknown outcome: on a fresh connection, does its first new message
 * exist? Then the leases still this node's are read too (one row with a
 * null QID if none is). Its row alone tells: past store.lease (a
 * delivery's COMMIT waited for, store_pg_decide.c) another node may have
 * taken the message, and a committed notice read as not committed had
 * its bounced recipient deferred and bounced again, with a second
 * notice. 0 committed, STORE_EAGAIN not, PG_NOT_KNOWN the database could
 * not be asked (store_pg_pend.c keeps the batch to settle).
 */
int store_pg_read_back(struct pg_txn *t)
{
	struct pg_store *st = t->st;
	struct pg_params p;
	PGresult *r;
	int err, found;

	store_pg_params_init(&p);
	store_pg_p_qids(&p, t->put_qids, t->n_put);
	store_pg_p_text(&p, t->put_qids[0]);
	store_pg_p_text(&p, st->node);
	err = store_pg_run(st, "SELECT m.qid, m.lease_token FROM (SELECT FROM messages WHERE qid = $2) e "
			   "LEFT JOIN messages m ON m.qid = ANY($1::text[]) AND m.lease_owner = $3",
			   &p, &r, "read back");
	store_pg_params_free(&p);
	if (err != 0)
		return PG_NOT_KNOWN;
	found = PQntuples(r) > 0;
	leases_read(t, r);
	PQclear(r);
	msg_warn("store: a commit's outcome was unknown (connection lost): read back: %s",
		 found ? "committed" : "not committed");
	return found ? 0 : STORE_EAGAIN;
}

/*
 * replays_send - the messages of other nodes' acceptances whose claims t
 * replayed (answered 250 with their QIDs: store_pg_txn_replay()) marked so,
 * under the key locks t holds, before its answer: their node's settling
 * of a batch it answered 451 (store_pg_pend.c) leaves them to be
 * delivered. A write only for a duplicate across nodes of a message not
 * taken for delivery since its acceptance.
 */
static int replays_send(struct pg_txn *t)
{
	struct pg_params p;
	int err;

	store_pg_params_init(&p);
	store_pg_p_qids(&p, t->replays, t->n_replays);
	err = store_pg_send(t->c, "UPDATE messages SET replayed = true "
			    "WHERE qid = ANY($1::text[]) AND NOT replayed", &p);
	store_pg_params_free(&p);
	return err;
}

/*
 * commit_send - the buffered runs, then COMMIT, in one pipeline; *sent
 * statements. A batch that wrote nothing (its keys read, every one a
 * duplicate) ends with ROLLBACK: reading the transaction's id with the
 * locks gave it one, and its COMMIT would write a commit record and wait
 * for the synchronous standby, where nothing was written. But one that
 * replayed a claim of another node's acceptance records it first
 * (replays_send) and commits.
 */
static int commit_send(struct pg_txn *t, int *sent)
{
	struct pg_params none;		/* prepared, without parameters (store_pg_stmt.c) */
	int noop = t->begun && t->n_put > 0;
	size_t i;

	store_pg_params_init(&none);
	*sent = (!t->begun || noop) + (int) t->n_segs + (t->n_replays > 0) + 1;	/* COMMIT the last */
	/*
	 * BEGIN, or after the keys' sync a no-op if messages follow:
	 * PostgreSQL counts the backend idle in the transaction until the
	 * first message after a sync is read whole, and the messages' Bind
	 * carries their data (a batch of duplicates only sends a few QIDs:
	 * no no-op, which cost it a fifth of its CPU)
	 */
	if (PQenterPipelineMode(t->c) != 1
	    || ((!t->begun || noop) && store_pg_send(t->c, noop ? "SELECT" : "BEGIN", &none) != 0))
		return -1;
	t->begun = 1;
	for (i = 0; i < t->n_segs; i++)
		if (seg_send(t, &t->segs[i]) != 0)
			return -1;
	if (t->n_replays > 0 && replays_send(t) != 0)
		return -1;
	/* nothing written: the id read with the key locks would make COMMIT wait for the standby */
	if (store_pg_send(t->c, t->n_segs || t->n_replays ? "COMMIT" : "ROLLBACK", &none) != 0
	    || PQpipelineSync(t->c) != 1)
		return -1;
	return 0;
}

/*
 * txn_commit - send the buffered writes and COMMIT in one round trip;
 * resolve an unknown outcome (see the header). Frees t.
 */
static int txn_commit(struct pg_txn *t)
{
	struct pg_store *st = t->st;
	struct pg_key_run *e;
	PGresult *r;
	int sent = 0, err = 0, failed = 0, committed = 0, k, j;
	size_t i;

	if ((err = t->base.err) != 0 || (t->n_segs == 0 && !t->begun)) {
		txn_free(t);		/* failed, or nothing sent nor to send */
		return err;
	}
	failed = commit_send(t, &sent) != 0;
	if (!failed)
		store_pg_commit_sent(t->c);
	/*
	 * each statement's result in order: the first error is the
	 * transaction's. Nothing is flushed before the sync, so the first
	 * result comes with COMMIT's, once the COMMIT is over (or a statement
	 * failed): each is waited for as COMMIT's answer (store_pg_wait.c).
	 */
	for (i = 0, k = 0; !failed && k < sent; k++) {
		if (err == 0 && store_pg_commit_hold(t) != 0) {
			failed = 1;	/* no answer to COMMIT: outcome unknown */
			break;
		}
		if ((j = store_pg_pipe_next(st, t->c, &r, "commit")) != 0) {
			if (conn_lost(t->c)) {
				failed = 1;	/* the connection broke: outcome unknown */
				break;
			}
			if (err == 0)
				err = j;
			continue;
		}
		if (k == sent - 1)
			committed = 1;
		if (PQnfields(r) == 2 && PQftype(r, 1) == PG_OID_INT8 && err == 0)
			leases_read(t, r);	/* a run of messages put: their leases */
		PQclear(r);
	}
	if (!failed)
		(void) store_pg_pipe_end(t->c);
	if (committed)
		err = 0;
	else if (err == 0)		/* no error seen and no COMMIT: unknown */
		committed = (err = store_pg_commit_resolve(t)) == 0;
	/* else an error was reported: nothing was committed */
	if (committed) {		/* the leases got, then those given up (maybe the same) */
		for (i = 0; i < t->n_put; i++) {
			if ((e = store_pg_put_of(t, t->put_qids[i]))->token == 0)
				continue;
			store_pg_lease_set(st, e->key, e->token);
			/* its copy kept for its first delivery, unless t wrote its delivery state */
			if (e->copy != NULL && !t->wrote_put) {
				store_pg_keep_add(st, e->copy, e->token);
				e->copy = NULL;
			}
		}
		for (i = 0; i < t->n_gone; i++)
			store_pg_lease_del(st, t->gone[i].qid, t->gone[i].token);
	}
	txn_free(t);
	return err;
}

/*
 * store_pg_txn_commit - commit t (txn_commit). A transaction of one
 * delivery write whose fence found nothing says why (store_pg_why).
 */
int store_pg_txn_commit(struct store_txn *base)
{
	struct pg_txn *t = (struct pg_txn *) base;
	struct pg_store *st = t->st;
	char qid[STORE_QID_SIZE];
	size_t n;
	int64_t token;
	int err, lone;

	lone = t->base.steps == 1 && t->fenced_qid[0];
	memcpy(qid, t->fenced_qid, sizeof(qid));
	n = t->fenced_rcpts;
	token = t->fenced;	/* read once: a lease taken again meanwhile is not forgotten */
	if ((err = txn_commit(t)) == STORE_ELEASE && lone)
		err = store_pg_why(st, qid, n, token);
	return err;
}
