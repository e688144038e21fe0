/*
 * NAME
 *	store_pg 3
 * SUMMARY
 *	the PostgreSQL store: open, close, the connection pool, outages, errors
 * SYNOPSIS
 *	#include "store/pg/store_pg.h"
 * DESCRIPTION
 *	store_pg_open() connects, refuses a pooler in between that shares
 *	server sessions (store_pg_session.c), makes the schema current
 *	(store_pg_schema.c), gives the node its slot and takes the slot's
 *	lock, then gives up the leases the node's previous life held: a
 *	second process of the same name is refused, so nothing else can be
 *	using them. Without a node
 *	name it opens a client (idemrelayctl): the schema must exist and be
 *	this build's version, no node is registered and nothing is leased.
 *
 *	The anchor is a connection of its own, kept for the node's life, that
 *	holds the slot's session advisory lock; it is checked now and then
 *	(store_pg_anchor_check(), from the delivery poller's calls) and the
 *	lock taken again after a reconnect, or the process exits if another
 *	holds it (one started under its name meanwhile). It reads the
 *	database's clock at the start and every PG_CLOCK_US, as every
 *	batch's key locks do: the times that decide across nodes are kept
 *	on it (store_pg_int.h).
 *
 *	Any thread may call any function: each call takes a connection from
 *	a pool (PG_POOL_START opened at start, grown on demand up to
 *	PG_POOL_MAX) and gives it back; a batch transaction holds one from
 *	its first statement to its end. A caller finding every connection
 *	taken waits for one, at most PG_WAIT_US. A connection whose backend
 *	waits for replication is kept and still counted until its wait ends
 *	(store_pg_wait.c): the pool's limit holds while commits hang.
 *
 *	When PostgreSQL cannot be reached, every call returns STORE_EAGAIN
 *	at once: connection attempts are spaced by a backoff of 0.1 s
 *	doubling to 5 s, and until the next attempt is due no call tries. An
 *	outage is logged once when it starts and once when it ends, and
 *	store_stats() says so (it fails, reach.outages). A server that refuses
 *	connections because its slots are all taken (max_connections) is
 *	logged as that, once, until a connection opens; it is an outage only
 *	when the node has no connection left: until then callers wait for one
 *	of its own, and one more is tried with the same backoff. When the
 *	cause changes (the network back, the server full) the new one is
 *	logged, once. libpq's
 *	connect_timeout (5 s) and TCP keepalives and user timeout bound each
 *	attempt and each statement on a dead network, unless the URL sets
 *	them.
 *
 *	A connection that failed, or that reached a server which is shutting
 *	down or is a standby (after a failover, target_session_attrs finds
 *	the new primary at the next connect), is closed, and with it the
 *	idle ones: they were opened before the same event.
 * DIAGNOSTICS
 *	store_pg_result() is the one place where libpq results and SQLSTATEs
 *	become STORE_E* codes. Errors that are neither an outage, a full
 *	disk, a lost lease nor a bad argument are logged with the server's
 *	message, once each.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../util/clock.h"
#include "../../util/log.h"
#include "store_pg.h"
#include "store_pg_int.h"

/*
 * What libpq gets besides the URL, which overrides any of them (it comes
 * after them).
 */
static const char *const conn_keys[] = {
	"connect_timeout", "keepalives", "keepalives_idle", "keepalives_interval",
	"keepalives_count", "tcp_user_timeout", "application_name", "dbname", NULL
};
static const char *const conn_vals[] = {
	"5", "1", "5", "2", "3", "10000", "idemrelay", NULL, NULL
};
#define CONN_URL	7	/* the index of dbname: the URL, expanded */
/*
 * Our session's settings, made by a statement once connected rather than
 * sent as startup options: a pooler in between refuses a startup packet
 * that carries options (PgBouncer: "unsupported startup parameter"), or
 * drops them unseen. A setting the URL's options gave (its source is
 * "client") is left as the URL has it.
 *
 * A server backend whose connection was cut (store_pg_wire.c) notices it
 * within a second even while it waits for a lock, and aborts what it had
 * not committed, rather than commit a batch nobody waits for any more.
 *
 * Statements are prepared (store_pg_stmt.c) and planned once: generic
 * plans. The planner's own choice kept planning the hottest ones at every
 * call (the claims of a batch's keys: an index scan either way, but a
 * custom plan of a one-key array costs less on paper); every statement
 * here finds its rows by an index whatever its parameters, but the
 * expiry, which says so itself (store_pg_hist.c).
 *
 * A backend idle in one of our transactions for a statement's limit
 * (the %lld, in milliseconds) is ended by the server: its node is cut
 * off or dead without its connection closed (a network gone, a host
 * down), and it held the locks it had taken (a batch's keys, after its
 * first round trip; a settling's or a revival's rows, between their
 * statements) until TCP keepalive ended it, hours later at the
 * system's defaults. PostgreSQL counts a backend idle only once it has
 * answered a sync, never between the statements of one pipeline; a node
 * leaves its transaction idle only between two of its round trips, for
 * its own work (a batch's writes made ready between its keys and its
 * COMMIT): far less than the limit, past which it gives up waiting for
 * a statement's result itself. Ended, the transaction aborts (25P03):
 * nothing of it committed. In the same statement as the others, once a
 * connection: no round trip more. Through PgBouncer too, in the session
 * pooling the node needs (store_pg_session.c): the server session is
 * the connection's while it lasts, and DISCARD ALL resets the setting.
 *
 * The server's TCP keepalive on the connection is the node's own
 * (conn_vals: 5 s idle, then 2 s apart, 3 unanswered; tcp_user_timeout
 * 10 s, as libpq's, for data the node never acknowledged, which keepalive
 * waits behind): a node gone without its connection closed while its
 * backend waits for the rest of a pipeline ('active', ClientRead: not
 * idle as the timeout above counts it) left the backend holding its
 * locks for the system's keepalive, hours; now about 11 s. A living node
 * ends a bounce's such backend itself (store_pg_decide.c), never a
 * submission batch's (store_pg_wait.c): this is for those.
 * Through PgBouncer it holds between the server and PgBouncer only,
 * both alive: PgBouncer's own (tcp_keepidle) is what sees a node gone.
 *
 * The same statement reads the connection's server backend, as
 * pg_stat_activity names it (a row of NULLs if it is not there): a commit
 * whose answer does not come is looked up there (store_pg_wait.c) by pid
 * and backend_start, both the server's: through PgBouncer PQbackendPID()
 * is the pooler's own number, and a pid alone may be another backend's
 * by then (reused after a restart, or a standby promoted).
 */
