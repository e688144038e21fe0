"""
NAME
    harness - processes, clients and assertions for the end-to-end tests

DESCRIPTION
    Each test gets a T: a temporary directory, and methods that start the
    upstream sink (tests/e2e/sink.py) and the real bin/idemrelay with a
    generated libconfig file on free 127.0.0.1 ports. Everything a test
    starts is stopped when it ends; logs are printed when it fails.

    Clients: submit() speaks SMTP with smtplib as an application would;
    Raw is a socket client for protocol-level checks. Every wait has a
    deadline (wait_until).

    The store backend is E2E_STORE's ("lmdb", the default, or
    "postgresql"). On PostgreSQL every daemon of a test uses the test's own
    database (t.pg_url(), created on the run's cluster, E2E_PG_ADMIN) under
    a node name of its own, so one test can start several nodes on one
    database; t.pg_cluster() starts a private cluster (and standby) for a
    test that stops or kills the server, and t.pg_proxy() puts a TCP proxy
    (Proxy) between the daemons and the server for a test that cuts the
    network to it (proxy.cut(), proxy.heal()); t.pg_bouncer() puts PgBouncer
    there (pgcluster.Bouncer). A case says which backends it
    runs on (case(stores=LMDB_ONLY), PG_ONLY; both by default).
"""

import base64
import json
import os
import re
import select
import shutil
import signal
import smtplib
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BIN = os.environ.get("IDEMRELAY_BIN", os.path.join(REPO, "bin", "idemrelay"))
SINK = os.path.join(HERE, "sink.py")
POWERFS = os.environ.get("POWERFS_BIN", os.path.join(REPO, "build", "tests", "powerfs"))

sys.path.insert(0, os.path.join(REPO, "tests", "pg"))
import cluster as pgcluster  # noqa: E402

STORE = os.environ.get("E2E_STORE", "lmdb")     # the backend of this run's daemons
STORES = ("lmdb", "postgresql")
LMDB_ONLY = ("lmdb",)               # map, store files, powerfs: the embedded store's own
PG_ONLY = ("postgresql",)           # several nodes on one database
# the one date form idemrelay writes (util/clock.c): RFC 5322, UTC, the day in two digits
MAIL_DATE = (rb"(Mon|Tue|Wed|Thu|Fri|Sat|Sun), [0-9]{2} "
             rb"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [0-9]{4} "
             rb"[0-9]{2}:[0-9]{2}:[0-9]{2} \+0000")


def pg_lock_key(what, slot_sql=None):
    """pg_lock_key - SQL of store/pg's advisory lock key for what, on the
    schema of the session: "schema" (store_pg_int.h PG_SCHEMA_LOCK) or
    "node" with the slot's SQL (store_pg.c NODE_LOCK)"""
    name = "'idemrelay %s ' || coalesce(current_schema(), '')" % what
    if slot_sql is not None:
        name += " || ' ' || %s" % slot_sql
    return "hashtextextended(%s, 0)" % name


def pg_lock_row(key_sql, alias="l"):
    """pg_lock_row - SQL: pg_locks row alias is the bigint advisory lock key_sql
    in this database (classid the key's high 32 bits, objid its low ones)"""
    return ("{a}.locktype = 'advisory' AND {a}.objsubid = 1 AND {a}.database = (SELECT oid "
            "FROM pg_database WHERE datname = current_database()) AND (({a}.classid::bigint "
            "<< 32) | {a}.objid::bigint) = {k}").format(a=alias, k=key_sql)
PG_LEASE = "5s"                     # store.lease: short, so a dead node's mail moves soon
# the line a node logs once when it finds PostgreSQL unreachable (store_pg.c's note_down):
# not "(PostgreSQL unreachable)" in the line of a batch whose COMMIT's outcome it
# cannot read (store_pg_pend.c), which a cut in the middle of a commit adds
PG_OUTAGE = "store: PostgreSQL unreachable: "

SANITIZER_REPORTS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "WARNING: ThreadSanitizer")
QID_RE = re.compile(r"queued as ([0-9A-Z]{12,20})\b")
HOSTNAME = "idemrelay.test"


class Skip(Exception):
    """raised by a test that cannot run here"""


# ---------------------------------------------------------------- waiting

def read_text(path):
    """read_text - a log file as text ("" if it is not there yet)"""
    try:
        with open(path, "rb") as f:
            return f.read().decode("latin-1")
    except FileNotFoundError:
        return ""


def stop_process(proc, timeout=5, sig=signal.SIGTERM):
    """stop_process - signal a child and wait; SIGKILL after the timeout.
    True if it exited by itself in time (or had already)."""
    if proc is None or proc.poll() is not None:
        return True
    proc.send_signal(sig)
    try:
        proc.wait(timeout)
        return True
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return False


def wait_until(fn, timeout=15.0, what="condition", interval=0.05):
    """wait_until - poll fn until it returns something truthy; fail at the deadline"""
    return pgcluster.wait_until(fn, timeout, what, interval, AssertionError)


def port_open(port, host="127.0.0.1"):
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


free_port = pgcluster.free_port


# ---------------------------------------------------------------- assertions

def eq(got, want, what=""):
    if got != want:
        raise AssertionError("%s: got %r, want %r" % (what or "value", got, want))


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def qid_of(reply_text, what="reply"):
    """qid_of - the QID in a '250 ... queued as QID' reply text"""
    if isinstance(reply_text, bytes):
        reply_text = reply_text.decode("latin-1")
    m = QID_RE.search(reply_text)
    check(m, "%s has no 'queued as QID' (QID = 12-20 of [0-9A-Z]): %r" % (what, reply_text))
    return m.group(1)


