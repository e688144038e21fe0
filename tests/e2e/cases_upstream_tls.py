"""Upstream TLS and AUTH (issue 3, SPEC section 2 `upstream`): STARTTLS required,
implicit TLS, certificate verification against the system CA store, AUTH only
over TLS, failover across upstream.hosts.

The certificates are made here with `openssl`: a CA of our own and a server
certificate for localhost / 127.0.0.1 signed by it. The daemon trusts that CA
only when a test points OpenSSL's default store at it (SSL_CERT_FILE in the
daemon's environment: each test runs in its own process, so setting it in
os.environ reaches only this test's daemon)."""

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import time

import harness
from harness import (case, check, check_relayed, eq, free_port, make_msg, read_ready_line,
                     run, submit_ok, wait_until)

USER, PASSWORD = "relay-user", "s3cret-pw!"


# ---------------------------------------------------------------- helpers

def openssl(*args, cwd):
    r = run(["openssl"] + list(args), cwd=cwd)
    check(r.returncode == 0, "openssl %s failed: %s" % (" ".join(args), r.stderr))


def make_certs(t, names=("DNS:localhost", "IP:127.0.0.1"), cn="localhost", tag="server"):
    """make_certs - a test CA (made once per test) and a server certificate it signs;
    returns {"ca": path, "cert": path, "key": path}"""
    d = os.path.join(t.tmp, "pki")
    os.makedirs(d, exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    if not os.path.exists(os.path.join(d, "ca.pem")):
        openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
                "-subj", "/CN=idemrelay e2e test CA",
                "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    with open(os.path.join(d, tag + ".ext"), "w") as f:
        f.write("subjectAltName=%s\nbasicConstraints=CA:FALSE\n"
                "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
                % ",".join(names))
    openssl("req", *ec, "-keyout", tag + ".key", "-out", tag + ".csr", "-subj", "/CN=" + cn,
            cwd=d)
    openssl("x509", "-req", "-in", tag + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-out", tag + ".pem", "-extfile", tag + ".ext",
            cwd=d)
    return {"ca": os.path.join(d, "ca.pem"), "cert": os.path.join(d, tag + ".pem"),
            "key": os.path.join(d, tag + ".key")}


class TlsSink(harness.Sink):
    """harness.Sink with sink.py's TLS and AUTH options"""

    def __init__(self, t, name, extra):
        super().__init__(t, name)
        self.extra = list(extra)

    def start(self, port=0):
        logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, harness.SINK, "--port", str(port or self.port or 0),
             "--record", self.record_dir, "--control", self.control_path,
             "--events", self.events_path] + self.extra,
            stdout=subprocess.PIPE, stderr=logf, stdin=subprocess.DEVNULL)
        logf.close()
        self.port = int(read_ready_line(self.proc, 10, "sink").split()[-1])
        return self


def tls_sink(t, certs=None, implicit=False, auth=True, inject=False):
    extra = []
    if certs:
        extra += ["--tls-cert", certs["cert"], "--tls-key", certs["key"]]
    if implicit:
        extra.append("--implicit-tls")
    if inject:
        extra.append("--starttls-inject")
    if auth:
        extra += ["--auth", "%s:%s" % (USER, PASSWORD)]
    s = TlsSink(t, "sink%d" % len(t.sinks), extra)
    t.sinks.append(s)
    return s.start()


def trust(ca):
    """trust - the daemons this test starts trust our CA (and only it), or none of it"""
    os.environ.pop("SSL_CERT_DIR", None)
    if ca:
        os.environ["SSL_CERT_FILE"] = ca
    else:
        os.environ.pop("SSL_CERT_FILE", None)


def upstream(sink, tls="starttls", host="localhost", **kw):
    u = {"host": host, "port": sink.port, "tls": tls, "user": USER, "password": PASSWORD}
    u.update(kw)
    for k, v in list(u.items()):
        if v is None:
            u[k] = harness.DELETE
    return {"upstream": u}


