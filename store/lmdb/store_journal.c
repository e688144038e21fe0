/*
 * NAME
 *	store_journal 3
 * SUMMARY
 *	the redo journal: a durable commit with one flush instead of two
 * SYNOPSIS
 *	#include "store/lmdb/store_int.h"
 * DESCRIPTION
 *	LMDB makes a commit durable with two flushes, one after the other:
 *	the new pages, then the meta page that points at them. With
 *	MDB_NOMETASYNC it flushes the pages and leaves the meta page to the
 *	next commit's flush. A crash then keeps every page but may lose the
 *	meta page of the last commit, and with it the last transaction,
 *	whole (LMDB keeps the previous snapshot intact).
 *
 *	The journal covers that one transaction. Every put and delete of a
 *	write transaction is also recorded here (lmdb_put(), lmdb_del()),
 *	and just before LMDB commits, the record is written into a region of
 *	data.mdb itself, past the end of LMDB's map: LMDB never writes
 *	there, and its fdatasync of the file then flushes the record with
 *	the pages, in the one flush. (A journal file of its own cost a
 *	second flush, which this disk served after the first even when both
 *	were issued at once: BENCHMARKS.md.) The map LMDB is given is so the
 *	region's size smaller than store.map_size (store_lmdb.c), and the file is
 *	sparse between the two. At the next open, a record whose LMDB
 *	transaction id follows the store's last one is the lost transaction:
 *	its puts and deletes are applied again on the snapshot they were
 *	made on, which gives the same result, and the open syncs it. No
 *	commit may come before that at the open, or it takes the record's
 *	id: the open's own changes to the store follow it (store_lmdb.c).
 *
 *	Only the newest record is ever needed: the next commit's flush also
 *	writes the previous meta page. Records follow each other from the
 *	region's first block on and wrap to the start when the end is
 *	reached; a record never overwrites the one still needed. A
 *	transaction whose record does not fit, or any commit when the
 *	journal cannot be used (the map is too small to spare the region),
 *	is synced the way LMDB does it without NOMETASYNC, so durability
 *	never depends on the journal being there. One process at a time
 *	writes the store, and so the journal (store_compact.c: its owner).
 *
 *	The region begins with a block naming it (magic, size, and a random
 *	id that the store's meta DB also keeps, with the region's offset, so
 *	that it is found again when map_size changes), so that a journal is
 *	never applied to another store. Each record has the id, the
 *	transaction id, the length and a CRC-32 over all of it: a record torn
 *	by a crash is not applied, and was never acknowledged. A record whose
 *	commit failed is voided (its transaction id zeroed) before the
 *	failure is returned, so that it cannot be taken for the next
 *	transaction.
 *
 *	A commit whose sync failed (an errno from LMDB's commit, or from the
 *	sync after it; LMDB's own codes such as a full map write nothing that
 *	could be lost) breaks the store (store_lmdb.c): Linux may have dropped the
 *	pages of that flush, among them the previous commit's meta page that
 *	this journal's record stands in for. Going on would build the next
 *	commits on a view the disk does not have, and since only one record
 *	is ever replayed, a later crash could lose acknowledged commits. So
 *	the commit in progress fails, every later one is refused under the
 *	same lock, and lmdb_reopen() zeros the failed record (its void here
 *	may not have reached the disk either) before it opens the store again
 *	and replays what is needed. A record whose void never reaches the
 *	disk (the process dies before the reopen) may be replayed at the next
 *	open: its message is then queued though its client got 452 4.3.1;
 *	its key answers a retry with its QID, so it is still sent once.
 * DIAGNOSTICS
 *	Warnings when the journal cannot be used and commits are synced
 *	without it; an error, and a failed open, when a record that must be
 *	applied cannot be, since opening without it would lose mail, or when
 *	the commit naming a new region fails its sync (the store is broken).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "../../util/buf.h"
#include "../../util/log.h"
#include "store_int.h"

#define J_SIZE		STORE_JOURNAL_SIZE	/* the region, made all at once */
#define J_BLOCK		4096u		/* records start on a block boundary */
#define J_MAGIC		"IDEMJRN1"
#define J_REC_MAGIC	0x314a5249u	/* "IRJ1" */
#define J_HDR		32		/* magic, crc, txnid, id, length, pad */
#define J_MAX_REDO	(J_SIZE / 2)	/* a larger transaction is synced without a record */
#define META_JOURNAL_ID	"journal_id"
#define META_JOURNAL_AT	"journal_at"	/* the region's offset in data.mdb */

