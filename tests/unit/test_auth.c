/*
 * NAME
 *	test_auth 1
 * SUMMARY
 *	unit tests: the users file, password checks, the checking threads,
 *	the cache of successes
 * DESCRIPTION
 *	Hashes are made here with crypt_gensalt() and crypt_rn(), $6$ and
 *	$y$ (yescrypt at a low cost, to keep the test quick), as
 *	`openssl passwd -6` and mkpasswd would make them.
 */
#include <crypt.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "../../relay/auth.h"
#include "../../util/buf.h"
#include "../../util/log.h"

/* make_hash - crypt(pass) with a fresh salt of the given method */
static char *make_hash(const char *prefix, unsigned long cost, const char *pass)
{
	struct crypt_data cd;
	char    setting[CRYPT_GENSALT_OUTPUT_SIZE];
	char   *h;

	assert_non_null(crypt_gensalt_rn(prefix, cost, NULL, 0, setting, sizeof(setting)));
	memset(&cd, 0, sizeof(cd));
	h = crypt_rn(pass, setting, &cd, sizeof(cd));
	assert_non_null(h);
	return strdup(h);
}

struct parse_case {
	const char *name;
	const char *text;
	int     rc;
	size_t  count;
	const char *err;		/* wanted error text, rc -1 */
};

/* the users file parser: forms that load and forms that are errors */
static void test_parse(void **state)
{
	static const struct parse_case cases[] = {
		{"empty", "", 0, 0, NULL},
		{"comments and blank lines", "# users\n\n   \n\t# more\r\n", 0, 0, NULL},
		{"one user, no final newline", "alice:$6$saltsalt$abc", 0, 1, NULL},
		{"CRLF, spaces around", "  alice:$6$saltsalt$abc \r\nbob:$y$j9T$salt$hash\r\n", 0, 2, NULL},
		{"locked users", "alice:*\nbob:!$6$saltsalt$abc\n", 0, 2, NULL},
		{"a weak hash loads (warning)", "carol:$1$saltsalt$abc\n", 0, 1, NULL},
		{"no colon", "# x\nalice\n", -1, 0, "users:2: expected name:hash"},
		{"empty name", ":$6$saltsalt$abc\n", -1, 0, "users:1: bad user name"},
		{"space in name", "al ice:$6$saltsalt$abc\n", -1, 0, "users:1: bad user name"},
		{"DEL in name", "al\x7fice:$6$saltsalt$abc\n", -1, 0, "users:1: bad user name"},
		{"UTF-8 name", "\xc3\xa9lise:$6$saltsalt$abc\n", 0, 1, NULL},
		{"empty hash", "alice:\n", -1, 0, "users:1: empty hash"},
		{"space in hash", "alice:$6$salt salt$abc\n", -1, 0,
		 "users:1: space or control character in hash"},
		{"not a hash", "alice:secret\n", -1, 0, "users:1: not a crypt(3) hash"},
		{"cleartext with a colon", "alice:pass:word\n", -1, 0, "users:1: not a crypt(3) hash"},
		{"twice", "bob:$6$saltsalt$abc\nalice:*\nbob:*\n", -1, 0, "users: user bob given twice"},
		{"NUL", "alice:$6$salt\0salt$abc\n", -1, 0, "users:1: NUL in line"},
	};
	struct auth_users *u;
	char    err[256];
	size_t  i, len;
	int     rc, fails = 0;

	(void) state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct parse_case *c = cases + i;

		len = strcmp(c->name, "NUL") == 0 ? 25 : strlen(c->text);
		err[0] = 0;
		rc = auth_users_parse(&u, c->text, len, "users", err, sizeof(err));
		if (rc != c->rc || (rc == 0 && auth_users_count(u) != c->count)
		    || (rc < 0 && (u != NULL || strcmp(err, c->err) != 0))) {
			print_error("%s: got rc=%d count=%zu err=\"%s\", want rc=%d count=%zu err=\"%s\"\n",
				    c->name, rc, rc == 0 ? auth_users_count(u) : 0, err, c->rc,
				    c->count, c->err ? c->err : "");
			fails++;
		}
		auth_users_free(u);
	}
	assert_int_equal(fails, 0);
}

