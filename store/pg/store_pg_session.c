/*
 * NAME
 *	store_pg_session 3
 * SUMMARY
 *	is a connection's server session its own? A pooler that shares them is refused at start
 * SYNOPSIS
 *	#include "store/pg/store_pg_int.h"
 * DESCRIPTION
 *	A node keeps state in its server sessions: the anchor's session
 *	advisory lock on its slot (store_pg.c) and each connection's
 *	prepared statements (store_pg_stmt.c). A pooler in between that
 *	hands a server session to another client once a transaction ends
 *	(PgBouncer's transaction mode) or once a statement ends (statement
 *	mode) breaks both: the slot's lock stays with a session that then
 *	serves any other client, a second node of the same name finds it
 *	free, and a statement prepared in one session is called by name in
 *	another. store_pg_session_check() finds out before anything relies
 *	on it, at every open (the start, idemrelay -t, idemrelayctl).
 *
 *	The probe, on connection A (the one that goes on to hold the lock)
 *	and two more, B1 and B2, connected before it starts, so that their
 *	own set-up statements are over:
 *
 *	1. A sets a session setting, idemrelay.probe, to a value of its own
 *	   (set_config(..., false): it outlives A's transaction) and reads
 *	   its server's pid.
 *	2. B1 begins a transaction and, inside it, reads its pid and
 *	   idemrelay.probe; it keeps the transaction open, and with it its
 *	   server session, whatever the pooler's mode.
 *	3. A reads its pid and idemrelay.probe again.
 *	4. and 5. The same as 2. and 3., with B2.
 *
 *	With a server session per connection, B1 and B2 have pids of their
 *	own and no value, and A finds its pid and value again each time. A
 *	pooler in transaction mode gives a client whichever server
 *	connection is idle when its transaction starts: after step 1, A's
 *	server S is idle, released last. PgBouncer takes the one released
 *	last (LIFO) by default: B1 gets S, and sees A's pid. With
 *	server_round_robin it takes the one idle longest, and a released one
 *	goes to the end of the line: with no other idle, B1 gets S; with one
 *	other, B1 gets that, A gets S again at step 3 and puts it back, the
 *	only one idle, and B2 gets it; with two or more others, B1 gets one
 *	and A, at step 3, another: its pid changes. Whatever the pool's size,
 *	one of the checks sees it. In statement mode B1's transaction itself
 *	ends the connection (PgBouncer: "transaction blocks not allowed in
 *	statement pooling mode"). The value is compared as well as the pid,
 *	for a pooler that would report pids of its own; the pid as well as
 *	the value, for one that resets a session between clients
 *	(PgBouncer's server_reset_query_always).
 *
 *	What the probe cannot see: another client of the same pool taking
 *	or releasing server connections between two of these statements (the
 *	nodes themselves refuse, so in practice only an older node or
 *	another program on the same database and user), and several poolers
 *	behind one address, each with a pool of its own.
 * DIAGNOSTICS
 *	0; STORE_EINVAL with one line in err that says what was seen and
 *	asks for session pooling; STORE_EAGAIN when a probe connection or
 *	statement failed for another reason (err says why).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../util/clock.h"
#include "../../util/log.h"
#include "store_pg_int.h"

#define PROBE_READ	"SELECT pg_backend_pid(), current_setting('idemrelay.probe', true)"
#define SHARED_FMT	"store: PostgreSQL is reached through a pooler that shares server " \
	"sessions (%s): the node's session lock and prepared statements need session pooling " \
	"(PgBouncer: pool_mode = session)"

struct probe_seen {
	int64_t pid;			/* the server's pid */
	char value[64];			/* idemrelay.probe there, "" if none */
};

/* probe_read - one statement of the probe on c, with what it saw; 0 or -1 */
static int probe_read(struct pg_store *st, PGconn *c, const char *sql, struct probe_seen *seen)
{
	PGresult *r;
	char *v;

	if (store_pg_exec(st, c, sql, NULL, &r, "pooler probe") != 0)
		return -1;
	seen->pid = store_pg_int(r, 0, 0);
	v = store_pg_strdup(r, 0, 1);
	snprintf(seen->value, sizeof(seen->value), "%s", v ? v : "");
	free(v);
	PQclear(r);
	return 0;
}

/*
 * probe_other - steps 2 and 4 on b, left in its transaction: 0 a session
 * of its own, 1 shared (why in err), <0 an error (err says)
 */
