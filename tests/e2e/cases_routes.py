"""Routes (issue 29 part 2): mail routed by AUTH user to upstream groups of its
own (hosts, TLS, credentials), decided at acceptance and stored with the message,
so that a restart with other routes does not move mail already queued.

Each tenant's sink wants its own credentials over TLS (sink.py --auth), trusts
the test CA (cases_upstream_tls.make_certs, SSL_CERT_FILE), and records who
logged in: a message at the wrong sink, or sent with the wrong credentials,
shows in its records."""

import concurrent.futures
import os
import re
import signal
import time

import harness
from harness import (PG_ONLY, case, check, eq, free_port, qid_of, render_conf, submit_ok,
                     make_msg, wait_until)
from cases_ops import ctl, ctl_json, samples, scrape
from cases_tls import auth_submit, tls_daemon
from cases_upstream_tls import TlsSink, make_certs, trust

TENANTS = {"alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw"}


def tenant_sink(t, certs, user, password):
    """tenant_sink - a STARTTLS sink that takes only user:password"""
    s = TlsSink(t, "sink-%s" % user, ["--tls-cert", certs["cert"], "--tls-key", certs["key"],
                                      "--auth", "%s:%s" % (user, password)])
    t.sinks.append(s)
    return s.start()


def route(name, auth_user, sink, user, password):
    """route - a route for auth_user to sink over STARTTLS with user's credentials"""
    return {"name": name, "auth_user": auth_user,
            "upstream": {"host": "localhost", "port": sink.port, "tls": "starttls",
                         "user": user, "password": password, "timeout": "5s"}}


def tenants_daemon(t, default, conf):
    """tenants_daemon - a daemon with a plain listener and an implicit-TLS one requiring
    AUTH by the TENANTS, a control socket, default as its upstream, and conf besides"""
    conf = dict(conf, control=os.path.join(t.tmp, "ctl.sock"))
    return tls_daemon(t, default, listeners=({}, {"tls": "implicit", "auth": "required"}),
                      users=TENANTS, conf=conf)


def subjects(sink):
    return sorted(r["data"].split(b"Subject: ")[1].split(b"\r\n")[0].decode()
                  for r in sink.accepted())


def rewrite(d, conf):
    d.conf = conf
    with open(d.conf_path, "w") as f:
        f.write(render_conf(conf))


@case()
def test_routes_two_tenants(t):
    """alice's and bob's mail goes each to its own sink, over TLS with that tenant's
    upstream credentials; mail without AUTH to the default upstream. Keys stay
    scoped per user: bob's key equal to alice's is his own message, alice's retry
    her duplicate. The log and idemrelayctl show name the route."""
    certs = make_certs(t)
    trust(certs["ca"])
    default = t.sink()
    sink_a = tenant_sink(t, certs, "up-alice", "pw-a")
    sink_b = tenant_sink(t, certs, "up-bob", "pw-b")
    d = tenants_daemon(t, default, {
        "keys": {"scope": "user"},
        "routes": [route("tenant-a", "alice", sink_a, "up-alice", "pw-a"),
                  route("tenant-b", "bob", sink_b, "up-bob", "pw-b")]})
    port = d.ports[1]
    a1 = qid_of(auth_submit(port, "alice", "alice-pw", "order-1", subject="alice 1"))
    a2 = qid_of(auth_submit(port, "alice", "alice-pw", "order-2", subject="alice 2"))
    b1 = qid_of(auth_submit(port, "bob", "bob-pw", "order-1", subject="bob 1"))
    check(b1 not in (a1, a2), "bob's order-1 taken for alice's")
    again = auth_submit(port, "alice", "alice-pw", "order-1", subject="alice 1")
    eq(qid_of(again), a1, "alice's retry gets her original QID")
    n1 = submit_ok(d.ports[0], "x@example.com", make_msg(key="order-1", subject="no auth"))

    sink_a.wait_count(2, timeout=20)
    sink_b.wait_count(1, timeout=20)
    default.wait_count(1, timeout=20)
    for q in (a1, a2, b1, n1):
        d.wait_log(q, "status=sent")
    time.sleep(1)       # anything misrouted would have arrived by now
    eq(subjects(sink_a), ["alice 1", "alice 2"], "alice's sink")
    eq(subjects(sink_b), ["bob 1"], "bob's sink")
    eq(subjects(default), ["no auth"], "the default upstream")
    for sink, user in ((sink_a, "up-alice"), (sink_b, "up-bob")):
        for r in sink.accepted():
            check(r["tls"], "%s's message came without TLS" % user)
            eq(r["auth"], user, "the credentials %s's sink saw" % user)
    eq(default.accepted()[0]["auth"], None, "AUTH at the default upstream")
    check(d.log_lines(a1, "route=tenant-a"), "acceptance log line names the route")
    check(d.log_lines(b1, "route=tenant-b"), "acceptance log line names the route")
    check(not d.log_lines(n1, "route="), "a default message's line names a route")
    out = ctl(d, "show", a1).stdout
    check("route       tenant-a" in out, "show names the route:\n" + out)
    out = ctl(d, "show", n1).stdout
    check("route       default (upstream)" in out, "show for the default:\n" + out)