/* a users file with real hashes, and who gets in */
static void test_verify(void **state)
{
	char   *h6 = make_hash("$6$", 0, "secret");
	char   *hy = make_hash("$y$", 3, "hunter2");
	char   *hz = make_hash("$y$", 3, "");
	struct buf text = BUF_INIT;
	struct auth_users *u;
	char    err[256], path[] = "/tmp/test_auth_XXXXXX";
	int     fd;
	size_t  i;
	static const struct {
		const char *user, *pass;
		int     ok;
	} cases[] = {
		{"alice", "secret", 1},
		{"alice", "Secret", 0},
		{"alice", "secret ", 0},
		{"alice", "", 0},
		{"Alice", "secret", 0},		/* names are exact */
		{"bob", "hunter2", 1},
		{"bob", "secret", 0},
		{"carol", "secret", 0},		/* locked, though it is her hash */
		{"dave", "", 1},		/* an empty password is a password */
		{"mallory", "secret", 0},	/* unknown */
		{"", "", 0},
	};

	(void) state;
	buf_printf(&text, "# test users\nalice:%s\nbob:%s\ncarol:!%s\n\ndave:%s\n", h6, hy, h6, hz);
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text.data, text.len), (ssize_t) text.len);
	close(fd);
	assert_int_equal(auth_users_load(&u, path, err, sizeof(err)), 0);
	assert_int_equal(auth_users_count(u), 4);
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (auth_users_verify(u, cases[i].user, cases[i].pass) != cases[i].ok)
			fail_msg("%s/%s: got %d, want %d", cases[i].user, cases[i].pass,
				 !cases[i].ok, cases[i].ok);
	auth_users_free(u);

	/* a file that is not there */
	unlink(path);
	assert_int_equal(auth_users_load(&u, path, err, sizeof(err)), -1);
	assert_null(u);
	assert_non_null(strstr(err, "No such file"));

	/* an empty table checks against the dummy and says no */
	assert_int_equal(auth_users_parse(&u, "", 0, "empty", err, sizeof(err)), 0);
	assert_int_equal(auth_users_verify(u, "alice", "secret"), 0);
	auth_users_free(u);
	buf_free(&text);
	free(h6);
	free(hy);
	free(hz);
}

/* req_done - the event loop's side */
static void req_done(struct auth_req *req)
{
	(*(int *) req->ctx)++;
}

/* submit_wait - submit reqs[from..to) as user/secret, wait for them; swap after submitting */
static void submit_wait(struct auth *a, struct auth_req *reqs, int from, int to,
			struct auth_users *swap)
{
	struct pollfd pfd;
	int     i, done = 0;

	for (i = from; i < to; i++) {
		memset(reqs + i, 0, sizeof(reqs[i]));
		snprintf(reqs[i].user, sizeof(reqs[i].user), "%s", i & 1 ? "bob" : "alice");
		snprintf(reqs[i].pass, sizeof(reqs[i].pass), "secret");
		reqs[i].ok = -1;
		reqs[i].done = req_done;
		reqs[i].ctx = &done;
		auth_submit(a, reqs + i);
	}
	if (swap)
		auth_set_users(a, swap);	/* while checks run */
	pfd.fd = auth_fd(a);
	pfd.events = POLLIN;
	while (done < to - from) {
		assert_true(poll(&pfd, 1, 10000) == 1);
		auth_reap(a);
	}
	for (i = from; i < to; i++) {
		assert_true(reqs[i].ok == 0 || reqs[i].ok == 1);
		assert_int_equal(reqs[i].pass[0], 0);	/* wiped */
	}
}

/* the checking threads: results come back through the eventfd; tables swap */
static void test_threads(void **state)
{
	char   *h6 = make_hash("$6$", 0, "secret");
	char   *h6b = make_hash("$6$", 0, "other");
	struct buf text = BUF_INIT;
	struct auth_users *u, *u2;
	struct auth_req reqs[10];
	struct auth *a;
	char    err[256];

	(void) state;
	buf_printf(&text, "alice:%s\n", h6);
	assert_int_equal(auth_users_parse(&u, text.data, text.len, "t", err, sizeof(err)), 0);
	buf_reset(&text);
	buf_printf(&text, "alice:%s\nbob:%s\n", h6b, h6);
	assert_int_equal(auth_users_parse(&u2, text.data, text.len, "t", err, sizeof(err)), 0);

	a = auth_start(u, 2);
	submit_wait(a, reqs, 0, 4, NULL);	/* alice/secret only */
	assert_int_equal(reqs[0].ok, 1);
	assert_int_equal(reqs[1].ok, 0);
	assert_int_equal(reqs[2].ok, 1);
	assert_int_equal(reqs[3].ok, 0);
	submit_wait(a, reqs, 4, 8, u2);		/* either table */
	submit_wait(a, reqs, 8, 10, NULL);	/* bob/secret only */
	assert_int_equal(reqs[8].ok, 0);
	assert_int_equal(reqs[9].ok, 1);
	auth_stop(a);
	auth_stop(NULL);
	buf_free(&text);
	free(h6);
	free(h6b);
}