def expect_reply(reply, code, enhanced=None, what="reply"):
    """expect_reply - (code, text) has this code and starts with this enhanced status"""
    c, text = reply
    if isinstance(text, bytes):
        text = text.decode("latin-1")
    check(c == code, "%s: got %d %r, want %d %s" % (what, c, text, code, enhanced or ""))
    if enhanced:
        check(text.startswith(enhanced),
              "%s: got %d %r, want enhanced status %s" % (what, c, text, enhanced))
    return text


def bare_eols(data):
    """bare_eols - positions of CR not followed by LF and LF not preceded by CR"""
    bad = []
    for i, b in enumerate(data):
        if b == 13 and (i + 1 >= len(data) or data[i + 1] != 10):
            bad.append(i)
        elif b == 10 and (i == 0 or data[i - 1] != 13):
            bad.append(i)
    return bad


# ---------------------------------------------------------------- messages

def recv_line(s):
    """recv_line - one line from socket s, read a byte at a time (nothing past
    it is taken), its newline kept; what came before EOF if none"""
    line = b""
    while not line.endswith(b"\n"):
        got = s.recv(1)
        if not got:
            break
        line += got
    return line


def make_msg(key=None, subject="test", body="Hello.\r\n", msgid=None,
             date="Mon, 01 Jan 2024 00:00:00 +0000", frm="sender@example.org",
             to="rcpt@example.com", extra=(), key_header="X-Idempotency-Key"):
    """make_msg - a small RFC 5322 message as CRLF bytes"""
    h = ["From: <%s>" % frm, "To: <%s>" % to, "Subject: %s" % subject]
    if date:
        h.append("Date: %s" % date)
    if msgid:
        h.append("Message-ID: %s" % msgid)
    if key is not None:
        h.append("%s: %s" % (key_header, key))
    h.extend(extra)
    h.append("MIME-Version: 1.0")
    if isinstance(body, str):
        body = body.encode()
    return ("\r\n".join(h) + "\r\n\r\n").encode() + body


def header_fields(data):
    """header_fields - (list of (name, raw field bytes incl. folding), body)"""
    i = data.find(b"\r\n\r\n")
    if i < 0:
        head, body = data, b""
    else:
        head, body = data[:i + 2], data[i + 4:]
    fields = []
    for line in head.split(b"\r\n")[:-1] if head.endswith(b"\r\n") else head.split(b"\r\n"):
        if line[:1] in (b" ", b"\t") and fields:
            fields[-1] = (fields[-1][0], fields[-1][1] + b"\r\n" + line)
        else:
            fields.append((line.split(b":", 1)[0].strip().lower().decode("latin-1"), line))
    return fields, body


def received_qids(data):
    """received_qids - QIDs named in Received: ... (idemrelay) ... headers"""
    out = []
    for name, raw in header_fields(data)[0]:
        if name == "received" and b"(idemrelay)" in raw:
            out.extend(m.decode() for m in re.findall(rb"\bid\s+([0-9A-Z]{12,20})\b", raw))
    return out


def check_relayed(got, sent, qid, strip=("x-idempotency-key", "idempotency-key")):
    """check_relayed - got == sent, byte for byte, plus one Received (idemrelay) with qid,
    minus key headers"""
    gf, gbody = header_fields(got)
    sf, sbody = header_fields(sent)
    ours = [f for f in gf if f[0] == "received" and b"(idemrelay)" in f[1]]
    check(len(ours) == 1, "want exactly one Received: ... (idemrelay) header, got %d in %r"
          % (len(ours), got[:600]))
    rcv = ours[0][1].decode("latin-1")
    check(qid in rcv, "Received header lacks the QID %s: %r" % (qid, rcv))
    check(HOSTNAME in rcv, "Received header lacks 'by %s': %r" % (HOSTNAME, rcv))
    check(re.search(rb"; " + MAIL_DATE + rb"$", ours[0][1]),
          "Received header's date is not the RFC 5322 form: %r" % rcv)
    for name in strip:
        check(not any(f[0] == name for f in gf), "key header %s was relayed" % name)
    rest = [f[1] for f in gf if f is not ours[0]]
    want = [f[1] for f in sf if f[0] not in strip]
    if rest != want:
        raise AssertionError("relayed header block differs:\n got  %r\n want %r" % (rest, want))
    if gbody != sbody:
        raise AssertionError("relayed body differs:\n got  %r\n want %r" % (gbody[:400], sbody[:400]))
    # and byte for byte: nothing added, dropped or moved (an empty line, say)
    rest = got.replace(ours[0][1] + b"\r\n", b"", 1)
    for f in sf:
        if f[0] in strip:
            sent = sent.replace(f[1] + b"\r\n", b"", 1)
    if rest != sent:
        raise AssertionError("relayed bytes differ:\n got  %r\n want %r" % (rest[:600], sent[:600]))


# ---------------------------------------------------------------- config

def render_value(v, ind=""):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, dict):
        inner = ind + "  "
        items = "".join("%s%s = %s;\n" % (inner, k, render_value(x, inner))
                        for k, x in v.items())
        return "{\n" + items + ind + "}"
    if isinstance(v, (list, tuple)):
        if v and all(isinstance(x, dict) for x in v):
            return "( " + ", ".join(render_value(x, ind) for x in v) + " )"
        return "[ " + ", ".join(render_value(x, ind) for x in v) + " ]"
    raise TypeError("cannot render %r" % (v,))


