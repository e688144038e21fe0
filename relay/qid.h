/*
 * NAME
 *	qid 3h
 * SUMMARY
 *	queue IDs: unique, sortable by time, 12 characters of [0-9A-V]
 * DESCRIPTION
 *	A QID is a strictly increasing microsecond clock written as 12
 *	base-32 digits, most significant first, so that the byte order of
 *	QIDs is their time order. qid_seed() takes the greatest QID already
 *	in the store, so that QIDs keep increasing across restarts even if
 *	the wall clock stepped back. Thread-safe.
 */
#ifndef RELAY_QID_H
#define RELAY_QID_H

#include <stdint.h>

#define QID_LEN 12

void qid_seed(const char *last);
void qid_next(char out[QID_LEN + 1]);
void qid_encode(uint64_t v, char out[QID_LEN + 1]);
int qid_decode(const char *qid, uint64_t *v);	/* 0, or -1 if not a QID */

#endif
