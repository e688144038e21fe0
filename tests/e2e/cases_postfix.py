"""Postfix as the client: a real Postfix relays through idemrelay (SPEC section 4).

A private Postfix instance (tests/postfix/postfix.sh: its own config, queue
and data directories, listening on a free loopback port) has idemrelay as
its relayhost. Postfix splits a 120-recipient message into transactions of
at most 50 recipients and sends them in parallel, each with the same
Message-ID; idemrelay claims per recipient, so the upstream sink receives
every recipient exactly once however often the message is submitted.

These tests need Debian's postfix package and root (as CI has them); they
fail, never skip, when either is missing.
"""

import os
import re
import select
import shutil
import socket
import tempfile
import threading
import time

from harness import (REPO, case, check, eq, expect_reply, free_port, make_msg, qid_of,
                     received_qids, run, submit, wait_until)

POSTFIX_SH = os.path.join(REPO, "tests", "postfix", "postfix.sh")
SBIN_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
N_RCPTS = 120
RCPT_LIMIT = 50

# postfix/smtp[PID]: QUEUEID: to=<ADDR>, relay=..., ..., status=sent (REPLY)
DELIVERY_RE = re.compile(r"postfix/smtp\[(\d+)\]: ([0-9A-Za-z]+): to=<([^>]*)>, "
                         r"relay=([^,]*), .*?status=(\w+) \((.*)\)$")


class SlowGreetingProxy:
    """A TCP proxy from Postfix to idemrelay that holds each connection's
    greeting back for a moment. An idemrelay transaction takes a few
    milliseconds, so without it Postfix may finish one part before its
    queue manager hands out the next, and the parts would not overlap.
    Counts how many connections were open at once."""

    def __init__(self, upstream_port, delay=0.4):
        self.upstream_port = upstream_port
        self.delay = delay
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(64)
        self.port = self.lsock.getsockname()[1]
        self.lock = threading.Lock()
        self.active = self.max_active = self.sessions = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        try:
            u = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
        except OSError:
            c.close()           # idemrelay is down: Postfix defers
            return
        with self.lock:
            self.active += 1
            self.sessions += 1
            self.max_active = max(self.max_active, self.active)
        try:
            time.sleep(self.delay)
            peer = {c: u, u: c}
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                r, _, _ = select.select([c, u], [], [], 1.0)
                for s in r:
                    data = s.recv(65536)
                    if not data:
                        return
                    peer[s].sendall(data)
        except OSError:
            pass
        finally:
            with self.lock:
                self.active -= 1
            c.close()
            u.close()

    def close(self):
        self.lsock.close()


class Postfix:
    """A private Postfix instance relaying to idemrelay; a context manager
    that always stops it and keeps its log in the test's directory."""

    def __init__(self, t, relay_port, settings=()):
        self.t = t
        self.relay_port = relay_port
        self.settings = list(settings)
        self.base = None
        self.dir = None
        self.port = None
        self.saved_log = os.path.join(t.tmp, "postfix-maillog")

    def __enter__(self):
        check(shutil.which("postfix", path=SBIN_PATH) and shutil.which("smtp-sink", path=SBIN_PATH),
              "Postfix is not installed: this test needs Debian's postfix package "
              "(apt-get install -y postfix, as .ci/run does)")
        check(os.geteuid() == 0, "a private Postfix instance must be started as root")
        # Postfix's daemons run as user postfix: the instance lives in a
        # directory that user can reach (the runner's temp dirs are 0700).
        # The port free_port() found may be taken by a parallel case before
        # Postfix's master binds it: then once more on another, three at most.
        self.t.extra_logs.append(("postfix maillog", self.saved_log))
        for attempt in range(3):
            self.base = tempfile.mkdtemp(prefix="idemrelay-postfix-")
            os.chmod(self.base, 0o755)
            self.dir = os.path.join(self.base, "pf")
            self.port = free_port()
            r = run([POSTFIX_SH, "start", self.dir, str(self.port), str(self.relay_port)]
                    + self.settings, timeout=45)
            if r.returncode == 0:
                return self
            self.__exit__(None, None, None)
            if "Address already in use" not in r.stdout + r.stderr:
                break
        raise AssertionError("could not start Postfix (rc=%d): %s%s"
                             % (r.returncode, r.stdout, r.stderr))

    def __exit__(self, *exc):
        if self.base is None:
            return False
        try:
            run([POSTFIX_SH, "stop", self.dir], timeout=30)
        finally:
            try:
                shutil.copyfile(os.path.join(self.dir, "maillog"), self.saved_log)
            except OSError:
                pass
            shutil.rmtree(self.base, ignore_errors=True)
            self.base = None
        return False

    def log(self):
        with open(os.path.join(self.dir, "maillog"), "rb") as f:
            return f.read().decode("latin-1")

    def deliveries(self):
        """deliveries - (smtp pid, postfix queue id, rcpt, relay, status, reply) per log line"""
        return [m.groups() for m in map(DELIVERY_RE.search, self.log().splitlines()) if m]

    def queued(self):
        r = run([POSTFIX_SH, "queue", self.dir], timeout=10)
        return int(r.stdout.strip() or "-1")

    def flush(self):
        run([POSTFIX_SH, "flush", self.dir], timeout=10)


