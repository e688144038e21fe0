/*
 * NAME
 *	test_conf 1
 * SUMMARY
 *	unit tests for conf/: parsing, defaults, diagnostics, CIDR matching
 * DESCRIPTION
 *	Table-driven: each case is a config text (written to a temporary
 *	file) and what conf_load() should make of it. Diagnostics are
 *	compared by prefix, "FILE:LINE: setting: problem", so the tests pin
 *	the file, line and setting named without freezing libconfig's wording.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <errno.h>
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
#include "../../util/log.h"

#define MINIMAL "upstream = { maildir = \"var/outbox\"; };\n"

static void test_durations(void **state)
{
	static const struct {
		const char *in;
		int64_t want;
	} cases[] = {
		{"0", 0}, {"30", 30}, {"30s", 30}, {"5m", 300}, {"24h", 86400},
		{"7d", 7 * 86400}, {"0s", 0}, {"9223372036854775807", INT64_MAX},
		{"", -1}, {"s", -1}, {"5", 5}, {"-5s", -1}, {"+5s", -1},
		{"5 m", -1}, {" 5m", -1}, {"5m ", -1}, {"5ms", -1}, {"5M", -1},
		{"5w", -1}, {"1.5h", -1}, {"abc", -1}, {"0x10", -1},
		{"9223372036854775808", -1}, {"106751991167301d", -1},
		{"106751991167300d", 106751991167300LL * 86400},
	};
	size_t i;

	(void) state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int64_t got = conf_parse_duration(cases[i].in);

		if (got != cases[i].want)
			fail_msg("conf_parse_duration(\"%s\") = %lld, want %lld",
				 cases[i].in, (long long) got, (long long) cases[i].want);
	}
	assert_int_equal(conf_parse_duration(NULL), -1);
}

static void test_sizes(void **state)
{
	static const struct {
		const char *in;
		int64_t want;
	} cases[] = {
		{"0", 0}, {"1", 1}, {"1K", 1024}, {"1k", 1024}, {"25M", 25 << 20},
		{"4G", 4LL << 30}, {"1024", 1024}, {"8589934591G", 8589934591LL << 30},
		{"8589934592G", -1}, {"99999999999999999999", -1},
		{"", -1}, {"K", -1}, {"-1", -1}, {"1.5M", -1}, {"25MB", -1},
		{"25 M", -1}, {"1T", -1}, {"M25", -1}, {"25m ", -1},
	};
	size_t i;

	(void) state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int64_t got = conf_parse_size(cases[i].in);

		if (got != cases[i].want)
			fail_msg("conf_parse_size(\"%s\") = %lld, want %lld",
				 cases[i].in, (long long) got, (long long) cases[i].want);
	}
	assert_int_equal(conf_parse_size(NULL), -1);
}

static const char full_conf[] =
	"hostname = \"relay.example.com\";\n"
	"user = \"idemrelay\";\n"
	"control = \"var/idemrelay.sock\";\n"
	"metrics = { address = \"127.0.0.1\"; port = 9465; };\n"
	"listen = (\n"
	"  { address = \"127.0.0.1\"; port = 2525; },\n"
	"  { address = \"0.0.0.0\"; port = 587; starttls = \"required\"; auth = \"required\"; },\n"
	"  { address = \"::\"; port = 465; tls = \"implicit\"; auth = \"required\";\n"
	"    smtputf8 = false; }\n"
	");\n"
	"tls = { cert = \"/etc/idemrelay/cert.pem\"; key = \"/etc/idemrelay/key.pem\"; };\n"
	"auth = { users = \"/etc/idemrelay/users\"; };\n"
	"access = { networks = [ \"10.0.0.0/8\", \"192.168.1.7\", \"2001:db8::/32\" ]; };\n"
	"store = { path = \"/var/lib/idemrelay\"; map_size = \"4G\"; key_ttl = \"2h\"; };\n"
	"keys = {\n"
	"  headers = [ \"X-Key\" ];\n"
	"  mode = \"shadow\"; message_id = false; envid = false; require = true;\n"
	"  strip_header = false; scope = \"global\"; on_mismatch = \"accept\";\n"
	"};\n"
	"upstream = {\n"
	"  hosts = [ \"a.example:587\", \"b.example\", \"[2001:db8::1]:2525\", \"2001:db8::2\" ];\n"
	"  port = 587; tls = \"starttls\"; tls_verify = false;\n"
	"  user = \"u\"; password = \"p w\"; connections = 8; timeout = 90;\n"
	"  ambiguous = \"retry\"; rate = 14; recipient_rate = 50;\n"
	"};\n"
	"retry = { first = \"30s\"; max = \"2h\"; give_up = \"3d\"; };\n"
	"limits = { message_size = 1048576; recipients = 50; connections = 10;\n"
	"           command_timeout = \"1m\"; data_timeout = 600; bare_lf = \"reject\";\n"
	"           long_lines = \"pass\"; nul = \"pass\"; };\n"
	"log = { level = \"debug\"; target = \"syslog\"; };\n";

static void test_full(void **state)
{
	struct conf c;
	char err[512];

	(void) state;
	if (load_text(&c, full_conf, err, sizeof(err)) != 0)
		fail_msg("conf_load: %s", err);
	assert_string_equal(c.hostname, "relay.example.com");
	assert_string_equal(c.user, "idemrelay");
	assert_string_equal(c.control, "var/idemrelay.sock");
	assert_string_equal(c.metrics_address, "127.0.0.1");
	assert_int_equal(c.metrics_port, 9465);
	assert_int_equal(c.n_listen, 3);
	assert_string_equal(c.listen[1].address, "0.0.0.0");
	assert_int_equal(c.listen[1].port, 587);
	assert_true(c.listen[1].starttls_required && c.listen[1].auth_required);
	assert_false(c.listen[1].tls_implicit);
	assert_true(c.listen[2].tls_implicit && c.listen[2].auth_required);
	assert_true(c.listen[0].smtputf8 && c.listen[1].smtputf8);	/* the default */
	assert_false(c.listen[2].smtputf8);
	assert_false(c.listen[0].starttls_required || c.listen[0].tls_implicit
		     || c.listen[0].auth_required);
	assert_string_equal(c.tls_cert, "/etc/idemrelay/cert.pem");
	assert_string_equal(c.tls_key, "/etc/idemrelay/key.pem");
	assert_string_equal(c.auth_users, "/etc/idemrelay/users");
	assert_int_equal(c.n_networks, 3);
	assert_int_equal(c.networks[1].prefix, 32);
	assert_int_equal(c.networks[2].family, AF_INET6);
	assert_string_equal(c.store.path, "/var/lib/idemrelay");
	assert_true(c.store.map_size == 4ULL << 30);
	assert_int_equal(c.store.key_ttl, 7200);
	assert_int_equal(c.keys.n_headers, 1);
	assert_string_equal(c.keys.headers[0], "X-Key");
	assert_true(c.keys.shadow && c.keys.require && c.keys.mismatch_accept);
	assert_false(c.keys.message_id || c.keys.envid || c.keys.strip_header
		     || c.keys.scope_user);
	assert_int_equal(c.upstream.n_hosts, 4);
	assert_string_equal(c.upstream.hosts[0].host, "a.example");
	assert_int_equal(c.upstream.hosts[0].port, 587);
	assert_string_equal(c.upstream.hosts[1].host, "b.example");
	assert_int_equal(c.upstream.hosts[1].port, 587);	/* from port */
	assert_string_equal(c.upstream.hosts[2].host, "2001:db8::1");
	assert_int_equal(c.upstream.hosts[2].port, 2525);
	assert_string_equal(c.upstream.hosts[3].host, "2001:db8::2");
	assert_null(c.upstream.maildir);
	assert_int_equal(c.upstream.tls, CONF_TLS_STARTTLS);
	assert_false(c.upstream.tls_verify);
	assert_string_equal(c.upstream.user, "u");
	assert_string_equal(c.upstream.password, "p w");
	assert_int_equal(c.upstream.connections, 8);
	assert_int_equal(c.upstream.rate, 14);
	assert_int_equal(c.upstream.recipient_rate, 50);
	assert_int_equal(c.upstream.timeout, 90);
	assert_true(c.upstream.ambiguous_retry);
	assert_int_equal(c.retry.first, 30);
	assert_int_equal(c.retry.max, 7200);
	assert_int_equal(c.retry.give_up, 3 * 86400);
	assert_int_equal(c.limits.message_size, 1048576);
	assert_int_equal(c.limits.recipients, 50);
	assert_int_equal(c.limits.connections, 10);
	assert_int_equal(c.limits.command_timeout, 60);
	assert_int_equal(c.limits.data_timeout, 600);
	assert_true(c.limits.bare_lf_reject);
	assert_int_equal(c.limits.long_lines, CONF_LONG_LINES_PASS);
	assert_true(c.limits.nul_pass);
	assert_int_equal(c.log.level, LOG_LEVEL_DEBUG);
	assert_true(c.log.syslog);
	conf_free(&c);
	conf_free(&c);			/* a freed struct is zeroed: safe again */
}

