#!/usr/bin/env bash
# SIGHUP reloads of a release daemon polling ~262,000 ICMP hosts, and what they cost.
#
#   sudo benches/reload_scale.sh              # 32 × /19 of 127.64.0.0/14 (262,080 hosts) every 30 s
#   sudo BLOCKS=16 INTERVAL=10 benches/reload_scale.sh   # 131,040 hosts every 10 s
#
# Starts a private ClickHouse 18.16 (127.0.213.1, HTTP :28213, TCP :29213, data under
# $WORK/ch) and `netpoller run` polling BLOCKS /19 ranges of 127.64.0.0/13 (3 ICMP
# items per host every INTERVAL s); after WARMUP s sends SIGHUP with (a) the same file,
# (b) a file without the first 3 blocks and with 3 new ones (~9% of the hosts removed
# and as many added), (c) the first file again, GAP s apart. Measures each reload's
# duration (SIGHUP to its `configuration reloaded` line), the peak RSS around it
# (VmHWM, reset before each SIGHUP through /proc/PID/clear_refs) against the RSS
# before it, the daemon's CPU over the reload, late iterations and skipped slots
# (/metrics), and from ClickHouse every icmpping item's gaps between two values
# (a gap under half the interval: a slot polled twice; over 1.5: a slot skipped).
# Everything it starts is stopped by pid on exit; $WORK/ch is removed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NP="${NP:-$ROOT/target/release/netpoller}"
WORK="${WORK:-$ROOT/target/reload_scale}"
# shellcheck source=benches/private_clickhouse.sh
. "$ROOT/benches/private_clickhouse.sh"
BLOCKS="${BLOCKS:-32}"
INTERVAL="${INTERVAL:-30}"
WARMUP="${WARMUP:-90}"
GAP="${GAP:-90}"
METRICS="$CH_ADDR:29464"
DB=reload_scale

NP_PID=""
log() { printf '%s reload_scale: %s\n' "$(date -u +%T)" "$*" >&2; }

cleanup() {
    [[ -n $NP_PID ]] && kill -TERM "$NP_PID" 2>/dev/null && wait "$NP_PID" 2>/dev/null || true
    stop_ch
    rm -rf "$WORK/ch"
}
trap cleanup EXIT

# config FILE FIRST_BLOCK: BLOCKS /19 ranges from block FIRST_BLOCK of 127.64.0.0/13.
config() {
    local b ip
    icmp_config reload_scale.sh "$INTERVAL" >"$1"
    for ((b = $2; b < $2 + BLOCKS; b++)); do
        ip="127.$((64 + b / 8)).$(((b % 8) * 32)).0"
        printf '[[host_ranges]]\ncidr = "%s/19"\nname = "h-{ip}"\ntemplates = ["icmp"]\n' "$ip" >>"$1"
    done
}

metric() { # NAME: the sum of every series of that metric in FILE
    awk -v n="$1" '$1 == n || index($1, n "{") == 1 { s += $NF } END { printf "%.0f", s }' "$2"
}
rss() { awk '/^VmRSS/ {print $2}' "/proc/$NP_PID/status"; }
hwm() { awk '/^VmHWM/ {print $2}' "/proc/$NP_PID/status"; }
ticks() { awk '{print $14 + $15}' "/proc/$NP_PID/stat"; }

[[ -x $NP ]] || { log "build first: cargo build --release --locked"; exit 1; }
mkdir -p "$WORK"
rm -rf "$WORK/spool" "$WORK/ch"
config "$WORK/a.toml" 0
config "$WORK/b.toml" 3
cp "$WORK/a.toml" "$WORK/netpoller.toml"
"$NP" -q check-config -c "$WORK/netpoller.toml" >&2
"$NP" -q check-config -c "$WORK/b.toml" --against "$WORK/a.toml" >&2 || true

start_ch
log "ClickHouse pid $CH_PID"
"$NP" -q schema -c "$WORK/netpoller.toml" --apply >&2
T0=$(date +%s)
"$NP" run -c "$WORK/netpoller.toml" >"$WORK/daemon.log" 2>&1 &
NP_PID=$!
log "netpoller pid $NP_PID"
sleep "$WARMUP"

