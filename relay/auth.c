/*
 * NAME
 *	auth 3
 * SUMMARY
 *	the users file, password checks with libcrypt, checking threads
 * DESCRIPTION
 *	The table is sorted by name for bsearch. Hashes are checked with
 *	crypt_checksalt() when loaded, so that a typo is an error at start
 *	(or a refused reload) and not a user who can never log in. Only the
 *	"$id$" forms are taken: traditional DES has no prefix, and a
 *	password pasted in by mistake would pass for a DES hash. Weak
 *	methods ($1$) and cheap settings load with a warning.
 *
 *	Successes are remembered (auth_cached), as Dovecot's auth_cache does:
 *	by an HMAC-SHA-256 of user and password under a key drawn at start,
 *	never the password, for auth.cache_ttl, in a table of AUTH_CACHE_SLOTS
 *	where a newer success replaces an older one; a new users file
 *	forgets them all, and a check submitted before it is answered but
 *	not remembered (auth_forget(): it may have read the old file). The
 *	HMAC context is made once, key set, and each MAC starts it over:
 *	OpenSSL 3's one-shot HMAC() looks the algorithm and the digest up
 *	by name on every call (22,000 instructions a MAC, against 7,000).
 *	A failure is never remembered, so every wrong guess
 *	still costs the hash and its delay. The table is the event loop's:
 *	auth_cached() and the done callback run there.
 *
 *	Thread safety: a table is immutable once parsed. The checking
 *	threads take a reference under the lock, so that auth_set_users()
 *	can swap tables while a check is running; the last one to let go of
 *	an old table frees it.
 * DIAGNOSTICS
 *	Parse errors name the file and line: "users:3: bad user name".
 */
#include <crypt.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "../smtp/smtp.h"
#include "../util/buf.h"
#include "../util/clock.h"
#include "../util/log.h"
#include "../util/workq.h"
#include "auth.h"

#define AUTH_USERS_MAX_SIZE	(16 * 1024 * 1024)	/* a users file, at most */
#define AUTH_DUMMY_SETTING	"$6$idemrelay.dummy$"	/* for a table with no hash */
#define AUTH_CACHE_SLOTS	4096		/* remembered successes, at most */

struct auth_user {
	char   *name;			/* owned */
	char   *hash;			/* owned; crypt(3) output, or a lock */
};

struct auth_users {
	struct auth_user *v;		/* owned, sorted by name */
	size_t  n;
	const char *dummy;		/* a hash of the file's kind, for unknown users */
	int     refs;			/* checks running on it; under the auth lock */
};

/* auth_locked - "*" or "!..." never matches, as in shadow(5) */
static int auth_locked(const char *hash)
{
	return hash[0] == '!' || strcmp(hash, "*") == 0;
}

/* auth_hash_check - 0, or -1 with why; warns about weak hashes */
static int auth_hash_check(const char *hash, const char **why)
{
	size_t  i;

	if (hash[0] == 0) {
		*why = "empty hash";
		return -1;
	}
	for (i = 0; hash[i]; i++)
		if ((unsigned char) hash[i] <= ' ' || hash[i] == 0x7f) {
			*why = "space or control character in hash";
			return -1;
		}
	if (auth_locked(hash))
		return 0;
	/* traditional DES has no prefix: a password pasted in would pass for one */
	if (hash[0] != '$') {
		*why = "not a crypt(3) hash";
		return -1;
	}
	switch (crypt_checksalt(hash)) {
	case CRYPT_SALT_OK:
		return 0;
	case CRYPT_SALT_METHOD_LEGACY:
	case CRYPT_SALT_TOO_CHEAP:
		*why = "weak hash";
		return 1;
	case CRYPT_SALT_METHOD_DISABLED:
		*why = "hash method disabled in libcrypt";
		return -1;
	default:
		*why = "not a crypt(3) hash";
		return -1;
	}
}

/* auth_user_cmp - for qsort and bsearch */
static int auth_user_cmp(const void *a, const void *b)
{
	return strcmp(((const struct auth_user *) a)->name, ((const struct auth_user *) b)->name);
}

