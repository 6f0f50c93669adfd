#!/usr/bin/env bash
# SNMP GET benchmark: 8,000 GETs per iteration across many agents, netpoller vs net-snmp.
#
# Agents: AGENTS net-snmp snmpd processes started here, each answering on
# HOSTS_PER_AGENT loopback addresses (127.0.130+k.1..), i.e. AGENTS*HOSTS_PER_AGENT
# "devices" with OIDS_PER_HOST items each (defaults 4 x 50 x 40 = 8,000 GETs). Hybrid
# async means one request in flight per device, so each agent has at most
# HOSTS_PER_AGENT requests queued (below the ~185 at which a net-snmp agent starts to
# drop).
#
# Runs (each printed as one row):
#   netpoller 1 OID/req    `netpoller snmp load`, one OID per request (8,000 requests),
#                          ITERATIONS iterations; RSS after the first, 10th and last
#                          iteration shows whether memory stays flat.
#   netpoller 10 OIDs/req  same items, 10 OIDs per PDU (800 requests).
#   netpoller +10% silent  plus 10% extra devices that never answer (nft drops their
#                          datagrams on input: no ICMP either); iteration wall vs the
#                          bound timeout x (retries+1) + 10%.
#   snmpget sequential     one snmpget process per GET, PEER_SEQ requests, extrapolated.
#   snmpget parallel       PEER_PARALLEL processes at a time, PEER_PAR requests.
# Columns: requests per iteration, requests/s, CPU seconds per 1,000 requests of the
# client (user+sys), iteration wall time (extrapolated to 8,000 GETs for the peers),
# agents' CPU per 1,000 requests (are the agents the bottleneck?), and UDP receive
# errors from /proc/net/snmp during the run (datagrams lost to full socket buffers, on
# the agents' side or ours).
#
# Usage: sudo benches/snmp_get.sh
# Env:   AGENTS=4 HOSTS_PER_AGENT=50 OIDS_PER_HOST=40 ITERATIONS=100 TIMEOUT=1s RETRIES=1
#        PEER_SEQ=500 PEER_PAR=2000 PEER_PARALLEL=16
#        NETPOLLER (default target/release/netpoller, built when missing)
# Only loopback addresses are used; agents, nft table and temp files are removed on exit.
set -euo pipefail

cd "$(dirname "$0")/.."
AGENTS=${AGENTS:-4}
HOSTS_PER_AGENT=${HOSTS_PER_AGENT:-50}
OIDS_PER_HOST=${OIDS_PER_HOST:-40}
ITERATIONS=${ITERATIONS:-100}
TIMEOUT=${TIMEOUT:-1s}
RETRIES=${RETRIES:-1}
PEER_SEQ=${PEER_SEQ:-500}
PEER_PAR=${PEER_PAR:-2000}
PEER_PARALLEL=${PEER_PARALLEL:-16}
NETPOLLER=${NETPOLLER:-$PWD/target/release/netpoller}
NFT_TABLE=netpoller_snmp_bench

[[ $(id -u) == 0 ]] || { echo "run as root (binds udp/161 on loopback, nft)" >&2; exit 1; }
for t in /usr/sbin/snmpd snmpget nft python3; do
    command -v "$t" >/dev/null || { echo "missing $t (apt-get install snmpd snmp nftables)" >&2; exit 1; }
done
(( AGENTS >= 1 && AGENTS <= 8 && HOSTS_PER_AGENT >= 1 && HOSTS_PER_AGENT <= 250 )) || {
    echo "AGENTS 1..8, HOSTS_PER_AGENT 1..250" >&2
    exit 1
}
[[ -x $NETPOLLER ]] || cargo build --release --bin netpoller

WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    nft delete table ip "$NFT_TABLE" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

# Cheap OIDs (no /proc reads in the agent): system scalars and fixed overrides.
OIDS=(.1.3.6.1.2.1.1.1.0 .1.3.6.1.2.1.1.2.0 .1.3.6.1.2.1.1.4.0 .1.3.6.1.2.1.1.5.0
    .1.3.6.1.2.1.1.6.0 .1.3.6.1.2.1.1.7.0)
