"""jax.scipy.linalg over shmap.linalg, as JAX defines each name
(jax/_src/scipy/linalg.py): cholesky (upper by default, of the triangle it
names), cho_factor, cho_solve, solve (assume_a), solve_triangular, inv,
det, eigh, svd, qr, qr_multiply, pinv; lu, lu_factor and lu_solve (LAPACK's
getrf: partial pivoting, unrolled over the columns); hessenberg (LAPACK's
Householder reflections); schur (the real Schur form, by Francis
double-shift QR steps in a loop of the program, 2x2 blocks standardized as
LAPACK's dlanv2); sqrtm (the real Schur method) and solve_sylvester
(Bartels-Stewart on the real Schur forms); polar (JAX's QDWH, or the SVD);
expm (Higham's scaling and squaring with the degree-13 Padé approximant)
and expm_frechet (its JVP); eigh_tridiagonal (JAX's bisection on Sturm
counts, eigenvalues only); the special matrices toeplitz, hankel,
circulant, leslie, companion, fiedler, fiedler_companion,
convolution_matrix, block_diag, hilbert, invhilbert, pascal, invpascal,
helmert and hadamard.

shmap has no complex dtypes: schur(output='complex'), rsf2csf, funm and
dft (complex results in JAX) are not here, solve_sylvester's
method='eigen' is refused, and sqrtm returns the real square root (NaN
where the principal one is not real) where JAX returns a complex array.
Linear algebra needs the matrix dimensions unsharded (JAX's linalg
rule)."""
import functools
import math
import operator
import warnings

import numpy as _np

from .. import lax as _lax
from .. import linalg as _la
from .. import numpy as jnp
from ..linalg import det, inv, solve_triangular  # noqa: F401
from ..numpy import _at_once, _creation

__all__ = ["block_diag", "cholesky", "cho_factor", "cho_solve", "circulant", "companion",
           "convolution_matrix", "det", "eigh", "eigh_tridiagonal", "expm", "expm_frechet",
           "fiedler", "fiedler_companion", "hadamard", "helmert", "hessenberg", "hankel",
           "hilbert", "inv", "invhilbert", "invpascal", "leslie", "lu", "lu_factor",
           "lu_solve", "pascal", "pinv", "polar", "qr", "qr_multiply", "schur", "sqrtm",
           "solve", "solve_sylvester", "solve_triangular", "svd", "toeplitz"]


# ---- helpers ------------------------------------------------------------------


def _inexact(*xs):
    """JAX's promote_dtypes_inexact: one floating dtype for all (integers and
    bools as float32)."""
    dt = jnp.result_type(*xs)
    if not _np.issubdtype(dt, _np.floating):
        dt = _np.dtype(_np.float32)
    out = tuple(x if _np.dtype(x.dtype) == dt else jnp.astype(x, dt) for x in xs)
    return out if len(out) > 1 else out[0]


def _grid(m, n, nd):
    """Row and column indices of an m x n matrix, shaped for nd dimensions."""
    lead = (1,) * (nd - 2)
    return (jnp.reshape(jnp.arange(m), lead + (m, 1)),
            jnp.reshape(jnp.arange(n), lead + (1, n)))


def _core_sizes(signature, *shapes):
    """jnp.vectorize's checks of a gufunc signature against the arguments'
    shapes (its sentences); returns the broadcast of their loop shapes."""
    ctx = f"on vectorized function with excluded=frozenset() and signature={signature!r}"
    return jnp._loop_shape(shapes, jnp._core_dims(signature)[0], ctx)[0]


def _per_matrix(fn, a, *rest):
    """fn over the leading (batch) dimensions of a (and of rest, alike), one
    matrix at a time, the results stacked: for the algorithms whose loops
    run until their matrix converges. A sharded batch is gathered for the
    loop and the results laid out as it was (JAX's linalg rule)."""
    if len(a.shape) == 2:
        return fn(a, *rest)
    from .._conv import _gather_dims, _lay_out
    from .._trace import _entries
    batch = tuple(a.shape[:-2])
    ents = _entries(a)
    dims = set(range(len(batch)))
    a = _gather_dims(a, ents, dims)
    rest = [_gather_dims(r, _entries(r), dims) for r in rest]
    outs = [fn(a[idx], *(r[idx] for r in rest)) for idx in _np.ndindex(*batch)]
    if not outs:  # an empty batch: the results' shapes from one matrix of zeros
        one = fn(jnp.zeros(tuple(a.shape[-2:]), a.dtype),
                 *(jnp.zeros(tuple(r.shape[-2:]), r.dtype) for r in rest))
        return tuple(jnp.zeros(batch + tuple(o.shape), o.dtype) for o in one) \
            if isinstance(one, tuple) else jnp.zeros(batch + tuple(one.shape), one.dtype)
    multi = isinstance(outs[0], tuple)
    cols = list(zip(*outs)) if multi else [outs]
    want = None if ents is None else list(ents[:len(batch)])
    res = tuple(_lay_out(jnp.reshape(jnp.stack(list(c)), batch + tuple(c[0].shape)),
                         None if want is None else want + [None] * len(c[0].shape))
                for c in cols)
    return res if multi else res[0]


# ---- Cholesky, solve -------------------------------------------------------------


@_at_once
def cholesky(a, lower=False, overwrite_a=False, check_finite=True):
    """scipy.linalg.cholesky as JAX's: the lower factor of a's lower
    triangle (lower=True), else the upper factor of its upper triangle (the
    other triangle is not read)."""
    a = _inexact(a)
    lo = _la.cholesky(a if lower else jnp.swapaxes(a, -1, -2), symmetrize_input=False)
    return lo if lower else jnp.swapaxes(lo, -1, -2)


def cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    """(the factor, lower), for cho_solve."""
    return cholesky(a, lower=lower), lower


def _vector_rhs(name, m, b):
    """JAX's reading of b against a (..., n, n) matrix m: a vector when 1-d,
    or (deprecated, with its FutureWarning) when it has one dimension less
    and m's last size; else a batch of matrices."""
    if len(b.shape) == 1:
        return True
    if len(m.shape) == len(b.shape) + 1 and m.shape[-1] == b.shape[-1]:
        warnings.warn(f"jax.scipy.linalg.{name}: batched 1D solves with b.ndim > 1 are "
                      f"deprecated, and in the future will be treated as a batched 2D solve. "
                      f"Use {name}({'c_and_lower' if name == 'cho_solve' else 'lu_and_piv'}, "
                      f"b[..., None]).squeeze(-1) to avoid this warning.",
                      category=FutureWarning)
        return True
    return False


def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    """x with a x = b from a's Cholesky factor (cho_factor's pair); b a
    vector (n,) or matrices (..., n, k)."""
    c, lower = c_and_lower
    return _cho_solve(c, b, lower)


@_at_once
def _cho_solve(c, b, lower):
    c, b = _inexact(c, b)
    vec = _vector_rhs("cho_solve", c, b)
    if vec:
        b = jnp.expand_dims(b, -1)
    y = _la.triangular_solve(c, b, left_side=True, lower=lower, transpose_a=not lower)
    x = _la.triangular_solve(c, y, left_side=True, lower=lower, transpose_a=lower)
    return x[..., 0] if vec else x


_ASSUME_A = ["gen", "sym", "her", "pos"]


def solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, debug=False,
          check_finite=True, assume_a="gen"):
    """scipy.linalg.solve as JAX's: assume_a 'gen', 'sym' and 'her' solve by
    LU (jnp.linalg.solve), 'pos' by the Cholesky factor of the triangle
    lower names."""
    if assume_a not in _ASSUME_A:
        raise ValueError(f"Expected assume_a to be one of {_ASSUME_A}; got {assume_a!r}")
    return _solve(a, b, assume_a, lower)


@_at_once
def _solve(a, b, assume_a, lower):
    if assume_a != "pos":
        return _la.solve(a, b)
    a, b = _inexact(a, b)
    if not (len(a.shape) >= 2 and len(b.shape) in (len(a.shape), len(a.shape) - 1) and
            a.shape[-1] == a.shape[-2] == b.shape[len(a.shape) - 2]):
        raise ValueError(f"The arguments to solve must have shapes a=[..., m, m] and "
                         f"b=[..., m, k] or b=[..., m]; got a={tuple(a.shape)} and "
                         f"b={tuple(b.shape)}")
    c = cholesky(a, lower=lower)
    vec = len(a.shape) == len(b.shape) + 1
    if vec:
        b = jnp.expand_dims(b, -1)
    y = _la.triangular_solve(c, b, left_side=True, lower=lower, transpose_a=not lower)
    x = _la.triangular_solve(c, y, left_side=True, lower=lower, transpose_a=lower)
    return x[..., 0] if vec else x


# ---- LU ---------------------------------------------------------------------------


def _lu(a):
    """(lu, pivots, permutation) of a (..., m, n), as lax.linalg.lu (LAPACK's
    getrf): at step k the row of largest magnitude in column k at or below
    row k (the first of equals) swapped into row k, L's multipliers stored
    below U's diagonal; pivots the row each step swapped in, permutation
    the original row at each row (int32)."""
    m, n = a.shape[-2], a.shape[-1]
    nd = len(a.shape)
    rows, cols = _grid(m, n, nd)
    idx = jnp.reshape(jnp.arange(m), (1,) * (nd - 2) + (m,))
    perm = jnp.zeros(tuple(a.shape[:-1]), jnp.int32) + idx
    pivots = []
    for k in range(min(m, n)):
        col = jnp.where(idx >= k, jnp.abs(a[..., :, k]), -1)
        p = jnp.argmax(col, axis=-1)
        pk = jnp.expand_dims(p, -1)
        swap = jnp.where(idx == k, pk, jnp.where(idx == pk, k, idx))
        a = jnp.take_along_axis(a, jnp.broadcast_to(jnp.expand_dims(swap, -1), a.shape), axis=-2)
        perm = jnp.take_along_axis(perm, swap, axis=-1)
        pivots.append(jnp.astype(p, jnp.int32))
        piv = a[..., k:k + 1, k:k + 1]
        f = jnp.where(rows > k, a[..., :, k:k + 1] / jnp.where(piv == 0, 1, piv), 0)
        a = jnp.where((rows > k) & (cols == k), f,
                      jnp.where((rows > k) & (cols > k), a - f * a[..., k:k + 1, :], a))
    piv = jnp.stack(pivots, axis=-1) if pivots else \
        jnp.zeros(tuple(a.shape[:-2]) + (0,), jnp.int32)
    return a, piv, perm


