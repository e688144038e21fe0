/*
 * NAME
 *	smtp_session 3
 * SUMMARY
 *	SMTP session: input loop, state machine, replies
 * DESCRIPTION
 *	smtp_session_feed() cuts the client's bytes into command lines
 *	(bounded by SMTP_LINE_MAX) or hands them to the DATA reader,
 *	depending on the state:
 *
 *	COMMAND	lines go to smtp_command(); DATA moves to DATA, QUIT to
 *		CLOSED.
 *	DATA	bytes go to the DATA reader; at <CRLF>.<CRLF> the message is
 *		refused (size, bare CR/LF) or handed to the message hook,
 *		moving to WAIT.
 *	CHUNK	exactly the octets a BDAT command announced go to the same
 *		reader in raw mode (or nowhere, if the command was refused);
 *		then back to COMMAND, or, after LAST, on as at end of DATA,
 *		through the same code. An empty chunk (BDAT 0 LAST) ends
 *		in the input loop too, never inside its command.
 *	WAIT	nothing is consumed until smtp_session_reply(), which sends
 *		the reply, ends the transaction and returns to COMMAND.
 *	STARTTLS the 220 is queued; every octet fed is consumed and
 *		dropped, for it was sent before the handshake and could be
 *		an attacker's (CVE-2011-0411). smtp_session_set_tls() returns
 *		to COMMAND with a fresh session.
 *	AUTH	a 334 challenge is out: the next line is the client's
 *		response (smtp_auth.c), bounded like a command line.
 *	AUTH_WAIT nothing is consumed until smtp_session_auth_reply().
 *	CLOSED	nothing is consumed; the caller flushes and closes.
 *
 *	Errors: a client is dropped (421 4.7.0, "too many errors") after
 *	hard_errors replies of 4xx or 5xx with no message accepted between
 *	them, as Postfix's smtpd_hard_error_limit does; a junk command
 *	(NOOP, RSET, VRFY, HELP) past junk_commands counts as one such error
 *	whatever its reply (smtpd_junk_command_limit), so a session that
 *	only keeps itself alive ends too. The reply to a line of an AUTH
 *	exchange counts as a command's does, so AUTH's refusals count alike
 *	whether the credentials came with the command or after its 334, and
 *	the hook's verdict alike whether it came inside the hook or later.
 *	A message accepted (a 2xx at its end) clears both counts. A message
 *	refused (too big, bare CR or LF, by the hook) counts once, whether DATA or BDAT carried it: a message
 *	too big counts at its first 552, which for BDAT may be a chunk's
 *	before LAST, and not again for the chunks after it (RFC 3030 has
 *	those read and discarded). A BDAT refused when announced (no
 *	recipient, before TLS) counts, as each failed command does.
 *
 *	Pipelined commands are answered in order into one output buffer.
 *	Once out_max octets of it wait unwritten, no further command line is
 *	taken (feed returns short), so a client that pipelines without
 *	reading gets at most one command's replies past that: what it sent
 *	waits in its own socket, not in our memory.
 *	A 421 (timeout, shutdown) that arrives while the hook holds the
 *	message is sent after the hook's reply, so that a message the store
 *	accepted is never answered with 421 alone; the same holds for an
 *	AUTH answer.
 * DIAGNOSTICS
 *	State changes are logged at debug level. A reply from a hook that is
 *	not a single SMTP reply line is logged and replaced with 451 4.3.0.
 *	Octets discarded after STARTTLS are logged once, when TLS is up.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/log.h"
#include "smtp_session.h"
#include "smtp_tx.h"

static const char *const smtp_state_names[] = {
	[SMTP_STATE_COMMAND] = "command",
	[SMTP_STATE_DATA] = "data",
	[SMTP_STATE_CHUNK] = "chunk",
	[SMTP_STATE_WAIT] = "wait",
	[SMTP_STATE_STARTTLS] = "starttls",
	[SMTP_STATE_AUTH] = "auth",
	[SMTP_STATE_AUTH_WAIT] = "auth-wait",
	[SMTP_STATE_CLOSED] = "closed",
};

static void smtp_chunk_end(struct smtp_session *s);

/* smtp_enter_state - the one place the session state changes */
void smtp_enter_state(struct smtp_session *s, enum smtp_state state)
{
	if (s->state == state)
		return;
	msg_debug("smtp: helo=%s state %s -> %s", s->helo ? s->helo : "",
		  smtp_state_names[s->state], smtp_state_names[state]);
	s->state = state;
}

