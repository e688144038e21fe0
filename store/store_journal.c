/*
 * NAME
 *	store_journal 3
 * SUMMARY
 *	the redo journal: a durable commit with its two flushes side by side
 * SYNOPSIS
 *	#include "store/store_int.h"
 * DESCRIPTION
 *	LMDB makes a commit durable with two flushes, one after the other:
 *	the new pages, then the meta page that points at them. With
 *	MDB_NOMETASYNC it flushes the pages and leaves the meta page to the
 *	next commit's flush. A crash then keeps every page but may lose the
 *	meta page of the last commit, and with it the last transaction,
 *	whole (LMDB keeps the previous snapshot intact).
 *
 *	The journal covers that one transaction. Every put and delete of a
 *	write transaction is also recorded here (store_put(), store_del()),
 *	and the commit writes the record to the journal file on a thread of
 *	its own, with O_DIRECT | O_DSYNC (through the page cache and
 *	fdatasync where the file system has no O_DIRECT), while LMDB flushes
 *	its pages: two flushes at once instead of one after the other. The commit is durable when
 *	both are done. At the next open, a record whose LMDB transaction
 *	id follows the store's last one is the lost transaction: its puts
 *	and deletes are applied again on the snapshot they were made on,
 *	which gives the same result, and the open syncs it.
 *
 *	Only the newest record is ever needed: the next commit's flush also
 *	writes the previous meta page. Records follow each other from the
 *	first block on and wrap to the start when the end is reached; a
 *	record never overwrites the one still needed. A transaction whose
 *	record does not fit, or any commit when the journal cannot be used
 *	(another process holds it, its file cannot be made), is synced the
 *	way LMDB does it without NOMETASYNC, so durability never depends
 *	on the journal being there.
 *
 *	The file begins with a block naming it (magic, size, and a random
 *	id that the store's meta DB also keeps), so that a journal is never
 *	applied to another store. Each record has the id, the transaction
 *	id, the length and a CRC-32 over all of it: a record torn by a crash
 *	is not applied, and was never acknowledged. A record whose commit
 *	failed is voided (its transaction id zeroed) before the failure is
 *	returned, so that it cannot be taken for the next transaction.
 * DIAGNOSTICS
 *	Warnings when the journal cannot be used and commits are synced
 *	without it; an error, and a failed open, when a record that must be
 *	applied cannot be, since opening without it would lose mail.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "../util/buf.h"
#include "../util/log.h"
#include "store_int.h"

#define J_SIZE		(8u << 20)	/* the file, made all at once */
#define J_BLOCK		4096u		/* records start on a block boundary */
#define J_MAGIC		"IDEMJRN1"
#define J_REC_MAGIC	0x314a5249u	/* "IRJ1" */
#define J_HDR		32		/* magic, crc, txnid, id, length, pad */
#define J_MAX_REDO	(J_SIZE / 2)	/* a larger transaction is synced without a record */
#define META_JOURNAL_ID	"journal_id"

enum { OP_PUT = 1, OP_DEL = 2, OP_DEL_VAL = 3 };

struct journal {
	int fd;				/* owned; flock'd for as long as it is open */
	int dfd;			/* owned: O_DIRECT | O_DSYNC for records, or -1 */
	uint8_t *abuf;			/* owned: a block-aligned copy for dfd */
	size_t abuf_cap;
	uint64_t id;			/* this store's journal id */
	uint64_t size;
	uint64_t next;			/* where the next record goes */
	uint64_t need_start, need_end;	/* the newest record, still needed; empty if equal */
	pthread_mutex_t commit;		/* one journaled commit at a time */
	/* the writing thread */
	pthread_t thread;
	int started;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	const uint8_t *job;		/* record to write, NULL: none */
	size_t job_len;
	uint64_t job_off;
	int job_done, job_err, stop;
	int warned;			/* a failed write was logged */
};

/* le - little-endian fields */
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

/* db_code - a database as the journal names it, and back */
static MDB_dbi *db_slot(struct store *st, unsigned code)
{
	MDB_dbi *dbs[] = { &st->claims, &st->msg, &st->queue, &st->meta,
		&st->hist, &st->hexpiry, &st->keys
	};

	return code < sizeof(dbs) / sizeof(dbs[0]) ? dbs[code] : NULL;
}

static unsigned db_code(struct store *st, MDB_dbi dbi)
{
	unsigned c;

	for (c = 0; db_slot(st, c); c++)
		if (*db_slot(st, c) == dbi)
			return c;
	msg_panic("store journal: a write to an unknown database");
}

