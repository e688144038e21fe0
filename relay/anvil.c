/*
 * NAME
 *	anvil 3
 * SUMMARY
 *	per-client connection limits: how many at once, how many a minute
 * DESCRIPTION
 *	See anvil.h. Clients live in a hash table keyed by their address as
 *	16 octets (IPv4 mapped into IPv6, an IPv6 address cut to its prefix).
 *	hash_slot() (util/hash.h), keyed per process, places it: the first
 *	half through it, then the second half XORed in and the sum through it
 *	again, so that no client can choose addresses that share a chain (an
 *	IPv4 address fills the second half, an IPv6 prefix up to /64 the
 *	first, a longer one both; the two halves XORed alone would put every
 *	pair of one XOR in one chain). A client is remembered while it has a
 *	connection open or its minute has not ended; anvil_sweep() forgets
 *	the others, so the table holds at most the clients of the last
 *	minute. Rates count in fixed minutes from a client's first
 *	connection in them, as Postfix's anvil does.
 * DIAGNOSTICS
 *	"ADDR: connection count limit N exceeded", "ADDR: connection rate
 *	limit N a minute exceeded", once per episode.
 */
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "../util/buf.h"
#include "../util/hash.h"
#include "../util/log.h"
#include "anvil.h"

#define ANVIL_MINUTE	60000000LL	/* the rate's time unit, microseconds */
#define ANVIL_BUCKETS	4096		/* a power of two */

struct anvil_client {
	uint8_t key[16];
	size_t conns;			/* open now */
	int64_t minute;			/* start of its current minute */
	unsigned opened;		/* connections opened in it */
	int warned_count, warned_rate;	/* this episode is logged */
	int64_t auth_minute;		/* start of its AUTH minute */
	unsigned auths;			/* AUTH attempts in it */
	int warned_auth;
	int auth_busy;			/* a password check of its is running */
	struct anvil_wait *wait, **wait_tail;	/* checks in line, oldest first */
	struct anvil_client *next;	/* hash chain */
};

struct anvil {
	struct anvil_client *bucket[ANVIL_BUCKETS];
	size_t n;
	int count, rate, auth_rate, prefix;
};

/* anvil_new - an empty table; anvil_set() gives it the limits and the prefix before a client */
struct anvil *anvil_new(void)
{
	return xcalloc(1, sizeof(struct anvil));
}

/* anvil_set - the limits; 0: off (the prefix is 1-128: conf.c says so) */
void anvil_set(struct anvil *a, int count, int rate, int auth_rate, int ipv6_prefix)
{
	a->count = count;
	a->rate = rate;
	a->auth_rate = auth_rate;
	a->prefix = ipv6_prefix;
}

/* anvil_free - every client, then the table; NULL-safe */
void anvil_free(struct anvil *a)
{
	struct anvil_client *cl, *next;
	size_t i;

	if (a == NULL)
		return;
	for (i = 0; i < ANVIL_BUCKETS; i++)
		for (cl = a->bucket[i]; cl; cl = next) {
			next = cl->next;
			free(cl);
		}
	free(a);
}

/* anvil_key - the client's 16 octets: IPv4 mapped, IPv6 cut to the prefix */
static void anvil_key(const struct anvil *a, const struct sockaddr *sa, uint8_t key[16])
{
	const uint8_t *v6;
	int bits, i;

	memset(key, 0, 16);
	if (sa->sa_family == AF_INET) {
		key[10] = key[11] = 0xff;
		memcpy(key + 12, &((const struct sockaddr_in *) sa)->sin_addr, 4);
		return;
	}
	v6 = ((const struct sockaddr_in6 *) sa)->sin6_addr.s6_addr;
	if (IN6_IS_ADDR_V4MAPPED((const struct in6_addr *) v6)) {
		memcpy(key, v6, 16);
		return;
	}
	for (i = 0, bits = a->prefix; i < 16 && bits > 0; i++, bits -= 8)
		key[i] = bits >= 8 ? v6[i] : (uint8_t) (v6[i] & (0xff << (8 - bits)));
}

/* anvil_find - the client of key, made if new */
static struct anvil_client *anvil_find(struct anvil *a, const uint8_t key[16])
{
	uint64_t w[2];
	size_t b;
	struct anvil_client *cl;

	/*
	 * The first half through the keyed multiply before the second is
	 * mixed in: w[0] ^ w[1] alone would put every key of one XOR in one
	 * chain, whatever the key (a /48 at a prefix past 64 has 65,536).
	 */
	memcpy(w, key, 16);
	b = hash_slot(hash_slot(w[0], (size_t) 1 << 63) ^ w[1], ANVIL_BUCKETS);

	for (cl = a->bucket[b]; cl; cl = cl->next)
		if (memcmp(cl->key, key, 16) == 0)
			return cl;
	cl = xcalloc(1, sizeof(*cl));
	memcpy(cl->key, key, 16);
	cl->next = a->bucket[b];
	a->bucket[b] = cl;
	a->n++;
	return cl;
}

