"""shmap.scipy's linalg additions and its signal, optimize, integrate and
ndimage modules against numpy (scipy is not installed here): LU against a
numpy run of LAPACK's getrf (the same pivots) and P @ L @ U == A;
lu_solve, solve (assume_a) against np.linalg.solve; Hessenberg and real
Schur forms by their identities (orthogonal Q / Z, A == Z T Z^T, the
shape of T, its 2x2 blocks standardized, its eigenvalues numpy's) and JAX's
documented outputs; sqrtm against V sqrt(L) V^-1; solve_sylvester against
the Kronecker system; polar (QDWH and SVD);
expm_frechet against a central difference and the closed form for a
diagonal A; eigh_tridiagonal against eigvalsh; the special matrices by
their definitions and inverses; convolutions against direct n-d loops,
detrend against polyfit, trapezoid against np.trapz, map_coordinates
against a pointwise loop with SciPy's mode definitions; BFGS and L-BFGS at
the known minima of a quadratic and of Rosenbrock's function, and JAX's
documented line-search failures. At once on Arrays and inside shmap.jit,
on the cluster of conftest's c."""
import itertools
import math

import numpy as np
import pytest

import shmap
from shmap import P
from shmap import numpy as jnp
from shmap.scipy import integrate, ndimage, optimize, signal
from shmap.scipy import linalg as sla

from _util import put as _put


RNG = np.random.default_rng(21)


# ---- LU, solve, cholesky ------------------------------------------------------------------


def _np_getrf(a):
    """LAPACK's getrf in numpy: (lu, pivots, permutation)."""
    a = np.array(a, dtype=float)
    m, n = a.shape
    perm, piv = np.arange(m), []
    for k in range(min(m, n)):
        p = k + int(np.argmax(np.abs(a[k:, k])))
        piv.append(p)
        a[[k, p]] = a[[p, k]]
        perm[[k, p]] = perm[[p, k]]
        if a[k, k] != 0:
            a[k + 1:, k] /= a[k, k]
        a[k + 1:, k + 1:] -= np.outer(a[k + 1:, k], a[k, k + 1:])
    return a, np.array(piv), perm


def test_lu_family(c, mesh):
    A = RNG.standard_normal((6, 6))
    A[0, 0] = 1e-12  # a tiny first pivot: it must swap
    for shape in ((6, 6), (4, 6), (6, 4)):
        a = A[:shape[0], :shape[1]]
        lu_, piv = sla.lu_factor(_put(c, mesh, a))
        ref, rpiv, rperm = _np_getrf(a)
        assert piv.dtype == np.int32 and np.array_equal(np.asarray(piv), rpiv), shape
        assert np.allclose(np.asarray(lu_), ref, rtol=1e-12, atol=1e-12), shape
        p, l_, u = map(np.asarray, sla.lu(_put(c, mesh, a)))
        k = min(shape)
        assert p.shape == (shape[0],) * 2 and l_.shape == (shape[0], k) and u.shape == (k, shape[1])
        assert np.allclose(p @ l_ @ u, a, rtol=1e-13, atol=1e-13)
        assert np.array_equal(p.T @ np.arange(shape[0]), rperm)  # row i of L U is a's row perm[i]
        assert np.array_equal(np.diag(l_), np.ones(k)) and np.all(np.abs(l_) <= 1)
        assert np.array_equal(np.triu(l_, 1), np.zeros_like(l_)) and \
            np.array_equal(np.tril(u, -1), np.zeros_like(u))
        pl, u2 = sla.lu(_put(c, mesh, a), permute_l=True)
        assert np.allclose(np.asarray(pl), p @ l_) and np.array_equal(np.asarray(u2), u)
    # JAX's documented example, float32
    a32 = np.array([[1., 2., 3.], [5., 4., 2.], [3., 2., 1.]], np.float32)
    p, l_, u = map(np.asarray, sla.lu(_put(c, mesh, a32)))
    assert l_.dtype == np.float32
    assert np.array_equal(p, [[0, 1, 0], [1, 0, 0], [0, 0, 1]])
    assert np.allclose(l_, [[1, 0, 0], [0.2, 1, 0], [0.6, -1 / 3, 1]], atol=1e-6)
    assert np.allclose(u, [[5, 4, 2], [0, 1.2, 2.6], [0, 0, 2 / 3]], atol=1e-6)
    # a batch, integers promoted to float32
    bat = RNG.integers(-5, 6, (3, 4, 4)).astype(np.int32)
    p, l_, u = map(np.asarray, sla.lu(_put(c, mesh, bat)))
    assert u.dtype == np.float32 and np.allclose(p @ l_ @ u, bat, atol=1e-5)
    # a sharded batch, laid out as it was
    bat = RNG.standard_normal((4, 5, 5))
    lu_, piv = sla.lu_factor(_put(c, mesh, bat, P("i")))
    assert lu_.type == "f64[4@i,5,5]" and piv.type == "i32[4@i,5]"
    assert all(np.allclose(np.asarray(lu_)[k], _np_getrf(bat[k])[0]) for k in range(4))
    # lu_solve: trans 0 and 1, vectors and matrices, at once and in a jit
    fac = sla.lu_factor(_put(c, mesh, A))
    b = RNG.standard_normal((6, 3))
    for trans, m in ((0, A), (1, A.T), (2, A.T)):
        x = sla.lu_solve(fac, _put(c, mesh, b), trans=trans)
        assert np.allclose(np.asarray(x), np.linalg.solve(m, b), rtol=1e-10, atol=1e-10)
        x1 = sla.lu_solve(fac, _put(c, mesh, b[:, 0]), trans=trans)
        assert x1.shape == (6,) and np.allclose(np.asarray(x1), np.linalg.solve(m, b[:, 0]),
                                                rtol=1e-10, atol=1e-10)
    f = shmap.jit(lambda a, b: sla.lu_solve(sla.lu_factor(a), b))
    x = f(_put(c, mesh, A.astype(np.float32)), _put(c, mesh, b.astype(np.float32)))
    assert x.dtype == np.float32 and np.allclose(np.asarray(x), np.linalg.solve(A, b), rtol=1e-3,
                                                 atol=1e-4)
    with pytest.raises(ValueError, match=r"'trans' value must be 0, 1, or 2, got 3"):
        sla.lu_solve(fac, _put(c, mesh, b), trans=3)
    bb = RNG.standard_normal((2, 6))
    lub = sla.lu_factor(_put(c, mesh, np.stack([A, A.T])))
    with pytest.warns(FutureWarning, match=r"batched 1D solves with b.ndim > 1 are deprecated"):
        xb = sla.lu_solve(lub, _put(c, mesh, bb))
    assert np.allclose(np.asarray(xb), [np.linalg.solve(A, bb[0]), np.linalg.solve(A.T, bb[1])])
    with pytest.raises(shmap.ProgramError, match=r"Input 0 to lu must be unsharded on non-batch "
                                                  r"dimensions, but got P\('i', None\)\."):
        sla.lu(_put(c, mesh, RNG.standard_normal((8, 4)), P("i")))


