/*
 * NAME
 *	store_grow 3
 * SUMMARY
 *	the store's upkeep: written, allocated space ahead of LMDB's last page
 * SYNOPSIS
 *	#include "store/lmdb/store_int.h"
 *
 *	unsigned lmdb_health(struct store *st);
 *
 *	int lmdb_upkeep(struct store *st);
 * DESCRIPTION
 *	Without MDB_WRITEMAP, LMDB grows data.mdb one commit at a time:
 *	every page written past the end of the file makes the file system
 *	allocate blocks and change the file's size, and the commit's
 *	fdatasync() must then write that metadata too (on ext4 without a
 *	journal, the inode and the block bitmap, scattered). Measured here,
 *	that is a quarter of a fresh message's commit while the spool grows.
 *
 *	lmdb_upkeep() writes zeros past the end of the file, fdatasync()s
 *	them once, and so keeps between half a step and a step of file
 *	beyond LMDB's last page: later commits only overwrite blocks that
 *	exist, inside the size the file already has. This is what databases
 *	do for their logs (zero-filled segments); fallocate() would not do,
 *	since its unwritten extents turn into written ones at the first
 *	write, which is a metadata change again.
 *
 *	The step grows with the store (a quarter of what LMDB uses, from
 *	1 MB to 16 MB), so that a small store stays small, and the file
 *	never grows past the map size. Space is only reserved, never
 *	promised: LMDB still reports a full map, and a disk that fills up
 *	stops the zero-filling, not the store.
 *
 *	The zeros are written while holding LMDB's writer lock (inside a
 *	write transaction that is then aborted), so that no commit writes
 *	pages past the end of the file at the same time; what lies beyond
 *	LMDB's last page is no page of LMDB's. The writer thread calls it
 *	after each group commit, once the replies are out; it first lets the
 *	map itself grow when it is due (store_map.c).
 * DIAGNOSTICS
 *	0, or a STORE_E* code when the zeros could not be written (the store
 *	itself is unchanged and usable).
 */
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../util/log.h"
#include "store_int.h"

#define GROW_MIN	(1u << 20)
#define GROW_MAX	(16u << 20)
/*
 * One page per pwrite. The page cache keeps what one write brought in as
 * one folio, up to megabytes: LMDB later rewrites single pages of such a
 * folio, and each fdatasync then walks the whole folio's mappings and
 * buffers. 14 scattered pages took 290 us instead of 175 us to flush here
 * after a megabyte-sized fill (BENCHMARKS.md).
 */
#define GROW_CHUNK	4096u

/* grow_step - how far ahead of used bytes the file should reach */
static uint64_t grow_step(uint64_t used)
{
	uint64_t step = used / 4;

	return step < GROW_MIN ? GROW_MIN : step > GROW_MAX ? GROW_MAX : step;
}

/* lmdb_fill_zeros - write zeros from from to to, a page per pwrite; 0 or errno */
int lmdb_fill_zeros(int fd, uint64_t from, uint64_t to)
{
	static const char zeros[GROW_CHUNK];
	ssize_t n;

	while (from < to) {
		size_t len = to - from < GROW_CHUNK ? (size_t) (to - from) : GROW_CHUNK;

		if ((n = pwrite(fd, zeros, len, (off_t) from)) < 0)
			return errno;
		from += (uint64_t) n;
	}
	return 0;
}

/*
 * grow_fill - zeros from the end of the file to want, then one fdatasync.
 * That flush also carries the last commit's meta page: if it fails, the
 * store is broken as by a failed commit (store_journal.c).
 */
static int grow_fill(struct lmdb_store *st, int fd, uint64_t end, uint64_t want)
{
	int err = lmdb_fill_zeros(fd, end, want);

	if (err != 0)
		return err == ENOSPC || err == EDQUOT ? STORE_ENOSPC : STORE_EIO;
	if (fdatasync(fd) == 0)
		return 0;
	lmdb_break(st, "the sync of the space reserved ahead failed");
	return STORE_EIO;
}

