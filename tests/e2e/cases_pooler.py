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

import time

from harness import PG_ONLY, case, check, eq, make_msg, submit_ok
from cases_nodes import Load, check_exactly_once, nodes


# what a node logs at warning level or worse: none is expected in a session-mode run
WORRIES = ("warning:", "error:", "fatal:", "panic:")


def worries(d, since=0):
    """worries - the warning, error, fatal and panic lines of d's log, from line since"""
    return [l for l in d.log().splitlines()[since:] if any(w in l for w in WORRIES)]


@case(timeout=150, stores=PG_ONLY)
def test_pooler_session_under_load(t):
    """Two nodes reach the database through PgBouncer in session mode, under
    load from retrying clients; node a is killed with -9 and started again:
    every 250 is delivered exactly once, a retry on the restarted node is
    answered with the QID its first submission got, and no node logs a
    warning or an error, but a's restart itself."""
    pb = t.pg_bouncer(pool_mode="session")
    sink = t.sink()
    a, b = nodes(t, sink, url=pb.url_of(t.pg_url()), lease="3s")
    first = make_msg(key="pooler-retry-1")
    q = submit_ok(a.port, "retry@example.com", first)
    attempts = []
    load = Load([a, b], threads=4, prefix="pgb", pause=0.05, attempts=attempts).start()
    load.wait_count(30)
    a.kill9()
    load.wait_count(len(load.ok) + 10)
    a.start()
    restarted = len(a.log().splitlines())
    back = time.monotonic()
    eq(submit_ok(a.port, "retry@example.com", first), q, "the retry's QID on the restarted node")
    a.wait_log(q, "status=duplicate")
    load.wait_count(len(load.ok) + 30)
    qids = load.finish()
    check(any(x.node == "a" and x.code == 250 and x.t0 >= back for x in attempts),
          "the restarted node answered no 250 under the load")
    check_exactly_once([sink], qids | {q}, timeout=60, what="through PgBouncer in session mode")
    eq(worries(b), [], "node b's warnings and errors")
    eq(worries(a, restarted), [], "node a's warnings and errors after its restart")
    print("session mode: %d QIDs, %d connections logged by PgBouncer"
          % (len(qids) + 1, sum(1 for l in open(pb.log_path) if "login attempt" in l)))
