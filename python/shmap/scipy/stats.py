"""jax.scipy.stats as composites: the distributions (norm, beta, gamma, t,
cauchy, laplace, logistic, uniform, expon, chi2, pareto, gennorm,
gumbel_l, gumbel_r, truncnorm, vonmises, wrapcauchy, dirichlet,
multivariate_normal; the discrete poisson, bernoulli, binom, betabinom,
geom, nbinom, multinomial), each a namespace of JAX's functions for it
(logpdf / pdf / cdf / ... as JAX's file has them, JAX's formulas and
argument names), and mode, rankdata, sem. Arguments are promoted as JAX's
promote_args_inexact (integers to float32)."""
import functools
import math
import types
import typing

import numpy as _np

from .. import lax
from .. import linalg as _la
from .. import nn as _nn
from .. import numpy as jnp
from ..numpy import _at_once
from . import special as _sp

__all__ = ["norm", "multivariate_normal", "beta", "gamma", "t", "cauchy", "laplace", "logistic",
           "uniform", "expon", "chi2", "pareto", "gennorm", "gumbel_l", "gumbel_r", "truncnorm",
           "vonmises", "wrapcauchy", "dirichlet", "poisson", "bernoulli", "binom", "betabinom",
           "geom", "nbinom", "multinomial", "mode", "ModeResult", "rankdata", "sem"]

_p = _sp._promote_inexact
_INF = _np.inf


def _exp_of(f):
    """exp(f(...)), as JAX's files define pdf from logpdf (pmf from logpmf)."""
    @functools.wraps(f)
    def g(*args, **kwargs):
        return jnp.exp(f(*args, **kwargs))
    return _at_once(g)


def _log_of(f):
    """log(f(...)), as JAX's files define logcdf from cdf and logsf from sf."""
    @functools.wraps(f)
    def g(*args, **kwargs):
        return jnp.log(f(*args, **kwargs))
    return _at_once(g)


def _namespace(name, **fns):
    """jax.scipy.stats.<name> as a namespace of its functions."""
    ns = types.SimpleNamespace(**fns)
    ns.__doc__ = f"jax.scipy.stats.{name}: {', '.join(fns)}."
    return ns


def _z(x, loc, scale):
    return (x - loc) / scale


@_at_once
def _logpdf(x, loc=0, scale=1):
    z = _z(x, loc, scale)
    return -0.5 * z * z - math.log(math.sqrt(2 * math.pi)) - jnp.log(jnp.abs(scale + 0 * z))


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
    """JAX's: ndtri(q) * scale + loc (Cephes' ndtri: both tails kept)."""
    return _sp.ndtri(q) * scale + loc


@_at_once
def _isf(q, loc=0, scale=1):
    return loc - scale * _sp.ndtri(q)


norm = _namespace("norm", logpdf=_logpdf, pdf=_exp_of(_logpdf), cdf=_cdf, logcdf=_logcdf, sf=_sf,
                  logsf=_logsf, ppf=_ppf, isf=_isf)


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


multivariate_normal = _namespace(
    "multivariate_normal", logpdf=_mvn_logpdf,
    pdf=lambda x, mean, cov, allow_singular=None: jnp.exp(_mvn_logpdf(x, mean, cov)))


# ---- continuous distributions on the real line or an interval ----------------------------


@_at_once
def _beta_logpdf(x, a, b, loc=0, scale=1):
    """-betaln(a, b) + (a-1) log y + (b-1) log(1-y) - log scale on [loc,
    loc + scale] (y = (x - loc) / scale), -inf outside, NaN unless a, b,
    scale > 0."""
    x, a, b, loc, scale = _p("beta.logpdf", x, a, b, loc, scale)
    y = (x - loc) / scale
    log_linear = _sp.xlogy(a - 1, y) + _sp.xlog1py(b - 1, -y)
    log_probs = (-_sp.betaln(a, b) + log_linear) - jnp.log(scale)
    out = jnp.where((x > loc + scale) | (x < loc), -_INF, log_probs)
    return jnp.where((a <= 0) | (b <= 0) | (scale <= 0), _np.nan, out)


@_at_once
def _beta_cdf(x, a, b, loc=0, scale=1):
    """betainc(a, b, y), y clamped to [0, 1]."""
    x, a, b, loc, scale = _p("beta.cdf", x, a, b, loc, scale)
    return _sp.betainc(a, b, lax.clamp(0.0, (x - loc) / scale, 1.0))


@_at_once
def _beta_sf(x, a, b, loc=0, scale=1):
    """betainc(b, a, 1 - y), y clamped to [0, 1]."""
    x, a, b, loc, scale = _p("beta.sf", x, a, b, loc, scale)
    return _sp.betainc(b, a, 1 - lax.clamp(0.0, (x - loc) / scale, 1.0))


beta = _namespace("beta", logpdf=_beta_logpdf, pdf=_exp_of(_beta_logpdf), cdf=_beta_cdf,
                  logcdf=_log_of(_beta_cdf), sf=_beta_sf, logsf=_log_of(_beta_sf))


@_at_once
def _gamma_logpdf(x, a, loc=0, scale=1):
    """(a-1) log y - y - gammaln(a) - log scale for x >= loc, -inf below."""
    x, a, loc, scale = _p("gamma.logpdf", x, a, loc, scale)
    ok = x >= loc
    y = jnp.where(ok, (x - loc) / scale, 1.0)
    log_linear = _sp.xlogy(a - 1, y) - y
    return jnp.where(ok, log_linear - (_sp.gammaln(a) + jnp.log(scale)), -_INF)


