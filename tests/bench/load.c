/*
 * NAME
 *	load 1
 * SUMMARY
 *	SMTP load generator for idemrelay's benchmarks
 * SYNOPSIS
 *	load [-c conns] [-n msgs] [-C per_session] [-s size] [-r rcpts]
 *	     [-k unique|replay|none] [-K prefix] [-u pool] [-o offset]
 *	     [-H] [-P] [-t secs] [-b source] [-T [-R]] [-A user:pass] host:port
 *	load -I idle [-w secs] host:port
 * DESCRIPTION
 *	Sends msgs messages over conns parallel SMTP sessions (one event
 *	loop, non-blocking sockets, so that the generator costs little CPU
 *	next to the server it measures), per_session messages per session
 *	before QUIT and a new connection (0: one session each, to the end).
 *	Each message is size bytes (headers included) to rcpts recipients.
 *
 *	The key of message i (i counted from offset) is "prefix-i" with -k
 *	unique, "prefix-(i mod pool)" with -k replay (so a replay run after
 *	a unique run of the same prefix and pool size gets only duplicates),
 *	and there is none with -k none. It goes into the Message-ID
 *	(<key@load.test>), and also into an X-Idempotency-Key header with
 *	-H. The body is the same for every message, so a replay has the
 *	fingerprint of the original.
 *
 *	-P pipelines MAIL, RCPT and DATA (RFC 2920); otherwise the client
 *	waits for each reply, as smtp-source does.
 *
 *	The latency of a message is the time from writing the last byte of
 *	its final dot to reading the reply. At the end one line is printed:
 *	    msgs= ok= dup= fail= secs= msgs_per_s= mb_per_s= p50_ms= p90_ms=
 *	    p99_ms= max_ms=
 *	(MB = 10^6 bytes of message data; dup counts 250 replies that say
 *	"duplicate"; secs runs from the first connect to the last reply).
 *
 *	-T says STARTTLS after the first EHLO, does the TLS handshake
 *	(OpenSSL, TLS 1.2 or 1.3 as the server chooses, the certificate
 *	not verified), and says EHLO again; -A then authenticates each
 *	session with AUTH PLAIN before its first message, as a mail client
 *	submitting on port 587 does. Each new session is a full handshake
 *	unless -R, which offers the last session (ticket) the server gave,
 *	as a client that resumes does. -b binds each connection to the
 *	source address (so that a server's exemptions for 127.0.0.1 do not
 *	apply). With -T the summary also says tls_handshakes=, tls_resumed=
 *	and tls13=: handshakes done (a few more than messages: sessions
 *	opened near the end find none left and quit), how many the server
 *	resumed, and how many were TLS 1.3.
 *
 *	-I idle opens that many sessions, says EHLO on each, prints
 *	"idle open=N" and holds them for -w seconds (default 30), then
 *	quits.
 * DIAGNOSTICS
 *	Exit status 0 when every message got a 2xx reply (every idle
 *	session opened), 1 otherwise; the first few failures are printed
 *	to stderr with the server's reply.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>

#define IN_MAX		16384
#define CMD_MAX		65536
#define HDR_MAX		1024

enum kmode { K_UNIQUE, K_REPLAY, K_NONE };

enum state {
	S_CONNECT, S_GREETING, S_EHLO, S_MAIL, S_RCPT, S_DATA, S_DOT,
	S_PIPE, S_RSET, S_QUIT, S_IDLE, S_STARTTLS, S_HANDSHAKE, S_EHLO_TLS, S_AUTH,
	S_CLOSED
};

struct conn {
	int fd;
	SSL *ssl;		/* after STARTTLS, or NULL */
	enum state state;
	char in[IN_MAX];
	size_t in_len;
	/* pending output: cmd, then hdr, then the shared body */
	char cmd[CMD_MAX];
	size_t cmd_len;
	char hdr[HDR_MAX];
	size_t hdr_len;
	struct iovec iov[3];
	int iov_n;
	int want_out;		/* EPOLLOUT registered */
	int dot_pending;	/* this write ends with the final dot */
	long idx;		/* message in flight, or -1 */
	int rcpt_i;		/* RCPTs sent / replies seen */
	int replies_due;	/* pipelined replies still to read */
	int rcpt_ok;
	int in_session;		/* messages done in this session */
	double t_dot;
};

