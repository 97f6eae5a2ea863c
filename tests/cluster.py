"""What the Python end-to-end tests share: the binaries ctest names, and a
local cluster (a coordinator with its local workers on loopback, a free
port) started and stopped."""
import os
import signal
import subprocess
import sys
import time

CTL = os.environ.get("SHMAPCTL", "build/client/shmapctl")
COORD = os.environ.get("SHMAP_COORDINATOR_BIN", "build/server/shmap-coordinator")


def run(args, **kw):
    """One command, its output captured as text."""
    return subprocess.run(args, capture_output=True, text=True, timeout=120, **kw)


def start_cluster(work, workers, devices, flags=(), env=None, tag="coord", listen="127.0.0.1:0",
                  cwd=None):
    """Starts `shmap-coordinator --local-workers workers` with flags (on
    listen, in the working directory cwd), its log in work/tag.log; returns
    (process, "127.0.0.1:PORT", log path) once all workers are alive, or
    exits with the log."""
    port_file = os.path.join(work, f"{tag}.port")
    log_path = os.path.join(work, f"{tag}.log")
    with open(log_path, "w") as log:
        p = subprocess.Popen([COORD, "--listen", listen, "--port-file", port_file,
                              "--local-workers", str(workers), "--devices-per-worker",
                              str(devices), *flags],
                             stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                             start_new_session=True)
    deadline = time.time() + 30
    while time.time() < deadline:
        if os.path.exists(port_file) and open(port_file).read().strip():
            target = "127.0.0.1:" + open(port_file).read().strip()
            r = run([CTL, "--target", target, "devices"])
            if r.returncode == 0 and r.stdout.count(" alive ") == workers:
                return p, target, log_path
        time.sleep(0.1)
    stop_cluster(p)
    sys.exit(f"{os.path.basename(sys.argv[0])}: the cluster did not start:\n" +
             open(log_path).read())


def stop_cluster(p):
    """Stops the coordinator and its workers (SIGTERM, then SIGKILL)."""
    try:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=5)
    except Exception:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
