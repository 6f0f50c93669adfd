#!/usr/bin/env bash
# What discovered rows cost the loader: the time from `netpoller run` starting to its
# plan being built ("started"), at HOSTS switches x 5 items x ROWS table rows
# (default 4,094 x 5 x 48 = 982,560 items), with the rows listed (`indices`) and with
# the same rows discovered (`discovery`, read from the discovery file: the config is
# parsed twice, without rows and then with them). A discovery re-plan is that second
# parse and the plan build, on the daemon's main thread; the same figure bounds it.
#
# Usage: benches/discovery_plan.sh        Env: RUNS=5 ROWS=48 COLS=5 PREFIX=20
#   NETPOLLER=target/release/netpoller
# COLS: item prototypes per row (beyond 5, made-up columns: a template of thousands of
# prototypes, whose row keys the loader compares pairwise per host); PREFIX: the hosts'
# range, 127.40.0.0/PREFIX (20: 4,094 hosts; 30: 2). E.g. COLS=4000 ROWS=2 PREFIX=30.
# The daemon is stopped as soon as its plan is built. Its hosts are 127.40.0.0/PREFIX
# (loopback): the few SNMP requests it may send before it stops go nowhere else, and the
# discovery walks are not due (the saved rows are walked again over a 7-day interval).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
ROWS=${ROWS:-48}
COLS=${COLS:-5}
PREFIX=${PREFIX:-20}
NETPOLLER=${NETPOLLER:-target/release/netpoller}
[ -x "$NETPOLLER" ] || cargo build --release -q
dir=$(mktemp -d /tmp/netpoller-discovery-plan.XXXXXX)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT

python3 - "$dir" "$ROWS" "$COLS" "$PREFIX" <<'PY'
import ipaddress, json, sys
dir, rows, ncols, prefix = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
net = f"127.40.0.0/{prefix}"
cols = [("in", "1.3.6.1.2.1.31.1.1.1.6"), ("out", "1.3.6.1.2.1.31.1.1.1.10"),
        ("status", "1.3.6.1.2.1.2.2.1.8"), ("in.errors", "1.3.6.1.2.1.2.2.1.14"),
        ("out.errors", "1.3.6.1.2.1.2.2.1.20")][:ncols]
cols += [(f"x{i}", f"1.3.6.1.4.1.99999.{i}") for i in range(len(cols), ncols)]
def config(rows_by):
    items = "\n".join(
        f'  {{ key = "net.if.{k}[{{#SNMPINDEX}}]", oid = "{o}.{{#SNMPINDEX}}", type = "uint", interval = "1m", {rows_by} }},'
        for k, o in cols)
    return f"""[daemon]
metrics_listen = ""
spool_dir = "{dir}/spool"
discovery_file = "{dir}/discovered.json"
[[templates]]
name = "if"
discovery = [{{ name = "if", oid = "1.3.6.1.2.1.2.2.1.2", interval = "7d" }}]
items = [
{items}
]
[[host_ranges]]
cidr = "{net}"
templates = ["if"]
"""
open(f"{dir}/listed.toml", "w").write(config(f'indices = "1-{rows}"'))
open(f"{dir}/discovered.toml", "w").write(config('discovery = "if"'))
# As `run` saves them: the rows, the rule's fingerprint (its column and filters, as
# DiscoveryRule::fingerprint writes it) and each host's address; rows whose rule or
# address differ are not taken (the check below says so).
ips = [str(ip) for ip in ipaddress.ip_network(net).hosts()]
json.dump({
    "rules": {"if": ".1.3.6.1.2.1.2.2.1.2 None None"},
    "hosts": {ip: {"if": f"1-{rows}"} for ip in ips},
    "at": {ip: f"{ip}:161" for ip in ips},
}, open(f"{dir}/discovered.json", "w"))
PY

# Seconds from start to the "started" line (its plan built).
to_plan() {
  local log="$dir/run.log" t0 t1
  t0=$(date +%s.%N)
  "$NETPOLLER" run -c "$1" >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 3000); do grep -q " started " "$log" && break; sleep 0.01; done
  t1=$(date +%s.%N)
  kill "$pid"; wait "$pid" || true; pid=
  grep -q " started " "$log" || { cat "$log" >&2; exit 1; }
  echo "$t0 $t1" | awk '{ printf "%.3f\n", $2 - $1 }'
}
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

for kind in listed discovered; do
  times=$(for _ in $(seq 1 "$RUNS"); do to_plan "$dir/$kind.toml"; done)
  items=$(grep -m1 -o 'items=[0-9]*' "$dir/run.log")
  # Both plans must hold the same items, or the figures compare different work.
  [ "$kind" = listed ] && want=$items
  [ "$items" = "$want" ] || { echo "$kind: $items, not $want: the saved rows were not taken" >&2; cat "$dir/run.log" >&2; exit 1; }
  printf '%-10s %s  start to plan: median %s s of %s runs (%s)\n' \
    "$kind" "$items" "$(echo "$times" | median)" "$RUNS" "$(echo $times)"
done
