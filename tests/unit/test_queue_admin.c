/*
 * test_queue_admin - the operator's actions (queue/queue_admin.c) on a
 * store (test_store_fx.h: LMDB, or PostgreSQL with IDEMRELAY_PG_URL set):
 * what they refuse, and what a scheduler's answer becomes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../queue/queue_admin.h"
#include "../../store/store.h"
#include "../../util/buf.h"
#include "test_store_help.h"

/* queue_admin.c's string comparisons, counted: it is included, its strcmp() this one */
static size_t n_strcmp;

static int count_strcmp(const char *a, const char *b)
{
	n_strcmp++;
	return strcmp(a, b);
}

#define strcmp count_strcmp
#include "../../queue/queue_admin.c"
#undef strcmp

/* a scheduler whose retry and unschedule answer what the test says */
static enum queue_admin_retry retry_answer;
static int busy_answer;			/* 1: "being delivered right now" */

static int fake_unschedule(void *arg, const char *qid)
{
	(void) arg, (void) qid;
	return busy_answer;
}

static void fake_release(void *arg, const char *qid, int64_t when)
{
	(void) arg, (void) qid, (void) when;
}

static enum queue_admin_retry fake_retry(void *arg, const char *qid, const char *route)
{
	(void) arg, (void) qid, (void) route;
	return retry_answer;
}

static void fake_reroute(void *arg, const char *qid)
{
	(void) arg, (void) qid;
}

static const struct queue_admin_sched fake = {
	NULL, fake_unschedule, fake_release, fake_retry, fake_reroute
};

/* held - is qid on hold? */
static int held(struct store *st, const char *qid)
{
	struct store_msg m;
	int on;

	CHECK_INT("load", store_msg_load(st, qid, &m), 0);
	on = m.held;
	store_msg_free(&m);
	return on;
}

/* want_error - the reply is a JSON error holding text */
static void want_error(const char *what, const struct buf *out, const char *text)
{
	if (out->data == NULL || strstr(out->data, "\"ok\":false") == NULL
	    || strstr(out->data, text) == NULL)
		fail_msg("%s: got %s, want an error saying \"%s\"", what,
			 out->data ? out->data : "nothing", text);
}


/*
 * test_retry_answers - each answer of the scheduler's retry is said as
 * it is; one it does not have is an error, not an index out of its
 * tables
 */
static void test_retry_answers(void **state)
{
	static const struct {
		enum queue_admin_retry rc;
		const char *want;
	} cases[] = {
		{ QUEUE_ADMIN_DUE, "\"state\":\"due\"" },
		{ QUEUE_ADMIN_ACTIVE, "\"state\":\"active\"" },
		{ QUEUE_ADMIN_WAITING, "\"state\":\"waiting\"" },
		{ QUEUE_ADMIN_UNKNOWN, "\"ok\":false" },
		{ (enum queue_admin_retry) 3, "answer 3 is not known" },
		{ (enum queue_admin_retry) 1000, "answer 1000 is not known" },
		{ (enum queue_admin_retry) -7, "answer -7 is not known" },
	};
	struct fx *f = *state;
	struct store_msg m;
	struct buf out = BUF_INIT;
	size_t i;

	msg_new(&m, "ADMINRETRY01", 1, 50);
	CHECK_INT("spool", spool(f->st, &m, NULL, 0, 0), 0);
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		retry_answer = cases[i].rc;
		queue_admin_retry(f->st, &fake, m.qid, &out);
		if (out.data == NULL || strstr(out.data, cases[i].want) == NULL)
			fail_msg("retry answered %d: got %s, want %s", (int) cases[i].rc,
				 out.data ? out.data : "nothing", cases[i].want);
	}
	store_msg_free(&m);
	buf_free(&out);
}

/* request - queue_admin_request() of cmd and args (copied: it cuts them up) into out */
static void request(struct fx *f, const char *cmd, const char *args, struct buf *out)
{
	char *a = strdup(args);

	queue_admin_request(f->st, &fake, NULL, cmd, a, NOW, out);
	free(a);
}

/*
 * test_act_unknown - an action queue_admin.c does not know is refused,
 * whatever it is: it was taken for a release, and released a held message
 */
static void test_act_unknown(void **state)
{
	static const char *const cmds[] = { "relase", "flush", "", "HOLD" };
	static const char qid[] = "ADMINHELD001";
	struct fx *f = *state;
	struct store_msg m;
	struct buf out = BUF_INIT;
	size_t i;

	msg_new(&m, qid, 1, 50);
	CHECK_INT("spool", spool(f->st, &m, NULL, 0, 0), 0);
	request(f, "hold", qid, &out);
	CHECK_INT("held", held(f->st, qid), 1);
	for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		buf_reset(&out);
		request(f, cmds[i], qid, &out);
		want_error(cmds[i], &out, "unknown request");
		CHECK_INT("still held", held(f->st, qid), 1);
	}
	request(f, "release", qid, &out);
	CHECK_INT("released by release", held(f->st, qid), 0);
	store_msg_free(&m);
	buf_free(&out);
}

