#!/usr/bin/env bash
# public_abi: what libshmap promises a program built against it.
# `cmake --install` into a temporary prefix, then:
# - the IR's own headers (sm_ir.h, the op table sm_ir_ops.h/.def and its
#   enum sm_op_kind) are not installed: ops are named by their JAX name;
# - every installed header compiles on its own (a C file including just it,
#   -Wall -Wextra -Werror);
# - libshmap.so exports exactly the functions the installed headers
#   declare: none missing, nothing else (no generated protobuf-c code, no
#   internal sm_ helper).
#   public_abi.sh CMAKE BUILD_DIR
set -euo pipefail
cmake_bin=$1 build=$2
work=$(mktemp -d /tmp/shmap-abi-XXXXXX)
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
"$cmake_bin" --install "$build" --prefix "$prefix" >"$work/install.log"
inc="$prefix/include/shmap"
lib=$(find "$prefix" -name libshmap.so | head -1)
[ -d "$inc" ] && [ -n "$lib" ] || { echo "public_abi: no headers or no libshmap.so under $prefix"; exit 1; }
fail=0
for internal in sm_ir.h sm_ir_ops.h sm_ir_ops.def; do
  [ ! -e "$inc/$internal" ] || { echo "public_abi: internal header $internal is installed"; fail=1; }
done
if grep -l "sm_op_kind" "$inc"/*; then
  echo "public_abi: an installed header names sm_op_kind (the op enum is internal)"
  fail=1
fi
n=0
for h in "$inc"/*.h; do
  printf '#include "%s"\n' "$(basename "$h")" >"$work/alone.c"
  if ! cc -std=c11 -Wall -Wextra -Werror -I"$inc" -c "$work/alone.c" -o "$work/alone.o"; then
    echo "public_abi: $(basename "$h") does not compile on its own"
    fail=1
  fi
  n=$((n + 1))
done
[ "$n" -ge 10 ] || { echo "public_abi: only $n headers installed"; exit 1; }
# the functions the installed headers declare (comments and macros gone)
for h in "$inc"/*.h; do printf '#include "%s"\n' "$(basename "$h")"; done >"$work/all.c"
cc -std=c11 -E -P -I"$inc" "$work/all.c" | tr '\n' ' ' | grep -oE '\b[A-Za-z_][A-Za-z0-9_]* *\(' |
  tr -d '( ' | grep '^sm_' | sort -u >"$work/declared"
nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | sort -u >"$work/exported"
[ -s "$work/declared" ] || { echo "public_abi: no function found in the headers"; exit 1; }
missing=$(comm -23 "$work/declared" "$work/exported")
extra=$(comm -13 "$work/declared" "$work/exported")
if [ -n "$missing" ]; then
  echo "public_abi: declared in an installed header but not exported by libshmap (client/libshmap.map):"
  echo "$missing"
  fail=1
fi
if [ -n "$extra" ]; then
  echo "public_abi: exported by libshmap but declared in no installed header:"
  echo "$extra" | head -20
  fail=1
fi
[ "$fail" = 0 ] || exit 1
echo "public_abi: $n headers compile alone; libshmap exports exactly their $(wc -l <"$work/declared") functions"
