/*
 * NAME
 *	keys 3
 * SUMMARY
 *	key derivation, fingerprint and claim hashing
 * DESCRIPTION
 *	The message is already normalised by the SMTP engine: every line ends
 *	in CRLF. The header block ends at the first empty line; a message
 *	with no empty line is all header and has an empty body.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "keys.h"

/* header_next - find the header field starting at off; returns its end */
static size_t header_next(const char *data, size_t len, size_t off,
			  size_t *name_len, size_t *value_off)
{
	size_t p = off, colon = 0;

	*name_len = 0;
	*value_off = off;
	for (;;) {
		const char *nl = memchr(data + p, '\n', len - p);

		p = nl ? (size_t) (nl - data) + 1 : len;
		if (p >= len || (data[p] != ' ' && data[p] != '\t'))
			break;
	}
	for (colon = off; colon < p && data[colon] != ':'; colon++)
		if (data[colon] == '\r' || data[colon] == '\n')
			break;
	if (colon < p && data[colon] == ':') {
		*name_len = colon - off;
		*value_off = colon + 1;
	}
	return p;
}

/* value_blank - folding white space: what a value is trimmed of */
static int value_blank(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n';
}

/*
 * value_copy - unfold and trim a header value into out; 0 or -1 if too
 * long. Trimmed first: blanks around a value never make it too long.
 */
static int value_copy(const char *v, size_t n, char *out, size_t outlen, size_t *got)
{
	size_t a = 0, z = n, o = 0;

	while (a < z && value_blank(v[a]))
		a++;
	while (z > a && value_blank(v[z - 1]))
		z--;
	for (; a < z; a++) {
		if (v[a] == '\r' || v[a] == '\n')
			continue;
		if (o + 1 >= outlen)
			return -1;
		out[o++] = v[a];
	}
	out[o] = 0;
	*got = o;
	return 0;
}

/* key_check - 1-200 printable ASCII characters */
static const char *key_check(const char *k, size_t n)
{
	size_t i;

	if (n == 0)
		return "550 5.7.0 Idempotency key header is empty";
	if (n > KEYS_MAX_LEN)
		return "550 5.7.0 Idempotency key is longer than 200 characters";
	for (i = 0; i < n; i++)
		if ((unsigned char) k[i] < 0x20 || (unsigned char) k[i] > 0x7e)
			return "550 5.7.0 Idempotency key has characters other than printable ASCII";
	return NULL;
}

/* strip_add - note one key header field; as many as the message has */
static void strip_add(struct keys_result *r, size_t off, size_t len)
{
	if (r->n_strip == r->cap_strip) {
		r->cap_strip = r->cap_strip ? 2 * r->cap_strip : 4;
		r->strip = xrealloc(r->strip, r->cap_strip * sizeof(*r->strip));
	}
	r->strip[r->n_strip].off = off;
	r->strip[r->n_strip].len = len;
	r->n_strip++;
}

/* msgid_bounds - the key part of a Message-ID s[0..n): blanks, one <>, the blanks inside off */
static void msgid_bounds(const char *s, size_t n, size_t *a, size_t *b)
{
	size_t p = 0, q = n;

	while (p < q && (s[p] == ' ' || s[p] == '\t'))
		p++;
	while (q > p && (s[q - 1] == ' ' || s[q - 1] == '\t'))
		q--;
	if (p < q && s[p] == '<')
		p++;
	if (q > p && s[q - 1] == '>')
		q--;
	while (p < q && (s[p] == ' ' || s[p] == '\t'))
		p++;
	while (q > p && (s[q - 1] == ' ' || s[q - 1] == '\t'))
		q--;
	*a = p;
	*b = q;
}

/* key_hash - a key made of text that is no key itself: a Message-ID's key part, an ENVID */
static void key_hash(const char *part, size_t n, char key[2 * HASH_LEN + 1])
{
	uint8_t d[HASH_LEN];

	hash_once(part, n, d);
	hash_hex(d, HASH_LEN, key);
}

/* keys_msgid_key - see keys.h */
int keys_msgid_key(const char *id, size_t len, char key[2 * HASH_LEN + 1])
{
	size_t a, b;

	msgid_bounds(id, len, &a, &b);
	if (a == b)
		return -1;
	key_hash(id + a, b - a, key);
	return 0;
}

