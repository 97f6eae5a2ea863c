#!/usr/bin/env bash
# bench/run.sh: builds the benchmarks and runs them one after the other, each
# measuring shmap against its anchor in the same run, then prints one summary
# table (figure, anchor, ratio, target, met / not met).
#
#   bench/run.sh [--quick] [--only NAME[,NAME...]] [--out FILE] [--no-deps]
#
#   --quick      fewer sizes and runs: a smoke run, not figures to quote
#   --only NAME  transfer, matmul, jit, python, dispatch, state, ckpt, mpi_coll, coll, scale,
#                reshard (comma-separated)
#   --out FILE   where the output goes; default bench/results/latest.txt for a
#                full run, bench/results/partial.txt with --quick or --only
#                (so a smoke run never replaces the committed figures)
#   --no-deps    skip SM_WITH_BENCH=1 scripts/deps.sh
#
# Environment: BUILD_DIR (default <repo>/build; if it does not build with
# -Werror, BUILD_DIR-nowerror is used), BUILD_TYPE (RelWithDebInfo, the type
# of the shared build/ tree, or Release), BENCH_TIMEOUT (seconds per
# benchmark, default 300), BENCH_CKPT_MIB and BENCH_CKPT_DIR (bench_ckpt's
# array size, default 1024, and where it writes, default /tmp). A full run takes a few minutes on 2 cores; the
# machine's speed drifts from run to run, so compare only figures
# of the same run.
# Benchmarks are never part of ctest.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-300}
BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo}
ALL="transfer matmul jit python dispatch state ckpt mpi_coll coll scale reshard"

quick=0
only=""
out=""
deps=1
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --only) only=${2:?--only needs a name}; shift ;;
    --only=*) only=${1#--only=} ;;
    --out) out=${2:?--out needs a file}; shift ;;
    --out=*) out=${1#--out=} ;;
    --no-deps) deps=0 ;;
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done
selected=${only:-$ALL}
selected=${selected//,/ }
for n in $selected; do
  case " $ALL " in *" $n "*) ;; *) echo "run.sh: unknown benchmark '$n' (one of: $ALL)" >&2; exit 2 ;; esac
