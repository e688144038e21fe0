/*
 * NAME
 *	deliver 3
 * SUMMARY
 *	delivery scheduler, threads, and the bookkeeping of each attempt
 * DESCRIPTION
 *	deliver_start() loads every queued QID from the store into an
 *	in-memory queue (deliver_queue.c) and starts the delivery threads:
 *	upstream.connections of them for SMTP, one for a Maildir. (They are
 *	not util/workq.c's workers: they wait on a schedule ordered by time,
 *	gathering batches, not on a FIFO of jobs; a dispatcher feeding a
 *	work queue would add a hop and a wake-up to every batch.) A thread
 *	sleeps until a batch may start: once the earliest due message has
 *	waited DELIVER_GATHER for others to come due, or at once when a full
 *	batch is due. Messages accepted one by one then share a connection
 *	and one outcome transaction instead of paying for one each (a TCP
 *	handshake, a bridge thread and an fsync per message, measured in
 *	BENCHMARKS.md). It takes up to d->batch due messages, which become
 *	busy so that no other thread takes them, loads them (up to DELIVER_BATCH_BYTES of message data;
 *	the rest is handed back), hands them to the backend in one go (one
 *	upstream connection for the lot), then records each result.
 *
 *	Recording (job_decide, job_record): one log line per recipient;
 *	permanent failures and expired recipients get an RFC 3464 bounce
 *	(dsn.c) spooled under a new QID to the sender unless it is null;
 *	then the recipients' states, attempt counts and next_attempt are
 *	written and the inflight mark cleared. When no recipient is left
 *	queued the message leaves the spool. A message whose final dot was
 *	answered is decided at once (deliver_replied) and written in the
 *	same group commit as the next message's inflight mark, which the
 *	connection waits for anyway: a kill -9 then finds at most one
 *	message per connection marked with its outcome unwritten (the one
 *	whose dot is out, or the last one answered), not a whole batch,
 *	and costs no extra fsync. The rest of the batch is written in one
 *	transaction at its end.
 *
 *	The inflight mark found on a message at load time means an attempt
 *	died after its final dot may have gone out (the mark is always
 *	cleared by the update that records an outcome). upstream.ambiguous
 *	decides: "assume-delivered" makes the queued recipients unconfirmed
 *	and the message is never sent again; "retry" clears the mark and
 *	delivers again.
 *
 *	On a store shared by several nodes (store_shared()) the in-memory
 *	queue holds only what this node is about to deliver, each message
 *	under this node's lease: what it accepted itself (leased by the
 *	commit) and what the taker thread leased from the shared queue once
 *	due (store_queue_take(), every DELIVER_TAKE_EVERY or at a flush).
 *	A message deferred goes back to the shared queue (its lease given
 *	up by the write that defers it) and leaves the local one; any node
 *	takes it when due. The taker renews the leases held every third of
 *	store.lease. Delivery writes are fenced by the lease and ride in
 *	the submissions' group commit as on LMDB, sharing its round trip
 *	and WAL flush: a lost lease (STORE_ELEASE) fails that transaction,
 *	whose submissions the writer then commits one by one and whose
 *	delivery writes each alone (relay/commit.c), so it fails that
 *	message alone, which is then left to the node that holds it; its
 *	inflight mark fails too, so no final dot goes out from a node that
 *	lost the lease.
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
 *	NEWQID: sender non-delivery notification: QID
 *	QID: removed
 *	QID: revived: its inflight mark was never followed by a final dot; ...
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "../smtp/smtp.h"
#include "../util/clock.h"
#include "../util/deadline.h"
#include "../util/buf.h"
#include "../util/log.h"
#include "../relay/commit.h"
#include "deliver_impl.h"
#include "dsn.h"
#include "../relay/metrics.h"
#include "../relay/qid.h"

#define DELIVER_BATCH_SMTP	50	/* messages per upstream connection */
#define DELIVER_BATCH_MAILDIR	16
#define DELIVER_BATCH_BYTES	(64u << 20)	/* message data loaded per batch, at most */
#define DELIVER_MAX_SLEEP	60	/* seconds: re-check even if nothing is due */
#define DELIVER_GATHER		10000	/* us a due message waits for others to share its batch */
#define US			1000000LL
#define DELIVER_TAKE_EVERY	(1 * US)	/* shared store: due mail looked for this often */

