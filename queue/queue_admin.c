/*
 * NAME
 *	queue_admin 3
 * SUMMARY
 *	the operator's actions on the queue: drop, hold, release, reroute, retry, forget
 * DESCRIPTION
 *	One implementation of each action, for the daemon's control socket
 *	(with its scheduler) and for idemrelayctl when no daemon runs (the
 *	store alone), both reading the same request line through
 *	queue_admin_request(). Each finds its messages the one way
 *	(select_qids()): a
 *	QID, the queued messages of a key's forms (of one AUTH user, for
 *	forget -u), every queued message, or those whose sender or a
 *	recipient matches a glob; then acts on each message alone.
 *
 *	A drop is refused for a message being delivered at that moment:
 *	the daemon's scheduler says it is busy, or (a shared store) another
 *	node holds a live lease on it. Dropping several, the others go and
 *	the refused ones are named. A hold is never refused: the store marks
 *	the message for every node, an attempt under way ends as it would,
 *	and no attempt follows until the release. A release puts the message
 *	back at the next attempt it had; its claims never left. A reroute
 *	decides a message's route again with the routes given (the daemon's
 *	in use, or the file's when none runs), for every node, and makes it
 *	due now in the store (the time it had was the old route's; one held,
 *	once released); with the daemon, a rerouted message is due at once
 *	(one being delivered, once that attempt is deferred), its upstream
 *	group decided again when loaded.
 *
 *	Every action is logged here, one line a message, in the service
 *	postsuper's name (Postfix's queue-maintenance program), whether the
 *	daemon runs it or idemrelayctl does: the mail log tells an operator's
 *	drop the same way either way (idemrelayctl chooses where its lines go).
 * DIAGNOSTICS
 *	QID: removed by the operator (idemrelayctl drop)
 *	QID: placed on hold by the operator (idemrelayctl hold)
 *	QID: released from hold by the operator (idemrelayctl release)
 *	QID: route OLD -> NEW (idemrelayctl reroute)
 *	QID: control: retry[ (being delivered already)| (waits for its upstream)]
 *	QID: key forgotten by the operator (idemrelayctl forget)
 *	Deleted: N messages, Placed on hold: N messages, Released from
 *	hold: N messages (after a drop, hold or release, as postsuper's)
 */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/clock.h"
#include "../util/hash.h"
#include "../util/json.h"
#include "../util/log.h"
#include "qid.h"
#include "queue_admin.h"

/* the service the actions' lines are logged in, as Postfix's postsuper logs its own */
#define QUEUE_ADMIN_SERVICE	"postsuper"

/* which queued messages an action is for: one of qid, keys, all, or the patterns */
struct queue_admin_sel {
	const char *qid;			/* this message */
	const uint8_t (*keys)[STORE_HASH_LEN];	/* the queued messages of a key (its forms) */
	size_t n_keys;
	const char *user;			/* with keys: of this AUTH user only, or NULL */
	int all;				/* every queued message */
	const char *from, *to;			/* whose sender, or one of whose recipients,
						 * matches this glob (fnmatch, any case) */
};

/* how forget treats a key whose message is still queued */
enum queue_admin_forget {
	QUEUE_ADMIN_REFUSE,		/* say so ("still queued"), forget nothing */
	QUEUE_ADMIN_FORCE,		/* forget; the queued copy is still delivered */
	QUEUE_ADMIN_DROP,		/* drop the queued copy, as drop does, then forget */
};

/* a set of QIDs, each once, in the order found */
struct qids {
	char (*q)[STORE_QID_SIZE];	/* owned */
	size_t n, cap;
};

/*
 * qids_add - one more QID; check: unless the set has it (a key's forms may
 * name one message twice), else the caller knows it is new (a walk gives
 * each message once): ALL over a long queue searched n times n/2
 */
static void qids_add(struct qids *s, const char *qid, int check)
{
	size_t i;

	for (i = 0; check && i < s->n; i++)
		if (strcmp(s->q[i], qid) == 0)
			return;
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 16;
		s->q = xrealloc(s->q, s->cap * sizeof(*s->q));
	}
	snprintf(s->q[s->n++], STORE_QID_SIZE, "%s", qid);
}

