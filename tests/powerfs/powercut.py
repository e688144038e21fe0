#!/usr/bin/env python3
"""
NAME
    powercut.py - randomized power cuts under load against one idemrelay on
    LMDB, and a check of what the clients were told against what was delivered

SYNOPSIS
    python3 tests/powerfs/powercut.py [--seed N] [--rounds R] [--seconds S] [--storm P] [--keep]
    make powercut POWERCUT_SEED=7 POWERCUT_ROUNDS=12
    python3 tests/e2e/run.py test_powercut_random_short

DESCRIPTION
    One bin/idemrelay with its LMDB store on tests/powerfs (the FUSE file
    system that keeps every write in memory until it is synced; a cut
    throws away what was not) relays to the upstream sink
    (tests/e2e/sink.py). The run is a number of rounds, each drawn from the
    seed before anything starts (so a seed replays the same schedule,
    whatever the timing; the clients' own draws are seeded too, but which
    earlier key a retry picks depends on the timing):

        map M [max X]   the store.map_size (and store.map_size_max) the
                        daemon was started with for this round: 16M and
                        24M leave no room for the journal, bigger ones
                        put its region elsewhere in data.mdb; a change
                        from the last round is a restart with a bigger or
                        smaller map after a cut
        clients N, ops K, retry P, sizes PROFILE
                        N threads submit K submissions between them: a new
                        key (1-4 recipients, X-Idempotency-Key, a body of
                        ~300 octets to ~1.1 MB as PROFILE weighs them, so
                        that the journal's 8 MB region wraps at random
                        points) or, with probability P, the same bytes of an
                        earlier key again, whatever it was told before
        hup@F           SIGHUP when a fraction F of the ops is done
        stop@F          SIGTERM and a start again at F
        backlog         the sink answers 451 to every RCPT for the round
                        and the map starts at 16M to 40M: the spool of
                        big messages grows, and the map with it (the
                        journal's region moves at each growth)
        full            a backlog with the map fixed (map_size_max =
                        map_size), so that the spool fills it: 452 4.3.1
                        replies; END@F then comes 40 F tries after the
                        first 452 (ops: 200 at most)
        drain           before the cut, stop the load and wait until the
                        sink (accepting again) has every message: the
                        spool's pages go to the free list, which the next
                        start compacts if it holds 16 MB and a quarter of
                        the store (after a backlog of 24M or 40M)
        short           with probability P (--storm, 0.5; the e2e case's 0): 12-30
                        messages of mostly 200 KB-1.1 MB, no extra, and a
                        power cut with a writeback (power~ or power#) at
                        0.4-1.0 of them: several cuts a minute, each after
                        8 MB or more since the start (a start begins the
                        journal's region again), so that one lands, now and
                        then, in the commit that wraps it
        END@F           how the round ends, once a fraction F of the ops
                        is done (plus a random moment up to 0.3 s): power
                        (kill -9 and a power cut), kill9 (the daemon alone),
                        or power+start (a power cut, a start cut by another
                        power cut after a random moment up to 1.5 s, in the
                        middle of its compaction or replay, then a start).
                        A cut may write nothing of what was not synced,
                        power~ a random part of it (powerfs's SIGPWR: the
                        kernel's writeback under way), or power# the same
                        at the next sync (SIGRTMIN: a commit's writes all
                        issued, its flush not done)

    After each cut the daemon must start (within 60 s). After the last round
    the sink accepts everything, every key answered 250 is submitted again
    (a key of more than 50 KB with other content: the 554 of keys.on_mismatch
    = "reject" names its QID, and the run's retries sent the same bytes), the
    spool drains, and the history is checked:
      - every 250 of a key names one QID, and a retry of it now gets it;
      - every recipient of every key answered 250 reached the sink exactly
        once under that QID (Received:), or the daemon logged it
        status=unconfirmed (upstream.ambiguous = "assume-delivered": a cut
        just after a final dot);
      - a key only ever refused (4xx or 5xx at the end of DATA, or lost before
        its content was sent) never reached the sink, and no key reached
        it twice for one recipient (a key with an unknown outcome too);
      - the daemon started every time and died only when the run killed it.

    The seed and the schedule are printed first; a failure prints the
    daemon's log lines naming each failing QID and the round each key was
    told what, and keeps the run's directory. --seconds bounds the run: no
    round starts after it (the check still runs); --rounds R with the
    same seed replays the schedule's first R rounds.

EXIT STATUS
    0 when every check held, 1 otherwise.
"""

