/*
 * test_deliver - the pure parts of delivery: backoff, outcome
 * classification, reply text and status codes, the libesmtp header scan,
 * the scheduler's queue, and a job put off uncharged
 * (deliver/deliver_policy.c, deliver/deliver_queue.c, deliver/deliver_job.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../../deliver/deliver_impl.h"
#include "../../deliver/deliver_policy.h"
#include "../../deliver/deliver_queue.h"

#define N(a)	(sizeof(a) / sizeof((a)[0]))

struct backoff_case {
	int64_t first, max;
	int attempts;
	int64_t want;
};

static const struct backoff_case backoff_cases[] = {
	{ 60, 3600, 1, 60 },
	{ 60, 3600, 2, 120 },
	{ 60, 3600, 3, 240 },
	{ 60, 3600, 6, 1920 },
	{ 60, 3600, 7, 3600 },			/* 3840 capped */
	{ 60, 3600, 1000, 3600 },		/* no overflow */
	{ 60, 3600, 0, 60 },			/* nonsense attempts: first */
	{ 2, 10, 3, 8 },
	{ 2, 10, 4, 10 },
	{ 7200, 3600, 1, 3600 },		/* first above max: max */
	{ INT64_MAX / 2, INT64_MAX, 5, INT64_MAX },
};

static void test_backoff(void **state)
{
	size_t i;
	int64_t got;

	(void) state;
	for (i = 0; i < N(backoff_cases); i++) {
		const struct backoff_case *c = &backoff_cases[i];

		got = deliver_backoff(c->first, c->max, c->attempts);
		if (got != c->want)
			fail_msg("backoff(first=%lld, max=%lld, attempts=%d): got %lld, want %lld",
				 (long long) c->first, (long long) c->max, c->attempts,
				 (long long) got, (long long) c->want);
	}
}

struct classify_case {
	const char *name;
	int mail, rcpt, data, marked, final;
	enum deliver_outcome outcome;
	enum deliver_source source;
};

static const struct classify_case classify_cases[] = {
	{ "delivered", 250, 250, 250, 1, 1, DELIVER_SENT, DELIVER_SRC_DATA },
	{ "rcpt 5xx", 250, 550, 250, 1, 1, DELIVER_BOUNCED, DELIVER_SRC_RCPT },
	{ "rcpt 4xx", 250, 450, 250, 1, 1, DELIVER_DEFERRED, DELIVER_SRC_RCPT },
	{ "rcpt 5xx, nothing sent", 250, 550, 0, 0, 0, DELIVER_BOUNCED, DELIVER_SRC_RCPT },
	{ "data 4xx after dot", 250, 250, 451, 1, 1, DELIVER_DEFERRED, DELIVER_SRC_DATA },
	{ "data 5xx after dot", 250, 250, 554, 1, 1, DELIVER_BOUNCED, DELIVER_SRC_DATA },
	{ "no reply after dot (timeout, 354 left)", 250, 250, 354, 1, 0,
	  DELIVER_AMBIGUOUS, DELIVER_SRC_SESSION },
	{ "no reply after dot (reset)", 250, 250, 0, 1, 0, DELIVER_AMBIGUOUS, DELIVER_SRC_SESSION },
	{ "BDAT: chunk 250 left, no LAST reply", 250, 250, 250, 1, 0,
	  DELIVER_AMBIGUOUS, DELIVER_SRC_SESSION },
	{ "BDAT pipelined: no RCPT reply read", 250, 0, 0, 1, 0,
	  DELIVER_AMBIGUOUS, DELIVER_SRC_SESSION },
	{ "odd reply to the dot", 250, 250, 399, 1, 1, DELIVER_AMBIGUOUS, DELIVER_SRC_SESSION },
	{ "dropped during data: not marked", 250, 250, 354, 0, 0,
	  DELIVER_DEFERRED, DELIVER_SRC_SESSION },
	{ "connect refused", 0, 0, 0, 0, 0, DELIVER_DEFERRED, DELIVER_SRC_SESSION },
	{ "mail 5xx", 553, 0, 0, 0, 0, DELIVER_BOUNCED, DELIVER_SRC_MAIL },
	{ "mail 4xx", 451, 0, 0, 0, 0, DELIVER_DEFERRED, DELIVER_SRC_MAIL },
	{ "DATA refused 5xx", 250, 250, 554, 0, 1, DELIVER_BOUNCED, DELIVER_SRC_DATA },
	{ "DATA refused 4xx", 250, 250, 451, 0, 1, DELIVER_DEFERRED, DELIVER_SRC_DATA },
	{ "DATA answered 250 (protocol error)", 250, 250, 250, 0, 1,
	  DELIVER_DEFERRED, DELIVER_SRC_SESSION },
	{ "dropped in envelope", 250, 0, 0, 0, 0, DELIVER_DEFERRED, DELIVER_SRC_SESSION },
};

