"""jax.scipy.special: logsumexp (b=, return_sign=), erf, erfc, erfinv,
erfcx, dawsn, expit, logit, xlogy, xlog1py, entr, rel_entr, kl_div,
gammaln, gamma, gammasgn, loggamma, digamma, polygamma, zeta, beta,
betaln, betainc, gammainc, gammaincc, multigammaln, factorial, comb,
poch, i0, i0e, i1, i1e, bessel_jn, exp1, expi, expn, sici, spence,
hyp1f1, owens_t, bernoulli, boxcox, boxcox1p, softmax, log_softmax,
ndtr, ndtri, log_ndtr, as composites, each with JAX's algorithm where JAX
has its own.

gammaln is Lanczos' approximation (g = 7, nine terms; reflected below
1/2), to about 1e-15 relative in float64; digamma is the asymptotic series
after eight steps of the recurrence (reflected at and below 0); erfc is
erf's complement up to |x| = 1/2 and the Chebyshev fit of Numerical
Recipes' erfcc beyond (1.2e-7 relative: float32's precision, short of
float64's). gammainc / gammaincc (XLA's igamma / igammac: a series or a
continued fraction), betainc (the continued fraction by Lentz's method),
expn, hyp1f1 iterate in lax.while_loop until each element has converged
(the loop of JAX's lowering, or of JAX's vmap of its scalar loop); zeta and
polygamma are XLA's (chlo) Euler-Maclaurin formula; ndtri is Cephes'
piecewise rational approximation (JAX's _ndtri); erfinv, xlogy and xlog1py
carry JAX's derivative rules (custom_jvp). Half floats are computed in
float32 where JAX's lowerings do so."""
import math
import numbers
import operator

import numpy as _np

from .. import lax
from .. import nn as _nn
from .. import numpy as jnp
from .._core import Array
from .._grad import custom_jvp
from .._trace import Tracer
from ..numpy import ConcretizationTypeError, _at_once, _conv_error_doc, _short_type

__all__ = ["logsumexp", "erf", "erfc", "erfinv", "erfcx", "dawsn", "expit", "logit", "xlogy",
           "xlog1py", "entr", "rel_entr", "kl_div", "gammaln", "gamma", "gammasgn", "loggamma",
           "digamma", "polygamma", "zeta", "beta", "betaln", "betainc", "gammainc", "gammaincc",
           "multigammaln", "factorial", "comb", "poch", "i0", "i0e", "i1", "i1e", "exp1", "expi",
           "expn", "sici", "spence", "hyp1f1", "owens_t", "bessel_jn", "bernoulli", "boxcox",
           "boxcox1p", "softmax", "log_softmax", "ndtr", "ndtri", "log_ndtr"]


def _float(x, name):
    """x as a float array (integers and bools float32; JAX's TypeError for
    what is not an array or a scalar)."""
    if not hasattr(x, "dtype"):
        return _promote_inexact(name, x)[0]
    return x if _np.issubdtype(x.dtype, _np.floating) else jnp.astype(x, _np.float32)


def _as(a, dt):
    """a (an array, a numpy value or a Python scalar) as an array of dtype dt."""
    if isinstance(a, (Array, Tracer)):
        return a if _np.dtype(a.dtype) == dt else jnp.astype(a, dt)
    if _np.ndim(a) == 0:
        return jnp.full((), _np.asarray(a).item(), dtype=dt)
    return jnp.asarray(_np.asarray(a), dt)


def _promote_inexact(name, *args):
    """JAX's promote_args_inexact: each argument an array or a scalar (else
    JAX's TypeError), all made the dtype they promote to (Python scalars
    weak), integers and bools float32 (shmap's default float)."""
    for i, a in enumerate(args):
        if not isinstance(a, (Array, Tracer, _np.ndarray, _np.generic, numbers.Number)):
            raise TypeError(f"{name} requires ndarray or scalar arguments, got {type(a)} at "
                            f"position {i}.")
    dt = jnp.result_type(*args)
    if not _np.issubdtype(dt, _np.floating):
        dt = _np.dtype(_np.float32)
    return [_as(a, dt) for a in args]


def _full(x, v):
    """v in x's dtype and shape (where a bare literal would be float32)."""
    return jnp.full_like(x, v)


def _eps(x):
    return float(_np.finfo(_np.dtype(x.dtype)).eps)


def _concrete_int(v, context):
    """JAX's core.concrete_or_error(operator.index, v, context)."""
    if isinstance(v, Tracer):
        raise ConcretizationTypeError(f"{_conv_error_doc}traced array with shape "
                                      f"{_short_type(v.dtype, v.shape)}\n{context}")
    return operator.index(v.item() if isinstance(v, _np.ndarray) and v.ndim == 0 else v)


def _polyval(coeffs, x):
    """jnp.polyval of constant coefficients (highest first), in x's dtype:
    y = y * x + c from y = 0."""
    y = jnp.zeros_like(x)
    for c in coeffs:
        y = y * x + c
    return y


def _elementwise(fn, *args):
    """fn of args broadcast to one shape, half floats in float32 (JAX's
    _up_and_broadcast, XLA's upcast of its special functions)."""
    shape = tuple(_np.broadcast_shapes(*[tuple(a.shape) for a in args]))
    args2 = [a if tuple(a.shape) == shape else jnp.broadcast_to(a, shape) for a in args]
    if len(args2) > 1:  # one type (sharding) for all, as a loop's carry needs
        m = args2[0] == args2[0]
        for a in args2[1:]:
            m = m | (a == a)
        args2 = [jnp.where(m, a, a) for a in args2]
    return lax._as_dtype_of(fn(*[lax._work(a) for a in args2]), args[0])


def _carry(vals, ref):
    """A loop's first carry varying over the manual axes ref varies over (in
    a shard_map body, constants are invariant, and a carry must keep its
    type)."""
    axes = lax._varying(ref.type) if isinstance(ref, Tracer) else []
    out = []
    for v in vals:
        miss = tuple(a for a in axes if a not in lax._varying(getattr(v, "type", "")))
        out.append(lax.pvary(v, miss if len(miss) > 1 else miss[0]) if miss else v)
    return tuple(out)


def _while_each(cond, body, init, ref):
    """A lax.while_loop per element, as JAX's vmap of a scalar loop runs it:
    the body applied to the elements whose cond holds (each stopping the
    first time it fails), until it holds for none (ref: the data the body
    reads, for the carry's type)."""
    shape = tuple(_np.broadcast_shapes(*[tuple(v.shape) for v in init]))
    init = tuple(v if tuple(v.shape) == shape else jnp.broadcast_to(v, shape) for v in init)

    def step(c):
        keep, v = c[0], c[1:]
        new = tuple(jnp.where(keep, n, o) for n, o in zip(body(v), v))
        return (keep & cond(new),) + new
    return lax.while_loop(lambda c: jnp.any(c[0]), step,
                          _carry((cond(init),) + init, ref))[1:]


@_at_once
def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False, where=None):
    """log(sum(b * exp(a))) over axis, the max taken out first; with
    return_sign, (log|sum|, its sign); where=, the elements to include.
    JAX's one function: shmap.nn.logsumexp, a checked as an array first."""
    from ..nn import logsumexp as _logsumexp
    return _logsumexp(_float(a, "logsumexp"), axis, b, keepdims, return_sign, where)


@_at_once
def erf(x):
    return jnp.erf(_float(x, "erf"))


@_at_once
def erfc(x):
    """1 - erf(x), kept accurate in the tails (see the module's note)."""
    x = _float(x, "erfc")
    z = jnp.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = -z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (
        0.09678418 + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (
            1.48851587 + t * (-0.82215223 + t * 0.17087277))))))))
    tail = t * jnp.exp(poly)
    tail = jnp.where(x >= 0, tail, 2.0 - tail)
    return jnp.where(z < 0.5, 1.0 - jnp.erf(x), tail)


def _erf_inv_jvp(primals, tangents):
    """JAX's erf_inv derivative: sqrt(pi) / 2 * exp(erf_inv(x)**2)."""
    ans = _erf_inv(primals[0])
    return ans, (math.sqrt(math.pi) / 2.0) * (tangents[0] * jnp.exp(ans * ans))


# lax.erf_inv with JAX's derivative rule (differentiating XLA's polynomial itself gives NaN:
# its where(|x| == 1, x * inf, ...) sends 0 * inf back)
_erf_inv = custom_jvp(lambda x: lax.erf_inv(x))
_erf_inv.defjvp(_erf_inv_jvp)


@_at_once
def erfinv(x):
    """The inverse of erf (lax.erf_inv), its derivative JAX's:
    sqrt(pi) / 2 * exp(erfinv(x)**2)."""
    return _erf_inv(_float(x, "erfinv"))


def _erfcx_impl(x, nterms):
    """JAX's: exp(x**2) erfc(x) on safe arguments, the asymptotic series
    past sqrt(log(max)) (nterms of it)."""
    coeffs = (7918.06640625, -1055.7421875, 162.421875, -29.53125, 6.5625, -1.875, .75, -.5, 1.)
    large = x > math.sqrt(math.log(float(_np.finfo(_np.dtype(x.dtype)).max)))
    safe = jnp.where(large, 1.0, x)
    direct = jnp.exp(safe * safe) * erfc(safe)
    asymp = _polyval(coeffs[-nterms:], 1.0 / (x * x)) / (x * math.sqrt(math.pi))
    return jnp.where(large, asymp, direct)


