/*
 * NAME
 *	store_rule 3
 * SUMMARY
 *	the product's rules about stored things, written once for every backend
 * SYNOPSIS
 *	#include "store/store_backend.h"
 *
 *	int store_claim_live(const struct store_claim *c, int64_t now,
 *			     int (*queued) (void *arg, const char *qid), void *arg);
 *	int store_msg_valid(const struct store_msg *m);
 *	int store_update_valid(const struct store_msg *m);
 *	int64_t store_story_ttl(const struct store_msg *m);
 *	int64_t store_story_expires(int64_t finished, int64_t ttl);
 *	int store_qid_ok(const char *qid);
 * DESCRIPTION
 *	A backend stores and fetches; what its records mean is decided
 *	here, so that LMDB and PostgreSQL cannot come to differ.
 *
 *	store_claim_live() is SPEC section 4: a claim expires key_ttl after
 *	acceptance, but never while its message is still queued. Whether
 *	the message is queued is the backend's fact, asked through queued()
 *	only once the claim has expired: a lookup that LMDB then makes, and
 *	that PostgreSQL read with the claim.
 *
 *	store_qid_ok() says whether a QID can be stored: 1 to
 *	STORE_QID_SIZE - 1 bytes. store_msg_valid() says whether a message
 *	can be spooled at all: a QID that fits, a sender and client (maybe ""), at least one
 *	recipient, each with an address and a state store.h knows, and
 *	data where data_len says there is some. store_update_valid() says
 *	whether m can be a delivery update: a QID and recipients, each in
 *	a state store.h knows. store.c applies both before a backend sees m.
 *
 *	store_story_ttl() is how long a message's story is kept once it has
 *	left the spool: what acceptance gave it (key_ttl, so that a story
 *	outlives the claims it explains), or STORE_STORY_TTL for a message
 *	that came with none. store_story_expires() is when, for a message
 *	that left at finished with ttl (its own, or its story's): the first
 *	microsecond after that ttl. PostgreSQL reads the ttl where it writes
 *	the expiry, in one statement, so it has this rule in SQL as well
 *	(PG_STORY_EXPIRES, store_pg_int.h); test_story checks both agree.
 * DIAGNOSTICS
 *	store_claim_live(): 1 live, 0 not, or the STORE_E* code queued()
 *	gave. store_msg_valid(), store_update_valid(): 1 or 0.
 */
#include <stdint.h>
#include <string.h>

#include "store_backend.h"

/* store_claim_live - does the claim still answer for its key at now? */
int store_claim_live(const struct store_claim *c, int64_t now,
		     int (*queued) (void *arg, const char *qid), void *arg)
{
	if (now < c->expires)
		return 1;
	return queued(arg, c->qid);
}

/* store_qid_ok - can this be a stored QID: 1 to STORE_QID_SIZE - 1 bytes */
int store_qid_ok(const char *qid)
{
	size_t n;

	return qid != NULL && (n = strnlen(qid, STORE_QID_SIZE)) > 0 && n < STORE_QID_SIZE;
}

/* store_story_ttl - how long m's story is kept once m has left the spool */
int64_t store_story_ttl(const struct store_msg *m)
{
	return m->ttl > 0 ? m->ttl : STORE_STORY_TTL;
}

/* store_story_expires - when a story expires whose message left the spool at finished */
int64_t store_story_expires(int64_t finished, int64_t ttl)
{
	return finished + (ttl > 0 ? ttl : STORE_STORY_TTL) + 1;
}

/*
 * rcpts_valid - a QID that fits and recipients, each in a state store.h
 * knows and, if addr, with an address: what an update needs, and a message
 */
static int rcpts_valid(const struct store_msg *m, int addr)
{
	size_t i;

	if (!store_qid_ok(m->qid) || m->n_rcpts == 0 || m->rcpts == NULL)
		return 0;
	for (i = 0; i < m->n_rcpts; i++)
		if (m->rcpts[i].state > STORE_RCPT_UNCONFIRMED || (addr && m->rcpts[i].addr == NULL))
			return 0;
	return 1;
}

/* store_msg_valid - can this message be spooled? */
int store_msg_valid(const struct store_msg *m)
{
	return m->from != NULL && m->client != NULL && m->n_rcpts <= INT32_MAX
	    && (m->data != NULL || m->data_len == 0) && rcpts_valid(m, 1);
}

/* store_update_valid - can m be a delivery update? */
int store_update_valid(const struct store_msg *m)
{
	return rcpts_valid(m, 0);
}
