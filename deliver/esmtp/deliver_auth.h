/*
 * NAME
 *	deliver_auth 3h
 * SUMMARY
 *	upstream AUTH for deliver_smtp.c: libesmtp's SASL client, and a guard
 * DESCRIPTION
 *	deliver_auth_context() makes the libesmtp SASL context that logs in
 *	as upstream.user with PLAIN or LOGIN (libesmtp's plugins, Debian
 *	package libesmtp6), answering from the configuration. libesmtp would
 *	try any mechanism it has a plugin for (CRAM-MD5 and NTLM too) in the
 *	server's order, and no flag of its auth-client API leaves those out:
 *	the bridge's filter blanks the others in the server's AUTH line
 *	before libesmtp reads it (deliver_filter.h).
 *
 *	libesmtp goes on to MAIL when AUTH fails or when the server offers
 *	no mechanism it can use. The guard watches the conversation through
 *	libesmtp's monitor callback, which sees each command before it is
 *	written, and says when the connection must be cut first: MAIL when
 *	upstream.user is set and AUTH has not succeeded. It also says which
 *	written lines are secrets, and writes the debug trace without them.
 *	And it cuts a server that answers a cancelled exchange ("*", what
 *	libesmtp answers a challenge its mechanism is done with) with another
 *	334 instead of the 501 of RFC 4954: libesmtp would cancel again, for
 *	as long as the server went on.
 */
#ifndef DELIVER_ESMTP_DELIVER_AUTH_H
#define DELIVER_ESMTP_DELIVER_AUTH_H

#include <stddef.h>

#include <auth-client.h>

#include "../../conf/conf.h"
#include "../deliver_policy.h"

/* deliver_auth_context - a SASL context for an upstream group's user; NULL on failure */
auth_context_t deliver_auth_context(const struct conf_upstream *u);

#define DELIVER_GUARD_LINE	512	/* longest reply line kept whole */

/* what the guard has seen of one connection; deliver_auth_guard_init() per connection */
struct deliver_auth_guard {
	int need_auth;			/* configuration: no MAIL before AUTH succeeded */
	int auth_sent;			/* an AUTH command was written */
	int in_auth;			/* AUTH exchange running: client lines are secrets */
	int cancelled;			/* the client answered "*": only a refusal may follow */
	int authed;			/* 2xx to AUTH read */
	char auth_mech[32];		/* mechanism of the last AUTH */
	char auth_offered[128];		/* the server's last AUTH line, as the filter left it */
	char auth_reply[256];		/* last refusal of AUTH */
	int cut;			/* the guard asked to cut the connection */
	char why[384];			/* why, for the log and the deferral */
	char dsn[DELIVER_DSN_SIZE];
	char line[DELIVER_GUARD_LINE];	/* partial reply line */
	size_t line_len;
};

/* deliver_auth_guard_init - a new connection */
void deliver_auth_guard_init(struct deliver_auth_guard *g, int need_auth);

/* deliver_auth_guard_read - bytes read from the server */
void deliver_auth_guard_read(struct deliver_auth_guard *g, const char *buf, size_t len);

/* deliver_auth_guard_write - bytes about to be written; 1: cut before they go (g->why) */
int deliver_auth_guard_write(struct deliver_auth_guard *g, const char *buf, size_t len);

/* deliver_auth_guard_redact - how much of a written line may be logged: 0 none */
size_t deliver_auth_guard_redact(const struct deliver_auth_guard *g, const char *line,
				 size_t len);

/*
 * deliver_auth_guard_trace - log bytes read (reading) or about to be
 * written at debug level, one line per protocol line, redacted as above
 */
void deliver_auth_guard_trace(const struct deliver_auth_guard *g, const char *relay,
			      const char *buf, size_t len, int reading);

#endif
