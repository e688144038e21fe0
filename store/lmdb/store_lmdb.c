/*
 * NAME
 *	store_lmdb 3
 * SUMMARY
 *	the LMDB environment: open, close, errors, statistics
 * SYNOPSIS
 *	#include "store/store.h"
 * DESCRIPTION
 *	store_lmdb_open() creates the environment directory if it is missing
 *	and opens eight named databases: claims and cnew (store_claim.c), msg,
 *	queue, meta, and for the stories hist, hexpiry and hnew
 *	(store_hist.c). A store written before idemrelay 0.1, the first
 *	package, is refused (lmdb_format()). store_lmdb_open_readonly() opens an
 *	existing store without creating or writing anything, for
 *	idemrelayctl. A writable open first has the kernel drop the pages
 *	of data.mdb it has cached (lmdb_cache_drop()): another program's
 *	large read or write leaves them in large folios, which make every
 *	commit's flush dearer. Every commit is durable when it returns;
 *	opened for writing, the environment leaves each commit's meta page unflushed
 *	(MDB_NOMETASYNC) and the journal (store_journal.c) covers it: a redo
 *	record in data.mdb past LMDB's map, flushed with LMDB's pages. It
 *	uses MDB_NOTLS, so that read transactions are not tied to a thread
 *	and any thread may call any function.
 *
 *	This file also holds the one place where LMDB codes become STORE_E*
 *	codes (lmdb_mdb_error()), and the read-only queries that belong to
 *	no other concept: lmdb_stats(), with the last QID.
 *
 *	The claims live in store_claim.c, the spool in store_msg.c, write
 *	transactions in store_txn.c, the record formats in store_codec.c and
 *	the room kept for delivery writes in store_space.c.
 *	A failed sync (an fsync or fdatasync of data.mdb that returned an
 *	error) breaks the environment (lmdb_break()): Linux may have thrown
 *	the pages that sync was to write away, and what the process sees of
 *	the file may then not be what the disk holds, in either direction:
 *	the last commit's meta page may be gone while its pages are there.
 *	From then on every transaction, read or write, is refused with
 *	STORE_EIO (a caller answers 452 4.3.1 or tries again later) until
 *	lmdb_reopen() has closed the environment, zeroed the failed commit's
 *	redo record and flushed the file, asked the kernel to drop its
 *	cached pages, and opened the environment again from what is durable:
 *	the journal (store_journal.c) replays the last acknowledged commit
 *	if its meta page was lost, as after a crash. PostgreSQL does the same
 *	after a failed fsync (a crash and recovery from its log), since a
 *	second fsync that succeeds proves nothing about the first.
 *
 *	Closing an environment is only safe with no transaction open. So
 *	every transaction holds the store's gate, a read-write lock, shared
 *	from begin to end (lmdb_read_begin()/lmdb_read_end(), and
 *	store_txn.c's begin, commit and abort), and lmdb_reopen() takes it
 *	alone: it waits for the transactions in progress (each is short: no
 *	caller holds one across a wait on another thread) and new ones wait
 *	for it. The lock prefers readers, so that a thread that opens a
 *	second transaction while it holds one never waits for the reopen
 *	behind itself. Only the writer thread reopens (queue/commit.c).
 * DIAGNOSTICS
 *	Functions return 0 or a negative STORE_E* code. LMDB failures that
 *	are not "not found" or "no space" are logged as warnings with
 *	LMDB's own text, since the STORE_E* code alone loses it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../util/buf.h"
#include "../../util/log.h"
#include "store_int.h"

#define STORE_MAX_DBS		12
#define STORE_MAX_READERS	256

/*
 * lmdb_mdb_error - translate an LMDB or errno code at the boundary; what
 * names the step in the warning, NULL for none (an open says why itself)
 */
