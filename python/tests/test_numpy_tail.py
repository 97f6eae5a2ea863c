"""The tail of jnp made of shmap's ops: i0, vecdot / matvec / vecmat,
nancumsum / nancumprod, the windows (bartlett, blackman, hamming, hanning,
kaiser), polyder / polyint / poly / polydiv, compress and extract (size=,
fill_value=), choose, put and place (inplace=False), the *_indices_from
helpers and mask_indices, histogram2d / histogramdd, and jnp.linalg's cond,
tensorinv and tensorsolve. Each against numpy (or JAX's documented results
where they differ: put's clipping, size= padding, the dtypes JAX gives), in
a jit on sharded Arrays and at once on Arrays; JAX's sentences where it
refuses. Runs on the cluster of conftest's c."""
import numpy as np
import pytest

import shmap
from shmap import P
from shmap import numpy as jnp

from _util import put as _put


def _np(x, dtype=None):
    r = np.asarray(x)
    assert dtype is None or r.dtype == dtype, (r.dtype, dtype)
    return r


RNG = np.random.default_rng(11)
F = RNG.standard_normal((8, 6)).astype(np.float32)   # sharded P('i', 'j')
G = RNG.standard_normal((8, 6)).astype(np.float32)
V = RNG.standard_normal(6).astype(np.float32)
M = RNG.standard_normal((8, 4)).astype(np.float32)
I = RNG.integers(-5, 6, (8, 6)).astype(np.int32)


def test_i0(c, mesh):
    """i0 of floats and of integers (float32), as numpy's, in a jit on a
    sharded array and at once."""
    x = _put(c, mesh, F * 3, P("i", "j"))
    xi = _put(c, mesh, I, P("i", "j"))
    a, b = shmap.jit(lambda x, xi: (jnp.i0(x), jnp.i0(xi)))(x, xi)
    assert np.allclose(_np(a, np.float32), np.i0(F * 3), rtol=1e-5)
    assert np.allclose(_np(b, np.float32), np.i0(I), rtol=1e-5)
    assert np.allclose(_np(jnp.i0(x), np.float32), np.i0(F * 3), rtol=1e-5)


def test_vecdot_matvec_vecmat(c, mesh):
    """vecdot along an axis (broadcasting), matvec and vecmat as numpy's
    (einsum), dtypes kept; JAX's sentence for mismatched axes."""
    x, y = _put(c, mesh, F, P("i", "j")), _put(c, mesh, G, P("i"))
    v, m = _put(c, mesh, V, P()), _put(c, mesh, M, P())
    xi = _put(c, mesh, I, P("i", "j"))

    def f(x, y, v, m, xi):
        return (jnp.vecdot(x, y), jnp.vecdot(x, y, axis=0), jnp.vecdot(x, v),
                jnp.matvec(x, v), jnp.vecmat(m[:, 0], x), jnp.vecdot(xi, xi))
    for r in (shmap.jit(f)(x, y, v, m, xi), f(x, y, v, m, xi)):
        assert np.allclose(_np(r[0], np.float32), np.sum(F * G, -1), atol=1e-5)
        assert np.allclose(_np(r[1], np.float32), np.sum(F * G, 0), atol=1e-5)
        assert np.allclose(_np(r[2], np.float32), F @ V, atol=1e-5)
        assert np.allclose(_np(r[3], np.float32), F @ V, atol=1e-5)
        assert np.allclose(_np(r[4], np.float32), M[:, 0] @ F, atol=1e-5)
        assert np.array_equal(_np(r[5], np.int32), np.sum(I * I, -1))
    with pytest.raises(ValueError, match=r"axes must match; got shapes \(8, 6\) and \(8, 4\) "
                                         r"with axis=-1"):
        jnp.vecdot(x, m)


