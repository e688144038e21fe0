"""A synchronous standby that stops under load (issue 25 item 2, SPEC section 7).

With the primary's only synchronous standby stopped, every commit waits in
PostgreSQL's SyncRep state: written on the primary, committed the moment
the standby answers, and never "not committed". A node holds the reply for
store.commit_wait, then answers 451 4.3.0 and voids the batch's messages
first (store/pg/store_pg_wait.c): the 451 must hold when the standby comes
back and those commits complete. What must hold: no submission answered
4xx is ever delivered (a retry of its key answered 250 is a new message),
every 250 is delivered exactly once, the connections to PostgreSQL stay
bounded (the backends left waiting are the nodes' own, counted), the nodes
log the wait once when it starts and once when it ends, and /metrics and
idemrelayctl stats show it. A bounce's notice, written with its outcome
while the standby is away, answered to no client, is not voided: the sender
gets it once the standby is back, and only once.

They run with E2E_STORE=postgresql only (make test-pg).
"""

import threading
import time

from harness import (PG_ONLY, case, check, eq, free_port, make_msg, submit, submit_ok,
                     wait_until)
from cases_nodes import check_exactly_once, retry_submit
from cases_ops import ctl_json, samples, scrape

COMMIT_WAIT = "3s"
LEASE = "8s"            # commit_wait is at most half of it
LOAD_S = 9              # seconds of submissions while the standby is away
CLIENTS = 4
POOL_MAX = 16           # store/pg/store_pg_int.h PG_POOL_MAX, plus the anchor below


class Sub:
    """one submission while the standby is away: its bytes and its reply"""

    def __init__(self, msg, key, rcpt, node):
        self.msg, self.key, self.rcpt, self.node = msg, key, rcpt, node
        self.code, self.text = None, ""


def _client(ds, n, stop, out):
    """_client - submit new messages, keyed and not, to the nodes in turn until stop"""
    i = 0
    while not stop.is_set():
        key = "standby-%d-%d" % (n, i) if i % 2 == 0 else None
        msg = make_msg(key=key, subject="standby %d %d" % (n, i),
                       body=("Client %d message %d.\r\n" % (n, i)).encode())
        s = Sub(msg, key, "sb%d@example.com" % n, ds[(n + i) % len(ds)])
        try:
            r = submit(s.node.port, s.rcpt, msg, timeout=30)
            if r.data:
                s.code, s.text = r.data[0], r.data[1].decode("latin-1")
        except (OSError, EOFError) as e:
            s.text = repr(e)
        out.append(s)
        i += 1


def _stats(d):
    return ctl_json(d, "stats")["daemon"]["store"]


def _conns(pg, db):
    """_conns - (backends on the test's database, those waiting for the standby)"""
    row = pg.sql("SELECT count(*), count(*) FILTER (WHERE wait_event = 'SyncRep') "
                 "FROM pg_stat_activity WHERE datname = '%s'" % db)
    n, w = row.split("|")
    return int(n), int(w)


