/*
 * fuzz_keys - key derivation and the relayed rewrite (queue/keys.c) on an
 * arbitrary message under an arbitrary keys configuration (issue 31).
 *
 * The input chooses the configuration, then the message:
 *
 *   byte 0	flags: 1 strip_header, 2 message_id, 4 envid, 8 require,
 *		16 an ENVID is given;
 *   byte 1	how many names keys.headers holds (low 3 bits, 0-7);
 *   per name	one byte: high bit set, a name from the table below
 *		(low 3 bits), its case flipped where the next byte's bits
 *		say (bit i for characters i, i+8, ...); clear, a raw name
 *		of that many bytes (low 4 bits) taken from the input;
 *   the rest	the message, as the SMTP engine hands it over.
 *
 * So a list may name a header twice, in any case, in any order, or name
 * nothing a message carries: what conf_load() refuses must still never
 * hurt. A model written here (lines first, then fields) says what the
 * result must be. Properties:
 *
 *   - keys_derive() answers 0, or -1 with a 550 5.7.0 reply;
 *   - the body starts where the model's header block ends, and the
 *     fingerprint is the SHA-256 of the sender, its NUL and that body;
 *   - with strip_header, the spans are exactly the model's fields whose
 *     name is in the list (case-insensitively), each once, in order;
 *     without it there are none;
 *   - a header key is the first field of the earliest listed name, its
 *     value unfolded and trimmed; when that value is not 1-200
 *     printable ASCII characters the message is refused;
 *   - keys_rewrite() gives the Received: line, then the input less
 *     exactly those fields, byte for byte;
 *   - spans repeated or out of order (the issue 31 corruption) are
 *     refused by keys_rewrite(), which then writes nothing.
 */
#include <ctype.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../queue/keys.h"
#include "../../util/buf.h"
#include "../../util/hash.h"

#define NAMES_MAX	7
#define NAME_LEN_MAX	32
#define FIELDS_MAX	4096	/* an input past this many fields is skipped */

static const char *const table[8] = {
	"X-Idempotency-Key", "Idempotency-Key", "Message-ID", "Subject",
	"X-K", "K", "From", "X-Idempotency-Keys",
};

static const char received[] = "Received: from fuzz by idemrelay; now\r\n";
static const char from[] = "sender@example.org";

struct field {
	size_t off, end;	/* the field, its continuation lines and line ends included */
	size_t name_len;	/* 0: no colon on its first line */
};

struct model {
	struct field f[FIELDS_MAX];
	size_t n;
	size_t body_off;
};

/* take - the next n input bytes, or NULL when fewer are left */
static const uint8_t *take(const uint8_t **p, size_t *left, size_t n)
{
	const uint8_t *q = *p;

	if (*left < n)
		return NULL;
	*p += n;
	*left -= n;
	return q;
}

/* read_names - the configured list, as the input chooses it */
static size_t read_names(const uint8_t **p, size_t *left, char names[][NAME_LEN_MAX + 1])
{
	const uint8_t *b, *m;
	size_t n, i, j, len;

	if ((b = take(p, left, 1)) == NULL)
		return 0;
	n = *b & NAMES_MAX;
	for (i = 0; i < n; i++) {
		if ((b = take(p, left, 1)) == NULL)
			return i;
		if (*b & 0x80) {
			if ((m = take(p, left, 1)) == NULL)
				return i;
			strcpy(names[i], table[*b & 7]);
			for (j = 0; names[i][j]; j++)
				if (*m & (1u << (j % 8)))
					names[i][j] = (char) (islower((unsigned char) names[i][j])
					    ? toupper((unsigned char) names[i][j])
					    : tolower((unsigned char) names[i][j]));
		} else {
			len = *b & 15;
			if ((m = take(p, left, len)) == NULL)
				return i;
			memcpy(names[i], m, len);
			names[i][len] = 0;	/* a NUL inside shortens it: a name is a C string */
		}
	}
	return n;
}

