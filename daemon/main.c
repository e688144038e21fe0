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
 *	Start-up order: configuration, the checks -t makes (check.h: the
 *	first problem is fatal, in -t's words), store and control
 *	directories, listeners, privilege drop, control socket, store, QID
 *	seed, delivery threads, control thread and metrics, event loop.
 *	Shutdown runs it backwards, after the event loop has answered or
 *	aborted every transaction in progress.
 */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../conf/conf.h"
#include "../store/store.h"
#include "../util/buf.h"
#include "../util/dir.h"
#include "../util/log.h"
#include "check.h"
#include "control.h"
#include "../deliver/deliver.h"
#include "../deliver/esmtp/deliver_esmtp.h"
#include "../queue/commit.h"
#include "../queue/metrics.h"
#include "../queue/qid.h"
#include "../relay/server.h"

/* mkdir_parents - create the directories above the setting's path, as mkdir -p would */
static void mkdir_parents(const struct conf *cf, const char *setting, const char *path)
{
	char *p = xstrdup(path), *s = strrchr(p, '/'), where[512];
	int err;

	if (s != NULL && s != p) {
		*s = 0;
		if ((err = dir_make(p, 0755)) < 0)
			msg_fatal("%s: mkdir -p %s: %s: choose another path",
				  conf_where(cf, setting, where, sizeof(where)), p, strerror(-err));
	}
	free(p);
}

/* own_dir - make the setting's directory, and give it and what is directly in it to pw */
static void own_dir(const struct conf *cf, const char *setting, const char *dir,
		    const struct passwd *pw)
{
	const char *names[] = { "", "/data.mdb", "/lock.mdb", "/new", "/cur", "/tmp" };
	char path[4096], where[512];
	size_t i;

	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		msg_fatal("%s: mkdir %s: %m", conf_where(cf, setting, where, sizeof(where)), dir);
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s%s", dir, names[i]);
		if (lchown(path, pw->pw_uid, pw->pw_gid) < 0 && errno != ENOENT)
			msg_fatal("chown %s: %m", path);
	}
}

/*
 * privdrop - become the configured user once the ports are bound, before
 * any network input is read. The store and the Maildir must stay
 * writable, so they are handed over first (as postfix set-permissions
 * would), and so is the control socket's directory if the start made it.
 */
static void privdrop(const struct conf *cf, const char *made_control_dir)
{
	struct passwd *pw;
	const char *dir;
	char where[512];

	/* check_startup() found the user and the directories: these are races */
	if ((pw = getpwnam(cf->user)) == NULL)
		msg_fatal("%s: no such user \"%s\"", conf_where(cf, "user", where, sizeof(where)),
			  cf->user);
	if (getuid() != 0)		/* already the user: check_user() refused any other */
		return;
	if ((dir = store_dir(cf)) != NULL)	/* a database has no directory here */
		own_dir(cf, "store.path", dir, pw);
	if (cf->upstream.maildir) {
		mkdir_parents(cf, "upstream.maildir", cf->upstream.maildir);
		own_dir(cf, "upstream.maildir", cf->upstream.maildir, pw);
	}
	if (made_control_dir && lchown(made_control_dir, pw->pw_uid, pw->pw_gid) < 0)
		msg_fatal("%s: chown %s: %m", conf_where(cf, "control", where, sizeof(where)),
			  made_control_dir);
	if (setgroups(0, NULL) < 0 || setgid(pw->pw_gid) < 0 || setuid(pw->pw_uid) < 0)
		msg_fatal("cannot become user %s: %m", cf->user);
	if (setuid(0) == 0)
		msg_panic("privileges were not dropped");
	msg_info("running as user %s", cf->user);
}

/*
 * control_dir - make the control socket's directory if it is missing, as
 * systemd's RuntimeDirectory= would (mkdir -p); the directory made, to be
 * handed to the user, or NULL
 */
static char *control_dir(const struct conf *cf)
{
	char *dir, *slash;
	struct stat st;

	if (cf->control == NULL || (slash = strrchr(cf->control, '/')) == NULL)
		return NULL;
	dir = xstrdup(cf->control);
	dir[slash - cf->control + (slash == cf->control)] = 0;
	if (stat(dir, &st) == 0) {
		free(dir);
		return NULL;
	}
	mkdir_parents(cf, "control", cf->control);
	return dir;
}

