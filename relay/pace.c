/*
 * NAME
 *	pace 3
 * SUMMARY
 *	record deadlines, the minimum data rate, stress, and making room at
 *	the connection limit
 * DESCRIPTION
 *	See pace.h for the rules. Deadlines are on the monotonic clock (a
 *	clock step must not drop or spare anyone) and checked once a second
 *	by pace_sweep(), so a deadline is kept to within a second.
 *
 *	A deadline is stored as it was set (c->deadline, from c->armed); the
 *	stress cap is applied when it is read, so that sessions shorten and
 *	lengthen again as the pressure comes and goes.
 *
 *	The connection limit's refusals are counted per episode: one warning
 *	when the limit is first reached, then one line with the count when
 *	the episode ends or every PACE_REPORT_US while it lasts, instead of
 *	a line per refused connection.
 * DIAGNOSTICS
 *	"timeout after CMD from unknown[ADDR]", with the reason when a
 *	session was dropped to make room; "connection limit N reached" and
 *	"connection limit N reached; M connections refused since T".
 */
#include <stdio.h>

#include "../util/clock.h"
#include "../util/log.h"
#include "../tls/io.h"
#include "pace.h"
#include "server_int.h"

#define PACE_US		1000000LL
#define PACE_ROOM_MIN	(1 * PACE_US)	/* stress budget spent before a session may make room */
#define PACE_FLUSH_US	(2 * PACE_US)	/* after the 421: time for the client to read it */
#define PACE_REPORT_US	(60 * PACE_US)	/* refusals summed up at least this often */

/* pace_live - connections with a socket (closed ones wait to be freed) */
static size_t pace_live(const struct server *srv)
{
	return srv->n_conns - srv->n_dead;
}

/* pace_stressed - open connections at 3/4 of limits.connections or more */
static int pace_stressed(const struct server *srv)
{
	return pace_live(srv) * 4 >= (size_t) srv->cf->limits.connections * 3;
}

/* pace_arm - the next record's deadline: command_timeout or data_timeout from now */
void pace_arm(struct conn *c)
{
	const struct conf *cf = c->srv->cf;
	int64_t now = clock_mono_us();

	c->records = smtp_session_records(c->s);
	c->in_data = smtp_session_in_data(c->s);
	c->armed = now;
	c->deadline = now + (c->in_data ? cf->limits.data_timeout
			     : cf->limits.command_timeout) * PACE_US;
}

/*
 * pace_input - after feeding n octets. A completed record (or a change
 * between commands and data) re-arms; inside a message every octet buys
 * 1/min_data_rate seconds, up to data_timeout ahead (stress_timeout
 * under stress); inside a command line nothing moves the deadline.
 */
void pace_input(struct conn *c, size_t n)
{
	const struct conf *cf = c->srv->cf;
	int64_t now, cap, d;

	if (smtp_session_records(c->s) != c->records || smtp_session_in_data(c->s) != c->in_data) {
		pace_arm(c);
		return;
	}
	if (!c->in_data)
		return;
	now = clock_mono_us();
	cap = cf->limits.data_timeout;
	if (pace_stressed(c->srv) && cf->limits.stress_timeout < cap)
		cap = cf->limits.stress_timeout;
	cap = now + cap * PACE_US;
	d = cf->limits.min_data_rate ? c->deadline + (int64_t) n * PACE_US / cf->limits.min_data_rate
	    : cap;
	c->deadline = d < cap ? d : cap;
	c->armed = now;
}

/* pace_left - microseconds until the deadline, with the stress cap if stressed */
static int64_t pace_left(const struct conn *c, int64_t now, int stressed)
{
	int64_t d = c->deadline, s;

	s = c->armed + c->srv->cf->limits.stress_timeout * PACE_US;
	if (stressed && s < d)
		d = s;
	return d - now;
}

/* pace_timeout - 421 and close; a session already closing, or mid-handshake, just goes */
static void pace_timeout(struct conn *c, const char *why)
{
	int64_t now = clock_mono_us();

	if (!c->io->ready) {		/* nothing can be said mid-handshake */
		msg_info("timeout during TLS handshake from unknown[%s]%s", c->addr, why);
		conn_close(c);
		return;
	}
	if (smtp_session_closing(c->s)) {	/* its last reply went unread */
		conn_close(c);
		return;
	}
	msg_info("timeout after %s from unknown[%s]%s", smtp_session_where(c->s), c->addr, why);
	smtp_session_close(c->s, SMTP_CLOSE_TIMEOUT);
	c->armed = now;
	c->deadline = now + PACE_FLUSH_US;
	conn_flush(c);
}