def deferred_only(t, d, sink, qid, *words, wait=3.0):
    """deferred_only - qid is deferred (log line with words), retried, and
    after `wait` seconds nothing reached the sink's DATA"""
    d.wait_log(qid, "status=deferred", *words)
    time.sleep(wait)
    eq(sink.accepted(), [], "messages at the sink")
    eq([e for e in sink.events() if e["ev"] in ("rcpt", "dot")], [],
       "RCPT/DATA seen by the sink")
    check(not d.log_lines(qid, "status=sent"), "the message was sent")
    check(not d.log_lines(qid, "status=bounced"), "the message bounced")
    check(len(d.log_lines(qid, "status=deferred")) >= 2, "want retries, got:\n" +
          "\n".join(d.log_lines(qid)))


def sink_saw(sink, verb):
    """sink_saw - did the sink read a command starting with verb?"""
    return any(" < %s" % verb in l for l in sink.log().splitlines())


def secrets_absent(d):
    """secrets_absent - the password is in no log line, in clear or base64"""
    text = d.log()
    plain = base64.b64encode(("\0%s\0%s" % (USER, PASSWORD)).encode()).decode()
    for s in (PASSWORD, base64.b64encode(PASSWORD.encode()).decode(), plain):
        check(s not in text, "the daemon log contains a secret (%r)" % s)


# ---------------------------------------------------------------- tests

@case()
def test_upstream_starttls_auth_verified(t):
    """STARTTLS + AUTH to an upstream whose CA the daemon trusts through SSL_CERT_FILE."""
    certs = make_certs(t)
    sink = tls_sink(t, certs)
    trust(certs["ca"])
    d = t.daemon(sink, dict(upstream(sink), log={"level": "debug"}))
    qid = submit_ok(d.port, "rcpt@example.com", make_msg(key="tls-1"))
    rec = sink.wait_count(1, timeout=20)[0]
    check(rec["tls"] in ("TLSv1.2", "TLSv1.3"), "record: tls = %r" % rec["tls"])
    eq(rec["auth"], USER, "record: AUTH user")
    eq(rec["sni"], "localhost", "record: SNI sent")
    d.wait_log(qid, "status=sent")
    d.wait_log("Verified TLS connection established")
    auths = sink.events("auth")
    check(auths and auths[-1]["ok"], "sink AUTH events: %r" % auths)
    secrets_absent(d)


@case()
def test_upstream_untrusted_certificate_refused(t):
    """Not trusted by the system store: deferred, never sent, nothing authenticated."""
    certs = make_certs(t)
    sink = tls_sink(t, certs)
    trust(None)
    d = t.daemon(sink, upstream(sink))
    qid = submit_ok(d.port, "rcpt@example.com", make_msg(key="tls-2"))
    deferred_only(t, d, sink, qid, "dsn=4.7.5", "certificate verify failed")
    eq(sink.events("auth"), [], "AUTH attempts at the sink")
    check(not sink_saw(sink, "MAIL"), "the sink saw MAIL")


@case()
def test_upstream_untrusted_tls_verify_false(t):
    """The same upstream with tls_verify = false: delivered, and logged as unverified."""
    certs = make_certs(t)
    sink = tls_sink(t, certs)
    trust(None)
    d = t.daemon(sink, upstream(sink, tls_verify=False))
    qid = submit_ok(d.port, "rcpt@example.com", make_msg(key="tls-3"))
    rec = sink.wait_count(1, timeout=20)[0]
    check(rec["tls"], "record: not over TLS")
    eq(rec["auth"], USER, "record: AUTH user")
    d.wait_log(qid, "status=sent")
    d.wait_log("Unverified TLS connection established")


@case()
def test_upstream_certificate_name_mismatch(t):
    """A certificate from a trusted CA but for another name is refused."""
    certs = make_certs(t, names=("DNS:other.example",), cn="other.example", tag="other")
    sink = tls_sink(t, certs)
    trust(certs["ca"])
    d = t.daemon(sink, upstream(sink))
    qid = submit_ok(d.port, "rcpt@example.com", make_msg(key="tls-4"))
    deferred_only(t, d, sink, qid, "dsn=4.7.5", "certificate name mismatch: wanted localhost")


