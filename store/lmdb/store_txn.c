/*
 * NAME
 *	store_txn 3
 * SUMMARY
 *	LMDB write transactions
 * SYNOPSIS
 *	#include "store/store.h"
 * DESCRIPTION
 *	A write transaction wraps one LMDB write transaction. Its steps
 *	record their first failure with store_txn_fail() (store.c skips
 *	every later step), so a caller may run a batch and check once.
 *
 *	lmdb_txn_commit() aborts a failed transaction instead of
 *	committing it, so nothing of it is ever half-written; LMDB also
 *	frees a transaction whose commit fails (map full, disk full), and
 *	the next transaction starts from the last good state.
 *
 *	A commit is durable when it returns 0: through the journal
 *	(store_journal.c) when the store has one, else synced the way LMDB
 *	does it by default.
 *
 *	LMDB's writer lock belongs to the thread that took it: a write
 *	transaction must end on the thread that began it.
 *
 *	A transaction holds the store's gate from begin to its end, and is
 *	refused (STORE_EIO) while the store is broken by a failed sync
 *	(store_lmdb.c); the check is made again once LMDB's writer lock is held,
 *	since lmdb_upkeep() may break the store while it holds that lock.
 * DIAGNOSTICS
 *	0 or a STORE_E* code. A step after a failure returns the sticky code.
 */
#include <stdlib.h>

#include "../../util/buf.h"
#include "store_int.h"

/* lmdb_begin - start a write transaction; waits for the writer lock */
int lmdb_begin(struct lmdb_store *st, struct lmdb_txn **out)
{
	struct lmdb_txn *t;
	MDB_txn *txn;
	int err;

	*out = NULL;
	if ((err = lmdb_gate_enter(st)) != 0)
		return err;
	if ((err = lmdb_mdb_error(mdb_txn_begin(st->env, NULL, 0, &txn), "begin")) != 0) {
		lmdb_gate_leave(st);
		return err;
	}
	if (lmdb_broken(&st->base)) {
		mdb_txn_abort(txn);
		lmdb_gate_leave(st);
		return STORE_EIO;
	}
	t = xcalloc(1, sizeof(*t));
	t->base.ops = &lmdb_ops;
	t->st = st;
	t->txn = txn;
	*out = t;
	return 0;
}

/* lmdb_txn_begin - lmdb_begin() for the interface; one writer has no keys to lock */
int lmdb_txn_begin(struct store *base, const uint8_t (*keys)[STORE_HASH_LEN], size_t n,
		   struct store_txn **out)
{
	struct lmdb_txn *t;
	int err;

	(void) keys;
	(void) n;
	err = lmdb_begin((struct lmdb_store *) base, &t);
	*out = t ? &t->base : NULL;
	return err;
}

/* lmdb_txn_commit - make the transaction durable, or abort it if failed */
int lmdb_txn_commit(struct store_txn *base)
{
	struct lmdb_txn *t = (struct lmdb_txn *) base;
	struct lmdb_store *st = t->st;
	int err;

	if ((err = t->base.err) != 0)
		mdb_txn_abort(t->txn);
	else
		err = lmdb_mdb_error(journal_commit(t), "commit");
	if (err == 0 && t->rcpt_delta != 0)
		__atomic_add_fetch(&st->queued_rcpts, (uint64_t) t->rcpt_delta, __ATOMIC_RELAXED);
	buf_free(&t->redo);
	free(t);
	lmdb_gate_leave(st);
	return err;
}