def rcpts():
    return ["r%03d@example.com" % i for i in range(N_RCPTS)]


def big_msg(tag):
    return make_msg(subject="postfix %s" % tag, msgid="<%s@app.example.org>" % tag,
                    to="undisclosed-recipients:;",
                    body="One message, %d recipients, submitted twice.\r\n" % N_RCPTS)


def submit_to_postfix(pf, msg, what):
    r = submit(pf.port, rcpts(), msg, timeout=30)
    eq([c for c, _ in r.rcpts], [250] * N_RCPTS, "%s: Postfix's RCPT replies" % what)
    expect_reply(r.data, 250, "2.0.0", "%s: Postfix's reply to the final dot" % what)


def sink_rcpts(sink):
    """sink_rcpts - recipient -> number of times the sink accepted it"""
    out = {}
    for r in sink.accepted():
        for a in r["to"]:
            out[a] = out.get(a, 0) + 1
    return out


def sent_to_idemrelay(pf, proxy):
    return [x for x in pf.deliveries() if x[4] == "sent" and x[3].endswith(":%d" % proxy.port)]


def wait_postfix_done(pf, proxy, n_sent, timeout=30):
    """wait_postfix_done - Postfix reported n_sent deliveries to idemrelay and its queue is empty"""
    def done():
        if len(sent_to_idemrelay(pf, proxy)) >= n_sent and pf.queued() == 0:
            return True
        return False
    try:
        wait_until(done, timeout, "Postfix to relay %d recipient deliveries to idemrelay" % n_sent,
                   interval=0.2)
    except AssertionError:
        other = [x for x in pf.deliveries() if x[4] != "sent"][-5:]
        raise AssertionError("Postfix sent %d of %d recipient deliveries to idemrelay, %d message(s)"
                             " still queued; last non-sent: %r"
                             % (len(sent_to_idemrelay(pf, proxy)), n_sent, pf.queued(), other))


def check_exactly_once(sink, msgid):
    time.sleep(1.5)    # idemrelay's retry.first is 1s: a stray copy shows up by then
    got = sink_rcpts(sink)
    missing = [a for a in rcpts() if a not in got]
    twice = {a: n for a, n in got.items() if n != 1}
    extra = [a for a in got if a not in set(rcpts())]
    check(not missing and not twice and not extra,
          "the sink must get each of the %d recipients exactly once: missing %s, more than once %s,"
          " unexpected %s" % (N_RCPTS, missing[:10], twice, extra[:10]))
    for r in sink.accepted():
        check(("Message-ID: %s" % msgid).encode() in r["data"],
              "a relayed message lost its Message-ID: %r" % r["data"][:400])
        check(received_qids(r["data"]), "a relayed message has no idemrelay Received header")
        check(len(r["to"]) <= RCPT_LIMIT, "a transaction carried %d recipients (limit %d)"
              % (len(r["to"]), RCPT_LIMIT))