@_at_once
def erfcx(x):
    """exp(x**2) erfc(x), as JAX's: directly until exp(x**2) would
    overflow, the asymptotic series in 1/x**2 beyond (9 terms in float64,
    5 in float32; half floats in float32)."""
    x = _float(x, "erfcx")
    w = lax._work(x)
    return lax._as_dtype_of(_erfcx_impl(w, 9 if w.dtype == _np.float64 else 5), x)


_DAWSN = (
    (1.13681498971755972054e-11, 8.49262267667473811108e-10, 1.94434204175553054283e-8,
     9.53151741254484363489e-7, 3.07828309874913200438e-6, 3.52513368520288738649e-4,
     -8.50149846724410912031e-4, 4.22618223005546594270e-2, -9.17480371773452345351e-2,
     9.99999999999999994612e-1),
    (2.40372073066762605484e-11, 1.48864681368493396752e-9, 5.21265281010541664570e-8,
     1.27258478273186970203e-6, 2.32490249820789513991e-5, 3.25524741826057911661e-4,
     3.48805814657162590916e-3, 2.79448531198828973716e-2, 1.58874241960120565368e-1,
     5.74918629489320327824e-1, 1.00000000000000000539e0),
    (5.08955156417900903354e-1, -2.44754418142697847934e-1, 9.41512335303534411857e-2,
     -2.18711255142039025206e-2, 3.66207612329569181322e-3, -4.23209114460388756528e-4,
     3.59641304793896631888e-5, -2.14640351719968974225e-6, 9.10010780076391431042e-8,
     -2.40274520828250956942e-9, 3.59233385440928410398e-11),
    (1.00000000000000000000e0, -6.31839869873368190192e-1, 2.36706788228248691528e-1,
     -5.31806367003223277662e-2, 8.48041718586295374409e-3, -9.47996768486665330168e-4,
     7.81025592944552338085e-5, -4.55875153252442634831e-6, 1.89100358111421846170e-7,
     -4.91324691331920606875e-9, 7.18466403235734541950e-11),
    (-5.90592860534773254987e-1, 6.29235242724368800674e-1, -1.72858975380388136411e-1,
     1.64837047825189632310e-2, -4.86827613020462700845e-4),
    (1.00000000000000000000e0, -2.69820057197544900361e0, 1.73270799045947845857e0,
     -3.93708582281939493482e-1, 3.44278924041233391079e-2, -9.73655226040941223894e-4))


@_at_once
def dawsn(x):
    """Dawson's integral exp(-x**2) int_0^x exp(t**2) dt, by Cody, Paciorek
    and Thacher's three rational fits on |x| (below 3.25, below 6.25,
    beyond), each on safe arguments elsewhere, as JAX's."""
    x = _float(x, "dawsn")
    w = lax._work(x)
    an, ad, bn, bd, cn, cd = _DAWSN
    ax = jnp.abs(w)
    t = 1.0 / (ax * ax)
    r1 = ax < 3.25
    s1 = jnp.where(r1, ax, 1.0)
    v1 = s1 * _polyval(an, s1 * s1) / _polyval(ad, s1 * s1)
    r2 = (ax >= 3.25) & (ax < 6.25)
    t2, s2 = jnp.where(r2, t, 1.0), jnp.where(r2, ax, 1.0)
    v2 = (0.5 / s2) * (1.0 + t2 * _polyval(bn, t2) / _polyval(bd, t2))
    r3 = ax >= 6.25
    t3, s3 = jnp.where(r3, t, 1.0), jnp.where(r3, ax, 1.0)
    v3 = (0.5 / s3) * (1.0 + t3 * _polyval(cn, t3) / _polyval(cd, t3))
    out = jnp.sign(w) * jnp.where(r1, v1, jnp.where(ax < 6.25, v2, v3))
    return lax._as_dtype_of(out, x)


@_at_once
def expit(x):
    """The logistic sigmoid."""
    return lax.logistic(_float(x, "expit"))


@_at_once
def logit(x):
    x = _float(x, "logit")
    return jnp.log(x / (1 - x))


def _xlogy_impl(x, y):
    keep = (x != 0) | jnp.isnan(y)
    return jnp.where(keep, x * jnp.log(jnp.where(keep, y, 1.0)), 0.0)


def _xlog1py_impl(x, y):
    keep = (x != 0) | jnp.isnan(y)
    return jnp.where(keep, x * jnp.log1p(jnp.where(keep, y, 0.0)), 0.0)


# JAX's custom_jvp rules: d/dx = log(y) (log1p(y)), d/dy = x / y (x / (1 + y)), also at x == 0
_xlogy = custom_jvp(_xlogy_impl)
_xlogy.defjvp(lambda primals, tangents: (
    _xlogy(*primals),
    tangents[0] * jnp.log(primals[1]) + tangents[1] * primals[0] / primals[1]))
_xlog1py = custom_jvp(_xlog1py_impl)
_xlog1py.defjvp(lambda primals, tangents: (
    _xlog1py(*primals),
    tangents[0] * jnp.log1p(primals[1]) + tangents[1] * primals[0] / (1 + primals[1])))


@_at_once
def xlogy(x, y):
    """x * log(y), 0 where x is 0 (NaN where y is NaN, as JAX's); JAX's
    derivative rule (log(y) in x, x / y in y, also where x is 0)."""
    x, y = _promote_inexact("xlogy", x, y)
    return _xlogy(x, y)


@_at_once
def xlog1py(x, y):
    """x * log1p(y), 0 where x is 0 (NaN where y is NaN, as JAX's); JAX's
    derivative rule (log1p(y) in x, x / (1 + y) in y)."""
    x, y = _promote_inexact("xlog1py", x, y)
    return _xlog1py(x, y)


@_at_once
def entr(x):
    """-x log x for x > 0, 0 at 0, -inf below."""
    x = _float(x, "entr")
    safe = jnp.where(x > 0, x, 1.0)
    return jnp.where(x > 0, -x * jnp.log(safe), jnp.where(x == 0, 0.0, -_np.inf))


@_at_once
def rel_entr(p, q):
    """p log(p / q) where both are positive, 0 where p is 0 and q >= 0, inf
    elsewhere (JAX's: xlogx(p) - xlogy(p, q) on safe arguments)."""
    p, q = _promote_inexact("rel_entr", p, q)
    both = (p > 0) & (q > 0)
    safe_p, safe_q = jnp.where(both, p, 1), jnp.where(both, q, 1)
    val = xlogy(safe_p, safe_p) - xlogy(safe_p, safe_q)
    return jnp.where(both, val, jnp.where((p == 0) & (q >= 0), _full(p, 0.0), _np.inf))


@_at_once
def kl_div(p, q):
    """rel_entr(p, q) - p + q."""
    p, q = _promote_inexact("kl_div", p, q)
    return rel_entr(p, q) - p + q


_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
            -176.61502916214059, 12.507343278686905, -0.13857109526572012,
            9.9843695780195716e-6, 1.5056327351493116e-7)


def _lgamma_right(x):
    """log Gamma(x) for x >= 1/2 (Lanczos)."""
    x = x - 1
    a = _LANCZOS[0]
    for i, c in enumerate(_LANCZOS[1:], 1):
        a = a + c / (x + i)
    t = x + 7.5
    return 0.5 * math.log(2 * math.pi) + (x + 0.5) * jnp.log(t) - t + jnp.log(a)


@_at_once
def gammaln(x):
    """log |Gamma(x)| (inf at 0 and the negative integers)."""
    x = _float(x, "gammaln")
    left = x < 0.5
    xr = jnp.where(left, 1 - x, x)  # both branches on safe arguments
    right = _lgamma_right(xr)
    pole = (x <= 0) & (x == jnp.floor(x))  # 0 and the negative integers
    s = jnp.abs(jnp.sin(math.pi * x))
    refl = math.log(math.pi) - jnp.log(jnp.where(pole, 1.0, s)) - right
    refl = jnp.where(pole, _np.inf, refl)
    return jnp.where(left, refl, right)


@_at_once
def gammasgn(x):
    """The sign of Gamma(x): -1 on (-1, 0), (-3, -2), ... and at -0.0, NaN
    at the negative integers, -inf and NaN, else 1."""
    x = _float(x, "gammasgn")
    fl = jnp.floor(x)
    neg = x < 0
    nan = (neg & (x == fl)) | jnp.isnan(x)
    minus = (neg & (jnp.mod(fl, 2) != 0)) | ((x == 0) & jnp.signbit(x))
    return jnp.where(nan, _np.nan, jnp.where(minus, -1.0, _full(x, 1.0)))


@_at_once
def gamma(x):
    """Gamma(x) = gammasgn(x) exp(gammaln(x)) (NaN at the poles below 0, as
    JAX's)."""
    x = _float(x, "gamma")
    return gammasgn(x) * jnp.exp(gammaln(x))


@_at_once
def loggamma(x):
    """The real log-gamma: gammaln(x) for x > 0, NaN elsewhere (complex
    arguments are not supported: shmap has no complex dtype)."""
    x = _float(x, "loggamma")
    return jnp.where(x > 0, gammaln(x), _np.nan)


def _algdiv(a, b):
    """log(Gamma(b) / Gamma(a + b)) for b >= 8 (cdflib's algdiv, as JAX's)."""
    c0, c1, c2 = 0.833333333333333e-01, -0.277777777760991e-02, 0.793650666825390e-03
    c3, c4, c5 = -0.595202931351870e-03, 0.837308034031215e-03, -0.165322962780713e-02
    h = a / b
    c = h / (1 + h)
    x = h / (1 + h)
    d = b + (a - 0.5)
    x2 = x * x
    s3 = 1.0 + (x + x2)
    s5 = 1.0 + (x + x2 * s3)
    s7 = 1.0 + (x + x2 * s5)
    s9 = 1.0 + (x + x2 * s7)
    s11 = 1.0 + (x + x2 * s9)
    tb = 1.0 / b
    t = tb * tb
    w = ((((c5 * s11 * t + c4 * s9) * t + c3 * s7) * t + c2 * s5) * t + c1 * s3) * t + c0
    w = w * (c / b)
    u = d * jnp.log1p(a / b)
    v = a * (jnp.log(b) - 1.0)
    return jnp.where(u <= v, (w - v) - u, (w - u) - v)


