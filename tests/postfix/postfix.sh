#!/usr/bin/env bash
# NAME
#	postfix.sh - run a private Postfix instance for tests and benchmarks
# SYNOPSIS
#	tests/postfix/postfix.sh start DIR PORT RELAYHOST_PORT [name=value ...]
#	tests/postfix/postfix.sh stop|status|queue|flush|log DIR
#	tests/postfix/postfix.sh wait-empty DIR [SECONDS]
# DESCRIPTION
#	Runs Debian's Postfix (apt-get install postfix) as an instance of its
#	own, entirely under DIR, next to (and never touching) a system Postfix:
#
#	    DIR/etc      config_directory: main.cf, master.cf (written here)
#	    DIR/queue    queue_directory (also holds the master's pid and lock)
#	    DIR/data     data_directory
#	    DIR/maillog  the log (postlogd; no syslog needed)
#
#	It listens on 127.0.0.1:PORT only and relays everything from
#	127.0.0.0/8 to [127.0.0.1]:RELAYHOST_PORT: no local delivery, no DNS,
#	IPv4 only, no chroot, short retry times. Extra main.cf settings can be
#	given as name=value arguments (e.g. smtp_destination_recipient_limit=50).
#	Other settings keep Postfix's defaults, so benchmarks see a stock relay.
#
#	start writes the configuration, creates the queue and starts the
#	master daemon (postfix -c DIR/etc start: no systemd needed); it waits
#	until the SMTP port answers. stop stops the instance and waits until
#	its master has exited. status exits 0 when it runs. queue prints how
#	many messages are queued; wait-empty waits (default 30 s) until none
#	is. flush asks for an immediate delivery attempt of the deferred ones.
#	log prints the maillog.
#
#	Must run as root (Postfix drops to its mail_owner itself); DIR and
#	its parents must be searchable by that user (postfix).
#
#	Install (Debian 12, no prompt, no system instance configured or
#	started; the package's own /etc/postfix is left unconfigured):
#	    echo 'postfix postfix/main_mailer_type select No configuration' \
#	        | debconf-set-selections
#	    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postfix
# DIAGNOSTICS
#	Exits non-zero with a message on stderr on any failure.

set -eu

PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH

die() { echo "postfix.sh: $*" >&2; exit 1; }

usage() {
	die "usage: postfix.sh start DIR PORT RELAYHOST_PORT [name=value ...] | stop|status|queue|flush|log DIR | wait-empty DIR [SECONDS]"
}

