/*
 * NAME
 *	store_pg_wire 3
 * SUMMARY
 *	PostgreSQL's binary formats: parameters, arrays, results, pipelines
 * SYNOPSIS
 *	#include "store/pg/store_pg_int.h"
 * DESCRIPTION
 *	Every statement goes with binary parameters and binary results:
 *	a message's data is sent as the bytes it is (no escaping, no hex,
 *	binary-safe), integers as 4 or 8 bytes in network order, booleans
 *	as one byte. A batch's rows go as one array per column, unnested on
 *	the server (INSERT ... SELECT FROM unnest($1, $2, ...)), so that a
 *	batch of any size is one statement with a fixed text, not a
 *	statement per row or a text built per batch.
 *
 *	An array's binary form is a header (dimensions, a has-null flag,
 *	the element type, then size and lower bound of its one dimension)
 *	and each element as a 4-byte length (-1 for NULL) and its bytes.
 *	The elements are gathered first, the header written when the array
 *	becomes a parameter.
 *
 *	A pipeline sends several statements and one sync in one write, then
 *	reads each statement's result in order (libpq pipeline mode): a
 *	batch's transaction costs one round trip.
 *
 *	Every result is waited for at most PG_RESULT_US; a server that does
 *	not answer by then loses the connection (closed by the pool), and
 *	the caller gets STORE_EAGAIN, or an unknown outcome read back. A
 *	connection whose backend waits for replication then is kept, not
 *	closed (store_pg_wait.c), and gives no result either.
 * DIAGNOSTICS
 *	store_pg_exec() and store_pg_pipe_next() return 0 or a STORE_E*
 *	code through store_pg_result() (store_pg.c).
 */
#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "../../util/buf.h"
#include "../../util/clock.h"
#include "../../util/log.h"
#include "store_pg_int.h"

#define ARR_HEADER	20	/* dimensions, has-null, element type, size, lower bound */

/* be - v in network order at x (4 bytes) */
static void be(void *x, uint32_t v)
{
	v = htobe32(v);
	memcpy(x, &v, 4);
}

/* put_be - the low n bytes (4 or 8) of v in network order, appended */
static void put_be(struct buf *b, uint64_t v, int n)
{
	v = htobe64(v << (64 - 8 * n));
	buf_append(b, &v, (size_t) n);
}

/* store_pg_params_init - no parameters yet */
void store_pg_params_init(struct pg_params *p)
{
	memset(p, 0, sizeof(*p));
}

/* store_pg_params_free - release every parameter's bytes */
void store_pg_params_free(struct pg_params *p)
{
	int i;

	for (i = 0; i < p->n; i++)
		buf_free(&p->own[i]);
	p->n = 0;
}

/* param_add - the next parameter, of type oid, its bytes in p->own; NULL when full */
static struct buf *param_add(struct pg_params *p, Oid oid)
{
	struct buf *b;

	if (p->n >= PG_PARAMS_MAX)
		abort();		/* a statement of this backend with too many: a bug */
	b = &p->own[p->n];
	memset(b, 0, sizeof(*b));
	p->types[p->n] = oid;
	p->fmts[p->n] = 1;
	return b;
}

/* param_done - the parameter's bytes are in place */
static void param_done(struct pg_params *p, int null)
{
	struct buf *b = &p->own[p->n];

	p->vals[p->n] = null ? NULL : b->data ? b->data : "";
	p->lens[p->n] = null ? 0 : (int) b->len;
	p->n++;
}

/* store_pg_p_i64 - a bigint */
void store_pg_p_i64(struct pg_params *p, int64_t v)
{
	put_be(param_add(p, PG_OID_INT8), (uint64_t) v, 8);
	param_done(p, 0);
}

/* store_pg_p_i32 - an int */
void store_pg_p_i32(struct pg_params *p, int32_t v)
{
	put_be(param_add(p, PG_OID_INT4), (uint32_t) v, 4);
	param_done(p, 0);
}

/* store_pg_p_text - a text, or NULL */
void store_pg_p_text(struct pg_params *p, const char *s)
{
	struct buf *b = param_add(p, PG_OID_TEXT);

	if (s)
		buf_append(b, s, strlen(s));
	param_done(p, s == NULL);
}

/* store_pg_p_bytes - a bytea, or NULL */
void store_pg_p_bytes(struct pg_params *p, const void *v, size_t len)
{
	struct buf *b = param_add(p, PG_OID_BYTEA);

	if (v)
		buf_append(b, v, len);
	param_done(p, v == NULL);
}

/* array_oid - the array type of an element type */
static Oid array_oid(Oid elem)
{
	switch (elem) {
	case PG_OID_BOOL:
		return 1000;
	case PG_OID_BYTEA:
		return 1001;
	case PG_OID_INT4:
		return 1007;
	case PG_OID_TEXT:
		return 1009;
	default:
		return 1016;		/* int8 */
	}
}