@_at_once
def _gamma_cdf(x, a, loc=0, scale=1):
    """gammainc(a, y), y clamped to [0, inf]."""
    x, a, loc, scale = _p("gamma.cdf", x, a, loc, scale)
    return _sp.gammainc(a, lax.clamp(0.0, (x - loc) / scale, _INF))


@_at_once
def _gamma_sf(x, a, loc=0, scale=1):
    """gammaincc(a, y), 1 below loc."""
    x, a, loc, scale = _p("gamma.sf", x, a, loc, scale)
    y = (x - loc) / scale
    return jnp.where(y < 0, 1, _sp.gammaincc(a, y))


gamma = _namespace("gamma", logpdf=_gamma_logpdf, pdf=_exp_of(_gamma_logpdf), cdf=_gamma_cdf,
                   logcdf=_log_of(_gamma_cdf), sf=_gamma_sf, logsf=_log_of(_gamma_sf))


@_at_once
def _t_logpdf(x, df, loc=0, scale=1):
    """Student's t: -(gammaln(df/2) + log(pi scale**2 df) / 2 -
    gammaln((df+1)/2) + (df+1)/2 log1p(z**2 / df))."""
    x, df, loc, scale = _p("t.logpdf", x, df, loc, scale)
    z = (x - loc) / scale
    half = df / 2
    half1 = half + 0.5
    norm_tmp = jnp.log((scale * scale) * math.pi * df) / 2
    norm_term = (_sp.gammaln(half) + norm_tmp) - _sp.gammaln(half1)
    return -(norm_term + half1 * jnp.log1p((z * z) / df))


t = _namespace("t", logpdf=_t_logpdf, pdf=_exp_of(_t_logpdf))


@_at_once
def _cauchy_logpdf(x, loc=0, scale=1):
    """-(log(pi scale) + log1p(z**2))."""
    x, loc, scale = _p("cauchy.logpdf", x, loc, scale)
    z = (x - loc) / scale
    return -(jnp.log(math.pi * scale) + jnp.log1p(z * z))


@_at_once
def _cauchy_cdf(x, loc=0, scale=1):
    """1/2 + arctan(z) / pi."""
    x, loc, scale = _p("cauchy.cdf", x, loc, scale)
    return 0.5 + (1.0 / math.pi) * jnp.arctan((x - loc) / scale)


@_at_once
def _cauchy_logcdf(x, loc=0, scale=1):
    return jnp.log(_cauchy_cdf(x, loc, scale))


@_at_once
def _cauchy_sf(x, loc=0, scale=1):
    x, loc, scale = _p("cauchy.sf", x, loc, scale)
    return _cauchy_cdf(-x, -loc, scale)


@_at_once
def _cauchy_logsf(x, loc=0, scale=1):
    x, loc, scale = _p("cauchy.logsf", x, loc, scale)
    return _cauchy_logcdf(-x, -loc, scale)


@_at_once
def _cauchy_isf(q, loc=0, scale=1):
    q, loc, scale = _p("cauchy.isf", q, loc, scale)
    return jnp.tan(math.pi / 2 - math.pi * q) * scale + loc


@_at_once
def _cauchy_ppf(q, loc=0, scale=1):
    q, loc, scale = _p("cauchy.ppf", q, loc, scale)
    return jnp.tan(math.pi * q - math.pi / 2) * scale + loc


cauchy = _namespace("cauchy", logpdf=_cauchy_logpdf, pdf=_exp_of(_cauchy_logpdf), cdf=_cauchy_cdf,
                    logcdf=_cauchy_logcdf, sf=_cauchy_sf, logsf=_cauchy_logsf, isf=_cauchy_isf,
                    ppf=_cauchy_ppf)


@_at_once
def _laplace_logpdf(x, loc=0, scale=1):
    """-(|x - loc| / scale + log(2 scale))."""
    x, loc, scale = _p("laplace.logpdf", x, loc, scale)
    return -(jnp.abs(x - loc) / scale + jnp.log(2 * scale))


@_at_once
def _laplace_cdf(x, loc=0, scale=1):
    """exp(z) / 2 for z <= 0, 1 - exp(-z) / 2 above."""
    x, loc, scale = _p("laplace.cdf", x, loc, scale)
    d = (x - loc) / scale
    return jnp.where(d <= 0, 0.5 * jnp.exp(d), 1 - 0.5 * jnp.exp(-d))


laplace = _namespace("laplace", logpdf=_laplace_logpdf, pdf=_exp_of(_laplace_logpdf),
                     cdf=_laplace_cdf)


@_at_once
def _logistic_logpdf(x, loc=0, scale=1):
    """-2 logaddexp(z/2, -z/2) - log scale."""
    x, loc, scale = _p("logistic.logpdf", x, loc, scale)
    half = ((x - loc) / scale) / 2
    return -2 * jnp.logaddexp(half, -half) - jnp.log(scale)


@_at_once
def _logistic_ppf(x, loc=0, scale=1):
    x, loc, scale = _p("logistic.ppf", x, loc, scale)
    return _sp.logit(x) * scale + loc


@_at_once
def _logistic_sf(x, loc=0, scale=1):
    x, loc, scale = _p("logistic.sf", x, loc, scale)
    return _sp.expit(-((x - loc) / scale))


@_at_once
def _logistic_isf(x, loc=0, scale=1):
    x, loc, scale = _p("logistic.isf", x, loc, scale)
    return -_sp.logit(x) * scale + loc


