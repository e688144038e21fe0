/*
 * NAME
 *	store_hist 3
 * SUMMARY
 *	history: each message's story, kept after it leaves the spool
 * SYNOPSIS
 *	#include "store/store.h"
 * DESCRIPTION
 *	A story (hist DB, by QID) holds what an operator asks at 3 a.m.:
 *	when and from whom a message was accepted, each recipient's state
 *	and last upstream reply, the attempts, whether its key has one, and
 *	how many duplicates were answered with its QID. There is no body.
 *
 *	While its message is queued, a story is made from the spool: the
 *	message record keeps what the story starts from (its key hash and
 *	ttl), and lmdb_hist_read() falls back to it. The accepting commit
 *	so writes no story, which saves it a page on every level of this
 *	B-tree (three, once a store holds ten thousand stories). The first
 *	write of a story gives it its record: lmdb_txn_msg_update() and
 *	lmdb_msg_drop() call lmdb_hist_update() and lmdb_hist_drop()
 *	inside the spool's own transactions, so a story never disagrees
 *	with the spool; counting duplicates and forgetting a key write it
 *	too. A bounce has a story without a key and the default ttl.
 *
 *	A story is written to a small B-tree first (hnew DB, by QID), and
 *	once that is more than a page deep, every story in it moves to hist
 *	in the same transaction, each with its expiry entry. An outcome's
 *	commit so copies one or two pages of hnew instead of a page on every
 *	level of hist and of hexpiry (eight pages at a million stories
 *	against two on a new store, issue 27); the move pays for the levels
 *	once for a page of stories. A story already in hist is rewritten
 *	there. Every reader looks in hnew first, then in hist (store_stage.c).
 *	A story in hnew that does not decode is deleted by the move, with a
 *	warning: in hist it would have no expiry entry, and stay for ever.
 *
 *	A story expires ttl after its message left the spool, through an
 *	index in time order (hexpiry DB); a story still in hnew has no
 *	entry yet, and expiry reads hnew's few stories for the due ones. Claims live ttl after acceptance,
 *	or until the message leaves, whichever is later: so a story always
 *	outlives the claims it explains, and expiring a story deletes them
 *	(store_keys.c).
 *
 *	Duplicate counts are not written per duplicate: the daemon counts
 *	them in memory and adds them in batches (store_hist_count).
 * DIAGNOSTICS
 *	0 or a STORE_E* code. Inside the spool's transactions a story that
 *	cannot be written fails the transaction (the caller retries without
 *	it: see store_msg.c); a corrupt story is logged and replaced.
 */
#include <endian.h>
#include <stdlib.h>
#include <string.h>

#include "../../util/clock.h"
#include "../../util/buf.h"
#include "../../util/log.h"
#include "store_int.h"

#define HEXPIRY_KEY_MAX		(8 + STORE_QID_SIZE)

/* hexpiry_key - sortable expiry time, then the QID; returns the length */
static size_t hexpiry_key(uint8_t out[HEXPIRY_KEY_MAX], int64_t expires, const char *qid)
{
	uint64_t v = htobe64((uint64_t) expires ^ 0x8000000000000000ull);
	size_t n = strnlen(qid, STORE_QID_SIZE - 1);

	memcpy(out, &v, 8);
	memcpy(out + 8, qid, n);
	return 8 + n;
}

/* hexpiry_time - the time in an index key */
static int64_t hexpiry_time(const uint8_t *k)
{
	uint64_t v;

	memcpy(&v, k, 8);
	return (int64_t) (be64toh(v) ^ 0x8000000000000000ull);
}

/* story_of_spool - the story of a queued message (key its QID) that has no record yet */
static int story_of_spool(struct lmdb_store *st, MDB_txn *txn, const MDB_val *key,
			  struct store_story *s)
{
	int err;

	if ((err = lmdb_spool_read(st, txn, key, &s->m, 0)) != 0)
		return err;
	s->has_key = s->m.has_key;
	memcpy(s->keyhash, s->m.keyhash, STORE_HASH_LEN);
	s->ttl = store_story_ttl(&s->m);
	return 0;
}

