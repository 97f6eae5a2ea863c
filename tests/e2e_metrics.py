#!/usr/bin/python3
"""e2e_metrics: the coordinator's Prometheus endpoint on a real cluster:
scraped after an upload and a job, checked by promtool (Debian's
prometheus package) and read back through a real Prometheus server that
scrapes it on loopback.

Environment: SHMAPCTL, SHMAP_COORDINATOR_BIN (set by ctest)."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np

from cluster import client_env, secure_flags

CTL = os.environ.get("SHMAPCTL", "build/client/shmapctl")
WORKER = os.environ.get("SHMAP_WORKER", "build/worker/shmap-worker")
COORD = os.environ.get("SHMAP_COORDINATOR_BIN", "build/server/shmap-coordinator")
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def fail(msg):
    print(f"e2e_metrics: {msg}")
    print("0 passed, 1 failed")
    sys.exit(1)


def wait_for(pred, what, secs=30):
    deadline = time.time() + secs
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    fail(f"timed out waiting for {what}")


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def sample(text, name, labels=""):
    m = re.search(r"^" + re.escape(name + labels) + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def main():
    promtool = shutil.which("promtool")
    prometheus = shutil.which("prometheus")
    if not promtool or not prometheus:
        fail("promtool and prometheus are needed (Debian package prometheus; scripts/deps.sh)")
    work = tempfile.mkdtemp(prefix="shmap-metrics-")
    log = open(os.path.join(work, "coord.log"), "w+")
    coord = subprocess.Popen([COORD, "--listen", "127.0.0.1:0", "--port-file", f"{work}/port",
                              "--local-workers", "2", "--devices-per-worker", "4",
                              "--metrics-listen", "127.0.0.1:0", *secure_flags()],
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    prom = wproc = None
    passed = 0
    try:
        port = wait_for(lambda: os.path.exists(f"{work}/port") and
                        open(f"{work}/port").read().strip(), "the coordinator")
        target = f"127.0.0.1:{port}"
        mport = wait_for(lambda: (re.findall(r"Prometheus metrics on \S+ \(port (\d+)\)",
                                             open(log.name).read()) or [None])[0],
                         "the metrics endpoint")
        url = f"http://127.0.0.1:{mport}/metrics"
        # one more worker, started by hand, with its own endpoint
        wlog = open(os.path.join(work, "worker.log"), "w+")
        wproc = subprocess.Popen([WORKER, "--coordinator", target, "--devices", "2", "--listen",
                                  "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
                                  *secure_flags(tenants=False)],
                                 stdout=wlog, stderr=subprocess.STDOUT, start_new_session=True)
        wport = wait_for(lambda: (re.findall(r"Prometheus metrics on \S+ \(port (\d+)\)",
                                             open(wlog.name).read()) or [None])[0],
                         "the worker's metrics endpoint")
        wait_for(lambda: subprocess.run([CTL, "--target", target, "devices"], capture_output=True,
                                        text=True, env=client_env()).stdout.count(" alive ")
                 == 3, "the workers")
        np.save(f"{work}/a.npy", np.arange(128, dtype=np.float32).reshape(8, 16))
        np.save(f"{work}/b.npy", np.arange(512, dtype=np.float32).reshape(16, 32))
        r = subprocess.run([CTL, "--target", target, "run",
                            os.path.join(ROOT, "examples", "matmul_basic.shmap"),
                            "--arg", f"a={work}/a.npy", "--arg", f"b={work}/b.npy",
                            "--out-name", "0=c"], capture_output=True, text=True,
                           env=client_env())
        if r.returncode:
            fail(f"the job failed: {r.stderr}")
        status, text = get(url)
        if status != 200:
            fail(f"GET /metrics answered {status}")
        chk = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                             text=True)
        if chk.returncode:
            fail(f"promtool refused the metrics:\n{chk.stdout}{chk.stderr}\n{text}")
        passed += 1
        want = [("shmap_workers", '{state="alive"}', 3), ("shmap_devices", "", 10),
                ("shmap_arrays", '{state="ready"}', 1),
                ("shmap_jobs_submitted_total", "", 1),
                ("shmap_jobs_ended_total", '{state="done"}', 1),
                ("shmap_job_run_seconds_count", "", 1),
                ("shmap_array_bytes", '{state="ready"}', 8 * 32 * 4)]
        for name, labels, value in want:
            got = sample(text, name, labels)
            if got != value:
                fail(f"{name}{labels} is {got}, expected {value}\n{text}")
        passed += 1
        if get(f"http://127.0.0.1:{mport}/nothing")[0] != 404:
            fail("another path than /metrics is not 404")
        passed += 1
        status, wtext = get(f"http://127.0.0.1:{wport}/metrics")
        chk = subprocess.run([promtool, "check", "metrics"], input=wtext, capture_output=True,
                             text=True)
        if status != 200 or chk.returncode:
            fail(f"the worker's metrics ({status}):\n{chk.stdout}{chk.stderr}\n{wtext}")
        if len(re.findall(r"^shmap_worker_device_used_bytes\{", wtext, re.M)) != 2 or \
                not (sample(wtext, "shmap_worker_memory_limit_bytes") or 0) > 0:
            fail(f"the worker's metrics lack its 2 devices or its memory limit:\n{wtext}")
        passed += 1
        # bytes moved: an upload onto the hand-started worker's device 8 (and device
        # 0), a psum across the two workers, a fetch; every RPC method's latency
        dev = re.findall(r"^shmap_worker_device_used_bytes\{device=\"(\d+)\"", wtext, re.M)[0]
        np.save(f"{work}/x.npy", np.arange(4096, dtype=np.float32).reshape(64, 64))
        r = subprocess.run([CTL, "--target", target, "put", f"{work}/x.npy", "--mesh", "i=2",
                            "--devices", f"0,{dev}", "--spec", "P('i')", "--name", "x"],
                           capture_output=True, text=True, env=client_env())
        open(f"{work}/ps.shmap", "w").write(
            f"mesh i=2 devices=[0, {dev}]\n"
            "shard_map f(x: f32[64,64] @ P('i')) -> P():\n    return psum(x, 'i')\n")
        r2 = subprocess.run([CTL, "--target", target, "run", f"{work}/ps.shmap", "--arg", "x=x",
                             "--out-name", "0=s"], capture_output=True, text=True,
                            env=client_env())
        r3 = subprocess.run([CTL, "--target", target, "get", "x", f"{work}/back.npy"],
                            capture_output=True, text=True, env=client_env())
        if r.returncode or r2.returncode or r3.returncode:
            fail(f"put, psum or get failed: {r.stderr}{r2.stderr}{r3.stderr}")
        _, wtext = get(f"http://127.0.0.1:{wport}/metrics")
        block = 32 * 64 * 4
        for labels, least in (('{path="put",direction="in"}', block),
                              ('{path="get",direction="out"}', block)):
            got = sample(wtext, "shmap_worker_transfer_bytes_total", labels) or 0
            if got < least:
                fail(f"shmap_worker_transfer_bytes_total{labels} is {got}, expected >= {least}")
        # the psum crosses the workers through shared memory (the default,
        # SHMAP_TRANSPORT=auto, or shm: read, not sent), or over gRPC when the
        # workers run with SHMAP_TRANSPORT=grpc
        shm = os.environ.get("SHMAP_TRANSPORT", "auto") in ("auto", "shm")
        for d in ("received",) if shm else ("sent", "received"):
            labels = f'{{transport="{"shm" if shm else "grpc"}",direction="{d}"}}'
            got = sample(wtext, "shmap_worker_collective_bytes_total", labels) or 0
            if got < block // 2:
                fail(f"shmap_worker_collective_bytes_total{labels} is {got} after a psum across "
                     f"workers\n{wtext}")
        # a shard of 1 MiB lives in the worker's array file in /dev/shm, but
        # for a worker kept to gRPC (which has none)
        np.save(f"{work}/big.npy", np.zeros((2, 262144), dtype=np.float32))
        r = subprocess.run([CTL, "--target", target, "put", f"{work}/big.npy", "--mesh", "i=2",
                            "--devices", f"0,{dev}", "--spec", "P('i')", "--name", "big"],
                           capture_output=True, text=True, env=client_env())
        if r.returncode:
            fail(f"put of 2 MiB failed: {r.stderr}")
        _, wtext = get(f"http://127.0.0.1:{wport}/metrics")
        got = sample(wtext, "shmap_worker_memory_arena_bytes")
        if got is None or (shm and got < 1 << 20) or (not shm and got != 0):
            fail(f"shmap_worker_memory_arena_bytes is {got} with a 1 MiB shard "
                 f"({'shared memory' if shm else 'gRPC only'})\n{wtext}")
        _, text = get(url)
        for where, body, method in ((url, text, "/shmap.v1.Coordinator/CreateArray"),
                                    (wport, wtext, "/shmap.v1.Worker/PutShard")):
            n = sample(body, "shmap_rpc_duration_seconds_count", f'{{method="{method}"}}') or 0
            if n < 1:
                fail(f"shmap_rpc_duration_seconds_count{{method={method}}} is {n} at {where}")
        for body in (text, wtext):
            chk = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True,
                                 text=True)
            if chk.returncode:
                fail(f"promtool refused the metrics:\n{chk.stdout}{chk.stderr}")
        passed += 1
        # a real Prometheus scrapes the endpoint and answers a query about it
        pport = int(subprocess.run([sys.executable, "-c",
                                    "import socket; s = socket.socket(); "
                                    "s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"],
                                   capture_output=True, text=True).stdout)
        open(f"{work}/prometheus.yml", "w").write(
            "global:\n  scrape_interval: 1s\n"
            "scrape_configs:\n  - job_name: shmap\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{mport}']\n")
        prom = subprocess.Popen([prometheus, f"--config.file={work}/prometheus.yml",
                                 f"--storage.tsdb.path={work}/tsdb",
                                 f"--web.listen-address=127.0.0.1:{pport}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)

        def query():
            try:
                _, body = get(f"http://127.0.0.1:{pport}/api/v1/query?query=shmap_devices")
                res = json.loads(body)["data"]["result"]
                return res and float(res[0]["value"][1])
            except Exception:
                return None
        v = wait_for(query, "Prometheus to scrape shmap", 60)
        if v != 10:
            fail(f"Prometheus reads shmap_devices = {v}, expected 10")
        passed += 1
    finally:
        for p in (prom, wproc, coord):
            if p and p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
        shutil.rmtree(work, ignore_errors=True)
    print(f"{passed} passed, 0 failed")


if __name__ == "__main__":
    main()
