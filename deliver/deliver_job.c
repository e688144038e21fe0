/*
 * NAME
 *	deliver_job 3
 * SUMMARY
 *	one job's results: a recipient's, every recipient's, a postponement
 * DESCRIPTION
 *	What a transport, or the scheduler, says of a job before
 *	deliver_record.c makes it log lines and the store's update: each
 *	recipient's outcome (deliver_set, deliver_set_all), or the whole
 *	job put off uncharged (deliver_job_postpone): throttling, or another
 *	message's refused mark, kept it from the upstream, and it is due
 *	again at a time of the caller's, its attempt count and backoff as
 *	they were. A function of its arguments: no store, no clock.
 */
#include <stdio.h>

#include "deliver_impl.h"

/* deliver_set - one recipient's result */
void deliver_set(struct deliver_job *j, size_t i, enum deliver_outcome o,
		 const char *dsn, const char *reply)
{
	struct deliver_result *r = &j->res[i];

	r->outcome = o;
	snprintf(r->reply, sizeof(r->reply), "%s", reply ? reply : "");
	if (dsn)
		snprintf(r->dsn, sizeof(r->dsn), "%s", dsn);
	else
		deliver_dsn_code(r->dsn, r->reply);
}

/* deliver_set_all - the same result for every recipient in the attempt */
void deliver_set_all(struct deliver_job *j, enum deliver_outcome o,
		     const char *dsn, const char *reply)
{
	size_t i;

	for (i = 0; i < j->m.n_rcpts; i++)
		if (j->res[i].attempted)
			deliver_set(j, i, o, dsn, reply);
}

/*
 * deliver_job_postpone - j waits until then, not charged an attempt,
 * every recipient in the attempt deferred (dsn, why); 1 if so. A job
 * already decided, or with a recipient delivered, refused for good or
 * left ambiguous, got somewhere: it is left as it is (0).
 */
int deliver_job_postpone(struct deliver_job *j, int64_t until, const char *dsn,
			 const char *why)
{
	size_t i;

	if (j->decided)
		return 0;
	for (i = 0; i < j->m.n_rcpts; i++)
		if (j->res[i].attempted && j->res[i].outcome != DELIVER_DEFERRED)
			return 0;
	j->postponed = 1;
	j->until = until;
	deliver_set_all(j, DELIVER_DEFERRED, dsn, why);
	return 1;
}