/*
 * lmdb_hist_read - a QID's story from txn: its record, or made from
 * the spool while the message is queued and has none; 0,
 * STORE_ENOTFOUND or STORE_EINVAL
 */
int lmdb_hist_read(struct lmdb_store *st, MDB_txn *txn, const char *qid, struct store_story *s)
{
	MDB_val key, val;
	int err;

	memset(s, 0, sizeof(*s));
	if (lmdb_qid_key(qid, &key) != 0)
		return STORE_EINVAL;
	err = lmdb_mdb_error(lmdb_stage_get(&st->hist, txn, &key, &val, NULL), "get hist");
	if (err == STORE_ENOTFOUND)
		return story_of_spool(st, txn, &key, s);
	if (err != 0)
		return err;
	memcpy(s->m.qid, qid, key.mv_size);
	if (lmdb_hist_rec_decode(val.mv_data, val.mv_size, s) != 0) {
		msg_warn("%s: store: corrupt history record", qid);
		memset(s, 0, sizeof(*s));
		return STORE_EINVAL;
	}
	return 0;
}

/* hexpiry_put - a story's expiry entry */
static int hexpiry_put(struct lmdb_txn *t, int64_t expires, const char *qid)
{
	uint8_t ik[HEXPIRY_KEY_MAX];
	MDB_val ikey, empty = { 0, NULL };

	ikey.mv_size = hexpiry_key(ik, expires, qid);
	ikey.mv_data = ik;
	return lmdb_mdb_error(lmdb_put(t, t->st->hexpiry, &ikey, &empty, 0), "put hexpiry");
}

/*
 * lmdb_story_move - a story about to move from hnew to hist: its expiry
 * entry once it has one; STORE_EINVAL if it is corrupt (then deleted: the
 * greatest QID must outlive it, as it does an expired story)
 */
int lmdb_story_move(struct lmdb_txn *t, const MDB_val *key, const MDB_val *val)
{
	struct store_story s;
	char qid[STORE_QID_SIZE];
	int err = 0;

	if (lmdb_key_qid(key, qid) != 0)
		return STORE_EINVAL;
	memset(&s, 0, sizeof(s));
	if (lmdb_hist_rec_decode(val->mv_data, val->mv_size, &s) != 0) {
		err = lmdb_last_qid_note(t, key, 0);
		return err != 0 ? err : STORE_EINVAL;
	}
	if (s.expires != 0)
		err = hexpiry_put(t, s.expires, qid);
	store_story_free(&s);
	return err;
}

/*
 * lmdb_hist_write - put a story: rewritten in hist with its expiry entry
 * if it is there, else into hnew (moved to hist once hnew is full)
 */
int lmdb_hist_write(struct lmdb_txn *t, const struct store_story *s)
{
	MDB_val key, val = { lmdb_hist_rec_size(s), NULL };	/* reserved, then written there */
	int err, staged;

	if (t->base.err)
		return t->base.err;
	if ((err = lmdb_qid_key(s->m.qid, &key)) != 0
	    || (err = lmdb_stage_put(t, &t->st->hist, &key, &val, MDB_RESERVE, &staged)) != 0)
		return store_txn_fail(&t->base, err);
	lmdb_hist_rec_encode(val.mv_data, val.mv_size, s);
	if (staged)
		err = lmdb_stage_move(t, &t->st->hist);
	else if (s->expires != 0)
		err = hexpiry_put(t, s->expires, s->m.qid);
	return err ? store_txn_fail(&t->base, err) : 0;
}

/* envelope_ok - does m carry a whole envelope (store_msg_load gave it)? */
static int envelope_ok(const struct store_msg *m)
{
	size_t i;

	if (m->from == NULL || m->client == NULL || m->rcpts == NULL || m->n_rcpts == 0)
		return 0;
	for (i = 0; i < m->n_rcpts; i++)
		if (m->rcpts[i].addr == NULL)
			return 0;
	return 1;
}

/*
 * lmdb_hist_update - rewrite a story after a delivery update (queued:
 * recipients are left); made from m if there was none. Pointers in the
 * story written are borrowed from m and from the old story.
 */
