/*
 * NAME
 *	metrics 3
 * SUMMARY
 *	atomic counters and histograms; Prometheus text over a tiny HTTP server
 * DESCRIPTION
 *	Each histogram keeps one atomic count per bucket (not cumulative, so
 *	an observation is one increment) and an atomic integer sum in its
 *	own unit (microseconds for latencies); rendering accumulates the
 *	buckets and converts the unit. Relaxed ordering is enough: a scrape
 *	may see one counter a moment ahead of another, as Prometheus allows.
 *
 *	The listener is deliberately small: HTTP/1.0, one request per
 *	connection, on a thread of its own (util/admin.h: several clients at
 *	once, a two-second budget in all to send the request head). It
 *	never touches the SMTP event loop.
 * DIAGNOSTICS
 *	A listener that cannot be bound is fatal at start-up, like the SMTP
 *	listeners. Failures while serving are logged as warnings.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/admin.h"
#include "../util/clock.h"
#include "../util/listen.h"
#include "../util/log.h"
#include "commit.h"
#include "metrics.h"

#define METRICS_BACKLOG	64
#define METRICS_MAX_BUCKETS	16

static _Atomic uint64_t counters[METRICS_N_COUNTERS];

/* the upstream's state: several fields that go together, so a lock */
static pthread_mutex_t upstream_lock = PTHREAD_MUTEX_INITIALIZER;
static struct metrics_upstream upstream;
static struct metrics_route routes[METRICS_ROUTES];	/* under upstream_lock too */
static size_t n_routes;

struct histogram {
	const char *name, *help;
	const int64_t *bounds;		/* upper bounds, in unit */
	size_t n_bounds;		/* buckets: n_bounds + 1 (+Inf) */
	double unit;			/* divide by this to render */
	_Atomic uint64_t buckets[METRICS_MAX_BUCKETS];
	_Atomic uint64_t count, sum;
};

static const int64_t batch_bounds[] = { 1, 2, 4, 8, 16, 32, 64, 128, 256, 512 };
static const int64_t accept_bounds[] = {	/* microseconds: 0.5 ms .. 10 s */
	500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000,
	1000000, 2500000, 5000000, 10000000
};
static const int64_t delivery_bounds[] = {	/* microseconds: 10 ms .. 1 day */
	10000, 50000, 100000, 500000, 1000000, 5000000, 10000000, 30000000,
	60000000, 300000000, 900000000, 3600000000LL, 14400000000LL, 86400000000LL
};

#define N(a)	(sizeof(a) / sizeof((a)[0]))

_Static_assert(N(batch_bounds) < METRICS_MAX_BUCKETS && N(accept_bounds) < METRICS_MAX_BUCKETS
	       && N(delivery_bounds) < METRICS_MAX_BUCKETS, "a histogram has too many buckets");

static struct histogram hists[METRICS_N_HISTOGRAMS] = {
	[METRICS_COMMIT_BATCH] = {
		.name = "idemrelay_commit_batch_size",
		.help = "Submissions decided in one group-commit write transaction.",
		.bounds = batch_bounds, .n_bounds = N(batch_bounds), .unit = 1 },
	[METRICS_ACCEPT_LATENCY] = {
		.name = "idemrelay_accept_latency_seconds",
		.help = "From the end of DATA to the reply (durable commit or duplicate lookup).",
		.bounds = accept_bounds, .n_bounds = N(accept_bounds), .unit = 1e6 },
	[METRICS_DELIVERY_LATENCY] = {
		.name = "idemrelay_delivery_latency_seconds",
		.help = "From acceptance to a recipient's successful delivery upstream.",
		.bounds = delivery_bounds, .n_bounds = N(delivery_bounds), .unit = 1e6 },
};

