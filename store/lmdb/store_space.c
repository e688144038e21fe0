/*
 * NAME
 *	store_space 3
 * SUMMARY
 *	the reserve: room kept for the outcome of every queued message
 * SYNOPSIS
 *	#include "store/store.h"
 *
 *	int lmdb_space_room(struct lmdb_txn *t, const struct store_msg *m);
 *
 *	uint64_t lmdb_space_reserve(uint64_t psize, uint64_t pages,
 *				    uint64_t queued, uint64_t rcpts);
 *
 *	int lmdb_space_count(struct lmdb_store *st);
 * DESCRIPTION
 *	A message answered 250 must be delivered once. Its delivery needs
 *	writes of its own: the inflight mark, each deferral's new state,
 *	the outcome, the removal from the spool, and its story. If a full
 *	map refused them, a delivered message would stay queued and be
 *	sent again. So acceptance may not fill the map: before it spools
 *	an accepted message, lmdb_txn_msg_put() asks lmdb_space_room()
 *	whether, with it and a claim for each of its recipients if it has
 *	a key, as many pages stay free as every queued message's delivery
 *	writes need, plus a fixed floor. If not, the transaction fails
 *	with STORE_ENOSPC (the client gets 452 4.3.1 and retries later).
 *	Delivery writes never ask, and so may use the reserve.
 *
 *	The one new message delivery makes, a bounce's non-delivery notice
 *	(deliver_record.c), is part of the bounce's outcome, as Postfix's
 *	queue_minfree holds back incoming mail only: held to the whole
 *	reserve, a store full after a long upstream outage could never
 *	bounce what is past retry.give_up, and so never drain. Delivery
 *	marks it (store_msg.notice) and writes it in its outcome's
 *	transaction. But a notice is a message, about as large as its
 *	original (plus some 2.5 KB), whose original's pages come back only
 *	once that transaction has committed: taken without a check, notices
 *	can fill the map for real, and then no outcome commits at all. So a
 *	notice may use the part of the reserve kept for the queued messages,
 *	but not the floor: it is spooled only if the floor, and its own
 *	delivery's writes, stay free after it. A notice refused so is made
 *	again with the original's headers alone (deliver_record.c), and if
 *	even that is refused its recipients stay queued, deferred, and
 *	bounce with their notice at a later attempt: in a store full to its
 *	reserve only the first notices may fit, the rest wait for their
 *	next attempt.
 *
 *	Free pages are the map's untouched tail plus LMDB's freelist (the
 *	pages of older snapshots, reused by later commits); the freelist is
 *	only walked when the tail alone is too short, which is rare.
 *
 *	What a queued message needs is estimated, not counted: removal
 *	frees its own records, but only after its transaction; before that
 *	the transaction copies the B-tree pages it touches (the floor: one
 *	delivery batch's worth, or an eighth of a small map) and adds its
 *	story and expiry entry: STORE_RESERVE_PER_MSG bytes a message and
 *	STORE_RESERVE_PER_RCPT a recipient (its address and final reply),
 *	a story's size with half-filled leaves. A story of 100 recipients
 *	is some 8 KB, so messages alone would not do. If even that is
 *	short, an outcome is recorded without its story (store_msg.c): the
 *	story is the one write of a delivery that can be let go.
 *
 *	The queued recipients are counted once, by lmdb_space_count() when
 *	the store opens (a walk of the queue), and then kept by every
 *	commit (rcpt_delta: store_msg.c adds a message's recipients when it
 *	spools it and takes them away when it leaves the queue). The count
 *	is read without the writer's lock, so it may lag a commit behind:
 *	an estimate, like the rest of the reserve.
 * DIAGNOSTICS
 *	STORE_ENOSPC in the transaction's sticky error when the reserve
 *	would be touched (by a notice: its floor).
 */
#include <string.h>

#include "store_int.h"

#define FREE_DBI	0		/* LMDB's freelist database */
#define RESERVE_FLOOR	(1u << 20)	/* one delivery batch's copied pages, with room */
#define RESERVE_MIN	(64u << 10)	/* what one outcome alone needs, at the least */
#define ROOM_TXN	16		/* pages an accepting transaction copies besides records */
#define ROOM_CLAIM	(STORE_CLAIM_KEY_LEN + STORE_CLAIM_REC_LEN + 16)

/* lmdb_space_geometry - page size, the map's bytes, pages used up to the last; 0 or a STORE_E* */
int lmdb_space_geometry(struct lmdb_store *st, uint64_t *psize, uint64_t *map, uint64_t *last)
{
	MDB_envinfo info;
	MDB_stat ms;
	int rc;

	if ((rc = mdb_env_info(st->env, &info)) != 0 || (rc = mdb_env_stat(st->env, &ms)) != 0)
		return lmdb_mdb_error(rc, "env info");
	*psize = ms.ms_psize;
	*map = info.me_mapsize;
	*last = (uint64_t) info.me_last_pgno + 1;
	return 0;
}

/*
 * lmdb_space_freelist - pages on LMDB's freelist, in a read transaction
 * of its own (LMDB opens no cursor on it in a write transaction). Each
 * record is a list of page numbers, its count first.
 */
