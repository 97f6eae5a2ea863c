"""jnp.linalg and jax.scipy.special as JAX's in the idioms programs use
them: the namedtuple results (SVDResult, SlogdetResult, QRResult,
EighResult) through jit and grad; finite gradients of singular values,
erfinv, ndtri and norm.ppf; Cephes' ndtri in float32's lower tail;
solve's broadcasting, lstsq's minimum-norm solution, svd's full_matrices,
eigh's triangle, cholesky's NaN, matrix_rank of a vector and xlogy's
derivative at 0. Each against numpy / scipy (or JAX's formulas), on the
cluster of conftest's c."""
import numpy as np
import pytest
import scipy.special as ss

import shmap
from shmap import P
from shmap import numpy as jnp
from shmap.scipy import special as jss
from shmap.scipy import stats as jst

from _util import put as _put


RNG = np.random.default_rng(7)


def _np(x):
    return np.asarray(x)


def test_results_are_namedtuples(c, mesh):
    """svd, slogdet, qr and eigh return JAX's namedtuples (fields U, S, Vh;
    sign, logabsdet; Q, R; eigenvalues, eigenvectors), unpacking as
    before, also out of a jit (a pytree) and under grad. Before: plain
    tuples (svd(x).S raised AttributeError)."""
    a = RNG.standard_normal((4, 4))
    sym = a + a.T
    x = _put(c, mesh, a)
    r = jnp.linalg.svd(x)
    assert type(r).__name__ == "SVDResult" and r._fields == ("U", "S", "Vh")
    assert np.allclose(_np(r.S), np.linalg.svd(a, compute_uv=False))
    u, s, vh = r
    assert np.allclose((_np(u) * _np(s)) @ _np(vh), a)
    sd = jnp.linalg.slogdet(x)
    assert type(sd).__name__ == "SlogdetResult" and sd._fields == ("sign", "logabsdet")
    assert np.allclose(_np(sd.logabsdet), np.linalg.slogdet(a)[1])
    assert float(sd.sign) == np.linalg.slogdet(a)[0]
    q = jnp.linalg.qr(x)
    assert type(q).__name__ == "QRResult" and np.allclose(_np(q.Q) @ _np(q.R), a)
    e = jnp.linalg.eigh(_put(c, mesh, sym))
    assert type(e).__name__ == "EighResult"
    assert np.allclose(_np(e.eigenvalues), np.linalg.eigvalsh(sym))
    w, v = e
    assert np.allclose(sym @ _np(v), _np(v) * _np(w))
    # through a jit: the namedtuple comes back (a pytree)
    out = shmap.jit(lambda m: (jnp.linalg.svd(m), jnp.linalg.eigh(m + m.T)))(x)
    assert type(out[0]).__name__ == "SVDResult" and type(out[1]).__name__ == "EighResult"
    assert np.allclose(_np(out[1].eigenvalues), np.linalg.eigvalsh(sym))
    # under grad, the fields by name
    g = shmap.grad(lambda m: jnp.linalg.slogdet(m).logabsdet)(x)
    assert np.allclose(_np(g), np.linalg.inv(a).T)
    with pytest.raises(ValueError, match="Unknown slogdet method"):
        jnp.linalg.slogdet(x, method="svd")


@pytest.mark.parametrize("shape", [(3, 3), (5, 3), (3, 4), (4, 4)])
def test_singular_value_gradients_finite(c, mesh, shape):
    """grad of the sum of singular values is U @ Vh (thin factors), of
    norm(x, 'nuc') the same; norm(x, 2), pinv and cond have finite
    gradients. Before: all NaN whenever min(m, n) was odd (the padding
    column's norm sqrt(0) sent an infinite derivative back)."""
    a = RNG.standard_normal(shape).astype(np.float32)
    x = _put(c, mesh, a)
    u, _, vh = np.linalg.svd(a.astype(np.float64), full_matrices=False)
    g = shmap.grad(lambda m: jnp.linalg.svd(m, compute_uv=False).sum())(x)
    assert np.allclose(_np(g), u @ vh, atol=1e-4)
    g = shmap.grad(lambda m: jnp.linalg.norm(m, "nuc"))(x)
    assert np.allclose(_np(g), u @ vh, atol=1e-4)
    g = shmap.grad(lambda m: jnp.linalg.norm(m, 2))(x)
    assert np.allclose(_np(g), np.outer(u[:, 0], vh[0]), atol=1e-4)
    for f in (lambda m: jnp.linalg.pinv(m).sum(), lambda m: jnp.linalg.cond(m)):
        assert np.isfinite(_np(shmap.grad(f)(x))).all()
    d = np.diag(np.array([3.0, 2.0, 1.0], np.float32))
    g = shmap.grad(lambda m: jnp.linalg.svd(m, compute_uv=False).sum())(_put(c, mesh, d))
    assert np.allclose(_np(g), np.eye(3))


