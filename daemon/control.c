/*
 * NAME
 *	control 3
 * SUMMARY
 *	the admin thread: control socket requests, duplicate counts, story expiry
 * DESCRIPTION
 *	One thread (util/admin.h: several connections at once, each with a
 *	two-second budget in all to send its line), which also writes the
 *	duplicate counts and expires stories on its ticks: operator
 *	requests are rare and quick, and none of this runs on the SMTP
 *	event loop. The operator's actions are queue_admin.c's, the ones
 *	idemrelayctl runs itself when no daemon does, here given the
 *	delivery scheduler, so that an operator's drop can never race a
 *	delivery thread: a message being delivered at that moment is
 *	refused with "try again".
 *
 *	The duplicate counts the event loop keeps (relay/dupcount.h) are
 *	written here once a second, and at stop.
 * DIAGNOSTICS
 *	control: flush
 *	and the actions' lines (queue/queue_admin.c)
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "../relay/dupcount.h"
#include "../queue/metrics.h"
#include "../queue/qid.h"
#include "../queue/queue_admin.h"
#include "../util/admin.h"
#include "../util/buf.h"
#include "../util/clock.h"
#include "../util/json.h"
#include "../util/log.h"
#include "control.h"

#define CONTROL_BACKLOG	16
#define TICK_MS		250		/* how often the timers below are looked at */
#define PERSIST_EVERY	1000000LL	/* microseconds */
#define EXPIRE_EVERY	10000000LL
#define EXPIRE_BATCH	1000		/* stories expired per transaction: a short write */
#define EXPIRE_BUDGET	100000LL	/* per tick; a backlog goes on at the next tick */

struct control {
	const struct conf *c;		/* not owned */
	struct store *st;		/* not owned */
	struct deliver *dl;		/* not owned */
	struct dupcount *dc;		/* not owned */
	int lfd;			/* owned: the socket, listening, or -1 */
	struct admin *admin;		/* owned: the thread, a copy of lfd */
	struct queue_admin_sched sched;	/* the operator's actions' view of dl */
	int64_t started;
	int64_t last_persist, last_expire;	/* admin thread only */
	int expire_failed;			/* logged once until a pass works */
};

static const char *bound;	/* the socket this process bound and has not removed */

/*
 * unbind - remove the socket this process bound: at control_close(), or
 * at an exit before it (a fatal error anywhere, from the bind on), which
 * would leave it there with nothing listening, refusing non-root users
 */
static void unbind(void)
{
	if (bound)
		unlink(bound);
	bound = NULL;
}

/* persist - move the pending duplicate counts into the stories */
static void persist(struct control *ctl)
{
	size_t n;
	int err;

	if ((err = dupcount_persist(ctl->dc, ctl->st, &n)) != 0)
		msg_warn("control: duplicate counts of %zu messages not recorded: %s", n,
			 store_strerror(err));
}

/* do_count - duplicates answered with a QID: written plus pending */
static void do_count(struct control *ctl, const char *qid, struct buf *out)
{
	uint64_t dups, mism;
	int known = dupcount_get(ctl->dc, ctl->st, qid, &dups, &mism) == 0;

	buf_printf(out, "{\"ok\":true,\"qid\":\"%s\",\"known\":%s,\"duplicates\":%llu,"
		   "\"mismatches\":%llu}", qid, known ? "true" : "false",
		   (unsigned long long) dups, (unsigned long long) mism);
}

/* do_stats - the counters since start */
static void do_stats(struct control *ctl, struct buf *out)
{
	struct metrics_snapshot s;
	struct store_stats ss = { 0 };
	size_t i;
	int up;

	metrics_snapshot(&s);
	up = store_stats(ctl->st, &ss, 0) == 0;	/* the store as this daemon sees it */
	buf_printf(out, "{\"ok\":true,\"pid\":%ld,\"uptime\":%lld,\"store\":{\"backend\":\"%s\","
		   "\"up\":%s,\"outages\":%llu,\"replication_waiting\":%llu,"
		   "\"replication_waits\":%llu,\"voided\":%llu},\"counters\":{", (long) getpid(),
		   (long long) ((clock_us() - ctl->started) / 1000000), store_name(ctl->c),
		   up ? "true" : "false", (unsigned long long) ss.reach.outages,
		   (unsigned long long) ss.reach.repl_waiting, (unsigned long long) ss.reach.repl_waits,
		   (unsigned long long) ss.reach.voided);
	for (i = 0; i < METRICS_N_COUNTERS; i++)
		buf_printf(out, "%s\"%s\":%llu", i ? "," : "", metrics_name(i),
			   (unsigned long long) s.counters[i]);
	buf_printf(out, "}");
	if (s.upstream.on)
		buf_printf(out, ",\"upstream\":{\"rate\":%.1f,\"concurrency\":%d,\"sessions\":%d,"
			   "\"throttled\":%s,\"nodes\":%d,\"throttle_episodes\":%llu}",
			   s.upstream.rate, s.upstream.concurrency, s.upstream.active,
			   s.upstream.throttled ? "true" : "false", s.upstream.nodes,
			   (unsigned long long) s.upstream.episodes);
	for (i = 0; i < s.n_routes; i++)	/* each route's upstream group (names are tokens) */
		buf_printf(out, "%s{\"route\":\"%s\",\"rate\":%.1f,\"concurrency\":%d,"
			   "\"sessions\":%d,\"throttled\":%s,\"throttle_episodes\":%llu}%s",
			   i ? "," : ",\"routes\":[", s.routes[i].name, s.routes[i].u.rate,
			   s.routes[i].u.concurrency, s.routes[i].u.active,
			   s.routes[i].u.throttled ? "true" : "false",
			   (unsigned long long) s.routes[i].u.episodes, i + 1 == s.n_routes ? "]" : "");
	buf_printf(out, "}");
}

