/*
 * NAME
 *	store_msg 3
 * SUMMARY
 *	the spool: queued messages and their delivery state
 * SYNOPSIS
 *	#include "store/store.h"
 * DESCRIPTION
 *	A queued message is two records under its QID: the message itself
 *	(msg DB), written once, and its delivery state (queue DB), rewritten
 *	after every attempt. Keeping them apart means a delivery attempt
 *	rewrites a few dozen bytes, not the whole message. Both are written
 *	and removed together, in one transaction.
 *
 *	The message record is encoded straight into the map (MDB_RESERVE):
 *	a multi-megabyte body is copied once, from the caller into LMDB.
 *
 *	lmdb_queue_walk() reads the queue in QID (thus time) order inside
 *	one read transaction; for what delivery starts with, it calls back
 *	after that transaction ended, so that the callback may call anything
 *	in the store, writes included. A callback returning non-zero stops
 *	the walk; that value is returned.
 * DIAGNOSTICS
 *	0 or a STORE_E* code. A queue record without its message record is
 *	reported as STORE_EINVAL by lmdb_msg_load(); lmdb_msg_drop()
 *	removes either half alone.
 */
#include <stdlib.h>
#include <string.h>

#include "../../util/buf.h"
#include "../../util/clock.h"
#include "../../util/log.h"
#include "store_int.h"


/* put_reserved - reserve space for a record and encode into it */
static int put_reserved(struct lmdb_txn *t, MDB_dbi dbi, MDB_val *key, size_t len, unsigned flags,
			void (*encode) (void *, size_t, const struct store_msg *),
			const struct store_msg *m, const char *what)
{
	MDB_val val = { len, NULL };
	int err;

	if ((err = lmdb_mdb_error(lmdb_put(t, dbi, key, &val, flags | MDB_RESERVE), what)) != 0)
		return err;
	encode(val.mv_data, len, m);
	return 0;
}

/*
 * lmdb_last_qid_note - remember the QID of a message leaving the spool
 * (or of a story expiring) if it is the greatest yet. The greatest QID
 * ever spooled is the greatest of the msg DB's last key, the stories'
 * last key and meta's last_qid: store_stats() takes all three (store_lmdb.c). So
 * spooling writes no last_qid, nor does a message leaving with its story
 * written (story set: a record under key is then there), and neither
 * the accepting commit nor an outcome touches a meta page; the story's
 * expiry notes its QID instead (store_hist.c).
 */
int lmdb_last_qid_note(struct lmdb_txn *t, const MDB_val *key, int story)
{
	struct lmdb_store *st = t->st;
	MDB_val mkey = { sizeof(META_LAST_QID) - 1, META_LAST_QID }, last, rec;
	int err;

	if (story && lmdb_stage_get(&st->hist, t->txn, (MDB_val *) key, &rec, NULL) == 0)
		return 0;
	err = lmdb_mdb_error(mdb_get(t->txn, st->meta, &mkey, &last), "get last_qid");
	if (err == 0 && mdb_cmp(t->txn, st->meta, key, &last) <= 0)	/* as keys sort */
		return 0;
	if (err != 0 && err != STORE_ENOTFOUND)
		return err;
	return lmdb_mdb_error(lmdb_put(t, st->meta, &mkey, (MDB_val *) key, 0), "put last_qid");
}

/*
 * lmdb_txn_msg_put - spool a new message: message and delivery state,
 * if the room kept for the delivery writes of what is queued stays
 * (store_space.c); a bounce's non-delivery notice (m->notice) may use
 * that room, all but its floor
 */
void lmdb_txn_msg_put(struct store_txn *base, const struct store_msg *m)
{
	struct lmdb_txn *t = (struct lmdb_txn *) base;
	struct lmdb_store *st = t->st;
	MDB_val key;
	int err;

	if ((err = lmdb_qid_key(m->qid, &key)) != 0 || (err = lmdb_space_room(t, m)) != 0
	    || (err = put_reserved(t, st->msg, &key, lmdb_msg_rec_size(m), MDB_NOOVERWRITE,
				lmdb_msg_rec_encode, m, "put msg")) != 0
	    || (err = put_reserved(t, st->queue, &key, lmdb_queue_rec_size(m),
				   MDB_NOOVERWRITE, lmdb_queue_rec_encode, m, "put queue")) != 0)
		store_txn_fail(&t->base, err);
	else
		t->rcpt_delta += (int64_t) m->n_rcpts;
}

/*
 * lmdb_spool_read - the queued message under key in txn, from its two
 * records, with owned copies of every field (its data only if with_data):
 * 0, STORE_ENOTFOUND if either record is missing, or STORE_EINVAL if one
 * is corrupt (m then holds nothing to free)
 */
