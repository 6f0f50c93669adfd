#!/usr/bin/env bash
# ICMP sweep benchmark: `netpoller sweep` vs fping vs nmap on 4,096 and 65,536 hosts,
# 25% silent (nft drops echo requests to every address ≡ 3 mod 4).
#
# Two environments, both inside network namespaces this script creates and removes:
#   lo   — one namespace; targets are 127.78.0.0/20 and /16 on its own loopback.
#          (nmap is skipped here: it reports loopback addresses up without probing.)
#   veth — a sender namespace and a target namespace joined by a veth pair. The target
#          namespace answers for 198.19.0.0/16 (RFC 2544 benchmark range) through a
#          `local` route; the sender namespace has no other interface and no default
#          route, so no packet can leave the machine.
#   On both, the target's echo processing runs inside the sender's send calls and is
#   charged to it (fping and netpoller alike). Steering it to the other CPU with RPS was
#   tried: the target's 1,000-packet backlog then overflows and both tools lose replies.
#   tun  — one namespace whose route to 198.19.0.0/16 is a TUN device; the targets are
#          `tun_echo` (examples/tun_echo.rs), a process that reads the requests and
#          writes the replies (25% silent by address, like nft elsewhere). The sender's
#          kernel path ends at the device queue, as at a NIC's ring, and the target's
#          work (and the reply's receive path) is charged to tun_echo: the figure closest
#          to polling real hosts.
#
# Usage: sudo benches/icmp_sweep.sh [--quick]     (--quick: 4,096 hosts only)
# Env:   TIMEOUT_MS (default 1000), NETPOLLER (default target/release/netpoller, built
#        with `cargo build --release` when missing), NMAP_LIMIT_S (default 300),
#        NICE (default -10: every measured tool runs at this niceness, so that unrelated
#        load on a shared machine disturbs all of them less; the same for every tool),
#        REPS (default 3: every figure is the median of that many runs; nmap runs once),
#        ENVS (default "lo veth tun": which environments to measure).
set -euo pipefail

cd "$(dirname "$0")/.."
TIMEOUT_MS=${TIMEOUT_MS:-1000}
NMAP_LIMIT_S=${NMAP_LIMIT_S:-300}
NICE=${NICE:--10}
REPS=${REPS:-3}
HAVE_PERF=0
perf stat -x, -e task-clock -o /dev/null true 2>/dev/null && HAVE_PERF=1
NETPOLLER=${NETPOLLER:-$PWD/target/release/netpoller}
TUN_ECHO=${TUN_ECHO:-$PWD/target/release/examples/tun_echo}
QUICK=0
[[ ${1:-} == --quick ]] && QUICK=1

[[ $(id -u) == 0 ]] || { echo "run as root (namespaces, nft, raw sockets)" >&2; exit 1; }
for t in fping nmap nft ip /usr/bin/time; do
    command -v "$t" >/dev/null || { echo "missing $t" >&2; exit 1; }
done
if [[ ! -x $NETPOLLER ]]; then
    cargo build --release --bin netpoller
fi
if [[ ! -x $TUN_ECHO ]]; then
    cargo build --release --example tun_echo
fi

