"""shmap.nn as JAX's jax.nn: the derivatives of the activations at their
kinks (relu, relu6 and log1mexp JAX's custom_jvps, elu and hard_tanh
JAX's where forms), softmax / log_softmax / logsumexp / logmeanexp /
standardize with JAX's where= (and logsumexp's b= and return_sign=),
one_hot over a mesh axis name, and nn.initializers with a key traced in
a jit. References are JAX's formulas, written out here in numpy. Runs on
the cluster of conftest's c."""
import math

import numpy as np
import pytest

import shmap
from shmap import P, NamedSharding
from shmap import nn
from shmap import random as jr

from _util import put as _put

F32 = np.float32
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _g(f, v):
    return float(np.asarray(shmap.grad(f)(F32(v))))


# name, f, points, JAX's derivative at each (from JAX's definitions)
KINKS = [
    ("relu", nn.relu, (0.0, -1.0, 2.0), (0.0, 0.0, 1.0)),
    ("relu6", nn.relu6, (0.0, 6.0, 3.0, 7.0), (0.0, 0.0, 1.0, 0.0)),
    ("elu", nn.elu, (0.0, 1.0), (1.0, 1.0)),
    ("elu_alpha", lambda x: nn.elu(x, 0.5), (0.0,), (0.5,)),
    ("selu", nn.selu, (0.0,), (SELU_SCALE * SELU_ALPHA,)),
    ("hard_tanh", nn.hard_tanh, (-1.0, 1.0, 0.0, 2.0, -2.0), (1.0, 1.0, 1.0, 0.0, 0.0)),
    ("hard_sigmoid", nn.hard_sigmoid, (-3.0, 3.0, 0.0), (0.0, 0.0, 1 / 6)),
    ("hard_silu", nn.hard_silu, (-3.0, 3.0, 0.0), (0.0, 1.0, 0.5)),
    # these were JAX's already (maximum / minimum / clip ties as JAX's): guards
    ("celu", nn.celu, (0.0,), (1.0,)),
    ("leaky_relu", nn.leaky_relu, (0.0, -1.0), (1.0, 0.01)),
    ("softplus", nn.softplus, (0.0,), (0.5,)),
    ("sparse_sigmoid", nn.sparse_sigmoid, (-1.0, 1.0), (0.25, 0.25)),
    ("sparse_plus", nn.sparse_plus, (-1.0, 1.0), (0.0, 1.0)),
    ("soft_sign", nn.soft_sign, (0.0,), (1.0,)),
    ("squareplus", nn.squareplus, (0.0,), (0.5,)),
    ("log1mexp", nn.log1mexp, (0.5, 2.0), (1 / math.expm1(0.5), 1 / math.expm1(2.0))),
]


@pytest.mark.parametrize("name,f,xs,want", KINKS, ids=[k[0] for k in KINKS])
def test_activation_derivatives_at_kinks_as_jax(c, name, f, xs, want):
    """grad of each activation at its kinks is JAX's: relu and relu6 are
    custom_jvps there (select(x > 0, g, 0): 0 at 0, and at 6 for relu6),
    elu is where(x > 0, x, alpha * expm1(where(x > 0, 0, x))) (alpha at 0)
    and hard_tanh where(x > 1, 1, where(x < -1, -1, x)) (1 at -1 and 1).
    Before, they were made of jnp.maximum / minimum / clip, whose tie
    derivative is 0.5: relu'(0), relu6'(0), relu6'(6), elu'(0) and
    hard_tanh'(+-1) were all 0.5 (and hard_sigmoid / hard_silu / selu
    followed)."""
    got = [_g(f, v) for v in xs]
    assert np.allclose(got, want, rtol=1e-6, atol=1e-7), (name, got, want)


