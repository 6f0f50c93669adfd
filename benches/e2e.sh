#!/usr/bin/env bash
# End-to-end benchmark: `netpoller run` polling loopback hosts and the local snmpd
# agents into the local ClickHouse, measured from the outside, next to fping (also as
# Zabbix's pingers run it), nmap (tun rig),
# net-snmp snmpget and snmpbulkget and prometheus-snmp-exporter on the same hosts and
# OIDs. Issue 8.
#
#   sudo benches/e2e.sh                      every workload, 3 runs each (big, mem1m: 1), ~50 min
#   sudo DURATION=20 WARMUP=12 RUNS=1 benches/e2e.sh icmp snmp     smoke run
#
# Workloads (benches/e2e/e2e.py WORKLOADS):
#   icmp     4,096 hosts x 3 ICMP items every 10 s, 3 packets, 25% silent
#   snmp     8,000 GETs every 10 s: 4 snmpd agents x 1,960 OIDs + snmpsimd x 160
#   both     icmp + snmp in one daemon
#   scale10  10x both: 40,960 ICMP hosts + 80,000 OIDs on 40 snmpd agents + snmpsimd
#   big      262,144 ICMP hosts every 8 s + the scale10 SNMP load (the >= 100k NVPS target)
#   icmpbig  big's ICMP load alone (~98k NVPS): CPU per ICMP value at scale
#   mem1m    335,872 ICMP hosts x 3 items (1.0M items) polled hourly: memory per item
#
# Per run: fresh database bench_e2e (schema applied by `netpoller schema --apply`),
# `netpoller run` for WARMUP + DURATION s, then SIGTERM. Reported over the DURATION
# window only: NVPS = rows whose `clock` falls in the window, counted in ClickHouse after
# the daemon flushed; CPU of netpoller and of clickhouse-server (/proc/PID/stat);
# netpoller's VmHWM; lateness, late iterations, skipped slots, item errors, sink drops,
# spooled rows and backpressure waits from /metrics.
#
# Env: DURATION (s, default 90), WARMUP (s, default 25), RUNS (default 3), BIG_RUNS
# (default 1), NO_BUILD=1 (use the existing target/release/netpoller), NO_PEERS=1,
# FPING_REPEAT (passes of the one-process fping per run, median kept; default 3),
# KEEP_SERVICES=1 (leave services started by this script running), SHARED_CH=1 (use
# the services' ClickHouse instead of a private one), E2E_NICE=-10 (run netpoller and
# the private ClickHouse at that niceness: a dedicated machine on a shared one),
# E2E_PERF=1 (perf record 20 s of each window into target/e2e/<wl>/perf<N>.data;
# E2E_PERF_FREQ=Hz, default 499; E2E_PERF_CALLGRAPH=fp|dwarf, default fp: dwarf
# unwinds netpoller's own frames, which are built without frame pointers),
# E2E_WCHAN=1 (sample state and wait channel of netpoller threads for 20 s),
# E2E_OVERRIDE='{"daemon": {...}}' (explore settings; recorded with the results),
# E2E_BIN=path E2E_BUILD=label (A/B of builds: run this netpoller binary instead of
# target/release/netpoller, implies NO_BUILD=1; the label is recorded with the results
# and makes the runs a variant of their own in the summary),
# E2E_PAIR="LABEL=BIN LABEL=BIN" (A/B of two builds in one window: both poll the ICMP
# workload at once, each its own copy of the hosts, database and metrics port, for RUNS
# rounds, swapping places each round; no peers; e2e.py `pair`),
# E2E_RIG=lo|tun (where the ICMP hosts are, below).
#
# Rigs (E2E_RIG). lo (default): the ICMP hosts are 127.64.0.0/10 on loopback, where the
# kernel answers each echo request inside the sender's own send call, so the CPU
# measured for netpoller and fping includes the targets' work. tun: everything (the
# private ClickHouse, netpoller, fping, e2e.py) runs in a network namespace made for
# the run, whose route to 100.64.0.0/10 is a TUN device answered by tun_echo
# (examples/tun_echo.rs) in its own process: the pinger's kernel path ends at the device
# queue as at a NIC, and the targets' work is charged to tun_echo. ICMP workloads only
# (icmp, icmpbig, mem1m); the namespace has no other interface and no default route.
#
# Network safety: every address polled is in 127.0.0.0/8 or, with E2E_RIG=tun, in the
# rig's own namespace. The script adds its own nft
# table `inet netpoller_e2e` (drops echo requests to 127.64.0.0/10 addresses = 3 mod 4)
# and, for scale10/big, 36 extra snmpd on 127.0.22.1-36; both are removed on exit, the
# snmpd by pid. Results: target/e2e/results.jsonl (one line per run), summary.json,
# results.tsv; netpoller logs in target/e2e/<workload>/run<N>-<time>.log.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
[[ -f "$HOME/.cargo/env" ]] && . "$HOME/.cargo/env"

