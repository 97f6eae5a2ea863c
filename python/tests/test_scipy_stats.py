"""shmap.scipy.special's incomplete gamma and beta functions, zeta,
polygamma, Bessel, exponential integrals, spence, hyp1f1, bernoulli and the
smaller functions, and shmap.scipy.stats's distributions, mode, rankdata
and sem, against values computed here with math and numpy (scipy is not
used): closed forms (P(n, x) and P(n + 1/2, x), I_x(a, b) for integer a
and b, zeta(2) ...), power series, Gauss-Legendre and Gauss-Laguerre
integrals (of the pdf for cdfs), recurrences and known values. In a jit on
sharded Arrays and at once; float32 and float64; grads (the custom rules
of the loops, gammaln-based logpdfs, softmax) against their formulas and
central differences; JAX's sentences for what JAX refuses. Runs on the
cluster of conftest's c."""
import math

import numpy as np
import pytest

import shmap
from shmap import P
from shmap import numpy as jnp
from shmap.scipy import special as sp
from shmap.scipy import stats as st

from _util import put as _put

EULER = 0.5772156649015329
LEG_T, LEG_W = np.polynomial.legendre.leggauss(40)
LAG_T, LAG_W = np.polynomial.laguerre.laggauss(80)


def _quad(f, lo, hi, panels=200):
    """int_lo^hi f by 40-point Gauss-Legendre on each of `panels` panels."""
    e = np.linspace(lo, hi, panels + 1)
    mid, half = (e[1:] + e[:-1]) / 2, (e[1:] - e[:-1]) / 2
    t = mid[:, None] + half[:, None] * LEG_T[None, :]
    return float(np.sum(half[:, None] * LEG_W[None, :] * f(t)))


# ---- references --------------------------------------------------------------------------


def _gammainc_ref(a, x):
    """P(a, x): closed forms for integer and half-integer a, else x**a /
    Gamma(a) int_0^1 u**(a-1) exp(-x u) du (u = v**k, smooth at 0)."""
    if x == 0:
        return 0.0
    if a == int(a):
        q = sum(math.exp(k * math.log(x) - x - math.lgamma(k + 1)) for k in range(int(a)))
        return 1.0 - q
    if 2 * a == int(2 * a):
        n = int(a - 0.5)
        return math.erf(math.sqrt(x)) - sum(
            math.exp((k + 0.5) * math.log(x) - x - math.lgamma(k + 1.5)) for k in range(n))
    k = math.ceil(4 / a)
    integral = _quad(lambda v: v ** (k * a - 1) * np.exp(-x * v ** k), 0.0, 1.0)
    return math.exp(a * math.log(x) - math.lgamma(a)) * k * integral


def _gammaincc_ref(a, x):
    """Q(a, x) for integer a directly (exact in the upper tail)."""
    if x == 0:
        return 1.0
    if a == int(a):
        return sum(math.exp(k * math.log(x) - x - math.lgamma(k + 1)) for k in range(int(a)))
    return 1.0 - _gammainc_ref(a, x)


def _betainc_ref(a, b, x):
    """I_x(a, b): the binomial sum for integer a and b, else x**a
    int_0^1 w**(a-1) (1 - x w)**(b-1) dw / B(a, b) (w = v**k, smooth at 0)."""
    lbeta = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    if a == int(a) and b == int(b):
        m = int(a + b - 1)
        return sum(math.comb(m, j) * x ** j * (1 - x) ** (m - j) for j in range(int(a), m + 1))
    k = math.ceil(4 / a)
    integral = _quad(lambda v: v ** (k * a - 1) * (1 - x * v ** k) ** (b - 1), 0.0, 1.0)
    return x ** a * k * integral / math.exp(lbeta)


def _zeta_ref(s, q, n=2000):
    """sum_{k<n} (k+q)**-s and Euler-Maclaurin's tail."""
    k = np.arange(n) + q
    z = n + q
    return float(np.sum(k ** -s) + z ** (1 - s) / (s - 1) + 0.5 * z ** -s + s * z ** (-s - 1) / 12
                 - s * (s + 1) * (s + 2) * z ** (-s - 3) / 720)


def _e1_series(x, sign):
    """sum_{k>=1} (sign x)**k / (k k!)."""
    t, terms = 1.0, []
    for k in range(1, 400):
        t *= sign * x / k
        terms.append(t / k)
    return math.fsum(terms)


def _i0_ref(x, shift=0):
    """sum (x**2/4)**k / (k! (k + shift)!) (x/2 times it for I1)."""
    t, terms = 1.0 / math.factorial(shift), []
    for k in range(200):
        terms.append(t)
        t *= (x * x / 4) / ((k + 1) * (k + 1 + shift))
    return math.fsum(terms)


def _i1_ref(x):
    return x / 2 * _i0_ref(x, 1)


def _expn_ref(n, x):
    """E_n(x): below 1 from E_1's power series by E_{k+1} = (exp(-x) - x
    E_k) / k; above, exp(-x) / x int_0^inf exp(-s) (1 + s/x)**-n ds, and
    for n >= 100 exp(-x) / (n + x) int_0^inf exp(-s) g(s) ds with g near 1
    (Gauss-Laguerre)."""
    if x < 1:
        e = -EULER - math.log(x) - _e1_series(x, -1)
        for k in range(1, n):
            e = (math.exp(-x) - x * e) / k
        return e
    if n >= 100:
        m = n + x
        g = np.exp(LAG_T - n * np.log1p(LAG_T / m) - x * LAG_T / m)
        return math.exp(-x) / m * float(np.sum(LAG_W * g))
    return math.exp(-x) / x * float(np.sum(LAG_W * (1 + LAG_T / x) ** -n))


def _ei_ref(x):
    return EULER + math.log(x) + _e1_series(x, 1)


def _hyp1f1_ref(a, b, x):
    t, s = 1.0, 1.0
    for k in range(400):
        t *= (a + k) / (b + k) * x / (k + 1)
        s += t
    return s


def _log_ndtr_ref(x):
    if x > 5:
        return math.log1p(-0.5 * math.erfc(x / math.sqrt(2)))
    if x > -37:
        return math.log(0.5 * math.erfc(-x / math.sqrt(2)))
    s = sum((-1) ** n * math.prod(range(2 * n - 1, 0, -2)) / x ** (2 * n) for n in range(12))
    return -0.5 * x * x - math.log(-x) - 0.5 * math.log(2 * math.pi) + math.log(s)


def _close(got, want, rtol, atol=0.0, what=""):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    ok = np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    bad = np.flatnonzero(~ok)
    assert ok.all(), (what, [(i, got.ravel()[i], want.ravel()[i]) for i in bad[:4]])


# ---- special: the incomplete gamma and beta functions ------------------------------------

GA = np.array([[0.5, 1.0, 2.0, 3.0, 7.0, 0.3], [1.5, 2.5, 4.0, 10.0, 30.0, 0.7],
               [5.0, 5.5, 0.1, 2.0, 20.0, 100.0], [3.7, 1.0, 12.0, 0.5, 6.0, 40.0],
               [2.0, 3.5, 8.0, 1.0, 15.0, 60.0], [0.9, 4.0, 2.5, 9.0, 1.0, 25.0],
               [6.0, 0.5, 3.0, 50.0, 2.0, 1.2], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]])
GX = np.array([[0.2, 1.0, 3.0, 2.5, 9.0, 4.0], [0.5, 7.0, 0.1, 12.0, 25.0, 2.0],
               [4.5, 5.0, 0.05, 30.0, 18.0, 120.0], [3.0, 0.0, 8.0, 6.0, 1.5, 35.0],
               [2.0, 0.7, 9.5, 40.0, 15.0, 55.0], [0.3, 11.0, 2.4, 3.0, 0.01, 28.0],
               [6.5, 2.2, 1.0, 45.0, 60.0, 1.0], [1.0, 1.5, 2.5, 3.5, 4.5, 20.0]])


