# Sourced by benches/icmp_sweep.sh and benches/e2e.sh: the "tun" rig, where ICMP targets
# are a process of their own instead of the sender's kernel.
#
# tun_rig_up NS DEV PREFIX LOG: creates network namespace NS (lo up) whose only route
# besides loopback is PREFIX via the TUN device DEV, and starts tun_echo
# (examples/tun_echo.rs) answering on DEV, addresses ≡ 3 mod 4 silent (25%), its report
# going to LOG. Sets TUN_RIG_PID (the tun_echo process). Refuses to go on when the
# namespace has a default route: nothing sent in it can leave the machine.
# tun_rig_down NS: stops tun_echo (by pid) and deletes NS.
# TUN_ECHO: the tun_echo binary (default target/release/examples/tun_echo).

TUN_RIG_PID=

tun_rig_up() {
    local ns=$1 dev=$2 prefix=$3 log=$4
    local bin=${TUN_ECHO:-target/release/examples/tun_echo}
    [[ -x $bin ]] || { echo "no $bin (cargo build --release --example tun_echo)" >&2; return 1; }
    # A NIC-sized queue: tun_echo reads in bursts (it naps 0.5 ms when the queue is empty).
    ip netns add "$ns" &&
        ip -n "$ns" link set lo up &&
        ip -n "$ns" tuntap add dev "$dev" mode tun &&
        ip -n "$ns" link set "$dev" txqueuelen 100000 up &&
        ip -n "$ns" addr add 198.18.0.1/30 dev "$dev" &&
        ip -n "$ns" route add "$prefix" dev "$dev" || return 1
    if ip -n "$ns" route show default | grep -q .; then
        echo "namespace $ns has a default route; refusing to run" >&2
        return 1
    fi
    ip netns exec "$ns" "$bin" "$dev" --silent-mask 3 --max-seconds 7200 2>"$log" &
    TUN_RIG_PID=$!
    # tun_echo attaching turns the carrier on; the kernel activates the device's queue a
    # little later (link watch), and drops what is sent before: wait for "state UP".
    local i
    for ((i = 0; i < 500; i++)); do
        ip -n "$ns" link show "$dev" | grep -q " state UP " && return 0
        sleep 0.01
    done
    echo "$dev in $ns did not come up" >&2
    return 1
}

# Prints tun_echo's report and the device's drop count, then stops both.
tun_rig_down() {
    local ns=$1 dev=${2:-} log=${3:-}
    if [[ -n $TUN_RIG_PID ]]; then
        kill -TERM "$TUN_RIG_PID" 2>/dev/null && wait "$TUN_RIG_PID" 2>/dev/null
        TUN_RIG_PID=
        if [[ -n $dev && -s $log ]]; then
            echo "targets: $(tail -1 "$log"); $(ip -n "$ns" -s link show "$dev" 2>/dev/null |
                awk '/TX:/ {getline; print $4}') dropped on the TUN queue"
        fi
    fi
    ip netns del "$ns" 2>/dev/null || true
}