#define OUR_SETTINGS "WITH s AS (SELECT set_config(o.name, o.value, false) FROM (VALUES " \
	"('client_connection_check_interval', '1000'), ('plan_cache_mode', 'force_generic_plan'), " \
	"('idle_in_transaction_session_timeout', '%lld'), ('tcp_keepalives_idle', '5'), " \
	"('tcp_keepalives_interval', '2'), ('tcp_keepalives_count', '3'), " \
	"('tcp_user_timeout', '10000')) " \
	"o(name, value) WHERE NOT EXISTS (SELECT 1 FROM pg_settings s " \
	"WHERE s.name = o.name AND s.source = 'client')) " \
	"SELECT a.pid, " PG_BACKEND_START("a") " FROM (SELECT count(*) FROM s) n " \
	"LEFT JOIN pg_stat_activity a ON a.pid = pg_backend_pid()"

/* quiet - the server's notices are not ours to print on stderr */
static void quiet(void *arg, const char *message)
{
	(void) arg;
	msg_debug("store: PostgreSQL: %s", message);
}

#define NODE_LOCK_TRIES	30	/* 0.1 s apart: a dead backend's lock outlives it that long */
#define NODE_SLOT_TRIES	16	/* names registering at once: each try sees those that did */
#define REGISTER_WAIT_MS 5000	/* a new name's row waits this long for the standby */

/* one_line - libpq's message without its newlines and tabs, in place */
static char *one_line(char *s)
{
	char *p;
	size_t n;

	for (p = s; *p; p++)
		if (*p == '\n' || *p == '\t')
			*p = ' ';
	while ((n = strlen(s)) > 0 && s[n - 1] == ' ')
		s[n - 1] = 0;
	return s;
}

/* store_pg_conn_error - libpq's account of c's last failure (c NULL: no memory), on one line */
char *store_pg_conn_error(PGconn *c, char *out, size_t len)
{
	snprintf(out, len, "%s", c ? PQerrorMessage(c) : "out of memory");
	return one_line(out);
}

/* store_pg_connect - a new connection to the store's URL, with our settings; NULL and why in err */
PGconn *store_pg_connect(struct pg_store *st, char *err, size_t errlen)
{
	const char *vals[sizeof(conn_keys) / sizeof(conn_keys[0])];
	char settings[sizeof(OUR_SETTINGS) + 20];
	struct pg_conn *n;
	PGresult *r;
	PGconn *c;

	memcpy(vals, conn_vals, sizeof(vals));
	vals[CONN_URL] = st->url;
	snprintf(settings, sizeof(settings), OUR_SETTINGS,
		 (long long) (store_pg_result_limit() / 1000));
	c = PQconnectdbParams(conn_keys, vals, 1);
	if (c != NULL && PQstatus(c) == CONNECTION_OK) {
		PQsetNoticeProcessor(c, quiet, NULL);
		if (store_pg_stmt_attach(c) != 0)
			msg_warn("store: cannot keep prepared statements: every statement unprepared");
		if (store_pg_exec(st, c, settings, NULL, &r, "session settings") == 0) {
			if (PQntuples(r) != 1 || PQgetisnull(r, 0, 0))
				msg_warn("store: a connection's backend is not in pg_stat_activity: a "
					 "commit of it waiting for a standby cannot be told from one lost");
			else if ((n = store_pg_conn(c)) != NULL) {
				n->pid = (int) store_pg_int(r, 0, 0);
				n->started = store_pg_int(r, 0, 1);
			}
			PQclear(r);
			return c;
		}
	}
	store_pg_conn_error(c, err, errlen);
	PQfinish(c);
	return NULL;
}

/*
 * store_pg_slots_taken - does libpq's account of a refused connection say
 * that the server (or a pooler) has no connection slot left for us? Its
 * SQLSTATE, 53300, is not given for a connection: the server's English texts.
 */
int store_pg_slots_taken(const char *why)
{
	static const char *const said[] = {
		"too many clients already",	/* max_connections */
		"remaining connection slots are reserved",	/* superuser_reserved_connections */
		"too many connections for",	/* a role's or a database's CONNECTION LIMIT */
		"no more connections allowed",	/* PgBouncer's max_client_conn */
	};
	size_t i;

	for (i = 0; i < sizeof(said) / sizeof(said[0]); i++)
		if (strstr(why, said[i]) != NULL)
			return 1;
	return 0;
}

