/*
 * fuzz_session - a whole SMTP session fed to the protocol engine.
 *
 * The first byte picks how the input is cut into feeds (whole, byte by
 * byte, or in chunks of a few bytes), so chunk boundaries are fuzzed too;
 * its higher bits pick the listener: STARTTLS required, AUTH required,
 * implicit TLS, no SMTPUTF8, long lines and NULs refused (STARTTLS and
 * AUTH are offered on all). TLS comes up as
 * soon as a STARTTLS is pending, as after a handshake.
 * The message hook answers after the feed, alternating 250 and 554, the
 * auth hook alike with success and failure; every third answer is given
 * inside the hook instead (the engine goes on with the next command; an
 * auth verdict there is sometimes "not now", 454), and before every
 * eighth answer given after the feed the session is closed
 * (SMTP_CLOSE_SHUTDOWN) while the hook holds it. The
 * output buffer is drained after each feed as the server does. Checks:
 * no crash, no sanitizer report, bounded memory, the engine never
 * consumes more than it was given, a UTF-8 address reaches the
 * hooks only in a transaction that declared SMTPUTF8, a message's count
 * of lines over 998 octets and its NUL flag are what it holds (none of
 * either where they are refused), folding it leaves no line over
 * 998 octets and nothing but CRLF SPACE added, and a close while a hook
 * holds the session comes after the hook's answer: one 421, last.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../smtp/smtp.h"
#include "../../smtp/smtp_data.h"
#include "../../util/log.h"

struct fuzz_ctx {
	int refuse_lines;		/* long_lines_reject and nul_reject */
	int waiting;
	int auth_waiting;
	unsigned n;			/* answers given */
};

#define AT_ONCE(n)	((n) % 3 == 2)	/* the nth answer is given inside the hook */
#define CLOSE_FIRST(n)	((n) % 8 == 6)	/* ... closed while waiting for it */
#define MSG_REPLY(n)	((n) & 1 ? "554 5.7.0 no" : "250 2.0.0 Ok: queued as X")

/* ascii - no octet above 127 */
static int ascii(const char *p)
{
	for (; *p; p++)
		if ((unsigned char) *p >= 0x80)
			return 0;
	return 1;
}

static const char *fuzz_rcpt(void *ctx, const struct smtp_tx *tx, const char *addr)
{
	(void) ctx;
	if (!tx->smtputf8 && (!ascii(addr) || !ascii(tx->from)))
		abort();		/* RFC 6531: UTF-8 only once declared */
	return strchr(addr, '!') ? "554 5.7.1 Relay access denied" : NULL;
}

/* long_lines - lines of a stored message over SMTP_TEXT_LINE_MAX octets */
static size_t long_lines(const char *p, size_t len)
{
	const char *end, *lf;
	size_t n = 0;

	if (len == 0)
		return 0;		/* p may be NULL */
	for (end = p + len; p < end; p = lf + 1) {
		if ((lf = memchr(p, '\n', (size_t) (end - p))) == NULL)
			abort();	/* stored lines all end in CRLF */
		n += (size_t) (lf - p) - 1 > SMTP_TEXT_LINE_MAX;
	}
	return n;
}

/* unfolded - the message with every CRLF SPACE taken out */
static void unfolded(struct buf *out, const char *p, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++) {
		if (i + 2 < len && p[i] == '\r' && p[i + 1] == '\n' && p[i + 2] == ' ')
			i += 2;
		else
			buf_append(out, p + i, 1);
	}
}

/* check_fold - folded, no line is long, and only CRLF SPACE was added */
static void check_fold(const struct smtp_tx *tx)
{
	struct buf folded = BUF_INIT, a = BUF_INIT, b = BUF_INIT;

	if (smtp_data_fold(&folded, tx->data.data, tx->data.len, SMTP_TEXT_LINE_MAX)
	    != tx->long_lines || long_lines(folded.data, folded.len) != 0)
		abort();
	unfolded(&a, tx->data.data, tx->data.len);
	unfolded(&b, folded.data, folded.len);
	if (a.len != b.len || (a.len && memcmp(a.data, b.data, a.len) != 0))
		abort();
	buf_free(&folded);
	buf_free(&a);
	buf_free(&b);
}

