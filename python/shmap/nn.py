"""jax.nn-style functions for traced programs (and Arrays at once), made
of shmap.numpy's ops: the activations (relu, sigmoid, silu, softplus,
gelu, elu, selu, mish, glu, ...), softmax, log_softmax, logsumexp,
one_hot, standardize and dot_product_attention, each by JAX's formula (so
its derivative at the kinks is JAX's too: relu, relu6 and log1mexp are
custom_jvps as in JAX), and nn.initializers.
Reductions over a sharded axis are lowered as any (the service sums across
devices)."""
from . import lax
from . import numpy as jnp
from ._grad import custom_jvp as _custom_jvp, stop_gradient as _stop_gradient
from .numpy import _at_once, _reduced_axes

import math
import numbers

import numpy as _np

__all__ = ["relu", "sigmoid", "silu", "swish", "softplus", "gelu", "softmax", "log_softmax",
           "logsumexp", "one_hot"]


def _with_jvp(fun, rule):
    """fun as a custom_jvp whose tangent is rule(g, x) (JAX's defjvps of
    relu, relu6 and log1mexp: their derivative at the kinks is JAX's, not
    that of the maximum / minimum / where they are written with)."""
    f = _custom_jvp(fun)
    f.defjvps(lambda g, ans, x: rule(g, x))
    return f


def _zero_unless(keep):
    """A jvp rule g -> select(keep(x), g, 0) (JAX's relu and relu6)."""
    return lambda g, x: lax.select(keep(x), g, lax.full_like(g, 0))


def _relu_fwd(x):
    return jnp.maximum(x, 0)


_relu_fwd.__name__ = "relu"
_relu = _with_jvp(_relu_fwd, _zero_unless(lambda x: x > 0))


@_at_once
def relu(x):
    """max(x, 0); as JAX's (a custom_jvp), its derivative is
    select(x > 0, g, 0): 0 at x = 0, not the 0.5 of maximum's tie."""
    return _relu(x)


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
    """log(1 + exp(x)) as JAX's logaddexp(x, 0) (max(x, 0) + log1p(exp(-|x|)),
    so large x stays finite)."""
    return jnp.logaddexp(x, 0)


def _inexact(name, x):
    """x as JAX's promote_args_inexact makes it: integers and bools as
    float32 (the default float), floats as they are."""
    dt = getattr(x, "dtype", None)
    if dt is not None and not _np.issubdtype(_np.dtype(dt), _np.inexact):
        return jnp.astype(x, _np.float32)
    return x


@_at_once
def gelu(x, approximate=True):
    """jax.nn.gelu: with approximate (JAX's default) the tanh form
    x * 0.5 (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3))), else
    0.5 x erfc(-x sqrt(1/2)) (JAX's, accurate in the negative tail)."""
    x = _inexact("gelu", x)
    if approximate:
        cdf = 0.5 * (1.0 + jnp.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * (x ** 3))))
        return x * cdf
    return 0.5 * x * lax.erfc(-x * math.sqrt(0.5))


@_at_once
def softmax(x, axis=-1, where=None):
    """jax.nn.softmax: exp(x - max) / sum along axis (an int, a tuple or
    None), the max (stop_gradient) taken out first, as JAX's default
    (non-custom_jvp) softmax. where=: the elements to include; the others
    are left out of the max and the sum, and are 0 in the result."""
    x_max = jnp.max(x, axis, where=where, initial=-_np.inf, keepdims=True)
    x_safe = x if where is None else jnp.where(where, x, -_np.inf)
    unnormalized = jnp.exp(x_safe - _stop_gradient(x_max))
    result = unnormalized / jnp.sum(unnormalized, axis, where=where, keepdims=True)
    if where is not None:
        result = jnp.where(where, result, 0)
    return result


@_at_once
def log_softmax(x, axis=-1, where=None):
    """jax.nn.log_softmax: x - max - log(sum(exp(x - max))) along axis, the
    max (stop_gradient) taken out first. where=: the elements to include;
    the others are left out of the max and the sum, and are -inf in the
    result."""
    x_max = jnp.max(x, axis, where=where, initial=-_np.inf, keepdims=True)
    x_safe = x if where is None else jnp.where(where, x, -_np.inf)
    shifted = x_safe - _stop_gradient(x_max)
    shifted_logsumexp = jnp.log(jnp.sum(jnp.exp(shifted), axis, where=where, keepdims=True))
    result = shifted - shifted_logsumexp
    if where is not None:
        return jnp.where(where, result, -_np.inf)
    return result


