"""jnp.linalg (shmap.numpy.linalg) and lax.linalg's cholesky and
triangular_solve, as composites of the op table's ops, unrolled over the
matrix's order as programs unroll their loops: norms; Gaussian elimination
with partial pivoting (the pivot of largest magnitude, as LAPACK's getrf)
for solve, inv, det and slogdet; Cholesky column by column; triangular
solves by substitution; QR by Householder reflections (LAPACK's signs);
least squares (the minimum-norm solution) through the SVD, as JAX's.
Leading dimensions are batch dimensions. grad and vmap go through them as
through any composite. svd, slogdet, qr and eigh return JAX's namedtuples
(SVDResult, SlogdetResult, QRResult, EighResult), pytrees.

Sharding is JAX's linalg rule: the two matrix dimensions unsharded
('Input 0 to lu must be unsharded on non-batch dimensions, but got
P(None, 'i').'), the batch dimensions alike in every input, the result
laid out as the batch. eigh and svd are Jacobi rotations in round-robin
rounds, swept in a loop of the program until the off-diagonal part is at
rounding level (their programs hold one sweep: they grow with the order
squared); eig (non-symmetric) is refused with a sentence."""
import numbers
from typing import Any, NamedTuple

import numpy as _np

from . import numpy as jnp
from ._core import InvalidArgument, ProgramError
from ._trace import _entries
from .numpy import _at_once

__all__ = ["norm", "vector_norm", "matrix_norm", "det", "slogdet", "inv", "solve",
           "cholesky", "matrix_power", "matrix_transpose", "multi_dot", "vecdot", "outer",
           "trace", "diagonal", "matmul", "tensordot", "cross", "svd", "eigh", "eig", "qr",
           "pinv", "lstsq", "matrix_rank", "eigvalsh", "svdvals", "triangular_solve",
           "solve_triangular", "EighResult", "EigResult", "QRResult", "SlogdetResult",
           "SVDResult"]


# ---- JAX's result namedtuples (pytrees: they go through jit, grad and vmap) ----------


class EighResult(NamedTuple):
    """eigh's result: (eigenvalues, eigenvectors)."""
    eigenvalues: Any
    eigenvectors: Any


class EigResult(NamedTuple):
    """eig's result: (eigenvalues, eigenvectors)."""
    eigenvalues: Any
    eigenvectors: Any


class QRResult(NamedTuple):
    """qr's result: (Q, R)."""
    Q: Any
    R: Any


class SlogdetResult(NamedTuple):
    """slogdet's result: (sign, logabsdet)."""
    sign: Any
    logabsdet: Any


class SVDResult(NamedTuple):
    """svd's result: (U, S, Vh)."""
    U: Any
    S: Any
    Vh: Any


# ---- JAX's linalg sharding rule ------------------------------------------


def _check_core_unsharded(name, *xs, core=2):
    """JAX's linalg_sharding_rule: each input's last `core` dimensions
    unsharded, the batch dimensions sharded alike (its sentences)."""
    batch = []
    for i, x in enumerate(xs):
        ents = _entries(x)
        if ents is None:
            return
        k = core if isinstance(core, int) else core[i]
        if any(e is not None for e in ents[len(ents) - k:]):
            raise ProgramError(f"Input {i} to {name} must be unsharded on non-batch dimensions, "
                               f"but got {_spec_str(ents)}.")
        batch.append(tuple(ents[:len(ents) - k]))
    if any(b != batch[0] for b in batch[1:]):
        raise ProgramError(f"All inputs to {name} must have the same batch sharding, but got "
                           f"{[tuple(b) for b in batch]}.")


def _spec_str(ents):
    from ._core import P
    return repr(P(*ents))


def _float(x):
    dt = _np.dtype(x.dtype)
    if dt.kind not in "fc":
        return jnp.astype(x, _np.float32)
    return x


def _square(name, a):
    if len(a.shape) < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"{name}: the last two dimensions of the input must be a square "
                         f"matrix, got shape {tuple(a.shape)}")


def _symmetric(name, a, symmetrize):
    """A square floating input of name, JAX's rule checked, made symmetric
    ((a + a^T) / 2) when asked, as JAX's symmetrize_input."""
    _square(name, a)
    a = _float(a)
    _check_core_unsharded(name, a)
    return (a + jnp.swapaxes(a, -1, -2)) / 2 if symmetrize else a


def _rows(n, ndim):
    """The row and column indices of an n x n matrix, shaped for arrays of
    ndim dimensions (the matrix last)."""
    r = jnp.reshape(jnp.arange(n), (1,) * (ndim - 2) + (n, 1))
    c = jnp.reshape(jnp.arange(n), (1,) * (ndim - 2) + (1, n))
    return r, c


def _diag(x, offset=0):
    """The diagonal of the last two dimensions (any batch)."""
    n, m = x.shape[-2], x.shape[-1]
    if len(x.shape) == 2:
        return jnp.diagonal(x, offset=offset)
    d = jnp.sum(x * jnp.eye(n, m, k=offset, dtype=x.dtype), axis=-1 if offset >= 0 else -2)
    k = min(n, m - offset) if offset >= 0 else min(n + offset, m)
    return d[..., :k]


# ---- norms -----------------------------------------------------------------


@_at_once
def vector_norm(x, axis=None, keepdims=False, ord=2):
    """jnp.linalg.vector_norm: the ord-norm over axis (None: all elements):
    2, 1, inf, -inf, 0 (the count of nonzeros) or any p."""
    x = _float(x)
    a = jnp.abs(x)
    if ord is None or ord == 2:
        return jnp.sqrt(jnp.sum(a * a, axis=axis, keepdims=keepdims))
    if ord == _np.inf:
        return jnp.max(a, axis=axis, keepdims=keepdims)
    if ord == -_np.inf:
        return jnp.min(a, axis=axis, keepdims=keepdims)
    if ord == 0:
        return jnp.sum(jnp.astype(a != 0, x.dtype), axis=axis, keepdims=keepdims)
    if ord == 1:
        return jnp.sum(a, axis=axis, keepdims=keepdims)
    if isinstance(ord, str):
        raise ValueError(f"Invalid order '{ord}' for vector norm.")
    return jnp.sum(a ** ord, axis=axis, keepdims=keepdims) ** (1.0 / ord)


