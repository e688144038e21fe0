/*
 * NAME
 *	store 3h
 * SUMMARY
 *	the store interface: claims, spool and delivery queue
 * DESCRIPTION
 *	What acceptance, delivery, control and idemrelayctl call; they do
 *	not know which backend is behind it. Two backends implement it
 *	(store_backend.h): LMDB in store/lmdb/ (the embedded default: one
 *	node, its own disk) and PostgreSQL in store/pg/ (several nodes
 *	share one database). store_open() opens the one store.backend
 *	names; from then on only these functions are used.
 *	Each backend translates its own errors at the boundary into the
 *	STORE_E* codes below.
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
 *	any function; write transactions serialise (LMDB's writer lock, or
 *	PostgreSQL's row and advisory locks).
 *
 *	Several nodes (STORE_CAP_SHARED): other nodes accept into the same
 *	store and deliver from it. A node delivers a message only under a
 *	lease, given by store_txn_msg_put() to the accepting node and by
 *	store_queue_take() to any node once the message is due; every
 *	later delivery write of it is fenced by the lease and fails with
 *	STORE_ELEASE when another node has taken it since.
 */
#ifndef STORE_STORE_H
#define STORE_STORE_H

#include <stddef.h>
#include <stdint.h>

#define STORE_HASH_LEN	32
#define STORE_QID_SIZE	24	/* QID text plus NUL, room to spare */

/* return codes: 0 is success */
#define STORE_ENOTFOUND	(-2)	/* no such claim or message */
#define STORE_ENOSPC	(-3)	/* no room left: the store's own (store_stats space), or the disk's */
#define STORE_EIO	(-4)	/* I/O failure, or the store refuses until store_upkeep() */
#define STORE_EINVAL	(-5)	/* corrupt record, bad argument */
#define STORE_ELEASE	(-6)	/* shared store: the message's lease went to another node */
#define STORE_EAGAIN	(-7)	/* the database is unreachable, or a commit's outcome unknown;
				 * STORE_WRITER: another process has the store open;
				 * STORE_NODE on LMDB: another daemon has it */

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
	char *route;		/* owned; the route chosen at acceptance, NULL: the
				 * default upstream */
	struct store_rcpt *rcpts;	/* owned array */
	size_t n_rcpts;
	char *data;		/* owned; the message as it will be relayed */
	size_t data_len;

	/* what its story starts from, written once with the message */
	int has_key;
	uint8_t keyhash[STORE_HASH_LEN];	/* key index hash, if has_key */
	int64_t ttl;		/* story kept this long once finished; 0: the default */
	int notice;		/* a bounce's non-delivery notice, put with its
				 * outcome: the room it may use (store_txn_msg_put),
				 * its commit never voided (STORE_CAP_SHARED); not stored */

	/* delivery state, rewritten by store_msg_update() */
	int attempts;
	int64_t next_attempt;
	int inflight;		/* durable mark: the final dot may have gone out */
	int64_t lease;		/* shared store: the lease it was loaded under (the
				 * backend's token, for store_msg_revive); 0 none */
	int held;		/* on hold (store_msg_change): never delivered until released */
	char *lease_node;	/* owned; shared store, queue walk and story: the node
				 * whose lease it is under now, or NULL */
	int64_t lease_since;	/* when that node took it */
};

/*
 * store_open - the backend store.backend names (store_open.c, the one
 * place that knows them), opened for the daemon's node (STORE_NODE), for
 * reading only (STORE_READER: idemrelayctl, -t) or for writing an
 * existing store while the daemon is stopped (STORE_WRITER; on LMDB,
 * STORE_EAGAIN while another process has it open)
 */
struct conf;
enum store_role { STORE_NODE, STORE_READER, STORE_WRITER };
int store_open(struct store **out, const struct conf *cf, enum store_role role,
	       char *err, size_t errlen);
/* store_dir - the directory on this node's disk the store lives in (store.path); NULL: none */
const char *store_dir(const struct conf *cf);
/* store_name - the backend of the store cf names, open or not: "lmdb", "postgresql" */
const char *store_name(const struct conf *cf);

