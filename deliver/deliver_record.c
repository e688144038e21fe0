/*
 * NAME
 *	deliver_record 3
 * SUMMARY
 *	what an attempt's results become: log lines, bounces, the store's update
 * DESCRIPTION
 *	Each attempt (deliver_replied, job_record): one log line per recipient;
 *	permanent failures and expired recipients get an RFC 3464 bounce
 *	(dsn.c) spooled under a new QID to the sender unless it is null
 *	(or their NOTIFY wants none). The notice is part of the bounce's
 *	outcome, not an acceptance: the two are written in one transaction,
 *	the outcome first, at once (not with the next mark), so that either
 *	both are recorded or neither: a kill -9 or a refused write between
 *	them would leave the notice queued and the recipient too, to be
 *	asked again and bounced with a second notice. Marked a notice, it
 *	may use the room a store keeps for delivery writes but the floor
 *	kept for outcomes (store_txn_msg_put), so a store full to its
 *	reserve still bounces and drains.
 *	A notice returning the whole original that finds no room is made
 *	again with its headers alone (RFC 3461 and 3464 let a notice return
 *	the headers only; its text says so). A notice the store cannot take
 *	even so (no room, the database away) leaves its recipients queued,
 *	deferred (dsn 4.3.0), to bounce again at the next attempt, never
 *	done without it; waiting for room is not the upstream's doing, so
 *	if nothing else is deferred it costs no attempt, but it waits the
 *	backoff its attempts have earned: the next attempt asks the upstream
 *	again for every recipient still queued, and one rejected 5xx should
 *	not be asked every retry.first while the store stays full;
 *	then the recipients' states, attempt counts and next_attempt are
 *	written and the inflight mark cleared. A job postponed by the
 *	upstream's throttling (deliver_rate.h) is not charged an attempt:
 *	its count stays, and it is due when the upstream's pause ends. When no recipient is left
 *	queued the message leaves the spool. A message whose final dot was
 *	answered is decided at once (deliver_replied) and written in the
 *	same group commit as the next message's inflight mark, which the
 *	connection waits for anyway: a kill -9 then finds at most one
 *	message per connection marked with its outcome unwritten (the one
 *	whose dot is out, or the last one answered), not a whole batch,
 *	and costs no extra fsync. The rest of the batch is written in one
 *	transaction at its end.
 *
 *	A mark whose commit's outcome is unknown sends no dot, and the
 *	deferral waits with its job; if the node stays cut off past its
 *	lease, another node may find that mark durable and finish the
 *	message unconfirmed. When the deferral's write is refused so, the
 *	job asks the store to undo that verdict (job_revive,
 *	store_msg_revive): the message is queued again, for any node.
 * DIAGNOSTICS
 *	QID: to=<a@b>, relay=h[ip]:25, delay=0.21, dsn=2.0.0, status=sent (250 2.0.0 Ok)
 *	QID: to=<a@b>, relay=none, delay=60, dsn=4.4.1, status=deferred (connect to ...)
 *	QID: to=<a@b>, relay=h[ip]:25, delay=3.1, dsn=4.4.2, status=unconfirmed (...)
 *	NEWQID: sender non-delivery notification: QID  (as bounce's)
 *	QID: sender non-delivery notification NEWQID: returned headers only:
 *	    no room for the full message
 *	QID: sender non-delivery notification not queued: ERR; its recipients deferred
 *	QID: to=<a@b>, ..., dsn=4.3.0, status=deferred (sender non-delivery notification
 *	    not queued: REPLY)
 *	(with "not known to be queued (left to the next take)" for "not queued" when
 *	the store gave the message's lease up: see store_pg_decide.c)
 *	NEWQID: from=<>, size=N, nrcpt=1 (queue active)  (as qmgr's)
 *	QID: removed  (as qmgr's)
 *	QID: revived: its inflight mark was never followed by a final dot; ...
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../queue/commit.h"
#include "../queue/metrics.h"
#include "../queue/qid.h"
#include "../smtp/smtp.h"
#include "../util/buf.h"
#include "../util/clock.h"
#include "../util/log.h"
#include "deliver_impl.h"
#include "dsn.h"

/*
 * the writes of one group commit: the outcomes of jobs[0..n) decided and
 * not written yet, then the inflight mark of qid (NULL: none)
 */
