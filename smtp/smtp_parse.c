/*
 * NAME
 *	smtp_parse 3
 * SUMMARY
 *	strict parsing of MAIL/RCPT paths, ESMTP parameters and xtext
 * DESCRIPTION
 *	smtp_parse_mail() and smtp_parse_rcpt() take what follows the verb
 *	("FROM:<a@b> SIZE=10") and fill in the transaction or recipient.
 *	One parser serves both; a small descriptor per command gives what
 *	differs: the prefix, whether "<>" is allowed, the replies and the
 *	parameter table.
 *
 *	Paths follow RFC 5321 section 4.1.2 to the letter: angle brackets
 *	are required (one space after the colon is tolerated, as Postfix
 *	does), the local-part is a dot-string of atext or a quoted string,
 *	the domain is a host name or an IPv4/IPv6 address literal, and a
 *	source route is checked and stripped. Anything else, such as
 *	"<;sleep 66;>", is refused: an address is later handed to other
 *	programs, and the cheapest place to stop an injection is here.
 *
 *	smtp_parse_bdat() takes "chunk-size [LAST]" (RFC 3030): 1 to 20
 *	decimal digits that fit in 64 bits; zero only with LAST.
 *
 *	ESMTP parameters are first checked for syntax as a whole
 *	(esmtp-keyword ["=" esmtp-value], RFC 5321 section 4.1.2), so that a
 *	control character anywhere gets 501 5.5.4 before any parameter is
 *	acted on; then each parameter is looked up in a per-command table.
 *	Adding an extension parameter (AUTH=) means adding a row.
 *
 *	SMTPUTF8 (RFC 6531): local-parts and domain labels may hold UTF-8
 *	characters, valid ones only (no overlong forms, surrogates, code
 *	points past U+10FFFF, C1 controls; C0 controls stay refused as in
 *	ASCII); such a path is accepted only in a transaction whose MAIL
 *	declared SMTPUTF8. Lengths stay in octets.
 *	xtext and the ORCPT split serve delivery too, leniently (smtp.h).
 *	smtp_rcpt_id() gives a recipient's identity (smtp.h); it lives here,
 *	apart from its callers, so that a test counts every call (ld's
 *	--wrap sees calls between files only: test_smtp_limits).
 * DIAGNOSTICS
 *	501 5.5.4 for syntax, 501 5.1.7 / 501 5.1.3 for a bad sender /
 *	recipient address (invalid UTF-8 included), 553 5.6.7 for a valid
 *	UTF-8 address without SMTPUTF8, 555 5.5.4 for an unknown parameter
 *	(SMTPUTF8 too, where not offered), 552 5.3.4 for a declared SIZE
 *	over the limit.
 */
#include <sys/types.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/asn1.h>
#include <openssl/crypto.h>

#include "smtp_parse.h"

_Static_assert(SMTP_ADDR_MAX < SMTP_RCPT_ID_MAX, "an address the parser takes has an identity");

#define SMTP_LOWER(c)	((c) >= 'a' && (c) <= 'z')
#define SMTP_ALPHA(c)	(SMTP_LOWER(c) || ((c) >= 'A' && (c) <= 'Z'))
#define SMTP_DIGIT(c)	((c) >= '0' && (c) <= '9')
#define SMTP_ALNUM(c)	(SMTP_ALPHA(c) || SMTP_DIGIT(c))

/* smtp_atext - RFC 5322 atext: may appear unquoted in a local-part */
static int smtp_atext(unsigned char c)
{
	if (SMTP_ALNUM(c))
		return 1;
	switch (c) {
	case '!': case '#': case '$': case '%': case '&': case '\'':
	case '*': case '+': case '-': case '/': case '=': case '?':
	case '^': case '_': case '`': case '{': case '|': case '}':
	case '~':
		return 1;
	default:
		return 0;
	}
}

/*
 * smtp_utf8_len - octets of one valid UTF-8 character at p that is not
 * US-ASCII (RFC 6531 UTF8-non-ascii, RFC 3629 section 4), or 0: an
 * overlong form, a surrogate, a code point past U+10FFFF, a truncated
 * sequence or a C1 control (U+0080-U+009F) is refused, so that no
 * next hop can read the octets as something else. OpenSSL's decoder
 * refuses the first four (its longest form is 4 octets); the rest is
 * said here.
 */