@_at_once
def lu_factor(a, overwrite_a=False, check_finite=True):
    """scipy.linalg.lu_factor: (lu, piv), L (unit diagonal, not stored) and
    U packed in one matrix and the pivots of getrf, for lu_solve."""
    a = _inexact(a)
    _la._check_core_unsharded("lu", a)
    lu_, piv, _ = _lu(a)
    return lu_, piv


@_at_once
def lu(a, permute_l=False, overwrite_a=False, check_finite=True):
    """scipy.linalg.lu: (P, L, U) with a == P @ L @ U, L (m, k) unit lower
    triangular, U (k, n) upper, k = min(m, n); with permute_l, (P @ L, U)."""
    a = _inexact(a)
    _la._check_core_unsharded("lu", a)
    lu_, _, perm = _lu(a)
    m, n = a.shape[-2], a.shape[-1]
    k = min(m, n)
    rows, cols = _grid(m, n, len(a.shape))
    p = jnp.astype(jnp.expand_dims(perm, -2) == jnp.reshape(jnp.arange(m), (m, 1)), a.dtype)
    l_ = jnp.where(rows > cols, lu_, 0)[..., :, :k] + jnp.eye(m, k, dtype=a.dtype)
    u = jnp.where(rows <= cols, lu_, 0)[..., :k, :]
    if permute_l:
        return jnp.matmul(p, l_), u
    return p, l_, u


def _pivots_to_permutation(pivots, m):
    """lax.linalg.lu_pivots_to_permutation: arange(m) with entry i swapped
    with entry pivots[i], in order."""
    nd = len(pivots.shape)
    idx = jnp.reshape(jnp.arange(m), (1,) * (nd - 1) + (m,))
    perm = jnp.zeros(tuple(pivots.shape[:-1]) + (m,), jnp.int32) + idx
    for i in range(pivots.shape[-1]):
        j = jnp.astype(pivots[..., i:i + 1], jnp.int32)
        pi = perm[..., i:i + 1]
        pj = jnp.take_along_axis(perm, j, axis=-1)
        perm = jnp.where(idx == i, pj, jnp.where(idx == j, pi, perm))
    return perm


def lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True):
    """scipy.linalg.lu_solve: x with a x = b (trans 0), a^T x = b (1, 2) from
    lu_factor's (lu, piv); b a vector (n,) or matrices (..., n, k)."""
    lu_, piv = lu_and_piv
    return _lu_solve(lu_, piv, b, trans)


@_at_once
def _lu_solve(lu_, piv, b, trans):
    lu_, b = _inexact(lu_, b)
    m = lu_.shape[-2]
    vec = _vector_rhs("lu_solve", lu_, b)
    sig = "(n,n),(n),(n)->(n)" if vec else "(n,n),(n),(n,k)->(n,k)"
    perm = _pivots_to_permutation(piv, m)
    loop = _core_sizes(sig, lu_.shape, perm.shape, b.shape)
    if trans not in (0, 1, 2):
        raise ValueError(f"'trans' value must be 0, 1, or 2, got {trans}")
    if vec:
        b = jnp.expand_dims(b, -1)
    lu_ = jnp.broadcast_to(lu_, loop + tuple(lu_.shape[-2:]))
    perm = jnp.broadcast_to(perm, loop + (m,))
    b = jnp.broadcast_to(b, loop + tuple(b.shape[-2:]))
    if trans == 0:
        x = jnp.take_along_axis(b, jnp.broadcast_to(jnp.expand_dims(perm, -1), b.shape), axis=-2)
        x = _la.triangular_solve(lu_, x, left_side=True, lower=True, unit_diagonal=True)
        x = _la.triangular_solve(lu_, x, left_side=True, lower=False)
    else:
        x = _la.triangular_solve(lu_, b, left_side=True, lower=False, transpose_a=True)
        x = _la.triangular_solve(lu_, x, left_side=True, lower=True, unit_diagonal=True,
                                 transpose_a=True)
        ind = jnp.argsort(perm, axis=-1)
        x = jnp.take_along_axis(x, jnp.broadcast_to(jnp.expand_dims(ind, -1), x.shape), axis=-2)
    return x[..., 0] if vec else x


# ---- eigh, svd, qr, pinv, block_diag ---------------------------------------------------


def eigh(a, b=None, lower=True, eigvals_only=False, overwrite_a=False, overwrite_b=False,
         turbo=True, eigvals=None, type=1, check_finite=True):
    """scipy.linalg.eigh of a symmetric matrix (the standard problem only, as
    JAX's): (w, v), or w alone with eigvals_only."""
    if b is not None:
        raise NotImplementedError("Only the b=None case of eigh is implemented")
    if type != 1:
        raise NotImplementedError("Only the type=1 case of eigh is implemented.")
    if eigvals is not None:
        raise NotImplementedError("Only the eigvals=None case of eigh is implemented.")
    w, v = _la.eigh(a, UPLO="L" if lower else "U")
    return w if eigvals_only else (w, v)


def svd(a, full_matrices=True, compute_uv=True, overwrite_a=False, check_finite=True,
        lapack_driver="gesdd"):
    """scipy.linalg.svd: (u, s, vh) as a plain tuple (JAX's lax.linalg.svd's
    result), full u and vh unless full_matrices=False; s alone without
    compute_uv."""
    r = _la.svd(a, full_matrices=full_matrices, compute_uv=compute_uv)
    return tuple(r) if compute_uv else r


def qr(a, overwrite_a=False, lwork=None, mode="full", pivoting=False, check_finite=True):
    """scipy.linalg.qr: mode 'full' (numpy's 'complete'), 'economic'
    (numpy's 'reduced') or 'r' (a 1-tuple, as JAX's)."""
    if mode not in ("full", "r", "economic"):
        raise ValueError(f"Unsupported QR decomposition mode '{mode}'")
    if pivoting:
        raise NotImplementedError("scipy.linalg.qr: pivoting=True is not implemented here")
    if mode == "r":
        return (_la.qr(a, mode="complete")[1],)
    return tuple(_la.qr(a, mode={"full": "complete", "economic": "reduced"}[mode]))


def qr_multiply(a, c, mode="right", pivoting=False, conjugate=False, overwrite_a=False,
                overwrite_c=False):
    """scipy.linalg.qr_multiply: (Q @ c, R) with mode 'left', (c @ Q, R)
    with 'right' (Q's first min(m, n) columns), R (k, n); a 1-d c as a
    column (left) or a row (right), the result raveled."""
    if pivoting:
        raise NotImplementedError("scipy.linalg.qr_multiply: pivoting=True is not implemented "
                                  "here")
    return _qr_multiply(a, c, mode)


@_at_once
def _qr_multiply(a, c, mode):
    a, c = _inexact(a, c)
    if mode not in ("right", "left"):
        raise ValueError(f"mode must be 'right' or 'left', got {mode!r}")
    onedim = len(c.shape) == 1
    if onedim:
        c = jnp.reshape(c, (-1, 1) if mode == "left" else (1, -1))
    m, n = a.shape[-2], a.shape[-1]
    k = min(m, n)
    if mode == "left":
        if c.shape[-2] != k:
            raise ValueError(f"Array shapes are not compatible for Q @ c operation: a has shape "
                             f"{tuple(a.shape)} so Q has {k} columns, but c has {c.shape[-2]} "
                             f"rows (expected {k}).")
    elif c.shape[-1] != m:
        raise ValueError(f"Array shapes are not compatible for c @ Q operation: a has shape "
                         f"{tuple(a.shape)} so Q has {m} rows, but c has {c.shape[-1]} columns "
                         f"(expected {m}).")
    batch = jnp.broadcast_shapes(tuple(a.shape[:-2]), tuple(c.shape[:-2]))
    a = jnp.broadcast_to(a, batch + tuple(a.shape[-2:]))
    c = jnp.broadcast_to(c, batch + tuple(c.shape[-2:]))
    q, r = _la.qr(a, mode="complete")
    if mode == "left":
        cq = jnp.matmul(q[..., :, :k], c)
    else:
        cq = jnp.matmul(c, q)[..., :k]
    if onedim:
        cq = jnp.ravel(cq)
    return cq, r[..., :k, :]


def pinv(a, **kwargs):
    return _la.pinv(a, **kwargs)


@_at_once
def block_diag(*arrs):
    """scipy.linalg.block_diag: the arrays (at most 2-d; 1-d and scalars as
    rows) on the diagonal of one matrix of their promoted dtype, zeros
    elsewhere."""
    if len(arrs) == 0:
        arrs = (jnp.zeros((1, 0)),)
    arrs = [jnp.asarray(a) for a in arrs]
    dt = jnp.result_type(*arrs)
    bad = [i for i, a in enumerate(arrs) if len(a.shape) > 2]
    if bad:
        raise ValueError("Arguments to jax.scipy.linalg.block_diag must have at most 2 "
                         "dimensions, got {} at argument {}.".format(arrs[bad[0]], bad[0]))
    mats = [jnp.astype(jnp.reshape(a, (1, -1)) if len(a.shape) < 2 else a, dt) for a in arrs]
    cols = sum(m.shape[1] for m in mats)
    rows, at = [], 0
    for m in mats:
        parts = [jnp.zeros((m.shape[0], at), dt)] if at else []
        parts.append(m)
        rest = cols - at - m.shape[1]
        if rest:
            parts.append(jnp.zeros((m.shape[0], rest), dt))
        rows.append(jnp.concatenate(parts, axis=1) if len(parts) > 1 else m)
        at += m.shape[1]
    return jnp.concatenate(rows, axis=0) if len(rows) > 1 else rows[0]


