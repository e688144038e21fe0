/*
 * NAME
 *	conf 3
 * SUMMARY
 *	load and validate the idemrelay configuration
 * DESCRIPTION
 *	conf_load() parses a libconfig file (or the embedded default) and
 *	walks it group by group. Each group has a table of the names it
 *	knows; anything else is an unknown setting. Values are checked as
 *	they are copied into struct conf, so every diagnostic can point at
 *	the setting that caused it: "FILE:LINE: store.key_ttl: problem".
 *	Checks that involve two groups (listen needs tls, auth needs tls,
 *	upstream needs exactly one destination) run after the groups they
 *	depend on, and point at the setting that makes the demand.
 *
 *	The first problem stops the load: one precise message is more use
 *	to an operator than a cascade caused by the first.
 * DIAGNOSTICS
 *	conf_load() returns 0, or -1 with a one-line message in err and
 *	*c released (still safe to conf_free()).
 */
#include <errno.h>
#include <libconfig.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <strings.h>
#include <unistd.h>

#include "../util/buf.h"
#include "../util/hash.h"
#include "../util/log.h"
#include "conf.h"
#include "conf_int.h"

/* conf_listen - the listen = ( ... ) list */
static int conf_listen(struct conf_ctx *x, struct conf *c,
		       const config_setting_t *root)
{
	static const char *const names[] = {
		"name", "address", "port", "starttls", "tls", "auth", "smtputf8", 0};
	static const char *const starttls_words[] = {"optional", "required", 0};
	static const char *const tls_words[] = {"none", "implicit", 0};
	static const char *const auth_words[] = {"optional", "required", 0};
	config_setting_t *ls = config_setting_get_member(root, "listen");
	int i, j, n;

	if (ls == NULL) {
		c->listen = xcalloc(1, sizeof(*c->listen));
		c->n_listen = 1;
		c->listen[0].address = "127.0.0.1";
		c->listen[0].port = 2525;
		c->listen[0].smtputf8 = 1;
		return 0;
	}
	if (!config_setting_is_list(ls))
		return conf_wrong_type(x, ls, "a list ( { ... }, ... )");
	if ((n = config_setting_length(ls)) == 0)
		return conf_error(x, ls, NULL, "no listeners");
	c->listen = xcalloc(n, sizeof(*c->listen));
	for (i = 0; i < n; i++) {
		config_setting_t *g = config_setting_get_elem(ls, i);
		struct conf_listen *l = &c->listen[i];

		c->n_listen = i + 1;
		l->smtputf8 = 1;	/* as Postfix's smtputf8_enable = yes */
		if (!config_setting_is_group(g))
			return conf_wrong_type(x, g, "a group { ... }");
		if (conf_check_names(x, g, names) < 0
		    || conf_string(x, g, "name", 1, &l->name) < 0
		    || conf_string(x, g, "address", 1, &l->address) < 0
		    || conf_int(x, g, "port", 1, 65535, &l->port) < 0
		    || conf_enum(x, g, "starttls", starttls_words,
				 &l->starttls_required) < 0
		    || conf_enum(x, g, "tls", tls_words, &l->tls_implicit) < 0
		    || conf_enum(x, g, "auth", auth_words, &l->auth_required) < 0
		    || conf_bool(x, g, "smtputf8", &l->smtputf8) < 0)
			return -1;
		if (l->address == NULL)
			return conf_error(x, g, "address", "missing setting");
		if (!conf_numeric_addr(l->address))
			return conf_error(x, g, "address", "not a numeric IP "
					  "address: \"%s\"", l->address);
		if (l->port == 0)
			return conf_error(x, g, "port", "missing setting");
		if (l->starttls_required && l->tls_implicit)
			return conf_error(x, g, "starttls", "makes no sense "
					  "with tls = \"implicit\"");
		if ((l->starttls_required || l->tls_implicit) && !c->tls_cert)
			return conf_error(x, g, l->tls_implicit ? "tls" :
				     "starttls", "requires tls { cert; key; }");
		if (l->auth_required && !c->auth_users)
			return conf_error(x, g, "auth", "requires auth { users; }");
		for (j = 0; j < i; j++)
			if (c->listen[j].port == l->port
			    && strcmp(c->listen[j].address, l->address) == 0)
				return conf_error(x, g, NULL, "duplicate of "
						  "listen[%d]", j);
		for (j = 0; l->name && j < i; j++)
			if (c->listen[j].name && strcmp(c->listen[j].name, l->name) == 0)
				return conf_error(x, g, "name", "\"%s\" names listen[%d] too",
						  l->name, j);
	}
	return 0;
}

