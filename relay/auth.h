/*
 * NAME
 *	auth 3h
 * SUMMARY
 *	AUTH credentials: the users file, and checking off the event loop
 * DESCRIPTION
 *	The users file (auth.users) has one "name:crypt-hash" line per user,
 *	as `openssl passwd -6` ($6$) or mkpasswd/libxcrypt ($y$, yescrypt)
 *	make them; "#" starts a comment line, blank lines are ignored. A
 *	hash of "*" or starting with "!" locks the user. auth_users_load()
 *	reads it (at start-up before the privilege drop, and on SIGHUP);
 *	auth_users_parse() is the same on text in memory.
 *
 *	auth_users_verify() checks a password with libcrypt. An unknown or
 *	locked user costs one crypt too, with a hash of the file's own kind,
 *	so the time taken does not tell which names exist.
 *
 *	A crypt takes milliseconds ($6$) to tens of milliseconds ($y$): too
 *	long for the event loop. auth_start() runs checking threads; the loop
 *	submits requests and gets them back through an eventfd, as with
 *	queue/commit.h: auth_reap() runs each request's done callback in the
 *	loop's thread. auth_set_users() swaps the table (SIGHUP) under the
 *	threads' feet; checks already running finish with the old one, and
 *	their successes are answered but not remembered.
 */
#ifndef RELAY_AUTH_H
#define RELAY_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "../util/workq.h"

#define AUTH_NAME_MAX	255
#define AUTH_PASS_MAX	256		/* longer: refused unhashed (crypt's cost grows with it) */
#define AUTH_MAC_LEN	32

struct auth_users;

int auth_users_load(struct auth_users **out, const char *path, char *err, size_t errlen);
int auth_users_parse(struct auth_users **out, const char *text, size_t len,
		     const char *name, char *err, size_t errlen);
void auth_users_free(struct auth_users *u);		/* NULL-safe */
size_t auth_users_count(const struct auth_users *u);
int auth_users_verify(const struct auth_users *u, const char *user, const char *pass);	/* 1 ok */

struct auth_req {
	struct workq_item item;		/* first: the work queue's while queued */
	/* input, owned by the submitter */
	char    user[AUTH_NAME_MAX + 1];
	char    pass[AUTH_PASS_MAX + 1];	/* wiped by the checker */
	uint8_t mac[AUTH_MAC_LEN];	/* auth_cached(): remembered if ok */
	unsigned forgot;		/* auth_submit()'s: the cache as it was then */
	/* output */
	int     ok;
	int     cached;			/* ok from auth_cached(), not a check */
	void    (*done) (struct auth_req *req);	/* runs in the event loop */
	void   *ctx;
};

struct auth;

struct auth *auth_start(struct auth_users *users, int threads);	/* takes the table */
/* auth_cache_ttl - remember successes this long (microseconds; 0: never) */
void auth_cache_ttl(struct auth *a, int64_t ttl_us);
/* auth_cached - a success of this user and password remembered? req->mac set either way */
int auth_cached(struct auth *a, struct auth_req *req, const char *pass);
void auth_set_users(struct auth *a, struct auth_users *users);	/* takes the table */
void auth_submit(struct auth *a, struct auth_req *req);
int auth_fd(const struct auth *a);		/* readable when requests are done */
void auth_reap(struct auth *a);			/* run done callbacks */
void auth_stop(struct auth *a);			/* finish pending checks, join; NULL-safe */

#endif
