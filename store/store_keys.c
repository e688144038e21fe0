/*
 * NAME
 *	store_keys 3
 * SUMMARY
 *	the key index: from a key to its claims, to show or forget them
 * SYNOPSIS
 *	#include "store/store.h"
 * DESCRIPTION
 *	Claims are filed under a hash of (scope, key, recipient), which
 *	cannot be walked back to the key. The key index (keys DB, sorted
 *	duplicates) files each claim again under a hash of the key alone:
 *	key hash -> claim hash (32 bytes) followed by the QID that took it.
 *	The accepting transaction writes it beside the claims
 *	(store_txn_key_put), so the two never disagree after a crash.
 *
 *	An entry goes when its story expires (store_hist.c), which is after
 *	the claim itself expired, and takes the claim with it
 *	(store_keys_expire); store_key_forget() deletes a key's claims and
 *	its entries at once. An entry whose claim was since renewed
 *	for another message (on_mismatch = "accept") names the old QID and
 *	is skipped: the new message has its own entry.
 * DIAGNOSTICS
 *	0, STORE_ENOTFOUND for a key with no entry, or a STORE_E* failure.
 */
#include <stdlib.h>
#include <string.h>

#include "../util/buf.h"
#include "../util/log.h"
#include "store_int.h"

struct key_entry {
	uint8_t claim[STORE_HASH_LEN];
	char qid[STORE_QID_SIZE];
	MDB_val val;			/* points into e->raw */
	uint8_t raw[STORE_HASH_LEN + STORE_QID_SIZE];
};

/* key_entries - copy every entry under a key; *n = 0 if none */
static int key_entries(struct store *st, MDB_txn *txn, const uint8_t keyhash[STORE_HASH_LEN],
		       struct key_entry **out, size_t *n)
{
	MDB_val key = { STORE_HASH_LEN, (void *) keyhash }, val;
	MDB_cursor *cur;
	struct key_entry *e = NULL;
	size_t cap = 0, qlen;
	int rc;

	*out = NULL;
	*n = 0;
	if (!st->has_hist)
		return 0;
	if ((rc = mdb_cursor_open(txn, st->keys, &cur)) != 0)
		return store_mdb_error(rc, "cursor");
	for (rc = mdb_cursor_get(cur, &key, &val, MDB_SET_KEY); rc == 0;
	     rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT_DUP)) {
		if (val.mv_size <= STORE_HASH_LEN
		    || (qlen = val.mv_size - STORE_HASH_LEN) >= STORE_QID_SIZE) {
			msg_warn("store: corrupt key index entry skipped");
			continue;
		}
		if (*n == cap) {
			cap = cap ? 2 * cap : 8;
			e = xrealloc(e, cap * sizeof(*e));
		}
		memcpy(e[*n].raw, val.mv_data, val.mv_size);
		memcpy(e[*n].claim, val.mv_data, STORE_HASH_LEN);
		memcpy(e[*n].qid, (uint8_t *) val.mv_data + STORE_HASH_LEN, qlen);
		e[*n].qid[qlen] = 0;
		(*n)++;
	}
	mdb_cursor_close(cur);
	for (size_t i = 0; i < *n; i++) {	/* the array moved while growing */
		e[i].val.mv_data = e[i].raw;
		e[i].val.mv_size = STORE_HASH_LEN + strlen(e[i].qid);
	}
	*out = e;
	return rc == MDB_NOTFOUND ? 0 : store_mdb_error(rc, "key index walk");
}

