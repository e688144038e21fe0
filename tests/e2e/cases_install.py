"""make install: what lands where, and the installed example configuration works.

The tests install the binaries already built (the ones under test, IDEMRELAY_BIN
included) and never build anything: PROGS names them and make's -o marks them up to
date, so a running suite's binaries are never relinked under it.
"""

import os
import re
import shutil
import signal
import subprocess

from harness import LMDB_ONLY
from harness import (BIN, REPO, Skip, case, check, eq, free_port, make_msg, port_open, run,
                     submit_ok, wait_until)


def make(t, *args):
    """make - a target of the repository's Makefile, on the binaries under test"""
    if shutil.which("make") is None:
        raise Skip("make is not installed")
    bindir = os.path.dirname(os.path.abspath(BIN))
    progs = [os.path.join(bindir, p) for p in ("idemrelay", "idemrelayctl")
             if os.path.exists(os.path.join(bindir, p))]
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    # PROGS names exactly the binaries that exist; -o keeps make from
    # remaking them, so nothing is ever compiled in the tree under test.
    cmd = ["make", "-C", REPO, "--no-print-directory", "PROGS=" + " ".join(progs)]
    for p in progs:
        cmd += ["-o", p]
    r = run(cmd + list(args), timeout=60, env=env)
    check(r.returncode == 0, "%s exited %d:\n%s%s" % (" ".join(cmd + list(args)),
                                                     r.returncode, r.stdout, r.stderr))
    return r


def installed(dest, *rel):
    return os.path.join(dest, *rel)


def check_file(path, mode):
    check(os.path.isfile(path), "%s was not installed" % path)
    eq(oct(os.stat(path).st_mode & 0o777), oct(mode), "mode of %s" % path)


def substitute(text, pattern, repl):
    """substitute - replace exactly one match, so a changed example fails loudly"""
    new, n = re.subn(pattern, repl, text, flags=re.M)
    eq(n, 1, "matches of %r in the installed example" % pattern)
    return new


@case(timeout=120, stores=LMDB_ONLY)
def test_make_install(t):
    dest = os.path.join(t.tmp, "dest")
    make(t, "install", "DESTDIR=" + dest, "PREFIX=/usr")

    sbin = installed(dest, "usr", "sbin", "idemrelay")
    check_file(sbin, 0o755)
    if os.path.exists(os.path.join(os.path.dirname(BIN), "idemrelayctl")):
        check_file(installed(dest, "usr", "sbin", "idemrelayctl"), 0o755)
    check_file(installed(dest, "usr", "share", "man", "man5", "idemrelay.conf.5"), 0o644)
    check_file(installed(dest, "usr", "share", "man", "man8", "idemrelay.8"), 0o644)
    check_file(installed(dest, "usr", "share", "man", "man8", "idemrelayctl.8"), 0o644)
    check_file(installed(dest, "usr", "share", "doc", "idemrelay", "README.md"), 0o644)
    example = installed(dest, "etc", "idemrelay", "idemrelay.conf.example")
    check_file(example, 0o644)
    check(not os.path.exists(installed(dest, "etc", "idemrelay", "idemrelay.conf")),
          "make install wrote a live idemrelay.conf")
    check(not os.path.exists(installed(dest, "usr", "lib", "systemd")),
          "make install installed the systemd unit (that is install-systemd's job)")

    # The example is valid as shipped: no certificate or users file needed. -t also
    # checks the system it would start on (issue 12): on a machine without the
    # idemrelay user (the package or contrib/idemrelay.sysusers makes it), or
    # with its ports taken by another test, those are the only problems it may report.
    r = run([sbin, "-t", "-c", example])
    env = [r'user: no such user "idemrelay"',
           r"(listen\[0\]|metrics)\.port: cannot listen on 127\.0\.0\.1 port (2525|9465): "
           r"Address already in use"]
    other = [l for l in r.stderr.splitlines() if not any(re.search(e, l) for e in env)]
    eq(other, [], "installed idemrelay -t on the installed example")
    if not r.stderr:
        eq(r.returncode, 0, "installed idemrelay -t exit status (output: %s)" % r.stdout)
        check("configuration OK" in r.stdout, "no 'configuration OK' in %r" % r.stdout)
    else:
        eq(r.returncode, 1, "installed idemrelay -t exit status with %r" % r.stderr)

    # Installing again over an installed tree works, and keeps a live config.
    live = installed(dest, "etc", "idemrelay", "idemrelay.conf")
    with open(live, "w") as f:
        f.write("# the operator's\n")
    make(t, "install", "DESTDIR=" + dest, "PREFIX=/usr")
    make(t, "uninstall", "DESTDIR=" + dest, "PREFIX=/usr")
    check(not os.path.exists(sbin), "make uninstall left %s" % sbin)
    check(not os.path.exists(example), "make uninstall left %s" % example)
    with open(live) as f:
        eq(f.read(), "# the operator's\n", "the live configuration after make uninstall")


