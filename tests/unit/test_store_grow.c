/*
 * test_store_grow - store_upkeep(): zero-filled file ahead of LMDB's last
 * page, so that commits overwrite blocks the file already has instead of
 * growing it; never past the map size; nothing LMDB wrote is touched;
 * the store reads the same afterwards, also read-only and after reopen;
 * a disk that refuses the zeros costs one try per half step, and the
 * store goes on; a writable open leaves none of data.mdb's clean pages
 * in the kernel's cache (large folios: store_lmdb.c's lmdb_cache_drop()).
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <lmdb.h>

#include "../../store/store.h"
#include "../../store/lmdb/store_int.h"
#include "../../util/buf.h"
#include "test_store_fx.h"

#define MB	(1u << 20)

/*
 * file_size - how much of the store's data file is written: up to its
 * first hole, past which the journal's region lies (or its size if none)
 */
static uint64_t file_size(const struct fx *f)
{
	char p[160];
	struct stat sb;
	off_t hole;
	int fd;

	snprintf(p, sizeof(p), "%s/data.mdb", f->path);
	if ((fd = open(p, O_RDONLY)) < 0 || fstat(fd, &sb) != 0)
		fail_msg("stat %s: %s", p, strerror(errno));
	hole = lseek(fd, 0, SEEK_HOLE);
	close(fd);
	return hole >= 0 && hole < sb.st_size ? (uint64_t) hole : (uint64_t) sb.st_size;
}

/* used_bytes - what LMDB uses: up to and including its last page */
static uint64_t used_bytes(const struct fx *f)
{
	MDB_envinfo info;
	MDB_stat stat;

	assert_int_equal(mdb_env_info(lmdb_of(f->st)->env, &info), 0);
	assert_int_equal(mdb_env_stat(lmdb_of(f->st)->env, &stat), 0);
	return ((uint64_t) info.me_last_pgno + 1) * stat.ms_psize;
}

/* zeros_from - every written byte of the data file from off on is zero */
static void zeros_from(const struct fx *f, uint64_t off)
{
	char p[160], buf[65536];
	uint64_t end;
	ssize_t n;
	int fd, i;

	snprintf(p, sizeof(p), "%s/data.mdb", f->path);
	assert_true((fd = open(p, O_RDONLY)) >= 0);
	for (end = file_size(f); off < end && (n = pread(fd, buf, sizeof(buf) < end - off ? sizeof(buf)
							 : (size_t) (end - off), (off_t) off)) > 0;) {
		for (i = 0; i < n; i++)
			if (buf[i] != 0)
				fail_msg("byte %llu past LMDB's last page: got %d, want 0",
					 (unsigned long long) off + (unsigned) i, buf[i]);
		off += (uint64_t) n;
	}
	close(fd);
}

/* put_msg - one committed message of len bytes, content derived from i */
static int put_msg(struct store *st, int i, size_t len)
{
	struct store_msg m;
	struct store_rcpt r;
	struct store_txn *t;
	char addr[] = "rcpt@example.net";
	int rc;

	memset(&m, 0, sizeof(m));
	memset(&r, 0, sizeof(r));
	snprintf(m.qid, sizeof(m.qid), "GROW%08d", i);
	m.from = "sender@example.com";
	m.client = "helo [192.0.2.1]";
	r.addr = addr;
	m.rcpts = &r;
	m.n_rcpts = 1;
	m.data = xmalloc(len);
	memset(m.data, 'a' + i % 26, len);
	m.data_len = len;
	if ((rc = store_txn_begin(st, NULL, 0, &t)) == 0) {
		store_txn_msg_put(t, &m);
		rc = store_txn_commit(t);
	}
	free(m.data);
	return rc;
}

/* check_msg - message i is there, whole */
static void check_msg(struct store *st, int i, size_t len)
{
	struct store_msg m;
	char qid[STORE_QID_SIZE];
	size_t k;

	snprintf(qid, sizeof(qid), "GROW%08d", i);
	CHECK_INT(qid, store_msg_load(st, qid, &m), 0);
	CHECK_INT("data_len", m.data_len, len);
	for (k = 0; k < len; k++)
		if (m.data[k] != 'a' + i % 26)
			fail_msg("%s: byte %zu: got %d, want %d", qid, k, m.data[k], 'a' + i % 26);
	store_msg_free(&m);
}

