"""More of jnp made of shmap's ops: the set operations (isin, setdiff1d,
union1d, setxor1d, intersect1d, unique_values / counts / inverse / all),
array helpers (array_split, block, geomspace, rollaxis, ravel_multi_index,
trim_zeros, mgrid, ogrid), the floats' bits (frexp, nextafter, spacing),
integer bits (bitwise_count, packbits, unpackbits) and polyfit. Each
against numpy, or JAX's documented results where they differ (size=
padding, fill values, spacing(-0.0)): in a jit on sharded Arrays, at once
on Arrays, with the dtypes JAX gives; JAX's sentences where it refuses
(a size= left out in a trace). Runs on the cluster of conftest's c."""
import numpy as np
import pytest

import shmap
from shmap import P
from shmap import numpy as jnp

from _util import put as _put


RNG = np.random.default_rng(7)
A1 = RNG.integers(-6, 7, (8, 6)).astype(np.int32)  # duplicates, sharded P('i', 'j')
A2 = RNG.integers(-3, 10, 16).astype(np.int32)     # sharded P('i')


def _pad(v, size, fill):
    """v's first size entries, then fill (JAX's size= / fill_value=)."""
    v = np.asarray(v)[:size]
    return np.concatenate([v, np.full(size - len(v), fill, v.dtype)])


def _np(x, dtype=None):
    r = np.asarray(x)
    assert dtype is None or r.dtype == dtype, (r.dtype, dtype)
    return r


# ---- set operations ------------------------------------------------------------------


def test_isin(c, mesh):
    """isin by every method JAX has (the same answers), invert, in element's
    shape (bool), on sharded arrays in a jit and at once; NaN is in
    nothing; JAX's sentences for a bad method and a list."""
    x, t = _put(c, mesh, A1, P("i", "j")), _put(c, mesh, A2, P("i"))
    row = _put(c, mesh, A1[0], P())
    want = np.isin(A1, A2)

    def f(x, t, row):
        return (jnp.isin(x, t), jnp.isin(x, t, method="compare_all"),
                jnp.isin(x, t, method="binary_search"), jnp.isin(x, t, method="sort"),
                jnp.isin(x, t, invert=True), jnp.isin(x, t, invert=True, method="sort"),
                jnp.isin(x, t, invert=True, method="binary_search"),
                jnp.isin(row, jnp.unique(t, size=9), assume_unique=True, method="sort"))
    r = shmap.jit(f)(x, t, row)
    for got in r[:4]:
        assert np.array_equal(_np(got, np.bool_), want)
    for got in r[4:7]:
        assert np.array_equal(_np(got, np.bool_), ~want)
    assert np.array_equal(_np(r[7]), np.isin(A1[0], A2))
    assert np.array_equal(_np(jnp.isin(x, t)), want)
    fa = np.array([1.5, np.nan, 3.0, -2.0, 7.0, 0.0, np.nan, 2.0], np.float32)
    ft = np.array([np.nan, 3.0, 2.0, 9.0], np.float32)
    for method in ("auto", "binary_search", "sort"):
        got = jnp.isin(_put(c, mesh, fa, P("i")), _put(c, mesh, ft, P()), method=method)
        assert _np(got).tolist() == np.isin(fa, ft).tolist(), method
    with pytest.raises(ValueError, match=r"method='nope' is not implemented; options are "
                                         r"'compare_all', 'binary_search', 'sort', and 'auto'"):
        jnp.isin(x, t, method="nope")
    with pytest.raises(TypeError, match=r"isin requires ndarray or scalar arguments, got "
                                        r"<class 'list'> at position 1\."):
        jnp.isin(x, [1, 2])


