"""What the Python end-to-end tests share: the binaries ctest names, and a
local cluster (a coordinator with its local workers on loopback, a free
port) started and stopped.

Secure mode (SM_TEST_SECURE=1, as tests/harness.h): a cluster whose flags
name no token and no TLS files starts with TLS (certificates made once per
run by scripts/tls_certs.sh, $SM_TLS_CERTS), the cluster's token and a
tokens file of two tenants; shmapctl run through run() (or with
client_env()) carries the first tenant's token and trusts the CA, with no
client certificate, as a client from outside would."""
import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

CTL = os.environ.get("SHMAPCTL", "build/client/shmapctl")
COORD = os.environ.get("SHMAP_COORDINATOR_BIN", "build/server/shmap-coordinator")
SECURE = os.environ.get("SM_TEST_SECURE") == "1"
# The tokens of secure mode (the same as tests/harness.h's).
CLUSTER_TOKEN = "harness-cluster-token-0123456789"
TENANT_TOKEN = "harness-alice-token-0123456789ab"
OTHER_TOKEN = "harness-bob-token-0123456789abcd"
_CRED_VARS = ("SHMAP_TARGET", "SHMAP_TOKEN", "SHMAP_TOKENS", "SHMAP_TLS_CA", "SHMAP_TLS_CERT",
              "SHMAP_TLS_KEY", "SHMAP_TLS_SERVER_NAME")
_files = {}


def secure_files():
    """Secure mode's files, made on first use and removed at exit: a dict of
    ca, cert, key (the cluster's), client_cert, client_key, tokens."""
    if not _files:
        d = tempfile.mkdtemp(prefix="shmap-secure-")
        atexit.register(shutil.rmtree, d, True)
        script = os.environ.get("SM_TLS_CERTS", os.path.join(os.path.dirname(__file__), "..",
                                                             "scripts", "tls_certs.sh"))
        r = subprocess.run(["bash", script, f"{d}/certs", "localhost", "127.0.0.1"],
                           capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"{os.path.basename(sys.argv[0])}: {script} failed (is openssl installed?):"
                     f"\n{r.stdout}{r.stderr}")
        with open(f"{d}/tokens", "w") as f:
            f.write(f"# the harness's tenants (secure mode)\nalice {TENANT_TOKEN}\n"
                    f"bob {OTHER_TOKEN}\n")
        _files.update(ca=f"{d}/certs/ca.pem", cert=f"{d}/certs/cluster.pem",
                      key=f"{d}/certs/cluster.key", client_cert=f"{d}/certs/client.pem",
                      client_key=f"{d}/certs/client.key", tokens=f"{d}/tokens")
    return _files


def secure_flags(flags=(), tenants=True):
    """The flags a process of a secure cluster adds to flags: TLS with the
    cluster's certificate, the cluster's token and (tenants: for a
    coordinator) the tokens file; none outside secure mode or when flags
    set a token or TLS already."""
    if not SECURE or any(f.startswith(("--token", "--tls-")) for f in flags):
        return []
    f = secure_files()
    more = ["--tls-cert", f["cert"], "--tls-key", f["key"], "--tls-ca", f["ca"],
            "--token", CLUSTER_TOKEN]
    return more + (["--tokens", f["tokens"]] if tenants else [])


def client_env(env=None, cluster=False):
    """The environment of a client (env, default os.environ): in secure
    mode without any target or credential of its own, with the first
    tenant's token and the CA, or (cluster) the cluster's token and client
    certificate."""
    env = dict(os.environ if env is None else env)
    if SECURE:
        env = {k: v for k, v in env.items() if k not in _CRED_VARS}
        f = secure_files()
        env.update(SHMAP_TLS_CA=f["ca"], SHMAP_TOKEN=CLUSTER_TOKEN if cluster else TENANT_TOKEN)
        if cluster:
            env.update(SHMAP_TLS_CERT=f["client_cert"], SHMAP_TLS_KEY=f["client_key"])
    return env


def run(args, **kw):
    """One command, its output captured as text; shmapctl as a client of
    the secure cluster in secure mode."""
    if SECURE and args and args[0] == CTL:
        kw["env"] = client_env(kw.get("env"))
    return subprocess.run(args, capture_output=True, text=True, timeout=120, **kw)


def start_cluster(work, workers, devices, flags=(), env=None, tag="coord", listen="127.0.0.1:0",
                  cwd=None):
    """Starts `shmap-coordinator --local-workers workers` with flags (on
    listen, in the working directory cwd), its log in work/tag.log, and
    --exit-with-parent (a test process that dies takes its cluster with
    it, local workers included); returns
    (process, "127.0.0.1:PORT", log path) once all workers are alive, or
    exits with the log."""
    port_file = os.path.join(work, f"{tag}.port")
    log_path = os.path.join(work, f"{tag}.log")
    flags = [*flags, *secure_flags(flags)]
    with open(log_path, "w") as log:
        p = subprocess.Popen([COORD, "--listen", listen, "--port-file", port_file,
                              "--local-workers", str(workers), "--devices-per-worker",
                              str(devices), "--exit-with-parent", *flags],
                             stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                             start_new_session=True)
    deadline = time.time() + 30
    while time.time() < deadline:
        if os.path.exists(port_file) and open(port_file).read().strip():
            target = "127.0.0.1:" + open(port_file).read().strip()
            r = run([CTL, "--target", target, "devices"])
            if r.returncode == 0 and r.stdout.count(" alive ") == workers:
                if SECURE and "--tokens" in flags:
                    _secure_check(p, target, log_path)
                return p, target, log_path
        time.sleep(0.1)
    stop_cluster(p)
    sys.exit(f"{os.path.basename(sys.argv[0])}: the cluster did not start:\n" +
             open(log_path).read())


def _secure_check(p, target, log_path):
    """A secure cluster serves TLS and refuses a wrong token, so a suite in
    secure mode cannot pass with it off. (No plaintext client is tried:
    gRPC would log its failed handshake in its own format, which a suite
    reading --log-format json lines would trip on.)"""
    wrong = dict(client_env(), SHMAP_TOKEN="harness-no-such-token-0123456789")
    r = subprocess.run([CTL, "--target", target, "ls"], capture_output=True, text=True,
                       timeout=60, env=wrong)
    log = open(log_path).read()
    if "UNAUTHENTICATED" not in r.stderr or "over TLS" not in log:
        stop_cluster(p)
        sys.exit(f"{os.path.basename(sys.argv[0])}: secure mode is off: a wrong token got "
                 f"{r.returncode} ({r.stderr.strip()}), and the log says:\n" + log)


def stop_cluster(p):
    """Stops the coordinator and its workers (SIGTERM, then SIGKILL)."""
    try:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=5)
    except Exception:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def stop_all(procs, work=None):
    """Stops every cluster in procs and removes the directory work (None:
    keeps it)."""
    for p in procs:
        stop_cluster(p)
    if work:
        shutil.rmtree(work, ignore_errors=True)


def coord_refuses(args, words):
    """Runs the coordinator with args, which it must refuse at start:
    returns "" when it exits 2 with words in its stderr, else what it did."""
    r = run([COORD, *args])
    if r.returncode == 2 and words in r.stderr:
        return ""
    return f"{' '.join(args)}: exit {r.returncode}: {r.stderr}"
