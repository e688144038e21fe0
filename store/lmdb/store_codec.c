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
 *	claim's 32-byte hash):
 *	    version=1, qid length (u8), qid, fingerprint[32],
 *	    accepted (i64), expires (i64)
 *	message (msg DB, key: qid), written once:
 *	    version=2, accepted (i64), from, envid?, ret (i32), body (i32),
 *	    client, user?, n_rcpts (u32), n x { addr, notify (i32), orcpt? },
 *	    flags (u8: 1 has key, 2 SMTPUTF8, 4 route), keyhash[32], ttl (i64),
 *	    route (if flag 4: the name of the route chosen at acceptance),
 *	    data length (u64), data
 *	    (the flags, keyhash and ttl are what the message's story starts
 *	    from, before it has a record of its own; version 1, which lacked
 *	    them, was written only before idemrelay 0.1, and is refused; a
 *	    version 2 record written before SMTPUTF8 has flag 2 clear,
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
 *
 *	Each record is described once, by one function that writes it or
 *	reads it, as struct rec says (as XDR's routines do). An encoder runs
 *	it twice: once to size the record, once to write it into space the
 *	caller reserved (for the message record, space inside the LMDB map:
 *	MDB_RESERVE, no copy). The envelope and the recipient array are one
 *	function for all three spool records, told by a field set which
 *	parts the record carries.
 *
 *	Decoders trust nothing: every length is checked against what is
 *	left of the record before anything is allocated.
 * DIAGNOSTICS
 *	Decoders return STORE_EINVAL on any malformed record.
 */
#include <string.h>

#include "../../util/buf.h"
#include "../../util/log.h"
#include "store_int.h"

#define REC_VERSION	1
#define MSG_VERSION	2	/* the message record's */
#define STR_NULL	0xffffffffu
#define MSG_HAS_KEY	1	/* the message record's flags */
#define MSG_SMTPUTF8	2
#define MSG_ROUTE	4	/* the route's name follows the ttl */
#define QUEUE_NEXT_OFF	(1 + 4)		/* the delivery state record's next_attempt */
#define QUEUE_FLAGS_OFF	(1 + 4 + 8)	/* the delivery state record's flags */
#define HIST_HAS_KEY	1
#define HIST_DROPPED	2
#define HIST_SMTPUTF8	4
#define HIST_ROUTE	8	/* the route's name follows the recipients */

/*
 * Where a record is written or read, which way is known: each use is
 * inlined whole, so that the compiler drops the other way's branches
 * (the acceptance commit runs the message record's twice).
 */
#define INLINE		static inline __attribute__((always_inline))

/*
 * One pass over a record. Encoding, the fields are read from the struct
 * (never written) and written to out, or only counted while out is NULL.
 * Decoding (dec), they are read from in into the struct; err is sticky,
 * and reads after it return zeros.
 */
struct rec {
	int dec;
	uint8_t *out;
	const uint8_t *in;
	size_t len;
	size_t pos;
	int err;
	int nodata;		/* decoding: leave the message's data (m->data NULL) */
};

/*
 * rec_bytes - n raw bytes, written from v or read into v (if not NULL);
 * read, where they lie in the record (NULL once failed)
 */
INLINE const uint8_t *rec_bytes(struct rec *r, void *v, size_t n)
{
	const uint8_t *p;

	if (!r->dec) {
		if (r->out && n > r->len - r->pos)
			msg_panic("store: record encoder overrun (%zu + %zu > %zu)",
				  r->pos, n, r->len);
		if (r->out && n)
			memcpy(r->out + r->pos, v, n);
		r->pos += n;
		return NULL;
	}
	if (r->err || n > r->len - r->pos) {
		r->err = STORE_EINVAL;
		return NULL;
	}
	p = r->in + r->pos;
	r->pos += n;
	if (v && n)
		memcpy(v, p, n);
	return p;
}

/* rec_uint - a big-endian integer n bytes wide: v written, or the value read */
INLINE uint64_t rec_uint(struct rec *r, uint64_t v, int n)
{
	uint8_t b[8];
	int i;

	if (!r->dec) {
		for (i = n - 1; i >= 0; i--, v >>= 8)
			b[i] = (uint8_t) v;
		rec_bytes(r, b, n);
		return 0;
	}
	if (rec_bytes(r, b, n) == NULL)
		return 0;
	for (v = 0, i = 0; i < n; i++)
		v = (v << 8) | b[i];
	return v;
}

/* an integer field of type, wire bits wide, through a pointer: written from it or read into it */
#define REC_INT(r, p, type, wire) do { \
	uint64_t v_ = rec_uint((r), (r)->dec ? 0 : (uint64_t) (wire) *(p), sizeof(wire)); \
	if ((r)->dec) \
		*(p) = (type) (wire) v_; \
} while (0)
#define rec_u8(r, p)	REC_INT(r, p, uint8_t, uint8_t)
#define rec_i32(r, p)	REC_INT(r, p, int, uint32_t)
#define rec_u32(r, p)	REC_INT(r, p, uint32_t, uint32_t)
#define rec_i64(r, p)	REC_INT(r, p, int64_t, uint64_t)
#define rec_u64(r, p)	REC_INT(r, p, uint64_t, uint64_t)

/*
 * rec_str - a string, which may be NULL only if nullable: a 32-bit
 * length (STR_NULL for NULL), then the bytes. Read: *s a new allocation.
 */
INLINE void rec_str(struct rec *r, char **s, int nullable)
{
	uint32_t n = !r->dec && *s ? (uint32_t) strlen(*s) : STR_NULL;
	const uint8_t *p;

	rec_u32(r, &n);
	if (!r->dec) {
		if (*s)
			rec_bytes(r, *s, n);
		return;
	}
	*s = NULL;
	if (r->err == 0 && n == STR_NULL && !nullable)
		r->err = STORE_EINVAL;
	if (r->err || n == STR_NULL || (p = rec_bytes(r, NULL, n)) == NULL)
		return;
	if (memchr(p, 0, n) != NULL) {
		r->err = STORE_EINVAL;
		return;
	}
	*s = xmalloc((size_t) n + 1);
	memcpy(*s, p, n);
	(*s)[n] = 0;
}

/* rec_version - the version byte: v written; read, refused unless v */
INLINE void rec_version(struct rec *r, uint8_t v)
{
	uint8_t got = v;

	rec_u8(r, &got);
	if (got != v)
		r->err = STORE_EINVAL;
}

/* rec_flags - a flags byte: written from on; read, into on, refused if it has a bit not in known */
INLINE void rec_flags(struct rec *r, uint8_t *on, uint8_t known)
{
	rec_u8(r, on);
	if (r->dec && (*on & ~known) != 0)
		r->err = STORE_EINVAL;
}

/* rec_end - read: the record must be consumed exactly */
static int rec_end(struct rec *r)
{
	if (r->err == 0 && r->pos != r->len)
		r->err = STORE_EINVAL;
	return r->err;
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

/* rec_rcpt - one recipient's fields */
INLINE void rec_rcpt(struct rec *r, struct store_rcpt *rc, unsigned int fields)
{
	uint8_t state = r->dec ? 0 : (uint8_t) rc->state;

	if (fields & F_ADDR)
		rec_str(r, &rc->addr, 0);
	if (fields & F_NOTIFY)
		rec_i32(r, &rc->notify);
	if (fields & F_ORCPT)
		rec_str(r, &rc->orcpt, 1);
	if (fields & F_STATE) {
		rec_u8(r, &state);
		if (r->dec && state > STORE_RCPT_UNCONFIRMED)
			r->err = STORE_EINVAL;
		if (r->dec)
			rc->state = (enum store_rcpt_state) state;
	}
	if (fields & F_REPLY)
		rec_str(r, &rc->reply, 1);
}

/*
 * rec_rcpt_count - a recipient count. Read: at least one, and no more
 * than what is left of the record could hold, since each recipient
 * takes at least as much as an empty one (every string NULL). This
 * bounds the allocation before anything is allocated.
 */
INLINE uint32_t rec_rcpt_count(struct rec *r, size_t n_rcpts, unsigned int fields)
{
	struct store_rcpt empty = { NULL, 0, NULL, STORE_RCPT_QUEUED, NULL };
	struct rec least = { 0 };
	uint32_t n = (uint32_t) n_rcpts;

	rec_u32(r, &n);
	if (!r->dec)
		return n;
	rec_rcpt(&least, &empty, fields);
	if (r->err == 0 && (n == 0 || n > (r->len - r->pos) / least.pos))
		r->err = STORE_EINVAL;
	return r->err ? 0 : n;
}

/*
 * rec_envelope - the envelope fields and recipients a record carries. A
 * record with addresses brings the recipient array (allocated here when
 * read); one without fills in the array an earlier record brought, and
 * must agree on its length.
 */
INLINE void rec_envelope(struct rec *r, struct store_msg *m, unsigned int fields)
{
	uint32_t i, n;

	if (fields & F_SENDER) {
		rec_str(r, &m->from, 0);
		rec_str(r, &m->envid, 1);
		if (fields & F_DSN) {
			rec_i32(r, &m->ret);
			rec_i32(r, &m->body);
		}
		rec_str(r, &m->client, 0);
		rec_str(r, &m->user, 1);
	}
	n = rec_rcpt_count(r, m->n_rcpts, fields);
	if (r->dec && r->err == 0 && !(fields & F_ADDR) && n != m->n_rcpts)
		r->err = STORE_EINVAL;
	if (r->dec && r->err == 0 && (fields & F_ADDR)) {
		m->rcpts = xcalloc(n, sizeof(*m->rcpts));
		m->n_rcpts = n;
	}
	for (i = 0; r->err == 0 && i < n; i++)
		rec_rcpt(r, &m->rcpts[i], fields);
}

/* a variable-length record's one description (rec points to its struct) */
typedef void rec_codec(struct rec *r, void *rec);

/* rec_decode - read a record as r says into rec; on failure its message m holds nothing to free */
INLINE int rec_decode(rec_codec *codec, struct rec *r, void *rec, struct store_msg *m)
{
	codec(r, rec);
	if (rec_end(r) != 0) {
		store_msg_free(m);
		return STORE_EINVAL;
	}
	return 0;
}

/* rec_size - bytes a record needs: its codec, only counting */
INLINE size_t rec_size(rec_codec *codec, const void *rec)
{
	struct rec r = { 0 };

	codec(&r, (void *) rec);	/* encoding only reads it */
	return r.pos;
}

/* rec_encode - write a record into exactly the len bytes rec_size() said */
INLINE void rec_encode(rec_codec *codec, const char *what, void *out, size_t len,
		       const void *rec)
{
	struct rec r = { .out = out, .len = len };

	codec(&r, (void *) rec);
	if (r.pos != len)
		msg_panic("store: %s record is %zu bytes, sized as %zu", what, r.pos, len);
}

/* claim_codec - the claim record */
INLINE void claim_codec(struct rec *r, struct store_claim *c)
{
	uint8_t qlen = r->dec ? 0 : (uint8_t) strnlen(c->qid, STORE_QID_SIZE - 1);

	rec_version(r, REC_VERSION);
	rec_u8(r, &qlen);
	if (r->dec && (qlen == 0 || qlen >= STORE_QID_SIZE))
		r->err = STORE_EINVAL;
	rec_bytes(r, c->qid, r->err ? 0 : qlen);
	rec_bytes(r, c->fingerprint, STORE_HASH_LEN);
	rec_i64(r, &c->accepted);
	rec_i64(r, &c->expires);
	if (r->dec && r->err == 0 && memchr(c->qid, 0, qlen) != NULL)
		r->err = STORE_EINVAL;
}

/* lmdb_claim_encode - write a claim record, return its length */
size_t lmdb_claim_encode(uint8_t out[STORE_CLAIM_REC_LEN], const struct store_claim *c)
{
	struct rec r = { .out = out, .len = STORE_CLAIM_REC_LEN };

	claim_codec(&r, (struct store_claim *) c);	/* encoding only reads it */
	return r.pos;
}

/* lmdb_claim_decode - read a claim record */
int lmdb_claim_decode(const void *p, size_t len, struct store_claim *c)
{
	struct rec r = { .dec = 1, .in = p, .len = len };

	memset(c, 0, sizeof(*c));
	claim_codec(&r, c);
	if (rec_end(&r) != 0) {
		memset(c, 0, sizeof(*c));
		return STORE_EINVAL;
	}
	return 0;
}

/* msg_codec - the immutable message record */
INLINE void msg_codec(struct rec *r, void *rec)
{
	struct store_msg *m = rec;
	uint8_t flags = r->dec ? 0 : (m->has_key ? MSG_HAS_KEY : 0)
	    | (m->smtputf8 ? MSG_SMTPUTF8 : 0) | (m->route ? MSG_ROUTE : 0);
	uint64_t dlen = r->dec ? 0 : m->data_len;
	const uint8_t *b;

	rec_version(r, MSG_VERSION);
	rec_i64(r, &m->accepted);
	rec_envelope(r, m, MSG_FIELDS);
	rec_u8(r, &flags);		/* what the message's story starts from */
	rec_bytes(r, m->keyhash, STORE_HASH_LEN);
	rec_i64(r, &m->ttl);
	if (flags & MSG_ROUTE)
		rec_str(r, &m->route, 0);
	rec_u64(r, &dlen);
	if (r->dec && r->err == 0 && dlen != r->len - r->pos)
		r->err = STORE_EINVAL;
	b = rec_bytes(r, r->dec ? NULL : m->data, r->err ? 0 : dlen);
	if (!r->dec || b == NULL)
		return;
	m->has_key = (flags & MSG_HAS_KEY) != 0;
	m->smtputf8 = (flags & MSG_SMTPUTF8) != 0;
	m->data_len = dlen;
	if (!r->nodata) {
		m->data = xmalloc(dlen + 1);
		memcpy(m->data, b, dlen);
		m->data[dlen] = 0;
	}
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
 * lmdb_msg_rec_decode - read the message record into m (whose qid the
 * caller set), its data only if with_data (else m->data stays NULL); the
 * delivery state fields are left zero. On failure m holds nothing that
 * needs freeing.
 */
int lmdb_msg_rec_decode(const void *p, size_t len, struct store_msg *m, int with_data)
{
	struct rec r = { .dec = 1, .in = p, .len = len, .nodata = !with_data };

	return rec_decode(msg_codec, &r, m, m);
}

/* queue_head - the delivery state record up to its recipients */
INLINE void queue_head(struct rec *r, struct store_msg *m)
{
	uint8_t flags = r->dec ? 0 : (m->inflight ? LMDB_QUEUE_INFLIGHT : 0)
	    | (m->held ? LMDB_QUEUE_HELD : 0);

	rec_version(r, REC_VERSION);
	rec_i32(r, &m->attempts);
	rec_i64(r, &m->next_attempt);
	rec_flags(r, &flags, LMDB_QUEUE_INFLIGHT | LMDB_QUEUE_HELD);
	if (r->dec) {
		m->inflight = (flags & LMDB_QUEUE_INFLIGHT) != 0;
		m->held = (flags & LMDB_QUEUE_HELD) != 0;
	}
}

/* queue_codec - the delivery state record */
INLINE void queue_codec(struct rec *r, void *rec)
{
	queue_head(r, rec);
	rec_envelope(r, rec, QUEUE_FIELDS);
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

/*
 * lmdb_queue_rec_decode - read delivery state into a message already
 * decoded by lmdb_msg_rec_decode(); the recipient counts must agree.
 * On failure m, the message record's part too, holds nothing to free.
 */
int lmdb_queue_rec_decode(const void *p, size_t len, struct store_msg *m)
{
	struct rec r = { .dec = 1, .in = p, .len = len };

	return rec_decode(queue_codec, &r, m, m);
}

/* lmdb_queue_rec_peek - the recipient count, next attempt and hold, cheaply */
int lmdb_queue_rec_peek(const void *p, size_t len, size_t *n_rcpts, int64_t *next_attempt,
			int *held)
{
	struct rec r = { .dec = 1, .in = p, .len = len };
	struct store_msg head;
	uint32_t n;

	queue_head(&r, &head);
	n = rec_rcpt_count(&r, 0, QUEUE_FIELDS);
	if (r.err)
		return STORE_EINVAL;
	if (n_rcpts)
		*n_rcpts = n;
	if (next_attempt)
		*next_attempt = head.next_attempt;
	if (held)
		*held = head.held;
	return 0;
}

/*
 * lmdb_queue_rec_patch - patch a copy of the record: set (v not 0) or
 * clear a flag (what: LMDB_QUEUE_INFLIGHT, LMDB_QUEUE_HELD), or make the
 * next attempt no later than v (LMDB_QUEUE_DUE)
 */
int lmdb_queue_rec_patch(void *p, size_t len, unsigned what, int64_t v)
{
	struct rec r = { .out = (uint8_t *) p + QUEUE_NEXT_OFF, .len = 8 };
	uint8_t *f = (uint8_t *) p + QUEUE_FLAGS_OFF;
	int64_t next;

	if (lmdb_queue_rec_peek(p, len, NULL, &next, NULL) != 0)
		return STORE_EINVAL;
	if (what != LMDB_QUEUE_DUE)
		*f = (uint8_t) (v ? *f | what : *f & ~what);
	else if (next > v)
		rec_i64(&r, &v);
	return 0;
}

/* hist_codec - the history record */
INLINE void hist_codec(struct rec *r, void *rec)
{
	static const uint8_t zero[STORE_HASH_LEN];
	struct store_story *s = rec;
	struct store_msg *m = &s->m;
	uint8_t flags = r->dec ? 0 : (s->has_key ? HIST_HAS_KEY : 0)
	    | (s->dropped ? HIST_DROPPED : 0) | (m->smtputf8 ? HIST_SMTPUTF8 : 0)
	    | (m->route ? HIST_ROUTE : 0);
	uint64_t size = r->dec ? 0 : m->data_len;

	rec_version(r, REC_VERSION);
	rec_i64(r, &m->accepted);
	rec_i64(r, &s->updated);
	rec_i64(r, &s->finished);
	rec_i64(r, &s->expires);
	rec_i64(r, &s->forgotten);
	rec_i64(r, &s->ttl);
	rec_flags(r, &flags, HIST_HAS_KEY | HIST_DROPPED | HIST_SMTPUTF8 | HIST_ROUTE);
	rec_bytes(r, r->dec || s->has_key ? s->keyhash : (void *) zero, STORE_HASH_LEN);
	rec_u32(r, &s->duplicates);
	rec_u32(r, &s->mismatches);
	rec_i32(r, &m->attempts);
	rec_u64(r, &size);
	rec_envelope(r, m, HIST_FIELDS);
	if (flags & HIST_ROUTE)
		rec_str(r, &m->route, 0);
	if (r->dec) {
		s->has_key = (flags & HIST_HAS_KEY) != 0;
		s->dropped = (flags & HIST_DROPPED) != 0;
		m->smtputf8 = (flags & HIST_SMTPUTF8) != 0;
		m->data_len = size;
	}
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
	struct rec r = { .dec = 1, .in = p, .len = len };

	return rec_decode(hist_codec, &r, s, &s->m);
}
