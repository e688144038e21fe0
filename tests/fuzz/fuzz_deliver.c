/*
 * fuzz_deliver - the real delivery client (deliver/esmtp: libesmtp 1.1.0,
 * the bridge, its filter and its gate) against an upstream scripted by the
 * input: replies canned or raw, reads, resets (SO_LINGER 0) and closes
 * at any point. One batch of one to three messages, of one to three
 * recipients each, per input, over a real loopback TCP connection to a
 * server thread of this process; the store is stubbed (deliver_mark and
 * the others below), and records what the client did.
 *
 * Input: byte 0: messages (bits 0-1), whether the mark of the second
 * message fails (bit 2, STORE_EAGAIN: no final dot), and whether it fails
 * only after a wait longer than upstream.timeout (bits 3-7 are 00001:
 * rare, for the fuzzer's pace) or upstream.tls is "starttls" (00010: the
 * bridge's plain STARTTLS dialogue, deliver_bridge_starttls.c, reads the
 * script; a handshake with it fails) or the messages carry DSN parameters
 * (00011: bytes 2 and 3 give the lengths of an ENVID, up to 100 octets of
 * what a client may send, 32-126, and of an ORCPT address, each octet
 * written as itself or as "+XX", the ORCPT up to its 500 octets; their
 * octets follow, then the script; every message has that ENVID, every
 * recipient that ORCPT) or the upstream group has a rate object, new
 * for the input (00100: what the real deliver_group_rate() gives once
 * upstream.rate is set, here with no limits, so that a reply that reads
 * as throttling, "4xx 4.7.0" or "rate" in it, or a greeting's 421, makes
 * the session cut and the batch postponed: 8e78f96's crash, a throttled
 * RCPT with more replies owed) or the upstream is implicit TLS with
 * upstream.user set (00101: the server thread does the handshake, with a
 * self-signed certificate made at start, tls_verify off, then runs the
 * script inside TLS, a READ waiting up to 300 ms, not 5; libesmtp's SASL
 * client logs in as it is offered, watched by the AUTH guard), byte 1: recipients of each message
 * (two bits each, bits 0-5), whether the messages are BODY=8BITMIME
 * (bit 6) and SMTPUTF8 with a UTF-8 Subject (bit 7: the filter adds those
 * parameters where offered). Then the server's script, one step per
 * byte (low 3 bits), some with an argument byte:
 *
 *   0 READ	read one line from the client (waits 5 ms at most)
 *   1 REPLY k	send canned reply k (the table below)
 *   2 RAW n	send the next n % 64 input bytes as they are
 *   3 CONTENT	read up to the end of a message's content (<CRLF>.<CRLF>)
 *   4 RESET	reset the connection (SO_LINGER 0); the script ends
 *   5 CLOSE	close it (FIN); the script ends
 *   6 AUTO k	be a proper server for the next k % 16 commands
 *   7 SHUT	stop writing (FIN), go on reading
 *
 * When the script runs out the server closes. A second connection of the
 * batch (libesmtp is run again without what needs SMTPUTF8) gets a greeting
 * and a proper server. Then, properties (abort()):
 *
 *   - the process is alive (libESMTP 1.1.0 crashed here, issue 25);
 *   - every recipient tried has an outcome with a reason;
 *   - a recipient is sent, or ambiguous, only if its message was marked
 *     (the final dot goes out only after the inflight mark), and no
 *     message is marked twice;
 *   - the server never saw more final dots of a content than there were
 *     marks (a content's last line is "body", so "body\r\n.\r\n" counts);
 *   - after the second message's mark failed, the messages after it are
 *     deferred and postponed: not charged an attempt for it;
 *   - the message whose mark failed is deferred for that, not for the
 *     bridge's deadline that passed while the store was asked;
 *   - with upstream.user: no connection carried a MAIL before an AUTH
 *     command (the guard cuts first);
 *   - with DSN parameters: no "(null)" went to the server, and every
 *     ENVID= and ORCPT= it read is strict xtext standing for the message's
 *     ENVID and the recipient's address (libESMTP encodes them again).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "../../deliver/deliver_impl.h"
#include "../../deliver/esmtp/deliver_esmtp.h"
#include "../../smtp/smtp.h"
#include "../../smtp/smtp_parse.h"
#include "../../util/buf.h"
#include "../../util/log.h"

#define MSGS_MAX	3
#define RCPTS_MAX	3
#define WAIT_MS		5		/* a READ waits no longer for a line */
#define WAIT_TLS_MS	300		/* ... in the TLS mode: a SASL login can take 50 ms */
#define GOT_MAX		(64 * 1024)	/* what the server keeps of what it read */
#define CONN_MARK	"\n--connection--\n"	/* in got between connections: no client writes it */
#define SLOW_MARK_MS	1300		/* a slow mark's wait: upstream.timeout is 1 s */