/* arr_room - the room for the header at the front of an array's first bytes */
static void arr_room(struct pg_arr *a)
{
	static const char room[ARR_HEADER];

	if (a->b.len == 0)
		buf_append(&a->b, room, sizeof(room));
}

/*
 * store_pg_p_arr - an array, from the elements gathered in a; returns
 * how many. a is emptied, owning nothing (ready for more elements;
 * store_pg_arr_free() is then a no-op). The elements' buffer becomes the
 * parameter as it is: its header goes into the room arr_room() left at
 * its front.
 */
uint32_t store_pg_p_arr(struct pg_params *p, struct pg_arr *a)
{
	struct buf *b = param_add(p, array_oid(a->elem));
	size_t off = a->n ? 0 : 8;	/* an empty array has no dimension: 12 bytes */
	uint32_t n = a->n;
	Oid elem = a->elem;

	arr_room(a);
	be(a->b.data + off, a->n ? 1 : 0);
	be(a->b.data + off + 4, (uint32_t) a->has_null);
	be(a->b.data + off + 8, a->elem);
	if (a->n) {
		be(a->b.data + 12, a->n);
		be(a->b.data + 16, 1);	/* lower bound */
	}
	*b = a->b;			/* moved, not copied: it may hold megabytes of data */
	p->vals[p->n] = b->data + off;
	p->lens[p->n] = (int) (b->len - off);
	p->n++;
	memset(a, 0, sizeof(*a));
	a->elem = elem;
	return n;
}

/* store_pg_p_qids - QIDs as a text[] */
void store_pg_p_qids(struct pg_params *p, char (*qids)[STORE_QID_SIZE], size_t n)
{
	struct pg_arr a;
	size_t i;

	store_pg_arr_init(&a, PG_OID_TEXT);
	for (i = 0; i < n; i++)
		store_pg_a_text(&a, qids[i]);
	store_pg_p_arr(p, &a);
}

/* store_pg_arr_init - an empty array of elem (PG_OID_*); its bytes come with its first element */
void store_pg_arr_init(struct pg_arr *a, Oid elem)
{
	memset(a, 0, sizeof(*a));
	a->elem = elem;
}

/* store_pg_arr_free - release the gathered elements */
void store_pg_arr_free(struct pg_arr *a)
{
	buf_free(&a->b);
	memset(a, 0, sizeof(*a));
}

/*
 * elem - the next element of an array: the room for the header before
 * the first, then the element's length (-1: NULL); its bytes follow
 */
static struct buf *elem(struct pg_arr *a, uint32_t len)
{
	arr_room(a);
	put_be(&a->b, len, 4);
	a->n++;
	return &a->b;
}

/* store_pg_a_i64 - append a bigint */
void store_pg_a_i64(struct pg_arr *a, int64_t v)
{
	put_be(elem(a, 8), (uint64_t) v, 8);
}

/* store_pg_a_i32 - append an int */
void store_pg_a_i32(struct pg_arr *a, int32_t v)
{
	put_be(elem(a, 4), (uint32_t) v, 4);
}

/* store_pg_a_bool - append a boolean */
void store_pg_a_bool(struct pg_arr *a, int v)
{
	buf_putc(elem(a, 1), v ? 1 : 0);
}

/* store_pg_a_bytes - append a bytea (or text's bytes), or NULL */
void store_pg_a_bytes(struct pg_arr *a, const void *v, size_t len)
{
	if (v == NULL) {
		elem(a, 0xffffffffu);
		a->has_null = 1;
	} else {
		buf_append(elem(a, (uint32_t) len), v, len);
	}
}

/* store_pg_a_text - append a text, or NULL */
void store_pg_a_text(struct pg_arr *a, const char *s)
{
	store_pg_a_bytes(a, s, s ? strlen(s) : 0);
}

/*
 * store_pg_cut - a connection whose server did not answer (what) within
 * limit us: its socket shut, so that libpq sees the end of it and the
 * pool closes it
 */
void store_pg_cut(PGconn *c, const char *what, int64_t limit)
{
	msg_warn("store: no answer %s within %.1f s: connection closed", what, (double) limit / 1e6);
	shutdown(PQsocket(c), SHUT_RDWR);
	(void) PQconsumeInput(c);
}

/*
 * ready - wait until the next result can be read without blocking, at
 * most PG_RESULT_US: a server that stopped answering (a network
 * that drops packets) costs the caller a bounded wait and the
 * connection, never a hang. A connection whose backend waits for
 * replication is kept instead (closing it would not end the wait,
 * store_pg_wait.c), and gives no result: 1. Else 0, the connection cut
 * or failed if it has to be (PQgetResult says so).
 */