/*
 * The retry settings change on SIGHUP while delivery threads read them:
 * they are read and written atomically, one value at a time.
 */
#define RETRY(c, name)	__atomic_load_n(&(c)->retry.name, __ATOMIC_RELAXED)

/* deliver_reload - new retry settings, for attempts from now on */
void deliver_reload(struct deliver *d, const struct conf *nc)
{
	struct conf *c = (struct conf *) d->c;	/* the live conf main owns */

	__atomic_store_n(&c->retry.first, nc->retry.first, __ATOMIC_RELAXED);
	__atomic_store_n(&c->retry.max, nc->retry.max, __ATOMIC_RELAXED);
	__atomic_store_n(&c->retry.give_up, nc->retry.give_up, __ATOMIC_RELAXED);
}

/* a mark and the outcomes that go with it */
struct mark {
	const char *qid;
	struct deliver_job *const *jobs;
	size_t n;
};

/* mark_fn - commit_run() step: the outcomes decided and unwritten, then the mark */
static void mark_fn(struct store_txn *t, void *arg)
{
	const struct mark *mk = arg;
	size_t i;

	for (i = 0; i < mk->n; i++)
		if (mk->jobs[i]->decided && !mk->jobs[i]->recorded)
			store_txn_msg_update(t, &mk->jobs[i]->m);
	store_txn_msg_set_inflight(t, mk->qid, 1);
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
	struct mark mk = { qid, jobs, n };
	size_t i;
	int err;

	if (d->cm == NULL)
		return store_msg_set_inflight(d->st, qid, 1);
	err = commit_run(d->cm, mark_fn, &mk);
	if (err == STORE_ELEASE)
		return store_msg_set_inflight(d->st, qid, 1);
	if (err == 0)
		for (i = 0; i < n; i++)
			if (jobs[i]->decided)
				jobs[i]->recorded = 1;
	return err;
}

/* deliver_set - one recipient's result */
void deliver_set(struct deliver_job *j, size_t i, enum deliver_outcome o,
		 const char *dsn, const char *reply)
{
	struct deliver_result *r = &j->res[i];

	r->outcome = o;
	snprintf(r->reply, sizeof(r->reply), "%s", reply ? reply : "");
	if (dsn)
		snprintf(r->dsn, sizeof(r->dsn), "%s", dsn);
	else
		deliver_dsn_code(r->dsn, r->reply);
}

/* deliver_set_all - the same result for every recipient in the attempt */
void deliver_set_all(struct deliver_job *j, enum deliver_outcome o,
		     const char *dsn, const char *reply)
{
	size_t i;

	for (i = 0; i < j->m.n_rcpts; i++)
		if (j->res[i].attempted)
			deliver_set(j, i, o, dsn, reply);
}

/*
 * schedule - (re)queue a QID, and wake a thread if that moves when the
 * next batch may start: a message joining a batch that is gathering
 * wakes no one (the caller does not hold the lock). A QID leased from
 * the shared queue (leased) may still be busy: the attempt before let
 * its lease go and is about to be done with it; then it comes back when
 * done (dq_again), else this lease would be renewed and never delivered.
 */
static void schedule(struct deliver *d, const char *qid, int64_t when, int leased)
{
	int64_t now = clock_us(), before;

	pthread_mutex_lock(&d->lock);
	before = dq_batch_start(&d->q, now, DELIVER_GATHER, d->batch);
	if ((leased ? dq_again : dq_add) (&d->q, qid, when)
	    && dq_batch_start(&d->q, now, DELIVER_GATHER, d->batch) != before)
		pthread_cond_signal(&d->wake);
	pthread_mutex_unlock(&d->lock);
}

