/*
 * NAME
 *	store_pg_int 3h
 * SUMMARY
 *	internals shared by the PostgreSQL backend's files; never included outside store/pg/
 * DESCRIPTION
 *	The handle (struct pg_store) and the batch transaction (struct
 *	pg_txn) begin with the interface's struct store and struct
 *	store_txn, so that store.c finds the table. libpq types stay here.
 *
 *	Every statement is sent with binary parameters and asks for binary
 *	results (store_pg_wire.c): message data goes as bytea without
 *	escaping, numbers without formatting, and a batch's rows go as a
 *	few arrays (unnest() on the server) instead of one statement each.
 */
#ifndef STORE_PG_STORE_PG_INT_H
#define STORE_PG_STORE_PG_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <libpq-fe.h>

#include "../store_backend.h"
#include "../../util/buf.h"

#define PG_POOL_START	2	/* connections opened at start, besides the anchor */
#define PG_POOL_MAX	16
#define PG_CONN_BIG	(4u << 20)	/* a connection that moved a message this big is closed:
					 * libpq keeps its buffers as large as they grew */
#define PG_WAIT_US	(5 * 1000000LL)	/* longest wait for a free connection */
#define PG_VOID_LOCK	"'2s'"		/* a settling's wait for its key locks (store_pg_pend.c) */
#define PG_RESULT_US	(10 * 1000000LL)	/* longest wait for a statement's result */
#define PG_COMMIT_WAIT_US (15 * 1000000LL)	/* longest hold of a commit waiting for replication */
#define PG_REAP_US	(250 * 1000LL)	/* a wait for a free connection looks at the kept this often */
#define PG_SETTLE_US	(2 * 1000000LL)	/* voids are looked at this often (store_pg_wait.c) */
#define PG_BACKOFF_MIN	(100 * 1000LL)
#define PG_BACKOFF_MAX	(5 * 1000000LL)
#define PG_SCHEMA_VERSION 11
#define PG_PARAMS_MAX	32

/* the element types of arrays and parameters */
#define PG_OID_BOOL	16
#define PG_OID_BYTEA	17
#define PG_OID_INT8	20
#define PG_OID_INT4	23
#define PG_OID_TEXT	25

/*
 * One row's "is it queued?" where the row is found by its QID or token:
 * "queued IS TRUE", never "queued", which lets the planner read the row
 * from a partial index WHERE queued (messages_take; messages_due until
 * schema 11, messages_lease until 8). An ANALYZE made while the queue
 * was nearly empty prices such an index at one row, and the generic
 * plan then walks every queued message for each row it writes: 1.7 ms
 * an outcome at 1,200 queued, delivery a quarter as fast (test_store_pg
 * test_plans_idle_queue). Statements about the queue as a whole (the
 * take, a flush, the walk) keep "queued".
 */
#define PG_ROW_QUEUED(alias)	alias "queued IS TRUE"

/* the database's clock in Unix microseconds: leases are compared on it, never a node's */
#define PG_DB_NOW	"(extract(epoch from clock_timestamp()) * 1000000)::bigint"
/* a pg_stat_activity row's backend_start in microseconds (store_pg_wait.c) */
#define PG_BACKEND_START(a) "(extract(epoch from " a ".backend_start) * 1000000)::bigint"
/* a connection's backend: its server pid and start, read when it was opened (store_pg.c) */
#define PG_BACKEND_IS(a) a ".pid = $1 AND " PG_BACKEND_START(a) " = $2"
/*
 * PG_STORY_EXPIRES - store_story_expires() (store_rule.c) in SQL, of SQL
 * expressions: a finished message's story expires at it. The ttl is the
 * row's, which the statement that finishes the message reads as it
 * writes; computed in C it would cost a read of each message's ttl
 * first, a round trip more per drop and per batch of outcomes. The two
 * statements that finish a message share this; test_story checks it
 * gives what store_story_expires() does, on a ttl and on none.
 */
