/*
 * NAME
 *	store_compact 3
 * SUMMARY
 *	compact the store at the daemon's start when its free list is large
 * SYNOPSIS
 *	#include "store/lmdb/store_lmdb.h"
 *
 *	int store_lmdb_compact(struct store *st);
 * DESCRIPTION
 *	LMDB 0.9 never gives pages back: after a backlog (an upstream down
 *	for an hour, the spool grown and then delivered) the pages the spool
 *	held stay on the free list, as many small records as there were
 *	commits to free them, and every later commit reads the oldest record
 *	and writes one of its own: two more pages a commit once the free list
 *	is two levels deep (BENCHMARKS.md, "one session on an old LMDB
 *	store"). Only a copy of the live pages, packed, shortens it.
 *
 *	store_lmdb_compact() makes that copy at the daemon's start, when the
 *	free list holds at least COMPACT_MIN_FREE bytes and a quarter of the
 *	pages in use: mdb_env_copyfd2(MDB_CP_COMPACT) into data.mdb.compact
 *	beside data.mdb, the journal's region (store_journal.c) written into
 *	it empty, the copy flushed; then the environment is synced and
 *	closed, the copy renamed over data.mdb, the directory flushed, and
 *	the environment opened again, which drops the copy's pages from the
 *	kernel's cache first (its large writes leave large folios there:
 *	store_lmdb.c's lmdb_cache_drop()); a directory that cannot be flushed
 *	fails the start: a power cut could bring the old file back, and the
 *	mail accepted meanwhile would go with it. A crash at any moment leaves either the
 *	old file, whole (a copy left beside it is removed at the next
 *	start), or the copy, whole and flushed before it took the name.
 *	A copy that fails (no room on the disk) is removed and the store
 *	serves as it was.
 *
 *	No other process may have the store open meanwhile: its writes would
 *	go to the old file, and LMDB's lock file would hold another file's
 *	transaction ids. So every open (store_lmdb.c, for the daemon and
 *	idemrelayctl alike) holds lock.mdb with flock() shared while it is
 *	open (lmdb_lock()), and a compaction takes it exclusively without
 *	waiting: with idemrelayctl reading there, it is put off to the next
 *	start. LMDB's own locks on that file are fcntl() locks, which Linux
 *	keeps apart from flock() ones. An idemrelayctl started during a
 *	compaction waits for it.
 *
 *	Only the store's owner compacts. Every open that writes (the daemon,
 *	idemrelayctl's writes) owns the store while it is open: its
 *	directory flock'd exclusively, without waiting (STORE_EAGAIN: a
 *	second daemon, whose start would deliver every queued message
 *	twice). So no two compactions meet, nor a compaction and another
 *	writer, nor two writers' journals (store_journal.c). Linux converts
 *	a flock() by letting the shared lock go first: a conversion that
 *	fails leaves us with none for a moment, in which only a reader or a
 *	writer that then finds the store owned can take it. idemrelayctl
 *	about to write takes lock.mdb exclusively without waiting as well,
 *	and holds it while it writes: refused while a daemon has the store
 *	open, and a daemon starting meanwhile waits for it.
 * DIAGNOSTICS
 *	0 when the store serves (compacted, not worth it, or put off; each
 *	logged), or a STORE_E* code when it could not be opened again after
 *	the copy took the old file's place (the store is then closed).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../util/dir.h"
#include "../../util/log.h"
#include "store_int.h"

#define COMPACT_MIN_FREE	(16u << 20)	/* bytes on the free list, at least */
#define COMPACT_SUFFIX		".compact"

/*
 * lmdb_lock - name in the store at path ("lock.mdb", made if missing, or
 * "" for the directory), flock'd how; its descriptor, or -1 (EWOULDBLOCK:
 * held by another process, or by another open in this one)
 */