def test_nancumsum_nancumprod(c, mesh):
    """NaNs count as 0 / 1, flattened with axis=None, along an axis, dtype=;
    integers as cumsum; JAX's sentence for out=."""
    a = np.where(RNG.random((8, 6)) < 0.3, np.nan, F * 0.5).astype(np.float32)
    x, xj = _put(c, mesh, a, P("i")), _put(c, mesh, a, P(None, "j"))
    xi, xr = _put(c, mesh, I, P("i")), _put(c, mesh, a, P())

    def f(x, xj, xi, xr):
        return (jnp.nancumsum(x, axis=1), jnp.nancumprod(xj, axis=0), jnp.nancumsum(xi, axis=1),
                jnp.nancumsum(xr[0]), jnp.nancumprod(xr[1], dtype=jnp.float32))
    for r in (shmap.jit(f)(x, xj, xi, xr), f(x, xj, xi, xr)):
        assert np.allclose(_np(r[0], np.float32), np.nancumsum(a, axis=1), atol=1e-5)
        assert np.allclose(_np(r[1], np.float32), np.nancumprod(a, axis=0), atol=1e-5)
        assert np.array_equal(_np(r[2], np.int32), np.cumsum(I, axis=1))
        assert np.allclose(_np(r[3], np.float32), np.nancumsum(a[0]), atol=1e-5)
        assert np.allclose(_np(r[4], np.float32), np.nancumprod(a[1]), atol=1e-5)
    assert np.allclose(_np(jnp.nancumsum(xr)), np.nancumsum(a), atol=1e-4)
    with pytest.raises(NotImplementedError, match="The 'out' argument to jnp.nancumsum is "
                                                  "not supported"):
        jnp.nancumsum(x, out=x)


@pytest.mark.parametrize("name", ["bartlett", "blackman", "hamming", "hanning", "kaiser"])
def test_windows(c, mesh, name):
    """Each window as numpy's, float32, for several lengths (ones for
    M <= 1), in a jit and at once on the context mesh."""
    args = (3.5,) if name == "kaiser" else ()
    fn = getattr(jnp, name)
    x = _put(c, mesh, np.zeros(8, np.float32), P("i"))
    got = shmap.jit(lambda x: (fn(8, *args) + x, fn(5, *args), fn(1, *args)))(x)
    for g, n in zip(got, (8, 5, 1)):
        assert np.allclose(_np(g, np.float32), getattr(np, name)(n, *args), atol=1e-6), n
    with shmap.use_mesh(mesh):
        for n in (0, 1, 2, 7):
            g = fn(n, *args)
            assert _np(g, np.float32).shape == (n,)
            assert np.allclose(_np(g), getattr(np, name)(n, *args), atol=1e-6), n


def test_polyder_polyint(c, mesh):
    """Derivatives and antiderivatives of every order as numpy's (k= a
    scalar or one per order), integers made float32; JAX's sentences."""
    p = np.array([3, -1, 2, 5, 4], np.int32)
    pf = np.array([0.5, -2.0, 1.5, 3.0], np.float32)
    x, xf = _put(c, mesh, p, P()), _put(c, mesh, pf, P())

    def f(x, xf):
        return (jnp.polyder(x), jnp.polyder(xf, 2), jnp.polyder(x, 0), jnp.polyint(x),
                jnp.polyint(xf, 2, k=1.5), jnp.polyint(xf, 2, k=jnp.asarray([1.0, 2.0])),
                jnp.polyint(x, 0))
    for r in (shmap.jit(f)(x, xf), f(x, xf)):
        assert np.allclose(_np(r[0], np.float32), np.polyder(p))
        assert np.allclose(_np(r[1], np.float32), np.polyder(pf, 2))
        assert np.allclose(_np(r[2], np.float32), p)
        assert np.allclose(_np(r[3], np.float32), np.polyint(p))
        assert np.allclose(_np(r[4], np.float32), np.polyint(pf, 2, k=1.5))
        assert np.allclose(_np(r[5], np.float32), np.polyint(pf, 2, k=[1.0, 2.0]))
        assert np.allclose(_np(r[6], np.float32), p)
    with pytest.raises(ValueError, match="Order of derivative must be positive"):
        jnp.polyder(x, -1)
    with pytest.raises(ValueError, match=r"Order of integral must be positive \(see polyder\)"):
        jnp.polyint(x, -1)
    with pytest.raises(ValueError, match="k must be a scalar or a rank-1 array of length 1 "
                                         "or m."):
        jnp.polyint(xf, 2, k=_put(c, mesh, np.ones(3, np.float32), P()))


