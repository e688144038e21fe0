#!/usr/bin/env python3
"""
NAME
    soak.py - idemrelay at a fixed rate for N minutes: nothing lost or sent
    twice, and no growth that does not level off (issue 11)

SYNOPSIS
    make soak
    SOAK_MINUTES=5 SOAK_RATE=100 make soak

DESCRIPTION
    Starts the end-to-end tests' fault-injecting sink (tests/e2e/sink.py)
    and bin/idemrelay (tests/e2e/harness.py, with its durable defaults, a
    short store.key_ttl and a short retry.give_up, so that claims and
    stories expire and deferred mail bounces within the run), all on
    127.0.0.1, and drives it for SOAK_MINUTES at SOAK_RATE submissions a
    second from SOAK_CLIENTS threads. Each submission takes the next slot
    of one shared schedule (slot k at start + k/rate), so the rate is
    fixed whatever one client's latency. A slot is, by chance:

      retry       10%  a submission already answered 250, sent again with
                       the same key and bytes (within key_ttl/3 of the
                       first): must get 250 with the original QID
      twin         5%  a new message written on two connections at once
                       (a race of one key, SPEC section 4): both must get
                       250 with one QID; it takes two slots
      fail-first   5%  a new message with a second recipient that the sink
                       defers twice (fail-first-2-...), then takes
      tempfail     2%  a new message with a second recipient that the sink
                       always defers (tempfail-...): bounced at give_up
      fresh        the rest: a new message to one recipient (a fifth of
                       them to three)

    A client that gets no reply, or a 4xx, sends the same submission again
    later, as an application does, and that submission's QID is the one
    it finally gets. Every client ends its session after 50 messages and
    opens a new one, so that connections come and go.

    Every SOAK_SAMPLE seconds it samples the daemon: RssAnon and threads
    (/proc/PID/status), open descriptors (/proc/PID/fd), the store's disk
    space (blocks of the files in store.path: data.mdb is sparse),
    `idemrelayctl --json stats` (claims, stories, queued, map_used), the
    submissions answered in the interval and the p50/p99 of the reply to
    the final dot (writing the dot to reading the reply), and the load
    average.

    After the load, it waits until the queue is empty (every fail-first
    recipient delivered, every tempfail one bounced), then checks at the
    sink that each recipient of each QID answered 250 reached it exactly
    once (tempfail ones: none, and one bounce naming the QID and the
    recipient; a recipient still deferred at give_up, a fail-first one
    whose third attempt came late, may be bounced instead: counted, not a
    loss), that nothing reached it under a QID no client was given,
    that every retry and both halves of every twin got the original QID.

    Growth: the samples of the first third of the load (at least the
    settling time: key_ttl + give_up + retry.max + two expiry ticks,
    after which each claim and story made is matched by one expiring)
    are left out; the rest is cut in two halves by time, the middle and
    the last. A figure FAILs when the mean of the last half exceeds the
    middle half's by more than its tolerance (see LIMITS below): a figure
    that levels off has the same mean in both halves up to its noise, a
    figure that grows by g per second has means W*g apart (W the length of
    a half). The slope of the last half is printed too.

ENVIRONMENT
    SOAK_MINUTES   minutes of load (default 10; under 5, too few samples are
                   left after the settling time for a growth verdict)
    SOAK_RATE      submissions per second (default 200)
    SOAK_CLIENTS   client threads (default 8)
    SOAK_SAMPLE    seconds between samples (default 5)
    SOAK_SIZE      approximate message size in bytes (default 2000)
    SOAK_TTL       store.key_ttl in seconds (default 60)
    SOAK_GIVE_UP   retry.give_up in seconds (default 60)
    SOAK_OUT       samples and verdict as JSON (default build/bench/soak.json)
    SOAK_TMP       where the temporary directory goes (default /tmp)
    SOAK_KEEP=1    keep it (logs, store, sink records)
    IDEMRELAY_BIN  the daemon (default bin/idemrelay; idemrelayctl beside it)

DIAGNOSTICS
    Prints the table of samples and a summary; exits 0 on PASS, 1 on FAIL
    (a loss, a duplicate, a wrong QID, or growth), 2 if it could not run.
"""

