/*
 * test_commit - the group-commit writer (queue/commit.c) on a real store:
 * racers on one key inside one batch end with one queued message and one
 * QID; inflight marks ride in the group commit and fail alone, and while
 * submissions come in they wait for one to share its transaction (a
 * window from each write's arrival, and never while a lone submission
 * commits on the caller's thread); a lone
 * submission may be committed on the caller's thread (commit_now), a
 * failed one handing its delivery writes back to the writer; a
 * transaction takes at most COMMIT_BATCH_BYTES of message data (one
 * submission at least), the rest going first in the next.
 */
#include <ftw.h>
#include <pthread.h>
#include <semaphore.h>
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

/* commit_set_hold - the hold's windows, wide enough for a loaded machine */
static void commit_set_hold(struct commit *cm, int64_t hold_us, int64_t busy_us)
{
	pthread_mutex_lock(&cm->lock);
	cm->hold_us = hold_us;
	cm->busy_us = busy_us;
	pthread_mutex_unlock(&cm->lock);
}

/* mark_step - commit_run() step: the inflight mark, as delivery sets it */
static void mark_step(struct store_txn *t, void *qid)
{
	store_txn_msg_set_inflight(t, qid, 1);
}

/* commit_mark_inflight - durably set a message's inflight mark in the next group commit */
static int commit_mark_inflight(struct commit *cm, const char *qid)
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

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void) sb;
	(void) flag;
	(void) ftw;
	return remove(p);
}

