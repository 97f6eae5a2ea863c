#!/usr/bin/env bash
# Installs what is missing, checks formatting, builds a normal and a
# sanitizer (ASan+UBSan) build, and runs every test of both with ctest
# (the e2e suites' secure-mode runs, label secure, in the normal build only).
# Exits non-zero on any failure.
#   SM_SKIP_ASAN=1   only the normal build
#   SM_SKIP_FUZZ=1   skip the short fuzzing run (scripts/fuzz.sh all 10)
#   SM_SKIP_RELEASE=1  skip the Release build (built, not tested, so that the
#                    build a packager uses stays warning-free under -Werror)
#   SM_JOBS=N        parallel build jobs (default: nproc)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bash scripts/deps.sh

jobs=${SM_JOBS:-$(nproc)}

echo "== format check"
files=$(git ls-files '*.c' '*.h' 2>/dev/null || find . -name '*.[ch]' -not -path './build*')
if [ -n "$files" ]; then
  # shellcheck disable=SC2086
  clang-format --dry-run --Werror $files
fi

build() { # dir, extra cmake args...
  local dir=$1; shift
  echo "== build $dir"
  cmake -S "$root" -B "$root/$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
  cmake --build "$root/$dir" -j "$jobs"
}

run_tests() { # dir, extra ctest args...
  local dir=$1; shift
  echo "== test $dir"
  (cd "$root/$dir" && ctest --output-on-failure -j "$jobs" --timeout 600 "$@")
}

build build
run_tests build
if [ "${SM_SKIP_ASAN:-0}" != 1 ]; then
  build build-asan -DSM_SANITIZE=ON
  # The e2e suites' second run in secure mode (label secure) only in the
  # normal build, for time; e2e_tenants and e2e_tls run TLS and tenants here too.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
    run_tests build-asan -LE secure
fi
if [ "${SM_SKIP_FUZZ:-0}" != 1 ]; then
  echo "== fuzz (10 s per target; scripts/fuzz.sh runs longer)"
  bash scripts/fuzz.sh all 10
fi
if [ "${SM_SKIP_RELEASE:-0}" != 1 ]; then
  build build-release -DCMAKE_BUILD_TYPE=Release
fi
echo "== all tests passed"
