#!/usr/bin/python3
"""Helpers for tests/netns/multihost.sh: make .npy inputs, compare outputs
bit for bit, cut process-local parts, and query shmapctl --json output.

  nshelp.py gen OUT.npy ROWS,COLS DTYPE SEED   random data (floats include
                                               -0.0, inf, nan, denormals)
  nshelp.py same A.npy B.npy                   exit 0 iff dtype, shape and
                                               every byte are equal
  nshelp.py cut IN.npy OUT.npy R0:R1 C0:C1     OUT = IN[R0:R1, C0:C1]
  nshelp.py cat OUT.npy AXIS A.npy B.npy ...   OUT = concatenate(..., AXIS)
  nshelp.py q 'EXPR' < JSON                    print eval(EXPR) with d = the
                                               JSON; exit 1 if it is False
  nshelp.py ref OUT.npy 'EXPR' X.npy           OUT = eval(EXPR) with x = X
                                               and tsum(a) = a summed over
                                               axis 0 in shmap's order
"""
import json
import sys

import numpy as np


def gen(out, shape, dtype, seed):
    shape = tuple(int(x) for x in shape.split(","))
    rng = np.random.default_rng(int(seed))
    dt = np.dtype(dtype)
    if dt.kind == "f":
        a = rng.standard_normal(shape).astype(dt)
        flat = a.reshape(-1)
        specials = [0.0, -0.0, np.inf, -np.inf, np.nan, np.finfo(dt).tiny / 4,
                    np.finfo(dt).max, -np.finfo(dt).max]
        for i, v in enumerate(specials):
            flat[(i * 997) % flat.size] = dt.type(v)
    else:
        info = np.iinfo(dt)
        a = rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
    np.save(out, a)


def same(pa, pb):
    a, b = np.load(pa), np.load(pb)
    if a.dtype != b.dtype:
        print(f"dtype {a.dtype} != {b.dtype}")
        return 1
    if a.shape != b.shape:
        print(f"shape {a.shape} != {b.shape}")
        return 1
    if a.tobytes() != b.tobytes():
        ne = a.view(f"u{a.itemsize}") != b.view(f"u{b.itemsize}")
        print(f"{int(ne.sum())} of {a.size} elements differ, first at "
              f"{tuple(int(i) for i in np.argwhere(ne)[0])}")
        return 1
    return 0


def tsum(a):
    """a summed over axis 0 as shmap reduces over ranks: [lo, hi) is
    [lo, mid) + [mid, hi), mid = lo + the largest power of two below
    hi - lo."""
    n = len(a)
    if n == 1:
        return a[0]
    p = 1
    while 2 * p < n:
        p *= 2
    return tsum(a[:p]) + tsum(a[p:])


def sl(s):
    lo, hi = s.split(":")
    return slice(int(lo) if lo else None, int(hi) if hi else None)


def main(argv):
    cmd = argv[1]
    if cmd == "gen":
        gen(*argv[2:6])
        return 0
    if cmd == "same":
        return same(argv[2], argv[3])
    if cmd == "cut":
        a = np.load(argv[2])
        np.save(argv[3], np.ascontiguousarray(a[sl(argv[4]), sl(argv[5])]))
        return 0
    if cmd == "cat":
        parts = [np.load(p) for p in argv[4:]]
        np.save(argv[2], np.concatenate(parts, axis=int(argv[3])))
        return 0
    if cmd == "ref":
        x = np.load(argv[4])
        np.save(argv[2], np.ascontiguousarray(eval(argv[3], {"x": x, "np": np, "tsum": tsum})))
        return 0
    if cmd == "q":
        d = json.load(sys.stdin)
        v = eval(argv[2], {"d": d, "json": json})
        if v is False:
            return 1
        if isinstance(v, (list, dict)):
            print(json.dumps(v))
        elif v is not True:
            print(v)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
