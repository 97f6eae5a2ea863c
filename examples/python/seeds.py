#!/usr/bin/python3
"""The seed examples in Python, each checked against numpy on a local
cluster (2 workers x 4 devices): the data-loading guide's layouts (one of
them from 4 processes with make_array_from_process_local_data), the shard_map
design note's matmul_basic and matmul_reduce_scatter, both collective
matmuls, the scaling book's per-shard mean and roll, and the explicit-sharding
guide's examples with shmap.jit.

    PYTHONPATH=python:build/python /usr/bin/python3 examples/python/seeds.py
"""
import multiprocessing as mp
import sys

import numpy as np

import shmap
from shmap import P, NamedSharding
from shmap import lax
from shmap import numpy as jnp

failures = []


def check(name, got, want):
    ok = got.shape == want.shape and np.array_equal(got, want)
    print(f"{name:34s} {'matches numpy' if ok else 'DIFFERS from numpy'}  {got.dtype}{list(got.shape)}")
    if not ok:
        failures.append(name)


def local_part(target, p, q):
    """One loader process: rows 16p..16p+16 of the (64, 128) array."""
    c = shmap.connect(target)
    mesh = c.make_mesh((4, 2), ("x", "y"))
    x = np.arange(64 * 128, dtype=np.float32).reshape(64, 128)
    c.make_array_from_process_local_data(NamedSharding(mesh, P("x", "y")), x[16 * p:16 * p + 16],
                                         x.shape, process=p, name="seed-local")
    q.put(p)