def test_gammainc_gammaincc(c, mesh):
    """P and Q against closed forms and integrals (a from 0.1 to 100, both
    of XLA's branches), in a jit on P('i', 'j')-sharded a and x and at
    once, float64 and float32; P + Q = 1; the upper tail of Q where 1 - P
    is 0; JAX's edge values."""
    want_p = np.vectorize(_gammainc_ref)(GA, GX)
    want_q = np.vectorize(_gammaincc_ref)(GA, GX)
    f = shmap.jit(lambda a, x: (sp.gammainc(a, x), sp.gammaincc(a, x)))
    for dt, rtol in ((np.float64, 1e-12), (np.float32, 2e-5)):
        a = _put(c, mesh, GA.astype(dt), P("i", "j"))
        x = _put(c, mesh, GX.astype(dt), P("i", "j"))
        p, q = f(a, x)
        assert p.dtype == dt and q.dtype == dt
        _close(p, want_p, rtol, 10 * np.finfo(dt).eps, "gammainc")
        _close(q, want_q, rtol, 10 * np.finfo(dt).eps, "gammaincc")
        _close(np.asarray(p) + np.asarray(q), np.ones_like(GA), 0, 20 * np.finfo(dt).eps)
    once = sp.gammainc(_put(c, mesh, GA), _put(c, mesh, GX))
    _close(once, want_p, 1e-12, 1e-15, "gammainc at once")
    tail = np.asarray(sp.gammaincc(_put(c, mesh, np.array([2.0, 3.0])), _put(
        c, mesh, np.array([50.0, 80.0]))))
    _close(tail, [51 * math.exp(-50), (1 + 80 + 3200) * math.exp(-80)], 1e-12)
    edge = sp.gammainc(_put(c, mesh, np.array([2.0, 2.0, -1.0, 2.0, 0.0, np.inf, np.nan])),
                       _put(c, mesh, np.array([0.0, np.inf, 1.0, -1.0, 0.0, 3.0, 1.0])))
    assert np.array_equal(np.asarray(edge), [0, 1, np.nan, np.nan, np.nan, 0, np.nan],
                          equal_nan=True)
    edge_q = sp.gammaincc(_put(c, mesh, np.array([2.0, 0.0, np.inf])),
                          _put(c, mesh, np.array([np.inf, 3.0, 3.0])))
    assert np.array_equal(np.asarray(edge_q), [0, 0, 1])
    sm = shmap.shard_map(lambda a, x: (sp.gammainc(a, x), sp.gammaincc(a, x)), mesh=mesh,
                         in_specs=(P(), P("i", "j")), out_specs=(P("i", "j"), P("i", "j")))
    p, q = sm(_put(c, mesh, np.array(2.5)), _put(c, mesh, GX, P("i", "j")))  # loops per device
    _close(p, np.vectorize(_gammainc_ref)(2.5, GX), 1e-12, 1e-15, "shard_map")
    _close(q, 1 - np.asarray(p), 0, 4e-15)
    vm = shmap.vmap(lambda a, x: sp.gammainc(a, x))(_put(c, mesh, GA[:, :2]), _put(c, mesh,
                                                                                 GX[:, :2]))
    _close(vm, want_p[:, :2], 1e-12, 1e-15, "vmap")
    ints = sp.gammainc(_put(c, mesh, np.array([1, 2], np.int32)), _put(c, mesh, np.array([1, 2],
                                                                                  np.int32)))
    assert ints.dtype == np.float32
    _close(ints, [1 - math.exp(-1), 1 - 3 * math.exp(-2)], 1e-6)


def test_gammainc_grads(c, mesh):
    """JAX's derivative rules: d/dx P = x**(a-1) exp(-x) / Gamma(a) (and -
    that for Q), d/da by XLA's igamma_grad_a loop against a central
    difference; through gamma.cdf and chi2.sf in a jit on sharded values."""
    a = np.array([0.5, 1.5, 2.5, 4.0, 9.0, 3.0, 0.8, 20.0])
    x = np.array([0.3, 2.0, 1.5, 6.0, 8.0, 0.5, 4.0, 25.0])
    av, xv = _put(c, mesh, a, P("i")), _put(c, mesh, x, P("i"))
    dens = np.exp(-x + (a - 1) * np.log(x) - np.vectorize(math.lgamma)(a))
    gx = shmap.jit(shmap.grad(lambda x, a: jnp.sum(sp.gammainc(a, x))))(xv, av)
    _close(gx, dens, 1e-12)
    gq = shmap.grad(lambda x: jnp.sum(sp.gammaincc(av, x)))(xv)
    _close(gq, -dens, 1e-12)
    h = 1e-6
    num = (np.vectorize(_gammainc_ref)(a + h, x) - np.vectorize(_gammainc_ref)(a - h, x)) / (2 * h)
    ga = shmap.grad(lambda a: jnp.sum(sp.gammainc(a, xv)))(av)
    _close(ga, num, 1e-5, 1e-8)
    gqa = shmap.grad(lambda a: jnp.sum(sp.gammaincc(a, xv)))(av)
    _close(gqa, -num, 1e-5, 1e-8)
    gc = shmap.jit(shmap.grad(lambda x: jnp.sum(st.gamma.cdf(x, 2.5, 0.0, 2.0))))(xv)
    _close(gc, np.exp(1.5 * np.log(x / 2) - x / 2 - math.lgamma(2.5)) / 2, 1e-12)
    gs = shmap.grad(lambda x: jnp.sum(st.chi2.sf(x, 3.0)))(xv)
    _close(gs, -np.exp(0.5 * np.log(x / 2) - x / 2 - math.lgamma(1.5)) / 2, 1e-12)


def test_betainc(c, mesh):
    """I_x(a, b) against the binomial sum and integrals, both sides of the
    symmetry switch, float64 and float32, in a jit on sharded values and
    at once; the edges; d/dx (JAX's rule); NaN for d/da (JAX has none)."""
    a = np.array([1.0, 2.0, 3.0, 0.5, 2.5, 10.0, 1.5, 5.0, 0.7, 30.0, 2.0, 4.0])
    b = np.array([1.0, 3.0, 5.0, 0.5, 1.5, 2.0, 7.0, 5.0, 3.0, 20.0, 0.6, 9.0])
    x = np.array([0.3, 0.1, 0.6, 0.25, 0.9, 0.8, 0.05, 0.5, 0.4, 0.55, 0.7, 0.35])
    want = np.vectorize(_betainc_ref)(a, b, x)
    want[3] = 2 / math.pi * math.asin(math.sqrt(0.25))  # I_x(1/2, 1/2)
    f = shmap.jit(lambda a, b, x: sp.betainc(a, b, x))
    for dt, rtol in ((np.float64, 1e-10), (np.float32, 5e-5)):
        args = [_put(c, mesh, v.astype(dt), P("i")) for v in (a, b, x)]
        got = f(*args)
        assert got.dtype == dt
        _close(got, want, rtol, 20 * np.finfo(dt).eps, "betainc")
    _close(sp.betainc(_put(c, mesh, a), _put(c, mesh, b), _put(c, mesh, x)), want, 1e-10)
    sm = shmap.shard_map(lambda x: sp.betainc(2.0, 3.0, x), mesh=mesh, in_specs=(P("i"),),
                         out_specs=P("i"))
    _close(sm(_put(c, mesh, x[:8], P("i"))), [_betainc_ref(2.0, 3.0, v) for v in x[:8]], 1e-12)
    flip = sp.betainc(_put(c, mesh, b), _put(c, mesh, a), _put(c, mesh, 1 - x))
    _close(np.asarray(flip), 1 - want, 1e-10, 1e-13)
    edge = sp.betainc(_put(c, mesh, np.array([2.0, 2.0, 2.0, -1.0, 2.0, 0.0])),
                      _put(c, mesh, np.array([3.0, 3.0, 3.0, 1.0, 3.0, 0.0])),
                      _put(c, mesh, np.array([0.0, 1.0, 1.5, 0.5, np.nan, 0.5])))
    assert np.array_equal(np.asarray(edge), [0, 1, np.nan, np.nan, np.nan, np.nan],
                          equal_nan=True)
    av, bv, xv = (_put(c, mesh, v, P("i")) for v in (a, b, x))
    g = shmap.grad(lambda x: jnp.sum(sp.betainc(av, bv, x)))(xv)
    lb = np.vectorize(math.lgamma)
    _close(g, np.exp((a - 1) * np.log(x) + (b - 1) * np.log1p(-x) - (lb(a) + lb(b) - lb(a + b))),
           1e-12)
    assert np.isnan(np.asarray(shmap.grad(lambda a: jnp.sum(sp.betainc(a, bv, xv)))(av))).all()


# ---- special: zeta, polygamma, Bessel, exponential integrals, ... ------------------------


def test_zeta_polygamma(c, mesh):
    """zeta against known values and a summed reference, XLA's poles and
    NaNs; polygamma against trigamma(1) = pi**2/6, -2 zeta(3), its
    recurrence and digamma; the grad of polygamma(1, .) is polygamma(2,
    .); float32 too; JAX's sentences."""
    s = np.array([2.0, 4.0, 3.0, 2.0, 1.5, 7.5, 2.2, 30.0])
    q = np.array([1.0, 1.0, 1.0, 0.5, 3.0, 0.2, 11.0, 2.0])
    known = [math.pi ** 2 / 6, math.pi ** 4 / 90, 1.2020569031595942, math.pi ** 2 / 2]
    want = np.array(known + [_zeta_ref(a, b) for a, b in zip(s[4:], q[4:])])
    f = shmap.jit(lambda s, q: sp.zeta(s, q))
    _close(f(_put(c, mesh, s, P("i")), _put(c, mesh, q, P("i"))), want, 1e-13)
    z32 = f(_put(c, mesh, s.astype(np.float32), P("i")), _put(c, mesh, q.astype(np.float32),
                                                          P("i")))
    assert z32.dtype == np.float32
    _close(z32, want, 3e-6)
    edge = sp.zeta(_put(c, mesh, np.array([1.0, 0.5, 2.0, 3.0, 2.5, 2.0])),
                   _put(c, mesh, np.array([2.0, 2.0, -2.0, -2.0, -1.5, 0.0])))
    assert np.array_equal(np.asarray(edge), [np.inf, np.nan, np.inf, np.nan, np.nan, np.inf],
                          equal_nan=True)
    with pytest.raises(NotImplementedError, match="Riemann zeta function not implemented"):
        sp.zeta(_put(c, mesh, s))

    n = np.array([0, 1, 2, 1, 3, 2, 1, 4], np.int32)
    x = np.array([1.0, 1.0, 1.0, 0.3, 2.0, 5.5, 20.0, 0.7])
    got = np.asarray(shmap.jit(lambda n, x: sp.polygamma(n, x))(_put(c, mesh, n, P("i")),
                                                               _put(c, mesh, x, P("i"))))
    want = [-EULER, math.pi ** 2 / 6, -2 * 1.2020569031595942]
    _close(got[:3], want, 1e-12)
    for i in range(3, 8):
        k = int(n[i])
        ref = (-1) ** (k + 1) * math.factorial(k) * _zeta_ref(k + 1.0, x[i])
        _close(got[i], ref, 1e-11, 0, f"polygamma({k}, {x[i]})")
    up = np.asarray(sp.polygamma(_put(c, mesh, n), _put(c, mesh, x + 1)))
    _close(up - got, (-1.0) ** n * np.vectorize(math.factorial)(n) / x ** (n + 1), 1e-9, 1e-12)
    xv = _put(c, mesh, x, P("i"))
    g = shmap.grad(lambda x: jnp.sum(sp.polygamma(1, x)))(xv)
    _close(g, sp.polygamma(2, xv), 1e-12)
    assert np.isnan(np.asarray(sp.polygamma(_put(c, mesh, np.array([-1, 2])),
                                            _put(c, mesh, np.array([1.0, -2.0]))))).all()
    with pytest.raises(ValueError, match="Argument `n` to polygamma must be of integer type. "
                                         "Got dtype float32."):
        sp.polygamma(1.0, xv)