static void committed(void *arg, const char *qid)
{
	struct fx *f = arg;
	struct store_stats s;
	size_t i;
	int n = f->n_committed;

	/* a copy: the request may be the event loop's, and freed, by now */
	snprintf(f->last_committed, sizeof(f->last_committed), "%s", qid);
	/* between the batch's commit and the next: its transaction, as counted */
	if (n < 16) {
		snprintf(f->log_qid[n], sizeof(f->log_qid[n]), "%s", qid);
		f->log_txn[n] = store_stats(f->st, &s, 0) == 0 ? s.txns : 0;
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

static int setup(void **state)
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

static int teardown(void **state)
{
	struct fx *f = *state;

	commit_stop(f->cm);
	store_close(f->st);
	nftw(f->dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
	free(f);
	return 0;
}

static int n_done;

static void done(struct commit_req *req)
{
	(void) req;
	n_done++;
}

/* req_new - a submission of one message to rcpts under key, answered through done() */
static struct commit_req *req_new(const char *qid, const char *key, const char *body,
				  const char *const *rcpts, size_t n)
{
	return req_make(qid, key, body, rcpts, n, done);
}

/* wait_done - reap until n requests have been answered */
static void wait_done(struct fx *f, int n)
{
	int i;

	for (i = 0; i < 50000 && n_done < n; i++) {
		usleep(100);
		commit_reap(f->cm);
	}
	if (n_done < n)
		fail_msg("only %d of %d requests answered", n_done, n);
}

/* racers on one key submitted together: one queued, the rest duplicates of it */
static void test_race_in_batch(void **state)
{
	static const char *const rc[] = { "a@example.com", "b@example.com" };
	struct fx *f = *state;
	struct commit_req *r[8];
	char qid[16];
	int i, queued = 0, dups = 0;
	const char *winner = NULL;

	n_done = 0;
	for (i = 0; i < 8; i++) {
		snprintf(qid, sizeof(qid), "RACE%08d", i);
		r[i] = req_new(qid, "k1", "body\r\n", rc, 2);
	}
	for (i = 0; i < 8; i++)
		commit_submit(f->cm, r[i]);
	wait_done(f, 8);
	for (i = 0; i < 8; i++) {
		if (r[i]->outcome == COMMIT_QUEUED) {
			queued++;
			winner = r[i]->msg.qid;
		}
	}
	assert_int_equal(queued, 1);
	for (i = 0; i < 8; i++) {
		if (r[i]->outcome != COMMIT_DUPLICATE)
			continue;
		dups++;
		if (strcmp(r[i]->orig_qid, winner) != 0)
			fail_msg("racer %d: got orig %s, want %s", i, r[i]->orig_qid, winner);
	}
	assert_int_equal(dups, 7);
	for (i = 0; i < 1000 && __atomic_load_n(&f->n_committed, __ATOMIC_SEQ_CST) < 1; i++)
		usleep(1000);		/* delivery hears of it after the event loop */
	assert_int_equal(f->n_committed, 1);
	if (strcmp(f->last_committed, winner) != 0)
		fail_msg("handed to delivery: got %s, want %s", f->last_committed, winner);
	for (i = 0; i < 8; i++)
		req_free(r[i]);
}

/* partial and mismatch against what the store already holds */
static void test_partial_and_mismatch(void **state)
{
	static const char *const ab[] = { "a@example.com", "b@example.com" };
	static const char *const abc[] = { "a@example.com", "b@example.com", "c@example.com" };
	struct fx *f = *state;
	struct commit_req *first, *partial, *mismatch;

	n_done = 0;
	first = req_new("PART00000001", "k2", "body\r\n", ab, 2);
	commit_submit(f->cm, first);
	wait_done(f, 1);
	assert_int_equal(first->outcome, COMMIT_QUEUED);

	partial = req_new("PART00000002", "k2", "body\r\n", abc, 3);
	commit_submit(f->cm, partial);
	wait_done(f, 2);
	assert_int_equal(partial->outcome, COMMIT_PARTIAL);
	assert_int_equal(partial->claimed[0], 1);
	assert_int_equal(partial->claimed[2], 0);

	mismatch = req_new("PART00000003", "k2", "other body\r\n", ab, 2);
	commit_submit(f->cm, mismatch);
	wait_done(f, 3);
	assert_int_equal(mismatch->outcome, COMMIT_MISMATCH);
	assert_string_equal(mismatch->orig_qid, "PART00000001");
	req_free(first);
	req_free(partial);
	req_free(mismatch);
}

/* a shared store that records the claims a batch answers with (store_txn_replay) */
static struct store_ops replay_ops;
static const struct store_ops *replay_real;
static uint8_t replayed[4][STORE_HASH_LEN];
static int n_replayed;			/* writer thread's; read once its request is answered */

static int replay_begin(struct store *st, const uint8_t (*keys)[STORE_HASH_LEN], size_t n,
			struct store_txn **out)
{
	int err = replay_real->txn_begin(st, keys, n, out);

	if (err == 0)
		(*out)->ops = &replay_ops;
	return err;
}

static void replay_rec(struct store_txn *t, const uint8_t keyhash[STORE_HASH_LEN],
		       const uint8_t hash[STORE_HASH_LEN])
{
	(void) t;
	(void) keyhash;
	if (n_replayed < 4)
		memcpy(replayed[n_replayed], hash, STORE_HASH_LEN);
	n_replayed++;
}

/* replays_of - submit r alone, decided as outcome; it must replay want of its claims */
static void replays_of(struct fx *f, struct commit_req *r, int outcome, int want)
{
	int i, j, answered = n_done + 1;

	n_replayed = 0;
	commit_submit(f->cm, r);
	wait_done(f, answered);
	assert_int_equal(r->outcome, outcome);
	for (i = 0; i < n_replayed && i < 4; i++) {	/* each a claim answered with its QID */
		for (j = 0; j < (int) r->msg.n_rcpts; j++)
			if (memcmp(replayed[i], r->hashes[j], STORE_HASH_LEN) == 0)
				break;
		if (j == (int) r->msg.n_rcpts || !r->claimed[j])
			fail_msg("%s: replayed a claim it was not answered with", r->msg.qid);
	}
	if (n_replayed != want)
		fail_msg("%s: %d claims replayed, want %d", r->msg.qid, n_replayed, want);
}

/*
 * A shared store is told which found claims a batch answers with
 * (review of 0099f5d, MEDIUM 2): a duplicate's and the replayed part of
 * a partial, never a claim a mismatch refused or a new QID replaces
 * (another node's 451 message would be delivered though no submission
 * of it was answered 250).
 */
static void test_replays_told(void **state)
{
	static const char *const ab[] = { "a@example.com", "b@example.com" };
	static const char *const abc[] = { "a@example.com", "b@example.com", "c@example.com" };
	struct fx *f = *state;
	struct commit_req *r[6];
	int i;

	replay_real = f->st->ops;
	replay_ops = *replay_real;
	replay_ops.caps |= STORE_CAP_SHARED;
	replay_ops.txn_begin = replay_begin;
	replay_ops.txn_replay = replay_rec;
	f->st->ops = &replay_ops;
	n_done = 0;
	/* a new key; a duplicate; a partial (its replayed part); a mismatch refused; a new
	 * QID in shadow mode; a new QID for a mismatch accepted */
	r[0] = req_new("PREP00000001", "k9", "body\r\n", ab, 2);
	r[1] = req_new("PREP00000002", "k9", "body\r\n", ab, 2);
	r[2] = req_new("PREP00000003", "k9", "body\r\n", abc, 3);
	r[3] = req_new("PREP00000004", "k9", "other body\r\n", ab, 2);
	r[4] = req_new("PREP00000005", "k9", "other body\r\n", ab, 2);
	r[4]->shadow = 1;
	r[5] = req_new("PREP00000006", "k9", "third body\r\n", ab, 2);
	r[5]->mismatch_accept = 1;
	replays_of(f, r[0], COMMIT_QUEUED, 0);
	replays_of(f, r[1], COMMIT_DUPLICATE, 2);
	replays_of(f, r[2], COMMIT_PARTIAL, 2);
	replays_of(f, r[3], COMMIT_MISMATCH, 0);
	replays_of(f, r[4], COMMIT_QUEUED, 0);
	replays_of(f, r[5], COMMIT_QUEUED, 0);
	f->st->ops = replay_real;
	for (i = 0; i < 6; i++)
		req_free(r[i]);
}

/* inflight marks share the group commit; a mark on no message fails alone */
static void test_marks(void **state)
{
	static const char *const a[] = { "a@example.com" };
	struct fx *f = *state;
	struct commit_req *r = req_new("MARK00000001", "k3", "x\r\n", a, 1);
	struct store_msg m;

	n_done = 0;
	commit_submit(f->cm, r);
	wait_done(f, 1);
	assert_int_equal(commit_mark_inflight(f->cm, "MARK00000001"), 0);
	assert_int_equal(store_msg_load(f->st, "MARK00000001", &m), 0);
	assert_int_equal(m.inflight, 1);
	store_msg_free(&m);
	assert_int_equal(commit_mark_inflight(f->cm, "NOSUCH000001"), STORE_ENOTFOUND);
	req_free(r);
}

/* update_fn - commit_run's work: a delivery batch's outcomes written in the group commit */
static void update_fn(struct store_txn *t, void *arg)
{
	store_txn_msg_update(t, arg);
}

static void test_run_outcomes(void **state)
{
	static const char *const a[] = { "a@example.com" };
	struct fx *f = *state;
	struct commit_req *r = req_new("RUN000000001", "k4", "x\r\n", a, 1);
	struct store_msg m;

	n_done = 0;
	commit_submit(f->cm, r);
	wait_done(f, 1);
	assert_int_equal(store_msg_load(f->st, "RUN000000001", &m), 0);
	m.rcpts[0].state = STORE_RCPT_SENT;
	assert_int_equal(commit_run(f->cm, update_fn, &m), 0);
	store_msg_free(&m);
	assert_int_equal(store_msg_load(f->st, "RUN000000001", &m), STORE_ENOTFOUND);

	/* an op that fails fails alone, with the store's code */
	assert_int_equal(store_msg_load(f->st, "MARK00000001", &m), STORE_ENOTFOUND);
	strcpy(r->msg.qid, "RUN000000002");	/* never spooled */
	r->msg.rcpts[0].state = STORE_RCPT_SENT;
	assert_int_equal(commit_run(f->cm, update_fn, &r->msg), STORE_ENOTFOUND);
	req_free(r);
}

/* commit_now on an idle writer: decided on this thread, handed to delivery, no done callback */
static void test_commit_now(void **state)
{
	static const char *const a[] = { "a@example.com" };
	struct fx *f = *state;
	struct commit_req *r = req_new("NOW000000001", "k7", "x\r\n", a, 1);
	struct commit_req *dup = req_new("NOW000000002", "k7", "x\r\n", a, 1);
	struct store_msg m;
	int i;

	n_done = 0;
	for (i = 0; i < 1000 && !commit_now(f->cm, r); i++)
		usleep(1000);		/* the writer may still be filling the reserve */
	assert_int_equal(r->outcome, COMMIT_QUEUED);
	assert_int_equal(f->n_committed, 1);
	assert_string_equal(f->last_committed, "NOW000000001");
	assert_int_equal(store_msg_load(f->st, "NOW000000001", &m), 0);
	store_msg_free(&m);
	for (i = 0; i < 1000 && !commit_now(f->cm, dup); i++)
		usleep(1000);
	assert_int_equal(dup->outcome, COMMIT_DUPLICATE);
	assert_string_equal(dup->orig_qid, "NOW000000001");
	assert_int_equal(f->n_committed, 1);	/* a duplicate is not delivered */
	commit_reap(f->cm);
	assert_int_equal(n_done, 0);		/* answered by the caller, not the done list */
	req_free(r);
	req_free(dup);
}

struct mark_arg {
	struct commit *cm;
	const char *qid;
	sem_t go;		/* posted: mark now */
	int64_t at;		/* atomic: clock_mono_us() as the mark was handed over */
	int err;
};

static void *mark_thread(void *arg)
{
	struct mark_arg *a = arg;

	sem_wait(&a->go);
	__atomic_store_n(&a->at, clock_mono_us(), __ATOMIC_SEQ_CST);
	a->err = commit_mark_inflight(a->cm, a->qid);
	return NULL;
}

/* mark_start - a thread that marks qid once its go is posted */
static void mark_start(struct mark_arg *ma, pthread_t *th, struct commit *cm, const char *qid)
{
	memset(ma, 0, sizeof(*ma));
	ma->cm = cm;
	ma->qid = qid;
	ma->err = -1;
	assert_int_equal(sem_init(&ma->go, 0, 0), 0);
	assert_int_equal(pthread_create(th, NULL, mark_thread, ma), 0);
}

/* mark_join - the mark thread ended, its mark durable */
static void mark_join(struct mark_arg *ma, pthread_t th)
{
	pthread_join(th, NULL);
	sem_destroy(&ma->go);
	assert_int_equal(ma->err, 0);
}

/* now_only - commit_now() of a new submission, as the writer allows it; its QID spooled */
static void now_only(struct fx *f, const char *qid, const char *key)
{
	static const char *const a[] = { "a@example.com" };
	struct commit_req *r = req_new(qid, key, "x\r\n", a, 1);
	int i;

	for (i = 0; i < 1000 && !commit_now(f->cm, r); i++)
		usleep(1000);		/* the writer may still be filling the reserve */
	assert_int_equal(r->outcome, COMMIT_QUEUED);
	req_free(r);
}

/* now_req - now_only(), then the reap the event loop makes once the reply is out */
static void now_req(struct fx *f, const char *qid, const char *key)
{
	now_only(f, qid, key);
	commit_reap(f->cm);
}

/* mark_back - the mark thread's result: -1 while it still waits */
static int mark_back(struct mark_arg *ma)
{
	return __atomic_load_n(&ma->err, __ATOMIC_SEQ_CST);
}

/* mark_queued - wait until a mark is queued at the writer (cm->ops), 10 s at most */
static void mark_queued(struct commit *cm)
{
	int64_t deadline = clock_mono_us() + 10 * 1000000;
	int queued = 0;

	while (!queued && clock_mono_us() < deadline) {
		pthread_mutex_lock(&cm->lock);
		queued = cm->ops != NULL;
		pthread_mutex_unlock(&cm->lock);
		if (!queued)
			usleep(1000);
	}
	if (!queued)
		fail_msg("the mark never reached the writer");
}

/* mark_held - start a mark and let it reach the writer's hold */
static void mark_held(struct mark_arg *ma, pthread_t *th, struct commit *cm, const char *qid)
{
	mark_start(ma, th, cm, qid);
	sem_post(&ma->go);
	mark_queued(cm);
}

/*
 * Delivery writes that ride in a commit_now() are announced after it
 * returns, by the caller's next commit_reap() (the event loop's, once
 * the reply is out), not before the reply; with no reap, by
 * commit_told_flush() once the event loop has stopped, and not before.
 */
static void test_told_after_reply(void **state)
{
	struct fx *f = *state;
	struct mark_arg ma;
	pthread_t th;

	commit_set_hold(f->cm, 10 * 1000000, 60 * 1000000);
	now_req(f, "TOLD00000000", "kd");
	mark_held(&ma, &th, f->cm, "TOLD00000000");
	now_only(f, "TOLD00000001", "kd1");	/* takes the mark */
	usleep(50000);
	assert_int_equal(mark_back(&ma), -1);	/* durable, not yet told */
	commit_reap(f->cm);
	mark_join(&ma, th);

	commit_set_hold(f->cm, 1000000, 60 * 1000000);
	mark_held(&ma, &th, f->cm, "TOLD00000000");
	now_only(f, "TOLD00000002", "kd2");
	usleep(1200000);			/* past the hold's window */
	assert_int_equal(mark_back(&ma), -1);	/* no reap: still untold */
	commit_told_flush(f->cm);		/* the event loop has stopped */
	mark_join(&ma, th);
	commit_reap(f->cm);
}

/*
 * A client that pipelines submissions gets one commit_now() after the
 * other before the event loop reaps: the writes that rode in one are
 * announced by the next, not held for the whole read
 */
static void test_told_by_next_now(void **state)
{
	struct fx *f = *state;
	struct mark_arg ma;
	pthread_t th;
	int i;

	commit_set_hold(f->cm, 10 * 1000000, 60 * 1000000);
	now_req(f, "NEXT00000000", "kn");
	mark_held(&ma, &th, f->cm, "NEXT00000000");
	now_only(f, "NEXT00000001", "kn1");	/* takes the mark */
	usleep(50000);
	assert_int_equal(mark_back(&ma), -1);	/* durable, not yet told */
	now_only(f, "NEXT00000002", "kn2");	/* the next of the pipeline, no reap between */
	for (i = 0; i < 2000 && mark_back(&ma) == -1; i++)
		usleep(1000);
	assert_int_equal(mark_back(&ma), 0);	/* told by the next commit_now() */
	mark_join(&ma, th);
	commit_reap(f->cm);
}

/* txns - the store's transactions so far */
static uint64_t txns(struct fx *f)
{
	struct store_stats s;

	assert_int_equal(store_stats(f->st, &s, 0), 0);
	return s.txns;
}

#define HOLD_US		(2 * 1000000)	/* test_hold_from_each_write's window */

/*
 * A commit_now() that takes the held writes ends their hold, and a write
 * that comes after it is held its own whole window: the writer does not
 * wake at the first write's deadline and commit the later one alone just
 * before the next submission (the one-session run's extra fsyncs,
 * BENCHMARKS.md). Window 2 s: a mark at 0, taken by an acceptance at
 * 0.1 s, a second mark at 0.5 s, the next acceptance at 2.25 s, past the
 * first mark's window and inside the second's. A run that a loaded
 * machine stretched out of those bounds is tried again: the first mark
 * not yet at the writer when the first acceptance came (it then went
 * alone, at the end of its window), or the second mark at the writer
 * too late for the window's end to lie between the two acceptances.
 */
static void test_hold_from_each_write(void **state)
{
	struct fx *f = *state;
	struct mark_arg m1, m2;
	pthread_t t1, t2;
	int64_t now_at;
	uint64_t before;
	char qid[STORE_QID_SIZE], key[16];
	int try, decided = 0, shared = 0;

	commit_set_hold(f->cm, HOLD_US, 60 * 1000000);
	now_req(f, "EACH00000000", "ke");
	for (try = 0; try < 3 && !decided; try++) {
		mark_start(&m1, &t1, f->cm, "EACH00000000");
		before = txns(f);
		sem_post(&m1.go);
		usleep(100000);
		snprintf(qid, sizeof(qid), "EACH0000010%d", try);
		snprintf(key, sizeof(key), "ke1-%d", try);
		now_req(f, qid, key);	/* takes the first mark */
		mark_join(&m1, t1);
		if (clock_mono_us() > m1.at + HOLD_US / 2 || txns(f) != before + 1)
			continue;	/* it came after that acceptance, and went alone */
		usleep(400000);
		mark_start(&m2, &t2, f->cm, "EACH00000000");
		before = txns(f);
		sem_post(&m2.go);
		mark_queued(f->cm);	/* at the writer, held */
		while (clock_mono_us() < m1.at + HOLD_US + 250000)
			usleep(10000);
		now_at = clock_mono_us();
		snprintf(qid, sizeof(qid), "EACH0000020%d", try);
		snprintf(key, sizeof(key), "ke2-%d", try);
		now_req(f, qid, key);
		mark_join(&m2, t2);
		decided = now_at - m2.at < HOLD_US - 50000;
		shared = txns(f) == before + 1;
	}
	if (!decided || !shared)
		fail_msg("decided %d shared %d", decided, shared);
}

/* a store whose next commits fail (STORE_EAGAIN, as PostgreSQL's away), each recorded */
static struct store_ops flaky_ops;
static const struct store_ops *real_ops;
static int flaky_fail;			/* atomic: commits still to fail */
static struct {
	pthread_t thread;
	int err;
} flaky_log[16];
static int flaky_n;			/* atomic */

static int flaky_begin(struct store *st, const uint8_t (*keys)[STORE_HASH_LEN], size_t n,
		       struct store_txn **out)
{
	int err = real_ops->txn_begin(st, keys, n, out);

	if (err == 0)
		(*out)->ops = &flaky_ops;
	return err;
}

static int flaky_commit(struct store_txn *t)
{
	int i, err;

	if (__atomic_load_n(&flaky_fail, __ATOMIC_SEQ_CST) > 0) {
		__atomic_sub_fetch(&flaky_fail, 1, __ATOMIC_SEQ_CST);
		store_txn_fail(t, STORE_EAGAIN);
	}
	err = real_ops->txn_commit(t);
	if ((i = __atomic_fetch_add(&flaky_n, 1, __ATOMIC_SEQ_CST)) < 16) {
		flaky_log[i].thread = pthread_self();
		flaky_log[i].err = err;
	}
	return err;
}

/*
 * The delivery writes that rode in a failed commit_now() go back to the
 * writer, which commits them: the event loop does not try them again
 * itself (with PostgreSQL away, each would hold it up to its deadline).
 */
static void test_now_fails_writes_back(void **state)
{
	static const char *const a[] = { "a@example.com" };
	struct fx *f = *state;
	struct commit_req *r = req_new("BACK00000001", "kb1", "x\r\n", a, 1);
	struct mark_arg ma;
	struct store_msg m;
	pthread_t th, me = pthread_self();
	int i, mine = 0, theirs = 0;

	commit_set_hold(f->cm, 10 * 1000000, 60 * 1000000);
	now_req(f, "BACK00000000", "kb");
	mark_held(&ma, &th, f->cm, "BACK00000000");
	real_ops = f->st->ops;
	flaky_ops = *real_ops;
	flaky_ops.txn_begin = flaky_begin;
	flaky_ops.txn_commit = flaky_commit;
	f->st->ops = &flaky_ops;
	flaky_n = 0;
	flaky_fail = 1;
	commit_set_hold(f->cm, 100000, 60 * 1000000);	/* the writer's, once back */
	for (i = 0; i < 1000 && !commit_now(f->cm, r); i++)
		usleep(1000);
	assert_int_equal(r->outcome, COMMIT_FAILED);
	assert_int_equal(r->error, STORE_EAGAIN);
	mark_join(&ma, th);			/* committed by the writer */
	commit_reap(f->cm);
	f->st->ops = real_ops;
	assert_true(flaky_n <= 16);
	for (i = 0; i < flaky_n; i++) {
		if (pthread_equal(flaky_log[i].thread, me))
			mine++;
		else if (flaky_log[i].err == 0)
			theirs++;
	}
	if (mine != 1 || flaky_log[0].err != STORE_EAGAIN || theirs < 1)
		fail_msg("commits on the event loop %d (want the failed one only), by the writer %d",
			 mine, theirs);
	assert_int_equal(store_msg_load(f->st, "BACK00000000", &m), 0);
	assert_int_equal(m.inflight, 1);
	store_msg_free(&m);
	req_free(r);
}

/* post_and_wait - committed() of a commit_now(): a mark comes, and the commit lasts on */
static void post_and_wait(struct fx *f)
{
	struct mark_arg *ma = f->during_arg;

	sem_post(&ma->go);
	while (__atomic_load_n(&ma->at, __ATOMIC_SEQ_CST) == 0)
		usleep(1000);
	usleep(1000000);	/* past the mark's window and the busy one, inside commit_now() */
}

/*
 * A write that comes while commit_now() commits a lone submission is held
 * until that commit has ended, however long it takes, and its window
 * from then on; submissions count as coming in from the end of their
 * commit, not its start: a delivery-only commit begun meanwhile would
 * take the writer's turn just before the next submission. The commit is
 * stretched from inside committed() (as a slow fsync would stretch it)
 * to 1 s, against a window of 0.7 s and a busy window of 0.4 s; a second
 * mark 0.1 s after it wakes the writer, and the next submission comes
 * 0.2 s later.
 */
static void test_hold_through_commit_now(void **state)
{
	struct fx *f = *state;
	struct mark_arg m1, m2;
	pthread_t t1, t2;
	uint64_t before;

	commit_set_hold(f->cm, 700000, 400000);
	now_req(f, "THRU00000000", "kt");
	mark_start(&m1, &t1, f->cm, "THRU00000000");
	mark_start(&m2, &t2, f->cm, "THRU00000000");
	f->during = post_and_wait;
	f->during_arg = &m1;
	before = txns(f);
	now_req(f, "THRU00000001", "kt1");	/* the first mark comes inside it */
	usleep(100000);
	sem_post(&m2.go);
	while (__atomic_load_n(&m2.at, __ATOMIC_SEQ_CST) == 0)
		usleep(1000);
	usleep(200000);
	now_req(f, "THRU00000002", "kt2");	/* both ride in this one */
	mark_join(&m1, t1);
	mark_join(&m2, t2);
	assert_int_equal(txns(f), before + 2);
}

/*
 * While submissions come in, a delivery write that finds none waiting is
 * held for one to share its transaction; with none coming it still goes.
 * The windows are widened (commit_set_hold) so that a loaded machine's
 * pauses do not decide the case: a mark taken while the last batch is
 * recent waits seconds for a submission, which comes 20 ms after it. The
 * one race left, the mark thread not yet run by then, is met by trying
 * again (it would make the mark a round of its own: not shared).
 */
static void test_hold_for_submission(void **state)
{
	static const char *const a[] = { "a@example.com" };
	struct fx *f = *state;
	struct commit_req *r = req_new("HOLD00000001", "k5", "x\r\n", a, 1), *r1, *r2;
	struct mark_arg ma = { .cm = f->cm, .qid = "HOLD00000001", .err = -1 };
	struct store_stats before, after;
	char key[16], qid[STORE_QID_SIZE];
	pthread_t th;
	int try, shared = 0;
	int64_t t0;

	n_done = 0;
	commit_set_hold(f->cm, 10 * 1000000, 60 * 1000000);
	commit_submit(f->cm, r);
	wait_done(f, 1);
	for (try = 0; try < 5 && !shared; try++) {
		snprintf(qid, sizeof(qid), "HOLD0000010%d", try);
		snprintf(key, sizeof(key), "k5-%d", try);
		r1 = req_new(qid, key, "x\r\n", a, 1);
		snprintf(qid, sizeof(qid), "HOLD0000020%d", try);
		snprintf(key, sizeof(key), "k6-%d", try);
		r2 = req_new(qid, key, "x\r\n", a, 1);
		assert_int_equal(sem_init(&ma.go, 0, 0), 0);
		assert_int_equal(pthread_create(&th, NULL, mark_thread, &ma), 0);
		commit_submit(f->cm, r1);	/* submissions are coming in */
		wait_done(f, 2 + 2 * try);
		assert_int_equal(store_stats(f->st, &before, 0), 0);
		sem_post(&ma.go);
		usleep(20000);		/* unheld, the mark would be on the disk by now */
		commit_submit(f->cm, r2);
		wait_done(f, 3 + 2 * try);
		pthread_join(th, NULL);
		sem_destroy(&ma.go);
		assert_int_equal(ma.err, 0);
		assert_int_equal(store_stats(f->st, &after, 0), 0);
		shared = after.txns == before.txns + 1;
		req_free(r1);
		req_free(r2);
	}
	assert_true(shared);

	/* nothing else comes: the held mark is written when the hold ends */
	commit_set_hold(f->cm, 50000, 60 * 1000000);
	assert_int_equal(store_stats(f->st, &before, 0), 0);
	assert_int_equal(commit_mark_inflight(f->cm, "HOLD00000001"), 0);
	assert_int_equal(store_stats(f->st, &after, 0), 0);
	assert_int_equal(after.txns, before.txns + 1);

	/* and with no submission recent it is not held at all (held: 60 s) */
	commit_set_hold(f->cm, 60 * 1000000, 1);
	usleep(1000);
	t0 = clock_mono_us();
	assert_int_equal(commit_mark_inflight(f->cm, "HOLD00000001"), 0);
	assert_true(clock_mono_us() - t0 < 30 * 1000000);
	req_free(r);
}

#define MB	(1u << 20)
#define CAP	(16u * MB)	/* COMMIT_BATCH_BYTES in queue/commit.c */

struct block {
	struct commit *cm;
	sem_t started;		/* posted: the writer is inside the op */
	sem_t go;		/* posted: let it finish */
};

/* block_fn - commit_run() step: hold the writer inside its transaction */
static void block_fn(struct store_txn *t, void *arg)
{
	struct block *b = arg;

	(void) t;
	sem_post(&b->started);
	sem_wait(&b->go);
}

static void *block_thread(void *arg)
{
	struct block *b = arg;

	(void) commit_run(b->cm, block_fn, b);
	return NULL;
}

/* req_sized - a submission of size bytes of data, under a key of its own */
static struct commit_req *req_sized(const char *qid, size_t size)
{
	static const char *const a[] = { "a@example.com" };
	struct commit_req *r = req_new(qid, qid, "", a, 1);

	free(r->msg.data);
	r->msg.data = xmalloc(size);
	memset(r->msg.data, 'x', size);
	r->msg.data_len = size;
	return r;
}

/*
 * A group commit takes at most CAP of data, and one submission at least
 * however large; what is left goes first, in order, in the next, ahead
 * of what came in meanwhile. The submissions are queued while the writer
 * is held inside a transaction, so that it finds them all pending at
 * once; late ones come at the first committed() call, after the first
 * batch was taken. want: the QIDs' letters by transaction.
 */
static void test_batch_cap(void **state)
{
	static const struct {
		const char *name;
		size_t size[6];		/* pending when the writer looks; 0 ends */
		size_t late[3];		/* submitted once the first batch is taken */
		const char *want;
	} cases[] = {
		{ "under the cap: one transaction",
		  { 1024, 1024, 1024, 1024 }, { 0 }, "ABCD" },
		{ "to the cap exactly; the rest first in the next",
		  { 6 * MB, 6 * MB, 4 * MB, 6 * MB, 1024 }, { 1024, 1024 }, "ABC|DEFG" },
		{ "a byte past the cap",
		  { 8 * MB, 8 * MB + 1 }, { 0 }, "A|B" },
		{ "the rest split again",
		  { 9 * MB, 9 * MB, 9 * MB }, { 1024 }, "A|B|CD" },
		{ "one bigger than the cap goes alone, first",
		  { CAP + MB, 1024 }, { 0 }, "A|B" },
		{ "one bigger than the cap between small ones",
		  { 1024, CAP + MB, 1024 }, { 0 }, "A|B|C" },
	};
	struct fx *f = *state;
	struct commit_req *r[9];
	struct block b;
	pthread_t th;
	size_t c, i, n, n_init, bytes, in_txn;
	char got[32], *o, qid[STORE_QID_SIZE], letter;

	for (c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		if (c > 0) {		/* a fresh store and writer per case */
			teardown((void **) &f);
			setup((void **) &f);
			*state = f;
		}
		n_done = 0;
		for (n = 0; n < 6 && cases[c].size[n]; n++) {
			snprintf(qid, sizeof(qid), "CAP%zu%c0000000", c, (char) ('A' + n));
			r[n] = req_sized(qid, cases[c].size[n]);
		}
		n_init = n;
		for (i = 0; i < 3 && cases[c].late[i]; i++, n++) {
			snprintf(qid, sizeof(qid), "CAP%zu%c0000000", c, (char) ('A' + n));
			r[n] = req_sized(qid, cases[c].late[i]);
		}
		f->late = r + n_init;
		f->n_late = n - n_init;

		assert_int_equal(sem_init(&b.started, 0, 0), 0);
		assert_int_equal(sem_init(&b.go, 0, 0), 0);
		b.cm = f->cm;
		assert_int_equal(pthread_create(&th, NULL, block_thread, &b), 0);
		sem_wait(&b.started);
		for (i = 0; i < n_init; i++)
			commit_submit(f->cm, r[i]);
		sem_post(&b.go);
		wait_done(f, (int) n);
		pthread_join(th, NULL);
		sem_destroy(&b.started);
		sem_destroy(&b.go);
		for (i = 0; i < 1000 && __atomic_load_n(&f->n_committed, __ATOMIC_SEQ_CST) < (int) n; i++)
			usleep(1000);	/* delivery hears of it after the event loop */
		if (f->n_committed != (int) n)
			fail_msg("%s: %d handed to delivery, want %zu", cases[c].name, f->n_committed, n);

		/* the transactions as the committed() calls saw them */
		o = got;
		bytes = 0;
		in_txn = 0;
		for (i = 0; i < n; i++) {
			if (r[i]->outcome != COMMIT_QUEUED)
				fail_msg("%s: %s: outcome %d, want queued", cases[c].name,
					 r[i]->msg.qid, r[i]->outcome);
			if (i > 0 && f->log_txn[i] != f->log_txn[i - 1]) {
				*o++ = '|';
				bytes = in_txn = 0;
			}
			letter = f->log_qid[i][4];	/* CAP<case><letter>... */
			if (letter < 'A' || letter >= 'A' + (char) n || f->log_txn[i] == 0)
				fail_msg("%s: committed() call %zu: QID %s, txns %llu", cases[c].name,
					 i, f->log_qid[i], (unsigned long long) f->log_txn[i]);
			*o++ = letter;
			bytes += r[letter - 'A']->msg.data_len;
			if (++in_txn > 1 && bytes > CAP)
				fail_msg("%s: %zu submissions of %zu bytes in one transaction",
					 cases[c].name, in_txn, bytes);
		}
		*o = 0;
		if (strcmp(got, cases[c].want) != 0)
			fail_msg("%s: got %s, want %s", cases[c].name, got, cases[c].want);
		for (i = 0; i < n; i++)
			req_free(r[i]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_race_in_batch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_partial_and_mismatch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_replays_told, setup, teardown),
		cmocka_unit_test_setup_teardown(test_marks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_run_outcomes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hold_for_submission, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hold_from_each_write, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hold_through_commit_now, setup, teardown),
		cmocka_unit_test_setup_teardown(test_told_after_reply, setup, teardown),
		cmocka_unit_test_setup_teardown(test_told_by_next_now, setup, teardown),
		cmocka_unit_test_setup_teardown(test_commit_now, setup, teardown),
		cmocka_unit_test_setup_teardown(test_now_fails_writes_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_batch_cap, setup, teardown),
	};

	return cmocka_run_group_tests_name("commit", tests, NULL, NULL);
}
