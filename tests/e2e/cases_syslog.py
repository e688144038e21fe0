"""log.target = "syslog": every line goes to syslog(3), facility mail, and carries the QID."""

import fcntl
import os
import re
import socket
import threading

from cases_pflogsumm import PFLOGSUMM, grand_totals
from harness import BIN, Skip, case, check, eq, make_msg, run, submit_ok, wait_until

DEVLOG = "/dev/log"
DEVLOG_LOCK = "/tmp/idemrelay-e2e-devlog.lock"
_devlog_turn = None


def devlog_free():
    """devlog_free - /dev/log is this case's alone until the case's process
    exits: the cases that bind it, or need it absent, take turns (run.py -j
    runs cases at once, one process each); Skip if a syslog daemon owns it"""
    global _devlog_turn
    _devlog_turn = open(DEVLOG_LOCK, "a")
    fcntl.flock(_devlog_turn, fcntl.LOCK_EX)
    if os.path.exists(DEVLOG):
        raise Skip("a syslog daemon owns /dev/log here")   # never so on CI's machines


def devlog_own():
    """devlog_own - /dev/log bound by this case (DevLog), its turn taken
    (devlog_free); Skip where it cannot be created"""
    devlog_free()
    if os.getuid() != 0:
        raise Skip("needs root to create /dev/log")
    return DevLog()


class DevLog:
    """/dev/log read from the start by a thread of its own: syslog(3) blocks
    once the socket's queue is full (net.unix.max_dgram_qlen, often 10
    datagrams), and a daemon that logs more at start (PostgreSQL) would stall
    while the test waits for it."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(DEVLOG)
        self.sock.settimeout(0.2)
        self.lines = []
        self.done = threading.Event()
        self.th = threading.Thread(target=self._read, daemon=True)
        self.th.start()

    def _read(self):
        while not self.done.is_set():
            try:
                self.lines.append(self.sock.recv(65536).decode("latin-1"))
            except socket.timeout:
                pass
            except OSError:
                return

    def has(self, *words):
        return [l for l in list(self.lines) if all(w in l for w in words)]

    def close(self):
        self.done.set()
        self.th.join(5)
        self.sock.close()
        os.unlink(DEVLOG)


@case()
def test_syslog_target(t):
    devlog = devlog_own()
    try:
        sink = t.sink()
        d = t.daemon(sink, {"log": {"target": "syslog", "level": "info"}})
        wait_until(lambda: devlog.has("started:"), 30, "the daemon's started: line in syslog")
        q = submit_ok(d.port, ["a@example.com"], make_msg(key="syslog-1"))
        sink.wait_count(1)
        wait_until(lambda: devlog.has(q, "status=sent"), 10, "the sent line in syslog")
        lines = list(devlog.lines)
        print("syslog: %d lines by the time %s was sent" % (len(lines), q))
        mine = [l for l in lines if q in l]
        check(any("status=queued" in l for l in mine), "queued line in syslog: %r" % lines)
        # <PRI> = facility mail (2) * 8 + info (6)
        check(all(l.startswith("<22>") for l in mine), "mail.info priority: %r" % mine)
        # RFC 3164, as syslog(3) sends it, the tag Postfix's: idemrelay/SERVICE[PID]
        tag = r"^<22>[A-Z][a-z][a-z] [ \d]\d \d\d:\d\d:\d\d idemrelay/%%s\[%d\]: " % d.proc.pid
        for svc, what in (("smtpd", "client="), ("qmgr", "from=<"), ("smtp", "status=sent")):
            check([l for l in mine if what in l and re.match(tag % svc, l)],
                  "%s's line tagged idemrelay/%s[pid]: %r" % (what, svc, mine))
        check(devlog.has("idemrelay/master[%d]: started: " % d.proc.pid), "master's started:")
        check(d.log().strip().count("\n") <= 1, "nothing but the harness marker on stderr")
        # the file a syslog daemon writes of them (its host after the time, <PRI> gone),
        # with the traditional time stamp: Postfix's log summariser counts the message
        path = os.path.join(t.tmp, "mail.log")
        with open(path, "w") as f:
            for l in devlog.has("idemrelay/"):
                f.write("%s syslogd %s\n" % (l[4:19], l[20:]))
        r = run([PFLOGSUMM, "--syslog-name=idemrelay", path], timeout=60)
        totals = grand_totals(r.stdout)
        eq((totals.get("received"), totals.get("delivered")), (1, 1),
           "pflogsumm over the syslog file:\n%s" % r.stdout)
    finally:
        devlog.close()


STAMPED = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z %s idemrelay/[a-z]+\[\d+\]: "
                     % re.escape(socket.gethostname().split(".")[0]))


@case()
def test_log_stamp_and_syslog_fallback(t):
    """Logs a person can read after the fact (issue 26 part 1): on stderr each
    line starts with its RFC 3339 UTC time, unless the journal stamps it
    (JOURNAL_STREAM, set by systemd); log.target = "syslog" with no /dev/log
    (a container) logs to stderr with one warning saying so, and -t says it
    would, instead of the daemon logging nothing."""
    devlog_free()
    sink = t.sink()
    d = t.daemon(sink)
    lines = [l for l in d.log().splitlines() if "idemrelay/" in l]
    check(lines and all(STAMPED.match(l) for l in lines), "stamped lines: %r" % lines[:3])
    os.environ["JOURNAL_STREAM"] = "8:12345"
    try:
        j = t.daemon(sink)
    finally:
        del os.environ["JOURNAL_STREAM"]
    lines = [l for l in j.log().splitlines() if "idemrelay/" in l]
    check(lines and all(re.match(r"idemrelay/[a-z]+\[\d+\]: ", l) for l in lines),
          "no stamp under the journal: %r" % lines[:3])
    s = t.daemon(sink, {"log": {"target": "syslog", "level": "info"}})
    q = submit_ok(s.port, ["a@example.com"], make_msg(key="fallback-1"))
    s.wait_log(q, "status=queued")
    eq(len(s.log_lines("warning: log.target = \"syslog\", but there is no /dev/log")), 1,
       "one warning")
    s.stop()                                # -t checks that the port is free
    r = run([BIN, "-t", "-c", s.conf_path])
    eq(r.returncode, 0, "-t: %r" % (r.stdout + r.stderr))
    check("there is no /dev/log here: the daemon would log to stderr" in r.stdout,
          "-t says where the lines would go: %r" % r.stdout)
