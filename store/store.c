/*
 * NAME
 *	store 3
 * SUMMARY
 *	the store interface: one call, the backend's entry
 * DESCRIPTION
 *	Every store.h function that a backend implements passes through
 *	to its table (store_backend.h); the few that are the same for every
 *	backend (freeing what the store gave, error text) live here. What
 *	a backend cannot do it declares (caps): a store without
 *	STORE_CAP_SHARED has no node number, no queue shared with other
 *	nodes, no lease to lose; one without STORE_CAP_OWN_SPACE no room
 *	to keep and no upkeep.
 */
#include <stdlib.h>
#include <string.h>

#include "../util/buf.h"
#include "../util/log.h"
#include "store_backend.h"

#define OPS(st)		((st)->ops)
#define TOPS(t)		((t)->ops)
#define SHARED(st)	(OPS(st)->caps & STORE_CAP_SHARED)

/* store_caps - what the backend declared it can do */
unsigned store_caps(const struct store *st)
{
	return OPS(st)->caps;
}

/* store_strerror - human text for a STORE_E* code */
const char *store_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case STORE_ENOTFOUND:
		return "not found";
	case STORE_ENOSPC:
		return "no space left (store map full, or no space left on device)";
	case STORE_EIO:
		return "store I/O error";
	case STORE_EINVAL:
		return "corrupt store record or invalid argument";
	case STORE_ELEASE:
		return "another node holds the message's lease";
	case STORE_EAGAIN:
		return "store unreachable, or a commit's outcome unknown";
	default:
		return "unknown store error";
	}
}

/* store_close - close through the backend; NULL-safe */
void store_close(struct store *st)
{
	if (st)
		OPS(st)->close(st);
}

/* store_health - STORE_H* bits: what the store is fit for now */
unsigned store_health(struct store *st)
{
	return OPS(st)->health(st);
}

/* store_upkeep - the backend's work outside transactions, for the writer between commits */
int store_upkeep(struct store *st)
{
	return OPS(st)->caps & STORE_CAP_OWN_SPACE ? OPS(st)->upkeep(st) : 0;
}

/*
 * store_claims_get - in t, unless a step failed before; or in a read of
 * st's own (the event loop's), only where reads are local
 */
int store_claims_get(struct store *st, struct store_txn *t, const uint8_t keyhash[STORE_HASH_LEN],
		     const uint8_t (*hashes)[STORE_HASH_LEN], size_t n, int64_t now,
		     struct store_claim *claims)
{
	if (t ? t->err != 0 : !(OPS(st)->caps & STORE_CAP_LOCAL_READS))
		return t ? t->err : STORE_EINVAL;
	if (n == 0)
		return 0;
	memset(claims, 0, n * sizeof(*claims));
	return (t ? TOPS(t) : OPS(st))->claims_get(st, t, keyhash, hashes, n, now, claims);
}

int store_txn_begin(struct store *st, const uint8_t (*keys)[STORE_HASH_LEN], size_t n,
		    struct store_txn **out)
{
	return OPS(st)->txn_begin(st, keys, n, out);
}

/* step - may a step of t run: none failed before, and its arguments are valid (else t fails) */
static int step(struct store_txn *t, int valid)
{
	t->steps++;
	return store_txn_fail(t, valid ? 0 : STORE_EINVAL) == 0;
}

void store_txn_claim_put(struct store_txn *t, const uint8_t keyhash[STORE_HASH_LEN],
			 const uint8_t hash[STORE_HASH_LEN], const struct store_claim *c)
{
	if (step(t, store_qid_ok(c->qid)))
		TOPS(t)->txn_claim_put(t, keyhash, hash, c);
}

/* store_txn_replay - a found claim the batch answers with: only a shared store records it */
void store_txn_replay(struct store_txn *t, const uint8_t keyhash[STORE_HASH_LEN],
		      const uint8_t hash[STORE_HASH_LEN])
{
	if (t->err == 0 && (TOPS(t)->caps & STORE_CAP_SHARED))
		TOPS(t)->txn_replay(t, keyhash, hash);
}

void store_txn_msg_put(struct store_txn *t, const struct store_msg *m)
{
	if (step(t, store_msg_valid(m)))
		TOPS(t)->txn_msg_put(t, m);
}

int store_txn_error(const struct store_txn *t)
{
	return t->err;
}

