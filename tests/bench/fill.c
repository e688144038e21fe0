/*
 * NAME
 *	fill 1
 * SUMMARY
 *	pre-fill an idemrelay store with claims, for the store-size benchmark
 * SYNOPSIS
 *	fill [-r] [-n claims] [-b batch] [-m map_size_mb] [-t ttl_secs] store_dir
 *	fill -a [-n messages] [-b batch] [-s size] [-m map_size_mb] [-t ttl_secs] store_dir
 * DESCRIPTION
 *	Inserts claims with random 32-byte hashes (as claim hashes are:
 *	SHA-256 outputs) through store.h, batch claims per write
 *	transaction, so that ten million take a minute or two rather than
 *	the hours that submitting them over SMTP would. Each claim names a
 *	QID that is not in the spool and expires ttl_secs from now (default
 *	one day), as live claims of messages already delivered do.
 *
 *	The hashes are generated first and inserted in sorted order: each
 *	transaction then dirties only its own stretch of leaf pages, where
 *	random order rewrites most of the tree in every transaction (LMDB is
 *	copy-on-write) and ten million take an hour. The price is a denser
 *	tree (pages filled by appends) than the daemon's random inserts
 *	build; -r inserts in random order, to measure that layout.
 *
 *	-a makes an old store instead, as a daemon leaves it after n
 *	one-recipient messages with a key each were accepted and delivered
 *	(issue 27 target 2): per message a claim under a random key, in
 *	random order as the daemon inserts them, and its story with its
 *	expiry entry, written through store.h as the daemon writes them:
 *	each message of size bytes is spooled (store_txn_msg_put) and its
 *	delivery recorded (store_txn_msg_update), batch messages a
 *	transaction. The messages were accepted a millisecond apart, the
 *	last one just now, with QIDs as queue/qid.c makes them from those
 *	times, so that a daemon opened on the store goes on after them;
 *	their claims and stories stay live for ttl_secs. What such a store
 *	has and this one lacks is the free list that a backlog leaves
 *	behind: the bench runs a load through the daemon for that. Its own
 *	batches leave what a daemon's one-message commits would not: a free
 *	list of about a third of the file (63,703 pages after a million, in
 *	a few large records) and the file cached in large folios; a daemon
 *	started on it drops the cache and compacts the store
 *	(store/lmdb/store_compact.c), as after any such history.
 *
 *	Prints one line: claims= secs= claims_per_s= map_used= bytes_per_claim=
 *	(map_used is the store's used pages, from store_stats; bytes_per_claim
 *	is map_used over the claims in the store, spool included, so fill an
 *	empty store to read it).
 * DIAGNOSTICS
 *	Exit status 0 on success, 1 with a message on failure.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "../../store/store.h"
#include "../../store/lmdb/store_lmdb.h"

/* splitmix64 - a fast, well-mixed 64-bit sequence */
static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* qid_of - "00FILL" and ten digits: a well-formed QID no message has */
static void qid_of(char *qid, long j)
{
	int k;

	memcpy(qid, "00FILL", 6);
	for (k = 15; k >= 6; k--, j /= 10)
		qid[k] = (char) ('0' + j % 10);
	qid[16] = 0;
}

static int64_t wall_us(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (int64_t) tv.tv_sec * 1000000 + tv.tv_usec;
}

/* qid_at - a QID as queue/qid.c makes it: 12 base-32 digits of a time in µs */
static void qid_at(char *qid, uint64_t us)
{
	static const char digits[] = "0123456789ABCDEFGHIJKLMNOPQRSTUV";
	int k;

	for (k = 11; k >= 0; k--, us >>= 5)
		qid[k] = digits[us & 31];
	qid[12] = 0;
}

static void random_hash(uint64_t *seed, uint8_t out[STORE_HASH_LEN])
{
	uint64_t w;
	size_t k;

	for (k = 0; k < STORE_HASH_LEN; k += 8) {
		w = splitmix64(seed);
		memcpy(out + k, &w, 8);
	}
}

/*
 * fill_aged - n messages accepted and delivered, batch a transaction:
 * each its claim, its story and the story's expiry entry (see -a)
 */
