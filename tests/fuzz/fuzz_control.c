/*
 * fuzz_control - the control socket's request (daemon/control.c's serve()
 * and dispatch(), queue/queue_admin.c's reading of a selection and the
 * actions it names) on an arbitrary request, as the admin thread hands
 * it over whole. Both files are compiled in; the store is a fake queue
 * of three messages that no action changes (each call is recorded), and
 * delivery, the duplicate counts and the metrics are stubs.
 *
 * The input is the request as read from the socket (up to
 * ADMIN_REQUEST_MAX octets, NUL-terminated as the admin thread does).
 * Properties (abort()):
 *
 *   - the reply is one line: JSON whose "ok" is true or false, an
 *     "error" string when false, its only LF at its end;
 *   - a request with a control character before its line end
 *     (line_cut()) or no request line acts on nothing;
 *   - drop, hold, release and reroute act only on what the request
 *     names, read here on its own: a QID (that message), ALL, or from
 *     and to patterns (messages whose sender matches the from pattern
 *     and one of whose recipients matches the to pattern, fnmatch()
 *     without case, as idemrelayctl(8) says); a "key" selection is
 *     answered from the store's key index, not checked here.
 */
#include "../../daemon/control.c"
#include "../../queue/queue_admin.c"

#include <fnmatch.h>
#include <stdint.h>

#define N_MSGS	3

static const char *const qids[N_MSGS] = { "01J1TKHTCS88", "01J1TKHTCS89", "01J1TKHTERS8" };
static const char *const froms[N_MSGS] = { "alice@example.com", "bob@example.org", "" };
static const char *const rcpts[N_MSGS][2] = {
	{ "carol@example.net", "dave@example.com" },
	{ "erin@example.net", NULL },
	{ "Frank@Example.COM", "alice@example.com" },
};

/* what the request did to the store */
static struct {
	char acted[16][STORE_QID_SIZE];	/* drop, change */
	size_t n_acted;
	int calls;			/* any store call at all */
} rec;

/* ---------------------------------------------------------------- the fake store */

static void msg_of(int i, struct store_msg *m)
{
	size_t k;

	memset(m, 0, sizeof(*m));
	snprintf(m->qid, sizeof(m->qid), "%s", qids[i]);
	m->from = xstrdup(froms[i]);
	m->rcpts = xcalloc(2, sizeof(*m->rcpts));
	for (k = 0; k < 2 && rcpts[i][k]; k++)
		m->rcpts[k].addr = xstrdup(rcpts[i][k]);
	m->n_rcpts = k;
}

static void msg_drop_mem(struct store_msg *m)
{
	size_t k;

	free(m->from);
	for (k = 0; k < m->n_rcpts; k++)
		free(m->rcpts[k].addr);
	free(m->rcpts);
	free(m->route);
}

static int index_of(const char *qid)
{
	int i;

	for (i = 0; i < N_MSGS; i++)
		if (strcmp(qid, qids[i]) == 0)
			return i;
	return -1;
}

static void acted(const char *qid)
{
	if (rec.n_acted < 16)
		snprintf(rec.acted[rec.n_acted++], STORE_QID_SIZE, "%s", qid);
}

int store_story_get(struct store *st, const char *qid, struct store_story *s)
{
	int i = index_of(qid);

	(void) st;
	rec.calls++;
	memset(s, 0, sizeof(*s));
	if (i < 0)
		return STORE_ENOTFOUND;
	msg_of(i, &s->m);
	s->queued = 1;
	return 0;
}

void store_story_free(struct store_story *s)
{
	if (s)
		msg_drop_mem(&s->m);
}

int store_queue_walk(struct store *st, unsigned how,
		     int (*cb) (void *arg, const struct store_msg *m), void *arg)
{
	struct store_msg m;
	int i, rc = 0;

	(void) st, (void) how;
	rec.calls++;
	for (i = 0; i < N_MSGS && rc == 0; i++) {
		msg_of(i, &m);
		rc = cb(arg, &m);
		msg_drop_mem(&m);
	}
	return rc;
}

int store_msg_drop(struct store *st, const char *qid)
{
	(void) st;
	rec.calls++;
	acted(qid);
	return index_of(qid) < 0 ? STORE_ENOTFOUND : 0;
}

int store_msg_change(struct store *st, const char *qid, const struct store_change *c)
{
	(void) st, (void) c;
	rec.calls++;
	acted(qid);
	return index_of(qid) < 0 ? STORE_ENOTFOUND : 0;
}

int store_key_queued(struct store *st, const uint8_t keyhash[STORE_HASH_LEN], const char *user,
		     char (**out)[STORE_QID_SIZE], size_t *n)
{
	(void) st, (void) user;
	rec.calls++;
	*n = keyhash[0] % 2;	/* the first message, under some keys */
	*out = xcalloc(1, sizeof(**out));
	snprintf((*out)[0], STORE_QID_SIZE, "%s", qids[0]);
	return 0;
}

int store_key_forget(struct store *st, const uint8_t keyhash[STORE_HASH_LEN], const char *user,
		     int64_t now, struct store_forget *f)
{
	(void) st, (void) keyhash, (void) user, (void) now;
	rec.calls++;
	memset(f, 0, sizeof(*f));
	return 0;
}

void store_forget_free(struct store_forget *f)
{
	if (f)
		free(f->qids);
}

const char *store_strerror(int err)
{
	return err ? "fake store error" : "ok";
}

int store_hist_expire(struct store *st, int64_t now, size_t max)
{
	(void) st, (void) now, (void) max;
	return 0;
}

