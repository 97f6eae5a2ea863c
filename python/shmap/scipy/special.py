"""jax.scipy.special: logsumexp (b=, return_sign=), erf, erfc, erfinv,
expit, logit, xlogy, xlog1py, entr, gammaln, gamma, digamma, betaln,
ndtr, ndtri, log_ndtr, as composites.

gammaln is Lanczos' approximation (g = 7, nine terms; reflected below
1/2), to about 1e-15 relative in float64; digamma is the asymptotic series
after eight steps of the recurrence (reflected at and below 0); erfc is
erf's complement up to |x| = 1/2 and the Chebyshev fit of Numerical
Recipes' erfcc beyond (1.2e-7 relative: float32's precision, short of
float64's)."""
import math

import numpy as _np

from .. import numpy as jnp
from .. import lax
from ..numpy import _at_once

__all__ = ["logsumexp", "erf", "erfc", "erfinv", "expit", "logit", "xlogy", "xlog1py", "entr",
           "gammaln", "gamma", "digamma", "betaln", "ndtr", "ndtri", "log_ndtr"]


def _float(x):
    return x if _np.issubdtype(x.dtype, _np.floating) else jnp.astype(x, _np.float32)


@_at_once
def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """log(sum(b * exp(a))) over axis, the max taken out first; with
    return_sign, (log|sum|, its sign)."""
    a = _float(a)
    m = jnp.max(a, axis=axis, keepdims=True)
    m = jnp.where(jnp.isfinite(m), m, 0)
    e = jnp.exp(a - m)
    if b is not None:
        e = e * b
    s = jnp.sum(e, axis=axis, keepdims=True)
    sign = jnp.sign(s)
    out = jnp.log(jnp.abs(s)) + m
    if not return_sign:
        out = jnp.where(sign < 0, _np.nan, out)
    if not keepdims:
        out = jnp.squeeze(out, axis) if axis is not None else jnp.reshape(out, ())
        sign = jnp.squeeze(sign, axis) if axis is not None else jnp.reshape(sign, ())
    return (out, sign) if return_sign else out


@_at_once
def erf(x):
    return jnp.erf(_float(x))


@_at_once
def erfc(x):
    """1 - erf(x), kept accurate in the tails (see the module's note)."""
    x = _float(x)
    z = jnp.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = -z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (
        0.09678418 + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (
            1.48851587 + t * (-0.82215223 + t * 0.17087277))))))))
    tail = t * jnp.exp(poly)
    tail = jnp.where(x >= 0, tail, 2.0 - tail)
    return jnp.where(z < 0.5, 1.0 - jnp.erf(x), tail)


@_at_once
def erfinv(x):
    return lax.erf_inv(_float(x))


@_at_once
def expit(x):
    """The logistic sigmoid."""
    return lax.logistic(_float(x))


@_at_once
def logit(x):
    x = _float(x)
    return jnp.log(x / (1 - x))


@_at_once
def xlogy(x, y):
    """x * log(y), 0 where x is 0."""
    x, y = _float(x), _float(y)
    return jnp.where(x == 0, 0.0, x * jnp.log(jnp.where(x == 0, 1.0, y)))


@_at_once
def xlog1py(x, y):
    """x * log1p(y), 0 where x is 0."""
    x, y = _float(x), _float(y)
    return jnp.where(x == 0, 0.0, x * jnp.log1p(jnp.where(x == 0, 0.0, y)))


@_at_once
def entr(x):
    """-x log x for x > 0, 0 at 0, -inf below."""
    x = _float(x)
    safe = jnp.where(x > 0, x, 1.0)
    return jnp.where(x > 0, -x * jnp.log(safe), jnp.where(x == 0, 0.0, -_np.inf))


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
    x = _float(x)
    left = x < 0.5
    xr = jnp.where(left, 1 - x, x)  # both branches on safe arguments
    right = _lgamma_right(xr)
    pole = (x <= 0) & (x == jnp.floor(x))  # 0 and the negative integers
    s = jnp.abs(jnp.sin(math.pi * x))
    refl = math.log(math.pi) - jnp.log(jnp.where(pole, 1.0, s)) - right
    refl = jnp.where(pole, _np.inf, refl)
    return jnp.where(left, refl, right)


@_at_once
def gamma(x):
    """Gamma(x), its sign included (negative on (-1, 0), (-3, -2), ...)."""
    x = _float(x)
    sign = jnp.where(x > 0, 1.0, jnp.where(jnp.mod(jnp.ceil(-x), 2) == 1, -1.0, 1.0))
    return sign * jnp.exp(gammaln(x))


@_at_once
def betaln(a, b):
    """log |Beta(a, b)|."""
    return gammaln(a) + gammaln(b) - gammaln(a + b)


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
    x = _float(x)
    left = x <= 0
    xr = jnp.where(left, 1 - x, x)
    right = _digamma_right(xr)
    t = jnp.tan(math.pi * x)
    refl = right - math.pi / jnp.where(t == 0, 1.0, t)
    refl = jnp.where((x == jnp.floor(x)), _np.nan, refl)
    return jnp.where(left, refl, right)


@_at_once
def ndtr(x):
    """The standard normal CDF."""
    x = _float(x)
    return 0.5 * erfc(-x / math.sqrt(2))


@_at_once
def ndtri(p):
    """The standard normal quantile function."""
    p = _float(p)
    return math.sqrt(2) * lax.erf_inv(2 * p - 1)


@_at_once
def log_ndtr(x):
    """log of the standard normal CDF."""
    return jnp.log(ndtr(x))