int lmdb_spool_read(struct lmdb_store *st, MDB_txn *txn, const MDB_val *key,
		    struct store_msg *m, int with_data)
{
	MDB_val mval, qval;
	int err;

	memset(m, 0, sizeof(*m));
	if ((err = lmdb_mdb_error(mdb_get(txn, st->queue, (MDB_val *) key, &qval), "get queue")) != 0
	    || (err = lmdb_mdb_error(mdb_get(txn, st->msg, (MDB_val *) key, &mval), "get msg")) != 0)
		return err;
	if (lmdb_key_qid(key, m->qid) != 0
	    || lmdb_msg_rec_decode(mval.mv_data, mval.mv_size, m, with_data) != 0
	    || lmdb_queue_rec_decode(qval.mv_data, qval.mv_size, m) != 0)
		return STORE_EINVAL;	/* each decoder leaves nothing to free */
	return 0;
}

/* lmdb_msg_load - a queued message with owned copies of every field */
int lmdb_msg_load(struct store *base, const char *qid, struct store_msg *m)
{
	struct lmdb_store *st = (struct lmdb_store *) base;
	MDB_val key, qval;
	MDB_txn *txn;
	int err;

	memset(m, 0, sizeof(*m));
	if (lmdb_qid_key(qid, &key) != 0)
		return STORE_EINVAL;
	if ((err = lmdb_read_begin(st, &txn)) != 0)
		return err;
	/* the queue record says whether it is queued; then the message must exist */
	err = lmdb_spool_read(st, txn, &key, m, 1);
	if (err == STORE_ENOTFOUND && mdb_get(txn, st->queue, &key, &qval) == 0) {
		msg_warn("%s: store: queue record without message", qid);
		err = STORE_EINVAL;
	} else if (err == STORE_EINVAL) {
		msg_warn("%s: store: corrupt message record", qid);
	}
	lmdb_read_end(st, txn);
	return err;
}

/*
 * rerouted - was key's message rerouted since it was loaded with route
 * (its message record names another)? Then the attempt that defers it
 * went the old way, and the retry time it earned there is not its own.
 */
static int rerouted(struct lmdb_txn *t, MDB_val *key, const char *route)
{
	struct store_msg m;
	MDB_val val;
	int other = 0;

	memset(&m, 0, sizeof(m));
	if (mdb_get(t->txn, t->st->msg, key, &val) == 0
	    && lmdb_msg_rec_decode(val.mv_data, val.mv_size, &m, 0) == 0) {
		other = (m.route == NULL) != (route == NULL) || (route && strcmp(m.route, route) != 0);
		store_msg_free(&m);
	}
	return other;
}

/* queue_get - qid's key and delivery state record in t: 0, or the STORE_E* code t now fails with */
static inline int queue_get(struct lmdb_txn *t, const char *qid, MDB_val *key, MDB_val *val)
{
	int err = STORE_EINVAL;

	if (lmdb_qid_key(qid, key) == 0)
		err = lmdb_mdb_error(mdb_get(t->txn, t->st->queue, key, val), "get queue");
	return err ? store_txn_fail(&t->base, err) : 0;
}

/*
 * lmdb_txn_msg_update - rewrite one message's delivery state inside t,
 * and its story unless t is bare; all final: it leaves the spool. A
 * deferral of a message rerouted during its attempt (the reroute made it
 * due now) keeps it due now: a restart would wait out the old route's
 * retry, as every node did on PostgreSQL (store_pg_txn.c).
 */
void lmdb_txn_msg_update(struct store_txn *base, const struct store_msg *m)
{
	struct lmdb_txn *t = (struct lmdb_txn *) base;
	struct lmdb_store *st = t->st;
	struct store_msg kept;
	MDB_val key, val;
	size_t i, n;
	int err, queued = 0;

	if (queue_get(t, m->qid, &key, &val) != 0)
		return;
	for (i = 0; i < m->n_rcpts; i++)
		if (m->rcpts[i].state == STORE_RCPT_QUEUED)
			queued = 1;
	/* the hold is the operator's: an update keeps it as it finds it */
	kept = *m;
	if (lmdb_queue_rec_peek(val.mv_data, val.mv_size, &n, NULL, &kept.held) != 0
	    || n != m->n_rcpts) {
		msg_warn("%s: store: queue record does not match the update", m->qid);
		store_txn_fail(&t->base, STORE_EINVAL);
		return;
	}
	/* first: a story without a record yet is made from the spool records */
	if (!t->base.bare)
		lmdb_hist_update(t, m, queued);
	/* a failed put leaves LMDB's transaction unusable (MDB_BAD_TXN): stop here */
	if (t->base.err)
		return;
	if (queued && kept.next_attempt > clock_us() && rerouted(t, &key, m->route))
		kept.next_attempt = clock_us();
	if (queued) {
		err = put_reserved(t, st->queue, &key, lmdb_queue_rec_size(&kept), 0,
				   lmdb_queue_rec_encode, &kept, "put queue");
	} else if ((err = lmdb_mdb_error(lmdb_del(t, st->queue, &key, NULL),
					  "delete queue")) == 0) {
		t->rcpt_delta -= (int64_t) n;
		err = lmdb_mdb_error(lmdb_del(t, st->msg, &key, NULL), "delete msg");
		if (err == STORE_ENOTFOUND)
			err = 0;
		if (err == 0)
			err = lmdb_last_qid_note(t, &key, 1);
	}
	if (err != 0)
		store_txn_fail(&t->base, err);
}

