# Sourced by benchmarks that stop and start a ClickHouse of their own (never the
# services' server, which others' tests use): scripts/services.sh's ClickHouse alone,
# its config and data in $WORK/ch, listening on $CH_ADDR (loopback) :$CH_HTTP / :$CH_TCP.
#   start_ch / stop_ch    start it (CH_PID set) / stop it by its pid file (TERM, then KILL)
#   q SQL                 run SQL over HTTP (curl), the response on stdout
CH_ADDR="${CH_ADDR:-127.0.213.1}"
CH_HTTP="${CH_HTTP:-28213}"
CH_TCP="${CH_TCP:-29213}"
CH_PID=""

ch_services() {
    NETPOLLER_SERVICES_DIR="$WORK/ch" NETPOLLER_CH_LISTEN="$CH_ADDR" \
        NETPOLLER_CH_HTTP_PORT="$CH_HTTP" NETPOLLER_CH_TCP_PORT="$CH_TCP" \
        "$ROOT/scripts/services.sh" "$1"
}
start_ch() {
    ch_services clickhouse-up
    CH_PID=$(cat "$WORK/ch/clickhouse.pid")
}
stop_ch() {
    [[ -n $CH_PID ]] || return 0
    ch_services clickhouse-down
    CH_PID=""
}
q() { curl -sS --fail-with-body "http://$CH_ADDR:$CH_HTTP/" --data-binary "$1"; }
