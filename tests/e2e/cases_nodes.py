"""Several nodes on one PostgreSQL database (issue 14, SPEC section 7).

Every case starts two or three idemrelay nodes (t.daemon(..., node=NAME)) on
one database: the test's own on the run's cluster, or, where the case stops,
kills or fails over the server, a private cluster (t.pg_cluster()). The
clients retry as applications do: a 4xx, a refused connection or a
connection lost before the reply sends the same message, with the same
key, to the next node. What must hold, whatever fails: every 250 is
delivered exactly once, a key has one QID on every node, and the nodes serve
again by themselves once the database is back.

They run with E2E_STORE=postgresql only (make test-pg).
"""

import calendar
import os
import re
import subprocess
import threading
import time

from harness import (PG_ONLY, PG_OUTAGE, case, pgcluster, check, eq, expect_reply, make_msg,
                     pg_lock_key, pg_lock_row, qid_of, received_qids, run, submit, submit_ok,
                     wait_until)
from cases_ops import CTL, ctl_json
from cases_postfix import Postfix

# a deferred message waits for the operator (or the test) to make it due
QUEUED_RE = re.compile(r"\b([0-9A-Z]{12,20}): client=.* status=queued")
SLOW_RETRY = {"retry": {"first": "1h", "max": "1h", "give_up": "5d"}}
FAST_LEASE = "3s"
PG_NOW = "(extract(epoch from clock_timestamp()) * 1000000)::bigint"   # store_pg_int.h's


def nodes(t, sinks, names=("a", "b"), conf=None, url=None, lease=None):
    """nodes - one daemon per name on one database (the test's, or url), each
    with a control socket of its own; node i delivers to sinks[i] (or to the
    one sink given)"""
    if not isinstance(sinks, (list, tuple)):
        sinks = [sinks] * len(names)
    store = {}
    if url:
        store["url"] = url
    if lease:
        store["lease"] = lease
    out = []
    for name, sink in zip(names, sinks):
        c = dict(conf or {})
        c.setdefault("control", os.path.join(t.tmp, "ctl-%s.sock" % name))
        if store:
            c["store"] = dict(c.get("store", {}), **store)
        out.append(t.daemon(sink, c, node=name))     # started: its store is open
    return out


class Attempt:
    """One submission of retry_submit: when it started and ended (monotonic), the
    node, and its last reply (code None and the error when the connection failed)"""

    def __init__(self, node, t0, t1, code, text):
        self.node, self.t0, self.t1, self.code, self.text = node, t0, t1, code, text

    def __repr__(self):
        return "Attempt(%s, %.1f-%.1f, %s %r)" % (self.node, self.t0, self.t1, self.code, self.text)


def retry_submit(ds, rcpt, msg, start=0, deadline=60, log=None, attempts=None):
    """retry_submit - submit msg to ds[start], then the next node, ... until one
    answers 250; a 4xx or a failed connection moves on (after a short pause).
    Returns (qid, node index, tries). A 5xx is a failure of the test. Each try
    is appended to attempts (an Attempt) if given."""
    end = time.monotonic() + deadline
    i = start
    tries = 0
    last = None
    while time.monotonic() < end:
        d = ds[i % len(ds)]
        tries += 1
        t0 = time.monotonic()
        try:
            r = submit(d.port, rcpt, msg, timeout=15)
            reply = r.data or (r.rcpts[-1] if r.rcpts else r.mail)
            if attempts is not None:
                attempts.append(Attempt(d.node, t0, time.monotonic(), reply[0],
                                        reply[1].decode("latin-1")))
            if r.data is not None and r.data[0] == 250:
                q = r.qid
                if log is not None:
                    log.append((d.node, q))
                return q, i % len(ds), tries
            last = r
            check(reply[0] < 500, "a node refused for good: %r" % r)
        except (OSError, EOFError) as e:    # refused, reset, closed before the reply
            last = e                        # (smtplib's exceptions are OSErrors)
            if attempts is not None:
                attempts.append(Attempt(d.node, t0, time.monotonic(), None, repr(e)))
        i += 1
        time.sleep(0.1)
    raise AssertionError("no node answered 250 within %ds (last: %r)" % (deadline, last))


def deliveries(sinks):
    """deliveries - QID -> how many times it reached any of the sinks"""
    out = {}
    for s in sinks:
        for r in s.accepted():
            for q in received_qids(r["data"]):
                out[q] = out.get(q, 0) + 1
    return out


def check_exactly_once(sinks, qids, timeout=60, settle=2.0, what=""):
    """check_exactly_once - every QID in qids reached the sinks exactly once
    (waiting for the last ones), and no other QID did"""
    qids = set(qids)
    try:
        wait_until(lambda: qids <= set(deliveries(sinks)), timeout,
                   "%d message(s) at the sinks" % len(qids), interval=0.2)
    except AssertionError as e:
        raise AssertionError("%s%s; never delivered: %s" % (
            what and what + ": ", e, " ".join(sorted(qids - set(deliveries(sinks))))))
    time.sleep(settle)          # a second copy would come now (retry.first 1s)
    got = deliveries(sinks)
    twice = {q: n for q, n in got.items() if n != 1}
    extra = sorted(set(got) - qids)
    check(not twice and not extra, "%sdelivered more than once: %r; delivered without a 250: %r"
          % (what and what + ": ", twice, extra))


def queued_qids(d):
    """queued_qids - the QIDs node d logged as accepted (status=queued)"""
    return {m.group(1) for m in map(QUEUED_RE.search, d.log_lines("status=queued")) if m}


def ctl(d, *args, want=0):
    r = run([CTL, "-c", d.conf_path] + list(args))
    check(r.returncode == want, "idemrelayctl %s on node %s: exit %d, want %d\n%s%s"
          % (" ".join(args), d.node, r.returncode, want, r.stdout, r.stderr))
    return r


# ---------------------------------------------------------------- duplicates

@case(stores=PG_ONLY)
def test_nodes_cross_duplicate(t):
    """The same key to node A, then to node B: one message, A's QID from both,
    one delivery; a different message under the key is a mismatch on B too, and
    a new recipient under it (a partial duplicate) is a new message on B."""
    sink = t.sink()
    a, b = nodes(t, sink)
    msg = make_msg(key="nodes-dup-1")
    qa = submit_ok(a.port, "x@example.com", msg)
    qb = submit_ok(b.port, "x@example.com", msg)
    eq(qb, qa, "QID of the duplicate on node b")
    b.wait_log(qa, "status=duplicate")
    r = submit(b.port, "x@example.com", make_msg(key="nodes-dup-1", body="Other.\r\n"))
    expect_reply(r.data, 554, None, "a mismatch on node b")
    r = submit(b.port, ["x@example.com", "y@example.com"], msg)
    expect_reply(r.data, 250, "2.0.0", "a partial duplicate on node b")
    qy = r.qid
    check(qy != qa, "the new recipient is a new message (%s, %s)" % (qa, qy))
    check_exactly_once([sink], [qa, qy])
    recs = {received_qids(r["data"])[0]: r["to"] for r in sink.accepted()}
    eq((recs[qa], recs[qy]), (["x@example.com"], ["y@example.com"]), "recipients per message")