@case()
def test_routes_restart_keeps_queued_route(t):
    """Mail queued under a route keeps it across a restart with other routes: alice's
    queued message still goes to her old sink while her new mail takes the new
    route; carol's, whose route is gone, is deferred (4.3.5), never sent elsewhere,
    and show says so. SIGHUP with changed routes keeps the routes in use."""
    certs = make_certs(t)
    trust(certs["ca"])
    default = t.sink()
    sink_a = tenant_sink(t, certs, "up-alice", "pw-a")
    sink_b = tenant_sink(t, certs, "up-bob", "pw-b")
    sink_c = tenant_sink(t, certs, "up-carol", "pw-c")
    sink_a.control(greeting="421")
    sink_c.control(greeting="421")
    d = tenants_daemon(t, default, {
        "routes": [route("tenant-a", "alice", sink_a, "up-alice", "pw-a"),
                  route("tenant-c", "carol", sink_c, "up-carol", "pw-c")]})
    port = d.ports[1]
    a1 = qid_of(auth_submit(port, "alice", "alice-pw", "r-1", subject="alice old"))
    c1 = qid_of(auth_submit(port, "carol", "carol-pw", "r-2", subject="carol old"))
    d.wait_log(a1, "status=deferred")
    d.wait_log(c1, "status=deferred")

    # alice moves to bob's upstream; tenant-a stays for what is queued; tenant-c goes
    conf = dict(d.conf)
    conf["routes"] = [route("tenant-a2", "alice", sink_b, "up-bob", "pw-b"),
                      route("tenant-a", "nobody", sink_a, "up-alice", "pw-a")]
    rewrite(d, conf)
    os.kill(d.proc.pid, signal.SIGHUP)
    d.wait_log("reload: routes changed: it takes a restart")
    d.stop()
    d.start()
    wait_until(lambda: all(harness.port_open(p) for p in d.ports), 10, "every listener")
    a2 = qid_of(auth_submit(port, "alice", "alice-pw", "r-3", subject="alice new"))
    sink_b.wait_count(1, timeout=20)
    d.wait_log(a2, "route=tenant-a2")
    sink_a.control()                        # alice's old upstream takes mail again
    sink_c.control()
    sink_a.wait_count(1, timeout=20)
    d.wait_log(a1, "status=sent")
    d.wait_log(c1, "status=deferred", "dsn=4.3.5", "relay=none,",
               "route tenant-c is not in the configuration")
    time.sleep(1)
    eq(subjects(sink_a), ["alice old"], "alice's old upstream")
    eq(subjects(sink_b), ["alice new"], "alice's new upstream")
    eq(subjects(sink_c), [], "carol's upstream, not in the configuration")
    eq(default.accepted(), [], "the default upstream")
    out = ctl(d, "show", c1).stdout
    check("route       tenant-c, not in the configuration" in out, "show:\n" + out)
    out = ctl(d, "cat", c1).stdout
    check("\nroute: tenant-c\n" in out, "cat names the route:\n" + out)
    eq(ctl_json(d, "cat", c1)["route"], "tenant-c", "cat --json: route")


