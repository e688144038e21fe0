#!/usr/bin/env bash
# NAME
#	deb-test.sh - build the Debian package, install it, purge it
# SYNOPSIS
#	tests/deb/deb-test.sh		(make deb-test)
# DESCRIPTION
#	Copies the tree (the files git knows and the new ones it does not
#	ignore, as they are now) into a temporary directory and builds the
#	package there with dpkg-buildpackage -us -uc, so that no build output
#	(dpkg-buildpackage writes ../*.deb) ever lands in or next to the
#	worktree. Then, on this machine:
#
#	    lintian on the .changes: no error (warnings are printed)
#	    the .deb holds the programs, man pages, the example as a
#	      conffile and the unit with its wait-for-config drop-in; the
#	      -dbgsym package holds their debug symbols
#	    dpkg -i: the user idemrelay, /var/lib/idemrelay (0750),
#	      idemrelay -t on the shipped example and on the live
#	      configuration an operator makes from it, man idemrelay,
#	      idemrelayctl and idemrelay.conf render, the unit is enabled
#	    the installed daemon, started as root, runs as idemrelay with its
#	      store in /var/lib/idemrelay and answers a retry with the first
#	      QID
#	    dpkg -r keeps the store, the configuration and the user
#	    dpkg --purge leaves none of the package's files, no
#	      /var/lib/idemrelay, no /etc/idemrelay, no unit symlink and no
#	      dpkg record; the user stays (Debian keeps system users)
#
#	Whatever happens, the exit trap purges the package, deletes what is
#	left in /etc/idemrelay and /var/lib/idemrelay, and the user idemrelay
#	if this test created it, so the machine is as before.
#	It refuses to run where idemrelay is installed already or where
#	/etc/idemrelay or /var/lib/idemrelay exist: purging would delete them.
#
#	Needs root (dpkg -i), dpkg-dev, debhelper, lintian, man-db, python3
#	and the package's Build-Depends.
# DIAGNOSTICS
#	One "ok" or "FAIL" line per check, the build's and lintian's output
#	on failure, and last "N passed, N failed"; exits 1 if any failed.

set -u

PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH LC_ALL=C.UTF-8
REPO=$(cd "$(dirname "$0")/../.." && pwd)

passed=0
failed=0
ok() { echo "ok   - $*"; passed=$((passed + 1)); }
fail() { echo "FAIL - $*"; failed=$((failed + 1)); }
# check - run a command; one ok/FAIL line named by the first argument
check() {
	local what=$1
	shift
	if "$@" >"$tmp/check.out" 2>&1; then
		ok "$what"
	else
		fail "$what"
		sed 's/^/	/' "$tmp/check.out" | tail -20
	fi
}
finish() {
	echo "$passed passed, $failed failed"
	[ "$failed" -eq 0 ]
	exit
}

# Preconditions: nothing of an installed idemrelay may be touched.
tmp=
if [ "$(id -u)" != 0 ]; then
	fail "deb-test needs root (dpkg -i, the user idemrelay)"
	finish
fi
for t in dpkg-buildpackage dh lintian man python3; do
	command -v $t >/dev/null || fail "$t is not installed (apt-get install dpkg-dev debhelper lintian man-db python3)"
done
if dpkg-query -W -f='${db:Status-Abbrev}' idemrelay 2>/dev/null | grep -q '^[a-z]'; then
	fail "the package idemrelay is installed here already; deb-test would purge it"
fi
for d in /etc/idemrelay /var/lib/idemrelay; do
	[ ! -e $d ] || fail "$d exists; deb-test would delete it"
done
[ "$failed" -eq 0 ] || finish
had_user=no
getent passwd idemrelay >/dev/null && had_user=yes

