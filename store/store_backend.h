/*
 * NAME
 *	store_backend 3h
 * SUMMARY
 *	what a store backend implements; included by backends only
 * DESCRIPTION
 *	The store interface (store.h) is a table of functions, one table
 *	per backend: LMDB (store/lmdb/, the embedded default) and
 *	PostgreSQL (store/pg/, shared by several nodes). A backend's
 *	handle and transaction begin with struct store and struct
 *	store_txn, so that store.c can find the table; everything after
 *	them is the backend's own.
 *
 *	Each entry has the meaning and the type (STORE_ENTRY) of the
 *	store.h function of the same name, less the "store_" prefix.
 *	What a backend can do is declared in caps (STORE_CAP_*), never
 *	guessed from its entries: the entries marked "shared" are called
 *	only with STORE_CAP_SHARED, and must be there then; those marked
 *	"own space" only with STORE_CAP_OWN_SPACE; claims_get without a
 *	transaction only with STORE_CAP_LOCAL_READS. No entry is optional
 *	otherwise. txn_commit ends every transaction: one whose sticky
 *	error is set is rolled back, which is how one is aborted. A
 *	transaction marked bare (store.c, a store full of its own space)
 *	takes its delivery updates without their messages' stories.
 *
 *	The backend is chosen in store_open.c alone, which calls its own
 *	open function (store_lmdb_open(), store_pg_open()); nothing else
 *	above the backends knows them.
 */
#ifndef STORE_STORE_BACKEND_H
#define STORE_STORE_BACKEND_H

#include "store.h"

/*
 * STORE_ENTRY - an entry's type: that of the store.h function of its
 * name, so that its parameters are written once, there; a backend
 * declares its functions with it too
 */
#define STORE_ENTRY(name)	__typeof__(store_##name)

struct store_ops {
	unsigned caps;			/* STORE_CAP_* */
	STORE_ENTRY(close) *close;

	/* health: what the store is fit for now, and its work between commits */
	STORE_ENTRY(health) *health;
	STORE_ENTRY(upkeep) *upkeep;	/* own space */

	/* claims and messages, written by a batch's transaction */
	STORE_ENTRY(txn_begin) *txn_begin;
	STORE_ENTRY(claims_get) *claims_get;
	STORE_ENTRY(txn_claim_put) *txn_claim_put;
	STORE_ENTRY(txn_replay) *txn_replay;	/* shared */
	STORE_ENTRY(txn_msg_put) *txn_msg_put;
	STORE_ENTRY(txn_msg_set_inflight) *txn_msg_set_inflight;
	STORE_ENTRY(txn_msg_update) *txn_msg_update;
	STORE_ENTRY(txn_commit) *txn_commit;

	/* the spool: a message, the operator's changes, the queue, the figures */
	STORE_ENTRY(msg_load) *msg_load;
	STORE_ENTRY(msg_drop) *msg_drop;
	STORE_ENTRY(msg_change) *msg_change;
	STORE_ENTRY(queue_walk) *queue_walk;
	STORE_ENTRY(stats) *stats;

	/* leases: the nodes that share the queue */
	STORE_ENTRY(queue_take) *queue_take;	/* shared */
	STORE_ENTRY(lease_renew) *lease_renew;	/* shared */
	STORE_ENTRY(lease_release) *lease_release;	/* shared */
	STORE_ENTRY(msg_revive) *msg_revive;	/* shared */

	/* stories: what became of a message, and of a key */
	STORE_ENTRY(story_get) *story_get;
	STORE_ENTRY(key_qids) *key_qids;
	STORE_ENTRY(key_forget) *key_forget;
	STORE_ENTRY(hist_count) *hist_count;
	STORE_ENTRY(hist_expire) *hist_expire;
};

/*
 * The product's rules, written once above the backends (store_rule.c):
 * store_claim_live() is 1 while a claim answers for its key (SPEC section
 * 4: until it expires, and after while its message is queued, which it
 * asks queued() only then), 0 if not, or queued()'s STORE_E* code;
 * store_msg_valid() is 1 if m can be spooled.
 */
int store_claim_live(const struct store_claim *c, int64_t now,
		     int (*queued) (void *arg, const char *qid), void *arg);
int store_msg_valid(const struct store_msg *m);
int store_update_valid(const struct store_msg *m);	/* a delivery update: QID, recipients' states */
int store_qid_ok(const char *qid);	/* 1 to STORE_QID_SIZE - 1 bytes */
/* store_story_ttl - how long m's story is kept once m left the spool: m->ttl, else STORE_STORY_TTL */
#define STORE_STORY_TTL	(24 * 3600 * 1000000LL)
int64_t store_story_ttl(const struct store_msg *m);
/* store_story_expires - when a story expires whose message left the spool at finished */
int64_t store_story_expires(int64_t finished, int64_t ttl);

/* the first member of every backend's handle and transaction */
struct store {
	const struct store_ops *ops;
	int node_id;		/* STORE_CAP_SHARED: store_node_id(), given at open; -1 none */
};

struct store_txn {
	const struct store_ops *ops;
	int err;			/* sticky: the first STORE_E* of a step, or 0 */
	unsigned steps;			/* write steps asked of it so far */
	int bare;			/* own space: updates without their stories */
};

/* store_txn_fail - a step of t failed with err: record it unless one did before; the sticky code */
int store_txn_fail(struct store_txn *t, int err);

#endif