/* smtp_reply - queue one reply line built by the engine */
void smtp_reply(struct smtp_session *s, const char *fmt,...)
{
	char line[SMTP_REPLY_LINE_MAX];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line) - 2, fmt, ap);
	va_end(ap);
	if (n < 0)
		msg_panic("smtp_reply: bad format %s", fmt);
	if ((size_t) n > sizeof(line) - 3)
		n = (int) sizeof(line) - 3;
	buf_append(&s->out, line, (size_t) n);
	buf_append(&s->out, "\r\n", 2);
	smtp_stats_reply(&s->stats, line, (size_t) n);
}

/* smtp_reply_external - queue a hook's reply: one line, or 451 */
void smtp_reply_external(struct smtp_session *s, const char *reply)
{
	size_t n;

	n = reply ? strcspn(reply, "\r\n") : 0;
	if (n > SMTP_REPLY_LINE_MAX - 2)
		n = SMTP_REPLY_LINE_MAX - 2;
	if (n < 3 || reply[0] < '2' || reply[0] > '5'
	    || reply[1] < '0' || reply[1] > '9' || reply[2] < '0' || reply[2] > '9'
	    || (n > 3 && reply[3] != ' ')) {
		msg_warn("smtp: hook gave a malformed reply \"%.*s\"",
			 (int) (n > 80 ? 80 : n), reply ? reply : "");
		smtp_reply(s, "451 4.3.0 Error: internal error");
		return;
	}
	buf_append(&s->out, reply, n);
	buf_append(&s->out, "\r\n", 2);
	smtp_stats_reply(&s->stats, reply, n);
}

/* smtp_tx_end - drop the transaction (RSET, HELO, end of message) */
void smtp_tx_end(struct smtp_session *s)
{
	smtp_tx_free(s->tx);
	s->tx = NULL;
	s->data.raw = 0;		/* the next tx may use DATA */
}

/* smtp_session_new - a session waiting for smtp_session_greet() */
struct smtp_session *smtp_session_new(const struct smtp_config *cfg,
				      const struct smtp_hooks *hooks, void *ctx)
{
	struct smtp_session *s = xcalloc(1, sizeof(*s));

	s->cfg = *cfg;
	s->cfg.hostname = cfg->hostname ? cfg->hostname : "localhost";
	if (hooks)
		s->hooks = *hooks;
	s->ctx = ctx;
	s->state = SMTP_STATE_COMMAND;
	smtp_stats_init(&s->stats);
	return s;
}

/* smtp_session_free - release the session and its transaction */
void smtp_session_free(struct smtp_session *s)
{
	if (s == NULL)
		return;
	smtp_tx_end(s);
	smtp_auth_clear(s);
	free(s->helo);
	free(s->user);
	if (s->line.data)
		explicit_bzero(s->line.data, s->line.cap);	/* may hold an AUTH line */
	buf_free(&s->line);
	buf_free(&s->out);
	free(s);
}

/* smtp_session_greet - queue the 220 greeting */
void smtp_session_greet(struct smtp_session *s)
{
	smtp_reply(s, "220 %s ESMTP idemrelay", s->cfg.hostname);
}

/* smtp_feed_line - gather one command line, bounded; run it at LF, without its CRLF */
static size_t smtp_feed_line(struct smtp_session *s, const char *in, size_t len)
{
	const char *lf = memchr(in, '\n', len);
	size_t n = lf ? (size_t) (lf - in) + 1 : len, end, mark;
	int junk = 0;

	if (!s->line_long) {
		if (s->line.len + n > SMTP_LINE_MAX) {
			s->line_long = 1;
			buf_reset(&s->line);
		} else {
			buf_append(&s->line, in, n);
		}
	}
	if (lf == NULL)
		return n;
	s->records++;
	if (s->line_long) {
		s->line_long = 0;
		if (s->state == SMTP_STATE_AUTH) {
			smtp_auth_clear(s);
			smtp_reply(s, "500 5.5.6 Authentication exchange line is too long");
			smtp_enter_state(s, SMTP_STATE_COMMAND);
		} else {
			smtp_reply(s, "500 5.5.2 Line too long");
		}
		smtp_session_count(s, "500", 0);
	} else {
		end = s->line.len - 1;	/* the LF, and a CR before it (a bare LF ends it too) */
		if (end && s->line.data[end - 1] == '\r')
			end--;
		mark = s->out.len;
		if (s->state == SMTP_STATE_AUTH)
			smtp_auth_response(s, s->line.data, end);
		else
			junk = smtp_command(s, s->line.data, end);
		/* an AUTH response's reply counts as a command's (an initial response's does) */
		if (s->out.len > mark)
			smtp_session_count(s, s->out.data + mark, junk);
	}
	buf_reset(&s->line);
	if (s->state == SMTP_STATE_CHUNK && s->chunk.left == 0)
		smtp_chunk_end(s);		/* BDAT 0 LAST, its command counted */
	return n;
}