def test_bessel_and_exponential_integrals(c, mesh):
    """i0, i1 (and the scaled e) against their power series, signs and
    integer arguments; exp1, expn against the power series and
    Gauss-Laguerre integrals (all of Cephes' branches, n >= 5000 too) and
    the recurrence, expi against its series; JAX's special values; the
    grads -E_{n-1} and exp(x) / x."""
    x = np.array([0.0, 0.5, 1.0, -2.0, 5.0, -8.5, 12.0, 30.0])
    i0, i1 = np.vectorize(_i0_ref)(x), np.vectorize(_i1_ref)(x)
    xv = _put(c, mesh, x, P("i"))
    out = shmap.jit(lambda x: (sp.i0(x), sp.i0e(x), sp.i1(x), sp.i1e(x)))(xv)
    for got, want in zip(out, (i0, i0 * np.exp(-abs(x)), i1, i1 * np.exp(-abs(x)))):
        _close(got, want, 1e-13)
    i32 = sp.i0(_put(c, mesh, np.array([0, 1, 3], np.int32)))
    assert i32.dtype == np.float32
    _close(i32, [1.0, _i0_ref(1.0), _i0_ref(3.0)], 1e-6)

    xs = np.array([0.01, 0.3, 0.9, 1.0, 1.7, 4.0, 10.0, 40.0])
    e1 = np.array([_expn_ref(1, v) for v in xs])
    _close(shmap.jit(sp.exp1)(_put(c, mesh, xs, P("i"))), e1, 1e-12)
    ns = np.array([0.0, 2.0, 3.0, 5.0, 1.0, 10.0, 2.0, 6000.0])
    xn = np.array([0.5, 0.2, 0.9, 2.0, 7.0, 3.5, 25.0, 1.5])
    want = [math.exp(-0.5) / 0.5] + [_expn_ref(int(n), v) for n, v in zip(ns[1:], xn[1:])]
    got = shmap.jit(sp.expn)(_put(c, mesh, ns, P("i")), _put(c, mesh, xn, P("i")))
    _close(got, want, 1e-10, 0, "expn")
    nr = np.array([1.0, 2.0, 3.0, 4.0])
    xr = np.array([0.4, 0.8, 1.6, 3.0])
    sm = shmap.shard_map(lambda x: sp.expn(2, x), mesh=mesh, in_specs=(P("i"),), out_specs=P("i"))
    _close(sm(_put(c, mesh, xn, P("i"))), [_expn_ref(2, v) for v in xn], 1e-10, 0, "shard_map")
    rec = (np.exp(-xr) - xr * np.asarray(sp.expn(_put(c, mesh, nr), _put(c, mesh, xr)))) / nr
    _close(sp.expn(_put(c, mesh, nr + 1), _put(c, mesh, xr)), rec, 1e-12)
    special_vals = sp.expn(_put(c, mesh, np.array([-1.0, 1.0, 3.0, 1.0, 0.0])),
                           _put(c, mesh, np.array([0.5, 0.0, 0.0, -1.0, 0.0])))
    # E_3(0): JAX's 1 / n (Cephes and scipy: 1 / (n - 1))
    assert np.array_equal(np.asarray(special_vals), [np.nan, np.inf, 1 / 3, np.nan, np.inf],
                          equal_nan=True)
    xe = np.array([0.1, 1.0, 2.5, 6.0, 15.0, 50.0, 90.0, -1.0, -3.0, -20.0])
    want = [_ei_ref(v) for v in xe[:7]] + [-_expn_ref(1, -v) for v in xe[7:]]
    _close(sp.expi(_put(c, mesh, xe)), want, 1e-12, 0, "expi")
    e32 = sp.exp1(_put(c, mesh, xs.astype(np.float32)))
    assert e32.dtype == np.float32
    _close(e32, e1, 2e-6)
    xg = _put(c, mesh, xn[1:7], P())
    g = shmap.grad(lambda x: jnp.sum(sp.expn(3, x)))(xg)
    _close(g, -np.asarray(sp.expn(2, xg)), 1e-12)
    g = shmap.grad(lambda x: jnp.sum(sp.expi(x)))(xg)
    _close(g, np.exp(xn[1:7]) / xn[1:7], 1e-12)


def test_sici_owens_t_bessel_jn(c, mesh):
    """sici against integrals of sin(t)/t and (cos(t) - 1)/t (and the
    asymptotic form at 2e9); owens_t against its integral and T(0, a),
    T(h, 1), with its derivative rules; bessel_jn against Bessel's
    integrals of J_0 ... J_v, its (v + 1, *z.shape) result and JAX's
    static v."""
    x = np.array([0.0, 0.3, 2.0, 4.0, 5.5, 9.0, 30.0, -2.0])
    si, ci = shmap.jit(sp.sici)(_put(c, mesh, x, P("i")))
    wsi = [_quad(lambda t: np.sinc(t / np.pi), 0.0, v) for v in x]
    wci = [-np.inf] + [EULER + math.log(abs(v)) + _quad(lambda t: (np.cos(t) - 1) / t, 0.0, abs(v))
                       for v in x[1:]]
    _close(si, wsi, 1e-13, 1e-15, "Si")
    _close(ci, wci, 1e-12, 1e-15, "Ci")
    far = sp.sici(_put(c, mesh, np.array([2e9])))
    _close(far[0], [math.pi / 2 - math.cos(2e9) / 2e9], 1e-15)
    _close(far[1], [math.sin(2e9) / 2e9], 1e-6)
    g = shmap.grad(lambda x: jnp.sum(sp.sici(x)[0] * 2 + sp.sici(x)[1]))(
        _put(c, mesh, x[1:7], P()))
    _close(g, 2 * np.sin(x[1:7]) / x[1:7] + np.cos(x[1:7]) / x[1:7], 1e-12)

    h = np.array([0.0, 0.5, 1.0, 2.0, -1.0, 0.3, 1.5, 0.1])
    a = np.array([0.5, 1.0, 2.0, 0.3, 0.7, -3.0, 0.9, 5.0])
    want = [_quad(lambda t: np.exp(-q * q * (1 + t * t) / 2) / (1 + t * t), 0.0, b) / (2 * math.pi)
            for q, b in zip(h, a)]
    got = shmap.jit(sp.owens_t)(_put(c, mesh, h, P("i")), _put(c, mesh, a, P("i")))
    _close(got, want, 2e-7, 1e-15, "owens_t")  # beyond |a| = 1 through erfc: 1.2e-7
    _close(np.asarray(got)[[0, 4, 6]], np.array(want)[[0, 4, 6]], 1e-13)  # the quadrature
    _close(got[0], math.atan(0.5) / (2 * math.pi), 1e-15)
    nd = 0.5 * math.erfc(-0.5 / math.sqrt(2))
    _close(got[1], nd * (1 - nd) / 2, 2e-7)
    hv, av = _put(c, mesh, h, P("i")), _put(c, mesh, a, P("i"))
    gh = shmap.grad(lambda h: jnp.sum(sp.owens_t(h, av)))(hv)
    erf = np.vectorize(math.erf)
    _close(gh, -np.exp(-h * h / 2) * erf(a * h / math.sqrt(2)) / (2 * math.sqrt(2 * math.pi)),
           1e-12, 1e-15)
    ga = shmap.grad(lambda a: jnp.sum(sp.owens_t(hv, a)))(av)
    _close(ga, np.exp(-(a * a + 1) * h * h / 2) / (2 * math.pi * (a * a + 1)), 1e-12)

    z = np.array([[0.5, 1.0, 3.0, 7.5], [10.0, 0.1, 2.0, 15.0]])
    jn = sp.bessel_jn(_put(c, mesh, z, P(None, "j")), v=4)
    assert jn.shape == (5, 2, 4)

    def j_ref(n, t):  # Bessel's integral
        return _quad(lambda u: np.cos(n * u - t * np.sin(u)), 0.0, math.pi, 20) / math.pi
    want = np.array([[[j_ref(n, t) for t in row] for row in z] for n in range(5)])
    _close(jn, want, 1e-10, 1e-12, "bessel_jn")
    assert sp.bessel_jn(_put(c, mesh, z), v=0, n_iter=60).shape == (1, 2, 4)
    with pytest.raises(TypeError, match="Abstract tracer value"):
        shmap.jit(lambda z, v: sp.bessel_jn(z, v=v))(_put(c, mesh, z), _put(c, mesh,
                                                                             np.array(2)))