static void test_classify(void **state)
{
	struct deliver_verdict v;
	size_t i;

	(void) state;
	for (i = 0; i < N(classify_cases); i++) {
		const struct classify_case *c = &classify_cases[i];

		v = deliver_classify(c->mail, c->rcpt, c->data, c->marked, c->final);
		if (v.outcome != c->outcome || v.source != c->source)
			fail_msg("%s: got outcome %d/%d, want %d/%d", c->name, v.outcome,
				 v.source, c->outcome, c->source);
	}
}

struct reply_case {
	int code, cls, subj, det;
	const char *text;
	const char *want;
	const char *want_dsn;
};

static const struct reply_case reply_cases[] = {
	{ 250, 2, 0, 0, "Ok queued\r\n", "250 2.0.0 Ok queued", "2.0.0" },
	{ 550, 5, 1, 1, "no such\r\n user\r\n", "550 5.1.1 no such user", "5.1.1" },
	{ 451, 0, 0, 0, "4.3.0 later", "451 4.3.0 later", "4.3.0" },	/* no ENHANCEDSTATUSCODES */
	{ 421, 0, 0, 0, "bye", "421 bye", "4.0.0" },
	/* the class of the status follows the reply code */
	{ 550, 4, 2, 0, "inconsistent", "550 4.2.0 inconsistent", "5.2.0" },
	{ 250, 0, 0, 0, NULL, "250", "2.0.0" },
	{ 250, 0, 0, 0, "  \t lots   of\x01space  ", "250 lots of space", "2.0.0" },
	{ 0, 0, 0, 0, "no code", "0 no code", "4.0.0" },
};

static void test_reply(void **state)
{
	char line[128], dsn[DELIVER_DSN_SIZE];
	size_t i;

	(void) state;
	for (i = 0; i < N(reply_cases); i++) {
		const struct reply_case *c = &reply_cases[i];

		deliver_reply_format(line, sizeof(line), c->code, c->cls, c->subj, c->det, c->text);
		if (strcmp(line, c->want) != 0)
			fail_msg("reply %d: got \"%s\", want \"%s\"", c->code, line, c->want);
		deliver_dsn_code(dsn, line);
		if (strcmp(dsn, c->want_dsn) != 0)
			fail_msg("dsn of \"%s\": got %s, want %s", line, dsn, c->want_dsn);
	}
	/* truncation keeps a terminated line */
	deliver_reply_format(line, 8, 250, 2, 0, 0, "a long text");
	assert_string_equal(line, "250 2.0");
}

/* next_due - the earliest due time in a group not closed: a batch's start without gathering */
static int64_t next_due(const struct dq *q)
{
	return dq_batch_start(q, 0, 0, SIZE_MAX);
}

/* busy - QIDs handed out: known, and in no heap */
static size_t busy(const struct dq *q)
{
	size_t i, n = dq_count(q);

	for (i = 0; i < q->n_heaps; i++)
		n -= q->heaps[i].n;
	return n;
}

static void test_queue_order(void **state)
{
	char out[8][STORE_QID_SIZE];
	struct dq q;
	size_t n;

	(void) state;
	dq_init(&q, 0);
	assert_int_equal(next_due(&q), INT64_MAX);
	assert_int_equal(dq_add(&q, "C", 30), 1);
	assert_int_equal(dq_add(&q, "A", 10), 1);
	assert_int_equal(dq_add(&q, "B", 20), 1);
	assert_int_equal(dq_add(&q, "D", 10), 1);
	assert_int_equal(dq_count(&q), 4);
	assert_int_equal(next_due(&q), 10);

	/* nothing due before 10; at 20, A and D (equal times: QID order) then B */
	assert_int_equal(dq_take_due(&q, 9, out, 8, NULL), 0);
	n = dq_take_due(&q, 20, out, 8, NULL);
	assert_int_equal(n, 3);
	assert_string_equal(out[0], "A");
	assert_string_equal(out[1], "D");
	assert_string_equal(out[2], "B");
	assert_int_equal(busy(&q), 3);
	assert_int_equal(next_due(&q), 30);
	dq_free(&q);
}

