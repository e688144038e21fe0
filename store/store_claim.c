/*
 * NAME
 *	store_claim 3
 * SUMMARY
 *	claims: which message first took a recipient for a key, and expiry
 * SYNOPSIS
 *	#include "store/store.h"
 * DESCRIPTION
 *	A claim is keyed by the caller's 32-byte hash. It is live while
 *	now < expires, and after that for as long as its message is still
 *	in the queue: a key must keep answering duplicates while the
 *	message it names may still be delivered.
 *
 *	Every claim has an entry in the expiry index (expires, hash), so
 *	store_expire() walks claims in time order without scanning them
 *	all. An index entry whose claim is gone or has since been renewed
 *	with another expiry time is stale and is deleted when met.
 * DIAGNOSTICS
 *	0, STORE_ENOTFOUND for no live claim, or a STORE_E* failure. A
 *	failure inside a write transaction is also its sticky error.
 */
#include <string.h>

#include "../util/log.h"
#include "store_int.h"

/* claim_read - the claim record for hash, live or not */
static int claim_read(struct store *st, MDB_txn *txn, const uint8_t hash[STORE_HASH_LEN],
		      struct store_claim *c)
{
	MDB_val key = { STORE_HASH_LEN, (void *) hash }, val;
	int err;

	memset(c, 0, sizeof(*c));
	if ((err = store_mdb_error(mdb_get(txn, st->claims, &key, &val), "get claim")) != 0)
		return err;
	if (store_claim_decode(val.mv_data, val.mv_size, c) != 0) {
		msg_warn("store: corrupt claim record");
		return STORE_EINVAL;
	}
	return 0;
}

/* claim_queued - 0 if the claim's message is still queued, else STORE_ENOTFOUND */
static int claim_queued(struct store *st, MDB_txn *txn, const struct store_claim *c)
{
	MDB_val key, val;

	if (store_qid_key(c->qid, &key) != 0)
		return STORE_EINVAL;
	return store_mdb_error(mdb_get(txn, st->queue, &key, &val), "get queue");
}

/* claim_live - the claim for hash if it is live at now */
static int claim_live(struct store *st, MDB_txn *txn, const uint8_t hash[STORE_HASH_LEN],
		      int64_t now, struct store_claim *c)
{
	int err;

	if ((err = claim_read(st, txn, hash, c)) != 0)
		return err;
	if (now < c->expires)
		return 0;
	if ((err = claim_queued(st, txn, c)) != 0)
		memset(c, 0, sizeof(*c));
	return err;
}

/* store_claims_get - look n claims up in one read transaction */
int store_claims_get(struct store *st, const uint8_t (*hashes)[STORE_HASH_LEN],
		     size_t n, int64_t now, struct store_claim *claims, int *found)
{
	MDB_txn *txn;
	size_t i;
	int err = 0;

	if (n == 0)
		return 0;
	if ((err = store_read_begin(st, &txn)) != 0)
		return err;
	for (i = 0; i < n; i++) {
		err = claim_live(st, txn, hashes[i], now, claims + i);
		found[i] = err == 0;
		if (err == STORE_ENOTFOUND)
			err = 0;
		if (err != 0)
			break;
	}
	mdb_txn_abort(txn);
	return err;
}

/* store_txn_claim_get - look a claim up, seeing this transaction's own writes */
int store_txn_claim_get(struct store_txn *t, const uint8_t hash[STORE_HASH_LEN],
			int64_t now, struct store_claim *c)
{
	int err;

	memset(c, 0, sizeof(*c));
	if (t->err)
		return t->err;
	if ((err = claim_live(t->st, t->txn, hash, now, c)) != 0 && err != STORE_ENOTFOUND)
		store_txn_fail(t, err);
	return err;
}

