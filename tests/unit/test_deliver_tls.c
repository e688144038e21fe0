/*
 * test_deliver_tls - the client TLS context of deliver/esmtp/deliver_tls.c. (The
 * handshake through the bridge in test_deliver_bridge.c; STARTTLS, AUTH
 * and the rest end to end, in tests/e2e/cases_upstream_tls.py.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../../deliver/esmtp/deliver_tls.h"

static void test_ctx_host(void **state)
{
	char err[256], longname[300];
	SSL_CTX *ctx;

	(void) state;
	ctx = deliver_tls_ctx_new(1, err, sizeof(err));
	if (ctx == NULL)
		fail_msg("deliver_tls_ctx_new: %s", err);
	assert_int_equal(SSL_CTX_get_min_proto_version(ctx), TLS1_2_VERSION);
	assert_int_equal(SSL_CTX_get_verify_mode(ctx), SSL_VERIFY_PEER);
	assert_int_equal(deliver_tls_ctx_host(ctx, "smtp.example.com"), 0);
	assert_int_equal(deliver_tls_ctx_host(ctx, "192.0.2.1"), 0);
	assert_int_equal(deliver_tls_ctx_host(ctx, "2001:db8::1"), 0);
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = 0;
	assert_int_equal(deliver_tls_ctx_host(ctx, longname), -1);
	SSL_CTX_free(ctx);

	ctx = deliver_tls_ctx_new(0, err, sizeof(err));
	assert_non_null(ctx);
	assert_int_equal(SSL_CTX_get_verify_mode(ctx), SSL_VERIFY_NONE);
	assert_int_equal(deliver_tls_ctx_host(ctx, "smtp.example.com"), 0);
	SSL_CTX_free(ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ctx_host),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
