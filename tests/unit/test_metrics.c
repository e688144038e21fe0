/*
 * test_metrics - counters, histograms and the Prometheus text rendering
 * (queue/metrics.c), and the control protocol's little JSON (util/json.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../../queue/commit.h"
#include "../../util/json.h"
#include "../../queue/metrics.c"	/* its counters, to reset them between tests */
#include "../../util/buf.h"

/* has_line - the rendered text holds this exact line */
static void has_line(const char *text, const char *line)
{
	size_t n = strlen(line);
	const char *p;

	for (p = text; (p = strstr(p, line)) != NULL; p += n)
		if ((p == text || p[-1] == '\n') && p[n] == '\n')
			return;
	fail_msg("missing line %s in:\n%s", line, text);
}

/* metrics_reset - every counter and histogram, and the upstream, back to zero */
static void metrics_reset(void)
{
	size_t i, h;

	for (i = 0; i < METRICS_N_COUNTERS; i++)
		atomic_store(&counters[i], 0);
	pthread_mutex_lock(&upstream_lock);
	memset(&upstream, 0, sizeof(upstream));
	pthread_mutex_unlock(&upstream_lock);
	for (h = 0; h < METRICS_N_HISTOGRAMS; h++) {
		for (i = 0; i < METRICS_MAX_BUCKETS; i++)
			atomic_store(&hists[h].buckets[i], 0);
		atomic_store(&hists[h].count, 0);
		atomic_store(&hists[h].sum, 0);
	}
}

/* render - the text for the current counters and the given gauges */
static void render(struct buf *out, const struct metrics_gauges *g)
{
	struct metrics_snapshot s;

	buf_reset(out);
	metrics_snapshot(&s);
	metrics_render(out, &s, g);
}

static void test_counters(void **state)
{
	struct metrics_gauges g;
	struct buf out = BUF_INIT;
	static const struct {
		int outcome, shadow;
	} answers[] = {
		{ COMMIT_QUEUED, 0 }, { COMMIT_DUPLICATE, 0 }, { COMMIT_MISMATCH, 0 },
		{ COMMIT_PARTIAL, 0 }, { COMMIT_QUEUED, 1 }, { COMMIT_FAILED, 0 },
	};
	size_t i;

	(void) state;
	metrics_reset();
	memset(&g, 0, sizeof(g));
	for (i = 0; i < sizeof(answers) / sizeof(answers[0]); i++) {
		metrics_inc(METRICS_SUBMISSIONS);
		metrics_answered(answers[i].outcome, answers[i].shadow, 1000);
	}
	metrics_delivered("sent", 2000000);
	metrics_delivered("sent", 1);
	metrics_delivered("deferred", 5);
	metrics_delivered("bounced", 5);
	metrics_delivered("unconfirmed", 5);
	metrics_delivered("something else", 5);
	metrics_inc(METRICS_REVIVED);
	render(&out, &g);
	has_line(out.data, "# TYPE idemrelay_submissions_total counter");
	has_line(out.data, "idemrelay_submissions_total 6");
	has_line(out.data, "idemrelay_accepted_total 3");	/* queued, partial, shadow */
	has_line(out.data, "idemrelay_duplicates_total 1");
	has_line(out.data, "idemrelay_partial_duplicates_total 1");
	has_line(out.data, "idemrelay_mismatches_total 1");
	has_line(out.data, "idemrelay_shadow_duplicates_total 1");
	has_line(out.data, "idemrelay_deliveries_total{status=\"sent\"} 2");
	has_line(out.data, "idemrelay_deliveries_total{status=\"deferred\"} 1");
	has_line(out.data, "idemrelay_deliveries_total{status=\"bounced\"} 1");
	has_line(out.data, "idemrelay_deliveries_total{status=\"unconfirmed\"} 1");
	has_line(out.data, "# TYPE idemrelay_revived_total counter");
	has_line(out.data, "idemrelay_revived_total 1");
	/* without a readable store, only store_up says so */
	has_line(out.data, "idemrelay_store_up 0");
	if (strstr(out.data, "idemrelay_queue_depth"))
		fail_msg("queue depth rendered without a store");
	buf_free(&out);
}

