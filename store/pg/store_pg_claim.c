/*
 * NAME
 *	store_pg_claim 3
 * SUMMARY
 *	claims on PostgreSQL: key locks in one order, a cache per batch, lookups
 * SYNOPSIS
 *	#include "store/store.h"
 * DESCRIPTION
 *	store_pg_txn_keys() is a batch's first round trip: BEGIN, the
 *	advisory lock of every key of the batch (the first 8 bytes of its
 *	hash as a bigint, sorted, each key once: concurrent batches on any
 *	node lock in one order, so racers on a key serialise and never
 *	deadlock) with the transaction's id (pg_current_xact_id(), for
 *	store_pg_wait.c), and every claim under those keys, with whether its
 *	message is still queued, read into the transaction's cache (open
 *	addressing on the claim hash; each key read marked there, under its
 *	own hash, so that a key is read once). Claim lookups are answered from it and
 *	from the claims the transaction put. A key not given beforehand is
 *	locked and read when first asked for: a round trip, correct and
 *	slower (then a deadlock with another batch is possible, and
 *	PostgreSQL breaks it: STORE_EAGAIN, the batch is retried).
 *
 *	When a claim is live is store_rule.c's rule; here its message counts
 *	as queued if it is in the database, or put by this transaction. A claim of a
 *	void QID (a batch answered 451 while its commit waited,
 *	store_pg_wait.c) is no claim: a retry of its key is a new message;
 *	unless a node took the message for delivery (a take that raced with
 *	the void): the settle leaves it to be delivered, and the claim counts.
 *	A claim found live whose message is still under another node's
 *	acceptance lease (lease_since NULL: no take since) is a replay
 *	candidate; the batch confirms it when it answers with that QID (a
 *	duplicate, the replayed part of a partial: store_txn_replay()), and
 *	only then is it recorded as replayed at commit (messages.replayed,
 *	store_pg_txn.c), under the key's lock, before the answer: that node
 *	may have answered the batch 451 without knowing it committed, and
 *	its settling must not void what this one answered 250
 *	(store_pg_pend.c). A claim read but refused (a content mismatch) or
 *	replaced by a new QID is not marked: that 451 message is voided,
 *	no submission of it having been answered 250. The cost is a
 *	write only for such a duplicate across nodes: one statement more in
 *	the commit's pipeline (no round trip more), and COMMIT (a WAL flush
 *	and the synchronous standby's wait) where an all-duplicate batch
 *	ended with ROLLBACK; once marked, or once taken for delivery, no
 *	further replay writes.
 *	There is no lookup outside a transaction: reads are not local
 *	(store_claims_get() without one), so the writer answers duplicates
 *	in its batch.
 * DIAGNOSTICS
 *	0, STORE_ENOTFOUND for no live claim, or a STORE_E* code; inside a
 *	transaction a failure is also its sticky error.
 */
#include <stdlib.h>
#include <string.h>

#include "../../util/buf.h"
#include "../../util/clock.h"
#include "../../util/hash.h"
#include "../../util/log.h"
#include "store_pg_int.h"

/* a claim of the transaction's cache (pg_txn.cache, open addressing on the claim hash) */
struct pg_claim_ent {
	uint8_t hash[STORE_HASH_LEN];
	uint8_t keyhash[STORE_HASH_LEN];
	struct store_claim c;
	int queued;			/* its message still queued, as read */
	int foreign;			/* ... under another node's acceptance lease, its replay
					 * not recorded yet: marked if the batch answers
					 * with it (store_pg_txn_replay) */
	int used;			/* 1 a claim, 2 a key read (hash: the key's); 0 free */
};

/*
 * Whether a claim's message is queued (1), and under another node's
 * acceptance lease (lease_since NULL: no take since) with no replay
 * recorded yet (2; see the header); 0 gone or not queued. A subquery per
 * claim found, so an index lookup, where a join was free to hash a scan
 * of every message, and did in the generic plans of a bench run on a new
 * database (auto_explain; store_pg_txn.c: its updates' LIMIT says why)
 */
#define SQL_QUEUED "SELECT CASE WHEN NOT m.queued THEN 0 WHEN m.lease_since IS NULL " \
	"AND m.lease_owner <> $2 AND NOT m.replayed THEN 2 ELSE 1 END " \
	"FROM messages m WHERE m.qid = c.qid"
