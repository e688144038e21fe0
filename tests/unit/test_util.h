/*
 * test_util - helpers the unit tests share: printable forms of bytes for
 * got/want messages.
 */
#ifndef TESTS_UNIT_TEST_UTIL_H
#define TESTS_UNIT_TEST_UTIL_H

#include <stddef.h>
#include <stdio.h>

#define S(x)	x, sizeof(x) - 1	/* string literal with its length */

/* esc - printable form of bytes for messages (rotating static buffers) */
static inline const char *esc(const char *p, size_t n)
{
	static char bufs[4][8192];
	static int k;
	char *b = bufs[k++ & 3], *o = b;
	size_t i;

	if (p == NULL)
		return "(null)";
	for (i = 0; i < n && o < b + sizeof(bufs[0]) - 8; i++) {
		unsigned char c = (unsigned char) p[i];

		if (c == '\r')
			o += sprintf(o, "\\r");
		else if (c == '\n')
			o += sprintf(o, "\\n");
		else if (c < 32 || c > 126 || c == '\\')
			o += sprintf(o, "\\x%02x", c);
		else
			*o++ = (char) c;
	}
	if (i < n)
		o += sprintf(o, "...");
	*o = 0;
	return b;
}

#endif