/* when a batch may start: gathering for 100 after the earliest due, at once when full */
static void test_queue_batch_start(void **state)
{
	static const struct {
		int64_t now;
		size_t max;
		int64_t start;
	} t[] = {
		{ 5, 3, 110 },		/* nothing due yet: the earliest's due time + gather */
		{ 10, 3, 110 },		/* one due: it waits for company */
		{ 50, 3, 110 },		/* two */
		{ 60, 3, 60 },		/* a full batch (three) is due: at once */
		{ 60, 8, 110 },		/* not full under a larger batch */
		{ 110, 8, 110 },	/* four: the earliest has waited long enough */
		{ 500, 8, 110 },	/* five */
		{ 500, 2, 500 },	/* counting stops at max */
	};
	char out[8][STORE_QID_SIZE];
	struct dq q;
	size_t i;

	(void) state;
	dq_init(&q, 0);
	assert_int_equal(dq_batch_start(&q, 0, 100, 8), INT64_MAX);
	dq_add(&q, "E", 200);
	dq_add(&q, "B", 20);
	dq_add(&q, "A", 10);
	dq_add(&q, "D", 100);
	dq_add(&q, "C", 60);
	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		assert_int_equal(dq_batch_start(&q, t[i].now, 100, t[i].max), t[i].start);
	/* the busy are not counted: the next batch gathers after the earliest left */
	assert_int_equal(dq_take_due(&q, 110, out, 2, NULL), 2);
	assert_int_equal(dq_batch_start(&q, 110, 100, 8), 160);
	/* no overflow far in the future */
	dq_add(&q, "F", INT64_MAX - 10);
	assert_int_equal(dq_take_due(&q, 1000, out, 8, NULL), 3);
	assert_int_equal(dq_batch_start(&q, 1000, 100, 8), INT64_MAX);
	dq_free(&q);
}

static void test_queue_busy(void **state)
{
	char out[8][STORE_QID_SIZE];
	struct dq q;

	(void) state;
	dq_init(&q, 0);
	dq_add(&q, "A", 10);
	assert_int_equal(dq_take_due(&q, 10, out, 8, NULL), 1);
	/* busy: not handed out again, enqueue kept for its end, flush ignores it */
	assert_int_equal(dq_add(&q, "A", 0), 0);
	dq_flush(&q, 100);
	assert_int_equal(dq_take_due(&q, 1000, out, 8, NULL), 0);
	/* done with a retry time: back in the heap, at the enqueue's earlier one */
	dq_done(&q, "A", 50);
	assert_int_equal(busy(&q), 0);
	assert_int_equal(next_due(&q), 0);
	assert_int_equal(dq_take_due(&q, 50, out, 8, NULL), 1);
	/* done for good: forgotten */
	dq_done(&q, "A", -1);
	assert_int_equal(dq_count(&q), 0);
	assert_int_equal(dq_add(&q, "A", 5), 1);
	assert_int_equal(dq_count(&q), 1);
	/* done while waiting (not handed out): rescheduled, later or sooner */
	dq_add(&q, "B", 7);
	dq_done(&q, "A", 20);
	assert_int_equal(next_due(&q), 7);
	dq_done(&q, "A", 1);
	assert_int_equal(dq_take_due(&q, 1, out, 8, NULL), 1);
	assert_string_equal(out[0], "A");
	dq_free(&q);
}

/*
 * A QID is scheduled again while its last attempt is finishing (a shared
 * store leases it to this node again, the attempt having let the lease
 * go; the operator releases it, the attempt having found it held):
 * dq_add keeps it for dq_done, which puts it back whatever it is told
 * (forgotten, the lease would be renewed forever and the message never
 * delivered; the released message never taken).
 */
