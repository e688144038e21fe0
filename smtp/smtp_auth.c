/*
 * NAME
 *	smtp_auth 3
 * SUMMARY
 *	AUTH PLAIN and LOGIN (RFC 4954, RFC 4616): the exchange, not the check
 * DESCRIPTION
 *	smtp_cmd_auth() runs the AUTH command; a mechanism that needs more
 *	from the client sends a 334 challenge and moves the session to
 *	SMTP_STATE_AUTH, where smtp_auth_response() takes the next line.
 *	Once a user name and password are known they go to the auth hook
 *	and the session waits (SMTP_STATE_AUTH_WAIT) for
 *	smtp_session_auth_reply(). Whether they are right, and how long a
 *	wrong answer takes, is the caller's business.
 *
 *	Policy: AUTH is offered and accepted only once TLS is up (538 5.7.11
 *	before), once per session (503 after success), never inside a mail
 *	transaction (503). "*" cancels an exchange (501 5.7.0). A response
 *	that is not base64 gets 501 5.5.2. Wrong credentials, a user name
 *	that no users file can hold (empty, over 255 octets, controls or
 *	spaces) and a PLAIN authorization identity other than the user get
 *	535 5.7.8; after SMTP_AUTH_FAILURES (3) of them, 421 and close.
 *
 *	Everything decoded is wiped once used, and so is the line that
 *	carried it.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>

#include "../util/log.h"
#include "smtp_session.h"

#define SMTP_AUTH_NAME_MAX	255
#define SMTP_AUTH_FAILURES	3	/* 535s before 421 and close */

static const char *const smtp_mech_names[] = {
	[SMTP_MECH_PLAIN] = "PLAIN",
	[SMTP_MECH_LOGIN] = "LOGIN",
};

/*
 * smtp_b64_decode - strict RFC 4648 base64 (padding required, nothing
 * else allowed) into out, NUL-terminated. out has room for len * 3 / 4
 * + 1 octets. Returns the decoded length, or -1. OpenSSL decodes what
 * is checked here first: it would take blanks around the text and a '='
 * anywhere (as a zero digit), and counts the padding as octets.
 */
static long smtp_b64_decode(const char *in, size_t len, char *out)
{
	static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t i, pad = len >= 2 && in[len - 1] == '=' ? 1 + (in[len - 2] == '=') : 0;
	int n;

	if (len % 4)
		return -1;
	for (i = 0; i < len - pad; i++)
		if (in[i] == 0 || strchr(digits, in[i]) == NULL)
			return -1;
	if ((n = EVP_DecodeBlock((unsigned char *) out, (const unsigned char *) in, (int) len)) < 0)
		return -1;
	out[n - pad] = 0;
	return (long) n - (long) pad;
}

/* smtp_auth_name_ok - a name a users file can hold and a log line can show */
int smtp_auth_name_ok(const char *p, size_t n)
{
	size_t i;

	if (n == 0 || n > SMTP_AUTH_NAME_MAX)
		return 0;
	for (i = 0; i < n; i++)
		if ((unsigned char) p[i] <= ' ' || (unsigned char) p[i] == 0x7f)
			return 0;
	return 1;
}

/* smtp_auth_offered - EHLO shows AUTH: configured, a hook, TLS up */
int smtp_auth_offered(const struct smtp_session *s)
{
	return s->cfg.auth && s->hooks.auth && s->tls;
}

/* smtp_auth_clear - forget the exchange in progress (not the failure count) */
void smtp_auth_clear(struct smtp_session *s)
{
	if (s->auth.user) {
		explicit_bzero(s->auth.user, strlen(s->auth.user));
		free(s->auth.user);
		s->auth.user = NULL;
	}
}

/* smtp_auth_wipe_line - the command or response line held credentials */
static void smtp_auth_wipe_line(struct smtp_session *s)
{
	if (s->line.data)
		explicit_bzero(s->line.data, s->line.len);
}

