/*
 * NAME
 *	conf_int 3h
 * SUMMARY
 *	typed setting readers shared by the configuration loader (internal)
 * DESCRIPTION
 *	Each reader takes an optional setting from a group, checks its type
 *	and value, and on a problem writes "FILE:LINE: path: problem" into
 *	the load's error buffer and returns -1.
 */
#ifndef CONF_CONF_INT_H
#define CONF_CONF_INT_H

#include <libconfig.h>
#include <stddef.h>
#include <stdint.h>

#include "conf.h"

#define CONF_DEFAULT_NAME	"<default>"
#define CONF_SMTP_PORT		25
#define CONF_SMTPS_PORT		465

/* One load in progress: where messages go and what to call the file. */
struct conf_ctx {
	const char *file;		/* path, or "<default>" */
	const char *dir;		/* where relative @includes are found */
	char   *err;			/* caller's buffer */
	size_t  errlen;
};

/* conf_file_name - a file as the operator can find it: includes with dir */
void conf_file_name(const struct conf_ctx *x, const char *f,
		struct buf *b);
/* conf_error - format "FILE:LINE: path[.child]: problem", return -1 */
int conf_error(struct conf_ctx *x, const config_setting_t *s, const char *child,
		const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* conf_wrong_type - "expected X, got Y" */
int conf_wrong_type(struct conf_ctx *x, const config_setting_t *s,
		const char *want);
/* conf_check_names - every child of group g must be in names[] */
int conf_check_names(struct conf_ctx *x, const config_setting_t *g,
		const char *const *names);
/* conf_group - find an optional group; 1 found, 0 absent, -1 error */
int conf_group(struct conf_ctx *x, const config_setting_t *parent,
		const char *name, const char *const *names,
		config_setting_t **out);
/* conf_string - optional string setting; *out the tree's when present */
int conf_string(struct conf_ctx *x, const config_setting_t *g,
		const char *name, int token, const char **out);
/* conf_int - optional integer setting within [min, max] */
int conf_int(struct conf_ctx *x, const config_setting_t *g,
		const char *name, long long min, long long max, int *out);
/* conf_bool - optional boolean setting */
int conf_bool(struct conf_ctx *x, const config_setting_t *g,
		const char *name, int *out);
/* conf_enum - optional string setting from a fixed word list; *out = index */
int conf_enum(struct conf_ctx *x, const config_setting_t *g,
		const char *name, const char *const *words, int *out);
/* the longest duration, 100 years: microseconds from now stay far from overflow */
#define CONF_DURATION_MAX (36500LL * 86400)

/* conf_duration - optional duration setting, in seconds, min to CONF_DURATION_MAX */
int conf_duration(struct conf_ctx *x, const config_setting_t *g,
		const char *name, int64_t min, int64_t *out);
/* conf_size - optional size setting, in bytes, at least min */
int conf_size(struct conf_ctx *x, const config_setting_t *g,
		const char *name, int64_t min, uint64_t *out);
/* conf_strings - optional array or list of strings; 1 found, 0, -1 */
int conf_strings(struct conf_ctx *x, const config_setting_t *g,
		const char *name, config_setting_t **out);
/* conf_numeric_addr - is this a numeric IPv4 or IPv6 address? */
int conf_numeric_addr(const char *a);
/* conf_parse_net - "a.b.c.d/n", "x::y/n" or a bare address; 0 or -1 */
int conf_parse_net(const char *text, struct conf_net *net,
		const char **why);
/* conf_parse_hostport - "host", "host:port", "[v6]:port"; 0 or -1 */
int conf_parse_hostport(const char *text, int defport,
		struct conf_upstream_host *h);
/* conf_upstream_group - the upstream group in parent: the default's (route 0) or a route's */
int conf_upstream_group(struct conf_ctx *x, struct conf_upstream *u,
		const config_setting_t *parent, int route);
/* conf_upstream_free - what an upstream group owns */
void conf_upstream_free(struct conf_upstream *u);
/* conf_routes - routes = ( ... ), after listen and upstream (conf_route.c) */
int conf_routes(struct conf_ctx *x, struct conf *c, const config_setting_t *root);

#endif