@_at_once
def matrix_norm(x, keepdims=False, ord="fro"):
    """jnp.linalg.matrix_norm over the last two dimensions: 'fro', 1, -1,
    inf, -inf; 2, -2 and 'nuc' from the singular values."""
    return _matrix_norm(_float(x), ord, (-2, -1), keepdims)


def _matrix_norm(x, ord, axis, keepdims):
    r, c = (d % len(x.shape) for d in axis)
    a = jnp.abs(x)
    if ord in (None, "fro"):
        return jnp.sqrt(jnp.sum(a * a, axis=(r, c), keepdims=keepdims))
    if ord in (1, -1, _np.inf, -_np.inf):
        s_ax, m_ax = (r, c) if ord in (1, -1) else (c, r)
        s = jnp.sum(a, axis=s_ax, keepdims=True)
        m = jnp.max(s, axis=m_ax, keepdims=True) if ord in (1, _np.inf) else \
            jnp.min(s, axis=m_ax, keepdims=True)
        return m if keepdims else jnp.squeeze(m, axis=(r, c))
    if ord in (2, -2, "nuc"):  # from the singular values (Jacobi's svd)
        x2 = jnp.transpose(x, [d for d in range(len(x.shape)) if d not in (r, c)] + [r, c])
        sv = svdvals(x2)
        out = jnp.max(sv, axis=-1) if ord == 2 else jnp.min(sv, axis=-1) if ord == -2 else \
            jnp.sum(sv, axis=-1)
        if keepdims:
            out = jnp.expand_dims(jnp.expand_dims(out, min(r, c)), max(r, c))
        return out
    raise ValueError(f"Invalid order '{ord}' for matrix norm.")


@_at_once
def norm(x, ord=None, axis=None, keepdims=False):
    """jnp.linalg.norm, numpy's: axis None (all elements, or with ord a
    1-d vector's or 2-d matrix's norm), an int (vectors) or two ints
    (matrices)."""
    nd = len(x.shape)
    if axis is None:
        if ord is None:  # JAX's: a sum over every element (no ravel: x may be sharded)
            return vector_norm(x, axis=None, keepdims=keepdims, ord=2)
        if nd not in (1, 2):
            raise ValueError("Improper number of dimensions to norm.")
        axis = tuple(range(nd))
    if isinstance(axis, numbers.Integral):
        axis = (int(axis),)
    axis = tuple(axis)
    if len(axis) == 1:
        return vector_norm(x, axis=axis[0], keepdims=keepdims, ord=2 if ord is None else ord)
    if len(axis) == 2:
        return _matrix_norm(_float(x), ord, axis, keepdims)
    raise ValueError("Improper number of dimensions to norm.")


# ---- Gaussian elimination ------------------------------------------------


def _eliminate(a, b=None):
    """Partial-pivoting elimination of square a (batch dims first) and of
    b's columns alongside: (upper triangular U, b transformed, the sign of
    the row permutation as an array of a's batch shape)."""
    n = a.shape[-1]
    nd = len(a.shape)
    m = jnp.concatenate([a, b], axis=-1) if b is not None else a
    r, c = _rows(n, nd)
    sign = jnp.ones(a.shape[:-2], a.dtype) if nd > 2 else jnp.asarray(_np.ones((), a.dtype))
    for k in range(n):
        col = jnp.abs(m[..., :, k])
        col = jnp.where(jnp.reshape(jnp.arange(n), (1,) * (nd - 2) + (n,)) >= k, col, -1)
        p = jnp.argmax(col, axis=-1)                                  # the pivot row
        pk = jnp.expand_dims(p, -1)                                   # (..., 1)
        idx = jnp.reshape(jnp.arange(n), (1,) * (nd - 2) + (n,))
        perm = jnp.where(idx == k, pk, jnp.where(idx == pk, k, idx))  # rows k and p swapped
        m = jnp.take_along_axis(m, jnp.broadcast_to(jnp.expand_dims(perm, -1), m.shape),
                                axis=-2)
        sign = jnp.where(p != k, -sign, sign)
        piv = m[..., k:k + 1, k:k + 1]                                # (..., 1, 1)
        zero = piv == 0  # a singular column (all zeros from k down): nothing to eliminate
        f = jnp.where((r > k) & ~zero, m[..., :, k:k + 1] / jnp.where(zero, 1, piv), 0)
        m = m - f * m[..., k:k + 1, :]
    if b is None:
        return m, None, sign
    return m[..., :, :n], m[..., :, n:], sign


def _substitute(t, y, lower, unit=False):
    """x with t x = y, t triangular (lower or upper; batch dims first), y
    (..., n, k): one row of x a step, the rows still unknown zeros in the
    product with t's row."""
    n = t.shape[-1]
    r, _ = _rows(n, len(y.shape))
    x = jnp.zeros_like(y)
    for i in (range(n) if lower else range(n - 1, -1, -1)):
        xi = y[..., i:i + 1, :] - jnp.matmul(t[..., i:i + 1, :], x)
        if not unit:
            xi = xi / t[..., i:i + 1, i:i + 1]
        x = jnp.where(r == i, xi, x)
    return x


def _solve_layout(name, a, b):
    """JAX's checks of the triangular solves of b by a's factors (b's rows
    unsharded, the batch as a's), and b with its columns gathered for the
    elimination; returns (b, the result's spec entries or None)."""
    from ._conv import _gather_dims
    ea, eb = _entries(a), _entries(b)
    if ea is None:
        return b, None
    if tuple(ea[:-2]) != tuple(eb[:-2]):
        raise ProgramError(f"All inputs to triangular_solve must have the same batch sharding, "
                           f"but got {tuple(ea[:-2])} and {tuple(eb[:-2])}.")
    if eb[-2] is not None:
        raise ProgramError(f"triangular solve input `b` must be unsharded on the contracting "
                           f"axis, but got {_spec_str(eb)} with left_side=True and "
                           f"transpose_a=False.")
    return _gather_dims(b, eb, {len(eb) - 1}), list(eb)


