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
 *	libesmtp starts. The replies are read by a gate of their own
 *	(deliver_gate.h), so they are held to the rules libesmtp's are.
 * DIAGNOSTICS
 *	None logged: failures are returned as text and a code for the
 *	caller's log line and deferral reason.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "../../util/buf.h"
#include "../../util/deadline.h"
#include "deliver_bridge_impl.h"

/*
 * the conversation before TLS, read as libesmtp's is: the filter counts
 * the replies owed, the gate passes each whole, well-formed and owed
 * (deliver_gate.h); one reply at a time, as one command is written at a
 * time
 */
struct plain {
	struct deliver_filter f;
	struct deliver_gate g;
	char reply[DELIVER_GATE_REPLY_MAX * 2];	/* the last reply the gate passed */
	size_t len;
};

/* plain_send - a whole command before TLS, within the deadline; the reply it is owed counted */
static int plain_send(int fd, struct plain *in, const char *cmd, const struct timespec *deadline)
{
	char line[300];
	size_t off = 0, len = strlen(cmd);
	ssize_t n;

	memcpy(line, cmd, len);
	(void) deliver_filter_up(&in->f, line, len);	/* a command: passed as it is */
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
 * plain_reply - the next whole reply before TLS, within the deadline, in
 * in->reply (an EHLO reply's keywords noted by the filter, in->f.offered):
 * its code, its last line (for messages) in last, cleaned by
 * deliver_reply_format(). -1: no reply (why set).
 */
static int plain_reply(int fd, struct plain *in, const struct timespec *deadline,
		       char *last, size_t lastlen, char *why, size_t whylen)
{
	char buf[DELIVER_GATE_REPLY_MAX], *line, *nl, *end;
	ssize_t got;
	int code;

	for (in->len = 0; in->len == 0;) {
		if (in->g.gone) {
			snprintf(why, whylen, "%s", in->g.why);
			return -1;
		}
		got = recv(fd, buf, sizeof(buf), 0);
		if (got > 0) {
			in->len = deliver_gate_down(&in->g, &in->f, buf, (size_t) got, in->reply);
		} else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
			snprintf(why, whylen, "lost connection (%s)",
				 got == 0 ? "closed by the server" : strerror(errno));
			return -1;
		} else if (!deadline_wait(fd, POLLIN, deadline)) {
			snprintf(why, whylen, "timed out waiting for the server");
			return -1;
		}
	}
	end = in->reply + in->len;
	for (line = in->reply; line < end; line = nl + 1) {
		nl = memchr(line, '\n', (size_t) (end - line));
		snprintf(buf, sizeof(buf), "%.*s", (int) (nl - line), line);
	}
	code = (in->reply[0] - '0') * 100 + (in->reply[1] - '0') * 10 + (in->reply[2] - '0');
	/* one clean line, as every other reply's text (the code and all: "554 5.3.0 ...") */
	deliver_reply_format(last, lastlen, code, 0, 0, 0, buf + 3);
	return code;
}

/*
 * deliver_bridge_starttls - the plain part of STARTTLS: greeting (kept for
 * libesmtp), EHLO, STARTTLS required, 220, and nothing after it
 */
int deliver_bridge_starttls(struct deliver_bridge *b, const char *helo,
			    const struct timespec *deadline, char *why, size_t whylen,
			    char dsn[DELIVER_DSN_SIZE])
{
	struct plain *in = xcalloc(1, sizeof(*in));
	char cmd[300], last[DELIVER_GATE_REPLY_MAX], err[200];
	int code = -1, rc = -1;

	deliver_filter_init(&in->f);
	deliver_gate_init(&in->g);
	snprintf(dsn, DELIVER_DSN_SIZE, "4.4.2");
	if ((code = plain_reply(b->tfd, in, deadline, last, sizeof(last), err, sizeof(err))) < 0) {
		snprintf(why, whylen, "no greeting: %s", err);
		goto out;
	}
	memcpy(b->greeting, in->reply, in->len);	/* for libesmtp: the pump's start */
	b->greeting_len = in->len;
	if (code != 220) {
		snprintf(dsn, DELIVER_DSN_SIZE, "4.4.1");	/* as a refused connection: try the next */
		snprintf(why, whylen, "refused to talk to me: %.300s", last);
		goto out;
	}
	snprintf(cmd, sizeof(cmd), "EHLO %.250s\r\n", helo);
	if (plain_send(b->tfd, in, cmd, deadline) < 0
	    || (code = plain_reply(b->tfd, in, deadline, last, sizeof(last), err,
				   sizeof(err))) < 0) {
		snprintf(why, whylen, "EHLO: %s", code < 0 ? err : "lost connection");
		goto out;
	}
	if (code / 100 != 2) {
		snprintf(why, whylen, "EHLO refused: %.300s", last);
		goto out;
	}
	if (!(atomic_load(&in->f.offered) & DELIVER_FILTER_TLS)) {
		snprintf(dsn, DELIVER_DSN_SIZE, "4.7.4");
		snprintf(why, whylen, "TLS is required, but was not offered");
		goto out;
	}
	if (plain_send(b->tfd, in, "STARTTLS\r\n", deadline) < 0
	    || (code = plain_reply(b->tfd, in, deadline, last, sizeof(last), err,
				   sizeof(err))) < 0) {
		snprintf(why, whylen, "STARTTLS: %s", code < 0 ? err : "lost connection");
		goto out;
	}
	if (code != 220) {
		snprintf(dsn, DELIVER_DSN_SIZE, code / 100 == 5 ? "4.7.4" : "4.7.0");
		snprintf(why, whylen, "STARTTLS refused: %.300s", last);
		goto out;
	}
	if (in->g.gone || in->g.line_len > 0) {
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