/* conf_networks - access = { networks = [ ... ]; } */
static int conf_networks(struct conf_ctx *x, struct conf *c,
			 const config_setting_t *root)
{
	static const char *const names[] = {"networks", 0};
	static const char *const def[] = {"127.0.0.0/8", "::1/128"};
	config_setting_t *g, *a = NULL;
	int i, n;

	if (conf_group(x, root, "access", names, &g) < 0
	    || conf_strings(x, g, "networks", &a) < 0)
		return -1;
	n = a ? config_setting_length(a) : 2;
	c->networks = xcalloc(n, sizeof(*c->networks));
	for (i = 0; i < n; i++) {
		const char *v = a ? config_setting_get_string_elem(a, i) : def[i];
		const char *why;

		if (conf_parse_net(v, &c->networks[i], &why) < 0)
			return conf_error(x, config_setting_get_elem(a, i),
					  NULL, "%s \"%s\"", why, v);
		c->n_networks = i + 1;
	}
	return 0;
}

/* conf_field_name - RFC 5322 field-name: 1*(%d33-57 / %d59-126) */
static int conf_field_name(const char *v)
{
	const unsigned char *p = (const unsigned char *) v;

	if (*p == 0 || strlen(v) > 200)
		return 0;
	for (; *p; p++)
		if (*p < 33 || *p > 126 || *p == ':')
			return 0;
	return 1;
}

/* conf_keys - keys = { ... } */
static int conf_keys(struct conf_ctx *x, struct conf *c,
		     const config_setting_t *root)
{
	static const char *const names[] = {"headers", "mode", "message_id",
		"envid", "require", "strip_header", "scope", "on_mismatch", 0};
	static const char *const mode_words[] = {"enforce", "shadow", 0};
	static const char *const scope_words[] = {"global", "user", 0};
	static const char *const mismatch_words[] = {"reject", "accept", 0};
	static const char *const def[] = {"X-Idempotency-Key", "Idempotency-Key"};
	config_setting_t *g, *a = NULL;
	int i, j, n;

	if (conf_group(x, root, "keys", names, &g) < 0
	    || conf_strings(x, g, "headers", &a) < 0
	    || conf_enum(x, g, "mode", mode_words, &c->keys.shadow) < 0
	    || conf_bool(x, g, "message_id", &c->keys.message_id) < 0
	    || conf_bool(x, g, "envid", &c->keys.envid) < 0
	    || conf_bool(x, g, "require", &c->keys.require) < 0
	    || conf_bool(x, g, "strip_header", &c->keys.strip_header) < 0
	    || conf_enum(x, g, "scope", scope_words, &c->keys.scope_user) < 0
	    || conf_enum(x, g, "on_mismatch", mismatch_words,
			 &c->keys.mismatch_accept) < 0)
		return -1;
	n = a ? config_setting_length(a) : 2;
	c->keys.headers = xcalloc(n, sizeof(*c->keys.headers));
	for (i = 0; i < n; i++) {
		const char *v = a ? config_setting_get_string_elem(a, i) : def[i];

		if (!conf_field_name(v))
			return conf_error(x, config_setting_get_elem(a, i), NULL,
					  "bad header name \"%s\"", v);
		/* header names are case-insensitive: one named twice is a typo or a paste */
		for (j = 0; j < i; j++)
			if (strcasecmp(c->keys.headers[j], v) == 0)
				return conf_error(x, config_setting_get_elem(a, i), NULL,
						  "\"%s\" repeats keys.headers[%d] \"%s\": "
						  "remove one", v, j, c->keys.headers[j]);
		c->keys.headers[i] = v;
		c->keys.n_headers = i + 1;
	}
	return 0;
}

/*
 * conf_upstream_trust - tls_ca, tls_servername, tls_fingerprint: how the
 * upstream's certificate is trusted. Pins replace the chain check (as
 * Postfix's "fingerprint" level), so they need verification on.
 */
