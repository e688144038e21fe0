/*
 * test_deliver_notice - a bounce's non-delivery notice is part of its
 * outcome (deliver/deliver_record.c: job_bounce), written in one
 * transaction with it, and a bounce is never done without it. On LMDB,
 * or PostgreSQL with IDEMRELAY_PG_URL set (test_store_fx.h; the reserve's
 * case is LMDB's alone). Each case starts delivery with begin(); its
 * teardown stops it, so a failed case leaves no thread behind.
 *
 * test_notice_reserve: an LMDB store filled by acceptance up to its
 * delivery reserve (store_space.c refuses new submissions there), an
 * upstream that answers 550: the notice, made by delivery, may use the
 * reserve as delivery's other writes do, so the message bounces at once
 * and the notice, returning the whole original (some 22 KB, far more
 * than the fillers that found no room), goes to the sender (through the
 * test's transport) while the store is still full; held to the reserve,
 * nothing past give_up could ever leave a full store.
 *
 * test_notice_store_away: the notice's put fails with STORE_EAGAIN, as
 * PostgreSQL's does while it is away (or an LMDB map truly full), for a
 * message past retry.give_up whose upstream answers 451 (bounced 4.4.7):
 * its recipients that want a notice stay queued with their reply,
 * deferred by the backoff earned, no attempt charged, logged dsn=4.3.0;
 * those with NOTIFY=NEVER or SUCCESS alone bounce as before. Once the store is back
 * the next attempt bounces them again with the notice.
 *
 * test_notice_headers_only: a store with room for a notice of the
 * original's headers but not for one returning the whole of it (the
 * default for a message up to 50,000 bytes): the recipient bounces at
 * once and its notice holds the headers alone (text/rfc822-headers),
 * says so to the sender, and is logged so. test_notice_no_room: no room
 * even for that: both forms were tried, the recipient stays queued,
 * deferred dsn=4.3.0, its attempts (many) unchanged and due after the
 * backoff they earned (not every retry.first: the upstream is asked
 * again), and bounces with the whole original once there is room.
 *
 * test_notice_with_its_outcome: the bounce's outcome refused, as by a
 * kill -9 before it was durable: its notice is not queued either, and
 * after the restart the sender gets one notice in all, not two.
 */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "../../conf/conf.h"
#include "../../deliver/deliver_impl.h"
#include "../../smtp/smtp.h"
#include "../../store/store_backend.h"
#include "../../util/log.h"
#include "test_store_help.h"

#define SMALL_MAP	(2u << 20)	/* filled by a few hundred messages */
#define MAX_FILL	4000
#define WAIT_US		(20 * SEC)	/* the deadline of every wait here */
#define FAR		(3600 * SEC)	/* the fillers are due this far off */
#define SENDER		"sender@example.com"	/* msg_new()'s */
#define TARGET		"NOTE00000001"	/* 3 recipients: NOTIFY default, NEVER, SUCCESS */
#define NULLS		"NOTE00000002"	/* from the null sender */
#define TRIED		20		/* spool_text's attempts: a backoff at retry.max */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const char *upstream_reply;	/* the test upstream's answer to every recipient */
static int notices;			/* notices to SENDER the transport was given */
static char notice_text[8192];		/* the last one's first octets */
static size_t notice_len;		/* ... and its size */

/* notice_send - the test's upstream: takes a notice to SENDER, answers upstream_reply to the rest */
static void notice_send(struct deliver *d, const struct conf_upstream *up,
			struct deliver_job **jobs, size_t n)
{
	size_t i;

	(void) d;
	(void) up;
	for (i = 0; i < n; i++) {
		struct deliver_job *j = jobs[i];

		snprintf(j->relay, sizeof(j->relay), "test");
		if (j->m.from[0] == 0 && strcmp(j->m.rcpts[0].addr, SENDER) == 0) {
			pthread_mutex_lock(&lock);
			notices++;
			snprintf(notice_text, sizeof(notice_text), "%.*s",
				 (int) j->m.data_len, j->m.data);
			notice_len = j->m.data_len;
			pthread_mutex_unlock(&lock);
			deliver_set_all(j, DELIVER_SENT, "2.0.0", "250 2.0.0 Ok");
			continue;
		}
		deliver_set_all(j, upstream_reply[0] == '5' ? DELIVER_BOUNCED : DELIVER_DEFERRED,
				NULL, upstream_reply);
	}
}