void lmdb_hist_update(struct lmdb_txn *t, const struct store_msg *m, int queued)
{
	struct store_story old, s;
	struct store_rcpt *rcpts = NULL;
	int64_t now = clock_us();
	size_t i;
	int err;

	if (t->base.err)
		return;
	err = lmdb_hist_read(t->st, t->txn, m->qid, &old);
	if (err != 0 && err != STORE_ENOTFOUND && err != STORE_EINVAL) {
		store_txn_fail(&t->base, err);
		return;
	}
	if (err != 0)
		old.ttl = STORE_STORY_TTL;	/* the spool lacks it too, or it is corrupt */
	s = old;
	if (envelope_ok(m)) {
		s.m = *m;
		s.m.data = NULL;
	} else if (err != 0 || old.m.n_rcpts != m->n_rcpts) {
		goto out;			/* nothing to tell the story with */
	}
	memcpy(s.m.qid, m->qid, STORE_QID_SIZE);
	rcpts = xcalloc(m->n_rcpts, sizeof(*rcpts));
	for (i = 0; i < m->n_rcpts; i++) {
		rcpts[i].addr = m->rcpts[i].addr ? m->rcpts[i].addr : old.m.rcpts[i].addr;
		rcpts[i].state = m->rcpts[i].state;
		rcpts[i].reply = m->rcpts[i].reply;
	}
	s.m.rcpts = rcpts;
	s.m.n_rcpts = m->n_rcpts;
	/* the spool counts attempts that left recipients queued; the last one counts too */
	s.m.attempts = m->attempts + (queued ? 0 : 1);
	s.updated = now;
	if (!queued) {
		s.finished = now;
		s.expires = store_story_expires(now, s.ttl);
	}
	lmdb_hist_write(t, &s);
out:
	free(rcpts);
	store_story_free(&old);
}

/* lmdb_hist_drop - the message left the spool by an operator's drop */
void lmdb_hist_drop(struct lmdb_txn *t, const char *qid)
{
	struct store_story s;
	int64_t now = clock_us();
	int err;

	if (t->base.err)
		return;
	if ((err = lmdb_hist_read(t->st, t->txn, qid, &s)) != 0) {
		if (err != STORE_ENOTFOUND && err != STORE_EINVAL)
			store_txn_fail(&t->base, err);
		return;
	}
	s.dropped = 1;
	s.updated = now;
	s.finished = now;
	s.expires = store_story_expires(now, s.ttl);
	lmdb_hist_write(t, &s);
	store_story_free(&s);
}

/* lmdb_story_get - the story, with the spool's live state if still queued */
int lmdb_story_get(struct store *base, const char *qid, struct store_story *s)
{
	struct lmdb_store *st = (struct lmdb_store *) base;
	struct store_msg live;
	MDB_val key;
	MDB_txn *txn;
	int err, herr;

	memset(s, 0, sizeof(*s));
	if (lmdb_qid_key(qid, &key) != 0)
		return STORE_EINVAL;
	if ((err = lmdb_read_begin(st, &txn)) != 0)
		return err;
	herr = lmdb_hist_read(st, txn, qid, s);
	err = lmdb_spool_read(st, txn, &key, &live, 0);
	lmdb_read_end(st, txn);
	if (err == 0) {
		/* the spool is the authority on a queued message */
		store_msg_free(&s->m);
		s->m = live;
		s->queued = 1;
		s->finished = s->expires = 0;
		return 0;
	}
	if (herr == 0)
		return 0;
	store_story_free(s);
	return err == STORE_ENOTFOUND ? herr : err;
}

/*
 * lmdb_hist_count - add counts to stories in one transaction; unknown
 * QIDs are skipped (with none known, the commit writes nothing)
 */