#define PG_STORY_EXPIRES(finished, ttl, default_ttl) \
	"(" finished " + CASE WHEN " ttl " > 0 THEN " ttl " ELSE " default_ttl " END + 1)"
/*
 * The inflight mark's two columns (schema 2, store_pg_schema.c): a mark
 * names its lease (mark_token); clearing it while finishing the message
 * under another lease names the mark the verdict was on (verdict_on).
 * PG_MARK_COLS sets them so in an UPDATE of messages m, given the row's
 * new inflight and queued (the lease token unchanged), and leaves them
 * alone where inflight does not change: every statement that writes
 * inflight uses it (schema 8 dropped the trigger that kept them for
 * older nodes).
 */
#define PG_MARK_COLS(inflight, queued) \
	"mark_token = CASE WHEN (" inflight ") AND NOT m.inflight THEN m.lease_token " \
	"ELSE m.mark_token END, verdict_on = CASE WHEN (" inflight ") = m.inflight " \
	"THEN m.verdict_on WHEN (" inflight ") THEN NULL WHEN NOT (" queued ") AND " \
	"m.mark_token IS DISTINCT FROM m.lease_token THEN m.mark_token ELSE NULL END"

/* the fence's SQLSTATE (store_pg_schema.c's idemrelay_fenced()): a lease went elsewhere */
#define PG_SQLSTATE_FENCE "IR001"
/*
 * PG_ROWS - a table's rows for the figures (stats, /metrics): counted while
 * the planner's estimate says it is small, the estimate above that, so a
 * scrape never scans millions of claims (the count is an init plan, run
 * only when the CASE needs it; reltuples is -1 before the first ANALYZE)
 */
#define PG_ROWS_EXACT	"100000"
#define PG_ROWS(t)	"(SELECT CASE WHEN c.reltuples > " PG_ROWS_EXACT " THEN c.reltuples::bigint " \
	"ELSE (SELECT count(*) FROM " t ") END FROM pg_class c WHERE c.oid = '" t "'::regclass)"

/* lease map: qid -> lease token of each message this node holds leased */
struct pg_lease {
	char qid[STORE_QID_SIZE];	/* "" empty, "\1" deleted */
	int64_t token;
	struct store_msg *copy;		/* in the map: owned, the message as put (store_pg_keep.c) */
	size_t copy_bytes;		/* the memory it takes */
	int64_t copy_at;		/* monotonic us: kept since */
};

/* why connecting fails: the server cannot be reached, or it has no slot free */
enum pg_down { PG_DOWN_NONE, PG_DOWN_UNREACHABLE, PG_DOWN_SLOTS };

struct pg_store {
	struct store base;		/* first: store.c dispatches on base.ops; base.node_id:
					 * nodes.slot */
	char *url;			/* owned: libpq connection string or URI */
	char *node;			/* owned: this node's name; NULL for a client (idemrelayctl) */
	int64_t lease_us;