int lmdb_space_freelist(struct lmdb_store *st, uint64_t *n)
{
	MDB_cursor *cur;
	MDB_val key, val;
	MDB_txn *txn;
	size_t count;
	int rc, err;

	*n = 0;
	if ((err = lmdb_read_begin(st, &txn)) != 0)
		return err;
	if ((rc = mdb_cursor_open(txn, FREE_DBI, &cur)) == 0) {
		for (rc = mdb_cursor_get(cur, &key, &val, MDB_FIRST); rc == 0;
		     rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
			if (val.mv_size < sizeof(count))
				continue;
			memcpy(&count, val.mv_data, sizeof(count));
			*n += count;
		}
		mdb_cursor_close(cur);
	}
	lmdb_read_end(st, txn);
	return rc == MDB_NOTFOUND || rc == 0 ? 0 : lmdb_mdb_error(rc, "freelist");
}

/*
 * lmdb_space_count - count the queued messages' recipients: at open, and
 * after a reopen (what is durable may be less than what was counted).
 * Its read transaction does not enter the gate: at open nothing else
 * uses the store yet, and lmdb_reopen() holds the gate alone.
 */
int lmdb_space_count(struct lmdb_store *st)
{
	MDB_cursor *cur;
	MDB_val key, val;
	MDB_txn *txn;
	uint64_t sum = 0;
	size_t n;
	int rc;

	if ((rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn)) != 0)
		return lmdb_mdb_error(rc, "count queue");
	if ((rc = mdb_cursor_open(txn, st->queue, &cur)) == 0) {
		for (rc = mdb_cursor_get(cur, &key, &val, MDB_FIRST); rc == 0;
		     rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT))
			if (lmdb_queue_rec_peek(val.mv_data, val.mv_size, &n, NULL, NULL) == 0)
				sum += n;
		mdb_cursor_close(cur);
	}
	mdb_txn_abort(txn);
	__atomic_store_n(&st->queued_rcpts, sum, __ATOMIC_RELAXED);
	return rc == MDB_NOTFOUND || rc == 0 ? 0 : lmdb_mdb_error(rc, "count queue");
}

/* space_floor - the reserve's fixed part: one delivery batch's copied pages */
static uint64_t space_floor(uint64_t psize, uint64_t pages)
{
	uint64_t floor = RESERVE_FLOOR / psize, least = RESERVE_MIN / psize;

	if (floor > pages / 8)
		floor = pages / 8;
	return floor < least ? least : floor;
}

/* space_writes - pages the delivery writes of queued messages and recipients take */
static uint64_t space_writes(uint64_t psize, uint64_t queued, uint64_t rcpts)
{
	return (queued * STORE_RESERVE_PER_MSG + rcpts * STORE_RESERVE_PER_RCPT + psize - 1)
	    / psize;
}

/* lmdb_space_reserve - pages kept for the delivery writes of queued messages */
uint64_t lmdb_space_reserve(uint64_t psize, uint64_t pages, uint64_t queued, uint64_t rcpts)
{
	return space_floor(psize, pages) + space_writes(psize, queued, rcpts);
}

/* room_need - pages spooling m with its claims may take (records, overflow pages, slack) */
static uint64_t room_need(uint64_t psize, const struct store_msg *m)
{
	uint64_t bytes = lmdb_msg_rec_size(m) + lmdb_queue_rec_size(m) + 64
	    + (m->has_key ? (uint64_t) m->n_rcpts * ROOM_CLAIM : 0);

	return bytes / psize + 2;
}

/*
 * lmdb_space_room - may t spool m: 0, or STORE_ENOSPC if m with a claim
 * for each recipient (if it has a key) would leave fewer free pages than
 * the reserve; for a notice (m->notice), than the floor and its own
 * delivery writes. The transaction's earlier messages count.
 */
int lmdb_space_room(struct lmdb_txn *t, const struct store_msg *m)
{
	struct lmdb_store *st = t->st;
	uint64_t psize = 4096, map = 0, pages, last = 0, freel = 0, want;
	MDB_stat qs;
	int rc, err;

	if ((err = lmdb_space_geometry(st, &psize, &map, &last)) != 0)
		return err;
	pages = map / psize;
	if (t->room_pages == 0) {		/* the first message: what was queued before */
		if ((rc = mdb_stat(t->txn, st->queue, &qs)) != 0)
			return lmdb_mdb_error(rc, "stat queue");
		t->room_queued = qs.ms_entries;
		t->room_rcpts = __atomic_load_n(&st->queued_rcpts, __ATOMIC_RELAXED);
		t->room_pages = ROOM_TXN;
	}
	t->room_pages += room_need(psize, m);
	t->room_queued++;
	t->room_rcpts += m->n_rcpts;
	if (m->notice)
		want = t->room_pages + space_floor(psize, pages) + space_writes(psize, 1, m->n_rcpts);
	else
		want = t->room_pages + lmdb_space_reserve(psize, pages, t->room_queued, t->room_rcpts);
	if (last + want <= pages)
		return 0;			/* the common case: the tail is enough */
	if (!t->room_free_known) {
		if ((err = lmdb_space_freelist(st, &freel)) != 0)
			return err;
		t->room_free = (last < pages ? pages - last : 0) + freel;
		t->room_free_known = 1;
	}
	if (want <= t->room_free)
		return 0;
	__atomic_store_n(&st->grow_wanted, 1, __ATOMIC_RELAXED);
	return STORE_ENOSPC;
}