done
want() { case " $selected " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

mkdir -p "$ROOT/bench/results"
if [ -z "$out" ]; then
  if [ $quick = 1 ] || [ -n "$only" ]; then out=$ROOT/bench/results/partial.txt
  else out=$ROOT/bench/results/latest.txt; fi
fi
work=$(mktemp -d /tmp/shmap-bench-run.XXXXXX)
trap 'rm -rf "$work"' EXIT
raw=$work/summary.raw
: >"$raw"
failures=()

say() { printf '%s\n' "$*"; }

# build_in DIR TYPE WERROR: configures DIR and builds the bench programs and
# the service binaries (only those: the tests are not needed here).
build_in() {
  local dir=$1 type=$2 werror=$3 log=$work/build.log t
  cmake -S "$ROOT" -B "$dir" -DCMAKE_BUILD_TYPE="$type" -DSM_SANITIZE=OFF -DSM_WERROR="$werror" \
    >>"$log" 2>&1 || return 1
  BUILT="shmap-coordinator shmap-worker bench_transfer bench_matmul bench_jit bench_roundtrip _shmap bench_dispatch bench_state bench_ckpt bench_scale bench_reshard"
  local help
  help=$(cmake --build "$dir" --target help 2>/dev/null || true)
  for t in bench_mpi_coll bench_coll; do
    if grep -qE "^(\.\.\. )?$t(:|\$)" <<<"$help"; then
      BUILT="$BUILT $t"
    fi
  done
  # shellcheck disable=SC2086
  cmake --build "$dir" -j"$(nproc)" --target $BUILT >>"$log" 2>&1
}

build() {
  if [ $deps = 1 ]; then
    SM_WITH_BENCH=1 bash "$ROOT/scripts/deps.sh"
  fi
  local t0=$SECONDS type=$BUILD_TYPE
  if ! build_in "$BUILD_DIR" "$type" ON; then
    # A warning in a module being written right now should not stop the
    # measurements: build again, in a tree of its own so that BUILD_DIR keeps
    # -Werror, with SM_WERROR=OFF (the bench programs keep -Werror).
    say "build of $BUILD_DIR failed with -Werror:"
    grep -E 'error' "$work/build.log" | head -5 || true
    BUILD_DIR=$BUILD_DIR-nowerror
    say "building again in $BUILD_DIR with -DSM_WERROR=OFF"
    build_in "$BUILD_DIR" "$type" OFF || { tail -40 "$work/build.log"; return 1; }
  fi
  cp "$work/build.log" "$BUILD_DIR/bench-build.log"
  say "built $BUILT in $BUILD_DIR ($type), $((SECONDS - t0)) s"
}

# run_bench NAME CMD...: runs one benchmark under a time limit; its SUMMARY
# lines go to the summary, everything else to the output (but the local
# cluster's INFO log lines).
run_bench() {
  local name=$1 t0=$SECONDS rc
  shift
  say ""
  say "== $name: ${*#"$BUILD_DIR/"}"
  set +e
  timeout --kill-after=10 "$BENCH_TIMEOUT" stdbuf -oL "$@" 2>&1 | tee "$work/$name.out" |
    grep --line-buffered -v -E '^SUMMARY\||^[0-9:.]{12} [a-z-]+ INFO: '
  rc=${PIPESTATUS[0]}
  set -e
  grep '^SUMMARY|' "$work/$name.out" >>"$raw" || true
  say "   ($name: exit $rc, $((SECONDS - t0)) s)"
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then failures+=("$name: stopped after ${BENCH_TIMEOUT} s")
  elif [ "$rc" != 0 ]; then failures+=("$name: exit $rc"); fi
  return 0
}

# bench_transfer prints a table, not SUMMARY lines: turn its rows into them.
transfer_summary() {
  awk '
    $2 == "MiB" && NF >= 7 {
      printf "SUMMARY|transfer|upload %s MiB|%s|MB/s|raw TCP 1 conn|%s|%.2f|>= 0.5x|%s\n", $1, $3, $5, $6, ($6 >= 0.5 ? "met" : "not met")
      printf "SUMMARY|transfer|download %s MiB (reused buffer)|%s|MB/s|raw TCP 1 conn|%s|%.2f|>= 0.5x|%s\n", $1, $4, $5, $7, ($7 >= 0.5 ? "met" : "not met")
      if (NF >= 8)
        printf "SUMMARY|transfer|download %s MiB into a new array|%s|MB/s|raw TCP 1 conn|%s|%.2f||n/a\n", $1, $8, $5, ($5 > 0 ? $8 / $5 : 0)
    }
    $1 == "shm" && $3 == "MiB" && NF >= 8 {
      printf "SUMMARY|transfer|same-host upload %s MiB (sm_client_alloc)|%s|MB/s|raw TCP 1 conn|%s|%.2f|>= 2x|%s\n", $2, $4, $6, $7, ($7 >= 2 ? "met" : "not met")
      printf "SUMMARY|transfer|same-host download %s MiB (sm_client_alloc)|%s|MB/s|raw TCP 1 conn|%s|%.2f|>= 2x|%s\n", $2, $5, $6, $8, ($8 >= 2 ? "met" : "not met")
    }
    /^peak RSS:/ {
      sub(/^peak RSS: /, "")
      n = split($0, parts, /, /)
      for (k = 1; k <= n; k++) {
        m = split(parts[k], w, / /)
        printf "SUMMARY|transfer|peak RSS %s|%s|MiB|||||n/a\n", (m > 3 ? w[1] " " w[2] : w[1]), w[m - 1]
      }
    }' "$work/transfer.out" >>"$raw"
}

print_summary() {
  say ""
  say "== summary ($(date -u '+%Y-%m-%d %H:%M UTC'); ratio = figure / anchor, same run)"
  # Collective rows of shmap get the Open MPI figures of the same op and size
  # (shared memory and TCP loopback) as their anchors.
  awk -F'|' '
    function fmt(v) { return v ~ /^[0-9.]+([eE][-+]?[0-9]+)?$/ ? sprintf("%.3g", v) : v }
    BEGIN {
      mpi["psum"] = "allreduce"; mpi["all_gather"] = "allgather"
      mpi["psum_scatter"] = "reduce_scatter"; mpi["all_to_all"] = "alltoall"
      mpi["ppermute"] = "ppermute"
      printf "%-9s %-48s %8s %-10s %-18s %11s %11s %-9s %s\n", "bench", "figure", "value",
             "unit", "anchor", "anchor", "ratio", "target", "met"
    }
    { row[NR] = $0 }
    $2 == "mpi_coll" {
      split($3, w, " "); lab = $3; sub(/.*, MPI /, "", lab); split(lab, l, " ")
      anc[w[1] " " w[2], l[1]] = $4; if (!(l[1] in seen)) { seen[l[1]] = 1; labels[++nl] = l[1] }
    }
    END {
      for (r = 1; r <= NR; r++) {
        split(row[r], f, "|")
        if (f[2] == "coll" && f[6] == "") {
          split(f[3], w, " "); key = mpi[w[1]] " " w[2]; an = ""; av = ""; ra = ""
          for (li = 1; li <= nl; li++) if ((key, labels[li]) in anc) {
            lb = labels[li]
            an = an (an == "" ? "" : "; ") "MPI " lb; av = av (av == "" ? "" : "; ") fmt(anc[key, lb])
            ra = ra (ra == "" ? "" : "; ") (anc[key, lb] > 0 ? sprintf("%.2f", f[4] / anc[key, lb]) : "")
          }
          f[6] = an; f[7] = av; f[8] = ra
          # targets: over gRPC, psum at least MPI TCP bus bandwidth at 16 and
          # 64 MiB; through shared memory, psum at 64 MiB 3x MPI shm and every
          # other collective 2x MPI shm
          shm = f[3] ~ /shmap shm/
          if (!shm && w[1] == "psum" && (w[2] == "16" || w[2] == "64") && ((key, "tcp") in anc)) {
            f[9] = ">= MPI tcp"; f[10] = f[4] >= anc[key, "tcp"] ? "met" : "not met"
          }
          if (shm && ((key, "shm") in anc) && (w[1] != "psum" || w[2] == "64")) {
            x = w[1] == "psum" ? 3 : 2
            f[9] = ">= " x "x MPI shm"; f[10] = f[4] >= x * anc[key, "shm"] ? "met" : "not met"
          }
        }
        printf "%-9s %-48s %8s %-10s %-18s %11s %11s %-9s %s\n", f[2], f[3], fmt(f[4]), f[5],
               f[6], f[7], f[8], f[9], f[10]
      }
    }' "$raw" | tee "$raw.table"
  local met notmet
  # (the table's first line is its header, whose last column is "met")
  met=$(tail -n +2 "$raw.table" | grep ' met$' | grep -vc ' not met$' || true)
  notmet=$(tail -n +2 "$raw.table" | grep -c ' not met$' || true)
  say ""
  say "targets: $met met, $notmet not met; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cpus"
  if [ ${#failures[@]} -gt 0 ]; then
    say "failed: $(printf '%s; ' "${failures[@]}")"
    return 1
  fi
}

main() {
  say "shmap bench/run.sh $([ $quick = 1 ] && echo '--quick ')${only:+--only $only }at $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  say "host: $(uname -srm), $(nproc) cpus, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')"
  say "git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" status --porcelain 2>/dev/null | grep -q . && echo ' (uncommitted changes)'), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  build
  local B=$BUILD_DIR/bench
  if want transfer; then
    if [ $quick = 1 ]; then run_bench transfer "$B/bench_transfer" --sizes 16 --shm-sizes 16 --runs 2 --warmup 1
    else run_bench transfer "$B/bench_transfer" --sizes 16,256,1024 --runs 9 --warmup 1; fi
    transfer_summary
  fi
  if want matmul; then
    if [ $quick = 1 ]; then run_bench matmul "$B/bench_matmul" --n 2048 --runs 2
    else run_bench matmul "$B/bench_matmul" --n 4096 --runs 5; fi
  fi
  if want jit; then
    if [ $quick = 1 ]; then run_bench jit "$B/bench_jit" --n 2048 --runs 2
    else run_bench jit "$B/bench_jit" --n 4096 --runs 5; fi
  fi
  if want python; then
    local pyargs=(--mib 256 --runs 5)
    [ $quick = 1 ] && pyargs=(--mib 64 --runs 2)
    PYTHONPATH="$ROOT/python:$BUILD_DIR/python" run_bench python /usr/bin/python3 \
      "$ROOT/bench/bench_python.py" --build "$BUILD_DIR" "${pyargs[@]}"
  fi
  if want dispatch; then
    if [ $quick = 1 ]; then run_bench dispatch "$B/bench_dispatch" --runs 50 --warmup 5
    else run_bench dispatch "$B/bench_dispatch" --runs 200 --warmup 20; fi
  fi
  if want state; then
    if [ $quick = 1 ]; then run_bench state "$B/bench_state" --runs 50 --upload-runs 10
    else run_bench state "$B/bench_state" --runs 1000 --upload-runs 30; fi
  fi
  if want ckpt; then
    # 1 GiB by default; BENCH_CKPT_MIB for a machine with less memory or disk.
    # Checkpoints and the dd file go to BENCH_CKPT_DIR (default /tmp).
    local ckargs=(--mib "${BENCH_CKPT_MIB:-1024}" --runs 5 --dir "${BENCH_CKPT_DIR:-/tmp}")
    [ $quick = 1 ] && ckargs=(--mib 64 --runs 1 --dir "${BENCH_CKPT_DIR:-/tmp}")
    run_bench ckpt "$B/bench_ckpt" "${ckargs[@]}"
  fi
  if want mpi_coll; then
    if [ ! -x "$B/bench_mpi_coll" ]; then
      say ""; say "== mpi_coll: not built (Open MPI not found)"
    elif ! command -v mpirun >/dev/null; then
      say ""; say "== mpi_coll: mpirun not found"
    else
      local margs=(--sizes "1,16,64")
      [ $quick = 1 ] && margs=(--sizes 1 --iters 5)
      local mpirun=(mpirun --allow-run-as-root --oversubscribe -np 4)
      run_bench mpi_coll_shm "${mpirun[@]}" --mca btl self,vader "$B/bench_mpi_coll" "${margs[@]}" --label shm
      run_bench mpi_coll_tcp "${mpirun[@]}" --mca btl self,tcp --mca btl_tcp_if_include lo \
        "$B/bench_mpi_coll" "${margs[@]}" --label tcp
    fi
  fi
  if want coll; then
    if [ -x "$B/bench_coll" ]; then
      if [ $quick = 1 ]; then run_bench coll "$B/bench_coll" --sizes 1 --runs 2
      else run_bench coll "$B/bench_coll" --sizes 1,16,64 --runs 5; fi
    else
      say ""; say "== coll: bench_coll not built (bench/bench_coll.c absent)"
    fi
  fi
  if want scale; then
    if [ $quick = 1 ]; then run_bench scale "$B/bench_scale" --workers 1,2 --mib 4 --runs 1 --dispatch-runs 20
    else run_bench scale "$B/bench_scale" --workers 1,2,4,8 --mib 16 --runs 3 --dispatch-runs 100; fi
  fi
  if want reshard; then
    if [ $quick = 1 ]; then run_bench reshard "$B/bench_reshard" --sizes 16 --runs 2 --warmup 1
    else run_bench reshard "$B/bench_reshard" --sizes 64,256 --runs 5 --warmup 1; fi
  fi
  print_summary
}

main 2>&1 | tee "$work/output.txt"
rc=${PIPESTATUS[0]}
cp "$work/output.txt" "$out"
echo "(written to ${out#"$ROOT/"})"
exit "$rc"