def render_conf(conf):
    """render_conf - a dict as libconfig text"""
    return "".join("%s = %s;\n" % (k, render_value(v)) for k, v in conf.items())


DELETE = object()


def merge(base, over):
    """merge - deep-merge over into a copy of base; DELETE removes a setting"""
    out = dict(base)
    for k, v in over.items():
        if v is DELETE:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out


# ---------------------------------------------------------------- processes

def read_ready_line(proc, timeout, what):
    """read_ready_line - the first stdout line of a child, within a deadline"""
    deadline = time.monotonic() + timeout
    buf = b""
    fd = proc.stdout.fileno()
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError("%s did not start within %.0fs" % (what, timeout))
        r, _, _ = select.select([fd], [], [], left)
        if r:
            chunk = os.read(fd, 4096)
            if not chunk:
                raise AssertionError("%s exited at start (rc=%s)" % (what, proc.wait()))
            buf += chunk
    return buf.split(b"\n", 1)[0].decode()


class Sink:
    """The upstream sink subprocess, its record directory and control file."""

    def __init__(self, t, name):
        self.t = t
        self.dir = os.path.join(t.tmp, name)
        os.makedirs(self.dir)
        self.record_dir = os.path.join(self.dir, "records")
        self.control_path = os.path.join(self.dir, "control.json")
        self.events_path = os.path.join(self.dir, "events.jsonl")
        self.log_path = os.path.join(self.dir, "sink.log")
        self.proc = None
        self.port = None

    def start(self, port=0):
        logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, SINK, "--port", str(port or self.port or 0),
             "--record", self.record_dir, "--control", self.control_path,
             "--events", self.events_path],
            stdout=subprocess.PIPE, stderr=logf, stdin=subprocess.DEVNULL)
        logf.close()
        line = read_ready_line(self.proc, 10, "sink")
        self.port = int(line.split()[-1])
        return self

    def stop(self):
        stop_process(self.proc)
        if self.proc and self.proc.stdout:
            self.proc.stdout.close()

    def control(self, **ctl):
        """control - rewrite the control file atomically (greeting=421, rcpt={}, default=spec)"""
        tmp = self.control_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(ctl, f)
        os.rename(tmp, self.control_path)

    def records(self):
        """records - every message the sink read completely, in arrival order"""
        out = []
        try:
            names = sorted(n for n in os.listdir(self.record_dir) if n.endswith(".json")
                           and not n.startswith("."))
        except FileNotFoundError:
            return out
        for n in names:
            with open(os.path.join(self.record_dir, n)) as f:
                r = json.load(f)
            r["data"] = base64.b64decode(r["data_b64"])
            r["to"] = [x["addr"] for x in r["rcpts"]]
            out.append(r)
        return out

    def accepted(self, pred=None):
        """accepted - records the sink took (2xx, or read fully and dropped)"""
        return [r for r in self.records() if r["accepted"] and (pred is None or pred(r))]

    def wait_count(self, n, pred=None, timeout=15, what=None):
        """wait_count - wait until at least n accepted records match; return them"""
        return wait_until(lambda: (lambda rs: rs if len(rs) >= n else None)(self.accepted(pred)),
                          timeout, what or "%d message(s) at the sink" % n)

    def events(self, ev=None):
        out = []
        try:
            with open(self.events_path) as f:
                for line in f:
                    e = json.loads(line)
                    if ev is None or e["ev"] == ev:
                        out.append(e)
        except FileNotFoundError:
            pass
        return out

    def rcpt_attempts(self, addr):
        return [e for e in self.events("rcpt") if e["addr"] == addr]

    def log(self):
        return read_text(self.log_path)


def store_conf(path=None, pg_url=None):
    """store_conf - the store section: LMDB at path, or PostgreSQL at pg_url"""
    if pg_url:
        return {"backend": "postgresql", "url": pg_url, "lease": PG_LEASE, "key_ttl": "1h"}
    return {"path": path, "map_size": "64M", "key_ttl": "1h"}


def base_conf(store, port, sink_port, pg_url=None, node=None):
    """base_conf - a daemon's config; on PostgreSQL (pg_url) as node"""
    conf = {
        "hostname": HOSTNAME,
        "listen": [{"address": "127.0.0.1", "port": port}],
        "access": {"networks": ["127.0.0.0/8"]},
        "store": store_conf(store, pg_url),
        "keys": {"headers": ["X-Idempotency-Key", "Idempotency-Key"]},
        "upstream": {"host": "127.0.0.1", "port": sink_port, "tls": "none",
                     "connections": 2, "timeout": "5s", "ambiguous": "assume-delivered"},
        "retry": {"first": "1s", "max": "2s", "give_up": "1h"},
        "limits": {"message_size": "10M", "recipients": 100,
                   "command_timeout": "60s", "data_timeout": "60s"},
        "log": {"level": "info", "target": "stderr"},
    }
    if pg_url:
        conf["node"] = node
    return conf


