/*
 * NAME
 *	test_smtp_parse 1
 * SUMMARY
 *	unit tests: MAIL/RCPT paths, ESMTP parameters, xtext and the ORCPT split
 * DESCRIPTION
 *	Table-driven: every row is run, every mismatch is printed as
 *	"name: got ..., want ...", and the test fails once at the end.
 *	Inputs carry explicit lengths so that NUL bytes can be tested.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../../smtp/smtp.h"
#include "../../smtp/smtp_parse.h"
#include "../../smtp/smtp_tx.h"
#include "test_util.h"



/* streq0 - equal strings, NULL equal only to NULL */
static int streq0(const char *a, const char *b)
{
	return (a == NULL || b == NULL) ? a == b : strcmp(a, b) == 0;
}

 /*
  * Paths.
  */
struct path_case {
	const char *in;
	size_t len;
	int allow_null;
	const char *want;		/* address, or NULL: rejected */
	size_t want_used;
};

static void test_path(void **state)
{
	struct path_case cases[] = {
		{S("<a@b.c>"), 0, "a@b.c", 7},
		{S("<user+tag@example.com>"), 0, "user+tag@example.com", 22},
		{S("<o'brien@x.ie>"), 0, "o'brien@x.ie", 14},
		{S("<a.b.c@d-e.f>"), 0, "a.b.c@d-e.f", 13},
		{S("<!#$%&'*+-/=?^_`{|}~@x>"), 0, "!#$%&'*+-/=?^_`{|}~@x", 23},
		{S("<a@localhost>"), 0, "a@localhost", 13},
		{S("<A@B.C> SIZE=1"), 0, "A@B.C", 7},
		{S("<>"), 1, "", 2},
		{S("<>"), 0, NULL, 0},
		{S("<@a,@b.c:u@d>"), 0, "u@d", 13},
		{S("<@a:u@d>"), 0, "u@d", 8},
		{S("<\"john doe\"@example.com>"), 0, "\"john doe\"@example.com", 24},
		{S("<\"a\\\"b\"@x.y>"), 0, "\"a\\\"b\"@x.y", 12},
		{S("<\"a@b\"@x>"), 0, "\"a@b\"@x", 9},
		{S("<a@[127.0.0.1]>"), 0, "a@[127.0.0.1]", 15},
		{S("<a@[IPv6:::1]>"), 0, "a@[IPv6:::1]", 14},
		{S("<a@[ipv6:2001:db8::1]>"), 0, "a@[ipv6:2001:db8::1]", 22},
		/* injection and plain garbage */
		{S("<;sleep 66;>"), 1, NULL, 0},
		{S("<;sleep 66;@x>"), 1, NULL, 0},
		{S("<`id`@x>"), 1, "`id`@x", 8},	/* atext, legal */
		{S("<$(id)@x>"), 1, NULL, 0},
		{S("<a|b;c@x>"), 1, NULL, 0},
		{S("a@b.c"), 1, NULL, 0},
		{S("<a@b.c"), 1, NULL, 0},
		{S("<a>"), 1, NULL, 0},
		{S("<a@>"), 1, NULL, 0},
		{S("<@>"), 1, NULL, 0},
		{S("<@b>"), 1, NULL, 0},
		{S("<@a:b>"), 1, NULL, 0},
		{S("<@a,b:u@d>"), 1, NULL, 0},
		{S("<@a;u@d>"), 1, NULL, 0},
		{S("<a..b@c>"), 1, NULL, 0},
		{S("<.a@c>"), 1, NULL, 0},
		{S("<a.@c>"), 1, NULL, 0},
		{S("<a@b..c>"), 1, NULL, 0},
		{S("<a@.b>"), 1, NULL, 0},
		{S("<a@b.>"), 1, NULL, 0},
		{S("<a@-b.c>"), 1, NULL, 0},
		{S("<a@b-.c>"), 1, NULL, 0},
		{S("<a@b_c.d>"), 1, NULL, 0},
		{S("<a b@c>"), 1, NULL, 0},
		{S("<\"\"@c>"), 1, NULL, 0},
		{S("<\"a@c>"), 1, NULL, 0},
		{S("<\"a\rb\"@c>"), 1, NULL, 0},
		{S("<\"a\\\x01\"@c>"), 1, NULL, 0},
		{S("<a@[1.2.3]>"), 1, NULL, 0},
		{S("<a@[01.2.3.4]>"), 1, NULL, 0},
		{S("<a@[IPv6:zz]>"), 1, NULL, 0},
		{S("<a@[1.2.3.4>"), 1, NULL, 0},
		{S("<a@[]>"), 1, NULL, 0},
		{S("<a\0b@c>"), 1, NULL, 0},
		{S("<a@b\0>"), 1, NULL, 0},
		{S("<a@b\r>"), 1, NULL, 0},
		{S("<a@b\n>"), 1, NULL, 0},
		/* UTF-8 (RFC 6531): the path takes valid UTF-8; SMTPUTF8 is MAIL's to judge */
		{S("<\xc3\xa9@x>"), 1, "\xc3\xa9@x", 6},
		{S("<a@\xc3\xa9.x>"), 1, "a@\xc3\xa9.x", 8},
		{S("<\xe7\x94\xa8\xe6\x88\xb7@\xe4\xbe\x8b\xe5\xad\x90.\xe6\xb5\x8b\xe8\xaf\x95>"), 0,
		 "\xe7\x94\xa8\xe6\x88\xb7@\xe4\xbe\x8b\xe5\xad\x90.\xe6\xb5\x8b\xe8\xaf\x95", 22},
		{S("<\"\xc3\xa9 x\"@x>"), 0, "\"\xc3\xa9 x\"@x", 10},
		{S("<\xf0\x9f\x98\x80.a@x-\xc3\xa9>"), 0, "\xf0\x9f\x98\x80.a@x-\xc3\xa9", 13},
		{S("<\xf4\x8f\xbf\xbf@x>"), 0, "\xf4\x8f\xbf\xbf@x", 8},	/* U+10FFFF */
		{S("<\xc2\xa0@x>"), 0, "\xc2\xa0@x", 6},	/* U+00A0, first past C1 */
		{S("<\xc0\xbb@x>"), 1, NULL, 0},	/* overlong ';' */
		{S("<\xc1\xbf@x>"), 1, NULL, 0},	/* overlong DEL */
		{S("<\xe0\x80\xbc@x>"), 1, NULL, 0},	/* overlong '<' in 3 */
		{S("<\xf0\x80\x80\xbe@x>"), 1, NULL, 0},	/* overlong '>' in 4 */
		{S("<\xc0\x8d\xc0\x8a@x>"), 1, NULL, 0},	/* overlong CR LF */
		{S("<\xed\xa0\x80@x>"), 1, NULL, 0},	/* surrogate U+D800 */
		{S("<\xed\xbf\xbf@x>"), 1, NULL, 0},	/* surrogate U+DFFF */
		{S("<\xf4\x90\x80\x80@x>"), 1, NULL, 0},	/* U+110000 */
		{S("<\xf5\x80\x80\x80@x>"), 1, NULL, 0},
		{S("<\xff@x>"), 1, NULL, 0},
		{S("<\xc2\x80@x>"), 1, NULL, 0},	/* C1 U+0080 */
		{S("<\xc2\x85@x>"), 1, NULL, 0},	/* C1 NEL: a line break to some */
		{S("<\xc2\x9f@x>"), 1, NULL, 0},	/* C1 U+009F */
		{S("<a@x\xc2\x85y>"), 1, NULL, 0},
		{S("<\"\xc2\x8d\"@x>"), 1, NULL, 0},
		{S("<\xc3@x>"), 1, NULL, 0},	/* truncated */
		{S("<\xe7\x94@x>"), 1, NULL, 0},
		{S("<a@\xe7\x94>"), 1, NULL, 0},
		{S("<\xa9@x>"), 1, NULL, 0},	/* lone continuation */
		{S("<\xc3\xa9\xa9@x>"), 1, NULL, 0},
		{S("<\"a\\\xc3\xa9\"@x>"), 1, NULL, 0},	/* quoted-pair stays ASCII */
		{S("<a@[\xc3\xa9]>"), 1, NULL, 0},
		{S("<a@-\xc3\xa9>"), 1, NULL, 0},
		{S("<a@\xc3\xa9->"), 1, NULL, 0},
		{S("<"), 1, NULL, 0},
		{S(""), 1, NULL, 0},
	};
	size_t i, n = sizeof(cases) / sizeof(cases[0]), used;
	int fails = 0, rc;
	char *addr;

	(void) state;
	for (i = 0; i < n; i++) {
		struct path_case *c = cases + i;

		addr = NULL;
		used = 0;
		rc = smtp_parse_path(c->in, c->len, c->allow_null, &addr, &used);
		if (rc == 0 && c->want == NULL) {
			print_error("path %s: got accepted \"%s\", want rejected\n",
				    esc(c->in, c->len), esc(addr, strlen(addr)));
			fails++;
		} else if (rc != 0 && c->want != NULL) {
			print_error("path %s: got rejected, want \"%s\"\n",
				    esc(c->in, c->len), c->want);
			fails++;
		} else if (rc == 0 && (strcmp(addr, c->want) != 0 || used != c->want_used)) {
			print_error("path %s: got \"%s\" used %zu, want \"%s\" used %zu\n",
				    esc(c->in, c->len), esc(addr, strlen(addr)), used,
				    c->want, c->want_used);
			fails++;
		}
		free(addr);
	}
	assert_int_equal(fails, 0);
}

