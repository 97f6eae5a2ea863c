"""jnp-style functions for traced programs, one per op of the C op table
(all but the collectives, which are in shmap.lax), made at import: a new op
in the table appears here with no Python edit."""
import builtins
import functools
import math
import numbers
import re

import numpy as _np

import _shmap

from ._core import get_mesh
from ._trace import _eager, _holds_array, _state, make_op

_COLLECTIVES = {"psum", "pmean", "pmax", "pmin", "all_gather", "psum_scatter", "ppermute",
                "all_to_all", "axis_index", "axis_size", "pvary", "shard_map_in",
                "shard_map_out"}

__all__ = []
for _name, _sig, _mn, _mx, _jit_only in _shmap.op_table():
    if _name not in _COLLECTIVES:
        globals()[_name] = make_op(_name)
        __all__.append(_name)


def _at_once(fn):
    """fn, run at once as one jit program when called on Arrays outside a
    trace (as the op table's functions are)."""
    @functools.wraps(fn)
    def g(*args, **kwargs):
        if getattr(_state, "builder", None) is None and _holds_array(args, kwargs):
            return _eager(fn, args, kwargs)
        return fn(*args, **kwargs)
    return g


@_at_once
def square(x):
    """x * x (jnp.square)."""
    return x * x


invert = bitwise_not  # noqa: F821 (jnp.invert, from the op table)
bitwise_invert = bitwise_not  # noqa: F821
__all__ += ["invert", "bitwise_invert"]


def _reduced_count(a, axis):
    """How many elements a reduction of a over axis (None, an int or a
    tuple) takes in."""
    if axis is None:
        return math.prod(a.shape)
    axes = (axis,) if isinstance(axis, numbers.Integral) else axis
    return math.prod(a.shape[d] for d in axes)


@_at_once
def var(a, axis=None, dtype=None, ddof=0, keepdims=False):
    """jnp.var: the mean of squared deviations from the mean over axis, the
    sum divided by n - ddof (as JAX computes it); float32 for integers."""
    if dtype is None:
        dtype = a.dtype if _np.issubdtype(a.dtype, _np.floating) else _np.float32
    a = astype(a, dtype)  # noqa: F821
    d = a - mean(a, axis=axis, keepdims=True)  # noqa: F821
    return sum(d * d, axis=axis, keepdims=keepdims) / (_reduced_count(a, axis) - ddof)  # noqa: F821


@_at_once
def std(a, axis=None, dtype=None, ddof=0, keepdims=False):
    """jnp.std: sqrt(var)."""
    return sqrt(var(a, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims))  # noqa: F821


@_at_once
def isnan(x):
    """x != x (false for integers)."""
    return not_equal(x, x)  # noqa: F821


@_at_once
def isfinite(x):
    """Neither infinite nor NaN: x - x is 0 exactly then (true for integers)."""
    return equal(x - x, 0)  # noqa: F821


@_at_once
def isinf(x):
    """+-inf: not NaN, yet x - x is not 0."""
    return logical_and(equal(x, x), not_equal(x - x, 0))  # noqa: F821


__all__ += ["var", "std", "isnan", "isfinite", "isinf"]


@_at_once
def clip(a, a_min=None, a_max=None):
    """jnp.clip: maximum(a, a_min), then minimum(..., a_max)."""
    if a_min is not None:
        a = maximum(a, a_min)  # noqa: F821 (made from the op table above)
    if a_max is not None:
        a = minimum(a, a_max)  # noqa: F821
    return a


def _spec_of_type(t):
    """The PartitionSpec of a type string's dimensions ('f32[8@X,4,6@(Y,Z)]'
    -> P('X', None, ('Y', 'Z'))), or None where no dimension is sharded."""
    from ._core import P
    dims = re.match(r"[a-z0-9]+\[(.*?)\]", t).group(1)
    entries = []
    for d in re.findall(r"\d+(?:@(\(.*?\)|\w+))?", dims) if dims else []:
        if not d:
            entries.append(None)
        elif d.startswith("("):
            entries.append(tuple(d[1:-1].split(",")))
        else:
            entries.append(d)
    return P(*entries) if builtins.any(e is not None for e in entries) else None


@_at_once
def full_like(a, fill_value, dtype=None):
    """jnp.full_like: a's shape, its dtype unless given, and its sharding."""
    spec = _spec_of_type(a.type)
    kw = {} if spec is None else {"out_sharding": spec}
    return full(a.shape, fill_value, dtype=dtype or a.dtype, **kw)  # noqa: F821


@_at_once
def zeros_like(a, dtype=None):
    """jnp.zeros_like (full_like with 0)."""
    return full_like(a, 0, dtype)


@_at_once
def ones_like(a, dtype=None):
    """jnp.ones_like (full_like with 1)."""
    return full_like(a, 1, dtype)