# ---- Hessenberg and Schur forms --------------------------------------------------


def _reflect(x, alpha, rows, j):
    """LAPACK's dlarfg for the column x (..., n, 1), nonzero at rows >= j
    (alpha its row-j entry): (u, scale, beta) with H = I - scale u u^T
    mapping x to beta e_j, beta = -sign(alpha) |x|; H = I (scale 0) when x
    has nothing below row j, as LAPACK's tau = 0."""
    norm = jnp.sqrt(jnp.sum(x * x, axis=-2, keepdims=True))
    beta = -jnp.where(alpha < 0, -1, 1) * norm
    u = x - jnp.where(rows == j, beta, 0)
    uu = jnp.sum(u * u, axis=-2, keepdims=True)
    below = jnp.sum(jnp.where(rows > j, x * x, 0), axis=-2, keepdims=True)
    none = (uu == 0) | (below == 0)
    return u, jnp.where(none, 0, 2 / jnp.where(none, 1, uu)), beta


def _hessenberg(a, calc_q):
    n = a.shape[-1]
    nd = len(a.shape)
    rows, cols = _grid(n, n, nd)
    q = jnp.zeros_like(a) + jnp.eye(n, dtype=a.dtype) if calc_q else None
    for j in range(n - 2):
        x = jnp.where(rows > j, a[..., :, j:j + 1], 0)
        u, scale, _ = _reflect(x, a[..., j + 1:j + 2, j:j + 1], rows, j + 1)
        ut = jnp.swapaxes(u, -1, -2)
        a = a - scale * u * jnp.matmul(ut, a)              # H a
        a = a - scale * jnp.matmul(a, u) * ut              # (H a) H
        if calc_q:
            q = q - scale * jnp.matmul(q, u) * ut
    h = jnp.where(rows <= cols + 1, a, 0)
    return (h, q) if calc_q else h


def hessenberg(a, *, calc_q=False, overwrite_a=False, check_finite=True):
    """scipy.linalg.hessenberg: H zero below the first subdiagonal with
    a == Q H Q^T, by LAPACK's Householder reflections (gehrd: its signs);
    (H, Q) with calc_q."""
    return _hessenberg_at(a, calc_q)


@_at_once
def _hessenberg_at(a, calc_q):
    a = _inexact(a)
    _la._check_core_unsharded("hessenberg", a)
    if a.shape[-1] == 0:
        return (jnp.zeros_like(a), jnp.zeros_like(a)) if calc_q else jnp.zeros_like(a)
    return _hessenberg(a, calc_q)


def _sign1(x):
    """Fortran's sign(1, x): 1 for x >= 0 (and +0), else -1."""
    return jnp.where(x < 0, -1.0, 1.0)


def _lanv2(a, b, c, d, eps):
    """LAPACK's dlanv2 on the 2x2 block [[a, b], [c, d]]: the standardized
    block (aa, bb, cc, dd) and the rotation (cs, sn) with [[aa, bb], [cc,
    dd]] = [[cs, sn], [-sn, cs]] [[a, b], [c, d]] [[cs, -sn], [sn, cs]]:
    upper triangular when the eigenvalues are real, else equal diagonal
    entries and bb * cc < 0."""
    one, zero = jnp.ones_like(a), jnp.zeros_like(a)
    # c == 0: nothing to do; b == 0: swap the rows and columns
    c0, b0 = c == 0, (c != 0) & (b == 0)
    done = c0 | b0 | ((a - d == 0) & (_sign1(b) != _sign1(c)))
    temp = a - d
    p = 0.5 * temp
    bcmax = jnp.maximum(jnp.abs(b), jnp.abs(c))
    bcmis = jnp.minimum(jnp.abs(b), jnp.abs(c)) * _sign1(b) * _sign1(c)
    scale = jnp.maximum(jnp.abs(p), bcmax)
    scale_ = jnp.where(scale == 0, 1, scale)
    z = (p / scale_) * p + (bcmax / scale_) * bcmis
    real = z >= 4 * eps
    # real eigenvalues: the block made upper triangular at once
    zr = p + jnp.where(p < 0, -1, 1) * jnp.sqrt(scale) * jnp.sqrt(jnp.where(real, z, 0))
    zr_ = jnp.where(zr == 0, 1, zr)
    ra, rd = d + zr, d - (bcmax / zr_) * bcmis
    tau = jnp.sqrt(c * c + zr * zr)
    tau_ = jnp.where(tau == 0, 1, tau)
    rcs, rsn, rb = zr / tau_, c / tau_, b - c
    # complex (or nearly equal real) eigenvalues: equal diagonal entries
    sigma = b + c
    tau2 = jnp.sqrt(sigma * sigma + temp * temp)
    tau2_ = jnp.where(tau2 == 0, 1, tau2)
    ccs = jnp.sqrt(0.5 * (1 + jnp.abs(sigma) / tau2_))
    csn = -(p / (tau2_ * ccs)) * _sign1(sigma)
    aa, bb = a * ccs + b * csn, -a * csn + b * ccs
    cc, dd = c * ccs + d * csn, -c * csn + d * ccs
    na, nb = aa * ccs + cc * csn, bb * ccs + dd * csn
    nc, nd_ = -aa * csn + cc * ccs, -bb * csn + dd * ccs
    mid = 0.5 * (na + nd_)
    # ... real after all (b and c of one sign): upper triangular
    split = (nc != 0) & (nb != 0) & (_sign1(nb) == _sign1(nc))
    sab, sac = jnp.sqrt(jnp.abs(nb)), jnp.sqrt(jnp.abs(nc))
    pp = jnp.where(nc < 0, -1, 1) * sab * sac
    tau3 = 1 / jnp.sqrt(jnp.where(split, jnp.abs(nb + nc), 1))
    cs1, sn1 = sab * tau3, sac * tau3
    scs, ssn = ccs * cs1 - csn * sn1, ccs * sn1 + csn * cs1
    # ... or b == 0 after the rotation: swap
    flip = (nc != 0) & (nb == 0)
    ca = jnp.where(split, mid + pp, mid)
    cd = jnp.where(split, mid - pp, mid)
    cb = jnp.where(split, nb - nc, jnp.where(flip, -nc, nb))
    cc_ = jnp.where(split | flip, 0, nc)
    ccs2 = jnp.where(split, scs, jnp.where(flip, -csn, ccs))
    csn2 = jnp.where(split, ssn, jnp.where(flip, ccs, csn))
    # the cases together
    oa = jnp.where(real, ra, ca)
    ob = jnp.where(real, rb, cb)
    oc = jnp.where(real, 0, cc_)
    od = jnp.where(real, rd, cd)
    ocs = jnp.where(real, rcs, ccs2)
    osn = jnp.where(real, rsn, csn2)
    oa = jnp.where(done, jnp.where(b0, d, a), oa)
    ob = jnp.where(done, jnp.where(b0, -c, b), ob)
    oc = jnp.where(done, jnp.where(b0, 0, c), oc)
    od = jnp.where(done, jnp.where(b0, a, d), od)
    ocs = jnp.where(done, jnp.where(b0, zero, one), ocs)
    osn = jnp.where(done, jnp.where(b0, one, zero), osn)
    return oa, ob, oc, od, ocs, osn


def _embed(n, i, dt, vals):
    """An n-vector with vals at i, i+1, ... (static), zeros elsewhere."""
    parts = []
    if i:
        parts.append(jnp.zeros((i,), dt))
    parts.extend(jnp.reshape(v, (1,)) for v in vals)
    if n - i - len(vals):
        parts.append(jnp.zeros((n - i - len(vals),), dt))
    return jnp.concatenate(parts) if len(parts) > 1 else parts[0]


def _standardize(t, z, eps):
    """Each 2x2 diagonal block (a nonzero subdiagonal entry) through
    dlanv2's rotation, the rest of its rows and columns and z's columns
    rotated with it (as LAPACK's dlahqr finishes a block)."""
    n = t.shape[-1]
    dt = t.dtype
    for p in range(n - 1):
        a, b, c, d = t[p, p], t[p, p + 1], t[p + 1, p], t[p + 1, p + 1]
        on = c != 0
        na, nb, nc, nd_, cs, sn = _lanv2(a, b, c, d, eps)
        cs, sn = jnp.where(on, cs, 1), jnp.where(on, sn, 0)
        e0 = _embed(n, p, dt, [jnp.ones((), dt)])
        e1 = _embed(n, p + 1, dt, [jnp.ones((), dt)])
        g = jnp.eye(n, dtype=dt) + (cs - 1) * (jnp.outer(e0, e0) + jnp.outer(e1, e1)) + \
            sn * (jnp.outer(e0, e1) - jnp.outer(e1, e0))     # rows: [[cs, sn], [-sn, cs]]
        t = jnp.matmul(jnp.matmul(g, t), jnp.swapaxes(g, 0, 1))
        z = jnp.matmul(z, jnp.swapaxes(g, 0, 1))
        blk = (jnp.outer(e0, e0) * jnp.where(on, na, a) + jnp.outer(e0, e1) * jnp.where(on, nb, b) +
               jnp.outer(e1, e0) * jnp.where(on, nc, c) + jnp.outer(e1, e1) * jnp.where(on, nd_, d))
        mask = jnp.outer(e0 + e1, e0 + e1)
        t = jnp.where(mask > 0, blk, t)
    return t, z


