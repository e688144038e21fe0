/*
 * NAME
 *	submit 3
 * SUMMARY
 *	the end of each message: key, duplicate answer, commit, reply
 * DESCRIPTION
 *	submit_message() is the engine's message hook. It derives the key
 *	and fingerprint (queue/keys.h), answers a duplicate or a mismatch from a
 *	read transaction without touching the writer, and otherwise builds
 *	the message as it will be relayed (our Received header first, key
 *	headers stripped) and hands it to the group commit. commit_done()
 *	turns the decision into the SMTP reply and the log lines.
 *
 *	The log lines are Postfix's, so that its log parsers (pflogsumm)
 *	count what idemrelay did: a message queued is smtpd's "client="
 *	line, cleanup's "message-id=" line and qmgr's "from=<S>, size=N,
 *	nrcpt=K" line; a duplicate, answered 250 with the original QID and
 *	stored nowhere, is what Postfix calls a discard ("QID: discard:
 *	END-OF-MESSAGE from ...", QID the original's), never a second
 *	message received; a mismatch is a reject.
 *
 *	The route (conf_route_match(): AUTH user, sender, listener) is
 *	decided here and stored with the message, so that delivery uses
 *	the upstream group it had at acceptance; the log line names it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../smtp/smtp_data.h"
#include "../util/clock.h"
#include "../util/log.h"
#include "dupcount.h"
#include "../queue/keys.h"
#include "../queue/metrics.h"
#include "../queue/qid.h"
#include "server_int.h"

/* log_rcpts - " to=<a> to=<b>" for a log line; how many */
static size_t log_rcpts(struct buf *b, const struct store_msg *m, const uint8_t *skip, int want)
{
	size_t i, k = 0;

	for (i = 0; i < m->n_rcpts; i++)
		if (skip == NULL || skip[i] == want) {
			buf_printf(b, " to=<%s>", m->rcpts[i].addr);
			k++;
		}
	return k;
}

/*
 * A submission: the commit request and what the event loop keeps beside
 * it. req comes first, so the commit callback's pointer is the submission.
 */
struct submission {
	struct commit_req req;
	struct conn *c;			/* not owned */
	/* for the log lines, as they were at the end of DATA (a pipelined EHLO may follow) */
	enum keys_source source;
	char key[KEYS_MAX_LEN + 1];	/* "" if none */
	char message_id[KEYS_MSGID_LOG + 1];	/* printable, "" if none */
	char helo[256];			/* the part logged */
	int esmtp;
	int64_t t0;			/* end of DATA, for the accept latency */
	size_t long_lines;		/* lines over 998 octets as received */
	int folded;			/* and broken in the copy relayed */
	int nul;			/* a NUL, relayed (limits.nul = "pass") */
};

/* req_free - release a submission and what it owns */
static void req_free(struct commit_req *req)
{
	if (req == NULL)
		return;
	store_msg_free(&req->msg);
	free(req->hashes);
	free(req->claimed);
	free((struct submission *) req);
}

/* reply_text - the SMTP reply for a decided request */
static const char *reply_text(const struct commit_req *req, char *reply, size_t len)
{
	switch (req->outcome) {
	case COMMIT_QUEUED:
	case COMMIT_PARTIAL:
		snprintf(reply, len, "250 2.0.0 Ok: queued as %s", req->msg.qid);
		break;
	case COMMIT_DUPLICATE:
		snprintf(reply, len, "250 2.0.0 Ok: queued as %s (duplicate)", req->orig_qid);
		break;
	case COMMIT_MISMATCH:
		snprintf(reply, len, "554 5.7.0 idempotency key already used for different "
			 "content (queued as %s)", req->orig_qid);
		break;
	case COMMIT_FAILED:
		/* the database away, or the commit's fate unknown and not read back (SPEC 7) */
		if (req->error == STORE_EAGAIN)
			snprintf(reply, len, "451 4.3.0 Temporary failure: the store cannot be"
				 " reached; try again later");
		else
			snprintf(reply, len, "452 4.3.1 Insufficient system storage");
		break;
	}
	return reply;
}

/* log_key - " key=K (source)" */
static void log_key(struct buf *b, const struct submission *sub)
{
	buf_printf(b, " key=%s (%s)", sub->source != KEYS_NONE ? sub->key : "none",
		   keys_source_name(sub->source));
}

/*
 * log_client - "QID: client=unknown[ADDR] helo=<H>[ key=K (source)] from=<S>",
 * Postfix's client= (which its log parsers expect), the HELO apart
 */
