"""The command line, configuration checking, the default config, swaks as a person uses it."""

import os
import re
import signal
import subprocess
import time

from harness import (BIN, Skip, base_conf, case, check, eq, port_open, qid_of, render_conf,
                     run, wait_until)


def swaks(port, *extra, to="a@example.com"):
    """swaks - one submission as a person types it; returns the transcript"""
    r = run(["swaks", "--server", "127.0.0.1:%d" % port, "--to", to, "--timeout", "20"]
            + list(extra), timeout=60)
    check(r.returncode == 0, "swaks exited %d:\n%s%s" % (r.returncode, r.stdout, r.stderr))
    return r.stdout


def swaks_qid(out):
    lines = [l for l in out.splitlines() if l.startswith("<-") and "queued as" in l]
    check(len(lines) == 1, "swaks transcript has no single '250 ... queued as':\n%s" % out)
    check(" 250 2.0.0 " in lines[0], "not a 250 2.0.0: %r" % lines[0])
    return qid_of(lines[0])


@case()
def test_swaks_twice_one_delivery(t):
    sink = t.sink()
    d = t.daemon(sink)
    hdr = "X-Idempotency-Key: k1"
    q1 = swaks_qid(swaks(d.port, "--header", hdr))
    time.sleep(1.1)         # a new Date: and Subject: (swaks puts the time in both)
    q2 = swaks_qid(swaks(d.port, "--header", hdr))
    eq(q2, q1, "queued as QID of the second swaks run")
    rec = sink.wait_count(1)[0]
    check(b"X-Idempotency-Key" not in rec["data"], "key header relayed")
    time.sleep(1.5)
    eq(len(sink.accepted()), 1, "messages upstream")


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


@case(timeout=60)
def test_config_check(t):
    store = os.path.join(t.tmp, "store")
    good = write(os.path.join(t.tmp, "good.conf"), render_conf(base_conf(store, 2999, 2998)))
    r = run([BIN, "-t", "-c", good])
    eq(r.returncode, 0, "idemrelay -t on a good config (output: %s%s)" % (r.stdout, r.stderr))

    up = 'upstream = { maildir = "%s"; };\n' % os.path.join(t.tmp, "outbox")
    bad = {
        # file name: (text, line, setting the message must name)
        "bad-duration.conf": (up + 'listen = ( { address = "127.0.0.1"; port = 2999; } );\n'
                              'store = {\n'
                              '  path = "%s";\n'
                              '  key_ttl = "5 parsecs";\n'
                              '};\n' % store, 5, "key_ttl"),
        "unknown-setting.conf": (up + 'store = { path = "%s"; };\n'
                                 'bogus_setting = 1;\n' % store, 3, "bogus_setting"),
        "unknown-nested.conf": (up + 'store = { path = "%s"; };\n'
                                'keys = {\n'
                                '  modee = "shadow";\n'
                                '};\n' % store, 4, "modee"),
        "bad-enum.conf": (up + 'store = { path = "%s"; };\n'
                          'limits = {\n'
                          '  recipients = 10;\n'
                          '  bare_lf = "sometimes";\n'
                          '};\n' % store, 5, "bare_lf"),
        "syntax.conf": (up + 'hostname "x.test";\n'
                        'store = { path = "%s"; };\n' % store, 2, None),
    }
    for name, (text, line, setting) in bad.items():
        path = write(os.path.join(t.tmp, name), text)
        r = run([BIN, "-t", "-c", path])
        out = r.stdout + r.stderr
        eq(r.returncode, 1, "idemrelay -t on %s (output: %r)" % (name, out))
        check(name in out, "%s: the message does not name the file: %r" % (name, out))
        check(re.search(r"%s:%d\b|line %d\b" % (re.escape(name), line, line), out),
              "%s: the message does not name line %d: %r" % (name, line, out))
        if setting:
            check(setting in out, "%s: the message does not name %s: %r" % (name, setting, out))
    # and without -t, a bad config is refused the same way
    r = run([BIN, "-c", os.path.join(t.tmp, "unknown-setting.conf")], timeout=10)
    eq(r.returncode, 1, "idemrelay -c with a bad config")


@case(timeout=90)
def test_default_config_maildir(t):
    """bin/idemrelay with no -c, as a newcomer runs it: swaks twice, one message."""
    if port_open(2525):
        raise Skip("127.0.0.1:2525 is in use; the default config listens there")
    cwd = os.path.join(t.tmp, "newcomer")
    os.makedirs(cwd)
    log_path = os.path.join(t.tmp, "default.log")
    t.extra_logs.append(("default-config daemon log", log_path))
    with open(log_path, "wb") as logf:
        p = subprocess.Popen([BIN], cwd=cwd, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf)
    try:
        wait_until(lambda: port_open(2525) or p.poll() is not None, 10, "the default port 2525")
        check(p.poll() is None, "idemrelay with no -c exited with %s" % p.poll())
        hdr = "X-Idempotency-Key: newcomer-1"
        q1 = swaks_qid(swaks(2525, "--header", hdr))
        q2 = swaks_qid(swaks(2525, "--header", hdr))
        eq(q2, q1, "queued as QID of the second swaks run")
        new = os.path.join(cwd, "var", "outbox", "new")
        files = wait_until(lambda: os.path.isdir(new) and os.listdir(new), 10,
                           "a message in var/outbox/new")
        time.sleep(1.5)
        files = os.listdir(new)
        eq(len(files), 1, "messages in var/outbox/new (%s)" % files)
        check(os.path.isdir(os.path.join(cwd, "var", "store")), "no var/store")
        with open(os.path.join(new, files[0]), "rb") as f:
            data = f.read()
        check(b"(idemrelay)" in data and q1.encode() in data,
              "the Maildir message lacks the Received header with %s" % q1)
        check(b"X-Idempotency-Key" not in data, "key header kept in the Maildir copy")
        p.send_signal(signal.SIGTERM)
        eq(p.wait(10), 0, "exit status after SIGTERM")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