size_t smtp_utf8_len(const char *p, size_t len)
{
	unsigned long cp;
	int n = UTF8_getc((const unsigned char *) p, len > 4 ? 4 : (int) len, &cp);

	return n > 1 && cp >= 0xa0 ? (size_t) n : 0;	/* not ASCII, not C1 */
}

/* smtp_ascii - no octet above 127? */
int smtp_ascii(const char *p, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++)
		if ((unsigned char) p[i] >= 0x80)
			return 0;
	return 1;
}

/*
 * smtp_mem_caseeq - p[0..len) is s in any case (no locale is set: ASCII
 * case only); a NUL in p never matches
 */
static int smtp_mem_caseeq(const char *p, size_t len, const char *s)
{
	return strlen(s) == len && strncasecmp(p, s, len) == 0;
}

/*
 * smtp_hostname - length of the RFC 5321 Domain at p, read up to the first
 * octet that cannot be in one, or -1: dot-separated Let-dig [Ldh-str]; a
 * label may hold UTF-8 characters too (RFC 6531 section 3.3 U-label,
 * checked for valid UTF-8, not for IDNA2008). Limits are in octets.
 */
static ssize_t smtp_hostname(const char *p, size_t len)
{
	size_t i, n, label = 0;
	unsigned char c;

	for (i = 0; i < len; i++) {
		c = (unsigned char) p[i];
		if (c == '.') {
			if (label == 0 || p[i - 1] == '-')
				return -1;
			label = 0;
			continue;
		}
		if (c >= 0x80) {
			if ((n = smtp_utf8_len(p + i, len - i)) == 0)
				return -1;
			i += n - 1;
			label += n - 1;
		} else if (c == '-' && label == 0) {
			return -1;
		} else if (!SMTP_ALNUM(c) && c != '-') {
			break;
		}
		if (++label > SMTP_LABEL_MAX)
			return -1;
	}
	return label > 0 && p[i - 1] != '-' && i <= SMTP_DOMAIN_MAX ? (ssize_t) i : -1;
}

/* smtp_literal_ok - "[1.2.3.4]" or "[IPv6:...]" */
static int smtp_literal_ok(const char *p, size_t len)
{
	char tmp[64];
	unsigned char addr[16];
	size_t n;

	if (len < 3 || p[0] != '[' || p[len - 1] != ']')
		return 0;
	n = len - 2;
	if (n >= sizeof(tmp) || memchr(p + 1, 0, n) != NULL)
		return 0;
	memcpy(tmp, p + 1, n);
	tmp[n] = 0;
	if (n > 5 && smtp_mem_caseeq(tmp, 5, "IPv6:"))
		return inet_pton(AF_INET6, tmp + 5, addr) == 1;
	return inet_pton(AF_INET, tmp, addr) == 1;
}

/* smtp_path_domain - length of the domain or literal at p, or -1 */
static ssize_t smtp_path_domain(const char *p, size_t len)
{
	size_t i = 0;

	if (len > 0 && p[0] == '[') {
		while (i < len && p[i] != ']')
			i++;
		if (i == len || !smtp_literal_ok(p, i + 1))
			return -1;
		return (ssize_t) i + 1;
	}
	return smtp_hostname(p, len);
}

/* smtp_path_at_domain - length of "@" and a domain or literal at p, or -1 */
static ssize_t smtp_path_at_domain(const char *p, size_t len)
{
	ssize_t n;

	if (len == 0 || p[0] != '@' || (n = smtp_path_domain(p + 1, len - 1)) < 0)
		return -1;
	return n + 1;
}

/*
 * smtp_path_local - length of the local-part at p, or -1. UTF-8
 * characters count as atext and qtext (RFC 6531 section 3.3); a
 * quoted-pair stays ASCII.
 */