@case(timeout=150)
def test_routes_throttling_is_per_route(t):
    """A route's upstream that throttles (a sink taking 2 messages a second, 421 4.7.0
    beyond) slows and pauses that route alone: its throttling is logged under the
    route, no message of it is charged an attempt and each arrives once, while the
    default upstream's limits never saw an episode: idemrelayctl stats and /metrics show
    the route's and the default's apart."""
    certs = make_certs(t)
    trust(certs["ca"])
    default = t.sink()
    sink_a = tenant_sink(t, certs, "up-alice", "pw-a")
    sink_a.control(rate=2)
    port = free_port()
    d = tenants_daemon(t, default, {
        "metrics": {"address": "127.0.0.1", "port": port},
        "upstream": {"connections": 4},
        "routes": [route("tenant-a", "alice", sink_a, "up-alice", "pw-a")]})
    n = 12
    for i in range(n):
        auth_submit(d.ports[1], "alice", "alice-pw", "thr-%d" % i, subject="alice %d" % i)
    d.wait_log("(route tenant-a): throttling: ")
    n1 = submit_ok(d.ports[0], "x@example.com", make_msg(key="thr-default", subject="no auth"))
    sink_a.wait_count(n, timeout=120)
    default.wait_count(1, timeout=30)
    d.wait_log(n1, "status=sent")
    time.sleep(1)
    eq(subjects(sink_a), sorted("alice %d" % i for i in range(n)), "alice's, each once")
    check(sink_a.events("throttled"), "the route's sink refused nothing")
    for line in d.log_lines("status=deferred"):
        check("delivery temporarily suspended" in line, "a deferral charged: %s" % line)
    daemon = ctl_json(d, "stats")["daemon"]
    u = daemon["upstream"]
    eq((u["throttle_episodes"], u["throttled"]), (0, False), "the default upstream's state")
    eq([r["route"] for r in daemon["routes"]], ["tenant-a"], "stats: the routes")
    episodes = daemon["routes"][0]["throttle_episodes"]
    check(episodes >= 1, "stats: the route's episodes: %r" % daemon["routes"])
    out = ctl(d, "stats").stdout
    check(re.search(r"^route        tenant-a: rate (no limit|[0-9.]+/s), concurrency [0-9]+ "
                    r"\([0-9]+ running\), (THROTTLED|not throttled) \([0-9]+ episodes? since "
                    r"start\)$", out, re.M), "stats text says the route's limits:\n" + out)
    s = samples(scrape(port)[2])
    eq(s.get("idemrelay_upstream_throttled_total"), 0, "metrics: the default's episodes")
    check(s.get('idemrelay_route_upstream_throttled_total{route="tenant-a"}', 0) >= episodes,
          "metrics: the route's episodes: %r" % {k: v for k, v in s.items() if "route" in k})


@case(timeout=120)
def test_routes_reroute(t):
    """idemrelayctl reroute decides queued mail's routes again: with the daemon
    stopped, by the file's routes (alice's queued message moves from her old route to
    her new one); with it running, by the routes in use (carol's, whose route was
    removed, leaves its 4.3.5 deferral for the route she now matches). Mail whose
    route does not change is passed over."""
    certs = make_certs(t)
    trust(certs["ca"])
    default = t.sink()
    sink_a = tenant_sink(t, certs, "up-alice", "pw-a")
    sink_b = tenant_sink(t, certs, "up-bob", "pw-b")
    sink_a.control(greeting="421")          # alice's old route holds her mail
    d = tenants_daemon(t, default, {
        "routes": [route("tenant-a", "alice", sink_a, "up-alice", "pw-a"),
                  route("tenant-c", "carol", sink_a, "up-alice", "pw-a")]})
    port = d.ports[1]
    a1 = qid_of(auth_submit(port, "alice", "alice-pw", "rr-1", subject="alice"))
    c1 = qid_of(auth_submit(port, "carol", "carol-pw", "rr-2", subject="carol"))
    d.wait_log(a1, "status=deferred")
    d.wait_log(c1, "status=deferred")
    d.stop()
    conf = dict(d.conf)
    conf["routes"] = [route("tenant-b", "alice", sink_b, "up-bob", "pw-b"),
                      route("tenant-a", "nobody", sink_a, "up-alice", "pw-a")]
    rewrite(d, conf)
    out = ctl_json(d, "reroute", a1)                 # no daemon: the file's routes
    eq((out["rerouted"], out.get("offline")), ([a1], True), "offline reroute")
    eq(ctl_json(d, "reroute", a1)["rerouted"], [], "a second reroute changes nothing")
    d.start()
    wait_until(lambda: all(harness.port_open(p) for p in d.ports), 10, "every listener")
    sink_b.wait_count(1, timeout=20)
    d.wait_log(a1, "status=sent")
    d.wait_log(c1, "status=deferred", "dsn=4.3.5", "route tenant-c is not in the configuration")
    conf2 = dict(conf)
    conf2["routes"] = conf["routes"] + [route("tenant-b2", "carol", sink_b, "up-bob", "pw-b")]
    rewrite(d, conf2)
    d.stop()
    d.start()
    wait_until(lambda: all(harness.port_open(p) for p in d.ports), 10, "every listener")
    out = ctl(d, "reroute", "ALL").stdout            # the daemon: the routes in use
    check("%s: rerouted" % c1 in out and a1 not in out, "reroute ALL:\n" + out)
    d.wait_log(c1, "route tenant-c -> tenant-b2 (idemrelayctl reroute)")
    sink_b.wait_count(2, timeout=20)
    d.wait_log(c1, "status=sent")
    time.sleep(1)
    eq(subjects(sink_b), ["alice", "carol"], "the new routes' sink")
    eq(subjects(sink_a), [], "the old routes' sink")
    eq(default.accepted(), [], "the default upstream")


