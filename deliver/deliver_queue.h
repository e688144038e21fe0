/*
 * NAME
 *	deliver_queue 3h
 * SUMMARY
 *	the scheduler's in-memory queue: (qid, next_attempt), busy marks
 * DESCRIPTION
 *	A min-heap on next_attempt for "what is due", and an index by QID
 *	(tsearch) so that an enqueue of a QID already known only moves it
 *	earlier. A QID handed out by dq_take_due() is busy: it leaves the
 *	heap, stays in the index, and is not handed out again until
 *	dq_done() puts it back (or forgets it). dq_add() of a busy QID (a
 *	shared store leased it to this node again, or the operator released
 *	it, while its last attempt was finishing) is kept for its dq_done(),
 *	which then puts it back whatever it is told. Not thread-safe: the
 *	caller holds the scheduler's mutex. Times are opaque int64s (the
 *	store's microseconds).
 *
 *	Each QID may know its upstream group (dq_set_group(), once its
 *	message was loaded; DQ_GROUP_UNKNOWN before), and each group has a
 *	heap of its own. A group closed (dq_close(): its upstream is paused,
 *	or every connection it allows is in use) is passed over by
 *	dq_take_due() and dq_batch_start(),
 *	as if its QIDs were not there, at no cost per QID; QIDs of no known
 *	group are never passed over. A batch (dq_take_due) is of one group's
 *	heap: the one whose earliest QID is the earliest.
 */
#ifndef DELIVER_DELIVER_QUEUE_H
#define DELIVER_DELIVER_QUEUE_H

#include <stddef.h>
#include <stdint.h>

#include "../store/store.h"

struct dq_item;

#define DQ_GROUP_UNKNOWN	(-1)

/* the QIDs of one group that are not busy */
struct dq_heap {
	struct dq_item **a;		/* owned array */
	size_t n, cap;
	int closed;			/* passed over (dq_close) */
};

struct dq {
	void *index;			/* tsearch tree of struct dq_item, by qid; owns items */
	struct dq_heap *heaps;		/* owned: [0] group unknown, [g + 1] group g */
	size_t n_heaps;
	size_t n_items;			/* in the index, busy or not */
};

/* dq_init - an empty queue for QIDs of upstream groups 0 .. groups - 1, or of none known */
void dq_init(struct dq *q, size_t groups);
void dq_free(struct dq *q);

/*
 * dq_add - schedule qid at next, or earlier if already scheduled; busy: back
 * at next (or earlier) when done, even if forgotten then. 1 if it moved
 */
int dq_add(struct dq *q, const char *qid, int64_t next);

/*
 * dq_take_due - hand out up to max QIDs due at now, earliest first, of one
 * group not closed (*group, if not NULL: which, or DQ_GROUP_UNKNOWN); they
 * become busy
 */
size_t dq_take_due(struct dq *q, int64_t now, char (*out)[STORE_QID_SIZE], size_t max,
		   int *group);

/*
 * dq_batch_start - when the next batch may start: once the earliest QID
 * has been due for gather, so that others due meanwhile share its
 * connection, or at once when max of one group are due. INT64_MAX if none
 * is waiting (in a group not closed).
 */
int64_t dq_batch_start(const struct dq *q, int64_t now, int64_t gather, size_t max);

/* dq_done - a busy QID is finished: reschedule at next, or forget it if next < 0 */
void dq_done(struct dq *q, const char *qid, int64_t next);

/*
 * dq_set_group - the upstream group of a QID (0 and up; busy or not):
 * it waits with that group's from now on
 */
void dq_set_group(struct dq *q, const char *qid, int group);

/*
 * dq_regroup - a QID's route changed: it waits with no known group until
 * its next dq_set_group(), due at when or sooner (1 if it was waiting);
 * a busy one does so once done (dq_done, dq_put_back), unless forgotten
 * then; dq_regrouped() tells whether a busy one is to be
 */
int dq_regroup(struct dq *q, const char *qid, int64_t when);
int dq_regrouped(const struct dq *q, const char *qid);

/* dq_put_back - a busy QID waits again as it was: its time, its group (dq_regroup aside) */
void dq_put_back(struct dq *q, const char *qid);

/* dq_close - pass a group's QIDs (0 and up) over (closed 1), or not (0) */
void dq_close(struct dq *q, int group, int closed);

/* dq_flush - make everything not busy due at now */
void dq_flush(struct dq *q, int64_t now);

/* dq_state - DQ_UNKNOWN, DQ_WAITING (in the heap) or DQ_BUSY_NOW (handed out) */
enum dq_state { DQ_UNKNOWN, DQ_WAITING, DQ_BUSY_NOW };
enum dq_state dq_state(const struct dq *q, const char *qid);

/*
 * dq_count - QIDs known (busy included, closed groups' too), dq_closed -
 * of which waiting in a closed group
 */
size_t dq_count(const struct dq *q);
size_t dq_closed(const struct dq *q);

/* dq_waiting - QIDs of group waiting (not busy) */
size_t dq_waiting(const struct dq *q, int group);

#endif