static const char smtp_too_big[] = "552 5.3.4 Message size exceeds fixed limit";

/*
 * smtp_data_end - the end of a message, by DATA or BDAT LAST alike: one
 * record; refuse it (one error, unless counted: a chunk's 552 counted it
 * already) or hand it to the hook, whose answer smtp_session_reply() counts
 */
static void smtp_data_end(struct smtp_session *s, int counted)
{
	struct smtp_tx *tx = s->tx;

	s->records++;
	s->stats.where = "END-OF-MESSAGE";
	tx->bare_eol = s->data.bare_eol;
	tx->long_lines = s->data.long_lines;
	tx->nul = s->data.nul;
	if (s->data.too_big) {
		smtp_refuse(s, tx, "END-OF-MESSAGE", smtp_too_big);
	} else if (tx->bare_eol && s->cfg.bare_lf_reject) {
		smtp_refuse(s, tx, "END-OF-MESSAGE", "550 5.5.2 Message contains bare CR or LF");
	} else if (tx->nul && s->cfg.nul_reject) {
		smtp_refuse(s, tx, "END-OF-MESSAGE", "550 5.6.0 Message contains a NUL octet");
	} else if (tx->long_lines && s->cfg.long_lines_reject) {
		smtp_refuse(s, tx, "END-OF-MESSAGE", "550 5.6.0 Message contains a line longer"
			    " than 998 octets");
	} else if (s->hooks.message == NULL) {
		smtp_reply(s, "451 4.3.0 Error: no message handler");
	} else {
		smtp_enter_state(s, SMTP_STATE_WAIT);
		s->hooks.message(s->ctx, s, tx);	/* may reply at once */
		return;
	}
	smtp_tx_end(s);
	smtp_enter_state(s, SMTP_STATE_COMMAND);
	if (!counted)
		smtp_session_count(s, "5", 0);
}

/*
 * smtp_chunk_end - a whole chunk is in: one record and its reply; LAST ends
 * the message as DATA's end does, too big or not. The message's first 552
 * counts, once: a refused message is one error however it was cut.
 */
static void smtp_chunk_end(struct smtp_session *s)
{
	struct smtp_chunk *c = &s->chunk;

	if (c->last && !c->skip) {
		smtp_data_finish(&s->data, &s->tx->data);
		smtp_data_end(s, c->big);	/* COMMAND or WAIT */
		return;
	}
	s->records++;
	smtp_enter_state(s, SMTP_STATE_COMMAND);
	if (c->skip)
		return;			/* refused when announced: answered and counted then */
	if (s->data.too_big) {
		/*
		 * RFC 3030: the client must send no more chunks, but those
		 * already in the pipeline are read and discarded, not punished.
		 * too_big stays set for the tx, so each of them gets this reply
		 * too, but only the first counts: a client that pipelined more
		 * chunks than hard_errors keeps its session (a 421 mid-message
		 * reads as "try again" for a message that never fits, and drops
		 * its other messages). LAST, or RSET, ends the tx.
		 */
		smtp_reply(s, "%s", smtp_too_big);
		if (!c->big)
			smtp_session_count(s, smtp_too_big, 0);
	} else {
		smtp_reply(s, "250 2.0.0 Ok: %llu octets received",
			   (unsigned long long) c->size);
	}
}

/*
 * smtp_chunk_start - read (or skip) a BDAT chunk of size octets; the input
 * loop ends it (an empty one right after its command line), never inside
 * the command, whose own reply smtp_feed_line() counts
 */
void smtp_chunk_start(struct smtp_session *s, uint64_t size, int last, int skip)
{
	s->chunk.size = s->chunk.left = size;
	s->chunk.last = last;
	s->chunk.skip = skip;
	s->chunk.big = s->data.too_big;	/* an earlier chunk's 552 counted it */
	smtp_enter_state(s, SMTP_STATE_CHUNK);
}