/*
 * store_caps - what the backend declares it can do, STORE_CAP_* bits.
 * STORE_CAP_SHARED: several nodes accept into it and deliver from it:
 * node numbers, leases, a queue they take from, keys locked in one order
 * (store_txn_begin); without it those calls do nothing. STORE_CAP_LOCAL_READS:
 * a read never waits on the network, so the event loop may read (answer
 * a duplicate itself, store_claims_get) instead of leaving it to the writer.
 * STORE_CAP_OWN_SPACE: it manages room of its own on this node (LMDB's
 * map): it keeps room for delivery writes (store_txn_msg_put), has upkeep
 * to do (store_upkeep) and reports its space (store_stats); without it
 * no room is kept, upkeep does nothing and the space is 0.
 */
#define STORE_CAP_SHARED	0x1
#define STORE_CAP_LOCAL_READS	0x2
#define STORE_CAP_OWN_SPACE	0x4
unsigned store_caps(const struct store *st);
void store_close(struct store *st);	/* NULL-safe */

/*
 * Health, for the writer thread: store_health() says, cheaply and from
 * any thread, what the store is fit for now (STORE_H* bits):
 * STORE_HSTALLED: commits wait now (for a synchronous standby, on
 * PostgreSQL): one made now would likely wait too, up to
 * store.commit_wait. STORE_HREFUSING: every transaction is refused
 * (STORE_EIO) until store_upkeep() has opened the store again from what
 * is durable (LMDB, after a failed sync). STORE_HUPKEEP: store_upkeep()
 * has work.
 *
 * store_upkeep() does what the backend needs done outside any
 * transaction, between the writer's commits (LMDB: keep zero-filled file
 * ahead of its last page, so that commits do not grow the file; grow the
 * map up to store.map_size_max; reopen a store that refuses, which waits
 * for the transactions in progress, so the caller must hold none). It
 * warns by itself. 0 when the store serves, else a STORE_E* code: the
 * store still refuses, or the room could not be made (ask again later).
 */
#define STORE_HSTALLED	0x1
#define STORE_HREFUSING	0x2
#define STORE_HUPKEEP	0x4
unsigned store_health(struct store *st);
int store_upkeep(struct store *st);
const char *store_strerror(int err);

/*
 * store_claims_get - look n claims of a key up (a claim is filed under
 * its key's index hash, then its own hash; live as store_rule.c says).
 * claims[i] is filled for each live claim, and zeroed (an empty QID)
 * otherwise. t: inside that write transaction, seeing its own writes,
 * a failure being its sticky error (st is not used). t NULL: in a read
 * transaction of st's own, which never waits for the writer; only with
 * STORE_CAP_LOCAL_READS (else STORE_EINVAL): elsewhere a claim is read
 * in the writer's transaction.
 */
int store_claims_get(struct store *st, struct store_txn *t, const uint8_t keyhash[STORE_HASH_LEN],
		     const uint8_t (*hashes)[STORE_HASH_LEN], size_t n, int64_t now,
		     struct store_claim *claims);

/*
 * write transactions: begin, steps with sticky error, commit (fsync) or
 * abort. keys (n of them; NULL, 0: none said): the keys the transaction
 * is about to claim under; a shared store locks them in one order (racing
 * batches on other nodes never deadlock) and reads their claims in one
 * round trip, a failure being the transaction's sticky error; a store of
 * one writer has nothing to lock.
 */
int store_txn_begin(struct store *st, const uint8_t (*keys)[STORE_HASH_LEN], size_t n,
		    struct store_txn **out);
void store_txn_claim_put(struct store_txn *t, const uint8_t keyhash[STORE_HASH_LEN],
			 const uint8_t hash[STORE_HASH_LEN], const struct store_claim *c);
/*
 * store_txn_replay - the batch answers with the claim under hash, which
 * store_claims_get() found (a duplicate, the replayed part of a
 * partial; not a mismatch refused, nor a claim a new QID replaces).
 * STORE_CAP_SHARED: another node that answered that claim's batch 451
 * (its commit's outcome unknown) leaves its message to be delivered
 * instead of voiding it; a store of one node has nothing to record.
 */
void store_txn_replay(struct store_txn *t, const uint8_t keyhash[STORE_HASH_LEN],
		      const uint8_t hash[STORE_HASH_LEN]);
