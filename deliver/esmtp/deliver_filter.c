/*
 * NAME
 *	deliver_filter 3
 * SUMMARY
 *	the bridge's stream filter: libesmtp's own header block taken out
 * DESCRIPTION
 *	See deliver_filter.h. Pure functions of their state and input: no
 *	sockets, so the unit tests feed them at every split point.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "deliver_filter.h"

#define DOT_OWED	DELIVER_FILTER_DOT	/* the name owed to a final dot's reply */

static const char sentinel[] = DELIVER_FILTER_SENTINEL;
static const char eoh[] = "\r\n\r\n";
static const char eod[] = "\r\n.\r\n";	/* end of data; content starts after a CRLF */

/*
 * "250-CHUNKING" or "250 CHUNKING", read as libESMTP 1.1.0 reads a keyword
 * (protocol.c, cb_ehlo(); tokens.c): after blanks, up to an octet that
 * cannot be in one (KW_END: anything but printable ASCII, and these)
 */
#define KW_AT		4
#define KW_BLANKS	" \t\r\n\v"
#define KW_END		"\"()<>[]@,;:\\."
#define KW		"CHUNKING"
#define KW_LEN		(sizeof(KW) - 1)
#define KW_HIDDEN	"X-HIDDEN"	/* same length: no extension libesmtp knows */
#define KW_UTF8		"SMTPUTF8"	/* same length as KW */
#define KW_8BIT		"8BITMIME"
#define KW_TLS		"STARTTLS"

static const char mail_from[] = "MAIL FROM:";
#define SENTINEL_KEY	16	/* "X-Idemrelay-Cut:": no command starts so */
_Static_assert(SENTINEL_KEY < sizeof(DELIVER_FILTER_SENTINEL) - 1, "the key is a prefix");

/* deliver_filter_init - a filter for a new connection */
void deliver_filter_init(struct deliver_filter *f)
{
	memset(f, 0, sizeof(*f));
	f->dot_end = -1;
	f->cmds = 1;
	snprintf(f->verbs[0], sizeof(f->verbs[0]), "the greeting");
}

/* owe - one more reply due, for what */
static void owe(struct deliver_filter *f, const char *what)
{
	snprintf(f->verbs[f->cmds % DELIVER_FILTER_VERBS], DELIVER_FILTER_VERB, "%s", what);
	if (strcmp(what, DOT_OWED) == 0)
		f->dot_reply = f->cmds + 1;
	f->cmds++;
}

/* deliver_filter_verb - what the nth reply answers, or NULL */
const char *deliver_filter_verb(const struct deliver_filter *f, unsigned long nth)
{
	if (nth >= f->cmds)
		return NULL;
	if (f->cmds - nth > DELIVER_FILTER_VERBS)
		return "a pipelined command";	/* its name was overwritten */
	return f->verbs[nth % DELIVER_FILTER_VERBS];
}

/*
 * deliver_filter_dot_owed - is the reply to a final dot among those owed
 * after replies? The last dot's is, if any is: replies come in order. Not
 * read from the names, which more than DELIVER_FILTER_VERBS pipelined
 * commands overwrite: "it may be" then hung up on libesmtp with all their
 * replies owed at a reply's deadline, and libESMTP 1.1.0 crashed
 * (deliver_gate.h).
 */
int deliver_filter_dot_owed(const struct deliver_filter *f, unsigned long replies)
{
	return f->dot_reply > replies;
}

/* deliver_filter_mail_params - which messages' MAIL gets which parameters where offered */
void deliver_filter_mail_params(struct deliver_filter *f, const unsigned char *want, size_t n)
{
	f->mail_params = want;
	f->n_mail_params = n;
}

/* is_atom - can c be in a keyword or a mechanism's name, as libESMTP reads one? */
static int is_atom(char c)
{
	return c > ' ' && c <= '~' && strchr(KW_END, c) == NULL;
}

/* blanks - past the blanks from p */
static char *blanks(char *p, const char *end)
{
	while (p < end && memchr(KW_BLANKS, *p, sizeof(KW_BLANKS) - 1))
		p++;
	return p;
}

/*
 * auth_mechanisms - blank the mechanisms of an AUTH line (from p) but
 * PLAIN and LOGIN, read as libESMTP's set_auth_mechanisms() reads them
 * (blanks, atoms): it loads a plugin for any it knows (CRAM-MD5, NTLM
 * in package libesmtp6) and tries them in the server's order
 */