enum { OP_PUT = 1, OP_DEL = 2, OP_DEL_VAL = 3 };

struct journal {
	int fd;				/* owned: data.mdb again */
	uint64_t base;			/* where the region starts in data.mdb */
	uint64_t id;			/* this store's journal id */
	uint64_t size;
	uint64_t next;			/* where the next record goes, from base */
	uint64_t need_start, need_end;	/* the newest record, still needed; empty if equal */
	pthread_mutex_t commit;		/* one journaled commit at a time */
	int warned;			/* a failed write was logged */
};

/* le32, le64, rd32, rd64 - little-endian fields */
static void le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t) (v >> (8 * i));
}

static void le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t) (v >> (8 * i));
}

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24;
}

static uint64_t rd64(const uint8_t *p)
{
	return (uint64_t) rd32(p) | (uint64_t) rd32(p + 4) << 32;
}

/* rec_crc - CRC-32 of a record, its crc field taken as zero */
static uint32_t rec_crc(const uint8_t *rec, size_t len)
{
	static const uint8_t zero[4];
	uLong crc = crc32(0L, Z_NULL, 0);

	crc = crc32(crc, rec, 4);
	crc = crc32(crc, zero, 4);
	crc = crc32(crc, rec + 8, (uInt) (len - 8));
	return (uint32_t) crc;
}

/* align - up to the next block */
static uint64_t align(uint64_t n)
{
	return (n + J_BLOCK - 1) / J_BLOCK * J_BLOCK;
}

/*
 * db_slot, db_code - a database as the journal names it, and back; NULL
 * past the last, and for 6, the keys DB that stores before idemrelay 0.1
 * had (a record naming it is corrupt)
 */
#define DB_CODES	9

static MDB_dbi *db_slot(struct lmdb_store *st, unsigned code)
{
	MDB_dbi *dbs[DB_CODES] = { &st->claims.big, &st->msg, &st->queue, &st->meta,
		&st->hist.big, &st->hexpiry, NULL, &st->hist.small, &st->claims.small
	};

	return code < DB_CODES ? dbs[code] : NULL;
}

static unsigned db_code(struct lmdb_store *st, MDB_dbi dbi)
{
	unsigned c;

	for (c = 0; c < DB_CODES; c++)
		if (db_slot(st, c) && *db_slot(st, c) == dbi)
			return c;
	msg_panic("store journal: a write to an unknown database");
}

/* redo_settle - copy the value of the last MDB_RESERVE put, now written */
static void redo_settle(struct lmdb_txn *t)
{
	if (t->resv_ptr) {
		memcpy(t->redo.data + t->resv_off, t->resv_ptr, t->resv_len);
		t->resv_ptr = NULL;
	}
}

/* redo_add - record one operation; a reserved value is copied later */
static void redo_add(struct lmdb_txn *t, int op, MDB_dbi dbi, const MDB_val *key,
		     const MDB_val *val, unsigned flags)
{
	uint8_t h[12];
	size_t vlen = val ? val->mv_size : 0;

	if (t->no_redo)
		return;
	if (t->redo.len + 12 + key->mv_size + vlen > J_MAX_REDO) {
		t->no_redo = 1;			/* too large to journal: synced at commit */
		t->resv_ptr = NULL;
		buf_free(&t->redo);
		return;
	}
	if (t->redo.len == 0) {		/* room for the record header */
		buf_reserve(&t->redo, J_HDR);
		memset(t->redo.data, 0, J_HDR);
		t->redo.len = J_HDR;
	}
	h[0] = (uint8_t) op;
	h[1] = (uint8_t) db_code(t->st, dbi);
	h[2] = (uint8_t) (flags & (MDB_NODUPDATA | MDB_NOOVERWRITE));
	h[3] = 0;
	le32(h + 4, (uint32_t) key->mv_size);
	le32(h + 8, (uint32_t) vlen);
	buf_append(&t->redo, h, sizeof(h));
	buf_append(&t->redo, key->mv_data, key->mv_size);
	if (vlen == 0)
		return;
	if (flags & MDB_RESERVE) {
		buf_reserve(&t->redo, vlen);
		t->resv_off = t->redo.len;
		t->resv_ptr = val->mv_data;
		t->resv_len = vlen;
		t->redo.len += vlen;
	} else
		buf_append(&t->redo, val->mv_data, vlen);
}

