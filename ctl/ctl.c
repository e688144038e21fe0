/*
 * NAME
 *	idemrelayctl 8
 * SUMMARY
 *	look at and act on idemrelay's queue, keys and stories
 * SYNOPSIS
 *	idemrelayctl [-c config] [--json] [-u user] [--force|--drop]
 *		[--from pattern] [--to pattern] command [argument]
 * DESCRIPTION
 *	Reads the configuration the daemon reads (with no -c, the embedded
 *	default), then:
 *
 *	queue		the queued messages: QID, size, arrival, state,
 *			attempts, next attempt, sender, recipients
 *	show QID|KEY	a message's story; for a key, the story of every
 *			message that holds claims under it. KEY is the key
 *			header's value, the ENVID, or the Message-ID
 *	stats		store figures, and the daemon's counters if it runs
 *	cat QID		the queued message as it will be sent, envelope first
 *	flush		every deferred message is attempted now
 *	retry QID	one message is attempted now
 *	drop QID|KEY|ALL
 *			the messages leave the queue, never delivered;
 *			with --from/--to and no argument, those matching
 *	hold QID|KEY|ALL, release QID|KEY|ALL
 *			on hold (never delivered) until released; also
 *			with --from/--to
 *	reroute QID|KEY|ALL
 *			the route decided again with the routes in use
 *			(the file's when no daemon runs); also --from/--to
 *	forget KEY	the key's claims are deleted: its next submission
 *			is a new message (-u: only that AUTH user's). While
 *			a message of the key is still queued it is refused
 *			(the resubmission would be delivered as well as the
 *			queued copy) unless --drop (the copy is dropped too)
 *			or --force (forgotten anyway)
 *
 *	queue, show, cat and stats read the store directly, read-only, so
 *	they work whether or not the daemon runs. flush and retry need the
 *	daemon (over the control socket). drop, hold, release and forget go
 *	through the daemon when it runs, so that its scheduler knows; when
 *	it does not, they run the same actions (queue/queue_admin.c) on the
 *	store themselves, and log them as the daemon would (idemrelay/postsuper):
 *	to syslog with log.target "syslog", else to standard error when it is
 *	a file or the journal, never to a terminal or a pipe (mail_log()).
 * DIAGNOSTICS
 *	Exit 0 on success; 1 with a message for an unknown QID or key, an
 *	absent store ("no store at PATH"), a PostgreSQL store that cannot be
 *	reached ("FILE:LINE: store.url: why", as idemrelay -t says it), a
 *	daemon that is needed and not running or said nothing for 10 s
 *	(SILENCE_S), a store stats cannot read
 *	(after what the daemon sees of it), or any failure; 2 for bad usage.
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "../queue/queue_admin.h"
#include "../util/clock.h"
#include "../util/hash.h"
#include "../util/log.h"
#include "ctl.h"
#include "../util/json.h"
#include "../queue/keys.h"
#include "../queue/qid.h"


/*
 * the daemon said nothing so long (not even the blank line it sends every
 * second while it serves a request, control.h), or took so long to take
 * the connection (its backlog full): it is not serving this request
 */
#define SILENCE_S	10

#define CTL_COMMANDS "queue, show, cat, stats, flush, retry, drop, hold, release, reroute, forget"

static void ctl_misuse(struct ctl *x, const char *fmt, ...)
	__attribute__((noreturn, format(printf, 2, 3)));

