/*
 * test_store_fx - the fixture the store's unit tests share (test_store,
 * test_story, test_store_pg_*): each test gets a fresh store, which it may
 * reopen, removed afterwards; and the got/want checks they report with.
 *
 * The backend: LMDB by default, in a new temporary directory
 * (/tmp/<program>.XXXXXX, or under another base: fx_setup_at()). With IDEMRELAY_PG_URL set (a libpq URL;
 * `make test-pg` sets it to a private cluster), PostgreSQL: each test in
 * a schema of its own in that database (search_path), dropped afterwards,
 * so that the same tests run against both backends. fx_pg() says which.
 */
#ifndef TESTS_UNIT_TEST_STORE_FX_H
#define TESTS_UNIT_TEST_STORE_FX_H

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <ftw.h>
#include <cmocka.h>
#include <libpq-fe.h>

#include "../../store/store.h"
#include "../../store/lmdb/store_lmdb.h"
#include "../../store/pg/store_pg.h"
#include "../../util/buf.h"
#include "../../util/clock.h"

#define TEST_MAP	(64u << 20)	/* the usual map: room for multi-MB messages */
#define TEST_NODE	"test-node"
#define TEST_LEASE	(60 * 1000000LL)

struct fx {
	char dir[64];		/* mkdtemp result (LMDB) */
	char path[96];		/* dir/store: the store creates it */
	char schema[64];	/* PostgreSQL: the test's schema */
	char *url;		/* owned: IDEMRELAY_PG_URL with the schema as search_path */
	struct store *st;
};

#define CHECK_INT(what, got, want) do { \
	long long g_ = (long long) (got), w_ = (long long) (want); \
	if (g_ != w_) \
		fail_msg("%s: got %lld, want %lld", (what), g_, w_); \
} while (0)

#define CHECK_STR(what, got, want) do { \
	const char *g_ = (got), *w_ = (want); \
	if ((g_ == NULL) != (w_ == NULL) || (g_ && strcmp(g_, w_) != 0)) \
		fail_msg("%s: got %s%s%s, want %s%s%s", (what), g_ ? "\"" : "", \
			 g_ ? g_ : "NULL", g_ ? "\"" : "", w_ ? "\"" : "", \
			 w_ ? w_ : "NULL", w_ ? "\"" : ""); \
} while (0)

/* fx_pg - the PostgreSQL URL the tests run against, or NULL for LMDB */
static inline const char *fx_pg(void)
{
	const char *u = getenv("IDEMRELAY_PG_URL");

	return u && *u ? u : NULL;
}

/* fx_pg_url - base with search_path set to schema, as a URI or a key=value string */
static inline char *fx_pg_url(const char *base, const char *schema)
{
	struct buf b = BUF_INIT;

	if (strncmp(base, "postgres://", 11) == 0 || strncmp(base, "postgresql://", 13) == 0)
		buf_printf(&b, "%s%coptions=-csearch_path%%3D%s", base,
			   strchr(base, '?') ? '&' : '?', schema);
	else
		buf_printf(&b, "%s options='-csearch_path=%s'", base, schema);
	return b.data;
}

/* fx_pg_sql - run sql on the base URL; the test fails if it fails */
static inline void fx_pg_sql(const char *sql)
{
	PGconn *c = PQconnectdb(fx_pg());
	PGresult *r;

	if (PQstatus(c) != CONNECTION_OK)
		fail_msg("connect %s: %s", fx_pg(), PQerrorMessage(c));
	r = PQexec(c, sql);
	if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
		fail_msg("%s: %s", sql, PQerrorMessage(c));
	PQclear(r);
	PQfinish(c);
}

/* fx_take_cb - store_queue_take() callback that takes every message offered */
static inline int fx_take_cb(void *arg, const struct store_msg *m)
{
	(void) arg;
	(void) m;
	return 0;
}

/* fx_open - open the fixture's store, failing the test on error */
static inline void fx_open(struct fx *f, uint64_t map)
{
	char err[512] = "";
	int rc;

	if (fx_pg())
		rc = store_pg_open(&f->st, f->url, TEST_NODE, TEST_LEASE, err, sizeof(err));
	else
		rc = store_lmdb_open(&f->st, f->path, map, err, sizeof(err));
	if (rc != 0)
		fail_msg("open %s: got %d (%s), want 0", fx_pg() ? f->url : f->path, rc, err);
}

/*
 * fx_reopen - close and open the store again, failing the test on error.
 * On PostgreSQL the node's restart gave its leases up: it takes what is
 * due back, as the daemon's poller would, so that it may write it again.
 */
static inline void fx_reopen(struct fx *f, uint64_t map)
{
	store_close(f->st);
	f->st = NULL;
	fx_open(f, map);
	if (fx_pg() && store_queue_take(f->st, clock_us(), 100000, NULL, 0, fx_take_cb, NULL) != 0)
		fail_msg("store_queue_take after reopen failed");
}

/*
 * fx_setup_at - a fresh store: a temporary directory under base named
 * after the test program, or a schema
 */
static inline int fx_setup_at(void **state, uint64_t map, const char *base)
{
	static unsigned seq;
	struct fx *f = xcalloc(1, sizeof(*f));
	char sql[128];

	*state = f;
	if (fx_pg()) {
		snprintf(f->schema, sizeof(f->schema), "t_%.20s_%d_%u", program_invocation_short_name,
			 (int) getpid(), seq++);
		snprintf(sql, sizeof(sql), "CREATE SCHEMA \"%s\"", f->schema);
		fx_pg_sql(sql);
		f->url = fx_pg_url(fx_pg(), f->schema);
	} else {
		snprintf(f->dir, sizeof(f->dir), "%s/%s.XXXXXX", base, program_invocation_short_name);
		if (mkdtemp(f->dir) == NULL)
			return -1;
		snprintf(f->path, sizeof(f->path), "%s/store", f->dir);
	}
	fx_open(f, map);
	return 0;
}

/* fx_setup_map - a fresh store of that map in /tmp, or a schema */
static inline int fx_setup_map(void **state, uint64_t map)
{
	return fx_setup_at(state, map, "/tmp");
}

/* fx_setup - the usual store */
static inline int fx_setup(void **state)
{
	return fx_setup_map(state, TEST_MAP);
}

/* fx_setup_tiny - a 256 KiB map: smaller than one growth step, soon full (LMDB) */
static inline int fx_setup_tiny(void **state)
{
	return fx_setup_map(state, 256u << 10);
}

/* fx_rm_one - nftw callback removing everything below the temp dir */
static inline int fx_rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void) sb;
	(void) flag;
	(void) ftw;
	return remove(p);
}

/* fx_teardown - close the store, remove its directory or schema */
static inline int fx_teardown(void **state)
{
	struct fx *f = *state;
	char sql[128];

	store_close(f->st);
	if (fx_pg()) {
		snprintf(sql, sizeof(sql), "SET client_min_messages = warning; DROP SCHEMA \"%s\" CASCADE",
			 f->schema);
		fx_pg_sql(sql);
	} else {
		nftw(f->dir, fx_rm_one, 8, FTW_DEPTH | FTW_PHYS);
	}
	free(f->url);
	free(f);
	return 0;
}

#endif
