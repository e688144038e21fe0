/*
 * NAME
 *	ctl_show 3
 * SUMMARY
 *	idemrelayctl queue, show and stats: reading the store for people and scripts
 * DESCRIPTION
 *	Everything here reads the store read-only (ctl_store()). A message's
 *	state is named as an operator knows it: "queued" (not attempted
 *	yet), "deferred" (attempted, waiting), "active" (its final dot may
 *	be out right now, or on a shared store a node holds its lease: "on
 *	NODE since TIME"), "held" (by the operator, until released), and
 *	once it left the queue "sent", "bounced",
 *	"unconfirmed", "finished" (recipients ended differently) or
 *	"dropped".
 *
 *	Duplicate counts: the daemon writes them to the stories about once
 *	a second. When it runs, `show` asks it for the exact figures (what
 *	is written plus what is not yet); otherwise the stories hold them all.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../queue/qid.h"
#include "../util/clock.h"
#include "ctl.h"
#include "../util/json.h"

#define US	1000000LL

/* rcpt_state - one recipient's state by name */
static const char *rcpt_state(const struct store_story *s, const struct store_rcpt *r)
{
	switch (r->state) {
	case STORE_RCPT_SENT:
		return "sent";
	case STORE_RCPT_BOUNCED:
		return "bounced";
	case STORE_RCPT_UNCONFIRMED:
		return "unconfirmed";
	default:
		if (s->dropped)
			return "dropped";
		return s->m.attempts > 0 ? "deferred" : "queued";
	}
}

/* msg_state - the message's state by name */
static const char *msg_state(const struct store_story *s)
{
	size_t i;

	if (s->queued && s->m.held)
		return "held";
	if (s->queued)
		return s->m.inflight || s->m.lease_node ? "active"
		    : s->m.attempts > 0 ? "deferred" : "queued";
	if (s->dropped)
		return "dropped";
	for (i = 1; i < s->m.n_rcpts; i++)
		if (s->m.rcpts[i].state != s->m.rcpts[0].state)
			return "finished";
	return s->m.n_rcpts ? rcpt_state(s, &s->m.rcpts[0]) : "finished";
}

/* fmt_dur - "3d04h", "2h05m", "4m12s", "12s" */
static const char *fmt_dur(char *out, size_t len, int64_t us)
{
	long long s = (us < 0 ? -us : us) / US;

	if (s >= 86400)
		snprintf(out, len, "%lldd%02lldh", s / 86400, s % 86400 / 3600);
	else if (s >= 3600)
		snprintf(out, len, "%lldh%02lldm", s / 3600, s % 3600 / 60);
	else if (s >= 60)
		snprintf(out, len, "%lldm%02llds", s / 60, s % 60);
	else
		snprintf(out, len, "%llds", s);
	return out;
}

/* fmt_next - "now", "in 45s" */
static const char *fmt_next(char *out, size_t len, int64_t next, int64_t now)
{
	char d[32];

	if (next <= now)
		snprintf(out, len, "now");
	else
		snprintf(out, len, "in %s", fmt_dur(d, sizeof(d), next - now));
	return out;
}

/* fmt_when - what comes next: "on NODE since TIME" under a node's lease, "held", "in 45s" */
static const char *fmt_when(char *out, size_t len, const struct store_msg *m, int64_t now)
{
	char t[32];

	if (m->held)
		snprintf(out, len, "on hold");
	else if (m->lease_node)
		snprintf(out, len, "on %s since %s", m->lease_node,
			 clock_iso(t, sizeof(t), m->lease_since));
	else
		fmt_next(out, len, m->next_attempt, now);
	return out;
}

/*
 * json_msg - "{"qid" ... "from":S": what queue and show both say of a
 * message; active_since is null unless a node's lease holds it
 */
static void json_msg(struct buf *b, const struct ctl *x, const struct store_story *s)
{
	buf_printf(b, "{\"qid\":\"%s\",\"state\":\"%s\"", s->m.qid, msg_state(s));
	json_time(b, ",\"accepted\":", s->m.accepted);
	buf_printf(b, ",\"age\":%lld,\"size\":%zu,\"attempts\":%d",
		   (long long) ((x->now - s->m.accepted) / US), s->m.data_len, s->m.attempts);
	json_time(b, ",\"next_attempt\":", s->queued ? s->m.next_attempt : 0);
	buf_printf(b, ",\"held\":%s", s->m.held ? "true" : "false");
	json_str(b, ",\"node\":", s->m.lease_node);
	json_time(b, ",\"active_since\":", s->m.lease_node ? s->m.lease_since : 0);
	json_str(b, ",\"from\":", s->m.from);
}

