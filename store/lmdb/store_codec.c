/*
 * NAME
 *	store_codec 3
 * SUMMARY
 *	the store's record formats: encoding and defensive decoding
 * DESCRIPTION
 *	Records are portable: integers big-endian, fixed width; strings a
 *	32-bit length then the bytes (no NUL), length 0xffffffff for NULL.
 *	Each record starts with a version byte, so that a later format can
 *	be told apart from this one.
 *
 *	claim (claims DB, key: the key's 32-byte index hash, then the
 *	claim's 32-byte hash; an older store's claims, the claim hash alone):
 *	    version=1, qid length (u8), qid, fingerprint[32],
 *	    accepted (i64), expires (i64)
 *	message (msg DB, key: qid), written once:
 *	    version=2, accepted (i64), from, envid?, ret (i32), body (i32),
 *	    client, user?, n_rcpts (u32), n x { addr, notify (i32), orcpt? },
 *	    flags (u8: 1 has key, 2 SMTPUTF8, 4 route), keyhash[32], ttl (i64),
 *	    route (if flag 4: the name of the route chosen at acceptance),
 *	    data length (u64), data
 *	    (version 1, still read, lacks the flags, keyhash and ttl: what
 *	    the message's story starts from, before it has a record of its own;
 *	    a version 2 record written before SMTPUTF8 has flag 2 clear,
 *	    which is what it meant, so the flag needed no new version; so
 *	    with flag 4: a record without it, older or not, took the default
 *	    upstream)
 *	delivery state (queue DB, key: qid), rewritten on every attempt:
 *	    version=1, attempts (i32), next_attempt (i64), flags (u8: 1
 *	    inflight, 2 held), n_rcpts (u32), n x { state (u8), reply? }
 *	    (the flags byte was the inflight mark alone, 0 or 1, before
 *	    messages could be held: the same record, read alike)
 *	history (hist DB, key: qid), the story, rewritten on each update:
 *	    version=1, accepted, updated, finished, expires, forgotten,
 *	    ttl (i64 each), flags (u8: 1 has key, 2 dropped, 4 SMTPUTF8,
 *	    8 route), keyhash[32],
 *	    duplicates (u32), mismatches (u32), attempts (i32), size (u64),
 *	    from, envid?, client, user?, n_rcpts (u32),
 *	    n x { addr, state (u8), reply? }, route (if flag 8)
 *	history expiry key (hexpiry DB, empty value):
 *	    expires (u64 big-endian, sign bit flipped so that byte order is
 *	    time order), qid
 *	key index (keys DB, key: 32-byte key hash, sorted duplicates), of
 *	an older store's claims, read and deleted, no longer written:
 *	    claim hash[32], qid
 *
 *	Encoders run twice over one description of the record: once to
 *	size it, once to write it into space the caller reserved (for the
 *	message record, space inside the LMDB map: MDB_RESERVE, no copy).
 *	The envelope and the recipient array are written and read by one
 *	pair of functions for all three spool records, told by a field set
 *	which parts the record carries.
 *
 *	Decoders trust nothing: every length is checked against what is
 *	left of the record before anything is allocated.
 * DIAGNOSTICS
 *	Decoders return STORE_EINVAL on any malformed record.
 */
#include <stdlib.h>
#include <string.h>

#include "../../util/buf.h"
#include "../../util/log.h"
#include "store_int.h"

#define REC_VERSION	1
#define MSG_VERSION	2	/* the message record's: 1 is still read */
#define STR_NULL	0xffffffffu
#define MSG_HAS_KEY	1	/* the message record's flags */
#define MSG_SMTPUTF8	2
#define MSG_ROUTE	4	/* the route's name follows the ttl */
#define QUEUE_NEXT_OFF	(1 + 4)		/* the delivery state record's next_attempt */
#define QUEUE_FLAGS_OFF	(1 + 4 + 8)	/* the delivery state record's flags */
#define QUEUE_INFLIGHT	1
#define QUEUE_HELD	2

/* encoder: with p == NULL it only counts */
struct enc {
	uint8_t *p;
	size_t len;
	size_t pos;
};