def test_kink_derivatives_under_vmap_jit_and_sharding(c, mesh):
    """The custom_jvp activations keep JAX's derivative under vmap(grad),
    inside a jit, and on a sharded Array (whose gradient keeps the
    sharding). Before, each gave 0.5 at the ties."""
    xs = np.array([-1.0, 0.0, 0.5, 6.0, 3.0, 7.0, -0.0, 1.0], F32)
    want_relu = (xs > 0).astype(F32)
    want_relu6 = ((xs > 0) & (xs < 6)).astype(F32)
    assert np.array_equal(np.asarray(shmap.vmap(shmap.grad(nn.relu))(xs)), want_relu)
    assert np.array_equal(np.asarray(shmap.jit(shmap.vmap(shmap.grad(nn.relu6)))(xs)),
                          want_relu6)
    x = _put(c, mesh, np.tile(xs, (6, 1)).T, P("i", "j"))  # (8, 6)
    g = shmap.jit(shmap.grad(lambda x: (nn.relu(x) + nn.relu6(x) + nn.hard_tanh(x)).sum()))(x)
    want = np.tile(want_relu + want_relu6 + (np.abs(xs) <= 1), (6, 1)).T
    assert g.sharding.spec == P("i", "j")
    assert np.array_equal(np.asarray(g), want)
    g = shmap.grad(lambda x: nn.elu(x).sum())(x)  # at once
    assert np.allclose(np.asarray(g), np.tile(np.where(xs > 0, 1, np.exp(xs)), (6, 1)).T)


def test_activation_values_and_sharding_unchanged(c, mesh):
    """The activations rewritten to JAX's forms give the values of JAX's
    formulas (in numpy) at and around their kinks, keeping a sharded
    Array's sharding, at once and in a jit (a guard for the fixes above;
    and gelu(approximate=False) is JAX's 0.5 x erfc(-x / sqrt 2), accurate
    in the negative tail, where 1 + erf(x / sqrt 2), which it was before,
    loses every digit)."""
    base = np.array([-8, -6, -3, -1, -0.5, 0, 0.5, 1, 3, 6, 7, 8], F32)
    xa = np.stack([base * s for s in (1, 0.5, 0.25, 2)], 1).astype(F32)[:8, :4]
    xa = np.concatenate([xa, xa[:, :2]], 1)  # (8, 6)
    x = _put(c, mesh, xa, P("i", "j"))
    ref = {
        nn.relu: np.maximum(xa, 0),
        nn.relu6: np.minimum(np.maximum(xa, 0), 6),
        nn.elu: np.where(xa > 0, xa, np.expm1(np.minimum(xa, 0))),
        nn.selu: SELU_SCALE * np.where(xa > 0, xa, SELU_ALPHA * np.expm1(np.minimum(xa, 0))),
        nn.hard_tanh: np.clip(xa, -1, 1),
        nn.hard_sigmoid: np.minimum(np.maximum(xa + 3, 0), 6) / 6,
        nn.softplus: np.logaddexp(xa, 0),
        nn.celu: np.maximum(xa, 0) + np.expm1(np.minimum(xa, 0)),
    }
    for f, want in ref.items():
        for got in (f(x), shmap.jit(f)(x)):
            assert got.sharding.spec == P("i", "j"), f.__name__
            assert np.allclose(np.asarray(got), want, rtol=1e-6, atol=1e-7), f.__name__
    xs = np.array([-5.0, -3.0, -1.0, 0.5, 2.0, 4.0, -6.0, 1.0], F32)
    want = np.array([0.5 * float(v) * math.erfc(-float(v) / math.sqrt(2)) for v in xs])
    got = np.asarray(nn.gelu(_put(c, mesh, xs, P("i")), approximate=False), np.float64)
    assert np.allclose(got, want, rtol=1e-5, atol=0), (got, want)


def _masked_softmax(x, m, axis):
    e = np.where(m, np.exp(x - np.max(np.where(m, x, -np.inf), axis, keepdims=True)), 0)
    return e / e.sum(axis, keepdims=True)