@case()
def test_upstream_ip_address_checked(t):
    """host = "127.0.0.1": the certificate's IP address is what gets checked."""
    certs = make_certs(t)
    sink = tls_sink(t, certs)
    trust(certs["ca"])
    d = t.daemon(sink, upstream(sink, host="127.0.0.1"))
    qid = submit_ok(d.port, "rcpt@example.com", make_msg(key="tls-5"))
    rec = sink.wait_count(1, timeout=20)[0]
    eq(rec["sni"], None, "SNI for an IP address")
    d.wait_log(qid, "status=sent")


@case()
def test_upstream_starttls_not_offered(t):
    """tls = "starttls" against an upstream without it: deferred, never sent in clear."""
    sink = t.sink()
    d = t.daemon(sink, upstream(sink, host="127.0.0.1", user=None, password=None))
    qid = submit_ok(d.port, "rcpt@example.com", make_msg(key="tls-6"))
    deferred_only(t, d, sink, qid, "dsn=4.7.4", "TLS is required, but was not offered")
    check(not sink_saw(sink, "MAIL"), "the sink saw MAIL in clear")


@case()
def test_upstream_auth_wrong_password(t):
    """Bad credentials: deferred (4.7.8, as Postfix's smtp_sasl_auth_soft_bounce), no MAIL."""
    certs = make_certs(t)
    sink = tls_sink(t, certs)
    trust(certs["ca"])
    d = t.daemon(sink, upstream(sink, password="wrong-password"))
    qid = submit_ok(d.port, "rcpt@example.com", make_msg(key="tls-7"))
    deferred_only(t, d, sink, qid, "dsn=4.7.8", "SASL authentication failed", "535")
    auths = sink.events("auth")
    check(auths and not any(a["ok"] for a in auths), "sink AUTH events: %r" % auths)
    check(not sink_saw(sink, "MAIL"), "the sink saw MAIL without AUTH")
    check("wrong-password" not in d.log(), "the password is in the log")


@case()
def test_upstream_auth_334_after_cancel(t):
    """A server that answers libesmtp's "*" (its answer to a challenge its mechanism is
    done with) with another 334, for ever (RFC 4954 wants 501): the session is cut at
    the first such reply, deferred 4.7.0, no MAIL. libesmtp cancelled again and again
    for as long as the server went on: the session never ended, nothing was logged."""
    certs = make_certs(t)
    sink = tls_sink(t, certs)
    sink.control(auth_loop=True)
    trust(certs["ca"])
    d = t.daemon(sink, upstream(sink))
    qid = submit_ok(d.port, "rcpt@example.com", make_msg(key="tls-334"))
    deferred_only(t, d, sink, qid, "dsn=4.7.0", "went on with AUTH after it was cancelled")
    per_conn = {}
    for e in sink.events("auth-334"):
        per_conn[e["conn"]] = per_conn.get(e["conn"], 0) + 1
    check(per_conn and max(per_conn.values()) <= 2, "334s a connection: %r" % per_conn)
    check(not sink_saw(sink, "MAIL"), "the sink saw MAIL")


