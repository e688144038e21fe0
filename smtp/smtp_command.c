/*
 * NAME
 *	smtp_command 3
 * SUMMARY
 *	SMTP commands: dispatch table, handlers, EHLO extensions
 * DESCRIPTION
 *	smtp_command() splits a line into verb and arguments and calls the
 *	handler from smtp_cmd_table. Each handler starts with guard clauses
 *	that reply and return (out of order: 503 5.5.1; bad syntax: 501),
 *	then does its work and replies.
 *
 *	Ordering policy: MAIL is accepted without a prior HELO/EHLO, as
 *	Postfix does by default (smtpd_helo_required = no); HELO/EHLO and RSET
 *	end any transaction; MAIL inside a transaction, RCPT before MAIL and
 *	DATA before a recipient get 503 5.5.1.
 *
 *	BDAT (RFC 3030) differs from every other command in that the client
 *	sends the chunk without waiting for a reply. So once its arguments
 *	parse, the announced octets are always consumed, even when the
 *	command is refused (503 out of order) or the message has outgrown
 *	message_size (552, then for every later chunk of the tx); otherwise
 *	the chunk would be read as commands, a smuggling channel of its own.
 *	If the arguments do not parse, the length is unknown: 501, and what
 *	follows is read as commands, as Postfix does.
 *	Once a BDAT is accepted the envelope is closed: RCPT and DATA get 503
 *	until the message ends or RSET.
 *
 *	What EHLO advertises comes from smtp_ext_table; an extension that
 *	depends on the session (STARTTLS before TLS, AUTH after it) gets an
 *	"offered" predicate, one that has parameters a "params" printer.
 *
 *	On a starttls_required listener, before TLS, only the commands
 *	flagged SMTP_CMD_PRE_TLS run; the others get 530 5.7.0 (RFC 3207
 *	section 4). BDAT checks that itself, after parsing, so that its
 *	chunk is skipped rather than read as commands. On an auth_required
 *	listener MAIL needs AUTH first (530 5.7.0, RFC 6409 section 4.3).
 *
 *	A NUL byte in a command line gets 500 5.5.2, except in MAIL and RCPT,
 *	whose length-aware parsers give the more precise 501 (a NUL in an
 *	address or in an ESMTP parameter, SPEC section 6).
 */
#include <stdlib.h>
#include <string.h>

#include "../util/log.h"
#include "smtp_parse.h"
#include "smtp_session.h"
#include "smtp_tx.h"

 /*
  * EHLO extensions, in the order advertised.
  */
struct smtp_ext {
	const char *name;
	void    (*params) (const struct smtp_session *, struct buf *);
	int     (*offered) (const struct smtp_session *);	/* NULL: always */
};

/* smtp_ext_size - "SIZE n" (RFC 1870); bare "SIZE" means no fixed limit */
static void smtp_ext_size(const struct smtp_session *s, struct buf *b)
{
	if (s->cfg.message_size)
		buf_printf(b, " %llu", (unsigned long long) s->cfg.message_size);
}

/* smtp_ext_starttls - until TLS is up, where configured */
static int smtp_ext_starttls(const struct smtp_session *s)
{
	return s->cfg.starttls && !s->tls;
}

/* smtp_ext_smtputf8 - where configured (listen[].smtputf8, on by default) */
static int smtp_ext_smtputf8(const struct smtp_session *s)
{
	return s->cfg.smtputf8;
}

static const struct smtp_ext smtp_ext_table[] = {
	{"PIPELINING", NULL, NULL},
	{"SIZE", smtp_ext_size, NULL},
	{"STARTTLS", NULL, smtp_ext_starttls},
	{"AUTH PLAIN LOGIN", NULL, smtp_auth_offered},	/* the mechanisms, RFC 4954 */
	{"8BITMIME", NULL, NULL},
	{"ENHANCEDSTATUSCODES", NULL, NULL},
	{"DSN", NULL, NULL},
	{"CHUNKING", NULL, NULL},	/* BDAT, without BINARYMIME */
	{"SMTPUTF8", NULL, smtp_ext_smtputf8},
};

#define SMTP_EXT_COUNT (sizeof(smtp_ext_table) / sizeof(smtp_ext_table[0]))

/* smtp_ehlo_reply - the multi-line 250 from the extension table, its last line's "250-" made "250 " */
static void smtp_ehlo_reply(struct smtp_session *s)
{
	const struct smtp_ext *e;
	size_t last = s->out.len;

	smtp_reply(s, "250-%s", s->cfg.hostname);
	for (e = smtp_ext_table; e < smtp_ext_table + SMTP_EXT_COUNT; e++) {
		if (e->offered && !e->offered(s))
			continue;
		last = s->out.len;
		buf_printf(&s->out, "250-%s", e->name);
		if (e->params)
			e->params(s, &s->out);
		buf_append(&s->out, "\r\n", 2);
	}
	s->out.data[last + 3] = ' ';
}