@case(timeout=150)
def test_routes_reroute_leaves_a_paused_route(t):
    """A message rerouted while the daemon runs leaves its old route's pause at once:
    alice's, routed to tenant-a under the routes before a restart, waits behind
    tenant-a's pause (its sink refuses every MAIL with 421 4.7.0, carol's mail keeps
    it refusing, the pauses double) in the scheduler's queue; rerouted to tenant-b,
    whose sink takes it, it arrives while tenant-a is still in the same pause (its
    episodes unchanged, still throttled), not once that pause ends."""
    certs = make_certs(t)
    trust(certs["ca"])
    default = t.sink()
    sink_a = tenant_sink(t, certs, "up-alice", "pw-a")
    sink_b = tenant_sink(t, certs, "up-bob", "pw-b")
    sink_a.control(rate=0.001)              # no token for a long while: every MAIL refused
    a_up = route("tenant-a", "alice", sink_a, "up-alice", "pw-a")
    a_up["upstream"]["connections"] = 8
    d = tenants_daemon(t, default, {"routes": [a_up]})
    port = d.ports[1]
    a1 = qid_of(auth_submit(port, "alice", "alice-pw", "rp-a", subject="alice"))
    d.wait_log("(route tenant-a): throttling: ")
    d.stop()
    conf = dict(d.conf)
    carol_a = dict(a_up, auth_user="carol")
    conf["routes"] = [carol_a, route("tenant-b", "alice", sink_b, "up-bob", "pw-b")]
    rewrite(d, conf)
    d.start()
    wait_until(lambda: all(harness.port_open(p) for p in d.ports), 10, "every listener")
    for i in range(3):
        auth_submit(port, "carol", "carol-pw", "rp-c%d" % i, subject="carol %d" % i)

    def route_a():
        return [r for r in ctl_json(d, "stats")["daemon"]["routes"]
                if r["route"] == "tenant-a"][0]
    wait_until(lambda: route_a()["throttle_episodes"] >= 5, 60, "tenant-a's fifth pause")
    before = route_a()
    eq(ctl_json(d, "reroute", a1)["rerouted"], [a1], "reroute with the daemon running")
    sink_b.wait_count(1, timeout=10, what="alice's mail while tenant-a is paused")
    after = route_a()
    eq((after["throttle_episodes"], after["throttled"]), (before["throttle_episodes"], True),
       "tenant-a still in the same pause")
    d.wait_log(a1, "status=sent")
    eq(subjects(sink_b), ["alice"], "tenant-b's sink")
    eq(sink_a.accepted(), [], "tenant-a's sink took nothing")
    eq(default.accepted(), [], "the default upstream")


def alice_moved(t, first_conf, retry):
    """alice_moved - a daemon whose routes send alice's mail to tenant-a, then (after
    her message was deferred once there, by a greeting of 421) started again with
    retry, alice's route tenant-b and carol's tenant-a: her queued message keeps
    tenant-a until rerouted. Returns (daemon, alice's QID, sink_a, sink_b, default)."""
    certs = make_certs(t)
    trust(certs["ca"])
    default = t.sink()
    sink_a = tenant_sink(t, certs, "up-alice", "pw-a")
    sink_b = tenant_sink(t, certs, "up-bob", "pw-b")
    sink_a.control(greeting="421")
    a_up = route("tenant-a", "alice", sink_a, "up-alice", "pw-a")
    d = tenants_daemon(t, default, dict(first_conf, routes=[a_up]))
    a1 = qid_of(auth_submit(d.ports[1], "alice", "alice-pw", "mv-a", subject="alice"))
    d.wait_log(a1, "status=deferred")
    d.stop()
    conf = dict(d.conf, retry=retry)
    conf["routes"] = [dict(a_up, auth_user="carol"),
                      route("tenant-b", "alice", sink_b, "up-bob", "pw-b")]
    rewrite(d, conf)
    return d, a1, sink_a, sink_b, default


