#!/usr/bin/env bash
# Multi-host test of shmap on one machine, with Linux network namespaces.
#
#   bash tests/netns/multihost.sh SHMAP-COORDINATOR SHMAP-WORKER SHMAPCTL
#
# Builds a private network that exists only inside namespaces this script
# creates (names end in the script's pid, so parallel runs never collide):
#
#   shmap-br-PID   bridge br0 (the "switch"); nothing in the root namespace
#   shmap-h0-PID   10.77.0.1   shmap-coordinator --listen 10.77.0.1:7070
#   shmap-h1-PID   10.77.0.11  shmap-worker --advertise 10.77.0.11:7171 (process 0)
#   shmap-h2-PID   10.77.0.12  shmap-worker --advertise 10.77.0.12:7171 (process 1)
#
# each host joined to the bridge by a veth pair created inside the namespaces,
# and given its own mount namespace whose /dev/shm is a private tmpfs (h1's
# holds 4 MiB), held by a process that every command of the host enters
# (nsenter): workers of different hosts cannot share memory, as on real
# hosts, so the default --transport auto proves no pair across them.
# Every process and client carries a token (SHMAP_TOKEN). Then it loads the
# data loading guide's (64,128) layouts from h0, uploads process-local parts
# from a client on each worker host, reshards across hosts, deletes, checks
# auth failures, kills a worker host and checks the coordinator's view,
# brings the host back, restarts the coordinator (with h1 cut off meanwhile,
# so the new coordinator hands h1's old worker id to h2), restarts a worker
# at once, and stops everything with SIGTERM; then starts the three again
# with TLS (certificates for the three addresses from scripts/tls_certs.sh)
# and moves data across both hosts relayed and direct. Between the two, a
# cluster with two workers on h1 and one on h2 runs every collective: the
# h1 pair through shared memory, everything with h2 over gRPC, all equal to
# numpy's results, and a psum too large for h1's /dev/shm over gRPC.
# One line per check, then "N passed, N failed". Exit 0 all passed, 1 a check
# failed, 2 usage, 77 skipped (no CAP_NET_ADMIN, no `ip`, no numpy).
# SHMAP_NETNS_KEEP_LOGS=1 keeps the temp dir (logs, .npy, JSON) and says where.
# Everything is torn down on exit, whatever happens.
set -u

