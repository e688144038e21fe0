/*
 * NAME
 *	store_int 3h
 * SUMMARY
 *	internals shared by the store's files; never included outside store/
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
#include <pthread.h>

#include "../store.h"
#include "../../util/buf.h"

struct journal;

struct store {
	MDB_env *env;		/* owned */
	MDB_dbi claims;		/* hash -> claim record */
	MDB_dbi msg;		/* qid -> immutable message record */
	MDB_dbi queue;		/* qid -> mutable delivery state record */
	MDB_dbi meta;		/* name -> value ("last_qid") */
	MDB_dbi hist;		/* qid -> history record (the story) */
	MDB_dbi hexpiry;	/* history expiry key -> empty, in time order */
	MDB_dbi keys;		/* old claims' key index: key hash -> claim hash + qid (dups) */
	int has_hist;		/* the three above are open (a read-only open may lack them) */
	int old_claims;		/* claims under their own hash alone may be left (store_claim.c) */
	uint64_t grown_to;	/* store_grow.c: file size last seen, made or tried for */
	struct journal *j;	/* store_journal.c; NULL: every commit synced without it */
	uint64_t jbase;		/* where its region of data.mdb starts: LMDB's map ends; 0 none */

	/* store.c: a failed sync and the reopen that follows it */
	pthread_rwlock_t gate;	/* every transaction holds it shared; store_reopen() alone */
	int broken;		/* atomic: a sync failed; no transaction until reopened */
	uint64_t void_pos;	/* data.mdb offset of a failed record's txnid to zero; 0 none */
	char *path;		/* owned: the environment directory, for the reopen */
	uint64_t map_size;	/* LMDB's map as opened (store.map_size less the region) */
	int grow_wanted;	/* store_space.c: an acceptance was refused for room (atomic) */
	/* store_map.c: the map grows at run time, with the gate held alone */
	uint64_t total;		/* the map with the journal's region: store.map_size, as grown */
	uint64_t map_max;	/* store.map_size_max; 0: as far as the disk allows */
	uint64_t checked_last;	/* last page when the map was last found roomy enough */
	int warned;		/* fullness of the ceiling last warned about: 0, 80, 95 */
};

struct store_txn {
	struct store *st;	/* not owned */
	MDB_txn *txn;		/* owned until commit or abort */
	int err;		/* sticky: first STORE_E* seen, or 0 */
	struct buf redo;	/* store_journal.c: the puts and deletes, when st->j */
	size_t resv_off;	/* ... where the value of an MDB_RESERVE put goes */
	void *resv_ptr;		/* ... and where LMDB has it; NULL: none pending */
	size_t resv_len;
	int no_redo;		/* ... too large to journal: synced at commit */
	uint64_t room_msgs;	/* store_space.c: acceptances asked for so far */
	uint64_t room_queued;	/* ... messages queued before this transaction */
	uint64_t room_pages;	/* ... pages those acceptances may take */
	uint64_t room_free;	/* ... free pages (tail and freelist), once counted */
	int room_free_known;
};

/* store.c */
int store_mdb_error(int rc, const char *what);
int store_read_begin(struct store *st, MDB_txn **txn);
void store_read_end(struct store *st, MDB_txn *txn);	/* ends what store_read_begin began */
int store_gate_enter(struct store *st);	/* 0, or STORE_EIO when broken */
void store_gate_leave(struct store *st);
void store_break(struct store *st, const char *why);	/* a sync failed: stop, reopen */
int store_qid_key(const char *qid, MDB_val *key);
int store_qid_greater(const void *a, size_t alen, const void *b, size_t blen);
#define META_LAST_QID	"last_qid"	/* meta DB: the greatest QID that left the spool */

/* store_grow.c */
int store_fill_zeros(int fd, uint64_t from, uint64_t to);	/* a page per pwrite; 0 or errno */

