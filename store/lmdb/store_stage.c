/*
 * NAME
 *	store_stage 3
 * SUMMARY
 *	staging B-trees: records written to a small B-tree, moved in bulk
 * SYNOPSIS
 *	#include "store_int.h"
 *
 *	int lmdb_stage_get(const struct lmdb_stage *sg, MDB_txn *txn, MDB_val *key,
 *			   MDB_val *val, MDB_dbi *dbi);
 *	int lmdb_stage_put(struct lmdb_txn *t, const struct lmdb_stage *sg, MDB_val *key,
 *			   MDB_val *val, unsigned flags, int *staged);
 *	int lmdb_stage_move(struct lmdb_txn *t, const struct lmdb_stage *sg);
 * DESCRIPTION
 *	Claims (cnew for claims, store_claim.c) and stories (hnew for hist,
 *	store_hist.c) are written to a small B-tree first, so that the
 *	commit that writes one copies a page or two of it instead of a page
 *	on every level of the big B-tree, where a record lands on a random
 *	leaf (issue 27). Once the small B-tree is STAGE_DEPTH levels deep,
 *	every record in it moves to the big one in the same transaction: the
 *	move pays for the big B-tree's levels once for a page of records.
 *
 *	lmdb_stage_get() reads the small B-tree first, then the big one; a
 *	record already in the big B-tree is rewritten there by
 *	lmdb_stage_put(), so each record is in one of the two.
 *
 *	lmdb_stage_move() asks sg->move() about each record before it moves:
 *	0 moves it (move() has written what goes with it, such as a story's
 *	expiry entry), STORE_EINVAL says it is corrupt. A corrupt record is
 *	deleted, not moved nor left: left, it would be read again at every
 *	move; moved, a story would have no expiry entry and stay for ever,
 *	with its claims. The move logs how many it deleted.
 * DIAGNOSTICS
 *	lmdb_stage_get(): an LMDB code (MDB_NOTFOUND for neither). The
 *	others: 0 or a STORE_E* code, for the caller to fail its
 *	transaction with.
 */
#include <string.h>

#include "../../util/buf.h"
#include "../../util/log.h"
#include "store_int.h"

#define STAGE_DEPTH	2	/* a small B-tree moves once it is this many levels deep */

/*
 * staged_copy - once sg's small B-tree is STAGE_DEPTH levels deep, a copy
 * of each of its records in b, one after the other: the sizes of its key
 * and value, then their bytes (the puts of the move shift pages under any
 * pointer into the map); none before
 */
static int staged_copy(struct lmdb_txn *t, const struct lmdb_stage *sg, struct buf *b)
{
	MDB_cursor *cur;
	MDB_stat sb;
	MDB_val key, val;
	int rc;

	if ((rc = mdb_stat(t->txn, sg->small, &sb)) != 0)
		return lmdb_mdb_error(rc, "stat staged");
	if (sb.ms_depth < STAGE_DEPTH)
		return 0;
	if ((rc = mdb_cursor_open(t->txn, sg->small, &cur)) != 0)
		return lmdb_mdb_error(rc, "cursor");
	for (rc = mdb_cursor_get(cur, &key, &val, MDB_FIRST); rc == 0;
	     rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
		size_t len[2] = { key.mv_size, val.mv_size };

		buf_append(b, len, sizeof(len));
		buf_append(b, key.mv_data, key.mv_size);
		buf_append(b, val.mv_data, val.mv_size);
	}
	mdb_cursor_close(cur);
	return rc == MDB_NOTFOUND ? 0 : lmdb_mdb_error(rc, "staged walk");
}

/* lmdb_stage_get - the record under key, in the small B-tree or else the big one; *dbi says which */
int lmdb_stage_get(const struct lmdb_stage *sg, MDB_txn *txn, MDB_val *key, MDB_val *val,
		   MDB_dbi *dbi)
{
	int rc = MDB_NOTFOUND;

	if (sg->has_small && (rc = mdb_get(txn, sg->small, key, val)) == 0 && dbi)
		*dbi = sg->small;
	if (rc == MDB_NOTFOUND && (rc = mdb_get(txn, sg->big, key, val)) == 0 && dbi)
		*dbi = sg->big;
	return rc;
}

/*
 * lmdb_stage_put - put a record: rewritten in the big B-tree if it is
 * there, else into the small one (*staged set: the caller moves it with
 * lmdb_stage_move() once its value is written, as after MDB_RESERVE)
 */
int lmdb_stage_put(struct lmdb_txn *t, const struct lmdb_stage *sg, MDB_val *key, MDB_val *val,
		   unsigned flags, int *staged)
{
	MDB_val old;
	MDB_dbi dbi = sg->big;
	int rc;

	*staged = 0;
	if (sg->has_small && (rc = mdb_get(t->txn, sg->big, key, &old)) != 0) {
		if (rc != MDB_NOTFOUND)
			return lmdb_mdb_error(rc, "get staged");
		dbi = sg->small;
		*staged = 1;
	}
	return lmdb_mdb_error(lmdb_put(t, dbi, key, val, flags), "put staged");
}

/* lmdb_stage_move - when the small B-tree has grown deep enough: its records move to the big one */
int lmdb_stage_move(struct lmdb_txn *t, const struct lmdb_stage *sg)
{
	struct buf mv = BUF_INIT;
	MDB_val key, val;
	size_t len[2], off, corrupt = 0;
	int err = staged_copy(t, sg, &mv);

	for (off = 0; err == 0 && off < mv.len; off += sizeof(len) + len[0] + len[1]) {
		memcpy(len, mv.data + off, sizeof(len));
		key = (MDB_val) { len[0], mv.data + off + sizeof(len) };
		val = (MDB_val) { len[1], mv.data + off + sizeof(len) + len[0] };
		if ((err = sg->move(t, &key, &val)) == 0)
			err = lmdb_mdb_error(lmdb_put(t, sg->big, &key, &val, 0), "put moved");
		else if (err == STORE_EINVAL) {
			corrupt++;
			err = 0;
		}
		if (err == 0)
			err = lmdb_mdb_error(lmdb_del(t, sg->small, &key, NULL), "delete staged");
	}
	buf_free(&mv);
	if (err == 0 && corrupt > 0)
		msg_warn("store: %zu corrupt %s record%s deleted from staging", corrupt, sg->what,
			 corrupt == 1 ? "" : "s");
	return err;
}