/* queue_patch - rewrite one field of qid's delivery state record inside t (what, with v) */
static void queue_patch(struct lmdb_txn *t, const char *qid, unsigned what, int64_t v)
{
	MDB_val key, val;
	void *copy;
	int err;

	if (queue_get(t, qid, &key, &val) != 0)
		return;
	/* the value points into the map: patch a copy, never the map */
	copy = xmalloc(val.mv_size);
	memcpy(copy, val.mv_data, val.mv_size);
	if (lmdb_queue_rec_patch(copy, val.mv_size, what, v) != 0) {
		msg_warn("%s: store: corrupt queue record", qid);
		store_txn_fail(&t->base, STORE_EINVAL);
	} else {
		val.mv_data = copy;
		if ((err = lmdb_mdb_error(lmdb_put(t, t->st->queue, &key, &val, 0),
					   "put queue")) != 0)
			store_txn_fail(&t->base, err);
	}
	free(copy);
}

/*
 * lmdb_txn_msg_set_inflight - set or clear the "final dot may be out"
 * mark inside t, so that marks can share a group commit's fsync.
 */
void lmdb_txn_msg_set_inflight(struct store_txn *base, const char *qid, int on)
{
	queue_patch((struct lmdb_txn *) base, qid, LMDB_QUEUE_INFLIGHT, on);
}

/* set_route - qid's message record, written once at acceptance, rewritten in t with route */
static void set_route(struct lmdb_txn *t, const char *qid, const char *route)
{
	struct lmdb_store *st = t->st;
	struct store_msg m;
	MDB_val key, mval, qval;
	int err;

	if (queue_get(t, qid, &key, &qval) != 0)
		return;
	memset(&m, 0, sizeof(m));
	memcpy(m.qid, qid, key.mv_size);
	if ((err = lmdb_mdb_error(mdb_get(t->txn, st->msg, &key, &mval), "get msg")) == 0
	    && (err = lmdb_msg_rec_decode(mval.mv_data, mval.mv_size, &m, 1)) == 0) {
		free(m.route);
		m.route = route ? xstrdup(route) : NULL;
		err = put_reserved(t, st->msg, &key, lmdb_msg_rec_size(&m), 0,
				   lmdb_msg_rec_encode, &m, "put msg");
	}
	store_msg_free(&m);
	if (err != 0)
		store_txn_fail(&t->base, err);
}

/*
 * lmdb_msg_change - hold, release, reroute or make due a queued message
 * (its queue record's mark and time, its message record's route), in a
 * transaction of its own
 */
int lmdb_msg_change(struct store *base, const char *qid, const struct store_change *c)
{
	struct lmdb_txn *t;
	int err;

	if ((err = lmdb_begin((struct lmdb_store *) base, &t)) != 0)
		return err;
	if (c->hold >= 0)
		queue_patch(t, qid, LMDB_QUEUE_HELD, c->hold);
	if (c->set_route && t->base.err == 0)
		set_route(t, qid, c->route);
	if (c->due > 0 && t->base.err == 0)
		queue_patch(t, qid, LMDB_QUEUE_DUE, c->due);
	return lmdb_txn_commit(&t->base);
}

