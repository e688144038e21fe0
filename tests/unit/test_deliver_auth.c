/*
 * test_deliver_auth - the AUTH guard of deliver/esmtp/deliver_auth.c: what it
 * cuts, why, and what it keeps out of the debug trace (end to end:
 * tests/e2e/cases_upstream_tls.py).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../../deliver/esmtp/deliver_auth.h"

#define N(a)	(sizeof(a) / sizeof((a)[0]))

/* one exchange as libesmtp's monitor callback sees it: 'r' read, 'w' about to be written */
struct step {
	char dir;
	const char *text;
};

struct guard_case {
	const char *name;
	int need_auth;
	struct step steps[10];
	int cut_at;			/* index of the write that must be cut, or of the
					 * reply that cuts; -1 none */
	const char *dsn;		/* when cut */
	const char *why;		/* substring of g.why when cut */
	int authed;			/* at the end */
};

#define EHLO_AUTH "250-sink.test\r\n250-PIPELINING\r\n250-AUTH PLAIN LOGIN\r\n250 8BITMIME\r\n"
#define EHLO_NOAUTH "250-sink.test\r\n250-PIPELINING\r\n250 8BITMIME\r\n"
#define MAIL "MAIL FROM:<a@example.org> SIZE=10\r\n"

static const struct guard_case guard_cases[] = {
	{ "no AUTH configured: MAIL goes", 0,
	  { { 'r', EHLO_NOAUTH }, { 'w', MAIL } }, -1, NULL, NULL, 0 },
	{ "PLAIN accepted", 1,
	  { { 'r', EHLO_AUTH }, { 'w', "AUTH PLAIN AHUAcA==\r\n" },
	    { 'r', "235 2.7.0 ok\r\n" }, { 'w', MAIL } }, -1, NULL, NULL, 1 },
	{ "LOGIN accepted after two challenges", 1,
	  { { 'r', EHLO_AUTH }, { 'w', "AUTH LOGIN\r\n" }, { 'r', "334 VXNlcm5hbWU6\r\n" },
	    { 'w', "dQ==\r\n" }, { 'r', "334 UGFzc3dvcmQ6\r\n" }, { 'w', "cA==\r\n" },
	    { 'r', "235 2.7.0 ok\r\n" }, { 'w', MAIL } }, -1, NULL, NULL, 1 },
	{ "reply split over reads", 1,
	  { { 'r', EHLO_AUTH }, { 'w', "AUTH PLAIN AHUAcA==\r\n" }, { 'r', "23" },
	    { 'r', "5 2.7.0 ok\r\n" }, { 'w', MAIL } }, -1, NULL, NULL, 1 },
	{ "PLAIN then LOGIN refused: MAIL cut", 1,
	  { { 'r', EHLO_AUTH }, { 'w', "AUTH PLAIN AHUAcA==\r\n" },
	    { 'r', "535 5.7.8 bad credentials\r\n" }, { 'w', "AUTH LOGIN\r\n" },
	    { 'r', "535 5.7.8 still bad\r\n" }, { 'w', MAIL } },
	  5, "4.7.8", "SASL authentication failed: 535 5.7.8 still bad", 0 },
	{ "no AUTH offered: MAIL cut", 1,
	  { { 'r', EHLO_NOAUTH }, { 'w', MAIL } }, 1, "4.7.0", "does not offer AUTH", 0 },
	{ "no mechanism in common: MAIL cut", 1,
	  { { 'r', "250-x\r\n250 AUTH GSSAPI\r\n" }, { 'w', MAIL } },
	  1, "4.7.0", "server offers GSSAPI", 0 },
	{ "only mechanisms the filter blanked: MAIL cut", 1,
	  { { 'r', "250-x\r\n250 AUTH      \r\n" }, { 'w', MAIL } },
	  1, "4.7.0", "offers neither PLAIN nor LOGIN", 0 },
	{ "pipelined MAIL after a refused AUTH", 1,
	  { { 'r', EHLO_AUTH }, { 'w', "AUTH PLAIN AHUAcA==\r\n" },
	    { 'r', "454 4.7.0 try later\r\n" }, { 'w', "RSET\r\n" MAIL "RCPT TO:<b@c>\r\n" } },
	  3, "4.7.8", "454 4.7.0 try later", 0 },
	{ "a 334 to the cancelling \"*\": cut at that reply", 1,
	  { { 'r', EHLO_AUTH }, { 'w', "AUTH PLAIN AHUAcA==\r\n" }, { 'r', "334 \r\n" },
	    { 'w', "*\r\n" }, { 'r', "334 \r\n" }, { 'w', "*\r\n" } },
	  4, "4.7.0", "went on with AUTH after it was cancelled", 0 },
	{ "a 501 to \"*\", then a new exchange with a 334 of its own", 1,
	  { { 'r', EHLO_AUTH }, { 'w', "AUTH PLAIN AHUAcA==\r\n" }, { 'r', "334 \r\n" },
	    { 'w', "*\r\n" }, { 'r', "501 5.7.0 cancelled\r\n" }, { 'w', "AUTH PLAIN\r\n" },
	    { 'r', "334 \r\n" }, { 'w', "AHUAcA==\r\n" }, { 'r', "235 2.7.0 ok\r\n" },
	    { 'w', MAIL } }, -1, NULL, NULL, 1 },
	{ "a 235 outside AUTH authenticates nothing", 1,
	  { { 'r', EHLO_AUTH }, { 'r', "235 2.7.0 unasked\r\n" }, { 'w', MAIL } },
	  2, "4.7.0", "server offers PLAIN LOGIN", 0 },
};