int store_txn_fail(struct store_txn *t, int err)
{
	if (t->err == 0)
		t->err = err;
	return t->err;
}

int store_txn_commit(struct store_txn *t)
{
	return t ? TOPS(t)->txn_commit(t) : STORE_EINVAL;
}

void store_txn_msg_set_inflight(struct store_txn *t, const char *qid, int on)
{
	if (step(t, store_qid_ok(qid)))
		TOPS(t)->txn_msg_set_inflight(t, qid, on);
}

void store_txn_msg_update(struct store_txn *t, const struct store_msg *m)
{
	if (step(t, store_update_valid(m)))
		TOPS(t)->txn_msg_update(t, m);
}

int store_node_id(struct store *st)
{
	return SHARED(st) ? st->node_id : -1;
}

int store_queue_take(struct store *st, int64_t now, size_t max, const char *const *skip,
		     size_t n_skip, int (*cb) (void *arg, const struct store_msg *m), void *arg)
{
	return SHARED(st) ? OPS(st)->queue_take(st, now, max, skip, n_skip, cb, arg) : 0;
}

int store_lease_renew(struct store *st)
{
	return SHARED(st) ? OPS(st)->lease_renew(st) : 0;
}

void store_lease_release(struct store *st, const char *qid, int64_t lease)
{
	if (SHARED(st) && store_qid_ok(qid))
		OPS(st)->lease_release(st, qid, lease);
}

int store_msg_load(struct store *st, const char *qid, struct store_msg *m)
{
	return OPS(st)->msg_load(st, qid, m);
}

/*
 * alone - one delivery write (m's update, else qid's mark) in a
 * transaction of its own; bare: the update without its story
 */
static int alone(struct store *st, const struct store_msg *m, const char *qid, int on, int bare)
{
	struct store_txn *t;
	int err;

	if ((err = store_txn_begin(st, NULL, 0, &t)) != 0)
		return err;
	t->bare = bare;
	if (m)
		store_txn_msg_update(t, m);
	else
		store_txn_msg_set_inflight(t, qid, on);
	return store_txn_commit(t);
}

int store_msg_set_inflight(struct store *st, const char *qid, int on)
{
	return alone(st, NULL, qid, on, 0);
}

/*
 * store_msg_update - a delivery update in a transaction of its own. A
 * store full of its own space takes it without the story: an outcome
 * that cannot be recorded may be sent again.
 */
int store_msg_update(struct store *st, const struct store_msg *m)
{
	int err = alone(st, m, NULL, 0, 0);

	if (err == STORE_ENOSPC && (OPS(st)->caps & STORE_CAP_OWN_SPACE)
	    && (err = alone(st, m, NULL, 0, 1)) == 0)
		msg_warn("%s: store full: delivery recorded without its history", m->qid);
	return err;
}

/*
 * store_msg_update_many - the outcomes of one delivery batch in one
 * transaction (one fsync or round trip instead of one per message); if
 * the batch fails, each message is recorded alone, so that one bad record
 * (or a lease lost) fails only itself
 */
int store_msg_update_many(struct store *st, struct store_msg *const *m, size_t n, int *errs)
{
	struct store_txn *t;
	size_t i;
	int bad = 0;

	if (n > 1 && store_txn_begin(st, NULL, 0, &t) == 0) {
		for (i = 0; i < n; i++)
			store_txn_msg_update(t, m[i]);
		if (store_txn_commit(t) == 0) {
			memset(errs, 0, n * sizeof(*errs));
			return 0;
		}
	}
	for (i = 0; i < n; i++)
		if ((errs[i] = store_msg_update(st, m[i])) != 0)
			bad = errs[i];
	return bad;
}

int store_msg_drop(struct store *st, const char *qid)
{
	return store_qid_ok(qid) ? OPS(st)->msg_drop(st, qid) : STORE_EINVAL;
}

/*
 * store_msg_change - hold, release, reroute or make due a queued message,
 * for every node; or make every one due (qid NULL), where the store
 * keeps that for every node
 */
int store_msg_change(struct store *st, const char *qid, const struct store_change *c)
{
	if (qid ? !store_qid_ok(qid) : c->hold >= 0 || c->set_route || c->due <= 0)
		return STORE_EINVAL;
	return qid || SHARED(st) ? OPS(st)->msg_change(st, qid, c) : 0;
}