ID=$$
NS_LO=npb_lo_$ID
NS_SRC=npb_src_$ID
NS_DST=npb_dst_$ID
NS_TUN=npb_tun_$ID
# shellcheck source=benches/tun_rig.sh
. benches/tun_rig.sh
WORK=$(mktemp -d)
cleanup() {
    tun_rig_down "$NS_TUN" >/dev/null
    for ns in "$NS_LO" "$NS_SRC" "$NS_DST"; do
        ip netns del "$ns" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

silence_quarter() { # netns prefix
    ip netns exec "$1" nft -f - <<EOF
table inet netpoller_bench {
  chain input {
    type filter hook input priority -10; policy accept;
    ip daddr $2 ip daddr & 0.0.0.3 == 0.0.0.3 icmp type echo-request drop
  }
}
EOF
}

# --- namespaces -------------------------------------------------------------------------
ip netns add "$NS_LO"
ip -n "$NS_LO" link set lo up
silence_quarter "$NS_LO" 127.78.0.0/16

ip netns add "$NS_SRC"
ip netns add "$NS_DST"
ip -n "$NS_SRC" link set lo up
ip -n "$NS_DST" link set lo up
ip link add "npb_a_$ID" netns "$NS_SRC" type veth peer name "npb_b_$ID" netns "$NS_DST"
ip -n "$NS_SRC" addr add 198.18.0.1/30 dev "npb_a_$ID"
ip -n "$NS_DST" addr add 198.18.0.2/30 dev "npb_b_$ID"
ip -n "$NS_SRC" link set "npb_a_$ID" up
ip -n "$NS_DST" link set "npb_b_$ID" up
ip -n "$NS_SRC" route add 198.19.0.0/16 via 198.18.0.2
ip -n "$NS_DST" route add local 198.19.0.0/16 dev lo
silence_quarter "$NS_DST" 198.19.0.0/16

tun_rig_up "$NS_TUN" npbt0 198.19.0.0/16 "$WORK/tun_echo.log" || exit 1
# Safety: the sender namespace must route nowhere but the veth (tun_rig_up checks its own).
if ip -n "$NS_SRC" route show default | grep -q .; then
    echo "sender namespace has a default route; refusing to run" >&2
    exit 1
fi

# --- target lists -----------------------------------------------------------------------
# list FILE PREFIX3 COUNT: PREFIX3 like 127.78 (two octets), COUNT 4096 or 65536.
list() {
    local file=$1 p=$2 n=$3
    python3 - "$p" "$n" >"$file" <<'EOF'
import sys
p, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    print(f"{p}.{i >> 8}.{i & 255}")
EOF
}

# --- measurement ------------------------------------------------------------------------
printf "%-6s %-6s %-34s %8s %8s %8s %8s %10s %8s %8s\n" env hosts tool wall_s cpu_s alive expect cpu_us/host own_s send_s | tee "$WORK/table"
RESULTS=()

# CPU seconds of a run: task-clock from perf stat when present, else user+sys of time.
cpu_of() { # time-file perf-file
    local wall user sys
    read -r wall user sys < <(tail -1 "$1")
    if [[ -s $2 ]] && grep -q task-clock "$2"; then
        grep task-clock "$2" | cut -d, -f1 | awk '{printf "%.4f", $1 / 1000}'
    else
        echo "$user + $sys" | bc -l
    fi
}

# The wrappers every measured command runs under (nice, timeout, ip netns exec) cost
# 4–6 ms of CPU by themselves, ~10% of a 4,096-host sweep: measure them running `true`
# (median of 7) and subtract that from every tool's figure.
BASE_CPU=0
base_runs=()
for _ in 1 2 3 4 5 6 7; do
    perf_args=()
    if ((HAVE_PERF)); then perf_args=(perf stat -x, -e task-clock -o "$WORK/perfstat"); fi
    rm -f "$WORK/perfstat"
    /usr/bin/time -o "$WORK/time" -f "%e %U %S" "${perf_args[@]}" nice -n "$NICE" timeout 10 ip netns exec "$NS_LO" true
    base_runs+=("$(cpu_of "$WORK/time" "$WORK/perfstat")")
done
BASE_CPU=$(printf '%s\n' "${base_runs[@]}" | sort -g | sed -n 4p)
echo "wrapper baseline (nice + timeout + ip netns exec true): ${BASE_CPU} s CPU, subtracted below"

median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

# One run of a measured command; sets R_WALL R_CPU R_ALIVE R_OWN R_SEND (or returns 1
# when it hit the time limit).
run_once() { # label ns cmd...
    local label=$1 ns=$2
    shift 2
    local out="$WORK/out" err="$WORK/err" tm="$WORK/time"
    local ps="$WORK/perfstat" perf=()
    rm -f "$ps"
    # CPU time: perf's task-clock (µs resolution, follows child processes) when perf
    # works, else user+sys from /usr/bin/time (10 ms resolution).
    if ((HAVE_PERF)); then perf=(perf stat -x, -e task-clock -o "$ps"); fi
    local t0 t1
    t0=$(date +%s%N)
    if ! /usr/bin/time -o "$tm" -f "%e %U %S" "${perf[@]}" nice -n "$NICE" timeout "$NMAP_LIMIT_S" ip netns exec "$ns" "$@" >"$out" 2>"$err"; then
        if [[ ! -s $tm ]] || grep -q "Command exited with non-zero status 124" "$tm"; then
            return 1
        fi
    fi
    t1=$(date +%s%N)
    # Wall from the shell's clock (ns; time's %e has 10 ms resolution), wrappers included.
    R_WALL=$(echo "($t1 - $t0) / 1000000000" | bc -l)
    R_OWN=- R_SEND=-
    # netpoller's own iteration time (first probe to deadline, without process start-up)
    if [[ $label == netpoller* ]]; then
        R_OWN=$(grep -oE 'unreachable in [0-9.]+ s' "$err" | tail -1 | grep -oE '[0-9.]+ s' | cut -d' ' -f1)
        R_SEND=$(grep -oE 'send_time_s=[0-9.]+' "$err" | tail -1 | cut -d= -f2 | cut -c1-5)
    fi
    case $label in
        netpoller*) R_ALIVE=$(grep -oE '[0-9]+ alive' "$err" | tail -1 | cut -d' ' -f1) ;;
        "fping -c1"*) R_ALIVE=$(grep -cE 'xmt/rcv/%loss = [0-9]+/[1-9]' "$err" || true) ;;
        "fping -C3"*) R_ALIVE=$(grep -E ' : ' "$err" | grep -cE ' [0-9]+\.[0-9]+' || true) ;;
        nmap*) R_ALIVE=$(grep -oE '\([0-9]+ hosts? up\)' "$out" | grep -oE '[0-9]+' || echo 0) ;;
    esac
    # Minus what the wrappers (nice, timeout, ip netns exec) cost on their own.
    R_CPU=$(echo "$(cpu_of "$tm" "$ps") - $BASE_CPU" | bc -l | awk '{printf "%.4f", ($1 < 0 ? 0 : $1)}')
    grep -E '^ignored replies' "$err" | sed 's/^/         /' || true
}

