/*
 * NAME
 *	commit 3h
 * SUMMARY
 *	group commit: one store write transaction (one fsync on LMDB, one
 *	round trip and WAL flush on PostgreSQL) for every submission and
 *	delivery write ready at that moment
 * DESCRIPTION
 *	The event loop hands finished submissions to commit_submit(); a
 *	writer thread takes all that are pending, decides each one against
 *	the claims inside one write transaction (so that racers on one key
 *	in one batch see each other), spools the new ones with their claims,
 *	and commits. Finished requests come back through a completion list
 *	and an eventfd that the event loop polls; commit_reap() runs their
 *	done callbacks in the event loop's thread.
 *
 *	If a batch fails to commit (a full store, a lost lease), each of its requests is
 *	tried again alone, so one oversized message cannot fail its
 *	neighbours.
 *
 *	Delivery threads put their writes in the same transactions with
 *	commit_run() (inflight marks, a batch's outcomes): they share the
 *	commit, and a submission never waits behind a delivery transaction
 *	(for LMDB's writer lock, or a PostgreSQL connection). The writer is
 *	the queue core's, below acceptance and delivery, which both use it.
 *	commit_stop() only after delivery stopped.
 */
#ifndef QUEUE_COMMIT_H
#define QUEUE_COMMIT_H

#include <stddef.h>
#include <stdint.h>

#include "../store/store.h"
#include "../util/hash.h"
#include "../util/workq.h"

enum commit_outcome {
	COMMIT_QUEUED,		/* every recipient new: spooled under req->qid */
	COMMIT_PARTIAL,		/* some recipients claimed: the rest spooled under req->qid */
	COMMIT_DUPLICATE,	/* every recipient claimed, same content: req->orig_qid */
	COMMIT_MISMATCH,	/* a claim with other content: req->orig_qid */
	COMMIT_FAILED,		/* the store could not commit: req->error */
};

struct commit_req {
	/* input, owned by the submitter */
	uint8_t (*hashes)[HASH_LEN];	/* one per msg.rcpts[i]; NULL: no key */
	uint8_t fingerprint[HASH_LEN];
	int shadow;			/* keys.mode = "shadow" */
	int mismatch_accept;		/* keys.on_mismatch = "accept" */
	int64_t ttl;			/* claim lifetime, microseconds */
	struct store_msg msg;		/* qid, keyhash with hashes preset; new recipients spooled */

	/* output */
	enum commit_outcome outcome;
	int shadow_hit;			/* shadow: this would have been a duplicate/mismatch */
	char orig_qid[STORE_QID_SIZE];
	uint8_t *claimed;		/* owned by submitter; per recipient: already claimed */
	int error;			/* STORE_E* for COMMIT_FAILED */

	void (*done) (struct commit_req *req);	/* runs in the event loop */
	struct commit_req *next;	/* owned by the commit module while queued */
	struct workq_item item;		/* the way back to the event loop (commit_reap) */
};

struct commit;

struct commit *commit_start(struct store *st, void (*committed) (void *arg, const char *qid),
			    void *arg);
void commit_submit(struct commit *cm, struct commit_req *req);
/*
 * commit_now - commit req on the calling thread when the writer is idle
 * and nothing else is waiting; 1 if done (req decided; its done callback
 * is not called), 0 if it must go to commit_submit(). Delivery writes
 * that rode in it are announced by the caller's next commit_reap()
 * (after its reply is out), by the next commit_now(), or by
 * commit_told_flush().
 */
int commit_now(struct commit *cm, struct commit_req *req);
/* commit_told_flush - announce them once the event loop has stopped (before delivery stops) */
void commit_told_flush(struct commit *cm);
int commit_run(struct commit *cm, void (*fn) (struct store_txn *, void *), void *arg);
int commit_fd(const struct commit *cm);		/* readable when requests are done */
void commit_reap(struct commit *cm);		/* run done callbacks */
/*
 * commit_stopping - the daemon stops (SIGTERM): the writer's waits end
 * early (its deadline_stop_fd(): a commit held while it waits for a
 * synchronous standby is answered as at store.commit_wait); it goes on
 * writing until commit_stop()
 */
void commit_stopping(struct commit *cm);	/* NULL-safe */
int commit_stopped(const struct commit *cm);	/* has commit_stopping() been called? */
void commit_stop(struct commit *cm);		/* finish pending work, join; NULL-safe */

/*
 * commit_decide - the acceptance rules of SPEC section 4 for one request,
 * given its claims as found (claims[i], an empty QID where none is live).
 * Shared by the writer and the event loop's read-only fast path for
 * duplicates. Sets outcome, orig_qid, claimed[] and shadow_hit.
 */
void commit_decide(struct commit_req *req, const struct store_claim *claims);

#endif