def test_set_operations_with_size_in_jit(c, mesh):
    """size= and fill_value= as JAX's: the first size sorted values, the rest
    fill_value, by default 0 for setdiff1d, the smallest value for union1d
    (unique's) and the smallest result for setxor1d and intersect1d (whose
    indices past the results are the arrays' lengths); dtypes promoted
    (setdiff1d keeps ar1's); flattened, sharded inputs."""
    x, t = _put(c, mesh, A1, P("i", "j")), _put(c, mesh, A2, P("i"))
    tf = _put(c, mesh, A2.astype(np.float32), P("i"))
    diff, union = np.setdiff1d(A1, A2), np.union1d(A1, A2)
    xor, (inter, i1, i2) = np.setxor1d(A1, A2), np.intersect1d(A1, A2, return_indices=True)
    k = 20

    def f(x, t, tf):
        return (jnp.setdiff1d(x, t, size=k), jnp.setdiff1d(x, tf, size=k, fill_value=-9),
                jnp.setdiff1d(x, t, size=2),
                jnp.union1d(x, tf, size=k), jnp.union1d(x, t, size=k, fill_value=99),
                jnp.union1d(x, t, size=3),
                jnp.setxor1d(x, t, size=k), jnp.setxor1d(x, tf, size=k, fill_value=0.5),
                jnp.setxor1d(x, t, size=2),
                jnp.intersect1d(x, tf, return_indices=True, size=k),
                jnp.intersect1d(x, t, size=k, fill_value=-1), jnp.intersect1d(x, t, size=2))
    r = shmap.jit(f)(x, t, tf)
    assert _np(r[0], np.int32).tolist() == _pad(diff, k, 0).tolist()
    assert _np(r[1], np.int32).tolist() == _pad(diff, k, -9).tolist()
    assert _np(r[2]).tolist() == diff[:2].tolist()
    assert _np(r[3], np.float32).tolist() == _pad(union, k, union.min()).tolist()
    assert _np(r[4], np.int32).tolist() == _pad(union, k, 99).tolist()
    assert _np(r[5]).tolist() == union[:3].tolist()
    assert _np(r[6], np.int32).tolist() == _pad(xor, k, xor.min()).tolist()
    assert _np(r[7], np.float32).tolist() == _pad(xor.astype(np.float32), k, 0.5).tolist()
    assert _np(r[8]).tolist() == xor[:2].tolist()
    v, j1, j2 = r[9]
    assert _np(v, np.float32).tolist() == _pad(inter, k, inter.min()).tolist()
    assert _np(j1, np.int32).tolist() == _pad(i1, k, A1.size).tolist()
    assert _np(j2, np.int32).tolist() == _pad(i2, k, A2.size).tolist()
    assert _np(r[10]).tolist() == _pad(inter, k, -1).tolist()
    assert _np(r[11]).tolist() == inter[:2].tolist()


def test_set_operations_at_once(c, mesh):
    """Without size= outside a trace the result's length is counted first
    (as JAX computes eagerly): numpy's results exactly, for sharded Arrays,
    assume_unique inputs and numpy arrays on the context mesh."""
    x, t = _put(c, mesh, A1, P("i", "j")), _put(c, mesh, A2, P("i"))
    assert _np(jnp.setdiff1d(x, t), np.int32).tolist() == np.setdiff1d(A1, A2).tolist()
    assert _np(jnp.setdiff1d(t, x)).tolist() == np.setdiff1d(A2, A1).tolist()
    assert _np(jnp.union1d(x, t), np.int32).tolist() == np.union1d(A1, A2).tolist()
    assert _np(jnp.setxor1d(x, t), np.int32).tolist() == np.setxor1d(A1, A2).tolist()
    got = jnp.intersect1d(x, t, return_indices=True)
    want = np.intersect1d(A1, A2, return_indices=True)
    assert [_np(g).tolist() for g in got] == [w.tolist() for w in want]
    assert _np(jnp.intersect1d(t, x)).tolist() == np.intersect1d(A2, A1).tolist()
    u1, u2 = np.unique(A1)[::-1].copy(), np.unique(A2)  # distinct, not sorted
    a, b = _put(c, mesh, u1, P()), _put(c, mesh, u2, P())
    assert _np(jnp.setdiff1d(a, b, assume_unique=True)).tolist() == \
        np.setdiff1d(u1, u2, assume_unique=True).tolist()
    assert _np(jnp.setxor1d(a, b, assume_unique=True)).tolist() == \
        np.setxor1d(u1, u2, assume_unique=True).tolist()
    got = jnp.intersect1d(a, b, assume_unique=True, return_indices=True)
    want = np.intersect1d(u1, u2, assume_unique=True, return_indices=True)
    assert [_np(g).tolist() for g in got] == [w.tolist() for w in want]
    nan = np.array([2.0, np.nan, 1.0, np.nan, 5.0, 2.0, 7.0, 1.0], np.float32)
    other = np.array([np.nan, 1.0, 3.0, 5.0], np.float32)
    xn, on = _put(c, mesh, nan, P("i")), _put(c, mesh, other, P())
    for ours, theirs in ((jnp.setdiff1d, np.setdiff1d), (jnp.union1d, np.union1d),
                         (jnp.setxor1d, np.setxor1d), (jnp.intersect1d, np.intersect1d)):
        got, want = _np(ours(xn, on), np.float32), theirs(nan, other)
        assert np.array_equal(got, want, equal_nan=True), (ours.__name__, got, want)
    with shmap.use_mesh(mesh):
        got = jnp.setdiff1d(A1.astype(np.float32), A2.astype(np.float32))
        assert isinstance(got, shmap.Array)
        assert _np(got).tolist() == np.setdiff1d(A1, A2).tolist()