import base64
import json
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
# the daemon runs in its own directory: a relative IDEMRELAY_BIN (make passes
# bin/idemrelay) is taken from the current one, before harness reads it
if os.environ.get("IDEMRELAY_BIN"):
    os.environ["IDEMRELAY_BIN"] = os.path.abspath(os.environ["IDEMRELAY_BIN"])
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
import harness  # noqa: E402  (the tests' sink, daemon, config and QID parsing)

MINUTES = float(os.environ.get("SOAK_MINUTES", "10"))
RATE = float(os.environ.get("SOAK_RATE", "200"))
CLIENTS = int(os.environ.get("SOAK_CLIENTS", "8"))
SAMPLE = float(os.environ.get("SOAK_SAMPLE", "5"))
SIZE = int(os.environ.get("SOAK_SIZE", "2000"))
TTL = int(os.environ.get("SOAK_TTL", "60"))
GIVE_UP = int(os.environ.get("SOAK_GIVE_UP", "60"))
OUT = os.path.abspath(os.environ.get("SOAK_OUT", os.path.join(REPO, "build", "bench", "soak.json")))
CTL = os.path.join(os.path.dirname(os.path.abspath(harness.BIN)), "idemrelayctl")

RETRY_FIRST, RETRY_MAX = 5, 15      # retry.first, retry.max (seconds)
EXPIRE_TICK = 10                    # the daemon expires stories every 10 s (daemon/control.c)
PER_SESSION = 50                    # messages per client session
IO_TIMEOUT = 30                     # seconds a client waits for one reply
SHARES = (("retry", 0.10), ("twin", 0.05), ("fail-first", 0.05), ("tempfail", 0.02))

# What a figure may grow from the middle half to the last before it FAILs:
# (relative to the middle half's mean, absolute, unit). Why each is wide
# enough for a levelled run's noise and no wider is in BENCHMARKS.md ("Soak"):
# RssAnon moves with the messages in flight and malloc's arenas; descriptors
# in steps of 6 with each upstream connection (its bridge's sockets and pipes),
# so 12 is two of them; the store with the expiry ticks and the queue.
LIMITS = {
    "rss_anon_mb": (0.10, 1.0, "MB"),
    "fds": (0.0, 12.0, ""),
    "map_used_mb": (0.10, 1.0, "MB"),
    "disk_mb": (0.10, 1.0, "MB"),
}


def say(*a):
    print(*a, flush=True)


# ---------------------------------------------------------------- the daemon

def soak_conf(tmp):
    """soak_conf - what the soak changes in harness.base_conf"""
    return {
        "store": {"map_size": "256M", "key_ttl": "%ds" % TTL},
        "upstream": {"connections": 4, "timeout": "30s"},
        "retry": {"first": "%ds" % RETRY_FIRST, "max": "%ds" % RETRY_MAX,
                  "give_up": "%ds" % GIVE_UP},
        "limits": {"connections": 1000},
        "control": os.path.join(tmp, "ctl.sock"),
    }


def proc_status(pid):
    """proc_status - RssAnon and VmRSS in MB, threads, from /proc/PID/status"""
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("RssAnon", "VmRSS"):
                out[k] = int(v.split()[0]) / 1024.0
            elif k == "Threads":
                out[k] = int(v)
    return out


def disk_bytes(path):
    """disk_bytes - blocks allocated to the files in path (data.mdb is sparse)"""
    total = 0
    for n in os.listdir(path):
        try:
            total += os.stat(os.path.join(path, n)).st_blocks * 512
        except FileNotFoundError:
            pass
    return total


def ctl_json(d, *args):
    """ctl_json - idemrelayctl --json on the daemon's config, or None"""
    try:
        r = subprocess.run([CTL, "-c", d.conf_path, "--json"] + list(args), cwd=d.dir,
                           capture_output=True, text=True, timeout=30)
        return json.loads(r.stdout) if r.stdout.strip() else None
    except (subprocess.TimeoutExpired, ValueError):
        return None


# ---------------------------------------------------------------- clients

