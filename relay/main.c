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
#include "deliver.h"
#include "qid.h"
#include "server.h"

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

/* usage - say how to run it */
static void usage(void)
{
	fprintf(stderr, "usage: idemrelay [-t] [-c config]\n");
	exit(1);
}

int main(int argc, char **argv)
{
	const char *path = NULL;
	struct conf cf;
	struct store *st;
	struct server *srv;
	struct deliver *dl;
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

	mkdir_parents(cf.store.path);
	if (store_open(&st, cf.store.path, cf.store.map_size, err, sizeof(err)) != 0)
		msg_fatal("store %s: %s", cf.store.path, err);
	if (store_last_qid(st, last) == 0)
		qid_seed(last);

	srv = server_new(&cf, st);
	server_listen(srv);		/* signals are blocked from here: threads inherit that */
	dl = deliver_start(&cf, st);
	server_set_deliver(srv, dl);
	msg_info("started: store=%s upstream=%s", cf.store.path,
		 cf.upstream.maildir ? cf.upstream.maildir : cf.upstream.hosts[0].host);
	rc = server_run(srv);
	deliver_stop(dl);
	server_free(srv);
	store_close(st);
	msg_info("stopped");
	conf_free(&cf);
	return rc;
}