static void test_histograms(void **state)
{
	struct metrics_gauges g;
	struct buf out = BUF_INIT;

	(void) state;
	metrics_reset();
	memset(&g, 0, sizeof(g));
	metrics_observe(METRICS_COMMIT_BATCH, 1);
	metrics_observe(METRICS_COMMIT_BATCH, 3);
	metrics_observe(METRICS_COMMIT_BATCH, 4);
	metrics_observe(METRICS_COMMIT_BATCH, 1000);
	metrics_observe(METRICS_ACCEPT_LATENCY, 400);		/* 0.4 ms */
	metrics_observe(METRICS_ACCEPT_LATENCY, 1000);		/* exactly on a bound: le */
	metrics_observe(METRICS_ACCEPT_LATENCY, -5);		/* clock step: counted as 0 */
	render(&out, &g);
	has_line(out.data, "# TYPE idemrelay_commit_batch_size histogram");
	has_line(out.data, "idemrelay_commit_batch_size_bucket{le=\"1\"} 1");
	has_line(out.data, "idemrelay_commit_batch_size_bucket{le=\"2\"} 1");
	has_line(out.data, "idemrelay_commit_batch_size_bucket{le=\"4\"} 3");
	has_line(out.data, "idemrelay_commit_batch_size_bucket{le=\"512\"} 3");
	has_line(out.data, "idemrelay_commit_batch_size_bucket{le=\"+Inf\"} 4");
	has_line(out.data, "idemrelay_commit_batch_size_sum 1008");
	has_line(out.data, "idemrelay_commit_batch_size_count 4");
	has_line(out.data, "idemrelay_accept_latency_seconds_bucket{le=\"0.0005\"} 2");
	has_line(out.data, "idemrelay_accept_latency_seconds_bucket{le=\"0.001\"} 3");
	has_line(out.data, "idemrelay_accept_latency_seconds_bucket{le=\"10\"} 3");
	has_line(out.data, "idemrelay_accept_latency_seconds_sum 0.0014");
	has_line(out.data, "idemrelay_accept_latency_seconds_count 3");
	has_line(out.data, "idemrelay_delivery_latency_seconds_bucket{le=\"86400\"} 0");
	has_line(out.data, "idemrelay_delivery_latency_seconds_count 0");
	buf_free(&out);
}

static void test_gauges(void **state)
{
	struct metrics_gauges g;
	struct buf out = BUF_INIT;

	(void) state;
	metrics_reset();
	memset(&g, 0, sizeof(g));
	g.store_ok = 1;
	g.s.queued = 7;
	g.oldest_seconds = 12.5;
	g.s.claims = 42;
	g.caps = STORE_CAP_OWN_SPACE;	/* LMDB: the map is shown */
	g.s.space.size = 1073741824;
	g.s.space.used = 65536;
	g.start_time = 1700000000;
	g.caps |= STORE_CAP_SHARED;	/* PostgreSQL: outages, replication, voided batches */
	g.s.reach.outages = 3;
	g.s.reach.voided = 2;
	render(&out, &g);
	has_line(out.data, "# TYPE idemrelay_queue_depth gauge");
	has_line(out.data, "# TYPE idemrelay_store_outages_total counter");
	has_line(out.data, "idemrelay_store_outages_total 3");
	has_line(out.data, "# TYPE idemrelay_store_replication_waits_total counter");
	has_line(out.data, "idemrelay_store_voided_total 2");
	has_line(out.data, "idemrelay_store_up 1");
	has_line(out.data, "idemrelay_queue_depth 7");
	has_line(out.data, "idemrelay_queue_oldest_seconds 12.5");
	has_line(out.data, "idemrelay_claims 42");
	has_line(out.data, "idemrelay_store_map_size_bytes 1073741824");
	has_line(out.data, "idemrelay_store_used_bytes 65536");
	has_line(out.data, "idemrelay_start_time_seconds 1700000000");
	/* every sample line is "name[{labels}] value", and each family has HELP and TYPE */
	for (char *line = strtok(out.data, "\n"); line; line = strtok(NULL, "\n")) {
		if (line[0] == '#')
			continue;
		if (strncmp(line, "idemrelay_", 10) != 0 || strchr(line, ' ') == NULL
		    || strchr(line, ' ') != strrchr(line, ' '))
			fail_msg("malformed sample line %s", line);
	}
	buf_free(&out);
}