/*
 * finished - a busy QID is done: reschedule at next, or forget it (next
 * < 0). On a shared store it is always forgotten and its lease let go
 * (if a write has not already): the shared queue has it, unless this
 * node leased it again meanwhile (schedule).
 */
static void finished(struct deliver *d, const char *qid, int64_t next)
{
	if (d->shared) {
		store_lease_release(d->st, qid);
		next = -1;
	}
	pthread_mutex_lock(&d->lock);
	dq_done(&d->q, qid, next);
	if (dq_state(&d->q, qid) == DQ_WAITING)
		pthread_cond_signal(&d->wake);
	pthread_mutex_unlock(&d->lock);
}

/* job_free - release a job; the struct may be reused */
static void job_free(struct deliver_job *j)
{
	store_msg_free(&j->m);
	free(j->res);
	memset(j, 0, sizeof(*j));
}

/* log_result - the Postfix-like line for one recipient */
static void log_result(const struct deliver_job *j, size_t i, const char *status,
		       const char *prefix, int64_t now)
{
	const struct deliver_result *r = &j->res[i];
	int64_t delay = now - j->m.accepted;

	if (delay < 0)
		delay = 0;
	metrics_delivered(status, delay);
	msg_info("%s: to=<%s>, relay=%s, delay=%lld.%02lld, dsn=%s, status=%s (%s%s)",
		 j->m.qid, j->m.rcpts[i].addr, j->relay[0] ? j->relay : "none",
		 (long long) (delay / US), (long long) (delay % US / 10000), r->dsn, status,
		 prefix, r->reply);
}

/* wants_failure_dsn - did the recipient's NOTIFY ask for failure notices? */
static int wants_failure_dsn(const struct store_rcpt *r)
{
	if (r->notify & SMTP_NOTIFY_NEVER)
		return 0;
	return r->notify == 0 || (r->notify & SMTP_NOTIFY_FAILURE);
}

