"""shmap.scipy (jax.scipy's special functions, normal distributions and
scipy.linalg names) against Python's math module (lgamma, erf, erfc) and
closed forms: logsumexp with weights and signs, gammaln / gamma over
positive and negative arguments, digamma against a central difference of
math.lgamma and its recurrence, erfc in the tails, the normal CDF /
quantile round trip, the multivariate normal's logpdf against its formula,
cho_factor / cho_solve, block_diag. Runs on the cluster of conftest's c."""
import math

import numpy as np
import pytest

import shmap
from shmap import P, NamedSharding
from shmap import numpy as jnp
from shmap.scipy import linalg as sla
from shmap.scipy import special, stats


def _put(c, a, spec=P()):
    mesh = c.make_mesh((4, 2), ("i", "j"))
    return c.device_put(a, NamedSharding(mesh, spec))


def test_special_functions(c):
    x = np.array([0.1, 0.5, 1.0, 2.5, 7.3, 30.0, 171.2, -0.5, -1.5, -2.7, 1e-3, 3.0])
    xs = _put(c, x)
    want = np.array([math.lgamma(v) for v in x])
    assert np.allclose(np.asarray(special.gammaln(xs)), want, rtol=1e-13, atol=1e-13)
    got = np.asarray(special.gamma(_put(c, x[:11] / 10 + np.r_[0, 0, 0, 0, 0, 0, 0, -1, -1, 0,
                                                                 0])))
    args = x[:11] / 10 + np.r_[0, 0, 0, 0, 0, 0, 0, -1, -1, 0, 0]
    assert np.allclose(got, [math.gamma(v) for v in args], rtol=1e-12)
    assert np.isinf(np.asarray(special.gammaln(_put(c, np.array([0.0, -3.0]))))).all()
    pos = x[x > 0]
    h = 1e-6
    dig = np.asarray(special.digamma(_put(c, pos)))
    num = [(math.lgamma(v + h) - math.lgamma(v - h)) / (2 * h) for v in pos]
    assert np.allclose(dig, num, rtol=2e-6, atol=1e-6)  # the difference quotient: ~1e-6 near 0
    neg = np.array([-0.5, -1.5, -2.7])
    assert np.allclose(np.asarray(special.digamma(_put(c, neg + 1))) -
                       np.asarray(special.digamma(_put(c, neg))), 1 / neg, rtol=1e-12)
    assert np.isnan(np.asarray(special.digamma(_put(c, np.array([0.0, -2.0]))))).all()
    z = np.array([-6.0, -3.0, -0.4, 0.0, 0.3, 0.7, 2.0, 4.0, 6.0, 9.0])
    ec = np.asarray(special.erfc(_put(c, z)))
    assert np.allclose(ec, [math.erfc(v) for v in z], rtol=2e-7, atol=0)
    e32 = np.asarray(special.erfc(_put(c, z.astype(np.float32))))
    assert e32.dtype == np.float32 and e32[-2] > 0  # 1.5e-8, where 1 - erf is 0
    assert np.allclose(np.asarray(special.ndtri(special.ndtr(_put(c, z[:7])))), z[:7],
                       rtol=1e-6, atol=1e-6)
    a = np.array([[1.0, 2.0, 3.0], [-np.inf, -np.inf, -np.inf], [1000.0, 1000.0, -5.0]])
    got = np.asarray(special.logsumexp(_put(c, a), axis=1))
    assert np.allclose(got[[0, 2]], [np.log(np.exp(a[0]).sum()), 1000 + np.log(2 + np.exp(-1005))])
    assert got[1] == -np.inf
    w = np.array([[1.0, -2.0, 1.0]] * 3)
    val, sgn = special.logsumexp(_put(c, a), axis=1, b=_put(c, w), return_sign=True)
    ref = (np.exp(a[0]) * w[0]).sum()
    assert np.isclose(np.asarray(val)[0], np.log(abs(ref))) and np.asarray(sgn)[0] == np.sign(ref)
    assert np.asarray(sgn)[2] == -1  # 1 - 2 + e^-1005: negative
    assert np.isclose(np.asarray(val)[2], 1000 + np.log(1 - np.exp(-1005)))
    assert np.isnan(np.asarray(special.logsumexp(_put(c, a), axis=1, b=_put(c, w)))[2])
    p = np.array([0.0, 0.2, 0.5, 1.0])
    q = np.array([0.0, 0.5, 2.0, 3.0])
    assert np.allclose(np.asarray(special.xlogy(_put(c, p), _put(c, q))),
                       [0.0, 0.2 * np.log(0.5), 0.5 * np.log(2), np.log(3)])
    assert np.allclose(np.asarray(special.entr(_put(c, p))),
                       [0.0, -0.2 * np.log(0.2), -0.5 * np.log(0.5), 0.0])
    assert np.allclose(np.asarray(special.logit(special.expit(_put(c, q)))), q)