/* test_grow_reserves - a step of zeros past the last page; commits then keep the size */
static void test_grow_reserves(void **state)
{
	struct fx *f = *state;
	uint64_t used, size;
	int i;

	CHECK_INT("put", put_msg(f->st, 0, 3000), 0);
	used = used_bytes(f);
	CHECK_INT("store_upkeep", store_upkeep(f->st), 0);
	size = file_size(f);
	if (size < used + MB / 2 || size > used + MB)
		fail_msg("file size: got %llu, want in [%llu, %llu]", (unsigned long long) size,
			 (unsigned long long) (used + MB / 2), (unsigned long long) (used + MB));
	zeros_from(f, used);
	CHECK_INT("a second store_upkeep changes nothing", store_upkeep(f->st), 0);
	CHECK_INT("size", file_size(f), size);

	/* commits inside the reserve overwrite it: the file keeps its size */
	for (i = 1; used_bytes(f) + 64 * 1024 < size; i++) {
		CHECK_INT("put", put_msg(f->st, i, 3000), 0);
		CHECK_INT("file size while inside the reserve", file_size(f), size);
	}
	if (i < 20)
		fail_msg("messages inside the reserve: got %d, want at least 20", i);
	zeros_from(f, used_bytes(f));
	while (i-- > 0)
		check_msg(f->st, i, 3000);
}

/* test_grow_follows - the reserve moves on as the store grows, and reopens whole */
static void test_grow_follows(void **state)
{
	struct fx *f = *state;
	struct store *ro;
	char err[256];
	uint64_t size;
	int i;

	for (i = 0; i < 400; i++) {
		CHECK_INT("put", put_msg(f->st, i, 20000), 0);
		CHECK_INT("store_upkeep", store_upkeep(f->st), 0);
		size = file_size(f);
		if (size < used_bytes(f) + MB / 2 || size > TEST_MAP)
			fail_msg("after %d: file %llu, used %llu: want at least half a MB ahead,"
				 " within the map", i, (unsigned long long) size,
				 (unsigned long long) used_bytes(f));
	}
	if (used_bytes(f) < 6 * MB)
		fail_msg("used: got %llu, want the store past 6 MB",
			 (unsigned long long) used_bytes(f));
	/* a quarter of what is used, once past the first MB */
	if (file_size(f) < used_bytes(f) + used_bytes(f) / 8)
		fail_msg("reserve: got %llu, want at least %llu",
			 (unsigned long long) (file_size(f) - used_bytes(f)),
			 (unsigned long long) (used_bytes(f) / 8));
	zeros_from(f, used_bytes(f));

	CHECK_INT("read-only open", store_lmdb_open_readonly(&ro, f->path, err, sizeof(err)), 0);
	check_msg(ro, 123, 20000);
	store_close(ro);
	fx_reopen(f, TEST_MAP);
	for (i = 0; i < 400; i++)
		check_msg(f->st, i, 20000);
	CHECK_INT("put after reopen", put_msg(f->st, 400, 20000), 0);
	check_msg(f->st, 400, 20000);
}

/* resident - pages of data.mdb from off, len bytes, in the kernel's cache */
static size_t resident(const struct fx *f, size_t off, size_t len)
{
	size_t psz = (size_t) sysconf(_SC_PAGESIZE), n = len / psz, i, in = 0;
	unsigned char *vec = xmalloc(n);
	char p[160];
	void *map;
	int fd;

	snprintf(p, sizeof(p), "%s/data.mdb", f->path);
	assert_true((fd = open(p, O_RDONLY)) >= 0);
	assert_true((map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, (off_t) off)) != MAP_FAILED);
	assert_int_equal(mincore(map, len, vec), 0);
	for (i = 0; i < n; i++)
		in += vec[i] & 1;
	munmap(map, len);
	close(fd);
	free(vec);
	return in;
}

/* read_all - read the first len bytes of data.mdb a MB at a time, as cp does */
static void read_all(const struct fx *f, size_t len)
{
	static char buf[MB];
	char p[160];
	size_t off;
	int fd;

	snprintf(p, sizeof(p), "%s/data.mdb", f->path);
	assert_true((fd = open(p, O_RDONLY)) >= 0);
	for (off = 0; off < len; off += sizeof(buf))
		assert_true(pread(fd, buf, sizeof(buf), (off_t) off) > 0);
	close(fd);
}