@_at_once
def betaln(a, b):
    """log |Beta(a, b)|, as JAX's (cdflib's betaln): with a <= b,
    gammaln(a) + gammaln(b) - gammaln(a + b) for b < 8, gammaln(a) +
    algdiv(a, b) beyond (accurate for large arguments)."""
    a, b = _promote_inexact("betaln", a, b)
    a, b = jnp.minimum(a, b), jnp.maximum(a, b)
    small_b = gammaln(a) + (gammaln(b) - gammaln(a + b))
    large_b = gammaln(a) + _algdiv(a, b)
    return jnp.where(b < 8, small_b, large_b)


@_at_once
def beta(a, b):
    """Beta(a, b), its sign from gammasgn."""
    a, b = _promote_inexact("beta", a, b)
    sign = gammasgn(a) * gammasgn(b) * gammasgn(a + b)
    return sign * jnp.exp(betaln(a, b))


@_at_once
def factorial(n, exact=False):
    """exp(gammaln(n + 1)), 0 for n < 0 (exact=True is JAX's
    NotImplementedError)."""
    if exact:
        raise NotImplementedError("factorial with exact=True")
    n, = _promote_inexact("factorial", n)
    return jnp.where(n < 0, 0, jnp.exp(gammaln(n + 1)))


@_at_once
def comb(N, k, *, repetition=False):
    """N choose k as a float, by gammaln (0 unless 0 <= k <= N);
    repetition: comb(N + k - 1, k), 1 where k is 0 and N >= 0."""
    N, k = _promote_inexact("comb", N, k)
    if repetition:
        return jnp.where((k == 0) & (N >= 0), 1.0, comb(N + k - 1, k))
    cond = (k <= N) & (N >= 0) & (k >= 0)
    sn, sk = jnp.where(cond, N, 0.0), jnp.where(cond, k, 0.0)
    return jnp.where(cond, jnp.exp(gammaln(sn + 1) - gammaln(sk + 1) - gammaln(sn + 1 - sk)),
                     0.0)


def _digamma_right(x):
    """psi(x) for x > 0: eight steps of psi(x) = psi(x + 1) - 1/x, then the
    asymptotic series at x + 8."""
    acc = 0.0
    for i in range(8):
        acc = acc + 1.0 / (x + i)
    y = x + 8
    r = 1.0 / (y * y)
    series = jnp.log(y) - 0.5 / y - r * (1 / 12 - r * (1 / 120 - r * (1 / 252 - r * (
        1 / 240 - r * (1 / 132)))))
    return series - acc


@_at_once
def digamma(x):
    """psi(x), the derivative of log Gamma (reflected for x <= 0; NaN at
    the non-positive integers)."""
    x = _float(x, "digamma")
    left = x <= 0
    xr = jnp.where(left, 1 - x, x)
    right = _digamma_right(xr)
    t = jnp.tan(math.pi * x)
    refl = right - math.pi / jnp.where(t == 0, 1.0, t)
    refl = jnp.where((x == jnp.floor(x)), _np.nan, refl)
    return jnp.where(left, refl, right)


# 1 / these are the Euler-Maclaurin tail's coefficients of XLA's zeta
_ZETA_COEFFS = (-7.1661652561756670113e18, 1.8152105401943546773e17, -4.5979787224074726105e15,
                1.1646782814350067249e14, -2.950130727918164224e12, 7.47242496e10,
                -1.8924375803183791606e9, 47900160.0, -1209600.0, 30240.0, -720.0, 12.0)


def _zeta_impl(x, q):
    """XLA's chlo.zeta: nine terms of the sum, then Euler-Maclaurin with 12
    Bernoulli terms by Horner's rule (Johansson 2015, formula (5))."""
    acc = q
    power_sum = jnp.power(q, -x)
    for _ in range(9):
        acc = acc + 1.0
        power_sum = power_sum + jnp.power(acc, -x)
    acc = acc + 1.0
    q_neg_power = jnp.power(acc, -x)
    correction = q_neg_power * acc / (x - 1.0)
    rsqrt_acc = 1.0 / (acc * acc)
    horner = jnp.zeros_like(acc)
    for i in range(11):
        product = (x + float(22 - 2 * i)) * (x + float(21 - 2 * i))
        horner = product * (rsqrt_acc * (horner + 1.0 / _ZETA_COEFFS[i]))
    tail = q_neg_power * (0.5 + (x / acc) * (1.0 / _ZETA_COEFFS[11] + horner))
    accurate = (power_sum + correction) + tail
    tiny = float(_np.finfo(_np.dtype(acc.dtype)).smallest_subnormal)
    out = jnp.where(jnp.abs(q_neg_power) < jnp.abs(power_sum) * tiny, power_sum, accurate)
    out = jnp.where(x < 1.0, _np.nan, out)
    q_le_zero = q <= 0.0
    x_int = x == jnp.floor(x)
    out = jnp.where(q_le_zero & ~x_int, _np.nan, out)
    at_pole = q_le_zero & (q == jnp.floor(q))
    even = x_int & (lax.rem(x, _full(x, 2.0)) == 0.0)
    out = jnp.where(at_pole, jnp.where(even, _full(out, _np.inf), _np.nan), out)
    return jnp.where(x == 1.0, _np.inf, out)


@_at_once
def zeta(x, q=None):
    """The Hurwitz zeta function sum((n + q) ** -x), as XLA computes it
    (q=None, the Riemann zeta function, is JAX's NotImplementedError)."""
    if q is None:
        raise NotImplementedError("Riemann zeta function not implemented; pass q != None to "
                                  "compute the Hurwitz Zeta function.")
    x, q = _promote_inexact("zeta", x, q)
    return _elementwise(_zeta_impl, x, q)


def _polygamma_impl(n, x):
    """XLA's chlo.polygamma: (-1)**(n+1) n! zeta(n + 1, x), digamma at n = 0,
    NaN unless n is a natural number."""
    sign = 2.0 * lax.rem(n, _full(n, 2.0)) - 1.0
    n1 = n + 1.0
    out = sign * jnp.exp(gammaln(n1)) * _zeta_impl(n1, x)
    out = jnp.where(n == 0.0, digamma(x), out)
    return jnp.where((n != jnp.floor(n)) | (n < 0.0), _np.nan, out)


@_at_once
def polygamma(n, x):
    """The n-th derivative of digamma (n of an integer dtype, else JAX's
    ValueError)."""
    ndt = n.dtype if hasattr(n, "dtype") else jnp.result_type(n)
    if not _np.issubdtype(_np.dtype(ndt), _np.integer):
        raise ValueError(f"Argument `n` to polygamma must be of integer type. Got dtype "
                         f"{_np.dtype(ndt)}.")
    n, x = _promote_inexact("polygamma", n, x)
    return _elementwise(_polygamma_impl, n, x)


@_at_once
def multigammaln(a, d):
    """log of the multivariate gamma function: d(d-1)/4 log(pi) +
    sum_i gammaln(a - i/2), i < d (d a static int)."""
    d = _concrete_int(d, "d argument of multigammaln")
    a, d_ = _promote_inexact("multigammaln", a, d)
    constant = 0.25 * d_ * (d_ - 1.0) * math.log(math.pi)
    b = jnp.arange(d, dtype=a.dtype) / 2.0
    res = jnp.sum(gammaln(jnp.expand_dims(a, -1) - jnp.reshape(b, (1,) * len(a.shape) + (d,))),
                  axis=-1)
    return res + constant


# ---- the incomplete gamma and beta functions (XLA's igamma, igammac, betainc) ------------


def _igamma_series(ax, x, a, enabled, derivative=False):
    """XLA's igamma series sum(x**k / (a+1)...(a+k)), per element until its
    term is below eps of the sum (with derivative, of d/da)."""
    eps = _eps(a)

    def cond(v):
        return jnp.any(v[0])

    def body(v):
        en, r, c, ans, dc_da, dans_da = v
        r2 = r + 1.0
        dc_da2 = dc_da * (x / r2) - (c * x) / (r2 * r2)
        dans_da2 = dans_da + dc_da2
        c2 = c * (x / r2)
        ans2 = ans + c2
        go = en & ((jnp.abs(dc_da2 / dans_da2) if derivative else c2 / ans2) > eps)
        return (go, jnp.where(en, r2, r), jnp.where(en, c2, c), jnp.where(en, ans2, ans),
                jnp.where(en, dc_da2, dc_da), jnp.where(en, dans_da2, dans_da))
    one, zero = jnp.ones_like(a), jnp.zeros_like(a)
    _, _, _, ans, _, dans_da = lax.while_loop(cond, body,
                                              _carry((enabled, a, one, one, zero, zero), x))
    if not derivative:
        return ans * ax / a
    return ax * (ans * (jnp.log(x) - digamma(a + 1.0)) + dans_da) / a


