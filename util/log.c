/*
 * NAME
 *	log 3
 * SUMMARY
 *	diagnostics to stderr or syslog, in Postfix's form
 * DESCRIPTION
 *	A line names the program and the service that wrote it, as Postfix's
 *	do ("idemrelay/smtpd[PID]: text", as "postfix/smtpd[PID]: text"), so
 *	that Postfix's log parsers (pflogsumm) read idemrelay's log. The
 *	service is the calling thread's, named with log_service(): the
 *	event loop is smtpd, the delivery threads are smtp, and so on; a
 *	thread that names none has the process's default service (master
 *	in the daemon); with none, lines say "PROG[PID]:". msg_info_as() writes one line in
 *	another service's name (the qmgr line of a message just queued).
 *	Information has no level word, as in Postfix's maillog.
 *
 *	With log_stamp() on, a stderr line starts with its time in RFC 3339
 *	UTC, to the microsecond, and the host name, as a syslog daemon
 *	writes its files ("TIME HOST idemrelay/smtpd[PID]: text"), so that
 *	a log file written that way can be read after the fact, by people
 *	and by parsers; the daemon turns it off where the journal stamps
 *	lines itself (JOURNAL_STREAM, set by systemd).
 *
 *	syslog goes straight to the /dev/log socket, facility mail, with the
 *	service in the tag: syslog(3) has one tag per process. With no
 *	/dev/log (a container without a syslog daemon), where syslog(3)
 *	would drop every line without a word, lines go to stderr instead,
 *	and the first says why.
 */
#include <paths.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#define LOG_LINE_MAX	2048		/* one line, its newline included */

#define LOG_DEVLOG	_PATH_LOG	/* "/dev/log" */

static const char *log_prog = "idemrelay";
static int log_syslog;
static enum log_level log_min = LOG_LEVEL_INFO;
static char log_pid_text[32];	/* "[PID]: ", once log_setup() ran (no fork after it) */
static int log_stamped;		/* stderr lines start with the time and host */
static int log_fell_back;	/* syslog was asked for, /dev/log is missing: said once */
static char log_host[256] = "localhost";
static const char *log_svc_default;	/* a thread's that names none; NULL: none */
static __thread const char *log_svc;	/* this thread's service */

static int log_dev_fd = -1;	/* a datagram socket for /dev/log */
static const struct sockaddr_un log_dev = { .sun_family = AF_UNIX, .sun_path = LOG_DEVLOG };

/* log_syslog_reachable - is there a /dev/log socket for syslog to write to? */
int log_syslog_reachable(void)
{
	struct stat st;

	return stat(LOG_DEVLOG, &st) == 0 && S_ISSOCK(st.st_mode);
}

/* log_stamp - stderr lines start with their RFC 3339 UTC time and host, or not */
void log_stamp(int on)
{
	log_stamped = on;
}

/* log_service - name this thread's service ("smtpd", "smtp", ...); the old name */
const char *log_service(const char *name)
{
	const char *old = log_svc;

	log_svc = name;
	return old;
}

/* log_default_service - the service of threads that name none; NULL: none */
void log_default_service(const char *name)
{
	log_svc_default = name;
}

