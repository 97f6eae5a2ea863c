"""jax.nn-style functions for traced programs (and Arrays at once), made
of shmap.numpy's ops: the activations (relu, sigmoid, silu, softplus,
gelu, elu, selu, mish, glu, ...), softmax, log_softmax, logsumexp,
one_hot, standardize and dot_product_attention.
Reductions over a sharded axis are lowered as any (the service sums across
devices)."""
from . import numpy as jnp
from .numpy import _at_once

import math

import numpy as _np

__all__ = ["relu", "sigmoid", "silu", "swish", "softplus", "gelu", "softmax", "log_softmax",
           "logsumexp", "one_hot"]


@_at_once
def relu(x):
    """max(x, 0)."""
    return jnp.maximum(x, 0)


@_at_once
def sigmoid(x):
    """1 / (1 + exp(-x)) (the logistic op)."""
    return jnp.logistic(x)


@_at_once
def silu(x):
    """x * sigmoid(x)."""
    return x * jnp.logistic(x)


swish = silu


@_at_once
def softplus(x):
    """log(1 + exp(x)), as max(x, 0) + log1p(exp(-|x|)) (JAX's logaddexp(x, 0))
    so large x stays finite."""
    return jnp.maximum(x, 0) + jnp.log1p(jnp.exp(-abs(x)))


@_at_once
def gelu(x, approximate=True):
    """jax.nn.gelu: with approximate (JAX's default) the tanh form
    x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3))), else x/2 (1 + erf(x/sqrt(2)))."""
    if approximate:
        return x * 0.5 * (1 + jnp.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * (x * x * x))))
    return x * 0.5 * (1 + jnp.erf(x * (1 / math.sqrt(2))))


@_at_once
def softmax(x, axis=-1):
    """exp(x - max) / sum, along axis (the max taken out first, as JAX's)."""
    e = jnp.exp(x - jnp.max(x, axis=axis, keepdims=True))
    return e / jnp.sum(e, axis=axis, keepdims=True)


@_at_once
def log_softmax(x, axis=-1):
    """x - max - log(sum(exp(x - max))), along axis."""
    s = x - jnp.max(x, axis=axis, keepdims=True)
    return s - jnp.log(jnp.sum(jnp.exp(s), axis=axis, keepdims=True))


@_at_once
def logsumexp(a, axis=None, keepdims=False):
    """log(sum(exp(a))) over axis, as jax.nn.logsumexp: the max taken out
    first (0 where it is not finite, so -inf rows give -inf, not NaN)."""
    m = jnp.max(a, axis=axis, keepdims=True)
    m = jnp.where(jnp.isfinite(m), m, 0)
    s = jnp.log(jnp.sum(jnp.exp(a - m), axis=axis, keepdims=keepdims))
    return s + (m if keepdims else jnp.squeeze(m, axis) if axis is not None else jnp.reshape(m, ()))


@_at_once
def one_hot(x, num_classes, *, dtype=_np.float32, axis=-1, out_sharding=None):
    """jax.nn.one_hot: x[..., None] == arange(num_classes) as dtype, the new
    dimension at axis; out_sharding= the result's sharding, whose entries
    but the new dimension's must be x's (JAX's check)."""
    from ._core import InvalidArgument, P
    rank = len(x.shape) + 1
    ax = axis + rank if axis < 0 else axis
    iota = jnp.reshape(jnp.arange(num_classes, dtype=x.dtype),
                       tuple(num_classes if d == ax else 1 for d in range(rank)))
    out = jnp.astype(jnp.expand_dims(x, ax) == iota, dtype)
    if out_sharding is None:
        return out
    spec = getattr(out_sharding, "spec", out_sharding)
    if spec.unreduced:
        raise NotImplementedError
    want = list(spec) + [None] * (rank - len(spec))
    have = list(jnp._spec_of_type(x.type) or ()) if hasattr(x, "type") else []
    have += [None] * (rank - 1 - len(have))
    if want[:ax] + want[ax + 1:] != have:
        raise InvalidArgument(f"The input part of spec in out_sharding should match the spec of "
                              f"`x`. Got typeof(x).spec={P(*have)} and "
                              f"out_sharding.spec={P(*(want[:ax] + want[ax + 1:]))}")
    return jnp.reshard(out, P(*want))