/* store_msg_revive - a store of one node never loses a lease: nothing to revive */
int store_msg_revive(struct store *st, const struct store_msg *m)
{
	return SHARED(st) ? OPS(st)->msg_revive(st, m) : STORE_ENOTFOUND;
}

/* store_stats - the backend's figures; a store of one node has one */
int store_stats(struct store *st, struct store_stats *s, unsigned what)
{
	int err;

	if (!SHARED(st) && what == STORE_STATS_NODES) {
		memset(s, 0, sizeof(*s));
		s->nodes = 1;
		return 0;
	}
	err = OPS(st)->stats(st, s, what);
	if (!SHARED(st))
		s->nodes = 1;
	return err;
}

int store_queue_walk(struct store *st, unsigned how,
		     int (*cb) (void *arg, const struct store_msg *m), void *arg)
{
	return OPS(st)->queue_walk(st, how, cb, arg);
}

int store_story_get(struct store *st, const char *qid, struct store_story *s)
{
	return OPS(st)->story_get(st, qid, s);
}

int store_key_qids(struct store *st, const uint8_t keyhash[STORE_HASH_LEN],
		   char (**qids)[STORE_QID_SIZE], size_t *n)
{
	return OPS(st)->key_qids(st, keyhash, qids, n);
}

int store_key_forget(struct store *st, const uint8_t keyhash[STORE_HASH_LEN],
		     const char *user, int64_t now, struct store_forget *out)
{
	return OPS(st)->key_forget(st, keyhash, user, now, out);
}

/* queued_by - is s's message still queued (and user's, if user is not NULL)? */
static int queued_by(const struct store_story *s, const char *user)
{
	return s->queued && (user == NULL || (s->m.user && strcmp(s->m.user, user) == 0));
}

/*
 * store_key_queued - the key's QIDs whose stories say queued (an
 * operator's action: a read a message is fine); a story gone meanwhile,
 * or unreadable, is not queued
 */
int store_key_queued(struct store *st, const uint8_t keyhash[STORE_HASH_LEN],
		     const char *user, char (**qids)[STORE_QID_SIZE], size_t *n)
{
	char (*all)[STORE_QID_SIZE];
	struct store_story s;
	size_t na, i;
	int err;

	*qids = NULL;
	*n = 0;
	if ((err = store_key_qids(st, keyhash, &all, &na)) != 0)
		return err == STORE_ENOTFOUND ? 0 : err;
	*qids = xcalloc(na, sizeof(**qids));
	for (i = 0; i < na && (err == 0 || err == STORE_ENOTFOUND || err == STORE_EINVAL); i++)
		if ((err = store_story_get(st, all[i], &s)) == 0) {
			if (queued_by(&s, user))
				strcpy((*qids)[(*n)++], all[i]);
			store_story_free(&s);
		}
	free(all);
	if (err == 0 || err == STORE_ENOTFOUND || err == STORE_EINVAL)
		return 0;
	free(*qids);
	*qids = NULL;
	*n = 0;
	return err;
}

int store_hist_count(struct store *st, const struct store_count *c, size_t n)
{
	return OPS(st)->hist_count(st, c, n);
}

int store_hist_expire(struct store *st, int64_t now, size_t max)
{
	return OPS(st)->hist_expire(st, now, max);
}

/* store_msg_free - free what the store gave in a message; the struct is zeroed */
void store_msg_free(struct store_msg *m)
{
	size_t i;

	if (m == NULL)
		return;
	free(m->from);
	free(m->envid);
	free(m->client);
	free(m->user);
	free(m->route);
	for (i = 0; m->rcpts && i < m->n_rcpts; i++) {
		free(m->rcpts[i].addr);
		free(m->rcpts[i].orcpt);
		free(m->rcpts[i].reply);
	}
	free(m->rcpts);
	free(m->data);
	free(m->lease_node);
	memset(m, 0, sizeof(*m));
}

/* store_story_free - release a story's fields */
void store_story_free(struct store_story *s)
{
	if (s == NULL)
		return;
	store_msg_free(&s->m);
	memset(s, 0, sizeof(*s));
}

/* store_forget_free - release what store_key_forget() gave */
void store_forget_free(struct store_forget *f)
{
	if (f == NULL)
		return;
	free(f->qids);
	memset(f, 0, sizeof(*f));
}
