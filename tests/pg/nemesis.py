#!/usr/bin/env python3
"""
NAME
    nemesis.py - a randomized fault schedule against three idemrelay nodes,
    and a check of what the clients were told against what was delivered

SYNOPSIS
    python3 tests/pg/nemesis.py [--seconds S] [--seed N] [--keep]
    make nemesis NEMESIS_S=600 NEMESIS_SEED=7
    E2E_STORE=postgresql python3 tests/e2e/run.py test_nemesis_short

DESCRIPTION
    Three nodes (bin/idemrelay, store.backend = "postgresql", store.lease
    4 s, libpq's connect_timeout 2, 5 and 30 s) on a private PostgreSQL primary with a synchronous standby
    (tests/pg/cluster.py). Each node reaches the database through two TCP
    proxies of its own, one per server (its store.url names both, with
    target_session_attrs=read-write), and the upstream sink
    (tests/e2e/sink.py) through a third: harness.Proxy, which the
    schedule cuts.

    Clients (three threads) submit new keys (X-Idempotency-Key) with 1-3
    recipients, each to a node drawn at random, and send the same bytes
    again, to another random node, until one answers 250; a quarter of the
    keys give up after their first try, as an application that drops a
    message may (a 4xx must then mean that it was not taken).
    Every reply is recorded: 250 and its QID, 4xx, 5xx, and connection
    errors, told apart by whether the content had been sent (an outcome
    unknown) or not (refused).

    The nemesis draws its whole schedule from the seed before anything
    starts (so a seed replays the same schedule, whatever the timing):
    episodes at random times, each on a resource no other episode holds
    meanwhile:
        kill9 NODE              kill -9, restarted after a while
        db NODE MODE            the node cut off from the database, shorter
                                or longer than store.lease; MODE freeze (the
                                connections stay open and nothing moves; new
                                ones wait), hold (dropped, new ones wait, and
                                go through when it heals), reset (dropped,
                                new ones black-holed, reset when it heals) or
                                refuse (dropped, new ones reset)
        mark NODE MODE          the node's next inflight mark reaches the
                                database, its reply does not, and the node
                                is cut off (shorter or longer than the lease;
                                reset or hold, as above)
        upstream NODE MODE      the node's link to the upstream: freeze,
                                reset (replies stop, then reset), or
                                pipeline-N: at the node's next RCPT, N more
                                reply lines pass, then a reset
        sink SPEC               the upstream answers 451 (tempfail at RCPT,
                                data-tempfail at the dot) for a while
        standby                 the synchronous standby stopped, then started
        failover                the primary killed with -9 and the standby
                                promoted (once, halfway)
    Then everything is healed and the queues drain, and the history is
    checked:
      - every recipient of every key answered 250 is delivered exactly once;
      - every 250 of a key names one QID, and every delivered copy names it
        (its Received: header);
      - a key that was only ever refused (every try answered 4xx/5xx, or
        lost before its content was sent) is never delivered, and no key is
        delivered twice to a recipient;
      - no node died other than by the schedule's kill -9.
    Two losses are SPEC 5's (upstream.ambiguous = "assume-delivered":
    no duplicate, at the risk of a loss), counted apart, not as lost: a
    recipient of a message finished unconfirmed because the node holding
    its inflight mark was killed (its final dot may have gone out; or its
    mark's reply was lost, it was cut off past its lease, and it was killed
    before it was back to undo the verdict: all it knew died with it):
    its row says so, the recipient unconfirmed by another lease's verdict
    on the mark of a lease the node held when it was killed (read then,
    since a mark whose commit waits for the stopped standby is not visible
    yet, and is finished by another node before the killed one restarts),
    or when it was cut off from the database, if it was killed during the
    cut or just after; and
    one whose final dot the upstream received and refused (4xx, its
    record says) while the node, which never got that reply (a reset, or
    a frozen link), finished it unconfirmed. A node that says "no reply
    after the final dot" when the upstream never read that dot is a loss:
    the proxies never acknowledge what they do not pass on.
    A key only ever refused and yet delivered (once) is counted apart too
    when it is one of the two cases idemrelay(8) leaves open beside SPEC 4:
    its 451 came from a batch whose commit's outcome the node could neither
    read nor void (it keeps the QIDs to settle them, and logs the batch
    under its first QID, this one), and the node then either left it to be
    delivered (another node took it past store.lease from its acceptance,
    the node cut off meanwhile) or was killed before settling anything.

    The seed is printed first. A failure prints, per failing QID, the
    merged timeline of the nodes' log lines naming it (stamped when the
    test read them) and the schedule's events, and the run's directory
    is kept.

EXIT STATUS
    0 when every check held, 1 otherwise.
"""

import argparse
import datetime
import os
import random
import re
import signal
import smtplib
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "e2e"))

import harness  # noqa: E402
from harness import check, make_msg, received_qids, wait_until  # noqa: E402

