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


# jnp's dtypes and constants, numpy's own (astype and dtype= take them)
float16, float32, float64 = _np.float16, _np.float32, _np.float64
int32, int64, uint8, bool_ = _np.int32, _np.int64, _np.uint8, _np.bool_
pi, e, inf, nan, newaxis = _np.pi, _np.e, _np.inf, _np.nan, None

__all__ += ["square", "clip", "full_like", "zeros_like", "ones_like", "flip", "stack",
            "float16", "float32", "float64", "int32", "int64", "uint8", "bool_", "pi", "e",
            "inf", "nan", "newaxis"]
