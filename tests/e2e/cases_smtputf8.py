"""SMTPUTF8 (RFC 6531-6533, SPEC section 6): UTF-8 addresses and headers, end to end."""

import base64
import email.message
import os
import smtplib
import subprocess
import time

from harness import (Raw, case, check, check_relayed, eq, expect_reply, make_msg, qid_of,
                     render_conf, submit_ok, wait_until)
from cases_ops import ctl, ctl_json
from cases_postfix import Postfix

U8_FROM = "用户@例子.测试"
U8_TO = "élève@école.example"
U8_SUBJECT = "Grüße, 你好"


def u8(s):
    """u8 - the sink records lines as latin-1: back to the UTF-8 text"""
    return s.encode("latin-1").decode("utf-8")


def lat(s):
    """lat - text as the harness reads the daemon's log (UTF-8 octets as latin-1)"""
    return s.encode("utf-8").decode("latin-1")


def u8_msg(key, subject=U8_SUBJECT, frm=U8_FROM, to=U8_TO, body="Hej då.\r\n"):
    """u8_msg - a message with raw UTF-8 headers (RFC 6532), as bytes"""
    return make_msg(key=key, subject=subject, frm=frm, to=to, body=body).replace(
        b"\r\nMIME-Version", b"\r\nContent-Type: text/plain; charset=utf-8\r\nMIME-Version")


def raw_cmd(c, line):
    """raw_cmd - one command line as UTF-8 octets; the reply"""
    c.send(line.encode("utf-8") + b"\r\n")
    return c.reply()


def u8_daemon(t, sink, listen=None, conf=None):
    """u8_daemon - a daemon with a control socket; listen: extra listen[0] settings"""
    over = {"control": os.path.join(t.tmp, "ctl.sock")}
    over.update(conf or {})
    d = t.daemon(sink, over, start=False)
    if listen:
        d.conf["listen"] = [dict({"address": "127.0.0.1", "port": d.port}, **listen)]
        with open(d.conf_path, "w") as f:
            f.write(render_conf(d.conf))
    return d.start()


@case()
def test_smtputf8_smtplib(t):
    """smtplib's SMTPUTF8 mail option: UTF-8 sender and recipient accepted, logged, shown"""
    sink = t.sink()
    d = u8_daemon(t, sink)
    msg = u8_msg("u8-smtplib-1")
    with smtplib.SMTP("127.0.0.1", d.port, timeout=20) as s:
        s.ehlo("client.test")
        check(s.has_extn("smtputf8"), "EHLO offers SMTPUTF8: %r" % s.esmtp_features)
        s.sendmail(U8_FROM, [U8_TO], msg, mail_options=["SMTPUTF8"])
    line = d.wait_log("smtputf8=yes", "status=queued")[0]
    qid = line.split(": ")[1]
    check(("from=<%s>" % lat(U8_FROM)) in line, "UTF-8 sender in the log: %r" % line)
    check(lat(U8_TO) in line, "UTF-8 recipient in the log: %r" % line)
    text = ctl(d, "show", qid).stdout
    check("SMTPUTF8" in text and U8_FROM in text, "show tells SMTPUTF8: %r" % text)
    eq(ctl_json(d, "show", qid)["messages"][0]["smtputf8"], True, "show --json smtputf8")
    # a resubmission with the same (ASCII) key: the same QID, one copy queued
    with smtplib.SMTP("127.0.0.1", d.port, timeout=20) as s:
        s.ehlo("client.test")
        s.mail(U8_FROM, ["SMTPUTF8"])
        s.rcpt(U8_TO)
        code, text = s.data(msg)
    eq(code, 250, "duplicate's reply")
    eq(qid_of(text.decode()), qid, "duplicate answered with the first QID")
    # a plain ASCII message is not marked
    qid2 = submit_ok(d.port, "a@example.com", make_msg(key="u8-ascii-1"))
    check(not d.log_lines(qid2, "smtputf8="), "ASCII message marked smtputf8")
    eq(ctl_json(d, "show", qid2)["messages"][0]["smtputf8"], False, "show --json plain")