/* json_rcpts_end - ,"recipients":[...]} : the end of a message's object */
static void json_rcpts_end(struct buf *b, const struct store_story *s)
{
	size_t i;

	buf_printf(b, ",\"recipients\":[");
	for (i = 0; i < s->m.n_rcpts; i++) {
		json_str(b, i ? ",{\"addr\":" : "{\"addr\":", s->m.rcpts[i].addr);
		buf_printf(b, ",\"state\":\"%s\"", rcpt_state(s, &s->m.rcpts[i]));
		json_str(b, ",\"reply\":", s->m.rcpts[i].reply);
		buf_putc(b, '}');
	}
	buf_printf(b, "]}");
}

/* print_rcpts - each recipient's line: its state, and its last reply if any */
static void print_rcpts(const struct store_story *s, const char *indent)
{
	const struct store_rcpt *r;
	size_t i;

	for (i = 0; i < s->m.n_rcpts; i++) {
		r = &s->m.rcpts[i];
		printf("%sto=<%s> %s%s%s%s\n", indent, r->addr, rcpt_state(s, r),
		       r->reply ? " (" : "", r->reply ? r->reply : "", r->reply ? ")" : "");
	}
}

/* what the queue walk gathers */
struct queue_acc {
	struct ctl *x;
	struct buf out;			/* --json: the entries so far */
	size_t n;
};

/* queue_cb - one queued message */
static int queue_cb(void *arg, const struct store_msg *m)
{
	struct queue_acc *a = arg;
	struct store_story s = { .m = *m, .queued = 1 };	/* m borrowed */
	char t[64], n[160];

	if (a->x->json) {
		buf_printf(&a->out, "%s", a->n ? "," : "");
		json_msg(&a->out, a->x, &s);
		json_rcpts_end(&a->out, &s);
	} else {
		if (a->n == 0)
			printf("%-20s %9s  %-20s  %-8s  %8s  %s\n", "QID", "Size", "Arrival",
			       "State", "Attempts", "Next");
		printf("%-20s %9zu  %-20s  %-8s  %8d  %s\n", m->qid, m->data_len,
		       clock_iso(t, sizeof(t), m->accepted), msg_state(&s), m->attempts,
		       fmt_when(n, sizeof(n), m, a->x->now));
		printf("    from=<%s>\n", m->from);
		print_rcpts(&s, "    ");
	}
	a->n++;
	return 0;
}

/* ctl_queue - the queue listing */
int ctl_queue(struct ctl *x, const char *arg)
{
	struct queue_acc a = { x, BUF_INIT, 0 };
	int err;

	(void) arg;
	if ((err = store_queue_walk(ctl_store(x), 0, queue_cb, &a)) != 0)
		ctl_fail(x, "cannot read the queue: %s", store_strerror(err));
	if (x->json)
		printf("{\"ok\":true,\"count\":%zu,\"queue\":[%s]}\n", a.n, a.out.data ? a.out.data : "");
	else if (a.n == 0)
		printf("Queue is empty\n");
	else
		printf("-- %zu message%s in the queue\n", a.n, a.n == 1 ? "" : "s");
	buf_free(&a.out);
	return 0;
}

/* live_counts - the daemon's exact duplicate counts, if it runs */
static void live_counts(struct ctl *x, struct store_story *s)
{
	struct buf line = BUF_INIT, reply = BUF_INIT;
	char why[256];
	long long d, m;
	int ok = 0;

	buf_printf(&line, "count %s", s->m.qid);
	if (ctl_request(x, line.data, 1, &reply, why, sizeof(why)) == 0
	    && json_get_bool(reply.data, "ok", &ok) == 0 && ok
	    && json_get_int(reply.data, "duplicates", &d) == 0
	    && json_get_int(reply.data, "mismatches", &m) == 0) {
		s->duplicates = (uint32_t) d;
		s->mismatches = (uint32_t) m;
	}
	buf_free(&line);
	buf_free(&reply);
}

/* story_json - one story as a JSON object */
static void story_json(struct buf *b, struct ctl *x, const struct store_story *s)
{
	json_msg(b, x, s);
	buf_printf(b, ",\"queued\":%s", s->queued ? "true" : "false");
	json_str(b, ",\"client\":", s->m.client);
	json_str(b, ",\"user\":", s->m.user);
	json_str(b, ",\"route\":", s->m.route);
	json_str(b, ",\"envid\":", s->m.envid);
	buf_printf(b, ",\"smtputf8\":%s", s->m.smtputf8 ? "true" : "false");
	json_time(b, ",\"updated\":", s->updated);
	json_time(b, ",\"finished\":", s->finished);
	json_time(b, ",\"story_expires\":", s->expires);
	buf_printf(b, ",\"key\":%s", s->has_key ? "true" : "false");
	json_time(b, ",\"key_forgotten\":", s->forgotten);
	buf_printf(b, ",\"duplicates\":%u,\"mismatches\":%u", s->duplicates, s->mismatches);
	json_rcpts_end(b, s);
}