@case()
def test_upstream_auth_only_plain_and_login(t):
    """An upstream offering CRAM-MD5 or NTLM before PLAIN or LOGIN (an on-prem Exchange's
    "AUTH NTLM LOGIN"): upstream AUTH uses PLAIN and LOGIN only, as deliver_auth.h says,
    where libesmtp tried every mechanism it has a plugin for, in the server's order, with
    the password meant for LOGIN. Offering only those: deferred 4.7.0, no MAIL."""
    certs = make_certs(t)
    sink = tls_sink(t, certs)
    trust(certs["ca"])
    d = t.daemon(sink, upstream(sink))
    for n, (mechs, want) in enumerate((("CRAM-MD5 PLAIN", "PLAIN"), ("NTLM LOGIN", "LOGIN"),
                                       ("ntlm cram-md5 login", "LOGIN"))):
        sink.control(auth_mechs=mechs)
        qid = submit_ok(d.port, "rcpt@example.com", make_msg(key="tls-mech-%d" % n))
        sink.wait_count(n + 1, timeout=20)
        d.wait_log(qid, "status=sent")
        eq([a["mech"] for a in sink.events("auth-command")][-1:], [want],
           "AUTH commands against %r" % mechs)
    eq(sorted({a["mech"] for a in sink.events("auth-command")}), ["LOGIN", "PLAIN"],
       "mechanisms tried")
    sink.control(auth_mechs="CRAM-MD5 NTLM")
    before = len(sink.events("auth-command"))
    qid = submit_ok(d.port, "rcpt@example.com", make_msg(key="tls-mech-none"))
    d.wait_log(qid, "status=deferred", "dsn=4.7.0", "offers neither PLAIN nor LOGIN")
    eq(sink.events("auth-command")[before:], [], "AUTH commands against CRAM-MD5 NTLM")
    check(not d.log_lines(qid, "status=sent"), "sent without AUTH")
    eq(len(sink.records()), 3, "messages at the sink")


@case()
def test_upstream_auth_not_offered(t):
    """upstream.user set, the upstream offers no AUTH: deferred rather than sent unauthenticated."""
    certs = make_certs(t)
    sink = tls_sink(t, certs, auth=False)
    trust(certs["ca"])
    d = t.daemon(sink, upstream(sink))
    qid = submit_ok(d.port, "rcpt@example.com", make_msg(key="tls-8"))
    deferred_only(t, d, sink, qid, "does not offer AUTH")
    check(not sink_saw(sink, "MAIL"), "the sink saw MAIL")


@case()
def test_upstream_starttls_injection(t):
    """A reply pipelined behind the 220 to STARTTLS (libESMTP 1.1.0 would read it as
    if it came over TLS): the connection is cut, nothing is sent."""
    certs = make_certs(t)
    sink = tls_sink(t, certs, inject=True)
    trust(certs["ca"])
    d = t.daemon(sink, upstream(sink))
    qid = submit_ok(d.port, "rcpt@example.com", make_msg(key="tls-9"))
    deferred_only(t, d, sink, qid, "injection")
    eq(sink.events("auth"), [], "AUTH attempts at the sink")


@case()
def test_upstream_implicit_tls(t):
    """tls = "implicit" (port 465 style) with AUTH, through the delivery bridge."""
    certs = make_certs(t)
    sink = tls_sink(t, certs, implicit=True)
    trust(certs["ca"])
    d = t.daemon(sink, dict(upstream(sink, tls="implicit"), log={"level": "debug"}))
    qids = [submit_ok(d.port, "rcpt%d@example.com" % i, make_msg(key="tls-10-%d" % i))
            for i in range(3)]
    recs = sink.wait_count(3, timeout=20)
    for rec in recs:
        check(rec["tls"] in ("TLSv1.2", "TLSv1.3"), "record: tls = %r" % rec["tls"])
        eq(rec["auth"], USER, "record: AUTH user")
        eq(rec["sni"], "localhost", "record: SNI sent")
    for qid in qids:
        d.wait_log(qid, "status=sent", "relay=localhost[")
    d.wait_log("Verified TLS connection established")
    secrets_absent(d)


@case()
def test_upstream_tls_large_message(t):
    """A 3 MB message through the bridge arrives byte for byte, both ways of TLS."""
    certs = make_certs(t)
    body = b"".join(b"line %07d: %s\r\n" % (i, b"x" * (i % 97)) for i in range(50000))
    for n, implicit in enumerate((False, True)):
        sink = tls_sink(t, certs, implicit=implicit)
        trust(certs["ca"])
        # the Python sink takes about 8 s for 3 MB over TLS on a loaded machine:
        # the reply to the dot must not time out first (the usual 5 s here)
        d = t.daemon(sink, upstream(sink, tls="implicit" if implicit else "starttls",
                                    timeout="60s"))
        msg = make_msg(key="big-%d" % n, body=body)
        qid = submit_ok(d.port, "rcpt@example.com", msg)
        rec = sink.wait_count(1, timeout=60)[0]
        check_relayed(rec["data"], msg, qid)
        d.wait_log(qid, "status=sent", timeout=30)


