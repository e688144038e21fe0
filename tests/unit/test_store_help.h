/*
 * test_store_help - what the store's tests build messages and claims with
 * (test_store, test_store_lmdb, test_store_pg_*): a distinct hash per
 * number, a claim, a message with every field owned, spooling one in a
 * transaction, a transaction aborted, a deferral after a reroute,
 * looking a claim up, comparing two messages field by field, the stories'
 * figures and the last QID, the log captured.
 */
#ifndef TESTS_UNIT_TEST_STORE_HELP_H
#define TESTS_UNIT_TEST_STORE_HELP_H

#include "../../store/store_backend.h"
#include "test_store_fx.h"

#define NOW		1700000000000000LL	/* microseconds */
#define SEC		1000000LL

static const uint8_t KH[STORE_HASH_LEN] = { 0x4b };	/* the key every claim here is under */

/* txn_abort - end t, NULL or not, leaving nothing: a failed transaction's commit rolls back */
static inline void txn_abort(struct store_txn *t)
{
	if (t && store_txn_fail(t, STORE_EINVAL) != 0)
		store_txn_commit(t);
}

/* hash_of - a distinct test hash per number */
static inline void hash_of(uint8_t h[STORE_HASH_LEN], int i)
{
	int j;

	for (j = 0; j < STORE_HASH_LEN; j++)
		h[j] = (uint8_t) (i * 31 + j * 7 + (i >> 8));
	h[0] = (uint8_t) i;
	h[1] = (uint8_t) (i >> 8);
}

/* stories_of - store_stats()' stories and key index entries (a claim each: every one is under its key) */
static inline int stories_of(struct store *st, uint64_t *stories, uint64_t *keys)
{
	struct store_stats s;
	int err = store_stats(st, &s, STORE_STATS_STORIES);

	*stories = err == 0 ? s.stories : 0;	/* s is not filled in when it fails */
	*keys = err == 0 ? s.claims : 0;
	return err;
}

/* last_qid_of - store_stats()' greatest QID ever spooled */
static inline int last_qid_of(struct store *st, char qid[STORE_QID_SIZE])
{
	struct store_stats s;
	int err = store_stats(st, &s, 0);

	if (err == 0)
		strcpy(qid, s.last_qid);
	else
		qid[0] = '\0';	/* s is not filled in when it fails */
	return err;
}

/* claim_of - a claim record for a test */
static inline void claim_of(struct store_claim *c, const char *qid, int fp, int64_t expires)
{
	memset(c, 0, sizeof(*c));
	strcpy(c->qid, qid);
	memset(c->fingerprint, fp, STORE_HASH_LEN);
	c->accepted = NOW - SEC;
	c->expires = expires;
}

/* msg_new - a message with n recipients, every field owned */
static inline void msg_new(struct store_msg *m, const char *qid, size_t n, size_t data_len)
{
	size_t i;
	char a[64];

	memset(m, 0, sizeof(*m));
	strcpy(m->qid, qid);
	m->accepted = NOW;
	m->from = xstrdup("sender@example.com");
	m->envid = xstrdup("env-1");
	m->ret = 2;
	m->body = 2;
	m->client = xstrdup("helo.example [192.0.2.1]");
	m->user = xstrdup("alice");
	m->rcpts = xcalloc(n, sizeof(*m->rcpts));
	m->n_rcpts = n;
	for (i = 0; i < n; i++) {
		snprintf(a, sizeof(a), "rcpt%zu@example.net", i);
		m->rcpts[i].addr = xstrdup(a);
		m->rcpts[i].notify = (int) (i % 15);
		m->rcpts[i].orcpt = i % 2 ? NULL : xstrdup("rfc822;orig@example.net");
	}
	m->data = xmalloc(data_len + 1);
	for (i = 0; i < data_len; i++)
		m->data[i] = (char) (i * 7 + 3);
	m->data_len = data_len;
	m->next_attempt = NOW;
}

