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
 *	session (max_rcpts), not here. smtp_rcpt_id() says which two
 *	recipients are one (smtp.h): the engine and the claims share it.
 */
#include <stdlib.h>
#include <string.h>

#include "smtp_parse.h"
#include "smtp_tx.h"

_Static_assert(SMTP_ADDR_MAX < SMTP_RCPT_ID_MAX, "an address the parser takes has an identity");

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

/* smtp_rcpt_id - local part as given, domain in ASCII lower case: 0, or -1 if too long */
int smtp_rcpt_id(const char *addr, char out[SMTP_RCPT_ID_MAX])
{
	size_t len = strlen(addr), i;
	const char *at = strrchr(addr, '@');

	if (len >= SMTP_RCPT_ID_MAX)
		return -1;
	for (i = 0; i <= len; i++)
		out[i] = at && addr + i > at && addr[i] >= 'A' && addr[i] <= 'Z'
		    ? (char) (addr[i] - 'A' + 'a') : addr[i];
	return 0;
}

/* smtp_tx_has_rcpt - does the transaction hold this recipient's identity already? */
int smtp_tx_has_rcpt(const struct smtp_tx *tx, const char *addr)
{
	char id[SMTP_RCPT_ID_MAX], other[SMTP_RCPT_ID_MAX];
	size_t i;

	if (smtp_rcpt_id(addr, id) < 0)
		return 0;		/* no address the parser took */
	for (i = 0; i < tx->n_rcpts; i++)
		if (smtp_rcpt_id(tx->rcpts[i].addr, other) == 0 && strcmp(id, other) == 0)
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
