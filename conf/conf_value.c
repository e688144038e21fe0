/*
 * NAME
 *	conf_value 3
 * SUMMARY
 *	typed setting readers, addresses, networks, durations and sizes
 * DESCRIPTION
 *	The pieces of configuration loading that know about one value at a
 *	time: error messages that name file, line and setting; strings,
 *	integers, booleans, enums, durations, sizes, string lists; CIDR
 *	networks and host:port pairs; and conf_net_match().
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <libconfig.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/buf.h"
#include "conf.h"
#include "conf_int.h"

/* conf_file_name - a file as the operator can find it: includes with dir */
void conf_file_name(const struct conf_ctx *x, const char *f,
			   struct buf *b)
{
	if (f == NULL || strcmp(f, x->file) == 0)
		buf_printf(b, "%s", x->file);
	else if (f[0] != '/' && x->dir != NULL)
		buf_printf(b, "%s/%s", x->dir, f);	/* libconfig keeps it relative */
	else
		buf_printf(b, "%s", f);
}

/* conf_path - dotted path of a setting, list elements as [N] */
static void conf_path(const config_setting_t *s, struct buf *b)
{
	const config_setting_t *parent = config_setting_parent(s);

	if (parent == NULL)			/* the root has no name */
		return;
	conf_path(parent, b);
	if (config_setting_name(s) != NULL)
		buf_printf(b, "%s%s", b->len ? "." : "", config_setting_name(s));
	else
		buf_printf(b, "[%d]", config_setting_index(s));
}

/* conf_error - format "FILE:LINE: path[.child]: problem" on one line (controls escaped), return -1 */
int
conf_error(struct conf_ctx *x, const config_setting_t *s, const char *child,
	   const char *fmt, ...)
{
	struct buf path = BUF_INIT, file = BUF_INIT, all = BUF_INIT, esc = BUF_INIT;
	unsigned line = 0;
	char msg[512], lbuf[16] = "";
	const char *p;
	va_list ap;

	if (s != NULL) {
		conf_path(s, &path);
		line = config_setting_source_line(s);
	}
	conf_file_name(x, s ? config_setting_source_file(s) : NULL, &file);
	if (child != NULL)
		buf_printf(&path, "%s%s", path.len ? "." : "", child);
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (line > 0)
		snprintf(lbuf, sizeof(lbuf), ":%u", line);
	buf_printf(&all, "%s%s: %s%s%s", file.data, lbuf,
		   path.len ? path.data : "", path.len ? ": " : "", msg);
	/* one line: a control character (a value's "\n" or "\033") as it is written */
	for (p = all.data; *p; p++) {
		unsigned char c = (unsigned char) *p;

		if (c == '\n' || c == '\r' || c == '\t')
			buf_printf(&esc, "\\%c", c == '\n' ? 'n' : c == '\r' ? 'r' : 't');
		else if (c < 0x20 || c == 0x7f)
			buf_printf(&esc, "\\x%02x", c);
		else
			buf_putc(&esc, (char) c);
	}
	snprintf(x->err, x->errlen, "%s", esc.len ? esc.data : "");	/* errlen 0: nothing */
	buf_free(&path);
	buf_free(&file);
	buf_free(&all);
	buf_free(&esc);
	return -1;
}

/* conf_type_name - a setting's type, as the operator wrote it */
static const char *conf_type_name(const config_setting_t *s)
{
	static const char *const names[] = {
		[CONFIG_TYPE_GROUP] = "a group", [CONFIG_TYPE_INT] = "an integer",
		[CONFIG_TYPE_INT64] = "an integer", [CONFIG_TYPE_FLOAT] = "a float",
		[CONFIG_TYPE_STRING] = "a string", [CONFIG_TYPE_BOOL] = "a boolean",
		[CONFIG_TYPE_ARRAY] = "an array", [CONFIG_TYPE_LIST] = "a list",
	};
	unsigned t = (unsigned) config_setting_type(s);

	return t < sizeof(names) / sizeof(names[0]) && names[t] ? names[t] : "something else";
}

/* conf_wrong_type - "expected X, got Y" */
int conf_wrong_type(struct conf_ctx *x, const config_setting_t *s,
			   const char *want)
{
	return conf_error(x, s, NULL, "expected %s, got %s", want,
			  conf_type_name(s));
}