@_at_once
def flip(m, axis=None):
    """jnp.flip: rev along axis (an int or a tuple of them), every axis by
    default."""
    axes = range(len(m.shape)) if axis is None else (axis,) if isinstance(axis, int) else axis
    return rev(m, tuple(axes))  # noqa: F821 (from the op table)


@_at_once
def stack(arrays, axis=0):
    """jnp.stack: the arrays joined along a new axis (expand_dims, then
    concatenate; their shardings must agree, as concatenate asks)."""
    arrays = list(arrays)
    if not arrays:
        raise ValueError("need at least one array to stack")
    rank = len(arrays[0].shape) + 1
    ax = axis + rank if axis < 0 else axis
    return concatenate(tuple(expand_dims(a, ax) for a in arrays), axis=ax)  # noqa: F821


_arange_op = arange  # noqa: F821 (the op table's: static integer bounds)


def _arange(start, stop=None, step=None, dtype=None, out_sharding=None):
    if builtins.all(isinstance(v, numbers.Integral) for v in (start, stop, step) if v is not None):
        args = [v for v in (start, stop, step) if v is not None]
        if stop is None and step is not None:
            args = [0, start, step]
        return _arange_op(*args, dtype=dtype, out_sharding=out_sharding)
    if stop is None:  # float bounds: start + step * range(n), float32 unless told
        start, stop = 0, start
    step = 1 if step is None else step
    n = builtins.max(int(math.ceil((stop - start) / step)), 0)  # max is the op here
    idx = _arange_op(n, dtype=dtype or _np.float32, out_sharding=out_sharding)
    return idx * step + start if (step != 1 or start != 0) else idx


def arange(start, stop=None, step=None, dtype=None, out_sharding=None):
    """jnp.arange: integer bounds as the op table's arange; float ones (a
    float32 result unless dtype says) as start + step * arange(n); outside a
    trace at once on the mesh of set_mesh / use_mesh."""
    if getattr(_state, "builder", None) is None and get_mesh() is not None:
        return _eager(_arange, (start, stop, step), {"dtype": dtype, "out_sharding": out_sharding})
    if getattr(_state, "builder", None) is None:  # no mesh: a numpy array, as the op's
        return _arange_op(start, stop, step, dtype=dtype, out_sharding=out_sharding)
    return _arange(start, stop, step, dtype, out_sharding)


# ---- compositions of the op table's functions, as jnp defines them -----------


def _creation(host):
    """A creation function made of ops: traced inside a trace; outside one,
    run at once on the mesh of set_mesh / use_mesh, or with no mesh set
    host(...) (a numpy array, as zeros and arange give then)."""
    def wrap(fn):
        @functools.wraps(fn)
        def g(*args, **kwargs):
            if getattr(_state, "builder", None) is None:
                if get_mesh() is None:
                    if kwargs.get("out_sharding") is not None:
                        from ._core import InvalidArgument
                        raise InvalidArgument(f"{fn.__name__}(..., out_sharding=...) outside a "
                                              f"traced function needs a mesh: "
                                              f"shmap.set_mesh(mesh) or `with shmap.use_mesh(mesh):`")
                    kwargs.pop("out_sharding", None)
                    return host(*args, **kwargs)
                return _eager(fn, args, kwargs)
            return fn(*args, **kwargs)
        return g
    return wrap


def _constrain(x, out_sharding):
    return x if out_sharding is None else reshard(x, out_sharding)  # noqa: F821


def _iota(n, dtype, shape, at):
    """arange(n) as dtype, reshaped to len(shape) dims with n at `at`."""
    return reshape(arange(n, dtype=dtype),  # noqa: F821
                   tuple(n if d == at else 1 for d in range(len(shape))))


def _host_eye(N, M=None, k=0, dtype=None):
    return _np.eye(N, M, k, dtype=dtype or _np.float32)


@_creation(_host_eye)
def eye(N, M=None, k=0, dtype=None, out_sharding=None):
    """jnp.eye: ones on the k-th diagonal (iota comparisons)."""
    M = N if M is None else M
    on = equal(_iota(N, _np.int32, (N, M), 0) + k, _iota(M, _np.int32, (N, M), 1))  # noqa: F821
    return _constrain(astype(on, dtype or _np.float32), out_sharding)  # noqa: F821


@_creation(lambda n, dtype=None: _np.identity(n, dtype=dtype or _np.float32))
def identity(n, dtype=None, out_sharding=None):
    """jnp.identity: eye(n)."""
    return eye(n, dtype=dtype, out_sharding=out_sharding)


def _host_linspace(start, stop, num=50, endpoint=True, dtype=None):
    return _np.linspace(start, stop, num, endpoint=endpoint, dtype=dtype or _np.float32)


