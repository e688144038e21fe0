/*
 * NAME
 *	deliver_queue 3
 * SUMMARY
 *	min-heap of due times plus a QID index, for the delivery scheduler
 * DESCRIPTION
 *	See deliver_queue.h. Each item knows its heap slot (or DQ_BUSY when
 *	it has been handed out), so moving an item earlier is a sift-up and
 *	enqueue of a known QID costs O(log n).
 */
#include <search.h>
#include <stdlib.h>
#include <string.h>

#include "../util/buf.h"
#include "deliver_queue.h"

#define DQ_BUSY	((size_t) -1)

struct dq_item {
	char qid[STORE_QID_SIZE];
	int64_t next;
	size_t slot;			/* index in heap, or DQ_BUSY */
	int again;			/* busy, and due again at next when done (dq_again) */
};

/* item_cmp - tsearch order: by QID */
static int item_cmp(const void *a, const void *b)
{
	return strcmp(((const struct dq_item *) a)->qid, ((const struct dq_item *) b)->qid);
}

/* item_before - heap order: next_attempt, then QID (older first) */
static int item_before(const struct dq_item *a, const struct dq_item *b)
{
	if (a->next != b->next)
		return a->next < b->next;
	return strcmp(a->qid, b->qid) < 0;
}

/* heap_set - put an item in a slot and tell it where it is */
static void heap_set(struct dq *q, size_t i, struct dq_item *it)
{
	q->heap[i] = it;
	it->slot = i;
}