def check_split(pf, proxy, what):
    """check_split - Postfix did split the message, over parallel sessions"""
    sent = sent_to_idemrelay(pf, proxy)
    pids = {x[0] for x in sent}
    replies = {x[5] for x in sent}
    check(len(replies) >= 3, "%s: want at least 3 transactions (120 recipients, at most %d each),"
          " got replies %r" % (what, RCPT_LIMIT, sorted(replies)))
    check(len(pids) >= 2 and proxy.max_active >= 2,
          "%s: want parallel transactions; Postfix used %d smtp process(es) and had at most %d"
          " session(s) open at once" % (what, len(pids), proxy.max_active))


POSTFIX_SETTINGS = [
    "smtp_destination_recipient_limit=%d" % RCPT_LIMIT,
    "default_destination_recipient_limit=%d" % RCPT_LIMIT,
    "initial_destination_concurrency=5",
    "smtp_destination_concurrency_limit=10",
    # one transaction per session, so sessions open at once = parallel transactions
    "smtp_connection_cache_on_demand=no",
]


@case(timeout=60)
def test_postfix_relayhost_resubmit(t):
    """Postfix (relayhost = idemrelay) gets one message with 120 recipients,
    relays it in parallel transactions; the application submits it again
    with the same Message-ID; the sink gets every recipient once, and
    Postfix is told the original QID for each recipient both times."""
    sink = t.sink()
    d = t.daemon(sink, {"upstream": {"connections": 4}})
    msgid = "<postfix-resubmit-1@app.example.org>"
    msg = big_msg("postfix-resubmit-1")
    proxy = SlowGreetingProxy(d.port)
    with Postfix(t, proxy.port, POSTFIX_SETTINGS) as pf:
        submit_to_postfix(pf, msg, "first submission")
        wait_postfix_done(pf, proxy, N_RCPTS)
        wait_until(lambda: len(sink_rcpts(sink)) >= N_RCPTS, 15,
                   "the sink to hold all %d recipients" % N_RCPTS)
        check_split(pf, proxy, "first submission")
        print("first submission: %d sessions, at most %d at once" % (proxy.sessions, proxy.max_active))
        first = {x[2]: qid_of(x[5], "idemrelay's reply to Postfix for %s" % x[2])
                 for x in sent_to_idemrelay(pf, proxy)}

        submit_to_postfix(pf, msg, "second submission")
        wait_postfix_done(pf, proxy, 2 * N_RCPTS)
        sent = sent_to_idemrelay(pf, proxy)
        second = {}
        for x in sent[N_RCPTS:]:
            second.setdefault(x[2], []).append(qid_of(x[5], "idemrelay's reply for %s" % x[2]))
        changed = {a: (first.get(a), q) for a, q in second.items() if q != [first.get(a)]}
        check(not changed, "the resubmission must be answered with the original QID per"
              " recipient: recipient -> (first, second) %r" % dict(list(changed.items())[:5]))
        check_exactly_once(sink, msgid)
        eq(pf.queued(), 0, "messages left in Postfix's queue")


@case(timeout=90)
def test_postfix_relayhost_racing_copies(t):
    """Both copies wait in Postfix's queue while idemrelay is down; once it is
    up, Postfix flushes them together: six transactions of one Message-ID,
    several at a time, race in idemrelay, and the sink still gets every
    recipient once."""
    sink = t.sink()
    d = t.daemon(sink, {"upstream": {"connections": 4}}, start=False)
    msgid = "<postfix-race-1@app.example.org>"
    msg = big_msg("postfix-race-1")
    proxy = SlowGreetingProxy(d.port)
    with Postfix(t, proxy.port, POSTFIX_SETTINGS) as pf:
        submit_to_postfix(pf, msg, "first copy")
        submit_to_postfix(pf, msg, "second copy")
        wait_until(lambda: any(x[4] == "deferred" for x in pf.deliveries()), 15,
                   "Postfix to defer the copies (idemrelay not yet listening)", interval=0.2)
        d.start()
        # Postfix schedules the deferred copies by its own backoff; on a slow
        # (sanitizer) build one copy can miss the first flush: flush again
        for attempt in range(3):
            pf.flush()
            try:
                wait_postfix_done(pf, proxy, 2 * N_RCPTS, timeout=15)
                break
            except AssertionError:
                if attempt == 2:
                    raise
        check_split(pf, proxy, "racing copies")
        print("racing copies: %d sessions, at most %d at once" % (proxy.sessions, proxy.max_active))
        check_exactly_once(sink, msgid)