static const char *const canned[] = {
	"220 fuzz ESMTP\r\n",
	"250-fuzz\r\n250-PIPELINING\r\n250-ENHANCEDSTATUSCODES\r\n250-8BITMIME\r\n"
	"250-SIZE 1000000\r\n250 DSN\r\n",
	"250-fuzz\r\n250-CHUNKING\r\n250-SMTPUTF8\r\n250-STARTTLS\r\n250 PIPELINING\r\n",
	"250 fuzz\r\n",
	"250 2.1.0 ok\r\n",
	"250 2.1.5 ok\r\n",
	"451 4.3.0 try later\r\n",
	"550 5.1.1 no such user\r\n",
	"354 go ahead\r\n",
	"250 2.0.0 queued\r\n",
	"221 2.0.0 bye\r\n",
	"421 4.3.2 shutting down\r\n",
	"554 5.5.1 no valid recipients\r\n",
	"250-2.1.5 multi\r\n250 2.1.5 line\r\n",
	"500 5.5.2 what?\r\n",
	"250\r\n",
};
#define N_CANNED	(sizeof(canned) / sizeof(canned[0]))

/* the upstream: one listening socket for the process, one connection per input */
static int lfd = -1;
static struct conf conf;
static struct conf_upstream_host host;

/* one input's server */
struct server {
	const uint8_t *script;
	size_t len;
	int fd;				/* the accepted connection, or -1 */
	char in[GOT_MAX];		/* what it read and has not consumed */
	size_t in_len;
	char got[GOT_MAX];		/* everything it read (up to GOT_MAX) */
	size_t got_len;
	int wrote_eof;
	int done[2];			/* pipe: the batch is over */
	SSL *ssl;			/* the connection's TLS, in the TLS mode; else NULL */
};

static SSL_CTX *srv_ctx;		/* the server's side of TLS: a self-signed certificate */
static int srv_tls;			/* the input's mode: every connection is TLS at once */

/* what the stubs saw */
static struct {
	char qid[MSGS_MAX][STORE_QID_SIZE];
	int marks[MSGS_MAX];
	int fail_mark;			/* index of a message whose mark fails, or -1 */
	int slow_mark;			/* ... after SLOW_MARK_MS, past upstream.timeout */
	size_t n;
	struct deliver_rate *rate;	/* the upstream group's, or NULL (no upstream.rate) */
} seen;

/* ---------------------------------------------------------------- stubs of deliver.c, deliver_record.c */

int deliver_stopping(struct deliver *d)
{
	(void) d;
	return 0;
}

/*
 * no upstream.rate: the real one's answer for a deliver with no limits;
 * or, in the throttling mode, a rate object of the input's own
 */
struct deliver_rate *deliver_group_rate(struct deliver *d, const struct conf_upstream *up)
{
	(void) d, (void) up;
	return seen.rate;
}

int deliver_mark(struct deliver *d, const char *qid, struct deliver_job *const *jobs, size_t n)
{
	size_t i;

	(void) d, (void) jobs, (void) n;
	for (i = 0; i < seen.n; i++) {
		if (strcmp(seen.qid[i], qid) != 0)
			continue;
		if ((int) i == seen.fail_mark && seen.slow_mark)
			poll(NULL, 0, SLOW_MARK_MS);
		if ((int) i == seen.fail_mark)
			return STORE_EAGAIN;
		if (seen.marks[i]++ > 0)
			abort();	/* marked twice */
		return 0;
	}
	abort();			/* a message nobody gave it */
}