@_at_once
def _logistic_cdf(x, loc=0, scale=1):
    x, loc, scale = _p("logistic.cdf", x, loc, scale)
    return _sp.expit((x - loc) / scale)


logistic = _namespace("logistic", logpdf=_logistic_logpdf, pdf=_exp_of(_logistic_logpdf),
                      ppf=_logistic_ppf, sf=_logistic_sf, isf=_logistic_isf, cdf=_logistic_cdf)


@_at_once
def _uniform_logpdf(x, loc=0, scale=1):
    """-log scale on [loc, loc + scale], -inf outside."""
    x, loc, scale = _p("uniform.logpdf", x, loc, scale)
    return jnp.where((x > loc + scale) | (x < loc), -_INF, -jnp.log(scale))


@_at_once
def _uniform_cdf(x, loc=0, scale=1):
    """0 below loc, 1 above loc + scale, (x - loc) / scale between (0 at
    NaN, as JAX's select)."""
    x, loc, scale = _p("uniform.cdf", x, loc, scale)
    hi = loc + scale
    return jnp.select([x < loc, x > hi, (x >= loc) & (x <= hi)],
                      [_sp._full(x, 0.0), _sp._full(x, 1.0), (x - loc) / scale])


@_at_once
def _uniform_ppf(q, loc=0, scale=1):
    q, loc, scale = _p("uniform.ppf", q, loc, scale)
    return jnp.where(jnp.isnan(q) | (q < 0) | (q > 1), _np.nan, loc + scale * q)


uniform = _namespace("uniform", logpdf=_uniform_logpdf, pdf=_exp_of(_uniform_logpdf),
                     cdf=_uniform_cdf, ppf=_uniform_ppf)


@_at_once
def _expon_logpdf(x, loc=0, scale=1):
    """-(x - loc) / scale - log scale for x >= loc, -inf below."""
    x, loc, scale = _p("expon.logpdf", x, loc, scale)
    log_probs = -((x - loc) / scale + jnp.log(scale))
    return jnp.where(x < loc, -_INF, log_probs)


@_at_once
def _expon_cdf(x, loc=0, scale=1):
    """-expm1(-(x - loc) / scale), 0 below loc."""
    x, loc, scale = _p("expon.cdf", x, loc, scale)
    neg = (loc - x) / scale
    return jnp.where(x < loc, jnp.zeros_like(neg), -jnp.expm1(neg))


@_at_once
def _expon_logsf(x, loc=0, scale=1):
    x, loc, scale = _p("expon.sf", x, loc, scale)
    neg = (loc - x) / scale
    return jnp.where(x < loc, jnp.zeros_like(neg), neg)


@_at_once
def _expon_sf(x, loc=0, scale=1):
    return jnp.exp(_expon_logsf(x, loc, scale))


@_at_once
def _expon_logcdf(x, loc=0, scale=1):
    """log1p(-sf)."""
    return jnp.log1p(-_expon_sf(x, loc, scale))


@_at_once
def _expon_ppf(q, loc=0, scale=1):
    q, loc, scale = _p("expon.ppf", q, loc, scale)
    return jnp.where(jnp.isnan(q) | (q < 0) | (q > 1), _np.nan, loc - scale * jnp.log1p(-q))


expon = _namespace("expon", logpdf=_expon_logpdf, pdf=_exp_of(_expon_logpdf), cdf=_expon_cdf,
                   logcdf=_expon_logcdf, logsf=_expon_logsf, sf=_expon_sf, ppf=_expon_ppf)


@_at_once
def _chi2_logpdf(x, df, loc=0, scale=1):
    """-(gammaln(df/2) + log(2) df / 2) - log scale + (df/2 - 1) log y -
    y/2 for x >= loc, -inf below."""
    x, df, loc, scale = _p("chi2.logpdf", x, df, loc, scale)
    y = (x - loc) / scale
    half = df / 2
    kernel = (half - 1) * jnp.log(y) - y / 2
    nrml = -(_sp.gammaln(half) + (math.log(2) * df) / 2)
    return jnp.where(x < loc, -_INF, (nrml - jnp.log(scale)) + kernel)


@_at_once
def _chi2_cdf(x, df, loc=0, scale=1):
    """gammainc(df/2, (x - loc) / (2 scale)), clamped at 0."""
    x, df, loc, scale = _p("chi2.cdf", x, df, loc, scale)
    return _sp.gammainc(df / 2, lax.clamp(0.0, (x - loc) / (scale * 2), _INF))


@_at_once
def _chi2_sf(x, df, loc=0, scale=1):
    """gammaincc(df/2, (x - loc) / (2 scale)), clamped at 0."""
    x, df, loc, scale = _p("chi2.sf", x, df, loc, scale)
    return _sp.gammaincc(df / 2, lax.clamp(0.0, (x - loc) / (scale * 2), _INF))


chi2 = _namespace("chi2", logpdf=_chi2_logpdf, pdf=_exp_of(_chi2_logpdf), cdf=_chi2_cdf,
                  logcdf=_log_of(_chi2_cdf), sf=_chi2_sf, logsf=_log_of(_chi2_sf))


@_at_once
def _pareto_logpdf(x, b, loc=0, scale=1):
    """-(log(scale / b) + (b + 1) log z) for x >= loc + scale, -inf below."""
    x, b, loc, scale = _p("pareto.logpdf", x, b, loc, scale)
    z = (x - loc) / scale
    log_probs = -(jnp.log(scale / b) + (b + 1) * jnp.log(z))
    return jnp.where(x < loc + scale, -_INF, log_probs)