@_at_once
def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False, where=None):
    """jax.nn.logsumexp (jax.scipy.special.logsumexp): log(sum(b * exp(a)))
    over axis, the max (0 where it is not finite; stop_gradient) taken out
    first, so -inf rows give -inf, not NaN. b: scaling factors (a is -inf
    where b is 0); return_sign: (log|sum|, sign of the sum), else NaN
    where the sum is negative; where: the elements to include."""
    if where is not None:
        a = jnp.where(where, a, 0)
    a = _inexact("logsumexp", a)
    if b is not None:
        b = _inexact("logsumexp", b)
        a = jnp.where(b != 0, a, -_np.inf)
    pos_dims = _reduced_axes(a, axis)
    amax = jnp.max(a, axis=pos_dims, keepdims=keepdims, where=where, initial=-_np.inf)
    amax = _stop_gradient(jnp.where(jnp.isfinite(amax), amax, 0))
    amax_with_dims = amax if keepdims else jnp.expand_dims(amax, pos_dims)
    exp_a = jnp.exp(a - amax_with_dims)
    if b is not None:
        exp_a = exp_a * b
    sumexp = jnp.sum(exp_a, axis=pos_dims, keepdims=keepdims, where=where)
    sign = jnp.sign(sumexp)
    out = jnp.log(jnp.abs(sumexp)) + amax
    if return_sign:
        return out, sign
    if b is not None:
        out = jnp.where(sign < 0, _np.nan, out)
    return out


@_at_once
def logmeanexp(x, axis=None, where=None, keepdims=False):
    """jax.nn.logmeanexp: logsumexp(x) - log(n) over axis, n the number of
    elements reduced (those where where= is True)."""
    lse = logsumexp(x, axis=axis, where=where, keepdims=keepdims)
    dt = lse.dtype
    if where is None:
        count = _np.array(math.prod(x.shape[d] for d in _reduced_axes(x, axis)), dt)
    else:
        count = jnp.sum(jnp.broadcast_to(where, x.shape), axis=axis, keepdims=keepdims,
                        dtype=dt)
    return lse - jnp.log(count)


@_at_once
def one_hot(x, num_classes, *, dtype=None, axis=-1, out_sharding=None):
    """jax.nn.one_hot: x[..., None] == arange(num_classes) as dtype (float32
    by default), the new dimension at axis; out_sharding= the result's
    sharding, whose entries but the new dimension's must be x's (JAX's
    check). axis a mesh axis name (in a shard_map body): x == the device's
    index along it, of x's shape (num_classes must be the axis's size)."""
    from ._core import InvalidArgument, P
    dtype = _np.float32 if dtype is None else dtype
    if not isinstance(axis, numbers.Integral):
        axis_size = lax.axis_size(axis)
        if num_classes != axis_size:
            raise ValueError(f"Expected num_classes to match the size of axis {axis}, "
                             f"but {num_classes} != {axis_size}") from None
        return jnp.astype(x == lax.axis_index(axis), dtype)
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


def _relu6_fwd(x):
    return jnp.minimum(jnp.maximum(x, 0), 6.)


_relu6_fwd.__name__ = "relu6"
_relu6 = _with_jvp(_relu6_fwd, _zero_unless(lambda x: (x > 0) & (x < 6)))


@_at_once
def relu6(x):
    """min(max(x, 0), 6); as JAX's (a custom_jvp), its derivative is
    select((x > 0) & (x < 6), g, 0): 0 at 0 and at 6."""
    return _relu6(x)


@_at_once
def leaky_relu(x, negative_slope=0.01):
    """x where positive, negative_slope * x elsewhere."""
    return jnp.where(x >= 0, x, negative_slope * x)


@_at_once
def elu(x, alpha=1.0):
    """x where positive, alpha * (exp(x) - 1) elsewhere, as JAX's
    where(x > 0, x, alpha * expm1(where(x > 0, 0, x))) (its derivative at
    0 is alpha's branch's: alpha)."""
    return jnp.where(x > 0, x, alpha * jnp.expm1(jnp.where(x > 0, 0., x)))


