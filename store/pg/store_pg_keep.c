/*
 * NAME
 *	store_pg_keep 3
 * SUMMARY
 *	the messages this node just accepted, kept for their first delivery without a load
 * SYNOPSIS
 *	#include "store/pg/store_pg_int.h"
 * DESCRIPTION
 *	A node delivers what it accepts at once, under the lease its INSERT
 *	took; loading the message back from PostgreSQL for that first attempt
 *	was a statement, a round trip and a reply of the whole body for every
 *	fresh message (a quarter of its statements, a third of the server's
 *	replies). Instead the transaction that puts a message keeps a copy
 *	(store_pg_keep_copy()), filed here once its commit is known with the
 *	token of the lease it got (store_pg_keep_add()): never a copy of a
 *	batch answered 451, voided or kept to be settled (store_pg_pend.c),
 *	whose commit may have committed all the same; and
 *	store_pg_msg_load() takes it from here (store_pg_keep_take()).
 *
 *	A copy is what the row holds only while nothing else wrote the row.
 *	It is taken once, and only while this node still holds the lease of
 *	that token: a lease lost, given up or taken anew means other writes,
 *	and the message is read from the database. Writes through this store
 *	handle forget the message's copy first: a delivery write (one without
 *	a load before it: the tests'), the operator's hold, reroute, drop and
 *	retry (idemrelayctl through this node's control socket), a revive. Another node's operator action
 *	cannot reach the copy, so a copy is used PG_KEEP_US at most: a hold
 *	from elsewhere within that time of the acceptance finds the message
 *	in the attempt of the node whose lease it is under since then (as
 *	idemrelayctl shows it: "active on NODE"), and that attempt goes on,
 *	as any attempt under way does (store_pg_queue.c).
 *
 *	A copy hangs on its lease's entry in the node's lease map
 *	(store_pg_lease.c), which owns it: it is found, taken and forgotten
 *	there in one lookup, under the map's lock, and dies with its lease
 *	(given up, lost at a renewal, or taken anew with another token). A
 *	delivery write forgot it by scanning every copy kept, under the lock
 *	acceptance takes to file one. A copy older than PG_KEEP_US is dropped
 *	by the take that finds it. At most PG_KEEP_MAX copies are kept and
 *	PG_KEEP_BYTES of memory, a copy counted whole (kept_size(): its body,
 *	envelope and recipients, a thousand recipients with long ORCPTs
 *	weighing more than many a body): past either, a new copy is not
 *	kept, until loads take (or drop) the copies of the backlog; a
 *	message larger than PG_KEEP_ONE is not kept. A ring of the copies,
 *	oldest first, dropped them by age and the oldest past a bound: a
 *	second record of what the lease map holds, its work at every copy
 *	kept and taken.
 * DIAGNOSTICS
 *	store_pg_keep_take() returns 0 or STORE_ENOTFOUND.
 */
#include <stdlib.h>
#include <string.h>

#include "../../util/buf.h"
#include "../../util/clock.h"
#include "store_pg_int.h"

#define PG_KEEP_ONE	(256u << 10)
#define PG_KEEP_US	(5 * 1000000LL)

/* dup - a copy of s, or NULL */
static char *dup(const char *s)
{
	return s ? xstrdup(s) : NULL;
}

/*
 * store_pg_keep_copy - an owned copy of m as put, or NULL when it is not
 * kept (a client's store, a large message)
 */
struct store_msg *store_pg_keep_copy(const struct pg_store *st, const struct store_msg *m)
{
	struct store_msg *k;
	size_t i;

	if (st->node == NULL || m->data_len > PG_KEEP_ONE || m->data == NULL)
		return NULL;
	k = xcalloc(1, sizeof(*k));
	*k = *m;
	k->from = dup(m->from);
	k->envid = dup(m->envid);
	k->client = dup(m->client);
	k->user = dup(m->user);
	k->route = dup(m->route);
	k->data = xmalloc(m->data_len + 1);
	memcpy(k->data, m->data, m->data_len);
	k->data[m->data_len] = 0;
	k->rcpts = xcalloc(m->n_rcpts ? m->n_rcpts : 1, sizeof(*k->rcpts));
	for (i = 0; i < m->n_rcpts; i++) {
		k->rcpts[i] = m->rcpts[i];
		k->rcpts[i].addr = dup(m->rcpts[i].addr);
		k->rcpts[i].orcpt = dup(m->rcpts[i].orcpt);
		k->rcpts[i].reply = dup(m->rcpts[i].reply);
	}
	k->held = 0;		/* as the row's defaults */
	k->lease_node = dup(st->node);
	k->lease_since = m->accepted;	/* k->lease: store_pg_keep_add()'s */
	return k;
}