LEASE = 4                       # store.lease, seconds
RCPT_UNCONFIRMED = 3            # rcpts.state: store.h's STORE_RCPT_UNCONFIRMED
NODES = ("n1", "n2", "n3")
CLIENTS = 3
# libpq's connect_timeout per node: a connection opened during a partition (held,
# and let through when it heals) gives up, or reaches the database late
CONNECT_TIMEOUTS = (2, 5, 30)
SUBJECT_RE = re.compile(rb"^Subject: nemesis (\S+)\r?$", re.M)
QID_RE = re.compile(r"queued as ([0-9A-Z]{12,20})\b")
UNCONFIRMED_RE = re.compile(r"\b([0-9A-Z]{12,20}): to=<[^>]*>, relay=(?!none)\S+ .*"
                            r"status=unconfirmed \(delivered-unconfirmed: no reply .* after the final dot")
# a batch answered 451 whose commit's outcome the node could not read or void (it keeps
# its QIDs to settle them), the first of them; a QID refused so; one it later left to
# be delivered; a settle that voided a kept batch (idemrelay(8), store/pg/store_pg_pend.c)
KEPT_RE = re.compile(r"\(PostgreSQL unreachable\): its \d+ messages? answered 451 \(([0-9A-Z]{12,20})")
IN_DOUBT = " status=refused store: store unreachable, or a commit's outcome unknown"
KEPT_DELIVERED = ": answered 451 while PostgreSQL was unreachable, but another node took it"
KEPT_VOIDED = "store: a commit answered 451 while PostgreSQL was unreachable: its "

# what the nodes logged, counted in the summary: (what it is, the words of its line
# and of no other). An outage is the line a node logs once when it finds PostgreSQL
# unreachable (harness.PG_OUTAGE): one a cut of its database link (faults' db and
# mark) if it tries the database meanwhile, again if it restarts during the cut, and
# one a node at the failover. A commit answered 451 because its outcome could not be
# read (settled later) says "(PostgreSQL unreachable)" too, but is another event.
LOGGED = (("status=unconfirmed", "status=unconfirmed"),
          ("revived", ": revived: "),
          ("cannot set the inflight mark", ": cannot set the inflight mark: "),
          ("PostgreSQL outages", harness.PG_OUTAGE),
          ("commits answered 451 to settle later", " (PostgreSQL unreachable): its "),
          ("commits of unknown outcome read back",
           "a commit's outcome was unknown (connection lost): read back: "))

# kind -> weight in the draw
KINDS = (("kill9", 2), ("db", 4), ("mark", 2), ("upstream", 3), ("sink", 1.5),
         ("standby", 1))


# ---------------------------------------------------------------- the schedule

class Episode:
    """One fault: starts at `at` seconds, ends `dur` seconds later, on `res`."""

    def __init__(self, at, kind, node=None, mode=None, dur=0.0, res=None):
        self.at, self.kind, self.node, self.mode, self.dur = at, kind, node, mode, dur
        self.res = res
        self.fired = None               # a mark: when its trigger went off; a kill9: when
        self.qids = set()               # ... the QIDs its statement named
        self.leases = None              # a cut (db, mark): the node's leases then
        self.healed = None              # ... when it ended
        self.killed = False             # a kill9: it killed a running node

    def __str__(self):
        what = self.kind
        if self.node is not None:
            what += " " + NODES[self.node]
        if self.mode:
            what += " " + self.mode
        return "%6.1fs %-26s for %.1fs" % (self.at, what, self.dur)


def draw(seed, seconds):
    """draw - the whole schedule, from the seed alone: episodes that never hold a
    resource (a node's process, database link or upstream link, the sink, the
    standby) at the same time as another"""
    rng = random.Random(seed)
    busy = {}
    eps = []

    def take(res, at, end):
        if any(a < end + 1 and at < b + 1 for a, b in busy.get(res, [])):
            return False
        busy.setdefault(res, []).append((at, end))
        return True

    if seconds >= 40:
        at = rng.uniform(0.4, 0.6) * seconds
        take("standby", at - 3, float("inf"))
        eps.append(Episode(at, "failover", dur=0, res="standby"))
    at = rng.uniform(2, 4)
    while at < seconds - 2:
        kind = rng.choices([k for k, _ in KINDS], [w for _, w in KINDS])[0]
        node = rng.randrange(len(NODES))
        long_ = rng.random() < 0.5
        mode = None
        if kind == "kill9":
            res, dur = "proc%d" % node, rng.uniform(0.5, 2.5 * LEASE)
        elif kind == "db":
            mode = rng.choice(("freeze", "hold", "reset", "refuse"))
            dur = rng.uniform(1.5 * LEASE, 3.5 * LEASE) if long_ else rng.uniform(0.5, 0.7 * LEASE)
            res = "db%d" % node
        elif kind == "mark":
            # dur: the cut after the trigger; the trigger waits up to 10 s
            mode = rng.choice(("reset", "hold"))
            dur = rng.uniform(1.5 * LEASE, 3 * LEASE) if long_ else rng.uniform(0.5, 0.7 * LEASE)
            res = "db%d" % node
        elif kind == "upstream":
            mode = rng.choice(("freeze", "reset", "pipeline-%d" % rng.randint(0, 6)))
            res, dur = "up%d" % node, rng.uniform(1, 8)
        elif kind == "sink":
            node, mode = None, rng.choice(("tempfail", "data-tempfail"))
            res, dur = "sink", rng.uniform(1, 8)
        else:
            node, res, dur = None, "standby", rng.uniform(2, 15)
        end = at + dur + (10 if kind == "mark" else 0)
        if take(res, at, end):
            eps.append(Episode(at, kind, node, mode, dur, res))
        at += rng.expovariate(1 / 3.5)
    eps.sort(key=lambda e: e.at)
    return eps