static void test_queue_again(void **state)
{
	static const struct {
		int64_t again1, again2;	/* dq_add times while busy (-1: none) */
		int64_t done;		/* dq_done's next */
		int64_t want;		/* next due after, -1: forgotten */
	} cases[] = {
		{ -1, -1, -1, -1 },
		{ 40, -1, -1, 40 },
		{ 40, -1, 60, 40 },
		{ 40, -1, 20, 20 },
		{ 40, 30, -1, 30 },
		{ 30, 40, -1, 30 },
	};
	char out[4][STORE_QID_SIZE];
	struct dq q;
	size_t i;

	(void) state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		dq_init(&q, 0);
		dq_add(&q, "A", 10);
		assert_int_equal(dq_take_due(&q, 10, out, 4, NULL), 1);
		if (cases[i].again1 >= 0)
			assert_int_equal(dq_add(&q, "A", cases[i].again1), 0);
		if (cases[i].again2 >= 0)
			assert_int_equal(dq_add(&q, "A", cases[i].again2), 0);
		assert_int_equal(dq_take_due(&q, 1000, out, 4, NULL), 0);	/* still busy */
		dq_done(&q, "A", cases[i].done);
		if (cases[i].want < 0) {
			assert_int_equal(dq_count(&q), 0);
		} else {
			assert_int_equal(dq_state(&q, "A"), DQ_WAITING);
			assert_int_equal(next_due(&q), cases[i].want);
			assert_int_equal(dq_take_due(&q, cases[i].want, out, 4, NULL), 1);
			dq_done(&q, "A", -1);	/* once: the mark is gone */
			assert_int_equal(dq_count(&q), 0);
		}
		dq_free(&q);
	}
	/* not busy: scheduled, or moved earlier */
	dq_init(&q, 0);
	assert_int_equal(dq_add(&q, "B", 50), 1);
	assert_int_equal(dq_add(&q, "B", 20), 1);
	assert_int_equal(dq_add(&q, "B", 30), 0);
	assert_int_equal(next_due(&q), 20);
	dq_free(&q);
}

static void test_queue_enqueue_earlier(void **state)
{
	char out[8][STORE_QID_SIZE];
	struct dq q;

	(void) state;
	dq_init(&q, 0);
	dq_add(&q, "A", 100);
	dq_add(&q, "B", 50);
	assert_int_equal(dq_add(&q, "A", 200), 0);	/* later: unchanged */
	assert_int_equal(dq_add(&q, "A", 10), 1);	/* earlier: moved */
	assert_int_equal(next_due(&q), 10);
	assert_int_equal(dq_take_due(&q, 10, out, 8, NULL), 1);
	assert_string_equal(out[0], "A");
	assert_int_equal(dq_add(&q, "", 1), 0);		/* not a QID */
	dq_free(&q);
}

static void test_queue_flush(void **state)
{
	char out[8][STORE_QID_SIZE];
	struct dq q;
	size_t n;

	(void) state;
	dq_init(&q, 0);
	dq_add(&q, "Z", 5);
	dq_add(&q, "M", 500);
	dq_add(&q, "A", 900);
	dq_flush(&q, 100);
	n = dq_take_due(&q, 100, out, 8, NULL);
	assert_int_equal(n, 3);
	/* all due: Z was already due at 5, M and A are now due at 100 in QID order */
	assert_string_equal(out[0], "Z");
	assert_string_equal(out[1], "A");
	assert_string_equal(out[2], "M");
	dq_free(&q);
}