@case(timeout=150, stores=PG_ONLY)
def test_nodes_cross_race(t):
    """The same key to three nodes at the same instant, 25 rounds: in each round
    every node answers 250 with one QID, and the message is delivered once."""
    sink = t.sink()
    ds = nodes(t, sink, ("a", "b", "c"))
    rounds = 25
    qids = []
    for n in range(rounds):
        msg = make_msg(key="nodes-race-%d" % n, subject="race %d" % n)
        barrier = threading.Barrier(len(ds))
        got = [None] * len(ds)

        def racer(i):
            try:
                barrier.wait(10)
                got[i] = submit(ds[i].port, "race@example.com", msg, timeout=20)
            except Exception as e:
                got[i] = e
        ths = [threading.Thread(target=racer, args=(i,)) for i in range(len(ds))]
        for th in ths:
            th.start()
        for th in ths:
            th.join(30)
        for i, r in enumerate(got):
            check(not isinstance(r, Exception) and r is not None, "round %d node %s: %r"
                  % (n, ds[i].node, r))
            expect_reply(r.data, 250, "2.0.0", "round %d node %s" % (n, ds[i].node))
        q = {r.qid for r in got}
        check(len(q) == 1, "round %d: the racers got different QIDs: %r" % (n, q))
        qids.append(q.pop())
    check_exactly_once([sink], qids, what="%d races" % rounds)


# ---------------------------------------------------------------- a node dies

class Load:
    """Client threads that each send their own messages (their own keys) with
    retry_submit over the nodes, pause seconds apart, until stopped; they
    remember every 250."""

    def __init__(self, ds, threads=3, prefix="load", pause=0.2, attempts=None):
        self.ds = ds
        self.attempts = attempts
        self.prefix = prefix
        self.pause = pause
        self.lock = threading.Lock()
        self.ok = {}                # key -> set of QIDs answered 250
        self.errors = []
        self.stop = threading.Event()
        self.ths = [threading.Thread(target=self._run, args=(i,), daemon=True)
                    for i in range(threads)]

    def start(self):
        for th in self.ths:
            th.start()
        return self

    def _run(self, i):
        n = 0
        while not self.stop.is_set():
            key = "%s-%d-%d" % (self.prefix, i, n)
            msg = make_msg(key=key, subject=key)
            try:
                q, _, _ = retry_submit(self.ds, "load-%d@example.com" % i, msg, start=i + n,
                                       deadline=60, attempts=self.attempts)
            except Exception as e:
                with self.lock:
                    self.errors.append("%s: %s" % (key, e))
                return
            with self.lock:
                self.ok.setdefault(key, set()).add(q)
            n += 1
            self.stop.wait(self.pause)

    def wait_count(self, n, timeout=30):
        wait_until(lambda: len(self.ok) >= n, timeout, "%d messages answered 250" % n)

    def finish(self, timeout=90):
        self.stop.set()
        for th in self.ths:
            th.join(timeout)
        check(not any(th.is_alive() for th in self.ths), "a client thread did not finish")
        check(not self.errors, "clients failed: %r" % self.errors[:5])
        one = {k: q for k, q in self.ok.items() if len(q) != 1}
        check(not one, "a key answered with more than one QID: %r" % one)
        return {next(iter(q)) for q in self.ok.values()}


@case(timeout=180, stores=PG_ONLY)
def test_nodes_kill9_under_load(t):
    """Node a is killed with -9 while a private Postfix (both nodes as next
    hops) and retrying clients keep sending: every 250 is delivered exactly
    once, and the mail a held leased (it delivers slowly, one connection to a
    sink that takes 2 s a message) is delivered by b once its lease runs out."""
    slow = t.sink(default="delay-2")
    fast = t.sink()
    a, b = nodes(t, [slow, fast], lease=FAST_LEASE, conf={"upstream": {"connections": 1}})
    relayhost = "relayhost=[127.0.0.1]:%d, [127.0.0.1]:%d" % (a.port, b.port)
    with Postfix(t, a.port, [relayhost, "smtp_connect_timeout=2s"]) as pf:
        load = Load([a, b], threads=3, prefix="k9").start()
        for n in range(10):
            r = submit(pf.port, "pf-%d@example.com" % n,
                       make_msg(msgid="<k9-pf-%d@app.example.org>" % n, subject="pf %d" % n))
            expect_reply(r.data, 250, "2.0.0", "Postfix's reply")
        load.wait_count(20)
        a_before = queued_qids(a)
        a.kill9()
        kill_time = time.monotonic()
        for n in range(10, 20):
            r = submit(pf.port, "pf-%d@example.com" % n,
                       make_msg(msgid="<k9-pf-%d@app.example.org>" % n, subject="pf %d" % n))
            expect_reply(r.data, 250, "2.0.0", "Postfix's reply after the kill")
        load.wait_count(len(load.ok) + 20)
        qids = load.finish()
        wait_until(lambda: pf.queued() == 0, 60, "Postfix's queue to drain", interval=0.5)
        sent = [x for x in pf.deliveries() if x[4] == "sent"]
        eq(sorted({x[2] for x in sent}), sorted("pf-%d@example.com" % n for n in range(20)),
           "recipients Postfix relayed")
        pf_qids = {qid_of(x[5], "Postfix's relay reply") for x in sent}
    check_exactly_once([slow, fast], qids | pf_qids, timeout=60,
                       what="after the kill of node a")
    # a's accepted mail that it had not delivered when it died went out through b
    delivered_by_a = set()
    for r in slow.accepted():
        delivered_by_a.update(received_qids(r["data"]))
    moved = {q for q in a_before if q not in delivered_by_a}
    check(moved, "node a had no undelivered mail when it was killed: the case proves nothing")
    via_b = set()
    for r in fast.accepted():
        via_b.update(received_qids(r["data"]))
    eq(sorted(moved - via_b), [], "a's leased mail not delivered by b")
    print("kill -9: %d QIDs, %d of node a's moved to b, %.1fs after the kill"
          % (len(qids | pf_qids), len(moved), time.monotonic() - kill_time))