/* the upstream's limits: shown once delivery upstream has said them, not before */
static void test_upstream(void **state)
{
	struct metrics_upstream u = { 0, 11.5, 2, 1, 1, 2, 3 };
	struct metrics_gauges g;
	struct buf out = BUF_INIT;

	(void) state;
	metrics_reset();
	memset(&g, 0, sizeof(g));
	render(&out, &g);
	if (strstr(out.data, "idemrelay_upstream_") != NULL)
		fail_msg("upstream gauges with no upstream:\n%s", out.data);
	metrics_upstream_set("", &u);
	render(&out, &g);
	has_line(out.data, "# TYPE idemrelay_upstream_rate gauge");
	has_line(out.data, "idemrelay_upstream_rate 11.5");
	has_line(out.data, "idemrelay_upstream_concurrency 2");
	has_line(out.data, "idemrelay_upstream_sessions 1");
	has_line(out.data, "idemrelay_upstream_throttled 1");
	has_line(out.data, "idemrelay_upstream_nodes 2");
	has_line(out.data, "# TYPE idemrelay_upstream_throttled_total counter");
	has_line(out.data, "idemrelay_upstream_throttled_total 3");
	buf_free(&out);
}

/* the upstream's and the routes' groups: one family each, the routes' labelled */
static void test_upstream_groups(void **state)
{
	static const char want[] =
		"# HELP idemrelay_upstream_rate Messages a second this node may send upstream"
		" now (0: no limit).\n# TYPE idemrelay_upstream_rate gauge\n"
		"idemrelay_upstream_rate 11.5\n"
		"# HELP idemrelay_upstream_concurrency Upstream sessions allowed now.\n"
		"# TYPE idemrelay_upstream_concurrency gauge\nidemrelay_upstream_concurrency 2\n"
		"# HELP idemrelay_upstream_sessions Upstream sessions running.\n"
		"# TYPE idemrelay_upstream_sessions gauge\nidemrelay_upstream_sessions 1\n"
		"# HELP idemrelay_upstream_throttled 1 while the upstream's throttling replies"
		" keep its concurrency and rate down.\n"
		"# TYPE idemrelay_upstream_throttled gauge\nidemrelay_upstream_throttled 1\n"
		"# HELP idemrelay_upstream_nodes Nodes alive sharing upstream.rate.\n"
		"# TYPE idemrelay_upstream_nodes gauge\nidemrelay_upstream_nodes 2\n"
		"# HELP idemrelay_upstream_throttled_total Throttling episodes since start.\n"
		"# TYPE idemrelay_upstream_throttled_total counter\n"
		"idemrelay_upstream_throttled_total 3\n"
		"# HELP idemrelay_route_upstream_rate Messages a second this node may send to the"
		" route's upstream now (0: no limit).\n# TYPE idemrelay_route_upstream_rate gauge\n"
		"idemrelay_route_upstream_rate{route=\"a\"} 0\n"
		"idemrelay_route_upstream_rate{route=\"b\"} 7.25\n"
		"# HELP idemrelay_route_upstream_concurrency The route's upstream sessions allowed"
		" now.\n# TYPE idemrelay_route_upstream_concurrency gauge\n"
		"idemrelay_route_upstream_concurrency{route=\"a\"} 4\n"
		"idemrelay_route_upstream_concurrency{route=\"b\"} 1\n"
		"# HELP idemrelay_route_upstream_sessions The route's upstream sessions running.\n"
		"# TYPE idemrelay_route_upstream_sessions gauge\n"
		"idemrelay_route_upstream_sessions{route=\"a\"} 3\n"
		"idemrelay_route_upstream_sessions{route=\"b\"} 0\n"
		"# HELP idemrelay_route_upstream_throttled 1 while the route's upstream's throttling"
		" replies keep its concurrency and rate down.\n"
		"# TYPE idemrelay_route_upstream_throttled gauge\n"
		"idemrelay_route_upstream_throttled{route=\"a\"} 0\n"
		"idemrelay_route_upstream_throttled{route=\"b\"} 1\n"
		"# HELP idemrelay_route_upstream_throttled_total The route's throttling episodes"
		" since start.\n# TYPE idemrelay_route_upstream_throttled_total counter\n"
		"idemrelay_route_upstream_throttled_total{route=\"a\"} 5\n"
		"idemrelay_route_upstream_throttled_total{route=\"b\"} 0\n";
	struct metrics_upstream u = { 1, 11.5, 2, 1, 1, 2, 3 };
	struct metrics_upstream a = { 1, 0, 4, 3, 0, 1, 5 }, b = { 1, 7.25, 1, 0, 1, 1, 0 };
	struct metrics_gauges g;
	struct buf out = BUF_INIT;
	const char *p, *q;

	(void) state;
	metrics_reset();
	memset(&g, 0, sizeof(g));
	metrics_upstream_set("", &u);
	metrics_upstream_set("a", &a);
	metrics_upstream_set("b", &b);
	render(&out, &g);
	p = strstr(out.data, "# HELP idemrelay_upstream_rate ");
	q = strstr(out.data, "# HELP idemrelay_store_up ");
	assert_non_null(p);
	assert_non_null(q);
	if ((size_t) (q - p) != strlen(want) || strncmp(p, want, strlen(want)) != 0)
		fail_msg("got:\n%.*s\nwant:\n%s", (int) (q - p), p, want);
	buf_free(&out);
}

