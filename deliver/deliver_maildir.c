/*
 * NAME
 *	deliver_maildir 3
 * SUMMARY
 *	delivery into a Maildir (upstream.maildir), for development
 * DESCRIPTION
 *	Each message becomes one file, whatever its recipients: written to
 *	DIR/tmp/NAME with CRLF turned into LF (the local mailbox
 *	convention), fsync'ed, then renamed into DIR/new/NAME and the
 *	directory fsync'ed. NAME is "SECONDS.MUSECPpidQqid.hostname", unique
 *	because the QID is. DIR, tmp, new and cur are created if missing.
 *
 *	The rename is this backend's "final dot": the inflight mark is set
 *	just before it, so a daemon that dies between the rename and the
 *	store update does not put a second copy in the Maildir (with the
 *	default upstream.ambiguous).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "../util/dir.h"
#include "../util/log.h"
#include "deliver_impl.h"

#define MAILDIR_CHUNK	65536

/* maildir_dirs - DIR, DIR/tmp, DIR/new, DIR/cur */
static int maildir_dirs(const char *dir, char *why, size_t whylen)
{
	static const char *const sub[] = { "tmp", "new", "cur" };
	char path[4096];
	size_t i;
	int err;

	if ((err = dir_make(dir, 0700)) < 0) {
		snprintf(why, whylen, "cannot create maildir %.300s: %s", dir, strerror(-err));
		return -1;
	}
	for (i = 0; i < 3; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, sub[i]);
		if (mkdir(path, 0700) < 0 && errno != EEXIST) {
			snprintf(why, whylen, "cannot create %.300s: %s", path, strerror(errno));
			return -1;
		}
	}
	return 0;
}

/*
 * write_lf - the message into a new file at path (mode 0600), every CRLF
 * written as LF, fsync'ed: 0, or -1 with errno set
 */
static int write_lf(const char *path, const char *data, size_t len)
{
	char buf[MAILDIR_CHUNK];
	const char *p = data, *end = data + len, *cr;
	FILE *f;
	size_t n;
	int fd, err;

	if ((fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0)
		return -1;
	if ((f = fdopen(fd, "w")) == NULL) {
		close(fd);
		return -1;
	}
	setvbuf(f, buf, _IOFBF, sizeof(buf));
	/*
	 * Up to each CR, and the CR too unless an LF follows it. A short
	 * fwrite is a write(2) that failed, its errno the reason: stdio
	 * dropped that piece, and what follows may all succeed.
	 */
	for (err = 0; !err && (cr = memchr(p, '\r', (size_t) (end - p))) != NULL
	     && cr + 1 < end; p = cr + 1) {
		n = (size_t) (cr - p) + (cr[1] != '\n');
		err = fwrite_unlocked(p, 1, n, f) != n;
	}
	n = (size_t) (end - p);
	err = err || fwrite_unlocked(p, 1, n, f) != n || fflush(f) != 0 || fsync(fd) != 0 ?
	    errno : 0;
	if (fclose(f) != 0 && err == 0)
		err = errno;
	errno = err;
	return err ? -1 : 0;
}

/* unique_name - "sec.MusecPpidQqid.host", host with '/' and ':' escaped */
static void unique_name(char *out, size_t outlen, const char *qid, const char *host)
{
	struct timeval tv;
	size_t n;
	int w;

	gettimeofday(&tv, NULL);
	w = snprintf(out, outlen, "%lld.M%06ldP%ldQ%s.", (long long) tv.tv_sec,
		     (long) tv.tv_usec, (long) getpid(), qid);
	n = w < 0 ? 0 : (size_t) w;
	for (; host && *host && n + 5 < outlen; host++) {
		if (*host == '/')
			n += (size_t) snprintf(out + n, outlen - n, "\\057");
		else if (*host == ':')
			n += (size_t) snprintf(out + n, outlen - n, "\\072");
		else
			out[n++] = *host;
	}
	out[n < outlen ? n : outlen - 1] = 0;
}

/* maildir_one - one message into the Maildir */
static void maildir_one(struct deliver *d, const char *dir, struct deliver_job *j)
{
	char name[512], tmp[4096 + 600], new[4096 + 600], newdir[4096 + 8];
	char why[DELIVER_REPLY_MAX];
	const char *dsn = "4.3.0";
	int err;

	snprintf(j->relay, sizeof(j->relay), "maildir");
	if (maildir_dirs(dir, why, sizeof(why)) < 0)
		goto fail;
	unique_name(name, sizeof(name), j->m.qid, d->c->hostname);
	snprintf(tmp, sizeof(tmp), "%s/tmp/%s", dir, name);
	snprintf(new, sizeof(new), "%s/new/%s", dir, name);
	snprintf(newdir, sizeof(newdir), "%s/new", dir);

	if (write_lf(tmp, j->m.data, j->m.data_len) < 0) {
		if (errno == ENOSPC || errno == EDQUOT)
			dsn = "4.3.1";
		snprintf(why, sizeof(why), "cannot write %.300s: %s", tmp, strerror(errno));
		goto fail_unlink;
	}
	if ((err = deliver_mark(d, j->m.qid, NULL, 0)) != 0) {
		j->no_dot = 1;		/* not renamed: not delivered */
		snprintf(why, sizeof(why), "cannot set the inflight mark: %s", store_strerror(err));
		goto fail_unlink;
	}
	if (rename(tmp, new) < 0) {
		snprintf(why, sizeof(why), "cannot rename %.200s to %.200s: %s", tmp, new,
			 strerror(errno));
		goto fail_unlink;
	}
	if ((err = dir_sync(newdir)) < 0)
		msg_warn("%s: fsync %s: %s", j->m.qid, newdir, strerror(-err));
	snprintf(why, sizeof(why), "delivered to maildir as new/%.400s", name);
	deliver_set_all(j, DELIVER_SENT, "2.0.0", why);
	return;

fail_unlink:
	unlink(tmp);
fail:
	deliver_set_all(j, DELIVER_DEFERRED, dsn, why);
}

/* maildir_send - a batch, one message after the other (no routes: up is the default) */
static void maildir_send(struct deliver *d, const struct conf_upstream *up,
			 struct deliver_job **jobs, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		maildir_one(d, up->maildir, jobs[i]);
}

const struct deliver_transport deliver_maildir = {
	.name = "maildir", .one_thread = 1, .batch = 16, .send = maildir_send
};