static void log_client(struct buf *b, const struct submission *sub, int key)
{
	buf_printf(b, "%s: client=unknown[%s] helo=<%s>", sub->req.msg.qid, sub->c->addr,
		   sub->helo);
	if (key)
		log_key(b, sub);
	buf_printf(b, " from=<%s>", sub->req.msg.from);
}

/*
 * log_discard - Postfix's line for the recipients answered but not queued
 * (claimed: want 1 of them, -1 all): "QID: discard: END-OF-MESSAGE from
 * unknown[ADDR]: REPLY; from=<S> to=<R>... proto=ESMTP helo=<H>" for a
 * duplicate (QID the original's), "NOQUEUE: reject: ..." with no QID
 */
static void log_discard(struct buf *b, const struct submission *sub, const char *qid,
			const char *reply, int want)
{
	conn_log_head(b, sub->c, qid, "END-OF-MESSAGE", reply, sub->req.msg.from);
	log_rcpts(b, &sub->req.msg, want < 0 ? NULL : sub->req.claimed, want);
	conn_log_tail(b, sub->esmtp, sub->helo);
}

/* log_queued - Postfix's lines for a message queued (smtpd's, cleanup's and qmgr's) */
static void log_queued(const struct submission *sub)
{
	const struct commit_req *req = &sub->req;
	struct buf line = BUF_INIT;
	size_t nrcpt;

	log_client(&line, sub, 1);
	nrcpt = log_rcpts(&line, &req->msg, req->claimed, 0);	/* the ones queued */
	if (req->msg.user)
		buf_printf(&line, " sasl_username=%s", req->msg.user);
	if (req->msg.route)
		buf_printf(&line, " route=%s", req->msg.route);
	buf_printf(&line, " size=%zu", req->msg.data_len);
	if (sub->long_lines)
		buf_printf(&line, " long_lines=%zu (%s)", sub->long_lines,
			   sub->folded ? "folded" : "as received");
	if (sub->nul)
		buf_printf(&line, " nul=yes");
	if (req->msg.smtputf8)
		buf_printf(&line, " smtputf8=yes");
	buf_printf(&line, " status=queued");
	if (req->shadow_hit)
		buf_printf(&line, " shadow=duplicate-of-%s", req->orig_qid);
	msg_info("%s", line.data);
	/* as Postfix's cleanup: find a message from what the application knows */
	if (sub->message_id[0])
		msg_info_as("cleanup", "%s: message-id=<%s>", req->msg.qid, sub->message_id);
	msg_info_as("qmgr", "%s: from=<%s>, size=%zu, nrcpt=%zu (queue active)",
		    req->msg.qid, req->msg.from, req->msg.data_len, nrcpt);
	buf_free(&line);
}

/* answered - count a decided request and log it, once its reply is out */
static void answered(struct commit_req *req, const char *reply)
{
	const struct submission *sub = (const struct submission *) req;
	struct buf line = BUF_INIT;
	int dup;

	metrics_answered(req->outcome, req->shadow_hit, clock_us() - sub->t0);
	dupcount_add(sub->c->srv->dc, req->outcome, req->orig_qid);
	switch (req->outcome) {
	case COMMIT_QUEUED:
	case COMMIT_PARTIAL:
		log_queued(sub);
		if (req->outcome == COMMIT_PARTIAL) {
			log_discard(&line, sub, req->orig_qid, reply, 1);
			buf_printf(&line, " status=duplicate partial=%s", req->msg.qid);
			msg_info("%s", line.data);
		}
		break;
	case COMMIT_DUPLICATE:
	case COMMIT_MISMATCH:			/* a duplicate names its original, a mismatch none */
		dup = req->outcome == COMMIT_DUPLICATE;
		log_discard(&line, sub, dup ? req->orig_qid : NULL, reply, -1);
		log_key(&line, sub);
		buf_printf(&line, " status=%s", dup ? "duplicate" : "mismatch");
		msg_info("%s", line.data);
		break;
	case COMMIT_FAILED:
		log_client(&line, sub, 0);
		msg_warn("%s status=refused store: %s", line.data, store_strerror(req->error));
		break;
	}
	buf_free(&line);
}