/* conf_check_names - every child of group g must be in names[] */
int conf_check_names(struct conf_ctx *x, const config_setting_t *g,
			    const char *const *names)
{
	int i, n = config_setting_length(g);

	for (i = 0; i < n; i++) {
		const config_setting_t *s = config_setting_get_elem(g, i);
		const char *const *np;

		for (np = names; *np; np++)
			if (strcmp(*np, config_setting_name(s)) == 0)
				break;
		if (*np == NULL)
			return conf_error(x, s, NULL, "unknown setting");
	}
	return 0;
}

/* conf_group - find an optional group; 1 found, 0 absent, -1 error */
int conf_group(struct conf_ctx *x, const config_setting_t *parent,
		      const char *name, const char *const *names,
		      config_setting_t **out)
{
	config_setting_t *s = config_setting_get_member(parent, name);

	*out = s;
	if (s == NULL)
		return 0;
	if (!config_setting_is_group(s))
		return conf_wrong_type(x, s, "a group { ... }");
	if (conf_check_names(x, s, names) < 0)
		return -1;
	return 1;
}

/* conf_text_ok - non-empty, printable, and (if token) without spaces */
static int conf_text_ok(const char *v, int token)
{
	const unsigned char *p = (const unsigned char *) v;

	if (*p == 0)
		return 0;
	for (; *p; p++)
		if (*p < 0x20 || *p == 0x7f || (token && *p == ' '))
			return 0;
	return 1;
}

/* conf_string - optional string setting; *out the tree's when present */
int conf_string(struct conf_ctx *x, const config_setting_t *g,
		       const char *name, int token, const char **out)
{
	config_setting_t *s = g ? config_setting_get_member(g, name) : NULL;
	const char *v;

	if (s == NULL)
		return 0;
	if (config_setting_type(s) != CONFIG_TYPE_STRING)
		return conf_wrong_type(x, s, "a string");
	v = config_setting_get_string(s);
	if (*v == 0)
		return conf_error(x, s, NULL, "empty value");
	if (!conf_text_ok(v, token))
		return conf_error(x, s, NULL, "bad value \"%s\"", v);
	*out = v;
	return 1;
}

/* conf_int - optional integer setting within [min, max] */
int conf_int(struct conf_ctx *x, const config_setting_t *g,
		    const char *name, long long min, long long max, int *out)
{
	config_setting_t *s = g ? config_setting_get_member(g, name) : NULL;
	long long v;

	if (s == NULL)
		return 0;
	if (config_setting_type(s) != CONFIG_TYPE_INT
	    && config_setting_type(s) != CONFIG_TYPE_INT64)
		return conf_wrong_type(x, s, "an integer");
	v = config_setting_get_int64(s);
	if (v < min || v > max)
		return conf_error(x, s, NULL, "%lld out of range %lld..%lld",
				  v, min, max);
	*out = (int) v;
	return 1;
}

/* conf_bool - optional boolean setting */
int conf_bool(struct conf_ctx *x, const config_setting_t *g,
		     const char *name, int *out)
{
	config_setting_t *s = g ? config_setting_get_member(g, name) : NULL;

	if (s == NULL)
		return 0;
	if (config_setting_type(s) != CONFIG_TYPE_BOOL)
		return conf_wrong_type(x, s, "true or false");
	*out = config_setting_get_bool(s);
	return 1;
}

/* conf_enum - optional string setting from a fixed word list; *out = index */
int conf_enum(struct conf_ctx *x, const config_setting_t *g,
		     const char *name, const char *const *words, int *out)
{
	config_setting_t *s = g ? config_setting_get_member(g, name) : NULL;
	struct buf want = BUF_INIT;
	const char *v;
	int i;

	if (s == NULL)
		return 0;
	if (config_setting_type(s) != CONFIG_TYPE_STRING)
		return conf_wrong_type(x, s, "a string");
	v = config_setting_get_string(s);
	for (i = 0; words[i]; i++) {
		if (strcmp(words[i], v) == 0) {
			*out = i;
			return 1;
		}
	}
	for (i = 0; words[i]; i++)
		buf_printf(&want, "%s\"%s\"", i == 0 ? "" : words[i + 1] ?
			   ", " : " or ", words[i]);
	conf_error(x, s, NULL, "bad value \"%s\" (expected %s)", v, want.data);
	buf_free(&want);
	return -1;
}