/*
 * Is a claim's QID void (store_pg_wait.c), and its message not taken for
 * delivery since its acceptance (lease_since NULL)? A void of a taken
 * message (the take raced with the void) is left by every settle with
 * its message, to be delivered, so its claim counts from the take on:
 * a retry then replays the QID being sent, where it was a new message,
 * a second delivery. Scalar subqueries, an index lookup per claim (the
 * message's only for a void found): EXISTS was planned as a hash of the
 * whole of voids, built at every call, in the generic plan made on a
 * new database
 */
#define SQL_VOID "coalesce((SELECT true FROM voids v WHERE v.qid = c.qid AND coalesce(" \
	"(SELECT m.lease_since IS NULL FROM messages m WHERE m.qid = c.qid), true)), false)"

/*
 * The locks' statement also reads the transaction's id (one per row, the
 * same): a commit whose answer does not come is decided by it
 * (store_pg_wait.c); and the database's clock, the last row's once every
 * lock is held, which the claims are compared on (store_pg_clock_seen()).
 * Its reply comes back before COMMIT anyway, so neither costs a statement
 * nor a reply of its own.
 */
static const char SQL_LOCK[] =
	"SELECT pg_advisory_xact_lock(k), pg_current_xact_id()::text::int8, " PG_DB_NOW " "
	"FROM unnest($1::int8[]) AS k";

static const char SQL_KEY_CLAIMS[] =
	"SELECT c.hash, c.keyhash, c.qid, c.fingerprint, c.accepted, c.expires, "
	"coalesce((" SQL_QUEUED "), 0), " SQL_VOID " FROM claims c "
	"WHERE c.keyhash = ANY($1::bytea[])";

/*
 * cache_slot - the cache entry of a claim hash, or the empty slot it would
 * go in: its first 8 bytes are hash_slot()'s, as a client could choose them
 * by trial (a few thousand hashes a key) to make a batch one probe chain
 */
static struct pg_claim_ent *cache_slot(struct pg_txn *t, const uint8_t hash[STORE_HASH_LEN])
{
	size_t mask = t->cap_cache - 1, i;

	for (i = hash_slot((uint64_t) store_pg_key_lock(hash), t->cap_cache);; i = (i + 1) & mask)
		if (!t->cache[i].used || memcmp(t->cache[i].hash, hash, STORE_HASH_LEN) == 0)
			return &t->cache[i];
}

/* cache_put - file a claim in the cache, replacing any under its hash; c NULL: a key read */
static void cache_put(struct pg_txn *t, const uint8_t keyhash[STORE_HASH_LEN],
		      const uint8_t hash[STORE_HASH_LEN], const struct store_claim *c, int state)
{
	struct pg_claim_ent *old = t->cache, *e;
	size_t oldcap = t->cap_cache, i;

	if (2 * (t->n_cache + 1) > t->cap_cache) {	/* at most half full */
		t->cap_cache = t->cap_cache ? 2 * t->cap_cache : 64;
		t->cache = xcalloc(t->cap_cache, sizeof(*t->cache));
		t->n_cache = 0;
		for (i = 0; i < oldcap; i++)
			if (old[i].used) {
				*cache_slot(t, old[i].hash) = old[i];
				t->n_cache++;
			}
		free(old);
	}
	e = cache_slot(t, hash);
	if (!e->used)
		t->n_cache++;
	e->used = c != NULL ? 1 : 2;
	memcpy(e->hash, hash, STORE_HASH_LEN);
	memcpy(e->keyhash, keyhash, STORE_HASH_LEN);
	if (c != NULL)
		e->c = *c;
	e->queued = state != 0;
	e->foreign = state == 2;
}

/* cache_find - the cached claim under keyhash and hash, or NULL */
static struct pg_claim_ent *cache_find(struct pg_txn *t, const uint8_t keyhash[STORE_HASH_LEN],
				       const uint8_t hash[STORE_HASH_LEN])
{
	struct pg_claim_ent *e;

	if (t->cap_cache == 0 || (e = cache_slot(t, hash))->used != 1
	    || memcmp(e->keyhash, keyhash, STORE_HASH_LEN) != 0)
		return NULL;
	return e;
}

/* key_loaded - were the claims under keyhash read in this transaction? (its mark in the cache) */
static int key_loaded(struct pg_txn *t, const uint8_t keyhash[STORE_HASH_LEN])
{
	return t->cap_cache > 0 && cache_slot(t, keyhash)->used == 2;
}

/* i64_cmp - int64_t in order, for qsort and bsearch */
static int i64_cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *) a, y = *(const int64_t *) b;

	return x < y ? -1 : x > y;
}

