#!/usr/bin/env bash
# Ping-pong between two network namespaces joined by a veth pair: the latency of each
# network transport across a real (virtual) link rather than loopback.
#
#   scripts/netns-pingpong.sh [PATH-TO-peregrine]      (default target/release/peregrine)
#
# Needs root and iproute2 (`ip netns`). Environment (defaults in brackets):
#   TRANSPORTS [udp mcast tcp]  COUNT [20000]  WARMUP [2000]  SIZE [64]  IDLE [spin]
#   CPUS [0,1]  the ping side pins itself to the first CPU, the pong side to the second
#   TIMEOUT [60]  seconds allowed to each side of each transport
#
# Stdout: the ping side's JSON result lines, nothing else. Stderr: progress and a summary.
# Everything it creates (two namespaces, a veth pair living only inside them, background
# processes, a temporary directory) is removed on exit; traffic only goes to the two
# addresses of the namespaces it created.
set -euo pipefail

BIN=${1:-target/release/peregrine}
TRANSPORTS=${TRANSPORTS:-udp mcast tcp}
COUNT=${COUNT:-20000}
WARMUP=${WARMUP:-2000}
SIZE=${SIZE:-64}
IDLE=${IDLE:-spin}
CPUS=${CPUS:-0,1}
TIMEOUT=${TIMEOUT:-60}

say() { echo "netns-pingpong: $*" >&2; }
die() { say "error: $*"; exit 1; }
side_failed() { # SIDE EXIT-CODE
    if [[ $2 -eq 124 ]]; then echo "$1 side timed out after $TIMEOUT s"; else echo "$1 side failed (exit $2)"; fi
}
us() { if [[ -n $1 ]]; then awk -v n="$1" 'BEGIN { printf "%.2f", n / 1000 }'; else echo "?"; fi; } # ns -> us

((BASH_VERSINFO[0] > 5 || (BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] >= 1))) \
    || die "needs bash 5.1 or later (wait -n -p)"
[[ $(id -u) -eq 0 ]] || die "needs root (it creates network namespaces)"
command -v ip >/dev/null || die "needs iproute2 (\`ip\`): apt-get install -y iproute2"
command -v timeout >/dev/null || die "needs coreutils' \`timeout\`"
[[ -x $BIN ]] || die "no executable peregrine binary at $BIN (build with: cargo build --release -p peregrine-cli)"
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")

# Unique per run: names from the PID, the subnet's third octet from the PID too (1..250).
# The subnet only has to be unique inside the two namespaces, so a clash between parallel
# runs is harmless; the names are what must differ.
ID=$$
X=$((ID % 250 + 1))
NS_A=pgn-a-$ID
NS_B=pgn-b-$ID
VETH_A=pgva$ID # at most 4 + 7 digits: within the 15-character limit
VETH_B=pgvb$ID
ADDR_A=10.77.$X.1
ADDR_B=10.77.$X.2
TMP=$(mktemp -d /tmp/netns-pingpong.XXXXXX)
PING_PID=
PONG_PID=
CREATED=()

kill_ns_procs() {
    # Only processes inside our own namespaces: ones this script started.
    local ns=$1 pids
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    if [[ -n $pids ]]; then
        # shellcheck disable=SC2086
        kill $pids 2>/dev/null || true
        sleep 0.2
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        # shellcheck disable=SC2086
        [[ -z $pids ]] || kill -KILL $pids 2>/dev/null || true
    fi
}

cleanup() {
    local rc=$?
    set +e
    for pid in $PING_PID $PONG_PID; do
        kill "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    for ns in "${CREATED[@]}"; do
        kill_ns_procs "$ns"
        ip netns del "$ns" 2>/dev/null || say "warning: could not delete namespace $ns"
    done
    rm -rf "$TMP"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for t in $TRANSPORTS; do
    case $t in udp | mcast | tcp) ;; *) die "unknown transport $t in TRANSPORTS (use udp, mcast or tcp)" ;; esac
done
ip netns list >/dev/null 2>&1 || die "\`ip netns\` does not work here (needs root and iproute2 with netns support)"

# --- the two namespaces and the link between them -------------------------------------------
for ns in "$NS_A" "$NS_B"; do
    ip netns add "$ns" || die "cannot create network namespace $ns"
    CREATED+=("$ns")
done
# Both ends are created directly inside the namespaces: nothing appears in the host's.
ip link add "$VETH_A" netns "$NS_A" type veth peer name "$VETH_B" netns "$NS_B" \
    || die "cannot create the veth pair"