static const struct {
	const char *name, *help, *label;
} counter_info[METRICS_N_COUNTERS] = {
	[METRICS_SUBMISSIONS] = { "submissions", "Messages whose DATA ended (every outcome).", 0 },
	[METRICS_ACCEPTED] = { "accepted", "Messages queued under a new QID (partial duplicates included).", 0 },
	[METRICS_DUPLICATES] = { "duplicates", "Submissions answered with the original QID, nothing stored.", 0 },
	[METRICS_PARTIAL] = { "partial_duplicates", "Submissions with some recipients already claimed; the rest queued.", 0 },
	[METRICS_MISMATCHES] = { "mismatches", "Submissions reusing a key for different content.", 0 },
	[METRICS_SHADOW] = { "shadow_duplicates", "Shadow mode: duplicates or mismatches detected and relayed anyway.", 0 },
	[METRICS_SENT] = { "sent", 0, "sent" },
	[METRICS_DEFERRED] = { "deferred", 0, "deferred" },
	[METRICS_BOUNCED] = { "bounced", 0, "bounced" },
	[METRICS_UNCONFIRMED] = { "unconfirmed", 0, "unconfirmed" },
	[METRICS_REVIVED] = { "revived", "Messages another node had finished unconfirmed on this "
			      "node's inflight mark, which sent no final dot: queued again.", 0 },
	[METRICS_CLIENT_COUNT_REFUSED] = { "client_connections_refused", "Connections refused: "
					   "the client had limits.client_connections open.", 0 },
	[METRICS_CLIENT_RATE_REFUSED] = { "client_rate_refused", "Connections refused: the client "
					  "had opened limits.client_connection_rate this minute.", 0 },
	[METRICS_ERRORS_CLOSED] = { "errors_closed", "Sessions closed for too many errors "
				    "(limits.hard_errors, junk commands, failed AUTH).", 0 },
	[METRICS_CLIENT_AUTH_REFUSED] = { "client_auth_refused", "AUTH attempts refused: the "
					  "client had made limits.client_auth_rate this minute.", 0 },
};

/* what the store said for a scrape (metrics_gauges_read()), and when the daemon started */
struct metrics_gauges {
	int store_ok;			/* 0: the store could not be read: s.reach alone is set */
	unsigned caps;			/* store_caps(): STORE_CAP_SHARED, STORE_CAP_OWN_SPACE */
	struct store_stats s;
	double oldest_seconds;		/* s.oldest's age, 0 with an empty queue */
	double start_time;		/* Unix seconds */
};

struct metrics {
	struct store *st;		/* not owned */
	struct admin *admin;		/* owned: the thread and the listener */
	double start_time;
};

/* metrics_inc - one more */
void metrics_inc(enum metrics_counter c)
{
	atomic_fetch_add_explicit(&counters[c], 1, memory_order_relaxed);
}

/* metrics_observe - one observation in the histogram's unit */
void metrics_observe(enum metrics_histogram h, int64_t v)
{
	struct histogram *x = &hists[h];
	size_t i;

	if (v < 0)
		v = 0;
	for (i = 0; i < x->n_bounds && v > x->bounds[i]; i++)
		 /* void */ ;
	atomic_fetch_add_explicit(&x->buckets[i], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&x->count, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&x->sum, (uint64_t) v, memory_order_relaxed);
}

/* metrics_answered - count an answered submission by its outcome */
void metrics_answered(int outcome, int shadow_hit, int64_t latency_us)
{
	switch (outcome) {
	case COMMIT_PARTIAL:
		metrics_inc(METRICS_PARTIAL);
		/* FALLTHROUGH */
	case COMMIT_QUEUED:
		metrics_inc(METRICS_ACCEPTED);
		break;
	case COMMIT_DUPLICATE:
		metrics_inc(METRICS_DUPLICATES);
		break;
	case COMMIT_MISMATCH:
		metrics_inc(METRICS_MISMATCHES);
		break;
	default:
		break;
	}
	if (shadow_hit)
		metrics_inc(METRICS_SHADOW);
	metrics_observe(METRICS_ACCEPT_LATENCY, latency_us);
}

/* metrics_delivered - count one recipient's outcome; time the sent ones */
void metrics_delivered(const char *status, int64_t since_accept_us)
{
	enum metrics_counter c;

	for (c = METRICS_SENT; c <= METRICS_UNCONFIRMED; c++) {
		if (strcmp(status, counter_info[c].label) != 0)
			continue;
		metrics_inc(c);
		if (c == METRICS_SENT)
			metrics_observe(METRICS_DELIVERY_LATENCY, since_accept_us);
		return;
	}
}