@_at_once
def relu6(x):
    """min(max(x, 0), 6)."""
    return jnp.minimum(jnp.maximum(x, 0), 6)


@_at_once
def leaky_relu(x, negative_slope=0.01):
    """x where positive, negative_slope * x elsewhere."""
    return jnp.where(x >= 0, x, negative_slope * x)


@_at_once
def elu(x, alpha=1.0):
    """x where positive, alpha * (exp(x) - 1) elsewhere."""
    return jnp.where(x > 0, x, alpha * jnp.expm1(jnp.minimum(x, 0)))


@_at_once
def celu(x, alpha=1.0):
    """max(x, 0) + alpha * (exp(min(x, 0) / alpha) - 1)."""
    return jnp.maximum(x, 0) + alpha * jnp.expm1(jnp.minimum(x, 0) / alpha)


@_at_once
def selu(x):
    """scale * elu(x, alpha) with JAX's constants."""
    alpha = 1.6732632423543772848170429916717
    scale = 1.0507009873554804934193349852946
    return scale * elu(x, alpha)


@_at_once
def log_sigmoid(x):
    """-softplus(-x)."""
    return -softplus(-x)


@_at_once
def soft_sign(x):
    """x / (|x| + 1)."""
    return x / (jnp.abs(x) + 1)


@_at_once
def hard_tanh(x):
    """x clipped to [-1, 1]."""
    return jnp.clip(x, -1, 1)


@_at_once
def hard_sigmoid(x):
    """relu6(x + 3) / 6."""
    return relu6(x + 3.0) / 6.0


@_at_once
def hard_silu(x):
    """x * hard_sigmoid(x)."""
    return x * hard_sigmoid(x)


hard_swish = hard_silu


@_at_once
def mish(x):
    """x * tanh(softplus(x))."""
    return x * jnp.tanh(softplus(x))


@_at_once
def glu(x, axis=-1):
    """The first half of x along axis times the sigmoid of the second."""
    a, b = jnp.split(x, 2, axis=axis)
    return a * sigmoid(b)


@_at_once
def standardize(x, axis=-1, mean=None, variance=None, epsilon=1e-5):
    """(x - mean) / sqrt(variance + epsilon), both over axis unless given."""
    if mean is None:
        mean = jnp.mean(x, axis=axis, keepdims=True)
    if variance is None:
        variance = jnp.mean(jnp.square(x - mean), axis=axis, keepdims=True)
    return (x - mean) * jnp.rsqrt(variance + epsilon)


def dot_product_attention(query, key, value, bias=None, mask=None, *, scale=None,
                          is_causal=False):
    """jax.nn.dot_product_attention for (B, T, N, H) query and (B, S, N, H)
    key and value (the same number of heads): softmax(q k / sqrt(H) + bias,
    masked) v, as (B, T, N, H). mask: true where attention is allowed;
    is_causal: position t attends to s <= t."""
    h = query.shape[-1]
    scale = 1.0 / math.sqrt(h) if scale is None else scale
    s = jnp.einsum("btnh,bsnh->bnts", query, key) * scale
    if bias is not None:
        s = s + bias
    t_len, s_len = query.shape[1], key.shape[1]
    if is_causal:
        causal = jnp.tril(jnp.ones((t_len, s_len), _np.float32)) > 0
        s = jnp.where(causal, s, -1e30)  # (a finite minimum: no NaN where all are masked)
    if mask is not None:
        s = jnp.where(mask, s, -1e30)
    return jnp.einsum("bnts,bsnh->btnh", softmax(s, axis=-1), value)