@_at_once
def celu(x, alpha=1.0):
    """max(x, 0) + alpha * (exp(min(x, 0) / alpha) - 1) (JAX's)."""
    return jnp.maximum(x, 0.0) + alpha * jnp.expm1(jnp.minimum(x, 0.0) / alpha)


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
    """x clipped to [-1, 1], as JAX's where(x > 1, 1, where(x < -1, -1, x))
    (its derivative at -1 and 1 is 1)."""
    return jnp.where(x > 1, 1, jnp.where(x < -1, -1, x))


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
    assert x.shape[axis] % 2 == 0, "axis size must be divisible by 2"
    a, b = jnp.split(x, 2, axis=axis)
    return a * sigmoid(b)


@_at_once
def standardize(x, axis=-1, mean=None, variance=None, epsilon=1e-5, where=None, *,
                algorithm="fast"):
    """jax.nn.standardize: (x - mean) * rsqrt(variance + epsilon), each over
    axis (with where=: of the elements where it is True) unless given.
    algorithm "fast" (JAX's default): variance = mean(x**2) - mean**2,
    clipped at 0; "stable": mean((x - mean)**2)."""
    if mean is None:
        mean = jnp.mean(x, axis, keepdims=True, where=where)
    if variance is None:
        if algorithm == "stable":
            variance = jnp.mean(jnp.square(jnp.subtract(x, mean)), axis, keepdims=True,
                                where=where)
        elif algorithm == "fast":
            variance = jnp.mean(jnp.square(x), axis, keepdims=True, where=where) - \
                jnp.square(mean)
            variance = jnp.clip(variance, 0)
        else:
            raise ValueError(f"Unknown algorithm '{algorithm}'. Expected 'fast' or 'stable'.")
    return jnp.subtract(x, mean) * lax.rsqrt(variance + epsilon)


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


def normalize(x, axis=-1, mean=None, variance=None, epsilon=1e-5, where=None):
    """jax.nn.normalize, JAX's deprecated alias of standardize."""
    import warnings
    warnings.warn("jax.nn.normalize will be deprecated. Use jax.nn.standardize instead.",
                  DeprecationWarning, stacklevel=2)
    return standardize(x, axis, mean, variance, epsilon, where)


@_at_once
def sparse_plus(x):
    """0 for x <= -1, x for x >= 1, (x + 1)**2 / 4 between (JAX's)."""
    return jnp.where(x <= -1.0, 0.0, jnp.where(x >= 1.0, x, (x + 1.0) ** 2 / 4))


@_at_once
def squareplus(x, b=4):
    """(x + sqrt(x**2 + b)) / 2 (JAX's)."""
    return (x + jnp.sqrt(jnp.square(x) + b)) / 2


__all__ += ["tanh", "normalize", "sparse_plus", "squareplus", "initializers"]


# ---- jax.nn.initializers: shmap.random's draws, JAX's algorithms ---------------


