/*
 * NAME
 *	smtp_stats 3
 * SUMMARY
 *	per-session command counts for the disconnect log line
 * DESCRIPTION
 *	Verbs are counted in the order Postfix prints them; a verb the
 *	engine does not know counts as "unknown". The counts only ever go
 *	up: STARTTLS starts the protocol over, but not the log.
 */
#include <stdio.h>
#include <string.h>

#include "smtp_stats.h"

static const char *const smtp_stats_names[SMTP_STATS_VERBS] = {
	"helo", "ehlo", "starttls", "auth", "mail", "rcpt", "data", "bdat",
	"rset", "noop", "vrfy", "help", "quit", "unknown",
};

/* smtp_stats_init - a new session */
void smtp_stats_init(struct smtp_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->open = -1;
	st->where = "CONNECT";
}

/* smtp_stats_begin - count a command, which stays open until its final reply */
void smtp_stats_begin(struct smtp_stats *st, enum smtp_verb verb, const char *name)
{
	st->total[verb]++;
	st->open = (int) verb;
	st->where = name;
}

/* smtp_stats_reply - 334 and 354 ask for more; any other reply ends the command */
void smtp_stats_reply(struct smtp_stats *st, const char *reply, size_t len)
{
	if (st->open < 0 || len < 3)
		return;
	if (strncmp(reply, "334", 3) == 0 || strncmp(reply, "354", 3) == 0)
		return;
	if (reply[0] == '2')
		st->ok[st->open]++;
	st->open = -1;
}

/* smtp_stats_put - append to buf, never past its end */
static size_t smtp_stats_put(char *buf, size_t len, size_t n, const char *name,
			     unsigned ok, unsigned total)
{
	int k;

	if (n >= len)
		return n;
	if (ok == total)
		k = snprintf(buf + n, len - n, " %s=%u", name, total);
	else
		k = snprintf(buf + n, len - n, " %s=%u/%u", name, ok, total);
	return k < 0 ? len : n + (size_t) k;
}

/* smtp_stats_format - Postfix's form: name=ok when all succeeded, else name=ok/total */
void smtp_stats_format(const struct smtp_stats *st, char *buf, size_t len)
{
	unsigned ok = 0, total = 0;
	size_t n = 0;
	int i;

	if (len == 0)
		return;
	buf[0] = 0;
	for (i = 0; i < SMTP_STATS_VERBS; i++) {
		if (st->total[i] == 0)
			continue;
		ok += st->ok[i];
		total += st->total[i];
		n = smtp_stats_put(buf, len, n, smtp_stats_names[i], st->ok[i], st->total[i]);
	}
	smtp_stats_put(buf, len, n, "commands", ok, total);
}
