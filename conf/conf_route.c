/*
 * NAME
 *	conf_route 3
 * SUMMARY
 *	routes: which upstream group a message goes to
 * DESCRIPTION
 *	routes = ( { name; auth_user; sender; sender_domain; listener;
 *	upstream = { ... }; }, ... ) sends the mail a route matches to its
 *	own upstream group (hosts, port, TLS, credentials, connections,
 *	timeout), as Postfix's sender_dependent_relayhost_maps and
 *	smtp_sasl_password_maps do together. A route matches when each
 *	match setting it has does (at least one is required); the first
 *	route that matches wins, and mail no route matches goes to the
 *	top-level upstream, the default.
 *
 *	conf_route_match() decides at acceptance; the message stores the
 *	route's name, and delivery finds its group again by that name
 *	(conf_route_upstream()), so that a restart with other routes does
 *	not move mail already queued.
 * DIAGNOSTICS
 *	conf_routes() returns 0, or -1 with "FILE:LINE: routes[N].x: problem".
 */
#include <libconfig.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../util/buf.h"
#include "conf.h"
#include "conf_int.h"

#define CONF_ROUTE_NAME_MAX	64

/* route_name_ok - letters, digits, '.', '_' and '-', at most 64 */
static int route_name_ok(const char *v)
{
	size_t n = strlen(v);

	return n > 0 && n <= CONF_ROUTE_NAME_MAX
	    && strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
		      "0123456789._-") == n;
}

/* route_listener - the listen[] entry a route's listener names */
static int route_listener(struct conf_ctx *x, const struct conf *c,
			  const config_setting_t *g, struct conf_route *r)
{
	const char *name = NULL;
	size_t i;

	r->listener = -1;
	if (conf_string(x, g, "listener", 1, &name) < 0)
		return -1;
	if (name == NULL)
		return 0;
	for (i = 0; i < c->n_listen; i++)
		if (c->listen[i].name && strcmp(c->listen[i].name, name) == 0)
			r->listener = (int) i;
	if (r->listener < 0)
		return conf_error(x, g, "listener", "no listen entry has name = \"%s\"", name);
	return 0;
}

/* conf_route - one route, routes[i] as g */
static int conf_route(struct conf_ctx *x, const struct conf *c,
		      const config_setting_t *g, struct conf_route *r)
{
	static const char *const names[] = {"name", "auth_user", "sender",
		"sender_domain", "listener", "upstream", 0};
	if (!config_setting_is_group(g))
		return conf_wrong_type(x, g, "a group { ... }");
	if (conf_check_names(x, g, names) < 0
	    || conf_string(x, g, "name", 1, &r->name) < 0
	    || conf_string(x, g, "auth_user", 1, &r->auth_user) < 0
	    || conf_string(x, g, "sender", 1, &r->sender) < 0
	    || conf_string(x, g, "sender_domain", 1, &r->sender_domain) < 0
	    || route_listener(x, c, g, r) < 0)
		return -1;
	if (r->name == NULL)
		return conf_error(x, g, "name", "missing setting");
	if (!route_name_ok(r->name))
		return conf_error(x, g, "name", "\"%s\": want 1 to %d letters, digits,"
				  " '.', '_' or '-'", r->name, CONF_ROUTE_NAME_MAX);
	if (!r->auth_user && !r->sender && !r->sender_domain && r->listener < 0)
		return conf_error(x, g, NULL, "matches nothing (needs auth_user, sender,"
				  " sender_domain or listener)");
	if (r->sender && strchr(r->sender, '@') == NULL)
		return conf_error(x, g, "sender", "\"%s\" is not an address (sender_domain"
				  " takes a domain)", r->sender);
	if (r->sender_domain && strchr(r->sender_domain, '@') != NULL)
		return conf_error(x, g, "sender_domain", "\"%s\" is an address (sender"
				  " takes one)", r->sender_domain);
	return conf_upstream_group(x, &r->up, g, 1);
}

/* conf_routes - routes = ( ... ), after listen and upstream */
int conf_routes(struct conf_ctx *x, struct conf *c, const config_setting_t *root)
{
	config_setting_t *ls = config_setting_get_member(root, "routes");
	int i, j, n;

	if (ls == NULL)
		return 0;
	if (!config_setting_is_list(ls))
		return conf_wrong_type(x, ls, "a list ( { ... }, ... )");
	if (c->upstream.maildir)
		return conf_error(x, ls, NULL, "need upstream.host or upstream.hosts"
				  " (not a Maildir)");
	n = config_setting_length(ls);
	c->routes = xcalloc(n ? (size_t) n : 1, sizeof(*c->routes));
	for (i = 0; i < n; i++) {
		config_setting_t *g = config_setting_get_elem(ls, (unsigned) i);

		c->n_routes = (size_t) i + 1;
		if (conf_route(x, c, g, &c->routes[i]) < 0)
			return -1;
		for (j = 0; j < i; j++)
			if (strcmp(c->routes[j].name, c->routes[i].name) == 0)
				return conf_error(x, g, "name", "\"%s\" names routes[%d] too",
						  c->routes[i].name, j);
	}
	return 0;
}

/* conf_upstream_free - what an upstream group owns: its host list, its pins */
void conf_upstream_free(struct conf_upstream *u)
{
	size_t i;

	for (i = 0; i < u->n_hosts; i++)
		free(u->hosts[i].host);
	free(u->hosts);
	free(u->tls_fingerprint);
	memset(u, 0, sizeof(*u));
}

/* route_matches - does every match setting of r hold? */
static int route_matches(const struct conf *c, const struct conf_route *r, const char *user,
			 const char *from, const struct conf_listen *l)
{
	const char *at = from ? strrchr(from, '@') : NULL;

	if (r->auth_user && (user == NULL || strcmp(r->auth_user, user) != 0))
		return 0;
	if (r->sender && (from == NULL || strcasecmp(r->sender, from) != 0))
		return 0;
	if (r->sender_domain && (at == NULL || strcasecmp(r->sender_domain, at + 1) != 0))
		return 0;
	if (r->listener >= 0 && l != &c->listen[r->listener])
		return 0;
	return 1;
}

/* conf_route_match - the first route that matches; NULL: the default upstream */
const struct conf_route *conf_route_match(const struct conf *c, const char *user,
					  const char *from, const struct conf_listen *l)
{
	size_t i;

	for (i = 0; i < c->n_routes; i++)
		if (route_matches(c, &c->routes[i], user, from, l))
			return &c->routes[i];
	return NULL;
}

/* conf_route_named - the route of that name; NULL: none (or name NULL, the default) */
const struct conf_route *conf_route_named(const struct conf *c, const char *name)
{
	size_t i;

	for (i = 0; name && i < c->n_routes; i++)
		if (strcmp(c->routes[i].name, name) == 0)
			return &c->routes[i];
	return NULL;
}

/* conf_route_same - do two stored route names name the same one (NULL: the default)? */
int conf_route_same(const char *a, const char *b)
{
	return a == b || (a && b && strcmp(a, b) == 0);
}

/* conf_route_upstream - a stored route's upstream group; NULL: no such route */
const struct conf_upstream *conf_route_upstream(const struct conf *c, const char *route)
{
	const struct conf_route *r;

	if (route == NULL)
		return &c->upstream;
	return (r = conf_route_named(c, route)) ? &r->up : NULL;
}
