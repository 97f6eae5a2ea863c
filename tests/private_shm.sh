#!/bin/sh
# private_shm.sh COMMAND...: runs COMMAND with a /dev/shm of its own (a
# fresh tmpfs in a new mount namespace) where it may make one (root, as
# scripts/test.sh and CI run), so that a suite's check that its processes
# left no shared-memory segment sees only its own, not those of the suites
# ctest runs beside it; elsewhere it runs COMMAND as it is.
# SM_PRIVATE_SHM_SIZE (e.g. 48k) bounds that tmpfs, for tests of a
# /dev/shm without room.
if [ "$(id -u)" = 0 ] && unshare --mount --propagation private true 2>/dev/null; then
  exec unshare --mount --propagation private sh -c \
    'mount -t tmpfs -o mode=1777${SM_PRIVATE_SHM_SIZE:+,size=$SM_PRIVATE_SHM_SIZE} shmap-test-shm /dev/shm && exec "$@"' sh "$@"
fi
exec "$@"