static ssize_t smtp_path_local(const char *p, size_t len)
{
	size_t i, j, n;
	unsigned char c;

	if (len > 0 && p[0] == '"') {
		for (i = 1; i < len; i++) {
			c = (unsigned char) p[i];
			if (c == '"')
				return i > 1 ? (ssize_t) i + 1 : -1;
			if (c == '\\') {
				if (i + 1 >= len || (unsigned char) p[i + 1] < 32
				    || (unsigned char) p[i + 1] > 126)
					return -1;
				i++;
			} else if (c >= 0x80) {
				if ((n = smtp_utf8_len(p + i, len - i)) == 0)
					return -1;
				i += n - 1;
			} else if (c < 32 || c > 126) {
				return -1;
			}
		}
		return -1;
	}
	for (i = 0;;) {
		for (j = i; j < len; j++) {
			if ((unsigned char) p[j] >= 0x80) {
				if ((n = smtp_utf8_len(p + j, len - j)) == 0)
					return -1;
				j += n - 1;
			} else if (!smtp_atext((unsigned char) p[j])) {
				break;
			}
		}
		if (j == i)
			return -1;
		i = j;
		if (i < len && p[i] == '.') {
			i++;
			continue;
		}
		return (ssize_t) i;
	}
}

/* smtp_parse_path - RFC 5321 Path or "<>" */
int smtp_parse_path(const char *p, size_t len, int allow_null,
		    char **addr, size_t *used)
{
	size_t i, start;
	ssize_t n;

	if (len < 2 || p[0] != '<')
		return -1;
	i = 1;
	if (p[i] == '>') {
		if (!allow_null)
			return -1;
		*addr = xstrdup("");
		*used = 2;
		return 0;
	}
	if (p[i] == '@') {
		/* A-d-l ":" - obsolete source route, checked then dropped */
		for (;;) {
			if ((n = smtp_path_at_domain(p + i, len - i)) < 0)
				return -1;
			i += (size_t) n;
			if (i < len && p[i] == ',') {
				i++;
				continue;
			}
			if (i < len && p[i] == ':') {
				i++;
				break;
			}
			return -1;
		}
	}
	start = i;
	if ((n = smtp_path_local(p + i, len - i)) < 0 || n > SMTP_LOCAL_MAX)
		return -1;
	i += (size_t) n;
	if ((n = smtp_path_at_domain(p + i, len - i)) < 0)
		return -1;
	i += (size_t) n;
	if (i >= len || p[i] != '>' || i - start > SMTP_ADDR_MAX)
		return -1;
	*addr = xstrndup(p + start, i - start);
	*used = i + 1;
	return 0;
}

/*
 * smtp_xtext_hex - the octet a "+XX" at p[0..left) stands for, or -1;
 * RFC 3461 wants upper-case digits, LENIENT takes either
 */
static int smtp_xtext_hex(const char *p, size_t left, enum smtp_xtext how)
{
	int hi, lo;

	if (left < 3 || (hi = OPENSSL_hexchar2int((unsigned char) p[1])) < 0
	    || (lo = OPENSSL_hexchar2int((unsigned char) p[2])) < 0)
		return -1;
	if (how == SMTP_XTEXT_STRICT && (SMTP_LOWER(p[1]) || SMTP_LOWER(p[2])))
		return -1;
	return hi << 4 | lo;
}

/* smtp_xtext_decode - RFC 3461 xtext, strictly or leniently (see smtp.h) */
int smtp_xtext_decode(struct buf *out, const char *in, size_t len, enum smtp_xtext how)
{
	unsigned char c;
	size_t i;
	int x;

	for (i = 0; i < len; i++) {
		c = (unsigned char) in[i];
		if (c == '+' && (x = smtp_xtext_hex(in + i, len - i, how)) >= 0) {
			c = (unsigned char) x;
			i += 2;
			if (how == SMTP_XTEXT_STRICT && (c < 32 || c > 126))
				return -1;
		} else if (how == SMTP_XTEXT_STRICT && (c == '+' || c < 33 || c > 126 || c == '=')) {
			return -1;
		}
		if (out)
			buf_putc(out, (char) c);
	}
	return 0;
}