/* usage - say how to run it */
static void usage(int rc) __attribute__((noreturn));
static void usage(int rc)
{
	fprintf(rc ? stderr : stdout,
		"usage: idemrelayctl [-c config] [--json] [-u user] [--from P] [--to P] command [arg]\n"
		"  queue            list the queued messages\n"
		"  show QID|KEY     a message's story, or those of a key's messages\n"
		"  stats            store figures and the daemon's counters\n"
		"  cat QID          the queued message as it will be sent\n"
		"  flush            attempt every deferred message now (daemon)\n"
		"  retry QID        attempt one message now (daemon)\n"
		"  drop QID|KEY|ALL remove messages from the queue\n"
		"  hold QID|KEY|ALL never deliver them until released\n"
		"  release QID|KEY|ALL\n"
		"                   deliver them again (at their next attempt)\n"
		"  reroute QID|KEY|ALL\n"
		"                   decide their routes again with the routes in use\n"
		"  drop|hold|release|reroute --from PATTERN, --to PATTERN\n"
		"                   the queued messages whose sender or a recipient\n"
		"                   matches the shell pattern (any case)\n"
		"  forget KEY       delete a key's claims: its next submission is new;\n"
		"                   refused while its message is queued, unless\n"
		"                   --drop (drop it too) or --force (forget anyway)\n");
	exit(rc);
}

/* ctl_vfail - report (JSON too with --json) and exit with rc */
static void ctl_vfail(struct ctl *x, int rc, const char *fmt, va_list ap)
	__attribute__((noreturn));
static void ctl_vfail(struct ctl *x, int rc, const char *fmt, va_list ap)
{
	char text[1024];
	struct buf b = BUF_INIT;

	vsnprintf(text, sizeof(text), fmt, ap);
	fprintf(stderr, "idemrelayctl: %s\n", text);
	if (x && x->json) {
		json_error(&b, "%s", text);
		printf("%s\n", b.data);
		buf_free(&b);
	}
	exit(rc);
}

/* ctl_fail - report and exit 1 */
void ctl_fail(struct ctl *x, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	ctl_vfail(x, 1, fmt, ap);
}

/* ctl_misuse - a bad command line: what is wrong, then exit 2 (idemrelayctl -h for more) */
static void ctl_misuse(struct ctl *x, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	ctl_vfail(x, 2, fmt, ap);
}

/* ctl_store_try - open the store read-only, once; NULL and why in err if it cannot be */
struct store *ctl_store_try(struct ctl *x, char *err, size_t errlen)
{
	if (x->st == NULL && store_open(&x->st, &x->cf, STORE_READER, err, errlen) != 0)
		x->st = NULL;
	return x->st;
}

/* ctl_store - open the store read-only, once; fail if it cannot be */
struct store *ctl_store(struct ctl *x)
{
	char err[1024];

	if (ctl_store_try(x, err, sizeof(err)) == NULL)
		ctl_fail(x, "%s", err);
	return x->st;
}

/*
 * read_reply - everything the daemon sends until it closes: 0; -1 if it
 * closed with nothing (it exited), -2 if it said nothing for SILENCE_S
 * (SO_RCVTIMEO). The blank lines it sends while it serves are left out,
 * *began set. So an action waits as long as it takes (over a long queue
 * about a second every 2,000 messages, and a reply given up on would be
 * an action said not done that the daemon carries out), but not for
 * ever on a daemon that is stopped or hung.
 */