/* settings */
static const char *host = "127.0.0.1";
static int port;
static int n_conns = 1;
static long n_msgs = 1000;
static int per_session = 1;
static long msg_size = 2000;
static int n_rcpts = 1;
static enum kmode kmode = K_UNIQUE;
static char prefix[128];
static long pool = 1000;
static long offset;
static int key_header;
static int pipelining;
static int n_idle;
static double idle_secs = 30;
static double deadline_secs = 600;
static int use_tls;
static int resume;
static char *auth_plain;	/* "AUTH PLAIN <base64>\r\n", or NULL */
static struct sockaddr_in src_addr;
static int bind_src;

/* state */
static int epfd;
static char *body;		/* shared: filler lines, then ".\r\n" */
static size_t body_len;		/* including the dot line */
static long next_msg;		/* next message index to start */
static long n_done, n_ok, n_dup, n_fail, n_bytes;
static long n_open_idle, n_errors;
static double *lat;		/* per finished message, ms */
static long n_lat;
static double t_start, t_last;
static int failures_shown;
static struct sockaddr_in addr;
static SSL_CTX *tls_ctx;
static SSL_SESSION *last_session;	/* -R: offered on the next handshake */
static long n_handshakes, n_resumed, n_tls13;

/* now - monotonic seconds */
static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* die - report and exit */
static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("load: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(2);
}

/* show_failure - the first few failures, with the reply */
static void show_failure(struct conn *c, const char *what, const char *reply)
{
	if (failures_shown++ < 5)
		fprintf(stderr, "load: msg %ld: %s: %.200s\n", c->idx, what,
			reply ? reply : strerror(errno));
}

/* ep_mod - set the epoll interest of a connection */
static void ep_mod(struct conn *c, int out)
{
	struct epoll_event ev = { .events = EPOLLIN | (out ? EPOLLOUT : 0), .data.ptr = c };

	if (epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0)
		die("epoll_ctl: %s", strerror(errno));
	c->want_out = out;
}

static void conn_start(struct conn *c);
static void conn_close(struct conn *c, int failed);
static int send_cmd(struct conn *c, int with_message);
static void cmdf(struct conn *c, const char *fmt, ...);
static int tls_handshake(struct conn *c);

/* tls_write - SSL_write of the first pending piece; as write(2): -1 and EAGAIN to wait */
static ssize_t tls_write(struct conn *c)
{
	int n = SSL_write(c->ssl, c->iov[0].iov_base, (int) c->iov[0].iov_len);

	if (n > 0)
		return n;
	switch (SSL_get_error(c->ssl, n)) {
	case SSL_ERROR_WANT_WRITE:
	case SSL_ERROR_WANT_READ:
		errno = EAGAIN;
		return -1;
	default:
		errno = EPROTO;
		return -1;
	}
}

/* tls_read - SSL_read; as read(2): -1 and EAGAIN to wait, 0 at the end */
static ssize_t tls_read(struct conn *c, char *buf, size_t len)
{
	int n = SSL_read(c->ssl, buf, (int) len);

	if (n > 0)
		return n;
	switch (SSL_get_error(c->ssl, n)) {
	case SSL_ERROR_WANT_READ:
	case SSL_ERROR_WANT_WRITE:
		errno = EAGAIN;
		return -1;
	case SSL_ERROR_ZERO_RETURN:
		return 0;
	default:
		errno = EPROTO;
		return -1;
	}
}

/* new_session - -R: keep the newest session the server issued */
static int new_session(SSL *ssl, SSL_SESSION *sess)
{
	(void) ssl;
	if (last_session)
		SSL_SESSION_free(last_session);
	last_session = sess;
	return 1;		/* the reference is ours */
}

/* tls_step - go on with the handshake; 0 done, 1 wait, -1 failed */
static int tls_step(struct conn *c)
{
	int rc = SSL_connect(c->ssl);

	if (rc == 1) {
		n_handshakes++;
		if (SSL_session_reused(c->ssl))
			n_resumed++;
		if (SSL_version(c->ssl) == TLS1_3_VERSION)
			n_tls13++;
		return 0;
	}
	switch (SSL_get_error(c->ssl, rc)) {
	case SSL_ERROR_WANT_READ:
		if (c->want_out)
			ep_mod(c, 0);
		return 1;
	case SSL_ERROR_WANT_WRITE:
		if (!c->want_out)
			ep_mod(c, 1);
		return 1;
	default:
		if (failures_shown++ < 5) {
			fprintf(stderr, "load: TLS handshake failed: ");
			ERR_print_errors_fp(stderr);
			fputc('\n', stderr);
		}
		return -1;
	}
}