/* smtp_orcpt_split - "addr-type;xtext" into its type and its decoded address */
int smtp_orcpt_split(const char *v, size_t len, enum smtp_xtext how, char **type, char **addr)
{
	struct buf dec = BUF_INIT;
	size_t i;

	for (i = 0; i < len && v[i] != ';'; i++)
		if (how == SMTP_XTEXT_STRICT && !smtp_atext((unsigned char) v[i]))
			return -1;
	if (i == 0 || i == len || (how == SMTP_XTEXT_STRICT && i + 1 == len)
	    || smtp_xtext_decode(type ? &dec : NULL, v + i + 1, len - i - 1, how) < 0) {
		buf_free(&dec);
		return -1;
	}
	if (type == NULL)
		return 0;
	*type = xstrndup(v, i);
	*addr = xstrndup(dec.data ? dec.data : "", dec.len);
	buf_free(&dec);
	return 0;
}

 /*
  * ESMTP parameters. A handler gets the value (never empty: the syntax
  * pass guarantees one) and writes the reply on failure.
  */
struct smtp_param_ctx {
	struct smtp_tx *tx;		/* MAIL parameters go here */
	struct smtp_rcpt *rcpt;		/* RCPT parameters go here */
	uint64_t limit;			/* message_size, 0: none */
	int utf8;			/* MAIL: SMTPUTF8 offered; RCPT: the tx
					 * declared it */
	char *reply;			/* SMTP_REPLY_MAX bytes */
};

struct smtp_param {
	const char *name;
	int     (*apply) (struct smtp_param_ctx *, const char *, size_t);
	int     bare;			/* takes no value: apply gets NULL, 0 */
};

/* smtp_param_bad - the usual 501 for a parameter's value */
static int smtp_param_bad(struct smtp_param_ctx *c, const char *name)
{
	snprintf(c->reply, SMTP_REPLY_MAX, "501 5.5.4 Bad %s parameter syntax", name);
	return -1;
}

/* smtp_param_size - SIZE=n (RFC 1870) */
static int smtp_param_size(struct smtp_param_ctx *c, const char *v, size_t len)
{
	uint64_t n = 0;
	int over = 0;
	size_t i;

	for (i = 0; i < len; i++) {
		if (!SMTP_DIGIT(v[i]))
			return smtp_param_bad(c, "SIZE");
		if (n > (UINT64_MAX - 9) / 10)
			over = 1;
		else
			n = n * 10 + (uint64_t) (v[i] - '0');
	}
	if (over || (c->limit && n > c->limit)) {
		snprintf(c->reply, SMTP_REPLY_MAX,
			 "552 5.3.4 Message size exceeds fixed limit");
		return -1;
	}
	c->tx->size = n;
	return 0;
}

/* smtp_param_body - BODY=7BIT|8BITMIME (RFC 6152) */
static int smtp_param_body(struct smtp_param_ctx *c, const char *v, size_t len)
{
	if (smtp_mem_caseeq(v, len, "7BIT"))
		c->tx->body = SMTP_BODY_7BIT;
	else if (smtp_mem_caseeq(v, len, "8BITMIME"))
		c->tx->body = SMTP_BODY_8BITMIME;
	else
		return smtp_param_bad(c, "BODY");
	return 0;
}

/* smtp_param_ret - RET=FULL|HDRS (RFC 3461 4.3) */
static int smtp_param_ret(struct smtp_param_ctx *c, const char *v, size_t len)
{
	if (smtp_mem_caseeq(v, len, "FULL"))
		c->tx->ret = SMTP_RET_FULL;
	else if (smtp_mem_caseeq(v, len, "HDRS"))
		c->tx->ret = SMTP_RET_HDRS;
	else
		return smtp_param_bad(c, "RET");
	return 0;
}

/* smtp_param_envid - ENVID=xtext, printable when decoded (RFC 3461 4.4) */
static int smtp_param_envid(struct smtp_param_ctx *c, const char *v, size_t len)
{
	struct buf dec = BUF_INIT;

	if (smtp_xtext_decode(&dec, v, len, SMTP_XTEXT_STRICT) < 0 || dec.len == 0
	    || dec.len > SMTP_ENVID_MAX) {
		buf_free(&dec);
		return smtp_param_bad(c, "ENVID");
	}
	c->tx->envid = xstrndup(dec.data, dec.len);
	buf_free(&dec);
	return 0;
}