/* lmdb_put - mdb_put, recorded for the journal */
int lmdb_put(struct lmdb_txn *t, MDB_dbi dbi, MDB_val *key, MDB_val *val, unsigned flags)
{
	int rc;

	redo_settle(t);
	if ((rc = mdb_put(t->txn, dbi, key, val, flags)) == 0 && t->st->j)
		redo_add(t, OP_PUT, dbi, key, val, flags);
	return rc;
}

/* lmdb_del - mdb_del, recorded for the journal */
int lmdb_del(struct lmdb_txn *t, MDB_dbi dbi, MDB_val *key, MDB_val *val)
{
	int rc;

	redo_settle(t);
	if ((rc = mdb_del(t->txn, dbi, key, val)) == 0 && t->st->j)
		redo_add(t, val ? OP_DEL_VAL : OP_DEL, dbi, key, val, 0);
	return rc;
}

/* write_all - pwrite all of len bytes at off; 0 or errno */
static int write_all(int fd, const uint8_t *p, size_t len, uint64_t off)
{
	ssize_t n;

	for (; len > 0; p += n, len -= (size_t) n, off += (uint64_t) n)
		if ((n = pwrite(fd, p, len, (off_t) off)) < 0)
			return errno;
	return 0;
}

/* place - where a record of size bytes may go; 0 if nowhere now */
static uint64_t place(const struct journal *j, uint64_t size)
{
	int need = j->need_end > j->need_start;

	if (j->next + size <= j->size && (!need || j->next >= j->need_end
					  || j->next + size <= j->need_start))
		return j->next;
	if (J_BLOCK + size <= j->size && (!need || J_BLOCK + size <= j->need_start))
		return J_BLOCK;
	return 0;
}

/* synced - commit the LMDB way: pages, then the meta page, each flushed */
static int synced(struct lmdb_store *st, MDB_txn *txn)
{
	int rc;

	if ((rc = mdb_txn_commit(txn)) == 0 && (rc = mdb_env_sync(st->env, 1)) == 0 && st->j)
		st->j->need_start = st->j->need_end = 0;	/* nothing left to cover */
	if (rc > 0)			/* an errno: a write or a sync of the file failed */
		lmdb_break(st, "a commit's sync failed");
	return rc;
}

/* void_record - zero the transaction id of a record whose commit failed */
static void void_record(struct journal *j, uint64_t off)
{
	if (lmdb_fill_zeros(j->fd, j->base + off + 8, j->base + off + 16) != 0 || fdatasync(j->fd) != 0)
		msg_warn("store journal: cannot void a failed record: %m");
}

/*
 * record_commit - write t's record at off (size bytes with its padding),
 * then commit: LMDB's fdatasync of data.mdb flushes the record with the
 * pages. A record whose commit failed, or that may be there in part, is
 * voided; a failed sync breaks the store. An LMDB code or errno.
 */
static int record_commit(struct lmdb_txn *t, struct journal *j, uint64_t off, uint64_t size)
{
	struct lmdb_store *st = t->st;
	uint8_t *rec = (uint8_t *) t->redo.data;
	int rc, err;

	le32(rec, J_REC_MAGIC);
	le64(rec + 8, mdb_txn_id(t->txn));
	le64(rec + 16, j->id);
	le32(rec + 24, (uint32_t) (t->redo.len - J_HDR));
	le32(rec + 4, rec_crc(rec, t->redo.len));
	if ((err = write_all(j->fd, rec, t->redo.len, j->base + off)) != 0) {
		if (!j->warned++)
			msg_warn("store journal: write failed (%s): syncing without it",
				 strerror(err));
		void_record(j, off);		/* a part of it may be there */
		rc = synced(st, t->txn);
	} else if ((rc = mdb_txn_commit(t->txn)) != 0) {
		void_record(j, off);		/* it may be on the disk, whole */
		j->next = off;			/* the slot is free again */
	} else {
		j->need_start = off;
		j->need_end = j->next = off + size;
	}
	if (rc > 0) {				/* voided again, durably, by the reopen */
		st->void_pos = j->base + off + 8;
		lmdb_break(st, "a commit's sync failed");
	}
	return rc;
}