/* qids_json - the set as a JSON list */
static void qids_json(struct buf *out, const struct qids *s)
{
	size_t i;

	buf_putc(out, '[');
	for (i = 0; i < s->n; i++)
		buf_printf(out, "%s\"%s\"", i ? "," : "", s->q[i]);
	buf_putc(out, ']');
}

/* admin_count - postsuper's summary of an action on n messages ("Deleted: 2 messages") */
static void admin_count(const char *what, size_t n)
{
	if (n > 0)
		msg_info_as(QUEUE_ADMIN_SERVICE, "%s: %zu message%s", what, n, n == 1 ? "" : "s");
}

/*
 * not_queued - the error for a QID that is not in the queue, or whose
 * state could not be read (a store away is not an unknown QID)
 */
static void not_queued(struct store *st, struct buf *out, const char *qid)
{
	struct store_story s;
	int err;

	if ((err = store_story_get(st, qid, &s)) == 0) {
		json_error(out, "%s is not queued: it %s", qid,
			   s.dropped ? "was dropped" : "has left the queue");
		store_story_free(&s);
	} else if (err == STORE_ENOTFOUND) {
		json_error(out, "unknown QID %s", qid);
	} else {
		json_error(out, "cannot read %s: %s", qid, store_strerror(err));
	}
}

/*
 * queued - qid's story, its envelope and state without its data, if it is
 * queued (then the caller's to free): 0, STORE_ENOTFOUND if it is not
 */
static int queued(struct store *st, const char *qid, struct store_story *s)
{
	int err;

	if ((err = store_story_get(st, qid, s)) == 0 && !s->queued) {
		store_story_free(s);
		err = STORE_ENOTFOUND;
	}
	return err;
}

/* glob - does s match the pattern (NULL: anything), in any case */
static int glob(const char *pat, const char *s)
{
	return pat == NULL || fnmatch(pat, s ? s : "", FNM_CASEFOLD) == 0;
}

/* what a walk of the queue gathers */
struct walk {
	const struct queue_admin_sel *sel;
	struct qids *set;
};

/* walk_match - store_queue_walk() callback: every queued message the selection names */
static int walk_match(void *arg, const struct store_msg *m)
{
	struct walk *w = arg;
	size_t i;
	int to = w->sel->to == NULL;

	for (i = 0; !to && i < m->n_rcpts; i++)
		to = glob(w->sel->to, m->rcpts[i].addr);
	if (to && glob(w->sel->from, m->from))
		qids_add(w->set, m->qid, 0);
	return 0;
}

/*
 * select_qids - the queued messages sel names, into set; 0, or an
 * error reply in out and -1 (a QID not queued, a store that fails)
 */
static int select_qids(struct store *st, const struct queue_admin_sel *sel, struct qids *set,
		       struct buf *out)
{
	char (*q)[STORE_QID_SIZE];
	size_t i, j, n;
	struct walk w = { sel, set };
	struct store_story one;
	int err;

	if (sel->qid) {
		if (queued(st, sel->qid, &one) != 0) {
			not_queued(st, out, sel->qid);
			return -1;
		}
		store_story_free(&one);
		qids_add(set, sel->qid, 0);
		return 0;
	}
	for (i = 0; i < sel->n_keys; i++) {
		if ((err = store_key_queued(st, sel->keys[i], sel->user, &q, &n)) != 0) {
			json_error(out, "cannot read the key's messages: %s", store_strerror(err));
			return -1;
		}
		for (j = 0; j < n; j++)
			qids_add(set, q[j], 1);
		free(q);
	}
	if (sel->n_keys)
		return 0;
	if (!sel->all && sel->from == NULL && sel->to == NULL) {
		json_error(out, "no message named (a QID, a key, ALL, or a pattern)");
		return -1;
	}
	if ((err = store_queue_walk(st, 0, walk_match, &w)) != 0) {
		json_error(out, "cannot read the queue: %s", store_strerror(err));
		return -1;
	}
	return 0;
}