/*
 * model_parse - split the header block: a line starting with CR or LF
 * ends it; a line starting with SP or HT continues the field before it
 * (or starts one, first in the message). Lines end after LF or at the end.
 * 0, or -1 when there are too many fields to model.
 */
static int model_parse(const char *d, size_t len, struct model *m)
{
	size_t pos = 0, eol, c;
	const char *nl;

	m->n = 0;
	while (pos < len && d[pos] != '\r' && d[pos] != '\n') {
		nl = memchr(d + pos, '\n', len - pos);
		eol = nl ? (size_t) (nl - d) + 1 : len;
		if ((d[pos] == ' ' || d[pos] == '\t') && m->n > 0) {
			m->f[m->n - 1].end = eol;
		} else {
			if (m->n == FIELDS_MAX)
				return -1;
			m->f[m->n].off = pos;
			m->f[m->n].end = eol;
			m->f[m->n].name_len = 0;
			for (c = pos; c < eol && d[c] != '\r' && d[c] != '\n'; c++)
				if (d[c] == ':') {
					m->f[m->n].name_len = c - pos;
					break;
				}
			m->n++;
		}
		pos = eol;
	}
	if (pos < len)
		pos += d[pos] == '\r' && pos + 1 < len && d[pos + 1] == '\n' ? 2 : 1;
	m->body_off = pos;
	return 0;
}

/* name_index - the first listed name a field carries, or n */
static size_t name_index(const char *d, const struct field *f, char names[][NAME_LEN_MAX + 1],
			 size_t n)
{
	size_t i, j;

	if (f->name_len == 0)
		return n;
	for (i = 0; i < n; i++) {
		if (strlen(names[i]) != f->name_len)
			continue;
		for (j = 0; j < f->name_len; j++)
			if (tolower((unsigned char) d[f->off + j]) != tolower((unsigned char) names[i][j]))
				break;
		if (j == f->name_len)
			return i;
	}
	return n;
}

/*
 * model_value - a key field's value unfolded (CR and LF dropped) and
 * trimmed of SP and HT; 1 when it is a valid key (1-200 printable ASCII),
 * with the key in out.
 */
static int model_value(const char *d, const struct field *f, char out[KEYS_MAX_LEN + 1])
{
	size_t a = f->off + f->name_len + 1, z = f->end, n = 0, i;

	for (; a < z && d[a] && strchr(" \t\r\n", d[a]); a++)
		 /* void */ ;
	for (; z > a && d[z - 1] && strchr(" \t\r\n", d[z - 1]); z--)
		 /* void */ ;
	for (i = a; i < z; i++) {
		if (d[i] == '\r' || d[i] == '\n')
			continue;
		if ((unsigned char) d[i] < 0x20 || (unsigned char) d[i] > 0x7e || n == KEYS_MAX_LEN)
			return 0;
		out[n++] = d[i];
	}
	out[n] = 0;
	return n > 0;
}

/* check_derive - the result against the model; the fields to strip in strip[] */
static void check_derive(const struct conf *c, const char *d, size_t len, const struct model *m,
			 char names[][NAME_LEN_MAX + 1], int rc, const struct keys_result *r)
{
	char want[KEYS_MAX_LEN + 1] = "";
	uint8_t fp[HASH_LEN];
	struct hash_ctx h;
	size_t i, k = 0, best = c->keys.n_headers, idx;
	int valid = 0;

	if (rc < 0 && (r->error == NULL || strncmp(r->error, "550 5.7.0 ", 10) != 0))
		abort();
	if (rc == 0 && r->error != NULL)
		abort();
	hash_init(&h);			/* the body from the model's boundary: the same fingerprint */
	hash_update(&h, from, sizeof(from));
	hash_update(&h, d + m->body_off, len - m->body_off);
	hash_final(&h, fp);
	if (memcmp(fp, r->fingerprint, HASH_LEN) != 0)
		abort();
	for (i = 0; i < m->n; i++) {
		if ((idx = name_index(d, &m->f[i], names, c->keys.n_headers)) == c->keys.n_headers)
			continue;
		if (idx < best) {
			best = idx;
			valid = model_value(d, &m->f[i], want);
		}
		if (!c->keys.strip_header)
			continue;
		if (k >= r->n_strip || r->strip[k].off != m->f[i].off
		    || r->strip[k].len != m->f[i].end - m->f[i].off)
			abort();
		k++;
	}
	if (k != r->n_strip)
		abort();
	if (best < c->keys.n_headers) {
		if (valid != (rc == 0))
			abort();
		if (rc == 0 && (r->source != KEYS_HEADER || strcmp(r->key, want) != 0))
			abort();
	} else if (r->source == KEYS_HEADER) {
		abort();
	}
}

