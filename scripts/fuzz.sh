#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan) and
# runs each for a bounded time, seeded from examples/ and tests/fuzz/seeds.
#   scripts/fuzz.sh [TARGET|all] [SECONDS]     (default: all, 60 s each)
# TARGET is program, npy, spec, rpc or manifest. A crash stops with exit 1 and leaves
# the input in build-fuzz/artifacts/; add it to tests/fuzz/seeds/TARGET/ as a
# regression input once fixed (every seed is replayed on each run).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
which=${1:-all}
secs=${2:-60}
bash scripts/deps.sh
dir=$root/build-fuzz
CC=clang cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSM_FUZZ=ON \
  -DSM_WERROR=OFF >/dev/null
targets=(program npy spec rpc manifest)
[ "$which" != all ] && targets=("$which")
cmake --build "$dir" -j "${SM_JOBS:-$(nproc)}" --target "${targets[@]/#/fuzz_}" >/dev/null
mkdir -p "$dir/artifacts"
for t in "${targets[@]}"; do
  corpus=$dir/corpus/$t
  mkdir -p "$corpus"
  seeds=()
  [ -d "$root/tests/fuzz/seeds/$t" ] && seeds+=("$root/tests/fuzz/seeds/$t")
  case $t in
    program) cp "$root"/examples/*.shmap "$corpus"/ ;;
    npy) /usr/bin/python3 - "$corpus" <<'PY'
import io, sys, numpy as np
for k, a in enumerate([np.arange(6, dtype=np.float32).reshape(2, 3), np.zeros((4,), np.int64),
                       np.ones((2, 2, 2), bool), np.arange(3, dtype=np.uint8)]):
    b = io.BytesIO(); np.save(b, a); open(f"{sys.argv[1]}/seed{k}.npy", "wb").write(b.getvalue()[:256])
PY
    ;;
  esac
  echo "== fuzz_$t: ${secs} s"
  log=$dir/fuzz_$t.log
  ASAN_OPTIONS=detect_leaks=1 "$dir/tests/fuzz_$t" -max_total_time="$secs" -timeout=10 \
    -rss_limit_mb=4096 -artifact_prefix="$dir/artifacts/$t-" -print_final_stats=1 \
    "$corpus" "${seeds[@]}" >"$log" 2>&1 || true
  grep -E "^(stat::number_of_executed_units|==[0-9]+==ERROR|SUMMARY)" "$log" || true
  if ! grep -q "^stat::number_of_executed_units: [1-9]" "$log"; then
    echo "fuzz_$t did not run:"; tail -20 "$log"; exit 1
  fi
  if ls "$dir/artifacts/$t-"* >/dev/null 2>&1; then
    echo "fuzz_$t found a crash: $(ls "$dir/artifacts/$t-"*)"
    exit 1
  fi
done
echo "== fuzzing found nothing"
