#!/usr/bin/env bash
# A ClickHouse outage under a release daemon at a real rate, and the spool's replay after it.
#
#   sudo benches/spool_outage.sh                       # 32,766 ICMP hosts × 3 items / 10 s, 8 min outage
#   sudo WARMUP=60 OUTAGE=300 SPOOL_MAX=100000000 benches/spool_outage.sh   # the cap is hit
#
# Starts a private ClickHouse 18.16 (127.0.213.1, HTTP :28213, TCP :29213, data under
# $WORK/ch) and `netpoller run` polling CIDR (127.64.0.0/17 unless given: 127.0.0.0/8
# answers ICMP on Linux) every 10 s; after WARMUP s stops ClickHouse (SIGTERM to its
# pid) for OUTAGE s, starts it again, waits until the spool is empty and AFTER s more,
# then stops the daemon (SIGTERM) and checks: rows in ClickHouse against the values the
# daemon's stop line counts, duplicates per (itemid, clock, ns), and how late rows
# landed (`ins`, a MATERIALIZED now() column added to the history tables: the insert's
# time). Every 2 s it samples the daemon's VmRSS, CPU ticks and /metrics into
# $WORK/samples.tsv. Everything it starts is stopped by pid on exit; $WORK/ch is removed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NP="${NP:-$ROOT/target/release/netpoller}"
WORK="${WORK:-$ROOT/target/spool_outage}"
# shellcheck source=benches/private_clickhouse.sh
. "$ROOT/benches/private_clickhouse.sh"
CIDR="${CIDR:-127.64.0.0/17}"
WARMUP="${WARMUP:-120}"
OUTAGE="${OUTAGE:-480}"
AFTER="${AFTER:-60}"
MAX_REPLAY="${MAX_REPLAY:-900}"
SPOOL_MAX="${SPOOL_MAX:-}"
METRICS="$CH_ADDR:29464"
DB=spool_outage

NP_PID=""
SAMPLER_PID=""
log() { printf '%s spool_outage: %s\n' "$(date -u +%T)" "$*" >&2; }

cleanup() {
    [[ -n $SAMPLER_PID ]] && kill "$SAMPLER_PID" 2>/dev/null || true
    [[ -n $NP_PID ]] && kill -TERM "$NP_PID" 2>/dev/null && wait "$NP_PID" 2>/dev/null || true
    stop_ch
    rm -rf "$WORK/ch"
}
trap cleanup EXIT

metric() { # NAME: the sum of every series of that metric in $WORK/m
    awk -v n="$1" '$1 == n || index($1, n "{") == 1 { s += $NF } END { printf "%.0f", s }' "$WORK/m.$2"
}

sampler() {
    local t0 i=0 st rss
    t0=$(date +%s.%N)
    printf 't\tphase\trss_kb\tcpu_ticks\tvalues\tspool_bytes\tspool_files\tspooled_rows\treplayed_rows\tdropped\tbackpressure\tlate_iter\tskipped\tinserts\n' >"$WORK/samples.tsv"
    while kill -0 "$NP_PID" 2>/dev/null; do
        rss=$(awk '/^VmRSS/ {print $2}' "/proc/$NP_PID/status" 2>/dev/null || echo 0)
        st=$(awk '{print $14 + $15}' "/proc/$NP_PID/stat" 2>/dev/null || echo 0)
        if curl -s -m 2 "http://$METRICS/metrics" >"$WORK/m.s" 2>/dev/null; then
            printf '%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
                "$(echo "$(date +%s.%N) - $t0" | bc)" "$(cat "$WORK/phase" 2>/dev/null)" "$rss" "$st" \
                "$(metric netpoller_values_total s)" "$(metric netpoller_sink_spool_bytes s)" \
                "$(metric netpoller_sink_spool_files s)" "$(metric netpoller_sink_spooled_rows_total s)" \
                "$(metric netpoller_sink_replayed_rows_total s)" "$(metric netpoller_sink_dropped_rows_total s)" \
                "$(metric netpoller_backpressure_waits_total s)" "$(metric netpoller_late_iterations_total s)" \
                "$(metric netpoller_skipped_slots_total s)" "$(metric netpoller_sink_inserts_total s)" >>"$WORK/samples.tsv"
        fi
        sleep 2
        i=$((i + 1))
    done
}

[[ -x $NP ]] || { log "build first: cargo build --release --locked"; exit 1; }
mkdir -p "$WORK"
rm -rf "$WORK/spool" "$WORK/ch"
SPOOL_LINE=""
[[ -n $SPOOL_MAX ]] && SPOOL_LINE="spool_max_bytes = $SPOOL_MAX"
{
    icmp_config spool_outage.sh 10 "$SPOOL_LINE"
    printf '[[host_ranges]]\ncidr = "%s"\nname = "h-{ip}"\ntemplates = ["icmp"]\n' "$CIDR"
} >"$WORK/netpoller.toml"
"$NP" -q check-config -c "$WORK/netpoller.toml" >&2