/* auth_users_free - release a table; NULL-safe */
void auth_users_free(struct auth_users *u)
{
	size_t  i;

	if (u == NULL)
		return;
	for (i = 0; i < u->n; i++) {
		free(u->v[i].name);
		explicit_bzero(u->v[i].hash, strlen(u->v[i].hash));
		free(u->v[i].hash);
	}
	free(u->v);
	free(u);
}

/* auth_users_parse - the table from a users file's text */
int auth_users_parse(struct auth_users **out, const char *text, size_t len,
		     const char *name, char *err, size_t errlen)
{
	struct auth_users *u = xcalloc(1, sizeof(*u));
	const char *p = text, *end = text + len, *eol, *colon, *why;
	size_t  cap = 0, i, lineno = 0, n;
	char   *hash;

	*out = NULL;
	for (; p < end; p = eol + 1) {
		lineno++;
		if ((eol = memchr(p, '\n', (size_t) (end - p))) == NULL)
			eol = end;
		n = (size_t) (eol - p);
		while (n && (p[n - 1] == '\r' || p[n - 1] == ' ' || p[n - 1] == '\t'))
			n--;
		while (n && (*p == ' ' || *p == '\t')) {
			p++;
			n--;
		}
		if (n == 0 || *p == '#')
			continue;
		if (memchr(p, 0, n) != NULL) {
			snprintf(err, errlen, "%s:%zu: NUL in line", name, lineno);
			goto fail;
		}
		if ((colon = memchr(p, ':', n)) == NULL) {
			snprintf(err, errlen, "%s:%zu: expected name:hash", name, lineno);
			goto fail;
		}
		if (!smtp_auth_name_ok(p, (size_t) (colon - p))) {	/* the first ':' ends it */
			snprintf(err, errlen, "%s:%zu: bad user name", name, lineno);
			goto fail;
		}
		hash = xstrndup(colon + 1, n - (size_t) (colon + 1 - p));
		switch (auth_hash_check(hash, &why)) {
		case -1:
			snprintf(err, errlen, "%s:%zu: %s", name, lineno, why);
			free(hash);
			goto fail;
		case 1:
			msg_warn("%s:%zu: %s for user %.*s", name, lineno, why,
				 (int) (colon - p), p);
			break;
		}
		if (u->n == cap) {
			cap = cap ? 2 * cap : 16;
			u->v = xrealloc(u->v, cap * sizeof(*u->v));
		}
		u->v[u->n].name = xstrndup(p, (size_t) (colon - p));
		u->v[u->n].hash = hash;
		u->n++;
	}
	if (u->n)
		qsort(u->v, u->n, sizeof(*u->v), auth_user_cmp);
	for (i = 1; i < u->n; i++)
		if (strcmp(u->v[i - 1].name, u->v[i].name) == 0) {
			snprintf(err, errlen, "%s: user %s given twice", name, u->v[i].name);
			goto fail;
		}
	u->dummy = AUTH_DUMMY_SETTING;
	for (i = 0; i < u->n; i++)
		if (!auth_locked(u->v[i].hash)) {
			u->dummy = u->v[i].hash;
			break;
		}
	*out = u;
	return 0;

fail:
	auth_users_free(u);
	return -1;
}

/* auth_users_load - read and parse a users file */
int auth_users_load(struct auth_users **out, const char *path, char *err, size_t errlen)
{
	struct buf text = BUF_INIT;
	char    chunk[8192];
	size_t  n;
	FILE   *fp;
	int     rc;

	*out = NULL;
	if ((fp = fopen(path, "re")) == NULL) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	while ((n = fread(chunk, 1, sizeof(chunk), fp)) > 0) {
		if (text.len + n > AUTH_USERS_MAX_SIZE) {
			snprintf(err, errlen, "%s: larger than %d octets", path, AUTH_USERS_MAX_SIZE);
			break;
		}
		buf_append(&text, chunk, n);
	}
	explicit_bzero(chunk, sizeof(chunk));
	if (ferror(fp))
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
	rc = ferror(fp) || n > 0 ? -1
	    : auth_users_parse(out, text.data ? text.data : "", text.len, path, err, errlen);
	fclose(fp);
	if (text.data)
		explicit_bzero(text.data, text.len);
	buf_free(&text);
	return rc;
}

/* auth_users_count - how many users */
size_t auth_users_count(const struct auth_users *u)
{
	return u->n;
}