/* dispatch - one request line to one reply */
static void dispatch(struct control *ctl, char *line, struct buf *out)
{
	char *save = NULL, *cmd = strtok_r(line, " \t", &save);
	char *rest = save ? save + strspn(save, " \t") : NULL;

	if (cmd == NULL) {
		json_error(out, "empty request");
		return;
	}
	if ((strcmp(cmd, "retry") == 0 || strcmp(cmd, "count") == 0) && !qid_valid(rest)) {
		json_error(out, "%s: bad or missing QID", cmd);
		return;
	}
	if (strcmp(cmd, "ping") == 0) {
		buf_printf(out, "{\"ok\":true,\"pid\":%ld}", (long) getpid());
	} else if (strcmp(cmd, "flush") == 0) {
		msg_info("control: flush");
		deliver_flush(ctl->dl);
		buf_printf(out, "{\"ok\":true}");
	} else if (strcmp(cmd, "retry") == 0) {
		queue_admin_retry(ctl->st, &ctl->sched, rest, out);
	} else if (strcmp(cmd, "drop") == 0 || strcmp(cmd, "hold") == 0
		   || strcmp(cmd, "release") == 0 || strcmp(cmd, "reroute") == 0
		   || strcmp(cmd, "forget") == 0) {
		queue_admin_request(ctl->st, &ctl->sched, ctl->c, cmd, rest ? rest : (char *) "",
				    clock_us(), out);
	} else if (strcmp(cmd, "count") == 0) {
		do_count(ctl, rest, out);
	} else if (strcmp(cmd, "stats") == 0) {
		do_stats(ctl, out);
	} else {
		json_error(out, "unknown request %.40s", cmd);
	}
}

/* line_complete - admin_ops: a request is one line */
static int line_complete(const char *req, size_t len)
{
	return memchr(req, '\n', len) != NULL;
}

/*
 * line_cut - the request line of req[0..len) NUL-terminated in place:
 * without its end (LF or CR LF), it must hold no control character. A CR
 * or LF before its end is refused, not cut at: what follows would be
 * lost, as a --to lost after an LF in a --from pattern widens a drop.
 */
static int line_cut(char *req, size_t len)
{
	size_t i;

	if (len && req[len - 1] == '\n')
		len--;
	if (len && req[len - 1] == '\r')
		len--;
	for (i = 0; i < len; i++)
		if ((unsigned char) req[i] < ' ' || req[i] == 0x7f)
			return -1;
	req[len] = 0;
	return 0;
}

/* serve - admin_ops: a line in, a line out */
static void serve(void *arg, int fd, char *req, size_t len, int cut, struct buf *out)
{
	struct control *ctl = arg;
	struct ucred cred;
	socklen_t cl = sizeof(cred);

	/* the socket is 0600 already; this also holds if its mode was changed */
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0
	    && cred.uid != 0 && cred.uid != geteuid()) {
		json_error(out, "permission denied");
	} else if (cut || req[0] == 0) {
		json_error(out, "no request line");
	} else if (line_cut(req, len) != 0) {
		json_error(out, "a control character in the request line: none is allowed");
	} else {
		dispatch(ctl, req, out);
	}
	buf_putc(out, '\n');
}

/*
 * expire - delete the stories that are due, a batch per transaction,
 * until a batch finds none, for at most EXPIRE_BUDGET: a backlog (a busy
 * day, a daemon that was down) goes on at the next tick instead of
 * waiting EXPIRE_EVERY, so expiry keeps up with any rate the store can
 * write. A batch may delete fewer than it went through (an index entry
 * whose story went another way is deleted uncounted), so only none
 * deleted means done.
 */
