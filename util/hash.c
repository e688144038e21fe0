/*
 * NAME
 *	hash 3
 * SUMMARY
 *	SHA-256 via OpenSSL's EVP interface; hex, the one encoder and decoder;
 *	tables' slots
 */
#include <pthread.h>
#include <sys/random.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "hash.h"
#include "log.h"

/* hash_init - start a SHA-256 computation */
void hash_init(struct hash_ctx *h)
{
	h->md = EVP_MD_CTX_new();
	if (h->md == NULL || EVP_DigestInit_ex(h->md, EVP_sha256(), NULL) != 1)
		msg_panic("hash_init: EVP_DigestInit_ex failed");
}

/* hash_update - feed bytes */
void hash_update(struct hash_ctx *h, const void *p, size_t n)
{
	if (n && EVP_DigestUpdate(h->md, p, n) != 1)
		msg_panic("hash_update: EVP_DigestUpdate failed");
}

/* hash_final - finish and release the context */
void hash_final(struct hash_ctx *h, uint8_t out[HASH_LEN])
{
	unsigned int len = HASH_LEN;

	if (EVP_DigestFinal_ex(h->md, out, &len) != 1)
		msg_panic("hash_final: EVP_DigestFinal_ex failed");
	EVP_MD_CTX_free(h->md);
	h->md = NULL;
}

/* hash_once - SHA-256 of one byte string */
void hash_once(const void *p, size_t n, uint8_t out[HASH_LEN])
{
	unsigned int len = HASH_LEN;

	if (EVP_Digest(p, n, out, &len, EVP_sha256(), NULL) != 1)
		msg_panic("hash_once: EVP_Digest failed");
}

/* hash_fnv - FNV-1a, 64 bits */
uint64_t hash_fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;
	size_t i;

	for (i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ULL;
	return h;
}

static pthread_once_t slot_once = PTHREAD_ONCE_INIT;
static uint64_t slot_mult;		/* odd, random, drawn once */

/* slot_init - draw the multiplier of hash_slot() */
static void slot_init(void)
{
	if (getrandom(&slot_mult, sizeof(slot_mult), 0) != sizeof(slot_mult))
		msg_panic("hash_slot: getrandom: %m");
	slot_mult |= 1;
}

/*
 * hash_slot - splitmix64's finalizer, then multiply-shift: the product's
 * top log2(cap) bits. The finalizer, fixed and one-to-one, keeps the
 * multiply's promise (two keys share a slot for at most 2/cap of the
 * multipliers) and spreads the keys' structure first: the FNVs of
 * sequential QIDs, near an arithmetic progression, crowded the slots of
 * one multiplier in a few hundred (tests/unit/test_hash.c)
 */
size_t hash_slot(uint64_t x, size_t cap)
{
	pthread_once(&slot_once, slot_init);
	x = (x ^ x >> 30) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ x >> 27) * 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return (size_t) ((x * slot_mult) >> (64 - __builtin_ctzll(cap)));
}

/* hash_hex - lower-case hex form */
void hash_hex(const uint8_t *in, size_t n, char *out)
{
	static const char hex[] = "0123456789abcdef";
	size_t i;

	for (i = 0; i < n; i++) {
		out[2 * i] = hex[in[i] >> 4];
		out[2 * i + 1] = hex[in[i] & 15];
	}
	out[2 * n] = 0;
}

/* hash_unhex - 2n hex digits, pairs maybe ':'-separated, to n bytes */
int hash_unhex(const char *s, uint8_t *out, size_t n)
{
	size_t i;
	int hi, lo;

	for (i = 0; i < n; i++) {
		if (i > 0 && *s == ':' && s[1] != 0)
			s++;
		if ((hi = OPENSSL_hexchar2int((unsigned char) s[0])) < 0
		    || (lo = OPENSSL_hexchar2int((unsigned char) s[1])) < 0)
			return -1;
		out[i] = (uint8_t) (hi << 4 | lo);
		s += 2;
	}
	return *s == 0 ? 0 : -1;
}