int lmdb_mdb_error(int rc, const char *what)
{
	switch (rc) {
	case MDB_SUCCESS:
		return 0;
	case MDB_NOTFOUND:
		return STORE_ENOTFOUND;
	case MDB_MAP_FULL:
	case MDB_TXN_FULL:
	case ENOSPC:
	case EDQUOT:
	case EFBIG:			/* the file size limit: no space, not an I/O error */
		return STORE_ENOSPC;
	default:			/* in LMDB's words: its code is lost below */
		if (what)
			msg_warn("store: %s: %s", what, mdb_strerror(rc));
		/* a bad argument or record; a store not ours to read (corrupt, or a newer format) */
		return rc == MDB_BAD_VALSIZE || rc == MDB_KEYEXIST || rc == EINVAL || rc == MDB_INVALID
		    || rc == MDB_VERSION_MISMATCH ? STORE_EINVAL : STORE_EIO;
	}
}

/* lmdb_gate_enter - hold the gate for one transaction; STORE_EIO while broken */
int lmdb_gate_enter(struct lmdb_store *st)
{
	pthread_rwlock_rdlock(&st->gate);
	if (st->env == NULL || __atomic_load_n(&st->broken, __ATOMIC_ACQUIRE)) {
		pthread_rwlock_unlock(&st->gate);
		return STORE_EIO;
	}
	return 0;
}

/* lmdb_gate_leave - the transaction is over */
void lmdb_gate_leave(struct lmdb_store *st)
{
	pthread_rwlock_unlock(&st->gate);
}

/*
 * lmdb_read_begin - a read-only transaction, usable from any thread.
 * When another process grew the map past this one's (idemrelayctl while
 * the daemon grows it: store_map.c), LMDB says MDB_MAP_RESIZED: take the
 * new size, with no transaction open (the gate held alone), and retry.
 */
int lmdb_read_begin(struct lmdb_store *st, MDB_txn **txn)
{
	int err, rc, tries = 0;

	for (;;) {
		if ((err = lmdb_gate_enter(st)) != 0)
			return err;
		if ((rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, txn)) == 0)
			return 0;
		lmdb_gate_leave(st);
		if (rc != MDB_MAP_RESIZED || tries++ > 2)
			return lmdb_mdb_error(rc, "begin read");
		pthread_rwlock_wrlock(&st->gate);
		rc = mdb_env_set_mapsize(st->env, 0);
		pthread_rwlock_unlock(&st->gate);
		if (rc != 0)
			return lmdb_mdb_error(rc, "map resized");
	}
}

/* lmdb_read_end - end a read transaction of lmdb_read_begin() */
void lmdb_read_end(struct lmdb_store *st, MDB_txn *txn)
{
	mdb_txn_abort(txn);
	lmdb_gate_leave(st);
}

/* lmdb_break - a sync failed: no transaction until lmdb_reopen() */
void lmdb_break(struct lmdb_store *st, const char *why)
{
	if (__atomic_exchange_n(&st->broken, 1, __ATOMIC_ACQ_REL) == 0)
		msg_error("store %s: %s: no commits until it is reopened from what is durable",
			  st->path ? st->path : "", why);
}

/* lmdb_broken - did a sync fail since the store was last opened? */
int lmdb_broken(struct store *base)
{
	struct lmdb_store *st = (struct lmdb_store *) base;

	return __atomic_load_n(&st->broken, __ATOMIC_ACQUIRE);
}

/* lmdb_qid_key - a QID as a database key (without its NUL) */
int lmdb_qid_key(const char *qid, MDB_val *key)
{
	if (!store_qid_ok(qid))
		return STORE_EINVAL;
	key->mv_data = (void *) qid;
	key->mv_size = strlen(qid);
	return 0;
}

/*
 * lmdb_key_qid - a database key as a QID, with its NUL; STORE_EINVAL if it
 * cannot be one: empty, too long, or a byte that is not graphic ASCII (a
 * corrupt key, whose control characters must not reach the log)
 */
int lmdb_key_qid(const MDB_val *key, char qid[STORE_QID_SIZE])
{
	const unsigned char *k = key->mv_data;
	size_t i;

	if (key->mv_size == 0 || key->mv_size >= STORE_QID_SIZE)
		return STORE_EINVAL;
	for (i = 0; i < key->mv_size; i++)
		if (k[i] <= ' ' || k[i] >= 0x7f)
			return STORE_EINVAL;
	memcpy(qid, key->mv_data, key->mv_size);
	qid[key->mv_size] = 0;
	return 0;
}