def test_erfinv_ndtri_gradients(c, mesh):
    """erfinv' = sqrt(pi)/2 exp(erfinv(x)**2) (JAX's erf_inv rule), ndtri'
    and norm.ppf' = sqrt(2 pi) exp(ndtri(p)**2 / 2) (JAX differentiates
    Cephes' approximation), in a jit too. Before: NaN everywhere."""
    x = np.array([-0.9, -0.3, 0.1, 0.5, 0.99], np.float32)
    want = np.sqrt(np.pi) / 2 * np.exp(ss.erfinv(x.astype(np.float64)) ** 2)
    g = shmap.grad(lambda v: jss.erfinv(v).sum())(_put(c, mesh, x))
    assert np.allclose(_np(g), want, rtol=1e-4)
    p = np.array([1e-9, 0.01, 0.3, 0.5, 0.9, 0.999], np.float32)
    want = np.sqrt(2 * np.pi) * np.exp(ss.ndtri(p.astype(np.float64)) ** 2 / 2)
    for f in (jss.ndtri, jst.norm.ppf):
        g = shmap.jit(shmap.grad(lambda v: f(v).sum()))(_put(c, mesh, p))
        assert np.allclose(_np(g), want, rtol=1e-3), f
    g = shmap.grad(lambda v: jst.norm.ppf(v, 1.0, 2.0).sum())(_put(c, mesh, p))
    assert np.allclose(_np(g), 2 * want, rtol=1e-3)


def test_ndtri_tails(c, mesh):
    """ndtri is Cephes' (JAX's _ndtri): accurate down to p = 1e-30 in
    float32 and in float64, -inf at 0, inf at 1, norm.ppf through it;
    ndtri of integers is JAX's TypeError. Before: sqrt(2) erfinv(2p - 1)
    gave -inf for p below ~3e-8 in float32."""
    p = np.array([1e-30, 1e-20, 1e-9, 3e-8, 0.01, 0.3, 0.5, 0.9, 0.999999, 0.0, 1.0])
    for dt, tol in ((np.float32, 1e-5), (np.float64, 1e-12)):
        got = _np(jss.ndtri(_put(c, mesh, p.astype(dt))))
        assert got.dtype == dt
        assert np.allclose(got, ss.ndtri(p.astype(dt).astype(np.float64)), rtol=tol, atol=tol)
    got = _np(jst.norm.ppf(_put(c, mesh, p[:3].astype(np.float32)), 1.0, 2.0))
    assert np.allclose(got, 1.0 + 2.0 * ss.ndtri(p[:3].astype(np.float32).astype(float)))
    with pytest.raises(TypeError, match="is not supported"):
        jss.ndtri(_put(c, mesh, np.array([0, 1], np.int32)))


def test_solve_broadcasts(c, mesh):
    """solve(a, b) as JAX's jnp.vectorize with '(m,m),(m,n)->(m,n)' (b of
    two or more dimensions) or '(m,m),(m)->(m)' (1-d b): batch dimensions
    broadcast both ways; mismatched core sizes raise vectorize's sentence.
    Before: solve(A, b of shape (2, 3, 1)) failed with an internal op's
    sentence."""
    a = RNG.standard_normal((3, 3)) + 3 * np.eye(3)
    for bs in ((2, 3, 1), (4, 3, 2)):
        b = RNG.standard_normal(bs)
        x = jnp.linalg.solve(_put(c, mesh, a), _put(c, mesh, b))
        assert x.shape == bs and np.allclose(_np(x), np.linalg.solve(a, b))
    ab = RNG.standard_normal((2, 1, 3, 3)) + 3 * np.eye(3)
    b = RNG.standard_normal((4, 3, 2))
    x = jnp.linalg.solve(_put(c, mesh, ab), _put(c, mesh, b))
    want = np.linalg.solve(np.broadcast_to(ab, (2, 4, 3, 3)), np.broadcast_to(b, (2, 4, 3, 2)))
    assert x.shape == (2, 4, 3, 2) and np.allclose(_np(x), want)
    v = RNG.standard_normal(3)
    x = shmap.jit(jnp.linalg.solve)(_put(c, mesh, ab[:, 0]), _put(c, mesh, v))
    assert x.shape == (2, 3)
    assert np.allclose(_np(x), np.stack([np.linalg.solve(m, v) for m in ab[:, 0]]))
    with pytest.raises(ValueError, match="inconsistent size for core dimension 'm': 2 vs 3"):
        jnp.linalg.solve(_put(c, mesh, a), _put(c, mesh, np.ones((3, 2, 1))))
    with pytest.raises(ValueError, match="left hand array must be at least two dimensional"):
        jnp.linalg.solve(_put(c, mesh, v), _put(c, mesh, v))


