"""jax.nn-style functions for traced programs (and Arrays at once), made
of shmap.numpy's ops: relu, sigmoid, silu, softplus, gelu, softmax,
log_softmax, logsumexp and one_hot.
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