/* conf_number - shared by durations and sizes: integer or string, min to max */
static int conf_number(struct conf_ctx *x, const config_setting_t *g,
		       const char *name, const char *what,
		       int64_t (*parse)(const char *), int64_t min,
		       int64_t max, int64_t *out)
{
	config_setting_t *s = g ? config_setting_get_member(g, name) : NULL;
	int64_t v;

	if (s == NULL)
		return 0;
	switch (config_setting_type(s)) {
	case CONFIG_TYPE_INT:
	case CONFIG_TYPE_INT64:
		v = config_setting_get_int64(s);
		/* libconfig 1.5 wraps integers past 2^31 unless written 123L */
		if (v < 0)
			return conf_error(x, s, NULL, "bad %s %lld%s", what,
					  (long long) v, parse == conf_parse_size
					  ? " (write large sizes with a unit, "
					  "e.g. \"4G\")" : "");
		break;
	case CONFIG_TYPE_STRING:
		v = parse(config_setting_get_string(s));
		if (v < 0)
			return conf_error(x, s, NULL, "bad %s \"%s\"", what,
					  config_setting_get_string(s));
		break;
	default:
		return conf_wrong_type(x, s, "an integer or a string");
	}
	if (v < min)
		return conf_error(x, s, NULL, "%s must be at least %lld", what,
				  (long long) min);
	if (v > max)
		return conf_error(x, s, NULL, "%s must be at most %lld", what,
				  (long long) max);
	*out = v;
	return 1;
}

/*
 * conf_duration - optional duration setting, in seconds, at least min and
 * at most 100 years: its users count in microseconds from now, which a
 * larger one would overflow (key_ttl = "200000000d" turned deduplication off)
 */
int conf_duration(struct conf_ctx *x, const config_setting_t *g,
			 const char *name, int64_t min, int64_t *out)
{
	return conf_number(x, g, name, "duration", conf_parse_duration, min,
			   CONF_DURATION_MAX, out);
}

/* conf_size - optional size setting, in bytes, at least min */
int conf_size(struct conf_ctx *x, const config_setting_t *g,
		     const char *name, int64_t min, uint64_t *out)
{
	int64_t v;
	int rc = conf_number(x, g, name, "size", conf_parse_size, min,
			      INT64_MAX, &v);

	if (rc == 1)
		*out = (uint64_t) v;
	return rc;
}

/* conf_strings - optional array or list of strings; 1 found, 0, -1 */
int conf_strings(struct conf_ctx *x, const config_setting_t *g,
			const char *name, config_setting_t **out)
{
	config_setting_t *s = g ? config_setting_get_member(g, name) : NULL;
	int i, n;

	*out = s;
	if (s == NULL)
		return 0;
	if (!config_setting_is_array(s) && !config_setting_is_list(s))
		return conf_wrong_type(x, s, "an array of strings [ ... ]");
	n = config_setting_length(s);
	for (i = 0; i < n; i++) {
		config_setting_t *e = config_setting_get_elem(s, i);

		if (config_setting_type(e) != CONFIG_TYPE_STRING)
			return conf_wrong_type(x, e, "a string");
		if (!conf_text_ok(config_setting_get_string(e), 1))
			return conf_error(x, e, NULL, "bad value \"%s\"",
					  config_setting_get_string(e));
	}
	return 1;
}

/* conf_numeric_addr - is this a numeric IPv4 or IPv6 address? */
int conf_numeric_addr(const char *a)
{
	unsigned char tmp[16];

	return inet_pton(AF_INET, a, tmp) == 1 || inet_pton(AF_INET6, a, tmp) == 1;
}

/* conf_parse_net - "a.b.c.d/n", "x::y/n" or a bare address; 0 or -1 */
int conf_parse_net(const char *text, struct conf_net *net,
			  const char **why)
{
	char addr[INET6_ADDRSTRLEN + 1];
	const char *slash = strchr(text, '/');
	size_t alen = slash ? (size_t) (slash - text) : strlen(text);
	int bits, i;

	memset(net, 0, sizeof(*net));
	*why = "bad network";
	if (alen == 0 || alen >= sizeof(addr))
		return -1;
	memcpy(addr, text, alen);
	addr[alen] = 0;
	if (inet_pton(AF_INET, addr, net->addr) == 1) {
		net->family = AF_INET;
		bits = 32;
	} else if (inet_pton(AF_INET6, addr, net->addr) == 1) {
		net->family = AF_INET6;
		bits = 128;
	} else
		return -1;
	net->prefix = bits;
	if (slash != NULL) {
		const char *p = slash + 1;

		/* 1 to 3 digits, no more than the address has bits */
		if (*p == 0 || strlen(p) > 3 || strspn(p, "0123456789") != strlen(p) || atoi(p) > bits)
			return -1;
		net->prefix = atoi(p);
	}
	/* 10.0.0.1/8 is a typo more often than a wish: refuse, as Postfix does */
	for (i = net->prefix; i < bits; i++) {
		if (net->addr[i / 8] & (0x80 >> (i % 8))) {
			*why = "host bits set in network";
			return -1;
		}
	}
	return 0;
}

