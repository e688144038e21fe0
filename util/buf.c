/*
 * NAME
 *	buf 3
 * SUMMARY
 *	growable byte buffers, checked allocation
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "log.h"

/* xmalloc - allocate or die */
void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (p == NULL)
		msg_panic("out of memory allocating %zu bytes", n);
	return p;
}

/* xcalloc - allocate zeroed or die */
void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);

	if (p == NULL)
		msg_panic("out of memory allocating %zu x %zu bytes", n, size);
	return p;
}

/* xrealloc - resize or die */
void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (p == NULL)
		msg_panic("out of memory reallocating %zu bytes", n);
	return p;
}

/* xstrdup - copy a string or die */
char *xstrdup(const char *s)
{
	return xstrndup(s, strlen(s));
}

/* xstrndup - copy at most n bytes of a string or die */
char *xstrndup(const char *s, size_t n)
{
	size_t len = strnlen(s, n);
	char *p = xmalloc(len + 1);

	memcpy(p, s, len);
	p[len] = 0;
	return p;
}

/* buf_reserve - make room for extra bytes plus a terminator */
void buf_reserve(struct buf *b, size_t extra)
{
	buf_reserve_max(b, extra, SIZE_MAX);
}

/*
 * buf_reserve_max - as buf_reserve, doubling, but never past max octets
 * while that is enough (a buffer that must stay near a bound it is filled to)
 */
void buf_reserve_max(struct buf *b, size_t extra, size_t max)
{
	size_t need = b->len + extra + 1;
	size_t cap;

	if (need <= b->cap)
		return;
	cap = b->cap ? b->cap : 256;
	while (cap < need)
		cap *= 2;
	if (cap > max)
		cap = need > max ? need : max;
	b->data = xrealloc(b->data, cap);
	b->cap = cap;
}

/* buf_append - append bytes */
void buf_append(struct buf *b, const void *p, size_t n)
{
	buf_reserve(b, n);
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = 0;
}

/* buf_putc - append one byte */
void buf_putc(struct buf *b, char c)
{
	if (b->len + 2 > b->cap)
		buf_reserve(b, 1);
	b->data[b->len++] = c;
	b->data[b->len] = 0;
}

/* buf_printf - append formatted text */
void buf_printf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		msg_panic("buf_printf: bad format %s", fmt);
	buf_reserve(b, (size_t) n);
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t) n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t) n;
}

/* buf_consume - drop n bytes from the front */
void buf_consume(struct buf *b, size_t n)
{
	if (n >= b->len) {
		b->len = 0;
	} else {
		memmove(b->data, b->data + n, b->len - n);
		b->len -= n;
	}
	if (b->data)
		b->data[b->len] = 0;
}

/* buf_reset - empty the buffer, keep its memory */
void buf_reset(struct buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = 0;
}

/* buf_free - release the buffer's memory */
void buf_free(struct buf *b)
{
	if (b == NULL)
		return;
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}
