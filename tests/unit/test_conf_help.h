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
