"""shmap.grad and value_and_grad against numpy: every differentiation rule
checked against central differences of the same function run by numpy in
float64, on sharded arguments; the gradients laid out as their arguments
(explicit mode), the pytree, argnums, has_aux and at-once forms, and JAX's
sentences for what grad refuses; custom_vjp and custom_jvp, higher
derivatives (grad of grad, a Hessian-vector product), jacrev, jacfwd and
hessian. Runs on the cluster of conftest's c."""
import numpy as np
import pytest

import shmap
from shmap import P, NamedSharding
from shmap import lax
from shmap import numpy as jnp


def _fd(f, xs, k, rng, eps=1e-5):
    """The directional derivative of f (numpy, float64) along a random
    direction of argument k, and that direction."""
    d = rng.standard_normal(np.shape(xs[k]))
    up = [np.asarray(x, np.float64) for x in xs]
    dn = [np.asarray(x, np.float64) for x in xs]
    up[k] = up[k] + eps * d
    dn[k] = dn[k] - eps * d
    return (f(*up) - f(*dn)) / (2 * eps), d


def _check(c, mesh, f, args, specs, rng, argnums=(0,), rtol=2e-3):
    """grad of f (written once, for shmap.numpy and numpy as xp) on the
    sharded args against central differences; the gradients' types are
    their arguments'."""
    arrs = [c.device_put(a, NamedSharding(mesh, s)) if s is not None else a
            for a, s in zip(args, specs)]
    g = shmap.jit(shmap.grad(lambda *a: f(jnp, *a), argnums=argnums))(*arrs)
    for j, k in enumerate(argnums):
        assert g[j].type == arrs[k].type, (g[j].type, arrs[k].type)
        want, d = _fd(lambda *a: float(f(np, *a)), args, k, rng)
        got = float((np.asarray(g[j], np.float64) * d).sum())
        assert abs(got - want) <= rtol * max(1.0, abs(want)), (k, got, want)


@pytest.fixture(scope="module")
def mesh(c):
    return c.make_mesh((2, 4), ("X", "Y"))


def _sm(xp, x):
    """A smooth scalar of x, so that every entry of x's cotangent differs."""
    w = np.linspace(0.5, 1.5, x.size).reshape(x.shape).astype(np.float32)
    return (x * w).sum() if xp is np else jnp.sum(x * jnp.asarray(w))


UNARY = [
    ("exp", lambda xp, x: xp.exp(x)),
    ("log", lambda xp, x: xp.log(x * x + 1)),
    ("log1p", lambda xp, x: xp.log1p(x * x)),
    ("expm1", lambda xp, x: xp.expm1(x)),
    ("sin_cos", lambda xp, x: xp.sin(x) * xp.cos(x)),
    ("tan", lambda xp, x: xp.tan(x * 0.3)),
    ("tanh", lambda xp, x: xp.tanh(x)),
    ("sqrt", lambda xp, x: xp.sqrt(x * x + 1)),
    ("abs", lambda xp, x: xp.abs(x) * x),
    ("neg_pow", lambda xp, x: -(x ** 3) + x ** 2),
    ("divide", lambda xp, x: 1 / (x * x + 2)),
    ("maximum", lambda xp, x: xp.maximum(x, 0.1) + xp.minimum(x, -0.2)),
    ("logistic", lambda xp, x: (1 / (1 + np.exp(-x))) if xp is np else lax.logistic(x)),
    ("erf", lambda xp, x: x * 0 + (np.vectorize(__import__("math").erf)(x) if xp is np
                                   else jnp.erf(x))),
    ("inverse_trig", lambda xp, x: xp.arcsin(xp.tanh(x)) + xp.arccos(xp.tanh(x) * 0.9) +
     xp.arctan(x)),
    ("hyperbolic", lambda xp, x: xp.sinh(x) + xp.cosh(x) + xp.arcsinh(x) +
     xp.arccosh(x * x + 1.5) + xp.arctanh(xp.tanh(x) * 0.9)),
    ("cbrt", lambda xp, x: xp.cbrt(x * x + 1)),
]


@pytest.mark.parametrize("name,f", UNARY, ids=[u[0] for u in UNARY])
def test_grad_elementwise(c, mesh, name, f):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    _check(c, mesh, lambda xp, x: _sm(xp, f(xp, x)), [x], [P("X", "Y")], rng)


SHAPES = [
    ("sum_axis", lambda xp, x: _sm(xp, x.sum(axis=1))),
    ("mean_keep", lambda xp, x: _sm(xp, x.mean(axis=0, keepdims=True))),
    ("max_min", lambda xp, x: _sm(xp, x.max(axis=1)) + _sm(xp, x.min(axis=0))),
    ("max_all", lambda xp, x: x.max() * 3),
    ("prod", lambda xp, x: _sm(xp, xp.prod(x[:, :6] * 0.5 + 1, axis=1)) +
     xp.prod(xp.where(x[:2, :3] > 0, x[:2, :3], 0.0))),
    ("reshape_T", lambda xp, x: _sm(xp, x.reshape(2, 4, 16).T)),
    ("transpose", lambda xp, x: _sm(xp, xp.transpose(x[None], (2, 0, 1)))),
    ("expand_squeeze", lambda xp, x: _sm(xp, xp.squeeze(xp.expand_dims(x, 0), 0))),
    ("broadcast", lambda xp, x: _sm(xp, xp.broadcast_to(x[:, :1], (8, 16)))),
    ("index", lambda xp, x: _sm(xp, x[2:6, 3]) + x[1, -1] * 2),
    ("concatenate", lambda xp, x: _sm(xp, xp.concatenate([x[:, :4], x * 2, x[:, 8:]], axis=1))),
    ("where", lambda xp, x: _sm(xp, xp.where(x > 0, x * x, -x))),
    ("cumsum", lambda xp, x: _sm(xp, xp.cumsum(x, axis=1))),
    # flattened: of an operand replicated over X (JAX refuses a sharded one)
    ("cumsum_flat", lambda xp, x: _sm(xp, xp.cumsum(x[:2].sum(0)))),
    ("cumprod", lambda xp, x: _sm(xp, xp.cumprod(x * 0.3 + 1, axis=1)) +
     _sm(xp, xp.cumprod(x[:4, :5].sum(0) * 0.1 + 1))),
    ("cummax_cummin", lambda xp, x: _sm(xp, _cum(xp, "max", x, 1)) +
     _sm(xp, _cum(xp, "min", x[:, :7], 1)) + _sm(xp, _cum(xp, "max", x[:4, :5], None))),
    ("flip", lambda xp, x: _sm(xp, xp.flip(x, 1) * x)),
    ("strided_slices", lambda xp, x: _sm(xp, x[:, 1:12:3] * 2) + _sm(xp, x[::-2, 14:1:-4] ** 2)
     + _sm(xp, x[::2, ::-1] * x[1::2, :])),
    ("astype", lambda xp, x: _sm(xp, x.astype(np.float64 if xp is np else np.float32) * 2)),
    ("softmax", lambda xp, x: _sm(xp, xp.exp(x) / xp.exp(x).sum(-1, keepdims=True))),
    ("var", lambda xp, x: _sm(xp, x.var(axis=1))),
    ("sort_median", lambda xp, x: _sm(xp, xp.sort(x, axis=1)) + _sm(xp, xp.median(x, axis=1))),
    ("segment_sum", lambda xp, x: _sm(xp, _np_segment_sum(x) if xp is np else
                                      shmap.ops.segment_sum(x, jnp.asarray(SEG), 5,
                                                            out_sharding=P()))),
    ("take_axis1", lambda xp, x: _sm(xp, xp.take(x, np.array([3, 0, 3, 15]), axis=1)
                                     if xp is np else
                                     jnp.take(x, jnp.asarray(np.array([3, 0, 3, 15],
                                                                      np.int32)), axis=1))),
]


SEG = np.array([0, 4, 4, -1, 2, 5, 0, 1], np.int32)  # -1 and 5: dropped


def _cum(xp, which, x, axis):
    """cummax / cummin: numpy's ufunc accumulate, shmap's op."""
    if xp is np:
        x = x.reshape(-1) if axis is None else x
        return getattr(np, which + "imum").accumulate(x, axis=axis or 0)
    return getattr(jnp, "cum" + which)(x, axis=axis)


def _np_segment_sum(x):
    out = np.zeros((5,) + x.shape[1:])
    for r, k in enumerate(SEG):
        if 0 <= k < 5:
            out[k] += x[r]
    return out


@pytest.mark.parametrize("name,f", SHAPES, ids=[u[0] for u in SHAPES])
def test_grad_shapes_and_reductions(c, mesh, name, f):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    _check(c, mesh, f, [x], [P("X", None)], rng)


PRODUCTS = [
    ("matmul", lambda xp, a, b: _sm(xp, a @ b), (8, 16), (16, 12)),
    ("matvec", lambda xp, a, b: _sm(xp, a @ b), (8, 16), (16,)),
    ("dot", lambda xp, a, b: _sm(xp, xp.dot(a, b)), (8, 16), (16, 12)),
    ("batched", lambda xp, a, b: _sm(xp, a @ b), (4, 8, 16), (4, 16, 12)),
    ("einsum", lambda xp, a, b: _sm(xp, xp.einsum("ij,kj->ik", a, b)), (8, 16), (12, 16)),
    ("einsum_lone", lambda xp, a, b: _sm(xp, xp.einsum("ij,k->k", a, b)), (8, 16), (12,)),
    ("einsum_ellipsis", lambda xp, a, b: _sm(xp, xp.einsum("...ij,...jk->...ik", a, b)),
     (4, 8, 16), (4, 16, 12)),
    ("broadcast_add", lambda xp, a, b: _sm(xp, (a * b) + b), (8, 16), (16,)),
    ("power", lambda xp, a, b: _sm(xp, (a * a + 1) ** (b * 0.5)), (8, 16), (16,)),
    ("arctan2", lambda xp, a, b: _sm(xp, xp.arctan2(a, b)), (8, 16), (16,)),
]


@pytest.mark.parametrize("name,f,sa,sb", PRODUCTS, ids=[u[0] for u in PRODUCTS])
def test_grad_products(c, mesh, name, f, sa, sb):
    """Both operands' gradients, laid out as the operands (a sharded
    contraction's completes across devices)."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    sa_spec = {2: P("X", None), 3: P(None, "X", None)}[len(sa)]
    sb_spec = {1: P(), 2: P(None, "Y") if name != "einsum" else P("Y", None),
               3: P(None, None, "Y")}[len(sb)]
    if name in ("broadcast_add", "power", "arctan2"):
        sb_spec = P()
    _check(c, mesh, f, [a, b], [sa_spec, sb_spec], rng, argnums=(0, 1))


def test_grad_gathers(c, mesh):
    """take and take_along_axis (an embedding lookup, a picked log-prob):
    their gradients sum the cotangents of every position taken."""
    rng = np.random.default_rng(4)
    emb = rng.standard_normal((10, 16)).astype(np.float32)
    tok = rng.integers(0, 10, (8, 4)).astype(np.int32)
    tok_a = c.device_put(tok, NamedSharding(mesh, P("X")))

    def f(xp, e, t):
        x = e[t] if xp is np else e.at[t].get(out_sharding=P("X", None, None))
        logp = x - xp.log(xp.exp(x).sum(-1, keepdims=True))
        return -xp.take_along_axis(logp, (t % 16)[..., None], axis=-1).mean()
    _check(c, mesh, lambda xp, e: f(xp, e, tok if xp is np else tok_a), [emb], [P()], rng)


def test_grad_mlp_explicit_sharding(c, mesh):
    """A sharded MLP's loss: value_and_grad of a params dict, each gradient
    laid out as its parameter, equal to numpy's analytic gradient."""
    rng = np.random.default_rng(5)
    xa = rng.standard_normal((8, 16)).astype(np.float32)
    pn = {"w1": rng.standard_normal((16, 32)).astype(np.float32) * 0.3,
          "b": rng.standard_normal(32).astype(np.float32),
          "w2": rng.standard_normal((32, 4)).astype(np.float32) * 0.3}
    specs = {"w1": P(None, "Y"), "b": P("Y"), "w2": P("Y", None)}
    params = {k: c.device_put(v, NamedSharding(mesh, specs[k])) for k, v in pn.items()}
    x = c.device_put(xa, NamedSharding(mesh, P("X", None)))

    def loss(p, x):
        h = jnp.tanh(x @ p["w1"] + p["b"])
        o = jnp.einsum("bh,ho->bo", h, p["w2"], out_sharding=P("X", None))
        return jnp.mean(o * o)
    v, g = shmap.jit(shmap.value_and_grad(loss))(params, x)
    h = np.tanh(xa @ pn["w1"] + pn["b"])
    o = h @ pn["w2"]
    go = 2 * o / o.size
    gh = go @ pn["w2"].T * (1 - h * h)
    want = {"w1": xa.T @ gh, "b": gh.sum(0), "w2": h.T @ go}
    assert np.isclose(float(v), (o * o).mean(), rtol=1e-5)
    for k in pn:
        assert g[k].type == params[k].type
        assert np.allclose(np.asarray(g[k]), want[k], atol=1e-5), k
    # at once (outside jit), argnums, has_aux, and a step of SGD in a jit
    gx = shmap.grad(loss, argnums=1)(params, x)
    assert gx.type == x.type and np.allclose(np.asarray(gx), gh @ pn["w1"].T, atol=1e-5)
    (val, aux), (gp, gx2) = shmap.value_and_grad(lambda p, x: (loss(p, x), x.sum()),
                                                 argnums=(0, 1), has_aux=True)(params, x)
    assert np.isclose(float(aux), xa.sum(), rtol=1e-5)
    assert np.allclose(np.asarray(gp["b"]), want["b"], atol=1e-5)

    @shmap.jit
    def step(p, x):
        g = shmap.grad(shmap.checkpoint(loss))(p, x)  # jax.checkpoint: the same gradient
        return shmap.tree.map(lambda w, dw: w - 0.1 * dw, p, g)
    p2 = step(params, x)
    assert p2["w1"].type == params["w1"].type
    assert float(loss(p2, x)) < float(v)


def test_grad_auto_mesh(c):
    """On a mesh of Auto axes the gradients come out of automatic mode."""
    mesh = c.make_mesh((2, 4), ("X", "Y"), axis_types=(shmap.Auto, shmap.Auto))
    rng = np.random.default_rng(6)
    a = rng.standard_normal((8, 16)).astype(np.float32)
    b = rng.standard_normal((16, 4)).astype(np.float32)
    _check(c, mesh, lambda xp, a, b: _sm(xp, xp.tanh(a @ b)), [a, b],
           [P("X", None), P(None, "Y")], rng, argnums=(0, 1))


def test_grad_auto_axes_closure(c):
    """grad reaches a value an auto_axes function closes over (it was 0:
    no backward was recorded for it), alone and also passed in."""
    m = c.make_mesh((2,), ("x",))
    with shmap.use_mesh(m):
        def f(p, x):
            return shmap.auto_axes(lambda x: p * x, out_sharding=P())(x)
        assert float(shmap.grad(f)(1.0, 2.0)) == 2.0
        assert float(shmap.grad(lambda p, x: f(p, x * p))(1.0, 2.0)) == 4.0
        gp, gx = shmap.jit(shmap.grad(lambda p, x: shmap.auto_axes(
            lambda x: (p * x).sum(), out_sharding=P())(x), argnums=(0, 1)))(
                3.0, jnp.arange(4.0))
        assert float(np.asarray(gp)) == 6.0 and np.array_equal(np.asarray(gx), [3.0] * 4)


def test_grad_unused_and_stop_gradient(c, mesh):
    x = c.device_put(np.arange(8, dtype=np.float32), NamedSharding(mesh, P("X")))
    y = c.device_put(np.ones(8, np.float32), NamedSharding(mesh, P("X")))
    gx, gy = shmap.grad(lambda x, y: jnp.sum(x * lax.stop_gradient(x)), argnums=(0, 1))(x, y)
    assert np.array_equal(np.asarray(gx), np.arange(8))  # not 2x: one factor is stopped
    assert np.array_equal(np.asarray(gy), np.zeros(8)) and gy.type == y.type
    # through an integer cast, a comparison or floor: no derivative, as JAX's
    g = shmap.grad(lambda x: jnp.sum(x.astype(np.int32) * x + (x > 3) * x + jnp.floor(x)))(x)
    assert np.array_equal(np.asarray(g), np.arange(8) + (np.arange(8) > 3))


def test_grad_refusals(c, mesh):
    """JAX's sentences for what grad cannot take; shmap's for what it does
    not differentiate (and a second order through a shard_map, which it
    does)."""
    x = c.device_put(np.ones((8, 4), np.float32), NamedSharding(mesh, P("X")))
    i = c.device_put(np.ones(8, np.int32), NamedSharding(mesh, P("X")))
    with pytest.raises(shmap.InvalidArgument,
                       match=r"Gradient only defined for scalar-output functions\. Output had "
                             r"shape: \(8, 4\)\."):
        shmap.grad(lambda x: x * 2)(x)
    with pytest.raises(shmap.InvalidArgument,
                       match=r"grad requires real- or complex-valued inputs .* but got int32"):
        shmap.grad(lambda i: jnp.sum(i))(i)
    # a second derivative through a shard_map function: its backward is a
    # shard_map function of the program, differentiated as any call
    m4 = c.make_mesh((4,), ("i",))

    @shmap.shard_map(mesh=m4, in_specs=P("i"), out_specs=P())
    def inner(v):
        return lax.psum(jnp.sum(jnp.sin(v)), "i")
    v8 = np.linspace(0, 2, 8, dtype=np.float32)
    g2 = shmap.grad(lambda x: jnp.sum(shmap.grad(inner)(x)))(
        c.device_put(v8, NamedSharding(m4, P("i"))))
    assert np.allclose(np.asarray(g2), -np.sin(v8), atol=1e-6)
    with pytest.raises(shmap.InvalidArgument, match=r"has_aux=True needs .* pair"):
        shmap.grad(lambda x: jnp.sum(x), has_aux=True)(x)
    with pytest.raises(shmap.InvalidArgument, match=r"argnums=2 requires at least 3 positional"):
        shmap.grad(lambda x: jnp.sum(x), argnums=2)(x)


def _jax_scan_jacobian(x, which):
    """d out / d x of a running max or min of the 1-D x, as JAX
    differentiates it: the JVP of lax.associative_scan (adjacent pairs,
    the pairs' scan recursively, the even positions from it) with lax.max's
    balanced ties (half to each side of a tied combine), in float64 with
    numpy's strided slices."""
    pick = np.maximum if which == "max" else np.minimum

    def combine(a, b):
        (va, ta), (vb, tb) = a, b
        v = pick(va, vb)
        wa = (va == v) / np.where(vb == v, 2.0, 1.0)
        wb = (vb == v) / np.where(va == v, 2.0, 1.0)
        return v, wa[:, None] * ta + wb[:, None] * tb

    def scan(v, t):
        n = len(v)
        if n < 2:
            return v, t
        odd = scan(*combine((v[0:-1:2], t[0:-1:2]), (v[1::2], t[1::2])))
        if n % 2 == 0:
            even = combine((odd[0][:-1], odd[1][:-1]), (v[2::2], t[2::2]))
        else:
            even = combine(odd, (v[2::2], t[2::2]))
        ov, ot = np.empty(n), np.empty((n, t.shape[1]))
        ov[0::2], ot[0::2] = np.concatenate([v[:1], even[0]]), np.concatenate([t[:1], even[1]])
        ov[1::2], ot[1::2] = odd
        return ov, ot
    return scan(np.asarray(x, np.float64), np.eye(len(x)))[1]


def test_grad_cumulative_ties_and_zeros(c, mesh):
    """cummax / cummin where values tie: the cotangent is shared as JAX's
    JVP of its associative scan shares it (not all to the first, nor to the
    last, nor as a left-to-right scan would); lax.cummax(reverse=True) as
    the scan of the flipped array. cumprod with zeros: the exact products of
    the others, no division."""
    rows = np.array([[1, 1, 1, 1, 1, 1, 1], [3, 1, 3, 2, 3, 0, 3], [0, 2, 2, -1, 2, 5, 5],
                     [2, 2, 1, 1, 0, 0, 0], [4, 4, 4, 4, 9, 9, 9], [1, 2, 3, 4, 5, 6, 7],
                     [7, 7, 6, 7, 7, 6, 7], [0, 0, 1, 0, 0, 1, 1]], np.float32)
    w = np.linspace(0.5, 2.0, 7).astype(np.float32)
    x = c.device_put(rows, NamedSharding(mesh, P("X", None)))
    for which in ("max", "min"):
        for rev in (False, True):
            op = getattr(lax, "cum" + which)
            g = shmap.grad(lambda x: jnp.sum(op(x, axis=1, reverse=rev) * jnp.asarray(w)))(x)
            assert g.type == x.type
            for r, row in zip(np.asarray(g), rows):
                src = row[::-1] if rev else row
                want = w[::-1] @ _jax_scan_jacobian(src, which) if rev else \
                    w @ _jax_scan_jacobian(src, which)
                want = want[::-1] if rev else want
                assert np.allclose(r, want, atol=1e-6), (which, rev, row, r, want)
    # a left-to-right scan would give the last of four ties 1/2, JAX's tree 1/4
    assert np.allclose(np.ones(4) @ _jax_scan_jacobian(np.ones(4), "max"),
                       [2, 1, 0.75, 0.25])
    z = rows - 1  # a zero or two in most rows
    g = shmap.grad(lambda x: jnp.sum(jnp.cumprod(x, axis=1) * jnp.asarray(w)))(
        c.device_put(z, NamedSharding(mesh, P("X", None))))
    want = np.zeros_like(z, dtype=np.float64)
    for i, row in enumerate(z.astype(np.float64)):
        for j in range(7):
            for k in range(j, 7):
                want[i, j] += w[k] * np.prod(np.delete(row[:k + 1], j))
    assert np.allclose(np.asarray(g), want, atol=1e-4)


def test_grad_nondifferentiable_pass_through(c, mesh):
    """argmax, argmin and comparisons carry no derivative (grad passes
    through them, as JAX's); pmax / pmin of a differentiated value in a
    shard_map body get JAX's sentence (it defines no JVP for them), while
    pmax of a value grad does not follow is taken."""
    rng = np.random.default_rng(12)
    xa = rng.standard_normal((8, 16)).astype(np.float32)

    def f(xp, x):
        i = xp.argmax(x, axis=1)[:, None]
        j = xp.argmin(x, axis=1)[:, None]
        top = xp.take_along_axis(x, i, axis=1) - xp.take_along_axis(x, j, axis=1)
        return _sm(xp, top * 2 + (x > 0.5) * x + (x <= x[:, :1]) * 3)
    _check(c, mesh, f, [xa], [P("X", None)], rng)

    m4 = c.make_mesh((4,), ("i",))
    x = c.device_put(xa, NamedSharding(m4, P("i")))
    for coll in ("pmax", "pmin"):
        @shmap.shard_map(mesh=m4, in_specs=P("i"), out_specs=P("i"))
        def bad(x):
            return shmap.grad(lambda v: jnp.sum(getattr(lax, coll)(v, "i")))(x)
        with pytest.raises(shmap.Unimplemented,
                           match=rf"^Differentiation rule for '{coll}' not implemented$"):
            bad(x)

    @shmap.shard_map(mesh=m4, in_specs=P("i"), out_specs=P("i"))
    def scaled(x):  # x / pmax(|x|) with the max held fixed, as JAX takes it
        return shmap.grad(lambda v: jnp.sum(v * v / lax.pmax(lax.stop_gradient(
            jnp.max(jnp.abs(v))), "i")))(x)
    assert np.allclose(np.asarray(scaled(x)), 2 * xa / np.abs(xa).max(), rtol=1e-5)


def test_tree_util():
    """jax.tree_util's functions on the pytrees shmap takes (no cluster)."""
    from shmap import tree_util
    t = {"b": (1, [2, None]), "a": 3}
    leaves, d = tree_util.tree_flatten(t)
    assert leaves == [3, 1, 2]  # dict keys sorted; None an empty subtree
    assert repr(d) == "PyTreeDef({'a': *, 'b': (*, [*, None])})" and d.num_leaves == 3
    assert d.unflatten([30, 10, 20]) == {"a": 30, "b": (10, [20, None])}
    assert shmap.tree.map(lambda x, y: x * y, t, d.unflatten([2, 3, 4])) == \
        {"b": (3, [8, None]), "a": 6}
    assert shmap.tree.leaves([1, (2,)], is_leaf=lambda v: isinstance(v, tuple)) == [1, (2,)]
    with pytest.raises(ValueError, match=r"structure \{'a': \*\} where \{'a': \*, 'b'"):
        shmap.tree.map(lambda x, y: x, t, {"a": 1})
    with pytest.raises(ValueError, match="Too few leaves"):
        d.unflatten([1])


def _batch_and_weights(c, seed):
    """A mesh of 4 devices 'i', a batch x (16, 8) sharded over it and
    weights w (8, 3) replicated: (mesh, x's data, w's data, x, w)."""
    mesh = c.make_mesh((4,), ("i",))
    rng = np.random.default_rng(seed)
    xa = rng.standard_normal((16, 8)).astype(np.float32)
    wa = rng.standard_normal((8, 3)).astype(np.float32)
    return (mesh, xa, wa, c.device_put(xa, NamedSharding(mesh, P("i"))),
            c.device_put(wa, NamedSharding(mesh, P())))


def test_grad_in_shard_map_data_parallel(c):
    """grad inside a shard_map body, JAX's data-parallel pattern: the
    parameter is invariant, the batch varies, the loss is a pmean; the
    gradient of the invariant parameter comes out summed over the devices
    (the transpose of the pvary where it met the batch)."""
    mesh, xa, wa, x, w = _batch_and_weights(c, 7)

    @shmap.shard_map(mesh=mesh, in_specs=(P(), P("i")), out_specs=(P(), P()))
    def step(w, x):
        def loss(w):
            return lax.pmean(jnp.sum((x @ w) ** 2), "i")
        return shmap.value_and_grad(loss)(w)
    v, g = step(w, x)
    assert np.isclose(float(v), ((xa @ wa) ** 2).sum() / 4, rtol=1e-5)
    assert g.type == "f32[8,3]"
    assert np.allclose(np.asarray(g), 2 * xa.T @ (xa @ wa) / 4, rtol=1e-4, atol=1e-4)

    # psum of an invariant value adds 4 equal copies: so does its gradient
    @shmap.shard_map(mesh=mesh, in_specs=P(), out_specs=(P(), P()))
    def copies(w):
        return shmap.value_and_grad(lambda w: lax.psum(jnp.sum(w * w), "i"))(w)
    v, g = copies(w)
    assert np.isclose(float(v), 4 * (wa * wa).sum(), rtol=1e-5)
    assert np.allclose(np.asarray(g), 8 * wa, rtol=1e-5)


COLLECTIVES = [
    ("all_gather", lambda v: lax.all_gather(v, "i", tiled=True)),
    ("all_gather_stacked", lambda v: lax.all_gather(v, "i", axis=1)),
    ("psum_scatter", lambda v: lax.psum_scatter(v, "i", scatter_dimension=1, tiled=True)),
    ("ppermute", lambda v: lax.ppermute(v, "i", [(k, (k + 1) % 4) for k in range(4)])),
    ("all_to_all", lambda v: lax.all_to_all(v, "i", 0, 1, tiled=True)),
    ("psum_pvary", lambda v: lax.pvary(lax.psum(v, "i"), "i") * 2),
]


@pytest.mark.parametrize("name,coll", COLLECTIVES, ids=[u[0] for u in COLLECTIVES])
def test_grad_through_collectives(c, name, coll):
    """Each collective's transpose: for the loss L(x) = psum(sum(coll(x) *
    coll(z))), linear in x, the gradient g satisfies <g, d> = L(x + d) -
    L(x) for any d, both sides computed by the service."""
    mesh = c.make_mesh((4,), ("i",))
    rng = np.random.default_rng(8)
    xa, za, da = (rng.standard_normal((16, 8)).astype(np.float32) for _ in range(3))
    put = lambda a: c.device_put(a, NamedSharding(mesh, P("i")))  # noqa: E731

    @shmap.shard_map(mesh=mesh, in_specs=(P("i"), P("i")), out_specs=(P(), P("i")))
    def f(x, z):
        def loss(x):
            return lax.psum(jnp.sum(coll(x) * coll(z)), "i")
        return shmap.value_and_grad(loss)(x)
    v0, g = f(put(xa), put(za))
    v1, _ = f(put(xa + da), put(za))
    assert g.type == "f32[16@i,8]"
    want = float(v1) - float(v0)
    got = float((np.asarray(g, np.float64) * da).sum())
    assert abs(got - want) <= 1e-3 * max(1.0, abs(want)), (got, want)


def test_grad_of_jit_calling_shard_map(c):
    """jax.grad of a jit loss that calls shard_map functions (one result,
    several results, collectives inside): each call's backward is a second
    shard_map function of the program (the body run again with its
    backward pass, as JAX's shard_map transpose), against numpy."""
    mesh, xa, wa, x, w = _batch_and_weights(c, 9)

    @shmap.shard_map(mesh=mesh, in_specs=(P("i"), P()), out_specs=(P("i"), P()))
    def layer(x, w):
        y = jnp.tanh(x @ w)
        return y, lax.psum(jnp.sum(y * y), "i")

    @shmap.shard_map(mesh=mesh, in_specs=P("i"), out_specs=P())
    def gathered_sum(y):  # every device sums the whole of y: 4 times sum(y ** 2)
        return lax.psum(jnp.sum(lax.all_gather(y, "i", tiled=True) ** 2), "i") / 16

    def loss(w, x):
        y, s = layer(x, w)
        return gathered_sum(y) + 0.5 * s + jnp.sum(y)
    v, (gw, gx) = shmap.jit(shmap.value_and_grad(loss, argnums=(0, 1)))(w, x)
    y = np.tanh(xa @ wa)
    assert np.isclose(float(v), 0.75 * (y * y).sum() + y.sum(), rtol=1e-5)
    gy = 1.5 * y + 1
    gz = gy * (1 - y * y)
    assert gw.type == w.type and gx.type == x.type
    assert np.allclose(np.asarray(gw), xa.T @ gz, rtol=1e-4, atol=1e-4)
    assert np.allclose(np.asarray(gx), gz @ wa.T, rtol=1e-4, atol=1e-4)


def _lax_or(np_fn, lax_fn):
    return lambda xp, x: np_fn(x) if xp is np else lax_fn(x)


def _np_dus(x, u, at):
    y = x.copy()
    y[tuple(slice(a, a + n) for a, n in zip(at, u.shape))] = u
    return y


MOVES = [
    ("slice", _lax_or(lambda x: x[1:5, 2:10], lambda x: lax.slice(x, (1, 2), (5, 10)))),
    ("pad", lambda xp, x: xp.pad(x, ((1, 2), (0, 3)))),
    ("pad_int", lambda xp, x: xp.pad(x, 1)[:, ::-1] if xp is np else jnp.flip(jnp.pad(x, 1), 1)),
    ("roll", lambda xp, x: xp.roll(x, (2, -3), axis=(0, 1))),
    ("cumulative_axis0", lambda xp, x: xp.cumprod(x[:, :4] * 0.3 + 1, axis=0) +
     _cum(xp, "min", x[:, 4:8], 0) + _cum(xp, "max", x[:, 9:13], 0)),
    ("dynamic_slice", _lax_or(lambda x: x[2:5, 4:8],
                              lambda x: lax.dynamic_slice(x, (2, 4), (3, 4)))),
    ("dynamic_update_slice", _lax_or(
        lambda x: _np_dus(x, x[:2, :3] * 3, (5, 10)),
        lambda x: lax.dynamic_update_slice(x, x[:2, :3] * 3, (5, 10)))),
]


@pytest.mark.parametrize("name,f", MOVES, ids=[u[0] for u in MOVES])
def test_grad_moves(c, mesh, name, f):
    """The ops that cut, pad, shift or repeat blocks."""
    rng = np.random.default_rng(10)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    _check(c, mesh, lambda xp, x: _sm(xp, f(xp, x)), [x], [P()], rng)


def test_grad_tile_in_shard_map(c):
    """tile (no sharding rule in a jit body, as JAX's explicit mode) inside
    a shard_map body: its gradient sums the tiles."""
    mesh = c.make_mesh((4,), ("i",))
    x = c.device_put(np.arange(16, dtype=np.float32).reshape(8, 2),
                     NamedSharding(mesh, P("i")))
    w = np.arange(2 * 2 * 6, dtype=np.float32).reshape(2, 2, 6)

    @shmap.shard_map(mesh=mesh, in_specs=(P("i"), P()), out_specs=P("i"))
    def f(x, w):
        return shmap.grad(lambda x: jnp.sum(jnp.tile(x, (2, 1, 3)) * w))(x)
    g = f(x, c.device_put(w, NamedSharding(mesh, P())))
    want = w.reshape(2, 2, 3, 2).sum(axis=(0, 2))  # each block's tiles
    assert np.array_equal(np.asarray(g), np.tile(want, (4, 1)))


def test_vjp(c, mesh):
    """jax.vjp in a jit body: a non-scalar output's cotangent pulled back to
    both arguments (pytrees as they are), twice from one forward pass; and
    at once (outside a jit), as JAX's eager vjp."""
    rng = np.random.default_rng(11)
    a = rng.standard_normal((8, 16)).astype(np.float32)
    b = rng.standard_normal((16,)).astype(np.float32)
    u = rng.standard_normal((8, 16)).astype(np.float32)
    x = c.device_put(a, NamedSharding(mesh, P("X", None)))
    y = c.device_put(b, NamedSharding(mesh, P()))
    ct = c.device_put(u, NamedSharding(mesh, P("X", None)))

    @shmap.jit
    def f(x, y, ct):
        out, pull = shmap.vjp(lambda p: jnp.tanh(p["x"] * p["y"]), {"x": x, "y": y})
        (g1,) = pull(ct)
        (g2,) = pull(2 * ct)
        return out, g1["x"], g1["y"], g2["y"]
    out, gx, gy, gy2 = f(x, y, ct)
    d = u * (1 - np.tanh(a * b) ** 2)
    assert np.allclose(np.asarray(out), np.tanh(a * b), atol=1e-6)
    assert gx.type == x.type and gy.type == y.type
    assert np.allclose(np.asarray(gx), d * b, atol=1e-5)
    assert np.allclose(np.asarray(gy), (d * a).sum(0), atol=1e-4)
    assert np.allclose(np.asarray(gy2), 2 * (d * a).sum(0), atol=1e-4)
    out, pull = shmap.vjp(lambda p, q: jnp.tanh(p * q), x, y)
    assert np.allclose(np.asarray(out), np.tanh(a * b), atol=1e-6)
    gx, gy = pull(ct)
    assert gx.type == x.type and gy.type == y.type
    assert np.allclose(np.asarray(gx), d * b, atol=1e-5)
    assert np.allclose(np.asarray(gy), (d * a).sum(0), atol=1e-4)
    out, pull, aux = shmap.vjp(lambda p: (p * 2, p.sum()), x, has_aux=True)
    assert np.allclose(np.asarray(aux), a.sum(), rtol=1e-5)
    assert np.allclose(np.asarray(pull(ct)[0]), 2 * u)


@shmap.custom_vjp
def _log1pexp(x):
    """JAX's custom_vjp example: log(1 + exp(x)), its gradient computed
    stably (exp overflows float32 past 88)."""
    return jnp.log(1. + jnp.exp(x))


def _log1pexp_fwd(x):
    return _log1pexp(x), x


def _log1pexp_bwd(x, g):
    return (g * (1 - 1 / (1 + jnp.exp(x))),)


_log1pexp.defvjp(_log1pexp_fwd, _log1pexp_bwd)


def _sigmoid64(x):
    return 1 / (1 + np.exp(-np.asarray(x, np.float64)))


def test_custom_vjp_log1pexp(c, mesh):
    """jax.custom_vjp's stable log1pexp: its gradient where f's own ops give
    NaN (exp(100) overflows: inf / inf), against numpy's sigmoid in
    float64; central differences where f is finite; the value is f's."""
    x = np.array([-200, -30, -3, 0, 1, 5, 50, 100], np.float32)
    xa = c.device_put(x, NamedSharding(mesh, P("X")))
    g = shmap.grad(lambda x: jnp.sum(_log1pexp(x)))(xa)
    assert g.type == xa.type
    assert np.allclose(np.asarray(g), _sigmoid64(x), rtol=1e-6, atol=1e-7)
    body = shmap.grad(lambda x: jnp.sum(jnp.log(1. + jnp.exp(x))))(xa)
    assert np.isnan(np.asarray(body)[-1])  # what the rule is there for
    v = np.asarray(_log1pexp(xa))  # outside grad: f, here at once on an Array
    assert np.allclose(v[:7], np.log1p(np.exp(x[:7].astype(np.float64))), rtol=1e-5)
    rng = np.random.default_rng(13)
    xs = rng.standard_normal((8, 16)).astype(np.float32) * 3
    _check(c, mesh, lambda xp, x: _sm(xp, (np.log1p(np.exp(x)) if xp is np else _log1pexp(x))
                                      * x), [xs], [P("X", "Y")], rng)


def test_custom_vjp_clip_gradient_and_nondiff_argnums(c, mesh):
    """JAX's gradient-clipping example: the bounds are nondiff_argnums
    (Python values, given to bwd first), the forward is the identity and
    the backward clips the cotangent; a rule that returns a tuple with
    None for an argument (zeros) and a list; JAX's sentences for a
    traced nondiff argument, a bwd of the wrong structure and no defvjp."""
    from functools import partial

    @partial(shmap.custom_vjp, nondiff_argnums=(0, 1))
    def clip_gradient(lo, hi, x):
        return x

    def fwd(lo, hi, x):
        return x, None

    def bwd(lo, hi, _, g):
        return (jnp.clip(g, lo, hi),)
    clip_gradient.defvjp(fwd, bwd)
    rng = np.random.default_rng(14)
    xa = rng.standard_normal((8, 16)).astype(np.float32)
    w = np.linspace(-2, 2, 128).reshape(8, 16).astype(np.float32)
    x = c.device_put(xa, NamedSharding(mesh, P("X", "Y")))

    @shmap.jit
    def f(x):
        y = clip_gradient(-0.75, 0.5, x * 3)
        return jnp.sum(jnp.sin(y) * jnp.asarray(w)), shmap.grad(
            lambda x: jnp.sum(jnp.sin(clip_gradient(-0.75, 0.5, x * 3)) * jnp.asarray(w)))(x)
    v, g = f(x)
    assert np.isclose(float(v), (np.sin(3 * xa) * w).sum(), rtol=1e-4)
    assert g.type == x.type
    assert np.allclose(np.asarray(g), 3 * np.clip(np.cos(3 * xa) * w, -0.75, 0.5), atol=1e-5)

    @shmap.custom_vjp
    def scaled(x, y):  # y's cotangent: None (zeros); a list is taken as the tuple
        return x * y

    scaled.defvjp(lambda x, y: (x * y, y), lambda y, g: [g * y * 10, None])
    gx, gy = shmap.grad(lambda x, y: jnp.sum(scaled(x, y)), argnums=(0, 1))(x, x)
    assert np.allclose(np.asarray(gx), 10 * xa, atol=1e-5)
    assert np.array_equal(np.asarray(gy), np.zeros_like(xa)) and gy.type == x.type

    @partial(shmap.custom_vjp, nondiff_argnums=(1,))
    def bad_nondiff(x, y):
        return x * y
    bad_nondiff.defvjp(lambda x, y: (x * y, None), lambda y, r, g: (g,))
    with pytest.raises(shmap.InvalidArgument, match=r"Found a JAX Tracer object passed as an "
                                                    r"argument to a custom_vjp function"):
        shmap.grad(lambda x: jnp.sum(bad_nondiff(x, x)))(x)
    scaled.defvjp(lambda x, y: (x * y, y), lambda y, g: (g,))
    with pytest.raises(shmap.InvalidArgument, match=r"Custom VJP bwd rule must produce an "
                                                    r"output with the same container"):
        shmap.grad(lambda x: jnp.sum(scaled(x, x)))(x)
    with pytest.raises(shmap.InvalidArgument,
                       match=r"No VJP defined for custom_vjp function none using defvjp\."):
        none = shmap.custom_vjp(_named("none"))
        shmap.grad(lambda x: jnp.sum(none(x)))(x)


def _named(name):
    def f(x):
        return x
    f.__name__ = name
    return f


def test_custom_vjp_pytrees_jit_shard_map_vmap(c, mesh):
    """custom_vjp with pytrees of arguments, outputs and residuals, whose
    bwd is deliberately not f's derivative (so that which one ran shows):
    under grad its bwd, run on the residuals; outside grad f (in a jit, at
    once, under vmap); vmap of grad gives per-example custom cotangents,
    grad of a vmap'd loss their sum; in a shard_map body."""
    @shmap.custom_vjp
    def f(p, x):
        return {"y": p["w"] * x, "z": (jnp.sin(p["b"]),)}

    def fwd(p, x):
        return f(p, x), {"w": p["w"], "x": x, "cos": (jnp.cos(p["b"]),)}

    def bwd(res, ct):  # twice the true cotangents; none for x
        gw = 2 * ct["y"] * res["x"]
        gb = 2 * ct["z"][0] * res["cos"][0]
        return {"w": gw, "b": gb}, None
    f.defvjp(fwd, bwd)
    rng = np.random.default_rng(15)
    wa, ba, xa = (rng.standard_normal((8, 4)).astype(np.float32) for _ in range(3))
    put = lambda a: c.device_put(a, NamedSharding(mesh, P("X")))  # noqa: E731
    p, x = {"w": put(wa), "b": put(ba)}, put(xa)

    def loss(p, x):
        o = f(p, x)
        return jnp.sum(o["y"] * 3) + jnp.sum(o["z"][0] ** 2)
    gp, gx = shmap.jit(shmap.grad(loss, argnums=(0, 1)))(p, x)
    assert np.allclose(np.asarray(gp["w"]), 2 * 3 * xa, atol=1e-5)
    assert np.allclose(np.asarray(gp["b"]), 2 * 2 * np.sin(ba) * np.cos(ba), atol=1e-5)
    assert np.array_equal(np.asarray(gx), np.zeros_like(xa))
    o = f(p, x)  # at once: f
    assert np.allclose(np.asarray(o["y"]), wa * xa) and np.allclose(np.asarray(o["z"][0]),
                                                                  np.sin(ba), atol=1e-6)
    ov = shmap.vmap(lambda w, b, x: f({"w": w, "b": b}, x)["y"])(p["w"], p["b"], x)
    assert np.allclose(np.asarray(ov), wa * xa)
    per = shmap.jit(shmap.vmap(shmap.grad(lambda w, b, x: jnp.sum(
        f({"w": w, "b": b}, x)["y"] ** 2))))(p["w"], p["b"], x)
    assert np.allclose(np.asarray(per), 2 * 2 * wa * xa * xa, atol=1e-4)
    tot = shmap.grad(lambda w: jnp.sum(shmap.vmap(lambda w, b, x: f(
        {"w": w, "b": b}, x)["y"] ** 2)(w, p["b"], x)))(p["w"])
    assert np.allclose(np.asarray(tot), 2 * 2 * wa * xa * xa, atol=1e-4)

    m4 = c.make_mesh((4,), ("i",))

    @shmap.shard_map(mesh=m4, in_specs=(P("i"), P("i")), out_specs=P("i"))
    def block(w, x):
        return shmap.grad(lambda w: jnp.sum(f({"w": w, "b": w}, x)["y"]))(w)
    gw = block(c.device_put(wa, NamedSharding(m4, P("i"))),
               c.device_put(xa, NamedSharding(m4, P("i"))))
    assert np.allclose(np.asarray(gw), 2 * xa + 0, atol=1e-5)


def test_custom_jvp(c, mesh):
    """jax.custom_jvp, differentiated in reverse by transposing its rule:
    JAX's docstring example f(x, y) = sin(x) * y (value_and_grad (1.68,
    1.08)); the stable log1pexp with its safe JVP against numpy's sigmoid
    (the body's own gradient is NaN at 100); defjvps; a straight-through
    estimator (round's rule the identity: the rule, not the body, is
    used); nondiff_argnums; vmap of grad; outside grad f's body."""
    @shmap.custom_jvp
    def f(x, y):
        return jnp.sin(x) * y

    @f.defjvp
    def f_jvp(primals, tangents):
        x, y = primals
        x_dot, y_dot = tangents
        return f(x, y), jnp.cos(x) * x_dot * y + jnp.sin(x) * y_dot
    one = c.device_put(np.float32(1.0), NamedSharding(mesh, P()))
    two = c.device_put(np.float32(2.0), NamedSharding(mesh, P()))
    v, (gx, gy) = shmap.value_and_grad(f, argnums=(0, 1))(one, two)
    assert np.isclose(float(v), 2 * np.sin(1.0), rtol=1e-6)
    assert np.isclose(float(gx), 2 * np.cos(1.0), rtol=1e-6)
    assert np.isclose(float(gy), np.sin(1.0), rtol=1e-6)
    assert np.round(float(gx), 2) == 1.08 and np.round(float(v), 2) == 1.68
    sz = shmap.custom_jvp(lambda x, y: x * y)  # symbolic_zeros=True: its rule given zeros made
    sz.defjvp(lambda p, t: (sz(*p), 3 * t[0] + 5 * t[1]), symbolic_zeros=True)
    gx, gy = shmap.grad(lambda a, b: sz(a, b), argnums=(0, 1))(one, two)
    assert (float(gx), float(gy)) == (3.0, 5.0)

    @shmap.custom_jvp
    def log1pexp(x):
        return jnp.log(1. + jnp.exp(x))

    @log1pexp.defjvp
    def log1pexp_jvp(primals, tangents):
        x, = primals
        x_dot, = tangents
        ans = log1pexp(x)
        return ans, (1 - 1 / (1 + jnp.exp(x))) * x_dot
    x = np.array([-200, -30, -3, 0, 1, 5, 50, 100], np.float32)
    xa = c.device_put(x, NamedSharding(mesh, P("X")))
    g = shmap.jit(shmap.grad(lambda x: jnp.sum(log1pexp(x) * 2)))(xa)
    assert g.type == xa.type
    assert np.allclose(np.asarray(g), 2 * _sigmoid64(x), rtol=1e-6, atol=1e-7)
    per = shmap.vmap(shmap.grad(log1pexp))(xa)
    assert np.allclose(np.asarray(per), _sigmoid64(x), rtol=1e-6, atol=1e-7)
    rng = np.random.default_rng(16)
    xs = rng.standard_normal((8, 16)).astype(np.float32) * 3
    _check(c, mesh, lambda xp, x: _sm(xp, np.log1p(np.exp(x)) if xp is np else log1pexp(x)),
           [xs], [P("X", "Y")], rng)

    @shmap.custom_jvp
    def h(x, y):
        return jnp.sin(x) * y
    h.defjvps(lambda x_dot, out, x, y: jnp.cos(x) * x_dot * y,
              lambda y_dot, out, x, y: jnp.sin(x) * y_dot)
    gx, gy = shmap.grad(lambda x, y: jnp.sum(h(x, y)), argnums=(0, 1))(xa, xa)
    x64 = x.astype(np.float64)
    assert np.allclose(np.asarray(gx), np.cos(x64) * x64, rtol=1e-4, atol=1e-4)
    assert np.allclose(np.asarray(gy), np.sin(x64), rtol=1e-4, atol=1e-4)

    @shmap.custom_jvp
    def ste_round(x):
        return jnp.round(x)
    ste_round.defjvp(lambda p, t: (ste_round(p[0]), t[0]))
    w = np.linspace(0.5, 1.5, 8).astype(np.float32)
    g = shmap.grad(lambda x: jnp.sum(ste_round(x * 3) * jnp.asarray(w)))(xa)
    assert np.allclose(np.asarray(g), 3 * w)
    g0 = shmap.grad(lambda x: jnp.sum(jnp.round(x * 3) * jnp.asarray(w)))(xa)
    assert np.array_equal(np.asarray(g0), np.zeros(8))  # round's own: none
    assert np.array_equal(np.asarray(ste_round(xa * 1.4)), np.round(x * np.float32(1.4)))

    from functools import partial

    @partial(shmap.custom_jvp, nondiff_argnums=(0,))
    def app(fn, x):
        return fn(x)

    @app.defjvp
    def app_jvp(fn, primals, tangents):
        (x,), (t,) = primals, tangents
        return app(fn, x), 5 * t
    g = shmap.grad(lambda x: jnp.sum(app(jnp.sin, x)))(xa)
    assert np.allclose(np.asarray(g), 5)
    with pytest.raises(shmap.InvalidArgument,
                       match=r"Custom JVP rule .* must produce a pair \(list or tuple of length "
                             r"two\)"):
        app.defjvp(lambda fn, p, t: t[0])
        shmap.grad(lambda x: jnp.sum(app(jnp.sin, x)))(xa)


def test_grad_of_grad(c, mesh):
    """Higher derivatives: an outer grad's tape records the inner grad's
    backward pass (its ops go through the same choke points) and
    differentiates it. sin'' and x**3's second and third derivatives, on a
    sharded batch by vmap and as sums; each grad differentiates its own
    copy of its argument (JAX's distinct tracers: d/dx [x * d/dy (x * y)]
    at y = x is 2x, not 4x); in a shard_map body with a psum."""
    x = np.linspace(-2, 2, 8).astype(np.float32)
    xa = c.device_put(x, NamedSharding(mesh, P("X")))
    d2 = shmap.vmap(shmap.grad(shmap.grad(jnp.sin)))(xa)
    assert d2.type == xa.type and np.allclose(np.asarray(d2), -np.sin(x), atol=1e-6)

    def cube(y):
        return jnp.sum(y ** 3)
    d2 = shmap.jit(shmap.grad(lambda x: jnp.sum(shmap.grad(cube)(x))))(xa)
    assert np.allclose(np.asarray(d2), 6 * x, atol=1e-5)
    d3 = shmap.grad(lambda x: jnp.sum(shmap.grad(lambda x: jnp.sum(shmap.grad(cube)(x)))(x)))(xa)
    assert np.allclose(np.asarray(d3), 6)
    g = shmap.grad(lambda x: jnp.sum(x * shmap.grad(lambda y: jnp.sum(x * y))(x)))(xa)
    assert np.allclose(np.asarray(g), 2 * x)
    closed = shmap.grad(lambda y: jnp.sum(xa * y))(xa)  # an Array closed over and passed
    assert np.allclose(np.asarray(closed), x)
    # through a custom rule: the outer grad differentiates the rule's ops (the
    # custom_vjp's bwd on its residual, the custom_jvp's rule): sigmoid'
    sig = _sigmoid64(x)
    d2 = shmap.vmap(shmap.grad(shmap.grad(_log1pexp)))(xa)
    assert np.allclose(np.asarray(d2), sig * (1 - sig), atol=1e-6)

    @shmap.custom_jvp
    def softplus(x):
        return jnp.log1p(jnp.exp(x))
    softplus.defjvp(lambda p, t: (softplus(p[0]), t[0] * lax.logistic(p[0])))
    d2 = shmap.grad(lambda x: jnp.sum(shmap.grad(lambda y: jnp.sum(softplus(y)))(x)))(xa)
    assert np.allclose(np.asarray(d2), sig * (1 - sig), atol=1e-6)

    m4 = c.make_mesh((4,), ("i",))

    @shmap.shard_map(mesh=m4, in_specs=P("i"), out_specs=P("i"))
    def block(x):
        inner = shmap.grad(lambda u: lax.psum(jnp.sum(jnp.sin(u)), "i"))
        return shmap.grad(lambda v: jnp.sum(inner(v) * v))(x)
    got = block(c.device_put(x, NamedSharding(m4, P("i"))))
    assert np.allclose(np.asarray(got), np.cos(x) - x * np.sin(x), atol=1e-6)


def _mlp_grad_np(p, x):
    """numpy's gradient (float64) of the MLP loss mean((tanh(x w1 + b) w2)^2)."""
    h = np.tanh(x @ p["w1"] + p["b"])
    o = h @ p["w2"]
    go = 2 * o / o.size
    gh = go @ p["w2"].T * (1 - h * h)
    return {"w1": x.T @ gh, "b": gh.sum(0), "w2": h.T @ go}


def test_mlp_hessian_vector_product(c, mesh):
    """A sharded MLP's Hessian-vector product, grad of <grad(loss), v> (the
    outer pass through the inner backward's einsums, tanh and sums, laid
    out as the parameters), against central differences of numpy's
    analytic gradient in float64."""
    rng = np.random.default_rng(17)
    xa = rng.standard_normal((8, 16))
    pn = {"w1": rng.standard_normal((16, 32)) * 0.3, "b": rng.standard_normal(32) * 0.5,
          "w2": rng.standard_normal((32, 4)) * 0.3}
    vn = {k: rng.standard_normal(v.shape) for k, v in pn.items()}
    specs = {"w1": P(None, "Y"), "b": P("Y"), "w2": P("Y", None)}
    put = lambda d: {k: c.device_put(v.astype(np.float32), NamedSharding(mesh, specs[k]))  # noqa
                     for k, v in d.items()}
    params, v = put(pn), put(vn)
    x = c.device_put(xa.astype(np.float32), NamedSharding(mesh, P("X", None)))

    def loss(p, x):
        h = jnp.tanh(x @ p["w1"] + p["b"])
        o = jnp.einsum("bh,ho->bo", h, p["w2"], out_sharding=P("X", None))
        return jnp.mean(o * o)

    @shmap.jit
    def hvp(p, v, x):
        def inner(p):
            g = shmap.grad(loss)(p, x)
            return sum(jnp.sum(g[k] * v[k]) for k in sorted(g))
        return shmap.grad(inner)(p)
    got = hvp(params, v, x)
    eps = 1e-5
    up = _mlp_grad_np({k: pn[k] + eps * vn[k] for k in pn}, xa)
    dn = _mlp_grad_np({k: pn[k] - eps * vn[k] for k in pn}, xa)
    for k in pn:
        want = (up[k] - dn[k]) / (2 * eps)
        assert got[k].type == params[k].type, k
        assert np.allclose(np.asarray(got[k]), want, rtol=1e-3, atol=1e-4), k


