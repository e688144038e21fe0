/*
 * NAME
 *	store_int 3h
 * SUMMARY
 *	internals of the LMDB backend; never included outside store/lmdb/
 * DESCRIPTION
 *	The LMDB handles live here, so that MDB_* types stay inside the
 *	store module. The record codec (store_codec.c) knows nothing of
 *	LMDB: it turns structs into bytes and back.
 */
#ifndef STORE_LMDB_STORE_INT_H
#define STORE_LMDB_STORE_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <lmdb.h>

#include "../store_backend.h"
#include "store_lmdb.h"
#include "../../util/buf.h"

struct journal;
struct lmdb_txn;

/* store_stage.c: a small B-tree that records are written to, moved to a big one in bulk */
struct lmdb_stage {
	MDB_dbi big;		/* the B-tree it stages for: claims, hist */
	MDB_dbi small;		/* cnew, hnew */
	int has_small;		/* small is open (0.1's store, read-only, has none yet) */
	const char *what;	/* its records, for the log: "claim", "story" */
	/* move - a record about to move: 0 (what goes with it written), STORE_EINVAL corrupt */
	int (*move) (struct lmdb_txn *t, const MDB_val *key, const MDB_val *val);
};

struct lmdb_store {
	struct store base;	/* the interface's table: first */
	MDB_env *env;		/* owned */
	struct lmdb_stage claims;	/* claims: hash -> claim record, staged in cnew */
	MDB_dbi msg;		/* qid -> immutable message record */
	MDB_dbi queue;		/* qid -> mutable delivery state record */
	MDB_dbi meta;		/* name -> value ("last_qid") */
	struct lmdb_stage hist;	/* hist: qid -> history record (the story), staged in hnew */
	MDB_dbi hexpiry;	/* history expiry key -> empty, in time order */
	uint64_t grown_to;	/* store_grow.c: file size last seen, made or tried for */
	struct journal *j;	/* store_journal.c; NULL: every commit synced without it */
	int lockfd;		/* store_compact.c: lock.mdb, flock'd shared while open; -1 none */
	int ownfd;		/* the directory, flock'd by an open that writes; -1 none */

	/* store_lmdb.c: a failed sync and the reopen that follows it */
	pthread_rwlock_t gate;	/* every transaction holds it shared; lmdb_reopen() alone */
	int broken;		/* atomic: a sync failed; no transaction until reopened */
	uint64_t void_pos;	/* data.mdb offset of a failed record's txnid to zero; 0 none */
	char *path;		/* owned: the environment directory, for the reopen */
	int grow_wanted;	/* store_space.c: a new message was refused for room (atomic) */
	/* store_map.c: the map grows at run time, with the gate held alone */
	uint64_t total;		/* the map with the journal's region: store.map_size, as
				 * grown; 0 read-only (the file's) */
	uint64_t map_max;	/* store.map_size_max; 0: as far as the disk allows */
	uint64_t checked_last;	/* last page when the map was last found roomy enough */
	int warned;		/* fullness of the ceiling last warned about: 0, 80, 95 */
	/* store_space.c: recipients of the queued messages (atomic), for the reserve */
	uint64_t queued_rcpts;
};

struct lmdb_txn {
	struct store_txn base;	/* the interface's table: first */
	struct lmdb_store *st;	/* not owned */
	MDB_txn *txn;		/* owned until commit or abort */
	struct buf redo;	/* store_journal.c: the puts and deletes, when st->j */
	size_t resv_off;	/* ... where the value of an MDB_RESERVE put goes */
	void *resv_ptr;		/* ... and where LMDB has it; NULL: none pending */
	size_t resv_len;
	int no_redo;		/* ... too large to journal: synced at commit */
	uint64_t room_queued;	/* store_space.c: messages queued before it, and those it spools */
	uint64_t room_rcpts;	/* ... their recipients */
	int64_t rcpt_delta;	/* recipients it adds to the queue (or takes away) */
	uint64_t room_pages;	/* ... pages those it spools may take; 0 before the first */
	uint64_t room_free;	/* ... free pages (tail and freelist), once counted */
	int room_free_known;
};

/* lmdb_of - the LMDB handle behind the interface's */
static inline struct lmdb_store *lmdb_of(struct store *st)
{
	return (struct lmdb_store *) st;
}

/* store_health() and store_upkeep() (store_grow.c), and store_lmdb.c's failed sync */
STORE_ENTRY(health) lmdb_health;
STORE_ENTRY(upkeep) lmdb_upkeep;
int lmdb_broken(struct store *base);
int lmdb_reopen(struct store *base);	/* 0 serving again, or STORE_EIO */

