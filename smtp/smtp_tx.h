/*
 * NAME
 *	smtp_tx 3h
 * SUMMARY
 *	mail transaction life cycle (engine-internal)
 * DESCRIPTION
 *	A struct smtp_tx lives from MAIL FROM to the end of the message, RSET,
 *	HELO/EHLO or the end of the session. It is separate from the session
 *	so that resetting a transaction can never touch session state.
 */
#ifndef SMTP_SMTP_TX_H
#define SMTP_SMTP_TX_H

#include "smtp.h"

struct smtp_tx *smtp_tx_new(void);
void smtp_tx_free(struct smtp_tx *tx);	/* NULL-safe */
void smtp_rcpt_clear(struct smtp_rcpt *r);	/* free the fields, keep the struct */
int smtp_tx_has_rcpt(const struct smtp_tx *tx, const char *id);	/* id: smtp_rcpt_id() */
void smtp_tx_add_rcpt(struct smtp_tx *tx, struct smtp_rcpt *r, const char *id);	/* takes r's fields */

#endif
