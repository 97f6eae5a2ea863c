"""shmap.vmap against numpy: each per-example function, run by vmap on a
batch sharded over the mesh, equals numpy's loop over the examples; in_axes
and out_axes, pytrees, nesting, vmap in shard_map bodies, with grad, and
the sentences for what it refuses. Runs on the cluster of conftest's c."""
import numpy as np
import pytest

import shmap
from shmap import P, NamedSharding
from shmap import lax
from shmap import numpy as jnp


@pytest.fixture(scope="module")
def mesh(c):
    return c.make_mesh((2, 4), ("X", "Y"))


RNG = np.random.default_rng(20)
W = RNG.standard_normal((6, 3)).astype(np.float32)
IDX = np.array([2, 0, 5, 5], np.int32)

# f(xp, x, w): x one example (5, 6) float32, w (6, 3) not mapped
EXAMPLES = [
    ("elementwise", lambda xp, x, w: xp.tanh(x) * 2 + xp.exp(-x * x) - x / 3),
    ("broadcast_unmapped", lambda xp, x, w: x + w[:, 0] - xp.maximum(x, w.T[0])),
    ("reductions", lambda xp, x, w: x.sum() + x.mean(axis=0) + x.max(axis=-1).sum()),
    ("keepdims", lambda xp, x, w: x - x.mean(axis=1, keepdims=True)),
    ("argmax_cumsum", lambda xp, x, w: xp.argmax(x) + xp.argmax(x, axis=1).sum() +
     xp.cumsum(x, axis=0)[-1].sum()),
    ("sort", lambda xp, x, w: xp.sort(x, axis=0) + xp.sort(x)),
    ("reshape_T", lambda xp, x, w: x.reshape(3, -1).T @ x.reshape(3, 10)),
    ("transpose", lambda xp, x, w: xp.transpose(x[None], (2, 0, 1)).sum(axis=1)),
    ("expand_squeeze", lambda xp, x, w: xp.squeeze(xp.expand_dims(x, 0), 0) +
     xp.expand_dims(x[:, 0], -1)),
    ("broadcast_to", lambda xp, x, w: xp.broadcast_to(x[0], (4, 6)).sum(axis=0)),
    ("index", lambda xp, x, w: x[1:4, ::2] * x[0, -1] + x[None, 2][0, :3].sum()),
    ("matmul", lambda xp, x, w: x @ w + (x[0] @ w)[None]),
    ("dot_mv", lambda xp, x, w: xp.dot(w.T, x[0]) + xp.dot(x[1], x[2])),
    ("einsum", lambda xp, x, w: xp.einsum("ij,jk->ik", x, w) + xp.einsum("ij,ij->i", x, x)[:, None]),
    ("concatenate", lambda xp, x, w: xp.concatenate([x, w.T, x * 2], axis=0).sum(axis=1)),
    ("stack", lambda xp, x, w: xp.stack([x[0], w[:, 0]], axis=1)),
    ("take_batched_src", lambda xp, x, w: xp.take(x, IDX, axis=1)),
    ("take_batched_idx", lambda xp, x, w: xp.take(w, (xp.argmax(x, axis=1) % 6), axis=0)),
    ("take_both_batched", lambda xp, x, w: xp.take(x, xp.argmax(x, axis=0) % 5, axis=0) +
     xp.take(x, xp.argmin(x, axis=1) * 2 - 3, axis=1, mode="wrap").sum(axis=0)[0]),
    ("take_along", lambda xp, x, w: xp.take_along_axis(x, xp.argsort(x, axis=1), axis=1)),
    ("where_astype", lambda xp, x, w: xp.where(x > 0, x, w[0, 0]).astype(np.int32) * 2),
    ("pad_roll", lambda xp, x, w: xp.pad(x, ((1, 0), (0, 2)))[1:, :6] + xp.roll(x, 2) +
     xp.roll(x, -1, axis=0)),
    ("flip", lambda xp, x, w: xp.flip(x, 1) - xp.flip(x)),
    ("at_set", lambda xp, x, w: (x.copy() if xp is np else x)),
    ("softmax", lambda xp, x, w: xp.exp(x) / xp.exp(x).sum(-1, keepdims=True)),
    ("var", lambda xp, x, w: x.var(axis=0) + x.std()),
    ("scatter_fixed_idx", lambda xp, x, w: _scat(xp, "set", x, IDX, x[1:] * 2) +
     _scat(xp, "add", x, IDX[:3], w.T) * _scat(xp, "multiply", x, IDX, x[:4])),
    ("scatter_batched_idx", lambda xp, x, w: _scat(xp, "max", x, xp.argmax(x, axis=1) - 2, x) -
     _scat(xp, "set", x, xp.argmin(x, axis=1), w.T[0] + x[:, 0:1])),
    ("segment_sum_data", lambda xp, x, w: _segsum(xp, x, SEG5)),
    ("segment_sum_ids", lambda xp, x, w: _segsum(xp, w, (xp.argmax(x, axis=1) % 4)[:1].repeat(
        6) if xp is np else jnp.repeat((jnp.argmax(x, axis=1) % 4)[:1], 6))),
]

SEG5 = np.array([2, 0, 2, -1, 3], np.int32)


def _segsum(xp, data, ids):
    if xp is np:
        out = np.zeros((4,) + data.shape[1:], data.dtype)
        for r, k in enumerate(np.asarray(ids)):
            if 0 <= k < 4:
                out[k] += data[r]
        return out
    return shmap.ops.segment_sum(data, ids if isinstance(ids, shmap.Tracer)
                                 else jnp.asarray(ids), 4)


def _scat(xp, how, x, i, u):
    """x.at[i].how(u): numpy's x[i] = u (last wins) and ufunc.at, indices
    out of range dropped, negative from the end."""
    if xp is not np:
        return getattr(x.at[i], how)(u)
    x, i = x.copy(), np.asarray(i)
    u = np.broadcast_to(u, i.shape + x.shape[1:])
    ok = (i >= -len(x)) & (i < len(x))
    if how == "set":
        for k, r in zip(i[ok], u[ok]):
            x[k] = r
    else:
        {"add": np.add, "multiply": np.multiply, "max": np.maximum}[how].at(x, i[ok], u[ok])
    return x


def _at_set_np(x):
    y = x.copy()
    y[1:3, 2] = 7
    return y


@pytest.mark.parametrize("name,f", EXAMPLES, ids=[u[0] for u in EXAMPLES])
def test_vmap_examples(c, mesh, name, f):
    xa = RNG.standard_normal((8, 5, 6)).astype(np.float32)
    x = c.device_put(xa, NamedSharding(mesh, P("X")))
    w = c.device_put(W, NamedSharding(mesh, P()))
    if name == "at_set":
        got = shmap.jit(shmap.vmap(lambda x: x.at[1:3, 2].set(7.0)))(x)
        want = np.stack([_at_set_np(e) for e in xa])
    else:
        got = shmap.jit(shmap.vmap(lambda x, w: f(jnp, x, w), in_axes=(0, None)))(x, w)
        want = np.stack([f(np, e, W) for e in xa])
    assert got.shape == want.shape, (got.shape, want.shape)
    assert np.allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_vmap_closed_over_arrays(c, mesh):
    """An Array or numpy array the function closes over, of a higher rank
    than the examples, broadcasts against each example as numpy's loop
    does. Before, the batched values were aligned to the rank of the
    traced operands only: vmap(lambda e: e + A) gave a (4, 6) result for
    (4, 6, 6), adding A's rows to the batch's; and a numpy array joined to
    the examples (concatenate, dynamic_update_slice) was refused."""
    xa = RNG.standard_normal((4, 6)).astype(np.float32)
    ta = RNG.standard_normal((6, 6)).astype(np.float32)
    x = c.device_put(xa, NamedSharding(mesh, P("X")))
    a = c.device_put(ta, NamedSharding(mesh, P()))
    for f, g in [(lambda e: e + a, lambda e: e + ta),
                 (lambda e: e * ta, lambda e: e * ta),
                 (lambda e: jnp.where(e > 0, ta, e), lambda e: np.where(e > 0, ta, e)),
                 (lambda e: e @ ta + e, lambda e: e @ ta + e),
                 (lambda e: jnp.concatenate([e, ta[0]]), lambda e: np.concatenate([e, ta[0]])),
                 (lambda e: lax.dynamic_update_slice(e, ta[0, :2], (1,)),
                  lambda e: np.concatenate([e[:1], ta[0, :2], e[3:]]))]:
        got = shmap.jit(shmap.vmap(f))(x)
        want = np.stack([g(e) for e in xa])
        assert got.shape == want.shape, (got.shape, want.shape)
        assert np.allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_vmap_axes_pytrees_and_nesting(c, mesh):
    """in_axes other than 0, out_axes, a dict of arguments, a tuple of
    results, an unmapped result broadcast, and vmap of vmap."""
    xa = RNG.standard_normal((5, 8, 6)).astype(np.float32)  # mapped along axis 1
    ya = RNG.standard_normal((8, 6)).astype(np.float32)
    x = c.device_put(xa, NamedSharding(mesh, P(None, "X")))
    y = c.device_put(ya, NamedSharding(mesh, P("X")))

    def f(d):
        return d["x"].sum(axis=0) * d["y"]

    @shmap.jit
    def g(x, y):
        return shmap.vmap(f, in_axes=({"x": 1, "y": 0},), out_axes=1)({"x": x, "y": y})
    a = g(x, y)
    assert a.shape == (6, 8)
    want = np.stack([xa[:, k].sum(0) * ya[k] for k in range(8)], axis=1)
    assert np.allclose(np.asarray(a), want, rtol=1e-5, atol=1e-5)
    # a tuple of results, one of them not depending on the batch (broadcast)
    r, k = shmap.jit(shmap.vmap(lambda v: (v * 2, jnp.ones((3,)))))(y)
    assert np.allclose(np.asarray(r), 2 * ya) and np.array_equal(np.asarray(k), np.ones((8, 3)))
    # vmap of vmap: an outer product of rows, pairwise
    za = RNG.standard_normal((4, 3)).astype(np.float32)
    z = c.device_put(za, NamedSharding(mesh, P()))
    pair = shmap.jit(shmap.vmap(shmap.vmap(lambda u, v: jnp.dot(u, v), in_axes=(None, 0)),
                                in_axes=(0, None)))(z, z)
    assert np.allclose(np.asarray(pair), za @ za.T, rtol=1e-5, atol=1e-5)