static void test_defaults(void **state)
{
	struct conf c;
	char err[512], host[256] = "";

	(void) state;
	if (load_text(&c, MINIMAL, err, sizeof(err)) != 0)
		fail_msg("conf_load: %s", err);
	gethostname(host, sizeof(host));
	assert_string_equal(c.hostname, host[0] ? host : "localhost");
	assert_string_equal(c.node, c.hostname);
	assert_int_equal(c.store.backend, CONF_STORE_LMDB);
	assert_null(c.store.url);
	assert_null(c.user);
	assert_null(c.control);
	assert_null(c.metrics_address);
	assert_int_equal(c.n_listen, 1);
	assert_string_equal(c.listen[0].address, "127.0.0.1");
	assert_int_equal(c.listen[0].port, 2525);
	assert_true(c.listen[0].smtputf8);
	assert_null(c.tls_cert);
	assert_null(c.tls_key);
	assert_null(c.auth_users);
	assert_int_equal(c.n_networks, 2);	/* 127.0.0.0/8 and ::1/128 */
	assert_true(c.networks[0].family == AF_INET && c.networks[0].prefix == 8
		    && c.networks[0].addr[0] == 127);
	assert_true(c.networks[1].family == AF_INET6 && c.networks[1].prefix == 128
		    && c.networks[1].addr[15] == 1);
	assert_string_equal(c.store.path, "var/store");
	assert_true(c.store.map_size == 1ULL << 30);
	assert_int_equal(c.store.key_ttl, 86400);
	assert_int_equal(c.keys.n_headers, 2);
	assert_string_equal(c.keys.headers[0], "X-Idempotency-Key");
	assert_string_equal(c.keys.headers[1], "Idempotency-Key");
	assert_false(c.keys.shadow || c.keys.require || c.keys.mismatch_accept);
	assert_true(c.keys.message_id && c.keys.envid && c.keys.strip_header
		    && c.keys.scope_user);
	assert_string_equal(c.upstream.maildir, "var/outbox");
	assert_int_equal(c.upstream.n_hosts, 0);
	assert_int_equal(c.upstream.tls, CONF_TLS_NONE);
	assert_true(c.upstream.tls_verify);
	assert_null(c.upstream.user);
	assert_int_equal(c.upstream.connections, 4);
	assert_int_equal(c.upstream.rate, 0);
	assert_int_equal(c.upstream.recipient_rate, 0);
	assert_int_equal(c.upstream.timeout, 300);
	assert_false(c.upstream.ambiguous_retry);
	assert_int_equal(c.retry.first, 60);
	assert_int_equal(c.retry.max, 3600);
	assert_int_equal(c.retry.give_up, 5 * 86400);
	assert_true(c.limits.message_size == 25ULL << 20);
	assert_int_equal(c.limits.recipients, 100);
	assert_int_equal(c.limits.connections, 1000);
	assert_int_equal(c.limits.command_timeout, 300);
	assert_int_equal(c.limits.data_timeout, 600);
	assert_false(c.limits.bare_lf_reject);
	assert_int_equal(c.limits.long_lines, CONF_LONG_LINES_FOLD);
	assert_false(c.limits.nul_pass);
	assert_int_equal(c.log.level, LOG_LEVEL_INFO);
	assert_false(c.log.syslog);
	conf_free(&c);

	/* upstream host defaults its port from tls */
	if (load_text(&c, "upstream = { host = \"mx\"; };", err, sizeof(err)) != 0)
		fail_msg("conf_load: %s", err);
	assert_int_equal(c.upstream.hosts[0].port, 25);
	conf_free(&c);
	if (load_text(&c, "upstream = { host = \"mx\"; tls = \"implicit\"; };",
		      err, sizeof(err)) != 0)
		fail_msg("conf_load: %s", err);
	assert_int_equal(c.upstream.hosts[0].port, 465);
	conf_free(&c);

	/* postgresql: the url and lease; the map is LMDB's and not checked */
	if (load_text(&c, MINIMAL "node = \"relay2\"; store = { backend = \"postgresql\"; "
		      "url = \"host=db1,db2 dbname=idemrelay target_session_attrs=read-write\"; "
		      "lease = \"10s\"; commit_wait = \"5s\"; map_size = \"10M\"; };", err,
		      sizeof(err)) != 0)
		fail_msg("conf_load: %s", err);
	assert_string_equal(c.node, "relay2");
	assert_int_equal(c.store.backend, CONF_STORE_POSTGRESQL);
	assert_string_equal(c.store.url,
			    "host=db1,db2 dbname=idemrelay target_session_attrs=read-write");
	assert_int_equal(c.store.lease, 10);
	assert_int_equal(c.store.commit_wait, 5);
	conf_free(&c);

	/* store.commit_wait unset: 15s, or half the lease when that is shorter */
	if (load_text(&c, MINIMAL "store = { backend = \"postgresql\"; url = \"x\"; };", err,
		      sizeof(err)) != 0)
		fail_msg("conf_load: %s", err);
	assert_int_equal(c.store.commit_wait, 15);
	conf_free(&c);
	if (load_text(&c, MINIMAL "store = { backend = \"postgresql\"; url = \"x\"; "
		      "lease = \"8s\"; };", err, sizeof(err)) != 0)
		fail_msg("conf_load: %s", err);
	assert_int_equal(c.store.commit_wait, 4);
	conf_free(&c);
}