def test_spence_hyp1f1_bernoulli(c, mesh):
    """spence against integrals of log(t) / (1 - t) and its known values
    (NaN below 0, JAX's TypeError for integers); hyp1f1 against its series,
    closed forms (also past |x| = 100, the asymptotic branch) and its
    special cases, with its derivative series against central
    differences; bernoulli against the exact B_n (float32)."""
    x = np.array([0.0, 0.05, 0.5, 1.0, 1.3, 1.8, 2.0, 3.0, 10.0, -1.0])
    want = [math.pi ** 2 / 6] + [_quad(lambda t: np.log(t) / (1 - t), 1.0, v) for v in x[1:3]]
    want += [0.0] + [_quad(lambda t: np.log(t) / (1 - t), 1.0, v) for v in x[4:9]] + [np.nan]
    got = shmap.jit(sp.spence)(_put(c, mesh, x))
    _close(got, want, 1e-12, 1e-15, "spence")
    _close(got[2], math.pi ** 2 / 12 - math.log(2) ** 2 / 2, 1e-14)
    _close(got[6], -math.pi ** 2 / 12, 1e-14)
    with pytest.raises(TypeError, match="x.dtype=int32 is not supported, see docstring"):
        sp.spence(_put(c, mesh, np.array([1, 2], np.int32)))

    a = np.array([1.0, 2.0, 0.5, 1.5, 3.0, 1.0, 2.0, 0.7])
    b = np.array([2.0, 3.0, 1.5, 2.5, 4.5, 2.0, 3.0, 1.7])
    z = np.array([1.0, -2.0, -4.0, 5.0, 12.0, 150.0, 120.0, 0.3])
    want = [_hyp1f1_ref(*v) for v in zip(a[:5], b[:5], z[:5])]
    want += [(math.exp(150.0) - 1) / 150.0, 2 * (math.exp(120.0) * 119.0 + 1) / 120.0 ** 2,
             _hyp1f1_ref(0.7, 1.7, 0.3)]
    got = shmap.jit(sp.hyp1f1)(*[_put(c, mesh, v, P("i")) for v in (a, b, z)])
    _close(got, want, 1e-12, 0, "hyp1f1")
    _close(got[2], math.sqrt(math.pi) * math.erf(2.0) / 4, 1e-13)  # 1F1(1/2; 3/2; -x**2)
    cases = sp.hyp1f1(_put(c, mesh, np.array([0.0, 2.5, 3.0, 0.0])),
                      _put(c, mesh, np.array([1.0, 2.5, 0.0, 0.0])),
                      _put(c, mesh, np.array([3.0, 1.5, 1.0, 2.0])))
    assert np.allclose(np.asarray(cases), [1.0, math.exp(1.5), np.inf, 1.0], rtol=1e-15)
    h = 1e-6
    av, bv, zv = (_put(c, mesh, v[:5], P()) for v in (a, b, z))
    ref = np.vectorize(_hyp1f1_ref)
    for k, arg in enumerate((av, bv, zv)):
        g = shmap.grad(lambda v: jnp.sum(sp.hyp1f1(*[v if i == k else w for i, w in
                                                      enumerate((av, bv, zv))])))(arg)
        step = [np.zeros(5)] * 3
        step[k] = np.full(5, h)
        num = (ref(a[:5] + step[0], b[:5] + step[1], z[:5] + step[2]) -
               ref(a[:5] - step[0], b[:5] - step[1], z[:5] - step[2])) / (2 * h)
        _close(g, num, 1e-6, 1e-8, f"hyp1f1 grad {k}")

    bn = np.asarray(sp.bernoulli(12))
    exact = [1, -1 / 2, 1 / 6, 0, -1 / 30, 0, 1 / 42, 0, -1 / 30, 0, 5 / 66, 0, -691 / 2730]
    assert bn.dtype == np.float32 and bn.shape == (13,)
    _close(bn, exact, 3e-6)
    assert np.array_equal(np.asarray(sp.bernoulli(1)), [1.0, -0.5])
    with pytest.raises(ValueError, match="n must be a non-negative integer."):
        sp.bernoulli(-1)


def test_smaller_functions(c, mesh):
    """beta, gammasgn, gamma at its poles (NaN, as JAX's), loggamma,
    factorial, comb, poch, multigammaln, rel_entr, kl_div, xlogy's NaN,
    betaln for large arguments, boxcox, erfcx, dawsn, log_ndtr's tails, in
    one jit on sharded values, against math."""
    u = np.array([0.5, 2.5, 3.0, -0.5, -1.5, 4.0, 7.0, 1.0])
    v = np.array([1.5, 0.5, 4.0, 2.0, 3.0, 2.5, 0.25, 6.0])

    def fns(u, v):
        return (sp.beta(u, v), sp.gammasgn(u), sp.gamma(u), sp.loggamma(u), sp.factorial(v),
                sp.comb(u * 2, v), sp.comb(v, u, repetition=True), sp.poch(u, v),
                sp.multigammaln(v + 3, 3), sp.rel_entr(u, v), sp.kl_div(u, v),
                sp.boxcox(v, u), sp.boxcox1p(v, u), sp.erfcx(u * 3), sp.dawsn(u * 2),
                sp.log_ndtr(u * 20 - 30))
    out = [np.asarray(o) for o in shmap.jit(fns)(_put(c, mesh, u, P("i")),
                                                 _put(c, mesh, v, P("i")))]
    g = np.vectorize(math.gamma)
    lg = np.vectorize(math.lgamma)
    _close(out[0], g(u) * g(v) / g(u + v), 1e-12)
    _close(out[1], np.sign(g(u)), 0)
    _close(out[2], g(u), 1e-12)
    _close(out[3], np.where(u > 0, lg(u), np.nan), 1e-12, 1e-15)
    _close(out[4], g(v + 1), 1e-12)
    comb = [math.exp(math.lgamma(2 * p + 1) - math.lgamma(q + 1) - math.lgamma(2 * p - q + 1))
            if 0 <= q <= 2 * p else 0.0 for p, q in zip(u, v)]
    _close(out[5], comb, 1e-12)
    rep = [1.0 if p == 0 else math.exp(math.lgamma(q + p) - math.lgamma(p + 1) -
                                       math.lgamma(q)) if 0 <= p <= q + p - 1 else 0.0
           for p, q in zip(u, v)]  # comb(v + u - 1, u)
    _close(out[6], rep, 1e-11)
    _close(out[7], g(u + v) / g(u), 1e-11)
    _close(out[8], 3 * 2 / 4 * math.log(math.pi) + lg(v + 3) + lg(v + 2.5) + lg(v + 2), 1e-12)
    re = np.where(u > 0, u * np.log(np.abs(u) / v), np.inf)
    _close(out[9], re, 1e-12)
    _close(out[10], re - u + v, 1e-12)
    _close(out[11], (v ** u - 1) / u, 1e-12)
    _close(out[12], ((1 + v) ** u - 1) / u, 1e-12)
    _close(out[13], [math.exp(t * t) * math.erfc(t) for t in u * 3], 2e-7)
    daw = [math.exp(-t * t) * _quad(lambda s: np.exp(s * s), 0.0, t) for t in u * 2]
    _close(out[14], daw, 1e-13)
    _close(out[15], [_log_ndtr_ref(t) for t in u * 20 - 30], 2e-7)
    big = np.array([30.0, 1e3])
    asym = [1 / (t * math.sqrt(math.pi)) * math.fsum(
        (-1) ** k * math.prod(range(2 * k - 1, 0, -2)) / (2 * t * t) ** k for k in range(12))
        for t in big]
    _close(sp.erfcx(_put(c, mesh, big)), asym, 1e-14)  # past exp(x**2)'s overflow
    _close(sp.erfcx(_put(c, mesh, big.astype(np.float32))), asym, 1e-6)
    assert np.isnan(np.asarray(sp.gamma(_put(c, mesh, np.array([-2.0, 0.0 * -1])))))[0]
    assert np.asarray(sp.gamma(_put(c, mesh, np.array([-0.0]))))[0] == -np.inf
    lb = sp.betaln(_put(c, mesh, np.array([1e3, 2.0, 0.5])), _put(c, mesh, np.array([1e6, 8.0,
                                                                                      20.0])))
    # JAX's algdiv (cdflib's with x = h / (1 + h)): within 1.3e-6 of the exact value
    _close(lb, [math.lgamma(1e3) + math.lgamma(1e6) - math.lgamma(1e6 + 1e3),
                -math.log(72), math.lgamma(0.5) + math.lgamma(20) - math.lgamma(20.5)], 0, 2e-6)
    nan_y = sp.xlogy(_put(c, mesh, np.array([0.0, 0.0, 2.0])),
                     _put(c, mesh, np.array([np.nan, 0.0, 3.0])))
    assert np.array_equal(np.asarray(nan_y), [np.nan, 0.0, 2 * math.log(3)], equal_nan=True)
    ln32 = sp.log_ndtr(_put(c, mesh, np.array([-12.0, -3.0, 6.0], np.float32)))
    assert ln32.dtype == np.float32
    _close(ln32, [_log_ndtr_ref(-12.0), _log_ndtr_ref(-3.0), _log_ndtr_ref(6.0)], 1e-5)
    tails = _put(c, mesh, np.array([-50.0, -25.0]))
    lead = [-0.5 * t * t - math.log(-t) - 0.5 * math.log(2 * math.pi) for t in (-50.0, -25.0)]
    _close(sp.log_ndtr(tails, series_order=0), lead, 1e-14)  # the series' first term only
    _close(sp.log_ndtr(tails), [_log_ndtr_ref(-50.0), _log_ndtr_ref(-25.0)], 1e-11)  # 105 / x**8
    with pytest.raises(ValueError, match="series_order must be <= 30."):
        sp.log_ndtr(_put(c, mesh, u), series_order=31)
    with pytest.raises(NotImplementedError, match="factorial with exact=True"):
        sp.factorial(_put(c, mesh, u), exact=True)