	pthread_mutex_t mu;		/* guards everything below but the lease map */
	pthread_cond_t freed;		/* a connection went back to the pool */
	PGconn *idle[PG_POOL_MAX];	/* owned: connections free to take */
	size_t n_idle;
	size_t n_open;			/* idle plus taken */
	PGconn *anchor;			/* owned: holds the node's slot lock (store_pg.c) */
	int64_t anchor_checked;		/* monotonic us of its last check (amu) */
	int anchor_pid;			/* its server process when it took the slot's lock */
	int64_t clock_read;		/* monotonic us: the anchor last read the database's clock */
	int64_t clock_off;		/* the database's clock less this host's, 0 within
					 * PG_SKEW_US (atomic; store_pg_clock_seen()) */
	pthread_mutex_t amu;		/* one anchor check at a time */
	int reset;			/* close the pool's connections as they come back */
	int down;			/* PostgreSQL unreachable: connecting failed */
	enum pg_down down_cause;	/* why, as logged */
	int64_t down_since;		/* monotonic us */
	int64_t backoff;		/* next wait between tries, us */
	int64_t next_try;		/* monotonic us: no connection attempt before */
	uint64_t outages;
	int64_t commit_wait_us;		/* store.commit_wait: a commit's hold while it waits */
	PGconn *kept[PG_POOL_MAX];	/* owned, counted in n_open: their backends wait for
					 * replication; closed once the wait ends (store_pg_wait.c) */
	size_t n_kept;
	uint64_t repl_waiting;		/* connections whose commit waits for replication now */
	uint64_t repl_waits;		/* times commits started to wait for replication */
	uint64_t voided;		/* batches answered 451 while their commit waited */
	int64_t repl_since;		/* monotonic us: the wait began */
	int64_t settle_at;		/* monotonic us: voids are looked at again then */
	struct pg_pend *pend;		/* owned: batches answered 451 whose outcome was not read */
	size_t n_pend, cap_pend;

	pthread_mutex_t pmu;		/* held by the one caller settling pend (store_pg_pend.c) */
	int64_t pend_warn_at;		/* monotonic us: a settling refused is logged again then */

	pthread_mutex_t lmu;		/* guards the lease map and the copies on it */
	size_t n_keep, keep_bytes;	/* the copies, and the memory they take (store_pg_keep.c) */
	struct pg_lease *leases;	/* owned: open addressing, cap a power of two */
	size_t n_leases, n_used, cap_leases;	/* live; live + deleted; slots */
};

#define PG_KEEP_MAX	4096		/* copies kept at most (store_pg_keep.c) */
#define PG_KEEP_BYTES	(16u << 20)	/* and the memory they may take */

/*
 * a batch answered 451 while PostgreSQL could not be reached to read its
 * commit's outcome or to void it: settled before the node's next use of
 * the database (store_pg_pend.c)
 */
struct pg_pend {
	char (*qids)[STORE_QID_SIZE];	/* owned: its messages */
	size_t n;
	int64_t xid;			/* its transaction's id; 0 not known */
	int64_t *locks;			/* owned, sorted: its key locks (store_pg_claim.c) */
	size_t n_locks;
	int pid;			/* its backend (BACKEND_IS), to read the id; 0 not known */
	int64_t started;
};

/* a run of buffered writes of one kind, sent as one statement (store_pg_txn.c) */
enum pg_seg_kind { PG_SEG_CLAIMS, PG_SEG_MSGS, PG_SEG_UPDATES };	/* marks are updates */

struct pg_params;

struct pg_txn {
	struct store_txn base;		/* first: store.c dispatches on base.ops */
	struct pg_store *st;		/* not owned */
	PGconn *c;			/* taken from the pool at the first need; given back at the end */
	int begun;			/* BEGIN was sent: locks are held */
	int64_t *locked;		/* owned, sorted: key locks held (first 8 bytes of a keyhash) */
	size_t n_locked, cap_locked;
	struct pg_claim_ent *cache;	/* owned: claims read under the locks, and put; keys read */
	size_t n_cache, cap_cache;
	char (*put_qids)[STORE_QID_SIZE];	/* owned: messages put, in order */
	int wrote_put;			/* a delivery write of a message put: no copy kept */
	int notice;			/* a bounce's notice put: never voided (store_pg_decide.c) */
	size_t n_put, cap_put;
	struct pg_lease *gone;		/* owned: leases given up at commit, with their tokens */
	size_t n_gone, cap_gone;
	struct pg_seg *segs;		/* owned: buffered writes, in order */
	size_t n_segs, cap_segs;
	size_t seg_last[PG_SEG_UPDATES + 1];	/* each kind's last run: its index + 1, 0 none */
	struct pg_key_run *key_runs;	/* owned: each key's last run (store_pg_txn.c) */
	size_t n_key_runs, cap_key_runs;
	size_t data_bytes;		/* message data put: the connection's buffers grow so */
	int64_t fenced;			/* the token the last write buffered was fenced with, or 0 */
	char fenced_qid[STORE_QID_SIZE];	/* ... its message, and recipients (0: a mark) */
	size_t fenced_rcpts;
	int64_t xid;			/* pg_current_xact_id(), read with the key locks; 0 not known */
	int64_t clock_off;		/* store_pg_clock_off() as it began, then as its key
					 * locks read it: the one its times are moved by */
	char (*replays)[STORE_QID_SIZE];	/* owned: claims of other nodes' acceptances
					 * replayed: recorded at commit (store_pg_claim.c) */
	size_t n_replays, cap_replays;
};