def test_set_operations_need_size_in_traces(c, mesh):
    """Inside a traced function without size=: JAX's ConcretizationTypeError
    sentences (setdiff1d's and union1d's own, jnp.unique's for the rest),
    and for setxor1d / intersect1d with assume_unique the refusal of the
    traced boolean mask JAX indexes with."""
    x, t = _put(c, mesh, A1, P("i", "j")), _put(c, mesh, A2, P("i"))
    head = r"^Abstract tracer value encountered where concrete value is expected: "
    uniq = (r"traced array with shape bool\[48\]\nThe error arose in jnp.unique\(\). To make "
            r"jnp.unique\(\) compatible with JIT and other transforms, you can specify a "
            r"concrete value for the size argument, which will determine the output size.")
    cases = [
        (lambda x, t: jnp.setdiff1d(x, t), r"traced array with shape int32\[8,6\]\n"
                                           r"The error arose in setdiff1d\(\)$"),
        (lambda x, t: jnp.union1d(x, t), r"traced array with shape int32\[8,6\]\n"
                                         r"The error arose in union1d\(\)$"),
        (lambda x, t: jnp.setxor1d(x, t), uniq),
        (lambda x, t: jnp.intersect1d(x, t, return_indices=True), uniq),
        (lambda x, t: jnp.unique_values(x), uniq),
        (lambda x, t: jnp.unique_counts(x), uniq),
        (lambda x, t: jnp.unique_inverse(x), uniq),
        (lambda x, t: jnp.unique_all(x), uniq),
    ]
    for f, msg in cases:
        with pytest.raises(jnp.ConcretizationTypeError, match=head + msg) as e:
            shmap.jit(f)(x, t)
        assert isinstance(e.value, TypeError) and isinstance(e.value, shmap.InvalidArgument)
    for f in (jnp.setxor1d, jnp.intersect1d):
        with pytest.raises(shmap.errors.NonConcreteBooleanIndexError,
                           match="Array boolean indices must be concrete"):
            shmap.jit(lambda x, t: f(x, t, assume_unique=True))(x, t)
    with pytest.raises(TypeError, match=r"setdiff1d requires ndarray or scalar arguments, got "
                                        r"<class 'list'> at position 0\."):
        jnp.setdiff1d([1, 2], t)


def test_unique_variants(c, mesh):
    """unique_values / counts / inverse / all: jnp.unique with
    equal_nan=False (each NaN its own value), NamedTuples with JAX's field
    names, the inverse in x's shape; size= and fill_value= in a jit on a
    sharded array; at once without size."""
    xa = np.array([3, np.nan, 1, 3, np.nan, 2, 1, 1], np.float32)
    u, idx, inv, cnt = np.unique(xa, return_index=True, return_inverse=True,
                                 return_counts=True, equal_nan=False)
    assert len(u) == 5  # 1 2 3 nan nan
    x = _put(c, mesh, xa, P("i"))

    def f(x):
        return (jnp.unique_values(x, size=7, fill_value=-1.0), jnp.unique_counts(x, size=7),
                jnp.unique_inverse(x, size=3), jnp.unique_all(x, size=7, fill_value=-1.0))
    vals, counts, inverse, every = shmap.jit(f)(x)
    assert np.array_equal(_np(vals, np.float32), _pad(u, 7, -1.0), equal_nan=True)
    assert counts._fields == ("values", "counts")
    assert np.array_equal(_np(counts.values), _pad(u, 7, u[0]), equal_nan=True)
    assert _np(counts.counts, np.int32).tolist() == _pad(cnt, 7, 0).tolist()
    assert _np(inverse.values).tolist() == u[:3].tolist()
    assert _np(inverse.inverse_indices, np.int32).tolist() == inv.tolist()
    assert every._fields == ("values", "indices", "inverse_indices", "counts")
    assert _np(every.indices, np.int32).tolist() == _pad(idx, 7, idx[0]).tolist()
    assert _np(every.inverse_indices).tolist() == inv.tolist()
    assert _np(every.counts).tolist() == _pad(cnt, 7, 0).tolist()
    assert np.array_equal(_np(jnp.unique_values(x)), u, equal_nan=True)
    got = jnp.unique_all(x)
    assert np.array_equal(_np(got.values), u, equal_nan=True)
    assert [_np(got[k]).tolist() for k in (1, 2, 3)] == [idx.tolist(), inv.tolist(), cnt.tolist()]
    m = _put(c, mesh, A1, P("i", "j"))
    r = jnp.unique_inverse(m)
    _, minv = np.unique(A1, return_inverse=True)
    assert _np(r.inverse_indices).shape == (8, 6)
    assert _np(r.inverse_indices).tolist() == minv.reshape(8, 6).tolist()
    assert np.array_equal(_np(r.values)[_np(r.inverse_indices)], A1)
    counts = jnp.unique_counts(m)
    assert _np(counts.counts).tolist() == np.unique(A1, return_counts=True)[1].tolist()


# ---- array helpers ---------------------------------------------------------------------

XA = np.arange(48, dtype=np.float32).reshape(8, 6) * 0.5 - 3