def _igammac_fraction(ax, x, a, enabled, derivative=False):
    """XLA's continued fraction of igammac (at most 2000 steps), per element
    until its change is below eps (with derivative, of d/da)."""
    eps = _eps(a)

    def cond(v):
        return (v[5] < 2000.0) & jnp.any(v[0])

    def body(v):
        (en, ans, t, y, z, c, pkm1, qkm1, pkm2, qkm2, dpkm2, dqkm2, dpkm1, dqkm1, dans) = v
        c2 = c + 1.0
        y2 = y + 1.0
        z2 = z + 2.0
        yc = y2 * c2
        pk = pkm1 * z2 - pkm2 * yc
        qk = qkm1 * z2 - qkm2 * yc
        nz = qk != 0.0
        r = pk / qk
        t2 = jnp.where(nz, jnp.abs((ans - r) / r), 1.0)
        ans2 = jnp.where(nz, r, ans)
        dpk = dpkm1 * z2 - pkm1 - dpkm2 * yc + pkm2 * c2
        dqk = dqkm1 * z2 - qkm1 - dqkm2 * yc + qkm2 * c2
        dans2 = jnp.where(nz, (dpk - ans2 * dqk) / qk, dans)
        grad_change = jnp.where(nz, jnp.abs(dans2 - dans), 1.0)
        big = jnp.abs(pk) > 1.0 / eps
        n_pkm2, n_pkm1, n_qkm2, n_qkm1 = (jnp.where(big, u * eps, u)
                                          for u in (pkm1, pk, qkm1, qk))
        n_dpkm2, n_dqkm2, n_dpkm1, n_dqkm1 = (jnp.where(big, u * eps, u)
                                              for u in (dpkm1, dqkm1, dpk, dqk))
        go = en & ((grad_change if derivative else t2) > eps)
        sel = [jnp.where(en, n, o) for n, o in zip(
            (ans2, t2, y2, z2), (ans, t, y, z))]
        rest = [jnp.where(en, n, o) for n, o in zip(
            (n_pkm1, n_qkm1, n_pkm2, n_qkm2, n_dpkm2, n_dqkm2, n_dpkm1, n_dqkm1, dans2),
            (pkm1, qkm1, pkm2, qkm2, dpkm2, dqkm2, dpkm1, dqkm1, dans))]
        return (go, *sel, c2, *rest)
    y = 1.0 - a
    z = x + y + 1.0
    pkm1, qkm1 = x + 1.0, z * x
    ans = pkm1 / qkm1
    zero = jnp.zeros_like(x)
    dqkm1 = -x
    dans = (zero - ans * dqkm1) / qkm1
    init = (enabled, ans, jnp.ones_like(x), y, z, jnp.zeros((), x.dtype), pkm1, qkm1,
            jnp.ones_like(x), x, zero, zero, zero, dqkm1, dans)
    v = lax.while_loop(cond, body, _carry(init, x))
    if not derivative:
        return v[1] * ax
    return ax * (v[1] * (jnp.log(x) - digamma(a)) + v[14])


def _igamma_setup(a, x):
    ax = a * jnp.log(x) - x - gammaln(a)
    underflow = ax < -math.log(float(_np.finfo(_np.dtype(a.dtype)).max))
    return jnp.exp(ax), underflow


def _igamma_impl(a, x):
    is_nan = jnp.isnan(a) | jnp.isnan(x)
    x_inf, a_inf = x == _np.inf, a == _np.inf
    a_zero, x_zero = a == 0.0, x == 0.0
    domain_error = (x < 0.0) | (a < 0.0) | (a_zero & x_zero) | (a_inf & x_inf) | is_nan
    use_igammac = (x >= 1.0) & (x > a)
    ax, underflow = _igamma_setup(a, x)
    enabled = ~(x_zero | domain_error | underflow | x_inf | a_inf)
    out = jnp.where(use_igammac, 1.0 - _igammac_fraction(ax, x, a, enabled & use_igammac),
                    _igamma_series(ax, x, a, enabled & ~use_igammac))
    out = jnp.where(a_inf, 0.0, out)
    out = jnp.where(x_zero, 0.0, out)
    out = jnp.where(x_inf, 1.0, out)
    return jnp.where(domain_error, _np.nan, out)


def _igammac_impl(a, x):
    is_nan = jnp.isnan(a) | jnp.isnan(x)
    x_inf, a_inf = x == _np.inf, a == _np.inf
    a_zero, x_zero = a == 0.0, x == 0.0
    domain_error = (x < 0.0) | (a < 0.0) | (a_zero & x_zero) | (a_inf & x_inf) | is_nan
    use_igamma = (x < 1.0) | (x < a)
    ax, underflow = _igamma_setup(a, x)
    enabled = ~(domain_error | underflow | x_inf | a_zero | a_inf)
    out = jnp.where(use_igamma, 1.0 - _igamma_series(ax, x, a, enabled & use_igamma),
                    _igammac_fraction(ax, x, a, enabled & ~use_igamma))
    out = jnp.where(a_inf, 1.0, out)
    out = jnp.where(x_inf | a_zero, 0.0, out)
    return jnp.where(domain_error, _np.nan, out)


def _igamma_grad_a_impl(a, x):
    is_nan = jnp.isnan(a) | jnp.isnan(x)
    x_zero = x == 0.0
    domain_error = (x < 0.0) | (a <= 0.0)
    use_igammac = (x > 1.0) & (x > a)
    ax, underflow = _igamma_setup(a, x)
    enabled = ~(x_zero | domain_error | underflow | is_nan)
    out = jnp.where(use_igammac,
                    -_igammac_fraction(ax, x, a, enabled & use_igammac, derivative=True),
                    _igamma_series(ax, x, a, enabled & ~use_igammac, derivative=True))
    out = jnp.where(x_zero, 0.0, out)
    return jnp.where(domain_error | is_nan, _np.nan, out)


def _igamma_grad_x(g, a, x):
    return g * jnp.exp(-x + (a - 1.0) * jnp.log(x) - gammaln(a))


def _tangent(rule):
    """A defjvps rule that is 0 for a constant's tangent (not a traced value)."""
    return lambda g, out, *args: rule(g, *args) if isinstance(g, Tracer) else 0.0


_igamma = custom_jvp(lambda a, x: _elementwise(_igamma_impl, a, x))
_igamma.defjvps(_tangent(lambda g, a, x: g * _elementwise(_igamma_grad_a_impl, a, x)),
                _tangent(_igamma_grad_x))
_igammac = custom_jvp(lambda a, x: _elementwise(_igammac_impl, a, x))
_igammac.defjvps(_tangent(lambda g, a, x: -g * _elementwise(_igamma_grad_a_impl, a, x)),
                 _tangent(lambda g, a, x: -_igamma_grad_x(g, a, x)))


@_at_once
def gammainc(a, x):
    """The regularized lower incomplete gamma function P(a, x), as XLA's
    igamma: the series where x < 1 or x <= a, 1 - the continued fraction
    of igammac elsewhere; NaN outside a >= 0, x >= 0. Differentiable in a
    and x (JAX's derivative rules)."""
    a, x = _promote_inexact("gammainc", a, x)
    return _igamma(a, x)


@_at_once
def gammaincc(a, x):
    """The regularized upper incomplete gamma function Q(a, x) = 1 - P(a,
    x), as XLA's igammac (the continued fraction where x >= 1 and x >= a,
    1 - the series elsewhere)."""
    a, x = _promote_inexact("gammaincc", a, x)
    return _igammac(a, x)


def _lentz(num_iterations, small, threshold, numerator, denominator, inputs):
    """The modified Lentz method of XLA's betainc: the continued fraction
    until every element's step changes it by less than threshold."""
    pd0 = denominator(0, *inputs)
    h = jnp.where(jnp.abs(pd0) < small, small, pd0)

    def cond(v):
        return (v[0] < num_iterations) & v[1]

    def body(v):
        it, _, c, d, h = v
        pn, pd = numerator(it, *inputs), denominator(it, *inputs)
        c = pd + pn / c
        c = jnp.where(jnp.abs(c) < small, small, c)
        d = pd + pn * d
        d = jnp.where(jnp.abs(d) < small, small, d)
        d = 1.0 / d
        delta = c * d
        return (it + 1, jnp.any(jnp.abs(delta - 1.0) >= threshold), c, d, h * delta)
    init = (jnp.full((), 1, dtype=_np.int32), jnp.full((), True), h, jnp.zeros_like(h), h)
    return lax.while_loop(cond, body, _carry(init, inputs[-1]))[4]


def _betainc_numerator(it, a, b, x):
    """The partial numerators of the incomplete beta's fraction (DLMF
    8.17.22), 1 at the first step."""
    m = (it - 1) // 2
    mf = jnp.astype(m, a.dtype)
    zero_num = -(a + b) * x / (a + 1.0)
    even = jnp.where(m == 0, zero_num,
                     -(a + mf) * (a + b + mf) * x / ((a + 2.0 * mf) * (a + 2.0 * mf + 1.0)))
    odd = mf * (b - mf) * x / ((a + 2.0 * mf - 1.0) * (a + 2.0 * mf))
    return jnp.where(it == 1, _full(x, 1.0), jnp.where(it % 2 == 0, even, odd))


def _betainc_denominator(it, a, b, x):
    return _full(x, 0.0) if isinstance(it, int) and it == 0 else _full(x, 1.0)


