#!/usr/bin/env bash
# Part 3 of the demo (called by scripts/demo_cluster.sh with its work dir,
# SHMAP_TARGET set to a running cluster): runs every seed example of
# examples/ (shard_map and jit) as a job on the service with `shmapctl run`, fetches
# each result and compares it with the value numpy computes from the same
# inputs (examples/NAME.inputs and NAME.expected, evaluated here in numpy,
# independently of shmap).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ctl=$root/build/client/shmapctl
py=/usr/bin/python3
work=${1:-$(mktemp -d /tmp/shmap-jobs-XXXXXX)}
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# numpy evaluator of the examples' tiny expression language (examples/README.md)
cat >"$work/ev.py" <<'PY'
import sys, numpy as np
dt = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64,
      "u8": np.uint8, "bool": np.bool_}
env = dict(dt)
def random(n, t, seed):
    # the generator of common/exec/sm_example.c: n integers in [-4, 4]
    m = (1 << 64) - 1
    st = (seed * 2654435761 + 12345) & m
    out = []
    for _ in range(n):
        st = (st * 6364136223846793005 + 1442695040888963407) & m
        out.append((st >> 33) % 9 - 4)
    return np.array(out, dtype=t)
env["random"] = random
env.update(
    arange=lambda n, t: np.arange(n, dtype=t),
    values=lambda t, *v: np.array(v, dtype=t),
    reshape=lambda x, *d: x.reshape(d),
    transpose=lambda x, *p: x.transpose(p),
    tile=lambda x, *r: np.tile(x, r),
    roll=lambda x, s, a: np.roll(x, s, axis=a),
    sum=lambda x, a: x.sum(axis=a, dtype=x.dtype),
    mean=lambda x, a: x.mean(axis=a, dtype=x.dtype),
    astype=lambda x, t: x.astype(t),
    matmul=lambda a, b: a @ b,
    add=lambda a, b: a + b,
    multiply=lambda a, b: a * b)
def lines(path):
    return [l.split("#")[0].strip() for l in open(path) if l.split("#")[0].strip()]
mode, name, out = sys.argv[1], sys.argv[2], sys.argv[3]
for l in lines(f"examples/{name}.inputs"):
    k, e = [s.strip() for s in l.split("=", 1)]
    env[k] = eval(e, {}, env)
    if mode == "inputs":
        np.save(f"{out}/{name}.{k}.npy", env[k])
        print(f"{k}={out}/{name}.{k}.npy")
if mode == "check":
    want = eval(lines(f"examples/{name}.expected")[0], {}, env)
    got = np.load(out)
    ok = got.shape == want.shape and got.dtype == want.dtype and np.array_equal(got, want)
    print(("matches numpy: " if ok else "DIFFERS from numpy: ") +
          f"{got.dtype}{list(got.shape)}" + ("" if ok else f" vs {want.dtype}{list(want.shape)}"))
    sys.exit(0 if ok else 1)
PY

cd "$root"
fail=0
for prog in examples/*.shmap; do
  name=$(basename "$prog" .shmap)
  kind=$(grep -E '^(shard_map|jit) ' "$prog" | tail -1 | cut -d' ' -f1)
  say "$kind example '$name'"
  grep -E '^(shard_map|jit) ' "$prog" | tail -1
  mapfile -t args < <("$py" "$work/ev.py" inputs "$name" "$work")
  argv=()
  for a in "${args[@]}"; do argv+=(--arg "$a"); done
  echo "\$ shmapctl run $prog ${argv[*]} --out-name 0=ex-$name"
  if "$ctl" run "$prog" "${argv[@]}" --out-name "0=ex-$name" \
      && "$ctl" get "ex-$name" "$work/ex-$name.npy" \
      && "$py" "$work/ev.py" check "$name" "$work/ex-$name.npy"; then :; else fail=1; fi
  "$ctl" rm "ex-$name" >/dev/null 2>&1 || true
done
exit $fail