def test_solve_and_cholesky(c, mesh):
    m = RNG.standard_normal((5, 5))
    spd = m @ m.T + 5 * np.eye(5)
    b = RNG.standard_normal((5, 2))
    want = np.linalg.solve(spd, b)
    for assume_a in ("gen", "sym", "her", "pos"):
        x = sla.solve(_put(c, mesh, spd), _put(c, mesh, b), assume_a=assume_a)
        assert np.allclose(np.asarray(x), want, rtol=1e-10, atol=1e-10), assume_a
    # 'pos' reads the triangle `lower` names: garbage in the other is never read
    up = np.triu(spd) + np.tril(np.full((5, 5), 1e3), -1)
    lo = np.tril(spd) + np.triu(np.full((5, 5), -7.0), 1)
    x_up = sla.solve(_put(c, mesh, up), _put(c, mesh, b), assume_a="pos")
    x_lo = sla.solve(_put(c, mesh, lo), _put(c, mesh, b[:, 0]), assume_a="pos", lower=True)
    assert np.allclose(np.asarray(x_up), want) and np.allclose(np.asarray(x_lo), want[:, 0])
    assert np.allclose(np.asarray(sla.cholesky(_put(c, mesh, up))), np.linalg.cholesky(spd).T)
    assert np.allclose(np.asarray(sla.cholesky(_put(c, mesh, lo), lower=True)),
                       np.linalg.cholesky(spd))
    got = shmap.jit(lambda a, b: sla.solve(a, b, assume_a="pos"))(_put(c, mesh, spd),
                                                                   _put(c, mesh, b))
    assert np.allclose(np.asarray(got), want)
    with pytest.raises(ValueError, match=r"Expected assume_a to be one of \['gen', 'sym', "
                                         r"'her', 'pos'\]; got 'tri'"):
        sla.solve(_put(c, mesh, spd), _put(c, mesh, b), assume_a="tri")
    with pytest.raises(ValueError, match=r"The arguments to solve must have shapes"):
        sla.solve(_put(c, mesh, spd), _put(c, mesh, b[:4]), assume_a="pos")


# ---- Hessenberg, Schur, sqrtm, polar -------------------------------------------------------


def _check_schur(a, t, z, tol):
    """a == z t z^T, z orthogonal, t quasi upper triangular with lone 2x2
    blocks in dlanv2's standard form (equal diagonal, b c < 0), its blocks'
    eigenvalues a's."""
    n = a.shape[-1]
    assert np.abs(z @ t @ z.T - a).max() <= tol * max(1.0, np.abs(a).max())
    assert np.abs(z.T @ z - np.eye(n)).max() <= tol
    assert np.array_equal(np.tril(t, -2), np.zeros_like(t))
    sub = np.diagonal(t, -1)
    assert not any(sub[i] != 0 and sub[i + 1] != 0 for i in range(len(sub) - 1))
    ev, i = [], 0
    while i < n:
        if i < n - 1 and sub[i] != 0:
            blk = t[i:i + 2, i:i + 2]
            assert blk[0, 0] == blk[1, 1] and blk[0, 1] * blk[1, 0] < 0
            ev += list(np.linalg.eigvals(blk))
            i += 2
        else:
            ev.append(t[i, i])
            i += 1
    want = np.sort_complex(np.linalg.eigvals(a).astype(complex))
    assert np.allclose(np.sort_complex(np.array(ev, complex)), want,
                       atol=1e3 * tol * max(1.0, np.abs(a).max()))


