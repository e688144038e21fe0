/*
 * NAME
 *	json 3
 * SUMMARY
 *	JSON string escaping and a member lookup for flat replies
 * DESCRIPTION
 *	See json.h. The reader is a skipper, not a parser into a tree:
 *	the replies it reads are a few dozen bytes long and read once.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/asn1.h>

#include "clock.h"
#include "json.h"

/*
 * utf8_len - length of a valid UTF-8 sequence at p (RFC 3629), 0 if
 * invalid: OpenSSL's decoder, which smtp_utf8_len() asks too, refuses
 * overlong forms, surrogates, code points past U+10FFFF and truncated ones
 */
static size_t utf8_len(const unsigned char *p)
{
	unsigned long cp;
	int n = UTF8_getc(p, (int) strnlen((const char *) p, 4), &cp);

	return n > 0 ? (size_t) n : 0;
}

/* json_str - lead as it is, then a JSON string, or null */
void json_str(struct buf *b, const char *lead, const char *s)
{
	const unsigned char *p = (const unsigned char *) s;
	size_t n;

	buf_append(b, lead, strlen(lead));
	if (s == NULL) {
		buf_append(b, "null", 4);
		return;
	}
	buf_putc(b, '"');
	while (*p) {
		if (*p == '"' || *p == '\\') {
			buf_putc(b, '\\');
			buf_putc(b, (char) *p++);
		} else if (*p == '\n') {
			buf_append(b, "\\n", 2);
			p++;
		} else if (*p < 0x20 || *p == 0x7f) {
			buf_printf(b, "\\u%04x", *p++);
		} else if ((n = utf8_len(p)) == 0) {
			buf_printf(b, "\\u%04x", *p++);	/* as Latin-1 */
		} else {
			buf_append(b, p, n);
			p += n;
		}
	}
	buf_putc(b, '"');
}

/* json_error - the error reply of the control protocol and of idemrelayctl --json */
void json_error(struct buf *b, const char *fmt, ...)
{
	char text[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	buf_reset(b);
	json_str(b, "{\"ok\":false,\"error\":", text);
	buf_putc(b, '}');
}

/* json_time - lead as it is, then RFC 3339 UTC, or null */
void json_time(struct buf *b, const char *lead, int64_t us)
{
	char s[40];

	buf_append(b, lead, strlen(lead));
	if (us == 0)
		buf_append(b, "null", 4);
	else
		buf_printf(b, "\"%s\"", clock_iso(s, sizeof(s), us));
}

/* ws - skip white space */
static const char *ws(const char *p)
{
	while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
		p++;
	return p;
}

/* skip_string - past a string starting at its quote; NULL if unterminated */
static const char *skip_string(const char *p)
{
	for (p++; *p && *p != '"'; p++)
		if (*p == '\\' && *++p == 0)
			return NULL;
	return *p == '"' ? p + 1 : NULL;
}

static const char *skip_value(const char *p, int depth);

/*
 * walk - through the object or array opening at p, its members' values at
 * depth: past its end, or, given name, to the value of the member of that
 * name (*val, *len: where it is and how long). NULL if malformed, or if
 * name is given and no member has it.
 */
static const char *walk(const char *p, int depth, const char *name, const char **val,
			size_t *len)
{
	char close = *p == '{' ? '}' : ']';
	const char *k = NULL, *v;

	p = ws(p + 1);
	if (*p == close)
		return name ? NULL : p + 1;
	for (;;) {
		if (close == '}') {
			if (*p != '"' || (v = skip_string(p)) == NULL)
				return NULL;
			k = p + 1;	/* our names carry no escapes */
			p = ws(v);
			if (*p++ != ':')
				return NULL;
			p = ws(p);
		}
		if ((v = skip_value(p, depth)) == NULL)
			return NULL;
		if (name && k && strncmp(k, name, strlen(name)) == 0 && k[strlen(name)] == '"') {
			*val = p;
			*len = (size_t) (v - p);
			return v;
		}
		p = ws(v);
		if (*p == close)
			return name ? NULL : p + 1;
		if (*p++ != ',')
			return NULL;
		p = ws(p);
	}
}

/* skip_value - past one value; NULL if malformed */
static const char *skip_value(const char *p, int depth)
{
	p = ws(p);
	if (*p == '"')
		return skip_string(p);
	if (*p == '{' || *p == '[')
		return depth > 32 ? NULL : walk(p, depth + 1, NULL, NULL, NULL);
	if (*p == 0 || strchr(",:]}", *p))
		return NULL;
	while (*p && !strchr(",]} \t\r\n", *p))
		p++;
	return p;
}

/* json_get - the raw text of a top-level member */
int json_get(const char *json, const char *name, const char **val, size_t *len)
{
	const char *p = ws(json);

	return *p == '{' && walk(p, 0, name, val, len) ? 0 : -1;
}

/* json_next - the next element of an array whose text *at walks */
int json_next(const char **at, const char **val, size_t *len)
{
	const char *p = ws(*at), *v;

	if (*p != '[' && *p != ',')
		return -1;
	p = ws(p + 1);
	if ((v = skip_value(p, 1)) == NULL)
		return -1;
	*val = p;
	*len = (size_t) (v - p);
	*at = v;
	return 0;
}

/* json_get_str - a string member, decoded (truncated to fit) */
int json_get_str(const char *json, const char *name, char *out, size_t outlen)
{
	const char *p, *end;
	size_t len, o = 0;
	unsigned char u[4];
	unsigned c;
	int n;

	if (outlen == 0 || json_get(json, name, &p, &len) != 0 || *p != '"')
		return -1;
	end = p + len - 1;
	for (p++; p < end; p++) {
		n = 1;
		u[0] = *p;
		if (*p == '\\' && p + 1 < end) {
			switch (*++p) {
			case 'n': u[0] = '\n'; break;
			case 't': u[0] = '\t'; break;
			case 'r': u[0] = '\r'; break;
			case 'b': u[0] = '\b'; break;
			case 'f': u[0] = '\f'; break;
			case 'u':
				/* OpenSSL's encoder; a lone surrogate is no character */
				if (end - p < 5 || sscanf(p + 1, "%4x", &c) != 1
				    || (n = UTF8_putc(u, sizeof(u), c)) < 0)
					return -1;
				p += 4;
				break;
			default: u[0] = *p; break;
			}
		}
		if (o + n >= outlen)
			break;
		memcpy(out + o, u, n);
		o += n;
	}
	out[o] = 0;
	return 0;
}

/* json_get_int - an integer member */
int json_get_int(const char *json, const char *name, long long *v)
{
	const char *p;
	size_t len;
	char num[32], *end;

	if (json_get(json, name, &p, &len) != 0 || len == 0 || len >= sizeof(num))
		return -1;
	memcpy(num, p, len);
	num[len] = 0;
	*v = strtoll(num, &end, 10);
	return *end == 0 ? 0 : -1;
}

/* json_get_bool - true or false */
int json_get_bool(const char *json, const char *name, int *v)
{
	const char *p;
	size_t len;

	if (json_get(json, name, &p, &len) != 0)
		return -1;
	if (len == 4 && strncmp(p, "true", 4) == 0)
		*v = 1;
	else if (len == 5 && strncmp(p, "false", 5) == 0)
		*v = 0;
	else
		return -1;
	return 0;
}