/* smtp_param_notify - NOTIFY=NEVER or a list of SUCCESS,FAILURE,DELAY */
static int smtp_param_notify(struct smtp_param_ctx *c, const char *v, size_t len)
{
	static const struct {
		const char *name;
		int bit;
	} kw[] = {
		{"NEVER", SMTP_NOTIFY_NEVER},
		{"SUCCESS", SMTP_NOTIFY_SUCCESS},
		{"FAILURE", SMTP_NOTIFY_FAILURE},
		{"DELAY", SMTP_NOTIFY_DELAY},
	};
	size_t i = 0, j, k;
	int bits = 0, bit;

	while (i <= len) {
		for (j = i; j < len && v[j] != ','; j++)
			 /* void */ ;
		for (bit = 0, k = 0; k < sizeof(kw) / sizeof(kw[0]); k++)
			if (smtp_mem_caseeq(v + i, j - i, kw[k].name))
				bit = kw[k].bit;
		if (bit == 0 || (bits & bit))
			return smtp_param_bad(c, "NOTIFY");
		bits |= bit;
		i = j + 1;
	}
	if ((bits & SMTP_NOTIFY_NEVER) && bits != SMTP_NOTIFY_NEVER)
		return smtp_param_bad(c, "NOTIFY");
	c->rcpt->notify = bits;
	return 0;
}

/* smtp_param_orcpt - ORCPT=addr-type;xtext (RFC 3461 4.2), kept encoded */
static int smtp_param_orcpt(struct smtp_param_ctx *c, const char *v, size_t len)
{
	if (len > SMTP_ORCPT_MAX || smtp_orcpt_split(v, len, SMTP_XTEXT_STRICT, NULL, NULL) < 0)
		return smtp_param_bad(c, "ORCPT");
	c->rcpt->orcpt = xstrndup(v, len);
	return 0;
}

/*
 * smtp_param_smtputf8 - SMTPUTF8 (RFC 6531 section 3.4): the envelope
 * and headers may be UTF-8. Unknown where it is not offered, as any
 * extension is (smtputf8_enable = no in Postfix).
 */
static int smtp_param_smtputf8(struct smtp_param_ctx *c, const char *v, size_t len)
{
	(void) v;
	(void) len;
	if (!c->utf8) {
		snprintf(c->reply, SMTP_REPLY_MAX, "555 5.5.4 Unsupported option: SMTPUTF8");
		return -1;
	}
	c->tx->smtputf8 = 1;
	return 0;
}

static const struct smtp_param smtp_mail_params[] = {
	{"SIZE", smtp_param_size, 0},
	{"BODY", smtp_param_body, 0},
	{"RET", smtp_param_ret, 0},
	{"ENVID", smtp_param_envid, 0},
	{"SMTPUTF8", smtp_param_smtputf8, 1},
	{NULL, NULL, 0},
};

static const struct smtp_param smtp_rcpt_params[] = {
	{"NOTIFY", smtp_param_notify, 0},
	{"ORCPT", smtp_param_orcpt, 0},
	{NULL, NULL, 0},
};

/* smtp_param_token - split one parameter at p; returns its length */
static size_t smtp_param_token(const char *p, size_t len, size_t *name_len,
			       const char **val, size_t *val_len)
{
	size_t i, eq;

	for (i = 0; i < len && p[i] != ' '; i++)
		 /* void */ ;
	for (eq = 0; eq < i && p[eq] != '='; eq++)
		 /* void */ ;
	*name_len = eq;
	*val = eq < i ? p + eq + 1 : NULL;
	*val_len = eq < i ? i - eq - 1 : 0;
	return i;
}

/* smtp_param_syntax_ok - esmtp-keyword ["=" esmtp-value] */
static int smtp_param_syntax_ok(const char *p, size_t name_len,
				const char *val, size_t val_len)
{
	size_t i;
	unsigned char c;

	if (name_len == 0 || !SMTP_ALNUM(p[0]))
		return 0;
	for (i = 1; i < name_len; i++)
		if (!SMTP_ALNUM(p[i]) && p[i] != '-')
			return 0;
	if (val == NULL)
		return 1;
	if (val_len == 0)
		return 0;
	for (i = 0; i < val_len; i++) {
		c = (unsigned char) val[i];
		if (c < 33 || c > 126 || c == '=')
			return 0;
	}
	return 1;
}