static int conf_upstream_trust(struct conf_ctx *x, struct conf_upstream *u,
			       const config_setting_t *g)
{
	config_setting_t *a = NULL;
	int i, n;

	if (conf_string(x, g, "tls_ca", 0, &u->tls_ca) < 0
	    || conf_string(x, g, "tls_servername", 1, &u->tls_servername) < 0
	    || conf_strings(x, g, "tls_fingerprint", &a) < 0)
		return -1;
	if (u->tls_servername && strlen(u->tls_servername) > 253)
		return conf_error(x, g, "tls_servername", "longer than 253 characters");
	if (a == NULL)
		return 0;
	if ((n = config_setting_length(a)) == 0)
		return conf_error(x, a, NULL, "empty list");
	u->tls_fingerprint = xcalloc(n, sizeof(*u->tls_fingerprint));
	for (i = 0; i < n; i++) {
		const char *v = config_setting_get_string_elem(a, i);

		/* "sha256:HEX", 64 digits, pairs may be colon-separated */
		if (strncasecmp(v, "sha256:", 7) != 0
		    || hash_unhex(v + 7, u->tls_fingerprint[i], 32) < 0)
			return conf_error(x, config_setting_get_elem(a, i), NULL,
					  "bad fingerprint \"%s\" (want sha256: and 64 "
					  "hex digits)", v);
		u->n_tls_fingerprint = i + 1;
	}
	return 0;
}

/*
 * conf_upstream_group - upstream = { host; port | hosts | maildir; ... }
 * in parent: the default's (route 0, parent the root) or a route's
 * (route 1: neither maildir nor ambiguous, which are the default's alone)
 */
int conf_upstream_group(struct conf_ctx *x, struct conf_upstream *u,
			const config_setting_t *parent, int route)
{
	/* a route takes them all but the first two, the default's alone */
	static const char *const names[] = {"maildir", "ambiguous", "host", "port", "hosts",
		"tls", "tls_verify", "tls_ca", "tls_servername", "tls_fingerprint",
		"user", "password", "connections", "rate", "recipient_rate", "timeout", 0};
	/* in enum conf_tls order */
	static const char *const tls_words[] = {"none", "starttls", "implicit", 0};
	static const char *const amb_words[] = {"assume-delivered", "retry", 0};
	/* what needs TLS: the trust settings, and credentials, never sent in clear */
	static const char *const tls_names[] = {"tls_ca", "tls_servername",
		"tls_fingerprint", "user", 0};
	config_setting_t *g, *s, *a = NULL;
	const char *host = NULL;
	int tls = CONF_TLS_NONE, port = 0, i, n;

	u->tls = CONF_TLS_NONE;
	u->tls_verify = 1;
	u->connections = 4;
	u->timeout = 5 * 60;
	if ((n = conf_group(x, parent, "upstream", route ? names + 2 : names, &g)) < 0)
		return -1;
	if (n == 0)
		return conf_error(x, route ? parent : NULL, "upstream", route ? "missing setting"
				  : "missing (needs host, hosts or maildir)");
	if (conf_string(x, g, "host", 1, &host) < 0
	    || conf_int(x, g, "port", 1, 65535, &port) < 0
	    || conf_strings(x, g, "hosts", &a) < 0
	    || conf_string(x, g, "maildir", 0, &u->maildir) < 0
	    || conf_enum(x, g, "tls", tls_words, &tls) < 0
	    || conf_bool(x, g, "tls_verify", &u->tls_verify) < 0
	    || conf_upstream_trust(x, u, g) < 0
	    || conf_string(x, g, "user", 0, &u->user) < 0
	    || conf_string(x, g, "password", 0, &u->password) < 0
	    || conf_int(x, g, "connections", 1, 1000,
			&u->connections) < 0
	    || conf_int(x, g, "rate", 0, 1000000, &u->rate) < 0
	    || conf_int(x, g, "recipient_rate", 0, 1000000, &u->recipient_rate) < 0
	    || conf_duration(x, g, "timeout", 1, &u->timeout) < 0
	    || conf_enum(x, g, "ambiguous", amb_words,
			 &u->ambiguous_retry) < 0)
		return -1;
	u->tls = tls;
	if ((host != NULL) + (a != NULL) + (u->maildir != NULL) != 1)
		return conf_error(x, g, NULL, route ? "needs exactly one of host or hosts"
				  : "needs exactly one of host, hosts or maildir");
	if (port && host == NULL && a == NULL)
		return conf_error(x, g, "port", "only with host or hosts");
	if ((u->rate || u->recipient_rate) && u->maildir)
		return conf_error(x, g, u->rate ? "rate" : "recipient_rate",
				  "only with host or hosts");
	if ((u->user != NULL) != (u->password != NULL))
		return conf_error(x, g, u->user ? "password" : "user",
				  "missing setting (user and password go together)");
	for (i = 0; tls == CONF_TLS_NONE && tls_names[i]; i++)
		if ((s = config_setting_get_member(g, tls_names[i])) != NULL)
			return conf_error(x, s, NULL, "requires tls = \"starttls\" or \"implicit\"");
	if (!u->tls_verify && (u->tls_ca || u->n_tls_fingerprint))
		return conf_error(x, config_setting_get_member(g, u->tls_ca ? "tls_ca" :
				  "tls_fingerprint"), NULL, "makes no sense with tls_verify = false");
	if (port == 0)
		port = tls == CONF_TLS_IMPLICIT ? CONF_SMTPS_PORT : CONF_SMTP_PORT;
	if (host != NULL) {		/* a copy, as the list's are parsed */
		u->hosts = xcalloc(1, sizeof(*u->hosts));
		u->hosts[0] = (struct conf_upstream_host) { xstrdup(host), port };
		u->n_hosts = 1;
		return 0;
	}
	if (a == NULL)
		return 0;			/* a Maildir's group has no host */
	if ((n = config_setting_length(a)) == 0)
		return conf_error(x, a, NULL, "empty list");
	u->hosts = xcalloc(n, sizeof(*u->hosts));
	for (i = 0; i < n; i++) {
		const char *v = config_setting_get_string_elem(a, i);

		u->n_hosts = i + 1;
		if (conf_parse_hostport(v, port, &u->hosts[i]) < 0)
			return conf_error(x, config_setting_get_elem(a, i), NULL,
					  "bad host[:port] \"%s\"", v);
	}
	return 0;
}

