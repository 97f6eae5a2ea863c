#!/usr/bin/env bash
# Part 2 of the demo (called by scripts/demo.sh after the build): starts a
# local cluster (a coordinator with 2 workers x 4 devices on a free loopback
# port), uploads the (64,128) array of the data loading guide in each of its
# layouts (one of them as a process-local upload from 4 concurrent clients),
# describes each, fetches it back and compares it bit for bit, reshards one,
# runs the seed shard_map examples when the service runs jobs, and stops
# the cluster.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/build
ctl=$bin/client/shmapctl
py=/usr/bin/python3
work=$(mktemp -d /tmp/shmap-demo-XXXXXX)
coord_pid=
cleanup() {
  if [ -n "$coord_pid" ] && kill -0 "$coord_pid" 2>/dev/null; then
    kill -TERM "$coord_pid"; wait "$coord_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { echo "\$ shmapctl $*"; "$ctl" "$@"; }

say "Starting a local cluster: shmap-coordinator --local-workers 4 --devices-per-worker 2 (4 processes x 2 devices)"
"$bin/server/shmap-coordinator" --listen 127.0.0.1:0 --port-file "$work/port" \
  --local-workers 4 --devices-per-worker 2 >"$work/cluster.log" 2>&1 &
coord_pid=$!
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
[ -s "$work/port" ] || { echo "the coordinator did not start:"; cat "$work/cluster.log"; exit 1; }
export SHMAP_TARGET=127.0.0.1:$(head -1 "$work/port")
for _ in $(seq 100); do
  [ "$("$ctl" devices --json 2>/dev/null | "$py" -c 'import json,sys; print(sum(w["state"]=="alive" for w in json.load(sys.stdin)["workers"]))' 2>/dev/null)" = 4 ] && break
  sleep 0.1
done
run devices

# The global array: 0..8191 as float32, shape (64,128); and each process's
# rows for the process-local upload (process p holds rows 16p..16p+15).
"$py" - "$work" <<'PY'
import sys, numpy as np
w = sys.argv[1]
x = np.arange(64 * 128, dtype=np.float32).reshape(64, 128)
np.save(f"{w}/x.npy", x)
for p in range(4):
    np.save(f"{w}/local{p}.npy", x[16 * p:16 * (p + 1)])
PY

layouts=(
  "cols|x=8|0,1,2,3,4,5,6,7|P(None, 'x')"
  "cols-permuted|x=8|0,2,4,6,1,3,5,7|P(None, 'x')"
  "grid|x=4,y=2|0,1,2,3,4,5,6,7|P('x', 'y')"
  "replicated|x=4,y=2|0,1,2,3,4,5,6,7|P()"
  "replica-in-process|r=4,s=2|0,1,2,3,4,5,6,7|P('s')"
  "replica-across|r=4,s=2|0,4,1,5,2,6,3,7|P('s')"
)
for l in "${layouts[@]}"; do
  IFS='|' read -r name mesh devices spec <<<"$l"
  say "Layout '$name': mesh $mesh, devices $devices, $spec"
  run put "$work/x.npy" --mesh "$mesh" --devices "$devices" --spec "$spec" --name "$name"
  run describe "$name"
  run get "$name" "$work/back-$name.npy"
  cmp <(tail -c 32768 "$work/x.npy") <(tail -c 32768 "$work/back-$name.npy") \
    && echo "fetched back: identical to the original"
done

say "Process-local upload: 4 clients, each sending only its own 16 rows (make_array_from_process_local_data)"
pids=()
for p in 0 1 2 3; do
  echo "\$ shmapctl put-local $work/local$p.npy --process $p --mesh x=4,y=2 --spec \"P('x', 'y')\" --name local &"
  "$ctl" put-local "$work/local$p.npy" --process "$p" --mesh x=4,y=2 --spec "P('x', 'y')" --name local &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
run describe local
run get local "$work/back-local.npy"
cmp <(tail -c 32768 "$work/x.npy") <(tail -c 32768 "$work/back-local.npy") \
  && echo "fetched back: identical to the global array"

say "Resharding 'grid' to P(None, 'y') (data moves worker to worker)"
run reshard grid --spec "P(None, 'y')" --name grid-cols
run describe grid-cols
run get grid-cols "$work/back-grid-cols.npy"
cmp <(tail -c 32768 "$work/x.npy") <(tail -c 32768 "$work/back-grid-cols.npy") \
  && echo "fetched back: identical to the original"

run ls
for l in "${layouts[@]}"; do IFS='|' read -r name _ <<<"$l"; "$ctl" rm "$name"; done
"$ctl" rm local; "$ctl" rm grid-cols
run devices

if [ -f "$root/scripts/demo_jobs.sh" ] && "$ctl" --help 2>&1 | grep -q '^ *run '; then
  bash "$root/scripts/demo_jobs.sh" "$work"
fi

say "Stopping the cluster"
kill -TERM "$coord_pid"; wait "$coord_pid" || true; coord_pid=
echo "stopped"
