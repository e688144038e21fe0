/*
 * NAME
 *	tls_ticket 3h
 * SUMMARY
 *	which full TLS 1.3 handshakes end with a session ticket
 * DESCRIPTION
 *	A table of TLS_TKT_SLOTS client addresses (zeroed: all free) counts
 *	each one's full handshakes since it last resumed. tls_ticket_find()
 *	gives a session its address's slot; tls_ticket_plan() tells OpenSSL
 *	before each handshake step how many tickets to send, and
 *	tls_ticket_count() counts the handshake once it is done. A session
 *	with no slot (find's addr NULL) gets OpenSSL's context setting.
 */
#ifndef TLS_TLS_TICKET_H
#define TLS_TLS_TICKET_H

#include <stdint.h>

#include <openssl/ssl.h>

#define TLS_TKT_SLOTS	4096		/* client addresses remembered for tickets */

/* an address's full TLS 1.3 handshakes since it last resumed */
struct tls_tkt {
	uint64_t key;			/* the address's hash; 0: free */
	uint32_t full;
};

/* a session's slot */
struct tls_ticket {
	struct tls_tkt *slot;		/* in the table; NULL: none */
	uint64_t key;			/* the address's hash, odd */
};

void tls_ticket_find(struct tls_ticket *tk, struct tls_tkt *table, const char *addr);
void tls_ticket_plan(const struct tls_ticket *tk, SSL *ssl);
void tls_ticket_count(const struct tls_ticket *tk, SSL *ssl);

#endif