/* the interface's entries (store_backend.h) that live outside store_lmdb.c */
STORE_ENTRY(claims_get) lmdb_claims_get;
STORE_ENTRY(txn_begin) lmdb_txn_begin;
STORE_ENTRY(txn_claim_put) lmdb_txn_claim_put;
STORE_ENTRY(txn_msg_put) lmdb_txn_msg_put;
STORE_ENTRY(txn_msg_set_inflight) lmdb_txn_msg_set_inflight;
STORE_ENTRY(txn_msg_update) lmdb_txn_msg_update;
STORE_ENTRY(txn_commit) lmdb_txn_commit;
STORE_ENTRY(msg_load) lmdb_msg_load;
STORE_ENTRY(msg_change) lmdb_msg_change;
STORE_ENTRY(msg_drop) lmdb_msg_drop;
STORE_ENTRY(queue_walk) lmdb_queue_walk;
void lmdb_queue_oldest(struct lmdb_store *st, MDB_txn *txn, int64_t *accepted);
STORE_ENTRY(story_get) lmdb_story_get;
STORE_ENTRY(key_qids) lmdb_key_qids;
STORE_ENTRY(key_forget) lmdb_key_forget;
STORE_ENTRY(hist_count) lmdb_hist_count;
STORE_ENTRY(hist_expire) lmdb_hist_expire;
extern const struct store_ops lmdb_ops;

/* store_lmdb.c */
int lmdb_mdb_error(int rc, const char *what);
int lmdb_read_begin(struct lmdb_store *st, MDB_txn **txn);
void lmdb_read_end(struct lmdb_store *st, MDB_txn *txn);	/* ends what lmdb_read_begin began */
int lmdb_gate_enter(struct lmdb_store *st);	/* 0, or STORE_EIO when broken */
void lmdb_gate_leave(struct lmdb_store *st);
void lmdb_break(struct lmdb_store *st, const char *why);	/* a sync failed: stop, reopen */
int lmdb_qid_key(const char *qid, MDB_val *key);
int lmdb_key_qid(const MDB_val *key, char qid[STORE_QID_SIZE]);	/* the other way */
#define META_LAST_QID	"last_qid"	/* meta DB: the greatest QID that left with no story */
#define META_FORMAT	"format"	/* meta DB: the store's format, decimal text */
#define META_CLAIMS_BY_KEY "claims_by_key"	/* meta DB: written by 0.1 (lmdb_format()) */
/*
 * LMDB_FORMAT - the format this build writes. 2: claims and stories are
 * staged in cnew and hnew, which a build before them would not read (it
 * would find no claim there, and send a retried message again); 1, not
 * recorded, is idemrelay 0.1's. A store of a greater format is refused at
 * open; a writable open records ours before anything a build of the
 * older format would misread.
 */
#define LMDB_FORMAT	2
#define LMDB_TEXT_(n)	#n
#define LMDB_TEXT(n)	LMDB_TEXT_(n)	/* a macro's value as a string literal */

int lmdb_meta8(struct lmdb_store *st, const char *name, uint8_t v[8]);	/* an 8-byte meta value */

/* store_compact.c: the lock every open holds, and the compaction at start */
/* name ("lock.mdb", or "" for the directory) in the store at path, flock'd how; -1 */
int lmdb_lock(const char *path, const char *name, int how);
/* store_lmdb.c: the environment opened again, as it was, with its journal; *step why not */
int lmdb_env_again(struct lmdb_store *st, const char **step);
void lmdb_env_shut(struct lmdb_store *st);	/* the journal and the environment closed */

/* store_grow.c */
int lmdb_fill_zeros(int fd, uint64_t from, uint64_t to);	/* a page per pwrite; 0 or errno */

/* store_map.c: the map grows at run time */
#define META_MAP_SIZE	"map_size"	/* meta DB: the total the map was grown to */
uint64_t lmdb_map_jbase(uint64_t total);	/* where the journal goes in a map of total; 0 none */
uint64_t lmdb_map_size(uint64_t total);	/* LMDB's own map in a map of total: up to the journal */
/* lmdb_map_grow - grow the map to total; steps < 3 stops after that many (tests) */
int lmdb_map_grow(struct lmdb_store *st, uint64_t total, int steps);
int lmdb_map_due(struct lmdb_store *st, uint64_t pages, uint64_t last);
int lmdb_map_check(struct lmdb_store *st);
uint64_t lmdb_map_ceiling(struct lmdb_store *st);

/* store_journal.c: every write of a store_txn goes through these two */
#define STORE_JOURNAL_SIZE	(8u << 20)	/* taken from the end of store.map_size */
int lmdb_put(struct lmdb_txn *t, MDB_dbi dbi, MDB_val *key, MDB_val *val, unsigned flags);
int lmdb_del(struct lmdb_txn *t, MDB_dbi dbi, MDB_val *key, MDB_val *val);
int journal_open(struct lmdb_store *st);
void journal_close(struct lmdb_store *st);
int journal_commit(struct lmdb_txn *t);
int journal_region_new(struct lmdb_store *st, uint64_t base, uint64_t *id);
int journal_move_commit(struct lmdb_store *st, MDB_txn *txn, uint64_t base, uint64_t id);
int journal_region_copy(struct lmdb_store *st, int fd);