static int ready(PGconn *c)
{
	int64_t deadline = clock_mono_us() + store_pg_result_limit(), left;
	struct pg_conn *n = store_pg_conn(c);
	struct pollfd p;

	if (n != NULL && (n->flags & PG_CONN_KEPT))
		return 1;
	while (PQisBusy(c)) {
		if ((left = deadline - clock_mono_us()) <= 0 && n != NULL && n->owner != NULL
		    && store_pg_repl_check(n->owner, c)) {
			store_pg_repl_note(n->owner, c, 1);
			n->flags |= PG_CONN_KEPT;
			return 1;
		}
		p.fd = PQsocket(c);
		p.events = POLLIN;
		p.revents = 0;
		if (left <= 0 || (poll(&p, 1, (int) ((left + 999) / 1000)) < 0 && errno != EINTR)) {
			store_pg_cut(c, "from PostgreSQL", store_pg_result_limit());
			return 0;
		}
		if (PQconsumeInput(c) != 1)
			return 0;	/* the connection failed: PQgetResult says so */
	}
	return 0;
}

/*
 * next - the next result, waited for within the deadline; NULL at the
 * end. A connection cut or failed gives libpq's account of it, then NULL.
 */
static PGresult *next(PGconn *c)
{
	return ready(c) ? NULL : PQgetResult(c);	/* kept: PQgetResult would block */
}

/* last - the last result of what was sent; NULL if nothing came */
static PGresult *last(PGconn *c)
{
	PGresult *r = next(c), *x;

	while (r && (x = next(c)) != NULL) {
		PQclear(r);
		r = x;
	}
	return r;
}

/* store_pg_simple - statements without parameters in one string (the simple protocol) */
int store_pg_simple(struct pg_store *st, PGconn *c, const char *sql, const char *what)
{
	PGresult *r = PQsendQuery(c, sql) == 1 ? last(c) : NULL;
	int err = store_pg_result(st, c, r, what);

	PQclear(r);
	return err;
}

/* store_pg_exec - one statement, binary in and out; *out is the caller's to PQclear */
int store_pg_exec(struct pg_store *st, PGconn *c, const char *sql, struct pg_params *p,
		  PGresult **out, const char *what)
{
	PGresult *r = store_pg_send(c, sql, p) == 0 ? last(c) : NULL;
	int err;

	*out = NULL;
	if ((err = store_pg_result(st, c, r, what)) != 0) {
		PQclear(r);
		return err;
	}
	*out = r;
	return 0;
}

/*
 * prepare_now - outside a pipeline: prepare statement i and wait for
 * the answer (once per connection and statement); 0 prepared, -1 not
 */
static int prepare_now(PGconn *c, int i, const char *name, const char *sql,
		       const struct pg_params *p)
{
	PGresult *r = PQsendPrepare(c, name, sql, p->n, p->types) == 1 ? last(c) : NULL;
	int ok = r != NULL && PQresultStatus(r) == PGRES_COMMAND_OK;

	PQclear(r);
	store_pg_stmt_prepared(c, i, ok);
	return ok ? 0 : -1;
}

/*
 * store_pg_send - send one statement, or queue it in a pipeline; 0 or
 * -1 (the connection failed). A statement with parameters goes by the
 * name the connection prepared it under (store_pg_stmt.c): prepared
 * first, in a pipeline just before it. A prepare refused outside a
 * pipeline (a transaction already failed) leaves the statement to go
 * unnamed, so that its own error is the one reported.
 */
int store_pg_send(PGconn *c, const char *sql, struct pg_params *p)
{
	int pipe = PQpipelineStatus(c) != PQ_PIPELINE_OFF, ok, ready;
	char name[PG_STMT_NAME];
	int i = store_pg_stmt_find(c, sql, p, name, &ready);

	if (i >= 0 && !ready) {
		if (!pipe) {
			if (prepare_now(c, i, name, sql, p) != 0) {
				if (PQstatus(c) != CONNECTION_OK)
					return -1;
				i = -1;
			}
		} else if (PQsendPrepare(c, name, sql, p->n, p->types) == 1) {
			store_pg_stmt_sent(c, i);
		} else {
			return -1;
		}
	}
	if (i >= 0)
		ok = PQsendQueryPrepared(c, name, p->n, p->vals, p->lens, p->fmts, 1) == 1;
	else
		ok = PQsendQueryParams(c, sql, p ? p->n : 0, p ? p->types : NULL,
				       p ? p->vals : NULL, p ? p->lens : NULL,
				       p ? p->fmts : NULL, 1) == 1;
	if (ok && pipe)
		store_pg_stmt_sent(c, PG_OWED_STMT);
	return ok ? 0 : -1;
}

