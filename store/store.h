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
 *	Its record goes when its message's story expires (store_hist_expire).
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
	int smtputf8;		/* MAIL declared SMTPUTF8 (RFC 6531) */
	char *client;		/* owned; "helo [ip]" as for Received */
	char *user;		/* owned; AUTH user, or NULL */
	struct store_rcpt *rcpts;	/* owned array */
	size_t n_rcpts;
	char *data;		/* owned; the message as it will be relayed */
	size_t data_len;

	/* what its story starts from (store_hist.c), written once with the message */
	int has_key;
	uint8_t keyhash[STORE_HASH_LEN];	/* key index hash, if has_key */
	int64_t ttl;		/* story kept this long once finished; 0: the default */

	/* delivery state, rewritten by store_msg_update() */
	int attempts;
	int64_t next_attempt;
	int inflight;		/* durable mark: the final dot may have gone out */
};

int store_open(struct store **out, const char *path, uint64_t map_size,
	       char *err, size_t errlen);
/*
 * store_grow - keep zero-filled file ahead of LMDB's last page, so that
 * commits do not grow the file (store_grow.c); for the one thread that
 * does most of the writing, between its commits
 */
int store_grow(struct store *st);
int store_grow_due(struct store *st);	/* would store_grow() write now? cheap, any thread */
/* store_set_map_max - how far the map may grow (store.map_size_max); 0: the disk (store_map.c) */
void store_set_map_max(struct store *st, uint64_t max);
void store_close(struct store *st);	/* NULL-safe */
/*
 * store_broken - a sync failed: every transaction is refused (STORE_EIO)
 * until store_reopen() has opened the store again from what is durable;
 * store_reopen() waits for the transactions in progress, so the caller
 * must hold none (store.c). 0 when the store serves again, else STORE_EIO.
 */
int store_broken(struct store *st);
int store_reopen(struct store *st);
const char *store_strerror(int err);

/*
 * store_claims_get - look claims up in a read transaction (never waits
 * for the writer). found[i] is set to 1 and claims[i] filled for each
 * live claim, 0 otherwise.
 */
int store_claims_get(struct store *st, const uint8_t keyhash[STORE_HASH_LEN],
		     const uint8_t (*hashes)[STORE_HASH_LEN], size_t n, int64_t now,
		     struct store_claim *claims, int *found);

/* write transactions: begin, steps with sticky error, commit (fsync) or abort */
int store_txn_begin(struct store *st, struct store_txn **out);
/* a claim is filed under its key's index hash, then its own hash (store_claim.c) */
int store_txn_claim_get(struct store_txn *t, const uint8_t keyhash[STORE_HASH_LEN],
			const uint8_t hash[STORE_HASH_LEN], int64_t now,
			struct store_claim *c);	/* 0 or STORE_ENOTFOUND */
void store_txn_claim_put(struct store_txn *t, const uint8_t keyhash[STORE_HASH_LEN],
			 const uint8_t hash[STORE_HASH_LEN], const struct store_claim *c);
void store_txn_msg_put(struct store_txn *t, const struct store_msg *m);
/*
 * store_txn_room - before an acceptance's store_txn_msg_put(): STORE_ENOSPC
 * if spooling m with n_claims claims would use the room kept for the
 * delivery writes of what is queued (store_space.c). Delivery writes do
 * not call it, so an outcome can always be recorded.
 */
void store_txn_room(struct store_txn *t, const struct store_msg *m, size_t n_claims);
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
void store_txn_msg_set_inflight(struct store_txn *t, const char *qid, int on);
/* store_msg_update - persist rcpt states, attempts, next_attempt, inflight;
 * when no recipient is STORE_RCPT_QUEUED the message leaves the spool
 * (its claims stay until they expire) */
int store_msg_update(struct store *st, const struct store_msg *m);
/* store_msg_update_many - store_msg_update() for a batch in one transaction;
 * errs[i] per message; returns 0 or one of the errors */
int store_msg_update_many(struct store *st, struct store_msg *const *m, size_t n, int *errs);
void store_txn_msg_update(struct store_txn *t, const struct store_msg *m);
/* store_msg_drop - remove a message from the spool */
int store_msg_drop(struct store *st, const char *qid);

struct store_stats {
	uint64_t claims, queued;
	uint64_t map_size, map_used;	/* LMDB's map now, and what of it is in use */
	uint64_t map_ceiling;		/* how far it may grow: store.map_size_max, the disk */
	uint64_t txns;			/* write transactions committed, ever */
};
int store_stats(struct store *st, struct store_stats *s);

