/*
 * NAME
 *	ctl 3h
 * SUMMARY
 *	what idemrelayctl's files share
 * DESCRIPTION
 *	ctl/ctl.c is the program: options, the control socket client, cat,
 *	and the actions (flush, retry, drop, hold, release, forget; those
 *	but flush and retry run by queue/queue_admin.c when no daemon
 *	does). ctl/ctl_show.c reads the store for queue, show and stats. Both print for people, or with
 *	--json one JSON object per run for scripts; every failure goes
 *	through ctl_fail(), which exits 1.
 */
#ifndef CTL_CTL_H
#define CTL_CTL_H

#include <stdint.h>

#include "../conf/conf.h"
#include "../queue/queue_admin.h"
#include "../store/store.h"
#include "../util/buf.h"

struct ctl {
	struct conf cf;
	const char *cmd;		/* the command: queue, show, ... */
	int json;			/* --json */
	const char *user;		/* -u: AUTH user, or NULL */
	const char *from, *to;		/* --from, --to: patterns, or NULL */
	const char *forget;		/* --force or --drop, or NULL */
	const char *list, *done;	/* a selection's reply list, what it did ("held", "on hold") */
	struct store *st;		/* owned, opened on demand */
	int64_t now;			/* microseconds, one clock for the whole run */
	int silent;			/* the daemon did not answer a question */
};

/* ctl_fail - say why (stderr, and stdout as JSON with --json), exit 1 */
void ctl_fail(struct ctl *x, const char *fmt, ...)
	__attribute__((format(printf, 2, 3), noreturn));

/* ctl_store - the store, opened read-only; fails with "no store at PATH" */
struct store *ctl_store(struct ctl *x);
/* ctl_store_try - ctl_store() that says why in err and returns NULL instead of failing */
struct store *ctl_store_try(struct ctl *x, char *err, size_t errlen);

/*
 * ctl_request - one request to the daemon: 0 and its reply; -1 (why) if
 * none listens, -2 (why) if one does that this user may not reach. A
 * reply is waited for as long as the daemon says it is at it, and for
 * 10 s of silence (one stopped, hung, or not serving yet); then an
 * action fails the run, and a question (stats, count) is -1 (why) and
 * the daemon is asked nothing more.
 */
int ctl_request(struct ctl *x, const char *line, int question, struct buf *reply, char *why,
		size_t whylen);

/* ctl_key_hashes - the key index hashes an operator's KEY may stand for */
size_t ctl_key_hashes(const char *key, uint8_t out[QUEUE_ADMIN_MAX_KEYS][STORE_HASH_LEN]);

/* a command: its argument, or NULL; the exit status */
typedef int ctl_run(struct ctl *x, const char *arg);

/* ctl_show.c */
ctl_run ctl_queue, ctl_show, ctl_stats;

#endif