DURATION=${DURATION:-90}
WARMUP=${WARMUP:-25}
RUNS=${RUNS:-3}
BIG_RUNS=${BIG_RUNS:-1}
OUT=$ROOT/target/e2e
PY="python3 $ROOT/benches/e2e/e2e.py"
PY_HOST=$PY # the summary runs after the tun rig is gone
# shellcheck source=benches/tun_rig.sh
. "$ROOT/benches/tun_rig.sh"
NFT_TABLE=netpoller_e2e
EXTRA_SNMPD=36
WORKLOADS=("$@")
[[ ${#WORKLOADS[@]} -gt 0 ]] || WORKLOADS=(icmp snmp both scale10 big mem1m)

log() { printf '\n==> %s\n' "$*" >&2; }
die() {
    printf 'e2e: error: %s\n' "$*" >&2
    exit 1
}

[[ $(id -u) == 0 ]] || die "run as root (raw ICMP sockets, nft)"
for t in nft fping nmap snmpget snmpbulkget snmpd python3 curl xargs; do
    command -v "$t" >/dev/null || die "missing $t"
done
RIG=${E2E_RIG:-lo}
[[ $RIG == lo || $RIG == tun ]] || die "unknown E2E_RIG $RIG (lo or tun)"
icmp_only() { [[ $1 == icmp || $1 == icmpbig || $1 == mem1m ]]; }
need_oids=0
for w in "${WORKLOADS[@]}"; do
    case $w in icmp | snmp | both | scale10 | big | icmpbig | mem1m) ;; *) die "unknown workload $w" ;; esac
    icmp_only "$w" && continue
    [[ -z ${E2E_PAIR:-} ]] || die "E2E_PAIR runs ICMP workloads only (icmp, icmpbig, mem1m)"
    need_oids=1
    [[ $RIG == lo ]] || die "workload $w polls SNMP agents, which E2E_RIG=tun cannot reach"
done

mkdir -p "$OUT"
: >"$OUT/pids"
started_services=0
snmpd_pids=()
RIG_NS=
# In the tun rig every process that talks to netpoller, ClickHouse or the hosts runs in
# the rig's namespace.
IN_RIG=()
ch_get() { "${IN_RIG[@]}" curl -s "$NETPOLLER_CH_URL/?query=$1"; }

cleanup() {
    local rc=$? pid
    set +e
    # Processes e2e.py started (netpoller, the exporter) if it died before stopping them.
    while read -r pid; do
        [[ -n $pid && -d /proc/$pid ]] || continue
        case $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) in
        *netpoller* | *prometheus-snmp-exporter*) kill -TERM "$pid" 2>/dev/null ;;
        esac
    done <"$OUT/pids"
    for pid in "${snmpd_pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null
    done
    for pid in "${snmpd_pids[@]}"; do
        for _ in $(seq 50); do [[ -d /proc/$pid ]] || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null
    done
    nft delete table inet "$NFT_TABLE" 2>/dev/null
    if [[ -n ${ch_pid:-} ]]; then
        kill -TERM "$ch_pid" 2>/dev/null
        for _ in $(seq 150); do [[ -d /proc/$ch_pid ]] || break; sleep 0.2; done
        kill -KILL "$ch_pid" 2>/dev/null
    fi
    [[ -n $RIG_NS ]] && tun_rig_down "$RIG_NS" >/dev/null
    if [[ $started_services == 1 && ${KEEP_SERVICES:-0} != 1 ]]; then
        scripts/services.sh down
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- services and build
if [[ ${NO_PEERS:-0} != 1 ]]; then
    # The SNMP peer that scripts/services.sh does not need (fping and nmap it does).
    scripts/services.sh install prometheus-snmp-exporter