static int read_reply(int fd, struct buf *reply, int *began)
{
	char chunk[4096], *p;
	ssize_t n;

	for (;;) {
		if ((n = read(fd, chunk, sizeof(chunk))) < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == EAGAIN ? -2 : -1;
		if (n == 0)
			return reply->len ? 0 : -1;
		for (p = chunk; reply->len == 0 && n > 0 && *p == '\n'; p++, n--)
			*began = 1;
		buf_append(reply, p, (size_t) n);
	}
}

/* ctl_request - a line to the control socket, its JSON reply back */
int ctl_request(struct ctl *x, const char *line, int question, struct buf *reply, char *why,
		size_t whylen)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	struct timeval silence = { SILENCE_S, 0 };
	size_t len = strlen(line);
	int fd, rc, began = 0;

	buf_reset(reply);
	if (x->silent) {
		snprintf(why, whylen, "no answer from the daemon on %s: it is starting, stopping,"
			 " busy or stopped", x->cf.control);
		return -1;
	}
	if (x->cf.control == NULL) {
		snprintf(why, whylen, "no control socket is configured (control = \"...\")");
		return -1;
	}
	if (strlen(x->cf.control) >= sizeof(sun.sun_path))
		ctl_fail(x, "control socket path too long: %s", x->cf.control);
	strcpy(sun.sun_path, x->cf.control);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		ctl_fail(x, "socket: %s", strerror(errno));
	/* a connect waits while the backlog is full, a read while nothing comes */
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &silence, sizeof(silence));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &silence, sizeof(silence));
	if ((rc = connect(fd, (struct sockaddr *) &sun, sizeof(sun))) < 0 && errno != EAGAIN) {
		int there = errno == EACCES || errno == EPERM;	/* it runs: we may not talk to it */

		if (there)
			snprintf(why, whylen, "cannot reach the daemon: control socket %s: %s: run "
				 "as root or as the user the daemon runs as", x->cf.control,
				 strerror(errno));
		else
			snprintf(why, whylen, "the daemon is not running (control socket %s: %s)",
				 x->cf.control, strerror(errno));
		close(fd);
		return there ? -2 : -1;
	}
	if (rc < 0)
		rc = -2;	/* not taken: the backlog stayed full */
	else if (send(fd, line, len, MSG_NOSIGNAL) != (ssize_t) len
		 || send(fd, "\n", 1, MSG_NOSIGNAL) != 1)
		rc = -1;	/* closed since the connect: no SIGPIPE, "no reply" */
	else
		rc = read_reply(fd, reply, &began);
	close(fd);		/* a request not taken yet never will be (util/admin.h) */
	if (rc != 0 && question) {
		x->silent = 1;		/* and asked no more */
		return ctl_request(x, line, question, reply, why, whylen);
	}
	if (rc == -1)
		ctl_fail(x, "no reply from the daemon on %s", x->cf.control);
	if (rc == -2 && began)
		ctl_fail(x, "the daemon on %s began and then said nothing for %d s: it is stopped"
			 " or hung, and may have done part of it (see the mail log)", x->cf.control,
			 SILENCE_S);
	if (rc == -2)
		ctl_fail(x, "no answer from the daemon on %s in %d s: it is stopped, hung, or busy"
			 " starting or stopping; nothing was done", x->cf.control, SILENCE_S);
	while (reply->len && (reply->data[reply->len - 1] == '\n'))
		reply->data[--reply->len] = 0;
	return 0;
}

/* reply_ok - the reply's "ok", or fail saying what it holds instead */
static int reply_ok(struct ctl *x, const struct buf *reply, char *err, size_t errlen)
{
	int ok = 0;

	if (json_get_bool(reply->data, "ok", &ok) != 0)
		ctl_fail(x, "the daemon replied with something else than JSON: %.200s", reply->data);
	if (!ok && json_get_str(reply->data, "error", err, errlen) != 0)
		snprintf(err, errlen, "the daemon refused: %.200s", reply->data);
	return ok;
}

/* need_daemon - a request that only the daemon can carry out; the reply if ok */
static void need_daemon(struct ctl *x, const char *line, struct buf *reply)
{
	char why[512], err[1024];

	if (ctl_request(x, line, 0, reply, why, sizeof(why)) != 0)
		ctl_fail(x, "%s", why);
	if (!reply_ok(x, reply, err, sizeof(err)))
		ctl_fail(x, "%s", err);
}

/* ctl_key_hashes - KEY as the daemon would have derived it from a header/ENVID or a Message-ID */
size_t ctl_key_hashes(const char *key, uint8_t out[QUEUE_ADMIN_MAX_KEYS][STORE_HASH_LEN])
{
	char hex[2 * HASH_LEN + 1];

	keys_index_hash(key, out[0]);
	if (keys_msgid_key(key, strlen(key), hex) != 0)	/* as a Message-ID */
		return 1;
	keys_index_hash(hex, out[1]);
	return 2;
}

