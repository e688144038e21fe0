/*
 * test_store_rule - the rules written once above the backends
 * (store/store_rule.c: when a claim is live, when a message can be
 * spooled, how long a story is kept) and store_open(), the one place a backend is chosen
 * (store/store_open.c): each role on LMDB, and what each backend
 * declares it can do. test_store runs the rules through both backends.
 */
#include <sys/stat.h>

#include "../../conf/conf.h"
#include "../../store/store_backend.h"
#include "test_store_fx.h"

#define NOW	1000000000000LL
#define SEC	1000000LL

/* what store_claim_live() asked, and what it is told */
struct asked {
	int answer;		/* 1 queued, 0 not, or a STORE_E* code */
	int n;			/* times asked */
	const char *qid;
};

/* ask - the backend's side: is the claim's message queued? */
static int ask(void *arg, const char *qid)
{
	struct asked *a = arg;

	a->n++;
	a->qid = qid;
	return a->answer;
}

/* test_claim_live - SPEC 4: live until it expires, and after while its message is queued */
static void test_claim_live(void **state)
{
	static const struct {
		const char *name;
		int64_t expires;
		int queued;		/* what the backend answers */
		int want;
		int asked;		/* is the backend asked at all? */
	} cases[] = {
		{ "not expired", NOW + SEC, 0, 1, 0 },
		{ "not expired, queued", NOW + SEC, 1, 1, 0 },
		{ "one microsecond left", NOW + 1, 0, 1, 0 },
		{ "expires now", NOW, 0, 0, 1 },
		{ "expires now, queued", NOW, 1, 1, 1 },
		{ "expired", NOW - SEC, 0, 0, 1 },
		{ "expired, still queued", NOW - SEC, 1, 1, 1 },
		{ "long expired, still queued", NOW - 100 * SEC, 1, 1, 1 },
		{ "expired, the lookup failed", NOW - SEC, STORE_EIO, STORE_EIO, 1 },
		{ "expired, a corrupt QID", NOW - SEC, STORE_EINVAL, STORE_EINVAL, 1 },
	};
	struct store_claim c;
	struct asked a;
	size_t i;

	(void) state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memset(&c, 0, sizeof(c));
		strcpy(c.qid, "0123456789AB");
		c.accepted = NOW - 200 * SEC;
		c.expires = cases[i].expires;
		memset(&a, 0, sizeof(a));
		a.answer = cases[i].queued;
		CHECK_INT(cases[i].name, store_claim_live(&c, NOW, ask, &a), cases[i].want);
		CHECK_INT("times the backend was asked", a.n, cases[i].asked);
		if (a.n && strcmp(a.qid, c.qid) != 0)
			fail_msg("%s: asked about %s, want %s", cases[i].name, a.qid, c.qid);
	}
}

/* a message that can be spooled, changed by each case of test_msg_valid */
struct valid_msg {
	struct store_msg m;
	struct store_rcpt r[2];
};

static void msg_good(struct valid_msg *v)
{
	memset(v, 0, sizeof(*v));
	strcpy(v->m.qid, "0123456789AB");
	v->m.from = "a@example.org";
	v->m.client = "helo [127.0.0.1]";
	v->r[0].addr = "b@example.org";
	v->r[1].addr = "c@example.org";
	v->r[1].state = STORE_RCPT_SENT;
	v->m.rcpts = v->r;
	v->m.n_rcpts = 2;
	v->m.data = "x";
	v->m.data_len = 1;
}