/* keys_derive - find the key, the fingerprint and the headers to strip */
int keys_derive(const struct conf *c, const char *data, size_t len,
		const char *from, const char *envid, struct keys_result *r)
{
	char value[1000];
	char msgid[1000], *id = msgid;	/* id: the Message-ID's key part, in msgid */
	size_t off = 0, end, name_len, value_off, got, i, a, b;
	size_t best = c->keys.n_headers;	/* index of the header giving the key */
	int have_msgid = 0;
	struct hash_ctx h;

	memset(r, 0, sizeof(*r));
	while (off < len) {
		if (data[off] == '\r' || data[off] == '\n') {	/* the empty line */
			off += (data[off] == '\r' && off + 1 < len && data[off + 1] == '\n') ? 2 : 1;
			break;
		}
		end = header_next(data, len, off, &name_len, &value_off);
		/*
		 * The first listed name that matches decides; the field is noted
		 * once however many names match it (a list may repeat a name in
		 * another case), so the spans stay sorted and disjoint.
		 */
		for (i = 0; name_len && i < c->keys.n_headers; i++)
			if (strlen(c->keys.headers[i]) == name_len
			    && strncasecmp(data + off, c->keys.headers[i], name_len) == 0)
				break;
		if (name_len && i < c->keys.n_headers) {
			if (c->keys.strip_header)
				strip_add(r, off, end - off);
			if (i < best) {
				best = i;
				if (value_copy(data + value_off, end - value_off, value,
					       sizeof(value), &got) < 0)
					r->error = "550 5.7.0 Idempotency key is longer than 200 characters";
				else if ((r->error = key_check(value, got)) == NULL)
					memcpy(r->key, value, got + 1);
			}
		}
		if (!have_msgid && name_len == 10 && strncasecmp(data + off, "Message-ID", 10) == 0
		    && value_copy(data + value_off, end - value_off, msgid, sizeof(msgid), &got) == 0) {
			msgid_bounds(msgid, got, &a, &b);
			msgid[b] = 0;
			id = msgid + a;
			have_msgid = b > a;
			for (i = 0; id[i] && i < KEYS_MSGID_LOG; i++)
				r->message_id[i] = id[i] > ' ' && id[i] < 0x7f ? id[i] : '?';
			r->message_id[i] = 0;
		}
		off = end;
	}

	if (r->error == NULL) {
		if (best < c->keys.n_headers) {
			r->source = KEYS_HEADER;
		} else if (c->keys.envid && envid && *envid) {
			r->source = KEYS_ENVID;
			if (key_check(envid, strlen(envid)) == NULL)
				strcpy(r->key, envid);
			else	/* an ENVID may hold anything xtext can carry */
				key_hash(envid, strlen(envid), r->key);
		} else if (c->keys.message_id && have_msgid) {
			r->source = KEYS_MESSAGE_ID;
			key_hash(id, strlen(id), r->key);
		} else if (c->keys.require) {
			r->error = "550 5.7.0 Message has no idempotency key";
		}
	}

	hash_init(&h);
	hash_update(&h, from, strlen(from) + 1);
	hash_update(&h, data + off, len - off);	/* the body */
	hash_final(&h, r->fingerprint);
	return r->error ? -1 : 0;
}

/* keys_free - release the strip list; r may be derived again after */
void keys_free(struct keys_result *r)
{
	free(r->strip);
	r->strip = NULL;
	r->n_strip = r->cap_strip = 0;
}

/*
 * keys_claim_hash - SHA-256 over scope, key and the recipient's identity:
 * the caller gives the identity (smtp_rcpt_id(), the engine's rule for one
 * recipient), so that the claims and the SMTP engine cannot disagree
 */
void keys_claim_hash(const char *scope, const char *key, const char *rcpt_id,
		     uint8_t out[HASH_LEN])
{
	struct hash_ctx h;

	hash_init(&h);
	hash_update(&h, scope, strlen(scope) + 1);
	hash_update(&h, key, strlen(key) + 1);
	hash_update(&h, rcpt_id, strlen(rcpt_id));
	hash_final(&h, out);
}

/*
 * keys_index_hash - the key index hash (store/lmdb/store_keys.c). No scope in it: an
 * operator asks about a key value, and the stories say whose it was.
 */
void keys_index_hash(const char *key, uint8_t out[HASH_LEN])
{
	struct hash_ctx h;

	hash_init(&h);
	hash_update(&h, "idemrelay key index", 20);	/* with its NUL: not a claim hash */
	hash_update(&h, key, strlen(key));
	hash_final(&h, out);
}

/* keys_source_name - for logs */
const char *keys_source_name(enum keys_source s)
{
	switch (s) {
	case KEYS_HEADER:
		return "header";
	case KEYS_ENVID:
		return "envid";
	case KEYS_MESSAGE_ID:
		return "message-id";
	default:
		return "none";
	}
}

/*
 * keys_spans_ok - each span non-empty, inside the data, after the one
 * before it. keys_derive() makes no other kind; a result from elsewhere
 * (or a bug) must not turn into lengths that wrap.
 */
static int keys_spans_ok(size_t len, const struct keys_result *r)
{
	size_t off = 0, i;

	if (r->n_strip > 0 && r->strip == NULL)
		return 0;
	for (i = 0; i < r->n_strip; i++) {
		if (r->strip[i].off < off || r->strip[i].off > len
		    || r->strip[i].len == 0 || r->strip[i].len > len - r->strip[i].off)
			return 0;
		off = r->strip[i].off + r->strip[i].len;
	}
	return 1;
}

/*
 * keys_rewrite - the message as relayed: our header first, key headers
 * gone. 0, or -1 (out untouched) when the spans are not sorted and
 * disjoint.
 */
int keys_rewrite(struct buf *out, const char *prepend, const char *data, size_t len,
		 const struct keys_result *r)
{
	size_t off = 0, i;

	if (!keys_spans_ok(len, r))
		return -1;
	buf_reserve(out, strlen(prepend) + len);
	buf_append(out, prepend, strlen(prepend));
	for (i = 0; i < r->n_strip; i++) {
		buf_append(out, data + off, r->strip[i].off - off);
		off = r->strip[i].off + r->strip[i].len;
	}
	buf_append(out, data + off, len - off);
	return 0;
}