static int fill_aged(struct store *st, long n, long batch, long size, long ttl, uint64_t seed)
{
	static const char head[] = "From: load@example.com\r\nTo: rcpt0@example.com\r\n"
	    "Subject: aged\r\n\r\n";
	struct store_rcpt rcpt = { 0 };
	struct store_claim c;
	struct store_msg m;
	uint8_t keyhash[STORE_HASH_LEN], hash[STORE_HASH_LEN];
	int64_t t0 = wall_us() - (int64_t) n * 1000;
	long i, j;
	int rc;

	memset(&m, 0, sizeof(m));
	m.data_len = (size_t) (size > (long) sizeof(head) ? size : (long) sizeof(head));
	if ((m.data = malloc(m.data_len)) == NULL) {
		fprintf(stderr, "fill: out of memory\n");
		return 1;
	}
	memset(m.data, 'x', m.data_len);
	memcpy(m.data, head, sizeof(head) - 1);
	m.from = "load@example.com";
	m.client = "fill [127.0.0.1]";
	m.rcpts = &rcpt;
	m.n_rcpts = 1;
	m.has_key = 1;
	m.ttl = (int64_t) ttl * 1000000;
	rcpt.addr = "rcpt0@example.com";
	for (i = 0; i < n; i += batch) {
		struct store_txn *t;

		if ((rc = store_txn_begin(st, NULL, 0, &t)) != 0) {
			fprintf(stderr, "fill: begin: %s\n", store_strerror(rc));
			return 1;
		}
		for (j = i; j < n && j < i + batch; j++) {
			random_hash(&seed, keyhash);
			random_hash(&seed, hash);
			m.accepted = t0 + (int64_t) j * 1000;
			qid_at(m.qid, (uint64_t) m.accepted);
			memcpy(m.keyhash, keyhash, STORE_HASH_LEN);
			rcpt.state = STORE_RCPT_QUEUED;
			rcpt.reply = NULL;
			m.attempts = 0;
			store_txn_msg_put(t, &m);
			memset(&c, 0, sizeof(c));
			strcpy(c.qid, m.qid);
			memcpy(c.fingerprint, hash, STORE_HASH_LEN);
			c.accepted = m.accepted;
			c.expires = m.accepted + m.ttl;
			store_txn_claim_put(t, keyhash, hash, &c);
			rcpt.state = STORE_RCPT_SENT;
			rcpt.reply = "250 2.0.0 Ok";
			m.attempts = 1;
			store_txn_msg_update(t, &m);
		}
		if ((rc = store_txn_commit(t)) != 0) {
			fprintf(stderr, "fill: commit after %ld messages: %s\n", i, store_strerror(rc));
			return 1;
		}
	}
	free(m.data);
	return 0;
}

static int cmp_hash(const void *a, const void *b)
{
	return memcmp(a, b, STORE_HASH_LEN);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	long n = 1000, batch = 1000000, ttl = 86400, map_mb = 8192, i, j;
	long size = 2000;
	int random_order = 0, aged = 0;
	uint8_t (*hashes)[STORE_HASH_LEN];
	struct store *st;
	struct store_stats ss;
	struct store_claim c;
	uint64_t seed, w;
	char err[256];
	double t0, secs;
	int opt, rc;

	while ((opt = getopt(argc, argv, "arn:b:m:s:t:")) != -1) {
		switch (opt) {
		case 'a': aged = 1; break;
		case 'r': random_order = 1; break;
		case 's': size = atol(optarg); break;
		case 'n': n = atol(optarg); break;
		case 'b': batch = atol(optarg); break;
		case 'm': map_mb = atol(optarg); break;
		case 't': ttl = atol(optarg); break;
		default: goto usage;
		}
	}
	if (optind != argc - 1 || n < 0 || batch < 1)
		goto usage;
	if (store_lmdb_open(&st, argv[optind], (uint64_t) map_mb << 20, err, sizeof(err)) != 0) {
		fprintf(stderr, "fill: %s\n", err);
		return 1;
	}
	seed = (uint64_t) wall_us() ^ ((uint64_t) getpid() << 32);
	memset(&c, 0, sizeof(c));
	t0 = now();
	if (aged && fill_aged(st, n, batch, size, ttl, seed) != 0)
		return 1;
	if ((hashes = malloc((size_t) (n && !aged ? n : 1) * STORE_HASH_LEN)) == NULL) {
		fprintf(stderr, "fill: out of memory for %ld hashes\n", n);
		return 1;
	}
	for (i = 0; i < n && !aged; i++)
		for (size_t k = 0; k < STORE_HASH_LEN; k += 8) {
			w = splitmix64(&seed);
			memcpy(hashes[i] + k, &w, 8);
		}
	if (!random_order && !aged)
		qsort(hashes, (size_t) n, STORE_HASH_LEN, cmp_hash);
	for (i = 0; i < n && !aged; i += batch) {
		struct store_txn *t;

		if ((rc = store_txn_begin(st, NULL, 0, &t)) != 0) {
			fprintf(stderr, "fill: begin: %s\n", store_strerror(rc));
			return 1;
		}
		c.accepted = wall_us();
		c.expires = c.accepted + (int64_t) ttl * 1000000;
		for (j = i; j < n && j < i + batch; j++) {
			memcpy(c.fingerprint, hashes[j], sizeof(c.fingerprint));
			qid_of(c.qid, j);
			store_txn_claim_put(t, hashes[j], hashes[j], &c);	/* a key each */
		}
		if ((rc = store_txn_commit(t)) != 0) {
			fprintf(stderr, "fill: commit after %ld claims: %s\n", i, store_strerror(rc));
			return 1;
		}
	}
	secs = now() - t0;
	if ((rc = store_stats(st, &ss, 0)) != 0) {
		fprintf(stderr, "fill: stats: %s\n", store_strerror(rc));
		return 1;
	}
	printf("claims=%llu secs=%.1f claims_per_s=%.0f map_used=%llu bytes_per_claim=%.1f\n",
	       (unsigned long long) ss.claims, secs, secs > 0 ? n / secs : 0.0,
	       (unsigned long long) ss.space.used,
	       ss.claims ? (double) ss.space.used / (double) ss.claims : 0.0);
	store_close(st);
	free(hashes);
	return 0;
usage:
	fprintf(stderr, "usage: fill [-r] [-n claims] [-b batch] [-m map_size_mb] [-t ttl_secs] store_dir\n"
		"       fill -a [-n messages] [-b batch] [-s size] [-m map_size_mb] [-t ttl_secs] store_dir\n");
	return 1;
}