/* job_bounce - spool an RFC 3464 notification for the recipients bounced[] */
static void job_bounce(struct deliver *d, struct deliver_job *j, const size_t *bounced,
		       size_t n, int64_t now)
{
	struct dsn_rcpt *dr = xcalloc(n, sizeof(*dr));
	struct dsn_report rep;
	struct store_rcpt rcpt;
	struct store_msg b;
	struct store_txn *t = NULL;
	struct buf text = BUF_INIT;
	char null_sender[] = "", client[] = "localhost";
	size_t i, k = 0;
	int err, eight;

	memset(&b, 0, sizeof(b));
	for (i = 0; i < n; i++) {
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
	if (k == 0)
		goto done;

	qid_next(b.qid);
	memset(&rep, 0, sizeof(rep));
	rep.hostname = d->c->hostname ? d->c->hostname : "localhost";
	rep.qid = j->m.qid;
	rep.dsn_qid = b.qid;
	rep.sender = j->m.from;
	rep.envid = j->m.envid;
	rep.ret = j->m.ret;
	rep.arrival = j->m.accepted;
	rep.now = now;
	rep.rcpts = dr;
	rep.n_rcpts = k;
	rep.msg = j->m.data;
	rep.msg_len = j->m.data_len;
	rep.utf8 = j->m.smtputf8;
	eight = dsn_build(&rep, &text);

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

	if ((err = store_txn_begin(d->st, &t)) == 0) {
		store_txn_msg_put(t, &b);
		err = store_txn_commit(t);
	}
	if (err != 0) {
		msg_error("%s: sender non-delivery notification not queued: %s",
			  j->m.qid, store_strerror(err));
		goto done;
	}
	msg_info("%s: sender non-delivery notification: %s", b.qid, j->m.qid);
	msg_info("%s: from=<>, size=%zu, nrcpt=1 (queue active)", b.qid, text.len);
	schedule(d, b.qid, now, 0);
done:
	buf_free(&text);
	free(dr);
}

/*
 * job_decide - the outcome of one attempt: log each recipient, bounce,
 * and set the new delivery state in j->m (the inflight mark cleared) and
 * j->queued, j->next. job_record() then writes it.
 */
static void job_decide(struct deliver *d, struct deliver_job *j)
{
	const struct conf *c = d->c;
	struct store_msg *m = &j->m;
	int64_t now = clock_us(), next = -1;
	int expired = now - m->accepted >= RETRY(c, give_up) * US;
	size_t i, n_bounced = 0, *bounced = xcalloc(m->n_rcpts, sizeof(*bounced));
	int queued = 0;

	for (i = 0; i < m->n_rcpts; i++) {
		struct deliver_result *r = &j->res[i];

		if (!r->attempted)
			continue;
		switch (r->outcome) {
		case DELIVER_SENT:
			m->rcpts[i].state = STORE_RCPT_SENT;
			log_result(j, i, "sent", "", now);
			break;
		case DELIVER_BOUNCED:
			m->rcpts[i].state = STORE_RCPT_BOUNCED;
			bounced[n_bounced++] = i;
			log_result(j, i, "bounced", "", now);
			break;
		case DELIVER_AMBIGUOUS:
			if (!c->upstream.ambiguous_retry) {
				m->rcpts[i].state = STORE_RCPT_UNCONFIRMED;
				log_result(j, i, "unconfirmed", "delivered-unconfirmed: ", now);
				break;
			}
			/* upstream.ambiguous = "retry": a deferral that may duplicate */
			if (!expired) {
				log_result(j, i, "deferred", "ambiguous, will resend: ", now);
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
				log_result(j, i, "bounced", "", now);
				break;
			}
			log_result(j, i, "deferred", "", now);
			queued = 1;
			break;
		}
		free(m->rcpts[i].reply);
		m->rcpts[i].reply = xstrdup(r->reply);
	}
	for (i = 0; i < m->n_rcpts; i++)
		if (m->rcpts[i].state == STORE_RCPT_QUEUED)
			queued = 1;

	if (n_bounced > 0 && m->from[0] != 0)
		job_bounce(d, j, bounced, n_bounced, now);

	m->inflight = 0;
	if (queued) {
		m->attempts++;
		m->next_attempt = now + deliver_backoff(RETRY(c, first), RETRY(c, max),
							m->attempts) * US;
		next = m->next_attempt;
	}
	j->queued = queued;
	j->next = next;
	j->decided = 1;
	free(bounced);
}

/* deliver_replied - decide a job now; it is written with the next mark or the batch */
void deliver_replied(struct deliver *d, struct deliver_job *j)
{
	if (!j->decided)
		job_decide(d, j);
}

/* a batch of outcomes to write in one transaction */
struct record {
	struct store_msg **ms;
	size_t n;
};

/* record_fn - commit_run() step: every outcome of the batch */
static void record_fn(struct store_txn *t, void *arg)
{
	struct record *r = arg;
	size_t i;

	for (i = 0; i < r->n; i++)
		store_txn_msg_update(t, r->ms[i]);
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
		if (now - j->reviving > 2 * d->lease + 60 * US) {
			msg_warn("%s: not revived within %lld s (%s): left to the node that took it",
				 j->m.qid, (long long) ((now - j->reviving) / US), store_strerror(err));
			return 0;
		}
		return 1;
	}
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
	struct record record;
	struct store_msg **ms = xcalloc(n, sizeof(*ms));
	int *errs = xcalloc(n, sizeof(*errs)), err;
	int64_t retry = RETRY(d->c, first) > 0 ? RETRY(d->c, first) : 60;
	size_t i, k, left = 0;

	for (i = k = 0; i < n; i++)
		if (!jobs[i]->recorded && !jobs[i]->reviving)
			ms[k++] = &jobs[i]->m;
	record.ms = ms;
	record.n = k;
	/* in the group commit if there is one; else, or if that fails, as many as it can */
	if (k > 0 && (d->cm == NULL || commit_run(d->cm, record_fn, &record) != 0))
		store_msg_update_many(d->st, ms, k, errs);
	for (i = k = 0; i < n; i++) {
		struct deliver_job *j = jobs[i];

		err = j->recorded || j->reviving ? 0 : errs[k++];
		if (j->reviving || (d->shared && j->no_dot
				    && (err == STORE_ELEASE || err == STORE_ENOTFOUND))) {
			if (job_revive(d, j, err)) {
				j->unwritten = j->unwritten ? j->unwritten : clock_us();
				left++;
				continue;
			}
			j->unwritten = 0;
			finished(d, j->m.qid, -1);
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
			msg_warn("%s: the lease went to another node before the outcome was"
				 " written; left to it", j->m.qid);
		} else if (err == STORE_ENOTFOUND) {
			msg_info("%s: no longer queued when its outcome was written again (the"
				 " first write had been taken, or it was dropped)", j->m.qid);
			j->next = -1;
		} else if (err != 0) {
			/* a record the store cannot take: the next load says what it finds */
			msg_error("%s: cannot record the delivery outcome: %s", j->m.qid,
				  store_strerror(err));
			j->next = clock_us() + retry * US;
		} else if (j->unwritten) {
			msg_info("%s: delivery outcome recorded after %.1f s", j->m.qid,
				 (double) (clock_us() - j->unwritten) / US);
		}
		if (err == 0 && !j->queued)
			msg_info("%s: removed", j->m.qid);
		j->unwritten = 0;
		finished(d, j->m.qid, j->next);
	}
	free(errs);
	free(ms);
	return left;
}