/* str_size - what a copy of s takes */
static size_t str_size(const char *s)
{
	return s ? strlen(s) + 1 : 0;
}

/* kept_size - the memory copy k takes: the body, the envelope and every recipient */
static size_t kept_size(const struct store_msg *k)
{
	size_t n = sizeof(*k) + k->data_len + 1 + str_size(k->from) + str_size(k->envid)
	    + str_size(k->client) + str_size(k->user) + str_size(k->route)
	    + str_size(k->lease_node);
	size_t i;

	for (i = 0; i < k->n_rcpts; i++)
		n += sizeof(k->rcpts[i]) + str_size(k->rcpts[i].addr) + str_size(k->rcpts[i].orcpt)
		    + str_size(k->rcpts[i].reply);
	return n;
}

/* store_pg_keep_drop - free a copy */
void store_pg_keep_drop(struct store_msg *k)
{
	if (k == NULL)
		return;
	store_msg_free(k);
	free(k);
}

/* unhook - the copy hanging on lease entry e, or NULL, off it and no longer counted (lmu held) */
static struct store_msg *unhook(struct pg_store *st, struct pg_lease *e)
{
	struct store_msg *k = e->copy;

	if (k != NULL) {
		st->keep_bytes -= e->copy_bytes;
		st->n_keep--;
		e->copy = NULL;
		e->copy_bytes = 0;
	}
	return k;
}

/* store_pg_keep_unhang - drop the copy hanging on lease entry e, if any (lmu held) */
void store_pg_keep_unhang(struct pg_store *st, struct pg_lease *e)
{
	store_pg_keep_drop(unhook(st, e));
}

/*
 * store_pg_keep_add - file k (owned from here), put by a transaction
 * committed with the lease of token, on that lease's entry, if the
 * bounds leave room for it
 */
void store_pg_keep_add(struct pg_store *st, struct store_msg *k, int64_t token)
{
	size_t bytes = kept_size(k);
	struct pg_lease *e;

	k->lease = token;
	pthread_mutex_lock(&st->lmu);
	if ((e = store_pg_lease_entry(st, k->qid)) != NULL && e->token == token
	    && st->n_keep < PG_KEEP_MAX && st->keep_bytes + bytes <= PG_KEEP_BYTES) {
		store_pg_keep_unhang(st, e);
		e->copy = k;
		e->copy_bytes = bytes;
		e->copy_at = clock_mono_us();
		st->keep_bytes += bytes;
		st->n_keep++;
		k = NULL;
	}
	pthread_mutex_unlock(&st->lmu);
	store_pg_keep_drop(k);	/* the lease gone already, or no room: not kept */
}

/*
 * store_pg_keep_take - qid's copy into m (its fields owned by m from
 * here), if one is kept, not past PG_KEEP_US, and this node still holds
 * the lease it was filed with; 0, or STORE_ENOTFOUND (then m is untouched)
 */
int store_pg_keep_take(struct pg_store *st, const char *qid, struct store_msg *m)
{
	struct store_msg *k = NULL;
	struct pg_lease *e;

	pthread_mutex_lock(&st->lmu);
	/* hung only under its own token, and unhung when the token changes */
	if ((e = store_pg_lease_entry(st, qid)) != NULL && (k = unhook(st, e)) != NULL
	    && clock_mono_us() - e->copy_at > PG_KEEP_US) {
		store_pg_keep_drop(k);	/* kept too long: another node may have written the row */
		k = NULL;
	}
	pthread_mutex_unlock(&st->lmu);
	if (k == NULL)
		return STORE_ENOTFOUND;
	*m = *k;
	free(k);
	return 0;
}

/* store_pg_keep_forget - drop qid's copy, or every copy when qid is NULL (a flush, a close) */
void store_pg_keep_forget(struct pg_store *st, const char *qid)
{
	struct pg_lease *e;
	size_t i;

	pthread_mutex_lock(&st->lmu);
	if (qid != NULL && (e = store_pg_lease_entry(st, qid)) != NULL)
		store_pg_keep_unhang(st, e);
	for (i = 0; qid == NULL && i < st->cap_leases; i++)
		store_pg_keep_unhang(st, &st->leases[i]);
	pthread_mutex_unlock(&st->lmu);
}