void deliver_replied(struct deliver *d, struct deliver_job *j)
{
	(void) d;
	j->decided = 1;
}

/* ---------------------------------------------------------------- the server */

/* srv_send - write it all (the client may be gone: no SIGPIPE) */
static void srv_send(struct server *s, const void *p, size_t n)
{
	ssize_t k;

	while (n > 0 && !s->wrote_eof
	       && (k = s->ssl ? SSL_write(s->ssl, p, (int) (n > 16384 ? 16384 : n))
		   : send(s->fd, p, n, MSG_NOSIGNAL)) > 0) {
		p = (const char *) p + k;
		n -= (size_t) k;
	}
}

/* srv_fill - read what the client sent, waiting ms at most; 0: nothing more */
static int srv_fill(struct server *s, int ms)
{
	struct pollfd p = { .fd = s->fd, .events = POLLIN };
	ssize_t n;

	if (s->in_len == sizeof(s->in)
	    || ((!s->ssl || SSL_pending(s->ssl) == 0) && poll(&p, 1, ms) <= 0))
		return 0;
	n = s->ssl ? SSL_read(s->ssl, s->in + s->in_len, (int) (sizeof(s->in) - s->in_len))
	    : recv(s->fd, s->in + s->in_len, sizeof(s->in) - s->in_len, 0);
	if (n <= 0)
		return 0;
	if (s->got_len + (size_t) n <= sizeof(s->got)) {
		memcpy(s->got + s->got_len, s->in + s->in_len, (size_t) n);
		s->got_len += (size_t) n;
	}
	s->in_len += (size_t) n;
	return 1;
}

/* srv_take - consume up to and including `end` from what was read; 1 if found */
static int srv_take(struct server *s, const char *end, char *out, size_t outlen)
{
	char *e;
	size_t n;

	while ((e = memmem(s->in, s->in_len, end, strlen(end))) == NULL)
		if (!srv_fill(s, srv_tls ? WAIT_TLS_MS : WAIT_MS))
			return 0;
	n = (size_t) (e - s->in) + strlen(end);
	if (out)
		snprintf(out, outlen, "%.*s", (int) n, s->in);
	memmove(s->in, s->in + n, s->in_len - n);
	s->in_len -= n;
	return 1;
}

/* srv_auto - a proper server for one command; 0 when there was none, or QUIT */
static int srv_auto(struct server *s)
{
	char line[1024];

	if (!srv_take(s, "\n", line, sizeof(line)))
		return 0;
	if (strncasecmp(line, "EHLO", 4) == 0)
		srv_send(s, canned[1], strlen(canned[1]));
	else if (strncasecmp(line, "HELO", 4) == 0)
		srv_send(s, canned[3], strlen(canned[3]));
	else if (strncasecmp(line, "MAIL", 4) == 0)
		srv_send(s, canned[4], strlen(canned[4]));
	else if (strncasecmp(line, "RCPT", 4) == 0)
		srv_send(s, canned[5], strlen(canned[5]));
	else if (strncasecmp(line, "RSET", 4) == 0)
		srv_send(s, canned[4], strlen(canned[4]));
	else if (strncasecmp(line, "QUIT", 4) == 0) {
		srv_send(s, canned[10], strlen(canned[10]));
		return 0;
	} else if (strncasecmp(line, "DATA", 4) == 0) {
		srv_send(s, canned[8], strlen(canned[8]));
		if (srv_take(s, "\r\n.\r\n", NULL, 0))
			srv_send(s, canned[9], strlen(canned[9]));
	} else {
		srv_send(s, canned[14], strlen(canned[14]));
	}
	return 1;
}

