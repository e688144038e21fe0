/*
 * NAME
 *	store_keys 3
 * SUMMARY
 *	the key index: from a key to its claims, to show or forget them
 * SYNOPSIS
 *	#include "store/store.h"
 * DESCRIPTION
 *	A key's claims are filed under the hash of the key alone, then each
 *	claim's own hash (store_claim.c): they are one range of the claims
 *	B-tree, walked from the key hash (in cnew, then in claims: a claim
 *	is in one of them, store_claim.c), as one list of entries
 *	(key_entries).
 *
 *	A claim goes when its story expires (store_hist.c), which is after
 *	the claim itself expired (lmdb_keys_expire); lmdb_key_forget()
 *	deletes a key's claims at once. A claim since renewed for another
 *	message (on_mismatch = "accept") names the new QID: it is skipped
 *	for the old message, whose claim it no longer is.
 * DIAGNOSTICS
 *	0, STORE_ENOTFOUND for a key with no entry, or a STORE_E* failure.
 */
#include <stdlib.h>
#include <string.h>

#include "../../util/buf.h"
#include "../../util/log.h"
#include "store_int.h"

struct key_entry {
	uint8_t claim[STORE_HASH_LEN];
	char qid[STORE_QID_SIZE];
};

/* filed_in - the claims filed under a key in one B-tree (cnew or claims): its range, added to b */
static int filed_in(MDB_txn *txn, MDB_dbi dbi, const uint8_t keyhash[STORE_HASH_LEN], struct buf *b)
{
	MDB_val key = { STORE_HASH_LEN, (void *) keyhash }, val;
	MDB_cursor *cur;
	struct store_claim c;
	struct key_entry x;
	int rc;

	if ((rc = mdb_cursor_open(txn, dbi, &cur)) != 0)
		return lmdb_mdb_error(rc, "cursor");
	for (rc = mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE); rc == 0;
	     rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
		if (key.mv_size < STORE_HASH_LEN || memcmp(key.mv_data, keyhash, STORE_HASH_LEN) != 0)
			break;
		if (key.mv_size != STORE_CLAIM_KEY_LEN)
			continue;		/* not a claim's key: corrupt */
		if (lmdb_claim_decode(val.mv_data, val.mv_size, &c) != 0) {
			msg_warn("store: corrupt claim record skipped");
			continue;
		}
		memset(&x, 0, sizeof(x));
		memcpy(x.claim, (uint8_t *) key.mv_data + STORE_HASH_LEN, STORE_HASH_LEN);
		strcpy(x.qid, c.qid);
		buf_append(b, &x, sizeof(x));
	}
	mdb_cursor_close(cur);
	return rc == MDB_NOTFOUND || rc == 0 ? 0 : lmdb_mdb_error(rc, "claims walk");
}

/* key_entries - every claim of a key: its range in cnew, then in claims (each claim is in one) */
static int key_entries(struct lmdb_store *st, MDB_txn *txn, const uint8_t keyhash[STORE_HASH_LEN],
		       struct key_entry **out, size_t *n)
{
	struct buf b = BUF_INIT;	/* struct key_entry, one after the other */
	int rc = 0;

	if (st->claims.has_small)
		rc = filed_in(txn, st->claims.small, keyhash, &b);
	if (rc == 0)
		rc = filed_in(txn, st->claims.big, keyhash, &b);
	*out = (struct key_entry *) b.data;
	*n = b.len / sizeof(**out);
	return rc;
}

/* qid_cmp - QIDs sort by time */
static int qid_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* qid_add - add a QID to a set kept as an array; 1 if it was new */
static int qid_add(char (**qids)[STORE_QID_SIZE], size_t *n, const char *qid)
{
	size_t i;

	for (i = 0; i < *n; i++)
		if (strcmp((*qids)[i], qid) == 0)
			return 0;
	*qids = xrealloc(*qids, (*n + 1) * sizeof(**qids));
	strcpy((*qids)[(*n)++], qid);
	return 1;
}

/* lmdb_key_qids - the messages filed under a key, oldest first */
int lmdb_key_qids(struct store *base, const uint8_t keyhash[STORE_HASH_LEN],
		   char (**qids)[STORE_QID_SIZE], size_t *n)
{
	struct lmdb_store *st = (struct lmdb_store *) base;
	struct key_entry *e;
	size_t ne, i;
	MDB_txn *txn;
	int err;

	*qids = NULL;
	*n = 0;
	if ((err = lmdb_read_begin(st, &txn)) != 0)
		return err;
	err = key_entries(st, txn, keyhash, &e, &ne);
	lmdb_read_end(st, txn);
	for (i = 0; err == 0 && i < ne; i++)
		qid_add(qids, n, e[i].qid);
	free(e);
	if (err == 0 && *n == 0)
		err = STORE_ENOTFOUND;	/* nothing added: *qids is still NULL, as on a failure */
	else if (err == 0)
		qsort(*qids, *n, sizeof(**qids), qid_cmp);
	return err;
}