def test_hessenberg_and_schur(c, mesh):
    # JAX's documented Hessenberg form (LAPACK's reflections and signs)
    a4 = np.array([[1., 2., 3., 4.], [1., 4., 2., 3.], [3., 2., 1., 4.], [2., 3., 2., 2.]])
    h, q = map(np.asarray, sla.hessenberg(_put(c, mesh, a4.astype(np.float32)), calc_q=True))
    assert h.dtype == np.float32
    assert np.allclose(h, [[1., -5.078, 1.167, 1.361], [-3.742, 5.786, -3.613, -1.825],
                           [0., -2.992, 2.493, -0.577], [0., 0., -0.043, -1.279]], atol=1e-3)
    bat = RNG.standard_normal((2, 6, 6))
    h, q = map(np.asarray, sla.hessenberg(_put(c, mesh, bat), calc_q=True))
    assert np.allclose(q @ h @ q.transpose(0, 2, 1), bat, atol=1e-13)
    assert np.allclose(q @ q.transpose(0, 2, 1), np.eye(6), atol=1e-14)
    assert np.array_equal(np.tril(h[0], -2), np.zeros((6, 6)))
    assert np.allclose(np.asarray(sla.hessenberg(_put(c, mesh, bat[0]))), h[0])
    # the real Schur form of matrices that need exceptional shifts, complex pairs, repeated
    # and zero eigenvalues, and of random ones
    sym = RNG.standard_normal((6, 6))
    cases = [np.roll(np.eye(4), 1, axis=0), np.array([[0., 0, 1], [1, 0, 0], [0, 1, 0]]),
             2 * np.eye(4) + np.diag(np.ones(3), 1), np.zeros((3, 3)), sym + sym.T,
             np.array([[0., -1], [1, 0]]), np.array([[1., 2], [3, 4]]), np.array([[3.]]),
             np.triu(RNG.standard_normal((5, 5))), RNG.standard_normal((8, 8)),
             RNG.standard_normal((6, 6)) * 1e4, 1 / (np.arange(6)[:, None] + np.arange(6) + 1.)]
    for a in cases:
        t, z = map(np.asarray, sla.schur(_put(c, mesh, a)))
        _check_schur(a, t, z, 1e-13)
    t, z = map(np.asarray, sla.schur(_put(c, mesh, sym + sym.T)))
    assert np.allclose(t, np.diag(np.diag(t)), atol=1e-12)   # symmetric: diagonal
    # JAX's documented real Schur forms (LAPACK's order of the eigenvalues)
    t, z = map(np.asarray, sla.schur(_put(c, mesh, np.array([[1., 2, 3], [1, 4, 2], [3, 2, 1]],
                                                             np.float32))))
    assert t.dtype == np.float32
    assert np.allclose(t, [[-2.0000005, 0.5066295, -0.43360388], [0, 1.5505103, 0.74519426],
                           [0, 0, 6.449491]], atol=2e-5)
    t, z = map(np.asarray, sla.schur(_put(c, mesh, np.array([[0., 3, 3], [0, 1, 2], [2, 0, 1]],
                                                             np.float32))))
    assert np.allclose(t, [[3.76, -2.17, 1.38], [0, -0.88, -0.35], [0, 2.37, -0.88]], atol=6e-3)
    # float32, a batch, inside a jit
    a32 = RNG.standard_normal((7, 7)).astype(np.float32)
    t, z = map(np.asarray, sla.schur(_put(c, mesh, a32)))
    _check_schur(a32.astype(float), t.astype(float), z.astype(float), 2e-6)
    bat = RNG.standard_normal((3, 5, 5))
    t, z = map(np.asarray, shmap.jit(sla.schur)(_put(c, mesh, bat)))
    for k in range(3):
        _check_schur(bat[k], t[k], z[k], 1e-13)
    bat = RNG.standard_normal((4, 5, 5))       # a sharded batch: laid out as it was
    t, z = sla.schur(_put(c, mesh, bat, P("i")))
    assert t.type == z.type == "f64[4@i,5,5]"
    for k in range(4):
        _check_schur(bat[k], np.asarray(t)[k], np.asarray(z)[k], 1e-13)
    with pytest.raises(ValueError, match=r"Expected 'output' to be either 'real' or 'complex', "
                                         r"got output='x'\."):
        sla.schur(_put(c, mesh, a4), output="x")
    with pytest.raises(NotImplementedError, match=r"output='complex' needs complex dtypes"):
        sla.schur(_put(c, mesh, a4), output="complex")


def test_solve_sylvester(c, mesh):
    for m, n in ((4, 3), (5, 5), (2, 6), (1, 1)):
        a = RNG.standard_normal((m, m))
        b = RNG.standard_normal((n, n)) + 3 * np.eye(n)
        cm = RNG.standard_normal((m, n))
        want = np.linalg.solve(np.kron(a, np.eye(n)) + np.kron(np.eye(m), b.T),
                               cm.reshape(-1)).reshape(m, n)
        x = np.asarray(sla.solve_sylvester(_put(c, mesh, a), _put(c, mesh, b), _put(c, mesh, cm)))
        assert np.allclose(x, want, rtol=1e-11, atol=1e-11), (m, n)
    a, b = np.array([[1., 2], [3, 4]]), np.array([[5., 6], [7, 8]])     # JAX's example
    x = shmap.jit(sla.solve_sylvester)(_put(c, mesh, a.astype(np.float32)),
                                       _put(c, mesh, b.astype(np.float32)),
                                       _put(c, mesh, np.array([[6., 8], [10, 12]], np.float32)))
    assert x.dtype == np.float32 and np.allclose(np.asarray(x), np.eye(2), atol=2e-6)
    # eigenvalues of A and B summing to 0 (here A's and -A's): NaN, as JAX's
    assert np.isnan(np.asarray(sla.solve_sylvester(_put(c, mesh, a), _put(c, mesh, -a),
                                                   _put(c, mesh, np.eye(2))))).all()
    bat = RNG.standard_normal((2, 3, 3))
    x = np.asarray(sla.solve_sylvester(_put(c, mesh, bat), _put(c, mesh, 4 * np.eye(3)),
                                       _put(c, mesh, np.ones((2, 3, 3)))))
    assert np.allclose(bat @ x + 4 * x, 1)
    with pytest.raises(ValueError, match=r"Incompatible shapes for Sylvester equation"):
        sla.solve_sylvester(_put(c, mesh, a), _put(c, mesh, np.eye(3)), _put(c, mesh, a))
    with pytest.raises(NotImplementedError, match=r"method='eigen' needs complex"):
        sla.solve_sylvester(_put(c, mesh, a), _put(c, mesh, b), _put(c, mesh, a), method="eigen")
    with pytest.raises(ValueError, match=r"Unrecognized method qr\."):
        sla.solve_sylvester(_put(c, mesh, a), _put(c, mesh, b), _put(c, mesh, a), method="qr")


def _np_sqrtm(a):
    w, v = np.linalg.eig(a)
    return (v @ np.diag(np.sqrt(w.astype(complex))) @ np.linalg.inv(v)).real