/* decoder: err is sticky, reads after it return zeros */
struct dec {
	const uint8_t *p;
	size_t len;
	size_t pos;
	int err;
	int peek;		/* check strings and recipients, allocate nothing */
};

/* a string as it lies in the record: p NULL for a NULL string */
struct span {
	const uint8_t *p;
	uint32_t n;
};

/* enc_bytes - append raw bytes */
static void enc_bytes(struct enc *e, const void *v, size_t n)
{
	if (e->p) {
		if (n > e->len - e->pos)
			msg_panic("store: record encoder overrun (%zu + %zu > %zu)",
				  e->pos, n, e->len);
		if (n)
			memcpy(e->p + e->pos, v, n);
	}
	e->pos += n;
}

/* enc_uint - append big-endian, n bytes wide */
static void enc_uint(struct enc *e, uint64_t v, int n)
{
	uint8_t b[8];
	int i;

	for (i = n - 1; i >= 0; i--) {
		b[i] = (uint8_t) v;
		v >>= 8;
	}
	enc_bytes(e, b, n);
}

#define enc_u8(e, v)	enc_uint((e), (uint8_t) (v), 1)
#define enc_i32(e, v)	enc_uint((e), (uint32_t) (int32_t) (v), 4)
#define enc_u32(e, v)	enc_uint((e), (uint32_t) (v), 4)
#define enc_i64(e, v)	enc_uint((e), (uint64_t) (int64_t) (v), 8)
#define enc_u64(e, v)	enc_uint((e), (uint64_t) (v), 8)

/* enc_str - append a string that may be NULL */
static void enc_str(struct enc *e, const char *s)
{
	size_t n;

	if (s == NULL) {
		enc_u32(e, STR_NULL);
		return;
	}
	n = strlen(s);
	enc_u32(e, n);
	enc_bytes(e, s, n);
}

/* dec_take - consume n bytes, or fail */
static const uint8_t *dec_take(struct dec *d, size_t n)
{
	const uint8_t *p;

	if (d->err || n > d->len - d->pos) {
		d->err = STORE_EINVAL;
		return NULL;
	}
	p = d->p + d->pos;
	d->pos += n;
	return p;
}

/* dec_uint - read a big-endian integer n bytes wide */
static uint64_t dec_uint(struct dec *d, int n)
{
	const uint8_t *p = dec_take(d, n);
	uint64_t v = 0;
	int i;

	if (p == NULL)
		return 0;
	for (i = 0; i < n; i++)
		v = (v << 8) | p[i];
	return v;
}

#define dec_u8(d)	((uint8_t) dec_uint((d), 1))
#define dec_i32(d)	((int32_t) (uint32_t) dec_uint((d), 4))
#define dec_u32(d)	((uint32_t) dec_uint((d), 4))
#define dec_i64(d)	((int64_t) dec_uint((d), 8))
#define dec_u64(d)	dec_uint((d), 8)

/*
 * dec_str_at - read a string that may be NULL (only if nullable): *at
 * where it lies in the record, and a new allocation of it unless peeking
 */
static char *dec_str_at(struct dec *d, int nullable, struct span *at)
{
	uint32_t n = dec_u32(d);
	char *s;

	at->p = NULL;
	if (d->err)
		return NULL;
	if (n == STR_NULL) {
		if (!nullable)
			d->err = STORE_EINVAL;
		return NULL;
	}
	if ((at->p = dec_take(d, n)) == NULL)
		return NULL;
	if (memchr(at->p, 0, n) != NULL) {
		d->err = STORE_EINVAL;
		at->p = NULL;
		return NULL;
	}
	at->n = n;
	if (d->peek)
		return NULL;
	s = xmalloc((size_t) n + 1);
	memcpy(s, at->p, n);
	s[n] = 0;
	return s;
}

/* dec_str - read a string into a new allocation; NULL only if nullable */
static char *dec_str(struct dec *d, int nullable)
{
	struct span at;

	return dec_str_at(d, nullable, &at);
}