def test_lstsq_minimum_norm(c, mesh):
    """lstsq as JAX's: the minimum-norm solution through the SVD (rcond's
    cut-off), for a rank-deficient and an underdetermined a, as numpy's x,
    rank and singular values; residuals always computed (numpy_resid=True:
    empty when rank < n or m <= n, as numpy's). Before: inf / NaN for a
    rank-deficient a, and an underdetermined one refused."""
    low = np.array([[1.0, 2], [2, 4], [3, 6]])
    b = np.array([1.0, 2, 3.5])
    for a_, b_ in ((low, b), (low.T, b[:2]), (RNG.standard_normal((3, 5)), RNG.standard_normal(3)),
                   (RNG.standard_normal((6, 3)), RNG.standard_normal((6, 2)))):
        x, resid, rank, s = jnp.linalg.lstsq(_put(c, mesh, a_), _put(c, mesh, b_))
        x0, resid0, rank0, s0 = np.linalg.lstsq(a_, b_, rcond=None)
        assert np.allclose(_np(x), x0) and int(rank) == rank0 and np.allclose(_np(s), s0)
        r = b_ - a_ @ x0
        assert np.allclose(_np(resid), np.sum(r * r, axis=0, keepdims=b_.ndim == 1))
        res_np = jnp.linalg.lstsq(_put(c, mesh, a_), _put(c, mesh, b_), numpy_resid=True)[1]
        assert _np(res_np).shape == resid0.shape and np.allclose(_np(res_np), resid0)
    x = jnp.linalg.lstsq(_put(c, mesh, low.astype(np.float32)), _put(c, mesh, b), rcond=0.5)[0]
    assert np.allclose(_np(x), np.linalg.lstsq(low, b, rcond=0.5)[0], rtol=1e-5)


def test_svd_full_matrices(c, mesh):
    """svd's default full_matrices=True gives U (m, m) and Vh (n, n),
    orthonormal, their first k = min(m, n) columns / rows the thin
    factors; a zero matrix has orthonormal U and Vh; full_matrices=False
    the thin ones; batched with the batch sharded. Before: the thin factors
    whatever full_matrices said."""
    for shape in ((5, 3), (3, 6), (4, 4), (4, 1)):
        a = RNG.standard_normal(shape)
        u, s, vh = map(_np, jnp.linalg.svd(_put(c, mesh, a)))
        m, n = shape
        k = min(shape)
        assert u.shape == (m, m) and s.shape == (k,) and vh.shape == (n, n), shape
        assert np.allclose(u.T @ u, np.eye(m)) and np.allclose(vh @ vh.T, np.eye(n))
        assert np.allclose((u[:, :k] * s) @ vh[:k], a)
        ut, st, vht = map(_np, jnp.linalg.svd(_put(c, mesh, a), full_matrices=False))
        assert ut.shape == (m, k) and vht.shape == (k, n)
        assert np.allclose(np.abs(ut), np.abs(u[:, :k])) and np.allclose(st, s)
    u, s, vh = map(_np, jnp.linalg.svd(_put(c, mesh, np.zeros((4, 2)))))
    assert np.allclose(u.T @ u, np.eye(4)) and np.allclose(s, 0) and vh.shape == (2, 2)
    batch = RNG.standard_normal((4, 5, 2))
    r = jnp.linalg.svd(_put(c, mesh, batch, P("i")))
    assert r.U.type == "f64[4@i,5,5]"
    u = _np(r.U)
    assert np.allclose(np.einsum("bji,bjk->bik", u, u), np.eye(5))