/* story_user_is - was the message submitted by this AUTH user? */
static int story_user_is(struct lmdb_txn *t, const char *qid, const char *user)
{
	struct store_story s;
	int yes;

	if (lmdb_hist_read(t->st, t->txn, qid, &s) != 0)
		return 0;
	yes = s.m.user != NULL && strcmp(s.m.user, user) == 0;
	store_story_free(&s);
	return yes;
}

/* story_forgotten - note in a story when its key was forgotten */
static int story_forgotten(struct lmdb_txn *t, const char *qid, int64_t now)
{
	struct store_story s;
	int err;

	if ((err = lmdb_hist_read(t->st, t->txn, qid, &s)) != 0)
		return err == STORE_ENOTFOUND || err == STORE_EINVAL ? 0 : err;
	s.forgotten = now;
	err = lmdb_hist_write(t, &s);
	store_story_free(&s);
	return err;
}

/*
 * claim_del - delete an entry's claim if it still belongs to qid and, when
 * live_at is not 0, has expired by then; 1 if deleted
 */
static int claim_del(struct lmdb_txn *t, const uint8_t keyhash[STORE_HASH_LEN],
		     struct key_entry *e, const char *qid, int64_t live_at)
{
	uint8_t k[STORE_CLAIM_KEY_LEN];
	MDB_val key = { sizeof(k), k }, val;
	struct store_claim c;
	MDB_dbi dbi;
	int err, ok;

	lmdb_claim_key(k, keyhash, e->claim);
	err = lmdb_mdb_error(lmdb_stage_get(&t->st->claims, t->txn, &key, &val, &dbi), "get claim");
	if (err == STORE_ENOTFOUND)
		return 0;
	if (err != 0)
		return err;
	/* a claim renewed for another message is that message's to forget */
	ok = lmdb_claim_decode(val.mv_data, val.mv_size, &c) == 0;
	if (ok && strcmp(c.qid, qid) != 0)
		return 0;
	if (ok && live_at != 0 && live_at < c.expires) {
		msg_warn("%s: store: a claim outlives its story; left in place", qid);
		return 0;
	}
	err = lmdb_mdb_error(lmdb_del(t, dbi, &key, NULL), "delete claim");
	return err == 0 ? 1 : err;
}

/*
 * lmdb_keys_expire - a story expired at when: delete its claims (those
 * still naming qid) and its entries under the key. A claim still live
 * then is left (it cannot be: a story outlives its claims) and logged.
 */
int lmdb_keys_expire(struct lmdb_txn *t, const uint8_t keyhash[STORE_HASH_LEN],
		      const char *qid, int64_t when)
{
	struct key_entry *e;
	size_t n, i;
	int err;

	if ((err = key_entries(t->st, t->txn, keyhash, &e, &n)) != 0) {
		free(e);
		return store_txn_fail(&t->base, err);
	}
	for (i = 0, err = 0; i < n && err >= 0; i++)
		if (strcmp(e[i].qid, qid) == 0)
			err = claim_del(t, keyhash, &e[i], qid, when);
	free(e);
	return err < 0 ? store_txn_fail(&t->base, err) : 0;
}

/* lmdb_key_forget - delete a key's claims */
int lmdb_key_forget(struct store *base, const uint8_t keyhash[STORE_HASH_LEN],
		     const char *user, int64_t now, struct store_forget *out)
{
	struct lmdb_store *st = (struct lmdb_store *) base;
	struct lmdb_txn *t;
	struct key_entry *e;
	size_t n, i;
	int err;

	memset(out, 0, sizeof(*out));
	if ((err = lmdb_begin(st, &t)) != 0)
		return err;
	err = key_entries(st, t->txn, keyhash, &e, &n);
	for (i = 0; err == 0 && i < n; i++) {
		if (user && !story_user_is(t, e[i].qid, user))
			continue;
		if ((err = claim_del(t, keyhash, &e[i], e[i].qid, 0)) < 0)
			break;
		out->claims += (size_t) err;
		err = qid_add(&out->qids, &out->n_qids, e[i].qid)
		    ? story_forgotten(t, e[i].qid, now) : 0;	/* its story notes it once */
	}
	free(e);
	if (err == 0 && out->n_qids == 0)
		err = STORE_ENOTFOUND;
	store_txn_fail(&t->base, err);
	if ((err = lmdb_txn_commit(&t->base)) != 0)	/* rolled back if it failed */
		store_forget_free(out);
	else
		qsort(out->qids, out->n_qids, sizeof(*out->qids), qid_cmp);
	return err;
}