@case(timeout=120, stores=PG_ONLY)
def test_nodes_crash_between_commit_and_reply(t):
    """Node a commits a message and dies before it replies (its commit waits on
    the synchronous standby, which is stopped, when a is killed; the standby
    then comes back and the commit completes): the client retries on b and gets
    the QID a committed; b delivers it once a's lease has run out."""
    pg = t.pg_cluster(standby=True)
    sb = pg.standbys[0]
    url = t.pg_database(pg)
    db = url.rsplit("/", 1)[1]
    sink = t.sink()
    a, b = nodes(t, sink, url=url, lease=FAST_LEASE)
    msg = make_msg(key="nodes-crash-1")
    sb.stop()
    got = []
    th = threading.Thread(target=lambda: got.append(_try_submit(a.port, msg)), daemon=True)
    th.start()
    wait_until(lambda: pg.sql("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
               not in ("", "0"), 15, "node a's commit to wait for the standby")
    a.kill9()
    th.join(10)
    check(not got or not isinstance(got[0], tuple) or got[0][0] != 250,
          "node a replied before its commit was replicated: %r" % got)
    sb.start()
    q, i, tries = retry_submit([b], "x@example.com", msg, deadline=30)
    eq(pg.sql("SELECT node FROM messages WHERE qid = '%s'" % q, db), "a",
       "the node that committed QID %s" % q)
    check(b.log_lines(q, "status=duplicate"), "b did not answer the retry as a duplicate")
    check_exactly_once([sink], [q], timeout=30)


def _try_submit(port, msg):
    """_try_submit - one submission whose reply may never come: (code, text) or the error"""
    try:
        r = submit(port, "x@example.com", msg, timeout=30)
        return r.data
    except Exception as e:
        return e


# ---------------------------------------------------------------- the database fails

@case(timeout=180, stores=PG_ONLY)
def test_nodes_failover_under_load(t):
    """The primary is killed with -9 under load and the synchronous standby
    promoted (pg_ctl promote): the nodes, whose store.url names both servers
    with target_session_attrs=read-write, serve again within seconds; no 250
    is lost and nothing is delivered twice."""
    pg = t.pg_cluster(standby=True)
    sb = pg.standbys[0]
    db = t.pg_database(pg).rsplit("/", 1)[1]
    url = pg_multi_url([pg, sb], db)
    sink = t.sink()
    a, b = nodes(t, sink, url=url)
    load = Load([a, b], threads=4, prefix="fo").start()
    load.wait_count(30)
    pg.kill9()
    killed = time.monotonic()
    sb.promote()
    promoted = time.monotonic()
    n = len(load.ok)
    load.wait_count(n + 30, timeout=60)
    back = time.monotonic()
    qids = load.finish()
    check_exactly_once([sink], qids, timeout=60, what="after the failover")
    print("failover: %d QIDs; promoted %.1fs after the kill, 30 more 250s %.1fs after promote"
          % (len(qids), promoted - killed, back - promoted))
    check(back - promoted < 30, "the nodes took %.0fs to serve again after promote"
          % (back - promoted))


def pg_multi_url(clusters, db):
    return pgcluster.multi_url(clusters, db, connect_timeout=2)


@case(timeout=120, stores=PG_ONLY)
def test_nodes_failover_commit_id_reused(t):
    """The primary hangs (SIGSTOP) while a keyed batch's COMMIT waits for the
    stopped synchronous standby: written there, never replicated. The standby is
    promoted without it, and there the batch's transaction id, which the node
    read with its key locks, is made another transaction's, committed. The node
    gives the COMMIT up and reads the id's status on the new primary: committed.
    Its rows are not there, so the reply is 451 and the batch voided (1324c88):
    trusting the status answered 250 for a message that exists nowhere. A retry
    of the key is then a new message, delivered once.

    The node reaches each server through a proxy (one URL naming both,
    target_session_attrs=read-write): the primary's drops the node's other
    connections when it hangs (the committing one spared, so its COMMIT waits
    as it would), and the standby's holds every connection until the reused id
    is committed there, so the node's first answer from it is the collision."""
    pg = t.pg_cluster(standby=True)
    sb = pg.standbys[0]
    db = t.pg_database(pg).rsplit("/", 1)[1]
    pp, sp = t.pg_proxy(pg), t.pg_proxy(sb)
    sp.cut(hold=True)               # nothing reaches the standby until it is ready
    url = "postgresql://%s@127.0.0.1:%d,127.0.0.1:%d/%s?connect_timeout=2&" \
          "target_session_attrs=read-write" % (pgcluster.ROLE, pp.port, sp.port, db)
    sink = t.sink()
    d = t.daemon(sink, {"store": {"url": url}}, node="a")
    warm = retry_submit([d], "warm@example.com", make_msg(key="reused-warm"), deadline=20)[0]
    wait_until(lambda: pg.sql("SELECT count(*) FROM messages WHERE queued", db) == "0", 15,
               "the warm-up message delivered and its outcome written")
    sb.stop()
    msg = make_msg(key="reused-id", subject="reused id")
    got = []
    th = threading.Thread(target=lambda: got.append(_try_submit(d.port, msg)), daemon=True)
    th.start()
    try:
        row = wait_until(lambda: pg.sql(
            "SELECT client_port, backend_xid::text FROM pg_stat_activity WHERE datname = '%s' "
            "AND wait_event = 'SyncRep'" % db), 15, "the batch's COMMIT to wait for the standby")
        check("\n" not in row, "more than one commit waits for the standby: %r" % row)
        port, xid = (int(v) for v in row.split("|"))
        pg.freeze()
        pp.cut(spare=port)          # the others dropped; new ones hang there as on the primary
        sb.forget_primary().start()
        sb.promote()
        # a fresh cluster is in epoch 0: the 32-bit id is the xid8; each turn commits one id
        sb.sql("DO $$ BEGIN WHILE pg_current_xact_id() < '%d'::xid8 LOOP COMMIT; END LOOP; "
               "END $$" % xid)
        eq(sb.sql("SELECT pg_xact_status('%d'::xid8)" % xid), "committed",
           "the batch's id %d on the promoted standby" % xid)
        sp.heal()
        th.join(45)
    finally:
        pg.kill9()
    check(got and isinstance(got[0], tuple), "no reply to the batch: %r" % got)
    eq(got[0][0], 451, "the reply to a batch whose id is another transaction's: %r" % (got[0],))
    check(d.log_lines("reads as committed, but its messages cannot be read back"),
          "the node did not read the reused id as committed: %r" % d.log_lines("store:"))
    wait_until(lambda: sb.sql("SELECT count(*) FROM voids", db) == "0", 20,
               "the void to be settled", interval=0.5)
    q = retry_submit([d], "x@example.com", msg, deadline=30)[0]
    check_exactly_once([sink], [warm, q], timeout=30, what="after the failover")
    eq(len(sink.accepted(lambda r: "x@example.com" in r["to"])), 1,
       "copies of the reused id's message delivered")


@case(timeout=150, stores=PG_ONLY)
def test_nodes_postgresql_stopped(t):
    """PostgreSQL stops: the nodes answer 451 4.3.0 at the end of DATA (nothing
    accepted), log the outage once, and serve again by themselves when it
    starts; the refused messages, sent again, are accepted then, and every 250
    is delivered exactly once."""
    pg = t.pg_cluster()
    sink = t.sink()
    a, b = nodes(t, sink, url=t.pg_database(pg))
    before = [submit_ok(d.port, "x@example.com", make_msg(key="stop-before-%s" % d.node))
              for d in (a, b)]
    check_exactly_once([sink], before, settle=0)
    pg.stop()
    refused = []
    for n in range(3):
        for d in (a, b):
            msg = make_msg(key="stop-during-%s-%d" % (d.node, n))
            r = submit(d.port, "x@example.com", msg, timeout=30)
            check(r.data is not None, "no DATA reply while PostgreSQL is down: %r" % r)
            expect_reply(r.data, 451, "4.3.0", "node %s while PostgreSQL is down" % d.node)
            refused.append(msg)
    for d in (a, b):
        eq(len(d.log_lines(PG_OUTAGE)), 1, "outage log lines of node %s" % d.node)
    pg.start()
    after = [retry_submit([a, b], "x@example.com", m, start=i, deadline=30)[0]
             for i, m in enumerate(refused)]
    for d in (a, b):
        d.wait_log("PostgreSQL reachable again", timeout=30)
    check_exactly_once([sink], before + after, what="after the outage")


@case(timeout=150, stores=PG_ONLY)
def test_nodes_network_outage_under_load(t):
    """The network between the nodes and PostgreSQL fails under load from
    retrying clients (a proxy in between drops every connection, mid-transaction
    as they may be, and black-holes new ones), then heals: meanwhile the nodes
    answer 451 4.3.0, never 250; each logs the outage once and its end once, and
    serves again within seconds of the heal; every 250 is delivered exactly once.
    A batch whose COMMIT the cut tears logs a line of its own ("a commit's outcome
    cannot be read (PostgreSQL unreachable)"), answered 451 and settled once the
    network is back: that is not an outage's line (PG_OUTAGE)."""
    proxy = t.pg_proxy()
    sink = t.sink()
    # a lease that outlasts the outage: each node writes the outcomes it holds once the
    # network is back. Past its lease a node cut off is a dead node to the others, and
    # its inflight marks read as ambiguous deliveries: those it sent no dot after are
    # revived once it is back (test_nodes_mark_unknown_past_lease), the others' stories
    # stay unconfirmed (idemrelay(8), SEVERAL NODES)
    a, b = nodes(t, sink, url=proxy.url_of(t.pg_url()), lease="30s")
    attempts = []
    load = Load([a, b], threads=4, prefix="net", pause=0.05, attempts=attempts).start()
    load.wait_count(40)
    dropped = proxy.cut()
    cut = time.monotonic()
    for d in (a, b):
        d.wait_log(PG_OUTAGE, timeout=20)
    # longer than libpq's connect_timeout (5 s): black-holed connects time out; and
    # until the clients had 4 tries ended during the cut (each checked below), however
    # slowly a loaded machine lets them come
    time.sleep(8)
    wait_until(lambda: sum(x.t0 >= cut for x in list(attempts)) >= 4, 30,
               "4 tries answered while the network is cut")
    proxy.heal()
    healed = time.monotonic()
    n = len(load.ok)
    load.wait_count(n + 40, timeout=60)
    # and until each node has served again: one may reconnect seconds after the other
    # (its backoff), and the other answer the 40 meanwhile
    wait_until(lambda: {x.node for x in attempts if x.code == 250 and x.t0 >= healed}
               >= {a.node, b.node}, 30, "a 250 from each node after the heal")
    qids = load.finish()
    check_exactly_once([sink], qids, timeout=60, what="after the network outage")

    during = [x for x in attempts if x.t0 >= cut and x.t1 <= healed]
    eq([x for x in during if x.code == 250], [], "250s while the network was cut")
    other = [x for x in during if x.code != 451 or not x.text.startswith("4.3.0")]
    eq(other, [], "replies other than 451 4.3.0 while the network was cut")
    check(len(during) >= 4, "the clients tried only %d times during the outage" % len(during))
    first = {}
    for x in attempts:
        if x.code == 250 and x.t0 >= healed:
            first[x.node] = min(first.get(x.node, x.t1), x.t1)
    for d in (a, b):
        eq(len(d.log_lines(PG_OUTAGE)), 1, "outage log lines of node %s" % d.node)
        d.wait_log("PostgreSQL reachable again", timeout=10)
        eq(len(d.log_lines("PostgreSQL reachable again")), 1, "end of outage lines of node %s"
           % d.node)
        check(d.node in first, "node %s answered no 250 after the heal" % d.node)
        check(first[d.node] - healed < 10, "node %s took %.1fs to serve again after the heal"
              % (d.node, first[d.node] - healed))
    torn = [x for x in attempts if x.t0 < cut < x.t1]
    unread = sum(len(d.log_lines("a commit's outcome cannot be read")) for d in (a, b))
    print("network outage: %d connections dropped, %d black-holed; %d submissions under way "
          "at the cut (%s), %d commits' outcomes unread; %d tries answered 451 in %.1fs; "
          "first 250 after the heal: %s; %d QIDs"
          % (dropped, proxy.held_total, len(torn), " ".join(str(x.code) for x in torn), unread,
             len(during), healed - cut,
             ", ".join("%s %.1fs" % (k, v - healed) for k, v in sorted(first.items())),
             len(qids)))


def mark_unknown(t, warm):
    """The connection to PostgreSQL is lost while the inflight mark commits: the
    server commits it, the node never hears (the proxy drops the reply, then
    cuts the network for 3 s). The node abandons the transfer before the final
    dot (SPEC 5: no mark known, no dot), so the message did not arrive: once the
    network is back it must be sent, once, not taken for an ambiguous delivery
    (delivered-unconfirmed, never sent: a 250 lost, SPEC 7). With warm, a first
    message is delivered before, so that the mark goes by its prepared
    statement's name (the proxy follows the Bind)."""
    proxy = t.pg_proxy()
    sink = t.sink()
    a, = nodes(t, sink, names=("a",), url=proxy.url_of(t.pg_url()))
    first = []
    if warm:
        first = [submit_ok(a.port, "warm@example.com", make_msg(key="mark-unknown-0"))]
        check_exactly_once([sink], first, timeout=15, what="before the cut")
    proxy.cut_after(b"SET inflight = v.flag", delay=0.5)
    q = submit_ok(a.port, "mark@example.com", make_msg(key="mark-unknown-1"))
    wait_until(lambda: proxy.triggered, 15, "the inflight mark's commit through the proxy")
    a.wait_log(q, "cannot set the inflight mark", timeout=15)
    time.sleep(3)
    proxy.heal()
    a.wait_log("PostgreSQL reachable again", timeout=30)
    try:
        check_exactly_once([sink], first + [q], timeout=30,
                           what="after the mark's unknown outcome")
    finally:
        print("\n".join(a.log_lines(q)))
    eq(a.log_lines(q, "status=unconfirmed"), [], "delivered-unconfirmed lines")


@case(timeout=90, stores=PG_ONLY)
def test_nodes_mark_outcome_unknown(t):
    """mark_unknown on a fresh node: the mark's text goes in its Parse."""
    mark_unknown(t, warm=False)


@case(timeout=90, stores=PG_ONLY)
def test_nodes_mark_unknown_prepared(t):
    """mark_unknown after a first delivery: the mark goes by name (Bind). Its
    deferral is written late (the outage), when it is due already, so the
    lease stays till the node lets it go, and the node's taker (every second,
    in step with the writer's retries since the outage) can lease it again
    while the attempt is finishing: that lease must be delivered, not renewed
    for ever (it failed 4 of about 100 runs so, under load)."""
    mark_unknown(t, warm=True)


def revived_once(proxy, sink, a, b, q, what):
    """The end of a mark no dot followed, once a's link to PostgreSQL heals:
    a revives q, the sink gets it exactly once, and b's story says sent."""
    proxy.heal()
    try:
        check_exactly_once([sink], [q], timeout=30, what=what)
    finally:
        print("\n".join(a.log_lines(q) + b.log_lines(q)))
    check(a.log_lines(q, "revived: its inflight mark was never followed by a final dot"),
          "a did not log the revive")
    s = ctl_json(b, "show", q)["messages"][0]
    eq((s["state"], s["queued"]), ("sent", False), "the story in the end")
    eq([r["state"] for r in s["recipients"]], ["sent"], "recipients in the end")


def mark_past_lease(t, hold):
    """Node a's inflight mark commits but a never hears (the proxy between a and
    PostgreSQL drops the reply, then cuts a off), so it sends no final dot; the
    cut lasts longer than store.lease, and node b, which reaches PostgreSQL
    directly, takes the message, finds the mark and finishes it unconfirmed
    (upstream.ambiguous = assume-delivered). Once a is back, it revives the
    message (store_msg_revive): it is delivered, exactly once, and its story
    ends sent, not unconfirmed. The cut comes right after the mark's COMMIT went
    through the proxy, before its result could be read; whether b's verdict
    came first is waited for, not guessed. With hold, the connections a opens
    during the cut wait (connect_timeout 30 s) and go through when it ends:
    a's second try of the mark then reaches the database after b's verdict and
    is refused for the lease (then not found), not for the outage."""
    proxy = t.pg_proxy()
    sink = t.sink()
    url = proxy.url_of(t.pg_url())
    if hold:
        url += ("&" if "?" in url else "?") + "connect_timeout=30"
    a, = nodes(t, sink, names=("a",), url=url, lease=FAST_LEASE)
    b, = nodes(t, sink, names=("b",), lease=FAST_LEASE)
    proxy.cut_after(b"SET inflight = v.flag", delay=0.5, hold=hold)
    q = submit_ok(a.port, "revive@example.com", make_msg(key="mark-past-lease-1"))
    wait_until(lambda: proxy.triggered, 15, "a's inflight mark's commit through the proxy")
    if not hold:
        a.wait_log(q, "cannot set the inflight mark", timeout=15)
    # a's lease (3 s) runs out during the cut; b's verdict on a's mark
    b.wait_log(q, "status=unconfirmed", timeout=30)
    eq(sink.accepted(), [], "delivered while a was cut off")
    revived_once(proxy, sink, a, b, q, "after a's link came back")
    eq(ctl_json(a, "stats")["daemon"]["counters"]["revived"], 1, "a's revived counter")


@case(timeout=120, stores=PG_ONLY)
def test_nodes_mark_unknown_past_lease(t):
    """mark_past_lease: a's second try of the mark fails during the cut."""
    mark_past_lease(t, hold=False)


@case(timeout=120, stores=PG_ONLY)
def test_nodes_mark_retried_past_lease(t):
    """mark_past_lease with its second try after b's verdict: refused for the
    lease, then not found; a knows it sent no dot all the same (issue 25,
    item 3: 7 messages lost so in a randomized run)."""
    mark_past_lease(t, hold=True)


@case(timeout=120, stores=PG_ONLY)
def test_nodes_mark_reply_late(t):
    """Node a's inflight mark commits, but its reply is held up (the proxy
    between a and PostgreSQL holds the server's replies, then freezes a's
    link) for longer than upstream.timeout (2 s) and store.lease (3 s): a's
    bridge ends the upstream session while libesmtp waits for the mark, and
    node b takes the message, finds the mark and finishes it unconfirmed.
    When the link thaws, the mark's reply says it is set, but the session it
    was for is over: no final dot reached the sink, so a must abandon the
    message and revive it (its deferral is refused), not write its dot into
    the dead bridge (the message was lost so: the nemesis, directed replay
    200114). The sink gets it exactly once in the end."""
    proxy = t.pg_proxy()
    sink = t.sink()
    conf = {"upstream": {"timeout": "2s"}}
    a, = nodes(t, sink, names=("a",), conf=conf, url=proxy.url_of(t.pg_url()), lease=FAST_LEASE)
    b, = nodes(t, sink, names=("b",), conf=conf, lease=FAST_LEASE)
    proxy.cut_after(b"SET inflight = v.flag", delay=0.5, freeze=True)
    q = submit_ok(a.port, "late@example.com", make_msg(key="mark-reply-late-1"))
    wait_until(lambda: proxy.triggered, 15, "a's inflight mark through the proxy")
    # a's lease (3 s) runs out during the freeze: its bridge's 2 s ran out first
    b.wait_log(q, "status=unconfirmed", timeout=30)
    time.sleep(1)
    eq(sink.accepted(), [], "delivered while a's mark was unanswered")
    revived_once(proxy, sink, a, b, q, "after a's link thawed")


def proxied_node(t):
    """proxied_node - node a on the shared PostgreSQL through a proxy, with
    FAST_LEASE: the database, its name, the proxy, a sink and a"""
    pg = t.pg_shared()
    url = t.pg_url()
    proxy = t.pg_proxy()
    sink = t.sink()
    a, = nodes(t, sink, names=("a",), url=proxy.url_of(url), lease=FAST_LEASE)
    return pg, url.rsplit("/", 1)[1], proxy, sink, a


def committed_451(pg, db, proxy, node, msg):
    """msg submitted to node through proxy, which passes its batch's COMMIT,
    drops the reply and then refuses the node: answered 451 4.3.0 though the
    COMMIT committed. Its QID, read from the database."""
    proxy.cut_after(b"INSERT INTO messages", delay=0.5, refuse=True)
    r = submit(node.port, "x@example.com", msg)
    check(proxy.triggered, "the batch did not go through the proxy")
    expect_reply(r.data, 451, "4.3.0", "end of DATA, the commit's outcome unknown")
    qid = pg.sql("SELECT qid FROM messages", db)
    check(qid, "the COMMIT did not commit")
    return qid


@case(timeout=90, stores=PG_ONLY)
def test_nodes_commit_unknown_unreachable(t):
    """The connection to PostgreSQL is lost right after a batch's COMMIT went
    through (the server commits; the proxy drops its reply, then refuses the
    node) and PostgreSQL stays away longer than store.lease: the outcome can be
    neither read nor voided, and the client gets 451 4.3.0 (SPEC 7). Once it is
    back, the node settles the batch before anything else it does with the
    database: the message its COMMIT committed is voided, never delivered
    (though its lease ran out during the outage and the node's own taker asks
    every second), and a retry of the key is a new message, delivered once."""
    pg, db, proxy, sink, a = proxied_node(t)
    msg = make_msg(key="commit-unreachable-1")
    first = committed_451(pg, db, proxy, a, msg)
    wait_until(lambda: pg.sql("SELECT lease_until < %s FROM messages WHERE qid = '%s'"
                              % (PG_NOW, first), db) == "t", 15, "the 451's lease to run out")
    proxy.heal()
    a.wait_log("PostgreSQL reachable again", timeout=30)
    q, _, _ = retry_submit([a], "x@example.com", msg, deadline=30)
    check(q != first, "the retry was answered with the QID answered 451: %s" % q)
    check_exactly_once([sink], [q], timeout=30, what="after the outage")
    wait_until(lambda: pg.sql("SELECT count(*) FROM messages WHERE qid = '%s'" % first, db)
               == "0", 15, "the 451's message to be settled")
    check(a.log_lines(first, "voided"), "node a did not log the void of %s" % first)


@case(timeout=90, stores=PG_ONLY)
def test_nodes_cut_off_past_lease(t):
    """Node a is cut off alone (the proxy drops its COMMIT's reply, then refuses
    it) for longer than store.lease while it keeps a batch answered 451 whose
    COMMIT committed; node b reaches PostgreSQL. b takes the message once a's
    lease runs out and delivers it (idemrelay(8): a message answered 451 is
    delivered), and answers a retry of its key 250 with its QID. Once a is
    back, it leaves the message to b's delivery (logged) instead of voiding
    it: a retry of the key on a is answered with that QID too, and the message
    reaches the sink once (the void dropped its claims, so such a retry was a
    second message, delivered again)."""
    pg, db, proxy, sink, a = proxied_node(t)
    b, = nodes(t, sink, names=("b",), lease=FAST_LEASE)
    msg = make_msg(key="cut-off-past-lease-1")
    first = committed_451(pg, db, proxy, a, msg)
    wait_until(lambda: first in deliveries([sink]), 30, "b to deliver the message a answered 451")
    eq(submit_ok(b.port, "x@example.com", msg), first, "b's answer to a retry of the key")
    proxy.heal()
    a.wait_log(first, "answered 451 while PostgreSQL was unreachable", timeout=30)  # settled
    eq(submit_ok(a.port, "x@example.com", msg), first, "a's answer to a retry of the key")
    check_exactly_once([sink], [first], timeout=30, what="once a was back")
    check(a.log_lines(first, "another node took it for delivery"), "a did not log why it kept it")


# ---------------------------------------------------------------- operations

@case(timeout=90, stores=PG_ONLY)
def test_nodes_mark_refused_rest_uncharged(t):
    """A batch of three in one session, the first one's inflight mark lost with
    the connection to PostgreSQL (mark_unknown's cut): that one is handled as
    before (no dot, deferred; delivered once after a flush), and the two after
    it, which never reached the upstream, are not charged for it: deferred
    "delivery temporarily suspended" (not "conversation ... ended") and sent
    within seconds once the store is back, though retry.first is an hour."""
    proxy = t.pg_proxy()
    sink = t.sink(default="tempfail")
    conf = dict(SLOW_RETRY, upstream={"connections": 1})
    a, = nodes(t, sink, names=("a",), conf=conf, url=proxy.url_of(t.pg_url()))
    qids = [submit_ok(a.port, "mr%d@example.com" % i, make_msg(key="mark-refused-%d" % i))
            for i in range(3)]
    for q in qids:
        a.wait_log(q, "status=deferred")           # an attempt: the sink's 451
    sink.control()
    proxy.cut_after(b"SET inflight = v.flag", delay=0.5)
    ctl(a, "flush")                                 # the three due at once: one batch
    wait_until(lambda: proxy.triggered, 15, "an inflight mark's commit through the proxy")
    refused = a.wait_log("cannot set the inflight mark", timeout=15)[0]
    first = [q for q in qids if q in refused]
    eq(len(first), 1, "the message whose mark failed: %s" % refused)
    rest = [q for q in qids if q not in first]
    time.sleep(3)
    proxy.heal()
    a.wait_log("PostgreSQL reachable again", timeout=30)
    try:
        check_exactly_once([sink], rest, timeout=20, settle=0.5,
                           what="the rest of the batch, with retry.first = 1h")
        for q in rest:
            lines = a.log_lines(q, "status=deferred")
            eq(len(lines), 2, "deferral lines of %s: %r" % (q, lines))
            check("delivery temporarily suspended: not sent: the session with" in lines[1]
                  and "inflight mark of %s could not be recorded" % first[0] in lines[1],
                  "the deferral for another's mark says so: %s" % lines[1])
            eq(a.log_lines(q, "conversation with"), [], "a misleading reason for %s" % q)
        ctl(a, "flush")
        check_exactly_once([sink], qids, timeout=30, what="after the mark's unknown outcome")
    finally:
        print("\n".join(a.log_lines("status=")))
    eq(a.log_lines("status=unconfirmed"), [], "delivered-unconfirmed lines")


def wait_said(line):
    """wait_said - (refusals in a row, wait in s) a deferral for another's refused
    mark says, or the line if it says none"""
    m = re.search(r"\((\d+) refused in a row: again in (\d+) s\)", line)
    return m.groups() if m else line


def log_time(line):
    """log_time - a stamped log line's time, in seconds since the epoch"""
    stamp = line.split(" ", 1)[0]
    return calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")) + float(stamp[19:-1])


@case(stores=PG_ONLY, timeout=120)
def test_nodes_marks_refused_in_a_row_back_off(t):
    """A store that keeps refusing inflight marks: the first mark of a session lost
    with the connection to PostgreSQL, then, the store back, the first mark of the
    next session too. The rest of the first session wait 1 s, uncharged; the rest
    of the second, the second refusal in a row, 2 s: the wait doubles (to 60 s)
    while marks keep being refused, where the queue was taken up, and a session
    opened upstream, every second. Then every message is delivered once."""
    proxy = t.pg_proxy()
    sink = t.sink(default="tempfail")
    conf = dict(SLOW_RETRY, upstream={"connections": 1})
    a, = nodes(t, sink, names=("a",), conf=conf, url=proxy.url_of(t.pg_url()))
    qids = [submit_ok(a.port, "mrr%d@example.com" % i, make_msg(key="marks-refused-%d" % i))
            for i in range(4)]
    for q in qids:
        a.wait_log(q, "status=deferred")           # an attempt: the sink's 451
    sink.control()
    refused = []
    for n in (1, 2):
        proxy.cut_after(b"SET inflight = v.flag", delay=0.5, refuse=True)
        if n == 1:
            ctl(a, "flush")                         # the four due at once: one batch
        wait_until(lambda: proxy.triggered == n, 20, "inflight mark %d through the proxy" % n)
        line = wait_until(lambda: a.log_lines("cannot set the inflight mark")[n - 1:], 15,
                          "refused mark %d" % n)[0]
        refused += [q for q in qids if q in line]
        eq(len(refused), n, "the messages whose marks failed: %s" % refused)
        wait_until(lambda: proxy.mode == "refuse", 5, "the cut after mark %d" % n)
        proxy.heal()
    try:
        a.wait_log("PostgreSQL reachable again", timeout=30)
        rest = [q for q in qids if q not in refused]
        check_exactly_once([sink], rest, timeout=30, settle=0.5,
                           what="the rest of the second batch, with retry.first = 1h")
        waits = {q: [wait_said(l) for l in a.log_lines("]: %s: to=" % q, "status=deferred",
                                                       "inflight mark of")]
                 for q in qids}
        eq(waits, {refused[0]: [], refused[1]: [("1", "1")],
                   rest[0]: [("1", "1"), ("2", "2")], rest[1]: [("1", "1"), ("2", "2")]},
           "each deferral for another's refused mark: (refusals in a row, its wait)")
        for q in rest:                  # a lower bound: the time it was put off to
            put_off = log_time(a.log_lines("]: %s: to=" % q, "2 refused in a row")[0])
            sent = log_time(a.log_lines("]: %s: to=" % q, "status=sent")[0])
            check(sent - put_off >= 1.9, "%s sent %.2f s after its second wait began"
                  % (q, sent - put_off))
        ctl(a, "flush")
        check_exactly_once([sink], qids, timeout=30, what="after the refused marks")
    finally:
        print("\n".join(a.log_lines("status=")))
    eq(a.log_lines("status=unconfirmed"), [], "delivered-unconfirmed lines")


@case(stores=PG_ONLY)
def test_nodes_flush_any_node(t):
    """Messages accepted by a and by b are deferred (retry in an hour);
    idemrelayctl flush on b alone makes them all due, and they are delivered."""
    sink = t.sink(default="tempfail")
    conf = dict(SLOW_RETRY)
    a, b = nodes(t, sink, conf=conf)
    qids = [submit_ok(d.port, "fl-%s-%d@example.com" % (d.node, n),
                      make_msg(key="flush-%s-%d" % (d.node, n)))
            for d in (a, b) for n in range(3)]
    for q in qids:
        wait_until(lambda: a.log_lines(q, "status=deferred") or b.log_lines(q, "status=deferred"),
                   15, "%s deferred" % q)
    sink.control()
    time.sleep(1.5)
    eq(sink.accepted(), [], "delivered before the flush")
    ctl(b, "flush")
    check_exactly_once([sink], qids, timeout=20, what="after flush on b")



@case(timeout=90, stores=PG_ONLY)
def test_nodes_reroute_during_attempt(t):
    """A message rerouted through node a's control socket while node b's attempt
    holds it at tenant-a's DATA (3 s, then the final dot refused 451): only a ran
    the reroute, and b's deferral (retry.first 60 s) overwrote the reroute's due
    time with the retry earned on the old route. It must reach tenant-b's sink
    within 15 s of the deferral, once, with no second attempt at tenant-a."""
    sink_a, sink_b, default = t.sink(), t.sink(), t.sink()
    sink_a.control(data_delay=3, default="data-tempfail")

    def up(sink):
        return {"host": "127.0.0.1", "port": sink.port, "timeout": "10s"}
    ra, rb = {"name": "tenant-a", "upstream": up(sink_a)}, {"name": "tenant-b", "upstream": up(sink_b)}
    # b accepts alice's mail for tenant-a; a's routes, the reroute's, send it to tenant-b
    routes = {"a": [dict(rb, sender="alice@example.org"), dict(ra, sender="nobody@example.org")],
              "b": [dict(ra, sender="alice@example.org"), dict(rb, sender="nobody@example.org")]}
    a, b = [t.daemon(default, {"retry": {"first": "60s", "max": "60s", "give_up": "5d"},
                               "routes": routes[n], "control": os.path.join(t.tmp, "ctl-%s.sock" % n)},
                     node=n) for n in ("a", "b")]
    q = submit_ok(b.port, "rcpt@example.com", make_msg(key="reroute-nodes", subject="alice",
                                                       frm="alice@example.org"),
                  sender="alice@example.org")
    wait_until(lambda: sink_a.events("data-delay"), 20, "tenant-a's sink holding b's DATA")
    eq(ctl_json(a, "reroute", q)["rerouted"], [q], "reroute on a during b's attempt")
    b.wait_log(q, "status=deferred", "data-tempfail")
    sink_b.wait_count(1, timeout=15, what="the message at tenant-b after b's deferral")
    time.sleep(1)
    eq(len(sink_b.accepted()), 1, "deliveries at tenant-b")
    eq(len(sink_a.events("data-delay")), 1, "attempts at tenant-a")
    eq(sink_a.accepted() + default.accepted(), [], "tenant-a's sink and the default took nothing")


# ---------------------------------------------------------------- a lease and its commit

# the COMMIT of the first transaction that puts a message from slow@ waits
# (a deferred trigger runs at COMMIT: the rows, with their leases, are
# already returned); a sequence is not rolled back: once only
SLOW_COMMIT_SQL = """
CREATE SEQUENCE e2e_slow_once;
GRANT USAGE ON SEQUENCE e2e_slow_once TO PUBLIC;
CREATE FUNCTION e2e_slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF nextval('e2e_slow_once') = 1 THEN
        PERFORM pg_sleep(%s);
    END IF;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER e2e_slow_commit AFTER INSERT ON messages
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.sender = 'slow@example.org') EXECUTE FUNCTION e2e_slow_commit();
"""


@case(timeout=120, stores=PG_ONLY)
def test_nodes_renewal_during_commit(t):
    """One node, store.lease 12 s (renewed every 4 s), both delivery threads busy
    on messages whose final dot's reply the sink holds 9 s. Message A's COMMIT
    then waits 6 s at the server, its row and lease already returned: a lease
    renewal runs meanwhile and cannot see the row. Messages B1-B5 commit just
    after it. When the threads are free (A's lease still live), A and the Bs go
    in one batch, A first. A's lease must still be the node's: on main the
    renewal forgot it, A's inflight mark was refused ("another node holds the
    message's lease"), the session abandoned and the Bs deferred by
    retry.first (an hour here), as the 45 messages test_expiry_keeps_up never
    delivered under load. Every message is delivered exactly once, soon. (Had
    A's lease run out first, the node would take it again: no failure either.)"""
    sink = t.sink()
    d = t.daemon(sink, dict(SLOW_RETRY, upstream={"timeout": "30s"}, store={"lease": "12s"},
                            control=os.path.join(t.tmp, "ctl.sock")))
    pg, db = t.pg_shared(), t.pg_url().rsplit("/", 1)[1]
    busy = []
    for i in range(2):          # one a thread: the second comes once the first is taken
        busy.append(submit_ok(d.port, "delay-9-busy%d@example.com" % i,
                              make_msg(key="renew-busy-%d" % i)))
        wait_until(lambda: sink.log().count("delaying reply") > i, 15,
                   "the sink to hold delivery %d's final dot" % i)
    pg.sql(SLOW_COMMIT_SQL % 6, db)
    got = {}

    def client(name, sender):
        got[name] = submit_ok(d.port, "renew-%s@example.com" % name,
                              make_msg(key="renew-commit-%s" % name, frm=sender),
                              sender=sender, timeout=40)
    threads = [threading.Thread(target=client, args=("a", "slow@example.org"), daemon=True)]
    threads[0].start()
    wait_until(lambda: pg.sql("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' "
                              "AND datname = '%s'" % db) not in ("", "0"), 15,
               "A's commit to wait at the server")
    for i in range(1, 6):
        threads.append(threading.Thread(target=client, args=("b%d" % i, "sender@example.org"),
                                        daemon=True))
        threads[-1].start()
    for th in threads:
        th.join(60)
    eq(sorted(got), ["a", "b1", "b2", "b3", "b4", "b5"], "submissions answered 250")
    check_exactly_once([sink], busy + list(got.values()), timeout=40,
                       what="a commit that outlasted a lease renewal")
    eq(d.log_lines("cannot set the inflight mark"), [],
       "inflight marks refused on the node's own leases")


# store/pg/store_pg_int.h PG_SCHEMA_LOCK: the lock nodes take to make the schema current
SCHEMA_LOCK = pg_lock_key("schema")
SCHEMA_LOCK_ROWS = ("SELECT count(*) FILTER (WHERE granted), count(*) FILTER (WHERE NOT granted) "
                    "FROM pg_locks l WHERE " + pg_lock_row(SCHEMA_LOCK))
# a start's word that it waits for the schema lock (asked for once a second)
WAITS = "waiting for the PostgreSQL schema lock"


@case(timeout=90, stores=PG_ONLY)
def test_nodes_start_upgrades_older_schema(t):
    """Two nodes started at once on a database of the schema before this build's
    (7: the trigger, its function and the index version 8 drops and the foreign
    key version 9 drops are made again, the column version 10 adds dropped, the
    index version 11 remakes made as before, the version set back) both come up,
    the schema is migrated once, to 11, and both
    serve. The test holds the
    schema lock while they start, so that both have read the older schema
    without it (their start-up check) and wait for it together: their start-up
    check took an older schema for a refusal and the node exited ("start a node
    to upgrade it"), so no node could upgrade, and a second node started while
    the first migrated could stop at a version in between."""
    pg = t.pg_shared()
    db = t.pg_url().rsplit("/", 1)[1]
    sink = t.sink()
    a = t.daemon(sink, node="a")
    eq(pg.sql("SELECT max(version) FROM idemrelay_schema", db), "11",
       "this test undoes migrations 7 -> 8 to 10 -> 11 (store_pg_schema.c); the schema version")
    a.stop()
    pg.sql("CREATE FUNCTION idemrelay_mark() RETURNS trigger LANGUAGE plpgsql AS"
           " $f$ BEGIN RETURN NEW; END $f$", db)
    pg.sql("CREATE TRIGGER messages_mark BEFORE UPDATE OF inflight ON messages FOR EACH ROW"
           " WHEN (OLD.inflight IS DISTINCT FROM NEW.inflight) EXECUTE FUNCTION idemrelay_mark()",
           db)
    pg.sql("CREATE INDEX messages_lease ON messages (lease_token) WHERE queued", db)
    pg.sql("ALTER TABLE rcpts ADD CONSTRAINT rcpts_qid_fkey FOREIGN KEY (qid) REFERENCES messages"
           " ON DELETE CASCADE", db)
    pg.sql("ALTER TABLE messages DROP COLUMN replayed", db)
    pg.sql("DROP INDEX messages_take", db)
    pg.sql("CREATE INDEX messages_due ON messages (next_attempt) WHERE queued", db)
    pg.sql("UPDATE idemrelay_schema SET version = 7", db)
    b = t.daemon(sink, node="b", start=False)
    holder = subprocess.Popen([pgcluster.prog("psql"), "-X", "-q", "-d",
                               pg.url(db, pgcluster.SUPERUSER)], stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    failed = []

    def start(d):
        try:
            d.start()
        except AssertionError as e:
            failed.append("node %s: %s" % (d.node, e))
    try:
        holder.stdin.write("SELECT pg_advisory_lock(%s);\n" % SCHEMA_LOCK)
        holder.stdin.flush()
        wait_until(lambda: pg.sql(SCHEMA_LOCK_ROWS, db) == "1|0", 10, "the test's schema lock")
        threads = [threading.Thread(target=start, args=(d,), daemon=True) for d in (a, b)]
        for th in threads:
            th.start()
        wait_until(lambda: failed or all(WAITS in d.log().rsplit("=== e2e: start", 1)[-1]
                                         for d in (a, b)), 20,
                   "both nodes to wait for the schema lock (%r)" % WAITS)
        eq(failed, [], "nodes that exited at their start on the older schema")
    finally:
        holder.stdin.close()            # psql ends: its session's lock goes
        holder.wait(10)
    for th in threads:
        th.join(40)
    eq(failed, [], "nodes that did not start")
    eq(pg.sql("SELECT max(version) FROM idemrelay_schema", db), "11", "the version after the start")
    eq(pg.sql("SELECT count(*) FROM pg_indexes WHERE indexname = 'messages_lease'", db), "0",
       "the index migration 8 drops")
    eq(pg.sql("SELECT count(*) FROM pg_trigger WHERE tgname = 'messages_mark'", db), "0",
       "the trigger migration 8 drops")
    eq(pg.sql("SELECT count(*) FROM pg_proc WHERE proname = 'idemrelay_mark'", db), "0",
       "and its function")
    eq(pg.sql("SELECT count(*) FROM pg_constraint WHERE conname = 'rcpts_qid_fkey'", db), "0",
       "the foreign key migration 9 drops")
    eq(pg.sql("SELECT count(*) FROM information_schema.columns WHERE table_name = 'messages' "
              "AND column_name = 'replayed'", db), "1", "the column migration 10 adds")
    eq(pg.sql("SELECT count(*) FROM pg_indexes WHERE indexname = 'messages_take' "
              "AND indexdef LIKE '%COALESCE(route%'", db), "1", "the index migration 11 adds")
    eq(pg.sql("SELECT count(*) FROM pg_indexes WHERE indexname = 'messages_due'", db), "0",
       "the index it replaces, dropped after the migration")
    migrated = [d.node for d in (a, b) for line in d.log().rsplit("=== e2e: start", 1)[1]
                .splitlines() if "schema migrated to version 11" in line]
    eq(len(migrated), 1, "nodes that migrated to version 11 (%r)" % migrated)
    qs = [submit_ok(d.port, "x@example.com", make_msg(key="upgrade-" + d.node)) for d in (a, b)]
    check_exactly_once([sink], qs, timeout=30)


# a host clock SKEW_S seconds off (LD_PRELOAD): the wall clock moved, the monotonic one not
SKEW_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
int gettimeofday(struct timeval *restrict tv, void *restrict tz)
{
	static int (*real)(struct timeval *, void *);
	int rc;

	if (!real)
		real = (int (*)(struct timeval *, void *)) dlsym(RTLD_NEXT, "gettimeofday");
	rc = real(tv, tz);
	if (rc == 0 && tv)
		tv->tv_sec += atol(getenv("SKEW_S"));
	return rc;
}
int clock_gettime(clockid_t id, struct timespec *ts)
{
	static int (*real)(clockid_t, struct timespec *);
	int rc;

	if (!real)
		real = (int (*)(clockid_t, struct timespec *)) dlsym(RTLD_NEXT, "clock_gettime");
	rc = real(id, ts);
	if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE))
		ts->tv_sec += atol(getenv("SKEW_S"));
	return rc;
}
"""


@case(timeout=150, stores=PG_ONLY)
def test_nodes_clock_skew(t):
    """Node b's clock is an hour and a bit ahead (a host before NTP's first
    sync, a VM resumed): SPEC 7 wants sections 3-5 across nodes exactly as on
    one, so a key node a accepted stays claimed for key_ttl on both nodes: b's
    expiry (every 10 s) leaves a's claims and story, a retry to either node
    gets a's QID, and the message is delivered once. Each node's claims and
    stories are kept on the database's clock; b says its clock is off."""
    src = os.path.join(t.tmp, "skew.c")
    with open(src, "w") as f:
        f.write(SKEW_SHIM)
    shim = os.path.join(t.tmp, "skew.so")
    eq(run(["cc", "-shared", "-fPIC", "-o", shim, src, "-ldl"]).returncode, 0, "cc skew.c")
    sink = t.sink()
    conf = {"store": {"key_ttl": "1h"}}
    a = t.daemon(sink, dict(conf), node="a")
    b = t.daemon(sink, dict(conf), start=False, node="b")
    b.env["LD_PRELOAD"] = shim
    b.env["SKEW_S"] = "3700"
    b.start()
    msg = make_msg(key="skew-1")
    qa = submit_ok(a.port, "x@example.com", msg)
    check_exactly_once([sink], [qa])
    time.sleep(22)                      # b's expiry runs twice (daemon/control.c)
    for d in (a, b):
        r = submit(d.port, "x@example.com", msg)
        expect_reply(r.data, 250, "2.0.0", "the retry on node %s" % d.node)
        eq(r.qid, qa, "the QID of the retry on node %s (a's, a duplicate)" % d.node)
    check_exactly_once([sink], [qa], settle=3)
    b.wait_log("this host's clock is 3700", "ahead of the database's")