def test_poly_polydiv(c, mesh):
    """poly of roots as numpy's (an empty one: 1.0); polydiv's quotient and
    (u-long) remainder as JAX's; a square matrix (eigvals) refused."""
    z = np.array([1.0, -2.0, 0.5, 3.0], np.float32)
    u = np.array([2.0, -3.0, 1.0, 4.0, -1.0], np.float32)
    v = np.array([1.5, 0.5, -2.0], np.float32)
    xz, xu, xv = (_put(c, mesh, a, P()) for a in (z, u, v))

    def f(z, u, v):
        return (jnp.poly(z),) + jnp.polydiv(u, v)
    nq, nr = np.polydiv(u.astype(np.float64), v)
    for r in (shmap.jit(f)(xz, xu, xv), f(xz, xu, xv)):
        assert np.allclose(_np(r[0], np.float32), np.poly(z), atol=1e-5)
        assert np.allclose(_np(r[1], np.float32), nq, atol=1e-5)
        rem = _np(r[2], np.float32)
        assert rem.shape == u.shape
        assert np.allclose(rem[:len(u) - len(nr)], 0, atol=1e-5)
        assert np.allclose(rem[len(u) - len(nr):], nr, atol=1e-5)
    assert _np(jnp.poly(_put(c, mesh, np.zeros(0, np.float32), P())), np.float32).shape == ()
    with pytest.raises(NotImplementedError, match="eigvals"):
        jnp.poly(_put(c, mesh, np.eye(2, dtype=np.float32), P()))


def test_compress_extract(c, mesh):
    """compress along axes (None: flattened) and extract as numpy's; with
    size= the first ones, padded with fill_value, in a jit; JAX's sentences
    (size= left out in a trace, bad size, out-of-bounds condition)."""
    cond = np.array([True, False, True, True, False, False, True, False])
    x = _put(c, mesh, I, P("i", "j"))
    xc = _put(c, mesh, cond, P("i"))
    x6 = _put(c, mesh, cond[:6], P())
    got = shmap.jit(lambda x, xc, x6: (jnp.compress(xc, x, axis=0, size=5, fill_value=-9),
                                       jnp.compress(x6, x, axis=1, size=3),
                                       jnp.extract(x > 0, x, size=30, fill_value=99)))(x, xc, x6)
    want0 = np.concatenate([I[cond], np.full((1, 6), -9, np.int32)])
    assert np.array_equal(_np(got[0], np.int32), want0)
    assert np.array_equal(_np(got[1], np.int32), np.compress(cond[:6], I, axis=1)[:, :3])
    e = np.extract(I > 0, I)
    assert np.array_equal(_np(got[2], np.int32), np.concatenate([e, np.full(30 - len(e), 99)]))
    assert np.array_equal(_np(jnp.compress(xc, x, axis=0), np.int32), np.compress(cond, I, axis=0))
    assert np.array_equal(_np(jnp.compress(xc, x)), np.compress(cond, I))
    assert np.array_equal(_np(jnp.extract(x > 0, x)), e)
    with pytest.raises(TypeError, match=r"The size argument of jnp.compress must be specified "
                                        r"in order to use jnp.compress within JAX "
                                        r"transformations"):
        shmap.jit(lambda x, xc: jnp.compress(xc, x, axis=0))(x, xc)
    with pytest.raises(ValueError, match=r"size must be positive and not greater than the size "
                                         r"of the array axis; got size=9 for a.shape\[axis\]=8"):
        jnp.compress(xc, x, axis=0, size=9)
    with pytest.raises(ValueError, match="condition contains entries that are out of bounds"):
        jnp.compress(np.array([True] * 7), x, axis=1)
    with pytest.raises(ValueError, match="condition must be a 1D array"):
        jnp.compress(x > 0, x)