/*
 * job_wait_written - write the outcomes job_record() could not, once a
 * second, until they are written or delivery stops (then the next start
 * finds their inflight marks, as after a crash). The thread takes no
 * other work meanwhile: its store refuses writes.
 */
static void job_wait_written(struct deliver *d, struct deliver_job *const *batch, size_t n)
{
	struct deliver_job **jobs = xcalloc(n, sizeof(*jobs));
	struct timespec ts;
	int64_t at;
	size_t i, k;

	memcpy(jobs, batch, n * sizeof(*jobs));
	for (;;) {
		for (i = k = 0; i < n; i++)
			if (jobs[i]->unwritten)
				jobs[k++] = jobs[i];
		if ((n = k) == 0)
			break;
		pthread_mutex_lock(&d->lock);
		if (!d->stop) {
			at = clock_us() + US;
			ts.tv_sec = (time_t) (at / US);
			ts.tv_nsec = (long) (at % US) * 1000;
			pthread_cond_timedwait(&d->wake, &d->lock, &ts);
		}
		pthread_mutex_unlock(&d->lock);
		if (job_record(d, jobs, n) > 0 && deliver_stopping(d)) {
			for (i = 0; i < n; i++)
				if (jobs[i]->reviving)
					msg_error("%s: not revived at stop: left as the node that took"
						  " it leaves it", jobs[i]->m.qid);
				else if (jobs[i]->unwritten)
					msg_error("%s: delivery outcome not recorded at stop: the next"
						  " start finds its inflight mark", jobs[i]->m.qid);
			break;
		}
	}
	free(jobs);
}

/* job_finish - decide and record one attempt on its own */
static void job_finish(struct deliver *d, struct deliver_job *j)
{
	job_decide(d, j);
	if (job_record(d, &j, 1) > 0)
		job_wait_written(d, &j, 1);
}

/*
 * job_load - load a due message. Returns 1 with a job ready for the
 * backend, 0 when there is nothing to send (the QID was finished here).
 */