static void no_change(struct valid_msg *v) { (void) v; }
static void qid_empty(struct valid_msg *v) { v->m.qid[0] = 0; }
static void qid_unterminated(struct valid_msg *v) { memset(v->m.qid, 'A', STORE_QID_SIZE); }
static void qid_longest(struct valid_msg *v)
{
	memset(v->m.qid, 'A', STORE_QID_SIZE - 1);
	v->m.qid[STORE_QID_SIZE - 1] = 0;
}
static void null_sender(struct valid_msg *v) { v->m.from = ""; }
static void no_from(struct valid_msg *v) { v->m.from = NULL; }
static void no_client(struct valid_msg *v) { v->m.client = NULL; }
static void no_rcpts(struct valid_msg *v) { v->m.n_rcpts = 0; }
static void rcpts_null(struct valid_msg *v) { v->m.rcpts = NULL; }
static void too_many_rcpts(struct valid_msg *v) { v->m.n_rcpts = (size_t) INT32_MAX + 1; }
static void rcpt_no_addr(struct valid_msg *v) { v->r[1].addr = NULL; }
static void rcpt_bad_state(struct valid_msg *v) { v->r[1].state = STORE_RCPT_UNCONFIRMED + 1; }
static void rcpt_unconfirmed(struct valid_msg *v) { v->r[0].state = STORE_RCPT_UNCONFIRMED; }
static void data_missing(struct valid_msg *v) { v->m.data = NULL; }
static void data_empty(struct valid_msg *v) { v->m.data = NULL; v->m.data_len = 0; }

/*
 * test_msg_valid - what can be spooled, and what can be a delivery update
 * (update; -1: not asked), the same on every backend
 */
static void test_msg_valid(void **state)
{
	static const struct {
		const char *name;
		void (*change) (struct valid_msg *v);
		int want, update;
	} cases[] = {
		{ "as made", no_change, 1, 1 },
		{ "the null sender", null_sender, 1, 1 },
		{ "the longest QID", qid_longest, 1, 1 },
		{ "a recipient unconfirmed", rcpt_unconfirmed, 1, 1 },
		{ "no data at all", data_empty, 1, 1 },
		{ "no QID", qid_empty, 0, 0 },
		{ "a QID with no end", qid_unterminated, 0, 0 },
		{ "no sender", no_from, 0, 1 },
		{ "no client", no_client, 0, 1 },
		{ "no recipients", no_rcpts, 0, 0 },
		{ "recipients NULL", rcpts_null, 0, 0 },
		{ "more recipients than a row holds", too_many_rcpts, 0, -1 },
		{ "a recipient without an address", rcpt_no_addr, 0, 1 },
		{ "a recipient in no known state", rcpt_bad_state, 0, 0 },
		{ "data_len without data", data_missing, 0, 1 },
	};
	struct valid_msg v;
	size_t i;

	(void) state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		msg_good(&v);
		cases[i].change(&v);
		CHECK_INT(cases[i].name, store_msg_valid(&v.m), cases[i].want);
		if (cases[i].update >= 0)
			CHECK_INT(cases[i].name, store_update_valid(&v.m), cases[i].update);
	}
}

/* test_qid_ok - what can be stored as a QID: 1 to STORE_QID_SIZE - 1 bytes */
static void test_qid_ok(void **state)
{
	char longest[STORE_QID_SIZE], unended[STORE_QID_SIZE];

	(void) state;
	memset(longest, 'A', sizeof(longest) - 1);
	longest[sizeof(longest) - 1] = 0;
	memset(unended, 'A', sizeof(unended));
	CHECK_INT("NULL", store_qid_ok(NULL), 0);
	CHECK_INT("empty", store_qid_ok(""), 0);
	CHECK_INT("one byte", store_qid_ok("A"), 1);
	CHECK_INT("a QID", store_qid_ok("4Q1V3Z2K0001"), 1);
	CHECK_INT("the longest", store_qid_ok(longest), 1);
	CHECK_INT("no end within the size", store_qid_ok(unended), 0);
}

/* test_story_ttl - a story outlives its message by the ttl acceptance gave, else a day */
static void test_story_ttl(void **state)
{
	static const struct {
		const char *name;
		int64_t ttl, want;
	} cases[] = {
		{ "key_ttl given", 2 * 3600 * SEC, 2 * 3600 * SEC },
		{ "one microsecond", 1, 1 },
		{ "none given", 0, 24 * 3600 * SEC },
		{ "negative", -5, 24 * 3600 * SEC },
	};
	struct store_msg m;
	size_t i;

	(void) state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memset(&m, 0, sizeof(m));
		m.ttl = cases[i].ttl;
		CHECK_INT(cases[i].name, store_story_ttl(&m), cases[i].want);
	}
}