@_at_once
def _pareto_cdf(x, b, loc=0, scale=1):
    x, b, loc, scale = _p("pareto.cdf", x, b, loc, scale)
    cdf = 1 - jnp.power((x - loc) / scale, -b)
    return jnp.where(x < loc + scale, 0.0, cdf)


@_at_once
def _pareto_logcdf(x, b, loc=0, scale=1):
    x, b, loc, scale = _p("pareto.logcdf", x, b, loc, scale)
    val = jnp.log1p(-jnp.power((x - loc) / scale, -b))
    return jnp.where(x < loc + scale, -_INF, val)


@_at_once
def _pareto_logsf(x, b, loc=0, scale=1):
    x, b, loc, scale = _p("pareto.logsf", x, b, loc, scale)
    val = -(b * jnp.log((x - loc) / scale))
    return jnp.where(x < loc + scale, 0.0, val)


@_at_once
def _pareto_sf(x, b, loc=0, scale=1):
    return jnp.exp(_pareto_logsf(x, b, loc, scale))


@_at_once
def _pareto_ppf(q, b, loc=0, scale=1):
    q, b, loc, scale = _p("pareto.ppf", q, b, loc, scale)
    val = loc + scale * jnp.power(1 - q, -(1 / b))
    return jnp.where(jnp.isnan(q) | (q < 0) | (q > 1), _np.nan, val)


pareto = _namespace("pareto", logpdf=_pareto_logpdf, pdf=_exp_of(_pareto_logpdf), cdf=_pareto_cdf,
                    logcdf=_pareto_logcdf, logsf=_pareto_logsf, sf=_pareto_sf, ppf=_pareto_ppf)


@_at_once
def _gennorm_logpdf(x, beta):
    """log(beta / 2) - gammaln(1 / beta) - |x| ** beta."""
    x, beta = _p("gennorm.logpdf", x, beta)
    return jnp.log(0.5 * beta) - _sp.gammaln(1 / beta) - jnp.power(jnp.abs(x), beta)


@_at_once
def _gennorm_cdf(x, beta):
    """(1 + sign(x) gammainc(1 / beta, |x| ** beta)) / 2."""
    x, beta = _p("gennorm.cdf", x, beta)
    return 0.5 * (1 + jnp.sign(x) * _sp.gammainc(1 / beta, jnp.power(jnp.abs(x), beta)))


gennorm = _namespace("gennorm", logpdf=_gennorm_logpdf, cdf=_gennorm_cdf,
                     pdf=_exp_of(_gennorm_logpdf))


def _gumbel_args(name, x, loc, scale):
    x, loc, scale = _p(name, x, loc, scale)
    return x, loc, scale, scale > 0


@_at_once
def _gumbel_r_logpdf(x, loc=0, scale=1):
    """-log scale - (z + exp(-z)); NaN unless scale > 0."""
    x, loc, scale, ok = _gumbel_args("gumbel_r.logpdf", x, loc, scale)
    z = (x - loc) / scale
    return jnp.where(ok, _sp.xlogy(-1, scale) + -(z + jnp.exp(-z)), _np.nan)


@_at_once
def _gumbel_r_logcdf(x, loc=0, scale=1):
    x, loc, scale, ok = _gumbel_args("gumbel_r.logcdf", x, loc, scale)
    return jnp.where(ok, -jnp.exp(-((x - loc) / scale)), _np.nan)


@_at_once
def _gumbel_r_cdf(x, loc=0, scale=1):
    return jnp.exp(_gumbel_r_logcdf(x, loc, scale))


@_at_once
def _gumbel_r_ppf(p, loc=0, scale=1):
    p, loc, scale = _p("gumbel_r.ppf", p, loc, scale)
    q = loc - scale * jnp.log(_sp.xlogy(-1, p))
    return jnp.where((p > 0) & (p < 1), q, _np.nan)


@_at_once
def _gumbel_r_sf(x, loc=0, scale=1):
    x, loc, scale, ok = _gumbel_args("gumbel_r.sf", x, loc, scale)
    return jnp.where(ok, 1 - jnp.exp(-jnp.exp((loc - x) / scale)), _np.nan)


@_at_once
def _gumbel_r_logsf(x, loc=0, scale=1):
    x, loc, scale, ok = _gumbel_args("gumbel_r.logsf", x, loc, scale)
    return jnp.where(ok, _nn.log1mexp(jnp.exp((loc - x) / scale)), _np.nan)


gumbel_r = _namespace("gumbel_r", logpdf=_gumbel_r_logpdf, pdf=_exp_of(_gumbel_r_logpdf),
                      logcdf=_gumbel_r_logcdf, cdf=_gumbel_r_cdf, ppf=_gumbel_r_ppf,
                      sf=_gumbel_r_sf, logsf=_gumbel_r_logsf)


@_at_once
def _gumbel_l_logpdf(x, loc=0, scale=1):
    """-log scale + z - exp(z); NaN unless scale > 0."""
    x, loc, scale, ok = _gumbel_args("gumbel_l.logpdf", x, loc, scale)
    z = (x - loc) / scale
    return jnp.where(ok, _sp.xlogy(-1, scale) + (z - jnp.exp(z)), _np.nan)