/* smtp_auth_fail - 535; past the limit, 421 and close */
static void smtp_auth_fail(struct smtp_session *s)
{
	smtp_auth_clear(s);
	smtp_reply(s, "535 5.7.8 Error: authentication failed");
	if (++s->auth.failures >= SMTP_AUTH_FAILURES) {
		smtp_reply(s, "421 4.7.0 %s Error: too many failed authentication attempts",
			   s->cfg.hostname);
		s->why = SMTP_CLOSE_ERRORS;
		smtp_enter_state(s, SMTP_STATE_CLOSED);
		return;
	}
	smtp_session_resume(s);
}

/* smtp_auth_abort - end the exchange with a reply that is not a failure */
static void smtp_auth_abort(struct smtp_session *s, const char *reply)
{
	smtp_auth_clear(s);
	smtp_reply(s, "%s", reply);
	smtp_enter_state(s, SMTP_STATE_COMMAND);
}

/* smtp_auth_check - credentials complete: hand them to the hook and wait */
static void smtp_auth_check(struct smtp_session *s, const char *user, size_t user_len,
			    const char *pass, size_t pass_len)
{
	char   *name;

	if (!smtp_auth_name_ok(user, user_len) || memchr(pass, 0, pass_len) != NULL) {
		smtp_auth_fail(s);
		return;
	}
	name = xstrndup(user, user_len);
	smtp_auth_clear(s);
	s->auth.user = name;
	smtp_enter_state(s, SMTP_STATE_AUTH_WAIT);
	s->hooks.auth(s->ctx, s, smtp_mech_names[s->auth.mech], s->auth.user, pass);
}

/* smtp_auth_plain - "authzid NUL authcid NUL passwd" (RFC 4616) */
static void smtp_auth_plain(struct smtp_session *s, const char *msg, size_t len)
{
	const char *nul1 = memchr(msg, 0, len), *nul2, *user;

	nul2 = nul1 ? memchr(nul1 + 1, 0, len - (size_t) (nul1 - msg) - 1) : NULL;
	if (nul2 == NULL) {
		smtp_auth_abort(s, "501 5.5.2 Cannot decode response");
		return;
	}
	user = nul1 + 1;
	/* acting for someone else (authzid) is not something we offer */
	if (nul1 != msg && ((size_t) (nul1 - msg) != (size_t) (nul2 - user)
			    || memcmp(msg, user, (size_t) (nul1 - msg)) != 0)) {
		smtp_auth_fail(s);
		return;
	}
	smtp_auth_check(s, user, (size_t) (nul2 - user), nul2 + 1,
			len - (size_t) (nul2 + 1 - msg));
}

/* smtp_auth_login_step - LOGIN: a user name, then a password */
static void smtp_auth_login_step(struct smtp_session *s, const char *msg, size_t len)
{
	if (s->auth.user == NULL) {
		/* checked with the password, so that a bad name costs a round too */
		s->auth.user = xmalloc(len + 1);
		memcpy(s->auth.user, msg, len);
		s->auth.user[len] = 0;
		if (memchr(msg, 0, len) != NULL)
			s->auth.user[0] = 0;	/* never a valid name */
		smtp_reply(s, "334 UGFzc3dvcmQ6");	/* "Password:" */
		smtp_enter_state(s, SMTP_STATE_AUTH);
		return;
	}
	smtp_auth_check(s, s->auth.user, strlen(s->auth.user), msg, len);
}

/* smtp_auth_step - one decoded client message for the mechanism */
static void smtp_auth_step(struct smtp_session *s, const char *msg, size_t len)
{
	if (s->auth.mech == SMTP_MECH_PLAIN)
		smtp_auth_plain(s, msg, len);
	else
		smtp_auth_login_step(s, msg, len);
}