__all__ += ["relu6", "leaky_relu", "elu", "celu", "selu", "log_sigmoid", "soft_sign",
            "hard_tanh", "hard_sigmoid", "hard_silu", "hard_swish", "mish", "glu",
            "standardize", "dot_product_attention"]


@_at_once
def tanh(x):
    """jax.nn.tanh (jnp.tanh)."""
    return jnp.tanh(x)


def normalize(x, axis=-1, mean=None, variance=None, epsilon=1e-5):
    """jax.nn.normalize, JAX's deprecated alias of standardize."""
    import warnings
    warnings.warn("jax.nn.normalize will be deprecated. Use jax.nn.standardize instead.",
                  DeprecationWarning, stacklevel=2)
    return standardize(x, axis, mean, variance, epsilon)


@_at_once
def sparse_plus(x):
    """0 for x <= -1, x for x >= 1, (x + 1)**2 / 4 between (JAX's)."""
    return jnp.where(x <= -1.0, 0.0, jnp.where(x >= 1.0, x, (x + 1.0) ** 2 / 4))


@_at_once
def squareplus(x, b=4):
    """(x + sqrt(x**2 + b)) / 2 (JAX's)."""
    return (x + jnp.sqrt(jnp.square(x) + b)) / 2


__all__ += ["tanh", "normalize", "sparse_plus", "squareplus", "initializers"]


# ---- jax.nn.initializers: host draws of shmap.random, JAX's algorithms ---------


def _make_initializers():
    """The jax.nn.initializers namespace (a module: shmap.nn.initializers).
    Each init(key, shape, dtype=float32) draws on the host with
    shmap.random's samplers by the algorithm of JAX's initializer, so a key
    gives JAX's values; the result is placed as shmap.random's are (numpy
    with no mesh set, a replicated Array on the context mesh, a constant
    inside a jit; out_sharding= lays it out)."""
    import sys
    import types

    from . import random as _r

    mod = types.ModuleType(__name__ + ".initializers", _make_initializers.__doc__)

    def dt_of(name, dtype):
        return _r._float_dtype(name, dtype)

    def scaled(name, key, draw, shape, dtype, factor, out_sharding):
        k, _ = _r._key_data_of(name, key)
        dt = dt_of(name, dtype)
        shape = _r._shape(shape)
        return _r._place(name, (draw(k, shape, dt) * factor(dt)).astype(dt), out_sharding)

    def trunc(k, shape, dt, lower, upper):  # shmap.random.truncated_normal's host draw
        lower, upper = _np.asarray(lower, dt), _np.asarray(upper, dt)
        sqrt2 = _np.array(_np.sqrt(2), dt)
        a, b = _r._erf(lower / sqrt2), _r._erf(upper / sqrt2)
        out = sqrt2 * _r._erf_inv(_r._uniform(k, shape, dt, a, b))
        return _np.minimum(_np.maximum(out, _np.nextafter(lower, _np.array(_np.inf, dt))),
                           _np.nextafter(upper, _np.array(-_np.inf, dt))).astype(dt)

    def zeros(key, shape, dtype=None, out_sharding=None):
        """An array of zeros (the key is ignored)."""
        return _r._place("zeros", _np.zeros(_r._shape(shape), dt_of("zeros", dtype)),
                         out_sharding)

    def ones(key, shape, dtype=None, out_sharding=None):
        """An array of ones (the key is ignored)."""
        return _r._place("ones", _np.ones(_r._shape(shape), dt_of("ones", dtype)),
                         out_sharding)

    def constant(value, dtype=None):
        """An initializer of arrays full of value."""
        def init(key, shape, dtype=dtype, out_sharding=None):
            return _r._place("constant", _np.full(_r._shape(shape), value,
                                                  dt_of("constant", dtype)), out_sharding)
        return init

    def uniform(scale=1e-2, dtype=None):
        """Uniform in [0, scale): random.uniform(key, shape) * scale."""
        def init(key, shape, dtype=dtype, out_sharding=None):
            return scaled("uniform", key, lambda k, s, dt: _r._uniform(k, s, dt, 0., 1.),
                          shape, dtype, lambda dt: _np.array(scale, dt), out_sharding)
        return init

    def normal(stddev=1e-2, dtype=None):
        """random.normal(key, shape) * stddev."""
        def init(key, shape, dtype=dtype, out_sharding=None):
            return scaled("normal", key, _r._normal, shape, dtype,
                          lambda dt: _np.array(stddev, dt), out_sharding)
        return init

    def truncated_normal(stddev=1e-2, dtype=None, lower=-2.0, upper=2.0):
        """random.truncated_normal(key, lower, upper, shape) * stddev."""
        def init(key, shape, dtype=dtype, out_sharding=None):
            return scaled("truncated_normal", key,
                          lambda k, s, dt: trunc(k, s, dt, lower, upper), shape, dtype,
                          lambda dt: _np.array(stddev, dt), out_sharding)
        return init

    def _compute_fans(shape, in_axis=-2, out_axis=-1, batch_axis=()):
        if isinstance(in_axis, int) and in_axis == -2 and len(shape) <= 1:
            raise ValueError(f"Can't compute input and output sizes of a {len(shape)}-"
                             f"dimensional weights tensor with default in_axis. Must be at "
                             f"least 2D or specify in_axis explicitly.")
        size = (lambda ax: shape[ax] if isinstance(ax, int) else
                math.prod([shape[i] for i in ax]))
        in_size, out_size, batch_size = size(in_axis), size(out_axis), size(batch_axis)
        receptive = math.prod(shape) / in_size / out_size / batch_size
        return in_size * receptive, out_size * receptive

    def variance_scaling(scale, mode, distribution, in_axis=-2, out_axis=-1, batch_axis=(),
                         dtype=None):
        """JAX's variance_scaling: variance scale / n (n by mode: fan_in,
        fan_out, fan_avg, fan_geo_avg); truncated_normal: truncated_normal(
        -2, 2) * sqrt(variance) / .87962566103423978; normal: normal *
        sqrt(variance); uniform: uniform(-1, 1) * sqrt(3 variance)."""
        def init(key, shape, dtype=dtype, out_sharding=None):
            shape = _r._shape(shape)
            fan_in, fan_out = _compute_fans(shape, in_axis, out_axis, batch_axis)
            if mode == "fan_in":
                den = fan_in
            elif mode == "fan_out":
                den = fan_out
            elif mode == "fan_avg":
                den = (fan_in + fan_out) / 2
            elif mode == "fan_geo_avg":
                den = (fan_in * fan_out) ** 0.5
            else:
                raise ValueError(f"invalid mode for variance scaling initializer: {mode}")

            def var(dt):
                return _np.array(scale / den, dt)
            if distribution == "truncated_normal":
                return scaled("variance_scaling", key, lambda k, s, dt: trunc(k, s, dt, -2, 2),
                              shape, dtype, lambda dt: (_np.sqrt(var(dt)) /
                                                        _np.array(.87962566103423978, dt)),
                              out_sharding)
            if distribution == "normal":
                return scaled("variance_scaling", key, _r._normal, shape, dtype,
                              lambda dt: _np.sqrt(var(dt)), out_sharding)
            if distribution == "uniform":
                return scaled("variance_scaling", key,
                              lambda k, s, dt: _r._uniform(k, s, dt, -1, 1.), shape, dtype,
                              lambda dt: _np.sqrt(3 * var(dt)), out_sharding)
            raise ValueError(f"invalid distribution for variance scaling initializer: "
                             f"{distribution}")
        return init

    def _special(scale, mode, distribution, doc):
        def builder(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
            return variance_scaling(scale, mode, distribution, in_axis=in_axis,
                                    out_axis=out_axis, batch_axis=batch_axis, dtype=dtype)
        builder.__doc__ = doc
        return builder

    glorot_uniform = _special(1.0, "fan_avg", "uniform", "variance_scaling(1, fan_avg, uniform)")
    glorot_normal = _special(1.0, "fan_avg", "truncated_normal",
                             "variance_scaling(1, fan_avg, truncated_normal)")
    lecun_uniform = _special(1.0, "fan_in", "uniform", "variance_scaling(1, fan_in, uniform)")
    lecun_normal = _special(1.0, "fan_in", "truncated_normal",
                            "variance_scaling(1, fan_in, truncated_normal)")
    he_uniform = _special(2.0, "fan_in", "uniform", "variance_scaling(2, fan_in, uniform)")
    he_normal = _special(2.0, "fan_in", "truncated_normal",
                         "variance_scaling(2, fan_in, truncated_normal)")
    def orthogonal(scale=1.0, column_axis=-1, dtype=None):
        """JAX's orthogonal: the Q of a normal (rows, columns) matrix's QR
        (columns of R's diagonal signs), laid out along column_axis, times
        scale."""
        def init(key, shape, dtype=dtype, out_sharding=None):
            shape = _r._shape(shape)
            if len(shape) < 2:
                raise ValueError("orthogonal initializer requires at least a 2D shape")
            dt = dt_of("orthogonal", dtype)
            k, _ = _r._key_data_of("orthogonal", key)
            n_rows, n_cols = math.prod(shape) // shape[column_axis], shape[column_axis]
            mshape = (n_cols, n_rows) if n_rows < n_cols else (n_rows, n_cols)
            q, r = _np.linalg.qr(_r._normal(k, mshape, dt))
            q = q * _np.sign(_np.diag(r))
            if n_rows < n_cols:
                q = q.T
            q = q.reshape(tuple(_np.delete(shape, column_axis)) + (shape[column_axis],))
            q = _np.moveaxis(q, -1, column_axis)
            return _r._place("orthogonal", (q * _np.array(scale, dt)).astype(dt), out_sharding)
        return init

    names = dict(zeros=zeros, ones=ones, constant=constant, uniform=uniform, normal=normal,
                 truncated_normal=truncated_normal, variance_scaling=variance_scaling,
                 glorot_uniform=glorot_uniform, glorot_normal=glorot_normal,
                 xavier_uniform=glorot_uniform, xavier_normal=glorot_normal,
                 lecun_uniform=lecun_uniform, lecun_normal=lecun_normal,
                 he_uniform=he_uniform, he_normal=he_normal, kaiming_uniform=he_uniform,
                 kaiming_normal=he_normal, orthogonal=orthogonal)
    for k, v in names.items():
        if v.__name__ != k and k not in ("xavier_uniform", "xavier_normal", "kaiming_uniform",
                                         "kaiming_normal"):
            v.__name__ = k
        setattr(mod, k, v)
    mod.__all__ = list(names)
    sys.modules[mod.__name__] = mod
    return mod


initializers = _make_initializers()


def identity(x):
    """jax.nn.identity: x."""
    return x


@_at_once
def sparse_sigmoid(x):
    """jax.nn.sparse_sigmoid: 0 below -1, 1 above 1, (x + 1) / 2 between."""
    return 0.5 * jnp.clip(x + 1.0, 0.0, 2.0)


@_at_once
def log1mexp(x):
    """jax.nn.log1mexp: log(1 - exp(-x)) for x > 0, by the branch that
    keeps its precision (log(-expm1(-x)) below log 2, log1p(-exp(-x))
    above)."""
    small = x < math.log(2)
    return jnp.where(small, jnp.log(-jnp.expm1(-jnp.where(small, x, 1.0))),
                     jnp.log1p(-jnp.exp(-jnp.where(small, 1.0, x))))


__all__ += ["identity", "sparse_sigmoid", "log1mexp"]