/*
 * can_drop - can dir's file system show a file's clean pages dropped from
 * the kernel's cache (POSIX_FADV_DONTNEED)? Not tmpfs or ramfs: their
 * cache is where their files are. A file of 1 MB written, synced, dropped:
 * at most a tenth of it left resident.
 */
static int can_drop(const char *dir)
{
	static char buf[MB];
	size_t page = (size_t) sysconf(_SC_PAGESIZE), n = MB / page, i, in = 0;
	unsigned char vec[MB / 4096];
	char p[64];
	void *map;
	int fd, ok;

	snprintf(p, sizeof(p), "%s/drop-probe.XXXXXX", dir);
	if ((fd = mkstemp(p)) < 0)
		return 0;
	unlink(p);
	memset(buf, 'x', sizeof(buf));
	ok = n <= sizeof(vec) && write(fd, buf, sizeof(buf)) == (ssize_t) sizeof(buf)
	    && fdatasync(fd) == 0 && posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0
	    && (map = mmap(NULL, MB, PROT_READ, MAP_SHARED, fd, 0)) != MAP_FAILED;
	if (ok) {
		ok = mincore(map, MB, vec) == 0;
		for (i = 0; ok && i < n; i++)
			in += vec[i] & 1;
		munmap(map, MB);
	}
	close(fd);
	return ok && in <= n / 10;
}

/* the base of test_open_drops_cache's store: /tmp if it can show the drop, else on a disk */
static const char *drop_base;

/* fx_setup_drop - a store where a drop from the kernel's cache shows (can_drop), if any */
static int fx_setup_drop(void **state)
{
	static const char *const bases[] = { "/tmp", "/var/tmp", "." };
	size_t i;

	for (i = 0; i < sizeof(bases) / sizeof(bases[0]) && drop_base == NULL; i++)
		if (can_drop(bases[i]))
			drop_base = bases[i];
	return fx_setup_at(state, TEST_MAP, drop_base ? drop_base : "/tmp");
}

/*
 * test_open_drops_cache - data.mdb read whole by another program (a
 * backup's cp) sits in the kernel's cache as large folios, and each page
 * a commit rewrites would dirty (and its fdatasync walk) a whole folio:
 * a writable open has the kernel drop those pages first. Seen in the
 * middle of a store whose messages are gone: nothing the open reads is
 * there (the meta pages, the roots and the free list are at the ends),
 * so what is cached there after the open was cached before it.
 */
static void test_open_drops_cache(void **state)
{
	struct fx *f = *state;
	char qid[STORE_QID_SIZE];
	size_t used, third, pages, in;
	int i;

	if (drop_base == NULL) {
		print_message("test_open_drops_cache: skipped: /tmp, /var/tmp and the working "
			      "directory keep a file's pages cached after a drop (tmpfs?): "
			      "nothing to see there\n");
		skip();
	}
	for (i = 0; i < 48; i++)
		CHECK_INT("put", put_msg(f->st, i, MB), 0);
	for (i = 0; i < 48; i++) {
		snprintf(qid, sizeof(qid), "GROW%08d", i);
		CHECK_INT("drop", store_msg_drop(f->st, qid), 0);
	}
	used = (size_t) used_bytes(f);
	third = used / 3 / MB * MB;
	pages = third / (size_t) sysconf(_SC_PAGESIZE);
	store_close(f->st);
	f->st = NULL;
	read_all(f, used);
	if ((in = resident(f, third, third)) < pages * 9 / 10)
		fail_msg("the middle third cached after the read: %zu of %zu pages, want nearly all",
			 in, pages);
	fx_open(f, TEST_MAP);
	if ((in = resident(f, third, third)) > pages / 10)
		fail_msg("the middle third cached after the open: %zu of %zu pages, want at most"
			 " a tenth", in, pages);
	CHECK_INT("put after", put_msg(f->st, 48, 3000), 0);
	check_msg(f->st, 48, 3000);
}