/*
 * test_drop_request - a control request's drop of one QID: refused while
 * the scheduler says it is being delivered (and left queued), then
 * dropped, then not queued; a malformed request gets its usage
 */
static void test_drop_request(void **state)
{
	struct fx *f = *state;
	struct store_msg m;
	struct buf out = BUF_INIT;

	msg_new(&m, "ADMINDROP001", 1, 50);
	CHECK_INT("spool", spool(f->st, &m, NULL, 0, 0), 0);
	busy_answer = 1;
	request(f, "drop", m.qid, &out);
	want_error("drop while delivered", &out,
		   "ADMINDROP001 is being delivered right now; try again in a moment");
	CHECK_INT("not held, still queued", held(f->st, m.qid), 0);
	busy_answer = 0;
	request(f, "drop", m.qid, &out);
	CHECK_STR("drop", out.data, "{\"ok\":true,\"qid\":\"ADMINDROP001\",\"count\":1,"
		  "\"dropped\":[\"ADMINDROP001\"],\"busy\":[]}");
	request(f, "drop", m.qid, &out);
	want_error("drop again", &out, "ADMINDROP001 is not queued: it was dropped");
	request(f, "drop", "", &out);
	want_error("drop nothing", &out, "usage: drop QID | ALL");
	request(f, "forget", "--drop", &out);
	want_error("forget no key", &out, "usage: forget [--force|--drop] USER|- KEYHASH...");
	store_msg_free(&m);
	buf_free(&out);
}

/*
 * test_not_queued - each action on one QID that is not queued says why:
 * a dropped message was dropped, an unknown QID is unknown; nothing else
 * is done (the count line is logged for none)
 */
static void test_not_queued(void **state)
{
	static const char *const cmds[] = { "drop", "hold", "release", "reroute" };
	static const struct {
		const char *qid, *want;
	} cases[] = {
		{ "ADMINGONE001", "ADMINGONE001 is not queued: it was dropped" },
		{ "ADMINNONE001", "unknown QID ADMINNONE001" },
	};
	struct fx *f = *state;
	struct store_msg m;
	struct buf out = BUF_INIT;
	size_t i, j;

	msg_new(&m, "ADMINGONE001", 1, 50);
	CHECK_INT("spool", spool(f->st, &m, NULL, 0, 0), 0);
	request(f, "drop", m.qid, &out);
	for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		for (j = 0; j < sizeof(cases) / sizeof(cases[0]); j++) {
			request(f, cmds[i], cases[j].qid, &out);
			want_error(cmds[i], &out, cases[j].want);
		}
	store_msg_free(&m);
	buf_free(&out);
}

/*
 * test_all_linear - hold ALL, then drop ALL, over QA_MANY messages: each
 * message is compared a few times at most (a walk gives each once, and
 * nothing searches the set for it: the search made n * n / 2 comparisons
 * for each set, 45,000 for these 300)
 */
#define QA_MANY	300
static void test_all_linear(void **state)
{
	struct fx *f = *state;
	struct store_msg m;
	struct buf out = BUF_INIT;
	char qid[STORE_QID_SIZE], want[64];
	size_t i;

	for (i = 0; i < QA_MANY; i++) {
		snprintf(qid, sizeof(qid), "ADMINALL%04zu", i);
		msg_new(&m, qid, 1, 50);
		CHECK_INT("spool", spool(f->st, &m, NULL, 0, 0), 0);
		store_msg_free(&m);
	}
	n_strcmp = 0;
	request(f, "hold", "ALL", &out);
	snprintf(want, sizeof(want), "{\"ok\":true,\"count\":%d,", QA_MANY);
	if (strncmp(out.data, want, strlen(want)) != 0)
		fail_msg("hold ALL: got %.80s, want %s...", out.data, want);
	request(f, "drop", "ALL", &out);
	snprintf(want, sizeof(want), "{\"ok\":true,\"count\":%d,", QA_MANY);
	if (strncmp(out.data, want, strlen(want)) != 0)
		fail_msg("drop ALL: got %.80s, want %s...", out.data, want);
	if (n_strcmp > 10 * QA_MANY)
		fail_msg("hold and drop ALL of %d messages: %zu comparisons, want at most %d",
			 QA_MANY, n_strcmp, 10 * QA_MANY);
	buf_free(&out);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_act_unknown),
		T(test_retry_answers),
		T(test_drop_request),
		T(test_not_queued),
		T(test_all_linear),
	};

	return cmocka_run_group_tests_name("queue_admin", tests, NULL, NULL);
}
