"""The admin listeners (util/admin.h): the control socket and /metrics each
serve several clients at once, and a client that trickles its request is cut
off at a total deadline instead of holding the listener (issue 13)."""

import os
import socket
import threading
import time

from cases_ops import CTL, control_line, ops_daemon, scrape
from harness import case, check, eq, free_port, run

DEADLINE = 2.0          # ADMIN_DEADLINE_MS


def trickle(connect, data, every, seconds):
    """trickle - send data a byte at a time every `every` s; the seconds the
    peer took to close on us (None if it never did within `seconds`), and
    what it answered"""
    s = connect()
    s.settimeout(every)
    start, got = time.monotonic(), b""
    try:
        for i in range(len(data)):
            if time.monotonic() - start > seconds:
                return None, got
            try:
                s.send(data[i:i + 1])
            except (BrokenPipeError, ConnectionResetError):
                return time.monotonic() - start, got
            try:
                chunk = s.recv(4096)
                if chunk == b"":
                    return time.monotonic() - start, got
                got += chunk
            except socket.timeout:
                pass
            except ConnectionResetError:
                return time.monotonic() - start, got
        return None, got
    finally:
        s.close()


def slow_and_fast(connect, request, fast):
    """slow_and_fast - while one client trickles `request`, `fast` answers at
    once each time it is called; the trickler is cut off at the deadline"""
    result = {}

    def slow():
        result["slow"] = trickle(connect, request, every=0.5, seconds=8)

    th = threading.Thread(target=slow)
    th.start()
    try:
        time.sleep(0.3)                 # the slow one is in
        for _ in range(3):
            t0 = time.monotonic()
            fast()
            took = time.monotonic() - t0
            check(took < 1.5, "a second client waited %.1fs behind a slow one" % took)
            time.sleep(0.2)
    finally:
        th.join(15)
    closed, _ = result["slow"]
    check(closed is not None, "a client trickling a byte every 0.5s was never cut off")
    check(DEADLINE - 0.3 <= closed <= DEADLINE + 1.5,
          "the trickler was cut off after %.1fs, want about %.0fs in all" % (closed, DEADLINE))


@case()
def test_metrics_slow_client(t):
    """a request head sent a byte every 0.5s is cut off at 2s in all, and
    /metrics answers other scrapes meanwhile"""
    sink = t.sink()
    port = free_port()
    d = t.daemon(sink, {"metrics": {"address": "127.0.0.1", "port": port}})
    d.wait_log("started:")

    def fast():
        status, _, body = scrape(port)
        eq(status, 200, "GET /metrics beside a slow client")
        check("idemrelay_" in body, "metrics body")

    slow_and_fast(lambda: socket.create_connection(("127.0.0.1", port), timeout=5),
                  b"GET /metrics HTTP/1.0\r\nX-Slow: " + b"x" * 40 + b"\r\n\r\n", fast)


@case()
def test_control_slow_client(t):
    """a request line sent a byte every 0.5s is cut off at 2s in all with
    'no request line', and idemrelayctl is answered meanwhile"""
    sink = t.sink()
    d = ops_daemon(t, sink)
    d.wait_log("started:")

    def connect():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect(d.conf["control"])
        return s

    def fast():
        r = run([CTL, "-c", d.conf_path, "stats"])
        eq(r.returncode, 0, "idemrelayctl stats beside a slow client: %s" % r.stderr)

    slow_and_fast(connect, b"stats" + b" " * 40 + b"\n", fast)
    # a line cut off by the deadline is not taken as a request
    closed, got = trickle(connect, b"stats" + b" " * 40 + b"\n", every=0.5, seconds=8)
    check(closed is not None, "control trickler never cut off")
    check(b'"error":"no request line"' in got, "cut-off line answered %r" % got)
    check(os.path.exists(d.conf["control"]), "control socket still there")


@case()
def test_control_qid_syntax(t):
    """the control socket takes as a QID only what the daemon writes (12 of
    [0-9A-V], queue/qid.c qid_valid), as idemrelayctl does, and as a key the hashes
    of its forms (QUEUE_ADMIN_MAX_KEYS, 2): anything else is a bad request, never
    looked up or cut short"""
    sink = t.sink()
    d = ops_daemon(t, sink)
    d.wait_log("started:")

    H = b"ab" * 32                      # a key hash no message has
    for line, want in ((b"retry 0000000000VV", '"error":"unknown QID 0000000000VV"'),
                       (b"retry 0000000000ZZ", '"error":"retry: bad or missing QID"'),
                       (b"count A", '"error":"count: bad or missing QID"'),
                       (b"hold 0000000000000", '"error":"usage: hold QID'),
                       (b"drop ORDER2026WXYZ", '"error":"usage: drop QID'),
                       (b"hold key - " + b" ".join([H] * 2), '"ok":true'),
                       (b"hold key - " + b" ".join([H] * 3), '"error":"usage: hold QID'),
                       (b"forget --drop - " + b" ".join([H] * 2), '"error":"unknown key"'),
                       (b"forget - " + b" ".join([H] * 3), '"error":"usage: forget')):
        got = control_line(d, line + b"\n")
        check(want in got, "%s answered %r, want %s" % (line.decode(), got, want))