@_at_once
def _gumbel_l_logcdf(x, loc=0, scale=1):
    x, loc, scale, ok = _gumbel_args("gumbel_l.logcdf", x, loc, scale)
    return jnp.where(ok, jnp.log(-jnp.expm1(-jnp.exp((x - loc) / scale))), _np.nan)


@_at_once
def _gumbel_l_cdf(x, loc=0, scale=1):
    return jnp.exp(_gumbel_l_logcdf(x, loc, scale))


@_at_once
def _gumbel_l_ppf(p, loc=0, scale=1):
    p, loc, scale = _p("gumbel_l.ppf", p, loc, scale)
    q = loc + scale * jnp.log(_sp.xlog1py(-1, -p))
    return jnp.where((p > 0) & (p < 1), q, _np.nan)


@_at_once
def _gumbel_l_logsf(x, loc=0, scale=1):
    x, loc, scale, ok = _gumbel_args("gumbel_l.logsf", x, loc, scale)
    return jnp.where(ok, -jnp.exp((x - loc) / scale), _np.nan)


@_at_once
def _gumbel_l_sf(x, loc=0, scale=1):
    return jnp.exp(_gumbel_l_logsf(x, loc, scale))


gumbel_l = _namespace("gumbel_l", logpdf=_gumbel_l_logpdf, pdf=_exp_of(_gumbel_l_logpdf),
                      logcdf=_gumbel_l_logcdf, cdf=_gumbel_l_cdf, ppf=_gumbel_l_ppf,
                      sf=_gumbel_l_sf, logsf=_gumbel_l_logsf)


def _log_gauss_mass(a, b):
    """log(ndtr(b) - ndtr(a)), JAX's: from the tail the interval lies in
    (log_ndtr's difference), or log1p(-ndtr(a) - ndtr(-b)) across 0."""
    a, b = jnp.broadcast_arrays(a, b)
    right = a > 0
    central = ~((b <= 0) | right)
    a_tail, b_tail = jnp.where(right, -b, a), jnp.where(right, -a, b)
    la, lb = _sp.log_ndtr(a_tail), _sp.log_ndtr(b_tail)
    tail = _sp.logsumexp(jnp.stack([lb, la]), axis=0,
                         b=jnp.stack([jnp.ones_like(lb), -jnp.ones_like(la)]))
    return jnp.where(central, jnp.log1p(-_sp.ndtr(a) - _sp.ndtr(-b)), tail)


@_at_once
def _truncnorm_logpdf(x, a, b, loc=0, scale=1):
    """norm.logpdf - log of the mass in [a, b] (standardized bounds), -inf
    outside, NaN where a >= b."""
    x, a, b, loc, scale = _p("truncnorm.logpdf", x, a, b, loc, scale)
    val = _logpdf(x, loc, scale) - _log_gauss_mass(a, b)
    z = (x - loc) / scale
    val = jnp.where((z < a) | (z > b), -_INF, val)
    return jnp.where(a >= b, _np.nan, val)


@_at_once
def _truncnorm_logcdf(x, a, b, loc=0, scale=1):
    """log of the mass in [a, z] over that in [a, b] (log1p(-sf) near 1)."""
    x, a, b, loc, scale = _p("truncnorm.logcdf", x, a, b, loc, scale)
    x, a, b = jnp.broadcast_arrays(x, a, b)
    z = (x - loc) / scale
    lgm_ab = _log_gauss_mass(a, b)
    logcdf = _log_gauss_mass(a, z) - lgm_ab
    logsf = _log_gauss_mass(z, b) - lgm_ab
    out = jnp.select([z >= b, z <= a, logcdf > -0.1, z > a],
                     [_sp._full(logcdf, 0.0), _sp._full(logcdf, -_INF),
                      jnp.log1p(-jnp.exp(logsf)), logcdf])
    return jnp.where(a >= b, _np.nan, out)


@_at_once
def _truncnorm_cdf(x, a, b, loc=0, scale=1):
    return jnp.exp(_truncnorm_logcdf(x, a, b, loc, scale))


@_at_once
def _truncnorm_logsf(x, a, b, loc=0, scale=1):
    x, a, b, loc, scale = _p("truncnorm.logsf", x, a, b, loc, scale)
    return _truncnorm_logcdf(-x, -b, -a, -loc, scale)


@_at_once
def _truncnorm_sf(x, a, b, loc=0, scale=1):
    return jnp.exp(_truncnorm_logsf(x, a, b, loc, scale))


truncnorm = _namespace("truncnorm", logpdf=_truncnorm_logpdf, pdf=_exp_of(_truncnorm_logpdf),
                       logsf=_truncnorm_logsf, sf=_truncnorm_sf, logcdf=_truncnorm_logcdf,
                       cdf=_truncnorm_cdf)


@_at_once
def _vonmises_logpdf(x, kappa):
    """kappa (cos x - 1) - log(2 pi i0e(kappa)); NaN unless kappa > 0."""
    x, kappa = _p("vonmises.logpdf", x, kappa)
    val = kappa * (jnp.cos(x) - 1) - jnp.log(2 * math.pi * lax.bessel_i0e(kappa))
    return jnp.where(kappa > 0, val, _np.nan)


vonmises = _namespace("vonmises", logpdf=_vonmises_logpdf, pdf=_exp_of(_vonmises_logpdf))