@case(timeout=120)
def test_routes_reroute_during_attempt(t):
    """A message rerouted while its attempt is under way leaves its old route once
    that attempt is deferred: alice's, at tenant-a's sink, which holds DATA 3 s and
    then refuses the final dot 451 4.3.0, is rerouted to tenant-b meanwhile; its next
    attempt is at once, to tenant-b, not at the end of the retry (60 s) earned at
    tenant-a nor with tenant-a's limits. It arrives once, and never at tenant-a again."""
    d, a1, sink_a, sink_b, default = alice_moved(
        t, {"retry": {"first": "1s", "max": "1s", "give_up": "5d"}},
        {"first": "60s", "max": "60s", "give_up": "5d"})
    sink_a.control(data_delay=3, default="data-tempfail")
    d.start()
    wait_until(lambda: sink_a.events("data-delay"), 20, "tenant-a's sink holding DATA")
    eq(ctl_json(d, "reroute", a1)["rerouted"], [a1], "reroute during the attempt")
    d.wait_log(a1, "status=deferred", "data-tempfail")
    sink_b.wait_count(1, timeout=15, what="alice's mail at tenant-b after the deferral")
    d.wait_log(a1, "status=sent")
    time.sleep(1)
    eq(subjects(sink_b), ["alice"], "tenant-b's sink")
    eq(len(sink_a.events("data-delay")), 1, "attempts at tenant-a's sink after the restart")
    eq(sink_a.accepted(), [], "tenant-a's sink took nothing")
    eq(default.accepted(), [], "the default upstream")


@case(timeout=120)
def test_routes_reroute_held(t):
    """A held message rerouted goes the new way once released, at once: alice's,
    deferred by tenant-a's sink (451 to her RCPT; retry.first 60 s), is held, rerouted
    to tenant-b (still held: nothing is sent), and released: tenant-b's sink takes it,
    once, not at the end of the retry earned at tenant-a."""
    d, a1, sink_a, sink_b, default = alice_moved(
        t, {"retry": {"first": "1s", "max": "1s", "give_up": "5d"}},
        {"first": "60s", "max": "60s", "give_up": "5d"})
    sink_a.control(default="tempfail")
    d.start()
    d.wait_log(a1, "status=deferred", "451 4.3.0 sink:")
    eq(ctl_json(d, "hold", a1)["held"], [a1], "hold")
    eq(ctl_json(d, "reroute", a1)["rerouted"], [a1], "reroute while held")
    time.sleep(2)
    eq((sink_b.accepted(), sink_a.accepted()), ([], []), "a held message sent")
    d.wait_log(a1, "route tenant-a -> tenant-b (idemrelayctl reroute)")
    eq(ctl_json(d, "release", a1)["released"], [a1], "release")
    sink_b.wait_count(1, timeout=15, what="alice's mail at tenant-b after the release")
    d.wait_log(a1, "status=sent")
    time.sleep(1)
    eq(subjects(sink_b), ["alice"], "tenant-b's sink")
    eq(sink_a.accepted(), [], "tenant-a's sink took nothing")
    eq(default.accepted(), [], "the default upstream")


