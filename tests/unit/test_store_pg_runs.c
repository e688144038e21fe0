/*
 * test_store_pg_runs - the runs a PostgreSQL transaction buffers its rows
 * in (store_pg_seg_for(), store/pg/store_pg_txn.c): a row joins the last
 * run of its kind unless a run from there on holds its key. The runs
 * must come out as that rule says for any interleaving of messages put,
 * claims and updates, of the same keys and of others (a model of the
 * rule, the backwards scan it was written as, decides each row); and a
 * batch's rows must cost about the same each, however many came before:
 * the key comparisons are counted (strcmp, wrapped: test_store_pg_runs_LDFLAGS
 * in the Makefile), where a scan of the runs' keys made N rows N²/2 of
 * them; and so must a delivery write of a message the batch put, which
 * finds it among those put (store_pg_put_of()). No server: the
 * transaction is only its runs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../../store/store.h"
#include "../../store/pg/store_pg_int.h"

#define N_MSGS		200		/* a batch: messages put ... */
#define N_RCPTS		100		/* ... each with a claim a recipient */
#define N_OPS		3000		/* rows of an interleaving */
#define N_PUTS		1000		/* messages put, then each marked */
#define N_KEYS		7		/* the keys they share */
#define MAX_RUNS	N_OPS

static unsigned long compares;		/* strcmp calls since reset */

int __real_strcmp(const char *a, const char *b);

/* __wrap_strcmp - every strcmp of the library, counted */
int __wrap_strcmp(const char *a, const char *b)
{
	compares++;
	return __real_strcmp(a, b);
}

static const char *const keys[N_KEYS] = { "RUNS00000001", "RUNS00000002", "RUNS00000003",
	"RUNS00000004", "RUNS00000005", "0123456789abcdef012345", "fedcba9876543210fedcba" };

/* the rule as a backwards scan: each row's run and key, each run's kind and keys */
struct model {
	size_t run[N_OPS];
	int key[N_OPS];
	size_t n;
	enum pg_seg_kind kind[MAX_RUNS];
	unsigned holds[MAX_RUNS];	/* a bit a key */
	size_t n_runs;
};

/* model_add - the run the rule gives a row of kind and key, the row filed */
static size_t model_add(struct model *m, enum pg_seg_kind kind, int key)
{
	size_t j, run = m->n_runs;

	for (j = m->n_runs; j > 0; j--) {
		if (m->holds[j - 1] & (1u << key))
			break;
		if (m->kind[j - 1] == kind) {
			run = j - 1;
			break;
		}
	}
	if (run == m->n_runs)
		m->kind[m->n_runs++] = kind;
	m->holds[run] |= 1u << key;
	m->run[m->n] = run;
	m->key[m->n++] = key;
	return run;
}

/* check_runs - t's runs are the model's: kinds, and each run's keys in order */
static void check_runs(const struct pg_txn *t, const struct model *m)
{
	size_t i, j, row;

	if (t->n_segs != m->n_runs)
		fail_msg("runs: got %zu, want %zu", t->n_segs, m->n_runs);
	for (j = 0; j < m->n_runs; j++) {
		if (t->segs[j].kind != m->kind[j])
			fail_msg("run %zu's kind: got %d, want %d", j, t->segs[j].kind, m->kind[j]);
		for (i = 0, row = 0; i < m->n; i++) {
			if (m->run[i] != j)
				continue;
			if (row >= t->segs[j].n || strcmp(t->segs[j].qids[row], keys[m->key[i]]) != 0)
				fail_msg("run %zu's row %zu: got %s, want %s", j, row,
					 row < t->segs[j].n ? t->segs[j].qids[row] : "(none)",
					 keys[m->key[i]]);
			row++;
		}
		if (row != t->segs[j].n)
			fail_msg("run %zu's rows: got %zu, want %zu", j, t->segs[j].n, row);
	}
}

/* add - a row of kind and key (its index in keys) to t and to m: the same run */
static void add(struct pg_txn *t, struct model *m, enum pg_seg_kind kind, int key)
{
	size_t got = (size_t) (store_pg_seg_for(t, kind, keys[key]) - t->segs), want;

	want = model_add(m, kind, key);
	if (got != want)
		fail_msg("row %zu (kind %d, %s): run %zu, want %zu", m->n - 1, kind, keys[key], got,
			 want);
}

/*
 * a group commit's own shape (test_store_pg test_runs_merged): marks and
 * outcomes of four messages one run, a message put and its outcome
 * after its INSERT; then random interleavings of the three kinds over a
 * few keys, each row's run as the rule says
 */
