/*
 * NAME
 *	deliver_bridge_starttls 3
 * SUMMARY
 *	the bridge's plain-text STARTTLS dialogue, before the handshake
 * DESCRIPTION
 *	With upstream.tls = "starttls", deliver_bridge_open() talks the part
 *	of the session before TLS itself, in the delivery thread, instead of
 *	letting libESMTP do it (tls/tls_client.c lists libESMTP 1.1.0's
 *	STARTTLS faults): the server's greeting, kept for libesmtp, which
 *	the bridge hands it first (the pump's start); EHLO, which
 *	must offer STARTTLS; STARTTLS, which must be answered 220 with nothing
 *	after it (anything else the server sent then was injected before TLS).
 *	Each failure is known with its reason and its RFC 3463 code before
 *	libesmtp starts.
 * DIAGNOSTICS
 *	None logged: failures are returned as text and a code for the
 *	caller's log line and deferral reason.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "../../util/buf.h"
#include "../../util/deadline.h"
#include "deliver_bridge_impl.h"

/* what was read before TLS and not yet used */
struct plain_in {
	char buf[SMTP_REPLY_MAX];
	size_t len;
};

/* plain_send - a whole command before TLS, within the deadline */
static int plain_send(int fd, const char *cmd, const struct timespec *deadline)
{
	size_t off = 0, len = strlen(cmd);
	ssize_t n;

	while (off < len) {
		n = send(fd, cmd + off, len - off, MSG_NOSIGNAL);
		if (n > 0)
			off += (size_t) n;
		else if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -1;
		else if (!deadline_wait(fd, POLLOUT, deadline))
			return -1;
	}
	return 0;
}

/*
 * plain_reply - one whole reply before TLS, within the deadline: its code,
 * its last line (for messages) in last, whether a line announced STARTTLS,
 * and, if raw is set, its bytes appended there. -1: no reply (why set).
 */
static int plain_reply(int fd, struct plain_in *in, const struct timespec *deadline,
		       char *last, size_t lastlen, int *starttls,
		       struct deliver_bridge *raw, char *why, size_t whylen)
{
	int code = -1, c;
	size_t n, text;
	ssize_t got;
	char *nl;

	for (;;) {
		if ((nl = memchr(in->buf, '\n', in->len)) == NULL) {
			if (in->len == sizeof(in->buf)) {
				snprintf(why, whylen, "reply line too long");
				return -1;
			}
			got = recv(fd, in->buf + in->len, sizeof(in->buf) - in->len, 0);
			if (got > 0) {
				in->len += (size_t) got;
			} else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
				snprintf(why, whylen, "lost connection (%s)",
					 got == 0 ? "closed by the server" : strerror(errno));
				return -1;
			} else if (!deadline_wait(fd, POLLIN, deadline)) {
				snprintf(why, whylen, "timed out waiting for the server");
				return -1;
			}
			continue;
		}
		n = (size_t) (nl + 1 - in->buf);
		if (n < 4 || in->buf[0] < '2' || in->buf[0] > '5' || in->buf[1] < '0'
		    || in->buf[1] > '9' || in->buf[2] < '0' || in->buf[2] > '9'
		    || (in->buf[3] != ' ' && in->buf[3] != '-' && in->buf[3] != '\r'
			&& in->buf[3] != '\n')) {
			snprintf(why, whylen, "malformed reply \"%.*s\"",
				 (int) (n > 80 ? 80 : n - 1), in->buf);
			return -1;
		}
		c = (in->buf[0] - '0') * 100 + (in->buf[1] - '0') * 10 + (in->buf[2] - '0');
		if (code >= 0 && c != code) {
			snprintf(why, whylen, "malformed multi-line reply");
			return -1;
		}
		code = c;
		for (text = 4; text < n && (in->buf[text] == ' ' || in->buf[text] == '\t'); text++)
			continue;
		if (starttls && n - text >= 8 && strncasecmp(in->buf + text, "STARTTLS", 8) == 0
		    && (n - text == 8 || in->buf[text + 8] <= ' '))
			*starttls = 1;
		if (raw && raw->greeting_len + n <= sizeof(raw->greeting)) {
			memcpy(raw->greeting + raw->greeting_len, in->buf, n);
			raw->greeting_len += n;
		}
		snprintf(last, lastlen, "%.*s", (int) (n - (n > 1 && in->buf[n - 2] == '\r' ? 2 : 1)),
			 in->buf);
		memmove(in->buf, in->buf + n, in->len - n);
		in->len -= n;
		if (last[3] != '-')
			return code;		/* "250 text" or "250" alone: the last line */
	}
}

/*
 * deliver_bridge_starttls - the plain part of STARTTLS: greeting (kept for
 * libesmtp), EHLO, STARTTLS required, 220, and nothing after it
 */
int deliver_bridge_starttls(struct deliver_bridge *b, const char *helo,
			    const struct timespec *deadline, char *why, size_t whylen,
			    char dsn[DELIVER_DSN_SIZE])
{
	struct plain_in *in = xcalloc(1, sizeof(*in));
	char cmd[300], last[SMTP_REPLY_MAX], err[200];
	int code = -1, offered = 0, rc = -1;

	snprintf(dsn, DELIVER_DSN_SIZE, "4.4.2");
	if ((code = plain_reply(b->tfd, in, deadline, last, sizeof(last), NULL, b, err,
				sizeof(err))) < 0) {
		snprintf(why, whylen, "no greeting: %s", err);
		goto out;
	}
	if (code != 220) {
		snprintf(dsn, DELIVER_DSN_SIZE, "4.4.1");	/* as a refused connection: try the next */
		snprintf(why, whylen, "refused to talk to me: %.300s", last);
		goto out;
	}
	snprintf(cmd, sizeof(cmd), "EHLO %.250s\r\n", helo);
	if (plain_send(b->tfd, cmd, deadline) < 0
	    || (code = plain_reply(b->tfd, in, deadline, last, sizeof(last), &offered, NULL,
				   err, sizeof(err))) < 0) {
		snprintf(why, whylen, "EHLO: %s", code < 0 ? err : "lost connection");
		goto out;
	}
	if (code / 100 != 2) {
		snprintf(why, whylen, "EHLO refused: %.300s", last);
		goto out;
	}
	if (!offered) {
		snprintf(dsn, DELIVER_DSN_SIZE, "4.7.4");
		snprintf(why, whylen, "TLS is required, but was not offered");
		goto out;
	}
	if (plain_send(b->tfd, "STARTTLS\r\n", deadline) < 0
	    || (code = plain_reply(b->tfd, in, deadline, last, sizeof(last), NULL, NULL,
				   err, sizeof(err))) < 0) {
		snprintf(why, whylen, "STARTTLS: %s", code < 0 ? err : "lost connection");
		goto out;
	}
	if (code != 220) {
		snprintf(dsn, DELIVER_DSN_SIZE, code / 100 == 5 ? "4.7.4" : "4.7.0");
		snprintf(why, whylen, "STARTTLS refused: %.300s", last);
		goto out;
	}
	if (in->len > 0) {
		/* only the handshake may follow: anything else was injected before TLS */
		snprintf(dsn, DELIVER_DSN_SIZE, "4.7.0");
		snprintf(why, whylen, "the server sent data after its 220 to STARTTLS, before"
			 " TLS (command injection)");
		goto out;
	}
	rc = 0;
out:
	if (rc < 0 && code >= 0)
		(void) send(b->tfd, "QUIT\r\n", 6, MSG_NOSIGNAL);	/* courtesy, unanswered */
	free(in);
	return rc;
}