struct writes {
	const char *qid;
	struct deliver_job *const *jobs;
	size_t n;
};

/* writes_fn - commit_run() step: a batch's outcomes, with a mark or at its end */
static void writes_fn(struct store_txn *t, void *arg)
{
	const struct writes *w = arg;
	size_t i;

	for (i = 0; i < w->n; i++)
		if (w->jobs[i]->decided && !w->jobs[i]->recorded && !w->jobs[i]->reviving)
			store_txn_msg_update(t, &w->jobs[i]->m);
	if (w->qid)
		store_txn_msg_set_inflight(t, w->qid, 1);
}

/*
 * deliver_mark - the inflight mark, with the outcomes waiting, in the next
 * group commit. A lost lease fails the whole of it: then the mark is
 * tried alone (it fails too if the lease lost is this message's), and the
 * outcomes wait for the end of the batch, where each is written on its own.
 */
int deliver_mark(struct deliver *d, const char *qid, struct deliver_job *const *jobs,
		 size_t n)
{
	struct writes w = { qid, jobs, n };
	size_t i;
	int err;

	if (d->cm == NULL)
		return store_msg_set_inflight(d->st, qid, 1);
	err = commit_run(d->cm, writes_fn, &w);
	if (err == STORE_ELEASE)
		return store_msg_set_inflight(d->st, qid, 1);
	if (err == 0)
		for (i = 0; i < n; i++)
			if (jobs[i]->decided)
				jobs[i]->recorded = 1;
	return err;
}

/* log_result - the Postfix-like line for one recipient (dsn NULL: its result's) */
static void log_result(const struct deliver_job *j, size_t i, const char *dsn,
		       const char *status, const char *prefix, int64_t now)
{
	const struct deliver_result *r = &j->res[i];
	int64_t delay = now - j->m.accepted;

	if (delay < 0)
		delay = 0;
	metrics_delivered(status, delay);
	msg_info("%s: to=<%s>, relay=%s, delay=%lld.%02lld, dsn=%s, status=%s (%s%s)",
		 j->m.qid, j->m.rcpts[i].addr, j->relay[0] ? j->relay : "none",
		 (long long) (delay / US), (long long) (delay % US / 10000), dsn ? dsn : r->dsn,
		 status, prefix, r->reply);
}

/* wants_failure_dsn - did the recipient's NOTIFY ask for failure notices? */
static int wants_failure_dsn(const struct store_rcpt *r)
{
	if (r->notify & SMTP_NOTIFY_NEVER)
		return 0;
	return r->notify == 0 || (r->notify & SMTP_NOTIFY_FAILURE);
}

/* a non-delivery notice to spool */
struct notice {
	int hdrs_only;			/* in: the original's headers alone */
	int full;			/* out: it returned the whole original */
	size_t size;			/* out: its size */
	char qid[STORE_QID_SIZE];	/* out: its QID */
};

/*
 * notice_queue - j's outcome, decided, and an RFC 3464 notification of
 * dr[0..k) to the sender under a new QID, returning what RET says (or
 * the original's headers alone: nt->hdrs_only), in one transaction.
 * Marked a notice, it may use the room kept for delivery writes but its
 * floor (store_txn_msg_put). 0, or the store's error (STORE_ENOSPC,
 * PostgreSQL away, the lease lost): then neither is written.
 */
