/*
 * test_store_fx - the fixture the store's unit tests share (test_store,
 * test_story): each test gets a fresh store in a new temporary directory
 * (/tmp/<program>.XXXXXX), which it may reopen, removed afterwards; and
 * the got/want checks they report with.
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
#include <ftw.h>
#include <cmocka.h>

#include "../../store/store.h"
#include "../../store/lmdb/store_lmdb.h"
#include "../../util/buf.h"

#define TEST_MAP	(64u << 20)	/* the usual map: room for multi-MB messages */

struct fx {
	char dir[64];		/* mkdtemp result */
	char path[96];		/* dir/store: the store creates it */
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

/* fx_rm_one - nftw callback removing everything below the temp dir */
static inline int fx_rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void) sb;
	(void) flag;
	(void) ftw;
	return remove(p);
}

/* fx_reopen - close and open the store again, failing the test on error */
static inline void fx_reopen(struct fx *f, uint64_t map)
{
	char err[256] = "";
	int rc;

	store_close(f->st);
	f->st = NULL;
	rc = store_lmdb_open(&f->st, f->path, map, err, sizeof(err));
	if (rc != 0)
		fail_msg("store_open %s: got %d (%s), want 0", f->path, rc, err);
}

/* fx_setup_map - a fresh store in a new temporary directory named after the test program */
static inline int fx_setup_map(void **state, uint64_t map)
{
	struct fx *f = xcalloc(1, sizeof(*f));

	snprintf(f->dir, sizeof(f->dir), "/tmp/%s.XXXXXX", program_invocation_short_name);
	if (mkdtemp(f->dir) == NULL)
		return -1;
	snprintf(f->path, sizeof(f->path), "%s/store", f->dir);
	*state = f;
	fx_reopen(f, map);
	return 0;
}

/* fx_setup - the usual store */
static inline int fx_setup(void **state)
{
	return fx_setup_map(state, TEST_MAP);
}

/* fx_setup_tiny - a 256 KiB map: smaller than one growth step, soon full */
static inline int fx_setup_tiny(void **state)
{
	return fx_setup_map(state, 256u << 10);
}

/* fx_teardown - close the store, remove its directory */
static inline int fx_teardown(void **state)
{
	struct fx *f = *state;

	store_close(f->st);
	nftw(f->dir, fx_rm_one, 8, FTW_DEPTH | FTW_PHYS);
	free(f);
	return 0;
}

#endif