static int job_load(struct deliver *d, const char *qid, struct deliver_job *j)
{
	const struct conf *c = d->c;
	int64_t now = clock_us();
	size_t i, n_queued = 0;
	int err;

	memset(j, 0, sizeof(*j));
	if ((err = store_msg_load(d->st, qid, &j->m)) != 0) {
		if (err == STORE_ENOTFOUND) {	/* dropped, or done by another path */
			finished(d, qid, -1);
			return 0;
		}
		msg_warn("%s: cannot load for delivery: %s", qid, store_strerror(err));
		finished(d, qid, now + (RETRY(c, first) > 0 ? RETRY(c, first) : 60) * US);
		return 0;
	}
	j->res = xcalloc(j->m.n_rcpts, sizeof(*j->res));
	for (i = 0; i < j->m.n_rcpts; i++) {
		if (j->m.rcpts[i].state != STORE_RCPT_QUEUED)
			continue;
		j->res[i].attempted = 1;
		deliver_set(j, i, DELIVER_DEFERRED, "4.3.0", "delivery not attempted");
		n_queued++;
	}
	if (n_queued == 0) {
		msg_warn("%s: in the queue with no recipient left; removing", qid);
		j->m.inflight = 0;
		if (store_msg_update(d->st, &j->m) == 0)
			msg_info("%s: removed", qid);
		finished(d, qid, -1);
		job_free(j);
		return 0;
	}
	if (j->m.inflight) {
		if (!c->upstream.ambiguous_retry) {
			snprintf(j->relay, sizeof(j->relay), "none");
			deliver_set_all(j, DELIVER_AMBIGUOUS, "4.4.2",
					"delivery was interrupted after the final dot may have"
					" been sent; not sending again");
			job_finish(d, j);
			job_free(j);
			return 0;
		}
		msg_info("%s: delivery was interrupted after the final dot may have been sent;"
			 " sending again (upstream.ambiguous = retry)", qid);
		if ((err = store_msg_set_inflight(d->st, qid, 0)) != 0)
			msg_warn("%s: cannot clear the inflight mark: %s", qid,
				 store_strerror(err));
		j->m.inflight = 0;
	}
	return 1;
}

/* sched_wait - sleep until when, new work or stop (lock held) */
static void sched_wait(struct deliver *d, int64_t when)
{
	int64_t now = clock_us();
	struct timespec ts;

	if (when > now + DELIVER_MAX_SLEEP * US)
		when = now + DELIVER_MAX_SLEEP * US;
	ts.tv_sec = (time_t) (when / US);
	ts.tv_nsec = (long) (when % US) * 1000;
	pthread_cond_timedwait(&d->wake, &d->lock, &ts);
}

/* take_batch - the next batch once it may start, or 0 when stopped (lock held) */
static size_t take_batch(struct deliver *d, char (*qids)[STORE_QID_SIZE])
{
	int64_t now, start;
	size_t n;

	while (!d->stop) {
		now = clock_us();
		start = dq_batch_start(&d->q, now, DELIVER_GATHER, d->batch);
		if (start <= now && (n = dq_take_due(&d->q, now, qids, d->batch)) > 0)
			return n;
		sched_wait(d, start);
	}
	return 0;
}

/* deliver_thread - take due batches and deliver them until stopped */
static void *deliver_thread(void *arg)
{
	struct deliver *d = arg;
	char (*qids)[STORE_QID_SIZE] = xcalloc(d->batch, sizeof(*qids));
	struct deliver_job *jobs = xcalloc(d->batch, sizeof(*jobs));
	struct deliver_job **ready = xcalloc(d->batch, sizeof(*ready));
	size_t n, i, n_ready, bytes;

	deadline_stop_on(d->stopping_fd);	/* a connect or handshake ends at a stop */
	for (;;) {
		pthread_mutex_lock(&d->lock);
		n = take_batch(d, qids);
		pthread_mutex_unlock(&d->lock);
		if (n == 0)
			break;
		for (i = n_ready = bytes = 0; i < n; i++) {
			/* bounded memory: leave the rest to the next pass */
			if (bytes >= DELIVER_BATCH_BYTES) {
				finished(d, qids[i], clock_us());
				continue;
			}
			if (!job_load(d, qids[i], &jobs[n_ready]))
				continue;
			bytes += jobs[n_ready].m.data_len;
			ready[n_ready] = &jobs[n_ready];
			n_ready++;
		}
		if (n_ready == 0)
			continue;
		if (d->c->upstream.maildir)
			for (i = 0; i < n_ready; i++)
				deliver_maildir_one(d, ready[i]);
		else
			deliver_smtp_batch(d, ready, n_ready);
		for (i = 0; i < n_ready; i++)
			if (!ready[i]->decided)
				job_decide(d, ready[i]);
		if (job_record(d, ready, n_ready) > 0)
			job_wait_written(d, ready, n_ready);
		for (i = 0; i < n_ready; i++)
			job_free(ready[i]);
	}
	free(ready);
	free(jobs);
	free(qids);
	return NULL;
}

