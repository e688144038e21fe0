/*
 * NAME
 *	server 3
 * SUMMARY
 *	the listeners, the epoll event loop, signals and reload
 * DESCRIPTION
 *	One thread runs every client session (conn.c) with epoll. The epoll
 *	data of every descriptor points at an enum tag (server_int.h): a
 *	listener, a connection, the signalfd, the group commit's eventfd
 *	(queue/commit.h) or the password checks' (auth.h). After the events
 *	of one wait, the loop sends the delayed 535s that are due
 *	(conn_auth.c), lets paused sessions read again (budget.c), once a
 *	second sweeps the deadlines (pace.c) and the per-client counts
 *	(anvil.c), and frees closed connections nothing points at.
 *
 *	SIGHUP reloads what can change while running (server_reload());
 *	SIGTERM and SIGINT stop accepting, close the sessions not being
 *	committed, and end the loop once every commit in flight has been
 *	answered and its session told goodbye (10 s at most).
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "../queue/commit.h"
#include "../smtp/smtp.h"
#include "../tls/tls.h"
#include "../util/clock.h"
#include "../util/listen.h"
#include "../util/log.h"
#include "auth.h"
#include "budget.h"
#include "pace.h"
#include "server.h"
#include "server_int.h"

/* server_ep_set - add or change a descriptor's epoll interest */
void server_ep_set(struct server *srv, int op, int fd, uint32_t events, void *ptr)
{
	struct epoll_event ev = { .events = events, .data.ptr = ptr };

	if (epoll_ctl(srv->epfd, op, fd, &ev) < 0)
		msg_panic("epoll_ctl(%d, fd %d): %m", op, fd);
}

/* on_refused - the engine's own refusals (size, bare CR/LF), logged as Postfix does */
static void on_refused(void *ctx, struct smtp_session *s, const struct smtp_tx *tx,
		       const char *stage, const char *reply)
{
	(void) s;
	conn_reject_log(ctx, stage, reply, tx, NULL);
}

/* on_rcpt - relay only for access.networks and AUTH users */
static const char *on_rcpt(void *ctx, const struct smtp_tx *tx, const char *addr)
{
	struct conn *c = ctx;
	static __thread char reply[SMTP_LINE_MAX + 64];

	if (c->relay_ok || smtp_session_user(c->s))
		return NULL;
	snprintf(reply, sizeof(reply), "554 5.7.1 <%.300s>: Relay access denied", addr);
	conn_reject_log(c, "RCPT", reply, tx, addr);
	return reply;
}

/* server_limits - what the configuration says of sessions and clients (listen, SIGHUP) */
static void server_limits(struct server *srv)
{
	const struct conf *cf = srv->cf;
	struct smtp_config *sc;
	size_t i;

	for (i = 0; i < srv->n_ls; i++) {	/* a session copies them as it starts */
		sc = &srv->ls[i].smtp_cf;
		sc->message_size = cf->limits.message_size;
		sc->max_rcpts = cf->limits.recipients;
		sc->bare_lf_reject = cf->limits.bare_lf_reject;
		sc->long_lines_reject = cf->limits.long_lines == CONF_LONG_LINES_REJECT;
		sc->nul_reject = !cf->limits.nul_pass;
		sc->hard_errors = cf->limits.hard_errors;
		sc->junk_commands = cf->limits.junk_commands;
		sc->out_max = OUT_MAX;
	}
	anvil_set(srv->anvil, cf->limits.client_connections, cf->limits.client_connection_rate,
		  cf->limits.client_auth_rate, cf->limits.client_ipv6_prefix);
}

/*
 * server_load_secrets - certificate, key and users, read while still
 * privileged (before the privilege drop), so they may be root's alone
 */
static void server_load_secrets(struct server *srv)
{
	char err[512];

	if (srv->cf->tls_cert && tls_new(&srv->tls, srv->cf->tls_cert, srv->cf->tls_key,
					 srv->cf->tls_groups, err, sizeof(err)) < 0)
		msg_fatal("tls: %s", err);
	if (srv->cf->auth_users) {
		if (auth_users_load(&srv->users, srv->cf->auth_users, err, sizeof(err)) < 0)
			msg_fatal("auth: %s", err);
		msg_info("auth: %zu users from %s", auth_users_count(srv->users),
			 srv->cf->auth_users);
	}
}

/*
 * server_reload_conf - SIGHUP: read the configuration again and take what
 * can change while running: access.networks, limits, auth.cache_ttl, log,
 * and, through the delivery hook (deliver_reload), retry and the rate and
 * recipient_rate of upstream and of each route in use. The rest (the
 * listeners, tls, auth.users, store, keys, the rest of upstream and routes:
 * conf_restart_changed() names each one changed) needs a restart, though
 * server_reload() reads the certificate and the users' file again; a
 * configuration that does not load changes nothing.
 */