/* dec_version - check the leading version byte */
static void dec_version(struct dec *d)
{
	if (dec_u8(d) != REC_VERSION)
		d->err = STORE_EINVAL;
}

/* dec_msg_version - the message record's version byte: 1 or 2, else EINVAL */
static int dec_msg_version(struct dec *d)
{
	int v = dec_u8(d);

	if (v != REC_VERSION && v != MSG_VERSION)
		d->err = STORE_EINVAL;
	return v;
}

/* dec_end - the record must be consumed exactly */
static int dec_end(struct dec *d)
{
	if (d->err == 0 && d->pos != d->len)
		d->err = STORE_EINVAL;
	return d->err;
}

/*
 * The envelope fields a record carries, always in this order: from,
 * envid?, [ret (i32), body (i32)], client, user?; then n_rcpts (u32) and
 * n x { [addr], [notify (i32)], [orcpt?], [state (u8)], [reply?] }.
 */
#define F_SENDER	0x01	/* from, envid?, client, user? */
#define F_DSN		0x02	/* ret, body */
#define F_ADDR		0x04	/* the record brings the recipient array */
#define F_NOTIFY	0x08
#define F_ORCPT		0x10
#define F_STATE		0x20
#define F_REPLY		0x40

#define MSG_FIELDS	(F_SENDER | F_DSN | F_ADDR | F_NOTIFY | F_ORCPT)
#define QUEUE_FIELDS	(F_STATE | F_REPLY)
#define HIST_FIELDS	(F_SENDER | F_ADDR | F_STATE | F_REPLY)

/* enc_rcpt - one recipient's fields */
static void enc_rcpt(struct enc *e, const struct store_rcpt *r, unsigned int fields)
{
	if (fields & F_ADDR)
		enc_str(e, r->addr);
	if (fields & F_NOTIFY)
		enc_i32(e, r->notify);
	if (fields & F_ORCPT)
		enc_str(e, r->orcpt);
	if (fields & F_STATE)
		enc_u8(e, r->state);
	if (fields & F_REPLY)
		enc_str(e, r->reply);
}

/* enc_envelope - the envelope fields and recipients a record carries */
static void enc_envelope(struct enc *e, const struct store_msg *m, unsigned int fields)
{
	size_t i;

	if (fields & F_SENDER) {
		enc_str(e, m->from);
		enc_str(e, m->envid);
		if (fields & F_DSN) {
			enc_i32(e, m->ret);
			enc_i32(e, m->body);
		}
		enc_str(e, m->client);
		enc_str(e, m->user);
	}
	enc_u32(e, m->n_rcpts);
	for (i = 0; i < m->n_rcpts; i++)
		enc_rcpt(e, &m->rcpts[i], fields);
}

/*
 * dec_rcpt_count - a recipient count: at least one, and no more than
 * what is left of the record could hold, since each recipient takes at
 * least as much as an empty one (every string NULL). This bounds the
 * allocation before anything is allocated.
 */
static uint32_t dec_rcpt_count(struct dec *d, unsigned int fields)
{
	static const struct store_rcpt empty;
	struct enc least = { NULL, 0, 0 };
	uint32_t n = dec_u32(d);

	enc_rcpt(&least, &empty, fields);
	if (d->err == 0 && (n == 0 || n > (d->len - d->pos) / least.pos))
		d->err = STORE_EINVAL;
	return n;
}

/* dec_rcpt - one recipient's fields */
static void dec_rcpt(struct dec *d, struct store_rcpt *r, unsigned int fields)
{
	uint8_t state;

	if (fields & F_ADDR)
		r->addr = dec_str(d, 0);
	if (fields & F_NOTIFY)
		r->notify = dec_i32(d);
	if (fields & F_ORCPT)
		r->orcpt = dec_str(d, 1);
	if (fields & F_STATE) {
		state = dec_u8(d);
		if (state > STORE_RCPT_UNCONFIRMED)
			d->err = STORE_EINVAL;
		r->state = (enum store_rcpt_state) state;
	}
	if (fields & F_REPLY)
		r->reply = dec_str(d, 1);
}