/* auth_users_verify - 1 if pass is user's password; one crypt whatever the user */
int auth_users_verify(const struct auth_users *u, const char *user, const char *pass)
{
	struct auth_user key = {(char *) user, NULL}, *e;
	struct crypt_data *cd;
	const char *setting, *got;
	int     ok;

	e = u->n ? bsearch(&key, u->v, u->n, sizeof(*u->v), auth_user_cmp) : NULL;
	if (e && auth_locked(e->hash))
		e = NULL;
	setting = e ? e->hash : u->dummy;
	cd = xcalloc(1, sizeof(*cd));
	got = crypt_rn(pass, setting, cd, (int) sizeof(*cd));
	/* the length is the method's, no secret; the octets are compared without stopping early */
	ok = e != NULL && got != NULL && got[0] != '*' && strlen(got) == strlen(e->hash)
	    && CRYPTO_memcmp(got, e->hash, strlen(got)) == 0;
	explicit_bzero(cd, sizeof(*cd));
	free(cd);
	return ok;
}

 /*
  * Checking threads.
  */
/* a remembered success: the MAC of user and password, until when */
struct auth_seen {
	uint8_t mac[AUTH_MAC_LEN];
	int64_t until;			/* monotonic microseconds; 0: empty */
};

struct auth {
	struct workq *q;		/* owned: the checking threads */
	pthread_mutex_t lock;		/* the table below */
	struct auth_users *users;	/* owned, under lock */
	/* the event loop's alone */
	EVP_MAC_CTX *mac;		/* owned: HMAC-SHA-256 under a key drawn at start */
	int64_t ttl;			/* microseconds; 0: nothing remembered */
	struct auth_seen *seen;		/* owned, AUTH_CACHE_SLOTS */
	unsigned forgot;		/* times seen was emptied */
};

/* check - workq_ops: one password check, on a checking thread */
static void check(void *arg, struct workq_item *it)
{
	struct auth *a = arg;
	struct auth_req *req = (struct auth_req *) it;
	struct auth_users *u;

	pthread_mutex_lock(&a->lock);
	u = a->users;
	u->refs++;
	pthread_mutex_unlock(&a->lock);

	req->ok = auth_users_verify(u, req->user, req->pass);
	explicit_bzero(req->pass, sizeof(req->pass));

	pthread_mutex_lock(&a->lock);
	if (--u->refs == 0 && u != a->users)	/* the last user of a replaced table */
		auth_users_free(u);
	pthread_mutex_unlock(&a->lock);
}

/* auth_slot - where a MAC is remembered (its octets are uniform already) */
static struct auth_seen *auth_slot(struct auth *a, const uint8_t mac[AUTH_MAC_LEN])
{
	uint32_t h;

	memcpy(&h, mac, sizeof(h));
	return &a->seen[h & (AUTH_CACHE_SLOTS - 1)];
}

/* auth_mac_new - the HMAC-SHA-256 context, under a random key; fatal if OpenSSL fails */
static EVP_MAC_CTX *auth_mac_new(void)
{
	OSSL_PARAM params[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *) "SHA256", 0),
		OSSL_PARAM_construct_end()
	};
	uint8_t key[32];
	EVP_MAC *mac;
	EVP_MAC_CTX *ctx;

	if (getrandom(key, sizeof(key), 0) != sizeof(key))
		msg_fatal("auth: getrandom: %m");
	if ((mac = EVP_MAC_fetch(NULL, "HMAC", NULL)) == NULL)
		msg_fatal("auth: OpenSSL has no HMAC");
	ctx = EVP_MAC_CTX_new(mac);
	EVP_MAC_free(mac);		/* the context holds its own reference */
	if (ctx == NULL || EVP_MAC_init(ctx, key, sizeof(key), params) != 1)
		msg_fatal("auth: HMAC-SHA-256 setup failed");
	explicit_bzero(key, sizeof(key));
	return ctx;
}