/* srv_reset - end the connection with a reset */
static void srv_reset(struct server *s)
{
	struct linger lg = { 1, 0 };

	(void) setsockopt(s->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
}

/* srv_run - run the script over one accepted connection */
static void srv_run(struct server *s)
{
	const uint8_t *p = s->script, *end = s->script + s->len;
	unsigned k;
	size_t n;

	while (p < end) {
		switch (*p++ & 7) {
		case 0:
			(void) srv_take(s, "\n", NULL, 0);
			break;
		case 1:
			if (p < end) {
				k = *p++ % N_CANNED;
				srv_send(s, canned[k], strlen(canned[k]));
			}
			break;
		case 2:
			n = p < end ? *p++ % 64u : 0;
			n = n > (size_t) (end - p) ? (size_t) (end - p) : n;
			srv_send(s, p, n);
			p += n;
			break;
		case 3:
			(void) srv_take(s, "\r\n.\r\n", NULL, 0);
			break;
		case 4:
			srv_reset(s);
			return;
		case 5:
			return;
		case 6:
			for (k = p < end ? *p++ % 16u : 0; k > 0 && srv_auto(s); k--)
				continue;
			break;
		case 7:
			(void) shutdown(s->fd, SHUT_WR);
			s->wrote_eof = 1;
			break;
		}
	}
}

/* srv_tls_accept - the handshake on a new connection (1 s at most); 1 if done */
static int srv_tls_accept(struct server *s)
{
	struct timeval tv = { 1, 0 };

	(void) setsockopt(s->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if ((s->ssl = SSL_new(srv_ctx)) == NULL || !SSL_set_fd(s->ssl, s->fd))
		return 0;
	return SSL_accept(s->ssl) == 1;
}

/* srv_tls_end - the connection's TLS, if any, goes */
static void srv_tls_end(struct server *s)
{
	SSL_free(s->ssl);
	s->ssl = NULL;
}

/* srv_tls_setup - the server's context: a new P-256 key, a self-signed certificate */
static void srv_tls_setup(void)
{
	EVP_PKEY *k = EVP_EC_gen("P-256");
	X509 *x = X509_new();
	X509_NAME *n;

	if (k == NULL || x == NULL || !X509_set_version(x, 2)
	    || !ASN1_INTEGER_set(X509_get_serialNumber(x), 1)
	    || !X509_gmtime_adj(X509_getm_notBefore(x), -3600)
	    || !X509_gmtime_adj(X509_getm_notAfter(x), 30L * 86400) || !X509_set_pubkey(x, k)
	    || (n = X509_get_subject_name(x)) == NULL
	    || !X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *) "fuzz",
					   -1, -1, 0)
	    || !X509_set_issuer_name(x, n) || !X509_sign(x, k, EVP_sha256())
	    || (srv_ctx = SSL_CTX_new(TLS_server_method())) == NULL
	    || !SSL_CTX_use_certificate(srv_ctx, x) || !SSL_CTX_use_PrivateKey(srv_ctx, k))
		abort();
	X509_free(x);
	EVP_PKEY_free(k);
}

/*
 * srv_main - the server thread: each connection the bridge makes, the
 * script on the first, a proper server on the others; until the batch is
 * over (a byte on s->done)
 */
static void *srv_main(void *arg)
{
	struct server *s = arg;
	struct pollfd p[2] = { { .fd = lfd, .events = POLLIN }, { .fd = s->done[0], .events = POLLIN } };
	int conns = 0;

	while (poll(p, 2, -1) > 0 && !p[1].revents) {
		if ((s->fd = accept(lfd, NULL, NULL)) < 0)
			continue;
		s->in_len = 0;
		s->wrote_eof = 0;
		if (s->got_len + sizeof(CONN_MARK) - 1 <= sizeof(s->got)) {
			memcpy(s->got + s->got_len, CONN_MARK, sizeof(CONN_MARK) - 1);
			s->got_len += sizeof(CONN_MARK) - 1;
		}
		if (srv_tls && !srv_tls_accept(s)) {
			srv_tls_end(s);
			close(s->fd);
			s->fd = -1;
			continue;
		}
		if (conns++ == 0) {
			srv_run(s);
		} else {
			srv_send(s, canned[0], strlen(canned[0]));
			while (srv_auto(s))
				continue;
		}
		srv_tls_end(s);
		close(s->fd);
		s->fd = -1;
	}
	return NULL;
}