def _solve_shapes(a_shape, b_shape):
    """JAX's checks of solve's shapes (jnp.vectorize's with its signature
    '(m,m),(m)->(m)' for a 1-d b, '(m,m),(m,n)->(m,n)' else; its
    sentences) and the broadcast batch shape of a and b."""
    a_shape, b_shape = tuple(a_shape), tuple(b_shape)
    if len(a_shape) < 2:
        raise ValueError(f"left hand array must be at least two dimensional; got "
                         f"a.shape={a_shape}")
    from .numpy import _loop_shape
    sig = "(m,m),(m)->(m)" if len(b_shape) == 1 else "(m,m),(m,n)->(m,n)"
    ctx = f"on vectorized function with excluded=frozenset() and signature={sig!r}"
    cores = [("m", "m"), ("m",) if len(b_shape) == 1 else ("m", "n")]
    try:
        return _loop_shape([a_shape, b_shape], cores, ctx)[0]
    except ValueError as e:
        if "core dimension" in str(e):  # (vectorize's own sentences)
            raise
        shapes = [a_shape[:-2], b_shape[:-2] if len(b_shape) > 1 else ()]
        raise ValueError(f"Incompatible shapes for broadcasting: shapes={shapes}") from None


def _legacy_vector(a_shape, b_shape):
    """b a batch of vectors in JAX's reading before v0.5.0 (a (..., m, m),
    b (..., m) with b.shape[-2] != m), which JAX now refuses."""
    return len(b_shape) > 1 and len(a_shape) == len(b_shape) + 1 and \
        a_shape[-1] == b_shape[-1] and a_shape[-1] != b_shape[-2]


@_at_once
def solve(a, b):
    """jnp.linalg.solve: x with a @ x == b, as JAX's: b 1-d (a vector, x of
    a's batch shape by m) or (..., m, n) (matrices), the batch dimensions of
    a and b broadcast against each other (JAX's jnp.vectorize with
    signature '(m,m),(m)->(m)' or '(m,m),(m,n)->(m,n)')."""
    if _legacy_vector(a.shape, b.shape):
        # JAX (since v0.5.0) raises "Invalid shapes for solve: ... Prior to JAX v0.5.0, this
        # would have been treated as a batched 1-dimensional solve. ..."; shmap keeps that
        # older reading (b[..., None], the result squeezed), which its tests rely on
        return solve(a, jnp.expand_dims(b, -1))[..., 0]
    batch = _solve_shapes(a.shape, b.shape)
    a, b = _float(a), _float(b)
    if _np.dtype(a.dtype) != _np.dtype(b.dtype):
        dt = jnp.result_type(a, b)
        a, b = jnp.astype(a, dt), jnp.astype(b, dt)
    vec = len(b.shape) == 1
    if vec:
        b = jnp.expand_dims(b, -1)
    if tuple(a.shape[:-2]) != batch:
        a = jnp.broadcast_to(a, batch + tuple(a.shape[-2:]))
    if tuple(b.shape[:-2]) != batch:
        b = jnp.broadcast_to(b, batch + tuple(b.shape[-2:]))
    _check_core_unsharded("lu", a)
    b, want = _solve_layout("solve", a, b)
    u, y, _ = _eliminate(a, b)
    from ._conv import _lay_out
    x = _lay_out(_substitute(u, y, lower=False), want)
    return x[..., 0] if vec else x


@_at_once
def inv(a):
    """jnp.linalg.inv: solve(a, identity)."""
    _square("inv", a)
    a = _float(a)
    _check_core_unsharded("lu", a)
    n = a.shape[-1]
    eye = jnp.zeros_like(a) + jnp.eye(n, dtype=a.dtype)  # laid out as a
    u, y, _ = _eliminate(a, eye)
    return _substitute(u, y, lower=False)


def slogdet(a, *, method=None):
    """jnp.linalg.slogdet: SlogdetResult(sign, logabsdet) from the
    elimination's pivots (method None or 'lu', JAX's default; 'qr' is
    taken the same way: the values agree)."""
    if method not in (None, "lu", "qr"):
        raise ValueError(f"Unknown slogdet method '{method}'. Supported methods "
                         "are 'lu' (`None`), and 'qr'.")
    return SlogdetResult(*_slogdet(a))


@_at_once
def _slogdet(a):
    _square("slogdet", a)
    a = _float(a)
    _check_core_unsharded("lu", a)
    u, _, sign = _eliminate(a)
    d = _diag(u)
    s = sign * jnp.prod(jnp.sign(d), axis=-1)
    return s, jnp.sum(jnp.log(jnp.abs(d)), axis=-1)


@_at_once
def det(a):
    """jnp.linalg.det: the product of the elimination's pivots, signed by
    its row swaps."""
    _square("det", a)
    a = _float(a)
    _check_core_unsharded("lu", a)
    u, _, sign = _eliminate(a)
    return sign * jnp.prod(_diag(u), axis=-1)


# ---- Cholesky and triangular solves ----------------------------------------


@_at_once
def cholesky(a, *, upper=False, symmetrize_input=True):
    """jnp.linalg.cholesky: L lower triangular with L @ L.T == a (upper: its
    transpose); the input symmetrized first, as JAX's; NaN where a is not
    positive definite."""
    a = _symmetric("cholesky", a, symmetrize_input)
    n = a.shape[-1]
    nd = len(a.shape)
    r, c = _rows(n, nd)
    lo = jnp.zeros_like(a)
    ok = None  # every pivot positive (LAPACK's potrf info == 0), per matrix
    for j in range(n):
        lj = lo[..., j:j + 1, :]                                          # (..., 1, n)
        col = a[..., :, j:j + 1] - jnp.sum(lo * lj, axis=-1, keepdims=True)  # (..., n, 1)
        piv = col[..., j:j + 1, :]
        ok = piv > 0 if ok is None else ok & (piv > 0)
        d = jnp.sqrt(piv)
        new = jnp.where(r > j, col / d, jnp.where(r == j, d, 0))
        lo = lo + new * jnp.astype(c == j, a.dtype)
    if ok is not None:  # JAX's: a matrix that is not positive definite all NaN
        lo = jnp.where(ok, lo, jnp.full_like(lo, _np.nan))
    return jnp.swapaxes(lo, -1, -2) if upper else lo