/*
 * dec_envelope - the envelope fields and recipients a record carries. A
 * record with addresses brings the recipient array (allocated here); one
 * without fills in the array an earlier record brought, and must agree
 * on its length.
 */
static void dec_envelope(struct dec *d, struct store_msg *m, unsigned int fields)
{
	struct store_rcpt scratch;	/* a peek's recipients */
	uint32_t i, n;

	if (fields & F_SENDER) {
		m->from = dec_str(d, 0);
		m->envid = dec_str(d, 1);
		if (fields & F_DSN) {
			m->ret = dec_i32(d);
			m->body = dec_i32(d);
		}
		m->client = dec_str(d, 0);
		m->user = dec_str(d, 1);
	}
	if (fields & F_ADDR) {
		n = dec_rcpt_count(d, fields);
		if (d->err == 0 && !d->peek) {
			m->rcpts = xcalloc(n, sizeof(*m->rcpts));
			m->n_rcpts = n;
		}
	} else {
		n = dec_u32(d);
		if (d->err == 0 && n != m->n_rcpts)
			d->err = STORE_EINVAL;
	}
	for (i = 0; d->err == 0 && i < n; i++)
		dec_rcpt(d, d->peek ? &scratch : &m->rcpts[i], fields);
}

/* the size-then-write pair every variable-length record goes through */
typedef void rec_codec(struct enc *e, const void *rec);

/* rec_size - bytes a record needs: its codec, only counting */
static size_t rec_size(rec_codec *codec, const void *rec)
{
	struct enc e = { NULL, 0, 0 };

	codec(&e, rec);
	return e.pos;
}

/* rec_encode - write a record into exactly the len bytes rec_size() said */
static void rec_encode(rec_codec *codec, const char *what, void *out, size_t len,
		       const void *rec)
{
	struct enc e = { out, len, 0 };

	codec(&e, rec);
	if (e.pos != len)
		msg_panic("store: %s record is %zu bytes, sized as %zu", what, e.pos, len);
}

/* claim_codec - the claim record */
static void claim_codec(struct enc *e, const struct store_claim *c)
{
	size_t qlen = strnlen(c->qid, STORE_QID_SIZE - 1);

	enc_u8(e, REC_VERSION);
	enc_u8(e, qlen);
	enc_bytes(e, c->qid, qlen);
	enc_bytes(e, c->fingerprint, STORE_HASH_LEN);
	enc_i64(e, c->accepted);
	enc_i64(e, c->expires);
}

/* lmdb_claim_encode - write a claim record, return its length */
size_t lmdb_claim_encode(uint8_t out[STORE_CLAIM_REC_LEN], const struct store_claim *c)
{
	struct enc e = { out, STORE_CLAIM_REC_LEN, 0 };

	claim_codec(&e, c);
	return e.pos;
}

/* lmdb_claim_decode - read a claim record */
int lmdb_claim_decode(const void *p, size_t len, struct store_claim *c)
{
	struct dec d = { p, len, 0, 0, 0 };
	const uint8_t *b;
	size_t qlen;

	memset(c, 0, sizeof(*c));
	dec_version(&d);
	qlen = dec_u8(&d);
	if (qlen == 0 || qlen >= STORE_QID_SIZE)
		d.err = STORE_EINVAL;
	if ((b = dec_take(&d, qlen)) != NULL)
		memcpy(c->qid, b, qlen);
	if ((b = dec_take(&d, STORE_HASH_LEN)) != NULL)
		memcpy(c->fingerprint, b, STORE_HASH_LEN);
	c->accepted = dec_i64(&d);
	c->expires = dec_i64(&d);
	if (dec_end(&d) != 0 || memchr(c->qid, 0, qlen) != NULL) {
		memset(c, 0, sizeof(*c));
		return STORE_EINVAL;
	}
	return 0;
}

