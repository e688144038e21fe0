/*
 * test_smtp_script - what the session tests of the command, DATA and
 * BDAT phases share (test_smtp_session, test_smtp_bdat, test_smtp_events,
 * test_smtp_limits): a fake message hook, the one way a session is made,
 * and two kinds of table row with their runners.
 *
 * A script is a client's input and the exact output wanted (greeting
 * included), with the state the session and the hook are left in. An
 * event row is a list of events (input fed, the hook's late answer, a
 * timeout, a shutdown, output written) each followed by the state wanted
 * after it. Both are run in every feed mode of test_smtp.h.
 */
#ifndef TESTS_UNIT_TEST_SMTP_SCRIPT_H
#define TESTS_UNIT_TEST_SMTP_SCRIPT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../smtp/smtp.h"
#include "../../smtp/smtp_session.h"	/* for the bounded-memory checks */
#include "test_smtp.h"

#define IN(x)	.in = x, .len = sizeof(x) - 1
#define MSG(x)	.data = x, .data_len = sizeof(x) - 1

/* replies and inputs more than one file's rows use */
#define NEED_RCPT "503 5.5.1 Error: need RCPT command\r\n"
#define UNKNOWN	"500 5.5.2 Error: command not recognized\r\n"
#define TOOLONG	"500 5.5.2 Line too long\r\n"
#define TOOBIG	"552 5.3.4 Message size exceeds fixed limit\r\n"
#define BARE	"550 5.5.2 Message contains bare CR or LF\r\n"
#define GOT(n)	"250 2.0.0 Ok: " #n " octets received\r\n"
#define LATER	"250 2.0.0 Ok: queued as LATER\r\n"
#define ENVELOPE "EHLO c\r\nMAIL FROM:<a@b.c>\r\nRCPT TO:<x@y.z>\r\nDATA\r\n"
#define ENVELOPE_R GREET EHLO_R OK_MAIL OK_RCPT GO
#define ENV_B	"EHLO c\r\nMAIL FROM:<a@b.c>\r\nRCPT TO:<x@y.z>\r\n"
#define ENV_B_R	GREET EHLO_R OK_MAIL OK_RCPT
#define X64	"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
#define K1024	X64 X64 X64 X64 X64 X64 X64 X64 X64 X64 X64 X64 X64 X64 X64 X64	/* > message_size */


 /*
  * The fake world behind the hooks.
  */
struct fake {
	int     async;			/* message hook does not reply itself */
	const char *reply;		/* message hook's answer */
	int     calls;			/* message hook calls */
	struct buf data;		/* last message, stolen from the tx */
	struct buf from;		/* last sender */
	struct buf rcpts;		/* last recipients, "a,b," */
	int     bare_eol;
	int     smtputf8;		/* the last tx declared SMTPUTF8 */
	char    deny[300];		/* rcpt hook's last refusal */
};

/* fake_rcpt - refuse recipients whose local-part starts with "deny" */
static inline const char *fake_rcpt(void *ctx, const struct smtp_tx *tx, const char *addr)
{
	struct fake *f = ctx;

	(void) tx;
	if (strncmp(addr, "deny", 4) != 0)
		return NULL;
	snprintf(f->deny, sizeof(f->deny), "554 5.7.1 <%s>: Relay access denied", addr);
	return f->deny;
}

/* fake_message - record the message, steal its data, maybe reply */
static inline void fake_message(void *ctx, struct smtp_session *s, struct smtp_tx *tx)
{
	struct fake *f = ctx;
	size_t i;

	f->calls++;
	buf_free(&f->data);
	f->data = tx->data;
	tx->data = (struct buf) BUF_INIT;
	buf_reset(&f->from);
	buf_printf(&f->from, "%s", tx->from);
	buf_reset(&f->rcpts);
	for (i = 0; i < tx->n_rcpts; i++)
		buf_printf(&f->rcpts, "%s,", tx->rcpts[i].addr);
	f->bare_eol = tx->bare_eol;
	f->smtputf8 = tx->smtputf8;
	if (!f->async)
		smtp_session_reply(s, f->reply ? f->reply : "250 2.0.0 Ok: queued as TESTQID");
}

static const struct smtp_hooks fake_hooks = {.rcpt = fake_rcpt, .message = fake_message};

/* fake_free - release what the fake recorded */
static inline void fake_free(struct fake *f)
{
	buf_free(&f->data);
	buf_free(&f->from);
	buf_free(&f->rcpts);
}

/*
 * new_session - a greeted session of the usual test listener (mx.test,
 * messages of 1000 octets, 3 recipients), its hooks the fake's; limits:
 * hard_errors 3 and junk_commands 2, else no error limit
 */
static inline struct smtp_session *new_session(struct fake *f, int bare_lf_reject,
					       int smtputf8, int limits)
{
	struct smtp_config cfg = {.hostname = "mx.test", .message_size = 1000, .max_rcpts = 3};
	struct smtp_session *s;

	cfg.bare_lf_reject = bare_lf_reject;
	cfg.smtputf8 = smtputf8;
	if (limits) {
		cfg.hard_errors = 3;
		cfg.junk_commands = 2;
	}
	s = smtp_session_new(&cfg, &fake_hooks, f);
	smtp_session_greet(s);
	return s;
}

