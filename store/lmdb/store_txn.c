/*
 * NAME
 *	store_txn 3
 * SUMMARY
 *	write transactions with a sticky error
 * SYNOPSIS
 *	#include "store/store.h"
 * DESCRIPTION
 *	A write transaction wraps one LMDB write transaction. Steps record
 *	their first failure in t->err and every later step becomes a no-op,
 *	so a caller may run a whole batch and check once, at commit.
 *
 *	store_txn_commit() aborts a failed transaction instead of
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
 *	(store.c); the check is made again once LMDB's writer lock is held,
 *	since store_grow() may break the store while it holds that lock.
 * DIAGNOSTICS
 *	0 or a STORE_E* code. A step after a failure returns the sticky code.
 */
#include <stdlib.h>

#include "../../util/buf.h"
#include "../../util/log.h"
#include "store_int.h"

/* store_txn_fail - record the first failure; return the sticky code */
int store_txn_fail(struct store_txn *t, int err)
{
	if (t->err == 0)
		t->err = err;
	return t->err;
}

/* store_txn_begin - start a write transaction; waits for the writer lock */
int store_txn_begin(struct store *st, struct store_txn **out)
{
	struct store_txn *t;
	MDB_txn *txn;
	int err;

	*out = NULL;
	if ((err = store_gate_enter(st)) != 0)
		return err;
	if ((err = store_mdb_error(mdb_txn_begin(st->env, NULL, 0, &txn), "begin")) != 0) {
		store_gate_leave(st);
		return err;
	}
	if (store_broken(st)) {
		mdb_txn_abort(txn);
		store_gate_leave(st);
		return STORE_EIO;
	}
	t = xcalloc(1, sizeof(*t));
	t->st = st;
	t->txn = txn;
	*out = t;
	return 0;
}

/* store_txn_error - the sticky error, 0 if every step so far succeeded */
int store_txn_error(const struct store_txn *t)
{
	return t->err;
}

/* store_txn_commit - make the transaction durable, or abort it if failed */
int store_txn_commit(struct store_txn *t)
{
	struct store *st;
	int err;

	if (t == NULL)
		return STORE_EINVAL;
	st = t->st;
	if ((err = t->err) != 0)
		mdb_txn_abort(t->txn);
	else
		err = store_mdb_error(journal_commit(t), "commit");
	buf_free(&t->redo);
	free(t);
	store_gate_leave(st);
	return err;
}

/* store_txn_abort - forget the transaction */
void store_txn_abort(struct store_txn *t)
{
	if (t == NULL)
		return;
	mdb_txn_abort(t->txn);
	buf_free(&t->redo);
	store_gate_leave(t->st);
	free(t);
}
