/*
 * NAME
 *	workq 3h
 * SUMMARY
 *	a work queue: jobs to worker threads, results back to one thread
 * DESCRIPTION
 *	The one pattern the daemon's helpers share. A job is any struct
 *	that begins with a struct workq_item. workq_submit() queues it
 *	(FIFO) for the worker threads, which run ops->work on it and hand
 *	it back; workq_fd() becomes readable, and workq_reap(), on the
 *	thread that owns the results (the event loop), runs ops->done on
 *	each, in the order they finished.
 *
 *	A queue with no workers (threads = 0) is only the way back: a
 *	thread of one's own (the group-commit writer) hands finished items
 *	to workq_finish(), one at a time or as a list, and the owner reaps
 *	them the same way.
 *
 *	The eventfd is written only when the finished list goes from empty
 *	to not empty: a burst of results costs one wake-up.
 */
#ifndef UTIL_WORKQ_H
#define UTIL_WORKQ_H

#include <stddef.h>

struct workq_item {
	struct workq_item *next;	/* the queue's while the item is in it */
};

struct workq_ops {
	const char *name;		/* in diagnostics */
	void (*work) (void *arg, struct workq_item *it);	/* on a worker; NULL with no workers */
	void (*done) (void *arg, struct workq_item *it);	/* in workq_reap() */
	void *arg;
};

struct workq;

/* workq_start - a queue with this many worker threads (0: none); fatal if they cannot start */
struct workq *workq_start(const struct workq_ops *ops, int threads);
/* workq_submit - a job for the workers */
void workq_submit(struct workq *q, struct workq_item *it);
/* workq_finish - hand back finished items: a list linked by next, in order */
void workq_finish(struct workq *q, struct workq_item *list);
/* workq_fd - readable while finished items wait for workq_reap() */
int workq_fd(const struct workq *q);
/* workq_reap - ops->done on every finished item, in order; how many */
size_t workq_reap(struct workq *q);
/* workq_stop - run the queued jobs, join the workers, reap; NULL-safe */
void workq_stop(struct workq *q);

#endif