def test_softmax_and_grads(c, mesh):
    """softmax / log_softmax over all axes by default and over given ones
    (numpy), in a jit on a sharded matrix; the grad of a weighted sum of
    softmax against s * (w - s.w), of log_softmax's against w - s sum w;
    gammaln-based logpdfs' grads (gamma in a, beta in x, t in df) against
    their formulas and central differences."""
    x = np.random.default_rng(3).standard_normal((8, 6)) * 3
    xv = _put(c, mesh, x, P("i", "j"))
    out = shmap.jit(lambda x: (sp.softmax(x), sp.softmax(x, axis=1), sp.log_softmax(x, axis=0),
                               sp.log_softmax(x, axis=(0, 1))))(xv)
    e = np.exp(x - x.max())
    _close(out[0], e / e.sum(), 1e-13)
    _close(out[1], np.exp(x) / np.exp(x).sum(1, keepdims=True), 1e-13)
    _close(out[2], x - np.log(np.exp(x).sum(0, keepdims=True)), 1e-13)
    _close(out[3], x - np.log(np.exp(x).sum()), 1e-13)
    w = np.arange(48.0).reshape(8, 6) / 10
    wv = _put(c, mesh, w, P("i", "j"))  # (a numpy w would be a float32 constant, as in JAX)
    s = np.exp(x) / np.exp(x).sum(1, keepdims=True)
    g = shmap.jit(shmap.grad(lambda x: jnp.sum(sp.softmax(x, axis=1) * wv)))(xv)
    _close(g, s * (w - (s * w).sum(1, keepdims=True)), 1e-12, 1e-14)
    g = shmap.grad(lambda x: jnp.sum(sp.log_softmax(x, axis=1) * wv))(xv)
    _close(g, w - s * w.sum(1, keepdims=True), 1e-12, 1e-14)

    a = np.array([0.7, 1.5, 2.5, 4.0, 9.0, 3.0, 1.2, 20.0])
    xs = np.array([0.3, 2.0, 1.5, 6.0, 8.0, 0.5, 4.0, 25.0])
    av, xsv = _put(c, mesh, a, P("i")), _put(c, mesh, xs, P("i"))
    ga = shmap.jit(shmap.grad(lambda a: jnp.sum(st.gamma.logpdf(xsv, a, 0.0, 2.0))))(av)
    _close(ga, np.log(xs / 2) - np.asarray(sp.digamma(av)), 1e-10)
    y = xs / 30
    gb = shmap.grad(lambda y: jnp.sum(st.beta.logpdf(y, 2.5, 4.0)))(_put(c, mesh, y, P("i")))
    _close(gb, 1.5 / y - 3.0 / (1 - y), 1e-10)
    h = 1e-6

    def t_ref(df):
        return np.array([math.lgamma((d + 1) / 2) - math.lgamma(d / 2) - 0.5 * math.log(d * math.pi)
                         - (d + 1) / 2 * math.log1p(v * v / d) for d, v in zip(df, xs)])
    gt = shmap.grad(lambda d: jnp.sum(st.t.logpdf(xsv, d)))(av)
    _close(gt, (t_ref(a + h) - t_ref(a - h)) / (2 * h), 1e-6)


# ---- stats: continuous distributions -----------------------------------------------------


def _pdf_cdf(pdf, lo, x):
    """int_lo^x pdf, per element of x."""
    return np.array([_quad(pdf, lo, v) for v in x])


def test_beta_gamma_chi2_t(c, mesh):
    """beta, gamma, chi2, t: logpdf against their formulas, cdf and sf
    against integrals of the pdf and the closed forms, logcdf / logsf, with
    loc and scale, in a jit on sharded x and at once; integer arguments
    give float32, -inf off the support, NaN for bad parameters."""
    x = np.linspace(0.05, 0.95, 8) * 4 + 1  # in (1.2, 4.8): beta on loc=1, scale=4
    xv = _put(c, mesh, x, P("i"))
    a, b = 2.5, 1.5
    y = (x - 1) / 4
    lbeta = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    bpdf = np.exp((a - 1) * np.log(y) + (b - 1) * np.log1p(-y) - lbeta) / 4
    bcdf = np.array([_betainc_ref(a, b, v) for v in y])

    def fbeta(x):
        return (st.beta.logpdf(x, a, b, 1.0, 4.0), st.beta.pdf(x, a, b, 1.0, 4.0),
                st.beta.cdf(x, a, b, 1.0, 4.0), st.beta.logcdf(x, a, b, 1.0, 4.0),
                st.beta.sf(x, a, b, 1.0, 4.0), st.beta.logsf(x, a, b, 1.0, 4.0))
    out = shmap.jit(fbeta)(xv)
    _close(out[0], np.log(bpdf), 1e-12)
    _close(out[1], bpdf, 1e-12)
    _close(out[2], bcdf, 1e-10)
    _close(out[2], _pdf_cdf(lambda t: np.exp((a - 1) * np.log((t - 1) / 4) + (b - 1) * np.log1p(
        -(t - 1) / 4) - lbeta) / 4, 1.0, x), 1e-7)
    _close(out[3], np.log(bcdf), 1e-10)
    _close(out[4], 1 - bcdf, 1e-10)
    _close(out[5], np.log1p(-bcdf), 1e-10)
    once = st.beta.logpdf(_put(c, mesh, np.array([0.5, 1.5, -0.1])), 2.0, 3.0)
    _close(once, [math.log(12 * 0.5 * 0.25), -np.inf, -np.inf], 1e-12)
    assert np.isnan(np.asarray(st.beta.logpdf(_put(c, mesh, np.array([0.5])), -1.0, 3.0))).all()

    k = 3.5
    gpdf = np.exp((k - 1) * np.log(x / 2) - x / 2 - math.lgamma(k)) / 2
    gcdf = np.array([_gammainc_ref(k, v / 2) for v in x])
    out = shmap.jit(lambda x: (st.gamma.logpdf(x, k, 0.0, 2.0), st.gamma.cdf(x, k, 0.0, 2.0),
                               st.gamma.sf(x, k, 0.0, 2.0), st.gamma.logcdf(x, k, 0.0, 2.0),
                               st.gamma.logsf(x, k, 0.0, 2.0), st.gamma.pdf(x, k, 0.0, 2.0)))(xv)
    _close(out[0], np.log(gpdf), 1e-12)
    _close(out[1], gcdf, 1e-12)
    _close(out[1], _pdf_cdf(lambda t: np.exp((k - 1) * np.log(t / 2) - t / 2 - math.lgamma(k)) / 2,
                            0.0, x), 1e-9)
    _close(out[2], 1 - gcdf, 1e-12)
    _close(out[3], np.log(gcdf), 1e-12)
    _close(out[4], np.log1p(-gcdf), 1e-12)
    _close(out[5], gpdf, 1e-12)
    below = st.gamma.logpdf(_put(c, mesh, np.array([-1.0, 0.5])), 2.0, 0.0)
    _close(below, [-np.inf, math.log(0.5) - 0.5], 1e-12)
    assert np.asarray(st.gamma.sf(_put(c, mesh, np.array([-1.0])), 2.0))[0] == 1.0

    df = 5.0
    cpdf = np.exp((df / 2 - 1) * np.log(x) - x / 2 - df / 2 * math.log(2) - math.lgamma(df / 2))
    ccdf = np.array([_gammainc_ref(df / 2, v / 2) for v in x])
    out = shmap.jit(lambda x: (st.chi2.logpdf(x, df), st.chi2.cdf(x, df), st.chi2.sf(x, df),
                               st.chi2.logcdf(x, df), st.chi2.logsf(x, df),
                               st.chi2.pdf(x, df)))(xv)
    _close(out[0], np.log(cpdf), 1e-12)
    _close(out[1], ccdf, 1e-12)
    _close(out[2], 1 - ccdf, 1e-12)
    _close(out[3], np.log(ccdf), 1e-12)
    _close(out[4], np.log1p(-ccdf), 1e-12)
    _close(out[5], cpdf, 1e-12)

    tx = np.linspace(-4, 4, 8)
    for d in (1.0, 3.0, 30.0):
        tp = np.exp(math.lgamma((d + 1) / 2) - math.lgamma(d / 2)) / math.sqrt(d * math.pi) / 2 * (
            1 + ((tx - 0.5) / 2) ** 2 / d) ** (-(d + 1) / 2)
        got = shmap.jit(lambda x: (st.t.logpdf(x, d, 0.5, 2.0), st.t.pdf(x, d, 0.5, 2.0)))(
            _put(c, mesh, tx, P("i")))
        _close(got[0], np.log(tp), 1e-12)
        _close(got[1], tp, 1e-12)
    ints = st.t.pdf(_put(c, mesh, np.array([0, 1], np.int32)), 1)
    assert ints.dtype == np.float32
    _close(ints, [1 / math.pi, 0.5 / math.pi], 1e-6)