def _betainc_impl(a, b, x):
    dt = _np.dtype(a.dtype)
    a_zero = (a == 0.0) | (b == _np.inf)
    b_zero = (b == 0.0) | (a == _np.inf)
    x_zero, x_one = x == 0.0, x == 1.0
    is_nan = jnp.isnan(a) | jnp.isnan(b) | jnp.isnan(x)
    result_zero = (b_zero & ~x_one) | (a_zero & x_zero)
    result_one = (a_zero & ~x_zero) | (b_zero & x_one)
    result_nan = (a < 0.0) | (b < 0.0) | (x < 0.0) | (x > 1.0) | (a_zero & b_zero) | is_nan
    fast = x < (a + 1.0) / (a + b + 2.0)  # else by the symmetry I_x(a, b) = 1 - I_1-x(b, a)
    a, b = jnp.where(fast, a, b), jnp.where(fast, b, a)
    x = jnp.where(fast, x, 1.0 - x)
    eps = float(_np.finfo(dt).eps)
    fraction = _lentz(200 if dt == _np.float32 else 600, eps / 2, eps / 2, _betainc_numerator,
                      _betainc_denominator, (a, b, x))
    very_small = float(_np.finfo(dt).tiny) * 2
    lbeta_small_a = gammaln(b) - gammaln(a + b)
    lbeta = gammaln(a) + lbeta_small_a
    factor = jnp.where(a < very_small, jnp.exp(jnp.log1p(-x) * b - lbeta_small_a),
                       jnp.exp(jnp.log(x) * a + jnp.log1p(-x) * b - lbeta) / a)
    out = fraction * factor
    out = jnp.where(fast, out, 1.0 - out)
    out = jnp.where(result_zero, 0.0, out)
    out = jnp.where(result_one, 1.0, out)
    return jnp.where(result_nan, _np.nan, out)


def _betainc_grad_x(g, a, b, x):
    lbeta = gammaln(a) + gammaln(b) - gammaln(a + b)
    return g * jnp.exp((b - 1.0) * jnp.log1p(-x) + (a - 1.0) * jnp.log(x) - lbeta)


_betainc = custom_jvp(lambda a, b, x: _elementwise(_betainc_impl, a, b, x))
# JAX refuses the derivative in a and b (a ValueError); here it is NaN
_betainc.defjvps(_tangent(lambda g, a, b, x: g * _np.nan),
                 _tangent(lambda g, a, b, x: g * _np.nan), _tangent(_betainc_grad_x))


@_at_once
def betainc(a, b, x):
    """The regularized incomplete beta function I_x(a, b), as XLA's: the
    continued fraction by Lentz's method (200 steps at most in float32,
    600 in float64), by symmetry where x >= (a + 1) / (a + b + 2).
    Differentiable in x (JAX's rule); JAX has no derivative in a and b."""
    a, b, x = _promote_inexact("betainc", a, b, x)
    return _betainc(a, b, x)


# ---- Bessel functions, exponential integrals, Spence, hypergeometric 1F1 ----------------


@_at_once
def i0e(x):
    """exp(-|x|) I0(x) (lax.bessel_i0e)."""
    return lax.bessel_i0e(_float(x, "i0e"))


@_at_once
def i0(x):
    """I0(x) = exp(|x|) i0e(x)."""
    x = _float(x, "i0")
    return jnp.exp(jnp.abs(x)) * lax.bessel_i0e(x)


@_at_once
def i1e(x):
    """exp(-|x|) I1(x) (lax.bessel_i1e)."""
    return lax.bessel_i1e(_float(x, "i1e"))


@_at_once
def i1(x):
    """I1(x) = exp(|x|) i1e(x)."""
    x = _float(x, "i1")
    return jnp.exp(jnp.abs(x)) * lax.bessel_i1e(x)


# Cephes' ei.c rational fits of Ei on (0, 2], (2, 4], (4, 8], ..., (32, 64] and beyond
_EXPINT = (
    ((-5.350447357812542947283e0, 2.185049168816613393830e2, -4.176572384826693777058e3,
      5.541176756393557601232e4, -3.313381331178144034309e5, 1.592627163384945414220e6),
     (1.0, -5.250547959112862969197e1, 1.259616186786790571525e3, -1.756549581973534652631e4,
      1.493062117002725991967e5, -7.294949239640527645655e5, 1.592627163384945429726e6)),
    ((1.981808503259689673238e-2, -1.271645625984917501326e0, -2.088160335681228318920e0,
      2.755544509187936721172e0, -4.409507048701600257171e-1, 4.665623805935891391017e-2,
      -1.545042679673485262580e-3, 7.059980605299617478514e-5),
     (1.0, 1.476498670914921440652e0, 5.629177174822436244827e-1, 1.699017897879307263248e-1,
      2.291647179034212017463e-2, 4.450150439728752875043e-3, 1.727439612206521482874e-4,
      3.953167195549672482304e-5)),
    ((-1.373215375871208729803e0, -7.084559133740838761406e-1, 1.580806855547941010501e0,
      -2.601500427425622944234e-1, 2.994674694113713763365e-2, -1.038086040188744005513e-3,
      4.371064420753005429514e-5, 2.141783679522602903795e-6),
     (1.0, 8.585231423622028380768e-1, 4.483285822873995129957e-1, 7.687932158124475434091e-2,
      2.449868241021887685904e-2, 8.832165941927796567926e-4, 4.590952299511353531215e-4,
      -4.729848351866523044863e-6, 2.665195537390710170105e-6)),
    ((-2.106934601691916512584e0, 1.732733869664688041885e0, -2.423619178935841904839e-1,
      2.322724180937565842585e-2, 2.372880440493179832059e-4, -8.343219561192552752335e-5,
      1.363408795605250394881e-5, -3.655412321999253963714e-7, 1.464941733975961318456e-8,
      6.176407863710360207074e-10),
     (1.0, -2.298062239901678075778e-1, 1.105077041474037862347e-1, -1.566542966630792353556e-2,
      2.761106850817352773874e-3, -2.089148012284048449115e-4, 1.708528938807675304186e-5,
      -4.459311796356686423199e-7, 1.394634930353847498145e-8, 6.150865933977338354138e-10)),
    ((-2.458119367674020323359e-1, -1.483382253322077687183e-1, 7.248291795735551591813e-2,
      -1.348315687380940523823e-2, 1.342775069788636972294e-3, -7.942465637159712264564e-5,
      2.644179518984235952241e-6, -4.239473659313765177195e-8),
     (1.0, -1.044225908443871106315e-1, -2.676453128101402655055e-1, 9.695000254621984627876e-2,
      -1.601745692712991078208e-2, 1.496414899205908021882e-3, -8.462452563778485013756e-5,
      2.728938403476726394024e-6, -4.239462431819542051337e-8)),
    ((1.212561118105456670844e-1, -5.823133179043894485122e-1, 2.348887314557016779211e-1,
      -3.040034318113248237280e-2, 1.510082146865190661777e-3, -2.523137095499571377122e-5),
     (1.0, -1.002252150365854016662e0, 2.928709694872224144953e-1, -3.337004338674007801307e-2,
      1.560544881127388842819e-3, -2.523137093603234562648e-5)),
    ((-7.657847078286127362028e-1, 6.886192415566705051750e-1, -2.132598113545206124553e-1,
      3.346107552384193813594e-2, -3.076541477344756050249e-3, 1.747119316454907477380e-4,
      -6.103711682274170530369e-6, 1.218032765428652199087e-7, -1.086076102793290233007e-9),
     (1.0, -1.888802868662308731041e0, 1.066691687211408896850e0, -2.751915982306380647738e-1,
      3.930852688233823569726e-2, -3.414684558602365085394e-3, 1.866844370703555398195e-4,
      -6.345146083130515357861e-6, 1.239754287483206878024e-7, -1.086076102793126632978e-9)))


# Cephes' sici.c: SN, SD, CN, CD (x <= 4), then FN4, FD4, GN4, GD4 (x < 8), FN8, FD8, GN8, GD8
_SICI = (
    (-8.39167827910303881427E-11, 4.62591714427012837309E-8, -9.75759303843632795789E-6,
     9.76945438170435310816E-4, -4.13470316229406538752E-2, 1.00000000000000000302E0),
    (2.03269266195951942049E-12, 1.27997891179943299903E-9, 4.41827842801218905784E-7,
     9.96412122043875552487E-5, 1.42085239326149893930E-2, 9.99999999999999996984E-1),
    (2.02524002389102268789E-11, -1.35249504915790756375E-8, 3.59325051419993077021E-6,
     -4.74007206873407909465E-4, 2.89159652607555242092E-2, -1.00000000000000000080E0),
    (4.07746040061880559506E-12, 3.06780997581887812692E-9, 1.23210355685883423679E-6,
     3.17442024775032769882E-4, 5.10028056236446052392E-2, 4.00000000000000000080E0),
    (4.23612862892216586994E0, 5.45937717161812843388E0, 1.62083287701538329132E0,
     1.67006611831323023771E-1, 6.81020132472518137426E-3, 1.08936580650328664411E-4,
     5.48900223421373614008E-7),
    (1, 8.16496634205391016773E0, 7.30828822505564552187E0, 1.86792257950184183883E0,
     1.78792052963149907262E-1, 7.01710668322789753610E-3, 1.10034357153915731354E-4,
     5.48900252756255700982E-7),
    (8.71001698973114191777E-2, 6.11379109952219284151E-1, 3.97180296392337498885E-1,
     7.48527737628469092119E-2, 5.38868681462177273157E-3, 1.61999794598934024525E-4,
     1.97963874140963632189E-6, 7.82579040744090311069E-9),
    (1, 1.64402202413355338886E0, 6.66296701268987968381E-1, 9.88771761277688796203E-2,
     6.22396345441768420760E-3, 1.73221081474177119497E-4, 2.02659182086343991969E-6,
     7.82579218933534490868E-9),
    (4.55880873470465315206E-1, 7.13715274100146711374E-1, 1.60300158222319456320E-1,
     1.16064229408124407915E-2, 3.49556442447859055605E-4, 4.86215430826454749482E-6,
     3.20092790091004902806E-8, 9.41779576128512936592E-11, 9.70507110881952024631E-14),
    (1.0, 9.17463611873684053703E-1, 1.78685545332074536321E-1, 1.22253594771971293032E-2,
     3.58696481881851580297E-4, 4.92435064317881464393E-6, 3.21956939101046018377E-8,
     9.43720590350276732376E-11, 9.70507110881952025725E-14),
    (6.97359953443276214934E-1, 3.30410979305632063225E-1, 3.84878767649974295920E-2,
     1.71718239052347903558E-3, 3.48941165502279436777E-5, 3.47131167084116673800E-7,
     1.70404452782044526189E-9, 3.85945925430276600453E-12, 3.14040098946363334640E-15),
    (1.0, 1.68548898811011640017E0, 4.87852258695304967486E-1, 4.67913194259625806320E-2,
     1.90284426674399523638E-3, 3.68475504442561108162E-5, 3.57043223443740838771E-7,
     1.72693748966316146736E-9, 3.87830166023954706752E-12, 3.14040098946363335242E-15))