@case(timeout=150)
def test_routes_default_pause_holds_only_its_own(t):
    """The default upstream's pause (its sink refuses every MAIL with 421 4.7.0, so the
    pauses double: 1, 2, 4, 8, 16 s) holds only the default's mail: alice's, routed to
    a sink that takes it, is delivered while the default is still in its fifth pause
    (its episodes unchanged, still throttled, no more refusals at its sink). Eight
    connections: halved at each refusal, they take longer to recover than the next
    refusal takes to come (a second on PostgreSQL, whose taker reads the shared queue
    each second), so the pauses double instead of the throttling ending. Once the
    default's sink takes mail again, every message arrives once, none charged."""
    certs = make_certs(t)
    trust(certs["ca"])
    default = t.sink()
    default.control(rate=0.001)             # no token for a long while: every MAIL refused
    sink_a = tenant_sink(t, certs, "up-alice", "pw-a")
    d = tenants_daemon(t, default, {
        "upstream": {"connections": 8},
        "routes": [route("tenant-a", "alice", sink_a, "up-alice", "pw-a")]})
    for i in range(3):
        submit_ok(d.ports[0], "x@example.com", make_msg(key="dflt-%d" % i, subject="dflt %d" % i))
    d.wait_log(": throttling: ", "4.7.0")

    def upstream():
        return ctl_json(d, "stats")["daemon"]["upstream"]
    wait_until(lambda: upstream()["throttle_episodes"] >= 5, 60, "the default's fifth pause")
    before = upstream()
    refused = len(default.events("throttled"))
    n = 5
    for i in range(n):
        auth_submit(d.ports[1], "alice", "alice-pw", "grp-%d" % i, subject="alice %d" % i)
    sink_a.wait_count(n, timeout=10, what="alice's mail while the default is paused")
    after = upstream()
    eq((after["throttle_episodes"], after["throttled"]), (before["throttle_episodes"], True),
       "the default still in the same pause")
    eq(len(default.events("throttled")), refused, "refusals at the default's sink meanwhile")
    eq(default.accepted(), [], "the default's sink took nothing yet")
    eq(d.log_lines("upstream: throttling ended"), [], "the default's throttling ended")

    default.control()                       # the default's provider takes mail again
    default.wait_count(3, timeout=60)
    time.sleep(1)
    eq(subjects(sink_a), sorted("alice %d" % i for i in range(n)), "alice's, each once")
    eq(subjects(default), ["dflt 0", "dflt 1", "dflt 2"], "the default's, each once")
    for line in d.log_lines("status=deferred"):
        check("delivery temporarily suspended" in line, "a deferral charged: %s" % line)


def route_fault(t, fault, *words):
    """route_fault - alice's route's upstream fails (its sink's control: fault) while
    alice's, bob's and the default's mail come in: alice's alone is deferred, again and
    again (each deferral's log line has words), never bounced, never sent to the
    default upstream or bob's, never in clear (her sink answers MAIL or AUTH before
    STARTTLS 530 or 538); bob's and the default's are delivered meanwhile. Once the
    fault is cleared alice's arrive, each once, over TLS with her route's credentials."""
    certs = make_certs(t)
    trust(certs["ca"])
    default = t.sink()
    sink_a = tenant_sink(t, certs, "up-alice", "pw-a")
    sink_b = tenant_sink(t, certs, "up-bob", "pw-b")
    sink_a.control(**fault)
    d = tenants_daemon(t, default, {
        "routes": [route("tenant-a", "alice", sink_a, "up-alice", "pw-a"),
                  route("tenant-b", "bob", sink_b, "up-bob", "pw-b")]})
    port = d.ports[1]
    n = 3
    alice = [qid_of(auth_submit(port, "alice", "alice-pw", "flt-%d" % i, subject="alice %d" % i))
             for i in range(n)]
    auth_submit(port, "bob", "bob-pw", "flt-b", subject="bob")
    submit_ok(d.ports[0], "x@example.com", make_msg(key="flt-n", subject="no auth"))
    sink_b.wait_count(1, timeout=20)
    default.wait_count(1, timeout=20)
    for q in alice:
        wait_until(lambda: len(d.log_lines(q, "status=deferred", *words)) >= 2, 30,
                   "%s deferred twice, its lines with %r" % (q, words))
        check(not d.log_lines(q, "status=sent") and not d.log_lines(q, "status=bounced"),
              "%s sent or bounced while its route's upstream fails:\n%s"
              % (q, "\n".join(d.log_lines(q))))
    eq([l for l in d.log_lines("status=deferred") if not any(q in l for q in alice)], [],
       "deferrals of mail not alice's")
    eq(sink_a.accepted(), [], "messages at alice's failing upstream")
    log = sink_a.log()
    check("> 530 " not in log and "> 538 " not in log, "alice's sink saw MAIL or AUTH in clear")

    sink_a.control()                        # alice's upstream takes her mail again
    sink_a.wait_count(n, timeout=30)
    for q in alice:
        d.wait_log(q, "status=sent")
    time.sleep(1)                           # anything sent twice or misrouted would be here
    eq(subjects(sink_a), sorted("alice %d" % i for i in range(n)), "alice's, each once")
    eq(subjects(sink_b), ["bob"], "bob's upstream")
    eq(subjects(default), ["no auth"], "the default upstream")
    for r in sink_a.accepted():
        check(r["tls"], "alice's message came without TLS")
        eq(r["auth"], "up-alice", "the credentials alice's sink saw")


