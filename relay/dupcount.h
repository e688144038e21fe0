/*
 * NAME
 *	dupcount 3h
 * SUMMARY
 *	duplicate and mismatch counts waiting to be written to the stories
 * DESCRIPTION
 *	The event loop answers duplicates from a read transaction and must
 *	not write for them, so dupcount_add() only counts in memory, and
 *	the admin thread moves the counts into the stories with
 *	dupcount_persist(), once a second in one write transaction (and at
 *	stop). dupcount_get() adds what is not written yet to what is, so
 *	a count read while the daemon runs is exact.
 *
 *	The table is bounded (DUPCOUNT_MAX QIDs): past that, counts for new
 *	QIDs are lost until the next persist, and a warning says so.
 * DIAGNOSTICS
 *	too many QIDs with unwritten duplicate counts; some counts are lost
 */
#ifndef RELAY_DUPCOUNT_H
#define RELAY_DUPCOUNT_H

#include <stdint.h>

#include "../store/store.h"

struct dupcount;

struct dupcount *dupcount_new(void);
void dupcount_free(struct dupcount *dc);		/* drops what is not written; NULL-safe */
/* dupcount_add - a submission was answered (enum commit_outcome) naming orig_qid */
void dupcount_add(struct dupcount *dc, int outcome, const char *orig_qid);
/* dupcount_persist - move the counts into the stories; 0 or a store error */
int dupcount_persist(struct dupcount *dc, struct store *st, size_t *n);
/* dupcount_get - a QID's counts, written and pending; 0, or -1 if it has no story */
int dupcount_get(struct dupcount *dc, struct store *st, const char *qid,
		 uint64_t *duplicates, uint64_t *mismatches);

#endif
