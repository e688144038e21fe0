/*
 * NAME
 *	store_map 3
 * SUMMARY
 *	the map grows at run time, up to store.map_size_max or the disk
 * SYNOPSIS
 *	#include "store/store.h"
 *
 *	void store_lmdb_set_map_max(struct store *st, uint64_t max);
 * DESCRIPTION
 *	store.map_size is where the map starts. When less than a quarter of
 *	it is left beyond the reserve (store_space.c; the untouched tail and
 *	LMDB's freelist together count as left), or an acceptance
 *	was refused for room (store_space.c), the writer thread doubles it
 *	between two commits (lmdb_upkeep() calls lmdb_map_check()), up to
 *	the ceiling: store.map_size_max if set, and never past what the
 *	disk holding the store can still give (nine tenths of its free space
 *	plus what the file has). The map so grows as far as the disk, which
 *	is what an operator expects of a mail queue.
 *
 *	mdb_env_set_mapsize() remaps the file: no transaction of this process
 *	may be open then. Every transaction holds the store's gate shared
 *	(store_lmdb.c, store_txn.c); growing holds it alone, as lmdb_reopen() does. Readers in
 *	other processes (idemrelayctl) are told MDB_MAP_RESIZED by LMDB and
 *	take the new size (lmdb_read_begin()).
 *
 *	The journal's region (store_journal.c) lies just past LMDB's map,
 *	which is lmdb_map_jbase(total): the grown map covers it, so it moves
 *	first, in steps that each leave a store that opens correctly:
 *
 *	1. a new region past the new map: zeros, a header with a new id,
 *	   fsync'd. Nothing refers to it; a crash here opens the old map with
 *	   the old region.
 *	2. one transaction, synced the LMDB way (no record needed: every
 *	   earlier commit is then durable), says where the new region is and
 *	   the map's new total (meta DB "map_size", read by store_lmdb_open()). A
 *	   crash from here opens the grown map with the new region, which
 *	   holds no record yet.
 *	3. mdb_env_set_mapsize(): only now may LMDB write pages over the old
 *	   region, whose records can no longer be taken for the store's.
 *
 *	The log warns once per episode as the store nears its ceiling: at 80%
 *	and at 95% of it used (the reserve counted as used, since acceptance
 *	stops there), again only after it fell back below 75% and 90%.
 * DIAGNOSTICS
 *	"store: N% full: X MB of a ceiling of Y MB", and why the map could
 *	not grow.
 */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "../../util/log.h"
#include "store_int.h"

#define MB		(1ull << 20)
#define WARN_AT		80
#define WARN_LAST	95

/* lmdb_map_jbase - where the journal's region starts in a map of total bytes; 0: none */
uint64_t lmdb_map_jbase(uint64_t total)
{
	if (total < 4 * (uint64_t) STORE_JOURNAL_SIZE)
		return 0;
	return (total - STORE_JOURNAL_SIZE) & ~(uint64_t) 4095;
}

/* lmdb_map_size - LMDB's own map in a map of total bytes: what the journal's region leaves */
uint64_t lmdb_map_size(uint64_t total)
{
	return lmdb_map_jbase(total) ? lmdb_map_jbase(total) : total;
}

/* store_lmdb_set_map_max - the ceiling of the map's growth (store.map_size_max); 0: the disk */
void store_lmdb_set_map_max(struct store *base, uint64_t max)
{
	struct lmdb_store *st = (struct lmdb_store *) base;

	st->map_max = max;
}

/* disk_cap - the largest total the disk lets the map reach; 0 if it cannot tell */
static uint64_t disk_cap(struct lmdb_store *st)
{
	struct statvfs vfs;
	struct stat sb;
	int fd;

	if (mdb_env_get_fd(st->env, &fd) != 0 || fstat(fd, &sb) != 0
	    || fstatvfs(fd, &vfs) != 0)
		return 0;
	return (uint64_t) sb.st_blocks * 512 + (uint64_t) vfs.f_bavail * vfs.f_frsize / 10 * 9;
}

/* lmdb_map_ceiling - the total the map may grow to now: the setting, the disk */
uint64_t lmdb_map_ceiling(struct lmdb_store *st)
{
	uint64_t cap = disk_cap(st), max = st->map_max;

	if (cap != 0 && (max == 0 || cap < max))
		max = cap;
	return max > st->total ? max & ~(MB - 1) : st->total;
}

/*
 * lmdb_map_grow - grow the map to total bytes in the three steps above;
 * steps < 3 stops after that many, as a crash there would (tests). Called
 * with no transaction open on this thread.
 */