/* store_txn_key_put - file one claim under its key */
void store_txn_key_put(struct store_txn *t, const uint8_t keyhash[STORE_HASH_LEN],
		       const uint8_t claim[STORE_HASH_LEN], const char *qid)
{
	uint8_t raw[STORE_HASH_LEN + STORE_QID_SIZE];
	MDB_val key = { STORE_HASH_LEN, (void *) keyhash }, val;
	size_t qlen;
	int rc;

	if (t->err || !t->st->has_hist)
		return;
	qlen = strnlen(qid, STORE_QID_SIZE);
	if (qlen == 0 || qlen >= STORE_QID_SIZE) {
		store_txn_fail(t, STORE_EINVAL);
		return;
	}
	memcpy(raw, claim, STORE_HASH_LEN);
	memcpy(raw + STORE_HASH_LEN, qid, qlen);
	val.mv_size = STORE_HASH_LEN + qlen;
	val.mv_data = raw;
	/* the same pair twice is no error: it is already filed */
	if ((rc = store_put(t, t->st->keys, &key, &val, MDB_NODUPDATA)) != 0
	    && rc != MDB_KEYEXIST)
		store_txn_fail(t, store_mdb_error(rc, "put key index"));
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

/* store_key_qids - the messages filed under a key, oldest first */
int store_key_qids(struct store *st, const uint8_t keyhash[STORE_HASH_LEN],
		   char (**qids)[STORE_QID_SIZE], size_t *n)
{
	struct key_entry *e;
	size_t ne, i;
	MDB_txn *txn;
	int err;

	*qids = NULL;
	*n = 0;
	if ((err = store_read_begin(st, &txn)) != 0)
		return err;
	err = key_entries(st, txn, keyhash, &e, &ne);
	mdb_txn_abort(txn);
	for (i = 0; err == 0 && i < ne; i++)
		qid_add(qids, n, e[i].qid);
	free(e);
	if (err == 0 && *n == 0)
		err = STORE_ENOTFOUND;
	if (err != 0) {
		free(*qids);
		*qids = NULL;
		*n = 0;
		return err;
	}
	qsort(*qids, *n, sizeof(**qids), qid_cmp);
	return 0;
}

/* story_user_is - was the message submitted by this AUTH user? */
static int story_user_is(struct store_txn *t, const char *qid, const char *user)
{
	struct store_story s;
	int yes;

	if (store_hist_read(t->st, t->txn, qid, &s) != 0)
		return 0;
	yes = s.m.user != NULL && strcmp(s.m.user, user) == 0;
	store_story_free(&s);
	return yes;
}

/* story_forgotten - note in a story when its key was forgotten */
static int story_forgotten(struct store_txn *t, const char *qid, int64_t now)
{
	struct store_story s;
	int err;

	if ((err = store_hist_read(t->st, t->txn, qid, &s)) != 0)
		return err == STORE_ENOTFOUND || err == STORE_EINVAL ? 0 : err;
	s.forgotten = now;
	err = store_hist_write(t, &s);
	store_story_free(&s);
	return err;
}

/*
 * claim_del - delete a claim if it still belongs to qid and, when live_at
 * is not 0, has expired by then; 1 if deleted
 */
static int claim_del(struct store_txn *t, const uint8_t claim[STORE_HASH_LEN], const char *qid,
		     int64_t live_at)
{
	MDB_val key = { STORE_HASH_LEN, (void *) claim }, val;
	struct store_claim c;
	int err, ok;

	err = store_mdb_error(mdb_get(t->txn, t->st->claims, &key, &val), "get claim");
	if (err == STORE_ENOTFOUND)
		return 0;
	if (err != 0)
		return err;
	/* a claim renewed for another message is that message's to forget */
	ok = store_claim_decode(val.mv_data, val.mv_size, &c) == 0;
	if (ok && strcmp(c.qid, qid) != 0)
		return 0;
	if (ok && live_at != 0 && live_at < c.expires) {
		msg_warn("%s: store: a claim outlives its story; left in place", qid);
		return 0;
	}
	err = store_mdb_error(store_del(t, t->st->claims, &key, NULL), "delete claim");
	return err == 0 ? 1 : err;
}

/*
 * store_keys_expire - a story expired at when: delete its claims (those
 * still naming qid) and its entries under the key. A claim still live
 * then is left (it cannot be: a story outlives its claims) and logged.
 */
int store_keys_expire(struct store_txn *t, const uint8_t keyhash[STORE_HASH_LEN],
		      const char *qid, int64_t when)
{
	MDB_val key = { STORE_HASH_LEN, (void *) keyhash };
	struct key_entry *e;
	size_t n, i;
	int err;

	if ((err = key_entries(t->st, t->txn, keyhash, &e, &n)) != 0)
		return store_txn_fail(t, err);
	for (i = 0; i < n && err == 0; i++) {
		if (strcmp(e[i].qid, qid) != 0)
			continue;
		if ((err = claim_del(t, e[i].claim, qid, when)) < 0)
			break;
		err = store_mdb_error(store_del(t, t->st->keys, &key, &e[i].val), "delete key");
		if (err == STORE_ENOTFOUND)
			err = 0;
	}
	free(e);
	return err ? store_txn_fail(t, err) : 0;
}

/* store_key_forget - delete a key's claims and index entries */
int store_key_forget(struct store *st, const uint8_t keyhash[STORE_HASH_LEN],
		     const char *user, int64_t now, struct store_forget *out)
{
	MDB_val key = { STORE_HASH_LEN, (void *) keyhash };
	struct store_txn *t;
	struct key_entry *e = NULL;
	size_t n, i;
	int err;

	memset(out, 0, sizeof(*out));
	if (!st->has_hist)
		return STORE_ENOTFOUND;
	if ((err = store_txn_begin(st, &t)) != 0)
		return err;
	if ((err = key_entries(st, t->txn, keyhash, &e, &n)) != 0)
		goto fail;
	for (i = 0; i < n; i++) {
		if (user && !story_user_is(t, e[i].qid, user))
			continue;
		if ((err = claim_del(t, e[i].claim, e[i].qid, 0)) < 0)
			goto fail;
		out->claims += (size_t) err;
		err = store_mdb_error(store_del(t, st->keys, &key, &e[i].val), "delete key");
		if (err != 0 && err != STORE_ENOTFOUND)
			goto fail;
		if (qid_add(&out->qids, &out->n_qids, e[i].qid)
		    && (err = story_forgotten(t, e[i].qid, now)) != 0)
			goto fail;
	}
	err = 0;
	if (out->n_qids == 0) {
		err = STORE_ENOTFOUND;
		goto fail;
	}
	free(e);
	qsort(out->qids, out->n_qids, sizeof(*out->qids), qid_cmp);
	if ((err = store_txn_commit(t)) != 0)
		store_forget_free(out);
	return err;

fail:
	free(e);
	store_txn_abort(t);
	store_forget_free(out);
	return err;
}

/* store_forget_free - release what store_key_forget() gave */
void store_forget_free(struct store_forget *f)
{
	if (f == NULL)
		return;
	free(f->qids);
	memset(f, 0, sizeof(*f));
}