/* smtp_parse_params - check all parameters, then apply them in order */
static int smtp_parse_params(const char *p, size_t len,
			     const struct smtp_param *table,
			     struct smtp_param_ctx *c)
{
	const char *val;
	size_t i, n, name_len, val_len;
	unsigned seen = 0;
	int k, pass;

	for (pass = 0; pass < 2; pass++) {
		for (i = 0; i < len; i += n) {
			if (p[i] == ' ') {
				n = 1;
				continue;
			}
			n = smtp_param_token(p + i, len - i, &name_len, &val, &val_len);
			if (pass == 0) {
				if (!smtp_param_syntax_ok(p + i, name_len, val, val_len)) {
					snprintf(c->reply, SMTP_REPLY_MAX,
					     "501 5.5.4 Syntax error in parameters");
					return -1;
				}
				continue;
			}
			for (k = 0; table[k].name; k++)
				if (smtp_mem_caseeq(p + i, name_len, table[k].name))
					break;
			if (table[k].name == NULL) {
				snprintf(c->reply, SMTP_REPLY_MAX,
					 "555 5.5.4 Unsupported option: %.*s",
					 (int) (name_len > 64 ? 64 : name_len), p + i);
				return -1;
			}
			if (seen & (1u << k)) {
				snprintf(c->reply, SMTP_REPLY_MAX,
					 "501 5.5.4 Duplicate %s parameter", table[k].name);
				return -1;
			}
			seen |= 1u << k;
			if ((val == NULL) != table[k].bare)
				return smtp_param_bad(c, table[k].name);
			if (table[k].apply(c, val, val_len) < 0)
				return -1;
		}
	}
	return 0;
}

/*
 * MAIL and RCPT differ only in what this says: the same parser serves
 * both, so a path or parameter rule cannot drift between them.
 */
struct smtp_path_cmd {
	const char *prefix;		/* "FROM:" or "TO:", any case */
	int     allow_null;		/* "<>" accepted */
	const char *syntax_reply;	/* no prefix, no path */
	const char *addr_reply;		/* the path itself is bad */
	const char *utf8_reply;		/* UTF-8 path, SMTPUTF8 not declared */
	const char *utf8_off_reply;	/* UTF-8 path, SMTPUTF8 not offered */
	const struct smtp_param *params;
};

static const struct smtp_path_cmd smtp_mail_cmd = {
	.prefix = "FROM:", .allow_null = 1, .params = smtp_mail_params,
	.syntax_reply = "501 5.5.4 Syntax: MAIL FROM:<address>",
	.addr_reply = "501 5.1.7 Bad sender address syntax",
	.utf8_reply = "553 5.6.7 Must declare SMTPUTF8 to send UTF-8 sender address",
	.utf8_off_reply = "553 5.6.7 UTF-8 sender address refused: SMTPUTF8 is not offered",
};

static const struct smtp_path_cmd smtp_rcpt_cmd = {
	.prefix = "TO:", .allow_null = 0, .params = smtp_rcpt_params,
	.syntax_reply = "501 5.5.4 Syntax: RCPT TO:<address>",
	.addr_reply = "501 5.1.3 Bad recipient address syntax",
	.utf8_reply = "553 5.6.7 Must declare SMTPUTF8 to send UTF-8 recipient address",
	.utf8_off_reply = "553 5.6.7 Must declare SMTPUTF8 to send UTF-8 recipient address",
};

/*
 * smtp_parse_path_cmd - "<prefix>[ ]<path>[ params]" for cmd. A good
 * path replaces *addr (the old one is freed) before the parameters are
 * applied through c; a bad prefix or path leaves *addr alone. A UTF-8
 * path is good only in a transaction that declared SMTPUTF8, which
 * MAIL does after its path: so it is judged once the parameters are.
 */
static int smtp_parse_path_cmd(const struct smtp_path_cmd *cmd, const char *args,
			       size_t len, char **addr, int *declared,
			       struct smtp_param_ctx *c)
{
	size_t i = strlen(cmd->prefix), n;
	char *path;
	int offered = c->utf8;	/* MAIL: offered; RCPT: declared (see its replies) */

