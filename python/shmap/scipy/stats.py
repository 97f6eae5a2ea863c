"""jax.scipy.stats: the normal distribution (norm) and the multivariate
normal's logpdf and pdf (multivariate_normal), as composites."""
import math
import types

from .. import linalg as _la
from .. import numpy as jnp
from ..numpy import _at_once
from . import special as _sp

__all__ = ["norm", "multivariate_normal"]


def _z(x, loc, scale):
    return (x - loc) / scale


@_at_once
def _logpdf(x, loc=0, scale=1):
    z = _z(x, loc, scale)
    return -0.5 * z * z - math.log(math.sqrt(2 * math.pi)) - jnp.log(jnp.abs(scale + 0 * z))


@_at_once
def _pdf(x, loc=0, scale=1):
    return jnp.exp(_logpdf(x, loc, scale))


@_at_once
def _cdf(x, loc=0, scale=1):
    return _sp.ndtr(_z(x, loc, scale))


@_at_once
def _logcdf(x, loc=0, scale=1):
    return _sp.log_ndtr(_z(x, loc, scale))


@_at_once
def _sf(x, loc=0, scale=1):
    return _sp.ndtr(-_z(x, loc, scale))


@_at_once
def _logsf(x, loc=0, scale=1):
    return _sp.log_ndtr(-_z(x, loc, scale))


@_at_once
def _ppf(q, loc=0, scale=1):
    return loc + scale * _sp.ndtri(q)


@_at_once
def _isf(q, loc=0, scale=1):
    return loc - scale * _sp.ndtri(q)


norm = types.SimpleNamespace(logpdf=_logpdf, pdf=_pdf, cdf=_cdf, logcdf=_logcdf, sf=_sf,
                             logsf=_logsf, ppf=_ppf, isf=_isf)
norm.__doc__ = "jax.scipy.stats.norm: logpdf, pdf, cdf, logcdf, sf, logsf, ppf, isf."


@_at_once
def _mvn_logpdf(x, mean, cov, allow_singular=None):
    """log N(x; mean, cov) over the last dimension (a batch of x allowed):
    through cov's Cholesky factor, as JAX's."""
    n = cov.shape[-1]
    lo = _la.cholesky(cov)
    d = jnp.expand_dims(x - mean, -1)
    if len(d.shape) > 2:  # a batch of points: one factor for all
        d = jnp.swapaxes(jnp.reshape(x - mean, (-1, n)), 0, 1)
    y = _la.triangular_solve(lo, d, left_side=True, lower=True)
    maha = jnp.sum(y * y, axis=0)
    logdet = jnp.sum(jnp.log(_la.diagonal(lo)), axis=-1)
    out = -0.5 * maha - logdet - 0.5 * n * math.log(2 * math.pi)
    shape = tuple(x.shape[:-1])
    return jnp.reshape(out, shape)


multivariate_normal = types.SimpleNamespace(
    logpdf=_mvn_logpdf,
    pdf=lambda x, mean, cov, allow_singular=None: jnp.exp(_mvn_logpdf(x, mean, cov)),
)
multivariate_normal.__doc__ = "jax.scipy.stats.multivariate_normal: logpdf, pdf."