const char *store_name(const struct conf *cf)
{
	(void) cf;
	return "fake";
}

int store_stats(struct store *st, struct store_stats *s, unsigned what)
{
	(void) st, (void) what;
	rec.calls++;
	memset(s, 0, sizeof(*s));
	return 0;
}

/* ---------------------------------------------------------------- the other stubs */

void deliver_flush(struct deliver *d)
{
	(void) d;
}

struct queue_admin_sched deliver_admin_sched(struct deliver *d)
{
	(void) d;
	return (struct queue_admin_sched) { 0 };
}

int dupcount_get(struct dupcount *dc, struct store *st, const char *qid, uint64_t *dups,
		 uint64_t *mism)
{
	(void) dc, (void) st;
	rec.calls++;
	*dups = *mism = 0;
	return index_of(qid) < 0 ? -1 : 0;
}

int dupcount_persist(struct dupcount *dc, struct store *st, size_t *n)
{
	(void) dc, (void) st;
	*n = 0;
	return 0;
}

const char *metrics_name(enum metrics_counter c)
{
	(void) c;
	return "counter";
}

void metrics_snapshot(struct metrics_snapshot *s)
{
	memset(s, 0, sizeof(*s));
}

static int unschedule(void *arg, const char *qid)
{
	(void) arg, (void) qid;
	return 0;
}

static void release_at(void *arg, const char *qid, int64_t when)
{
	(void) arg, (void) qid, (void) when;
}

static enum queue_admin_retry retry_now(void *arg, const char *qid, const char *route)
{
	(void) arg, (void) qid, (void) route;
	return index_of(qid) < 0 ? QUEUE_ADMIN_UNKNOWN : QUEUE_ADMIN_DUE;
}

static void reroute_now(void *arg, const char *qid)
{
	(void) arg, (void) qid;
}

/* ---------------------------------------------------------------- the model */

/* named - may a drop, hold, release or reroute of rest act on message i? */
static int named(char *rest, int i)
{
	char *w[ADMIN_REQUEST_MAX / 2 + 1], *save = NULL, *p;
	const char *from = NULL, *to = NULL;
	size_t n = 0, k;
	int any;

	for (p = strtok_r(rest, " ", &save); p; p = strtok_r(NULL, " ", &save))
		w[n++] = p;
	if (n == 1 && strcmp(w[0], "ALL") == 0)
		return 1;
	if (n >= 1 && strcmp(w[0], "key") == 0)
		return 1;			/* the key index's answer */
	if (n == 1)
		return strcmp(w[0], qids[i]) == 0;
	if (n % 2 || n == 0)
		abort();			/* no such selection was taken */
	for (k = 0; k < n; k += 2) {
		if (strcmp(w[k], "from") == 0)
			from = w[k + 1];
		else if (strcmp(w[k], "to") == 0)
			to = w[k + 1];
		else
			abort();
	}
	if (from && fnmatch(from, froms[i], FNM_CASEFOLD) != 0)
		return 0;
	for (k = 0, any = to == NULL; k < 2 && !any && rcpts[i][k]; k++)
		any = fnmatch(to, rcpts[i][k], FNM_CASEFOLD) == 0;
	return any;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct conf cf;
	struct control ctl;
	struct buf out = BUF_INIT;
	char req[ADMIN_REQUEST_MAX + 1], copy[ADMIN_REQUEST_MAX + 1], *cmd, *rest, *save = NULL;
	int ok, refused, i;
	size_t k, len;
	char err[512];

	if (size > ADMIN_REQUEST_MAX)
		return 0;
	log_setup("fuzz_control", 0, LOG_LEVEL_ERROR);
	memcpy(req, data, size);
	req[size] = 0;
	memcpy(copy, req, size + 1);
	memset(&rec, 0, sizeof(rec));
	memset(&ctl, 0, sizeof(ctl));
	ctl.c = &cf;
	ctl.sched = (struct queue_admin_sched) { NULL, unschedule, release_at, retry_now,
						 reroute_now };
	refused = size == 0 || req[0] == 0 || line_cut(copy, size) != 0;
	serve(&ctl, -1, req, size, 0, &out);

	/* one line of JSON */
	if (out.len == 0 || out.data[out.len - 1] != '\n'
	    || memchr(out.data, '\n', out.len - 1) != NULL)
		abort();
	out.data[out.len - 1] = 0;
	if (getenv("FUZZ_SAY"))		/* the reply and what it did, for a person */
		fprintf(stderr, "%s  [%zu acted on, %d store calls]\n", out.data, rec.n_acted,
			rec.calls);
	if (json_get_bool(out.data, "ok", &ok) != 0
	    || (!ok && json_get_str(out.data, "error", err, sizeof(err)) != 0))
		abort();
	if (refused && (ok || rec.calls))
		abort();		/* a refused line acted, or said it did */

	/* only what it names */
	len = strlen(copy);
	if (!refused && len > 0) {
		cmd = strtok_r(copy, " \t", &save);
		rest = save ? save + strspn(save, " \t") : NULL;
		if (cmd && rest && (strcmp(cmd, "drop") == 0 || strcmp(cmd, "hold") == 0
				    || strcmp(cmd, "release") == 0 || strcmp(cmd, "reroute") == 0))
			for (k = 0; k < rec.n_acted; k++) {
				char words[ADMIN_REQUEST_MAX + 1];

				if ((i = index_of(rec.acted[k])) < 0)
					abort();	/* a QID not queued acted on */
				snprintf(words, sizeof(words), "%s", rest);
				if (!named(words, i))
					abort();
			}
	}
	buf_free(&out);
	return 0;
}