def test_softmax_and_log_softmax_where(c, mesh):
    """softmax / log_softmax take JAX's where=: masked-out elements are
    left out of the max and the sum and give 0 (softmax) or -inf
    (log_softmax); a tuple axis and axis=None as JAX's; in a jit on
    sharded x and mask, at once, and under grad (the masked elements get no
    gradient). Before, where= was a TypeError."""
    rng = np.random.default_rng(3)
    xa = rng.standard_normal((8, 6)).astype(F32)
    ma = rng.random((8, 6)) > 0.3
    ma[:, 0] = True
    x, m = _put(c, mesh, xa, P("i", "j")), _put(c, mesh, ma, P("i", "j"))
    want = _masked_softmax(xa, ma, -1)
    for got in (nn.softmax(x, where=m), shmap.jit(lambda x, m: nn.softmax(x, where=m))(x, m)):
        assert np.allclose(np.asarray(got), want, rtol=1e-5, atol=1e-7)
    got = np.asarray(shmap.jit(lambda x, m: nn.log_softmax(x, axis=-1, where=m))(x, m))
    with np.errstate(divide="ignore"):
        assert np.allclose(got, np.log(want), rtol=1e-5, atol=1e-6)
    assert np.all(np.isneginf(got[~ma]))
    got = nn.softmax(x, axis=(0, 1), where=m)
    assert np.allclose(np.asarray(got), _masked_softmax(xa, ma, None), rtol=1e-5, atol=1e-7)
    got = nn.softmax(x, axis=None)
    assert np.allclose(np.asarray(got), _masked_softmax(xa, np.ones_like(ma), None), rtol=1e-5)
    w = rng.standard_normal((8, 6)).astype(F32)
    g = np.asarray(shmap.jit(shmap.grad(lambda x, m: (nn.softmax(x, where=m) * w).sum()))(x, m))
    s = want
    g_want = s * (w - (s * w).sum(-1, keepdims=True))
    assert np.allclose(g, g_want, rtol=1e-4, atol=1e-6)
    assert np.all(g[~ma] == 0)


def test_logsumexp_b_sign_where_and_logmeanexp(c, mesh):
    """nn.logsumexp is JAX's (jax.scipy.special.logsumexp): b= scales the
    exponentials (NaN where the sum is negative, unless return_sign=),
    where= leaves elements out; nn.logmeanexp (JAX's) subtracts log of
    the count. Before, b=, return_sign= and where= were TypeErrors and
    logmeanexp was missing."""
    rng = np.random.default_rng(4)
    xa = rng.standard_normal((8, 6)).astype(F32)
    ba = rng.standard_normal((8, 6)).astype(F32)
    ma = rng.random((8, 6)) > 0.4
    ma[:, 0] = True
    x, b, m = (_put(c, mesh, a, P("i", "j")) for a in (xa, ba, ma))
    s = (ba.astype(np.float64) * np.exp(xa)).sum(1)
    out, sign = shmap.jit(lambda x, b: nn.logsumexp(x, axis=1, b=b, return_sign=True))(x, b)
    assert np.allclose(np.asarray(out), np.log(np.abs(s)), rtol=1e-5, atol=1e-6)
    assert np.array_equal(np.asarray(sign), np.sign(s).astype(F32))
    got = np.asarray(nn.logsumexp(x, axis=1, b=b))
    with np.errstate(invalid="ignore"):
        assert np.allclose(got, np.log(s), rtol=1e-5, atol=1e-6, equal_nan=True)
    got = shmap.jit(lambda x, m: nn.logsumexp(x, axis=1, where=m, keepdims=True))(x, m)
    want = np.log(np.where(ma, np.exp(xa), 0).sum(1, keepdims=True))
    assert got.shape == (8, 1) and np.allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
    got = np.asarray(nn.logmeanexp(x, axis=0, where=m))
    want = np.log(np.where(ma, np.exp(xa), 0).sum(0) / ma.sum(0))
    assert np.allclose(got, want, rtol=1e-5, atol=1e-6)
    assert np.allclose(np.asarray(nn.logmeanexp(x)), np.log(np.exp(xa).mean()), rtol=1e-5)
    assert np.allclose(np.asarray(nn.logsumexp(x)), np.log(np.exp(xa).sum()), rtol=1e-6)


