/*
 * test_util - helpers the unit tests share: printable forms of bytes for
 * got/want messages, a got/want check of bytes, and reproducible
 * pseudo-random input built from fragments for robustness tests.
 */
#ifndef TESTS_UNIT_TEST_UTIL_H
#define TESTS_UNIT_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "../../util/buf.h"

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

/*
 * check_bytes - got[0..got_len) is want[0..want_len); if not, print
 * "name (how): what" with both and return 1. got may be NULL when empty.
 */
static inline int check_bytes(const char *name, const char *how, const char *what,
			      const char *got, size_t got_len,
			      const char *want, size_t want_len)
{
	if (got_len == want_len && memcmp(got ? got : "", want, want_len) == 0)
		return 0;
	print_error("%s (%s): %s\n got  \"%s\"\n want \"%s\"\n", name, how, what,
		    esc(got, got_len), esc(want, want_len));
	return 1;
}

/* test_rand - next pseudo-random number from *seed (64-bit LCG, top bits) */
static inline size_t test_rand(uint64_t *seed)
{
	*seed = *seed * 6364136223846793005ULL + 1442695040888963407ULL;
	return (size_t) (*seed >> 33);
}

/*
 * random_input - make in n pieces long: each, one time in junk, a random
 * octet, else one of frags ("\0" stands for one NUL octet)
 */
static inline void random_input(struct buf *in, const char *const *frags, size_t nfrags,
				size_t n, size_t junk, uint64_t *seed)
{
	const char *fr;
	size_t i;

	buf_reset(in);
	for (i = 0; i < n; i++) {
		if (test_rand(seed) % junk == 0) {
			buf_putc(in, (char) test_rand(seed));
		} else {
			fr = frags[test_rand(seed) % nfrags];
			buf_append(in, fr, fr[0] ? strlen(fr) : 1);
		}
	}
}

#endif