setup_side() {
    local ns=$1 dev=$2 addr=$3
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$addr/24" dev "$dev"
    ip -n "$ns" link set "$dev" up
    ip -n "$ns" route add 224.0.0.0/4 dev "$dev"
}
setup_side "$NS_A" "$VETH_A" "$ADDR_A"
setup_side "$NS_B" "$VETH_B" "$ADDR_B"
say "namespaces $NS_A ($ADDR_A, $VETH_A) <-> $NS_B ($ADDR_B, $VETH_B)"

# --- one ping-pong per transport ------------------------------------------------------------
# uris TRANSPORT SIDE-ADDRESS: the --ping-uri and --pong-uri arguments for one side.
uris() {
    local t=$1 self=$2
    case $t in
    udp | tcp) echo "--ping-uri $t://$ADDR_A:40001 --pong-uri $t://$ADDR_B:40002" ;;
    mcast) echo "--ping-uri mcast://239.255.77.1:40001?iface=$self --pong-uri mcast://239.255.77.2:40002?iface=$self" ;;
    esac
}

common=(--size "$SIZE" --count "$COUNT" --warmup-count "$WARMUP" --idle "$IDLE" --cpus "$CPUS" --json)
summary=()
failed=()
for t in $TRANSPORTS; do
    say "$t: count $COUNT, warmup $WARMUP, size $SIZE, idle $IDLE"
    # shellcheck disable=SC2207
    pong_uris=($(uris "$t" "$ADDR_B"))
    # shellcheck disable=SC2207
    ping_uris=($(uris "$t" "$ADDR_A"))

    timeout "$TIMEOUT" ip netns exec "$NS_B" "$BIN" bench pingpong --transport "$t" --role pong \
        "${pong_uris[@]}" "${common[@]}" >"$TMP/$t.pong.out" 2>"$TMP/$t.pong.err" &
    PONG_PID=$!

    timeout "$TIMEOUT" ip netns exec "$NS_A" "$BIN" bench pingpong --transport "$t" --role ping \
        "${ping_uris[@]}" "${common[@]}" >"$TMP/$t.ping.out" 2>"$TMP/$t.ping.err" &
    PING_PID=$!

    # Whichever side ends first: if it failed, the other would wait for it until its own
    # connect timeout, so the other is stopped at once and the first one is named as the cause.
    first= rc=0 ping_rc= pong_rc= why=
    wait -n -p first "$PING_PID" "$PONG_PID" || rc=$?
    if [[ $first == "$PING_PID" ]]; then
        ping_rc=$rc
        if [[ $rc -ne 0 ]]; then
            why=$(side_failed ping "$rc")
            kill "$PONG_PID" 2>/dev/null || true
        fi
    elif [[ $first == "$PONG_PID" ]]; then
        pong_rc=$rc
        if [[ $rc -ne 0 ]]; then
            why=$(side_failed pong "$rc")
            kill "$PING_PID" 2>/dev/null || true
        fi
    fi
    if [[ -z $ping_rc ]]; then ping_rc=0; wait "$PING_PID" || ping_rc=$?; fi
    if [[ -z $pong_rc ]]; then pong_rc=0; wait "$PONG_PID" || pong_rc=$?; fi
    PING_PID= PONG_PID=
    if [[ -z $why && $ping_rc -ne 0 ]]; then why=$(side_failed ping "$ping_rc"); fi
    if [[ -z $why && $pong_rc -ne 0 ]]; then why=$(side_failed pong "$pong_rc"); fi
    # The result line: {"kind":"pingpong","transport":"udp",...,"samples":N,"median_ns":X,...}
    line=$(grep -E '"(kind|test)":"pingpong"' "$TMP/$t.ping.out" | grep "\"transport\":\"$t\"" | tail -n 1 || true)
    if [[ -z $why && -z $line ]]; then
        why="ping side printed no pingpong result line"
    fi
    if [[ -n $why ]]; then
        say "$t: FAILED: $why"
        for f in ping.out ping.err pong.out pong.err; do
            [[ -s $TMP/$t.$f ]] && sed "s/^/  [$t $f] /" "$TMP/$t.$f" >&2
        done
        failed+=("$t ($why)")
        continue
    fi
    echo "$line"
    median_ns=$(grep -o '"median_ns":[0-9.eE+-]*' <<<"$line" | cut -d: -f2 || true)
    p99_ns=$(grep -o '"p99_ns":[0-9.eE+-]*' <<<"$line" | cut -d: -f2 || true)
    summary+=("$(printf '%-6s median %7s us  p99 %7s us  (half round trip, %s samples of %s bytes)' \
        "$t" "$(us "$median_ns")" "$(us "$p99_ns")" "$COUNT" "$SIZE")")
done

say "summary ($ADDR_A <-> $ADDR_B over veth):"
for s in "${summary[@]}"; do say "  $s"; done
if [[ ${#failed[@]} -gt 0 ]]; then
    for f in "${failed[@]}"; do say "  FAILED: $f"; done
    exit 1
fi