/* cmd_flush - every deferred message due now */
static int cmd_flush(struct ctl *x, const char *arg)
{
	struct buf reply = BUF_INIT;

	(void) arg;
	need_daemon(x, "flush", &reply);
	if (x->json)
		printf("%s\n", reply.data);
	else
		printf("flush: every deferred message will be attempted now\n");
	buf_free(&reply);
	return 0;
}

/* cmd_retry - one message due now */
static int cmd_retry(struct ctl *x, const char *qid)
{
	struct buf reply = BUF_INIT, line = BUF_INIT;
	char state[32] = "";

	if (!qid_valid(qid))
		ctl_fail(x, "not a QID: %s", qid);
	buf_printf(&line, "retry %s", qid);
	need_daemon(x, line.data, &reply);
	json_get_str(reply.data, "state", state, sizeof(state));
	if (x->json)
		printf("%s\n", reply.data);
	else if (strcmp(state, "active") == 0)
		printf("%s: being delivered right now\n", qid);
	else if (strcmp(state, "waiting") == 0)
		printf("%s: waits for its upstream (paused, or every connection it allows in"
		       " use): attempted once it may start a session\n", qid);
	else
		printf("%s: will be attempted now\n", qid);
	buf_free(&reply);
	buf_free(&line);
	return 0;
}

/* stderr_is_journal - is standard error (sb) the journal's stream, as JOURNAL_STREAM says? */
static int stderr_is_journal(const struct stat *sb)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;

	return js && sscanf(js, "%llu:%llu", &dev, &ino) == 2
	    && (unsigned long long) sb->st_dev == dev && (unsigned long long) sb->st_ino == ino;
}

/*
 * mail_log - where the lines of an action run here go (queue_admin.c
 * logs them as the daemon does, tagged idemrelay/postsuper): with
 * log.target "syslog", to syslog; else to standard error only when it
 * is a log that is kept (a file, as the daemon's standard error is when
 * its log is one, or the journal), never to a terminal or a pipe, where
 * the command's own output says what it did and a script reads it.
 */
static void mail_log(struct ctl *x)
{
	enum log_level level = (enum log_level) x->cf.log.level;
	struct stat sb;
	int journal;

	if (x->cf.log.syslog && log_syslog_reachable()) {
		log_default_service("postsuper");
		log_setup("idemrelay", 1, level);
		return;
	}
	if (fstat(STDERR_FILENO, &sb) != 0)
		return;
	journal = stderr_is_journal(&sb);
	if (!journal && !S_ISREG(sb.st_mode))
		return;			/* a terminal, a pipe: errors only, as before */
	log_default_service("postsuper");
	log_stamp(!journal);		/* the journal stamps lines itself */
	log_setup("idemrelay", 0, level);
}

/*
 * act - an action through the daemon when it runs, else the same request
 * line ("x->cmd args") run by the same code (queue_admin_request()) on the
 * store itself, its args cut up in place (on LMDB only if no other process
 * has it open). The reply either way, marked "offline" in the second case.
 */
static void act(struct ctl *x, struct buf *line, struct buf *reply)
{
	char why[1024];
	int rc = ctl_request(x, line->data, 0, reply, why, sizeof(why));

	if (rc == 0)
		return;
	if (rc == -2)		/* a daemon we may not reach is not none */
		ctl_fail(x, "%s", why);
	mail_log(x);
	/* for writing: no daemon to race, the store alone knows the queue */
	store_close(x->st);	/* a reader open before: one environment a process */
	x->st = NULL;
	/* on LMDB a daemon with no control socket still has the store open: refused */
	if ((rc = store_open(&x->st, &x->cf, STORE_WRITER, why, sizeof(why))) != 0)
		ctl_fail(x, "%s%s", why, rc == STORE_EAGAIN && store_dir(&x->cf) && !x->cf.control
			 ? ": configure the control socket (control = \"...\") to act through"
			 " a running daemon" : "");
	/* a reroute: with the routes the next start uses */
	queue_admin_request(x->st, NULL, &x->cf, x->cmd, line->data + strlen(x->cmd) + 1, x->now,
			    reply);
	if (reply->len && reply->data[reply->len - 1] == '}') {
		reply->data[--reply->len] = 0;
		buf_printf(reply, ",\"offline\":true}");
	}
}

