"""log.target = "syslog": every line goes to syslog(3), facility mail, and carries the QID."""

import os
import socket
import threading

from harness import Skip, case, check, make_msg, submit_ok, wait_until

DEVLOG = "/dev/log"


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
    if os.path.exists(DEVLOG):
        raise Skip("a syslog daemon owns /dev/log here")   # never so on CI's machines
    if os.getuid() != 0:
        raise Skip("needs root to create /dev/log")
    devlog = DevLog()
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
        check(all("idemrelay[" in l for l in mine), "tagged idemrelay[pid]: %r" % mine)
        check(d.log().strip().count("\n") <= 1, "nothing but the harness marker on stderr")
    finally:
        devlog.close()