def _schur_2d(a):
    """The real Schur form of one matrix: Hessenberg reduction, then Francis
    double-shift QR steps (LAPACK's dlahqr, with its shifts: the trailing
    2x2 block's eigenvalues, the one nearer the corner twice when they are
    real; dlahqr's exceptional shifts every tenth step) on the lowest unreduced window
    until every subdiagonal entry is negligible or the lone nonzero one of
    a 2x2 block; then dlanv2's standardization of those blocks."""
    n = a.shape[-1]
    dt = _np.dtype(a.dtype)
    eps = float(_np.finfo(dt).eps)
    tiny = float(_np.finfo(dt).tiny)
    t, z = _hessenberg(a, True)
    if n <= 2:
        return _standardize(t, z, eps) if n == 2 else (t, z)
    rows, cols = _grid(n, n, 2)
    sidx = jnp.arange(n - 1)
    itmax = 30 * max(10, n) * n

    def subdiag(t):
        return jnp.sum(jnp.where(rows == cols + 1, t, 0), axis=1)[1:]       # t[s+1, s]

    def status(t):
        d = jnp.abs(jnp.diagonal(t))
        s = jnp.abs(subdiag(t))
        tst = d[:-1] + d[1:]
        zero = jnp.zeros((1,), dt)
        near = jnp.concatenate([zero, s[:-1]]) + jnp.concatenate([s[1:], zero])
        tst = jnp.where(tst == 0, near, tst)   # dlahqr's fallback for a zero diagonal pair
        small = s <= jnp.maximum(eps * tst, tiny)
        smallc = jnp.reshape(jnp.concatenate([small, jnp.zeros((1,), bool)]), (1, n))
        t = jnp.where((rows == cols + 1) & smallc, 0, t)
        prev = jnp.concatenate([jnp.ones((1,), bool), small[:-1]])
        nxt = jnp.concatenate([small[1:], jnp.ones((1,), bool)])
        ok = small | (prev & nxt)
        return t, small, ok

    def more(c):
        t, z, it, ok = c
        return ~jnp.all(ok) & (it < itmax)

    def step(c):
        t, z, it, _ = c
        t, small, ok = status(t)
        h = jnp.max(jnp.where(ok, -1, sidx))                   # the lowest unreduced entry
        lo = jnp.max(jnp.where(small & (sidx < h), sidx + 1, 0))
        m = h + 1                                              # the window: rows lo..m
        a11 = jnp.sum(jnp.where((rows == h) & (cols == h), t, 0))
        a12 = jnp.sum(jnp.where((rows == h) & (cols == m), t, 0))
        a21 = jnp.sum(jnp.where((rows == m) & (cols == h), t, 0))
        a22 = jnp.sum(jnp.where((rows == m) & (cols == m), t, 0))
        # dlahqr's exceptional shifts, every tenth step (it counts them from the last deflation)
        ex = (it % 10) == 9
        sx = jnp.abs(a21) + jnp.abs(jnp.sum(jnp.where((rows == h) & (cols == h - 1), t, 0)))
        e11 = 0.75 * sx + a22
        a11, a12, a21, a22 = (jnp.where(ex, e11, a11), jnp.where(ex, -0.4375 * sx, a12),
                              jnp.where(ex, sx, a21), jnp.where(ex, e11, a22))
        tr = a11 + a22
        dt_ = a11 * a22 - a12 * a21
        half = 0.5 * (a11 - a22)
        disc = half * half + a12 * a21
        rt = jnp.sqrt(jnp.abs(disc))
        mean = 0.5 * tr
        r1, r2 = mean + rt, mean - rt
        near = jnp.where(jnp.abs(r1 - a22) <= jnp.abs(r2 - a22), r1, r2)
        s_ = jnp.where(disc >= 0, 2 * near, tr)                # the shifts' sum and product
        p_ = jnp.where(disc >= 0, near * near, dt_)
        # the first column of (T - r1)(T - r2) on the window
        t00 = jnp.sum(jnp.where((rows == lo) & (cols == lo), t, 0))
        t01 = jnp.sum(jnp.where((rows == lo) & (cols == lo + 1), t, 0))
        t10 = jnp.sum(jnp.where((rows == lo + 1) & (cols == lo), t, 0))
        t11 = jnp.sum(jnp.where((rows == lo + 1) & (cols == lo + 1), t, 0))
        t21 = jnp.sum(jnp.where((rows == lo + 2) & (cols == lo + 1), t, 0))
        x0 = t00 * t00 + t01 * t10 - s_ * t00 + p_
        y0 = t10 * (t00 + t11 - s_)
        z0 = t10 * t21
        for p in range(n - 1):   # the bulge chased down the window, reflector at rows p..p+2
            act = (p >= lo) & (p <= m - 1)
            width = min(3, n - p)
            first = p == lo
            if p == 0:
                src = [jnp.zeros((), dt)] * width
            else:
                src = [t[p + i, p - 1] for i in range(width)]
            v = [jnp.where(first, x0, src[0]), jnp.where(first, y0, src[1])]
            if width == 3:
                v.append(jnp.where(p + 2 <= m, jnp.where(first, z0, src[2]), 0))
            vec = _embed(n, p, dt, v)
            x = jnp.reshape(vec, (n, 1))
            u, scale, _ = _reflect(x, v[0], rows, p)
            scale = jnp.where(act, scale, 0)
            ut = jnp.swapaxes(u, 0, 1)
            t = t - scale * u * jnp.matmul(ut, t)
            t = t - scale * jnp.matmul(t, u) * ut
            z = z - scale * jnp.matmul(z, u) * ut
        t = jnp.where(rows <= cols + 1, t, 0)
        t, _, ok = status(t)
        return t, z, it + 1, ok

    t, _, ok = status(t)
    t, z, it, ok = _lax.while_loop(more, step, (t, z, 0, ok))
    t, z = _standardize(t, z, eps)
    bad = ~jnp.all(ok)
    return jnp.where(bad, _np.nan, t), jnp.where(bad, _np.nan, z)


def schur(a, output="real"):
    """scipy.linalg.schur: (T, Z) with a == Z T Z^T, Z orthogonal and T
    quasi upper triangular (the real Schur form: 2x2 diagonal blocks, with
    equal diagonal entries, for complex eigenvalue pairs); NaN if the
    iteration does not converge, as JAX's. output='complex' needs complex
    numbers: refused."""
    if output not in ("real", "complex"):
        raise ValueError(f"Expected 'output' to be either 'real' or 'complex', got "
                         f"output={output!r}.")
    if output == "complex":
        raise NotImplementedError("scipy.linalg.schur: output='complex' needs complex dtypes, "
                                  "which shmap lacks")
    return _schur(a)


def _square_float(name, a):
    """a in its float dtype, checked square and unsharded in its matrix
    dimensions (the sentences of shmap.linalg)."""
    a = _inexact(a)
    _la._square(name, a)
    _la._check_core_unsharded(name, a)
    return a


@_at_once
def _schur(a):
    return _per_matrix(_schur_2d, _square_float("schur", a))


def _units(n, dt):
    """The unit vectors e_0 .. e_(n-1), made in the program from iota."""
    idx = jnp.arange(n)
    return [jnp.astype(idx == i, dt) for i in range(n)]


def _small_solve(mat, rhs):
    """x with mat x == rhs, a small system given as lists of 0-d values:
    Gaussian elimination with partial pivoting unrolled on the scalars (so
    that no shape is asked of a fresh value of the program, which would
    type the text so far each time)."""
    k = len(rhs)
    a = [list(row) + [r] for row, r in zip(mat, rhs)]
    for col in range(k):
        for r in range(col + 1, k):     # the largest magnitude into the pivot row
            swap = jnp.abs(a[r][col]) > jnp.abs(a[col][col])
            a[col], a[r] = ([jnp.where(swap, y, x) for x, y in zip(a[col], a[r])],
                            [jnp.where(swap, x, y) for x, y in zip(a[col], a[r])])
        for r in range(col + 1, k):
            f = a[r][col] / a[col][col]
            a[r] = [x - f * y for x, y in zip(a[r], a[col])]
    x = [None] * k
    for r in range(k - 1, -1, -1):
        acc = a[r][k]
        for c in range(r + 1, k):
            acc = acc - a[r][c] * x[c]
        x[r] = acc / a[r][r]
    return x


def _frame_solve(am, bm, rhs, rm, cm, dt):
    """The Sylvester equation am X + X bm == rhs of one pair of diagonal
    blocks, as a frame of up to 2 x 2 (lists of 0-d values); the frame's
    rows rm and columns cm (bools) that belong to the blocks: the other
    unknowns are 0."""
    p, q = len(rm), len(cm)
    one, zero = jnp.ones((), dt), jnp.zeros((), dt)
    rf = [jnp.where(m, one, zero) for m in rm]
    cf = [jnp.where(m, one, zero) for m in cm]
    cells = [(a, b) for a in range(p) for b in range(q)]
    mat, vec = [], []
    for a, b in cells:
        live = rm[a] & cm[b]
        row = []
        for c, d in cells:
            v = zero
            if b == d:
                v = v + am[a][c] * rf[c]
            if a == c:
                v = v + bm[d][b] * cf[d]
            row.append(jnp.where(live, v, one if (a, b) == (c, d) else zero))
        mat.append(row)
        vec.append(jnp.where(live, rhs[a][b], zero))
    x = _small_solve(mat, vec)
    return [[jnp.where(rm[a] & cm[b], x[a * q + b], zero) for b in range(q)] for a in range(p)]