/* conf_limits - limits = { ... } */
static int conf_limits(struct conf_ctx *x, struct conf *c,
		       config_setting_t *root)
{
	static const char *const names[] = {"message_size", "recipients",
		"connections", "command_timeout", "data_timeout", "bare_lf",
		"min_data_rate", "stress_timeout", "data_memory", "hard_errors",
		"junk_commands", "client_connections", "client_connection_rate",
		"client_auth_rate", "client_ipv6_prefix", "long_lines", "nul", 0};
	static const char *const lf_words[] = {"normalize", "reject", 0};
	static const char *const long_words[] = {"fold", "reject", "pass", 0};	/* enum order */
	static const char *const nul_words[] = {"reject", "pass", 0};
	config_setting_t *g;

	if (conf_group(x, root, "limits", names, &g) < 0
	    || conf_size(x, g, "message_size", 1, &c->limits.message_size) < 0
	    || conf_int(x, g, "recipients", 1, 100000, &c->limits.recipients) < 0
	    || conf_int(x, g, "connections", 1, 1000000,
			&c->limits.connections) < 0
	    || conf_duration(x, g, "command_timeout", 1,
			     &c->limits.command_timeout) < 0
	    || conf_duration(x, g, "data_timeout", 1,
			     &c->limits.data_timeout) < 0
	    || conf_enum(x, g, "bare_lf", lf_words, &c->limits.bare_lf_reject) < 0
	    || conf_enum(x, g, "long_lines", long_words, &c->limits.long_lines) < 0
	    || conf_enum(x, g, "nul", nul_words, &c->limits.nul_pass) < 0
	    || conf_int(x, g, "min_data_rate", 0, 1000000000, &c->limits.min_data_rate) < 0
	    || conf_duration(x, g, "stress_timeout", 1, &c->limits.stress_timeout) < 0
	    || conf_size(x, g, "data_memory", 1, &c->limits.data_memory) < 0
	    || conf_int(x, g, "hard_errors", 1, 1000000, &c->limits.hard_errors) < 0
	    || conf_int(x, g, "junk_commands", 1, 1000000, &c->limits.junk_commands) < 0
	    || conf_int(x, g, "client_connections", 0, 1000000,
			&c->limits.client_connections) < 0
	    || conf_int(x, g, "client_connection_rate", 0, 1000000000,
			&c->limits.client_connection_rate) < 0
	    || conf_int(x, g, "client_auth_rate", 0, 1000000000,
			&c->limits.client_auth_rate) < 0
	    || conf_int(x, g, "client_ipv6_prefix", 1, 128, &c->limits.client_ipv6_prefix) < 0)
		return -1;
	/* a message bigger than the whole store could never be accepted */
	if (c->store.backend == CONF_STORE_LMDB && c->limits.message_size >= c->store.map_size) {
		config_setting_t *s;

		if ((s = config_setting_lookup(root, "limits.message_size")) != NULL)
			return conf_error(x, s, NULL, "must be smaller than "
					  "store.map_size");
		return conf_error(x, config_setting_lookup(root, "store.map_size"),
				  NULL, "must be larger than limits.message_size");
	}
	return 0;
}

/*
 * conf_store_map - a map the daemon can start with: one mmap of map_size
 * must fit the address space (and RLIMIT_AS), and the ceiling is no
 * lower than the start
 */