def test_stats_and_linalg(c):
    rng = np.random.default_rng(4)
    x = rng.standard_normal(8)
    xs = _put(c, x, P("i"))
    lp = np.asarray(stats.norm.logpdf(xs, 1.0, 2.0))
    assert np.allclose(lp, -0.5 * ((x - 1) / 2) ** 2 - np.log(2 * np.sqrt(2 * np.pi)))
    assert np.allclose(np.asarray(stats.norm.cdf(xs)), [0.5 * math.erfc(-v / math.sqrt(2))
                                                        for v in x], rtol=1e-7)
    assert np.allclose(np.asarray(stats.norm.ppf(stats.norm.cdf(xs, 2.0, 3.0), 2.0, 3.0)), x,
                       atol=1e-6)
    m = rng.standard_normal((4, 4))
    cov = m @ m.T + 4 * np.eye(4)
    mean = rng.standard_normal(4)
    pts = rng.standard_normal((8, 4))
    d = pts - mean
    want = -0.5 * np.einsum("bi,ij,bj->b", d, np.linalg.inv(cov), d) - \
        0.5 * np.log(np.linalg.det(cov)) - 2 * np.log(2 * np.pi)
    got = stats.multivariate_normal.logpdf(_put(c, pts), _put(c, mean), _put(c, cov))
    assert got.shape == (8,) and np.allclose(np.asarray(got), want, rtol=1e-10)
    one = stats.multivariate_normal.logpdf(_put(c, pts[0]), _put(c, mean), _put(c, cov))
    assert one.shape == () and np.isclose(float(one), want[0])
    b = rng.standard_normal((4, 2))
    for lower in (False, True):
        fac = sla.cho_factor(_put(c, cov), lower=lower)
        assert np.allclose(np.asarray(sla.cho_solve(fac, _put(c, b))), np.linalg.solve(cov, b),
                           rtol=1e-10, atol=1e-10)
    assert np.allclose(np.asarray(sla.cholesky(_put(c, cov))), np.linalg.cholesky(cov).T)
    assert np.allclose(np.asarray(sla.solve(_put(c, cov), _put(c, b), assume_a="pos")),
                       np.linalg.solve(cov, b))
    bd = sla.block_diag(_put(c, np.ones((2, 2))), _put(c, 2 * np.ones((1, 3))),
                        _put(c, np.array([5.0])))
    want = np.zeros((4, 6))
    want[:2, :2], want[2, 2:5], want[3, 5] = 1, 2, 5
    assert np.array_equal(np.asarray(bd), want)
    g = shmap.grad(lambda v: jnp.sum(special.gammaln(v)))(_put(c, np.array([1.5, 3.0])))
    assert np.allclose(np.asarray(g), np.asarray(special.digamma(_put(c, np.array([1.5, 3.0])))),
                       rtol=1e-12)


def test_expm_and_decompositions(c):
    """expm against exp of the eigenvalues for symmetric matrices (norms
    that need 0 to 9 squarings) and against a Taylor series of the scaled
    matrix for a general one; NaN past max_squarings, as JAX's; the
    scipy.linalg names of eigh, svd, qr, pinv."""
    rng = np.random.default_rng(8)
    for scale in (0.01, 1.0, 30.0, 200.0):
        m = rng.standard_normal((5, 5))
        a = (m + m.T) * scale / 4
        w, v = np.linalg.eigh(a)
        want = (v * np.exp(w)) @ v.T
        got = np.asarray(sla.expm(_put(c, a)))
        assert np.allclose(got, want, rtol=1e-9, atol=1e-12 * np.abs(want).max()), scale
    g = rng.standard_normal((4, 4))
    s = 6
    x = g / 2 ** s
    term, acc = np.eye(4), np.eye(4)
    for k in range(1, 30):
        term = term @ x / k
        acc = acc + term
    for _ in range(s):
        acc = acc @ acc
    assert np.allclose(np.asarray(sla.expm(_put(c, g))), acc, rtol=1e-10)
    assert np.isnan(np.asarray(sla.expm(_put(c, g * 1e6), max_squarings=4))).all()
    a = rng.standard_normal((4, 3))
    q, r = sla.qr(_put(c, a))
    assert q.shape == (4, 4) and np.allclose(np.asarray(q) @ np.asarray(r), a)
    assert np.allclose(np.asarray(sla.pinv(_put(c, a))), np.linalg.pinv(a))
    sym = a.T @ a
    assert np.allclose(np.asarray(sla.eigh(_put(c, sym), eigvals_only=True)),
                       np.linalg.eigvalsh(sym))
    assert np.allclose(np.asarray(sla.svd(_put(c, a), compute_uv=False)),
                       np.linalg.svd(a, compute_uv=False))


