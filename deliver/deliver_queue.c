/*
 * NAME
 *	deliver_queue 3
 * SUMMARY
 *	min-heaps of due times plus a QID index, for the delivery scheduler
 * DESCRIPTION
 *	See deliver_queue.h. Each item knows its heap (its group's) and its
 *	slot there (or DQ_BUSY when it has been handed out), so moving an
 *	item earlier is a sift-up and enqueue of a known QID costs O(log n).
 *	What passes over a closed group looks at the top of each heap only.
 */
#include <search.h>
#include <stdlib.h>
#include <string.h>

#include "../util/buf.h"
#include "deliver_queue.h"

#define DQ_BUSY	((size_t) -1)

struct dq_item {
	char qid[STORE_QID_SIZE];	/* first: a QID string is an item's key (item_cmp) */
	int64_t next;
	size_t slot;			/* index in its heap, or DQ_BUSY */
	int group;			/* its heap is heaps[group + 1] */
	int again;			/* busy, and due again at next when done (dq_add) */
	int regroup;			/* busy, and of no known group when done (dq_regroup) */
	int64_t regroup_at;		/* then due at this time at the latest */
};

/* item_cmp - tsearch order: by QID, an item or a QID string (an item starts with its QID) */
static int item_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* item_before - heap order: next_attempt, then QID (older first) */
static int item_before(const struct dq_item *a, const struct dq_item *b)
{
	if (a->next != b->next)
		return a->next < b->next;
	return strcmp(a->qid, b->qid) < 0;
}

/* heap_of - the heap of an item's group */
static struct dq_heap *heap_of(struct dq *q, const struct dq_item *it)
{
	return &q->heaps[it->group + 1];
}

/* heap_set - put an item in a slot and tell it where it is */
static void heap_set(struct dq_heap *h, size_t i, struct dq_item *it)
{
	h->a[i] = it;
	it->slot = i;
}