/*
 * lmdb_format - the store's format: refuse one greater than ours, and a
 * store written before idemrelay 0.1 (MDB_VERSION_MISMATCH, *step saying
 * which); with write, record ours where the store's is less or
 * unrecorded. 0.1 recorded none, but wrote claims_by_key into every store
 * it opened for writing whose claims were filed under their key; a store
 * with neither record is older, unless fresh (made by this open). An
 * LMDB code
 */
static int lmdb_format(struct lmdb_store *st, MDB_txn *txn, int write, int fresh,
		       const char **step)
{
	MDB_val key = { sizeof(META_FORMAT) - 1, META_FORMAT }, val;
	MDB_val by_key = { sizeof(META_CLAIMS_BY_KEY) - 1, META_CLAIMS_BY_KEY };
	char text[16];
	long have = 0;
	int rc;

	*step = "format";
	if ((rc = mdb_get(txn, st->meta, &key, &val)) == 0) {
		if (val.mv_size == 0 || val.mv_size >= sizeof(text))
			return MDB_INVALID;
		memcpy(text, val.mv_data, val.mv_size);
		text[val.mv_size] = 0;
		have = strtol(text, NULL, 10);
	} else if (rc != MDB_NOTFOUND) {
		return rc;
	} else if (!fresh && (rc = mdb_get(txn, st->meta, &by_key, &val)) != 0) {
		*step = "written by an idemrelay older than 0.1, the first package,"
		    " which this one does not read";
		return rc == MDB_NOTFOUND ? MDB_VERSION_MISMATCH : rc;
	}
	*step = "written by a newer idemrelay (its format is greater than " LMDB_TEXT(LMDB_FORMAT) ")";
	if (have > LMDB_FORMAT)
		return MDB_VERSION_MISMATCH;
	*step = "format recorded";
	if (!write || have == LMDB_FORMAT)
		return 0;
	val.mv_size = sizeof(LMDB_TEXT(LMDB_FORMAT)) - 1;
	val.mv_data = LMDB_TEXT(LMDB_FORMAT);
	return mdb_put(txn, st->meta, &key, &val, 0);
}

/* dbi_open - mdb_dbi_open of name, *step naming the database (a failure's step) */
static int dbi_open(MDB_txn *txn, const char *name, unsigned flags, MDB_dbi *dbi,
		    const char **step)
{
	*step = name;
	return mdb_dbi_open(txn, name, flags, dbi);
}

/*
 * lmdb_env_open - open the environment at st->path with flags (and LMDB's
 * map in st->total, if set), then its databases in one transaction: the
 * sequence store_lmdb_open() and store_lmdb_open_readonly() share.
 * Writable, a new store's databases are created, with its format. The
 * staging ones (cnew, hnew) may be missing from a store no daemon has
 * opened since they came (0.1's): then nothing is staged, until
 * lmdb_upgrade(). A store that has its databases is not written to.
 * On failure *step names the LMDB call
 * that failed, or the database that could not be opened (one missing from
 * a store opened read-only); st->env, if set, is the caller's to close.
 */