/* make_path - "<" + local of n1 'l' + "@" + labels of n2 'd' joined by '.' + ">" */
static char *make_path(size_t local_len, size_t label_len, size_t labels)
{
	char *p = malloc(local_len + labels * (label_len + 1) + 4), *o = p;
	size_t i;

	*o++ = '<';
	memset(o, 'l', local_len);
	o += local_len;
	*o++ = '@';
	for (i = 0; i < labels; i++) {
		if (i)
			*o++ = '.';
		memset(o, 'd', label_len);
		o += label_len;
	}
	*o++ = '>';
	*o = 0;
	return p;
}

static void test_path_limits(void **state)
{
	static const struct {
		size_t local_len, label_len, labels;
		int ok;
	} cases[] = {
		{64, 1, 1, 1},		/* local-part of 64 */
		{65, 1, 1, 0},		/* local-part of 65 */
		{1, 63, 1, 1},		/* label of 63 */
		{1, 64, 1, 0},		/* label of 64 */
		{60, 63, 3, 1},		/* 60 + 1 + 191 = 252 */
		{62, 63, 3, 1},		/* 254 */
		{63, 63, 3, 0},		/* 255 */
		{1, 49, 5, 1},		/* domain of 249 */
		{1, 62, 4, 1},		/* 1 + 1 + 251 = 253 */
		{2, 62, 4, 1},		/* 254 */
		{3, 62, 4, 0},		/* 255 */
	};
	size_t i, n = sizeof(cases) / sizeof(cases[0]), used, len;
	int fails = 0, rc, ok;
	char *p, *addr;

	(void) state;
	for (i = 0; i < n; i++) {
		p = make_path(cases[i].local_len, cases[i].label_len, cases[i].labels);
		len = strlen(p);
		addr = NULL;
		rc = smtp_parse_path(p, len, 0, &addr, &used);
		ok = cases[i].ok;
		if ((rc == 0) != ok || (rc == 0 && (used != len || strlen(addr) != len - 2))) {
			print_error("path of local %zu, %zu labels of %zu (mailbox %zu): got rc %d, want %s\n",
				    cases[i].local_len, cases[i].labels, cases[i].label_len,
				    len - 2, rc, ok ? "accepted" : "rejected");
			fails++;
		}
		free(addr);
		free(p);
	}
	assert_int_equal(fails, 0);
}

 /*
  * MAIL FROM arguments.
  */
