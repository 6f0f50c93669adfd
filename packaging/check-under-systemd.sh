#!/bin/sh
# Checks packaging/netpoller.service and the shard template under a real systemd: boots
# this machine's own systemd in a throwaway container and does what docs/production.md
# and packaging/README.md tell an operator to do, checking each answer.
#
#   packaging/check-under-systemd.sh [BINARY]     (default: target/release/netpoller)
#
# Needs root and systemd-nspawn (Debian: apt-get install systemd-container). The
# container's root is an overlay of / whose writes go to a tmpfs, mounted in a private
# mount namespace, and it has a network of its own (--private-network: its own loopback
# only): nothing it does reaches the host's files or any network; it polls ICMP on
# 127.0.219.0/28, the container's loopback, and has no ClickHouse (values are spooled).
# The host's services enabled in multi-user.target are masked in it. It is powered off
# (killed after 30 s) and the temporary directory removed on exit, failed or not.
# Takes about 40 s. Exit 0: every check passed; 1: some failed (each is named); 2: could
# not boot.
set -u

BIN=${1:-target/release/netpoller}
HERE=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "needs root" >&2; exit 2; }
command -v systemd-nspawn >/dev/null || { echo "needs systemd-nspawn (systemd-container)" >&2; exit 2; }
[ -x "$BIN" ] || { echo "no binary $BIN (cargo build --release --locked)" >&2; exit 2; }