def test_vmap_at_once_and_in_shard_map(c, mesh):
    xa = RNG.standard_normal((8, 4)).astype(np.float32)
    x = c.device_put(xa, NamedSharding(mesh, P("X")))
    got = shmap.vmap(lambda r: r / jnp.sqrt(jnp.sum(r * r)))(x)  # at once: a jit
    assert np.allclose(np.asarray(got), xa / np.linalg.norm(xa, axis=1, keepdims=True),
                       rtol=1e-5)
    m = c.make_mesh((4,), ("i",))
    xb = c.device_put(xa, NamedSharding(m, P("i")))

    @shmap.shard_map(mesh=m, in_specs=P("i"), out_specs=P("i"))
    def body(b):  # per row of each block, with a psum over the devices (and a tile)
        return shmap.vmap(lambda r: r - lax.psum(r.sum(), "i") / 16 +
                          jnp.tile(r[:2], 2) - jnp.concatenate([r[:2], r[:2]]))(b)
    rows = xa.reshape(4, 2, 4)
    want = xa - rows.sum(axis=(0, 2)).repeat(1).reshape(1, 2).repeat(4, 0).reshape(8, 1) / 16
    assert np.allclose(np.asarray(body(xb)), want, rtol=1e-5, atol=1e-5)


def test_vmap_refusals(c, mesh):
    x = c.device_put(np.ones((8, 4), np.float32), NamedSharding(mesh, P("X")))
    y = c.device_put(np.ones((6, 4), np.float32), NamedSharding(mesh, P()))
    with pytest.raises(shmap.InvalidArgument,
                       match=r"vmap got inconsistent sizes for array axes to be mapped"):
        shmap.vmap(lambda a, b: a + b)(x, y)
    with pytest.raises(shmap.InvalidArgument, match=r"vmap in_axes must be an int, None, or"):
        shmap.vmap(lambda a: a, in_axes=(0, 0))(x)
    with pytest.raises(shmap.InvalidArgument, match=r"along axis 2, .* rank should be at least"):
        shmap.vmap(lambda a: a, in_axes=2)(x)
    with pytest.raises(ValueError, match=r"Only one of spmd_axis_name or arrays sharded on "
                       r"`Explicit` mesh axis type is allowed. Got spmd_axis_name=\('Y',\) and "
                       r"arrays sharded on explicit_mesh_axis=\('X',\)"):
        shmap.vmap(lambda a: a, spmd_axis_name="Y")(x)
    with pytest.raises(shmap.InvalidArgument, match=r"all_to_all over a vmap's axis_name"):
        shmap.vmap(lambda a: lax.all_to_all(a, "b", 0, 0), axis_name="b")(x)


def test_vmap_axis_name(c, mesh):
    """vmap(f, axis_name='b'): the collectives over 'b' act over the batch,
    as JAX's: psum/pmean/pmax/pmin give every example the batch's result
    (an unbatched value counts once per example in psum), all_gather
    stacks the examples (tiled: concatenates), psum_scatter gives example
    k the k-th part of the sum, ppermute moves examples (zeros where none
    arrives), axis_index/axis_size are the position and the batch size;
    with a mesh axis named beside it (in shard_map) both are reduced; grad
    through them (a batch-normalised loss) against numpy."""
    xa = RNG.standard_normal((8, 4, 6)).astype(np.float32)
    x = c.device_put(xa, NamedSharding(mesh, P("X")))
    lx = lambda f: shmap.jit(shmap.vmap(f, axis_name="b"))(x)  # noqa: E731
    got = lx(lambda v: v - lax.pmean(v, "b") + lax.psum(v[0, 0], "b") * lax.pmax(v, "b") -
             lax.pmin(v.sum(), "b") + lax.psum(2.0, "b"))
    want = xa - xa.mean(0) + xa[:, 0, 0].sum() * xa.max(0) - xa.sum((1, 2)).min() + 16
    assert np.allclose(np.asarray(got), want, atol=1e-4)
    got = lx(lambda v: v[0, 0] * 0 + lax.axis_index("b") * 10 + lax.axis_size("b"))
    assert np.array_equal(np.asarray(got), np.arange(8) * 10 + 8)
    got = lx(lambda v: lax.all_gather(v, "b", axis=1))
    assert got.shape == (8, 4, 8, 6)
    assert np.array_equal(np.asarray(got), np.broadcast_to(np.moveaxis(xa, 0, 1), (8, 4, 8, 6)))
    got = lx(lambda v: lax.all_gather(v, "b", axis=1, tiled=True))
    assert np.array_equal(np.asarray(got)[3], np.moveaxis(xa, 0, 1).reshape(4, 48))
    perm = [(k, (k + 3) % 8) for k in range(6)]
    got = lx(lambda v: lax.ppermute(v, "b", perm))
    want = np.zeros_like(xa)
    for a, b in perm:
        want[b] = xa[a]
    assert np.array_equal(np.asarray(got), want)
    got = lx(lambda v: lax.psum_scatter(v.reshape(-1)[:16], "b", tiled=True))
    assert np.allclose(np.asarray(got), xa.reshape(8, -1)[:, :16].sum(0).reshape(8, 2),
                       atol=1e-5)
    got = lx(lambda v: lax.psum_scatter(v[:, :2].reshape(-1), "b"))
    assert np.allclose(np.asarray(got), xa[:, :, :2].reshape(8, -1).sum(0), atol=1e-5)

    def bn_loss(w):
        h = shmap.vmap(lambda v: (v - lax.pmean(v, "b")) / jnp.sqrt(
            lax.pmean((v - lax.pmean(v, "b")) ** 2, "b") + 1e-3), axis_name="b")(w)
        return jnp.sum(h * jnp.asarray(xa[0]))

    def np_bn(w):
        d = w - w.mean(0)
        return ((d / np.sqrt((d * d).mean(0) + 1e-3)) * xa[0]).sum()

    g = np.asarray(shmap.jit(shmap.grad(bn_loss))(x), np.float64)
    d = RNG.standard_normal(xa.shape)
    w64 = xa.astype(np.float64)
    fd = (np_bn(w64 + 1e-5 * d) - np_bn(w64 - 1e-5 * d)) / 2e-5
    assert abs((g * d).sum() - fd) <= 2e-3 * max(1.0, abs(fd)), ((g * d).sum(), fd)
    # a mesh axis and the vmap's in one psum, in a shard_map body
    sm = shmap.shard_map(lambda v: shmap.vmap(lambda e: lax.psum(e, ("X", "b")),
                                              axis_name="b")(v),
                         mesh=mesh, in_specs=P("X"), out_specs=P("X"))
    assert np.allclose(np.asarray(sm(x)), np.broadcast_to(xa.sum(0), xa.shape), atol=1e-4)


def test_vmap_of_grad_and_grad_of_vmap(c, mesh):
    """Per-example gradients (vmap of grad, the parameters not mapped) and
    the gradient of a batch's mean loss (grad of vmap), against numpy."""
    xa = RNG.standard_normal((8, 6)).astype(np.float32)
    wa = RNG.standard_normal((6,)).astype(np.float32)
    x = c.device_put(xa, NamedSharding(mesh, P("X")))
    w = c.device_put(wa, NamedSharding(mesh, P()))

    def loss(w, x):
        return jnp.tanh(jnp.dot(x, w)) ** 2

    per = shmap.jit(shmap.vmap(shmap.grad(loss), in_axes=(None, 0)))(w, x)
    t = np.tanh(xa @ wa)
    want = (2 * t * (1 - t * t))[:, None] * xa  # one gradient per example
    assert per.shape == (8, 6)
    assert np.allclose(np.asarray(per), want, rtol=1e-4, atol=1e-5)
    mean_grad = shmap.jit(shmap.grad(lambda w, x: jnp.mean(shmap.vmap(
        loss, in_axes=(None, 0))(w, x))))(w, x)
    assert mean_grad.type == w.type
    assert np.allclose(np.asarray(mean_grad), want.mean(0), rtol=1e-4, atol=1e-5)


def test_vmap_of_vjp_jacrev_hessian(c, mesh):
    """vmap over a function that calls vjp's pullback (a batched cotangent
    and an unbatched one: it gave each example the whole batch's cotangent
    before), per-example Jacobians (vmap of jacrev) and Hessians (vmap of
    hessian), against numpy's per-example formulas."""
    xa = RNG.standard_normal((8, 3))
    ca = RNG.standard_normal((8, 3))
    x = c.device_put(xa, NamedSharding(mesh, P("X")))
    ct = c.device_put(ca, NamedSharding(mesh, P("X")))

    def f(v):
        return jnp.sin(v) * v[0]

    def jac_np(v):
        j = np.diag(np.cos(v) * v[0])
        j[:, 0] += np.sin(v)
        return j

    got = shmap.jit(shmap.vmap(lambda v, g: shmap.vjp(f, v)[1](g)[0]))(x, ct)
    assert got.shape == (8, 3)
    assert np.allclose(np.asarray(got), [jac_np(v).T @ g for v, g in zip(xa, ca)], atol=1e-12)
    one = c.device_put(np.array([1.0, 0.0, 2.0]), NamedSharding(mesh, P()))
    got = shmap.jit(shmap.vmap(lambda v, g: shmap.vjp(f, v)[1](g)[0], in_axes=(0, None)))(x, one)
    assert np.allclose(np.asarray(got), [jac_np(v).T @ [1, 0, 2] for v in xa], atol=1e-12)
    jac = shmap.jit(shmap.vmap(shmap.jacrev(f)))(x)
    assert jac.shape == (8, 3, 3)
    assert np.allclose(np.asarray(jac), [jac_np(v) for v in xa], atol=1e-12)

    def h(v):
        return jnp.sum(v ** 3) * v[1]

    def hess_np(v):
        m = np.diag(6 * v * v[1])
        m[:, 1] += 3 * v ** 2
        m[1, :] += 3 * v ** 2
        return m

    hs = shmap.jit(shmap.vmap(shmap.hessian(h)))(x)
    assert hs.shape == (8, 3, 3)
    assert np.allclose(np.asarray(hs), [hess_np(v) for v in xa], atol=1e-10)


def test_pmap(c):
    """pmap as JAX now runs it, a shard_map over a mesh of one axis as long
    as the mapped axis: each index's slice, collectives over axis_name,
    in_axes None (broadcast), pytree results stacked, out_axes None (one
    device's value, which must not vary), static_broadcasted_argnums; its
    sentences."""
    xa = RNG.standard_normal((4, 3)).astype(np.float32)
    f = shmap.pmap(lambda x: x * 2 + lax.psum(x, "i"), axis_name="i")
    assert np.allclose(np.asarray(f(xa)), xa * 2 + xa.sum(0), rtol=1e-6)
    wa = RNG.standard_normal((3, 2)).astype(np.float32)

    def g(x, w, scale):
        return {"y": x @ w * scale, "m": lax.pmean(x.sum(), "d"), "k": lax.axis_index("d")}
    out = shmap.pmap(g, axis_name="d", in_axes=(0, None), static_broadcasted_argnums=2)(
        xa, wa, 3.0)
    assert np.allclose(np.asarray(out["y"]), xa @ wa * 3, rtol=1e-5)
    assert np.allclose(np.asarray(out["m"]), np.full(4, xa.sum(1).mean()), rtol=1e-5)
    assert np.array_equal(np.asarray(out["k"]), np.arange(4))
    x = c.device_put(xa, NamedSharding(c.make_mesh((4,), ("z",)), P("z")))
    h = shmap.pmap(lambda x: lax.psum(x, "i"), axis_name="i", out_axes=None)
    assert np.allclose(np.asarray(h(x)), xa.sum(0), rtol=1e-6)
    with pytest.raises(ValueError, match=r"pmap got inconsistent sizes for array axes to be "
                       r"mapped: \[2, 4\]"):
        shmap.pmap(lambda a, b: a + b.sum())(xa, xa[:2])
    with pytest.raises(shmap.InvalidArgument, match="pmap of <lambda> inside a traced function"):
        shmap.jit(lambda x: shmap.pmap(lambda y: y)(x))(x)
    with pytest.raises(shmap.ProgramError, match="varies over mesh axis .i."):  # out_axes=None
        shmap.pmap(lambda x: x, axis_name="i", out_axes=None)(xa)
    # in_axes and out_axes other than 0 (negative from the end), as JAX's (it took 0 or None)
    r7 = np.random.default_rng(7)
    ya = r7.standard_normal((3, 4, 2)).astype(np.float32)
    za = r7.standard_normal((2, 4)).astype(np.float32)
    k = shmap.pmap(lambda y, z: y * 2 + z.sum() + lax.psum(z, "i"), axis_name="i",
                   in_axes=(1, -1), out_axes=2)
    got = k(ya, c.device_put(za, NamedSharding(c.make_mesh((4,), ("z",)), P())))
    want = np.stack([ya[:, i, :] * 2 + za[:, i].sum() + za.sum(1) for i in range(4)], axis=2)
    assert got.shape == (3, 2, 4) and np.allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
    got = shmap.pmap(lambda y: y.sum(0), in_axes=-2, out_axes=-1)(ya)
    assert np.allclose(np.asarray(got), ya.sum(0).T, rtol=1e-5)
    with pytest.raises(ValueError, match="pmap in_axes 3 is out of bounds for an argument of "
                       "rank 3"):
        shmap.pmap(lambda y: y, in_axes=3)(ya)


def test_vectorize_and_apply_along_axis(c, mesh):
    """jnp.vectorize (elementwise, and with gufunc signatures, several
    results too; excluded arguments) and jnp.apply_along_axis, by vmap,
    against numpy's; traced and at once on Arrays."""
    with shmap.use_mesh(mesh):
        _vectorize_cases(c, mesh)


def _vectorize_cases(c, mesh):
    a = RNG.standard_normal((3, 4)).astype(np.float32)
    b = RNG.standard_normal((4,)).astype(np.float32)
    f = jnp.vectorize(lambda x, y: jnp.where(x > y, x - y, x * y))
    assert np.allclose(np.asarray(shmap.jit(f)(a, b)), np.where(a > b, a - b, a * b))
    g = jnp.vectorize(lambda u, v: jnp.dot(u, v), signature="(n),(n)->()")
    got = shmap.jit(g)(a, b)
    assert got.shape == (3,) and np.allclose(np.asarray(got), a @ b, rtol=1e-5)
    m = RNG.standard_normal((2, 3, 4, 4)).astype(np.float32)
    h = jnp.vectorize(lambda x, k: (jnp.trace(x) * k, x.T), signature="(n,n)->(),(n,n)",
                      excluded={1})
    t, tt = shmap.jit(lambda m: h(m, 2.0))(m)
    assert np.allclose(np.asarray(t), 2 * np.trace(m, axis1=2, axis2=3), rtol=1e-5)
    assert np.array_equal(np.asarray(tt), m.swapaxes(-1, -2))
    with pytest.raises(ValueError, match="inconsistent size for core dimension 'n'"):
        shmap.jit(g)(a, b[:3])
    x = RNG.standard_normal((3, 5, 2)).astype(np.float32)
    got = shmap.jit(lambda x: jnp.apply_along_axis(lambda v: jnp.sort(v)[:2] * v.sum(), 1,
                                                   x))(x)
    want = np.apply_along_axis(lambda v: np.sort(v)[:2] * v.sum(), 1, x)
    # (float32 sums of 5 in another order: a sum near 0 differs relatively)
    assert got.shape == want.shape and np.allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
    xs = c.device_put(x, NamedSharding(mesh, P()))
    assert np.allclose(np.asarray(jnp.apply_along_axis(jnp.sum, 2, xs)), x.sum(2), rtol=1e-5)


def test_vmap_dynamic_slices_at_batched_starts(c, mesh):
    """dynamic_slice, dynamic_slice_in_dim and dynamic_update_slice at a
    start that is one per example (a negative one from the end once, then
    clamped, as lax's), beside a
    traced start the same for all and a static one: JAX's gather and
    scatter, against numpy's loop; the batch sharded over X stays so.
    Before, a traced start was refused ('vmap: dynamic_slice at traced
    starts is not supported')."""
    xa = RNG.standard_normal((4, 6, 5)).astype(np.float32)
    ua = RNG.standard_normal((4, 2, 3)).astype(np.float32)
    sa = np.array([0, 3, 5, -2], np.int32)  # 5 clamps, -2 counts from the end
    x = c.device_put(xa, NamedSharding(mesh, P("X")))
    u = c.device_put(ua, NamedSharding(mesh, P("X")))
    s = c.device_put(sa, NamedSharding(mesh, P("X")))

    def clamp(v, n, k):  # a negative start from the end once, then clamped: lax's
        v = int(v) + n if v < 0 else int(v)
        return min(max(v, 0), n - k)

    def f(x, u, s, t):
        return (lax.dynamic_slice(x, (s, t), (2, 3)),
                lax.dynamic_slice_in_dim(x, s, 3, axis=1),
                lax.dynamic_slice(x, (1, s), (4, 2)),
                lax.dynamic_update_slice(x, u, (s, t)),
                lax.dynamic_update_slice(x, u, (t, s)))
    got = shmap.jit(shmap.vmap(f, in_axes=(0, 0, 0, None)))(x, u, s, np.int32(1))
    want = [[], [], [], [], []]
    for e, v, k in zip(xa, ua, sa):
        i, j = clamp(k, 6, 2), clamp(k, 5, 3)
        want[0].append(e[i:i + 2, 1:4])
        want[1].append(e[:, clamp(k, 5, 3):clamp(k, 5, 3) + 3])
        want[2].append(e[1:5, clamp(k, 5, 2):clamp(k, 5, 2) + 2])
        w = e.copy()
        w[i:i + 2, 1:4] = v
        want[3].append(w)
        w = e.copy()
        w[1:3, j:j + 3] = v
        want[4].append(w)
    for g, w in zip(got, want):
        assert np.allclose(np.asarray(g), np.stack(w))
        assert g.sharding.spec[0] == "X"


def test_vmap_scatter_keeps_operand_sharding(c, mesh):
    """A scatter of examples at batched indices: the result laid out as the
    operand (its rows' dimension sharded too), and grad of x.at[i].mul(y)
    at one index per example (JAX's scalar index: unique indices), against
    numpy. Before, the result lost the operand's other shardings, and the
    gradient of the mul was refused ('scatter_mul gradients are only
    implemented if `unique_indices=True`')."""
    xa = RNG.standard_normal((2, 8, 4)).astype(np.float32)
    ya = RNG.standard_normal((2, 4)).astype(np.float32)
    ia = np.array([5, 2], np.int32)
    with shmap.use_mesh(mesh):
        x = c.device_put(xa, NamedSharding(mesh, P("X", "Y", None)))
        y = c.device_put(ya, NamedSharding(mesh, P("X", None)))
        i = c.device_put(ia, NamedSharding(mesh, P("X")))
        out = shmap.jit(shmap.vmap(lambda x, i, y: x.at[i].add(y)))(x, i, y)
        want = xa.copy()
        want[[0, 1], ia] += ya
        assert out.sharding.spec == P("X", "Y", None)
        assert np.allclose(np.asarray(out), want)

        def loss(x, y):
            return jnp.sum(shmap.vmap(lambda x, i, y: x.at[i].mul(y))(x, i, y) ** 2)
        gx, gy = shmap.jit(shmap.grad(loss, argnums=(0, 1)))(x, y)
        m = xa.copy()
        m[[0, 1], ia] *= ya
        wx = 2 * m
        wx[[0, 1], ia] *= ya
        wy = 2 * m[[0, 1], ia] * xa[[0, 1], ia]
        assert np.allclose(np.asarray(gx), wx, rtol=1e-5)
        assert np.allclose(np.asarray(gy), wy, rtol=1e-5)


def test_vmap_roll_by_batched_shift(c, mesh):
    """jnp.roll by a shift one per example (two along one axis, and along
    two axes), as JAX's dynamic roll, against numpy; the rolled axis
    sharded: JAX's sentence. Before, it crashed (AttributeError)."""
    xa = np.arange(4 * 6 * 4, dtype=np.float32).reshape(4, 6, 4)
    sa = np.array([[1, 2], [0, -3], [7, 5], [-1, 4]], np.int32)
    x = c.device_put(xa, NamedSharding(mesh, P("X")))
    s = c.device_put(sa, NamedSharding(mesh, P("X")))
    got = shmap.jit(shmap.vmap(lambda x, s: jnp.roll(x, s, axis=0)))(x, s)
    want = np.stack([np.roll(e, tuple(k), axis=(0, 0)) for e, k in zip(xa, sa)])
    assert np.array_equal(np.asarray(got), want)
    got = shmap.jit(shmap.vmap(lambda x, s: jnp.roll(x, s, axis=(1, 0))))(x, s)
    want = np.stack([np.roll(e, tuple(k), axis=(1, 0)) for e, k in zip(xa, sa)])
    assert np.array_equal(np.asarray(got), want)
    got = shmap.jit(shmap.vmap(lambda x, s: jnp.roll(x, s[0])))(x, s)
    want = np.stack([np.roll(e, k[0]) for e, k in zip(xa, sa)])
    assert np.array_equal(np.asarray(got), want)
    xs = c.device_put(xa, NamedSharding(mesh, P("X", None, "Y")))
    with pytest.raises(shmap.InvalidArgument, match="cannot be sharded on the axis being rolled"):
        shmap.jit(shmap.vmap(lambda x, s: jnp.roll(x, s, axis=1)))(xs, s)


