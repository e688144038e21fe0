"""Upstream rate limits and throttling feedback (issue 29 section 1).

The sink plays a provider that takes N messages a second ("rate" in its
control file: a token bucket of N, as providers meter it) and answers
"421 4.7.0" to a MAIL beyond it, each refusal an event the test counts.

With upstream.rate at the provider's limit the sink refuses nothing and the
burst goes out at that rate, no faster: 100 messages at 20 a second take at
least 4 s. Without it the throttling feedback keeps the refusals to a handful
per episode, no message is charged an attempt for them (every deferral says
"delivery temporarily suspended"), and every message arrives exactly once.
On PostgreSQL two nodes share one upstream.rate.

Timing is asserted only as bounds that a loaded machine cannot break: a
lower bound that the limit itself imposes, and generous deadlines.
"""

import os
import re
import smtplib
import threading
import time

from harness import (PG_ONLY, case, check, eq, free_port, make_msg, pg_lock_key, pg_lock_row,
                     submit_ok, wait_until)
from cases_nodes import deliveries
from cases_ops import ctl, ctl_json, samples, scrape
from cases_reload import hup, rewrite
from cases_upstream_tls import make_certs, tls_sink, trust, upstream

SUBJECT_RE = re.compile(rb"^Subject: (rate-\S+)\r$", re.M)
LIMIT = 20              # the sink's messages a second
BURST = 100             # messages submitted at once
RECOUNT_S = 5           # deliver/deliver.c DELIVER_NODES_EVERY: the nodes alive counted
TAKE_S = 1              # DELIVER_TAKE_EVERY: the take thread's turn, where it counts
MARGIN_S = 3            # a loaded machine's slow turn
# the nodes whose node lock is held (store/pg/store_pg.c SQL_NODES)
NODE_LOCKS_HELD = ("SELECT count(*) FROM nodes n WHERE EXISTS (SELECT 1 FROM pg_locks l "
                   "WHERE l.granted AND " + pg_lock_row(pg_lock_key("node", "n.slot")) + ")")


def rate_daemon(t, sink, upstream=None, node=None, metrics=None):
    """rate_daemon - four upstream connections, a control socket, metrics if asked"""
    conf = {"control": os.path.join(t.tmp, "ctl-%s.sock" % (node or "d")),
            "upstream": dict({"connections": 4}, **(upstream or {}))}
    if metrics:
        conf["metrics"] = {"address": "127.0.0.1", "port": metrics}
    return t.daemon(sink, conf, node=node)


def burst(d, n, prefix):
    """burst - n messages over one connection, as fast as the daemon takes them"""
    s = smtplib.SMTP("127.0.0.1", d.port, timeout=30)
    try:
        s.ehlo("client.test")
        return [submit_ok(d.port, "r@example.com",
                          make_msg(key="%s-%d" % (prefix, i), subject="%s-%d" % (prefix, i)),
                          smtp=s) for i in range(n)]
    finally:
        s.quit()


def delivered_once(sink, want, timeout):
    """delivered_once - wait for every subject of want at the sink; each exactly once.
    Returns the records in arrival order."""
    recs = sink.wait_count(len(want), timeout=timeout, what="%d messages" % len(want))
    time.sleep(1)           # a copy more would show up now
    recs = sink.accepted()
    got = [SUBJECT_RE.search(r["data"]).group(1).decode() for r in recs]
    eq(sorted(got), sorted(want), "subjects at the sink, each once")
    return recs


def upstream_stats(d):
    """upstream_stats - idemrelayctl --json stats: the daemon's upstream object"""
    u = ctl_json(d, "stats", conf=d.conf_path)["daemon"].get("upstream")
    check(u is not None, "stats: no upstream object")
    return u