/* tls_start - the server said 220 to STARTTLS: begin the handshake */
static int tls_start(struct conn *c)
{
	if ((c->ssl = SSL_new(tls_ctx)) == NULL || SSL_set_fd(c->ssl, c->fd) != 1)
		die("SSL_new failed");
	if (resume && last_session)
		SSL_set_session(c->ssl, last_session);
	c->state = S_HANDSHAKE;
	return tls_handshake(c);
}

/* tls_handshake - one step of the handshake; when done, EHLO again */
static int tls_handshake(struct conn *c)
{
	int rc = tls_step(c);

	if (rc != 0)
		return rc < 0 ? -1 : 0;
	cmdf(c, "EHLO load.test\r\n");
	c->state = S_EHLO_TLS;
	return send_cmd(c, 0);
}

/* flush_out - write what is pending; 0 when done, 1 when it must wait, -1 on error */
static int flush_out(struct conn *c)
{
	while (c->iov_n > 0) {
		ssize_t n = c->ssl ? tls_write(c) : writev(c->fd, c->iov, c->iov_n);

		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR) {
				if (!c->want_out)
					ep_mod(c, 1);
				return 1;
			}
			return -1;
		}
		while (n > 0 && c->iov_n > 0) {
			if ((size_t) n >= c->iov[0].iov_len) {
				n -= (ssize_t) c->iov[0].iov_len;
				memmove(c->iov, c->iov + 1, (size_t) (--c->iov_n) * sizeof(c->iov[0]));
			} else {
				c->iov[0].iov_base = (char *) c->iov[0].iov_base + n;
				c->iov[0].iov_len -= (size_t) n;
				n = 0;
			}
		}
	}
	if (c->dot_pending) {
		c->dot_pending = 0;
		c->t_dot = now();
	}
	if (c->want_out)
		ep_mod(c, 0);
	return 0;
}

/* send_cmd - queue command text (and, with data, the message) and write */
static int send_cmd(struct conn *c, int with_message)
{
	c->iov_n = 0;
	if (c->cmd_len) {
		c->iov[c->iov_n].iov_base = c->cmd;
		c->iov[c->iov_n++].iov_len = c->cmd_len;
	}
	if (with_message) {
		c->iov[c->iov_n].iov_base = c->hdr;
		c->iov[c->iov_n++].iov_len = c->hdr_len;
		c->iov[c->iov_n].iov_base = body;
		c->iov[c->iov_n++].iov_len = body_len;
		c->dot_pending = 1;
	}
	c->cmd_len = 0;
	return flush_out(c);
}

/* cmdf - append a formatted command line */
static void cmdf(struct conn *c, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(c->cmd + c->cmd_len, sizeof(c->cmd) - c->cmd_len, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t) n >= sizeof(c->cmd) - c->cmd_len)
		die("command buffer overflow");
	c->cmd_len += (size_t) n;
}

/* key_of - the key of message idx, or NULL */
static const char *key_of(long idx, char *buf, size_t len)
{
	long k;

	if (kmode == K_NONE)
		return NULL;
	k = offset + (kmode == K_REPLAY ? idx % pool : idx);
	snprintf(buf, len, "%s-%ld", prefix, k);
	return buf;
}

/* build_header - the header block of message idx */
static void build_header(struct conn *c)
{
	char key[200];
	const char *k = key_of(c->idx, key, sizeof(key));
	int n;

	n = snprintf(c->hdr, sizeof(c->hdr),
		     "From: <load@load.test>\r\nTo: <rcpt0@example.com>\r\n"
		     "Subject: load %ld\r\nDate: Mon, 01 Jan 2024 00:00:00 +0000\r\n"
		     "%s%s%s%s%s%s"
		     "MIME-Version: 1.0\r\n\r\n", c->idx,
		     k ? "Message-ID: <" : "", k ? k : "", k ? "@load.test>\r\n" : "",
		     k && key_header ? "X-Idempotency-Key: " : "",
		     k && key_header ? k : "", k && key_header ? "\r\n" : "");
	if (n < 0 || (size_t) n >= sizeof(c->hdr))
		die("header overflow");
	c->hdr_len = (size_t) n;
}

