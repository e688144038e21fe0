/*
 * NAME
 *	store_claim 3
 * SUMMARY
 *	claims: which message first took a recipient for a key, and expiry
 * SYNOPSIS
 *	#include "store/store.h"
 * DESCRIPTION
 *	A claim is filed under the hash of its key alone (queue/keys.c
 *	keys_index_hash) followed by the caller's 32-byte claim hash of
 *	(scope, key, recipient). A key's claims are so one range of the
 *	B-tree, which is how they are found to show, forget or expire
 *	(store_keys.c), with no index of their own to write: one message's
 *	claims share a leaf, and the accepting commit copies one path of
 *	pages for them instead of two.
 *
 *	When a claim is live is the rule of store_rule.c; this file reads
 *	the claim, and whether its message is still in the queue when the
 *	rule asks. Lookups ignore a claim that is no longer live, so when
 *	its record goes is only a matter of space.
 *
 *	A claim is written to a small B-tree first (cnew DB, the same keys
 *	and records), and once that is more than a page deep every claim in
 *	it moves to claims in the same transaction. The accepting commit so
 *	copies one page of cnew instead of a page on every level of claims,
 *	where a claim lands on a random leaf: four levels at a million
 *	claims against two on a new store (issue 27). A claim already in
 *	claims is rewritten there, so each claim is in one of the two, and
 *	every reader looks in cnew first (store_stage.c, which hnew uses
 *	too). A claim in cnew that does not decode is deleted by the move,
 *	with a warning. An idemrelay from before cnew would not see the
 *	claims in it: a store is not to go back to one.
 *
 *	It goes with its message's story (store_hist.c), which expires ttl
 *	after the message left the spool, so never before the claim. No
 *	index of the claims' own expiry times is kept: it would be one more
 *	B-tree entry per claim, and pages, in every accepting commit.
 * DIAGNOSTICS
 *	0, STORE_ENOTFOUND for no live claim, or a STORE_E* failure. A
 *	failure inside a write transaction is also its sticky error.
 */
#include <string.h>

#include "../../util/log.h"
#include "store_int.h"

/* lmdb_claim_key - where a claim is filed: its key's hash, then its own */
void lmdb_claim_key(uint8_t out[STORE_CLAIM_KEY_LEN], const uint8_t keyhash[STORE_HASH_LEN],
		     const uint8_t hash[STORE_HASH_LEN])
{
	memcpy(out, keyhash, STORE_HASH_LEN);
	memcpy(out + STORE_HASH_LEN, hash, STORE_HASH_LEN);
}

/* lmdb_claim_move - a claim about to move from cnew to claims: 0, or STORE_EINVAL if corrupt */
int lmdb_claim_move(struct lmdb_txn *t, const MDB_val *key, const MDB_val *val)
{
	struct store_claim c;

	(void) t;
	if (key->mv_size != STORE_CLAIM_KEY_LEN)
		return STORE_EINVAL;
	return lmdb_claim_decode(val->mv_data, val->mv_size, &c) != 0 ? STORE_EINVAL : 0;
}

/* claim_read - the claim record filed for (keyhash, hash), live or not */
static int claim_read(struct lmdb_store *st, MDB_txn *txn, const uint8_t keyhash[STORE_HASH_LEN],
		      const uint8_t hash[STORE_HASH_LEN], struct store_claim *c)
{
	uint8_t k[STORE_CLAIM_KEY_LEN];
	MDB_val key = { sizeof(k), k }, val;
	int err;

	memset(c, 0, sizeof(*c));
	lmdb_claim_key(k, keyhash, hash);
	if ((err = lmdb_mdb_error(lmdb_stage_get(&st->claims, txn, &key, &val, NULL), "get claim")) != 0)
		return err;
	if (lmdb_claim_decode(val.mv_data, val.mv_size, c) != 0) {
		msg_warn("store: corrupt claim record");
		return STORE_EINVAL;
	}
	return 0;
}

/* where a claim was read: what claim_queued() looks in */
struct claim_txn {
	struct lmdb_store *st;
	MDB_txn *txn;
};

/* claim_queued - store_claim_live()'s question: 1 if the claim's message is still queued, else 0 */
static int claim_queued(void *arg, const char *qid)
{
	struct claim_txn *ct = arg;
	MDB_val key, val;
	int err;

	if (lmdb_qid_key(qid, &key) != 0)
		return STORE_EINVAL;
	err = lmdb_mdb_error(mdb_get(ct->txn, ct->st->queue, &key, &val), "get queue");
	return err == 0 ? 1 : err == STORE_ENOTFOUND ? 0 : err;
}

/* claim_live - the claim for (keyhash, hash) if it is live at now (store_rule.c) */
static int claim_live(struct lmdb_store *st, MDB_txn *txn, const uint8_t keyhash[STORE_HASH_LEN],
		      const uint8_t hash[STORE_HASH_LEN], int64_t now, struct store_claim *c)
{
	struct claim_txn ct = { st, txn };
	int live;

	if ((live = claim_read(st, txn, keyhash, hash, c)) != 0)
		return live;
	if ((live = store_claim_live(c, now, claim_queued, &ct)) == 1)
		return 0;
	memset(c, 0, sizeof(*c));
	return live == 0 ? STORE_ENOTFOUND : live;
}

/*
 * lmdb_claims_get - look n claims up: in tb, seeing its own writes (a
 * failure is its sticky error), else in one read transaction
 */
int lmdb_claims_get(struct store *base, struct store_txn *tb,
		    const uint8_t keyhash[STORE_HASH_LEN], const uint8_t (*hashes)[STORE_HASH_LEN],
		    size_t n, int64_t now, struct store_claim *claims)
{
	struct lmdb_txn *t = (struct lmdb_txn *) tb;
	struct lmdb_store *st = t ? t->st : (struct lmdb_store *) base;
	MDB_txn *txn;
	size_t i;
	int err = 0;

	if (t)
		txn = t->txn;
	else if ((err = lmdb_read_begin(st, &txn)) != 0)
		return err;
	for (i = 0; i < n && err == 0; i++) {
		err = claim_live(st, txn, keyhash, hashes[i], now, claims + i);
		if (err == STORE_ENOTFOUND)
			err = 0;
	}
	if (t)
		store_txn_fail(tb, err);
	else
		lmdb_read_end(st, txn);
	return err;
}

/*
 * lmdb_txn_claim_put - write a claim under its key, replacing any there:
 * in claims if it is there, else in cnew
 */
void lmdb_txn_claim_put(struct store_txn *base, const uint8_t keyhash[STORE_HASH_LEN],
			 const uint8_t hash[STORE_HASH_LEN], const struct store_claim *c)
{
	struct lmdb_txn *t = (struct lmdb_txn *) base;
	uint8_t rec[STORE_CLAIM_REC_LEN], k[STORE_CLAIM_KEY_LEN];
	MDB_val key = { sizeof(k), k }, val = { lmdb_claim_encode(rec, c), rec };
	int err, staged;

	lmdb_claim_key(k, keyhash, hash);
	if ((err = lmdb_stage_put(t, &t->st->claims, &key, &val, 0, &staged)) == 0 && staged)
		err = lmdb_stage_move(t, &t->st->claims);
	if (err != 0)
		store_txn_fail(&t->base, err);
}