def test_jacrev_jacfwd_hessian(c, mesh):
    """jax.jacrev / jacfwd / hessian: JAX's docstring examples (the 4x3
    Jacobian, the 2x2 Hessian, the pytree Hessian of {'c': a ** b}), a
    sharded Jacobian against numpy (its input dimensions laid out as the
    input's), argnums as a tuple, has_aux, at once and in a jit;
    refused inside vmap."""
    def f(x):
        return jnp.stack([x[0], 5 * x[2], 4 * x[1] ** 2 - 2 * x[2], x[2] * jnp.sin(x[0])])
    want = np.array([[1, 0, 0], [0, 0, 5], [0, 16, -2], [3 * np.cos(1.0), 0, np.sin(1.0)]])
    x = c.device_put(np.array([1., 2., 3.], np.float32), NamedSharding(mesh, P()))
    for jac in (shmap.jacrev, shmap.jacfwd, shmap.jacobian):
        assert np.allclose(np.asarray(jac(f)(x)), want, atol=1e-6)
    g = lambda x: x[0] ** 3 - 2 * x[0] * x[1] - x[1] ** 6  # noqa: E731
    h = shmap.hessian(g)(c.device_put(np.array([1., 2.], np.float32), NamedSharding(mesh, P())))
    assert np.allclose(np.asarray(h), [[6, -2], [-2, -480]])
    put = lambda a: c.device_put(np.asarray(a, np.float32), NamedSharding(mesh, P()))  # noqa
    hp = shmap.jit(shmap.hessian(lambda d: {"c": jnp.power(d["a"], d["b"])}))(
        {"a": put([1, 2]), "b": put([2, 3])})
    a, b = np.array([1., 2.]), np.array([2., 3.])
    diag = {("a", "a"): b * (b - 1) * a ** (b - 2), ("a", "b"): a ** (b - 1) * (1 + b * np.log(a)),
            ("b", "a"): a ** (b - 1) * (1 + b * np.log(a)), ("b", "b"): a ** b * np.log(a) ** 2}
    for (i, j), d in diag.items():
        blk = np.asarray(hp["c"][i][j])
        assert blk.shape == (2, 2, 2)
        assert np.allclose(blk, np.einsum("k,kl,km->klm", d, np.eye(2), np.eye(2)), rtol=1e-5)

    rng = np.random.default_rng(18)
    A = rng.standard_normal((8, 8)).astype(np.float32)
    xs = rng.standard_normal(8).astype(np.float32)
    xa = c.device_put(xs, NamedSharding(mesh, P("X")))
    Aa = c.device_put(A, NamedSharding(mesh, P()))

    def layer(A, x):
        y = jnp.tanh(jnp.einsum("ij,j->i", A, x, out_sharding=P("X")))
        return y, {"norm": jnp.sum(y * y)}
    (jA, jx), aux = shmap.jacrev(layer, argnums=(0, 1), has_aux=True)(Aa, xa)
    y = np.tanh(A @ xs)
    assert jx.type == "f32[8,8@X]" and jA.shape == (8, 8, 8)
    assert np.allclose(np.asarray(jx), (1 - y * y)[:, None] * A, atol=1e-5)
    assert np.allclose(np.asarray(jA), np.einsum("i,ij,k->ijk", 1 - y * y, np.eye(8), xs),
                       atol=1e-5)
    assert np.isclose(float(aux["norm"]), (y * y).sum(), rtol=1e-5)
    with pytest.raises(shmap.InvalidArgument, match=r"jacfwd requires real-valued inputs"):
        shmap.jacfwd(lambda i: i * 2.0)(c.device_put(np.arange(4, dtype=np.int32),
                                                    NamedSharding(mesh, P())))


SC_IDX = np.array([0, 5, 5, -1, 2, 9, -9], np.int32)  # repeats, from the end, dropped


def _np_scatter(how, x, u):
    x = np.array(x, np.float64)
    ok = (SC_IDX >= -len(x)) & (SC_IDX < len(x))
    if how == "set":
        for k, r in zip(SC_IDX[ok], u[ok]):
            x[k] = r
    else:
        {"add": np.add, "multiply": np.multiply}[how].at(x, SC_IDX[ok], u[ok])
    return x


@pytest.mark.parametrize("how", ["set", "add", "multiply"])
def test_grad_scatters(c, mesh, how):
    """x.at[idx].set/add/multiply(u) (the scatter rows): the operand's and
    (set, add) the updates' cotangents against central differences, x
    sharded on its other dimension; with set only the last of repeated
    indices gets its row's cotangent, and rows written get none in x."""
    rng = np.random.default_rng(17)
    x = rng.standard_normal((6, 8)).astype(np.float32)
    u = rng.standard_normal((7, 8)).astype(np.float32)

    def f(xp, x, u):
        y = _np_scatter(how, x, u) if xp is np else getattr(x.at[SC_IDX], how)(u)
        return _sm(xp, y * y)

    argnums = (0,) if how == "multiply" else (0, 1)
    _check(c, mesh, f, [x, u], [P(None, "Y"), P()], rng, argnums=argnums)


def test_grad_scatter_mul_updates_refused(c, mesh):
    """JAX differentiates scatter_mul's updates only with unique indices."""
    x = c.device_put(np.ones((6, 8), np.float32), NamedSharding(mesh, P()))
    with pytest.raises(shmap.Unimplemented, match=r"scatter_mul gradients are only "
                       r"implemented if `unique_indices=True`"):
        shmap.jit(shmap.grad(lambda u: jnp.sum(x.at[SC_IDX].multiply(u))))(
            c.device_put(np.ones((7, 8), np.float32), NamedSharding(mesh, P())))


def test_jvp_and_linearize(c, mesh):
    """jax.jvp and jax.linearize (as the transpose of the pullback: no
    forward mode): JAX's docstring example (sin at 0.1 along 0.2, float32),
    a sharded MLP's JVP along random tangents of both arguments against
    central differences of numpy's, pytrees and has_aux, linearize's f_jvp
    called twice, in a shard_map body with a psum, and JAX's sentences."""
    shmap.set_mesh(mesh)
    try:
        p, t = shmap.jvp(jnp.sin, (0.1,), (0.2,))
        assert p.type == "f32[]" and t.type == "f32[]"
        assert abs(float(p) - 0.09983342) < 1e-7 and abs(float(t) - 0.19900084) < 1e-7
    finally:
        shmap.set_mesh(None)
    rng = np.random.default_rng(41)
    xa = rng.standard_normal((8, 6)).astype(np.float32)
    wa = rng.standard_normal((6, 4)).astype(np.float32)
    dx = rng.standard_normal(xa.shape).astype(np.float32)
    dw = rng.standard_normal(wa.shape).astype(np.float32)
    put = lambda a, s: c.device_put(a, NamedSharding(mesh, s))  # noqa: E731
    x, w = put(xa, P("X")), put(wa, P(None, "Y"))

    def f(xp, p):
        h = xp.tanh(p["x"] @ p["w"])
        return {"s": (h * h).sum(axis=1), "m": h.mean()}, h.max()

    e = 1e-4
    plus = f(np, {"x": xa + e * dx.astype(np.float64), "w": wa + e * dw.astype(np.float64)})[0]
    minus = f(np, {"x": xa - e * dx.astype(np.float64), "w": wa - e * dw.astype(np.float64)})[0]
    out, tan, aux = shmap.jvp(lambda p: f(jnp, p), ({"x": x, "w": w},),
                              ({"x": put(dx, P("X")), "w": put(dw, P(None, "Y"))},),
                              has_aux=True)
    assert tan["s"].type == out["s"].type == "f32[8@X]"
    assert np.allclose(np.asarray(out["s"]), f(np, {"x": xa, "w": wa})[0]["s"], atol=1e-4)
    assert np.allclose(float(aux), f(np, {"x": xa, "w": wa})[1], atol=1e-5)
    for k in ("s", "m"):
        fd = (plus[k] - minus[k]) / (2 * e)
        assert np.allclose(np.asarray(tan[k], np.float64), fd, rtol=2e-3, atol=2e-3), k

    @shmap.jit
    def lin(x, w, dx):
        _, f_jvp = shmap.linearize(lambda x: jnp.sin(x) @ w, x)
        return f_jvp(dx), f_jvp(2 * dx)

    t1, t2 = lin(x, w, put(dx, P("X")))
    assert np.allclose(np.asarray(t1), (np.cos(xa) * dx) @ wa, atol=1e-4)
    assert np.allclose(np.asarray(t2), 2 * np.asarray(t1), atol=1e-4)
    sm = shmap.shard_map(lambda x, dx: shmap.jvp(lambda v: lax.psum((v * v).sum(), "X"),
                                                 (x,), (dx,))[1],
                         mesh=mesh, in_specs=(P("X"), P("X")), out_specs=P())
    assert np.allclose(float(sm(x, put(dx, P("X")))), (2 * xa * dx).sum(), rtol=1e-4)
    with pytest.raises(TypeError, match=r"^primal and tangent arguments to jax.jvp must be tuples "
                       r"or lists; found Array and tuple\.$"):
        shmap.jvp(jnp.sin, x, (x,))
    with pytest.raises(ValueError, match=r"^jvp called with different primal and tangent "
                       r"shapes;Got primal shape \(8, 6\) and tangent shape as \(6, 4\)$"):
        shmap.jvp(jnp.sin, (x,), (w,))
    with pytest.raises(TypeError, match=r"must have the same tree structure"):
        shmap.jvp(lambda a, b: a, (x, w), (x,))


def _np_extremal_vjp(how, x, idx, u, g):
    """The transpose of JAX's _scatter_extremal_jvp, element by element:
    the cotangent of an element updates reached is shared equally by the
    updates equal to the result and, if the result is the operand's own
    value, the operand."""
    uf = np.maximum if how == "max" else np.minimum
    n = len(x)
    out = x.copy()
    ok = (idx >= -n) & (idx < n)
    uf.at(out, idx[ok], u[ok])
    dx, du = g.copy(), np.zeros_like(u)
    rows = np.where(idx < 0, idx + n, idx)
    for r in range(n):
        qs = [q for q in range(len(idx)) if ok[q] and rows[q] == r]
        if not qs:
            continue
        for e in range(x.shape[1]):
            won = [q for q in qs if u[q, e] == out[r, e]]
            kept = x[r, e] == out[r, e]
            dx[r, e] = g[r, e] / (len(won) + 1) if kept else 0
            for q in won:
                du[q, e] = g[r, e] / (len(won) + 1 if kept else len(won))
    return out, dx, du