static int conf_store_map(struct conf_ctx *x, const struct conf *c, config_setting_t *g)
{
	/* x86-64 and arm64 give a process 128 TiB; a 32-bit one a few GB at most */
	uint64_t space = sizeof(void *) >= 8 ? 1ULL << 47 : 1ULL << 31;
	struct rlimit rl;

	if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
	    && (uint64_t) rl.rlim_cur < space)
		space = (uint64_t) rl.rlim_cur;
	if (c->store.map_size >= space)
		return conf_error(x, g, "map_size", "%llu bytes do not fit this process's"
				  " address space (%llu bytes)",
				  (unsigned long long) c->store.map_size,
				  (unsigned long long) space);
	if (c->store.map_size_max != 0 && c->store.map_size_max < c->store.map_size)
		return conf_error(x, g, "map_size_max", "must be at least store.map_size");
	return 0;
}

/*
 * conf_commit_wait - store.commit_wait, at most half of store.lease: a
 * message voided when the hold runs out is still under the lease its
 * acceptance took, so that no other node can have taken it before
 * (store/pg/store_pg_wait.c). Unset: 15s, or half the lease if shorter.
 */
static int conf_commit_wait(struct conf_ctx *x, struct conf *c, config_setting_t *g)
{
	if (g == NULL || config_setting_get_member(g, "commit_wait") == NULL) {
		c->store.commit_wait = c->store.lease / 2 < 15 ? c->store.lease / 2 : 15;
		if (c->store.commit_wait < 1)
			c->store.commit_wait = 1;
		return 0;
	}
	if (2 * c->store.commit_wait > c->store.lease)
		return conf_error(x, g, "commit_wait", "at most half of store.lease (%llds)",
				  (long long) c->store.lease);
	return 0;
}

/*
 * conf_store_backend - what the chosen backend needs, and nothing of the
 * other's: a url only for postgresql, the map settings checked for lmdb
 */
static int conf_store_backend(struct conf_ctx *x, struct conf *c, config_setting_t *g)
{
	if (c->store.backend == CONF_STORE_POSTGRESQL) {
		if (c->store.url == NULL)
			return conf_error(x, g, "backend", "\"postgresql\" needs store.url");
		return conf_commit_wait(x, c, g);
	}
	if (c->store.url != NULL)
		return conf_error(x, g, "url", "only with backend = \"postgresql\"");
	if (g != NULL && config_setting_get_member(g, "lease") != NULL)
		return conf_error(x, g, "lease", "only with backend = \"postgresql\"");
	if (g != NULL && config_setting_get_member(g, "commit_wait") != NULL)
		return conf_error(x, g, "commit_wait", "only with backend = \"postgresql\"");
	return conf_store_map(x, c, g);
}

/* conf_defaults - every non-string default from conf.h */
static void conf_defaults(struct conf *c)
{
	c->store.map_size = 1ULL << 30;
	c->store.key_ttl = 24 * 3600;
	c->store.lease = 30;
	c->store.commit_wait = 15;	/* at most half the lease: conf_commit_wait() */
	c->keys.message_id = 1;
	c->keys.envid = 1;
	c->keys.strip_header = 1;
	c->keys.scope_user = 1;
	c->retry.first = 60;
	c->retry.max = 3600;
	c->retry.give_up = 5 * 86400;
	c->limits.message_size = 25ULL << 20;
	c->limits.recipients = 100;
	c->limits.connections = 1000;
	c->limits.command_timeout = 5 * 60;
	c->limits.data_timeout = 10 * 60;
	c->limits.min_data_rate = 500;		/* Postfix's smtpd_min_data_rate */
	c->limits.stress_timeout = 10;		/* Postfix's ${stress?10} */
	c->limits.data_memory = 64ULL << 20;
	c->limits.hard_errors = 20;		/* Postfix's smtpd_hard_error_limit */
	c->limits.junk_commands = 100;		/* Postfix's smtpd_junk_command_limit */
	c->limits.client_connections = 50;	/* smtpd_client_connection_count_limit */
	c->limits.client_ipv6_prefix = 64;
	c->auth_cache_ttl = 3600;		/* Dovecot's auth_cache_ttl */
	c->log.level = LOG_LEVEL_INFO;
}

