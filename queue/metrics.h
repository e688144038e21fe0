/*
 * NAME
 *	metrics 3h
 * SUMMARY
 *	counters and histograms, and the Prometheus /metrics listener
 * DESCRIPTION
 *	Counters and histograms are process-wide C11 atomics: the event loop,
 *	the commit thread and the delivery threads bump them without a lock
 *	(metrics_inc, metrics_observe, and the two hooks named after where
 *	they are called). Gauges (queue depth, oldest message, claims, map
 *	usage) are read from the store when scraped.
 *
 *	metrics_start() binds metrics.address:metrics.port and serves
 *	GET /metrics (Prometheus text format 0.0.4) on a thread of its own,
 *	one short connection at a time; anything else gets 404. It returns
 *	NULL when no metrics listener is configured.
 */
#ifndef QUEUE_METRICS_H
#define QUEUE_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "../conf/conf.h"
#include "../store/store.h"
#include "../util/buf.h"

enum metrics_counter {
	METRICS_SUBMISSIONS,		/* end of DATA reached */
	METRICS_ACCEPTED,		/* 250 with a new QID (partial included) */
	METRICS_DUPLICATES,		/* 250 with the original QID */
	METRICS_PARTIAL,		/* some recipients already claimed */
	METRICS_MISMATCHES,		/* same key, other content */
	METRICS_SHADOW,			/* shadow mode: would have been a duplicate */
	METRICS_SENT,			/* per recipient and attempt */
	METRICS_DEFERRED,
	METRICS_BOUNCED,
	METRICS_UNCONFIRMED,
	METRICS_REVIVED,		/* messages another node finished unconfirmed, queued again */
	METRICS_CLIENT_COUNT_REFUSED,	/* connections past limits.client_connections */
	METRICS_CLIENT_RATE_REFUSED,	/* connections past limits.client_connection_rate */
	METRICS_ERRORS_CLOSED,		/* sessions closed for too many errors */
	METRICS_CLIENT_AUTH_REFUSED,	/* AUTHs past limits.client_auth_rate */
	METRICS_N_COUNTERS
};

enum metrics_histogram {
	METRICS_COMMIT_BATCH,		/* submissions per write transaction */
	METRICS_ACCEPT_LATENCY,		/* end of DATA to reply, microseconds */
	METRICS_DELIVERY_LATENCY,	/* acceptance to sent, microseconds */
	METRICS_N_HISTOGRAMS
};

/* the upstream's limits and throttling now (deliver/deliver_rate.c) */
struct metrics_upstream {
	int on;				/* delivery upstream runs (not a Maildir); a route
					 * is shown once set, whatever its on */
	double rate;			/* messages a second allowed now; 0: no limit */
	int concurrency;		/* sessions allowed now */
	int active;			/* sessions running */
	int throttled;			/* throttling feedback in force */
	int nodes;			/* nodes alive sharing upstream.rate */
	uint64_t episodes;		/* throttling episodes since start */
};

/* a route's upstream group (conf_route.c): the same, under its name */
#define METRICS_ROUTES		32	/* routes shown, at most */
struct metrics_route {
	char name[65];
	struct metrics_upstream u;
};

struct metrics_snapshot {
	uint64_t counters[METRICS_N_COUNTERS];
	struct metrics_upstream upstream;	/* the default upstream's */
	struct metrics_route routes[METRICS_ROUTES];
	size_t n_routes;
};

void metrics_inc(enum metrics_counter c);
void metrics_observe(enum metrics_histogram h, int64_t v);

/* metrics_answered - relay/submit.c: a submission was answered (outcome is enum commit_outcome) */
void metrics_answered(int outcome, int shadow_hit, int64_t latency_us);
/* metrics_delivered - deliver/deliver_record.c: one recipient's logged status ("sent", "deferred", ...) */
void metrics_delivered(const char *status, int64_t since_accept_us);

/*
 * metrics_upstream_set - deliver/deliver_rate.c: an upstream group's state
 * changed, the default upstream's (route "") or a route's (the first
 * METRICS_ROUTES)
 */
void metrics_upstream_set(const char *route, const struct metrics_upstream *u);

void metrics_snapshot(struct metrics_snapshot *s);

/* metrics_name - a counter's name in JSON output ("accepted", ...) */
const char *metrics_name(enum metrics_counter c);

struct metrics;

struct metrics *metrics_start(const struct conf *c, struct store *st);
void metrics_stop(struct metrics *m);		/* NULL-safe */

#endif