def _sqrtm_2d(a):
    """The real Schur method (Higham 1987, the real form of Björck and
    Hammarling's, which JAX runs on the complex Schur form): U with U^2 ==
    T block by block, the diagonal blocks the principal roots of T's (a 2x2
    block with eigenvalues theta +- i mu: alpha I + (T_ii - theta I) /
    (2 alpha), alpha = Re sqrt(theta + i mu)), the others from the
    Sylvester equations U_ii U_ij + U_ij U_jj = T_ij - sum U_ik U_kj,
    column by column and upwards (a right side of 0 gives 0, as JAX's);
    then Z U Z^T."""
    t, z = _schur_2d(a)
    n = t.shape[-1]
    dt = _np.dtype(t.dtype)
    if n == 0:
        return t
    top, bot = _blocks(t)
    tt = [[t[i, j] for j in range(n)] for i in range(n)]
    zero = jnp.zeros((), dt)
    d = {}                                   # U's entries within the diagonal blocks
    for p in range(n):
        own = jnp.sqrt(tt[p][p])
        if p < n - 1:
            th, b, c = tt[p][p], tt[p][p + 1], tt[p + 1][p]
            mu = jnp.sqrt(jnp.abs(b * c))
            be = jnp.sqrt(0.5 * (jnp.sqrt(th * th + mu * mu) + jnp.abs(th)))
            al = jnp.where(th >= 0, be, mu / (2 * jnp.where(be == 0, 1, be)))
            al_ = jnp.where(al == 0, 1, al)
            d[p, p + 1] = jnp.where(top[p], b / (2 * al_), zero)
            d[p + 1, p] = jnp.where(top[p], c / (2 * al_), zero)
            d[p, p] = jnp.where(top[p], al, jnp.where(bot[p], d[p - 1, p - 1], own)) if p else \
                jnp.where(top[p], al, own)
        else:
            d[p, p] = jnp.where(bot[p], d[p - 1, p - 1], own) if p else own

    def blk(i):                              # the frame of the block ending at row/column i
        return [i - 1, i] if i > 0 else [i]

    def entry(i, j):
        return d.get((i, j), zero)
    rows_, cols_ = _grid(n, n, 2)
    e = _units(n, dt)
    u = jnp.zeros((n, n), dt)
    for (i, j), v in d.items():
        u = jnp.where((rows_ == i) & (cols_ == j), v, u)
    for j in range(1, n):       # the blocks above the diagonal, column block by column block
        cj = blk(j)
        for i in range(j - 1, -1, -1):
            ri = blk(i)
            act = ~top[j] & ~top[i] & ~(bot[j] & (i == j - 1))
            rm = [bot[i], jnp.ones((), bool)] if i > 0 else [jnp.ones((), bool)]
            cm = [bot[j], jnp.ones((), bool)]
            rows = [jnp.matmul(e[r], u) for r in ri]    # u[r, :] (no shape asked of u)
            cols = [jnp.matmul(u, e[c]) for c in cj]    # u[:, c]
            rhs = [[tt[r][c] - jnp.dot(rw, cl) for c, cl in zip(cj, cols)]
                   for r, rw in zip(ri, rows)]
            am = [[entry(r, r2) for r2 in ri] for r in ri]
            bm = [[entry(c, c2) for c2 in cj] for c in cj]
            x = _frame_solve(am, bm, rhs, rm, cm, dt)
            nonzero = functools.reduce(operator.or_, [v != 0 for row in rhs for v in row])
            for a_, r in enumerate(ri):
                for b_, c in enumerate(cj):
                    on = act & nonzero & rm[a_] & cm[b_]
                    u = jnp.where((rows_ == r) & (cols_ == c) & on, x[a_][b_], u)
    return jnp.matmul(jnp.matmul(z, u), jnp.swapaxes(z, 0, 1))


def sqrtm(A, blocksize=1):
    """scipy.linalg.sqrtm: the principal square root (X @ X == A) by the real
    Schur method; JAX's runs the complex Schur form and returns a complex
    array: here the real root, NaN where it is not real (a negative
    eigenvalue)."""
    if blocksize > 1:
        raise NotImplementedError("Blocked version is not implemented yet.")
    return _sqrtm(A)


@_at_once
def _sqrtm(A):
    return _per_matrix(_sqrtm_2d, _square_float("sqrtm", A))


def _blocks(t, lower=False):
    """For a quasi-triangular t (upper, or lower: the transpose of an upper
    one) in standard form: per index p, whether a 2x2 block starts at p and
    whether one ends at p (traced bools)."""
    n = t.shape[-1]
    sub = [(t[p, p + 1] if lower else t[p + 1, p]) != 0 for p in range(n - 1)]
    no = jnp.zeros((), bool)
    return ([sub[p] if p < n - 1 else no for p in range(n)],
            [sub[p - 1] if p > 0 else no for p in range(n)])


def _eigvals_quasi(t):
    """The eigenvalues of a standardized quasi upper triangular t as (real,
    imaginary) parts: the diagonal, +-sqrt(-b c) on a 2x2 block's rows."""
    n = t.shape[-1]
    top, bot = _blocks(t)
    re = jnp.diagonal(t)
    im = []
    for p in range(n):
        up = jnp.sqrt(jnp.abs(t[p, p + 1] * t[p + 1, p])) if p < n - 1 else 0.0
        down = -jnp.sqrt(jnp.abs(t[p - 1, p] * t[p, p - 1])) if p > 0 else 0.0
        im.append(jnp.where(top[p], up, jnp.where(bot[p], down, 0.0)))
    return re, jnp.astype(jnp.stack(im), t.dtype)


def _quasi_sylvester(r, s, f):
    """Y with r Y + Y s == f, r upper and s lower quasi triangular (JAX's
    _solve_sylvester_triangular_scan, from the bottom right entry up and
    leftwards, here a block at a time: a 2x2 block of r or s couples its
    rows or columns, each block pair a small Kronecker system)."""
    m, n = f.shape
    dt = _np.dtype(f.dtype)
    rtop, rbot = _blocks(r)
    stop, sbot = _blocks(s, lower=True)
    rr = [[r[i, j] for j in range(m)] for i in range(m)]
    ss = [[s[i, j] for j in range(n)] for i in range(n)]
    ff = [[f[i, j] for j in range(n)] for i in range(m)]
    yes = jnp.ones((), bool)
    y = jnp.zeros((m, n), dt)
    rows_, cols_ = _grid(m, n, 2)
    em, en = _units(m, dt), _units(n, dt)
    for i in range(m - 1, -1, -1):
        ri = [i, i + 1] if i < m - 1 else [i]
        for j in range(n - 1, -1, -1):
            cj = [j, j + 1] if j < n - 1 else [j]
            act = ~rbot[i] & ~sbot[j]      # a block is solved at its first row and column
            rm = [yes] + ([rtop[i]] if len(ri) > 1 else [])
            cm = [yes] + ([stop[j]] if len(cj) > 1 else [])
            ry = [jnp.matmul(r[a_], y) for a_ in ri]            # (r y)[a, :]
            ys = [jnp.matmul(y, s[:, b_]) for b_ in cj]         # (y s)[:, b]
            rhs = [[ff[a_][b_] - jnp.dot(ra, en[b_]) - jnp.dot(em[a_], yb)
                    for b_, yb in zip(cj, ys)] for a_, ra in zip(ri, ry)]
            am = [[rr[a_][a2] for a2 in ri] for a_ in ri]
            bm = [[ss[b_][b2] for b2 in cj] for b_ in cj]
            x = _frame_solve(am, bm, rhs, rm, cm, dt)
            for a2, a_ in enumerate(ri):
                for b2, b_ in enumerate(cj):
                    on = act & rm[a2] & cm[b2]
                    y = jnp.where((rows_ == a_) & (cols_ == b_) & on, x[a2][b2], y)
    return y


def _solve_sylvester_2d(a, b, c, method, tol):
    if method == "eigen":
        raise NotImplementedError("scipy.linalg.solve_sylvester: method='eigen' needs complex "
                                  "eigenvectors, which shmap lacks; use method='schur'")
    if method != "schur":
        raise ValueError(f"Unrecognized method {method}. The two valid methods are either "
                         f"\"schur\" or \"eigen\".")
    r, u = _schur_2d(a)
    s, v = _schur_2d(jnp.swapaxes(b, 0, 1))
    f = jnp.matmul(jnp.matmul(jnp.swapaxes(u, 0, 1), c), v)
    y = _quasi_sylvester(r, jnp.swapaxes(s, 0, 1), f)
    x = jnp.matmul(jnp.matmul(u, y), jnp.swapaxes(v, 0, 1))
    ar, ai = _eigvals_quasi(r)
    br, bi = _eigvals_quasi(s)
    near = jnp.any(jnp.hypot(ar[:, None] + br[None, :], ai[:, None] + bi[None, :]) < tol)
    return jnp.where(near, _np.nan, x)


def solve_sylvester(A, B, C, *, method="schur", tol=1e-8):
    """scipy.linalg.solve_sylvester: X with A X + X B == C by Bartels and
    Stewart's method, as JAX's 'schur' (the default): A = U R U^T, B^T = V
    S V^T, R Y + Y S^T = U^T C V solved from the bottom right corner, X = U
    Y V^T; here with the real Schur forms (JAX's complex ones: the same X).
    NaN where an eigenvalue of A and one of B sum to less than tol in
    magnitude, as JAX's. method='eigen' (a complex eigendecomposition) is
    refused."""
    return _solve_sylvester(A, B, C, method, tol)


@_at_once
def _solve_sylvester(A, B, C, method, tol):
    A, B, C = _inexact(jnp.asarray(A), jnp.asarray(B), jnp.asarray(C))
    m, n = C.shape[-2], C.shape[-1]
    if tuple(A.shape[-2:]) != (m, m) or tuple(B.shape[-2:]) != (n, n):
        raise ValueError(f"Incompatible shapes for Sylvester equation:\nA: {tuple(A.shape)}\n"
                         f"B: {tuple(B.shape)}\nC: {tuple(C.shape)}")
    for x in (A, B, C):
        _la._check_core_unsharded("solve_sylvester", x)
    loop = _core_sizes("(m,m),(n,n),(m,n)->(m,n)", A.shape, B.shape, C.shape)
    A = jnp.broadcast_to(A, loop + (m, m))
    B = jnp.broadcast_to(B, loop + (n, n))
    C = jnp.broadcast_to(C, loop + (m, n))
    return _per_matrix(lambda a, b, c: _solve_sylvester_2d(a, b, c, method, tol), A, B, C)