def test_eigh_triangle(c, mesh):
    """eigh(a, UPLO, symmetrize_input=False) reads only the triangle UPLO
    names (LAPACK's), as numpy's eigvalsh(a, UPLO); symmetrize_input=True
    (the default) uses (a + a.T) / 2; an unknown UPLO is JAX's ValueError.
    Before: the whole (non-symmetric) matrix was rotated."""
    a = np.array([[1.0, 100, 3], [2, 3, -7], [0.5, 4, -2]])
    x = _put(c, mesh, a)
    for uplo in ("L", "U"):
        w, v = map(_np, jnp.linalg.eigh(x, UPLO=uplo, symmetrize_input=False))
        assert np.allclose(w, np.linalg.eigvalsh(a, uplo)), uplo
        full = np.tril(a) + np.tril(a, -1).T if uplo == "L" else np.triu(a) + np.triu(a, 1).T
        assert np.allclose(full @ v, v * w)
        w2 = jnp.linalg.eigvalsh(x, uplo, symmetrize_input=False)
        assert np.allclose(_np(w2), w)
    w = _np(jnp.linalg.eigh(x).eigenvalues)
    assert np.allclose(w, np.linalg.eigvalsh((a + a.T) / 2))
    with pytest.raises(ValueError, match="UPLO must be one of None, 'L', or 'U', got X"):
        jnp.linalg.eigh(x, UPLO="X")


def test_cholesky_not_positive_definite(c, mesh):
    """cholesky of a matrix that is not positive definite is all NaN (JAX's
    select on LAPACK's info), per matrix of a batch, the others
    untouched; upper too. Before: [[1, 0], [nan, nan]]."""
    bad = np.array([[1.0, 2], [2, 1]])
    got = _np(jnp.linalg.cholesky(_put(c, mesh, bad)))
    assert np.isnan(got).all()
    spd = np.array([[4.0, 2], [2, 3]])
    got = _np(jnp.linalg.cholesky(_put(c, mesh, np.stack([spd, bad, np.zeros((2, 2))]))))
    assert np.allclose(got[0], np.linalg.cholesky(spd)) and np.isnan(got[1:]).all()
    got = _np(jnp.linalg.cholesky(_put(c, mesh, np.stack([spd, bad])), upper=True))
    assert np.allclose(got[0], np.linalg.cholesky(spd).T) and np.isnan(got[1]).all()


def test_matrix_rank_vector_and_xlogy_derivative(c, mesh):
    """matrix_rank of fewer than two dimensions is JAX's any(M != 0) (1 or
    0, int32), and a given rtol is the threshold JAX compares the singular
    values with; xlogy's derivative in x is log(y) and xlog1py's log1p(y)
    also at x == 0 (JAX's custom_jvp rules). Before: matrix_rank of a
    vector failed, and the derivatives at x == 0 were 0."""
    r = jnp.linalg.matrix_rank(_put(c, mesh, np.array([0.0, 2.0, 0.0])))
    assert int(r) == 1 and r.dtype == np.int32
    assert int(jnp.linalg.matrix_rank(_put(c, mesh, np.zeros(3)))) == 0
    d = _put(c, mesh, np.diag([1.0, 0.5, 1e-3]))
    assert int(jnp.linalg.matrix_rank(d)) == 3 and int(jnp.linalg.matrix_rank(d, 0.1)) == 2
    assert int(jnp.linalg.matrix_rank(d, tol=0.6)) == 1
    y = np.array([2.0, 3.0, 0.5], np.float32)
    x0 = _put(c, mesh, np.zeros(3, np.float32))
    g = shmap.grad(lambda v: jss.xlogy(v, _put(c, mesh, y)).sum())(x0)
    assert np.allclose(_np(g), np.log(y))
    g = shmap.grad(lambda v: jss.xlog1py(v, _put(c, mesh, y)).sum())(x0)
    assert np.allclose(_np(g), np.log1p(y))
    xv = _put(c, mesh, np.array([1.0, 2.0, 0.0], np.float32))
    gy = shmap.grad(lambda w: jss.xlogy(xv, w).sum())(_put(c, mesh, y))
    assert np.allclose(_np(gy), np.array([1.0, 2.0, 0.0]) / y)
    assert np.allclose(_np(jss.xlogy(_put(c, mesh, np.array([0.0, 1.0])),
                                     _put(c, mesh, np.array([0.0, 2.0])))), [0.0, np.log(2)])