static void test_default_text(void **state)
{
	struct conf c;
	char err[512];

	(void) state;
	if (conf_load(&c, NULL, err, sizeof(err)) != 0)
		fail_msg("embedded default: %s", err);
	assert_string_equal(c.hostname, "localhost");
	assert_string_equal(c.listen[0].address, "127.0.0.1");
	assert_int_equal(c.listen[0].port, 2525);
	assert_string_equal(c.store.path, "var/store");
	assert_string_equal(c.upstream.maildir, "var/outbox");
	conf_free(&c);
}

#define PIN_HEX_63 "30c9c3c4589ac3fa0e2b190cfe5635b33767b2e7f56575d7697205ba7e4016d"
#define PIN_HEX	PIN_HEX_63 "4"

/* test_upstream_trust - tls_ca, tls_servername and pins, in both spellings */
static void test_upstream_trust(void **state)
{
	static const char text[] = "upstream = { host = \"192.0.2.1\"; tls = \"starttls\";\n"
		" tls_ca = \"/etc/idemrelay/ca\"; tls_servername = \"mx.example.net\";\n"
		" tls_fingerprint = [ \"sha256:" PIN_HEX "\",\n"
		"  \"SHA256:30:C9:C3:C4:58:9A:C3:FA:0E:2B:19:0C:FE:56:35:B3:37:67:B2:E7:F5:65:"
		"75:D7:69:72:05:BA:7E:40:16:D4\" ]; };\n";
	struct conf c;
	char err[512];

	(void) state;
	if (load_text(&c, text, err, sizeof(err)) != 0)
		fail_msg("conf_load: %s", err);
	assert_string_equal(c.upstream.tls_ca, "/etc/idemrelay/ca");
	assert_string_equal(c.upstream.tls_servername, "mx.example.net");
	assert_int_equal(c.upstream.n_tls_fingerprint, 2);
	assert_int_equal(c.upstream.tls_fingerprint[0][0], 0x30);
	assert_int_equal(c.upstream.tls_fingerprint[0][31], 0xd4);
	assert_memory_equal(c.upstream.tls_fingerprint[0], c.upstream.tls_fingerprint[1], 32);
	conf_free(&c);
}