@case()
def test_smtputf8_send_message(t):
    """smtplib's send_message adds SMTPUTF8 by itself for UTF-8 addresses"""
    sink = t.sink()
    d = u8_daemon(t, sink)
    m = email.message.EmailMessage()
    m["From"] = U8_FROM
    m["To"] = U8_TO
    m["Subject"] = U8_SUBJECT
    m["X-Idempotency-Key"] = "u8-send-message-1"
    m.set_content("Hej då.\n")
    with smtplib.SMTP("127.0.0.1", d.port, timeout=20) as s:
        s.ehlo("client.test")
        s.send_message(m)
    d.wait_log("smtputf8=yes", "status=queued", lat(U8_TO))


@case()
def test_smtputf8_key_header(t):
    """the key header stays 1-200 printable ASCII; UTF-8 elsewhere in the headers is fine"""
    sink = t.sink()
    d = u8_daemon(t, sink)
    with Raw(d.port) as c:
        c.cmd("EHLO client.test")
        expect_reply(raw_cmd(c, "MAIL FROM:<a@example.org> SMTPUTF8"), 250)
        expect_reply(raw_cmd(c, "RCPT TO:<b@example.com>"), 250)
        expect_reply(raw_cmd(c, "DATA"), 354)
        c.send(u8_msg("clé-1", frm="a@example.org", to="b@example.com") + b".\r\n")
        expect_reply(c.reply(), 550, "5.7.0", "UTF-8 key value")
    # the same bytes make the same key, whatever else the headers carry
    qid = submit_ok(d.port, "b@example.com", u8_msg("u8-key-2", frm="a@example.org",
                                                     to="b@example.com"),
                    sender="a@example.org", mail_opts=["SMTPUTF8"])
    again = submit_ok(d.port, "b@example.com",
                      u8_msg("u8-key-2", subject="Другая тема", frm="a@example.org",
                             to="b@example.com"), sender="a@example.org")
    eq(again, qid, "same key, other UTF-8 subject, no SMTPUTF8: same QID")


@case()
def test_smtputf8_raw_socket(t):
    """a raw client with 用户@例子.测试: 250 with SMTPUTF8, 553 5.6.7 without"""
    sink = t.sink()
    d = t.daemon(sink)
    with Raw(d.port) as c:
        code, text = c.cmd("EHLO client.test")
        check("SMTPUTF8" in text.split("\n"), "EHLO lists SMTPUTF8: %r" % text)
        expect_reply(raw_cmd(c, "MAIL FROM:<%s>" % U8_FROM), 553, "5.6.7", "undeclared sender")
        expect_reply(raw_cmd(c, "MAIL FROM:<sender@example.org>"), 250)
        expect_reply(raw_cmd(c, "RCPT TO:<%s>" % U8_FROM), 553, "5.6.7", "undeclared recipient")
        expect_reply(raw_cmd(c, "RSET"), 250)
        expect_reply(raw_cmd(c, "MAIL FROM:<%s> SMTPUTF8" % U8_FROM), 250, "2.1.0")
        expect_reply(raw_cmd(c, "RCPT TO:<%s>" % U8_FROM), 250, "2.1.5")
        # invalid UTF-8 stays bad syntax: an overlong CR, a surrogate, a C1 control
        for bad in (b"a\xc0\x8db@x", b"\xed\xa0\x80@x", b"a\xc2\x85@x", b"a@\xf4\x90\x80\x80"):
            c.send(b"RCPT TO:<" + bad + b">\r\n")
            expect_reply(c.reply(), 501, "5.1.3", "RCPT %r" % bad)
        expect_reply(raw_cmd(c, "DATA"), 354)
        c.send(u8_msg("u8-raw-1", frm=U8_FROM, to=U8_FROM) + b".\r\n")
        qid = qid_of(expect_reply(c.reply(), 250, "2.0.0", "end of DATA"))
        expect_reply(raw_cmd(c, "QUIT"), 221)
    line = d.wait_log(qid, "status=queued")[0]
    check("smtputf8=yes" in line, "acceptance line says smtputf8=yes: %r" % line)


