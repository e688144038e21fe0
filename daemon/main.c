/*
 * NAME
 *	idemrelay 8
 * SUMMARY
 *	SMTP submission relay with idempotent acceptance
 * SYNOPSIS
 *	idemrelay [-t] [-c config]
 * DESCRIPTION
 *	Runs in the foreground. With no -c, the embedded default
 *	configuration (conf/idemrelay.conf) is used. -t checks the
 *	configuration and exits 0 or 1.
 *
 *	Start-up order: configuration, store, QID seed, delivery threads,
 *	listeners, event loop. Shutdown runs it backwards, after the event
 *	loop has answered or aborted every transaction in progress.
 */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../conf/conf.h"
#include "../store/store.h"
#include "../util/log.h"
#include "control.h"
#include "../deliver/deliver.h"
#include "../deliver/esmtp/deliver_bridge.h"
#include "../relay/metrics.h"
#include "nodelay.h"
#include "../relay/qid.h"
#include "../relay/server.h"

/* mkdir_parents - create the directories above path, as mkdir -p would */
static void mkdir_parents(const char *path)
{
	char *p = strdup(path), *s;

	if (p == NULL)
		return;
	for (s = strchr(p + 1, '/'); s; s = strchr(s + 1, '/')) {
		*s = 0;
		if (mkdir(p, 0755) < 0 && errno != EEXIST)
			msg_fatal("mkdir %s: %m", p);
		*s = '/';
	}
	free(p);
}

/* chown_tree - give a directory and what is directly in it to the user */
static void chown_tree(const char *dir, uid_t uid, gid_t gid)
{
	char path[4096];
	const char *names[] = { "", "/data.mdb", "/lock.mdb", "/new", "/cur", "/tmp" };
	size_t i;

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s%s", dir, names[i]);
		if (lchown(path, uid, gid) < 0 && errno != ENOENT)
			msg_fatal("chown %s: %m", path);
	}
}

/*
 * privdrop - become the configured user once the ports are bound, before
 * any network input is read. The store and the Maildir must stay
 * writable, so they are handed over first (as postfix set-permissions
 * would).
 */
static void privdrop(const struct conf *cf)
{
	struct passwd *pw;

	if ((pw = getpwnam(cf->user)) == NULL)
		msg_fatal("user %s: no such user", cf->user);
	if (getuid() != 0) {
		if (getuid() != pw->pw_uid)
			msg_fatal("user = \"%s\" needs to start as root", cf->user);
		return;
	}
	if (mkdir(cf->store.path, 0700) < 0 && errno != EEXIST)
		msg_fatal("mkdir %s: %m", cf->store.path);
	chown_tree(cf->store.path, pw->pw_uid, pw->pw_gid);
	if (cf->upstream.maildir) {
		mkdir_parents(cf->upstream.maildir);
		if (mkdir(cf->upstream.maildir, 0700) < 0 && errno != EEXIST)
			msg_fatal("mkdir %s: %m", cf->upstream.maildir);
		chown_tree(cf->upstream.maildir, pw->pw_uid, pw->pw_gid);
	}
	if (setgroups(0, NULL) < 0 || setgid(pw->pw_gid) < 0 || setuid(pw->pw_uid) < 0)
		msg_fatal("cannot become user %s: %m", cf->user);
	if (setuid(0) == 0)
		msg_panic("privileges were not dropped");
	msg_info("running as user %s", cf->user);
}

/* usage - say how to run it */
static void usage(void)
{
	fprintf(stderr, "usage: idemrelay [-t] [-c config]\n");
	exit(1);
}

/* enqueue - the server's committed messages go to delivery (writer thread) */
static void enqueue(void *dl, const char *qid)
{
	deliver_enqueue(dl, qid);
}

/* reload - SIGHUP's retry settings go to delivery (event loop) */
static void reload(void *dl, const struct conf *nc)
{
	deliver_reload(dl, nc);
}

int main(int argc, char **argv)
{
	const char *path = NULL;
	struct conf cf;
	struct store *st;
	struct server *srv;
	struct deliver *dl;
	struct control *ctl;
	struct metrics *mx;
	char err[512], last[STORE_QID_SIZE];
	int ch, test = 0, rc;

	while ((ch = getopt(argc, argv, "c:th")) != -1) {
		switch (ch) {
		case 'c':
			path = optarg;
			break;
		case 't':
			test = 1;
			break;
		default:
			usage();
		}
	}
	if (optind != argc)
		usage();
	if (conf_load(&cf, path, err, sizeof(err)) < 0) {
		fprintf(stderr, "idemrelay: %s\n", err);
		return 1;
	}
	if (test) {
		printf("idemrelay: %s: configuration OK\n", path ? path : "<default>");
		conf_free(&cf);
		return 0;
	}
	log_setup("idemrelay", cf.log.syslog, (enum log_level) cf.log.level);
	signal(SIGPIPE, SIG_IGN);
	nodelay_connect_hook = deliver_bridge_attach;	/* before any thread */

	mkdir_parents(cf.store.path);
	srv = server_new(&cf, path, NULL);	/* reads the TLS key and AUTH users: still root */
	server_listen(srv);		/* signals are blocked from here: threads inherit that */
	if (cf.user)
		privdrop(&cf);
	if (store_open(&st, cf.store.path, cf.store.map_size, err, sizeof(err)) != 0)
		msg_fatal("store %s: %s", cf.store.path, err);
	if (store_last_qid(st, last) == 0)
		qid_seed(last);
	server_set_store(srv, st);
	dl = deliver_start(&cf, st, server_commit(srv));
	server_set_delivery(srv, &(struct server_delivery) { enqueue, reload, dl });
	ctl = control_start(&cf, st, dl, server_dupcount(srv));
	mx = metrics_start(&cf, st);
	msg_info("started: store=%s upstream=%s", cf.store.path,
		 cf.upstream.maildir ? cf.upstream.maildir : cf.upstream.hosts[0].host);
	rc = server_run(srv);
	metrics_stop(mx);
	control_stop(ctl);		/* after the last answer: it writes the last counts */
	deliver_stop(dl);
	server_free(srv);
	store_close(st);
	msg_info("stopped");
	conf_free(&cf);
	return rc;
}