def _make_initializers():
    """The jax.nn.initializers namespace (a module: shmap.nn.initializers).
    Each init(key, shape, dtype=float32) draws with shmap.random's samplers
    by the algorithm of JAX's initializer, so a key gives JAX's values. A
    concrete key draws on the host, the result placed as shmap.random's are
    (numpy with no mesh set, a replicated Array on the context mesh, a
    constant inside a jit; out_sharding= lays it out); a key traced in a
    jit (an argument) draws in the program with shmap.random's traced-key
    samplers (float32 only, as theirs), as random.normal(key, ...) does
    there."""
    import sys
    import types
    import typing

    from . import random as _r

    mod = types.ModuleType(__name__ + ".initializers", _make_initializers.__doc__)

    def dt_of(name, dtype):
        return _r._float_dtype(name, dtype)

    def traced(name, key, dt):
        """Whether key is traced (its draws made in the program), which
        takes float32 only (shmap.random's traced-key samplers)."""
        if not _r._is_traced(key):
            return False
        if dt != _np.dtype(_np.float32):
            from ._core import InvalidArgument
            raise InvalidArgument(
                f"shmap.nn.initializers.{name}: a key traced in a jit draws float32 only "
                f"(shmap.random's traced-key samplers), got {dt}: draw {dt} with a concrete "
                f"key (closed over, or outside the jit)")
        return True

    def scaled(name, key, host, program, shape, dtype, factor, out_sharding):
        """A draw times factor(dt): host(k, shape, dt) on key data k for a
        concrete key, program(key, shape, dt, out_sharding) (shmap.random's
        public sampler, which draws in the program) for a traced one."""
        dt = dt_of(name, dtype)
        shape = _r._shape(shape)
        if traced(name, key, dt):
            return program(key, shape, dt, out_sharding) * factor(dt)
        k, _ = _r._key_data_of(name, key)
        return _r._place(name, (host(k, shape, dt) * factor(dt)).astype(dt), out_sharding)

    def trunc(k, shape, dt, lower, upper):  # shmap.random.truncated_normal's host draw
        lower, upper = _np.asarray(lower, dt), _np.asarray(upper, dt)
        sqrt2 = _np.array(_np.sqrt(2), dt)
        a, b = _r._erf(lower / sqrt2), _r._erf(upper / sqrt2)
        out = sqrt2 * _r._erf_inv(_r._uniform(k, shape, dt, a, b))
        return _np.minimum(_np.maximum(out, _np.nextafter(lower, _np.array(_np.inf, dt))),
                           _np.nextafter(upper, _np.array(-_np.inf, dt))).astype(dt)

    def host_uniform(lo, hi):
        return lambda k, s, dt: _r._uniform(k, s, dt, lo, hi)

    def program_uniform(lo, hi):
        return lambda key, s, dt, osh: _r.uniform(key, s, dt, lo, hi, out_sharding=osh)

    def program_normal(key, s, dt, osh):
        return _r.normal(key, s, dt, out_sharding=osh)

    def program_trunc(lower, upper):
        return lambda key, s, dt, osh: _r.truncated_normal(key, lower, upper, s, dt,
                                                           out_sharding=osh)

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
            return scaled("uniform", key, host_uniform(0., 1.), program_uniform(0., 1.),
                          shape, dtype, lambda dt: _np.array(scale, dt), out_sharding)
        return init

    def normal(stddev=1e-2, dtype=None):
        """random.normal(key, shape) * stddev."""
        def init(key, shape, dtype=dtype, out_sharding=None):
            return scaled("normal", key, _r._normal, program_normal, shape, dtype,
                          lambda dt: _np.array(stddev, dt), out_sharding)
        return init

    def truncated_normal(stddev=1e-2, dtype=None, lower=-2.0, upper=2.0):
        """random.truncated_normal(key, lower, upper, shape) * stddev."""
        def init(key, shape, dtype=dtype, out_sharding=None):
            return scaled("truncated_normal", key,
                          lambda k, s, dt: trunc(k, s, dt, lower, upper),
                          program_trunc(lower, upper), shape, dtype,
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
                              program_trunc(-2, 2), shape, dtype,
                              lambda dt: (_np.sqrt(var(dt)) /
                                          _np.array(.87962566103423978, dt)),
                              out_sharding)
            if distribution == "normal":
                return scaled("variance_scaling", key, _r._normal, program_normal, shape, dtype,
                              lambda dt: _np.sqrt(var(dt)), out_sharding)
            if distribution == "uniform":
                return scaled("variance_scaling", key, host_uniform(-1, 1.),
                              program_uniform(-1, 1.), shape, dtype,
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

    def ortho(name, key, shape, column_axis, dt, scale):
        """JAX's orthogonal of a 2D-or-more shape with no zero dimension:
        scale times random.orthogonal(key, rows, (), dt, columns) (the Q of
        a normal matrix's QR, by R's diagonal signs), its columns laid out
        along column_axis. A concrete key: numpy, on the host; a traced
        one: in the program (random.orthogonal's traced QR)."""
        n_rows, n_cols = math.prod(shape) // shape[column_axis], shape[column_axis]
        lead = tuple(int(d) for d in _np.delete(shape, column_axis)) + (shape[column_axis],)
        if traced(name, key, dt):
            q = jnp.reshape(_r.orthogonal(key, n_rows, (), dt, n_cols), lead)
            return jnp.moveaxis(q, -1, column_axis) * dt.type(scale)
        k, _ = _r._key_data_of("orthogonal", key)
        mshape = (n_cols, n_rows) if n_rows < n_cols else (n_rows, n_cols)
        q, r = _np.linalg.qr(_r._normal(k, mshape, dt))
        q = q * _np.sign(_np.diag(r))
        if n_rows < n_cols:
            q = q.T
        q = _np.moveaxis(q.reshape(lead), -1, column_axis)
        return (q * _np.array(scale, dt)).astype(dt)

    def orthogonal(scale=1.0, column_axis=-1, dtype=None):
        """JAX's orthogonal: the Q of a normal (rows, columns) matrix's QR
        (columns of R's diagonal signs), laid out along column_axis, times
        scale (zeros for a shape with a zero dimension)."""
        def init(key, shape, dtype=dtype, out_sharding=None):
            shape = _r._shape(shape)
            if len(shape) < 2:
                raise ValueError("orthogonal initializer requires at least a 2D shape")
            dt = dt_of("orthogonal", dtype)
            if any(d == 0 for d in shape):
                return zeros(key, shape, dt, out_sharding)
            q = ortho("orthogonal", key, shape, column_axis, dt, scale)
            return _r._placed("orthogonal", q, out_sharding) if _r._is_traced(key) else \
                _r._place("orthogonal", q, out_sharding)
        return init

    def delta_orthogonal(scale=1.0, column_axis=-1, dtype=None):
        """JAX's delta_orthogonal (for 3D, 4D or 5D convolution kernels,
        shape[-2] <= shape[-1]): zeros but at the spatial centre, which
        holds orthogonal(scale, column_axis) of shape[-2:]."""
        def init(key, shape, dtype=dtype, out_sharding=None):
            if out_sharding is not None:
                raise NotImplementedError
            shape = _r._shape(shape)
            dt = dt_of("delta_orthogonal", dtype)
            if len(shape) not in (3, 4, 5):
                raise ValueError("Delta orthogonal initializer requires a 3D, 4D or 5D shape.")
            if shape[-1] < shape[-2]:
                raise ValueError("`fan_in` must be less or equal than `fan_out`. ")
            centre = tuple((k - 1) // 2 for k in shape[:-2])
            if any(d == 0 for d in shape[-2:]):
                return zeros(key, shape, dt)
            q = ortho("delta_orthogonal", key, shape[-2:], column_axis, dt, scale)
            if _r._is_traced(key):
                return jnp.zeros(shape, dt).at[centre].set(q)
            w = _np.zeros(shape, dt)
            w[centre] = q
            return _r._place("delta_orthogonal", w, None)
        return init

    @typing.runtime_checkable
    class Initializer(typing.Protocol):
        """Protocol for initializers returned by jax.nn.initializers APIs:
        init(key, shape, dtype=None, out_sharding=None) -> an array."""
        def __call__(self, key, shape, dtype=None, out_sharding=None):
            raise NotImplementedError

    Initializer.__module__ = mod.__name__
    names = dict(zeros=zeros, ones=ones, constant=constant, uniform=uniform, normal=normal,
                 truncated_normal=truncated_normal, variance_scaling=variance_scaling,
                 glorot_uniform=glorot_uniform, glorot_normal=glorot_normal,
                 xavier_uniform=glorot_uniform, xavier_normal=glorot_normal,
                 lecun_uniform=lecun_uniform, lecun_normal=lecun_normal,
                 he_uniform=he_uniform, he_normal=he_normal, kaiming_uniform=he_uniform,
                 kaiming_normal=he_normal, orthogonal=orthogonal,
                 delta_orthogonal=delta_orthogonal, Initializer=Initializer)
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


def _log1mexp(x):
    small = x < math.log(2)
    return jnp.where(small, jnp.log(-jnp.expm1(-jnp.where(small, x, 1.0))),
                     jnp.log1p(-jnp.exp(-jnp.where(small, 1.0, x))))


_log1mexp.__name__ = "log1mexp"
_log1mexp_jvp = _with_jvp(_log1mexp, lambda g, x: g / jnp.expm1(x))


@_at_once
def log1mexp(x):
    """jax.nn.log1mexp: log(1 - exp(-x)) for x > 0, by the branch that
    keeps its precision (log(-expm1(-x)) below log 2, log1p(-exp(-x))
    above); as JAX's (a custom_jvp), its derivative is g / expm1(x)."""
    return _log1mexp_jvp(x)


__all__ += ["identity", "sparse_sigmoid", "log1mexp", "logmeanexp"]


# Python's float and int as dtype= (one_hot, the initializers): JAX's float32 and int32
from ._core import _canon_module_dtypes  # noqa: E402
_canon_module_dtypes(globals(), __all__)