@_at_once
def _wrapcauchy_logpdf(x, c):
    """log(1 - c**2) - log(2 pi) - log(1 + c**2 - 2 c cos x) on [0, 2 pi]
    (-inf outside), NaN unless 0 < c < 1."""
    x, c = _p("wrapcauchy.logpdf", x, c)
    val = jnp.log(1 - c * c) - math.log(2 * math.pi) - jnp.log(1 + c * c - 2 * c * jnp.cos(x))
    inside = jnp.where((x >= 0) & (x <= 2 * math.pi), val, -_INF)
    return jnp.where((c > 0) & (c < 1), inside, _np.nan)


wrapcauchy = _namespace("wrapcauchy", logpdf=_wrapcauchy_logpdf, pdf=_exp_of(_wrapcauchy_logpdf))


@_at_once
def _dirichlet_logpdf(x, alpha):
    """sum((alpha - 1) log x) - (sum gammaln(alpha) - gammaln(sum alpha))
    over the first axis of x (its last coordinate may be left out), -inf
    off the simplex."""
    x, alpha = _p("dirichlet.logpdf", x, alpha)
    if len(alpha.shape) != 1:
        raise ValueError(f"`alpha` must be one-dimensional; got alpha.shape={tuple(alpha.shape)}")
    if x.shape[0] not in (alpha.shape[0], alpha.shape[0] - 1):
        raise ValueError("`x` must have either the same number of entries as `alpha` or one "
                         f"entry fewer; got x.shape={tuple(x.shape)}, "
                         f"alpha.shape={tuple(alpha.shape)}")
    if x.shape[0] != alpha.shape[0]:
        x = jnp.concatenate([x, 1 - jnp.sum(x, axis=0, keepdims=True)], axis=0)
    normalize = jnp.sum(_sp.gammaln(alpha)) - _sp.gammaln(jnp.sum(alpha))
    if len(x.shape) > 1:
        alpha = jnp.reshape(alpha, tuple(alpha.shape) + (1,) * (len(x.shape) - 1))
    log_probs = jnp.sum(_sp.xlogy(alpha - 1, x), axis=0) - normalize
    simplex = jnp.all(x > 0, axis=0) & (jnp.abs(jnp.sum(x, axis=0) - 1) < 1e-6)
    return jnp.where(simplex, log_probs, -_INF)


dirichlet = _namespace("dirichlet", logpdf=_dirichlet_logpdf, pdf=_exp_of(_dirichlet_logpdf))


# ---- discrete distributions --------------------------------------------------------------


@_at_once
def _poisson_logpmf(k, mu, loc=0):
    """k log mu - gammaln(k + 1) - mu (k shifted by loc), -inf below 0 and
    off the integers."""
    k, mu, loc = _p("poisson.logpmf", k, mu, loc)
    x = k - loc
    log_probs = _sp.xlogy(x, mu) - _sp.gammaln(x + 1) - mu
    return jnp.where((x < 0) | (jnp.round(k) != k), -_INF, log_probs)


@_at_once
def _poisson_pmf(k, mu, loc=0):
    return jnp.exp(_poisson_logpmf(k, mu, loc))


@_at_once
def _poisson_cdf(k, mu, loc=0):
    """gammaincc(floor(k - loc + 1), mu), 0 below loc."""
    k, mu, loc = _p("poisson.logpmf", k, mu, loc)  # JAX's name here
    x = k - loc
    return jnp.where(x < 0, 0.0, _sp.gammaincc(jnp.floor(1 + x), mu))


def _poisson_entropy_sum(mu, max_k, upper):
    k = jnp.reshape(jnp.arange(max_k, dtype=mu.dtype), (max_k, 1))
    probs = _poisson_pmf(k, mu, 0)
    mask = k < jnp.reshape(jnp.ceil(upper), (1, -1))
    return jnp.sum(_sp.entr(jnp.where(mask, probs, 0.0)), axis=0)


@_at_once
def _poisson_entropy(mu, loc=0):
    """The entropy: 0 at mu = 0, the sum of entr(pmf) up to mu + 20 (35
    terms) below 10, up to mu + 10 sqrt(mu) + 20 (250 terms) below 100, the
    asymptotic 0.5 log(2 pi e mu) - 1 / (12 mu) beyond (loc only
    broadcasts)."""
    mu, loc = _p("poisson.entropy", mu, loc)
    shape = jnp.broadcast_shapes(tuple(mu.shape), tuple(loc.shape))
    flat = jnp.reshape(mu, (-1,))
    small = _poisson_entropy_sum(flat, 35, flat + 20)
    medium = _poisson_entropy_sum(flat, 250, flat + 10 * jnp.sqrt(flat) + 20)
    large = 0.5 * jnp.log(2 * math.pi * math.e * flat) - 1.0 / (12 * flat)
    out = jnp.where(flat == 0, jnp.zeros_like(flat),
                    jnp.where(flat < 10, small, jnp.where(flat < 100, medium, large)))
    return jnp.broadcast_to(jnp.reshape(out, tuple(mu.shape)), shape)


poisson = _namespace("poisson", logpmf=_poisson_logpmf, pmf=_poisson_pmf, cdf=_poisson_cdf,
                     entropy=_poisson_entropy)


@_at_once
def _bernoulli_logpmf(k, p, loc=0):
    """k log p + (1 - k) log(1 - p) for k - loc in [0, 1], -inf outside."""
    k, p, loc = _p("bernoulli.logpmf", k, p, loc)
    x = k - loc
    log_probs = _sp.xlogy(x, p) + _sp.xlog1py(1 - x, -p)
    return jnp.where((x < 0) | (x > 1), -_INF, log_probs)