/* heap invariants under a pseudo-random workload, checked against a plain array */
static void test_queue_random(void **state)
{
	enum { NQ = 200 };
	int64_t when[NQ];
	int busy[NQ], known[NQ];
	char qid[STORE_QID_SIZE], out[16][STORE_QID_SIZE];
	uint32_t r = 12345;
	struct dq q;
	int64_t now = 0, prev;
	size_t i, n, k, want;

	(void) state;
	dq_init(&q, 0);
	memset(busy, 0, sizeof(busy));
	memset(known, 0, sizeof(known));
	for (k = 0; k < 20000; k++) {
		r = r * 1103515245u + 12345u;
		i = (r >> 8) % NQ;
		snprintf(qid, sizeof(qid), "Q%03zu", i);
		switch ((r >> 20) % 4) {
		case 0:
		case 1:
			if (!known[i]) {
				when[i] = now + (int64_t) ((r >> 4) % 1000);
				known[i] = 1;
				dq_add(&q, qid, when[i]);
			} else if (!busy[i] && now < when[i]) {
				when[i] = now;
				dq_add(&q, qid, now);
			}
			break;
		case 2:
			now += 37;
			n = dq_take_due(&q, now, out, 16, NULL);
			prev = INT64_MIN;
			for (size_t j = 0; j < n; j++) {
				size_t t = (size_t) atoi(out[j] + 1);

				assert_true(known[t] && !busy[t] && when[t] <= now);
				assert_true(when[t] >= prev);
				prev = when[t];
				busy[t] = 1;
			}
			break;
		case 3:
			if (busy[i]) {
				busy[i] = 0;
				if (r & 1) {
					known[i] = 0;
					dq_done(&q, qid, -1);
				} else {
					when[i] = now + 100;
					dq_done(&q, qid, when[i]);
				}
			}
			break;
		}
		for (i = 0, want = 0; i < NQ; i++)
			want += known[i];
		assert_int_equal(dq_count(&q), want);
	}
	dq_free(&q);
}

/*
 * test_queue_groups - a closed group's QIDs are passed over (take, batch
 * start, due count, next due) and the group unknown never is; a batch is
 * of one group, the earliest; a QID put back waits as it was, in its
 * group; set_group moves a waiting QID to its group's heap
 */
static void test_queue_groups(void **state)
{
	struct dq q;
	char out[8][STORE_QID_SIZE];
	int g = 99;

	(void) state;
	dq_init(&q, 2);
	dq_add(&q, "A1", 10);
	dq_add(&q, "A2", 20);
	dq_add(&q, "B1", 15);
	dq_add(&q, "U1", 30);
	dq_set_group(&q, "A1", 0);
	dq_set_group(&q, "A2", 0);
	dq_set_group(&q, "B1", 1);
	assert_int_equal(dq_count(&q), 4);
	assert_int_equal(dq_closed(&q), 0);
	dq_close(&q, 0, 1);
	assert_int_equal(dq_closed(&q), 2);
	assert_int_equal(next_due(&q), 15);
	assert_int_equal(dq_batch_start(&q, 100, 5, 8), 20);
	assert_int_equal(dq_take_due(&q, 100, out, 8, &g), 1);
	assert_string_equal(out[0], "B1");
	assert_int_equal(g, 1);
	dq_close(&q, 1, 1);			/* B1 busy; its group closed */
	assert_int_equal(dq_take_due(&q, 100, out, 8, &g), 1);
	assert_string_equal(out[0], "U1");
	assert_int_equal(g, DQ_GROUP_UNKNOWN);
	dq_put_back(&q, "B1");			/* its group still closed: not due */
	assert_int_equal(dq_state(&q, "B1"), DQ_WAITING);
	assert_int_equal(dq_batch_start(&q, 100, 5, 8), INT64_MAX);
	assert_int_equal(dq_take_due(&q, 100, out, 8, NULL), 0);
	dq_close(&q, 0, 0);
	assert_int_equal(dq_take_due(&q, 100, out, 8, &g), 2);	/* group 0 alone */
	assert_string_equal(out[0], "A1");
	assert_string_equal(out[1], "A2");
	assert_int_equal(g, 0);
	dq_close(&q, 1, 0);
	assert_int_equal(next_due(&q), 15);	/* B1 kept its time */
	dq_set_group(&q, "U1", 1);		/* busy: goes back to group 1 */
	dq_done(&q, "U1", 12);
	assert_int_equal(dq_take_due(&q, 100, out, 8, &g), 2);
	assert_string_equal(out[0], "U1");
	assert_string_equal(out[1], "B1");
	assert_int_equal(g, 1);
	assert_int_equal(busy(&q), 4);
	dq_free(&q);
}

/*
 * test_queue_regroup - a rerouted QID (dq_regroup) waiting in a closed
 * group leaves it, due at once with no known group; one busy keeps its
 * group until done (its set_group then counts for nothing), and is then
 * due at the reroute's time, not at the later one its attempt earned;
 * one busy and forgotten at done is forgotten
 */
