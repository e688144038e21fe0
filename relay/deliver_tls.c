/*
 * NAME
 *	deliver_tls 3
 * SUMMARY
 *	upstream TLS: client contexts and the TLS bridge
 * DESCRIPTION
 *	See deliver_tls.h for what each part is for. Notes on why:
 *
 *	libESMTP 1.1.0's own STARTTLS is not used. It makes one process-
 *	wide context from ~/.config/libesmtp (or ~/.authenticate) and frees
 *	it with the first session that used it; it keeps bytes the server
 *	pipelined behind its 220 to STARTTLS and reads them as if they had
 *	come over TLS (fixed in 1.1.1); and when a TLS 1.3 server's session
 *	tickets arrive before libesmtp has flushed its next command, it
 *	polls for reading first and waits out the whole timeout (seen with
 *	QUIT after a refused certificate). So the bridge does TLS for both
 *	"starttls" and "implicit", and libesmtp only ever sees plain text
 *	on a loopback socket.
 *
 *	Contexts are made per upstream session and hold the host name in
 *	their verify parameters, so OpenSSL checks the name (RFC 6125, IP
 *	addresses included) as part of the chain, and SSL_VERIFY_PEER fails
 *	the handshake before any SMTP goes over it. SNI is set per SSL
 *	from the same name.
 *
 *	The bridge does the TCP connect (with a timeout, which libesmtp
 *	lacks), the pre-TLS part of STARTTLS and the handshake in the
 *	delivery thread, so that each failure is known with its reason
 *	before libesmtp starts; then a thread copies plain bytes on a
 *	loopback socket to TLS and back. Another local user could connect
 *	to that port first; the thread serves only a peer whose socket is
 *	open in this process (found through /proc/self/fd), and refuses
 *	others.
 * DIAGNOSTICS
 *	Returned as text for the caller's log line and deferral reason.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "../util/buf.h"
#include "../util/log.h"
#include "deliver_tls.h"

#define BRIDGE_BUF	16384

/* ---------------------------------------------------------------- contexts */

/* what a context knows of the connection it is for (SSL_CTX ex_data) */
struct tls_peer {
	char host[256];			/* configured name or address */
	int verify;
	int is_ip;			/* no SNI for an address (RFC 6066) */
};

static int tls_peer_index = -1;
static pthread_once_t tls_peer_once = PTHREAD_ONCE_INIT;

/* tls_peer_free - ex_data destructor: the context is going away */
static void tls_peer_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl,
			  void *argp)
{
	(void) parent, (void) ad, (void) idx, (void) argl, (void) argp;
	free(ptr);
}

/* tls_peer_init - once: the ex_data slot */
static void tls_peer_init(void)
{
	tls_peer_index = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, tls_peer_free);
}

/* tls_peer_of - a context's tls_peer, NULL if not ours */
static struct tls_peer *tls_peer_of(const SSL_CTX *ctx)
{
	return tls_peer_index < 0 ? NULL : SSL_CTX_get_ex_data(ctx, tls_peer_index);
}

/* tls_err - the oldest queued OpenSSL error as text, queue cleared */
static void tls_err(char *out, size_t outlen, const char *what)
{
	unsigned long e = ERR_get_error();
	char buf[200];

	if (e)
		ERR_error_string_n(e, buf, sizeof(buf));
	else
		snprintf(buf, sizeof(buf), "%s", errno ? strerror(errno) : "unknown error");
	ERR_clear_error();
	snprintf(out, outlen, "%s: %s", what, buf);
}