@case(timeout=150, stores=PG_ONLY)
def test_standby_stopped_under_load(t):
    """Two nodes, the synchronous standby stopped under keyed and unkeyed load,
    then started again: every 4xx stays undelivered, every 250 is delivered
    once, connections stay bounded, and the wait is logged and shown."""
    pg = t.pg_cluster(standby=True)
    sb = pg.standbys[0]
    url = t.pg_database(pg)
    db = url.rsplit("/", 1)[1]
    sink = t.sink()
    mport = free_port()
    ds = []
    for i, name in enumerate(("a", "b")):
        c = {"control": "%s/ctl-%s.sock" % (t.tmp, name),
             "store": {"url": url, "lease": LEASE, "commit_wait": COMMIT_WAIT}}
        if i == 0:
            c["metrics"] = {"address": "127.0.0.1", "port": mport}
        ds.append(t.daemon(sink, c, node=name))
    a, b = ds
    ok = [retry_submit([d], "warm@example.com", make_msg(key="standby-warm-" + d.node),
                       deadline=20)[0] for d in ds]
    sink.wait_count(len(ok))

    sb.stop()
    stop = threading.Event()
    subs, peak = [], [0, 0]

    def sample():
        while not stop.is_set():
            n, w = _conns(pg, db)
            peak[0], peak[1] = max(peak[0], n), max(peak[1], w)
            time.sleep(0.5)

    threads = [threading.Thread(target=_client, args=(ds, n, stop, subs), daemon=True)
               for n in range(CLIENTS)]
    threads.append(threading.Thread(target=sample, daemon=True))
    for th in threads:
        th.start()
    time.sleep(LOAD_S)
    stop.set()
    for th in threads:
        th.join(40)
    refused = [s for s in subs if s.code is not None and 400 <= s.code < 500]
    check(len(refused) >= CLIENTS, "submissions refused while the standby was away: %d of %d "
          "(%r)" % (len(refused), len(subs), [(s.code, s.text) for s in subs][:6]))
    check(not [s for s in subs if s.code == 250],
          "a 250 while the synchronous standby was away: %r"
          % [(s.node.node, s.text) for s in subs if s.code == 250])
    check(any(d.log_lines("commits wait for replication") for d in ds),
          "no node logged that commits wait for replication")
    # every backend left waiting is a node's own, kept and counted (none orphaned)
    wait_until(lambda: _conns(pg, db)[1] == sum(_stats(d)["replication_waiting"] for d in ds),
               10, "the backends waiting for the standby to be the nodes' counted ones",
               interval=0.5)
    n, w = _conns(pg, db)
    check(w >= 1, "no commit waits for the standby")
    check(peak[0] <= 2 * (POOL_MAX + 1), "connections to the database: %d" % peak[0])
    st = [_stats(d) for d in ds]
    check(sum(s["voided"] for s in st) >= 1 and sum(s["replication_waits"] for s in st) >= 1,
          "stats while the standby is away: %r" % st)
    m = samples(scrape(mport)[2])
    eq(m.get("idemrelay_store_replication_waiting"), float(st[0]["replication_waiting"]),
       "/metrics replication waiting on a")
    check(m.get("idemrelay_store_replication_waits_total", 0) >= (1 if st[0]["voided"] else 0),
          "/metrics replication waits on a: %r" % m.get("idemrelay_store_replication_waits_total"))

    sb.start()
    for d in ds:
        wait_until(lambda: _stats(d)["replication_waiting"] == 0, 20,
                   "node %s's commits to stop waiting" % d.node, interval=0.5)
        eq(len(d.log_lines("commits wait for replication")),
           len(d.log_lines("commits no longer wait for replication")),
           "node %s: wait episodes logged as started and ended" % d.node)
        eq(len(d.log_lines("commits wait for replication")), _stats(d)["replication_waits"],
           "node %s: episodes logged and counted" % d.node)
        check(_stats(d)["replication_waits"] <= 1,
              "node %s: one stop of the standby, %d episodes" % (d.node,
                                                               _stats(d)["replication_waits"]))
    wait_until(lambda: pg.sql("SELECT count(*) FROM voids", db) == "0", 20,
               "every void to be settled", interval=0.5)
    check(any(d.log_lines("status=voided", "dropped, never delivered") for d in ds),
          "no voided message was found committed once the standby was back")

    # the clients retry what was refused: the same bytes, on either node
    for s in refused:
        q, _, _ = retry_submit(ds, s.rcpt, s.msg, deadline=30)
        ok.append(q)
        if s.key:           # the key now has one QID, on every node
            for d in ds:
                r = submit(d.port, s.rcpt, s.msg)
                eq((r.data[0], r.qid), (250, q), "retry of key %s on node %s" % (s.key, d.node))
    check_exactly_once([sink], ok, timeout=30)
    n, w = _conns(pg, db)
    check(w == 0 and n <= 2 * (POOL_MAX + 1), "connections after: %d, %d waiting" % (n, w))
    print("standby: %d submissions, %d refused, %d voided, peak %d connections (%d waiting)"
          % (len(subs), len(refused), sum(s["voided"] for s in st), peak[0], peak[1]))