struct mail_case {
	const char *in;
	size_t len;
	uint64_t limit;
	const char *reply;		/* NULL: accepted */
	const char *from;
	uint64_t size;
	enum smtp_body body;
	enum smtp_ret ret;
	const char *envid;
};

#define BADP	"501 5.5.4 Syntax error in parameters"
#define BADFROM	"501 5.1.7 Bad sender address syntax"
#define SYNMAIL	"501 5.5.4 Syntax: MAIL FROM:<address>"
#define TOOBIG	"552 5.3.4 Message size exceeds fixed limit"

static void test_mail(void **state)
{
	static const struct mail_case cases[] = {
		{S("FROM:<a@b.c>"), 0, NULL, "a@b.c", 0, 0, 0, NULL},
		{S("FROM: <a@b.c>"), 0, NULL, "a@b.c", 0, 0, 0, NULL},
		{S("from:<a@b.c>"), 0, NULL, "a@b.c", 0, 0, 0, NULL},
		{S("FROM:<>"), 0, NULL, "", 0, 0, 0, NULL},
		{S("FROM:<@r1,@r2:a@b.c>"), 0, NULL, "a@b.c", 0, 0, 0, NULL},
		{S("FROM:<\"x y\"@b.c>"), 0, NULL, "\"x y\"@b.c", 0, 0, 0, NULL},
		{S("FROM:<;sleep 66;>"), 0, BADFROM, NULL, 0, 0, 0, NULL},
		{S("FROM:a@b.c"), 0, BADFROM, NULL, 0, 0, 0, NULL},
		{S("FROM:  <a@b.c>"), 0, BADFROM, NULL, 0, 0, 0, NULL},
		{S("FROM:<a@b.c>SIZE=1"), 0, BADFROM, NULL, 0, 0, 0, NULL},
		{S("FROM:<a@b.c>>"), 0, BADFROM, NULL, 0, 0, 0, NULL},
		{S("FROM:<a\0@b.c>"), 0, BADFROM, NULL, 0, 0, 0, NULL},
		{S("FROM:"), 0, SYNMAIL, NULL, 0, 0, 0, NULL},
		{S("FROM: "), 0, SYNMAIL, NULL, 0, 0, 0, NULL},
		{S("FROM <a@b.c>"), 0, SYNMAIL, NULL, 0, 0, 0, NULL},
		{S("TO:<a@b.c>"), 0, SYNMAIL, NULL, 0, 0, 0, NULL},
		{S(""), 0, SYNMAIL, NULL, 0, 0, 0, NULL},
		{S("FROM:<a@b.c> SIZE=100"), 1000, NULL, "a@b.c", 100, 0, 0, NULL},
		{S("FROM:<a@b.c> size=1000"), 1000, NULL, "a@b.c", 1000, 0, 0, NULL},
		{S("FROM:<a@b.c> SIZE=1001"), 1000, TOOBIG, NULL, 0, 0, 0, NULL},
		{S("FROM:<a@b.c> SIZE=99999999999999999999999"), 1000, TOOBIG, NULL, 0, 0, 0, NULL},
		{S("FROM:<a@b.c> SIZE=99999999999"), 0, NULL, "a@b.c", 99999999999ULL, 0, 0, NULL},
		{S("FROM:<a@b.c> SIZE=12a"), 0, "501 5.5.4 Bad SIZE parameter syntax", NULL, 0, 0, 0, NULL},
		{S("FROM:<a@b.c> SIZE=-1"), 0, "501 5.5.4 Bad SIZE parameter syntax", NULL, 0, 0, 0, NULL},
		{S("FROM:<a@b.c> SIZE"), 0, "501 5.5.4 Bad SIZE parameter syntax", NULL, 0, 0, 0, NULL},
		{S("FROM:<a@b.c> SIZE=100 BODY=8BITMIME RET=HDRS ENVID=abc+2Bdef"), 1000, NULL,
		 "a@b.c", 100, SMTP_BODY_8BITMIME, SMTP_RET_HDRS, "abc+def"},
		{S("FROM:<a@b.c>  BODY=7bit   RET=full "), 0, NULL, "a@b.c", 0, SMTP_BODY_7BIT, SMTP_RET_FULL, NULL},
		{S("FROM:<a@b.c> BODY=BINARYMIME"), 0, "501 5.5.4 Bad BODY parameter syntax", NULL, 0, 0, 0, NULL},
		{S("FROM:<a@b.c> RET=NONE"), 0, "501 5.5.4 Bad RET parameter syntax", NULL, 0, 0, 0, NULL},
		{S("FROM:<a@b.c> ENVID=+2b"), 0, "501 5.5.4 Bad ENVID parameter syntax", NULL, 0, 0, 0, NULL},
		{S("FROM:<a@b.c> ENVID=+2"), 0, "501 5.5.4 Bad ENVID parameter syntax", NULL, 0, 0, 0, NULL},
		{S("FROM:<a@b.c> ENVID=a+00b"), 0, "501 5.5.4 Bad ENVID parameter syntax", NULL, 0, 0, 0, NULL},
		{S("FROM:<a@b.c> ENVID=a+0D+0Ab"), 0, "501 5.5.4 Bad ENVID parameter syntax", NULL, 0, 0, 0, NULL},
		{S("FROM:<a@b.c> ENVID=a+20b"), 0, NULL, "a@b.c", 0, 0, 0, "a b"},
		{S("FROM:<a@b.c> ENVID=0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789"),
		 0, NULL, "a@b.c", 0, 0, 0, "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789"},
		{S("FROM:<a@b.c> ENVID=0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789x"),
		 0, "501 5.5.4 Bad ENVID parameter syntax", NULL, 0, 0, 0, NULL},
		/* control characters and malformed name=value: 501 5.5.4 */
		{S("FROM:<a@b.c> ENVID=a\rb"), 0, BADP, NULL, 0, 0, 0, NULL},
		{S("FROM:<a@b.c> ENVID=a\nb"), 0, BADP, NULL, 0, 0, 0, NULL},
		{S("FROM:<a@b.c> ENVID=a\0b"), 0, BADP, NULL, 0, 0, 0, NULL},
		{S("FROM:<a@b.c> SIZE=1\r"), 0, BADP, NULL, 0, 0, 0, NULL},
		{S("FROM:<a@b.c> SIZE=1\tBODY=7BIT"), 0, BADP, NULL, 0, 0, 0, NULL},
		{S("FROM:<a@b.c> SIZE="), 0, BADP, NULL, 0, 0, 0, NULL},
		{S("FROM:<a@b.c> =1"), 0, BADP, NULL, 0, 0, 0, NULL},
		{S("FROM:<a@b.c> ="), 0, BADP, NULL, 0, 0, 0, NULL},
		{S("FROM:<a@b.c> ENVID=a=b"), 0, BADP, NULL, 0, 0, 0, NULL},
		{S("FROM:<a@b.c> -X=1"), 0, BADP, NULL, 0, 0, 0, NULL},
		{S("FROM:<a@b.c> X_Y=1"), 0, BADP, NULL, 0, 0, 0, NULL},
		{S("FROM:<a@b.c> ENVID=\xc3\xa9"), 0, BADP, NULL, 0, 0, 0, NULL},
		{S("FROM:<a@b.c> FOO=1 SIZE=\r"), 0, BADP, NULL, 0, 0, 0, NULL},
		/* unknown and duplicated */
		{S("FROM:<a@b.c> FOO=bar"), 0, "555 5.5.4 Unsupported option: FOO", NULL, 0, 0, 0, NULL},
		{S("FROM:<a@b.c> SMTPUTF8"), 0, "555 5.5.4 Unsupported option: SMTPUTF8", NULL, 0, 0, 0, NULL},
		{S("FROM:<a@b.c> NOTIFY=NEVER"), 0, "555 5.5.4 Unsupported option: NOTIFY", NULL, 0, 0, 0, NULL},
		{S("FROM:<a@b.c> SIZE=1 SIZE=2"), 0, "501 5.5.4 Duplicate SIZE parameter", NULL, 0, 0, 0, NULL},
		{S("FROM:<a@b.c> ENVID=x envid=y"), 0, "501 5.5.4 Duplicate ENVID parameter", NULL, 0, 0, 0, NULL},
	};
	size_t i, n = sizeof(cases) / sizeof(cases[0]);
	char reply[SMTP_REPLY_MAX];
	struct smtp_tx *tx;
	int fails = 0, rc;

	(void) state;
	for (i = 0; i < n; i++) {
		const struct mail_case *c = cases + i;

		tx = smtp_tx_new();
		reply[0] = 0;
		rc = smtp_parse_mail(c->in, c->len, c->limit, 0, tx, reply);
		if (c->reply) {
			if (rc == 0 || strcmp(reply, c->reply) != 0) {
				print_error("MAIL %s: got rc %d \"%s\", want \"%s\"\n",
					    esc(c->in, c->len), rc, reply, c->reply);
				fails++;
			}
		} else if (rc != 0) {
			print_error("MAIL %s: got \"%s\", want accepted\n", esc(c->in, c->len), reply);
			fails++;
		} else if (!streq0(tx->from, c->from) || tx->size != c->size
			   || tx->body != c->body || tx->ret != c->ret
			   || !streq0(tx->envid, c->envid)) {
			print_error("MAIL %s: got from=%s size=%llu body=%d ret=%d envid=%s, "
				    "want from=%s size=%llu body=%d ret=%d envid=%s\n",
				    esc(c->in, c->len), tx->from,
				    (unsigned long long) tx->size, tx->body, tx->ret,
				    tx->envid ? tx->envid : "(null)", c->from,
				    (unsigned long long) c->size, c->body, c->ret,
				    c->envid ? c->envid : "(null)");
			fails++;
		}
		smtp_tx_free(tx);
	}
	assert_int_equal(fails, 0);
}

 /*
  * RCPT TO arguments.
  */
