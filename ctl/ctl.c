/*
 * NAME
 *	idemrelayctl 8
 * SUMMARY
 *	look at and act on idemrelay's queue, keys and stories
 * SYNOPSIS
 *	idemrelayctl [-c config] [--json] [-u user] [--force|--drop] command [argument]
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
 *	flush		every deferred message is attempted now
 *	retry QID	one message is attempted now
 *	drop QID	the message leaves the queue, never delivered
 *	forget KEY	the key's claims are deleted: its next submission
 *			is a new message (-u: only that AUTH user's). While
 *			a message of the key is still queued it is refused
 *			(the resubmission would be delivered as well as the
 *			queued copy) unless --drop (the copy is dropped too)
 *			or --force (forgotten anyway)
 *
 *	queue, show and stats read the LMDB store directly, read-only, so
 *	they work whether or not the daemon runs. flush and retry need the
 *	daemon (over the control socket). drop and forget go through the
 *	daemon when it runs, so that its scheduler knows; when it does not,
 *	they write to the store directly.
 * DIAGNOSTICS
 *	Exit 0 on success; 1 with a message for an unknown QID or key, an
 *	absent store ("no store at PATH"), a PostgreSQL store that cannot be
 *	reached ("FILE:LINE: store.url: why", as idemrelay -t says it), a
 *	daemon that is needed and not running, or any failure; 2 for bad usage.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "../util/clock.h"
#include "../util/hash.h"
#include "../util/log.h"
#include "ctl.h"
#include "../util/json.h"
#include "../queue/keys.h"

#define REPLY_MAX	(1u << 20)
#define TIMEOUT_MS	10000

#define CTL_COMMANDS "queue, show, stats, flush, retry, drop, forget"

static void ctl_misuse(struct ctl *x, const char *fmt, ...)
	__attribute__((noreturn, format(printf, 2, 3)));

/* ctl_check_args - a known command with the arguments it takes, or say what is wrong */
static void ctl_check_args(struct ctl *x, const char *cmd, int nargs)
{
	static const struct {
		const char *name, *arg;		/* arg NULL: none */
	} cmds[] = {
		{"queue", NULL}, {"show", "a QID or a key"}, {"stats", NULL}, {"flush", NULL},
		{"retry", "a QID"}, {"drop", "a QID"}, {"forget", "a key"},
	};
	size_t i;

	for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		if (strcmp(cmd, cmds[i].name) != 0)
			continue;
		if (cmds[i].arg && nargs != 1)
			ctl_misuse(x, "%s takes one argument, %s; %d given", cmd, cmds[i].arg, nargs);
		if (!cmds[i].arg && nargs != 0)
			ctl_misuse(x, "%s takes no argument; %d given", cmd, nargs);
		return;
	}
	ctl_misuse(x, "unknown command \"%.100s\": one of %s (idemrelayctl -h)", cmd,
		   CTL_COMMANDS);
}