static void auth_mechanisms(char *p, const char *end)
{
	char *m;

	for (;;) {
		for (m = p = blanks(p, end); p < end && is_atom(*p); p++)
			continue;
		if (p == m)
			return;
		if (p - m != 5 || (strncasecmp(m, "PLAIN", 5) != 0 && strncasecmp(m, "LOGIN", 5) != 0))
			memset(m, ' ', (size_t) (p - m));
	}
}

/*
 * deliver_filter_ehlo_line - a line of the EHLO reply: hide CHUNKING and
 * AUTH mechanisms but PLAIN and LOGIN, note the rest offered
 */
void deliver_filter_ehlo_line(struct deliver_filter *f, char *line, size_t len)
{
	char *kw = line + KW_AT, *end = line + len, after;

	if (len <= KW_AT || memcmp(line, "250", 3) != 0 || (line[3] != '-' && line[3] != ' '))
		return;
	kw = blanks(kw, end);
	if (end - kw > 4 && strncasecmp(kw, "AUTH", 4) == 0 && (kw[4] == '=' || !is_atom(kw[4])))
		auth_mechanisms(kw + 5, end);	/* "AUTH=" too: libESMTP's AUTH_ID_HACK */
	if ((size_t) (end - kw) <= KW_LEN)
		return;
	after = kw[KW_LEN];
	if (is_atom(after))
		return;			/* a longer keyword ("CHUNKINGS") */
	if (strncasecmp(kw, KW, KW_LEN) == 0)
		memcpy(kw, KW_HIDDEN, KW_LEN);
	else if (strncasecmp(kw, KW_UTF8, KW_LEN) == 0)
		f->offered |= DELIVER_FILTER_UTF8;
	else if (strncasecmp(kw, KW_8BIT, KW_LEN) == 0)
		f->offered |= DELIVER_FILTER_8BIT;
	else if (strncasecmp(kw, KW_TLS, KW_LEN) == 0)
		f->offered |= DELIVER_FILTER_TLS;
}

/*
 * deliver_filter_rewind - libesmtp rewound the message: the next byte it
 * writes starts the content, block first. Before any of the content a
 * second one changes nothing; in the middle of it, libesmtp is off script.
 */
void deliver_filter_rewind(struct deliver_filter *f)
{
	if ((f->body || (f->armed && f->cut > 0)) && f->why[0] == 0)
		snprintf(f->why, sizeof(f->why), "libesmtp rewound its message in the middle"
			 " of the content");
	f->armed = 1;
	f->cut = 0;
	f->eoh = 0;
}

/* cut_byte - one byte of armed content: 1 dropped, -1 failed */
static int cut_byte(struct deliver_filter *f, char c)
{
	if (f->cut < sizeof(sentinel) - 1 && c != sentinel[f->cut]) {
		snprintf(f->why, sizeof(f->why), "libesmtp's content does not start with"
			 " the sentinel line (byte %zu)", f->cut);
		return -1;
	}
	if (++f->cut > DELIVER_FILTER_BLOCK_MAX) {
		snprintf(f->why, sizeof(f->why), "libesmtp's header block has no end within"
			 " %d bytes", DELIVER_FILTER_BLOCK_MAX);
		return -1;
	}
	f->eoh = c == eoh[f->eoh] ? f->eoh + 1 : c == '\r';
	if (f->eoh == 4) {
		f->armed = 0;
		f->body = 1;
		f->dotst = 2;		/* the block's last CRLF starts the first line */
	}
	return 1;
}

/*
 * verb_name - what a command line is called in logs: its verb if it is
 * one libesmtp sends; anything else is an answer to AUTH's 334 (a secret:
 * never logged)
 */
