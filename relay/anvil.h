/*
 * NAME
 *	anvil 3h
 * SUMMARY
 *	per-client connection limits: how many at once, how many a minute
 * DESCRIPTION
 *	What Postfix's anvil server counts for smtpd, inside the event loop:
 *	per client address (an IPv6 client by its limits.client_ipv6_prefix,
 *	a /64 by default, since one host holds a whole /64), the connections
 *	open now and those opened in the current minute. anvil_connect()
 *	decides a new connection: refused past limits.client_connections at
 *	once (default 50, Postfix's smtpd_client_connection_count_limit) or
 *	past limits.client_connection_rate a minute (default 0: off, as
 *	Postfix's). Clients inside access.networks are exempt (Postfix's
 *	smtpd_client_event_limit_exceptions = $mynetworks).
 *
 *	anvil_top() names the client holding the most connections, for the
 *	server to shed under pressure.
 *
 *	AUTH attempts a minute past limits.client_auth_rate (default 0: off,
 *	as Postfix's smtpd_client_auth_rate_limit) are refused (anvil_auth_rate).
 *
 *	Password checks: a client has one on the checking threads at a time;
 *	its others wait in line behind it (anvil_auth_begin, anvil_auth_end),
 *	so that one address sending many AUTHs at once cannot take every
 *	checking thread from the others. So every client but the exempt is
 *	counted, with every limit off too.
 * DIAGNOSTICS
 *	One warning per episode and client ("ADDR: connection count limit N
 *	exceeded"), until its count falls below the limit, or its minute ends.
 */
#ifndef RELAY_ANVIL_H
#define RELAY_ANVIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct anvil;
struct anvil_client;

enum anvil_verdict { ANVIL_OK, ANVIL_COUNT, ANVIL_RATE };

/* a password check waiting for its client's turn; embedded in the caller's */
struct anvil_wait {
	struct anvil_wait *next;
};

struct anvil *anvil_new(void);
void anvil_free(struct anvil *a);			/* NULL-safe */
/* anvil_set - the limits (start, SIGHUP); 0: that limit is off; ipv6_prefix 1-128 */
void anvil_set(struct anvil *a, int count, int rate, int auth_rate, int ipv6_prefix);

/*
 * anvil_connect - count a new connection from sa (its text in addr, for the
 * log), or refuse it. On ANVIL_OK *out is the client, for anvil_disconnect;
 * exempt clients are counted nowhere (*out NULL).
 */
enum anvil_verdict anvil_connect(struct anvil *a, const struct sockaddr *sa, const char *addr,
				 int exempt, int64_t now_us, struct anvil_client **out);
void anvil_disconnect(struct anvil *a, struct anvil_client *cl);	/* NULL-safe */
size_t anvil_count(const struct anvil_client *cl);	/* its open connections */
const struct anvil_client *anvil_top(const struct anvil *a);	/* most open; NULL: none */
void anvil_sweep(struct anvil *a, int64_t now_us);	/* forget idle clients */

/* anvil_auth_rate - count an AUTH of cl (NULL: exempt); 0 if past limits.client_auth_rate */
int anvil_auth_rate(struct anvil *a, struct anvil_client *cl, const char *addr, int64_t now_us);

/* anvil_auth_begin - 1: check now (cl NULL: exempt, always); 0: w waits in line */
int anvil_auth_begin(struct anvil_client *cl, struct anvil_wait *w);
/* anvil_auth_end - cl's check is done: the next in line, whose turn it now is, or NULL */
struct anvil_wait *anvil_auth_end(struct anvil_client *cl);
/* anvil_auth_cancel - w leaves cl's line: 1; 0 if not in it (its turn came, or never waited) */
int anvil_auth_cancel(struct anvil_client *cl, struct anvil_wait *w);
size_t anvil_clients(const struct anvil *a);		/* remembered now */

#endif