@case(timeout=120, stores=PG_ONLY)
def test_nodes_same_name_after_cut(t):
    """Node a is cut off from PostgreSQL (its connections reset, its slot lock
    with them) while a second process of the name a starts, as an operator
    or a supervisor replacing a node that looked dead would: the start lets
    it in. Once the first is back it finds its slot lock held by another
    process, says so and exits 1 (idemrelay(8)): two processes of one name
    would give out QIDs of one slot and deliver under one name's leases.
    The second serves on, and what each accepted is delivered once."""
    proxy = t.pg_proxy()
    sink = t.sink()
    a1, = nodes(t, sink, names=("a",), url=proxy.url_of(t.pg_url()))
    q1 = submit_ok(a1.port, "x@example.com", make_msg(key="same-name-1"))
    check_exactly_once([sink], [q1])
    proxy.cut(refuse=True)
    time.sleep(2)
    a2 = t.daemon(sink, {"control": os.path.join(t.tmp, "ctl-a2.sock")}, node="a")
    proxy.heal()
    wait_until(lambda: not a1.running(), 30, "the first process of node a to exit")
    a1.stopped = True
    eq(a1.proc.returncode, 1, "the first process's exit status")
    a1.wait_log("its slot lock is held by another process", "a second node of that name "
                "started while this one was cut off from the database; this one stops")
    q2 = submit_ok(a2.port, "x@example.com", make_msg(key="same-name-2"))
    check_exactly_once([sink], [q1, q2])