def triangular_solve(a, b, left_side=False, lower=False, transpose_a=False,
                     conjugate_a=False, unit_diagonal=False):
    """jax.lax.linalg.triangular_solve: x with op(a) @ x == b (left_side) or
    x @ op(a) == b, op(a) = a or its transpose; JAX's sharding rule."""
    return _triangular_solve(a, b, left_side, lower, transpose_a, unit_diagonal)


@_at_once
def _triangular_solve(a, b, left_side, lower, transpose_a, unit_diagonal):
    ea, eb = _entries(a), _entries(b)
    if ea is not None:
        if tuple(ea[:-2]) != tuple(eb[:-2]):
            raise ProgramError(f"All inputs to triangular_solve must have the same batch "
                               f"sharding, but got {tuple(ea[:-2])} and {tuple(eb[:-2])}.")
        ls, ta = bool(left_side), bool(transpose_a)
        if ea[-2:][ls ^ ta] is not None:
            raise ProgramError(f"triangular solve input `a` must be unsharded on the "
                               f"contracting axis, but got {_spec_str(ea)} with "
                               f"left_side={ls} and transpose_a={ta}.")
        if eb[-2:][not ls] is not None:
            raise ProgramError(f"triangular solve input `b` must be unsharded on the "
                               f"contracting axis, but got {_spec_str(eb)} with "
                               f"left_side={ls} and transpose_a={ta}.")
    a, b = _float(a), _float(b)
    t = jnp.swapaxes(a, -1, -2) if transpose_a else a
    low = bool(lower) ^ bool(transpose_a)
    if not left_side:  # x @ t = b  <=>  t.T @ x.T = b.T
        t, b, low = jnp.swapaxes(t, -1, -2), jnp.swapaxes(b, -1, -2), not low
    x = _substitute(t, b, low, unit_diagonal)
    return x if left_side else jnp.swapaxes(x, -1, -2)


def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False,
                     debug=None, check_finite=True):
    """jax.scipy.linalg.solve_triangular: a x = b (trans 0), a.T x = b (1,
    'T'); b a vector or a matrix."""
    vec = len(b.shape) == len(a.shape) - 1
    if vec:
        b = jnp.expand_dims(b, -1)
    x = triangular_solve(a, b, left_side=True, lower=lower,
                         transpose_a=trans in (1, 2, "T", "C"), unit_diagonal=unit_diagonal)
    return x[..., 0] if vec else x


# ---- the rest of jnp.linalg --------------------------------------------------


@_at_once
def matrix_power(a, n):
    """jnp.linalg.matrix_power: a to the integer n (negative: of inv(a)),
    by repeated squaring."""
    _square("matrix_power", a)
    if not isinstance(n, numbers.Integral):
        raise TypeError(f"exponent must be an integer, got {n}")
    if n == 0:
        return jnp.zeros_like(a) + jnp.eye(a.shape[-1], dtype=a.dtype)
    if n < 0:
        a, n = inv(a), -n
    out, base = None, a
    while n:
        if n & 1:
            out = base if out is None else jnp.matmul(out, base)
        n >>= 1
        if n:
            base = jnp.matmul(base, base)
    return out


def matrix_transpose(x):
    """jnp.linalg.matrix_transpose: the last two dimensions swapped."""
    return jnp.swapaxes(x, -1, -2)


def multi_dot(arrays, *, precision=None):
    """jnp.linalg.multi_dot: the product of the arrays, left to right (the
    first may be a vector, and the last)."""
    arrays = list(arrays)
    if len(arrays) < 2:
        raise ValueError("Expecting at least two arrays.")
    out = arrays[0]
    for a in arrays[1:]:
        out = jnp.matmul(out, a)
    return out


@_at_once
def vecdot(x1, x2, axis=-1):
    """jnp.linalg.vecdot: the dot products of vectors along axis."""
    return jnp.sum(x1 * x2, axis=axis)


def outer(x1, x2):
    return jnp.outer(x1, x2)


@_at_once
def trace(x, offset=0):
    """jnp.linalg.trace: over the last two dimensions."""
    return jnp.sum(_diag(x, offset), axis=-1)


@_at_once
def diagonal(x, offset=0):
    """jnp.linalg.diagonal: over the last two dimensions."""
    return _diag(x, offset)


matmul = jnp.matmul
tensordot = jnp.tensordot
cross = jnp.cross


def _refused(name):
    def f(*args, **kwargs):
        raise InvalidArgument(f"jnp.linalg.{name} (a non-symmetric eigendecomposition) is not "
                              f"implemented here; jnp.linalg has eigh and svd (Jacobi), solve, "
                              f"inv, det, slogdet, cholesky, qr, lstsq, pinv and norm")
    f.__name__ = name
    f.__doc__ = f"jnp.linalg.{name}: not implemented here (refused with a sentence)."
    return f


eig, = map(_refused, ["eig"])


# ---- Jacobi rotations: eigh, and the SVD by one-sided rotations ----------------------