/* line_keys - the key index hashes KEY may stand for, onto line as hex words */
static void line_keys(const char *key, struct buf *line)
{
	uint8_t h[QUEUE_ADMIN_MAX_KEYS][STORE_HASH_LEN];
	char hex[2 * HASH_LEN + 1];
	size_t i, n = ctl_key_hashes(key, h);

	for (i = 0; i < n; i++) {
		hash_hex(h[i], HASH_LEN, hex);
		buf_printf(line, " %s", hex);
	}
}

/*
 * line_arg - refuse an argument with a control character in it before it
 * goes into a request line (a key as its hashes, the rest as it is): a CR
 * or LF would end the line there, and the daemon would act on the part
 * before it alone (a drop --from without its --to); no address, key or
 * user name has one. A key may have tabs (key 1) around a Message-ID, as
 * a header's value has; they go as hashes, never on the line. what names
 * the argument in the error.
 */
static void line_arg(struct ctl *x, const char *what, const char *s, int key)
{
	const unsigned char *p = (const unsigned char *) s;

	while ((*p >= ' ' && *p != 0x7f) || (key && *p == '\t'))
		p++;
	if (*p)
		ctl_misuse(x, "%s has a control character (0x%02x) at offset %zu: no pattern, "
			   "key or user name has one", what, *p, (size_t) (p - (const unsigned char *) s));
}

/* sel_line - the selection as the control socket's request names it (control.h) */
static void sel_line(struct ctl *x, const char *arg, struct buf *line)
{
	if (arg == NULL) {
		if (x->from)
			line_arg(x, "--from", x->from, 0);
		if (x->to)
			line_arg(x, "--to", x->to, 0);
		if ((x->from && (strpbrk(x->from, " \t") || !x->from[0]))
		    || (x->to && (strpbrk(x->to, " \t") || !x->to[0])))
			ctl_misuse(x, "a pattern is not empty and has no space in it, as an address");
		if (x->from)
			buf_printf(line, " from %s", x->from);
		if (x->to)
			buf_printf(line, " to %s", x->to);
	} else if (strcmp(arg, "ALL") == 0 || qid_valid(arg)) {
		buf_printf(line, " %s", arg);
	} else {
		line_arg(x, "the key", arg, 1);
		buf_printf(line, " key -");
		line_keys(arg, line);
	}
}

/* reply_qids - a reply's list of QIDs (member name) into out: sep between two, after each */
static void reply_qids(const char *reply, const char *name, const char *sep, const char *after,
		       struct buf *out)
{
	const char *p, *q;
	size_t len;

	if (json_get(reply, name, &p, &len) != 0)
		return;
	while (json_next(&p, &q, &len) == 0)
		if (*q == '"')
			buf_printf(out, "%s%.*s%s", out->len ? sep : "", (int) len - 2, q + 1, after);
}

/* print_list - each QID of a reply's list, one line each, then how many */
static void print_list(const char *reply, const char *name, const char *done, int count)
{
	struct buf out = BUF_INIT;
	char after[64];
	long long n = 0;

	json_get_int(reply, "count", &n);
	snprintf(after, sizeof(after), ": %s\n", done);
	reply_qids(reply, name, "", after, &out);
	if (out.len)
		fputs(out.data, stdout);
	if (count)
		printf("-- %lld message%s %s\n", n, n == 1 ? "" : "s", done);
	buf_free(&out);
}