/* metrics_name - a counter's short name */
const char *metrics_name(enum metrics_counter c)
{
	return counter_info[c].name;
}

/* metrics_upstream_set - an upstream group's limits and throttling now: the default's (""), or a route's */
void metrics_upstream_set(const char *route, const struct metrics_upstream *u)
{
	size_t i;

	pthread_mutex_lock(&upstream_lock);
	if (route[0] == 0) {
		upstream = *u;
		upstream.on = 1;
	} else {
		for (i = 0; i < n_routes && strcmp(routes[i].name, route) != 0; i++)
			continue;
		if (i == n_routes && n_routes < METRICS_ROUTES)
			snprintf(routes[n_routes++].name, sizeof(routes[i].name), "%s", route);
		if (i < n_routes)
			routes[i].u = *u;
	}
	pthread_mutex_unlock(&upstream_lock);
}

/* metrics_snapshot - copy every counter and the upstream groups */
void metrics_snapshot(struct metrics_snapshot *s)
{
	size_t i;

	memset(s, 0, sizeof(*s));
	pthread_mutex_lock(&upstream_lock);
	s->upstream = upstream;
	memcpy(s->routes, routes, sizeof(routes));
	s->n_routes = n_routes;
	pthread_mutex_unlock(&upstream_lock);
	for (i = 0; i < METRICS_N_COUNTERS; i++)
		s->counters[i] = atomic_load_explicit(&counters[i], memory_order_relaxed);
}

/* metrics_gauges_read - what the store says now */
static void metrics_gauges_read(struct store *st, struct metrics_gauges *g)
{
	memset(g, 0, sizeof(*g));
	g->caps = store_caps(st);
	g->store_ok = store_stats(st, &g->s, 0) == 0;	/* s.reach set even when the store is away */
	if (g->store_ok && g->s.oldest > 0) {
		g->oldest_seconds = (double) clock_us() / 1e6 - g->s.oldest / 1e6;
		if (g->oldest_seconds < 0)
			g->oldest_seconds = 0;
	}
}

/* render_histogram - one histogram as it is now, buckets cumulative */
static void render_histogram(struct buf *out, struct histogram *x)
{
	uint64_t acc = 0;
	size_t i;

	buf_printf(out, "# HELP %s %s\n# TYPE %s histogram\n", x->name, x->help, x->name);
	for (i = 0; i < x->n_bounds; i++) {
		acc += atomic_load_explicit(&x->buckets[i], memory_order_relaxed);
		buf_printf(out, "%s_bucket{le=\"%.10g\"} %llu\n", x->name, x->bounds[i] / x->unit,
			   (unsigned long long) acc);
	}
	acc += atomic_load_explicit(&x->buckets[x->n_bounds], memory_order_relaxed);
	buf_printf(out, "%s_bucket{le=\"+Inf\"} %llu\n", x->name, (unsigned long long) acc);
	buf_printf(out, "%s_sum %.10g\n", x->name,
		   atomic_load_explicit(&x->sum, memory_order_relaxed) / x->unit);
	buf_printf(out, "%s_count %llu\n", x->name,
		   (unsigned long long) atomic_load_explicit(&x->count, memory_order_relaxed));
}

