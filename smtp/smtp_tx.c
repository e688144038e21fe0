/*
 * NAME
 *	smtp_tx 3
 * SUMMARY
 *	mail transaction life cycle
 * DESCRIPTION
 *	smtp_tx_new() starts an empty transaction, smtp_tx_free() releases
 *	it with everything it owns. Recipients are appended with
 *	smtp_tx_add_rcpt(), which takes ownership of the strings in the
 *	given struct smtp_rcpt. The recipient count is bounded by the
 *	session (max_rcpts), not here.
 */
#include <stdlib.h>
#include <string.h>

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
	free(tx->from);
	free(tx->envid);
	buf_free(&tx->data);
	free(tx);
}

/* smtp_tx_has_rcpt - is this recipient already in the transaction? */
int smtp_tx_has_rcpt(const struct smtp_tx *tx, const char *addr)
{
	size_t i;

	for (i = 0; i < tx->n_rcpts; i++)
		if (strcmp(tx->rcpts[i].addr, addr) == 0)
			return 1;
	return 0;
}

/* smtp_tx_add_rcpt - append a recipient, taking its strings */
void smtp_tx_add_rcpt(struct smtp_tx *tx, struct smtp_rcpt *r)
{
	if (tx->n_rcpts == tx->cap_rcpts) {
		tx->cap_rcpts = tx->cap_rcpts ? 2 * tx->cap_rcpts : 4;
		tx->rcpts = xrealloc(tx->rcpts, tx->cap_rcpts * sizeof(*tx->rcpts));
	}
	tx->rcpts[tx->n_rcpts++] = *r;
	r->addr = r->orcpt = NULL;
	r->notify = 0;
}
