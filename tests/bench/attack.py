#!/usr/bin/env python3
"""
NAME
    attack.py - one hostile address against idemrelay and Postfix: is
    everyone else still served? (issue 30)

SYNOPSIS
    make bench-attack
    ATTACK_SECS=15 ATTACK_ONLY=noop,auth ATTACK_SERVERS=idemrelay make bench-attack

DESCRIPTION
    Starts, for each attack and each server, a fresh submission server on
    127.0.0.1 (STARTTLS required, AUTH required, nobody on loopback but
    127.0.0.1 itself exempt, defaults otherwise) relaying to an smtp-sink:

      idemrelay   bin/idemrelay, its LMDB store in a temporary directory,
                  a self-signed P-256 certificate, a users file of one $6$
                  hash (openssl passwd -6), access.networks 127.0.0.1/32;
      Postfix     tests/postfix/postfix.sh (Debian's Postfix, its defaults)
                  with the same certificate, smtpd_tls_security_level =
                  encrypt, smtpd_tls_auth_only, Cyrus SASL on a sasldb
                  (saslpasswd2), PLAIN and LOGIN, mynetworks 127.0.0.1/32.

    Then it runs one attack from 127.0.0.2 while a legitimate client on
    127.0.0.3 starts a submission every 0.5 s (connect, EHLO, STARTTLS,
    EHLO, AUTH PLAIN, MAIL, RCPT, DATA, a 190-octet message): the first
    RAMP seconds of the attack alone, then the legitimate client until the
    attack's time is up, then the attack stops once the last legitimate
    session has ended (each has LEGIT_TIMEOUT seconds). The attacks, each
    the one of issue 30's table:

      none    no attack: the legitimate client alone, for comparison
      noop    up to 1,000 connections, each sending NOOP every 0.5 s once
              greeted; every one the server closes is opened again (at
              most 200 new connections a second)
      ffdhe   10 times a second, a connection that says EHLO and STARTTLS
              and then sends a TLS 1.3 ClientHello offering only
              ffdhe8192, recorded once from `openssl s_client -groups
              ffdhe8192 -tls1_3 -starttls smtp` and replayed as octets (so
              that the attacker spends no CPU on its own key share); what
              the server answers (ServerHello or alert) and how long it
              took are recorded
      noread  200 connections that never read: half send bare newlines,
              half "EHLO attacker.test" lines, as fast as the kernel takes
              them (a 4 KB receive buffer, so replies back up at once);
              every one closed is opened again
      auth    200 threads, each in a loop: connect, STARTTLS, then AUTH
              PLAIN as the real user with a wrong 300-octet password until
              the server closes the session

    For each run it prints and stores (ATTACK_OUT, JSON): the legitimate
    client's sessions (served, failed, p50 and max of connect-to-250-after-
    the-dot), the server's CPU seconds over the attack (user + system of
    every process, and for Postfix the children its master reaped meanwhile),
    its memory at the start and at its peak (sampled every 0.25 s: RSS of
    idemrelay; for Postfix the sum of its processes' RSS and of their PSS,
    the latter not counting shared pages twice, and how many processes),
    and the attacker's own counters.

    Nothing leaves 127.0.0.0/8; every run is bounded (about ATTACK_SECS +
    LEGIT_TIMEOUT seconds at most) and everything started is stopped.

ENVIRONMENT
    ATTACK_SECS     seconds of each attack (default 25)
    ATTACK_ONLY     comma-separated attacks (default none,noop,ffdhe,noread,auth)
    ATTACK_SERVERS  comma-separated servers (default idemrelay,postfix)
    ATTACK_OUT      results as JSON (default build/bench/attack.json)
    BENCH_TMP       where the temporary directory goes (default /tmp)
    IDEMRELAY_BIN   the daemon (default bin/idemrelay)

    Needs root (Postfix), Debian's postfix package, sasl2-bin
    (saslpasswd2) and libsasl2-modules (PLAIN, LOGIN), and the openssl
    command. Not part of `make test`.
"""

