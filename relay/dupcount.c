/*
 * NAME
 *	dupcount 3
 * SUMMARY
 *	duplicate and mismatch counts waiting to be written to the stories
 * DESCRIPTION
 *	See dupcount.h. The pending counts live in a tsearch tree by QID,
 *	under one mutex, so dupcount_add() on the event loop is one lookup.
 *	A second mutex is held while counts move from memory to the store,
 *	so that dupcount_get() sees each count exactly once: either still
 *	pending or already written.
 */
#include <pthread.h>
#include <stdio.h>
#include <search.h>
#include <stdlib.h>
#include <string.h>

#include "../util/buf.h"
#include "../util/log.h"
#include "../queue/commit.h"
#include "dupcount.h"

#define DUPCOUNT_MAX	65536		/* QIDs with pending counts */

struct dupcount {
	pthread_mutex_t lock;		/* the pending counts below */
	void *root;			/* tsearch tree of struct store_count; owns them */
	size_t n;
	int warned;
	pthread_mutex_t persist_lock;	/* held while counts move to the store */
};

/* count_cmp - tsearch order */
static int count_cmp(const void *a, const void *b)
{
	const struct store_count *x = a, *y = b;

	return strcmp(x->qid, y->qid);
}

/* dupcount_new - an empty table */
struct dupcount *dupcount_new(void)
{
	struct dupcount *dc = xcalloc(1, sizeof(*dc));

	pthread_mutex_init(&dc->lock, NULL);
	pthread_mutex_init(&dc->persist_lock, NULL);
	return dc;
}

/* dupcount_free - drop the table and what it still holds */
void dupcount_free(struct dupcount *dc)
{
	if (dc == NULL)
		return;
	tdestroy(dc->root, free);
	pthread_mutex_destroy(&dc->lock);
	pthread_mutex_destroy(&dc->persist_lock);
	free(dc);
}

/* dupcount_add - count a duplicate or mismatch against the QID it named */
void dupcount_add(struct dupcount *dc, int outcome, const char *orig_qid)
{
	struct store_count key, *p;
	void **found;

	if ((outcome != COMMIT_DUPLICATE && outcome != COMMIT_PARTIAL
	     && outcome != COMMIT_MISMATCH) || orig_qid == NULL || orig_qid[0] == 0
	    || strlen(orig_qid) >= STORE_QID_SIZE)
		return;
	memset(&key, 0, sizeof(key));
	strcpy(key.qid, orig_qid);
	pthread_mutex_lock(&dc->lock);
	if ((found = tfind(&key, &dc->root, count_cmp)) != NULL) {
		p = *found;
	} else if (dc->n >= DUPCOUNT_MAX) {
		if (!dc->warned++)
			msg_warn("control: too many QIDs with unwritten duplicate counts;"
				 " some counts are lost");
		pthread_mutex_unlock(&dc->lock);
		return;
	} else {
		p = xcalloc(1, sizeof(*p));
		*p = key;
		if (tsearch(p, &dc->root, count_cmp) == NULL)
			abort();		/* tsearch fails only without memory */
		dc->n++;
	}
	if (outcome == COMMIT_MISMATCH)
		p->mismatches++;
	else
		p->duplicates++;
	pthread_mutex_unlock(&dc->lock);
}

/* gather - twalk_r: each count once, into the array at *arg */
static void gather(const void *node, VISIT v, void *arg)
{
	struct store_count **c = arg;

	if (v == postorder || v == leaf)
		*(*c)++ = **(struct store_count *const *) node;
}

/* dupcount_persist - move the pending counts into the stories, in one transaction */
int dupcount_persist(struct dupcount *dc, struct store *st, size_t *np)
{
	struct store_count *c, *end;
	void *root;
	int err = 0;

	pthread_mutex_lock(&dc->persist_lock);
	pthread_mutex_lock(&dc->lock);
	root = dc->root;
	*np = dc->n;
	dc->root = NULL;
	dc->n = 0;
	dc->warned = 0;
	pthread_mutex_unlock(&dc->lock);
	if (*np > 0) {
		end = c = xcalloc(*np, sizeof(*c));
		twalk_r(root, gather, &end);
		err = store_hist_count(st, c, *np);
		free(c);
	}
	tdestroy(root, free);
	pthread_mutex_unlock(&dc->persist_lock);
	return err;
}

/* dupcount_get - a QID's counts: what its story holds plus what is pending */
int dupcount_get(struct dupcount *dc, struct store *st, const char *qid,
		 uint64_t *duplicates, uint64_t *mismatches)
{
	struct store_story s;
	struct store_count key, *p;
	void **found;
	int known;

	*duplicates = *mismatches = 0;
	pthread_mutex_lock(&dc->persist_lock);
	known = store_story_get(st, qid, &s) == 0;
	if (known) {
		*duplicates = s.duplicates;
		*mismatches = s.mismatches;
		store_story_free(&s);
	}
	memset(&key, 0, sizeof(key));
	snprintf(key.qid, sizeof(key.qid), "%s", qid);
	pthread_mutex_lock(&dc->lock);
	if ((found = tfind(&key, &dc->root, count_cmp)) != NULL) {
		p = *found;
		*duplicates += p->duplicates;
		*mismatches += p->mismatches;
	}
	pthread_mutex_unlock(&dc->lock);
	pthread_mutex_unlock(&dc->persist_lock);
	return known ? 0 : -1;
}