/* auth_cached - req->mac for user and pass; 1 if that success is remembered */
int auth_cached(struct auth *a, struct auth_req *req, const char *pass)
{
	unsigned char in[AUTH_NAME_MAX + 1 + AUTH_PASS_MAX];
	size_t ulen = strlen(req->user), plen = strlen(pass), len = 0;
	struct auth_seen *s;
	int ok;

	memset(req->mac, 0, sizeof(req->mac));
	if (a->ttl == 0 || ulen > AUTH_NAME_MAX || plen > AUTH_PASS_MAX)
		return 0;
	/* user, a NUL (no user name holds one), password */
	memcpy(in, req->user, ulen + 1);
	memcpy(in + ulen + 1, pass, plen);
	/* a NULL key starts the context over under the key it has */
	ok = EVP_MAC_init(a->mac, NULL, 0, NULL) == 1
	    && EVP_MAC_update(a->mac, in, ulen + 1 + plen) == 1
	    && EVP_MAC_final(a->mac, req->mac, &len, sizeof(req->mac)) == 1 && len == sizeof(req->mac);
	explicit_bzero(in, sizeof(in));
	if (!ok) {
		memset(req->mac, 0, sizeof(req->mac));
		return 0;
	}
	s = auth_slot(a, req->mac);
	return s->until > clock_mono_us() && CRYPTO_memcmp(s->mac, req->mac, sizeof(s->mac)) == 0;
}

/* auth_remember - a success, for auth.cache_ttl, unless submitted before a forget (event loop) */
static void auth_remember(struct auth *a, const struct auth_req *req)
{
	static const uint8_t none[AUTH_MAC_LEN];
	struct auth_seen *s;

	if (a->ttl == 0 || req->forgot != a->forgot || memcmp(req->mac, none, sizeof(none)) == 0)
		return;
	s = auth_slot(a, req->mac);
	memcpy(s->mac, req->mac, sizeof(s->mac));
	s->until = clock_mono_us() + a->ttl;
}

/* checked - workq_ops: a finished check's callback, in the event loop */
static void checked(void *arg, struct workq_item *it)
{
	struct auth_req *req = (struct auth_req *) it;

	if (req->ok)
		auth_remember(arg, req);
	req->done(req);
}

/* auth_forget - no success remembered, nor any check running now when it comes back */
static void auth_forget(struct auth *a)
{
	memset(a->seen, 0, AUTH_CACHE_SLOTS * sizeof(*a->seen));
	a->forgot++;
}

/* auth_cache_ttl - how long successes are remembered; 0: not at all */
void auth_cache_ttl(struct auth *a, int64_t ttl_us)
{
	if (ttl_us != a->ttl)
		auth_forget(a);
	a->ttl = ttl_us > 0 ? ttl_us : 0;
}

/* auth_start - checking threads over a table */
struct auth *auth_start(struct auth_users *users, int threads)
{
	struct auth *a = xcalloc(1, sizeof(*a));

	a->users = users;
	a->seen = xcalloc(AUTH_CACHE_SLOTS, sizeof(*a->seen));
	a->mac = auth_mac_new();
	pthread_mutex_init(&a->lock, NULL);
	a->q = workq_start(&(struct workq_ops) { .name = "auth", .work = check, .done = checked,
						 .arg = a }, threads > 0 ? threads : 1);
	return a;
}

/* auth_set_users - checks from now on use this table */
void auth_set_users(struct auth *a, struct auth_users *users)
{
	struct auth_users *old;

	pthread_mutex_lock(&a->lock);
	old = a->users;
	a->users = users;
	if (old->refs == 0)
		auth_users_free(old);
	pthread_mutex_unlock(&a->lock);
	/* passwords may have changed: what was right is checked again */
	auth_forget(a);
}

/* auth_submit - queue a check (event loop) */
void auth_submit(struct auth *a, struct auth_req *req)
{
	req->forgot = a->forgot;
	workq_submit(a->q, &req->item);
}

/* auth_fd - the eventfd the event loop watches */
int auth_fd(const struct auth *a)
{
	return workq_fd(a->q);
}

/* auth_reap - run the done callbacks of finished checks */
void auth_reap(struct auth *a)
{
	workq_reap(a->q);
}

/* auth_stop - finish the queued checks, join, release */
void auth_stop(struct auth *a)
{
	if (a == NULL)
		return;
	workq_stop(a->q);
	pthread_mutex_destroy(&a->lock);
	auth_users_free(a->users);
	EVP_MAC_CTX_free(a->mac);		/* its key with it */
	free(a->seen);
	free(a);
}
