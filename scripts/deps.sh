#!/usr/bin/env bash
# Installs the Debian 12 packages shmap needs to build, test and run, if any
# are missing. Idempotent and quiet when everything is present. Sourced by
# scripts/test.sh and scripts/demo.sh; can be run on its own.
set -euo pipefail

SM_PACKAGES=(
  build-essential cmake pkg-config clang-format clang libclang-rt-14-dev
  libgrpc-dev libprotobuf-c-dev protobuf-c-compiler protobuf-compiler grpc-proto
  libopenblas-dev check libsubunit-dev libjansson-dev libxxhash-dev libsqlite3-dev libmicrohttpd-dev prometheus
  libssl-dev openssl
  iproute2 procps python3 python3-numpy python3-yaml python3-dev python3-pytest python3-scipy
  gdb
)
# gdb: the Python tests dump the thread stacks of a cluster whose test runs
# past 40 s (python/tests/conftest.py), so that a hang shows where it waits.
# python3-scipy: reference values of special functions in the Python tests
# (test_linalg_idioms); shmap itself does not import it.
# Benchmarks compare against Open MPI when it is there; tests do not need it.
if [ "${SM_WITH_BENCH:-0}" = 1 ]; then
  SM_PACKAGES+=(libopenmpi-dev openmpi-bin iperf3)
fi

missing=()
for p in "${SM_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "shmap: installing missing packages: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