/* conf_walk - validate the parsed tree into c */
static int conf_walk(struct conf_ctx *x, struct conf *c, config_setting_t *root)
{
	static const char *const top[] = {"hostname", "node", "user", "control",
		"metrics", "listen", "tls", "auth", "access", "store", "keys",
		"upstream", "routes", "retry", "limits", "log", 0};
	static const char *const metrics_names[] = {"address", "port", 0};
	static const char *const tls_names[] = {"cert", "key", "groups", 0};
	static const char *const auth_names[] = {"users", "cache_ttl", 0};
	static const char *const store_names[] = {"backend", "url", "lease", "commit_wait",
		"path", "map_size", "map_size_max", "key_ttl", 0};
	static const char *const backend_words[] = {"lmdb", "postgresql", 0};
	static const char *const retry_names[] = {"first", "max", "give_up", 0};
	static const char *const log_names[] = {"level", "target", 0};
	static const char *const level_words[] = {"debug", "info", "warn",
		"error", 0};
	static const char *const target_words[] = {"stderr", "syslog", 0};
	config_setting_t *g;

	conf_defaults(c);
	if (conf_check_names(x, root, top) < 0
	    || conf_string(x, root, "hostname", 1, &c->hostname) < 0
	    || conf_string(x, root, "node", 1, &c->node) < 0
	    || conf_string(x, root, "user", 1, &c->user) < 0
	    || conf_string(x, root, "control", 0, &c->control) < 0)
		return -1;

	if (conf_group(x, root, "metrics", metrics_names, &g) < 0
	    || conf_string(x, g, "address", 1, &c->metrics_address) < 0
	    || conf_int(x, g, "port", 1, 65535, &c->metrics_port) < 0)
		return -1;
	if (g != NULL && c->metrics_port == 0)
		return conf_error(x, g, "port", "missing setting");
	if (g != NULL && c->metrics_address == NULL)
		c->metrics_address = "127.0.0.1";
	if (c->metrics_address && !conf_numeric_addr(c->metrics_address))
		return conf_error(x, g, "address", "not a numeric IP address: "
				  "\"%s\"", c->metrics_address);

	if (conf_group(x, root, "tls", tls_names, &g) < 0
	    || conf_string(x, g, "cert", 0, &c->tls_cert) < 0
	    || conf_string(x, g, "key", 0, &c->tls_key) < 0
	    || conf_string(x, g, "groups", 1, &c->tls_groups) < 0)
		return -1;
	if (g != NULL && (c->tls_cert == NULL || c->tls_key == NULL))
		return conf_error(x, g, c->tls_cert ? "key" : "cert",
				  "missing setting");

	/* AUTH is only ever offered over TLS: users without TLS is a mistake */
	if (conf_group(x, root, "auth", auth_names, &g) < 0
	    || conf_string(x, g, "users", 0, &c->auth_users) < 0
	    || conf_duration(x, g, "cache_ttl", 0, &c->auth_cache_ttl) < 0)
		return -1;
	if (g != NULL && c->auth_users == NULL)
		return conf_error(x, g, "users", "missing setting");
	if (c->auth_users && c->tls_cert == NULL)
		return conf_error(x, config_setting_get_member(g, "users"), NULL,
				  "AUTH needs tls { cert; key; }");

	if (conf_listen(x, c, root) < 0 || conf_networks(x, c, root) < 0)
		return -1;

	if (conf_group(x, root, "store", store_names, &g) < 0
	    || conf_enum(x, g, "backend", backend_words, &c->store.backend) < 0
	    || conf_string(x, g, "url", 0, &c->store.url) < 0
	    || conf_duration(x, g, "lease", 1, &c->store.lease) < 0
	    || conf_duration(x, g, "commit_wait", 1, &c->store.commit_wait) < 0
	    || conf_string(x, g, "path", 0, &c->store.path) < 0
	    || conf_size(x, g, "map_size", 1, &c->store.map_size) < 0
	    || conf_size(x, g, "map_size_max", 1, &c->store.map_size_max) < 0
	    || conf_duration(x, g, "key_ttl", 1, &c->store.key_ttl) < 0
	    || conf_store_backend(x, c, g) < 0)
		return -1;
	if (c->store.path == NULL)
		c->store.path = "var/store";

	if (conf_keys(x, c, root) < 0 || conf_upstream_group(x, &c->upstream, root, 0) < 0
	    || conf_routes(x, c, root) < 0)
		return -1;

	if (conf_group(x, root, "retry", retry_names, &g) < 0
	    || conf_duration(x, g, "first", 1, &c->retry.first) < 0
	    || conf_duration(x, g, "max", 1, &c->retry.max) < 0
	    || conf_duration(x, g, "give_up", 1, &c->retry.give_up) < 0)
		return -1;
	if (c->retry.max < c->retry.first)
		return conf_error(x, g, "max", "shorter than retry.first");

	if (conf_limits(x, c, root) < 0)
		return -1;

	if (conf_group(x, root, "log", log_names, &g) < 0
	    || conf_enum(x, g, "level", level_words, &c->log.level) < 0
	    || conf_enum(x, g, "target", target_words, &c->log.syslog) < 0)
		return -1;

	if (c->hostname == NULL) {
		if (gethostname(c->host, sizeof(c->host)) < 0 || c->host[0] == 0)
			strcpy(c->host, "localhost");
		c->host[sizeof(c->host) - 1] = 0;
		c->hostname = c->host;
	}
	if (c->node == NULL)
		c->node = c->hostname;
	return 0;
}

