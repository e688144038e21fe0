"""What operators put between the nodes and PostgreSQL (issue 25, item 5).

PgBouncer (Debian's pgbouncer, started by the test: t.pg_bouncer()) in
session mode carries a node's sessions as they are: several nodes serve
through it under load, one killed with -9 and started again. In
transaction or statement mode a connection's server session changes from
one transaction to the next: the node's session lock and its prepared
statements cannot hold there, and the daemon refuses to start, in one
line, as does idemrelay -t. A server whose max_connections are all taken
refuses the node's new connections: one log line for the episode, 451 for
submissions meanwhile, and the node serves again by itself once
connections free up.

They run with E2E_STORE=postgresql only (make test-pg).
"""

import re
import signal
import subprocess
import threading
import time

from harness import (BIN, PG_ONLY, case, check, eq, expect_reply, make_msg, pgcluster, render_conf,
                     run, submit, submit_ok, wait_until)
from cases_nodes import Load, check_exactly_once, nodes, queued_qids, retry_submit
from cases_ops import ctl_json


SENT_RE = re.compile(r"\]: ([0-9A-Z]{12,20}): to=.* status=sent")
# what a node logs at warning level or worse: none is expected in a session-mode run
WORRIES = ("warning:", "error:", "fatal:", "panic:")


# but these: a sanitizer's allocator refuses mallopt(), so such a build says so at
# every start (relay/budget.c)
SANITIZER_START = "mallopt("


def worries(d, since=0):
    """worries - the warning, error, fatal and panic lines of d's log, from line since"""
    return [l for l in d.log().splitlines()[since:]
            if any(w in l for w in WORRIES) and SANITIZER_START not in l]


@case(timeout=150, stores=PG_ONLY)
def test_pooler_session_under_load(t):
    """Two nodes reach the database through PgBouncer in session mode, under
    load from retrying clients; node a is killed with -9 and started again:
    every 250 is delivered exactly once, a retry on the restarted node is
    answered with the QID its first submission got, and no node logs a
    warning or an error, but a's restart itself. Node a delivers to a sink
    that answers the final dot 2 s late, and dies in that wait: its last
    message arrived, and node b, taking it once a's lease has run out,
    finds its inflight mark and does not send it again (a kill between a
    mark and its dot could not be told from this, by any node: SPEC 5)."""
    # sized as idemrelay(8) says: 17 server connections a node
    pb = t.pg_bouncer(pool_mode="session", default_pool_size=2 * 17)
    slow = t.sink(default="delay-2")
    fast = t.sink()
    a, b = nodes(t, [slow, fast], url=pb.url_of(t.pg_url()), lease="3s",
                 conf={"upstream": {"connections": 1}})
    first = make_msg(key="pooler-retry-1")
    q = submit_ok(a.port, "retry@example.com", first)
    attempts = []
    load = Load([a, b], threads=4, prefix="pgb", pause=0.05, attempts=attempts).start()
    load.wait_count(30)
    dots = len(slow.events("dot"))
    wait_until(lambda: len(slow.events("dot")) > dots, 15, "a's next final dot")
    a.kill9()
    load.wait_count(len(load.ok) + 10)
    a.conf["upstream"]["port"] = fast.port      # its backlog goes out at once after
    with open(a.conf_path, "w") as f:
        f.write(render_conf(a.conf))
    a.start()
    restarted = len(a.log().splitlines())
    back = time.monotonic()
    eq(submit_ok(a.port, "retry@example.com", first), q, "the retry's QID on the restarted node")
    a.wait_log(q, "status=duplicate")
    load.wait_count(len(load.ok) + 30)
    qids = load.finish()
    check(any(x.node == "a" and x.code == 250 and x.t0 >= back for x in attempts),
          "the restarted node answered no 250 under the load")
    check_exactly_once([slow, fast], qids | {q}, timeout=60,
                       what="through PgBouncer in session mode")
    eq(worries(b), [], "node b's warnings and errors")
    eq(worries(a, restarted), [], "node a's warnings and errors after its restart")
    mine = queued_qids(a)
    print("session mode: %d QIDs; node b delivered %d that a had accepted, finished %d "
          "unconfirmed" % (len(qids) + 1, len(set(SENT_RE.findall(b.log())) & mine),
                           len(b.log_lines("status=unconfirmed"))))


