"""Logs that Postfix's log parsers read (issue 26 part 1): pflogsumm over a real log."""

import os
import re
import smtplib
import subprocess

from harness import case, check, eq, expect_reply, make_msg, qid_of, submit_ok, wait_until

PFLOGSUMM = "/usr/sbin/pflogsumm"      # Debian's pflogsumm package (README, .ci/run)


def grand_totals(report):
    """grand_totals - pflogsumm's "Grand Totals" counts by name ("received": 5, ...)"""
    counts = {}
    for line in report.split("Grand Totals", 1)[-1].splitlines():
        m = re.match(r"^\s+(\d+)\s+(received|delivered|forwarded|deferred|bounced|rejected"
                     r"|held|discarded)\b", line)
        if m:
            counts[m.group(2)] = int(m.group(1))
        m = re.search(r"\((\d+)\s+deferrals\)", line)
        if m:
            counts["deferrals"] = int(m.group(1))
    return counts


@case(timeout=120)
def test_pflogsumm_counts(t):
    """A mix of mail, and pflogsumm --syslog-name=idemrelay over the daemon's
    log file (stderr, stamped: "TIME HOST idemrelay/smtpd[PID]: ...") counts
    each kind exactly: 6 received (the bounce's notification is not received
    from a client), 6 delivered (4 sent at once, 1 after a 451, and the
    notification to the sender), 1 deferred (1 deferral), 1 bounced, 3
    rejected (relay denied, SIZE over the limit, a key reused for other
    content), and the duplicates as 2 discarded, not messages received: a
    retry, and a retry that adds a recipient (queued, and so received, under
    a new QID for the new recipient only)."""
    check(os.path.exists(PFLOGSUMM), "%s is missing: apt-get install pflogsumm" % PFLOGSUMM)
    sink = t.sink()
    d = t.daemon(sink, {"access": {"networks": ["127.0.0.1/32"]},
                        "limits": {"message_size": "100K"}})
    first = make_msg(key="pfl-1")
    q1 = submit_ok(d.port, "a@example.com", first)
    second = make_msg(key="pfl-2")
    q2 = submit_ok(d.port, "b@example.com", second)
    submit_ok(d.port, "c@example.com", make_msg(key="pfl-3"))
    qd = submit_ok(d.port, "fail-first-1-d@example.com", make_msg(key="pfl-4"))
    qb = submit_ok(d.port, "permfail-e@example.com", make_msg(key="pfl-5"))
    eq(submit_ok(d.port, "a@example.com", first), q1, "the duplicate's QID")
    check(submit_ok(d.port, ["b@example.com", "f@example.com"], second) != q2,
          "a retry adding a recipient: a new QID for it")
    s = smtplib.SMTP("127.0.0.1", d.port, timeout=20)
    s.ehlo("client.test")
    expect_reply(s.mail("sender@example.org", ["SIZE=200000"]), 552, "5.3.4", "SIZE over")
    expect_reply(s.mail("sender@example.org"), 250)
    expect_reply(s.rcpt("a@example.com"), 250)
    expect_reply(s.data(make_msg(key="pfl-1", body="Other content.\r\n")), 554, "5.7.0",
                 "the key of %s with other content" % q1)
    s.quit()
    far = smtplib.SMTP("127.0.0.1", d.port, timeout=20, source_address=("127.0.0.2", 0))
    far.ehlo("far.test")
    expect_reply(far.mail("sender@example.org"), 250)
    expect_reply(far.rcpt("x@example.net"), 554, "5.7.1", "relay from 127.0.0.2")
    far.quit()
    # 3 + f + the deferred one + the notification of the bounce to sender@example.org
    sink.wait_count(6, timeout=30)
    d.wait_log(qd, "status=sent")
    d.wait_log(qb, "status=bounced")
    wait_until(lambda: len(d.log_lines(": removed")) >= 7, 15, "seven messages removed")
    d.stop()
    r = subprocess.run([PFLOGSUMM, "--syslog-name=idemrelay", d.log_path],
                       capture_output=True, text=True, timeout=60)
    eq(r.returncode, 0, "pflogsumm's status (%s)" % r.stderr)
    got = grand_totals(r.stdout)
    want = {"received": 6, "delivered": 6, "forwarded": 0, "deferred": 1, "deferrals": 1,
            "bounced": 1, "rejected": 3, "held": 0, "discarded": 2}
    eq(got, want, "pflogsumm's grand totals:\n%s" % r.stdout)
    check(re.search(r"^\s+1\s+a@example\.com$", r.stdout, re.M),
          "a@example.com's one delivery among the recipients:\n%s" % r.stdout)
