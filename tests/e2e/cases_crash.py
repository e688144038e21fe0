"""kill -9: no accepted message lost, none sent twice (SPEC sections 4 and 5), also in the
middle of the compaction at start (LMDB)."""

import os
import re
import signal
import smtplib
import subprocess
import threading
import time

from harness import (BIN, LMDB_ONLY, case, check, check_relayed, eq, make_msg, received_qids,
                     submit_ok, wait_until)

SUBJECT_RE = re.compile(rb"^Subject: stream (\S+)\r$", re.M)


@case()
def test_kill9_after_accept(t):
    """Accepted while the upstream refuses; kill -9; the claim and the message survive."""
    sink = t.sink(greeting=421)
    d = t.daemon(sink)
    msg = make_msg(key="k9-1")
    qid = submit_ok(d.port, "a@example.com", msg)
    d.wait_log(qid, "status=deferred")
    d.kill9()
    d.start()
    eq(submit_ok(d.port, "a@example.com", msg), qid, "QID of a resubmission after kill -9")
    sink.control()
    rec = sink.wait_count(1, timeout=15)[0]
    check_relayed(rec["data"], msg, qid)
    time.sleep(2.5)
    eq(len(sink.accepted()), 1, "messages upstream")


@case(timeout=240)
def test_kill9_stream(t):
    """Clients submit 200 keyed messages, retrying each until 250, while the
    daemon is killed with SIGKILL twice and restarted on the same store.
    Every key must reach the upstream exactly once under the QID its client
    was given. The only excuse for zero copies is the daemon's own record
    that the delivery was cut after its inflight mark (unconfirmed)."""
    sink = t.sink()
    d = t.daemon(sink, {"upstream": {"connections": 4}})
    n_clients, per_client = 4, 50
    got = {}                # key -> QID its client finally got
    errors = []
    retries = {}            # kind of failure -> count
    lock = threading.Lock()

    def client(cid):
        for i in range(per_client):
            key = "kill-%d-%03d" % (cid, i)
            msg = make_msg(key=key, subject="stream %s" % key, body="payload of %s\r\n" % key)
            deadline = time.monotonic() + 45
            while True:
                try:
                    qid = submit_ok(d.port, "stream%d@example.com" % cid, msg, timeout=10)
                    with lock:
                        got[key] = qid
                    break
                except (OSError, EOFError, smtplib.SMTPException, AssertionError) as e:
                    with lock:
                        kind = type(e).__name__
                        retries[kind] = retries.get(kind, 0) + 1
                    if time.monotonic() > deadline:
                        errors.append("%s: no 250 within 45s, last error %r" % (key, e))
                        return
                    time.sleep(0.05)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(n_clients)]
    for th in threads:
        th.start()
    total = n_clients * per_client
    try:
        for kill_at in (total // 4, total * 3 // 5):
            wait_until(lambda: len(got) >= kill_at or errors, 90, "%d accepted messages" % kill_at)
            d.kill9()
            time.sleep(0.2)
            d.start()
    finally:
        for th in threads:
            th.join(120)
    print("client retries by failure: %r" % retries)
    check(not errors, "clients gave up:\n  " + "\n  ".join(errors[:10]))
    eq(len(got), total, "keys accepted")

    def copies():
        by_key = {}
        for r in sink.accepted():
            m = SUBJECT_RE.search(r["data"])
            check(m, "a message upstream without a stream subject: %r" % r["data"][:300])
            by_key.setdefault(m.group(1).decode(), []).append(r)
        return by_key

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(copies()) < total:
        time.sleep(0.5)
    time.sleep(3)           # retries of anything deferred, resends if any
    by_key = copies()
    log = d.log()
    unknown = sorted(set(by_key) - set(got))
    check(not unknown, "keys nobody submitted reached the sink: %s" % unknown[:5])
    lost, dups, wrong_qid, unconfirmed = [], [], [], []
    for key, qid in sorted(got.items()):
        recs = by_key.get(key, [])
        if len(recs) > 1:
            dups.append("%s (%s) x%d" % (key, qid, len(recs)))
        elif not recs:
            marks = [l for l in log.splitlines() if qid in l and "status=unconfirmed" in l]
            (unconfirmed if marks else lost).append("%s (%s)" % (key, qid))
        elif received_qids(recs[0]["data"]) != [qid]:
            wrong_qid.append("%s: client got %s, relayed as %s"
                             % (key, qid, received_qids(recs[0]["data"])))
    print("%d keys: %d delivered once, %d unconfirmed (no copy, logged as such)"
          % (total, total - len(lost) - len(dups) - len(unconfirmed), len(unconfirmed)))
    check(not dups, "delivered more than once: %s" % dups[:10])
    check(not lost, "accepted with 250 but never delivered, and not logged as unconfirmed: %s"
          % lost[:10])
    check(not wrong_qid, "relayed under another QID than the client was given: %s" % wrong_qid[:10])


@case(timeout=150, stores=LMDB_ONLY)
def test_kill9_mid_compaction(t):
    """A backlog delivered leaves a long free list, which the next start
    compacts (store/lmdb/store_compact.c); kill -9 while the compacted copy
    is being written: data.mdb is the old file, untouched; the start after
    removes the half copy and compacts; every queued message is delivered
    once under its QID, every delivered key still answers with its QID."""
    sink = t.sink(greeting=421)
    d = t.daemon(sink, {"store": {"map_size": "256M"}})
    big = "x" * 1000 + "\r\n"
    sent = {}
    for i in range(50):             # the backlog: 50 MB queued, then delivered
        msg = make_msg(key="cmp-sent-%d" % i, subject="sent %d" % i, body=big * 1000)
        sent[submit_ok(d.port, "a@example.com", msg)] = msg
    sink.control()
    sink.wait_count(50, timeout=60)
    sink.control(greeting=421)      # what follows stays queued
    queued = {}
    for i in range(25):             # 25 MB to copy: long enough to be caught at it,
                                    # (the free list keeps 25 MB: still worth compacting)
        key = "cmp-queued-%d" % i
        queued[key] = submit_ok(d.port, "b@example.com",
                                make_msg(key=key, subject="queued %d" % i, body=big * 1000))
    eq(d.stop(), 0, "exit status of the first run")
    data = os.path.join(d.store, "data.mdb")
    copy = data + ".compact"
    before = os.stat(data)

    with open(d.log_path, "ab") as logf:
        proc = subprocess.Popen([BIN, "-c", d.conf_path], cwd=d.dir, stdin=subprocess.DEVNULL,
                                stdout=logf, stderr=logf)
    deadline = time.monotonic() + 20
    while not os.path.exists(copy):
        check(proc.poll() is None, "the daemon exited before compacting (%s)" % proc.returncode)
        check(time.monotonic() < deadline, "no compaction began within 20 s of the start")
        time.sleep(0.001)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    check(os.path.exists(copy), "the half copy is gone: the kill came after the rename")
    after = os.stat(data)
    eq((after.st_ino, after.st_size, after.st_mtime_ns),
       (before.st_ino, before.st_size, before.st_mtime_ns), "data.mdb after the kill")

    d.start()
    d.wait_log("compacted:")
    check(not os.path.exists(copy), "the half copy is still there")
    check(os.stat(data).st_ino != before.st_ino, "data.mdb is not the compacted copy")
    for qid, msg in sent.items():   # delivered: the same QID, not sent again
        eq(submit_ok(d.port, "a@example.com", msg), qid, "QID of a delivered key after it")
    sink.control()
    recs = sink.wait_count(len(sent) + len(queued), timeout=60)
    time.sleep(2.5)                 # a resend, if any, would come in this time
    recs = sink.accepted()
    eq(len(recs), len(sent) + len(queued), "messages upstream")
    by_qid = {}
    for r in recs:
        q = received_qids(r["data"])
        by_qid.setdefault(q[0] if q else None, []).append(r)
    for key, qid in queued.items():
        eq(len(by_qid.get(qid, [])), 1, "copies of %s (%s) upstream" % (key, qid))
