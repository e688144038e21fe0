/*
 * test_log - util/log.c's stderr lines, byte for byte: "TIME HOST
 * PROG/SVC[PID]: TAG: text" with the time RFC 3339 UTC to the
 * microsecond, or without time and host; the service a thread names, the
 * default one, or none. The time's date part is formatted once a second
 * in each thread: a line of the next second, or of another thread, must
 * carry its own.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <fcntl.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "../../util/log.h"

static int saved_stderr = -1;
static char path[] = "/tmp/test_log_XXXXXX";

/* capture - stderr into a fresh temporary file */
static int capture(void **state)
{
	int fd;

	(void) state;
	assert_true((fd = mkstemp(path)) >= 0);
	saved_stderr = dup(STDERR_FILENO);
	assert_true(dup2(fd, STDERR_FILENO) >= 0);
	close(fd);
	log_setup("idemrelay", 0, LOG_LEVEL_INFO);
	return 0;
}

/* restore - stderr back, the file removed */
static int restore(void **state)
{
	(void) state;
	dup2(saved_stderr, STDERR_FILENO);
	close(saved_stderr);
	unlink(path);
	strcpy(path, "/tmp/test_log_XXXXXX");
	return 0;
}

/* captured - what was written so far (static buffer) */
static const char *captured(void)
{
	static char buf[65536];
	ssize_t n;
	int fd;

	assert_true((fd = open(path, O_RDONLY)) >= 0);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	assert_true(n >= 0);
	buf[n] = 0;
	return buf;
}

/* host - as the log writes it: up to the first dot */
static void host(char *buf, size_t len)
{
	assert_int_equal(gethostname(buf, len), 0);
	buf[len - 1] = 0;
	if (strchr(buf, '.'))
		*strchr(buf, '.') = 0;
}

/*
 * stamp_ok - line starts with a time "YYYY-MM-DDTHH:MM:SS.uuuuuuZ " within
 * [lo, hi] (seconds since the epoch); its length, 0 if not
 */
static size_t stamp_ok(const char *line, time_t lo, time_t hi, time_t *sec)
{
	struct tm tm;
	const char *p;
	int i;

	memset(&tm, 0, sizeof(tm));
	if ((p = strptime(line, "%Y-%m-%dT%H:%M:%S", &tm)) == NULL || p - line != 19)
		return 0;
	if (p[0] != '.' || p[7] != 'Z' || p[8] != ' ')
		return 0;
	for (i = 1; i <= 6; i++)
		if (p[i] < '0' || p[i] > '9')
			return 0;
	*sec = timegm(&tm);
	return *sec >= lo && *sec <= hi ? 28 : 0;
}

/* the line's parts after the time and host, with and without a service and a tag */
static void test_unstamped_lines(void **state)
{
	char want[512];

	(void) state;
	log_stamp(0);
	log_service(NULL);
	log_default_service(NULL);
	msg_info("plain %d", 7);
	log_service("smtpd");
	msg_warn("careful");
	msg_info_as("qmgr", "%s: removed", "01ABCDEFGHIJ");
	log_service(NULL);
	log_default_service("master");
	msg_error("broken");
	log_default_service(NULL);
	snprintf(want, sizeof(want),
		 "idemrelay[%ld]: plain 7\n"
		 "idemrelay/smtpd[%ld]: warning: careful\n"
		 "idemrelay/qmgr[%ld]: 01ABCDEFGHIJ: removed\n"
		 "idemrelay/master[%ld]: error: broken\n",
		 (long) getpid(), (long) getpid(), (long) getpid(), (long) getpid());
	assert_string_equal(captured(), want);
}

/* a stamped line: its own time, to the microsecond, and the host */
static void test_stamped_line(void **state)
{
	char h[256], want[512];
	const char *out;
	time_t lo = time(NULL), sec;
	size_t k;

	(void) state;
	host(h, sizeof(h));
	log_stamp(1);
	log_service("smtp");
	msg_info("to=<a@b>, status=sent");
	log_stamp(0);
	out = captured();
	assert_true((k = stamp_ok(out, lo, time(NULL), &sec)) > 0);
	snprintf(want, sizeof(want), "%s idemrelay/smtp[%ld]: to=<a@b>, status=sent\n", h,
		 (long) getpid());
	assert_string_equal(out + k, want);
}

/* wait_next_second - sleep until just past the next second */
static void wait_next_second(void)
{
	struct timespec ts, d;

	clock_gettime(CLOCK_REALTIME, &ts);
	d.tv_sec = 0;
	d.tv_nsec = 1000000000L - ts.tv_nsec + 20000000L;
	if (d.tv_nsec >= 1000000000L) {
		d.tv_sec = 1;
		d.tv_nsec -= 1000000000L;
	}
	nanosleep(&d, NULL);
}

/* other_thread - one line from a thread of its own */
static void *other_thread(void *arg)
{
	(void) arg;
	log_service("other");
	msg_info("from the other thread");
	return NULL;
}

/* a line of the next second carries that second, in this thread and another one */
static void test_stamp_moves_on(void **state)
{
	const char *out, *second;
	time_t lo, sec1, sec2, sec3;
	pthread_t t;
	size_t k;

	(void) state;
	log_stamp(1);
	log_service("smtpd");
	lo = time(NULL);
	msg_info("one");
	wait_next_second();
	msg_info("two");
	wait_next_second();
	assert_int_equal(pthread_create(&t, NULL, other_thread, NULL), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	log_stamp(0);
	out = captured();
	assert_true((k = stamp_ok(out, lo, time(NULL), &sec1)) > 0);
	assert_non_null(strstr(out, "]: one\n"));
	assert_non_null(second = strchr(out, '\n'));
	assert_true(stamp_ok(second + 1, lo, time(NULL), &sec2) > 0);
	assert_non_null(strstr(second, "]: two\n"));
	assert_non_null(second = strchr(second + 1, '\n'));
	assert_true(stamp_ok(second + 1, lo, time(NULL), &sec3) > 0);
	assert_non_null(strstr(second, "idemrelay/other["));
	assert_true(sec2 > sec1);
	assert_true(sec3 > sec2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_unstamped_lines, capture, restore),
		cmocka_unit_test_setup_teardown(test_stamped_line, capture, restore),
		cmocka_unit_test_setup_teardown(test_stamp_moves_on, capture, restore),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
