/*
 * NAME
 *	conn_auth 3
 * SUMMARY
 *	a connection's AUTH: credentials to the checking threads, the
 *	verdict back to its session
 * DESCRIPTION
 *	The engine hands credentials to conn_auth(), which queues them for
 *	a checking thread (auth.h), off the event loop. A success is
 *	answered at once; a failure only after AUTH_FAIL_DELAY, a
 *	per-connection deadline the loop sweeps (conn_auth_delayed()), so a
 *	guessing client is slowed without slowing anyone else. A client
 *	over limits.client_auth_rate gets 454 unchecked. One check at a
 *	time per client (anvil.h): its others wait behind it in its line,
 *	not before other clients. Authenticated clients may relay; with
 *	keys.scope = "user" their claims are filed under their user name.
 * DIAGNOSTICS
 *	"auth: client=[ADDR] sasl_username=U status=ok", "status=failed",
 *	"status=refused (AUTH rate limit)".
 */
#include <stdlib.h>
#include <string.h>

#include "../queue/metrics.h"
#include "../smtp/smtp.h"
#include "../util/clock.h"
#include "../util/log.h"
#include "auth.h"
#include "server_int.h"

/* conn_auth_cancel - a connection closes: a check still waiting in its client's line is dropped */
void conn_auth_cancel(struct conn *c)
{
	/* submitted (out of the line) or none: conn_auth_checked() frees it */
	if (c->auth == NULL || !anvil_auth_cancel(c->client, &c->auth_wait))
		return;
	explicit_bzero(c->auth->pass, sizeof(c->auth->pass));
	free(c->auth);
	c->auth = NULL;
}

/*
 * conn_auth_verdict - credentials decided, by a check or at once: 235 now,
 * 535 after the delay; 1 if a 235 went to a live session
 */
static int conn_auth_verdict(struct conn *c, struct auth_req *req)
{
	int ok = req->ok && !c->dead;

	c->auth = NULL;
	if (req->ok)
		msg_info("auth: client=[%s] sasl_username=%s status=ok%s", c->addr, req->user,
			 req->cached ? " (remembered)" : "");
	else
		msg_warn("auth: client=[%s] sasl_username=%s status=failed", c->addr, req->user);
	if (ok) {
		smtp_session_auth_reply(c->s, 1);
	} else if (!c->dead) {
		c->auth_due = clock_us() + AUTH_FAIL_DELAY;
		c->srv->n_auth_delayed++;
	}
	explicit_bzero(req->pass, sizeof(req->pass));
	free(req);
	return ok;
}

/*
 * conn_auth_checked - a check came back from the threads, where it held its
 * client's turn: the next in the client's line goes now. Outside the hook,
 * a 235 must set the session's input going again itself.
 */
static void conn_auth_checked(struct auth_req *req)
{
	struct conn *n, *c = req->ctx;
	struct anvil_wait *w;

	if ((w = anvil_auth_end(c->client)) != NULL) {
		n = (struct conn *) ((char *) w - offsetof(struct conn, auth_wait));
		auth_submit(n->srv->auth, n->auth);
	}
	if (conn_auth_verdict(c, req))
		conn_process(c);
}

/* conn_auth_delayed - send the 535s whose delay is over */
void conn_auth_delayed(struct server *srv)
{
	struct conn *c, *next;
	int64_t now = clock_us();

	for (c = srv->conns; c && srv->n_auth_delayed; c = next) {
		next = c->next;
		if (c->auth_due == 0 || c->auth_due > now)
			continue;
		c->auth_due = 0;
		srv->n_auth_delayed--;
		if (c->dead)
			continue;
		smtp_session_auth_reply(c->s, 0);
		conn_process(c);
	}
}

/* conn_auth - the engine's AUTH hook: the credentials to a checking thread, off the loop */
void conn_auth(void *ctx, struct smtp_session *s, const char *mech,
	       const char *user, const char *pass)
{
	struct conn *c = ctx;
	struct auth_req *req;
	size_t ulen = strlen(user), plen = strlen(pass);

	(void) mech;
	req = xcalloc(1, sizeof(*req));
	req->done = conn_auth_checked;
	req->ctx = c;
	memcpy(req->user, user, ulen < AUTH_NAME_MAX ? ulen : AUTH_NAME_MAX);
	if (!anvil_auth_rate(c->srv->anvil, c->client, c->addr, clock_mono_us())) {
		metrics_inc(METRICS_CLIENT_AUTH_REFUSED);
		msg_warn("auth: client=[%s] sasl_username=%s status=refused (AUTH rate limit)",
			 c->addr, req->user);
		free(req);
		smtp_session_auth_reply(s, -1);	/* 454, no check */
		return;
	}
	c->auth = req;
	/* decided at once, inside the hook: the engine's feed goes on after a 235 by itself */
	if (plen > AUTH_PASS_MAX) {
		req->ok = 0;			/* cannot be right: refused unhashed, after the delay */
		conn_auth_verdict(c, req);
	} else if (auth_cached(c->srv->auth, req, pass)) {
		req->ok = req->cached = 1;	/* this very user and password passed before */
		conn_auth_verdict(c, req);
	} else {
		memcpy(req->pass, pass, plen);
		/* one check at a time per client: its others wait behind it, not before others */
		if (anvil_auth_begin(c->client, &c->auth_wait))
			auth_submit(c->srv->auth, req);
	}
}
