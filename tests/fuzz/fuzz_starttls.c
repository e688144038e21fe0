/*
 * fuzz_starttls - the bridge's plain-text STARTTLS dialogue
 * (deliver/esmtp/deliver_bridge_starttls.c: greeting, EHLO, STARTTLS,
 * each reply through a gate of its own) against a server scripted by
 * the input, over a socketpair to a thread of this process.
 *
 * Input: up to three segments separated by 0xff octets (the third takes
 * the rest, 0xff and all): what the server sends first, what it sends
 * once the client has written a line (its EHLO), and what it sends after
 * a second line (its STARTTLS). A server waiting for a line that does not
 * come within 5 ms, or done with its segments, ends its side (FIN) and
 * reads on to the client's close. Properties (abort()):
 *
 *   - success means: the first segment starts with the greeting kept for
 *     libesmtp, a whole 220 reply ("220 " on its last line); the client
 *     wrote exactly "EHLO fuzz.example\r\n" then "STARTTLS\r\n" and nothing
 *     else; the EHLO reply named STARTTLS (what the server sent after the
 *     greeting and before the client's STARTTLS); and, where the last segment is
 *     shorter than a read (4096 octets; what a later read brings goes to
 *     the handshake), it ends with a line "220 ..." and nothing after it
 *     (the reply may have begun at the end of the segment before);
 *   - failure means: a reason (one line, not empty; the server's text
 *     in it as it came, control characters and a CR inside a line and
 *     all: not checked further), an RFC 3463 code of 4.x.x, and the
 *     client wrote only its commands, then QUIT at most (never after no
 *     greeting at all);
 *   - no sanitizer report, no hang.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../deliver/esmtp/deliver_bridge_impl.h"
#include "../../util/deadline.h"

#define GOT_MAX		4096
#define LINE_WAIT_MS	5

struct server {
	int fd;
	const uint8_t *seg[3];
	size_t len[3];
	int n_seg;
	char got[GOT_MAX];		/* what the client wrote */
	size_t got_len;
};

/* put - the whole segment, blocking */
static void put(int fd, const uint8_t *p, size_t n)
{
	ssize_t k;

	while (n > 0 && (k = send(fd, p, n, MSG_NOSIGNAL)) > 0) {
		p += k;
		n -= (size_t) k;
	}
}

/* read_line - what the client writes up to a LF, or until it is quiet (0) or gone (-1) */
static int read_line(struct server *s, int wait_ms)
{
	struct pollfd p = { s->fd, POLLIN, 0 };
	size_t start = s->got_len;
	ssize_t k;

	for (;;) {
		if (memchr(s->got + start, '\n', s->got_len - start))
			return 1;
		if (poll(&p, 1, wait_ms) <= 0)
			return 0;
		if (s->got_len == GOT_MAX
		    || (k = recv(s->fd, s->got + s->got_len, GOT_MAX - s->got_len, 0)) <= 0)
			return -1;
		s->got_len += (size_t) k;
	}
}

static void *serve(void *arg)
{
	struct server *s = arg;
	int i;

	for (i = 0; i < s->n_seg; i++) {
		if (i > 0 && read_line(s, LINE_WAIT_MS) <= 0)
			break;
		put(s->fd, s->seg[i], s->len[i]);
	}
	shutdown(s->fd, SHUT_WR);
	while (read_line(s, 2000) > 0)	/* up to the client's close */
		;
	return NULL;
}

/* what the client may have written when it failed */
static const char *const wrote[] = {
	"", "QUIT\r\n", "EHLO fuzz.example\r\n", "EHLO fuzz.example\r\nQUIT\r\n",
	"EHLO fuzz.example\r\nSTARTTLS\r\n", "EHLO fuzz.example\r\nSTARTTLS\r\nQUIT\r\n", NULL
};

/* offered - does p[0..n) name STARTTLS, in any case? */
static int offered(const uint8_t *p, size_t n)
{
	size_t i;

	for (i = 0; i + 8 <= n; i++)
		if (strncasecmp((const char *) p + i, "STARTTLS", 8) == 0)
			return 1;
	return 0;
}

