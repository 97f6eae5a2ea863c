#!/usr/bin/python3
"""The doc test: runs every command quoted in README.md and docs/*.md.

  doc_commands.py ROOT COORDINATOR WORKER SHMAPCTL PYTHONPATH

Each fenced block is a scenario run in a fresh directory (with ROOT's
examples/ beside it) against a local cluster of 2 workers x 4 devices on a
free loopback port:

- `$ cmd` lines (transcripts) and the lines of ```sh blocks are commands;
  the lines after a `$ cmd` up to the next one are its expected output,
  compared with runs of blanks made one, numbers free (ids, ports, times
  differ from run to run) except in the output of the offline commands
  (`check`, `sharding`, `cat`), which must match exactly; a `...` line
  stands for any lines, `...` inside a line for any text.
- shmap-coordinator / shmap-worker commands are started for real, their
  fixed addresses moved to free loopback ports, and the block's later
  commands talk to them; `export` lines set the environment.
- ```python blocks run whole with the package on PYTHONPATH; a fragment that
  uses names from an earlier block is compiled only (listed in FRAGMENTS).
- `.npy` inputs a block does not make are made: a program's `--arg n=f.npy`
  from its parameter's type, other names from INPUTS.
- What cannot run here is listed in NOT_HERE with the reason (a container
  runtime, network namespaces, the test suite itself), each naming where it
  is covered; a command of no known kind fails the test, so a new command
  in the docs is either run or listed.

Prints one line per command and "N passed, N failed, N not run here";
exit 1 on a failure.
"""
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

# Commands (by their first words) that cannot run on this machine, and why.
NOT_HERE = [
    (r"^scripts/(demo|test)\.sh", "the set-up commands: CI runs scripts/test.sh, and it runs this test"),
    (r"^(docker|kubectl|kind)\b", "no container runtime here: deploy_flags checks the files' "
     "command lines and the shmapctl part of `run ... ctl` / `-- shmapctl` is run"),
    (r"^(ip|ctest --test-dir build -R netns|SHMAP_NETNS_KEEP_LOGS=)", "network namespaces: "
     "tests/netns/multihost.sh (ctest netns_multihost) runs these steps"),
    (r"^PKG_CONFIG_PATH=DIR|^\./put_get", "an install into a prefix: tests/install_prefix.sh "
     "(ctest install_prefix) runs exactly these"),
    (r"--target localhost:7070 --tls-ca deploy/tls/", "the TLS port a compose cluster publishes "
     "(no container runtime here): ctest e2e_tls checks a client with the CA alone"),
]
# Blocks that run TLS between the hosts their certificates name: ctest
# e2e_tls starts the same processes with the same flags on loopback.
TLS_HOSTS = re.compile(r"--tls-.*coord\.example\.net|coord\.example\.net.*--tls-")
# Absolute paths the docs use, moved into the block's directory.
PATHS = [("/etc/shmap/", "etc-shmap/"), ("/data/", "data/")]
# Commands run as they are by bash in the block's directory (paths under
# /etc/shmap are moved into it).
SHELL = re.compile(r"^(openssl|printf|scripts/tls_certs\.sh)\b")
# Python blocks that continue an earlier block (they use its names).
FRAGMENTS = ["from shmap import lax, numpy as jnp", "try:\n    ambiguous("]
# Inputs a block uses without making them: name -> (dtype, shape).
INPUTS = {
    "x.npy": ("float32", (64, 128)),
    "a.npy": ("float32", (8, 16)),
    "b.npy": ("float32", (16, 32)),
    "local0.npy": ("float32", (32, 128)),
    "local1.npy": ("float32", (32, 128)),
    "part0.npy": ("float32", (64, 64)),
    "part1.npy": ("float32", (64, 64)),
}
# The programs behind the errors the docs quote (`prog.shmap:L:C: ...`
# blocks): `shmapctl check` must print exactly the quoted sentence.
ERRORS = {
    "output 0 ('z') of type f32[2,32]{V:i,j} varies": """mesh i=4 j=2
shard_map matmul_basic(a: f32[8,16] @ P('i','j'), b: f32[16,32] @ P('j', None)) -> P('i', None):
    z = dot(a, b)
    return z
""",
    "Contracting dimensions are sharded": """mesh X=2 Y=4
jit ambiguous(In: f32[8,64] @ P('X', 'Y'), W: f32[64,32] @ P('Y', None)):
    x = jnp.square(In)
    return jnp.einsum('bd,df->bf', x, W)
""",
}
OFFLINE = ("check", "sharding", "plan-load")
DTYPES = {"f32": "float32", "f64": "float64", "i32": "int32", "i64": "int64", "u8": "uint8",
          "bool": "bool"}