/*
 * note_down - connecting failed (mu held): back off; with outage (the
 * node has no connection left), start or continue an outage. One line
 * when the trouble starts, and one when its cause changes: a server whose
 * slots are all taken is told from one that cannot be reached.
 */
static void note_down(struct pg_store *st, const char *why, int outage)
{
	int64_t now = clock_mono_us();
	enum pg_down cause = store_pg_slots_taken(why) ? PG_DOWN_SLOTS : PG_DOWN_UNREACHABLE;

	if (st->down_cause == PG_DOWN_NONE)
		st->down_since = now;
	if (outage && !st->down) {
		st->down = 1;
		st->outages++;
	}
	if (st->down_cause != cause) {
		st->down_cause = cause;
		if (cause == PG_DOWN_SLOTS)
			msg_warn("store: PostgreSQL refuses new connections, its connection slots are "
				 "all taken (max_connections): %s", why);
		else
			msg_warn("store: PostgreSQL unreachable: %s", why);
	}
	st->backoff = st->backoff ? st->backoff * 2 : PG_BACKOFF_MIN;
	if (st->backoff > PG_BACKOFF_MAX)
		st->backoff = PG_BACKOFF_MAX;
	st->next_try = now + st->backoff;
}

/* note_up - a connection was made: an outage, or a want of slots, is over (mu held) */
static void note_up(struct pg_store *st)
{
	if (st->down_cause != PG_DOWN_NONE)
		msg_info("store: PostgreSQL %s again after %.1f s",
			 st->down_cause == PG_DOWN_SLOTS ? "takes connections" : "reachable",
			 (double) (clock_mono_us() - st->down_since) / 1e6);
	st->down = 0;
	st->down_cause = PG_DOWN_NONE;
	st->backoff = 0;
	st->next_try = 0;
}

/* idle_alive - has an idle connection kept its server? (reads what it sent: EOF, errors) */
static int idle_alive(PGconn *c)
{
	return PQconsumeInput(c) == 1 && PQstatus(c) == CONNECTION_OK && !PQisBusy(c)
	    && PQtransactionStatus(c) == PQTRANS_IDLE;
}

/* idle_take - an idle connection still alive, or NULL; the dead ones closed (mu held) */
static PGconn *idle_take(struct pg_store *st)
{
	PGconn *c;

	while (st->n_idle > 0) {
		c = st->idle[--st->n_idle];
		if (idle_alive(c))
			return c;
		PQfinish(c);
		st->n_open--;
	}
	return NULL;
}

/*
 * holding_back - the server's slots were all taken when the node last
 * tried to open one more, and the node has connections of its own: until
 * the next try is due, a caller waits for one of them (mu held)
 */
static int holding_back(const struct pg_store *st)
{
	return st->down_cause == PG_DOWN_SLOTS && !st->down && st->n_open > 0
	    && clock_mono_us() < st->next_try;
}

/*
 * wake_at - when a waiting caller looks again (mu held): its deadline, or
 * sooner the next try, and in slices, since a kept connection whose wait
 * ends gives no signal (store_pg_wait.c)
 */
static struct timespec wake_at(const struct pg_store *st, int64_t deadline)
{
	int64_t t = deadline, next;

	if ((next = clock_us() + PG_REAP_US) < t)
		t = next;
	if (holding_back(st) && (next = clock_us() + st->next_try - clock_mono_us()) < t)
		t = next;
	return clock_ts(t);
}

/*
 * pool_take - a connection of the pool, idle, opened, or given back by
 * another caller by deadline (clock_us()); STORE_EAGAIN if PostgreSQL
 * cannot be reached (or not before the backoff is over) or none is free.
 * A server with no slot free for one more is not an outage while the
 * node has connections of its own: the caller waits for one of them.
 * Unless pend is 0, none and 1 while batches are kept to settle; 1 with
 * the connection if one was kept while this call waited or connected
 * (mu dropped meanwhile): the caller settles on it.
 */
static int pool_take(struct pg_store *st, PGconn **out, int64_t deadline, int pend)
{
	struct timespec ts;
	struct pg_conn *n;
	char err[512];
	size_t kept;
	PGconn *c;
	int late;

	*out = NULL;
	pthread_mutex_lock(&st->mu);
	if (pend && st->n_pend > 0) {
		pthread_mutex_unlock(&st->mu);
		return 1;
	}
	for (;;) {
		store_pg_reap(st);
		if ((c = idle_take(st)) != NULL)
			break;
		if (st->n_open < PG_POOL_MAX && !holding_back(st)) {
			if (st->down && clock_mono_us() < st->next_try)
				break;
			st->n_open++;
			pthread_mutex_unlock(&st->mu);
			c = store_pg_connect(st, err, sizeof(err));
			pthread_mutex_lock(&st->mu);
			if (c != NULL) {
				note_up(st);
				break;
			}
			st->n_open--;
			pthread_cond_signal(&st->freed);
			note_down(st, err, st->n_open == 0 || !store_pg_slots_taken(err));
			if (st->down)
				break;
			continue;	/* slots all taken: one of the node's own will do */
		}
		ts = wake_at(st, deadline);
		if (pthread_cond_timedwait(&st->freed, &st->mu, &ts) != 0 && clock_us() >= deadline) {
			kept = st->n_kept;
			pthread_mutex_unlock(&st->mu);
			msg_warn("store: no PostgreSQL connection free within %lld s%s",
				 (long long) (PG_WAIT_US / 1000000), kept
				 ? " (some wait for replication)" : "");
			return STORE_EAGAIN;
		}
	}
	late = pend && c != NULL && st->n_pend > 0;	/* kept while mu was dropped */
	pthread_mutex_unlock(&st->mu);
	if (c != NULL && (n = store_pg_conn(c)) != NULL)
		n->owner = st;
	*out = c;
	return late ? 1 : c ? 0 : STORE_EAGAIN;
}