def test_array_split_block_rollaxis(c, mesh):
    """array_split's uneven sections and indices, split's JAX sentence,
    block's nesting (and its refusals), rollaxis against numpy's; in a jit
    on sharded arrays and at once."""
    x = _put(c, mesh, XA, P("i", "j"))
    xr = _put(c, mesh, XA, P())

    def f(x, xr):
        return (jnp.array_split(xr, 3), jnp.array_split(xr, 4, axis=1),
                jnp.array_split(x, [2, 4], axis=1), jnp.array_split(xr, [1, 5, 20], axis=0),
                jnp.block([[x, x * 2], [x * 3, x * 4]]),
                jnp.block([[xr[0]], [xr[1:3]]]), jnp.rollaxis(x, 1))
    r = shmap.jit(f)(x, xr)
    for got, want in zip(r[:4], (np.array_split(XA, 3), np.array_split(XA, 4, axis=1),
                                 np.array_split(XA, [2, 4], axis=1),
                                 np.array_split(XA, [1, 5, 20], axis=0))):
        assert len(got) == len(want)
        assert all(np.array_equal(_np(g, np.float32), w) for g, w in zip(got, want))
    assert np.array_equal(_np(r[4]), np.block([[XA, XA * 2], [XA * 3, XA * 4]]))
    assert np.array_equal(_np(r[5]), np.block([[XA[0]], [XA[1:3]]]))
    assert np.array_equal(_np(r[6]), np.rollaxis(XA, 1))
    parts = jnp.array_split(xr, 5)
    assert [_np(p).tolist() for p in parts] == [p.tolist() for p in np.array_split(XA, 5)]
    with pytest.raises(ValueError, match=r"^array split does not result in an equal "
                                         r"division: rest is 3$"):
        jnp.split(xr, 5)
    b = jnp.block([[xr[:2, :2], xr[:2, 2:]], [xr[2:]]])
    assert np.array_equal(_np(b), XA)
    cube = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    xc = _put(c, mesh, cube, P())
    for axis, start in ((2, 0), (0, 3), (-1, 1), (1, -1), (0, 2), (2, 3)):
        got = _np(jnp.rollaxis(xc, axis, start), np.int32)
        assert np.array_equal(got, np.rollaxis(cube, axis, start)), (axis, start)
    with pytest.raises(ValueError, match=r"^start=5 must satisfy -3<=start<=3$"):
        jnp.rollaxis(xc, 0, 5)
    with pytest.raises(ValueError, match="jax.numpy.block does not allow tuples"):
        jnp.block((xr, xr))
    with pytest.raises(ValueError, match="Mismatched list depths in jax.numpy.block"):
        jnp.block([[xr], xr])
    with pytest.raises(ValueError, match="jax.numpy.block does not allow empty list arguments"):
        jnp.block([])


def test_geomspace_mgrid_ogrid(c, mesh):
    """geomspace against numpy's (negative bounds, endpoint=False, array
    bounds along axis 1, traced bounds in a jit), float32; mgrid / ogrid
    with JAX's dtypes (int32 for integer slices, float32 for a complex step
    and the promotion of both): numpy arrays with no mesh, Arrays on the
    context mesh, traced in a jit."""
    g = jnp.geomspace(1, 1000, 4)  # no mesh set: numpy, as the creation functions
    assert isinstance(g, np.ndarray) and g.dtype == np.float32
    assert np.allclose(g, [1, 10, 100, 1000], rtol=1e-6)
    lo = np.array([1.0, -2.0], np.float32)
    hi = np.array([1000.0, -32.0], np.float32)
    with shmap.use_mesh(mesh):
        cases = [(jnp.geomspace(1, 16, 5), np.geomspace(1, 16, 5)),
                 (jnp.geomspace(-1, -16, 5), np.geomspace(-1, -16, 5)),
                 (jnp.geomspace(1, 16, 4, endpoint=False), np.geomspace(1, 16, 4, endpoint=False)),
                 (jnp.geomspace(lo, hi, 5, axis=1), np.geomspace(lo, hi, 5, axis=1)),
                 (jnp.geomspace(2.0, 0.5, 3), np.geomspace(2.0, 0.5, 3))]
        for got, want in cases:
            assert isinstance(got, shmap.Array)
            assert _np(got, np.float32).shape == want.shape
            assert np.allclose(_np(got), want, rtol=2e-6), (got, want)
        assert isinstance(jnp.mgrid[0:3, 0:4:2], shmap.Array)
        assert np.array_equal(_np(jnp.mgrid[0:3, 0:4:2], np.int32), np.mgrid[0:3, 0:4:2])
        og = jnp.ogrid[0:3, 0:1:4j]
        assert [_np(o, np.float32).shape for o in og] == [(3, 1), (1, 4)]
        assert np.allclose(_np(og[1]), np.ogrid[0:3, 0:1:4j][1])
    y = _put(c, mesh, np.array([1.0, 3.0, 2.0, 5.0], np.float32), P("i"))
    r = shmap.jit(lambda y: jnp.geomspace(y[1], y[3] * 100, 4))(y)
    assert np.allclose(_np(r, np.float32), np.geomspace(3.0, 500.0, 4), rtol=2e-6)
    m = jnp.mgrid[0:3, 0:1:3j]
    assert isinstance(m, np.ndarray) and m.dtype == np.float32
    assert np.allclose(m, np.mgrid[0:3, 0:1:3j])
    assert jnp.mgrid[2:7:2].tolist() == [2, 4, 6] and jnp.mgrid[2:7:2].dtype == np.int32
    o = jnp.ogrid[0:2, 1:4]
    assert [v.tolist() for v in o] == [[[0], [1]], [[1, 2, 3]]]
    assert all(v.dtype == np.int32 for v in o)
    assert jnp.mgrid[()].shape == (0,) and jnp.ogrid[()] == []
    x = _put(c, mesh, XA, P("i", "j"))
    r = shmap.jit(lambda x: (jnp.mgrid[0:8, 0:6][0] * 10 + x, jnp.ogrid[0:8, 0:6][1] + x))(x)
    assert np.array_equal(_np(r[0], np.float32), np.mgrid[0:8, 0:6][0] * 10 + XA)
    assert np.array_equal(_np(r[1], np.float32), np.ogrid[0:8, 0:6][1] + XA)


