#!/usr/bin/env python3
"""
NAME
    bench.py - idemrelay against Postfix on this machine, side by side (issue 4)

SYNOPSIS
    make bench
    BENCH_SCALE=0.2 BENCH_ROUNDS=3 BENCH_ONLY=fresh,dup make bench

DESCRIPTION
    In one run on one machine, starts
      - a private Postfix (tests/postfix/postfix.sh, Debian's Postfix with
        its defaults, relaying to an smtp-sink),
      - idemrelay (bin/idemrelay, default durable settings, its LMDB store
        in a temporary directory on local disk, relaying to another
        smtp-sink),
      - with BENCH_PG (issue 14), a private PostgreSQL cluster
        (tests/pg/cluster.py, tests/bench/pgbench_nodes.py) and on it
        pg1, one idemrelay node with store.backend = "postgresql", and
        pg2, two nodes sharing another database, each relaying to a
        sink of their own setup,
    and drives both with the same load, alternating Postfix and idemrelay
    (A B A B ...) over BENCH_ROUNDS rounds (default 3). Prints the median
    of each figure, the idemrelay/Postfix ratio and the issue's target:

      fresh     accepted/s, smtp-source -s 20 -l 2000 -m N (unique Message-IDs)
      e2e       the same load, accepted and delivered to the sink, msgs/s
      dup       duplicates answered/s (every key claimed) vs Postfix's
                accept rate of the same load (tests/bench/load -k replay),
                and the CPU a duplicate answered (Postfix: a message of the
                same load accepted and delivered, its master and daemons)
      latency   one session, fresh messages: p50/p99 of the reply to the dot
      idle      idemrelay RSS with 1,000 idle connections
      claims    accept rate with 1k vs BENCH_CLAIMS (default 10M x scale)
                claims in the store (filled by tests/bench/fill); bytes/claim
      big       100 KB messages, 20 sessions: MB/s accepted
      grown     one session's p50 on a new LMDB store and on an old one
                (issue 27 target 2): BENCH_GROWN messages (default
                1,000,000 x scale) put into it by tests/bench/fill -a as a
                daemon leaves them (claims, stories and their expiry
                entries, live for the default 24 h), then 20 sessions of
                fresh messages through its daemon, which leave the free
                pages a backlog leaves; each daemon with a sink of its own,
                the rounds alternating; with both trees' depth and the free
                list (mdb_stat)
      pggrown   pg1's one-session p50 after BENCH_PG_GROWN messages (default
                100,000 x scale; issue 27 target 3 asks for 100,000) accepted
                by 20 sessions and delivered through its node, beside the
                new database's (the latency figure) and Postfix's; with
                PostgreSQL's counters of that run (where the time goes,
                "pg1 grown": WAL, full-page writes of an old index)
      tls       STARTTLS + AUTH PLAIN, a new connection per message, 20
                at once (how PHPMailer, nodemailer or Django submit on
                port 587): msgs/s accepted, both servers requiring both
                with the same ECDSA P-256 certificate (TLS 1.3), Postfix
                with Cyrus SASL on a sasldb, idemrelay with a users file
                of one $6$ hash; tests/bench/load -T -A from 127.0.0.3,
                every handshake a full one (issue 27); Postfix with
                smtpd_peername_lookup = no (127.0.0.3 has no name here,
                and the failed lookup cost Postfix ~35 ms a session).
                Also the CPU a message of each server (until its round
                is delivered) and of the client

      burst     issue 29: a burst of 5,000 x scale messages (smtp-source -s 20)
                into a provider that allows 100 a second and answers
                "421 4.7.0" beyond (tests/e2e/sink.py, its "rate"): the
                seconds until the last one reached it and the refusals it
                sent, for idemrelay with upstream.rate = 100, idemrelay
                without it (its throttling feedback alone), and Postfix
                (tests/postfix/postfix.sh: its concurrency feedback and
                1-2 s retries; its default_destination_rate_delay takes
                whole seconds, so 100 a second cannot be set). One round
    With PostgreSQL, issue 27's capacity model (pgbench_nodes.capacity():
    what a fresh message costs PostgreSQL, the rate one primary of N cores
    with a synchronous standby sustains and what stops it, checked against
    pg1's and pg2's runs here). Last, issue 27's five targets
    (tests/bench/targets.py), each with the
    figure measured, its threshold and MET / NOT MET, headed by the disk's
    floor; a target whose figure this run did not make says "not measured".

    pg1 takes part in fresh, e2e, dup and latency beside Postfix and
    LMDB (the same load, in the same rounds); pg2 in fresh and e2e, the
    load split across its two nodes (two smtp-source runs of half the
    sessions and messages at once). Then "where the time goes": one more
    run of each figure per setup, alone, between settled snapshots of
    PostgreSQL's own counters (WAL records and flushes, commits, rows,
    statements with their execution and planning time), printed per
    message and per accepting batch, with the CPU each message cost the
    nodes and PostgreSQL and what the busy backends waited for
    (pg_stat_activity, sampled); the same for one session on a
    third node, pg1-stalled, whose upstream never answers (the accepting
    path without delivery beside it); and pgbench's floors on the same
    cluster (a round trip, a one-row durable commit).

    Between measurements the benchmark waits until the server under test
    has delivered everything it accepted, so that every round starts
    from an empty queue.

ENVIRONMENT
    BENCH_SCALE     multiplies every message count (default 1: about 7 min on 2 cores)
    BENCH_ROUNDS    rounds per figure (default 5)
    BENCH_ONLY      comma-separated figures to run (default all); "pg" adds
                    the PostgreSQL setups to fresh, dup and latency, so
                    BENCH_ONLY=pg alone runs those figures on PostgreSQL
                    only (no ratio to Postfix or LMDB then), and
                    BENCH_ONLY=pg,fresh,dup,latency everything issue 14 asks
    BENCH_PG=0      no PostgreSQL setups (default 1: they run when
                    PostgreSQL's server programs are installed)
    BENCH_CLAIMS    claims in the large store (default 10,000,000 x scale)
    BENCH_GROWN     messages in the old store of the grown figure (default
                    1,000,000 x scale; the target asks for 1,000,000)
    BENCH_PG_GROWN  messages pg1 takes before the pggrown figure (default
                    100,000 x scale)
    BENCH_TMP       where the temporary directory goes (default /tmp); it
                    must be on the disk to measure, reachable by user postfix
    BENCH_OUT       results as JSON (default build/bench/results.json)
    BENCH_KEEP=1    keep the temporary directory (logs, stores)
    IDEMRELAY_BIN, LOAD_BIN, FILL_BIN   the programs (default bin/, build/bench/)

    Needs root (Postfix), Debian's postfix package (smtp-source, smtp-sink),
    lmdb-utils (mdb_stat) for the bytes per claim, sasl2-bin (saslpasswd2)
    and libsasl2-modules for the tls figure; the PostgreSQL
    setups need the postgresql package (15 here, its pg_stat_statements
    for the statement counts).
"""

import json
import os
import platform
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
POSTFIX_SH = os.path.join(REPO, "tests", "postfix", "postfix.sh")
# relative paths are taken from the current directory (make runs in the repository)
IDEMRELAY = os.path.abspath(os.environ.get("IDEMRELAY_BIN", os.path.join(REPO, "bin", "idemrelay")))
LOAD = os.path.abspath(os.environ.get("LOAD_BIN", os.path.join(REPO, "build", "bench", "load")))
FILL = os.path.abspath(os.environ.get("FILL_BIN", os.path.join(REPO, "build", "bench", "fill")))
SBIN = "/usr/sbin"
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
from harness import stop_process  # noqa: E402  (one way to stop a child, the tests' own)
import pgbench_nodes  # noqa: E402  (the PostgreSQL cluster and its counters)
from targets import targets  # noqa: E402  (issue 27's targets, met or not)