/*
 * store_pg_take - a connection of the pool within PG_WAIT_US (pool_take).
 * Batches answered 451 whose outcome could not be read are settled on
 * the connection before the caller has it (store_pg_pend.c); until they
 * are, or while another caller settles them past the same deadline,
 * STORE_EAGAIN. A caller waits for another's settling before it takes
 * a connection: holding one idle meanwhile would starve the pool (but
 * one kept while its take waited or connected is settled on the
 * connection that take got). With none kept, one lock of mu.
 */
int store_pg_take(struct pg_store *st, PGconn **out)
{
	int64_t deadline = clock_us() + PG_WAIT_US;
	int err;

	if ((err = pool_take(st, out, deadline, 1)) <= 0)
		return err;
	/* a 451 whose commit may have committed: settled before anything else */
	if (*out == NULL && store_pg_pend_wait(st, deadline) != 0)
		return STORE_EAGAIN;
	if (*out == NULL && (err = pool_take(st, out, deadline, 0)) != 0)
		return err;
	if (store_pg_pend_settle(st, *out, deadline) != 0) {
		store_pg_give(st, *out);
		*out = NULL;
		return STORE_EAGAIN;
	}
	return 0;
}

/*
 * store_pg_take_beside - a connection of the pool within PG_WAIT_US,
 * without settling (store_pg_wait.c: a look beside a statement that
 * hangs, which may be a settling's own)
 */
int store_pg_take_beside(struct pg_store *st, PGconn **out)
{
	return pool_take(st, out, clock_us() + PG_WAIT_US, 0);
}

/*
 * store_pg_give_sized - a connection back to the pool after it carried
 * bytes of message data. One that failed is closed, and the idle with
 * it; one past PG_CONN_BIG is closed alone, so that a burst of large
 * messages leaves no connection holding buffers of their size (libpq
 * keeps them as large as they grew).
 */
void store_pg_give_sized(struct pg_store *st, PGconn *c, size_t bytes)
{
	struct pg_conn *n;
	size_t i;
	int lost, flags;

	if (c == NULL)
		return;
	pthread_mutex_lock(&st->mu);
	lost = PQstatus(c) != CONNECTION_OK;
	flags = (n = store_pg_conn(c)) ? n->flags : 0;
	if (!lost && (flags & PG_CONN_KEPT)) {
		st->kept[st->n_kept++] = c;	/* still counted in n_open: store_pg_wait.c */
		pthread_mutex_unlock(&st->mu);
		return;
	}
	if (lost && (flags & PG_CONN_WAITS))
		store_pg_repl_set(st, c, 0);	/* its wait is over for us */
	if (lost || PQtransactionStatus(c) != PQTRANS_IDLE
	    || PQpipelineStatus(c) != PQ_PIPELINE_OFF || st->reset || bytes >= PG_CONN_BIG) {
		PQfinish(c);
		st->n_open--;
		if (st->reset || lost) {
			for (i = 0; i < st->n_idle; i++)
				PQfinish(st->idle[i]);
			st->n_open -= st->n_idle;
			st->n_idle = 0;
			st->reset = 0;
		}
	} else {
		st->idle[st->n_idle++] = c;
	}
	pthread_cond_signal(&st->freed);
	pthread_mutex_unlock(&st->mu);
}

/* store_pg_give - the same, after a connection carried no message data */
void store_pg_give(struct pg_store *st, PGconn *c)
{
	store_pg_give_sized(st, c, 0);
}

/* store_pg_run - one statement on a connection of the pool; *r is the caller's to PQclear */
int store_pg_run(struct pg_store *st, const char *sql, struct pg_params *p, PGresult **r,
		 const char *what)
{
	PGconn *c;
	int err;

	*r = NULL;
	if ((err = store_pg_take(st, &c)) != 0)
		return err;
	err = store_pg_exec(st, c, sql, p, r, what);
	store_pg_give(st, c);
	return err;
}

/*
 * The SQLSTATEs, by prefix, first match: the STORE_E* code, and whether
 * the pool is reset (ERR_RESET) or the server's message logged (ERR_LOG)
 */
