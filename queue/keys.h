/*
 * NAME
 *	keys 3h
 * SUMMARY
 *	idempotency keys, claim hashes and fingerprints (SPEC section 3)
 * DESCRIPTION
 *	keys_derive() reads a finished message (CRLF lines, header block then
 *	body) and its envelope, and finds the key: the first header named in
 *	keys.headers, else the DSN ENVID, else the SHA-256 of the Message-ID.
 *	It also computes the fingerprint (SHA-256 over the envelope sender and
 *	the body, headers excluded) and notes where the key headers are, every
 *	one of them, so that keys_rewrite() can strip them; keys_free()
 *	releases that list.
 *
 *	Only hashes reach the store: keys_claim_hash() hashes (scope, key,
 *	recipient's identity) into the 32 bytes a claim is filed under; the
 *	identity (domain case folded) is the SMTP engine's smtp_rcpt_id().
 */
#ifndef QUEUE_KEYS_H
#define QUEUE_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "../conf/conf.h"
#include "../util/buf.h"
#include "../util/hash.h"

#define KEYS_MAX_LEN	200

enum keys_source { KEYS_NONE, KEYS_HEADER, KEYS_ENVID, KEYS_MESSAGE_ID };

struct keys_span {
	size_t off, len;	/* a header field, continuation lines included */
};

#define KEYS_MSGID_LOG	255		/* the part of a Message-ID logged */

struct keys_result {
	enum keys_source source;
	char key[KEYS_MAX_LEN + 1];	/* header value, ENVID, or Message-ID hash in hex */
	uint8_t fingerprint[HASH_LEN];
	struct keys_span *strip;	/* owned: key headers to remove when relaying */
	size_t n_strip, cap_strip;
	char message_id[KEYS_MSGID_LOG + 1];	/* its Message-ID, printable, for the log; "" none */
	const char *error;		/* set: refuse with this reply */
};

int keys_derive(const struct conf *c, const char *data, size_t len,
		const char *from, const char *envid, struct keys_result *r);
/* keys_free - release what keys_derive() left in r (whatever it returned) */
void keys_free(struct keys_result *r);
void keys_claim_hash(const char *scope, const char *key, const char *rcpt_id,
		     uint8_t out[HASH_LEN]);
const char *keys_source_name(enum keys_source s);
/*
 * keys_msgid_key - the key a Message-ID gives (SPEC 3): the hex SHA-256 of the
 * ID without the blanks around it, its one pair of <> and the blanks inside;
 * 0, or -1 if nothing is left. For keys_derive() and idemrelayctl alike
 */
int keys_msgid_key(const char *id, size_t len, char key[2 * HASH_LEN + 1]);
/* keys_index_hash - SHA-256 of the key alone: the key index idemrelayctl finds claims by */
void keys_index_hash(const char *key, uint8_t out[HASH_LEN]);

/* keys_rewrite - prepend a header and copy data without the strip spans; 0 or -1 */
int keys_rewrite(struct buf *out, const char *prepend, const char *data, size_t len,
		 const struct keys_result *r);

#endif