/* deliver_tls_ctx_new - a client context; verify 0: accept any certificate */
SSL_CTX *deliver_tls_ctx_new(int verify, char *err, size_t errlen)
{
	struct tls_peer *p;
	SSL_CTX *ctx;

	pthread_once(&tls_peer_once, tls_peer_init);
	ERR_clear_error();
	if (tls_peer_index < 0 || (ctx = SSL_CTX_new(TLS_client_method())) == NULL) {
		tls_err(err, errlen, "cannot create a TLS context");
		return NULL;
	}
	p = xcalloc(1, sizeof(*p));
	p->verify = verify;
	if (!SSL_CTX_set_ex_data(ctx, tls_peer_index, p)) {
		free(p);
		tls_err(err, errlen, "cannot create a TLS context");
		SSL_CTX_free(ctx);
		return NULL;
	}
	(void) SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
	SSL_CTX_set_verify(ctx, verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
	if (verify && !SSL_CTX_set_default_verify_paths(ctx)) {
		/* no CA store: every certificate will be refused, with a reason */
		tls_err(err, errlen, "cannot load the system CA store");
		msg_warn("%s", err);
	}
	ERR_clear_error();
	return ctx;
}

/* deliver_tls_ctx_host - the name the next connection checks and sends (SNI) */
int deliver_tls_ctx_host(SSL_CTX *ctx, const char *host)
{
	struct tls_peer *p = tls_peer_of(ctx);
	X509_VERIFY_PARAM *param = SSL_CTX_get0_param(ctx);
	unsigned char ip[16];

	if (p == NULL || strlen(host) >= sizeof(p->host))
		return -1;
	snprintf(p->host, sizeof(p->host), "%s", host);
	p->is_ip = inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1;
	if (!p->verify)
		return 0;
	/* set1_host(NULL) and set1_ip(NULL) clear what the previous host left */
	if (!X509_VERIFY_PARAM_set1_host(param, NULL, 0)
	    || !X509_VERIFY_PARAM_set1_ip(param, NULL, 0))
		return -1;
	X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
	if (p->is_ip ? !X509_VERIFY_PARAM_set1_ip_asc(param, host)
	    : !X509_VERIFY_PARAM_set1_host(param, host, 0))
		return -1;
	return 0;
}

/* deliver_tls_describe - "TLSv1.3 with cipher X (256/256 bits)" */
void deliver_tls_describe(const SSL *ssl, char *out, size_t outlen)
{
	const SSL_CIPHER *c = SSL_get_current_cipher(ssl);
	int alg = 0, bits = c ? SSL_CIPHER_get_bits(c, &alg) : 0;

	snprintf(out, outlen, "%s with cipher %s (%d/%d bits)", SSL_get_version(ssl),
		 c ? SSL_CIPHER_get_name(c) : "none", bits, alg);
}

/* ---------------------------------------------------------------- bridge */

#define SMTP_REPLY_MAX	4096		/* one whole reply before TLS */

struct deliver_tls_bridge {
	pthread_t thread;
	int running;			/* thread started, not joined */
	int lfd;			/* loopback listener; owned */
	int tfd;			/* TCP to the upstream; owned */
	SSL *ssl;			/* over tfd; owned */
	int stop[2];			/* pipe: a byte asks the thread to end; owned */
	atomic_int cut;			/* forward nothing more from libesmtp */
	struct sockaddr_in laddr;	/* the listener's address */
	int timeout_ms;
	char address[32];		/* "127.0.0.1:PORT" */
	char tls[160];			/* deliver_tls_describe() */
	char greeting[SMTP_REPLY_MAX];	/* STARTTLS: the server's 220, for libesmtp */
	size_t greeting_len;
};

/* ms_left - milliseconds until deadline (CLOCK_MONOTONIC), at least 0 */
static int ms_left(const struct timespec *deadline)
{
	struct timespec now;
	long long ms;

	clock_gettime(CLOCK_MONOTONIC, &now);
	ms = (long long) (deadline->tv_sec - now.tv_sec) * 1000
	    + (deadline->tv_nsec - now.tv_nsec) / 1000000;
	return ms < 0 ? 0 : ms > 0x7fffffff ? 0x7fffffff : (int) ms;
}

/* wait_fd - poll one descriptor until events or the deadline; 1 ready, 0 timeout */
static int wait_fd(int fd, short events, const struct timespec *deadline)
{
	struct pollfd p = { .fd = fd, .events = events };
	int n;

	while ((n = poll(&p, 1, ms_left(deadline))) < 0 && errno == EINTR)
		continue;
	return n > 0;
}

/* bridge_connect - non-blocking TCP connect within the deadline; fd or -1 */
static int bridge_connect(const struct sockaddr *sa, socklen_t salen,
			  const struct timespec *deadline, char *why, size_t whylen)
{
	int fd, err = 0;
	socklen_t len = sizeof(err);

	if ((fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0) {
		snprintf(why, whylen, "socket: %s", strerror(errno));
		return -1;
	}
	if (connect(fd, sa, salen) < 0) {
		if (errno != EINPROGRESS)
			err = errno;
		else if (!wait_fd(fd, POLLOUT, deadline))
			err = ETIMEDOUT;
		else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
			err = errno;
	}
	if (err) {
		snprintf(why, whylen, "connect: %s", strerror(err));
		close(fd);
		return -1;
	}
	return fd;
}

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
		else if (!wait_fd(fd, POLLOUT, deadline))
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
		       struct deliver_tls_bridge *raw, char *why, size_t whylen)
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
			} else if (!wait_fd(fd, POLLIN, deadline)) {
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
 * bridge_starttls - the plain part of STARTTLS: greeting (kept for
 * libesmtp), EHLO, STARTTLS required, 220, and nothing after it
 */
static int bridge_starttls(struct deliver_tls_bridge *b, const char *helo,
			   const struct timespec *deadline, char *why, size_t whylen, char dsn[16])
{
	struct plain_in *in = xcalloc(1, sizeof(*in));
	char cmd[300], last[SMTP_REPLY_MAX], err[200];
	int code = -1, offered = 0, rc = -1;

	snprintf(dsn, 16, "4.4.2");
	if ((code = plain_reply(b->tfd, in, deadline, last, sizeof(last), NULL, b, err,
				sizeof(err))) < 0) {
		snprintf(why, whylen, "no greeting: %s", err);
		goto out;
	}
	if (code != 220) {
		snprintf(dsn, 16, "4.4.1");	/* as a refused connection: try the next */
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
		snprintf(dsn, 16, "4.7.4");
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
		snprintf(dsn, 16, code / 100 == 5 ? "4.7.4" : "4.7.0");
		snprintf(why, whylen, "STARTTLS refused: %.300s", last);
		goto out;
	}
	if (in->len > 0) {
		/* only the handshake may follow: anything else was injected before TLS */
		snprintf(dsn, 16, "4.7.0");
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

/* bridge_handshake - TLS client handshake on b->tfd within the deadline */
static int bridge_handshake(struct deliver_tls_bridge *b, SSL_CTX *ctx,
			    const struct timespec *deadline, char *why, size_t whylen,
			    char dsn[16])
{
	const struct tls_peer *p = tls_peer_of(ctx);
	long vr;
	int r, e;

	ERR_clear_error();
	snprintf(dsn, 16, "4.7.5");
	if ((b->ssl = SSL_new(ctx)) == NULL || !SSL_set_fd(b->ssl, b->tfd)
	    || (p && p->host[0] && !p->is_ip && !SSL_set_tlsext_host_name(b->ssl, p->host))) {
		tls_err(why, whylen, "cannot set up TLS");
		return -1;
	}
	while ((r = SSL_connect(b->ssl)) != 1) {
		e = SSL_get_error(b->ssl, r);
		if ((e == SSL_ERROR_WANT_READ && wait_fd(b->tfd, POLLIN, deadline))
		    || (e == SSL_ERROR_WANT_WRITE && wait_fd(b->tfd, POLLOUT, deadline)))
			continue;
		vr = SSL_get_verify_result(b->ssl);
		if (p && p->verify && vr != X509_V_OK) {
			snprintf(why, whylen, "server certificate not trusted: %s",
				 X509_verify_cert_error_string(vr));
			ERR_clear_error();
		} else if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
			snprintf(why, whylen, "TLS handshake timed out");
		} else {
			tls_err(why, whylen, "TLS handshake failed");
		}
		return -1;
	}
	if (p && p->verify && SSL_get0_peer_certificate(b->ssl) == NULL) {
		/* no certificate (anonymous cipher) leaves the verify result X509_V_OK */
		snprintf(why, whylen, "server certificate missing");
		return -1;
	}
	deliver_tls_describe(b->ssl, b->tls, sizeof(b->tls));
	return 0;
}

/* bridge_listen - a listener on an ephemeral loopback port */
static int bridge_listen(struct deliver_tls_bridge *b, char *why, size_t whylen)
{
	socklen_t len = sizeof(b->laddr);

	memset(&b->laddr, 0, sizeof(b->laddr));
	b->laddr.sin_family = AF_INET;
	b->laddr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if ((b->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0
	    || bind(b->lfd, (struct sockaddr *) &b->laddr, sizeof(b->laddr)) < 0
	    || listen(b->lfd, 4) < 0
	    || getsockname(b->lfd, (struct sockaddr *) &b->laddr, &len) < 0) {
		snprintf(why, whylen, "cannot listen on the loopback for the TLS bridge: %s",
			 strerror(errno));
		return -1;
	}
	snprintf(b->address, sizeof(b->address), "127.0.0.1:%u", ntohs(b->laddr.sin_port));
	return 0;
}

/* same_in - the same IPv4 address and port? */
static int same_in(const struct sockaddr_in *a, const struct sockaddr_in *b)
{
	return a->sin_family == AF_INET && b->sin_family == AF_INET
	    && a->sin_port == b->sin_port && a->sin_addr.s_addr == b->sin_addr.s_addr;
}

/* bridge_ours - is the peer of an accepted connection a socket of this process? */
static int bridge_ours(const struct deliver_tls_bridge *b, const struct sockaddr_in *peer)
{
	struct sockaddr_in local, remote;
	struct dirent *de;
	struct stat st;
	socklen_t len;
	DIR *dir;
	int fd, found = 0;
	char *end;

	if ((dir = opendir("/proc/self/fd")) == NULL) {
		msg_warn("TLS bridge %s: cannot tell who connected: /proc/self/fd: %s",
			 b->address, strerror(errno));
		return 0;
	}
	while (!found && (de = readdir(dir)) != NULL) {
		fd = (int) strtol(de->d_name, &end, 10);
		if (*end || end == de->d_name || fd == dirfd(dir))
			continue;
		if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
			continue;
		len = sizeof(local);
		if (getsockname(fd, (struct sockaddr *) &local, &len) < 0 || !same_in(&local, peer))
			continue;
		len = sizeof(remote);
		found = getpeername(fd, (struct sockaddr *) &remote, &len) == 0
		    && same_in(&remote, &b->laddr);
	}
	closedir(dir);
	return found;
}

/* bridge_accept - libesmtp's connection, or -1 (stopped, timed out) */
static int bridge_accept(struct deliver_tls_bridge *b)
{
	struct timespec deadline;
	struct pollfd p[2];
	struct sockaddr_in peer;
	socklen_t len;
	int cfd;

	clock_gettime(CLOCK_MONOTONIC, &deadline);
	deadline.tv_sec += b->timeout_ms / 1000 + 1;
	for (;;) {
		p[0] = (struct pollfd) { .fd = b->lfd, .events = POLLIN };
		p[1] = (struct pollfd) { .fd = b->stop[0], .events = POLLIN };
		if (poll(p, 2, ms_left(&deadline)) < 0 && errno != EINTR)
			return -1;
		if (p[1].revents || ms_left(&deadline) == 0)
			return -1;
		if (!(p[0].revents & POLLIN))
			continue;
		len = sizeof(peer);
		cfd = accept4(b->lfd, (struct sockaddr *) &peer, &len,
			      SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (cfd < 0)
			continue;
		if (bridge_ours(b, &peer))
			return cfd;
		msg_warn("TLS bridge %s: refused a connection from 127.0.0.1:%u,"
			 " which is not ours", b->address, ntohs(peer.sin_port));
		close(cfd);
	}
}

/* a direction of the copy: bytes waiting to be written */
struct pending {
	char buf[BRIDGE_BUF];
	size_t off, len;
};

/*
 * bridge_pump - copy between libesmtp (cfd, plain) and the upstream (TLS)
 * until either side ends, the bridge is cut, or nothing moves for the
 * timeout. Both descriptors are non-blocking; OpenSSL's WANT_READ and
 * WANT_WRITE say what to poll for.
 */
static void bridge_pump(struct deliver_tls_bridge *b, int cfd)
{
	struct pending *up = xmalloc(sizeof(*up)), *down = xmalloc(sizeof(*down));
	int client_eof = 0, server_eof = 0, moved, want_r, want_w, r, e;
	struct pollfd p[3];
	ssize_t n;

	up->len = up->off = down->len = down->off = 0;
	memcpy(down->buf, b->greeting, b->greeting_len);	/* STARTTLS: read already */
	down->len = b->greeting_len;
	for (;;) {
		moved = want_r = want_w = 0;
		if (atomic_load(&b->cut))
			break;
		if (up->len == 0 && !client_eof) {
			n = read(cfd, up->buf, sizeof(up->buf));
			if (n > 0 && atomic_load(&b->cut))
				break;		/* written after the cut: never forwarded */
			if (n > 0) {
				up->len = (size_t) n, up->off = 0, moved = 1;
			} else if (n == 0) {
				client_eof = 1;
			} else if (errno != EAGAIN && errno != EINTR) {
				break;
			}
		}
		if (up->len > 0) {
			r = SSL_write(b->ssl, up->buf + up->off, (int) (up->len - up->off));
			if (r > 0) {
				up->off += (size_t) r, moved = 1;
				if (up->off == up->len)
					up->len = up->off = 0;
			} else if ((e = SSL_get_error(b->ssl, r)) == SSL_ERROR_WANT_READ) {
				want_r = 1;
			} else if (e == SSL_ERROR_WANT_WRITE) {
				want_w = 1;
			} else {
				break;
			}
		}
		if (down->len == 0 && !server_eof) {
			r = SSL_read(b->ssl, down->buf, sizeof(down->buf));
			if (r > 0) {
				down->len = (size_t) r, down->off = 0, moved = 1;
			} else if ((e = SSL_get_error(b->ssl, r)) == SSL_ERROR_WANT_READ) {
				want_r = 1;
			} else if (e == SSL_ERROR_WANT_WRITE) {
				want_w = 1;
			} else {
				server_eof = 1;
			}
		}
		if (down->len > 0) {
			n = send(cfd, down->buf + down->off, down->len - down->off, MSG_NOSIGNAL);
			if (n > 0) {
				down->off += (size_t) n, moved = 1;
				if (down->off == down->len)
					down->len = down->off = 0;
			} else if (n < 0 && errno != EAGAIN && errno != EINTR) {
				break;
			}
		}
		if ((client_eof && up->len == 0) || (server_eof && down->len == 0))
			break;
		if (moved)
			continue;
		p[0].events = (short) ((up->len == 0 ? POLLIN : 0) | (down->len ? POLLOUT : 0));
		p[1].events = (short) ((want_r ? POLLIN : 0) | (want_w ? POLLOUT : 0));
		p[2].events = POLLIN;
		/* a side we wait for nothing from is left out: its hang-up would spin the loop */
		p[0].fd = p[0].events ? cfd : -1;
		p[1].fd = p[1].events ? b->tfd : -1;
		p[2].fd = b->stop[0];
		while ((r = poll(p, 3, b->timeout_ms)) < 0 && errno == EINTR)
			continue;
		if (r <= 0 || p[2].revents)
			break;
	}
	if (!atomic_load(&b->cut) && !server_eof)
		(void) SSL_shutdown(b->ssl);	/* close_notify, best effort */
	ERR_clear_error();
	free(up);
	free(down);
}

/* bridge_main - the bridge thread: accept libesmtp, then copy */
static void *bridge_main(void *arg)
{
	struct deliver_tls_bridge *b = arg;
	int cfd;

	if ((cfd = bridge_accept(b)) >= 0) {
		bridge_pump(b, cfd);
		close(cfd);
	}
	return NULL;
}

/* deliver_tls_bridge_open - connect, handshake, listen, start the thread */
struct deliver_tls_bridge *deliver_tls_bridge_open(SSL_CTX *ctx, const struct sockaddr *sa,
						   socklen_t salen, const char *helo,
						   int timeout_ms, char *why, size_t whylen,
						   char dsn[16])
{
	struct deliver_tls_bridge *b = xcalloc(1, sizeof(*b));
	struct timespec deadline;
	int err;

	b->lfd = b->tfd = b->stop[0] = b->stop[1] = -1;
	atomic_init(&b->cut, 0);
	b->timeout_ms = timeout_ms;
	snprintf(dsn, 16, "4.4.1");
	clock_gettime(CLOCK_MONOTONIC, &deadline);
	deadline.tv_sec += timeout_ms / 1000;
	deadline.tv_nsec += (long) (timeout_ms % 1000) * 1000000;
	if (deadline.tv_nsec >= 1000000000)
		deadline.tv_sec++, deadline.tv_nsec -= 1000000000;
	if ((b->tfd = bridge_connect(sa, salen, &deadline, why, whylen)) < 0
	    || (helo && bridge_starttls(b, helo, &deadline, why, whylen, dsn) < 0)
	    || bridge_handshake(b, ctx, &deadline, why, whylen, dsn) < 0)
		goto fail;
	snprintf(dsn, 16, "4.3.0");
	if (bridge_listen(b, why, whylen) < 0)
		goto fail;
	if (pipe2(b->stop, O_CLOEXEC | O_NONBLOCK) < 0) {
		snprintf(why, whylen, "pipe: %s", strerror(errno));
		goto fail;
	}
	if ((err = pthread_create(&b->thread, NULL, bridge_main, b)) != 0) {
		snprintf(why, whylen, "cannot start the TLS bridge: %s", strerror(err));
		goto fail;
	}
	b->running = 1;
	return b;

fail:
	deliver_tls_bridge_close(b);
	return NULL;
}

/* deliver_tls_bridge_address - where libesmtp connects: "127.0.0.1:PORT" */
const char *deliver_tls_bridge_address(const struct deliver_tls_bridge *b)
{
	return b->address;
}

/* deliver_tls_bridge_tls - the TLS connection's description */
const char *deliver_tls_bridge_tls(const struct deliver_tls_bridge *b)
{
	return b->tls;
}

/* deliver_tls_bridge_cut - forward nothing more from libesmtp; hang up */
void deliver_tls_bridge_cut(struct deliver_tls_bridge *b)
{
	atomic_store(&b->cut, 1);
	if (b->stop[1] >= 0)
		(void) write(b->stop[1], "x", 1);
}

/* deliver_tls_bridge_close - stop the thread, close everything; NULL-safe */
void deliver_tls_bridge_close(struct deliver_tls_bridge *b)
{
	if (b == NULL)
		return;
	if (b->running) {
		if (write(b->stop[1], "x", 1) < 0 && errno != EAGAIN)
			msg_warn("TLS bridge %s: cannot stop the thread: %s", b->address,
				 strerror(errno));
		pthread_join(b->thread, NULL);
	}
	SSL_free(b->ssl);
	if (b->tfd >= 0)
		close(b->tfd);
	if (b->lfd >= 0)
		close(b->lfd);
	if (b->stop[0] >= 0)
		close(b->stop[0]);
	if (b->stop[1] >= 0)
		close(b->stop[1]);
	ERR_clear_error();
	free(b);
}
