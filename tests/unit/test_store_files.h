/*
 * test_store_files - the LMDB store's files, as the tests that lose a
 * commit or compact a store handle them: a file's path in the store,
 * a whole copy, a range copied over (each flushed, as a disk would have it)
 */
#ifndef TESTS_UNIT_TEST_STORE_FILES_H
#define TESTS_UNIT_TEST_STORE_FILES_H

#include <fcntl.h>
#include <unistd.h>

#include "test_store_fx.h"

/* in_store - path of a file of the store (the last two stay valid) */
static inline const char *in_store(const struct fx *f, const char *name)
{
	static char p[2][160];
	static int i;

	i = !i;
	snprintf(p[i], sizeof(p[i]), "%s/%s", f->path, name);
	return p[i];
}

/* copy_file - cp from to, whole, flushed */
static inline void copy_file(const char *from, const char *to)
{
	char chunk[65536];
	int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	ssize_t n;

	assert_true(in >= 0 && out >= 0);
	while ((n = read(in, chunk, sizeof(chunk))) > 0)
		assert_int_equal(write(out, chunk, (size_t) n), n);
	assert_int_equal(n, 0);
	assert_int_equal(fsync(out), 0);
	close(in);
	close(out);
}

/* copy_range - len bytes at off of from over the same bytes of to, flushed */
static inline void copy_range(const char *from, const char *to, uint64_t off, uint64_t len)
{
	char chunk[65536];
	int in = open(from, O_RDONLY), out = open(to, O_WRONLY);
	ssize_t n;

	assert_true(in >= 0 && out >= 0);
	for (; len > 0; off += (uint64_t) n, len -= (uint64_t) n) {
		n = pread(in, chunk, len < sizeof(chunk) ? (size_t) len : sizeof(chunk), (off_t) off);
		assert_true(n > 0);
		assert_int_equal(pwrite(out, chunk, (size_t) n, (off_t) off), n);
	}
	assert_int_equal(fsync(out), 0);
	close(in);
	close(out);
}

#endif
