/*
 * NAME
 *	check 3
 * SUMMARY
 *	start-up checks shared by `idemrelay -t` and the start itself
 * DESCRIPTION
 *	See check.h. Every check only looks: files are opened for reading,
 *	directories are stat()ed and access()ed, ports are bound and let go
 *	at once; nothing is created. The start runs the same checks first,
 *	so what -t said is what the start says, and the later steps (which
 *	still stop on an error) are left with races only.
 *
 *	Run as root with a user to become, the TLS certificate and key, the
 *	AUTH users file and upstream tls_ca files are read, and a control
 *	socket's directory that is there is looked at, with that user's ids,
 *	as the daemon uses them after the drop (the first three the start
 *	reads as root, and SIGHUP again as the user).
 *
 *	Directories the start creates (the store, the Maildir, the control
 *	socket's directory, and above them, mkdir -p style) are checked
 *	where they would be created: the nearest existing ancestor must be
 *	a writable directory. A PostgreSQL store is connected to as a client
 *	(no node registered, the schema neither created nor changed).
 * DIAGNOSTICS
 *	"FILE:LINE: setting: what is wrong: what to do", one per problem.
 */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "../conf/conf.h"
#include "../tls/tls_client.h"
#include "../relay/auth.h"
#include "../store/store.h"
#include "../tls/tls.h"
#include "../util/buf.h"
#include "../util/listen.h"
#include "../util/log.h"
#include "check.h"
#include "control.h"

#define CHECK_PATH_MAX	4096

/* one run: where problems go, and how many there were */
struct check {
	const struct conf *c;
	check_report report;
	int n;
};

