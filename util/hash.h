/*
 * NAME
 *	hash 3h
 * SUMMARY
 *	SHA-256 over byte strings, incremental or in one call (OpenSSL EVP)
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
void hash_hex(const uint8_t in[HASH_LEN], char out[2 * HASH_LEN + 1]);

#endif