def test_ravel_multi_index(c, mesh):
    """numpy's flat indices for modes clip and wrap, orders C and F, in a
    jit on sharded indices (int32, or the dtype given); mode='raise'
    checks the coordinates at once, and in a jit is JAX's
    ConcretizationTypeError; JAX's other refusals."""
    ia = np.array([0, 3, 6, 7, -1, 2, 9, 4, 1, 0, 5, 6, 3, 2, 8, -3], np.int32)
    ja = np.array([4, 8, 0, 9, 2, -2, 3, 1, 11, 5, 6, 7, 0, 1, 2, 3], np.int32)
    i, j = _put(c, mesh, ia, P("i")), _put(c, mesh, ja, P("i"))
    dims = (7, 9)

    def f(i, j):
        return [jnp.ravel_multi_index((i, j), dims, mode=m, order=o)
                for m in ("clip", "wrap") for o in ("C", "F")]
    r = shmap.jit(f)(i, j)
    want = [np.ravel_multi_index((ia, ja), dims, mode=m, order=o)
            for m in ("clip", "wrap") for o in ("C", "F")]
    for got, w in zip(r, want):
        assert _np(got, np.int32).tolist() == w.tolist()
    ok_i, ok_j = np.clip(ia, 0, 6), np.clip(ja, 0, 8)
    got = jnp.ravel_multi_index((_put(c, mesh, ok_i, P("i")), _put(c, mesh, ok_j, P("i"))),
                                dims)
    assert _np(got, np.int32).tolist() == np.ravel_multi_index((ok_i, ok_j), dims).tolist()
    with pytest.raises(ValueError, match="^invalid entry in coordinates array$"):
        jnp.ravel_multi_index((i, j), dims)
    with pytest.raises(jnp.ConcretizationTypeError,
                       match=r"traced array with shape int32\[16\]\nThe error occurred because "
                             r"ravel_multi_index was jit-compiled with mode='raise'. Use "
                             r"mode='wrap' or mode='clip' instead."):
        shmap.jit(lambda i, j: jnp.ravel_multi_index((i, j), dims))(i, j)
    big = jnp.ravel_multi_index((i, j), (2 ** 16, 2 ** 16), mode="wrap", dtype=jnp.int64)
    assert _np(big, np.int64).tolist() == \
        (np.mod(ia, 2 ** 16).astype(np.int64) * 2 ** 16 + np.mod(ja, 2 ** 16)).tolist()
    with pytest.raises(ValueError, match=r"dtype=dtype\('int32'\) not large enough to hold "
                                         r"flattened index for dims=\(65536, 65536\)"):
        jnp.ravel_multi_index((i, j), (2 ** 16, 2 ** 16), mode="wrap")
    with pytest.raises(ValueError, match=r"^dtype=dtype\('float32'\) is not an integer type\.$"):
        jnp.ravel_multi_index((i, j), dims, mode="clip", dtype=jnp.float32)
    with pytest.raises(ValueError, match=r"^dtype=dtype\('float32'\) is not an integer type"):
        jnp.ravel_multi_index((i, jnp.astype(j, np.float32)), dims, mode="clip")  # promoted
    with pytest.raises(TypeError, match="^only int indices permitted$"):
        jnp.ravel_multi_index((i, jnp.astype(j, np.float32)), dims, mode="clip", dtype=jnp.int32)
    with pytest.raises(ValueError, match=r"invalid mode='nope'. Expected 'raise', 'wrap', "
                                         r"'clip', or 'ignore'."):
        jnp.ravel_multi_index((i, j), dims, mode="nope")