/* test_grow_map_cap - never past the map; a full map is still a full map */
static void test_grow_map_cap(void **state)
{
	struct fx *f = *state;
	int i, rc = 0;

	store_lmdb_set_map_max(f->st, 256u << 10);	/* the map may not grow either */
	CHECK_INT("store_upkeep", store_upkeep(f->st), 0);
	CHECK_INT("file size: the map", file_size(f), 256u << 10);
	zeros_from(f, used_bytes(f));
	for (i = 0; i < 1000 && (rc = put_msg(f->st, i, 3000)) == 0; i++)
		CHECK_INT("store_upkeep", store_upkeep(f->st), 0);
	CHECK_INT("filling ends in", rc, STORE_ENOSPC);
	CHECK_INT("file size still the map", file_size(f), 256u << 10);
	while (i-- > 0)
		check_msg(f->st, i, 3000);
}

/* fsize_limit - writes past limit bytes fail with EFBIG (SIGXFSZ ignored) */
static void fsize_limit(rlim_t limit)
{
	struct rlimit rl;

	assert_int_equal(getrlimit(RLIMIT_FSIZE, &rl), 0);
	rl.rlim_cur = limit;
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &rl), 0);
}

/* test_grow_refused - the zeros cannot be written: the store goes on, tried again later */
static void test_grow_refused(void **state)
{
	struct fx *f = *state;
	uint64_t size0, limit;
	int i, n = 0, rc = -1;

	signal(SIGXFSZ, SIG_IGN);
	CHECK_INT("put", put_msg(f->st, n++, 3000), 0);
	size0 = file_size(f);
	limit = size0 + 64 * 1024;
	fsize_limit((rlim_t) limit);
	if (store_upkeep(f->st) == 0)
		fail_msg("store_upkeep past the file size limit: got 0, want an error");
	if (file_size(f) > limit)
		fail_msg("file size: got %llu, want at most the limit %llu",
			 (unsigned long long) file_size(f), (unsigned long long) limit);
	/* not again at the next batch: the store must grow by half a step first */
	CHECK_INT("store_upkeep right after a failure", store_upkeep(f->st), 0);
	CHECK_INT("put after the failure", put_msg(f->st, n++, 3000), 0);

	fsize_limit(RLIM_INFINITY);
	for (i = 0; i < 2000 && rc != 0; i++) {
		CHECK_INT("put", put_msg(f->st, n++, 3000), 0);
		if (store_upkeep(f->st) == 0 && file_size(f) >= used_bytes(f) + MB / 2)
			rc = 0;
	}
	CHECK_INT("reserve made once the disk takes it", rc, 0);
	zeros_from(f, used_bytes(f));
	while (n-- > 0)
		check_msg(f->st, n, 3000);
	signal(SIGXFSZ, SIG_DFL);
}

/*
 * test_health_upkeep - what the writer reads (store_health) and does
 * (store_upkeep) around a failed sync: refusing, every transaction EIO,
 * until one upkeep opens it again from what is durable; upkeep due
 * while the file should grow, not once grown
 */
static void test_health_upkeep(void **state)
{
	struct fx *f = *state;
	struct store_txn *t;

	CHECK_INT("a new store: the file is to be grown ahead", store_health(f->st), STORE_HUPKEEP);
	CHECK_INT("upkeep", store_upkeep(f->st), 0);
	CHECK_INT("grown: healthy", store_health(f->st), 0);
	CHECK_INT("put", put_msg(f->st, 1, 3000), 0);

	lmdb_break(lmdb_of(f->st), "a test's failed sync");
	CHECK_INT("after a failed sync", store_health(f->st), STORE_HREFUSING | STORE_HUPKEEP);
	CHECK_INT("a transaction refused", store_txn_begin(f->st, NULL, 0, &t), STORE_EIO);
	CHECK_INT("still refusing", store_health(f->st) & STORE_HREFUSING, STORE_HREFUSING);

	CHECK_INT("upkeep opens it again", store_upkeep(f->st), 0);
	CHECK_INT("refusing no more", store_health(f->st) & STORE_HREFUSING, 0);
	check_msg(f->st, 1, 3000);
	CHECK_INT("put after", put_msg(f->st, 2, 3000), 0);
	check_msg(f->st, 2, 3000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_grow_reserves, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_grow_follows, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_grow_map_cap, fx_setup_tiny, fx_teardown),
		cmocka_unit_test_setup_teardown(test_grow_refused, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_health_upkeep, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_open_drops_cache, fx_setup_drop, fx_teardown),
	};

	return cmocka_run_group_tests_name("store_grow", tests, NULL, NULL);
}