@pytest.mark.parametrize("how", ["max", "min"])
def test_grad_scatter_extremal(c, mesh, how):
    """x.at[idx].max/min(u): at a point without ties, against central
    differences; with ties (between updates, and with the operand) against
    the transpose of JAX's JVP rule, which shares the cotangent equally."""
    rng = np.random.default_rng(23)
    x = rng.standard_normal((6, 8)).astype(np.float32)
    u = rng.standard_normal((7, 8)).astype(np.float32)

    def f(xp, x, u):
        if xp is np:
            y = np.array(x, np.float64)
            ok = (SC_IDX >= -len(y)) & (SC_IDX < len(y))
            (np.maximum if how == "max" else np.minimum).at(y, SC_IDX[ok], u[ok])
        else:
            y = getattr(x.at[SC_IDX], how)(u)
        return _sm(xp, y * y)

    _check(c, mesh, f, [x, u], [P(None, "Y"), P()], rng, argnums=(0, 1))
    # ties: update 1 and 2 both hit row 5 with equal values, update 0 ties row 0's operand
    xt, ut = x.copy(), u.copy()
    ut[2] = ut[1] = (np.maximum if how == "max" else np.minimum)(x[5], ut[1]) + \
        (1 if how == "max" else -1)
    ut[0, :4] = xt[0, :4]
    gt = rng.standard_normal(x.shape).astype(np.float32)
    xa = c.device_put(xt, NamedSharding(mesh, P(None, "Y")))
    ua = c.device_put(ut, NamedSharding(mesh, P()))
    ga = c.device_put(gt, NamedSharding(mesh, P(None, "Y")))
    dx, du = shmap.jit(lambda x, u, g: shmap.grad(
        lambda x, u: jnp.sum(getattr(x.at[SC_IDX], how)(u) * g), argnums=(0, 1))(x, u))(
        xa, ua, ga)
    _, wdx, wdu = _np_extremal_vjp(how, xt, SC_IDX, ut, gt)
    assert np.allclose(np.asarray(dx), wdx, atol=1e-6)
    assert np.allclose(np.asarray(du), wdu, atol=1e-6)


def test_grad_dynamic_slice_in_dim_and_pcast(c, mesh):
    """lax.dynamic_slice_in_dim (dynamic_slice's rule, the start on one
    axis, a traced start too) against central differences, and pcast(x,
    axes) (pvary) in a shard_map body, whose transpose sums the cotangents
    of the devices (JAX's)."""
    rng = np.random.default_rng(31)
    x = rng.standard_normal((8, 8)).astype(np.float32)

    def f(xp, x):
        if xp is np:
            return _sm(np, x[:, 2:5] * x[:, 3:6])
        s = jnp.argmax(jnp.asarray(np.eye(8, dtype=np.float32)[3]))  # 3, traced
        return _sm(jnp, lax.dynamic_slice_in_dim(x, 2, 3, axis=1) *
                   lax.dynamic_slice_in_dim(x, s, 3, axis=1))

    _check(c, mesh, f, [x], [P("X", None)], rng)
    w = c.device_put(np.float32(1.5) * np.ones((4,), np.float32), NamedSharding(mesh, P()))
    xa = c.device_put(x[:, :4], NamedSharding(mesh, P("X")))

    def loss(w, x):  # w invariant, made varying over X by pcast, then each device's loss
        return lax.psum(jnp.sum(lax.pcast(w, "X", to="varying") * x), "X")

    g = shmap.jit(shmap.shard_map(lambda w, x: shmap.grad(loss)(w, x), mesh=mesh,
                                  in_specs=(P(), P("X")), out_specs=P()))(w, xa)
    assert np.allclose(np.asarray(g), x[:, :4].sum(0), atol=1e-5)


def test_grad_through_partial_sums(c, mesh):
    """grad through values unreduced over X (partial sums), as JAX's: the
    cotangent of an unreduced value is the same on every device, reduced
    over X (P(None, reduced={'X'})). An unreduced argument resharded to a
    whole value, reduce_sum to an unreduced out_sharding (a shard_map's
    pcast to unreduced: its transpose makes the cotangent varying), and a
    psum of partial sums in a shard_map body (its cotangent as it is, not
    times the axis size)."""
    rng = np.random.default_rng(32)
    blocks = rng.standard_normal((2, 4)).astype(np.float32)  # X's two partial sums
    w = rng.standard_normal(4).astype(np.float32)
    make = shmap.shard_map(lambda b: lax.pcast(b, "X", to="unreduced"), mesh=mesh,
                           in_specs=P("X"), out_specs=P(unreduced={"X"}))
    u = make(c.device_put(blocks.reshape(8), NamedSharding(mesh, P("X"))))
    assert u.sharding.spec.unreduced == {"X"}
    with shmap.use_mesh(mesh):
        val, g = shmap.jit(shmap.value_and_grad(
            lambda x: (shmap.reshard(x, P()) ** 2 * w).sum()))(u)
        total = blocks.sum(0)
        assert np.allclose(np.asarray(val), (total ** 2 * w).sum(), rtol=1e-5)
        assert np.allclose(np.asarray(g), 2 * total * w, rtol=1e-5)
        assert g.sharding == NamedSharding(mesh, P(None, reduced={"X"}))

        x = rng.standard_normal(8).astype(np.float32)
        xs = c.device_put(x, NamedSharding(mesh, P("X")))

        def f(x):
            s = lax.reduce_sum(x * x, axes=(0,), out_sharding=P(unreduced={"X"}))
            return shmap.reshard(s, P()) * 3
        g = shmap.jit(shmap.grad(f))(xs)
        assert np.allclose(np.asarray(g), 6 * x, rtol=1e-5)
        assert g.sharding == NamedSharding(mesh, P("X"))

    def body(b, w):
        return lax.psum(b, "X") * w

    def loss(u, w):
        return jnp.sum(shmap.shard_map(body, mesh=mesh, in_specs=(P(unreduced={"X"}), P()),
                                       out_specs=P())(u, w))
    wa = c.device_put(w, NamedSharding(mesh, P()))
    g = shmap.jit(shmap.grad(loss))(u, wa)
    assert np.allclose(np.asarray(g), w, rtol=1e-5)


def test_jacfwd_and_jacrev_layouts(c, mesh):
    """The Jacobian of a sharded function laid out as JAX's: jacrev's rows
    are cotangents (the argument's dimensions sharded as it is), jacfwd's
    columns tangents (the output's dimensions sharded as the output)."""
    x = np.linspace(-1, 1, 8).astype(np.float32)
    xs = c.device_put(x, NamedSharding(mesh, P("X")))
    w = np.arange(1, 9, dtype=np.float32)
    want = np.diag(3 * x ** 2 * w)
    for jac, spec in ((shmap.jacrev, P(None, "X")), (shmap.jacfwd, P("X", None))):
        got = shmap.jit(jac(lambda v: v ** 3 * w))(xs)
        assert np.allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
        assert got.sharding == NamedSharding(mesh, spec), jac


def test_training_step_as_jax_writes_it(c):
    """A training step written as JAX code writes one: parameters stacked
    per layer put with a pytree of shardings, lax.scan over the layers with
    jax.checkpoint, value_and_grad with has_aux, tree.map updates, set_mesh
    and bare PartitionSpecs: the loss at the first step is numpy's and it
    falls (device_put of a pytree of shardings failed)."""
    mesh = c.make_mesh((2, 2), ("data", "model"))
    rng = np.random.default_rng(11)
    L, D, H = 3, 8, 16
    w1 = (rng.standard_normal((L, D, H)) * 0.2).astype(np.float32)
    w2 = (rng.standard_normal((L, H, D)) * 0.2).astype(np.float32)
    xs = rng.standard_normal((8, D)).astype(np.float32)

    def np_loss(w1, w2, x):
        for k in range(L):
            z = np.tanh(x @ w1[k])
            x = x + z @ w2[k]
        return np.mean(x ** 2)

    with shmap.use_mesh(mesh):
        params = shmap.device_put({"w1": w1, "w2": w2},
                                  {"w1": P(None, None, "model"), "w2": P(None, "model", None)})
        x = shmap.device_put(xs, P("data", None))

        def layer(h, p):
            z = jnp.tanh(jnp.einsum("bd,dh->bh", h, p["w1"]))
            return h + jnp.einsum("bh,hd->bd", z, p["w2"], out_sharding=P("data", None)), None

        def loss(params, x):
            h, _ = lax.scan(shmap.checkpoint(layer), x, params)
            return jnp.mean(h ** 2), {"norm": jnp.linalg.norm(h)}

        @shmap.jit
        def step(params, x):
            (l, aux), g = shmap.value_and_grad(loss, has_aux=True)(params, x)
            return shmap.tree.map(lambda p, g: p - 0.05 * g, params, g), l, aux

        losses = []
        for _ in range(3):
            params, l, aux = step(params, x)
            losses.append(float(l))
    assert shmap.typeof(params["w1"]) == "f32[3,8,16@model]"
    assert np.isclose(losses[0], np_loss(w1, w2, xs), rtol=1e-4), (losses, np_loss(w1, w2, xs))
    assert losses[2] < losses[1] < losses[0], losses


def test_grad_of_scan_over_numpy_xs(c, mesh):
    """grad through a scan (unrolled under grad) over 120 numpy steps: its
    xs one constant of the program sliced by ops (it made one constant per
    step, and past 64 the call was refused)."""
    w = c.device_put(np.float32(0.5), NamedSharding(mesh, P()))
    xs = np.linspace(0, 1, 240).astype(np.float32).reshape(120, 2)

    def loss(w):
        def step(h, x):
            h = h * w + x
            return h, h
        h, ys = lax.scan(step, jnp.zeros(2), xs)
        return jnp.sum(ys)
    f = shmap.jit(shmap.grad(loss))
    head = next(ln for ln in f.lower(w).as_text().splitlines() if ln.startswith("jit "))
    assert head.count("captured") == 1, head  # the xs, once
    eps, wv = 1e-3, 0.5

    def ref(wv):
        h, tot = np.zeros(2), 0.0
        for x in xs.astype(np.float64):
            h = h * wv + x
            tot += h.sum()
        return tot
    assert np.isclose(float(f(w)), (ref(wv + eps) - ref(wv - eps)) / (2 * eps), rtol=1e-3)