/* next_message - start the next message on this session, or QUIT */
static int next_message(struct conn *c)
{
	int i;

	if (next_msg >= n_msgs || (per_session > 0 && c->in_session >= per_session)) {
		c->idx = -1;
		cmdf(c, "QUIT\r\n");
		c->state = S_QUIT;
		return send_cmd(c, 0);
	}
	c->idx = next_msg++;
	c->rcpt_i = c->rcpt_ok = 0;
	build_header(c);
	cmdf(c, "MAIL FROM:<load@load.test>\r\n");
	if (!pipelining) {
		c->state = S_MAIL;
		return send_cmd(c, 0);
	}
	for (i = 0; i < n_rcpts; i++)
		cmdf(c, "RCPT TO:<rcpt%d@example.com>\r\n", i);
	cmdf(c, "DATA\r\n");
	c->replies_due = n_rcpts + 2;
	c->state = S_PIPE;
	return send_cmd(c, 0);
}

/* message_done - account for the reply to a final dot */
static void message_done(struct conn *c, int code, const char *text)
{
	double t = now();

	n_done++;
	if (code >= 200 && code < 300) {
		n_ok++;
		n_bytes += (long) (c->hdr_len + body_len - 3);
		if (strstr(text, "duplicate"))
			n_dup++;
		lat[n_lat++] = (t - c->t_dot) * 1000.0;
	} else {
		n_fail++;
		show_failure(c, "final dot", text);
	}
	t_last = t;
	c->in_session++;
	c->idx = -1;
}

/* on_reply - advance the session with one complete reply */
static int on_reply(struct conn *c, int code, const char *text)
{
	switch (c->state) {
	case S_GREETING:
		if (code != 220) {
			show_failure(c, "greeting", text);
			return -1;
		}
		cmdf(c, "EHLO load.test\r\n");
		c->state = S_EHLO;
		return send_cmd(c, 0);
	case S_EHLO:
		if (code != 250) {
			show_failure(c, "EHLO", text);
			return -1;
		}
		if (use_tls) {
			cmdf(c, "STARTTLS\r\n");
			c->state = S_STARTTLS;
			return send_cmd(c, 0);
		}
		if (n_idle) {
			c->state = S_IDLE;
			n_open_idle++;
			return 0;
		}
		return next_message(c);
	case S_STARTTLS:
		if (code != 220) {
			show_failure(c, "STARTTLS", text);
			return -1;
		}
		return tls_start(c);
	case S_EHLO_TLS:
		if (code != 250) {
			show_failure(c, "EHLO after STARTTLS", text);
			return -1;
		}
		if (auth_plain) {
			cmdf(c, "%s", auth_plain);
			c->state = S_AUTH;
			return send_cmd(c, 0);
		}
		return next_message(c);
	case S_AUTH:
		if (code != 235) {
			show_failure(c, "AUTH", text);
			return -1;
		}
		return next_message(c);
	case S_MAIL:
		if (code != 250) {
			show_failure(c, "MAIL", text);
			goto reset;
		}
		cmdf(c, "RCPT TO:<rcpt0@example.com>\r\n");
		c->rcpt_i = 1;
		c->state = S_RCPT;
		return send_cmd(c, 0);
	case S_RCPT:
		if (code == 250 || code == 251)
			c->rcpt_ok++;
		if (c->rcpt_i < n_rcpts) {
			cmdf(c, "RCPT TO:<rcpt%d@example.com>\r\n", c->rcpt_i++);
			return send_cmd(c, 0);
		}
		if (c->rcpt_ok == 0) {
			show_failure(c, "RCPT", text);
			goto reset;
		}
		cmdf(c, "DATA\r\n");
		c->state = S_DATA;
		return send_cmd(c, 0);
	case S_PIPE:
		c->replies_due--;
		if (c->replies_due == n_rcpts + 1) {		/* MAIL */
			if (code != 250)
				show_failure(c, "MAIL", text);
			return 0;
		}
		if (c->replies_due > 0) {			/* RCPT */
			if (code == 250 || code == 251)
				c->rcpt_ok++;
			return 0;
		}
		c->state = S_DATA;
		/* FALLTHROUGH */
	case S_DATA:
		if (code != 354) {
			show_failure(c, "DATA", text);
			goto reset;
		}
		c->state = S_DOT;
		return send_cmd(c, 1);
	case S_DOT:
		message_done(c, code, text);
		return next_message(c);
	case S_RSET:
		return next_message(c);
	case S_QUIT:
		return -2;		/* done: close quietly */
	case S_IDLE:
		return -1;		/* unsolicited (e.g. 421 at timeout) */
	default:
		return -1;
	}
reset:
	n_done++;
	n_fail++;
	c->in_session++;
	c->idx = -1;
	cmdf(c, "RSET\r\n");
	c->state = S_RSET;
	return send_cmd(c, 0);
}