/* story_text - one story for people */
static void story_text(struct ctl *x, const struct store_story *s)
{
	char t[64], d[32], n[64];

	printf("%s: %s", s->m.qid, msg_state(s));
	if (s->queued && s->m.lease_node)
		printf(" on %s since %s", s->m.lease_node, clock_iso(t, sizeof(t), s->m.lease_since));
	if (s->queued && s->m.held)
		printf(": never delivered until released (idemrelayctl release %s)", s->m.qid);
	printf("\n");
	/* held mail does not age out; the operator should know what the release does */
	if (s->queued && s->m.held && x->now - s->m.accepted >= x->cf.retry.give_up * US)
		printf("  note        older than retry.give_up (%s): once released, an attempt "
		       "that fails bounces it\n", fmt_dur(d, sizeof(d), x->cf.retry.give_up * US));
	printf("  accepted    %s (%s ago) from %s%s%s\n", clock_iso(t, sizeof(t), s->m.accepted),
	       fmt_dur(d, sizeof(d), x->now - s->m.accepted), s->m.client,
	       s->m.user ? ", user " : "", s->m.user ? s->m.user : "");
	printf("  sender      <%s>%s%s, %zu bytes%s\n", s->m.from, s->m.envid ? ", envid " : "",
	       s->m.envid ? s->m.envid : "", s->m.data_len, s->m.smtputf8 ? ", SMTPUTF8" : "");
	/* the route decided at acceptance, and whether this configuration still has it */
	printf("  route       %s%s\n", s->m.route ? s->m.route : "default (upstream)",
	       s->m.route && conf_route_upstream(&x->cf, s->m.route) == NULL
	       ? ", not in the configuration: deferred until it is" : "");
	/* forgotten: no claim answers for it any more, whatever it was */
	if (s->has_key && s->forgotten)
		printf("  key         yes, but forgotten by the operator %s: its duplicates are "
		       "new messages", clock_iso(t, sizeof(t), s->forgotten));
	else
		printf("  key         %s", s->has_key ? "yes, claims answer its duplicates" : "none");
	printf("\n  duplicates  %u answered with this QID", s->duplicates);
	if (s->mismatches)
		printf(", %u refused as other content under its key", s->mismatches);
	printf("\n  attempts    %d", s->m.attempts);
	if (s->queued && !s->m.held && !s->m.lease_node)
		printf(", next %s", fmt_next(n, sizeof(n), s->m.next_attempt, x->now));
	else if (s->updated)
		printf(", last %s", clock_iso(t, sizeof(t), s->updated));
	printf("\n");
	print_rcpts(s, "  ");
	if (s->finished)
		printf("  left the queue %s%s; story kept until %s\n",
		       clock_iso(t, sizeof(t), s->finished), s->dropped ? " (dropped by the operator)" : "",
		       clock_iso(n, sizeof(n), s->expires));
}

/* key_qids - the QIDs filed under any form of the key */
static size_t key_qids(struct ctl *x, const char *key, char (**out)[STORE_QID_SIZE])
{
	uint8_t h[QUEUE_ADMIN_MAX_KEYS][STORE_HASH_LEN];
	char (*q)[STORE_QID_SIZE];
	size_t nh = ctl_key_hashes(key, h), i, j, k, n = 0, nq;
	int err;

	*out = NULL;
	for (i = 0; i < nh; i++) {
		if ((err = store_key_qids(ctl_store(x), h[i], &q, &nq)) == STORE_ENOTFOUND)
			continue;
		if (err != 0)
			ctl_fail(x, "cannot read the key index: %s", store_strerror(err));
		for (j = 0; j < nq; j++) {
			for (k = 0; k < n && strcmp((*out)[k], q[j]) != 0; k++)
				 /* void */ ;
			if (k < n)
				continue;
			*out = xrealloc(*out, (n + 1) * sizeof(**out));
			strcpy((*out)[n++], q[j]);
		}
		free(q);
	}
	return n;
}