#define ERR_RESET	1
#define ERR_LOG		2
static const struct {
	const char *prefix;
	int err, how;
} sqlstates[] = {
	{ PG_SQLSTATE_FENCE, STORE_ELEASE, 0 },	/* our fence: the lease went elsewhere */
	{ "53100", STORE_ENOSPC, ERR_LOG },	/* disk_full */
	{ "53", STORE_EAGAIN, 0 },		/* out of memory, too many connections */
	{ "40", STORE_EAGAIN, ERR_LOG },	/* serialization failure, deadlock: retry the batch */
	{ "08", STORE_EAGAIN, 0 },		/* connection exceptions */
	{ "57", STORE_EAGAIN, ERR_RESET },	/* shutting down, cannot connect now, cancelled */
	{ "25006", STORE_EAGAIN, ERR_RESET },	/* read-only transaction: a standby, after a failover */
	{ "25P03", STORE_EAGAIN, ERR_LOG },	/* idle in a transaction too long: ended, uncommitted */
	{ "55P03", STORE_EAGAIN, ERR_LOG },	/* lock not available */
	{ "23", STORE_EINVAL, 0 },		/* integrity: the same QID twice */
	{ "22", STORE_EINVAL, 0 },		/* data exception: bad text */
	{ "", STORE_EIO, ERR_LOG },		/* any other */
};

/*
 * store_pg_result - a statement's result as 0 or a STORE_E* code: no
 * result, a lost connection or no SQLSTATE is STORE_EAGAIN; a server
 * shutting down or read-only resets the pool (see the header)
 */
int store_pg_result(struct pg_store *st, PGconn *c, PGresult *r, const char *what)
{
	const char *state;
	char *msg;
	size_t i;

	if (r != NULL && (PQresultStatus(r) == PGRES_COMMAND_OK
			  || PQresultStatus(r) == PGRES_TUPLES_OK))
		return 0;
	if (r == NULL || PQstatus(c) != CONNECTION_OK)
		return STORE_EAGAIN;
	if (PQresultStatus(r) == PGRES_PIPELINE_ABORTED)
		return STORE_EIO;	/* an earlier statement failed: its error is the one */
	if ((state = PQresultErrorField(r, PG_DIAG_SQLSTATE)) == NULL)
		return STORE_EAGAIN;
	for (i = 0; strncmp(state, sqlstates[i].prefix, strlen(sqlstates[i].prefix)) != 0; i++)
		;			/* the last matches any */
	if (sqlstates[i].how & ERR_RESET) {
		pthread_mutex_lock(&st->mu);
		st->reset = 1;
		pthread_mutex_unlock(&st->mu);
	}
	if (sqlstates[i].how & ERR_LOG) {
		msg = xstrdup(PQresultErrorMessage(r));
		msg_warn("store: %s: %s", what, one_line(msg));
		free(msg);
	}
	return sqlstates[i].err;
}

/*
 * node_lock - take the slot's session lock on the anchor: 1 taken (the
 * server process holding it noted, st->anchor_pid), 0 held elsewhere, <0
 * error. Held elsewhere, the server process that holds it is in *holder
 * (0 none by then).
 */
static int node_lock(struct pg_store *st, PGconn *c, int *holder)
{
	struct pg_params p;
	PGresult *r;
	int err;

	store_pg_params_init(&p);
	store_pg_p_i32(&p, st->base.node_id);
	err = store_pg_exec(st, c, "SELECT pg_try_advisory_lock(" PG_NODE_LOCK("$1::int") "), "
			    "pg_backend_pid(), coalesce((SELECT l.pid FROM pg_locks l "
			    "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
			    "AND l.database = (SELECT oid FROM pg_database WHERE datname = "
			    "current_database()) AND ((l.classid::bigint << 32) | l.objid::bigint) = "
			    PG_NODE_LOCK("$1::int") " LIMIT 1), 0)", &p, &r, "node lock");
	store_pg_params_free(&p);
	if (err != 0)
		return err;
	err = PQntuples(r) == 1 ? (int) store_pg_int(r, 0, 0) : STORE_EIO;
	if (err == 1)
		st->anchor_pid = (int) store_pg_int(r, 0, 1);
	else if (err == 0 && holder != NULL)
		*holder = (int) store_pg_int(r, 0, 2);
	PQclear(r);
	return err;
}

/*
 * node_slot - the node's slot: the lowest free one, given once to a new
 * name (*fresh then). Its row commits without waiting for a synchronous
 * standby (PG_LOCAL_COMMIT), and names registering at once (no lock
 * orders them) each take another slot: a try that met one registering
 * the slot it chose waits for it, inserts nothing, and is made again
 */
static int node_slot(struct pg_store *st, PGconn *c, int *fresh, char *err, size_t errlen)
{
	struct pg_params p;
	PGresult *r = NULL;
	int rc = 0, tries;

	store_pg_params_init(&p);
	store_pg_p_text(&p, st->node);
	/* the slot given now (i), or the one the name has (the statement's snapshot is before i) */
	for (tries = 0; tries < NODE_SLOT_TRIES && rc == 0; tries++) {
		PQclear(r);
		rc = store_pg_exec(st, c, "WITH i AS (INSERT INTO nodes (name, slot) SELECT $1, s "
				   "FROM generate_series(0, 255) s WHERE NOT EXISTS "
				   "(SELECT 1 FROM nodes WHERE slot = s) AND NOT EXISTS "
				   "(SELECT 1 FROM nodes WHERE name = $1) AND " PG_LOCAL_COMMIT
				   " ORDER BY s LIMIT 1 ON CONFLICT DO NOTHING RETURNING slot) "
				   "SELECT slot, true FROM i UNION ALL "
				   "SELECT slot, false FROM nodes WHERE name = $1", &p, &r, "node slot");
		if (rc == 0 && PQntuples(r) == 1)
			break;
	}
	store_pg_params_free(&p);
	if (rc != 0) {
		snprintf(err, errlen, "store: node %s: cannot register: %s", st->node,
			 store_strerror(rc));
		return rc;
	}
	if (PQntuples(r) != 1) {
		snprintf(err, errlen, "store: node %s: no free node slot (256 node names known)",
			 st->node);
		PQclear(r);
		return STORE_EINVAL;
	}
	st->base.node_id = (int) store_pg_int(r, 0, 0);
	*fresh = (int) store_pg_int(r, 0, 1);
	PQclear(r);
	return 0;
}