/* anvil_connect - count a connection, or say which limit refuses it */
enum anvil_verdict anvil_connect(struct anvil *a, const struct sockaddr *sa, const char *addr,
				 int exempt, int64_t now_us, struct anvil_client **out)
{
	struct anvil_client *cl;
	uint8_t key[16];

	*out = NULL;
	if (exempt)
		return ANVIL_OK;
	anvil_key(a, sa, key);
	cl = anvil_find(a, key);
	if (now_us - cl->minute >= ANVIL_MINUTE) {
		cl->minute = now_us;
		cl->opened = 0;
		cl->warned_rate = 0;
	}
	if (a->count && cl->conns >= (size_t) a->count) {
		if (!cl->warned_count++)
			msg_warn("%s: connection count limit %d exceeded", addr, a->count);
		return ANVIL_COUNT;
	}
	if (a->rate && cl->opened >= (unsigned) a->rate) {
		if (!cl->warned_rate++)
			msg_warn("%s: connection rate limit %d a minute exceeded", addr, a->rate);
		return ANVIL_RATE;
	}
	cl->opened++;
	cl->conns++;
	*out = cl;
	return ANVIL_OK;
}

/* anvil_disconnect - a counted connection ended; NULL-safe */
void anvil_disconnect(struct anvil *a, struct anvil_client *cl)
{
	if (cl == NULL || cl->conns == 0)
		return;
	cl->conns--;
	if (a->count == 0 || cl->conns < (size_t) a->count)
		cl->warned_count = 0;	/* below the limit: a new episode may come */
}

/* anvil_count - the client's open connections */
size_t anvil_count(const struct anvil_client *cl)
{
	return cl ? cl->conns : 0;
}

/* anvil_top - the client with the most open connections; NULL if none has any */
const struct anvil_client *anvil_top(const struct anvil *a)
{
	const struct anvil_client *cl, *top = NULL;
	size_t i;

	for (i = 0; i < ANVIL_BUCKETS; i++)
		for (cl = a->bucket[i]; cl; cl = cl->next)
			if (cl->conns && (top == NULL || cl->conns > top->conns))
				top = cl;
	return top;
}

/* anvil_sweep - forget the clients with nothing open whose minute is over */
void anvil_sweep(struct anvil *a, int64_t now_us)
{
	struct anvil_client **p, *cl;
	size_t i;

	for (i = 0; i < ANVIL_BUCKETS; i++) {
		for (p = &a->bucket[i]; (cl = *p) != NULL;) {
			if (cl->conns == 0 && !cl->auth_busy && cl->wait == NULL
			    && now_us - cl->minute >= ANVIL_MINUTE
			    && now_us - cl->auth_minute >= ANVIL_MINUTE) {
				*p = cl->next;
				free(cl);
				a->n--;
			} else {
				p = &cl->next;
			}
		}
	}
}

/* anvil_clients - how many clients are remembered */
size_t anvil_clients(const struct anvil *a)
{
	return a->n;
}

/* anvil_auth_begin - the client's turn on the checking threads, or in line */
int anvil_auth_begin(struct anvil_client *cl, struct anvil_wait *w)
{
	if (cl == NULL)
		return 1;
	if (!cl->auth_busy) {
		cl->auth_busy = 1;
		return 1;
	}
	w->next = NULL;
	if (cl->wait == NULL)
		cl->wait_tail = &cl->wait;
	*cl->wait_tail = w;
	cl->wait_tail = &w->next;
	return 0;
}

/* anvil_auth_end - a check is done: the next in line goes, or the client is idle */
struct anvil_wait *anvil_auth_end(struct anvil_client *cl)
{
	struct anvil_wait *w;

	if (cl == NULL)
		return NULL;
	if ((w = cl->wait) == NULL) {
		cl->auth_busy = 0;
		return NULL;
	}
	cl->wait = w->next;		/* its turn: auth_busy stays set */
	if (cl->wait == NULL)
		cl->wait_tail = &cl->wait;
	return w;
}

/* anvil_auth_cancel - a check not wanted any more leaves the line: 1, or 0 if not in it */
int anvil_auth_cancel(struct anvil_client *cl, struct anvil_wait *w)
{
	struct anvil_wait **p;

	for (p = cl ? &cl->wait : NULL; p && *p; p = &(*p)->next)
		if (*p == w) {
			*p = w->next;
			if (*p == NULL)
				cl->wait_tail = p;
			return 1;
		}
	return 0;
}

/* anvil_auth_rate - one more AUTH of the client this minute, or 0 past the limit */
int anvil_auth_rate(struct anvil *a, struct anvil_client *cl, const char *addr, int64_t now_us)
{
	if (cl == NULL || a->auth_rate == 0)
		return 1;
	if (now_us - cl->auth_minute >= ANVIL_MINUTE) {
		cl->auth_minute = now_us;
		cl->auths = 0;
		cl->warned_auth = 0;
	}
	if (cl->auths >= (unsigned) a->auth_rate) {
		if (!cl->warned_auth++)
			msg_warn("%s: AUTH rate limit %d a minute exceeded", addr, a->auth_rate);
		return 0;
	}
	cl->auths++;
	return 1;
}
