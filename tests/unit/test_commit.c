/*
 * test_commit - what the group-commit writer (queue/commit.c) decides on
 * a real store: racers on one key inside one batch end with one queued
 * message and one QID; submissions in turn under one key are queued,
 * duplicates, partial or mismatches, and a shared store is told the
 * claims each is answered with; inflight marks and delivery outcomes
 * ride in the group commit and fail alone; a lone submission may be
 * committed on the caller's thread (commit_now); a transaction takes at
 * most COMMIT_BATCH_BYTES of message data (one submission at least), the
 * rest going first in the next. When the writer holds its writes, and
 * when it tells of them, is test_commit_hold's.
 */
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

#include "test_commit_fx.h"

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
	wait_committed(f, 1);
	assert_int_equal(f->n_committed, 1);
	if (strcmp(f->last_committed, winner) != 0)
		fail_msg("handed to delivery: got %s, want %s", f->last_committed, winner);
	for (i = 0; i < 8; i++)
		req_free(r[i]);
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

/* one submission of a turn under one key, and what it is answered */
struct turn {
	const char *qid, *body;
	size_t n_rcpts;			/* the first n of a@, b@, c@example.com */
	int shadow, mismatch_accept;
	enum commit_outcome outcome;
	const char *orig;		/* orig_qid, NULL: unchecked */
	const char *claimed;		/* claimed[], "1" or "0" each, NULL: unchecked */
	int replays;			/* claims told to a shared store, -1: unchecked */
};

/* run_turns - submit each in turn under key, alone, and check its answer */
static void run_turns(struct fx *f, const char *key, const struct turn *turns, size_t n)
{
	static const char *const abc[] = { "a@example.com", "b@example.com", "c@example.com" };
	const struct turn *w;
	struct commit_req *r;
	int i, j;

	n_done = 0;
	for (w = turns; w < turns + n; w++) {
		r = req_new(w->qid, key, w->body, abc, w->n_rcpts);
		r->shadow = w->shadow;
		r->mismatch_accept = w->mismatch_accept;
		n_replayed = 0;
		commit_submit(f->cm, r);
		wait_done(f, (int) (w - turns) + 1);
		if (r->outcome != w->outcome)
			fail_msg("%s: outcome %d, want %d", w->qid, r->outcome, w->outcome);
		if (w->orig && strcmp(r->orig_qid, w->orig) != 0)
			fail_msg("%s: orig %s, want %s", w->qid, r->orig_qid, w->orig);
		for (i = 0; w->claimed && i < (int) w->n_rcpts; i++)
			if (r->claimed[i] != w->claimed[i] - '0')
				fail_msg("%s: claimed[%d] %d, want %c", w->qid, i, r->claimed[i],
					 w->claimed[i]);
		for (i = 0; w->replays >= 0 && i < n_replayed && i < 4; i++) {
			/* each a claim answered with its QID */
			for (j = 0; j < (int) w->n_rcpts; j++)
				if (memcmp(replayed[i], r->hashes[j], STORE_HASH_LEN) == 0)
					break;
			if (j == (int) w->n_rcpts || !r->claimed[j])
				fail_msg("%s: replayed a claim it was not answered with", w->qid);
		}
		if (w->replays >= 0 && n_replayed != w->replays)
			fail_msg("%s: %d claims replayed, want %d", w->qid, n_replayed, w->replays);
		req_free(r);
	}
}

/* partial and mismatch against what the store already holds */
static void test_partial_and_mismatch(void **state)
{
	static const struct turn turns[] = {
		{"PART00000001", "body\r\n", 2, 0, 0, COMMIT_QUEUED, NULL, NULL, -1},
		{"PART00000002", "body\r\n", 3, 0, 0, COMMIT_PARTIAL, NULL, "110", -1},
		{"PART00000003", "other body\r\n", 2, 0, 0, COMMIT_MISMATCH, "PART00000001", NULL, -1},
	};

	run_turns(*state, "k2", turns, sizeof(turns) / sizeof(turns[0]));
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
	static const struct turn turns[] = {
		/* a new key; a duplicate; a partial (its replayed part) */
		{"PREP00000001", "body\r\n", 2, 0, 0, COMMIT_QUEUED, NULL, NULL, 0},
		{"PREP00000002", "body\r\n", 2, 0, 0, COMMIT_DUPLICATE, NULL, NULL, 2},
		{"PREP00000003", "body\r\n", 3, 0, 0, COMMIT_PARTIAL, NULL, NULL, 2},
		/* a mismatch refused; a new QID in shadow mode; one for a mismatch accepted */
		{"PREP00000004", "other body\r\n", 2, 0, 0, COMMIT_MISMATCH, NULL, NULL, 0},
		{"PREP00000005", "other body\r\n", 2, 1, 0, COMMIT_QUEUED, NULL, NULL, 0},
		{"PREP00000006", "third body\r\n", 2, 0, 1, COMMIT_QUEUED, NULL, NULL, 0},
	};
	struct fx *f = *state;

	replay_real = f->st->ops;
	replay_ops = *replay_real;
	replay_ops.caps |= STORE_CAP_SHARED;
	replay_ops.txn_begin = replay_begin;
	replay_ops.txn_replay = replay_rec;
	f->st->ops = &replay_ops;
	run_turns(f, "k9", turns, sizeof(turns) / sizeof(turns[0]));
	f->st->ops = replay_real;
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

	n_done = 0;
	now_retry(f, r);
	assert_int_equal(r->outcome, COMMIT_QUEUED);
	assert_int_equal(f->n_committed, 1);
	assert_string_equal(f->last_committed, "NOW000000001");
	assert_int_equal(store_msg_load(f->st, "NOW000000001", &m), 0);
	store_msg_free(&m);
	now_retry(f, dup);
	assert_int_equal(dup->outcome, COMMIT_DUPLICATE);
	assert_string_equal(dup->orig_qid, "NOW000000001");
	assert_int_equal(f->n_committed, 1);	/* a duplicate is not delivered */
	commit_reap(f->cm);
	assert_int_equal(n_done, 0);		/* answered by the caller, not the done list */
	req_free(r);
	req_free(dup);
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

/* block_thread - a commit_run() that holds the writer until b->go is posted */
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
		wait_committed(f, (int) n);
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
		cmocka_unit_test_setup_teardown(test_commit_now, setup, teardown),
		cmocka_unit_test_setup_teardown(test_batch_cap, setup, teardown),
	};

	return cmocka_run_group_tests_name("commit", tests, NULL, NULL);
}