/* store_txn_claim_put - write a claim (replacing any old one) and its index entry */
void store_txn_claim_put(struct store_txn *t, const uint8_t hash[STORE_HASH_LEN],
			 const struct store_claim *c)
{
	struct store *st = t->st;
	uint8_t rec[STORE_CLAIM_REC_LEN], ikey[STORE_EXPIRY_KEY_LEN];
	MDB_val key = { STORE_HASH_LEN, (void *) hash }, val, ik = { sizeof(ikey), ikey };
	MDB_val empty = { 0, NULL };
	struct store_claim old;
	size_t qlen;
	int err;

	if (t->err)
		return;
	qlen = strnlen(c->qid, STORE_QID_SIZE);
	if (qlen == 0 || qlen >= STORE_QID_SIZE) {
		store_txn_fail(t, STORE_EINVAL);
		return;
	}
	/* a renewed claim must not leave its old index entry behind */
	err = claim_read(st, t->txn, hash, &old);
	if (err == 0 && old.expires != c->expires) {
		store_expiry_key(ikey, old.expires, hash);
		err = store_mdb_error(mdb_del(t->txn, st->expiry, &ik, NULL), "delete expiry");
	}
	if (err != 0 && err != STORE_ENOTFOUND && err != STORE_EINVAL) {
		store_txn_fail(t, err);
		return;
	}
	val.mv_size = store_claim_encode(rec, c);
	val.mv_data = rec;
	store_expiry_key(ikey, c->expires, hash);
	if ((err = store_mdb_error(mdb_put(t->txn, st->claims, &key, &val, 0), "put claim")) != 0
	    || (err = store_mdb_error(mdb_put(t->txn, st->expiry, &ik, &empty, 0),
				      "put expiry")) != 0)
		store_txn_fail(t, err);
}

/*
 * expire_entry - handle one due index entry: 1 if a claim was deleted,
 * 0 if the entry was left or only the stale entry removed, or an error.
 */
static int expire_entry(struct store *st, MDB_txn *txn, MDB_cursor *cur,
			const uint8_t hash[STORE_HASH_LEN], int64_t when, int *changed)
{
	MDB_val key = { STORE_HASH_LEN, (void *) hash };
	struct store_claim c;
	int err, deleted = 0;

	err = claim_read(st, txn, hash, &c);
	if (err == 0 && c.expires == when) {
		if ((err = claim_queued(st, txn, &c)) == 0)
			return 0;		/* still queued: stays live */
		if (err != STORE_ENOTFOUND)
			return err;
		deleted = 1;
	} else if (err == STORE_EINVAL) {
		deleted = 1;			/* unreadable: logged, and no use to anyone */
	} else if (err != 0 && err != STORE_ENOTFOUND) {
		return err;
	}
	if (deleted
	    && (err = store_mdb_error(mdb_del(txn, st->claims, &key, NULL), "delete claim")) != 0)
		return err;
	if ((err = store_mdb_error(mdb_cursor_del(cur, 0), "delete expiry")) != 0)
		return err;
	*changed = 1;
	return deleted;
}

/* store_expire - delete up to max claims that expired and whose message left */
int store_expire(struct store *st, int64_t now, size_t max)
{
	struct store_txn *t;
	MDB_cursor *cur = NULL;
	MDB_val key, val;
	uint8_t hash[STORE_HASH_LEN];
	size_t done = 0;
	int rc, err, changed = 0;
	int64_t when;

	if (max == 0)
		return 0;
	if ((err = store_txn_begin(st, &t)) != 0)
		return err;
	if ((err = store_mdb_error(mdb_cursor_open(t->txn, st->expiry, &cur), "cursor")) != 0)
		goto out;
	/* after mdb_cursor_del, MDB_NEXT yields the entry that followed */
	for (rc = mdb_cursor_get(cur, &key, &val, MDB_FIRST); rc == 0 && done < max;
	     rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
		if (key.mv_size != STORE_EXPIRY_KEY_LEN) {
			msg_warn("store: corrupt expiry index entry removed");
			if ((rc = mdb_cursor_del(cur, 0)) != 0)
				break;
			changed = 1;
			continue;
		}
		if ((when = store_expiry_key_time(key.mv_data)) > now)
			break;
		memcpy(hash, (uint8_t *) key.mv_data + 8, STORE_HASH_LEN);
		if ((err = expire_entry(st, t->txn, cur, hash, when, &changed)) < 0)
			goto out;
		done += (size_t) err;
		err = 0;
	}
	if (rc != 0 && rc != MDB_NOTFOUND)
		err = store_mdb_error(rc, "expire walk");

out:
	if (cur)
		mdb_cursor_close(cur);
	if (err == 0 && changed)
		return store_txn_commit(t);
	store_txn_abort(t);
	return err;
}