SCALE = float(os.environ.get("BENCH_SCALE", "1"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
ONLY = set(x for x in os.environ.get("BENCH_ONLY", "").split(",") if x)
N_CLAIMS = int(float(os.environ.get("BENCH_CLAIMS", str(10_000_000 * SCALE))))
N_GROWN = int(float(os.environ.get("BENCH_GROWN", str(1_000_000 * SCALE))))
PG = os.environ.get("BENCH_PG", "1") != "0"
N_PG_GROWN = int(float(os.environ.get("BENCH_PG_GROWN", str(100_000 * SCALE))))
OUT = os.path.abspath(os.environ.get("BENCH_OUT", os.path.join(REPO, "build", "bench", "results.json")))

DUP_PREFIX = "dup-%d" % os.getpid()     # the dup figure's keys
DRAIN_CAP = 180         # seconds to wait for a server to deliver its backlog


def n(x, least=1):
    return max(least, int(x * SCALE))


def say(*a):
    print(*a, flush=True)


def say_table(head, num, rows):
    """say_table - a Markdown table: the first and the last two columns text, the rest num"""
    if not rows:
        return
    say("")
    say("| " + " | ".join(head) + " |")
    say("|---|" + "".join(num + "|" for _ in head[1:-2]) + "---|---|")
    for r in rows:
        say("| " + " | ".join(str(x) for x in r) + " |")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout, proc=None, what="server"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("%s exited at start (rc=%s)" % (what, proc.returncode))
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("%s did not listen on %d within %ds" % (what, port, timeout))


class Sink:
    """Postfix's smtp-sink, counting messages (its -c counters, on stdout)."""

    def __init__(self, tmp, name):
        self.port = free_port()
        self.out = os.path.join(tmp, name + ".out")
        with open(self.out, "wb") as f:
            self.proc = subprocess.Popen(
                [os.path.join(SBIN, "smtp-sink"), "-c", "-u", "postfix",
                 "127.0.0.1:%d" % self.port, "1000"],
                stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait_port(self.port, 10, self.proc, "smtp-sink")

    def count(self):
        with open(self.out, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 200))
            m = re.findall(rb"mesg=(\d+)", f.read())
        return int(m[-1]) if m else 0

    def stop(self):
        stop_process(self.proc)


class RateSink:
    """tests/e2e/sink.py as a provider allowing rate messages a second ("421
    4.7.0" beyond): its records counted, its refusals (events) counted"""

    def __init__(self, tmp, name, rate):
        d = os.path.join(tmp, name)
        self.records = os.path.join(d, "records")
        self.events = os.path.join(d, "events.jsonl")
        os.makedirs(self.records)
        control = os.path.join(d, "control.json")
        with open(control, "w") as f:
            json.dump({"rate": rate}, f)
        with open(os.path.join(d, "sink.log"), "wb") as lf:
            self.proc = subprocess.Popen(
                [sys.executable, os.path.join(REPO, "tests", "e2e", "sink.py"), "--port", "0",
                 "--record", self.records, "--control", control, "--events", self.events],
                stdout=subprocess.PIPE, stderr=lf, stdin=subprocess.DEVNULL, text=True)
        self.port = int(self.proc.stdout.readline().split()[-1])

    def count(self):
        return sum(1 for x in os.listdir(self.records) if x.endswith(".json"))

    def refusals(self):
        try:
            with open(self.events) as f:
                return sum(1 for line in f if '"throttled"' in line)
        except FileNotFoundError:
            return 0

    def stop(self):
        stop_process(self.proc)
        self.proc.stdout.close()


class Server:
    """What the figures need of either server: a port, a sink, a backlog."""

    name = "?"

    counters = None             # pgbench_nodes.Counters of a PostgreSQL setup

    def __init__(self, sink):
        self.sink = sink
        self.expected = 0       # messages it must eventually deliver

    @property
    def ports(self):
        """ports - where a load goes: split evenly across them"""
        return [self.port]

    def accepted(self, k):
        self.expected += k

    def idle(self):
        return True

    def cpu(self):
        """cpu - CPU seconds (user + system) the server has used so far"""
        raise NotImplementedError

    def drain(self, cap=DRAIN_CAP):
        """drain - wait until everything accepted reached the sink; seconds waited"""
        t0 = time.monotonic()
        while time.monotonic() - t0 < cap:
            if self.sink.count() >= self.expected and self.idle():
                return time.monotonic() - t0
            time.sleep(0.05)
        say("  ! %s: %d of %d messages delivered after %ds; going on"
            % (self.name, self.sink.count(), self.expected, cap))
        self.expected = self.sink.count()
        return None


class Postfix(Server):
    name = "Postfix"

    def __init__(self, tmp, sink, settings=(), dirname="postfix"):
        """settings: extra main.cf name=value lines (tests/postfix/postfix.sh)"""
        super().__init__(sink)
        self.dir = os.path.join(tmp, dirname)
        self.port = free_port()
        r = subprocess.run([POSTFIX_SH, "start", self.dir, str(self.port), str(sink.port)]
                           + list(settings), capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError("postfix.sh start failed: %s%s" % (r.stdout, r.stderr))

    def idle(self):
        r = subprocess.run([POSTFIX_SH, "queue", self.dir], capture_output=True, text=True)
        return r.stdout.strip() == "0"

    def cpu(self):
        """cpu - the master's and its live children's CPU, and what the master
        reaped (an smtpd or cleanup that exited after max_idle or max_use)"""
        with open(os.path.join(self.dir, "queue", "pid", "master.pid")) as f:
            return tree_cpu(int(f.read().strip()))

    def stop(self):
        subprocess.run([POSTFIX_SH, "stop", self.dir], timeout=60)


class Idemrelay(Server):
    name = "idemrelay"

    def __init__(self, tmp, sink, name="idemrelay", store=None, map_size="4G", pg_url=None,
                 node=None, metrics_port=None, label=None, listen="", networks='"127.0.0.0/8"',
                 limits="connections = 1100;", extra="", upstream=""):
        """listen, limits, upstream: settings inside the listener's, limits' and
        upstream's groups; networks: access.networks' elements; extra: more
        top-level settings"""
        super().__init__(sink)
        self.name = label or self.name    # in the figures: "idemrelay" (LMDB), "pg1"
        self.metrics_port = metrics_port
        self.dir = os.path.join(tmp, name)
        os.makedirs(self.dir, exist_ok=True)
        self.store = store or os.path.join(self.dir, "store")
        self.port = free_port()
        self.log = os.path.join(self.dir, "idemrelay.log")
        conf = os.path.join(self.dir, "idemrelay.conf")
        # Default durable settings: only where to listen, whom to relay for,
        # where the store and the upstream are, and room for 1,000 idle
        # connections next to the load. On PostgreSQL, the database and the
        # node's name instead of the LMDB path, and /metrics for its batches.
        if pg_url:
            store_conf = 'store = { backend = "postgresql"; url = "%s"; };\nnode = "%s";\n' \
                % (pg_url, node)
        else:
            store_conf = 'store = { path = "%s"; map_size = "%s"; };\n' % (self.store, map_size)
        if metrics_port:
            store_conf += 'metrics = { address = "127.0.0.1"; port = %d; };\n' % metrics_port
        with open(conf, "w") as f:
            f.write('hostname = "idemrelay.bench";\n'
                    'listen = ( { address = "127.0.0.1"; port = %d; %s } );\n'
                    'access = { networks = [ %s ]; };\n'
                    '%s'
                    'upstream = { host = "127.0.0.1"; port = %d; tls = "none"; %s };\n'
                    'limits = { %s };\n'
                    'log = { level = "info"; target = "stderr"; };\n%s'
                    % (self.port, listen, networks, store_conf, sink.port, upstream, limits,
                       extra))
        with open(self.log, "ab") as lf:
            self.proc = subprocess.Popen([IDEMRELAY, "-c", conf], cwd=self.dir,
                                         stdout=lf, stderr=lf, stdin=subprocess.DEVNULL)
        wait_port(self.port, 30, self.proc, "idemrelay")

    def rss(self):
        """rss - VmRSS, VmHWM, RssAnon, RssFile in MB"""
        out = {}
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                    out[k] = int(v.split()[0]) / 1024.0
        return out

    def log_count(self, word):
        with open(self.log, "rb") as f:
            return f.read().count(word.encode())

    def cpu(self):
        return proc_cpu(self.proc.pid)

    def stop(self):
        stop_process(self.proc, 60)


class NodePair(Server):
    """pg2: two idemrelay nodes on one PostgreSQL database, one sink; a load
    is split across both, and either may deliver what the other accepted"""

    def __init__(self, name, nodes, sink):
        super().__init__(sink)
        self.name = name
        self.nodes = nodes

    @property
    def ports(self):
        return [d.port for d in self.nodes]

    def log_count(self, word):
        return sum(d.log_count(word) for d in self.nodes)

    def cpu(self):
        return sum(d.cpu() for d in self.nodes)

    def stop(self):
        for d in self.nodes:
            d.stop()


# ---------------------------------------------------------------- submission with TLS and AUTH

SUBMIT_USER, SUBMIT_PASSWORD = "legit", "legit-password-30"
SUBMIT_CLIENT = "127.0.0.3"     # not exempt from AUTH on either server (mynetworks 127.0.0.1/32)


def make_cert(tmp):
    """make_cert - a self-signed ECDSA P-256 certificate, for both servers: (cert, key)"""
    crt, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", crt,
                    "-days", "2", "-subj", "/CN=attack.test"], check=True, capture_output=True)
    os.chmod(key, 0o644)        # a throwaway key; Postfix's smtpd reads it too
    return crt, key


def make_users(tmp):
    """make_users - idemrelay's users file (one $6$ hash, openssl passwd -6) and
    Postfix's Cyrus sasldb, one user each: (users file, SASL config directory)"""
    realm = "postfix.test"  # Postfix's myhostname (postfix.sh): Cyrus SASL's default realm
    h = subprocess.run(["openssl", "passwd", "-6", SUBMIT_PASSWORD], check=True,
                       capture_output=True, text=True).stdout.strip()
    users = os.path.join(tmp, "users")
    with open(users, "w") as f:
        f.write("%s:%s\n" % (SUBMIT_USER, h))
    sasl = os.path.join(tmp, "sasl")
    os.makedirs(sasl)
    os.chmod(sasl, 0o755)
    db = os.path.join(sasl, "sasldb2")
    subprocess.run(["saslpasswd2", "-p", "-c", "-f", db, "-u", realm, SUBMIT_USER],
                   input=SUBMIT_PASSWORD, text=True, check=True, capture_output=True)
    os.chmod(db, 0o644)
    with open(os.path.join(sasl, "smtpd.conf"), "w") as f:
        f.write("pwcheck_method: auxprop\nauxprop_plugin: sasldb\n"
                "mech_list: PLAIN LOGIN\nsasldb_path: %s\n" % db)
    return users, sasl


def postfix_submission(d, sink, crt, key, sasl, settings=()):
    """postfix_submission - Postfix in d requiring STARTTLS and AUTH (Cyrus
    SASL on the sasldb of make_users), mynetworks 127.0.0.1/32; settings:
    more main.cf name=value lines"""
    # Debian's Postfix looks for smtpd.conf in $config_directory/sasl
    # whatever cyrus_sasl_config_path says; postfix.sh keeps what is there
    conf = os.path.join(d, "postfix", "etc", "sasl")
    os.makedirs(conf)
    shutil.copy(os.path.join(sasl, "smtpd.conf"), conf)
    for x in (os.path.join(d, "postfix"), os.path.dirname(conf), conf):
        os.chmod(x, 0o755)
    return Postfix(d, sink, settings=[
        "mynetworks=127.0.0.1/32",
        "smtpd_tls_security_level=encrypt",
        "smtpd_tls_cert_file=" + crt, "smtpd_tls_key_file=" + key,
        "smtpd_tls_auth_only=yes",
        "smtpd_sasl_auth_enable=yes", "smtpd_sasl_type=cyrus", "smtpd_sasl_path=smtpd",
        "cyrus_sasl_config_path=" + conf,
        "smtpd_relay_restrictions=permit_mynetworks, permit_sasl_authenticated,"
        " reject_unauth_destination"] + list(settings))


def idemrelay_submission(d, sink, crt, key, users, name="idemrelay"):
    """idemrelay_submission - idemrelay (LMDB) in d requiring STARTTLS and AUTH,
    access.networks 127.0.0.1/32, default limits"""
    return Idemrelay(d, sink, name=name, listen='starttls = "required"; auth = "required";',
                     networks='"127.0.0.1/32"', limits="",
                     extra='tls = { cert = "%s"; key = "%s"; };\nauth = { users = "%s"; };\n'
                     % (crt, key, users))


# ---------------------------------------------------------------- clients

def smtp_source(ports, sessions, length, msgs):
    """smtp_source - Postfix's smtp-source, one per port at once, the sessions and
    messages split evenly; seconds until the last one finished"""
    ports = [ports] if isinstance(ports, int) else ports
    k = len(ports)
    t0 = time.monotonic()
    procs = [subprocess.Popen([os.path.join(SBIN, "smtp-source"), "-s", str(sessions // k),
                               "-l", str(length), "-m", str(msgs // k + (i < msgs % k)),
                               "127.0.0.1:%d" % p],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for i, p in enumerate(ports)]
    errs = [p.communicate(timeout=1800)[1] for p in procs]
    secs = time.monotonic() - t0
    for p, e in zip(procs, errs):
        if p.returncode != 0:
            raise RuntimeError("smtp-source failed (rc=%d): %s" % (p.returncode, e[-500:]))
    return secs


def load(port, *args, check=True):
    """load - tests/bench/load; its summary as a dict of floats"""
    r = subprocess.run([LOAD] + [str(a) for a in args] + ["127.0.0.1:%d" % port],
                       capture_output=True, text=True, timeout=1800)
    line = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    out = {k: float(v) for k, v in re.findall(r"(\w+)=([0-9.]+)", line)}
    if check and (r.returncode != 0 or not out):
        raise RuntimeError("load %s failed (rc=%d): %s %s" % (" ".join(map(str, args)),
                                                            r.returncode, line, r.stderr[-800:]))
    return out


def timed_delivery(server, k, fn):
    """timed_delivery - run fn (a submission of k messages); (fn's result,
    seconds until all k reached the sink, or None past the cap)"""
    base = server.sink.count()
    t0 = time.monotonic()
    res = fn()
    server.accepted(k)
    while time.monotonic() - t0 < DRAIN_CAP:
        if server.sink.count() >= base + k:
            return res, time.monotonic() - t0
        time.sleep(0.02)
    server.drain(1)
    return res, None


# ---------------------------------------------------------------- figures

def fig_fresh(servers, res):
    """fresh accept/s and end to end, smtp-source -s 20 -l 2000 -m N"""
    m = n(2000)
    say("fresh: smtp-source -s 20 -l 2000 -m %d, then wait for the sink" % m)
    for rnd in range(ROUNDS):
        for srv in servers:
            srv.drain()
            mine = not isinstance(srv, Postfix)
            dup0 = srv.log_count("status=duplicate") if mine else 0
            secs, e2e = timed_delivery(srv, m, lambda: smtp_source(srv.ports, 20, 2000, m))
            rate = m / secs
            e2e_rate = m / e2e if e2e else None
            res.add("fresh", srv.name, rate)
            res.add("e2e", srv.name, e2e_rate)
            extra = ""
            if mine:
                dups = srv.log_count("status=duplicate") - dup0
                extra = ", duplicates seen %d" % dups
                if dups:
                    res.note("fresh: %s saw %d duplicates in a fresh run: smtp-source"
                             " Message-IDs collided" % (srv.name, dups))
            say("  round %d %-9s accepted %7.1f msgs/s  delivered %s%s"
                % (rnd + 1, srv.name, rate, "%.1f msgs/s" % e2e_rate if e2e_rate else "n/a", extra))


def fig_dup(servers, res):
    """duplicates answered/s vs Postfix's accept rate of the same load, and the
    CPU each answer cost (issue 27, target 5: on two shared cores the rate is
    the client's, a bare smtp-sink answers as fast): idemrelay's process over
    the load; Postfix's master and daemons over the load and the delivery of
    what it accepted, since for Postfix a resubmission is one more message"""
    pool, prefix = n(2000), DUP_PREFIX
    m_pf, m_ir = n(2000), n(10000)
    say("dup: %d keys claimed once; then load -c 20 -k replay (%d msgs to Postfix, %d to idemrelay)"
        % (pool, m_pf, m_ir))
    for srv in servers:
        if not isinstance(srv, Postfix):
            dup_claim(srv, pool)
    for rnd in range(ROUNDS):
        for srv in servers:
            srv.drain()
            cpu0 = srv.cpu()
            if isinstance(srv, Postfix):
                r = load(srv.port, "-c", 20, "-n", m_pf, "-s", 2000, "-k", "replay", "-K", prefix,
                         "-u", pool)
                srv.accepted(int(r["ok"]))
                waited = srv.drain()
                cpu_ms = (srv.cpu() - cpu0) * 1000 / r["ok"] if waited is not None else None
                res.add("dup", srv.name, r["msgs_per_s"])
                res.add("dup_cpu_ms", srv.name, cpu_ms)
                say("  round %d Postfix   accepted %7.1f msgs/s; CPU a message accepted and"
                    " delivered %s" % (rnd + 1, r["msgs_per_s"], fmt(cpu_ms, " ms")))
                continue
            r = load(srv.port, "-c", 20, "-n", m_ir, "-s", 2000, "-k", "replay", "-K", prefix,
                     "-u", pool)
            cpu_ms = (srv.cpu() - cpu0) * 1000 / r["dup"] if r["dup"] else None
            res.add("dup", srv.name, r["msgs_per_s"])
            res.add("dup_cpu_ms", srv.name, cpu_ms)
            if r["dup"] != m_ir:
                res.note("dup: %s round %d: only %d of %d replies said duplicate"
                         % (srv.name, rnd + 1, r["dup"], m_ir))
            say("  round %d %-9s answered %7.1f msgs/s (%d duplicates, p99 %.2f ms); CPU a"
                " duplicate %s" % (rnd + 1, srv.name, r["msgs_per_s"], r["dup"], r["p99_ms"],
                                   fmt(cpu_ms, " ms")))


def dup_claim(srv, pool):
    """dup_claim - claim the dup figure's keys (again: the second time they are
    duplicates), and wait until the messages are delivered"""
    r = load(srv.port, "-c", 20, "-n", pool, "-k", "unique", "-K", DUP_PREFIX, "-u", pool)
    srv.accepted(int(r["ok"]) - int(r["dup"]))
    srv.drain()


def fig_latency(servers, res):
    """one session, fresh messages back to back: p50/p99 of the reply to the dot"""
    m = n(300, 50)
    say("latency: one session, %d fresh messages of 2 KB" % m)
    lmdb = [s for s in servers if s.name == "idemrelay"]
    for rnd in range(ROUNDS):
        for srv in servers:
            srv.drain()
            r = load(srv.port, "-c", 1, "-C", 0, "-n", m, "-s", 2000, "-k", "unique")
            srv.accepted(int(r["ok"]))
            res.add("p50", srv.name, r["p50_ms"])
            res.add("p99", srv.name, r["p99_ms"])
            res.add("one", srv.name, r["msgs_per_s"])
            say("  round %d %-9s p50 %6.2f ms  p99 %6.2f ms  (%.0f msgs/s)"
                % (rnd + 1, srv.name, r["p50_ms"], r["p99_ms"], r["msgs_per_s"]))
        for ir in lmdb:
            floor = commit_floor(ir.dir, 1)
            res.add("floor", "idemrelay", floor)
            # the disk's own flush, beside the p50 it bounds (issue 27, target 2)
            fs = disk_probe(ir.dir)["fsync_p50_us"]
            res.add("fsync_p50_us", "disk", fs)
            say("  round %d LMDB's durable-commit floor (1 page, 2 ordered flushes) %.2f ms;"
                " 4 KB write+fdatasync p50 %d us" % (rnd + 1, floor, fs))


def fig_where(setups, res):
    """where the time goes on PostgreSQL: for each setup, one more run of each of
    its figures, alone, between snapshots of PostgreSQL's counters (taken once
    they have settled: a backend sends its statistics up to 10 s late); the
    runs' rates are printed, not counted in the figures"""
    m, m_dup, m_one, pool = n(2000), n(10000), n(300, 50), n(2000)
    say("where the time goes: one more run per figure and PostgreSQL setup, alone,"
        " between settled counters")

    def fresh(srv):
        secs, e2e = timed_delivery(srv, m, lambda: smtp_source(srv.ports, 20, 2000, m))
        return "accepted %.1f msgs/s, delivered %s" % (
            m / secs, "%.1f msgs/s" % (m / e2e) if e2e else "n/a")

    def dup(srv):
        r = load(srv.port, "-c", 20, "-n", m_dup, "-s", 2000, "-k", "replay", "-K", DUP_PREFIX,
                 "-u", pool)
        return "answered %.1f msgs/s (%d duplicates)" % (r["msgs_per_s"], r["dup"])

    def latency(srv):
        one = lambda: load(srv.port, "-c", 1, "-C", 0, "-n", m_one, "-s", 2000,  # noqa: E731
                           "-k", "unique")
        r = one() if srv.name.endswith("stalled") else timed_delivery(srv, m_one, one)[0]
        res.add("p50_where", srv.name, r["p50_ms"])
        return "p50 %.2f ms, p99 %.2f ms" % (r["p50_ms"], r["p99_ms"])

    setups[0].counters.bench.track_planning()
    fl = setups[0].counters.bench.floors()
    res.add("pg_floor_rt", "pg1", fl["round_trip"])
    res.add("pg_floor_commit", "pg1", fl["commit"])
    say("  floors (pgbench, one client): a round trip %.3f ms, a one-row durable commit %.3f ms"
        % (fl["round_trip"], fl["commit"]))
    for srv in setups:
        figs = [("fresh", m, fresh)]
        if srv.name.endswith("stalled"):
            figs = [("latency", m_one, latency)]
        elif not isinstance(srv, NodePair):
            dup_claim(srv, pool)        # before the first snapshot: not counted
            figs += [("dup", m_dup, dup), ("latency", m_one, latency)]
        for fig, k, fn in figs:
            say("  %s %-7s %s" % (srv.name, fig, srv.counters.measure(fig, k, lambda: fn(srv))))
        res.extra.setdefault("pg_counters", {})[srv.name] = srv.counters.summaries()


def fig_pg_grown(srv, res):
    """pggrown - pg1's one-session p50 after N_PG_GROWN messages accepted (20
    sessions) and delivered through its node, on top of what the other figures
    left (issue 27 target 3): p50_grown, res.extra["grown_msgs_pg"]; one more
    run between PostgreSQL's settled counters ("grown" in pg1's report)"""
    m = n(300, 50)
    say("pggrown: %d fresh messages through pg1 (20 sessions), delivered; then one session,"
        " %d fresh messages of 2 KB" % (N_PG_GROWN, m))
    t0 = time.monotonic()
    r = load(srv.port, "-c", 20, "-n", N_PG_GROWN, "-s", 2000, "-k", "unique", "-K", "pggrown")
    srv.accepted(int(r["ok"]))
    srv.drain(max(DRAIN_CAP, N_PG_GROWN // 100))
    say("  %d accepted and delivered in %.0f s" % (int(r["ok"]), time.monotonic() - t0))
    n_db = int(srv.counters.bench.pg.sql("SELECT count(*) FROM messages", srv.counters.db,
                                         pgbench_nodes.pgcluster.ROLE))
    res.extra["grown_msgs_pg"] = n_db
    for rnd in range(ROUNDS):
        srv.drain()
        r = load(srv.port, "-c", 1, "-C", 0, "-n", m, "-s", 2000, "-k", "unique")
        srv.accepted(int(r["ok"]))
        res.add("p50_grown", srv.name, r["p50_ms"])
        say("  round %d pg1, %d messages in its database: p50 %.2f ms, p99 %.2f ms"
            % (rnd + 1, n_db, r["p50_ms"], r["p99_ms"]))
    one = lambda: load(srv.port, "-c", 1, "-C", 0, "-n", m, "-s", 2000,  # noqa: E731
                       "-k", "unique")
    srv.drain()
    srv.counters.last = None    # the fill ran outside any measure: a fresh snapshot first
    r = srv.counters.measure("grown", m, lambda: timed_delivery(srv, m, one)[0])
    say("  pg1 grown: p50 %.2f ms, p99 %.2f ms (between settled counters)"
        % (r["p50_ms"], r["p99_ms"]))
    res.extra.setdefault("pg_counters", {})["pg1"] = srv.counters.summaries()


def fig_tls(tmp, res):
    """STARTTLS + AUTH PLAIN, a new connection per message, 20 at once: both
    servers require both, with the same P-256 certificate (TLS 1.3 chosen),
    the client on 127.0.0.3 (tests/bench/load -T -A, full handshakes)"""
    m = n(2000)
    for prog in ("openssl", "saslpasswd2"):
        if not shutil.which(prog):
            res.note("tls skipped: %s is missing (apt-get install -y openssl sasl2-bin"
                     " libsasl2-modules)" % prog)
            return
    d = os.path.join(tmp, "tls")
    os.makedirs(d)
    os.chmod(d, 0o755)
    crt, key = make_cert(d)
    users, sasl = make_users(d)
    args = ["-c", 20, "-C", 1, "-n", m, "-s", 2000, "-k", "unique", "-b", SUBMIT_CLIENT, "-T",
            "-A", "%s:%s" % (SUBMIT_USER, SUBMIT_PASSWORD)]
    say("tls: load -T -A -c 20 -C 1 -n %d -s 2000 from %s: STARTTLS, AUTH PLAIN, one message"
        " a connection" % (m, SUBMIT_CLIENT))
    stopping = []
    try:
        sink_pf, sink_ir = Sink(d, "sink-postfix"), Sink(d, "sink-idemrelay")
        stopping += [sink_pf, sink_ir]
        # Postfix looks up each client's name (idemrelay does not): 127.0.0.3 has
        # none here, and the failed lookup costs Postfix ~35 ms a session
        pf = postfix_submission(d, sink_pf, crt, key, sasl, ["smtpd_peername_lookup=no"])
        stopping.insert(0, pf)
        ir = idemrelay_submission(d, sink_ir, crt, key, users, name="idemrelay-tls")
        stopping.insert(0, ir)
        ir.name = "idemrelay"
        for srv in (pf, ir):    # not counted: a server just started, its first AUTH
            r = load(srv.port, *(args[:4] + ["-n", 40] + args[6:]))
            srv.accepted(int(r["ok"]))
        for rnd in range(ROUNDS):
            for srv in (pf, ir):
                srv.drain()
                own0, cl0 = srv.cpu(), resource.getrusage(resource.RUSAGE_CHILDREN)
                r = load(srv.port, *args)
                cl1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                srv.accepted(int(r["ok"]))
                # the server's CPU until it has delivered this round's messages too
                own_ms = (srv.cpu() - own0) * 1000 / r["ok"] if srv.drain() is not None \
                    else None
                res.add("tls", srv.name, r["msgs_per_s"])
                client_ms = ((cl1.ru_utime + cl1.ru_stime) - (cl0.ru_utime + cl0.ru_stime)) \
                    * 1000 / r["ok"]
                res.add("tls_client_cpu_ms", srv.name, client_ms)
                res.add("tls_cpu_ms", srv.name, own_ms)
                if r["tls13"] != r["tls_handshakes"]:
                    res.note("tls: %s round %d: %d of %d handshakes TLS 1.3"
                             % (srv.name, rnd + 1, r["tls13"], r["tls_handshakes"]))
                say("  round %d %-9s %7.1f msgs/s (p99 at the dot %.2f ms, %d resumed);"
                    " CPU a message accepted and delivered %s, the client %.2f ms"
                    % (rnd + 1, srv.name, r["msgs_per_s"], r["p99_ms"], r["tls_resumed"],
                       fmt(own_ms, " ms"), client_ms))
    finally:
        for s in stopping:
            s.stop()


def proc_stat(pid):
    """proc_stat - (ppid, own CPU ticks, reaped children's CPU ticks), None once gone"""
    try:
        with open("/proc/%d/stat" % pid) as f:
            st = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(st[1]), int(st[11]) + int(st[12]), int(st[13]) + int(st[14])


def proc_cpu(pid):
    """proc_cpu - user + system CPU seconds of a process (all its threads)"""
    return proc_stat(pid)[1] / os.sysconf("SC_CLK_TCK")


def tree_cpu(root):
    """tree_cpu - CPU seconds of root, its live children, and the children it
    reaped (Postfix's master and its daemons)"""
    st = proc_stat(root)
    total = st[1] + st[2]
    for e in os.listdir("/proc"):
        if e.isdigit() and int(e) != root:
            kid = proc_stat(int(e))
            if kid and kid[0] == root:
                total += kid[1]
    return total / os.sysconf("SC_CLK_TCK")


def fig_idle(tmp, sink, res):
    """idemrelay's RSS while 1,000 idle connections are open, on a daemon
    just started (the long-running one's RSS also holds the store's pages
    it has touched: LMDB maps data.mdb, and those pages count as RssFile)"""
    k = 1000
    say("idle: %d connections open, EHLO said, nothing else (a fresh idemrelay)" % k)
    ir = Idemrelay(tmp, sink, name="idemrelay-idle")
    try:
        for rnd in range(ROUNDS):
            before = ir.rss()
            p = subprocess.Popen([LOAD, "-I", str(k), "-w", "2", "127.0.0.1:%d" % ir.port],
                                 stdout=subprocess.PIPE, text=True)
            line = p.stdout.readline()
            time.sleep(0.5)
            with_idle = ir.rss()
            p.wait(60)
            res.add("idle_rss", ir.name, with_idle["VmRSS"])
            res.add("idle_anon", ir.name, with_idle["RssAnon"])
            res.add("idle_per_conn_kb", ir.name,
                    (with_idle["VmRSS"] - before["VmRSS"]) * 1024 / k)
            say("  round %d idemrelay RSS %.1f MB (anon %.1f, file %.1f) with %s; %.1f MB before"
                % (rnd + 1, with_idle["VmRSS"], with_idle["RssAnon"], with_idle["RssFile"],
                   line.strip(), before["VmRSS"]))
    finally:
        ir.stop()


def fig_big(pf, ir, res):
    """100 KB messages, 20 sessions: MB/s accepted"""
    m = n(300, 40)
    size = 102400
    say("big: smtp-source -s 20 -l %d -m %d" % (size, m))
    for rnd in range(ROUNDS):
        for srv in (pf, ir):
            srv.drain()
            secs, e2e = timed_delivery(srv, m, lambda: smtp_source(srv.port, 20, size, m))
            mbs = m * size / 1e6 / secs
            res.add("big", srv.name, mbs)
            res.add("big_e2e", srv.name, m * size / 1e6 / e2e if e2e else None)
            say("  round %d %-9s %6.1f MB/s accepted (%.0f msgs/s), delivered in %s"
                % (rnd + 1, srv.name, mbs, m / secs, "%.1fs" % e2e if e2e else "n/a"))


BURST_RATE = 100            # the provider's messages a second


def fig_burst(tmp, res):
    """a burst into a provider allowing BURST_RATE a second: the seconds until
    the last message arrived, and the provider's refusals, for idemrelay with
    upstream.rate, idemrelay with its feedback alone, and Postfix; one round
    (each takes k / BURST_RATE seconds at best)"""
    k = n(5000, 200)
    say("burst: smtp-source -s 20 -l 2000 -m %d into a provider allowing %d/s"
        " (421 4.7.0 beyond); best possible %.0f s" % (k, BURST_RATE, k / BURST_RATE))
    setups = (("idemrelay rate", lambda sink: Idemrelay(
                  tmp, sink, name="idemrelay-burst-rate", upstream="rate = %d;" % BURST_RATE)),
              ("idemrelay feedback", lambda sink: Idemrelay(
                  tmp, sink, name="idemrelay-burst-fb")),
              ("Postfix", lambda sink: Postfix(tmp, sink, dirname="postfix-burst")))
    out = {}
    for label, make in setups:
        sink = RateSink(tmp, "sink-burst-" + label.replace(" ", "-"), BURST_RATE)
        srv = None
        try:
            srv = make(sink)
            srv.name = label
            _, secs = timed_delivery(srv, k, lambda: smtp_source(srv.port, 20, 2000, k))
            refused = sink.refusals()
            out[label] = {"seconds": secs, "refusals": refused, "messages": k}
            res.add("burst_seconds", label, secs)
            res.add("burst_refusals", label, refused)
            say("  %-18s %s, %d refusal%s, %s msgs/s delivered"
                % (label, "%.1f s" % secs if secs else "not all delivered in %d s" % DRAIN_CAP,
                   refused, "" if refused == 1 else "s",
                   "%.1f" % (k / secs) if secs else "n/a"))
        finally:
            if srv:
                srv.stop()
            sink.stop()
    res.extra["burst"] = dict(out, rate=BURST_RATE)


def mdb_claim_bytes(store):
    """mdb_claim_bytes - (claims, bytes in the claims and key index trees, data.mdb's
    disk space: the file is sparse, its journal region past a hole, so not its size);
    claims are filed under their key, and only an older store has key index entries"""
    r = subprocess.run(["mdb_stat", "-ea", store], capture_output=True, text=True)
    if r.returncode != 0:
        return None
    psize = int(re.search(r"Page size: (\d+)", r.stdout).group(1))
    dbs = {}
    for name, body in re.findall(r"Status of (\w+)\n((?:  .*\n?)*)", r.stdout):
        f = dict((k.strip(), int(v)) for k, v in re.findall(r"  ([\w ]+): (\d+)", body))
        dbs[name] = f
    pages = sum(dbs[d]["Branch pages"] + dbs[d]["Leaf pages"] + dbs[d]["Overflow pages"]
                for d in ("claims", "keys") if d in dbs)
    return (dbs.get("claims", {}).get("Entries", 0), pages * psize,
            os.stat(os.path.join(store, "data.mdb")).st_blocks * 512)


def mdb_shape(store):
    """mdb_shape - depth of the trees an outcome and an acceptance touch, and the
    free list (mdb_stat -ef): {"claims": depth, ..., "free_pages": n, "free_depth": d}"""
    r = subprocess.run(["mdb_stat", "-efa", store], capture_output=True, text=True)
    if r.returncode != 0:
        return {}
    out = {}
    for db, free, body in re.findall(r"(?:Status of (\w+)|(Freelist) Status)\n((?:  .*\n?)*)",
                                     r.stdout):
        name = db or free
        f = dict((k.strip(), int(v)) for k, v in re.findall(r"  ([\w ]+): (\d+)", body))
        if name == "Freelist":
            out["free_depth"], out["free_pages"] = f.get("Tree depth"), f.get("Free pages")
        elif name in ("claims", "hist", "hexpiry", "hnew"):
            out[name] = f.get("Tree depth")
    return out


def fig_grown(tmp, res):
    """one session's p50 on a new LMDB store and on an old one (issue 27 target 2)"""
    m, age = n(300, 50), n(30000, 2000)
    say("grown: a new store, and one of %s messages (tests/bench/fill -a), then %d fresh"
        " messages over 20 sessions through its daemon" % ("{:,}".format(N_GROWN), age))
    old = os.path.join(tmp, "store-grown")
    os.makedirs(old)
    t0 = time.monotonic()
    r = subprocess.run([FILL, "-a", "-n", str(N_GROWN), "-b", "10000", "-m", "8192", old],
                       capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError("fill -a failed: %s%s" % (r.stdout, r.stderr))
    say("  fill -a: %s (%.0fs)" % (r.stdout.strip(), time.monotonic() - t0))
    sinks, daemons = [], {}
    try:
        for label, store in (("new", None), ("grown", old)):
            s = Sink(tmp, "sink-" + label)
            sinks.append(s)
            daemons[label] = Idemrelay(tmp, s, name="idemrelay-" + label, store=store,
                                       map_size="8G")
        d = daemons["grown"]
        r = load(d.port, "-c", 20, "-n", age, "-s", 2000, "-k", "unique", "-K", "grown")
        d.accepted(int(r["ok"]))
        d.drain()
        res.extra["grown_msgs"] = N_GROWN + int(r["ok"])
        shape = mdb_shape(d.store)
        res.extra["grown_shape"] = shape
        say("  aged: %d more at %.0f msgs/s; depth claims %s, hist %s, hexpiry %s; free list"
            " %s pages, %s deep" % (r["ok"], r["msgs_per_s"], shape.get("claims"),
                                    shape.get("hist"), shape.get("hexpiry"),
                                    shape.get("free_pages"), shape.get("free_depth")))
        for label in ("new", "grown"):   # one load each first, not counted (as the latency figure)
            daemons[label].drain()
            r = load(daemons[label].port, "-c", 1, "-C", 0, "-n", 200, "-s", 2000, "-k", "unique",
                     "-K", "warm-" + label)
            daemons[label].accepted(int(r["ok"]))
        for rnd in range(ROUNDS):
            for label in ("new", "grown"):
                d = daemons[label]
                d.drain()
                r = load(d.port, "-c", 1, "-C", 0, "-n", m, "-s", 2000, "-k", "unique",
                         "-K", "lat%d-%s" % (rnd, label))
                d.accepted(int(r["ok"]))
                res.add("p50_" + label, "idemrelay", r["p50_ms"])
                res.add("p99_" + label, "idemrelay", r["p99_ms"])
                say("  round %d %-5s store p50 %6.2f ms  p99 %6.2f ms" % (rnd + 1, label,
                                                                        r["p50_ms"], r["p99_ms"]))
    finally:
        for d in daemons.values():
            d.stop()
        for s in sinks:
            s.stop()


def fig_claims(tmp, res):
    """accept rate with 1k vs N_CLAIMS claims in the store"""
    m = n(2000)
    big = N_CLAIMS
    say("claims: fill stores with 1,000 and %d claims (tests/bench/fill)" % big)
    stores = {}
    for label, count in (("1k", 1000), ("big", big)):
        path = os.path.join(tmp, "store-" + label)
        os.makedirs(path)
        t0 = time.monotonic()
        r = subprocess.run([FILL, "-n", str(count), "-m", "32768", path],
                           capture_output=True, text=True, timeout=3600)
        if r.returncode != 0:
            raise RuntimeError("fill failed: %s%s" % (r.stdout, r.stderr))
        say("  %s: %s (%.0fs)" % (label, r.stdout.strip(), time.monotonic() - t0))
        stores[label] = path
    st = mdb_claim_bytes(stores["big"])
    if st:
        claims, tree_bytes, file_bytes = st
        res.extra["claims"] = {"claims": claims, "tree_bytes_per_claim": tree_bytes / claims,
                               "file_bytes_per_claim": file_bytes / claims}
        say("  %d claims: %.0f bytes/claim in the claims B-tree, %.0f bytes/claim"
            " of data.mdb" % (claims, tree_bytes / claims, file_bytes / claims))
    sinks, daemons = [], {}
    try:
        for label in ("1k", "big"):
            s = Sink(tmp, "sink-" + label)
            sinks.append(s)
            daemons[label] = Idemrelay(tmp, s, name="idemrelay-" + label, store=stores[label],
                                       map_size="32G")
        say("  fresh load -c 20 -n %d -s 2000 against each" % m)
        # one load each first, not counted: the first one into a daemon just started
        # meets an empty spool and history (1k) or a cold map (10M)
        for label in ("1k", "big"):
            d = daemons[label]
            r = load(d.port, "-c", 20, "-n", m, "-s", 2000, "-k", "unique")
            d.accepted(int(r["ok"]))
            say("  warm-up  %-4s store %7.1f msgs/s (p99 %.2f ms, not counted)"
                % (label, r["msgs_per_s"], r["p99_ms"]))
        for rnd in range(ROUNDS):
            for label in ("1k", "big"):
                d = daemons[label]
                d.drain()
                r = load(d.port, "-c", 20, "-n", m, "-s", 2000, "-k", "unique")
                d.accepted(int(r["ok"]))
                res.add("claims_" + label, "idemrelay", r["msgs_per_s"])
                say("  round %d %-4s store %7.1f msgs/s (p99 %.2f ms)"
                    % (rnd + 1, label, r["msgs_per_s"], r["p99_ms"]))
    finally:
        for d in daemons.values():
            d.stop()
        for s in sinks:
            s.stop()


# ---------------------------------------------------------------- results

class Results:
    def __init__(self):
        self.v = {}
        self.notes = []
        self.extra = {}

    def add(self, fig, who, value):
        self.v.setdefault(fig, {}).setdefault(who, []).append(value)

    def note(self, text):
        self.notes.append(text)
        say("  ! " + text)

    def med(self, fig, who):
        vals = [x for x in self.v.get(fig, {}).get(who, []) if x is not None]
        return statistics.median(vals) if vals else None

    def ratio(self, fig_a, who_a, fig_b, who_b):
        """ratio - median over rounds of a/b, each round's pair measured back to back
        (steadier than a ratio of medians when the machine's speed drifts)"""
        a = self.v.get(fig_a, {}).get(who_a, [])
        b = self.v.get(fig_b, {}).get(who_b, [])
        rs = [x / y for x, y in zip(a, b) if x is not None and y]
        return statistics.median(rs) if rs else None


def fmt(x, unit=""):
    if x is None:
        return "n/a"
    if x >= 100:
        return "%.0f%s" % (x, unit)
    return "%.2f%s" % (x, unit) if x < 10 else "%.1f%s" % (x, unit)


def ratio_of(res, fig, a, b):
    """ratio_of - a's median over b's, formatted, or "-" """
    x, y = res.med(fig, a), res.med(fig, b)
    return fmt(x / y, "x") if x is not None and y else "-"


def table(res):
    rows = []

    def ratio_row(label, fig, unit, target, want):
        p, i = res.med(fig, "Postfix"), res.med(fig, "idemrelay")
        ratio = res.ratio(fig, "idemrelay", fig, "Postfix")
        ok = None if ratio is None or want is None else want(ratio)
        rows.append((label, fmt(p, unit), fmt(i, unit), fmt(ratio, "x") if ratio else "n/a",
                     target, {True: "met", False: "NOT met", None: "-"}[ok]))

    def ran(fig):       # by Postfix or LMDB (the PostgreSQL setups have their own table)
        return any(w in res.v.get(fig, {}) for w in ("Postfix", "idemrelay"))

    if ran("fresh"):
        ratio_row("fresh submissions accepted/s (smtp-source -s 20 -l 2000)", "fresh", "",
                  ">= 3x", lambda r: r >= 3)
        ratio_row("end to end: accepted and delivered to the sink, msgs/s", "e2e", "",
                  ">= 2x", lambda r: r >= 2)
    if ran("dup"):
        ratio_row("duplicates answered/s (idemrelay) vs Postfix accept/s", "dup", "",
                  ">= 10x", lambda r: r >= 10)
        rows.append(("the same: CPU a duplicate answered (Postfix: a message of that load"
                     " accepted and delivered)", fmt(res.med("dup_cpu_ms", "Postfix"), " ms"),
                     fmt(res.med("dup_cpu_ms", "idemrelay"), " ms"),
                     ratio_of(res, "dup_cpu_ms", "idemrelay", "Postfix"), "reported", "-"))
    if ran("p50"):
        ratio_row("one session: p50 latency of the reply to the dot", "p50", " ms",
                  "<= 0.5x", lambda r: r <= 0.5)
        ratio_row("one session: p99 latency of the reply to the dot", "p99", " ms", "-", None)
        fl, pp = res.med("floor", "idemrelay"), res.med("p50", "Postfix")
        if fl is not None and pp:
            rows.append(("floor under the p50: one LMDB commit of 1 page (2 ordered flushes)",
                         "-", fmt(fl, " ms"), fmt(fl / pp, "x"), "<= 0.5x possible?",
                         "below" if fl / pp < 0.5 else "ABOVE 0.5x"))
    if "idle_rss" in res.v:
        i = res.med("idle_rss", "idemrelay")
        rows.append(("idemrelay RSS with 1,000 idle connections (%.1f KB each)"
                     % res.med("idle_per_conn_kb", "idemrelay"), "-", fmt(i, " MB"), "-",
                     "<= 64 MB", "met" if i is not None and i <= 64 else "NOT met"))
    if "claims_1k" in res.v:
        a, b = res.med("claims_1k", "idemrelay"), res.med("claims_big", "idemrelay")
        r = res.ratio("claims_big", "idemrelay", "claims_1k", "idemrelay")
        bpc = res.extra.get("claims", {})
        rows.append(("idemrelay accept/s: 1k claims in the store vs %s (both under idemrelay)"
                     % "{:,}".format(N_CLAIMS), "-", "%s vs %s" % (fmt(a), fmt(b)),
                     fmt(r, "x") if r else "n/a", ">= 0.8x",
                     "met" if r and r >= 0.8 else "NOT met"))
        if bpc:
            rows.append(("bytes per claim, filled store (claims B-tree / data.mdb)", "-",
                         "%.0f / %.0f" % (bpc["tree_bytes_per_claim"], bpc["file_bytes_per_claim"]),
                         "-", "reported", "-"))
    dbc = res.extra.get("daemon_claims")
    if dbc:
        rows.append(("bytes per claim, the daemon's own store after the runs (claims + key index B-trees)", "-",
                     "%.0f" % dbc["tree_bytes_per_claim"], "-", "reported", "-"))
    if "tls" in res.v:
        ratio_row("STARTTLS + AUTH PLAIN, a new connection per message, 20 at once, msgs/s",
                  "tls", "", ">= 3x", lambda r: r >= 3)
        rows.append(("the same: CPU a message, accepted and delivered (the server's"
                     " processes and threads)", fmt(res.med("tls_cpu_ms", "Postfix"), " ms"),
                     fmt(res.med("tls_cpu_ms", "idemrelay"), " ms"),
                     ratio_of(res, "tls_cpu_ms", "idemrelay", "Postfix"), "reported", "-"))
        rows.append(("the same: CPU a message of the client (tests/bench/load)",
                     fmt(res.med("tls_client_cpu_ms", "Postfix"), " ms"),
                     fmt(res.med("tls_client_cpu_ms", "idemrelay"), " ms"), "-", "reported", "-"))
    if "big" in res.v:
        ratio_row("100 KB messages, 20 sessions: MB/s accepted", "big", "", ">= 2x",
                  lambda r: r >= 2)
    return rows


def machine():
    info = {"nproc": os.cpu_count(), "kernel": platform.release()}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        m = re.search(r"Model name:\s*(.*)", out)
        info["cpu"] = m.group(1).strip() if m else "?"
    except OSError:
        info["cpu"] = "?"
    with open("/proc/meminfo") as f:
        info["mem_gb"] = round(int(f.readline().split()[1]) / 1024 / 1024, 1)
    r = subprocess.run(["postconf", "-d", "-h", "mail_version"], capture_output=True, text=True)
    info["postfix"] = r.stdout.strip()
    r = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                       text=True)
    info["commit"] = r.stdout.strip()
    info["idemrelay_bin"] = IDEMRELAY
    info["loadavg_start"] = os.getloadavg()[0]
    return info


def disk_probe(path):
    """disk_probe - the file system of path, and the latency of a 4 KB write + fdatasync"""
    r = subprocess.run(["findmnt", "-n", "-o", "SOURCE,FSTYPE,OPTIONS", "-T", path],
                       capture_output=True, text=True)
    fs = r.stdout.strip()
    f = os.path.join(path, "fsync.probe")
    fd = os.open(f, os.O_WRONLY | os.O_CREAT, 0o600)
    ts = []
    try:
        for i in range(300):
            os.pwrite(fd, b"x" * 4096, (i % 64) * 4096)
            t0 = time.perf_counter()
            os.fdatasync(fd)
            ts.append((time.perf_counter() - t0) * 1e6)
    finally:
        os.close(fd)
        os.unlink(f)
    ts.sort()
    return {"fs": fs, "fsync_p50_us": round(ts[len(ts) // 2]), "fsync_p99_us": round(ts[int(len(ts) * 0.99)])}


def commit_floor(path, pages, n=200):
    """commit_floor - p50 in ms of the least an LMDB commit does before it may
    answer: write the dirty pages and fdatasync them, then write the meta page
    through an O_DSYNC descriptor (two flushes that must not be reordered).
    Measured on the store's disk in the same round as the latency figure, it is
    the floor under idemrelay's p50 that no change short of the SPEC's
    durability rule can go below."""
    f = os.path.join(path, "commit.probe")
    fd = os.open(f, os.O_RDWR | os.O_CREAT, 0o600)
    mfd = os.open(f, os.O_RDWR | os.O_DSYNC)
    ts = []
    try:
        os.pwrite(fd, b"x" * 4096 * 256, 0)
        os.fdatasync(fd)
        for i in range(n):
            t0 = time.perf_counter()
            for k in range(pages):
                os.pwrite(fd, b"y" * 4096, (2 + (i * 37 + k * 101) % 254) * 4096)
            os.fdatasync(fd)
            os.pwrite(mfd, b"m" * 120, (i % 2) * 4096)
            ts.append((time.perf_counter() - t0) * 1e3)
    finally:
        os.close(mfd)
        os.close(fd)
        os.unlink(f)
    ts.sort()
    return ts[len(ts) // 2]


def main():
    for prog, what in ((IDEMRELAY, "run make"), (LOAD, "run make bench"), (FILL, "run make bench")):
        if not os.access(prog, os.X_OK):
            sys.exit("bench: %s is missing: %s" % (prog, what))
    for prog in ("smtp-source", "smtp-sink", "postfix"):
        if not os.access(os.path.join(SBIN, prog), os.X_OK):
            sys.exit("bench: %s is missing: apt-get install -y postfix (see tests/postfix/postfix.sh)"
                     % prog)
    if os.geteuid() != 0:
        sys.exit("bench: run as root (the private Postfix instance needs it)")

    tmp = tempfile.mkdtemp(prefix="idemrelay-bench-", dir=os.environ.get("BENCH_TMP", "/tmp"))
    os.chmod(tmp, 0o755)
    res = Results()
    info = machine()
    info.update(disk_probe(tmp))
    info.update({"scale": SCALE, "rounds": ROUNDS, "tmp": tmp})
    say("bench: %(nproc)s cores (%(cpu)s), %(mem_gb)s GB, Postfix %(postfix)s, kernel %(kernel)s" % info)
    say("bench: %(tmp)s on %(fs)s; 4 KB write+fdatasync p50 %(fsync_p50_us)d us, p99 %(fsync_p99_us)d us"
        % info)
    if info["loadavg_start"] > 0.5:
        say("bench: warning: load average %.2f before the start: other work on this machine"
            " makes the figures noisy" % info["loadavg_start"])
    t_start = time.monotonic()
    stopping = []

    def on_signal(signum, frame):
        raise KeyboardInterrupt()

    signal.signal(signal.SIGTERM, on_signal)
    want = lambda f: not ONLY or f in ONLY  # noqa: E731
    classic = any(want(f) for f in ("fresh", "dup", "latency", "idle", "big"))
    pg_on = PG and want("pg")
    if pg_on:
        try:
            pgbench_nodes.pgcluster.bindir()
        except pgbench_nodes.pgcluster.ClusterError as e:
            res.note("PostgreSQL setups skipped: %s" % e)
            pg_on = False
    pg1 = pg2 = pg1s = None
    try:
        if classic or pg_on:
            if classic:
                sink_pf, sink_ir = Sink(tmp, "sink-postfix"), Sink(tmp, "sink-idemrelay")
                stopping += [sink_pf, sink_ir]
                pf = Postfix(tmp, sink_pf)
                stopping.insert(0, pf)
                ir = Idemrelay(tmp, sink_ir)
                stopping.insert(0, ir)
            if pg_on:
                pg1, pg2, pg1s = pgbench_nodes.setups(
                    tmp, stopping, say, lambda name: Sink(tmp, name),
                    lambda sink, label, node, url: Idemrelay(
                        tmp, sink, name="idemrelay-%s-%s" % (label, node), pg_url=url, node=node,
                        metrics_port=free_port(), label=label),
                    NodePair)
            for f, fn, pgs in (("fresh", fig_fresh, [pg1, pg2]), ("dup", fig_dup, [pg1]),
                               ("latency", fig_latency, [pg1])):
                servers = ([pf, ir] if want(f) else []) + (pgs if pg_on else [])
                if servers:
                    fn(servers, res)
            if want("big"):
                fig_big(pf, ir, res)
            if want("idle"):
                fig_idle(tmp, sink_ir, res)
            if classic:
                info["idemrelay_rss_after_mb"] = ir.rss()
                st = mdb_claim_bytes(ir.store)
                if st and st[0]:
                    res.extra["daemon_claims"] = {"claims": st[0],
                                                  "tree_bytes_per_claim": st[1] / st[0],
                                                  "file_bytes_per_claim": st[2] / st[0]}
                    say("store of the daemon after the runs: %d claims, %.0f bytes/claim in the"
                        " claims and key index B-trees (random inserts, as in production)"
                        % (st[0], st[1] / st[0]))
            if pg_on:
                fig_where([pg1, pg2, pg1s], res)
            if pg_on and want("pggrown") and N_PG_GROWN > 0:
                fig_pg_grown(pg1, res)
            for s in stopping:
                s.stop()
            stopping = []
        if want("tls"):
            fig_tls(tmp, res)
        if want("claims"):
            fig_claims(tmp, res)
        if want("grown"):
            fig_grown(tmp, res)
        if want("burst"):
            fig_burst(tmp, res)
    finally:
        for s in stopping:
            try:
                s.stop()
            except Exception as e:   # keep stopping the others
                say("bench: stopping %s: %s" % (type(s).__name__, e))
        if not os.environ.get("BENCH_KEEP"):
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            say("bench: kept %s" % tmp)

    info["minutes"] = round((time.monotonic() - t_start) / 60, 1)
    info["loadavg_end"] = os.getloadavg()[0]
    rows, pg_rows = table(res), pgbench_nodes.table(res, fmt)
    say_table(["figure", "Postfix", "idemrelay", "ratio", "target", ""], "---:", rows)
    say_table(["PostgreSQL backend (issue 14)", "Postfix", "LMDB", "PostgreSQL", "ratio",
               "target", ""], "---:", pg_rows)
    for srv in (pg1, pg2, pg1s) if pg_on else ():
        say("")
        for line in srv.counters.report(srv.name):
            say(line)
    say("")
    for line in pgbench_nodes.capacity(res) if pg_on else ():
        say(line)
    say("")
    target_lines = targets(res, info, fmt)
    for line in target_lines:
        say(line)
    say("")
    for x in res.notes:
        say("note: " + x)
    say("(medians of %d rounds; a ratio is the median of the rounds' ratios; BENCH_SCALE=%g,"
        " %.1f min)" % (ROUNDS, SCALE, info["minutes"]))
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump({"machine": info, "values": res.v, "extra": res.extra, "notes": res.notes,
                   "table": rows, "table_pg": pg_rows, "targets": target_lines}, f, indent=1)
    say("bench: results in %s" % OUT)


if __name__ == "__main__":
    main()