/* store_pg.c: the pool, reconnects, errors */
PGconn *store_pg_connect(struct pg_store *st, char *err, size_t errlen);	/* NULL: err says */
char *store_pg_conn_error(PGconn *c, char *out, size_t len);	/* libpq's account, one line */
int store_pg_slots_taken(const char *why);	/* a refusal for want of connection slots? */
int store_pg_take(struct pg_store *st, PGconn **out);	/* 0 or STORE_EAGAIN */
int store_pg_take_beside(struct pg_store *st, PGconn **out);	/* the same, settling nothing */
void store_pg_give(struct pg_store *st, PGconn *c);	/* back to the pool, or closed if broken */
void store_pg_give_sized(struct pg_store *st, PGconn *c, size_t bytes);	/* closed if bytes is big */
int store_pg_result(struct pg_store *st, PGconn *c, PGresult *r, const char *what);
extern const struct store_ops store_pg_ops;

void store_pg_anchor_check(struct pg_store *st);
/*
 * The times that decide across nodes (a claim's acceptance and expiry, a
 * message's acceptance, a story's end and expiry, and the now they are
 * compared with) are kept on the database's clock: the node's own
 * corrected by clock_off, as written (+) and as read back (-). A host
 * clock within PG_SKEW_US of the database's is taken as it is.
 */
#define PG_SKEW_US	1000000
#define PG_CLOCK_US	(10 * 1000000LL)	/* the anchor reads the database's clock this often */
void store_pg_clock_seen(struct pg_store *st, int64_t db, int64_t at);	/* db read at at */
int64_t store_pg_clock_off(struct pg_store *st);
int store_pg_run(struct pg_store *st, const char *sql, struct pg_params *p, PGresult **r,
		 const char *what);

/* store_pg_session.c: a pooler that shares server sessions refused (STORE_EINVAL, err);
 * the probe's other two connections then idle in the pool */
int store_pg_session_check(struct pg_store *st, PGconn *c, char *err, size_t errlen);

/* a running node's session lock on its slot (store_pg.c), slot an SQL expression */
#define PG_NODE_LOCK(slot) "hashtextextended('idemrelay node ' || coalesce(current_schema(), '') " \
	"|| ' ' || " slot ", 0)"

/* store_pg_schema.c: made current under this session lock, one starter at a time */
#define PG_SCHEMA_LOCK	"hashtextextended('idemrelay schema ' || coalesce(current_schema(), ''), 0)"
int store_pg_schema(struct pg_store *st, PGconn *c, int client, char *err, size_t errlen);

/* store_pg_wire.c: binary parameters, arrays, results */
struct pg_params {
	int n;
	Oid types[PG_PARAMS_MAX];
	const char *vals[PG_PARAMS_MAX];
	int lens[PG_PARAMS_MAX];
	int fmts[PG_PARAMS_MAX];
	struct buf own[PG_PARAMS_MAX];	/* owned: each parameter's bytes */
};
struct pg_arr {
	struct buf b;			/* owned: the array's binary form, header patched at the end */
	Oid elem;
	uint32_t n;
	int has_null;
};
#define SEG_COLS	18	/* the most columns of a run: messages put */