static const struct deliver_transport notice_transport = {
	.name = "test", .limited = 0, .batch = 8, .send = notice_send
};

/*
 * a store whose notice puts fail: STORE_EAGAIN while away is set,
 * STORE_ENOSPC for a notice larger than room (0: no limit); and whose
 * delivery writes of TARGET fail (STORE_EIO) while lost is set, as if
 * the daemon were killed before they were durable
 */
static struct store_ops away_ops;
static const struct store_ops *real_ops;
static int away;			/* atomic */
static size_t room;			/* atomic */
static int lost;			/* atomic */
static int notice_puts;			/* atomic: notices the store was given */
static int lost_writes;			/* atomic: TARGET's delivery writes refused */

/* away_begin - the real begin, its transaction's table ours */
static int away_begin(struct store *st, const uint8_t (*keys)[STORE_HASH_LEN], size_t n,
		      struct store_txn **out)
{
	int err = real_ops->txn_begin(st, keys, n, out);

	if (err == 0)
		(*out)->ops = &away_ops;
	return err;
}

/*
 * away_msg_put - a message from the null sender fails while away, as a
 * commit to a database gone, and when larger than room, as at a full map
 */
static void away_msg_put(struct store_txn *t, const struct store_msg *m)
{
	size_t limit = __atomic_load_n(&room, __ATOMIC_SEQ_CST);

	if (m->from[0] == 0)
		__atomic_add_fetch(&notice_puts, 1, __ATOMIC_SEQ_CST);
	if (m->from[0] == 0 && __atomic_load_n(&away, __ATOMIC_SEQ_CST))
		store_txn_fail(t, STORE_EAGAIN);
	else if (m->from[0] == 0 && limit > 0 && m->data_len > limit)
		store_txn_fail(t, STORE_ENOSPC);
	else
		real_ops->txn_msg_put(t, m);
}

/* away_msg_update - TARGET's delivery write refused while lost: never durable */
static void away_msg_update(struct store_txn *t, const struct store_msg *m)
{
	if (strcmp(m->qid, TARGET) == 0 && __atomic_load_n(&lost, __ATOMIC_SEQ_CST)) {
		__atomic_add_fetch(&lost_writes, 1, __ATOMIC_SEQ_CST);
		store_txn_fail(t, STORE_EIO);
	} else {
		real_ops->txn_msg_update(t, m);
	}
}

/* away_install - f's store through away_ops, present, no limit (a failed test may leave either) */
static void away_install(struct fx *f)
{
	__atomic_store_n(&away, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&room, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&lost, 0, __ATOMIC_SEQ_CST);
	real_ops = f->st->ops;
	away_ops = *real_ops;
	away_ops.txn_begin = away_begin;
	away_ops.txn_msg_put = away_msg_put;
	away_ops.txn_msg_update = away_msg_update;
	f->st->ops = &away_ops;
	__atomic_store_n(&notice_puts, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&lost_writes, 0, __ATOMIC_SEQ_CST);
}

/* spool_msg - message qid from from, n recipients, accepted at accepted, due at due */
static void spool_msg(struct store *st, const char *qid, const char *from, size_t n,
		      int64_t accepted, int64_t due)
{
	struct store_msg m;

	msg_new(&m, qid, n, 1500);
	free(m.from);
	m.from = xstrdup(from);
	m.accepted = accepted;
	m.next_attempt = due;
	m.ttl = 3600 * SEC;
	CHECK_INT(qid, spool(st, &m, NULL, 0, 0), 0);
	store_msg_free(&m);
}

/*
 * spool_text - TARGET, tried TRIED times already: headers, then a body of
 * some 20 KB (returned whole by default)
 */
static void spool_text(struct store *st)
{
	static const char head[] = "Subject: notice room\r\nX-Test: headers only\r\n\r\n"
	    "BODY-MARKER first line of the body\r\n";
	struct store_msg m;
	size_t n = sizeof(head) - 1;

	msg_new(&m, TARGET, 3, 20000);
	m.ret = SMTP_RET_NONE;
	m.accepted = clock_us();
	m.next_attempt = m.accepted;
	memcpy(m.data, head, n);
	memset(m.data + n, 'b', m.data_len - n - 2);
	memcpy(m.data + m.data_len - 2, "\r\n", 2);
	m.ttl = 3600 * SEC;
	m.attempts = TRIED;
	CHECK_INT(TARGET, spool(st, &m, NULL, 0, 0), 0);
	store_msg_free(&m);
}

