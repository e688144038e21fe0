/*
 * NAME
 *	conf 3h
 * SUMMARY
 *	idemrelay configuration: libconfig file -> validated struct conf
 * DESCRIPTION
 *	conf_load() reads a libconfig file (or, with path NULL, the embedded
 *	default text), applies defaults for everything not given, and checks
 *	every value. Unknown settings and bad values are errors naming the
 *	file, line and setting, e.g.
 *	    "conf/x.conf:12: store.key_ttl: bad duration \"5 parsecs\"".
 *	Durations are kept in seconds, sizes in bytes.
 *	Its strings are those of the parsed tree it keeps; conf_free() frees it.
 */
#ifndef CONF_CONF_H
#define CONF_CONF_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

enum conf_tls { CONF_TLS_NONE, CONF_TLS_STARTTLS, CONF_TLS_IMPLICIT };
enum conf_backend { CONF_STORE_LMDB, CONF_STORE_POSTGRESQL };
/* limits.long_lines: lines over 998 octets folded, refused, or relayed as they are */
enum conf_long_lines { CONF_LONG_LINES_FOLD, CONF_LONG_LINES_REJECT, CONF_LONG_LINES_PASS };

struct conf_listen {
	const char *name;	/* NULL: none; for routes' listener */
	const char *address;	/* numeric IPv4/IPv6 address */
	int port;
	int starttls_required;	/* starttls = "required" */
	int tls_implicit;	/* tls = "implicit" */
	int auth_required;	/* auth = "required" */
	int smtputf8;		/* smtputf8 = true (default): offer SMTPUTF8 */
};

struct conf_net {
	int family;		/* AF_INET or AF_INET6 */
	uint8_t addr[16];	/* network address, host bits cleared */
	int prefix;		/* prefix length in bits */
};

struct conf_upstream_host {
	char *host;
	int port;
};

/*
 * an upstream group: the top-level upstream (the default), or a route's
 * (no maildir, no ambiguous there: those are the default's alone)
 */
struct conf_upstream {
	struct conf_upstream_host *hosts;	/* host+port or hosts[] */
	size_t n_hosts;
	const char *maildir;	/* set: deliver into this Maildir */
	enum conf_tls tls;	/* default none */
	int tls_verify;		/* default 1 */
	const char *tls_ca;	/* CA file or hashed directory; NULL: system store */
	const char *tls_servername;	/* name to verify and send (SNI); NULL: host */
	uint8_t (*tls_fingerprint)[32];	/* SHA-256 pins, certificate or SPKI */
	size_t n_tls_fingerprint;	/* set: a matching pin is all that counts */
	const char *user, *password;
	int connections;	/* default 4 */
	int rate;		/* messages a second, the cluster's; default 0: none */
	int recipient_rate;	/* recipients a second, the same; default 0: none */
	int64_t timeout;	/* seconds, default 5m */
	int ambiguous_retry;	/* ambiguous = "retry" (default assume-delivered) */
};

/*
 * routes = ( { name; auth_user; sender; sender_domain; listener; upstream } ):
 * a route matches when every one of its match settings does
 */
struct conf_route {
	const char *name;	/* what a message stores and the log shows */
	const char *auth_user;	/* NULL: any (and a message without AUTH too) */
	const char *sender;	/* NULL: any; the whole address, case-insensitive */
	const char *sender_domain;	/* NULL: any; the sender's domain, case-insensitive */
	int listener;		/* index into listen[] (its name); -1: any */
	struct conf_upstream up;
};

/* the settings SIGHUP cannot apply (conf.c's restart_settings[]) */
#define CONF_RESTART_MAX 13

struct conf {
	char *file;		/* the file loaded; "<default>" for the embedded text */
	char *dir;		/* its folder, where its @includes are; NULL: the cwd */
	void *tree;		/* owned: libconfig's config_t as loaded: the strings, conf_where */

	const char *hostname;	/* default: gethostname(), into host */
	const char *node;	/* this node's name in a shared store; default: hostname */
	const char *user;	/* NULL: no privilege drop */
	const char *control;	/* NULL: no control socket */
	const char *metrics_address;	/* NULL: no metrics listener */
	int metrics_port;
	char host[256];		/* this host's name, when hostname is not set */

	struct conf_listen *listen;	/* default: one, 127.0.0.1:2525 */
	size_t n_listen;

	const char *tls_cert, *tls_key;	/* NULL: no TLS */
	const char *tls_groups;		/* key exchange groups; NULL: tls.c's default */
	const char *auth_users;		/* NULL: no AUTH */
	int64_t auth_cache_ttl;		/* seconds a success is remembered, default 1h; 0: never */