struct pg_seg {
	enum pg_seg_kind kind;
	size_t n;			/* rows */
	int marks;			/* updates: some rows are inflight marks */
	struct pg_arr a[SEG_COLS];	/* owned: the rows, a column each */
	struct pg_arr r[7];		/* owned: their recipients (messages, updates) */
	char (*qids)[STORE_QID_SIZE];	/* owned: each row's QID or claim hash prefix */
	size_t cap_qids;
};

void store_pg_params_init(struct pg_params *p);
void store_pg_params_free(struct pg_params *p);
void store_pg_p_i64(struct pg_params *p, int64_t v);
void store_pg_p_i32(struct pg_params *p, int32_t v);
void store_pg_p_text(struct pg_params *p, const char *s);	/* NULL: SQL NULL */
void store_pg_p_bytes(struct pg_params *p, const void *v, size_t len);	/* NULL: SQL NULL */
uint32_t store_pg_p_arr(struct pg_params *p, struct pg_arr *a);	/* takes a's bytes; how many */
void store_pg_p_qids(struct pg_params *p, char (*qids)[STORE_QID_SIZE], size_t n);	/* text[] */

void store_pg_arr_init(struct pg_arr *a, Oid elem);
void store_pg_arr_free(struct pg_arr *a);
void store_pg_a_i64(struct pg_arr *a, int64_t v);
void store_pg_a_i32(struct pg_arr *a, int32_t v);
void store_pg_a_bool(struct pg_arr *a, int v);
void store_pg_a_text(struct pg_arr *a, const char *s);		/* NULL: SQL NULL */
void store_pg_a_bytes(struct pg_arr *a, const void *v, size_t len);	/* NULL: SQL NULL */

int store_pg_exec(struct pg_store *st, PGconn *c, const char *sql, struct pg_params *p,
		  PGresult **out, const char *what);
int store_pg_simple(struct pg_store *st, PGconn *c, const char *sql, const char *what);
int store_pg_send(PGconn *c, const char *sql, struct pg_params *p);
int store_pg_pipe_next(struct pg_store *st, PGconn *c, PGresult **out, const char *what);
int store_pg_pipe_end(PGconn *c);
void store_pg_cut(PGconn *c, const char *what, int64_t limit);	/* no answer within limit */

/* store_pg_stmt.c: each connection's prepared statements, and what its pipeline owes */
#define PG_CONN_WAITS	1	/* counted in repl_waiting */
#define PG_CONN_KEPT	2	/* its backend waits for replication: kept, not closed */
struct pg_conn {
	int flags;			/* PG_CONN_*: what store_pg_wait.c knows of it */
	struct pg_store *owner;		/* not owned: the store whose pool it is in */
	int pid;			/* its server backend (pg_backend_pid(): PQbackendPID() is */
	int64_t started;		/* a pooler's own), and its backend_start in us; 0 not known */
};
struct pg_conn *store_pg_conn(PGconn *c);	/* NULL: c has no table (attach failed, or not ours) */
#define PG_STMT_NAME	16
int store_pg_stmt_attach(PGconn *c);
int store_pg_stmt_find(PGconn *c, const char *sql, const struct pg_params *p,
		       char name[PG_STMT_NAME], int *ready);
void store_pg_stmt_prepared(PGconn *c, int i, int ok);
#define PG_OWED_STMT	(-1)	/* an entry of the pipeline owed: a statement's results */
void store_pg_stmt_sent(PGconn *c, int i);	/* i: a prepare's, or PG_OWED_STMT */
int store_pg_stmt_owed(PGconn *c, int pay);	/* pay: the entry is read */
void store_pg_stmt_settled(PGconn *c);