/* store_space.c: the reserve for delivery writes */
#define STORE_RESERVE_PER_MSG	1024	/* bytes: a queued message's story and expiry entry */
#define STORE_RESERVE_PER_RCPT	192	/* ... and each recipient's address and final reply */
/* lmdb_space_geometry - page size, the map's bytes, pages used up to the last; 0 or a STORE_E* */
int lmdb_space_geometry(struct lmdb_store *st, uint64_t *psize, uint64_t *map, uint64_t *last);
int lmdb_space_freelist(struct lmdb_store *st, uint64_t *n);
uint64_t lmdb_space_reserve(uint64_t psize, uint64_t pages, uint64_t queued, uint64_t rcpts);
int lmdb_space_count(struct lmdb_store *st);
int lmdb_space_room(struct lmdb_txn *t, const struct store_msg *m);	/* 0 or STORE_ENOSPC */

/* store_txn.c */
int lmdb_begin(struct lmdb_store *st, struct lmdb_txn **out);

/* store_stage.c: a record read from, put in, moved out of the small B-tree */
int lmdb_stage_get(const struct lmdb_stage *sg, MDB_txn *txn, MDB_val *key, MDB_val *val,
		   MDB_dbi *dbi);
int lmdb_stage_put(struct lmdb_txn *t, const struct lmdb_stage *sg, MDB_val *key, MDB_val *val,
		   unsigned flags, int *staged);
int lmdb_stage_move(struct lmdb_txn *t, const struct lmdb_stage *sg);

/* store_codec.c: record encoding, portable, with a version byte */
#define STORE_CLAIM_REC_LEN	(1 + 1 + (STORE_QID_SIZE - 1) + STORE_HASH_LEN + 8 + 8)

size_t lmdb_claim_encode(uint8_t out[STORE_CLAIM_REC_LEN], const struct store_claim *c);
int lmdb_claim_decode(const void *p, size_t len, struct store_claim *c);

size_t lmdb_msg_rec_size(const struct store_msg *m);
void lmdb_msg_rec_encode(void *out, size_t len, const struct store_msg *m);
int lmdb_msg_rec_decode(const void *p, size_t len, struct store_msg *m, int with_data);

size_t lmdb_queue_rec_size(const struct store_msg *m);
void lmdb_queue_rec_encode(void *out, size_t len, const struct store_msg *m);
int lmdb_queue_rec_decode(const void *p, size_t len, struct store_msg *m);
int lmdb_queue_rec_peek(const void *p, size_t len, size_t *n_rcpts, int64_t *next_attempt,
			int *held);
#define LMDB_QUEUE_INFLIGHT	1	/* the delivery state record's flags */
#define LMDB_QUEUE_HELD		2
#define LMDB_QUEUE_DUE		0	/* no flag: its next attempt */
int lmdb_queue_rec_patch(void *p, size_t len, unsigned what, int64_t v);

size_t lmdb_hist_rec_size(const struct store_story *s);
void lmdb_hist_rec_encode(void *out, size_t len, const struct store_story *s);
int lmdb_hist_rec_decode(const void *p, size_t len, struct store_story *s);

/* store_msg.c */
int lmdb_last_qid_note(struct lmdb_txn *t, const MDB_val *key, int story);
int lmdb_spool_read(struct lmdb_store *st, MDB_txn *txn, const MDB_val *key,
		    struct store_msg *m, int with_data);

/* store_hist.c: the story, kept in step by the spool's own transactions */
int lmdb_story_move(struct lmdb_txn *t, const MDB_val *key, const MDB_val *val);	/* hnew's */
void lmdb_hist_update(struct lmdb_txn *t, const struct store_msg *m, int queued);
void lmdb_hist_drop(struct lmdb_txn *t, const char *qid);
int lmdb_hist_read(struct lmdb_store *st, MDB_txn *txn, const char *qid, struct store_story *s);
int lmdb_hist_write(struct lmdb_txn *t, const struct store_story *s);
int lmdb_hist_stories(struct lmdb_store *st, MDB_txn *txn, uint64_t *n);

/* store_claim.c */
#define STORE_CLAIM_KEY_LEN	(2 * STORE_HASH_LEN)	/* key index hash, claim hash */
void lmdb_claim_key(uint8_t out[STORE_CLAIM_KEY_LEN], const uint8_t keyhash[STORE_HASH_LEN],
		     const uint8_t hash[STORE_HASH_LEN]);
int lmdb_claim_move(struct lmdb_txn *t, const MDB_val *key, const MDB_val *val);	/* cnew's */

/* store_keys.c: a story expired at when: its claims and its entries under the key go */
int lmdb_keys_expire(struct lmdb_txn *t, const uint8_t keyhash[STORE_HASH_LEN],
		      const char *qid, int64_t when);

#endif
