"""kill -9: no accepted message lost, none sent twice (SPEC sections 4 and 5)."""

import re
import smtplib
import threading
import time

from harness import case, check, check_relayed, eq, make_msg, received_qids, submit_ok, wait_until

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