int64_t store_pg_int(const PGresult *r, int row, int col);	/* int2/4/8 or bool; NULL: 0 */
char *store_pg_strdup(const PGresult *r, int row, int col);	/* NULL stays NULL */
int store_pg_copy(const PGresult *r, int row, int col, void *out, size_t len);	/* exact length */
int store_pg_qid(const PGresult *r, int row, int col, char qid[STORE_QID_SIZE]);
int64_t store_pg_key_lock(const uint8_t keyhash[STORE_HASH_LEN]);

/* store_pg_queue.c: the spool's rows, leases */
int store_pg_msg_fetch(struct pg_store *st, const char *qid, int load, struct store_story *s);
int store_pg_lease_get(struct pg_store *st, const char *qid, int64_t *token);
void store_pg_lease_set(struct pg_store *st, const char *qid, int64_t token);
void store_pg_lease_del(struct pg_store *st, const char *qid, int64_t token);	/* token 0: any */
struct pg_lease *store_pg_lease_entry(struct pg_store *st, const char *qid);	/* lmu held */
int store_pg_why(struct pg_store *st, const char *qid, size_t n_rcpts, int64_t token);

/* store_pg_keep.c: the messages just put, kept for their first delivery */
struct store_msg *store_pg_keep_copy(const struct pg_store *st, const struct store_msg *m);
void store_pg_keep_drop(struct store_msg *k);
void store_pg_keep_add(struct pg_store *st, struct store_msg *k, int64_t token);
int store_pg_keep_take(struct pg_store *st, const char *qid, struct store_msg *m);
void store_pg_keep_forget(struct pg_store *st, const char *qid);	/* NULL: all */
void store_pg_keep_unhang(struct pg_store *st, struct pg_lease *e);	/* lmu held */

/* store_pg_txn.c: the interface's transaction */
struct pg_seg *store_pg_seg_for(struct pg_txn *t, enum pg_seg_kind kind, const char *key);
void store_pg_segs_free(struct pg_txn *t);
struct pg_key_run *store_pg_put_of(struct pg_txn *t, const char *qid);	/* a message put; NULL */
int store_pg_read_back(struct pg_txn *t);	/* 0 committed, STORE_EAGAIN, PG_NOT_KNOWN */
void *store_pg_grow(void *v, size_t n, size_t *cap, size_t size);	/* room for one more */

/* store_pg_seam.c: the link seam a test replaces with its own (both, then) */
int64_t store_pg_result_limit(void);	/* PG_RESULT_US; a test's may be shorter */
void store_pg_commit_sent(PGconn *c);	/* a commit's pipeline is sent: nothing */
STORE_ENTRY(txn_begin) store_pg_txn_begin;
void store_pg_txn_keys(struct pg_txn *t, const uint8_t (*keyhashes)[STORE_HASH_LEN], size_t n);
STORE_ENTRY(claims_get) store_pg_claims_get;
STORE_ENTRY(txn_replay) store_pg_txn_replay;
STORE_ENTRY(txn_claim_put) store_pg_txn_claim_put;
STORE_ENTRY(txn_msg_put) store_pg_txn_msg_put;
STORE_ENTRY(txn_msg_set_inflight) store_pg_txn_msg_set_inflight;
STORE_ENTRY(txn_msg_update) store_pg_txn_msg_update;
STORE_ENTRY(txn_commit) store_pg_txn_commit;

/* store_pg_queue.c: the spool and delivery */
STORE_ENTRY(queue_take) store_pg_queue_take;
STORE_ENTRY(lease_renew) store_pg_lease_renew;
STORE_ENTRY(lease_release) store_pg_lease_release;
STORE_ENTRY(msg_load) store_pg_msg_load;
STORE_ENTRY(msg_drop) store_pg_msg_drop;
STORE_ENTRY(msg_change) store_pg_msg_change;
STORE_ENTRY(queue_walk) store_pg_queue_walk;