/* take_one - store_queue_take() callback: leased to this node, due now */
static int take_one(void *arg, const char *qid, int64_t next_attempt)
{
	(void) next_attempt;
	schedule(arg, qid, clock_us(), 1);
	return 0;
}

/*
 * take_thread - a shared store: renew the leases held, and lease due mail
 * while the local queue has room for it (what every delivery thread can
 * take in one batch), every DELIVER_TAKE_EVERY or at once after a flush
 */
static void *take_thread(void *arg)
{
	struct deliver *d = arg;
	size_t room, want = d->batch * d->n_threads;
	int64_t now, renew_at = 0;
	struct timespec ts;
	int err;

	for (;;) {
		pthread_mutex_lock(&d->lock);
		if (!d->stop && !d->take_now) {
			now = clock_us() + DELIVER_TAKE_EVERY;
			ts.tv_sec = (time_t) (now / US);
			ts.tv_nsec = (long) (now % US) * 1000;
			pthread_cond_timedwait(&d->take_wake, &d->lock, &ts);
		}
		d->take_now = 0;
		room = dq_count(&d->q) < want ? want - dq_count(&d->q) : 0;
		pthread_mutex_unlock(&d->lock);
		if (deliver_stopping(d))
			break;
		now = clock_us();
		if (now >= renew_at) {
			if ((err = store_lease_renew(d->st, now)) != 0)
				msg_debug("delivery: leases not renewed: %s", store_strerror(err));
			renew_at = now + d->lease / 3;
		}
		if (room > 0 && (err = store_queue_take(d->st, now, room, take_one, d)) != 0)
			msg_debug("delivery: nothing taken from the shared queue: %s",
				  store_strerror(err));
	}
	return NULL;
}

/* load_one - store_queue_list callback: schedule what the store holds */
static int load_one(void *arg, const char *qid, int64_t next_attempt)
{
	struct deliver *d = arg;

	dq_add(&d->q, qid, next_attempt);
	return 0;
}

/* deliver_start - load the queue and start the threads */
struct deliver *deliver_start(const struct conf *c, struct store *st, struct commit *cm)
{
	struct deliver *d = xcalloc(1, sizeof(*d));
	size_t i;
	int err;