struct rcpt_case {
	const char *in;
	size_t len;
	const char *reply;		/* NULL: accepted */
	const char *addr;
	int notify;
	const char *orcpt;
};

#define BADTO	"501 5.1.3 Bad recipient address syntax"
#define BADNOT	"501 5.5.4 Bad NOTIFY parameter syntax"
#define BADORC	"501 5.5.4 Bad ORCPT parameter syntax"

static void test_rcpt(void **state)
{
	static const struct rcpt_case cases[] = {
		{S("TO:<a@b.c>"), NULL, "a@b.c", 0, NULL},
		{S("to: <a@b.c>"), NULL, "a@b.c", 0, NULL},
		{S("TO:<>"), BADTO, NULL, 0, NULL},
		{S("TO:<;sleep 66;>"), BADTO, NULL, 0, NULL},
		{S("TO:<postmaster>"), BADTO, NULL, 0, NULL},
		{S("TO:"), "501 5.5.4 Syntax: RCPT TO:<address>", NULL, 0, NULL},
		{S("FROM:<a@b.c>"), "501 5.5.4 Syntax: RCPT TO:<address>", NULL, 0, NULL},
		{S("TO:<a@b.c> NOTIFY=NEVER"), NULL, "a@b.c", SMTP_NOTIFY_NEVER, NULL},
		{S("TO:<a@b.c> NOTIFY=never"), NULL, "a@b.c", SMTP_NOTIFY_NEVER, NULL},
		{S("TO:<a@b.c> NOTIFY=SUCCESS,FAILURE"), NULL, "a@b.c",
		 SMTP_NOTIFY_SUCCESS | SMTP_NOTIFY_FAILURE, NULL},
		{S("TO:<a@b.c> NOTIFY=DELAY,SUCCESS,FAILURE"), NULL, "a@b.c",
		 SMTP_NOTIFY_SUCCESS | SMTP_NOTIFY_FAILURE | SMTP_NOTIFY_DELAY, NULL},
		{S("TO:<a@b.c> NOTIFY=NEVER,SUCCESS"), BADNOT, NULL, 0, NULL},
		{S("TO:<a@b.c> NOTIFY=SUCCESS,NEVER"), BADNOT, NULL, 0, NULL},
		{S("TO:<a@b.c> NOTIFY=SUCCESS,,FAILURE"), BADNOT, NULL, 0, NULL},
		{S("TO:<a@b.c> NOTIFY=SUCCESS,"), BADNOT, NULL, 0, NULL},
		{S("TO:<a@b.c> NOTIFY=,SUCCESS"), BADNOT, NULL, 0, NULL},
		{S("TO:<a@b.c> NOTIFY=SUCCESS,SUCCESS"), BADNOT, NULL, 0, NULL},
		{S("TO:<a@b.c> NOTIFY=BOGUS"), BADNOT, NULL, 0, NULL},
		{S("TO:<a@b.c> NOTIFY="), BADP, NULL, 0, NULL},
		{S("TO:<a@b.c> ORCPT=rfc822;a+40b.c"), NULL, "a@b.c", 0, "rfc822;a+40b.c"},
		{S("TO:<a@b.c> ORCPT=rfc822;x@y NOTIFY=FAILURE"), NULL, "a@b.c",
		 SMTP_NOTIFY_FAILURE, "rfc822;x@y"},
		{S("TO:<a@b.c> ORCPT=rfc822"), BADORC, NULL, 0, NULL},
		{S("TO:<a@b.c> ORCPT=rfc822;"), BADORC, NULL, 0, NULL},
		{S("TO:<a@b.c> ORCPT=;a@b"), BADORC, NULL, 0, NULL},
		{S("TO:<a@b.c> ORCPT=rfc822;a+0Db"), BADORC, NULL, 0, NULL},
		{S("TO:<a@b.c> ORCPT=rfc822;a+zz"), BADORC, NULL, 0, NULL},
		{S("TO:<a@b.c> ORCPT=rfc822;a+2b"), BADORC, NULL, 0, NULL},
		{S("TO:<a@b.c> ORCPT=rfc822;a+00b"), BADORC, NULL, 0, NULL},
		{S("TO:<a@b.c> ORCPT=rf(c;a"), BADORC, NULL, 0, NULL},
		{S("TO:<a@b.c> ORCPT=rfc822;a;b"), NULL, "a@b.c", 0, "rfc822;a;b"},
		{S("TO:<a@b.c> ORCPT=rfc822;a\rb"), BADP, NULL, 0, NULL},
		{S("TO:<a@b.c> ORCPT=rfc822;a\0b"), BADP, NULL, 0, NULL},
		{S("TO:<a@b.c> SIZE=1"), "555 5.5.4 Unsupported option: SIZE", NULL, 0, NULL},
		{S("TO:<a@b.c> NOTIFY=NEVER NOTIFY=NEVER"), "501 5.5.4 Duplicate NOTIFY parameter", NULL, 0, NULL},
	};
	size_t i, n = sizeof(cases) / sizeof(cases[0]);
	char reply[SMTP_REPLY_MAX];
	struct smtp_rcpt r;
	int fails = 0, rc;

	(void) state;
	for (i = 0; i < n; i++) {
		const struct rcpt_case *c = cases + i;

		memset(&r, 0, sizeof(r));
		reply[0] = 0;
		rc = smtp_parse_rcpt(c->in, c->len, 0, &r, reply);
		if (c->reply) {
			if (rc == 0 || strcmp(reply, c->reply) != 0) {
				print_error("RCPT %s: got rc %d \"%s\", want \"%s\"\n",
					    esc(c->in, c->len), rc, reply, c->reply);
				fails++;
			}
		} else if (rc != 0) {
			print_error("RCPT %s: got \"%s\", want accepted\n", esc(c->in, c->len), reply);
			fails++;
		} else if (!streq0(r.addr, c->addr) || r.notify != c->notify
			   || !streq0(r.orcpt, c->orcpt)) {
			print_error("RCPT %s: got addr=%s notify=%d orcpt=%s, want %s %d %s\n",
				    esc(c->in, c->len), r.addr, r.notify,
				    r.orcpt ? r.orcpt : "(null)", c->addr, c->notify,
				    c->orcpt ? c->orcpt : "(null)");
			fails++;
		}
		smtp_rcpt_clear(&r);
	}
	assert_int_equal(fails, 0);
}

 /*
  * SMTPUTF8 (RFC 6531): MAIL with the listener offering it or not, RCPT
  * in a transaction that declared it or not.
  */