@_at_once
def _bernoulli_cdf(k, p):
    """0 below 0, 1 - p on [0, 1), 1 from 1; NaN for p outside [0, 1]."""
    k, p = _p("bernoulli.cdf", k, p)
    bad = jnp.isnan(k) | jnp.isnan(p) | (p < 0) | (p > 1)
    return jnp.select([bad, k < 0, (k >= 0) & (k < 1), k >= 1],
                      [_sp._full(p, _np.nan), _sp._full(p, 0.0), 1 - p, _sp._full(p, 1.0)])


@_at_once
def _bernoulli_ppf(q, p):
    """0 for q <= 1 - p, else 1; NaN outside [0, 1]."""
    q, p = _p("bernoulli.ppf", q, p)
    bad = jnp.isnan(q) | jnp.isnan(p) | (p < 0) | (p > 1) | (q < 0) | (q > 1)
    return jnp.where(bad, _np.nan, jnp.where(q <= 1 - p, _sp._full(q, 0.0), 1.0))


bernoulli = _namespace("bernoulli", logpmf=_bernoulli_logpmf, pmf=_exp_of(_bernoulli_logpmf),
                       cdf=_bernoulli_cdf, ppf=_bernoulli_ppf)


@_at_once
def _binom_logpmf(k, n, p, loc=0):
    """log C(n, y) + y log p + (n - y) log(1 - p), y = k - loc in [0, n]."""
    k, n, p, loc = _p("binom.logpmf", k, n, p, loc)
    y = k - loc
    comb = _sp.gammaln(n + 1) - (_sp.gammaln(y + 1) + _sp.gammaln(n - y + 1))
    log_linear = _sp.xlogy(y, p) + _sp.xlog1py(n - y, -p)
    log_probs = jnp.where(((y == 0) & (n == 0)) | (log_linear == 0), 0.0, comb + log_linear)
    return jnp.where((k >= loc) & (k < loc + n + 1), log_probs, -_INF)


binom = _namespace("binom", logpmf=_binom_logpmf, pmf=_exp_of(_binom_logpmf))


@_at_once
def _betabinom_logpmf(k, n, a, b, loc=0):
    """-log1p(n) - betaln(n - y + 1, y + 1) + betaln(y + a, n - y + b) -
    betaln(a, b), y = floor(k) - loc."""
    k, n, a, b, loc = _p("betabinom.logpmf", k, n, a, b, loc)
    y = jnp.floor(k) - loc
    combiln = -(jnp.log1p(n) + _sp.betaln(n - y + 1, y + 1))
    log_probs = combiln + (_sp.betaln(y + a, n - y + b) - _sp.betaln(a, b))
    log_probs = jnp.where((y == 0) & (n == 0), 0.0, log_probs)
    log_probs = jnp.where((y < -loc) | (y > n) | (y + a <= 0), -_INF, log_probs)
    return jnp.where((n < 0) | (a <= 0) | (b <= 0), _np.nan, log_probs)


betabinom = _namespace("betabinom", logpmf=_betabinom_logpmf, pmf=_exp_of(_betabinom_logpmf))


@_at_once
def _geom_logpmf(k, p, loc=0):
    """(x - 1) log(1 - p) + log p for x = k - loc >= 1, -inf below."""
    k, p, loc = _p("geom.logpmf", k, p, loc)
    x = k - loc
    return jnp.where(x <= 0, -_INF, _sp.xlog1py(x - 1, -p) + jnp.log(p))


geom = _namespace("geom", logpmf=_geom_logpmf, pmf=_exp_of(_geom_logpmf))


@_at_once
def _nbinom_logpmf(k, n, p, loc=0):
    """gammaln(y + n) - gammaln(n) - gammaln(y + 1) + n log p + y log(1 -
    p), y = k - loc, -inf below loc."""
    k, n, p, loc = _p("nbinom.logpmf", k, n, p, loc)
    y = k - loc
    comb = (_sp.gammaln(y + n) - _sp.gammaln(n)) - _sp.gammaln(y + 1)
    log_linear = _sp.xlogy(n, p) + _sp.xlogy(y, 1 - p)
    return jnp.where(k < loc, -_INF, comb + log_linear)


nbinom = _namespace("nbinom", logpmf=_nbinom_logpmf, pmf=_exp_of(_nbinom_logpmf))


@_at_once
def _multinomial_logpmf(x, n, p):
    """gammaln(n + 1) + sum(x log p - gammaln(x + 1)) over the last axis,
    -inf unless x sums to n (x and n of an integer dtype, else JAX's
    ValueError)."""
    p, = _p("multinomial.logpmf", p)
    dt = jnp.result_type(x, n)
    if not _np.issubdtype(dt, _np.integer):
        raise ValueError(f"x and n must be of integer type; got x.dtype={dt}, n.dtype={dt}")
    x, n = _sp._as(x, p.dtype), _sp._as(n, p.dtype)
    logprobs = _sp.gammaln(n + 1) + jnp.sum(_sp.xlogy(x, p) - _sp.gammaln(x + 1), axis=-1)
    return jnp.where(jnp.sum(x) == n, logprobs, -_INF)


multinomial = _namespace("multinomial", logpmf=_multinomial_logpmf,
                         pmf=_exp_of(_multinomial_logpmf))


# ---- mode, rankdata, sem ------------------------------------------------------------------


class ModeResult(typing.NamedTuple):
    mode: typing.Any
    count: typing.Any