/* on_readable - read and handle every complete reply */
static int on_readable(struct conn *c)
{
	for (;;) {
		size_t room = sizeof(c->in) - 1 - c->in_len;
		ssize_t n;
		char *p, *line, *end;

		if (c->state == S_HANDSHAKE)
			return 0;	/* the handshake reads for itself */
		n = c->ssl ? tls_read(c, c->in + c->in_len, room) : read(c->fd, c->in + c->in_len, room);

		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return 0;
			return -1;
		}
		if (n == 0)
			return c->state == S_QUIT ? -2 : -1;
		c->in_len += (size_t) n;
		c->in[c->in_len] = 0;
		/* complete replies: lines until one whose 4th char is not '-' */
		line = c->in;
		while ((end = strstr(line, "\r\n")) != NULL) {
			int last = end - line < 4 || line[3] != '-';
			int rc;

			if (!last) {
				line = end + 2;
				continue;
			}
			*end = 0;
			p = c->in;	/* the reply starts at the buffer start */
			rc = on_reply(c, atoi(p), line);
			line = end + 2;
			memmove(c->in, line, c->in_len - (size_t) (line - c->in) + 1);
			c->in_len -= (size_t) (line - c->in);
			line = c->in;
			if (rc < 0)
				return rc;
		}
		if (c->in_len >= sizeof(c->in) - 1)
			return -1;	/* a reply longer than the buffer */
	}
}

/* conn_start - connect a session in this slot */
static void conn_start(struct conn *c)
{
	struct epoll_event ev;
	int one = 1;

	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		die("socket: %s", strerror(errno));
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (bind_src && bind(c->fd, (struct sockaddr *) &src_addr, sizeof(src_addr)) < 0)
		die("bind: %s", strerror(errno));
	c->ssl = NULL;
	c->in_len = c->cmd_len = 0;
	c->iov_n = 0;
	c->dot_pending = 0;
	c->in_session = 0;
	c->idx = -1;
	c->state = S_CONNECT;
	ev.events = EPOLLOUT;
	ev.data.ptr = c;
	c->want_out = 1;
	if (connect(c->fd, (struct sockaddr *) &addr, sizeof(addr)) < 0 && errno != EINPROGRESS) {
		n_errors++;
		close(c->fd);
		c->fd = -1;
		c->state = S_CLOSED;
		return;
	}
	if (epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0)
		die("epoll_ctl add: %s", strerror(errno));
}

/* conn_close - end a session; start another while messages remain */
static void conn_close(struct conn *c, int failed)
{
	if (failed) {
		n_errors++;
		if (c->idx >= 0) {	/* the message in flight is lost */
			n_done++;
			n_fail++;
			show_failure(c, "connection", NULL);
		}
		if (c->state == S_IDLE)
			n_open_idle--;
	}
	if (c->ssl) {
		if (!failed)
			SSL_shutdown(c->ssl);	/* close_notify, as a client's close sends */
		SSL_free(c->ssl);
		c->ssl = NULL;
	}
	close(c->fd);
	c->fd = -1;
	c->state = S_CLOSED;
	if (!n_idle && next_msg < n_msgs && n_errors < 1000)
		conn_start(c);
}

static void usage(void)
{
	die("usage: load [-c conns] [-n msgs] [-C per_session] [-s size] [-r rcpts]"
	    " [-k unique|replay|none] [-K prefix] [-u pool] [-o offset] [-H] [-P] [-t secs]"
	    " [-b source] [-T [-R]] [-A user:pass] host:port | load -I idle [-w secs] host:port");
}