def test_location_scale_families(c, mesh):
    """cauchy, laplace, logistic, uniform, expon, pareto, gumbel_r,
    gumbel_l, gennorm: every function against its closed form (cdfs also
    against integrals of the pdf), with loc and scale, float32 and float64,
    in a jit on sharded x; ppf inverts cdf; JAX's NaNs."""
    x = np.linspace(-3.0, 5.0, 8)
    q = np.linspace(0.05, 0.95, 8)
    loc, scale = 0.5, 1.5
    z = (x - loc) / scale

    def fns(x, q):
        return {
            "cauchy": [st.cauchy.logpdf(x, loc, scale), st.cauchy.pdf(x, loc, scale),
                       st.cauchy.cdf(x, loc, scale), st.cauchy.logcdf(x, loc, scale),
                       st.cauchy.sf(x, loc, scale), st.cauchy.logsf(x, loc, scale),
                       st.cauchy.ppf(q, loc, scale), st.cauchy.isf(q, loc, scale)],
            "laplace": [st.laplace.logpdf(x, loc, scale), st.laplace.pdf(x, loc, scale),
                        st.laplace.cdf(x, loc, scale)],
            "logistic": [st.logistic.logpdf(x, loc, scale), st.logistic.pdf(x, loc, scale),
                         st.logistic.cdf(x, loc, scale), st.logistic.sf(x, loc, scale),
                         st.logistic.ppf(q, loc, scale), st.logistic.isf(q, loc, scale)],
            "uniform": [st.uniform.logpdf(x, -1.0, 4.0), st.uniform.pdf(x, -1.0, 4.0),
                        st.uniform.cdf(x, -1.0, 4.0), st.uniform.ppf(q, -1.0, 4.0)],
            "expon": [st.expon.logpdf(x, loc, scale), st.expon.pdf(x, loc, scale),
                      st.expon.cdf(x, loc, scale), st.expon.logcdf(x, loc, scale),
                      st.expon.sf(x, loc, scale), st.expon.logsf(x, loc, scale),
                      st.expon.ppf(q, loc, scale)],
            "pareto": [st.pareto.logpdf(x, 2.5, -1.0, 1.5), st.pareto.pdf(x, 2.5, -1.0, 1.5),
                       st.pareto.cdf(x, 2.5, -1.0, 1.5), st.pareto.logcdf(x, 2.5, -1.0, 1.5),
                       st.pareto.sf(x, 2.5, -1.0, 1.5), st.pareto.logsf(x, 2.5, -1.0, 1.5),
                       st.pareto.ppf(q, 2.5, -1.0, 1.5)],
            "gumbel_r": [st.gumbel_r.logpdf(x, loc, scale), st.gumbel_r.pdf(x, loc, scale),
                         st.gumbel_r.cdf(x, loc, scale), st.gumbel_r.logcdf(x, loc, scale),
                         st.gumbel_r.sf(x, loc, scale), st.gumbel_r.logsf(x, loc, scale),
                         st.gumbel_r.ppf(q, loc, scale)],
            "gumbel_l": [st.gumbel_l.logpdf(x, loc, scale), st.gumbel_l.pdf(x, loc, scale),
                         st.gumbel_l.cdf(x, loc, scale), st.gumbel_l.logcdf(x, loc, scale),
                         st.gumbel_l.sf(x, loc, scale), st.gumbel_l.logsf(x, loc, scale),
                         st.gumbel_l.ppf(q, loc, scale)],
            "gennorm": [st.gennorm.logpdf(x, 1.5), st.gennorm.pdf(x, 1.5),
                        st.gennorm.cdf(x, 1.5)],
        }
    cau = 0.5 + np.arctan(z) / np.pi
    lap = np.where(z <= 0, 0.5 * np.exp(z), 1 - 0.5 * np.exp(-z))
    logi = 1 / (1 + np.exp(-z))
    uni = np.clip((x + 1) / 4, 0, 1)
    exc = np.where(x < loc, 0.0, 1 - np.exp(-z))
    pz = (x + 1) / 1.5
    par = np.where(pz < 1, 0.0, 1 - np.abs(pz) ** -2.5)
    gr = np.exp(-np.exp(-z))
    gl = -np.expm1(-np.exp(z))
    gpdf = lambda t: 1.5 / (2 * math.gamma(1 / 1.5)) * np.exp(-np.abs(t) ** 1.5)  # noqa: E731
    old = np.seterr(divide="ignore")  # the references' log(0) = -inf
    want = {
        "cauchy": [-np.log(np.pi * scale * (1 + z * z)), 1 / (np.pi * scale * (1 + z * z)), cau,
                   np.log(cau), 1 - cau, np.log1p(-cau), loc + scale * np.tan(np.pi * (q - 0.5)),
                   loc + scale * np.tan(np.pi * (0.5 - q))],
        "laplace": [-np.abs(z) - np.log(2 * scale), np.exp(-np.abs(z)) / (2 * scale), lap],
        "logistic": [-z - np.log(scale) - 2 * np.log1p(np.exp(-z)),
                     np.exp(-z) / (scale * (1 + np.exp(-z)) ** 2), logi, 1 - logi,
                     loc + scale * np.log(q / (1 - q)), loc - scale * np.log(q / (1 - q))],
        "uniform": [np.where((x < -1) | (x > 3), -np.inf, -np.log(4)),
                    np.where((x < -1) | (x > 3), 0, 0.25), uni, -1 + 4 * q],
        "expon": [np.where(x < loc, -np.inf, -z - np.log(scale)),
                  np.where(x < loc, 0, np.exp(-z) / scale), exc, np.log(exc), 1 - exc,
                  np.where(x < loc, 0.0, -z), loc - scale * np.log1p(-q)],
        "pareto": [np.where(pz < 1, -np.inf, np.log(2.5 / 1.5) - 3.5 * np.log(np.abs(pz))),
                   np.where(pz < 1, 0.0, 2.5 / 1.5 * np.abs(pz) ** -3.5), par, np.log(par),
                   1 - par, np.log1p(-par), -1 + 1.5 * (1 - q) ** (-1 / 2.5)],
        "gumbel_r": [-np.log(scale) - z - np.exp(-z), np.exp(-z - np.exp(-z)) / scale, gr,
                     -np.exp(-z), -np.expm1(-np.exp(-z)), np.log(-np.expm1(-np.exp(-z))),
                     loc - scale * np.log(-np.log(q))],
        "gumbel_l": [-np.log(scale) + z - np.exp(z), np.exp(z - np.exp(z)) / scale, gl,
                     np.log(gl), np.exp(-np.exp(z)), -np.exp(z),
                     loc + scale * np.log(-np.log1p(-q))],
        "gennorm": [np.log(gpdf(x)), gpdf(x),
                    [0.5 + math.copysign(_quad(gpdf, 0.0, abs(v)), v) for v in x]],
    }
    np.seterr(**old)
    for dt, rtol, atol in ((np.float64, 1e-12, 5e-14), (np.float32, 1e-5, 3e-6)):
        got = shmap.jit(fns)(_put(c, mesh, x.astype(dt), P("i")),
                             _put(c, mesh, q.astype(dt), P("i")))
        for name, vals in got.items():
            for i, (g, w) in enumerate(zip(vals, want[name])):
                assert g.dtype == dt, (name, i)
                _close(g, w, rtol, atol, f"{name}[{i}] {np.dtype(dt).name}")
    _close(0.5 + _pdf_cdf(lambda t: 1 / (np.pi * scale * (1 + ((t - loc) / scale) ** 2)), loc, x),
           cau, 1e-12)  # the closed-form cdfs are the pdf's integrals
    _close(0.5 + _pdf_cdf(lambda t: np.exp(-np.abs(t - loc) / scale) / (2 * scale), loc, x), lap,
           1e-12)
    _close(_pdf_cdf(lambda t: np.exp(-(t - loc) / scale - np.exp(-(t - loc) / scale)) / scale,
                    -10.0, x), gr, 1e-9)
    for name, fn in (("uniform", st.uniform.ppf), ("expon", st.expon.ppf),
                     ("pareto", lambda q: st.pareto.ppf(q, 2.0))):
        assert np.isnan(np.asarray(fn(_put(c, mesh, np.array([-0.1, 1.1, np.nan]))))).all(), name
    assert np.isnan(np.asarray(st.gumbel_r.logpdf(_put(c, mesh, x), 0.0, -1.0))).all()
    assert np.isnan(np.asarray(st.gumbel_l.ppf(_put(c, mesh, np.array([0.0, 1.0]))))).all()
    cdf = st.uniform.cdf(_put(c, mesh, np.array([np.nan, -5.0, 9.0])))
    assert np.array_equal(np.asarray(cdf), [0.0, 0.0, 1.0])  # JAX's select: 0 at NaN