struct utf8_case {
	const char *in;
	size_t len;
	int utf8;			/* MAIL: offered; RCPT: declared */
	const char *reply;		/* NULL: accepted */
	const char *addr;
	int smtputf8;			/* MAIL: tx->smtputf8 wanted */
};

#define NEEDU8F	"553 5.6.7 Must declare SMTPUTF8 to send UTF-8 sender address"
#define OFFU8F	"553 5.6.7 UTF-8 sender address refused: SMTPUTF8 is not offered"
#define NEEDU8T	"553 5.6.7 Must declare SMTPUTF8 to send UTF-8 recipient address"
#define UNSU8	"555 5.5.4 Unsupported option: SMTPUTF8"
#define U8ADDR	"\xe7\x94\xa8\xe6\x88\xb7@\xe4\xbe\x8b\xe5\xad\x90.\xe6\xb5\x8b\xe8\xaf\x95"

static void test_mail_utf8(void **state)
{
	static const struct utf8_case cases[] = {
		{S("FROM:<a@b.c> SMTPUTF8"), 1, NULL, "a@b.c", 1},
		{S("FROM:<a@b.c> smtputf8"), 1, NULL, "a@b.c", 1},
		{S("FROM:<a@b.c>"), 1, NULL, "a@b.c", 0},
		{S("FROM:<> SMTPUTF8"), 1, NULL, "", 1},
		{S("FROM:<" U8ADDR "> SMTPUTF8"), 1, NULL, U8ADDR, 1},
		{S("FROM:<" U8ADDR "> BODY=8BITMIME SMTPUTF8 SIZE=10"), 1, NULL, U8ADDR, 1},
		{S("FROM:<" U8ADDR ">"), 1, NEEDU8F, NULL, 0},
		{S("FROM:<" U8ADDR ">"), 0, OFFU8F, NULL, 0},
		{S("FROM:<" U8ADDR "> SMTPUTF8"), 0, UNSU8, NULL, 0},
		{S("FROM:<a@b.c> SMTPUTF8"), 0, UNSU8, NULL, 0},
		{S("FROM:<a@b.c> SMTPUTF8=yes"), 1, "501 5.5.4 Bad SMTPUTF8 parameter syntax", NULL, 0},
		{S("FROM:<a@b.c> SMTPUTF8 SMTPUTF8"), 1, "501 5.5.4 Duplicate SMTPUTF8 parameter", NULL, 0},
		/* invalid UTF-8 is bad syntax, declared or not */
		{S("FROM:<\xc0\xbb@x> SMTPUTF8"), 1, BADFROM, NULL, 0},
		{S("FROM:<\xed\xa0\x80@x> SMTPUTF8"), 1, BADFROM, NULL, 0},
		{S("FROM:<\xc2\x85@x> SMTPUTF8"), 1, BADFROM, NULL, 0},
		{S("FROM:<a@x> SMTPUTF8 ENVID=\xc3\xa9"), 1, BADP, NULL, 0},
		{S("FROM:<\xc3\xa9@x> SMTPUTF8\r"), 1, BADP, NULL, 0},
	};
	size_t i, n = sizeof(cases) / sizeof(cases[0]);
	char reply[SMTP_REPLY_MAX];
	struct smtp_tx *tx;
	int fails = 0, rc;

	(void) state;
	for (i = 0; i < n; i++) {
		const struct utf8_case *c = cases + i;

		tx = smtp_tx_new();
		reply[0] = 0;
		rc = smtp_parse_mail(c->in, c->len, 1000, c->utf8, tx, reply);
		if (c->reply) {
			if (rc == 0 || strcmp(reply, c->reply) != 0) {
				print_error("MAIL %s (offered %d): got rc %d \"%s\", want \"%s\"\n",
					    esc(c->in, c->len), c->utf8, rc, reply, c->reply);
				fails++;
			}
		} else if (rc != 0) {
			print_error("MAIL %s (offered %d): got \"%s\", want accepted\n",
				    esc(c->in, c->len), c->utf8, reply);
			fails++;
		} else if (!streq0(tx->from, c->addr) || tx->smtputf8 != c->smtputf8) {
			print_error("MAIL %s: got from=%s smtputf8=%d, want %s %d\n",
				    esc(c->in, c->len), esc(tx->from, strlen(tx->from)),
				    tx->smtputf8, esc(c->addr, strlen(c->addr)), c->smtputf8);
			fails++;
		}
		smtp_tx_free(tx);
	}
	assert_int_equal(fails, 0);
}