def _nan_policy(value):
    if value not in ("propagate", "omit", "raise"):
        raise ValueError(f"Illegal nan_policy value {value!r}; expected one of "
                         "{'propagate', 'omit', 'raise'}")
    if value == "omit":
        raise NotImplementedError(f"Logic for `nan_policy` of {value} is not implemented")


@_at_once
def mode(a, axis=0, nan_policy="propagate", keepdims=False):
    """jax.scipy.stats.mode: the most frequent value along axis (the
    smallest of equally frequent ones; NaNs count as one value, sorted
    last) and its count (int32), as JAX's (its unique, sorted, then the
    first largest count)."""
    x = jnp.atleast_1d(a)
    _nan_policy(nan_policy)
    if nan_policy == "raise":
        raise NotImplementedError("In order to best JIT compile `mode`, we cannot know whether "
                                  "`x` contains nans. Please check if nans exist in `x` outside "
                                  "of the `mode` function.")
    shape = tuple(x.shape)
    if axis is not None:
        axis = axis % len(shape)
    if keepdims:
        out_shape = tuple(1 for _ in shape) if axis is None else tuple(
            1 if i == axis else s for i, s in enumerate(shape))
    else:
        out_shape = () if axis is None else tuple(s for i, s in enumerate(shape) if i != axis)
    if axis is None:
        x, axis = jnp.reshape(x, (-1,)), 0
    x = jnp.moveaxis(x, axis, 0)
    n = x.shape[0]
    x = jnp.reshape(x, (n, -1))
    if n == 0:
        return ModeResult(jnp.full(out_shape, _np.nan, dtype=_np.float32),
                          jnp.zeros(out_shape, dtype=_np.float32))
    s = jnp.sort(x, axis=0)
    same = (s[1:] == s[:-1]) | (jnp.isnan(s[1:]) & jnp.isnan(s[:-1]))
    start = jnp.concatenate([jnp.ones_like(same[:1]), ~same], axis=0)  # a run begins
    end = jnp.concatenate([~same, jnp.ones_like(same[:1])], axis=0)    # a run ends
    iota = jnp.reshape(jnp.arange(n, dtype=_np.int32), (n, 1))
    first = lax.cummax(jnp.where(start, iota, 0), axis=0)
    last = lax.cummin(jnp.where(end, iota, n - 1), axis=0, reverse=True)
    count = last - first + 1
    best = jnp.argmax(count, axis=0)
    vals = jnp.take_along_axis(s, best[None, :], axis=0)[0]
    counts = jnp.max(count, axis=0)
    return ModeResult(jnp.reshape(vals, out_shape), jnp.reshape(counts, out_shape))


def _rank_1d(a, method):
    n = a.shape[0]
    order = jnp.argsort(a)
    arr = a[order]
    inv = jnp.argsort(order)  # the inverse permutation
    if method == "ordinal":
        return jnp.astype(inv + 1, _np.float32)
    obs = jnp.concatenate([jnp.ones((1,), dtype=bool), arr[1:] != arr[:-1]])
    dense = jnp.cumsum(jnp.astype(obs, _np.int32))
    if method == "dense":
        return jnp.astype(dense[inv], _np.float32)
    iota = jnp.arange(n, dtype=_np.int32)
    first = lax.cummax(jnp.where(obs, iota, 0))  # where each element's run starts
    nxt = jnp.concatenate([obs[1:], jnp.ones((1,), dtype=bool)])
    last = lax.cummin(jnp.where(nxt, iota, n - 1), reverse=True)
    lo, hi = jnp.astype(first + 1, _np.float32), jnp.astype(last + 1, _np.float32)
    out = {"max": hi, "min": lo, "average": 0.5 * (lo + hi)}[method]
    return out[inv]


@_at_once
def rankdata(a, method="average", *, axis=None, nan_policy="propagate"):
    """jax.scipy.stats.rankdata: ranks from 1 (method 'average', 'min',
    'max', 'dense' or 'ordinal'), float32; all NaN if a holds a NaN (over
    the flattened a, or each slice along axis)."""
    _nan_policy(nan_policy)
    if nan_policy == "raise":
        raise NotImplementedError("In order to best JIT compile `rankdata`, we cannot know "
                                  "whether `x` contains nans. Please check if nans exist in `x` "
                                  "outside of the `rankdata` function.")
    if method not in ("average", "min", "max", "dense", "ordinal"):
        raise ValueError(f"unknown method '{method}'")
    if axis is not None:
        return jnp.apply_along_axis(rankdata, axis, a, method)
    a = jnp.reshape(a, (-1,))
    r = _rank_1d(a, method)
    return jnp.where(jnp.any(jnp.isnan(a)), _np.nan, r)


@_at_once
def sem(a, axis=0, ddof=1, nan_policy="propagate", *, keepdims=False):
    """The standard error of the mean: std(ddof=1) / sqrt(n) along axis
    (nan_policy='omit': nanstd over the count of non-NaNs)."""
    b, = _p("sem", a)
    if nan_policy == "propagate":
        size = math.prod(b.shape) if axis is None else b.shape[axis]
        return jnp.std(b, axis, ddof=ddof, keepdims=keepdims) / math.sqrt(size)
    if nan_policy == "omit":
        count = jnp.sum(~jnp.isnan(b), axis=axis, keepdims=keepdims)
        return jnp.nanstd(b, axis, ddof=ddof, keepdims=keepdims) / jnp.astype(
            jnp.sqrt(jnp.astype(count, b.dtype)), b.dtype)
    raise ValueError(f"{nan_policy} is not supported")
