#!/usr/bin/env bash
# The test command: starts the real services, runs every test of the workspace against
# them, stops the services it started. Exit status is non-zero if anything failed.
#
#   scripts/test.sh                 tests (unit, integration, doc)
#   NETPOLLER_LINT=1 scripts/test.sh  also rustfmt --check, clippy and rustdoc -D warnings (CI)
#   scripts/test.sh -- <filter>     extra arguments go to the test runner
#   KEEP_SERVICES=1 scripts/test.sh   leave the services running afterwards
#   NETPOLLER_SYSTEMD_CHECK=1 scripts/test.sh  also the packaged unit under a real systemd (CI)
#
# Tests run as root: the ICMP integration tests open raw sockets and create network
# namespaces. Services that were already up when this script started are left running
# (other work may be using them); services it started itself are stopped on exit.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

log() { printf '\n==> %s\n' "$*" >&2; }
die() {
    printf 'test.sh: error: %s\n' "$*" >&2
    exit 1
}

[[ ${1:-} == -- ]] && shift
RUNNER_ARGS=("$@")

[[ -f "$HOME/.cargo/env" ]] && . "$HOME/.cargo/env"
command -v cargo >/dev/null || die "cargo not found: install Rust (https://rustup.rs) first"
if [[ $(id -u) -ne 0 && ${NETPOLLER_ALLOW_NONROOT:-0} != 1 ]]; then
    die "run as root: the services bind UDP port 161 and the ICMP tests need raw sockets
  (NETPOLLER_ALLOW_NONROOT=1 to try anyway)"
fi

# Disk: running out part way fails with "No space left on device" in whatever step it
# hit; say it up front. Measured on a clean clone: target/ 6.0 GiB with cargo's default
# incremental debug builds, 1.9 GiB as .ci/run builds (no incremental caches, line
# tables), and .services/ 0.9 GiB (ClickHouse's data, chDB's venv).
if [[ ${CARGO_INCREMENTAL:-1} == 0 ]]; then NEED_GIB=3; else NEED_GIB=7; fi
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
mkdir -p "$TARGET_DIR"
free_gib() { df -P -BG "$TARGET_DIR" | awk 'NR == 2 { print $4 + 0 }'; }
disk_note() {
    local free
    free=$(free_gib)
    if [[ $free -lt $NEED_GIB ]]; then
        printf 'test.sh: WARNING: %s GiB free for %s; a full run needs about %s GiB: free some disk if a step fails with "No space left on device"\n' \
            "$free" "$TARGET_DIR" "$NEED_GIB" >&2
    fi
}
disk_note

# Tools the tests need. cargo-nextest is optional (cargo test is the fallback); clippy
# and rustfmt only matter for the lint step.
NEXTEST=0
if cargo nextest --version >/dev/null 2>&1; then
    NEXTEST=1
else
    echo "test.sh: cargo-nextest not installed; using cargo test" >&2
fi
if [[ ${NETPOLLER_LINT:-0} == 1 ]] && command -v rustup >/dev/null; then
    for c in clippy rustfmt; do
        rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
    done
fi

# Services: start them unless they already run; stop on exit only what we started.
# KEEP_SERVICES=1 leaves them running in any case.
if scripts/services.sh status >/dev/null 2>&1; then
    echo "test.sh: services already up; leaving them running afterwards" >&2
else
    log "scripts/services.sh up"
    if [[ ${KEEP_SERVICES:-0} != 1 ]]; then
        trap 'log "scripts/services.sh down"; scripts/services.sh down || true' EXIT
    fi
    scripts/services.sh up
fi
# shellcheck disable=SC1091
. "$ROOT/.services/env"

FAILED=()
run() {
    local name=$1
    shift
    log "$name: $*"
    if ! "$@"; then
        FAILED+=("$name")
    fi
}

if [[ ${NETPOLLER_LINT:-0} == 1 ]]; then
    run fmt cargo fmt --all -- --check
    run clippy cargo clippy --workspace --all-targets --locked -- -D warnings
    # Broken intra-doc links are documentation that points nowhere.
    run rustdoc env RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked
fi

# A hung test must not hang CI: the whole run is bounded (default 15 min).
TEST_TIMEOUT="${NETPOLLER_TEST_TIMEOUT:-900}"
if [[ $NEXTEST -eq 1 ]]; then
    run tests timeout --foreground "$TEST_TIMEOUT" \
        cargo nextest run --workspace --locked --no-fail-fast "${RUNNER_ARGS[@]}"
    # nextest does not run doctests.
    run doctests timeout --foreground "$TEST_TIMEOUT" cargo test --workspace --locked --doc
else
    run tests timeout --foreground "$TEST_TIMEOUT" \
        cargo test --workspace --locked --no-fail-fast "${RUNNER_ARGS[@]}"
fi

# The other end of the ClickHouse range: a current engine (chDB, in-process) runs the
# DDL `schema` prints for current servers and loads this build's RowBinary batches.
# Debian's own python3 is "externally managed" (PEP 668): pip refuses to install into
# it, so chDB goes into a venv of the project's (.services/chdb-venv) unless the python3
# on PATH already has it.
chdb_python() {
    local venv="$ROOT/.services/chdb-venv"
    if python3 -c 'import chdb' 2>/dev/null; then
        CHDB_PYTHON=python3
        return 0
    fi
    CHDB_PYTHON="$venv/bin/python"
    "$CHDB_PYTHON" -c 'import chdb' 2>/dev/null && return 0
    if ! python3 -c 'import ensurepip' 2>/dev/null; then
        log "apt-get install python3-venv"
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q python3-venv >/dev/null ||
            { apt-get update -q >/dev/null && apt-get install -y -q python3-venv >/dev/null; } ||
            return 1
    fi
    log "pip install chdb-core (into $venv)"
    python3 -m venv "$venv" &&
        "$CHDB_PYTHON" -m pip install --quiet --disable-pip-version-check chdb-core
}
if chdb_python; then
    run chdb bash -c 'cargo build --locked --bins -p netpoller -p sink && "$0" tests/chdb_current.py' "$CHDB_PYTHON"
else
    FAILED+=("chdb-install")
fi

# The packaged unit and its shard template under a real systemd, booted in a throwaway
# container of its own network (packaging/check-under-systemd.sh, ~20 s): CI's, or
# NETPOLLER_SYSTEMD_CHECK=1. A failed check fails the run; a machine that cannot boot
# the container (exit 2: no nspawn, no overlayfs) is said so and skipped.
systemd_check() {
    if ! command -v systemd-nspawn >/dev/null; then
        log "apt-get install systemd-container"
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q systemd-container >/dev/null ||
            { apt-get update -q >/dev/null && apt-get install -y -q systemd-container >/dev/null; } ||
            return 1
    fi
    cargo build --locked --bin netpoller || return 1
    local rc=0
    sh packaging/check-under-systemd.sh target/debug/netpoller || rc=$?
    if [[ $rc -eq 2 ]]; then
        echo "test.sh: WARNING: no systemd container could be booted here: the unit was not checked under systemd" >&2
        rc=0
    fi
    return $rc
}
if [[ ${NETPOLLER_SYSTEMD_CHECK:-0} == 1 ]]; then
    run systemd systemd_check
fi

if [[ ${#FAILED[@]} -gt 0 ]]; then
    disk_note
    printf '\ntest.sh: FAILED: %s\n' "${FAILED[*]}" >&2
    exit 1
fi
printf '\ntest.sh: all passed\n' >&2