/*
 * store_txn_msg_put - spool a new message. STORE_CAP_OWN_SPACE: it fails
 * with STORE_ENOSPC if m, with a claim for each recipient if it has a
 * key, would use the room kept for the delivery writes of what is queued;
 * delivery writes may use that room, so an outcome can always be recorded,
 * and so may a bounce's non-delivery notice (m->notice), all but the
 * reserve's floor, which stays for the outcomes: a notice that would
 * touch it fails with STORE_ENOSPC.
 */
void store_txn_msg_put(struct store_txn *t, const struct store_msg *m);
int store_txn_error(const struct store_txn *t);
int store_txn_commit(struct store_txn *t);	/* frees t; aborts if failed */

/*
 * store_node_id - the node's number in a shared store (0..255), unique
 * among the nodes while it runs, for QIDs that never collide across
 * nodes; -1 for a store of one node
 */
int store_node_id(struct store *st);

/* delivery */
int store_msg_load(struct store *st, const char *qid, struct store_msg *m);
void store_msg_free(struct store_msg *m);	/* frees the fields; NULL-safe */
int store_msg_set_inflight(struct store *st, const char *qid, int on);	/* durable */
void store_txn_msg_set_inflight(struct store_txn *t, const char *qid, int on);
/* store_msg_update - persist rcpt states, attempts, next_attempt, inflight;
 * when no recipient is STORE_RCPT_QUEUED the message leaves the spool
 * (its claims stay until they expire) */
int store_msg_update(struct store *st, const struct store_msg *m);
/* store_msg_update_many - store_msg_update() for a batch in one transaction;
 * errs[i] per message (a lost lease fails its message alone); returns 0 or
 * one of the errors */
int store_msg_update_many(struct store *st, struct store_msg *const *m, size_t n, int *errs);
void store_txn_msg_update(struct store_txn *t, const struct store_msg *m);
/* store_msg_drop - remove a message from the spool */
int store_msg_drop(struct store *st, const char *qid);
/*
 * store_msg_change - an operator's change to a queued message, for every
 * node, in one transaction. hold 1 puts it on hold: it is never handed
 * to delivery (not listed at start, not taken from the shared queue, and
 * delivery skips one it loads held) and keeps its claims, as every
 * queued message does; the delivery writes leave the mark as they find
 * it. hold 0 releases it, -1 leaves it as it is. set_route: its next
 * attempt goes to route (NULL: the default upstream; idemrelayctl
 * reroute). due > 0: its next attempt is at due at the latest (a
 * retry; a reroute's, since the time it had was the old route's).
 * STORE_ENOTFOUND if qid is not queued.
 *
 * qid NULL: due alone (else STORE_EINVAL), for every queued message not
 * on hold (a flush). Only a shared store keeps a time for every node;
 * on a store of one node, whose queue delivery's schedule is, it does
 * nothing.
 */
struct store_change {
	int hold;		/* 1 on hold, 0 released, -1 as it is */
	int set_route;		/* route replaces the message's route */
	const char *route;	/* NULL: the default upstream */
	int64_t due;		/* > 0: next attempt no later */
};
int store_msg_change(struct store *st, const char *qid, const struct store_change *c);
/*
 * store_msg_revive - a shared store: this node loaded m under lease
 * m->lease, wrote its inflight mark (or the mark's commit had an unknown
 * outcome) and sent no final dot; its outcome was then refused, the
 * lease lost. If another node has since found that very mark, taken it
 * for an ambiguous delivery and finished the message unconfirmed, and
 * nothing else happened to it (no newer mark, not dropped, its key not
 * forgotten), the message is queued again, due now for any node: its
 * recipients the verdict made unconfirmed get m's state and reply back,
 * its attempts m's, and its data m's if the verdict let it go. In one
 * transaction. 0 revived; STORE_ELEASE another node holds it with that
 * mark still on it, its verdict not made yet (ask again); STORE_ENOTFOUND
 * nothing to revive (always so on a store of one node, which never loses
 * a lease); or an error (ask again).
 */
int store_msg_revive(struct store *st, const struct store_msg *m);