/* set_auth - the AUTH PLAIN command for "user:pass" */
static void set_auth(const char *arg)
{
	const char *colon = strchr(arg, ':');
	unsigned char raw[600];
	size_t ul, pl;

	if (colon == NULL || (ul = (size_t) (colon - arg)) + (pl = strlen(colon + 1)) + 2 > sizeof(raw))
		usage();
	raw[0] = 0;
	memcpy(raw + 1, arg, ul);
	raw[1 + ul] = 0;
	memcpy(raw + 2 + ul, colon + 1, pl);
	auth_plain = malloc(sizeof(raw) * 2 + 16);
	if (auth_plain == NULL)
		die("out of memory");
	strcpy(auth_plain, "AUTH PLAIN ");
	EVP_EncodeBlock((unsigned char *) auth_plain + 11, raw, (int) (ul + pl + 2));
	strcat(auth_plain, "\r\n");
}

/* tls_setup - the client context: any certificate taken, as a test client */
static void tls_setup(void)
{
	if ((tls_ctx = SSL_CTX_new(TLS_client_method())) == NULL)
		die("SSL_CTX_new failed");
	SSL_CTX_set_verify(tls_ctx, SSL_VERIFY_NONE, NULL);
	SSL_CTX_set_mode(tls_ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	if (resume) {
		SSL_CTX_set_session_cache_mode(tls_ctx, SSL_SESS_CACHE_CLIENT
					       | SSL_SESS_CACHE_NO_INTERNAL_STORE);
		SSL_CTX_sess_set_new_cb(tls_ctx, new_session);
	} else {
		SSL_CTX_set_session_cache_mode(tls_ctx, SSL_SESS_CACHE_OFF);
	}
}

/* make_body - filler lines so that headers plus body come to msg_size */
static void make_body(void)
{
	struct conn probe = { .idx = 0 };
	long want, i = 0;

	build_header(&probe);
	want = msg_size - (long) probe.hdr_len;
	if (want < 2)
		want = 2;
	body = malloc((size_t) want + 80 + 4);
	if (body == NULL)
		die("out of memory");
	while (i < want) {
		long line = want - i < 78 ? want - i : 78;

		if (line < 2)
			line = 2;
		memset(body + i, 'X', (size_t) line - 2);
		if (line > 2)
			body[i] = (char) ('a' + (i / 78) % 26);
		memcpy(body + i + line - 2, "\r\n", 2);
		i += line;
	}
	memcpy(body + i, ".\r\n", 3);
	body_len = (size_t) i + 3;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *) a, y = *(const double *) b;

	return x < y ? -1 : x > y;
}

static double pct(double p)
{
	size_t i;

	if (n_lat == 0)
		return 0;
	i = (size_t) (p / 100.0 * (double) (n_lat - 1) + 0.5);
	return lat[i];
}