def test_truncnorm_vonmises_wrapcauchy_dirichlet(c, mesh):
    """truncnorm (central and tail intervals) against the normal's
    erfc-based masses and integrals of its pdf; vonmises and wrapcauchy
    against their formulas and normalisation; dirichlet (with the last
    coordinate left out, and a batch) against its formula; JAX's
    sentences for alpha and x shapes."""
    def nd(t):
        return 0.5 * math.erfc(-t / math.sqrt(2))
    for a, b, loc, scale in ((-1.0, 2.0, 0.5, 1.5), (2.0, 3.5, 0.0, 1.0), (-7.0, -5.0, 1.0, 0.5)):
        x = loc + scale * np.linspace(a + 0.01, b - 0.01, 8)
        z = (x - loc) / scale
        mass = nd(b) - nd(a)
        pdf = np.exp(-z * z / 2) / math.sqrt(2 * math.pi) / scale / mass
        cdf = np.array([(nd(t) - nd(a)) / mass for t in z])
        got = shmap.jit(lambda x: (st.truncnorm.logpdf(x, a, b, loc, scale),
                                   st.truncnorm.pdf(x, a, b, loc, scale),
                                   st.truncnorm.cdf(x, a, b, loc, scale),
                                   st.truncnorm.logcdf(x, a, b, loc, scale),
                                   st.truncnorm.sf(x, a, b, loc, scale),
                                   st.truncnorm.logsf(x, a, b, loc, scale)))(
            _put(c, mesh, x, P("i")))
        _close(got[0], np.log(pdf), 1e-6, 5e-7)  # the normal's erfc: 1.2e-7
        _close(got[1], pdf, 1e-6)
        _close(got[2], cdf, 1e-6, 1e-12)
        _close(got[2], _pdf_cdf(lambda t: np.exp(-t * t / 2) / math.sqrt(2 * math.pi) / mass, a, z),
               1e-6, 1e-12)
        _close(got[3], np.log(cdf), 1e-5, 5e-7)
        _close(got[4], 1 - cdf, 1e-6, 1e-12)
        _close(got[5], np.log1p(-cdf), 1e-5, 5e-7)
    out = st.truncnorm.logpdf(_put(c, mesh, np.array([-2.0, 0.0, 3.0])), -1.0, 2.0)
    assert np.isinf(np.asarray(out)[[0, 2]]).all()
    assert np.isnan(np.asarray(st.truncnorm.logpdf(_put(c, mesh, np.array([0.0])), 1.0, 1.0)))
    ends = st.truncnorm.cdf(_put(c, mesh, np.array([-5.0, 5.0])), -1.0, 2.0)
    assert np.array_equal(np.asarray(ends), [0.0, 1.0])

    th = np.linspace(-3.0, 3.0, 8)
    for kappa in (0.5, 4.0, 40.0):
        want = kappa * np.cos(th) - math.log(2 * math.pi * _i0_ref(kappa))
        got = shmap.jit(lambda x: st.vonmises.logpdf(x, kappa))(_put(c, mesh, th, P("i")))
        _close(got, want, 1e-12)
        norm = _quad(lambda t: np.exp(kappa * np.cos(t)) / (2 * math.pi * _i0_ref(kappa)),
                     -math.pi, math.pi)
        assert abs(norm - 1) < 1e-12
    assert np.isnan(np.asarray(st.vonmises.pdf(_put(c, mesh, th), 0.0))).all()
    tw = np.linspace(0.1, 6.2, 8)
    for cc in (0.2, 0.7):
        want = np.log((1 - cc * cc) / (2 * math.pi * (1 + cc * cc - 2 * cc * np.cos(tw))))
        _close(st.wrapcauchy.logpdf(_put(c, mesh, tw, P("i")), cc), want, 1e-12)
        _close(st.wrapcauchy.pdf(_put(c, mesh, tw, P("i")), cc), np.exp(want), 1e-12)
    odd = st.wrapcauchy.logpdf(_put(c, mesh, np.array([-0.1, 7.0, 1.0])), 0.5)
    assert np.isinf(np.asarray(odd)[:2]).all() and np.isfinite(np.asarray(odd)[2])
    assert np.isnan(np.asarray(st.wrapcauchy.logpdf(_put(c, mesh, tw), 1.0))).all()

    alpha = np.array([1.5, 2.0, 3.5])
    pts = np.array([[0.2, 0.5, 0.1, 0.3], [0.3, 0.25, 0.6, 0.3], [0.5, 0.25, 0.3, 0.4]])
    lnorm = sum(math.lgamma(v) for v in alpha) - math.lgamma(alpha.sum())
    want = ((alpha[:, None] - 1) * np.log(pts)).sum(0) - lnorm
    _close(st.dirichlet.logpdf(_put(c, mesh, pts), _put(c, mesh, alpha)), want, 1e-12)
    _close(st.dirichlet.pdf(_put(c, mesh, pts[:2]), _put(c, mesh, alpha)), np.exp(want), 1e-12)
    off = st.dirichlet.logpdf(_put(c, mesh, np.array([0.5, 0.6, -0.1])), _put(c, mesh, alpha))
    assert float(off) == -np.inf
    with pytest.raises(ValueError, match="`alpha` must be one-dimensional; got "
                                         r"alpha.shape=\(1, 3\)"):
        st.dirichlet.logpdf(_put(c, mesh, pts), _put(c, mesh, alpha[None]))
    with pytest.raises(ValueError, match="`x` must have either the same number of entries as "
                                         r"`alpha` or one entry fewer; got x.shape=\(1,\)"):
        st.dirichlet.logpdf(_put(c, mesh, np.array([0.5])), _put(c, mesh, alpha))


# ---- stats: discrete distributions ----------------------------------------------------------


def test_discrete(c, mesh):
    """poisson, bernoulli, binom, betabinom, geom, nbinom, multinomial:
    pmfs against math's factorials and lgamma, summing to 1; poisson's and
    bernoulli's cdfs against cumulative sums; poisson's entropy against
    -sum p log p; in a jit on sharded k and at once; JAX's sentence for
    multinomial's float counts."""
    k = np.arange(12.0)
    kv = _put(c, mesh, k, P("i"))
    mu = 3.5
    ppmf = np.array([math.exp(v * math.log(mu) - mu - math.lgamma(v + 1)) for v in k])

    def fns(k):
        return (st.poisson.logpmf(k, mu), st.poisson.pmf(k, mu), st.poisson.cdf(k, mu),
                st.poisson.pmf(k, mu, 2.0), st.binom.pmf(k, 10.0, 0.3),
                st.binom.logpmf(k, 10.0, 0.3), st.geom.pmf(k, 0.25), st.geom.logpmf(k, 0.25, 1.0),
                st.nbinom.pmf(k, 3.0, 0.4), st.nbinom.logpmf(k, 2.5, 0.6),
                st.betabinom.pmf(k, 10.0, 2.0, 3.5), st.betabinom.logpmf(k, 10.0, 0.5, 0.5),
                st.bernoulli.pmf(k, 0.3), st.bernoulli.logpmf(k, 0.3, 1.0),
                st.bernoulli.cdf(k / 4 - 1, 0.3), st.bernoulli.ppf(k / 11, 0.3))
    out = [np.asarray(o) for o in shmap.jit(fns)(kv)]
    _close(out[0], np.log(ppmf), 1e-12)
    _close(out[1], ppmf, 1e-12)
    _close(out[2], np.cumsum(ppmf), 1e-12)
    _close(out[3], np.concatenate([[0, 0], ppmf[:10]]), 1e-12)
    binom = [math.comb(10, int(v)) * 0.3 ** v * 0.7 ** (10 - v) if v <= 10 else 0 for v in k]
    _close(out[4], binom, 1e-12)
    with np.errstate(divide="ignore"):
        _close(out[5], np.log(binom), 1e-12)
    _close(out[6], np.where(k >= 1, 0.25 * 0.75 ** (k - 1), 0), 1e-12)
    _close(out[7], np.where(k >= 2, math.log(0.25) + (k - 2) * math.log(0.75), -np.inf), 1e-12)
    nb = [math.comb(int(v) + 2, int(v)) * 0.4 ** 3 * 0.6 ** v for v in k]
    _close(out[8], nb, 1e-12)
    nbl = [math.lgamma(v + 2.5) - math.lgamma(2.5) - math.lgamma(v + 1) + 2.5 * math.log(0.6) +
           v * math.log(0.4) for v in k]
    _close(out[9], nbl, 1e-12)

    def bb(v, n, a, b):
        if v > n:
            return 0.0
        lb = math.lgamma(v + a) + math.lgamma(n - v + b) - math.lgamma(n + a + b) - (
            math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b))
        return math.comb(int(n), int(v)) * math.exp(lb)
    bbw = np.array([bb(v, 10, 2.0, 3.5) for v in k])
    _close(out[10], bbw, 3e-6)  # betaln: JAX's algdiv, 1.3e-6
    assert abs(bbw.sum() - 1) < 1e-12 and abs(out[10].sum() - 1) < 1e-5
    with np.errstate(divide="ignore"):
        _close(out[11], np.log([bb(v, 10, 0.5, 0.5) for v in k]), 3e-6)
    _close(out[12], [0.7, 0.3] + [0] * 10, 1e-15)
    _close(out[13], [-np.inf, math.log(0.7), math.log(0.3)] + [-np.inf] * 9, 1e-15)
    kb = k / 4 - 1
    _close(out[14], np.where(kb < 0, 0, np.where(kb < 1, 0.7, 1.0)), 0)
    _close(out[15], np.where(k / 11 <= 0.7, 0.0, 1.0), 0)
    assert abs(out[1].sum() + 1 - np.asarray(st.poisson.cdf(_put(c, mesh, np.array([11.0])),
                                                            mu))[0] - 1) < 1e-12
    frac = st.poisson.logpmf(_put(c, mesh, np.array([2.5, -1.0])), mu)
    assert np.isinf(np.asarray(frac)).all()
    assert np.isnan(np.asarray(st.bernoulli.cdf(_put(c, mesh, np.array([0.5])), 1.5))).all()

    mus = np.array([0.0, 0.4, 3.0, 9.5, 25.0, 80.0, 150.0, 1000.0])
    ent = []
    for m in mus:
        j = np.arange(0, int(m + 40 * math.sqrt(m) + 60))
        lp = j * math.log(m) - m - np.vectorize(math.lgamma)(j + 1) if m > 0 else None
        ent.append(0.0 if m == 0 else float(-np.sum(np.exp(lp) * lp)))
    got = np.asarray(st.poisson.entropy(_put(c, mesh, mus, P("i"))))
    _close(got, ent, 1e-6, 0)  # JAX's sums stop at mu + 20, its asymptotic: O(1/mu**2)
    _close(got[[0, 1, 2, 4, 5]], np.array(ent)[[0, 1, 2, 4, 5]], 1e-10)

    x = np.array([[1, 2, 3], [0, 6, 0], [2, 2, 1]], np.int32)
    p = np.array([0.2, 0.3, 0.5])
    want = [math.lgamma(7) + sum(v * math.log(q) - math.lgamma(v + 1) for v, q in zip(r, p))
            for r in x]
    _close(st.multinomial.logpmf(_put(c, mesh, x[0]), 6, _put(c, mesh, p)), want[0], 1e-12)
    _close(st.multinomial.pmf(_put(c, mesh, x[1]), 6, _put(c, mesh, p)), math.exp(want[1]), 1e-12)
    assert float(st.multinomial.logpmf(_put(c, mesh, x[2]), 6, _put(c, mesh, p))) == -np.inf
    with pytest.raises(ValueError, match="x and n must be of integer type; got "
                                         "x.dtype=float64, n.dtype=float64"):
        st.multinomial.logpmf(_put(c, mesh, x[0].astype(np.float64)), 6, _put(c, mesh, p))