def test_choose(c, mesh):
    """choose from broadcast choices as numpy's for 'raise', 'wrap' and
    'clip'; JAX's sentences (a bad entry, 'raise' in a jit, a bad mode)."""
    idx = RNG.integers(0, 3, (8, 6)).astype(np.int32)
    wild = (idx * 3 - 4).astype(np.int32)
    ch = [F, G, np.float32(7.0) * np.ones(6, np.float32)]
    xi, xw = _put(c, mesh, idx, P("i", "j")), _put(c, mesh, wild, P("i", "j"))
    xs = [_put(c, mesh, F, P("i", "j")), _put(c, mesh, G, P("i", "j")), _put(c, mesh, ch[2], P())]
    got = shmap.jit(lambda i, w, a, b, d: (jnp.choose(i, [a, b, d], mode="clip"),
                                           jnp.choose(w, [a, b, d], mode="wrap"),
                                           jnp.choose(w, [a, b, d], mode="clip")))(xi, xw, *xs)
    assert np.array_equal(_np(got[0], np.float32), np.choose(idx, ch))
    assert np.array_equal(_np(got[1], np.float32), np.choose(wild, ch, mode="wrap"))
    assert np.array_equal(_np(got[2], np.float32), np.choose(wild, ch, mode="clip"))
    assert np.array_equal(_np(jnp.choose(xi, xs), np.float32), np.choose(idx, ch))
    with pytest.raises(ValueError, match="invalid entry in choice array"):
        jnp.choose(xw, xs)
    with pytest.raises(TypeError, match=r"The error occurred because jnp.choose was "
                                        r"jit-compiled with mode='raise'"):
        shmap.jit(lambda i, a, b, d: jnp.choose(i, [a, b, d]))(xi, *xs)
    with pytest.raises(ValueError, match=r"mode='x' not understood. Must be 'raise', 'wrap', "
                                         r"or 'clip'"):
        jnp.choose(xi, xs, mode="x")
    with pytest.raises(ValueError, match="`a` array must be integer typed"):
        jnp.choose(xs[0], xs)


def test_put_place(c, mesh):
    """put at flat positions (values tiled; out-of-range positions clipped
    as JAX's unravel_index does, 'clip', 'wrap') and place (values in
    order, repeated) as numpy's, inplace=False; JAX's sentences."""
    a = np.arange(48, dtype=np.float32).reshape(8, 6)
    ind = np.array([0, 13, 47, 5], np.int32)
    oob = np.array([-1, 50, 3, -60], np.int32)
    vals = np.array([-1.0, -2.0, -3.0], np.float32)
    mask = (I > 2)
    x = _put(c, mesh, a, P("i", "j"))
    xi, xo, xv = _put(c, mesh, ind, P()), _put(c, mesh, oob, P()), _put(c, mesh, vals, P())
    xm = _put(c, mesh, mask, P("i", "j"))

    def f(x, xi, xo, xv, xm):
        return (jnp.put(x, xi, xv, inplace=False), jnp.put(x, xo, xv, inplace=False),
                jnp.put(x, xo, xv, mode="clip", inplace=False),
                jnp.put(x, xo, xv, mode="wrap", inplace=False),
                jnp.place(x, xm, xv, inplace=False))
    for r in (shmap.jit(f)(x, xi, xo, xv, xm), f(x, xi, xo, xv, xm)):
        w = a.copy()
        np.put(w, ind, vals)
        assert np.array_equal(_np(r[0], np.float32), w)
        w = a.copy()
        np.put(w, [47, 47, 3, 0], vals, mode="clip")  # JAX: -1 wraps, the rest clip
        assert np.array_equal(_np(r[1], np.float32), w)
        w = a.copy()
        np.put(w, oob, vals, mode="clip")
        assert np.array_equal(_np(r[2], np.float32), w)
        w = a.copy()
        np.put(w, oob, vals, mode="wrap")
        assert np.array_equal(_np(r[3], np.float32), w)
        w = a.copy()
        np.place(w, mask, vals)
        assert np.array_equal(_np(r[4], np.float32), w)
    with pytest.raises(ValueError, match="jax.numpy.put cannot modify arrays in-place, because "
                                         "JAX arrays are immutable. Pass inplace=False"):
        jnp.put(x, xi, xv)
    with pytest.raises(ValueError, match="jax.numpy.place cannot modify arrays in-place"):
        jnp.place(x, xm, xv)
    with pytest.raises(NotImplementedError, match="The 'raise' mode to jnp.put is not "
                                                  "supported."):
        jnp.put(x, xi, xv, mode="raise", inplace=False)
    with pytest.raises(ValueError, match="mode should be one of 'wrap' or 'clip'; got "
                                         "mode='x'"):
        jnp.put(x, xi, xv, mode="x", inplace=False)
    with pytest.raises(ValueError, match="place: arr and mask must be the same size"):
        jnp.place(x, _put(c, mesh, mask[:4], P()), xv, inplace=False)
    with pytest.raises(ValueError, match="Cannot place values from an empty array"):
        jnp.place(x, xm, xv[:0], inplace=False)


