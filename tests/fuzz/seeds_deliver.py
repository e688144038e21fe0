#!/usr/bin/env python3
"""seeds_deliver.py - write the seed corpus of fuzz_deliver (tests/fuzz/corpus/deliver):
an upstream that resets after each reply of a transaction (1-3 recipients, the first
RCPT answered 250 or 451, with and without PIPELINING), and replies libESMTP 1.1.0
cannot read in the middle of a pipeline. The script's opcodes are in fuzz_deliver.c."""

import os
import sys

READ, REPLY, RAW, CONTENT, RESET, CLOSE, AUTO, SHUT = range(8)
GREET, EHLO_PIPE, EHLO_UTF8, EHLO_PLAIN, MAIL_OK, RCPT_OK, TEMP, PERM, GO, QUEUED, BYE, \
    GOING, NOVALID, MULTI, WHAT, BARE = range(16)


def header(msgs, rcpts, fail_second=False, slow=False, starttls=False, params=0):
    """params: 1 BODY=8BITMIME, 2 SMTPUTF8 (with a UTF-8 Subject)"""
    b1 = params << 6
    for i, r in enumerate(rcpts):
        b1 |= (r - 1) << (2 * i)
    return bytes([(msgs - 1) | (4 if fail_second else 0) | (8 if slow else 0)
                  | (16 if starttls else 0), b1])


def raw(data):
    out = b""
    while data:
        out += bytes([RAW, len(data[:63])]) + data[:63]
        data = data[63:]
    return out


def opening(ehlo):
    return bytes([REPLY, GREET, READ, REPLY, ehlo, READ])


def reset_at(n, k, mode, ehlo):
    """the transaction's replies in order, reset after the k-th (1: MAIL)"""
    tx = [MAIL_OK] + [TEMP if (mode == 451 and i == 0) else RCPT_OK for i in range(n)] + [GO, QUEUED]
    s = opening(ehlo)
    for j, rep in enumerate(tx):
        if 0 < j < len(tx) - 1:
            s += bytes([READ])
        elif j == len(tx) - 1:
            s += bytes([CONTENT])
        s += bytes([REPLY, rep])
        if j + 1 == k:
            return s + bytes([RESET])
    return s + bytes([AUTO, 15])


