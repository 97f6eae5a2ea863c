"""jax.nn-style activations for traced programs (and Arrays at once), made
of shmap.numpy's ops: relu, sigmoid, silu, softplus, softmax, log_softmax.
Reductions over a sharded axis are lowered as any (the service sums across
devices)."""
from . import numpy as jnp
from .numpy import _at_once

__all__ = ["relu", "sigmoid", "silu", "swish", "softplus", "softmax", "log_softmax"]


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
    """log(1 + exp(x)), as max(x, 0) + log(1 + exp(-|x|)) so large x stays finite."""
    return jnp.maximum(x, 0) + jnp.log(jnp.exp(-abs(x)) + 1)


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