	if (len < i || !smtp_mem_caseeq(args, i, cmd->prefix))
		goto syntax;
	if (i < len && args[i] == ' ')
		i++;
	if (i == len)
		goto syntax;
	if (smtp_parse_path(args + i, len - i, cmd->allow_null, &path, &n) < 0)
		goto bad_addr;
	i += n;
	if (i < len && args[i] != ' ') {
		free(path);
		goto bad_addr;
	}
	free(*addr);
	*addr = path;
	if (smtp_parse_params(args + i, len - i, cmd->params, c) < 0)
		return -1;
	if (!smtp_ascii(path, strlen(path)) && !*declared) {
		snprintf(c->reply, SMTP_REPLY_MAX, "%s",
			 offered ? cmd->utf8_reply : cmd->utf8_off_reply);
		return -1;
	}
	return 0;

syntax:
	snprintf(c->reply, SMTP_REPLY_MAX, "%s", cmd->syntax_reply);
	return -1;
bad_addr:
	snprintf(c->reply, SMTP_REPLY_MAX, "%s", cmd->addr_reply);
	return -1;
}

/* smtp_parse_mail - "FROM:<path> [params]" */
int smtp_parse_mail(const char *args, size_t len, uint64_t limit, int utf8,
		    struct smtp_tx *tx, char reply[SMTP_REPLY_MAX])
{
	struct smtp_param_ctx c = {tx, NULL, limit, utf8, reply};

	return smtp_parse_path_cmd(&smtp_mail_cmd, args, len, &tx->from,
				   &tx->smtputf8, &c);
}

/* smtp_parse_rcpt - "TO:<path> [params]" */
int smtp_parse_rcpt(const char *args, size_t len, int utf8, struct smtp_rcpt *r,
		    char reply[SMTP_REPLY_MAX])
{
	struct smtp_param_ctx c = {NULL, r, 0, utf8, reply};

	return smtp_parse_path_cmd(&smtp_rcpt_cmd, args, len, &r->addr, &utf8, &c);
}

/* smtp_parse_bdat - "chunk-size [LAST]" (RFC 3030 section 3) */
int smtp_parse_bdat(const char *args, size_t len, uint64_t *size, int *last,
		    char reply[SMTP_REPLY_MAX])
{
	size_t i = 0, start;
	uint64_t n = 0;

	/* runs of spaces are tolerated: they leave the length unambiguous */
	while (i < len && args[i] == ' ')
		i++;
	for (start = i; i < len && SMTP_DIGIT(args[i]); i++) {
		if (i - start >= SMTP_BDAT_DIGITS_MAX
		    || n > (UINT64_MAX - (uint64_t) (args[i] - '0')) / 10)
			goto syntax;
		n = n * 10 + (uint64_t) (args[i] - '0');
	}
	if (i == start)
		goto syntax;
	*last = 0;
	if (i < len) {
		if (args[i] != ' ')
			goto syntax;
		while (i < len && args[i] == ' ')
			i++;
		if (!smtp_mem_caseeq(args + i, len - i, "LAST"))
			goto syntax;
		*last = 1;
	}
	if (n == 0 && !*last) {
		/* an empty chunk would be a free NOOP that resets no timer */
		snprintf(reply, SMTP_REPLY_MAX, "501 5.5.4 Error: empty BDAT chunk without LAST");
		return -1;
	}
	*size = n;
	return 0;

syntax:
	snprintf(reply, SMTP_REPLY_MAX, "501 5.5.4 Syntax: BDAT chunk-size [LAST]");
	return -1;
}

/* smtp_rcpt_id - local part as given, domain in ASCII lower case: 0, or -1 if too long */
int smtp_rcpt_id(const char *addr, char out[SMTP_RCPT_ID_MAX])
{
	size_t len = strlen(addr), i;
	const char *at = strrchr(addr, '@');

	if (len >= SMTP_RCPT_ID_MAX)
		return -1;
	for (i = 0; i <= len; i++)
		out[i] = at && addr + i > at && addr[i] >= 'A' && addr[i] <= 'Z'
		    ? (char) (addr[i] - 'A' + 'a') : addr[i];
	return 0;
}
