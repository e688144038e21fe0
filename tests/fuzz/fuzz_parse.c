/*
 * fuzz_parse - the MAIL/RCPT argument parsers (paths, ESMTP parameters,
 * xtext) on arbitrary bytes. A successful parse must yield an address
 * free of CR, LF and NUL, the property the rest of the relay relies on;
 * more: an address holds printable US-ASCII (a blank, inside quotes)
 * and valid UTF-8 characters only (smtp_utf8_len()), never another
 * control or a stray 8-bit octet, and a kept ENVID (decoded) and ORCPT
 * (as given) printable US-ASCII only.
 *
 * The same bytes (up to a NUL) also go through util/json.c, which reads
 * and writes UTF-8 with OpenSSL as smtp_utf8_len() does: read as a
 * control reply ({"a": and the bytes, and the bytes alone; for the member
 * "a" and for "b", which the walk looks for past every member), and
 * written as a string member
 * (json_str), which must read back (json_get_str) as the bytes
 * themselves where they are all ASCII (an invalid octet is written as
 * its Latin-1 \u00XX by design, and valid UTF-8 as it is).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../smtp/smtp_parse.h"
#include "../../smtp/smtp_tx.h"
#include "../../util/buf.h"
#include "../../util/json.h"

#define JSON_IN_MAX	4096

static void check_clean(const char *s)
{
	if (s && strpbrk(s, "\r\n"))
		abort();
}

/* check_text - s (NULL: none) is printable US-ASCII, and UTF-8 characters where utf8 */
static void check_text(const char *s, int utf8)
{
	size_t n;

	for (; s && *s; s++) {
		if ((unsigned char) *s >= 0x80 && utf8 && (n = smtp_utf8_len(s, strlen(s))) > 0)
			s += n - 1;
		else if ((unsigned char) *s < 0x20 || (unsigned char) *s >= 0x7f)
			abort();
	}
}

/* check_json - the bytes as a control reply's text, and as a string written and read back */
static void check_json(const uint8_t *data, size_t size)
{
	static char in[JSON_IN_MAX + 8], out[6 * JSON_IN_MAX + 1];
	struct buf b = BUF_INIT;
	size_t len = strnlen((const char *) data, size < JSON_IN_MAX ? size : JSON_IN_MAX), i;
	int ascii = 1;

	memcpy(in, "{\"a\":", 5);
	memcpy(in + 5, data, len);
	in[5 + len] = 0;
	(void) json_get_str(in, "a", out, 16);	/* short: truncated to fit */
	(void) json_get_str(in, "b", out, 16);	/* past every member */
	memcpy(in, data, len);
	in[len] = 0;
	(void) json_get_str(in, "b", out, 16);	/* the bytes alone as a reply */
	for (i = 0; i < len; i++)
		ascii &= data[i] < 0x80;
	json_str(&b, "{\"a\":", in);
	buf_putc(&b, '}');
	if (json_get_str(b.data, "a", out, sizeof(out)) != 0
	    || (ascii && strcmp(out, in) != 0))
		abort();		/* what it writes always reads back */
	buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char reply[SMTP_REPLY_MAX];
	struct smtp_tx *tx;
	struct smtp_rcpt r;
	char *addr = NULL;
	size_t used;

	if (smtp_parse_path((const char *) data, size, 1, &addr, &used) == 0) {
		if (used > size)
			abort();
		check_clean(addr);
		check_text(addr, 1);
		free(addr);
	}
	tx = smtp_tx_new();
	if (smtp_parse_mail((const char *) data, size, 1000, 1, tx, reply) == 0) {
		check_clean(tx->from);
		check_clean(tx->envid);
		check_text(tx->from, 1);
		check_text(tx->envid, 0);
	} else if (strncmp(reply, "5", 1) != 0 && strncmp(reply, "4", 1) != 0) {
		abort();
	}
	smtp_tx_free(tx);
	memset(&r, 0, sizeof(r));
	if (smtp_parse_rcpt((const char *) data, size, 1, &r, reply) == 0) {
		check_clean(r.addr);
		check_clean(r.orcpt);
		check_text(r.addr, 1);
		check_text(r.orcpt, 0);
	}
	free(r.addr);
	free(r.orcpt);
	check_json(data, size);
	return 0;
}