static int lmdb_env_open(struct lmdb_store *st, unsigned int flags, const char **step)
{
	unsigned int rdonly = flags & MDB_RDONLY, create = rdonly ? 0 : MDB_CREATE;
	MDB_txn *txn;
	MDB_dbi meta;
	int rc, dead, fresh;

	*step = "mdb_env_create";
	if ((rc = mdb_env_create(&st->env)) != 0)
		return rc;
	*step = "mdb_env_set_maxdbs";
	if ((rc = mdb_env_set_maxdbs(st->env, STORE_MAX_DBS)) != 0)
		return rc;
	*step = "mdb_env_set_maxreaders";
	if ((rc = mdb_env_set_maxreaders(st->env, STORE_MAX_READERS)) != 0)
		return rc;
	/* no transaction can be open yet: the only safe time to set the map size */
	*step = "mdb_env_set_mapsize";
	if (st->total > 0
	    && (rc = mdb_env_set_mapsize(st->env, (size_t) lmdb_map_size(st->total))) != 0)
		return rc;
	/* written: the meta page is flushed by the next commit, or the journal covers it */
	*step = "mdb_env_open";
	if ((rc = mdb_env_open(st->env, st->path, flags | MDB_NOTLS | (rdonly ? 0 : MDB_NOMETASYNC),
			       0600)) != 0)
		return rc;
	/* reader slots of processes that died would pin old pages forever */
	*step = "mdb_reader_check";
	if (!rdonly && (rc = mdb_reader_check(st->env, &dead)) != 0)
		return rc;
	*step = "mdb_txn_begin";
	if ((rc = mdb_txn_begin(st->env, NULL, rdonly, &txn)) != 0)
		return rc;
	fresh = !rdonly && mdb_dbi_open(txn, "meta", 0, &meta) == MDB_NOTFOUND;
	if ((rc = dbi_open(txn, "claims", create, &st->claims.big, step)) != 0
	    || (rc = dbi_open(txn, "msg", create, &st->msg, step)) != 0
	    || (rc = dbi_open(txn, "queue", create, &st->queue, step)) != 0
	    || (rc = dbi_open(txn, "meta", create, &st->meta, step)) != 0
	    || (rc = dbi_open(txn, "hist", create, &st->hist.big, step)) != 0
	    || (rc = dbi_open(txn, "hexpiry", create, &st->hexpiry, step)) != 0)
		goto fail;
	st->hist.has_small = mdb_dbi_open(txn, "hnew", 0, &st->hist.small) == 0;
	st->claims.has_small = mdb_dbi_open(txn, "cnew", 0, &st->claims.small) == 0;
	if ((rc = lmdb_format(st, txn, fresh, fresh, step)) != 0)
		goto fail;
	/* handles opened in a transaction outlive it only if it commits */
	*step = "mdb_txn_commit";
	return mdb_txn_commit(txn);

fail:
	mdb_txn_abort(txn);
	return rc;
}

/*
 * lmdb_upgrade - opened for writing, once the journal has replayed what it
 * must: the staging databases made if missing and our format recorded, in
 * a commit synced. Committed before the replay, it would take the
 * transaction id the journal's record is found by, and the commit that
 * record stands for would be lost. An LMDB code, *step saying which step
 */
static int lmdb_upgrade(struct lmdb_store *st, const char **step)
{
	MDB_txn *txn;
	int rc;

	*step = "mdb_txn_begin";
	if ((rc = mdb_txn_begin(st->env, NULL, 0, &txn)) != 0)
		return rc;
	if ((rc = dbi_open(txn, "hnew", MDB_CREATE, &st->hist.small, step)) != 0
	    || (rc = dbi_open(txn, "cnew", MDB_CREATE, &st->claims.small, step)) != 0)
		goto fail;
	st->hist.has_small = st->claims.has_small = 1;
	if ((rc = lmdb_format(st, txn, 1, 0, step)) != 0)
		goto fail;
	*step = "mdb_txn_commit";
	if ((rc = mdb_txn_commit(txn)) != 0)
		return rc;
	*step = "mdb_env_sync";
	return mdb_env_sync(st->env, 1);

fail:
	mdb_txn_abort(txn);
	return rc;
}

/* lmdb_new - a store not yet opened */
static struct lmdb_store *lmdb_new(const char *path)
{
	struct lmdb_store *st = xcalloc(1, sizeof(*st));

	st->base.ops = &lmdb_ops;
	st->claims = (struct lmdb_stage) { .what = "claim", .move = lmdb_claim_move };
	st->hist = (struct lmdb_stage) { .what = "story", .move = lmdb_story_move };

	pthread_rwlock_init(&st->gate, NULL);	/* readers first: see the header */
	st->path = xstrdup(path);
	st->lockfd = st->ownfd = -1;
	return st;
}

