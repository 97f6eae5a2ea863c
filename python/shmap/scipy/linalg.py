"""jax.scipy.linalg over shmap.linalg: cholesky (upper by default, as
scipy's), cho_factor, cho_solve, solve_triangular, solve, inv, det,
block_diag, eigh, svd, qr, pinv, and expm (Higham's scaling and squaring
with the degree-13 Padé approximant)."""
import numpy as _np

from .. import linalg as _la
from .. import numpy as jnp
from ..linalg import det, inv, solve_triangular  # noqa: F401
from ..numpy import _at_once

__all__ = ["cholesky", "cho_factor", "cho_solve", "solve_triangular", "solve", "inv", "det",
           "block_diag", "eigh", "svd", "qr", "pinv", "expm"]


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


def eigh(a, b=None, lower=True, eigvals_only=False, **kwargs):
    """scipy.linalg.eigh of a symmetric matrix (no generalized problem):
    (w, v), or w alone with eigvals_only."""
    if b is not None:
        raise NotImplementedError("scipy.linalg.eigh: the generalized problem (b=) is not "
                                  "implemented here")
    w, v = _la.eigh(a)
    return w if eigvals_only else (w, v)


def svd(a, full_matrices=True, compute_uv=True, **kwargs):
    """scipy.linalg.svd (the thin factors, as shmap.linalg.svd)."""
    return _la.svd(a, full_matrices=full_matrices, compute_uv=compute_uv)


def qr(a, mode="full", pivoting=False, **kwargs):
    """scipy.linalg.qr: mode 'full' (numpy's 'complete'), 'economic'
    (numpy's 'reduced') or 'r'."""
    if pivoting:
        raise NotImplementedError("scipy.linalg.qr: pivoting=True is not implemented here")
    got = _la.qr(a, mode={"full": "complete", "economic": "reduced", "r": "r"}[mode])
    return (got,) if mode == "r" else got


def pinv(a, **kwargs):
    return _la.pinv(a, **kwargs)


# Higham's degree-13 Padé coefficients and theta_13 (scaling and squaring)
_PADE13 = (64764752532480000., 32382376266240000., 7771770303897600., 1187353796428800.,
           129060195264000., 10559470521600., 670442572800., 33522128640., 1323241920.,
           40840800., 960960., 16380., 182., 1.)
_THETA13 = 5.371920351148152


@_at_once
def expm(A, *, upper_triangular=False, max_squarings=16):
    """jax.scipy.linalg.expm: the [13/13] Padé approximant of exp(A / 2**s)
    squared s times, s = ceil(log2(|A|_1 / theta_13)) (Higham's scaling and
    squaring). s is a value of the data, so max_squarings squarings are
    unrolled, each taken only where needed; NaN where more are needed, as
    JAX's."""
    a = A if _np.issubdtype(A.dtype, _np.floating) else jnp.astype(A, _np.float32)
    n = a.shape[-1]
    norm = jnp.max(jnp.sum(jnp.abs(a), axis=-2), axis=-1, keepdims=True)    # |A|_1
    s = jnp.maximum(0.0, jnp.ceil(jnp.log2(jnp.where(norm > 0, norm, 1.0) / _THETA13)))
    s = jnp.expand_dims(s, -1)                                               # (..., 1, 1)
    a = a / jnp.power(2.0, s)
    b = _PADE13
    eye = jnp.eye(n, dtype=a.dtype)
    a2 = jnp.matmul(a, a)
    a4 = jnp.matmul(a2, a2)
    a6 = jnp.matmul(a4, a2)
    u = jnp.matmul(a, jnp.matmul(a6, b[13] * a6 + b[11] * a4 + b[9] * a2) +
                   b[7] * a6 + b[5] * a4 + b[3] * a2 + b[1] * eye)
    v = jnp.matmul(a6, b[12] * a6 + b[10] * a4 + b[8] * a2) + b[6] * a6 + b[4] * a4 + \
        b[2] * a2 + b[0] * eye
    r = _la.solve(v - u, v + u)
    for k in range(max_squarings):
        r = jnp.where(s > k, jnp.matmul(r, r), r)
    return jnp.where(s > max_squarings, _np.nan, r)
