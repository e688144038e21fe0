"""The operator's actions in the mail log, as Postfix's postsuper logs its own
("postfix/postsuper[PID]: QID: removed", "Deleted: 1 message"): the same lines
whether the daemon runs the action or idemrelayctl does on the store itself, with
the daemon stopped (queue/queue_admin.c logs them once for both)."""

import os
import re
import socket
import subprocess

from cases_ops import CTL, ctl, ops_daemon
from cases_pflogsumm import PFLOGSUMM, grand_totals
from cases_syslog import devlog_own
from harness import case, check, eq, make_msg, run, submit_ok, wait_until

HOST = re.escape(socket.gethostname().split(".")[0])


def ctl_into(d, path, *args):
    """ctl_into - idemrelayctl with its standard error appended to the file path,
    as an operator appends to the daemon's log (2>>FILE); its PID and stdout"""
    with open(path, "ab") as f:
        p = subprocess.Popen([CTL, "-c", d.conf_path] + list(args), stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=f)
        out, _ = p.communicate(timeout=30)
    eq(p.returncode, 0, "idemrelayctl %s: exit status (stdout %r)" % (" ".join(args), out))
    return p.pid, out.decode()


def postsuper(pid, text):
    """postsuper - a stamped line of idemrelay/postsuper[pid] saying text, as a regex"""
    return re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z %s idemrelay/postsuper\[%d\]: %s$"
                      % (HOST, pid, re.escape(text)), re.M)


def queued(d, n):
    """queued - n messages deferred for an hour, each with its key; their QIDs"""
    qids = []
    for i in range(n):
        qids.append(submit_ok(d.port, "fail-first-1-ql%d@example.com" % i,
                              make_msg(key="qlog-%d" % i)))
    for q in qids:
        d.wait_log(q, "status=deferred")
    return qids


@case()
def test_offline_actions_logged(t):
    """hold through the daemon, then, the daemon stopped, release, hold, drop and
    forget --drop by idemrelayctl on the store: each is one line a message, tagged
    idemrelay/postsuper with idemrelayctl's PID, in the daemon's log file (log.target
    "stderr", idemrelayctl's standard error appended to it), the same text as the
    daemon's, with postsuper's summaries; never on a terminal or a pipe, where the
    command's output says it already. pflogsumm still reads the log."""
    sink = t.sink()
    d = ops_daemon(t, sink)
    qa, qb, qc, qd = queued(d, 4)
    pid, out = ctl_into(d, d.log_path, "hold", qa)
    check("%s: on hold" % qa in out, "hold through the daemon: %r" % out)
    daemon = d.proc.pid
    for text in ("%s: placed on hold by the operator (idemrelayctl hold)" % qa,
                 "Placed on hold: 1 message"):
        wait_until(lambda: postsuper(daemon, text).search(d.log()), 15,
                   "the daemon's line %r" % text)
    eq(d.stop(), 0, "daemon exit status")

    r = ctl(d, "hold", qb)                  # stderr a pipe: the command's output only
    check("%s: on hold" % qb in r.stdout and "offline" not in r.stderr, "hold: %r" % r.stdout)
    eq(r.stderr, "", "idemrelayctl's standard error (a pipe) with log.target stderr")
    ctl(d, "release", qb)
    before = d.log()
    pid, out = ctl_into(d, d.log_path, "release", qa)
    check("%s: released from hold" % qa in out, "offline release: %r" % out)
    pid2, _ = ctl_into(d, d.log_path, "hold", qb)
    pid3, _ = ctl_into(d, d.log_path, "drop", qc)
    pid4, _ = ctl_into(d, d.log_path, "--drop", "forget", "qlog-3")
    log = d.log()[len(before):]
    for p, text in ((pid, "%s: released from hold by the operator (idemrelayctl release)" % qa),
                    (pid, "Released from hold: 1 message"),
                    (pid2, "%s: placed on hold by the operator (idemrelayctl hold)" % qb),
                    (pid2, "Placed on hold: 1 message"),
                    (pid3, "%s: removed by the operator (idemrelayctl drop)" % qc),
                    (pid3, "Deleted: 1 message"),
                    (pid4, "%s: removed by the operator (idemrelayctl forget --drop)" % qd),
                    (pid4, "%s: key forgotten by the operator (idemrelayctl forget)" % qd)):
        check(postsuper(p, text).search(log), "offline line %r in the log:\n%s" % (text, log))
    eq(len(log.strip().splitlines()), 8, "the offline actions' lines, nothing else:\n" + log)

    r = run([PFLOGSUMM, "--syslog-name=idemrelay", d.log_path], timeout=60)
    eq(r.returncode, 0, "pflogsumm's status (%s)" % r.stderr)
    got = grand_totals(r.stdout)
    eq((got.get("received"), got.get("delivered"), got.get("rejected"), got.get("held")),
       (4, 0, 0, 0), "pflogsumm's grand totals:\n%s" % r.stdout)


@case()
def test_offline_actions_syslog(t):
    """log.target "syslog": idemrelayctl's drop, the daemon stopped, goes to syslog,
    mail.info, tagged idemrelay/postsuper[PID] as the daemon's lines are tagged,
    and nothing to its standard error."""
    devlog = devlog_own()
    try:
        sink = t.sink()
        d = ops_daemon(t, sink, {"log": {"target": "syslog", "level": "info"}})
        q = submit_ok(d.port, "fail-first-1-qsys@example.com", make_msg(key="qlog-sys"))
        wait_until(lambda: devlog.has(q, "status=deferred"), 15, "the deferral in syslog")
        eq(d.stop(), 0, "daemon exit status")
        with open(os.path.join(t.tmp, "ctl.err"), "w+b") as err:
            p = subprocess.Popen([CTL, "-c", d.conf_path, "drop", q], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=err)
            out, _ = p.communicate(timeout=30)
            err.seek(0)
            eq((p.returncode, err.read()), (0, b""), "offline drop: status, stderr")
        check("%s: dropped" % q in out.decode(), "offline drop: %r" % out)
        tag = r"^<22>[A-Z][a-z][a-z] [ \d]\d \d\d:\d\d:\d\d idemrelay/postsuper\[%d\]: " % p.pid
        for text in ("%s: removed by the operator (idemrelayctl drop)" % q,
                     "Deleted: 1 message"):
            wait_until(lambda: [l for l in devlog.has(text) if re.match(tag + re.escape(text), l)],
                       10, "%r in syslog: %r" % (text, devlog.lines[-5:]))
    finally:
        devlog.close()
