#!/usr/bin/env python3
"""
NAME
    storebytes.py - what one accepted message costs in the LMDB store
    (issue 11 item 8)

SYNOPSIS
    make all build/bench/fill && python3 tests/bench/storebytes.py
    STOREBYTES_N=500 python3 tests/bench/storebytes.py

DESCRIPTION
    For each case (1 KB, 10 KB and 100 KB messages to one recipient, and
    1 KB messages to five and to fifty), a fresh bin/idemrelay (tests/e2e/harness.py,
    key_ttl 1h so that nothing expires) takes N messages over one SMTP
    session, with a distinct key each, and the store's map_used
    (`idemrelayctl --json stats`: LMDB's pages in use, its freelist left
    out) is read at three points:

      empty      after start, before any message
      queued     every message accepted and not yet attempted: the
                 upstream is a 127.0.0.1 listener that never accepts, so
                 the daemon's upstream connections wait for a greeting
                 (upstream.timeout 10m) and nothing is delivered
      delivered  the daemon restarted on the same store with the real
                 sink (tests/e2e/sink.py) as upstream, and the queue
                 empty (the daemon is killed, -9, between the two: a stop
                 waits for the hanging upstream connections; nothing was
                 delivered, so a restart only finds the queue): what
                 stays is each message's story, its expiry
                 entry and its claims, until key_ttl

    and printed per message: (queued - empty) / N is what a queued
    message costs (its spool record with the data, its queue entry, a
    claim per recipient), (delivered - empty) / N what it leaves behind
    after delivery. A many-recipient case less the one-recipient case of
    the same size, over the recipients added, is the cost of one more.

    With tests/bench/fill built (make bench), it also fills an empty store
    with FILL claims in random order (fill -r), for the bytes of a bare
    claim as the daemon's random inserts lay them out.

    It ends with the line the store's reserve (store/lmdb/store_space.c,
    STORE_RESERVE_PER_MSG) is checked against: the bytes a delivery adds
    per message (its story and expiry entry) at each size.

ENVIRONMENT
    STOREBYTES_N     messages per case (default 2000; 100 KB a fifth, 50 recipients a tenth)
    STOREBYTES_FILL  claims for fill -r (default 100000; 0: skip)
    STOREBYTES_OUT   the figures as JSON (default build/bench/storebytes.json)
    IDEMRELAY_BIN, FILL_BIN   the programs (default bin/idemrelay, build/bench/fill)
"""

import json
import os
import re
import smtplib
import socket
import subprocess
import sys
import tempfile
import shutil
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
# the daemon runs in its own directory: a relative IDEMRELAY_BIN (make passes
# bin/idemrelay) is taken from the current one, before harness reads it
if os.environ.get("IDEMRELAY_BIN"):
    os.environ["IDEMRELAY_BIN"] = os.path.abspath(os.environ["IDEMRELAY_BIN"])
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
import harness  # noqa: E402

N = int(os.environ.get("STOREBYTES_N", "2000"))
N_FILL = int(os.environ.get("STOREBYTES_FILL", "100000"))
OUT = os.path.abspath(os.environ.get("STOREBYTES_OUT",
                                     os.path.join(REPO, "build", "bench", "storebytes.json")))