/* smtp_helo_ok - one token of printable ASCII, as Postfix takes it */
static int smtp_helo_ok(const char *args, size_t len)
{
	size_t i;

	if (len == 0 || len > 255)
		return 0;
	for (i = 0; i < len; i++)
		if ((unsigned char) args[i] <= ' ' || (unsigned char) args[i] > '~')
			return 0;
	return 1;
}

/* smtp_helo_common - HELO and EHLO: remember the name, end the tx */
static int smtp_helo_common(struct smtp_session *s, const char *verb,
			    const char *args, size_t len, int esmtp)
{
	if (!smtp_helo_ok(args, len)) {
		smtp_reply(s, "501 5.5.4 Syntax: %s hostname", verb);
		return -1;
	}
	smtp_tx_end(s);
	free(s->helo);
	s->helo = xstrndup(args, len);
	s->esmtp = esmtp;
	return 0;
}

/* smtp_cmd_helo - HELO hostname */
static void smtp_cmd_helo(struct smtp_session *s, const char *args, size_t len)
{
	if (smtp_helo_common(s, "HELO", args, len, 0) < 0)
		return;
	smtp_reply(s, "250 %s", s->cfg.hostname);
}

/* smtp_cmd_ehlo - EHLO hostname */
static void smtp_cmd_ehlo(struct smtp_session *s, const char *args, size_t len)
{
	if (smtp_helo_common(s, "EHLO", args, len, 1) < 0)
		return;
	smtp_ehlo_reply(s);
}

/* smtp_tls_gate - 530 before STARTTLS on a starttls_required listener; 1 if refused */
static int smtp_tls_gate(struct smtp_session *s)
{
	if (!s->cfg.starttls_required || s->tls)
		return 0;
	smtp_reply(s, "530 5.7.0 Must issue a STARTTLS command first");
	return 1;
}

/* smtp_cmd_mail - MAIL FROM:<path> [params] */
static void smtp_cmd_mail(struct smtp_session *s, const char *args, size_t len)
{
	char reply[SMTP_REPLY_MAX];
	struct smtp_tx *tx;

	if (s->cfg.auth_required && s->user == NULL) {
		smtp_reply(s, "530 5.7.0 Authentication required");
		return;
	}
	if (s->tx) {
		smtp_reply(s, "503 5.5.1 Error: nested MAIL command");
		return;
	}
	tx = smtp_tx_new();
	if (smtp_parse_mail(args, len, s->cfg.message_size, s->cfg.smtputf8, tx, reply) < 0) {
		if (strncmp(reply, "552 ", 4) == 0)	/* a policy, not a syntax error */
			smtp_refuse(s, tx, "MAIL", reply);
		else
			smtp_reply(s, "%s", reply);
		smtp_tx_free(tx);
		return;
	}
	s->tx = tx;
	smtp_reply(s, "250 2.1.0 Ok");
}

/* smtp_cmd_rcpt - RCPT TO:<path> [params] */
static void smtp_cmd_rcpt(struct smtp_session *s, const char *args, size_t len)
{
	char reply[SMTP_REPLY_MAX], id[SMTP_RCPT_ID_MAX];
	struct smtp_rcpt r = {NULL, 0, NULL, NULL};
	const char *verdict;

	if (s->tx == NULL) {
		smtp_reply(s, "503 5.5.1 Error: need MAIL command");
		return;
	}
	if (s->data.raw) {
		smtp_reply(s, "503 5.5.1 Error: RCPT after BDAT");
		return;
	}
	if (smtp_parse_rcpt(args, len, s->tx->smtputf8, &r, reply) < 0) {
		smtp_reply(s, "%s", reply);
		goto done;
	}
	if (smtp_rcpt_id(r.addr, id) < 0)	/* the parser bounds an address */
		msg_panic("recipient longer than the parser takes: %.100s", r.addr);
	/* a repeat was decided already (claims are per recipient): the first NOTIFY, ORCPT hold */
	if (smtp_tx_has_rcpt(s->tx, id)) {
		smtp_reply(s, "250 2.1.5 Ok");
		goto done;
	}
	if (s->tx->n_rcpts >= (size_t) s->cfg.max_rcpts && s->cfg.max_rcpts) {
		smtp_reply(s, "452 4.5.3 Too many recipients");
		goto done;
	}
	if (s->hooks.rcpt && (verdict = s->hooks.rcpt(s->ctx, s->tx, r.addr)) != NULL) {
		smtp_reply_external(s, verdict);
		goto done;
	}
	smtp_tx_add_rcpt(s->tx, &r, id);
	smtp_reply(s, "250 2.1.5 Ok");
done:
	smtp_rcpt_clear(&r);
}