/* test_where - start-up messages point at a setting where it was written */
static void test_where(void **state)
{
	struct conf c;
	char err[512], got[512], want[512];

	(void) state;
	if (load_text(&c, MINIMAL "store = {\n  path = \"x\";\n};\nlisten = (\n"
		      "  { address = \"::1\";\n    port = 25; } );\n", err, sizeof(err)) != 0)
		fail_msg("conf_load: %s", err);
	snprintf(want, sizeof(want), "%s:3: store.path", tmp_path);
	assert_string_equal(conf_where(&c, "store.path", got, sizeof(got)), want);
	snprintf(want, sizeof(want), "%s:7: listen[0].port", tmp_path);
	assert_string_equal(conf_where(&c, "listen[0].port", got, sizeof(got)), want);
	snprintf(want, sizeof(want), "%s: user (default)", tmp_path);
	assert_string_equal(conf_where(&c, "user", got, sizeof(got)), want);
	conf_free(&c);
}

/* Each case: config text, and the message prefix wanted ("%s" = file). */
static const struct {
	const char *name;
	const char *text;
	const char *want;
} error_cases[] = {
	{"unknown top", MINIMAL "\nfoo = 1;\n", "%s:3: foo: unknown setting"},
	{"unknown nested", MINIMAL "store = {\n  path = \"x\";\n  mapsize = \"1G\"; };\n",
	 "%s:4: store.mapsize: unknown setting"},
	{"unknown in list", MINIMAL "listen = (\n { address = \"127.0.0.1\"; port = 25; },\n"
	 " { address = \"::1\"; port = 26; tsl = \"implicit\"; });\n",
	 "%s:4: listen[1].tsl: unknown setting"},
	{"bad duration", MINIMAL "store = { key_ttl = \"5 parsecs\"; };\n",
	 "%s:2: store.key_ttl: bad duration \"5 parsecs\""},
	{"controls in a value quoted escaped", MINIMAL "store = { key_ttl = \"5\\n\\x1b[2J\\t\"; };\n",
	 "%s:2: store.key_ttl: bad duration \"5\\n\\x1b[2J\\t\""},
	{"negative duration", MINIMAL "retry = { first = -5; };\n",
	 "%s:2: retry.first: bad duration -5"},
	{"zero timeout", MINIMAL "limits = { data_timeout = \"0s\"; };\n",
	 "%s:2: limits.data_timeout: duration must be at least 1"},
	{"duration past 100 years", MINIMAL "store = { key_ttl = \"36501d\"; };\n",
	 "%s:2: store.key_ttl: duration must be at most 3153600000"},
	{"integer duration past 100 years", MINIMAL "retry = { give_up = 3153600001L; };\n",
	 "%s:2: retry.give_up: duration must be at most 3153600000"},
	{"bad size", MINIMAL "limits = { message_size = \"25MB\"; };\n",
	 "%s:2: limits.message_size: bad size \"25MB\""},
	{"size vs map", MINIMAL "store = { map_size = \"10M\"; };\n",
	 "%s:2: store.map_size: must be larger than limits.message_size"},
	{"map past the address space", MINIMAL "store = { map_size = \"1048576G\"; };\n",
	 "%s:2: store.map_size: 1125899906842624 bytes do not fit this process's address space"},
	{"ceiling below the start", MINIMAL "store = { map_size = \"2G\"; map_size_max = \"1G\"; };\n",
	 "%s:2: store.map_size_max: must be at least store.map_size"},
	{"postgresql without url", MINIMAL "store = { backend = \"postgresql\"; };\n",
	 "%s:2: store.backend: \"postgresql\" needs store.url"},
	{"url with lmdb", MINIMAL "store = { url = \"postgresql://db/x\"; };\n",
	 "%s:2: store.url: only with backend = \"postgresql\""},
	{"lease with lmdb", MINIMAL "store = { lease = \"10s\"; };\n",
	 "%s:2: store.lease: only with backend = \"postgresql\""},
	{"commit_wait with lmdb", MINIMAL "store = { commit_wait = \"10s\"; };\n",
	 "%s:2: store.commit_wait: only with backend = \"postgresql\""},
	{"commit_wait past half the lease", MINIMAL "store = { backend = \"postgresql\"; "
	 "url = \"postgresql://db/x\"; lease = \"10s\"; commit_wait = \"6s\"; };\n",
	 "%s:2: store.commit_wait: at most half of store.lease (10s)"},
	{"bad backend", MINIMAL "store = { backend = \"redis\"; };\n",
	 "%s:2: store.backend: bad value \"redis\" (expected \"lmdb\" or \"postgresql\")"},
	{"node with a space", MINIMAL "node = \"relay 1\";\n", "%s:2: node: "},
	{"bad enum", MINIMAL "keys = { mode = \"enforcing\"; };\n",
	 "%s:2: keys.mode: bad value \"enforcing\" (expected \"enforce\" or \"shadow\")"},
	{"bad enum 3", "upstream = { host = \"h\"; tls = \"ssl\"; };\n",
	 "%s:1: upstream.tls: bad value \"ssl\" (expected \"none\", \"starttls\" or \"implicit\")"},
	{"bad smtputf8", MINIMAL "listen = ( { address = \"::1\"; port = 25; smtputf8 = \"yes\"; } );\n",
	 "%s:2: listen[0].smtputf8: "},
	{"bad level", MINIMAL "log = { level = \"notice\"; };\n", "%s:2: log.level: bad value"},
	{"bad port", MINIMAL "listen = ( { address = \"127.0.0.1\"; port = 70000; } );\n",
	 "%s:2: listen[0].port: 70000 out of range 1..65535"},
	{"bad address", MINIMAL "listen = ( { address = \"localhost\"; port = 25; } );\n",
	 "%s:2: listen[0].address: not a numeric IP address"},
	{"missing port", MINIMAL "listen = ( { address = \"127.0.0.1\"; } );\n",
	 "%s:2: listen[0].port: missing setting"},
	{"empty listen", MINIMAL "listen = ( );\n", "%s:2: listen: no listeners"},
	{"duplicate listen", MINIMAL "listen = ( { address = \"::1\"; port = 25; },\n"
	 "{ address = \"::1\"; port = 25; } );\n", "%s:3: listen[1]: duplicate of listen[0]"},
	{"starttls needs tls", MINIMAL "listen = ( { address = \"::1\"; port = 587;\n"
	 " starttls = \"required\"; } );\n", "%s:2: listen[0].starttls: requires tls"},
	{"auth needs users", MINIMAL "tls = { cert = \"c\"; key = \"k\"; };\n"
	 "listen = ( { address = \"::1\"; port = 587; auth = \"required\"; } );\n",
	 "%s:3: listen[0].auth: requires auth"},
	{"users need tls", MINIMAL "auth = { users = \"/etc/u\"; };\n",
	 "%s:2: auth.users: AUTH needs tls"},
	{"tls half", MINIMAL "tls = { cert = \"c\"; };\n", "%s:2: tls.key: missing setting"},
	{"wrong type int", MINIMAL "limits = { recipients = \"100\"; };\n",
	 "%s:2: limits.recipients: expected an integer, got a string"},
	{"wrong type string", "hostname = 5;\n" MINIMAL,
	 "%s:1: hostname: expected a string, got an integer"},
	{"wrong type bool", MINIMAL "keys = { require = \"yes\"; };\n",
	 "%s:2: keys.require: expected true or false, got a string"},
	{"wrong type group", MINIMAL "store = \"/var/lib\";\n",
	 "%s:2: store: expected a group"},
	{"wrong type duration", MINIMAL "store = { key_ttl = 1.5; };\n",
	 "%s:2: store.key_ttl: expected an integer or a string, got a float"},
	{"wrong type list elem", MINIMAL "access = { networks = [ 1, 2 ]; };\n",
	 "%s:2: access.networks[0]: expected a string, got an integer"},
	{"empty string", "hostname = \"\";\n" MINIMAL, "%s:1: hostname: empty value"},
	{"hostname space", "hostname = \"a b\";\n" MINIMAL, "%s:1: hostname: bad value"},
	{"bad cidr", MINIMAL "access = { networks = [ \"10.0.0.0/33\" ]; };\n",
	 "%s:2: access.networks[0]: bad network \"10.0.0.0/33\""},
	{"host bits", MINIMAL "access = {\n networks = [ \"::1/128\",\n \"10.1.2.3/8\" ]; };\n",
	 "%s:4: access.networks[1]: host bits set in network \"10.1.2.3/8\""},
	{"bad header name", MINIMAL "keys = { headers = [ \"X-Key:\" ]; };\n",
	 "%s:2: keys.headers[0]: bad header name"},
	{"header named twice", MINIMAL "keys = { headers = [ \"X-Key\", \"Other\",\n"
	 " \"x-KEY\" ]; };\n",
	 "%s:3: keys.headers[2]: \"x-KEY\" repeats keys.headers[0] \"X-Key\": remove one"},
	{"upstream neither", "upstream = { tls = \"starttls\"; };\n",
	 "%s:1: upstream: needs exactly one of host, hosts or maildir"},
	{"upstream both", "upstream = {\n host = \"h\";\n maildir = \"m\"; };\n",
	 "%s:1: upstream: needs exactly one of host, hosts or maildir"},
	{"upstream host+hosts", "upstream = { host = \"h\"; hosts = [ \"a\" ]; };\n",
	 "%s:1: upstream: needs exactly one of"},
	{"upstream missing", "log = { level = \"info\"; };\n", "%s: upstream: missing"},
	{"upstream user without tls",
	 "upstream = { host = \"h\";\n user = \"u\"; password = \"p\"; };\n",
	 "%s:2: upstream.user: requires tls = \"starttls\" or \"implicit\""},
	{"upstream user without password",
	 "upstream = { host = \"h\"; tls = \"starttls\";\n user = \"u\"; };\n",
	 "%s:1: upstream.password: missing setting (user and password go together)"},
	{"upstream port alone", "upstream = { maildir = \"m\"; port = 25; };\n",
	 "%s:1: upstream.port: only with host or hosts"},
	{"upstream rate into a Maildir", "upstream = { maildir = \"m\"; rate = 14; };\n",
	 "%s:1: upstream.rate: only with host or hosts"},
	{"upstream rate negative", "upstream = { host = \"h\"; recipient_rate = -1; };\n",
	 "%s:1: upstream.recipient_rate: -1 out of range 0..1000000"},
	{"upstream rate not a number", "upstream = { host = \"h\"; rate = \"14/s\"; };\n",
	 "%s:1: upstream.rate: "},
	{"upstream bad hostport", "upstream = { hosts = [ \"a:0\" ]; };\n",
	 "%s:1: upstream.hosts[0]: bad host[:port] \"a:0\""},
	{"upstream user only", "upstream = { host = \"h\"; user = \"u\"; };\n",
	 "%s:1: upstream.password: missing setting"},
	{"retry order", MINIMAL "retry = { first = \"2h\"; max = \"1h\"; };\n",
	 "%s:2: retry.max: shorter than retry.first"},
	{"syntax error", MINIMAL "store = { path = ; };\n", "%s:2: syntax error"},
	{"syntax error eof", MINIMAL "\n\nlisten = ( { port = 25; \n",
	 "%s:5: syntax error"},
	{"duplicate", MINIMAL "log = { level = \"info\";\n level = \"debug\"; };\n",
	 "%s:3: syntax error: duplicate setting name"},
	{"wrapped integer", MINIMAL "store = { map_size = 3000000000; };\n",
	 "%s:2: store.map_size: bad size -1294967296 (write large sizes with a unit"},
	{"upstream bad v6", "upstream = { hosts = [ \"[::1\" ]; };\n",
	 "%s:1: upstream.hosts[0]: bad host[:port] \"[::1\""},
	{"upstream empty hosts", "upstream = { hosts = [ ]; };\n",
	 "%s:1: upstream.hosts: empty list"},
	{"metrics no port", MINIMAL "metrics = { address = \"::1\"; };\n",
	 "%s:2: metrics.port: missing setting"},
	{"pin short", "upstream = { host = \"h\"; tls = \"starttls\";\n"
	 " tls_fingerprint = [ \"sha256:00ff\" ]; };\n",
	 "%s:2: upstream.tls_fingerprint[0]: bad fingerprint \"sha256:00ff\""},
	{"pin digest", "upstream = { host = \"h\"; tls = \"starttls\";\n"
	 " tls_fingerprint = [ \"sha1:" PIN_HEX "\" ]; };\n",
	 "%s:2: upstream.tls_fingerprint[0]: bad fingerprint"},
	{"pin not hex", "upstream = { host = \"h\"; tls = \"starttls\";\n"
	 " tls_fingerprint = [ \"sha256:" PIN_HEX_63 "g\" ]; };\n",
	 "%s:2: upstream.tls_fingerprint[0]: bad fingerprint"},
	{"pins empty", "upstream = { host = \"h\"; tls = \"starttls\";\n"
	 " tls_fingerprint = [ ]; };\n", "%s:2: upstream.tls_fingerprint: empty list"},
	{"trust needs tls", "upstream = { host = \"h\";\n tls_ca = \"/etc/ca.pem\"; };\n",
	 "%s:2: upstream.tls_ca: requires tls = \"starttls\" or \"implicit\""},
	{"pins need verify", "upstream = { host = \"h\"; tls = \"starttls\"; tls_verify = false;\n"
	 " tls_fingerprint = [ \"sha256:" PIN_HEX "\" ]; };\n",
	 "%s:2: upstream.tls_fingerprint: makes no sense with tls_verify = false"},
};