/* spool - one committed transaction: the message and a claim per hash */
static inline int spool(struct store *st, const struct store_msg *m, const int *hashes, size_t n,
		 int64_t expires)
{
	struct store_txn *t;
	struct store_claim c;
	uint8_t h[STORE_HASH_LEN];
	size_t i;
	int rc;

	if ((rc = store_txn_begin(st, NULL, 0, &t)) != 0)
		return rc;
	if (m)
		store_txn_msg_put(t, m);
	for (i = 0; i < n; i++) {
		hash_of(h, hashes[i]);
		claim_of(&c, m ? m->qid : "QIDNOMSG0000", 1, expires);
		store_txn_claim_put(t, KH, h, &c);
	}
	return store_txn_commit(t);
}

/*
 * reroute_then_defer - the shape of test_defer_after_reroute (test_store,
 * test_store_pg_lease): qid spooled on st under route from (NULL: the default
 * upstream), rerouted to to (due now) through changer, st or another node,
 * while its attempt is under way, then deferred by that attempt to later
 * under the route it was loaded with; to NULL: not rerouted, deferred on
 * its route
 */
static inline void reroute_then_defer(struct store *st, struct store *changer, const char *qid,
				      const char *from, const char *to, int64_t later)
{
	struct store_msg m;

	msg_new(&m, qid, 1, 50);
	m.route = from ? xstrdup(from) : NULL;
	CHECK_INT("spool", spool(st, &m, NULL, 0, 0), 0);
	if (to != NULL)
		CHECK_INT("rerouted during the attempt", store_msg_change(changer, qid,
				&(struct store_change) { -1, 1, to, clock_us() }), 0);
	m.attempts = 1;
	m.next_attempt = later;		/* from's retry */
	CHECK_INT("deferred under the route loaded", store_msg_update(st, &m), 0);
	store_msg_free(&m);
}

/*
 * claims_of - store_claims_get() in a read of its own where reads are
 * local, else in a transaction of its own, as the writer makes it
 */
static inline int claims_of(struct store *st, const uint8_t keyhash[STORE_HASH_LEN],
			    const uint8_t (*h)[STORE_HASH_LEN], size_t n, int64_t now,
			    struct store_claim *c)
{
	struct store_txn *t;
	int rc;

	if (store_caps(st) & STORE_CAP_LOCAL_READS)
		return store_claims_get(st, NULL, keyhash, h, n, now, c);
	if ((rc = store_txn_begin(st, (const uint8_t (*)[STORE_HASH_LEN]) keyhash, 1, &t)) == 0) {
		rc = store_claims_get(st, t, keyhash, h, n, now, c);
		txn_abort(t);
	}
	return rc;
}

/* claim_in - one claim inside t: 0 live (in *c), STORE_ENOTFOUND, or t's error */
static inline int claim_in(struct store_txn *t, const uint8_t keyhash[STORE_HASH_LEN],
			   const uint8_t hash[STORE_HASH_LEN], int64_t now, struct store_claim *c)
{
	int rc;

	memset(c, 0, sizeof(*c));
	rc = store_claims_get(NULL, t, keyhash, (const uint8_t (*)[STORE_HASH_LEN]) hash, 1, now, c);
	return rc != 0 ? rc : c->qid[0] != '\0' ? 0 : STORE_ENOTFOUND;
}

/* claim_found_under - 1 live, 0 absent, for a claim filed under keyhash; fails on an error */
static inline int claim_found_under(struct store *st, const uint8_t keyhash[STORE_HASH_LEN], int hash,
			     int64_t now, struct store_claim *out)
{
	uint8_t h[1][STORE_HASH_LEN];
	struct store_claim c;
	int rc;

	hash_of(h[0], hash);
	if ((rc = claims_of(st, keyhash, (const uint8_t (*)[STORE_HASH_LEN]) h, 1, now, &c)) != 0)
		fail_msg("claims_get(%d): got %d (%s), want 0", hash, rc, store_strerror(rc));
	if (out)
		*out = c;
	return c.qid[0] != '\0';
}