/* answered - wait up to ms for c's answer: 1 there to read, 0 not (or the connection failed) */
static int answered(PGconn *c, int ms)
{
	int64_t deadline = clock_mono_us() + ms * 1000LL;
	struct pollfd p = { PQsocket(c), POLLIN, 0 };

	while (PQisBusy(c)) {
		if (clock_mono_us() >= deadline || (poll(&p, 1, 100) < 0 && errno != EINTR)
		    || PQconsumeInput(c) != 1)
			return 0;
	}
	return 1;
}

/*
 * replicated - is what this node committed so far on the synchronous
 * standby (if the server has one)? A transaction that writes a WAL
 * record and nothing else (a logical decoding message: a transaction
 * with only its id writes no commit record to wait for), so that its
 * COMMIT waits for the standby as the server's synchronous_commit says
 * while it holds no lock anyone waits for, on a connection of its own
 * (the anchor's session locks stay out of it).
 * Not answered within REGISTER_WAIT_MS, its wait is cancelled (nothing
 * of the store's in it) and the connection closed: no backend is left
 * waiting.
 * The connection goes to the pool: 1 replicated, 0 not (why in err)
 */
static int replicated(struct pg_store *st, char *err, size_t errlen)
{
	char why[256];
	PGcancel *k;
	PGresult *r;
	PGconn *c;
	int ok, late;

	if ((c = store_pg_connect(st, why, sizeof(why))) == NULL) {
		snprintf(err, errlen, "store: node %s: cannot register: %s", st->node, why);
		return 0;
	}
	ok = PQsendQuery(c, "SELECT pg_logical_emit_message(true, 'idemrelay', 'node registered')")
		== 1 && answered(c, REGISTER_WAIT_MS);
	if ((late = !ok) && (k = PQgetCancel(c)) != NULL) {
		(void) PQcancel(k, why, sizeof(why));
		PQfreeCancel(k);
	}
	while (answered(c, 2000) && (r = PQgetResult(c)) != NULL) {
		ok = ok && PQresultStatus(r) == PGRES_TUPLES_OK;
		PQclear(r);
	}
	if (!ok || PQisBusy(c)) {
		if (late)
			snprintf(err, errlen, "store: node %s: cannot register: the synchronous standby "
				 "did not confirm the new name's slot within %d s; start it again once "
				 "the standby is back", st->node, REGISTER_WAIT_MS / 1000);
		else
			snprintf(err, errlen, "store: node %s: cannot register: %s", st->node,
				 store_pg_conn_error(c, why, sizeof(why)));
		PQfinish(c);
		return 0;
	}
	st->idle[st->n_idle++] = c;
	st->n_open++;
	return 1;
}

/*
 * node_start - the node's slot, its lock, and the leases of its previous
 * life given up. A name registered now runs only once the synchronous
 * standby has its row: lost in a failover, its slot would be free to the
 * next new name while this node runs on it (their QIDs and slot lock
 * one). Else its row is deleted again, and the start fails, so that a
 * standby away refuses a new name plainly, and no backend is left
 * waiting for it with a lock (a name known already starts without it).
 * The leases are given up without waiting for the standby, and rows
 * locked (a delivery write of the previous life, its COMMIT waiting for
 * the standby) passed over: a lease promises no client anything, runs
 * out anyway, and the fence guards every write of a delivery. That
 * failing only warns: those leases then run out
 */
static int node_start(struct pg_store *st, PGconn *c, char *err, size_t errlen)
{
	struct pg_params p;
	PGresult *r;
	int rc, tries, fresh;

	if ((rc = node_slot(st, c, &fresh, err, errlen)) != 0)
		return rc;
	/* a previous life killed a moment ago: its backend may not have ended yet */
	for (tries = 0; (rc = node_lock(st, c, NULL)) == 0 && tries < NODE_LOCK_TRIES; tries++)
		usleep(100000);
	if (rc != 1) {
		if (rc == 0)
			snprintf(err, errlen, "store: node %s is running already", st->node);
		else
			snprintf(err, errlen, "store: node %s: cannot take its lock: %s", st->node,
				 store_strerror(rc));
		return rc == 0 ? STORE_EINVAL : rc;
	}
	store_pg_params_init(&p);
	store_pg_p_text(&p, st->node);
	if (fresh && !replicated(st, err, errlen)) {
		if (store_pg_exec(st, c, "DELETE FROM nodes WHERE name = $1 AND " PG_LOCAL_COMMIT, &p,
				  &r, "node unregistered") == 0)
			PQclear(r);
		store_pg_params_free(&p);
		return STORE_EAGAIN;
	}
	if ((rc = store_pg_exec(st, c, "UPDATE messages SET lease_owner = NULL WHERE qid = ANY("
				"ARRAY(SELECT qid FROM messages WHERE lease_owner = $1 FOR UPDATE SKIP "
				"LOCKED)) AND " PG_LOCAL_COMMIT, &p, &r, "leases of a previous life")) == 0)
		PQclear(r);
	else
		msg_warn("store: node %s: cannot give up the leases of its previous life (%s): they "
			 "run out (store.lease)", st->node, store_strerror(rc));
	store_pg_params_free(&p);
	return 0;
}