static void test_queue_regroup(void **state)
{
	struct dq q;
	char out[8][STORE_QID_SIZE];
	int g = 99;

	(void) state;
	dq_init(&q, 1);
	dq_add(&q, "W1", 50);
	dq_set_group(&q, "W1", 0);
	dq_close(&q, 0, 1);
	assert_int_equal(dq_regroup(&q, "W1", 40), 1);
	assert_int_equal(dq_closed(&q), 0);
	assert_int_equal(dq_take_due(&q, 40, out, 8, &g), 1);
	assert_int_equal(g, DQ_GROUP_UNKNOWN);
	assert_int_equal(dq_regroup(&q, "W1", 60), 0);	/* busy: when done */
	assert_int_equal(dq_regrouped(&q, "W1"), 1);
	dq_set_group(&q, "W1", 0);		/* its load, the old route's */
	dq_done(&q, "W1", 1000);		/* deferred there, till 1000 */
	assert_int_equal(dq_regrouped(&q, "W1"), 0);
	assert_int_equal(dq_closed(&q), 0);
	assert_int_equal(next_due(&q), 60);
	assert_int_equal(dq_take_due(&q, 60, out, 8, &g), 1);
	assert_int_equal(g, DQ_GROUP_UNKNOWN);
	dq_regroup(&q, "W1", 70);
	dq_done(&q, "W1", -1);			/* delivered */
	assert_int_equal(dq_count(&q), 0);
	assert_int_equal(dq_regroup(&q, "W1", 80), 0);	/* unknown: nothing */
	assert_int_equal(dq_count(&q), 0);
	dq_free(&q);
}

/*
 * test_job_postpone - a job that got nowhere is postponed: due at until,
 * every recipient in the attempt deferred with the reason given, the one
 * not in it untouched; one with a recipient's final outcome, or already
 * decided, is left as it was
 */
static void test_job_postpone(void **state)
{
	struct deliver_result res[3];
	struct store_rcpt rcpts[3];
	struct deliver_job j;

	(void) state;
	memset(&j, 0, sizeof(j));
	memset(res, 0, sizeof(res));
	j.m.rcpts = rcpts;
	j.m.n_rcpts = 3;
	j.res = res;
	res[0].attempted = res[1].attempted = 1;	/* res[2]: delivered before */
	deliver_set(&j, 0, DELIVER_DEFERRED, "4.3.0", "delivery not attempted");
	deliver_set(&j, 1, DELIVER_DEFERRED, "4.3.0", "delivery not attempted");
	assert_int_equal(deliver_job_postpone(&j, 1234, "4.7.0", "slow down"), 1);
	assert_true(j.postponed);
	assert_int_equal(j.until, 1234);
	assert_string_equal(res[1].reply, "slow down");
	assert_string_equal(res[1].dsn, "4.7.0");
	assert_string_equal(res[2].reply, "");

	j.postponed = 0;
	j.until = 0;
	deliver_set(&j, 1, DELIVER_BOUNCED, "5.1.1", "no such user");
	assert_int_equal(deliver_job_postpone(&j, 99, "4.7.0", "slow down"), 0);
	assert_false(j.postponed);
	assert_int_equal(res[1].outcome, DELIVER_BOUNCED);
	assert_string_equal(res[1].reply, "no such user");

	deliver_set(&j, 1, DELIVER_DEFERRED, "4.2.0", "mailbox busy");
	j.decided = 1;
	assert_int_equal(deliver_job_postpone(&j, 99, "4.7.0", "slow down"), 0);
	assert_false(j.postponed);
	assert_string_equal(res[1].reply, "mailbox busy");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_backoff),
		cmocka_unit_test(test_classify),
		cmocka_unit_test(test_reply),
		cmocka_unit_test(test_queue_order),
		cmocka_unit_test(test_queue_batch_start),
		cmocka_unit_test(test_queue_busy),
		cmocka_unit_test(test_queue_again),
		cmocka_unit_test(test_queue_enqueue_earlier),
		cmocka_unit_test(test_queue_flush),
		cmocka_unit_test(test_queue_random),
		cmocka_unit_test(test_queue_groups),
		cmocka_unit_test(test_queue_regroup),
		cmocka_unit_test(test_job_postpone),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
