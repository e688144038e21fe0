/*
 * test_workq - util/workq.c: jobs reach the workers and come back once
 * each, a queue without workers hands back lists in order, a burst of
 * results costs one wake-up, and stop runs what is still queued.
 */
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "../../util/workq.h"

#define CHECK_INT(what, got, want) do { \
	long long g_ = (long long) (got), w_ = (long long) (want); \
	if (g_ != w_) \
		fail_msg("%s: got %lld, want %lld", (what), g_, w_); \
} while (0)

struct job {
	struct workq_item item;
	int id;
	int worked, done;
};

struct log {
	int order[64];
	int n;
};

static void work(void *arg, struct workq_item *it)
{
	(void) arg;
	((struct job *) it)->worked++;
}

static void done(void *arg, struct workq_item *it)
{
	struct log *l = arg;
	struct job *j = (struct job *) it;

	j->done++;
	if (l->n < 64)
		l->order[l->n++] = j->id;
}

/* wakes - what the eventfd counts now (a read resets it; put it back) */
static uint64_t wakes(int fd)
{
	uint64_t n = 0;

	if (read(fd, &n, sizeof(n)) == sizeof(n))
		(void) !write(fd, &n, sizeof(n));
	return n;
}

static void test_workers(void **state)
{
	static const int threads[] = { 1, 3 };
	struct job jobs[40];
	struct log l;
	size_t t, i, got;

	(void) state;
	for (t = 0; t < sizeof(threads) / sizeof(threads[0]); t++) {
		struct workq *q;
		struct pollfd p;

		memset(jobs, 0, sizeof(jobs));
		memset(&l, 0, sizeof(l));
		q = workq_start(&(struct workq_ops) { "test", work, done, &l }, threads[t]);
		for (i = 0; i < 40; i++) {
			jobs[i].id = (int) i;
			workq_submit(q, &jobs[i].item);
		}
		for (got = 0; got < 40;) {
			p = (struct pollfd) { workq_fd(q), POLLIN, 0 };
			if (poll(&p, 1, 5000) != 1)
				fail_msg("%d threads: no result within 5 s after %zu", threads[t], got);
			got += workq_reap(q);
		}
		CHECK_INT("reaped", got, 40);
		for (i = 0; i < 40; i++) {
			CHECK_INT("worked once", jobs[i].worked, 1);
			CHECK_INT("done once", jobs[i].done, 1);
		}
		CHECK_INT("nothing more", workq_reap(q), 0);
		workq_stop(q);
	}
	workq_stop(NULL);
}

static void test_no_workers(void **state)
{
	struct job j[5];
	struct log l;
	struct workq *q;
	int i;

	(void) state;
	memset(j, 0, sizeof(j));
	memset(&l, 0, sizeof(l));
	q = workq_start(&(struct workq_ops) { "test", NULL, done, &l }, 0);
	for (i = 0; i < 5; i++)
		j[i].id = i;
	/* a list of three, then two alone: one wake-up for all five */
	j[0].item.next = &j[1].item;
	j[1].item.next = &j[2].item;
	j[2].item.next = NULL;
	workq_finish(q, &j[0].item);
	CHECK_INT("wakes after a list", wakes(workq_fd(q)), 1);
	workq_finish(q, &j[3].item);
	workq_finish(q, &j[4].item);
	workq_finish(q, NULL);
	CHECK_INT("wakes after more", wakes(workq_fd(q)), 1);
	CHECK_INT("reaped", workq_reap(q), 5);
	CHECK_INT("wakes after reap", wakes(workq_fd(q)), 0);
	for (i = 0; i < 5; i++)
		CHECK_INT("in the order finished", l.order[i], i);
	/* empty again: the next result wakes again */
	j[0].item.next = NULL;
	workq_finish(q, &j[0].item);
	CHECK_INT("wakes once empty", wakes(workq_fd(q)), 1);
	workq_stop(q);			/* reaps it */
	CHECK_INT("stop reaped", j[0].done, 2);
}

static void test_stop_drains(void **state)
{
	struct job jobs[20];
	struct log l;
	struct workq *q;
	int i;

	(void) state;
	memset(jobs, 0, sizeof(jobs));
	memset(&l, 0, sizeof(l));
	q = workq_start(&(struct workq_ops) { "test", work, done, &l }, 2);
	for (i = 0; i < 20; i++)
		workq_submit(q, &jobs[i].item);
	workq_stop(q);
	for (i = 0; i < 20; i++) {
		CHECK_INT("worked before stop returned", jobs[i].worked, 1);
		CHECK_INT("done before stop returned", jobs[i].done, 1);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_workers),
		cmocka_unit_test(test_no_workers),
		cmocka_unit_test(test_stop_drains),
	};

	return cmocka_run_group_tests_name("workq", tests, NULL, NULL);
}