def test_index_helpers(c, mesh):
    """diag_indices_from, tril_indices_from, triu_indices_from (k=) and
    mask_indices (size=) as numpy's, int32; JAX's sentences."""
    x = _put(c, mesh, F, P("i", "j"))
    sq = _put(c, mesh, np.zeros((4, 4, 4), np.float32), P())
    for got, want in ((jnp.tril_indices_from(x), np.tril_indices_from(F)),
                      (jnp.triu_indices_from(x, k=1), np.triu_indices_from(F, k=1)),
                      (jnp.tril_indices_from(x, -2), np.tril_indices_from(F, -2)),
                      (jnp.diag_indices_from(sq), np.diag_indices_from(np.zeros((4, 4, 4))))):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert np.array_equal(_np(g, np.int32), w)
    with shmap.use_mesh(mesh):
        for fn, k in ((jnp.triu, 1), (jnp.tril, 0), (jnp.tril, -1)):
            got = jnp.mask_indices(5, fn, k)
            want = np.mask_indices(5, getattr(np, fn.__name__), k)
            for g, w in zip(got, want):
                assert np.array_equal(_np(g, np.int32), w)
    i, j = shmap.jit(lambda x: jnp.mask_indices(4, jnp.triu, 1, size=8))(x)
    wi, wj = np.mask_indices(4, np.triu, 1)
    assert np.array_equal(_np(i), np.concatenate([wi, [0, 0]]))
    assert np.array_equal(_np(j), np.concatenate([wj, [0, 0]]))
    with pytest.raises(ValueError, match="Only 2-D inputs are accepted"):
        jnp.tril_indices_from(sq)
    with pytest.raises(ValueError, match="input array must be at least 2-d"):
        jnp.diag_indices_from(_put(c, mesh, V, P()))
    with pytest.raises(ValueError, match="All dimensions of input must be of equal length"):
        jnp.diag_indices_from(x)


