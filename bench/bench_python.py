#!/usr/bin/python3
"""bench_python: a 256 MiB device_put + to_numpy round trip from Python (the
shmap package) against the same round trip through the C library
(bench_roundtrip: sm_client_put + sm_client_get_into), alternated against
one local cluster (2 workers x 4 devices) in the same run; medians. Target:
Python at least 0.9 of the C library's throughput (the extension hands
numpy's buffer to libshmap, and fetches into the caller's array, with no
extra copy).

Both are timed the same way: each turn makes two round trips in a row and
times the second (the anchor's process prints both and the first, with its
connection and staging segment made, is dropped). A round trip that
follows an idle second or another process's transfers is slower on this
kind of virtual machine for either library alike (the first after 1.5 s
took 0.09-0.16 s against 0.06 s back to back, with the guest's page faults
unchanged), so timing only Python's first would measure the pause.

    PYTHONPATH=python:build/python /usr/bin/python3 bench/bench_python.py \\
        [--mib 256] [--runs 5] [--build build]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--build", default=os.path.join(os.path.dirname(__file__), "..", "build"))
    a = ap.parse_args()
    os.environ.setdefault("SHMAP_COORDINATOR_BIN",
                          os.path.join(a.build, "server", "shmap-coordinator"))
    import shmap
    from shmap import P, NamedSharding
    anchor = os.path.join(a.build, "bench", "bench_roundtrip")
    n = a.mib << 18
    x = (np.arange(n, dtype=np.int64) % 1000).astype(np.float32)
    out = np.zeros_like(x)
    py, c_ = [], []
    with shmap.local_cluster(workers=2, devices_per_worker=4) as c:
        s = NamedSharding(c.make_mesh((8,), ("i",)), P("i"))
        for r in range(a.runs + 1):  # run 0 warms up
            for _ in range(2):  # the second is timed, as the anchor's
                out[:] = 0
                t0 = time.perf_counter()
                arr = c.device_put(x, s)
                arr.to_numpy(out=out)
                t = time.perf_counter() - t0
                arr.delete()
                if not np.array_equal(out, x):
                    sys.exit("bench_python: the fetched array differs")
            # two round trips per anchor process: the second, with its
            # connections warm as the Python client's are, is the figure
            r_c = subprocess.run([anchor, "--target", c.target, "--mib", str(a.mib),
                                  "--devices", "8", "--runs", "2"], capture_output=True,
                                 text=True)
            if r_c.returncode:
                sys.exit("bench_python: " + r_c.stderr)
            # the anchor's exit frees its staging segment, whose pages the
            # workers let go within a second (worker/segmap.h
            # SM_SEGMAP_SWEEP_MS): waited out, so that the next Python run
            # does not pay for the anchor's teardown
            time.sleep(1.5)
            if r:
                py.append(t)
                c_.append(float(r_c.stdout.split()[1]))
    mb = (a.mib << 20) * 2 / 1e6  # bytes moved: up and down
    tp, tc = statistics.median(py), statistics.median(c_)
    print(f"bench_python: {a.mib} MiB f32 put + get, mesh (8,) on 2 workers x 4 devices, "
          f"{a.runs} runs, medians\n")
    print(f"{'':34s} {'MB/s':>10s} {'median s':>10s} {'ratio':>8s}")
    print(f"{'C library (sm_client_put+get_into)':34s} {mb / tc:10.0f} {tc:10.3f} {'1.00':>8s}")
    print(f"{'Python (device_put+to_numpy)':34s} {mb / tp:10.0f} {tp:10.3f} {tc / tp:8.2f}")
    print(f"SUMMARY|python|device_put + to_numpy {a.mib} MiB|{mb / tp:.0f}|MB/s|"
          f"C library|{mb / tc:.0f}|{tc / tp:.2f}|>= 0.9x|{'met' if tc / tp >= 0.9 else 'not met'}")


if __name__ == "__main__":
    main()