/* fill - spool messages due far off until the store refuses one (its reserve); how many */
static int fill(struct store *st)
{
	struct store_msg m;
	char qid[STORE_QID_SIZE];
	int i, rc = 0;

	for (i = 0; i < MAX_FILL && rc == 0; i++) {
		snprintf(qid, sizeof(qid), "FILL%08d", i);
		msg_new(&m, qid, 1, 1500);
		m.next_attempt = clock_us() + FAR;
		m.ttl = 3600 * SEC;
		rc = spool(st, &m, NULL, 0, 0);
		store_msg_free(&m);
	}
	CHECK_INT("filling ends in", rc, STORE_ENOSPC);
	return i - 1;
}

/*
 * attempted - wait until qid's first attempt is recorded (rcpt0's reply
 * written, the mark cleared) or it left the queue: 0 and the message in
 * m (if not NULL), or STORE_ENOTFOUND
 */
static int attempted(struct store *st, const char *qid, struct store_msg *m)
{
	int64_t until = clock_us() + WAIT_US;
	struct store_msg got;
	int rc;

	for (;;) {
		if ((rc = store_msg_load(st, qid, &got)) != 0)
			return rc;
		if (got.rcpts[0].reply != NULL && !got.inflight) {
			if (m)
				*m = got;
			else
				store_msg_free(&got);
			return 0;
		}
		store_msg_free(&got);
		if (clock_us() > until)
			fail_msg("%s: no attempt recorded within %lld s", qid, WAIT_US / SEC);
		usleep(10000);
	}
}

/* gone - wait until qid left the queue (fails the test after WAIT_US) */
static void gone(struct store *st, const char *qid)
{
	int64_t until = clock_us() + WAIT_US;
	struct store_msg m;

	while (store_msg_load(st, qid, &m) == 0) {
		store_msg_free(&m);
		if (clock_us() > until)
			fail_msg("%s: still queued after %lld s", qid, WAIT_US / SEC);
		usleep(10000);
	}
}

/* notice_wait - wait until the transport was given a notice to the sender; its text */
static const char *notice_wait(void)
{
	int64_t until = clock_us() + WAIT_US;
	int n;

	for (;;) {
		pthread_mutex_lock(&lock);
		n = notices;
		pthread_mutex_unlock(&lock);
		if (n > 0)
			return notice_text;
		if (clock_us() > until)
			fail_msg("no notice reached the sender within %lld s", WAIT_US / SEC);
		usleep(10000);
	}
}

/*
 * deferred_not_bounced - the first attempt's outcome while the store
 * refuses the notice: TARGET is still queued, its NOTIFY-default
 * recipient queued with the upstream's words (reply), the other two
 * bounced; no notice sent; the log says why. Waiting for room costs no
 * attempt (still attempts) and the next comes after the backoff those
 * attempts have earned (wait seconds), not sooner: the upstream is asked
 * again then, a rejected recipient too
 */
static void deferred_not_bounced(struct store *st, const char *reply, const char *log,
				 int attempts, int64_t wait)
{
	struct store_msg m;
	int rc;

	if ((rc = attempted(st, TARGET, &m)) == STORE_ENOTFOUND)
		fail_msg("the bounced message left the queue though its notice was not queued:"
			 " the notice is lost");
	CHECK_INT("load", rc, 0);
	CHECK_INT("attempts (the notice's wait charges none)", m.attempts, attempts);
	CHECK_INT("rcpt0 (NOTIFY default) state", m.rcpts[0].state, STORE_RCPT_QUEUED);
	if (m.rcpts[0].reply == NULL || strstr(m.rcpts[0].reply, reply) == NULL)
		fail_msg("rcpt0's reply: got \"%s\", want it to hold \"%s\"",
			 m.rcpts[0].reply ? m.rcpts[0].reply : "(null)", reply);
	CHECK_INT("rcpt1 (NOTIFY=NEVER) state", m.rcpts[1].state, STORE_RCPT_BOUNCED);
	CHECK_INT("rcpt2 (NOTIFY=SUCCESS) state", m.rcpts[2].state, STORE_RCPT_BOUNCED);
	if (m.next_attempt <= clock_us())
		fail_msg("deferred: next attempt not in the future");
	if (m.next_attempt > clock_us() + wait * SEC
	    || m.next_attempt < clock_us() + (wait - 5) * SEC)
		fail_msg("deferred: next attempt in %lld s, want the backoff earned, %lld s",
			 (long long) ((m.next_attempt - clock_us()) / SEC), (long long) wait);
	store_msg_free(&m);
	pthread_mutex_lock(&lock);
	CHECK_INT("notices sent", notices, 0);
	pthread_mutex_unlock(&lock);
	if (strstr(log, TARGET ": sender non-delivery notification not queued: ") == NULL
	    || strstr(log, "; its recipients deferred") == NULL)
		fail_msg("no warning that the notice was not queued and its recipients deferred");
	if (strstr(log, "to=<rcpt0@example.net>, relay=test") == NULL
	    || strstr(log, "dsn=4.3.0, status=deferred (sender non-delivery notification"
		      " not queued: ") == NULL)
		fail_msg("rcpt0 not logged deferred (dsn=4.3.0) for its notice");
}