def test_sqrtm_and_polar(c, mesh):
    m = RNG.standard_normal((5, 5))
    spd = m @ m.T + np.eye(5)
    gen = RNG.standard_normal((6, 6)) + 4 * np.eye(6)      # complex pairs, positive real parts
    assert np.iscomplex(np.linalg.eigvals(gen)).any()
    tri = np.triu(RNG.uniform(1, 2, (4, 4)))
    for a in (spd, gen, tri, np.diag([4., 9., 0.]), np.array([[0., -1], [1, 0]])):
        x = np.asarray(sla.sqrtm(_put(c, mesh, a)))
        assert np.allclose(x @ x, a, rtol=1e-11, atol=1e-11)
        assert np.allclose(x, _np_sqrtm(a), rtol=1e-9, atol=1e-9)
    x = np.asarray(shmap.jit(sla.sqrtm)(_put(c, mesh, gen.astype(np.float32))))
    assert x.dtype == np.float32 and np.allclose(x, _np_sqrtm(gen), rtol=1e-4, atol=1e-4)
    # a negative eigenvalue: the principal root is complex (JAX's complex result): NaN here
    assert np.isnan(np.asarray(sla.sqrtm(_put(c, mesh, np.diag([1., -4.]))))).all()
    with pytest.raises(NotImplementedError, match=r"Blocked version is not implemented yet\."):
        sla.sqrtm(_put(c, mesh, spd), blocksize=2)
    # polar: QDWH (JAX's default) and the SVD
    a = RNG.standard_normal((6, 4))
    for method in ("qdwh", "svd"):
        u, p = map(np.asarray, sla.polar(_put(c, mesh, a), method=method))
        assert u.shape == (6, 4) and p.shape == (4, 4)
        assert np.allclose(u @ p, a, atol=1e-12) and np.allclose(u.T @ u, np.eye(4), atol=1e-12)
        assert np.allclose(p, p.T) and np.linalg.eigvalsh(p).min() > 0
        ul, pl = map(np.asarray, sla.polar(_put(c, mesh, a.T), side="left", method=method))
        assert ul.shape == (4, 6) and pl.shape == (4, 4) and np.allclose(pl @ ul, a.T, atol=1e-12)
        assert np.allclose(ul @ ul.T, np.eye(4), atol=1e-12)
    su, ss, svh = np.linalg.svd(a, full_matrices=False)
    assert np.allclose(np.asarray(sla.polar(_put(c, mesh, a))[0]), su @ svh, atol=1e-12)
    d3 = np.array([[1., 2., 3.], [5., 4., 2.], [3., 2., 1.]], np.float32)   # JAX's example
    u, p = shmap.jit(sla.polar)(_put(c, mesh, d3))
    assert p.dtype == np.float32
    assert np.allclose(np.asarray(p), [[4.79, 3.25, 1.23], [3.25, 3.06, 2.01],
                                       [1.23, 2.01, 2.91]], atol=6e-3)
    assert np.allclose(np.asarray(u) @ np.asarray(p), d3, atol=1e-5)
    bat = RNG.standard_normal((2, 3, 3))
    u, p = map(np.asarray, sla.polar(_put(c, mesh, bat)))
    assert np.allclose(u @ p, bat, atol=1e-12)
    with pytest.raises(NotImplementedError, match=r"method='qdwh' only supports mxn matrices"):
        sla.polar(_put(c, mesh, a), side="left")
    with pytest.raises(ValueError, match=r"Unknown polar decomposition method foo\."):
        sla.polar(_put(c, mesh, a), method="foo")
    with pytest.raises(ValueError, match=r"The argument `side` must be either 'right' or "
                                         r"'left'\."):
        sla.polar(_put(c, mesh, a), side="up")


def test_expm_frechet_and_eigh_tridiagonal(c, mesh):
    a = RNG.standard_normal((4, 4))
    e = RNG.standard_normal((4, 4))
    ea, fr = sla.expm_frechet(_put(c, mesh, a), _put(c, mesh, e))
    assert np.allclose(np.asarray(ea), np.asarray(sla.expm(_put(c, mesh, a))))
    h = 1e-5
    num = (np.asarray(sla.expm(_put(c, mesh, a + h * e))) -
           np.asarray(sla.expm(_put(c, mesh, a - h * e)))) / (2 * h)
    assert np.allclose(np.asarray(fr), num, rtol=1e-7, atol=1e-7)
    # a diagonal A: L(E)_ij = E_ij (e^a_i - e^a_j) / (a_i - a_j)
    d = np.array([0.3, -1.2, 2.0])
    e3 = RNG.standard_normal((3, 3))
    dd = d[:, None] - d[None, :]
    want = e3 * np.where(dd == 0, np.exp(d)[:, None],
                         (np.exp(d)[:, None] - np.exp(d)[None, :]) / np.where(dd == 0, 1, dd))
    got = shmap.jit(lambda a, e: sla.expm_frechet(a, e, compute_expm=False))(
        _put(c, mesh, np.diag(d)), _put(c, mesh, e3))
    assert np.allclose(np.asarray(got), want, rtol=1e-12)
    with pytest.raises(ValueError, match=r"expected A and E to be the same shape"):
        sla.expm_frechet(_put(c, mesh, a), _put(c, mesh, e3))
    # eigh_tridiagonal
    dg, off = RNG.standard_normal(9), RNG.standard_normal(8)
    t = np.diag(dg) + np.diag(off, 1) + np.diag(off, -1)
    w = sla.eigh_tridiagonal(_put(c, mesh, dg), _put(c, mesh, off), eigvals_only=True)
    assert np.allclose(np.asarray(w), np.linalg.eigvalsh(t), rtol=0, atol=1e-14)
    w = shmap.jit(lambda d, e: sla.eigh_tridiagonal(d, e, eigvals_only=True, select="i",
                                                    select_range=(2, 5)))(
        _put(c, mesh, dg.astype(np.float32)), _put(c, mesh, off.astype(np.float32)))
    assert w.dtype == np.float32 and np.allclose(np.asarray(w), np.linalg.eigvalsh(t)[2:6],
                                                 atol=2e-6)
    w = sla.eigh_tridiagonal(_put(c, mesh, np.array([1., 2, 3, 4], np.float32)),   # JAX's example
                             _put(c, mesh, np.ones(3, np.float32)), eigvals_only=True)
    assert np.allclose(np.asarray(w), [0.2547188, 1.8227171, 3.1772828, 4.745281], atol=1e-6)
    with pytest.raises(TypeError, match=r"diagonal and off-diagonal values must have same dtype"):
        sla.eigh_tridiagonal(_put(c, mesh, dg), _put(c, mesh, off.astype(np.float32)),
                             eigvals_only=True)
    with pytest.raises(TypeError, match=r"Only float32 and float64 inputs are supported"):
        sla.eigh_tridiagonal(_put(c, mesh, np.arange(3)), _put(c, mesh, np.arange(2)),
                             eigvals_only=True)
    with pytest.raises(NotImplementedError, match=r"select='v'\) is not implemented"):
        sla.eigh_tridiagonal(_put(c, mesh, dg), _put(c, mesh, off), eigvals_only=True,
                             select="v")
    with pytest.raises(NotImplementedError, match=r"the eigenvectors"):
        sla.eigh_tridiagonal(_put(c, mesh, dg), _put(c, mesh, off))


