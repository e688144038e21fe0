/*
 * fuzz_conf - the configuration reader (conf/: libconfig's parse, then
 * conf_walk()'s checks) on an arbitrary file. The input is the file,
 * written as idemrelay.conf into a directory of its own; an @include
 * may name only a file of letters and digits, which that directory never
 * holds (so libconfig's error and conf_include_error() run, and no
 * other file is read). Properties (abort()):
 *
 *   - conf_load() gives 0, or -1 with a message (not empty) naming the
 *     file (a bad value is quoted as written, control characters and
 *     all: not checked);
 *   - a file that loads loads again alike: conf_restart_changed() finds
 *     no setting changed between the two loads, and conf_where() and
 *     conf_route_match() answer for every restart-only setting and a
 *     few senders;
 *   - conf_free() leaves nothing behind (LeakSanitizer), loaded or not.
 *
 * libconfig 1.5 (Debian 12) leaks what its scanner was reading when the
 * file is refused for its syntax (a string's buffer, strbuf_append(); a
 * token, libconfig_yylex(): a few octets a refused load, at start or
 * at a SIGHUP): not ours, so not reported (a leak of our own never has
 * libconfig's scanner on its stack).
 */
#include <ctype.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../conf/conf.h"

static const char *const names[] = {
	"hostname", "node", "user", "control", "metrics", "listen", "tls", "auth.users",
	"store", "keys", "upstream", "routes", "limits.hard_errors", "retry.first", NULL
};

static const char *const senders[] = { "", "a@example.org", "x@y", "\xc3\xa9@b.c", NULL };

static char dir[64], path[96];

const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
	return "leak:strbuf_append\nleak:libconfig_yylex\n";
}

/* cleanup - the file and its directory go at exit */
static void cleanup(void)
{
	unlink(path);
	rmdir(dir);
}

/* include_ok - every @include names a file of letters and digits only */
static int include_ok(const char *s)
{
	const char *p = s;

	while ((p = strstr(p, "@include")) != NULL) {
		p += 8;
		p += strspn(p, " \t");
		if (*p++ != '"')
			continue;	/* no file named: a syntax error */
		while (isalnum((unsigned char) *p))
			p++;
		if (*p != '"')
			return 0;
	}
	return 1;
}

/* said - conf_load()'s message: not empty, with the file in it */
static void said(const char *err)
{
	if (err[0] == 0 || strstr(err, "idemrelay.conf") == NULL)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char text[64 * 1024];
	struct conf a, b;
	char err[1024], where[512];
	const char *changed[CONF_RESTART_MAX + 1];
	FILE *fp;
	size_t i, k;

	if (size >= sizeof(text))
		return 0;
	memcpy(text, data, size);
	text[size] = 0;
	if (strlen(text) != size || !include_ok(text))
		return 0;	/* libconfig reads a file as text: no NUL */
	if (dir[0] == 0) {
		snprintf(dir, sizeof(dir), "/tmp/fuzz_conf.%ld", (long) getpid());
		if (mkdir(dir, 0700) < 0)
			abort();
		snprintf(path, sizeof(path), "%s/idemrelay.conf", dir);
		atexit(cleanup);
	}
	if ((fp = fopen(path, "w")) == NULL || fwrite(text, 1, size, fp) != size || fclose(fp))
		abort();
	if (conf_load(&a, path, err, sizeof(err)) != 0) {
		said(err);
		conf_free(&a);
		return 0;
	}
	if (conf_load(&b, path, err, sizeof(err)) != 0)
		abort();		/* the same file */
	if (conf_restart_changed(&a, &b, changed, CONF_RESTART_MAX + 1) != 0)
		abort();
	for (i = 0; names[i]; i++)
		if (conf_where(&a, names[i], where, sizeof(where)) == NULL)
			abort();
	for (i = 0; senders[i]; i++)
		for (k = 0; k <= a.n_listen; k++)
			(void) conf_route_match(&a, i % 2 ? "user" : NULL, senders[i],
						k < a.n_listen ? &a.listen[k] : NULL);
	conf_free(&a);
	conf_free(&b);
	return 0;
}