static int notice_queue(struct deliver *d, const struct deliver_job *j,
			const struct dsn_rcpt *dr, size_t k, int64_t now, struct notice *nt)
{
	struct dsn_report rep;
	struct store_rcpt rcpt;
	struct store_msg b;
	struct store_txn *t = NULL;
	struct buf text = BUF_INIT;
	char null_sender[] = "", client[] = "localhost";
	int err, eight;

	memset(&b, 0, sizeof(b));
	qid_next(b.qid);
	memset(&rep, 0, sizeof(rep));
	rep.hostname = d->c->hostname ? d->c->hostname : "localhost";
	rep.qid = j->m.qid;
	rep.dsn_qid = b.qid;
	rep.sender = j->m.from;
	rep.envid = j->m.envid;
	rep.ret = j->m.ret;
	rep.hdrs_only = nt->hdrs_only;
	rep.arrival = j->m.accepted;
	rep.now = now;
	rep.rcpts = dr;
	rep.n_rcpts = k;
	rep.msg = j->m.data;
	rep.msg_len = j->m.data_len;
	rep.utf8 = j->m.smtputf8;
	eight = dsn_build(&rep, &text);
	nt->full = dsn_returns_full(&rep);

	memset(&rcpt, 0, sizeof(rcpt));
	rcpt.addr = j->m.from;
	rcpt.notify = SMTP_NOTIFY_NEVER;	/* never a notice about a notice */
	rcpt.state = STORE_RCPT_QUEUED;
	b.accepted = now;
	b.from = null_sender;
	b.ret = SMTP_RET_NONE;
	b.body = eight ? SMTP_BODY_8BITMIME : SMTP_BODY_NONE;
	b.smtputf8 = j->m.smtputf8;	/* a UTF-8 sender, a global report: RFC 6533 */
	b.client = client;
	b.rcpts = &rcpt;
	b.n_rcpts = 1;
	b.data = text.data;
	b.data_len = text.len;
	b.next_attempt = now;
	b.ttl = (int64_t) d->c->store.key_ttl * 1000000;	/* its story's, like any other's */
	b.notice = 1;

	if ((err = store_txn_begin(d->st, NULL, 0, &t)) == 0) {
		store_txn_msg_update(t, &j->m);
		store_txn_msg_put(t, &b);
		err = store_txn_commit(t);
	}
	strcpy(nt->qid, b.qid);
	nt->size = text.len;
	buf_free(&text);
	return err;
}

/*
 * notice_spool - the outcome with the notice of dr[0..k), or if the
 * whole original finds no room, with one of its headers alone, its text
 * saying so (RFC 3461 and 3464 let a notice return the headers only, and
 * Postfix too cuts what it returns): 0 or the store's error
 */
static int notice_spool(struct deliver *d, const struct deliver_job *j,
			const struct dsn_rcpt *dr, size_t k, int64_t now, struct notice *nt)
{
	int err;

	nt->hdrs_only = 0;
	if ((err = notice_queue(d, j, dr, k, now, nt)) != STORE_ENOSPC || !nt->full)
		return err;
	nt->hdrs_only = 1;
	if ((err = notice_queue(d, j, dr, k, now, nt)) == 0)
		msg_warn("%s: sender non-delivery notification %s: returned headers only:"
			 " no room for the full message", j->m.qid, nt->qid);
	return err;
}

/*
 * not_queued - what a notice whose write failed with err became: not
 * queued, or, its lease given up (STORE_ELEASE: another node's, or the
 * store left a commit it could not read to the next take, which finds
 * the bounce with its notice or neither), not known to be
 */
static const char *not_queued(int err)
{
	return err == STORE_ELEASE ? "not known to be queued (left to the next take)" : "not queued";
}

/*
 * job_bounce - log the recipients bounced[] and write j's outcome, as
 * decided, with the sender's notification of those whose NOTIFY wants
 * one (notice_spool: with the original's headers alone if the whole
 * finds no room); the outcome is then recorded. If they cannot be
 * written even so, those are not bounced in this outcome: queued again
 * with their reply, deferred (logged dsn=4.3.0, as Postfix logs a
 * recipient deferred because its bounce log append failed; no attempt
 * charged if nothing else is: deliver_replied), they bounce at the next
 * attempt and their notice is made then; never done without it, and
 * the outcome is left to be written as any other. How many were queued
 * again.
 */
static size_t job_bounce(struct deliver *d, struct deliver_job *j, const size_t *bounced,
			 size_t n, int64_t now)
{
	struct dsn_rcpt *dr = xcalloc(n, sizeof(*dr));
	struct notice nt;
	size_t i, k = 0, again = 0;
	int err = 0;

	for (i = 0; i < n && j->m.from[0] != 0; i++) {
		const struct store_rcpt *r = &j->m.rcpts[bounced[i]];

		if (!wants_failure_dsn(r))
			continue;
		dr[k].addr = r->addr;
		dr[k].orcpt = r->orcpt;
		dr[k].status = j->res[bounced[i]].dsn;
		dr[k].diag = j->res[bounced[i]].reply;
		dr[k].remote_mta = j->remote_mta[0] ? j->remote_mta : NULL;
		k++;
	}
	if (k > 0 && (err = notice_spool(d, j, dr, k, now, &nt)) != 0)
		msg_warn("%s: sender non-delivery notification %s: %s; its recipients deferred",
			 j->m.qid, not_queued(err), store_strerror(err));
	for (i = 0; i < n; i++) {
		struct store_rcpt *r = &j->m.rcpts[bounced[i]];
		char why[96];

		if (err != 0 && wants_failure_dsn(r)) {
			r->state = STORE_RCPT_QUEUED;
			snprintf(why, sizeof(why), "sender non-delivery notification %s: ",
				 not_queued(err));
			log_result(j, bounced[i], "4.3.0", "deferred", why, now);
			again++;
			continue;
		}
		log_result(j, bounced[i], NULL, "bounced", "", now);
	}
	if (k > 0 && err == 0) {
		j->recorded = 1;
		msg_info_as("bounce", "%s: sender non-delivery notification: %s", nt.qid,
			    j->m.qid);
		msg_info_as("qmgr", "%s: from=<>, size=%zu, nrcpt=1 (queue active)", nt.qid,
			    nt.size);
		deliver_schedule(d, nt.qid, now);
	}
	free(dr);
	return again;
}