	struct conf_net *networks;	/* default: 127.0.0.0/8, ::1/128 */
	size_t n_networks;

	struct {
		int backend;		/* enum conf_backend, default lmdb */
		const char *url;	/* postgresql: the libpq connection string */
		int64_t lease;		/* postgresql: seconds a delivery lease lasts, default 30 */
		int64_t commit_wait;	/* postgresql: seconds a reply is held while its commit
					 * waits for replication, default 15, at most lease / 2 */
		const char *path;	/* default "var/store" */
		uint64_t map_size;	/* default 1G: where the map starts */
		uint64_t map_size_max;	/* how far it grows; default 0: as far as the disk */
		int64_t key_ttl;	/* seconds, default 24h */
	} store;

	struct {
		const char **headers;	/* default X-Idempotency-Key, Idempotency-Key */
		size_t n_headers;
		int shadow;		/* mode = "shadow" (default "enforce") */
		int message_id;		/* default 1 */
		int envid;		/* default 1 */
		int require;		/* default 0 */
		int strip_header;	/* default 1 */
		int scope_user;		/* scope = "user" (default) vs "global" */
		int mismatch_accept;	/* on_mismatch = "accept" (default "reject") */
	} keys;

	struct conf_upstream upstream;	/* the default upstream group */
	struct conf_route *routes;	/* routes = ( ... ), in order: the first match wins */
	size_t n_routes;

	struct conf_retry {
		int64_t first, max, give_up;	/* seconds, default 1m, 1h, 5d */
	} retry;

	struct {
		uint64_t message_size;	/* default 25M */
		int recipients;		/* default 100 */
		int connections;	/* default 1000 */
		int64_t command_timeout;	/* default 5m */
		int64_t data_timeout;	/* default 10m */
		int min_data_rate;	/* octets/s a message must keep up, 0: off; default 500 */
		int64_t stress_timeout;	/* both timeouts' cap under stress, default 10s */
		uint64_t data_memory;	/* message octets held across sessions, default 64M */
		int bare_lf_reject;	/* bare_lf = "reject" (default normalize) */
		int long_lines;		/* enum conf_long_lines, default fold */
		int nul_pass;		/* nul = "pass" (default reject) */
		int hard_errors;	/* 4xx/5xx replies before 421, default 20 */
		int junk_commands;	/* NOOP RSET VRFY HELP before they count, default 100 */
		int client_connections;	/* open at once per client, default 50; 0: off */
		int client_connection_rate;	/* opened a minute per client, default 0: off */
		int client_auth_rate;	/* AUTHs a minute per client, default 0: off */
		int client_ipv6_prefix;	/* an IPv6 client is its /N, default 64 */
	} limits;

	struct {
		int level;		/* enum log_level, default info */
		int syslog;		/* target = "syslog" */
	} log;
};

/* conf_load - load and validate; path NULL means the embedded default */
int conf_load(struct conf *c, const char *path, char *err, size_t errlen);
void conf_free(struct conf *c);

/*
 * conf_where - "FILE:LINE: name" for a setting as written, or "FILE: name
 * (default)" when it was not: for start-up messages that point at it
 */
const char *conf_where(const struct conf *c, const char *name, char *out, size_t len);

/*
 * conf_restart_changed - the settings SIGHUP cannot apply that new writes
 * otherwise than old: up to max of their names into names; how many
 */
size_t conf_restart_changed(const struct conf *old, const struct conf *nw,
			    const char **names, size_t max);

/* conf_net_match - is this client address inside access.networks? */
int conf_net_match(const struct conf *c, const struct sockaddr *sa);

/*
 * conf_route_match - the first route that matches a message accepted from
 * user (NULL: no AUTH) with envelope sender from on listener l; NULL: the
 * default upstream (conf_route.c)
 */
const struct conf_route *conf_route_match(const struct conf *c, const char *user,
					  const char *from, const struct conf_listen *l);

/*
 * conf_route_upstream - the upstream group of the route a message stored
 * (NULL: the default upstream); NULL when no route has that name
 */
const struct conf_upstream *conf_route_upstream(const struct conf *c, const char *route);
const struct conf_route *conf_route_named(const struct conf *c, const char *name);	/* NULL: none */
int conf_route_same(const char *a, const char *b);	/* two stored route names, NULL the default */

/* conf_parse_duration, conf_parse_size - "30s" "5m" "24h" "7d" / "25M"; -1 on error */
int64_t conf_parse_duration(const char *s);
int64_t conf_parse_size(const char *s);

/* the embedded default configuration text (conf/idemrelay.conf) */
extern const char conf_default_text[];

#endif
