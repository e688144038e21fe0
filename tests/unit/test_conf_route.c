/*
 * NAME
 *	test_conf_route 1
 * SUMMARY
 *	unit tests for conf/conf_route.c: routes parsed, matched, found again
 * DESCRIPTION
 *	Table-driven: one configuration with routes of every kind of match,
 *	then each case is a message (AUTH user, sender, listener) and the
 *	route it must take (NULL: the default upstream); the first match
 *	wins, and a route matches only when all its settings do. Then the
 *	configurations routes refuse, by the diagnostic's prefix.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "../../conf/conf.h"
#include "test_conf_help.h"

#define UP(h)	"upstream = { host = \"" h "\"; port = 2600; };"

static const char routes_conf[] =
	"listen = ( { address = \"127.0.0.1\"; port = 2525; },\n"
	"  { name = \"internal\"; address = \"127.0.0.1\"; port = 2526; } );\n"
	"upstream = { host = \"default.example\"; };\n"
	"routes = (\n"
	"  { name = \"alice-news\"; auth_user = \"alice\"; sender_domain = \"news.example\";\n"
	"    " UP("news") " },\n"
	"  { name = \"alice\"; auth_user = \"alice\"; " UP("a") " },\n"
	"  { name = \"ceo\"; sender = \"CEO@Example.com\"; " UP("ceo") " },\n"
	"  { name = \"bulk\"; sender_domain = \"bulk.example\"; " UP("bulk") " },\n"
	"  { name = \"inside\"; listener = \"internal\"; " UP("inside") " }\n"
	");\n";

/* test_match - each message takes the first route all of whose settings match */
static void test_match(void **state)
{
	static const struct {
		const char *user, *from;
		int listen;		/* index into listen[] */
		const char *want;	/* NULL: the default upstream */
	} cases[] = {
		{"alice", "a@news.example", 0, "alice-news"},	/* first of two matches */
		{"alice", "a@NEWS.Example", 0, "alice-news"},	/* domains fold case */
		{"alice", "a@other.example", 0, "alice"},	/* the second: both its settings */
		{"alice", "", 0, "alice"},			/* null sender: user alone */
		{"Alice", "x@y.example", 0, NULL},		/* user names do not fold */
		{"bob", "x@y.example", 0, NULL},
		{NULL, "x@y.example", 0, NULL},			/* no AUTH: no user route */
		{NULL, "ceo@example.com", 0, "ceo"},		/* the whole address, any case */
		{NULL, "ceo2@example.com", 0, NULL},
		{"bob", "someone@bulk.example", 0, "bulk"},
		{"bob", "someone@sub.bulk.example", 0, NULL},	/* the domain itself only */
		{"bob", "bulk.example", 0, NULL},		/* no @: no domain */
		{NULL, "x@y.example", 1, "inside"},		/* by listener */
		{"alice", "x@y.example", 1, "alice"},		/* an earlier route first */
		{NULL, "ceo@example.com", 1, "ceo"},
	};
	struct conf c;
	const struct conf_route *r;
	const struct conf_upstream *u;
	char err[512];
	size_t i;

	(void) state;
	if (load_text(&c, routes_conf, err, sizeof(err)) != 0)
		fail_msg("conf_load: %s", err);
	assert_int_equal(c.n_routes, 5);
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		r = conf_route_match(&c, cases[i].user, cases[i].from, &c.listen[cases[i].listen]);
		if ((r == NULL) != (cases[i].want == NULL)
		    || (r && strcmp(r->name, cases[i].want) != 0))
			fail_msg("case %zu: user %s from <%s> listen[%d]: got route %s, want %s", i,
				 cases[i].user ? cases[i].user : "-", cases[i].from,
				 cases[i].listen, r ? r->name : "default",
				 cases[i].want ? cases[i].want : "default");
		/* what delivery finds again by the stored name is that route's group */
		u = conf_route_upstream(&c, r ? r->name : NULL);
		assert_non_null(u);
		assert_ptr_equal(u, r ? &r->up : &c.upstream);
	}
	assert_null(conf_route_upstream(&c, "gone"));
	assert_string_equal(conf_route_upstream(&c, "ceo")->hosts[0].host, "ceo");
	assert_int_equal(conf_route_upstream(&c, "ceo")->hosts[0].port, 2600);
	conf_free(&c);
}

/* test_route_upstream - a route's group has its own TLS, credentials and defaults */
static void test_route_upstream(void **state)
{
	struct conf c;
	const struct conf_upstream *u;
	char err[512];

	(void) state;
	if (load_text(&c, "upstream = { host = \"d\"; connections = 9; };\n"
		      "routes = ( { name = \"t\"; auth_user = \"u\"; upstream = {\n"
		      "  hosts = [ \"a:2601\", \"b\" ]; tls = \"implicit\"; user = \"t1\";\n"
		      "  password = \"p1\"; tls_verify = false; timeout = \"30s\"; rate = 14;\n"
		      "  recipient_rate = 50; }; } );\n",
		      err, sizeof(err)) != 0)
		fail_msg("conf_load: %s", err);
	u = conf_route_upstream(&c, "t");
	assert_non_null(u);
	assert_int_equal(u->n_hosts, 2);
	assert_int_equal(u->hosts[0].port, 2601);
	assert_int_equal(u->hosts[1].port, 465);	/* implicit TLS's default port */
	assert_int_equal(u->tls, CONF_TLS_IMPLICIT);
	assert_string_equal(u->user, "t1");
	assert_string_equal(u->password, "p1");
	assert_int_equal(u->tls_verify, 0);
	assert_int_equal(u->timeout, 30);
	assert_int_equal(u->connections, 4);		/* its own default, not the top's 9 */
	assert_int_equal(u->rate, 14);
	assert_int_equal(u->recipient_rate, 50);
	assert_int_equal(c.upstream.rate, 0);
	assert_null(c.upstream.user);
	conf_free(&c);
}