@case()
def test_routes_upstream_refuses_credentials(t):
    """A route's upstream refusing its credentials (535 5.7.8, an account suspended)
    defers that route's mail (4.7.8, as Postfix's smtp_sasl_auth_soft_bounce), never
    bounced or sent elsewhere, and delivers it once when the credentials work again."""
    route_fault(t, {"auth_reply": "535 5.7.8 account suspended"},
                "dsn=4.7.8", "SASL authentication failed: 535 5.7.8 account suspended")


@case()
def test_routes_upstream_tls_fails(t):
    """A route's upstream whose STARTTLS fails (reset before the handshake) defers that
    route's mail, never sent in clear or elsewhere; delivered once when TLS works."""
    route_fault(t, {"starttls": "abort"}, "dsn=4.7.5", "TLS handshake failed")


@case()
def test_routes_upstream_starttls_stripped(t):
    """A route's upstream that stops offering STARTTLS (stripped on the way) defers that
    route's mail, never sent in clear or elsewhere; delivered once when it is back."""
    route_fault(t, {"starttls": "off"}, "dsn=4.7.4", "TLS is required, but was not offered")


@case()
def test_routes_upstream_resets(t):
    """A route's upstream resetting every connection in the middle of the transaction
    (after its reply to MAIL, the 6th of the connection: greeting, EHLO, STARTTLS, EHLO,
    AUTH, MAIL; the deferral's last reply says it was MAIL's) defers that route's mail, never sent elsewhere; delivered
    once when the resets stop."""
    route_fault(t, {"reset_after_reply": 6}, "dsn=4.4.2", "Connection reset by peer",
                "last reply: 250 2.1.0 ok")


@case(timeout=150)
def test_routes_default_busy_holds_only_its_own(t):
    """A busy default upstream (one connection, its sink holding the first message's
    final dot 15 s before it replies) holds only its own mail: alice's, routed to a
    sink that takes it, is delivered while the default is still holding its first
    message (the old limit: the delivery threads were the default's connections, and
    a thread waited for the default's connection to free). The default's second
    message, which found its one connection in use, waits unsent and uncharged (no
    deferral written or logged) and goes out once the first is done; each message
    arrives once."""
    certs = make_certs(t)
    trust(certs["ca"])
    default = t.sink()
    sink_a = tenant_sink(t, certs, "up-alice", "pw-a")
    d = tenants_daemon(t, default, {
        "upstream": {"connections": 1, "timeout": "60s"},
        "routes": [route("tenant-a", "alice", sink_a, "up-alice", "pw-a")]})
    d1 = submit_ok(d.ports[0], "delay-15-d1@example.com", make_msg(key="busy-1", subject="dflt 1"))
    wait_until(lambda: "delaying reply" in open(default.log_path).read(), 15,
               "the default's sink holding the first message's dot")
    d2 = submit_ok(d.ports[0], "delay-1-d2@example.com", make_msg(key="busy-2", subject="dflt 2"))
    n = 3
    for i in range(n):
        auth_submit(d.ports[1], "alice", "alice-pw", "busy-a-%d" % i, subject="alice %d" % i)
    sink_a.wait_count(n, timeout=60, what="alice's mail")
    eq(d.log_lines(d1, "status=sent"), [], "the default's first message's reply came")
    default.wait_count(2, timeout=60)
    d.wait_log(d2, "status=sent")
    time.sleep(1)
    eq(subjects(sink_a), sorted("alice %d" % i for i in range(n)), "alice's, each once")
    eq(subjects(default), ["dflt 1", "dflt 2"], "the default's, each once")
    eq(d.log_lines("status=deferred"), [], "deferrals")
    eq(len(d.log_lines(d1, "status=sent")), 1, "the first's delivery lines")