static void expire(struct control *ctl, int64_t now)
{
	int n;

	do
		n = store_hist_expire(ctl->st, now, EXPIRE_BATCH);
	while (n > 0 && clock_us() - now < EXPIRE_BUDGET);
	if (n < 0 && !ctl->expire_failed)
		msg_warn("control: expiring old stories: %s (will try again)", store_strerror(n));
	ctl->expire_failed = n < 0;
	if (n <= 0)
		ctl->last_expire = now;
}

/* tick - admin_ops: write the duplicate counts, expire old stories */
static void tick(void *arg)
{
	struct control *ctl = arg;
	int64_t now = clock_us();

	if (now - ctl->last_persist >= PERSIST_EVERY) {
		persist(ctl);
		ctl->last_persist = now;
	}
	if (now - ctl->last_expire >= EXPIRE_EVERY)
		expire(ctl, now);
}

/*
 * control_socket_check - can the control socket be made at path: short
 * enough, and nothing but a stale socket there (not one in use)?
 */
int control_socket_check(const char *path, char *why, size_t whylen)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	struct stat sb;
	int probe, live;

	if (strlen(path) >= sizeof(sun.sun_path)) {
		snprintf(why, whylen, "socket path longer than %zu characters: choose a "
			 "shorter one", sizeof(sun.sun_path) - 1);
		return -1;
	}
	if (lstat(path, &sb) < 0)
		return 0;
	if (!S_ISSOCK(sb.st_mode)) {
		snprintf(why, whylen, "%s exists and is not a socket: remove it or choose "
			 "another path", path);
		return -1;
	}
	strcpy(sun.sun_path, path);
	probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	live = probe >= 0 && connect(probe, (struct sockaddr *) &sun, sizeof(sun)) == 0;
	if (probe >= 0)
		close(probe);
	if (live) {
		snprintf(why, whylen, "%s is in use: is another idemrelay running? Stop it "
			 "or choose another path", path);
		return -1;
	}
	return 0;
}

/* control_listen - the UNIX socket, mode 0600; a stale one is replaced */
static int control_listen(const char *path)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	struct stat sb;
	char why[512];
	int fd;

	if (control_socket_check(path, why, sizeof(why)) < 0)
		msg_fatal("control: %s", why);
	strcpy(sun.sun_path, path);
	if (lstat(path, &sb) == 0 && unlink(path) < 0)
		msg_fatal("control: cannot remove stale socket %s: %m", path);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0)
		msg_fatal("control: socket: %m");
	if (bind(fd, (struct sockaddr *) &sun, sizeof(sun)) < 0)
		msg_fatal("control: bind %s: %m", path);
	bound = path;
	atexit(unbind);
	/* the umask left it at most 0777 & ~umask for a moment; connect needs write */
	if (chmod(path, 0600) < 0)
		msg_fatal("control: chmod %s: %m", path);
	if (listen(fd, CONTROL_BACKLOG) < 0)
		msg_fatal("control: listen %s: %m", path);
	return fd;
}

/* control_open - the socket, listening, if configured; nothing served yet */
struct control *control_open(const struct conf *c)
{
	struct control *ctl = xcalloc(1, sizeof(*ctl));

	ctl->c = c;
	ctl->lfd = c->control ? control_listen(c->control) : -1;
	return ctl;
}

/* control_start - the admin thread, serving the socket if there is one */
void control_start(struct control *ctl, struct store *st, struct deliver *dl,
		   struct dupcount *dc)
{
	/* a copy for the thread, which closes it at its stop: this one keeps listening */
	int lfd = ctl->lfd < 0 ? -1 : fcntl(ctl->lfd, F_DUPFD_CLOEXEC, 0);

	if (ctl->lfd >= 0 && lfd < 0)
		msg_fatal("control: dup: %m");
	ctl->st = st;
	ctl->dl = dl;
	ctl->dc = dc;
	ctl->sched = deliver_admin_sched(dl);
	ctl->started = ctl->last_persist = clock_us();
	if (ctl->c->control)
		msg_info("control socket %s", ctl->c->control);
	ctl->admin = admin_start(lfd, &(struct admin_ops) {
		.name = "control", .complete = line_complete, .serve = serve,
		.tick = tick, .tick_ms = TICK_MS, .pulse = lfd >= 0, .arg = ctl });
}

/* control_stop - stop serving, write the last counts */
void control_stop(struct control *ctl)
{
	admin_stop(ctl->admin);
	persist(ctl);
}

/* control_close - close and remove the socket */
void control_close(struct control *ctl)
{
	if (ctl->lfd >= 0)
		close(ctl->lfd);
	unbind();
	free(ctl);
}