/* test_story_expires_rule - a story expires the first microsecond past its ttl (else a day's) */
static void test_story_expires_rule(void **state)
{
	static const struct {
		const char *name;
		int64_t finished, ttl, want;
	} cases[] = {
		{ "ttl given", NOW, 2 * 3600 * SEC, NOW + 2 * 3600 * SEC + 1 },
		{ "one microsecond", NOW, 1, NOW + 2 },
		{ "none given", NOW, 0, NOW + 24 * 3600 * SEC + 1 },
		{ "negative", NOW, -5, NOW + 24 * 3600 * SEC + 1 },
	};
	size_t i;

	(void) state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		CHECK_INT(cases[i].name, store_story_expires(cases[i].finished, cases[i].ttl),
			  cases[i].want);
}

/* a temporary directory for the LMDB roles */
struct open_fx {
	char dir[64];
	char path[96];
	struct conf cf;
};

static int open_setup(void **state)
{
	struct open_fx *f = calloc(1, sizeof(*f));

	strcpy(f->dir, "/tmp/test_store_rule.XXXXXX");
	if (mkdtemp(f->dir) == NULL)
		return -1;
	snprintf(f->path, sizeof(f->path), "%s/store", f->dir);
	f->cf.store.backend = CONF_STORE_LMDB;
	f->cf.store.path = f->path;
	f->cf.store.map_size = 8u << 20;
	f->cf.store.map_size_max = 16u << 20;
	*state = f;
	return 0;
}

static int open_teardown(void **state)
{
	struct open_fx *f = *state;
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
	if (system(cmd) != 0)
		return -1;
	free(f);
	return 0;
}

/*
 * test_open_roles - LMDB: a reader or writer never makes a store, the node
 * does; a writer is refused while another has the store open
 */
static void test_open_roles(void **state)
{
	struct open_fx *f = *state;
	struct store_stats s;
	struct store *st, *w;
	struct stat sb;
	char err[512];

	CHECK_INT("reader, no store", store_open(&st, &f->cf, STORE_READER, err, sizeof(err)),
		  STORE_ENOTFOUND);
	assert_null(st);
	if (strncmp(err, "no store at ", 12) != 0)
		fail_msg("reader, no store: got \"%s\", want \"no store at PATH\"", err);
	CHECK_INT("writer, no store", store_open(&st, &f->cf, STORE_WRITER, err, sizeof(err)),
		  STORE_ENOTFOUND);
	CHECK_INT("nothing made", stat(f->path, &sb), -1);

	CHECK_INT("node", store_open(&st, &f->cf, STORE_NODE, err, sizeof(err)), 0);
	assert_string_equal(store_name(&f->cf), "lmdb");
	CHECK_INT("lmdb declares", store_caps(st), STORE_CAP_LOCAL_READS | STORE_CAP_OWN_SPACE);
	CHECK_INT("a store of one node has no number", store_node_id(st), -1);
	CHECK_INT("stats", store_stats(st, &s, 0), 0);
	CHECK_INT("store.map_size_max applied at open", s.space.ceiling <= 16u << 20, 1);
	/* idemrelayctl writing beside a daemon that has it open: refused, nothing opened */
	CHECK_INT("writer beside the node", store_open(&w, &f->cf, STORE_WRITER, err, sizeof(err)),
		  STORE_EAGAIN);
	assert_null(w);
	if (strstr(err, "is open in another process") == NULL)
		fail_msg("writer beside the node: got \"%s\"", err);
	/* a second daemon on it: refused, nothing opened (each message would go twice) */
	CHECK_INT("node beside the node", store_open(&w, &f->cf, STORE_NODE, err, sizeof(err)),
		  STORE_EAGAIN);
	assert_null(w);
	if (strstr(err, "store.path") == NULL || strstr(err, "in use by another idemrelay") == NULL)
		fail_msg("node beside the node: got \"%s\"", err);
	store_close(st);

	CHECK_INT("reader", store_open(&st, &f->cf, STORE_READER, err, sizeof(err)), 0);
	store_close(st);
	CHECK_INT("writer", store_open(&st, &f->cf, STORE_WRITER, err, sizeof(err)), 0);
	store_close(st);
}