def test_histogram2d_dd(c, mesh):
    """histogram2d and histogramdd as numpy's (counts int32 unweighted, as
    JAX's bincount; weights, range=, explicit edges, density) in a jit and
    at once; JAX's sentences."""
    s = RNG.standard_normal((16, 3)).astype(np.float32)
    w = RNG.random(16).astype(np.float32)
    xs, xw = _put(c, mesh, s, P("i")), _put(c, mesh, w, P("i"))
    edges = np.array([-3.0, -1.0, 0.0, 0.5, 3.0], np.float32)

    def f(s, w):
        return (jnp.histogram2d(s[:, 0], s[:, 1], bins=4),
                jnp.histogram2d(s[:, 0], s[:, 1], bins=[3, jnp.asarray(edges)], weights=w),
                jnp.histogramdd(s, bins=3, range=[(-2, 2), None, (-1, 1)]),
                jnp.histogramdd(s, bins=(2, 3, 4), weights=w, density=True))
    for r in (shmap.jit(f)(xs, xw), f(xs, xw)):
        h, ex, ey = np.histogram2d(s[:, 0], s[:, 1], bins=4)
        assert np.array_equal(_np(r[0][0], np.int32), h)
        assert np.allclose(_np(r[0][1], np.float32), ex, atol=1e-6)
        assert np.allclose(_np(r[0][2], np.float32), ey, atol=1e-6)
        h, ex, ey = np.histogram2d(s[:, 0], s[:, 1], bins=[3, edges], weights=w)
        assert np.allclose(_np(r[1][0], np.float32), h, atol=1e-6)
        assert np.allclose(_np(r[1][2], np.float32), edges)
        h, es = np.histogramdd(s, bins=3, range=[(-2, 2), (s[:, 1].min(), s[:, 1].max()),
                                                 (-1, 1)])
        assert np.array_equal(_np(r[2][0], np.int32), h)
        for g, e in zip(r[2][1], es):
            assert np.allclose(_np(g, np.float32), e, atol=1e-6)
        h, es = np.histogramdd(s, bins=(2, 3, 4), weights=w, density=True)
        assert np.allclose(_np(r[3][0], np.float32), h, rtol=1e-4)
    with pytest.raises(ValueError, match="should have one weight for each sample."):
        jnp.histogramdd(xs, weights=xw[:8])
    with pytest.raises(ValueError, match="should be a bin for each dimension."):
        jnp.histogramdd(xs, bins=[2, 3])
    with pytest.raises(ValueError, match=r"For sample.shape=\(16, 3\), range must be a "
                                         r"sequence of 3 pairs or Nones"):
        jnp.histogramdd(xs, range=[(0, 1)])


def test_linalg_cond_tensorinv_tensorsolve(c, mesh):
    """jnp.linalg.cond in every norm numpy has (batched), tensorinv and
    tensorsolve (axes=) as numpy's; JAX's sentences."""
    a = (RNG.standard_normal((4, 4, 4)) + 3 * np.eye(4)).astype(np.float32)
    t = (RNG.standard_normal((4, 2, 8)) + np.eye(8).reshape(4, 2, 8)).astype(np.float32)
    b = RNG.standard_normal((4, 2)).astype(np.float32)
    xa, xt, xb = _put(c, mesh, a, P("i")), _put(c, mesh, t, P()), _put(c, mesh, b, P())
    ps = (None, 2, -2, 1, -1, np.inf, -np.inf, "fro")

    def f(a, t, b):
        return ([jnp.linalg.cond(a, p) for p in ps], jnp.linalg.tensorinv(t, 2),
                jnp.linalg.tensorsolve(t, b),
                jnp.linalg.tensorsolve(jnp.transpose(t, (2, 0, 1)), b, axes=(0,)))
    for r in (shmap.jit(f)(xa, xt, xb), f(xa, xt, xb)):
        for g, p in zip(r[0], ps):
            assert np.allclose(_np(g, np.float32), np.linalg.cond(a, p), rtol=1e-4), p
        assert np.allclose(_np(r[1], np.float32), np.linalg.tensorinv(t, 2), atol=1e-4)
        want = np.linalg.tensorsolve(t, b)
        assert np.allclose(_np(r[2], np.float32), want, atol=1e-4)
        assert np.allclose(_np(r[3], np.float32), want, atol=1e-4)
    sing = _put(c, mesh, np.ones((3, 3), np.float32), P())
    assert np.isinf(_np(jnp.linalg.cond(sing, 1)))
    with pytest.raises(ValueError, match=r"jnp.linalg.cond: input array must be at least 2D; "
                                         r"got arr.shape=\(4,\)"):
        jnp.linalg.cond(xb[:, 0])
    with pytest.raises(ValueError, match=r"jnp.linalg.cond: for p=1, array must be square; got "
                                         r"arr.shape=\(4, 2\)"):
        jnp.linalg.cond(xb, 1)
    with pytest.raises(ValueError, match="ind must be a positive integer; got ind=0"):
        jnp.linalg.tensorinv(xt, 0)
    with pytest.raises(ValueError, match=r"tensorinv is only possible when the product of the "
                                         r"first `ind` dimensions equals that of the remaining "
                                         r"dimensions. got arr.shape=\(4, 2, 8\) with ind=1."):
        jnp.linalg.tensorinv(xt, 1)
    with pytest.raises(ValueError, match="After moving axes to end, leading shape of a must "
                                         "match shape of b."):
        jnp.linalg.tensorsolve(xt, xb[:2])