static void test_rcpt_utf8(void **state)
{
	static const struct utf8_case cases[] = {
		{S("TO:<" U8ADDR ">"), 1, NULL, U8ADDR, 0},
		{S("TO:<a@" "\xe4\xbe\x8b\xe5\xad\x90.\xe6\xb5\x8b\xe8\xaf\x95" ">"), 1, NULL,
		 "a@\xe4\xbe\x8b\xe5\xad\x90.\xe6\xb5\x8b\xe8\xaf\x95", 0},
		{S("TO:<a@b.c>"), 1, NULL, "a@b.c", 0},
		{S("TO:<a@b.c>"), 0, NULL, "a@b.c", 0},
		{S("TO:<" U8ADDR ">"), 0, NEEDU8T, NULL, 0},
		{S("TO:<\xc3\xa9@x> NOTIFY=NEVER"), 0, NEEDU8T, NULL, 0},
		{S("TO:<" U8ADDR "> SMTPUTF8"), 1, "555 5.5.4 Unsupported option: SMTPUTF8", NULL, 0},
		{S("TO:<\xc0\xbb@x>"), 1, BADTO, NULL, 0},
		{S("TO:<\xf4\x90\x80\x80@x>"), 1, BADTO, NULL, 0},
		{S("TO:<\xc2\x9b@x>"), 1, BADTO, NULL, 0},
		{S("TO:<a@b\xe7\x94>"), 1, BADTO, NULL, 0},
	};
	size_t i, n = sizeof(cases) / sizeof(cases[0]);
	char reply[SMTP_REPLY_MAX];
	struct smtp_rcpt r;
	int fails = 0, rc;

	(void) state;
	for (i = 0; i < n; i++) {
		const struct utf8_case *c = cases + i;

		memset(&r, 0, sizeof(r));
		reply[0] = 0;
		rc = smtp_parse_rcpt(c->in, c->len, c->utf8, &r, reply);
		if (c->reply) {
			if (rc == 0 || strcmp(reply, c->reply) != 0) {
				print_error("RCPT %s (declared %d): got rc %d \"%s\", want \"%s\"\n",
					    esc(c->in, c->len), c->utf8, rc, reply, c->reply);
				fails++;
			}
		} else if (rc != 0 || !streq0(r.addr, c->addr)) {
			print_error("RCPT %s (declared %d): got rc %d \"%s\" addr %s, want %s\n",
				    esc(c->in, c->len), c->utf8, rc, reply, esc(r.addr, r.addr ? strlen(r.addr) : 0),
				    esc(c->addr, strlen(c->addr)));
			fails++;
		}
		smtp_rcpt_clear(&r);
	}
	assert_int_equal(fails, 0);
}

 /*
  * xtext, read strictly (what a client sends) and leniently (what
  * delivery reads back from the store; smtp.h says why they differ).
  */