# Runs a command REPS times (nmap once: it takes minutes) and prints the medians of
# wall, CPU and netpoller's own/send times; alive = the fewest found in any run.
measure() { # env hosts label expect ns cmd...
    local env=$1 hosts=$2 label=$3 expect=$4 ns=$5
    shift 5
    local reps=$REPS walls=() cpus=() owns=() sends=() alive=
    [[ $label == nmap* ]] && reps=1
    for ((r = 0; r < reps; r++)); do
        if ! run_once "$label" "$ns" "$@"; then
            printf "%-6s %-6s %-34s %8s\n" "$env" "$hosts" "$label" "timeout>${NMAP_LIMIT_S}s" | tee -a "$WORK/table"
            return
        fi
        walls+=("$R_WALL") cpus+=("$R_CPU") owns+=("$R_OWN") sends+=("$R_SEND")
        if [[ -z $alive || $R_ALIVE -lt $alive ]]; then alive=$R_ALIVE; fi
    done
    local wall cpu own=- send=- per
    wall=$(median "${walls[@]}") cpu=$(median "${cpus[@]}")
    if [[ $label == netpoller* ]]; then own=$(median "${owns[@]}") send=$(median "${sends[@]}"); fi
    per=$(echo "$cpu * 1000000 / $hosts" | bc -l)
    printf "%-6s %-6s %-34s %8.3f %8.3f %8s %8s %10.2f %8s %8s\n" "$env" "$hosts" "$label" "$wall" "$cpu" "$alive" "$expect" "$per" "$own" "$send" | tee -a "$WORK/table"
    RESULTS+=("$env|$hosts|$label|$wall|$cpu|$alive")
}

T=$TIMEOUT_MS
TS=$(echo "$T / 1000" | bc -l | sed 's/^\./0./;s/0*$//;s/\.$//')
SIZES=(4096 65536)
((QUICK)) && SIZES=(4096)