/* sample - one metric of a type ("gauge", "counter") with its help */
static void sample(struct buf *out, const char *type, const char *name, const char *help,
		   double v)
{
	buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

#define gauge(out, name, help, v)	sample((out), "gauge", (name), (help), (v))
#define counter(out, name, help, v)	sample((out), "counter", (name), (help), (double) (v))

/* the families of an upstream group, the default upstream's and each route's */
static const struct {
	const char *name, *type, *help, *route_help;	/* route_help NULL: the upstream's only */
} group_fam[] = {
	{"rate", "gauge", "Messages a second this node may send upstream now (0: no limit).",
	 "Messages a second this node may send to the route's upstream now (0: no limit)."},
	{"concurrency", "gauge", "Upstream sessions allowed now.",
	 "The route's upstream sessions allowed now."},
	{"sessions", "gauge", "Upstream sessions running.", "The route's upstream sessions running."},
	{"throttled", "gauge", "1 while the upstream's throttling replies keep its concurrency "
	 "and rate down.", "1 while the route's upstream's throttling replies keep its "
	 "concurrency and rate down."},
	{"nodes", "gauge", "Nodes alive sharing upstream.rate.", NULL},
	{"throttled_total", "counter", "Throttling episodes since start.",
	 "The route's throttling episodes since start."},
};
#define GROUP_FAMS	(sizeof(group_fam) / sizeof(group_fam[0]))

/* group_value - a group's value of the family group_fam[f] */
static double group_value(const struct metrics_upstream *u, size_t f)
{
	double v[GROUP_FAMS] = { u->rate, u->concurrency, u->active, u->throttled, u->nodes,
		(double) u->episodes };

	return v[f];
}

/* render_family - group_fam[f] of the upstream, or of each route labelled route="NAME" */
static void render_family(struct buf *out, const struct metrics_snapshot *s, size_t f,
			  int routes)
{
	const char *pre = routes ? "idemrelay_route_upstream_" : "idemrelay_upstream_";
	size_t i;

	buf_printf(out, "# HELP %s%s %s\n# TYPE %s%s %s\n", pre, group_fam[f].name,
		   routes ? group_fam[f].route_help : group_fam[f].help, pre, group_fam[f].name,
		   group_fam[f].type);
	if (!routes)
		buf_printf(out, "%s%s %.17g\n", pre, group_fam[f].name,
			   group_value(&s->upstream, f));
	for (i = 0; routes && i < s->n_routes; i++)	/* route names are tokens */
		buf_printf(out, "%s%s{route=\"%s\"} %.17g\n", pre, group_fam[f].name,
			   s->routes[i].name, group_value(&s->routes[i].u, f));
}

/* render_groups - the upstream's limits and throttling when it runs, then the routes' */
static void render_groups(struct buf *out, const struct metrics_snapshot *s)
{
	size_t f;

	for (f = 0; s->upstream.on && f < GROUP_FAMS; f++)
		render_family(out, s, f, 0);
	for (f = 0; s->n_routes > 0 && f < GROUP_FAMS; f++)
		if (group_fam[f].route_help != NULL)
			render_family(out, s, f, 1);
}

/*
 * metrics_render - the Prometheus text exposition (format 0.0.4) of a
 * snapshot, the histograms as they are and the gauges given: it reads no
 * store, so that test_metrics pins it down
 */
static void metrics_render(struct buf *out, const struct metrics_snapshot *s,
			   const struct metrics_gauges *g)
{
	char name[96];
	size_t i;

	for (i = 0; i < METRICS_N_COUNTERS; i++)
		if (counter_info[i].label == NULL) {
			snprintf(name, sizeof(name), "idemrelay_%s_total", counter_info[i].name);
			counter(out, name, counter_info[i].help, s->counters[i]);
		}
	buf_printf(out, "# HELP idemrelay_deliveries_total Recipient delivery attempts by outcome.\n"
		   "# TYPE idemrelay_deliveries_total counter\n");
	for (i = METRICS_SENT; i <= METRICS_UNCONFIRMED; i++)
		buf_printf(out, "idemrelay_deliveries_total{status=\"%s\"} %llu\n",
			   counter_info[i].label, (unsigned long long) s->counters[i]);
	for (i = 0; i < METRICS_N_HISTOGRAMS; i++)
		render_histogram(out, &hists[i]);
	render_groups(out, s);
	gauge(out, "idemrelay_store_up", "1 if the store could be read for this scrape.",
	      g->store_ok);
	if (g->caps & STORE_CAP_SHARED) {
		counter(out, "idemrelay_store_outages_total", "Times the shared store became"
			" unreachable since start.", g->s.reach.outages);
		gauge(out, "idemrelay_store_replication_waiting", "Commits waiting for "
		      "replication to a synchronous standby now.", (double) g->s.reach.repl_waiting);
		counter(out, "idemrelay_store_replication_waits_total", "Times commits started to"
			" wait for replication since start.", g->s.reach.repl_waits);
		counter(out, "idemrelay_store_voided_total", "Batches answered 451 while their"
			" commit waited, their messages voided.", g->s.reach.voided);
	}
	if (g->store_ok) {
		gauge(out, "idemrelay_queue_depth", "Messages in the queue.", (double) g->s.queued);
		gauge(out, "idemrelay_queue_oldest_seconds",
		      "Age of the oldest queued message, 0 if none.", g->oldest_seconds);
		gauge(out, "idemrelay_claims", "Claims stored (live or awaiting expiry).",
		      (double) g->s.claims);
	}
	if (g->store_ok && (g->caps & STORE_CAP_OWN_SPACE)) {	/* LMDB's map */
		gauge(out, "idemrelay_store_map_size_bytes", "LMDB map size.",
		      (double) g->s.space.size);
		gauge(out, "idemrelay_store_used_bytes", "LMDB map pages in use, in bytes.",
		      (double) g->s.space.used);
		gauge(out, "idemrelay_store_map_ceiling_bytes",
		      "How far the map may grow (store.map_size_max, or the disk).",
		      (double) g->s.space.ceiling);
		gauge(out, "idemrelay_store_full_ratio", "Used bytes over the ceiling, 0 to 1.",
		      g->s.space.ceiling ? (double) g->s.space.used / (double) g->s.space.ceiling : 0.0);
	}
	if (g->start_time > 0)
		gauge(out, "idemrelay_start_time_seconds", "When the daemon started (Unix time).",
		      g->start_time);
}

/* head_complete - admin_ops: the request head is in */
static int head_complete(const char *req, size_t len)
{
	(void) len;
	return strstr(req, "\r\n\r\n") != NULL || strstr(req, "\n\n") != NULL;
}

/* serve - admin_ops: answer one request, whole or as much of it as came */
static void serve(void *arg, int fd, char *req, size_t len, int cut,
		  struct buf *resp)
{
	struct metrics *m = arg;
	char method[16], path[256];
	struct buf body = BUF_INIT;
	struct metrics_snapshot snap;
	struct metrics_gauges g;
	const char *status = "200 OK", *type = "text/plain";

	(void) fd;
	(void) cut;
	if (len == 0 || sscanf(req, "%15s %255s", method, path) != 2) {
		status = "400 Bad Request";
		buf_printf(&body, "bad request\n");
	} else if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
		status = "405 Method Not Allowed";
		buf_printf(&body, "method not allowed\n");
	} else if (strncmp(path, "/metrics", 8) != 0 || (path[8] != 0 && path[8] != '?')) {
		status = "404 Not Found";
		buf_printf(&body, "not found: try /metrics\n");
	} else {
		type = "text/plain; version=0.0.4; charset=utf-8";
		metrics_snapshot(&snap);
		metrics_gauges_read(m->st, &g);
		g.start_time = m->start_time;
		metrics_render(&body, &snap, &g);
	}
	buf_printf(resp, "HTTP/1.0 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
		   "Connection: close\r\n\r\n", status, type, body.len);
	if (strncmp(req, "HEAD ", 5) != 0 && body.len)
		buf_append(resp, body.data, body.len);
	buf_free(&body);
}

/* metrics_start - bind and serve, if configured */
struct metrics *metrics_start(const struct conf *c, struct store *st)
{
	struct metrics *m;

	if (c->metrics_address == NULL || c->metrics_port == 0)
		return NULL;
	m = xcalloc(1, sizeof(*m));
	m->st = st;
	m->start_time = (double) clock_us() / 1e6;
	m->admin = admin_start(listen_tcp("metrics", c->metrics_address, c->metrics_port,
					  METRICS_BACKLOG),
			       &(struct admin_ops) { .name = "metrics", .complete = head_complete,
						     .serve = serve, .arg = m });
	msg_info("metrics on http://%s:%d/metrics", c->metrics_address, c->metrics_port);
	return m;
}

/* metrics_stop - stop serving, join, close */
void metrics_stop(struct metrics *m)
{
	if (m == NULL)
		return;
	admin_stop(m->admin);
	free(m);
}