static void test_runs_as_the_rule(void **state)
{
	static struct model m;
	struct pg_txn t;
	unsigned seed;
	int i;

	(void) state;
	memset(&t, 0, sizeof(t));
	memset(&m, 0, sizeof(m));
	for (i = 0; i < 4; i++)
		add(&t, &m, PG_SEG_UPDATES, i);
	assert_int_equal(t.n_segs, 1);
	add(&t, &m, PG_SEG_MSGS, 4);
	add(&t, &m, PG_SEG_UPDATES, 4);
	assert_int_equal(t.n_segs, 3);
	add(&t, &m, PG_SEG_UPDATES, 0);		/* a second update: the last run, after the first */
	assert_int_equal(t.n_segs, 3);
	add(&t, &m, PG_SEG_CLAIMS, 5);		/* the first claim: a run of its kind */
	assert_int_equal(t.n_segs, 4);
	add(&t, &m, PG_SEG_MSGS, 0);		/* behind its key's update in the last run: a new run */
	add(&t, &m, PG_SEG_MSGS, 1);		/* another key joins it */
	assert_int_equal(t.n_segs, 5);
	check_runs(&t, &m);
	store_pg_segs_free(&t);

	for (seed = 1; seed <= 20; seed++) {
		memset(&t, 0, sizeof(t));
		memset(&m, 0, sizeof(m));
		srand(seed);
		for (i = 0; i < N_OPS; i++)
			add(&t, &m, (enum pg_seg_kind) (rand() % 3), rand() % (int) (seed % 6 + 2));
		check_runs(&t, &m);
		store_pg_segs_free(&t);
	}
}

/*
 * a batch of N_MSGS messages of N_RCPTS recipients, each put and its
 * recipients' claims: two runs, and key comparisons a few a row, where
 * scanning the runs' keys made them N²/2 (2 * 10^8 here)
 */
static void test_runs_cost_a_row_each(void **state)
{
	char qid[STORE_QID_SIZE], key[N_RCPTS][STORE_QID_SIZE];
	size_t rows = 0;
	struct pg_txn t;
	int i, r;

	(void) state;
	memset(&t, 0, sizeof(t));
	store_pg_seg_for(&t, PG_SEG_MSGS, "X");
	compares = 0;
	store_pg_seg_for(&t, PG_SEG_MSGS, "X");	/* its key found: one comparison */
	if (compares != 1)	/* the library's strcmp is this file's */
		fail_msg("strcmp counted in a key's second run lookup: got %lu, want 1", compares);
	store_pg_segs_free(&t);
	memset(&t, 0, sizeof(t));
	compares = 0;
	for (i = 0; i < N_MSGS; i++) {
		snprintf(qid, sizeof(qid), "RUNS%08d", i);
		for (r = 0; r < N_RCPTS; r++)
			snprintf(key[r], sizeof(key[r]), "%011x%011x", i, r);
		store_pg_seg_for(&t, PG_SEG_MSGS, qid);
		for (r = 0; r < N_RCPTS; r++)
			store_pg_seg_for(&t, PG_SEG_CLAIMS, key[r]);
		rows += 1 + N_RCPTS;
	}
	assert_int_equal(t.n_segs, 2);
	assert_int_equal(t.segs[0].n, N_MSGS);
	assert_int_equal(t.segs[1].n, N_MSGS * N_RCPTS);
	if (compares > 4 * rows)
		fail_msg("key comparisons for %zu rows: got %lu, want at most %zu", rows, compares,
			 4 * rows);
	store_pg_segs_free(&t);
}

/*
 * a batch of N_PUTS messages put, then an inflight mark of each (a
 * delivery write of a message put in the same transaction): a few key
 * comparisons a mark, where a scan of the messages put made them N²/2
 * (5 * 10^5): at most 4 a mark, whatever hash_slot()'s multiplier (10,000
 * runs: 3 typical, 3.7 the most)
 */
static void test_puts_found_a_lookup_each(void **state)
{
	struct store_rcpt rcpt = { .addr = "r@example.com" };
	struct store_msg m = { .from = "s@example.com", .client = "127.0.0.1", .rcpts = &rcpt,
		.n_rcpts = 1 };
	struct pg_store st;
	struct pg_txn t;
	int i;

	(void) state;
	memset(&st, 0, sizeof(st));	/* a client's store: no copy kept */
	memset(&t, 0, sizeof(t));
	t.st = &st;
	for (i = 0; i < N_PUTS; i++) {
		snprintf(m.qid, sizeof(m.qid), "RUNS%08d", i);
		store_pg_txn_msg_put(&t.base, &m);
	}
	compares = 0;
	for (i = 0; i < N_PUTS; i++) {
		snprintf(m.qid, sizeof(m.qid), "RUNS%08d", i);
		store_pg_txn_msg_set_inflight(&t.base, m.qid, 1);
	}
	assert_int_equal(t.base.err, 0);
	assert_int_equal(t.n_segs, 2);
	if (compares > 4 * N_PUTS)
		fail_msg("key comparisons for %d marks: got %lu, want at most %d", N_PUTS, compares,
			 4 * N_PUTS);
	store_pg_segs_free(&t);
	free(t.put_qids);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_runs_as_the_rule),
		cmocka_unit_test(test_runs_cost_a_row_each),
		cmocka_unit_test(test_puts_found_a_lookup_each),
	};

	return cmocka_run_group_tests_name("store_pg_runs", tests, NULL, NULL);
}
