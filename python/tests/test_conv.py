"""Convolutions and windowed reductions (shmap._conv): lax.conv_general_dilated
against a direct numpy convolution (every tap summed in float64) over
layouts, strides, padding strings and pairs (negative ones too), input and
kernel dilation, feature groups, 1-d to 3-d; JAX's sharding rule (types,
refusals, out_sharding=); conv_transpose against the gradient of the
convolution it transposes; lax.reduce_window against numpy (max, min,
add, mul, a Python function; padding filled with init_value; dilations);
a max pool's gradient going to the first maximum of each window, as
JAX's select_and_scatter_add; gradients against central differences;
vmap; jnp.convolve / correlate against numpy. Runs on the cluster of
conftest's c."""
import itertools

import numpy as np
import pytest

import shmap
from shmap import P
from shmap import lax
from shmap import numpy as jnp

from _util import put as _put


def np_conv(lhs, rhs, strides, pads, lhs_dil, rhs_dil, dn, groups=1):
    """The convolution by its definition: every tap of the kernel a product
    over the input features, in float64."""
    ls, rs, os_ = dn
    x, w = np.transpose(lhs, ls), np.transpose(rhs, rs)  # N C S..., O I K...
    nsp = x.ndim - 2
    dil = list(x.shape[:2]) + [0 if n == 0 else (n - 1) * d + 1
                               for n, d in zip(x.shape[2:], lhs_dil)]
    xd = np.zeros(dil, np.float64)
    xd[(slice(None), slice(None)) + tuple(slice(None, None, d) for d in lhs_dil)] = x
    xp = np.pad(xd, [(0, 0), (0, 0)] + [(max(lo, 0), max(hi, 0)) for lo, hi in pads])
    xp = xp[(slice(None), slice(None)) + tuple(
        slice(max(-lo, 0), xp.shape[2 + i] - max(-hi, 0)) for i, (lo, hi) in enumerate(pads))]
    k = w.shape[2:]
    outs = [max(0, (xp.shape[2 + i] - ((k[i] - 1) * rhs_dil[i] + 1)) // strides[i] + 1)
            for i in range(nsp)]
    n, c = x.shape[:2]
    o = w.shape[0]
    cg, og = c // groups, o // groups
    out = np.zeros((n, o) + tuple(outs))
    for t in itertools.product(*(range(kk) for kk in k)):
        sl = tuple(slice(t[i] * rhs_dil[i], t[i] * rhs_dil[i] + (outs[i] - 1) * strides[i] + 1,
                         strides[i]) for i in range(nsp))
        xs = xp[(slice(None), slice(None)) + sl]
        for g in range(groups):
            out[:, g * og:(g + 1) * og] += np.einsum(
                "nc...,oc->no...", xs[:, g * cg:(g + 1) * cg],
                w[(slice(g * og, (g + 1) * og), slice(None)) + t].astype(np.float64))
    return np.transpose(out, np.argsort(os_))


RNG = np.random.default_rng(7)

# lhs shape, rhs shape, dimension_numbers, keyword arguments
CASES = [
    ((8, 3, 9, 7), (4, 3, 3, 2), None, dict(window_strides=(1, 1), padding="SAME")),
    ((8, 3, 9, 7), (4, 3, 3, 2), None, dict(window_strides=(2, 1), padding="VALID")),
    ((8, 3, 9, 7), (4, 3, 2, 3), None, dict(window_strides=(3, 2), padding="SAME_LOWER")),
    ((8, 3, 9, 7), (4, 3, 3, 2), None,
     dict(window_strides=(1, 2), padding=((2, 1), (-1, 0)), lhs_dilation=(2, 1),
          rhs_dilation=(1, 2))),
    ((8, 10, 8, 6), (3, 3, 2, 9), ("NHWC", "HWIO", "NHWC"),
     dict(window_strides=(1, 1), padding="SAME", feature_group_count=3)),
    ((8, 10, 8, 4), (3, 3, 1, 4), ("NHWC", "HWIO", "NHWC"),  # depthwise
     dict(window_strides=(2, 2), padding="SAME", feature_group_count=4)),
    ((8, 5, 11), (5, 5, 4), ("NCH", "OIH", "NCH"),
     dict(window_strides=(2,), padding=((3, 0),), rhs_dilation=(3,))),
    ((8, 4, 5, 6, 2), (2, 3, 2, 2, 3), ("NDHWC", "DHWIO", "NDHWC"),
     dict(window_strides=(1, 2, 1), padding="VALID")),
    ((8, 6, 7, 3), (2, 3, 3, 5), ("NHWC", "HWIO", "NCHW"),  # another output layout
     dict(window_strides=(1, 1), padding=((1, 1), (0, 2)))),
    ((8, 3, 4, 4), (2, 3, 5, 5), None, dict(window_strides=(1, 1), padding="VALID")),  # empty
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_conv_general_dilated(c, mesh, case):
    ls, rs, dnums, kw = CASES[case]
    x, w = RNG.standard_normal(ls), RNG.standard_normal(rs)
    dn = lax.conv_dimension_numbers(ls, rs, dnums)
    pads = kw["padding"]
    if isinstance(pads, str):
        eff = [(rs[d] - 1) * r + 1 for d, r in
               zip(dn.rhs_spec[2:], kw.get("rhs_dilation", (1,) * (len(ls) - 2)))]
        pads = lax.padtype_to_pads([ls[d] for d in dn.lhs_spec[2:]], eff, kw["window_strides"],
                                   pads)
    nsp = len(ls) - 2
    want = np_conv(x, w, kw["window_strides"], pads, kw.get("lhs_dilation", (1,) * nsp),
                   kw.get("rhs_dilation", (1,) * nsp), dn, kw.get("feature_group_count", 1))
    for dt, tol in ((np.float64, 1e-12), (np.float32, 2e-5)):
        xs = _put(c, mesh, x.astype(dt), P("i"))
        got = lax.conv_general_dilated(xs, _put(c, mesh, w.astype(dt)),
                                       dimension_numbers=dnums, **kw)
        assert got.shape == want.shape and got.dtype == dt
        assert np.allclose(np.asarray(got), want, rtol=tol, atol=tol * 10), (case, dt)
        # the batch dimension keeps its sharding (JAX's rule: the input's spec)
        spec = ["i" if d == dn.lhs_spec[0] else None for d in range(len(ls))]
        if want.size and any(s > 1 for s in want.shape):
            assert got.type == shmap.typeof(_put(c, mesh, want.astype(dt), P(*spec)))


def test_conv_sharding_rule(c, mesh):
    """JAX's _conv_general_dilated_sharding_rule: the input's spec dimension
    by dimension where the output's size still divides (a sharded spatial
    dimension too); a sharded kernel or input feature dimension needs
    out_sharding=; a spatial size that no longer divides is refused."""
    x = RNG.standard_normal((8, 8, 6, 4)).astype(np.float32)
    w = RNG.standard_normal((3, 3, 4, 6)).astype(np.float32)
    dn = ("NHWC", "HWIO", "NHWC")
    want = np_conv(x, w, (1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1),
                   lax.conv_dimension_numbers(x.shape, w.shape, dn))
    ws = _put(c, mesh, w)
    f = shmap.jit(lambda a, b: lax.conv_general_dilated(a, b, (1, 1), "SAME",
                                                        dimension_numbers=dn))
    got = f(_put(c, mesh, x, P("i", "j")), ws)  # H sharded too: kept
    assert got.type == "f32[8@i,8@j,6,6]" and np.allclose(np.asarray(got), want, atol=1e-4)
    with pytest.raises(shmap.ProgramError, match=r"conv_general_dilated on sharded dims where "
                       r"out dim \(6\) is not divisible by mesh axes \(4\) with spec \(i\) is not "
                       r"implemented. Got input type=f32\[8,8@i,6,4\] and output "
                       r"shape=\[8,6,4,6\]"):
        lax.conv_general_dilated(_put(c, mesh, x, P(None, "i")), ws, (1, 1), "VALID",
                                 dimension_numbers=dn)
    refusal = r"Please specify the output sharding via `out_sharding` parameter of " \
              r"`conv_general_dilated`"
    with pytest.raises(shmap.ProgramError, match=refusal):  # the kernel sharded
        f(_put(c, mesh, x, P("i")), _put(c, mesh, w, P(None, None, None, "j")))
    with pytest.raises(shmap.ProgramError, match=refusal):  # the input's features sharded
        f(_put(c, mesh, x, P(None, None, None, "j")), ws)
    got = lax.conv_general_dilated(_put(c, mesh, x, P(None, None, None, "j")),
                                   _put(c, mesh, w, P(None, None, None, "j")), (1, 1), "SAME",
                                   dimension_numbers=dn, out_sharding=P("i", None, None, "j"))
    assert got.type == "f32[8@i,8,6,6@j]" and np.allclose(np.asarray(got), want, atol=1e-4)
    with pytest.raises(TypeError, match="requires arguments to have the same dtypes, got "
                       "float32, float64"):
        lax.conv_general_dilated(_put(c, mesh, x), _put(c, mesh, w.astype(np.float64)),
                                 (1, 1), "SAME", dimension_numbers=dn)
    with pytest.raises(ValueError, match=r"feature_group_count must divide lhs feature "
                       r"dimension size, but 3 does not divide 4"):
        lax.conv_general_dilated(_put(c, mesh, x), ws, (1, 1), "SAME", dimension_numbers=dn,
                                 feature_group_count=3)
    with pytest.raises(ValueError, match="String padding is not implemented for transposed"):
        lax.conv_general_dilated(_put(c, mesh, x), ws, (1, 1), "SAME", lhs_dilation=(2, 1),
                                 dimension_numbers=dn)


def test_conv_grad_and_vmap(c, mesh):
    """grad through a strided, dilated convolution and a max pool against
    central differences in float64 (directional derivatives); the
    gradient's types are the primals'; vmap over a batch of kernels."""
    x = RNG.standard_normal((4, 6, 5, 3))
    w = RNG.standard_normal((3, 2, 3, 4))
    dn = ("NHWC", "HWIO", "NHWC")

    def loss(a, b):
        y = lax.conv_general_dilated(a, b, (2, 1), "SAME", rhs_dilation=(1, 2),
                                     dimension_numbers=dn)
        p = lax.reduce_window(y, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 1, 1, 1), "SAME")
        return jnp.sum(jnp.tanh(p) ** 2)

    xs, ws = _put(c, mesh, x, P("i")), _put(c, mesh, w)
    gx, gw = shmap.jit(shmap.grad(loss, argnums=(0, 1)))(xs, ws)
    assert gx.type == xs.type and gw.type == ws.type
    f = shmap.jit(loss)
    eps = 1e-6
    for _ in range(3):
        vx, vw = RNG.standard_normal(x.shape), RNG.standard_normal(w.shape)
        num = (float(f(_put(c, mesh, x + eps * vx, P("i")), _put(c, mesh, w + eps * vw))) -
               float(f(_put(c, mesh, x - eps * vx, P("i")), _put(c, mesh, w - eps * vw)))) / \
            (2 * eps)
        ana = float((np.asarray(gx) * vx).sum() + (np.asarray(gw) * vw).sum())
        assert abs(num - ana) <= 1e-6 * max(1.0, abs(num)), (num, ana)
    ks = RNG.standard_normal((5, 3, 2, 3, 4))
    got = shmap.jit(shmap.vmap(lambda k: lax.conv_general_dilated(
        xs, k, (1, 1), "VALID", dimension_numbers=dn)))(_put(c, mesh, ks))
    d = lax.conv_dimension_numbers(x.shape, w.shape, dn)
    for b in range(5):
        want = np_conv(x, ks[b], (1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1), d)
        assert np.allclose(np.asarray(got)[b], want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("stride,k,padding", [(2, 3, "SAME"), (2, 4, "SAME"), (2, 3, "VALID"),
                                              (1, 3, "SAME"), (3, 2, "VALID")])
def test_conv_transpose_is_the_gradient(c, mesh, stride, k, padding):
    """conv_transpose(g, w, strides, padding, transpose_kernel=True) is the
    gradient of conv(x, w, strides, padding) with respect to x where the
    sizes line up (JAX's documented use), computed here two ways: by the
    strided slices' own transposes and by the dilated input."""
    dn = ("NHWC", "HWIO", "NHWC")
    n = 6 * stride + (max(k - stride, 0) if padding == "VALID" else 0)
    x = RNG.standard_normal((4, n, n, 3))
    w = RNG.standard_normal((k, k, 3, 4))
    g = RNG.standard_normal((4, 6, 6, 4))

    @shmap.jit
    def both(a, b, ct):
        _, vjp = shmap.vjp(lambda v: lax.conv_general_dilated(v, b, (stride, stride), padding,
                                                              dimension_numbers=dn), a)
        return vjp(ct)[0], lax.conv_transpose(ct, b, (stride, stride), padding,
                                              dimension_numbers=dn, transpose_kernel=True)

    want, got = both(_put(c, mesh, x, P("i")), _put(c, mesh, w), _put(c, mesh, g, P("i")))
    assert got.shape == x.shape
    assert np.allclose(np.asarray(got), np.asarray(want), rtol=1e-12, atol=1e-12)


def np_reduce_window(x, init, ufunc, window, strides, pads, base_dil, win_dil):
    dil = [0 if n == 0 else (n - 1) * d + 1 for n, d in zip(x.shape, base_dil)]
    xd = np.full(dil, init, x.dtype)
    xd[tuple(slice(None, None, d) for d in base_dil)] = x
    xp = np.pad(xd, [(max(lo, 0), max(hi, 0)) for lo, hi in pads], constant_values=init)
    xp = xp[tuple(slice(max(-lo, 0), xp.shape[i] - max(-hi, 0))
                  for i, (lo, hi) in enumerate(pads))]
    outs = [max(0, (xp.shape[i] - ((window[i] - 1) * win_dil[i] + 1)) // strides[i] + 1)
            for i in range(x.ndim)]
    out = np.full(outs, init, x.dtype)
    for t in itertools.product(*(range(k) for k in window)):
        sl = tuple(slice(t[i] * win_dil[i], t[i] * win_dil[i] + (outs[i] - 1) * strides[i] + 1,
                         strides[i]) for i in range(x.ndim))
        out = ufunc(out, xp[sl])
    return out


def test_reduce_window(c, mesh):
    """lax.reduce_window against numpy: max and min pools (VALID, SAME with
    the padding filled by init_value), sums (avg pooling), products, a
    Python function; base and window dilation; an init that is no identity
    takes part; the sharding of the dimensions the window leaves alone is
    kept; at once and in a jit."""
    x = RNG.standard_normal((8, 9, 6, 4)).astype(np.float32)
    xs = _put(c, mesh, x, P("i", None, None, "j"))
    cases = [
        (-np.inf, lax.max, np.maximum, (1, 2, 2, 1), (1, 2, 2, 1), "VALID", None, None),
        (-np.inf, lax.max, np.maximum, (1, 3, 3, 1), (1, 1, 1, 1), "SAME", None, None),
        (np.inf, lax.min, np.minimum, (1, 3, 2, 1), (1, 2, 1, 1), "SAME_LOWER", None, None),
        (0.0, lax.add, np.add, (1, 3, 3, 1), (1, 2, 2, 1), ((0, 0), (1, 1), (2, 0), (0, 0)),
         None, None),
        (1.0, lax.mul, np.multiply, (1, 2, 1, 1), (1, 1, 1, 1), "VALID", None, None),
        (0.0, lambda a, b: a + b, np.add, (1, 2, 2, 1), (1, 1, 1, 1), "VALID", (1, 2, 1, 1),
         (1, 1, 2, 1)),
        (0.5, lax.max, np.maximum, (1, 2, 2, 1), (1, 2, 2, 1), "VALID", None, None),
        (-np.inf, jnp.maximum, np.maximum, (1, 2, 3, 1), (1, 1, 2, 1), ((0, 0), (-1, 2), (1, 1),
                                                                       (0, 0)), None, (1, 2, 1, 1)),
    ]
    for init, comp, uf, win, st, pad, bd, wd in cases:
        nd = 4
        pads = pad if not isinstance(pad, str) else lax.padtype_to_pads(
            x.shape, [(k - 1) * r + 1 for k, r in zip(win, wd or (1,) * nd)], st, pad)
        want = np_reduce_window(x, np.float32(init), uf, win, st, pads, bd or (1,) * nd,
                                wd or (1,) * nd)
        got = lax.reduce_window(xs, init, comp, win, st, pad, bd, wd)
        assert np.allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5), (init, win, st, pad)
        assert got.type == f"f32[8@i,{want.shape[1]},{want.shape[2]},4@j]"
    # in a jit: an average pool
    avg = shmap.jit(lambda a: lax.reduce_window(a, 0.0, lax.add, (1, 3, 2, 1), (1, 3, 2, 1),
                                                "VALID") / 6)(xs)
    assert np.allclose(np.asarray(avg), x.reshape(8, 3, 3, 3, 2, 4).mean(axis=(2, 4)),
                       atol=1e-6)
    with pytest.raises(shmap.ProgramError, match=r"reduce_window on sharded dims where out dim "
                       r"\(3\) is not divisible by mesh axes \(4\) with spec \(i\)"):
        lax.reduce_window(_put(c, mesh, np.zeros((8, 4), np.float32), P("i")), 0.0, lax.add,
                          (3, 1), (2, 1), "VALID")


def test_max_pool_gradient_goes_to_the_first_maximum(c, mesh):
    """A window's max differentiates to the first element (row-major in the
    window) that holds it, as JAX's select_and_scatter_add: with ties (a
    ReLU's zeros) nothing is shared."""
    x = np.maximum(RNG.standard_normal((4, 6, 6, 2)), 0)
    x[0, :2, :2, 0] = 1.5  # a window of four equal maxima
    g = shmap.grad(lambda a: jnp.sum(lax.reduce_window(a, -jnp.inf, lax.max, (1, 2, 2, 1),
                                                       (1, 2, 2, 1), "VALID") * 3))(
        _put(c, mesh, x, P("i")))
    want = np.zeros_like(x)
    for n, i, j, ch in itertools.product(range(4), range(3), range(3), range(2)):
        win = x[n, 2 * i:2 * i + 2, 2 * j:2 * j + 2, ch].ravel()
        k = int(np.argmax(win))
        want[n, 2 * i + k // 2, 2 * j + k % 2, ch] = 3
    assert np.array_equal(np.asarray(g), want)


def test_convolve_correlate(c, mesh):
    """jnp.convolve and jnp.correlate against numpy: every mode, either
    input the longer, integers promoted to float32 (as JAX's)."""
    for a, v in [(RNG.standard_normal(9), RNG.standard_normal(4)),
                 (RNG.standard_normal(3), RNG.standard_normal(7)),
                 (RNG.standard_normal(5), RNG.standard_normal(5))]:
        for mode in ("full", "same", "valid"):
            for name in ("convolve", "correlate"):
                got = getattr(jnp, name)(_put(c, mesh, a), _put(c, mesh, v), mode=mode)
                want = getattr(np, name)(a, v, mode=mode)
                assert got.shape == want.shape and np.allclose(np.asarray(got), want,
                                                               rtol=1e-12, atol=1e-12)
    got = jnp.convolve(_put(c, mesh, np.arange(6, dtype=np.int32)),
                       _put(c, mesh, np.array([1, -2, 1], np.int32)))
    assert got.dtype == np.float32
    assert np.array_equal(np.asarray(got), np.convolve(np.arange(6), [1, -2, 1]))
    with pytest.raises(ValueError, match="mode must be one of"):
        jnp.convolve(_put(c, mesh, np.ones(3)), _put(c, mesh, np.ones(2)), mode="nope")
