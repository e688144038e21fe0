/*
 * NAME
 *	tls_ticket 3
 * SUMMARY
 *	which full TLS 1.3 handshakes end with a session ticket
 * DESCRIPTION
 *	One ticket after a full TLS 1.3 handshake, not OpenSSL's default
 *	two (the context's setting, tls.c). Each is a session encoded,
 *	encrypted and written on every connection (a tenth of a full
 *	handshake's CPU for the two), while the clients that open a
 *	connection per message (PHPMailer, nodemailer, Django) rarely
 *	resume; one is all that a client that does resume needs, as every
 *	resumption brings a fresh one. A client address that let
 *	TLS_TKT_UNUSED tickets go unused in a row (full handshakes since it
 *	last resumed) gets one only every TLS_TKT_SAMPLE full handshakes
 *	after that: the encoding, encryption and write are spared for a
 *	client that never resumes, for both sides, and a client that starts
 *	to resume finds a ticket within that many connections; a resumption
 *	always brings a fresh ticket and gives the address its tickets back.
 *	The memory is a table of TLS_TKT_SLOTS slots by a hash of the
 *	address, each the count of one address: a collision at worst gives
 *	one address the other's count. Postfix's smtpd sends one ticket
 *	after every full handshake.
 */
#include <string.h>

#include "../util/hash.h"
#include "tls_ticket.h"

#define TLS_TKT_UNUSED	2		/* tickets an address may leave unused in a row */
#define TLS_TKT_SAMPLE	32		/* past them, one full handshake in this many gets one */

/* tls_ticket_find - the slot of the client's address; none for addr NULL */
void tls_ticket_find(struct tls_ticket *tk, struct tls_tkt *table, const char *addr)
{
	if (addr == NULL)
		return;
	tk->key = hash_fnv(HASH_FNV_INIT, addr, strlen(addr));
	tk->slot = &table[tk->key % TLS_TKT_SLOTS];	/* every slot, odd or even */
	tk->key |= 1;			/* never 0, a free slot's key */
}

/*
 * tls_ticket_plan - does this handshake end with a ticket: a resumption
 * always; a full handshake while the address has left fewer than
 * TLS_TKT_UNUSED unused, and every TLS_TKT_SAMPLE-th after that. Known
 * from the ServerHello on, and asked before each step: the ticket is
 * written in the step that reads the client's Finished.
 */
void tls_ticket_plan(const struct tls_ticket *tk, SSL *ssl)
{
	uint32_t full;

	if (tk->slot == NULL)
		return;
	full = tk->slot->key == tk->key ? tk->slot->full : 0;
	SSL_set_num_tickets(ssl, SSL_session_reused(ssl) || full < TLS_TKT_UNUSED
			    || full % TLS_TKT_SAMPLE == 0);
}

/* tls_ticket_count - a TLS 1.3 handshake is done: count it for its address */
void tls_ticket_count(const struct tls_ticket *tk, SSL *ssl)
{
	struct tls_tkt *k = tk->slot;

	if (k == NULL || SSL_version(ssl) != TLS1_3_VERSION)
		return;				/* TLS 1.2's tickets follow its own rules */
	if (k->key != tk->key) {
		k->key = tk->key;
		k->full = 0;
	}
	if (SSL_session_reused(ssl))
		k->full = 0;
	else if (k->full < UINT32_MAX)
		k->full++;
}
