/*
 * NAME
 *	deliver_auth 3
 * SUMMARY
 *	upstream AUTH: libesmtp's SASL client, and the guard on MAIL
 * DESCRIPTION
 *	See deliver_auth.h. The guard follows the conversation line by line
 *	(a reply may arrive over several reads; commands may be pipelined
 *	in one write) and decides only on what it has seen: a 2xx reply to
 *	an AUTH it saw written. Cutting is the caller's business; the
 *	reasons it gives are deferral texts with RFC 3463 codes: 4.7.8
 *	when the server refused the credentials (deferred, not bounced, as
 *	with Postfix's default smtp_sasl_auth_soft_bounce), 4.7.0 when AUTH
 *	could not even be tried.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <auth-client.h>

#include "../../util/log.h"
#include "deliver_auth.h"

static pthread_once_t auth_once = PTHREAD_ONCE_INIT;

/*
 * auth_interact - libesmtp's SASL plugins ask for the credentials. None
 * longer than a plugin asks for (its size, 0: any): PLAIN copies them
 * into 2 * 255 + 3 octets, and longer ones overran its heap block.
 */
static int auth_interact(auth_client_request_t req, char **result, int fields, void *arg)
{
	static char empty[] = "";
	const struct conf_upstream *u = arg;
	int i;

	for (i = 0; i < fields; i++) {	/* libesmtp's plugins only read them */
		if (req[i].flags & AUTH_USER)
			result[i] = (char *) u->user;
		else if (req[i].flags & AUTH_PASS)
			result[i] = (char *) u->password;
		else if (req[i].flags & AUTH_REALM)
			result[i] = empty;
		else
			return 0;
		if (req[i].size > 0 && strlen(result[i]) > req[i].size)
			return 0;
	}
	return 1;
}

/* deliver_auth_context - a SASL context for an upstream group's user; NULL on failure */
auth_context_t deliver_auth_context(const struct conf_upstream *u)
{
	auth_context_t a;

	pthread_once(&auth_once, auth_client_init);	/* libesmtp's SASL client */
	if ((a = auth_create_context()) == NULL)
		return NULL;
	/* PLAIN and LOGIN are "plain text" mechanisms: allowed, as TLS is required */
	if (!auth_set_mechanism_flags(a, AUTH_PLUGIN_PLAIN, 0)
	    || !auth_set_interact_cb(a, auth_interact, (void *) u)) {
		auth_destroy_context(a);
		return NULL;
	}
	return a;
}

/* prefix - does line start with word, case-insensitively? */
static int prefix(const char *line, size_t len, const char *word)
{
	size_t n = strlen(word);

	return len >= n && strncasecmp(line, word, n) == 0;
}

/* deliver_auth_guard_init - a new connection */
void deliver_auth_guard_init(struct deliver_auth_guard *g, int need_auth)
{
	memset(g, 0, sizeof(*g));
	g->need_auth = need_auth;
}

/* guard_copy - a reply line without its line end, into out */
static void guard_copy(char *out, size_t outlen, const char *line, size_t len)
{
	while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
		len--;
	snprintf(out, outlen, "%.*s", (int) len, line);
}

/* guard_cut - decide to cut the connection */
static int guard_cut(struct deliver_auth_guard *g, const char *dsn, const char *fmt, const char *arg)
{
	g->cut = 1;
	snprintf(g->dsn, sizeof(g->dsn), "%s", dsn);
	snprintf(g->why, sizeof(g->why), fmt, arg);
	return 1;
}

/* guard_reply_line - one complete line read from the server */
static void guard_reply_line(struct deliver_auth_guard *g, const char *line, size_t len)
{
	int final = len < 4 || line[3] != '-';
	int code = len >= 3 ? (line[0] - '0') * 100 + (line[1] - '0') * 10 + (line[2] - '0') : 0;

	if (len >= 9 && prefix(line, len, "250") && prefix(line + 4, len - 4, "AUTH")
	    && (line[8] == ' ' || line[8] == '='))
		guard_copy(g->auth_offered, sizeof(g->auth_offered), line + 9, len - 9);
	if (g->in_auth && final && code == 334 && g->cancelled)
		(void) guard_cut(g, "4.7.0", "%s", "the server went on with AUTH after it was"
				 " cancelled (334 to \"*\")");
	if (g->in_auth && final && code != 334) {
		g->in_auth = 0;
		if (code >= 200 && code < 300)
			g->authed = 1;
		else
			guard_copy(g->auth_reply, sizeof(g->auth_reply), line, len);
	}
}

