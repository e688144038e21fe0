"""SIGHUP: what can change while running is taken from the configuration file again."""

import os
import signal

from cases_ops import ctl_json
from harness import case, check, eq, make_msg, merge, render_conf, submit, wait_until


def rewrite(d, over):
    """rewrite - change the daemon's configuration file (not the running daemon)"""
    d.conf = merge(d.conf, over)
    with open(d.conf_path, "w") as f:
        f.write(render_conf(d.conf))


def hup(d, n):
    """hup - SIGHUP, then wait for the n-th reload line"""
    d.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: len(d.log_lines("reload:", "networks")) + len(d.log_lines("reload:", "keeping"))
               >= n, 10, "reload #%d in the log" % n)


@case()
def test_sighup_reloads_networks_and_limits(t):
    sink = t.sink()
    d = t.daemon(sink, {"access": {"networks": ["10.0.0.0/8"]}})
    r = submit(d.port, "a@example.com", make_msg(key="hup-1"))
    eq(r.rcpts[0][0], 554, "RCPT from outside access.networks")

    rewrite(d, {"access": {"networks": ["127.0.0.0/8"]}, "limits": {"message_size": "20K"}})
    hup(d, 1)
    r = submit(d.port, "a@example.com", make_msg(key="hup-1"))
    eq(r.code, 250, "after the reload 127.0.0.1 may relay (%r)" % (r,))
    big = make_msg(key="hup-2", body="x" * 100 + "\r\n" * 300 + "y" * 30000 + "\r\n")
    r = submit(d.port, "a@example.com", big)
    eq(r.code, 552, "message over the reloaded message_size (%r)" % (r,))
    sink.wait_count(1)

    # a configuration that does not load changes nothing
    with open(d.conf_path, "a") as f:
        f.write("no_such_setting = 1;\n")
    hup(d, 2)
    check(d.log_lines("reload:", "keeping the configuration in use"), "bad config reported")
    r = submit(d.port, "a@example.com", make_msg(key="hup-3"))
    eq(r.code, 250, "still relaying after a failed reload (%r)" % (r,))
    sink.wait_count(2)


@case()
def test_sighup_names_what_needs_a_restart(t):
    """A changed setting SIGHUP cannot apply gets one warning each, as postfix
    reload does for master.cf (issue 26 part 3); what it applies gets none,
    and a reload with nothing of the kind changed warns of nothing."""
    sink = t.sink()
    d = t.daemon(sink)
    rewrite(d, {"limits": {"recipients": 7}, "retry": {"first": "2s"}})
    hup(d, 1)
    eq(d.log_lines("warning: reload:"), [], "warnings for settings a reload applies")
    rewrite(d, {"hostname": "renamed.test", "store": {"key_ttl": "2h"},
                "upstream": {"connections": 3}, "limits": {"recipients": 8}})
    hup(d, 2)
    for name in ("hostname", "store", "upstream"):
        d.wait_log("warning: reload: %s changed: it takes a restart; keeping the one in use"
                   % name)
    eq(len(d.log_lines("warning: reload:")), 3, "one warning per setting")
    r = submit(d.port, ["a%d@example.com" % i for i in range(9)], make_msg(key="hup-r"))
    eq([c for c, _ in r.rcpts].count(452), 1, "the reloaded recipients limit (8) applies")
    check(r.code == 250 and "by renamed.test" not in str(sink.wait_count(1)[0]["data"]),
          "the hostname in use is the old one")


@case()
def test_sighup_reloads_route_rates(t):
    """A route's upstream rate and recipient_rate are read again on SIGHUP as the
    default upstream's are (a route's upstream group takes its settings): without a
    warning, and for the routes in use, found by name; a route added or removed
    still takes a restart (one warning), and the rates of those kept apply."""
    sink = t.sink()

    def route(name, rate, **more):
        return dict({"name": name, "sender_domain": name + ".example",
                     "upstream": {"host": "127.0.0.1", "port": sink.port, "rate": rate}}, **more)

    def rates():
        daemon = ctl_json(d, "stats")["daemon"]
        return daemon["upstream"]["rate"], [(r["route"], r["rate"]) for r in daemon["routes"]]

    d = t.daemon(sink, {"control": os.path.join(t.tmp, "ctl.sock"), "upstream": {"rate": 8},
                        "routes": [route("r1", 10), route("r2", 6)]})
    eq(rates(), (8, [("r1", 10), ("r2", 6)]), "the rates at start")
    rewrite(d, {"upstream": {"rate": 7}, "routes": [route("r1", 5), route("r2", 6)]})
    hup(d, 1)
    eq(rates(), (7, [("r1", 5), ("r2", 6)]), "the rates after SIGHUP")
    eq(d.log_lines("warning: reload:"), [], "warnings for a route's rate")

    rewrite(d, {"routes": [route("r3", 9), route("r2", 3)]})
    hup(d, 2)
    d.wait_log("warning: reload: routes changed: it takes a restart; keeping the one in use")
    eq(rates(), (7, [("r1", 5), ("r2", 3)]), "the routes in use, r2 at its new rate")
    r = submit(d.port, "x@example.com", make_msg(key="hup-route"), sender="a@r2.example")
    eq(r.code, 250, "a message of r2 after the reloads (%r)" % (r,))
    check(d.log_lines(r.qid, "route=r2"), "the message took r2")
    d.wait_log(r.qid, "status=sent")