start_ch
log "ClickHouse pid $CH_PID"
"$NP" -q schema -c "$WORK/netpoller.toml" --apply >&2
for t in history_uint history_dbl; do
    q "ALTER TABLE $DB.$t ADD COLUMN ins DateTime MATERIALIZED now()"
done

echo warmup >"$WORK/phase"
"$NP" run -c "$WORK/netpoller.toml" >"$WORK/daemon.log" 2>&1 &
NP_PID=$!
log "netpoller pid $NP_PID"
sampler &
SAMPLER_PID=$!
sleep "$WARMUP"

echo outage >"$WORK/phase"
T_DOWN=$(date +%s)
log "stopping ClickHouse (pid $CH_PID) for $OUTAGE s"
stop_ch
sleep "$OUTAGE"
echo replay >"$WORK/phase"
start_ch
T_UP=$(date +%s)
log "ClickHouse back (pid $CH_PID)"
# The spool is empty again: spool_bytes 0 in two samples in a row after the restart.
for ((i = 0; i < MAX_REPLAY; i++)); do
    sleep 1
    curl -s -m 2 "http://$METRICS/metrics" >"$WORK/m.w" 2>/dev/null || continue
    [[ $(metric netpoller_sink_spool_bytes w) == 0 ]] && break
done
T_EMPTY=$(date +%s)
log "spool empty $((T_EMPTY - T_UP)) s after ClickHouse came back"
echo after >"$WORK/phase"
sleep "$AFTER"
kill -TERM "$NP_PID"
wait "$NP_PID" || log "netpoller exited $?"
NP_PID=""
wait "$SAMPLER_PID" 2>/dev/null || true
SAMPLER_PID=""

stopline=$(grep 'netpoller stopped' "$WORK/daemon.log" | tail -1)
values=$(sed -n 's/.* values=\([0-9]*\).*/\1/p' <<<"$stopline")
rows=$(q "SELECT (SELECT count() FROM $DB.history_uint) + (SELECT count() FROM $DB.history_dbl)")
dups=$(q "SELECT (SELECT count() - uniqExact(itemid, clock, ns) FROM $DB.history_uint) + (SELECT count() - uniqExact(itemid, clock, ns) FROM $DB.history_dbl)")
{
    echo "== $stopline"
    echo "values polled $values, rows in ClickHouse $rows, duplicates $dups"
    echo "outage $((T_UP - T_DOWN)) s; spool empty $((T_EMPTY - T_UP)) s after ClickHouse came back"
    grep -E 'sink: ClickHouse|spool: replayed|spool: over spool_max_bytes' "$WORK/daemon.log" | cut -c1-400 | head -20
    echo "== rows by when they landed (ins - clock), by phase of their clock"
    q "SELECT multiIf(clock < $T_DOWN, 'before', clock < $T_UP, 'outage', clock < $T_EMPTY, 'replay', 'after') AS phase,
              count() AS rows, quantile(0.5)(ins - clock) AS p50_s, quantile(0.99)(ins - clock) AS p99_s, max(ins - clock) AS max_s
       FROM (SELECT clock, ins FROM $DB.history_uint UNION ALL SELECT clock, ins FROM $DB.history_dbl)
       GROUP BY phase ORDER BY min(clock) FORMAT PrettyCompactMonoBlock"
    echo "== live rows (clock after ClickHouse came back) per 10 s of clock: rows, when the last landed"
    q "SELECT intDiv(toUInt32(clock) - $T_UP, 10) * 10 AS clock_s, count() AS rows, toUInt32(max(ins)) - $T_UP AS last_landed_s, max(ins - clock) AS max_late_s
       FROM (SELECT clock, ins FROM $DB.history_uint UNION ALL SELECT clock, ins FROM $DB.history_dbl)
       WHERE clock >= $T_UP AND clock < $T_EMPTY + 30 GROUP BY clock_s ORDER BY clock_s FORMAT PrettyCompactMonoBlock"
    echo "== daemon: RSS (kB) and CPU by phase (samples every 2 s)"
    awk -F'\t' 'NR > 1 { p = $2; if (!(p in n)) { order[++k] = p; t0[p] = $1; c0[p] = $4 }
        n[p]++; if ($3 > mx[p]) mx[p] = $3; s[p] += $3; t1[p] = $1; c1[p] = $4; last[p] = $3 }
        END { for (i = 1; i <= k; i++) { p = order[i]; d = t1[p] - t0[p];
            printf "%-7s %4.0f s  RSS mean %6.1f MB max %6.1f MB last %6.1f MB  CPU %.3f cores\n", p, d, s[p] / n[p] / 1024, mx[p] / 1024, last[p] / 1024, (d > 0 ? (c1[p] - c0[p]) / 100 / d : 0) } }' "$WORK/samples.tsv"
    tail -1 "$WORK/samples.tsv" | awk -F'\t' '{ printf "at the end: spool_bytes %s files %s spooled_rows %s replayed_rows %s dropped %s backpressure %s late_iterations %s skipped %s\n", $6, $7, $8, $9, $10, $11, $12, $13 }'
} | tee "$WORK/report.txt"