/* lmdb_free - release what lmdb_new() made */
static void lmdb_free(struct lmdb_store *st)
{
	pthread_rwlock_destroy(&st->gate);
	if (st->lockfd >= 0)
		close(st->lockfd);	/* its flock goes with it */
	if (st->ownfd >= 0)
		close(st->ownfd);
	free(st->path);
	free(st);
}

/*
 * lmdb_cache_drop - before a writable open: the kernel drops the clean
 * pages of data.mdb it has cached (dirty ones are written first, never
 * lost). Whatever filled the cache with a large read or write (fill -a's
 * batches, a backup's cp, rsync or mdb_copy, a compacted copy, a big
 * commit before the zero-filled file of store_grow.c) left it in large
 * folios, up to megabytes each,
 * and every commit's fdatasync() then walks the whole folio of each page
 * it rewrites: 3 to 5 times the CPU of a commit, and twice its time
 * (BENCHMARKS.md, "one session on an old LMDB store"). Faulted in again
 * at random through LMDB's map, the pages come back as small folios. The price is
 * a cold cache right after the start.
 */
static void lmdb_cache_drop(const char *path)
{
	char file[4096];
	int fd;

	snprintf(file, sizeof(file), "%s/data.mdb", path);
	if ((fd = open(file, O_RDONLY | O_CLOEXEC)) < 0)
		return;
	(void) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
}

/* lmdb_meta8 - name's 8-byte value in the meta DB, into v (a read of its own): 1, or 0 if none */
int lmdb_meta8(struct lmdb_store *st, const char *name, uint8_t v[8])
{
	MDB_val key = { strlen(name), (void *) name }, val;
	MDB_txn *txn;
	int found;

	if (mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn) != 0)
		return 0;
	if ((found = mdb_get(txn, st->meta, &key, &val) == 0 && val.mv_size == 8))
		memcpy(v, val.mv_data, 8);
	mdb_txn_abort(txn);
	return found;
}

/* lmdb_env_shut - close the journal and the environment, if open */
void lmdb_env_shut(struct lmdb_store *st)
{
	journal_close(st);
	if (st->env) {
		mdb_env_close(st->env);
		st->env = NULL;
	}
}

/*
 * lmdb_env_again - open the environment for writing, closed by the
 * caller or never opened, from a cold cache (lmdb_cache_drop()): at
 * st->total (store.map_size), or at the total the map was grown to at
 * run time (store_map.c) when that is larger (what it holds may lie past
 * map_size, and its journal's region lies past the grown map), with its
 * journal, which replays what it must, and only then brought up to date
 * (lmdb_upgrade()). An LMDB code or errno, *step
 * saying which step failed; the environment is then closed.
 */
int lmdb_env_again(struct lmdb_store *st, const char **step)
{
	uint64_t grown = 0;		/* meta's map_size: in this machine's byte order */
	int rc;

	lmdb_cache_drop(st->path);	/* before LMDB maps a page of it */
	if ((rc = lmdb_env_open(st, 0, step)) != 0)
		goto fail;
	/* no transaction is open yet: the map may still be set */
	if (lmdb_meta8(st, META_MAP_SIZE, (uint8_t *) &grown) && grown > st->total) {
		st->total = grown;
		*step = "mdb_env_set_mapsize";
		if ((rc = mdb_env_set_mapsize(st->env, (size_t) lmdb_map_size(grown))) != 0)
			goto fail;
	}
	*step = "journal";
	if ((rc = journal_open(st)) == 0 && (rc = lmdb_upgrade(st, step)) == 0)
		return 0;
fail:
	lmdb_env_shut(st);
	return rc;
}

/* lmdb_open_failed - the one failure path of both opens: say why, release; the STORE_E* code */
static int lmdb_open_failed(struct lmdb_store *st, const char *step, int rc, char *err,
			     size_t errlen)
{
	snprintf(err, errlen, "store %s: %s: %s", st->path, step, mdb_strerror(rc));
	lmdb_env_shut(st);
	lmdb_free(st);
	return lmdb_mdb_error(rc, NULL);
}