/* heap_up - restore heap order above slot i */
static void heap_up(struct dq *q, size_t i)
{
	struct dq_item *it = q->heap[i];

	while (i > 0 && item_before(it, q->heap[(i - 1) / 2])) {
		heap_set(q, i, q->heap[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	heap_set(q, i, it);
}

/* heap_down - restore heap order below slot i */
static void heap_down(struct dq *q, size_t i)
{
	struct dq_item *it = q->heap[i];
	size_t c;

	for (;;) {
		c = 2 * i + 1;
		if (c >= q->n_heap)
			break;
		if (c + 1 < q->n_heap && item_before(q->heap[c + 1], q->heap[c]))
			c++;
		if (!item_before(q->heap[c], it))
			break;
		heap_set(q, i, q->heap[c]);
		i = c;
	}
	heap_set(q, i, it);
}

/* heap_push - add an item */
static void heap_push(struct dq *q, struct dq_item *it)
{
	if (q->n_heap == q->cap_heap) {
		q->cap_heap = q->cap_heap ? 2 * q->cap_heap : 64;
		q->heap = xrealloc(q->heap, q->cap_heap * sizeof(*q->heap));
	}
	heap_set(q, q->n_heap++, it);
	heap_up(q, it->slot);
}

/* heap_remove - take the item out of the heap; it becomes busy */
static void heap_remove(struct dq *q, struct dq_item *it)
{
	size_t i = it->slot;
	struct dq_item *last;

	it->slot = DQ_BUSY;
	if (--q->n_heap == i)
		return;
	last = q->heap[q->n_heap];
	heap_set(q, i, last);
	heap_up(q, i);
	heap_down(q, last->slot);
}

/* dq_find - the item for a QID, or NULL */
static struct dq_item *dq_find(const struct dq *q, const char *qid)
{
	struct dq_item key;
	void *const *found;

	if (strlen(qid) >= STORE_QID_SIZE)
		return NULL;
	strcpy(key.qid, qid);
	found = tfind(&key, &q->index, item_cmp);
	return found ? *(struct dq_item *const *) found : NULL;
}

/* dq_init - empty queue */
void dq_init(struct dq *q)
{
	memset(q, 0, sizeof(*q));
}

/* dq_free - release everything; the struct can be reused after dq_init */
void dq_free(struct dq *q)
{
	if (q == NULL)
		return;
	tdestroy(q->index, free);
	free(q->heap);
	memset(q, 0, sizeof(*q));
}

/* dq_add - schedule a QID, or move it earlier */
int dq_add(struct dq *q, const char *qid, int64_t next)
{
	struct dq_item *it;

	if (strlen(qid) == 0 || strlen(qid) >= STORE_QID_SIZE)
		return 0;
	if ((it = dq_find(q, qid)) != NULL) {
		if (it->slot == DQ_BUSY || it->next <= next)
			return 0;
		it->next = next;
		heap_up(q, it->slot);
		return 1;
	}
	it = xcalloc(1, sizeof(*it));
	strcpy(it->qid, qid);
	it->next = next;
	if (tsearch(it, &q->index, item_cmp) == NULL)
		abort();			/* tsearch fails only without memory */
	q->n_items++;
	heap_push(q, it);
	return 1;
}

/* dq_again - dq_add, and a busy QID comes back at next when done */
int dq_again(struct dq *q, const char *qid, int64_t next)
{
	struct dq_item *it = dq_find(q, qid);

	if (it == NULL || it->slot != DQ_BUSY)
		return dq_add(q, qid, next);
	if (!it->again || next < it->next)
		it->next = next;
	it->again = 1;
	return 0;
}

/* dq_take_due - pop due items, earliest first, and mark them busy */
size_t dq_take_due(struct dq *q, int64_t now, char (*out)[STORE_QID_SIZE], size_t max)
{
	size_t n = 0;
	struct dq_item *it;

	while (n < max && q->n_heap > 0 && q->heap[0]->next <= now) {
		it = q->heap[0];
		heap_remove(q, it);
		strcpy(out[n++], it->qid);
	}
	return n;
}

/* due_below - due items in the subheap at slot i, counting on from n up to max */
static size_t due_below(const struct dq *q, size_t i, int64_t now, size_t n, size_t max)
{
	if (n >= max || i >= q->n_heap || q->heap[i]->next > now)
		return n;			/* a parent not due has no due child */
	n = due_below(q, 2 * i + 1, now, n + 1, max);
	return due_below(q, 2 * i + 2, now, n, max);
}

/* dq_due_count - how many are due at now, counting no further than max */
size_t dq_due_count(const struct dq *q, int64_t now, size_t max)
{
	return due_below(q, 0, now, 0, max);
}

/* dq_batch_start - when the next batch may start (INT64_MAX: nothing queued) */
int64_t dq_batch_start(const struct dq *q, int64_t now, int64_t gather, size_t max)
{
	int64_t due = dq_next_due(q);

	if (due == INT64_MAX)
		return INT64_MAX;
	if (due <= now && dq_due_count(q, now, max) >= max)
		return now;			/* a full batch waits for nothing */
	return due > INT64_MAX - gather ? INT64_MAX : due + gather;
}

/* dq_done - finish a busy QID */
void dq_done(struct dq *q, const char *qid, int64_t next)
{
	struct dq_item *it = dq_find(q, qid);

	if (it == NULL)
		return;
	if (it->again) {			/* leased again meanwhile: due then, or sooner */
		if (next < 0 || next > it->next)
			next = it->next;
		it->again = 0;
	}
	if (it->slot != DQ_BUSY) {		/* not handed out: just reschedule */
		if (next < 0)
			heap_remove(q, it);
		else {
			it->next = next;
			heap_up(q, it->slot);
			heap_down(q, it->slot);
			return;
		}
	}
	if (next >= 0) {
		it->next = next;
		heap_push(q, it);
		return;
	}
	tdelete(it, &q->index, item_cmp);
	q->n_items--;
	free(it);
}

/* dq_next_due - the earliest due time */
int64_t dq_next_due(const struct dq *q)
{
	return q->n_heap ? q->heap[0]->next : INT64_MAX;
}

/* dq_flush - everything waiting becomes due now (the order is kept) */
void dq_flush(struct dq *q, int64_t now)
{
	size_t i;

	for (i = 0; i < q->n_heap; i++)
		if (q->heap[i]->next > now)
			q->heap[i]->next = now;
	/* equal times are ordered by QID, which the old order did not respect */
	for (i = q->n_heap / 2; i-- > 0;)
		heap_down(q, i);
}

/* dq_state - is a QID known, and handed out? */
enum dq_state dq_state(const struct dq *q, const char *qid)
{
	const struct dq_item *it = dq_find(q, qid);

	if (it == NULL)
		return DQ_UNKNOWN;
	return it->slot == DQ_BUSY ? DQ_BUSY_NOW : DQ_WAITING;
}

/* dq_count - items known */
size_t dq_count(const struct dq *q)
{
	return q->n_items;
}

/* dq_busy - items handed out */
size_t dq_busy(const struct dq *q)
{
	return q->n_items - q->n_heap;
}