int lmdb_hist_count(struct store *base, const struct store_count *c, size_t n)
{
	struct lmdb_store *st = (struct lmdb_store *) base;
	struct lmdb_txn *t;
	struct store_story s;
	size_t i;
	int err;

	if (n == 0)
		return 0;
	if ((err = lmdb_begin(st, &t)) != 0)
		return err;
	for (i = 0; i < n && t->base.err == 0; i++) {
		if ((err = lmdb_hist_read(st, t->txn, c[i].qid, &s)) != 0) {
			if (err != STORE_ENOTFOUND && err != STORE_EINVAL)
				store_txn_fail(&t->base, err);
			continue;
		}
		s.duplicates += c[i].duplicates;
		s.mismatches += c[i].mismatches;
		lmdb_hist_write(t, &s);
		store_story_free(&s);
	}
	return lmdb_txn_commit(&t->base);
}

struct due {
	uint8_t key[HEXPIRY_KEY_MAX];
	size_t len;
};

/*
 * hnew_due - add hnew's stories due at now to due, as the index entries
 * they will have in hist, until *n is max: a story still in hnew has no
 * entry, and expires through the one it would have (expire_one())
 */
static int hnew_due(struct lmdb_store *st, MDB_txn *txn, int64_t now, size_t max,
		    struct due *due, size_t *n)
{
	struct store_story s;
	MDB_cursor *cur;
	MDB_val key, val;
	int rc;

	if (!st->hist.has_small || *n >= max)
		return 0;
	if ((rc = mdb_cursor_open(txn, st->hist.small, &cur)) != 0)
		return lmdb_mdb_error(rc, "cursor");
	for (rc = mdb_cursor_get(cur, &key, &val, MDB_FIRST); rc == 0 && *n < max;
	     rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
		memset(&s, 0, sizeof(s));
		if (lmdb_key_qid(&key, s.m.qid) == 0
		    && lmdb_hist_rec_decode(val.mv_data, val.mv_size, &s) == 0
		    && s.expires != 0 && s.expires <= now) {
			due[*n].len = hexpiry_key(due[*n].key, s.expires, s.m.qid);
			(*n)++;
		}
		store_story_free(&s);
	}
	mdb_cursor_close(cur);
	return rc == 0 || rc == MDB_NOTFOUND ? 0 : lmdb_mdb_error(rc, "hnew walk");
}

/* story_del - delete a story, from whichever of hnew and hist holds it */
static int story_del(struct lmdb_txn *t, const char *qid)
{
	struct lmdb_store *st = t->st;
	MDB_val key, val;
	MDB_dbi dbi;
	int err;

	if (lmdb_qid_key(qid, &key) != 0)
		return STORE_EINVAL;
	if ((err = lmdb_mdb_error(lmdb_stage_get(&st->hist, t->txn, &key, &val, &dbi), "get hist")) != 0
	    || (err = lmdb_mdb_error(lmdb_del(t, dbi, &key, NULL), "delete hist")) != 0)
		return err;
	/* the greatest QID must outlive its story */
	return lmdb_last_qid_note(t, &key, 0);
}

/* story_expire - delete qid's story with its claims if it expires at at: 1 if deleted, 0 if not due */
static int story_expire(struct lmdb_txn *t, const char *qid, int64_t at)
{
	struct store_story s;
	int err;

	if ((err = lmdb_hist_read(t->st, t->txn, qid, &s)) != 0)
		return err == STORE_ENOTFOUND || err == STORE_EINVAL ? 0 : err;
	if (at != 0 && s.expires == at) {
		err = s.has_key ? lmdb_keys_expire(t, s.keyhash, qid, s.expires) : 0;
		if (err == 0 && (err = story_del(t, qid)) == 0)
			err = 1;
	}
	store_story_free(&s);
	return err;
}

/*
 * expire_one - delete one due index entry (if there: one of hnew's stories
 * has none), and its story if the entry is current: 1 if so
 */
static int expire_one(struct lmdb_txn *t, const struct due *d)
{
	MDB_val ikey = { d->len, (void *) d->key };
	MDB_val q = { d->len > 8 ? d->len - 8 : 0, (void *) (d->key + 8) };	/* its QID */
	char qid[STORE_QID_SIZE];
	int err, gone = 0;

	if (lmdb_key_qid(&q, qid) == 0 && (gone = story_expire(t, qid, hexpiry_time(d->key))) < 0)
		return gone;
	err = lmdb_mdb_error(lmdb_del(t, t->st->hexpiry, &ikey, NULL), "delete hexpiry");
	return err == 0 || err == STORE_ENOTFOUND ? gone : err;
}