/* msg_codec - the immutable message record */
static void msg_codec(struct enc *e, const void *rec)
{
	const struct store_msg *m = rec;

	enc_u8(e, MSG_VERSION);
	enc_i64(e, m->accepted);
	enc_envelope(e, m, MSG_FIELDS);
	enc_u8(e, (m->has_key ? MSG_HAS_KEY : 0) | (m->smtputf8 ? MSG_SMTPUTF8 : 0)
	       | (m->route ? MSG_ROUTE : 0));
	enc_bytes(e, m->keyhash, STORE_HASH_LEN);
	enc_i64(e, m->ttl);
	if (m->route)
		enc_str(e, m->route);
	enc_u64(e, m->data_len);
	enc_bytes(e, m->data, m->data_len);
}

/* lmdb_msg_rec_size - bytes the message record needs */
size_t lmdb_msg_rec_size(const struct store_msg *m)
{
	return rec_size(msg_codec, m);
}

/* lmdb_msg_rec_encode - write the message record into exactly len bytes */
void lmdb_msg_rec_encode(void *out, size_t len, const struct store_msg *m)
{
	rec_encode(msg_codec, "message", out, len, m);
}

/*
 * msg_rec_decode - the message record, with or without its data; *route
 * where its route lies (p NULL: none). A peek (d->peek) only checks it.
 */
static int msg_rec_decode(struct dec *d, struct store_msg *m, int with_data, struct span *route)
{
	const uint8_t *b;
	uint64_t dlen;
	int v = dec_msg_version(d);
	uint8_t flags;

	route->p = NULL;
	m->accepted = dec_i64(d);
	dec_envelope(d, m, MSG_FIELDS);
	if (v == MSG_VERSION) {
		flags = dec_u8(d);
		m->has_key = (flags & MSG_HAS_KEY) != 0;
		m->smtputf8 = (flags & MSG_SMTPUTF8) != 0;
		if ((b = dec_take(d, STORE_HASH_LEN)) != NULL)
			memcpy(m->keyhash, b, STORE_HASH_LEN);
		m->ttl = dec_i64(d);
		if (flags & MSG_ROUTE)
			m->route = dec_str_at(d, 0, route);
	}
	dlen = dec_u64(d);
	if (d->err == 0 && dlen != d->len - d->pos)
		d->err = STORE_EINVAL;
	if ((b = dec_take(d, dlen)) != NULL) {
		if (with_data) {
			m->data = xmalloc(dlen + 1);
			memcpy(m->data, b, dlen);
			m->data[dlen] = 0;
		}
		m->data_len = dlen;
	}
	if (dec_end(d) != 0) {
		store_msg_free(m);
		return STORE_EINVAL;
	}
	return 0;
}

/*
 * lmdb_msg_rec_decode - read the message record into m (whose qid the
 * caller set); the delivery state fields are left zero. On failure m
 * holds nothing that needs freeing.
 */
int lmdb_msg_rec_decode(const void *p, size_t len, struct store_msg *m)
{
	struct dec d = { p, len, 0, 0, 0 };
	struct span route;

	return msg_rec_decode(&d, m, 1, &route);
}

/* lmdb_msg_rec_decode_envelope - the same without copying the data (m->data stays NULL) */
int lmdb_msg_rec_decode_envelope(const void *p, size_t len, struct store_msg *m)
{
	struct dec d = { p, len, 0, 0, 0 };
	struct span route;

	return msg_rec_decode(&d, m, 0, &route);
}

/* lmdb_msg_rec_peek_accepted - when the message was accepted, cheaply */
int lmdb_msg_rec_peek_accepted(const void *p, size_t len, int64_t *accepted)
{
	struct dec d = { p, len, 0, 0, 0 };

	dec_msg_version(&d);
	*accepted = dec_i64(&d);
	return d.err;
}

/*
 * lmdb_msg_rec_peek_route - does the message record name route (NULL:
 * the default upstream)? *same says, compared where it lies: nothing is
 * allocated. A record lmdb_msg_rec_decode() refuses, this refuses too.
 */
int lmdb_msg_rec_peek_route(const void *p, size_t len, const char *route, int *same)
{
	struct dec d = { p, len, 0, 0, 1 };
	struct store_msg m;
	struct span at;

	memset(&m, 0, sizeof(m));
	if (msg_rec_decode(&d, &m, 0, &at) != 0)
		return STORE_EINVAL;
	if (at.p == NULL || route == NULL)
		*same = at.p == NULL && route == NULL;
	else
		*same = strlen(route) == at.n && memcmp(at.p, route, at.n) == 0;
	return 0;
}