static void test_errors(void **state)
{
	size_t i;

	(void) state;
	for (i = 0; i < sizeof(error_cases) / sizeof(error_cases[0]); i++)
		check_conf_error(error_cases[i].name, error_cases[i].text, error_cases[i].want);
}

static void test_file_errors(void **state)
{
	struct conf c;
	char err[512], small[16];

	(void) state;
	assert_int_equal(conf_load(&c, "/nonexistent/idemrelay.conf", err,
				   sizeof(err)), -1);
	assert_string_equal(err, "/nonexistent/idemrelay.conf: cannot open: "
			    "No such file or directory");
	conf_free(&c);

	/* a directory opens: its reason is not an errno left by an earlier call */
	errno = EACCES;
	assert_int_equal(conf_load(&c, "/", err, sizeof(err)), -1);
	assert_string_equal(err, "/: cannot open: Is a directory");
	conf_free(&c);

	/* messages are truncated, never overflowed */
	assert_int_equal(load_text(&c, MINIMAL "foo = 1;", small, sizeof(small)), -1);
	assert_int_equal(strlen(small), sizeof(small) - 1);
	conf_free(&c);
	assert_int_equal(load_text(&c, MINIMAL "foo = 1;", NULL, 0), -1);
	conf_free(&c);
}

static void test_include(void **state)
{
	char dir[] = "/tmp/test_conf.dXXXXXX", main_conf[64], sub_conf[64];
	char err[512], want[512];
	struct conf c;
	FILE *fp;

	(void) state;
	assert_non_null(mkdtemp(dir));
	snprintf(main_conf, sizeof(main_conf), "%s/main.conf", dir);
	snprintf(sub_conf, sizeof(sub_conf), "%s/sub.conf", dir);
	assert_non_null(fp = fopen(sub_conf, "w"));
	fputs("store = {\n  key_ttl = \"1y\"; };\n", fp);
	fclose(fp);
	assert_non_null(fp = fopen(main_conf, "w"));
	fputs(MINIMAL "@include \"sub.conf\"\n", fp);
	fclose(fp);

	/* the include is found next to the including file, and named in errors */
	assert_int_equal(conf_load(&c, main_conf, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "%s:2: store.key_ttl: bad duration \"1y\"",
		 sub_conf);
	if (strcmp(err, want) != 0)
		fail_msg("got \"%s\", want \"%s\"", err, want);
	conf_free(&c);

	/* 64-bit integers need libconfig's L suffix */
	assert_non_null(fp = fopen(sub_conf, "w"));
	fputs("store = { map_size = 8589934592L; };\n", fp);
	fclose(fp);
	if (conf_load(&c, main_conf, err, sizeof(err)) != 0)
		fail_msg("conf_load: %s", err);
	assert_true(c.store.map_size == 8ULL << 30);
	conf_free(&c);

	/* an include's missing include is named, whatever the working directory */
	assert_non_null(fp = fopen(sub_conf, "w"));
	fputs("# sub\n@include \"missing.conf\"\n", fp);
	fclose(fp);
	assert_int_equal(conf_load(&c, main_conf, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "%s:2: cannot open include file %s/missing.conf: No such "
		 "file or directory", sub_conf, dir);
	if (strcmp(err, want) != 0)
		fail_msg("got \"%s\", want \"%s\"", err, want);
	conf_free(&c);
	unlink(sub_conf);
	unlink(main_conf);
	rmdir(dir);
}

static void test_free_zeroed(void **state)
{
	struct conf c;

	(void) state;
	memset(&c, 0, sizeof(c));
	conf_free(&c);
	conf_free(NULL);
}

/* sockaddr_of - a sockaddr for a numeric address */
static const struct sockaddr *sockaddr_of(const char *a,
					  struct sockaddr_storage *ss)
{
	struct sockaddr_in *s4 = (struct sockaddr_in *) ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *) ss;

	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, a, &s4->sin_addr) == 1)
		s4->sin_family = AF_INET;
	else if (inet_pton(AF_INET6, a, &s6->sin6_addr) == 1)
		s6->sin6_family = AF_INET6;
	else
		fail_msg("bad test address %s", a);
	return (const struct sockaddr *) ss;
}