static void test_json_write(void **state)
{
	static const struct {
		const char *in, *want;
	} cases[] = {
		{ "plain", "\"plain\"" },
		{ "q\"b\\", "\"q\\\"b\\\\\"" },
		{ "a\nb\tc\x01", "\"a\\nb\\u0009c\\u0001\"" },
		{ "caf\xc3\xa9", "\"caf\xc3\xa9\"" },		/* valid UTF-8 kept */
		{ "bad\xff\xc3", "\"bad\\u00ff\\u00c3\"" },	/* invalid bytes escaped */
		/* well-formed in shape only (RFC 3629's table): a surrogate, an overlong form, past U+10FFFF */
		{ "\xed\xa0\x80", "\"\\u00ed\\u00a0\\u0080\"" },
		{ "\xe0\x80\xaf", "\"\\u00e0\\u0080\\u00af\"" },
		{ "\xf4\x90\x80\x80", "\"\\u00f4\\u0090\\u0080\\u0080\"" },
		{ "\xf0\x8f\xbf\xbf", "\"\\u00f0\\u008f\\u00bf\\u00bf\"" },
		{ "\xed\x9f\xbf\xf4\x8f\xbf\xbf", "\"\xed\x9f\xbf\xf4\x8f\xbf\xbf\"" },	/* the edges kept */
		{ NULL, "null" },
	};
	struct buf b = BUF_INIT;
	size_t i;

	(void) state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		buf_reset(&b);
		json_str(&b, "", cases[i].in);
		if (strcmp(b.data, cases[i].want) != 0)
			fail_msg("json_str case %zu: got %s, want %s", i, b.data, cases[i].want);
	}
	buf_reset(&b);
	json_time(&b, "", 1700000000LL * 1000000 + 5);
	assert_string_equal(b.data, "\"2023-11-14T22:13:20Z\"");
	buf_reset(&b);
	json_time(&b, "", 0);
	assert_string_equal(b.data, "null");
	json_error(&b, "cannot %s \"%s\"", "drop", "Q1");	/* replaces what b held */
	assert_string_equal(b.data, "{\"ok\":false,\"error\":\"cannot drop \\\"Q1\\\"\"}");
	buf_free(&b);
}