CTL = os.path.join(os.path.dirname(os.path.abspath(harness.BIN)), "idemrelayctl")
FILL = os.path.abspath(os.environ.get("FILL_BIN", os.path.join(REPO, "build", "bench", "fill")))
CASES = (("1 KB, 1 recipient", 1024, 1, N), ("10 KB, 1 recipient", 10240, 1, N),
         ("100 KB, 1 recipient", 102400, 1, max(1, N // 5)), ("1 KB, 5 recipients", 1024, 5, N),
         ("1 KB, 50 recipients", 1024, 50, max(1, N // 10)))


def say(*a):
    print(*a, flush=True)


def stats(d):
    """stats - idemrelayctl --json stats: the store's figures"""
    r = subprocess.run([CTL, "-c", d.conf_path, "--json", "stats"], cwd=d.dir,
                       capture_output=True, text=True, timeout=30)
    return json.loads(r.stdout)["store"]


def settled(d, want=None, timeout=120):
    """settled - stats once map_used stays put for a second (and queued is want)"""
    deadline = time.monotonic() + timeout
    prev = None
    while time.monotonic() < deadline:
        s = stats(d)
        if prev and s["map_used"] == prev["map_used"] and (want is None or s["queued"] == want):
            return s
        prev = s
        time.sleep(1)
    raise AssertionError("store did not settle (queued %s, want %s)" % (prev["queued"], want))


def message(key, to, size, i):
    """message - a message of about size bytes in all, headers included"""
    line = ("storebytes %06d " % i) * 4 + "\r\n"
    head = harness.make_msg(key=key, msgid="<%s@storebytes.test>" % key, to=to, body="")
    body = line * max(1, (size - len(head)) // len(line))
    return harness.make_msg(key=key, msgid="<%s@storebytes.test>" % key, to=to, body=body)


def one_case(tmp, label, size, rcpts, n):
    """one_case - map_used empty, queued and delivered for n messages"""
    t = harness.T(label, os.path.join(tmp, "case%d-%d" % (size, rcpts)))
    os.makedirs(t.tmp)
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(64)                 # never accepted: connections wait for a greeting
    try:
        sink = t.sink()
        conf = {"store": {"map_size": "64M", "key_ttl": "1h"},
                "upstream": {"port": hung.getsockname()[1], "timeout": "10m", "connections": 2},
                "retry": {"first": "1h", "max": "1h", "give_up": "5d"},
                "control": os.path.join(t.tmp, "ctl.sock")}
        d = t.daemon(None, conf)
        empty = settled(d, 0)
        s = smtplib.SMTP("127.0.0.1", d.port, timeout=60)
        s.ehlo("storebytes.test")
        to = ["rcpt%d-%d@example.com" % (k, size) for k in range(rcpts)]
        for i in range(n):
            key = "sb-%d-%d-%d" % (size, rcpts, i)
            msg = message(key, to[0], size, i)
            harness.submit_ok(d.port, to, msg, smtp=s)
        s.quit()
        queued = settled(d, n)
        d.kill9()       # SIGTERM waits for the upstream connections that hang
        # the same store, now with the sink as upstream
        d.conf["upstream"]["port"] = sink.port
        with open(d.conf_path, "w") as f:
            f.write(harness.render_conf(d.conf))
        d.start()
        # a message whose delivery the stop cut short waits retry.first: attempt it now
        subprocess.run([CTL, "-c", d.conf_path, "flush"], cwd=d.dir, capture_output=True,
                       timeout=30)
        delivered = settled(d, 0, timeout=300)
        got = len(sink.accepted())
        harness.check(got == n, "%s: %d of %d messages at the sink" % (label, got, n))
        d.stop()
        return {"case": label, "size": size, "rcpts": rcpts, "n": n, "wire_bytes": len(msg),
                "empty": empty, "queued": queued, "delivered": delivered,
                "queued_per_msg": (queued["map_used"] - empty["map_used"]) / n,
                "delivered_per_msg": (delivered["map_used"] - empty["map_used"]) / n}
    finally:
        hung.close()
        t.cleanup()


def fill_claims(tmp):
    """fill_claims - bytes per claim of fill -r (random order), or None"""
    if N_FILL <= 0 or not os.access(FILL, os.X_OK):
        return None
    path = os.path.join(tmp, "fill")
    os.makedirs(path)
    r = subprocess.run([FILL, "-r", "-n", str(N_FILL), "-b", "1000", "-m", "1024", path],
                       capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        say("storebytes: fill failed: %s%s" % (r.stdout, r.stderr))
        return None
    return {k: float(v) for k, v in re.findall(r"(\w+)=([0-9.]+)", r.stdout)}


def main():
    if not os.access(harness.BIN, os.X_OK) or not os.access(CTL, os.X_OK):
        sys.exit("storebytes: %s or %s is missing: run make" % (harness.BIN, CTL))
    tmp = tempfile.mkdtemp(prefix="idemrelay-storebytes-")
    results = []
    try:
        for label, size, rcpts, n in CASES:
            r = one_case(tmp, label, size, rcpts, n)
            results.append(r)
            say("%-20s n=%-5d wire %6d B  queued %8.0f B/msg  delivered %6.0f B/msg  "
                "(stories %d, claims %d, key entries %d after delivery)"
                % (label, n, r["wire_bytes"], r["queued_per_msg"], r["delivered_per_msg"],
                   r["delivered"]["stories"], r["delivered"]["claims"],
                   r["delivered"]["key_entries"]))
        fill = fill_claims(tmp)
        if fill:
            say("fill -r -n %d: %.0f bytes per bare claim (random order)"
                % (N_FILL, fill["bytes_per_claim"]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    one = {r["size"]: r for r in results if r["rcpts"] == 1}
    per_rcpt_q, per_rcpt_d = {}, {}
    for r in results:
        if r["rcpts"] > 1:
            k = r["rcpts"]
            per_rcpt_q[k] = (r["queued_per_msg"] - one[1024]["queued_per_msg"]) / (k - 1)
            per_rcpt_d[k] = (r["delivered_per_msg"] - one[1024]["delivered_per_msg"]) / (k - 1)
            say("one more recipient (1 KB, %d recipients against 1): %.0f B while queued, "
                "%.0f B after delivery" % (k, per_rcpt_q[k], per_rcpt_d[k]))
    say("left after delivery per message (story, expiry entry, one claim): %s"
        % ", ".join("%s %.0f B" % (r["case"].split(",")[0], r["delivered_per_msg"])
                    for r in results if r["rcpts"] == 1))
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump({"cases": results, "fill": fill, "per_rcpt_queued": per_rcpt_q,
                   "per_rcpt_delivered": per_rcpt_d}, f, indent=1)
    say("storebytes: figures in %s" % OUT)


if __name__ == "__main__":
    main()