# ---------------------------------------------------------------- history

class Key:
    """One key of the clients': its recipients, bytes and every try's outcome."""

    def __init__(self, name, rcpts, patient):
        self.name, self.rcpts, self.patient = name, rcpts, patient
        self.msg = make_msg(key=name, subject="nemesis " + name, to=rcpts[0],
                            body="key %s to %s\r\n" % (name, " ".join(rcpts)))
        self.tries = []                 # (t, node, code or None, text, content_sent)
        self.qids = set()               # QIDs of its 250s

    @property
    def ok(self):
        return bool(self.qids)

    def only_refused(self):
        return not self.qids and all(c is not None or not sent for _, _, c, _, sent in self.tries)


def try_once(port, key, timeout=40):
    """try_once - one submission: (code or None, text, content sent)"""
    sent = False
    s = None
    try:
        s = smtplib.SMTP("127.0.0.1", port, timeout=timeout)
        s.ehlo("client.test")
        code, text = s.mail("app@example.org")
        if code != 250:
            return code, text.decode("latin-1"), False
        for r in key.rcpts:
            code, text = s.rcpt(r)
            if code != 250:
                s.rset()
                return code, text.decode("latin-1"), False
        try:
            sent = True
            code, text = s.data(key.msg)
        except smtplib.SMTPDataError as e:       # DATA itself refused: nothing sent
            return e.smtp_code, e.smtp_error.decode("latin-1"), False
        return code, text.decode("latin-1"), sent
    except smtplib.SMTPResponseException as e:
        return e.smtp_code, e.smtp_error.decode("latin-1", "replace"), False
    except (OSError, smtplib.SMTPException, EOFError) as e:
        return None, repr(e), sent
    finally:
        if s is not None:
            try:
                s.quit()
            except Exception:
                s.close()


# ---------------------------------------------------------------- the run