/* check_rewrite - Received: first, then the input less exactly the key fields */
static void check_rewrite(const struct conf *c, const char *d, size_t len,
			  const struct model *m, char names[][NAME_LEN_MAX + 1],
			  const struct keys_result *r)
{
	struct buf out = BUF_INIT, want = BUF_INIT;
	size_t i, pos = 0;

	buf_append(&want, received, sizeof(received) - 1);
	for (i = 0; c->keys.strip_header && i < m->n; i++) {
		if (name_index(d, &m->f[i], names, c->keys.n_headers) == c->keys.n_headers)
			continue;
		buf_append(&want, d + pos, m->f[i].off - pos);
		pos = m->f[i].end;
	}
	buf_append(&want, d + pos, len - pos);
	if (keys_rewrite(&out, received, d, len, r) != 0)
		abort();
	if (out.len != want.len || memcmp(out.data, want.data, out.len) != 0)
		abort();
	buf_free(&out);
	buf_free(&want);
}

/* check_refused - spans repeated, or out of order, are refused and write nothing */
static void check_refused(const char *d, size_t len, const struct keys_result *r)
{
	struct keys_result bad = *r;
	struct keys_span *s;
	struct buf out = BUF_INIT;

	if (r->n_strip == 0)
		return;
	s = xcalloc(r->n_strip + 1, sizeof(*s));
	memcpy(s, r->strip, r->n_strip * sizeof(*s));
	s[r->n_strip] = s[r->n_strip - 1];	/* the last one twice */
	bad.strip = s;
	bad.n_strip = r->n_strip + 1;
	if (keys_rewrite(&out, received, d, len, &bad) != -1 || out.len != 0)
		abort();
	if (r->n_strip >= 2) {			/* the first two swapped */
		s[0] = r->strip[1];
		s[1] = r->strip[0];
		bad.n_strip = r->n_strip;
		if (keys_rewrite(&out, received, d, len, &bad) != -1 || out.len != 0)
			abort();
	}
	free(s);
	buf_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct model m;
	char names[NAMES_MAX][NAME_LEN_MAX + 1];
	const char *list[NAMES_MAX];
	const uint8_t *p = data, *flags;
	size_t left = size, i;
	struct conf c;
	struct keys_result r;
	int rc;

	if ((flags = take(&p, &left, 1)) == NULL)
		return 0;
	memset(&c, 0, sizeof(c));
	c.keys.strip_header = *flags & 1;
	c.keys.message_id = !!(*flags & 2);
	c.keys.envid = !!(*flags & 4);
	c.keys.require = !!(*flags & 8);
	c.keys.n_headers = read_names(&p, &left, names);
	for (i = 0; i < c.keys.n_headers; i++)
		list[i] = names[i];
	c.keys.headers = list;
	if (model_parse((const char *) p, left, &m) < 0)
		return 0;
	rc = keys_derive(&c, (const char *) p, left, from, *flags & 16 ? "fuzz-envid" : NULL, &r);
	check_derive(&c, (const char *) p, left, &m, names, rc, &r);
	check_rewrite(&c, (const char *) p, left, &m, names, &r);
	check_refused((const char *) p, left, &r);
	keys_free(&r);
	return 0;
}