/* queue_codec - the delivery state record */
static void queue_codec(struct enc *e, const void *rec)
{
	const struct store_msg *m = rec;

	enc_u8(e, REC_VERSION);
	enc_i32(e, m->attempts);
	enc_i64(e, m->next_attempt);
	enc_u8(e, (m->inflight ? QUEUE_INFLIGHT : 0) | (m->held ? QUEUE_HELD : 0));
	enc_envelope(e, m, QUEUE_FIELDS);
}

/* lmdb_queue_rec_size - bytes the delivery state record needs */
size_t lmdb_queue_rec_size(const struct store_msg *m)
{
	return rec_size(queue_codec, m);
}

/* lmdb_queue_rec_encode - write the delivery state into exactly len bytes */
void lmdb_queue_rec_encode(void *out, size_t len, const struct store_msg *m)
{
	rec_encode(queue_codec, "queue", out, len, m);
}

/* dec_queue_head - the delivery state record up to its recipients */
static void dec_queue_head(struct dec *d, struct store_msg *m)
{
	uint8_t flags;

	dec_version(d);
	m->attempts = dec_i32(d);
	m->next_attempt = dec_i64(d);
	flags = (uint8_t) dec_u8(d);
	if (d->err == 0 && (flags & ~(QUEUE_INFLIGHT | QUEUE_HELD)) != 0)
		d->err = STORE_EINVAL;
	m->inflight = (flags & QUEUE_INFLIGHT) != 0;
	m->held = (flags & QUEUE_HELD) != 0;
}

/*
 * lmdb_queue_rec_decode - read delivery state into a message already
 * decoded by lmdb_msg_rec_decode(); the recipient counts must agree.
 * On failure the replies read so far are freed and set to NULL.
 */
int lmdb_queue_rec_decode(const void *p, size_t len, struct store_msg *m)
{
	struct dec d = { p, len, 0, 0, 0 };
	size_t i;

	dec_queue_head(&d, m);
	dec_envelope(&d, m, QUEUE_FIELDS);
	if (dec_end(&d) != 0) {
		for (i = 0; i < m->n_rcpts; i++) {
			free(m->rcpts[i].reply);
			m->rcpts[i].reply = NULL;
		}
		return STORE_EINVAL;
	}
	return 0;
}

/* lmdb_queue_rec_peek - the recipient count, next attempt and hold, cheaply */
int lmdb_queue_rec_peek(const void *p, size_t len, size_t *n_rcpts, int64_t *next_attempt,
			int *held)
{
	struct dec d = { p, len, 0, 0, 0 };
	struct store_msg head;
	uint32_t n;

	dec_queue_head(&d, &head);
	n = dec_rcpt_count(&d, QUEUE_FIELDS);
	if (d.err)
		return STORE_EINVAL;
	if (n_rcpts)
		*n_rcpts = n;
	if (next_attempt)
		*next_attempt = head.next_attempt;
	if (held)
		*held = head.held;
	return 0;
}

/* queue_rec_set_flag - patch one flag in a copy of the record */
static int queue_rec_set_flag(void *p, size_t len, uint8_t flag, int on)
{
	uint8_t *f = (uint8_t *) p + QUEUE_FLAGS_OFF;

	if (lmdb_queue_rec_peek(p, len, NULL, NULL, NULL) != 0)
		return STORE_EINVAL;
	*f = (uint8_t) (on ? *f | flag : *f & ~flag);
	return 0;
}

/* lmdb_queue_rec_set_inflight - patch the mark in a copy of the record */
int lmdb_queue_rec_set_inflight(void *p, size_t len, int64_t on)
{
	return queue_rec_set_flag(p, len, QUEUE_INFLIGHT, on != 0);
}

/* lmdb_queue_rec_set_held - patch the hold in a copy of the record */
int lmdb_queue_rec_set_held(void *p, size_t len, int64_t on)
{
	return queue_rec_set_flag(p, len, QUEUE_HELD, on != 0);
}