def _expi_pos(x):
    """Ei(x) for x >= 0 by the interval's fit (x > 64, and 0, by the last)."""
    num, den = _EXPINT[0]
    out = x * (_polyval(num, x) / _polyval(den, x)) + float(_np.euler_gamma) + jnp.log(x)
    out = jnp.where((0.0 < x) & (x <= 2.0), out, 0.0)
    w = 1.0 / x
    for i, (num, den) in enumerate(_EXPINT[1:], 1):
        f = w * (_polyval(num, w) / _polyval(den, w)) + 1.0
        v = jnp.exp(x) * w * f
        inside = (2.0 ** i < x) & (x <= 2.0 ** (i + 1)) if i < 6 else ~(
            (0.0 < x) & (x <= 64.0))
        out = jnp.where(inside, v, out)
    return out


def _expi_impl(x):
    return jnp.where(x < 0, -exp1(-x), _expi_pos(x))


_expi = custom_jvp(_expi_impl)
_expi.defjvps(lambda g, out, x: jnp.exp(x) / x * g)


@_at_once
def expi(x):
    """The exponential integral Ei(x): Cephes' rational fits for x >= 0,
    -exp1(-x) below; its derivative exp(x) / x."""
    x, = _promote_inexact("expi", x)
    return _expi(x)


def _expn1(x, n):
    """E_n(x) by its power series (Cephes' expn for x <= 1), with
    psi(n) = -euler - log x + sum_{i<n} 1/i."""
    eps = _eps(x)
    psi0 = -float(_np.euler_gamma) - jnp.log(x)
    _, psi = _while_each(lambda v: v[0] < n, lambda v: (v[0] + 1.0, v[1] + 1.0 / v[0]),
                         (jnp.ones_like(n), psi0), x)
    n1 = jnp.where(n == 1.0, 2.0, n)
    z = -x
    init = (jnp.zeros_like(x), jnp.ones_like(x), 1.0 - n,
            jnp.where(n == 1.0, 0.0, 1.0 / (1.0 - n1)), _full(x, _np.inf))

    def body(v):
        xk, yk, pk, ans, t = v
        xk = xk + 1.0
        yk = yk * z / xk
        pk = pk + 1.0
        ans = ans + jnp.where(pk != 0.0, yk / pk, 0.0)
        t = jnp.where(ans != 0.0, jnp.abs(yk / ans), 1.0)
        return xk, yk, pk, ans, t
    ans = _while_each(lambda v: (x > 0.0) & (v[4] > eps), body, init, x)[3]
    return jnp.power(z, n - 1.0) * psi / jnp.exp(gammaln(n)) - ans


def _expn2(x, n):
    """E_n(x) by its continued fraction (Cephes' expn for x > 1)."""
    eps = _eps(x)
    big = 1.44115188075855872e17
    init = (jnp.ones_like(n), jnp.ones_like(x), x, jnp.ones_like(x), x + n, 1.0 / (x + n),
            _full(x, _np.inf), jnp.zeros_like(x))

    def body(v):
        k, pkm2, qkm2, pkm1, qkm1, ans, t, r = v
        k = k + 1.0
        odd = jnp.mod(k, 2.0) == 1.0
        yk = jnp.where(odd, 1.0, x)
        xk = jnp.where(odd, n + (k - 1.0) / 2.0, k / 2.0)
        pk = pkm1 * yk + pkm2 * xk
        qk = qkm1 * yk + qkm2 * xk
        nz = qk != 0.0
        r = jnp.where(nz, pk / qk, r)
        t = jnp.where(nz, jnp.abs((ans - r) / r), 1.0)
        ans = jnp.where(nz, r, ans)
        is_big = jnp.abs(pk) > big
        pkm2, pkm1, qkm2, qkm1 = (jnp.where(is_big, u / big, u) for u in (pkm1, pk, qkm1, qk))
        return k, pkm2, qkm2, pkm1, qkm1, ans, t, r
    ans = _while_each(lambda v: (x > 0.0) & (v[6] > eps), body, init, x)[5]
    return ans * jnp.exp(-x)


def _expn3(x, n):
    """E_n(x) by its asymptotic expansion in n (n >= 5000)."""
    xk = x + n
    yk = 1.0 / (xk * xk)
    ans = yk * n * (6.0 * x * x - 8.0 * n * x + n * n)
    ans = yk * (ans + n * (n - 2.0 * x))
    ans = yk * (ans + n)
    return (ans + 1.0) * jnp.exp(-x) / xk


def _expn_impl(n, x):
    shape = tuple(_np.broadcast_shapes(tuple(n.shape), tuple(x.shape)))
    n, x = jnp.broadcast_to(n, shape), jnp.broadcast_to(x, shape)
    conds = [(n < 0.0) | (x < 0.0), (x == 0.0) & (n < 2.0), (x == 0.0) & (n >= 2.0),
             (n == 0.0) & (x >= 0.0), n >= 5000.0, x > 1.0]
    # jnp.piecewise: the last true condition picks the branch, _expn1 where none is
    pick = jnp.full(shape, 6, dtype=_np.int32)
    for i, cnd in enumerate(conds):
        pick = jnp.where(cnd, i, pick)
    n1 = jnp.where(n == 1.0, n + n, n)
    on2, on1 = pick == 5, pick == 6  # the loops run on safe arguments elsewhere
    out = _expn1(jnp.where(on1, x, 0.5), jnp.where(on1, n, 1.0))
    for i, v in enumerate([_full(x, _np.nan), _full(x, _np.inf), 1.0 / n1, jnp.exp(-x) / x,
                           _expn3(x, n), _expn2(jnp.where(on2, x, 2.0), jnp.where(on2, n, 1.0))]):
        out = jnp.where(pick == i, v, out)
    return out


_expn = custom_jvp(lambda n, x: _elementwise(_expn_impl, n, x), nondiff_argnums=(0,))
_expn.defjvp(lambda n, primals, tangents: (_expn(n, primals[0]),
                                           -tangents[0] * _expn(n - 1.0, primals[0])))


@_at_once
def expn(n, x):
    """The generalized exponential integral E_n(x), as JAX's (Cephes'
    expn): NaN for n < 0 or x < 0, the power series for x <= 1, the
    continued fraction beyond, the asymptotic expansion for n >= 5000;
    its derivative in x, -E_{n-1}(x)."""
    n, x = _promote_inexact("expn", n, x)
    return _expn(n, x)


@_at_once
def exp1(x):
    """E_1(x) = expn(1, x)."""
    x, = _promote_inexact("exp1", x)
    return _expn(jnp.ones_like(x), x)


def _sici_fits(x):
    """(Si, Ci) of x >= 0 by Cephes' sici.c fits: rational series up to 4,
    the auxiliary f and g asymptotics (two fits, split at 8) up to 1e9,
    pi/2 - cos(x)/x and sin(x)/x beyond."""
    t = x * x
    si_s = jnp.where(x == 0, 0.0, x * _polyval(_SICI[0], t) / _polyval(_SICI[1], t))
    ci_s = jnp.where(x == 0, -_np.inf, float(_np.euler_gamma) + jnp.log(x) +
                     t * _polyval(_SICI[2], t) / _polyval(_SICI[3], t))
    s, c = jnp.sin(x), jnp.cos(x)
    z = 1.0 / (x * x)
    fn4, fd4, gn4, gd4, fn8, fd8, gn8, gd8 = _SICI[4:]
    f4 = _polyval(fn4, z) / (x * _polyval(fd4, z))
    g4 = z * _polyval(gn4, z) / _polyval(gd4, z)
    f8 = _polyval(fn8, z) / (x * _polyval(fd8, z))
    g8 = z * _polyval(gn8, z) / _polyval(gd8, z)
    lt8 = x < 8.0
    f, g = jnp.where(lt8, f4, f8), jnp.where(lt8, g4, g8)
    si_a, ci_a = math.pi / 2 - f * c - g * s, f * s - g * c
    inf = x == _np.inf
    si_far = jnp.where(inf, math.pi / 2, math.pi / 2 - c / x)
    ci_far = jnp.where(inf, 0.0, s / x)
    near, mid = x <= 4.0, (x > 4.0) & (x <= 1e9)
    return (jnp.where(near, si_s, jnp.where(mid, si_a, si_far)),
            jnp.where(near, ci_s, jnp.where(mid, ci_a, ci_far)))