/* usage - say how to run it */
static void usage(int rc) __attribute__((noreturn));
static void usage(int rc)
{
	fprintf(rc ? stderr : stdout,
		"usage: idemrelayctl [-c config] [--json] [-u user] command [argument]\n"
		"  queue            list the queued messages\n"
		"  show QID|KEY     a message's story, or those of a key's messages\n"
		"  stats            store figures and the daemon's counters\n"
		"  flush            attempt every deferred message now (daemon)\n"
		"  retry QID        attempt one message now (daemon)\n"
		"  drop QID         remove a message from the queue\n"
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
		buf_printf(&b, "{\"ok\":false,\"error\":");
		json_str(&b, text);
		printf("%s}\n", b.data);
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

/* store_rw - the store opened for writing, when the daemon is not there to write */
static struct store *store_rw(struct ctl *x)
{
	char err[1024];

	if (x->cf.store.backend == CONF_STORE_POSTGRESQL)	/* the same database either way */
		return ctl_store(x);
	if (store_open(&x->st, &x->cf, STORE_WRITER, err, sizeof(err)) != 0)
		ctl_fail(x, "%s", err);
	return x->st;
}

/* read_reply - everything the daemon sends until it closes */
static int read_reply(int fd, struct buf *reply)
{
	struct pollfd p = { fd, POLLIN, 0 };
	char chunk[4096];
	ssize_t n;

	for (;;) {
		if (poll(&p, 1, TIMEOUT_MS) <= 0)
			return -1;
		if ((n = read(fd, chunk, sizeof(chunk))) < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			return reply->len ? 0 : -1;
		if (reply->len + (size_t) n > REPLY_MAX)
			return -1;
		buf_append(reply, chunk, (size_t) n);
	}
}

/* ctl_request - a line to the control socket, its JSON reply back */
int ctl_request(struct ctl *x, const char *line, struct buf *reply, char *why, size_t whylen)
{
	struct sockaddr_un sun;
	size_t len = strlen(line);
	int fd;

	buf_reset(reply);
	if (x->cf.control == NULL) {
		snprintf(why, whylen, "no control socket is configured (control = \"...\")");
		return -1;
	}
	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	if (strlen(x->cf.control) >= sizeof(sun.sun_path))
		ctl_fail(x, "control socket path too long: %s", x->cf.control);
	strcpy(sun.sun_path, x->cf.control);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		ctl_fail(x, "socket: %s", strerror(errno));
	if (connect(fd, (struct sockaddr *) &sun, sizeof(sun)) < 0) {
		if (errno == EACCES || errno == EPERM)	/* it runs: we may not talk to it */
			snprintf(why, whylen, "cannot reach the daemon: control socket %s: %s: run "
				 "as root or as the user the daemon runs as", x->cf.control,
				 strerror(errno));
		else
			snprintf(why, whylen, "the daemon is not running (control socket %s: %s)",
				 x->cf.control, strerror(errno));
		close(fd);
		return -1;
	}
	if (write(fd, line, len) != (ssize_t) len || write(fd, "\n", 1) != 1
	    || read_reply(fd, reply) != 0) {
		close(fd);
		ctl_fail(x, "no reply from the daemon on %s", x->cf.control);
	}
	close(fd);
	while (reply->len && (reply->data[reply->len - 1] == '\n'))
		reply->data[--reply->len] = 0;
	return 0;
}

/* need_daemon - a request that only the daemon can carry out; the reply if ok */
static void need_daemon(struct ctl *x, const char *line, struct buf *reply)
{
	char why[512], err[1024];
	int ok = 0;

	if (ctl_request(x, line, reply, why, sizeof(why)) != 0)
		ctl_fail(x, "%s", why);
	if (json_get_bool(reply->data, "ok", &ok) != 0)
		ctl_fail(x, "the daemon replied with something else than JSON: %.200s", reply->data);
	if (!ok) {
		if (json_get_str(reply->data, "error", err, sizeof(err)) != 0)
			snprintf(err, sizeof(err), "the daemon refused: %.200s", reply->data);
		ctl_fail(x, "%s", err);
	}
}

/* is_qid - QID syntax: 12-20 of [0-9A-Z] */
static int is_qid(const char *s)
{
	size_t n = strlen(s), i;

	if (n < 12 || n > 20 || n >= STORE_QID_SIZE)
		return 0;
	for (i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'A' && s[i] <= 'Z')))
			return 0;
	return 1;
}

/* ctl_key_hashes - KEY as the daemon would have derived it from a header/ENVID or a Message-ID */
size_t ctl_key_hashes(const char *key, uint8_t out[CTL_MAX_KEYS][STORE_HASH_LEN])
{
	char id[1000], hex[2 * HASH_LEN + 1];
	uint8_t d[HASH_LEN];
	size_t n = strlen(key), a = 0;

	keys_index_hash(key, out[0]);
	/* a Message-ID key is the hex SHA-256 of the ID without <> and spaces */
	while (a < n && (key[a] == ' ' || key[a] == '\t' || key[a] == '<'))
		a++;
	while (n > a && (key[n - 1] == ' ' || key[n - 1] == '\t' || key[n - 1] == '>'))
		n--;
	if (n == a || n - a >= sizeof(id))
		return 1;
	memcpy(id, key + a, n - a);
	id[n - a] = 0;
	hash_once(id, strlen(id), d);
	hash_hex(d, HASH_LEN, hex);
	keys_index_hash(hex, out[1]);
	return 2;
}

/* cmd_flush - every deferred message due now */
static int cmd_flush(struct ctl *x)
{
	struct buf reply = BUF_INIT;

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

	if (!is_qid(qid))
		ctl_fail(x, "not a QID: %s", qid);
	buf_printf(&line, "retry %s", qid);
	need_daemon(x, line.data, &reply);
	json_get_str(reply.data, "state", state, sizeof(state));
	if (x->json)
		printf("%s\n", reply.data);
	else if (strcmp(state, "active") == 0)
		printf("%s: being delivered right now\n", qid);
	else
		printf("%s: will be attempted now\n", qid);
	buf_free(&reply);
	buf_free(&line);
	return 0;
}

/* cmd_drop - through the daemon, or on the store if the daemon is not running */
static int cmd_drop(struct ctl *x, const char *qid)
{
	struct buf reply = BUF_INIT, line = BUF_INIT;
	char why[512], err[1024];
	struct store_story s;
	int ok = 0, rc;

	if (!is_qid(qid))
		ctl_fail(x, "not a QID: %s", qid);
	buf_printf(&line, "drop %s", qid);
	if (ctl_request(x, line.data, &reply, why, sizeof(why)) == 0) {
		if (json_get_bool(reply.data, "ok", &ok) != 0 || !ok) {
			if (json_get_str(reply.data, "error", err, sizeof(err)) != 0)
				snprintf(err, sizeof(err), "%.200s", reply.data);
			ctl_fail(x, "%s", err);
		}
	} else {
		/* no daemon to race: the store alone knows the queue */
		if ((rc = store_msg_drop(store_rw(x), qid)) == STORE_ENOTFOUND) {
			if (store_story_get(x->st, qid, &s) == 0)
				ctl_fail(x, "%s is not queued: it %s", qid,
					 s.dropped ? "was dropped" : "has left the queue");
			ctl_fail(x, "unknown QID %s", qid);
		}
		if (rc != 0)
			ctl_fail(x, "cannot drop %s: %s", qid, store_strerror(rc));
		buf_reset(&reply);
		buf_printf(&reply, "{\"ok\":true,\"qid\":\"%s\",\"offline\":true}", qid);
	}
	if (x->json)
		printf("%s\n", reply.data);
	else
		printf("%s: dropped from the queue\n", qid);
	buf_free(&reply);
	buf_free(&line);
	return 0;
}

/* forget_list - a set of QIDs as a JSON list's items */
static void forget_list(struct buf *b, char (*q)[STORE_QID_SIZE], size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		buf_printf(b, "%s\"%s\"", i ? "," : "", q[i]);
}

/*
 * forget_offline - forget on the store itself, with the daemon's rules for
 * queued messages (daemon/control.c do_forget); the reply as it would give it
 */
static void forget_offline(struct ctl *x, uint8_t (*h)[STORE_HASH_LEN], size_t n,
			   const char *mode, struct buf *reply)
{
	char (*queued)[STORE_QID_SIZE] = NULL, (*q)[STORE_QID_SIZE];
	struct store_forget f;
	size_t i, j, claims = 0, n_qids = 0, nq = 0, m;
	struct buf qids = BUF_INIT, qlist = BUF_INIT;
	int err;

	store_rw(x);
	for (i = 0; i < n; i++) {
		if ((err = store_key_queued(x->st, h[i], x->user, &q, &m)) != 0)
			ctl_fail(x, "cannot forget: %s", store_strerror(err));
		queued = xrealloc(queued, (nq + m + 1) * sizeof(*queued));
		memcpy(queued + nq, q, m * sizeof(*q));
		nq += m;
		free(q);
	}
	forget_list(&qlist, queued, nq);
	if (nq && mode == NULL) {
		buf_printf(reply, "{\"ok\":false,\"error\":\"still queued\",\"queued\":[%s]}",
			   qlist.data);
		goto done;
	}
	for (i = 0; mode && strcmp(mode, "--drop") == 0 && i < nq; i++)
		if ((err = store_msg_drop(x->st, queued[i])) != 0 && err != STORE_ENOTFOUND)
			ctl_fail(x, "cannot drop %s: %s", queued[i], store_strerror(err));
	for (i = 0; i < n; i++) {
		if ((err = store_key_forget(x->st, h[i], x->user, x->now, &f)) == STORE_ENOTFOUND)
			continue;
		if (err != 0)
			ctl_fail(x, "cannot forget: %s", store_strerror(err));
		claims += f.claims;
		for (j = 0; j < f.n_qids; j++)
			buf_printf(&qids, "%s\"%s\"", n_qids++ ? "," : "", f.qids[j]);
		store_forget_free(&f);
	}
	if (n_qids == 0)
		buf_printf(reply, "{\"ok\":false,\"error\":\"unknown key\"}");
	else
		buf_printf(reply, "{\"ok\":true,\"claims\":%zu,\"qids\":[%s],\"%s\":[%s],"
			   "\"offline\":true}", claims, qids.data,
			   mode && strcmp(mode, "--drop") == 0 ? "dropped" : "queued",
			   qlist.data ? qlist.data : "");
done:
	free(queued);
	buf_free(&qids);
	buf_free(&qlist);
}

/* print_qids - a reply's list of QIDs, space-separated, after a label */
static void print_qids(const char *reply, const char *name, const char *label)
{
	const char *p, *q;
	size_t len;

	if (json_get(reply, name, &p, &len) != 0 || len <= 2)
		return;
	printf("%s", label);
	for (q = p; q < p + len; q++)
		if (*q != '[' && *q != ']' && *q != '"')
			putchar(*q == ',' ? ' ' : *q);
	printf("\n");
}

/*
 * cmd_forget - delete a key's claims. mode NULL: refused while a message
 * of the key is queued (a resubmission would be queued and delivered as
 * well); "--force": forgotten anyway; "--drop": that message dropped too.
 */
static int cmd_forget(struct ctl *x, const char *key, const char *mode)
{
	uint8_t h[CTL_MAX_KEYS][STORE_HASH_LEN];
	char hex[2 * HASH_LEN + 1], why[512], err[1024];
	struct buf reply = BUF_INIT, line = BUF_INIT, ql = BUF_INIT;
	const char *p;
	size_t n = ctl_key_hashes(key, h), i, len;
	long long claims = 0;
	int ok = 0;

	if (x->user && (strchr(x->user, ' ') || x->user[0] == '-'))
		ctl_fail(x, "bad user name: %s", x->user);
	buf_printf(&line, "forget %s%s%s", mode ? mode : "", mode ? " " : "",
		   x->user ? x->user : "-");
	for (i = 0; i < n; i++) {
		hash_hex(h[i], HASH_LEN, hex);
		buf_printf(&line, " %s", hex);
	}
	if (ctl_request(x, line.data, &reply, why, sizeof(why)) != 0)
		forget_offline(x, h, n, mode, &reply);
	if (json_get_bool(reply.data, "ok", &ok) != 0 || !ok) {
		if (json_get_str(reply.data, "error", err, sizeof(err)) != 0)
			snprintf(err, sizeof(err), "%.200s", reply.data);
		if (strncmp(err, "unknown key", 11) == 0)
			ctl_fail(x, "unknown key %s%s%s", key, x->user ? " for user " : "",
				 x->user ? x->user : "");
		if (strcmp(err, "still queued") == 0 && x->json) {
			printf("%s\n", reply.data);	/* with "queued": [QIDs], for scripts */
			exit(1);
		}
		if (strcmp(err, "still queued") == 0 && json_get(reply.data, "queued", &p, &len) == 0) {
			for (i = 0; i < len; i++)
				if (p[i] != '[' && p[i] != ']' && p[i] != '"')
					buf_putc(&ql, p[i] == ',' ? ' ' : p[i]);
			ctl_fail(x, "%s: not forgotten: its message %s is still queued. Forgetting the "
				 "key now would let the next submission queue a second copy, and "
				 "both would be delivered. Wait until it has left the queue "
				 "(idemrelayctl show %s), or add --drop to drop the queued copy "
				 "too, or --force to forget anyway (the queued copy is still "
				 "delivered)", key, ql.data, key);
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

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "json", no_argument, NULL, 'j' },
		{ "user", required_argument, NULL, 'u' },
		{ "force", no_argument, NULL, 'F' },
		{ "drop", no_argument, NULL, 'D' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct ctl x;
	const char *path = NULL, *cmd, *arg, *forget_mode = NULL;
	char err[512];
	int ch, rc, nargs;

	memset(&x, 0, sizeof(x));
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
		case 'F':
		case 'D':
			if (forget_mode)
				usage(2);
			forget_mode = ch == 'F' ? "--force" : "--drop";
			break;
		case 'h':
			usage(0);
		default:
			usage(2);
		}
	}
	if (optind >= argc)
		ctl_misuse(&x, "no command given: one of %s (idemrelayctl -h)", CTL_COMMANDS);
	cmd = argv[optind];
	arg = optind + 1 < argc ? argv[optind + 1] : NULL;
	nargs = argc - optind - 1;
	ctl_check_args(&x, cmd, nargs);
	if (forget_mode && strcmp(cmd, "forget") != 0)
		ctl_misuse(&x, "--force and --drop go with forget only");
	log_setup("idemrelayctl", 0, LOG_LEVEL_ERROR);
	if (conf_load(&x.cf, path, err, sizeof(err)) < 0)
		ctl_fail(&x, "%s", err);
	x.now = clock_us();

	/* ctl_check_args() let through a known command with its arguments only */
	if (strcmp(cmd, "queue") == 0)
		rc = ctl_queue(&x);
	else if (strcmp(cmd, "show") == 0)
		rc = ctl_show(&x, arg);
	else if (strcmp(cmd, "stats") == 0)
		rc = ctl_stats(&x);
	else if (strcmp(cmd, "flush") == 0)
		rc = cmd_flush(&x);
	else if (strcmp(cmd, "retry") == 0)
		rc = cmd_retry(&x, arg);
	else if (strcmp(cmd, "drop") == 0)
		rc = cmd_drop(&x, arg);
	else
		rc = cmd_forget(&x, arg, forget_mode);
	store_close(x.st);
	conf_free(&x.cf);
	return rc;
}
