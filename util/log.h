/*
 * NAME
 *	log 3h
 * SUMMARY
 *	diagnostics in tiers: info, warn, fatal, panic
 * DESCRIPTION
 *	One line per event, written to stderr or syslog, in Postfix's form:
 *	"PROG/SERVICE[PID]: text", the service the calling thread's. msg_fatal() is for
 *	start-up and configuration problems only; msg_panic() is for broken
 *	invariants. Both exit. Thread-safe: each line is written with one call.
 */
#ifndef UTIL_LOG_H
#define UTIL_LOG_H

enum log_level { LOG_LEVEL_DEBUG, LOG_LEVEL_INFO, LOG_LEVEL_WARN, LOG_LEVEL_ERROR };

void log_setup(const char *progname, int use_syslog, enum log_level level);
void log_stamp(int on);			/* stderr lines start with RFC 3339 UTC time, host */
void log_default_service(const char *name);	/* of threads that name none */
const char *log_service(const char *name);	/* this thread's ("smtpd"); the old one */
int log_syslog_reachable(void);		/* /dev/log is a socket */
int log_enabled(enum log_level level);

void msg_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void msg_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void msg_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void msg_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void msg_info_as(const char *service, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void msg_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void msg_panic(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif
