"""pytest hooks of the Python tests: when a test fails, the last lines of
the logs of the clusters the tests started are printed after the summary
(the clusters and their temporary directories are gone by then); a test
still running after WATCH_S seconds gets the thread stacks of every shmap
process under this one dumped (gdb, when installed), printed the same way,
so that a hang shows where it waits."""
import os
import shutil
import subprocess
import sys
import tempfile
import threading

import pytest

import shmap

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests"))
import cluster  # noqa: E402

LOG_TAIL_LINES = 300
WATCH_S = float(os.environ.get("SM_TEST_WATCH_S", "40"))


def pytest_configure(config):
    config.shmap_cluster_logs = []
    config.shmap_stack_dumps = []


@pytest.fixture(scope="session")
def cluster_log(request, tmp_path_factory):
    """new(tag): a path for a cluster's log, printed if a test fails;
    keep(path): print an existing log if a test fails."""
    class Logs:
        def new(self, tag):
            return self.keep(tmp_path_factory.mktemp(tag) / "coordinator.log")

        def keep(self, path):
            request.config.shmap_cluster_logs.append(os.fspath(path))
            return path
    return Logs()


@pytest.fixture(scope="module")
def secure(cluster_log):
    """In secure mode the target of a secure cluster and its files; None
    outside it."""
    if not cluster.SECURE:
        yield None
        return
    work = tempfile.mkdtemp(prefix="shmap-py-secure-")
    p, target, log = cluster.start_cluster(work, 2, 4)
    cluster_log.keep(log)
    yield target, cluster.secure_files()
    cluster.stop_cluster(p)


@pytest.fixture(scope="module")
def c(secure, cluster_log):
    """A client of a cluster of 2 workers x 4 devices, one per test module."""
    if secure:
        target, f = secure
        client = shmap.connect(target, token=cluster.TENANT_TOKEN, tls_ca=f["ca"])
        yield client
        client.close()
        return
    with shmap.local_cluster(workers=2, devices_per_worker=4,
                             log=cluster_log.new("cluster")) as client:
        yield client


@pytest.fixture(scope="module")
def meshes(c):
    """meshes(shape, names, types=None): a mesh of the cluster's default
    order, its axes Explicit unless types says (jtu.with_explicit_mesh's,
    jtu.create_mesh's with axis_types); made once per module (the ports of
    JAX's tests; a module may define its own)."""
    made = {}

    def get(shape, names, types=None):
        if isinstance(names, str):
            names = (names,)
        types = tuple(types) if types else (shmap.Explicit,) * len(shape)
        key = (tuple(shape), tuple(names), types)
        if key not in made:
            made[key] = c.make_mesh(tuple(shape), tuple(names), axis_types=types)
        return made[key]
    return get


@pytest.fixture(scope="module")
def mesh(c):
    """The mesh most modules use: (4, 2) over axes i and j (a module may
    define its own)."""
    return c.make_mesh((4, 2), ("i", "j"))


def _shmap_descendants():
    """(pid, name) of the shmap processes descending from this one."""
    parent, name = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
        except OSError:
            continue
        comm = st[st.index("(") + 1:st.rindex(")")]
        parent[int(d)] = int(st[st.rindex(")") + 2:].split()[1])
        name[int(d)] = comm
    out, me = [], os.getpid()
    for pid in parent:
        p = parent[pid]
        while p and p != me and p in parent:
            p = parent[p]
        if p == me and name[pid].startswith("shmap-"):
            out.append((pid, name[pid]))
    return sorted(out)


def _dump_stacks(config, nodeid, path):
    gdb = shutil.which("gdb")
    with open(path, "w") as f:
        f.write(f"{nodeid} still running after {WATCH_S} s: the stacks of its shmap processes\n")
        for pid, comm in _shmap_descendants():
            f.write(f"\n=== {comm} (pid {pid})\n")
            f.flush()
            if gdb:
                subprocess.run([gdb, "-p", str(pid), "-batch", "-ex", "thread apply all bt"],
                               stdout=f, stderr=subprocess.STDOUT, timeout=60, check=False)
            else:  # at least where each thread waits in the kernel
                for tid in sorted(os.listdir(f"/proc/{pid}/task"), key=int):
                    try:
                        t = f"/proc/{pid}/task/{tid}"
                        f.write(f"thread {tid} {open(t + '/comm').read().strip()}: "
                                f"{open(t + '/wchan').read().strip()}\n")
                    except OSError:
                        pass
    config.shmap_stack_dumps.append(path)


@pytest.fixture(autouse=True)
def _stack_watchdog(request, tmp_path_factory):
    path = os.fspath(tmp_path_factory.getbasetemp() / f"stacks-{request.node.name}.txt")
    t = threading.Timer(WATCH_S, _dump_stacks, (request.config, request.node.nodeid, path))
    t.daemon = True
    t.start()
    yield
    t.cancel()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    stats = terminalreporter.stats
    if not stats.get("failed") and not stats.get("error"):
        return
    for path in getattr(config, "shmap_cluster_logs", []):
        try:
            with open(path, errors="replace") as f:
                lines = f.readlines()
        except OSError as e:
            terminalreporter.write_line(f"cluster log {path}: {e}")
            continue
        terminalreporter.section(f"cluster log {path}: last {LOG_TAIL_LINES} of {len(lines)} "
                                 "lines")
        terminalreporter.write("".join(lines[-LOG_TAIL_LINES:]))
    for path in getattr(config, "shmap_stack_dumps", []):
        terminalreporter.section(f"stacks {path}")
        with open(path, errors="replace") as f:
            terminalreporter.write(f.read())