/* drop_one - one message out of the schedule, then out of the spool; 0, or why not */
static int drop_one(struct store *st, const struct queue_admin_sched *s, const char *qid,
		    const char *how)
{
	int err;

	if (s && s->unschedule(s->arg, qid) == 1)
		return STORE_ELEASE;		/* being delivered right now */
	if ((err = store_msg_drop(st, qid)) == 0)
		msg_info_as(QUEUE_ADMIN_SERVICE, "%s: removed by the operator (idemrelayctl %s)",
			    qid, how);
	return err;
}

/*
 * hold_one - one message held or released: 0, STORE_EINVAL if it already
 * was, STORE_ENOTFOUND if it is not queued, or an error
 */
static int hold_one(struct store *st, const struct queue_admin_sched *s, const char *qid,
		    int on)
{
	struct store_change c = { on, 0, NULL, 0 };
	struct store_story q;
	int err;

	if ((err = queued(st, qid, &q)) != 0)
		return err;
	if (q.m.held == on)
		err = STORE_EINVAL;
	else if ((err = store_msg_change(st, qid, &c)) == 0) {
		if (s && on)		/* an attempt under way ends as it would */
			(void) s->unschedule(s->arg, qid);
		else if (s)
			s->release(s->arg, qid, q.m.next_attempt);
		msg_info_as(QUEUE_ADMIN_SERVICE, "%s: %s by the operator (idemrelayctl %s)", qid,
			    on ? "placed on hold" : "released from hold", on ? "hold" : "release");
	}
	store_story_free(&q);
	return err;
}

/*
 * reroute_one - one message's route decided again: 0 moved, STORE_EINVAL
 * if it keeps its route, STORE_ENOTFOUND if it is not queued. A route
 * that matches by listener is never chosen again, nor left: the listener
 * a message came in on is not kept with it.
 *
 * Its schedule entry, its group unknown until its next load, is due now:
 * the old entry would wait on the old route's pause or connections, and
 * its next attempt is the old route's (its pause's end, or a retry earned
 * there). One being delivered right now is so once that attempt ends, if
 * it is deferred; one on hold stays out.
 */
static int reroute_one(struct store *st, const struct queue_admin_sched *s,
		       const struct conf *cf, const char *qid)
{
	const struct conf_route *r, *now;
	struct store_change c = { -1, 1, NULL, clock_us() };
	struct store_story q;
	int err;

	if ((err = queued(st, qid, &q)) != 0)
		return err;
	now = conf_route_named(cf, q.m.route);
	r = conf_route_match(cf, q.m.user, q.m.from, NULL);
	c.route = r ? r->name : NULL;
	if ((now && now->listener >= 0) || conf_route_same(c.route, q.m.route))
		err = STORE_EINVAL;
	else if ((err = store_msg_change(st, qid, &c)) == 0) {
		msg_info_as(QUEUE_ADMIN_SERVICE, "%s: route %s -> %s (idemrelayctl reroute)", qid,
			    q.m.route ? q.m.route : "default", c.route ? c.route : "default");
		if (s != NULL && !q.m.held)
			s->reroute(s->arg, qid);
	}
	store_story_free(&q);
	return err;
}

/* the actions on each message of a selection (queue_admin_each()) */
enum each { EACH_DROP, EACH_HOLD, EACH_RELEASE, EACH_REROUTE, EACH_N };
static const struct {
	const char *cmd, *list;		/* the reply's list of those acted on */
	const char *summary;		/* postsuper's count line, NULL none */
} each[EACH_N] = {
	[EACH_DROP] = { "drop", "dropped", "Deleted" },
	[EACH_HOLD] = { "hold", "held", "Placed on hold" },
	[EACH_RELEASE] = { "release", "released", "Released from hold" },
	[EACH_REROUTE] = { "reroute", "rerouted", NULL },
};

/*
 * refused - the error reply for the one message asked for that action a
 * left as it was (err); none for one a reroute leaves on its route
 */
static void refused(struct store *st, struct buf *out, enum each a, const char *qid, int err)
{
	if (err == STORE_ELEASE)	/* a drop's alone */
		json_error(out, "%s is being delivered right now; try again in a moment", qid);
	else if (err == STORE_ENOTFOUND)
		not_queued(st, out, qid);
	else if (err == STORE_EINVAL && (a == EACH_HOLD || a == EACH_RELEASE))
		json_error(out, "%s is %s on hold", qid, a == EACH_HOLD ? "already" : "not");
	else if (err != STORE_EINVAL || a != EACH_REROUTE)
		json_error(out, "cannot %s %s: %s", each[a].cmd, qid, store_strerror(err));
}