def test_standardize_where_and_algorithm(c, mesh):
    """standardize takes JAX's where= (mean and variance of the elements
    where it is True) and algorithm= ('fast', JAX's default: mean(x**2) -
    mean**2 clipped at 0; 'stable': mean((x - mean)**2)); normalize passes
    where= on. Before, where= and algorithm= were TypeErrors."""
    rng = np.random.default_rng(5)
    xa = (rng.standard_normal((8, 6)) * 3 + 1).astype(F32)
    ma = rng.random((8, 6)) > 0.3
    ma[:, :2] = True
    x, m = _put(c, mesh, xa, P("i", "j")), _put(c, mesh, ma, P("i", "j"))
    cnt = ma.sum(1, keepdims=True)
    mean = np.where(ma, xa, 0).sum(1, keepdims=True) / cnt
    var = np.where(ma, (xa - mean) ** 2, 0).sum(1, keepdims=True) / cnt
    want = (xa - mean) / np.sqrt(var + 1e-5)
    for alg in ("fast", "stable"):
        got = shmap.jit(lambda x, m: nn.standardize(x, axis=1, where=m, algorithm=alg))(x, m)
        assert np.allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4), alg
    with pytest.warns(DeprecationWarning):
        got = nn.normalize(x, 1, None, None, 1e-5, m)
    assert np.allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="Unknown algorithm"):
        nn.standardize(x, algorithm="two-pass")


def test_one_hot_over_a_mesh_axis_name(c, mesh):
    """one_hot(x, n, axis=name) in a shard_map body is JAX's: x == the
    device's index along the mesh axis (x's shape), n the axis's size
    (a ValueError otherwise); dtype=None is float32. Before, an axis
    name was a TypeError (axis + rank)."""
    xa = np.array([0, 1, 3, 2, 2, 0, 1, 3], np.int32)
    f = shmap.shard_map(lambda x: nn.one_hot(x, 4, axis="i"), mesh=mesh,
                        in_specs=P("i"), out_specs=P("i"))
    got = shmap.jit(f)(_put(c, mesh, xa, P("i")))
    assert got.dtype == F32
    assert np.array_equal(np.asarray(got), (xa == np.repeat(np.arange(4), 2)).astype(F32))
    bad = shmap.shard_map(lambda x: nn.one_hot(x, 3, axis="i"), mesh=mesh,
                          in_specs=P("i"), out_specs=P("i"))
    with pytest.raises(ValueError, match="num_classes to match the size of axis i"):
        shmap.jit(bad)(_put(c, mesh, xa, P("i")))
    assert nn.one_hot(np.array([1, 0]), 2, dtype=None).dtype == F32


INITS = [
    ("normal", lambda i: i.normal(0.02)),
    ("uniform", lambda i: i.uniform(2.0)),
    ("truncated_normal", lambda i: i.truncated_normal(0.5, lower=-1.0, upper=0.5)),
    ("glorot_uniform", lambda i: i.glorot_uniform()),
    ("glorot_normal", lambda i: i.glorot_normal()),
    ("xavier_uniform", lambda i: i.xavier_uniform()),
    ("xavier_normal", lambda i: i.xavier_normal()),
    ("he_uniform", lambda i: i.he_uniform()),
    ("he_normal", lambda i: i.he_normal()),
    ("kaiming_uniform", lambda i: i.kaiming_uniform()),
    ("kaiming_normal", lambda i: i.kaiming_normal()),
    ("lecun_uniform", lambda i: i.lecun_uniform()),
    ("lecun_normal", lambda i: i.lecun_normal()),
    ("variance_scaling", lambda i: i.variance_scaling(2.0, "fan_geo_avg", "normal",
                                                      in_axis=0, out_axis=(1, 2))),
    ("zeros", lambda i: i.zeros),
    ("ones", lambda i: i.ones),
    ("constant", lambda i: i.constant(-7.0)),
    ("orthogonal", lambda i: i.orthogonal(2.0, column_axis=0)),
]