def _np_cg(A, b, iters):
    """numpy's run of the same Conjugate Gradient steps (JAX's _cg_solve)."""
    x = np.zeros_like(b)
    r = b - A @ x
    p, gamma = r.copy(), r @ r
    for _ in range(iters):
        Ap = A @ p
        alpha = gamma / (p @ Ap)
        x, r = x + alpha * p, r - alpha * Ap
        gamma_ = r @ r
        p, gamma = r + gamma_ / gamma * p, gamma_
    return x


def test_sparse_linalg_solvers(c):
    """cg and bicgstab: one loop of the program each, until the residual
    meets the tolerance; a matrix or a matvec function over sharded
    vectors, a preconditioner, pytrees, maxiter."""
    from shmap.scipy.sparse import linalg as spla
    rng = np.random.default_rng(3)
    m = rng.standard_normal((32, 32))
    A = m @ m.T + 32 * np.eye(32)
    b = rng.standard_normal(32)
    # (a matvec that changes the vector's sharding changes the carry's type:
    # refused as JAX's while_loop does; shard the operator's output as b)
    x, info = spla.cg(lambda v: jnp.dot(_put(c, A, P("i", None)), v, out_sharding=P()),
                      _put(c, b))
    assert info is None
    assert np.linalg.norm(A @ np.asarray(x) - b) <= 1e-5 * np.linalg.norm(b)
    assert np.allclose(np.asarray(x), np.linalg.solve(A, b), atol=1e-6)
    # maxiter stops it: the same steps as numpy's
    x3, _ = spla.cg(_put(c, A), _put(c, b), maxiter=3)
    assert np.allclose(np.asarray(x3), _np_cg(A, b, 3), atol=1e-12)
    # a matvec function over a sharded vector (a 1-d Laplacian plus a shift),
    # with a Jacobi preconditioner, in a jit
    n = 64
    lap = lambda v: 2.1 * v - jnp.roll(v, 1) - jnp.roll(v, -1)
    L = 2.1 * np.eye(n) - np.roll(np.eye(n), 1, 0) - np.roll(np.eye(n), -1, 0)
    bv = rng.standard_normal(n)
    solve = shmap.jit(lambda b: spla.cg(lap, b, M=lambda r: r / 2.1, tol=1e-10)[0])
    xv = solve(_put(c, bv, P("i")))
    assert np.allclose(np.asarray(xv), np.linalg.solve(L, bv), atol=1e-8)
    assert xv.sharding.spec == P("i")
    text = shmap.jit(lambda b: spla.cg(lap, b)[0]).lower(_put(c, bv, P("i"))).as_text()
    assert text.split("# lowered")[0].count("while ") == 1
    # a pytree right-hand side
    tree = {"u": bv[:8], "w": bv[8:16]}
    xt, _ = spla.cg(lambda t: {"u": 3 * t["u"], "w": 5 * t["w"]}, {k: _put(c, v) for k, v in
                                                                    tree.items()})
    assert np.allclose(np.asarray(xt["u"]), bv[:8] / 3) and np.allclose(np.asarray(xt["w"]),
                                                                          bv[8:16] / 5)
    # bicgstab: a non-symmetric, diagonally dominant matrix
    N = rng.standard_normal((32, 32)) + 40 * np.eye(32)
    xb, _ = spla.bicgstab(_put(c, N), _put(c, b), tol=1e-10)
    assert np.allclose(np.asarray(xb), np.linalg.solve(N, b), atol=1e-9)
    with pytest.raises(ValueError, match=r"linear operator must be a square matrix, but has "
                                         r"shape: \(32, 8\)"):
        spla.cg(_put(c, A[:, :8]), _put(c, b))
