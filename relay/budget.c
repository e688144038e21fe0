/*
 * NAME
 *	budget 3
 * SUMMARY
 *	message data in memory: counting, back-pressure, giving memory back
 * DESCRIPTION
 *	See budget.h for the rules. c->held is what one connection held when
 *	last counted (the engine's message buffer and its request's copy),
 *	srv->held their sum; both change only in budget_account() and
 *	budget_release(), so the sum stays exact. The leader is found again
 *	only when it stops being one (it left DATA, or was freed).
 */
#include <malloc.h>

#include "../util/log.h"
#include "budget.h"
#include "server_int.h"

#define BUDGET_MMAP_THRESHOLD	(256 * 1024)	/* larger buffers: mmapped, returned on free */
#define BUDGET_TRIM_AFTER	(8 << 20)	/* a burst this big is followed by malloc_trim */

/*
 * budget_setup - fixed mmap threshold (no sliding), so large buffers go
 * back on free; the arenas' free tops kept up to a burst's size, since
 * budget_trim() gives them back after one
 */
void budget_setup(void)
{
	if (mallopt(M_MMAP_THRESHOLD, BUDGET_MMAP_THRESHOLD) != 1)
		msg_warn("mallopt(M_MMAP_THRESHOLD) failed; memory may be kept after bursts");
	if (mallopt(M_TRIM_THRESHOLD, BUDGET_TRIM_AFTER) != 1)
		msg_warn("mallopt(M_TRIM_THRESHOLD) failed; large messages fault their memory in anew");
}

/* budget_in_data - octets of the message being received, 0 outside DATA/BDAT */
static size_t budget_in_data(const struct conn *c)
{
	return smtp_session_in_data(c->s) ? smtp_session_data_len(c->s) : 0;
}

/* budget_find_leader - the session in DATA holding the most */
static void budget_find_leader(struct server *srv)
{
	struct conn *c;
	size_t most = 0, n;

	srv->leader = NULL;
	for (c = srv->conns; c; c = c->next) {
		if (c->dead || (n = budget_in_data(c)) == 0 || (srv->leader && n <= most))
			continue;
		srv->leader = c;
		most = n;
	}
}

/* budget_account - count a connection's holding again; the leader may change */
void budget_account(struct conn *c)
{
	struct server *srv = c->srv;
	/* a message being committed is held three times: our copy, the store's
	 * dirty pages for it, and the redo record that journals them */
	size_t held = smtp_session_data_len(c->s) + (c->req ? 3 * c->req->msg.data_len : 0);
	size_t mine = budget_in_data(c);

	srv->held = srv->held - c->held + held;
	c->held = held;
	if (srv->held > srv->held_peak)
		srv->held_peak = srv->held;
	if (srv->leader == c && mine == 0)
		budget_find_leader(srv);
	else if (mine && (srv->leader == NULL || mine > budget_in_data(srv->leader)))
		srv->leader = c;
}

/* budget_release - a connection is freed (conn_free: off the list already) */
void budget_release(struct conn *c)
{
	struct server *srv = c->srv;

	srv->held -= c->held;
	c->held = 0;
	if (c->paused) {
		c->paused = 0;
		srv->n_paused--;
	}
	if (srv->leader == c)
		budget_find_leader(srv);
}

/* budget_paused - in DATA, the budget spent, and not the leader */
int budget_paused(const struct conn *c)
{
	const struct server *srv = c->srv;

	return srv->held >= srv->cf->limits.data_memory && c != srv->leader
	    && smtp_session_in_data(c->s);
}

/*
 * budget_resume - paused sessions that may read again get EPOLLIN back;
 * conn_flush() reads at once what the transport holds already (TLS
 * read-ahead), which no event will announce
 */
void budget_resume(struct server *srv)
{
	struct conn *c;

	for (c = srv->conns; c && srv->n_paused; c = c->next) {
		if (!c->paused || c->dead || budget_paused(c))
			continue;
		conn_flush(c);		/* ends in conn_interest(), which clears c->paused */
	}
}

/* budget_trim - nothing held after a burst: give the arenas' free pages back */
void budget_trim(struct server *srv)
{
	if (srv->held || srv->n_inflight || srv->held_peak < BUDGET_TRIM_AFTER)
		return;
	malloc_trim(0);
	srv->held_peak = 0;
}
