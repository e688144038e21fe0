/*
 * NAME
 *	workq 3
 * SUMMARY
 *	a work queue: jobs to worker threads, results back to one thread
 * DESCRIPTION
 *	See workq.h. One mutex guards both lists; the workers sleep on one
 *	condition variable. workq_reap() reads the eventfd before it takes
 *	the finished list, so that an item finished in between is either in
 *	the list it takes or written about afresh: no result waits unseen.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "buf.h"
#include "log.h"
#include "workq.h"

struct workq {
	struct workq_ops ops;
	pthread_mutex_t lock;
	pthread_cond_t wake;		/* jobs queued, or stop */
	struct workq_item *jobs, **jobs_tail;	/* FIFO, under lock */
	struct workq_item *fin, **fin_tail;	/* FIFO, under lock */
	int stop;			/* under lock */
	int efd;			/* owned eventfd */
	pthread_t *threads;		/* owned */
	int n_threads;
};

/* workq_main - a worker: take a job, run it, hand it back */
static void *workq_main(void *arg)
{
	struct workq *q = arg;
	struct workq_item *it;

	pthread_mutex_lock(&q->lock);
	for (;;) {
		while (q->jobs == NULL && !q->stop)
			pthread_cond_wait(&q->wake, &q->lock);
		if ((it = q->jobs) == NULL)
			break;			/* stopping, and nothing left */
		if ((q->jobs = it->next) == NULL)
			q->jobs_tail = &q->jobs;
		pthread_mutex_unlock(&q->lock);
		it->next = NULL;
		q->ops.work(q->ops.arg, it);
		workq_finish(q, it);
		pthread_mutex_lock(&q->lock);
	}
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

/* workq_start - the queue and its workers */
struct workq *workq_start(const struct workq_ops *ops, int threads)
{
	struct workq *q = xcalloc(1, sizeof(*q));
	int i, err;

	q->ops = *ops;
	q->jobs_tail = &q->jobs;
	q->fin_tail = &q->fin;
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->wake, NULL);
	if ((q->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
		msg_fatal("%s: eventfd: %m", ops->name);
	q->n_threads = threads > 0 ? threads : 0;
	q->threads = q->n_threads ? xcalloc((size_t) q->n_threads, sizeof(*q->threads)) : NULL;
	for (i = 0; i < q->n_threads; i++)
		if ((err = pthread_create(&q->threads[i], NULL, workq_main, q)) != 0)
			msg_fatal("%s: cannot start a thread: %s", ops->name, strerror(err));
	return q;
}

/* workq_submit - queue a job, wake a worker */
void workq_submit(struct workq *q, struct workq_item *it)
{
	it->next = NULL;
	pthread_mutex_lock(&q->lock);
	*q->jobs_tail = it;
	q->jobs_tail = &it->next;
	pthread_cond_signal(&q->wake);
	pthread_mutex_unlock(&q->lock);
}

/* workq_finish - append finished items; wake the owner if the list was empty */
void workq_finish(struct workq *q, struct workq_item *list)
{
	struct workq_item **last;
	uint64_t one = 1;
	int was_empty;

	if (list == NULL)
		return;
	for (last = &list->next; *last; last = &(*last)->next)
		;
	pthread_mutex_lock(&q->lock);
	was_empty = q->fin == NULL;
	*q->fin_tail = list;
	q->fin_tail = last;
	pthread_mutex_unlock(&q->lock);
	if (was_empty)
		(void) !write(q->efd, &one, sizeof(one));
}

/* workq_fd - the eventfd the owner polls */
int workq_fd(const struct workq *q)
{
	return q->efd;
}

/* workq_reap - run done on each finished item, oldest first */
size_t workq_reap(struct workq *q)
{
	struct workq_item *list, *next;
	uint64_t n;
	size_t count = 0;

	(void) !read(q->efd, &n, sizeof(n));	/* first: see the DESCRIPTION */
	pthread_mutex_lock(&q->lock);
	list = q->fin;
	q->fin = NULL;
	q->fin_tail = &q->fin;
	pthread_mutex_unlock(&q->lock);
	for (; list; list = next, count++) {
		next = list->next;
		list->next = NULL;
		q->ops.done(q->ops.arg, list);
	}
	return count;
}

/* workq_stop - drain, join, reap what is left, release */
void workq_stop(struct workq *q)
{
	int i;

	if (q == NULL)
		return;
	pthread_mutex_lock(&q->lock);
	q->stop = 1;
	pthread_cond_broadcast(&q->wake);
	pthread_mutex_unlock(&q->lock);
	for (i = 0; i < q->n_threads; i++)
		pthread_join(q->threads[i], NULL);
	workq_reap(q);
	close(q->efd);
	pthread_mutex_destroy(&q->lock);
	pthread_cond_destroy(&q->wake);
	free(q->threads);
	free(q);
}