/* smtp_cmd_data - DATA: start reading the message */
static void smtp_cmd_data(struct smtp_session *s, const char *args, size_t len)
{
	(void) args;
	if (s->tx == NULL || s->tx->n_rcpts == 0) {
		smtp_reply(s, "503 5.5.1 Error: need RCPT command");
		return;
	}
	if (s->data.raw) {
		smtp_reply(s, "503 5.5.1 Error: DATA after BDAT");
		return;
	}
	if (len) {
		smtp_reply(s, "501 5.5.4 Syntax: DATA");
		return;
	}
	smtp_data_init(&s->data, s->cfg.message_size, 0);
	smtp_reply(s, "354 End data with <CR><LF>.<CR><LF>");
	smtp_enter_state(s, SMTP_STATE_DATA);
}

/* smtp_cmd_bdat - BDAT chunk-size [LAST]: read one chunk */
static void smtp_cmd_bdat(struct smtp_session *s, const char *args, size_t len)
{
	char reply[SMTP_REPLY_MAX];
	uint64_t size;
	int last;

	if (smtp_parse_bdat(args, len, &size, &last, reply) < 0) {
		smtp_reply(s, "%s", reply);	/* length unknown: nothing to skip */
		return;
	}
	if (smtp_tls_gate(s)) {
		smtp_chunk_start(s, size, last, 1);
		return;
	}
	if (s->tx == NULL || s->tx->n_rcpts == 0) {
		smtp_reply(s, "503 5.5.1 Error: need RCPT command");
		smtp_chunk_start(s, size, last, 1);
		return;
	}
	if (!s->data.raw)		/* the tx's first chunk */
		smtp_data_init(&s->data, s->cfg.message_size, 1);
	smtp_chunk_start(s, size, last, 0);
}

/* smtp_cmd_rset - RSET: end the transaction, keep the session */
static void smtp_cmd_rset(struct smtp_session *s, const char *args, size_t len)
{
	(void) args;
	if (len) {
		smtp_reply(s, "501 5.5.4 Syntax: RSET");
		return;
	}
	smtp_tx_end(s);
	smtp_reply(s, "250 2.0.0 Ok");
}

/* smtp_cmd_noop - NOOP [string] */
static void smtp_cmd_noop(struct smtp_session *s, const char *args, size_t len)
{
	(void) args;
	(void) len;
	smtp_reply(s, "250 2.0.0 Ok");
}

/* smtp_cmd_quit - QUIT: say goodbye and close (arguments are ignored) */
static void smtp_cmd_quit(struct smtp_session *s, const char *args, size_t len)
{
	(void) args;
	(void) len;
	smtp_tx_end(s);
	smtp_reply(s, "221 2.0.0 Bye");
	s->why = SMTP_CLOSE_QUIT;
	smtp_enter_state(s, SMTP_STATE_CLOSED);
}

/* smtp_cmd_starttls - STARTTLS: 220, then the caller's handshake (RFC 3207) */
static void smtp_cmd_starttls(struct smtp_session *s, const char *args, size_t len)
{
	(void) args;
	if (s->tls) {
		smtp_reply(s, "554 5.5.1 Error: TLS already active");
		return;
	}
	if (!s->cfg.starttls) {
		smtp_reply(s, "502 5.5.1 Error: command not implemented");
		return;
	}
	if (len) {
		smtp_reply(s, "501 5.5.4 Syntax: STARTTLS");
		return;
	}
	smtp_reply(s, "220 2.0.0 Ready to start TLS");
	smtp_enter_state(s, SMTP_STATE_STARTTLS);
}

/* smtp_cmd_vrfy - VRFY: never disclose, never refuse (RFC 5321 3.5.3) */
static void smtp_cmd_vrfy(struct smtp_session *s, const char *args, size_t len)
{
	(void) args;
	if (len == 0) {
		smtp_reply(s, "501 5.5.4 Syntax: VRFY address");
		return;
	}
	smtp_reply(s, "252 2.5.0 Cannot VRFY user, but will accept message and attempt delivery");
}

static void smtp_cmd_help(struct smtp_session *, const char *, size_t);

 /*
  * The dispatch table. Verbs match case-insensitively and exactly.
  */
#define SMTP_CMD_NUL_OK	(1<<0)		/* handler's parser rejects NUL itself */
#define SMTP_CMD_PRE_TLS (1<<1)		/* allowed before STARTTLS when required */
#define SMTP_CMD_GATE_SELF (1<<2)	/* handler applies smtp_tls_gate() itself */
#define SMTP_CMD_JUNK	(1<<3)		/* moves no mail: counted (smtp_session_count) */

struct smtp_cmd {
	const char *name;
	void    (*handler) (struct smtp_session *, const char *, size_t);
	int     flags;
	enum smtp_verb verb;		/* counted as (smtp_stats.h) */
};