class Ctx:
    pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def blocks(path):
    """Yields (line number, language, lines) of each fenced block."""
    lines = open(path).read().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^\s*```(\w*)", lines[i])
        if not m:
            i += 1
            continue
        start, lang, body = i + 1, m.group(1), []
        i += 1
        while i < len(lines) and not lines[i].lstrip().startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        yield start, lang, body


def join_continuations(lines):
    out, buf = [], ""
    for ln in lines:
        if ln.rstrip().endswith("\\"):
            buf += ln.rstrip()[:-1] + " "
            continue
        out.append(buf + ln)
        buf = ""
    if buf:
        out.append(buf)
    return out


def commands(lang, body):
    """[(command, expected output lines or None)] of a block; [] if it holds none."""
    if any(ln.startswith("$ ") for ln in body):
        out, cur, open_quote = [], None, False
        for ln in join_continuations(body):
            if open_quote:  # a command's quoted argument spans lines
                cur[0] += "\n" + ln
            elif ln.startswith("$ "):
                cur = [ln[2:], []]
                out.append(cur)
            elif cur is not None:
                cur[1].append(ln)
            if cur is not None and (open_quote or ln.startswith("$ ")):
                try:
                    shlex.split(strip_comment(cur[0]))
                    open_quote = False
                except ValueError:
                    open_quote = True
        return [(c, e) for c, e in out]
    if lang == "sh":
        cmds = []
        for ln in join_continuations(body):
            s = ln.strip()
            if s and not s.startswith("#"):
                cmds.append((s, None))
        return cmds
    return []


def strip_comment(cmd):
    """The command without a trailing shell comment (a # after a blank,
    outside quotes)."""
    q = None
    for i, ch in enumerate(cmd):
        if q:
            if ch == q:
                q = None
        elif ch in "'\"":
            q = ch
        elif ch == "#" and (i == 0 or cmd[i - 1].isspace()):
            return cmd[:i].rstrip()
    return cmd


def normalize(line, exact):
    line = re.sub(r"\s+", " ", line.strip())
    return line if exact else re.sub(r"\d+(\.\d+)?", "0", line)


def matches(expected, got, exact):
    """Whether got (lines) matches expected (lines with ... wildcards)."""
    exp = [normalize(e, exact) for e in expected if e.strip()]
    act = [normalize(g, exact) for g in got if g.strip()]

    def pat(e):
        return "^" + ".*".join(re.escape(p) for p in e.split("...")) + "$"

    def go(i, j):
        if i == len(exp):
            return j == len(act)
        if exp[i] == "...":
            return any(go(i + 1, k) for k in range(j, len(act) + 1))
        return j < len(act) and re.match(pat(exp[i]), act[j]) is not None and go(i + 1, j + 1)

    return go(0, 0)


def program_inputs(ctx, argv):
    """Makes the .npy files a `run PROGRAM --arg n=f.npy` names, from the types."""
    prog = next((a for a in argv if a.endswith(".shmap")), None)
    if not prog:
        return
    text = open(os.path.join(ctx.work, prog)).read()
    header = next(ln for ln in text.splitlines() if re.match(r"^(shard_map|jit)\b", ln))
    types = {m.group(1): (m.group(2), m.group(3))
             for m in re.finditer(r"(\w+): (\w+)\[([\d,]*)\]", header)}
    for i, a in enumerate(argv):
        if a == "--arg" and i + 1 < len(argv):
            name, _, val = argv[i + 1].partition("=")
            if val.endswith(".npy") and name in types and not ctx.exists(val):
                dt, shape = types[name]
                dims = tuple(int(d) for d in shape.split(",") if d)
                n = int(np.prod(dims))
                np.save(os.path.join(ctx.work, val),
                        (np.arange(n) % 7).astype(DTYPES[dt]).reshape(dims))


def make_inputs(ctx, argv):
    if "run" in argv:
        program_inputs(ctx, argv)
    for a in argv:
        base = os.path.basename(a)
        if base in INPUTS and not ctx.exists(a) and not argv[0].endswith("get"):
            dt, shape = INPUTS[base]
            path = os.path.join(ctx.work, a)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            np.save(path, np.arange(int(np.prod(shape)), dtype=dt).reshape(shape))


def rewrite_addrs(ctx, toks, server):
    """Moves fixed addresses to loopback ports chosen now (servers) or
    already chosen (clients)."""
    out = []
    if server == "worker":
        port = free_port()
    for i, t in enumerate(toks):
        m = re.match(r"^(--?[\w-]+=)?([\w.-]+):(\d{1,5})$", t)
        if not m:
            out.append(t)
            continue
        pre, host, p = m.group(1) or "", m.group(2), m.group(3)
        opt = pre or (toks[i - 1] if i else "")
        if server == "worker" and opt.startswith(("--listen", "-l", "--advertise", "-a")):
            out.append(f"{pre}127.0.0.1:{port}")
        elif server == "coordinator" and opt.startswith(("--listen", "-l")):
            out.append(f"{pre}127.0.0.1:0")
        elif p in ctx.ports:
            out.append(f"{pre}127.0.0.1:{ctx.ports[p]}")
        else:
            out.append(t)
    return out


def start_server(ctx, prog, toks):
    toks = rewrite_addrs(ctx, toks, prog)
    log = open(os.path.join(ctx.work, f"server{len(ctx.servers)}.log"), "w")
    argv = [ctx.bins[prog]] + toks[1:]
    fixed = None
    if prog == "coordinator":
        fixed = next((re.search(r":(\d+)$", t).group(1) for t in ctx.raw_toks
                      if re.search(r"^[\w.-]+:\d+$", t)), "7070")
        pf = os.path.join(ctx.work, f"server{len(ctx.servers)}.port")
        argv += ["--port-file", pf]
    p = subprocess.Popen(argv, cwd=ctx.work, env=ctx.env, stdout=log, stderr=subprocess.STDOUT,
                         start_new_session=True)
    ctx.servers.append(p)
    if prog == "coordinator":
        deadline = time.time() + 20
        while time.time() < deadline and not (os.path.exists(pf) and open(pf).read().strip()):
            if p.poll() is not None:
                return f"the coordinator exited ({p.returncode}): " + open(log.name).read()[-800:]
            time.sleep(0.05)
        port = open(pf).read().strip()
        ctx.ports[fixed] = port
        ctx.block_target = f"127.0.0.1:{port}"
        ctx.want_workers = int(next((toks[i + 1] for i, t in enumerate(toks)
                                     if t in ("--local-workers", "-w")), "0"))
    else:
        ctx.want_workers += 1
    # Ready when the coordinator sees every worker started so far alive.
    env = dict(ctx.env)
    if "--token" in toks:
        env["SHMAP_TOKEN"] = toks[toks.index("--token") + 1]
    deadline = time.time() + 20
    while time.time() < deadline:
        r = subprocess.run([ctx.bins["shmapctl"], "--target", ctx.block_target, "devices"],
                           env=env, capture_output=True, text=True, timeout=30)
        if r.returncode == 0 and r.stdout.count(" alive ") == ctx.want_workers:
            return None
        if p.poll() is not None:
            return f"{prog} exited ({p.returncode}): " + open(log.name).read()[-800:]
        time.sleep(0.1)
    return f"{ctx.want_workers} workers were not alive after 20 s"


def stop_servers(ctx):
    for p in reversed(ctx.servers):
        try:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(timeout=10)
        except ProcessLookupError:
            p.wait()
        except Exception:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    ctx.servers = []


def run_one(ctx, cmd, expected):
    """Runs one command of a block; returns None (passed), a reason it is
    not run here ("skip: ..."), or what failed."""
    cmd = strip_comment(cmd)
    if not cmd or cmd == "...":
        return None
    for pat, why in NOT_HERE:
        if re.search(pat, cmd):
            # the shmapctl part of a container command still runs
            m = re.search(r"(?:run --rm ctl|-- shmapctl) (.*)$", cmd)
            if m:
                # the container network's name for the coordinator: here, the cluster
                rest = re.sub(r"--target \S+", "", m.group(1)).strip()
                return run_one(ctx, "shmapctl " + rest, expected)
            return "skip: " + why
    background = cmd.endswith("&")
    cmd = cmd.rstrip("&").strip()
    try:
        toks = shlex.split(cmd)
    except ValueError as e:
        return f"cannot parse: {e}"
    ctx.raw_toks = toks
    m = re.match(r"^export (\w+)=(.*)$", cmd)
    if m:
        val = subprocess.run(["bash", "-c", f"printf %s {m.group(2)}"], env=ctx.env,
                             cwd=ctx.root, capture_output=True, text=True).stdout
        if m.group(1) == "SHMAP_TARGET":
            val = " ".join(rewrite_addrs(ctx, [val], None))
        ctx.env[m.group(1)] = val
        return None
    extra = {}  # VAR=value before the command: its environment
    while toks and re.match(r"^[A-Z_][A-Z0-9_]*=", toks[0]):
        k, _, v = toks.pop(0).partition("=")
        extra[k] = v
    if not toks:
        return "an assignment with no command"
    prog = os.path.basename(toks[0])
    if prog in ("shmap-coordinator", "shmap-worker"):
        saved = ctx.env
        ctx.env = dict(ctx.env, **extra)
        try:
            return start_server(ctx, prog.split("-")[1], toks)
        finally:
            ctx.env = saved
    if prog == "shmapctl":
        argv = rewrite_addrs(ctx, toks[1:], None)
        for old, new in PATHS:
            argv = [a.replace(old, new) for a in argv]
        # a job id quoted in the doc is the one the block's job got
        if len(argv) >= 3 and argv[0] == "job" and argv[2] in ctx.job_ids:
            argv[2] = ctx.job_ids[argv[2]]
        make_inputs(ctx, argv)
        argv = [ctx.bins["shmapctl"]] + argv
        exact = argv[1] in OFFLINE
    elif prog in ("python3", "/usr/bin/python3"):
        argv = ["/usr/bin/python3"] + toks[1:]
        for old, new in PATHS:
            argv = [a.replace(old, new) for a in argv]
        exact = False
    elif prog in ("cat", "mkdir"):
        argv, exact = toks, True
    elif SHELL.match(cmd):
        line = cmd.replace("/etc/shmap/", "etc-shmap/")
        if line.startswith("scripts/"):
            line = os.path.join(ctx.root, line)
        argv, exact = ["bash", "-c", line], False
    else:
        return f"a command of no known kind: {cmd!r} (run it here or list it in NOT_HERE)"
    env = dict(ctx.env, **extra)
    if ctx.block_target and "--target" not in argv:
        env["SHMAP_TARGET"] = ctx.block_target
    if background:
        ctx.background.append((cmd, subprocess.Popen(argv, cwd=ctx.work, env=env,
                                                     stdout=subprocess.PIPE,
                                                     stderr=subprocess.STDOUT, text=True)))
        return None
    # put-local parts of one array arrive together: consecutive ones run at once
    if prog == "shmapctl" and argv[1] == "put-local" and ctx.pending_local is not None:
        ctx.pending_local.append((cmd, subprocess.Popen(argv, cwd=ctx.work, env=env,
                                                        stdout=subprocess.PIPE,
                                                        stderr=subprocess.STDOUT, text=True)))
        return None
    r = subprocess.run(argv, cwd=ctx.work, env=env, capture_output=True, text=True, timeout=300)
    out = (r.stdout + r.stderr).splitlines()
    if r.returncode != 0:
        return f"exit {r.returncode}: " + " | ".join(out[-5:])
    m = re.search(r"^job (\d+) submitted", r.stdout, re.M)
    if m and expected:
        doc = re.search(r"^job (\d+) submitted", "\n".join(expected), re.M)
        if doc:
            ctx.job_ids[doc.group(1)] = m.group(1)
    if expected:
        for old, new in PATHS:
            expected = [e.replace(old, new) for e in expected]
    if expected and any(e.strip() for e in expected) and not matches(expected, out, exact):
        return ("output differs\n      expected: " + "\n                ".join(expected) +
                "\n      got:      " + "\n                ".join(out))
    return None


def check_error(ctx, quoted):
    """None if `shmapctl check` of the program behind a quoted error prints it."""
    prog = next((p for k, p in ERRORS.items() if k in quoted), None)
    if prog is None:
        return "no program for this error in ERRORS"
    with open(os.path.join(ctx.work, "prog.shmap"), "w") as f:
        f.write(prog)
    r = subprocess.run([ctx.bins["shmapctl"], "check", "prog.shmap"], cwd=ctx.work, env=ctx.env,
                       capture_output=True, text=True, timeout=60)
    got = r.stderr.strip().removeprefix("shmapctl: ")
    if r.returncode == 0 or got != quoted.strip():
        return f"shmapctl check says (exit {r.returncode}): {got}"
    return None


def wait_all(procs):
    fails = []
    for cmd, p in procs:
        try:
            out, _ = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        if p.returncode != 0:
            fails.append(f"{cmd}: exit {p.returncode}: {out.strip()[-300:]}")
    return fails


def main(argv):
    if len(argv) != 6:
        print(__doc__, file=sys.stderr)
        return 2
    root, coord, worker, ctl = (os.path.abspath(a) for a in argv[1:5])
    pypath = os.pathsep.join(os.path.abspath(p) for p in argv[5].split(os.pathsep))
    base_env = dict(os.environ)
    base_env.pop("SHMAP_TARGET", None)
    base_env.pop("SHMAP_TOKEN", None)
    base_env["PYTHONPATH"] = pypath
    base_env["SHMAP_COORDINATOR_BIN"] = coord
    base_env["PATH"] = os.pathsep.join(os.path.dirname(b) for b in (coord, worker, ctl)) + \
        os.pathsep + base_env["PATH"]
    bins = {"coordinator": coord, "worker": worker, "shmapctl": ctl}
    docs = [os.path.join(root, "README.md")] + sorted(
        os.path.join(root, "docs", f) for f in os.listdir(os.path.join(root, "docs"))
        if f.endswith(".md"))
    top = tempfile.mkdtemp(prefix="shmap-doc-")
    # the shared cluster most blocks talk to
    shared = Ctx()
    shared.work, shared.env, shared.bins, shared.servers, shared.ports = top, base_env, bins, [], {}
    shared.raw_toks, shared.block_target = ["127.0.0.1:0"], None
    err = start_server(shared, "coordinator",
                       ["shmap-coordinator", "--listen", "127.0.0.1:0", "--local-workers", "2",
                        "--devices-per-worker", "4"])
    if err:
        print(f"FAIL - the shared cluster: {err}")
        return 1
    target = shared.block_target
    passed = failed = skipped = 0
    try:
        for path in docs:
            rel = os.path.relpath(path, root)
            for n, (line, lang, body) in enumerate(blocks(path)):
                where = f"{rel}:{line}"
                ctx = Ctx()
                ctx.work = os.path.join(top, f"{rel.replace('/', '_')}-{line}")
                os.makedirs(ctx.work)
                os.symlink(os.path.join(root, "examples"), os.path.join(ctx.work, "examples"))
                ctx.exists = lambda p, c=ctx: os.path.exists(os.path.join(c.work, p))
                ctx.env = dict(base_env)
                ctx.env["SHMAP_TARGET"] = target
                ctx.root = root
                ctx.bins, ctx.servers, ctx.ports, ctx.job_ids = bins, [], {}, {}
                ctx.block_target, ctx.want_workers, ctx.background = None, 0, []
                ctx.pending_local = None
                if lang == "python":
                    src = "\n".join(body)
                    try:
                        compile(src, where, "exec")
                    except SyntaxError as e:
                        print(f"FAIL - {where}: python: {e}")
                        failed += 1
                        continue
                    if any(src.startswith(f) for f in FRAGMENTS):
                        print(f"ok   - {where}: python fragment (compiled; it continues a block above)")
                        passed += 1
                        continue
                    if "/data/ckpt/grid" in src:  # the checkpoint the README's example makes
                        for cmd in ("shmapctl put x.npy --mesh x=4,y=2 --spec \"P('x', 'y')\" "
                                    "--name grid-" + str(line),
                                    f"shmapctl save grid-{line} /data/ckpt/grid"):
                            res = run_one(ctx, cmd, None)
                            if res:
                                print(f"FAIL - {where}: making its checkpoint: {res}")
                                failed += 1
                    for old, new in PATHS:
                        src = src.replace(old, new)
                    r = subprocess.run(["/usr/bin/python3", "-c", src], cwd=ctx.work, env=ctx.env,
                                       capture_output=True, text=True, timeout=300)
                    if r.returncode != 0:
                        print(f"FAIL - {where}: python: {r.stderr.strip()[-800:]}")
                        failed += 1
                    else:
                        print(f"ok   - {where}: python block ran")
                        passed += 1
                    continue
                if body and body[0].startswith("prog.shmap:"):
                    res = check_error(ctx, body[0])
                    print(f"{'ok  ' if res is None else 'FAIL'} - {where}: the quoted error"
                          + ("" if res is None else f": {res}"))
                    passed += res is None
                    failed += res is not None
                    continue
                cmds = commands(lang, body)
                if any(TLS_HOSTS.search(c) for c, _ in cmds):
                    print(f"--   - {where}: {len(cmds)} commands not run here: TLS between the "
                          "hosts the certificates name (coord.example.net, 10.0.0.x); ctest "
                          "e2e_tls runs these processes with these flags on loopback, and "
                          "deploy_flags checks the flags")
                    skipped += len(cmds)
                    continue
                if any(re.match(r"^ip netns add", c) for c, _ in cmds):
                    print(f"--   - {where}: {len(cmds)} commands not run here: network namespaces "
                          "need root; tests/netns/multihost.sh (ctest netns_multihost) runs these steps")
                    skipped += len(cmds)
                    continue
                for i, (cmd, expected) in enumerate(cmds):
                    nxt = cmds[i + 1][0] if i + 1 < len(cmds) else ""
                    is_local = "put-local" in cmd and not cmd.rstrip().endswith("&")
                    if is_local and ctx.pending_local is None and "put-local" in nxt:
                        ctx.pending_local = []
                    res = run_one(ctx, cmd, expected)
                    if ctx.pending_local is not None and "put-local" not in nxt:
                        errs = wait_all(ctx.pending_local)
                        ctx.pending_local = None
                        if errs and res is None:
                            res = "; ".join(errs)
                    short = strip_comment(cmd)[:110]
                    if res is None:
                        if short and short != "...":
                            print(f"ok   - {where}: {short}")
                            passed += 1
                    elif res.startswith("skip: "):
                        print(f"--   - {where}: {short}: not run here: {res[6:]}")
                        skipped += 1
                    else:
                        print(f"FAIL - {where}: {short}: {res}")
                        failed += 1
                for err in wait_all(ctx.background):
                    print(f"FAIL - {where}: {err}")
                    failed += 1
                stop_servers(ctx)
    finally:
        stop_servers(shared)
    print(f"{passed} passed, {failed} failed, {skipped} not run here")
    if failed == 0:
        shutil.rmtree(top, ignore_errors=True)
    else:
        print(f"(the blocks' directories and server logs are in {top})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