static void server_reload_conf(struct server *srv)
{
	const char *changed[CONF_RESTART_MAX];
	struct conf nc, *cf = srv->cf;
	struct conf_net *nets;
	size_t i, n;
	char err[512];

	if (conf_load(&nc, srv->conf_path, err, sizeof(err)) < 0) {
		msg_warn("reload: %s; keeping the configuration in use", err);
		return;
	}
	nets = cf->networks;			/* only this thread reads them */
	n = cf->n_networks;
	cf->networks = nc.networks;
	cf->n_networks = nc.n_networks;
	nc.networks = nets;
	nc.n_networks = n;
	for (i = 0, n = conf_restart_changed(cf, &nc, changed, CONF_RESTART_MAX); i < n; i++)
		msg_warn("reload: %s changed: it takes a restart; keeping the one in use",
			 changed[i]);
	cf->limits = nc.limits;
	cf->auth_cache_ttl = nc.auth_cache_ttl;
	server_limits(srv);
	srv->dl.reload(srv->dl.arg, &nc);
	cf->log = nc.log;
	log_setup("idemrelay", cf->log.syslog, (enum log_level) cf->log.level);
	msg_info("reload: %s: %zu networks, message_size=%llu recipients=%d retry=%llds..%llds",
		 srv->conf_path ? srv->conf_path : "<default>", cf->n_networks,
		 (unsigned long long) cf->limits.message_size, cf->limits.recipients,
		 (long long) nc.retry.first, (long long) nc.retry.max);
	conf_free(&nc);
}

/* server_reload - SIGHUP: configuration, certificate and users; what fails to load is kept */
static void server_reload(struct server *srv)
{
	struct auth_users *u;
	char err[512];

	server_reload_conf(srv);
	if (srv->tls && tls_reload(srv->tls, err, sizeof(err)) < 0)
		msg_warn("reload: tls: %s; keeping the certificate in use (sha256=%s)", err,
			 tls_fingerprint(srv->tls));
	if (srv->auth) {		/* auth.users takes a restart: it was set at start */
		if (auth_users_load(&u, srv->cf->auth_users, err, sizeof(err)) < 0) {
			msg_warn("reload: auth: %s; keeping the users in use", err);
		} else {
			msg_info("reload: auth: %zu users from %s", auth_users_count(u),
				 srv->cf->auth_users);
			auth_set_users(srv->auth, u);
		}
		auth_cache_ttl(srv->auth, srv->cf->auth_cache_ttl * 1000000);
	}
}

/* server_new - set up everything but the sockets */
struct server *server_new(struct conf *cf, const char *conf_path)
{
	struct server *srv = xcalloc(1, sizeof(*srv));