@case(timeout=150, stores=PG_ONLY)
def test_standby_stopped_through_pgbouncer(t):
    """One node reaches a cluster with a synchronous standby through PgBouncer
    in session mode (review of 18697a0): there PQbackendPID() is PgBouncer's
    own number, not the server's pid. The standby stopped, a duplicate is
    answered 250 with its QID (its batch writes nothing), a keyed and an
    unkeyed submission are each answered 451 and voided; the standby started
    again, their commits complete, and neither is ever delivered. With the
    transaction's id looked up by PQbackendPID() the commit was cut after
    10 s, read back as not committed, answered 451 unvoided, and delivered
    once the standby returned."""
    pg = t.pg_cluster(standby=True)
    sb = pg.standbys[0]
    url = t.pg_database(pg)
    db = url.rsplit("/", 1)[1]
    pb = t.pg_bouncer(server=pg, pool_mode="session")
    sink = t.sink()
    d = t.daemon(sink, {"store": {"url": pb.url_of(url), "lease": LEASE,
                                  "commit_wait": COMMIT_WAIT}})
    warm = make_msg(key="pgb-warm")
    ok = [retry_submit([d], "warm@example.com", warm, deadline=20)[0]]
    sink.wait_count(1)

    sb.stop()
    # a duplicate writes nothing: answered from its claim, not held for the standby
    r = submit(d.port, "warm@example.com", warm, timeout=60)
    eq((r.data[0], r.qid), (250, ok[0]), "a duplicate while the standby is away")
    subs = []
    for key in ("pgb-standby", None):
        msg = make_msg(key=key, subject="pgb standby %s" % key,
                       body=("Through PgBouncer, key %s.\r\n" % key).encode())
        s = Sub(msg, key, "pgb-%s@example.com" % ("key" if key else "nokey"), d)
        r = submit(d.port, s.rcpt, msg, timeout=60)
        s.code, s.text = r.data[0], r.data[1].decode("latin-1")
        subs.append(s)
    for s in subs:
        eq(s.code, 451, "reply while the standby was away (key %s): %s" % (s.key, s.text))
    eq(len(d.log_lines("answered 451 and voided")), 2,
       "batches voided: %r" % d.log_lines("store:"))

    sb.start()
    # every commit ends, every void is settled, and nothing is left queued
    wait_until(lambda: pg.sql("SELECT (SELECT count(*) FROM voids) + (SELECT count(*) FROM "
                              "messages WHERE queued)", db) == "0", 60,
               "the voids settled and nothing queued", interval=0.5)
    check(d.log_lines("status=voided", "dropped, never delivered"),
          "no voided message was found committed once the standby was back")
    for s in subs:
        got = sink.accepted(lambda r: s.rcpt in r["to"])
        eq(len(got), 0, "copies delivered of the message refused 451 (key %s)" % s.key)
    # a retry of the key is a new message, delivered once
    ok.append(retry_submit([d], subs[0].rcpt, subs[0].msg, deadline=30)[0])
    check_exactly_once([sink], ok, timeout=30)


@case(timeout=120, stores=PG_ONLY)
def test_standby_stopped_at_a_bounce(t):
    """A bounce whose outcome and notice (one transaction, deliver_record.c)
    commit while the synchronous standby is stopped: the hold runs out, the
    node sees the COMMIT wait for the standby (its commit record written: it
    can only commit) and leaves it to PostgreSQL, the notice not known to be
    queued. The notice was answered to no client: it is not voided, and the
    deferral is not written over the outcome, so once the standby is back
    the sender gets one notice and the recipient is never asked again.
    Voided, the notice was dropped once its commit went through: the bounce
    had none."""
    from cases_delivery import is_dsn
    pg = t.pg_cluster(standby=True)
    sb = pg.standbys[0]
    url = t.pg_database(pg)
    db = url.rsplit("/", 1)[1]
    sink = t.sink()
    d = t.daemon(sink, {"store": {"url": url, "lease": LEASE, "commit_wait": COMMIT_WAIT},
                        "upstream": {"timeout": "30s"}})
    sender = "bounce-to@example.org"
    slow, bad = "delay-4-slow@example.com", "permfail-sb@example.com"
    qid = submit_ok(d.port, [slow, bad], make_msg(key="standby-bounce"), sender=sender)
    # the mark is committed before the dot: the standby stops while the reply waits
    wait_until(lambda: sink.events("dot"), 20, "the final dot at the sink", interval=0.1)
    sb.stop()
    d.wait_log("has no outcome yet: waiting for PostgreSQL", timeout=30)
    sb.start()
    dsn = sink.wait_count(1, lambda r: is_dsn(r, sender), timeout=40,
                          what="the notice to %s once the standby is back" % sender)
    check(bad.encode() in dsn[0]["data"], "the notice does not name %s" % bad)
    wait_until(lambda: pg.sql("SELECT count(*) FROM messages WHERE queued", db) == "0", 30,
               "nothing left queued", interval=0.5)
    eq(pg.sql("SELECT count(*) FROM voids", db), "0", "voids")
    eq(pg.sql("SELECT state FROM rcpts WHERE qid = '%s' AND addr = '%s'" % (qid, bad), db),
       "2", "%s's state (STORE_RCPT_BOUNCED)" % bad)
    time.sleep(3)                       # a few retry periods: nothing more
    eq(len(sink.accepted(lambda r: is_dsn(r, sender))), 1, "notices")
    eq(len(sink.rcpt_attempts(bad)), 1, "RCPT attempts for %s" % bad)
    eq(len(sink.accepted(lambda r: slow in r["to"])), 1, "copies to %s" % slow)