/* commit_done - a commit answered: reply, and resume the session */
static void commit_done(struct commit_req *req)
{
	struct submission *sub = (struct submission *) req;
	struct conn *c = sub->c;
	char reply[256];

	c->srv->n_inflight--;
	c->req = NULL;
	reply_text(req, reply, sizeof(reply));
	if (!c->dead) {			/* the reply first, the bookkeeping after */
		smtp_session_reply(c->s, reply);
		conn_process(c);
	}
	answered(req, reply);
	req_free(req);
}

/* answer_now - a request decided inside the hook: the reply (the engine goes on), the log */
static void answer_now(struct conn *c, struct submission *sub)
{
	char reply[256];

	smtp_session_reply(c->s, reply_text(&sub->req, reply, sizeof(reply)));
	answered(&sub->req, reply);
	req_free(&sub->req);
}

/* received_header - the one header idemrelay adds */
static void received_header(struct buf *b, const struct conn *c, const char *qid,
			    const struct smtp_tx *tx)
{
	const char *helo = smtp_session_helo(c->s);
	char date[64];

	/*
	 * RFC 3848: ESMTPS over TLS, ESMTPSA authenticated too (AUTH needs
	 * TLS here); RFC 6531 section 4.3: UTF8SMTP* for an SMTPUTF8 tx
	 */
	buf_printf(b, "Received: from %s ([%s])\r\n\tby %s (idemrelay) with %s%s id %s",
		   *helo ? helo : "unknown", c->addr, c->srv->cf->hostname,
		   tx->smtputf8 ? "UTF8SMTP" : "ESMTP",
		   !smtp_session_tls(c->s) ? "" : smtp_session_user(c->s) ? "SA" : "S", qid);
	if (tx->n_rcpts == 1)
		buf_printf(b, "\r\n\tfor <%s>", tx->rcpts[0].addr);
	buf_printf(b, "; %s\r\n", clock_date(date, sizeof(date), clock_us()));
}

/* submission_new - envelope, recipients and their claim hashes */
static struct submission *submission_new(struct conn *c, const struct smtp_tx *tx,
					 const struct keys_result *kr)
{
	const struct conf *cf = c->srv->cf;
	struct submission *sub = xcalloc(1, sizeof(*sub));
	struct commit_req *req = &sub->req;
	struct store_msg *m = &req->msg;
	const char *user = smtp_session_user(c->s);
	const char *scope = cf->keys.scope_user && user ? user : "";	/* per-tenant keys */
	const struct conf_route *route = conf_route_match(cf, user, tx->from, c->l->cf);
	size_t i;

	sub->c = c;
	sub->source = kr->source;
	memcpy(sub->key, kr->key, sizeof(sub->key));
	memcpy(sub->message_id, kr->message_id, sizeof(sub->message_id));
	snprintf(sub->helo, sizeof(sub->helo), "%s", smtp_session_helo(c->s));
	sub->esmtp = smtp_session_esmtp(c->s);
	req->done = commit_done;
	req->shadow = cf->keys.shadow;
	req->mismatch_accept = cf->keys.mismatch_accept;
	req->ttl = cf->store.key_ttl * 1000000;
	memcpy(req->fingerprint, kr->fingerprint, HASH_LEN);
	m->from = xstrdup(tx->from);
	m->user = user ? xstrdup(user) : NULL;
	m->route = route ? xstrdup(route->name) : NULL;	/* decided now, kept with it */
	m->envid = tx->envid ? xstrdup(tx->envid) : NULL;
	m->ret = tx->ret;
	m->body = tx->body;
	m->smtputf8 = tx->smtputf8;
	m->rcpts = xcalloc(tx->n_rcpts, sizeof(*m->rcpts));
	for (i = 0; i < tx->n_rcpts; i++) {	/* each identity once: the engine saw to it */
		m->rcpts[i].addr = xstrdup(tx->rcpts[i].addr);
		m->rcpts[i].notify = tx->rcpts[i].notify;
		m->rcpts[i].orcpt = tx->rcpts[i].orcpt ? xstrdup(tx->rcpts[i].orcpt) : NULL;
	}
	m->n_rcpts = tx->n_rcpts;
	req->claimed = xcalloc(m->n_rcpts ? m->n_rcpts : 1, 1);
	if (kr->source != KEYS_NONE) {
		req->hashes = xcalloc(m->n_rcpts ? m->n_rcpts : 1, sizeof(*req->hashes));
		for (i = 0; i < m->n_rcpts; i++)	/* filed as the engine told them apart */
			keys_claim_hash(scope, kr->key, tx->rcpts[i].id, req->hashes[i]);
		keys_index_hash(kr->key, req->msg.keyhash);
	}
	return sub;
}