# ---- special matrices ------------------------------------------------------------------------


def test_special_matrices(c, mesh):
    cv, rv = np.array([1, 2, 3]), np.array([-1, -2, -3, -4])
    t = np.asarray(sla.toeplitz(_put(c, mesh, cv), _put(c, mesh, rv)))
    assert t.dtype == np.int64 and np.array_equal(
        t, [[1, -2, -3, -4], [2, 1, -2, -3], [3, 2, 1, -2]])
    cb = RNG.standard_normal((2, 4))
    t = np.asarray(sla.toeplitz(_put(c, mesh, cb)))
    assert t.shape == (2, 4, 4) and all(
        np.array_equal(t[b], [[cb[b, abs(i - j)] for j in range(4)] for i in range(4)])
        for b in range(2))
    h = np.asarray(sla.hankel(_put(c, mesh, cv), _put(c, mesh, np.array([9, 4, 5, 6]))))
    assert np.array_equal(h, [[1, 2, 3, 4], [2, 3, 4, 5], [3, 4, 5, 6]])
    assert np.array_equal(np.asarray(sla.hankel(_put(c, mesh, cv))),
                          [[1, 2, 3], [2, 3, 0], [3, 0, 0]])
    circ = np.asarray(sla.circulant(_put(c, mesh, np.array([[1, 2, 3], [4, 5, 6]]))))
    assert np.array_equal(circ, [[[1, 3, 2], [2, 1, 3], [3, 2, 1]],
                                 [[4, 6, 5], [5, 4, 6], [6, 5, 4]]])
    les = np.asarray(sla.leslie(_put(c, mesh, np.array([0.1, 2.0, 1.0, 0.1])),
                                _put(c, mesh, np.array([0.2, 0.8, 0.7]))))
    assert np.array_equal(les, [[0.1, 2, 1, 0.1], [0.2, 0, 0, 0], [0, 0.8, 0, 0],
                                [0, 0, 0.7, 0]])
    with pytest.raises(ValueError, match=r"Incorrect lengths for f and s"):
        sla.leslie(_put(c, mesh, np.ones(3)), _put(c, mesh, np.ones(3)))
    poly = np.array([2., -20., 62., -60.])          # 2 (x - 2)(x - 3)(x - 5)
    comp = np.asarray(sla.companion(_put(c, mesh, poly)))
    assert np.array_equal(comp, [[10, -31, 30], [1, 0, 0], [0, 1, 0]])
    fc = np.asarray(sla.fiedler_companion(_put(c, mesh, np.array([1., -16., 86., -176., 105.]))))
    assert np.array_equal(fc, [[16, -86, 1, 0], [1, 0, 0, 0], [0, 176, 0, -105], [0, 1, 0, 0]])
    assert np.allclose(np.sort(np.linalg.eigvals(fc).real), [1, 3, 5, 7])
    fi = np.asarray(sla.fiedler(_put(c, mesh, np.array([1, 4, 12]))))
    assert np.array_equal(fi, [[0, 3, 11], [3, 0, 8], [11, 8, 0]])
    av, v = np.array([1.5, -2.0, 0.5]), RNG.standard_normal(6)
    for n_, mode in itertools.product((2, 6), ("full", "same", "valid")):
        cm = np.asarray(sla.convolution_matrix(_put(c, mesh, av), n_, mode=mode))
        assert np.allclose(cm @ v[:n_], np.convolve(av, v[:n_], mode)), (n_, mode)
    assert np.array_equal(np.asarray(sla.convolution_matrix(_put(c, mesh, np.array([-1, 4, -2])),
                                                            5, mode="same")),
                          [[4, -1, 0, 0, 0], [-2, 4, -1, 0, 0], [0, -2, 4, -1, 0],
                           [0, 0, -2, 4, -1], [0, 0, 0, -2, 4]])
    with pytest.raises(ValueError, match=r"n must be a positive integer; got 0\."):
        sla.convolution_matrix(_put(c, mesh, av), 0)
    # the matrices of an order: outside a trace with no mesh numpy, on the mesh Arrays
    for where in ("host", "mesh"):
        if where == "mesh":
            ctx = shmap.use_mesh(mesh)
            ctx.__enter__()
        try:
            hil = np.asarray(sla.hilbert(5))
            ih = np.asarray(sla.invhilbert(5))
            pas, ipas = np.asarray(sla.pascal(5)), np.asarray(sla.invpascal(5))
            pl = np.asarray(sla.pascal(4, kind="lower"))
            hel, had = np.asarray(sla.helmert(5, full=True)), np.asarray(sla.hadamard(8))
        finally:
            if where == "mesh":
                ctx.__exit__(None, None, None)
        assert hil.dtype == ih.dtype == pas.dtype == hel.dtype == np.float32, where
        assert np.array_equal(hil, 1 / (np.arange(5.)[:, None] + np.arange(5.) + 1)
                              .astype(np.float32))
        assert np.allclose(ih, [[math.comb(5 + i, 4 - j) * math.comb(5 + j, 4 - i) *
                                 math.comb(i + j, i) ** 2 * (i + j + 1) * (-1) ** (i + j)
                                 for j in range(5)] for i in range(5)], rtol=1e-5)
        assert np.allclose(pas, [[math.comb(i + j, i) for j in range(5)] for i in range(5)],
                           rtol=1e-5)
        assert np.allclose(pl, [[math.comb(i, j) for j in range(4)] for i in range(4)],
                           rtol=1e-5, atol=1e-6)
        assert np.allclose(ipas @ pas, np.eye(5), atol=1e-3)
        assert np.allclose(hel @ hel.T, np.eye(5), atol=1e-6) and np.allclose(hel[0], 5 ** -0.5)
        assert had.dtype == np.int32 and np.array_equal(had @ had.T, 8 * np.eye(8))
    with pytest.raises(ValueError, match=r"n must be a positive power of 2; got 6\."):
        sla.hadamard(6)
    with pytest.raises(ValueError, match=r"Expected kind to be on of"):
        sla.pascal(3, kind="diag")
    # block_diag: promoted dtypes; qr_multiply
    bd = sla.block_diag(_put(c, mesh, np.ones((2, 2), np.int32)),
                        _put(c, mesh, np.array([2.5], np.float32)))
    assert bd.dtype == np.float32 and np.array_equal(np.asarray(bd), [[1, 1, 0], [1, 1, 0],
                                                                      [0, 0, 2.5]])
    with pytest.raises(ValueError, match=r"must have at most 2 dimensions"):
        sla.block_diag(_put(c, mesh, np.ones((1, 2, 2))))
    a = RNG.standard_normal((5, 3))
    q, r = np.linalg.qr(a, mode="complete")
    cr = RNG.standard_normal((2, 5))
    got, rr = sla.qr_multiply(_put(c, mesh, a), _put(c, mesh, cr))
    assert np.allclose(np.asarray(got), (cr @ q)[:, :3]) and np.allclose(np.asarray(rr), r[:3])
    cl = RNG.standard_normal((3, 2))
    got, _ = sla.qr_multiply(_put(c, mesh, a), _put(c, mesh, cl), mode="left")
    assert np.allclose(np.asarray(got), q[:, :3] @ cl)
    aq, bq = np.array([[1., 1.], [1., 2.], [1., 3.], [1., 4.]]), np.array([2., 4., 5., 4.])
    qtb, rq = sla.qr_multiply(_put(c, mesh, aq), _put(c, mesh, bq))   # JAX's least squares
    x = sla.solve_triangular(rq, qtb)
    assert qtb.shape == (2,) and np.allclose(np.asarray(x), np.linalg.lstsq(aq, bq, rcond=None)[0])
    with pytest.raises(ValueError, match=r"Array shapes are not compatible for c @ Q operation"):
        sla.qr_multiply(_put(c, mesh, a), _put(c, mesh, cl))