fi
if ! scripts/services.sh status >/dev/null 2>&1; then
    scripts/services.sh up
    started_services=1
fi
# shellcheck disable=SC1091
. .services/env

if [[ ${NO_BUILD:-0} != 1 && -z ${E2E_BIN:-} ]]; then
    # Two commands: building an example in the same one turns on the dev-dependencies'
    # features for the binary too (tokio's test-util: its clock checked on every now()).
    log "cargo build --release --bin netpoller; cargo build --release --example tun_echo"
    cargo build --release --bin netpoller
    cargo build --release --example tun_echo
fi
export NETPOLLER=${E2E_BIN:-$ROOT/target/release/netpoller}
[[ -x $NETPOLLER ]] || die "no $NETPOLLER"

# ---------------------------------------------------------------- tun rig
if [[ $RIG == tun ]]; then
    RIG_NS=npe2e_$$
    TUN_ECHO=$ROOT/target/release/examples/tun_echo
    tun_rig_up "$RIG_NS" npe0 100.64.0.0/10 "$OUT/tun_echo.log" || die "tun rig"
    IN_RIG=(ip netns exec "$RIG_NS")
    export E2E_RIG=tun E2E_ICMP_NET=100.64.0.0/10
    PY="${IN_RIG[*]} $PY"
    [[ ${SHARED_CH:-0} != 1 ]] || die "SHARED_CH=1 cannot be reached from the tun rig"
fi

# ---------------------------------------------------------------- private ClickHouse
# The services' ClickHouse is shared with everyone's integration tests, so its CPU time
# is not ours alone: by default the benchmark runs its own server (same version and
# settings as scripts/services.sh writes) on 127.0.0.1:$E2E_CH_HTTP_PORT, data under
# target/e2e/clickhouse. SHARED_CH=1 uses the services' server instead.
ch_pid=
if [[ ${SHARED_CH:-0} != 1 ]]; then
    E2E_CH_HTTP_PORT=${E2E_CH_HTTP_PORT:-28123}
    E2E_CH_TCP_PORT=${E2E_CH_TCP_PORT:-29000}
    chd=$OUT/clickhouse
    mkdir -p "$chd"/{data,tmp,user_files,format_schemas,log}
    sed -e "s#$ROOT/.services/clickhouse#$chd#g" \
        -e "s#<http_port>[0-9]*<#<http_port>$E2E_CH_HTTP_PORT<#" \
        -e "s#<tcp_port>[0-9]*<#<tcp_port>$E2E_CH_TCP_PORT<#" \
        .services/clickhouse/config.xml >"$chd/config.xml"
    cp .services/clickhouse/users.xml "$chd/users.xml"
    if "${IN_RIG[@]}" ss -Hltn "sport = :$E2E_CH_HTTP_PORT" | grep -q .; then
        die "tcp port $E2E_CH_HTTP_PORT is taken (set E2E_CH_HTTP_PORT)"
    fi
    (cd "$chd" && exec "${IN_RIG[@]}" /usr/sbin/clickhouse-server --config-file="$chd/config.xml" \
        </dev/null >>"$chd/log/stdout.log" 2>&1) &
    ch_pid=$!
    echo "$ch_pid" >"$OUT/clickhouse.pid"
    export NETPOLLER_CH_URL=http://127.0.0.1:$E2E_CH_HTTP_PORT
    export E2E_CH_PIDFILE=$OUT/clickhouse.pid
    for _ in $(seq 300); do
        [[ $(ch_get "SELECT%201") == 1 ]] && break
        [[ -d /proc/$ch_pid ]] || die "private clickhouse exited; see $chd/log"
        sleep 0.2
    done
    [[ $(ch_get "SELECT%201") == 1 ]] || die "private clickhouse not up"
    if [[ -n ${E2E_NICE:-} ]]; then
        renice -n "$E2E_NICE" -p "$ch_pid" >/dev/null
    fi
fi

# ---------------------------------------------------------------- 25% silent ICMP hosts
# (in the tun rig, tun_echo --silent-mask 3 does this)
nft delete table inet "$NFT_TABLE" 2>/dev/null || true
[[ $RIG == tun ]] || nft -f - <<EOF
table inet $NFT_TABLE {
  chain input {
    type filter hook input priority -10; policy accept;
    ip daddr 127.64.0.0/10 ip daddr & 0.0.0.3 == 0.0.0.3 icmp type echo-request drop
  }
}
EOF