/* heap_up - restore heap order above slot i */
static void heap_up(struct dq_heap *h, size_t i)
{
	struct dq_item *it = h->a[i];

	while (i > 0 && item_before(it, h->a[(i - 1) / 2])) {
		heap_set(h, i, h->a[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	heap_set(h, i, it);
}

/* heap_down - restore heap order below slot i */
static void heap_down(struct dq_heap *h, size_t i)
{
	struct dq_item *it = h->a[i];
	size_t c;

	for (;;) {
		c = 2 * i + 1;
		if (c >= h->n)
			break;
		if (c + 1 < h->n && item_before(h->a[c + 1], h->a[c]))
			c++;
		if (!item_before(h->a[c], it))
			break;
		heap_set(h, i, h->a[c]);
		i = c;
	}
	heap_set(h, i, it);
}

/* heap_push - add an item to its group's heap */
static void heap_push(struct dq *q, struct dq_item *it)
{
	struct dq_heap *h = heap_of(q, it);

	if (h->n == h->cap) {
		h->cap = h->cap ? 2 * h->cap : 64;
		h->a = xrealloc(h->a, h->cap * sizeof(*h->a));
	}
	heap_set(h, h->n++, it);
	heap_up(h, it->slot);
}

/* heap_remove - take the item out of its heap; it becomes busy */
static void heap_remove(struct dq *q, struct dq_item *it)
{
	struct dq_heap *h = heap_of(q, it);
	size_t i = it->slot;
	struct dq_item *last;

	it->slot = DQ_BUSY;
	if (--h->n == i)
		return;
	last = h->a[h->n];
	heap_set(h, i, last);
	heap_up(h, i);
	heap_down(h, last->slot);
}

/* dq_find - the item for a QID, or NULL */
static struct dq_item *dq_find(const struct dq *q, const char *qid)
{
	void *const *found = tfind(qid, &q->index, item_cmp);

	return found ? *(struct dq_item *const *) found : NULL;
}

/* dq_init - empty queue: the heap of no known group, and one for each of groups */
void dq_init(struct dq *q, size_t groups)
{
	memset(q, 0, sizeof(*q));
	q->n_heaps = groups + 1;
	q->heaps = xcalloc(q->n_heaps, sizeof(*q->heaps));
}

/* dq_free - release everything; the struct can be reused after dq_init */
void dq_free(struct dq *q)
{
	size_t i;

	if (q == NULL)
		return;
	tdestroy(q->index, free);
	for (i = 0; i < q->n_heaps; i++)
		free(q->heaps[i].a);
	free(q->heaps);
	memset(q, 0, sizeof(*q));
}

/* dq_add - schedule a QID, or move it earlier; a busy one comes back at next when done */
int dq_add(struct dq *q, const char *qid, int64_t next)
{
	struct dq_item *it;

	if (strlen(qid) == 0 || strlen(qid) >= STORE_QID_SIZE)
		return 0;
	if ((it = dq_find(q, qid)) != NULL && it->slot == DQ_BUSY) {
		if (!it->again || next < it->next)
			it->next = next;
		it->again = 1;
		return 0;
	}
	if (it != NULL) {
		if (it->next <= next)
			return 0;
		it->next = next;
		heap_up(heap_of(q, it), it->slot);
		return 1;
	}
	it = xcalloc(1, sizeof(*it));
	strcpy(it->qid, qid);
	it->next = next;
	it->group = DQ_GROUP_UNKNOWN;
	if (tsearch(it, &q->index, item_cmp) == NULL)
		abort();			/* tsearch fails only without memory */
	q->n_items++;
	heap_push(q, it);
	return 1;
}

/* first_heap - the heap not closed whose top is earliest, or NULL if all are empty */
static struct dq_heap *first_heap(const struct dq *q)
{
	struct dq_heap *h, *best = NULL;
	size_t i;

	for (i = 0; i < q->n_heaps; i++) {
		h = &q->heaps[i];
		if (h->n > 0 && !h->closed && (best == NULL || item_before(h->a[0], best->a[0])))
			best = h;
	}
	return best;
}

/* dq_take_due - pop due items of one group, earliest first, and mark them busy */
size_t dq_take_due(struct dq *q, int64_t now, char (*out)[STORE_QID_SIZE], size_t max,
		   int *group)
{
	struct dq_heap *h = first_heap(q);
	struct dq_item *it;
	size_t n = 0;

	if (group)
		*group = h ? (int) (h - q->heaps) - 1 : DQ_GROUP_UNKNOWN;
	while (h && n < max && h->n > 0 && h->a[0]->next <= now) {
		it = h->a[0];
		heap_remove(q, it);
		strcpy(out[n++], it->qid);
	}
	return n;
}

/* due_below - due items in the subheap at slot i, counting on from n up to max */
static size_t due_below(const struct dq_heap *h, size_t i, int64_t now, size_t n, size_t max)
{
	if (n >= max || i >= h->n || h->a[i]->next > now)
		return n;			/* a parent not due has no due child */
	n = due_below(h, 2 * i + 1, now, n + 1, max);
	return due_below(h, 2 * i + 2, now, n, max);
}

/* dq_batch_start - when the next batch may start (INT64_MAX: nothing queued, or closed) */
int64_t dq_batch_start(const struct dq *q, int64_t now, int64_t gather, size_t max)
{
	const struct dq_heap *h;
	int64_t start = INT64_MAX, due;
	size_t i;

	for (i = 0; i < q->n_heaps; i++) {
		h = &q->heaps[i];
		if (h->n == 0 || h->closed)
			continue;
		due = h->a[0]->next;
		if (due <= now && due_below(h, 0, now, 0, max) >= max)
			return now;		/* a full batch waits for nothing */
		due = due > INT64_MAX - gather ? INT64_MAX : due + gather;
		if (due < start)
			start = due;
	}
	return start;
}

/* dq_done - finish a busy QID */
void dq_done(struct dq *q, const char *qid, int64_t next)
{
	struct dq_item *it = dq_find(q, qid);

	if (it == NULL)
		return;
	if (it->again) {			/* scheduled again meanwhile: due then, or sooner */
		if (next < 0 || next > it->next)
			next = it->next;
		it->again = 0;
	}
	if (it->regroup && it->slot == DQ_BUSY) {	/* rerouted meanwhile */
		if (next > it->regroup_at)
			next = it->regroup_at;
		it->group = DQ_GROUP_UNKNOWN;
		it->regroup = 0;
	}
	if (it->slot != DQ_BUSY)		/* waiting: out of its heap, then as a busy one */
		heap_remove(q, it);
	if (next >= 0) {
		it->next = next;
		heap_push(q, it);
		return;
	}
	tdelete(it, &q->index, item_cmp);
	q->n_items--;
	free(it);
}

/* dq_set_group - the group a QID waits with from now on */
void dq_set_group(struct dq *q, const char *qid, int group)
{
	struct dq_item *it = dq_find(q, qid);
	int busy;

	if (it == NULL || it->group == group)
		return;
	if (!(busy = it->slot == DQ_BUSY))
		heap_remove(q, it);
	it->group = group;
	if (!busy)
		heap_push(q, it);
}

/* dq_regroup - a QID of no known group, due at when or sooner; a busy one once done */
int dq_regroup(struct dq *q, const char *qid, int64_t when)
{
	struct dq_item *it = dq_find(q, qid);

	if (it == NULL)
		return 0;
	if (it->slot == DQ_BUSY) {
		if (!it->regroup || when < it->regroup_at)
			it->regroup_at = when;
		it->regroup = 1;
		return 0;
	}
	heap_remove(q, it);
	it->group = DQ_GROUP_UNKNOWN;
	if (when < it->next)
		it->next = when;
	heap_push(q, it);
	return 1;
}

/* dq_regrouped - a busy QID is to be regrouped when done (dq_regroup) */
int dq_regrouped(const struct dq *q, const char *qid)
{
	const struct dq_item *it = dq_find(q, qid);

	return it != NULL && it->regroup;
}

/* dq_put_back - a busy QID waits again at the time it had */
void dq_put_back(struct dq *q, const char *qid)
{
	struct dq_item *it = dq_find(q, qid);

	if (it != NULL && it->slot == DQ_BUSY)
		dq_done(q, qid, it->next);
}

/* dq_close - pass a group over, or not */
void dq_close(struct dq *q, int group, int closed)
{
	q->heaps[group + 1].closed = closed;
}

/* dq_flush - everything waiting becomes due now (the order is kept) */
void dq_flush(struct dq *q, int64_t now)
{
	struct dq_heap *h;
	size_t i, k;

	for (k = 0; k < q->n_heaps; k++) {
		h = &q->heaps[k];
		for (i = 0; i < h->n; i++)
			if (h->a[i]->next > now)
				h->a[i]->next = now;
		/* equal times are ordered by QID, which the old order did not respect */
		for (i = h->n / 2; i-- > 0;)
			heap_down(h, i);
	}
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

/* dq_closed - items waiting in closed groups */
size_t dq_closed(const struct dq *q)
{
	size_t i, n = 0;

	for (i = 0; i < q->n_heaps; i++)
		if (q->heaps[i].closed)
			n += q->heaps[i].n;
	return n;
}

/* dq_waiting - items of a group in its heap */
size_t dq_waiting(const struct dq *q, int group)
{
	size_t i = (size_t) group + 1;

	return group >= 0 && i < q->n_heaps ? q->heaps[i].n : 0;
}