for i in 1 2 3 4 5 6; do OIDS+=(".1.3.6.1.4.1.8072.9999.9999.$i.0"); done

echo "starting $AGENTS snmpd agents x $HOSTS_PER_AGENT addresses" >&2
: >"$WORK/targets"
for ((k = 0; k < AGENTS; k++)); do
    listen=()
    for ((i = 1; i <= HOSTS_PER_AGENT; i++)); do
        a=127.0.$((130 + k)).$i
        listen+=("udp:$a:161")
        line="$a public"
        for ((j = 0; j < OIDS_PER_HOST; j++)); do line+=" ${OIDS[$(( (i + j) % ${#OIDS[@]} ))]}"; done
        echo "$line" >>"$WORK/targets"
    done
    cat >"$WORK/snmpd$k.conf" <<EOF
rocommunity public 127.0.0.0/8
master no
sysDescr netpoller bench agent $k
sysName bench$k
sysLocation loopback
sysContact bench@127.0.0.1
sysServices 72
override .1.3.6.1.4.1.8072.9999.9999.1.0 integer -42
override .1.3.6.1.4.1.8072.9999.9999.2.0 uinteger 4000000000
override .1.3.6.1.4.1.8072.9999.9999.3.0 counter 123456
override .1.3.6.1.4.1.8072.9999.9999.4.0 octet_str "bench agent $k"
override .1.3.6.1.4.1.8072.9999.9999.5.0 object_id .1.3.6.1.4.1.8072.3.2.10
override .1.3.6.1.4.1.8072.9999.9999.6.0 integer 1
EOF
    (IFS=,; exec /usr/sbin/snmpd -f -Lf "$WORK/snmpd$k.log" -C -c "$WORK/snmpd$k.conf" \
        -p "$WORK/snmpd$k.pid" "${listen[*]}") >/dev/null 2>&1 &
    PIDS+=($!)
done
for ((k = 0; k < AGENTS; k++)); do
    for ((t = 0; t < 50; t++)); do
        snmpget -m '' -t 0.2 -r 0 -v2c -c public "127.0.$((130 + k)).$HOSTS_PER_AGENT" .1.3.6.1.2.1.1.5.0 \
            >/dev/null 2>&1 && break
        sleep 0.2
    done
done

# 10% silent devices, black-holed on input.
SILENT=$(( (AGENTS * HOSTS_PER_AGENT + 9) / 10 ))
cp "$WORK/targets" "$WORK/targets_silent"
for ((i = 1; i <= SILENT; i++)); do
    a=127.0.$((139 + i / 250)).$((i % 250 + 1))
    line="$a public"
    for ((j = 0; j < OIDS_PER_HOST; j++)); do line+=" ${OIDS[$((j % ${#OIDS[@]}))]}"; done
    echo "$line" >>"$WORK/targets_silent"
done
nft -f - <<EOF
table ip $NFT_TABLE {
  chain in {
    type filter hook input priority 0; policy accept;
    ip daddr 127.0.139.0/24 udp dport 161 drop
    ip daddr 127.0.140.0/24 udp dport 161 drop
  }
}
EOF

agent_cpu() { # clock ticks of all agents
    local s=0 p f
    for p in "${PIDS[@]}"; do
        read -ra f <"/proc/$p/stat"
        s=$((s + f[13] + f[14]))
    done
    echo "$s"
}
udp_rcvbuf_errors() { awk '/^Udp: [0-9]/ {print $4 + $6}' /proc/net/snmp; }
TCK=$(getconf CLK_TCK)
ITEMS=$((AGENTS * HOSTS_PER_AGENT * OIDS_PER_HOST))

ROWS=()
row() { ROWS+=("$(printf '%-24s %9s %9s %12s %11s %11s %12s %8s' "$@")"); }
row "run" "req/iter" "req/s" "CPU s/1k req" "CPU us/req" "iter wall s" "agent s/1k" "udp err"