W=$(mktemp -d /tmp/netpoller-sysd.XXXXXX)
NSPAWN=
LEADER=
cleanup() {
    if [ -n "$NSPAWN" ] && kill -0 "$NSPAWN" 2>/dev/null; then
        c systemctl poweroff >/dev/null 2>&1
        i=0
        while kill -0 "$NSPAWN" 2>/dev/null && [ $i -lt 30 ]; do sleep 1; i=$((i + 1)); done
        # The container's PID 1 first: the kernel ends its whole PID namespace with it.
        [ -n "$LEADER" ] && kill -KILL "$LEADER" 2>/dev/null
        kill -KILL "$NSPAWN" 2>/dev/null
        wait "$NSPAWN" 2>/dev/null
    fi
    rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

mkdir -p "$W/src/packaging" "$W/t"
cp "$BIN" "$W/src/netpoller"
cp -r "$HERE/packaging/netpoller.service" "$HERE/packaging/netpoller@.service.d" "$W/src/packaging/"
cp "$HERE/README.md" "$W/src/"
cat > "$W/src/netpoller.toml" <<'EOF'
[daemon]
metrics_listen = "127.0.0.1:9464"
spool_dir = "/var/lib/netpoller/spool"
discovery_file = "/var/lib/netpoller/discovered.json"

[[templates]]
name = "icmp"
items = [
  { key = "icmpping", interval = "2s" },
  { key = "icmppingsec", interval = "2s" },
]

[[host_ranges]]
cidr = "127.0.219.0/29"
name = "h-{ip}"
templates = ["icmp"]
EOF

MASK=
for u in $(ls /etc/systemd/system/multi-user.target.wants/ 2>/dev/null) \
    systemd-timesyncd.service apt-daily.timer apt-daily-upgrade.timer man-db.timer \
    e2scrub_all.timer fstrim.timer dpkg-db-backup.timer; do
    MASK="$MASK systemd.mask=$u"
done
MASK=$(echo "$MASK" | sed 's/ systemd.mask=[^ ]*\.target//g')

# unshare: the mounts (and nspawn's state under /run) live and die with this namespace.
# shellcheck disable=SC2016
setsid unshare -m --propagation private sh -c '
    set -e
    W=$1; shift
    mount -t tmpfs -o mode=0755,size=1G netpoller-check "$W/t"
    mount -t tmpfs -o mode=0755 netpoller-check-run /run
    mkdir -p "$W/t/upper" "$W/t/work" "$W/t/root"
    mount -t overlay netpoller-check -o "lowerdir=/,upperdir=$W/t/upper,workdir=$W/t/work" "$W/t/root"
    exec systemd-nspawn -q -D "$W/t/root" --private-network --register=no --keep-unit \
        --machine=netpoller-check --console=passive --bind-ro="$W/src:/src" -b -- "$@"
' sh "$W" $MASK >"$W/nspawn.log" 2>&1 &
NSPAWN=$!

i=0
while [ -z "$LEADER" ] && [ $i -lt 100 ] && kill -0 "$NSPAWN" 2>/dev/null; do
    sleep 0.1
    LEADER=$(pgrep -P "$NSPAWN" | head -1)
    i=$((i + 1))
done
c() { nsenter -t "$LEADER" -a -- "$@"; }
state=
i=0
while [ -n "$LEADER" ] && [ $i -lt 60 ]; do # its manager's socket first, then the boot
    state=$(c timeout 60 systemctl is-system-running --wait 2>/dev/null) && break
    [ "$state" = degraded ] && break
    sleep 1
    i=$((i + 1))
done
if [ "$state" != running ] && [ "$state" != degraded ]; then
    echo "the container did not boot:" >&2
    cat "$W/nspawn.log" >&2
    exit 2
fi
echo "booted $(c systemctl --version | head -1) in a container (private network)"

FAILED=0
check() { # check NAME COMMAND...: the command (in the container) succeeds
    name=$1
    shift
    if out=$(c sh -c "$*" 2>&1); then
        echo "ok   $name"
    else
        echo "FAIL $name"
        echo "$out" | sed 's/^/     /'
        FAILED=1
    fi
}
within() { # within SECONDS COMMAND: COMMAND, tried each second until it succeeds
    echo "i=0; until $2; do i=\$((i + 1)); [ \$i -lt $1 ] || exit 1; sleep 1; done"
}
journal_has() { # journal_has UNIT TEXT: the unit's journal of this boot has TEXT
    echo "journalctl -b -u $1 -o cat --no-pager | grep -q -- '$2'"
}

check "install as docs/production.md says" '
    install -m 0755 /src/netpoller /usr/local/bin/netpoller &&
    install -D -m 0644 /src/packaging/netpoller.service /etc/systemd/system/netpoller.service &&
    install -D -m 0644 /src/README.md /usr/share/doc/netpoller/README.md &&
    install -D -m 0644 /src/netpoller.toml /etc/netpoller/netpoller.toml &&
    netpoller check-config -c /etc/netpoller/netpoller.toml >/dev/null &&
    systemctl daemon-reload'
check "enable --now returns with the unit active (Type=notify: READY=1)" '
    systemctl enable -q --now netpoller && systemctl is-active -q netpoller'
check "status shows STATUS=" \
    'systemctl status netpoller --no-pager | grep -q "Status: \"polling 6 hosts, 12 items\""'
check "runs unprivileged, no capability left, CAP_NET_RAW the only one bounded" '
    P=$(systemctl show -p MainPID --value netpoller)
    [ "$(stat -c %u /proc/$P)" != 0 ] &&
    grep -q "^CapEff:.0000000000000000" /proc/$P/status &&
    grep -q "^CapBnd:.0000000000002000" /proc/$P/status'
check "state directory owned by the service user, mode 0750" '
    P=$(systemctl show -p MainPID --value netpoller)
    [ "$(stat -c %u:%a /var/lib/private/netpoller)" = "$(stat -c %u /proc/$P):750" ]'
check "polls (raw sockets open): the spool has values" "$(within 20 \
    'netpoller spool dump -c /etc/netpoller/netpoller.toml 2>/dev/null | grep -q "h-127.0.219.1.icmpping.1$"')"
check "reload takes an edit" '
    sed -i "s|127.0.219.0/29|127.0.219.0/28|" /etc/netpoller/netpoller.toml &&
    systemctl reload netpoller &&
    '"$(within 10 "$(journal_has netpoller 'SIGHUP: configuration reloaded hosts=14')")"' &&
    systemctl status netpoller --no-pager | grep -q "polling 14 hosts, 28 items"'
check "reload refuses an invalid config, at priority err, the old one runs on" '
    cp /etc/netpoller/netpoller.toml /root/good.toml &&
    echo "bogus_key = 1" >> /etc/netpoller/netpoller.toml &&
    systemctl reload netpoller &&
    '"$(within 10 'journalctl -b -u netpoller -p err -o cat --no-pager | grep -q "unknown field .bogus_key."')"' &&
    systemctl is-active -q netpoller &&
    systemctl status netpoller --no-pager | grep -q "polling 14 hosts, 28 items"'
check "systemctl kill -s USR1 (retry the reject spool) reaches the daemon, which runs on" '
    systemctl kill -s USR1 netpoller &&
    '"$(within 10 "$(journal_has netpoller 'SIGUSR1: no reject spool here')")"' &&
    systemctl is-active -q netpoller'
check "stop exits 0 and saves the open trends hours" '
    cp /root/good.toml /etc/netpoller/netpoller.toml && systemctl stop netpoller &&
    [ "$(systemctl show -p ExecMainStatus --value netpoller)" = 0 ] &&
    [ -s /var/lib/private/netpoller/spool/trends-open-hours ]'
check "a start continues them" '
    systemctl start netpoller && '"$(within 10 "$(journal_has netpoller 'taken back.*continued=[1-9]')")"
check "ExecStartPre check-config blocks a start, its errors in the journal at priority err" '
    systemctl stop netpoller &&
    echo "start_key = 1" >> /etc/netpoller/netpoller.toml &&
    ! systemctl start netpoller 2>/dev/null &&
    journalctl -b -u netpoller -p err -o cat --no-pager | grep -q "host_ranges\[0\].start_key: unknown field"
    ok=$?
    # Put back, whatever the check said: the checks after it start from a good config.
    cp /root/good.toml /etc/netpoller/netpoller.toml && systemctl stop netpoller &&
    systemctl disable -q netpoller && exit $ok'
check "template: install as packaging/README.md says, 2 instances start" '
    install -D -m 0644 /src/packaging/netpoller.service /etc/systemd/system/netpoller@.service &&
    install -D -m 0644 /src/packaging/netpoller@.service.d/shard.conf \
        /etc/systemd/system/netpoller@.service.d/shard.conf &&
    for i in 0 1; do
        mkdir -p /etc/systemd/system/netpoller@$i-2.service.d &&
        printf "[Service]\nEnvironment=NETPOLLER_METRICS_LISTEN=127.0.0.1:947%s\n" $i \
            > /etc/systemd/system/netpoller@$i-2.service.d/metrics.conf || exit 1
    done &&
    systemctl daemon-reload &&
    systemctl enable -q --now netpoller@0-2 netpoller@1-2 &&
    systemctl is-active -q netpoller@0-2 netpoller@1-2'
check "template: own metrics ports" '
    curl -sf http://127.0.0.1:9470/healthz >/dev/null && curl -sf http://127.0.0.1:9471/healthz >/dev/null'
check "template: own state directories, mode 0750" '
    [ "$(stat -c %a /var/lib/private/netpoller-0-2)" = 750 ] &&
    [ "$(stat -c %a /var/lib/private/netpoller-1-2)" = 750 ]'
cat > "$W/src/hosts.sh" <<'EOF'
for i in 0 1; do
    netpoller spool dump -c /etc/netpoller/netpoller.toml --dir /var/lib/netpoller-$i-2/spool \
        2>/dev/null | cut -f5 | sort -u > /root/h$i
done
[ -z "$(comm -12 /root/h0 /root/h1)" ] || { echo "in both: $(comm -12 /root/h0 /root/h1)"; exit 2; }
[ "$(cat /root/h0 /root/h1 | wc -l)" = 14 ]
EOF
check "template: disjoint hosts, 14 in all" "$(within 20 'sh /src/hosts.sh')"
check "the plain unit starts again after the template, and the template after it" '
    systemctl stop netpoller@0-2 netpoller@1-2 && systemctl start netpoller &&
    systemctl stop netpoller && systemctl start netpoller@0-2 && systemctl stop netpoller@0-2'

[ $FAILED = 0 ] && echo "all checks passed" || echo "some checks FAILED"
exit $FAILED