@pytest.mark.parametrize("name,make", INITS, ids=[n for n, _ in INITS])
def test_initializers_take_a_traced_key(c, mesh, name, make):
    """Each initializer runs with a key traced in a jit (an argument), as
    JAX's do, drawing in the program what a concrete key draws at once
    (bit for bit for the uniform and normal draws; the truncated normal
    ones up to an ulp of erf_inv, as random.truncated_normal's traced
    draws; orthogonal up to its QR's rounding), for a typed key and raw
    key data. Before, the samplers refused the traced key ('the key is a
    traced value, and normal draws on the host')."""
    init = make(nn.initializers)
    shape = (4, 3, 2)
    exact = not any(s in name for s in ("orthogonal", "normal")) or name in (
        "normal", "variance_scaling")
    for key in (jr.key(7), jr.PRNGKey(11), jr.key(2)):
        want = np.asarray(init(key, shape))
        got = shmap.jit(lambda k: init(k, shape))(key)
        assert got.shape == shape and got.dtype == F32
        if exact:
            assert np.array_equal(np.asarray(got), want), name
        else:
            assert np.allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6), name


def test_initializers_traced_key_sharding_vmap_and_refusals(c, mesh):
    """With a traced key: out_sharding= lays the draw out (under set_mesh,
    as random.normal's), vmap over split keys draws each key's values,
    delta_orthogonal (JAX's; missing before) puts an orthogonal matrix at
    the kernel's centre, at once and traced; a float64 draw from a traced
    key is refused with a sentence naming the initializer (the traced-key
    samplers draw float32 only)."""
    init = nn.initializers
    key = jr.key(2)
    osh = NamedSharding(mesh, P("i", None))
    with shmap.set_mesh(mesh):
        got = shmap.jit(lambda k: init.he_uniform()(k, (8, 6), out_sharding=osh))(key)
    assert got.sharding.spec == P("i", None)
    assert np.array_equal(np.asarray(got), np.asarray(init.he_uniform()(key, (8, 6))))
    keys = jr.split(key, 3)
    got = shmap.vmap(lambda k: init.lecun_normal()(k, (4, 5)))(keys)
    want = np.stack([np.asarray(init.lecun_normal()(k, (4, 5))) for k in keys])
    assert np.allclose(np.asarray(got), want, rtol=1e-6, atol=1e-7)
    d = np.asarray(init.delta_orthogonal(scale=1.5)(key, (3, 3, 2, 4)))
    assert d.shape == (3, 3, 2, 4) and not d[0].any() and not d[2].any()
    assert not d[1, 0].any() and not d[1, 2].any()
    assert np.allclose(d[1, 1] @ d[1, 1].T, 2.25 * np.eye(2), atol=1e-5)
    t = shmap.jit(lambda k: init.delta_orthogonal(scale=1.5)(k, (3, 3, 2, 4)))(key)
    assert np.allclose(np.asarray(t), d, atol=1e-6)
    with pytest.raises(ValueError, match="3D, 4D or 5D"):
        init.delta_orthogonal()(key, (2, 2))
    assert init.orthogonal()(key, (0, 3)).shape == (0, 3)
    assert isinstance(init.normal(), init.Initializer)
    with pytest.raises(shmap.InvalidArgument, match="initializers.normal: a key traced in a jit "
                                                    "draws float32 only"):
        shmap.jit(lambda k: init.normal(1.0, dtype=np.float64)(k, (2, 2)))(key)
    assert np.asarray(init.normal(1.0, dtype=np.float64)(key, (2, 2))).dtype == np.float64
