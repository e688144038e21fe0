/*
 * test_deliver_maildir - the Maildir transport (deliver/deliver_maildir.c):
 * a message's copy is whole, with LF line ends, or the attempt is
 * deferred and nothing is left in new/ or tmp/.
 *
 * stdio writes the copy in buffer-sized pieces; a write(2) that fails
 * once (a disk full for a moment, an EIO) makes stdio drop that piece
 * and note the error on the stream, and the later writes, fflush() and
 * fclose() may all succeed. test_write_fails_once makes the write of
 * one buffer fail (RLIMIT_FSIZE at the file's size for that call alone,
 * from a --wrap of fwrite_unlocked, Makefile): the copy would be short,
 * and it must not be renamed into new/ and called delivered. The mark
 * is the test's (--wrap of deliver_mark): counted, always granted.
 */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "../../conf/conf.h"
#include "../../deliver/deliver_impl.h"

#define LINES		4000	/* of 100 octets: about six of stdio's 64 KB buffers */
#define LINE_LEN	100
#define STDIO_BUF	65536	/* deliver_maildir.c's MAILDIR_CHUNK */

static int fail_armed;		/* the next write of a whole buffer fails once */
static int failed;		/* it did */
static int marks;

size_t __real_fwrite_unlocked(const void *p, size_t size, size_t n, FILE *f);

/* __wrap_fwrite_unlocked - fwrite_unlocked; when armed, the buffer's write in it fails */
size_t __wrap_fwrite_unlocked(const void *p, size_t size, size_t n, FILE *f)
{
	struct rlimit was, at;
	struct stat sb;
	size_t r;

	if (!fail_armed || __fpending(f) + size * n < STDIO_BUF)
		return __real_fwrite_unlocked(p, size, n, f);
	fail_armed = 0;
	assert_int_equal(fstat(fileno(f), &sb), 0);
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &was), 0);
	at = was;
	at.rlim_cur = (rlim_t) sb.st_size;
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &at), 0);
	r = __real_fwrite_unlocked(p, size, n, f);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &was), 0);
	failed = ferror(f) != 0;
	return r;
}

int __wrap_deliver_mark(struct deliver *d, const char *qid, struct deliver_job *const *jobs,
			size_t n)
{
	(void) d;
	(void) qid;
	(void) jobs;
	(void) n;
	marks++;
	return 0;
}

/*
 * files_in - how many entries DIR/sub has besides . and .., the size of
 * the last; with size NULL, each is removed
 */
static int files_in(const char *dir, const char *sub, off_t *size)
{
	char path[600];
	struct dirent *e;
	struct stat sb;
	DIR *dp;
	int n = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, sub);
	assert_non_null(dp = opendir(path));
	while ((e = readdir(dp)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s/%s", dir, sub, e->d_name);
		assert_int_equal(stat(path, &sb), 0);
		if (size)
			*size = sb.st_size;
		else
			assert_int_equal(unlink(path), 0);
		n++;
	}
	closedir(dp);
	return n;
}

/* deliver_one - one message of LINES CRLF lines through the transport: its outcome, its reply */
static enum deliver_outcome deliver_one(const char *dir, char *reply, size_t size)
{
	struct conf c = { .hostname = "test.example" };
	struct conf_upstream up = { .maildir = dir };
	struct deliver d = { .c = &c };
	struct store_rcpt rcpt = { 0 };
	struct deliver_result res = { .attempted = 1 };
	struct deliver_job j = { .res = &res };
	struct deliver_job *jobs[1] = { &j };
	size_t i;

	snprintf(j.m.qid, sizeof(j.m.qid), "Q1");
	j.m.rcpts = &rcpt;
	j.m.n_rcpts = 1;
	j.m.data_len = (size_t) LINES * LINE_LEN;
	assert_non_null(j.m.data = malloc(j.m.data_len));
	for (i = 0; i < LINES; i++) {
		memset(j.m.data + i * LINE_LEN, 'a', LINE_LEN - 2);
		memcpy(j.m.data + i * LINE_LEN + LINE_LEN - 2, "\r\n", 2);
	}
	deliver_maildir.send(&d, &up, jobs, 1);
	free(j.m.data);
	snprintf(reply, size, "%s", res.reply);
	return res.outcome;
}

/* maildir_gone - the test's Maildir removed */
static void maildir_gone(const char *dir)
{
	static const char *const sub[] = { "tmp", "new", "cur" };
	char path[600];
	size_t i;

	for (i = 0; i < 3; i++) {
		files_in(dir, sub[i], NULL);
		snprintf(path, sizeof(path), "%s/%s", dir, sub[i]);
		assert_int_equal(rmdir(path), 0);
	}
	assert_int_equal(rmdir(dir), 0);
}

/* maildir_new - a fresh Maildir's path, in a new temporary folder */
static char *maildir_new(void)
{
	static char dir[64];

	snprintf(dir, sizeof(dir), "/tmp/test_maildir.XXXXXX");
	assert_non_null(mkdtemp(dir));
	return dir;
}

static void test_whole_copy(void **state)
{
	char *dir = maildir_new();
	char reply[DELIVER_REPLY_MAX];
	off_t size = 0;

	(void) state;
	marks = 0;
	assert_int_equal(deliver_one(dir, reply, sizeof(reply)), DELIVER_SENT);
	assert_int_equal(marks, 1);
	assert_int_equal(files_in(dir, "new", &size), 1);
	assert_int_equal(size, (off_t) LINES * (LINE_LEN - 1));	/* CRLF written as LF */
	assert_int_equal(files_in(dir, "tmp", &size), 0);
	maildir_gone(dir);
}

static void test_write_fails_once(void **state)
{
	char *dir = maildir_new();
	char reply[DELIVER_REPLY_MAX];
	off_t size = 0;

	(void) state;
	marks = 0;
	failed = 0;
	fail_armed = 1;
	assert_int_equal(deliver_one(dir, reply, sizeof(reply)), DELIVER_DEFERRED);
	assert_true(failed);		/* the fault was where it was meant to be */
	assert_non_null(strstr(reply, strerror(EFBIG)));	/* the write's own reason */
	assert_int_equal(marks, 0);
	assert_int_equal(files_in(dir, "new", &size), 0);
	assert_int_equal(files_in(dir, "tmp", &size), 0);
	maildir_gone(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_whole_copy),
		cmocka_unit_test(test_write_fails_once),
	};

	signal(SIGXFSZ, SIG_IGN);	/* the write past the limit fails with EFBIG */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
