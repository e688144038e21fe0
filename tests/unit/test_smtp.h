/*
 * test_smtp - what the SMTP session tests (test_smtp_session,
 * test_smtp_bdat, test_smtp_events, test_smtp_limits, test_smtp_auth)
 * share: the replies they expect, the ways a scripted row is fed, and
 * feeding and checking a session.
 */
#ifndef TESTS_UNIT_TEST_SMTP_H
#define TESTS_UNIT_TEST_SMTP_H

#include "../../smtp/smtp.h"
#include "test_util.h"

#define GREET	"220 mx.test ESMTP idemrelay\r\n"
#define EHLO_HEAD "250-mx.test\r\n250-PIPELINING\r\n250-SIZE 1000\r\n"
#define EHLO_TAIL "250-8BITMIME\r\n250-ENHANCEDSTATUSCODES\r\n250-DSN\r\n250 CHUNKING\r\n"
#define EHLO_R	EHLO_HEAD EHLO_TAIL
#define OK	"250 2.0.0 Ok\r\n"
#define OK_MAIL	"250 2.1.0 Ok\r\n"
#define OK_RCPT	"250 2.1.5 Ok\r\n"
#define GO	"354 End data with <CR><LF>.<CR><LF>\r\n"
#define QUEUED	"250 2.0.0 Ok: queued as TESTQID\r\n"
#define BYE	"221 2.0.0 Bye\r\n"
#define NEED_MAIL "503 5.5.1 Error: need MAIL command\r\n"
#define TIMEOUT	"421 4.4.2 mx.test Error: timeout exceeded\r\n"
#define SHUTDOWN "421 4.3.2 mx.test Service shutting down\r\n"

/* every scripted row is fed whole, byte by byte and in chunks of 7 */
static const struct feed_mode {
	size_t  step;			/* octets per call, 0: all */
	const char *how;		/* for got/want messages */
} feed_modes[] = {
	{0, "one feed"},
	{1, "byte by byte"},
	{7, "chunks of 7"},
};

/*
 * run_rows - run(row, step, how) for each of the n rows (row_size octets
 * each) in every feed mode; returns the number of failed runs
 */
static inline int run_rows(const void *rows, size_t row_size, size_t n,
			   int (*run)(const void *row, size_t step, const char *how))
{
	size_t i, m;
	int fails = 0;

	for (i = 0; i < n; i++)
		for (m = 0; m < sizeof(feed_modes) / sizeof(feed_modes[0]); m++)
			fails += run((const char *) rows + i * row_size, feed_modes[m].step,
				     feed_modes[m].how);
	return fails;
}

/*
 * feed_chunks - feed in[0..len) to s, first octets in the first call,
 * then step octets a call (0: all that is left). Stops at a short feed;
 * returns the octets consumed.
 */
static inline size_t feed_chunks(struct smtp_session *s, const char *in, size_t len,
				 size_t first, size_t step)
{
	size_t i = 0, n, got;

	while (i < len) {
		n = i == 0 && first ? first : step;
		if (n == 0 || n > len - i)
			n = len - i;
		got = smtp_session_feed(s, in + i, n);
		i += got;
		if (got < n)
			break;
	}
	return i;
}

/* check_output - the session's whole output is want; 1 (and why) if not */
static inline int check_output(struct smtp_session *s, const char *name, const char *how,
			       const char *want)
{
	struct buf *out = smtp_session_out(s);

	return check_bytes(name, how, "output", out->data, out->len, want, strlen(want));
}

/*
 * feed_random - feed in to s in chunks of 1 to max octets, dropping the
 * output; after each chunk peer (if any) plays the other side: TLS, the
 * hooks. Ends when the session closes; with no peer, only closing may
 * cut a feed short.
 */
static inline void feed_random(struct smtp_session *s, const struct buf *in, size_t max,
			       uint64_t *seed, void (*peer)(struct smtp_session *, uint64_t *))
{
	size_t i, n, got;

	for (i = 0; i < in->len; i += got) {
		n = 1 + test_rand(seed) % max;
		if (n > in->len - i)
			n = in->len - i;
		got = smtp_session_feed(s, in->data + i, n);
		buf_consume(smtp_session_out(s), smtp_session_out(s)->len);
		if (peer)
			peer(s, seed);
		if (got < n && (peer == NULL || smtp_session_closing(s))) {
			assert_true(smtp_session_closing(s));
			break;
		}
	}
}

#endif