/*
 * queue_admin_each - drop, hold, release or reroute (a) each message sel
 * names, each alone; one gone meanwhile is not missed. For a QID asked
 * for, why not is the reply (refused()). Among several, a drop leaves one
 * being delivered right now (named in "busy") and goes on past one it
 * could not drop; the others pass over the messages that already are (or
 * are not) on hold, or that a reroute leaves on their route
 * (reroute_one), and stop at a failure.
 */
static void queue_admin_each(struct store *st, const struct queue_admin_sched *s,
			     const struct conf *cf, const struct queue_admin_sel *sel, enum each a,
			     struct buf *out)
{
	struct qids set = { 0 }, done = { 0 }, busy = { 0 };
	size_t i;
	int err, failed = 0;

	buf_reset(out);
	if (select_qids(st, sel, &set, out) != 0)
		goto done;
	for (i = 0; i < set.n && out->len == 0; i++) {
		err = a == EACH_DROP ? drop_one(st, s, set.q[i], "drop")
		    : a == EACH_REROUTE ? reroute_one(st, s, cf, set.q[i])
		    : hold_one(st, s, set.q[i], a == EACH_HOLD);
		if (err == 0)
			qids_add(&done, set.q[i], 0);
		else if (sel->qid)
			refused(st, out, a, sel->qid, err);
		else if (a == EACH_DROP && err == STORE_ELEASE)
			qids_add(&busy, set.q[i], 0);
		else if (a == EACH_DROP && err != STORE_ENOTFOUND)
			failed = err;
		else if (a != EACH_DROP && err != STORE_EINVAL && err != STORE_ENOTFOUND)
			json_error(out, "cannot %s %s: %s", each[a].cmd, set.q[i], store_strerror(err));
	}
	if (out->len)
		goto done;
	buf_printf(out, "{\"ok\":%s", busy.n || failed ? "false" : "true");
	if (sel->qid)
		buf_printf(out, ",\"qid\":\"%s\"", sel->qid);
	if (busy.n)
		buf_printf(out, ",\"error\":\"%zu of %zu messages being delivered right now, not "
			   "dropped; try again in a moment\"", busy.n, set.n);
	else if (failed)
		buf_printf(out, ",\"error\":\"not every message dropped: %s\"",
			   store_strerror(failed));
	buf_printf(out, ",\"count\":%zu,\"%s\":", done.n, each[a].list);
	qids_json(out, &done);
	if (a == EACH_DROP) {
		buf_printf(out, ",\"busy\":");
		qids_json(out, &busy);
	}
	buf_putc(out, '}');
done:
	if (each[a].summary)
		admin_count(each[a].summary, done.n);
	free(set.q);
	free(done.q);
	free(busy.q);
}

/* queue_admin_retry - one queued message attempted now (needs a scheduler) */
void queue_admin_retry(struct store *st, const struct queue_admin_sched *s, const char *qid,
		       struct buf *out)
{
	static const char *const state[] = {
		[QUEUE_ADMIN_DUE] = "due", [QUEUE_ADMIN_ACTIVE] = "active",
		[QUEUE_ADMIN_WAITING] = "waiting"};
	static const char *const says[] = {
		[QUEUE_ADMIN_DUE] = "", [QUEUE_ADMIN_ACTIVE] = " (being delivered already)",
		[QUEUE_ADMIN_WAITING] = " (waits for its upstream)"};
	enum queue_admin_retry rc;
	struct store_story q;

	buf_reset(out);
	if (queued(st, qid, &q) != 0) {
		not_queued(st, out, qid);
		return;
	}
	if (q.m.held)
		json_error(out, "%s is on hold: release it first (idemrelayctl release %s)", qid,
			   qid);
	else if ((rc = s->retry(s->arg, qid, q.m.route)) == QUEUE_ADMIN_UNKNOWN)
		not_queued(st, out, qid);
	else if (rc != QUEUE_ADMIN_DUE && rc != QUEUE_ADMIN_ACTIVE && rc != QUEUE_ADMIN_WAITING)
		json_error(out, "%s: the scheduler's answer %d is not known", qid, (int) rc);
	else {
		msg_info_as(QUEUE_ADMIN_SERVICE, "%s: control: retry%s", qid, says[rc]);
		buf_printf(out, "{\"ok\":true,\"qid\":\"%s\",\"state\":\"%s\"}", qid,
			   state[rc]);
	}
	store_story_free(&q);
}