/*
 * lmdb_open - open or create the store at path, ours to write: one sequence,
 * one failure path; STORE_EAGAIN if another process writes it, or, alone,
 * has it open
 */
static int lmdb_open(struct store **out, const char *path, uint64_t map_size, int alone,
		     char *err, size_t errlen)
{
	struct lmdb_store *st = lmdb_new(path);
	const char *step = "mkdir";
	int rc;

	*out = NULL;
	/* the journal's region goes past the end of LMDB's map, inside map_size */
	st->total = map_size;
	/* the directory, if missing; anything else in its place fails its lock (ENOTDIR) */
	if (mkdir(path, 0700) != 0 && errno != EEXIST)
		return lmdb_open_failed(st, step, errno, err, errlen);
	/*
	 * lock.mdb shared waits out a compaction or idemrelayctl's write; alone,
	 * it waits for none; then the store is ours to write (store_compact.c)
	 */
	if ((st->lockfd = lmdb_lock(path, "lock.mdb", alone ? LOCK_EX | LOCK_NB : LOCK_SH)) >= 0
	    || errno != EWOULDBLOCK)
		st->ownfd = lmdb_lock(path, "", LOCK_EX | LOCK_NB);
	if (st->ownfd < 0 && errno != EWOULDBLOCK)
		return lmdb_open_failed(st, "locking it", errno, err, errlen);
	if (st->ownfd < 0) {
		snprintf(err, errlen, "the store at %s is open in another process (the daemon, "
			 "or another idemrelayctl)", path);
		lmdb_free(st);
		return STORE_EAGAIN;
	}
	if ((rc = lmdb_env_again(st, &step)) != 0
	    || (step = "count queue", rc = lmdb_space_count(st)) != 0)
		return lmdb_open_failed(st, step, rc, err, errlen);
	*out = &st->base;
	return 0;
}

/* store_lmdb_open - open or create the store at path */
int store_lmdb_open(struct store **out, const char *path, uint64_t map_size,
		    char *err, size_t errlen)
{
	return lmdb_open(out, path, map_size, 0, err, errlen);
}

/* store_lmdb_open_alone - open an existing store that no other process has open */
int store_lmdb_open_alone(struct store **out, const char *path, uint64_t map_size,
			  char *err, size_t errlen)
{
	int rc = store_lmdb_present(path, err, errlen);

	return rc ? rc : lmdb_open(out, path, map_size, 1, err, errlen);
}

/*
 * store_lmdb_present - is there a store at path? 0, or STORE_ENOTFOUND and
 * why: none, or one the caller may not read (it may well be there)
 */
int store_lmdb_present(const char *path, char *err, size_t errlen)
{
	struct stat sb;
	char data[4096];

	snprintf(data, sizeof(data), "%s/data.mdb", path);
	if (stat(data, &sb) == 0)
		return 0;
	if (errno == ENOENT || errno == ENOTDIR)
		snprintf(err, errlen, "no store at %s", path);
	else
		snprintf(err, errlen, "cannot read the store at %s: %s%s", path, strerror(errno),
			 errno == EACCES ? ": run as root or as the user the daemon runs as" : "");
	return STORE_ENOTFOUND;
}

/* store_lmdb_open_readonly - open an existing store for reading only */
int store_lmdb_open_readonly(struct store **out, const char *path, char *err, size_t errlen)
{
	struct lmdb_store *st;
	const char *step;
	int rc;

	*out = NULL;
	if ((rc = store_lmdb_present(path, err, errlen)) != 0)
		return rc;
	st = lmdb_new(path);
	st->lockfd = lmdb_lock(path, "lock.mdb", LOCK_SH);	/* waits out a compaction */
	if ((rc = lmdb_env_open(st, MDB_RDONLY, &step)) != 0)	/* ENOTFOUND: a database missing */
		return lmdb_open_failed(st, step, rc, err, errlen);
	*out = &st->base;
	return 0;
}