/* store_map.c: the map grows at run time */
#define META_MAP_SIZE	"map_size"	/* meta DB: the total the map was grown to */
uint64_t store_map_jbase(uint64_t total);	/* where the journal goes in a map of total; 0 none */
/* store_map_grow - grow the map to total; steps < 3 stops after that many (tests) */
int store_map_grow(struct store *st, uint64_t total, int steps);
int store_map_due(struct store *st, uint64_t pages, uint64_t last);
int store_map_check(struct store *st);
uint64_t store_map_ceiling(struct store *st);

/* store_journal.c: every write of a store_txn goes through these two */
#define STORE_JOURNAL_SIZE	(8u << 20)	/* taken from the end of store.map_size */
int store_put(struct store_txn *t, MDB_dbi dbi, MDB_val *key, MDB_val *val, unsigned flags);
int store_del(struct store_txn *t, MDB_dbi dbi, MDB_val *key, MDB_val *val);
int journal_open(struct store *st, const char *path);
void journal_close(struct store *st);
int journal_commit(struct store_txn *t);
int journal_region_new(struct store *st, uint64_t base, uint64_t *id);
int journal_move_commit(struct store *st, MDB_txn *txn, uint64_t base, uint64_t id);

/* store_space.c: the reserve for delivery writes */
#define STORE_RESERVE_PER_MSG	1024	/* bytes: a queued message's story and expiry entry */
int store_space_freelist(struct store *st, uint64_t *n);
uint64_t store_space_reserve(uint64_t psize, uint64_t pages, uint64_t queued);

/* store_txn.c */
int store_txn_fail(struct store_txn *t, int err);

/* store_codec.c: record encoding, portable, with a version byte */
#define STORE_CLAIM_REC_LEN	(1 + 1 + (STORE_QID_SIZE - 1) + STORE_HASH_LEN + 8 + 8)

size_t store_claim_encode(uint8_t out[STORE_CLAIM_REC_LEN], const struct store_claim *c);
int store_claim_decode(const void *p, size_t len, struct store_claim *c);

size_t store_msg_rec_size(const struct store_msg *m);
void store_msg_rec_encode(void *out, size_t len, const struct store_msg *m);
int store_msg_rec_decode(const void *p, size_t len, struct store_msg *m);

size_t store_queue_rec_size(const struct store_msg *m);
void store_queue_rec_encode(void *out, size_t len, const struct store_msg *m);
int store_queue_rec_decode(const void *p, size_t len, struct store_msg *m);
int store_queue_rec_peek(const void *p, size_t len, size_t *n_rcpts, int64_t *next_attempt);
int store_queue_rec_set_inflight(void *p, size_t len, int on);

int store_msg_valid(const struct store_msg *m);

int store_msg_rec_decode_envelope(const void *p, size_t len, struct store_msg *m);
int store_msg_rec_peek_accepted(const void *p, size_t len, int64_t *accepted);

size_t store_hist_rec_size(const struct store_story *s);
void store_hist_rec_encode(void *out, size_t len, const struct store_story *s);
int store_hist_rec_decode(const void *p, size_t len, struct store_story *s);

/* store_hist.c: the story, kept in step by the spool's own transactions */
void store_hist_update(struct store_txn *t, const struct store_msg *m, int queued);
void store_hist_drop(struct store_txn *t, const char *qid);
int store_hist_read(struct store *st, MDB_txn *txn, const char *qid, struct store_story *s);
int store_hist_write(struct store_txn *t, const struct store_story *s);

/* store_claim.c */
#define STORE_CLAIM_KEY_LEN	(2 * STORE_HASH_LEN)	/* key index hash, claim hash */
void store_claim_key(uint8_t out[STORE_CLAIM_KEY_LEN], const uint8_t keyhash[STORE_HASH_LEN],
		     const uint8_t hash[STORE_HASH_LEN]);
int store_claims_format(struct store *st, MDB_txn *txn, int rdonly);

/* store_keys.c: a story expired at when: its claims and its entries under the key go */
int store_keys_expire(struct store_txn *t, const uint8_t keyhash[STORE_HASH_LEN],
		      const char *qid, int64_t when);

#endif