/*
 * forget_keys - delete the claims of each key form: how many forms had
 * claims, with their count and QIDs, or an error
 */
static int forget_keys(struct store *st, const struct queue_admin_sel *sel, int64_t now,
		       const char *how, size_t *claims, struct qids *qids)
{
	struct store_forget f;
	size_t i, j;
	int err, found = 0;

	for (i = 0; i < sel->n_keys; i++) {
		if ((err = store_key_forget(st, sel->keys[i], sel->user, now, &f)) == STORE_ENOTFOUND)
			continue;
		if (err != 0)
			return err;
		found++;
		*claims += f.claims;
		for (j = 0; j < f.n_qids; j++) {
			msg_info_as(QUEUE_ADMIN_SERVICE, "%s: key forgotten by the operator "
				    "(idemrelayctl forget%s)", f.qids[j], how);
			qids_add(qids, f.qids[j], 1);
		}
		store_forget_free(&f);
	}
	return found;
}

/*
 * queue_admin_forget - delete the claims of a key's forms. A key whose
 * message is still queued is refused unless QUEUE_ADMIN_FORCE (its copy
 * is still delivered, and so is the next submission) or QUEUE_ADMIN_DROP
 * (the copy leaves the queue first, as drop does): forgetting it
 * silently made two deliveries.
 */
static void queue_admin_forget(struct store *st, const struct queue_admin_sched *s,
			       const struct queue_admin_sel *sel, enum queue_admin_forget mode,
			       int64_t now, struct buf *out)
{
	struct qids queued = { 0 }, qids = { 0 };
	size_t claims = 0, i;
	int err;

	buf_reset(out);
	if (select_qids(st, sel, &queued, out) != 0)	/* parse_keys() gave a key at least */
		goto done;
	if (queued.n > 0 && mode == QUEUE_ADMIN_REFUSE) {
		buf_printf(out, "{\"ok\":false,\"error\":\"still queued\",\"queued\":");
		qids_json(out, &queued);
		buf_putc(out, '}');
		goto done;
	}
	for (i = 0; mode == QUEUE_ADMIN_DROP && i < queued.n; i++) {
		err = drop_one(st, s, queued.q[i], "forget --drop");
		if (err != 0 && err != STORE_ENOTFOUND) {
			refused(st, out, EACH_DROP, queued.q[i], err);
			goto done;
		}
	}
	if ((err = forget_keys(st, sel, now, mode == QUEUE_ADMIN_FORCE && queued.n
			       ? " --force, while queued" : "", &claims, &qids)) < 0) {
		json_error(out, "cannot forget: %s", store_strerror(err));
		goto done;
	}
	if (err == 0) {
		json_error(out, "unknown key%s%s", sel->user ? " for user " : "",
			   sel->user ? sel->user : "");
		goto done;
	}
	buf_printf(out, "{\"ok\":true,\"claims\":%zu,\"qids\":", claims);
	qids_json(out, &qids);
	buf_printf(out, ",\"%s\":", mode == QUEUE_ADMIN_DROP ? "dropped" : "queued");
	qids_json(out, &queued);
	buf_putc(out, '}');
done:
	free(queued.q);
	free(qids.q);
}

/*
 * queue_admin_act - drop, hold, release, reroute or forget (cmd) what sel
 * names (forget: mode, now); any other cmd is refused (a JSON error),
 * never taken for one of them
 */
static void queue_admin_act(struct store *st, const struct queue_admin_sched *s,
			    const struct conf *cf, const char *cmd,
			    const struct queue_admin_sel *sel, enum queue_admin_forget mode,
			    int64_t now, struct buf *out)
{
	enum each a;

	for (a = 0; a < EACH_N && strcmp(cmd, each[a].cmd) != 0; a++)
		 /* void */ ;
	if (a < EACH_N)
		queue_admin_each(st, s, cf, sel, a, out);
	else if (strcmp(cmd, "forget") == 0)
		queue_admin_forget(st, s, sel, mode, now, out);
	else
		json_error(out, "unknown request %.40s", cmd);	/* as the daemon says it */
}