/* check_fail - report "WHERE: problem" for setting; setting NULL: problem says where */
static void check_fail(struct check *k, const char *setting, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void check_fail(struct check *k, const char *setting, const char *fmt, ...)
{
	char where[512], msg[1024], line[1600];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (setting != NULL)
		snprintf(line, sizeof(line), "%s: %s",
			 conf_where(k->c, setting, where, sizeof(where)), msg);
	k->report(setting ? line : msg);
	k->n++;
}

/*
 * check_tls - tls.cert and tls.key: readable (by user, if not NULL: with
 * its ids, check_as()), PEM, and one pair
 */
static void check_tls(struct check *k, const char *user)
{
	const struct conf *c = k->c;
	struct tls *t = NULL;
	char err[512];

	if (c->tls_cert == NULL)
		return;
	if (euidaccess(c->tls_cert, R_OK) < 0) {
		check_fail(k, "tls.cert", "cannot read %s: %s: point it at the server's PEM "
			   "certificate (chain) file%s%s", c->tls_cert, strerror(errno),
			   user ? ", readable by user " : "", user ? user : "");
		return;
	}
	if (euidaccess(c->tls_key, R_OK) < 0) {
		check_fail(k, "tls.key", "cannot read %s: %s: point it at the certificate's "
			   "PEM private key file%s%s", c->tls_key, strerror(errno),
			   user ? ", readable by user " : "", user ? user : "");
		return;
	}
	if (tls_new(&t, c->tls_cert, c->tls_key, c->tls_groups, err, sizeof(err)) == 0) {
		tls_free(t);
		return;
	}
	/*
	 * tls_new says which file: "cert X: ...", "key X: ...", "key X does not
	 * match"; OpenSSL finds most mismatches as it loads the key
	 */
	if (strncmp(err, "groups ", 7) == 0)
		check_fail(k, "tls.groups", "%s: want names OpenSSL knows, separated by colons "
			   "(X25519:P-256:P-384)", err);
	else if (strncmp(err, "key ", 4) == 0 && (strstr(err, " does not match cert ")
					     || strstr(err, "key values mismatch")))
		check_fail(k, "tls.key", "%s is not the private key of the certificate in "
			   "tls.cert (%s): give the key the certificate was issued for",
			   c->tls_key, c->tls_cert);
	else if (strncmp(err, "key ", 4) == 0)
		check_fail(k, "tls.key", "%s: want a PEM private key, unencrypted", err);
	else
		check_fail(k, "tls.cert", "%s: want a PEM file with the server's certificate first, "
			   "then its chain", err);
}

/* check_users - auth.users: readable (by user, as check_tls()) and every line name:hash */
static void check_users(struct check *k, const char *user)
{
	struct auth_users *u = NULL;
	char err[512];

	if (k->c->auth_users == NULL)
		return;
	if (auth_users_load(&u, k->c->auth_users, err, sizeof(err)) < 0)
		check_fail(k, "auth.users", "%s: want a %sfile of name:hash lines (openssl "
			   "passwd -6)%s%s", err, user ? "" : "readable ",
			   user ? ", readable by user " : "", user ? user : "");
	auth_users_free(u);
}

/* check_user - user: exists, and can be become */
static void check_user(struct check *k)
{
	const char *name = k->c->user;
	struct passwd *pw;

	if (name == NULL)
		return;
	errno = 0;
	if ((pw = getpwnam(name)) == NULL)
		check_fail(k, "user", "no such user \"%s\": create it (useradd --system "
			   "--no-create-home %s) or remove the setting", name, name);
	else if (getuid() != 0 && getuid() != pw->pw_uid)
		check_fail(k, "user", "becoming \"%s\" needs idemrelay to start as root: start "
			   "it as root or as %s, or remove the setting", name, name);
}

/*
 * check_kernel_fs - the name of a kernel file system dir is on (proc,
 * sysfs, ...), where no store or Maildir can be made; NULL if none.
 * Root passes access(2) there, so -t would say OK and the start fail.
 */
static const char *check_kernel_fs(const char *dir)
{
	static const struct {
		unsigned long magic;
		const char *name;
	} kernel[] = {
		{0x9fa0, "proc"}, {0x62656572, "sysfs"}, {0x1cd1, "devpts"},
		{0x27e0eb, "cgroup"}, {0x63677270, "cgroup2"}, {0x64626720, "debugfs"},
		{0x73636673, "securityfs"}, {0xcafe4a11, "bpf"}, {0x74726163, "tracefs"},
	};
	struct statfs fs;
	size_t i;

	if (statfs(dir, &fs) < 0)
		return NULL;
	for (i = 0; i < sizeof(kernel) / sizeof(kernel[0]); i++)
		if ((unsigned long) fs.f_type == kernel[i].magic)
			return kernel[i].name;
	return NULL;
}

/*
 * check_dir - a directory the start creates (mkdir -p) and writes in:
 * it, or its nearest existing ancestor, is a directory we may write
 */
static void check_dir(struct check *k, const char *setting, const char *path)
{
	char dir[CHECK_PATH_MAX], *slash;
	const char *kfs;
	struct statvfs vfs;
	struct stat st;

	if (strlen(path) >= sizeof(dir)) {
		check_fail(k, setting, "path longer than %zu characters", sizeof(dir) - 1);
		return;
	}
	snprintf(dir, sizeof(dir), "%s", path);
	while (stat(dir, &st) < 0) {
		if (errno != ENOENT && errno != ENOTDIR) {
			check_fail(k, setting, "%s: %s", dir, strerror(errno));
			return;
		}
		if ((slash = strrchr(dir, '/')) == NULL)
			snprintf(dir, sizeof(dir), ".");
		else
			slash[slash == dir] = 0;
	}
	if (!S_ISDIR(st.st_mode)) {
		if (strcmp(dir, path) == 0)
			check_fail(k, setting, "%s is not a directory: remove it or choose another "
				   "path", path);
		else
			check_fail(k, setting, "%s is under %s, which is not a directory: choose a "
				   "path in a directory", path, dir);
		return;
	}
	if ((kfs = check_kernel_fs(dir)) != NULL) {
		check_fail(k, setting, "%s is on %s, a kernel file system: choose a path on a "
			   "disk", path, kfs);
		return;
	}
	if (statvfs(dir, &vfs) == 0 && (vfs.f_flag & ST_RDONLY)) {
		check_fail(k, setting, "%s is on a file system mounted read-only: choose "
			   "another path, or remount it", path);
		return;
	}
	if (euidaccess(dir, W_OK | X_OK) < 0 && strcmp(dir, path) == 0)
		check_fail(k, setting, "%s is not writable by uid %u: %s: make it writable "
			   "(chown, chmod) or choose another path", dir, (unsigned) geteuid(),
			   strerror(errno));
	else if (euidaccess(dir, W_OK | X_OK) < 0)
		check_fail(k, setting, "%s would be created in %s, which is not writable by uid "
			   "%u: %s: make it writable (chown, chmod) or choose another path", path,
			   dir, (unsigned) geteuid(), strerror(errno));
}

/* root's ids, while check_as() has taken the configured user's */
struct check_ids {
	const char *user;		/* whose ids were taken, or NULL: none */
	gid_t gid, *groups;
	int n;
};

/*
 * check_as - run as root with a user to become: take the user's ids
 * (privdrop()'s: its uid and gid, no other group) until check_back(),
 * for what the daemon reads or writes after the drop; the user, or NULL
 */
static const char *check_as(const struct conf *c, struct check_ids *s)
{
	struct passwd *pw;

	*s = (struct check_ids) { NULL, getegid(), NULL, 0 };
	if (c->user == NULL || geteuid() != 0 || (pw = getpwnam(c->user)) == NULL)
		return NULL;
	s->n = getgroups(0, NULL);
	s->groups = xcalloc(s->n > 0 ? (size_t) s->n : 1, sizeof(*s->groups));
	if ((s->n = getgroups(s->n, s->groups)) < 0 || setgroups(0, NULL) < 0
	    || setegid(pw->pw_gid) < 0 || seteuid(pw->pw_uid) < 0)
		msg_fatal("cannot take the ids of user %s: %m", c->user);
	return s->user = c->user;
}

/* check_back - root's ids again after check_as() */
static void check_back(struct check_ids *s)
{
	if (s->user && (seteuid(0) < 0 || setegid(s->gid) < 0
			|| setgroups((size_t) s->n, s->groups) < 0))
		msg_fatal("cannot take root's ids back: %m");
	free(s->groups);
}

/*
 * check_control - control: a socket we can make, in a directory we can
 * make; one that is there already as the user (the socket is bound after
 * the privilege drop, in a directory the start hands over if it made it)
 */
static void check_control(struct check *k)
{
	const struct conf *c = k->c;
	char dir[CHECK_PATH_MAX], why[512], *slash;
	struct check_ids ids = { 0 };
	struct stat st;

	if (c->control == NULL)
		return;
	if (control_socket_check(c->control, why, sizeof(why)) < 0) {
		check_fail(k, "control", "%s", why);
		return;
	}
	snprintf(dir, sizeof(dir), "%s", (slash = strrchr(c->control, '/')) ? c->control : ".");
	if (slash)
		dir[slash - c->control + (slash == c->control)] = 0;
	if (stat(dir, &st) == 0)
		check_as(c, &ids);
	check_dir(k, "control", dir);
	check_back(&ids);
}

/* check_port - can address:port be bound now (as listen_tcp() binds)? setting says where */
static void check_port(struct check *k, const char *setting, const char *address, int port)
{
	int fd = listen_bind(address, port);

	if (fd >= 0) {
		close(fd);
		return;
	}
	check_fail(k, setting, "cannot listen on %s port %d: %s: %s", address, port,
		   strerror(errno), errno == EADDRINUSE ? "stop what listens there (ss -ltnp)"
		   " or choose another port" : errno == EACCES ? "ports below 1024 need "
		   "idemrelay to start as root" : "use an address of this host");
}

/* check_ports - every listener and the metrics listener */
static void check_ports(struct check *k)
{
	const struct conf *c = k->c;
	char name[64];
	size_t i;

	for (i = 0; i < c->n_listen; i++) {
		snprintf(name, sizeof(name), "listen[%zu].port", i);
		check_port(k, name, c->listen[i].address, c->listen[i].port);
	}
	if (c->metrics_address)
		check_port(k, "metrics.port", c->metrics_address, c->metrics_port);
}

/*
 * check_group - an upstream group's tls_ca (name: "upstream" or
 * "routes[N].upstream"), read as user (NULL: as we are)
 */
static void check_group(struct check *k, const char *name, const struct conf_upstream *u,
			const char *user)
{
	static const char prefix[] = "upstream.tls_ca ";	/* the loader's; setting says it */
	char err[512], setting[128];
	SSL_CTX *ctx;

	if (u->tls == CONF_TLS_NONE || u->tls_ca == NULL)
		return;
	snprintf(setting, sizeof(setting), "%s.tls_ca", name);
	if ((ctx = tls_client_ctx_conf(u, err, sizeof(err))) == NULL)
		check_fail(k, setting, "%s: want a PEM file of CA certificates or a "
			   "directory hashed with openssl rehash%s%s",
			   err + (strncmp(err, prefix, sizeof(prefix) - 1) == 0 ? sizeof(prefix) - 1 : 0),
			   user ? ", readable by user " : "", user ? user : "");
	SSL_CTX_free(ctx);
}

/*
 * check_upstream - the Maildir, and each upstream group's tls_ca (the
 * default's and every route's) loads as the delivery threads will load it:
 * as root, with the user's ids (privdrop(): its uid and gid, no other
 * group) until done, since they read it after the privilege drop
 */
static void check_upstream(struct check *k)
{
	const struct conf *c = k->c;
	struct check_ids ids;
	const char *user;
	char name[64];
	size_t i;

	if (c->upstream.maildir)
		check_dir(k, "upstream.maildir", c->upstream.maildir);
	user = check_as(c, &ids);
	check_group(k, "upstream", &c->upstream, user);
	for (i = 0; i < c->n_routes; i++) {
		snprintf(name, sizeof(name), "routes[%zu].upstream", i);
		check_group(k, name, &c->routes[i].up, user);
	}
	check_back(&ids);
}

/* check_store - the store's directory, or that its database answers */
static void check_store(struct check *k)
{
	const struct conf *c = k->c;
	struct store *st = NULL;
	char err[1024];
	int rc;

	if (store_dir(c) != NULL) {
		check_dir(k, "store.path", store_dir(c));
		return;
	}
	rc = store_open(&st, c, STORE_READER, err, sizeof(err));	/* "FILE:LINE: store.url: ..." */
	store_close(st);
	if (rc == STORE_EINVAL)		/* it answers, but not as a node needs: err says why */
		check_fail(k, NULL, "%s", err);
	else if (rc != 0 && rc != STORE_ENOTFOUND)	/* none or older: the start makes it current */
		check_fail(k, NULL, "%s: check the connection string, and that "
			   "PostgreSQL runs and lets this user in", err);
}

/* check_startup - every problem to report(); the number found */
int check_startup(const struct conf *c, check_report report)
{
	struct check k = {c, report, 0};
	struct check_ids ids;
	const char *user = check_as(c, &ids);	/* SIGHUP reads them after the drop */

	check_tls(&k, user);
	check_users(&k, user);
	check_back(&ids);
	check_user(&k);
	check_store(&k);
	check_control(&k);
	check_ports(&k);
	check_upstream(&k);
	return k.n;
}