@case()
def test_smtputf8_off(t):
    """listen[].smtputf8 = false: not offered, the parameter is unknown, UTF-8 refused"""
    sink = t.sink()
    d = u8_daemon(t, sink, listen={"smtputf8": False})
    with Raw(d.port) as c:
        code, text = c.cmd("EHLO client.test")
        check("SMTPUTF8" not in text, "EHLO must not offer SMTPUTF8: %r" % text)
        expect_reply(raw_cmd(c, "MAIL FROM:<a@example.org> SMTPUTF8"), 555, "5.5.4")
        expect_reply(raw_cmd(c, "MAIL FROM:<%s>" % U8_FROM), 553, "5.6.7")
        expect_reply(raw_cmd(c, "MAIL FROM:<a@example.org>"), 250)
        expect_reply(raw_cmd(c, "RCPT TO:<%s>" % U8_TO), 553, "5.6.7")


def sent_raw(d, mail, rcpts, msg, opts=("SMTPUTF8",)):
    """sent_raw - one message over a raw socket, UTF-8 addresses as octets; the QID"""
    with Raw(d.port) as c:
        c.cmd("EHLO client.test")
        expect_reply(raw_cmd(c, "MAIL FROM:<%s>%s" % (mail, "".join(" " + o for o in opts))),
                     250, what="MAIL")
        for r in rcpts:
            expect_reply(raw_cmd(c, "RCPT TO:<%s>" % r), 250, what="RCPT")
        expect_reply(raw_cmd(c, "DATA"), 354)
        c.send(msg + b".\r\n")
        return qid_of(expect_reply(c.reply(), 250, "2.0.0", "end of DATA"))


@case()
def test_smtputf8_upstream_offers(t):
    """upstream offers SMTPUTF8: the MAIL carries it (libesmtp does not know it: the
    bridge adds it), addresses and content pass unchanged; plain mail goes without it"""
    sink = t.sink(smtputf8=True)
    d = u8_daemon(t, sink)
    msg = u8_msg("u8-up-1")
    qid = sent_raw(d, U8_FROM, [U8_TO], msg)
    plain = submit_ok(d.port, "a@example.com", make_msg(key="u8-up-plain"))
    recs = sink.wait_count(2)
    by_key = {r["mail_from"] != "sender@example.org": r for r in recs}
    rec = by_key[True]
    eq(u8(rec["mail_from"]), U8_FROM, "UTF-8 sender upstream")
    eq([u8(a) for a in rec["to"]], [U8_TO], "UTF-8 recipient upstream")
    check("SMTPUTF8" in [p.upper() for p in rec["mail_params"]],
          "MAIL upstream has SMTPUTF8: %r" % rec["mail_params"])
    check_relayed(base64.b64decode(rec["data_b64"]), msg, qid)
    eq([p for p in by_key[False]["mail_params"] if p.upper() == "SMTPUTF8"], [],
       "plain message sent without SMTPUTF8")
    d.wait_log(qid, "status=sent")
    d.wait_log(plain, "status=sent")