/* lmdb_queue_rec_set_due - patch the next attempt in a copy of the record, if later than due */
int lmdb_queue_rec_set_due(void *p, size_t len, int64_t due)
{
	struct enc e = { (uint8_t *) p + QUEUE_NEXT_OFF, 8, 0 };
	int64_t next;

	if (lmdb_queue_rec_peek(p, len, NULL, &next, NULL) != 0)
		return STORE_EINVAL;
	if (next > due)
		enc_i64(&e, due);
	return 0;
}

#define HIST_HAS_KEY	1
#define HIST_DROPPED	2
#define HIST_SMTPUTF8	4
#define HIST_ROUTE	8	/* the route's name follows the recipients */

/* hist_codec - the history record */
static void hist_codec(struct enc *e, const void *rec)
{
	const struct store_story *s = rec;
	const struct store_msg *m = &s->m;
	static const uint8_t zero[STORE_HASH_LEN];

	enc_u8(e, REC_VERSION);
	enc_i64(e, m->accepted);
	enc_i64(e, s->updated);
	enc_i64(e, s->finished);
	enc_i64(e, s->expires);
	enc_i64(e, s->forgotten);
	enc_i64(e, s->ttl);
	enc_u8(e, (s->has_key ? HIST_HAS_KEY : 0) | (s->dropped ? HIST_DROPPED : 0)
	       | (m->smtputf8 ? HIST_SMTPUTF8 : 0) | (m->route ? HIST_ROUTE : 0));
	enc_bytes(e, s->has_key ? s->keyhash : zero, STORE_HASH_LEN);
	enc_u32(e, s->duplicates);
	enc_u32(e, s->mismatches);
	enc_i32(e, m->attempts);
	enc_u64(e, m->data_len);
	enc_envelope(e, m, HIST_FIELDS);
	if (m->route)
		enc_str(e, m->route);
}

/* lmdb_hist_rec_size - bytes the history record needs */
size_t lmdb_hist_rec_size(const struct store_story *s)
{
	return rec_size(hist_codec, s);
}

/* lmdb_hist_rec_encode - write the history record into exactly len bytes */
void lmdb_hist_rec_encode(void *out, size_t len, const struct store_story *s)
{
	rec_encode(hist_codec, "history", out, len, s);
}

/*
 * lmdb_hist_rec_decode - read a history record into s (whose m.qid the
 * caller set). On failure s holds nothing that needs freeing.
 */
int lmdb_hist_rec_decode(const void *p, size_t len, struct store_story *s)
{
	struct dec d = { p, len, 0, 0, 0 };
	struct store_msg *m = &s->m;
	const uint8_t *b;
	uint8_t flags;

	dec_version(&d);
	m->accepted = dec_i64(&d);
	s->updated = dec_i64(&d);
	s->finished = dec_i64(&d);
	s->expires = dec_i64(&d);
	s->forgotten = dec_i64(&d);
	s->ttl = dec_i64(&d);
	flags = dec_u8(&d);
	s->has_key = (flags & HIST_HAS_KEY) != 0;
	s->dropped = (flags & HIST_DROPPED) != 0;
	m->smtputf8 = (flags & HIST_SMTPUTF8) != 0;
	if ((b = dec_take(&d, STORE_HASH_LEN)) != NULL)
		memcpy(s->keyhash, b, STORE_HASH_LEN);
	s->duplicates = dec_u32(&d);
	s->mismatches = dec_u32(&d);
	m->attempts = dec_i32(&d);
	m->data_len = dec_u64(&d);
	dec_envelope(&d, m, HIST_FIELDS);
	if (flags & HIST_ROUTE)
		m->route = dec_str(&d, 0);
	if (flags & ~(HIST_HAS_KEY | HIST_DROPPED | HIST_SMTPUTF8 | HIST_ROUTE))
		d.err = STORE_EINVAL;
	if (dec_end(&d) != 0) {
		store_msg_free(m);
		return STORE_EINVAL;
	}
	return 0;
}
