/*
 * NAME
 *	smtp_stats 3h
 * SUMMARY
 *	per-session command counts and the last command, for the log
 *	(engine-internal)
 * DESCRIPTION
 *	What Postfix's smtpd prints on its "disconnect from" line: each
 *	command with how many of its instances succeeded out of how many
 *	were given ("rcpt=1/2"; just "rcpt=2" when all did), and the name of
 *	the last command for "lost connection after CMD" and "timeout after
 *	CMD". A command succeeded if its final reply is 2xx: a 334 or 354
 *	leaves it open until the reply that ends it (end of data, the AUTH
 *	verdict), however much later that comes.
 */
#ifndef SMTP_SMTP_STATS_H
#define SMTP_SMTP_STATS_H

#include <stddef.h>

/* the verbs counted, in the order Postfix prints them */
enum smtp_verb {
	SMTP_VERB_HELO, SMTP_VERB_EHLO, SMTP_VERB_STARTTLS, SMTP_VERB_AUTH, SMTP_VERB_MAIL,
	SMTP_VERB_RCPT, SMTP_VERB_DATA, SMTP_VERB_BDAT, SMTP_VERB_RSET, SMTP_VERB_NOOP,
	SMTP_VERB_VRFY, SMTP_VERB_HELP, SMTP_VERB_QUIT, SMTP_VERB_UNKNOWN, SMTP_STATS_VERBS
};

struct smtp_stats {
	unsigned total[SMTP_STATS_VERBS];
	unsigned ok[SMTP_STATS_VERBS];
	int     open;			/* verb awaiting its final reply, -1: none */
	const char *where;		/* "CONNECT", "RCPT", "END-OF-MESSAGE": static */
};

/* smtp_stats_init - a new session: nothing counted, where = CONNECT */
void smtp_stats_init(struct smtp_stats *st);

/* smtp_stats_begin - a command line with this verb, named so (static) for "after CMD" */
void smtp_stats_begin(struct smtp_stats *st, enum smtp_verb verb, const char *name);

/* smtp_stats_reply - a reply line went out: a final one ends the open command */
void smtp_stats_reply(struct smtp_stats *st, const char *reply, size_t len);

/* smtp_stats_format - " ehlo=1 mail=1 rcpt=1/2 ... commands=4/5" into buf */
void smtp_stats_format(const struct smtp_stats *st, char *buf, size_t len);

#endif