/*
 * parse_keys - "USER|- HEX..." (words, or the rest of a strtok_r() at
 * save when NULL): the hashes of one key's forms, QUEUE_ADMIN_MAX_KEYS at
 * most, into keys and sel; -1 if malformed
 */
static int parse_keys(char *words, char **save, struct queue_admin_sel *sel,
		      uint8_t keys[QUEUE_ADMIN_MAX_KEYS][STORE_HASH_LEN])
{
	char *user = strtok_r(words, " ", save), *h;

	if (user == NULL)
		return -1;
	while ((h = strtok_r(NULL, " ", save)) != NULL)
		if (sel->n_keys == QUEUE_ADMIN_MAX_KEYS
		    || hash_unhex(h, keys[sel->n_keys++], STORE_HASH_LEN) != 0)
			return -1;
	sel->user = strcmp(user, "-") == 0 ? NULL : user;
	sel->keys = (const uint8_t (*)[STORE_HASH_LEN]) keys;
	return sel->n_keys ? 0 : -1;
}

/*
 * parse_sel - a request's selection: QID, ALL, "key USER|- HEX...",
 * "from PATTERN", "to PATTERN" (both may be given), into sel (zeroed); -1 if malformed
 */
static int parse_sel(char *args, struct queue_admin_sel *sel,
		     uint8_t keys[QUEUE_ADMIN_MAX_KEYS][STORE_HASH_LEN])
{
	char *save = NULL, *w = strtok_r(args, " ", &save), *v;

	if (w == NULL)
		return -1;
	if (strcmp(w, "ALL") == 0) {
		sel->all = 1;
	} else if (strcmp(w, "key") == 0) {
		return parse_keys(NULL, &save, sel, keys);
	} else if (strcmp(w, "from") == 0 || strcmp(w, "to") == 0) {
		for (; w != NULL; w = strtok_r(NULL, " ", &save)) {
			if ((v = strtok_r(NULL, " ", &save)) == NULL)
				return -1;
			if (strcmp(w, "from") == 0)
				sel->from = v;
			else if (strcmp(w, "to") == 0)
				sel->to = v;
			else
				return -1;
		}
		return 0;
	} else if (!qid_valid(sel->qid = w)) {
		return -1;
	}
	return strtok_r(NULL, " ", &save) == NULL ? 0 : -1;
}

/*
 * queue_admin_request - drop, hold, release or reroute what a control
 * request names, or "forget [--force|--drop] USER|- HEX...": the claims
 * filed under each key hash given (queue_admin_forget() says when it
 * refuses); args is the request after cmd, and is cut up in place
 */
void queue_admin_request(struct store *st, const struct queue_admin_sched *s,
			 const struct conf *cf, const char *cmd, char *args, int64_t now,
			 struct buf *out)
{
	uint8_t keys[QUEUE_ADMIN_MAX_KEYS][STORE_HASH_LEN];
	enum queue_admin_forget mode = QUEUE_ADMIN_REFUSE;
	struct queue_admin_sel sel = { 0 };
	char *save = NULL;
	int forget = strcmp(cmd, "forget") == 0;

	if (forget && strncmp(args, "--force ", 8) == 0) {
		mode = QUEUE_ADMIN_FORCE;
		args += 8;
	} else if (forget && strncmp(args, "--drop ", 7) == 0) {
		mode = QUEUE_ADMIN_DROP;
		args += 7;
	}
	if (forget ? parse_keys(args, &save, &sel, keys) : parse_sel(args, &sel, keys))
		json_error(out, forget ? "usage: %s [--force|--drop] USER|- KEYHASH..."
			   : "usage: %s QID | ALL | key USER|- KEYHASH... | from PATTERN [to PATTERN]"
			   " | to PATTERN", cmd);
	else
		queue_admin_act(st, s, cf, cmd, &sel, mode, now, out);
}