/* smtp_cmd_auth - AUTH mechanism [initial-response] */
void smtp_cmd_auth(struct smtp_session *s, const char *args, size_t len)
{
	char    dec[SMTP_LINE_MAX];
	const char *sp, *ir = NULL;
	size_t  mech_len = len, ir_len = 0;
	long    n;

	if (!s->cfg.auth || !s->hooks.auth) {
		smtp_reply(s, "503 5.5.1 Error: authentication not enabled");
		goto done;
	}
	if (!s->tls) {
		smtp_reply(s, "538 5.7.11 Encryption required for requested authentication mechanism");
		goto done;
	}
	if (s->user) {
		smtp_reply(s, "503 5.5.1 Error: already authenticated");
		goto done;
	}
	if (s->tx) {
		smtp_reply(s, "503 5.5.1 Error: MAIL transaction in progress");
		goto done;
	}
	if ((sp = memchr(args, ' ', len)) != NULL) {
		mech_len = (size_t) (sp - args);
		ir = sp + 1;
		ir_len = len - mech_len - 1;
	}
	if (mech_len == 0 || (ir && (ir_len == 0 || memchr(ir, ' ', ir_len)))) {
		smtp_reply(s, "501 5.5.4 Syntax: AUTH mechanism [initial-response]");
		goto done;
	}
	if (mech_len == 5 && strncasecmp(args, "PLAIN", 5) == 0) {
		s->auth.mech = SMTP_MECH_PLAIN;
	} else if (mech_len == 5 && strncasecmp(args, "LOGIN", 5) == 0) {
		s->auth.mech = SMTP_MECH_LOGIN;
	} else {
		smtp_reply(s, "504 5.5.4 Unrecognized authentication type");
		goto done;
	}
	if (ir == NULL) {
		smtp_reply(s, s->auth.mech == SMTP_MECH_PLAIN ? "334 " : "334 VXNlcm5hbWU6");
		smtp_enter_state(s, SMTP_STATE_AUTH);
		goto done;
	}
	/* "=" is an initial response of zero octets (RFC 4954 section 4) */
	dec[0] = 0;
	n = ir_len == 1 && ir[0] == '=' ? 0 : smtp_b64_decode(ir, ir_len, dec);
	if (n < 0)
		smtp_reply(s, "501 5.5.2 Cannot decode response");
	else
		smtp_auth_step(s, dec, (size_t) n);
	explicit_bzero(dec, sizeof(dec));
done:
	smtp_auth_wipe_line(s);
}

/* smtp_auth_response - the client's line after a 334, its CRLF (or LF) gone */
void smtp_auth_response(struct smtp_session *s, char *line, size_t len)
{
	char    dec[SMTP_LINE_MAX];
	long    n;

	if (len == 1 && line[0] == '*') {
		smtp_auth_abort(s, "501 5.7.0 Authentication aborted");
	} else if ((n = smtp_b64_decode(line, len, dec)) < 0) {
		smtp_auth_abort(s, "501 5.5.2 Cannot decode response");
	} else {
		smtp_auth_step(s, dec, (size_t) n);
	}
	explicit_bzero(dec, sizeof(dec));
	smtp_auth_wipe_line(s);
}

/* smtp_session_auth_reply - the auth hook's verdict; resume input */
void smtp_session_auth_reply(struct smtp_session *s, int ok)
{
	size_t mark = s->out.len;

	if (s->state != SMTP_STATE_AUTH_WAIT) {
		msg_warn("smtp: auth verdict while not waiting for one");
		return;
	}
	if (ok < 0) {			/* not now: no verdict on the password */
		smtp_auth_clear(s);
		smtp_reply(s, "454 4.7.0 Error: too many AUTH attempts, try again later");
		smtp_session_resume(s);
	} else if (!ok) {
		smtp_auth_fail(s);
	} else {
		free(s->user);
		s->user = s->auth.user;
		s->auth.user = NULL;
		smtp_reply(s, "235 2.7.0 Authentication successful");
		smtp_session_resume(s);
	}
	/*
	 * the verdict is the reply to the line that carried the credentials:
	 * given inside the hook, smtp_feed_line() counts it with that line,
	 * which it still holds; given later, with the line gone, it counts here
	 */
	if (s->line.len == 0)
		smtp_session_count(s, s->out.data + mark, 0);
}
