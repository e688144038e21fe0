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
 *
 *	Nodes sharing a store (store_node_id()) make QIDs that never collide:
 *	after qid_set_node(n) a QID is the clock shifted by QID_NODE_BITS with
 *	the node's number below it, still increasing and still in time order
 *	across nodes to the microsecond. 60 bits hold that until 2112.
 */
#ifndef QUEUE_QID_H
#define QUEUE_QID_H

#include <stdint.h>

#define QID_LEN 12

#define QID_NODE_BITS 8	/* up to 256 nodes */

void qid_set_node(int node);	/* before the first qid_next(); -1: a store of one node */
void qid_seed(const char *last);
void qid_next(char out[QID_LEN + 1]);
void qid_encode(uint64_t v, char out[QID_LEN + 1]);
int qid_valid(const char *s);	/* 1 if s is a QID: what qid_encode() writes */
int qid_decode(const char *qid, uint64_t *v);	/* 0, or -1 if not a QID */

#endif
