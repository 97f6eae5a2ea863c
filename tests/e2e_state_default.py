#!/usr/bin/python3
"""e2e_state_default: the embedded cluster's durable default. A coordinator
with --local-workers on a fixed port keeps its state in ./shmap-state-PORT
under its working directory: killed (-9) and started again the same way,
it has its arrays back, bit for bit. --state-dir none keeps nothing, and a
coordinator on port 0 (a port picked at start) has no default.

Environment: SHMAPCTL, SHMAP_COORDINATOR_BIN (set by ctest)."""
import os
import shutil
import signal
import socket
import sys
import tempfile
import time

import numpy as np

from cluster import CTL, run, start_cluster, stop_all, stop_cluster


def fail(msg):
    print(f"e2e_state_default: {msg}")
    print("0 passed, 1 failed")
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill9(p):
    """SIGKILL of the coordinator alone: its local workers end with it."""
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    time.sleep(0.5)
    try:
        os.killpg(p.pid, signal.SIGKILL)  # stragglers of its group, if any
    except ProcessLookupError:
        pass


def main():
    work = tempfile.mkdtemp(prefix="shmap-statedef-")
    cwd = os.path.join(work, "cwd")
    os.makedirs(cwd)
    procs = []
    passed = 0
    try:
        port = free_port()
        listen = f"127.0.0.1:{port}"
        p, t, log = start_cluster(work, 2, 2, listen=listen, cwd=cwd, tag="a")
        procs.append(p)
        state = os.path.join(cwd, f"shmap-state-{port}")
        if not os.path.exists(os.path.join(state, "registry.db")):
            fail(f"no {state}/registry.db; the log says:\n" + open(log).read())
        if "state dir ./shmap-state-" not in open(log).read():
            fail("the default state dir is not logged")
        passed += 1
        x = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
        np.save(f"{work}/x.npy", x)
        r = run([CTL, "--target", t, "put", f"{work}/x.npy", "--mesh", "i=4", "--spec",
                 "P('i')", "--name", "kept"])
        if r.returncode:
            fail(f"put: {r.stderr}")
        # the workers' copies are written in the background: let them land
        time.sleep(1.0)
        kill9(p)
        procs.remove(p)
        p, t, log = start_cluster(work, 2, 2, listen=listen, cwd=cwd, tag="b")
        procs.append(p)
        deadline = time.time() + 20
        while time.time() < deadline:
            r = run([CTL, "--target", t, "get", "kept", f"{work}/back.npy"])
            if r.returncode == 0:
                break
            time.sleep(0.2)
        if r.returncode:
            fail(f"after a restart, kept is not back: {r.stderr}\n" + open(log).read())
        if not np.array_equal(np.load(f"{work}/back.npy"), x):
            fail("kept came back with other values")
        passed += 1
        stop_cluster(p)
        procs.remove(p)

        # --state-dir none, and port 0: no state dir at all
        before = set(os.listdir(cwd))
        port2 = free_port()
        p, t, _ = start_cluster(work, 1, 2, ["--state-dir", "none"], listen=f"127.0.0.1:{port2}",
                                cwd=cwd, tag="c")
        procs.append(p)
        stop_cluster(p)
        procs.remove(p)
        p, t, _ = start_cluster(work, 1, 2, cwd=cwd, tag="d")
        procs.append(p)
        stop_cluster(p)
        procs.remove(p)
        if set(os.listdir(cwd)) != before:
            fail(f"a state dir was made: {sorted(set(os.listdir(cwd)) - before)}")
        passed += 1
    finally:
        stop_all(procs)
    shutil.rmtree(work, ignore_errors=True)
    print(f"{passed} passed, 0 failed")


if __name__ == "__main__":
    main()