/* redo_settle - copy the value of the last MDB_RESERVE put, now written */
static void redo_settle(struct store_txn *t)
{
	if (t->resv_ptr) {
		memcpy(t->redo.data + t->resv_off, t->resv_ptr, t->resv_len);
		t->resv_ptr = NULL;
	}
}

/* redo_add - record one operation; a reserved value is copied later */
static void redo_add(struct store_txn *t, int op, MDB_dbi dbi, const MDB_val *key,
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

/* store_put - mdb_put, recorded for the journal */
int store_put(struct store_txn *t, MDB_dbi dbi, MDB_val *key, MDB_val *val, unsigned flags)
{
	int rc;

	redo_settle(t);
	if ((rc = mdb_put(t->txn, dbi, key, val, flags)) == 0 && t->st->j)
		redo_add(t, OP_PUT, dbi, key, val, flags);
	return rc;
}

/* store_del - mdb_del, recorded for the journal */
int store_del(struct store_txn *t, MDB_dbi dbi, MDB_val *key, MDB_val *val)
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

/* write_synced - a record through the page cache, then fdatasync */
static int write_synced(struct journal *j, const uint8_t *rec, size_t len)
{
	int err = write_all(j->fd, rec, len, j->job_off);

	return err == 0 && fdatasync(j->fd) != 0 ? errno : err;
}

/* write_direct - a record padded to blocks, straight to the disk (one flush) */
static int write_direct(struct journal *j, const uint8_t *rec, size_t len)
{
	size_t alen = (size_t) align(len);

	if (alen > j->abuf_cap) {
		free(j->abuf);
		if (posix_memalign((void **) &j->abuf, J_BLOCK, alen) != 0) {
			j->abuf = NULL;
			j->abuf_cap = 0;
			return write_synced(j, rec, len);
		}
		j->abuf_cap = alen;
	}
	memcpy(j->abuf, rec, len);
	memset(j->abuf + len, 0, alen - len);
	return write_all(j->dfd, j->abuf, alen, j->job_off);
}

/* journal_main - write and fsync each record handed over */
static void *journal_main(void *arg)
{
	struct journal *j = arg;
	const uint8_t *rec;
	size_t len;
	int err;

	pthread_mutex_lock(&j->lock);
	for (;;) {
		while (j->job == NULL && !j->stop)
			pthread_cond_wait(&j->cond, &j->lock);
		if (j->job == NULL)
			break;
		rec = j->job;
		len = j->job_len;
		pthread_mutex_unlock(&j->lock);
		le32((uint8_t *) rec + 4, rec_crc(rec, len));
		err = j->dfd >= 0 ? write_direct(j, rec, len) : write_synced(j, rec, len);
		pthread_mutex_lock(&j->lock);
		j->job = NULL;
		j->job_err = err;
		j->job_done = 1;
		pthread_cond_broadcast(&j->cond);
	}
	pthread_mutex_unlock(&j->lock);
	return NULL;
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
static int synced(struct store *st, MDB_txn *txn)
{
	int rc;

	if ((rc = mdb_txn_commit(txn)) == 0 && (rc = mdb_env_sync(st->env, 1)) == 0 && st->j)
		st->j->need_start = st->j->need_end = 0;	/* nothing left to cover */
	return rc;
}

/* void_record - zero the transaction id of a record whose commit failed */
static void void_record(struct journal *j, uint64_t off)
{
	uint8_t zero[8] = { 0 };

	if (pwrite(j->fd, zero, sizeof(zero), (off_t) (off + 8)) != (ssize_t) sizeof(zero)
	    || fdatasync(j->fd) != 0)
		msg_warn("store journal: cannot void a failed record: %m");
}

/* journal_commit - commit t->txn durably; an LMDB code or errno */
int journal_commit(struct store_txn *t)
{
	struct store *st = t->st;
	struct journal *j = st->j;
	uint64_t size, off;
	uint8_t *rec;
	int rc, err;

	redo_settle(t);
	if (j == NULL)
		return synced(st, t->txn);
	if (t->redo.len == 0 && !t->no_redo)
		return mdb_txn_commit(t->txn);	/* nothing written: LMDB writes nothing either */
	pthread_mutex_lock(&j->commit);	/* a writer whose commit just ended may be waiting */
	if (t->no_redo || (off = place(j, size = align(t->redo.len))) == 0) {
		rc = synced(st, t->txn);
		pthread_mutex_unlock(&j->commit);
		return rc;
	}
	rec = (uint8_t *) t->redo.data;
	le32(rec, J_REC_MAGIC);
	le64(rec + 8, mdb_txn_id(t->txn));
	le64(rec + 16, j->id);
	le32(rec + 24, (uint32_t) (t->redo.len - J_HDR));
	pthread_mutex_lock(&j->lock);
	j->job = rec;
	j->job_len = t->redo.len;
	j->job_off = off;
	j->job_done = 0;
	pthread_cond_signal(&j->cond);
	pthread_mutex_unlock(&j->lock);

	rc = mdb_txn_commit(t->txn);	/* the pages, flushed; the meta page, not yet */

	pthread_mutex_lock(&j->lock);
	while (!j->job_done)
		pthread_cond_wait(&j->cond, &j->lock);
	err = j->job_err;
	pthread_mutex_unlock(&j->lock);
	if (rc != 0) {
		void_record(j, off);		/* it may be on the disk, whole, even if err */
		j->next = off;			/* the slot is free again */
	} else if (err != 0) {
		if (!j->warned++)
			msg_warn("store journal: write failed (%s): syncing without it",
				 strerror(err));
		if ((rc = mdb_env_sync(st->env, 1)) == 0)
			j->need_start = j->need_end = 0;
	} else {
		j->need_start = off;
		j->need_end = j->next = off + size;
	}
	pthread_mutex_unlock(&j->commit);
	return rc;
}

/* replay - apply one record's operations in a transaction of their own, synced */
static int replay(struct store *st, const uint8_t *rec, size_t len, uint64_t txnid)
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

/* recover - find the record of the transaction after the store's last, and apply it */
static int recover(struct store *st, struct journal *j, const char *path)
{
	MDB_envinfo info;
	const uint8_t *map, *r;
	uint64_t off, len, want;
	struct stat sb;
	int rc = 0;

	if ((rc = mdb_env_info(st->env, &info)) != 0)
		return rc;
	if (fstat(j->fd, &sb) != 0 || (uint64_t) sb.st_size < j->size)
		return 0;			/* cut short: its records are not read */
	want = (uint64_t) info.me_last_txnid + 1;
	map = mmap(NULL, j->size, PROT_READ, MAP_SHARED, j->fd, 0);
	if (map == MAP_FAILED)
		return errno;
	for (off = J_BLOCK; off + J_HDR <= j->size; off += align(J_HDR + len)) {
		r = map + off;
		len = rd32(r + 24);
		if (rd32(r) != J_REC_MAGIC || rd64(r + 16) != j->id || len > j->size - off - J_HDR)
			break;
		if (rd64(r + 8) != want || rec_crc(r, J_HDR + len) != rd32(r + 4))
			continue;
		if ((rc = replay(st, r, J_HDR + len, want)) == 0)
			msg_info("store %s: transaction %llu replayed from the journal (%llu bytes)",
				 path, (unsigned long long) want, (unsigned long long) len);
		else
			msg_error("store %s: cannot replay transaction %llu from the journal: %s",
				  path, (unsigned long long) want, mdb_strerror(rc));
		break;
	}
	munmap((void *) map, j->size);
	return rc;
}

/* meta_id - the journal id the store keeps; 0 if none */
static uint64_t meta_id(struct store *st)
{
	MDB_val key = { sizeof(META_JOURNAL_ID) - 1, META_JOURNAL_ID }, val;
	MDB_txn *txn;
	uint64_t id = 0;

	if (mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn) != 0)
		return 0;
	if (mdb_get(txn, st->meta, &key, &val) == 0 && val.mv_size == 8)
		id = rd64(val.mv_data);
	mdb_txn_abort(txn);
	return id;
}

/* make - a new journal file of zeros with its header, and its id in the store */
static int make(struct store *st, struct journal *j, const char *path)
{
	static const uint8_t zero[1 << 16];
	MDB_val key = { sizeof(META_JOURNAL_ID) - 1, META_JOURNAL_ID }, val;
	uint8_t head[J_BLOCK] = { 0 }, idb[8];
	MDB_txn *txn;
	uint64_t off;
	int rc, dfd;

	do {
		if (getrandom(&j->id, sizeof(j->id), 0) != sizeof(j->id))
			return errno;
	} while (j->id == 0);
	if (ftruncate(j->fd, 0) != 0)
		return errno;
	/* zeros written, not a hole: a commit then changes no block map */
	for (off = J_BLOCK; off < J_SIZE; off += sizeof(zero))
		if (pwrite(j->fd, zero, sizeof(zero), (off_t) off) != (ssize_t) sizeof(zero))
			return errno ? errno : ENOSPC;
	memcpy(head, J_MAGIC, 8);
	le64(head + 8, J_SIZE);
	le64(head + 16, j->id);
	if (pwrite(j->fd, head, sizeof(head), 0) != (ssize_t) sizeof(head) || fsync(j->fd) != 0)
		return errno ? errno : EIO;
	if ((dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
		(void) fsync(dfd);		/* the new name, durable before a record counts on it */
		close(dfd);
	}
	j->size = J_SIZE;
	le64(idb, j->id);
	val.mv_size = sizeof(idb);
	val.mv_data = idb;
	if ((rc = mdb_txn_begin(st->env, NULL, 0, &txn)) != 0)
		return rc;
	if ((rc = mdb_put(txn, st->meta, &key, &val, 0)) != 0) {
		mdb_txn_abort(txn);
		return rc;
	}
	return synced(st, txn);
}

/* journal_stop - end the thread and close the file */
static void journal_free(struct journal *j)
{
	if (j->started) {
		pthread_mutex_lock(&j->lock);
		j->stop = 1;
		pthread_cond_signal(&j->cond);
		pthread_mutex_unlock(&j->lock);
		pthread_join(j->thread, NULL);
	}
	pthread_mutex_destroy(&j->lock);
	pthread_mutex_destroy(&j->commit);
	pthread_cond_destroy(&j->cond);
	if (j->dfd >= 0)
		close(j->dfd);
	close(j->fd);
	free(j->abuf);
	free(j);
}

/*
 * journal_open - after the environment is open for writing: take the
 * journal, apply what it holds, and start its thread. 0, or a code
 * when a record that must be applied cannot be; a journal that cannot
 * be used only leaves st->j NULL, with a warning.
 */
int journal_open(struct store *st, const char *path)
{
	struct journal *j = xcalloc(1, sizeof(*j));
	char file[4096];
	uint8_t head[24];
	uint64_t have = meta_id(st);
	int rc = 0;

	j->dfd = -1;
	pthread_mutex_init(&j->lock, NULL);
	pthread_mutex_init(&j->commit, NULL);
	pthread_cond_init(&j->cond, NULL);
	snprintf(file, sizeof(file), "%s/journal", path);
	if ((j->fd = open(file, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0) {
		msg_warn("store %s: no journal (%m): every commit is synced without it", path);
		pthread_mutex_destroy(&j->lock);
		pthread_mutex_destroy(&j->commit);
		pthread_cond_destroy(&j->cond);
		free(j);
		return 0;
	}
	if (flock(j->fd, LOCK_EX | LOCK_NB) != 0) {
		msg_warn("store %s: the journal is in use by another process:"
			 " every commit is synced without it", path);
		journal_free(j);
		return 0;
	}
	if (pread(j->fd, head, sizeof(head), 0) == (ssize_t) sizeof(head)
	    && memcmp(head, J_MAGIC, 8) == 0 && rd64(head + 16) == have && have != 0
	    && (j->size = rd64(head + 8)) > J_BLOCK) {
		j->id = have;
		if ((rc = recover(st, j, path)) != 0) {
			journal_free(j);
			return rc;
		}
	} else {
		if (have != 0)
			msg_warn("store %s: the journal is missing or is another store's:"
				 " a transaction acknowledged just before a crash may be lost", path);
		if ((rc = make(st, j, path)) != 0) {
			msg_warn("store %s: cannot make the journal (%s):"
				 " every commit is synced without it", path,
				 rc > 0 ? strerror(rc) : mdb_strerror(rc));
			journal_free(j);
			return 0;
		}
	}
	j->next = J_BLOCK;
	/* where the file system has no O_DIRECT (tmpfs), through the page cache */
	j->dfd = open(file, O_WRONLY | O_DIRECT | O_DSYNC | O_CLOEXEC);
	if (pthread_create(&j->thread, NULL, journal_main, j) != 0) {
		journal_free(j);
		msg_warn("store %s: no journal thread: every commit is synced without it", path);
		return 0;
	}
	j->started = 1;
	st->j = j;
	return 0;
}

/* journal_close - stop the journal; the caller syncs the environment after */
void journal_close(struct store *st)
{
	if (st->j) {
		journal_free(st->j);
		st->j = NULL;
	}
}