/* lmdb_close - close the environment; every transaction must be over */
static void lmdb_close(struct store *base)
{
	struct lmdb_store *st = (struct lmdb_store *) base;
	unsigned int flags = 0;

	/* the last commit's meta page, which the journal covered until now */
	if (st->env && !lmdb_broken(&st->base) && mdb_env_get_flags(st->env, &flags) == 0
	    && !(flags & MDB_RDONLY) && mdb_env_sync(st->env, 1) != 0)
		msg_warn("store: cannot sync at close: %m");
	lmdb_env_shut(st);
	lmdb_free(st);
}

/*
 * reopen_flush - with the environment closed: zero the failed record's
 * transaction id and flush data.mdb, so that the next open, which drops
 * the kernel's clean pages of it, reads what the disk has. 0 or errno.
 */
static int reopen_flush(struct lmdb_store *st)
{
	char file[4096];
	int fd, rc = 0;

	snprintf(file, sizeof(file), "%s/data.mdb", st->path);
	if ((fd = open(file, O_RDWR | O_CLOEXEC)) < 0)
		return errno;
	if (st->void_pos != 0)
		rc = lmdb_fill_zeros(fd, st->void_pos, st->void_pos + 8);
	/* a descriptor opened after the failure reports only new ones */
	if (rc == 0 && fdatasync(fd) != 0)
		rc = errno;
	close(fd);
	return rc;
}

/*
 * lmdb_reopen - after a failed sync: close the environment and open it
 * again from what is durable (see the header). Waits for every
 * transaction to end; for the writer thread, which holds none. 0 when
 * the store serves again; STORE_EIO when it is still broken (the disk
 * still fails): try again later.
 */
int lmdb_reopen(struct store *base)
{
	struct lmdb_store *st = (struct lmdb_store *) base;
	const char *step = "flush";
	int rc;

	pthread_rwlock_wrlock(&st->gate);
	if (!lmdb_broken(&st->base)) {
		pthread_rwlock_unlock(&st->gate);
		return 0;
	}
	lmdb_env_shut(st);			/* no sync: what it holds may not be on the disk */
	if ((rc = reopen_flush(st)) == 0)
		rc = lmdb_env_again(st, &step);
	if (rc == 0 && lmdb_space_count(st) != 0)
		msg_warn("store %s: cannot count the queue after reopening: the reserve "
			 "counts what it had", st->path);
	if (rc == 0) {
		st->void_pos = 0;
		__atomic_store_n(&st->grown_to, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&st->broken, 0, __ATOMIC_RELEASE);
		msg_info("store %s: reopened from what is durable after a failed sync", st->path);
	} else {
		msg_warn("store %s: cannot reopen after a failed sync: %s: %s", st->path, step,
			 mdb_strerror(rc));
	}
	pthread_rwlock_unlock(&st->gate);
	return rc == 0 ? 0 : STORE_EIO;
}

/* last_key_max - raise qid to dbi's last key if that is a greater QID; an LMDB code */
static int last_key_max(MDB_txn *txn, MDB_dbi dbi, char qid[STORE_QID_SIZE])
{
	char last[STORE_QID_SIZE];
	MDB_cursor *cur;
	MDB_val key, val;
	int rc;

	if ((rc = mdb_cursor_open(txn, dbi, &cur)) != 0)
		return rc;
	rc = mdb_cursor_get(cur, &key, &val, MDB_LAST);
	if (rc == 0 && lmdb_key_qid(&key, last) == 0 && strcmp(last, qid) > 0)
		strcpy(qid, last);
	mdb_cursor_close(cur);
	return rc == MDB_NOTFOUND ? 0 : rc;
}

/*
 * last_qid - the greatest QID ever spooled, "" if none: the greatest of
 * the last message still spooled, the last story (a message that left
 * with its story written) and meta's last_qid (one that left without, or
 * whose story expired: store_msg.c); a corrupt meta record is ignored,
 * with a warning, so that it fails no other figure of store_stats()
 */
