#!/usr/bin/python3
"""e2e_jit_numpy: random well-typed global-view (jit) programs run on a real
cluster with `shmapctl run`, each result compared with numpy on the whole
arrays (bit for bit on integers).

Programs are elementwise chains with broadcasting, reductions, dot/einsum
with every placement of shardings, reshape, transpose and reshard, on
meshes (8,), (4,2) and (2,2,2), over clusters of 1 worker x 8 devices and
2 workers x 4 devices. A program the service refuses (as JAX refuses it:
an ambiguous contraction, a mesh axis named twice) is counted, and must be
refused with JAX's sentence by `shmapctl check` as well.

Environment: SHMAPCTL, SHMAP_COORDINATOR_BIN (set by ctest)."""
import json
import os
import random
import re
import shutil
import sys
import tempfile

import numpy as np

from cluster import CTL, run, start_cluster, stop_cluster

PROGRAMS_PER_CLUSTER = int(os.environ.get("SM_JIT_PROGRAMS", "60"))
MESHES = [(("a", 8),), (("a", 4), ("b", 2)), (("a", 2), ("b", 2), ("c", 2))]
# meshes smaller than the cluster, in the default order (no devices=[...]):
# whole workers first, then the first devices of the next, as jax.make_mesh
SMALL_MESHES = [(("a", 2),), (("a", 3), ("b", 2)), (("a", 1), ("b", 4))]

# (body, numpy reference): x and y are f32/i32 [8, 8]; {o} is a spec
TEMPLATES = [
    ("    t = x + y\n    u = jnp.maximum(t, 0) * 3\n    return u\n",
     lambda x, y: np.maximum(x + y, 0) * 3),
    ("    return jnp.sum(x * y, axis=0)\n", lambda x, y: (x * y).sum(axis=0, dtype=x.dtype)),
    ("    return x @ y.T\n", lambda x, y: x @ y.T),
    ("    return einsum('ij,kj->ik', x, y, out_sharding={o})\n", lambda x, y: x @ y.T),
    ("    return jnp.max(x - y, axis=1, keepdims=True)\n",
     lambda x, y: (x - y).max(axis=1, keepdims=True)),
    ("    return (x + y).reshape(4, 2, 8)\n", lambda x, y: (x + y).reshape(4, 2, 8)),
    ("    t = reshard(x, {o}) + y\n    return t.T\n", lambda x, y: (x + y).T),
    ("    return jnp.sum(x, axis=1) + jnp.sum(y, axis=1)\n",
     lambda x, y: x.sum(axis=1, dtype=x.dtype) + y.sum(axis=1, dtype=x.dtype)),
    ("    return jnp.where(x > y, x, y)\n", lambda x, y: np.where(x > y, x, y)),
    ("    t = x[2:6, :] * y[0:4, :]\n    return jnp.min(t, axis=0)\n",
     lambda x, y: (x[2:6, :] * y[0:4, :]).min(axis=0)),
    ("    return jnp.concatenate((x, y), axis=0)\n", lambda x, y: np.concatenate((x, y), axis=0)),
    ("    return jnp.dot(x, y, out_sharding={o})\n", lambda x, y: x @ y),
    ("    t = x[::2, 1::2] + y[1::2, ::2]\n    return t[None, ::2, 1:3, None]\n",
     lambda x, y: (x[::2, 1::2] + y[1::2, ::2])[None, ::2, 1:3, None]),
    ("    return x[::-1, 6:1:-1] - jax.lax.rev(y, (1,))[:, 3:8]\n",
     lambda x, y: x[::-1, 6:1:-1] - np.flip(y, 1)[:, 3:8]),
    ("    return jnp.cumsum(x, axis=1) - jnp.prod(y, axis=0)\n",
     lambda x, y: x.cumsum(1, dtype=x.dtype) - y.prod(0, dtype=y.dtype)),
    ("    m = jnp.logical_and(x > 0, y < 2) | jnp.any(x > y, axis=0)\n"
     "    return jnp.where(m, x, ~(y > 1) * y) + jnp.argmax(x, axis=0)\n",
     lambda x, y: np.where(((x > 0) & (y < 2)) | (x > y).any(0), x, ~(y > 1) * y) + x.argmax(0)),
]


# JAX's test_matmul_unreduced: the jit function returns the shard_map's
# unreduced result (as written), or reshards it first
MATMUL_UNREDUCED = (
    "mesh x=2 y=2\n"
    "shard_map f(a: f32[2,4] @ P('x', 'y'), b: f32[4,2] @ P('y', None)) -> "
    "P('x', None, unreduced={'y'}):\n"
    "    c = jnp.einsum('ab,bc->ac', a, b)\n"
    "    c = jax.lax.pcast(c, 'y', to='unreduced')\n"
    "    return c\n"
    "jit g(a: f32[2,4] @ P('x', 'y'), b: f32[4,2] @ P('y', None)):\n"
    "    out = f(a, b)\n")

# JAX's shard_map tests with unreduced values, forward (tests/shard_map_test.py):
# (name, program, inputs as shapes of arange, numpy reference)
UNREDUCED = [
    ("test_matmul_unreduced",
     MATMUL_UNREDUCED + "    return jax.sharding.reshard(out, P('x', None))\n",
     ((2, 4), (4, 2)), lambda a, b: a @ b),
    ("test_unreduced_psum_fwd",
     "mesh x=2\n"
     "shard_map ar(x: f32[2,6] @ P(unreduced={'x'})) -> P():\n"
     "    return jax.lax.psum(x, 'x')\n"
     "jit f(x: f32[2,4] @ P(None, 'x'), y: f32[4,6] @ P('x', None)):\n"
     "    z = jnp.einsum('ab,bc->ac', x, y, out_sharding=P(unreduced={'x'}))\n"
     "    return ar(z).sum()\n",
     ((2, 4), (4, 6)), lambda x, y: (x @ y).sum()),
    ("test_unreduced_psum_scatter_fwd",
     "mesh x=2\n"
     "shard_map rs(a: f32[4,6] @ P(unreduced={'x'})) -> P('x', None):\n"
     "    return jax.lax.psum_scatter(a, axis_name='x', tiled=True)\n"
     "jit f(x: f32[4,2] @ P(None, 'x'), y: f32[2,6] @ P('x', None)):\n"
     "    z = jnp.einsum('ab,bc->ac', x, y, out_sharding=P(unreduced={'x'}))\n"
     "    return rs(z).sum()\n",
     ((4, 2), (2, 6)), lambda x, y: (x @ y).sum()),
    ("reshard of unreduced sums",
     "mesh X=2 Y=2\n"
     "jit f(x: f32[8,16] @ P(None, ('X', 'Y')), y: f32[16,4] @ P(('X', 'Y'), None)):\n"
     "    z = jnp.einsum('ab,bc->ac', x, y, out_sharding=P(unreduced={'X', 'Y'}))\n"
     "    w = (z + z).T\n"
     "    return reshard(w, P('Y', 'X'))\n",
     ((8, 16), (16, 4)), lambda x, y: (2 * (x @ y)).T),
]


def unreduced_array(work, target):
    """JAX's test_matmul_unreduced as written: the jit function returns the
    shard_map's unreduced result as an array; each device's shard is its
    partial sum (JAX's expected_shards), a whole read is refused, and
    reshard sums it, on the same mesh and onto another one."""
    text = MATMUL_UNREDUCED + "    return out\n"
    prog = os.path.join(work, "ua.shmap")
    open(prog, "w").write(text)
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.arange(8, dtype=np.float32).reshape(4, 2)
    np.save(os.path.join(work, "ua.npy"), a)
    np.save(os.path.join(work, "ub.npy"), b)

    def ok(r, what):
        if r.returncode:
            sys.exit(f"e2e_jit_numpy: unreduced array: {what} failed: {r.stderr}")
        return r

    ok(run([CTL, "--target", target, "run", prog, "--arg", f"a={work}/ua.npy",
            "--arg", f"b={work}/ub.npy", "--out-name", "0=ured"]), "run")
    d = json.loads(ok(run([CTL, "--target", target, "describe", "ured", "--json"]),
                      "describe").stdout)
    if d.get("type") != "f32[2@x,2]{U:y}":
        sys.exit(f"e2e_jit_numpy: unreduced array: type {d.get('type')}")
    expected_shards = [[[2., 3.]], [[26., 31.]], [[10., 19.]], [[66., 79.]]]
    for dev, want in enumerate(expected_shards):
        out = os.path.join(work, f"us{dev}.npy")
        ok(run([CTL, "--target", target, "get-shard", "ured", "--device", str(dev), out]),
           "get-shard")
        if not np.array_equal(np.load(out), np.array(want, dtype=np.float32)):
            sys.exit(f"e2e_jit_numpy: unreduced array: device {dev} holds {np.load(out)}, "
                     f"JAX's test expects {want}")
    g = run([CTL, "--target", target, "get", "ured", os.path.join(work, "u.npy")])
    if g.returncode == 0 or "is unreduced" not in g.stderr:
        sys.exit(f"e2e_jit_numpy: unreduced array: a whole read was not refused: {g.stderr}")
    for name, mesh, spec in (("ur1", "x=2,y=2", "P('x', None)"), ("ur2", "z=4", "P()")):
        ok(run([CTL, "--target", target, "reshard", "ured", "--mesh", mesh, "--spec", spec,
                "--name", name]), "reshard")
        out = os.path.join(work, f"{name}.npy")
        ok(run([CTL, "--target", target, "get", name, out]), "get")
        if not np.array_equal(np.load(out), a @ b):
            sys.exit(f"e2e_jit_numpy: unreduced array: reshard to {mesh} {spec} gave "
                     f"{np.load(out)}")
    # the unreduced array as an argument: a shard_map taking it unreduced sums it
    text2 = ("mesh x=2 y=2\n"
             "shard_map s(c: f32[2,2] @ P('x', None, unreduced={'y'})) -> P('x', None):\n"
             "    return jax.lax.psum(c, 'y')\n")
    prog2 = os.path.join(work, "ua2.shmap")
    open(prog2, "w").write(text2)
    ok(run([CTL, "--target", target, "run", prog2, "--arg", "c=ured", "--out-name", "0=ur3"]),
       "run with an unreduced argument")
    out = os.path.join(work, "ur3.npy")
    ok(run([CTL, "--target", target, "get", "ur3", out]), "get")
    if not np.array_equal(np.load(out), a @ b):
        sys.exit(f"e2e_jit_numpy: unreduced argument: psum gave {np.load(out)}")
    # refused: an unreduced argument where the parameter wants another sharding,
    # and an upload with an unreduced sharding
    open(prog2, "w").write(text2.replace(", unreduced={'y'}", ""))
    r = run([CTL, "--target", target, "run", prog2, "--arg", "c=ured"])
    if r.returncode == 0 or "is unreduced" not in r.stderr or "cannot be resharded" not in r.stderr:
        sys.exit(f"e2e_jit_numpy: unreduced argument resharded: {r.stderr}")
    r = run([CTL, "--target", target, "put", f"{work}/ua.npy", "--mesh", "x=2,y=2", "--spec",
             "P('x', unreduced={'y'})"])
    if r.returncode == 0 or "only a program's results hold partial sums" not in r.stderr:
        sys.exit(f"e2e_jit_numpy: unreduced upload not refused: {r.stderr}")
    run([CTL, "--target", target, "rm", "ured", "ur1", "ur2", "ur3"])
    return 1


def unreduced_programs(work, target):
    """Runs UNREDUCED on the cluster; each result must equal numpy exactly
    (small integers in f32). Returns how many ran."""
    ran = 0
    for k, (name, text, shapes, ref) in enumerate(UNREDUCED):
        prog = os.path.join(work, f"u{k}.shmap")
        open(prog, "w").write(text)
        args, arrays = [], []
        jit_line = [ln for ln in text.splitlines() if ln.startswith("jit ")][0]
        pnames = re.findall(r"(\w+): \w+\[", jit_line)
        for i, (pname, shape) in enumerate(zip(pnames, shapes)):
            a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
            path = os.path.join(work, f"u{k}_{i}.npy")
            np.save(path, a)
            arrays.append(a)
            args += ["--arg", f"{pname}={path}"]
        r = run([CTL, "--target", target, "run", prog, *args, "--out-name", f"0=u{k}"])
        out = os.path.join(work, "u.npy")
        g = run([CTL, "--target", target, "get", f"u{k}", out])
        if r.returncode or g.returncode:
            sys.exit(f"e2e_jit_numpy: {name} failed:\n{text}\n{r.stderr}{g.stderr}")
        got, want = np.load(out), ref(*arrays).astype(np.float32)
        if got.shape != want.shape or not np.array_equal(got, want):
            sys.exit(f"e2e_jit_numpy: {name} differs from numpy:\n{text}\ngot\n{got}\n"
                     f"want\n{want}")
        run([CTL, "--target", target, "rm", f"u{k}"])
        ran += 1
    return ran


def spec(rng, axes, rank):
    used, out = set(), []
    for _ in range(rank):
        pick = rng.randrange(len(axes) + 2) - 2
        if pick >= 0 and axes[pick] not in used:
            used.add(axes[pick])
            out.append(repr(axes[pick]))
        else:
            out.append("None")
    return "P(" + ", ".join(out) + ")"