/* repeat - head, n copies of c and tail, as a malloc'ed string */
static inline char *repeat(const char *head, char c, size_t n, const char *tail)
{
	size_t h = strlen(head), t = strlen(tail);
	char *p = malloc(h + n + t + 1);

	memcpy(p, head, h);
	memset(p + h, c, n);
	memcpy(p + h + n, tail, t + 1);
	return p;
}


 /*
  * Scripts: one input, the whole output, the state at the end.
  */
struct script {
	const char *name;
	const char *in;
	size_t len;			/* 0: strlen(in) */
	const char *want;		/* whole output, greeting included */
	int bare_lf_reject;
	int smtputf8;			/* the listener offers SMTPUTF8 */
	int limits;			/* hard_errors 3, junk_commands 2 */
	const char *hook_reply;		/* NULL: "250 2.0.0 Ok: queued as TESTQID" */
	size_t rest;			/* octets left unconsumed (after closing) */
	enum smtp_close closed;		/* why the session closed, NONE: open */
	int calls;			/* message hook calls */
	int bare_eol;			/* tx->bare_eol at the last hook call */
	int tx_utf8;			/* tx->smtputf8 at the last hook call */
	const char *data;		/* last message stored, NULL: unchecked */
	size_t data_len;
	const char *rcpts;		/* last recipients, NULL: unchecked */
	const char *stats;		/* the disconnect line's counts, NULL: unchecked */
};

/* run_script - feed first octets, then chunks of step (0: all); check */
static inline int run_script(const struct script *c, size_t first, size_t step, const char *how)
{
	struct fake f;
	struct smtp_session *s;
	size_t len = c->len ? c->len : strlen(c->in), i;
	int bad = 0;

	memset(&f, 0, sizeof(f));
	f.reply = c->hook_reply;
	s = new_session(&f, c->bare_lf_reject, c->smtputf8, c->limits);
	i = feed_chunks(s, c->in, len, first, step);
	if (smtp_session_closing(s) && smtp_session_feed(s, "NOOP\r\n", 6) != 0) {
		print_error("%s (%s): feed consumed input after closing\n", c->name, how);
		bad = 1;
	}
	bad |= check_output(s, c->name, how, c->want);
	if (len - i != c->rest || smtp_session_why(s) != c->closed || smtp_session_waiting(s)
	    || (c->calls && (f.bare_eol != c->bare_eol || f.smtputf8 != c->tx_utf8))) {
		print_error("%s (%s): got rest=%zu why=%d waiting=%d bare=%d smtputf8=%d, "
			    "want rest=%zu why=%d waiting=0 bare=%d smtputf8=%d\n", c->name, how,
			    len - i, (int) smtp_session_why(s), smtp_session_waiting(s),
			    f.bare_eol, f.smtputf8, c->rest, (int) c->closed, c->bare_eol,
			    c->tx_utf8);
		bad = 1;
	}
	if (f.calls != c->calls) {
		print_error("%s (%s): got %d message hook calls, want %d\n", c->name, how,
			    f.calls, c->calls);
		bad = 1;
	}
	if (c->data)
		bad |= check_bytes(c->name, how, "message", f.data.data, f.data.len,
				   c->data, c->data_len);
	if (c->rcpts)
		bad |= check_bytes(c->name, how, "recipients", f.rcpts.data, f.rcpts.len,
				   c->rcpts, strlen(c->rcpts));
	if (c->stats) {
		char got[256];

		smtp_session_stats(s, got, sizeof(got));
		bad |= check_bytes(c->name, how, "stats", got, strlen(got), c->stats,
				   strlen(c->stats));
	}
	smtp_session_free(s);
	fake_free(&f);
	return bad;
}

/* run_script_row - run_script with no first cut, as run_rows calls it */
static inline int run_script_row(const void *row, size_t step, const char *how)
{
	return run_script(row, 0, step, how);
}

/* run_scripts - each row in every feed mode */
static inline int run_scripts(const struct script *cases, size_t n)
{
	return run_rows(cases, sizeof(cases[0]), n, run_script_row);
}


 /*
  * Event rows: what happens between feeds, and the state after each.
  */
enum event {
	EV_END,			/* no more events */
	EV_FEED,		/* in (len octets) fed */
	EV_REST,		/* what the last EV_FEED left, fed again */
	EV_REPLY,		/* smtp_session_reply(in): the hook answers */
	EV_TIMEOUT,		/* smtp_session_close(s, SMTP_CLOSE_TIMEOUT) */
	EV_SHUTDOWN,		/* smtp_session_close(s, SMTP_CLOSE_SHUTDOWN) */
	EV_WRITTEN,		/* len octets of output written (consumed) */
	EV_JUNK_LINE,		/* a MiB of 'x' with no line end */
	EV_JUNK_CHUNK,		/* a MiB of 'x' inside a chunk */
};