@case()
def test_upstream_implicit_tls_untrusted(t):
    """Implicit TLS to an untrusted certificate: the handshake fails, nothing is sent."""
    certs = make_certs(t)
    sink = tls_sink(t, certs, implicit=True)
    trust(None)
    d = t.daemon(sink, upstream(sink, tls="implicit"))
    qid = submit_ok(d.port, "rcpt@example.com", make_msg(key="tls-11"))
    deferred_only(t, d, sink, qid, "dsn=4.7.5", "certificate verify failed")
    eq(sink.events("auth"), [], "AUTH attempts at the sink")


@case()
def test_upstream_tls_after_privilege_drop(t):
    """The bridge still serves libesmtp when the daemon runs as another user."""
    if os.getuid() != 0:
        raise harness.Skip("needs root to start")
    certs = make_certs(t)
    for path in (os.path.dirname(t.tmp), t.tmp, os.path.dirname(certs["ca"])):
        os.chmod(path, 0o755)
    os.chmod(certs["ca"], 0o644)
    sink = tls_sink(t, certs)
    trust(certs["ca"])
    d = t.daemon(sink, dict(upstream(sink), user="nobody"), start=False)
    os.chmod(d.dir, 0o755)
    d.start()
    d.wait_log("running as user nobody")
    qid = submit_ok(d.port, "rcpt@example.com", make_msg(key="tls-drop"))
    rec = sink.wait_count(1, timeout=20)[0]
    eq(rec["auth"], USER, "record: AUTH user")
    d.wait_log(qid, "status=sent")


@case()
def test_upstream_failover_plain(t):
    """The first of upstream.hosts refuses connections; the second gets the message."""
    sink = t.sink()
    dead = free_port()
    d = t.daemon(sink, {"upstream": {"host": harness.DELETE, "port": harness.DELETE,
                                     "hosts": ["127.0.0.1:%d" % dead,
                                               "127.0.0.1:%d" % sink.port]}})
    qid = submit_ok(d.port, "rcpt@example.com", make_msg(key="fo-1"))
    sink.wait_count(1, timeout=20)
    d.wait_log(qid, "status=sent", "relay=127.0.0.1[127.0.0.1]:%d" % sink.port)
    d.wait_log("upstream 127.0.0.1[127.0.0.1]:%d: connect:" % dead)


@case()
def test_upstream_failover_tls(t):
    """Failover with STARTTLS + AUTH: each host's name is checked, the second verifies."""
    certs = make_certs(t)
    sink = tls_sink(t, certs)
    trust(certs["ca"])
    dead = free_port()
    u = upstream(sink)
    u["upstream"].update(host=harness.DELETE, port=harness.DELETE,
                         hosts=["localhost:%d" % dead, "localhost:%d" % sink.port])
    d = t.daemon(sink, u)
    qid = submit_ok(d.port, "rcpt@example.com", make_msg(key="fo-2"))
    rec = sink.wait_count(1, timeout=20)[0]
    eq(rec["auth"], USER, "record: AUTH user")
    d.wait_log(qid, "status=sent")
    d.wait_log("upstream localhost[127.0.0.1]:%d: connect:" % dead)


@case(needs_daemon=False)
def test_upstream_user_requires_tls(t):
    """upstream.user without TLS is a configuration error: credentials never go in clear."""
    d = t.daemon(None, {"upstream": {"user": USER, "password": PASSWORD, "tls": "none"}},
                 start=False)
    r = run([harness.BIN, "-t", "-c", d.conf_path])
    eq(r.returncode, 1, "idemrelay -t exit status (stderr %r)" % r.stderr)
    check("upstream.user" in r.stderr and "requires tls" in r.stderr,
          "want an error naming upstream.user, got %r" % r.stderr)