/* store_pg_clock_off - the database's clock less this host's (see store_pg_int.h) */
int64_t store_pg_clock_off(struct pg_store *st)
{
	return __atomic_load_n(&st->clock_off, __ATOMIC_RELAXED);
}

/*
 * store_pg_clock_seen - the database's clock read db, at this host's at:
 * the offset to correct by from now on, said in the log when it appears,
 * changes by PG_SKEW_US or more, or goes (under half of PG_SKEW_US: a
 * host near the limit is not said to come and go)
 */
void store_pg_clock_seen(struct pg_store *st, int64_t db, int64_t at)
{
	int64_t off = db - at, old = store_pg_clock_off(st), within = old ? PG_SKEW_US / 2 : PG_SKEW_US;

	if (off > -within && off < within)
		off = 0;
	old = __atomic_exchange_n(&st->clock_off, off, __ATOMIC_RELAXED);
	if (off != 0 && (old == 0 || off - old >= PG_SKEW_US || old - off >= PG_SKEW_US))
		msg_warn("store: this host's clock is %.1f s %s the database's: claims and stories "
			 "are kept on the database's", (double) (off < 0 ? -off : off) / 1e6,
			 off < 0 ? "ahead of" : "behind");
	else if (off == 0 && old != 0)
		msg_info("store: this host's clock agrees with the database's again");
}

/*
 * clock_read - read the database's clock on c, for store_pg_clock_seen(),
 * unless PostgreSQL is known to be away (a statement would wait for the
 * network's timeouts); 0 or STORE_E*
 */
static int clock_read(struct pg_store *st, PGconn *c)
{
	int64_t t0 = clock_us();
	PGresult *r;
	int err, down;

	st->clock_read = clock_mono_us();
	pthread_mutex_lock(&st->mu);
	down = st->down;
	pthread_mutex_unlock(&st->mu);
	if (down)
		return STORE_EAGAIN;
	if ((err = store_pg_exec(st, c, "SELECT " PG_DB_NOW, NULL, &r, "clock")) != 0)
		return err;
	if (PQntuples(r) == 1)
		store_pg_clock_seen(st, store_pg_int(r, 0, 0), t0 + (clock_us() - t0) / 2);
	PQclear(r);
	return 0;
}

/*
 * store_pg_anchor_check - at most once a second: is the anchor still
 * connected? If not, connect again and take the slot's lock again. Every
 * PG_CLOCK_US the database's clock is read on it.
 *
 * The lock held by the server process of the anchor lost (the server has
 * not seen its connection go yet: up to the keepalive's 11 s after a
 * network cut) is waited for. Held by any other, another process runs
 * as this node: one started while this one was cut off from the
 * database, which its start let in, and which gave up this one's leases.
 * Two processes of one name would give out QIDs of one slot and deliver
 * under one name's leases: this one exits, and a supervisor's restart
 * is refused while the other runs.
 */
void store_pg_anchor_check(struct pg_store *st)
{
	int64_t now = clock_mono_us();
	char err[512];
	PGconn *c;
	int rc, holder = 0;

	if (pthread_mutex_trylock(&st->amu) != 0)
		return;
	if (now - st->anchor_checked < 1000000) {
		pthread_mutex_unlock(&st->amu);
		return;
	}
	st->anchor_checked = now;
	if (st->anchor && idle_alive(st->anchor)) {
		if (now - st->clock_read >= PG_CLOCK_US)
			(void) clock_read(st, st->anchor);
		pthread_mutex_unlock(&st->amu);
		return;
	}
	PQfinish(st->anchor);
	st->anchor = NULL;
	if ((c = store_pg_connect(st, err, sizeof(err))) != NULL) {
		if ((rc = node_lock(st, c, &holder)) == 1) {
			st->anchor = c;
			msg_info("store: node %s: slot lock taken again after a reconnect", st->node);
			(void) clock_read(st, c);
		} else {
			if (rc == 0 && holder != 0 && holder != st->anchor_pid)
				msg_fatal("store: node %s: its slot lock is held by another process "
					  "(PostgreSQL backend %d): a second node of that name started "
					  "while this one was cut off from the database; this one stops",
					  st->node, holder);
			if (rc == 0)
				msg_info("store: node %s: its slot lock is still held by its lost "
					 "connection's server process %d, until the server ends it",
					 st->node, holder);
			PQfinish(c);
		}
	}
	pthread_mutex_unlock(&st->amu);
}

/* pg_free - release a handle and every connection it holds */
static void pg_free(struct pg_store *st)
{
	size_t i;

	for (i = 0; i < st->n_idle; i++)
		PQfinish(st->idle[i]);
	for (i = 0; i < st->n_kept; i++)
		PQfinish(st->kept[i]);
	PQfinish(st->anchor);
	pthread_mutex_destroy(&st->mu);
	pthread_mutex_destroy(&st->amu);
	store_pg_keep_forget(st, NULL);	/* under lmu, before the map it hangs on */
	pthread_mutex_destroy(&st->lmu);
	pthread_mutex_destroy(&st->pmu);
	pthread_cond_destroy(&st->freed);
	store_pg_pend_free(st);
	free(st->leases);
	free(st->url);
	free(st->node);
	free(st);
}