[ $# -ge 2 ] || usage
cmd=$1
case $2 in
/*) DIR=$2 ;;
*) DIR=$(pwd)/$2 ;;
esac
shift 2
CONF=$DIR/etc

need_postfix() {
	command -v postfix >/dev/null 2>&1 && [ -x /usr/sbin/postconf ] ||
		die "Postfix is not installed: echo 'postfix postfix/main_mailer_type select No configuration' | debconf-set-selections; apt-get install -y postfix"
	[ "$(id -u)" = 0 ] || die "must run as root to start Postfix"
	id postfix >/dev/null 2>&1 || die "no 'postfix' user: is the postfix package installed?"
}

# running - is this instance's master alive?
running() {
	[ -f "$CONF/main.cf" ] || return 1
	/usr/lib/postfix/sbin/master -c "$CONF" -t 2>/dev/null && return 1
	return 0
}

# port_open - does 127.0.0.1:PORT accept a connection?
port_open() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# queue_count - messages in this instance's queue (every queue but corrupt)
queue_count() {
	q=$DIR/queue
	n=0
	for sub in maildrop incoming active deferred hold; do
		[ -d "$q/$sub" ] || continue
		c=$(find "$q/$sub" -type f | wc -l)
		n=$((n + c))
	done
	echo $n
}

write_config() {
	port=$1 relay_port=$2
	mkdir -p "$CONF" "$DIR/queue" "$DIR/data"
	chmod 755 "$DIR" "$CONF" "$DIR/queue"
	chown root:root "$DIR/queue"
	chown postfix:postfix "$DIR/data"
	: >"$DIR/maillog"
	# Search permission for the postfix user on every parent directory.
	d=$DIR
	while [ "$d" != / ]; do
		perm=$(stat -c %a "$d")
		[ $((perm % 2)) = 1 ] ||
			die "$d is not searchable by others (mode $perm): Postfix's daemons (user postfix) need to reach $DIR"
		d=$(dirname "$d")
	done

	cat >"$CONF/main.cf" <<EOF
# written by tests/postfix/postfix.sh: a private relay instance
compatibility_level = 3.6
queue_directory = $DIR/queue
data_directory = $DIR/data
meta_directory = /etc/postfix
maillog_file = $DIR/maillog
maillog_file_prefixes = $DIR
myhostname = postfix.test
mydomain = test
myorigin = \$myhostname
mydestination =
local_recipient_maps =
local_transport = error:5.1.1 local delivery is disabled
alias_maps =
alias_database =
relay_domains =
relayhost = [127.0.0.1]:$relay_port
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
mynetworks = 127.0.0.0/8
smtpd_relay_restrictions = permit_mynetworks, reject_unauth_destination
smtp_dns_support_level = disabled
smtp_host_lookup = native
smtp_tls_security_level = none
smtpd_tls_security_level = none
biff = no
append_dot_mydomain = no
# quick retries, so tests need not wait
queue_run_delay = 1s
minimal_backoff_time = 1s
maximal_backoff_time = 2s
EOF
	if [ $# -gt 2 ]; then
		shift 2
		for kv in "$@"; do
			case $kv in
			*=*) postconf -c "$CONF" -e "$kv" ;;
			*) die "not a name=value setting: $kv" ;;
			esac
		done
	fi

	# No chroot: the queue lives in a test directory, not /var/spool.
	cat >"$CONF/master.cf" <<EOF
# written by tests/postfix/postfix.sh
127.0.0.1:$port inet n - n - - smtpd
pickup    unix  n       -       n       60      1       pickup
cleanup   unix  n       -       n       -       0       cleanup
qmgr      unix  n       -       n       300     1       qmgr
rewrite   unix  -       -       n       -       -       trivial-rewrite
bounce    unix  -       -       n       -       0       bounce
defer     unix  -       -       n       -       0       bounce
trace     unix  -       -       n       -       0       bounce
verify    unix  -       -       n       -       1       verify
flush     unix  n       -       n       1000?   0       flush
proxymap  unix  -       -       n       -       -       proxymap
smtp      unix  -       -       n       -       -       smtp
relay     unix  -       -       n       -       -       smtp
showq     unix  n       -       n       -       -       showq
error     unix  -       -       n       -       -       error
retry     unix  -       -       n       -       -       error
discard   unix  -       -       n       -       -       discard
anvil     unix  -       -       n       -       1       anvil
scache    unix  -       -       n       -       1       scache
postlog   unix-dgram n  -       n       -       1       postlogd
tlsmgr    unix  -       -       n       1000?   1       tlsmgr
EOF
}

case $cmd in
start)
	[ $# -ge 2 ] || usage
	port=$1 relay_port=$2
	shift 2
	need_postfix
	if running; then
		die "an instance already runs in $DIR (stop it first)"
	fi
	write_config "$port" "$relay_port" "$@"
	postfix -c "$CONF" start >/dev/null 2>"$DIR/start.err" ||
		die "postfix -c $CONF start failed: $(cat "$DIR/start.err") $(tail -5 "$DIR/maillog")"
	i=0
	until port_open "$port"; do
		i=$((i + 1))
		[ $i -lt 100 ] || die "Postfix did not listen on 127.0.0.1:$port within 10s: $(tail -5 "$DIR/maillog")"
		sleep 0.1
	done
	;;
stop)
	[ -f "$CONF/main.cf" ] || exit 0
	running || exit 0
	pid=$(sed 1q "$DIR/queue/pid/master.pid" 2>/dev/null | tr -d ' ') || pid=
	postfix -c "$CONF" stop >/dev/null 2>&1 || true
	i=0
	while running || { [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; }; do
		i=$((i + 1))
		if [ $i -ge 100 ]; then
			# the master is stuck: kill its process group (its own, by setsid)
			[ -n "$pid" ] && kill -9 -- "-$pid" 2>/dev/null || true
			break
		fi
		sleep 0.1
	done
	;;
status)
	running
	;;
queue)
	queue_count
	;;
wait-empty)
	secs=${1:-30}
	i=0
	while [ "$(queue_count)" != 0 ]; do
		i=$((i + 1))
		[ $i -lt $((secs * 10)) ] || die "queue in $DIR not empty after ${secs}s: $(queue_count) message(s)"
		sleep 0.1
	done
	;;
flush)
	postqueue -c "$CONF" -f
	;;
log)
	cat "$DIR/maillog"
	;;
*)
	usage
	;;
esac
