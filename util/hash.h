/*
 * NAME
 *	hash 3h
 * SUMMARY
 *	SHA-256 over byte strings, incremental or in one call (OpenSSL EVP);
 *	FNV-1a for tables; a table's slot, keyed per process; digests to hex
 *	and back
 */
#ifndef UTIL_HASH_H
#define UTIL_HASH_H

#include <stddef.h>
#include <stdint.h>

#define HASH_LEN 32

struct hash_ctx {
	void *md;		/* EVP_MD_CTX, owned */
};

void hash_init(struct hash_ctx *h);
void hash_update(struct hash_ctx *h, const void *p, size_t n);
void hash_final(struct hash_ctx *h, uint8_t out[HASH_LEN]);	/* frees the context */
void hash_once(const void *p, size_t n, uint8_t out[HASH_LEN]);

/*
 * hash_fnv - FNV-1a (64 bits) of n bytes, going on from h (HASH_FNV_INIT to
 * begin): for tables and change detection, never where an attacker chooses
 */
#define HASH_FNV_INIT	14695981039346656037ULL
uint64_t hash_fnv(uint64_t h, const void *p, size_t n);

/*
 * hash_slot - the slot of a table of cap entries (a power of two, >= 2)
 * for x (a digest's 64 bits, or FNV of a key): a fixed mix, then
 * multiply-shift by a random odd multiplier drawn once a process, so
 * that keys a client chooses (by trial, offline) cannot be aimed at one
 * slot's probe chain, and keys in sequence (QIDs) spread for every draw
 */
size_t hash_slot(uint64_t x, size_t cap);

/* hash_hex - n bytes (a digest, or its first n) as 2n lower-case hex digits and a NUL */
void hash_hex(const uint8_t *in, size_t n, char *out);

/*
 * hash_unhex - exactly n bytes from 2n hex digits, either case, its pairs
 * optionally one ':' apart (as openssl prints a fingerprint): 0, or -1
 * for anything else (a sign, a space, a digit short or over)
 */
int hash_unhex(const char *s, uint8_t *out, size_t n);

#endif