def _schedule(n, dt):
    """The round-robin schedule of index pairs (the circle method: 0 fixed,
    the others rotating), n - 1 rounds of n / 2 disjoint pairs covering
    every pair once, as the one-hot columns (op, oq) of each round's first
    and second indices, made in the program from iota (no constants to
    upload): round r pairs position k with n - 1 - k, and position j >= 1
    holds 1 + (j - 1 - r) mod (n - 1)."""
    k = jnp.arange(n // 2)
    rows = jnp.reshape(jnp.arange(n), (n, 1))
    out = []
    for r in range(n - 1):
        p = jnp.where(k == 0, 0, 1 + jnp.mod(k - 1 - r, n - 1))
        q = 1 + jnp.mod(n - 2 - k - r, n - 1)
        out.append((jnp.astype(rows == jnp.reshape(p, (1, n // 2)), dt),
                    jnp.astype(rows == jnp.reshape(q, (1, n // 2)), dt)))
    return out


def _sweeps(dt):
    return 10 if _np.dtype(dt) == _np.float64 else 7


def _under_grad(x):
    """x depends on what a grad being traced differentiates."""
    from ._trace import _builder
    from .lax import _Mark
    return _Mark(_builder()).differentiated([x])


def _sweep_until(a, v, sweep, off, total, dt):
    """Jacobi sweeps of (a, v) until every matrix's off-diagonal measure
    off(a) is at most (order * eps)^2 of total(a) (both (batch...)), at most
    three times _sweeps: a while loop of the program, one sweep in its body.
    Under grad (which goes through no loop) a fixed _sweeps, unrolled."""
    from . import lax
    if _under_grad(a) or _under_grad(v):
        for _ in range(_sweeps(dt)):
            a, v = sweep(a, v)
        return a, v
    tol = float((a.shape[-1] * _np.finfo(dt).eps) ** 2)

    def more(c):
        return jnp.any(off(c[0]) > tol * total(c[0])) & (c[2] < 3 * _sweeps(dt))

    def body(c):
        return sweep(c[0], c[1]) + (c[2] + 1,)
    a, v, _ = lax.while_loop(more, body, (a, v, 0))
    return a, v


def _rotation(c, s, op, oq, n, dt, b):
    """J for a round: identity but J[p,p] = J[q,q] = c, J[p,q] = s,
    J[q,p] = -s for each pair (op, oq: the pairs' one-hot columns, program
    constants; c, s: (batch..., n/2), the batch dimensions lettered b).
    Every subscript is written out, so that no shape is asked of a traced
    value inside the sweeps (which would type the program so far each
    time)."""
    cfull = jnp.einsum(f"{b}k,ik->{b}i", c, op + oq)
    return jnp.einsum(f"{b}i,ij->{b}ij", cfull, jnp.eye(n, dtype=dt)) + \
        jnp.einsum(f"{b}k,ik,jk->{b}ij", s, op, oq) - jnp.einsum(f"{b}k,ik,jk->{b}ij", s, oq, op)


def _angle(x, y, z):
    """(c, s) of the Jacobi rotation that zeroes z between diagonal entries x
    and y (a_pp, a_qq, a_pq; or the columns' |a_p|^2, |a_q|^2, a_p . a_q)."""
    zero = z == 0
    theta = (y - x) / (2 * jnp.where(zero, 1, z))
    t = jnp.where(theta >= 0, 1, -1) / (jnp.abs(theta) + jnp.sqrt(theta * theta + 1))
    t = jnp.where(zero, 0, t)
    c = 1 / jnp.sqrt(t * t + 1)
    return c, t * c


def eigh(a, UPLO=None, symmetrize_input=True):
    """jnp.linalg.eigh: EighResult(eigenvalues ascending, eigenvectors as
    columns) of a symmetric matrix, by cyclic Jacobi rotations in
    round-robin rounds, swept until the off-diagonal part is at rounding
    level (a loop of the program; under grad a fixed 10 sweeps), in float64
    whatever the input's float dtype (the result in it). With
    symmetrize_input=False only the triangle UPLO names ('L', the default,
    or 'U') is read, as LAPACK's; else (a + a.T) / 2.
    Eigenvectors' signs are the rotations' (LAPACK's are its own: compare
    up to sign)."""
    if UPLO is None or UPLO == "L":
        lower = True
    elif UPLO == "U":
        lower = False
    else:
        raise ValueError(f"UPLO must be one of None, 'L', or 'U', got {UPLO}")
    return EighResult(*_eigh(a, lower, bool(symmetrize_input)))


@_at_once
def _eigh(a, lower, symmetrize_input):
    a = _symmetric("eigh", a, symmetrize_input)
    if not symmetrize_input:  # the triangle named, mirrored
        r, c = _rows(a.shape[-1], len(a.shape))
        a = jnp.where(r >= c if lower else r <= c, a, jnp.swapaxes(a, -1, -2))
    return _eigh_sym(a)


def _eigh_sym(a):
    """(w, v) of symmetric a (its dtype float)."""
    if _np.dtype(a.dtype) != _np.float64:  # rotations accumulate: swept in float64
        w, v = _eigh_sym(a.astype(_np.float64))
        return w.astype(a.dtype), v.astype(a.dtype)
    n0 = a.shape[-1]
    dt = _np.dtype(a.dtype)
    n = n0 + (n0 % 2)
    if n != n0:  # an odd order: a dummy index, never rotated (its row and column zero)
        widths = [(0, 0)] * (len(a.shape) - 2) + [(0, 1), (0, 1)]
        a = jnp.pad(a, tuple(widths))
    v = jnp.zeros_like(a) + jnp.eye(n, dtype=dt)
    b = "abcdefgh"[:len(a.shape) - 2]  # the batch's letters (asked once, before the sweeps)
    sched = _schedule(n, dt) if n > 1 else []
    offmask = 1 - jnp.eye(n, dtype=dt)

    def sweep(a, v):
        for op, oq in sched:
            app = jnp.einsum(f"{b}ij,ik,jk->{b}k", a, op, op)            # (..., n/2)
            aqq = jnp.einsum(f"{b}ij,ik,jk->{b}k", a, oq, oq)
            apq = jnp.einsum(f"{b}ij,ik,jk->{b}k", a, op, oq)
            c, s_ = _angle(app, aqq, apq)
            j = _rotation(c, s_, op, oq, n, dt, b)
            a = jnp.einsum(f"{b}ki,{b}kl,{b}lj->{b}ij", j, a, j)         # J^T A J
            v = jnp.einsum(f"{b}ik,{b}kj->{b}ij", v, j)
        return a, v
    if n > 1:
        a, v = _sweep_until(a, v, sweep,
                            lambda a: jnp.einsum(f"{b}ij,{b}ij,ij->{b}", a, a, offmask),
                            lambda a: jnp.einsum(f"{b}ij,{b}ij->{b}", a, a), dt)
    w = _diag(a)[..., :n0]
    v = v[..., :n0, :n0]
    order = jnp.argsort(w, axis=-1)
    w = jnp.take_along_axis(w, order, axis=-1)
    v = jnp.take_along_axis(v, jnp.broadcast_to(jnp.expand_dims(order, -2), v.shape), axis=-1)
    return w, v


def eigvalsh(a, UPLO="L", *, symmetrize_input=True):
    """jnp.linalg.eigvalsh: eigh's eigenvalues."""
    return eigh(a, UPLO, symmetrize_input=symmetrize_input).eigenvalues


def svd(a, full_matrices=True, compute_uv=True, hermitian=False, subset_by_index=None):
    """jnp.linalg.svd by one-sided Jacobi rotations (Hestenes): pairs of
    columns rotated until orthogonal, in round-robin rounds swept as eigh's
    are; singular values their norms, descending. SVDResult(U, S, Vh), or S
    alone without compute_uv. full_matrices=True (the default, as JAX's):
    U (..., m, m) and Vh (..., n, n), the thin factor completed to an
    orthonormal basis (Householder QR of it); False: the thin U (..., m, k)
    and Vh (..., k, n), k = min(m, n). Signs are the rotations' (LAPACK's
    are its own: compare up to sign). hermitian is taken as False (the same
    singular values)."""
    if subset_by_index is not None:
        raise NotImplementedError("jnp.linalg.svd: subset_by_index (TPU only in JAX) is not "
                                  "implemented here")
    r = _svd(a, bool(full_matrices), bool(compute_uv))
    return SVDResult(*r) if compute_uv else r


@_at_once
def _svd(a, full_matrices, compute_uv):
    a = _float(a)
    if len(a.shape) < 2:
        raise ValueError("svd: the input must have at least two dimensions")
    _check_core_unsharded("svd", a)
    if _np.dtype(a.dtype) != _np.float64:  # rotations accumulate: swept in float64
        r = _svd(a.astype(_np.float64), full_matrices, compute_uv)
        return r.astype(a.dtype) if not compute_uv else tuple(x.astype(a.dtype) for x in r)
    m, n0 = a.shape[-2], a.shape[-1]
    if m < n0:  # the transpose's: U and V swapped
        r = _svd(jnp.swapaxes(a, -1, -2), full_matrices, compute_uv)
        if not compute_uv:
            return r
        u, s_, vh = r
        return jnp.swapaxes(vh, -1, -2), s_, jnp.swapaxes(u, -1, -2)
    dt = _np.dtype(a.dtype)
    n = n0 + (n0 % 2)
    if n != n0:
        widths = [(0, 0)] * (len(a.shape) - 2) + [(0, 0), (0, 1)]
        a = jnp.pad(a, tuple(widths))
    v = jnp.broadcast_to(jnp.eye(n, dtype=dt), tuple(a.shape[:-2]) + (n, n))
    b = "abcdefgh"[:len(a.shape) - 2]  # the batch's letters (asked once, before the sweeps)
    sched = _schedule(n, dt) if n > 1 else []
    offmask = 1 - jnp.eye(n, dtype=dt)

    def sweep(a, v):
        for op, oq in sched:
            ap = jnp.einsum(f"{b}mj,jk->{b}mk", a, op)                    # (..., m, n/2)
            aq = jnp.einsum(f"{b}mj,jk->{b}mk", a, oq)
            c, s_ = _angle(jnp.einsum(f"{b}mk,{b}mk->{b}k", ap, ap),
                           jnp.einsum(f"{b}mk,{b}mk->{b}k", aq, aq),
                           jnp.einsum(f"{b}mk,{b}mk->{b}k", ap, aq))
            j = _rotation(c, s_, op, oq, n, dt, b)
            a = jnp.einsum(f"{b}mk,{b}kj->{b}mj", a, j)
            v = jnp.einsum(f"{b}ik,{b}kj->{b}ij", v, j)
        return a, v

    def gram(a):  # the columns' inner products: diagonal once they are orthogonal
        return jnp.einsum(f"{b}mi,{b}mj->{b}ij", a, a)
    if n > 1:
        a, v = _sweep_until(a, v, sweep,
                            lambda a: jnp.einsum(f"{b}ij,{b}ij,ij->{b}", gram(a), gram(a), offmask),
                            lambda a: jnp.einsum(f"{b}ij,{b}ij->{b}", gram(a), gram(a)), dt)
    # the columns' norms, 0 (with a zero gradient, not sqrt's infinite one) for a zero column
    # (the padding one of an odd order, or a rank-deficient a)
    ss = jnp.sum(a * a, axis=-2)[..., :n0]
    pos = ss > 0
    s_ = jnp.where(pos, jnp.sqrt(jnp.where(pos, ss, 1)), 0)
    order = jnp.argsort(-s_, axis=-1)
    s_ = jnp.take_along_axis(s_, order, axis=-1)
    if not compute_uv:
        return s_
    a, v = a[..., :, :n0], v[..., :n0, :n0]
    idx = jnp.broadcast_to(jnp.expand_dims(order, -2), a.shape)
    a = jnp.take_along_axis(a, idx, axis=-1)
    v = jnp.take_along_axis(v, jnp.broadcast_to(jnp.expand_dims(order, -2), v.shape), axis=-1)
    u = a / jnp.expand_dims(jnp.where(s_ == 0, 1, s_), -2)
    if full_matrices and m > n0:
        u = _complete(u, s_)
    return u, s_, jnp.swapaxes(v, -1, -2)


def _complete(u, s_):
    """U (..., m, m) from the thin u (..., m, k) of singular values s_
    (descending): u's columns, those of zero singular values (zero columns,
    last) and the m - k more taken from the complete Q of u's Householder
    QR (orthonormal, its first columns spanning u's)."""
    k = u.shape[-1]
    q = qr(u, mode="complete")[0]
    keep = jnp.expand_dims(s_ > 0, -2)
    return jnp.concatenate([jnp.where(keep, u, q[..., :, :k]), q[..., :, k:]], axis=-1)


@_at_once
def svdvals(x):
    """jnp.linalg.svdvals: the singular values, descending."""
    return svd(x, compute_uv=False)


@_at_once
def pinv(a, rtol=None, hermitian=False, *, rcond=None):
    """jnp.linalg.pinv: V diag(1/s) U^T over the singular values above rtol
    times the largest (default: eps * max(m, n), as JAX's)."""
    a = _float(a)
    u, s_, vh = svd(a, full_matrices=False)
    m, n = a.shape[-2], a.shape[-1]
    tol = rcond if rcond is not None else rtol
    if tol is None:
        tol = 10 * max(m, n) * _np.finfo(_np.dtype(a.dtype)).eps
    cut = tol * jnp.max(s_, axis=-1, keepdims=True)
    inv_s = jnp.where(s_ > cut, 1 / jnp.where(s_ > cut, s_, 1), 0)
    return jnp.matmul(jnp.swapaxes(vh, -1, -2) * jnp.expand_dims(inv_s, -2),
                      jnp.swapaxes(u, -1, -2))


def matrix_rank(M, rtol=None, *, hermitian=False, tol=None):
    """jnp.linalg.matrix_rank, JAX's: the count of singular values above
    rtol (tol its alias), as JAX compares them (the given rtol taken as
    the threshold itself; None: the largest singular value times max(m, n)
    times eps); an input of fewer than two dimensions has rank 1 if any
    element is nonzero, else 0."""
    if tol is not None:
        if rtol is not None:
            raise ValueError("matrix_rank: only one of tol or rtol may be specified.")
        rtol = tol
    return _matrix_rank(M, rtol)


@_at_once
def _matrix_rank(M, rtol):
    M = _float(jnp.asarray(M) if not hasattr(M, "shape") else M)
    if len(M.shape) < 2:
        return jnp.astype(jnp.any(M != 0), _np.int32)
    s_ = svdvals(M)
    if rtol is None:
        rtol = jnp.max(s_, axis=-1) * float(max(M.shape[-2:]) * _np.finfo(_np.dtype(s_.dtype)).eps)
    if hasattr(rtol, "shape"):
        rtol = jnp.expand_dims(rtol, len(rtol.shape))
    return jnp.sum(jnp.astype(s_ > rtol, _np.int32), axis=-1)


# ---- QR by Householder reflections ---------------------------------------------------


def qr(a, mode="reduced"):
    """jnp.linalg.qr: Householder reflections, one per column, with
    LAPACK's sign convention (R's diagonal -sign(a_kk) |column|), so Q and R
    are numpy's. mode 'reduced' (QRResult(Q m x k, R k x n)), 'complete'
    (Q m x m) or 'r' (R alone)."""
    if mode not in ("reduced", "complete", "r"):
        raise ValueError(f"Unsupported QR decomposition mode '{mode}'")
    r = _qr(a, mode)
    return r if mode == "r" else QRResult(*r)


@_at_once
def _qr(a, mode):
    if len(a.shape) < 2:
        raise ValueError("qr: the input must have at least two dimensions")
    a = _float(a)
    _check_core_unsharded("geqrf", a)
    m, n = a.shape[-2], a.shape[-1]
    k = min(m, n)
    nd = len(a.shape)
    rows = jnp.reshape(jnp.arange(m), (1,) * (nd - 2) + (m, 1))
    r = a
    q = jnp.zeros_like(a[..., :, :1]) + jnp.eye(m, dtype=a.dtype)  # batched as a
    for j in range(k):
        col = jnp.where(rows >= j, r[..., :, j:j + 1], 0)           # (..., m, 1)
        alpha = r[..., j:j + 1, j:j + 1]
        norm = jnp.sqrt(jnp.sum(col * col, axis=-2, keepdims=True))
        beta = -jnp.where(alpha < 0, -1, 1) * norm
        v = col - jnp.where(rows == j, beta, 0)
        vv = jnp.sum(v * v, axis=-2, keepdims=True)
        below = jnp.sum(jnp.where(rows > j, col * col, 0), axis=-2, keepdims=True)
        none = (vv == 0) | (below == 0)  # nothing below the diagonal: H = I (LAPACK's tau 0)
        scale = jnp.where(none, 0, 2 / jnp.where(none, 1, vv))
        r = r - scale * v * jnp.sum(v * r, axis=-2, keepdims=True)
        q = q - scale * jnp.matmul(q, v) * jnp.swapaxes(v, -1, -2)
    cols = jnp.reshape(jnp.arange(n), (1,) * (nd - 2) + (1, n))
    r = jnp.where(rows <= cols, r, 0)  # exactly upper triangular, as LAPACK leaves it
    if mode == "r":
        return r[..., :k, :]
    if mode == "reduced":
        return q[..., :, :k], r[..., :k, :]
    return q, r


def lstsq(a, b, rcond=None, *, numpy_resid=False):
    """jnp.linalg.lstsq, JAX's: (x, resid, rank, s), x the minimum-norm
    least-squares solution from the thin SVD (singular values below rcond
    times the largest, default eps * max(m, n), and zeros, left out: any
    rank, tall or wide); resid the squared norms of b - a x per column
    (numpy_resid: empty when rank < n or m <= n, as numpy's), rank the
    count of singular values kept, s the singular values."""
    x, resid, rank, s_ = _lstsq(a, b, rcond)
    if numpy_resid and (a.shape[0] <= a.shape[1] or bool(rank < a.shape[1])):
        resid = jnp.asarray(_np.zeros((0,), _np.dtype(resid.dtype)))
    return x, resid, rank, s_


@_at_once
def _lstsq(a, b, rcond):
    a, b = _float(a), _float(b)
    if _np.dtype(a.dtype) != _np.dtype(b.dtype):
        dt = jnp.result_type(a, b)
        a, b = jnp.astype(a, dt), jnp.astype(b, dt)
    if a.shape[0] != b.shape[0]:
        raise ValueError("Leading dimensions of input arrays must match")
    vec = len(b.shape) == 1
    if vec:
        b = jnp.expand_dims(b, -1)
    if len(a.shape) != 2:
        raise TypeError(f"{len(a.shape)}-dimensional array given. Array must be "
                        f"two-dimensional")
    if len(b.shape) != 2:
        raise TypeError(f"{len(b.shape)}-dimensional array given. Array must be one or "
                        f"two-dimensional")
    m, n = a.shape
    dt = _np.dtype(a.dtype)
    eps = float(_np.finfo(dt).eps)
    if m == 0 or n == 0:
        s_ = jnp.zeros((0,), dt)
        rank = jnp.asarray(_np.zeros((), _np.int32))
        x = jnp.zeros((n,) + tuple(b.shape[1:]), dt)
    else:
        if rcond is None:
            rcond = eps * max(n, m)
        elif hasattr(rcond, "shape"):
            rcond = jnp.where(rcond < 0, eps, rcond)
        elif rcond < 0:
            rcond = eps
        u, s_, vt = _svd(a, False, True)
        mask = (s_ > 0) & (s_ >= rcond * s_[0])
        rank = jnp.sum(jnp.astype(mask, _np.int32))
        s_inv = jnp.expand_dims(jnp.where(mask, 1 / jnp.where(mask, s_, 1), 0), -1)
        x = jnp.matmul(jnp.swapaxes(vt, 0, 1), s_inv * jnp.matmul(jnp.swapaxes(u, 0, 1), b))
    r = b - jnp.matmul(a, x)
    resid = jnp.sum(r * r, axis=0)
    if vec:
        x = x[:, 0]
    return x, resid, rank, s_


# ---- cond, tensorinv, tensorsolve (eigvals needs complex numbers: not here) ------------


def cond(x, p=None):
    """jnp.linalg.cond: the condition number of x in the norm p (None or 2:
    the ratio of the extreme singular values, -2 its inverse; else
    norm(x, p) * norm(inv(x), p), NaN made inf where x has no NaN), as
    JAX's."""
    if len(_np.shape(x)) < 2:
        raise ValueError(f"jnp.linalg.cond: input array must be at least 2D; got "
                         f"arr.shape={tuple(_np.shape(x))}")
    if _np.shape(x)[-1] == 0 or _np.shape(x)[-2] == 0:
        raise ValueError(f"jnp.linalg.cond: input array must not be empty; got "
                         f"arr.shape={tuple(_np.shape(x))}")
    if p is not None and p not in (2, -2) and _np.shape(x)[-2] != _np.shape(x)[-1]:
        raise ValueError(f"jnp.linalg.cond: for p={p!r}, array must be square; got "
                         f"arr.shape={tuple(_np.shape(x))}")
    return _cond(x, p)


@_at_once
def _cond(x, p):
    if p is None or p == 2:
        s = svdvals(x)
        return s[..., 0] / s[..., -1]
    if p == -2:
        s = svdvals(x)
        r = s[..., -1] / s[..., 0]
    else:
        r = norm(x, ord=p, axis=(-2, -1)) * norm(inv(x), ord=p, axis=(-2, -1))
    return jnp.where(jnp.isnan(r) & ~jnp.any(jnp.isnan(x), axis=(-2, -1)), _np.inf, r)


def tensorinv(a, ind=2):
    """jnp.linalg.tensorinv: inv of a as a matrix of its first ind
    dimensions by the rest, in the shape rest + first."""
    import math
    import operator
    ind = operator.index(ind)
    if ind <= 0:
        raise ValueError(f"ind must be a positive integer; got ind={ind}")
    shape = tuple(_np.shape(a))
    contracting, batch = shape[:ind], shape[ind:]
    flat = (math.prod(contracting), math.prod(batch))
    if flat[0] != flat[1]:
        raise ValueError(f"tensorinv is only possible when the product of the first `ind` "
                         f"dimensions equals that of the remaining dimensions. got "
                         f"arr.shape={shape} with ind={ind}.")
    return _tensorinv(a, flat, batch + contracting)


@_at_once
def _tensorinv(a, flat, out):
    return jnp.reshape(inv(jnp.reshape(a, flat)), out)


def tensorsolve(a, b, axes=None):
    """jnp.linalg.tensorsolve: x with tensordot(a, x, x.ndim) == b (axes of
    a moved to the end first), by solve of a as a square matrix."""
    return _tensorsolve(a, b, axes)


@_at_once
def _tensorsolve(a, b, axes):
    import math
    if axes is not None:
        n = len(a.shape)  # JAX's moveaxis(a, axes, (ndim - 1,) * len(axes)): sorted, at the end
        src = sorted(int(i) % n for i in axes)
        a = jnp.transpose(a, tuple(i for i in range(n) if i not in src) + tuple(src))
    nb = len(b.shape)
    out_shape = tuple(a.shape)[nb:]
    if tuple(a.shape)[:nb] != tuple(b.shape):
        raise ValueError(f"After moving axes to end, leading shape of a must match shape of b. "
                         f"got a.shape={tuple(a.shape)}, b.shape={tuple(b.shape)}")
    bsize = math.prod(b.shape)
    if bsize != math.prod(out_shape):
        raise ValueError(f"Input arrays must have prod(a.shape[:b.ndim]) == "
                         f"prod(a.shape[b.ndim:]); got a.shape={tuple(a.shape)}, "
                         f"b.ndim={nb}.")
    return jnp.reshape(solve(jnp.reshape(a, (bsize, math.prod(out_shape))),
                             jnp.reshape(b, (-1,))), out_shape)


__all__ += ["cond", "tensorinv", "tensorsolve"]