tmp=$(mktemp -d /tmp/deb-test.XXXXXX)
daemon=
cleanup() {
	[ -z "$daemon" ] || kill "$daemon" 2>/dev/null
	if dpkg-query -W idemrelay >/dev/null 2>&1; then
		dpkg --purge idemrelay-dbgsym idemrelay >/dev/null 2>&1
	fi
	# absent at the start (checked above), so a failed purge's leftovers go
	rm -rf /etc/idemrelay /var/lib/idemrelay
	if [ $had_user = no ] && getent passwd idemrelay >/dev/null; then
		deluser --system --quiet idemrelay >/dev/null 2>&1
		getent group idemrelay >/dev/null && delgroup --system --quiet idemrelay >/dev/null 2>&1
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# Build in a copy of the tree.
src=$tmp/idemrelay
mkdir "$src"
# what a build in the tree itself would leave next to it
outputs() { ls "$(dirname "$REPO")" | grep -E '^idemrelay[-_].*\.(deb|changes|buildinfo|dsc|tar\.xz)$'; }
outputs_before=$(outputs)
if git -C "$REPO" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	(cd "$REPO" && git ls-files -z -co --exclude-standard) |
		(cd "$REPO" && xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh) |
		(cd "$REPO" && tar --null -T - -cf -) | tar -xf - -C "$src"
else
	# no git: .gitignore's patterns, as far as tar understands them
	(cd "$REPO" && tar --exclude-vcs --exclude-vcs-ignores -cf - .) | tar -xf - -C "$src"
fi
if (cd "$src" && dpkg-buildpackage -us -uc -J) >"$tmp/build.log" 2>&1; then
	ok "dpkg-buildpackage -us -uc"
else
	fail "dpkg-buildpackage -us -uc"
	tail -40 "$tmp/build.log" | sed 's/^/	/'
	finish
fi
[ "$(outputs)" = "$outputs_before" ] && ok "no package written next to the tree" ||
	fail "the build wrote packages into $(dirname "$REPO")"

deb=$(ls "$tmp"/idemrelay_*.deb)
dbgsym=$(ls "$tmp"/idemrelay-dbgsym_*.deb 2>/dev/null)
[ -n "$dbgsym" ] && ok "a -dbgsym package" || fail "no idemrelay-dbgsym_*.deb"

# lintian: errors fail; the rest is printed for the log.
if lintian --fail-on error --display-info "$tmp"/idemrelay_*.changes >"$tmp/lintian.out" 2>&1; then
	ok "lintian: no errors"
else
	fail "lintian: errors"
fi
grep -v '^running with root' "$tmp/lintian.out" | sed 's/^/	lintian: /'

# What the package holds.
dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|' >"$tmp/contents"
for f in /usr/sbin/idemrelay /usr/sbin/idemrelayctl /usr/share/man/man8/idemrelay.8.gz \
	/usr/share/man/man8/idemrelayctl.8.gz /usr/share/man/man5/idemrelay.conf.5.gz \
	/etc/idemrelay/idemrelay.conf.example /lib/systemd/system/idemrelay.service \
	/lib/systemd/system/idemrelay.service.d/wait-for-config.conf \
	/usr/share/doc/idemrelay/copyright; do
	grep -qx "$f" "$tmp/contents" && ok "package holds $f" || fail "package lacks $f"
done
grep -q '/etc/idemrelay/idemrelay.conf$' "$tmp/contents" &&
	fail "package ships a live /etc/idemrelay/idemrelay.conf" || ok "package ships no live configuration"
[ "$(dpkg-deb -f "$deb" Depends | grep -c adduser)" = 1 ] && ok "Depends: adduser" ||
	fail "Depends lacks adduser"
dpkg-deb --ctrl-tarfile "$deb" | tar -xOf - ./conffiles >"$tmp/conffiles" 2>/dev/null
check "the example is a conffile" grep -qx /etc/idemrelay/idemrelay.conf.example "$tmp/conffiles"
[ "$(dpkg-deb -c "$dbgsym" | grep -c '/usr/lib/debug/.build-id/.*\.debug$')" -ge 2 ] &&
	ok "the -dbgsym package holds both programs' .debug files" ||
	fail "not two .debug files in $dbgsym"

# Install. The path filters undo a minimal image's dpkg excludes for
# the files this test reads.
check "dpkg -i" dpkg -i --path-include='/usr/share/man/*' \
	--path-include='/usr/share/doc/idemrelay/*' "$deb" "$dbgsym"
dpkg -L idemrelay >"$tmp/files"
check "idemrelay-dbgsym installed" dpkg-query -W idemrelay-dbgsym

# A licence anyone can package and deploy under: MIT (Expat), DEP-5, as LICENSE says.
check "the copyright file grants the Expat (MIT) licence" \
	grep -qx 'License: Expat' /usr/share/doc/idemrelay/copyright
check "the copyright file grants what LICENSE grants" \
	grep -q 'Permission is hereby granted, free of charge' /usr/share/doc/idemrelay/copyright

pw=$(getent passwd idemrelay)
IFS=: read -r _ _ uid gid _ home shell <<<"$pw"
[ -n "$pw" ] && ok "the user idemrelay exists" || fail "no user idemrelay"
[ "${uid:-0}" -lt 1000 ] && [ "${uid:-0}" -gt 0 ] && ok "idemrelay is a system user (uid $uid)" ||
	fail "uid of idemrelay: ${uid:-none}"
[ "$(getent group idemrelay | cut -d: -f3)" = "${gid:-x}" ] && ok "its primary group is idemrelay" ||
	fail "the primary group of idemrelay is not group idemrelay"
[ "${home:-}" = /var/lib/idemrelay ] && [ "${shell:-}" = /usr/sbin/nologin ] &&
	ok "home /var/lib/idemrelay, shell nologin" || fail "home ${home:-} shell ${shell:-}"
[ "$(stat -c '%U:%G %a' /var/lib/idemrelay 2>&1)" = "idemrelay:idemrelay 750" ] &&
	ok "/var/lib/idemrelay is idemrelay:idemrelay 0750" ||
	fail "/var/lib/idemrelay: $(stat -c '%U:%G %a' /var/lib/idemrelay 2>&1)"
[ ! -e /etc/idemrelay/idemrelay.conf ] && ok "no live configuration before the operator writes one" ||
	fail "/etc/idemrelay/idemrelay.conf exists after dpkg -i"

check "idemrelay -t on the shipped example" \
	sh -c '/usr/sbin/idemrelay -t -c /etc/idemrelay/idemrelay.conf.example | grep "configuration OK"'
cp /etc/idemrelay/idemrelay.conf.example /etc/idemrelay/idemrelay.conf
check "idemrelay -t -c /etc/idemrelay/idemrelay.conf (copied from the example)" \
	sh -c '/usr/sbin/idemrelay -t -c /etc/idemrelay/idemrelay.conf | grep "configuration OK"'

for m in "8 idemrelay" "8 idemrelayctl" "5 idemrelay.conf"; do
	set -- $m
	check "man $1 $2 renders" sh -c "MANWIDTH=80 man -P cat $1 $2 | grep -q '^NAME'"
done
check "the unit is enabled" test -L /etc/systemd/system/multi-user.target.wants/idemrelay.service
check "the unit waits for the configuration" grep -qx \
	'ConditionPathExists=/etc/idemrelay/idemrelay.conf' \
	/lib/systemd/system/idemrelay.service.d/wait-for-config.conf
check "the unit starts /usr/sbin/idemrelay" grep -qx \
	'ExecStart=/usr/sbin/idemrelay -c /etc/idemrelay/idemrelay.conf' \
	/lib/systemd/system/idemrelay.service

# The installed daemon, started as root, drops to idemrelay and keeps
# its store in /var/lib/idemrelay (upstream: a Maildir beside it).
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$tmp/idemrelay.conf" <<EOF
hostname = "deb-test.localhost";
user = "idemrelay";
listen = ( { address = "127.0.0.1"; port = $port; } );
access = { networks = [ "127.0.0.0/8" ]; };
store = { path = "/var/lib/idemrelay"; map_size = "64M"; };
upstream = { maildir = "/var/lib/idemrelay/outbox"; };
log = { level = "info"; target = "stderr"; };
EOF
/usr/sbin/idemrelay -c "$tmp/idemrelay.conf" </dev/null >"$tmp/daemon.log" 2>&1 &
daemon=$!
cat >"$tmp/submit.py" <<'EOF'
import smtplib, sys, time
port, deadline = int(sys.argv[1]), time.time() + 15
msg = "From: a@example.com\r\nTo: b@example.com\r\nSubject: deb-test\r\n" \
      "X-Idempotency-Key: deb-test-1\r\n\r\nHello.\r\n"
qids = []
while len(qids) < 2:
    try:
        with smtplib.SMTP("127.0.0.1", port, timeout=10) as s:
            s.ehlo()
            s.mail("a@example.com")
            s.rcpt("b@example.com")
            code, reply = s.data(msg)
            qids.append(reply.decode().split("queued as ")[1].split()[0])
    except ConnectionRefusedError:
        if time.time() > deadline:
            sys.exit("idemrelay did not listen on port %d" % port)
        time.sleep(0.1)
print(" ".join(qids))
sys.exit(0 if qids[0] == qids[1] else "the retry got %s, not %s" % (qids[1], qids[0]))
EOF
check "the installed daemon answers a retry with the first QID" python3 "$tmp/submit.py" "$port"
for _ in $(seq 100); do
	[ -n "$(ls /var/lib/idemrelay/outbox/new 2>/dev/null)" ] && break
	sleep 0.1
done
check "it delivered one message" test "$(ls /var/lib/idemrelay/outbox/new 2>/dev/null | wc -l)" = 1
check "it runs as idemrelay" grep -q "running as user idemrelay" "$tmp/daemon.log"
check "its store is idemrelay's" test "$(stat -c %U /var/lib/idemrelay/data.mdb 2>&1)" = idemrelay
kill -TERM "$daemon"
for _ in $(seq 150); do kill -0 "$daemon" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$daemon" 2>/dev/null; then
	fail "the daemon did not exit within 15 s of SIGTERM"
	kill -KILL "$daemon"
fi
wait "$daemon" 2>/dev/null && ok "it exits 0 on SIGTERM" || {
	fail "daemon exit status $?"
	sed 's/^/	daemon: /' "$tmp/daemon.log" | tail -20
}
daemon=

# remove: the programs go, the store, configuration and user stay.
check "dpkg -r" dpkg -r idemrelay-dbgsym idemrelay
check "dpkg -r removed /usr/sbin/idemrelay" test ! -e /usr/sbin/idemrelay
check "dpkg -r left the package's configuration files" \
	test "$(dpkg-query -W -f='${db:Status-Abbrev}' idemrelay)" = "rc "
check "dpkg -r kept the store" test -f /var/lib/idemrelay/data.mdb
check "dpkg -r kept the live configuration" test -f /etc/idemrelay/idemrelay.conf
check "dpkg -r kept the example (a conffile)" test -f /etc/idemrelay/idemrelay.conf.example
check "dpkg -r kept the user" getent passwd idemrelay

# purge: nothing of the package is left; the user stays.
check "dpkg --purge" dpkg --purge idemrelay-dbgsym idemrelay
check "no dpkg record" sh -c '! dpkg-query -W idemrelay 2>/dev/null'
left=
while read -r f; do
	# shared directories (/usr/sbin, /lib: a symlink to usr/lib) stay
	[ -d "$f" ] && case $f in *idemrelay*) ;; *) continue ;; esac
	[ -e "$f" ] || [ -L "$f" ] && left="$left $f"
done <"$tmp/files"
check "no file of the package is left${left:+:$left}" test -z "$left"
for f in /var/lib/idemrelay /etc/idemrelay \
	/etc/systemd/system/multi-user.target.wants/idemrelay.service \
	/var/lib/systemd/deb-systemd-helper-enabled/idemrelay.service.dsh-also; do
	check "$f is gone" test ! -e "$f" -a ! -L "$f"
done
check "no dpkg info file is left" sh -c '! ls /var/lib/dpkg/info/idemrelay[.:]* 2>/dev/null'
check "the user idemrelay stays after purge" getent passwd idemrelay

finish