/* bounced_with_notice - TARGET bounced (flushed first if flush), rcpt0 with its notice */
static void bounced_with_notice(struct fx *f, struct deliver *d, int flush, const char *status)
{
	const char *text;

	if (flush)
		deliver_flush(d);
	text = notice_wait();
	gone(f->st, TARGET);
	if (strstr(text, "Final-Recipient: rfc822; rcpt0@example.net") == NULL)
		fail_msg("the notice does not name rcpt0");
	if (strstr(text, "Final-Recipient: rfc822; rcpt1@example.net") != NULL
	    || strstr(text, "Final-Recipient: rfc822; rcpt2@example.net") != NULL)
		fail_msg("the notice names a recipient whose NOTIFY wants none");
	if (strstr(text, status) == NULL)
		fail_msg("the notice does not say %s", status);
}

/*
 * Each case's delivery, configuration and captured log, kept here so
 * that its teardown stops and frees them even when the case fails: the
 * delivery threads of a failed case would outlive its store and fail the
 * cases after it.
 */
static struct deliver *running;
static struct conf conf;
static int log_old = -1;		/* the captured log's old stderr, -1 if not captured */
static FILE *log_tmp;

/* handed_over - a message the test spooled, given to delivery as the commit would */
static int handed_over(void *arg, const struct store_msg *m)
{
	deliver_enqueue(arg, m->qid);
	return 0;
}

/*
 * start - delivery through the test's upstream, the default configuration.
 * On a shared store what the test spooled is this node's, under the
 * leases its commits took: the commit hands such a message to delivery
 * (deliver_enqueue), as the start's walk does on LMDB.
 */
static void start(struct fx *f)
{
	char err[512];

	notices = 0;
	assert_int_equal(conf_load(&conf, NULL, err, sizeof(err)), 0);
	conf.upstream.connections = 1;
	running = deliver_start(&conf, f->st, NULL, &notice_transport);
	assert_non_null(running);
	if (store_caps(f->st) & STORE_CAP_SHARED)
		assert_int_equal(store_queue_walk(f->st, 0, handed_over, running), 0);
}

/* stop - the delivery started, stopped (as a restart, or a kill -9 as far as the store saw) */
static void stop(void)
{
	deliver_stop(running);
	running = NULL;
	conf_free(&conf);
}

/* begin - every case's prologue: the upstream answers reply, the log is captured, delivery starts */
static void begin(struct fx *f, const char *reply)
{
	upstream_reply = reply;
	log_old = log_capture(&log_tmp);
	start(f);
}

/* logged - what was logged since begin(), the log given back */
static void logged(char *text, size_t size)
{
	log_captured(log_old, log_tmp, text, size);
	log_old = -1;
}

/* setup_map - a fresh store of that map (LMDB), through the failing store's table */
static int setup_map(void **state, uint64_t map)
{
	int rc = fx_setup_map(state, map);

	if (rc == 0)
		away_install(*state);
	return rc;
}

/* setup_small - setup_map() of 2 MB: filled by a few hundred messages */
static int setup_small(void **state)
{
	return setup_map(state, SMALL_MAP);
}

/* setup - setup_map() of the usual size, or a PostgreSQL schema */
static int setup(void **state)
{
	return setup_map(state, TEST_MAP);
}

/* teardown - delivery stopped, the log given back, the store's own table, then the store gone */
static int teardown(void **state)
{
	struct fx *f = *state;
	char text[65536];

	if (running != NULL)
		stop();
	if (log_old >= 0)
		logged(text, sizeof(text));
	f->st->ops = real_ops;
	return fx_teardown(state);
}