def seeds():
    out = {}
    out["normal-1x1"] = header(1, [1]) + bytes([REPLY, GREET, AUTO, 15])
    out["normal-3x3"] = header(3, [3, 3, 3]) + bytes([REPLY, GREET, AUTO, 15, AUTO, 15])
    for ehlo, name in ((EHLO_PIPE, "pipe"), (EHLO_PLAIN, "nopipe")):
        for n in (1, 2, 3):
            for k in range(1, n + 4):
                for mode in (250, 451):
                    out["reset-%s-n%dk%d-%d" % (name, n, k, mode)] = \
                        header(1, [n]) + reset_at(n, k, mode, ehlo)
    out["reset-after-greeting"] = header(1, [3]) + bytes([REPLY, GREET, RESET])
    out["reset-after-ehlo"] = header(1, [3]) + opening(EHLO_PIPE) + bytes([RESET])
    base = header(1, [3]) + opening(EHLO_PIPE) + bytes([REPLY, MAIL_OK, READ, REPLY, RCPT_OK])
    out["garbage-in-pipeline"] = base + raw(b"garbage\r\n") + bytes([REPLY, RCPT_OK, REPLY, GO, CLOSE])
    out["bare-code-in-pipeline"] = base + bytes([REPLY, BARE, REPLY, RCPT_OK, REPLY, GO, CLOSE])
    out["enhanced-mismatch"] = base + raw(b"250-2.1.5 a\r\n250 2.1.0 b\r\n") + \
        bytes([REPLY, RCPT_OK, REPLY, GO, CLOSE])
    out["code-mismatch"] = base + raw(b"250-a\r\n251 b\r\n") + bytes([REPLY, GO, CLOSE])
    out["unfinished-line-reset"] = base + raw(b"250 2.1") + bytes([RESET])
    out["421-then-close"] = header(1, [3]) + opening(EHLO_PIPE) + \
        bytes([REPLY, MAIL_OK, READ, REPLY, GOING, CLOSE])
    out["close-after-dot"] = header(1, [2]) + opening(EHLO_PIPE) + \
        bytes([REPLY, MAIL_OK, READ, REPLY, RCPT_OK, READ, REPLY, RCPT_OK, READ, REPLY, GO,
               CONTENT, CLOSE])
    out["reset-mid-content"] = header(1, [1]) + opening(EHLO_PIPE) + \
        bytes([REPLY, MAIL_OK, READ, REPLY, RCPT_OK, READ, REPLY, GO, RESET])
    out["unsolicited-before-ehlo"] = header(1, [1]) + bytes([REPLY, GREET, REPLY, MAIL_OK, AUTO, 15])
    out["shut-after-greeting"] = header(1, [2]) + bytes([REPLY, GREET, SHUT, READ, READ])
    out["mark-fails-second"] = header(2, [2, 2], True) + bytes([REPLY, GREET, AUTO, 15])
    # the first message refused at RCPT: the second's content and mark come with no dot
    # awaited; its mark fails, and the third must not be charged (40 AUTOs: the replies
    # may come ~40 ms apart, each AUTO waits 5 ms for a command)
    out["mark-fails-second-of-three"] = header(3, [1, 1, 1], True) + \
        bytes([REPLY, GREET, AUTO, 1, AUTO, 1, READ, REPLY, PERM, READ, REPLY, NOVALID]) + \
        bytes([AUTO, 15] * 40)
    # the same, the second's mark failing after longer than upstream.timeout: the bridge's
    # deadline passes meanwhile (the server stays silent: 300 AUTOs of 5 ms at the most
    # each), and is not the reason its deferral gives
    out["mark-fails-second-slowly"] = header(2, [1, 1], True, True) + \
        bytes([REPLY, GREET, AUTO, 1, AUTO, 1, READ, REPLY, PERM, READ, REPLY, NOVALID]) + \
        bytes([AUTO, 15] * 300)
    out["reset-second-message"] = header(2, [3, 3]) + bytes([REPLY, GREET, AUTO, 7, READ,
                                                             REPLY, RCPT_OK, RESET])
    out["no-valid-recipients"] = header(1, [2]) + opening(EHLO_PIPE) + \
        bytes([REPLY, MAIL_OK, READ, REPLY, PERM, READ, REPLY, PERM, READ, REPLY, GO, READ,
               REPLY, NOVALID, AUTO, 3])
    out["ehlo-500-helo"] = header(1, [1]) + bytes([REPLY, GREET, READ, REPLY, WHAT, AUTO, 15])
    out["multi-line-rcpt"] = base + bytes([REPLY, MULTI, REPLY, RCPT_OK, REPLY, GO, CONTENT,
                                           REPLY, QUEUED, AUTO, 3])
    out["utf8-chunking-ehlo"] = header(1, [1]) + opening(EHLO_UTF8) + bytes([AUTO, 15])
    # the bridge's own STARTTLS dialogue (EHLO_UTF8 offers STARTTLS); the script
    # never does TLS, so the handshake fails after a 220
    tls = header(1, [1], starttls=True) + opening(EHLO_UTF8)
    out["starttls-220-then-garbage"] = tls + bytes([REPLY, GREET]) + raw(b"not TLS\r\n") + \
        bytes([CLOSE])
    out["starttls-220-then-injected"] = tls + raw(b"220 go\r\n250 injected\r\n") + bytes([CLOSE])
    out["starttls-refused"] = tls + bytes([REPLY, TEMP, READ])
    out["starttls-not-offered"] = header(1, [1], starttls=True) + opening(EHLO_PIPE) + \
        bytes([READ])
    out["starttls-bad-greeting"] = header(1, [1], starttls=True) + raw(b"220-a\r\n221 b\r\n")
    # BODY=8BITMIME and SMTPUTF8 added by the filter where offered (EHLO_PIPE: 8BITMIME,
    # EHLO_UTF8: SMTPUTF8), and a message that needs SMTPUTF8 where it is not
    out["params-8bit"] = header(2, [1, 2], params=1) + bytes([REPLY, GREET, AUTO, 15])
    out["params-utf8-offered"] = header(1, [2], params=3) + opening(EHLO_UTF8) + \
        bytes([AUTO, 15])
    out["params-utf8-not-offered"] = header(2, [1, 1], params=2) + bytes([REPLY, GREET, AUTO, 15])
    # EHLO keywords after blanks, which libESMTP reads (8d0cc3d): CHUNKING hidden there
    # too, and STARTTLS offered there to the bridge's own dialogue
    out["ehlo-keywords-after-blanks"] = header(2, [2, 1], params=1) + \
        bytes([REPLY, GREET, READ]) + \
        raw(b"250-x\r\n250-  CHUNKING\r\n250- \tPIPELINING\r\n250 8BITMIME\r\n") + \
        bytes([AUTO, 15])
    out["starttls-after-blanks"] = header(1, [1], starttls=True) + bytes([REPLY, GREET, READ]) + \
        raw(b"250-x\r\n250-\t STARTTLS\r\n250 PIPELINING\r\n") + bytes([READ]) + \
        raw(b"220 go\r\n") + bytes([CLOSE])
    # DSN parameters (byte 0 bits 3-7 = 00011): an ENVID and an ORCPT libESMTP can
    # encode again, and ones it cannot (c75f62c: 87 "+" in the ENVID, 90 blanks in the
    # ORCPT address, each 3 octets as xtext, past its 256: "(null)" upstream before)
    def dsn(msgs, rcpts, envid, orcpt):
        h = bytearray(header(msgs, rcpts))
        h[0] |= 0x18
        return bytes(h) + bytes([len(envid), len(orcpt)]) + envid + orcpt
    out["dsn-params"] = dsn(1, [2], bytes(b - 32 for b in b"env-1"),
                            bytes(b - 32 for b in b"x+y=z@example.org")) + \
        bytes([REPLY, GREET, AUTO, 15])
    out["dsn-envid-past-libesmtp"] = dsn(1, [1], bytes([ord("+") - 32]) * 87, b"") + \
        bytes([REPLY, GREET, AUTO, 15])
    out["dsn-orcpt-past-libesmtp"] = dsn(1, [1], b"", bytes([0]) * 90) + \
        bytes([REPLY, GREET, AUTO, 15])
    # the upstream group has a rate object (byte 0 bits 3-7 = 00100): a throttling
    # reply to the first of three pipelined RCPTs cuts the session with three replies
    # owed (8e78f96: libESMTP crashed when the bridge hung up then), one to MAIL, and
    # a greeting's 421
    def throttled(msgs, rcpts):
        h = bytearray(header(msgs, rcpts))
        h[0] |= 0x20
        return bytes(h)
    out["throttle-first-of-three-rcpts"] = throttled(1, [3]) + opening(EHLO_PIPE) + \
        bytes([REPLY, MAIL_OK, READ]) + raw(b"451 4.7.0 rate exceeded\r\n") + \
        bytes([READ] * 8)
    out["throttle-at-mail"] = throttled(2, [1, 1]) + opening(EHLO_PIPE) + \
        raw(b"450 4.2.1 receiving mail at a rate that prevents delivery\r\n") + bytes([AUTO, 15])
    out["throttle-greeting-421"] = throttled(1, [1]) + bytes([REPLY, GOING, READ, AUTO, 15])
    # implicit TLS and upstream.user (byte 0 bits 3-7 = 00101): the script runs inside
    # TLS; libesmtp's SASL client logs in with what the EHLO reply offers, the guard
    # cuts a MAIL before a 2xx to AUTH, and a 334 after the client's "*" (895e749)
    def auth(msgs, rcpts):
        h = bytearray(header(msgs, rcpts))
        h[0] |= 0x28
        return bytes(h)
    offer = raw(b"250-fuzz\r\n250-AUTH PLAIN LOGIN\r\n250 PIPELINING\r\n")
    out["auth-plain-ok"] = auth(1, [2]) + bytes([REPLY, GREET, READ]) + offer + \
        bytes([READ]) + raw(b"235 2.7.0 ok\r\n") + bytes([AUTO, 15])
    out["auth-login-challenges"] = auth(1, [1]) + bytes([REPLY, GREET, READ]) + \
        raw(b"250-fuzz\r\n250 AUTH LOGIN\r\n") + bytes([READ]) + \
        raw(b"334 VXNlcm5hbWU6\r\n") + bytes([READ]) + raw(b"334 UGFzc3dvcmQ6\r\n") + \
        bytes([READ]) + raw(b"235 2.7.0 ok\r\n") + bytes([AUTO, 15])
    out["auth-refused"] = auth(1, [3]) + bytes([REPLY, GREET, READ]) + offer + \
        bytes([READ]) + raw(b"535 5.7.8 bad credentials\r\n") + bytes([AUTO, 15])
    out["auth-not-offered"] = auth(1, [1]) + opening(EHLO_PIPE) + bytes([AUTO, 15])
    out["auth-334-after-cancel"] = auth(1, [1]) + bytes([REPLY, GREET, READ]) + \
        raw(b"250-fuzz\r\n250 AUTH LOGIN\r\n") + bytes([READ]) + raw(b"334 ?=?=\r\n") + \
        bytes([READ]) + raw(b"334 again\r\n") + bytes([READ, AUTO, 15])
    return out


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__),
                                                           "corpus", "deliver")
    os.makedirs(d, exist_ok=True)
    for name, data in seeds().items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