# the one line a node refuses a pooler that shares server sessions with
SHARED = "need session pooling (PgBouncer: pool_mode = session)"


def warm(pb, db, n):
    """warm - make PgBouncer open n server connections to db (n clients in a
    transaction at once), which it keeps idle in its pool after"""
    procs = [subprocess.Popen([pgcluster.prog("psql"), "-X", "-q", "-d", pb.url_of(db), "-c",
                               "BEGIN; SELECT pg_sleep(1); COMMIT"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE) for _ in range(n)]
    for p in procs:
        _, err = p.communicate(timeout=30)
        check(p.returncode == 0, "warming PgBouncer: %s" % err)


def refused(t, pb, url, what):
    """refused - idemrelay -t and a start of a node whose store.url goes through
    pb: each exits 1, saying once, in one line, why; nothing was written to the
    database"""
    d = t.daemon(None, {"store": {"url": pb.url_of(url)}}, start=False, node="p")
    r = run([BIN, "-t", "-c", d.conf_path])
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    check(r.returncode == 1 and len(lines) == 1 and SHARED in lines[0],
          "%s: idemrelay -t exited %d, want 1 and one line saying %r:\n%s%s"
          % (what, r.returncode, SHARED, r.stdout, r.stderr))
    try:
        r = run([BIN, "-c", d.conf_path], timeout=40)
    except subprocess.TimeoutExpired:
        raise AssertionError("%s: the node started (it ran for 40 s)" % what)
    said = [l for l in r.stderr.splitlines() if "fatal" in l or "error" in l]
    check(r.returncode == 1 and len(said) == 1 and SHARED in said[0],
          "%s: the start exited %d, want 1 and one fatal line saying %r:\n%s"
          % (what, r.returncode, SHARED, r.stderr))
    print("%s: %s" % (what, said[0]))
    return d


@case(timeout=120, stores=PG_ONLY)
def test_pooler_transaction_refused(t):
    """PgBouncer in transaction mode (its default LIFO reuse, and
    server_round_robin with one, two and several idle server connections in
    its pool) and in statement mode: the node refuses to start, in one line,
    and idemrelay -t says the same; the database is left untouched. Through
    PgBouncer in session mode in front of the same database it starts."""
    pg = t.pg_shared()
    url = t.pg_url()
    db = url.rsplit("/", 1)[1]
    for mode, settings, idle in (("transaction", {}, 0), ("transaction", {}, 3),
                                 ("transaction", {"server_round_robin": 1}, 0),
                                 ("transaction", {"server_round_robin": 1}, 1),
                                 ("transaction", {"server_round_robin": 1}, 2),
                                 ("transaction", {"server_round_robin": 1}, 5),
                                 ("statement", {}, 0)):
        pb = t.pg_bouncer(pool_mode=mode, **settings)
        if idle:
            warm(pb, url, idle)
        refused(t, pb, url, "%s mode %s, %d idle" % (mode, settings, idle))
        pb.destroy()
    eq(pg.sql("SELECT count(*) FROM pg_tables WHERE tablename = 'idemrelay_schema'", db), "0",
       "schema tables made through a pooler that was refused")
    pb = t.pg_bouncer(pool_mode="session")
    r = run([BIN, "-t", "-c", t.daemon(None, {"store": {"url": pb.url_of(url)}}, start=False,
                                        node="s").conf_path])
    check(r.returncode == 0, "idemrelay -t through session mode: %d\n%s" % (r.returncode, r.stderr))
    sink = t.sink()
    d = t.daemon(sink, {"store": {"url": pb.url_of(url)}}, node="s")
    q = submit_ok(d.port, "s@example.com", make_msg(key="pooler-session-1"))
    sink.wait_count(1)
    check(q, "no QID")


class Slots:
    """psql sessions of the role idemrelay that take a server's free connection
    slots, one by one until the server refuses one; release() ends them."""

    def __init__(self, url):
        self.url = url + "?connect_timeout=5"
        self.held = []
        self.refusal = None

    def fill(self, most=40):
        """fill - take free slots until one is refused; how many were taken"""
        n = 0
        while n < most:
            p = subprocess.Popen([pgcluster.prog("psql"), "-X", "-A", "-t", "-d", self.url],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
            p.stdin.write("SELECT 'held';\n")
            p.stdin.flush()
            if p.stdout.readline().strip() != "held":    # refused: psql exits
                self.refusal = p.communicate(timeout=10)[1].strip()
                return n
            self.held.append(p)
            n += 1
        raise AssertionError("the server took %d more connections: max_connections is not low"
                             % most)

    def release(self):
        for p in self.held:
            p.stdin.close()
        for p in self.held:
            p.wait(10)
        self.held = []


@case(timeout=120, stores=PG_ONLY)
def test_pooler_max_connections(t):
    """The server's connection slots (max_connections 20) are all taken by other
    clients when node a's connections end (a is frozen meanwhile, so that it
    cannot take them back first): a logs one line that says so however many
    times it tries, answers 451 4.3.0 meanwhile, and serves again by itself
    once connections free up, without a restart; every 250 delivered once."""
    pg = t.pg_cluster()
    pg.configure(max_connections=20).restart()
    url = t.pg_database(pg)
    db = url.rsplit("/", 1)[1]
    sink = t.sink()
    a, = nodes(t, sink, names=("a",), url=url)
    before = submit_ok(a.port, "x@example.com", make_msg(key="slots-before"))
    slots = Slots(url)
    try:
        slots.fill()
        a.proc.send_signal(signal.SIGSTOP)
        try:
            pg.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                   "WHERE application_name = 'idemrelay' AND datname = '%s'" % db)
            wait_until(lambda: pg.sql("SELECT count(*) FROM pg_stat_activity WHERE "
                                      "application_name = 'idemrelay'") == "0", 10,
                       "node a's backends to end")
            freed = slots.fill()
        finally:
            a.proc.send_signal(signal.SIGCONT)
        check(freed >= 3, "only %d slots freed by a's connections" % freed)
        refused = []
        t0 = time.monotonic()
        while time.monotonic() - t0 < 8 or len(refused) < 3:      # some of a's retries
            msg = make_msg(key="slots-during-%d" % len(refused))
            r = submit(a.port, "x@example.com", msg, timeout=30)
            expect_reply(r.data, 451, "4.3.0", "a submission while the slots are taken")
            refused.append(msg)
            time.sleep(1)
        said = slots.refusal.split("FATAL:", 1)[-1].strip()      # what psql was told
        full = a.log_lines("store:", "(max_connections)")
        check(len(full) == 1 and said in full[0],
              "node a's lines about the slots: %r, want one with %r; its store lines:\n%s"
              % (full, said, "\n".join(a.log_lines("store:"))))
        eq(len(a.log_lines(said)), 1, "node a's lines with the server's refusal")
        # idemrelayctl finds no slot either: the daemon's view, and exit 1
        s = ctl_json(a, "stats", want=1)
        check(s["store"].get("readable") is False, "idemrelayctl stats read the store: %r" % s)
        store = s["daemon"]["store"]
        eq((store["up"], store["outages"]), (False, 1), "idemrelayctl stats: the store")
    finally:
        slots.release()
    after = [retry_submit([a], "x@example.com", m, deadline=30)[0] for m in refused]
    a.wait_log("PostgreSQL takes connections again")
    store = ctl_json(a, "stats")["daemon"]["store"]
    eq((store["up"], store["outages"]), (True, 1), "idemrelayctl stats after: the store")
    check(a.running(), "node a is not running")
    eq(a.runs, 1, "node a's starts")
    check_exactly_once([sink], [before] + after, what="after the slots freed up")
    print("max_connections: %d slots freed by a; %d submissions answered 451; %s"
          % (freed, len(refused), full[0]))