/* smtp_chunk_feed - the next octets of the chunk, and not one more */
static size_t smtp_chunk_feed(struct smtp_session *s, const char *in, size_t len)
{
	size_t n = s->chunk.left < len ? (size_t) s->chunk.left : len;

	/* raw mode has no end of data: the reader takes all n octets */
	if (!s->chunk.skip)
		smtp_data_feed(&s->data, &s->tx->data, in, n);
	s->chunk.left -= n;
	if (s->chunk.left == 0)
		smtp_chunk_end(s);
	return n;
}

/* smtp_session_feed - consume client bytes until done, waiting or closed */
size_t smtp_session_feed(struct smtp_session *s, const char *in, size_t len)
{
	size_t i = 0;

	while (i < len) {
		switch (s->state) {
		case SMTP_STATE_COMMAND:
		case SMTP_STATE_AUTH:
			if (s->cfg.out_max && s->out.len >= s->cfg.out_max
			    && s->line.len == 0 && !s->line_long)
				return i;	/* answers pile up unread: wait */
			i += smtp_feed_line(s, in + i, len - i);
			break;
		case SMTP_STATE_STARTTLS:
			s->discarded += len - i;
			return len;
		case SMTP_STATE_DATA:
			i += smtp_data_feed(&s->data, &s->tx->data, in + i, len - i);
			if (smtp_data_done(&s->data))
				smtp_data_end(s, 0);
			break;
		case SMTP_STATE_CHUNK:
			i += smtp_chunk_feed(s, in + i, len - i);
			break;
		case SMTP_STATE_WAIT:
		case SMTP_STATE_AUTH_WAIT:
		case SMTP_STATE_CLOSED:
			return i;
		}
	}
	return i;
}

/*
 * smtp_session_count - count a command's (or a message's) first reply line
 * and whether the command was junk; too many errors close the session: the
 * 421 is queued or, while a hook holds the session, due after its reply
 */
void smtp_session_count(struct smtp_session *s, const char *reply, int junk)
{
	if (reply[0] == '4' || reply[0] == '5')
		s->errors++;
	if (junk && ++s->junk > s->cfg.junk_commands && s->cfg.junk_commands)
		s->errors++;
	/* once: a closed session stays as it is */
	if (s->errors >= s->cfg.hard_errors && s->cfg.hard_errors)
		smtp_session_close(s, SMTP_CLOSE_ERRORS);
}

/* smtp_session_reply - the message hook's answer; resume input */
void smtp_session_reply(struct smtp_session *s, const char *reply)
{
	size_t mark = s->out.len;

	if (s->state != SMTP_STATE_WAIT) {
		msg_warn("smtp: reply \"%.80s\" while not waiting for one",
			 reply ? reply : "");
		return;
	}
	smtp_reply_external(s, reply);
	if (s->out.data[mark] == '2')
		s->errors = s->junk = 0;	/* a message taken: the client is doing work */
	else
		smtp_session_count(s, s->out.data + mark, 0);
	smtp_tx_end(s);
	smtp_session_resume(s);
}

/* smtp_session_resume - a hook answered: take commands, or close if a 421 waited (why) */
void smtp_session_resume(struct smtp_session *s)
{
	smtp_enter_state(s, SMTP_STATE_COMMAND);
	if (s->why != SMTP_CLOSE_NONE)
		smtp_session_close(s, s->why);
}

/* smtp_session_set_tls - TLS is up: start over (RFC 3207 section 4.2) */
void smtp_session_set_tls(struct smtp_session *s)
{
	if (s->tls || (s->state != SMTP_STATE_STARTTLS && s->state != SMTP_STATE_COMMAND)) {
		msg_warn("smtp: TLS up in state %s%s", smtp_state_names[s->state],
			 s->tls ? " with TLS already up" : "");
		return;
	}
	if (s->discarded)
		msg_info("smtp: helo=%s discarded %zu octets sent after STARTTLS",
			 s->helo ? s->helo : "", s->discarded);
	s->discarded = 0;
	smtp_tx_end(s);
	smtp_auth_clear(s);
	free(s->helo);
	s->helo = NULL;
	s->esmtp = 0;
	free(s->user);
	s->user = NULL;
	buf_reset(&s->line);
	s->line_long = 0;
	s->tls = 1;
	smtp_enter_state(s, SMTP_STATE_COMMAND);
}