/* log_setup - choose target and threshold */
void log_setup(const char *progname, int use_syslog, enum log_level level)
{
	char *dot;

	if (progname)
		log_prog = progname;
	snprintf(log_pid_text, sizeof(log_pid_text), "[%ld]: ", (long) getpid());
	log_min = level;
	if (gethostname(log_host, sizeof(log_host)) < 0 || log_host[0] == 0)
		snprintf(log_host, sizeof(log_host), "localhost");
	log_host[sizeof(log_host) - 1] = 0;
	if ((dot = strchr(log_host, '.')) != NULL)
		*dot = 0;		/* as a syslog daemon writes it */
	log_syslog = use_syslog && log_syslog_reachable();
	if (log_syslog && log_dev_fd < 0) {
		/* each line addressed: a restarted syslog daemon is found again */
		if ((log_dev_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
			log_syslog = 0;
	}
	if (use_syslog && !log_syslog && !log_fell_back++)
		msg_warn("log.target = \"syslog\", but there is no %s (no syslog daemon"
			 " here?): logging to stderr", LOG_DEVLOG);
}

/* log_enabled - would a line at this level be written? */
int log_enabled(enum log_level level)
{
	return level >= log_min;
}

/*
 * log_date - the time ts (now) up to the second as the target writes it:
 * syslog's local "Mmm dd hh:mm:ss ", stderr's UTC "YYYY-MM-DDThh:mm:ss".
 * Formatted once a second in each thread (gmtime or localtime and strftime
 * were a fifth of a line's cost).
 */
static const char *log_date(struct timespec *ts, size_t *len)
{
	static __thread time_t sec = -1;
	static __thread int local;	/* the one kept is syslog's */
	static __thread char date[32];
	static __thread size_t date_len;
	struct tm tm;

	clock_gettime(CLOCK_REALTIME, ts);
	if (ts->tv_sec != sec || local != log_syslog) {
		if (log_syslog)
			localtime_r(&ts->tv_sec, &tm);
		else
			gmtime_r(&ts->tv_sec, &tm);
		date_len = strftime(date, sizeof(date), log_syslog ? "%b %e %H:%M:%S "
				    : "%Y-%m-%dT%H:%M:%S", &tm);
		sec = ts->tv_sec;
		local = log_syslog;
	}
	*len = date_len;
	return date;
}

/* log_time - "2026-12-04T21:59:04.123456Z " into buf (40 octets at least); its length */
static int log_time(char *buf)
{
	struct timespec ts;
	size_t len;
	const char *date = log_date(&ts, &len);
	long us;
	size_t n;
	int i;

	memcpy(buf, date, len);
	n = len;
	buf[n++] = '.';
	for (us = ts.tv_nsec / 1000, i = 5; i >= 0; i--, us /= 10)
		buf[n + (size_t) i] = (char) ('0' + us % 10);
	n += 6;
	buf[n++] = 'Z';
	buf[n++] = ' ';
	return (int) n;
}

/* log_put - append s to line (size LOG_LINE_MAX) at *n, as far as it fits */
static void log_put(char *line, int *n, const char *s)
{
	size_t k = strlen(s), room = LOG_LINE_MAX - 2 - (size_t) *n;

	if (k > room)
		k = room;
	memcpy(line + *n, s, k);
	*n += (int) k;
}

/*
 * log_vwrite - format one line and write it with a single call: to
 * syslog "<PRI>Mmm dd hh:mm:ss PROG/SVC[PID]: text" (RFC 3164, what
 * syslog(3) sends), to stderr "[TIME HOST ]PROG/SVC[PID]: text"
 */
static void log_vwrite(enum log_level level, const char *svc, const char *tag,
		       const char *fmt, va_list ap)
{
	static const int prio[] = { LOG_DEBUG, LOG_INFO, LOG_WARNING, LOG_ERR };
	char line[LOG_LINE_MAX], pid[32];
	struct timespec ts;
	size_t len;
	int n = 0;

	if (level < log_min)
		return;
	if (svc == NULL)
		svc = log_svc ? log_svc : log_svc_default;
	if (log_syslog) {
		n = snprintf(line, sizeof(line), "<%d>", LOG_MAIL | prio[level]);
		log_put(line, &n, log_date(&ts, &len));
	} else if (log_stamped) {
		n = log_time(line);
		log_put(line, &n, log_host);
		log_put(line, &n, " ");
	}
	/* "PROG/SVC[PID]: TAG: ", put together without printf (one was a third of a line) */
	log_put(line, &n, log_prog);
	if (svc) {
		log_put(line, &n, "/");
		log_put(line, &n, svc);
	}
	if (log_pid_text[0] == 0)
		snprintf(pid, sizeof(pid), "[%ld]: ", (long) getpid());
	log_put(line, &n, log_pid_text[0] ? log_pid_text : pid);
	if (tag) {
		log_put(line, &n, tag);
		log_put(line, &n, ": ");
	}
	n += vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
	if ((size_t) n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	if (log_syslog) {
		(void) !sendto(log_dev_fd, line, n, MSG_NOSIGNAL, (const struct sockaddr *) &log_dev,
			       sizeof(log_dev));
		return;
	}
	line[n++] = '\n';
	(void) !write(STDERR_FILENO, line, n);
}

/* msg_debug ... msg_panic - one line at a level; fatal exits, panic aborts (log.h says when) */
#define LOG_FN(name, level, tag, then) \
void name(const char *fmt, ...) \
{ \
	va_list ap; \
	va_start(ap, fmt); \
	log_vwrite(level, NULL, tag, fmt, ap); \
	va_end(ap); \
	then; \
}

LOG_FN(msg_debug, LOG_LEVEL_DEBUG, "debug", (void) 0)
LOG_FN(msg_info, LOG_LEVEL_INFO, NULL, (void) 0)
LOG_FN(msg_warn, LOG_LEVEL_WARN, "warning", (void) 0)
LOG_FN(msg_error, LOG_LEVEL_ERROR, "error", (void) 0)
LOG_FN(msg_fatal, LOG_LEVEL_ERROR, "fatal", exit(1))
LOG_FN(msg_panic, LOG_LEVEL_ERROR, "panic", abort())

/* msg_info_as - one line of information in another service's name */
void msg_info_as(const char *service, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vwrite(LOG_LEVEL_INFO, service, NULL, fmt, ap);
	va_end(ap);
}