/* conf_where - "FILE:LINE: name" as written, or "FILE: name (default)" */
const char *conf_where(const struct conf *c, const char *name, char *out, size_t len)
{
	struct conf_ctx x = {c->file ? c->file : CONF_DEFAULT_NAME, c->dir, NULL, 0};
	struct buf path = BUF_INIT, file = BUF_INIT;
	const config_setting_t *s;
	const char *p;

	for (p = name; *p; p++)		/* libconfig 1.5 finds listen[0] as "listen.[0]" */
		buf_printf(&path, "%s%c", *p == '[' ? "." : "", *p);
	s = c->tree && path.data ? config_lookup(c->tree, path.data) : NULL;
	conf_file_name(&x, s ? config_setting_source_file(s) : NULL, &file);
	if (s)
		snprintf(out, len, "%s:%u: %s", file.data, config_setting_source_line(s), name);
	else
		snprintf(out, len, "%s: %s (default)", file.data, name);
	buf_free(&path);
	buf_free(&file);
	return out;
}

/*
 * What SIGHUP applies is access.networks, limits, retry, log,
 * auth.cache_ttl, and the upstream groups' rates (conf_reloadable_member();
 * and the certificate and users files read again); the
 * rest takes a restart, as master.cf's changes take postfix reload. Each
 * of these is compared by a digest of what the two files wrote, so that a
 * reload can say which changed instead of ignoring them without a word.
 */
static const char *const restart_settings[] = {"hostname", "node", "user", "control",
	"metrics", "listen", "tls", "auth.users", "store", "keys", "upstream", "routes", 0};
_Static_assert(sizeof(restart_settings) / sizeof(*restart_settings) - 1
	       <= CONF_RESTART_MAX, "conf.h's CONF_RESTART_MAX counts restart_settings[]");

/*
 * conf_reloadable_member - is s an upstream group's rate or recipient_rate,
 * which SIGHUP applies inside the restart-only upstream and routes
 * (deliver_reload)? The tree is checked by then: a group named upstream
 * is the default's or a route's.
 */
static int conf_reloadable_member(const config_setting_t *s)
{
	const config_setting_t *g = config_setting_parent(s);
	const char *name = config_setting_name(s);

	return name && (strcmp(name, "rate") == 0 || strcmp(name, "recipient_rate") == 0)
	    && g && config_setting_name(g) && strcmp(config_setting_name(g), "upstream") == 0;
}

/* conf_digest - FNV-1a of a setting as written: names, types, values, in order */
static uint64_t conf_digest(const config_setting_t *s, uint64_t h)
{
	const char *name = config_setting_name(s), *str;
	char num[64];
	int i, n, type = config_setting_type(s);

	h = hash_fnv(h, name ? name : "", name ? strlen(name) + 1 : 1);
	h = hash_fnv(h, &type, sizeof(type));
	switch (type) {
	case CONFIG_TYPE_GROUP:
	case CONFIG_TYPE_ARRAY:
	case CONFIG_TYPE_LIST:
		n = config_setting_length(s);
		for (i = 0; i < n; i++)
			if (!conf_reloadable_member(config_setting_get_elem(s, (unsigned) i)))
				h = conf_digest(config_setting_get_elem(s, (unsigned) i), h);
		break;
	case CONFIG_TYPE_STRING:
		str = config_setting_get_string(s);
		h = hash_fnv(h, str, strlen(str) + 1);
		break;
	case CONFIG_TYPE_FLOAT:
		snprintf(num, sizeof(num), "%.17g", config_setting_get_float(s));
		h = hash_fnv(h, num, strlen(num));
		break;
	default:			/* int, int64, bool */
		snprintf(num, sizeof(num), "%lld", config_setting_get_int64(s));
		h = hash_fnv(h, num, strlen(num));
		break;
	}
	return h;
}

/* conf_written - the digest of what c's file wrote for a setting; 0: nothing */
static uint64_t conf_written(const struct conf *c, const char *name)
{
	const config_setting_t *s = c->tree ? config_lookup(c->tree, name) : NULL;

	return s ? conf_digest(s, HASH_FNV_INIT) | 1 : 0;
}