/* grow_due - has the store come within half a step of the end? */
static int grow_due(uint64_t used, uint64_t end, uint64_t map)
{
	return end < map && end < used + grow_step(used) / 2;
}

/*
 * lmdb_health - refusing after a failed sync, with a reopen to do; upkeep
 * due when the file or the map should grow (cheap, any thread)
 */
unsigned lmdb_health(struct store *base)
{
	struct lmdb_store *st = (struct lmdb_store *) base;
	uint64_t psize, map, last;
	int due;

	if (lmdb_gate_enter(st) != 0)	/* broken: see store_lmdb.c */
		return STORE_HREFUSING | STORE_HUPKEEP;
	due = lmdb_space_geometry(st, &psize, &map, &last) == 0
	    && (grow_due(last * psize, __atomic_load_n(&st->grown_to, __ATOMIC_RELAXED), map)
		|| lmdb_map_due(st, map / psize, last));	/* the map itself */
	lmdb_gate_leave(st);
	return due ? STORE_HUPKEEP : 0;
}

/* grow_run - lmdb_upkeep()'s zeros, with the store's gate held */
static int grow_run(struct lmdb_store *st)
{
	uint64_t psize, last, used, map, size, want;
	struct stat sb;
	MDB_txn *txn;
	off_t hole;
	int fd, rc, err;

	if ((err = lmdb_space_geometry(st, &psize, &map, &last)) != 0)
		return err;
	if (!grow_due(last * psize, __atomic_load_n(&st->grown_to, __ATOMIC_RELAXED), map))
		return 0;			/* the common case: no lock, no syscall */
	if ((err = lmdb_mdb_error(mdb_txn_begin(st->env, NULL, 0, &txn), "begin")) != 0)
		return err;
	if ((err = lmdb_space_geometry(st, &psize, &map, &last)) == 0
	    && (rc = mdb_env_get_fd(st->env, &fd)) != 0)
		err = lmdb_mdb_error(rc, "env fd");
	if (err == 0 && fstat(fd, &sb) != 0)
		err = STORE_EIO;
	if (err == 0) {
		used = last * psize;		/* up to and including LMDB's last page */
		/* written up to the first hole: the journal's region lies past one */
		hole = lseek(fd, (off_t) used, SEEK_HOLE);
		size = hole >= 0 && (uint64_t) hole < (uint64_t) sb.st_size ? (uint64_t) hole
		    : (uint64_t) sb.st_size;
		want = used + grow_step(used) < map ? used + grow_step(used) : map;
		__atomic_store_n(&st->grown_to, size, __ATOMIC_RELAXED);
		if (grow_due(used, size, map)) {
			err = grow_fill(st, fd, size > used ? size : used, want);
			/* made, or tried for */
			__atomic_store_n(&st->grown_to, want, __ATOMIC_RELAXED);
		}
	}
	mdb_txn_abort(txn);
	if (err != 0)
		msg_warn("store: cannot reserve space ahead of the store: %s", store_strerror(err));
	return err;
}

/*
 * lmdb_upkeep - reopen a store that a failed sync broke (store_lmdb.c);
 * else grow the map if due, and keep half a step to a step of zeros past
 * LMDB's last page. A failed try (a full disk) is not tried again before
 * the store has grown by another half step, so that a full disk costs
 * the writer no write per batch, and the warning comes that often at most.
 */
int lmdb_upkeep(struct store *base)
{
	struct lmdb_store *st = (struct lmdb_store *) base;
	int err;

	if (lmdb_broken(base))
		return lmdb_reopen(base);
	(void) lmdb_map_check(st);	/* the map first (the gate alone): zeros go up to its end */
	if ((err = lmdb_gate_enter(st)) != 0)
		return err;
	err = grow_run(st);
	lmdb_gate_leave(st);
	return err;
}