static void test_json_read(void **state)
{
	const char *j = "{\"ok\":true, \"nested\":{\"error\":\"not me\",\"a\":[1,{\"b\":2}]},"
	    "\"error\":\"unknown QID \\\"X\\\" \\u00e9\",\"claims\":12,\"neg\":-3,"
	    "\"qids\":[\"A\",\"B\"],\"off\":false}";
	const char *v, *e;
	size_t len;
	char s[64];
	long long n;
	int b;

	(void) state;
	assert_int_equal(json_get_bool(j, "ok", &b), 0);
	assert_int_equal(b, 1);
	assert_int_equal(json_get_bool(j, "off", &b), 0);
	assert_int_equal(b, 0);
	assert_int_equal(json_get_str(j, "error", s, sizeof(s)), 0);
	assert_string_equal(s, "unknown QID \"X\" \xc3\xa9");	/* the top-level one */
	assert_int_equal(json_get_int(j, "claims", &n), 0);
	assert_int_equal(n, 12);
	assert_int_equal(json_get_int(j, "neg", &n), 0);
	assert_int_equal(n, -3);
	assert_int_equal(json_get(j, "qids", &v, &len), 0);
	assert_int_equal(len, 9);
	assert_memory_equal(v, "[\"A\",\"B\"]", 9);
	/* the elements of an array, whole values (nested ones too), then its end */
	assert_int_equal(json_get(j, "nested", &v, &len), 0);
	assert_int_equal(json_get(v, "neg", &e, &len), -1);	/* in place: its end ends it */
	assert_int_equal(json_get(v, "a", &v, &len), 0);
	assert_int_equal(json_next(&v, &e, &len), 0);
	assert_int_equal(len, 1);
	assert_memory_equal(e, "1", 1);
	assert_int_equal(json_next(&v, &e, &len), 0);
	assert_int_equal(len, 7);
	assert_memory_equal(e, "{\"b\":2}", 7);
	assert_int_equal(json_next(&v, &e, &len), -1);
	v = "[ ]";
	assert_int_equal(json_next(&v, &e, &len), -1);
	assert_int_equal(json_get(j, "b", &v, &len), -1);		/* nested only */
	assert_int_equal(json_get_int(j, "error", &n), -1);	/* wrong type */
	assert_int_equal(json_get_str(j, "claims", s, sizeof(s)), -1);
	assert_int_equal(json_get_str(j, "error", s, 8), 0);	/* truncated to fit */
	assert_string_equal(s, "unknown");
	/* \u escapes of one, two and three octets; a lone surrogate is no character */
	assert_int_equal(json_get_str("{\"s\":\"\\u0041\\u00e9\\u20ac\"}", "s", s, sizeof(s)), 0);
	assert_string_equal(s, "A\xc3\xa9\xe2\x82\xac");
	assert_int_equal(json_get_str("{\"s\":\"\\ud800\"}", "s", s, sizeof(s)), -1);
	/* malformed input never reads past its end */
	assert_int_equal(json_get(j + 1, "ok", &v, &len), -1);
	assert_int_equal(json_get("{\"ok\":", "ok", &v, &len), -1);
	assert_int_equal(json_get("{\"ok\":\"unterminated}", "ok", &v, &len), -1);
	assert_int_equal(json_get("{\"a\":[1,2}", "a", &v, &len), -1);
	assert_int_equal(json_get("{}", "a", &v, &len), -1);
	assert_int_equal(json_get("", "a", &v, &len), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_counters),
		cmocka_unit_test(test_histograms),
		cmocka_unit_test(test_gauges),
		cmocka_unit_test(test_upstream),
		cmocka_unit_test(test_upstream_groups),
		cmocka_unit_test(test_json_write),
		cmocka_unit_test(test_json_read),
	};

	return cmocka_run_group_tests_name("metrics", tests, NULL, NULL);
}