/* hexpiry_due - the index's entries due at now, up to max, copied into due */
static int hexpiry_due(struct lmdb_store *st, MDB_txn *txn, int64_t now, size_t max,
		       struct due *due, size_t *n)
{
	MDB_cursor *cur;
	MDB_val key, val;
	int rc;

	*n = 0;
	if ((rc = mdb_cursor_open(txn, st->hexpiry, &cur)) != 0)
		return lmdb_mdb_error(rc, "cursor");
	for (rc = mdb_cursor_get(cur, &key, &val, MDB_FIRST); rc == 0 && *n < max;
	     rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
		if (key.mv_size >= 8 && hexpiry_time(key.mv_data) > now)
			break;
		due[*n].len = key.mv_size < HEXPIRY_KEY_MAX ? key.mv_size : HEXPIRY_KEY_MAX;
		memcpy(due[*n].key, key.mv_data, due[*n].len);
		(*n)++;
	}
	mdb_cursor_close(cur);
	return rc == 0 || rc == MDB_NOTFOUND ? 0 : lmdb_mdb_error(rc, "hexpiry walk");
}

/*
 * lmdb_hist_expire - delete the stories whose time is over, up to max due
 * entries (of the index, and of hnew) in one transaction: how many
 * stories it deleted. What is due is read first, in a read transaction
 * (no writer lock for nothing); the write transaction checks each story
 * again. An index entry no longer current (its story gone, or due at
 * another time) is deleted but not counted, so fewer than max may be
 * returned while more are due: the next call takes those.
 */
int lmdb_hist_expire(struct store *base, int64_t now, size_t max)
{
	struct lmdb_store *st = (struct lmdb_store *) base;
	struct lmdb_txn *t;
	struct due *due;
	MDB_txn *txn;
	size_t n = 0, done = 0, i;
	int err, gone;

	if (max == 0)
		return 0;
	if ((err = lmdb_read_begin(st, &txn)) != 0)
		return err;
	due = xcalloc(max, sizeof(*due));
	if ((err = hexpiry_due(st, txn, now, max, due, &n)) == 0)
		err = hnew_due(st, txn, now, max, due, &n);
	lmdb_read_end(st, txn);
	if (err == 0 && n > 0 && (err = lmdb_begin(st, &t)) == 0) {
		for (i = 0; i < n && t->base.err == 0; i++)
			if ((gone = expire_one(t, &due[i])) < 0)
				store_txn_fail(&t->base, gone);
			else
				done += (size_t) gone;
		err = lmdb_txn_commit(&t->base);	/* rolled back if it failed */
	}
	free(due);
	return err != 0 ? err : (int) done;
}

/* unwritten - queued messages whose story has no record yet (a walk of the queue) */
static int unwritten(struct lmdb_store *st, MDB_txn *txn, uint64_t *n)
{
	MDB_cursor *cur;
	MDB_val key, val;
	int rc;

	if ((rc = mdb_cursor_open(txn, st->queue, &cur)) != 0)
		return rc;
	for (rc = mdb_cursor_get(cur, &key, &val, MDB_FIRST); rc == 0;
	     rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT))
		if (lmdb_stage_get(&st->hist, txn, &key, &val, NULL) == MDB_NOTFOUND)
			(*n)++;
	mdb_cursor_close(cur);
	return rc == MDB_NOTFOUND ? 0 : rc;
}

/* lmdb_hist_stories - the stories in txn, written or made from the spool */
int lmdb_hist_stories(struct lmdb_store *st, MDB_txn *txn, uint64_t *n)
{
	MDB_stat h, hn = { 0 };
	int rc;

	*n = 0;
	if ((rc = mdb_stat(txn, st->hist.big, &h)) == 0
	    && (!st->hist.has_small || (rc = mdb_stat(txn, st->hist.small, &hn)) == 0)
	    && (rc = unwritten(st, txn, n)) == 0)
		*n += h.ms_entries + hn.ms_entries;
	return lmdb_mdb_error(rc, "stat");
}