static int last_qid(struct lmdb_store *st, MDB_txn *txn, char qid[STORE_QID_SIZE])
{
	MDB_val key = { sizeof(META_LAST_QID) - 1, META_LAST_QID }, val;
	int err, rc = 0;

	qid[0] = 0;
	err = lmdb_mdb_error(mdb_get(txn, st->meta, &key, &val), "get last_qid");
	if (err == 0 && lmdb_key_qid(&val, qid) != 0) {
		/* the keys still say most of it; the other figures stand */
		msg_warn("store: corrupt last_qid record, ignored");
	} else if (err != 0 && err != STORE_ENOTFOUND) {
		return err;
	}
	if ((rc = last_key_max(txn, st->msg, qid)) == 0)
		rc = last_key_max(txn, st->hist.big, qid);
	if (rc == 0 && st->hist.has_small)
		rc = last_key_max(txn, st->hist.small, qid);
	return lmdb_mdb_error(rc, "last qid");
}

/* lmdb_stats - entry counts, the oldest queued, the last QID, map usage: used, size and ceiling of LMDB's map */
static int lmdb_stats(struct store *base, struct store_stats *s, unsigned what)
{
	struct lmdb_store *st = (struct lmdb_store *) base;
	MDB_stat claims, cnew = { 0 }, queue, env;
	MDB_envinfo info;
	MDB_txn *txn;
	uint64_t freel;
	int rc, err;

	memset(s, 0, sizeof(*s));
	if ((err = lmdb_read_begin(st, &txn)) != 0)
		return err;
	if ((rc = mdb_stat(txn, st->claims.big, &claims)) == 0
	    && (!st->claims.has_small || (rc = mdb_stat(txn, st->claims.small, &cnew)) == 0)
	    && (rc = mdb_stat(txn, st->queue, &queue)) == 0
	    && (rc = mdb_env_stat(st->env, &env)) == 0
	    && (rc = mdb_env_info(st->env, &info)) == 0) {
		s->claims = claims.ms_entries + cnew.ms_entries;
		s->queued = queue.ms_entries;
		s->space.size = info.me_mapsize;
		s->space.used = ((uint64_t) info.me_last_pgno + 1) * env.ms_psize;
		lmdb_queue_oldest(st, txn, &s->oldest);
		err = last_qid(st, txn, s->last_qid);
		if (err == 0 && (what & STORE_STATS_STORIES))
			err = lmdb_hist_stories(st, txn, &s->stories);
	}
	lmdb_read_end(st, txn);
	if (err != 0 || (err = lmdb_mdb_error(rc, "stat")) != 0)
		return err;
	/* what LMDB holds: its pages up to the last, less those it may use again */
	if (lmdb_space_freelist(st, &freel) == 0 && freel * env.ms_psize < s->space.used)
		s->space.used -= freel * env.ms_psize;
	s->space.ceiling = lmdb_map_size(lmdb_map_ceiling(st));
	if (s->space.ceiling < s->space.size)
		s->space.ceiling = s->space.size;
	return 0;
}

/* the interface's table for LMDB */
const struct store_ops lmdb_ops = {
	.caps = STORE_CAP_LOCAL_READS | STORE_CAP_OWN_SPACE,
	.close = lmdb_close,
	.health = lmdb_health,
	.upkeep = lmdb_upkeep,
	.claims_get = lmdb_claims_get,
	.txn_begin = lmdb_txn_begin,
	.txn_claim_put = lmdb_txn_claim_put,
	.txn_msg_put = lmdb_txn_msg_put,
	.txn_msg_set_inflight = lmdb_txn_msg_set_inflight,
	.txn_msg_update = lmdb_txn_msg_update,
	.txn_commit = lmdb_txn_commit,
	.msg_load = lmdb_msg_load,
	.msg_drop = lmdb_msg_drop,
	.msg_change = lmdb_msg_change,
	.stats = lmdb_stats,
	.queue_walk = lmdb_queue_walk,
	.story_get = lmdb_story_get,
	.key_qids = lmdb_key_qids,
	.key_forget = lmdb_key_forget,
	.hist_count = lmdb_hist_count,
	.hist_expire = lmdb_hist_expire,
};