/*
 * Several nodes (STORE_CAP_SHARED): a deferred message goes back to the
 * shared queue (its lease is given up by the store_msg_update() that
 * defers it), and due messages are taken with store_queue_take(), which
 * leases up to max of them to this node and calls cb for each (m has its
 * qid and next_attempt only), passing over those whose route is one of
 * the n_skip in skip (a NULL one: the default upstream), the routes this
 * node would not send to now.
 * store_lease_renew() extends every lease this node holds. On a store of
 * one node: 0, and the three do nothing.
 */
int store_queue_take(struct store *st, int64_t now, size_t max, const char *const *skip,
		     size_t n_skip, int (*cb) (void *arg, const struct store_msg *m), void *arg);
int store_lease_renew(struct store *st);
/*
 * store_lease_release - this node is done with qid without a write that
 * gave its lease up: let it go. lease: the one it was loaded under
 * (store_msg.lease), kept if the node has leased it anew since; 0: the
 * one held now, whichever
 */
void store_lease_release(struct store *st, const char *qid, int64_t lease);

/*
 * store_stats - the figures, the same for every backend, in one call.
 * queued and oldest: the spool (oldest: the acceptance time of the
 * oldest queued message, 0 if none). last_qid: the greatest QID ever
 * spooled ("" if none), for monotonic QIDs. nodes: how many nodes run on
 * the store now, this one included (a shared store: those holding their
 * node's lock); 1 on a store of one node. stories only when what has
 * STORE_STATS_STORIES (it may cost a walk of the queue, so a scrape
 * does not ask): how many stories are kept. STORE_STATS_NODES alone: nodes only (and reach), without reading
 * anything else, for delivery's count every few seconds. space: the room a store manages itself (LMDB's map: its size now,
 * what of it is in use, how far it may grow: store.map_size_max, the
 * disk); all 0 where the room is the database's own (PostgreSQL). reach:
 * whether a store across the network can be reached and how its commits
 * wait for replication; all 0 for a store on the node's own disk. reach
 * is filled even when store_stats() fails.
 */
struct store_space {
	uint64_t size, used, ceiling;
};

struct store_reach {
	uint64_t outages;		/* times it became unreachable since start */
	uint64_t repl_waiting;		/* commits waiting for replication now */
	uint64_t repl_waits;		/* times commits started to wait for it */
	uint64_t voided;		/* batches answered 451 while their commit waited */
};

struct store_stats {
	uint64_t claims, queued;
	int64_t oldest;			/* accepted, of the oldest queued message; 0 none */
	char last_qid[STORE_QID_SIZE];	/* the greatest ever spooled; "" none */
	int nodes;			/* running on it now */
	uint64_t stories;		/* STORE_STATS_STORIES only */
	struct store_space space;
	struct store_reach reach;
};
#define STORE_STATS_STORIES	0x1
#define STORE_STATS_NODES	0x2	/* the nodes alive, nothing else */
int store_stats(struct store *st, struct store_stats *s, unsigned what);

/*
 * store_queue_walk - queued messages in QID order, to cb; a non-zero
 * return from cb stops the walk and is returned. how 0: every queued
 * message, envelope and delivery state (m->data is NULL, m->data_len its
 * size), decoded in one read transaction; cb must not call the store.
 * STORE_WALK_MINE: what this node is to deliver at start (on a shared
 * store nothing: its taker leases what is due), not what is held; m has
 * its qid and next_attempt only, and cb may call the store.
 */
#define STORE_WALK_MINE	0x1
int store_queue_walk(struct store *st, unsigned how,
		     int (*cb) (void *arg, const struct store_msg *m), void *arg);

/*
 * History: the story of each message, kept after it leaves the spool so
 * that "what happened to QID / to key K" can still be answered while the
 * key's claims answer duplicates.
 *
 * While the message is queued its story is made from the spool (the
 * message record has its key hash and ttl); it is written at its first
 * update, by store_msg_update() and store_msg_drop() inside their own
 * transactions. It expires ttl after the message left the spool
 * (store_story_ttl()), so it outlives the claims it explains.
 *
 * Claims are filed under a hash of the key alone (queue/keys.c
 * keys_index_hash: no scope, no recipient), then their own hash, which
 * is how a key's claims are found to show, forget or expire them.
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
 * their claims, in one short transaction: how many it deleted (max: call
 * again, more may be due), or a STORE_E* code
 */
int store_hist_expire(struct store *st, int64_t now, size_t max);

#endif