/* reply_220 - is p[0..n) one whole reply, its last line "220 ..."? */
static int reply_220(const char *p, size_t n)
{
	const char *l = p, *nl;

	if (n < 5 || p[n - 1] != '\n')
		return 0;
	for (;;) {
		nl = memchr(l, '\n', (size_t) (p + n - l));
		if (memcmp(l, "220", 3) != 0 || (l[3] != ' ' && l[3] != '-'))
			return 0;
		if (nl + 1 == p + n)
			return l[3] == ' ';
		if (l[3] != '-')
			return 0;
		l = nl + 1;
	}
}

/* ehlo_offered - what came after the greeting and before the STARTTLS names it (the EHLO reply) */
static int ehlo_offered(const struct server *s, size_t greeting_len)
{
	static uint8_t t[2 * 8192];
	size_t a = s->len[0] - greeting_len, b = s->n_seg > 1 ? s->len[1] : 0;

	if (a + b > sizeof(t))
		return 1;		/* not read in whole: not judged */
	memcpy(t, s->seg[0] + greeting_len, a);
	memcpy(t + a, s->seg[1], b);
	return offered(t, a + b);
}

/* last_220 - do a then b end with a line "220 ...", LF-ended (b's, or all of it in a)? */
static int last_220(const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
	char t[8192 + 8];
	const char *nl;

	if (an + bn > sizeof(t) - 1 || an + bn < 5)
		return 0;
	memcpy(t, a, an);
	memcpy(t + an, b, bn);
	if (bn == 0 || t[an + bn - 1] != '\n')
		return 0;
	t[an + bn - 1] = 0;
	nl = memrchr(t, '\n', an + bn - 1);
	nl = nl ? nl + 1 : t;
	return strncmp(nl, "220 ", 4) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct deliver_bridge *b = calloc(1, sizeof(*b));
	struct server s;
	struct timespec deadline;
	pthread_t t;
	char why[512], dsn[DELIVER_DSN_SIZE];
	const uint8_t *p = data, *q, *end = data + size;
	int sv[2], rc;
	size_t i;

	memset(&s, 0, sizeof(s));
	for (s.n_seg = 0; s.n_seg < 3 && p <= end; s.n_seg++) {
		q = s.n_seg < 2 ? memchr(p, 0xff, (size_t) (end - p)) : NULL;
		s.seg[s.n_seg] = p;
		s.len[s.n_seg] = (size_t) ((q ? q : end) - p);
		p = (q ? q : end) + 1;
	}
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		abort();
	fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
	b->tfd = sv[0];
	s.fd = sv[1];
	if (pthread_create(&t, NULL, serve, &s) != 0)
		abort();
	why[0] = 0;
	deadline = deadline_in(2000);
	rc = deliver_bridge_starttls(b, "fuzz.example", &deadline, why, sizeof(why), dsn);
	close(sv[0]);
	pthread_join(t, NULL);
	if (getenv("FUZZ_SAY"))		/* what an input did, for a person */
		fprintf(stderr, "rc=%d dsn=%s why=%s wrote=%.*s", rc, rc ? dsn : "-", why,
			(int) s.got_len, s.got);
	close(sv[1]);

	if (rc == 0) {
		if (!reply_220(b->greeting, b->greeting_len) || s.len[0] < b->greeting_len
		    || memcmp(s.seg[0], b->greeting, b->greeting_len) != 0)
			abort();
		if (s.got_len != 29 || memcmp(s.got, "EHLO fuzz.example\r\nSTARTTLS\r\n", 29) != 0)
			abort();
		if (!ehlo_offered(&s, b->greeting_len))
			abort();
		if (s.n_seg < 3 || (s.len[2] < sizeof(b->greeting)	/* one read */
				    && !last_220(s.seg[1], s.len[1], s.seg[2], s.len[2])))
			abort();
	} else {
		if (why[0] == 0 || strncmp(dsn, "4.", 2) != 0)
			abort();
		for (i = 0; why[i]; i++)
			if (why[i] == '\n')
				abort();
		for (i = 0; wrote[i]; i++)
			if (s.got_len == strlen(wrote[i]) && memcmp(s.got, wrote[i], s.got_len) == 0)
				break;
		if (wrote[i] == NULL)
			abort();
	}
	free(b);
	return 0;
}