int main(int argc, char **argv)
{
	struct rlimit rl;
	struct conn *conns;
	struct epoll_event evs[256];
	double t_end_idle = 0, t_deadline;
	int opt, i, slots;
	char *colon;

	snprintf(prefix, sizeof(prefix), "load-%ld-%d", (long) time(NULL), (int) getpid());
	while ((opt = getopt(argc, argv, "c:n:C:s:r:k:K:u:o:HPI:w:t:b:TRA:")) != -1) {
		switch (opt) {
		case 'c': n_conns = atoi(optarg); break;
		case 'n': n_msgs = atol(optarg); break;
		case 'C': per_session = atoi(optarg); break;
		case 's': msg_size = atol(optarg); break;
		case 'r': n_rcpts = atoi(optarg); break;
		case 'k':
			if (strcmp(optarg, "unique") == 0) kmode = K_UNIQUE;
			else if (strcmp(optarg, "replay") == 0) kmode = K_REPLAY;
			else if (strcmp(optarg, "none") == 0) kmode = K_NONE;
			else usage();
			break;
		case 'K': snprintf(prefix, sizeof(prefix), "%s", optarg); break;
		case 'u': pool = atol(optarg); break;
		case 'o': offset = atol(optarg); break;
		case 'H': key_header = 1; break;
		case 'P': pipelining = 1; break;
		case 'I': n_idle = atoi(optarg); break;
		case 'w': idle_secs = atof(optarg); break;
		case 't': deadline_secs = atof(optarg); break;
		case 'b':
			bind_src = 1;
			src_addr.sin_family = AF_INET;
			if (inet_pton(AF_INET, optarg, &src_addr.sin_addr) != 1)
				die("not an IPv4 address: %s", optarg);
			break;
		case 'T': use_tls = 1; break;
		case 'R': resume = 1; break;
		case 'A': set_auth(optarg); break;
		default: usage();
		}
	}
	if (optind != argc - 1 || n_conns < 1 || n_msgs < 0 || n_rcpts < 1 || pool < 1
	    || n_rcpts > 500 || ((auth_plain || resume) && !use_tls))
		usage();
	if ((colon = strrchr(argv[optind], ':')) == NULL)
		usage();
	*colon = 0;
	if (*argv[optind])
		host = argv[optind];
	port = atoi(colon + 1);
	memset(&addr, 0, sizeof(addr));
	addr.sin_family = AF_INET;
	addr.sin_port = htons((uint16_t) port);
	if (inet_pton(AF_INET, host, &addr.sin_addr) != 1)
		die("not an IPv4 address: %s", host);

	slots = n_idle ? n_idle : (n_msgs < n_conns ? (int) (n_msgs ? n_msgs : 1) : n_conns);
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t) slots + 64) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (use_tls)
		tls_setup();
	make_body();
	lat = malloc(sizeof(*lat) * (size_t) (n_msgs + 1));
	conns = calloc((size_t) slots, sizeof(*conns));
	if (lat == NULL || conns == NULL)
		die("out of memory");
	if ((epfd = epoll_create1(EPOLL_CLOEXEC)) < 0)
		die("epoll_create1: %s", strerror(errno));

	t_start = t_last = now();
	t_deadline = t_start + deadline_secs;
	for (i = 0; i < slots; i++)
		conn_start(&conns[i]);
	for (;;) {
		int n, live = 0;

		for (i = 0; i < slots; i++)
			live += conns[i].state != S_CLOSED;
		if (live == 0)
			break;
		if (n_idle && t_end_idle == 0 && n_open_idle + n_errors >= n_idle) {
			printf("idle open=%ld failed=%ld\n", n_open_idle, n_errors);
			fflush(stdout);
			t_end_idle = now() + idle_secs;
		}
		if (t_end_idle && now() >= t_end_idle)
			break;
		if (now() >= t_deadline) {
			fprintf(stderr, "load: deadline of %.0fs reached\n", deadline_secs);
			break;
		}
		n = epoll_wait(epfd, evs, 256, 200);
		for (i = 0; i < n; i++) {
			struct conn *c = evs[i].data.ptr;
			int rc = 0;

			if (c->state == S_CLOSED)
				continue;
			if (c->state == S_HANDSHAKE) {
				rc = tls_handshake(c);
				if (rc < 0)
					conn_close(c, 1);
				continue;
			}
			if (c->state == S_CONNECT) {
				int err = 0;
				socklen_t len = sizeof(err);

				getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
				if (err) {
					errno = err;
					conn_close(c, 1);
					continue;
				}
				c->state = S_GREETING;
				ep_mod(c, 0);
				continue;
			}
			if ((evs[i].events & EPOLLOUT) || (c->ssl && c->iov_n))
				rc = flush_out(c);
			if (rc >= 0 && (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
				rc = on_readable(c);
			if (rc == -2)
				conn_close(c, 0);
			else if (rc < 0)
				conn_close(c, 1);
		}
	}
	if (n_idle) {
		printf("idle held=%ld failed=%ld\n", n_open_idle, n_errors);
		return n_open_idle == n_idle ? 0 : 1;
	}
	{
		double secs = t_last - t_start;

		if (secs <= 0)
			secs = 1e-9;
		qsort(lat, (size_t) n_lat, sizeof(*lat), cmp_double);
		printf("msgs=%ld ok=%ld dup=%ld fail=%ld secs=%.3f msgs_per_s=%.1f mb_per_s=%.2f"
		       " p50_ms=%.3f p90_ms=%.3f p99_ms=%.3f max_ms=%.3f",
		       n_msgs, n_ok, n_dup, n_msgs - n_ok, secs, n_ok / secs,
		       n_bytes / 1e6 / secs, pct(50), pct(90), pct(99),
		       n_lat ? lat[n_lat - 1] : 0.0);
		if (use_tls)
			printf(" tls_handshakes=%ld tls_resumed=%ld tls13=%ld", n_handshakes, n_resumed,
			       n_tls13);
		printf("\n");
	}
	return n_ok == n_msgs ? 0 : 1;
}