# ---------------------------------------------------------------- extra snmpd for 10x
need_extra=0
for w in "${WORKLOADS[@]}"; do [[ $w == scale10 || $w == big ]] && need_extra=1; done
if [[ $need_extra == 1 ]]; then
    log "starting $EXTRA_SNMPD extra snmpd agents on 127.0.22.1-$EXTRA_SNMPD"
    for ((i = 1; i <= EXTRA_SNMPD; i++)); do
        addr=127.0.22.$i
        dir=$OUT/snmpd/$i
        mkdir -p "$dir/persist"
        if ss -Hlun "src $addr:161" | grep -q .; then
            die "udp $addr:161 is taken by a process this script did not start"
        fi
        sed -e "s/@N@/$((100 + i))/g" -e "s/@COMMUNITY@/public/g" \
            examples/snmpd/agent.conf.in >"$dir/snmpd.conf"
        SNMP_PERSISTENT_DIR="$dir/persist" MIBS="" /usr/sbin/snmpd -f -Lf "$dir/snmpd.log" -C \
            -c "$dir/snmpd.conf" \
            -I -smux,mteTrigger,mteTriggerConf,hr_swrun,hr_filesys,hr_disk,ipCidrRouteTable,inetCidrRouteTable,ipfwchains \
            "udp:$addr:161" </dev/null >>"$dir/stdout.log" 2>&1 &
        snmpd_pids+=($!)
    done
    for ((i = 1; i <= EXTRA_SNMPD; i++)); do
        for _ in $(seq 100); do
            ss -Hlun "src 127.0.22.$i:161" | grep -q . && break
            sleep 0.1
        done
        ss -Hlun "src 127.0.22.$i:161" | grep -q . || die "snmpd on 127.0.22.$i did not start"
    done
fi

# ---------------------------------------------------------------- OIDs, runs, peers
if [[ $need_oids == 1 ]] && [[ ! -s $OUT/oids-agent.txt || ! -s $OUT/oids-sim.txt || ${REFRESH_OIDS:-0} == 1 ]]; then
    log "selecting OIDs (walk + verify with netpoller poll-once)"
    $PY oids
fi
if [[ -s $OUT/results.jsonl ]]; then
    mv "$OUT/results.jsonl" "$OUT/results.$(date +%Y%m%dT%H%M%S).jsonl"
fi
{
    echo "date: $(date -u +%FT%TZ)"
    echo "commit: $(git rev-parse --short HEAD) $(git status --porcelain | wc -l) uncommitted paths"
    echo "kernel: $(uname -r)"
    echo "cpu: $(nproc) x $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"
    echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
    echo "clickhouse: $(ch_get "SELECT%20version()")"
    echo "fping: $(fping -v 2>&1 | head -1)"
    echo "net-snmp: $(snmpget -V 2>&1 | head -1)"
    echo "settings: DURATION=$DURATION WARMUP=$WARMUP RUNS=$RUNS BIG_RUNS=$BIG_RUNS RIG=$RIG"
} >"$OUT/machine.txt"
cat "$OUT/machine.txt" >&2

for w in "${WORKLOADS[@]}"; do
    if [[ -n ${E2E_PAIR:-} ]]; then
        log "workload $w, two builds at once, $RUNS rounds"
        $PY pair "$w" --rounds "$RUNS" --warmup "$WARMUP" --duration "$DURATION"
        continue
    fi
    n=$RUNS
    [[ $w == big || $w == icmpbig || $w == mem1m ]] && n=$BIG_RUNS
    for ((r = 1; r <= n; r++)); do
        log "workload $w, run $r/$n"
        $PY run "$w" --index "$r" --warmup "$WARMUP" --duration "$DURATION"
        # Peers right after each run (same machine state); big has none that fit.
        if [[ ${NO_PEERS:-0} != 1 && $w != big && $w != both && $w != mem1m ]]; then
            $PY peers "$w" --index "$r"
        fi
    done
done

if [[ -n $RIG_NS ]]; then
    log "$(tun_rig_down "$RIG_NS" npe0 "$OUT/tun_echo.log")"
    RIG_NS=
fi
[[ -z ${E2E_PAIR:-} ]] || exit 0 # each pair printed its own summary
log "summary (target/e2e/summary.json, results.tsv)"
$PY_HOST summary | tee "$OUT/summary.txt"