/* ctl_show - a QID's story, or the stories under a key */
int ctl_show(struct ctl *x, const char *arg)
{
	char (*qids)[STORE_QID_SIZE] = NULL;
	struct store_story s;
	struct buf out = BUF_INIT;
	size_t n = 0, i, shown = 0;
	int err;

	ctl_store(x);
	if (qid_valid(arg) && (err = store_story_get(x->st, arg, &s)) == 0) {
		store_story_free(&s);
		qids = xcalloc(1, sizeof(*qids));
		strcpy(qids[0], arg);
		n = 1;
	} else if ((n = key_qids(x, arg, &qids)) == 0) {
		ctl_fail(x, "unknown QID or key: %s", arg);
	}
	for (i = 0; i < n; i++) {
		if ((err = store_story_get(x->st, qids[i], &s)) != 0)
			continue;		/* went between two reads */
		live_counts(x, &s);
		if (x->json) {
			buf_printf(&out, "%s", shown ? "," : "");
			story_json(&out, x, &s);
		} else {
			printf("%s", shown ? "\n" : "");
			story_text(x, &s);
		}
		shown++;
		store_story_free(&s);
	}
	if (x->json)
		printf("{\"ok\":true,\"count\":%zu,\"messages\":[%s]}\n", shown,
		       out.data ? out.data : "");
	free(qids);
	buf_free(&out);
	return 0;
}

/*
 * print_group - an upstream group's limits (an object j of the daemon's
 * reply, read in place): rate, concurrency, throttling; of a route
 * (is_route: the route it names, passed over if none), or of the default
 * upstream, which says the nodes sharing its rate too
 */
static void print_group(const char *j, int is_route)
{
	char shared[64] = "", name[72];
	long long conc = 0, sessions = 0, nodes = 1, episodes = 0;
	const char *rate = NULL;
	size_t rlen = 0;
	int throttled = 0;

	if (is_route && json_get_str(j, "route", name, sizeof(name)) != 0)
		return;
	json_get_int(j, "concurrency", &conc);
	json_get_int(j, "sessions", &sessions);
	json_get_int(j, "throttle_episodes", &episodes);
	json_get_bool(j, "throttled", &throttled);
	if (json_get(j, "rate", &rate, &rlen) != 0 || (rlen == 3 && strncmp(rate, "0.0", 3) == 0))
		rate = NULL;
	if (!is_route) {
		json_get_int(j, "nodes", &nodes);
		snprintf(shared, sizeof(shared), ", %lld node%s sharing upstream.rate", nodes,
			 nodes == 1 ? "" : "s");
	}
	printf("%-13s%s%srate %s%.*s%s, concurrency %lld (%lld running)%s, %s (%lld episode%s"
	       " since start)\n", is_route ? "route" : "upstream", is_route ? name : "",
	       is_route ? ": " : "", rate ? "" : "no limit", rate ? (int) rlen : 0, rate ? rate : "",
	       rate ? "/s" : "", conc, sessions, shared, throttled ? "THROTTLED" : "not throttled",
	       episodes, episodes == 1 ? "" : "s");
}