/*
 * pg_close - close the store; every transaction must be over. Batches
 * kept as answered 451 get one bounded try to be settled, else are
 * logged (store_pg_pend.c). The slot's lock is given up before the
 * anchor goes: a backend ends some time after its connection closes, and
 * a restart at once would find it still held.
 */
static void pg_close(struct store *base)
{
	struct pg_store *st = (struct pg_store *) base;

	if (st == NULL)
		return;
	store_pg_pend_close(st);
	if (st->anchor && PQstatus(st->anchor) == CONNECTION_OK)
		(void) store_pg_simple(st, st->anchor, "SELECT pg_advisory_unlock_all()", "close");
	pg_free(st);
}

/*
 * store_pg_open - connect, make the schema current, start the node.
 * One sequence, one failure path: err says what failed and why.
 */
int store_pg_open(struct store **out, const char *url, const char *node, int64_t lease_us,
		  char *err, size_t errlen)
{
	struct pg_store *st = xcalloc(1, sizeof(*st));
	PGconn *c;
	int rc;
	size_t i;

	*out = NULL;
	st->base.ops = &store_pg_ops;
	st->url = xstrdup(url ? url : "");
	st->node = node ? xstrdup(node) : NULL;
	st->lease_us = lease_us > 0 ? lease_us : 60 * 1000000LL;
	st->commit_wait_us = PG_COMMIT_WAIT_US;
	st->base.node_id = -1;
	pthread_mutex_init(&st->mu, NULL);
	pthread_mutex_init(&st->amu, NULL);
	pthread_mutex_init(&st->lmu, NULL);
	pthread_mutex_init(&st->pmu, NULL);
	pthread_cond_init(&st->freed, NULL);
	if (node && (*node == 0 || strlen(node) > 255)) {
		snprintf(err, errlen, "store: node name must be 1 to 255 bytes");
		rc = STORE_EINVAL;
		goto fail;
	}
	if ((c = store_pg_connect(st, err, errlen)) == NULL) {	/* the caller names the setting */
		rc = STORE_EAGAIN;
		goto fail;
	}
	if ((rc = store_pg_session_check(st, c, err, errlen)) != 0) {
		PQfinish(c);
		goto fail;
	}
	if (node == NULL) {		/* a client: the schema read, nothing else */
		st->idle[st->n_idle++] = c;
		st->n_open++;
		if ((rc = store_pg_schema(st, c, 1, err, errlen)) != 0)
			goto fail;
		(void) clock_read(st, c);
		*out = &st->base;
		return 0;
	}
	st->anchor = c;
	if ((rc = store_pg_schema(st, st->anchor, 0, err, errlen)) != 0
	    || (rc = node_start(st, st->anchor, err, errlen)) != 0)
		goto fail;
	(void) clock_read(st, st->anchor);
	st->anchor_checked = clock_mono_us();
	for (i = st->n_open; i < PG_POOL_START; i++) {	/* the probe's are in it */
		if ((c = store_pg_connect(st, err, errlen)) == NULL) {
			rc = STORE_EAGAIN;
			goto fail;
		}
		st->idle[st->n_idle++] = c;
		st->n_open++;
	}
	*out = &st->base;
	return 0;

fail:
	pg_free(st);
	return rc;
}

/* store_pg_set_commit_wait - store.commit_wait: how long a commit waiting for replication is held */
void store_pg_set_commit_wait(struct store *base, int64_t us)
{
	struct pg_store *st = (struct pg_store *) base;

	if (us > 0)
		st->commit_wait_us = us;
}

/* pg_health - stalled while commits wait for replication; never refusing, no upkeep */
static unsigned pg_health(struct store *base)
{
	struct pg_store *st = (struct pg_store *) base;
	int stalled;

	pthread_mutex_lock(&st->mu);
	stalled = st->repl_waiting > 0;
	pthread_mutex_unlock(&st->mu);
	return stalled ? STORE_HSTALLED : 0;
}

const struct store_ops store_pg_ops = {
	.caps = STORE_CAP_SHARED,
	.close = pg_close,
	.health = pg_health,
	.txn_begin = store_pg_txn_begin,
	.claims_get = store_pg_claims_get,
	.txn_claim_put = store_pg_txn_claim_put,
	.txn_replay = store_pg_txn_replay,
	.txn_msg_put = store_pg_txn_msg_put,
	.txn_msg_set_inflight = store_pg_txn_msg_set_inflight,
	.txn_msg_update = store_pg_txn_msg_update,
	.txn_commit = store_pg_txn_commit,
	.queue_take = store_pg_queue_take,
	.lease_renew = store_pg_lease_renew,
	.lease_release = store_pg_lease_release,
	.msg_load = store_pg_msg_load,
	.msg_drop = store_pg_msg_drop,
	.msg_change = store_pg_msg_change,
	.msg_revive = store_pg_msg_revive,
	.stats = store_pg_stats,
	.queue_walk = store_pg_queue_walk,
	.story_get = store_pg_story_get,
	.key_qids = store_pg_key_qids,
	.key_forget = store_pg_key_forget,
	.hist_count = store_pg_hist_count,
	.hist_expire = store_pg_hist_expire,
};
