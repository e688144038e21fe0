/*
 * test_conf_help - what the configuration tests share: conf_load() on
 * text written to a fresh temporary file, and a teardown that removes
 * the last one (tmp_path, which error messages name).
 */
#ifndef TESTS_UNIT_TEST_CONF_HELP_H
#define TESTS_UNIT_TEST_CONF_HELP_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "../../conf/conf.h"

static char tmp_path[64];

/* write_conf - put text in a fresh temporary file, return its name */
static inline const char *write_conf(const char *text)
{
	int fd;

	if (tmp_path[0])
		unlink(tmp_path);
	strcpy(tmp_path, "/tmp/test_conf.XXXXXX");
	fd = mkstemp(tmp_path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t) strlen(text));
	close(fd);
	return tmp_path;
}

/* load_text - conf_load() on text; returns its result */
static inline int load_text(struct conf *c, const char *text, char *err, size_t errlen)
{
	return conf_load(c, write_conf(text), err, errlen);
}

/*
 * check_conf_error - text is refused: conf_load() -1, its message starting
 * with want ("%s": the file), and nothing left behind (freeing it is safe)
 */
static inline void check_conf_error(const char *name, const char *text, const char *want_fmt)
{
	struct conf c;
	char err[512], want[512];
	int rc;

	memset(err, 'x', sizeof(err));
	rc = load_text(&c, text, err, sizeof(err));
	snprintf(want, sizeof(want), want_fmt, tmp_path);
	if (rc != -1)
		fail_msg("%s: conf_load = %d, want -1", name, rc);
	if (strncmp(err, want, strlen(want)) != 0)
		fail_msg("%s:\n  got  \"%s\"\n  want \"%s...\"", name, err, want);
	assert_null(c.hostname);
	assert_null(c.listen);
	conf_free(&c);
}

/* cleanup - a teardown: remove the last temporary file */
static inline int cleanup(void **state)
{
	(void) state;
	if (tmp_path[0])
		unlink(tmp_path);
	tmp_path[0] = 0;
	return 0;
}

#endif
