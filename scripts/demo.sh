#!/usr/bin/env bash
# shmap demo: installs what is missing, builds, and shows shmap at work.
#   1. the sharding core on the layouts of JAX's distributed data loading
#      guide: a (64,128) array over 4 processes x 2 devices;
#   2. when the service is built: a local cluster (coordinator + 2 workers x 4
#      devices), the same layouts uploaded, described, fetched back and
#      compared, every seed program run as a job (shard_map and jit) and
#      checked against numpy, then the cluster stopped;
#   3. the same seeds written in Python with the shmap package.
#   SM_JOBS=N  parallel build jobs (default: nproc)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bash scripts/deps.sh
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$root/build" -j "${SM_JOBS:-$(nproc)}" >/dev/null
ctl="$root/build/client/shmapctl"

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# Each layout: title | mesh | devices | spec
layouts=(
  "1-D column sharding: 8 devices, each a (64,16) block|x=8|0,1,2,3,4,5,6,7|P(None, 'x')"
  "Permuted column assignment: the same blocks dealt to devices in another order|x=8|0,2,4,6,1,3,5,7|P(None, 'x')"
  "2-D sharding: rows over 4, columns over 2|x=4,y=2|0,1,2,3,4,5,6,7|P('x', 'y')"
  "Full replication: every device holds the whole array|x=4,y=2|0,1,2,3,4,5,6,7|P()"
  "Partial replication, each replica inside one process (4 replicas of 2 devices)|r=4,s=2|0,1,2,3,4,5,6,7|P('s')"
  "Partial replication across processes: processes 0,1 hold rows 0-31, processes 2,3 rows 32-63|r=4,s=2|0,4,1,5,2,6,3,7|P('s')"
)

say "Part 1: the sharding core (offline: shmapctl sharding / plan-load)"
for l in "${layouts[@]}"; do
  IFS='|' read -r title mesh devices spec <<<"$l"
  say "$title"
  echo "\$ shmapctl sharding --mesh $mesh --devices $devices --spec \"$spec\" --shape 64,128"
  "$ctl" sharding --mesh "$mesh" --devices "$devices" --spec "$spec" --shape 64,128
done

say "Process-local loading plan for the 2-D layout: each process loads only its own 16 rows, a (16,128) block"
echo "\$ shmapctl plan-load --mesh x=4,y=2 --spec \"P('x','y')\" --process-devices '0,1;2,3;4,5;6,7' --local-shape 16,128"
"$ctl" plan-load --mesh x=4,y=2 --spec "P('x','y')" --process-devices '0,1;2,3;4,5;6,7' --local-shape 16,128

if [ -x "$root/build/server/shmap-coordinator" ] && [ -x "$root/build/worker/shmap-worker" ] \
   && [ -f "$root/scripts/demo_cluster.sh" ]; then
  say "Part 2: a local cluster"
  bash "$root/scripts/demo_cluster.sh"
fi
if ls "$root"/build/python/_shmap*.so >/dev/null 2>&1; then
  say "Part 3: the same seeds from Python (import shmap), each checked against numpy"
  echo "\$ PYTHONPATH=python:build/python /usr/bin/python3 examples/python/seeds.py"
  PYTHONPATH="$root/python:$root/build/python" \
    SHMAP_COORDINATOR_BIN="$root/build/server/shmap-coordinator" \
    /usr/bin/python3 "$root/examples/python/seeds.py"
  say "Part 4: a decoder block, its loss and its training, as JAX code writes them, against numpy"
  echo "\$ PYTHONPATH=python:build/python /usr/bin/python3 examples/python/transformer.py"
  PYTHONPATH="$root/python:$root/build/python" \
    SHMAP_COORDINATOR_BIN="$root/build/server/shmap-coordinator" \
    /usr/bin/python3 "$root/examples/python/transformer.py"
  say "Part 5: a training loop as JAX code writes one (import shmap as jax)"
  echo "\$ PYTHONPATH=python:build/python /usr/bin/python3 examples/python/train_mlp.py"
  PYTHONPATH="$root/python:$root/build/python" \
    SHMAP_COORDINATOR_BIN="$root/build/server/shmap-coordinator" \
    /usr/bin/python3 "$root/examples/python/train_mlp.py"
  say "Part 6: a small convolutional network: convolutions, max pooling, its training"
  echo "\$ PYTHONPATH=python:build/python /usr/bin/python3 examples/python/train_cnn.py"
  PYTHONPATH="$root/python:$root/build/python" \
    SHMAP_COORDINATOR_BIN="$root/build/server/shmap-coordinator" \
    /usr/bin/python3 "$root/examples/python/train_cnn.py"
fi
say "demo finished"