: >"$WORK/reloads.txt"
# reload NAME FILE: one SIGHUP with FILE as the config, measured.
reload() {
    local name=$1 file=$2 n before_rss t0 c0 t1 line peak after_rss m0 m1 i
    n=$(grep -c 'configuration reloaded' "$WORK/daemon.log" || true)
    cp "$file" "$WORK/netpoller.toml"
    curl -s "http://$METRICS/metrics" >"$WORK/m0"
    before_rss=$(rss)
    echo 5 >"/proc/$NP_PID/clear_refs"
    c0=$(ticks)
    t0=$(date +%s.%N)
    kill -HUP "$NP_PID"
    for ((i = 0; i < 600; i++)); do
        [[ $(grep -c 'configuration reloaded\|configuration rejected' "$WORK/daemon.log" || true) -gt $n ]] && break
        sleep 0.1
    done
    t1=$(date +%s.%N)
    sleep 5
    peak=$(hwm)
    line=$(grep 'configuration reloaded\|configuration rejected' "$WORK/daemon.log" | tail -1 | cut -c1-400)
    printf '%s\t%s\t%.2f\t%s\t%s\t%s\n' "$name" "$t0" "$(echo "$t1 - $t0" | bc)" "$before_rss" "$peak" "$(echo "$(ticks) - $c0" | bc)" >>"$WORK/reloads.txt"
    log "reload $name: $(echo "$t1 - $t0" | bc) s, RSS before $before_rss kB, peak $peak kB"
    echo "$line" >>"$WORK/reload-lines.txt"
    sleep "$((GAP - 5))"
    curl -s "http://$METRICS/metrics" >"$WORK/m1"
    after_rss=$(rss)
    printf '%s\tafter %s s: RSS %s kB, late_iterations +%s, skipped_slots +%s, values +%s\n' "$name" "$GAP" "$after_rss" \
        "$(($(metric netpoller_late_iterations_total "$WORK/m1") - $(metric netpoller_late_iterations_total "$WORK/m0")))" \
        "$(($(metric netpoller_skipped_slots_total "$WORK/m1") - $(metric netpoller_skipped_slots_total "$WORK/m0")))" \
        "$(($(metric netpoller_values_total "$WORK/m1") - $(metric netpoller_values_total "$WORK/m0")))" >>"$WORK/reloads.txt"
}
: >"$WORK/reload-lines.txt"
steady_rss=$(rss)
c_steady0=$(ticks)
sleep 20
steady_cpu=$(echo "scale=3; ($(ticks) - $c_steady0) / 100 / 20" | bc)
reload same "$WORK/a.toml"
reload changed "$WORK/b.toml"
reload back "$WORK/a.toml"
T1=$(date +%s)
kill -TERM "$NP_PID"
wait "$NP_PID" || log "netpoller exited $?"
NP_PID=""

{
    echo "steady: RSS $steady_rss kB, CPU $steady_cpu cores (20 s before the first SIGHUP)"
    echo "name	sighup_at	took_s	rss_before_kB	peak_kB	cpu_ticks_5s_after"
    cat "$WORK/reloads.txt"
    cat "$WORK/reload-lines.txt"
    grep 'netpoller stopped' "$WORK/daemon.log" | cut -c1-300
    echo "== icmpping gaps between two values of an item, per window around each SIGHUP (interval $INTERVAL s)"
    while IFS=$'\t' read -r name at _rest; do
        [[ $at == after* ]] && continue
        at=${at%.*}
        q "SELECT '$name' AS reload, count() AS gaps, countIf(g < $INTERVAL / 2) AS twice, countIf(g > $INTERVAL * 3 / 2) AS skipped,
                  min(g) AS min_gap, max(g) AS max_gap
           FROM (SELECT arrayJoin(arrayMap((a, b) -> b - a, arrayPopBack(c), arrayPopFront(c))) AS g
                 FROM (SELECT itemid, arraySort(groupArray(toUInt32(clock))) AS c FROM $DB.history_uint
                       WHERE clock >= toDateTime($((at - 2 * INTERVAL))) AND clock < toDateTime($((at + 3 * INTERVAL))) GROUP BY itemid))
           FORMAT TSV"
    done <"$WORK/reloads.txt"
    echo "== items whose host a reload removed or added: values per item (the first or last values of the window)"
    q "SELECT count() AS items, min(n), max(n) FROM (SELECT itemid, count() AS n FROM $DB.history_uint GROUP BY itemid) FORMAT TSV"
} | tee "$WORK/report.txt"