struct step {
	enum event ev;
	const char *in;
	size_t len;
	/* the state wanted after it */
	size_t left;			/* EV_FEED, EV_REST: octets not consumed */
	const char *out;		/* output not yet written, NULL: unchecked */
	int     waiting;		/* smtp_session_waiting() */
	int     in_data;		/* smtp_session_in_data() */
	enum smtp_close closed;		/* smtp_session_why() */
	int     calls;			/* message hook calls so far */
	const char *helo;		/* smtp_session_helo(), NULL: unchecked */
};

#define STEPS	8

struct events {
	const char *name;
	int     async;			/* the hook answers only by an EV_REPLY */
	struct step steps[STEPS];
	const char *data;		/* last message at the end, NULL: unchecked */
	size_t  data_len;
};

#define FEED(x)	.ev = EV_FEED, .in = x, .len = sizeof(x) - 1

/*
 * feed_junk - a MiB of 'x' in chunks of 4096, each consumed whole, in
 * the message (in_data) or not; memory stays bounded by the line limit
 * and message_size (1000 here) throughout.
 */
static inline void feed_junk(struct smtp_session *s, int in_data)
{
	char chunk[4096];
	size_t i;

	memset(chunk, 'x', sizeof(chunk));
	for (i = 0; i < 256; i++) {
		assert_int_equal(smtp_session_in_data(s), in_data);
		assert_int_equal(smtp_session_feed(s, chunk, sizeof(chunk)), sizeof(chunk));
		assert_true(s->line.cap <= 2 * SMTP_LINE_MAX);
		assert_true(s->tx == NULL || s->tx->data.cap <= 2 * 1000);
	}
}

/* run_step - make one event happen; the octets fed and consumed in *fed, *took */
static inline void run_step(struct smtp_session *s, const struct step *st, size_t step,
			    const char **fed, size_t *fed_len, size_t *took)
{
	switch (st->ev) {
	case EV_FEED:
		*fed = st->in;
		*fed_len = st->len;
		*took = 0;
		/* FALLTHROUGH */
	case EV_REST:
		*fed += *took;
		*fed_len -= *took;
		*took = feed_chunks(s, *fed, *fed_len, 0, step);
		break;
	case EV_REPLY:
		smtp_session_reply(s, st->in);
		break;
	case EV_TIMEOUT:
		smtp_session_close(s, SMTP_CLOSE_TIMEOUT);
		break;
	case EV_SHUTDOWN:
		smtp_session_close(s, SMTP_CLOSE_SHUTDOWN);
		break;
	case EV_WRITTEN:
		buf_consume(smtp_session_out(s), st->len);
		break;
	case EV_JUNK_LINE:
	case EV_JUNK_CHUNK:
		feed_junk(s, st->ev == EV_JUNK_CHUNK);
		break;
	case EV_END:
		break;
	}
}

/* run_events - each event of a row in turn, fed in chunks of step; check after each */
static inline int run_events(const void *row, size_t step, const char *how)
{
	const struct events *e = row;
	const struct step *st;
	const char *fed = NULL;
	size_t fed_len = 0, took = 0, left;
	struct fake f;
	struct smtp_session *s;
	char name[160];
	int bad = 0;

	memset(&f, 0, sizeof(f));
	f.async = e->async;
	s = new_session(&f, 0, 0, 0);
	for (st = e->steps; st < e->steps + STEPS && st->ev != EV_END; st++) {
		run_step(s, st, step, &fed, &fed_len, &took);
		snprintf(name, sizeof(name), "%s, event %d", e->name, (int) (st - e->steps) + 1);
		if (st->out)
			bad |= check_output(s, name, how, st->out);
		if (st->helo)
			bad |= check_bytes(name, how, "helo", smtp_session_helo(s),
					   strlen(smtp_session_helo(s)), st->helo, strlen(st->helo));
		left = st->ev == EV_FEED || st->ev == EV_REST ? st->left : fed_len - took;
		if (fed_len - took != left || smtp_session_waiting(s) != st->waiting
		    || smtp_session_in_data(s) != st->in_data
		    || smtp_session_why(s) != st->closed || f.calls != st->calls) {
			print_error("%s (%s): got left=%zu waiting=%d in_data=%d why=%d calls=%d, "
				    "want left=%zu waiting=%d in_data=%d why=%d calls=%d\n", name,
				    how, fed_len - took, smtp_session_waiting(s),
				    smtp_session_in_data(s), (int) smtp_session_why(s), f.calls,
				    left, st->waiting, st->in_data, (int) st->closed, st->calls);
			bad = 1;
		}
	}
	if (e->data)
		bad |= check_bytes(e->name, how, "message", f.data.data, f.data.len,
				   e->data, e->data_len);
	smtp_session_free(s);
	fake_free(&f);
	return bad;
}

/* run_event_rows - each row in every feed mode */
static inline int run_event_rows(const struct events *rows, size_t n)
{
	return run_rows(rows, sizeof(rows[0]), n, run_events);
}

#endif