static void test_net_match(void **state)
{
	static const struct {
		const char *addr;
		int want;
	} cases[] = {
		{"10.0.0.1", 1}, {"10.255.255.255", 1}, {"11.0.0.1", 0},
		{"192.168.1.7", 1}, {"192.168.1.8", 0},
		{"172.16.0.1", 1}, {"172.31.255.255", 1}, {"172.32.0.0", 0},
		{"172.15.255.255", 0},
		{"2001:db8::1", 1}, {"2001:db8:ffff::1", 1}, {"2001:db9::1", 0},
		{"::1", 0}, {"fe80::1", 0},
		{"::ffff:10.1.2.3", 1}, {"::ffff:192.168.1.7", 1},
		{"::ffff:11.1.2.3", 0}, {"::10.1.2.3", 0},
		{"fd00::1:2", 1}, {"fd00::2:2", 0},
	};
	const char *text = MINIMAL "access = { networks = [ \"10.0.0.0/8\", "
		"\"192.168.1.7\", \"172.16.0.0/12\", \"2001:db8::/32\", "
		"\"fd00::1:0/113\" ]; };\n";
	struct sockaddr_storage ss;
	struct sockaddr unix_sa = {.sa_family = AF_UNIX};
	struct conf c;
	char err[512];
	size_t i;

	(void) state;
	if (load_text(&c, text, err, sizeof(err)) != 0)
		fail_msg("conf_load: %s", err);
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int got = conf_net_match(&c, sockaddr_of(cases[i].addr, &ss));

		if (got != cases[i].want)
			fail_msg("conf_net_match(%s) = %d, want %d",
				 cases[i].addr, got, cases[i].want);
	}
	assert_int_equal(conf_net_match(&c, &unix_sa), 0);
	assert_int_equal(conf_net_match(&c, NULL), 0);
	conf_free(&c);

	/* defaults: loopback only; 0.0.0.0/0 matches every IPv4 */
	if (load_text(&c, MINIMAL, err, sizeof(err)) != 0)
		fail_msg("conf_load: %s", err);
	assert_int_equal(conf_net_match(&c, sockaddr_of("127.1.2.3", &ss)), 1);
	assert_int_equal(conf_net_match(&c, sockaddr_of("::1", &ss)), 1);
	assert_int_equal(conf_net_match(&c, sockaddr_of("::ffff:127.0.0.1", &ss)), 1);
	assert_int_equal(conf_net_match(&c, sockaddr_of("10.0.0.1", &ss)), 0);
	conf_free(&c);
	if (load_text(&c, MINIMAL "access = { networks = [ \"0.0.0.0/0\" ]; };",
		      err, sizeof(err)) != 0)
		fail_msg("conf_load: %s", err);
	assert_int_equal(conf_net_match(&c, sockaddr_of("203.0.113.9", &ss)), 1);
	assert_int_equal(conf_net_match(&c, sockaddr_of("2001:db8::1", &ss)), 0);
	conf_free(&c);
	if (load_text(&c, MINIMAL "access = { networks = [ ]; };",
		      err, sizeof(err)) != 0)
		fail_msg("conf_load: %s", err);
	assert_int_equal(conf_net_match(&c, sockaddr_of("127.0.0.1", &ss)), 0);
	conf_free(&c);
}