/*
 * job_schedule - j's delivery state after this attempt, in j->m (the
 * inflight mark cleared; attempts from tried, one more if charged; the
 * next attempt if queued) and j->queued. The backoff
 * is retry's, the set its caller decided give_up by: read again, a
 * SIGHUP in between would mix two sets (B's wait after A's give_up).
 */
static void job_schedule(const struct conf_retry *retry, struct deliver_job *j, int queued,
			 int charged, int tried, int64_t now)
{
	struct store_msg *m = &j->m;

	m->inflight = 0;
	m->attempts = tried;
	j->queued = queued;
	if (queued && j->postponed) {
		m->next_attempt = j->until > now ? j->until : now;
	} else if (queued) {
		m->attempts += charged;
		m->next_attempt = now + deliver_backoff(retry->first, retry->max, m->attempts) * US;
	}
}

/*
 * deliver_replied - the outcome of one attempt, decided once: log each
 * recipient, set the new delivery state in j->m and j->queued,
 * and bounce: a bounce with a notice is written at once, with it
 * (job_bounce); any other outcome job_record() writes, with the next
 * mark or the batch.
 */
void deliver_replied(struct deliver *d, struct deliver_job *j)
{
	struct conf_retry retry = deliver_retry_settings(d);
	struct store_msg *m = &j->m;
	int64_t now = clock_us();
	int expired = now - m->accepted >= retry.give_up * US;
	size_t i, n_bounced = 0, *bounced;
	int tried = m->attempts;
	int queued = 0;			/* one deferred: all still queued were in the attempt */

	if (j->decided)
		return;
	bounced = xcalloc(m->n_rcpts, sizeof(*bounced));
	for (i = 0; i < m->n_rcpts; i++) {
		struct deliver_result *r = &j->res[i];

		if (!r->attempted)
			continue;
		switch (r->outcome) {
		case DELIVER_SENT:
			m->rcpts[i].state = STORE_RCPT_SENT;
			log_result(j, i, NULL, "sent", "", now);
			break;
		case DELIVER_BOUNCED:
			m->rcpts[i].state = STORE_RCPT_BOUNCED;
			bounced[n_bounced++] = i;	/* logged by job_bounce */
			break;
		case DELIVER_AMBIGUOUS:
			if (!d->c->upstream.ambiguous_retry) {
				m->rcpts[i].state = STORE_RCPT_UNCONFIRMED;
				log_result(j, i, NULL, "unconfirmed", "delivered-unconfirmed: ",
					   now);
				break;
			}
			/* upstream.ambiguous = "retry": a deferral that may duplicate */
			if (!expired) {
				log_result(j, i, NULL, "deferred", "ambiguous, will resend: ", now);
				queued = 1;
				break;
			}
			/* FALLTHROUGH */
		case DELIVER_DEFERRED:
			if (expired) {
				char why[DELIVER_REPLY_MAX];

				snprintf(why, sizeof(why),
					 "delivery time expired; last error: %.400s", r->reply);
				deliver_set(j, i, DELIVER_BOUNCED, "4.4.7", why);
				m->rcpts[i].state = STORE_RCPT_BOUNCED;
				bounced[n_bounced++] = i;
				break;
			}
			log_result(j, i, NULL, "deferred", j->postponed ?
				   "delivery temporarily suspended: " : "", now);
			queued = 1;
			break;
		}
		free(m->rcpts[i].reply);
		m->rcpts[i].reply = xstrdup(r->reply);
	}
	/* the outcome the notices are written with; an attempt charged if anything is deferred */
	job_schedule(&retry, j, queued, queued, tried, now);
	if (n_bounced > 0 && job_bounce(d, j, bounced, n_bounced, now) > 0)
		/* its notices wait: no attempt charged unless something else is deferred */
		job_schedule(&retry, j, 1, queued, tried, now);
	j->decided = 1;
	free(bounced);
}