/*
 * entry - the results of the entry the pipeline owes next, up to the
 * NULL that ends them: the first, the rest cleared. A prepare's result
 * marks its statement prepared or not.
 */
static PGresult *entry(PGconn *c)
{
	int owed = store_pg_stmt_owed(c, 1);
	PGresult *r = next(c), *extra;

	while (r && (extra = next(c)) != NULL)	/* one result per statement here */
		PQclear(extra);
	if (owed >= 0)
		store_pg_stmt_prepared(c, owed, r != NULL && PQresultStatus(r) == PGRES_COMMAND_OK);
	return r;
}

/*
 * store_pg_pipe_next - the next statement's result in a pipeline (and
 * the NULL that ends it); *out, if set, is the caller's to PQclear
 */
int store_pg_pipe_next(struct pg_store *st, PGconn *c, PGresult **out, const char *what)
{
	PGresult *r, *failed = NULL;
	int err;

	*out = NULL;
	/* a prepare's result comes before its statement's: its error is the statement's */
	while (store_pg_stmt_owed(c, 0) >= 0 && PQstatus(c) == CONNECTION_OK) {
		r = entry(c);
		if (failed == NULL && r != NULL && PQresultStatus(r) == PGRES_FATAL_ERROR)
			failed = r;
		else
			PQclear(r);
	}
	r = entry(c);
	if (failed) {
		PQclear(r);	/* aborted with the pipeline */
		r = failed;
	}
	if ((err = store_pg_result(st, c, r, what)) != 0) {
		PQclear(r);
		return err;
	}
	*out = r;
	return 0;
}

/* store_pg_pipe_end - read up to the sync and leave pipeline mode; 0 or -1 */
int store_pg_pipe_end(PGconn *c)
{
	PGresult *r;
	int nulls = 0, sync = 0;

	while (store_pg_stmt_owed(c, 0) != -2 && PQstatus(c) == CONNECTION_OK)
		PQclear(entry(c));	/* what the caller did not read, prepares included */
	store_pg_stmt_settled(c);
	while (!sync && nulls < 64) {
		if ((r = next(c)) == NULL) {
			if (PQstatus(c) != CONNECTION_OK)
				break;
			nulls++;	/* the end of an aborted statement's results */
			continue;
		}
		sync = PQresultStatus(r) == PGRES_PIPELINE_SYNC;
		PQclear(r);
	}
	if (!sync || PQexitPipelineMode(c) != 1)
		return -1;
	return 0;
}

/* store_pg_int - an int2, int4, int8 or bool column in binary; NULL or odd: 0 */
int64_t store_pg_int(const PGresult *r, int row, int col)
{
	const char *v = PQgetvalue(r, row, col);
	int len = PQgetlength(r, row, col);
	uint64_t x = 0;

	if (PQgetisnull(r, row, col) || (len != 1 && len != 2 && len != 4 && len != 8))
		return 0;
	if (len == 1)
		return v[0] != 0;
	memcpy(&x, v, (size_t) len);
	x = be64toh(x) >> (64 - 8 * len);
	if (len == 2)
		return (int16_t) x;
	if (len == 4)
		return (int32_t) x;
	return (int64_t) x;
}

/* store_pg_strdup - a text column as an owned string; NULL stays NULL */
char *store_pg_strdup(const PGresult *r, int row, int col)
{
	if (PQgetisnull(r, row, col))
		return NULL;
	return xstrndup(PQgetvalue(r, row, col), (size_t) PQgetlength(r, row, col));
}

/* store_pg_copy - a bytea column of exactly len bytes into out; 0 or STORE_EINVAL */
int store_pg_copy(const PGresult *r, int row, int col, void *out, size_t len)
{
	if (PQgetisnull(r, row, col) || (size_t) PQgetlength(r, row, col) != len)
		return STORE_EINVAL;
	memcpy(out, PQgetvalue(r, row, col), len);
	return 0;
}

/* store_pg_qid - a QID column; 0 or STORE_EINVAL */
int store_pg_qid(const PGresult *r, int row, int col, char qid[STORE_QID_SIZE])
{
	int len = PQgetlength(r, row, col);

	qid[0] = 0;
	if (PQgetisnull(r, row, col) || len <= 0 || len >= STORE_QID_SIZE)
		return STORE_EINVAL;
	memcpy(qid, PQgetvalue(r, row, col), (size_t) len);
	qid[len] = 0;
	return 0;
}

/* store_pg_key_lock - a key's advisory lock: the first 8 bytes of its hash, as a bigint */
int64_t store_pg_key_lock(const uint8_t keyhash[STORE_HASH_LEN])
{
	uint64_t x;

	memcpy(&x, keyhash, 8);
	return (int64_t) be64toh(x);
}