class Conn:
    """One SMTP session over a socket, pipelining MAIL, RCPT and DATA."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.count = 0
        self.expect(220)
        self.sock.sendall(b"EHLO soak.test\r\n")
        self.expect(250)

    def reply(self):
        """reply - one reply, multi-line ones joined: (code, last line's text)"""
        while True:
            i = self.buf.find(b"\r\n")
            if i < 0:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise EOFError("connection closed by idemrelay")
                self.buf += chunk
                continue
            line, self.buf = self.buf[:i].decode("latin-1"), self.buf[i + 2:]
            if len(line) < 4 or line[3] != "-":
                return int(line[:3]), line[4:]

    def expect(self, code):
        c, text = self.reply()
        if c != code:
            raise EOFError("got %d %s, want %d" % (c, text, code))

    def envelope(self, rcpts):
        self.sock.sendall(("MAIL FROM:<soak@example.org>\r\n"
                           + "".join("RCPT TO:<%s>\r\n" % r for r in rcpts)
                           + "DATA\r\n").encode())

    def envelope_replies(self, rcpts):
        """envelope_replies - None if DATA may follow, else the refusing reply"""
        bad = None
        for _ in range(len(rcpts) + 1):
            c, text = self.reply()
            if c >= 300 and bad is None:
                bad = (c, text)
        c, text = self.reply()              # to DATA
        if c != 354:
            return bad or (c, text)
        return bad

    def close(self):
        try:
            self.sock.sendall(b"QUIT\r\n")
        except OSError:
            pass
        self.sock.close()


def make_body(n):
    """make_body - about SIZE bytes of CRLF text, the same for one message n"""
    line = ("soak message %d " % n) * 4
    lines = max(1, SIZE // (len(line) + 2) - 3)
    return ("\r\n".join(line for _ in range(lines)) + "\r\n").encode()


def new_submission(run, n, kind, rng):
    """new_submission - a new message: its key, recipients and bytes on the wire"""
    rcpts = ["rcpt-%d@example.com" % n]
    if kind == "fresh" and rng.random() < 0.2:
        rcpts += ["rcpt-%d-b@example.com" % n, "rcpt-%d-c@example.com" % n]
    elif kind == "fail-first":
        rcpts.append("fail-first-2-s%s-%d@example.com" % (run, n))
    elif kind == "tempfail":
        rcpts.append("tempfail-s%s-%d@example.com" % (run, n))
    key = "soak-%s-%d" % (run, n)
    msg = harness.make_msg(key=key, subject="soak %d" % n, msgid="<%s@soak.test>" % key,
                           frm="soak@example.org", to=rcpts[0], body=make_body(n))
    wire = msg.replace(b"\r\n.", b"\r\n..") + b".\r\n"
    return {"key": key, "kind": kind, "rcpts": rcpts, "wire": wire, "qid": None,
            "accepted_at": None}


class Load:
    """The shared schedule, what was answered, and the per-interval latencies."""

    def __init__(self, port, seconds):
        self.port = port
        self.run = "%x" % (int(time.time()) & 0xffffff)
        self.lock = threading.Lock()
        self.slot = 0
        self.t0 = time.monotonic() + 0.5
        self.end = self.t0 + seconds
        self.next_n = 0
        self.answered = []          # submissions answered 250 (recent ones retried)
        self.by_qid = {}            # QID -> the submission first answered with it
        self.events = {"sent": 0, "ok": 0, "dup": 0, "retried": 0, "twins": 0,
                       "errors": 0, "4xx": 0, "5xx": 0}
        self.problems = []          # wrong QIDs, a fresh key answered as a duplicate
        self.lat = []               # this interval's latencies (ms)
        self.lag = 0.0              # how far behind the schedule a slot started, at most

    def take(self, k=1):
        """take - the next k slots; their start time, or None past the end"""
        with self.lock:
            s = self.slot
            self.slot += k
        t = self.t0 + s / RATE
        return t if t < self.end else None

    def count(self, what, k=1):
        with self.lock:
            self.events[what] += k

    def problem(self, text, wrong=False):
        """problem - note what went wrong; wrong: a reply that breaks the promise"""
        with self.lock:
            if len(self.problems) < 200:
                self.problems.append(text)
            self.events.setdefault("problems", 0)
            self.events["problems"] += 1
            if wrong:
                self.events.setdefault("wrong", 0)
                self.events["wrong"] += 1

    def fresh_n(self):
        with self.lock:
            self.next_n += 1
            return self.next_n

    def pick_retry(self, rng, now):
        """pick_retry - an answered submission young enough that its claim holds"""
        with self.lock:
            while self.answered and now - self.answered[0]["accepted_at"] > TTL / 3.0:
                self.answered.pop(0)
            if not self.answered:
                return None
            return self.answered[rng.randrange(len(self.answered))]

    def answered_250(self, sub, qid, text, lat_ms, now):
        """answered_250 - check a 250's QID against what this key got before"""
        with self.lock:
            self.events["ok"] += 1
            if "(duplicate)" in text:
                self.events["dup"] += 1
            if lat_ms is not None:
                self.lat.append(lat_ms)
            first = sub["qid"] is None
        if first:
            other = self.by_qid.get(qid)
            if other is not None and other is not sub:
                self.problem("new key %s answered with %s, the QID of key %s"
                             % (sub["key"], qid, other["key"]), wrong=True)
                return
            with self.lock:
                sub["qid"] = qid
                sub["accepted_at"] = now
                self.by_qid[qid] = sub
                self.answered.append(sub)
        elif sub["qid"] != qid:
            self.problem("key %s answered %s, first %s" % (sub["key"], qid, sub["qid"]),
                         wrong=True)


def send_on(c, sub):
    """send_on - one submission on one session; (code, text, latency ms)"""
    c.envelope(sub["rcpts"])
    bad = c.envelope_replies(sub["rcpts"])
    if bad:
        return bad[0], bad[1], None
    t = time.monotonic()
    c.sock.sendall(sub["wire"])
    code, text = c.reply()
    return code, text, (time.monotonic() - t) * 1000.0


def outcome(load, sub, code, text, lat, pending):
    """outcome - a reply to a submission; 4xx ones go back to be sent again"""
    if code == 250:
        m = harness.QID_RE.search(text)
        if not m:
            load.problem("250 without a QID for key %s: %r" % (sub["key"], text), wrong=True)
            return
        load.answered_250(sub, m.group(1), text, lat, time.monotonic())
    elif 400 <= code < 500:
        load.count("4xx")
        pending.append(sub)
    else:
        load.count("5xx")
        load.problem("key %s refused: %d %s" % (sub["key"], code, text), wrong=True)


def client(load, idx):
    """client - one thread: take slots, send, reconnect every PER_SESSION"""
    rng = random.Random(idx * 7919 + 1)
    conns = [None, None]
    pending = []                # submissions to send again (no reply, or a 4xx)

    def conn(i):
        if conns[i] is None or conns[i].count >= PER_SESSION:
            if conns[i] is not None:
                conns[i].close()
            conns[i] = Conn(load.port)
        conns[i].count += 1
        return conns[i]

    def drop(i):
        if conns[i] is not None:
            try:
                conns[i].sock.close()
            except OSError:
                pass
        conns[i] = None

    while True:
        r = rng.random()
        kind, acc = "fresh", 0.0
        for name, share in SHARES:
            acc += share
            if r < acc:
                kind = name
                break
        t = load.take(2 if kind == "twin" else 1)
        if t is None:
            break
        wait = t - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        else:
            with load.lock:
                load.lag = max(load.lag, -wait)
        if pending:
            sub, kind = pending.pop(0), "again"
            load.count("retried")
        elif kind == "retry":
            sub = load.pick_retry(rng, time.monotonic())
            if sub is None:
                kind = "fresh"
            else:
                load.count("retried")
        if kind not in ("again", "retry"):
            sub = new_submission(load.run, load.fresh_n(), kind, rng)
        try:
            if kind == "twin":
                load.count("twins")
                load.count("sent", 2)
                a, b = conn(0), conn(1)
                a.envelope(sub["rcpts"])
                b.envelope(sub["rcpts"])
                bad_a, bad_b = a.envelope_replies(sub["rcpts"]), b.envelope_replies(sub["rcpts"])
                if bad_a or bad_b:
                    raise EOFError("twin envelope refused: %r %r" % (bad_a, bad_b))
                ta = time.monotonic()
                a.sock.sendall(sub["wire"])
                b.sock.sendall(sub["wire"])
                ca, xa = a.reply()
                lat = (time.monotonic() - ta) * 1000.0
                cb, xb = b.reply()
                outcome(load, sub, ca, xa, lat, pending)
                outcome(load, sub, cb, xb, None, pending)
            else:
                load.count("sent")
                code, text, lat = send_on(conn(0), sub)
                outcome(load, sub, code, text, lat, pending)
        except (OSError, EOFError, ValueError) as e:
            load.count("errors")
            load.problem("client %d: %s (key %s, sent again)" % (idx, e, sub["key"]))
            pending.append(sub)
            drop(0)
            drop(1)
    for i in (0, 1):
        if conns[i] is not None:
            conns[i].close()
    # what is still pending is sent now, past the schedule: every submission
    # ends with a 250, or is reported
    for sub in pending[:]:
        try:
            c = Conn(load.port)
            code, text, lat = send_on(c, sub)
            c.close()
            if code == 250:
                pending.remove(sub)
            elif code < 500:
                load.problem("key %s: %d %s after the load: never accepted"
                             % (sub["key"], code, text))
            outcome(load, sub, code, text, None, [])
        except (OSError, EOFError, ValueError) as e:
            load.problem("client %d: %s (key %s, given up)" % (idx, e, sub["key"]))


# ---------------------------------------------------------------- sampling

def pct(vals, p):
    if not vals:
        return None
    vals = sorted(vals)
    return vals[min(len(vals) - 1, int(len(vals) * p))]


def sample(d, load, t_prev, ok_prev):
    """sample - one row: the daemon, its store, the interval's load"""
    now = time.monotonic()
    with load.lock:
        lat, load.lat = load.lat, []
        ok = load.events["ok"]
    st = proc_status(d.proc.pid)
    fds = len(os.listdir("/proc/%d/fd" % d.proc.pid))
    stats = ctl_json(d, "stats") or {}
    s = stats.get("store", {})
    return {
        "t": round(now - load.t0, 1),
        "rate": (ok - ok_prev) / (now - t_prev) if now > t_prev else 0.0,
        "p50_ms": pct(lat, 0.50), "p99_ms": pct(lat, 0.99),
        "rss_anon_mb": st.get("RssAnon"), "rss_mb": st.get("VmRSS"), "threads": st.get("Threads"),
        "fds": fds,
        "map_used_mb": s.get("map_used", 0) / 1048576.0 if s else None,
        "disk_mb": disk_bytes(d.store) / 1048576.0,
        "claims": s.get("claims"), "stories": s.get("stories"), "queued": s.get("queued"),
        "load1": os.getloadavg()[0],
    }, now, ok


COLS = (("t", "t s", "%6.0f"), ("rate", "ok/s", "%6.1f"), ("p50_ms", "p50ms", "%6.2f"),
        ("p99_ms", "p99ms", "%6.2f"), ("rss_anon_mb", "anonMB", "%7.1f"),
        ("fds", "fds", "%4d"), ("threads", "thr", "%4d"), ("map_used_mb", "mapMB", "%7.1f"),
        ("disk_mb", "diskMB", "%7.1f"), ("claims", "claims", "%7d"), ("stories", "stories", "%7d"),
        ("queued", "queued", "%6d"), ("load1", "load", "%5.2f"))


def row_text(r):
    out = []
    for k, _, f in COLS:
        v = r.get(k)
        width = len(f % 0) if "d" in f else len(f % 0.0)
        out.append((f % v) if v is not None else "-".rjust(width))
    return " ".join(out)


def header_text():
    return " ".join(h.rjust(len(f % 0) if "d" in f else len(f % 0.0)) for _, h, f in COLS)


# ---------------------------------------------------------------- verdicts

def growth(rows, settle):
    """growth - per figure: middle and last half's means, the limit, the last half's
    slope per minute, and whether it passed"""
    seconds = rows[-1]["t"] if rows else 0
    warm = max(seconds / 3.0, settle)
    rest = [r for r in rows if r["t"] >= warm]
    mid_end = warm + (seconds - warm) / 2.0
    mid = [r for r in rest if r["t"] < mid_end]
    last = [r for r in rest if r["t"] >= mid_end]
    out = {"warm_s": warm, "mid": [warm, mid_end], "last": [mid_end, seconds]}
    for k, (rel, ab, unit) in LIMITS.items():
        a = [r[k] for r in mid if r.get(k) is not None]
        b = [r[k] for r in last if r.get(k) is not None]
        if len(a) < 3 or len(b) < 3:
            out[k] = {"ok": None, "why": "too few samples after the settling time"}
            continue
        ma, mb = statistics.mean(a), statistics.mean(b)
        limit = rel * ma + ab
        ts = [r["t"] for r in last if r.get(k) is not None]
        slope = 0.0
        if len(b) > 1 and max(ts) > min(ts):
            mt, mv = statistics.mean(ts), mb
            slope = (sum((x - mt) * (y - mv) for x, y in zip(ts, b))
                     / sum((x - mt) ** 2 for x in ts)) * 60
        out[k] = {"mid": ma, "last": mb, "limit": limit, "slope_per_min": slope,
                  "unit": unit, "ok": mb - ma <= limit}
    return out


def read_sink(sink):
    """read_sink - (deliveries {(QID, rcpt): n}, bounces {(QID, rcpt): n}, odd records)"""
    deliv, bounce, odd = {}, {}, []
    for n in sorted(os.listdir(sink.record_dir)):
        if not n.endswith(".json") or n.startswith("."):
            continue
        with open(os.path.join(sink.record_dir, n)) as f:
            r = json.load(f)
        if not r["accepted"]:
            continue
        data = base64.b64decode(r["data_b64"])
        rcpts = [x["addr"] for x in r["rcpts"]]
        if r["mail_from"] == "":
            text = data.decode("latin-1")
            m = re.search(r"X-Idemrelay-Queue-ID: (\S+)", text)
            for a in re.findall(r"Final-Recipient: rfc822; ?(\S+)", text):
                k = (m.group(1) if m else "?", a.strip("<>").lower())
                bounce[k] = bounce.get(k, 0) + 1
            continue
        qids = harness.received_qids(data)
        if len(qids) != 1:
            odd.append("%s: %d idemrelay Received headers" % (n, len(qids)))
            continue
        for a in rcpts:
            k = (qids[0], a.lower())
            deliv[k] = deliv.get(k, 0) + 1
    return deliv, bounce, odd


def check_deliveries(load, sink):
    """check_deliveries - every recipient of every 250 QID reached the sink once"""
    deliv, bounce, odd = read_sink(sink)
    lost, twice, bounced_wrong, gave_up, unknown = [], [], [], [], []
    expected = set()
    for qid, sub in load.by_qid.items():
        for a in sub["rcpts"]:
            k = (qid, a.lower())
            expected.add(k)
            got, b = deliv.get(k, 0), bounce.get(k, 0)
            if a.startswith("tempfail-"):
                if got or b != 1:
                    bounced_wrong.append("%s %s: delivered %d, bounced %d" % (qid, a, got, b))
            elif got + b == 0:
                lost.append("%s %s" % (qid, a))
            elif got + b > 1:
                twice.append("%s %s (delivered %d, bounced %d)" % (qid, a, got, b))
            elif b:
                # still deferred at give_up (a fail-first recipient whose third
                # attempt came late): bounced, the sender told; not a loss
                gave_up.append("%s %s" % (qid, a))
    for table in (deliv, bounce):
        for k, v in table.items():
            if k not in expected:
                unknown.append("%s %s (%d, %s)" % (k[0], k[1], v,
                                                   "bounce" if table is bounce else "delivery"))
    return {"deliveries": sum(deliv.values()), "bounces": sum(bounce.values()),
            "lost": lost, "twice": twice, "bounced_wrong": bounced_wrong,
            "gave_up": gave_up, "unknown": unknown, "odd": odd}


# ---------------------------------------------------------------- main

def main():
    if not os.access(harness.BIN, os.X_OK) or not os.access(CTL, os.X_OK):
        say("soak: %s or %s is missing: run make" % (harness.BIN, CTL))
        return 2
    tmp = tempfile.mkdtemp(prefix="idemrelay-soak-", dir=os.environ.get("SOAK_TMP", "/tmp"))
    t = harness.T("soak", tmp)
    settle = TTL + GIVE_UP + RETRY_MAX + 2 * EXPIRE_TICK
    seconds = MINUTES * 60
    info = {"minutes": MINUTES, "rate": RATE, "clients": CLIENTS, "size": SIZE, "key_ttl": TTL,
            "give_up": GIVE_UP, "retry": [RETRY_FIRST, RETRY_MAX], "settle_s": settle,
            "nproc": os.cpu_count(), "loadavg_start": os.getloadavg()[0], "tmp": tmp}
    r = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                       text=True)
    info["commit"] = r.stdout.strip()
    rows, verdict = [], {}
    try:
        sink = t.sink()
        d = t.daemon(sink, soak_conf(tmp))
        say("soak: %(minutes)g min at %(rate)g submissions/s from %(clients)d clients, "
            "%(size)d-byte messages, key_ttl %(key_ttl)ds, give_up %(give_up)ds, "
            "commit %(commit)s, load average %(loadavg_start).2f at the start" % info)
        if seconds / 3.0 < settle:
            say("soak: warning: a third of the run (%.0fs) is shorter than the settling "
                "time (%ds): the growth verdict has little to go on" % (seconds / 3.0, settle))
        say("soak: %s" % tmp)
        load = Load(d.port, seconds)
        threads = [threading.Thread(target=client, args=(load, i), daemon=True)
                   for i in range(CLIENTS)]
        for th in threads:
            th.start()
        say(header_text())
        t_prev, ok_prev = time.monotonic(), 0
        next_at = load.t0 + SAMPLE
        while any(th.is_alive() for th in threads):
            time.sleep(max(0.0, min(next_at, load.end + 60) - time.monotonic()))
            if time.monotonic() >= load.end + 120:
                load.problem("clients still running 120 s after the end: stopped waiting")
                break
            if time.monotonic() >= next_at and time.monotonic() <= load.end + SAMPLE / 2:
                row, t_prev, ok_prev = sample(d, load, t_prev, ok_prev)
                rows.append(row)
                say(row_text(row))
                next_at += SAMPLE
            if time.monotonic() > load.end:
                for th in threads:
                    th.join(1)
        check_alive = d.running()
        say("soak: load over; %d submissions sent, %d answered 250 (%d duplicates), "
            "%d sent again, %d errors; latest start behind schedule %.0f ms"
            % (load.events["sent"], load.events["ok"], load.events["dup"],
               load.events["retried"], load.events["errors"], load.lag * 1000))
        # the queue empties once the last tempfail recipient is past give_up
        t_drain = time.monotonic()
        left = None
        deadline = t_drain + GIVE_UP + 2 * RETRY_MAX + 120
        while time.monotonic() < deadline:
            s = (ctl_json(d, "stats") or {}).get("store", {})
            left = s.get("queued")
            if left == 0:
                break
            time.sleep(2)
        drained = time.monotonic() - t_drain
        time.sleep(1)
        verdict["queue_left"] = left
        verdict["drain_s"] = round(drained, 1)
        final, _, _ = sample(d, load, time.monotonic() - 1, load.events["ok"])
        verdict["after_drain"] = final
        verdict["deliveries"] = check_deliveries(load, sink)
        verdict["growth"] = growth(rows, settle)
        verdict["events"] = load.events
        verdict["problems"] = load.problems
        verdict["daemon_alive"] = check_alive and d.running()
        verdict["log_counts"] = {w.strip("]: "): len(d.log_lines(w)) for w in
                                 ("status=sent", "status=deferred", "status=bounced",
                                  "status=duplicate", "status=unconfirmed")}
        tiers = [l for l in d.log().splitlines()
                 if re.search(r"\]: (warning|error|fatal|panic): ", l)]
        verdict["log_counts"]["warnings and errors"] = len(tiers)
        verdict["log_tiers"] = tiers[:20]
    finally:
        t.cleanup()
        if os.environ.get("SOAK_KEEP"):
            say("soak: kept %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    info["loadavg_end"] = os.getloadavg()[0]
    return report(info, rows, verdict)


def report(info, rows, v):
    """report - the summary, the verdict, the JSON; the exit status"""
    fails = []
    dv = v["deliveries"]
    ev = v["events"]
    rates = [r["rate"] for r in rows[1:]] or [0.0]
    lat = [r["p99_ms"] for r in rows if r["p99_ms"] is not None]
    say("")
    say("soak summary (commit %s, %g min, target %g/s, load average %.2f at the start, "
        "%.2f at the end)" % (info["commit"], info["minutes"], info["rate"],
                              info["loadavg_start"], info["loadavg_end"]))
    say("  answered 250/s per interval: median %.1f, min %.1f; p99 of the dot per interval: "
        "median %.2f ms, max %.2f ms" % (statistics.median(rates), min(rates),
                                         statistics.median(lat) if lat else 0,
                                         max(lat) if lat else 0))
    say("  submissions %d (twins %d, sent again %d), answered 250 %d (duplicates %d), "
        "4xx %d, 5xx %d, client errors %d"
        % (ev["sent"], ev["twins"], ev["retried"], ev["ok"], ev["dup"], ev["4xx"], ev["5xx"],
           ev["errors"]))
    say("  at the sink %d deliveries, %d bounces; the queue held %s after the drain (%.0fs)"
        % (dv["deliveries"], dv["bounces"], v["queue_left"], v["drain_s"]))
    say("  daemon log: " + ", ".join("%s %d" % kv for kv in v["log_counts"].items()))
    for line in v["log_tiers"][:10]:
        say("      " + line)
    say("  other recipients bounced at give_up (not delivered within %ds of acceptance;"
        " the sender was told): %d" % (info["give_up"], len(dv["gave_up"])))
    for name, items in (("lost (250 but neither delivered nor bounced)", dv["lost"]),
                        ("delivered or bounced more than once", dv["twice"]),
                        ("tempfail recipient not bounced exactly once", dv["bounced_wrong"]),
                        ("at the sink, or bounced, under a QID no client got", dv["unknown"]),
                        ("sink records without one Received of ours", dv["odd"])):
        say("  %s: %d" % (name, len(items)))
        for x in items[:10]:
            say("      " + x)
        if items:
            fails.append("%d %s" % (len(items), name))
    wrong = ev.get("wrong", 0)
    if v["problems"]:
        say("  client problems: %d (first ones below)" % ev.get("problems", 0))
        for p in v["problems"][:10]:
            say("      " + p)
    if wrong:
        fails.append("%d wrong or refused replies" % wrong)
    if v["queue_left"] != 0:
        fails.append("queue not empty after the drain (%s)" % v["queue_left"])
    if not v["daemon_alive"]:
        fails.append("the daemon died")
    g = v["growth"]
    say("  growth: samples after %.0fs; middle half %.0f-%.0fs, last half %.0f-%.0fs"
        % (g["warm_s"], g["mid"][0], g["mid"][1], g["last"][0], g["last"][1]))
    for k in LIMITS:
        x = g[k]
        if x["ok"] is None:
            say("    %-12s %s" % (k, x["why"]))
            fails.append("%s: %s" % (k, x["why"]))
            continue
        say("    %-12s middle %8.1f  last %8.1f  growth %+7.1f%s (limit %.1f)  slope of the "
            "last half %+.2f%s/min  %s" % (k, x["mid"], x["last"], x["last"] - x["mid"],
                                           x["unit"], x["limit"], x["slope_per_min"], x["unit"],
                                           "ok" if x["ok"] else "GROWS"))
        if not x["ok"]:
            fails.append("%s keeps growing (%+.1f%s from the middle half to the last, limit %.1f)"
                         % (k, x["last"] - x["mid"], x["unit"], x["limit"]))
    if statistics.median(rates) < 0.9 * info["rate"]:
        say("  warning: the median rate %.1f/s is under 90%% of the target: the machine did not"
            " keep up" % statistics.median(rates))
    a = v["after_drain"]
    say("  after the drain: RssAnon %.1f MB, %d fds, map_used %.1f MB, disk %.1f MB, claims %s,"
        " stories %s" % (a["rss_anon_mb"], a["fds"], a["map_used_mb"] or 0, a["disk_mb"],
                         a["claims"], a["stories"]))
    verdict = "PASS" if not fails else "FAIL"
    say("soak: %s%s" % (verdict, "" if not fails else ": " + "; ".join(fails)))
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump({"info": info, "rows": rows, "verdict": verdict, "fails": fails,
                   "detail": v}, f, indent=1, default=str)
    say("soak: samples and verdict in %s" % OUT)
    return 0 if not fails else 1


if __name__ == "__main__":
    sys.exit(main())