# ------------------------------------------------ a real Postfix as the upstream (issue 12)
#
# upstream.tls_ca, tls_servername and tls_fingerprint against Postfix's own smtpd with
# STARTTLS and a certificate from a private CA, relaying on to a plain sink. Nothing of
# the system's CA store is trusted in these tests (trust(None)): only what the settings say.

def postfix_upstream(t, sink, certs):
    """postfix_upstream - a private Postfix offering STARTTLS with certs, relaying to sink"""
    from cases_postfix import Postfix
    return Postfix(t, sink.port, ["smtpd_tls_security_level=may",
                                  "smtpd_tls_cert_file=" + certs["cert"],
                                  "smtpd_tls_key_file=" + certs["key"],
                                  "smtpd_tls_loglevel=1"])


def digest(certs, what):
    """digest - "sha256:HEX" of the server certificate, or of its public key (SPKI DER)"""
    def der(cmd, data=None):
        return subprocess.run(cmd, input=data, capture_output=True, timeout=10).stdout
    if what == "cert":
        out = der(["openssl", "x509", "-in", certs["cert"], "-outform", "DER"])
    else:
        pem = der(["openssl", "x509", "-in", certs["cert"], "-noout", "-pubkey"])
        out = der(["openssl", "pkey", "-pubin", "-outform", "DER"], pem)
    check(out, "openssl gave no DER for the %s" % what)
    return "sha256:" + hashlib.sha256(out).hexdigest()


def daemon_via(t, sink, pf, host, trust_kw):
    """daemon_via - idemrelay with Postfix as its STARTTLS upstream and upstream.tls_*"""
    trust(None)
    return t.daemon(sink, {"upstream": {"host": host, "port": pf.port, "tls": "starttls",
                                        "tls_verify": True, **trust_kw}})


def delivered_via_postfix(t, certs, key, host="localhost", **kw):
    """delivered_via_postfix - a message reaches the sink through Postfix over verified TLS"""
    sink = t.sink()
    with postfix_upstream(t, sink, certs) as pf:
        d = daemon_via(t, sink, pf, host, kw)
        qid = submit_ok(d.port, "rcpt@example.com", make_msg(key=key))
        rec = sink.wait_count(1, timeout=30)[0]
        eq(rec["to"], ["rcpt@example.com"], "recipient at the sink")
        d.wait_log(qid, "status=sent", "relay=%s[127.0.0.1]:%d" % (host, pf.port))
        d.wait_log("Verified TLS connection established (STARTTLS)")
        check("TLS connection established from" in pf.log(),
              "Postfix logged no TLS connection:\n" + pf.log())


def refused_by_trust(t, certs, key, why, host="localhost", **kw):
    """refused_by_trust - deferred with dsn=4.7.5 and why in the log line, why in
    idemrelayctl show; Postfix was sent no MAIL"""
    sink = t.sink()
    with postfix_upstream(t, sink, certs) as pf:
        d = daemon_via(t, sink, pf, host, kw)
        qid = submit_ok(d.port, "rcpt@example.com", make_msg(key=key))
        d.wait_log(qid, "status=deferred", "dsn=4.7.5", why)
        time.sleep(1.5)
        # Postfix's own notices to its postmaster may reach the sink; ours may not
        eq([r for r in sink.accepted() if "rcpt@example.com" in r["to"]], [],
           "our message at the sink")
        check("from=<sender@example.org>" not in pf.log(),
              "Postfix took our message:\n" + pf.log())
        ctl = os.path.join(os.path.dirname(os.path.abspath(harness.BIN)), "idemrelayctl")
        r = run([ctl, "-c", d.conf_path, "show", qid])
        eq(r.returncode, 0, "idemrelayctl show: %s" % r.stderr)
        check("to=<rcpt@example.com> deferred (upstream localhost" in r.stdout or host != "localhost",
              "show %s: not deferred:\n%s" % (qid, r.stdout))
        check(why in r.stdout, "show %s lacks %r:\n%s" % (qid, why, r.stdout))
        return d