/* the DSN parameters of an input (byte 0 bits 3-7 = 00011), "" for none */
static struct {
	char envid[SMTP_ENVID_MAX + 1];
	char orcpt[SMTP_ORCPT_MAX + 1];
	char orcpt_addr[SMTP_ORCPT_MAX + 1];	/* what the ORCPT stands for */
} dsn;

/*
 * dsn_params - ENVID and ORCPT from the input at data[0..size) (lengths at
 * data[0] and data[1]); how many octets they took
 */
static size_t dsn_params(const uint8_t *data, size_t size)
{
	size_t el, ol, i, o = 0, a = 0;
	unsigned char c;

	if (size < 2)
		return size;
	el = data[0] % (SMTP_ENVID_MAX + 1);
	ol = data[1];
	data += 2;
	size -= 2;
	el = el > size ? size : el;
	for (i = 0; i < el; i++)
		dsn.envid[i] = (char) (32 + data[i] % 95);
	dsn.envid[el] = 0;
	data += el;
	size -= el;
	ol = ol > size ? size : ol;
	o = (size_t) snprintf(dsn.orcpt, sizeof(dsn.orcpt), "%s", ol ? "rfc822;" : "");
	for (i = 0; i < ol && o + 3 < sizeof(dsn.orcpt); i++) {
		c = (unsigned char) (32 + data[i] % 95);
		if (c > 32 && c != '+' && c != '=' && !(data[i] & 0x80))
			dsn.orcpt[o++] = (char) c;
		else
			o += (size_t) snprintf(dsn.orcpt + o, 4, "+%02X", c);
		dsn.orcpt_addr[a++] = (char) c;
	}
	dsn.orcpt[o] = 0;
	dsn.orcpt_addr[a] = 0;
	return 2 + el + ol;
}

/* param - the value of " NAME=" in a command line l[0..n), or NULL (its length in *vl) */
static const char *param(const char *l, size_t n, const char *name, size_t *vl)
{
	size_t k = strlen(name), i;

	for (i = 0; i + k + 1 < n; i++)
		if (l[i] == ' ' && strncasecmp(l + i + 1, name, k) == 0) {
			l += i + 1 + k;
			n -= i + 1 + k;
			for (*vl = 0; *vl < n && l[*vl] != ' ' && l[*vl] != '\r'; (*vl)++)
				continue;
			return l;
		}
	return NULL;
}

/* dsn_check - the DSN parameters in every MAIL and RCPT line the server read */
static void dsn_check(const struct server *s)
{
	const char *l = s->got, *end = s->got + s->got_len, *nl, *v;
	struct buf b = BUF_INIT;
	char *type, *addr;
	size_t n, vl, i;

	for (; l < end; l = nl + 1) {
		if ((nl = memchr(l, '\n', (size_t) (end - l))) == NULL)
			nl = end;
		n = (size_t) (nl - l);
		for (i = 0; i + 6 <= n; i++)
			if (strncasecmp(l + i, "(null)", 6) == 0)
				abort();	/* a parameter libESMTP could not encode */
		if (n >= 10 && strncasecmp(l, "MAIL FROM:", 10) == 0
		    && (v = param(l, n, "ENVID=", &vl)) != NULL) {
			buf_reset(&b);
			if (smtp_xtext_decode(&b, v, vl, SMTP_XTEXT_STRICT) != 0
			    || b.len != strlen(dsn.envid) || memcmp(b.data, dsn.envid, b.len) != 0)
				abort();
		}
		if (n >= 8 && strncasecmp(l, "RCPT TO:", 8) == 0
		    && (v = param(l, n, "ORCPT=", &vl)) != NULL) {
			if (smtp_orcpt_split(v, vl, SMTP_XTEXT_STRICT, &type, &addr) != 0
			    || strcasecmp(type, "rfc822") != 0 || strcmp(addr, dsn.orcpt_addr) != 0)
				abort();
			free(type);
			free(addr);
		}
	}
	buf_free(&b);
}