def one_cluster(workers, devices, seed):
    rng = random.Random(seed)
    work = tempfile.mkdtemp(prefix="shmap-jit-")
    proc, target, _ = start_cluster(work, workers, devices)
    ran = refused = 0
    try:
        for k in range(PROGRAMS_PER_CLUSTER):
            mesh = MESHES[k % len(MESHES)]
            axes = [a for a, _ in mesh]
            body, ref = TEMPLATES[k % len(TEMPLATES)]
            dt = ("i32", np.int32) if k % 2 else ("f32", np.float32)
            sx, sy, so = spec(rng, axes, 2), spec(rng, axes, 2), spec(rng, axes, 2)
            text = ("mesh " + " ".join(f"{a}={n}" for a, n in mesh) + "\n" +
                    f"jit f(x: {dt[0]}[8,8] @ {sx}, y: {dt[0]}[8,8] @ {sy}):\n" +
                    body.replace("{o}", so))
            prog = os.path.join(work, f"p{k}.shmap")
            open(prog, "w").write(text)
            x = np.array([rng.randrange(-4, 5) for _ in range(64)], dtype=dt[1]).reshape(8, 8)
            y = np.array([rng.randrange(-4, 5) for _ in range(64)], dtype=dt[1]).reshape(8, 8)
            np.save(os.path.join(work, "x.npy"), x)
            np.save(os.path.join(work, "y.npy"), y)
            r = run([CTL, "--target", target, "run", prog, "--arg", f"x={work}/x.npy",
                     "--arg", f"y={work}/y.npy", "--out-name", f"0=r{k}"])
            if r.returncode != 0:
                c = run([CTL, "check", prog])
                words = ("Contracting dimensions are sharded", "duplicate entries",
                         "incompatible shardings", "not supported", "not divisible",
                         "same sharding", "unsharded over the axis being reduced")
                if c.returncode == 1 and any(w in c.stderr for w in words) and \
                        any(w in r.stderr for w in words):
                    refused += 1
                    continue
                sys.exit(f"e2e_jit_numpy: program failed:\n{text}\nrun: {r.stderr}\n"
                         f"check: {c.stderr}")
            # the result's sharding is its type's, as check computes it
            if k < 12:
                d = run([CTL, "--target", target, "describe", f"r{k}", "--json"])
                c = run([CTL, "check", prog, "--json"])
                got_t = json.loads(d.stdout).get("type")
                want_t = json.loads(c.stdout)["outputs"][0]["type"]
                if d.returncode != 0 or got_t != want_t:
                    sys.exit(f"e2e_jit_numpy: result type {got_t} but check says {want_t}:\n"
                             f"{text}\n{d.stderr}")
            out = os.path.join(work, "out.npy")
            g = run([CTL, "--target", target, "get", f"r{k}", out])
            if g.returncode != 0:
                sys.exit(f"e2e_jit_numpy: get failed: {g.stderr}")
            got, want = np.load(out), ref(x, y).astype(dt[1])
            ok = got.shape == want.shape and got.dtype == want.dtype and (
                np.array_equal(got, want) if dt[1] == np.int32 else
                np.allclose(got, want, rtol=1e-5, atol=1e-5))
            if not ok:
                sys.exit(f"e2e_jit_numpy: differs from numpy ({workers} workers):\n{text}\n"
                         f"got {got.dtype}{list(got.shape)}\n{got}\nwant\n{want}")
            run([CTL, "--target", target, "rm", f"r{k}"])
            ran += 1
        ran += unreduced_programs(work, target) + unreduced_array(work, target)
        for k, mesh in enumerate(SMALL_MESHES):
            n = 1
            for _, size in mesh:
                n *= size
            axes = [a for a, _ in mesh]
            text = ("mesh " + " ".join(f"{a}={m}" for a, m in mesh) + "\n" +
                    f"jit g(x: i32[{6 * n},4] @ P({axes[0]!r}, None)):\n"
                    "    return jnp.sum(x * 2, axis=0)\n")
            prog = os.path.join(work, f"small{k}.shmap")
            open(prog, "w").write(text)
            x = np.arange(6 * n * 4, dtype=np.int32).reshape(6 * n, 4)
            np.save(os.path.join(work, "x.npy"), x)
            r = run([CTL, "--target", target, "run", prog, "--arg", f"x={work}/x.npy",
                     "--out-name", f"0=s{k}"])
            g = run([CTL, "--target", target, "get", f"s{k}", os.path.join(work, "s.npy")])
            if r.returncode or g.returncode or not np.array_equal(
                    np.load(os.path.join(work, "s.npy")), (x * 2).sum(axis=0)):
                sys.exit(f"e2e_jit_numpy: small mesh failed ({workers} workers):\n{text}\n"
                         f"{r.stderr}{g.stderr}")
            ran += 1
    finally:
        stop_cluster(proc)
        shutil.rmtree(work, ignore_errors=True)
    return ran, refused


def main():
    total_ran = total_refused = 0
    for workers, devices, seed in ((1, 8, 11), (2, 4, 12)):
        ran, refused = one_cluster(workers, devices, seed)
        print(f"{workers} worker(s) x {devices} devices: {ran} programs equal numpy, "
              f"{refused} refused as JAX refuses them")
        if ran < PROGRAMS_PER_CLUSTER // 2:
            print(f"only {ran} of {PROGRAMS_PER_CLUSTER} programs ran")
            print(f"{total_ran + ran} passed, 1 failed")
            return 1
        total_ran += ran
        total_refused += refused
    print(f"{total_ran} passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