/* ctl_stats - store figures, and the daemon's counters when it runs */
int ctl_stats(struct ctl *x, const char *arg)
{
	struct store_stats s = { 0 };
	struct buf reply = BUF_INIT;
	char why[512] = "", d[32];
	const char *counters = NULL;
	size_t clen = 0;
	long long pid = 0, up = 0;
	const char *dstore = NULL, *dup_ = NULL, *droutes = NULL;
	size_t len = 0;
	char unread[1024] = "";
	const char *dir = store_dir(&x->cf);	/* NULL: the store is elsewhere, maybe away */
	int err, live;

	/*
	 * a store elsewhere that cannot be read now: what the daemon sees of
	 * it is still worth showing, then the exit status says stats failed
	 */
	(void) arg;
	if (dir == NULL && ctl_store_try(x, unread, sizeof(unread)) == NULL) {
		/* unread says why */
	} else if ((err = store_stats(ctl_store(x), &s, STORE_STATS_STORIES)) != 0) {
		if (dir)
			ctl_fail(x, "cannot read the store: %s", store_strerror(err));
		snprintf(unread, sizeof(unread), "%s", store_strerror(err));
	}
	live = ctl_request(x, "stats", 1, &reply, why, sizeof(why)) == 0
	    && strncmp(reply.data, "{\"ok\":true,", 11) == 0	/* control.c's do_stats() */
	    && json_get(reply.data, "counters", &counters, &clen) == 0;
	if (live) {		/* json_get() leaves what it does not find NULL */
		json_get_int(reply.data, "pid", &pid);
		json_get_int(reply.data, "uptime", &up);
		json_get(reply.data, "store", &dstore, &len);
		json_get(reply.data, "upstream", &dup_, &len);
		json_get(reply.data, "routes", &droutes, &len);
	}
	if (x->json) {
		struct buf b = BUF_INIT;

		buf_printf(&b, "{\"ok\":%s,", unread[0] ? "false" : "true");
		if (unread[0]) {
			json_str(&b, "\"error\":", unread);
			buf_putc(&b, ',');
		}
		buf_printf(&b, "\"store\":{\"backend\":\"%s\",", store_name(&x->cf));
		if (unread[0]) {
			json_str(&b, "\"readable\":false,\"error\":", unread);
			buf_printf(&b, ",");
		}
		json_str(&b, "\"path\":", x->cf.store.path);
		buf_printf(&b, ",\"queued\":%llu,\"oldest_seconds\":%lld,\"claims\":%llu,"
			   "\"stories\":%llu,\"key_entries\":%llu,\"map_size\":%llu,"
			   "\"map_used\":%llu,\"map_ceiling\":%llu,\"full_percent\":%.1f},"
			   "\"daemon\":",
			   (unsigned long long) s.queued,
			   (long long) (s.oldest ? (x->now - s.oldest) / US : 0),
			   (unsigned long long) s.claims, (unsigned long long) s.stories,
			   /* key_entries: every claim is filed under its key */
			   (unsigned long long) s.claims, (unsigned long long) s.space.size,
			   (unsigned long long) s.space.used, (unsigned long long) s.space.ceiling,
			   s.space.ceiling ? 100.0 * s.space.used / s.space.ceiling : 0.0);
		if (live)	/* the daemon's own reply, but for its "ok" */
			buf_printf(&b, "{%s", reply.data + 11);
		else
			buf_printf(&b, "null");
		printf("%s}\n", b.data);
		buf_free(&b);
		goto done;
	}
	printf("store        %s%s%s\n", dir ? dir : store_name(&x->cf),
	       unread[0] ? ": cannot be read: " : "", unread);
	if (live && dstore && dir == NULL) {	/* how the daemon reaches a store elsewhere */
		int dup = 1;
		long long outages = 0, waiting = 0, waits = 0, voided = 0;

		json_get_bool(dstore, "up", &dup);	/* the daemon's "store" object, in place */
		json_get_int(dstore, "outages", &outages);
		json_get_int(dstore, "replication_waiting", &waiting);
		json_get_int(dstore, "replication_waits", &waits);
		json_get_int(dstore, "voided", &voided);
		printf("reachable    %s from the daemon, %lld outage%s since its start\n",
		       dup ? "yes" : "NO", outages, outages == 1 ? "" : "s");
		printf("replication  %lld commit%s waiting now, %lld wait%s since its start, "
		       "%lld batch%s voided\n", waiting, waiting == 1 ? "" : "s", waits,
		       waits == 1 ? "" : "s", voided, voided == 1 ? "" : "es");
	}
	if (unread[0])
		goto daemon;
	printf("queue        %llu message%s", (unsigned long long) s.queued,
	       s.queued == 1 ? "" : "s");
	if (s.oldest)
		printf(", oldest %s", fmt_dur(d, sizeof(d), x->now - s.oldest));
	printf("\nclaims       %llu\n", (unsigned long long) s.claims);
	printf("stories      %llu (key index entries %llu)\n", (unsigned long long) s.stories,
	       (unsigned long long) s.claims);
	if (store_caps(x->st) & STORE_CAP_OWN_SPACE)	/* LMDB's map */
		printf("map          %.1f MiB used of %.1f MiB, growing up to %.1f MiB"
		       " (%.1f%% full)\n", s.space.used / 1048576.0, s.space.size / 1048576.0,
		       s.space.ceiling / 1048576.0,
		       s.space.ceiling ? 100.0 * s.space.used / s.space.ceiling : 0.0);
daemon:
	if (!live) {
		printf("daemon       %s\n", why);
	} else {
		const char *p;

		printf("daemon       pid %lld, up %s\n", pid, fmt_dur(d, sizeof(d), up * US));
		if (dup_)
			print_group(dup_, 0);
		while (droutes && json_next(&droutes, &p, &len) == 0)	/* each route's */
			print_group(p, 1);
		printf("since start ");
		for (p = counters; p < counters + clen; p++)
			if (*p != '{' && *p != '}' && *p != '"')
				putchar(*p == ',' ? ' ' : *p == ':' ? '=' : *p);
		printf("\n");
	}
done:
	buf_free(&reply);
	if (unread[0] == 0)
		return 0;
	fprintf(stderr, "idemrelayctl: cannot read the store: %s\n", unread);
	return 1;
}
