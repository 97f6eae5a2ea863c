#!/usr/bin/python3
"""e2e_logs: --log-format json on a real cluster (a coordinator and 2 local
workers): every line is one JSON object with time, level, process and msg,
and a job's request id follows it from the coordinator to both workers and
back; gRPC's own lines (a plaintext client's failed TLS handshake) are JSON
too; a bad --log-format is a usage error; text lines show the request id;
SHMAP_SPIN_US reaches the local workers (each says its --spin-us 0, and
the psum runs without polling).

Environment: SHMAPCTL, SHMAP_COORDINATOR_BIN (set by ctest)."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from cluster import (COORD, CTL, coord_refuses, run, secure_files, start_cluster,
                     stop_cluster)


def fail(msg):
    print(f"e2e_logs: {msg}")
    print("0 passed, 1 failed")
    sys.exit(1)


def run_cluster(work, fmt, more_env=None):
    """Starts the cluster with --log-format fmt (and more_env), runs a psum
    job over both workers, stops it; returns the log's lines."""
    env = dict(os.environ, SHMAP_LOG="debug", **(more_env or {}))
    p, target, log_path = start_cluster(work, 2, 2, ["--log-format", fmt], env=env, tag=fmt)
    try:
        prog = os.path.join(work, "psum.shmap")
        open(prog, "w").write("mesh x=4\nshard_map f(a: f32[8,2] @ P('x')) -> P():\n"
                              "    return psum(a, 'x')\n")
        np.save(os.path.join(work, "a.npy"), np.arange(16, dtype=np.float32).reshape(8, 2))
        r = run([CTL, "--target", target, "run", prog, "--arg", f"a={work}/a.npy"])
        if r.returncode:
            fail(f"the job failed: {r.stderr}")
        time.sleep(0.3)
    finally:
        stop_cluster(p)
    return open(log_path).read().splitlines()


def json_lines(lines):
    """The log's lines as objects, each checked: JSON with time (RFC 3339
    UTC), level, process and msg."""
    objs = []
    for ln in lines:
        try:
            o = json.loads(ln)
        except ValueError:
            fail(f"a line is not JSON: {ln!r}")
        for k in ("time", "level", "process", "msg"):
            if k not in o:
                fail(f"a line lacks {k}: {ln}")
        if not re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", o["time"]):
            fail(f"time {o['time']} is not RFC 3339 UTC")
        objs.append(o)
    return objs


def grpc_lines(work):
    """A coordinator serving TLS with --log-format json, dialled by a
    plaintext client: returns its log's lines."""
    f = secure_files()
    port_file, log_path = os.path.join(work, "tls.port"), os.path.join(work, "tls.log")
    with open(log_path, "w") as log:
        p = subprocess.Popen([COORD, "--listen", "127.0.0.1:0", "--port-file", port_file,
                              "--state-dir", "none", "--log-format", "json",
                              "--tls-cert", f["cert"], "--tls-key", f["key"], "--tls-ca", f["ca"]],
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 30
        while not (os.path.exists(port_file) and open(port_file).read().strip()):
            if time.time() > deadline or p.poll() is not None:
                fail("the TLS coordinator did not start:\n" + open(log_path).read())
            time.sleep(0.05)
        target = "127.0.0.1:" + open(port_file).read().strip()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SHMAP_TLS")}
        r = subprocess.run([CTL, "--target", target, "devices"], capture_output=True, text=True,
                           env=env, timeout=60)
        if r.returncode == 0:
            fail("a plaintext client reached a TLS coordinator")
        for _ in range(50):
            if "Handshake" in open(log_path).read():
                break
            time.sleep(0.05)
    finally:
        stop_cluster(p)
    return open(log_path).read().splitlines()


def main():
    work = tempfile.mkdtemp(prefix="shmap-logs-")
    passed = 0
    try:
        lines = run_cluster(work, "json")
        objs = json_lines(lines)
        if len({o["process"] for o in objs}) != 2:
            fail(f"expected the coordinator's and the workers' lines: "
                 f"{sorted({o['process'] for o in objs})}")
        passed += 1
        queued = [o for o in objs if o["process"] == "shmap-coordinator" and
                  re.match(r"job 1 (queued|runs)", o["msg"])]
        if not queued or not queued[0].get("request_id"):
            fail("the coordinator logged the job without a request id:\n" + "\n".join(lines))
        rid = queued[0]["request_id"]
        on_workers = [o for o in objs if o["process"] == "worker" and
                      o.get("request_id") == rid and o["msg"].startswith("job 1:")]
        done = [o for o in objs if o["process"] == "shmap-coordinator" and
                o.get("request_id") == rid and o["msg"].startswith("job 1 done")]
        if len(on_workers) != 2 or not done:
            fail(f"request id {rid} does not follow job 1 to both workers and back:\n" +
                 "\n".join(lines))
        passed += 1
        text = run_cluster(work, "text", {"SHMAP_SPIN_US": "0"})
        if not any(re.search(r" DEBUG \[[0-9a-f]{16}\]: job 1 ", ln) for ln in text):
            fail("text lines do not show the request id:\n" + "\n".join(text))
        passed += 1
        said = [ln for ln in text if "polls for up to 0 us before it sleeps (--spin-us 0)" in ln]
        if len(said) != 2:
            fail("SHMAP_SPIN_US=0 did not reach both local workers:\n" + "\n".join(text))
        passed += 1
        tls = json_lines(grpc_lines(work))
        if not any(o["msg"].startswith("grpc: Handshake failed") and o["level"] == "error"
                   for o in tls):
            fail("gRPC's failed handshake is not logged as a JSON line:\n" +
                 "\n".join(o["msg"] for o in tls))
        passed += 1
        why = coord_refuses(["--log-format", "xml"], "--log-format must be text or json")
        if why:
            fail(why)
        passed += 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{passed} passed, 0 failed")


if __name__ == "__main__":
    main()