/*
 * cmd_select - drop, hold, release or reroute (x->cmd) what arg names (QID, KEY,
 * ALL; NULL: --from/--to), through the daemon or on the store
 */
static int cmd_select(struct ctl *x, const char *arg)
{
	struct buf reply = BUF_INIT, line = BUF_INIT;
	char err[1024];

	buf_printf(&line, "%s", x->cmd);
	sel_line(x, arg, &line);
	act(x, &line, &reply);
	if (!reply_ok(x, &reply, err, sizeof(err))) {
		if (x->json) {
			printf("%s\n", reply.data);	/* with what was done and what was not */
			exit(1);
		}
		print_list(reply.data, x->list, x->done, 0);
		ctl_fail(x, "%s", err);
	}
	if (x->json)
		printf("%s\n", reply.data);
	else
		print_list(reply.data, x->list, x->done, arg == NULL || !qid_valid(arg));
	buf_free(&reply);
	buf_free(&line);
	return 0;
}

/* cat_rcpt - a recipient as postcat names it: still to go, or done */
static void cat_rcpt(const struct store_rcpt *r)
{
	static const char *const state[] = { "queued", "sent", "bounced", "unconfirmed" };

	printf("%s: %s", r->state == STORE_RCPT_QUEUED ? "recipient" : "done_recipient", r->addr);
	if (r->state != STORE_RCPT_QUEUED && (size_t) r->state < 4)
		printf(" (%s)", state[r->state]);
	printf("\n");
	if (r->orcpt)
		printf("original_recipient: %s\n", r->orcpt);
}

/* cat_json - the message as one JSON object */
static void cat_json(const struct store_msg *m)
{
	struct buf b = BUF_INIT;
	size_t i;

	buf_printf(&b, "{\"ok\":true,\"qid\":\"%s\"", m->qid);
	json_time(&b, ",\"accepted\":", m->accepted);
	buf_printf(&b, ",\"held\":%s,\"size\":%zu", m->held ? "true" : "false", m->data_len);
	json_str(&b, ",\"from\":", m->from);
	json_str(&b, ",\"envid\":", m->envid);
	json_str(&b, ",\"route\":", m->route);
	buf_printf(&b, ",\"recipients\":[");
	for (i = 0; i < m->n_rcpts; i++) {
		json_str(&b, i ? ",{\"addr\":" : "{\"addr\":", m->rcpts[i].addr);
		buf_printf(&b, ",\"pending\":%s",
			   m->rcpts[i].state == STORE_RCPT_QUEUED ? "true" : "false");
		json_str(&b, ",\"orcpt\":", m->rcpts[i].orcpt);
		buf_putc(&b, '}');
	}
	json_str(&b, "],\"message\":", m->data);
	printf("%s}\n", b.data);
	buf_free(&b);
}

/*
 * cmd_cat - a queued message as it will be sent, like postcat -q: the
 * envelope, then the content (with the Received: line idemrelay added)
 */
static int cmd_cat(struct ctl *x, const char *qid)
{
	struct store_msg m;
	struct store_story s;
	char t[64];
	size_t i;
	int err;

	if (!qid_valid(qid))
		ctl_fail(x, "not a QID: %s", qid);
	if ((err = store_msg_load(ctl_store(x), qid, &m)) == STORE_ENOTFOUND) {
		if (store_story_get(x->st, qid, &s) == 0)
			ctl_fail(x, "%s is not queued: it %s, and its content went with it "
				 "(idemrelayctl show %s tells its story)", qid,
				 s.dropped ? "was dropped" : "has left the queue", qid);
		ctl_fail(x, "unknown QID %s", qid);
	}
	if (err != 0)
		ctl_fail(x, "cannot read %s: %s", qid, store_strerror(err));
	if (x->json) {
		cat_json(&m);
		store_msg_free(&m);
		return 0;
	}
	printf("*** ENVELOPE RECORDS %s ***\n", qid);
	printf("message_size: %zu\n", m.data_len);
	printf("message_arrival_time: %s\n", clock_iso(t, sizeof(t), m.accepted));
	printf("client: %s\n", m.client);
	if (m.user)
		printf("sasl_username: %s\n", m.user);
	if (m.route)
		printf("route: %s\n", m.route);
	if (m.envid)
		printf("envid: %s\n", m.envid);
	printf("sender: %s\n", m.from);
	for (i = 0; i < m.n_rcpts; i++)
		cat_rcpt(&m.rcpts[i]);
	if (m.held)
		printf("held: yes (idemrelayctl release %s)\n", qid);
	printf("*** MESSAGE CONTENTS %s ***\n", qid);
	fwrite(m.data, 1, m.data_len, stdout);
	printf("*** MESSAGE FILE END %s ***\n", qid);
	store_msg_free(&m);
	return 0;
}