run_netpoller() { # name targets iterations max_oids
    local name=$1 targets=$2 iters=$3 max_oids=$4 a0 u0 a1 u1 out
    a0=$(agent_cpu)
    u0=$(udp_rcvbuf_errors)
    out=$("$NETPOLLER" snmp load --targets "$targets" --iterations "$iters" --timeout "$TIMEOUT" \
        --retries "$RETRIES" --max-oids "$max_oids")
    a1=$(agent_cpu)
    u1=$(udp_rcvbuf_errors)
    local file="$WORK/run_${name//[^A-Za-z0-9]/_}.jsonl"
    echo "$out" >"$file"
    python3 - "$file" "$((a1 - a0))" "$TCK" "$((u1 - u0))" "$name" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
its = [l for l in lines if "iteration" in l]
s = [l for l in lines if l.get("summary")][0]
agent_s = int(sys.argv[2]) / int(sys.argv[3])
req = s["requests"]
walls = sorted(i["wall_s"] for i in its)
fails = sum(i["failed"] for i in its)
rss = [its[0]["rss_kib"], its[min(9, len(its) - 1)]["rss_kib"], its[-1]["rss_kib"]]
print("%s|%d|%.0f|%.4f|%.2f|%.3f|%.3f|%s" % (
    sys.argv[5], its[0]["requests"], s["req_per_s"], s["cpu_s_per_1000_requests"],
    s["cpu_us_per_request"], walls[len(walls) // 2], agent_s * 1000 / req, sys.argv[4]))
print("  %s: %d iterations, median wall %.3f s (min %.3f, max %.3f), item failures %d, "
      "retries %d, hosts timed out %d, CPU us/req user %.2f + sys %.2f, "
      "RSS KiB after iter 1/10/last: %s" % (
    sys.argv[5], len(its), walls[len(walls) // 2], walls[0], walls[-1], fails,
    sum(i["retries"] for i in its), sum(i["hosts_timed_out"] for i in its),
    s["user_us_per_request"], s["sys_us_per_request"], rss), file=sys.stderr)
PY
}

run_peer() { # name count parallel
    local name=$1 count=$2 par=$3 a0 u0 a1 u1 out
    a0=$(agent_cpu)
    u0=$(udp_rcvbuf_errors)
    out=$(python3 benches/snmp/peers.py "$WORK/targets" "$count" "$par")
    a1=$(agent_cpu)
    u1=$(udp_rcvbuf_errors)
    python3 - "$out" "$((a1 - a0))" "$TCK" "$((u1 - u0))" "$name" "$ITEMS" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
agent_s = int(sys.argv[2]) / int(sys.argv[3])
items = int(sys.argv[6])
print("%s|%d|%.0f|%.4f|%.2f|%.3f|%.3f|%s" % (
    sys.argv[5], items, r["req_per_s"], r["cpu_s_per_1000_requests"],
    r["cpu_s_per_1000_requests"] * 1000, items / r["req_per_s"],
    agent_s * 1000 / r["requests"], sys.argv[4]))
print("  %s: measured on %d requests (%d failed), wall %.2f s; iteration wall extrapolated "
      "to %d" % (sys.argv[5], r["requests"], r["failures"], r["wall_s"], items), file=sys.stderr)
PY
}

add() { IFS='|' read -ra f <<<"$1"; row "${f[@]}"; }
echo "netpoller: $ITEMS GETs/iteration, $ITERATIONS iterations" >&2
add "$(run_netpoller "netpoller 1 OID/req" "$WORK/targets" "$ITERATIONS" 1)"
add "$(run_netpoller "netpoller 10 OIDs/req" "$WORK/targets" 20 10)"
add "$(run_netpoller "netpoller +10% silent" "$WORK/targets_silent" 5 1)"
echo "  bound for the silent run: timeout $TIMEOUT x (retries $RETRIES + 1) + 10%" >&2
echo "snmpget peers" >&2
add "$(run_peer "snmpget sequential" "$PEER_SEQ" 1)"
add "$(run_peer "snmpget parallel x$PEER_PARALLEL" "$PEER_PAR" "$PEER_PARALLEL")"

echo
printf '%s\n' "${ROWS[@]}"
