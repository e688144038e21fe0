"""Nodes started and stopped while the synchronous standby is away (SPEC section 7).

With the primary's only synchronous standby stopped, a COMMIT waits in
PostgreSQL's SyncRep state, its locks held, until the standby answers. A
node's start once wrote its slot and gave its old leases up under the
schema lock, both waiting there: the start failed at a statement's limit,
its backend left waiting with the schema lock, and every later start of
every node waited for it for ever (store/pg/store_pg.c, store_pg_schema.c).
A lease renewal waited too, keeping every leased row locked for the whole
outage, so that delivery's writes of those messages waited behind it and a
stop waited for them (store_pg_lease.c).

They run with E2E_STORE=postgresql only (make test-pg).
"""

import subprocess
import threading
import time

from harness import PG_ONLY, case, check, eq, make_msg, pgcluster, submit_ok, wait_until
from cases_nodes import SCHEMA_LOCK, SCHEMA_LOCK_ROWS, WAITS, deliveries, queued_qids

LEASE = "6s"


def _advisory_waiting(pg, db):
    """backends of the test's database waiting for the standby with an advisory lock held"""
    return int(pg.sql("SELECT count(DISTINCT a.pid) FROM pg_stat_activity a JOIN pg_locks l "
                      "ON l.pid = a.pid AND l.locktype = 'advisory' AND l.granted "
                      "WHERE a.wait_event = 'SyncRep' AND a.datname = '%s'" % db))


def _leased_then_standby_away(t):
    """node a sends a message's final dot and gets no reply (its lease held), then the
    synchronous standby stops and a lease renewal (every third of the lease) runs"""
    pg = t.pg_cluster(standby=True)
    url = t.pg_database(pg)
    sink = t.sink()
    a = t.daemon(sink, {"store": {"url": url, "lease": LEASE}}, node="a")
    submit_ok(a.port, "hang-after-dot-x@example.com", make_msg(key="standby-start-1"))
    time.sleep(2)
    pg.standbys[0].stop()
    time.sleep(4)
    return pg, url, sink, a


@case(timeout=180, stores=PG_ONLY)
def test_standby_away_node_starts(t):
    """Node a, killed while it holds a lease, starts again while the standby is away
    (its old leases given up without waiting for the standby); a new node name
    is refused plainly, at once, and holds nothing up: a restarts again, and the
    new name starts once the standby is back. Before, a's start failed ('cannot
    give up old leases'), its backend left waiting with the schema lock, and
    every later start waited at the schema lock for ever, deaf to SIGTERM."""
    pg, url, sink, a = _leased_then_standby_away(t)
    db = url.rsplit("/", 1)[1]
    a.kill9()
    t0 = time.monotonic()
    a.start(timeout=30)
    check(time.monotonic() - t0 < 15, "node a's start took %.1f s" % (time.monotonic() - t0))
    b = t.daemon(sink, {"store": {"url": url, "lease": LEASE}, "control": t.tmp + "/ctl-b.sock"},
                 node="b", start=False)
    t0 = time.monotonic()
    try:
        b.start(timeout=30)
        check(False, "node b, a new name, started while the standby is away")
    except AssertionError as e:
        check("exited at start" in str(e), "node b's start: %s" % e)
    took = time.monotonic() - t0
    check(took < 15, "node b's refusal took %.1f s" % took)
    check(b.log_lines("node b: cannot register: the synchronous standby did not confirm"),
          "node b's reason: %s" % b.log().splitlines()[-3:])
    eq(_advisory_waiting(pg, db), 0, "backends waiting for the standby with an advisory lock")
    a.stop(timeout=20)
    t0 = time.monotonic()
    a.start(timeout=30)
    check(time.monotonic() - t0 < 15, "node a's start after b's took %.1f s"
          % (time.monotonic() - t0))
    eq(a.log_lines("waiting for the PostgreSQL schema lock"), [], "node a waited for the schema lock")
    pg.standbys[0].start()
    b.start(timeout=30)
    submit_ok(b.port, "x@example.com", make_msg(key="standby-start-2"))


