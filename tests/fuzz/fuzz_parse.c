/*
 * fuzz_parse - the MAIL/RCPT argument parsers (paths, ESMTP parameters,
 * xtext) on arbitrary bytes. A successful parse must yield an address
 * free of CR, LF and NUL, the property the rest of the relay relies on.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../smtp/smtp_parse.h"
#include "../../smtp/smtp_tx.h"

static void check_clean(const char *s)
{
	if (s && strpbrk(s, "\r\n"))
		abort();
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
		free(addr);
	}
	tx = smtp_tx_new();
	if (smtp_parse_mail((const char *) data, size, 1000, 1, tx, reply) == 0) {
		check_clean(tx->from);
		check_clean(tx->envid);
	} else if (strncmp(reply, "5", 1) != 0 && strncmp(reply, "4", 1) != 0) {
		abort();
	}
	smtp_tx_free(tx);
	memset(&r, 0, sizeof(r));
	if (smtp_parse_rcpt((const char *) data, size, 1, &r, reply) == 0) {
		check_clean(r.addr);
		check_clean(r.orcpt);
	}
	free(r.addr);
	free(r.orcpt);
	return 0;
}