	budget_setup();			/* before the threads: the thresholds are process-wide */
	srv->cf = cf;
	srv->conf_path = conf_path;
	srv->hooks.rcpt = on_rcpt;
	srv->hooks.message = submit_message;
	srv->hooks.auth = conn_auth;
	srv->hooks.refused = on_refused;
	srv->commit_tag = TAG_COMMIT;
	srv->signal_tag = TAG_SIGNAL;
	srv->auth_tag = TAG_AUTH;
	srv->sigfd = -1;
	srv->anvil = anvil_new();
	if ((srv->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0)
		msg_fatal("epoll_create1: %m");
	server_load_secrets(srv);
	return srv;
}

/* server_set_queue - the store (opened after the listeners), its writer, counts, SIGHUP's hook */
void server_set_queue(struct server *srv, struct store *st, struct commit *cm,
		      struct dupcount *dc, const struct server_delivery *dl)
{
	srv->st = st;
	srv->cm = cm;
	srv->dc = dc;
	srv->dl = *dl;
}

/* server_listen - bind every listener, block the signals we take by signalfd */
void server_listen(struct server *srv)
{
	struct listener *l;
	sigset_t set;
	int one = 1;

	srv->ls = xcalloc(srv->cf->n_listen, sizeof(*srv->ls));
	for (l = srv->ls; l < srv->ls + srv->cf->n_listen; l++) {
		l->tag = TAG_LISTEN;
		l->cf = srv->cf->listen + (l - srv->ls);
		l->smtp_cf.hostname = srv->cf->hostname;
		l->smtp_cf.starttls = srv->tls && !l->cf->tls_implicit;
		l->smtp_cf.starttls_required = l->cf->starttls_required;
		l->smtp_cf.auth = srv->users != NULL;
		l->smtp_cf.auth_required = l->cf->auth_required;
		l->smtp_cf.smtputf8 = l->cf->smtputf8;
		l->fd = listen_tcp("listen", l->cf->address, l->cf->port, 1024);
		/* replies go out at once; Linux gives it to every socket accepted */
		setsockopt(l->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		server_ep_set(srv, EPOLL_CTL_ADD, l->fd, EPOLLIN, l);
		msg_info("listening on %s port %d", l->cf->address, l->cf->port);
	}
	srv->n_ls = srv->cf->n_listen;
	server_limits(srv);
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	if ((srv->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC)) < 0)
		msg_fatal("signalfd: %m");
	server_ep_set(srv, EPOLL_CTL_ADD, srv->sigfd, EPOLLIN, &srv->signal_tag);
}

/*
 * server_goodbye - 421 to every session not being committed (none to one
 * closing already), closed once written; mid-handshake there is nothing
 * to say it on
 */
static void server_goodbye(struct server *srv)
{
	struct conn *c;

	for (c = srv->conns; c; c = c->next) {
		if (c->dead || c->req)
			continue;
		if (!c->io->ready) {
			conn_close(c);
			continue;
		}
		smtp_session_close(c->s, SMTP_CLOSE_SHUTDOWN);
		conn_flush(c);
	}
}

/* server_stop - stop accepting; abort sessions that are not being committed */
static void server_stop(struct server *srv)
{
	size_t i;

	srv->stopping = clock_us();
	commit_stopping(srv->cm);	/* a commit held for the standby is answered now */
	for (i = 0; i < srv->n_ls; i++) {
		close(srv->ls[i].fd);
		srv->ls[i].fd = -1;
	}
	server_goodbye(srv);
}

/* on_signal - SIGTERM/SIGINT stop; SIGHUP reloads (in master's name) */
static void on_signal(struct server *srv)
{
	struct signalfd_siginfo si;
	const char *was = log_service("master");

	while (read(srv->sigfd, &si, sizeof(si)) == sizeof(si)) {
		if (si.ssi_signo == SIGHUP) {
			msg_info("reload: SIGHUP received");
			server_reload(srv);
			continue;
		}
		if (!srv->stopping) {
			msg_info("stopping on signal %u", si.ssi_signo);
			server_stop(srv);
		}
	}
	log_service(was);
}

/* server_run - the event loop */
int server_run(struct server *srv)
{
	struct epoll_event evs[256];
	int64_t last_sweep = clock_us();
	int i, n;

	log_service("smtpd");		/* the sessions', as Postfix's smtpd logs them */
	server_ep_set(srv, EPOLL_CTL_ADD, commit_fd(srv->cm), EPOLLIN, &srv->commit_tag);
	if (srv->users) {
		srv->auth = auth_start(srv->users, AUTH_THREADS);
		auth_cache_ttl(srv->auth, srv->cf->auth_cache_ttl * 1000000);
		srv->users = NULL;		/* the checking threads' now */
		server_ep_set(srv, EPOLL_CTL_ADD, auth_fd(srv->auth), EPOLLIN, &srv->auth_tag);
	}
	for (;;) {
		if (srv->stopping && srv->n_inflight == 0) {
			server_goodbye(srv);	/* every commit answered: whoever is left */
			conn_reap(srv);
			if (srv->conns == NULL || clock_us() - srv->stopping > 10 * 1000000)
				break;
		}
		/* a delayed 535 is due within a second: look every 100ms */
		n = epoll_wait(srv->epfd, evs, 256, srv->n_auth_delayed ? 100 : 1000);
		if (n < 0 && errno != EINTR)
			msg_fatal("epoll_wait: %m");
		for (i = 0; i < n; i++) {
			enum tag *tag = evs[i].data.ptr;

			switch (*tag) {
			case TAG_LISTEN:
				if (!srv->stopping)
					conn_accept(srv, (struct listener *) tag);
				break;
			case TAG_SIGNAL:
				on_signal(srv);
				break;
			case TAG_COMMIT:
				commit_reap(srv->cm);
				break;
			case TAG_AUTH:
				auth_reap(srv->auth);
				break;
			case TAG_CONN:{
					struct conn *c = (struct conn *) tag;

					if (!c->dead)
						conn_event(c, evs[i].events);
					break;
				}
			}
		}
		if (srv->n_auth_delayed)
			conn_auth_delayed(srv);
		if (srv->n_paused)
			budget_resume(srv);
		if (clock_us() - last_sweep >= 1000000) {
			last_sweep = clock_us();
			pace_sweep(srv);
			budget_trim(srv);
			anvil_sweep(srv->anvil, clock_mono_us());
		}
		conn_reap(srv);
	}
	auth_stop(srv->auth);		/* answers what is queued; sessions are not freed yet */
	srv->auth = NULL;
	log_service(NULL);
	return 0;
}

/* server_free - release the server */
void server_free(struct server *srv)
{
	size_t i;

	if (srv == NULL)
		return;
	while (srv->conns)
		conn_free(srv->conns);
	for (i = 0; i < srv->n_ls; i++)
		if (srv->ls[i].fd >= 0)
			close(srv->ls[i].fd);
	free(srv->ls);
	if (srv->sigfd >= 0)
		close(srv->sigfd);
	close(srv->epfd);
	auth_users_free(srv->users);
	tls_free(srv->tls);
	anvil_free(srv->anvil);
	free(srv);
}