def _sici_impl(x):
    si, ci = _sici_fits(jnp.abs(x))
    return jnp.sign(x) * si, jnp.where(x == -_np.inf, _np.nan, ci)


_sici = custom_jvp(_sici_impl)
_sici.defjvp(lambda primals, tangents: (_sici(primals[0]), (
    jnp.sinc(primals[0] / math.pi) * tangents[0], jnp.cos(primals[0]) / primals[0] * tangents[0])))


@_at_once
def sici(x):
    """(Si(x), Ci(x)), the sine and cosine integrals, by Cephes' fits as
    JAX's (Ci of |x|; NaN at -inf); derivatives sin(x)/x and cos(x)/x."""
    x, = _promote_inexact("sici", x)
    return _sici(x)


_OWENS_T_PTS = (0.0035082039676451715, 0.031279042338030754, 0.085266826283219451,
                0.16245071730812277, 0.25851196049125435, 0.36807553840697534,
                0.48501092905604697, 0.60277514152618577, 0.71477884217753227,
                0.81475510988760099, 0.89711029755948966, 0.95723808085944262,
                0.99178832974629704)
_OWENS_T_WTS = (0.018831438115323503, 0.018567086243977649, 0.018042093461223386,
                0.017263829606398753, 0.016243219975989857, 0.014994592034116705,
                0.013535474469662088, 0.011886351605820165, 0.010070377242777432,
                0.0081130545742299587, 0.0060419009528470239, 0.0038862217010742058,
                0.0016793031084546090)


def _owens_t_impl(h, a):
    """JAX's: 13-point quadrature of the integral (Patefield and Tandy's
    T5) on |a| <= 1, by T(h, a) = ... - T(ah, 1/a) beyond; exact at h = 0
    and a = 1."""
    h = jnp.abs(h)
    abs_a = jnp.abs(a)
    hn = h / math.sqrt(2)
    le1 = abs_a <= 1.0
    ma, mh = jnp.where(le1, abs_a, 1.0 / abs_a), jnp.where(le1, h, abs_a * h)
    a2, h2 = ma * ma, mh * mh
    quad = jnp.zeros_like(ma)
    for t, w in zip(_OWENS_T_PTS, _OWENS_T_WTS):
        r = a2 * t
        quad = quad + w * (jnp.exp(-0.5 * h2 * (1.0 + r)) / (1.0 + r))
    out = ma * quad
    out = jnp.where(mh == 0.0, jnp.arctan(ma) / (2 * math.pi), out)
    out = jnp.where(ma == 1.0, 0.125 * erfc(-mh / math.sqrt(2)) * erfc(mh / math.sqrt(2)), out)
    normh, normah = erfc(hn), erfc(abs_a * hn)
    beyond = jnp.where(abs_a * h <= 0.67, 0.25 - 0.25 * jnp.erf(hn) * jnp.erf(abs_a * hn) - out,
                       0.25 * (normh + normah - normh * normah) - out)
    out = jnp.sign(a) * jnp.where(abs_a > 1.0, beyond, out)
    return jnp.where(jnp.isnan(a) | jnp.isnan(h), _np.nan, out)


def _owens_t_jvp(primals, tangents):
    h, a = primals
    dh, da = tangents
    d_h = -jnp.exp(-0.5 * (h * h)) * jnp.erf(a * h / math.sqrt(2)) / (2.0 * math.sqrt(2 * math.pi))
    d_a = jnp.exp(-0.5 * (a * a + 1.0) * (h * h)) / (2.0 * math.pi * (a * a + 1.0))
    return _owens_t(h, a), d_h * dh + d_a * da


_owens_t = custom_jvp(_owens_t_impl)
_owens_t.defjvp(_owens_t_jvp)


@_at_once
def owens_t(h, a):
    """Owen's T function (1/2pi) int_0^a exp(-h**2 (1+x**2)/2) / (1+x**2)
    dx, as JAX's (its derivatives in h and a)."""
    h, a = _promote_inexact("owens_t", h, a)
    return _owens_t(h, a)


@_at_once
def bessel_jn(z, *, v, n_iter=50):
    """J_0(z) ... J_v(z), shape (v + 1, *z.shape): JAX's (Zhang and Jin's)
    backward recurrence from order n_iter, normalised by J_0 + 2 sum of the
    even orders = 1 (v and n_iter static ints)."""
    v = _concrete_int(v, "Argument v of bessel_jn.")
    n_iter = _concrete_int(n_iter, "Argument n_iter of bessel_jn.")
    z = _float(z, "bessel_jn")
    f0, f1, bs = jnp.zeros_like(z), _full(z, 1e-16), jnp.zeros_like(z)
    vals = [None] * (n_iter + 1)
    for k in range(n_iter, -1, -1):
        f = 2.0 * (k + 1.0) * f1 / z - f0
        if k % 2 == 0:
            bs = bs + 2.0 * f
        f0, f1 = f1, f
        vals[k] = f
    return jnp.stack(vals[:v + 1]) / (bs - vals[0])


_SPENCE_A = (4.65128586073990045278E-5, 7.31589045238094711071E-3, 1.33847639578309018650E-1,
             8.79691311754530315341E-1, 2.71149851196553469920E0, 4.25697156008121755724E0,
             3.29771340985225106936E0, 1.00000000000000000126E0)
_SPENCE_B = (6.90990488912553276999E-4, 2.54043763932544379113E-2, 2.82974860602568089943E-1,
             1.41172597751831069617E0, 3.63800533345137075418E0, 5.03278880143316990390E0,
             3.54771340985225096217E0, 9.99999999999999998740E-1)


@_at_once
def spence(x):
    """Spence's function int_1^x log(t) / (1 - t) dt for x >= 0 (NaN below,
    as JAX's), by Cephes' rational fit; float32 and float64 only (else
    JAX's TypeError)."""
    if not isinstance(x, (Array, Tracer)):
        x = jnp.asarray(x)
    if _np.dtype(x.dtype) not in (_np.float32, _np.float64) or lax._dtype_name(x) == "bfloat16":
        raise TypeError(f"x.dtype={lax._dtype_name(x)} is not supported, see docstring for "
                        f"supported types.")
    x2 = x > 2.0
    y = jnp.where(x2, 1.0 / x, x)
    g15, l05 = y > 1.5, y < 0.5
    flip = x2 | g15
    w = jnp.where(l05, -y, jnp.where(g15, 1.0 / y - 1.0, y - 1.0))
    s = -w * _polyval(_SPENCE_A, w) / _polyval(_SPENCE_B, w)
    s = jnp.where(l05, math.pi ** 2 / 6.0 - jnp.log(y) * jnp.log(1.0 - y) - s, s)
    ly = jnp.log(y)
    s = jnp.where(flip, -0.5 * (ly * ly) - s, s)
    s = jnp.where(x == 0.0, math.pi ** 2 / 6, s)
    s = jnp.where(x == 1.0, 0.0, s)
    return jnp.where(x < 0.0, _np.nan, s)


@_at_once
def poch(z, m):
    """The Pochhammer symbol gamma(z + m) / gamma(z), 1 where m is 0."""
    z, m = _promote_inexact("poch", z, m)
    return jnp.where(m == 0.0, _full(z, 1.0), gamma(z + m) / gamma(z))


def _hyp1f1_sum(first, term, step, add=lambda k, t: t):
    """JAX's series loops of hyp1f1, per element: sum += add(k, term), term
    *= step(k), k += 1 while k < 250 and |term| / |sum| > eps."""
    eps = _eps(term)

    def body(v):
        total, k, t = v
        return total + add(k, t), k + 1.0, t * step(k)
    return _while_each(lambda v: (v[1] < 250.0) & (jnp.abs(v[2]) / jnp.abs(v[0]) > eps), body,
                       (first, jnp.ones_like(term), term), term)[0]


def _hyp1f1_serie(a, b, x, add=lambda k, t: t, first=1.0):
    """The Taylor series (Pearson, Olver and Porter 2014, 3.2)."""
    return _hyp1f1_sum(_full(x, first), a / b * x, lambda k: (a + k) / (b + k) * x / (k + 1.0),
                       add)


def _hyp1f1_impl(a, b, x):
    small = jnp.abs(x) < 100.0
    serie = _hyp1f1_serie(a, b, jnp.where(small, x, 0.0))  # each loop on safe arguments
    aa, xa = jnp.where(small, 1.0, a), jnp.where(small, 100.0, x)  # elsewhere
    s = _hyp1f1_sum(_full(x, 1.0), (b - aa) * (1.0 - aa) / xa,
                    lambda k: (b - aa + k) * (1.0 - aa + k) / (k + 1.0) / xa)
    asymptotic = gamma(b) / gamma(aa) * jnp.exp(xa) * jnp.power(xa, aa - b) * s
    out = jnp.where(small, serie, asymptotic)
    out = jnp.where((b == 0.0) & (a != 0.0), _np.inf, out)
    out = jnp.where((a == b) & (a != 0.0), jnp.exp(x), out)
    return jnp.where(a == 0.0, 1.0, out)


def _hyp1f1_da(a, b, x):
    da = digamma(a)
    return _hyp1f1_serie(a, b, x, lambda k, t: t * (digamma(a + k) - da), 0.0)


def _hyp1f1_db(a, b, x):
    db = digamma(b)
    return _hyp1f1_serie(a, b, x, lambda k, t: t * (db - digamma(b + k)), 0.0)