/* print_qids - a reply's list of QIDs, space-separated, after a label */
static void print_qids(const char *reply, const char *name, const char *label)
{
	struct buf out = BUF_INIT;

	reply_qids(reply, name, " ", "", &out);
	if (out.len)
		printf("%s%s\n", label, out.data);
	buf_free(&out);
}

/*
 * cmd_forget - delete a key's claims. x->forget NULL: refused while a message
 * of the key is queued (a resubmission would be queued and delivered as
 * well); "--force": forgotten anyway; "--drop": that message dropped too.
 */
static int cmd_forget(struct ctl *x, const char *key)
{
	char err[1024];
	struct buf reply = BUF_INIT, line = BUF_INIT, ql = BUF_INIT;
	long long claims = 0;

	line_arg(x, "the key", key, 1);
	if (x->user)
		line_arg(x, "the user name (-u)", x->user, 0);
	if (x->user && (strchr(x->user, ' ') || x->user[0] == '-'))
		ctl_fail(x, "bad user name: %s", x->user);
	buf_printf(&line, "forget %s%s%s", x->forget ? x->forget : "", x->forget ? " " : "",
		   x->user ? x->user : "-");
	line_keys(key, &line);
	act(x, &line, &reply);
	if (!reply_ok(x, &reply, err, sizeof(err))) {
		if (strncmp(err, "unknown key", 11) == 0)
			ctl_fail(x, "unknown key %s%s%s", key, x->user ? " for user " : "",
				 x->user ? x->user : "");
		if (strcmp(err, "still queued") == 0 && x->json) {
			printf("%s\n", reply.data);	/* with "queued": [QIDs], for scripts */
			exit(1);
		}
		if (strcmp(err, "still queued") == 0) {
			reply_qids(reply.data, "queued", " ", "", &ql);
			ctl_fail(x, "%s: not forgotten: its message %s is still queued. Forgetting the "
				 "key now would let the next submission queue a second copy, and "
				 "both would be delivered. Wait until it has left the queue "
				 "(idemrelayctl show %s), or add --drop to drop the queued copy "
				 "too, or --force to forget anyway (the queued copy is still "
				 "delivered)", key, ql.len ? ql.data : "", key);
		}
		ctl_fail(x, "%s", err);
	}
	json_get_int(reply.data, "claims", &claims);
	if (x->json) {
		printf("%s\n", reply.data);
	} else {
		printf("%s: %lld claim%s deleted; its next submission is a new message\n", key,
		       claims, claims == 1 ? "" : "s");
		print_qids(reply.data, "qids", "  messages: ");
		print_qids(reply.data, "dropped", "  dropped from the queue: ");
		print_qids(reply.data, "queued", "  still queued, and still to be delivered: ");
	}
	buf_free(&reply);
	buf_free(&line);
	buf_free(&ql);
	return 0;
}