static const struct smtp_cmd smtp_cmd_table[] = {
	{"EHLO", smtp_cmd_ehlo, SMTP_CMD_PRE_TLS, SMTP_VERB_EHLO},
	{"HELO", smtp_cmd_helo, SMTP_CMD_PRE_TLS, SMTP_VERB_HELO},
	{"MAIL", smtp_cmd_mail, SMTP_CMD_NUL_OK, SMTP_VERB_MAIL},
	{"RCPT", smtp_cmd_rcpt, SMTP_CMD_NUL_OK, SMTP_VERB_RCPT},
	{"DATA", smtp_cmd_data, 0, SMTP_VERB_DATA},
	{"BDAT", smtp_cmd_bdat, SMTP_CMD_GATE_SELF, SMTP_VERB_BDAT},
	{"RSET", smtp_cmd_rset, SMTP_CMD_PRE_TLS | SMTP_CMD_JUNK, SMTP_VERB_RSET},
	{"NOOP", smtp_cmd_noop, SMTP_CMD_PRE_TLS | SMTP_CMD_JUNK, SMTP_VERB_NOOP},
	{"QUIT", smtp_cmd_quit, SMTP_CMD_PRE_TLS, SMTP_VERB_QUIT},
	{"VRFY", smtp_cmd_vrfy, SMTP_CMD_JUNK, SMTP_VERB_VRFY},
	{"HELP", smtp_cmd_help, SMTP_CMD_JUNK, SMTP_VERB_HELP},
	{"STARTTLS", smtp_cmd_starttls, SMTP_CMD_PRE_TLS, SMTP_VERB_STARTTLS},
	{"AUTH", smtp_cmd_auth, 0, SMTP_VERB_AUTH},
};

#define SMTP_CMD_COUNT (sizeof(smtp_cmd_table) / sizeof(smtp_cmd_table[0]))

/* smtp_cmd_help - HELP [topic]: the verbs we know, one reply line */
static void smtp_cmd_help(struct smtp_session *s, const char *args, size_t len)
{
	struct buf line = BUF_INIT;
	size_t i;

	(void) args;
	(void) len;
	for (i = 0; i < SMTP_CMD_COUNT; i++)
		buf_printf(&line, " %s", smtp_cmd_table[i].name);
	smtp_reply(s, "214 2.0.0 Commands:%s", line.data);
	buf_free(&line);
}

/* smtp_cmd_find - look a verb up in the table */
static const struct smtp_cmd *smtp_cmd_find(const char *verb, size_t len)
{
	size_t i;

	for (i = 0; i < SMTP_CMD_COUNT; i++)
		if (strlen(smtp_cmd_table[i].name) == len
		    && strncasecmp(smtp_cmd_table[i].name, verb, len) == 0)
			return smtp_cmd_table + i;
	return NULL;
}

/* smtp_command_run - one line, trimmed: find the verb, check, call its handler */
static void smtp_command_run(struct smtp_session *s, char *line, size_t len,
			     const struct smtp_cmd **found)
{
	const struct smtp_cmd *cmd;
	const char *sp;
	size_t verb_len;

	if (len == 0) {
		smtp_reply(s, "500 5.5.2 Error: bad syntax");
		return;
	}
	sp = memchr(line, ' ', len);
	verb_len = sp ? (size_t) (sp - line) : len;
	*found = cmd = smtp_cmd_find(line, verb_len);
	smtp_stats_begin(&s->stats, cmd ? cmd->verb : SMTP_VERB_UNKNOWN, cmd ? cmd->name : "UNKNOWN");
	if (cmd == NULL) {
		smtp_reply(s, "500 5.5.2 Error: command not recognized");
		return;
	}
	if (!(cmd->flags & SMTP_CMD_NUL_OK) && memchr(line, 0, len) != NULL) {
		smtp_reply(s, "500 5.5.2 Error: NUL in command line");
		return;
	}
	if (!(cmd->flags & (SMTP_CMD_PRE_TLS | SMTP_CMD_GATE_SELF)) && smtp_tls_gate(s))
		return;
	if (sp)
		cmd->handler(s, sp + 1, len - verb_len - 1);
	else
		cmd->handler(s, line + len, 0);
}

/*
 * smtp_command - one line, its CRLF (or LF) gone, at most SMTP_LINE_MAX
 * octets; 1 if its verb is junk (smtp_session_count(), which its caller runs)
 */
int smtp_command(struct smtp_session *s, char *line, size_t len)
{
	const struct smtp_cmd *cmd = NULL;

	while (len && line[len - 1] == ' ')
		len--;
	line[len] = 0;
	smtp_command_run(s, line, len, &cmd);
	return cmd && (cmd->flags & SMTP_CMD_JUNK);
}