static void fuzz_message(void *ctx, struct smtp_session *s, struct smtp_tx *tx)
{
	struct fuzz_ctx *f = ctx;

	(void) s;
	if (tx->data.len && tx->data.data[tx->data.len - 1] != '\n')
		abort();		/* stored content always ends in CRLF */
	if (long_lines(tx->data.data, tx->data.len) != tx->long_lines
	    || (memchr(tx->data.data ? tx->data.data : "", 0, tx->data.len) != NULL) != tx->nul)
		abort();		/* the reader's counts are the message's */
	if (f->refuse_lines && (tx->long_lines || tx->nul))
		abort();		/* refused at the end of data, never handed over */
	check_fold(tx);
	if (AT_ONCE(f->n)) {
		smtp_session_reply(s, MSG_REPLY(f->n));	/* tx goes with it */
		f->n++;
	} else {
		f->waiting = 1;
	}
}

static void fuzz_auth(void *ctx, struct smtp_session *s, const char *mech,
		      const char *user, const char *pass)
{
	struct fuzz_ctx *f = ctx;

	if (strlen(mech) != 5 || *user == 0 || strlen(user) > 255 || pass == NULL)
		abort();		/* the engine promised a name and a password */
	if (AT_ONCE(f->n)) {
		smtp_session_auth_reply(s, f->n % 9 == 8 ? -1 : (int) (f->n & 1));
		f->n++;
	} else {
		f->auth_waiting = 1;
	}
}

/*
 * closed_after - the session was closed while a hook held it: what its
 * answer added to out (from mark) ends with one 421, and nothing follows
 */
static void closed_after(struct smtp_session *s, size_t mark)
{
	const struct buf *out = smtp_session_out(s);
	const char *p = out->data + mark, *end = out->data + out->len, *lf, *last = NULL;
	int n421 = 0;

	if (!smtp_session_closing(s) || out->len <= mark)
		abort();
	for (; p < end; p = lf + 1) {
		if ((lf = memchr(p, '\n', (size_t) (end - p))) == NULL)
			abort();
		n421 += strncmp(p, "421 ", 4) == 0;
		last = p;
	}
	if (n421 != 1 || strncmp(last, "421 ", 4) != 0 || last == out->data + mark)
		abort();		/* the hook's answer first, then one 421 */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct smtp_config cfg = {
		.hostname = "fuzz.example", .message_size = 4096, .max_rcpts = 5,
		.starttls = 1, .auth = 1, .hard_errors = 20, .junk_commands = 100,
	};
	static const struct smtp_hooks hooks = {
		.rcpt = fuzz_rcpt, .message = fuzz_message, .auth = fuzz_auth,
	};
	struct fuzz_ctx f = { 0, 0, 0, 0 };
	struct smtp_session *s;
	size_t off = 0, step, n, chunk, mark;
	int stalls = 0, closing;
	uint8_t mode;

	if (size < 1)
		return 0;
	log_setup("fuzz_session", 0, LOG_LEVEL_ERROR);	/* info lines would drown the fuzzer */
	mode = data[0];
	step = mode % 8;		/* 0: whole input at once */
	cfg.starttls_required = (mode & 0x08) != 0;
	cfg.auth_required = (mode & 0x10) != 0;
	cfg.smtputf8 = (mode & 0x40) == 0;
	cfg.long_lines_reject = cfg.nul_reject = f.refuse_lines = (mode & 0x80) != 0;
	data++;
	size--;
	s = smtp_session_new(&cfg, &hooks, &f);
	if (mode & 0x20)
		smtp_session_set_tls(s);	/* implicit TLS */
	smtp_session_greet(s);
	while (off < size && !smtp_session_closing(s)) {
		chunk = step ? step : size - off;
		if (chunk > size - off)
			chunk = size - off;
		n = smtp_session_feed(s, (const char *) data + off, chunk);
		if (n > chunk)
			abort();
		off += n;
		if (smtp_session_starttls(s))
			smtp_session_set_tls(s);	/* the handshake went well */
		mark = smtp_session_out(s)->len;
		if ((closing = (f.waiting || f.auth_waiting) && CLOSE_FIRST(f.n)))
			smtp_session_close(s, SMTP_CLOSE_SHUTDOWN);	/* waits for the answer */
		if (f.waiting) {
			f.waiting = 0;
			smtp_session_reply(s, MSG_REPLY(f.n));
			f.n++;
			stalls = 0;
		} else if (f.auth_waiting) {
			f.auth_waiting = 0;
			smtp_session_auth_reply(s, (int) (f.n++ & 1));
			stalls = 0;
		} else if (n < chunk && !smtp_session_closing(s) && ++stalls > 2) {
			abort();	/* consumed nothing while neither waiting nor closing */
		}
		if (closing)
			closed_after(s, mark);
		buf_reset(smtp_session_out(s));
	}
	smtp_session_close(s, SMTP_CLOSE_TIMEOUT);
	smtp_session_free(s);
	return 0;
}
