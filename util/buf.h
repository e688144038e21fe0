/*
 * NAME
 *	buf 3h
 * SUMMARY
 *	growable byte buffers and allocation that never returns NULL
 * DESCRIPTION
 *	Every allocation goes through xmalloc() and friends, which abort in
 *	one place when memory runs out. struct buf is a byte buffer that owns
 *	its data; callers bound its growth themselves (message_size, line
 *	limits) before appending.
 */
#ifndef UTIL_BUF_H
#define UTIL_BUF_H

#include <stddef.h>

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);

struct buf {
	char *data;		/* owned; NUL-terminated past len when non-NULL */
	size_t len;
	size_t cap;
};

#define BUF_INIT { NULL, 0, 0 }

void buf_reserve(struct buf *b, size_t extra);
void buf_reserve_max(struct buf *b, size_t extra, size_t max);	/* not past max if enough */
void buf_append(struct buf *b, const void *p, size_t n);
void buf_putc(struct buf *b, char c);
void buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_consume(struct buf *b, size_t n);	/* drop n bytes from the front */
void buf_reset(struct buf *b);			/* len = 0, keep memory */
void buf_free(struct buf *b);			/* release memory; NULL-safe */

#endif