@case(timeout=90, stores=PG_ONLY)
def test_nodes_load_error_waits_its_retry(t):
    """A queued message that cannot be loaded (its row broken: data of the
    wrong size, EINVAL) is tried again after retry.first, as on one node,
    by the node that took it: where the node gave its lease up, and every
    node took it and failed again about once a second."""
    sink = t.sink(default="tempfail")
    a, b = nodes(t, sink, conf=SLOW_RETRY)
    q = submit_ok(a.port, "x@example.com", make_msg(key="load-error"))
    wait_until(lambda: any(d.log_lines(q, "status=deferred") for d in (a, b)), 20,
               "the first attempt's deferral")
    pg = t.pg_shared()
    db = t.pg_url().rsplit("/", 1)[1]
    eq(pg.sql("UPDATE messages SET data_len = data_len + 1, next_attempt = 0 WHERE qid = '%s' "
              "RETURNING qid" % q, db), q, "the row broken and made due")
    wait_until(lambda: any(d.log_lines(q, "cannot load for delivery") for d in (a, b)), 20,
               "a load that fails")
    time.sleep(8)
    fails = [len(d.log_lines(q, "cannot load for delivery")) for d in (a, b)]
    check(sum(fails) == 1, "loads that failed in 8 s on nodes a and b: %r, want one, then "
          "retry.first (1 h)" % fails)
