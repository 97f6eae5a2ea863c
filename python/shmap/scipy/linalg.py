"""jax.scipy.linalg over shmap.linalg: cholesky (upper by default, as
scipy's), cho_factor, cho_solve, solve_triangular, solve, inv, det,
block_diag."""
from .. import linalg as _la
from .. import numpy as jnp
from ..linalg import det, inv, solve_triangular  # noqa: F401

__all__ = ["cholesky", "cho_factor", "cho_solve", "solve_triangular", "solve", "inv", "det",
           "block_diag"]


def cholesky(a, lower=False, overwrite_a=False, check_finite=True):
    """scipy.linalg.cholesky: the upper factor unless lower=True."""
    return _la.cholesky(a, upper=not lower)


def cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    """(the factor, lower), for cho_solve."""
    return cholesky(a, lower=lower), lower


def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    """x with a x = b from a's Cholesky factor (cho_factor's pair)."""
    c, lower = c_and_lower
    vec = len(b.shape) == len(c.shape) - 1
    if vec:
        b = jnp.expand_dims(b, -1)
    y = _la.triangular_solve(c, b, left_side=True, lower=lower, transpose_a=not lower)
    x = _la.triangular_solve(c, y, left_side=True, lower=lower, transpose_a=lower)
    return x[..., 0] if vec else x


def solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, check_finite=True,
          assume_a="gen"):
    """scipy.linalg.solve: a general solve ('pos' through Cholesky)."""
    if assume_a == "pos":
        return cho_solve(cho_factor(a, lower=True), b)
    return _la.solve(a, b)


def block_diag(*arrs):
    """The arrays (2-d; 1-d and scalars as rows) on the diagonal of one
    matrix, zeros elsewhere."""
    mats = [jnp.reshape(a, (1, -1)) if len(a.shape) < 2 else a for a in arrs]
    cols = sum(m.shape[1] for m in mats)
    rows, at = [], 0
    for m in mats:
        parts = [jnp.zeros((m.shape[0], at), m.dtype)] if at else []
        parts.append(m)
        rest = cols - at - m.shape[1]
        if rest:
            parts.append(jnp.zeros((m.shape[0], rest), m.dtype))
        rows.append(jnp.concatenate(parts, axis=1) if len(parts) > 1 else m)
        at += m.shape[1]
    return jnp.concatenate(rows, axis=0) if len(rows) > 1 else rows[0]
