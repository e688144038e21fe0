/*
 * test_dir - util/dir.c's dir_make(), the one mkdir -p that the daemon's
 * start (store, control socket and Maildir parents) and the Maildir
 * delivery share: what it makes, with which mode, and what it refuses.
 */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "../../util/dir.h"

struct make_case {
	const char *path;		/* under the test's directory */
	int rc;
	const char *dir;		/* a directory there after, or NULL */
};

/*
 * Run in this order in one directory holding a file "f" and a symbolic
 * link "l" to the directory "d".
 */
static const struct make_case make_cases[] = {
	{ "a/b/c", 0, "a/b/c" },		/* all three made */
	{ "a/b/c", 0, "a/b/c" },		/* all there already */
	{ "a/b/e/", 0, "a/b/e" },		/* a trailing slash */
	{ "a//g///h", 0, "a/g/h" },		/* doubled slashes */
	{ "l/x", 0, "d/x" },			/* through a link to a directory */
	{ "f", -ENOTDIR, NULL },		/* a file where the directory goes */
	{ "f/", -ENOTDIR, NULL },
	{ "f/y", -ENOTDIR, NULL },		/* a file on the way */
	{ "a/f2/z", -ENOTDIR, NULL },		/* made by the test below a/ */
};

/* in_tmp - a fresh directory to work in, made the current one */
static char *in_tmp(void)
{
	static char dir[64];

	snprintf(dir, sizeof(dir), "/tmp/test_dir.XXXXXX");
	assert_non_null(mkdtemp(dir));
	assert_int_equal(chdir(dir), 0);
	return dir;
}

/* out_of_tmp - remove the work directory */
static void out_of_tmp(const char *dir)
{
	char cmd[128];

	assert_int_equal(chdir("/"), 0);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

/* each case of the table, relative and absolute */
static void test_make(void **state)
{
	const struct make_case *c;
	char *dir = in_tmp(), abs[PATH_MAX];
	struct stat st;
	FILE *f;
	int pass, rc;

	(void) state;
	assert_non_null(f = fopen("f", "w"));
	fclose(f);
	assert_int_equal(mkdir("d", 0700), 0);
	assert_int_equal(symlink("d", "l"), 0);
	assert_int_equal(mkdir("a", 0700), 0);
	assert_non_null(f = fopen("a/f2", "w"));
	fclose(f);
	for (pass = 0; pass < 2; pass++) {
		for (c = make_cases; c < make_cases + sizeof(make_cases) / sizeof(make_cases[0]); c++) {
			snprintf(abs, sizeof(abs), "%s/%s", dir, c->path);
			rc = dir_make(pass ? abs : c->path, 0700);
			if (rc != c->rc)
				fail_msg("dir_make(\"%s\"): got %d (%s), want %d", pass ? abs : c->path,
					 rc, strerror(-rc), c->rc);
			if (c->dir && (stat(c->dir, &st) < 0 || !S_ISDIR(st.st_mode)))
				fail_msg("dir_make(\"%s\"): %s is not a directory", c->path, c->dir);
		}
	}
	out_of_tmp(dir);
}

/* the mode asked for, on each directory made and none already there */
static void test_mode(void **state)
{
	const char *made[] = { "m", "m/n", "m/n/o" };
	char *dir = in_tmp();
	mode_t old = umask(0);
	struct stat st;
	size_t i;

	(void) state;
	assert_int_equal(dir_make("m/n/o", 0750), 0);
	for (i = 0; i < 3; i++) {
		assert_int_equal(stat(made[i], &st), 0);
		if ((st.st_mode & 07777) != 0750)
			fail_msg("%s: mode got %o, want 750", made[i], st.st_mode & 07777);
	}
	assert_int_equal(chmod("m", 0700), 0);
	assert_int_equal(dir_make("m/n/p", 0755), 0);
	assert_int_equal(stat("m", &st), 0);
	assert_int_equal(st.st_mode & 07777, 0700);
	assert_int_equal(stat("m/n/p", &st), 0);
	assert_int_equal(st.st_mode & 07777, 0755);
	umask(old);
	out_of_tmp(dir);
}

/* what mkdir() says is passed on; an existing directory in an unwritable one is made */
static void test_errors(void **state)
{
	char *dir = in_tmp(), *lng;
	size_t n = 5000;

	(void) state;
	assert_int_equal(dir_make("", 0700), -ENOENT);
	assert_int_equal(dir_make("/", 0700), 0);
	assert_non_null(lng = malloc(n + 1));
	memset(lng, 'a', n);
	lng[n] = 0;
	assert_int_equal(dir_make(lng, 0700), -ENAMETOOLONG);
	free(lng);
	assert_int_equal(mkdir("ro", 0700), 0);
	assert_int_equal(mkdir("ro/there", 0700), 0);
	assert_int_equal(chmod("ro", 0500), 0);
	assert_int_equal(dir_make("ro/there", 0700), 0);
	assert_int_equal(chmod("ro", 0700), 0);
	out_of_tmp(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_make),
		cmocka_unit_test(test_mode),
		cmocka_unit_test(test_errors),
	};

	return cmocka_run_group_tests_name("dir", tests, NULL, NULL);
}
