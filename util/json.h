/*
 * NAME
 *	json 3h
 * SUMMARY
 *	a little JSON: escaped strings and times out, top-level members in
 * DESCRIPTION
 *	Writing: strings escaped (invalid UTF-8 bytes become \u00XX, so the
 *	output always parses), times as RFC 3339 UTC strings.
 *
 *	Reading: only what idemrelayctl needs of the daemon's one-line
 *	replies, a top-level member of an object by name. Values are found
 *	by skipping over whole JSON values, nested ones included, so a
 *	member named like a string inside another value is never mistaken
 *	for it; reading stops at the object's end, so an object inside a
 *	reply (as json_get() and json_next() give it) is read in place.
 */
#ifndef UTIL_JSON_H
#define UTIL_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"

/* a member's value, after lead (its ",\"name\":", written as it is) */
void json_str(struct buf *b, const char *lead, const char *s);	/* NULL: null */
void json_time(struct buf *b, const char *lead, int64_t us);	/* 0: null */
/* json_error - {"ok":false,"error":TEXT} in b, replacing what it held */
void json_error(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* json_get - a top-level member's raw text; 0, or -1 (val, len untouched): absent, malformed */
int json_get(const char *json, const char *name, const char **val, size_t *len);
/* json_next - the next element of the array at *at (from '['; moved past it): 0, or -1 */
int json_next(const char **at, const char **val, size_t *len);
/* typed readers: 0, or -1 if absent or of another type */
int json_get_str(const char *json, const char *name, char *out, size_t outlen);
int json_get_int(const char *json, const char *name, long long *v);
int json_get_bool(const char *json, const char *name, int *v);

#endif