#define STRICT	SMTP_XTEXT_STRICT
#define LENIENT	SMTP_XTEXT_LENIENT

struct xtext_case {
	enum smtp_xtext how;
	const char *in;
	size_t len;
	int ok;
	const char *want;
	size_t want_len;
};

static void test_xtext(void **state)
{
	static const struct xtext_case cases[] = {
		{STRICT, S("abc"), 1, S("abc")},
		{STRICT, S(""), 1, S("")},
		{STRICT, S("a+2Bb"), 1, S("a+b")},
		{STRICT, S("+3D"), 1, S("=")},
		{STRICT, S("+41+42"), 1, S("AB")},
		{STRICT, S("a+20b+7E"), 1, S("a b~")},	/* decodes to printable */
		{STRICT, S("+00"), 0, S("")},
		{STRICT, S("a+0Db"), 0, S("")},
		{STRICT, S("+1F"), 0, S("")},
		{STRICT, S("+7F"), 0, S("")},
		{STRICT, S("+FF"), 0, S("")},
		{STRICT, S("+C3+A9"), 0, S("")},	/* UTF-8 encoded: neither */
		{STRICT, S("a;b~!"), 1, S("a;b~!")},	/* 33-126 but "+" and "=" */
		{STRICT, S("a+"), 0, S("")},		/* truncated */
		{STRICT, S("a+2"), 0, S("")},
		{STRICT, S("+2b"), 0, S("")},		/* lower-case hex */
		{STRICT, S("+2B+3d"), 0, S("")},
		{STRICT, S("+G0"), 0, S("")},		/* not hex */
		{STRICT, S("+ 2B"), 0, S("")},
		{STRICT, S("+-1"), 0, S("")},
		{STRICT, S("a=b"), 0, S("")},
		{STRICT, S("a b"), 0, S("")},		/* outside 33-126 */
		{STRICT, S("a\x7f"), 0, S("")},
		{STRICT, S("a\x1f"), 0, S("")},
		{STRICT, S("\xc3\xa9"), 0, S("")},	/* UTF-8: xtext is ASCII */
		{STRICT, S("a\0b"), 0, S("")},
		{STRICT, S("+2\0"), 0, S("")},
		{LENIENT, S("a+2Bb@c"), 1, S("a+b@c")},
		{LENIENT, S("plain"), 1, S("plain")},
		{LENIENT, S(""), 1, S("")},
		{LENIENT, S("+3D+2b"), 1, S("=+")},	/* lower-case hex taken */
		{LENIENT, S("+2b+2B"), 1, S("++")},
		{LENIENT, S("+00"), 1, S("\0")},
		{LENIENT, S("bad+Z1"), 1, S("bad+Z1")},	/* not hex: kept */
		{LENIENT, S("+G0+41"), 1, S("+G0A")},
		{LENIENT, S("end+4"), 1, S("end+4")},	/* truncated: kept */
		{LENIENT, S("end+"), 1, S("end+")},
		{LENIENT, S("++41"), 1, S("+A")},
		{LENIENT, S("a=b c"), 1, S("a=b c")},	/* outside xtext: kept */
		{LENIENT, S("\xc3\xa9+40x"), 1, S("\xc3\xa9@x")},
		{LENIENT, S("a\x01\x7f"), 1, S("a\x01\x7f")},
	};
	size_t i, n = sizeof(cases) / sizeof(cases[0]);
	struct buf out = BUF_INIT;
	int fails = 0, rc;

	(void) state;
	for (i = 0; i < n; i++) {
		const struct xtext_case *c = cases + i;
		const char *how = c->how == STRICT ? "strict" : "lenient";

		buf_reset(&out);
		rc = smtp_xtext_decode(&out, c->in, c->len, c->how);
		if ((rc == 0) != c->ok) {
			print_error("xtext %s %s: got rc %d, want %s\n", how, esc(c->in, c->len), rc,
				    c->ok ? "ok" : "error");
			fails++;
		} else if (c->ok && (out.len != c->want_len
				     || memcmp(out.data ? out.data : "", c->want, c->want_len) != 0)) {
			print_error("xtext %s %s: got \"%s\", want \"%s\"\n", how,
				    esc(c->in, c->len), esc(out.data, out.len),
				    esc(c->want, c->want_len));
			fails++;
		}
	}
	buf_free(&out);
	assert_int_equal(fails, 0);
}

 /*
  * The ORCPT split, strict for RCPT and lenient for delivery.
  */