/* msg_drop - remove a message and its delivery state; note it in its story */
static int msg_drop(struct lmdb_store *st, const char *qid, int with_hist)
{
	struct lmdb_txn *t;
	MDB_val key, val;
	size_t n;
	int err, err2;

	if (lmdb_qid_key(qid, &key) != 0)
		return STORE_EINVAL;
	if ((err = lmdb_begin(st, &t)) != 0)
		return err;
	if (mdb_get(t->txn, st->queue, &key, &val) == 0
	    && lmdb_queue_rec_peek(val.mv_data, val.mv_size, &n, NULL, NULL) == 0)
		t->rcpt_delta = -(int64_t) n;	/* taken away when the commit is */
	if (with_hist)			/* first, while the spool can still tell it */
		lmdb_hist_drop(t, qid);
	if (t->base.err == 0) {		/* LMDB's transaction is unusable after a failed put */
		err = lmdb_mdb_error(lmdb_del(t, st->queue, &key, NULL), "delete queue");
		err2 = lmdb_mdb_error(lmdb_del(t, st->msg, &key, NULL), "delete msg");
		if (err == STORE_ENOTFOUND && err2 == 0)
			err = 0;
		else if (err == 0 && err2 != STORE_ENOTFOUND)
			err = err2;
		if (err == 0)
			err = lmdb_last_qid_note(t, &key, 1);
		store_txn_fail(&t->base, err);
	}
	return lmdb_txn_commit(&t->base);	/* rolled back if it failed */
}

/* lmdb_msg_drop - remove a message from the spool (its story says so) */
int lmdb_msg_drop(struct store *base, const char *qid)
{
	struct lmdb_store *st = (struct lmdb_store *) base;
	int err = msg_drop(st, qid, 1);

	if (err == STORE_ENOSPC)
		err = msg_drop(st, qid, 0);
	return err;
}

struct queue_entry {
	char qid[STORE_QID_SIZE];
	int64_t next_attempt;
};

/* queue_mine - a queue record for delivery's start: its QID and next attempt, unless held */
static void queue_mine(struct buf *list, const MDB_val *key, const MDB_val *val)
{
	struct queue_entry e;
	int held;

	if (lmdb_key_qid(key, e.qid) != 0
	    || lmdb_queue_rec_peek(val->mv_data, val->mv_size, NULL, &e.next_attempt, &held) != 0)
		msg_warn("store: corrupt queue record skipped");
	else if (!held)			/* never delivered until released */
		buf_append(list, &e, sizeof(e));
}

/*
 * lmdb_queue_walk - each queued message's envelope and state, to cb in one
 * read transaction; or what delivery starts with (STORE_WALK_MINE: the
 * QID and next attempt of each not held), to cb once it has ended
 */
int lmdb_queue_walk(struct store *base, unsigned how,
		    int (*cb) (void *arg, const struct store_msg *m), void *arg)
{
	struct lmdb_store *st = (struct lmdb_store *) base;
	struct buf mine = BUF_INIT;	/* struct queue_entry, one after the other */
	const struct queue_entry *q;
	MDB_cursor *cur = NULL;
	MDB_val key, val;
	struct store_msg m;
	MDB_txn *txn;
	char qid[STORE_QID_SIZE];
	size_t i;
	int rc, err = 0;

	if ((err = lmdb_read_begin(st, &txn)) != 0)
		return err;
	if ((rc = mdb_cursor_open(txn, st->queue, &cur)) != 0)
		goto out;
	for (rc = mdb_cursor_get(cur, &key, &val, MDB_FIRST); rc == 0 && err == 0;
	     rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
		if (how & STORE_WALK_MINE) {
			queue_mine(&mine, &key, &val);
		} else if (lmdb_spool_read(st, txn, &key, &m, 0) != 0) {
			if (lmdb_key_qid(&key, qid) == 0)	/* else its bytes stay out of the log */
				msg_warn("%s: store: corrupt queue or message record skipped", qid);
			else
				msg_warn("store: corrupt queue or message record skipped");
		} else {
			err = cb(arg, &m);
			store_msg_free(&m);
		}
	}
out:
	if (cur)
		mdb_cursor_close(cur);
	lmdb_read_end(st, txn);
	if (err == 0 && rc != MDB_NOTFOUND)
		err = lmdb_mdb_error(rc, "queue walk");
	memset(&m, 0, sizeof(m));
	q = (const struct queue_entry *) mine.data;
	for (i = 0; err == 0 && i < mine.len / sizeof(*q); i++) {
		memcpy(m.qid, q[i].qid, sizeof(m.qid));
		m.next_attempt = q[i].next_attempt;
		err = cb(arg, &m);
	}
	buf_free(&mine);
	return err;
}

/* lmdb_queue_oldest - QIDs sort by time: the first queued one is the oldest; 0 if none or unread */
void lmdb_queue_oldest(struct lmdb_store *st, MDB_txn *txn, int64_t *accepted)
{
	MDB_cursor *cur = NULL;
	MDB_val key, val;
	struct store_msg m;

	*accepted = 0;
	if (mdb_cursor_open(txn, st->queue, &cur) == 0
	    && mdb_cursor_get(cur, &key, &val, MDB_FIRST) == 0
	    && lmdb_spool_read(st, txn, &key, &m, 0) == 0) {
		*accepted = m.accepted;
		store_msg_free(&m);
	}
	if (cur)
		mdb_cursor_close(cur);
}