@_creation(_host_linspace)
def linspace(start, stop, num=50, endpoint=True, dtype=None, out_sharding=None):
    """jnp.linspace as JAX computes it: start * (1 - t) + stop * t for t =
    i / div, and stop itself last with endpoint (float32 unless dtype says)."""
    dtype = dtype or _np.float32
    ct = dtype if _np.issubdtype(dtype, _np.floating) else _np.float32
    if num <= 1:  # [start], or nothing
        out = full((1,), start, ct) if num == 1 else zeros((0,), ct)  # noqa: F821
    else:
        t = arange(num - 1 if endpoint else num, dtype=ct) / (num - 1 if endpoint else num)  # noqa: F821
        out = start * (1 - t) + stop * t
        if endpoint:
            out = concatenate((out, full((1,), stop, ct)))  # noqa: F821
    return _constrain(astype(out, dtype), out_sharding)  # noqa: F821


def _tri(m, k, lower):
    r, c = m.shape[-2], m.shape[-1]
    rows = _iota(r, _np.int32, (r, c), 0)
    cols = _iota(c, _np.int32, (r, c), 1)
    keep = greater_equal(rows + k, cols) if lower else less_equal(rows + k, cols)  # noqa: F821
    return where(keep, m, zeros_like(m))  # noqa: F821


@_at_once
def tril(m, k=0):
    """jnp.tril: m with the elements above the k-th diagonal zeroed."""
    return _tri(m, k, True)


@_at_once
def triu(m, k=0):
    """jnp.triu: m with the elements below the k-th diagonal zeroed."""
    return _tri(m, k, False)


@_at_once
def ravel(a):
    """jnp.ravel: reshape(a, (-1,)) (JAX's reshape rule decides the sharding)."""
    return reshape(a, (-1,))  # noqa: F821


@_at_once
def swapaxes(a, axis1, axis2):
    """jnp.swapaxes: a transpose exchanging two axes."""
    perm = list(range(len(a.shape)))
    perm[axis1], perm[axis2] = perm[axis2], perm[axis1]
    return transpose(a, tuple(perm))  # noqa: F821


@_at_once
def moveaxis(a, source, destination):
    """jnp.moveaxis: a transpose moving axis source to destination."""
    n = len(a.shape)
    src, dst = source % n, destination % n
    perm = [d for d in range(n) if d != src]
    perm.insert(dst, src)
    return transpose(a, tuple(perm))  # noqa: F821


@_at_once
def vstack(tup):
    """jnp.vstack: concatenate along axis 0, 1-D arrays as rows."""
    return concatenate(tuple(reshape(a, (1, -1)) if len(a.shape) < 2 else a  # noqa: F821
                             for a in tup), axis=0)


@_at_once
def hstack(tup):
    """jnp.hstack: concatenate along axis 1 (axis 0 for 1-D arrays)."""
    tup = tuple(tup)
    return concatenate(tup, axis=0 if len(tup[0].shape) == 1 else 1)  # noqa: F821