/* claims_read - file the rows of SQL_KEY_CLAIMS in the cache; 0 or STORE_EINVAL */
static int claims_read(struct pg_txn *t, const PGresult *r)
{
	uint8_t hash[STORE_HASH_LEN], keyhash[STORE_HASH_LEN];
	struct store_claim c;
	int i, n = PQntuples(r);

	for (i = 0; i < n; i++) {
		memset(&c, 0, sizeof(c));
		if (store_pg_copy(r, i, 0, hash, STORE_HASH_LEN) != 0
		    || store_pg_copy(r, i, 1, keyhash, STORE_HASH_LEN) != 0
		    || store_pg_qid(r, i, 2, c.qid) != 0
		    || store_pg_copy(r, i, 3, c.fingerprint, STORE_HASH_LEN) != 0) {
			msg_warn("store: corrupt claim row");
			return STORE_EINVAL;
		}
		c.accepted = store_pg_int(r, i, 4);
		c.expires = store_pg_int(r, i, 5);
		if (store_pg_int(r, i, 7))
			continue;	/* void: its message was refused; the key is new */
		/* a claim this transaction put before its key was read stays */
		if (t->cap_cache == 0 || !cache_slot(t, hash)->used)
			cache_put(t, keyhash, hash, &c, (int) store_pg_int(r, i, 6));	/* SQL_QUEUED */
	}
	return 0;
}

/*
 * store_pg_txn_keys - lock the keys not locked yet, in order, and read
 * their claims, in one round trip (BEGIN first, if not sent yet)
 */
void store_pg_txn_keys(struct pg_txn *t, const uint8_t (*keyhashes)[STORE_HASH_LEN], size_t n)
{
	struct pg_params lp, cp, none;	/* none: BEGIN, prepared (store_pg_stmt.c) */
	struct pg_arr locks, keys;
	size_t i, k = 0;
	PGresult *r;
	int err = 0, begin = !t->begun;

	store_pg_arr_init(&locks, PG_OID_INT8);
	store_pg_arr_init(&keys, PG_OID_BYTEA);
	for (i = 0; i < n; i++) {
		if (key_loaded(t, keyhashes[i]))
			continue;	/* this call's repeats too: loaded below */
		t->locked = store_pg_grow(t->locked, t->n_locked, &t->cap_locked, sizeof(*t->locked));
		t->locked[t->n_locked++] = store_pg_key_lock(keyhashes[i]);
		k++;
		store_pg_a_bytes(&keys, keyhashes[i], STORE_HASH_LEN);
		cache_put(t, keyhashes[i], keyhashes[i], NULL, 0);
	}
	if (k == 0)
		goto out;
	/* the new ones sorted: every batch takes its locks in this order (one held already: no wait) */
	qsort(t->locked + t->n_locked - k, k, sizeof(*t->locked), i64_cmp);
	for (i = t->n_locked - k; i < t->n_locked; i++)
		store_pg_a_i64(&locks, t->locked[i]);
	qsort(t->locked, t->n_locked, sizeof(*t->locked), i64_cmp);
	store_pg_params_init(&lp);
	store_pg_params_init(&cp);
	store_pg_params_init(&none);
	store_pg_p_arr(&lp, &locks);
	store_pg_p_arr(&cp, &keys);
	store_pg_p_text(&cp, t->st->node ? t->st->node : "");
	if (PQenterPipelineMode(t->c) != 1 || (begin && store_pg_send(t->c, "BEGIN", &none) != 0)
	    || store_pg_send(t->c, SQL_LOCK, &lp) != 0 || store_pg_send(t->c, SQL_KEY_CLAIMS, &cp) != 0
	    || PQpipelineSync(t->c) != 1)
		err = STORE_EAGAIN;
	store_pg_params_free(&lp);
	store_pg_params_free(&cp);
	if (err != 0) {
		store_txn_fail(&t->base, err);
		goto out;
	}
	t->begun = 1;
	if (begin && (err = store_pg_pipe_next(t->st, t->c, &r, "begin")) == 0)
		PQclear(r);
	if (err == 0 && (err = store_pg_pipe_next(t->st, t->c, &r, "key locks")) == 0) {
		if (t->xid == 0 && PQntuples(r) > 0 && PQnfields(r) == 3)
			t->xid = store_pg_int(r, 0, 1);
		if (PQntuples(r) > 0 && PQnfields(r) == 3)
			store_pg_clock_seen(t->st, store_pg_int(r, PQntuples(r) - 1, 2), clock_us());
		t->clock_off = store_pg_clock_off(t->st);
		PQclear(r);
	}
	if (err == 0 && (err = store_pg_pipe_next(t->st, t->c, &r, "read claims")) == 0) {
		err = claims_read(t, r);
		PQclear(r);
	}
	if (store_pg_pipe_end(t->c) != 0 && err == 0)
		err = STORE_EAGAIN;
	if (err != 0)
		store_txn_fail(&t->base, err);
out:
	store_pg_arr_free(&locks);
	store_pg_arr_free(&keys);
}