static void test_notice_reserve(void **state)
{
	struct fx *f = *state;
	char log[65536];
	int n;

	spool_text(f->st);	/* its notice, some 22 KB, far larger than a filler */
	spool_msg(f->st, NULLS, "", 1, clock_us(), clock_us());
	n = fill(f->st);
	if (n < 50)
		fail_msg("filled: got %d messages into a 2 MB map, want at least 50", n);
	begin(f, "550 5.1.1 no such user");
	if (attempted(f->st, NULLS, NULL) == 0)
		fail_msg("the null sender's bounced message is still queued");
	if (attempted(f->st, TARGET, NULL) == 0)
		fail_msg("at the reserve the bounced message stayed queued: its notice was"
			 " refused the room kept for delivery writes");
	bounced_with_notice(f, running, 0, "Status: 5.1.1");
	logged(log, sizeof(log));
	if (strstr(log, "to=<rcpt0@example.net>, relay=test") == NULL
	    || strstr(log, "dsn=5.1.1, status=bounced (550 5.1.1 no such user)") == NULL)
		fail_msg("rcpt0 not logged bounced");
	if (strstr(log, "not queued") != NULL || strstr(log, "headers only") != NULL)
		fail_msg("a notice not queued at the reserve, or not whole");
	if (strstr(notice_text, "BODY-MARKER") == NULL)
		fail_msg("at the reserve the notice does not return the whole original");
}

static void test_notice_store_away(void **state)
{
	struct fx *f = *state;
	char log[65536];

	/* past retry.give_up (5 days): the upstream's 451 bounces it 4.4.7 */
	spool_msg(f->st, TARGET, SENDER, 3, clock_us() - 6 * 86400 * SEC, clock_us());
	__atomic_store_n(&away, 1, __ATOMIC_SEQ_CST);
	begin(f, "451 4.3.0 try again later");
	attempted(f->st, TARGET, NULL);
	logged(log, sizeof(log));
	deferred_not_bounced(f->st, "delivery time expired; last error: 451 4.3.0 try again later",
			     log, 0, conf.retry.first);
	if (strstr(log, store_strerror(STORE_EAGAIN)) == NULL)
		fail_msg("the warning does not say the store's error");

	__atomic_store_n(&away, 0, __ATOMIC_SEQ_CST);
	bounced_with_notice(f, running, 1, "Status: 4.4.7");
}

static void test_notice_headers_only(void **state)
{
	struct fx *f = *state;
	char log[65536];
	const char *text;
	size_t len;
	int rc;

	__atomic_store_n(&room, 8000, __ATOMIC_SEQ_CST);	/* the headers' notice, not 20 KB */
	spool_text(f->st);
	begin(f, "550 5.1.1 no such user");
	if ((rc = attempted(f->st, TARGET, NULL)) == 0)
		fail_msg("the bounce was deferred: no notice queued, not even the headers'");
	bounced_with_notice(f, running, 0, "Status: 5.1.1");
	/* its lines follow the bounce's commit, which took TARGET away; they precede the notice's send */
	logged(log, sizeof(log));
	pthread_mutex_lock(&lock);
	text = notice_text;
	len = notice_len;
	pthread_mutex_unlock(&lock);
	if (strstr(text, "Content-Type: text/rfc822-headers") == NULL
	    || strstr(text, "Subject: notice room") == NULL)
		fail_msg("the notice does not return the original's headers:\n%.3000s", text);
	if (strstr(text, "The headers of your\r\nmessage are attached below; its body could not"
		   " be returned.") == NULL)
		fail_msg("the notice does not say that only the headers are returned");
	if (strstr(text, "BODY-MARKER") != NULL || len > 8000)
		fail_msg("the notice returns the body (%zu bytes) though only the headers fit", len);
	CHECK_INT("notices put (the whole original, then its headers)",
		  __atomic_load_n(&notice_puts, __ATOMIC_SEQ_CST), 2);
	if (strstr(log, TARGET ": sender non-delivery notification ") == NULL
	    || strstr(log, ": returned headers only: no room for the full message") == NULL)
		fail_msg("the smaller notice is not logged");
	if (strstr(log, "dsn=5.1.1, status=bounced (550 5.1.1 no such user)") == NULL
	    || strstr(log, "not queued") != NULL)
		fail_msg("rcpt0 not logged bounced at once");
}