struct orcpt_case {
	enum smtp_xtext how;
	const char *in;
	size_t len;
	int ok;
	const char *want_type;
	const char *want_addr;
};

static void test_orcpt_split(void **state)
{
	static const struct orcpt_case cases[] = {
		{STRICT, S("rfc822;a+2Bb@c"), 1, "rfc822", "a+b@c"},
		{STRICT, S("rfc822;a;b"), 1, "rfc822", "a;b"},	/* the first ";" splits */
		{STRICT, S("x-a+b;c"), 1, "x-a+b", "c"},	/* the type is atext */
		{STRICT, S("rfc822;a+20b"), 1, "rfc822", "a b"},
		{STRICT, S("rfc822;"), 0, NULL, NULL},	/* no address */
		{STRICT, S(";a@b"), 0, NULL, NULL},	/* no type */
		{STRICT, S("rfc822"), 0, NULL, NULL},
		{STRICT, S(""), 0, NULL, NULL},
		{STRICT, S("rf(c;a@b"), 0, NULL, NULL},	/* not atext */
		{STRICT, S("rfc822;a+2b"), 0, NULL, NULL},
		{STRICT, S("rfc822;a+4"), 0, NULL, NULL},
		{STRICT, S("rfc822;a=b"), 0, NULL, NULL},
		{STRICT, S("rfc822;a+00b"), 0, NULL, NULL},	/* not printable */
		{STRICT, S("utf-8;\xc3\xa9@x"), 0, NULL, NULL},
		{LENIENT, S("rfc822;a+2Bb@c"), 1, "rfc822", "a+b@c"},
		{LENIENT, S("rfc822;a+2bb+4"), 1, "rfc822", "a+b+4"},
		{LENIENT, S("rf(c;a@b"), 1, "rf(c", "a@b"},
		{LENIENT, S("rfc822;"), 1, "rfc822", ""},
		{LENIENT, S("utf-8;\xc3\xa9@x"), 1, "utf-8", "\xc3\xa9@x"},
		{LENIENT, S("rfc822"), 0, NULL, NULL},
		{LENIENT, S(";a@b"), 0, NULL, NULL},
		{LENIENT, S(""), 0, NULL, NULL},
	};
	size_t i, n = sizeof(cases) / sizeof(cases[0]);
	char *type, *addr;
	int fails = 0, rc;

	(void) state;
	for (i = 0; i < n; i++) {
		const struct orcpt_case *c = cases + i;
		const char *how = c->how == STRICT ? "strict" : "lenient";

		type = addr = NULL;
		rc = smtp_orcpt_split(c->in, c->len, c->how, &type, &addr);
		if ((rc == 0) != c->ok || (rc < 0 && (type || addr))) {
			print_error("orcpt %s %s: got rc %d, want %s\n", how, esc(c->in, c->len), rc,
				    c->ok ? "ok" : "error, nothing set");
			fails++;
		} else if (c->ok && (!streq0(type, c->want_type) || !streq0(addr, c->want_addr))) {
			print_error("orcpt %s %s: got \"%s\" \"%s\", want \"%s\" \"%s\"\n", how,
				    esc(c->in, c->len), type, esc(addr, strlen(addr)), c->want_type,
				    c->want_addr);
			fails++;
		}
		free(type);
		free(addr);
	}
	assert_int_equal(fails, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_path),
		cmocka_unit_test(test_path_limits),
		cmocka_unit_test(test_mail),
		cmocka_unit_test(test_rcpt),
		cmocka_unit_test(test_mail_utf8),
		cmocka_unit_test(test_rcpt_utf8),
		cmocka_unit_test(test_xtext),
		cmocka_unit_test(test_orcpt_split),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
