/*
 * NAME
 *	smtp_tx 3
 * SUMMARY
 *	mail transaction life cycle
 * DESCRIPTION
 *	smtp_tx_new() starts an empty transaction, smtp_tx_free() releases
 *	it with everything it owns. Recipients are appended with
 *	smtp_tx_add_rcpt(), which takes ownership of the strings in the
 *	given struct smtp_rcpt, and files its identity (smtp_rcpt_id(),
 *	smtp.h: the engine and the claims share it) in a tsearch tree, which
 *	owns it (the recipient's id points there), so that smtp_tx_has_rcpt()
 *	costs O(log n) string comparisons and no identity is computed twice: a client may give limits.recipients
 *	(up to 100000) recipients, on the thread that serves every session.
 *	A balanced tree, not a hash table: recipients are the client's
 *	choice, and a tree has no worst case for it to aim at. The recipient
 *	count is bounded by the session (max_rcpts), not here.
 */
#include <search.h>
#include <stdlib.h>
#include <string.h>

#include "smtp_parse.h"
#include "smtp_tx.h"

/* smtp_tx_new - an empty transaction: all zero, BODY and RET given as none */
struct smtp_tx *smtp_tx_new(void)
{
	return xcalloc(1, sizeof(struct smtp_tx));
}

/* smtp_rcpt_clear - free a recipient's strings */
void smtp_rcpt_clear(struct smtp_rcpt *r)
{
	free(r->addr);
	free(r->orcpt);
	r->addr = r->orcpt = NULL;
	r->notify = 0;
}

/* smtp_tx_free - release a transaction and all it owns */
void smtp_tx_free(struct smtp_tx *tx)
{
	size_t i;

	if (tx == NULL)
		return;
	for (i = 0; i < tx->n_rcpts; i++)
		smtp_rcpt_clear(&tx->rcpts[i]);
	free(tx->rcpts);
	tdestroy(tx->ids, free);
	free(tx->from);
	free(tx->envid);
	buf_free(&tx->data);
	free(tx);
}

/* id_cmp - tsearch order of identities */
static int id_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* smtp_tx_has_rcpt - does the transaction hold this identity (smtp_rcpt_id()) already? */
int smtp_tx_has_rcpt(const struct smtp_tx *tx, const char *id)
{
	return tfind(id, &tx->ids, id_cmp) != NULL;
}

/* smtp_tx_add_rcpt - append a recipient of an identity not held yet, taking its strings */
void smtp_tx_add_rcpt(struct smtp_tx *tx, struct smtp_rcpt *r, const char *id)
{
	char *own = xstrdup(id);

	if (tsearch(own, &tx->ids, id_cmp) == NULL)
		abort();		/* tsearch fails only without memory */
	if (tx->n_rcpts == tx->cap_rcpts) {
		tx->cap_rcpts = tx->cap_rcpts ? 2 * tx->cap_rcpts : 4;
		tx->rcpts = xrealloc(tx->rcpts, tx->cap_rcpts * sizeof(*tx->rcpts));
	}
	tx->rcpts[tx->n_rcpts] = *r;
	tx->rcpts[tx->n_rcpts++].id = own;
	r->addr = r->orcpt = NULL;
	r->notify = 0;
}