/*
 * fast_duplicate - answer a duplicate or mismatch from a read transaction;
 * 1 if answered. Only where reads are local (STORE_CAP_LOCAL_READS):
 * elsewhere the read is a round trip to the database, and the event loop
 * never waits on the network; the commit thread answers duplicates
 * there, a batch of them per transaction.
 */
static int fast_duplicate(struct conn *c, struct commit_req *req)
{
	size_t n = req->msg.n_rcpts;
	struct store_claim *claims;
	int answered = 0;

	if (req->hashes == NULL || req->shadow
	    || !(store_caps(c->srv->st) & STORE_CAP_LOCAL_READS))
		return 0;
	claims = xcalloc(n, sizeof(*claims));
	if (store_claims_get(c->srv->st, NULL, req->msg.keyhash,
			     (const uint8_t (*)[STORE_HASH_LEN]) req->hashes, n,
			     clock_us(), claims) == 0) {
		commit_decide(req, claims);
		answered = req->outcome == COMMIT_DUPLICATE || req->outcome == COMMIT_MISMATCH;
	}
	free(claims);
	return answered;
}

/*
 * fold_lines - break the relayed copy's lines over 998 octets as Postfix's
 * SMTP client does (smtp_line_length_limit), for a next hop that would
 * refuse or cut them; the key and fingerprint were taken from the message
 * as received, so a retry of it is still the same message
 */
static int fold_lines(struct buf *data)
{
	struct buf folded = BUF_INIT;
	size_t n = smtp_data_fold(&folded, data->data, data->len, SMTP_TEXT_LINE_MAX);

	buf_free(data);
	*data = folded;
	return n > 0;
}

/* submit_message - end of DATA: derive the key, answer duplicates, else commit */
void submit_message(void *ctx, struct smtp_session *s, struct smtp_tx *tx)
{
	struct conn *c = ctx;
	struct server *srv = c->srv;
	struct keys_result kr;
	struct submission *sub;
	struct buf data = BUF_INIT;
	struct buf received = BUF_INIT;
	const char *helo = smtp_session_helo(s), *text = tx->data.data ? tx->data.data : "";
	int64_t t0 = clock_us();
	int rc;

	metrics_inc(METRICS_SUBMISSIONS);
	if (keys_derive(srv->cf, text, tx->data.len, tx->from, tx->envid, &kr) < 0) {
		conn_reject_log(c, "END-OF-MESSAGE", kr.error, tx, NULL);
		smtp_session_reply(s, kr.error);	/* tx goes with it */
		keys_free(&kr);
		return;
	}
	sub = submission_new(c, tx, &kr);
	sub->t0 = t0;
	buf_printf(&received, "%s [%s]", *helo ? helo : "unknown", c->addr);
	sub->req.msg.client = xstrndup(received.data, received.len);
	if (fast_duplicate(c, &sub->req)) {
		answer_now(c, sub);
		buf_free(&received);
		keys_free(&kr);
		return;
	}
	qid_next(sub->req.msg.qid);
	buf_reset(&received);
	received_header(&received, c, sub->req.msg.qid, tx);
	rc = keys_rewrite(&data, received.data, text, tx->data.len, &kr);
	buf_free(&received);
	keys_free(&kr);
	if (rc < 0) {
		log_client(&received, sub, 0);
		msg_warn("%s status=refused (key header spans out of order)", received.data);
		buf_free(&received);
		req_free(&sub->req);
		smtp_session_reply(s, "451 4.3.0 Error: internal error");
		return;
	}
	sub->long_lines = tx->long_lines;
	sub->nul = tx->nul;
	if (tx->long_lines && srv->cf->limits.long_lines == CONF_LONG_LINES_FOLD)
		sub->folded = fold_lines(&data);
	buf_free(&tx->data);		/* the copy above is the message now: one in memory, not two */
	sub->req.msg.data = data.data;
	sub->req.msg.data_len = data.len;
	/*
	 * A lone session with nothing else in flight: no other session's DATA
	 * can wait behind this thread, so it commits here, and the reply
	 * skips two thread hand-offs (about 40 us at the dot, BENCHMARKS.md).
	 */
	if (srv->n_conns == 1 && srv->n_inflight == 0 && commit_now(srv->cm, &sub->req)) {
		answer_now(c, sub);
		return;
	}
	c->req = &sub->req;
	srv->n_inflight++;
	commit_submit(srv->cm, &sub->req);
}