int lmdb_lock(const char *path, const char *name, int how)
{
	char file[4096];
	int fd, rc;

	snprintf(file, sizeof(file), "%s/%s", path, name);
	if ((fd = open(file, O_RDONLY | O_CLOEXEC | (*name ? O_CREAT : O_DIRECTORY), 0600)) < 0)
		return -1;		/* LMDB's own open says why */
	while ((rc = flock(fd, how)) != 0 && errno == EINTR)
		;
	if (rc != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* shared - back to the shared lock every open holds */
static void shared(struct lmdb_store *st)
{
	while (flock(st->lockfd, LOCK_SH) != 0 && errno == EINTR)
		;
}

/* alone - lock.mdb exclusively, without waiting: 1 if taken, else shared again */
static int alone(struct lmdb_store *st)
{
	if (flock(st->lockfd, LOCK_EX | LOCK_NB) == 0)
		return 1;
	shared(st);
	return 0;
}

/* due - is the free list worth a copy? its pages and those in use */
static int due(struct lmdb_store *st, uint64_t *freel, uint64_t *used)
{
	uint64_t psize, map, last;

	if (lmdb_space_geometry(st, &psize, &map, &last) != 0
	    || lmdb_space_freelist(st, freel) != 0)
		return 0;
	*used = last + 1;
	return *freel * psize >= COMPACT_MIN_FREE && *freel * 4 >= *used;
}

/* copy - the live pages, packed, and the journal's region, into tmp, flushed; 0 or an LMDB code or errno */
static int copy(struct lmdb_store *st, const char *tmp)
{
	int fd, rc;

	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0)
		return errno;
	if ((rc = mdb_env_copyfd2(st->env, fd, MDB_CP_COMPACT)) == 0
	    && (rc = journal_region_copy(st, fd)) == 0 && fsync(fd) != 0)
		rc = errno;
	if (close(fd) != 0 && rc == 0)
		rc = errno;
	return rc;
}

/*
 * swap - close the environment, put the copy at tmp in data.mdb's place
 * and open the environment again (the copy, or the old file if the rename
 * failed: warned). An LMDB code or errno when it cannot be opened again
 * or the rename cannot be made durable, *step saying where.
 */
static int swap(struct lmdb_store *st, const char *tmp, const char *data, const char **step)
{
	int rc;

	*step = "sync";
	if ((rc = mdb_env_sync(st->env, 1)) != 0)
		return rc;
	lmdb_env_shut(st);
	if (rename(tmp, data) != 0) {
		msg_warn("store %s: cannot put the compacted copy in place: %m: it serves as it is",
			 st->path);
		(void) unlink(tmp);
	} else if ((rc = dir_sync(st->path)) < 0) {
		/* a power cut could bring the old file back: what it accepts now would go */
		*step = "flushing the directory after the rename";
		return -rc;			/* this file's codes are LMDB's or an errno */
	}
	return lmdb_env_again(st, step);
}

/* store_lmdb_compact - at the daemon's start: the store copied compact in place, when worth it */
int store_lmdb_compact(struct store *base)
{
	struct lmdb_store *st = lmdb_of(base);
	char tmp[4096], data[4096];
	uint64_t freel, used, left = 0;
	struct timespec t0, t1;
	const char *step;
	int rc;

	snprintf(tmp, sizeof(tmp), "%s/data.mdb" COMPACT_SUFFIX, st->path);
	snprintf(data, sizeof(data), "%s/data.mdb", st->path);
	/* a copy a crash left behind; with our shared lock held, nobody is writing one */
	(void) unlink(tmp);
	if (!due(st, &freel, &used))
		return 0;
	if (st->lockfd < 0) {
		msg_warn("store %s: lock.mdb could not be locked: not compacted", st->path);
		return 0;
	}
	if (!alone(st)) {
		msg_info("store %s: another process has it open: not compacted", st->path);
		return 0;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if ((rc = copy(st, tmp)) != 0) {
		msg_warn("store %s: cannot compact it (%s): it serves as it is", st->path,
			 mdb_strerror(rc));
		(void) unlink(tmp);
		shared(st);
		return 0;
	}
	if ((rc = swap(st, tmp, data, &step)) != 0) {
		msg_error("store %s: compacting it: %s: %s", st->path, step, mdb_strerror(rc));
		shared(st);
		return lmdb_mdb_error(rc, NULL);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	(void) lmdb_space_freelist(st, &left);
	msg_info("store %s: compacted: %llu of its %llu pages were free, %llu are now (%.1f s)",
		 st->path, (unsigned long long) freel, (unsigned long long) used,
		 (unsigned long long) left,
		 (double) (t1.tv_sec - t0.tv_sec) + (double) (t1.tv_nsec - t0.tv_nsec) / 1e9);
	__atomic_store_n(&st->grown_to, 0, __ATOMIC_RELAXED);	/* the file is shorter now */
	shared(st);
	return 0;
}
