"""Slow clients (slowloris): a command line has a deadline, a message a minimum
rate, and under connection pressure the slowest sessions go first (relay/pace.h)."""

import socket
import threading
import time

from cases_protocol import reply_codes
from harness import Raw, case, check, eq, expect_reply, make_msg, submit_ok, wait_until


class Trickler(threading.Thread):
    """Trickler - a client that sends prefix at once, then one octet of body every
    interval seconds, until the server closes or stop(); remembers what came back
    and when the connection closed (monotonic)."""

    def __init__(self, port, body, interval, prefix=b""):
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.body, self.interval, self.prefix = body, interval, prefix
        self.got = b""
        self.closed_at = None
        self.started = time.monotonic()
        self.halt = threading.Event()

    def run(self):
        self.sock.settimeout(self.interval)
        try:
            self.sock.sendall(self.prefix)
            i = 0
            while not self.halt.is_set():
                try:
                    chunk = self.sock.recv(65536)
                    if not chunk:
                        break
                    self.got += chunk
                    continue
                except socket.timeout:
                    pass
                self.sock.sendall(self.body[i % len(self.body):i % len(self.body) + 1])
                i += 1
        except OSError:
            pass
        self.closed_at = time.monotonic()

    def text(self):
        return self.got.decode("latin-1")

    def stop(self):
        self.halt.set()
        self.join(5)
        self.sock.close()


def greeted(t):
    """greeted - wait until the 220 greeting came"""
    wait_until(lambda: t.got.startswith(b"220 ") and b"\n" in t.got, 5, "the greeting")


@case()
def test_slow_command_line(t):
    d = t.daemon(None, {"limits": {"command_timeout": "3s"}})
    c = Trickler(d.port, b"EHLO client.test\r\n", 0.4)
    c.start()
    try:
        wait_until(lambda: c.closed_at, 9, "the trickling client to be dropped")
    finally:
        c.stop()
    took = c.closed_at - c.started
    out = c.text()
    eq(reply_codes(out)[1:2], [421], "reply to a command line trickled at 2.5 octets/s (%r)" % out)
    check("4.4.2" in out, "421 4.4.2 timeout (%r)" % out)
    check(2 <= took <= 6, "dropped after %.1fs with command_timeout=3s" % took)
    d.wait_log("timeout after CONNECT from unknown[127.0.0.1]")
    # an idle client that completes its lines in time is not dropped: each line re-arms
    with Raw(d.port) as r:
        for _ in range(3):
            time.sleep(1.5)
            expect_reply(r.cmd("NOOP"), 250, what="NOOP 1.5s after the last line")


ENVELOPE = b"EHLO client.test\r\nMAIL FROM:<s@example.org>\r\nRCPT TO:<a@example.com>\r\nDATA\r\n"


@case()
def test_slow_data_rate(t):
    sink = t.sink()
    d = t.daemon(sink, {"limits": {"data_timeout": "3s", "command_timeout": "60s"}})
    c = Trickler(d.port, b"Subject: slow\r\n\r\n" + b"x" * 100, 0.3, prefix=ENVELOPE)
    c.start()
    try:
        wait_until(lambda: c.closed_at, 10, "the client trickling DATA to be dropped")
    finally:
        c.stop()
    took = c.closed_at - c.started
    out = c.text()
    eq(reply_codes(out)[-1:], [421], "last reply to DATA at 3 octets/s (%r)" % out)
    check("421 4.4.2" in out, "421 4.4.2 timeout (%r)" % out)
    check(2 <= took <= 7, "dropped after %.1fs with data_timeout=3s, min_data_rate=500" % took)
    d.wait_log("timeout after DATA from unknown[127.0.0.1]")
    # a client above the rate may take longer than data_timeout in all
    with Raw(d.port, timeout=20) as r:
        for line in ENVELOPE.split(b"\r\n")[:-1]:
            r.send(line + b"\r\n")
            r.reply()
        r.send(make_msg(key="rate-1", body=b""))
        start = time.monotonic()
        while time.monotonic() - start < 5:
            r.send(b"y" * 1998 + b"\r\n")     # 4 KB/s, well above 500 octets/s
            time.sleep(0.5)
        reply = r.cmd(".")
    expect_reply(reply, 250, "2.0.0", "a 20 KB message sent over 5s with data_timeout=3s")
    sink.wait_count(1)


@case()
def test_slow_pressure(t):
    sink = t.sink()
    d = t.daemon(sink, {"limits": {"connections": 4, "command_timeout": "60s",
                                   "data_timeout": "60s", "stress_timeout": "5s"}})
    lone = Trickler(d.port, b"x", 0.4)
    lone.start()
    try:
        greeted(lone)
        time.sleep(6)       # 1 of 4: no stress, command_timeout (60s) holds
        check(lone.closed_at is None, "a lone slow client dropped without stress (%r)"
              % lone.text())
    finally:
        lone.stop()
    d.wait_log("disconnect from", timeout=5)
    slow = []
    try:
        for _ in range(4):
            slow.append(Trickler(d.port, b"x", 0.4))
            slow[-1].start()
        for c in slow:
            greeted(c)
        time.sleep(1.5)
        # the limit is full of slow clients: the slowest makes room for this one
        q = submit_ok(d.port, ["a@example.com"], make_msg(key="pressure-1"))
        d.wait_log("the slowest goes first", timeout=2)
        # at 3 of 4 (stress) each gets stress_timeout, not 60s, until below 3/4
        wait_until(lambda: sum(not c.closed_at for c in slow) <= 2, 8,
                   "slow clients dropped under stress")
        time.sleep(1)
    finally:
        for c in slow:
            c.stop()
    dropped = [c for c in slow if "421 4.4.2" in c.text()]
    check(len(dropped) >= 2, "slow clients dropped with 421 4.4.2: %d of 4 (%r)"
          % (len(dropped), [c.text() for c in slow]))
    sink.wait_count(1)
    check(d.log_lines(q, "status=sent"), "the honest client's message was relayed")