/* store_pg_wait.c: commits that wait for replication, held, voided, settled */
int store_pg_repl_check(struct pg_store *st, PGconn *c);	/* waits for replication: keep it */
#define PG_LOCAL_BEGIN	"BEGIN; SET LOCAL synchronous_commit = local"	/* not waiting for the standby */
/*
 * PG_LOCAL_COMMIT - a condition, always true, that makes the transaction
 * of the autocommit statement it is in commit with synchronous_commit =
 * local (SET LOCAL's effect, no round trip more): evaluated before any
 * row the statement writes. For writes that promise no client anything:
 * a lease taken back, renewed or given up, a node's slot (store_pg.c)
 */
#define PG_LOCAL_COMMIT	"(SELECT set_config('synchronous_commit', 'local', true)) IS NOT NULL"
int store_pg_end(struct pg_store *st, PGconn *c, int err, PGresult **r, const char *what);
void store_pg_repl_note(struct pg_store *st, PGconn *c, int waits);
void store_pg_repl_set(struct pg_store *st, PGconn *c, int waits);	/* the same, mu held */
void store_pg_reap(struct pg_store *st);	/* mu held: close kept connections whose wait ended */
#define PG_LOOK_US	(1000000LL)	/* a COMMIT without an answer this long is looked at */
#define PG_SLICE_MS	250
int store_pg_side_run(struct pg_store *st, int local, const char *sql, struct pg_params *p,
		      PGresult **r, const char *what);	/* beside a connection that hangs */
int store_pg_backend_param(PGconn *c, struct pg_params *p);	/* PG_BACKEND_IS's $1, $2 */
int store_pg_commit_hold(struct pg_txn *t);
#define PG_NOT_KNOWN	1	/* store_pg_read_back(): the database could not be asked */
int store_pg_commit_resolve(struct pg_txn *t);
void store_pg_voids_settle(struct pg_store *st);

/* store_pg_decide.c: a COMMIT's outcome decided without its answer */
int store_pg_delivery_decided(struct pg_txn *t);	/* 0, STORE_EAGAIN, STORE_ELEASE */
int store_pg_replays_read_back(struct pg_txn *t);	/* a batch of replays only: 0, STORE_EAGAIN */
extern const char store_pg_sql_key_locks[];	/* $1's locks, waited for: store_pg_pend.c's too */

/* store_pg_stats.c: the figures */
STORE_ENTRY(stats) store_pg_stats;
/* store_pg_wait.c's, shared with store_pg_pend.c */
extern const char store_pg_sql_void[];
int store_pg_backend_xid(struct pg_store *st, PGconn *c, int pid, int64_t started, int tries,
			 int64_t *xid);	/* a backend's transaction: 1, 0 none, -1; c NULL: beside */
enum pg_xact { XACT_UNKNOWN, XACT_COMMITTED, XACT_ABORTED, XACT_RUNNING };
int store_pg_xact(struct pg_store *st, PGconn *c, int64_t xid);	/* XACT_*, -1; c NULL: beside */

/* store_pg_pend.c: batches answered 451 while the database could not be asked, settled first */
void store_pg_pend_add(struct pg_txn *t, int read);	/* kept; read: only its void failed */
int store_pg_pend_settle(struct pg_store *st, PGconn *c, int64_t deadline);	/* on c, first */
int store_pg_pend_wait(struct pg_store *st, int64_t deadline);	/* another's settling */
void store_pg_pend_close(struct pg_store *st);	/* one bounded try, else each QID logged */
void store_pg_pend_free(struct pg_store *st);

/* store_pg_revive.c: a verdict on this node's mark undone */
STORE_ENTRY(msg_revive) store_pg_msg_revive;

/* store_pg_hist.c: stories and keys */
STORE_ENTRY(story_get) store_pg_story_get;
STORE_ENTRY(key_qids) store_pg_key_qids;
STORE_ENTRY(key_forget) store_pg_key_forget;
STORE_ENTRY(hist_count) store_pg_hist_count;
STORE_ENTRY(hist_expire) store_pg_hist_expire;

#endif