# ---- signal, integrate, ndimage ----------------------------------------------------------------


def _np_conv_full(x, y):
    out = np.zeros(tuple(a + b - 1 for a, b in zip(x.shape, y.shape)))
    for i in np.ndindex(*x.shape):
        for j in np.ndindex(*y.shape):
            out[tuple(a + b for a, b in zip(i, j))] += x[i] * y[j]
    return out


def _np_convolve(x, y, mode):
    """scipy.signal.convolve's definition: the full convolution, its
    centered in1-sized part ('same') or the part of full overlap ('valid')."""
    full = _np_conv_full(x, y)
    if mode == "full":
        return full
    if mode == "same":
        sl = [slice((f - s) // 2, (f - s) // 2 + s) for f, s in zip(full.shape, x.shape)]
    else:
        sl = [slice(min(a, b) - 1, max(a, b)) for a, b in zip(x.shape, y.shape)]
    return full[tuple(sl)]


def test_signal(c, mesh):
    x, y = RNG.standard_normal(9), RNG.standard_normal(4)
    for mode in ("full", "same", "valid"):
        got = signal.convolve(_put(c, mesh, x), _put(c, mesh, y), mode=mode)
        assert np.allclose(np.asarray(got), np.convolve(x, y, mode), rtol=1e-12), mode
        got = signal.correlate(_put(c, mesh, x), _put(c, mesh, y), mode=mode, method="direct")
        assert np.allclose(np.asarray(got), np.correlate(x, y, mode), rtol=1e-12), mode
        # the smaller first: 'same' keeps in1's size, centered as SciPy's
        got = signal.convolve(_put(c, mesh, y), _put(c, mesh, x), mode=mode)
        assert np.allclose(np.asarray(got), _np_convolve(y, x, mode), rtol=1e-12), mode
    a3, k3 = RNG.standard_normal((5, 4, 6)), RNG.standard_normal((2, 3, 3))
    for mode in ("full", "same", "valid"):
        got = shmap.jit(lambda a, k: signal.convolve(a, k, mode=mode))(_put(c, mesh, a3),
                                                                       _put(c, mesh, k3))
        assert np.allclose(np.asarray(got), _np_convolve(a3, k3, mode), rtol=1e-12), mode
    im = np.array([[1, 2], [3, 4]])
    ker = np.array([[2, 1, 1], [4, 3, 4], [1, 3, 2]])
    full = np.asarray(signal.convolve2d(_put(c, mesh, im), _put(c, mesh, ker)))
    assert full.dtype == np.float32 and np.array_equal(
        full, [[2, 5, 3, 2], [10, 22, 17, 12], [13, 30, 32, 20], [3, 13, 18, 8]])
    for mode in ("same", "valid"):   # JAX's documented results
        assert np.array_equal(np.asarray(signal.convolve2d(_put(c, mesh, im), _put(c, mesh, ker),
                                                           mode=mode)), [[22, 17], [30, 32]])
    xc, yc = np.array([[2, 1, 3], [1, 3, 1], [4, 1, 2]]), np.array([[1, 3], [4, 2]])
    fullc = [[4, 10, 10, 12], [8, 15, 24, 7], [11, 28, 14, 9], [12, 7, 7, 2]]
    assert np.array_equal(np.asarray(signal.correlate2d(_put(c, mesh, xc), _put(c, mesh, yc))),
                          fullc)
    assert np.array_equal(np.asarray(signal.correlate2d(_put(c, mesh, xc), _put(c, mesh, yc),
                                                        mode="same")),
                          np.asarray(fullc)[1:, 1:])
    assert np.array_equal(np.asarray(signal.correlate2d(_put(c, mesh, xc), _put(c, mesh, yc),
                                                        mode="valid")), [[15, 24], [28, 14]])
    big = RNG.standard_normal((4, 5))
    got = signal.correlate2d(_put(c, mesh, yc.astype(float)), _put(c, mesh, big))   # swapped
    assert np.allclose(np.asarray(got), _np_conv_full(yc.astype(float), big[::-1, ::-1]))
    with pytest.raises(ValueError, match=r"One input must be smaller than the other in every "
                                         r"dimension\."):
        signal.convolve(_put(c, mesh, np.ones((2, 5))), _put(c, mesh, np.ones((3, 2))))
    with pytest.raises(ValueError, match=r"in1 and in2 must have the same number of dimensions"):
        signal.convolve(_put(c, mesh, np.ones((2, 5))), _put(c, mesh, np.ones(3)))
    with pytest.raises(NotImplementedError, match=r"convolve2d\(\) only supports "
                                                  r"boundary='fill', fillvalue=0"):
        signal.convolve2d(_put(c, mesh, im), _put(c, mesh, ker), boundary="wrap")
    with pytest.raises(ValueError, match=r"Got method='magic'; expected 'auto', 'fft', or "
                                         r"'direct'\."):
        signal.convolve(_put(c, mesh, x), _put(c, mesh, y), method="magic")
    # detrend: the mean, a line, lines between breakpoints
    d = np.array([1., 4., 8., 8., 9.])
    assert np.allclose(np.asarray(signal.detrend(_put(c, mesh, d))), [-1, 0, 2, 0, -1])
    assert np.allclose(np.asarray(signal.detrend(_put(c, mesh, d), type="constant")),
                       d - d.mean())
    data = RNG.standard_normal((3, 12)) + np.arange(12.0) ** 1.5
    got = np.asarray(signal.detrend(_put(c, mesh, data.T), axis=0, bp=[4, 9]))
    for lo, hi in ((0, 4), (4, 9), (9, 12)):
        t = np.arange(hi - lo)
        for k in range(3):
            seg = data[k, lo:hi]
            assert np.allclose(got[lo:hi, k], seg - np.polyval(np.polyfit(t, seg, 1), t))
    with pytest.raises(ValueError, match=r"Trend type must be 'linear' or 'constant'\."):
        signal.detrend(_put(c, mesh, d), type="quadratic")


def _np_fix(i, size, mode):
    """SciPy's documented boundary modes (JAX's 'wrap' and 'constant' are
    SciPy's 'grid-wrap' and 'grid-constant')."""
    if mode == "nearest":
        return min(max(i, 0), size - 1)
    if mode == "wrap":
        return i % size
    if mode == "mirror":     # reflected about the edge samples: period 2 (size - 1)
        m = i % (2 * (size - 1))
        return m if m < size else 2 * (size - 1) - m
    if mode == "reflect":    # reflected about the edges: period 2 size
        m = i % (2 * size)
        return m if m < size else 2 * size - 1 - m
    return i


def _np_map_coordinates(inp, coords, order, mode, cval):
    out = np.empty(coords[0].shape)
    for idx in np.ndindex(*coords[0].shape):
        corners = []
        for co, size in zip(coords, inp.shape):
            v = co[idx]
            if order == 0:
                corners.append([(int(math.copysign(math.floor(abs(v) + 0.5), v)), 1.0)])
            else:
                f = math.floor(v)
                corners.append([(f, 1 - (v - f)), (f + 1, v - f)])
        total = 0.0
        for combo in itertools.product(*corners):
            w = np.prod([cw for _, cw in combo])
            if mode == "constant" and not all(0 <= i < s for (i, _), s in zip(combo, inp.shape)):
                total += w * cval
            else:
                total += w * inp[tuple(_np_fix(i, s, mode) for (i, _), s in zip(combo,
                                                                                inp.shape))]
        out[idx] = total
    return out


def test_integrate_and_ndimage(c, mesh):
    y = RNG.standard_normal((3, 7))
    x = np.sort(RNG.uniform(0, 5, 7))
    assert np.allclose(np.asarray(integrate.trapezoid(_put(c, mesh, y), _put(c, mesh, x))),
                       np.trapz(y, x))
    assert np.allclose(np.asarray(integrate.trapezoid(_put(c, mesh, y), dx=0.5, axis=0)),
                       np.trapz(y, dx=0.5, axis=0))
    got = shmap.jit(lambda y: integrate.trapezoid(y))(_put(c, mesh, np.array([1, 2, 3, 2, 3,
                                                                              2, 1])))
    assert got.dtype == np.float32 and float(got) == 13.0
    xs = np.linspace(0, 2 * np.pi, 1000)
    assert abs(float(integrate.trapezoid(_put(c, mesh, np.sin(xs) ** 2), _put(c, mesh, xs))) -
               np.pi) < 1e-9
    inp = RNG.standard_normal((4, 5))
    pts = [RNG.uniform(-3, 7, (2, 6)), RNG.uniform(-3, 8, (2, 6))]
    pts[0][0, :3] = [0.5, -0.5, 2.5]     # ties: rounded half away from zero
    for mode, order in itertools.product(("constant", "nearest", "wrap", "mirror", "reflect"),
                                         (0, 1)):
        got = ndimage.map_coordinates(_put(c, mesh, inp), [_put(c, mesh, p) for p in pts],
                                      order=order, mode=mode, cval=-2.0)
        assert got.shape == (2, 6)
        assert np.allclose(np.asarray(got), _np_map_coordinates(inp, pts, order, mode, -2.0),
                           rtol=1e-12, atol=1e-12), (mode, order)
    img = np.arange(12.0).reshape(3, 4)       # JAX's example; integers rounded back
    co = [np.array([0.5, 1.5]), np.array([1.5, 2.5])]
    got = shmap.jit(lambda i, a, b: ndimage.map_coordinates(i, [a, b], order=1))(
        _put(c, mesh, img), _put(c, mesh, co[0]), _put(c, mesh, co[1]))
    assert np.array_equal(np.asarray(got), [3.5, 8.5])
    got = ndimage.map_coordinates(_put(c, mesh, img.astype(np.int32)),
                                  [_put(c, mesh, v) for v in co], order=1)
    assert got.dtype == np.int32 and np.array_equal(np.asarray(got), [4, 9])
    with pytest.raises(NotImplementedError, match=r"currently requires order<=1"):
        ndimage.map_coordinates(_put(c, mesh, img), [_put(c, mesh, v) for v in co], order=3)
    with pytest.raises(NotImplementedError, match=r"does not yet support mode grid-wrap"):
        ndimage.map_coordinates(_put(c, mesh, img), [_put(c, mesh, v) for v in co], order=1,
                                mode="grid-wrap")
    with pytest.raises(ValueError, match=r"coordinates must be a sequence of length input\.ndim, "
                                         r"but 1 != 2"):
        ndimage.map_coordinates(_put(c, mesh, img), [_put(c, mesh, co[0])], order=1)


# ---- optimize ----------------------------------------------------------------------------------


def _rosen(x):
    return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def test_minimize(c, mesh):
    m = RNG.standard_normal((5, 5))
    a = m @ m.T + 5 * np.eye(5)
    b = RNG.standard_normal(5)
    want = np.linalg.solve(a, b)

    def quad(x, a, b):
        return 0.5 * jnp.dot(x, jnp.matmul(a, x)) - jnp.dot(b, x)
    for method in ("BFGS", "l-bfgs-experimental-do-not-rely-on-this"):
        r = optimize.minimize(quad, _put(c, mesh, np.zeros(5)),
                              (_put(c, mesh, a), _put(c, mesh, b)), method=method)
        assert isinstance(r, optimize.OptimizeResults)
        assert bool(r.success) and int(r.status) == 0, method
        assert np.allclose(np.asarray(r.x), want, atol=1e-5), method
        assert np.isclose(float(r.fun), -0.5 * b @ want)
        assert np.abs(np.asarray(r.jac)).max() < 1e-5
        assert int(r.nfev) == int(r.njev) > int(r.nit) > 0
    assert r.hess_inv is None     # L-BFGS keeps no inverse Hessian
    # Rosenbrock's minimum, at ones, from a start JAX's line search reaches it from; in a jit
    r = shmap.jit(lambda x0: optimize.minimize(_rosen, x0, method="BFGS"))(
        _put(c, mesh, np.zeros(4)))
    assert bool(r.success) and np.allclose(np.asarray(r.x), np.ones(4), atol=1e-6)
    hinv = np.asarray(r.hess_inv)     # the inverse Hessian estimate: symmetric, positive
    assert np.allclose(hinv, hinv.T) and np.linalg.eigvalsh(hinv).min() > 0
    assert (int(r.nit), int(r.nfev)) == (33, 48)    # JAX's steps (a numpy run of its code)
    r = optimize.minimize(_rosen, _put(c, mesh, np.array([0.8, 0.6, 0.4])),
                          method="l-bfgs-experimental-do-not-rely-on-this")
    assert bool(r.success) and np.allclose(np.asarray(r.x), np.ones(3), atol=1e-6)
    # JAX's documented line-search failures (jax-ml/jax#40228): status 3 (zoom failed) on
    # Rosenbrock from (0, 0) after 1 iteration and from (-1.2, 1) after 8, in float64 and float32
    for x0, nit, fun in (([0., 0.], 1, 0.77657), ([-1.2, 1.], 8, 1.74729)):
        for dt in (np.float64, np.float32):
            r = optimize.minimize(_rosen, _put(c, mesh, np.array(x0, dt)), method="BFGS")
            assert not bool(r.success) and int(r.status) == 3 and int(r.nit) == nit, (x0, dt)
            assert r.x.dtype == dt and np.isclose(float(r.fun), fun,
                                                  rtol=1e-5 if dt == np.float32 else 3e-6)
    r = optimize.minimize(_rosen, _put(c, mesh, np.zeros(3, np.float32)), method="BFGS",
                          options={"maxiter": 2})
    assert int(r.status) == 1 and int(r.nit) == 2     # max iterations
    with pytest.raises(ValueError, match=r"Method Nelder-Mead not recognized"):
        optimize.minimize(_rosen, _put(c, mesh, np.zeros(2)), method="Nelder-Mead")
    with pytest.raises(TypeError, match=r"args argument to jax.scipy.optimize.minimize must be a "
                                        r"tuple, got 3"):
        optimize.minimize(quad, _put(c, mesh, np.zeros(5)), 3, method="BFGS")