def test_trim_zeros(c, mesh):
    """trim_zeros of concrete arrays (JAX's docstring examples; numpy's for
    1-D), the bounds found at once, along every axis or those given;
    inside a jit JAX's ConcretizationTypeError."""
    va = np.array([0, 0, 2, 0, 1, 4, 3, 0, 0, 0], np.int32)
    v = _put(c, mesh, va, P())
    for trim in ("fb", "f", "b", "B"):
        assert _np(jnp.trim_zeros(v, trim), np.int32).tolist() == \
            np.trim_zeros(va, trim).tolist(), trim
    assert jnp.trim_zeros(va).tolist() == [2, 0, 1, 4, 3]  # numpy, no mesh: numpy
    za = np.zeros((4, 5), np.float32)
    za[1:3, 1:4] = [[1, 2, 3], [4, 5, 6]]
    za[3, 0] = 0.0
    z = _put(c, mesh, za, P())  # (uneven slices of a sharded axis: refused, as JAX's)
    assert _np(jnp.trim_zeros(z), np.float32).tolist() == za[1:3, 1:4].tolist()
    assert _np(jnp.trim_zeros(z, trim="f")).tolist() == za[1:, 1:].tolist()
    assert _np(jnp.trim_zeros(z, axis=0)).tolist() == za[1:3].tolist()
    assert _np(jnp.trim_zeros(z, axis=1)).tolist() == za[:, 1:4].tolist()
    assert _np(jnp.trim_zeros(z, trim="b", axis=-1)).tolist() == za[:, :4].tolist()
    assert _np(jnp.trim_zeros(_put(c, mesh, np.zeros((3, 2), np.float32), P()))).shape == (0, 0)
    with pytest.raises(jnp.ConcretizationTypeError,
                       match=r"traced array with shape float32\[4,5\]\nError arose in the `filt` "
                             r"argument of trim_zeros\(\)"):
        shmap.jit(jnp.trim_zeros)(z)


# ---- the floats' bits, integer bits ------------------------------------------------------

_UINT = {np.float16: np.uint16, np.float32: np.uint32, np.float64: np.uint64}


def _floats(dt, n):
    """n floats of dt: random bit patterns (subnormals, NaNs, infinities
    among them) and the special values."""
    bits = RNG.integers(0, np.iinfo(_UINT[dt]).max, n, dtype=_UINT[dt], endpoint=True)
    fi = np.finfo(dt)
    special = np.array([0.0, -0.0, np.inf, -np.inf, fi.max, -fi.max, fi.tiny, -fi.tiny,
                        fi.smallest_subnormal, -fi.smallest_subnormal, 1.0, -1.0, 2.0, 0.5,
                        3.0, 0.1], dt)
    return np.concatenate([bits.view(dt), special])


@pytest.mark.parametrize("dt", [np.float32, np.float16, np.float64],
                         ids=["float32", "float16", "float64"])
def test_frexp_nextafter_spacing(c, mesh, dt):
    """frexp and nextafter equal numpy's bit for bit (the sign of zero too;
    NaNs as NaN), spacing JAX's formula (nextafter toward the infinity of
    x's sign, minus x; the smallest subnormal, signed, where that is 0;
    float16: nextafter toward +inf, minus x), over random bit patterns, in a
    jit on sharded arrays; frexp's exponent int32."""
    xa = _floats(dt, 2032)
    ya = np.roll(xa, 5)
    x, y = _put(c, mesh, xa, P("i")), _put(c, mesh, ya, P("i"))
    m, e, n, s = shmap.jit(lambda x, y: (*jnp.frexp(x), jnp.nextafter(x, y), jnp.spacing(x)))(x, y)
    with np.errstate(all="ignore"):
        wm, we = np.frexp(xa)
        wn = np.nextafter(xa, ya)
        if dt == np.float16:
            ws = np.nextafter(xa, np.float16(np.inf)) - xa
        else:
            ws = np.nextafter(xa, np.copysign(np.inf, xa).astype(dt)) - xa
            ws = np.where(ws == 0, np.copysign(np.finfo(dt).smallest_subnormal, xa), ws)
    u = _UINT[dt]
    nan = np.isnan(wm)
    assert _np(m, dt)[~nan].view(u).tolist() == wm[~nan].view(u).tolist()
    assert np.isnan(_np(m)[nan]).all()
    assert _np(e, np.int32).tolist() == we.tolist()
    nan = np.isnan(wn)
    assert _np(n, dt)[~nan].view(u).tolist() == wn[~nan].view(u).tolist()
    assert np.isnan(_np(n)[nan]).all()
    nan = np.isnan(ws)
    assert _np(s, dt)[~nan].view(u).tolist() == ws.astype(dt)[~nan].view(u).tolist()
    assert np.isnan(_np(s)[nan]).all()