/*
 * the cache's MAC: one user and password always the same, another password
 * another, and each MAC starts over (the context is made once and reused);
 * a checked success is remembered under it, a wrong password is not
 */
static void test_cache(void **state)
{
	char   *h6 = make_hash("$6$", 0, "secret");
	struct buf text = BUF_INIT;
	struct auth_users *u;
	struct auth_req r, m;
	uint8_t first[AUTH_MAC_LEN], none[AUTH_MAC_LEN];
	struct pollfd pfd;
	struct auth *a;
	char    err[256];
	int     done = 0;

	(void) state;
	buf_printf(&text, "alice:%s\n", h6);
	assert_int_equal(auth_users_parse(&u, text.data, text.len, "t", err, sizeof(err)), 0);
	a = auth_start(u, 1);
	auth_cache_ttl(a, 60 * 1000000LL);
	memset(none, 0, sizeof(none));
	memset(&r, 0, sizeof(r));
	snprintf(r.user, sizeof(r.user), "alice");
	assert_int_equal(auth_cached(a, &r, "secret"), 0);
	assert_memory_not_equal(r.mac, none, sizeof(none));
	memcpy(first, r.mac, sizeof(first));
	memset(&m, 0, sizeof(m));
	snprintf(m.user, sizeof(m.user), "alice");
	assert_int_equal(auth_cached(a, &m, "other"), 0);
	assert_memory_not_equal(m.mac, first, sizeof(first));
	assert_int_equal(auth_cached(a, &r, "secret"), 0);
	assert_memory_equal(r.mac, first, sizeof(first));

	snprintf(r.pass, sizeof(r.pass), "secret");
	r.ok = -1;
	r.done = req_done;
	r.ctx = &done;
	auth_submit(a, &r);
	pfd.fd = auth_fd(a);
	pfd.events = POLLIN;
	while (done < 1) {
		assert_true(poll(&pfd, 1, 10000) == 1);
		auth_reap(a);
	}
	assert_int_equal(r.ok, 1);
	assert_int_equal(auth_cached(a, &m, "secret"), 1);
	assert_memory_equal(m.mac, first, sizeof(first));
	assert_int_equal(auth_cached(a, &m, "other"), 0);
	auth_stop(a);
	buf_free(&text);
	free(h6);
}

/*
 * slow_path - what the relay does when auth_cached() says no: req (its MAC
 * set by that call) checked by a thread with pass; the check ran if the
 * thread wiped the password
 */
static void slow_path(struct auth *a, struct auth_req *req, const char *pass)
{
	struct pollfd pfd;
	int     done = 0;

	snprintf(req->pass, sizeof(req->pass), "%s", pass);
	req->ok = -1;
	req->done = req_done;
	req->ctx = &done;
	auth_submit(a, req);
	pfd.fd = auth_fd(a);
	pfd.events = POLLIN;
	while (done < 1) {
		assert_true(poll(&pfd, 1, 10000) == 1);
		auth_reap(a);
	}
	assert_int_equal(req->pass[0], 0);
}

/*
 * a failed check is never remembered: the same wrong password twice is not
 * found in the cache either time, so each goes to a checking thread (a crypt
 * each), and the right password after it is checked, then remembered
 */