/*
 * Read-only access, for idemrelayctl: the environment is opened with
 * MDB_RDONLY and nothing is created. STORE_ENOTFOUND if there is no
 * store at path.
 */
int store_open_readonly(struct store **out, const char *path, char *err, size_t errlen);

/*
 * store_queue_walk - every queued message in QID order, envelope and
 * delivery state (m->data is NULL, m->data_len its size), decoded in one
 * read transaction; cb must not call the store. A non-zero return from
 * cb stops the walk and is returned.
 */
int store_queue_walk(struct store *st, int (*cb) (void *arg, const struct store_msg *m),
		     void *arg);

/* store_queue_oldest - acceptance time of the oldest queued message; STORE_ENOTFOUND if none */
int store_queue_oldest(struct store *st, int64_t *accepted);

/*
 * History: the story of each message, kept after it leaves the spool so
 * that "what happened to QID / to key K" can still be answered while the
 * key's claims answer duplicates.
 *
 * While the message is queued its story is made from the spool (the
 * message record has its key hash and ttl); it is written at its first
 * update, by store_msg_update() and store_msg_drop() inside their own
 * transactions. It expires ttl after
 * the message left the spool, so it outlives the claims it explains.
 *
 * Claims are filed under a hash of the key alone (relay/keys.c
 * keys_index_hash: no scope, no recipient), then their own hash: a key's
 * claims are one range of the claims B-tree, which is how they are found
 * to show, forget or expire them. A store from before that also has a key
 * index (keys DB) listing its older claims, still read until they go.
 */
struct store_story {
	struct store_msg m;	/* envelope and recipients; data NULL, data_len its size */
	int queued;		/* still spooled: m.next_attempt and m.inflight are live */
	int has_key;
	uint8_t keyhash[STORE_HASH_LEN];	/* key index hash, if has_key */
	int64_t ttl;		/* how long the story is kept once finished */
	int64_t updated;	/* last delivery update, 0 if none yet */
	int64_t finished;	/* when it left the spool, 0 while queued */
	int64_t expires;	/* when the story goes, 0 while queued */
	int64_t forgotten;	/* when its key was forgotten, 0 if not */
	int dropped;		/* it left the spool by store_msg_drop() */
	uint32_t duplicates;	/* duplicates answered with this QID (as persisted) */
	uint32_t mismatches;	/* other content under its key, refused naming it */
};

/* store_story_get - a QID's story, live spool state merged in; STORE_ENOTFOUND */
int store_story_get(struct store *st, const char *qid, struct store_story *s);
void store_story_free(struct store_story *s);	/* NULL-safe */

/* store_key_qids - the QIDs that hold claims under a key, oldest first (owned array) */
int store_key_qids(struct store *st, const uint8_t keyhash[STORE_HASH_LEN],
		   char (**qids)[STORE_QID_SIZE], size_t *n);

/*
 * store_key_forget - delete a key's claims, so that its next submission
 * is new; user non-NULL: only claims of messages submitted by that AUTH
 * user. The index entries go too, and each story notes when. Returns
 * STORE_ENOTFOUND if the key has no entry (for that user).
 */
struct store_forget {
	size_t claims;				/* claims deleted */
	char (*qids)[STORE_QID_SIZE];		/* owned; the messages concerned */
	size_t n_qids;
};
int store_key_forget(struct store *st, const uint8_t keyhash[STORE_HASH_LEN],
		     const char *user, int64_t now, struct store_forget *out);
void store_forget_free(struct store_forget *f);	/* NULL-safe */

/* store_key_queued - the key's messages still queued (that user's): an owned array, maybe empty */
int store_key_queued(struct store *st, const uint8_t keyhash[STORE_HASH_LEN],
		     const char *user, char (**qids)[STORE_QID_SIZE], size_t *n);

/* store_hist_count - add answered duplicates and mismatches to stories, in one transaction */
struct store_count {
	char qid[STORE_QID_SIZE];
	uint32_t duplicates, mismatches;
};
int store_hist_count(struct store *st, const struct store_count *c, size_t n);

/*
 * store_hist_expire - delete up to max stories past their expiry, with
 * their claims (and an old store's key index entries)
 */
int store_hist_expire(struct store *st, int64_t now, size_t max);

/* store_hist_stats - how many stories are kept, and claims findable by their key */
int store_hist_stats(struct store *st, uint64_t *stories, uint64_t *keys);

#endif