/* check_print - -t: every problem on stderr */
static void check_print(const char *problem)
{
	fprintf(stderr, "idemrelay: %s\n", problem);
}

/* check_stop - the start: the first problem is fatal, in the words -t uses */
static void check_stop(const char *problem)
{
	msg_fatal("%s", problem);
}

/* usage - say how to run it */
static void usage(void)
{
	fprintf(stderr, "usage: idemrelay [-t] [-c config]\n");
	exit(1);
}

/*
 * enqueue - a committed submission goes to delivery (writer thread). dl
 * is where main keeps delivery, which starts after the writer it uses;
 * it is set before server_run() takes the first submission, which
 * reaches the writer through commit_submit()'s lock after that
 */
static void enqueue(void *dl, const char *qid)
{
	deliver_enqueue(*(struct deliver **) dl, qid);
}

/* reload - SIGHUP's retry settings and upstream rates go to delivery (event loop) */
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
	struct deliver *dl = NULL;
	struct commit *cm;
	struct dupcount *dc;
	struct control *ctl;
	struct metrics *mx;
	struct store_stats ss;
	char err[1024], *made;
	int ch, test = 0, rc;

	log_default_service("master");	/* postfix/master's lines: start, stop, reload */
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
		/* what start would find, like postfix check: files, user, directories, ports */
		log_setup("idemrelay", 0, LOG_LEVEL_WARN);
		rc = check_startup(&cf, check_print) ? 1 : 0;
		if (rc == 0 && cf.log.syslog && !log_syslog_reachable())
			printf("idemrelay: log.target: \"syslog\", but there is no /dev/log here:"
			       " the daemon would log to stderr\n");
		if (rc == 0)
			printf("idemrelay: %s: configuration OK\n", path ? path : "<default>");
		conf_free(&cf);
		return rc;
	}
	/* the journal stamps what it is given; a file or a terminal needs our time */
	log_stamp(getenv("JOURNAL_STREAM") == NULL);
	log_setup("idemrelay", cf.log.syslog, (enum log_level) cf.log.level);
	signal(SIGPIPE, SIG_IGN);

	/* quietly: the start says "tls: loaded" itself, once */
	log_setup("idemrelay", cf.log.syslog, LOG_LEVEL_WARN);
	(void) check_startup(&cf, check_stop);
	log_setup("idemrelay", cf.log.syslog, (enum log_level) cf.log.level);
	if (store_dir(&cf) != NULL)
		mkdir_parents(&cf, "store.path", store_dir(&cf));
	made = control_dir(&cf);
	srv = server_new(&cf, path);	/* reads the TLS key and AUTH users: still root */
	server_listen(srv);		/* signals are blocked from here: threads inherit that */
	if (cf.user)
		privdrop(&cf, made);
	free(made);
	ctl = control_open(&cf);	/* before the store: control.h says why */
	if (store_open(&st, &cf, STORE_NODE, err, sizeof(err)) != 0)
		msg_fatal("%s", err);		/* the store the configuration names */
	qid_set_node(store_node_id(st));	/* QIDs of nodes sharing a store never collide */
	if (store_stats(st, &ss, 0) == 0)
		qid_seed(ss.last_qid);
	cm = commit_start(st, enqueue, &dl);	/* the writer acceptance and delivery share */
	dl = deliver_start(&cf, st, cm, cf.upstream.maildir ? &deliver_maildir : &deliver_esmtp);
	dc = dupcount_new();		/* the event loop counts, the admin thread writes */
	server_set_queue(srv, st, cm, dc, &(struct server_delivery) { reload, dl });
	control_start(ctl, st, dl, dc);
	mx = metrics_start(&cf, st);
	msg_info("started: store=%s upstream=%s",
		 store_dir(&cf) ? store_dir(&cf) : store_name(&cf),
		 cf.upstream.maildir ? cf.upstream.maildir : cf.upstream.hosts[0].host);
	rc = server_run(srv);
	commit_told_flush(cm);		/* delivery writes its last reap did not announce */
	metrics_stop(mx);
	control_stop(ctl);		/* after the last answer: it writes the last counts */
	deliver_stop(dl);
	commit_stop(cm);		/* after delivery: its writes go through it */
	server_free(srv);
	dupcount_free(dc);
	store_close(st);
	control_close(ctl);		/* a request waiting till now is told no reply */
	msg_info("stopped");
	conf_free(&cf);
	return rc;
}