def test_float_bits_at_once(c, mesh):
    """frexp, nextafter and spacing at once on Arrays; integers as float32,
    a Python number weak (nextafter of float16 toward 1.0 stays float16);
    spacing(-0.0) is the negative smallest subnormal, as JAX's (numpy's is
    positive)."""
    xa = np.array([1.0, -0.0, 0.1, 3e38, 1e-45, -2.0, np.inf, 0.0], np.float32)
    x = _put(c, mesh, xa, P("i"))
    m, e = jnp.frexp(x)
    assert _np(m, np.float32).tolist() == np.frexp(xa)[0].tolist()
    assert _np(e, np.int32).tolist() == np.frexp(xa)[1].tolist()
    assert _np(jnp.nextafter(x, 1.0), np.float32).tolist() == \
        np.nextafter(xa, np.float32(1)).tolist()
    sp = _np(jnp.spacing(x), np.float32)
    tiny = np.finfo(np.float32).smallest_subnormal
    assert sp[0] == np.finfo(np.float32).eps and sp[1] == -tiny and sp[7] == tiny
    assert np.isnan(sp[6]) and sp[3] == np.spacing(np.float32(3e38))
    ia = np.array([3, 8, -5, 0, 1, 1024, 7, 12], np.int32)
    m, e = jnp.frexp(_put(c, mesh, ia, P("i")))
    assert _np(m, np.float32).tolist() == np.frexp(ia.astype(np.float32))[0].tolist()
    assert _np(e, np.int32).tolist() == np.frexp(ia.astype(np.float32))[1].tolist()
    h = _put(c, mesh, np.array([1.0, 2.0, -0.5, 0.0], np.float16), P())
    got = _np(jnp.nextafter(h, 1.0), np.float16)
    assert got.tolist() == np.nextafter(np.asarray(h), np.float16(1)).tolist()


def _popcount(v):
    return bin(abs(int(v))).count("1")


def test_bitwise_count(c, mesh):
    """The set bits of |x| as uint8 (JAX's, numpy's): int32 (the smallest
    too), int64, uint8 and bool, in a jit on a sharded array and at once;
    floats refused with lax.population_count's sentence."""
    ia = np.array([0, 1, -1, 7, -8, 255, 2 ** 31 - 1, -2 ** 31], np.int32)
    x = _put(c, mesh, ia, P("i"))
    r = shmap.jit(lambda x: (jnp.bitwise_count(x), jnp.bitwise_count(jnp.astype(x, np.int64) * 3),
                             jnp.bitwise_count(jnp.astype(x, np.uint8)),
                             jnp.bitwise_count(x > 0)))(x)
    assert _np(r[0], np.uint8).tolist() == [_popcount(v) for v in ia]
    assert _np(r[1], np.uint8).tolist() == [_popcount(int(v) * 3) for v in ia]
    assert _np(r[2], np.uint8).tolist() == [_popcount(v) for v in ia.astype(np.uint8)]
    assert _np(r[3], np.uint8).tolist() == [int(v > 0) for v in ia]
    assert _np(jnp.bitwise_count(x), np.uint8).tolist() == [_popcount(v) for v in ia]
    with pytest.raises(TypeError, match=r"^population_count does not accept dtype float32\. "
                                        r"Accepted dtypes are subtypes of integer\.$"):
        jnp.bitwise_count(jnp.astype(x, np.float32))


def test_packbits_unpackbits(c, mesh):
    """packbits / unpackbits against numpy's: flattened or along an axis,
    big or little bit order, count (more bits than there are: zeros; a
    negative one drops bits), uint8, in a jit on sharded arrays and at
    once; JAX's refusals."""
    bits = (RNG.random((8, 6)) > 0.5).astype(np.int32) * RNG.integers(1, 5, (8, 6))
    x = _put(c, mesh, bits.astype(np.int32), P("i", "j"))
    ba = RNG.integers(0, 256, (8, 6)).astype(np.uint8)
    b = _put(c, mesh, ba, P("i", "j"))

    def f(x, b):
        return (jnp.packbits(x, axis=0), jnp.packbits(x > 1, axis=0, bitorder="little"),
                jnp.unpackbits(b, axis=1), jnp.unpackbits(b, axis=0, bitorder="little"))
    r = shmap.jit(f)(x, b)
    assert _np(r[0], np.uint8).tolist() == np.packbits(bits != 0, axis=0).tolist()
    assert _np(r[1], np.uint8).tolist() == \
        np.packbits(bits > 1, axis=0, bitorder="little").tolist()
    assert _np(r[2], np.uint8).tolist() == np.unpackbits(ba, axis=1).tolist()
    assert _np(r[3], np.uint8).tolist() == np.unpackbits(ba, axis=0, bitorder="little").tolist()
    xr = _put(c, mesh, bits, P())
    br = _put(c, mesh, ba, P())
    assert _np(jnp.packbits(xr), np.uint8).tolist() == np.packbits(bits != 0).tolist()
    assert _np(jnp.packbits(xr, axis=1)).tolist() == np.packbits(bits != 0, axis=1).tolist()
    assert _np(jnp.packbits(xr[:, :5] > 0, axis=-1, bitorder="little")).tolist() == \
        np.packbits(bits[:, :5] > 0, axis=-1, bitorder="little").tolist()
    for count in (None, 5, -3, 13, 0):
        got = _np(jnp.unpackbits(br[0], count=count), np.uint8)
        if count is not None and count > 8 * ba.shape[1]:  # numpy 1.24 refuses; JAX pads
            want = np.concatenate([np.unpackbits(ba[0]), np.zeros(count - 48, np.uint8)])
        else:
            want = np.unpackbits(ba[0], count=count)
        assert got.tolist() == want.tolist(), count
    got = jnp.unpackbits(br, axis=1, count=60)
    assert _np(got).shape == (8, 60) and not _np(got)[:, 48:].any()
    assert _np(jnp.unpackbits(jnp.packbits(xr, axis=1), axis=1, count=6)).tolist() == \
        (bits != 0).astype(np.uint8).tolist()
    with pytest.raises(TypeError, match="Expected an input array of integer or boolean data "
                                        "type"):
        jnp.packbits(jnp.astype(xr, np.float32))
    with pytest.raises(TypeError, match="Expected an input array of unsigned byte data type"):
        jnp.unpackbits(xr)
    with pytest.raises(ValueError, match="'order' must be either 'little' or 'big'"):
        jnp.packbits(xr, bitorder="middle")


