#!/usr/bin/python3
"""e2e_limits: the coordinator's limits on what clients send, on a real
cluster: each refused with a sentence naming its flag, and a value out of
range refused at start. (--max-client-streams is exercised by e2e_streams,
which holds raw streams open.)

Environment: SHMAPCTL, SHMAP_COORDINATOR_BIN (set by ctest)."""
import sys
import tempfile

import numpy as np

from cluster import CTL, coord_refuses, run, start_cluster, stop_all


def fail(msg):
    print(f"e2e_limits: {msg}")
    print("0 passed, 1 failed")
    sys.exit(1)


def refused(args, words, what):
    r = run([CTL, *args])
    if r.returncode == 0 or not all(w in r.stderr for w in words):
        fail(f"{what}: exit {r.returncode}, {r.stderr!r}; expected {words}")


def main():
    work = tempfile.mkdtemp(prefix="shmap-limits-")
    procs = []
    passed = 0
    try:
        p, t, _ = start_cluster(work, 1, 2, ["--max-array-mb", "1", "--max-name-length", "8",
                                             "--max-program-ops", "3"], tag="a")
        procs.append(p)
        np.save(f"{work}/big.npy", np.zeros((512, 1024), dtype=np.float32))  # 2 MiB
        np.save(f"{work}/small.npy", np.arange(8, dtype=np.float32))
        refused(["--target", t, "put", f"{work}/big.npy", "--mesh", "i=2", "--spec", "P('i')"],
                ["RESOURCE_EXHAUSTED", "larger than the 1 MiB", "(--max-array-mb)"], "big array")
        refused(["--target", t, "put", f"{work}/small.npy", "--mesh", "i=2", "--spec", "P('i')",
                 "--name", "a_long_name"], ["longer than 8 characters", "(--max-name-length)"],
                "long name")
        r = run([CTL, "--target", t, "put", f"{work}/small.npy", "--mesh", "i=2", "--spec",
                 "P('i')", "--name", "x"])
        if r.returncode:
            fail(f"a small array with a short name was refused: {r.stderr}")
        passed += 1
        prog = f"{work}/ops.shmap"
        open(prog, "w").write("mesh i=2\nshard_map f(x: f32[8] @ P('i')) -> P('i'):\n"
                              "    return ((x + 1) * 2 - 3) / 4\n")
        refused(["--target", t, "run", prog, "--arg", "x=x"],
                ["RESOURCE_EXHAUSTED", "has", "ops, more than the 3", "(--max-program-ops)"],
                "long program")
        passed += 1
        p2, t2, _ = start_cluster(work, 1, 2, ["--max-message-mb", "1"], tag="b")
        procs.append(p2)
        body = "".join(f"    y{k} = x * {k}\n" for k in range(30000))
        open(prog, "w").write("mesh i=2\nshard_map f(x: f32[8] @ P('i')) -> P('i'):\n" + body +
                              "    return y29999\n")
        run([CTL, "--target", t2, "put", f"{work}/small.npy", "--mesh", "i=2", "--spec",
             "P('i')", "--name", "x"])
        refused(["--target", t2, "run", prog, "--arg", "x=x"], ["RESOURCE_EXHAUSTED"],
                "a message over --max-message-mb")
        passed += 1
        for args, words in ((["--max-array-mb", "-1"], "--max-array-mb must be between 0 and"),
                            (["--max-client-streams", "0"],
                             "--max-client-streams must be between 1 and")):
            why = coord_refuses(args, words)
            if why:
                fail(why)
            passed += 1
    finally:
        stop_all(procs, work)
    print(f"{passed} passed, 0 failed")


if __name__ == "__main__":
    main()
