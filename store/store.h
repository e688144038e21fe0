/*
 * NAME
 *	store 3h
 * SUMMARY
 *	the LMDB store: claims, spool and delivery queue
 * DESCRIPTION
 *	One module owns all LMDB access; no MDB_* type leaks out. Errors are
 *	translated at the boundary into the STORE_E* codes below.
 *
 *	Claims are keyed by a 32-byte hash (the caller hashes scope, key and
 *	recipient) and say which QID first took that recipient for that key,
 *	with the submission's fingerprint. A claim is live until its expiry
 *	time, and also after it for as long as its message is still queued.
 *
 *	The spool holds each queued message: envelope, per-recipient state
 *	and content. Message, envelope and claims go into one write
 *	transaction (store_txn_*), committed with fsync: nothing is
 *	half-written, and a commit that fails leaves the store as it was.
 *
 *	A write transaction carries a sticky error: after the first failure
 *	every later step is a no-op, and store_txn_commit() reports it.
 *
 *	All times are Unix microseconds. Thread-safety: any thread may call
 *	any function; write transactions serialise on LMDB's writer lock.
 */
#ifndef STORE_STORE_H
#define STORE_STORE_H

#include <stddef.h>
#include <stdint.h>

#define STORE_HASH_LEN	32
#define STORE_QID_SIZE	24	/* QID text plus NUL, room to spare */

/* return codes: 0 is success */
#define STORE_ENOTFOUND	(-2)	/* no such claim or message */
#define STORE_ENOSPC	(-3)	/* map full or disk full */
#define STORE_EIO	(-4)	/* I/O or other LMDB failure */
#define STORE_EINVAL	(-5)	/* corrupt record, bad argument */

struct store;
struct store_txn;

struct store_claim {
	char qid[STORE_QID_SIZE];	/* the message that took it */
	uint8_t fingerprint[STORE_HASH_LEN];
	int64_t accepted;
	int64_t expires;
};

enum store_rcpt_state {
	STORE_RCPT_QUEUED,	/* not yet delivered (deferred counts here) */
	STORE_RCPT_SENT,	/* upstream said 2xx */
	STORE_RCPT_BOUNCED,	/* upstream said 5xx, or gave up */
	STORE_RCPT_UNCONFIRMED,	/* ambiguous, assumed delivered */
};

struct store_rcpt {
	char *addr;		/* owned */
	int notify;		/* SMTP_NOTIFY_* bits */
	char *orcpt;		/* owned, or NULL */
	enum store_rcpt_state state;
	char *reply;		/* owned, or NULL: last upstream reply */
};

struct store_msg {
	char qid[STORE_QID_SIZE];
	int64_t accepted;	/* when the 250 was earned */
	char *from;		/* owned; "" for the null sender */
	char *envid;		/* owned, or NULL */
	int ret;		/* enum smtp_ret */
	int body;		/* enum smtp_body */
	char *client;		/* owned; "helo [ip]" as for Received */
	char *user;		/* owned; AUTH user, or NULL */
	struct store_rcpt *rcpts;	/* owned array */
	size_t n_rcpts;
	char *data;		/* owned; the message as it will be relayed */
	size_t data_len;

	/* delivery state, rewritten by store_msg_update() */
	int attempts;
	int64_t next_attempt;
	int inflight;		/* durable mark: the final dot may have gone out */
};

int store_open(struct store **out, const char *path, uint64_t map_size,
	       char *err, size_t errlen);
void store_close(struct store *st);	/* NULL-safe */
const char *store_strerror(int err);

/*
 * store_claims_get - look claims up in a read transaction (never waits
 * for the writer). found[i] is set to 1 and claims[i] filled for each
 * live claim, 0 otherwise.
 */
int store_claims_get(struct store *st, const uint8_t (*hashes)[STORE_HASH_LEN],
		     size_t n, int64_t now, struct store_claim *claims, int *found);

/* write transactions: begin, steps with sticky error, commit (fsync) or abort */
int store_txn_begin(struct store *st, struct store_txn **out);
int store_txn_claim_get(struct store_txn *t, const uint8_t hash[STORE_HASH_LEN],
			int64_t now, struct store_claim *c);	/* 0 or STORE_ENOTFOUND */
void store_txn_claim_put(struct store_txn *t, const uint8_t hash[STORE_HASH_LEN],
			 const struct store_claim *c);
void store_txn_msg_put(struct store_txn *t, const struct store_msg *m);
int store_txn_error(const struct store_txn *t);
int store_txn_commit(struct store_txn *t);	/* frees t; aborts if failed */
void store_txn_abort(struct store_txn *t);	/* frees t; NULL-safe */

/* store_last_qid - the greatest QID ever spooled ("" if none), for monotonic QIDs */
int store_last_qid(struct store *st, char qid[STORE_QID_SIZE]);

/* delivery */
int store_queue_list(struct store *st,
		     int (*cb) (void *arg, const char *qid, int64_t next_attempt),
		     void *arg);
int store_msg_load(struct store *st, const char *qid, struct store_msg *m);
void store_msg_free(struct store_msg *m);	/* frees the fields; NULL-safe */
int store_msg_set_inflight(struct store *st, const char *qid, int on);	/* durable */
/* store_msg_update - persist rcpt states, attempts, next_attempt, inflight;
 * when no recipient is STORE_RCPT_QUEUED the message leaves the spool
 * (its claims stay until they expire) */
int store_msg_update(struct store *st, const struct store_msg *m);
/* store_msg_drop - remove a message from the spool */
int store_msg_drop(struct store *st, const char *qid);

/* store_expire - delete up to max expired claims whose message left the spool */
int store_expire(struct store *st, int64_t now, size_t max);

struct store_stats {
	uint64_t claims, queued;
	uint64_t map_size, map_used;
};
int store_stats(struct store *st, struct store_stats *s);

#endif