/* conf_restart_changed: the settings SIGHUP cannot apply, named when they change */
static void test_restart_changed(void **state)
{
	static const struct {
		const char *name, *before, *after, *want;
	} rows[] = {
		{"nothing", "limits = { recipients = 5; };", "limits = { recipients = 6; };", ""},
		{"the same, other spacing", "store = { key_ttl = \"2h\"; };",
		 "store = {\n  key_ttl = \"2h\";\n};", ""},
		{"a store setting", "store = { key_ttl = \"2h\"; };", "store = { key_ttl = \"3h\"; };",
		 "store,"},
		{"written where it was the default", "", "hostname = \"a.test\";", "hostname,"},
		{"removed", "keys = { mode = \"shadow\"; };", "", "keys,"},
		{"auth.users, not auth.cache_ttl", "tls = { cert = \"/c\"; key = \"/k\"; };\n"
		 "auth = { users = \"/u\"; cache_ttl = \"1h\"; };",
		 "tls = { cert = \"/c\"; key = \"/k\"; };\nauth = { users = \"/u\"; cache_ttl = \"2h\"; };",
		 ""},
		{"upstream.rate and recipient_rate: SIGHUP applies them",
		 "upstream = { host = \"a\"; rate = 14; };",
		 "upstream = { host = \"a\"; rate = 20; recipient_rate = 50; };", ""},
		{"upstream.rate with another upstream setting", "upstream = { host = \"a\"; };",
		 "upstream = { host = \"a\"; rate = 20; connections = 8; };", "upstream,"},
		{"a route's rate and recipient_rate: SIGHUP applies them",
		 "upstream = { host = \"a\"; };\nroutes = ( { name = \"r\"; auth_user = \"u\";\n"
		 "  upstream = { host = \"b\"; rate = 5; }; } );",
		 "upstream = { host = \"a\"; };\nroutes = ( { name = \"r\"; auth_user = \"u\";\n"
		 "  upstream = { host = \"b\"; rate = 7; recipient_rate = 9; }; } );", ""},
		{"a route's connections", "upstream = { host = \"a\"; };\nroutes = ( { name = \"r\";\n"
		 "  auth_user = \"u\"; upstream = { host = \"b\"; rate = 5; }; } );",
		 "upstream = { host = \"a\"; };\nroutes = ( { name = \"r\";\n"
		 "  auth_user = \"u\"; upstream = { host = \"b\"; rate = 5; connections = 2; }; } );",
		 "routes,"},
		{"a route's rate, and its match", "upstream = { host = \"a\"; };\n"
		 "routes = ( { name = \"r\"; auth_user = \"u\"; upstream = { host = \"b\"; }; } );",
		 "upstream = { host = \"a\"; };\nroutes = ( { name = \"r\"; auth_user = \"v\";\n"
		 "  upstream = { host = \"b\"; rate = 3; }; } );", "routes,"},
		{"several", "upstream = { host = \"a\"; };", "hostname = \"x.test\";\n"
		 "upstream = { host = \"b\"; };\nlisten = ( { address = \"127.0.0.1\"; port = 2600; } );",
		 "hostname,listen,upstream,"},
	};
	const char *names[CONF_RESTART_MAX];
	struct conf a, b;
	char err[512], got[256], before[512], after[512];
	size_t i, k, n;

	(void) state;
	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		/* an upstream is required: the Maildir where a row writes none */
		snprintf(before, sizeof(before), "%s%s", strstr(rows[i].before, "upstream")
			 ? "" : MINIMAL, rows[i].before);
		snprintf(after, sizeof(after), "%s%s", strstr(rows[i].after, "upstream")
			 ? "" : MINIMAL, rows[i].after);
		if (load_text(&a, before, err, sizeof(err)) != 0
		    || load_text(&b, after, err, sizeof(err)) != 0)
			fail_msg("%s: %s", rows[i].name, err);
		n = conf_restart_changed(&a, &b, names, CONF_RESTART_MAX);
		got[0] = 0;
		for (k = 0; k < n; k++)
			snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s,", names[k]);
		if (strcmp(got, rows[i].want) != 0)
			print_error("%s: got \"%s\", want \"%s\"\n", rows[i].name, got, rows[i].want);
		assert_string_equal(got, rows[i].want);
		conf_free(&a);
		conf_free(&b);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_durations),
		cmocka_unit_test(test_sizes),
		cmocka_unit_test_teardown(test_full, cleanup),
		cmocka_unit_test_teardown(test_defaults, cleanup),
		cmocka_unit_test(test_default_text),
		cmocka_unit_test_teardown(test_upstream_trust, cleanup),
		cmocka_unit_test_teardown(test_where, cleanup),
		cmocka_unit_test_teardown(test_errors, cleanup),
		cmocka_unit_test_teardown(test_file_errors, cleanup),
		cmocka_unit_test(test_include),
		cmocka_unit_test(test_free_zeroed),
		cmocka_unit_test_teardown(test_net_match, cleanup),
		cmocka_unit_test_teardown(test_restart_changed, cleanup),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
