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
def one_hot(x, num_classes, *, dtype=_np.float32, axis=-1):
    """jax.nn.one_hot: x[..., None] == arange(num_classes) as dtype, the new
    dimension at axis."""
    rank = len(x.shape) + 1
    ax = axis + rank if axis < 0 else axis
    iota = jnp.reshape(jnp.arange(num_classes, dtype=x.dtype),
                       tuple(num_classes if d == ax else 1 for d in range(rank)))
    return jnp.astype(jnp.expand_dims(x, ax) == iota, dtype)


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
