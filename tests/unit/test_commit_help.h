/*
 * test_commit_help - a group-commit submission for the tests that drive
 * queue/commit.c (test_commit and test_commit_hold on LMDB,
 * test_store_pg_commit on PostgreSQL); how many write transactions an
 * LMDB store has committed (those two, and test_story)
 */
#ifndef TESTS_UNIT_TEST_COMMIT_HELP_H
#define TESTS_UNIT_TEST_COMMIT_HELP_H

#include <stdlib.h>
#include <string.h>

#include "../../queue/commit.h"
#include "../../queue/keys.h"
#include "../../store/lmdb/store_int.h"
#include "../../util/buf.h"

/* lmdb_txns - an LMDB store's write transactions committed, ever: its last transaction id; 0 unread */
static inline uint64_t lmdb_txns(struct store *base)
{
	struct lmdb_store *st = (struct lmdb_store *) base;
	MDB_txn *txn;
	uint64_t id;

	if (lmdb_read_begin(st, &txn) != 0)
		return 0;
	id = mdb_txn_id(txn);
	lmdb_read_end(st, txn);
	return id;
}

/* req_make - a submission of one message to rcpts under key, answered through done */
static inline struct commit_req *req_make(const char *qid, const char *key, const char *body,
					  const char *const *rcpts, size_t n,
					  void (*done) (struct commit_req *))
{
	struct commit_req *r = xcalloc(1, sizeof(*r));
	size_t i;

	strcpy(r->msg.qid, qid);
	r->msg.from = xstrdup("s@example.org");
	r->msg.client = xstrdup("c [127.0.0.1]");
	r->msg.rcpts = xcalloc(n, sizeof(*r->msg.rcpts));
	r->msg.n_rcpts = n;
	r->hashes = xcalloc(n, sizeof(*r->hashes));
	r->claimed = xcalloc(n, 1);
	for (i = 0; i < n; i++) {
		r->msg.rcpts[i].addr = xstrdup(rcpts[i]);
		keys_claim_hash("", key, rcpts[i], r->hashes[i]);
	}
	r->msg.data = xstrdup(body);
	r->msg.data_len = strlen(body);
	hash_once(body, strlen(body), r->fingerprint);
	r->ttl = 3600LL * 1000000;
	r->done = done;
	return r;
}

/* req_free - the submission and what it owns */
static inline void req_free(struct commit_req *r)
{
	size_t i;

	for (i = 0; i < r->msg.n_rcpts; i++)
		free(r->msg.rcpts[i].addr);
	free(r->msg.rcpts);
	free(r->msg.from);
	free(r->msg.client);
	free(r->msg.data);
	free(r->hashes);
	free(r->claimed);
	free(r);
}

#endif