class Run:
    """The cluster, nodes, proxies, clients and nemesis of one run."""

    def __init__(self, t, seed, seconds):
        self.t, self.seed, self.seconds = t, seed, seconds
        self.t0 = None
        self.lock = threading.Lock()
        self.events = []                # (t, text): the schedule's, as carried out
        self.timeline = []              # (t, node, log line)
        self.crashes = []
        self.notes = []
        self.dead_leases = {}           # lease token of a killed node's marks -> how (leases_of, orphans)
        self.keys = []
        self.stopping = threading.Event()
        self.quiesce = threading.Event()
        self.done = threading.Event()
        self.faults = {}

    def now(self):
        return time.monotonic() - self.t0

    def event(self, text):
        with self.lock:
            self.events.append((self.now(), text))
        print("[%7.1f] %s" % (self.now(), text), flush=True)

    # ------------------------------------------------------------ setup

    def setup(self):
        t = self.t
        self.pg = t.pg_cluster(standby=True)
        self.sb = self.pg.standbys[0]
        self.primary = self.pg
        self.db = t.pg_database(self.pg).rsplit("/", 1)[1]
        self.sink = t.sink()
        self.nodes, self.dbp, self.upp = [], [], []
        for name, timeout in zip(NODES, CONNECT_TIMEOUTS):
            dbp = [t.pg_proxy(self.pg), t.pg_proxy(self.sb)]
            upp = t.proxy(self.sink.port)
            url = ("postgresql://idemrelay@127.0.0.1:%d,127.0.0.1:%d/%s?connect_timeout=%d"
                   "&target_session_attrs=read-write"
                   % (dbp[0].port, dbp[1].port, self.db, timeout))
            conf = {"store": {"url": url, "lease": "%ds" % LEASE},
                    "upstream": {"port": upp.port},
                    "control": os.path.join(t.tmp, "ctl-%s.sock" % name)}
            d = t.daemon(self.sink, conf, node=name)
            d.down = False
            d.guard = threading.Lock()
            d.restarting = None
            self.nodes.append(d)
            self.dbp.append(dbp)
            self.upp.append(upp)

    # ------------------------------------------------------------ watching

    def tail_logs(self):
        """tail_logs - the nodes' new log lines, stamped when read, into the timeline"""
        offsets = [0] * len(self.nodes)
        while True:
            last = self.done.is_set()
            for i, d in enumerate(self.nodes):
                try:
                    with open(d.log_path, "rb") as f:
                        f.seek(offsets[i])
                        data = f.read()
                except OSError:
                    continue
                cut = data.rfind(b"\n") + 1
                offsets[i] += cut
                now = self.now()
                with self.lock:
                    for line in data[:cut].decode("latin-1").splitlines():
                        self.timeline.append((now, NODES[i], line))
            if last:
                return
            time.sleep(0.25)

    def watch_nodes(self):
        """watch_nodes - a node that exits without the schedule's kill is a crash:
        recorded, then restarted so that the run goes on"""
        while not self.done.is_set():
            for i, d in enumerate(self.nodes):
                with d.guard:
                    if d.down or d.proc is None or d.proc.poll() is None:
                        continue
                    rc = d.proc.returncode
                    d.down = True
                self.crashes.append((self.now(), NODES[i], rc))
                self.event("CRASH: %s exited with %s%s" % (
                    NODES[i], rc, " (signal %s)" % signal.Signals(-rc).name if rc < 0 else ""))
                self.restart(i)
            time.sleep(0.2)

    def restart(self, i):
        """restart - start node i again, in the background, until it has started;
        the thread (one per node at a time)"""
        d = self.nodes[i]
        with d.guard:
            if d.restarting is not None and d.restarting.is_alive():
                return d.restarting

        def go():
            d = self.nodes[i]
            while not self.done.is_set():
                try:
                    d.start(timeout=60)
                    with d.guard:
                        d.down = False
                    self.event("%s restarted" % NODES[i])
                    return
                except AssertionError as e:
                    self.event("%s did not start: %s" % (NODES[i], e))
                    if d.proc is not None and d.proc.poll() is None:
                        d.proc.kill()
                        d.proc.wait()
                    time.sleep(1)
        th = threading.Thread(target=go, daemon=True)
        with d.guard:
            d.restarting = th
        th.start()
        return th

    def orphans(self, i):
        """orphans - the tokens of the leases node i held when it was cut off from
        the database (a db or mark episode), cut off still or just back: a mark
        whose commit's outcome it never heard of (the mark episode's, or one a cut
        met), finished unconfirmed by the node that took the message past the
        lease, is one it had no time to revive yet; killed now, it cannot know it
        sent no final dot, so the mark is a dead node's (SPEC 7)"""
        out = {}
        for ep in self.schedule:
            if ep.kind in ("db", "mark") and ep.node == i and ep.leases is not None and (
                    ep.healed is None or self.now() < ep.healed + 2 * LEASE):
                out.update((tok, "cut off by %s" % " ".join(str(ep).split())) for tok in ep.leases)
        return out

    def dead(self, i, leases, when):
        """dead - leases (token -> how node i had it) are those of node i, killed
        at `when`"""
        for tok, how in leases.items():
            self.dead_leases.setdefault(tok, "lease %s of %s (%s), killed at %.1fs"
                                        % (tok, NODES[i], how, when))

    def leases_of(self, i):
        """leases_of - the tokens of the leases node i holds on queued messages, on
        the primary: read once it is dead, they are every lease it can have made an
        inflight mark under, its last one's commit still waiting for the synchronous
        standby included (not visible yet, and then finished by another node before
        the node's restart): the node's lease was visible when its mark was sent"""
        try:
            out = self.primary.sql("SELECT lease_token FROM messages WHERE queued "
                                   "AND lease_owner = '%s'" % NODES[i], self.db, timeout=10)
        except Exception as e:
            self.event("cannot read %s's leases: %s" % (NODES[i], e))
            return set()
        return set(out.split())

    # ------------------------------------------------------------ the nemesis

    def begin(self, ep):
        """begin - an episode's fault"""
        i = ep.node
        if ep.kind == "kill9":
            d = self.nodes[i]
            with d.guard:
                if d.down or not d.running():
                    self.event("kill9 %s: not running" % NODES[i])
                    return
                d.down = True
                d.kill9()
                ep.killed = True
            ep.fired, ep.fired_wall = self.now(), time.time() - self.wall0
            leases = self.orphans(i)
            leases.update(dict.fromkeys(self.leases_of(i), "held"))
            self.dead(i, leases, ep.fired)
        elif ep.kind == "db":
            for p in self.dbp[i]:
                p.cut(refuse=ep.mode == "refuse", hold=ep.mode == "hold",
                      freeze=ep.mode == "freeze")
            ep.leases = self.leases_of(i)
        elif ep.kind == "mark":
            self.mark(ep)
        elif ep.kind == "upstream" and ep.mode.startswith("pipeline"):
            self.pipeline(ep)
        elif ep.kind == "upstream":
            self.upp[i].cut(freeze=ep.mode == "freeze", drain=0 if ep.mode == "freeze" else 0.5)
        elif ep.kind == "sink":
            self.sink.control(default=ep.mode)
        elif ep.kind == "standby":
            self.sb.stop()
        elif ep.kind == "failover":
            self.pg.kill9()
            # a dead host refuses connections (libpq then tries the next one):
            # so do the proxies in front of it, not accept and reset
            for ps in self.dbp:
                ps[0].close()
            self.event("primary killed; promoting the standby")
            self.sb.promote()
            self.primary = self.sb

    def end(self, ep):
        """end - the episode's fault undone"""
        i = ep.node
        if ep.kind == "kill9":
            # one that found the node down (another kill's restart still under
            # way) starts nothing: a second start beside the restarted node
            # failed on its control socket, and was taken for a crash
            if not ep.killed:
                return
            self.dead(i, dict.fromkeys(self.leases_of(i), "held while down"), ep.fired)
            self.restart(i).join(120)
        elif ep.kind == "db":
            for p in self.dbp[i]:
                p.heal()
            ep.healed = self.now()
        elif ep.kind == "upstream":
            self.upp[i].heal()
        elif ep.kind == "sink":
            self.sink.control()
        elif ep.kind == "standby":
            self.sb.start()

    def pipeline(self, ep):
        """pipeline - the node's next RCPT upstream: so many more reply lines reach
        it, then none, and the connection is reset (its RCPTs' replies pending);
        with no RCPT within the episode, a reset at its end"""
        p = self.upp[ep.node]
        before = p.triggered
        p.cut_after(b"RCPT TO:", delay=0.3, lines=int(ep.mode.split("-")[1]))
        end = self.t0 + ep.at + ep.dur
        while time.monotonic() < end and p.triggered == before and not self.quiesce.is_set():
            time.sleep(0.05)
        p.trigger = None
        if p.triggered == before:
            p.cut(drain=0.5)
        else:
            self.event("%s %s: reset after the RCPT" % (ep.mode, NODES[ep.node]))

    def mark(self, ep):
        """mark - arm the node's database proxies: its next inflight mark passes,
        its reply does not, and the node is cut off for ep.dur"""
        ps = self.dbp[ep.node]
        before = [p.triggered for p in ps]
        for p in ps:
            p.cut_after(b"SET inflight = v.flag", delay=0.5, hold=ep.mode == "hold")
        end = time.monotonic() + 10
        while time.monotonic() < end and not self.quiesce.is_set():
            if any(p.triggered != b for p, b in zip(ps, before)):
                break
            time.sleep(0.05)
        for p in ps:
            p.trigger = None
        if all(p.triggered == b for p, b in zip(ps, before)):
            self.event("mark %s: no mark in 10 s" % NODES[ep.node])
            return
        ep.fired = self.now()
        # the mark's parameters name its message
        ep.qids = {q.decode() for p, b in zip(ps, before) if p.triggered != b
                   for q in re.findall(rb"\b[0-9A-Z]{12,20}\b", p.fired_with or b"")}
        time.sleep(0.5)
        for p in ps:
            p.cut(hold=ep.mode == "hold")
        until = time.monotonic() + ep.dur
        ep.leases = self.leases_of(ep.node)
        self.event("mark %s: the reply dropped, cut off for %.1fs" % (NODES[ep.node], ep.dur))
        self.quiesce.wait(max(0, until - time.monotonic()))
        for p in ps:
            p.heal()
        ep.healed = self.now()
        self.event("mark %s %s: healed" % (NODES[ep.node], " ".join(sorted(ep.qids))))

    def episode(self, ep):
        """episode - one episode's thread: begin at its time, end after its duration"""
        try:
            self.event("begin " + str(ep).strip())
            self.begin(ep)
            # a kill that found the node down, a mark that never fired: no fault
            if (ep.kind != "kill9" or ep.killed) and (ep.kind != "mark" or ep.fired is not None):
                self.faults[ep.kind] = self.faults.get(ep.kind, 0) + 1
            if ep.kind not in ("mark", "failover"):
                self.quiesce.wait(max(0, self.t0 + ep.at + ep.dur - time.monotonic()))
                self.end(ep)
                self.event("end   %s %s" % (ep.kind, NODES[ep.node] if ep.node is not None else ""))
        except Exception as e:
            self.notes.append("episode %s: %r" % (ep, e))
            self.event("episode %s failed: %r" % (str(ep).strip(), e))

    def nemesis(self, schedule):
        ths = []
        for ep in schedule:
            if self.quiesce.wait(max(0, self.t0 + ep.at - time.monotonic())):
                break
            th = threading.Thread(target=self.episode, args=(ep,), daemon=True)
            th.start()
            ths.append(th)
        return ths

    # ------------------------------------------------------------ clients

    def client(self, c):
        rng = random.Random(self.seed * 1000 + c)
        n = 0
        while not self.stopping.is_set():
            name = "s%d-c%d-%d" % (self.seed, c, n)
            n += 1
            k = Key(name, ["%s-r%d@example.com" % (name, j) for j in range(rng.randint(1, 3))],
                    rng.random() >= 0.25)
            with self.lock:
                self.keys.append(k)
            deadline = None
            while True:
                i = rng.randrange(len(self.nodes))
                t0 = self.now()
                code, text, sent = try_once(self.nodes[i].port, k)
                k.tries.append((t0, NODES[i], code, text, sent))
                if code == 250:
                    m = QID_RE.search(text)
                    k.qids.add(m.group(1) if m else "?" + text)
                    break
                if not k.patient:
                    break
                if self.stopping.is_set():
                    deadline = deadline or time.monotonic() + 150
                    if time.monotonic() > deadline:
                        break
                time.sleep(rng.uniform(0.3, 1.0))
            time.sleep(rng.uniform(0.2, 1.0))

    # ------------------------------------------------------------ quiesce

    def heal_all(self):
        for ps in self.dbp:
            for p in ps:
                p.trigger = None
                p.heal()
        for p in self.upp:
            p.heal()
        self.sink.control()
        if self.primary is self.pg and not self.sb.running():
            self.sb.start()
        for i, d in enumerate(self.nodes):
            if not d.running():
                with d.guard:
                    d.down = True
                self.restart(i).join(120)

    def queued(self):
        try:
            return int(self.primary.sql("SELECT count(*) FROM messages WHERE queued",
                                        self.db, timeout=10))
        except Exception:
            return -1

    def go(self):
        self.schedule = schedule = draw(self.seed, self.seconds)
        print("nemesis: seed %d, %d s, %d episodes (replay: make nemesis NEMESIS_SEED=%d "
              "NEMESIS_S=%d)" % (self.seed, self.seconds, len(schedule), self.seed, self.seconds),
              flush=True)
        for ep in schedule:
            print("  " + str(ep))
        self.setup()
        self.t0, self.wall0 = time.monotonic(), time.time()
        watchers = [threading.Thread(target=f, daemon=True)
                    for f in (self.tail_logs, self.watch_nodes)]
        for th in watchers:
            th.start()
        clients = [threading.Thread(target=self.client, args=(c,), daemon=True)
                   for c in range(CLIENTS)]
        for th in clients:
            th.start()
        ths = self.nemesis(schedule)
        rest = self.t0 + self.seconds - time.monotonic()
        if rest > 0:
            time.sleep(rest)
        self.event("quiesce: healing everything")
        self.quiesce.set()
        for th in ths:
            th.join(180)
        self.heal_all()
        self.stopping.set()
        for th in clients:
            th.join(200)
        check(not any(th.is_alive() for th in clients), "a client did not finish")
        self.event("clients done: %d keys" % len(self.keys))
        try:
            wait_until(lambda: self.queued() == 0, 240, "the queues to drain", interval=1)
        except AssertionError as e:
            self.notes.append(str(e))
        time.sleep(3)                   # a second copy would come now
        self.event("drained (%d queued)" % self.queued())
        self.done.set()
        for th in watchers:
            th.join(10)
        return self.verify()

    # ------------------------------------------------------------ the check

    def verify(self):
        """verify - the history against the sink's records; a list of failures"""
        bad = []
        by_name = {k.name: k for k in self.keys}
        got = {}                        # key -> rcpt -> [qid of each copy]
        refused = set()                 # (qid, rcpt) whose dot the sink answered 4xx/5xx
        strays = []
        for r in self.sink.records():
            m = SUBJECT_RE.search(r["data"])
            q = received_qids(r["data"])
            if not r["accepted"]:
                refused.update((x, a) for x in q for a in r["to"])
                continue
            if not m or m.group(1).decode() not in by_name:
                strays.append((r.get("conn"), r["to"], q))
                continue
            for a in r["to"]:
                got.setdefault(m.group(1).decode(), {}).setdefault(a, []).append(
                    q[0] if len(q) == 1 else repr(q))
        # QIDs a node finished unconfirmed after its final dot (an upstream's reply lost)
        upstream_unconfirmed = {m.group(1) for m in (
            UNCONFIRMED_RE.search(l) for _, _, l in self.timeline) if m}
        lost, dup, allowed, replylost, missing, kept = [], [], [], [], [], []
        for k in self.keys:
            copies = got.get(k.name, {})
            qids = {q for cs in copies.values() for q in cs}
            if len(k.qids) > 1:
                bad.append("key %s: 250s with different QIDs %s" % (k.name, sorted(k.qids)))
            for a in copies:
                if a not in k.rcpts:
                    bad.append("key %s: delivered to %s, not a recipient" % (k.name, a))
            if k.ok:
                q = next(iter(k.qids))
                if qids - k.qids:
                    bad.append("key %s: copies name %s, its 250 %s" % (k.name, sorted(qids - k.qids), q))
                for a in k.rcpts:
                    n = copies.get(a, []).count(q)
                    if n > 1:
                        dup.append((k, a, q, n))
                    elif n == 0 and (q, a) in refused and q in upstream_unconfirmed:
                        replylost.append((k, a, q))
                    elif n == 0:
                        missing.append((k, a, q))
            else:
                why = k.only_refused() and copies and self.kept_451(k, qids)
                if why:
                    kept.append((k, ", ".join(sorted(copies)), next(iter(qids)), why))
                elif k.only_refused() and copies:
                    bad.append("key %s: only ever refused (%s), delivered as %s" % (
                        k.name, ", ".join("%s %s" % (x[2], x[1]) for x in k.tries), sorted(qids)))
                for a, cs in copies.items():
                    if len(cs) > 1:
                        dup.append((k, a, "/".join(cs), len(cs)))
                if len(qids) > 1:
                    bad.append("key %s (no 250): copies name %s" % (k.name, sorted(qids)))
        rows = self.verdicts({q for _, _, q in missing})
        for k, a, q in missing:
            state, on = rows.get((q, a), (None, None))
            # finished unconfirmed by another lease's verdict on the inflight mark
            # of a lease its node held when killed, or when cut off just before
            if state == RCPT_UNCONFIRMED and on in self.dead_leases:
                allowed.append((k, a, q, "on the mark of " + self.dead_leases[on]))
            else:
                lost.append((k, a, q))
        for k, a, q in lost:
            bad.append("LOST: key %s, QID %s, recipient %s (answered 250: %s)" % (
                k.name, q, a, "; ".join("%.1f %s %s" % (x[0], x[1], x[2]) for x in k.tries)))
        for k, a, q, n in dup:
            bad.append("DUPLICATED: key %s, QID %s, recipient %s: %d copies" % (k.name, q, a, n))
        if strays:
            bad.append("copies of no key of ours: %r" % strays[:5])
        for when, node, rc in self.crashes:
            bad.append("CRASH: %s exited with %s at %.1fs" % (node, rc, when))
        for path in [d.log_path for d in self.nodes]:
            text = harness.read_text(path)
            for pat in harness.SANITIZER_REPORTS + ("SIGSEGV", "Segmentation fault"):
                if pat in text:
                    bad.append("%r in %s" % (pat, path))
        bad.extend(self.notes)
        ok250 = sum(1 for k in self.keys if k.ok)
        refused = sum(1 for k in self.keys if k.only_refused())
        tries = sum(len(k.tries) for k in self.keys)
        codes = {}
        for k in self.keys:
            for x in k.tries:
                c = x[2] if x[2] is not None else ("lost-after-content" if x[4] else "conn-error")
                codes[c] = codes.get(c, 0) + 1
        self.summary = ("nemesis: seed %d, %d s: %d keys (%d answered 250, %d only refused, "
                        "%d unknown), %d tries %s; faults %s; lost %d, duplicated %d, "
                        "unconfirmed after a kill %d, unconfirmed with the upstream's reply lost %d, "
                        "delivered though answered 451 (kept by its node) %d, crashes %d"
                        % (self.seed, self.seconds, len(self.keys), ok250, refused,
                           len(self.keys) - ok250 - refused, tries,
                           dict(sorted(codes.items(), key=str)),
                           dict(sorted(self.faults.items())), len(lost), len(dup), len(allowed),
                           len(replylost), len(kept), len(self.crashes)))
        seen = {}
        for _, node, line in self.timeline:
            for what, words in LOGGED:
                if words in line:
                    seen[what] = seen.get(what, 0) + 1
        self.summary += "; logged %s" % ", ".join("%s %d" % (w, seen.get(w, 0)) for w, _ in LOGGED)
        print(self.summary, flush=True)
        for what, xs in (("unconfirmed after a kill", allowed),
                         ("unconfirmed, the upstream's reply lost", replylost),
                         ("delivered though answered 451", kept)):
            for k, a, q, *why in xs:
                print("  %s: %s (key %s) %s%s" % (what, q, k.name, a, "".join(": " + w for w in why)))
        if bad:
            self.explain(lost, dup)
        return bad

    def logged_at(self, line):
        """logged_at - a node's log line's own time, in the run's seconds"""
        try:
            wall = datetime.datetime.fromisoformat(line.split(" ", 1)[0].replace("Z", "+00:00"))
        except ValueError:
            return None
        return wall.timestamp() - self.wall0

    def kept_451(self, k, qids):
        """kept_451 - why key k, only ever refused, was delivered, if idemrelay(8)
        says it may be: its 451 came from a batch whose commit's outcome its node
        could not read nor void, so it kept the QIDs to settle them (the batch's
        log line names its first QID, which must be this one), and then either
        left it to be delivered (another node took it past store.lease from its
        acceptance, the node cut off meanwhile, or answered a retry 250) or was
        killed before it settled anything (the kept QIDs are in its memory only);
        else None (a failure)"""
        if len(qids) != 1:
            return None
        q = next(iter(qids))
        for t, node, code, _, _ in k.tries:
            if code is None or code // 100 != 4:
                continue
            lines = [(self.logged_at(l), l) for _, n, l in self.timeline if n == node]
            refused = [w for w, l in lines if l.find(q + ": ") >= 0 and IN_DOUBT in l]
            batch = [w for w, l in lines if (KEPT_RE.search(l) or [None, None])[1] == q]
            if not refused or not batch or None in batch:
                continue
            if any(q + KEPT_DELIVERED in l for _, l in lines):
                return "%s kept it and left it to be delivered (taken by another node)" % node
            settled = [w for w, l in lines if KEPT_VOIDED in l and w is not None and w > batch[0]]
            for ep in self.schedule:
                if (ep.kind == "kill9" and ep.killed and NODES[ep.node] == node
                        and ep.fired_wall > batch[0] and not any(w < ep.fired_wall for w in settled)):
                    return "%s killed at %.1fs while keeping it (answered 451 at %.1fs)" % (
                        node, ep.fired_wall, batch[0])
        return None

    def verdicts(self, qids):
        """verdicts - (qid, recipient) -> (its state, its message's verdict_on: the
        token of the lease whose inflight mark another lease's verdict cleared)"""
        out = {}
        qids = sorted(q for q in qids if re.fullmatch(r"[0-9A-Z]{12,20}", q))
        if not qids:
            return out
        try:
            text = self.primary.sql(
                "SELECT r.qid, r.addr, r.state, coalesce(m.verdict_on::text, '') FROM messages m "
                "JOIN rcpts r USING (qid) WHERE qid IN (%s)" % ", ".join("'%s'" % q for q in qids),
                self.db, timeout=30)
        except Exception as e:
            self.notes.append("cannot read the missing recipients' rows: %s" % e)
            return out
        for line in text.splitlines():
            q, a, state, on = line.split("|")
            out[(q, a)] = (int(state), on or None)
        return out

    def explain_crash(self, when, node):
        """explain_crash - the crashed node's last log lines and the events before"""
        print("--- %s died at %.1fs ---" % (node, when))
        merged = [(w, n, l) for w, n, l in self.timeline if n == node and when - 5 <= w <= when + 0.5]
        merged += [(w, "nemesis", e) for w, e in self.events if when - 10 <= w <= when + 0.5]
        for w, n, l in sorted(merged, key=lambda x: x[0])[-40:]:
            print("[%7.1f] %-7s %s" % (w, n, l))

    def explain(self, lost, dup):
        """explain - the timeline of each failing QID: its log lines and the events;
        the last moments of each node that died"""
        for when, node, _ in self.crashes[:3]:
            self.explain_crash(when, node)
        for k, a, q, *_ in (lost + dup)[:6]:
            print("--- %s (key %s, %s) ---" % (q, k.name, a))
            lines = [(w, n, l) for w, n, l in self.timeline if q in l]
            lo = (lines[0][0] if lines else 0) - 15
            hi = (lines[-1][0] if lines else 0) + 5
            merged = lines + [(w, "nemesis", e) for w, e in self.events if lo <= w <= hi]
            for w, n, l in sorted(merged, key=lambda x: x[0]):
                print("[%7.1f] %-7s %s" % (w, n, l))
            try:
                print("row: " + self.primary.sql(
                    "SELECT m.node, m.queued, m.inflight, m.lease_owner, m.mark_token, "
                    "m.verdict_on, string_agg(r.addr || '=' || r.state, ' ') FROM messages m "
                    "JOIN rcpts r USING (qid) WHERE qid = '%s' GROUP BY 1, 2, 3, 4, 5, 6" % q,
                    self.db))
            except Exception as e:
                print("row: %s" % e)


def run(t, seconds, seed):
    """run - one run on the harness's T; raises AssertionError naming every failure"""
    r = Run(t, seed, seconds)
    bad = r.go()
    if bad:
        raise AssertionError("nemesis seed %d: %d failure(s):\n  %s"
                             % (seed, len(bad), "\n  ".join(bad[:40])))
    return r


def main(argv):
    ap = argparse.ArgumentParser(description="idemrelay's randomized fault test")
    ap.add_argument("--seconds", type=int, default=int(os.environ.get("NEMESIS_S") or 120))
    ap.add_argument("--seed", type=int,
                    default=int(os.environ.get("NEMESIS_SEED") or random.SystemRandom().randrange(1, 10 ** 6)))
    ap.add_argument("--keep", action="store_true", help="keep the run's directory")
    args = ap.parse_args(argv)
    return harness.standalone("nemesis", "postgresql", args.seed, args.keep,
                              lambda t: run(t, args.seconds, args.seed))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