/* auth_check - with upstream.user, no connection's MAIL came before an AUTH command */
static void auth_check(const struct server *s)
{
	const char *l = s->got, *end = s->got + s->got_len, *nl;
	int authed = 0;

	for (; l < end; l = nl + 1) {
		if ((nl = memchr(l, '\n', (size_t) (end - l))) == NULL)
			nl = end;
		if (nl - l == 14 && memcmp(l, "--connection--", 14) == 0)
			authed = 0;
		else if (nl - l >= 5 && strncasecmp(l, "AUTH ", 5) == 0)
			authed = 1;
		else if (nl - l >= 10 && strncasecmp(l, "MAIL FROM:", 10) == 0 && !authed)
			abort();	/* a message without AUTH: the guard let it go */
	}
}

/* ---------------------------------------------------------------- the client */

/* setup - the listener and the configuration, once */
static void setup(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);

	signal(SIGPIPE, SIG_IGN);
	log_setup("fuzz_deliver", 0, LOG_LEVEL_ERROR);	/* info lines would drown the fuzzer */
	if ((lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0
	    || bind(lfd, (struct sockaddr *) &a, sizeof(a)) < 0 || listen(lfd, 8) < 0
	    || getsockname(lfd, (struct sockaddr *) &a, &len) < 0)
		abort();
	host.host = "127.0.0.1";
	host.port = ntohs(a.sin_port);
	conf.hostname = "relay.fuzz";
	conf.upstream.hosts = &host;
	conf.upstream.n_hosts = 1;
	conf.upstream.tls = CONF_TLS_NONE;
	conf.upstream.tls_verify = 1;
	conf.upstream.timeout = 1;	/* the bridge's deadlines, for a script that stalls */
	srv_tls_setup();
}

/* job_init - message i of the batch, with r recipients; params: byte 1's bits 6-7 */
static void job_init(struct deliver_job *j, size_t i, size_t r, unsigned params)
{
	char text[128];
	size_t k;

	memset(j, 0, sizeof(*j));
	snprintf(j->m.qid, sizeof(j->m.qid), "FUZZ%zu", i);
	j->m.from = strdup("sender@example.org");
	j->m.rcpts = calloc(r, sizeof(*j->m.rcpts));
	j->m.n_rcpts = r;
	j->res = calloc(r, sizeof(*j->res));
	for (k = 0; k < r; k++) {
		snprintf(text, sizeof(text), "r%zu-m%zu@example.com", k, i);
		j->m.rcpts[k].addr = strdup(text);
		j->m.rcpts[k].orcpt = dsn.orcpt[0] ? strdup(dsn.orcpt) : NULL;
		j->res[k].attempted = 1;
	}
	j->m.envid = dsn.envid[0] ? strdup(dsn.envid) : NULL;
	j->m.body = params & 1 ? SMTP_BODY_8BITMIME : SMTP_BODY_NONE;
	j->m.smtputf8 = (params & 2) != 0;
	snprintf(text, sizeof(text), "From: sender@example.org\r\nSubject: fuzz %zu%s\r\n\r\nbody\r\n",
		 i, params & 2 ? " \xc3\xa9t\xc3\xa9" : "");
	j->m.data = strdup(text);
	j->m.data_len = strlen(text);
}

/* job_check - the properties of one message's outcome */
static void job_check(const struct deliver_job *j, int marked)
{
	size_t k;

	for (k = 0; k < j->m.n_rcpts; k++) {
		if (j->res[k].reply[0] == 0)
			abort();	/* no outcome, or no reason */
		if ((j->res[k].outcome == DELIVER_SENT || j->res[k].outcome == DELIVER_AMBIGUOUS)
		    && !marked)
			abort();	/* sent without a mark before its dot */
	}
}

/*
 * rest_check - a refused mark abandoned the session before its dot: the
 * messages after it never reached the server, and wait without an
 * attempt charged (postponed), deferred
 */
static void rest_check(const struct deliver_job *jobs, size_t n)
{
	size_t i, k;

	if (seen.fail_mark < 0 || (size_t) seen.fail_mark >= n || !jobs[seen.fail_mark].no_dot)
		return;
	for (k = 0; k < jobs[seen.fail_mark].m.n_rcpts; k++)
		if (strstr(jobs[seen.fail_mark].res[k].reply, "nothing moved"))
			abort();	/* the deadline its mark's wait let pass is not why */
	for (i = (size_t) seen.fail_mark + 1; i < n; i++) {
		if (!jobs[i].postponed || seen.marks[i] > 0)
			abort();	/* charged for another message's refused mark */
		for (k = 0; k < jobs[i].m.n_rcpts; k++)
			if (jobs[i].res[k].outcome != DELIVER_DEFERRED)
				abort();
	}
}

