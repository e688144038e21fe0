/*
 * test_store_files - the LMDB store's files, as the tests that lose a
 * commit or compact a store handle them: a file's path in the store,
 * a whole copy, a range copied over (each flushed, as a disk would have
 * it); and its environment opened directly, the store closed, to write
 * records behind its back or read them
 */
#ifndef TESTS_UNIT_TEST_STORE_FILES_H
#define TESTS_UNIT_TEST_STORE_FILES_H

#include <fcntl.h>
#include <unistd.h>
#include <lmdb.h>

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

/* raw_env - the same environment opened directly, store closed */
static inline MDB_env *raw_env(const char *path)
{
	MDB_env *env;

	assert_int_equal(mdb_env_create(&env), 0);
	assert_int_equal(mdb_env_set_maxdbs(env, 8), 0);
	assert_int_equal(mdb_env_set_mapsize(env, TEST_MAP), 0);
	assert_int_equal(mdb_env_open(env, path, 0, 0600), 0);
	return env;
}

/* raw_shut - close the fixture's store, so that its files can be handled behind its back */
static inline void raw_shut(struct fx *f)
{
	store_close(f->st);
	f->st = NULL;
}

/* raw_open - the fixture's store closed and its environment opened directly */
static inline MDB_env *raw_open(struct fx *f)
{
	raw_shut(f);
	return raw_env(f->path);
}

/* raw_close - the environment closed and the fixture's store opened again */
static inline void raw_close(struct fx *f, MDB_env *env)
{
	mdb_env_close(env);
	fx_reopen(f, TEST_MAP);
}

/* raw_op - put (v non-NULL) or delete one record of db opened with flags, behind the store's back */
static inline void raw_op(MDB_env *env, const char *db, unsigned flags, const void *k,
			  size_t klen, const void *v, size_t vlen)
{
	MDB_val key = { klen, (void *) k }, val = { vlen, (void *) v };
	MDB_txn *txn;
	MDB_dbi dbi;

	assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
	assert_int_equal(mdb_dbi_open(txn, db, flags, &dbi), 0);
	assert_int_equal(v ? mdb_put(txn, dbi, &key, &val, 0) : mdb_del(txn, dbi, &key, NULL), 0);
	assert_int_equal(mdb_txn_commit(txn), 0);
}

/* raw_put - write one record behind the store's back */
static inline void raw_put(MDB_env *env, const char *db, const void *k, size_t klen,
			   const void *v, size_t vlen)
{
	raw_op(env, db, 0, k, klen, v, vlen);
}

/* env_put_expiry - an expiry index entry written behind the store's back (closed) */
static inline void env_put_expiry(const char *path, const void *k, size_t klen)
{
	MDB_env *env = raw_env(path);

	raw_put(env, "hexpiry", k, klen, "", 0);
	mdb_env_close(env);
}

/* raw_count - how many records db holds; the store must be closed */
static inline size_t raw_count(const char *path, const char *db)
{
	MDB_env *env = raw_env(path);
	MDB_txn *txn;
	MDB_dbi dbi;
	MDB_stat sb;

	assert_int_equal(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
	assert_int_equal(mdb_dbi_open(txn, db, 0, &dbi), 0);
	assert_int_equal(mdb_stat(txn, dbi, &sb), 0);
	mdb_txn_abort(txn);
	mdb_env_close(env);
	return sb.ms_entries;
}

/* raw_meta - the meta record named name as a string ("" if none); the store must be closed */
static inline void raw_meta(const char *path, const char *name, char *out, size_t outlen)
{
	MDB_env *env = raw_env(path);
	MDB_val key = { strlen(name), (void *) name }, val;
	MDB_txn *txn;
	MDB_dbi dbi;

	out[0] = 0;
	assert_int_equal(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
	assert_int_equal(mdb_dbi_open(txn, "meta", 0, &dbi), 0);
	if (mdb_get(txn, dbi, &key, &val) == 0 && val.mv_size < outlen) {
		memcpy(out, val.mv_data, val.mv_size);
		out[val.mv_size] = 0;
	}
	mdb_txn_abort(txn);
	mdb_env_close(env);
}

#endif
