#!/usr/bin/env bash
# install_prefix: `cmake --install` into a temporary prefix, then build
# examples/put_get.c with nothing but the installed headers, libshmap and
# pkg-config (the relocatable shmap.pc), and run it against a local cluster
# started from the installed binaries. No ldconfig, no LD_LIBRARY_PATH.
# (tests/public_abi.sh checks the installed headers and exports.)
#   install_prefix.sh CMAKE BUILD_DIR SOURCE_DIR
set -euo pipefail
cmake_bin=$1 build=$2 src=$3
work=$(mktemp -d /tmp/shmap-install-XXXXXX)
coord=
cleanup() {
  [ -n "$coord" ] && kill "$coord" 2>/dev/null && wait "$coord" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
prefix="$work/prefix"
"$cmake_bin" --install "$build" --prefix "$prefix" >"$work/install.log"
pc=$(dirname "$(find "$prefix" -name shmap.pc | head -1)")
[ -n "$pc" ] || { echo "install_prefix: no shmap.pc under $prefix"; exit 1; }
export PKG_CONFIG_PATH=$pc
# the prefix comes from the .pc's own place, not from the build's prefix
got=$(cd / && pkg-config --variable=libdir shmap)
[ -f "$got/libshmap.so" ] || { echo "install_prefix: libdir $got has no libshmap.so"; exit 1; }
cd "$work"
# shellcheck disable=SC2046
cc -o put_get "$src/examples/put_get.c" $(pkg-config --cflags --libs shmap)
! ldd ./put_get | grep -q "not found" || { ldd ./put_get; exit 1; }
"$prefix/bin/shmap-coordinator" --listen 127.0.0.1:0 --port-file "$work/port" \
  --local-workers 2 --devices-per-worker 4 >"$work/coord.log" 2>&1 &
coord=$!
for _ in $(seq 300); do
  [ -s "$work/port" ] && break
  sleep 0.1
done
target=127.0.0.1:$(cat "$work/port")
for _ in $(seq 300); do
  [ "$("$prefix/bin/shmapctl" --target "$target" devices 2>/dev/null | grep -c ' alive ')" = 2 ] && break
  sleep 0.1
done
./put_get "$target"
echo "install_prefix: put_get built with pkg-config from $prefix ran"