/* journal_commit - commit t->txn durably; an LMDB code or errno */
int journal_commit(struct lmdb_txn *t)
{
	struct lmdb_store *st = t->st;
	struct journal *j = st->j;
	uint64_t size = 0, off = 0;
	int rc;

	redo_settle(t);
	/* what follows LMDB's commit is past its writer lock: the next writer waits here */
	if (j)
		pthread_mutex_lock(&j->commit);
	if (lmdb_broken(&st->base)) {		/* broken while this one waited: see the header */
		mdb_txn_abort(t->txn);
		rc = EIO;
	} else if (j && t->redo.len == 0 && !t->no_redo) {
		rc = mdb_txn_commit(t->txn);	/* nothing written: LMDB writes nothing either */
	} else if (j == NULL || t->no_redo || (off = place(j, size = align(t->redo.len))) == 0) {
		rc = synced(st, t->txn);
	} else {
		rc = record_commit(t, j, off, size);
	}
	if (j)
		pthread_mutex_unlock(&j->commit);
	return rc;
}

/* replay - apply one record's operations in a transaction of their own, synced */
static int replay(struct lmdb_store *st, const uint8_t *rec, size_t len, uint64_t txnid)
{
	const uint8_t *p = rec + J_HDR, *end = rec + len;
	MDB_txn *txn;
	MDB_val key, val;
	MDB_dbi *dbi;
	int rc;

	if ((rc = mdb_txn_begin(st->env, NULL, 0, &txn)) != 0)
		return rc;
	if (mdb_txn_id(txn) != txnid) {	/* another writer came first: nothing to do */
		mdb_txn_abort(txn);
		return 0;
	}
	while (p < end && rc == 0) {
		if (end - p < 12)
			break;
		key.mv_size = rd32(p + 4);
		val.mv_size = rd32(p + 8);
		if ((size_t) (end - p - 12) < key.mv_size + val.mv_size
		    || (dbi = db_slot(st, p[1])) == NULL)
			break;
		key.mv_data = (void *) (p + 12);
		val.mv_data = (void *) (p + 12 + key.mv_size);
		if (p[0] == OP_PUT)
			rc = mdb_put(txn, *dbi, &key, &val, p[2]);
		else if (p[0] == OP_DEL || p[0] == OP_DEL_VAL)
			rc = mdb_del(txn, *dbi, &key, p[0] == OP_DEL_VAL ? &val : NULL);
		else
			break;
		if (rc == MDB_KEYEXIST && (p[2] & MDB_NODUPDATA))
			rc = 0;
		p += 12 + key.mv_size + val.mv_size;
	}
	if (rc == 0 && p != end)
		rc = MDB_CORRUPTED;
	if (rc != 0) {
		mdb_txn_abort(txn);
		return rc;
	}
	return synced(st, txn);
}

/*
 * recover - find the record of the transaction after the store's last, and
 * apply it. Every block is looked at: a walk from record to record lost
 * its way where the commit that wrapped to the first block wrote over the
 * head of the records there, and stopped short of the record still needed
 * (the previous commit's, at the region's end) when a crash in that
 * commit's flush kept its record but not the previous meta page.
 */