/* conf_restart_changed - the restart-only settings that differ, by name */
size_t conf_restart_changed(const struct conf *old, const struct conf *nw,
			    const char **names, size_t max)
{
	size_t i, n = 0;

	for (i = 0; restart_settings[i]; i++)
		if (conf_written(old, restart_settings[i]) != conf_written(nw, restart_settings[i])
		    && n < max)
			names[n++] = restart_settings[i];
	return n;
}

/*
 * conf_include_error - libconfig says only "cannot open include file": find
 * the @include on that line of that file, and say which file and why
 */
static int conf_include_error(const char *file, int line, const char *dir, char *out,
			      size_t len)
{
	char text[1024], path[1024], *q, *end;
	FILE *fp;
	int n = 0;

	if ((fp = fopen(file, "r")) == NULL)
		return -1;
	while (fgets(text, sizeof(text), fp) && ++n < line)
		;
	fclose(fp);
	if (n != line || (q = strstr(text, "@include")) == NULL || (q = strchr(q, '"')) == NULL
	    || (end = strchr(++q, '"')) == NULL)
		return -1;
	*end = 0;
	if (*q != '/' && dir)
		snprintf(path, sizeof(path), "%s/%s", dir, q);
	else
		snprintf(path, sizeof(path), "%s", q);
	snprintf(out, len, "cannot open include file %s: %s", path,
		 access(path, R_OK) < 0 ? strerror(errno) : "not a readable file");
	return 0;
}

/* conf_load - load and validate; path NULL means the embedded default */
int     conf_load(struct conf *c, const char *path, char *err, size_t errlen)
{
	struct conf_ctx x = {path ? path : CONF_DEFAULT_NAME, NULL, err, errlen};
	struct buf file = BUF_INIT;
	char   *dir = NULL, *slash;
	const char *text;
	config_t *cfg = xmalloc(sizeof(*cfg));
	char    why[1200];
	struct stat st;
	int     ok, rc = -1;

	memset(c, 0, sizeof(*c));
	if (errlen > 0)
		err[0] = 0;
	config_init(cfg);
	if (path == NULL) {
		ok = config_read_string(cfg, conf_default_text);
	} else {
		/* @include "x" is relative to the including file, not the cwd */
		dir = xstrdup(path);
		if ((slash = strrchr(dir, '/')) != NULL) {
			slash[slash == dir] = 0;
			config_set_include_dir(cfg, dir);
			x.dir = dir;
		}
		ok = config_read_file(cfg, path);
	}
	if (!ok && config_error_type(cfg) == CONFIG_ERR_FILE_IO) {	/* fopen()'s errno */
		/* a directory opens, and libconfig refuses it without an errno */
		if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
			errno = EISDIR;
		conf_error(&x, NULL, NULL, "cannot open: %s", strerror(errno));
		goto fail;
	}
	if (!ok) {
		/* libconfig's own text is often just "syntax error": say it once */
		text = config_error_text(cfg) ? config_error_text(cfg) : "";
		if (strcmp(text, "syntax error") == 0)
			text = "";
		conf_file_name(&x, config_error_file(cfg), &file);
		if (strcmp(text, "cannot open include file") == 0
		    && conf_include_error(file.data, config_error_line(cfg), x.dir, why,
					  sizeof(why)) == 0) {
			snprintf(err, errlen, "%s:%d: %s", file.data, config_error_line(cfg), why);
			goto fail;
		}
		snprintf(err, errlen, "%s:%d: syntax error%s%s", file.data,
			 config_error_line(cfg), *text ? ": " : "", text);
		goto fail;
	}
	if (conf_walk(&x, c, config_root_setting(cfg)) < 0)
		goto fail;
	c->file = xstrdup(x.file);
	c->dir = x.dir ? xstrdup(x.dir) : NULL;
	c->tree = cfg;			/* conf_where() reads it */
	cfg = NULL;
	rc = 0;

fail:
	if (cfg)
		config_destroy(cfg);
	free(cfg);
	free(dir);
	buf_free(&file);
	if (rc < 0)
		conf_free(c);
	return rc;
}

/* conf_free - release everything; safe on a zeroed or half-loaded struct */
void    conf_free(struct conf *c)
{
	size_t  i;

	if (c == NULL)
		return;
	if (c->tree)
		config_destroy(c->tree);
	free(c->tree);
	free(c->file);
	free(c->dir);
	free(c->listen);
	free(c->networks);
	free(c->keys.headers);
	conf_upstream_free(&c->upstream);
	for (i = 0; i < c->n_routes; i++)
		conf_upstream_free(&c->routes[i].up);
	free(c->routes);
	memset(c, 0, sizeof(*c));
}