@case(timeout=90)
def test_upstream_postfix_tls_ca_file(t):
    """tls_ca = the private CA's file: Postfix's certificate is verified, the mail goes."""
    certs = make_certs(t)
    delivered_via_postfix(t, certs, "pf-ca-1", tls_ca=certs["ca"])


@case(timeout=90)
def test_upstream_postfix_tls_ca_dir_servername(t):
    """tls_ca = a hashed directory, host = an address, tls_servername = the certificate's
    only name: verified by that name."""
    certs = make_certs(t, names=("DNS:mail.test",), cn="mail.test", tag="mail")
    cadir = os.path.join(t.tmp, "cadir")
    os.makedirs(cadir)
    shutil.copy(certs["ca"], os.path.join(cadir, "private-ca.pem"))
    openssl("rehash", cadir, cwd=cadir)
    delivered_via_postfix(t, certs, "pf-ca-2", host="127.0.0.1", tls_ca=cadir,
                          tls_servername="mail.test")


@case(timeout=90)
def test_upstream_postfix_untrusted(t):
    """No tls_ca and a system store without the private CA: deferred with the reason."""
    certs = make_certs(t)
    refused_by_trust(t, certs, "pf-untrusted",
                     "certificate verify failed: unable to get local issuer certificate")


@case(timeout=90)
def test_upstream_postfix_other_ca(t):
    """tls_ca names another CA than the one that signed Postfix's certificate."""
    certs = make_certs(t)
    other = os.path.join(t.tmp, "other-ca")
    os.makedirs(other)
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=another CA", cwd=other)
    refused_by_trust(t, certs, "pf-other-ca",
                     "certificate verify failed: unable to get local issuer certificate",
                     tls_ca=os.path.join(other, "ca.pem"))


@case(timeout=90)
def test_upstream_postfix_wrong_name(t):
    """A certificate from the trusted CA for another name: the name is the reason."""
    certs = make_certs(t, names=("DNS:other.example",), cn="other.example", tag="other")
    refused_by_trust(t, certs, "pf-name", "certificate name mismatch: wanted localhost",
                     tls_ca=certs["ca"])


@case(timeout=90)
def test_upstream_postfix_address_needs_servername(t):
    """host = an address, no tls_servername, a certificate with only a DNS name."""
    certs = make_certs(t, names=("DNS:mail.test",), cn="mail.test", tag="mail")
    refused_by_trust(t, certs, "pf-addr", "certificate name mismatch: wanted 127.0.0.1",
                     host="127.0.0.1", tls_ca=certs["ca"])


@case(timeout=90)
def test_upstream_postfix_pinned_cert(t):
    """tls_fingerprint pins the certificate: accepted with no CA trusted and another
    name on it (the pin is sufficient)."""
    certs = make_certs(t, names=("DNS:other.example",), cn="other.example", tag="other")
    delivered_via_postfix(t, certs, "pf-pin-1", tls_fingerprint=[digest(certs, "cert")])


@case(timeout=90)
def test_upstream_postfix_pinned_pubkey(t):
    """tls_fingerprint pins the public key (SPKI), in the colon-separated upper-case
    spelling openssl prints, next to a pin that does not match."""
    certs = make_certs(t)
    hexd = digest(certs, "pubkey")[7:].upper()
    pin = "sha256:" + ":".join(hexd[i:i + 2] for i in range(0, 64, 2))
    delivered_via_postfix(t, certs, "pf-pin-2",
                          tls_fingerprint=["sha256:" + "00" * 32, pin])


@case(timeout=90)
def test_upstream_postfix_wrong_pin(t):
    """A pin that matches nothing: refused even though tls_ca trusts the certificate
    (the pin is required), and the reason gives the digests to pin."""
    certs = make_certs(t)
    d = refused_by_trust(t, certs, "pf-pin-3", "certificate fingerprint mismatch",
                         tls_ca=certs["ca"], tls_fingerprint=["sha256:" + "ab" * 32])
    d.wait_log("certificate fingerprint mismatch: the certificate is %s, its public key %s"
               % (digest(certs, "cert"), digest(certs, "pubkey")))