# ---- polar (QDWH) ---------------------------------------------------------------------


def _qdwh(x, eps):
    """JAX's qdwh (jax/_src/tpu/linalg/qdwh.py) for x (m >= n): the QR-based
    dynamically weighted Halley iteration, its weights computed here as its
    are (Python floats), the QR form while c > 100, then the Cholesky form,
    then Halley's until the iterates move less than (10 eps / 2)^(1/3);
    Newton-Schulz refinement; (u, h) with x == u h."""
    dt = _np.dtype(x.dtype)
    m, n = x.shape
    max_iterations = 10
    if eps is None:
        eps = float(_np.finfo(dt).eps)
    one_norm = _la.norm(x, ord=1)
    inf_norm = _la.norm(x, ord=_np.inf)
    alpha_inverse = _lax.rsqrt(one_norm) * _lax.rsqrt(inf_norm)
    alpha_inverse = jnp.where(one_norm == 0, 1, alpha_inverse)
    u = x * jnp.astype(alpha_inverse, dt)
    ell = eps
    tol_l = 10.0 * eps / 2.0
    tol_norm = float(_np.cbrt(_np.asarray(tol_l, dt)))
    qr_coefs, chol_coefs = [], []
    k = 0
    while ell + tol_l < 1 and k < max_iterations:
        k += 1
        l2 = ell * ell
        dd = (4 * (1 / l2 - 1) / l2) ** (1 / 3)
        sqd = (1.0 + dd) ** (1 / 2)
        a = sqd + (2 - dd + 2 * (2 - l2) / (l2 * sqd)) ** (1 / 2)
        b = (a - 1) ** 2 / 4
        c = a + b - 1
        ell = ell * (a + b * l2) / (1 + c * l2)
        e = b / c
        if c > 100:
            qr_coefs.append(((a - e) / c ** (1 / 2), c ** (1 / 2), e))
        else:
            chol_coefs.append((a - e, c, e))
    eye = jnp.eye(n, dtype=dt)

    def const(v):
        return jnp.full((), float(v), dt)

    def use_qr(u, params):
        a_minus_e_by_sqrt_c, sqrt_c, e = params
        y = jnp.concatenate([sqrt_c * u, eye], axis=0)
        q, _ = _la.qr(y, mode="reduced")
        return e * u + a_minus_e_by_sqrt_c * jnp.matmul(q[:m, :], jnp.swapaxes(q[m:, :], 0, 1))

    def use_cholesky(u, params):
        a_minus_e, c, e = params
        g = c * jnp.matmul(jnp.swapaxes(u, 0, 1), u) + eye
        y = _la.cholesky(g, symmetrize_input=False)
        z = _la.triangular_solve(y, jnp.swapaxes(u, 0, 1), left_side=True, lower=True)
        z = jnp.swapaxes(_la.triangular_solve(y, z, left_side=True, lower=True,
                                              transpose_a=True), 0, 1)
        return e * u + a_minus_e * z

    for params in qr_coefs:
        u = use_qr(u, tuple(const(p) for p in params))
    is_not_converged = True
    for params in chol_coefs:
        u_prev = u
        u = use_cholesky(u, tuple(const(p) for p in params))
        is_not_converged = _la.norm(u - u_prev) > tol_norm
    halley = tuple(const(p) for p in (3 - 1 / 3, 3, 1 / 3))

    def cond_fun(state):
        k, _, not_conv = state
        return jnp.logical_and(not_conv, k < max_iterations)

    def body_fun(state):
        k, u, _ = state
        u_new = use_cholesky(u, halley)
        return k + 1, u_new, _la.norm(u_new - u) > tol_norm

    _, u, is_not_converged = _lax.while_loop(
        cond_fun, body_fun, (len(qr_coefs) + len(chol_coefs), u, is_not_converged))
    u = 1.5 * u - 0.5 * jnp.matmul(u, jnp.matmul(jnp.swapaxes(u, 0, 1), u))
    h = jnp.matmul(jnp.swapaxes(u, 0, 1), x)
    h = (h + jnp.swapaxes(h, 0, 1)) / 2
    return u, h


def _polar_2d(a, side, method, eps):
    m, n = a.shape
    if method == "qdwh":
        if m >= n and side == "right":
            return _qdwh(a, eps)
        if m < n and side == "left":
            unitary, posdef = _qdwh(jnp.swapaxes(a, 0, 1), eps)
            return jnp.swapaxes(unitary, 0, 1), jnp.swapaxes(posdef, 0, 1)
        raise NotImplementedError(f"method='qdwh' only supports mxn matrices where m < n where "
                                  f"side='right' and m >= n side='left', got {tuple(a.shape)} "
                                  f"with side={side!r}")
    if method == "svd":
        u_svd, s_svd, vh_svd = _la.svd(a, full_matrices=False)
        unitary = jnp.matmul(u_svd, vh_svd)
        if side == "right":
            posdef = jnp.matmul(jnp.swapaxes(vh_svd, 0, 1) * s_svd[None, :], vh_svd)
        else:
            posdef = jnp.matmul(u_svd * s_svd[None, :], jnp.swapaxes(u_svd, 0, 1))
        return unitary, posdef
    raise ValueError(f"Unknown polar decomposition method {method}.")


def polar(a, side="right", *, method="qdwh", eps=None, max_iterations=None):
    """scipy.linalg.polar: (u, p) with a == u @ p (side 'right', p n x n) or
    a == p @ u ('left', p m x m), u with orthonormal columns (rows when n >
    m), p positive semidefinite; method 'qdwh' (JAX's default: which shapes
    it takes, and max_iterations left unused, are JAX's) or 'svd'."""
    return _polar(a, side, method, eps)


@_at_once
def _polar(a, side, method, eps):
    arr = jnp.asarray(a)
    if len(arr.shape) < 2:
        raise ValueError("The input `a` must be at least a 2-D array.")
    if side not in ["right", "left"]:
        raise ValueError("The argument `side` must be either 'right' or 'left'.")
    arr = _inexact(arr)
    _la._check_core_unsharded("polar", arr)
    return _per_matrix(lambda x: _polar_2d(x, side, method, eps), arr)


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


def expm_frechet(A, E, *, method=None, compute_expm=True):
    """scipy.linalg.expm_frechet as JAX's: the JVP of expm at A along E;
    (expm(A), the derivative), or the derivative alone."""
    a_shape, e_shape = tuple(_np.shape(A)), tuple(_np.shape(E))
    if len(a_shape) < 2 or a_shape[-2] != a_shape[1]:
        raise ValueError(f"expected A to be a (batched) square matrix, got A.shape={a_shape}")
    if len(e_shape) < 2 or e_shape[-2] != e_shape[-1]:
        raise ValueError(f"expected E to be a (batched) square matrix, got E.shape={e_shape}")
    if a_shape != e_shape:
        raise ValueError(f"expected A and E to be the same shape, got A.shape={a_shape} "
                         f"E.shape={e_shape}")
    from .._grad import jvp
    expm_a, frechet = jvp(lambda x: expm(x, upper_triangular=False, max_squarings=16),
                          (A,), (E,))
    return (expm_a, frechet) if compute_expm else frechet


# ---- eigh_tridiagonal -------------------------------------------------------------------


def eigh_tridiagonal(d, e, *, eigvals_only=False, select="a", select_range=None, tol=None,
                     key=None):
    """scipy.linalg.eigh_tridiagonal as JAX's: the eigenvalues of the
    symmetric tridiagonal matrix (diagonal d, off-diagonal e), ascending, by
    bisection on Sturm counts, all of them in parallel in a loop of the
    program, from the Gershgorin interval until the brackets are under the
    tolerance; select 'a' (all) or 'i' (indices select_range[0] to [1]).
    The eigenvectors (JAX's inverse iteration, eigvals_only=False) are not
    implemented here."""
    return _eigh_tridiagonal(d, e, eigvals_only, select, select_range, tol)


