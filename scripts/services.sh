#!/usr/bin/env bash
# Real services for netpoller's integration tests and the lab example.
#
#   scripts/services.sh up      install what is missing, start everything, write .services/env
#   scripts/services.sh down    stop what `up` started (by pid file only), remove pid files
#   scripts/services.sh status  print what runs; exit 0 only when every service is up
#   scripts/services.sh clickhouse-up | clickhouse-down
#                               ClickHouse alone (a benchmark's own server: set
#                               NETPOLLER_SERVICES_DIR, NETPOLLER_CH_LISTEN and the ports)
#
# Everything lives under <project>/.services/ and listens on loopback only:
#   ClickHouse 18.16 (Debian)   HTTP ${NETPOLLER_CH_LISTEN:-127.0.0.1}:${NETPOLLER_CH_HTTP_PORT:-8123}, TCP :${NETPOLLER_CH_TCP_PORT:-9000}
#   net-snmp snmpd agents       udp 127.0.20.1..4:161 (agent 4 uses community "s3cret")
#   snmpsimd (snmpsim 0.4.5)    udp ${NETPOLLER_SNMPSIM_ADDR:-127.0.21.1:161}, community = recording name
#
# `up` is idempotent: a service whose pid file names a live process of the right binary
# is left alone. `down` never touches a process it did not start.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SVC="${NETPOLLER_SERVICES_DIR:-$ROOT/.services}"

CH_LISTEN="${NETPOLLER_CH_LISTEN:-127.0.0.1}"
[[ $CH_LISTEN == 127.* ]] || {
    echo "services: NETPOLLER_CH_LISTEN must be a loopback address (127.0.0.0/8)" >&2
    exit 2
}
CH_HTTP_PORT="${NETPOLLER_CH_HTTP_PORT:-8123}"
CH_TCP_PORT="${NETPOLLER_CH_TCP_PORT:-9000}"
CH_BIN=/usr/sbin/clickhouse-server
CH_DIR="$SVC/clickhouse"
CH_PID="$SVC/clickhouse.pid"
CH_WAIT_SECS="${NETPOLLER_CH_WAIT_SECS:-60}"

SNMPD_BIN=/usr/sbin/snmpd
SNMPD_ADDRS=(127.0.20.1 127.0.20.2 127.0.20.3 127.0.20.4)
SNMPD_PORT=161

SNMPSIM_BIN=/usr/bin/snmpsimd
SNMPSIM_ADDR="${NETPOLLER_SNMPSIM_ADDR:-127.0.21.1:161}"
SNMPSIM_DIR="$SVC/snmpsim"
SNMPSIM_PID="$SVC/snmpsim.pid"
SNMPSIM_EXAMPLES=/usr/share/doc/snmpsim/examples/data
# snmpsimd logs every request at its default level, which slows it under load and
# fills the disk in benchmarks; NETPOLLER_SNMPSIM_LOGGING=stderr turns that back on.
SNMPSIM_LOGGING="${NETPOLLER_SNMPSIM_LOGGING:-null}"

APT_PACKAGES=(clickhouse-server clickhouse-client snmpd snmp fping nmap nftables iproute2 snmpsim)

log() { printf 'services: %s\n' "$*" >&2; }
die() {
    printf 'services: error: %s\n' "$*" >&2
    exit 1
}

# ---------------------------------------------------------------- install