static int recover(struct lmdb_store *st, struct journal *j)
{
	MDB_envinfo info;
	const uint8_t *map, *r;
	uint64_t off, len, want;
	struct stat sb;
	int rc = 0;

	if ((rc = mdb_env_info(st->env, &info)) != 0)
		return rc;
	if (fstat(j->fd, &sb) != 0 || (uint64_t) sb.st_size < j->base + j->size)
		return 0;			/* cut short: its records are not read */
	want = (uint64_t) info.me_last_txnid + 1;
	map = mmap(NULL, j->size, PROT_READ, MAP_SHARED, j->fd, (off_t) j->base);
	if (map == MAP_FAILED)
		return errno;
	for (off = J_BLOCK; off + J_HDR <= j->size; off += J_BLOCK) {
		r = map + off;
		len = rd32(r + 24);
		if (rd32(r) != J_REC_MAGIC || rd64(r + 16) != j->id || rd64(r + 8) != want
		    || len > j->size - off - J_HDR || rec_crc(r, J_HDR + len) != rd32(r + 4))
			continue;
		if ((rc = replay(st, r, J_HDR + len, want)) == 0)
			msg_info("store %s: transaction %llu replayed from the journal (%llu bytes)",
				 st->path, (unsigned long long) want, (unsigned long long) len);
		else
			msg_error("store %s: cannot replay transaction %llu from the journal: %s",
				  st->path, (unsigned long long) want, mdb_strerror(rc));
		break;
	}
	munmap((void *) map, j->size);
	return rc;
}

/* meta_u64 - a number the store's meta DB keeps for the journal (little-endian); 0 if none */
static uint64_t meta_u64(struct lmdb_store *st, const char *name)
{
	uint8_t b[8];

	return lmdb_meta8(st, name, b) ? rd64(b) : 0;
}

/* region_write - an empty region at base of fd, its header naming id; 0 or errno */
static int region_write(int fd, uint64_t base, uint64_t id)
{
	uint8_t head[J_BLOCK] = { 0 };
	int rc;

	/* zeros written a page at a time: no hole, and no large folio (store_grow.c) */
	if ((rc = lmdb_fill_zeros(fd, base + J_BLOCK, base + J_SIZE)) != 0)
		return rc;
	memcpy(head, J_MAGIC, 8);
	le64(head + 8, J_SIZE);
	le64(head + 16, id);
	if (pwrite(fd, head, sizeof(head), (off_t) base) != (ssize_t) sizeof(head)
	    || fsync(fd) != 0)		/* fsync: the file's size changed */
		return errno ? errno : EIO;
	return 0;
}

/*
 * journal_region_copy - the journal's region, empty, where it is and under
 * its id, in fd: a compacted copy of data.mdb (store_compact.c), which
 * LMDB writes without it. Opened in place of data.mdb, the copy's journal
 * is then found as the store's meta DB names it, with no record to
 * replay (the copy holds every commit). 0 or errno; 0 with no journal.
 */
int journal_region_copy(struct lmdb_store *st, int fd)
{
	return st->j ? region_write(fd, st->j->base, st->j->id) : 0;
}

/* meta_put - the region's id and place, in txn */
static int meta_put(struct lmdb_store *st, MDB_txn *txn, uint64_t id, uint64_t base)
{
	MDB_val key = { sizeof(META_JOURNAL_ID) - 1, META_JOURNAL_ID }, val;
	uint8_t idb[8], atb[8];
	int rc;

	le64(idb, id);
	le64(atb, base);
	val.mv_size = sizeof(idb);
	val.mv_data = idb;
	if ((rc = mdb_put(txn, st->meta, &key, &val, 0)) != 0)
		return rc;
	key.mv_size = sizeof(META_JOURNAL_AT) - 1;
	key.mv_data = META_JOURNAL_AT;
	val.mv_data = atb;
	return mdb_put(txn, st->meta, &key, &val, 0);
}

/*
 * journal_region_new - the first step of moving the journal when the map
 * grows over it (store_map.c), or of making one where there was none or
 * the map ends elsewhere (journal_open()): a new region of zeros at base,
 * past the end of LMDB's map, with its header and a new id, that nothing
 * refers to yet. With a journal only. 0 or errno.
 */
int journal_region_new(struct lmdb_store *st, uint64_t base, uint64_t *id)
{
	do {
		if (getrandom(id, sizeof(*id), 0) != sizeof(*id))
			return errno;
	} while (*id == 0);
	return region_write(st->j->fd, base, *id);
}

/*
 * journal_move_commit - the second step: txn (the caller's, which may
 * hold more) names the new region, and is committed synced, so that every
 * earlier commit is durable without a record and a crash from here on
 * finds the new region; only then may LMDB write over the old one. The
 * caller holds the store's map lock exclusively: no other commit can put
 * a record in the old region meanwhile. An LMDB code or errno.
 */