static void test_notice_no_room(void **state)
{
	struct fx *f = *state;
	char log[65536];

	__atomic_store_n(&room, 1, __ATOMIC_SEQ_CST);		/* no notice fits */
	spool_text(f->st);
	begin(f, "550 5.1.1 no such user");
	attempted(f->st, TARGET, NULL);
	logged(log, sizeof(log));
	deferred_not_bounced(f->st, "550 5.1.1 no such user", log, TRIED,
			     deliver_backoff(conf.retry.first, conf.retry.max, TRIED));
	CHECK_INT("notices put (the whole original, then its headers)",
		  __atomic_load_n(&notice_puts, __ATOMIC_SEQ_CST), 2);
	if (strstr(log, store_strerror(STORE_ENOSPC)) == NULL || strstr(log, "headers only"))
		fail_msg("the warning does not say the store's error, or a notice is logged");

	__atomic_store_n(&room, 0, __ATOMIC_SEQ_CST);
	bounced_with_notice(f, running, 1, "Status: 5.1.1");
	if (strstr(notice_text, "BODY-MARKER") == NULL)
		fail_msg("with room again the notice does not return the whole original");
}

/* null_cb - store_queue_walk(): count a message from the null sender */
static int null_cb(void *arg, const struct store_msg *m)
{
	if (m->from[0] == 0)
		(*(int *) arg)++;
	return 0;
}

/* queued_notices - messages from the null sender in the queue */
static int queued_notices(struct store *st)
{
	int n = 0;

	CHECK_INT("queue walk", store_queue_walk(st, 0, null_cb, &n), 0);
	return n;
}

/*
 * test_notice_with_its_outcome - the bounce's outcome is refused (as if
 * the daemon were killed before it was durable): its notice must not be
 * queued either, or the next start, which finds the recipient queued,
 * asks the upstream again and sends the sender a second notice. Then
 * one notice in all, after the restart.
 */
static void test_notice_with_its_outcome(void **state)
{
	struct fx *f = *state;
	int64_t until = clock_us() + WAIT_US;
	int first;

	spool_msg(f->st, TARGET, SENDER, 3, clock_us(), clock_us());
	__atomic_store_n(&lost, 1, __ATOMIC_SEQ_CST);
	begin(f, "550 5.1.1 no such user");
	while (__atomic_load_n(&lost_writes, __ATOMIC_SEQ_CST) == 0) {
		if (clock_us() > until)
			fail_msg("TARGET's outcome not written within %lld s", WAIT_US / SEC);
		usleep(10000);
	}
	stop();			/* as a kill -9: the outcome was never durable */
	pthread_mutex_lock(&lock);
	first = notices;
	pthread_mutex_unlock(&lock);
	CHECK_INT("notices queued or sent without their bounce's outcome",
		  first + queued_notices(f->st), 0);

	__atomic_store_n(&lost, 0, __ATOMIC_SEQ_CST);
	start(f);		/* the next start asks the upstream again */
	bounced_with_notice(f, running, 0, "Status: 5.1.1");
	/* the notice's own outcome is written after the transport took it */
	until = clock_us() + WAIT_US;
	while (queued_notices(f->st) != 0 && clock_us() < until)
		usleep(10000);
	CHECK_INT("notices sent in all", first + notices, 1);
	CHECK_INT("notices left queued", queued_notices(f->st), 0);
}

int main(void)
{
	const struct CMUnitTest lmdb[] = {	/* LMDB's reserve */
		cmocka_unit_test_setup_teardown(test_notice_reserve, setup_small, teardown),
	};
	const struct CMUnitTest both[] = {
		cmocka_unit_test_setup_teardown(test_notice_store_away, setup, teardown),
		cmocka_unit_test_setup_teardown(test_notice_headers_only, setup, teardown),
		cmocka_unit_test_setup_teardown(test_notice_no_room, setup, teardown),
		cmocka_unit_test_setup_teardown(test_notice_with_its_outcome, setup, teardown),
	};
	int failed = 0;

	log_setup("test_deliver_notice", 0, LOG_LEVEL_INFO);
	if (!fx_pg())
		failed = cmocka_run_group_tests_name("deliver_notice_lmdb", lmdb, NULL, NULL);
	return cmocka_run_group_tests_name("deliver_notice", both, NULL, NULL) + failed;
}