/*
 * test_open_declared - each backend, opened by store_open() as a reader
 * (idemrelayctl's), is the one store.backend names and declares what it
 * can do: LMDB reads locally, PostgreSQL is shared (IDEMRELAY_PG_URL)
 */
static void test_open_declared(void **state)
{
	struct fx *f = *state;
	struct conf cf;
	struct store *st;
	char err[512];

	memset(&cf, 0, sizeof(cf));
	cf.store.backend = fx_pg() ? CONF_STORE_POSTGRESQL : CONF_STORE_LMDB;
	cf.store.url = f->url;
	cf.store.path = f->path;
	CHECK_STR("its directory", store_dir(&cf), fx_pg() ? NULL : f->path);
	if (store_open(&st, &cf, STORE_READER, err, sizeof(err)) != 0)
		fail_msg("store_open: %s", err);
	CHECK_STR("backend", store_name(&cf), fx_pg() ? "postgresql" : "lmdb");
	CHECK_INT("declared", store_caps(st), fx_pg() ? STORE_CAP_SHARED
		  : STORE_CAP_LOCAL_READS | STORE_CAP_OWN_SPACE);
	CHECK_INT("a reader has no node number", store_node_id(st), -1);
	store_close(st);
}

/* the entries a backend may leave out, and the capability without which it may */
static const struct {
	const char *name;
	size_t off;
	unsigned cap;
} may_lack[] = {
	{ "upkeep", offsetof(struct store_ops, upkeep), STORE_CAP_OWN_SPACE },
	{ "txn_replay", offsetof(struct store_ops, txn_replay), STORE_CAP_SHARED },
	{ "queue_take", offsetof(struct store_ops, queue_take), STORE_CAP_SHARED },
	{ "lease_renew", offsetof(struct store_ops, lease_renew), STORE_CAP_SHARED },
	{ "lease_release", offsetof(struct store_ops, lease_release), STORE_CAP_SHARED },
	{ "msg_revive", offsetof(struct store_ops, msg_revive), STORE_CAP_SHARED },
};

/*
 * test_table_complete - the backend's table (store_backend.h) has every
 * entry, but those of a capability it does not declare; a new entry is
 * checked without being listed here
 */
static void test_table_complete(void **state)
{
	struct fx *f = *state;
	const struct store_ops *ops = f->st->ops;
	const char *name = fx_pg() ? "postgresql" : "lmdb";
	size_t off, i;
	void (*fn) (void);

	for (off = offsetof(struct store_ops, close); off + sizeof(fn) <= sizeof(*ops);
	     off += sizeof(fn)) {
		memcpy(&fn, (const char *) ops + off, sizeof(fn));
		for (i = 0; i < sizeof(may_lack) / sizeof(may_lack[0]); i++)
			if (may_lack[i].off == off)
				break;
		if (i < sizeof(may_lack) / sizeof(may_lack[0])) {
			if ((ops->caps & may_lack[i].cap) && fn == NULL)
				fail_msg("%s: %s missing, though its capability is declared",
					 name, may_lack[i].name);
			continue;
		}
		if (fn == NULL)
			fail_msg("%s: the entry at offset %zu is missing", name, off);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_claim_live),
		cmocka_unit_test(test_msg_valid),
		cmocka_unit_test(test_story_ttl),
		cmocka_unit_test(test_story_expires_rule),
		cmocka_unit_test(test_qid_ok),
		cmocka_unit_test_setup_teardown(test_open_roles, open_setup, open_teardown),
		cmocka_unit_test_setup_teardown(test_open_declared, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_table_complete, fx_setup, fx_teardown),
	};

	return cmocka_run_group_tests_name("store_rule", tests, NULL, NULL);
}
