/*
 * NAME
 *	log 3
 * SUMMARY
 *	diagnostics to stderr or syslog
 * DESCRIPTION
 *	Lines go to stderr as "prog[pid]: level: text" (info has no level
 *	word, as in Postfix's maillog) or to syslog(3) with facility mail.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "log.h"

static const char *log_prog = "idemrelay";
static int log_syslog;
static enum log_level log_min = LOG_LEVEL_INFO;
static long log_pid;		/* the daemon never forks after log_setup() */

/* log_setup - choose target and threshold */
void log_setup(const char *progname, int use_syslog, enum log_level level)
{
	if (progname)
		log_prog = progname;
	log_pid = (long) getpid();
	log_min = level;
	if (log_syslog)
		closelog();
	log_syslog = use_syslog;
	if (log_syslog)
		openlog(log_prog, LOG_PID | LOG_NDELAY, LOG_MAIL);
}

/* log_enabled - would a line at this level be written? */
int log_enabled(enum log_level level)
{
	return level >= log_min;
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
	n = snprintf(line, sizeof(line), "%s[%ld]: %s%s", log_prog,
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
