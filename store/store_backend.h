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
 *	Each entry has the meaning of the store.h function of the same
 *	name, less the "store_" prefix. What a backend can do is declared
 *	in caps (STORE_CAP_*), never guessed from its entries: the entries
 *	marked "shared" are called only with STORE_CAP_SHARED, and must be
 *	there then; those marked "own space" only with STORE_CAP_OWN_SPACE,
 *	"local reads" only with STORE_CAP_LOCAL_READS. No entry is
 *	optional otherwise. txn_commit ends every transaction: one whose
 *	sticky error is set is rolled back (store_txn_abort() is that). A
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

struct store_ops {
	const char *name;		/* "lmdb", "postgresql" */
	unsigned caps;			/* STORE_CAP_* */
	void (*close) (struct store *st);

	/* health: what the store is fit for now, and its work between commits */
	unsigned (*health) (struct store *st);
	int (*upkeep) (struct store *st);	/* own space */

	/* claims and messages, written by a batch's transaction */
	int (*claims_get) (struct store *st, const uint8_t keyhash[STORE_HASH_LEN],
			   const uint8_t (*hashes)[STORE_HASH_LEN], size_t n, int64_t now,
			   struct store_claim *claims, int *found);	/* local reads */
	int (*txn_begin) (struct store *st, const uint8_t (*keys)[STORE_HASH_LEN], size_t n,
			  struct store_txn **out);
	int (*txn_claim_get) (struct store_txn *t, const uint8_t keyhash[STORE_HASH_LEN],
			      const uint8_t hash[STORE_HASH_LEN], int64_t now,
			      struct store_claim *c);
	void (*txn_claim_put) (struct store_txn *t, const uint8_t keyhash[STORE_HASH_LEN],
			       const uint8_t hash[STORE_HASH_LEN], const struct store_claim *c);
	void (*txn_replay) (struct store_txn *t, const uint8_t keyhash[STORE_HASH_LEN],
			    const uint8_t hash[STORE_HASH_LEN]);	/* shared */
	void (*txn_msg_put) (struct store_txn *t, const struct store_msg *m);
	void (*txn_msg_set_inflight) (struct store_txn *t, const char *qid, int on);
	void (*txn_msg_update) (struct store_txn *t, const struct store_msg *m);
	int (*txn_commit) (struct store_txn *t);

	/* the spool: a message, the operator's changes, the queue, the figures */
	int (*msg_load) (struct store *st, const char *qid, struct store_msg *m);
	int (*msg_drop) (struct store *st, const char *qid);
	int (*msg_change) (struct store *st, const char *qid, const struct store_change *c);
	int (*queue_walk) (struct store *st, unsigned how,
			   int (*cb) (void *arg, const struct store_msg *m), void *arg);
	int (*stats) (struct store *st, struct store_stats *s, unsigned what);

	/* leases: the nodes that share the queue */
	int (*queue_take) (struct store *st, int64_t now, size_t max, const char *const *skip,
			   size_t n_skip, int (*cb) (void *arg, const struct store_msg *m),
			   void *arg);	/* shared */
	int (*lease_renew) (struct store *st, int64_t now);	/* shared */
	void (*lease_release) (struct store *st, const char *qid, int64_t lease);	/* shared */
	int (*msg_revive) (struct store *st, const struct store_msg *m);	/* shared */

	/* stories: what became of a message, and of a key */
	int (*story_get) (struct store *st, const char *qid, struct store_story *s);
	int (*key_qids) (struct store *st, const uint8_t keyhash[STORE_HASH_LEN],
			 char (**qids)[STORE_QID_SIZE], size_t *n);
	int (*key_forget) (struct store *st, const uint8_t keyhash[STORE_HASH_LEN],
			   const char *user, int64_t now, struct store_forget *out);
	int (*hist_count) (struct store *st, const struct store_count *c, size_t n);
	int (*hist_expire) (struct store *st, int64_t now, size_t max);
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