if [ $# -ne 3 ]; then
    echo "usage: $0 SHMAP-COORDINATOR SHMAP-WORKER SHMAPCTL" >&2
    exit 2
fi
COORD_BIN=$(readlink -f "$1")
WORKER_BIN=$(readlink -f "$2")
CTL_BIN=$(readlink -f "$3")
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
HELP="$HERE/nshelp.py"
for b in "$COORD_BIN" "$WORKER_BIN" "$CTL_BIN"; do
    if [ ! -x "$b" ]; then
        echo "not an executable: $b" >&2
        exit 2
    fi
done

skip() {
    echo "skipped: $*"
    exit 77
}
command -v ip >/dev/null 2>&1 || skip "the 'ip' command (iproute2) is not installed"
[ -x "$PY" ] || skip "$PY is missing"
"$PY" -c 'import numpy' 2>/dev/null || skip "numpy is not installed for $PY (apt-get install python3-numpy)"

# ---------------------------------------------------------------- names, state
SUF=$$
for n in br h0 h1 h2; do
    if [ -e "/run/netns/shmap-$n-$SUF" ]; then
        SUF="$$-$RANDOM"
        break
    fi
done
NS_BR="shmap-br-$SUF"
NS_H0="shmap-h0-$SUF"
NS_H1="shmap-h1-$SUF"
NS_H2="shmap-h2-$SUF"
NETS=()        # namespaces created so far (deleted on exit)
PIDS=()        # processes started so far (killed on exit)
T=$(mktemp -d "${TMPDIR:-/tmp}/shmap-netns.XXXXXX")
TOKEN="netns-token-$SUF-$RANDOM"
IP_H0=10.77.0.1
IP_H1=10.77.0.11
IP_H2=10.77.0.12
TARGET="$IP_H0:7070"
PASSED=0
FAILED=0
KEEP=${SHMAP_NETNS_KEEP_LOGS:-0}

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    local p
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for _ in $(seq 1 30); do
        local alive=0
        for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ $alive = 0 ] && break
        sleep 0.1
    done
    for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
    # Anything still inside our namespaces was started by this script.
    local ns
    for ns in "${NETS[@]}"; do
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    for ns in "${NETS[@]}"; do ip netns del "$ns" 2>/dev/null; done
    if [ "$KEEP" = 1 ]; then
        echo "logs kept in $T"
    else
        rm -rf "$T"
    fi
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ok() {
    echo "ok   - $1"
    PASSED=$((PASSED + 1))
}
bad() {
    echo "FAIL - $1${2:+ ($2)}"
    FAILED=$((FAILED + 1))
}
# check NAME CMD...: one check line from the exit code of CMD (its output,
# last lines, goes into the failure line).
check() {
    local name=$1
    shift
    local out
    if out=$("$@" 2>&1); then
        ok "$name"
    else
        bad "$name" "$(printf '%s' "$out" | tail -n 3 | tr '\n' ' ' | cut -c1-300)"
        # a sanitizer's report whole: its stacks are what a fix needs
        if printf '%s' "$out" | grep -q 'Sanitizer'; then
            printf '%s\n' "$out" | sed -n '/==[0-9]*==ERROR/,$p' | sed 's/^/    | /'
        fi
    fi
}
finish() {
    echo "$PASSED passed, $FAILED failed"
    [ $FAILED -eq 0 ] && exit 0
    exit 1
}
# Fatal: the rest cannot run. Counts as a failure, shows the logs.
abort() {
    bad "$1" "${2:-}"
    local f
    for f in "$T"/*.log; do
        [ -e "$f" ] || continue
        echo "--- $(basename "$f") (last lines)"
        tail -n 15 "$f"
    done
    finish
}

in_ns() { # in_ns NS CMD...
    local ns=$1
    shift
    hx "$ns" "$@"
}
# ctl NS ARGS...: shmapctl inside NS, with the cluster's target and token.
ctl() {
    local ns=$1
    shift
    timeout 60 nsenter -t "${HOLD[$ns]}" -n -m -- env SHMAP_TARGET="$TARGET" SHMAP_TOKEN="$TOKEN" \
        "${CTL_ENV[@]}" "$CTL_BIN" "$@"
}
CTL_ENV=()  # more variables for ctl (the TLS phase's SHMAP_TLS_*)
TLS_ARGS=() # more flags for start_coord and start_worker (the TLS phase's)
py() { "$PY" "$HELP" "$@"; }
# q JSONFILE EXPR: evaluate EXPR with d = the JSON; fails on False.
q() {
    local f=$1
    shift
    py q "$1" <"$f"
}

start_coord() { # (re)starts the coordinator in h0; waits for its port file
    rm -f "$T/coord.port"
    nsenter -t "${HOLD[$NS_H0]}" -n -m -- env SHMAP_TOKEN="$TOKEN" "$COORD_BIN" --listen "$TARGET" \
        --port-file "$T/coord.port" "${TLS_ARGS[@]}" >>"$T/coordinator.log" 2>&1 &
    COORD_PID=$!
    PIDS+=("$COORD_PID")
    for _ in $(seq 1 150); do
        [ -s "$T/coord.port" ] && break
        kill -0 "$COORD_PID" 2>/dev/null || break
        sleep 0.1
    done
    [ "$(tr -d '\n' <"$T/coord.port" 2>/dev/null)" = 7070 ]
}
start_worker() { # start_worker NS IP PROCESS-INDEX LOGNAME [PORT]: sets LAST_PID
    local port=${5:-7171}
    nsenter -t "${HOLD[$1]}" -n -m -- env SHMAP_TOKEN="$TOKEN" "$WORKER_BIN" --coordinator "$TARGET" --devices 4 \
        --listen "0.0.0.0:$port" --advertise "$2:$port" --process-index "$3" "${TLS_ARGS[@]}" \
        >"$T/$4.log" 2>&1 &
    LAST_PID=$!
    PIDS+=("$LAST_PID")
}
# poll TRIES PAUSE FILE EXPR ARGS...: runs shmapctl ARGS from h0 into FILE
# (output and errors) until EXPR holds for it (q), at most TRIES times PAUSE
# seconds apart; when it never does, prints FILE and fails.
poll() {
    local tries=$1 pause=$2 file=$3 expr=$4
    shift 4
    for _ in $(seq 1 "$tries"); do
        ctl "$NS_H0" "$@" >"$file" 2>&1 && q "$file" "$expr" >/dev/null 2>&1 && return 0
        sleep "$pause"
    done
    cat "$file"
    return 1
}
# get_same NS NAME OUT WANT LABEL [MORE]: shmapctl get NAME from NS into OUT
# (an .npy), then the check "LABEL is bit-exact[MORE]" that OUT equals WANT;
# when the get fails, a failure LABEL with its last lines.
get_same() {
    if ctl "$1" get "$2" "$3" >"${3%.npy}.get.out" 2>&1; then
        check "$5 is bit-exact${6:-}" py same "$4" "$3"
    else
        bad "$5" "$(tail -n 2 "${3%.npy}.get.out" | tr '\n' ' ')"
    fi
}
# alive_as FILE EXPR: waits (20 s) until the alive workers, as the sorted
# list of (address, process index), are EXPR; FILE keeps devices --json.
alive_as() {
    poll 100 0.2 "$1" "sorted((w['address'], w['process_index']) for w in d if w['state'] == 'alive') == $2" \
        devices --json
}
# two_alive: waits until exactly h1's worker (process 0) and h2's (process
# 1) are alive.
two_alive() { alive_as "$T/devices-back.json" "[('$IP_H1:7171', 0), ('$IP_H2:7171', 1)]"; }
stop() { # stop PID: SIGTERM, exits within 10 s
    kill -TERM "$1" 2>/dev/null || return 1
    for _ in $(seq 1 100); do
        kill -0 "$1" 2>/dev/null || { wait "$1" 2>/dev/null; return 0; }
        sleep 0.1
    done
    return 1
}

# ---------------------------------------------------------------- the network
if ! ip netns add "$NS_BR" 2>"$T/netns.err"; then
    skip "cannot create a network namespace ($(tr '\n' ' ' <"$T/netns.err")); needs root or CAP_NET_ADMIN + CAP_SYS_ADMIN"
fi
NETS+=("$NS_BR")
setup_net() {
    ip -n "$NS_BR" link set lo up &&
        ip -n "$NS_BR" link add br0 type bridge &&
        ip -n "$NS_BR" link set br0 up || return 1
    local i ns addr
    for i in 0 1 2; do
        ns="shmap-h$i-$SUF"
        case $i in 0) addr=$IP_H0 ;; 1) addr=$IP_H1 ;; 2) addr=$IP_H2 ;; esac
        ip netns add "$ns" || return 1
        NETS+=("$ns")
        # The veth pair is born inside the host namespace; its peer moves
        # straight into the bridge namespace. The root namespace never sees it.
        ip -n "$ns" link add eth0 type veth peer name "h$i" netns "$NS_BR" &&
            ip -n "$NS_BR" link set "h$i" master br0 &&
            ip -n "$NS_BR" link set "h$i" up &&
            ip -n "$ns" addr add "$addr/24" dev eth0 &&
            ip -n "$ns" link set eth0 up &&
            ip -n "$ns" link set lo up || return 1
    done
}
if ! setup_net >"$T/net.log" 2>&1; then
    if grep -qiE 'not supported|Unknown device type|Operation not permitted' "$T/net.log"; then
        skip "cannot build the namespace network: $(tr '\n' ' ' <"$T/net.log")"
    fi
    abort "network: 3 host namespaces and a bridge" "$(tr '\n' ' ' <"$T/net.log")"
fi
ok "network: $NS_H0 ($IP_H0), $NS_H1 ($IP_H1), $NS_H2 ($IP_H2) on a bridge in $NS_BR"

# Each host's own /dev/shm: a process per host holds its network namespace
# and a mount namespace with a private tmpfs on /dev/shm; hx enters both.
declare -A HOLD
start_holder() { # start_holder NS SIZE
    rm -f "$T/shm-$1.ready"
    ip netns exec "$1" unshare --mount --propagation private sh -c \
        "mount -t tmpfs -o size=$2,mode=1777 tmpfs /dev/shm && touch '$T/shm-$1.ready' && exec sleep 86400" \
        >"$T/shm-$1.log" 2>&1 &
    HOLD[$1]=$!
    PIDS+=("$!")
    for _ in $(seq 1 50); do
        [ -e "$T/shm-$1.ready" ] && return 0
        sleep 0.1
    done
    return 1
}
# (Commands started in the background call nsenter directly, so that $! is
# the process itself: nsenter enters the namespaces and execs it.)
hx() { # hx NS CMD...: CMD inside host NS (its network and its /dev/shm)
    local ns=$1
    shift
    nsenter -t "${HOLD[$ns]}" -n -m -- "$@"
}
command -v nsenter >/dev/null 2>&1 || skip "the 'nsenter' command (util-linux) is not installed"
for h in "$NS_H0:64m" "$NS_H1:4m" "$NS_H2:64m"; do
    start_holder "${h%%:*}" "${h##*:}" ||
        abort "a private /dev/shm (tmpfs) for ${h%%:*}" "$(tr '\n' ' ' <"$T/shm-${h%%:*}.log")"
done
ok "each host has its own /dev/shm ($NS_H1's: 4 MiB)"

# ---------------------------------------------------------------- the cluster
# Coordinator: token from the environment. Workers: one by --token, one by
# SHMAP_TOKEN, both with an explicit process index so the per-host loaders
# below know which part is theirs.
start_coord || abort "coordinator serves on $TARGET in $NS_H0" "no port file, or not port 7070"
ok "coordinator serves on $TARGET in $NS_H0"

nsenter -t "${HOLD[$NS_H1]}" -n -m -- env -u SHMAP_TOKEN "$WORKER_BIN" --coordinator "$TARGET" --devices 4 \
    --listen 0.0.0.0:7171 --advertise "$IP_H1:7171" --process-index 0 --token "$TOKEN" \
    >"$T/worker-h1.log" 2>&1 &
W1_PID=$!
PIDS+=("$W1_PID")
# h2's worker starts once h1's has registered, so h1's is worker 1 (the
# coordinator restart below depends on it).
poll 100 0.1 "$T/devices.json" "[w['address'] for w in d if w['state'] == 'alive'] == ['$IP_H1:7171']" \
    devices --json >/dev/null
nsenter -t "${HOLD[$NS_H2]}" -n -m -- env SHMAP_TOKEN="$TOKEN" "$WORKER_BIN" --coordinator "$TARGET" --devices 4 \
    --listen 0.0.0.0:7171 --advertise "$IP_H2:7171" --process-index 1 \
    >"$T/worker-h2.log" 2>&1 &
W2_PID=$!
PIDS+=("$W2_PID")

alive=0
for _ in $(seq 1 100); do
    if ctl "$NS_H0" devices --json >"$T/devices.json" 2>"$T/devices.err"; then
        alive=$(q "$T/devices.json" 'sum(1 for w in d if w["state"] == "alive")' 2>/dev/null || echo 0)
        [ "$alive" = 2 ] && break
    fi
    sleep 0.2
done
[ "$alive" = 2 ] || abort "2 workers alive (devices --json from $NS_H0)" "alive=$alive $(cat "$T/devices.err" 2>/dev/null)"
ok "2 workers alive (devices --json from $NS_H0)"

check "workers advertise their namespace addresses with process index 0 and 1, 4 devices each" \
    q "$T/devices.json" "sorted((w['address'], w['process_index'], len(w['devices'])) for w in d) == [('$IP_H1:7171', 0, 4), ('$IP_H2:7171', 1, 4)]"
P0_DEVS=$(q "$T/devices.json" "','.join(str(x) for w in d if w['process_index'] == 0 for x in w['devices'])")
P1_DEVS=$(q "$T/devices.json" "','.join(str(x) for w in d if w['process_index'] == 1 for x in w['devices'])")

# The namespaces really are separate hosts: h1 has no coordinator on its own
# loopback, and reaches it only through the bridge.
no_local_coordinator() {
    ! timeout 20 nsenter -t "${HOLD[$NS_H1]}" -n -m -- env SHMAP_TOKEN="$TOKEN" "$CTL_BIN" devices --target 127.0.0.1:7070
}
check "hosts are isolated: from $NS_H1, 127.0.0.1:7070 has no coordinator" no_local_coordinator
reach_from_workers() { ctl "$NS_H1" ls && ctl "$NS_H2" ls; }
check "from $NS_H1 and $NS_H2, the coordinator answers at $TARGET" reach_from_workers

# A worker with the wrong token never joins the cluster.
nsenter -t "${HOLD[$NS_H1]}" -n -m -- env -u SHMAP_TOKEN "$WORKER_BIN" --coordinator "$TARGET" --devices 2 \
    --listen 0.0.0.0:7172 --advertise "$IP_H1:7172" --token "wrong-$TOKEN" \
    >"$T/worker-rogue.log" 2>&1 &
ROGUE_PID=$!
PIDS+=("$ROGUE_PID")
sleep 2
ctl "$NS_H0" devices --json >"$T/devices-rogue.json" 2>&1
check "a worker with a wrong token is not registered" \
    q "$T/devices-rogue.json" "len(d) == 2 and all(w['address'] != '$IP_H1:7172' for w in d)"
check "the rejected worker's log says why (UNAUTHENTICATED/token)" \
    grep -qiE 'unauthenticated|token' "$T/worker-rogue.log"
kill -TERM "$ROGUE_PID" 2>/dev/null
wait "$ROGUE_PID" 2>/dev/null

# ---------------------------------------------------------------- layouts
# The data loading guide's (64,128) array over 8 devices (here 2 hosts x 4
# devices): NAME DTYPE MESH SPEC SHARD-SHAPE DISTINCT-SHARDS
LAYOUTS=(
    "col8   float32 x=8     P(None,'x')     64,16  8"
    "grid   float32 x=4,y=2 P('x','y')      16,64  8"
    "grid2  int32   x=2,y=4 P('x','y')      32,32  8"
    "repl   float32 x=8     P()             64,128 1"
    "rowsP  float64 x=2,y=4 P('x')          32,128 2"
    "colsR  float32 x=2,y=4 P(None,'y')     64,32  4"
)
seed=1
for l in "${LAYOUTS[@]}"; do
    read -r name dtype mesh spec sshape ndistinct <<<"$l"
    seed=$((seed + 1))
    py gen "$T/$name.npy" 64,128 "$dtype" "$seed"
    if ! ctl "$NS_H0" put "$T/$name.npy" --mesh "$mesh" --spec "$spec" --name "$name" \
        >"$T/put-$name.out" 2>&1; then
        bad "put $name ($dtype, $mesh, $spec) from $NS_H0" "$(tail -n 2 "$T/put-$name.out" | tr '\n' ' ')"
        continue
    fi
    ok "put $name ($dtype (64,128), mesh $mesh, $spec) from $NS_H0"
    ctl "$NS_H0" describe "$name" --json >"$T/desc-$name.json" 2>&1
    check "describe $name: ready, shard shape [$sshape], $ndistinct distinct shards, on both hosts' workers" \
        q "$T/desc-$name.json" "d['state'] == 'ready' and d['shard_shape'] == [$sshape] and len(d['devices']) == 8 and all(x['present'] for x in d['devices']) and len({json.dumps(x['index']) for x in d['devices']}) == $ndistinct and {x['address'] for x in d['devices']} == {'$IP_H1:7171', '$IP_H2:7171'}"
    get_same "$NS_H0" "$name" "$T/$name.out.npy" "$T/$name.npy" "get $name from $NS_H0"
done

# Another host attaches by name: a client on h2 reads what h0 wrote.
get_same "$NS_H2" grid "$T/grid.h2.npy" "$T/grid.npy" "get grid by name from $NS_H2"

# ---------------------------------------------------------------- process-local
# make_array_from_process_local_data, one loader per host: the (64,128) array
# sharded along dimension 1 over x=8 (default order: process 0's devices
# first), so process 0 (h1) holds columns 0:64 and process 1 (h2) 64:128.
py gen "$T/local.npy" 64,128 float32 99
py cut "$T/local.npy" "$T/local0.npy" : 0:64
py cut "$T/local.npy" "$T/local1.npy" : 64:128
ctl "$NS_H1" put-local "$T/local0.npy" --process 0 --name batch --mesh x=8 --spec "P(None,'x')" \
    >"$T/putlocal0.out" 2>&1 &
PL0=$!
ctl "$NS_H2" put-local "$T/local1.npy" --process 1 --name batch --mesh x=8 --spec "P(None,'x')" \
    >"$T/putlocal1.out" 2>&1 &
PL1=$!
wait $PL0
rc0=$?
wait $PL1
rc1=$?
if [ $rc0 = 0 ] && [ $rc1 = 0 ]; then
    ok "put-local: process 0 from $NS_H1 and process 1 from $NS_H2, at once"
else
    bad "put-local: process 0 from $NS_H1 and process 1 from $NS_H2" \
        "rc $rc0/$rc1: $(tail -n 1 "$T/putlocal0.out") / $(tail -n 1 "$T/putlocal1.out")"
fi
poll 50 0.1 "$T/desc-batch.json" "d['state'] != 'pending'" describe batch --json >/dev/null
check "batch is ready with global shape [64,128] inferred, shard shape [64,16]" \
    q "$T/desc-batch.json" "d['state'] == 'ready' and d['shape'] == [64, 128] and d['shard_shape'] == [64, 16]"
check "batch: columns 0:64 on $NS_H1's worker (process 0), 64:128 on $NS_H2's (process 1)" \
    q "$T/desc-batch.json" "all(x['address'] == ('$IP_H1:7171' if x['index'][1][0] < 64 else '$IP_H2:7171') for x in d['devices'])"
get_same "$NS_H0" batch "$T/batch.out.npy" "$T/local.npy" "get batch" " (the two parts, concatenated)"

# ---------------------------------------------------------------- resharding
# col8 lives as P(None,'x') over [process 0's devices, process 1's]. The same
# spec over the mesh with the hosts swapped moves every shard to the other
# host, worker to worker.
SWAPPED="$P1_DEVS,$P0_DEVS"
if ctl "$NS_H0" reshard col8 --mesh x=8 --devices "$SWAPPED" --spec "P(None,'x')" --name col8_swapped \
    >"$T/reshard1.out" 2>&1; then
    ok "reshard col8 onto the host-swapped mesh (devices $SWAPPED)"
    ctl "$NS_H0" describe col8_swapped --json >"$T/desc-col8_swapped.json" 2>&1
    check "every shard of col8_swapped is on the other host than in col8" \
        "$PY" -c "
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
where = lambda d: {json.dumps(x['index']): x['address'] for x in d['devices']}
wa, wb = where(a), where(b)
assert b['state'] == 'ready', b['state']
assert wa.keys() == wb.keys() and len(wa) == 8, (wa, wb)
moved = [k for k in wa if wa[k] != wb[k]]
assert len(moved) == 8, f'only {len(moved)} of 8 shards changed host'
" "$T/desc-col8.json" "$T/desc-col8_swapped.json"
    get_same "$NS_H0" col8_swapped "$T/col8_swapped.out.npy" "$T/col8.npy" "get col8_swapped"
else
    bad "reshard col8 onto the host-swapped mesh" "$(tail -n 2 "$T/reshard1.out" | tr '\n' ' ')"
fi
# All-to-all: columns to rows, every device needs a piece from every other.
if ctl "$NS_H1" reshard batch --spec "P('x', None)" --name batch_rows >"$T/reshard2.out" 2>&1; then
    ok "reshard batch P(None,'x') -> P('x',None) (all-to-all across hosts, from $NS_H1)"
    ctl "$NS_H0" describe batch_rows --json >"$T/desc-batch_rows.json" 2>&1
    check "batch_rows: ready, shard shape [8,128] on both hosts" \
        q "$T/desc-batch_rows.json" "d['state'] == 'ready' and d['shard_shape'] == [8, 128] and {x['address'] for x in d['devices']} == {'$IP_H1:7171', '$IP_H2:7171'}"
    get_same "$NS_H2" batch_rows "$T/batch_rows.out.npy" "$T/local.npy" "get batch_rows from $NS_H2"
else
    bad "reshard batch -> P('x',None)" "$(tail -n 2 "$T/reshard2.out" | tr '\n' ' ')"
fi
sources_unchanged() {
    ctl "$NS_H0" get col8 "$T/col8.again.npy" && py same "$T/col8.npy" "$T/col8.again.npy" &&
        ctl "$NS_H0" get batch "$T/batch.again.npy" && py same "$T/local.npy" "$T/batch.again.npy"
}
check "the source arrays are unchanged after resharding (get col8, batch)" sources_unchanged

# ---------------------------------------------------------------- delete
wait_bytes() { # wait_bytes EXPR: poll devices --json until EXPR holds (10 s)
    poll 50 0.2 "$T/devices-now.json" "$1" devices --json
}
check "both workers report bytes held while arrays exist" \
    wait_bytes "all(sum(w['device_bytes']) > 0 for w in d)"
mapfile -t ALL < <(ctl "$NS_H0" ls --json 2>/dev/null | py q "'\\n'.join(str(a['name'] or a['id']) for a in d)")
if [ ${#ALL[@]} -gt 0 ] && ctl "$NS_H0" rm "${ALL[@]}" >"$T/rm.out" 2>&1; then
    ok "rm ${#ALL[@]} arrays (${ALL[*]})"
else
    bad "rm ${#ALL[@]} arrays" "$(tail -n 2 "$T/rm.out" 2>/dev/null | tr '\n' ' ')"
fi
ls_empty() { ctl "$NS_H0" ls --json >"$T/ls-empty.json" && q "$T/ls-empty.json" "d == []"; }
check "ls is empty after rm" ls_empty
check "every device on both hosts is back to 0 bytes (devices --json)" \
    wait_bytes "len(d) == 2 and all(b == 0 for w in d for b in w['device_bytes'])"

# ---------------------------------------------------------------- auth
ctl_as() { # ctl_as TOKEN-OR-EMPTY ARGS...
    local tok=$1
    shift
    if [ -n "$tok" ]; then
        timeout 60 nsenter -t "${HOLD[$NS_H1]}" -n -m -- env -u SHMAP_TOKEN "$CTL_BIN" "$@" --target "$TARGET" --token "$tok"
    else
        timeout 60 nsenter -t "${HOLD[$NS_H1]}" -n -m -- env -u SHMAP_TOKEN "$CTL_BIN" "$@" --target "$TARGET"
    fi
}
refused() { # refused WHO OUT ARGS...: ctl_as ARGS into OUT fails (no timeout), UNAUTHENTICATED
    local who=$1 out=$2 rc
    shift 2
    ctl_as "$@" >"$out" 2>&1
    rc=$?
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qE 'UNAUTHENTICATED|[Uu]nauthenticated' "$out"; then
        ok "$who from $NS_H1: exit $rc, UNAUTHENTICATED"
    else
        bad "$who from $NS_H1 fails with UNAUTHENTICATED" "exit $rc: $(head -c 300 "$out")"
    fi
}
refused "a client with a wrong token" "$T/auth-wrong.out" "wrong-token" devices
refused "a client without a token" "$T/auth-none.out" "" ls
check "the error is one sentence a person can act on (names the token)" \
    grep -qiE 'token' "$T/auth-wrong.out"
check "a client with the right --token flag (no env) succeeds" ctl_as "$TOKEN" ls

# ---------------------------------------------------------------- lose a host
py gen "$T/victim.npy" 64,128 float32 7
check "put victim (x=8, P(None,'x')) across both hosts" \
    ctl "$NS_H0" put "$T/victim.npy" --mesh x=8 --spec "P(None,'x')" --name victim
kill -KILL "$W2_PID" 2>/dev/null
wait "$W2_PID" 2>/dev/null
if poll 100 0.2 "$T/devices-lost.json" "[w['state'] for w in d if w['address'] == '$IP_H2:7171'] == ['lost']" \
    devices --json >/dev/null; then
    ok "after SIGKILL of $NS_H2's worker, devices --json reports it lost"
else
    bad "after SIGKILL of $NS_H2's worker, devices --json reports it lost" "$(head -c 400 "$T/devices-lost.json")"
fi
check "the worker on $NS_H1 is still alive" \
    q "$T/devices-lost.json" "[w['state'] for w in d if w['address'] == '$IP_H1:7171'] == ['alive']"
ctl "$NS_H0" describe victim --json >"$T/desc-victim.json" 2>&1
check "describe victim: state lost, $NS_H2's shards not present, $NS_H1's present, error set" \
    q "$T/desc-victim.json" "d['state'] == 'lost' and all(x['present'] == (x['address'] == '$IP_H1:7171') for x in d['devices']) and bool(d['error'])"
ctl "$NS_H0" get victim "$T/victim.out.npy" >"$T/get-victim.out" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ -s "$T/get-victim.out" ]; then
    ok "get victim fails (exit $rc): $(head -n 1 "$T/get-victim.out" | cut -c1-160)"
else
    bad "get victim fails with a message" "exit $rc: $(head -c 300 "$T/get-victim.out")"
fi
check "the coordinator still serves: ls" ctl "$NS_H0" ls
py gen "$T/survivor.npy" 64,128 float32 8
if ctl "$NS_H0" put "$T/survivor.npy" --mesh x=4 --devices "$P0_DEVS" --spec "P('x')" --name survivor \
    >"$T/put-survivor.out" 2>&1 &&
    ctl "$NS_H0" get survivor "$T/survivor.out.npy" >>"$T/put-survivor.out" 2>&1; then
    check "the coordinator still serves: put + get on $NS_H1's 4 devices, bit-exact" \
        py same "$T/survivor.npy" "$T/survivor.out.npy"
else
    bad "the coordinator still serves: put + get on $NS_H1's devices" "$(tail -n 2 "$T/put-survivor.out" | tr '\n' ' ')"
fi
ALL8="$P0_DEVS,$P1_DEVS"
ctl "$NS_H0" put "$T/survivor.npy" --mesh x=8 --devices "$ALL8" --spec "P('x')" --name ghost \
    >"$T/put-ghost.out" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ -s "$T/put-ghost.out" ]; then
    ok "put onto the lost worker's devices fails (exit $rc): $(head -n 1 "$T/put-ghost.out" | cut -c1-160)"
else
    bad "put onto the lost worker's devices fails with a message, without hanging" "exit $rc: $(head -c 300 "$T/put-ghost.out")"
fi
no_ready_ghost() {
    ctl "$NS_H0" ls --json >"$T/ls-ghost.json" &&
        q "$T/ls-ghost.json" "not any(a['name'] == 'ghost' and a['state'] == 'ready' for a in d)"
}
check "no half array: ghost is not ready" no_ready_ghost

# The host comes back (a pod restart): a new worker process at the same
# address registers again; the old array stays lost, new arrays span both.
start_worker "$NS_H2" "$IP_H2" 1 worker-h2-restarted
W2_PID=$LAST_PID
check "a restarted worker on $NS_H2 registers again (2 alive, process 0 on $NS_H1, 1 on $NS_H2)" two_alive
victim_still_lost() {
    ctl "$NS_H0" describe victim --json >"$T/desc-victim2.json" && q "$T/desc-victim2.json" "d['state'] == 'lost'"
}
check "victim stays lost after the host comes back" victim_still_lost
# put_both NAME SEED: put (64,128) over x=8 from h0, spread over both hosts,
# and get it back bit-exact.
put_both() {
    py gen "$T/$1.npy" 64,128 float32 "$2" &&
        ctl "$NS_H0" put "$T/$1.npy" --mesh x=8 --spec "P(None,'x')" --name "$1" &&
        ctl "$NS_H0" describe "$1" --json >"$T/desc-$1.json" &&
        q "$T/desc-$1.json" "{x['address'] for x in d['devices']} == {'$IP_H1:7171', '$IP_H2:7171'}" &&
        ctl "$NS_H0" get "$1" "$T/$1.out.npy" && py same "$T/$1.npy" "$T/$1.out.npy"
}
check "put + get across both hosts again (x=8, P(None,'x')), bit-exact" put_both reborn 11
mapfile -t ALL < <(ctl "$NS_H0" ls --json 2>/dev/null | py q "'\\n'.join(str(a['name'] or a['id']) for a in d if a['name'] != 'reborn')")
check "rm the arrays but reborn (${ALL[*]})" ctl "$NS_H0" rm "${ALL[@]}"

# ---------------------------------------------------------------- coordinator restart
# The coordinator goes away and comes back at the same address (its pod is
# rescheduled): workers learn from their heartbeats that it does not know
# them, free everything and register again. h1's network blips meanwhile, so
# h2's worker registers first with the new coordinator and is given id 1:
# h1's old id. h1's next heartbeat (as worker 1) must still be told to
# register again, not taken for h2's.
h1_link() { ip -n "$NS_H1" link set eth0 "$1"; }
h1_link down
check "SIGTERM stops the coordinator within 10 s" stop "$COORD_PID"
if start_coord; then
    ok "the coordinator restarts at $TARGET"
else
    h1_link up
    abort "the coordinator restarts at $TARGET" "no port file"
fi
h2_back() {
    poll 100 0.1 "$T/devices-h2back.json" "[w['address'] for w in d if w['state'] == 'alive'] == ['$IP_H2:7171']" \
        devices --json
}
check "$NS_H2's worker registers with the new coordinator while $NS_H1 is cut off" h2_back
h1_link up
if two_alive >"$T/two_alive.out" 2>&1; then
    ok "$NS_H1's worker, back on the network, registers again although its old worker id now names $NS_H2's worker"
else
    bad "$NS_H1's worker, back on the network, registers again although its old worker id now names $NS_H2's worker" \
        "$(head -c 300 "$T/two_alive.out"); its heartbeats as the old id were taken for the other worker's"
    # Recover so that the rest can run: a fresh worker process on h1.
    kill -KILL "$W1_PID" 2>/dev/null
    wait "$W1_PID" 2>/dev/null
    start_worker "$NS_H1" "$IP_H1" 0 worker-h1-recovered
    W1_PID=$LAST_PID
    two_alive >/dev/null 2>&1 || abort "both workers registered with the new coordinator after restarting $NS_H1's worker"
fi
check "the new coordinator knows no arrays" ls_empty
check "the workers freed what the old coordinator had placed (0 bytes everywhere)" \
    wait_bytes "len(d) == 2 and all(b == 0 for w in d for b in w['device_bytes'])"
check "put + get across both hosts after the restart, bit-exact" put_both after 12

# A worker that dies and is restarted at once, before the coordinator has
# noticed (a container restart inside its pod): it asks for the same process
# index at the same address.
kill -KILL "$W1_PID" 2>/dev/null
wait "$W1_PID" 2>/dev/null
start_worker "$NS_H1" "$IP_H1" 0 worker-h1-restarted
W1_PID=$LAST_PID
check "a worker restarted at once on $NS_H1 gets back in (2 alive, process 0 on $NS_H1, 1 on $NS_H2)" two_alive
after_lost() {
    poll 50 0.2 "$T/desc-after2.json" "d['state'] == 'lost' and not all(x['present'] for x in d['devices'])" \
        describe after --json
}
check "the array it held is lost, not half-present" after_lost
check "put + get across both hosts with the new worker, bit-exact" put_both final 13
check "rm after final" ctl "$NS_H0" rm after final
check "every device of the alive workers is back to 0 bytes" \
    wait_bytes "all(b == 0 for w in d if w['state'] == 'alive' for b in w['device_bytes'])"

# ---------------------------------------------------------------- shutdown
check "SIGTERM stops $NS_H1's worker within 10 s" stop "$W1_PID"
check "SIGTERM stops $NS_H2's worker within 10 s" stop "$W2_PID"
check "SIGTERM stops the coordinator within 10 s" stop "$COORD_PID"

# ---------------------------------------------------------------- same host, other hosts
# Two workers on h1 (sharing its 4 MiB /dev/shm) and one on h2, default
# --transport auto. Mesh i=6 j=2 over [h1a0, h1b0, h1a1, h1b1, ..., h1b3,
# h2's 4]: groups over 'j' pair h1a with h1b (shared memory) for rows 0-3
# and stay inside h2's worker for rows 4-5; groups over 'i' span both
# hosts (gRPC).
start_coord || abort "the coordinator restarts at $TARGET for the same-host case" "no port file"
start_worker "$NS_H1" "$IP_H1" 0 worker-h1a
W1_PID=$LAST_PID
start_worker "$NS_H2" "$IP_H2" 1 worker-h2b
W2_PID=$LAST_PID
start_worker "$NS_H1" "$IP_H1" 2 worker-h1b 7172
W3_PID=$LAST_PID
three_alive() { alive_as "$T/devices-3.json" "[('$IP_H1:7171', 0), ('$IP_H1:7172', 2), ('$IP_H2:7171', 1)]"; }
check "three workers alive: two on $NS_H1, one on $NS_H2" three_alive
DEV=$(q "$T/devices-3.json" "(lambda a, b, c: ', '.join(str(x) for p in zip(a, b) for x in p) + ', ' + ', '.join(str(x) for x in c))(*[[w for w in d if w['address'] == A][0]['devices'] for A in ('$IP_H1:7171', '$IP_H1:7172', '$IP_H2:7171')])")
py gen "$T/x12.npy" 12,64 float32 21
# NAME BODY OUT-SPEC NUMPY (x: the input, rows in mesh position order;
# tsum: a sum in shmap's order, the pairwise tree over ranks)
COLLS=(
    "psum_j|psum(x, 'j')|P('i', None)|x.reshape(6, 2, 64).sum(1, dtype=np.float32)"
    "psum_i|psum(x, 'i')|P('j', None)|tsum(x.reshape(6, 2, 64))"
    "pmean_j|pmean(x, 'j')|P('i', None)|x.reshape(6, 2, 64).sum(1, dtype=np.float32) * np.float32(0.5)"
    "gather_j|all_gather(x, 'j', axis=0, tiled=True, to='invarying')|P('i', None)|x"
    "scatter_j|psum_scatter(x, 'j', scatter_dimension=1, tiled=True)|P('i', 'j')|x.reshape(6, 2, 64).sum(1, dtype=np.float32)"
    "perm_j|ppermute(x, 'j', perm=[(0, 1), (1, 0)])|P(('i', 'j'), None)|x.reshape(6, 2, 64)[:, ::-1].reshape(12, 64)"
    "a2a_j|all_to_all(x, 'j', 1, 0, tiled=True)|P(('i', 'j'), None)|x.reshape(6, 2, 2, 32).transpose(0, 2, 1, 3).reshape(24, 32)"
    "gather_i|all_gather(x, 'i', axis=0, tiled=True, to='invarying')|P('j', None)|np.concatenate([x[0::2], x[1::2]])"
)
coll_ok() { # coll_ok NAME BODY OUT NUMPY
    printf 'mesh i=6 j=2 devices=[%s]\nshard_map f(x: f32[12,64] @ P(('"'"'i'"'"', '"'"'j'"'"'), None)) -> %s:\n    return %s\n' \
        "$DEV" "$3" "$2" >"$T/$1.shmap"
    ctl "$NS_H0" run "$T/$1.shmap" --arg "x=$T/x12.npy" --out-name "0=$1" >"$T/$1.out" 2>&1 &&
        ctl "$NS_H0" get "$1" "$T/$1-got.npy" >>"$T/$1.out" 2>&1 &&
        py ref "$T/$1-want.npy" "$4" "$T/x12.npy" >>"$T/$1.out" 2>&1 &&
        py same "$T/$1-got.npy" "$T/$1-want.npy" || { cat "$T/$1.out"; return 1; }
}
for l in "${COLLS[@]}"; do
    IFS='|' read -r name body out want <<<"$l"
    check "$name: $body with two workers on $NS_H1 and one on $NS_H2 equals numpy's" \
        coll_ok "$name" "$body" "$out" "$want"
done
ctl "$NS_H0" devices --json >"$T/devices-3b.json" 2>&1
shm_pairs() {
    q "$T/devices-3b.json" "sorted((w['address'], sorted(x['address'] for x in d if x['worker'] in w['shm_peers'])) for w in d) == [('$IP_H1:7171', ['$IP_H1:7172']), ('$IP_H1:7172', ['$IP_H1:7171']), ('$IP_H2:7171', [])]"
}
check "shmapctl devices: the two workers of $NS_H1 share memory, $NS_H2's with nobody" shm_pairs
big_psum() { # 4 MiB per device: h1's pair would need 16 MiB of its 4 MiB /dev/shm
    py gen "$T/xbig.npy" 12,1048576 float32 22 &&
        printf 'mesh i=6 j=2 devices=[%s]\nshard_map f(x: f32[12,1048576] @ P(('"'"'i'"'"', '"'"'j'"'"'), None)) -> P('"'"'i'"'"', None):\n    return psum(x, '"'"'j'"'"')\n' \
            "$DEV" >"$T/big.shmap" &&
        ctl "$NS_H0" run "$T/big.shmap" --arg "x=$T/xbig.npy" --out-name 0=big >"$T/big.out" 2>&1 &&
        ctl "$NS_H0" get big "$T/big-got.npy" >>"$T/big.out" 2>&1 &&
        py ref "$T/big-want.npy" "x.reshape(6, 2, -1).sum(1, dtype=np.float32)" "$T/xbig.npy" &&
        py same "$T/big-got.npy" "$T/big-want.npy" || { cat "$T/big.out"; return 1; }
}
check "a psum too large for $NS_H1's /dev/shm runs over gRPC and equals numpy's" big_psum
check "a worker of $NS_H1 logged the fallback to gRPC" \
    grep -q "go over gRPC instead" "$T/worker-h1a.log" "$T/worker-h1b.log"
stop3() { stop "$W1_PID" && stop "$W2_PID" && stop "$W3_PID" && stop "$COORD_PID"; }
check "SIGTERM stops the three workers and the coordinator within 10 s" stop3
no_shm_left() { ! hx "$NS_H1" sh -c 'ls /dev/shm | grep -q shmap-'; }
check "$NS_H1's /dev/shm holds no shmap segment after the stop" no_shm_left

# ---------------------------------------------------------------- TLS
# The same three hosts with TLS: one cluster certificate naming the three
# addresses (scripts/tls_certs.sh), mutual TLS between the coordinator and
# the workers; clients with the CA alone relay through the coordinator,
# with the client certificate they reach the workers.
TLS_DIR="$T/tls"
if bash "$HERE/../../scripts/tls_certs.sh" "$TLS_DIR" "$IP_H0" "$IP_H1" "$IP_H2" \
    >"$T/tls-certs.log" 2>&1; then
    ok "certificates for $IP_H0, $IP_H1 and $IP_H2 (scripts/tls_certs.sh)"
    TLS_ARGS=(--tls-cert "$TLS_DIR/cluster.pem" --tls-key "$TLS_DIR/cluster.key"
        --tls-ca "$TLS_DIR/ca.pem")
    start_coord || abort "the coordinator serves TLS at $TARGET" "no port file"
    start_worker "$NS_H1" "$IP_H1" 0 worker-h1-tls
    W1_PID=$LAST_PID
    start_worker "$NS_H2" "$IP_H2" 1 worker-h2-tls
    W2_PID=$LAST_PID
    CTL_ENV=(SHMAP_TLS_CA="$TLS_DIR/ca.pem")
    check "over mutual TLS both workers register (2 alive, a client with the CA)" two_alive
    check "put + get across both hosts over TLS, relayed (the client has the CA only)" \
        put_both tlsrelay 14
    CTL_ENV=(SHMAP_TLS_CA="$TLS_DIR/ca.pem" SHMAP_TLS_CERT="$TLS_DIR/client.pem"
        SHMAP_TLS_KEY="$TLS_DIR/client.key")
    check "put + get across both hosts over TLS, direct (with the client certificate)" \
        put_both tlsdirect 15
    CTL_ENV=()
    plain_refused() {
        ! ctl "$NS_H1" ls >"$T/plain.out" 2>&1 && grep -q -- "--tls-ca" "$T/plain.out"
    }
    check "a plaintext client is refused, told to give the CA" plain_refused
    tls_logged() {
        local f
        for f in coordinator worker-h1-tls worker-h2-tls; do
            grep -q "TLS: certificate" "$T/$f.log" || { echo "not in $f.log"; return 1; }
        done
    }
    check "the coordinator and the workers logged TLS at start" tls_logged
    stop_tls() { stop "$W1_PID" && stop "$W2_PID" && stop "$COORD_PID"; }
    check "SIGTERM stops the TLS workers and coordinator within 10 s" stop_tls
else
    bad "certificates with scripts/tls_certs.sh" "$(tail -n 3 "$T/tls-certs.log" | tr '\n' ' ')"
fi
no_reports() { ! grep -lE 'ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:|SUMMARY: UndefinedBehaviorSanitizer' "$T"/*.log; }
check "no sanitizer or crash report in any log" no_reports

finish