@case(timeout=90, stores=PG_ONLY)
def test_start_at_schema_lock_stops(t):
    """A start waiting for the schema lock names the backend that holds it and what
    that one does, and ends at SIGTERM. It said "waiting for another node's
    PostgreSQL schema migration" whoever held it (a start's COMMIT waiting for the
    standby, say), and waited on through SIGTERM."""
    pg = t.pg_shared()
    db = t.pg_url().rsplit("/", 1)[1]
    sink = t.sink()
    a = t.daemon(sink, node="a")
    a.stop()
    # as the nodes' role, which sees its own backends' state
    holder = subprocess.Popen([pgcluster.prog("psql"), "-X", "-q", "-d",
                               pg.url(db)], stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    failed = []

    def start():
        try:
            a.start(timeout=60)
        except AssertionError as e:
            failed.append(str(e))
    try:
        holder.stdin.write("SELECT pg_advisory_lock(%s);\n" % SCHEMA_LOCK)
        holder.stdin.flush()
        wait_until(lambda: pg.sql(SCHEMA_LOCK_ROWS, db) == "1|0", 10, "the test's schema lock")
        pid = pg.sql("SELECT pid FROM pg_stat_activity WHERE datname = '%s' AND "
                     "application_name = 'psql'" % db)
        th = threading.Thread(target=start, daemon=True)
        th.start()
        wait_until(lambda: WAITS in a.log().rsplit("=== e2e: start", 1)[-1], 20,
                   "node a to wait for the schema lock (%r)" % WAITS)
        said = a.log_lines(WAITS)[-1]
        t0 = time.monotonic()
        a.stop(timeout=10)
        check(time.monotonic() - t0 < 5, "node a exited %.1f s after SIGTERM"
              % (time.monotonic() - t0))
        th.join(10)
        check("backend %s (psql) holds it, idle" % pid in said, "the holder named: %s" % said)
        check(a.log_lines("stopped while waiting for the PostgreSQL schema lock"),
              "node a's last words: %s" % a.log().splitlines()[-2:])
    finally:
        holder.stdin.close()
        holder.wait(10)


@case(timeout=120, stores=PG_ONLY)
def test_standby_away_leases_renewed(t):
    """Node a's leases are renewed while the standby is away, without waiting for it:
    the renewal is seen by others at once and holds no row locked. Before, its
    COMMIT waited in SyncRep for the whole outage with every leased row locked,
    each delivery write of those messages waiting behind it, cut at 10 s (the
    lease's expiry others saw was the last one before the standby went)."""
    pg = t.pg_cluster(standby=True)
    url = t.pg_database(pg)
    db = url.rsplit("/", 1)[1]
    sink = t.sink()
    a = t.daemon(sink, {"store": {"url": url, "lease": LEASE}, "upstream": {"timeout": "60s"}},
                 node="a")
    submit_ok(a.port, "hang-after-dot-x@example.com", make_msg(key="standby-renew-1"))
    time.sleep(2)
    pg.standbys[0].stop()
    time.sleep(9)                       # one and a half leases: renewals every 2 s
    left = int(pg.sql("SELECT (lease_until - (extract(epoch from clock_timestamp()) * 1000000)"
                      "::bigint) / 1000 FROM messages WHERE queued", db))
    check(left > 0, "the lease seen by others ran out %d ms ago, while node a still holds it"
          % -left)
    waiting = pg.sql("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep' "
                     "AND datname = '%s'" % db)
    eq(waiting, "0", "backends of node a waiting for the standby (nothing but renewals wrote)")
    a.kill9()                           # it would wait for the dot's reply (upstream.timeout)


@case(timeout=150, stores=PG_ONLY)
def test_standby_away_node_stops(t):
    """Node a is stopped (SIGTERM) while its dot's reply hangs and the synchronous
    standby is away: the delivery's outcome, written in the group commit, waits
    for the standby and its hold ends at the stop, so node a exits within a few
    seconds (idemrelay(8)), as with the standby there; started again, it never
    sends the message twice, and once the standby is back the message is done
    (its outcome, or its inflight mark read as an ambiguous delivery). Before,
    the write was tried again alone at the stop, waited for the row lock of its
    own first attempt (still waiting for the standby), and was cut at 10 s,
    twice: the exit took about 30 s."""
    pg, url, sink, a = _leased_then_standby_away(t)
    db = url.rsplit("/", 1)[1]
    qid = queued_qids(a).pop()
    t0 = time.monotonic()
    a.stop(timeout=60)
    took = time.monotonic() - t0
    check(took < 5, "node a exited %.1f s after SIGTERM with the standby away; its last "
          "lines: %s" % (took, a.log().splitlines()[-6:]))
    t0 = time.monotonic()
    a.start(timeout=30)
    check(time.monotonic() - t0 < 15, "node a's start took %.1f s" % (time.monotonic() - t0))
    time.sleep(3)                       # retry.first: a copy sent again would come now
    eq(deliveries([sink]), {qid: 1}, "deliveries with the standby away")
    pg.standbys[0].start()
    wait_until(lambda: pg.sql("SELECT count(*) FROM messages WHERE queued", db) == "0", 30,
               "node a done with the message once the standby is back", interval=0.5)
    time.sleep(2)
    eq(deliveries([sink]), {qid: 1}, "deliveries")