/*
 * job_revive - the outcome of an attempt that sent no final dot, though
 * its mark may be durable (its commit's outcome was unknown), was refused:
 * the lease went to another node, which may have found that mark, taken
 * it for an ambiguous delivery and finished the message unconfirmed, a
 * 250 never delivered. The store undoes such a verdict, and nothing else
 * (store_msg_revive). 1: ask again later (the verdict is yet to come, or
 * the store is away), 0: done with the job.
 */
static int job_revive(struct deliver *d, struct deliver_job *j, int refused)
{
	int64_t now = clock_us();
	int err;

	if (!j->reviving) {
		msg_warn("%s: its outcome was refused (%s); its final dot never went out:"
			 " reviving it if its mark was taken for an ambiguous delivery",
			 j->m.qid, store_strerror(refused));
		j->reviving = now;
	}
	switch (err = store_msg_revive(d->st, &j->m)) {
	case 0:
		msg_info("%s: revived: its inflight mark was never followed by a final dot;"
			 " another node's unconfirmed verdict undone", j->m.qid);
		metrics_inc(METRICS_REVIVED);
		return 0;
	case STORE_ENOTFOUND:
		msg_info("%s: nothing to revive: left to the node that took it", j->m.qid);
		return 0;
	default:
		/* a verdict to come is made as soon as a node loads the message */
		if (now - j->reviving > (2 * d->c->store.lease + 60) * US) {
			msg_warn("%s: not revived within %lld s (%s): left to the node that took it",
				 j->m.qid, (long long) ((now - j->reviving) / US), store_strerror(err));
			return 0;
		}
		return 1;
	}
}

/*
 * held_at_stop - the daemon stops while commits wait for the synchronous
 * standby: a write that failed then was held and given up at the stop of
 * the thread that committed it (the writer's, at SIGTERM, before
 * delivery's: store_pg_wait.c), and its transaction, which can only
 * commit, still holds the rows it wrote. A retry would wait for their
 * locks, no hold (a lock, not the standby) and cut at a statement's
 * limit each time, so none is made: the outcome is PostgreSQL's, and the
 * next start reads what it decided (the outcome, or after a failover the
 * inflight mark).
 */
static int held_at_stop(struct deliver *d)
{
	return (store_health(d->st) & STORE_HSTALLED)
	    && (deliver_stopping(d) || (d->cm != NULL && commit_stopped(d->cm)));
}

/*
 * job_record - write the decided outcomes of a batch not yet written in
 * one transaction, then reschedule or forget each message. An outcome
 * the store refused stays with its job (unwritten): the message is
 * neither rescheduled nor let go, and the caller tries the write again
 * (job_wait_written). Rescheduled, the next load would find the inflight
 * mark the write was to clear and take the message for an ambiguous
 * delivery, though the upstream answered it or its dot never went out
 * (SPEC 5: the outcome waits, it is not guessed). How many stay so.
 * Refused for a lost lease after an attempt that sent no dot, the write
 * becomes a revive (job_revive), which waits likewise.
 */
