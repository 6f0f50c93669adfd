#!/usr/bin/env bash
# Kernel cost of sending one ICMP echo request, by way of sending (examples/send_cost.rs):
# raw socket (netpoller's way), raw socket with our own IPv4 header, and AF_PACKET past
# the IP stack. Runs on the tun rig (benches/tun_rig.sh): a namespace this script creates
# and removes, whose only route is 100.64.0.0/10 via a TUN device answered by tun_echo.
# Modes are interleaved round by round (the machine is shared and noisy); prints each
# round's JSON lines, then the median per mode and its ratio to `raw`.
#
# Usage: sudo benches/send_cost.sh
# Env:   ROUNDS (default 5), COUNT (probes per run, default 200000),
#        NO_BUILD=1 (use target/release/examples/{send_cost,tun_echo} as they are).
set -euo pipefail

cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
COUNT=${COUNT:-200000}
[[ $(id -u) == 0 ]] || { echo "run as root (namespaces, raw and packet sockets)" >&2; exit 1; }
if [[ ${NO_BUILD:-0} != 1 ]]; then
    cargo build --release --example send_cost --example tun_echo
fi
BIN=$PWD/target/release/examples/send_cost
NS=npsc_$$
DEV=npsc0
LOG=$(mktemp)
# shellcheck source=benches/tun_rig.sh
. benches/tun_rig.sh
trap 'tun_rig_down $NS $DEV $LOG; rm -f $LOG' EXIT
tun_rig_up "$NS" "$DEV" 100.64.0.0/10 "$LOG"
# ICMP datagram ("ping") sockets need the creator's group in this range (per namespace).
ip netns exec "$NS" sysctl -qw net.ipv4.ping_group_range="0 0"

OUT=$(mktemp)
for ((r = 1; r <= ROUNDS; r++)); do
    for mode in raw hdrincl packet ping; do
        ip netns exec "$NS" "$BIN" "$mode" "$DEV" "$COUNT" | tee -a "$OUT"
    done
done
python3 - "$OUT" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
med = {}
for m in ("raw", "hdrincl", "packet", "ping"):
    v = [r["us_per_probe"] for r in runs if r["mode"] == m]
    s = [r["sys_us_per_probe"] for r in runs if r["mode"] == m]
    med[m] = statistics.median(v)
    print(f"{m:8} median {med[m]:.2f} us/probe (sys {statistics.median(s):.2f}; "
          f"runs {min(v):.2f}-{max(v):.2f}), {med[m] / med['raw']:.2f}x raw")
PY
rm -f "$OUT"