import argparse
import base64
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "e2e"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "pg"))

import harness  # noqa: E402
from harness import check, make_msg, received_qids, render_conf, wait_until  # noqa: E402
from nemesis import try_once  # noqa: E402

SUBJECT_RE = re.compile(rb"^Subject: powercut (\S+)\r?$", re.M)
QID_RE = re.compile(r"queued as ([0-9A-Z]{12,20})\b")
UNCONFIRMED_RE = re.compile(r"\b([0-9A-Z]{12,20}): to=<([^>]*)>, .*status=unconfirmed")
MAPS = ("16M", "24M", "40M", "64M", "100M", "256M")
PROFILES = {                    # sizes: (tiny, small, medium, big) weights
    "tiny": (8, 2, 0, 0),
    "mixed": (4, 3, 2, 1),
    "big": (1, 1, 2, 4),
    "huge": (0, 0, 1, 6),
}
ENDS = (("power", 6), ("kill9", 2), ("power+start", 3))
START_S = 60                    # a start after a cut, at most
PROBE_OVER = 50000              # the final retry of a bigger key sends other content
LOGGED = (("journal replays", "replayed from the journal"),
          ("compactions", ": compacted: "),
          ("no journal", "every commit is synced without it"),
          ("journal missing", "the journal is missing"),
          ("map grown", "map grown"),
          ("status=unconfirmed", "status=unconfirmed"))


# ---------------------------------------------------------------- the schedule

class Round:
    """One round of the schedule: the start's map, the load, the extras, the end."""

    def __init__(self, i, rng, prev_map, storm=0.0):
        self.i = i
        self.backlog = rng.random() < 0.2          # the sink answers 451: the spool grows
        self.full = self.backlog and rng.random() < 0.6
        self.map = rng.choice(MAPS[:3]) if self.backlog else (
            prev_map if rng.random() < 0.5 else rng.choice(MAPS))
        self.clients = rng.randint(2, 4)
        self.ops = 200 if self.full else rng.randint(80, 160) if self.backlog else rng.randint(10, 50)
        self.retry = rng.choice((0.0, 0.15) if self.backlog else (0.0, 0.15, 0.3, 0.5))
        self.profile = "big" if self.backlog else rng.choice(("tiny", "mixed", "mixed", "big"))
        self.hup = rng.uniform(0.1, 0.9) if rng.random() < 0.25 else None
        self.stop = rng.uniform(0.1, 0.9) if rng.random() < 0.1 else None
        self.drain = rng.random() < (0.5 if self.backlog else 0.15)
        self.end = rng.choices([e for e, _ in ENDS], [w for _, w in ENDS])[0]
        # a full round's: F of 40 tries after its first 452 (round())
        self.at = 1.0 if self.drain else rng.uniform(0.05, 1.0)
        self.jitter = rng.uniform(0, 0.3)
        self.start_cut = rng.uniform(0, 1.5)
        # each cut: "" nothing written back, "~" a part, "#" a part, at the next sync
        self.how = [rng.choice(("", "~", "#", "#")), rng.choice(("", "~", "#", "#"))]
        self.seed = rng.randrange(1 << 30)
        # a short round (storm): 8-20 MB of big messages (a start begins the journal's
        # region again: a wrap needs 8 MB since) and a cut with a writeback, several
        # cuts a minute; drawn apart, so that storm 0 leaves the schedule as it was
        own = random.Random(self.seed)
        self.short = not self.backlog and own.random() < storm
        if self.short:
            self.ops, self.retry, self.profile = own.randint(12, 30), 0.0, "huge"
            self.hup = self.stop = None
            self.drain = False
            self.end, self.at, self.how[0] = "power", own.uniform(0.4, 1.0), own.choice("~##")

    def __str__(self):
        s = "round %2d%s: map %s%s, clients %d, ops %d, retry %.2f, sizes %s" % (
            self.i, " short" if self.short else "", self.map, " max %s full" % self.map if self.full else
            " backlog" if self.backlog else "", self.clients,
            self.ops, self.retry, self.profile)
        if self.hup is not None:
            s += ", hup@%.2f" % self.hup
        if self.stop is not None:
            s += ", stop@%.2f" % self.stop
        if self.drain:
            s += ", drain"
        s += ", %s%s@%.2f+%.2fs" % (self.end, self.how[0] if self.end != "kill9" else "",
                                    self.at, self.jitter)
        if self.end == "power+start":
            s += " (the start cut%s at %.2fs)" % (self.how[1], self.start_cut)
        return s


