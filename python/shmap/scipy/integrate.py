"""jax.scipy.integrate: trapezoid, the composite trapezoidal rule, as JAX
defines it (jnp.trapezoid's computation)."""
from .. import numpy as jnp

__all__ = ["trapezoid"]


def trapezoid(y, x=None, dx=1.0, axis=-1):
    """scipy.integrate.trapezoid: the integral of y along axis by the
    trapezoidal rule, over the sample points x (equally spaced by dx
    when None)."""
    return jnp.trapezoid(y, x, dx, axis)