/* claim_found - the same under KH */
static inline int claim_found(struct store *st, int hash, int64_t now, struct store_claim *out)
{
	return claim_found_under(st, KH, hash, now, out);
}

/* msg_check - compare every field, saying which differs */
static inline void msg_check(const char *name, const struct store_msg *got, const struct store_msg *want)
{
	char what[128];
	size_t i;

	CHECK_STR(name, got->qid, want->qid);
	CHECK_INT("accepted", got->accepted, want->accepted);
	CHECK_STR("from", got->from, want->from);
	CHECK_STR("envid", got->envid, want->envid);
	CHECK_INT("ret", got->ret, want->ret);
	CHECK_INT("body", got->body, want->body);
	CHECK_STR("client", got->client, want->client);
	CHECK_STR("user", got->user, want->user);
	CHECK_STR("route", got->route, want->route);
	CHECK_INT("attempts", got->attempts, want->attempts);
	CHECK_INT("next_attempt", got->next_attempt, want->next_attempt);
	CHECK_INT("inflight", got->inflight, want->inflight);
	CHECK_INT("n_rcpts", got->n_rcpts, want->n_rcpts);
	for (i = 0; i < want->n_rcpts; i++) {
		snprintf(what, sizeof(what), "%s rcpt %zu addr", name, i);
		CHECK_STR(what, got->rcpts[i].addr, want->rcpts[i].addr);
		snprintf(what, sizeof(what), "%s rcpt %zu notify", name, i);
		CHECK_INT(what, got->rcpts[i].notify, want->rcpts[i].notify);
		snprintf(what, sizeof(what), "%s rcpt %zu orcpt", name, i);
		CHECK_STR(what, got->rcpts[i].orcpt, want->rcpts[i].orcpt);
		snprintf(what, sizeof(what), "%s rcpt %zu state", name, i);
		CHECK_INT(what, got->rcpts[i].state, want->rcpts[i].state);
		snprintf(what, sizeof(what), "%s rcpt %zu reply", name, i);
		CHECK_STR(what, got->rcpts[i].reply, want->rcpts[i].reply);
	}
	snprintf(what, sizeof(what), "%s data_len", name);
	CHECK_INT(what, got->data_len, want->data_len);
	if (want->data_len && memcmp(got->data, want->data, want->data_len) != 0)
		fail_msg("%s: data differs", name);
	if (got->data == NULL || got->data[got->data_len] != 0)
		fail_msg("%s: data not NUL-terminated past data_len", name);
}

struct list_acc {
	char seen[16][STORE_QID_SIZE];
	int64_t next[16];
	int n;
	int stop_at;
};

/* list_cb - collect queue entries; stop with 99 at stop_at */
static inline int list_cb(void *arg, const struct store_msg *m)
{
	struct list_acc *a = arg;

	if (a->n == a->stop_at)
		return 99;
	strcpy(a->seen[a->n], m->qid);
	a->next[a->n++] = m->next_attempt;
	return 0;
}

/* log_capture - stderr (where the log goes here) into a temporary file; the old stderr */
static inline int log_capture(FILE **tmp)
{
	int old = dup(2);

	assert_true(old >= 0);
	assert_non_null(*tmp = tmpfile());
	assert_int_equal(dup2(fileno(*tmp), 2), 2);
	return old;
}

/* log_captured - stderr back, and what was logged meanwhile (as much as fits in text) */
static inline void log_captured(int old, FILE *tmp, char *text, size_t size)
{
	size_t n;

	assert_int_equal(dup2(old, 2), 2);
	close(old);
	rewind(tmp);
	n = fread(text, 1, size - 1, tmp);
	text[n] = 0;
	fclose(tmp);
	fputs(text, stderr);
}

#endif