@case(timeout=60, stores=LMDB_ONLY)
def test_make_install_systemd(t):
    for prefix in ("/usr", "/usr/local"):
        dest = os.path.join(t.tmp, "dest" + prefix.replace("/", "-"))
        make(t, "install-systemd", "DESTDIR=" + dest, "PREFIX=" + prefix)
        unit = installed(dest, prefix.lstrip("/"), "lib", "systemd", "system",
                         "idemrelay.service")
        check_file(unit, 0o644)
        check_file(installed(dest, prefix.lstrip("/"), "lib", "sysusers.d", "idemrelay.conf"),
                   0o644)
        with open(unit) as f:
            text = f.read()
        check("\nExecStart=%s/sbin/idemrelay -c /etc/idemrelay/idemrelay.conf\n" % prefix
              in text, "%s: ExecStart does not name %s/sbin/idemrelay" % (unit, prefix))
        check("\nUser=idemrelay\n" in text and "\nStateDirectory=idemrelay\n" in text,
              "%s: no User= or StateDirectory=" % unit)


@case(timeout=90, stores=LMDB_ONLY)
def test_installed_example_runs(t):
    """the installed example, with this test's ports and directories, relays mail"""
    dest = os.path.join(t.tmp, "dest")
    make(t, "install", "DESTDIR=" + dest, "PREFIX=/usr")
    sbin = installed(dest, "usr", "sbin", "idemrelay")
    with open(installed(dest, "etc", "idemrelay", "idemrelay.conf.example")) as f:
        text = f.read()

    sink = t.sink()
    port = free_port()
    run_dir = os.path.join(t.tmp, "run")
    os.makedirs(run_dir)
    # What an operator changes, plus what a test must: ports, directories, no
    # user to become (the test may not run as root), logs to a file.
    text = substitute(text, r'^user = "idemrelay";$', "")
    text = substitute(text, r'"/run/idemrelay/idemrelay\.sock"',
                      '"%s/idemrelay.sock"' % run_dir)
    text = substitute(text, r"port = 9465;", "port = %d;" % free_port())
    text = substitute(text, r'^(  \{ address = "127\.0\.0\.1"; port = )2525;',
                      r"\g<1>%d;" % port)
    text = substitute(text, r'^(  path = )"/var/lib/idemrelay";',
                      r'\g<1>"%s/store";' % run_dir)
    text = substitute(text, r'^(  host = )"smtp\.example\.net";', r'\g<1>"127.0.0.1";')
    text = substitute(text, r"^(  port = )587;", r"\g<1>%d;" % sink.port)
    text = substitute(text, r'^(  tls = )"starttls";', r'\g<1>"none";')
    text = substitute(text, r'target = "syslog";', 'target = "stderr";')
    conf = os.path.join(run_dir, "idemrelay.conf")
    with open(conf, "w") as f:
        f.write(text)

    log_path = os.path.join(run_dir, "idemrelay.log")
    t.extra_logs.append(("installed idemrelay log", log_path))
    with open(log_path, "wb") as logf:
        proc = subprocess.Popen([sbin, "-c", conf], cwd=run_dir, stdin=subprocess.DEVNULL,
                                stdout=logf, stderr=logf)
    try:
        wait_until(lambda: port_open(port) or proc.poll() is not None, 10,
                   "the installed idemrelay to listen")
        check(proc.poll() is None, "installed idemrelay exited with %s" % proc.poll())
        msg = make_msg(key="install-1")
        q1 = submit_ok(port, ["a@example.com"], msg)
        q2 = submit_ok(port, ["a@example.com"], msg)
        eq(q2, q1, "QID of the duplicate")
        rec = sink.wait_count(1)[0]
        eq(rec["to"], ["a@example.com"], "recipients upstream")
        ctl = installed(dest, "usr", "sbin", "idemrelayctl")
        if os.path.exists(ctl):
            # the installed operator tool finds the daemon's store and socket
            for args in (["show", q1], ["show", "install-1"], ["--json", "stats"]):
                r = run([ctl, "-c", conf] + args)
                eq(r.returncode, 0, "idemrelayctl %s (output: %s%s)"
                   % (" ".join(args), r.stdout, r.stderr))
                check(q1 in r.stdout or args[-1] == "stats",
                      "idemrelayctl %s does not name %s: %r" % (" ".join(args), q1, r.stdout))
        proc.send_signal(signal.SIGTERM)
        eq(proc.wait(15), 0, "exit status after SIGTERM")
        eq(len(sink.accepted()), 1, "messages upstream")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