@case(stores=PG_ONLY, timeout=180)
def test_routes_default_busy_shared_queue(t):
    """On PostgreSQL, mail that comes through the shared queue (alice's, deferred once by
    her route's sink, due again a second later) is taken while the default upstream is
    busy with a backlog larger than the node's local queue (300 messages for one
    connection, its sink holding the first final dot 30 s; the local queue is 50 a
    thread, 5 threads): the default's mail waiting for its connection does not take the
    routes' room. Alice's message is delivered before the default's first message is."""
    certs = make_certs(t)
    trust(certs["ca"])
    default = t.sink()
    sink_a = tenant_sink(t, certs, "up-alice", "pw-a")
    d = tenants_daemon(t, default, {
        "upstream": {"connections": 1, "timeout": "90s"},
        "retry": {"first": "1s", "max": "1s", "give_up": "5d"},
        "routes": [route("tenant-a", "alice", sink_a, "up-alice", "pw-a")]})
    d1 = submit_ok(d.ports[0], "delay-30-d1@example.com", make_msg(key="bl-0", subject="dflt 0"))
    wait_until(lambda: "delaying reply" in open(default.log_path).read(), 15,
               "the default's sink holding the first message's dot")
    for i in range(1, 300):
        submit_ok(d.ports[0], "b%d@example.com" % i, make_msg(key="bl-%d" % i))
    a1 = qid_of(auth_submit(d.ports[1], "alice", "alice-pw", "bl-a",
                            to="tempfail-first-1-a@example.com", subject="alice"))
    d.wait_log(a1, "status=deferred")
    d.wait_log(a1, "status=sent", timeout=60)
    eq(d.log_lines(d1, "status=sent"), [], "the default's first message's reply came")
    d.wait_log(d1, "status=sent", timeout=60)      # a stop would wait for that reply
    time.sleep(1)
    eq(subjects(sink_a), ["alice"], "alice's, once")


@case(stores=PG_ONLY, timeout=240)
def test_routes_busy_backlog_in_shared_queue(t):
    """On PostgreSQL, a busy group's backlog in the shared queue, larger than twice the
    node's local queue, does not hold the other groups' mail there: 250 messages for
    the default upstream, deferred while its sink refused them (a greeting of 421) and
    given back to the shared queue by a restart, wait for its one connection, which its
    sink holds before the first 354 (up to 80 s, let go once alice's mail is sent; the
    local queue: 50 messages a delivery thread, two threads). Alice's message, deferred
    once by her route's sink and so due in the shared queue after the backlog, is taken
    and delivered while the default's first session is still held: her sink took it
    before the default's sink took any (their record times), and the node has not
    leased the whole backlog it cannot send (some is left in the shared queue for other
    nodes); every message arrives once."""
    certs = make_certs(t)
    trust(certs["ca"])
    default = t.sink()
    default.control(greeting="421")
    sink_a = tenant_sink(t, certs, "up-alice", "pw-a")
    a_up = route("tenant-a", "alice", sink_a, "up-alice", "pw-a")
    a_up["upstream"]["connections"] = 1
    d = tenants_daemon(t, default, {
        "upstream": {"connections": 1, "timeout": "90s"},
        "retry": {"first": "1s", "max": "1s", "give_up": "5d"},
        "routes": [a_up]})
    n, nthreads = 250, 5

    def submit_share(k):
        for i in range(k, n, nthreads):
            submit_ok(d.ports[0], "b%d@example.com" % i,
                      make_msg(key="sq-%d" % i, subject="d%d" % i))

    with concurrent.futures.ThreadPoolExecutor(nthreads) as pool:
        for f in [pool.submit(submit_share, k) for k in range(nthreads)]:
            f.result()
    d.wait_log(": throttling: ")
    d.stop()                                # its leases given up: all in the shared queue
    default.control(data_hold=80)
    d.start()
    wait_until(lambda: default.events("data-hold"), 20, "the default's first session held")
    a1 = qid_of(auth_submit(d.ports[1], "alice", "alice-pw", "sq-a",
                            to="tempfail-first-1-a@example.com", subject="alice"))
    d.wait_log(a1, "status=deferred", timeout=30)
    d.wait_log(a1, "status=sent", timeout=60)
    eq(len(default.events("data-hold")), 1, "the default's sessions meanwhile")
    left = int(t.pg_shared().sql("SELECT count(*) FROM messages WHERE queued AND route IS NULL"
                                 " AND lease_owner IS NULL", t.pg_url().rsplit("/", 1)[1]))
    check(left > 0, "the node leased the default's whole backlog, which it cannot send now")
    default.control()                       # the hold let go
    default.wait_count(n, timeout=120)
    time.sleep(1)
    eq(subjects(sink_a), ["alice"], "alice's, once")
    eq(sorted(subjects(default)), sorted("d%d" % i for i in range(n)), "the default's, each once")
    alice_at = sink_a.accepted()[0]["time"]
    first_default = min(r["time"] for r in default.accepted())
    check(alice_at < first_default, "the default's mail delivered before alice's (at %.3f, "
          "the default's first at %.3f)" % (alice_at, first_default))