static int probe_other(struct pg_store *st, const struct probe_seen *a, PGconn *b,
		       char *err, size_t errlen)
{
	struct probe_seen seen;
	char why[256], msg[160];

	if (store_pg_simple(st, b, "BEGIN", "pooler probe") != 0
	    || probe_read(st, b, PROBE_READ, &seen) != 0) {
		store_pg_conn_error(b, msg, sizeof(msg));
		if (PQstatus(b) == CONNECTION_OK) {
			snprintf(err, errlen, "store: pooler probe: %s", msg);
			return STORE_EAGAIN;
		}
		/* statement mode: PgBouncer ends the connection once BEGIN is done */
		snprintf(why, sizeof(why), "a transaction across statements ended the connection: %s",
			 msg);
	} else if (seen.pid == a->pid) {
		snprintf(why, sizeof(why), "two connections had server process %lld",
			 (long long) seen.pid);
	} else if (strcmp(seen.value, a->value) == 0) {
		snprintf(why, sizeof(why), "a setting made on one connection was seen on another");
	} else {
		return 0;
	}
	snprintf(err, errlen, SHARED_FMT, why);
	return 1;
}

/* probe_again - steps 3 and 5 on a's connection c: 0 the same session, 1 not, <0 an error */
static int probe_again(struct pg_store *st, const struct probe_seen *a, PGconn *c,
		       char *err, size_t errlen)
{
	struct probe_seen seen;
	char why[160], msg[160];

	if (probe_read(st, c, PROBE_READ, &seen) != 0) {
		snprintf(err, errlen, "store: pooler probe: %s",
			 store_pg_conn_error(c, msg, sizeof(msg)));
		return STORE_EAGAIN;
	}
	if (seen.pid != a->pid)
		snprintf(why, sizeof(why), "one connection's server process went from %lld to %lld "
			 "between two statements", (long long) a->pid, (long long) seen.pid);
	else if (strcmp(seen.value, a->value) != 0)
		snprintf(why, sizeof(why), "one connection lost a setting it made between two "
			 "statements");
	else
		return 0;
	snprintf(err, errlen, SHARED_FMT, why);
	return 1;
}

/* keep - b, its probe over, rolled back and into the pool, or closed (its transaction ends with it) */
static void keep(struct pg_store *st, PGconn *b)
{
	if (b != NULL && store_pg_simple(st, b, "ROLLBACK", "pooler probe") == 0) {
		pthread_mutex_lock(&st->mu);
		st->idle[st->n_idle++] = b;
		st->n_open++;
		pthread_mutex_unlock(&st->mu);
		return;
	}
	PQfinish(b);
}

/*
 * store_pg_session_check - does connection c keep a server session of
 * its own through whatever is in between? 0, or STORE_EINVAL with one
 * line in err (see the header). The two other connections go to the pool
 * (idle) when the answer is yes, so that a start opens no more than it
 * did before. When the server has no slot for them, the probe is
 * skipped, with a warning: a node would not start anyway (its pool needs
 * them), and idemrelayctl needs only c.
 */
int store_pg_session_check(struct pg_store *st, PGconn *c, char *err, size_t errlen)
{
	struct probe_seen a;
	PGconn *b[2] = { NULL, NULL };
	char sql[160], msg[160];
	int rc = 0;
	size_t i;

	for (i = 0; i < 2; i++)
		if ((b[i] = store_pg_connect(st, err, errlen)) == NULL) {
			rc = STORE_EAGAIN;
			if (store_pg_slots_taken(err)) {
				msg_warn("store: no connection slot free to check for a pooler in "
					 "between: %s", err);
				rc = 0;
			}
			goto done;
		}
	/* a value no other process sets: pid and time; digits, so no quoting */
	snprintf(sql, sizeof(sql), "SELECT pg_backend_pid(), set_config('idemrelay.probe', "
		 "'%ld%lld', false)", (long) getpid(), (long long) clock_us());
	if (probe_read(st, c, sql, &a) != 0) {
		snprintf(err, errlen, "store: pooler probe: %s",
			 store_pg_conn_error(c, msg, sizeof(msg)));
		rc = STORE_EAGAIN;
		goto done;
	}
	for (i = 0; i < 2 && rc == 0; i++)
		if ((rc = probe_other(st, &a, b[i], err, errlen)) == 0)
			rc = probe_again(st, &a, c, err, errlen);
	if (rc == 0) {
		for (i = 0; i < 2; i++)
			keep(st, b[i]);
		return 0;
	}
done:
	for (i = 0; i < 2; i++)
		PQfinish(b[i]);		/* their transactions end with them */
	return rc == 1 ? STORE_EINVAL : rc;
}