/* ctl_command - the handler of a known command given the arguments it takes, or say what is wrong */
static ctl_run *ctl_command(struct ctl *x, int nargs)
{
	static const struct {
		const char *name, *arg;		/* arg NULL: none */
		ctl_run *run;
		const char *list, *done;	/* set: a selection (--from/--to instead of arg) */
	} cmds[] = {
		{"queue", NULL, ctl_queue, NULL, NULL}, {"show", "a QID or a key", ctl_show, NULL, NULL},
		{"cat", "a QID", cmd_cat, NULL, NULL}, {"stats", NULL, ctl_stats, NULL, NULL},
		{"flush", NULL, cmd_flush, NULL, NULL}, {"retry", "a QID", cmd_retry, NULL, NULL},
		{"forget", "a key", cmd_forget, NULL, NULL},
		{"drop", "a QID, a key or ALL", cmd_select, "dropped", "dropped from the queue"},
		{"hold", "a QID, a key or ALL", cmd_select, "held", "on hold"},
		{"release", "a QID, a key or ALL", cmd_select, "released", "released from hold"},
		{"reroute", "a QID, a key or ALL", cmd_select, "rerouted", "rerouted"},
	};
	const char *cmd = x->cmd;
	size_t i;

	for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		if (strcmp(cmd, cmds[i].name) != 0)
			continue;
		if ((x->from || x->to) && !cmds[i].list)
			ctl_misuse(x, "--from and --to go with drop, hold, release and reroute only");
		if ((x->from || x->to) && nargs != 0)
			ctl_misuse(x, "%s takes --from/--to or one argument, not both", cmd);
		if (!(x->from || x->to) && cmds[i].arg && nargs != 1)
			ctl_misuse(x, "%s takes one argument, %s; %d given", cmd, cmds[i].arg, nargs);
		if (!(x->from || x->to) && !cmds[i].arg && nargs != 0)
			ctl_misuse(x, "%s takes no argument; %d given", cmd, nargs);
		if (x->forget && strcmp(cmd, "forget") != 0)
			ctl_misuse(x, "--force and --drop go with forget only");
		x->list = cmds[i].list;
		x->done = cmds[i].done;
		return cmds[i].run;
	}
	ctl_misuse(x, "unknown command \"%.100s\": one of %s (idemrelayctl -h)", cmd,
		   CTL_COMMANDS);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "json", no_argument, NULL, 'j' },
		{ "user", required_argument, NULL, 'u' },
		{ "force", no_argument, NULL, 'F' },
		{ "drop", no_argument, NULL, 'D' },
		{ "from", required_argument, NULL, 'f' },
		{ "to", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct ctl x = { 0 };
	const char *path = NULL, *arg;
	ctl_run *run;
	char err[512];
	int ch, rc;

	while ((ch = getopt_long(argc, argv, "c:ju:h", opts, NULL)) != -1) {
		switch (ch) {
		case 'c':
			path = optarg;
			break;
		case 'j':
			x.json = 1;
			break;
		case 'u':
			x.user = optarg;
			break;
		case 'f':
			x.from = optarg;
			break;
		case 't':
			x.to = optarg;
			break;
		case 'F':
		case 'D':
			if (x.forget)
				usage(2);
			x.forget = ch == 'F' ? "--force" : "--drop";
			break;
		case 'h':
			usage(0);
		default:
			usage(2);
		}
	}
	if (optind >= argc)
		ctl_misuse(&x, "no command given: one of %s (idemrelayctl -h)", CTL_COMMANDS);
	x.cmd = argv[optind];
	arg = optind + 1 < argc ? argv[optind + 1] : NULL;
	run = ctl_command(&x, argc - optind - 1);
	log_setup("idemrelayctl", 0, LOG_LEVEL_ERROR);
	if (conf_load(&x.cf, path, err, sizeof(err)) < 0)
		ctl_fail(&x, "%s", err);
	x.now = clock_us();

	rc = run(&x, arg);		/* ctl_command() let through its arguments only */
	store_close(x.st);
	conf_free(&x.cf);
	return rc;
}