static void test_cache_failure(void **state)
{
	char   *h6 = make_hash("$6$", 0, "secret");
	struct buf text = BUF_INIT;
	struct auth_users *u;
	struct auth_req r;
	struct auth *a;
	char    err[256];
	int     i;

	(void) state;
	buf_printf(&text, "alice:%s\n", h6);
	assert_int_equal(auth_users_parse(&u, text.data, text.len, "t", err, sizeof(err)), 0);
	a = auth_start(u, 1);
	auth_cache_ttl(a, 60 * 1000000LL);
	for (i = 0; i < 2; i++) {
		memset(&r, 0, sizeof(r));
		snprintf(r.user, sizeof(r.user), "alice");
		assert_int_equal(auth_cached(a, &r, "wrong"), 0);
		slow_path(a, &r, "wrong");
		assert_int_equal(r.ok, 0);
		assert_int_equal(auth_cached(a, &r, "wrong"), 0);
	}
	memset(&r, 0, sizeof(r));
	snprintf(r.user, sizeof(r.user), "alice");
	assert_int_equal(auth_cached(a, &r, "secret"), 0);
	slow_path(a, &r, "secret");
	assert_int_equal(r.ok, 1);
	assert_int_equal(auth_cached(a, &r, "secret"), 1);
	assert_int_equal(auth_cached(a, &r, "wrong"), 0);
	auth_stop(a);
	buf_free(&text);
	free(h6);
}

/*
 * a check answered after the cache was cleared is not remembered: alice's
 * password is checked against the old users file, the file changes while
 * the answer waits to be reaped; the answer stands (it raced the change),
 * but her old password is not let in from the cache after it, unchecked
 * against the new file. The same when auth.cache_ttl changes, which
 * forgets every success too (bob's check, in the new file).
 */
static void test_cache_cleared_in_flight(void **state)
{
	char   *hold = make_hash("$6$", 0, "oldpass");
	char   *hnew = make_hash("$6$", 0, "newpass");
	char   *hbob = make_hash("$6$", 0, "bobpass");
	struct buf text = BUF_INIT;
	struct auth_users *u, *u2;
	struct auth_req r;
	struct pollfd pfd;
	struct auth *a;
	char    err[256];
	int     step, done;
	static const char *const user[] = {"alice", "bob"}, *const pass[] = {"oldpass", "bobpass"};

	(void) state;
	buf_printf(&text, "alice:%s\n", hold);
	assert_int_equal(auth_users_parse(&u, text.data, text.len, "old", err, sizeof(err)), 0);
	a = auth_start(u, 1);
	auth_cache_ttl(a, 60 * 1000000LL);
	pfd.fd = auth_fd(a);
	pfd.events = POLLIN;
	for (step = 0; step < 2; step++) {
		memset(&r, 0, sizeof(r));
		snprintf(r.user, sizeof(r.user), "%s", user[step]);
		assert_int_equal(auth_cached(a, &r, pass[step]), 0);
		snprintf(r.pass, sizeof(r.pass), "%s", pass[step]);
		r.ok = -1;
		r.done = req_done;
		r.ctx = &done;
		done = 0;
		auth_submit(a, &r);
		assert_true(poll(&pfd, 1, 10000) == 1);	/* checked, not reaped yet */
		if (step == 0) {		/* SIGHUP: a new users file */
			buf_reset(&text);
			buf_printf(&text, "alice:%s\nbob:%s\n", hnew, hbob);
			assert_int_equal(auth_users_parse(&u2, text.data, text.len, "new", err,
							  sizeof(err)), 0);
			auth_set_users(a, u2);
		} else {			/* SIGHUP: another auth.cache_ttl */
			auth_cache_ttl(a, 30 * 1000000LL);
		}
		while (done < 1) {
			assert_true(poll(&pfd, 1, 10000) == 1);
			auth_reap(a);
		}
		assert_int_equal(r.ok, 1);
		memset(&r, 0, sizeof(r));
		snprintf(r.user, sizeof(r.user), "%s", user[step]);
		if (auth_cached(a, &r, pass[step]))
			fail_msg("%s checked before the %s changed, let in from the cache after it",
				 pass[step], step ? "cache_ttl" : "users file");
		/* alice's new password, checked after the change, is remembered */
		memset(&r, 0, sizeof(r));
		snprintf(r.user, sizeof(r.user), "alice");
		assert_int_equal(auth_cached(a, &r, "newpass"), 0);
		slow_path(a, &r, "newpass");
		assert_int_equal(r.ok, 1);
		assert_int_equal(auth_cached(a, &r, "newpass"), 1);
	}
	auth_stop(a);
	buf_free(&text);
	free(hold);
	free(hnew);
	free(hbob);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse),
		cmocka_unit_test(test_verify),
		cmocka_unit_test(test_threads),
		cmocka_unit_test(test_cache),
		cmocka_unit_test(test_cache_failure),
		cmocka_unit_test(test_cache_cleared_in_flight),
	};

	log_setup("test_auth", 0, LOG_LEVEL_ERROR);	/* expected warnings */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