def test_bincount_unreduced_weights(c, mesh):
    """bincount with weights and out_sharding unreduced over every mesh
    axis: each device its own block's sums (x sharded over i alone: the
    first device along j), their sum numpy's; a sharded out_sharding is
    JAX's sentence."""
    x = np.array([0, 1, 1, 2, 3, 3, 3, 0], np.int32)
    w = np.arange(8, dtype=np.float32)
    xs, ws = _put(c, mesh, x, P("i")), _put(c, mesh, w, P("i"))
    with shmap.use_mesh(mesh):
        f = shmap.jit(lambda x, w: jnp.bincount(x, w, length=4,
                                                out_sharding=P(unreduced={"i", "j"})))
        out = f(xs, ws)
        assert out.sharding.spec.unreduced == {"i", "j"}
        total = sum(np.asarray(s.data) for s in out.addressable_shards)
        assert np.allclose(total, np.bincount(x, w, minlength=4))
        assert np.allclose(np.asarray(shmap.reshard(out, P())), np.bincount(x, w, minlength=4))
        with pytest.raises(shmap.InvalidArgument, match="only be fully replicated or fully "
                           "unreduced"):
            shmap.jit(lambda x: jnp.bincount(x, length=4, out_sharding=P(unreduced={"i"})))(xs)


def test_broadcast_to_out_sharding(c, mesh):
    """jnp.broadcast_to(out_sharding=) of a numpy array at once, and
    lax.broadcast of a sharded one: the values numpy's, laid out as asked;
    an operand sharded otherwise is JAX's ValueError."""
    from shmap import lax
    with shmap.use_mesh(mesh):
        out = jnp.broadcast_to(V, (8, 6), out_sharding=P("i", None))
        assert out.sharding.spec == P("i", None)
        assert np.array_equal(np.asarray(out), np.broadcast_to(V, (8, 6)))
        v = _put(c, mesh, V, P("j"))
        out = shmap.jit(lambda v: lax.broadcast(v, (8,), out_sharding=P("i", "j")))(v)
        assert out.sharding.spec == P("i", "j")
        assert np.array_equal(np.asarray(out), np.broadcast_to(V, (8, 6)))
        with pytest.raises(ValueError, match="Incompatible types for broadcasting"):
            jnp.broadcast_to(v, (8, 6), out_sharding=P(None, "i"))


def test_reduce_sum_unreduced_at_once(c, mesh):
    """lax.reduce_sum with an unreduced out_sharding, at once: the partial
    sums over the dimension sharded over i, psummed over j; their sum
    numpy's."""
    from shmap import lax
    x = _put(c, mesh, F, P("i", "j"))
    with shmap.use_mesh(mesh):
        out = lax.reduce_sum(x, (0, 1), out_sharding=P(unreduced={"i"}))
        assert out.sharding.spec.unreduced == {"i"}
        assert np.allclose(np.asarray(shmap.reshard(out, P())), F.sum(), rtol=1e-5)
        assert np.allclose(sum(np.asarray(s.data) for s in out.addressable_shards),
                           2 * F.sum(), rtol=1e-5)  # each i-block's sum on both j devices


def test_reshape_order_f_and_cumsum_flat(c, mesh):
    """jnp.reshape(order='F') as numpy's, in a jit and at once (ravel); and
    cumsum without axis of a sharded array: JAX's sentence."""
    r = _put(c, mesh, F, P())
    out = shmap.jit(lambda x: jnp.reshape(x, (6, 8), order="F"))(r)
    assert np.array_equal(np.asarray(out), np.reshape(F, (6, 8), order="F"))
    assert np.array_equal(np.asarray(jnp.ravel(r, order="F")), np.ravel(F, order="F"))
    x = _put(c, mesh, F, P("i", "j"))
    with pytest.raises(shmap.InvalidArgument, match="The input should be fully replicated"):
        shmap.jit(lambda x: jnp.cumsum(x))(x)
