/*
 * test_commit_fx - the fixture of the group-commit writer's tests
 * (test_commit, test_commit_hold): a fresh LMDB store and its writer,
 * what the writer hands to delivery (committed()), submissions answered
 * through done(), the waits on both, and the inflight mark as delivery
 * writes it through the writer.
 */
#ifndef TESTS_UNIT_TEST_COMMIT_FX_H
#define TESTS_UNIT_TEST_COMMIT_FX_H

#include <ftw.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "../../queue/commit.c"	/* for struct commit: is a mark queued at the writer? */
#include "../../store/lmdb/store_lmdb.h"
#include "../../store/store_backend.h"
#include "../../util/buf.h"
#include "../../util/clock.h"
#include "test_commit_help.h"

/* mark_step - commit_run() step: the inflight mark, as delivery sets it */
static inline void mark_step(struct store_txn *t, void *qid)
{
	store_txn_msg_set_inflight(t, qid, 1);
}

/* commit_mark_inflight - durably set a message's inflight mark in the next group commit */
static inline int commit_mark_inflight(struct commit *cm, const char *qid)
{
	return commit_run(cm, mark_step, (void *) qid);
}

struct fx {
	char dir[64];
	struct store *st;
	struct commit *cm;
	int n_committed;	/* committed() calls, under the commit's own ordering */
	char last_committed[STORE_QID_SIZE];	/* the QID of the last one */
	/* writer thread's, read once n_committed says they are written */
	char log_qid[16][STORE_QID_SIZE];	/* committed() QIDs in order, the first 16 */
	uint64_t log_txn[16];			/* ... and the store's txns count then (0: unknown) */
	struct commit_req **late;	/* submitted at the first committed() call */
	size_t n_late;
	void (*during) (struct fx *f);	/* run once, inside the next committed() call */
	void *during_arg;
};

/* rm_one - nftw() step: remove one file or (emptied) directory */
static inline int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void) sb;
	(void) flag;
	(void) ftw;
	return remove(p);
}

/* committed - the writer hands a committed message to delivery: recorded */
static inline void committed(void *arg, const char *qid)
{
	struct fx *f = arg;
	size_t i;
	int n = f->n_committed;

	/* a copy: the request may be the event loop's, and freed, by now */
	snprintf(f->last_committed, sizeof(f->last_committed), "%s", qid);
	/* between the batch's commit and the next: its transaction, as counted */
	if (n < 16) {
		snprintf(f->log_qid[n], sizeof(f->log_qid[n]), "%s", qid);
		f->log_txn[n] = lmdb_txns(f->st);
	}
	for (i = 0; i < f->n_late; i++)	/* after this batch was taken, before the next */
		commit_submit(f->cm, f->late[i]);
	f->n_late = 0;
	if (f->during) {
		void (*during) (struct fx *) = f->during;

		f->during = NULL;
		during(f);
	}
	__atomic_add_fetch(&f->n_committed, 1, __ATOMIC_SEQ_CST);
}

/* setup - a fresh store of 64 MB and its writer */
static inline int setup(void **state)
{
	struct fx *f = xcalloc(1, sizeof(*f));
	char err[256], path[96];

	strcpy(f->dir, "/tmp/test_commit.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(path, sizeof(path), "%s/store", f->dir);
	if (store_lmdb_open(&f->st, path, 64u << 20, err, sizeof(err)) != 0)
		fail_msg("store_open: %s", err);
	f->cm = commit_start(f->st, committed, f);
	*state = f;
	return 0;
}

/* teardown - the writer stopped, the store closed and removed */
static inline int teardown(void **state)
{
	struct fx *f = *state;

	commit_stop(f->cm);
	store_close(f->st);
	nftw(f->dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
	free(f);
	return 0;
}

static int n_done;			/* submissions answered (reaped) so far */

/* done - a submission's answer, as the event loop reaps it: counted */
static inline void done(struct commit_req *req)
{
	(void) req;
	n_done++;
}

/* req_new - a submission of one message to rcpts under key, answered through done() */
static inline struct commit_req *req_new(const char *qid, const char *key, const char *body,
					 const char *const *rcpts, size_t n)
{
	return req_make(qid, key, body, rcpts, n, done);
}

/* wait_done - reap until n requests have been answered */
static inline void wait_done(struct fx *f, int n)
{
	int i;

	for (i = 0; i < 50000 && n_done < n; i++) {
		usleep(100);
		commit_reap(f->cm);
	}
	if (n_done < n)
		fail_msg("only %d of %d requests answered", n_done, n);
}

/* wait_committed - until n messages have been handed to delivery (a second at most) */
static inline void wait_committed(struct fx *f, int n)
{
	int i;

	for (i = 0; i < 1000 && __atomic_load_n(&f->n_committed, __ATOMIC_SEQ_CST) < n; i++)
		usleep(1000);	/* delivery hears of it after the event loop */
}

/* now_retry - commit_now(r), tried again for a second while the writer fills the reserve */
static inline void now_retry(struct fx *f, struct commit_req *r)
{
	int i;

	for (i = 0; i < 1000 && !commit_now(f->cm, r); i++)
		usleep(1000);
}

#endif