class Daemon:
    """bin/idemrelay with a generated config, on a free port, logging to a file.
    On PostgreSQL it is node `node` (default: its directory's name) on the
    test's database (or the store.url conf gives)."""

    def __init__(self, t, name, sink, conf, node=None):
        self.t = t
        self.dir = os.path.join(t.tmp, name)
        os.makedirs(self.dir)
        self.backend = t.store
        self.store = os.path.join(self.dir, "store") if self.backend == "lmdb" else None
        self.node = (node or name) if self.backend == "postgresql" else None
        self.port = free_port()
        self.conf_path = os.path.join(self.dir, "idemrelay.conf")
        self.log_path = os.path.join(self.dir, "idemrelay.log")
        sink_port = sink.port if sink else free_port()
        pg_url = None
        if self.backend == "postgresql":
            given = (conf or {}).get("store", {})
            pg_url = given["url"] if isinstance(given, dict) and "url" in given else t.pg_url()
        self.conf = merge(base_conf(self.store, self.port, sink_port, pg_url, self.node),
                          conf or {})
        with open(self.conf_path, "w") as f:
            f.write(render_conf(self.conf))
        self.proc = None
        self.runs = 0
        self.stopped = False        # did the test end the process on purpose?
        self.env = {}               # variables added to the test's environment for it

    def start(self, timeout=None):
        """start - run it and wait until it has started: it listens, and, when it
        logs at info level to the file, it has said "started:" (it listens before
        it opens the store, which on PostgreSQL takes a while: a client connecting
        in between would wait). timeout: 10 s, 30 s on PostgreSQL."""
        check(os.access(BIN, os.X_OK), "%s is missing: run make first" % BIN)
        timeout = timeout or (30 if self.backend == "postgresql" else 10)
        self.runs += 1
        self.stopped = False
        with open(self.log_path, "ab") as logf:
            logf.write(b"=== e2e: start #%d ===\n" % self.runs)
            logf.flush()
            offset = logf.tell()
            self.proc = subprocess.Popen([BIN, "-c", self.conf_path], cwd=self.dir,
                                         env=dict(os.environ, **self.env) if self.env else None,
                                         stdin=subprocess.DEVNULL, stdout=logf, stderr=logf)
        log = self.conf.get("log", {})
        says = log.get("target", "stderr") == "stderr" and log.get("level", "info") in ("info", "debug")
        started = "idemrelay/master[%d]: started: " % self.proc.pid
        deadline = time.monotonic() + timeout
        self.probes = 0         # connections made to see it listen: a limit may count them
        while not self.probe() or (says and started not in self.log()[offset:]):
            rc = self.proc.poll()
            if rc is not None:
                raise AssertionError("idemrelay exited at start with %d" % rc)
            if time.monotonic() > deadline:
                raise AssertionError("idemrelay did not %s within %ds" % (
                    "listen on %d" % self.port if not port_open(self.port) else "log started:",
                    timeout))
            time.sleep(0.05)
        return self

    def probe(self):
        """probe - is the port open: a connection, counted in self.probes"""
        if not port_open(self.port):
            return False
        self.probes += 1
        return True

    def kill9(self):
        self.stopped = True
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self, sig=signal.SIGTERM, timeout=10):
        """stop - signal and wait; SIGKILL after the timeout. Returns the exit status."""
        if self.proc is None:
            return None
        self.stopped = True
        if not stop_process(self.proc, timeout, sig):
            raise AssertionError("idemrelay did not exit within %ds of signal %d" % (timeout, sig))
        return self.proc.returncode

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def log(self):
        return read_text(self.log_path)

    def log_lines(self, *words):
        """log_lines - lines containing every one of words"""
        return [l for l in self.log().splitlines() if all(w in l for w in words)]

    def wait_log(self, *words, timeout=15):
        return wait_until(lambda: self.log_lines(*words), timeout,
                          "a daemon log line with %s" % " ".join(words))


