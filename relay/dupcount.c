/*
 * NAME
 *	dupcount 3
 * SUMMARY
 *	duplicate and mismatch counts waiting to be written to the stories
 * DESCRIPTION
 *	See dupcount.h. The pending counts live in a tsearch tree by QID,
 *	plus a list for the walk, under one mutex, so dupcount_add() on the
 *	event loop is one lookup. A second mutex is held while counts move
 *	from memory to the store, so that dupcount_get() sees each count
 *	exactly once: either still pending or already written.
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

struct pend {
	struct store_count c;
	struct pend *next;
};

struct dupcount {
	pthread_mutex_t lock;		/* the pending counts below */
	void *root;			/* tsearch tree of struct pend, by qid */
	struct pend *list;		/* the same items, for the walk; owns them */
	size_t n;
	int warned;
	pthread_mutex_t persist_lock;	/* held while counts move to the store */
};

/* pend_cmp - tsearch order */
static int pend_cmp(const void *a, const void *b)
{
	return strcmp(((const struct pend *) a)->c.qid, ((const struct pend *) b)->c.qid);
}

/* no_free - tdestroy: the list owns the items */
static void no_free(void *p)
{
	(void) p;
}

/* dupcount_new - an empty table */
struct dupcount *dupcount_new(void)
{
	struct dupcount *dc = xcalloc(1, sizeof(*dc));

	pthread_mutex_init(&dc->lock, NULL);
	pthread_mutex_init(&dc->persist_lock, NULL);
	return dc;
}

/* take - the pending list, leaving the table empty (lock held) */
static struct pend *take(struct dupcount *dc, size_t *n)
{
	struct pend *list = dc->list;

	*n = dc->n;
	tdestroy(dc->root, no_free);
	dc->root = NULL;
	dc->list = NULL;
	dc->n = 0;
	dc->warned = 0;
	return list;
}

/* dupcount_free - drop the table and what it still holds */
void dupcount_free(struct dupcount *dc)
{
	struct pend *p, *next;
	size_t n;

	if (dc == NULL)
		return;
	for (p = take(dc, &n); p; p = next) {
		next = p->next;
		free(p);
	}
	pthread_mutex_destroy(&dc->lock);
	pthread_mutex_destroy(&dc->persist_lock);
	free(dc);
}

/* dupcount_add - count a duplicate or mismatch against the QID it named */
void dupcount_add(struct dupcount *dc, int outcome, const char *orig_qid)
{
	struct pend key, *p;
	void **found;

	if ((outcome != COMMIT_DUPLICATE && outcome != COMMIT_PARTIAL
	     && outcome != COMMIT_MISMATCH) || orig_qid == NULL || orig_qid[0] == 0
	    || strlen(orig_qid) >= STORE_QID_SIZE)
		return;
	memset(&key, 0, sizeof(key));
	strcpy(key.c.qid, orig_qid);
	pthread_mutex_lock(&dc->lock);
	if ((found = tfind(&key, &dc->root, pend_cmp)) != NULL) {
		p = *found;
	} else if (dc->n >= DUPCOUNT_MAX) {
		if (!dc->warned++)
			msg_warn("control: too many QIDs with unwritten duplicate counts;"
				 " some counts are lost");
		pthread_mutex_unlock(&dc->lock);
		return;
	} else {
		p = xcalloc(1, sizeof(*p));
		p->c = key.c;
		if (tsearch(p, &dc->root, pend_cmp) == NULL)
			abort();		/* tsearch fails only without memory */
		p->next = dc->list;
		dc->list = p;
		dc->n++;
	}
	if (outcome == COMMIT_MISMATCH)
		p->c.mismatches++;
	else
		p->c.duplicates++;
	pthread_mutex_unlock(&dc->lock);
}

/* dupcount_persist - move the pending counts into the stories, in one transaction */
int dupcount_persist(struct dupcount *dc, struct store *st, size_t *np)
{
	struct pend *list, *p, *next;
	struct store_count *c;
	size_t n, i = 0;
	int err = 0;

	pthread_mutex_lock(&dc->persist_lock);
	pthread_mutex_lock(&dc->lock);
	list = take(dc, &n);
	pthread_mutex_unlock(&dc->lock);
	if (n > 0) {
		c = xcalloc(n, sizeof(*c));
		for (p = list; p; p = next) {
			next = p->next;
			c[i++] = p->c;
			free(p);
		}
		err = store_hist_count(st, c, n);
		free(c);
	}
	pthread_mutex_unlock(&dc->persist_lock);
	*np = n;
	return err;
}

/* dupcount_get - a QID's counts: what its story holds plus what is pending */
int dupcount_get(struct dupcount *dc, struct store *st, const char *qid,
		 uint64_t *duplicates, uint64_t *mismatches)
{
	struct store_story s;
	struct pend key, *p;
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
	snprintf(key.c.qid, sizeof(key.c.qid), "%s", qid);
	pthread_mutex_lock(&dc->lock);
	if ((found = tfind(&key, &dc->root, pend_cmp)) != NULL) {
		p = *found;
		*duplicates += p->c.duplicates;
		*mismatches += p->c.mismatches;
	}
	pthread_mutex_unlock(&dc->lock);
	pthread_mutex_unlock(&dc->persist_lock);
	return known ? 0 : -1;
}