@case()
def test_smtputf8_upstream_lacks_it(t):
    """upstream without SMTPUTF8: a UTF-8 envelope or header bounces 5.6.7 with a DSN;
    a declared but all-ASCII message goes without SMTPUTF8 (Postfix's behaviour)"""
    sink = t.sink()
    d = u8_daemon(t, sink)
    q_env = sent_raw(d, "s@example.org", [U8_TO], make_msg(key="u8-lack-env"))
    q_hdr = sent_raw(d, "s@example.org", ["b@example.com"],
                     u8_msg("u8-lack-hdr", frm="s@example.org", to="b@example.com"))
    q_ok = sent_raw(d, "s@example.org", ["b@example.com"], make_msg(key="u8-lack-ascii"))
    for q in (q_env, q_hdr):
        line = d.wait_log(q, "status=bounced")[0]
        check("dsn=5.6.7" in line and "SMTPUTF8 is required, but was not offered" in line,
              "bounce line: %r" % line)
    d.wait_log(q_ok, "status=sent")
    recs = sink.wait_count(3)      # q_ok and the two DSNs to s@example.org
    ok = [r for r in recs if r["mail_from"] == "s@example.org"]
    eq(len(ok), 1, "only the ASCII message went upstream")
    eq([p for p in ok[0]["mail_params"] if p.upper() == "SMTPUTF8"], [], "sent without SMTPUTF8")
    dsns = [r for r in recs if r["mail_from"] == ""]
    eq(len(dsns), 2, "two DSNs to the sender")
    for r in dsns:
        data = base64.b64decode(r["data_b64"])
        check(b"5.6.7" in data and b"message/global-delivery-status" in data,
              "RFC 6533 DSN naming 5.6.7: %r" % data[:800])
        eq([p for p in r["mail_params"] if p.upper() == "SMTPUTF8"], [],
           "an all-ASCII DSN header block goes without SMTPUTF8")


@case()
def test_smtputf8_upstream_helo_only(t):
    """upstream that refuses EHLO (libesmtp falls back to HELO) offers no SMTPUTF8
    either: a UTF-8 envelope bounces 5.6.7, never goes out without SMTPUTF8; an
    ASCII one is sent"""
    sink = t.sink(ehlo="refuse")
    d = u8_daemon(t, sink)
    q_env = sent_raw(d, "s@example.org", [U8_TO], make_msg(key="u8-helo-env"))
    q_ok = sent_raw(d, "s@example.org", ["b@example.com"], make_msg(key="u8-helo-ascii"))
    line = d.wait_log(q_env, "status=bounced")[0]
    check("dsn=5.6.7" in line and "SMTPUTF8 is required, but was not offered" in line,
          "bounce line: %r" % line)
    d.wait_log(q_ok, "status=sent")
    recs = sink.wait_count(2)      # q_ok and the DSN to s@example.org
    eq([r["to"] for r in recs if r["mail_from"] == "s@example.org"], [["b@example.com"]],
       "only the ASCII message went upstream")


@case()
def test_smtputf8_dsn_to_utf8_sender(t):
    """a bounce for an SMTPUTF8 message is RFC 6533's, and goes to the UTF-8 sender
    with SMTPUTF8 itself"""
    sink = t.sink(smtputf8=True)
    d = u8_daemon(t, sink)
    qid = sent_raw(d, U8_FROM, ["permfail-u8@example.com"],
                   u8_msg("u8-dsn-1", to="permfail-u8@example.com"))
    d.wait_log(qid, "status=bounced")
    rec = sink.wait_count(1, pred=lambda r: r["mail_from"] == "")[0]
    eq([u8(a) for a in rec["to"]], [U8_FROM], "DSN to the UTF-8 sender")
    check("SMTPUTF8" in [p.upper() for p in rec["mail_params"]],
          "DSN sent with SMTPUTF8: %r" % rec["mail_params"])
    data = base64.b64decode(rec["data_b64"])
    for want in (b"report-type=global-delivery-status", b"message/global-delivery-status",
                 b"Final-Recipient: rfc822; permfail-u8@example.com",
                 ("To: <%s>" % U8_FROM).encode(), b"Content-Type: message/global\r\n"):
        check(want in data, "DSN lacks %r: %r" % (want, data[:1500]))


# ---------------------------------------------------------------- a real Postfix

def pf_sendmail(pf, msg):
    """pf_sendmail - submit with Postfix's sendmail(1) (the pickup path, which its
    default smtputf8_autodetect_classes marks as SMTPUTF8 when a header is UTF-8)"""
    r = subprocess.run(["/usr/sbin/sendmail", "-C", os.path.join(pf.dir, "etc"), "-f",
                        "app@example.org", "-t"], input=msg, capture_output=True, timeout=30)
    check(r.returncode == 0, "sendmail: rc %d: %s" % (r.returncode, r.stderr))


