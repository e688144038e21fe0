"""log.target = "syslog": every line goes to syslog(3), facility mail, and carries the QID."""

import os
import socket
import time

from harness import Skip, case, check, make_msg, submit_ok

DEVLOG = "/dev/log"


@case()
def test_syslog_target(t):
    if os.path.exists(DEVLOG):
        raise Skip("a syslog daemon owns /dev/log here")   # never so on CI's machines
    if os.getuid() != 0:
        raise Skip("needs root to create /dev/log")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(DEVLOG)
    try:
        sock.settimeout(0.2)
        sink = t.sink()
        d = t.daemon(sink, {"log": {"target": "syslog", "level": "info"}})
        q = submit_ok(d.port, ["a@example.com"], make_msg(key="syslog-1"))
        sink.wait_count(1)
        lines, deadline = [], time.monotonic() + 10
        while time.monotonic() < deadline and not any(q in l and "status=sent" in l for l in lines):
            try:
                lines.append(sock.recv(65536).decode("latin-1"))
            except socket.timeout:
                pass
        mine = [l for l in lines if q in l]
        check(any("status=queued" in l for l in mine), "queued line in syslog: %r" % lines)
        check(any("status=sent" in l for l in mine), "sent line in syslog: %r" % lines)
        # <PRI> = facility mail (2) * 8 + info (6)
        check(all(l.startswith("<22>") for l in mine), "mail.info priority: %r" % mine)
        check(all("idemrelay[" in l for l in mine), "tagged idemrelay[pid]: %r" % mine)
        check(d.log().strip().count("\n") <= 1, "nothing but the harness marker on stderr")
    finally:
        sock.close()
        os.unlink(DEVLOG)