@case(timeout=120)
def test_rate_limit_no_refusals(t):
    """upstream.rate = the provider's limit: no refusal, the whole burst at that rate"""
    sink = t.sink(rate=LIMIT)
    port = free_port()
    d = rate_daemon(t, sink, {"rate": LIMIT}, metrics=port)
    u = upstream_stats(d)
    eq((u["rate"], u["concurrency"], u["throttled"]), (LIMIT, 4, False), "stats before")
    text = ctl(d, "stats").stdout
    check("upstream     rate %d.0/s, concurrency 4 (0 running), 1 node sharing upstream.rate,"
          " not throttled (0 episodes since start)" % LIMIT in text, "stats: %s" % text)
    want = ["rate-on-%d" % i for i in range(BURST)]
    burst(d, BURST, "rate-on")
    recs = delivered_once(sink, want, timeout=90)
    eq(len(sink.events("throttled")), 0, "throttling replies from the sink")
    span = recs[-1]["time"] - recs[0]["time"]
    check(span >= (BURST - 1) / LIMIT * 0.8,
          "%d messages at %d/s took %.2f s: faster than the rate" % (BURST, LIMIT, span))
    eq(d.log_lines("throttling: ") + d.log_lines("throttling ended"), [],
       "throttling log lines")
    s = samples(scrape(port)[2])
    eq((s.get("idemrelay_upstream_rate"), s.get("idemrelay_upstream_throttled"),
        s.get("idemrelay_upstream_throttled_total")), (LIMIT, 0, 0), "metrics")
    rewrite(d, {"upstream": {"rate": LIMIT // 2}})     # SIGHUP takes a new rate
    hup(d, 1)
    eq(upstream_stats(d)["rate"], LIMIT // 2, "the rate after SIGHUP")


@case(timeout=180)
def test_throttle_feedback(t):
    """no upstream.rate: the feedback keeps refusals to a handful an episode,
    charges no message an attempt, and delivers every message once"""
    sink = t.sink(rate=LIMIT)
    port = free_port()
    d = rate_daemon(t, sink, metrics=port)
    want = ["rate-fb-%d" % i for i in range(BURST)]
    burst(d, BURST, "rate-fb")
    delivered_once(sink, want, timeout=150)
    refusals = len(sink.events("throttled"))
    check(0 < refusals <= 12, "%d refusals for %d messages" % (refusals, BURST))
    u = upstream_stats(d)
    episodes = u["throttle_episodes"]
    check(refusals <= 4 * episodes,
          "%d refusals in %d throttling episodes" % (refusals, episodes))
    deferred = d.log_lines("status=deferred")
    check(deferred, "no deferral logged for %d refusals" % refusals)
    for line in deferred:
        check("delivery temporarily suspended" in line and "421 4.7.0" in line,
              "a deferral charged as a failed attempt: %s" % line)
    # the log says when throttling starts and ends, once each, alternating
    marks = [("end" if "throttling ended" in l else "start") for l in d.log().splitlines()
             if "throttling: " in l or "throttling ended" in l]
    check(marks and marks[0] == "start", "throttling log lines: %r" % marks)
    check(all(a != b for a, b in zip(marks, marks[1:])), "start/end not alternating: %r" % marks)
    wait_until(lambda: not upstream_stats(d)["throttled"], timeout=60,
               what="throttling to end")
    eq(d.log().count("throttling ended"), marks.count("start"), "end lines, one a start")
    s = samples(scrape(port)[2])
    eq(s.get("idemrelay_upstream_throttled"), 0, "metrics: throttled")
    eq(s.get("idemrelay_upstream_throttled_total"), episodes, "metrics: episodes")


@case(timeout=180, stores=PG_ONLY)
def test_rate_shared_by_nodes(t):
    """two nodes on one database share upstream.rate: together within 10% of it,
    no refusal from the sink"""
    sink = t.sink(rate=LIMIT)
    a = rate_daemon(t, sink, {"rate": LIMIT}, node="a")
    b = rate_daemon(t, sink, {"rate": LIMIT}, node="b")
    for d in (a, b):
        wait_until(lambda: upstream_stats(d)["nodes"] == 2, timeout=20,
                   what="node %s to count two nodes" % d.node)
        eq(upstream_stats(d)["rate"], LIMIT / 2, "node %s's part of the rate" % d.node)
    want = ["rate-%s-%d" % (n, i) for n in ("a", "b") for i in range(BURST // 2)]
    threads = [threading.Thread(target=burst, args=(d, BURST // 2, "rate-%s" % d.node))
               for d in (a, b)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    recs = delivered_once(sink, want, timeout=120)
    eq(len(sink.events("throttled")), 0, "throttling replies from the sink")
    # from the 5th arrival on: the first sessions' connect and TLS are not the rate
    span = recs[-1]["time"] - recs[4]["time"]
    rate = (len(recs) - 5) / span if span > 0 else float("inf")
    check(rate <= LIMIT * 1.1, "two nodes sent %.1f/s together, over %d/s + 10%%"
          % (rate, LIMIT))


@case(timeout=180, stores=PG_ONLY)
def test_rate_shared_node_killed(t):
    """of two nodes sharing upstream.rate, one is killed with -9 while both have mail
    queued: once PostgreSQL has ended the dead node's session (its node lock), the
    survivor counts one node and takes the whole rate within the documented 5 s
    recount (waited for 5 s, a take thread's turn and a margin of 3 s; the times
    printed), delivers the dead node's mail once its lease runs out, and the sink
    refuses nothing. Every message arrives once; the only exception allowed is what SPEC 5 calls ambiguous: a message
    whose inflight mark the dead node committed just before it died (its dot may or may
    not have gone out), which the survivor finishes unconfirmed and never sends again
    (upstream.ambiguous = "assume-delivered", as configured): at most one a connection
    of the dead node's, each logged status=unconfirmed by the survivor, none at the
    sink twice."""
    sink = t.sink(rate=LIMIT)
    a = rate_daemon(t, sink, {"rate": LIMIT}, node="a")
    b = rate_daemon(t, sink, {"rate": LIMIT}, node="b")
    for d in (a, b):
        wait_until(lambda: upstream_stats(d)["nodes"] == 2, timeout=20,
                   what="node %s to count two nodes" % d.node)
        eq(upstream_stats(d)["rate"], LIMIT / 2, "node %s's part of the rate" % d.node)
    n = 60
    qids = {}
    threads = [threading.Thread(target=lambda d=d: qids.update(
        zip(burst(d, n, "rate-%s" % d.node), ("rate-%s-%d" % (d.node, i) for i in range(n)))))
        for d in (a, b)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    eq(len(qids), 2 * n, "messages accepted")
    sink.wait_count(20, timeout=30, what="the first 20 messages")
    b.kill9()
    killed = time.monotonic()
    at_kill = set(deliveries([sink]))
    # PostgreSQL's part first: b's session, and its node lock, end when its backend sees
    # the socket closed; then a's recount is due within its period and a take thread's turn
    db = t.pg_url().rsplit("/", 1)[1]
    wait_until(lambda: t.pg_shared().sql(NODE_LOCKS_HELD, db) == "1", timeout=10,
               what="PostgreSQL to end node b's session and its node lock")
    gone = time.monotonic()
    wait_until(lambda: upstream_stats(a)["nodes"] == 1, timeout=RECOUNT_S + TAKE_S + MARGIN_S,
               what="node a to count one node within its recount of b's lock gone")
    eq(upstream_stats(a)["rate"], LIMIT, "the survivor's part of the rate")
    print("node a took the whole rate %.1f s after the kill (b's lock gone after %.1f s)"
          % (time.monotonic() - killed, gone - killed))

    b_left = {q for q, subj in qids.items() if subj.startswith("rate-b-") and q not in at_kill}
    check(b_left, "node b had delivered all its mail when it was killed: the case proves nothing")

    def settled():
        got = deliveries([sink])
        return all(q in got or a.log_lines(q, "status=unconfirmed") for q in qids)
    wait_until(settled, 90, "every message delivered or finished unconfirmed", interval=0.5)
    time.sleep(1)                       # a second copy would come now
    count = deliveries([sink])
    eq({q: c for q, c in count.items() if c != 1}, {}, "messages delivered more than once")
    eq(sorted(set(count) - set(qids)), [], "delivered without a 250")
    missing = sorted(set(qids) - set(count))
    check(len(missing) <= 4 and all(qids[q].startswith("rate-b-") for q in missing),
          "not delivered (want at most one a connection of node b's, ambiguous): %r" % missing)
    for q in b_left - set(missing):
        a.wait_log(q, "status=sent")        # b's queued mail went out through a
    eq(len(sink.events("throttled")), 0, "throttling replies from the sink")
    print("%d messages, %d of node b's delivered by node a, %d unconfirmed (ambiguous)"
          % (len(qids), len(b_left - set(missing)), len(missing)))


@case()
def test_throttled_greeting_starttls(t):
    """a 421 greeting to the bridge's STARTTLS (which reads the greeting itself, not
    libesmtp) is throttling too: postponed, not charged; delivered once after"""
    certs = make_certs(t)
    sink = tls_sink(t, certs)
    sink.control(greeting=421)
    trust(certs["ca"])
    conf = upstream(sink, connections=2)
    conf["control"] = os.path.join(t.tmp, "ctl.sock")
    d = t.daemon(sink, conf)
    qid = submit_ok(d.port, "r@example.com", make_msg(key="rate-tls-1", subject="rate-tls-1"))
    line = d.wait_log(qid, "status=deferred")[0]
    check("delivery temporarily suspended" in line and "421 4.3.2" in line,
          "a refused greeting charged as a failed attempt: %s" % line)
    d.wait_log("throttling: 421 4.3.2")
    m = ctl_json(d, "show", qid)["messages"][0]
    eq((m["state"], m["attempts"]), ("queued", 0),
       "a message postponed by throttling, never charged an attempt")
    sink.control()
    delivered_once(sink, ["rate-tls-1"], timeout=30)
    d.wait_log(qid, "status=sent")


@case()
def test_throttled_at_the_dot(t):
    """a throttling reply to the final dot: that message too is postponed, not
    charged; the others of the batch wait for the pause; each delivered once"""
    sink = t.sink()
    d = rate_daemon(t, sink)
    qid = submit_ok(d.port, "data-throttle-first-1-a@example.com",
                    make_msg(key="rate-dot-1", subject="rate-dot-1"))
    line = d.wait_log(qid, "status=deferred")[0]
    check("delivery temporarily suspended" in line and "451 4.7.0" in line,
          "a throttling reply to the dot charged as a failed attempt: %s" % line)
    delivered_once(sink, ["rate-dot-1"], timeout=30)
    d.wait_log(qid, "status=sent")
    eq(len(d.log_lines("throttling: 451 4.7.0")), 1, "throttling start lines")


@case()
def test_throttled_at_a_pipelined_rcpt(t):
    """a throttling reply to the first of three pipelined RCPTs (the sink pauses a
    second before the others' replies): the bridge cuts the session and answers
    libesmtp for the server, where it hung up with three replies owed and
    libESMTP 1.1.0 crashed the daemon (SIGSEGV); the message is postponed, not
    charged, and delivered once to all three"""
    sink = t.sink()
    d = rate_daemon(t, sink)
    rcpts = ["throttle-first-1-a@example.com", "b@example.com", "c@example.com"]
    qid = submit_ok(d.port, rcpts, make_msg(key="rate-rcpt-1", subject="rate-rcpt-1"))
    line = d.wait_log(qid, "status=deferred")[0]
    check("delivery temporarily suspended" in line and "451 4.7.0" in line,
          "a throttling reply to RCPT charged as a failed attempt: %s" % line)
    recs = delivered_once(sink, ["rate-rcpt-1"], timeout=30)
    eq(sorted(recs[0]["to"]), sorted(rcpts), "recipients of the one copy")
    for r in rcpts:
        d.wait_log(qid, "to=<%s>" % r, "status=sent")


@case()
def test_recipient_pacing_past_the_timeout(t):
    """upstream.recipient_rate 1 and upstream.timeout 2 s, twelve recipients: the
    RCPTs wait 11 s for their tokens while libesmtp holds them and the bridge has
    nothing to move, and that is our own pacing, not the upstream going idle: the
    message goes in one transaction, no deferral. Each attempt timed out ('timeout:
    nothing moved for 2 s') and the message was never delivered"""
    sink = t.sink()
    d = t.daemon(sink, {"upstream": {"recipient_rate": 1, "timeout": "2s"}})
    rcpts = ["r%d@example.com" % i for i in range(12)]
    qid = submit_ok(d.port, rcpts, make_msg(key="rate-pace-1", subject="rate-pace-1"))
    start = time.monotonic()
    for r in rcpts:
        d.wait_log(qid, "to=<%s>" % r, "status=sent", timeout=40)
    took = time.monotonic() - start
    check(took >= 10.5, "twelve recipients at 1 a second in %.1f s" % took)
    eq(d.log_lines(qid, "status=deferred"), [], "deferrals")
    eq([sorted(r["to"]) for r in sink.accepted()], [sorted(rcpts)], "one copy to all twelve")
    check(d.running(), "the daemon died")


@case()
def test_recipient_pacing_server_gone(t):
    """upstream.recipient_rate 1, twelve recipients, the sink resets the first
    connection right after its reply to MAIL, while the RCPTs wait for their
    tokens: the RCPTs after that wait for no token (nothing goes out), so the
    message is deferred within 8 s of submission where the twelve tokens took
    11 s at least; it then goes in one copy on the next attempt"""
    sink = t.sink()
    sink.control(reset_after_reply=3, resets=1)
    d = t.daemon(sink, {"upstream": {"recipient_rate": 1},
                        "retry": {"first": "1s", "max": "2s", "give_up": "1h"}})
    rcpts = ["r%d@example.com" % i for i in range(12)]
    qid = submit_ok(d.port, rcpts, make_msg(key="rate-gone-1", subject="rate-gone-1"))
    start = time.monotonic()
    for r in rcpts:
        d.wait_log(qid, "to=<%s>" % r, "status=deferred", timeout=30)
    took = time.monotonic() - start
    check(took < 8, "deferred %.1f s after submission: tokens taken for nothing" % took)
    for r in rcpts:
        d.wait_log(qid, "to=<%s>" % r, "status=sent", timeout=60)
    eq([sorted(r["to"]) for r in sink.accepted()], [sorted(rcpts)], "one copy to all twelve")


@case(timeout=120)
def test_recipient_pacing_shared_by_sessions(t):
    """upstream.recipient_rate 2, timeout 3 s, three messages of five recipients
    submitted 0.4 s apart go in parallel sessions, whose RCPTs share the group's
    tokens: each session waits for the others' too, past the timeout, and that is
    not the upstream going idle: all three are delivered at the first attempt,
    fifteen recipients in 7 s at least. Two were deferred ('timeout: nothing moved
    for 3 s'), the tokens they had taken wasted"""
    sink = t.sink()
    d = t.daemon(sink, {"upstream": {"recipient_rate": 2, "timeout": "3s"},
                        "retry": {"first": "1h", "max": "1h", "give_up": "5d"}})
    want = {}
    start = time.monotonic()
    for k in range(3):
        rcpts = ["m%d-%d@example.com" % (k, i) for i in range(5)]
        want[submit_ok(d.port, rcpts, make_msg(key="rate-par-%d" % k,
                                                subject="rate-par-%d" % k))] = rcpts
        time.sleep(0.4)
    for qid, rcpts in want.items():
        for r in rcpts:
            d.wait_log(qid, "to=<%s>," % r, "relay=", timeout=40)
    took = time.monotonic() - start
    eq(d.log_lines("status=deferred"), [], "deferrals")
    check(took >= 6.5, "fifteen recipients at 2 a second in %.1f s" % took)
    eq(sorted(sorted(r["to"]) for r in sink.accepted()), sorted(sorted(v) for v in want.values()),
       "one copy of each message")


@case()
def test_too_many_recipients_not_throttling(t):
    """452 4.5.3 too many recipients is the message's, not a rate: the others are
    sent in the same session, the refused one deferred as usual, no throttling"""
    sink = t.sink()
    d = rate_daemon(t, sink)
    rcpts = ["toomany-first-1-a@example.com", "b@example.com"]
    qid = submit_ok(d.port, rcpts, make_msg(key="rate-452", subject="rate-452"))
    d.wait_log(qid, "to=<b@example.com>", "status=sent")
    line = d.wait_log(qid, "to=<toomany-first-1-a@example.com>", "status=deferred")[0]
    check("suspended" not in line, "a 452 postponed as throttling: %s" % line)
    d.wait_log(qid, "to=<toomany-first-1-a@example.com>", "status=sent", timeout=20)
    eq(d.log_lines("throttling: ") + d.log_lines("throttling ended"), [],
       "throttling log lines")
    got = sorted(a for r in sink.accepted() for a in r["to"])
    eq(got, sorted(rcpts), "each recipient delivered once")


@case(timeout=120)
def test_retry_while_paused_says_it_waits(t):
    """idemrelayctl retry of a message whose upstream is paused (its sink refuses every
    MAIL with 421 4.7.0, so the pauses double: 1, 2, 4, 8, 16 s) says that it waits for
    its upstream, not that it will be attempted now (it said "due" while the scheduler
    passed it over); once the sink takes mail again it is delivered once. The retries
    go at the start of each pause, from the first, until a pair of them (--json and the
    words) falls inside one: on a slow turn of a loaded machine a short pause may end
    first, and a retry then is due (and its attempt is refused, the next pause); one
    that never says it waits, in five pauses, fails"""
    sink = t.sink()
    sink.control(rate=0.001)            # no token for a long while: every MAIL refused
    d = rate_daemon(t, sink)
    qid = submit_ok(d.port, "r@example.com", make_msg(key="rate-paused-1",
                                                      subject="rate-paused-1"))
    answers = []
    for pause in range(1, 6):
        wait_until(lambda: upstream_stats(d)["throttle_episodes"] >= pause, 60,
                   "pause %d" % pause)
        j = ctl_json(d, "retry", qid)
        eq(j["qid"], qid, "retry's QID: %r" % j)
        answers.append(j["state"])
        if j["state"] != "waiting":
            continue
        r = ctl(d, "retry", qid)
        answers.append(r.stdout.strip())
        if "%s: waits for its upstream" % qid in r.stdout:
            break
    else:
        check(False, "retry never said it waits for its upstream in a pause: %r" % answers)
    d.wait_log(qid, "control: retry (waits for its upstream)")
    sink.control()
    delivered_once(sink, ["rate-paused-1"], timeout=90)
    d.wait_log(qid, "status=sent")
