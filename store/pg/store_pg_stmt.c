/*
 * NAME
 *	store_pg_stmt 3
 * SUMMARY
 *	the statements a connection has prepared, and what its pipeline owes
 * SYNOPSIS
 *	#include "store/pg/store_pg_int.h"
 * DESCRIPTION
 *	The backend's statements have fixed texts (a batch of any size is a
 *	few arrays, store_pg_wire.c), so each is parsed, analysed and planned
 *	the same way every time: more than half of the server's time per
 *	message, unprepared. A connection prepares each statement with
 *	parameters the first time it sends it, and sends its name from then
 *	on; the server keeps the parse and, after a few executions, a generic
 *	plan.
 *
 *	The table of a connection's statements hangs on the connection
 *	itself (libpq's event procedures and instance data), so it lives and
 *	dies with the PGconn: a connection closed and opened again starts
 *	with none, as its new server session does. Statements are found by
 *	their text and parameter types; a name is the index in the table.
 *
 *	In a pipeline the prepare goes just before its first use, and its
 *	result comes back in that place. Each connection keeps the list of
 *	what it sent in the pipeline (a prepare, naming its statement, or a
 *	statement), so that the reader skips a prepare's result where it
 *	comes, and marks the statement prepared only if the server said so: a
 *	prepare refused, or never reached because an earlier statement of the
 *	pipeline failed, leaves it to be prepared at its next use.
 *
 *	Prepared statements belong to the server session, not to a
 *	transaction: a rollback keeps them.
 *
 *	The table also carries what the rest of the backend keeps of the
 *	connection (struct pg_conn: its store, its server backend, whether
 *	it waits for replication), read and set in place: store_pg_conn().
 * DIAGNOSTICS
 *	store_pg_stmt_attach() returns 0, or -1 when libpq cannot keep the
 *	table (the connection then sends every statement unprepared).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <libpq-events.h>

#include "../../util/buf.h"
#include "../../util/hash.h"
#include "store_pg_int.h"

enum stmt_state { STMT_NONE, STMT_SENT, STMT_READY };

struct stmt {
	uint64_t hash;			/* of the text */
	char *sql;			/* owned */
	int n;
	Oid types[PG_PARAMS_MAX];
	enum stmt_state state;
};

struct stmts {
	struct stmt *v;			/* owned: name "ir<index>" */
	size_t n, cap;
	int *owed;			/* owned: what the pipeline owes, in order; >= 0: a prepare of v[i] */
	size_t head, n_owed, cap_owed;
	struct pg_conn conn;		/* what the rest of the backend keeps of it */
};

/* stmts_free - release a connection's table */
static void stmts_free(struct stmts *d)
{
	size_t i;

	if (d == NULL)
		return;
	for (i = 0; i < d->n; i++)
		free(d->v[i].sql);
	free(d->v);
	free(d->owed);
	free(d);
}

/*
 * stmt_event - libpq's events: the table goes with the connection (none
 * is reset: a connection lost is closed, and a new one has a table of its
 * own)
 */
static int stmt_event(PGEventId id, void *info, void *pass)
{
	(void) pass;
	if (id == PGEVT_CONNDESTROY)
		stmts_free(PQinstanceData(((PGEventConnDestroy *) info)->conn, stmt_event));
	return 1;
}

/* store_pg_stmt_attach - give a new connection an empty table; 0 or -1 */
int store_pg_stmt_attach(PGconn *c)
{
	struct stmts *d = xcalloc(1, sizeof(*d));

	if (PQregisterEventProc(c, stmt_event, "idemrelay statements", NULL) != 1
	    || PQsetInstanceData(c, stmt_event, d) != 1) {
		free(d);
		return -1;
	}
	return 0;
}

/* stmts_of - a connection's table, or NULL */
static struct stmts *stmts_of(PGconn *c)
{
	return PQinstanceData(c, stmt_event);
}

/*
 * store_pg_stmt_find - the statement of this text and these parameter
 * types on c, added unprepared if new; its name in name, and in *ready
 * whether it was prepared or its prepare sent. -1 if c has no table or
 * p is NULL: a statement sent once or seldom (the schema's, a ROLLBACK).
 * A statement without parameters is prepared when given an empty p:
 * BEGIN, COMMIT and the transaction's id go with every batch, and need
 * not be parsed each time.
 */
int store_pg_stmt_find(PGconn *c, const char *sql, const struct pg_params *p,
		       char name[PG_STMT_NAME], int *ready)
{
	struct stmts *d = stmts_of(c);
	uint64_t h;
	size_t i;
	struct stmt *s;

	if (d == NULL || p == NULL)
		return -1;
	h = hash_fnv(HASH_FNV_INIT, sql, strlen(sql));
	for (i = 0; i < d->n; i++) {
		s = &d->v[i];
		if (s->hash == h && s->n == p->n
		    && memcmp(s->types, p->types, sizeof(Oid) * (size_t) p->n) == 0
		    && strcmp(s->sql, sql) == 0)
			break;
	}
	if (i == d->n) {
		d->v = store_pg_grow(d->v, d->n, &d->cap, sizeof(*d->v));
		s = &d->v[d->n++];
		memset(s, 0, sizeof(*s));
		s->hash = h;
		s->sql = xstrdup(sql);
		s->n = p->n;
		memcpy(s->types, p->types, sizeof(Oid) * (size_t) p->n);
	}
	snprintf(name, PG_STMT_NAME, "ir%zu", i);
	*ready = s->state != STMT_NONE;
	return (int) i;
}

/* store_pg_stmt_prepared - statement i's prepare succeeded (ok) or not */
void store_pg_stmt_prepared(PGconn *c, int i, int ok)
{
	struct stmts *d = stmts_of(c);

	if (d != NULL && i >= 0 && (size_t) i < d->n)
		d->v[i].state = ok ? STMT_READY : STMT_NONE;
}

/* store_pg_stmt_sent - queued in c's pipeline: statement i's prepare, or a statement (-1) */
void store_pg_stmt_sent(PGconn *c, int i)
{
	struct stmts *d = stmts_of(c);

	if (d == NULL)
		return;
	if (i != PG_OWED_STMT)
		d->v[i].state = STMT_SENT;
	d->owed = store_pg_grow(d->owed, d->n_owed, &d->cap_owed, sizeof(*d->owed));
	d->owed[d->n_owed++] = i;
}

/*
 * store_pg_stmt_owed - what c's pipeline owes next: a prepare (its
 * statement's index, >= 0), a statement (-1), or nothing (-2); with pay,
 * that entry is being read, and the one after it is owed from now on
 */
int store_pg_stmt_owed(PGconn *c, int pay)
{
	struct stmts *d = stmts_of(c);

	if (d == NULL || d->head >= d->n_owed)
		return -2;
	return d->owed[pay ? d->head++ : d->head];
}

/*
 * store_pg_stmt_settled - the pipeline ended: a prepare whose result
 * never came is not known to have been made
 */
void store_pg_stmt_settled(PGconn *c)
{
	struct stmts *d = stmts_of(c);
	size_t i;

	if (d == NULL)
		return;
	for (i = d->head; i < d->n_owed; i++)
		if (d->owed[i] >= 0 && d->v[d->owed[i]].state == STMT_SENT)
			d->v[d->owed[i]].state = STMT_NONE;
	d->head = d->n_owed = 0;
}

/* store_pg_conn - what the backend keeps of c (store_pg_int.h), or NULL if it has no table */
struct pg_conn *store_pg_conn(PGconn *c)
{
	struct stmts *d = stmts_of(c);

	return d ? &d->conn : NULL;
}