/* deliver_auth_guard_read - bytes read from the server */
void deliver_auth_guard_read(struct deliver_auth_guard *g, const char *buf, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++) {
		if (g->line_len < sizeof(g->line) - 1)
			g->line[g->line_len++] = buf[i];
		if (buf[i] == '\n') {
			guard_reply_line(g, g->line, g->line_len);
			g->line_len = 0;
		}
	}
}

/* deliver_auth_guard_write - bytes about to be written; 1: cut before they go */
int deliver_auth_guard_write(struct deliver_auth_guard *g, const char *buf, size_t len)
{
	const char *line = buf, *end = buf + len, *nl;
	size_t n, m;

	if (g->cut)
		return 1;
	for (; line < end; line = nl + 1) {
		if ((nl = memchr(line, '\n', (size_t) (end - line))) == NULL)
			nl = end - 1;
		n = (size_t) (nl + 1 - line);
		if (g->in_auth && n <= 3 && line[0] == '*')
			g->cancelled = 1;	/* "*", its CRLF */
		if (prefix(line, n, "AUTH ")) {
			g->auth_sent = g->in_auth = 1;
			g->cancelled = 0;
			m = deliver_auth_guard_redact(g, line, n);	/* "AUTH MECH" */
			snprintf(g->auth_mech, sizeof(g->auth_mech), "%.*s", (int) (m - 5), line + 5);
			g->auth_reply[0] = 0;
		}
		if (!g->need_auth || g->authed || !prefix(line, n, "MAIL FROM:"))
			continue;
		if (g->auth_sent)
			return guard_cut(g, "4.7.8", "SASL authentication failed: %s",
					 g->auth_reply[0] ? g->auth_reply : "no reply");
		if (g->auth_offered[0] && !g->auth_offered[strspn(g->auth_offered, " \t")])
			return guard_cut(g, "4.7.0", "%s", "no SASL mechanism in common (the server"
					 " offers neither PLAIN nor LOGIN)");
		if (g->auth_offered[0])
			return guard_cut(g, "4.7.0", "no SASL mechanism in common (the server offers"
					 " %s; are libesmtp's PLAIN and LOGIN plugins installed,"
					 " sasl-plain.so and sasl-login.so of package libesmtp6?)",
					 g->auth_offered);
		return guard_cut(g, "4.7.0", "%s", "the server does not offer AUTH, and"
				 " upstream.user is set");
	}
	return 0;
}

/* deliver_auth_guard_redact - how much of a written line may be logged: 0 none */
size_t deliver_auth_guard_redact(const struct deliver_auth_guard *g, const char *line, size_t len)
{
	size_t m;

	if (prefix(line, len, "AUTH ")) {
		for (m = 5; m < len && line[m] > ' '; m++)
			continue;
		return m;			/* "AUTH PLAIN", not the response */
	}
	return g->in_auth ? 0 : len;
}

/* deliver_auth_guard_trace - one debug line per protocol line, secrets redacted */
void deliver_auth_guard_trace(const struct deliver_auth_guard *g, const char *relay,
			      const char *buf, size_t len, int reading)
{
	size_t start, end, n, shown;

	if (!log_enabled(LOG_LEVEL_DEBUG))
		return;
	for (start = 0; start < len; start = end + 1) {
		for (end = start; end < len && buf[end] != '\n'; end++)
			continue;
		n = end > start && buf[end - 1] == '\r' ? end - start - 1 : end - start;
		shown = reading ? n : deliver_auth_guard_redact(g, buf + start, n);
		if (n > 0)
			msg_debug("smtp %s: %s %.*s%s", relay, reading ? "S:" : "C:",
				  (int) (shown > 400 ? 400 : shown), buf + start,
				  shown < n ? " [redacted]" : "");
	}
}