@_at_once
def _eigh_tridiagonal(d, e, eigvals_only, select, select_range, tol):
    alpha, beta = jnp.asarray(d), jnp.asarray(e)
    if alpha.dtype != beta.dtype:
        raise TypeError(f"diagonal and off-diagonal values must have same dtype, got "
                        f"{_np.dtype(alpha.dtype)} and {_np.dtype(beta.dtype)}")
    if _np.dtype(alpha.dtype) not in (_np.float32, _np.float64) or \
            _np.dtype(beta.dtype) not in (_np.float32, _np.float64):
        raise TypeError(f"Only float32 and float64 inputs are supported as inputs to "
                        f"jax.scipy.linalg.eigh_tridiagonal, got {_np.dtype(alpha.dtype)} and "
                        f"{_np.dtype(beta.dtype)}")
    n = alpha.shape[0]
    dt = _np.dtype(alpha.dtype)
    if n <= 1:
        return alpha if eigvals_only else (alpha, jnp.eye(n, dtype=dt))
    beta_abs = jnp.abs(beta)
    beta_sq = beta * beta
    # the Gershgorin interval, and the smallest pivot of the Sturm recurrence
    off = jnp.concatenate([beta_abs[:1], beta_abs[:-1] + beta_abs[1:], beta_abs[-1:]], axis=0)
    lambda_est_max = jnp.max(alpha + off)
    lambda_est_min = jnp.min(alpha - off)
    t_norm = jnp.maximum(jnp.abs(lambda_est_min), jnp.abs(lambda_est_max))
    finfo = _np.finfo(dt)
    one = _np.ones([], dtype=dt)
    safemin = _np.maximum(one / finfo.max, (one + finfo.eps) * finfo.tiny)
    pivmin = safemin * jnp.maximum(1, jnp.max(beta_sq))
    alpha0_perturbation = jnp.square(finfo.eps * beta_abs[0])
    abs_tol = finfo.eps * t_norm
    if tol is not None:
        abs_tol = jnp.maximum(tol, abs_tol)
    max_it = finfo.nmant + 1
    if select == "a":
        target_counts = jnp.arange(n, dtype=jnp.int32)
    elif select == "i":
        if select_range is None:
            raise ValueError("for select='i', select_range must be specified.")
        if select_range[0] > select_range[1]:
            raise ValueError("Got empty index range in select_range.")
        target_counts = jnp.arange(select_range[0], select_range[1] + 1, dtype=jnp.int32)
    elif select == "v":
        raise NotImplementedError("eigh_tridiagonal(..., select='v') is not implemented")
    else:
        raise ValueError("'select must have a value in {'a', 'i', 'v'}.")
    if not eigvals_only:
        raise NotImplementedError("eigh_tridiagonal: the eigenvectors (eigvals_only=False: "
                                  "JAX's inverse iteration, on its perturbed tridiagonal LU "
                                  "kernel) are not implemented here")
    fudge = 2.1
    norm_slack = jnp.full((), n, dt) * fudge * finfo.eps * t_norm
    lower = lambda_est_min - norm_slack - 2 * fudge * pivmin
    upper = lambda_est_max + norm_slack + fudge * pivmin
    shape = tuple(target_counts.shape)
    lower = jnp.broadcast_to(lower, shape)
    upper = jnp.broadcast_to(upper, shape)
    mid = 0.5 * (upper + lower)
    pivmin = jnp.broadcast_to(pivmin, shape)
    alpha0_perturbation = jnp.broadcast_to(alpha0_perturbation, shape)
    a_ = [alpha[i] for i in range(n)]
    b_ = [beta_sq[i] for i in range(n - 1)]

    def sturm(x):
        """How many eigenvalues lie below x: the negative pivots of the LDL^T
        of T - x (JAX's recurrence, the first step perturbed where x is
        alpha[0], tiny pivots held at -pivmin)."""
        q = a_[0] - x
        count = jnp.where(q < 0, 1, 0)
        q = jnp.where(a_[0] == x, alpha0_perturbation, q)
        for i in range(1, n):
            q = a_[i] - b_[i - 1] / q - x
            count = jnp.where(q <= pivmin, count + 1, count)
            q = jnp.where(q <= pivmin, jnp.minimum(q, -pivmin), q)
        return count

    def cond(args):
        i, lower, _, upper = args
        return jnp.logical_and(i < max_it, abs_tol < jnp.max(upper - lower))

    def body(args):
        i, lower, mid, upper = args
        counts = sturm(mid)
        lower = jnp.where(counts <= target_counts, mid, lower)
        upper = jnp.where(counts > target_counts, mid, upper)
        return i + 1, lower, 0.5 * (lower + upper), upper

    _, _, mid, _ = _lax.while_loop(cond, body, (0, lower, mid, upper))
    return mid


# ---- special matrices ---------------------------------------------------------------------


def _arraylike(name, *args):
    jnp._arraylike(name, *args)      # JAX's check_arraylike (its TypeError)


def toeplitz(c, r=None):
    """scipy.linalg.toeplitz: A[i, j] = c[i - j] for i >= j, r[j - i] above
    (r[0] unused; r defaults to c); leading dimensions are batch dimensions,
    broadcast together."""
    _arraylike("toeplitz", *((c,) if r is None else (c, r)))
    return _toeplitz(c, c if r is None else r)


@_at_once
def _toeplitz(c, r):
    c, r = jnp.atleast_1d(jnp.asarray(c)), jnp.atleast_1d(jnp.asarray(r))
    loop = _core_sizes("(m),(n)->(m,n)", c.shape, r.shape)
    m, n = c.shape[-1], r.shape[-1]
    dt = jnp.promote_types(c.dtype, r.dtype)
    if m == 0 or n == 0:
        return jnp.zeros(loop + (m, n), dt)
    c = jnp.broadcast_to(jnp.astype(c, dt), loop + (m,))
    r = jnp.broadcast_to(jnp.astype(r, dt), loop + (n,))
    elems = jnp.concatenate([jnp.flip(c, -1), r[..., 1:]], axis=-1)
    rows, cols = _grid(m, n, 2)
    return jnp.take(elems, (m - 1) - rows + cols, axis=-1)


def hankel(c, r=None):
    """scipy.linalg.hankel: H[i, j] = v[i + j], v = c followed by r[1:] (r
    defaults to zeros); batch dimensions broadcast."""
    _arraylike("hankel", *((c,) if r is None else (c, r)))
    return _hankel(c, r)


@_at_once
def _hankel(c, r):
    c = jnp.asarray(c)
    r = jnp.zeros_like(c) if r is None else jnp.asarray(r)
    if len(c.shape) == 0:
        raise ValueError("hankel: c must be at least 1-dimensional, got a scalar.")
    if len(r.shape) == 0:
        raise ValueError("hankel: r must be at least 1-dimensional, got a scalar.")
    loop = _core_sizes("(m),(n)->(m,n)", c.shape, r.shape)
    m, n = c.shape[-1], r.shape[-1]
    dt = jnp.result_type(c, r)
    if m == 0 or n == 0:
        return jnp.zeros(loop + (m, n), dt)
    c = jnp.broadcast_to(jnp.astype(c, dt), loop + (m,))
    r = jnp.broadcast_to(jnp.astype(r, dt), loop + (n,))
    v = jnp.concatenate([c, r[..., 1:]], axis=-1)
    rows, cols = _grid(m, n, 2)
    return jnp.take(v, rows + cols, axis=-1)


def circulant(c):
    """scipy.linalg.circulant: A[i, j] = c[(i - j) mod n]; batch dimensions
    lead."""
    _arraylike("circulant", c)
    return _circulant(c)


@_at_once
def _circulant(c):
    c = jnp.atleast_1d(jnp.asarray(c))
    n = c.shape[-1]
    rows, cols = _grid(n, n, 2)
    return jnp.take(c, (rows - cols) % max(n, 1), axis=-1)


def leslie(f, s):
    """scipy.linalg.leslie: f (fecundity) as the first row, s (survival) on
    the first subdiagonal."""
    _arraylike("leslie", f, s)
    return _leslie(f, s)


@_at_once
def _leslie(f, s):
    f, s = jnp.atleast_1d(jnp.asarray(f)), jnp.atleast_1d(jnp.asarray(s))
    if f.shape[-1] < 2:
        raise ValueError(f"The length of f along the last axis must be at least 2; got shape "
                         f"{tuple(f.shape)}.")
    if s.shape[-1] != f.shape[-1] - 1:
        raise ValueError(f"Incorrect lengths for f and s. The length of s along the last axis "
                         f"must be one less than the length of f; got f shape {tuple(f.shape)} "
                         f"and s shape {tuple(s.shape)}.")
    loop = _core_sizes("(n),(m)->(n,n)", f.shape, s.shape)
    n = f.shape[-1]
    dt = jnp.result_type(f, s)
    f = jnp.broadcast_to(jnp.astype(f, dt), loop + (n,))
    s = jnp.broadcast_to(jnp.astype(s, dt), loop + (n - 1,))
    rows, cols = _grid(n, n, len(loop) + 2)
    sub = jnp.expand_dims(jnp.concatenate([jnp.zeros(loop + (1,), dt), s], axis=-1), -1)
    return jnp.where(rows == 0, jnp.expand_dims(f, -2), jnp.where(rows == cols + 1, sub, 0))


def companion(a):
    """scipy.linalg.companion: -a[1:] / a[0] as the first row, ones on the
    first subdiagonal ((n - 1) x (n - 1)); a[0] == 0 gives inf or NaN."""
    return _companion(a)


@_at_once
def _companion(a):
    a = _inexact(jnp.atleast_1d(jnp.asarray(a)))
    if a.shape[-1] < 2:
        raise ValueError(f"The length of `a` along the last axis must be at least 2; got shape "
                         f"{tuple(a.shape)}.")
    m = a.shape[-1] - 1
    first = -a[..., 1:] / a[..., :1]
    rows, cols = _grid(m, m, len(a.shape) + 1)
    return jnp.where(rows == 0, jnp.expand_dims(first, -2),
                     jnp.astype(rows == cols + 1, a.dtype))


def fiedler(a):
    """scipy.linalg.fiedler: F[i, j] = |a[i] - a[j]|."""
    _arraylike("fiedler", a)
    return _fiedler(a)


@_at_once
def _fiedler(a):
    arr = jnp.atleast_1d(jnp.asarray(a))
    return jnp.abs(jnp.expand_dims(arr, -1) - jnp.expand_dims(arr, -2))


def fiedler_companion(a):
    """scipy.linalg.fiedler_companion: the pentadiagonal companion matrix of
    the polynomial a (its eigenvalues the roots), (n - 1) x (n - 1)."""
    return _fiedler_companion(a)