def test_polyfit(c, mesh):
    """polyfit against numpy's (float32: close, not equal): one and several
    y columns, weights, full=True (residuals, rank, singular values of the
    scaled Vandermonde matrix, rcond len(x) * eps), cov=True and
    'unscaled'; in a jit and at once; JAX's refusals."""
    xa = np.linspace(-2, 3, 16).astype(np.float32)
    noise = RNG.standard_normal((16, 3)).astype(np.float32) * 0.05
    ya = np.stack([2 * xa ** 2 - xa + 1, -xa ** 3 + 0.5, 3 * xa - 2], 1).astype(np.float32) + noise
    wa = np.linspace(0.5, 1.5, 16).astype(np.float32)
    x, y, w = (_put(c, mesh, v, P()) for v in (xa, ya, wa))

    def f(x, y, w):
        return (jnp.polyfit(x, y[:, 0], 2), jnp.polyfit(x, y, 3), jnp.polyfit(x, y[:, 1], 3, w=w),
                jnp.polyfit(x, y[:, 2], 1, full=True), jnp.polyfit(x, y[:, 0], 2, cov=True),
                jnp.polyfit(x, y, 2, cov="unscaled"))
    r = shmap.jit(f)(x, y, w)
    close = dict(rtol=2e-3, atol=2e-4)
    assert np.allclose(_np(r[0], np.float32), np.polyfit(xa, ya[:, 0], 2), **close)
    assert _np(r[1]).shape == (4, 3)
    assert np.allclose(_np(r[1]), np.polyfit(xa, ya, 3), **close)
    assert np.allclose(_np(r[2]), np.polyfit(xa, ya[:, 1], 3, w=wa), **close)
    p, res, rank, sv, rcond = r[3]
    wp, wres, wrank, wsv, wrcond = np.polyfit(xa, ya[:, 2], 1, full=True)
    assert np.allclose(_np(p), wp, **close)
    assert np.allclose(_np(res), wres, rtol=1e-2)
    assert int(_np(rank, np.int32)) == wrank == 2
    assert np.allclose(_np(sv), wsv, rtol=1e-4)
    assert float(_np(rcond, np.float32)) == pytest.approx(16 * np.finfo(np.float32).eps)
    pc, cv = r[4]
    wpc, wcv = np.polyfit(xa, ya[:, 0], 2, cov=True)
    assert np.allclose(_np(pc), wpc, **close)
    assert _np(cv).shape == (3, 3) and np.allclose(_np(cv), wcv, rtol=2e-2, atol=1e-7)
    pu, cu = r[5]
    wpu, wcu = np.polyfit(xa, ya, 2, cov="unscaled")
    assert _np(cu).shape == wcu.shape == (3, 3, 1)
    assert np.allclose(_np(cu), wcu, rtol=1e-3, atol=1e-6)
    assert np.allclose(_np(jnp.polyfit(x, y[:, 0], 2)), np.polyfit(xa, ya[:, 0], 2), **close)
    with pytest.raises(ValueError, match="^expected deg >= 0$"):
        jnp.polyfit(x, y, -1)
    with pytest.raises(TypeError, match="^expected 1D vector for x$"):
        jnp.polyfit(y, y, 1)
    with pytest.raises(TypeError, match="^expected x and y to have same length$"):
        jnp.polyfit(x[:5], y, 1)
    with pytest.raises(ValueError, match="the number of data points must exceed order"):
        jnp.polyfit(x[:3], y[:3, 0], 2, cov=True)