/* a cached claim's message: queued as read, or put by the transaction since */
struct txn_claim {
	struct pg_txn *t;
	int queued;
};

/* txn_queued - store_claim_live()'s question inside a transaction */
static int txn_queued(void *arg, const char *qid)
{
	const struct txn_claim *tc = arg;

	return tc->queued || store_pg_put_of(tc->t, qid);
}

/*
 * store_pg_claims_get - claims from tb's cache, reading their key first if
 * not read yet; compared at now on the database's clock, handed back on
 * this host's
 */
int store_pg_claims_get(struct store *base, struct store_txn *tb,
			const uint8_t keyhash[STORE_HASH_LEN], const uint8_t (*hashes)[STORE_HASH_LEN],
			size_t n, int64_t now, struct store_claim *claims)
{
	struct pg_txn *t = (struct pg_txn *) tb;
	struct txn_claim tc = { t, 0 };
	struct pg_claim_ent *e;
	size_t i;

	(void) base;			/* always in a transaction: reads are not local */
	if (!key_loaded(t, keyhash))
		store_pg_txn_keys(t, (const uint8_t (*)[STORE_HASH_LEN]) keyhash, 1);
	for (i = 0; i < n && t->base.err == 0; i++)
		if ((e = cache_find(t, keyhash, hashes[i])) != NULL) {
			tc.queued = e->queued;
			if (store_claim_live(&e->c, now + t->clock_off, txn_queued, &tc) == 1) {
				claims[i] = e->c;
				claims[i].accepted -= t->clock_off;
				claims[i].expires -= t->clock_off;
			}
		}
	return t->base.err;
}

/*
 * store_pg_txn_replay - the batch answers with the claim under hash (a
 * duplicate, the replayed part of a partial): if it is another node's
 * acceptance not marked yet, marked replayed at commit. A claim read but
 * not handed back (a mismatch refused, a new QID queued over it) stays
 * unmarked: that node's settling voids its message. Claims in a row
 * list their QID once; one listed again is counted again (store_pg_decide.c).
 */
void store_pg_txn_replay(struct store_txn *base, const uint8_t keyhash[STORE_HASH_LEN],
			 const uint8_t hash[STORE_HASH_LEN])
{
	struct pg_txn *t = (struct pg_txn *) base;
	struct pg_claim_ent *e;

	if ((e = cache_find(t, keyhash, hash)) == NULL || !e->foreign)
		return;
	if (t->n_replays == 0 || strcmp(t->replays[t->n_replays - 1], e->c.qid) != 0) {
		t->replays = store_pg_grow(t->replays, t->n_replays, &t->cap_replays,
					   sizeof(*t->replays));
		memcpy(t->replays[t->n_replays++], e->c.qid, STORE_QID_SIZE);
	}
	e->foreign = 0;
}

/*
 * store_pg_txn_claim_put - buffer a claim, its times moved to the
 * database's clock, replacing any under its hash
 */
void store_pg_txn_claim_put(struct store_txn *base, const uint8_t keyhash[STORE_HASH_LEN],
			    const uint8_t hash[STORE_HASH_LEN], const struct store_claim *given)
{
	struct pg_txn *t = (struct pg_txn *) base;
	struct store_claim moved = *given, *c = &moved;
	char key[STORE_QID_SIZE];
	struct pg_seg *s;

	moved.accepted += t->clock_off;
	moved.expires += t->clock_off;

	hash_hex(hash, 11, key);	/* the hash's first 11 bytes in hex tell repeats apart */
	s = store_pg_seg_for(t, PG_SEG_CLAIMS, key);
	store_pg_a_bytes(&s->a[0], hash, STORE_HASH_LEN);
	store_pg_a_bytes(&s->a[1], keyhash, STORE_HASH_LEN);
	store_pg_a_text(&s->a[2], c->qid);
	store_pg_a_bytes(&s->a[3], c->fingerprint, STORE_HASH_LEN);
	store_pg_a_i64(&s->a[4], c->accepted);
	store_pg_a_i64(&s->a[5], c->expires);
	cache_put(t, keyhash, hash, c, 0);
}