/* job_free - everything job_init allocated */
static void job_free(struct deliver_job *j)
{
	size_t k;

	for (k = 0; k < j->m.n_rcpts; k++) {
		free(j->m.rcpts[k].addr);
		free(j->m.rcpts[k].orcpt);
	}
	free(j->m.rcpts);
	free(j->m.envid);
	free(j->m.from);
	free(j->m.data);
	free(j->res);
}

/* dots - the contents' final dots the server read */
static size_t dots(const struct server *s)
{
	static const char dot[] = "body\r\n.\r\n";
	const char *p = s->got, *end = s->got + s->got_len, *e;
	size_t n = 0;

	while ((e = memmem(p, (size_t) (end - p), dot, sizeof(dot) - 1)) != NULL) {
		n++;
		p = e + sizeof(dot) - 1;
	}
	return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct server s;
	struct deliver_job jobs[MSGS_MAX], *ptrs[MSGS_MAX];
	struct deliver d;
	pthread_t srv;
	size_t i, n, marks = 0, off = 2;

	if (lfd < 0)
		setup();
	if (size < 2)
		return 0;
	memset(&seen, 0, sizeof(seen));
	n = (size_t) (data[0] & 3) % MSGS_MAX + 1;
	seen.fail_mark = data[0] & 4 ? 1 : -1;
	seen.slow_mark = (data[0] & 0xf8) == 0x08;
	seen.n = n;
	conf.upstream.tls = (data[0] & 0xf8) == 0x10 ? CONF_TLS_STARTTLS : CONF_TLS_NONE;
	memset(&dsn, 0, sizeof(dsn));
	if ((data[0] & 0xf8) == 0x18)
		off += dsn_params(data + 2, size - 2);
	if ((data[0] & 0xf8) == 0x20)
		seen.rate = deliver_rate_new(NULL, &conf.upstream);
	srv_tls = (data[0] & 0xf8) == 0x28;
	if (srv_tls)
		conf.upstream.tls = CONF_TLS_IMPLICIT;
	conf.upstream.tls_verify = !srv_tls;
	conf.upstream.user = srv_tls ? "fuzzuser" : NULL;
	conf.upstream.password = srv_tls ? "fuzzpass" : NULL;
	for (i = 0; i < n; i++) {
		job_init(&jobs[i], i, (size_t) ((data[1] >> (2 * i)) & 3) % RCPTS_MAX + 1,
			 data[1] >> 6);
		memcpy(seen.qid[i], jobs[i].m.qid, sizeof(seen.qid[i]));
		ptrs[i] = &jobs[i];
	}
	memset(&s, 0, sizeof(s));
	s.script = data + off;
	s.len = size - off;
	s.fd = -1;
	memset(&d, 0, sizeof(d));
	d.c = &conf;
	if (pipe(s.done) < 0 || pthread_create(&srv, NULL, srv_main, &s) != 0)
		abort();
	deliver_esmtp.send(&d, &conf.upstream, ptrs, n);
	if (write(s.done[1], "x", 1) != 1)
		abort();
	pthread_join(srv, NULL);
	close(s.done[0]);
	close(s.done[1]);
	deliver_rate_free(seen.rate);
	rest_check(jobs, n);
	for (i = 0; i < n; i++) {
		job_check(&jobs[i], seen.marks[i] > 0);
		marks += (size_t) seen.marks[i];
		job_free(&jobs[i]);
	}
	if (dots(&s) > marks)
		abort();		/* a final dot with no mark before it */
	if (getenv("FUZZ_SAY"))		/* what the server read, for a person */
		fprintf(stderr, "%.*s\n", (int) s.got_len, s.got);
	dsn_check(&s);
	if (srv_tls)
		auth_check(&s);
	return 0;
}
