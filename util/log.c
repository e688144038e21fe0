/*
 * NAME
 *	log 3
 * SUMMARY
 *	diagnostics to stderr or syslog
 * DESCRIPTION
 *	Lines go to stderr as "prog[pid]: level: text" (info has no level
 *	word, as in Postfix's maillog) or to syslog(3) with facility mail.
 *
 *	With log_stamp() on, a stderr line starts with its time in RFC 3339
 *	UTC, to the microsecond, so that a log file written that way can be
 *	read after the fact; the daemon turns it off where the journal
 *	stamps lines itself (JOURNAL_STREAM, set by systemd).
 *
 *	syslog(3) with no /dev/log (a container without a syslog daemon)
 *	drops every line without a word: then lines go to stderr instead, and
 *	the first says why.
 */
#include <paths.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#define LOG_DEVLOG	_PATH_LOG	/* "/dev/log" */

static const char *log_prog = "idemrelay";
static int log_syslog;
static enum log_level log_min = LOG_LEVEL_INFO;
static long log_pid;		/* the daemon never forks after log_setup() */
static int log_stamped;		/* stderr lines start with the time */
static int log_fell_back;	/* syslog was asked for, /dev/log is missing: said once */

/* log_syslog_reachable - is there a /dev/log socket for syslog(3) to write to? */
int log_syslog_reachable(void)
{
	struct stat st;

	return stat(LOG_DEVLOG, &st) == 0 && S_ISSOCK(st.st_mode);
}

/* log_stamp - stderr lines start with their RFC 3339 UTC time, or not */
void log_stamp(int on)
{
	log_stamped = on;
}

/* log_setup - choose target and threshold */
void log_setup(const char *progname, int use_syslog, enum log_level level)
{
	if (progname)
		log_prog = progname;
	log_pid = (long) getpid();
	log_min = level;
	if (log_syslog)
		closelog();
	log_syslog = use_syslog && log_syslog_reachable();
	if (log_syslog)
		openlog(log_prog, LOG_PID | LOG_NDELAY, LOG_MAIL);
	else if (use_syslog && !log_fell_back++)
		msg_warn("log.target = \"syslog\", but there is no %s (no syslog daemon"
			 " here?): logging to stderr", LOG_DEVLOG);
}

/* log_enabled - would a line at this level be written? */
int log_enabled(enum log_level level)
{
	return level >= log_min;
}

/* log_time - "2026-12-04T21:59:04.123456Z " into buf (len >= 40); its length */
static int log_time(char *buf, size_t len)
{
	struct timespec ts;
	struct tm tm;
	size_t n;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
	return (int) n + snprintf(buf + n, len - n, ".%06ldZ ", ts.tv_nsec / 1000);
}

/* log_vwrite - format one line and write it with a single call */
static void log_vwrite(enum log_level level, const char *tag, const char *fmt, va_list ap)
{
	static const int prio[] = { LOG_DEBUG, LOG_INFO, LOG_WARNING, LOG_ERR };
	char line[2048];
	int n;

	if (level < log_min)
		return;
	if (log_syslog) {
		n = vsnprintf(line, sizeof(line), fmt, ap);
		(void) n;
		if (tag)
			syslog(prio[level], "%s: %s", tag, line);
		else
			syslog(prio[level], "%s", line);
		return;
	}
	n = log_stamped ? log_time(line, 40) : 0;
	n += snprintf(line + n, sizeof(line) - n, "%s[%ld]: %s%s", log_prog,
		      log_pid ? log_pid : (long) getpid(),
		      tag ? tag : "", tag ? ": " : "");
	if (n < 0 || (size_t) n >= sizeof(line) - 2)
		n = 0;
	n += vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
	if ((size_t) n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	(void) !write(STDERR_FILENO, line, n);
}

#define LOG_FN(name, level, tag) \
void name(const char *fmt, ...) \
{ \
	va_list ap; \
	va_start(ap, fmt); \
	log_vwrite(level, tag, fmt, ap); \
	va_end(ap); \
}

LOG_FN(msg_debug, LOG_LEVEL_DEBUG, "debug")
LOG_FN(msg_info, LOG_LEVEL_INFO, NULL)
LOG_FN(msg_warn, LOG_LEVEL_WARN, "warning")
LOG_FN(msg_error, LOG_LEVEL_ERROR, "error")

/* msg_fatal - report a start-up or configuration problem and exit */
void msg_fatal(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vwrite(LOG_LEVEL_ERROR, "fatal", fmt, ap);
	va_end(ap);
	exit(1);
}

/* msg_panic - report a broken invariant and abort */
void msg_panic(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vwrite(LOG_LEVEL_ERROR, "panic", fmt, ap);
	va_end(ap);
	abort();
}