@case(timeout=90)
def test_smtputf8_postfix_in_front_sendmail(t):
    """Postfix in front (README), default autodetect classes: sendmail with a UTF-8
    Subject, twice with one key: no 5.6.7 bounce, one delivery, the second answered
    with the first QID"""
    sink = t.sink()
    d = u8_daemon(t, sink)
    msg = (("From: app@example.org\r\nTo: b@example.com\r\nSubject: %s\r\n"
            "X-Idempotency-Key: u8-postfix-1\r\nMIME-Version: 1.0\r\n"
            "Content-Type: text/plain; charset=utf-8\r\n\r\nHej då.\r\n") % U8_SUBJECT
           ).encode("utf-8")
    with Postfix(t, d.port) as pf:
        pf_sendmail(pf, msg)
        wait_until(lambda: [x for x in pf.deliveries() if x[4] != "deferred"], 30,
                   "Postfix to relay the first copy", interval=0.2)
        pf_sendmail(pf, msg)
        wait_until(lambda: len([x for x in pf.deliveries() if x[4] != "deferred"]) >= 2, 30,
                   "Postfix to relay the second copy", interval=0.2)
        got = [x for x in pf.deliveries() if x[4] != "deferred"]
        eq([x[4] for x in got], ["sent", "sent"], "Postfix's outcomes: %r" % got)
        q1 = qid_of(got[0][5], "idemrelay's first reply to Postfix")
        eq(qid_of(got[1][5], "idemrelay's second reply"), q1, "second copy: the first QID")
        check("SMTPUTF8 is required" not in pf.log(), "Postfix bounced 5.6.7")
    check(d.log_lines(q1, "smtputf8=yes", "status=queued"),
          "Postfix declared SMTPUTF8 and idemrelay logged it")
    time.sleep(1.5)
    eq(len(sink.accepted()), 1, "one delivery upstream")


def pf_upstream(t, sink, enable):
    """pf_upstream - a Postfix as idemrelay's upstream (smtputf8_enable as given),
    relaying to the sink, which offers SMTPUTF8"""
    return Postfix(t, sink.port, ["smtputf8_enable=%s" % ("yes" if enable else "no")])


@case(timeout=90)
def test_smtputf8_postfix_upstream(t):
    """Postfix upstream with smtputf8_enable = yes: a UTF-8 envelope goes with SMTPUTF8
    and arrives; with no: it bounces 5.6.7, an ASCII one still goes"""
    sink = t.sink(smtputf8=True)
    with pf_upstream(t, sink, True) as pf:
        d = u8_daemon(t, None, conf={"upstream": {"port": pf.port}})
        qid = sent_raw(d, U8_FROM, [U8_TO], u8_msg("u8-pfup-1"))
        d.wait_log(qid, "status=sent", timeout=30)
        rec = sink.wait_count(1, timeout=30)[0]
        eq([u8(a) for a in rec["to"]], [U8_TO], "UTF-8 recipient through Postfix")
        check("SMTPUTF8" in [p.upper() for p in rec["mail_params"]],
              "Postfix passed SMTPUTF8 on: %r" % rec["mail_params"])
        d.stop()
    with pf_upstream(t, sink, False) as pf:
        d = u8_daemon(t, None, conf={"upstream": {"port": pf.port}})
        q_u8 = sent_raw(d, "s@example.org", [U8_TO], make_msg(key="u8-pfup-2"))
        q_ok = sent_raw(d, "s@example.org", ["b@example.com"], make_msg(key="u8-pfup-3"))
        line = d.wait_log(q_u8, "status=bounced", timeout=30)[0]
        check("dsn=5.6.7" in line and "not offered" in line, "bounce: %r" % line)
        d.wait_log(q_ok, "status=sent", timeout=30)
        d.stop()