static const char *verb_name(const char *verb)
{
	static const char *const known[] = {
		"EHLO", "HELO", "MAIL", "RCPT", "DATA", "RSET", "QUIT", "NOOP", "VRFY",
		"AUTH", "BDAT", "STARTTLS", "ETRN", "EXPN", "HELP",
	};
	size_t i;

	if (strcmp(verb, ".") == 0)
		return DOT_OWED;
	for (i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (strcmp(verb, known[i]) == 0)
			return known[i];
	return "an AUTH answer";
}

/* cmd_byte - one octet of a command line: its verb, and a reply due at its end */
static void cmd_byte(struct deliver_filter *f, char c)
{
	if (c == '\n') {
		f->verb[f->verb_len] = 0;
		owe(f, verb_name(f->verb));
		f->verb_len = 0;
		f->verb_done = 0;
	} else if (c == ' ' || c == '\r' || f->verb_len == sizeof(f->verb) - 1) {
		f->verb_done = f->verb_len > 0;
	} else if (!f->verb_done) {
		f->verb[f->verb_len++] = c >= 'a' && c <= 'z' ? (char) (c - 'a' + 'A') : c;
	}
}

/*
 * body_scan - follow the content towards its final dot, which is owed a
 * reply; the offset just past the dot's LF in buf, or -1. The match falls
 * back to a lone CR only: no proper prefix of "\r\n.\r\n" ends with a
 * longer one of itself.
 */
static ssize_t body_scan(struct deliver_filter *f, const char *buf, size_t len)
{
	const char *cr;
	size_t i;

	for (i = 0; i < len && f->body; i++) {
		if (f->dotst == 0) {	/* only a CR starts a match: skip to the next */
			if ((cr = memchr(buf + i, '\r', len - i)) == NULL)
				break;
			i = (size_t) (cr - buf);
		}
		f->dotst = buf[i] == eod[f->dotst] ? f->dotst + 1 : buf[i] == '\r';
		if (f->dotst == 5) {
			f->body = 0;
			owe(f, DOT_OWED);
			return (ssize_t) i + 1;
		}
	}
	return -1;
}

/*
 * cmd_scan - libesmtp's command lines in buf[from..len): the MAIL line of
 * a marked message gets what it wants of the parameters offered, in place
 * (room for DELIVER_FILTER_GROW more). The new length, or -1 (f->why).
 */
static ssize_t cmd_scan(struct deliver_filter *f, char *buf, size_t from, size_t len)
{
	char c, add[DELIVER_FILTER_GROW + 1];
	size_t i, grown = 0;
	int want;

	for (i = from; i < len; i++) {
		c = buf[i];
		cmd_byte(f, c);		/* a reply owed at each line's end */
		if (!f->cmd_mid) {
			f->cmd_mid = 1;
			f->cmd_match = 0;
			f->cmd_sentinel = 0;
		}
		if (f->cmd_sentinel >= 0)
			f->cmd_sentinel = c == sentinel[f->cmd_sentinel] ? f->cmd_sentinel + 1 : -1;
		if (f->cmd_sentinel == SENTINEL_KEY) {
			/* content with no rewind before it: its dot must not go out */
			snprintf(f->why, sizeof(f->why), "libesmtp's header block came without"
				 " a rewind before it");
			return -1;
		}
		if (f->cmd_match >= 0 && f->cmd_match < (int) sizeof(mail_from) - 1)
			f->cmd_match = (c == mail_from[f->cmd_match]) ? f->cmd_match + 1 : -1;
		if (c != '\r' && c != '\n')
			continue;
		if (f->cmd_match == (int) sizeof(mail_from) - 1) {
			want = f->mails < f->n_mail_params ? f->mail_params[f->mails] & f->offered : 0;
			if (want && grown) {
				snprintf(f->why, sizeof(f->why), "two MAIL commands to add"
					 " parameters to in one write");
				return -1;
			}
			if (want) {
				grown = (size_t) snprintf(add, sizeof(add), "%s%s",
							  want & DELIVER_FILTER_8BIT ? " BODY=8BITMIME" : "",
							  want & DELIVER_FILTER_UTF8 ? " SMTPUTF8" : "");
				memmove(buf + i + grown, buf + i, len - i);
				memcpy(buf + i, add, grown);
				len += grown;
				i += grown;
			}
			f->mails++;
		}
		f->cmd_match = -1;	/* the rest of the line (LF after CR) is not MAIL */
		if (c == '\n')
			f->cmd_mid = 0;
	}
	return (ssize_t) len;
}

/* deliver_filter_up - libesmtp's bytes as the server gets them, in place */
ssize_t deliver_filter_up(struct deliver_filter *f, char *buf, size_t len)
{
	size_t drop = 0;
	int r = 1;

	f->dot_end = -1;
	if (f->why[0])
		return -1;
	if (!f->armed && !f->body)
		return cmd_scan(f, buf, 0, len);	/* commands: content comes after a rewind */
	while (drop < len && f->armed && (r = cut_byte(f, buf[drop])) == 1)
		drop++;
	if (r < 0)
		return -1;
	memmove(buf, buf + drop, len - drop);
	len -= drop;
	f->dot_end = body_scan(f, buf, len);
	if (f->body || f->armed)
		return (ssize_t) len;	/* len is 0 while the block is still being cut */
	f->cmd_mid = 0;		/* the final dot's line ended: commands follow */
	return cmd_scan(f, buf, (size_t) f->dot_end, len);
}