class PowerFS:
    """tests/powerfs: a FUSE mount over a backing directory that keeps unsynced
    writes in memory. cut() is a power cut (what was not synced is gone);
    fail_next_sync() makes the next fsync/fdatasync fail with EIO. Needs root
    and /dev/fuse: without them the test fails, it is never skipped."""

    def __init__(self, t, name):
        self.dir = os.path.join(t.tmp, name)
        self.backing = os.path.join(self.dir, "disk")
        self.mnt = os.path.join(self.dir, "mnt")
        self.log_path = os.path.join(self.dir, "powerfs.log")
        os.makedirs(self.backing)
        os.makedirs(self.mnt)
        self.proc = None
        self.cuts = 0

    def mount(self, timeout=10):
        check(os.access(POWERFS, os.X_OK), "%s is missing: run make first" % POWERFS)
        check(os.path.exists("/dev/fuse"), "/dev/fuse is missing: the power-cut tests need FUSE")
        check(os.geteuid() == 0, "the power-cut tests mount a FUSE file system: run them as root")
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen([POWERFS, self.backing, self.mnt], stdin=subprocess.DEVNULL,
                                         stdout=logf, stderr=logf)
        wait_until(lambda: os.path.ismount(self.mnt) or self.proc.poll() is not None, timeout,
                   "powerfs mounted on %s" % self.mnt)
        check(self.proc.poll() is None, "powerfs exited at start with %s (see %s)"
              % (self.proc.returncode, self.log_path))
        return self

    def _detach(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        # a dead FUSE mount fails stat (ENOTCONN), so ismount() cannot tell: always try
        run(["umount", "-l", self.mnt], timeout=10)

    def cut(self):
        """cut - the power goes: powerfs dies with what it held, the mount is
        detached and a new powerfs serves what was synced. Kill the daemon first."""
        self.cuts += 1
        self._detach()
        self.mount()

    def _arm(self, sig, said):
        """_arm - signal powerfs and wait until it says it is armed: on a loaded
        machine a sync on another of its threads could otherwise come first"""
        n = self.log().count(said)
        os.kill(self.proc.pid, sig)
        wait_until(lambda: self.log().count(said) > n, 10, "powerfs to say %r" % said)

    def fail_next_sync(self):
        self._arm(signal.SIGUSR1, "powerfs: armed: the next sync fails")

    def die(self):
        """die - the next sync writes its data yet fails, and every later one
        fails, until cut()"""
        self._arm(signal.SIGUSR2, "powerfs: armed: the disk dies at the next sync")

    def log(self):
        return read_text(self.log_path)


class Proxy:
    """A TCP proxy on 127.0.0.1 in front of a server's port (PostgreSQL's), for an
    outage of the network between a daemon and its database without touching
    the server. cut(): every connection through it is dropped at once (shut down, then reset;
    mid-transaction as it may be), and new ones are black-holed: accepted and
    never forwarded nor answered, as by a server that took the connection and
    hangs (the client's connect_timeout ends them); with refuse=True, new ones
    are reset at once instead; with hold=True they wait, unanswered, for heal().
    heal(): new connections go through again; the black-holed ones are reset,
    the held ones forwarded (a client that connected during the cut reaches
    the server late, once the cut is over). cut_after(pattern): the next time a client sends
    bytes containing pattern, they reach the server, its replies from then on
    do not reach the client, and a moment later everything is cut: a request
    (a COMMIT) that the server carried out and whose outcome the client never
    learns. The daemon prepares its statements (a connection sends a text once,
    in a Parse message, then binds its name), so the proxy learns each
    connection's statement names and their texts, and a Bind of a statement
    whose text holds pattern fires too. Counts: accepted, forwarded, dropped,
    held_total, triggered.

    Two more cuts, for a partition rather than a reset (the nemesis,
    tests/pg/nemesis.py, draws them all): cut(freeze=True) drops nothing: the
    connections stay open and nothing moves either way (nothing read, so nothing
    acknowledged past what the kernel's buffers take), new ones are held, and
    heal() lets everything that waited through, unless an end came first.
    cut(drain=s) stops the server's replies first, passes what the client
    still sends for s seconds, then resets: whatever the proxy's TCP
    acknowledged reached the server, so a client's view of what arrived (an
    acknowledged final dot, SPEC 5) is the server's, as without a proxy.
    cut_after(..., lines=N) lets N more lines of the server's replies through
    first (an SMTP server's pipelined replies). Any TCP server's: t.proxy(port),
    t.pg_proxy() for PostgreSQL."""

    # the frontend's Parse (name, text) and Bind (unnamed portal, statement name) messages
    PARSE = re.compile(rb"P....([^\x00]+)\x00([^\x00]*)\x00", re.S)
    BIND = re.compile(rb"B....\x00([^\x00]+)\x00", re.S)

    def __init__(self, target_port):
        self.target = target_port
        self.prepared = {}              # pair -> {statement name: its text}
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(128)
        self.lsock.settimeout(0.2)      # the accept loop sees close() in time
        self.port = self.lsock.getsockname()[1]
        self.lock = threading.Lock()
        self.mode = "pass"              # pass, blackhole, hold, refuse
        self.pairs = {}                 # (client, server) -> pumps still running
        self.held = []
        self.accepted = self.forwarded = self.dropped = self.held_total = 0
        self.trigger = None             # (pattern, delay, refuse, hold, lines) of cut_after()
        self.muted = False              # the server's replies are dropped
        self.lines_left = 0             # ... but for so many lines (cut_after)
        self.flowing = threading.Event()    # clear while a cut(freeze=True) lasts
        self.flowing.set()
        self.replies = threading.Event()    # clear: the server's replies wait (cut_after freeze)
        self.replies.set()
        self.triggered = 0
        self.fired_with = None          # the client's bytes that fired the trigger last
        self.closing = False
        self.th = threading.Thread(target=self._accept_loop, daemon=True)
        self.th.start()

    def url_of(self, url):
        """url_of - a libpq URL of the target's with this proxy's port instead"""
        old = "127.0.0.1:%d/" % self.target
        check(old in url, "%s does not name 127.0.0.1:%d" % (url, self.target))
        return url.replace(old, "127.0.0.1:%d/" % self.port)

    @staticmethod
    def _port(sock):
        """_port - a socket's own port, or None once it is closed"""
        try:
            return sock.getsockname()[1]
        except OSError:
            return None

    @staticmethod
    def _reset(sock):
        """_reset - close with an RST (SO_LINGER 0), not a FIN"""
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        sock.close()

    def _accept_loop(self):
        while not self.closing:
            try:
                c, _ = self.lsock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            c.settimeout(None)
            with self.lock:
                self.accepted += 1
                mode = self.mode
                if mode in ("blackhole", "hold"):
                    self.held.append(c)
                    self.held_total += 1
            if mode == "refuse":
                self._reset(c)
            elif mode == "pass":
                self._forward(c)

    def _forward(self, c):
        try:
            s = socket.create_connection(("127.0.0.1", self.target), timeout=5)
        except OSError:
            self._reset(c)
            return
        s.settimeout(None)
        for x in (c, s):
            x.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pair = (c, s)
        with self.lock:
            if self.mode != "pass":     # cut while we connected
                self._reset(c)
                self._reset(s)
                return
            self.pairs[pair] = 2
            self.forwarded += 1
        for src, dst in ((c, s), (s, c)):
            threading.Thread(target=self._pump, args=(src, dst, pair), daemon=True).start()

    def _pump(self, src, dst, pair):
        """_pump - one direction; the last of a pair's two pumps closes its sockets
        (a socket closed under another thread's recv could be reused meanwhile)"""
        upward = src is pair[0]
        eof = False
        while True:
            try:
                self.flowing.wait()     # frozen: nothing read, nothing acknowledged
                data = src.recv(65536)
                if not data:
                    eof = True
                    break
                self.flowing.wait()     # frozen after the read: it waits here
                if not upward:
                    self.replies.wait()
                if upward:
                    # the trigger fires before its bytes go on, so that the
                    # server's reply to them cannot pass the mute (it did
                    # once, under load, when this thread lost the CPU
                    # between the send and the fire)
                    self._watch(data, pair)
                if upward or not self.muted:
                    dst.sendall(data)
                elif self.lines_left > 0:
                    dst.sendall(self._let_through(data))
            except OSError:
                break
        if eof:     # a half close, passed on: the other side may still answer
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            end = time.monotonic() + 5
            while time.monotonic() < end and self.pairs.get(pair) == 2:
                time.sleep(0.05)
        for x in pair:                  # wake the other direction
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        with self.lock:
            self.pairs[pair] -= 1
            last = self.pairs[pair] == 0
            if last:
                del self.pairs[pair]
                self.prepared.pop(pair, None)
        if last:
            for x in pair:
                self._reset(x)

    def _watch(self, data, pair):
        """_watch - the client's bytes: the statements it prepares by name, and
        the trigger's pattern in them or in a prepared statement they run"""
        names = self.prepared.setdefault(pair, {})
        for m in self.PARSE.finditer(data):
            names[m.group(1)] = m.group(2)
        trigger = self.trigger
        if trigger and (trigger[0] in data or any(
                trigger[0] in names.get(m.group(1), b"")
                for m in self.BIND.finditer(data))):
            self._fire(data)

    def cut_after(self, pattern, delay=0.5, refuse=False, hold=False, lines=0, freeze=False):
        """cut_after - arm the trigger (see the class): pattern as bytes; the cut
        (cut(refuse, hold)) comes delay seconds after the bytes went through;
        lines more lines of the server's reach the client before its replies stop.
        freeze: the server's replies wait instead of being dropped, and the cut is
        cut(freeze=True): heal() lets them through, late (a reply held up)"""
        self.trigger = (pattern, delay, refuse, hold, lines, freeze)

    def _let_through(self, data):
        """_let_through - the part of the server's bytes that the trigger's lines
        still let through (the rest is dropped)"""
        out = b""
        while self.lines_left > 0 and data:
            i = data.find(b"\n")
            if i < 0:
                return out + data
            out, data = out + data[:i + 1], data[i + 1:]
            self.lines_left -= 1
        return out

    def _fire(self, data):
        with self.lock:
            if self.trigger is None:
                return
            self.fired_with = data
            _, delay, refuse, hold, lines, freeze = self.trigger
            self.lines_left = lines
            self.trigger = None
            if freeze:
                self.replies.clear()
            else:
                self.muted = True
            self.triggered += 1

        def later():
            time.sleep(delay)
            self.cut(refuse, hold, freeze)
            self.muted = False
        threading.Thread(target=later, daemon=True).start()

    def cut(self, refuse=False, hold=False, freeze=False, drain=0, spare=None):
        """cut - drop every connection now and black-hole (refuse, hold) new ones;
        how many were dropped. freeze: drop none and move nothing, hold new ones;
        drain: the replies stop first, the rest drop drain seconds later (see
        the class); spare: the port the server sees as the client's
        (pg_stat_activity's client_port) of one connection left as it is"""
        with self.lock:
            self.mode = "refuse" if refuse else "hold" if hold or freeze else "blackhole"
            if freeze:
                self.flowing.clear()
                return 0
        if drain:
            self.muted = True
            time.sleep(drain)
        with self.lock:
            pairs = [p for p in self.pairs if spare is None or self._port(p[1]) != spare]
            self.dropped += len(pairs)
        for pair in pairs:
            for x in pair:
                try:
                    x.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    x.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        if drain:
            self.muted = False
        return len(pairs)

    def heal(self):
        """heal - forward new connections again; reset the black-holed ones,
        forward the held ones"""
        with self.lock:
            forward = self.mode == "hold"
            self.mode = "pass"
            self.flowing.set()
            self.replies.set()
            held, self.held = self.held, []
        for c in held:
            if forward:
                self._forward(c)
            else:
                self._reset(c)

    def close(self):
        self.closing = True
        self.th.join(5)
        self.lsock.close()
        self.cut(refuse=True)
        self.heal()


class T:
    """One test's resources: tmp dir, sinks, daemons; cleaned up at the end."""

    def __init__(self, name, tmp, store=None):
        self.name = name
        self.tmp = tmp
        self.store = store or STORE
        self.sinks = []
        self.daemons = []
        self.extra_logs = []
        self.pg_clusters = []           # private clusters, destroyed at cleanup
        self.pg_dbs = []                # names of this test's databases on the run's cluster
        self._pg_shared = None
        self._pg_url = None
        self.proxies = []
        self.bouncers = []              # PgBouncers (pg_bouncer()), stopped at cleanup

    def sink(self, **control):
        s = Sink(self, "sink%d" % len(self.sinks))
        if control:
            s.control(**control)
        self.sinks.append(s)
        return s.start()

    def powerfs(self):
        """powerfs - a mounted tests/powerfs, detached at cleanup"""
        fs = PowerFS(self, "powerfs%d" % len(self.__dict__.setdefault("mounts", [])))
        self.mounts.append(fs)
        self.extra_logs.append(("powerfs log", fs.log_path))
        return fs.mount()

    def daemon(self, sink=None, conf=None, start=True, node=None):
        d = Daemon(self, "daemon%d" % len(self.daemons), sink, conf, node)
        self.daemons.append(d)
        return d.start() if start else d

    def pg_shared(self):
        """pg_shared - the run's cluster (run.py starts it, E2E_PG_ADMIN names it);
        a private one when this test runs alone"""
        if self._pg_shared is None:
            admin = os.environ.get("E2E_PG_ADMIN")
            if admin:
                self._pg_shared = pgcluster.attach(admin, os.environ.get("E2E_PG_LOG"))
            else:
                self._pg_shared = self.pg_cluster()
        return self._pg_shared

    def pg_database(self, server=None):
        """pg_database - a fresh database on server (default: the run's cluster); its URL"""
        url = (server or self.pg_shared()).new_database(self.name[5:] or "t")
        self.pg_dbs.append(url.rsplit("/", 1)[1])
        return url

    def pg_url(self):
        """pg_url - the test's database, made on first use; every daemon of the test
        shares it unless its conf names another store.url"""
        if self._pg_url is None:
            self._pg_url = self.pg_database()
        return self._pg_url

    def pg_cluster(self, standby=False):
        """pg_cluster - a private cluster for a test that stops, kills or fails over
        the server (with a synchronous standby if asked: cluster.standbys[0]).
        Its directory is noted in the test's tmp so that run.py can kill what a
        dead test process left running."""
        c = pgcluster.Cluster()
        self.pg_clusters.append(c)
        with open(os.path.join(self.tmp, "pg-clusters"), "a") as f:
            f.write(c.base + "\n")
        c.start()
        self.extra_logs.append(("postgresql log %s" % c.name, c.log_path))
        if standby:
            sb = c.add_standby()
            self.extra_logs.append(("postgresql log %s" % sb.name, sb.log_path))
        return c

    def pg_proxy(self, server=None):
        """pg_proxy - a Proxy in front of server (default: the run's cluster), closed
        at cleanup; proxy.url_of(t.pg_url()) reaches the test's database through it"""
        return self.proxy((server or self.pg_shared()).port)

    def proxy(self, port):
        """proxy - a Proxy in front of 127.0.0.1:port (a sink's), closed at cleanup"""
        p = Proxy(port)
        self.proxies.append(p)
        return p

    def pg_bouncer(self, server=None, pool_mode="session", **settings):
        """pg_bouncer - PgBouncer (pgcluster.Bouncer) in front of server (default:
        the run's cluster) in pool_mode, started; stopped at cleanup.
        pb.url_of(t.pg_url()) reaches the test's database through it."""
        pb = pgcluster.Bouncer(server or self.pg_shared(), pool_mode, **settings)
        self.bouncers.append(pb)
        if pb.owned_base:
            with open(os.path.join(self.tmp, "pg-clusters"), "a") as f:
                f.write(pb.base + "\n")
        self.extra_logs.append(("pgbouncer log", pb.log_path))
        return pb.start()

    def finish(self):
        """finish - after a passing test: each daemon still alive (none died on
        its own), exits 0 on SIGTERM, and no sanitizer reported anything"""
        problems = []
        for d in self.daemons:
            if d.proc is None:
                continue
            if d.proc.poll() is not None and not d.stopped:
                problems.append("idemrelay (%s) died during the test with status %d"
                                % (d.dir, d.proc.returncode))
            elif d.proc.poll() is None:
                try:
                    rc = d.stop(signal.SIGTERM, 15)
                except AssertionError as e:
                    problems.append(str(e))
                    continue
                if rc != 0:
                    problems.append("idemrelay (%s) exited %d after SIGTERM" % (d.dir, rc))
        logs = [d.log_path for d in self.daemons] + [path for _, path in self.extra_logs]
        for path in logs:
            try:
                with open(path, "rb") as f:
                    text = f.read().decode("latin-1")
            except OSError:
                continue
            for pat in SANITIZER_REPORTS:
                if pat in text:
                    problems.append("%r in %s" % (pat, path))
        if problems:
            raise AssertionError("after the test:\n  " + "\n  ".join(problems))

    def cleanup(self):
        for d in self.daemons:
            try:
                if d.running():
                    d.stop(signal.SIGKILL, 5)
            except Exception:
                pass
        for s in self.sinks:
            s.stop()
        for fs in getattr(self, "mounts", []):
            try:
                fs._detach()
            except Exception:
                pass
        for p in self.proxies:
            try:
                p.close()
            except Exception:
                pass
        for pb in self.bouncers:
            try:
                pb.destroy()
            except Exception:
                pass
        for c in self.pg_clusters:
            try:
                c.destroy()
            except Exception:
                pass

    def dump_logs(self, out, tail=150):
        for d in self.daemons:
            lines = d.log().splitlines()
            out.write("--- daemon log %s (last %d of %d lines) ---\n"
                      % (d.log_path, min(tail, len(lines)), len(lines)))
            out.write("\n".join(lines[-tail:]) + "\n")
        for s in self.sinks:
            lines = s.log().splitlines()
            out.write("--- sink log %s (last %d of %d lines) ---\n"
                      % (s.log_path, min(tail // 2, len(lines)), len(lines)))
            out.write("\n".join(lines[-(tail // 2):]) + "\n")
        for title, path in self.extra_logs:
            try:
                with open(path, "rb") as f:
                    text = f.read().decode("latin-1")
            except OSError:
                continue
            out.write("--- %s (%s) ---\n%s\n" % (title, path, text[-8000:]))
        if self._pg_shared is not None and self._pg_shared not in self.pg_clusters:
            for db in self.pg_dbs:       # the run's cluster logs the database (%d)
                out.write(self._pg_shared.log_tail(40, " %s " % db) + "\n")


def standalone(name, store, seed, keep, body):
    """A seeded runner outside run.py (tests/pg/nemesis.py,
    tests/powerfs/powercut.py): body(t) on a test of its own on store, its
    logs' tails printed if a check fails, its directory kept then or with
    keep. 0 when every check held, else 1."""
    global STORE
    tmp = tempfile.mkdtemp(prefix="%s-%d-" % (name, seed), dir=os.environ.get("E2E_TMP"))
    STORE = store
    t = T("test_" + name, tmp, store=store)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    rc = 1
    try:
        body(t)
        t.finish()
        rc = 0
    except AssertionError as e:
        print("FAILED: %s" % e)
    finally:
        if rc != 0:
            t.dump_logs(sys.stdout, tail=60)
        t.cleanup()
    if rc == 0 and not keep:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print("%s: the run's directory: %s" % (name, tmp))
    print("%s: %s (seed %d)" % (name, "passed" if rc == 0 else "FAILED", seed))
    return rc


# ---------------------------------------------------------------- clients

class Result:
    """What a submission saw: replies to MAIL, each RCPT, and DATA."""

    def __init__(self):
        self.mail = None
        self.rcpts = []
        self.data = None

    @property
    def code(self):
        return self.data[0] if self.data else None

    @property
    def text(self):
        return self.data[1].decode("latin-1") if self.data else ""

    @property
    def qid(self):
        return qid_of(self.text)

    def __repr__(self):
        return "Result(mail=%r, rcpts=%r, data=%r)" % (self.mail, self.rcpts, self.data)


def submit(port, to, msg, sender="sender@example.org", mail_opts=(), rcpt_opts=(),
           timeout=20, smtp=None):
    """submit - one message with smtplib, as an application does. Raises on
    a failed MAIL; DATA is sent when at least one RCPT was accepted."""
    if isinstance(to, str):
        to = [to]
    own = smtp is None
    s = smtp or smtplib.SMTP("127.0.0.1", port, timeout=timeout)
    try:
        if own:
            s.ehlo("client.test")
        r = Result()
        r.mail = s.mail(sender, list(mail_opts))
        if r.mail[0] != 250:
            s.rset()
            return r
        for a in to:
            r.rcpts.append(s.rcpt(a, list(rcpt_opts)))
        if any(c == 250 for c, _ in r.rcpts):
            r.data = s.data(msg)
        else:
            s.rset()
        return r
    finally:
        if own:
            try:
                s.quit()
            except Exception:
                s.close()


def submit_ok(port, to, msg, **kw):
    """submit_ok - submit and insist on 250 queued as QID; returns the QID"""
    r = submit(port, to, msg, **kw)
    check(r.data is not None, "message not sent: %r" % r)
    expect_reply(r.data, 250, "2.0.0", "end of DATA")
    return r.qid


class Raw:
    """A raw socket SMTP client for protocol-level checks."""

    def __init__(self, port, timeout=10, greet=True, sockopts=()):
        """sockopts: (level, option, value) each set before the connect (SO_RCVBUF
        sizes the window the SYN offers)"""
        if sockopts:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            for level, opt, value in sockopts:
                self.sock.setsockopt(level, opt, value)
            self.sock.settimeout(timeout)
            try:
                self.sock.connect(("127.0.0.1", port))
            except OSError:
                self.sock.close()
                raise
        else:
            self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""
        self.greeting = self.reply() if greet else None

    def readline(self):
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("connection closed by server (pending %r)" % self.buf)
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.rstrip(b"\r").decode("latin-1")

    def reply(self):
        """reply - one (possibly multi-line) reply as (code, text); lines joined by \\n"""
        lines = []
        while True:
            line = self.readline()
            lines.append(line)
            if len(line) < 4 or line[3] != "-":
                break
        try:
            code = int(lines[0][:3])
        except ValueError:
            raise AssertionError("not an SMTP reply: %r" % lines)
        return code, "\n".join(l[4:] for l in lines)

    def send(self, data):
        if isinstance(data, str):
            data = data.encode()
        self.sock.sendall(data)

    def cmd(self, line):
        self.send(line + "\r\n")
        return self.reply()

    def rest(self, timeout=2.0):
        """rest - everything the server sends until it closes or stays quiet"""
        self.sock.settimeout(timeout)
        out = self.buf
        self.buf = b""
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                out += chunk
        except (socket.timeout, ConnectionError):
            pass
        return out.decode("latin-1")

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


def run(cmd, timeout=30, **kw):
    """run - a command with a deadline; returns CompletedProcess with text output"""
    return subprocess.run(cmd, capture_output=True, timeout=timeout, text=True,
                          errors="replace", stdin=subprocess.DEVNULL, **kw)


# ---------------------------------------------------------------- registry

CASES = {}


def case(timeout=90, needs_daemon=True, stores=STORES):
    """case - register a test function f(t); run.py runs each in its own process,
    when E2E_STORE is one of its stores (LMDB_ONLY, PG_ONLY; both by default)"""
    def reg(fn):
        check(fn.__name__.startswith("test_"), "test names start with test_")
        check(fn.__name__ not in CASES, "duplicate test name %s" % fn.__name__)
        check(all(s in STORES for s in stores), "stores of %s: %r" % (fn.__name__, stores))
        fn.timeout = timeout
        fn.needs_daemon = needs_daemon
        fn.stores = tuple(stores)
        CASES[fn.__name__] = fn
        return fn
    return reg