/* conf_parse_hostport - "host", "host:port", "[v6]:port"; 0 or -1 */
int conf_parse_hostport(const char *text, int defport,
			       struct conf_upstream_host *h)
{
	const char *colon, *end;
	char *stop;
	long port = defport;

	if (text[0] == '[') {
		end = strchr(text, ']');
		if (end == NULL || end == text + 1 || (end[1] != 0 && end[1] != ':'))
			return -1;
		h->host = xstrndup(text + 1, end - text - 1);
		colon = end[1] ? end + 1 : NULL;
	} else {
		colon = strchr(text, ':');
		if (colon != NULL && strchr(colon + 1, ':') != NULL)
			colon = NULL;		/* bare IPv6 address, no port */
		end = colon ? colon : text + strlen(text);
		if (end == text)
			return -1;
		h->host = xstrndup(text, end - text);
	}
	if (colon != NULL) {
		if (!isdigit((unsigned char) colon[1]))
			return -1;
		errno = 0;
		port = strtol(colon + 1, &stop, 10);
		if (errno || *stop || port < 1 || port > 65535)
			return -1;
	}
	h->port = (int) port;
	return 0;
}

/* conf_net_match - is this client address inside access.networks? */
int     conf_net_match(const struct conf *c, const struct sockaddr *sa)
{
	const uint8_t *addr;
	int     family, skip = 0;
	size_t  i;

	if (c == NULL || sa == NULL)
		return 0;
	if (sa->sa_family == AF_INET) {
		family = AF_INET;
		addr = (const uint8_t *) &((const struct sockaddr_in *) sa)->sin_addr;
	} else if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a6 = &((const struct sockaddr_in6 *) sa)->sin6_addr;

		family = AF_INET6;
		addr = a6->s6_addr;
		/* dual-stack sockets show IPv4 clients as ::ffff:a.b.c.d */
		if (IN6_IS_ADDR_V4MAPPED(a6)) {
			family = AF_INET;
			skip = 12;
		}
	} else
		return 0;
	addr += skip;
	for (i = 0; i < c->n_networks; i++) {
		const struct conf_net *n = &c->networks[i];
		int     full = n->prefix / 8, rest = n->prefix % 8;

		if (n->family != family)
			continue;
		if (memcmp(n->addr, addr, full) != 0)
			continue;
		if (rest && ((n->addr[full] ^ addr[full]) & (0xff00 >> rest) & 0xff))
			continue;
		return 1;
	}
	return 0;
}

/* conf_parse_number - digits and a one-letter unit from units[]; -1 on error */
static int64_t conf_parse_number(const char *s, const char *units,
				 const int64_t *mults)
{
	int64_t n = 0, mul = 1;
	const char *p = s, *u;

	if (s == NULL || !isdigit((unsigned char) *p))
		return -1;
	for (; isdigit((unsigned char) *p); p++) {
		if (n > (INT64_MAX - (*p - '0')) / 10)
			return -1;
		n = n * 10 + (*p - '0');
	}
	if (*p != 0) {
		if (p[1] != 0 || (u = strchr(units, *p)) == NULL)
			return -1;
		mul = mults[u - units];
	}
	if (n > INT64_MAX / mul)
		return -1;
	return n * mul;
}

/* conf_parse_duration - "30s" "5m" "24h" "7d" or plain seconds; -1 on error */
int64_t conf_parse_duration(const char *s)
{
	static const int64_t mults[] = {1, 60, 3600, 86400};

	return conf_parse_number(s, "smhd", mults);
}

/* conf_parse_size - bytes, or K/M/G binary multiples; -1 on error */
int64_t conf_parse_size(const char *s)
{
	static const int64_t mults[] = {1LL << 10, 1LL << 20, 1LL << 30,
		1LL << 10, 1LL << 20, 1LL << 30};

	return conf_parse_number(s, "KMGkmg", mults);
}