def main():
    with shmap.local_cluster(workers=4, devices_per_worker=2) as c:
        # the data-loading guide: one (64, 128) array, four layouts
        x = np.arange(64 * 128, dtype=np.float32).reshape(64, 128)
        mesh = c.make_mesh((4, 2), ("x", "y"))
        for spec in (P("x", "y"), P(None, "y"), P(), P("y")):
            a = c.device_put(x, NamedSharding(mesh, spec))
            check(f"device_put {spec}", np.asarray(a), x)
        procs, q = [], mp.get_context("spawn").Queue()
        for p in range(4):
            procs.append(mp.get_context("spawn").Process(target=local_part, args=(c.target, p, q)))
            procs[-1].start()
        for pr in procs:
            pr.join(60)
        check("process-local data, 4 processes", np.asarray(c.get("seed-local")), x)
        c.get("seed-local").delete()

        # the shard_map design note
        mesh = c.make_mesh((4, 2), ("i", "j"))
        a = np.arange(128, dtype=np.float32).reshape(8, 16)
        b = np.arange(512, dtype=np.float32).reshape(16, 32)

        @shmap.shard_map(mesh=mesh, in_specs=(P("i", "j"), P("j", None)), out_specs=P("i", None))
        def matmul_basic(a, b):
            return lax.psum(jnp.dot(a, b), "j")

        @shmap.shard_map(mesh=mesh, in_specs=(P("i", "j"), P("j", None)), out_specs=P("i", "j"))
        def matmul_reduce_scatter(a, b):
            return lax.psum_scatter(jnp.dot(a, b), "j", scatter_dimension=1, tiled=True)

        check("matmul_basic", np.asarray(matmul_basic(a, b)), a @ b)
        check("matmul_reduce_scatter", np.asarray(matmul_reduce_scatter(a, b)), a @ b)

        # collective matmul, all-gather variant (design note)
        mesh_i = c.make_mesh((4,), ("i",))
        lhs = np.arange(128, dtype=np.float32).reshape(16, 8)
        rhs = np.arange(32, dtype=np.float32).reshape(8, 4)

        @shmap.shard_map(mesh=mesh_i, in_specs=(P("i", None), P()), out_specs=P(),
                         check_vma=False)
        def collective_matmul(lhs, rhs):
            n = lax.axis_size("i")
            idx = lax.axis_index("i")
            chunk = lhs.shape[0]
            accum = jnp.zeros((chunk * n, rhs.shape[1]), dtype=lhs.dtype)
            for k in range(n):
                update = lhs @ rhs
                pos = ((idx + k) % n) * chunk
                accum = jnp.dynamic_update_slice(accum, update, (pos, 0))
                lhs = lax.ppermute(lhs, "i", perm=[(j, (j - 1) % n) for j in range(n)])
            return accum

        check("collective matmul (all-gather)", np.asarray(collective_matmul(lhs, rhs)), lhs @ rhs)

        # collective matmul over the contracting dimension (scaling book)
        mesh_xy = c.make_mesh((2, 4), ("X", "Y"))
        l2 = np.arange(128, dtype=np.float32).reshape(8, 16)
        r2 = np.arange(128, dtype=np.float32).reshape(16, 8)

        @shmap.shard_map(mesh=mesh_xy, in_specs=(P("X", "Y"), P(None, "Y")), out_specs=P("X", "Y"))
        def collective_matmul_contracting(lhs, rhs):
            n = lax.axis_size("Y")
            idx = lax.axis_index("Y")
            chunk = lhs.shape[1]
            accum = lax.pvary(jnp.zeros((lhs.shape[0], rhs.shape[1]), dtype=lhs.dtype), ("X", "Y"))
            for i in range(n):
                rhs_chunk = lax.dynamic_slice_in_dim(rhs, (idx + i) % n * chunk, chunk)
                accum = accum + lhs @ rhs_chunk
                if i < n - 1:
                    lhs = lax.ppermute(lhs, "Y", perm=[(j, (j - 1) % n) for j in range(n)])
            return accum

        check("collective matmul (contracting)",
              np.asarray(collective_matmul_contracting(l2, r2)), l2 @ r2)

        # the scaling book's per-shard mean and roll
        mesh_xy2 = c.make_mesh((4, 2), ("X", "Y"))
        xs = np.arange(4096, dtype=np.int32).reshape(512, 8)

        @shmap.shard_map(mesh=mesh_xy2, in_specs=P("X", "Y"), out_specs=P("X", "Y"))
        def average(x):
            return x.mean(keepdims=True)

        @shmap.shard_map(mesh=mesh_xy2, in_specs=P("X", "Y"), out_specs=P("X", "Y"))
        def shift(x):
            return jnp.roll(x, 5, axis=0)

        check("per-shard mean", np.asarray(average(xs)),
              xs.reshape(4, 128, 2, 4).mean(axis=(1, 3), dtype=np.float32))
        check("per-shard roll", np.asarray(shift(xs)),
              np.roll(xs.reshape(4, 128, 8), 5, axis=1).reshape(512, 8))

        # the explicit-sharding guide, with shmap.jit
        mesh = c.make_mesh((2, 4), ("X", "Y"))
        x4 = c.device_put(np.arange(4, dtype=np.int32).reshape(4, 1),
                          NamedSharding(mesh, P("X", None)))
        y8 = c.device_put(np.arange(8, dtype=np.int32).reshape(1, 8),
                          NamedSharding(mesh, P(None, "Y")))

        @shmap.jit
        def add_arrays(x, y):
            ans = x + y
            print(f"{'':34s} ans sharding: {shmap.typeof(ans)}")
            return ans

        check("explicit: x + y", np.asarray(add_arrays(x4, y8)),
              np.arange(4)[:, None] + np.arange(8)[None, :])

        mesh22 = c.make_mesh((2, 2), ("X", "Y"))
        xi = (np.arange(8 * 64) % 7).astype(np.float32).reshape(8, 64)
        xw = (np.arange(64 * 32) % 5).astype(np.float32).reshape(64, 32)
        In = c.device_put(xi, NamedSharding(mesh22, P("X", "Y")))
        W = c.device_put(xw, NamedSharding(mesh22, P("Y", None)))
        for out in (P("X", "Y"), P("X", None)):
            @shmap.jit
            def matmul_square(In, W):
                return jnp.einsum("bd,df->bf", jnp.square(In), W, out_sharding=out)
            r = matmul_square(In, W)
            check(f"explicit: einsum out_sharding={out}", np.asarray(r), (xi * xi) @ xw)

        @shmap.jit
        def ambiguous(In, W):
            return jnp.einsum("bd,df->bf", In, W)
        try:
            ambiguous(In, W)
            failures.append("ambiguous einsum accepted")
        except shmap.ProgramError as e:
            print(f"{'explicit: ambiguous einsum':34s} refused: {e.message[:70]}...")
    print(f"{len(failures)} failed" if failures else "every example matches numpy")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