/* pace_report - sum up the refusals of this episode so far */
static void pace_report(struct server *srv, int64_t now)
{
	char since[32];

	msg_warn("connection limit %d reached; %lu connections refused since %s",
		 srv->cf->limits.connections, srv->limit_refused,
		 clock_iso(since, sizeof(since), srv->limit_since));
	srv->limit_refused = 0;
	srv->limit_since = clock_us();
	srv->limit_report = now;
}

/* pace_refused - a connection was refused at the limit */
void pace_refused(struct server *srv)
{
	if (srv->limit_refused == 0 && srv->limit_report == 0) {
		msg_warn("connection limit %d reached", srv->cf->limits.connections);
		srv->limit_since = clock_us();
		srv->limit_report = clock_mono_us();
	}
	srv->limit_refused++;
}

/*
 * pace_sweep - deadlines, the refusals' summary, and the buffers of
 * sessions idle for a second (c->armed moves with every record and every
 * message octet: a busy session keeps its room)
 */
void pace_sweep(struct server *srv)
{
	struct conn *c, *next;
	int64_t now = clock_mono_us();
	int stressed = pace_stressed(srv);	/* as the sweep starts: the order must not matter */

	for (c = srv->conns; c; c = next) {
		next = c->next;
		if (c->dead)
			continue;
		if (smtp_session_waiting(c->s) || c->paused
		    || smtp_session_records(c->s) != c->records) {
			pace_arm(c);	/* the daemon's time is not the client's */
			continue;
		}
		if (now - c->armed >= PACE_US)
			io_trim(c->io);	/* no input for a second: its buffers go back */
		if (pace_left(c, now, stressed) <= 0)
			pace_timeout(c, "");
	}
	if (srv->limit_report == 0)
		return;
	if (pace_live(srv) < (size_t) srv->cf->limits.connections) {
		if (srv->limit_refused)
			pace_report(srv, now);
		srv->limit_report = 0;		/* the episode is over */
	} else if (now - srv->limit_report >= PACE_REPORT_US && srv->limit_refused) {
		pace_report(srv, now);
	}
}

/*
 * pace_shed - the session with the least time left of those of client (all
 * clients: NULL) that may go: not waiting for the daemon, not paused, and,
 * unless one client holds several slots, past its first second of stress
 */
static struct conn *pace_shed(struct server *srv, const struct anvil_client *client,
			      int64_t now)
{
	int64_t room = srv->cf->limits.stress_timeout * PACE_US - PACE_ROOM_MIN;
	int64_t left, best_left = 0;
	struct conn *c, *best = NULL;

	for (c = srv->conns; c; c = c->next) {
		if (c->dead || smtp_session_waiting(c->s) || c->paused
		    || (client && c->client != client))
			continue;
		left = pace_left(c, now, 1);
		if ((!client && left > room) || (best && left >= best_left))
			continue;
		best = c;
		best_left = left;
	}
	return best;
}

/*
 * pace_make_room - at the connection limit, drop a session: first one of
 * the client holding the most slots, if it holds more than one (one
 * address must not keep the others out); else the one with the least
 * time left, if it has spent a second
 */
int pace_make_room(struct server *srv)
{
	const struct anvil_client *top = anvil_top(srv->anvil);
	int64_t now = clock_mono_us();
	struct conn *best = NULL;
	char why[128];

	if (top && anvil_count(top) > 1 && (best = pace_shed(srv, top, now)) != NULL)
		snprintf(why, sizeof(why), " (connection limit %d reached: the client holding"
			 " the most, %zu, gives one up)", srv->cf->limits.connections,
			 anvil_count(top));
	else if ((best = pace_shed(srv, NULL, now)) != NULL)
		snprintf(why, sizeof(why), " (connection limit %d reached: the slowest goes first)",
			 srv->cf->limits.connections);
	if (best == NULL)
		return 0;
	pace_timeout(best, why);
	if (!best->dead)
		conn_close(best);	/* the 421 is out, or never will be */
	return 1;
}