def draw(seed, rounds, storm=0.0):
    """draw - the whole schedule from the seed alone (and the storm's share)"""
    rng = random.Random(seed)
    out, prev = [], "64M"
    for i in range(1, rounds + 1):
        r = Round(i, rng, prev, storm)
        out.append(r)
        prev = r.map
    return out


# ---------------------------------------------------------------- history

def body_of(name, size):
    """body_of - size octets or so of base64 lines (random: the store may compress),
    the same for a name every time"""
    raw = base64.b64encode(random.Random(name).randbytes(size * 3 // 4 + 57))
    return b"".join(raw[i:i + 76] + b"\r\n" for i in range(0, len(raw), 76))


class Key:
    """One key: its recipients, its bytes and every try's outcome."""

    def __init__(self, name, rcpts, size):
        self.name, self.rcpts, self.size = name, rcpts, size
        self._msg = None
        self.busy = False               # a client is trying it now
        self.tries = []                 # (round, code or None, text, content sent)
        self.qids = []                  # (round, QID) of each 250

    @property
    def msg(self):
        if self._msg is None:
            self._msg = make_msg(key=self.name, subject="powercut " + self.name, to=self.rcpts[0],
                                 body=body_of(self.name, self.size))
        return self._msg

    def forget_bytes(self):
        self._msg = None

    @property
    def ok(self):
        return bool(self.qids)

    def only_refused(self):
        return not self.qids and all(c is not None or not sent for _, c, _, sent in self.tries)

    def told(self):
        return "; ".join("r%d %s%s" % (r, c if c is not None else "-",
                                         " (sent)" if c is None and s else "")
                         for r, c, _, s in self.tries)


def draw_size(rng, profile):
    kind = rng.choices(range(4), PROFILES[profile])[0]
    return (rng.randint(100, 600), rng.randint(1000, 10000), rng.randint(10000, 200000),
            rng.randint(200000, 1100000))[kind]


# ---------------------------------------------------------------- the run

class Run:
    """The power-cut file system, the sink, the daemon, the clients and the schedule."""

    def __init__(self, t, seed, rounds, seconds, storm=0.0):
        self.t, self.seed, self.seconds, self.storm = t, seed, seconds, storm
        self.schedule = draw(seed, rounds, storm)
        self.lock = threading.Lock()
        self.keys = []
        self.bad = []
        self.counts = {"power cuts": 0, "kill -9": 0, "cut starts": 0, "SIGHUP": 0,
                       "restarts": 0, "drains": 0, "backlogs": 0, "full rounds": 0,
                       "writebacks": 0, "cuts at a sync": 0}
        self.rounds_run = 0
        self.t0 = time.monotonic()
        self.records = {}               # the sink's file name -> (key, rcpts, qids, accepted)

    def now(self):
        return time.monotonic() - self.t0

    def event(self, text):
        print("[%7.1f] %s" % (self.now(), text), flush=True)

    # ------------------------------------------------------------ the daemon

    def configure(self, rnd):
        """configure - the daemon's store section for round rnd's start"""
        store = dict(self.d.conf["store"])
        store["map_size"] = rnd.map if rnd else "64M"
        if rnd and rnd.full:
            store["map_size_max"] = rnd.map
        else:
            store.pop("map_size_max", None)
        self.d.conf["store"] = store
        with open(self.d.conf_path, "w") as f:
            f.write(render_conf(self.d.conf))

    def start(self, why):
        """start - the daemon must start: a failure is recorded and ends the run"""
        try:
            self.d.start(timeout=START_S)
            self.counts["restarts"] += 1
            return True
        except AssertionError as e:
            self.bad.append("START: %s (%s, after round %d)" % (e, why, self.rounds_run))
            self.event("the daemon did not start: %s" % e)
            return False

    def cut(self, power=True, how="", seed=0, stop=None):
        """cut - kill -9; then a power cut: how "" with nothing written back,
        "~" with a part of the unsynced pages, "#" at the daemon's next sync
        with a part of them (powerfs's SIGPWR and SIGRTMIN). The load's
        clients (stop) take no new op from the moment of the cut on."""
        said = "powerfs: power: "
        n = self.fs.log().count(said)
        if power and how == "#":
            os.kill(self.fs.proc.pid, signal.SIGRTMIN)
            try:
                wait_until(lambda: self.fs.log().count(said) > n, 3, "a sync", interval=0.01)
                self.counts["cuts at a sync"] += 1
            except AssertionError:
                how = "~"               # no sync came: now
        if stop is not None:
            stop.set()
        if self.d.running():
            # a thread of it waits for that sync, which powerfs never answers: it can
            # only be reaped once powerfs is gone (it never runs again after SIGKILL)
            os.kill(self.d.proc.pid, signal.SIGKILL)
            self.d.stopped = True
        if power:
            self.counts["power cuts"] += 1
            if how == "~":
                os.kill(self.fs.proc.pid, signal.SIGPWR)
                wait_until(lambda: self.fs.log().count(said) > n, 30, "powerfs's writeback")
            self.counts["writebacks"] += how != ""
            os.environ["POWERFS_SEED"] = str(seed)
            self.fs.cut()
        if self.d.proc is not None:
            self.d.proc.wait()

    def died(self, where):
        """died - the daemon exited when nobody stopped it"""
        if self.d.proc is not None and self.d.proc.poll() is not None and not self.d.stopped:
            self.bad.append("CRASH: the daemon exited with %s %s" % (self.d.proc.returncode, where))
            self.d.stopped = True
            return True
        return False

    # ------------------------------------------------------------ the load

    def client(self, rnd, c, ops, stop, done):
        rng = random.Random(rnd.seed * 16 + c)
        n = 0
        while not stop.is_set():
            with self.lock:
                if ops[0] <= 0:
                    return
                ops[0] -= 1
                earlier = [k for k in self.keys if not k.busy] if rng.random() < rnd.retry else []
                if earlier:
                    k = rng.choice(earlier)
                else:
                    name = "s%d-r%d-c%d-%d" % (self.seed, rnd.i, c, n)
                    n += 1
                    k = Key(name, ["%s-%d@example.com" % (name, j) for j in range(rng.randint(1, 4))],
                            draw_size(rng, rnd.profile))
                    self.keys.append(k)
                k.busy = True
            try:
                code, text, sent = try_once(self.d.port, k, timeout=30)
            finally:
                with self.lock:
                    k.busy = False
            with self.lock:
                k.tries.append((rnd.i, code, text, sent))
                if code == 250:
                    m = QID_RE.search(text)
                    k.qids.append((rnd.i, m.group(1) if m else "?" + text))
                k.forget_bytes()
                done[0] += 1
                if code == 452 and done[1] is None:
                    done[1] = done[0]
            if code is None and not stop.is_set():
                time.sleep(0.2)         # the daemon restarting (stop@): not a busy loop

    def round(self, rnd):
        """round - one round of the schedule, its end included; False if the run must end"""
        self.event(str(rnd))
        if rnd.backlog:
            self.counts["full rounds" if rnd.full else "backlogs"] += 1
            self.sink.control(default="tempfail")
        ops, done, stop = [rnd.ops], [0, None], threading.Event()   # tries; then, at the first 452
        ths = [threading.Thread(target=self.client, args=(rnd, c, ops, stop, done), daemon=True)
               for c in range(rnd.clients)]
        for th in ths:
            th.start()
        marks = sorted(((rnd.hup, "hup"), (rnd.stop, "stop"), (rnd.at, "end")),
                       key=lambda x: (x[0] is None, x[0] or 0))
        for at, what in marks:
            if at is None:
                continue
            if rnd.full:                # at: of 40 tries after the first 452
                def reached():
                    return done[1] is not None and done[0] >= done[1] + int(at * 40)
            else:
                def reached():
                    return done[0] >= min(rnd.ops, max(1, int(at * rnd.ops)))
            try:
                wait_until(lambda: reached() or not any(th.is_alive() for th in ths),
                           120, "round %d's %s@%.2f" % (rnd.i, what, at), interval=0.02)
            except AssertionError as e:
                self.bad.append("STUCK: %s (%d tries)" % (e, done[0]))
            if self.died("in round %d" % rnd.i):
                stop.set()
                return self.start("after a crash")
            if what == "hup":
                self.counts["SIGHUP"] += 1
                os.kill(self.d.proc.pid, signal.SIGHUP)
                self.event("SIGHUP")
            elif what == "stop":
                self.event("SIGTERM and a start")
                rc = self.d.stop(signal.SIGTERM, 60)
                if rc != 0:
                    self.bad.append("STOP: the daemon exited %s on SIGTERM in round %d" % (rc, rnd.i))
                if not self.start("after SIGTERM"):
                    stop.set()
                    return False
        if rnd.drain:
            stop.set()
            for th in ths:
                th.join(120)
            self.counts["drains"] += 1
            self.sink.control()         # a backlog goes: its pages freed
            try:
                self.wait_delivered(60)
                self.event("drained")
            except AssertionError as e:
                self.event("not drained: %s" % e)
        time.sleep(rnd.jitter)
        nxt = self.schedule[rnd.i] if rnd.i < len(self.schedule) else None
        self.died("at the end of round %d" % rnd.i)
        if rnd.end == "kill9":
            self.counts["kill -9"] += 1
        self.cut(rnd.end != "kill9", rnd.how[0], rnd.seed, stop)
        for th in ths:
            th.join(120)
        check(not any(th.is_alive() for th in ths), "a client did not finish")
        if rnd.backlog:
            self.sink.control()
        self.configure(nxt)
        self.event("%s; %d tries; next start with map %s" % (
            rnd.end, done[0], self.d.conf["store"]["map_size"]))
        if rnd.end == "power+start":
            self.counts["cut starts"] += 1
            start_nowait(self.d)
            time.sleep(rnd.start_cut)
            self.cut(True, rnd.how[1], rnd.seed + 1)
        return self.start("after round %d's %s" % (rnd.i, rnd.end))

    # ------------------------------------------------------------ the sink

    def sink_records(self):
        """sink_records - the sink's records, each file read once"""
        try:
            names = sorted(n for n in os.listdir(self.sink.record_dir)
                           if n.endswith(".json") and not n.startswith("."))
        except FileNotFoundError:
            return []
        for n in names:
            if n in self.records:
                continue
            with open(os.path.join(self.sink.record_dir, n)) as f:
                r = json.load(f)
            data = base64.b64decode(r["data_b64"])
            m = SUBJECT_RE.search(data)
            self.records[n] = (m.group(1).decode() if m else None,
                               [x["addr"] for x in r["rcpts"]], received_qids(data), r["accepted"])
        return [self.records[n] for n in names]

    def unconfirmed(self):
        return {(m.group(1), m.group(2)) for m in map(UNCONFIRMED_RE.search, self.d.log().splitlines())
                if m}

    def waiting(self):
        """waiting - (QID, recipient) of keys answered 250 not at the sink nor unconfirmed"""
        there = {(q, a) for _, rcpts, qids, acc in self.sink_records() if acc
                 for q in qids for a in rcpts}
        there |= self.unconfirmed()
        with self.lock:
            want = {(k.qids[0][1], a) for k in self.keys if k.ok for a in k.rcpts}
        return want - there

    def wait_delivered(self, timeout):
        wait_until(lambda: not self.waiting(), timeout, "every 250 at the sink", interval=1)

    # ------------------------------------------------------------ the run

    def go(self):
        print("powercut: seed %d, %d rounds, at most %d s (replay: python3 tests/powerfs/powercut.py"
              " --seed %d --rounds %d --storm %g)" % (self.seed, len(self.schedule), self.seconds,
                                                      self.seed, len(self.schedule), self.storm),
              flush=True)
        for rnd in self.schedule:
            print("  " + str(rnd))
        t = self.t
        os.environ["POWERFS_SEED"] = str(self.seed)
        self.fs = t.powerfs()
        self.sink = t.sink()
        self.d = t.daemon(self.sink, {
            "store": {"path": self.fs.mnt + "/store"},
            "limits": {"message_size": "2M"},
            "upstream": {"connections": 4}}, start=False)
        self.configure(self.schedule[0] if self.schedule else None)
        if not self.start("the first start"):
            return self.verify()
        for rnd in self.schedule:
            if self.now() > self.seconds:
                self.event("time is up: %d of %d rounds run" % (self.rounds_run, len(self.schedule)))
                break
            ok = self.round(rnd)
            self.rounds_run += 1
            if not ok:
                break
        if self.d.running():
            self.final()
        return self.verify()

    def final(self):
        """final - every key answered 250 again (the same bytes up to PROBE_OVER
        octets, else a few others: the 554 of keys.on_mismatch = "reject" names
        the QID too), the spool drained"""
        self.event("final: the sink accepts, every key answered 250 is submitted again")
        self.sink.control()
        with self.lock:
            ok = [k for k in self.keys if k.ok]
        for k in ok:
            if k.size > PROBE_OVER:
                probe = Key(k.name, k.rcpts, 0)
                probe._msg = make_msg(key=k.name, subject="powercut-probe " + k.name,
                                      to=k.rcpts[0], body="probe\r\n")
                code, text, sent = try_once(self.d.port, probe, timeout=60)
                m = QID_RE.search(text)
                if code != 554 or not m or m.group(1) != k.qids[0][1]:
                    self.bad.append("RETRY: key %s (250 %s) with other content at the end: "
                                    "%s %s" % (k.name, k.qids[0][1], code, text))
                    if code == 250:
                        k.qids.append((0, m.group(1) if m else "?" + text))
                continue
            code, text, sent = try_once(self.d.port, k, timeout=60)
            k.tries.append((0, code, text, sent))
            if code == 250:
                m = QID_RE.search(text)
                k.qids.append((0, m.group(1) if m else "?" + text))
            else:
                self.bad.append("RETRY: key %s (250 %s) retried at the end: %s %s"
                                % (k.name, k.qids[0][1], code, text))
            k.forget_bytes()
        try:
            self.wait_delivered(120)
        except AssertionError:
            pass                        # verify() names what is missing
        time.sleep(3)                   # a second copy would come now
        self.died("at the end")

    def verify(self):
        """verify - the history against the sink's records: a list of failures"""
        bad = self.bad
        by_name = {k.name: k for k in self.keys}
        got = {}                        # key -> rcpt -> [QID of each copy]
        strays = []
        for name, rcpts, qids, acc in self.sink_records():
            if not acc:
                continue
            if name not in by_name:
                strays.append((name, rcpts, qids))
                continue
            for a in rcpts:
                got.setdefault(name, {}).setdefault(a, []).append(qids[0] if len(qids) == 1
                                                                  else repr(qids))
        unconfirmed = self.unconfirmed()
        failing = []
        for k in self.keys:
            copies = got.get(k.name, {})
            cq = {q for cs in copies.values() for q in cs}
            told = {q for _, q in k.qids}
            for a in copies:
                if a not in k.rcpts:
                    bad.append("key %s: delivered to %s, not a recipient" % (k.name, a))
            for a, cs in copies.items():
                if len(cs) > 1:
                    bad.append("DUPLICATED: key %s, recipient %s: %d copies %s (told: %s)"
                               % (k.name, a, len(cs), cs, k.told()))
                    failing.extend(cs)
            if len(told) > 1:
                bad.append("QID CHANGED: key %s answered 250 with %s (told: %s)" % (
                    k.name, " then ".join("r%d %s" % x for x in k.qids), k.told()))
                failing.extend(told)
            if k.ok:
                q = k.qids[0][1]
                if cq - {q}:
                    bad.append("key %s: copies name %s, its first 250 %s" % (k.name, sorted(cq), q))
                for a in k.rcpts:
                    if a not in copies and (q, a) not in unconfirmed:
                        bad.append("LOST: key %s, QID %s (250 in round %d), recipient %s "
                                   "(told: %s)" % (k.name, q, k.qids[0][0], a, k.told()))
                        failing.append(q)
            elif k.only_refused() and copies:
                bad.append("REFUSED DELIVERED: key %s only ever refused (%s), delivered as %s"
                           % (k.name, k.told(), sorted(cq)))
                failing.extend(cq)
        if strays:
            bad.append("copies of no key of ours: %r" % strays[:5])
        text = self.d.log() if self.d else ""
        for pat in harness.SANITIZER_REPORTS + ("SIGSEGV", "Segmentation fault", "panic"):
            if pat in text:
                bad.append("%r in the daemon's log" % pat)
        tries = sum(len(k.tries) for k in self.keys)
        codes = {}
        for k in self.keys:
            for x in k.tries:
                c = x[1] if x[1] is not None else ("lost-after-content" if x[3] else "conn-error")
                codes[c] = codes.get(c, 0) + 1
        seen = {w: sum(1 for l in text.splitlines() if words in l) for w, words in LOGGED}
        self.summary = ("powercut: seed %d: %d rounds, %d keys (%d answered 250, %d only refused, "
                        "%d unknown), %d tries %s, %d MB submitted; %s; logged %s; %d failures"
                        % (self.seed, self.rounds_run, len(self.keys),
                           sum(1 for k in self.keys if k.ok),
                           sum(1 for k in self.keys if k.only_refused()),
                           sum(1 for k in self.keys if not k.ok and not k.only_refused()),
                           tries, dict(sorted(codes.items(), key=str)),
                           sum(k.size * len(k.tries) for k in self.keys) >> 20,
                           ", ".join("%s %d" % x for x in self.counts.items()),
                           ", ".join("%s %d" % x for x in seen.items()), len(bad)))
        print(self.summary, flush=True)
        if bad:
            self.explain(failing)
        return bad

    def explain(self, qids):
        """explain - the daemon's log lines naming each failing QID, with the starts"""
        lines = self.d.log().splitlines()
        for q in list(dict.fromkeys(qids))[:6]:
            print("--- %s ---" % q)
            for l in lines:
                if q in l or l.startswith("=== e2e: start") or "replayed" in l or "journal" in l:
                    print("  " + l)


def start_nowait(d):
    """start_nowait - start harness.Daemon d without waiting for it (a start to cut)"""
    d.runs += 1
    d.stopped = False
    with open(d.log_path, "ab") as logf:
        logf.write(b"=== e2e: start #%d (to be cut) ===\n" % d.runs)
        logf.flush()
        d.proc = subprocess.Popen([harness.BIN, "-c", d.conf_path], cwd=d.dir,
                                  stdin=subprocess.DEVNULL, stdout=logf, stderr=logf)


def run(t, seed, rounds, seconds, storm=0.0):
    """run - one run on the harness's T; raises AssertionError naming every failure"""
    r = Run(t, seed, rounds, seconds, storm)
    bad = r.go()
    if bad:
        raise AssertionError("powercut seed %d: %d failure(s):\n  %s"
                             % (seed, len(bad), "\n  ".join(bad[:40])))
    return r


def main(argv):
    ap = argparse.ArgumentParser(description="idemrelay's randomized power-cut test (LMDB)")
    ap.add_argument("--seed", type=int, default=int(os.environ.get("POWERCUT_SEED") or
                                                    random.SystemRandom().randrange(1, 10 ** 6)))
    ap.add_argument("--rounds", type=int, default=int(os.environ.get("POWERCUT_ROUNDS") or 12))
    ap.add_argument("--seconds", type=int, default=int(os.environ.get("POWERCUT_S") or 900))
    ap.add_argument("--storm", type=float, default=float(os.environ.get("POWERCUT_STORM") or 0.5),
                    help="the share of short rounds (8-20 MB of big messages, a cut with a writeback)")
    ap.add_argument("--keep", action="store_true", help="keep the run's directory")
    args = ap.parse_args(argv)
    return harness.standalone("powercut", "lmdb", args.seed, args.keep,
                              lambda t: run(t, args.seed, args.rounds, args.seconds, args.storm))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