static size_t job_record(struct deliver *d, struct deliver_job **jobs, size_t n)
{
	struct writes w = { NULL, jobs, n };
	struct store_msg **ms = xcalloc(n, sizeof(*ms));
	int *errs = xcalloc(n, sizeof(*errs)), err = 0;
	int64_t retry = deliver_retry_settings(d).first;
	size_t i, k, left = 0;

	for (i = k = 0; i < n; i++)
		if (!jobs[i]->recorded && !jobs[i]->reviving)
			ms[k++] = &jobs[i]->m;
	/* in the group commit if there is one; else, or if that fails, as many as it can */
	if (k > 0 && d->cm != NULL)
		err = commit_run(d->cm, writes_fn, &w);
	if (k > 0 && d->cm != NULL && err == STORE_EAGAIN && held_at_stop(d))
		for (i = 0; i < k; i++)
			errs[i] = err;	/* held, given up at the stop: not again */
	else if (k > 0 && (d->cm == NULL || err != 0))
		store_msg_update_many(d->st, ms, k, errs);
	for (i = k = 0; i < n; i++) {
		struct deliver_job *j = jobs[i];
		int64_t next = j->queued ? j->m.next_attempt : -1;

		err = j->recorded || j->reviving ? 0 : errs[k++];
		if (j->reviving || (d->shared && j->no_dot
				    && (err == STORE_ELEASE || err == STORE_ENOTFOUND))) {
			if (job_revive(d, j, err)) {
				j->unwritten = j->unwritten ? j->unwritten : clock_us();
				left++;
				continue;
			}
			j->unwritten = 0;
			deliver_job_finished(d, j, -1);
			continue;
		}
		if (err == STORE_EAGAIN || err == STORE_EIO || err == STORE_ENOSPC) {
			if (!j->unwritten)
				msg_error("%s: cannot record the delivery outcome: %s; trying again",
					  j->m.qid, store_strerror(err));
			j->unwritten = j->unwritten ? j->unwritten : clock_us();
			left++;
			continue;
		}
		if (err == STORE_ELEASE) {
			/* taken by another node, or given up by the store with a bounce's commit */
			msg_warn("%s: the lease is no longer this node's: the outcome is not"
				 " written; left to the next take", j->m.qid);
		} else if (err == STORE_ENOTFOUND) {
			msg_info("%s: no longer queued when its outcome was written again (the"
				 " first write had been taken, or it was dropped)", j->m.qid);
			next = -1;
		} else if (err != 0) {
			/* a record the store cannot take: the next load says what it finds */
			msg_error("%s: cannot record the delivery outcome: %s", j->m.qid,
				  store_strerror(err));
			next = clock_us() + retry * US;
		} else if (j->unwritten) {
			msg_info("%s: delivery outcome recorded after %.1f s", j->m.qid,
				 (double) (clock_us() - j->unwritten) / US);
		}
		if (err == 0 && !j->queued)
			msg_info_as("qmgr", "%s: removed", j->m.qid);
		j->unwritten = 0;
		deliver_job_finished(d, j, next);
	}
	free(errs);
	free(ms);
	return left;
}

/*
 * job_wait_written - write the outcomes job_record() could not, once a
 * second, until they are written or delivery stops (then the next start
 * finds their inflight marks, as after a crash), not again once held at
 * the stop (held_at_stop()). The thread takes no other work meanwhile:
 * its store refuses writes.
 */
static void job_wait_written(struct deliver *d, struct deliver_job *const *batch, size_t n)
{
	struct deliver_job **jobs = xcalloc(n, sizeof(*jobs));
	size_t i, k;
	int held;

	memcpy(jobs, batch, n * sizeof(*jobs));
	for (;;) {
		for (i = k = 0; i < n; i++)
			if (jobs[i]->unwritten)
				jobs[k++] = jobs[i];
		if ((n = k) == 0)
			break;
		/* a second, or less at a stop; not on d->wake, whose signals are for idle threads */
		(void) poll(&(struct pollfd) { .fd = d->stopping_fd, .events = POLLIN }, 1, 1000);
		if ((held = held_at_stop(d)) && !deliver_stopping(d))
			continue;	/* not again: delivery's stop comes after the writer's */
		if (held || (job_record(d, jobs, n) > 0 && deliver_stopping(d))) {
			for (i = 0; i < n; i++)
				if (jobs[i]->reviving)
					msg_error("%s: not revived at stop: left as the node that took"
						  " it leaves it", jobs[i]->m.qid);
				else if (jobs[i]->unwritten)
					msg_error("%s: delivery outcome not recorded at stop: the next"
						  " start finds %s", jobs[i]->m.qid, held ? "what"
						  " PostgreSQL decided (commits wait for the synchronous"
						  " standby)" : "its inflight mark");
			break;
		}
	}
	free(jobs);
}

/* deliver_record_batch - decide what is not yet, write every outcome, and wait for the writes */
void deliver_record_batch(struct deliver *d, struct deliver_job **jobs, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		deliver_replied(d, jobs[i]);
	if (job_record(d, jobs, n) > 0)
		job_wait_written(d, jobs, n);
}