@_at_once
def _fiedler_companion(a):
    a = _inexact(jnp.atleast_1d(jnp.asarray(a)))
    if a.shape[-1] == 0:
        raise ValueError(f"fiedler_companion requires the last axis of 'a' to have nonzero "
                         f"length, but got an array of shape {tuple(a.shape)}.")
    n = a.shape[-1] - 1
    lead = tuple(a.shape[:-1])
    if n == 0:
        return jnp.zeros(lead + (0, 0), a.dtype)
    a = a / a[..., :1]
    if n == 1:
        return jnp.reshape(-a[..., 1:], lead + (1, 1))
    i, j = _grid(n, n, 2)
    super_val = -jnp.take(a, jnp.minimum(i + 2, n), axis=-1)
    sub_val = -jnp.take(a, jnp.minimum(i + 1, n), axis=-1)
    even, odd = i % 2 == 0, i % 2 == 1
    first = jnp.reshape(-a[..., 1], lead + (1, 1))
    conds = [(i == 0) & (j == 0), (i == 1) & (j == 0), (j == i + 1) & even,
             (j == i + 2) & even, (j == i - 1) & even & (i >= 2), (j == i - 2) & odd & (i >= 3)]
    choices = [first, 1.0, super_val, 1.0, sub_val, 1.0]
    out = jnp.zeros(lead + (n, n), a.dtype)
    for cnd, ch in reversed(list(zip(conds, choices))):
        out = jnp.where(cnd, ch, out)
    return out


def convolution_matrix(a, n, mode="full"):
    """scipy.linalg.convolution_matrix: A (k, n) with A @ v ==
    jnp.convolve(a, v, mode), k = m + n - 1 ('full'), max(m, n) ('same'),
    max(m, n) - min(m, n) + 1 ('valid'); a Toeplitz matrix."""
    n = operator.index(n)
    if n <= 0:
        raise ValueError(f"n must be a positive integer; got {n}.")
    _arraylike("convolution_matrix", a)
    return _convolution_matrix(a, n, mode)


@_at_once
def _convolution_matrix(a, n, mode):
    a = jnp.asarray(a)
    if len(a.shape) == 0:
        raise ValueError("convolution_matrix: a must be at least 1-dimensional, got a scalar.")
    m = a.shape[-1]
    if m < 1:
        raise ValueError(f"len(a) must be at least 1; got shape {tuple(a.shape)}.")
    if mode not in ("full", "valid", "same"):
        raise ValueError(f"mode must be one of 'full', 'valid', 'same'; got {mode!r}.")
    widths = [(0, 0)] * (len(a.shape) - 1) + [(0, n - 1)]
    az = jnp.pad(a, widths)
    raz = jnp.pad(jnp.flip(a, -1), widths)
    L = m + n - 1
    if mode == "same":
        trim = min(n, m) - 1
        tb = trim // 2
        te = trim - tb
    elif mode == "valid":
        tb = te = min(n, m) - 1
    else:
        tb = te = 0
    return _toeplitz(az[..., tb:L - te], raz[..., L - n - tb:L - tb])


def _host_hilbert(n):
    a = _np.arange(n, dtype=_np.float32)[:, None]
    return (1 / (a + a.T + 1)).astype(_np.float32)


@_creation(_host_hilbert)
def hilbert(n):
    """scipy.linalg.hilbert: H[i, j] = 1 / (i + j + 1), float32."""
    a = jnp.reshape(jnp.arange(n, dtype=_np.float32), (n, 1))
    return 1 / (a + jnp.swapaxes(a, 0, 1) + 1)


def _binom(n, k):
    """JAX's pascal binomials: exp(lgamma(n + 1) - lgamma(n - k + 1) -
    lgamma(k + 1)) (0 above the diagonal, where lgamma is inf)."""
    return jnp.exp(_lax.lgamma(n + 1.0) - _lax.lgamma(n - k + 1.0) - _lax.lgamma(k + 1.0))


def _host_comb(n, k):
    return _np.vectorize(lambda a, b: float(math.comb(int(a), int(b))) if 0 <= b <= a else 0.0,
                         otypes=[_np.float64])(n, k)


def _host_invhilbert(n):
    i = _np.arange(n)[:, None]
    j = _np.arange(n)[None, :]
    s = i + j
    out = (-1.0) ** s * (s + 1.0) * _host_comb(n + i, n - j - 1) * \
        _host_comb(n + j, n - i - 1) * _host_comb(s, i) ** 2
    return out.astype(_np.float32)


@_creation(_host_invhilbert)
def invhilbert(n):
    """scipy.linalg.invhilbert: the inverse of the Hilbert matrix in closed
    form ((-1)^(i+j) (i+j+1) C(n+i, n-j-1) C(n+j, n-i-1) C(i+j, i)^2, with
    JAX's gammaln binomials), float32."""
    a = jnp.arange(n, dtype=_np.float32)
    i = jnp.reshape(a, (n, 1))
    j = jnp.reshape(a, (1, n))
    s = i + j
    from .special import comb
    return (jnp.power(-1.0, s) * (s + 1.0) * comb(n + i, n - j - 1) *
            comb(n + j, n - i - 1) * comb(s, i) ** 2)


_KINDS = ["symmetric", "lower", "upper"]


def _host_pascal(n, kind=None):
    kind = "symmetric" if kind is None else kind
    if kind not in _KINDS:
        raise ValueError(f"Expected kind to be on of: {_KINDS}; got {kind}")
    a = _np.arange(n)
    lo = _host_comb(a[:, None], a[None, :])
    out = lo if kind == "lower" else lo.T if kind == "upper" else lo @ lo.T
    return out.astype(_np.float32)


@_creation(_host_pascal)
def pascal(n, kind=None):
    """scipy.linalg.pascal: the lower ('lower'), upper ('upper') or
    symmetric (default) Pascal matrix, its binomials from lgamma as JAX's
    (not exact), float32."""
    kind = "symmetric" if kind is None else kind
    if kind not in _KINDS:
        raise ValueError(f"Expected kind to be on of: {_KINDS}; got {kind}")
    a = jnp.arange(n, dtype=_np.float32)
    lo = _binom(jnp.reshape(a, (n, 1)), jnp.reshape(a, (1, n)))
    if kind == "lower":
        return lo
    if kind == "upper":
        return jnp.swapaxes(lo, 0, 1)
    return jnp.matmul(lo, jnp.swapaxes(lo, 0, 1))


def _host_invpascal(n, kind=None):
    kind = "symmetric" if kind is None else kind
    if kind not in _KINDS:
        raise ValueError(f"Expected kind to be one of: {_KINDS}; got {kind}")
    a = _np.arange(n)
    i, j = a[:, None], a[None, :]
    lo = (-1.0) ** (i - j) * _host_comb(i, j)
    out = lo if kind == "lower" else lo.T if kind == "upper" else lo.T @ lo
    return out.astype(_np.float32)


@_creation(_host_invpascal)
def invpascal(n, kind=None):
    """scipy.linalg.invpascal: the inverse Pascal matrix in closed form,
    L^-1[i, j] = (-1)^(i-j) C(i, j), the symmetric one U^-1 L^-1; float32."""
    kind = "symmetric" if kind is None else kind
    if kind not in _KINDS:
        raise ValueError(f"Expected kind to be one of: {_KINDS}; got {kind}")
    a = jnp.arange(n, dtype=_np.float32)
    i, j = jnp.reshape(a, (n, 1)), jnp.reshape(a, (1, n))
    lo = jnp.power(-1.0, i - j) * _binom(i, j)
    if kind == "lower":
        return lo
    if kind == "upper":
        return jnp.swapaxes(lo, 0, 1)
    return jnp.matmul(jnp.swapaxes(lo, 0, 1), lo)


def _host_helmert(n, full=False):
    if n < 1:
        raise ValueError(f"n must be a positive integer; got {n}.")
    i = _np.arange(n - 1)[:, None]
    j = _np.arange(n)[None, :]
    k = (i + 1).astype(_np.float32)
    den = _np.sqrt(k * (k + 1))
    h = _np.where(j <= i, 1.0 / den, _np.where(j == i + 1, -k / den, 0)).astype(_np.float32)
    if full:
        h = _np.concatenate([_np.full((1, n), 1.0 / _np.sqrt(_np.float32(n)), _np.float32), h])
    return h


@_creation(_host_helmert)
def helmert(n, full=False):
    """scipy.linalg.helmert: rows of orthonormal contrasts ((n - 1) x n; with
    full, the row 1/sqrt(n) first), float32."""
    if n < 1:
        raise ValueError(f"n must be a positive integer; got {n}.")
    i = jnp.reshape(jnp.arange(n - 1), (n - 1, 1))
    j = jnp.reshape(jnp.arange(n), (1, n))
    k_f = jnp.astype(i + 1, _np.float32)
    den = jnp.sqrt(k_f * (k_f + 1))
    h = jnp.where(j <= i, 1.0 / den, jnp.where(j == i + 1, -k_f / den, jnp.zeros_like(den)))
    if full:
        h = jnp.concatenate([jnp.full((1, n), float(1.0 / _np.sqrt(_np.float32(n))),
                                      _np.float32), h], axis=0)
    return h


def _canonical(dtype):
    """A dtype as JAX reads it without x64: Python int and float as int32 and
    float32."""
    return {int: _np.int32, float: _np.float32, bool: _np.bool_}.get(dtype, dtype)


def _host_hadamard(n, dtype=int):
    if n < 1 or not math.log2(n).is_integer():
        raise ValueError(f"n must be a positive power of 2; got {n}.")
    dt = _canonical(dtype)
    h = _np.ones((1, 1), dt)
    for _ in range(int(math.log2(n))):
        h = _np.block([[h, h], [h, -h]])
    return h


@_creation(_host_hadamard)
def hadamard(n, dtype=int):
    """scipy.linalg.hadamard: Sylvester's construction, n a power of 2 (int32
    by default)."""
    if n < 1 or not math.log2(n).is_integer():
        raise ValueError(f"n must be a positive power of 2; got {n}.")
    dt = _canonical(dtype)
    h = jnp.ones((1, 1), dt)
    for _ in range(int(math.log2(n))):
        h = jnp.concatenate([jnp.concatenate([h, h], axis=1),
                             jnp.concatenate([h, -h], axis=1)], axis=0)
    return h
