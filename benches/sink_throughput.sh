#!/usr/bin/env bash
# Sink throughput into the local ClickHouse server (scripts/services.sh), by batch size
# and compression, with CPU per million rows, plus a peer: curl POSTing pre-built
# RowBinary of the same rows in 100k-row requests (the server's own ingest ceiling on
# this machine). Also: INSERTs per second per table at 100k values/s of input, and
# (mode `outage`) memory of a sink spooling through a long outage.
#
#   benches/sink_throughput.sh                # throughput table + insert rate
#   ROWS=2000000 benches/sink_throughput.sh   # more rows per run
#   REPS=3 benches/sink_throughput.sh         # best of 3 per line (shared, noisy machine)
#   benches/sink_throughput.sh outage 600     # 10-minute outage at 100k rows/s, RSS samples
#
# Needs: NETPOLLER_CH_URL (or .services/env), curl, a release build (done here).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f .services/env ] && . .services/env
CH=${NETPOLLER_CH_URL:-http://127.0.0.1:8123}
ROWS=${ROWS:-1000000}
REPS=${REPS:-1}
MODE=${1:-throughput}

cargo build --release -q -p sink --bin sink_load
BIN=target/release/sink_load
TMP=$(mktemp -d)
DB=npbench_$$
trap 'curl -s "$CH" --data-binary "DROP DATABASE IF EXISTS $DB" >/dev/null; rm -rf "$TMP"' EXIT

chq() { curl -sS --fail-with-body "$CH" --data-binary "$1"; }
schema() {
    chq "DROP DATABASE IF EXISTS $DB" >/dev/null
    chq "CREATE DATABASE $DB" >/dev/null
    for t in dbl:Float64 uint:UInt64 str:String log:String; do
        chq "CREATE TABLE $DB.history_${t%%:*} (day Date, itemid UInt64, clock DateTime, hostname String, itemname String, ns UInt32, value ${t##*:}) ENGINE = MergeTree() PARTITION BY toYYYYMM(day) ORDER BY (itemid, clock)" >/dev/null
    done
}
field() { tr ' ' '\n' | sed -n "s/^$1=//p" | tail -1; }

if [ "$MODE" = outage ]; then
    SECS=${2:-600}
    RATE=100000
    DEAD=http://127.0.0.1:9  # discard port: nothing listens on loopback
    echo "outage: ${SECS}s at ${RATE} rows/s into $DEAD (spool cap 1 GiB)"
    $BIN url=$DEAD spool="$TMP/spool" rows=$((SECS * RATE)) rate=$RATE table=mixed items=100000 \
        attempts=1 backoff_max_ms=5000 >"$TMP/out" 2>"$TMP/err" &
    PID=$!
    printf "%6s %10s %12s %12s\n" t_s rss_kib spooled spool_bytes
    t=0
    while kill -0 $PID 2>/dev/null; do
        rss=$(awk '/VmRSS/{print $2}' /proc/$PID/status 2>/dev/null || echo 0)
        last=$(grep progress "$TMP/out" | tail -1 || true)
        printf "%6d %10s %12s %12s\n" $t "$rss" "$(echo "$last" | field spooled)" "$(echo "$last" | field spool_bytes)"
        sleep 10; t=$((t + 10))
    done
    wait $PID || true
    grep '^result' "$TMP/out"
    grep -c 'dropped the oldest segment' "$TMP/err" | sed 's/^/segments dropped by the cap: /'
    exit 0
fi

echo "rows per run: $ROWS (table history_uint, one table), server $(chq 'SELECT version()')"
printf "%-10s %-6s %12s %10s %14s %8s\n" batch comp rows_per_s seconds cpu_s_per_1M inserts
for batch in 1000 10000 100000; do
    for comp in none lz4; do
        out=; best=0
        for rep in $(seq $REPS); do
            schema
            o=$($BIN url=$CH database=$DB spool="$TMP/spool_${batch}_${comp}_$rep" rows=$ROWS table=uint items=100000 \
                batch_rows=$batch flush_ms=1000 inflight=4 compression=$comp | grep '^result')
            n=$(chq "SELECT count() FROM $DB.history_uint")
            [ "$n" = "$ROWS" ] || { echo "row count $n != $ROWS"; exit 1; }
            r=$(echo "$o" | field rows_per_s)
            if [ "$r" -gt "$best" ]; then best=$r; out=$o; fi
        done
        printf "%-10s %-6s %12s %10s %14s %8s\n" $batch $comp "$(echo "$out" | field rows_per_s)" \
            "$(echo "$out" | field seconds)" "$(echo "$out" | field cpu_s_per_million)" "$(echo "$out" | field inserts)"
    done
done

# Peer: the same kind of rows, RowBinary made by ClickHouse itself, POSTed by curl in
# 100k-row requests, one after another.
schema
NB=$((ROWS / 100000))
for k in $(seq 0 $((NB - 1))); do
    chq "SELECT toDate(toDateTime(1760000000 + intDiv(number, 100000))), toUInt64(number % 100000), toDateTime(1760000000 + intDiv(number, 100000)),
         concat('host-', toString(number % 1000), '.example'), 'ifHCInOctets[Gi0/1]', toUInt32(number % 1000), number
         FROM numbers($((k * 100000)), 100000) FORMAT RowBinary" >"$TMP/peer_$k.rb"
done
bestp=999999
for rep in $(seq $REPS); do
    schema
    t0=$(date +%s.%N)
    for k in $(seq 0 $((NB - 1))); do
        curl -sS --fail-with-body "$CH/?query=INSERT%20INTO%20$DB.history_uint%20FORMAT%20RowBinary" --data-binary @"$TMP/peer_$k.rb" >/dev/null
    done
    t1=$(date +%s.%N)
    n=$(chq "SELECT count() FROM $DB.history_uint")
    [ "$n" = "$((NB * 100000))" ] || { echo "peer row count $n"; exit 1; }
    d=$(echo "$t1 - $t0" | bc -l)
    if [ "$(echo "$d < $bestp" | bc -l)" = 1 ]; then bestp=$d; fi
done
echo "peer curl RowBinary 100k/request, sequential: $(echo "$n / $bestp" | bc -l | xargs printf '%.0f') rows/s ($n rows, $(printf '%.3f' "$bestp") s)"

# Insert rate at 100k values/s of input, three tables, default batching (50k rows / 1 s).
schema
SECS=10
out=$($BIN url=$CH database=$DB spool="$TMP/spool_rate" rows=$((SECS * 100000)) rate=100000 table=mixed items=100000 | grep '^result')
ins=$(echo "$out" | field inserts)
echo "100k values/s for ${SECS}s over 3 tables: $ins INSERTs = $(echo "$ins / $SECS / 3" | bc -l | xargs printf '%.2f') per second per table, cpu_s_per_1M=$(echo "$out" | field cpu_s_per_million)"