# ---- stats: mode, rankdata, sem; errors ---------------------------------------------------


def _np_rank(v, method):
    order = np.argsort(v, kind="stable")
    out = np.empty(len(v))
    srt = v[order]
    i = 0
    dense = 0
    while i < len(v):
        j = i
        while j + 1 < len(v) and srt[j + 1] == srt[i]:
            j += 1
        dense += 1
        for t in range(i, j + 1):
            out[order[t]] = {"average": (i + j) / 2 + 1, "min": i + 1, "max": j + 1,
                             "dense": dense, "ordinal": t + 1}[method]
        i = j + 1
    return out


def test_mode_rankdata_sem(c, mesh):
    """mode (the smallest of the most frequent, NaNs one value sorted last;
    axis, None, keepdims) and its int32 counts, rankdata's five methods
    (flat, along an axis, all NaN where a NaN is) and sem (ddof, keepdims,
    nan_policy='omit') against numpy, in a jit on sharded values and at
    once; JAX's sentences."""
    rng = np.random.default_rng(7)
    a = rng.integers(0, 4, (8, 6)).astype(np.float64)
    av = _put(c, mesh, a, P(None, "j"))  # sorted along axis 0: not sharded there
    m0, c0 = shmap.jit(lambda a: tuple(st.mode(a)))(av)
    assert c0.dtype == np.int32
    for j in range(6):
        vals, cnt = np.unique(a[:, j], return_counts=True)
        assert np.asarray(m0)[j] == vals[np.argmax(cnt)] and np.asarray(c0)[j] == cnt.max()
    m1 = st.mode(_put(c, mesh, a, P("i", None)), axis=1, keepdims=True)
    assert m1.mode.shape == (8, 1)
    for i in range(8):
        vals, cnt = np.unique(a[i], return_counts=True)
        assert np.asarray(m1.mode)[i, 0] == vals[np.argmax(cnt)]
        assert np.asarray(m1.count)[i, 0] == cnt.max()
    mn = st.mode(_put(c, mesh, np.array([np.nan, 2.0, np.nan, 1.0, 2.0, np.nan])), axis=None)
    assert np.isnan(float(mn.mode)) and int(mn.count) == 3
    mt = st.mode(_put(c, mesh, np.array([3.0, 1.0, 3.0, 1.0, np.nan, np.nan])), axis=None)
    assert float(mt.mode) == 1.0 and int(mt.count) == 2

    v = np.array([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0, 5.0, 1.0])
    vv = _put(c, mesh, v)
    for method in ("average", "min", "max", "dense", "ordinal"):
        r = shmap.jit(lambda x: st.rankdata(x, method))(vv)
        assert r.dtype == np.float32
        _close(r, _np_rank(v, method), 0, 0, method)
    r2 = st.rankdata(av, "max", axis=0)
    _close(r2, np.stack([_np_rank(a[:, j], "max") for j in range(6)], 1), 0)
    withnan = np.array([[1.0, np.nan, 2.0], [3.0, 1.0, 2.0]])
    rn = np.asarray(st.rankdata(_put(c, mesh, withnan), axis=1))
    assert np.isnan(rn[0]).all() and np.array_equal(rn[1], [3.0, 1.0, 2.0])
    assert np.isnan(np.asarray(st.rankdata(_put(c, mesh, withnan)))).all()

    x = rng.standard_normal((8, 6))
    xv = _put(c, mesh, x, P("i", "j"))
    s = shmap.jit(lambda x: (st.sem(x), st.sem(x, axis=1, ddof=0, keepdims=True),
                             st.sem(x, axis=None)))(xv)
    _close(s[0], x.std(0, ddof=1) / math.sqrt(8), 1e-13)
    _close(s[1], x.std(1, ddof=0, keepdims=True) / math.sqrt(6), 1e-13)
    _close(s[2], x.std(ddof=1) / math.sqrt(48), 1e-13)
    xn = x.copy()
    xn[0, 0] = xn[3, 0] = np.nan
    so = st.sem(_put(c, mesh, xn), nan_policy="omit")
    ok = xn[:, 0][~np.isnan(xn[:, 0])]
    _close(np.asarray(so)[0], ok.std(ddof=1) / math.sqrt(6), 1e-13)
    _close(np.asarray(so)[1:], x[:, 1:].std(0, ddof=1) / math.sqrt(8), 1e-13)
    with pytest.raises(ValueError, match="unknown method 'middle'"):
        st.rankdata(vv, "middle")
    with pytest.raises(ValueError, match="Illegal nan_policy value 'skip'"):
        st.mode(vv, nan_policy="skip")
    with pytest.raises(NotImplementedError, match="Logic for `nan_policy` of omit is not "
                                                  "implemented"):
        st.rankdata(vv, nan_policy="omit")
    with pytest.raises(ValueError, match="raise is not supported"):
        st.sem(vv, nan_policy="raise")


def test_errors_and_dtypes(c, mesh):
    """JAX's sentences: arguments that are not arrays or scalars, a traced
    d of multigammaln; the dtypes of integer, float32 and float16
    arguments (half floats computed in float32 by the loops)."""
    xv = _put(c, mesh, np.array([0.5, 1.5]))
    with pytest.raises(TypeError, match="beta.logpdf requires ndarray or scalar arguments, got "
                                        "<class 'list'> at position 1."):
        st.beta.logpdf(xv, [2.0, 2.0], 3.0)
    with pytest.raises(TypeError, match="gammainc requires ndarray or scalar arguments, got "
                                        "<class 'list'> at position 0."):
        sp.gammainc([1.0], xv)
    with pytest.raises(TypeError, match="Abstract tracer value encountered where concrete value "
                                        "is expected"):
        shmap.jit(lambda x, d: sp.multigammaln(x, d))(xv, _put(c, mesh, np.array(2)))
    h = sp.gammainc(_put(c, mesh, np.array([2.0, 3.0], np.float16)),
                    _put(c, mesh, np.array([1.0, 4.0], np.float16)))
    assert h.dtype == np.float16
    _close(h, [1 - 2 * math.exp(-1), 1 - 13 * math.exp(-4)], 1e-3)
    f32 = st.beta.cdf(_put(c, mesh, np.array([0.25, 0.5], np.float32)), 2, 2)
    assert f32.dtype == np.float32
    _close(f32, [0.15625, 0.5], 1e-6)
    i = st.poisson.pmf(_put(c, mesh, np.array([0, 1, 2], np.int32)), 2)
    assert i.dtype == np.float32
    _close(i, [math.exp(-2), 2 * math.exp(-2), 2 * math.exp(-2)], 1e-6)