int lmdb_map_grow(struct lmdb_store *st, uint64_t total, int steps)
{
	MDB_val key = { sizeof(META_MAP_SIZE) - 1, META_MAP_SIZE }, val = { 8, &total };
	uint64_t jbase = lmdb_map_jbase(total), id = 0;
	MDB_txn *txn;
	int rc;

	if (total <= st->total)
		return 0;
	if (st->j && (rc = journal_region_new(st, jbase, &id)) != 0) {
		msg_warn("store: cannot grow the map to %llu MB: journal: %s",
			 (unsigned long long) (total / MB), strerror(rc));
		return rc == ENOSPC || rc == EDQUOT ? STORE_ENOSPC : STORE_EIO;
	}
	if (steps < 2)
		return 0;
	pthread_rwlock_wrlock(&st->gate);
	if (st->env == NULL || lmdb_broken(&st->base))
		rc = EIO;			/* a failed sync: the reopen comes first */
	else if ((rc = mdb_txn_begin(st->env, NULL, 0, &txn)) == 0) {
		/* the new total, in the transaction that moves the journal */
		if ((rc = mdb_put(txn, st->meta, &key, &val, 0)) != 0)
			mdb_txn_abort(txn);
		else
			rc = journal_move_commit(st, txn, jbase, id);
	}
	if (rc == 0 && steps >= 3
	    && (rc = mdb_env_set_mapsize(st->env, (size_t) lmdb_map_size(total))) == 0) {
		msg_info("store: map grown from %llu MB to %llu MB",
			 (unsigned long long) (st->total / MB), (unsigned long long) (total / MB));
		st->total = total;		/* what lmdb_reopen() opens */
	}
	pthread_rwlock_unlock(&st->gate);
	if (rc != 0)
		msg_warn("store: cannot grow the map to %llu MB: %s",
			 (unsigned long long) (total / MB), mdb_strerror(rc));
	return lmdb_mdb_error(rc, "grow map");
}

/* warn_full - say once per episode that the store nears its ceiling */
static void warn_full(struct lmdb_store *st, uint64_t used, uint64_t ceiling)
{
	uint64_t pct = ceiling ? used * 100 / ceiling : 0;
	int level = pct >= WARN_LAST ? WARN_LAST : pct >= WARN_AT ? WARN_AT : 0;

	if (level > st->warned) {
		msg_warn("store: %llu%% full: %llu MB used of a ceiling of %llu MB (%s);"
			 " new mail is refused when it is full",
			 (unsigned long long) pct, (unsigned long long) (used / MB),
			 (unsigned long long) (ceiling / MB),
			 st->map_max && ceiling >= lmdb_map_jbase(st->map_max)
			 ? "store.map_size_max" : "the disk");
		st->warned = level;
	} else if ((st->warned == WARN_LAST && pct < WARN_LAST - 5)
		   || (st->warned == WARN_AT && pct < WARN_AT - 5)) {
		st->warned = pct < WARN_AT - 5 ? 0 : WARN_AT;
	}
}

/* lmdb_map_due - should lmdb_map_check() look now? cheap, any thread */
int lmdb_map_due(struct lmdb_store *st, uint64_t pages, uint64_t last)
{
	if (__atomic_load_n(&st->grow_wanted, __ATOMIC_RELAXED))
		return 1;
	return (last >= pages || (pages - last) * 2 < pages)
	    && last != __atomic_load_n(&st->checked_last, __ATOMIC_RELAXED);
}

/*
 * lmdb_map_check - between commits, on the writer thread: warn as the
 * ceiling nears, and grow the map when a quarter of it is left
 */
int lmdb_map_check(struct lmdb_store *st)
{
	uint64_t psize, map, pages, last, freel = 0, room, ceiling = 0, want;
	MDB_stat qs = { 0 };
	MDB_txn *txn;
	uint64_t reserve;
	int rc, err, wanted;

	if ((err = lmdb_gate_enter(st)) != 0)
		return err;
	if ((err = lmdb_space_geometry(st, &psize, &map, &last)) != 0
	    || !lmdb_map_due(st, map / psize, last)) {
		lmdb_gate_leave(st);
		return err;
	}
	pages = map / psize;
	wanted = __atomic_exchange_n(&st->grow_wanted, 0, __ATOMIC_RELAXED);
	if ((err = lmdb_space_freelist(st, &freel)) == 0
	    && (err = lmdb_read_begin(st, &txn)) == 0) {
		if ((rc = mdb_stat(txn, st->queue, &qs)) != 0)
			err = lmdb_mdb_error(rc, "stat queue");
		lmdb_read_end(st, txn);
		ceiling = lmdb_map_ceiling(st);
	}
	lmdb_gate_leave(st);
	if (err != 0)
		return err;
	/* the reserve counts as used: full is where acceptance stops */
	reserve = lmdb_space_reserve(psize, pages, qs.ms_entries,
				     __atomic_load_n(&st->queued_rcpts, __ATOMIC_RELAXED));
	room = (last < pages ? pages - last : 0) + freel;
	warn_full(st, ((last > freel ? last - freel : 0) + reserve) * psize, lmdb_map_size(ceiling));
	/* early enough that a burst between two checks does not reach the reserve */
	if (room >= reserve + pages / 4 && !wanted) {
		__atomic_store_n(&st->checked_last, last, __ATOMIC_RELAXED);
		return 0;
	}
	want = st->total * 2 < ceiling ? st->total * 2 : ceiling;
	if (want <= st->total) {		/* at the ceiling: acceptance stops at the reserve */
		__atomic_store_n(&st->checked_last, last, __ATOMIC_RELAXED);
		return 0;
	}
	return lmdb_map_grow(st, want, 3);
}
