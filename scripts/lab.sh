#!/usr/bin/env bash
# The lab in one command: installs and starts the local services (ClickHouse 18.16,
# four snmpd agents, snmpsimd — all on loopback), builds netpoller, creates the history
# tables and runs the daemon on examples/lab.toml for a while, then shows what landed
# in ClickHouse. Every polled address is in 127.0.0.0/8.
#
#   scripts/lab.sh              run for 30 s
#   DURATION=120 scripts/lab.sh
#   KEEP_SERVICES=1 scripts/lab.sh   leave the services running afterwards
#
# Stop early with Ctrl-C: the daemon flushes what it polled before exiting.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
[[ -f "$HOME/.cargo/env" ]] && . "$HOME/.cargo/env"
DURATION=${DURATION:-30}
CONFIG=${CONFIG:-examples/lab.toml}

log() { printf '\n==> %s\n' "$*" >&2; }

started=0
if ! scripts/services.sh status >/dev/null 2>&1; then
    scripts/services.sh up
    started=1
fi
if [[ $started == 1 && ${KEEP_SERVICES:-0} != 1 ]]; then
    trap 'log "scripts/services.sh down"; scripts/services.sh down || true' EXIT
fi
# shellcheck disable=SC1091
. .services/env

log "cargo build --release"
cargo build --release --bin netpoller
NP=./target/release/netpoller

log "netpoller check-config -c $CONFIG"
$NP check-config -c "$CONFIG"

log "netpoller schema -c $CONFIG --apply"
$NP schema -c "$CONFIG" --apply

log "netpoller run -c $CONFIG   (for ${DURATION} s)"
set +e
timeout -s TERM --kill-after=30 "$DURATION" $NP run -c "$CONFIG"
rc=$?
set -e
# timeout's 124 = our SIGTERM: a clean, flushed stop.
[[ $rc == 0 || $rc == 124 ]] || { echo "netpoller run exited with $rc" >&2; exit "$rc"; }

log "what landed in ClickHouse (database glaber)"
for t in history_uint history_dbl history_str; do
    clickhouse-client --host 127.0.0.1 --port "${NETPOLLER_CH_TCP_PORT:-9000}" --query \
        "SELECT '$t' AS table, count() AS rows, uniqExact(itemid) AS items, uniqExact(hostname) AS hosts FROM glaber.$t FORMAT PrettyCompactNoEscapes"
done
clickhouse-client --host 127.0.0.1 --port "${NETPOLLER_CH_TCP_PORT:-9000}" --query \
    "SELECT hostname, itemname, toUInt32(clock) AS clock, value FROM glaber.history_str ORDER BY clock DESC LIMIT 5 FORMAT PrettyCompactNoEscapes"