def test_vmap_batch_sharding_of_inputs_and_results(c, mesh):
    """The mesh axes of the mapped dimension (JAX's explicit mesh axis): a
    result that does not depend on the batch is laid out along them, at
    any out_axes; mapped inputs sharded differently along it, or an
    unmapped one sharded over them: JAX's ValueErrors. Before, the result
    was replicated and the inputs were taken."""
    with shmap.use_mesh(mesh):
        x = c.device_put(np.arange(8, dtype=np.float32), NamedSharding(mesh, P("X")))
        out = shmap.vmap(lambda e: jnp.ones((4,)), out_axes=1)(x)
        assert out.sharding.spec == P(None, "X")
        assert np.array_equal(np.asarray(out), np.ones((4, 8)))
        r = c.device_put(np.ones((8, 4), np.float32), NamedSharding(mesh, P(None, "Y")))
        with pytest.raises(ValueError, match="Mapped away dimension of inputs passed to vmap "
                           "should be sharded the same. Got inconsistent axis specs: X vs None"):
            shmap.vmap(lambda a, b: a + b[0])(x, r)
        with pytest.raises(ValueError, match=r"Unmapped values passed to vmap cannot be sharded "
                           r"along the mesh axis you are vmapping over. Got type: f32\[8@X\], "
                           r"in_axes: None and vmapped mesh axis: \('X',\)"):
            shmap.jit(shmap.vmap(lambda a, b: a + b[0], in_axes=(0, None)))(x, x)


def test_vmap_typeof_in_body(c, mesh):
    """typeof of a value of a vmap body: JAX's NamedSharding of the
    context's mesh, the batch dimension dropped. Before, its sharding was
    a bare PartitionSpec."""
    seen = []

    def f(e):
        seen.append(shmap.typeof(e).sharding)
        return e * 2
    with shmap.use_mesh(mesh):
        x = c.device_put(np.ones((8, 4), np.float32), NamedSharding(mesh, P("X", "Y")))
        shmap.jit(shmap.vmap(f))(x)
    assert isinstance(seen[0], NamedSharding) and seen[0].spec == P("Y")
    assert seen[0].mesh.axis_names == ("X", "Y")


def test_vmap_spmd_axis_name(c, mesh):
    """vmap(f, spmd_axis_name=...) as JAX's: a batch sharded over those
    Explicit axes keeps its sharding; on a mesh of Auto axes a
    with_sharding_constraint in the body partitions the batch over them
    (JAX's sharding_constraint batcher), which its spec may not name."""
    xa = np.arange(32, dtype=np.float32).reshape(8, 4)
    x = c.device_put(xa, NamedSharding(mesh, P("X", "Y")))
    out = shmap.jit(shmap.vmap(lambda a: a * 2, spmd_axis_name="X"))(x)
    assert out.sharding == NamedSharding(mesh, P("X", "Y"))
    assert np.array_equal(np.asarray(out), xa * 2)

    auto = c.make_mesh((2, 4), ("X", "Y"), axis_types=(shmap.AxisType.Auto,) * 2)
    xs = c.device_put(xa, NamedSharding(auto, P()))

    def body(a):
        return lax.with_sharding_constraint(a + 1, NamedSharding(auto, P("Y")))
    out = shmap.jit(shmap.vmap(body, spmd_axis_name="X"))(xs)
    assert out.sharding == NamedSharding(auto, P("X", "Y"))
    assert np.array_equal(np.asarray(out), xa + 1)
    out = shmap.jit(shmap.vmap(body))(xs)
    assert out.sharding == NamedSharding(auto, P(None, "Y"))
    with pytest.raises(ValueError, match=r"vmap spmd_axis_name \('Y',\) cannot appear in "
                       r"with_sharding_constraint spec"):
        shmap.jit(shmap.vmap(body, spmd_axis_name="Y"))(xs)