@_at_once
def split(ary, indices_or_sections, axis=0):
    """jnp.split: static slices along axis, at the given indices or in equal
    sections (a ValueError when they do not divide the axis)."""
    n = ary.shape[axis]
    if isinstance(indices_or_sections, numbers.Integral):
        k = int(indices_or_sections)
        if k <= 0 or n % k:
            raise ValueError("array split does not result in an equal division")
        cuts = [n // k * j for j in range(1, k)]
    else:
        cuts = [int(c) for c in indices_or_sections]
    bounds = [0] + cuts + [n]
    lead = (builtins.slice(None),) * (axis % len(ary.shape))  # (slice: the op here)
    return [ary[lead + (builtins.slice(a, builtins.max(a, b)),)]
            for a, b in zip(bounds, bounds[1:])]


@_at_once
def log2(x):
    """jnp.log2: log(x) / log(2), as JAX computes it."""
    return log(x) / math.log(2)  # noqa: F821


@_at_once
def log10(x):
    """jnp.log10: log(x) / log(10)."""
    return log(x) / math.log(10)  # noqa: F821


@_at_once
def exp2(x):
    """jnp.exp2: exp(x * log(2))."""
    return exp(x * math.log(2))  # noqa: F821


@_at_once
def reciprocal(x):
    """jnp.reciprocal: 1 / x."""
    return 1 / x


_sort_op, _argsort_op = sort, argsort  # noqa: F821 (the op table's)


@_at_once
def sort(a, axis=-1, kind=None, order=None, *, stable=True, descending=False):
    """jnp.sort: ascending and stable along axis (the last by default; None:
    the flattened array), NaN last; descending reverses it, as JAX's."""
    if axis is None:
        a, axis = reshape(a, (-1,)), 0  # noqa: F821
    r = _sort_op(a, axis=axis)
    return flip(r, axis) if descending else r


@_at_once
def argsort(a, axis=-1, kind=None, order=None, *, stable=True, descending=False):
    """jnp.argsort: the positions that sort a along axis, stable (equal
    elements in their order, descending too), NaN last (first descending)."""
    if axis is None:
        a, axis = reshape(a, (-1,)), 0  # noqa: F821
    if not descending:
        return _argsort_op(a, axis=axis)
    n = a.shape[axis]  # the flipped array's stable order, mapped back and reversed
    return flip((n - 1) - _argsort_op(flip(a, axis), axis=axis), axis)


@_at_once
def nansum(a, axis=None, dtype=None, keepdims=False):
    """jnp.nansum: sum with NaNs counted as 0."""
    return sum(where(isnan(a), 0, a), axis=axis, dtype=dtype, keepdims=keepdims)  # noqa: F821


@_at_once
def nanmean(a, axis=None, dtype=None, keepdims=False):
    """jnp.nanmean: the mean of the elements that are not NaN (NaN where
    there are none)."""
    ok = logical_not(isnan(a))  # noqa: F821
    n = sum(ok, axis=axis, keepdims=keepdims)  # noqa: F821
    return divide(nansum(a, axis=axis, dtype=dtype, keepdims=keepdims), n)  # noqa: F821


def _nan_extreme(fn, fill):
    @_at_once
    def f(a, axis=None, keepdims=False):
        nan = isnan(a)
        r = fn(where(nan, fill, a), axis=axis, keepdims=keepdims)  # noqa: F821
        return where(all(nan, axis=axis, keepdims=keepdims), _np.nan, r)  # noqa: F821
    return f


nanmax = _nan_extreme(lambda *a, **k: max(*a, **k), -_np.inf)  # noqa: F821
nanmin = _nan_extreme(lambda *a, **k: min(*a, **k), _np.inf)  # noqa: F821
nanmax.__doc__ = "jnp.nanmax: max ignoring NaNs (NaN where every element is)."
nanmin.__doc__ = "jnp.nanmin: min ignoring NaNs (NaN where every element is)."


@_at_once
def quantile(a, q, axis=None, keepdims=False, method="linear"):
    """jnp.quantile with static q (a number or a sequence) and numpy's
    'linear' method: the sorted values at (n - 1) * q, interpolated; NaN
    sorts last, so a NaN in a slice shows in its top quantiles only."""
    if method != "linear":
        raise ValueError(f"quantile: method {method!r} is not supported (only 'linear')")
    if axis is None:
        a, axis = reshape(a, (-1,)), 0  # noqa: F821
    rank = len(a.shape)
    axis = axis % rank
    s = sort(a, axis=axis)
    if not _np.issubdtype(s.dtype, _np.floating):
        s = astype(s, _np.float32)  # noqa: F821
    n = a.shape[axis]
    qs = _np.atleast_1d(_np.asarray(q, dtype=_np.float64))
    outs = []
    for qv in qs:
        pos = (n - 1) * float(qv)
        lo, hi = int(math.floor(pos)), int(math.ceil(pos))
        at = (builtins.slice(None),) * axis
        vlo = s[at + (builtins.slice(lo, lo + 1),)]
        vhi = s[at + (builtins.slice(hi, hi + 1),)]
        v = vlo + (vhi - vlo) * (pos - lo) if hi != lo else vlo
        outs.append(v if keepdims else squeeze(v, axis))  # noqa: F821
    if _np.ndim(q) == 0:
        return outs[0]
    return stack(outs)


@_at_once
def percentile(a, q, axis=None, keepdims=False, method="linear"):
    """jnp.percentile: quantile of q / 100."""
    return quantile(a, _np.asarray(q, dtype=_np.float64) / 100, axis=axis, keepdims=keepdims,
                    method=method)


@_at_once
def median(a, axis=None, keepdims=False):
    """jnp.median: quantile 0.5."""
    return quantile(a, 0.5, axis=axis, keepdims=keepdims)


__all__ += ["nansum", "nanmean", "nanmax", "nanmin", "quantile", "percentile", "median"]

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_einsum_op = einsum  # noqa: F821 (the op table's: one or two operands)


def einsum(subscripts, *operands, out_sharding=None, **kwargs):
    """jnp.einsum; with more than two operands, contracted pairwise from the
    left (each intermediate keeps the indices later operands or the result
    still need), the last contraction taking out_sharding."""
    if len(operands) <= 2:
        return _einsum_op(subscripts, *operands, out_sharding=out_sharding, **kwargs)
    spec = subscripts.replace(" ", "")
    if "." in spec:
        raise ValueError("einsum of more than two operands: write the indices out (no '...')")
    ins, out = spec.split("->") if "->" in spec else (spec, None)
    ins = ins.split(",")
    if len(ins) != len(operands):
        raise ValueError(f"einsum: {len(ins)} index groups for {len(operands)} operands")
    if out is None:  # numpy's implicit output: the indices seen once, sorted
        out = "".join(sorted(c for c in set("".join(ins)) if "".join(ins).count(c) == 1))
    acc, acc_sub = operands[0], ins[0]
    for k in range(1, len(ins) - 1):
        later = "".join(ins[k + 1:]) + out
        keep = "".join(dict.fromkeys(c for c in acc_sub + ins[k] if c in later))
        acc = _einsum_op(f"{acc_sub},{ins[k]}->{keep}", acc, operands[k])
        acc_sub = keep
    return _einsum_op(f"{acc_sub},{ins[-1]}->{out}", acc, operands[-1],
                      out_sharding=out_sharding, **kwargs)


@_at_once
def outer(a, b):
    """jnp.outer: ravel(a)[:, None] * ravel(b)[None, :]."""
    return reshape(a, (-1, 1)) * reshape(b, (1, -1))  # noqa: F821


@_at_once
def tensordot(a, b, axes=2):
    """jnp.tensordot: an einsum over the paired axes (axes: the last/first
    n, or two sequences)."""
    if isinstance(axes, numbers.Integral):
        ax_a = list(range(len(a.shape) - axes, len(a.shape)))
        ax_b = list(range(axes))
    else:
        ax_a, ax_b = ([x] if isinstance(x, numbers.Integral) else list(x) for x in axes)
    ax_a = [x % len(a.shape) for x in ax_a]
    ax_b = [x % len(b.shape) for x in ax_b]
    la = list(_LETTERS[:len(a.shape)])
    lb = list(_LETTERS[len(a.shape):len(a.shape) + len(b.shape)])
    for i, j in zip(ax_a, ax_b):
        lb[j] = la[i]
    out = [c for d, c in enumerate(la) if d not in ax_a] + \
        [c for d, c in enumerate(lb) if d not in ax_b]
    return einsum(f"{''.join(la)},{''.join(lb)}->{''.join(out)}", a, b)


@_at_once
def inner(a, b):
    """jnp.inner: a tensordot over the last axis of each."""
    return tensordot(a, b, ([-1], [-1]))


def _to_device(obj, dtype=None):
    """A numpy value as an array of the program being traced (uploaded
    replicated and closed over, as JAX embeds a constant) or, outside a
    trace, on the mesh of set_mesh (a numpy array with no mesh set)."""
    from ._core import Array
    if isinstance(obj, Array) or hasattr(obj, "name") and hasattr(obj, "type"):
        return obj if dtype is None else astype(obj, dtype)  # noqa: F821
    a = _np.asarray(obj, dtype=dtype)
    if dtype is None and a.dtype == _np.float64:  # JAX's default dtypes (x64 off)
        a = a.astype(_np.float32)
    elif dtype is None and a.dtype == _np.int64:
        a = a.astype(_np.int32)
    b = getattr(_state, "builder", None)
    if b is None:
        mesh = get_mesh()
        if mesh is None:
            return a
        from ._core import P, device_put
        return device_put(a, P())
    from ._trace import _constant
    return _constant(a)


def array(object, dtype=None, copy=True):
    """jnp.array: a numpy value (list, scalar, ndarray) as an array, with
    JAX's default dtypes (float32, int32); see _to_device for where it
    lives. An array given is returned (as dtype)."""
    return _to_device(object, dtype)


def asarray(a, dtype=None):
    """jnp.asarray: as jnp.array."""
    return _to_device(a, dtype)


def shape(a):
    """jnp.shape."""
    return tuple(_np.shape(a)) if isinstance(a, (list, tuple, _np.ndarray)) else tuple(a.shape)


def ndim(a):
    """jnp.ndim."""
    return len(shape(a))


def size(a):
    """jnp.size."""
    return math.prod(shape(a))


@_at_once
def isclose(a, b, rtol=1e-05, atol=1e-08):
    """jnp.isclose: |a - b| <= atol + rtol * |b| (NaNs unequal)."""
    return less_equal(abs(a - b), atol + rtol * abs(b))  # noqa: F821


@_at_once
def allclose(a, b, rtol=1e-05, atol=1e-08):
    """jnp.allclose: all of isclose, a bool array of rank 0."""
    return all(isclose(a, b, rtol=rtol, atol=atol))  # noqa: F821


def array_equal(a1, a2):
    """jnp.array_equal: equal shapes and elements (static shapes: False at
    once when they differ)."""
    if tuple(shape(a1)) != tuple(shape(a2)):
        return False
    return _all_equal(a1, a2)


@_at_once
def _all_equal(a1, a2):
    return all(equal(a1, a2))  # noqa: F821


class _Linalg:
    """jnp.linalg: norm."""

    @staticmethod
    @_at_once
    def norm(x, ord=None, axis=None, keepdims=False):
        """The 2-norm of vectors (Frobenius for matrices) over axis; ord 1,
        inf and -inf for vectors (sums and extremes of |x|)."""
        if ord in (None, 2, "fro"):
            return sqrt(sum(x * x, axis=axis, keepdims=keepdims))  # noqa: F821
        if ord == 1:
            return sum(abs(x), axis=axis, keepdims=keepdims)  # noqa: F821
        if ord == _np.inf:
            return max(abs(x), axis=axis, keepdims=keepdims)  # noqa: F821
        if ord == -_np.inf:
            return min(abs(x), axis=axis, keepdims=keepdims)  # noqa: F821
        raise ValueError(f"norm: ord={ord!r} is not supported (None, 2, 'fro', 1, inf, -inf)")


linalg = _Linalg()

__all__ += ["eye", "identity", "linspace", "tril", "triu", "ravel", "swapaxes", "moveaxis",
            "vstack", "hstack", "split", "log2", "log10", "exp2", "reciprocal", "einsum", "outer",
            "tensordot", "inner", "linalg", "array", "asarray", "shape", "ndim", "size",
            "isclose", "allclose", "array_equal", "ndarray"]


from ._core import Array as ndarray  # noqa: E402 (jnp.ndarray, for isinstance)

# jnp's dtypes and constants, numpy's own (astype and dtype= take them)
float16, float32, float64 = _np.float16, _np.float32, _np.float64
int32, int64, uint8, bool_ = _np.int32, _np.int64, _np.uint8, _np.bool_
pi, e, inf, nan, newaxis = _np.pi, _np.e, _np.inf, _np.nan, None

__all__ += ["square", "clip", "full_like", "zeros_like", "ones_like", "flip", "stack",
            "float16", "float32", "float64", "int32", "int64", "uint8", "bool_", "pi", "e",
            "inf", "nan", "newaxis"]


# ---- numpy's other names, made of the op table's ops --------------------------------------

absolute, fabs, positive = abs, abs, lambda x: x  # noqa: F821
amax, amin, around, rint = max, min, round, round  # noqa: F821
true_divide, remainder = divide, mod  # noqa: F821


@_at_once
def trunc(x):
    """Rounds toward zero: floor for x >= 0, ceil below."""
    return where(x < 0, ceil(x), floor(x))  # noqa: F821


@_at_once
def deg2rad(x):
    """x * pi / 180 (radians)."""
    return x * (pi / 180)


@_at_once
def rad2deg(x):
    """x * 180 / pi (degrees)."""
    return x * (180 / pi)


radians, degrees = deg2rad, rad2deg


@_at_once
def hypot(x1, x2):
    """sqrt(x1**2 + x2**2) without overflow: the larger magnitude times
    sqrt(1 + r**2), r the ratio (0 where both are 0)."""
    a, b = abs(x1), abs(x2)  # noqa: F821
    hi, lo = maximum(a, b), minimum(a, b)  # noqa: F821
    r = lo / where(hi == 0, 1, hi)  # noqa: F821
    return hi * sqrt(1 + r * r)  # noqa: F821


@_at_once
def logaddexp(x1, x2):
    """log(exp(x1) + exp(x2)) without overflow: max + log1p(exp(-|x1 - x2|))
    (inf where both are the same infinity, as numpy)."""
    m = maximum(x1, x2)  # noqa: F821
    d = x1 - x2
    d = where(isnan(d), 0, d)  # (inf - inf: both infinite)  # noqa: F821
    return m + log1p(exp(-abs(d)))  # noqa: F821


@_at_once
def logaddexp2(x1, x2):
    """log2(2**x1 + 2**x2), as logaddexp in base 2."""
    return logaddexp(x1 * _np.log(2), x2 * _np.log(2)) / _np.log(2)


@_at_once
def sinc(x):
    """sin(pi x) / (pi x), 1 at 0."""
    y = where(x == 0, 1, x) * pi  # noqa: F821
    return where(x == 0, 1, sin(y) / y)  # noqa: F821


@_at_once
def heaviside(x1, x2):
    """0 below 0, x2 at 0, 1 above (NaN stays NaN)."""
    return where(x1 < 0, 0, where(x1 > 0, 1, where(x1 == 0, x2, x1)))  # noqa: F821


@_at_once
def fmax(x1, x2):
    """maximum, ignoring a NaN where the other value is a number."""
    return where(isnan(x1), x2, where(isnan(x2), x1, maximum(x1, x2)))  # noqa: F821


@_at_once
def fmin(x1, x2):
    """minimum, ignoring a NaN where the other value is a number."""
    return where(isnan(x1), x2, where(isnan(x2), x1, minimum(x1, x2)))  # noqa: F821


@_at_once
def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """NaN to nan, +-inf to posinf / neginf (the dtype's largest finite
    values by default)."""
    if not _np.issubdtype(x.dtype, _np.floating):
        return x
    fi = _np.finfo(x.dtype)
    x = where(isnan(x), nan, x)  # noqa: F821
    x = where(x == _np.inf, fi.max if posinf is None else posinf, x)  # noqa: F821
    return where(x == -_np.inf, fi.min if neginf is None else neginf, x)  # noqa: F821


@_at_once
def ptp(a, axis=None, keepdims=False):
    """max - min over axis."""
    return max(a, axis=axis, keepdims=keepdims) - min(a, axis=axis, keepdims=keepdims)  # noqa


@_at_once
def count_nonzero(a, axis=None, keepdims=False):
    """How many entries are not 0 (int32)."""
    return sum(astype(a != 0, _np.int32), axis=axis, keepdims=keepdims)  # noqa: F821


@_at_once
def average(a, axis=None, weights=None, returned=False, keepdims=False):
    """mean without weights; with them sum(a * w) / sum(w) over axis (w of
    a's shape, or 1-D along a single axis)."""
    if weights is None:
        avg = mean(a, axis=axis, keepdims=keepdims)  # noqa: F821
        n = _reduced_count(a, axis)
        return (avg, full_like(avg, n)) if returned else avg
    w = weights
    if len(w.shape) != len(a.shape):
        if axis is None or len(w.shape) != 1:
            raise ValueError("average: 1-D weights need an axis, and their length along it")
        ax = axis % len(a.shape)
        w = reshape(w, tuple(-1 if d == ax else 1 for d in range(len(a.shape))))  # noqa: F821
        w = broadcast_to(w, tuple(a.shape))  # noqa: F821
    ws = sum(w, axis=axis, keepdims=keepdims)  # noqa: F821
    avg = sum(a * w, axis=axis, keepdims=keepdims) / ws  # noqa: F821
    return (avg, ws) if returned else avg


@_at_once
def diff(a, n=1, axis=-1):
    """The n-th differences along axis: a[1:] - a[:-1], n times."""
    ax = axis % len(a.shape)
    every = (builtins.slice(None),) * ax
    for _ in range(n):
        a = a[every + (builtins.slice(1, None),)] - a[every + (builtins.slice(None, -1),)]
    return a


def atleast_1d(*arys):
    """Each array with at least 1 dimension (a 0-d one becomes (1,))."""
    out = [a if len(a.shape) >= 1 else reshape(a, (1,)) for a in arys]  # noqa: F821
    return out[0] if len(out) == 1 else out


def atleast_2d(*arys):
    """Each array with at least 2 dimensions: () -> (1, 1), (n,) -> (1, n)."""
    def up(a):
        s = tuple(a.shape)
        return a if len(s) >= 2 else reshape(a, (1,) * (2 - len(s)) + s)  # noqa: F821
    out = [up(a) for a in arys]
    return out[0] if len(out) == 1 else out


def atleast_3d(*arys):
    """Each array with at least 3 dimensions: (n,) -> (1, n, 1), (m, n) ->
    (m, n, 1), as numpy."""
    def up(a):
        s = tuple(a.shape)
        if len(s) >= 3:
            return a
        s = (1, 1, 1) if len(s) == 0 else (1,) + s + (1,) if len(s) == 1 else s + (1,)
        return reshape(a, s)  # noqa: F821
    out = [up(a) for a in arys]
    return out[0] if len(out) == 1 else out


@_at_once
def fliplr(m):
    """flip along axis 1."""
    return flip(m, 1)


@_at_once
def flipud(m):
    """flip along axis 0."""
    return flip(m, 0)


@_at_once
def repeat(a, repeats, axis=None):
    """Each entry repeated (an int number of times) along axis (the
    flattened array when None), as a broadcast and a reshape."""
    if not isinstance(repeats, numbers.Integral):
        raise ValueError("repeat: repeats must be a static int here")
    if axis is None:
        a, axis = reshape(a, (-1,)), 0  # noqa: F821
    ax = axis % len(a.shape)
    s = tuple(a.shape)
    b = expand_dims(a, ax + 1)  # noqa: F821
    b = broadcast_to(b, s[:ax + 1] + (repeats,) + s[ax + 1:])  # noqa: F821
    return reshape(b, s[:ax] + (s[ax] * repeats,) + s[ax + 1:])  # noqa: F821


@_at_once
def diagonal(a, offset=0, axis1=0, axis2=1):
    """The diagonal of a's (axis1, axis2) plane, last in the result: a
    masked sum against an identity of the plane's shape."""
    if len(a.shape) != 2 or (axis1, axis2) != (0, 1):
        raise ValueError("diagonal: 2-D arrays (axis1=0, axis2=1) only here")
    n, m = a.shape
    k = builtins.max(0, builtins.min(n + builtins.min(offset, 0), m - builtins.max(offset, 0)))
    if k == 0:
        return zeros((0,), dtype=a.dtype)  # noqa: F821
    rows = a[builtins.max(-offset, 0):builtins.max(-offset, 0) + k,
             builtins.max(offset, 0):builtins.max(offset, 0) + k]
    return sum(rows * eye(k, dtype=a.dtype), axis=1)  # noqa: F821


@_at_once
def trace(a, offset=0, axis1=0, axis2=1, dtype=None):
    """The sum of the diagonal."""
    return sum(diagonal(a, offset, axis1, axis2), dtype=dtype)  # noqa: F821


@_at_once
def diag(v, k=0):
    """A 1-D v: the square matrix with v on its k-th diagonal; a 2-D v: its
    k-th diagonal."""
    if len(v.shape) == 2:
        return diagonal(v, k)
    if len(v.shape) != 1:
        raise ValueError("diag: a 1-D or 2-D array")
    n = v.shape[0] + builtins.abs(k)
    m = eye(n, k=k, dtype=v.dtype)
    lo = builtins.max(-k, 0)
    col = pad(v, ((lo, n - v.shape[0] - lo),))  # noqa: F821 (v along the rows it lands in)
    return m * reshape(col, (n, 1))  # noqa: F821


@_at_once
def vdot(a, b):
    """The dot product of the flattened arrays."""
    return sum(reshape(a, (-1,)) * reshape(b, (-1,)))  # noqa: F821


def broadcast_arrays(*args):
    """The arrays broadcast to their common shape."""
    shape = _np.broadcast_shapes(*[tuple(a.shape) for a in args])
    return [broadcast_to(a, shape) for a in args]  # noqa: F821


def meshgrid(*xi, indexing="xy"):
    """Coordinate arrays of 1-D xi ('xy': the first two axes swapped, as
    numpy's default)."""
    n = len(xi)
    shape = [x.shape[0] for x in xi]
    if indexing == "xy" and n >= 2:
        shape[0], shape[1] = shape[1], shape[0]
    out = []
    for i, x in enumerate(xi):
        at = (1 if i == 0 else 0 if i == 1 else i) if indexing == "xy" and n >= 2 else i
        s = [1] * n
        s[at] = x.shape[0]
        out.append(broadcast_to(reshape(x, tuple(s)), tuple(shape)))  # noqa: F821
    return out


@_at_once
def column_stack(tup):
    """1-D arrays as columns, 2-D ones as they are, side by side."""
    return concatenate([reshape(a, (-1, 1)) if len(a.shape) == 1 else a  # noqa: F821
                        for a in tup], axis=1)


@_at_once
def dstack(tup):
    """Along a third axis (atleast_3d first)."""
    return concatenate([atleast_3d(a) for a in tup], axis=2)  # noqa: F821


def hsplit(ary, indices_or_sections):
    return split(ary, indices_or_sections, axis=1 if len(ary.shape) > 1 else 0)


def vsplit(ary, indices_or_sections):
    return split(ary, indices_or_sections, axis=0)


@_at_once
def nanvar(a, axis=None, dtype=None, ddof=0, keepdims=False):
    """var of the entries that are not NaN (NaN where all are)."""
    ok = logical_not(isnan(a))  # noqa: F821
    n = sum(astype(ok, _np.float32), axis=axis, keepdims=True)  # noqa: F821
    m = nansum(a, axis=axis, keepdims=True) / n
    d = where(ok, a - m, 0)  # noqa: F821
    v = sum(d * d, axis=axis, keepdims=True) / (n - ddof)  # noqa: F821
    return v if keepdims else squeeze(v, axis)  # noqa: F821


@_at_once
def nanstd(a, axis=None, dtype=None, ddof=0, keepdims=False):
    """sqrt(nanvar)."""
    return sqrt(nanvar(a, axis=axis, ddof=ddof, keepdims=keepdims))  # noqa: F821


def tri(N, M=None, k=0, dtype=None):
    """Ones on and below the k-th diagonal of an N x M matrix."""
    return tril(ones((N, N if M is None else M), dtype=dtype or _np.float32), k)  # noqa: F821


def empty(shape, dtype=None, out_sharding=None):
    """zeros (the service's arrays always have values)."""
    return zeros(shape, dtype=dtype, out_sharding=out_sharding)  # noqa: F821


def empty_like(a, dtype=None):
    return zeros_like(a, dtype)


__all__ += ["absolute", "fabs", "positive", "amax", "amin", "around", "rint", "true_divide",
            "remainder", "trunc", "deg2rad", "rad2deg", "radians", "degrees", "hypot",
            "logaddexp", "logaddexp2", "sinc", "heaviside", "fmax", "fmin", "nan_to_num", "ptp",
            "count_nonzero", "average", "diff", "atleast_1d", "atleast_2d", "atleast_3d",
            "fliplr", "flipud", "repeat", "diagonal", "trace", "diag", "vdot",
            "broadcast_arrays", "meshgrid", "column_stack", "dstack", "hsplit", "vsplit",
            "nanvar", "nanstd", "tri", "empty", "empty_like"]