static void test_guard(void **state)
{
	struct deliver_auth_guard g;
	size_t i, k;
	int cut, cut_at;

	(void) state;
	for (i = 0; i < N(guard_cases); i++) {
		const struct guard_case *c = &guard_cases[i];

		deliver_auth_guard_init(&g, c->need_auth);
		cut_at = -1;
		for (k = 0; k < N(c->steps) && c->steps[k].text; k++) {
			const char *t = c->steps[k].text;

			if (c->steps[k].dir == 'r') {
				deliver_auth_guard_read(&g, t, strlen(t));
				if (g.cut && cut_at < 0)
					cut_at = (int) k;
				continue;
			}
			cut = deliver_auth_guard_write(&g, t, strlen(t));
			if (cut && cut_at < 0)
				cut_at = (int) k;
		}
		if (cut_at != c->cut_at)
			fail_msg("%s: cut at step %d, want %d (why %s)", c->name, cut_at, c->cut_at,
				 g.why);
		if (c->cut_at >= 0 && strcmp(g.dsn, c->dsn) != 0)
			fail_msg("%s: dsn %s, want %s", c->name, g.dsn, c->dsn);
		if (c->cut_at >= 0 && strstr(g.why, c->why) == NULL)
			fail_msg("%s: why \"%s\", want it to contain \"%s\"", c->name, g.why, c->why);
		if (g.authed != c->authed)
			fail_msg("%s: authed %d, want %d", c->name, g.authed, c->authed);
	}
}

static void test_guard_redact(void **state)
{
	struct deliver_auth_guard g;
	const char *auth = "AUTH PLAIN AHUAcA==", *login = "AUTH LOGIN";

	(void) state;
	deliver_auth_guard_init(&g, 1);
	assert_int_equal(deliver_auth_guard_redact(&g, "EHLO me", 7), 7);
	assert_int_equal(deliver_auth_guard_redact(&g, auth, strlen(auth)), strlen("AUTH PLAIN"));
	assert_int_equal(deliver_auth_guard_redact(&g, login, strlen(login)), strlen(login));
	(void) deliver_auth_guard_write(&g, "AUTH LOGIN\r\n", 12);
	deliver_auth_guard_read(&g, "334 VXNlcm5hbWU6\r\n", 18);
	/* the answers to the challenges are secrets */
	assert_int_equal(deliver_auth_guard_redact(&g, "dQ==", 4), 0);
	deliver_auth_guard_read(&g, "235 2.7.0 ok\r\n", 14);
	assert_int_equal(deliver_auth_guard_redact(&g, "MAIL FROM:<a@b>", 15), 15);
	assert_string_equal(g.auth_mech, "LOGIN");
}

/*
 * credentials longer than a mechanism takes (the size its plugin asks
 * for) are refused, never handed over: libESMTP's PLAIN copies user and
 * password into 2 * 255 + 3 octets of its own
 */
static void test_credentials_fit(void **state)
{
	struct conf_upstream u = { .user = "relay@example.org" };
	char pass[600];
	auth_context_t a;
	const char *r;
	int len = -1;

	(void) state;
	memset(pass, 'p', sizeof(pass) - 1);
	pass[sizeof(pass) - 1] = 0;
	u.password = pass;
	assert_non_null(a = deliver_auth_context(&u));
	if (!auth_set_mechanism(a, "PLAIN")) {
		auth_destroy_context(a);
		skip();			/* libesmtp6's sasl-plain.so is not installed */
	}
	r = auth_response(a, NULL, &len);
	if (r != NULL)
		fail_msg("a password of %zu octets went to PLAIN (%d octets)", strlen(pass), len);
	pass[255] = 0;			/* one that fits */
	assert_non_null(r = auth_response(a, NULL, &len));
	assert_int_equal(len, 1 + strlen(u.user) + 1 + 255);
	auth_destroy_context(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_guard),
		cmocka_unit_test(test_guard_redact),
		cmocka_unit_test(test_credentials_fit),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