read -ra ENVS <<<"${ENVS:-lo veth tun}"
for env in "${ENVS[@]}"; do
    case $env in
    lo) ns=$NS_LO pfx=127.78 ;;
    veth) ns=$NS_SRC pfx=198.19 ;;
    tun) ns=$NS_TUN pfx=198.19 ;;
    esac
    for n in "${SIZES[@]}"; do
        expect=$((n * 3 / 4))
        f="$WORK/${env}_$n.txt"
        list "$f" "$pfx" "$n"
        # The peers' list, every address of the prefix (a CIDR would leave out its
        # network and broadcast addresses, as fping -g does).
        cidr="@$f"
        measure "$env" "$n" "netpoller -c1 (100k pps)" "$expect" "$ns" \
            "$NETPOLLER" --log-level info,netpoller::cmd::sweep=debug sweep -c1 -t "${TS}s" "$cidr"
        if [[ $n -le 32768 ]]; then
            measure "$env" "$n" "fping -c1 -r0 -i0" "$expect" "$ns" \
                fping -q -c1 -t"$T" -r0 -i0 -f "$f"
        else
            # fping aborts with ~65k probes in flight: split into two parallel processes.
            split -n l/2 "$f" "$f.part."
            measure "$env" "$n" "fping -c1 -r0 -i0 (2 processes)" "$expect" "$ns" \
                sh -c "fping -q -c1 -t$T -r0 -i0 -f $f.part.aa & fping -q -c1 -t$T -r0 -i0 -f $f.part.ab & wait"
        fi
        if [[ $n == 4096 ]]; then
            measure "$env" "$n" "netpoller -c3 -i20ms (100k pps)" "$expect" "$ns" \
                "$NETPOLLER" --log-level info,netpoller::cmd::sweep=debug sweep -c3 -i 20ms -t "${TS}s" "$cidr"
            measure "$env" "$n" "netpoller -c3 -i20ms (unpaced)" "$expect" "$ns" \
                "$NETPOLLER" --log-level info,netpoller::cmd::sweep=debug sweep -c3 -i 20ms -t "${TS}s" --max-pps 0 "$cidr"
            measure "$env" "$n" "fping -C3 -p20 -r0 -i0" "$expect" "$ns" \
                fping -q -C3 -p20 -t"$T" -r0 -i0 -f "$f"
        fi
        if [[ $env == veth ]]; then
            measure "$env" "$n" "nmap -sn -PE -n" "$expect" "$ns" \
                nmap -sn -PE -n -iL "$f"
        fi
    done
done

# --- ratios -----------------------------------------------------------------------------
echo
echo "ratios (netpoller / peer, same run; < 1 = netpoller better):"
get() { # env hosts label-prefix field(4 wall,5 cpu,6 alive)
    for r in "${RESULTS[@]}"; do
        IFS='|' read -r e h l w c a <<<"$r"
        if [[ $e == "$1" && $h == "$2" && $l == "$3"* ]]; then
            case $4 in 4) echo "$w" ;; 5) echo "$c" ;; 6) echo "$a" ;; esac
            return
        fi
    done
}
for env in "${ENVS[@]}"; do
    for n in "${SIZES[@]}"; do
        for peer in "fping -c1" "nmap"; do
            [[ $peer == nmap && $env != veth ]] && continue
            pw=$(get "$env" "$n" "$peer" 4); pc=$(get "$env" "$n" "$peer" 5)
            nw=$(get "$env" "$n" "netpoller -c1" 4); nc=$(get "$env" "$n" "netpoller -c1" 5)
            [[ -z $pw || -z $nw ]] && continue
            printf "  %-5s %-6s -c1 vs %-9s wall %.2f  cpu %s\n" "$env" "$n" "$peer" \
                "$(echo "$nw / $pw" | bc -l)" \
                "$(if [[ $(echo "$pc > 0" | bc) == 1 ]]; then printf %.2f "$(echo "$nc / $pc" | bc -l)"; else echo n/a; fi)"
        done
        pw=$(get "$env" "$n" "fping -C3" 4); pc=$(get "$env" "$n" "fping -C3" 5)
        nw=$(get "$env" "$n" "netpoller -c3 -i20ms (100k" 4); nc=$(get "$env" "$n" "netpoller -c3 -i20ms (100k" 5)
        if [[ -n $pw && -n $nw ]]; then
            printf "  %-5s %-6s -c3 vs fping -C3  wall %.2f  cpu %s\n" "$env" "$n" \
                "$(echo "$nw / $pw" | bc -l)" \
                "$(if [[ $(echo "$pc > 0" | bc) == 1 ]]; then printf %.2f "$(echo "$nc / $pc" | bc -l)"; else echo n/a; fi)"
        fi
    done
done
tun_rig_down "$NS_TUN" npbt0 "$WORK/tun_echo.log"
echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores; niceness $NICE"
echo "targets (timeout ${T} ms): 4,096 hosts wall <= 1.05 x timeout; 65,536 hosts all" \
     "$((65536 * 3 / 4)) alive in <= 65536/max_pps + timeout + 5%; CPU/host <= fping/2;" \
     "-c3 -i20ms wall <= (timeout + 40 ms) x 1.05"