_hyp1f1 = custom_jvp(lambda a, b, x: _elementwise(_hyp1f1_impl, a, b, x))
_hyp1f1.defjvps(_tangent(lambda g, a, b, x: _elementwise(_hyp1f1_da, a, b, x) * g),
                _tangent(lambda g, a, b, x: _elementwise(_hyp1f1_db, a, b, x) * g),
                _tangent(lambda g, a, b, x: a / b * _hyp1f1(a + 1.0, b + 1.0, x) * g))


@_at_once
def hyp1f1(a, b, x):
    """The confluent hypergeometric function 1F1(a; b; x), as JAX's: its
    Taylor series for |x| < 100, the asymptotic expansion beyond (each at
    most 250 terms), 1 where a is 0 (also a = b = 0), exp(x) where a = b,
    inf where b is 0; JAX's derivative series in a and b."""
    a, b, x = _promote_inexact("hyp1f1", a, b, x)
    return _hyp1f1(a, b, x)


def bernoulli(n):
    """The Bernoulli numbers B_0 ... B_n (B_1 = -1/2) in float32, by JAX's
    Chowla-Hartung sums (n static: a traced n is JAX's
    ConcretizationTypeError)."""
    n = _concrete_int(n, "Argument n of bernoulli")
    if n < 0:
        raise ValueError("n must be a non-negative integer.")
    f32 = _np.float32
    b3 = _np.array([1, -1 / 2, 1 / 6], f32)
    if n < 3:
        return jnp.asarray(b3[:n + 1])
    bn = _np.zeros(n + 1, f32)
    bn[:3] = b3
    m = _np.arange(4, n + 1, 2, dtype=f32)
    with _np.errstate(over="ignore", under="ignore"):
        q1 = f32(1. / _np.pi ** 2) * _np.cumprod(-(m - f32(1)) * m / f32(4) / f32(_np.pi ** 2),
                                                 dtype=f32)
        k = _np.arange(2, 50, dtype=f32)
        q2 = _np.sum(k[:, None] ** -m[None, :], axis=0, dtype=f32)
        bn[4::2] = q1 * (f32(1) + q2)
    return jnp.asarray(bn)


@_at_once
def boxcox(x, lmbda):
    """(x ** lmbda - 1) / lmbda, log(x) where lmbda is 0 (by expm1)."""
    x, lmbda = _promote_inexact("boxcox", x, lmbda)
    zero = lmbda == 0
    safe = jnp.where(zero, jnp.ones_like(lmbda), lmbda)
    lx = jnp.log(x)
    return jnp.where(zero, lx, jnp.expm1(safe * lx) / safe)


@_at_once
def boxcox1p(x, lmbda):
    """boxcox of 1 + x (by log1p)."""
    x, lmbda = _promote_inexact("boxcox1p", x, lmbda)
    zero = lmbda == 0
    safe = jnp.where(zero, jnp.ones_like(lmbda), lmbda)
    lx = jnp.log1p(x)
    return jnp.where(zero, lx, jnp.expm1(safe * lx) / safe)


def softmax(x, /, *, axis=None):
    """exp(x) / sum(exp(x)) over axis (all axes by default), as jax.nn's."""
    return _nn.softmax(x, axis=axis)


def log_softmax(x, /, *, axis=None):
    """log of softmax over axis (all axes by default), as jax.nn's."""
    return _nn.log_softmax(x, axis=axis)


@_at_once
def ndtr(x):
    """The standard normal CDF."""
    x = _float(x, "ndtr")
    return 0.5 * erfc(-x / math.sqrt(2))


def ndtri(p):
    """The standard normal quantile function, JAX's: Cephes' piecewise
    rational approximations (float32 and float64 only: JAX's TypeError for
    any other dtype), accurate in both tails (p down to the smallest
    normal number), -inf at 0 and inf at 1; differentiated through them."""
    dtype = _np.dtype(p.dtype) if hasattr(p, "dtype") else \
        _np.dtype(_np.float32) if isinstance(p, float) else _np.asarray(p).dtype
    if dtype == _np.int64:  # JAX canonicalizes it (its x64 off)
        dtype = _np.dtype(_np.int32)
    if dtype not in (_np.float32, _np.float64):
        raise TypeError(f"x.dtype={dtype} is not supported, see docstring for supported "
                        f"types.")
    return _ndtri(p)


# Cephes' ndtri coefficients (JAX's _ndtri's)
_NDTRI_P0 = (-5.99633501014107895267E1, 9.80010754185999661536E1, -5.66762857469070293439E1,
             1.39312609387279679503E1, -1.23916583867381258016E0)
_NDTRI_Q0 = (1.0, 1.95448858338141759834E0, 4.67627912898881538453E0, 8.63602421390890590575E1,
             -2.25462687854119370527E2, 2.00260212380060660359E2, -8.20372256168333339912E1,
             1.59056225126211695515E1, -1.18331621121330003142E0)
_NDTRI_P1 = (4.05544892305962419923E0, 3.15251094599893866154E1, 5.71628192246421288162E1,
             4.40805073893200834700E1, 1.46849561928858024014E1, 2.18663306850790267539E0,
             -1.40256079171354495875E-1, -3.50424626827848203418E-2,
             -8.57456785154685413611E-4)
_NDTRI_Q1 = (1.0, 1.57799883256466749731E1, 4.53907635128879210584E1, 4.13172038254672030440E1,
             1.50425385692907503408E1, 2.50464946208309415979E0, -1.42182922854787788574E-1,
             -3.80806407691578277194E-2, -9.33259480895457427372E-4)
_NDTRI_P2 = (3.23774891776946035970E0, 6.91522889068984211695E0, 3.93881025292474443415E0,
             1.33303460815807542389E0, 2.01485389549179081538E-1, 1.23716634817820021358E-2,
             3.01581553508235416007E-4, 2.65806974686737550832E-6, 6.23974539184983293730E-9)
_NDTRI_Q2 = (1.0, 6.02427039364742014255E0, 3.67983563856160859403E0, 1.37702099489081330271E0,
             2.16236993594496635890E-1, 1.34204006088543189037E-2, 3.28014464682127739104E-4,
             2.89247864745380683936E-6, 6.79019408009981274425E-9)


@_at_once
def _ndtri(p):
    """JAX's _ndtri: for p > exp(-2) (after complementing p above
    1 - exp(-2)) x / sqrt(2 pi) = w + w**3 P0(w**2) / Q0(w**2), w = p - 0.5;
    below, z = sqrt(-2 log p) and x = z - log(z) / z - P(1/z) / Q(1/z) / z,
    (P, Q) = (P2, Q2) where z >= 8, else (P1, Q1)."""
    if not hasattr(p, "dtype"):
        p = jnp.asarray(p)
    dt = _np.dtype(p.dtype).type
    mcp = jnp.where(p > float(dt(-_np.expm1(-2.0))), 1.0 - p, p)
    # 0 would make NaNs below (its result is not used): any harmless value in its place
    smcp = jnp.where(mcp == 0.0, _full(p, 0.5), mcp)
    w = smcp - 0.5
    ww = w * w
    big = w + w * ww * (_polyval(_NDTRI_P0, ww) / _polyval(_NDTRI_Q0, ww))
    big = big * -float(dt(_np.sqrt(2.0 * _np.pi)))
    z = jnp.sqrt(-2.0 * jnp.log(smcp))
    first = z - jnp.log(z) / z
    small = first - _polyval(_NDTRI_P2, 1 / z) / _polyval(_NDTRI_Q2, 1 / z) / z
    other = first - _polyval(_NDTRI_P1, 1 / z) / _polyval(_NDTRI_Q1, 1 / z) / z
    x = jnp.where(smcp > float(dt(_np.exp(-2.0))), big, jnp.where(z >= 8.0, small, other))
    x = jnp.where(p > float(dt(1.0 - _np.exp(-2.0))), x, -x)
    inf = _full(p, _np.inf)
    return jnp.where(p == 0.0, -inf, jnp.where(p == 1.0, inf, x))


def _log_ndtr_series(x, series_order):
    """1 + sum_{n <= series_order} (-1)**n (2n-1)!! / x**(2n)."""
    x2 = x * x
    even, odd = jnp.zeros_like(x), jnp.zeros_like(x)
    x2n = x2
    for n in range(1, series_order + 1):
        y = float(_np.prod(_np.arange(2 * n - 1, 1, -2))) / x2n
        if n % 2:
            odd = odd + y
        else:
            even = even + y
        x2n = x2n * x2
    return 1.0 + even - odd


@_at_once
def log_ndtr(x, series_order=3):
    """log of the standard normal CDF, as JAX's: -ndtr(-x) above 8
    (float32: 5), log(ndtr(x)) down to -20 (float32: -10), the asymptotic
    series of series_order terms below."""
    if not isinstance(series_order, int):
        raise TypeError("series_order must be a Python integer.")
    if series_order < 0:
        raise ValueError("series_order must be non-negative.")
    if series_order > 30:
        raise ValueError("series_order must be <= 30.")
    x = _float(x, "log_ndtr")
    if _np.dtype(x.dtype) == _np.float64:
        lower, upper = -20.0, 8.0
    elif _np.dtype(x.dtype) == _np.float32 and lax._dtype_name(x) == "float32":
        lower, upper = -10.0, 5.0
    else:
        raise TypeError(f"x.dtype={lax._dtype_name(x)} is not supported.")
    above = x > upper
    res = ndtr(jnp.where(above, -x, jnp.maximum(x, lower)))
    xl = jnp.minimum(x, lower)
    log_scale = -0.5 * (xl * xl) - jnp.log(-xl) - 0.5 * math.log(2 * math.pi)
    low = log_scale + jnp.log(_log_ndtr_series(xl, series_order))
    return jnp.where(above, -res, jnp.where(x > lower, jnp.log(res), low))