import base64
import json
import os
import random
import re
import selectors
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (the servers, the sink, the machine's description)
from bench import say  # noqa: E402

ATTACKER = "127.0.0.2"
LEGIT = "127.0.0.3"
SECS = float(os.environ.get("ATTACK_SECS", "25"))
ATTACKS = ["none", "noop", "ffdhe", "noread", "auth"]
ONLY = [a for a in os.environ.get("ATTACK_ONLY", ",".join(ATTACKS)).split(",") if a]
SERVERS = [s for s in os.environ.get("ATTACK_SERVERS", "idemrelay,postfix").split(",") if s]
OUT = os.path.abspath(os.environ.get("ATTACK_OUT", os.path.join(bench.REPO, "build", "bench",
                                                                 "attack.json")))
RAMP = 3.0              # seconds of attack before the legitimate client starts
EVERY = 0.5             # the legitimate client's cadence, and the NOOP flood's
LEGIT_TIMEOUT = 20.0    # one legitimate session's deadline
USER, PASSWORD = bench.SUBMIT_USER, bench.SUBMIT_PASSWORD


class SmtpError(Exception):
    pass


class Smtp:
    """Smtp - the client side of one session, blocking, under one deadline"""

    def __init__(self, port, source, deadline):
        self.deadline = deadline
        self.buf = b""
        self.sock = socket.socket()
        try:
            self.sock.bind((source, 0))
            self.settle()
            self.sock.connect(("127.0.0.1", port))
        except BaseException:
            self.sock.close()
            raise

    def settle(self):
        """settle - the socket's timeout: what is left of the deadline"""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline")
        self.sock.settimeout(left)

    def reply(self):
        """reply - (code, lines) of the next reply"""
        lines = []
        while True:
            while b"\n" not in self.buf:
                self.settle()
                d = self.sock.recv(65536)
                if not d:
                    raise SmtpError("closed%s" % (" after %r" % lines[-1] if lines else ""))
                self.buf += d
            line, _, self.buf = self.buf.partition(b"\n")
            lines.append(line.rstrip(b"\r").decode("latin-1"))
            if line[3:4] != b"-":
                head = lines[-1][:3]
                return (int(head) if head.isdigit() else 0), lines

    def cmd(self, line, want=None):
        self.settle()
        self.sock.sendall(line + b"\r\n")
        code, lines = self.reply()
        if want is not None and code != want:
            raise SmtpError("%s: %s" % (line[:12].decode("latin-1"), lines[-1][:80]))
        return code, lines

    def starttls(self, ctx):
        self.cmd(b"STARTTLS", 220)
        self.settle()
        self.sock = ctx.wrap_socket(self.sock)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def client_ctx():
    """client_ctx - TLS as a mail client does it, the self-signed certificate taken"""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def plain(user, password):
    return base64.b64encode(b"\0" + user.encode() + b"\0" + password.encode())


# ---------------------------------------------------------------- the legitimate client

def submit(port, ctx, n):
    """submit - one submission from LEGIT; (seconds from connect to the 250
    after the dot, None) or (None, what went wrong)"""
    t0 = time.monotonic()
    c = None
    stage = "connect"
    try:
        c = Smtp(port, LEGIT, t0 + LEGIT_TIMEOUT)
        stage = "greeting"
        code, lines = c.reply()
        if code != 220:
            raise SmtpError("greeting: %s" % lines[-1][:80])
        stage = "EHLO, STARTTLS"
        c.cmd(b"EHLO legit.test", 250)
        c.starttls(ctx)
        stage = "EHLO after TLS"
        c.cmd(b"EHLO legit.test", 250)
        stage = "AUTH"
        c.cmd(b"AUTH PLAIN " + plain(USER, PASSWORD), 235)
        stage = "the transaction"
        c.cmd(b"MAIL FROM:<legit@example.org>", 250)
        c.cmd(b"RCPT TO:<rcpt@example.com>", 250)
        c.cmd(b"DATA", 354)
        msg = ("From: <legit@example.org>\r\nTo: <rcpt@example.com>\r\n"
               "Message-ID: <attack-%d-%d-%d@legit.test>\r\nSubject: still served?\r\n\r\n"
               % (os.getpid(), port, n)) + "x" * 64 + "\r\n"
        c.cmd(msg.encode() + b".", 250)
        took = time.monotonic() - t0
        try:
            c.cmd(b"QUIT")
        except (OSError, SmtpError):
            pass
        return took, None
    except (OSError, SmtpError) as e:
        return None, ("at %s: %s: %s" % (stage, type(e).__name__, e))[:100]
    finally:
        if c:
            c.close()


def legit_run(port, secs):
    """legit_run - a submission started every EVERY seconds for secs, each in a
    thread of its own (a stalled one does not hold up the next); every
    result once the last has ended"""
    ctx = client_ctx()
    out = []
    lock = threading.Lock()

    def one(i):
        r = submit(port, ctx, i)
        with lock:
            out.append(r)

    threads = []
    t0 = time.monotonic()
    i = 0
    while time.monotonic() - t0 < secs:
        th = threading.Thread(target=one, args=(i,), daemon=True)
        th.start()
        threads.append(th)
        i += 1
        time.sleep(max(0.0, t0 + i * EVERY - time.monotonic()))
    for th in threads:
        th.join(LEGIT_TIMEOUT + 5)
    return out


# ---------------------------------------------------------------- the server's processes

def proc_mem(pid):
    """proc_mem - (RSS, PSS) in KB, or None once gone"""
    out = {}
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("Rss", "Pss"):
                    out[k] = int(v.split()[0])
    except OSError:
        return None
    return out.get("Rss", 0), out.get("Pss", 0)


class Procs:
    """Procs - a server's processes: idemrelay's one, or Postfix's master and
    its children"""

    def __init__(self, root, tree):
        self.root = root
        self.tree = tree

    def pids(self):
        if not self.tree:
            return [self.root]
        kids = []
        for e in os.listdir("/proc"):
            if e.isdigit():
                st = bench.proc_stat(int(e))
                if st and st[0] == self.root:
                    kids.append(int(e))
        return [self.root] + kids

    def cpu(self):
        """cpu - seconds of CPU so far: every live process's own, and what the
        root has reaped (a Postfix smtpd that exited)"""
        return bench.tree_cpu(self.root) if self.tree else bench.proc_cpu(self.root)

    def mem(self):
        """mem - (RSS MB, PSS MB, processes)"""
        rss = pss = k = 0
        for pid in self.pids():
            m = proc_mem(pid)
            if m:
                rss, pss, k = rss + m[0], pss + m[1], k + 1
        return rss / 1024, pss / 1024, k


class Sampler(threading.Thread):
    """Sampler - the peak of a server's memory, every 0.25 s until stopped"""

    def __init__(self, procs):
        super().__init__(daemon=True)
        self.procs = procs
        self.peak = (0, 0, 0)
        self.halt = threading.Event()

    def run(self):
        while not self.halt.is_set():
            m = self.procs.mem()
            self.peak = tuple(max(a, b) for a, b in zip(self.peak, m))
            self.halt.wait(0.25)


# ---------------------------------------------------------------- attacks

class Attack(threading.Thread):
    """Attack - a thread that attacks port from ATTACKER until stopped; counts"""

    name = "none"

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port = port
        self.halt = threading.Event()
        self.counts = {}
        self.lock = threading.Lock()

    def count(self, what, k=1):
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + k

    def run(self):
        self.halt.wait()

    def stop(self):
        self.halt.set()
        self.join(30)

    def summary(self):
        return dict(self.counts)


def attacker_socket(rcvbuf=None):
    """attacker_socket - a non-blocking socket bound to ATTACKER"""
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((ATTACKER, 0))
    s.setblocking(False)
    return s


class Flood(Attack):
    """Flood - up to n connections at once, each one closed opened again (at
    most reopen a second); what each does is the subclass's"""

    n = 1000
    reopen = 200
    rcvbuf = None
    events = selectors.EVENT_READ

    def __init__(self, port):
        super().__init__(port)
        self.sel = selectors.DefaultSelector()
        self.conns = {}
        self.held = []          # samples: connections greeted (or, not reading, open)

    def open_one(self, i):
        s = attacker_socket(self.rcvbuf)
        s.connect_ex(("127.0.0.1", self.port))
        self.conns[s] = {"i": i, "greeted": False, "next": 0.0, "first": None}
        self.sel.register(s, self.events)
        self.count("connections opened")

    def drop(self, s, why):
        st = self.conns.pop(s)
        self.sel.unregister(s)
        s.close()
        self.count(why(st) if callable(why) else why)

    def run(self):
        budget, last, opened, sample = 0.0, time.monotonic(), 0, 0.0
        try:
            while not self.halt.is_set():
                now = time.monotonic()
                budget = min(self.reopen / 10.0, budget + (now - last) * self.reopen)
                last = now
                while len(self.conns) < self.n and budget >= 1:
                    self.open_one(opened)
                    opened += 1
                    budget -= 1
                for key, ev in self.sel.select(0.02):
                    if key.fileobj in self.conns:
                        self.event(key.fileobj, ev, now)
                self.tick(now)
                if now >= sample:
                    self.held.append(self.holding())
                    sample = now + 0.5
        finally:
            for s in list(self.conns):
                s.close()
            self.sel.close()

    def holding(self):
        return sum(1 for st in self.conns.values() if st["greeted"])

    def tick(self, now):
        pass

    def summary(self):
        out = super().summary()
        if self.held:
            out["held at once: median"] = statistics.median(self.held)
            out["held at once: max"] = max(self.held)
        return out


def fate(st):
    """fate - how a connection the server closed had gone"""
    if st["greeted"]:
        return "closed by the server after its 220"
    if st["first"]:
        return "refused: %s" % st["first"][:60]
    return "closed before any reply"


class NoopFlood(Flood):
    """1,000 connections, each NOOP every 0.5 s once greeted"""

    name = "noop"

    def event(self, s, ev, now):
        st = self.conns[s]
        try:
            d = s.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            d = b""
        if not d:
            self.drop(s, fate)
            return
        if not st["greeted"]:
            st["first"] = d.split(b"\r\n")[0].decode("latin-1")
            if d.startswith(b"220"):
                st["greeted"] = True
                st["next"] = now + random.random() * EVERY
            return
        self.count("NOOP replies 250", d.count(b"250 "))
        other = d.count(b"\r\n") - d.count(b"250 ")
        if other:
            self.count("other replies", other)

    def tick(self, now):
        for s, st in list(self.conns.items()):
            if st["greeted"] and st["next"] <= now:
                st["next"] += EVERY
                try:
                    s.send(b"NOOP\r\n")
                    self.count("NOOPs sent")
                except (BlockingIOError, InterruptedError):
                    self.count("NOOPs not sent (buffer full)")
                except OSError:
                    self.drop(s, fate)


class NoReadFlood(Flood):
    """200 connections that write and never read (half bare newlines, half EHLO)"""

    name = "noread"
    n = 200
    reopen = 100
    rcvbuf = 4096
    events = selectors.EVENT_WRITE
    CHUNKS = (b"\n" * 8192, b"EHLO attacker.test\r\n" * 400)

    def holding(self):
        return len(self.conns)

    def event(self, s, ev, now):
        st = self.conns[s]
        try:
            k = s.send(self.CHUNKS[st["i"] % 2])
            self.count("octets sent", k)
            st["greeted"] = True        # connected and taking our octets
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as e:
            self.drop(s, "closed by the server (%s)" % type(e).__name__)


class FfdheReplay(Attack):
    """ClientHellos offering only ffdhe8192, replayed 10 a second"""

    name = "ffdhe"
    rate = 10
    concurrent = 100

    def __init__(self, port, hello):
        super().__init__(port)
        self.hello = hello
        self.answer_ms = []

    def one(self):
        c = None
        try:
            c = Smtp(self.port, ATTACKER, time.monotonic() + 15)
            code, lines = c.reply()
            if code != 220:
                self.count("refused: %s" % lines[-1][:60])
                return
            c.cmd(b"EHLO attacker.test", 250)
            c.cmd(b"STARTTLS", 220)
            t = time.monotonic()
            c.sock.sendall(self.hello)
            c.settle()
            d = c.sock.recv(5)
            ms = (time.monotonic() - t) * 1000
            if d[:1] == b"\x16":
                self.count("answered with a handshake record (ServerHello)")
            elif d[:1] == b"\x15":
                self.count("answered with an alert")
            else:
                self.count("closed without a TLS record")
            with self.lock:
                self.answer_ms.append(ms)
        except (OSError, SmtpError) as e:
            self.count("failed: %s" % type(e).__name__)
        finally:
            if c:
                c.close()

    def run(self):
        live = []
        t0 = time.monotonic()
        i = 0
        while not self.halt.is_set():
            live = [th for th in live if th.is_alive()]
            if len(live) < self.concurrent:
                th = threading.Thread(target=self.one, daemon=True)
                th.start()
                live.append(th)
                self.count("hellos sent")
            else:
                self.count("not sent (100 outstanding)")
            i += 1
            self.halt.wait(max(0.0, t0 + i / self.rate - time.monotonic()))
        for th in live:
            th.join(16)

    def summary(self):
        out = super().summary()
        if self.answer_ms:
            ms = self.answer_ms
            out["server's answer to the hello: p50 ms"] = round(statistics.median(ms), 2)
            out["server's answer to the hello: max ms"] = round(max(ms), 2)
        return out


class AuthFlood(Attack):
    """200 threads: STARTTLS, then wrong 300-octet passwords until closed"""

    name = "auth"
    threads = 200

    def __init__(self, port):
        super().__init__(port)
        self.bad = b"AUTH PLAIN " + plain(USER, "w" * 300)
        self.ms = []

    def worker(self):
        ctx = client_ctx()
        while not self.halt.is_set():
            c = None
            try:
                c = Smtp(self.port, ATTACKER, time.monotonic() + 20)
                code, lines = c.reply()
                if code != 220:
                    self.count("refused: %s" % lines[-1][:60])
                    self.halt.wait(0.2)
                    continue
                c.cmd(b"EHLO attacker.test", 250)
                c.starttls(ctx)
                c.cmd(b"EHLO attacker.test", 250)
                while not self.halt.is_set():
                    t = time.monotonic()
                    code, lines = c.cmd(self.bad)
                    with self.lock:
                        self.ms.append((time.monotonic() - t) * 1000)
                    self.count("AUTH answered %d" % code)
                    if code == 421:
                        break
            except (OSError, SmtpError) as e:
                self.count("sessions ended: %s" % type(e).__name__)
            finally:
                if c:
                    c.close()

    def run(self):
        ths = [threading.Thread(target=self.worker, daemon=True) for _ in range(self.threads)]
        for th in ths:
            th.start()
        self.halt.wait()
        for th in ths:
            th.join(21)

    def summary(self):
        out = super().summary()
        if self.ms:
            out["AUTH reply: p50 ms"] = round(statistics.median(self.ms), 1)
            out["AUTH reply: max ms"] = round(max(self.ms), 1)
        return out


def capture_hello():
    """capture_hello - the ClientHello `openssl s_client -groups ffdhe8192
    -tls1_3 -starttls smtp` sends, recorded by a fake server on loopback"""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(15)
    p = subprocess.Popen(["openssl", "s_client", "-connect", "127.0.0.1:%d" % srv.getsockname()[1],
                          "-starttls", "smtp", "-groups", "ffdhe8192", "-tls1_3"],
                         stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        c, _ = srv.accept()
        c.settimeout(15)
        f = c.makefile("rb")
        c.sendall(b"220 capture ESMTP\r\n")
        f.readline()                                    # EHLO
        c.sendall(b"250-capture\r\n250 STARTTLS\r\n")
        f.readline()                                    # STARTTLS
        c.sendall(b"220 go ahead\r\n")
        head = f.read(5)
        body = f.read(int.from_bytes(head[3:5], "big"))
        c.close()
    finally:
        srv.close()
        p.kill()
        p.wait()
    if head[:1] != b"\x16" or body[:1] != b"\x01":
        raise RuntimeError("s_client sent no ClientHello: %r" % (head + body[:8]))
    return head + body


# ---------------------------------------------------------------- servers

def start(kind, d, sink, crt, key, users, sasl):
    """start - a server of kind in directory d: (server, Procs)"""
    if kind == "postfix":
        pf = bench.postfix_submission(d, sink, crt, key, sasl)
        with open(os.path.join(pf.dir, "queue", "pid", "master.pid")) as f:
            return pf, Procs(int(f.read().strip()), True)
    ir = bench.idemrelay_submission(d, sink, crt, key, users)
    return ir, Procs(ir.proc.pid, False)


def warnings(path):
    """warnings - the log's warning lines, numbers and addresses made alike,
    with how many times each"""
    out = {}
    try:
        with open(path, errors="replace") as f:
            for line in f:
                if "warning:" in line:
                    w = re.sub(r"\d+", "N", line.split("warning:", 1)[1].strip())[:90]
                    out[w] = out.get(w, 0) + 1
    except OSError:
        pass
    return dict(sorted(out.items(), key=lambda kv: -kv[1])[:6])


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else None


def run_one(tmp, kind, name, files, hello):
    """run_one - one attack against one fresh server; a dict of figures"""
    d = os.path.join(tmp, "%s-%s" % (name, kind))
    os.makedirs(d)
    os.chmod(d, 0o755)
    sink = bench.Sink(d, "sink")
    srv = None
    try:
        srv, procs = start(kind, d, sink, *files)
        warm = submit(srv.port, client_ctx(), -1)     # not counted: the first AUTH, a cold server
        if warm[0] is None:
            raise RuntimeError("%s: the legitimate client is not served even alone: %s"
                               % (kind, warm[1]))
        mem0 = procs.mem()
        attack = {"none": Attack, "noop": NoopFlood, "noread": NoReadFlood,
                  "auth": AuthFlood}.get(name)
        attack = attack(srv.port) if attack else FfdheReplay(srv.port, hello)
        sampler = Sampler(procs)
        cpu0, t0 = procs.cpu(), time.monotonic()
        sampler.start()
        attack.start()
        time.sleep(RAMP)
        res = legit_run(srv.port, SECS - RAMP)
        attack.stop()
        cpu1, t1 = procs.cpu(), time.monotonic()
        sampler.halt.set()
        sampler.join()
        ok = [x for x, _ in res if x is not None]
        errs = {}
        for _, e in res:
            if e:
                errs[e] = errs.get(e, 0) + 1
        return {"server": kind, "attack": name, "sessions": len(res), "served": len(ok),
                "p50_ms": statistics.median(ok) * 1000 if ok else None,
                "p90_ms": pct(ok, 0.9) * 1000 if ok else None,
                "max_ms": max(ok) * 1000 if ok else None,
                "failures": errs, "cpu_s": cpu1 - cpu0, "secs": t1 - t0,
                "mem_start": mem0, "mem_peak": sampler.peak, "attacker": attack.summary(),
                "warnings": warnings(os.path.join(srv.dir, "maillog") if kind == "postfix"
                                     else srv.log)}
    finally:
        if srv:
            srv.stop()
        sink.stop()


def fmt_ms(x):
    return "–" if x is None else ("%.0f" % x if x >= 100 else "%.1f" % x)


def row(r):
    mem = ("%.1f" % r["mem_peak"][0] if r["server"] == "idemrelay"
           else "%.0f (PSS %.0f, %d procs)" % r["mem_peak"])
    return ("| %s | %s | %d/%d | %s | %s | %s | %s | %.2f (%.0f%%) |"
            % (r["attack"], "idemrelay" if r["server"] == "idemrelay" else "Postfix",
               r["served"], r["sessions"], fmt_ms(r["p50_ms"]), fmt_ms(r["p90_ms"]),
               fmt_ms(r["max_ms"]), mem, r["cpu_s"], 100 * r["cpu_s"] / r["secs"]))


def main():
    if os.geteuid() != 0:
        sys.exit("attack: run as root (the private Postfix instance needs it)")
    for prog in ("openssl", "saslpasswd2"):
        if not shutil.which(prog):
            sys.exit("attack: %s is missing: apt-get install -y openssl sasl2-bin" % prog)
    if "idemrelay" in SERVERS and not os.access(bench.IDEMRELAY, os.X_OK):
        sys.exit("attack: %s is missing: run make" % bench.IDEMRELAY)
    for a in ONLY:
        if a not in ATTACKS:
            sys.exit("attack: no attack %r (%s)" % (a, ", ".join(ATTACKS)))
    tmp = tempfile.mkdtemp(prefix="idemrelay-attack-", dir=os.environ.get("BENCH_TMP", "/tmp"))
    os.chmod(tmp, 0o755)
    info = bench.machine()
    say("attack: %(nproc)s cores (%(cpu)s), %(mem_gb)s GB, Postfix %(postfix)s, commit %(commit)s,"
        " load average %(loadavg_start).2f" % info)
    results = []
    try:
        files = bench.make_cert(tmp) + bench.make_users(tmp)
        hello = capture_hello() if "ffdhe" in ONLY else None
        for name in ONLY:
            for kind in SERVERS:
                say("attack: %s against %s (%gs)" % (name, kind, SECS))
                r = run_one(tmp, kind, name, files, hello)
                results.append(r)
                say("  " + row(r))
                say("  failures: %s" % (r["failures"] or "none"))
                say("  attacker: %s" % r["attacker"])
                say("  warnings logged: %s" % (r["warnings"] or "none"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    info["loadavg_end"] = os.getloadavg()[0]
    say("")
    say("| attack | server | served | p50 ms | p90 ms | max ms | peak RSS MB | CPU s |")
    say("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        say(row(r))
    say("(load average %.2f at the start, %.2f at the end)"
        % (info["loadavg_start"], info["loadavg_end"]))
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump({"machine": info, "secs": SECS, "results": results}, f, indent=1)
    say("attack: results in %s" % OUT)


if __name__ == "__main__":
    main()
