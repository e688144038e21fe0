/*
 * NAME
 *	store_pg_seam 3
 * SUMMARY
 *	what the PostgreSQL backend's tests replace at link time
 * DESCRIPTION
 *	Two functions alone in their file, so that a test program that
 *	defines both (tests/unit/test_store_pg.c: a shorter wait for a
 *	result, a pause between a commit's sending and its results) links
 *	its own, and this object is never taken from libstore.a: the daemon
 *	has no hook a test could set, only these, which do nothing. A test
 *	that defines one must define both, or the link finds two.
 */
#include "store_pg_int.h"

/* store_pg_result_limit - the longest wait for a statement's result */
int64_t store_pg_result_limit(void)
{
	return PG_RESULT_US;
}

/* store_pg_commit_sent - a commit's pipeline is sent, its results not read yet */
void store_pg_commit_sent(PGconn *c)
{
	(void) c;
}