	d->c = c;
	d->st = st;
	d->cm = cm;
	d->shared = store_shared(st);
	d->lease = c->store.lease * US;
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->wake, NULL);
	pthread_cond_init(&d->take_wake, NULL);
	dq_init(&d->q);
	if ((d->stopping_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
		msg_fatal("delivery: eventfd: %s", strerror(errno));
	if (c->upstream.maildir == NULL && c->upstream.n_hosts == 0)
		msg_fatal("delivery: no upstream.host and no upstream.maildir");
	if (c->upstream.maildir) {
		d->n_threads = 1;
		d->batch = DELIVER_BATCH_MAILDIR;
	} else {
		d->n_threads = c->upstream.connections > 0 ? (size_t) c->upstream.connections : 1;
		d->batch = DELIVER_BATCH_SMTP;
	}
	if ((err = store_queue_list(st, load_one, d)) != 0)
		msg_fatal("delivery: cannot list the queue: %s", store_strerror(err));
	msg_info("delivery: %zu queued, %zu thread%s, %s%s", dq_count(&d->q), d->n_threads,
		 d->n_threads == 1 ? "" : "s", c->upstream.maildir ? "maildir " : "upstream ",
		 c->upstream.maildir ? c->upstream.maildir : c->upstream.hosts[0].host);
	d->threads = xcalloc(d->n_threads, sizeof(*d->threads));
	for (i = 0; i < d->n_threads; i++)
		if ((err = pthread_create(&d->threads[i], NULL, deliver_thread, d)) != 0)
			msg_fatal("delivery: cannot start a thread: %s", strerror(err));
	if (d->shared && (err = pthread_create(&d->taker, NULL, take_thread, d)) != 0)
		msg_fatal("delivery: cannot start a thread: %s", strerror(err));
	return d;
}

/* deliver_enqueue - a message was just committed: deliver it now */
void deliver_enqueue(struct deliver *d, const char *qid)
{
	if (d == NULL || qid == NULL)
		return;
	schedule(d, qid, clock_us(), 0);
}

/* deliver_flush - every waiting message is due now */
void deliver_flush(struct deliver *d)
{
	int err;

	if (d == NULL)
		return;
	if (d->shared && (err = store_queue_due(d->st, NULL, clock_us())) != 0)
		msg_warn("control: flush: the shared queue: %s", store_strerror(err));
	pthread_mutex_lock(&d->lock);
	dq_flush(&d->q, clock_us());
	pthread_cond_broadcast(&d->wake);
	d->take_now = 1;
	pthread_cond_signal(&d->take_wake);
	pthread_mutex_unlock(&d->lock);
}

/* deliver_retry - make one waiting message due now (idemrelayctl retry) */
int deliver_retry(struct deliver *d, const char *qid)
{
	enum dq_state state;

	if (d == NULL)
		return -1;
	pthread_mutex_lock(&d->lock);
	if ((state = dq_state(&d->q, qid)) == DQ_WAITING && dq_add(&d->q, qid, clock_us()))
		pthread_cond_signal(&d->wake);
	pthread_mutex_unlock(&d->lock);
	if (d->shared && state == DQ_UNKNOWN) {	/* waiting in the shared queue, maybe */
		if (store_queue_due(d->st, qid, clock_us()) != 0)
			return -1;
		pthread_mutex_lock(&d->lock);
		d->take_now = 1;
		pthread_cond_signal(&d->take_wake);
		pthread_mutex_unlock(&d->lock);
		return 0;
	}
	return state == DQ_WAITING ? 0 : state == DQ_BUSY_NOW ? 1 : -1;
}

/* deliver_drop - take a waiting message out of the schedule (idemrelayctl drop) */
int deliver_drop(struct deliver *d, const char *qid)
{
	enum dq_state state;

	if (d == NULL)
		return 0;
	pthread_mutex_lock(&d->lock);
	if ((state = dq_state(&d->q, qid)) == DQ_WAITING)
		dq_done(&d->q, qid, -1);
	pthread_mutex_unlock(&d->lock);
	return state == DQ_BUSY_NOW;
}

/* deliver_stop - stop taking work, let sessions in progress end, join */
void deliver_stop(struct deliver *d)
{
	size_t i;

	if (d == NULL)
		return;
	pthread_mutex_lock(&d->lock);
	d->stop = 1;
	pthread_cond_broadcast(&d->wake);
	pthread_cond_signal(&d->take_wake);
	pthread_mutex_unlock(&d->lock);
	(void) !eventfd_write(d->stopping_fd, 1);	/* stays readable: wakes every bridge */
	for (i = 0; i < d->n_threads; i++)
		pthread_join(d->threads[i], NULL);
	if (d->shared)
		pthread_join(d->taker, NULL);
	free(d->threads);
	close(d->stopping_fd);
	dq_free(&d->q);
	pthread_cond_destroy(&d->wake);
	pthread_cond_destroy(&d->take_wake);
	pthread_mutex_destroy(&d->lock);
	free(d);
}

/* deliver_stopping - has deliver_stop() been called? (backends cut retries short) */
int deliver_stopping(struct deliver *d)
{
	int stop;

	pthread_mutex_lock(&d->lock);
	stop = d->stop;
	pthread_mutex_unlock(&d->lock);
	return stop;
}