# install_missing [PACKAGE...]: the given Debian packages (default APT_PACKAGES) that are
# not installed, installed without letting them start their system services.
install_missing() {
    local missing=() p wanted=("$@")
    [[ ${#wanted[@]} -gt 0 ]] || wanted=("${APT_PACKAGES[@]}")
    for p in "${wanted[@]}"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
            missing+=("$p")
        fi
    done
    [[ ${#missing[@]} -eq 0 ]] && return 0
    [[ $(id -u) -eq 0 ]] || die "packages missing (${missing[*]}) and not root: install them with apt-get"
    log "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    # The Debian packages enable and start their own system services (snmpd on
    # 127.0.0.1:161, clickhouse on 8123/9000); policy-rc.d 101 keeps them from
    # starting during the install so they cannot take our ports.
    local policy=/usr/sbin/policy-rc.d created_policy=0
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod 755 "$policy"
        created_policy=1
    fi
    local rc=0
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null || rc=$?
    [[ $created_policy -eq 1 ]] && rm -f "$policy"
    [[ $rc -eq 0 ]] || die "apt-get install ${missing[*]} failed (exit $rc)"
}

# ---------------------------------------------------------------- pid helpers

# pid_running PIDFILE: the process in the pid file exists and has not exited, whatever it
# runs. For start-up loops: until a starting subshell has exec'd the server, its command
# line is this script's, so pid_alive would call a healthy start dead.
pid_running() {
    local pid
    [[ -s $1 ]] || return 1
    pid=$(pid_of "$1")
    [[ -n $pid && -d /proc/$pid ]] || return 1
    # A zombie (exited, not yet reaped by whoever inherited it) is not running.
    [[ $(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null) != Z ]]
}

# pid_alive PIDFILE BINARY: true if the pid file names a running process of BINARY.
pid_alive() {
    local cmd
    pid_running "$1" || return 1
    # snmpsimd is a python script: match the command line, not /proc/pid/exe.
    cmd=$(tr '\0' ' ' <"/proc/$(pid_of "$1")/cmdline" 2>/dev/null || true)
    [[ $cmd == *"$(basename "$2")"* ]]
}

pid_of() { tr -dc '0-9' <"$1"; }

# stop_pidfile PIDFILE BINARY NAME: TERM, wait up to 10 s, then KILL; remove the pid file.
stop_pidfile() {
    local pidfile=$1 bin=$2 name=$3 pid i
    if ! pid_alive "$pidfile" "$bin"; then
        rm -f "$pidfile"
        return 0
    fi
    pid=$(pid_of "$pidfile")
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        [[ -d /proc/$pid ]] || break
        # A zombie child of ours counts as gone.
        [[ $(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null) == Z ]] && break
        sleep 0.1
    done
    if [[ -d /proc/$pid ]] && [[ $(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null) != Z ]]; then
        log "$name (pid $pid) ignored TERM for 10 s: KILL"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
    log "stopped $name (pid $pid)"
}

# udp_port_busy ADDR PORT: true if something listens on that UDP address:port.
udp_port_busy() {
    ss -Hlun "src $1:$2" 2>/dev/null | grep -q .
}

tcp_port_busy() {
    ss -Hltn "sport = :$1" 2>/dev/null | grep -q .
}

# ---------------------------------------------------------------- ClickHouse

write_clickhouse_config() {
    mkdir -p "$CH_DIR"/{data,tmp,user_files,format_schemas,log}
    cat >"$CH_DIR/config.xml" <<EOF
<?xml version="1.0"?>
<!-- Generated by scripts/services.sh: a loopback-only ClickHouse for netpoller tests. -->
<yandex>
    <logger>
        <level>information</level>
        <log>$CH_DIR/log/clickhouse-server.log</log>
        <errorlog>$CH_DIR/log/clickhouse-server.err.log</errorlog>
        <size>50M</size>
        <count>2</count>
    </logger>
    <listen_host>$CH_LISTEN</listen_host>
    <http_port>$CH_HTTP_PORT</http_port>
    <tcp_port>$CH_TCP_PORT</tcp_port>
    <max_connections>1024</max_connections>
    <keep_alive_timeout>3</keep_alive_timeout>
    <max_concurrent_queries>100</max_concurrent_queries>
    <uncompressed_cache_size>268435456</uncompressed_cache_size>
    <mark_cache_size>268435456</mark_cache_size>
    <path>$CH_DIR/data/</path>
    <tmp_path>$CH_DIR/tmp/</tmp_path>
    <user_files_path>$CH_DIR/user_files/</user_files_path>
    <format_schema_path>$CH_DIR/format_schemas/</format_schema_path>
    <users_config>$CH_DIR/users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <timezone>UTC</timezone>
    <mlock_executable>false</mlock_executable>
    <builtin_dictionaries_reload_interval>3600</builtin_dictionaries_reload_interval>
    <max_session_timeout>3600</max_session_timeout>
    <default_session_timeout>60</default_session_timeout>
    <query_log>
        <database>system</database>
        <table>query_log</table>
        <partition_by>toYYYYMM(event_date)</partition_by>
        <flush_interval_milliseconds>7500</flush_interval_milliseconds>
    </query_log>
    <distributed_ddl>
        <path>/clickhouse/task_queue/ddl</path>
    </distributed_ddl>
</yandex>
EOF
    cat >"$CH_DIR/users.xml" <<'EOF'
<?xml version="1.0"?>
<!-- Generated by scripts/services.sh: user "default", empty password, loopback only
     (a client of a server on another 127.x address connects from that address). -->
<yandex>
    <profiles>
        <default>
            <max_memory_usage>4000000000</max_memory_usage>
            <use_uncompressed_cache>0</use_uncompressed_cache>
            <load_balancing>random</load_balancing>
        </default>
        <readonly>
            <readonly>1</readonly>
        </readonly>
    </profiles>
    <users>
        <default>
            <password></password>
            <networks>
                <ip>::1</ip>
                <ip>127.0.0.0/8</ip>
            </networks>
            <profile>default</profile>
            <quota>default</quota>
        </default>
    </users>
    <quotas>
        <default>
            <interval>
                <duration>3600</duration>
                <queries>0</queries>
                <errors>0</errors>
                <result_rows>0</result_rows>
                <read_rows>0</read_rows>
                <execution_time>0</execution_time>
            </interval>
        </default>
    </quotas>
</yandex>
EOF
}

ch_query() {
    # Plain HTTP without curl (curl is not guaranteed on a fresh machine): bash /dev/tcp.
    local q=$1 resp
    exec 3<>"/dev/tcp/$CH_LISTEN/$CH_HTTP_PORT" || return 1
    printf 'POST / HTTP/1.0\r\nHost: %s\r\nContent-Length: %d\r\n\r\n%s' "$CH_LISTEN" "${#q}" "$q" >&3
    resp=$(timeout 5 cat <&3) || {
        exec 3>&-
        return 1
    }
    exec 3>&-
    [[ $resp == "HTTP/1."*" 200 "* ]] || return 1
    printf '%s\n' "${resp#*$'\r\n\r\n'}"
}

start_clickhouse() {
    if pid_alive "$CH_PID" "$CH_BIN"; then
        log "clickhouse already running (pid $(pid_of "$CH_PID"))"
        return 0
    fi
    rm -f "$CH_PID"
    if tcp_port_busy "$CH_HTTP_PORT" || tcp_port_busy "$CH_TCP_PORT"; then
        die "TCP port $CH_HTTP_PORT or $CH_TCP_PORT is taken by a process services.sh did not start
  (a system clickhouse-server? try: systemctl stop clickhouse-server), or set
  NETPOLLER_CH_HTTP_PORT / NETPOLLER_CH_TCP_PORT"
    fi
    write_clickhouse_config
    log "starting clickhouse on $CH_LISTEN:$CH_HTTP_PORT (http), :$CH_TCP_PORT (tcp)"
    # Run in the foreground of a detached session: we own the pid directly and the
    # server outlives this script. It runs as root; its data directory is root's too,
    # so the owner check of the server passes.
    (
        cd "$CH_DIR"
        exec setsid "$CH_BIN" --config-file="$CH_DIR/config.xml" \
            </dev/null >>"$CH_DIR/log/stdout.log" 2>&1 9>&-
    ) &
    echo $! >"$CH_PID"
    local i
    for ((i = 0; i < CH_WAIT_SECS * 5; i++)); do
        if [[ $(ch_query 'SELECT 1' 2>/dev/null) == 1 ]]; then
            log "clickhouse up: version $(ch_query 'SELECT version()')"
            return 0
        fi
        if ! pid_running "$CH_PID"; then
            break
        fi
        sleep 0.2
    done
    log "clickhouse did not answer SELECT 1 within ${CH_WAIT_SECS}s; log tail:"
    tail -n 30 "$CH_DIR/log/clickhouse-server.err.log" "$CH_DIR/log/stdout.log" >&2 2>/dev/null || true
    stop_pidfile "$CH_PID" "$CH_BIN" clickhouse
    die "clickhouse failed to start"
}

# ---------------------------------------------------------------- snmpd

# Agent N (1-based): sysName agentN, sysDescr "netpoller test agent N".
snmpd_community() { [[ $1 -eq 4 ]] && echo s3cret || echo public; }

SNMPD_TEMPLATE="$ROOT/examples/snmpd/agent.conf.in"

write_snmpd_config() {
    local n=$1 dir=$2 community
    community=$(snmpd_community "$n")
    [[ -r $SNMPD_TEMPLATE ]] || die "missing $SNMPD_TEMPLATE"
    mkdir -p "$dir/persist"
    sed -e "s/@N@/$n/g" -e "s/@COMMUNITY@/$community/g" "$SNMPD_TEMPLATE" >"$dir/snmpd.conf"
}

start_snmpd() {
    local n=$1 addr=$2 dir pidfile
    dir="$SVC/snmpd/$n"
    pidfile="$SVC/snmpd-$n.pid"
    if pid_alive "$pidfile" "$SNMPD_BIN"; then
        log "snmpd $n already running on $addr (pid $(pid_of "$pidfile"))"
        return 0
    fi
    rm -f "$pidfile"
    udp_port_busy "$addr" "$SNMPD_PORT" && die "udp $addr:$SNMPD_PORT is taken by a process services.sh did not start"
    write_snmpd_config "$n" "$dir"
    # -C: only our config; -I -...: skip modules that read much of /proc (slow start,
    # noisy logs) and that the tests do not need; SNMP_PERSISTENT_DIR keeps state out
    # of /var/lib/snmp; MIBS= avoids parsing every MIB file at start.
    (
        export SNMP_PERSISTENT_DIR="$dir/persist" MIBS=""
        exec setsid "$SNMPD_BIN" -f -Lf "$dir/snmpd.log" -C -c "$dir/snmpd.conf" \
            -I -smux,mteTrigger,mteTriggerConf,hr_swrun,hr_filesys,hr_disk,ipCidrRouteTable,inetCidrRouteTable,ipfwchains \
            -p "$pidfile" "udp:$addr:$SNMPD_PORT" </dev/null >>"$dir/stdout.log" 2>&1 9>&-
    ) &
    local bgpid=$! i
    # snmpd writes its pid file once the transport is open; until then use our own.
    for ((i = 0; i < 100; i++)); do
        if [[ -s $pidfile ]] && udp_port_busy "$addr" "$SNMPD_PORT"; then
            log "snmpd $n up on $addr:$SNMPD_PORT (pid $(pid_of "$pidfile"), community $(snmpd_community "$n"))"
            return 0
        fi
        [[ -d /proc/$bgpid ]] || break
        sleep 0.1
    done
    tail -n 20 "$dir/snmpd.log" "$dir/stdout.log" >&2 2>/dev/null || true
    kill -TERM "$bgpid" 2>/dev/null || true
    die "snmpd $n failed to start on $addr:$SNMPD_PORT"
}

# ---------------------------------------------------------------- snmpsimd

# snmpsimd runs as nobody, which cannot enter a project that lives in a private home
# (/root is mode 700 on Debian). Then its data and cache go to a world-readable
# directory in /tmp whose path is kept in $SVC/snmpsim.dir, so `down` removes it.
choose_snmpsim_dir() {
    SNMPSIM_DIR="$SVC/snmpsim"
    if [[ -s $SVC/snmpsim.dir ]]; then
        SNMPSIM_DIR=$(cat "$SVC/snmpsim.dir")
        [[ -d $SNMPSIM_DIR ]] && return 0
        rm -f "$SVC/snmpsim.dir"
        SNMPSIM_DIR="$SVC/snmpsim"
    fi
    mkdir -p "$SNMPSIM_DIR"
    chmod a+rx "$SNMPSIM_DIR"
    if ! runuser -u nobody -- test -x "$SNMPSIM_DIR" 2>/dev/null; then
        SNMPSIM_DIR=$(mktemp -d /tmp/netpoller-snmpsim.XXXXXX)
        chmod 755 "$SNMPSIM_DIR"
        echo "$SNMPSIM_DIR" >"$SVC/snmpsim.dir"
        log "project dir not readable by nobody: snmpsimd data in $SNMPSIM_DIR"
    fi
}

prepare_snmpsim_data() {
    choose_snmpsim_dir
    local data="$SNMPSIM_DIR/data" f base
    mkdir -p "$data" "$SNMPSIM_DIR/cache"
    # Top-level recordings only: community = file name (public, cisco_16_switch, ...).
    for f in "$SNMPSIM_EXAMPLES"/*.snmprec "$SNMPSIM_EXAMPLES"/*.snmprec.gz; do
        [[ -e $f ]] || continue
        base=$(basename "$f")
        if [[ $base == *.gz ]]; then
            [[ -s "$data/${base%.gz}" ]] || gunzip -c "$f" >"$data/${base%.gz}"
        else
            [[ -s "$data/$base" ]] || cp "$f" "$data/$base"
        fi
    done
    [[ -s $data/public.snmprec ]] || die "snmpsim recordings not found in $SNMPSIM_EXAMPLES"
    # snmpsimd drops to nobody after binding and then builds its index in cache-dir.
    chown -R nobody:nogroup "$SNMPSIM_DIR/cache"
    chmod -R a+rX "$SNMPSIM_DIR"
}

start_snmpsim() {
    if pid_alive "$SNMPSIM_PID" "$SNMPSIM_BIN"; then
        log "snmpsimd already running on $SNMPSIM_ADDR (pid $(pid_of "$SNMPSIM_PID"))"
        return 0
    fi
    rm -f "$SNMPSIM_PID"
    local addr=${SNMPSIM_ADDR%:*} port=${SNMPSIM_ADDR##*:}
    udp_port_busy "$addr" "$port" && die "udp $SNMPSIM_ADDR is taken by a process services.sh did not start"
    prepare_snmpsim_data
    (
        exec setsid "$SNMPSIM_BIN" --data-dir="$SNMPSIM_DIR/data" --cache-dir="$SNMPSIM_DIR/cache" \
            --agent-udpv4-endpoint="$SNMPSIM_ADDR" --v2c-arch \
            --process-user=nobody --process-group=nogroup \
            --logging-method="$SNMPSIM_LOGGING" </dev/null >>"$SNMPSIM_DIR/snmpsimd.log" 2>&1 9>&-
    ) &
    echo $! >"$SNMPSIM_PID"
    local i
    # The first start indexes the recordings (a few seconds); it listens only after.
    for ((i = 0; i < 600; i++)); do
        if udp_port_busy "$addr" "$port"; then
            log "snmpsimd up on $SNMPSIM_ADDR (pid $(pid_of "$SNMPSIM_PID"), communities: $(cd "$SNMPSIM_DIR/data" && ls *.snmprec | sed 's/\.snmprec$//' | tr '\n' ' '))"
            return 0
        fi
        # Not pid_alive (see pid_running): that race failed a CI run.
        pid_running "$SNMPSIM_PID" || break
        sleep 0.1
    done
    tail -n 30 "$SNMPSIM_DIR/snmpsimd.log" >&2 2>/dev/null || true
    stop_pidfile "$SNMPSIM_PID" "$SNMPSIM_BIN" snmpsimd
    die "snmpsimd failed to start on $SNMPSIM_ADDR"
}

# ---------------------------------------------------------------- env file

write_env() {
    local addrs
    addrs=$(
        IFS=,
        echo "${SNMPD_ADDRS[*]}"
    )
    cat >"$SVC/env.tmp" <<EOF
# Generated by scripts/services.sh up; source it: . .services/env
export NETPOLLER_SERVICES_UP=1
export NETPOLLER_CH_URL=http://$CH_LISTEN:$CH_HTTP_PORT
export NETPOLLER_CH_HTTP_PORT=$CH_HTTP_PORT
export NETPOLLER_CH_TCP_PORT=$CH_TCP_PORT
export NETPOLLER_SNMPD_ADDRS=$addrs
export NETPOLLER_SNMPD_PORT=$SNMPD_PORT
export NETPOLLER_SNMPD_COMMUNITIES=public,public,public,s3cret
export NETPOLLER_SNMPSIM_ADDR=$SNMPSIM_ADDR
EOF
    mv "$SVC/env.tmp" "$SVC/env"
}

# ---------------------------------------------------------------- commands

cmd_up() {
    [[ $(id -u) -eq 0 ]] || die "must run as root (snmpd binds port 161; tests use raw sockets)"
    install_missing
    mkdir -p "$SVC"
    # One `up` at a time: several engineers (or test runners) may call it at once.
    exec 9>"$SVC/.lock"
    flock -w 120 9 || die "another services.sh holds $SVC/.lock"
    start_clickhouse
    local i
    for i in "${!SNMPD_ADDRS[@]}"; do
        start_snmpd $((i + 1)) "${SNMPD_ADDRS[$i]}"
    done
    start_snmpsim
    write_env
    log "all services up; env in $SVC/env"
}

cmd_down() {
    [[ -d $SVC ]] || return 0
    exec 9>"$SVC/.lock"
    flock -w 120 9 || die "another services.sh holds $SVC/.lock"
    rm -f "$SVC/env"
    stop_pidfile "$SNMPSIM_PID" "$SNMPSIM_BIN" snmpsimd
    if [[ -s $SVC/snmpsim.dir ]]; then
        local simdir
        simdir=$(cat "$SVC/snmpsim.dir")
        [[ $simdir == /tmp/netpoller-snmpsim.* ]] && rm -rf "$simdir"
        rm -f "$SVC/snmpsim.dir"
    fi
    local i
    for i in "${!SNMPD_ADDRS[@]}"; do
        stop_pidfile "$SVC/snmpd-$((i + 1)).pid" "$SNMPD_BIN" "snmpd $((i + 1))"
    done
    stop_pidfile "$CH_PID" "$CH_BIN" clickhouse
}

cmd_status() {
    local ok=0 i
    show() {
        local name=$1 pidfile=$2 bin=$3 where=$4
        if pid_alive "$pidfile" "$bin"; then
            printf '%-12s running  pid %-8s %s\n' "$name" "$(pid_of "$pidfile")" "$where"
        else
            printf '%-12s stopped           %s\n' "$name" "$where"
            ok=1
        fi
    }
    show clickhouse "$CH_PID" "$CH_BIN" "http://$CH_LISTEN:$CH_HTTP_PORT tcp:$CH_LISTEN:$CH_TCP_PORT"
    for i in "${!SNMPD_ADDRS[@]}"; do
        show "snmpd-$((i + 1))" "$SVC/snmpd-$((i + 1)).pid" "$SNMPD_BIN" \
            "udp:${SNMPD_ADDRS[$i]}:$SNMPD_PORT community $(snmpd_community $((i + 1)))"
    done
    show snmpsimd "$SNMPSIM_PID" "$SNMPSIM_BIN" "udp:$SNMPSIM_ADDR"
    return $ok
}

case "${1:-}" in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
clickhouse-up) # ClickHouse alone, in $SVC/clickhouse (pid in $SVC/clickhouse.pid)
    mkdir -p "$SVC"
    start_clickhouse
    ;;
clickhouse-down) stop_pidfile "$CH_PID" "$CH_BIN" clickhouse ;;
install) # install PACKAGE...: e.g. the benchmarks' peers
    shift
    [[ $# -gt 0 ]] || die "install: which packages?"
    install_missing "$@"
    ;;
*)
    echo "usage: $0 up|down|status|clickhouse-up|clickhouse-down|install PACKAGE..." >&2
    exit 2
    ;;
esac