/* Each case: config text, and the message prefix wanted ("%s" = file). */
static const struct {
	const char *name;
	const char *text;
	const char *want;
} error_cases[] = {
	{"credentials without TLS", "upstream = { host = \"d\"; };\nroutes = ( { name = \"t\";"
	 " auth_user = \"u\";\n upstream = { host = \"a\"; user = \"x\"; password = \"y\"; }; } );\n",
	 "%s:3: routes[0].upstream.user: requires tls = \"starttls\" or \"implicit\""},
	{"matches nothing", "upstream = { host = \"d\"; };\nroutes = ( { name = \"t\";"
	 " upstream = { host = \"a\"; }; } );\n", "%s:2: routes[0]: matches nothing"},
	{"no name", "upstream = { host = \"d\"; };\nroutes = ( { auth_user = \"u\";"
	 " upstream = { host = \"a\"; }; } );\n", "%s:2: routes[0].name: missing setting"},
	{"bad name", "upstream = { host = \"d\"; };\nroutes = ( { name = \"a/b\"; auth_user = \"u\";"
	 " upstream = { host = \"a\"; }; } );\n", "%s:2: routes[0].name: \"a/b\": want"},
	{"name twice", "upstream = { host = \"d\"; };\nroutes = ( { name = \"t\"; auth_user = \"u\";"
	 " upstream = { host = \"a\"; }; },\n { name = \"t\"; auth_user = \"v\";"
	 " upstream = { host = \"b\"; }; } );\n", "%s:3: routes[1].name: \"t\" names routes[0] too"},
	{"no upstream", "upstream = { host = \"d\"; };\nroutes = ( { name = \"t\";"
	 " auth_user = \"u\"; } );\n", "%s:2: routes[0].upstream: missing setting"},
	{"maildir in a route", "upstream = { host = \"d\"; };\nroutes = ( { name = \"t\";"
	 " auth_user = \"u\";\n upstream = { maildir = \"x\"; }; } );\n",
	 "%s:3: routes[0].upstream.maildir: unknown setting"},
	{"ambiguous in a route", "upstream = { host = \"d\"; };\nroutes = ( { name = \"t\";"
	 " auth_user = \"u\";\n upstream = { host = \"a\"; ambiguous = \"retry\"; }; } );\n",
	 "%s:3: routes[0].upstream.ambiguous: unknown setting"},
	{"unknown listener", "upstream = { host = \"d\"; };\nroutes = ( { name = \"t\";"
	 " listener = \"nope\"; upstream = { host = \"a\"; }; } );\n",
	 "%s:2: routes[0].listener: no listen entry has name = \"nope\""},
	{"sender not an address", "upstream = { host = \"d\"; };\nroutes = ( { name = \"t\";"
	 " sender = \"example.com\"; upstream = { host = \"a\"; }; } );\n",
	 "%s:2: routes[0].sender: \"example.com\" is not an address"},
	{"domain is an address", "upstream = { host = \"d\"; };\nroutes = ( { name = \"t\";"
	 " sender_domain = \"a@example.com\"; upstream = { host = \"a\"; }; } );\n",
	 "%s:2: routes[0].sender_domain: \"a@example.com\" is an address"},
	{"default is a Maildir", "upstream = { maildir = \"x\"; };\nroutes = ( { name = \"t\";"
	 " auth_user = \"u\"; upstream = { host = \"a\"; }; } );\n",
	 "%s:2: routes: need upstream.host or upstream.hosts"},
	{"route needs a host", "upstream = { host = \"d\"; };\nroutes = ( { name = \"t\";"
	 " auth_user = \"u\"; upstream = { port = 25; }; } );\n",
	 "%s:2: routes[0].upstream: needs exactly one of host or hosts"},
	{"listen name twice", "upstream = { host = \"d\"; };\nlisten = ( { name = \"a\";"
	 " address = \"::1\"; port = 25; },\n { name = \"a\"; address = \"::1\"; port = 26; } );\n",
	 "%s:3: listen[1].name: \"a\" names listen[0] too"},
};

/* test_errors - what routes refuse, and where the message points */
static void test_errors(void **state)
{
	size_t i;

	(void) state;
	for (i = 0; i < sizeof(error_cases) / sizeof(error_cases[0]); i++)
		check_conf_error(error_cases[i].name, error_cases[i].text, error_cases[i].want);
}

/* test_restart - routes take a restart, as upstream does */
static void test_restart(void **state)
{
	struct conf a, b;
	const char *names[CONF_RESTART_MAX];
	char err[512];
	size_t n;

	(void) state;
	if (load_text(&a, routes_conf, err, sizeof(err)) != 0)
		fail_msg("conf_load: %s", err);
	if (load_text(&b, "listen = ( { address = \"127.0.0.1\"; port = 2525; },\n"
		      "  { name = \"internal\"; address = \"127.0.0.1\"; port = 2526; } );\n"
		      "upstream = { host = \"default.example\"; };\n", err, sizeof(err)) != 0)
		fail_msg("conf_load: %s", err);
	n = conf_restart_changed(&a, &b, names, CONF_RESTART_MAX);
	assert_int_equal(n, 1);
	assert_string_equal(names[0], "routes");
	conf_free(&a);
	conf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_match, cleanup),
		cmocka_unit_test_teardown(test_route_upstream, cleanup),
		cmocka_unit_test_teardown(test_errors, cleanup),
		cmocka_unit_test_teardown(test_restart, cleanup),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