/* what the 421 of each way to close says (a failed AUTH's is smtp_auth.c's) */
static const struct {
	const char *code, *text;
} smtp_close_421[] = {
	[SMTP_CLOSE_TIMEOUT] = {"4.4.2", "Error: timeout exceeded"},
	[SMTP_CLOSE_ERRORS] = {"4.7.0", "Error: too many errors"},
	[SMTP_CLOSE_SHUTDOWN] = {"4.3.2", "Service shutting down"},
};

/*
 * smtp_session_close - "421 code hostname text" for why, and close; while
 * a hook holds the session, once it has answered (smtp_session_resume()).
 * The first why stays.
 */
void smtp_session_close(struct smtp_session *s, enum smtp_close why)
{
	if (s->state == SMTP_STATE_CLOSED)
		return;
	if (s->why == SMTP_CLOSE_NONE)
		s->why = why;
	if (s->state == SMTP_STATE_WAIT || s->state == SMTP_STATE_AUTH_WAIT)
		return;
	smtp_reply(s, "421 %s %s %s", smtp_close_421[s->why].code, s->cfg.hostname,
		   smtp_close_421[s->why].text);
	smtp_tx_end(s);
	smtp_auth_clear(s);
	smtp_enter_state(s, SMTP_STATE_CLOSED);
}

/* smtp_session_out - replies for the caller to write */
struct buf *smtp_session_out(struct smtp_session *s)
{
	return &s->out;
}

/* smtp_session_closing - QUIT or 421 queued */
int smtp_session_closing(const struct smtp_session *s)
{
	return s->state == SMTP_STATE_CLOSED;
}

/* smtp_session_waiting - the message or auth hook has not replied yet */
int smtp_session_waiting(const struct smtp_session *s)
{
	return s->state == SMTP_STATE_WAIT || s->state == SMTP_STATE_AUTH_WAIT;
}

/* smtp_session_in_data - reading a message (DATA or a BDAT chunk) */
int smtp_session_in_data(const struct smtp_session *s)
{
	return s->state == SMTP_STATE_DATA || s->state == SMTP_STATE_CHUNK;
}

/* smtp_session_helo - the HELO/EHLO argument, "" before one */
const char *smtp_session_helo(const struct smtp_session *s)
{
	return s->helo ? s->helo : "";
}

/* smtp_session_esmtp - greeted with EHLO (proto=ESMTP in the log), not HELO */
int smtp_session_esmtp(const struct smtp_session *s)
{
	return s->esmtp;
}

/* smtp_refuse - reply to a policy refusal of the engine's own, and tell the hook */
void smtp_refuse(struct smtp_session *s, const struct smtp_tx *tx, const char *stage,
		 const char *reply)
{
	smtp_reply(s, "%s", reply);
	if (s->hooks.refused)
		s->hooks.refused(s->ctx, s, tx, stage, reply);
}

/* smtp_session_starttls - 220 queued: the caller flushes it, then does the handshake */
int smtp_session_starttls(const struct smtp_session *s)
{
	return s->state == SMTP_STATE_STARTTLS;
}

/* smtp_session_tls - TLS is up */
int smtp_session_tls(const struct smtp_session *s)
{
	return s->tls;
}

/* smtp_session_user - the authenticated AUTH user, NULL before AUTH */
const char *smtp_session_user(const struct smtp_session *s)
{
	return s->user;
}

/* smtp_session_records - what the client completed: lines, messages, chunks */
unsigned long smtp_session_records(const struct smtp_session *s)
{
	return s->records;
}

/* smtp_session_where - the last command, for "lost connection after CMD" */
const char *smtp_session_where(const struct smtp_session *s)
{
	return s->stats.where;
}

/* smtp_session_stats - the command counts of the disconnect line */
void smtp_session_stats(const struct smtp_session *s, char *buf, size_t len)
{
	smtp_stats_format(&s->stats, buf, len);
}

/* smtp_session_why - why the session closed; SMTP_CLOSE_NONE while open */
enum smtp_close smtp_session_why(const struct smtp_session *s)
{
	return s->state == SMTP_STATE_CLOSED ? s->why : SMTP_CLOSE_NONE;
}

/* smtp_session_data_len - the message octets held, for the caller's memory budget */
size_t smtp_session_data_len(const struct smtp_session *s)
{
	return s->tx ? s->tx->data.len : 0;
}