int journal_move_commit(struct lmdb_store *st, MDB_txn *txn, uint64_t base, uint64_t id)
{
	struct journal *j = st->j;
	int rc;

	if (j && (rc = meta_put(st, txn, id, base)) != 0) {
		mdb_txn_abort(txn);
		return rc;
	}
	if ((rc = synced(st, txn)) != 0 || j == NULL)
		return rc;
	j->base = base;
	j->id = id;
	j->size = J_SIZE;
	j->next = J_BLOCK;
	j->need_start = j->need_end = 0;
	return 0;
}

/* journal_free - close the journal's descriptor */
static void journal_free(struct journal *j)
{
	pthread_mutex_destroy(&j->commit);
	if (j->fd >= 0)
		close(j->fd);
	free(j);
}

/*
 * journal_open - after the environment is open for writing: apply what
 * the region the store's meta DB names holds (past the map the store had:
 * a store.map_size lowered since leaves it there), then take the region
 * of data.mdb past LMDB's map (at lmdb_map_jbase(st->total); 0: the map
 * is too small to spare one), made new there if it was elsewhere. 0, or
 * a code when a record that must be applied cannot be, or when the
 * commit naming the new region failed to write or sync (an errno: the
 * store is broken, and what it built on may not be on the disk); a
 * journal that cannot be used only leaves st->j NULL, with a warning.
 */
int journal_open(struct lmdb_store *st)
{
	struct journal *j;
	char file[4096], why[128];
	uint8_t head[24];
	uint64_t have = meta_u64(st, META_JOURNAL_ID), at = meta_u64(st, META_JOURNAL_AT);
	uint64_t psize, map, last, id, jbase = lmdb_map_jbase(st->total);
	MDB_txn *txn;
	int rc = 0;

	j = xcalloc(1, sizeof(*j));
	pthread_mutex_init(&j->commit, NULL);
	snprintf(file, sizeof(file), "%s/data.mdb", st->path);
	if ((j->fd = open(file, O_RDWR | O_CLOEXEC)) < 0) {
		snprintf(why, sizeof(why), "no journal (%s)", strerror(errno));
		goto none;
	}
	/* what the region the store names holds first, wherever the journal goes now */
	if (have != 0 && at != 0
	    && pread(j->fd, head, sizeof(head), (off_t) at) == (ssize_t) sizeof(head)
	    && memcmp(head, J_MAGIC, 8) == 0 && rd64(head + 16) == have
	    && (j->size = rd64(head + 8)) > J_BLOCK) {
		j->id = have;
		j->base = at;
		if ((rc = recover(st, j)) != 0) {
			journal_free(j);
			return rc;
		}
	} else if (have != 0) {
		msg_warn("store %s: the journal is missing or is another store's:"
			 " a transaction acknowledged just before a crash may be lost", st->path);
	}
	if (jbase == 0) {		/* a map too small to spare one */
		journal_free(j);
		return 0;
	}
	if (lmdb_space_geometry(st, &psize, &map, &last) != 0 || last * psize > jbase) {
		snprintf(why, sizeof(why), "the store reaches past where the journal goes");
		goto none;
	}
	st->j = j;
	j->next = J_BLOCK;
	if (j->base != jbase		/* new, or the map size changed: the store is synced */
	    && ((rc = journal_region_new(st, jbase, &id)) != 0
		|| (rc = mdb_txn_begin(st->env, NULL, 0, &txn)) != 0
		|| (rc = journal_move_commit(st, txn, jbase, id)) < 0)) {
		snprintf(why, sizeof(why), "cannot make the journal (%s)", mdb_strerror(rc));
		goto none;
	}
	if (rc > 0) {			/* that commit's write or sync failed: the open fails */
		st->j = NULL;
		journal_free(j);
	}
	return rc;

none:
	st->j = NULL;
	msg_warn("store %s: %s: every commit is synced without it", st->path, why);
	journal_free(j);
	return 0;
}

/* journal_close - stop the journal; the caller syncs the environment after */
void journal_close(struct lmdb_store *st)
{
	if (st->j) {
		journal_free(st->j);
		st->j = NULL;
	}
}
