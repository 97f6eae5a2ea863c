"""jnp-style functions for traced programs, one per op of the C op table
(all but the collectives, which are in shmap.lax), made at import: a new op
in the table appears here with no Python edit."""
import builtins
import functools
import math
import numbers
import re
import typing

import numpy as _np

import _shmap

from ._core import AbstractMesh as _AbstractMesh, Array as _Array, NamedSharding as _NamedSharding
from ._core import P as _P
from ._core import _canon_dtype, _canonicalize_sharding, _spec_axes, _type_axes, get_mesh
from ._core import _context_mesh as _core_context_mesh
from ._core import device_put as _device_put
from ._trace import _dims, _eager, _holds_array, _run_now, _spec_entry, _state, make_op

_COLLECTIVES = {"psum", "pmean", "pmax", "pmin", "all_gather", "psum_scatter", "ppermute",
                "all_to_all", "axis_index", "axis_size", "pvary", "shard_map_in",
                "shard_map_out"}

__all__ = []
for _name, _sig, _mn, _mx, _jit_only in _shmap.op_table():
    if _name not in _COLLECTIVES:
        globals()[_name] = make_op(_name)
        __all__.append(_name)


def _sharded_trees(op):
    """op(x, sharding) over a pytree x (tuples, lists, dicts of arrays), as
    JAX's reshard and with_sharding_constraint take one: one sharding for
    every leaf, or a pytree of them of x's structure."""
    from ._core import NamedSharding, PartitionSpec
    from ._trace import _is_tree, _tree_build, _tree_leaves

    @functools.wraps(op)
    def f(x, sharding, *args, **kwargs):
        if not _is_tree(x):
            return op(x, sharding, *args, **kwargs)
        leaves = [v for v, _ in _tree_leaves(x, "x")]
        if sharding is None or isinstance(sharding, (PartitionSpec, NamedSharding)):
            shs = [sharding] * len(leaves)
        else:
            shs = [v for v, _ in _tree_leaves(sharding, "s")]
            if len(shs) != len(leaves):
                raise ValueError(f"{op.__name__}: {len(shs)} shardings for a pytree of "
                                 f"{len(leaves)} arrays: give one sharding, or a pytree of "
                                 f"them of the arrays' structure")
        return _tree_build(x, iter([op(v, s, *args, **kwargs) for v, s in zip(leaves, shs)]))
    return f


def _wsc_in_body(op):
    """with_sharding_constraint in a shard_map body, as JAX's: a spec naming
    a Manual axis is JAX's ValueError; in a body Manual over every axis, one
    naming none changes nothing (the rest is the op's, in partial-manual
    bodies the service's rule)."""
    from ._trace import _to_sharding_mesh

    @functools.wraps(op)
    def f(x, sharding, *args, **kwargs):
        _to_sharding_mesh(sharding)
        b = getattr(_state, "builder", None)
        if b is None or b.kind != "shard_map" or getattr(b, "mesh", None) is None:
            return op(x, sharding, *args, **kwargs)
        mesh = b.mesh
        manual = tuple(a for a in mesh.axis_names if b.manual_axes is None or a in b.manual_axes)
        spec = getattr(sharding, "spec", sharding)
        named = set(_spec_axes(spec or ()))
        if named & set(manual):
            raise ValueError(f"pspec {spec!r} contains a manual axes {manual} of mesh which is "
                             f"not allowed. If you are using a with_sharding_constraint under a "
                             f"shard_map, only use the mesh axis in PartitionSpec which are not "
                             f"manual.")
        if b.manual_axes is None:
            return x
        return op(x, sharding, *args, **kwargs)
    return f


def _check_device_count(sharding, x):
    """In a jit whose mesh (its arguments', else the context's) has another
    number of devices than an all-Explicit NamedSharding's mesh, a value
    laid out over it is JAX's ValueError (pxla's device assignment check)."""
    b = getattr(_state, "builder", None)
    mesh = getattr(b, "mesh", None)
    m = sharding.mesh
    if mesh is None or b.kind != "jit" or not m.are_all_axes_explicit:
        return
    n, size = math.prod(mesh.axis_sizes), math.prod(m.axis_sizes)
    if n == size:
        return
    raise ValueError(f"Length of device assignment {n} is not equal to the size of the mesh "
                     f"{size} of aval {_np.dtype(x.dtype).name}{list(x.shape)}. Please enter "
                     f"your `jit` into a mesh context via `jax.set_mesh`.")


def _reshard_placed(op):
    """jax.sharding.reshard: a spec naming Auto or Manual axes, or longer
    than the array's rank, is JAX's ValueError (canonicalize_sharding, the
    aval's check); outside any trace, data on no mesh (numpy) is placed on
    the NamedSharding's mesh, as JAX's reshard does."""
    @functools.wraps(op)
    def f(x, sharding, *args, **kwargs):
        spec = getattr(sharding, "spec", sharding)
        ndim = len(x.shape) if hasattr(x, "shape") else _np.ndim(x)
        if isinstance(spec, tuple) and len(spec) > ndim:
            raise ValueError(f"Length of sharding.spec ({len(spec)}) must be equal to aval's "
                             f"ndim ({ndim}). Got sharding.spec {spec}, aval.ndim {ndim} and "
                             f"sharding {sharding}")
        if isinstance(sharding, _NamedSharding):
            _canonicalize_sharding(sharding, "reshard", check_mesh_consistency=False)
            _check_device_count(sharding, x)
            if getattr(_state, "builder", None) is None and not _holds_array((x,), {}):
                return _device_put(x, sharding)
        if getattr(_state, "builder", None) is None and isinstance(x, _Array):
            # at once onto another mesh (the sharding's, or for a bare spec the
            # context's): the array moves there, as JAX's reshard casts its type
            mesh = sharding.mesh if isinstance(sharding, _NamedSharding) else get_mesh()
            xm = x.sharding.mesh
            if mesh is not None and not isinstance(mesh, _AbstractMesh) and \
                    (mesh.axis_names, mesh.axis_sizes) != (xm.axis_names, xm.axis_sizes):
                return _device_put(x, _NamedSharding(mesh, spec))
        return op(x, sharding, *args, **kwargs)
    return f


with_sharding_constraint = _wsc_in_body(with_sharding_constraint)  # noqa: F821 (op table)
reshard = _reshard_placed(reshard)  # noqa: F821 (op table)

for _name in ("reshard", "with_sharding_constraint"):
    globals()[_name] = _sharded_trees(globals()[_name])



def _product_kwargs(op):
    """jnp.dot / jnp.matmul (the op table's) with JAX's precision= (XLA's CPU
    products are full precision: ignored) and preferred_element_type= (the
    operands cast to it, so the product accumulates and comes back in it)."""
    @functools.wraps(op)
    def f(a, b, *args, precision=None, preferred_element_type=None, **kwargs):
        return op(*_preferred((a, b), preferred_element_type), *args, **kwargs)
    return f


def _preferred(operands, dtype):
    """A product's operands for preferred_element_type=dtype: cast to it, so
    the product accumulates and comes back in it (as they are for None)."""
    if dtype is None:
        return tuple(operands)
    return tuple(astype(o, dtype) for o in operands)  # noqa: F821 (op table)


dot = _product_kwargs(dot)  # noqa: F821 (op table)
matmul = _product_kwargs(matmul)  # noqa: F821 (op table)

_where = where  # noqa: F821 (the op table's)


def where(condition, x=None, y=None, /, *, size=None, fill_value=None):
    """jnp.where: x where condition holds, else y; with condition alone,
    jnp.nonzero(condition, size=, fill_value=), as JAX's."""
    if x is None and y is None:
        return nonzero(condition, size=size, fill_value=fill_value)  # noqa: F821
    if x is None or y is None:
        raise ValueError(f"Either both or neither of the x and y arguments should be provided "
                         f"to jax.numpy.where, got {x} and {y}.")
    return _where(condition, x, y)


def _at_once(fn):
    """fn, run at once as one jit program when called on Arrays outside a
    trace (as the op table's functions are)."""
    @functools.wraps(fn)
    def g(*args, **kwargs):
        if _run_now(args, kwargs):
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


def _reduced_axes(a, axis):
    """The dimensions a reduction of a over axis (None, an int or a tuple)
    takes away, non-negative and sorted."""
    if axis is None:
        return tuple(range(len(a.shape)))
    axes = (axis,) if isinstance(axis, numbers.Integral) else axis
    return tuple(sorted(int(d) % len(a.shape) for d in axes))


def _reduced_count(a, axis):
    """How many elements a reduction of a over axis (None, an int or a
    tuple) takes in."""
    return math.prod(a.shape[d] for d in _reduced_axes(a, axis))


def _masked(name, op, identity):
    """A reduction of the op table with JAX's where= (elements where it is
    False left out: the identity in their place) and initial= (one more
    element of the reduction); max and min, which have no identity, need
    initial= with where=, as JAX's."""
    @functools.wraps(op)
    def f(a, *args, where=None, initial=None, **kwargs):
        if identity is None and initial is None and hasattr(a, "shape") and \
                _reduced_count(a, kwargs.get("axis", args[0] if args else None)) == 0:
            raise ValueError(f"zero-size array to reduction operation {name} which has no "
                             f"identity")
        if where is None and initial is None:
            return op(a, *args, **kwargs)
        return masked(a, *args, where=where, initial=initial, **kwargs)

    @_at_once
    def masked(a, *args, where=None, initial=None, **kwargs):
        a = asarray(a)  # noqa: F821
        if where is not None:
            fill = identity if identity is not None else initial
            if fill is None:
                raise ValueError(f"reduction operation {name} does not have an identity, so "
                                 f"to use a where mask one has to specify 'initial'")
            a = _where(broadcast_to(where, a.shape), a, _np.asarray(fill, a.dtype))  # noqa: F821
        r = op(a, *args, **kwargs)
        if initial is None:
            return r
        combine = {"sum": add, "prod": multiply, "max": maximum, "min": minimum,  # noqa: F821
                   "any": logical_or, "all": logical_and}[name]  # noqa: F821
        return astype(combine(r, initial), r.dtype)  # noqa: F821
    return f


for _name, _identity in (("sum", 0), ("prod", 1), ("max", None), ("min", None),
                         ("any", False), ("all", True)):
    globals()[_name] = _masked(_name, globals()[_name], _identity)

_mean_op = mean  # noqa: F821 (the op table's)


@_at_once
def mean(a, axis=None, dtype=None, keepdims=False, *, where=None):
    """jnp.mean; with where=, the mean of the elements where it holds (their
    sum over their count), as JAX's."""
    if where is None:
        return _mean_op(a, axis=axis, dtype=dtype, keepdims=keepdims)
    a = asarray(a)  # noqa: F821
    if dtype is None:
        dtype = a.dtype if _np.issubdtype(a.dtype, _np.inexact) else _np.float32
    m = broadcast_to(where, a.shape)  # noqa: F821
    total = sum(astype(a, dtype), axis=axis, keepdims=keepdims, where=m)  # noqa: F821
    return total / sum(astype(m, dtype), axis=axis, keepdims=keepdims)  # noqa: F821


@_at_once
def var(a, axis=None, dtype=None, ddof=0, keepdims=False, *, where=None, correction=None):
    """jnp.var: the mean of squared deviations from the mean over axis, the
    sum divided by n - ddof (as JAX computes it); float32 for integers;
    where= counts only the elements where it holds."""
    if correction is not None:  # the array API's name of ddof (JAX's)
        ddof = correction
    if dtype is None:
        dtype = a.dtype if _np.issubdtype(a.dtype, _np.floating) else _np.float32
    a = astype(a, dtype)  # noqa: F821
    if where is None:
        d = a - mean(a, axis=axis, keepdims=True)
        return sum(d * d, axis=axis, keepdims=keepdims) / (  # noqa: F821
            _reduced_count(a, axis) - ddof)
    m = broadcast_to(where, a.shape)  # noqa: F821
    n = sum(astype(m, dtype), axis=axis, keepdims=True)  # noqa: F821 (counted once)
    d = a - sum(a, axis=axis, keepdims=True, where=m) / n  # noqa: F821
    r = sum(d * d, axis=axis, keepdims=True, where=m) / (n - ddof)  # noqa: F821
    return r if keepdims else squeeze(r, _reduced_axes(a, axis))  # noqa: F821


@_at_once
def std(a, axis=None, dtype=None, ddof=0, keepdims=False, *, where=None, correction=None):
    """jnp.std: sqrt(var)."""
    return sqrt(var(a, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims,  # noqa: F821
                    where=where, correction=correction))


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
def clip(a, a_min=None, a_max=None, *, min=None, max=None):
    """jnp.clip: maximum(a, min), then minimum(..., max) (JAX's min= and
    max=, or numpy's a_min and a_max)."""
    a_min = min if min is not None else a_min
    a_max = max if max is not None else a_max
    if a_min is not None:
        a = maximum(a, a_min)  # noqa: F821 (made from the op table above)
    if a_max is not None:
        a = minimum(a, a_max)  # noqa: F821
    return a


_full_op = full  # noqa: F821 (the op table's: a static number to fill with)


def full(shape, fill_value, dtype=None, *, device=None, out_sharding=None):
    """jnp.full: shape filled with fill_value; an array fill_value (numpy,
    an Array or traced) is broadcast to shape, as JAX's broadcast_to."""
    if _np.ndim(fill_value) == 0 and not hasattr(fill_value, "type"):
        kw = {k: v for k, v in (("dtype", dtype), ("device", device),
                                 ("out_sharding", out_sharding)) if v is not None}
        return _full_op(shape, fill_value, **kw)
    if device is not None and out_sharding is not None:
        raise ValueError("Only one of `device` or `out_sharding` can be set.")
    shape = (int(shape),) if _np.ndim(shape) == 0 else tuple(int(d) for d in shape)
    v = array(fill_value, dtype=dtype)
    return broadcast_to(v, shape, out_sharding=out_sharding or device)


def _unreduced_of(x):
    """The mesh axes x (an Array or a traced value) is unreduced over: its
    type's {U:...}."""
    return frozenset(_type_axes(x)["U"])


def _reduced_of(x):
    """The mesh axes x (an Array or a traced value) is reduced over: its
    type's {R:...}."""
    return frozenset(_type_axes(x)["R"])


def _spec_of_type(t):
    """The PartitionSpec of a type string's dimensions ('f32[8@X,4,6@(Y,Z)]'
    -> P('X', None, ('Y', 'Z'))), or None where no dimension is sharded."""
    from ._core import P
    entries = [_spec_entry(d) for d in _dims(t)]
    return P(*entries) if builtins.any(e is not None for e in entries) else None


def _jax_dtype(dt):
    """JAX's dtype of a numpy value's (x64 off: float64 and int64 narrow)."""
    dt = _np.dtype(dt)
    return {_np.dtype(_np.float64): _np.dtype(_np.float32),
            _np.dtype(_np.int64): _np.dtype(_np.int32)}.get(dt, dt)


def full_like(a, fill_value, dtype=None, shape=None, *, device=None, out_sharding=None):
    """jnp.full_like: a's shape, its dtype unless given, and its sharding;
    in a shard_map body varying over what a varies over (JAX's
    _full_like_insert_pvary). fill_value may be traced. shape= another
    shape (then no sharding of a's); device= or out_sharding= the
    result's sharding, as jnp.full's. a may be a numpy value."""
    if device is not None and out_sharding is not None:
        raise ValueError("Only one of `device` or `out_sharding` can be set.")
    if not hasattr(a, "type"):  # a number or a numpy value: its shape and dtype only
        na = _np.asarray(a)
        return full(na.shape if shape is None else shape, fill_value,  # noqa: F821
                    dtype=dtype or _jax_dtype(na.dtype), device=device, out_sharding=out_sharding)
    if shape is not None or device is not None or out_sharding is not None:
        return full(a.shape if shape is None else shape, fill_value,  # noqa: F821
                    dtype=dtype or a.dtype, device=device, out_sharding=out_sharding)
    if getattr(_state, "builder", None) is None and get_mesh() is None and \
            isinstance(getattr(getattr(a, "sharding", None), "mesh", None), _AbstractMesh):
        # a ShapeDtypeStruct of an abstract mesh at once: JAX's default device
        from ._core import _default_mesh
        mesh = _default_mesh()
        if mesh is not None:
            return _device_put(full(a.shape, fill_value, dtype=dtype or a.dtype),  # noqa: F821
                               _NamedSharding(mesh, _P()))
    return _full_like(a, fill_value, dtype)


@_at_once
def _full_like(a, fill_value, dtype=None):
    from ._trace import Tracer
    from .lax import _varying, pvary
    spec = _spec_of_type(a.type)
    kw = {} if spec is None else {"out_sharding": spec}
    dt = dtype or a.dtype
    if isinstance(fill_value, Tracer):
        out = full(a.shape, 0, dtype=dt, **kw) + astype(fill_value, dt)  # noqa: F821
    else:
        out = full(a.shape, fill_value, dtype=dt, **kw)  # noqa: F821
    more = [x for x in _varying(a.type) if x not in _varying(out.type)]
    return pvary(out, tuple(more)) if more else out


def zeros_like(a, dtype=None, shape=None, *, device=None, out_sharding=None):
    """jnp.zeros_like (full_like with 0)."""
    return full_like(a, 0, dtype, shape, device=device, out_sharding=out_sharding)


def ones_like(a, dtype=None, shape=None, *, device=None, out_sharding=None):
    """jnp.ones_like (full_like with 1)."""
    return full_like(a, 1, dtype, shape, device=device, out_sharding=out_sharding)


@_at_once
def flip(m, axis=None):
    """jnp.flip: rev along axis (an int or a tuple of them), every axis by
    default."""
    axes = range(len(m.shape)) if axis is None else (axis,) if isinstance(axis, int) else axis
    return rev(m, tuple(axes))  # noqa: F821 (from the op table)


_pad_op = pad  # noqa: F821 (the op table's: zeros)


@_at_once
def _pairs(v, rank, dtype=_np.int64):
    """numpy's per-axis (before, after) pairs of a pad argument: a number, a
    pair, or one pair per axis."""
    a = _np.asarray(v, dtype=dtype)
    return _np.broadcast_to(a.reshape(-1, 2) if a.ndim else a, (rank, 2)).tolist()


_PAD_STATS = {"maximum": "max", "minimum": "min", "mean": "mean", "median": "median"}


def pad(array, pad_width, mode="constant", constant_values=0, *, stat_length=None,
        end_values=0):
    """jnp.pad: pad_width as numpy reads it (an int, a (before, after) pair,
    or one pair per axis); mode 'constant' (constant_values a scalar),
    'edge', 'reflect', 'symmetric' or 'wrap', one axis after another, of
    slices, reversals and concatenations (reflect and symmetric at most
    the axis's length - 1 and length, wrap at most its length); 'maximum',
    'minimum', 'mean', 'median' (of the stat_length values at each edge,
    all by default; integers rounded, as numpy's) and 'linear_ramp' (from
    end_values to the edge, as numpy's linspace)."""
    rank = len(array.shape)
    pw = _pairs(pad_width, rank)
    if mode in _PAD_STATS or mode == "linear_ramp":
        return _pad_computed(array, pw, mode, stat_length, end_values)
    if mode == "constant":
        r = _pad_op(array, tuple(map(tuple, pw)))
        traced = hasattr(constant_values, "type")  # a traced scalar (lax.pad's padding_value)
        if traced or _np.ndim(constant_values) or constant_values != 0:
            if not traced and _np.ndim(constant_values):
                raise ValueError("pad: constant_values must be a scalar here")
            keep = _pad_op(ones(array.shape, _np.bool_), tuple(map(tuple, pw)))  # noqa: F821
            r = where(keep, r, constant_values)  # noqa: F821
        return r
    if mode not in ("edge", "reflect", "symmetric", "wrap"):
        raise ValueError(f"pad: mode {mode!r} is not supported here (constant, edge, reflect, "
                         f"symmetric, wrap, maximum, minimum, mean, median, linear_ramp)")
    out = array
    for ax, (lo, hi) in enumerate(pw):
        n = out.shape[ax]
        most = {"reflect": n - 1, "symmetric": n, "wrap": n, "edge": None}[mode]
        if (lo or hi) and (n == 0 or (most is not None and builtins.max(lo, hi) > most)):
            raise ValueError(f"pad: mode {mode!r} pads axis {ax} of length {n} by at most "
                             f"{most}, got {(lo, hi)}")

        def cut(a, b):
            return out[(builtins.slice(None),) * ax + (builtins.slice(a, b),)]
        if mode == "edge":
            left, right = repeat(cut(0, 1), lo, axis=ax), repeat(cut(n - 1, n), hi, axis=ax)
        elif mode == "wrap":
            left, right = cut(n - lo, n), cut(0, hi)
        else:
            k = 1 if mode == "reflect" else 0
            left = flip(cut(k, k + lo), ax)
            right = flip(cut(n - k - hi, n - k), ax)
        out = concatenate([p for p, m in ((left, lo), (out, 1), (right, hi)) if m], axis=ax)
    return out


def _pad_computed(array, pw, mode, stat_length, end_values):
    """pad's modes of values computed from each edge: a statistic of the
    stat_length values there, or a linear ramp from end_values to it."""
    rank = len(array.shape)
    sl = _pairs(stat_length, rank) if stat_length is not None else None
    ev = _pairs(end_values, rank, _np.float64)
    integer = not _np.issubdtype(array.dtype, _np.inexact)
    out = array
    for ax, (lo, hi) in enumerate(pw):
        n = out.shape[ax]
        if not (lo or hi):
            continue
        if n == 0:
            raise ValueError(f"can't extend empty axis {ax} using modes other than 'constant' "
                             f"or 'empty'")

        def cut(a, b):
            return out[(builtins.slice(None),) * ax + (builtins.slice(a, b),)]
        if mode == "linear_ramp":
            shape = [1] * rank
            parts = []
            for m, edge, end, rev in ((lo, cut(0, 1), ev[ax][0], False),
                                      (hi, cut(n - 1, n), ev[ax][1], True)):
                if not m:
                    parts.append(None)
                    continue
                shape[ax] = m
                j = _np.arange(m, dtype=_np.float32).reshape(shape)
                e = astype(edge, _np.float32)  # noqa: F821
                ramp = (e - _np.float32(end)) / _np.float32(m) * j + _np.float32(end)
                ramp = astype(floor(ramp), array.dtype) if integer else ramp  # noqa: F821
                parts.append(flip(ramp, ax) if rev else astype(ramp, array.dtype))  # noqa: F821
            left, right = parts
        else:
            stat = globals()[_PAD_STATS[mode]]
            k_lo, k_hi = (n, n) if sl is None else (builtins.min(builtins.max(sl[ax][0], 1), n),
                                                    builtins.min(builtins.max(sl[ax][1], 1), n))

            def edge_stat(a, b, m):
                v = stat(cut(a, b), axis=ax, keepdims=True)
                if integer and mode in ("mean", "median"):
                    v = astype(round(v), array.dtype)  # noqa: F821
                return repeat(v, m, axis=ax)
            left = edge_stat(0, k_lo, lo) if lo else None
            right = edge_stat(n - k_hi, n, hi) if hi else None
        out = concatenate([p for p, m in ((left, lo), (out, 1), (right, hi)) if m], axis=ax)
    return out


_take_op = take  # noqa: F821 (the op table's: a negative index gains n first in every mode)
_take_along_axis_op = take_along_axis  # noqa: F821 (the op table's)


@_at_once
def take_along_axis(arr, indices, axis, mode=None, fill_value=None, **kwargs):
    """jnp.take_along_axis; axis=None takes along arr and indices raveled, as
    JAX's."""
    if axis is None:
        arr, indices, axis = reshape(arr, (-1,)), reshape(indices, (-1,)), 0  # noqa: F821
    return _take_along_axis_op(arr, indices, axis=axis, mode=mode, **kwargs)


def _fill_default(dtype):
    """JAX's fill_value of a gather in mode 'fill' left unsaid: NaN for
    floats, the most negative (signed) or largest (unsigned) integer, True."""
    dt = _np.dtype(dtype)
    if _np.issubdtype(dt, _np.inexact):
        return _np.nan
    if dt == _np.bool_:
        return True
    return _np.iinfo(dt).min if _np.issubdtype(dt, _np.signedinteger) else _np.iinfo(dt).max


def _filled(r, indices, n, at, fill_value):
    """r (a gather along one dimension of size n by indices, whose dimensions
    are r's from at) with fill_value where an index lies outside [-n, n)."""
    idx = asarray(indices)  # noqa: F821
    ok = logical_and(idx >= -n, idx < n)  # noqa: F821
    ok = reshape(ok, (1,) * at + tuple(idx.shape) +  # noqa: F821
                 (1,) * (len(r.shape) - at - len(idx.shape)))
    fill = _fill_default(r.dtype) if fill_value is None else fill_value
    return _where(broadcast_to(ok, r.shape), r, _np.asarray(fill, r.dtype))  # noqa: F821


@_at_once
def take(a, indices, axis=None, mode=None, fill_value=None, **kwargs):
    """jnp.take: the op table's take, but with mode='clip' a negative index
    clamps to 0 as JAX's (its gather clamps without wrapping negatives;
    indexing, x[idx], wraps them first, as the op does); fill_value= the
    value of an index out of range (mode 'fill', JAX's default)."""
    if fill_value is not None and mode in (None, "fill"):
        if axis is None:
            a, axis = reshape(a, (-1,)), 0  # noqa: F821
        axis = axis % len(a.shape)
        r = _take_op(a, indices, axis=axis, mode="clip", **kwargs)
        return _filled(r, indices, a.shape[axis], axis, fill_value)
    if mode == "clip":
        if isinstance(indices, (numbers.Integral, list, tuple, _np.ndarray, _np.generic)):
            indices = _np.maximum(_np.asarray(indices), 0)
        else:
            indices = maximum(indices, 0)  # noqa: F821
    return _take_op(a, indices, axis=axis, mode=mode, **kwargs)


_concatenate_op = concatenate  # noqa: F821 (the op table's: at most 64 operands)


def concatenate(arrays, axis=0, dtype=None, **kwargs):
    """jnp.concatenate: the arrays joined along axis (axis=None: raveled
    first, as numpy's); more than the op's 64 operands are joined in groups
    of 64, then the groups; dtype= casts the operands."""
    arrays = tuple(arrays)
    if dtype is not None:
        arrays = tuple(astype(asarray(a), dtype) for a in arrays)  # noqa: F821
    if axis is None:
        arrays, axis = tuple(reshape(a, (-1,)) for a in arrays), 0  # noqa: F821
    if len(arrays) > 64:
        arrays = tuple(concatenate(arrays[i:i + 64], axis=axis, **kwargs)
                       for i in range(0, len(arrays), 64))
    return _concatenate_op(arrays, axis=axis, **kwargs)


@_at_once
def stack(arrays, axis=0):
    """jnp.stack: the arrays joined along a new axis (expand_dims, then
    concatenate; their shardings must agree, as concatenate asks)."""
    arrays = list(arrays)
    if not arrays:
        raise ValueError("need at least one array to stack")
    typed = [a for a in arrays if hasattr(a, "shape")]
    if len(typed) < len(arrays):  # Python numbers: weakly typed, of the arrays' dtype
        arrays = [a if hasattr(a, "shape") else
                  asarray(a, dtype=typed[0].dtype if typed and isinstance(  # noqa: F821
                      a, (bool, numbers.Number)) else None) for a in arrays]
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
    return _constrain(astype(_lin(start, stop, num, endpoint, ct), dtype), out_sharding)  # noqa


def _lin(start, stop, num, endpoint, ct):
    """JAX's linspace in ct along a new first axis: start * (1 - t) + stop *
    t for t = i / div, then stop itself with endpoint ([start] for num 1);
    start and stop numbers, or arrays of ct (broadcast together)."""
    shape = tuple(_np.broadcast_shapes(_np.shape(start), _np.shape(stop)))

    def row(v):  # v as the first row of the result, (1, *shape)
        if isinstance(v, numbers.Number):
            return full((1,) + shape, v, ct)  # noqa: F821
        return reshape(broadcast_to(v, shape), (1,) + shape)  # noqa: F821
    if num <= 1:  # [start], or nothing
        return row(start) if num == 1 else zeros((0,) + shape, ct)  # noqa: F821
    div = num - 1 if endpoint else num
    t = arange(div, dtype=ct) / div  # noqa: F821
    t = reshape(t, (div,) + (1,) * len(shape)) if shape else t  # noqa: F821
    out = start * (1 - t) + stop * t
    return concatenate((out, row(stop))) if endpoint else out  # noqa: F821


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


_reshape_op = reshape  # noqa: F821 (the op table's: C order)


def reshape(a, shape, order="C", *, copy=None, out_sharding=None):
    """jnp.reshape: a in shape (one -1 inferred), its elements read in C
    (row-major) or 'F' (column-major: a reshape of the transpose into the
    reversed shape, transposed back, as JAX's) order. out_sharding= the
    result's sharding; as JAX's reshape rule, it cannot be unreduced unless
    a is, over the same axes."""
    if order not in ("C", "F"):
        if order == "A":
            raise NotImplementedError("np.reshape order=A is not implemented.")
        raise ValueError(f"Unexpected value for 'order' argument: {order}.")
    shape = (int(shape),) if _np.ndim(shape) == 0 else tuple(int(d) for d in shape)
    if out_sharding is None:
        return _reshape_at_once(a, shape, order, None)
    spec = getattr(out_sharding, "spec", out_sharding)
    typ = getattr(a, "type", None)
    a_u = _unreduced_of(a)
    if a_u and a_u != spec.unreduced:
        raise ValueError(f"out_sharding passed to reshape must be unreduced over the same mesh "
                         f"axes as operand. Got out_sharding: {spec} and operand type: {typ}")
    if not a_u and spec.unreduced:
        raise ValueError(f"out_sharding passed to `reshape` cannot contain unreduced axes. Got "
                         f"{out_sharding}")
    return _full_spec(_reshape_at_once(a, shape, order, out_sharding))


@_at_once
def _reshape_at_once(a, shape, order, out_sharding):
    kw = {} if out_sharding is None else {"out_sharding": out_sharding}
    if order == "C":
        return _reshape_op(a, shape, **kw)
    if out_sharding is not None:
        from ._core import NamedSharding, P
        spec = getattr(out_sharding, "spec", out_sharding)
        entries = tuple(spec) + (None,) * (len(shape) - len(spec))
        rev = P(*entries[::-1], unreduced=spec.unreduced)
        kw["out_sharding"] = NamedSharding(out_sharding.mesh, rev) \
            if isinstance(out_sharding, NamedSharding) else rev
    return transpose(_reshape_op(transpose(a), shape[::-1], **kw))  # noqa: F821


def ravel(a, order="C", *, out_sharding=None):
    """jnp.ravel: reshape(a, (size,), order, out_sharding=) (JAX's reshape
    rule decides the sharding)."""
    if order == "K":
        raise NotImplementedError("Ravel not implemented for order='K'.")
    return reshape(a, (math.prod(_np.shape(a) if not hasattr(a, "shape") else a.shape),), order,
                   out_sharding=out_sharding)


_broadcast_to_op = broadcast_to  # noqa: F821 (the op table's: no out_sharding)


def broadcast_to(array, shape, *, out_sharding=None):
    """jnp.broadcast_to: array broadcast to shape; out_sharding= (a P or a
    NamedSharding) its sharding, which must keep array's sharded
    dimensions (JAX's lax.broadcast_to check: else ValueError)."""
    if out_sharding is None:
        return _broadcast_to_op(array, shape)
    return _full_spec(_broadcast_to_sharded(array, shape, out_sharding))


@_at_once
def _broadcast_to_sharded(array, shape, out_sharding):
    from ._core import P
    shape = (int(shape),) if _np.ndim(shape) == 0 else tuple(int(d) for d in shape)
    spec = getattr(out_sharding, "spec", out_sharding)
    ashape = tuple(_np.shape(array)) if not hasattr(array, "type") else tuple(array.shape)
    aspec = list(_spec_of_type(array.type) or ()) if hasattr(array, "type") else []
    aspec += [None] * (len(ashape) - len(aspec))
    out = list(spec) + [None] * (len(shape) - len(spec))
    nlead = len(shape) - len(ashape)
    if nlead < 0 or not builtins.all(d in (1, n) for d, n in zip(ashape, shape[nlead:])) or \
            not builtins.all(a in (None, o) for a, o in zip(aspec, out[nlead:])):
        atype = array.type if hasattr(array, "type") else _short_type(
            _jax_dtype(_np.asarray(array).dtype), ashape)
        dt = atype[:atype.index("[")]
        dims = ",".join(f"{n}@{o}" if isinstance(o, str) else f"{n}@({','.join(o)})" if o
                        else str(n) for n, o in zip(shape, out))
        raise ValueError(f"Incompatible types for broadcasting: input type={atype} and "
                         f"requested type={dt}[{dims}]")
    return reshard(_broadcast_to_op(array, shape), P(*out, unreduced=spec.unreduced))  # noqa


@_at_once
def swapaxes(a, axis1, axis2):
    """jnp.swapaxes: a transpose exchanging two axes."""
    n = len(a.shape)
    for ax in (axis1, axis2):
        if not -n <= ax < n:
            raise ValueError(f"axis {ax} is out of bounds for array of dimension {n}")
    perm = list(range(n))
    perm[axis1], perm[axis2] = perm[axis2], perm[axis1]
    return transpose(a, tuple(perm))  # noqa: F821


@_at_once
def moveaxis(a, source, destination):
    """jnp.moveaxis: a transpose moving axis source to destination (ints,
    or sequences of them: each source to its destination, the other axes
    in order, as numpy's)."""
    n = len(a.shape)
    srcs = [source] if isinstance(source, numbers.Integral) else list(source)
    dsts = [destination] if isinstance(destination, numbers.Integral) else list(destination)
    if len(srcs) != len(dsts):
        raise ValueError("Inconsistent number of elements: {} vs {}".format(len(srcs),
                                                                            len(dsts)))
    srcs, dsts = [int(d) % n for d in srcs], [int(d) % n for d in dsts]
    perm = [d for d in range(n) if d not in srcs]
    for dst, src in sorted(zip(dsts, srcs)):
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


def _split(op, ary, indices_or_sections, axis):
    """JAX's _split: static slices along axis, at the given indices, or in
    k sections (for array_split the first n % k of them one longer; for
    split a ValueError when k does not divide the axis)."""
    n = ary.shape[axis]
    if isinstance(indices_or_sections, (tuple, list)) or _np.ndim(indices_or_sections) > 0:
        cuts = [int(c) for c in _np.asarray(indices_or_sections).reshape(-1)]
    else:
        k = int(indices_or_sections)
        if k < 0:
            raise ValueError("number sections must be larger than 0.")
        part, r = builtins.divmod(n, k)  # k == 0: ZeroDivisionError, as JAX's
        if r and op == "split":
            raise ValueError(f"array split does not result in an equal division: rest is {r}")
        cuts = _np.cumsum([part + 1] * r + [part] * (k - r))[:-1].tolist()
    bounds = [0] + cuts + [n]
    lead = (builtins.slice(None),) * (axis % len(ary.shape))  # (slice: the op here)
    return [ary[lead + (builtins.slice(a, builtins.max(a, b)),)]
            for a, b in zip(bounds, bounds[1:])]


_split_at_once = _at_once(_split)


def split(ary, indices_or_sections, axis=0):
    """jnp.split: static slices along axis, at the given indices or in equal
    sections (JAX's ValueError when they do not divide the axis)."""
    ios = indices_or_sections  # numpy indices stay static (not uploaded by _at_once)
    return _split_at_once("split", ary, ios.tolist() if isinstance(ios, _np.ndarray) else ios,
                          axis)


def array_split(ary, indices_or_sections, axis=0):
    """jnp.array_split: split, but k sections of an axis k does not divide
    are allowed (the first n % k one longer)."""
    ios = indices_or_sections
    return _split_at_once("array_split", ary,
                          ios.tolist() if isinstance(ios, _np.ndarray) else ios, axis)


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


def quantile(a, q, axis=None, keepdims=False, method="linear"):
    """jnp.quantile: the sorted values around (n - 1) * q, by JAX's methods:
    'linear' (interpolated), 'lower', 'higher', 'midpoint', 'nearest' (the
    lower one at an exact half, as JAX's); a slice holding a NaN gives NaN,
    as JAX's. q a number or an array: static (numpy, a list, an Array
    outside a trace, fetched) picks the values by slices; traced, by takes
    of its positions."""
    if method not in ("linear", "lower", "higher", "midpoint", "nearest"):
        raise ValueError("method can only be 'linear', 'lower', 'higher', 'midpoint' or "
                         "'nearest'")
    q = _static_q(q)
    return _quantile(a, q, axis, keepdims, method)


def _static_q(q):
    """A quantile's q: traced as it is, else as Python numbers (nested
    lists), which a call at once keeps static (a numpy q would be uploaded);
    an Array outside a trace is fetched."""
    if isinstance(q, _Array) and getattr(_state, "builder", None) is None:
        q = q.to_numpy()
    if hasattr(q, "type"):
        return q
    q = _np.asarray(q, dtype=_np.float64)
    return q.tolist() if q.ndim else float(q)


@_at_once
def _quantile(a, q, axis, keepdims, method):
    if axis is None:  # over every element (keepdims: every dimension kept, of size 1)
        r = _quantile(reshape(a, (-1,)), q, 0, False, method)  # noqa: F821
        return reshape(r, tuple(r.shape) + (1,) * len(a.shape)) if keepdims else r  # noqa: F821
    rank = len(a.shape)
    axis = axis % rank
    if not _np.issubdtype(a.dtype, _np.floating):
        a = astype(a, _np.float32)  # noqa: F821
    a = _where(any(isnan(a), axis=axis, keepdims=True), _np.float32(_np.nan), a)  # noqa: F821
    s = sort(a, axis=axis)
    n = a.shape[axis]
    if hasattr(q, "type"):  # traced: the positions are values of the program
        return _quantile_traced(s, q, axis, keepdims, method)
    qs = _np.atleast_1d(_np.asarray(q, dtype=_np.float64))
    outs = []
    for qv in qs.ravel():
        pos = (n - 1) * float(qv)
        lo, hi = int(math.floor(pos)), int(math.ceil(pos))
        at = (builtins.slice(None),) * axis
        vlo = s[at + (builtins.slice(lo, lo + 1),)]
        vhi = s[at + (builtins.slice(hi, hi + 1),)]
        if hi == lo or method == "lower" or (method == "nearest" and pos - lo <= 0.5):
            v = vlo
        elif method in ("higher", "nearest"):
            v = vhi
        elif method == "midpoint":
            v = (vlo + vhi) * 0.5
        else:
            v = vlo + (vhi - vlo) * (pos - lo)
        outs.append(v if keepdims else squeeze(v, axis))  # noqa: F821
    if _np.ndim(q) == 0:
        return outs[0]
    r = stack(outs)
    return reshape(r, qs.shape + tuple(r.shape[1:])) if qs.ndim > 1 else r  # noqa: F821


def _quantile_traced(s, q, axis, keepdims, method):
    """quantile's values at a traced q (JAX's: the sorted s taken at the
    floor and ceiling of (n - 1) * q, weighted), q's dimensions first."""
    n = s.shape[axis]
    qshape = tuple(q.shape)
    pos = reshape(astype(q, _np.float32), (-1,)) * _np.float32(n - 1)  # noqa: F821
    low, high = floor(pos), ceil(pos)  # noqa: F821
    w = pos - low
    idx = [clip(astype(v, _np.int32), 0, n - 1) for v in (low, high)]  # noqa: F821
    vlo, vhi = (moveaxis(take(s, i, axis=axis), axis, 0) for i in idx)
    w = reshape(w, (-1,) + (1,) * (len(s.shape) - 1))  # noqa: F821
    if method == "lower":
        v = vlo
    elif method == "higher":
        v = vhi
    elif method == "nearest":
        v = _where(broadcast_to(w <= 0.5, vlo.shape), vlo, vhi)  # noqa: F821
    elif method == "midpoint":
        v = (vlo + vhi) * 0.5
    else:
        v = vlo * (1 - w) + vhi * w
    rest = tuple(v.shape[1:])
    if keepdims:
        rest = rest[:axis] + (1,) + rest[axis:]
    return reshape(v, qshape + rest)  # noqa: F821


def percentile(a, q, axis=None, keepdims=False, method="linear", *, out_sharding=None):
    """jnp.percentile: quantile of q / 100; with out_sharding= computed in
    auto_axes and laid out as it says, as JAX's."""
    q = _static_q(q)
    q = q / 100 if hasattr(q, "type") else (_np.asarray(q, dtype=_np.float64) / 100).tolist()
    return _percentile(a, q, axis, keepdims, method, out_sharding)


@_at_once
def _percentile(a, q, axis, keepdims, method, out_sharding):
    def f(a):
        return quantile(a, q, axis=axis, keepdims=keepdims, method=method)
    return f(a) if out_sharding is None else _auto(f, out_sharding)(a)


def _auto(f, out_sharding):
    """f as JAX's auto_axes(f, out_sharding=) computes it: on its operand
    replicated (in a jit), the result laid out as out_sharding says."""
    return lambda x: reshard(f(_unshard(x)), out_sharding)  # noqa: F821


@_at_once
def median(a, axis=None, keepdims=False):
    """jnp.median: quantile 0.5 by the midpoint method, as JAX's."""
    return quantile(a, 0.5, axis=axis, keepdims=keepdims, method="midpoint")


__all__ += ["nansum", "nanmean", "nanmax", "nanmin", "quantile", "percentile", "median"]

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_einsum_op = einsum  # noqa: F821 (the op table's: one or two operands)


def _einsum_ellipsis(spec, operands):
    """spec with each '...' written out in letters it does not use, as
    numpy's broadcasting reads it: an operand's ellipsis dimensions are the
    rightmost of the longest; one of size 1 against a larger one is
    squeezed away (broadcast); an implicit output puts them first. Returns
    (spec, operands)."""
    ins, out = spec.split("->") if "->" in spec else (spec, None)
    ins = ins.split(",")
    if len(ins) != len(operands):
        return spec, operands
    used = set(spec)
    free = [ch for ch in _LETTERS if ch not in used]
    nells = [len(op.shape) - (len(sub) - 3) if "..." in sub else 0
             for sub, op in zip(ins, operands)]
    n = builtins.max(nells, default=0)
    if n > len(free):
        raise ValueError("einsum: too many dimensions under '...'")
    letters = free[:n]
    sizes = {}  # letter -> the largest size an operand gives it
    subs = []
    for sub, op, k in zip(ins, operands, nells):
        mine = letters[n - k:]
        subs.append(sub.replace("...", "".join(mine)))
        for ch, size in zip(mine, tuple(op.shape)[sub.index("..."):] if "..." in sub else ()):
            sizes[ch] = builtins.max(sizes.get(ch, 1), int(size))
    ops = list(operands)
    for j, (sub, op) in enumerate(zip(subs, operands)):  # size 1 against more: broadcast
        drop = [d for d, ch in enumerate(sub) if ch in letters and op.shape[d] == 1 and
                sizes[ch] > 1]
        if drop:
            ops[j] = squeeze(op, tuple(drop))  # noqa: F821
            subs[j] = "".join(ch for d, ch in enumerate(sub) if d not in drop)
    present = [ch for ch in letters if builtins.any(ch in sub for sub in subs)]
    if out is None:
        rest = "".join(subs)
        out = "".join(present) + "".join(sorted(c for c in set(rest) if c not in letters and
                                                rest.count(c) == 1))
    else:
        out = out.replace("...", "".join(present))
    return ",".join(subs) + "->" + out, ops


def einsum(subscripts, *operands, out_sharding=None, **kwargs):
    """jnp.einsum; '...' as numpy's (written out in unused letters, size-1
    dimensions broadcast); with more than two operands, contracted pairwise
    from the left (each intermediate keeps the indices later operands or the
    result still need), the last contraction taking out_sharding. Given an
    out_sharding (not unreduced), the contractions of more than two operands
    run under auto_axes over the mesh's Explicit axes, as JAX's: the
    intermediates' layouts are the service's, the result out_sharding's."""
    _canonicalize_sharding(out_sharding, "einsum")
    kwargs.pop("precision", None)  # (XLA's CPU products are full precision)
    kwargs.pop("_use_xeinsum", None)
    kwargs.pop("optimize", None)  # (the order of contraction: from the left here)
    operands = _preferred(operands, kwargs.pop("preferred_element_type", None))
    subscripts = subscripts.replace(" ", "")
    if "..." in subscripts:
        subscripts, operands = _einsum_ellipsis(subscripts, operands)
    if len(operands) <= 2:
        return _einsum_op(subscripts, *operands, out_sharding=out_sharding, **kwargs)
    spec = subscripts
    ins, out = spec.split("->") if "->" in spec else (spec, None)
    ins = ins.split(",")
    if len(ins) != len(operands):
        raise ValueError(f"einsum: {len(ins)} index groups for {len(operands)} operands")
    if out is None:  # numpy's implicit output: the indices seen once, sorted
        out = "".join(sorted(c for c in set("".join(ins)) if "".join(ins).count(c) == 1))
    spec = getattr(out_sharding, "spec", out_sharding)
    if spec is not None and not spec.unreduced:
        from ._trace import auto_axes
        mesh = getattr(out_sharding, "mesh", None) or _core_context_mesh()
        axes = mesh.explicit_axes if mesh is not None else ()
        if axes:
            def chain(*ops):
                return einsum(f"{','.join(ins)}->{out}", *ops, **kwargs)
            return auto_axes(chain, axes=axes, out_sharding=out_sharding)(*operands)
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
def tensordot(a, b, axes=2, *, precision=None, preferred_element_type=None,
              out_sharding=None):
    """jnp.tensordot: an einsum over the paired axes (axes: the last/first
    n, or two sequences); out_sharding= the result's sharding (einsum's)."""
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
    return einsum(f"{''.join(la)},{''.join(lb)}->{''.join(out)}", a, b,
                  preferred_element_type=preferred_element_type, out_sharding=out_sharding)


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
    if isinstance(obj, (list, tuple)) and obj and _holds_arrays(obj):
        # [x.sum(), 1.0]: its entries stacked (the others of the traced ones' dtype)
        dt = dtype or next(_to_device(e).dtype for e in obj if _holds_arrays([e]))
        return stack([_to_device(e, dt) for e in obj])  # noqa: F821
    a = _np.asarray(obj, dtype=dtype)
    if dtype is None:  # JAX's default dtypes (x64 off)
        a = a.astype(_jax_dtype(a.dtype), copy=False)
    b = getattr(_state, "builder", None)
    if b is None:
        mesh = get_mesh()
        if mesh is None:
            return a
        from ._core import P, device_put
        return device_put(a, P())
    from ._trace import _constant
    return _constant(a)


def _holds_arrays(seq):
    """A list or tuple holds an Array or a traced value (at any depth)."""
    from ._core import Array
    return builtins.any(isinstance(e, Array) or hasattr(e, "name") and hasattr(e, "type") or
                        isinstance(e, (list, tuple)) and _holds_arrays(e) for e in seq)


def array(object, dtype=None, copy=True, order=None, ndmin=0, *, device=None,
          out_sharding=None):
    """jnp.array: a numpy value (list, scalar, ndarray) as an array, with
    JAX's default dtypes (float32, int32); see _to_device for where it
    lives. An array given is returned (as dtype). device= or out_sharding=
    (a NamedSharding, or a PartitionSpec over the context mesh): its
    sharding, as device_put's."""
    if device is not None and out_sharding is not None:
        raise ValueError("Only one of `device` or `out_sharding` can be set.")
    if ndmin and not hasattr(object, "type") and not _holds_arrays([object]):
        object = _np.array(object, ndmin=ndmin)
    elif ndmin and len(object.shape) < ndmin:
        object = reshape(object, (1,) * (ndmin - len(object.shape)) + tuple(object.shape))  # noqa
    sh = device if device is not None else out_sharding
    if sh is not None and getattr(_state, "builder", None) is None and \
            not hasattr(object, "type") and not (isinstance(object, (list, tuple)) and
                                                 _holds_arrays(object)):
        a = _np.asarray(object, dtype=dtype)
        return _full_spec(_device_put(a if dtype is not None else a.astype(_jax_dtype(a.dtype)),
                                      sh))
    x = _to_device(object, dtype)
    return x if sh is None else _full_spec(_device_put(x, sh))


def _full_spec(x):
    """x (an Array) with one spec entry per dimension on a mesh with
    Explicit axes, as JAX's arrays made with out_sharding= are typed."""
    from ._core import Array, Explicit
    if isinstance(x, Array) and Explicit in x.sharding.mesh.axis_types:
        x._full_spec = True
    return x


def asarray(a, dtype=None, order=None, *, copy=None, device=None, out_sharding=None):
    """jnp.asarray: as jnp.array."""
    return array(a, dtype, device=device, out_sharding=out_sharding)


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
def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """jnp.isclose, as JAX's: |a - b| <= atol + rtol * |b| for finite values,
    equal infinities close, NaNs unequal (equal to each other with
    equal_nan); integers compared as float32."""
    a, b = asarray(a), asarray(b)  # noqa: F821
    if not _np.issubdtype(_np.result_type(a.dtype, b.dtype), _np.inexact):
        a, b = astype(a, _np.float32), astype(b, _np.float32)  # noqa: F821
    out = less_equal(abs(a - b), atol + rtol * abs(b))  # noqa: F821
    a_inf, b_inf = isinf(a), isinf(b)
    out = logical_and(out, logical_not(logical_or(a_inf, b_inf)))  # noqa: F821
    out = logical_or(out, logical_and(logical_and(a_inf, b_inf), equal(a, b)))  # noqa: F821
    a_nan, b_nan = isnan(a), isnan(b)
    out = logical_and(out, logical_not(logical_or(a_nan, b_nan)))  # noqa: F821
    if equal_nan:
        out = logical_or(out, logical_and(a_nan, b_nan))  # noqa: F821
    return out


@_at_once
def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """jnp.allclose: all of isclose, a bool array of rank 0."""
    return all(isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan))  # noqa: F821


def array_equal(a1, a2, equal_nan=False):
    """jnp.array_equal: equal shapes and elements (static shapes: False at
    once when they differ); with equal_nan, NaNs equal each other."""
    if tuple(shape(a1)) != tuple(shape(a2)):
        return False
    return _all_equal(a1, a2, bool(equal_nan))


@_at_once
def _all_equal(a1, a2, equal_nan=False):
    eq = equal(a1, a2)  # noqa: F821
    if equal_nan:
        eq = logical_or(eq, logical_and(isnan(a1), isnan(a2)))  # noqa: F821
    return all(eq)  # noqa: F821



__all__ += ["eye", "identity", "linspace", "tril", "triu", "ravel", "swapaxes", "moveaxis",
            "vstack", "hstack", "split", "array_split", "log2", "log10", "exp2", "reciprocal",
            "einsum", "outer", "tensordot", "inner", "linalg", "array", "asarray", "shape", "ndim",
            "size", "isclose", "allclose", "array_equal", "ndarray"]


from ._core import PublicArray as ndarray  # noqa: E402 (jnp.ndarray: traced values too)

class _ScalarMeta(type):
    """JAX's scalar types (jnp.float32, ...): a dtype wherever numpy's type is
    one (a subclass of it: np.dtype(jnp.float32) is float32, and it equals
    and hashes as np.float32), and callable on a traced value or an Array,
    which it casts (jnp.float32(step) in a jit), as on anything else,
    which numpy's type converts."""

    def __call__(cls, x=0):
        if hasattr(x, "type") or isinstance(x, _Array):
            return astype(x, cls._np)  # noqa: F821 (the op table's)
        return cls._np(x)

    def __eq__(cls, other):
        return other is cls or other is cls._np

    def __hash__(cls):
        return hash(cls._np)

    def __instancecheck__(cls, v):
        return isinstance(v, cls._np)

    def __repr__(cls):
        return f"<class 'jax.numpy.{cls._np.__name__}'>"


def _scalar_type(t):
    return _ScalarMeta(t.__name__, (t,), {"_np": t, "__module__": __name__})


# jnp's dtypes (astype and dtype= take them) and numpy's constants. The service's
# arrays are of float16/32/64, int32/64, uint8 and bool_; the other integer types
# are there for dtype queries (promote_types, iinfo) and refused at upload
float16, float32, float64 = (_scalar_type(t) for t in (_np.float16, _np.float32, _np.float64))
int32, int64, uint8, bool_ = (_scalar_type(t) for t in (_np.int32, _np.int64, _np.uint8,
                                                        _np.bool_))
int8, int16, uint16, uint32, uint64 = (_scalar_type(t) for t in (
    _np.int8, _np.int16, _np.uint16, _np.uint32, _np.uint64))
pi, e, inf, nan, newaxis = _np.pi, _np.e, _np.inf, _np.nan, None
euler_gamma = _np.euler_gamma
# numpy's dtype hierarchy and queries, as jnp re-exports them (jnp.issubdtype(
# x.dtype, jnp.floating), jnp.finfo(x.dtype).eps): shmap's dtypes are numpy's
generic, number, inexact, floating, integer = (_np.generic, _np.number, _np.inexact,
                                               _np.floating, _np.integer)
signedinteger, unsignedinteger = _np.signedinteger, _np.unsignedinteger
dtype, finfo, iinfo, issubdtype, can_cast = (_np.dtype, _np.finfo, _np.iinfo, _np.issubdtype,
                                             _np.can_cast)


def isscalar(element):
    """jnp.isscalar: a Python or numpy scalar, or an array of no dimension
    (JAX's, which counts 0-d arrays too)."""
    if _np.isscalar(element):
        return True
    shape = getattr(element, "shape", None)
    return shape is not None and len(shape) == 0 and hasattr(element, "dtype")


def iscomplexobj(x):
    """jnp.iscomplexobj: shmap's arrays are never complex."""
    return _np.iscomplexobj(x) if isinstance(x, (_np.ndarray, _np.generic, complex)) else False


def isdtype(dt, kind):
    """jnp.isdtype (the array API's): kind a dtype, a kind name ('bool',
    'signed integer', 'unsigned integer', 'integral', 'real floating',
    'complex floating', 'numeric') or a tuple of them."""
    if isinstance(kind, tuple):
        return builtins.any(isdtype(dt, k) for k in kind)
    d = _np.dtype(dt)
    if not isinstance(kind, str):
        return d == _np.dtype(kind)
    kinds = {"bool": "b", "signed integer": "i", "unsigned integer": "u", "integral": "iu",
             "real floating": "f", "complex floating": "c", "numeric": "iufc"}
    if kind not in kinds:
        raise ValueError(f"Unrecognized kind: {kind!r}")
    return d.kind in kinds[kind]

__all__ += ["square", "clip", "full_like", "zeros_like", "ones_like", "flip", "stack",
            "float16", "float32", "float64", "int32", "int64", "uint8", "bool_", "int8", "int16",
            "uint16", "uint32", "uint64", "pi", "e",
            "inf", "nan", "newaxis", "euler_gamma", "generic", "number", "inexact", "floating",
            "integer", "signedinteger", "unsignedinteger", "dtype", "finfo", "iinfo",
            "issubdtype", "can_cast", "isscalar", "iscomplexobj", "isdtype"]


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
    # |d| as maximum(d, -d): its derivative at d = 0 is 0 (maximum's ties share), so
    # the derivative at x1 == x2 is 1/2 each, JAX's logaddexp's (abs's would be 1 there)
    return m + log1p(exp(-maximum(d, -d)))  # noqa: F821


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
    """The n-th differences along axis: a[1:] - a[:-1], n times (of bools,
    not_equal, as JAX's)."""
    ax = axis % len(a.shape)
    every = (builtins.slice(None),) * ax
    for _ in range(n):
        hi, lo = a[every + (builtins.slice(1, None),)], a[every + (builtins.slice(None, -1),)]
        a = not_equal(hi, lo) if _np.dtype(a.dtype) == _np.bool_ else hi - lo  # noqa: F821
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


def repeat(a, repeats, axis=None, *, total_repeat_length=None, out_sharding=None):
    """jnp.repeat: each entry repeated along axis (the flattened array when
    None): an int number of times as a broadcast and a reshape; per entry
    (a sequence, or traced with total_repeat_length) as a take of the
    positions, total_repeat_length of them when given (JAX's: the rest cut
    off, or the final value repeated). numpy repeats are static, as JAX's.
    out_sharding= the result's sharding."""
    if isinstance(repeats, _np.ndarray):
        repeats = int(repeats) if repeats.ndim == 0 else repeats.tolist()
    if out_sharding is None:
        return _repeat(a, repeats, axis, total_repeat_length)
    return _at_once(_auto(lambda x: _repeat(x, repeats, axis, total_repeat_length),
                          out_sharding))(a)


@_at_once
def _repeat(a, repeats, axis, total_repeat_length):
    if axis is None:
        a, axis = reshape(a, (-1,)), 0  # noqa: F821
    ax = axis % len(a.shape)
    n = a.shape[ax]
    if isinstance(repeats, numbers.Integral) and total_repeat_length is None:
        pass  # the broadcast below
    elif not hasattr(repeats, "name"):  # static: positions computed here
        reps = _np.broadcast_to(_np.asarray(repeats, _np.int64).ravel(), (n,))
        pos = _np.repeat(_np.arange(n), reps)
        if total_repeat_length is not None:
            t = int(total_repeat_length)
            pos = pos[:t] if len(pos) >= t else _np.concatenate(
                [pos, _np.full(t - len(pos), n - 1 if n else 0)])
        return take(a, pos.astype(_np.int32), axis=ax)
    elif total_repeat_length is None:
        raise ValueError("When jit-compiling jnp.repeat, the total number of repeats must be "
                         "static. To fix this, either specify a static value for `repeats`, or "
                         "pass a static value to `total_repeat_length`.")
    else:  # traced repeats: the entry whose running total first passes each position
        ends = _cumsum_op(broadcast_to(reshape(repeats, (-1,)), (n,)))  # noqa: F821
        pos = searchsorted(ends, arange(int(total_repeat_length)), side="right")  # noqa: F821
        return take(a, minimum(pos, n - 1), axis=ax)  # noqa: F821
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


def empty(shape, dtype=None, *, device=None, out_sharding=None):
    """zeros (the service's arrays always have values)."""
    return zeros(shape, dtype=dtype, device=device, out_sharding=out_sharding)  # noqa: F821


def empty_like(a, dtype=None, shape=None, *, device=None, out_sharding=None):
    return zeros_like(a, dtype, shape, device=device, out_sharding=out_sharding)


__all__ += ["absolute", "fabs", "positive", "amax", "amin", "around", "rint", "true_divide",
            "remainder", "trunc", "deg2rad", "rad2deg", "radians", "degrees", "hypot",
            "logaddexp", "logaddexp2", "sinc", "heaviside", "fmax", "fmin", "nan_to_num", "ptp",
            "count_nonzero", "average", "diff", "atleast_1d", "atleast_2d", "atleast_3d",
            "fliplr", "flipud", "repeat", "diagonal", "trace", "diag", "vdot",
            "broadcast_arrays", "meshgrid", "column_stack", "dstack", "hsplit", "vsplit",
            "nanvar", "nanstd", "tri", "empty", "empty_like"]


# ---- more of jnp: sets, searches, histograms, polynomials, index helpers ---------------

from ._core import ConcretizationTypeError, InvalidArgument  # noqa: E402

_this = __import__("sys").modules[__name__]
_conv_error_doc = "Abstract tracer value encountered where concrete value is expected: "


from ._core import _short_type  # noqa: E402,F401 (scipy.special's too)


def _concrete(a, context, what):
    """JAX's core.concrete_or_error(None, a, context): nothing outside a
    trace for Arrays and numpy values (a: one or a tuple); inside a trace
    JAX's ConcretizationTypeError (what: the traced value's dtype and shape,
    as JAX's message names it)."""
    from ._core import Array
    if getattr(_state, "builder", None) is not None or not builtins.all(
            isinstance(x, (Array, _np.ndarray)) for x in (a if isinstance(a, tuple) else (a,))):
        raise ConcretizationTypeError(f"{_conv_error_doc}traced array with shape {what}\n"
                                      f"{context}")


def _concrete_value(a, fn, context, what):
    """fn(m, *a) computed now, a numpy value, for a (an Array or a numpy
    array, or a tuple of them) outside a trace, as JAX computes it eagerly
    (m: numpy for numpy arrays with no mesh set, else this module, in one
    program); inside a trace JAX's ConcretizationTypeError (_concrete)."""
    args = a if isinstance(a, tuple) else (a,)
    _concrete(args, context, what)
    args = tuple(_to_device(x) if isinstance(x, _np.ndarray) else x for x in args)
    if builtins.all(isinstance(x, _np.ndarray) for x in args):  # no mesh set
        return _np.asarray(fn(_np, *args))
    return _np.asarray(_eager(lambda *xs: fn(_this, *xs), args, {}))


def _static_int(a, count, context, what):
    """A static size a function needs and was not given: counted now
    (count(m, *a), _concrete_value), as JAX computes it eagerly; inside a
    trace JAX's ConcretizationTypeError."""
    return int(_concrete_value(a, count, context, what))


def _is_jit_sharded(*xs):
    """Inside a jit body, one of xs is sharded (its type has a '@')."""
    b = getattr(_state, "builder", None)
    return b is not None and b.kind == "jit" and builtins.any(
        hasattr(x, "type") and "@" in x.type for x in xs)


def _scatter_add_rep(base, idx, upd):
    """base.at[idx].add(upd) with a replicated result: in a jit over sharded
    indices JAX's scatter rule asks for out_sharding=, so P() is given."""
    from ._core import P
    if _is_jit_sharded(idx, upd):
        return base.at[idx].add(upd, out_sharding=P())
    return base.at[idx].add(upd)


def _gather(arr, idx):
    """arr[idx] (a take along the first axis, clamped), laid out as idx when
    it is sharded in a jit (JAX's gather rule asks for out_sharding=)."""
    if _is_jit_sharded(idx):
        return arr.at[idx].get(out_sharding=_spec_of_type(idx.type))
    return arr[idx]


def _unshard(x, axis=None):
    """x with axis (every axis when None) no longer sharded, in a jit (for
    the ops whose sharding rules refuse a sharded dimension: sort, uneven
    slices); x itself elsewhere."""
    if not _is_jit_sharded(x):
        return x
    from ._core import P
    spec = list(_spec_of_type(x.type) or ())
    spec += [None] * (len(x.shape) - len(spec))
    if axis is None:
        spec = []
    else:
        spec[axis % len(x.shape)] = None
    return reshard(x, P(*spec))  # noqa: F821


def _scalar(v, dtype):
    """A Python or numpy scalar as a rank-0 value of dtype (a traced value
    is returned as dtype)."""
    if hasattr(v, "shape") and not isinstance(v, (_np.ndarray, _np.generic)):
        return v if v.dtype == _np.dtype(dtype) else astype(v, dtype)  # noqa: F821
    if _np.ndim(v) == 0:
        return full((), _np.asarray(v).item(), dtype=dtype)  # noqa: F821
    return _to_device(_np.asarray(v), dtype)


def _inexact(dt):
    dt = _np.dtype(dt)
    return dt if _np.issubdtype(dt, _np.floating) else _np.dtype(_np.float32)


def _promote(*dts):
    """JAX's promotion of the dtypes here (x64 off): a float if any is one
    (the widest), else the widest integer; bool alone stays bool."""
    dts = [_np.dtype(d) for d in dts]
    fl = [d for d in dts if _np.issubdtype(d, _np.floating)]
    if fl:
        return builtins.max(fl, key=lambda d: d.itemsize)
    ints = [d for d in dts if _np.issubdtype(d, _np.integer)]
    return builtins.max(ints, key=lambda d: d.itemsize) if ints else _np.dtype(_np.bool_)


def _dtype_of(v):
    if hasattr(v, "dtype"):
        return _np.dtype(v.dtype)
    return _np.asarray(v).dtype if not isinstance(v, float) else _np.dtype(_np.float32)


def _lt_total(a, b):
    """a < b in sort order: NaN after every number (lax's sort comparator)."""
    if not _np.issubdtype(a.dtype, _np.floating):
        return less(a, b)  # noqa: F821
    return logical_or(less(a, b), logical_and(isnan(b), logical_not(isnan(a))))  # noqa: F821


def _le_total(a, b):
    """a <= b in sort order (NaN the largest, equal to itself)."""
    if not _np.issubdtype(a.dtype, _np.floating):
        return less_equal(a, b)  # noqa: F821
    return logical_or(less_equal(a, b), isnan(b))  # noqa: F821


@_at_once
def searchsorted(a, v, side="left", sorter=None, *, method="scan"):
    """jnp.searchsorted: where v's values go in the sorted 1-D a (side
    'left': before equal values, 'right': after them), int32; NaN sorts
    last, as JAX's comparator has it. Computed by comparing every pair
    (JAX's method='compare_all'; every method gives the same indices)."""
    if side not in ("left", "right"):
        raise ValueError(f"{side!r} is an invalid value for keyword 'side'. "
                         f"Expected one of ['left', 'right'].")
    if len(a.shape) != 1:
        raise ValueError("a should be 1-dimensional")
    dt = _promote(a.dtype, _dtype_of(v))
    if sorter is not None:
        a = a[sorter]
    a, v = astype(a, dt) if a.dtype != dt else a, _scalar(v, dt)  # noqa: F821
    vs = tuple(v.shape)
    ar = reshape(a, (a.shape[0],) + (1,) * len(vs))  # noqa: F821
    cmp = _lt_total(ar, v) if side == "left" else _le_total(ar, v)
    return sum(astype(cmp, _np.int32), axis=0)  # noqa: F821


@_at_once
def digitize(x, bins, right=False, *, method=None):
    """jnp.digitize: the bin of each x among 1-D monotonic bins (increasing
    or decreasing, decided on the values, as JAX's where), by searchsorted."""
    if len(bins.shape) != 1:
        raise ValueError(f"digitize: bins must be a 1-dimensional array; got bins={bins}")
    if bins.shape[0] == 0:
        return zeros_like(x, dtype=_np.int32)
    side = "left" if right else "right"
    up = searchsorted(bins, x, side=side)
    down = bins.shape[0] - searchsorted(flip(bins), x, side=side)
    return where(bins[-1] >= bins[0], up, down)  # noqa: F821


@_at_once
def interp(x, xp, fp, left=None, right=None, period=None):
    """jnp.interp as JAX computes it: i = clip(searchsorted(xp, x, 'right'),
    1, n - 1), fp[i-1] + (x - xp[i-1]) / dx * df (fp[i-1] where dx is
    below float spacing, so the gradient has no NaN); left/right (or
    'extrapolate'), period."""
    if tuple(xp.shape) != tuple(fp.shape) or len(xp.shape) != 1:
        raise ValueError("xp and fp must be one-dimensional arrays of equal size")
    dt = _inexact(_promote(_dtype_of(x), xp.dtype))
    x, xp, fp = _scalar(x, dt), astype(xp, dt), astype(fp, _inexact(fp.dtype))  # noqa: F821
    for s, name in ((left, "left"), (right, "right")):
        if isinstance(s, str) and s != "extrapolate":
            raise ValueError(f"the only valid string value of `{name}` is 'extrapolate', "
                             f"but got: {s!r}")
    if period is not None:
        if _np.ndim(period) != 0:
            raise ValueError(f"period must be a scalar; got {period}")
        period = builtins.abs(float(period))
        x, xp = mod(x, period), mod(xp, period)  # noqa: F821
        order = argsort(xp)
        xp, fp = xp[order], fp[order]
        xp = concatenate((xp[-1:] - period, xp, xp[:1] + period))  # noqa: F821
        fp = concatenate((fp[-1:], fp, fp[:1]))  # noqa: F821
    n = xp.shape[0]
    i = clip(searchsorted(xp, x, side="right"), 1, n - 1)
    xp_i, xp_im1 = _gather(xp, i), _gather(xp, i - 1)
    fp_i, fp_im1 = _gather(fp, i), _gather(fp, i - 1)
    df, dx, delta = fp_i - fp_im1, xp_i - xp_im1, x - xp_im1
    eps = float(_np.spacing(_np.finfo(dt).eps))
    dx0 = less_equal(abs(dx), eps)  # noqa: F821
    f = where(dx0, fp_im1, fp_im1 + (delta / where(dx0, 1, dx)) * df)  # noqa: F821
    if period is None and not isinstance(left, str):
        f = where(x < xp[0], fp[0] if left is None else left, f)  # noqa: F821
    if period is None and not isinstance(right, str):
        f = where(x > xp[-1], fp[-1] if right is None else right, f)  # noqa: F821
    return f


def _bincount_impl(x, weights, length, out_sharding):
    if x.dtype == _np.bool_:
        x = astype(x, _np.int32)  # noqa: F821
    if not _np.issubdtype(x.dtype, _np.integer):
        raise TypeError(f"x argument to bincount must have an integer type; got {x.dtype}")
    if len(x.shape) != 1:
        raise ValueError("only 1-dimensional input supported.")
    if weights is None:
        upd, dt = full(tuple(x.shape), 1, dtype=_np.int32), _np.int32  # noqa: F821
    else:
        if tuple(weights.shape) != tuple(x.shape):
            raise ValueError(f"type of weights must match type of x. Got typeof(x)={x.type} "
                             f"and typeof(weights)={weights.type}")
        upd, dt = weights, weights.dtype
    if out_sharding is not None:
        spec = getattr(out_sharding, "spec", out_sharding)
        mesh = getattr(out_sharding, "mesh", None) or getattr(_state.builder, "mesh", None)
        if tuple(spec) or spec.unreduced and spec.unreduced != set(mesh.axis_names):
            raise InvalidArgument("out_sharding passed to `jnp.bincount` can only be fully "
                                  "replicated or fully unreduced along all mesh axes")
        if spec.unreduced:
            return _bincount_unreduced(x, None if weights is None else upd, length, dt, mesh)
    base = zeros((length,), dtype=dt)  # noqa: F821
    idx = maximum(x, 0)  # noqa: F821 (JAX's clip(x, 0): negative values count in bin 0)
    if out_sharding is not None:
        return base.at[idx].add(upd, out_sharding=out_sharding)
    return _scatter_add_rep(base, idx, upd)


def _bincount_unreduced(x, weights, length, dt, mesh):
    """bincount unreduced over every mesh axis, as JAX's scatter-add with
    that out_sharding: each device's counts of its block of x (a shard_map;
    along an axis x is not sharded over, the first device's)."""
    from ._core import P
    from ._trace import shard_map
    from .lax import axis_index, pcast
    spec = _spec_of_type(x.type) or P(None)
    held = set(_spec_axes(spec))
    axes = tuple(mesh.axis_names)

    def body(xb, wb):
        wb = full(tuple(xb.shape), 1, dtype=dt) if wb is None else wb  # noqa: F821
        r = zeros((length,), dtype=dt).at[maximum(xb, 0)].add(wb)  # noqa: F821
        for a in axes:
            if a not in held:
                r = _where(axis_index(a) == 0, r, zeros((length,), dtype=dt))  # noqa: F821
        return pcast(r, axes, to="unreduced")

    if weights is not None:
        weights = reshard(weights, spec)  # noqa: F821
    return shard_map(body, mesh=mesh, in_specs=(spec, None if weights is None else spec),
                     out_specs=P(unreduced=set(axes)))(x, weights)


_bincount_at_once = _at_once(_bincount_impl)


def bincount(x, weights=None, minlength=0, *, length=None, out_sharding=None):
    """jnp.bincount: how often each value of the 1-D integer x occurs
    (weights: their sums), as a scatter-add into zeros(length) (negative
    values count in bin 0, those >= length are dropped, as JAX's). Inside
    a traced function length= is required (JAX's error); outside one it is
    max(minlength, max(x) + 1), counted first."""
    if length is None:
        length = builtins.max(int(minlength), _static_int(
            x, lambda m, x: m.maximum(m.max(x), -1) + 1 if x.shape[0] else 0,
            "The error occurred because of argument 'x' of jnp.bincount. To avoid this "
            "error, pass a static `length` argument.", _short_type(x.dtype, x.shape)))
    return _bincount_at_once(x, weights, int(length), out_sharding)


def _nonzero_impl(a, size, fill_value):
    if len(a.shape) == 0:
        raise ValueError("Calling nonzero on 0d arrays is not allowed. Use "
                         "jnp.atleast_1d(scalar).nonzero() instead.")
    shape = tuple(a.shape)
    mask = a if a.dtype == _np.bool_ else not_equal(a, 0)  # noqa: F821
    if math.prod(shape) == 0 or size == 0:
        return tuple(zeros((size,), dtype=_np.int32) for _ in shape)  # noqa: F821
    m = astype(reshape(mask, (-1,)), _np.int32)  # noqa: F821
    ones_ = full((m.shape[0],), 1, dtype=_np.int32)  # noqa: F821
    counts = _scatter_add_rep(zeros((size,), dtype=_np.int32), _cumsum_op(m), ones_)  # noqa
    flat = _cumsum_op(counts)  # noqa: F821 (the k-th nonzero's flat index; the end where none)
    strides = _np.cumprod(shape[::-1])[::-1] // _np.asarray(shape)
    out = tuple(mod(floor_divide(flat, int(st)), int(n))  # noqa: F821
                for st, n in zip(strides, shape))
    if fill_value is not None:
        fills = fill_value if isinstance(fill_value, tuple) else (fill_value,) * len(shape)
        if builtins.any(_np.shape(f) != () for f in fills):
            raise ValueError(f"fill_value must be a scalar or a tuple of length {len(shape)}; "
                             f"got {fill_value}")
        past = greater_equal(arange(size, dtype=_np.int32), sum(m))  # noqa: F821
        out = tuple(where(past, f, o) for f, o in zip(fills, out))  # noqa: F821
    return out


_nonzero_at_once = _at_once(_nonzero_impl)

_NONZERO_SIZE = ("The size argument of jnp.nonzero must be statically specified to use "
                 "jnp.nonzero within JAX transformations.")


def _size_of_nonzero(a, size):
    if size is None:
        return _static_int(a, lambda m, x: m.count_nonzero(x), _NONZERO_SIZE, "int32[]")
    return int(size)


def nonzero(a, *, size=None, fill_value=None):
    """jnp.nonzero: the indices of a's nonzero entries, one int32 array per
    dimension, by JAX's algorithm (a cumsum of a bincount of the mask's
    cumsum): the first size of them, the rest fill_value (0 by default).
    Inside a traced function size= is required (JAX's error)."""
    return _nonzero_at_once(a, _size_of_nonzero(a, size), fill_value)


def flatnonzero(a, *, size=None, fill_value=None):
    """jnp.flatnonzero: nonzero of ravel(a)."""
    return nonzero(ravel(a) if hasattr(a, "type") else _np.ravel(a), size=size,
                   fill_value=fill_value)[0]


@_at_once
def _argwhere_impl(a, size, fill_value):
    if len(a.shape) == 0:
        a = reshape(a, (1,))  # noqa: F821
        r = stack(_nonzero_impl(a, size, fill_value), axis=1)
        return r[:, :0]
    return stack(_nonzero_impl(a, size, fill_value), axis=1)


def argwhere(a, *, size=None, fill_value=None):
    """jnp.argwhere: the (size, ndim) int32 indices of a's nonzero entries
    (nonzero's, stacked as columns)."""
    return _argwhere_impl(a, _size_of_nonzero(a, size), fill_value)


def _run_starts(aux, equal_nan):
    """The mask of JAX's unique over sorted 1-D aux: True at the first of
    each run of equal values (NaNs one run with equal_nan)."""
    neq = not_equal(aux[1:], aux[:-1])  # noqa: F821
    if equal_nan and _np.issubdtype(aux.dtype, _np.floating):
        neq = logical_and(neq, logical_not(logical_and(isnan(aux[1:]), isnan(aux[:-1]))))  # noqa
    return concatenate((full((1,), True, dtype=_np.bool_), neq))  # noqa: F821


def _unique_impl(ar, return_index, return_inverse, return_counts, equal_nan, size, fill_value,
                 return_true_size=False):
    a = _unshard(reshape(ar, (-1,)))  # noqa: F821 (sort asks for an unsharded axis)
    n = a.shape[0]
    if n == 0:
        raise ValueError("jnp.unique of an empty array is not supported here")
    perm = argsort(a)
    aux = _gather(a, perm)
    mask = _run_starts(aux, equal_nan)
    ind = _nonzero_impl(mask, size, None)[0]
    result = _gather(aux, ind)
    if fill_value is not None:
        valid = less(arange(size, dtype=_np.int32), sum(astype(mask, _np.int32)))  # noqa: F821
        result = where(valid, result, _scalar(fill_value, result.dtype))  # noqa: F821
    ret = (result,)
    if return_index:
        ret += (_gather(perm, ind),)
    if return_inverse:
        imask = _cumsum_op(astype(mask, _np.int32)) - 1  # noqa: F821
        inv = zeros((n,), dtype=_np.int32)  # noqa: F821
        from ._core import P
        inv = inv.at[perm].set(imask, out_sharding=P()) if _is_jit_sharded(perm, imask) \
            else inv.at[perm].set(imask)
        ret += (inv,)
    if return_counts:
        idx = _nonzero_impl(mask, size + 1, None)[0]
        tail = idx[1:]
        idx = idx.at[1:].set(where(tail != 0, tail, n))  # noqa: F821
        ret += (diff(idx),)
    if return_true_size:  # JAX's, for its set operations: how many there are
        ret += (sum(astype(mask, _np.int32)),)  # noqa: F821
    return ret[0] if len(ret) == 1 else ret


_unique_at_once = _at_once(_unique_impl)


def _count_unique(m, x, equal_nan=True):
    if m is _np:
        return len(_np.unique(x, equal_nan=equal_nan))
    return sum(astype(_run_starts(sort(_unshard(ravel(x))), equal_nan), _np.int32))  # noqa: F821


def unique(ar, return_index=False, return_inverse=False, return_counts=False, axis=None, *,
           equal_nan=True, size=None, fill_value=None, sorted=True):
    """jnp.unique of the flattened array (axis=None, or a 1-D array): the
    sorted distinct values (NaNs one value with equal_nan), by JAX's
    algorithm (a stable sort, a mask of value changes, nonzero); the first
    size of them, the rest fill_value (by default the smallest value);
    return_index, return_inverse (of the flattened array) and
    return_counts. Inside a traced function size= is required (JAX's
    error)."""
    if axis is not None and len(ar.shape) != 1:
        raise NotImplementedError("jnp.unique with axis= is not supported here (1-D arrays "
                                  "or axis=None)")
    if size is None:
        what = _short_type(_np.bool_, (math.prod(ar.shape),))
        size = _static_int(ar, lambda m, x: _count_unique(m, x, equal_nan),
            "The error arose in jnp.unique(). To make jnp.unique() compatible with JIT and "
            "other transforms, you can specify a concrete value for the size argument, which "
            "will determine the output size.", what)
    return _unique_at_once(ar, bool(return_index), bool(return_inverse), bool(return_counts),
                           bool(equal_nan), int(size), fill_value)


@_at_once
def histogram(a, bins=10, range=None, weights=None, density=None):
    """jnp.histogram as JAX computes it: edges (bins given, or a static
    count over range / [min, max] by linspace), each value's bin by
    searchsorted 'right' (the last edge in the last bin), counts a
    scatter-add of weights (ones), float; density divides by the widths
    and the total. Returns (counts, edges)."""
    dt = _inexact(a.dtype)
    a = astype(a, dt)  # noqa: F821
    if weights is None:
        weights = ones_like(a)
    else:
        if tuple(weights.shape) != tuple(a.shape):
            raise ValueError("weights should have the same shape as a.")
        dt = _promote(dt, weights.dtype)
        a, weights = astype(a, dt), astype(weights, _inexact(weights.dtype))  # noqa: F821
    edges = _bin_edges(a, bins, range, dt)
    ne = edges.shape[0]
    flat = reshape(a, (-1,))  # noqa: F821
    idx = searchsorted(edges, flat, side="right")
    idx = where(flat == edges[-1], ne - 1, idx)  # noqa: F821
    # no out_sharding: JAX's scatter rule refuses sharded values in a jit
    counts = zeros((ne,), dtype=weights.dtype).at[idx].add(reshape(weights, (-1,)))[1:]  # noqa
    if density:
        counts = counts / diff(edges) / sum(counts)  # noqa: F821
    return counts, edges


@_at_once
def append(arr, values, axis=None):
    """jnp.append: concatenate, both flattened when axis is None."""
    if axis is None:
        return concatenate((reshape(arr, (-1,)), reshape(values, (-1,))), axis=0)  # noqa: F821
    return concatenate((arr, values), axis=axis)  # noqa: F821


def broadcast_shapes(*shapes):
    """jnp.broadcast_shapes: the shape shapes broadcast to (a tuple)."""
    return tuple(int(d) for d in _np.broadcast_shapes(*[
        (s,) if isinstance(s, numbers.Integral) else tuple(s) for s in shapes]))


@_at_once
def conj(x):
    """jnp.conj / conjugate: shmap's dtypes are real, so x itself."""
    return x


conjugate = conj


@_at_once
def copy(a, order=None):
    """jnp.copy: a new array of a's values (arrays are immutable)."""
    return where(True, a, a)  # noqa: F821


@_at_once
def permute_dims(a, axes=None):
    """jnp.permute_dims (the array API's transpose)."""
    return transpose(a, axes) if axes is not None else transpose(a)  # noqa: F821


@_at_once
def isposinf(x):
    """x == +inf (false for integers)."""
    if not _np.issubdtype(x.dtype, _np.floating):
        return full_like(x, False, dtype=_np.bool_)
    return equal(x, _np.inf)  # noqa: F821


@_at_once
def isneginf(x):
    """x == -inf (false for integers)."""
    if not _np.issubdtype(x.dtype, _np.floating):
        return full_like(x, False, dtype=_np.bool_)
    return equal(x, -_np.inf)  # noqa: F821


@_at_once
def signbit(x):
    """jnp.signbit: the sign bit, -0.0 included (x < 0, or x == 0 with
    1 / x < 0); without a bitcast op the sign of a NaN is not seen (False)."""
    if not _np.issubdtype(x.dtype, _np.floating):
        return less(x, 0)  # noqa: F821
    zero = equal(x, 0)  # noqa: F821
    return logical_or(less(x, 0), logical_and(zero, less(1 / where(zero, x, 1), 0)))  # noqa


@_at_once
def float_power(x, y):
    """jnp.float_power: power in the inexact dtype (float32 for integers,
    as JAX's without x64; numpy's is float64)."""
    dt = _inexact(_promote(_dtype_of(x), _dtype_of(y)))
    return power(_scalar(x, dt), _scalar(y, dt))  # noqa: F821


@_at_once
def fmod(x1, x2):
    """jnp.fmod: the remainder with the dividend's sign (C's fmod), from
    mod (the divisor's sign) moved back by x2 where the signs differ."""
    dt = _promote(_dtype_of(x1), _dtype_of(x2))
    x1, x2 = _scalar(x1, dt), _scalar(x2, dt)
    r = mod(x1, x2)  # noqa: F821
    off = logical_and(not_equal(r, 0), not_equal(less(r, 0), less(x1, 0)))  # noqa: F821
    return where(off, r - x2, r)  # noqa: F821


@_at_once
def ldexp(x1, x2):
    """jnp.ldexp: x1 * 2**x2 (x2 integers; float32 for integer x1)."""
    if not _np.issubdtype(_dtype_of(x2), _np.integer):
        raise ValueError(f"ldexp not supported for input types {(_dtype_of(x1), _dtype_of(x2))}")
    dt = _inexact(_dtype_of(x1))
    return _scalar(x1, dt) * power(full((), 2.0, dtype=dt), astype(_scalar(x2, _np.int32), dt))  # noqa


@_at_once
def nanprod(a, axis=None, dtype=None, keepdims=False):
    """jnp.nanprod: prod with NaNs counted as 1."""
    return prod(where(isnan(a), 1, a), axis=axis, dtype=dtype, keepdims=keepdims)  # noqa: F821


def _nanarg(name, fill):
    @_at_once
    def f(a, axis=None, out=None, keepdims=False):
        if not _np.issubdtype(a.dtype, _np.floating):
            return globals()[name](a, axis=axis, keepdims=keepdims)
        nan = isnan(a)
        r = globals()[name](where(nan, fill, a), axis=axis, keepdims=keepdims)  # noqa: F821
        return where(all(nan, axis=axis, keepdims=keepdims), -1, r)  # noqa: F821
    f.__name__ = "nan" + name
    f.__doc__ = (f"jnp.nan{name}: {name} ignoring NaNs (-1 where every element is NaN, as "
                 f"JAX's).")
    return f


nanargmax = _nanarg("argmax", -_np.inf)
nanargmin = _nanarg("argmin", _np.inf)


@_at_once
def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None,
        dtype=None):
    """jnp.cov as JAX computes it: rows are variables (columns with
    rowvar=False), centred by their (weighted) means, X X^T / f with f = n
    - ddof (ddof 1 unless bias), or from fweights / aweights as numpy's."""
    if len(m.shape) > 2:
        raise ValueError("m has more than 2 dimensions")
    dt = _np.dtype(dtype) if dtype is not None else _inexact(
        _promote(m.dtype, *(() if y is None else (y.dtype,))))
    X = atleast_2d(astype(m, dt))  # noqa: F821
    if not rowvar and len(m.shape) != 1:
        X = transpose(X)  # noqa: F821
    if y is not None:
        Y = atleast_2d(astype(y, dt))  # noqa: F821
        if not rowvar and Y.shape[0] != 1:
            Y = transpose(Y)  # noqa: F821
        X = concatenate((X, Y), axis=0)  # noqa: F821
    if ddof is None:
        ddof = 1 if not bias else 0
    w = None
    if fweights is not None:
        w = astype(abs(fweights), dt)  # noqa: F821
    if aweights is not None:
        aw = astype(abs(aweights), dt)  # noqa: F821
        w = aw if w is None else w * aw
    if w is None:
        avg = mean(X, axis=1)  # noqa: F821
        f = X.shape[1] - ddof
    else:
        w_sum = sum(w)  # noqa: F821
        avg = sum(X * reshape(w, (1, -1)), axis=1) / w_sum  # noqa: F821
        if ddof == 0:
            f = w_sum
        elif aweights is None:
            f = w_sum - ddof
        else:
            f = w_sum - ddof * sum(w * aw) / w_sum  # noqa: F821
    X = X - reshape(avg, (-1, 1))  # noqa: F821
    XT = transpose(X if w is None else X * reshape(w, (1, -1)))  # noqa: F821
    from ._core import P
    c = (matmul(X, XT, out_sharding=P()) if _is_jit_sharded(X) else matmul(X, XT)) / f  # noqa
    return reshape(c, ()) if c.shape == (1, 1) else c  # noqa: F821


@_at_once
def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """jnp.cross of 3-vectors (2-vectors as JAX's: a z of 0; two 2-vectors
    give the scalar z component) along axisa / axisb, the result's at axisc."""
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = moveaxis(a, axisa, -1), moveaxis(b, axisb, -1)
    if a.shape[-1] not in (2, 3) or b.shape[-1] not in (2, 3):
        raise ValueError("Dimension must be either 2 or 3 for cross product")
    if a.shape[-1] == 2 and b.shape[-1] == 2:
        return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]
    a0, a1 = a[..., 0], a[..., 1]
    a2 = a[..., 2] if a.shape[-1] == 3 else zeros_like(a0)
    b0, b1 = b[..., 0], b[..., 1]
    b2 = b[..., 2] if b.shape[-1] == 3 else zeros_like(b0)
    c = stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0])
    return moveaxis(c, 0, axisc)


@_at_once
def kron(a, b):
    """jnp.kron: a's dimensions interleaved with b's, the products reshaped
    to the shapes' products (the lower rank padded with leading 1s)."""
    sa, sb = tuple(a.shape), tuple(b.shape)
    r = builtins.max(len(sa), len(sb))
    sa, sb = (1,) * (r - len(sa)) + sa, (1,) * (r - len(sb)) + sb
    ai = reshape(a, tuple(d for n in sa for d in (n, 1)))  # noqa: F821
    bi = reshape(b, tuple(d for n in sb for d in (1, n)))  # noqa: F821
    return reshape(ai * bi, tuple(x * y for x, y in zip(sa, sb)))  # noqa: F821


def _static_take(x, idx, axis):
    """x's entries idx (static, numpy) along axis, as slices of the runs of
    consecutive indices concatenated (no gather: any sharding works)."""
    idx = [int(i) for i in idx]
    if idx == list(range(x.shape[axis])):
        return x
    lead = (builtins.slice(None),) * axis
    if not idx:
        shape = list(x.shape)
        shape[axis] = 0
        return zeros(tuple(shape), dtype=x.dtype)  # noqa: F821
    runs, start = [], 0
    for k in range(1, len(idx) + 1):
        if k == len(idx) or idx[k] != idx[k - 1] + 1:
            runs.append((idx[start], idx[k - 1] + 1))
            start = k
    parts = [x[lead + (builtins.slice(s, e),)] for s, e in runs]
    return parts[0] if len(parts) == 1 else concatenate(tuple(parts), axis=axis)  # noqa: F821


def _static_obj(name, obj):
    if hasattr(obj, "type"):
        raise InvalidArgument(f"jnp.{name}: obj must be static here (an int, a slice or a "
                              f"numpy/list of indices), not a traced or device array")
    return obj


@_at_once
def delete(arr, obj, axis=None, *, assume_unique_indices=False):
    """jnp.delete with static obj (an int, a slice, integer indices or a
    boolean mask): the other entries along axis (the flattened array when
    None), as numpy."""
    if axis is None:
        arr, axis = reshape(arr, (-1,)), 0  # noqa: F821
    axis = axis % len(arr.shape)
    n = arr.shape[axis]
    obj = _static_obj("delete", obj)
    keep = _np.ones(n, bool)
    if isinstance(obj, builtins.slice):
        keep[_np.arange(n)[obj]] = False
    else:
        o = _np.asarray(obj)
        if o.dtype == bool:
            if o.shape != (n,):
                raise ValueError("np.delete(arr, obj): for boolean indices, obj must be "
                                 "one-dimensional with length matching specified axis.")
            keep = ~o
        elif _np.issubdtype(o.dtype, _np.integer):
            if o.ndim == 0 and not -n <= int(o) < n:
                raise IndexError(f"index {int(o)} is out of bounds for axis {axis} with "
                                 f"size {n}")
            keep[o] = False
        else:
            raise ValueError(f"np.delete(arr, obj): got obj.dtype={o.dtype}; must be integer "
                             f"or bool.")
    return _static_take(_unshard(arr, axis), _np.nonzero(keep)[0], axis)


@_at_once
def insert(arr, obj, values, axis=None):
    """jnp.insert with static obj (an int, a slice or integer indices):
    values placed before those positions along axis (the flattened array
    when None), broadcast as JAX's (a scalar obj: values along axis)."""
    if axis is None:
        arr, axis = reshape(arr, (-1,)), 0  # noqa: F821
    nd = len(arr.shape)
    axis = axis % nd
    n = arr.shape[axis]
    obj = _static_obj("insert", obj)
    ind = _np.arange(*obj.indices(n)) if isinstance(obj, builtins.slice) else _np.asarray(obj)
    if ind.ndim > 1:
        raise ValueError(f"jnp.insert(): obj must be a slice, a one-dimensional array, or a "
                         f"scalar; got {obj}")
    if not _np.issubdtype(ind.dtype, _np.integer):
        if ind.size == 0:
            ind = ind.astype(_np.int64)
        else:
            raise ValueError(f"jnp.insert(): index array must be integer typed; got {obj}")
    v = astype(values, arr.dtype) if hasattr(values, "type") else _to_device(  # noqa: F821
        _np.asarray(values), arr.dtype)
    if len(v.shape) < nd:
        v = reshape(v, (1,) * (nd - len(v.shape)) + tuple(v.shape))  # noqa: F821
    if ind.size == 1:
        if ind.ndim == 0:
            v = moveaxis(v, 0, axis)
        ind = _np.full(v.shape[axis], ind.reshape(-1)[0])
    n_ins = _np.broadcast_shapes(ind.shape, (v.shape[axis],))[0]
    ind = _np.broadcast_to(ind, (n_ins,))
    ind = _np.clip(_np.where(ind < 0, ind + n, ind), 0, n)
    vshape = list(arr.shape)
    vshape[axis] = n_ins
    v = broadcast_to(v, tuple(vshape))  # noqa: F821
    arr = _unshard(arr, axis)
    if _is_jit_sharded(arr):
        v = reshard(v, _spec_of_type(arr.type))  # noqa: F821 (concatenate: one sharding)
    vals_at = ind.copy()
    vals_at[_np.argsort(ind, kind="stable")] += _np.arange(n_ins)
    src = _np.empty(n + n_ins, _np.int64)
    taken = _np.zeros(n + n_ins, bool)
    taken[vals_at] = True
    src[vals_at] = n + _np.arange(n_ins)
    src[~taken] = _np.arange(n)
    both = concatenate((arr, v), axis=axis)  # noqa: F821
    return _static_take(both, src, axis)


def _tri_indices(fn, n, k, m):
    return tuple(_to_device(i.astype(_np.int32)) for i in fn(n, k, m))


def tril_indices(n, k=0, m=None):
    """jnp.tril_indices: numpy's (static) row and column indices as int32
    arrays (numpy arrays with no mesh set, Arrays on the context mesh,
    constants in a jit)."""
    return _tri_indices(_np.tril_indices, n, k, m)


def triu_indices(n, k=0, m=None):
    """jnp.triu_indices, as tril_indices."""
    return _tri_indices(_np.triu_indices, n, k, m)


def diag_indices(n, ndim=2):
    """jnp.diag_indices: (arange(n),) * ndim, int32."""
    if n < 0:
        raise ValueError(f"n argument to diag_indices must be nonnegative, got {n}")
    if ndim < 0:
        raise ValueError(f"ndim argument to diag_indices must be nonnegative, got {ndim}")
    i = _to_device(_np.arange(n, dtype=_np.int32))
    return (i,) * ndim


def _host_indices(dimensions, dtype=None, sparse=False):
    r = _np.indices(dimensions, dtype=dtype or _np.int32, sparse=sparse)
    return tuple(r) if sparse else r


@_creation(_host_indices)
def indices(dimensions, dtype=None, sparse=False):
    """jnp.indices: each dimension's iota broadcast over the grid (stacked;
    sparse: one array per dimension, 1 elsewhere), int32 unless dtype says."""
    dims = tuple(int(d) for d in dimensions)
    dt = dtype or _np.int32
    out = []
    for i, d in enumerate(dims):
        s = (1,) * i + (d,) + (1,) * (len(dims) - i - 1)
        v = reshape(arange(d, dtype=dt), s)  # noqa: F821
        out.append(v if sparse else broadcast_to(v, dims))  # noqa: F821
    if sparse:
        return tuple(out)
    return stack(out, 0) if out else zeros((0,), dtype=dt)  # noqa: F821


@_at_once
def unravel_index(indices, shape):
    """jnp.unravel_index: the coordinates of flat indices in shape (divmod
    from the last dimension), out-of-range ones clipped as JAX's."""
    shape = [int(shape)] if isinstance(shape, numbers.Integral) else [int(s) for s in shape]
    out = [None] * len(shape)
    idx = indices
    for i in range(len(shape) - 1, -1, -1):
        idx, out[i] = floor_divide(idx, shape[i]), mod(idx, shape[i])  # noqa: F821
    pos, neg = idx > 0, idx < -1
    return tuple(where(pos, s - 1, where(neg, 0, o)) for s, o in zip(shape, out))  # noqa: F821


@_at_once
def fill_diagonal(a, val, wrap=False, *, inplace=True):
    """jnp.fill_diagonal(a, val, inplace=False): a with its main diagonal
    (a[i, i, ...] for i < min(a.shape)) set to val (a scalar, or values
    taken in order and repeated to the diagonal's length)."""
    if inplace:
        raise NotImplementedError("JAX arrays are immutable, must use inplace=False")
    if wrap:
        raise NotImplementedError("wrap=True is not implemented, must use wrap=False")
    nd = len(a.shape)
    if nd < 2:
        raise ValueError("array must be at least 2-d")
    if nd > 2 and not builtins.all(n == a.shape[0] for n in a.shape[1:]):
        raise ValueError("All dimensions of input must be of equal length")
    n = builtins.min(a.shape)
    on = None
    for d in range(1, nd):
        e = equal(_iota(a.shape[0], _np.int32, a.shape, 0),  # noqa: F821
                  _iota(a.shape[d], _np.int32, a.shape, d))
        on = e if on is None else logical_and(on, e)  # noqa: F821
    if _np.ndim(val) == 0 and not hasattr(val, "type"):
        return where(on, _scalar(val, a.dtype), a)  # noqa: F821
    v = _scalar(val, a.dtype) if hasattr(val, "type") else _to_device(_np.asarray(val), a.dtype)
    v = resize(v, (n,)) if len(v.shape) else reshape(v, (1,))  # noqa: F821
    if a.shape[0] > n:
        v = pad(v, ((0, a.shape[0] - n),))  # noqa: F821
    if v.shape[0] != a.shape[0]:
        v = v[:a.shape[0]]
    return where(on, reshape(v, (a.shape[0],) + (1,) * (nd - 1)), a)  # noqa: F821


@_at_once
def resize(a, new_shape):
    """jnp.resize: a's flattened values repeated (tile) to fill new_shape."""
    new_shape = (int(new_shape),) if isinstance(new_shape, numbers.Integral) else \
        tuple(int(d) for d in new_shape)
    if builtins.any(d < 0 for d in new_shape):
        raise ValueError("all elements of `new_shape` must be non-negative")
    arr = reshape(a, (-1,))  # noqa: F821
    size_ = math.prod(new_shape)
    if arr.shape[0] == 0 or size_ == 0:
        return zeros(new_shape, dtype=a.dtype)  # noqa: F821
    reps = -(-size_ // arr.shape[0])
    arr = concatenate((arr,) * reps) if reps > 1 else arr  # noqa: F821 (tile has no rule)
    return reshape(arr[:size_] if arr.shape[0] != size_ else arr, new_shape)  # noqa: F821


@_at_once
def rot90(m, k=1, axes=(0, 1)):
    """jnp.rot90: k quarter turns in the plane of axes (flips and a
    transpose, as JAX's)."""
    nd = len(m.shape)
    if nd < 2:
        raise ValueError(f"rot90 requires its first argument to have ndim at least two, but "
                         f"got first argument of shape {tuple(m.shape)}, which has ndim {nd}")
    ax1, ax2 = axes[0] % nd, axes[1] % nd
    if ax1 == ax2:
        raise ValueError("Axes must be different")
    k = k % 4
    if k == 0:
        return m
    if k == 2:
        return flip(flip(m, ax1), ax2)
    perm = list(range(nd))
    perm[ax1], perm[ax2] = perm[ax2], perm[ax1]
    if k == 1:
        return transpose(flip(m, ax2), tuple(perm))  # noqa: F821
    return flip(transpose(m, tuple(perm)), ax2)  # noqa: F821


@_at_once
def dsplit(ary, indices_or_sections):
    """jnp.dsplit: split along axis 2 (3-D arrays or more)."""
    if len(ary.shape) < 3:
        raise ValueError("dsplit only works on arrays of 3 or more dimensions")
    return split(ary, indices_or_sections, axis=2)


@_at_once
def polyval(p, x, *, unroll=16):
    """jnp.polyval: Horner's rule from the highest coefficient, y = y * x +
    p[i] from y = 0 (p a sequence or an array whose rows are coefficients)."""
    px = p if hasattr(p, "type") else _np.asarray(p)
    dt = _promote(px.dtype if hasattr(px, "dtype") else _np.float32, _dtype_of(x))
    if hasattr(px, "type"):
        px = astype(px, dt) if px.dtype != dt else px  # noqa: F821
    else:
        px = px.astype(dt)
    x = _scalar(x, dt)
    shape = broadcast_shapes(tuple(px.shape[1:]), tuple(x.shape))
    y = zeros(shape, dtype=dt)  # noqa: F821
    for i in range(px.shape[0]):
        c = px[i]
        y = y * x + (c if hasattr(c, "type") else c.item() if c.ndim == 0 else _to_device(c))
    return y


def _host_logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
    return _np.power(_np.float32(base), _host_linspace(start, stop, num, endpoint)).astype(
        dtype or _np.float32)


@_creation(_host_logspace)
def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
    """jnp.logspace: base ** linspace(start, stop, num), float32 unless
    dtype says (scalar bounds)."""
    dt = dtype or _np.float32
    lin = linspace(start, stop, num, endpoint=endpoint, dtype=_inexact(dt))
    return astype(power(full_like(lin, base), lin), dt)  # noqa: F821


@_at_once
def trapezoid(y, x=None, dx=1.0, axis=-1):
    """jnp.trapezoid as JAX computes it: sum(dx * (y[1:] + y[:-1])) / 2
    along axis with x's differences; a constant dx as dx * (sum(y) -
    (y[0] + y[-1]) / 2)."""
    y = astype(y, _inexact(y.dtype)) if not _np.issubdtype(y.dtype, _np.floating) else y  # noqa
    if x is None:
        dxa = dx
        if _np.ndim(dx) > 0 or hasattr(dx, "type"):
            raise ValueError("trapezoid: an array dx is not supported here; give x")
    else:
        x = astype(x, y.dtype) if x.dtype != y.dtype else x  # noqa: F821
        dxa = diff(x) if len(x.shape) == 1 else moveaxis(diff(x, axis=axis), axis, -1)
    y = moveaxis(y, axis, -1)
    if x is None:
        return dxa * (sum(y, axis=-1) - 0.5 * (y[..., 0] + y[..., -1]))  # noqa: F821
    return 0.5 * sum(dxa * (y[..., 1:] + y[..., :-1]), axis=-1)  # noqa: F821


@_at_once
def select(condlist, choicelist, default=0):
    """jnp.select: for each element the choice of the first true condition,
    default where none is (where, folded from the last)."""
    condlist, choicelist = list(condlist), list(choicelist)
    if len(condlist) != len(choicelist):
        raise ValueError(f"condlist must have length equal to choicelist ({len(condlist)} vs "
                         f"{len(choicelist)})")
    if not condlist:
        raise ValueError("condlist must be non-empty")
    dt = _promote(_dtype_of(default), *[_dtype_of(c) for c in choicelist])
    out = _scalar(default, dt)
    for cnd, ch in zip(condlist[::-1], choicelist[::-1]):
        out = where(cnd, _scalar(ch, dt), out)  # noqa: F821
    shape = _np.broadcast_shapes(*[tuple(c.shape) for c in condlist if hasattr(c, "shape")],
                                 tuple(out.shape))
    return broadcast_to(out, shape) if tuple(out.shape) != tuple(shape) else out  # noqa: F821


@_at_once
def piecewise(x, condlist, funclist, *args, **kw):
    """jnp.piecewise: where condlist[i] holds, funclist[i] (a function of x
    or a constant); a last extra entry where none holds (else 0); a later
    true condition wins, as numpy and JAX. Every function is computed on
    all of x and selected (JAX's switch selects per element: the same
    values for elementwise functions)."""
    if not isinstance(condlist, (list, tuple)):
        condlist = [condlist] if len(condlist.shape) == len(x.shape) else list(condlist)
    funclist = list(funclist)
    nc, nf = len(condlist), len(funclist)
    if nf == nc + 1:
        funclist = funclist[-1:] + funclist[:-1]
    elif nf == nc:
        funclist = [0] + funclist
    else:
        raise ValueError(f"with {nc} condition(s), either {nc} or {nc + 1} functions are "
                         f"expected; got {nf}")

    def value(f):
        if callable(f):
            r = f(x, *args, **kw)
            return astype(r, x.dtype) if hasattr(r, "type") and r.dtype != x.dtype else r  # noqa
        return _scalar(f, x.dtype)
    out = broadcast_to(value(funclist[0]), tuple(x.shape))  # noqa: F821
    for cnd, f in zip(condlist, funclist[1:]):
        out = where(cnd, value(f), out)  # noqa: F821
    return out


__all__ += ["searchsorted", "digitize", "interp", "bincount", "nonzero", "flatnonzero",
            "argwhere", "unique", "histogram", "append", "broadcast_shapes", "conj",
            "conjugate", "copy", "permute_dims", "isposinf", "isneginf", "signbit",
            "float_power", "fmod", "ldexp", "nanprod", "nanargmax", "nanargmin", "cov", "cross",
            "kron", "delete", "insert", "tril_indices", "triu_indices", "diag_indices",
            "indices", "unravel_index", "fill_diagonal", "resize", "rot90", "dsplit", "polyval",
            "logspace", "trapezoid", "select", "piecewise", "ConcretizationTypeError"]

from ._conv import convolve, correlate  # noqa: E402 (the module uses this one's functions)
from . import linalg  # noqa: E402 (jnp.linalg)

__all__ += ["convolve", "correlate"]


# ---- integer bits and number theory -------------------------------------------


def _shift_operands(x1, x2):
    """A Python int x1 (1 << x) as JAX takes it: weakly typed, so of x2's
    integer dtype."""
    if isinstance(x1, int) and not isinstance(x1, bool) and hasattr(x2, "dtype"):
        x1 = astype(x1, x2.dtype)  # noqa: F821
    return x1, x2


def _bits(x):
    dt = _np.dtype(x.dtype)
    if dt.kind not in "iub":
        raise TypeError(f"shifts take integer arrays, got {dt.name}")
    return dt.itemsize * 8, dt.kind == "i"


def _via_int32(fn, x1, x2):
    """fn on uint8 values widened to int32, the result narrowed back."""
    r = fn(astype(x1, _np.int32), astype(x2, _np.int32))  # noqa: F821
    return astype(r & 255, _np.uint8)  # noqa: F821


@_at_once
def left_shift(x1, x2):
    """jnp.left_shift: x1 * 2**x2 with the integer's wraparound (0 for a
    shift of the width or more, as XLA's shift_left)."""
    x1, x2 = _shift_operands(x1, x2)
    nbits, _ = _bits(x1)
    if _np.dtype(x1.dtype) == _np.uint8:
        return where(astype(x2, _np.int32) >= 8, 0,  # noqa: F821
                     _via_int32(left_shift, x1, x2))
    x2 = astype(x2, x1.dtype)  # noqa: F821
    return where((x2 >= nbits) | (x2 < 0), 0, x1 * power(astype(2, x1.dtype), x2))  # noqa: F821


@_at_once
def right_shift(x1, x2):
    """jnp.right_shift: arithmetic for signed integers (x1 // 2**x2, the sign
    filling in), logical for unsigned; a shift of the width or more leaves
    the sign (-1 or 0), as XLA's."""
    x1, x2 = _shift_operands(x1, x2)
    nbits, signed = _bits(x1)
    if _np.dtype(x1.dtype) == _np.uint8:
        return _via_int32(right_shift, x1, x2)
    x2 = astype(x2, x1.dtype)  # noqa: F821
    big = (x2 >= nbits - (1 if signed else 0)) | (x2 < 0)
    safe = where(big, 0, x2)  # noqa: F821
    q = floor_divide(x1, power(astype(2, x1.dtype), safe))  # noqa: F821
    fill = where(x1 < 0, -1, 0) if signed else 0  # noqa: F821
    return where(big, fill, q)  # noqa: F821


bitwise_left_shift, bitwise_right_shift = left_shift, right_shift


@_at_once
def gcd(x1, x2):
    """jnp.gcd: the greatest common divisor of |x1| and |x2| (0 for two
    zeros), by Euclid's steps unrolled to the most an integer of this width
    can need."""
    dt = _np.result_type(x1.dtype, x2.dtype)
    if dt.kind not in "iu":
        raise TypeError(f"gcd takes integer arrays, got {dt.name}")
    a, b = abs(astype(x1, dt)), abs(astype(x2, dt))  # noqa: F821
    for _ in range(int(1.44 * dt.itemsize * 8) + 2):  # Lamé: Fibonacci steps
        nz = b != 0
        a, b = where(nz, b, a), where(nz, a % where(nz, b, 1), 0)  # noqa: F821
    return a


@_at_once
def lcm(x1, x2):
    """jnp.lcm: |x1 * x2| / gcd (0 when either is 0)."""
    g = gcd(x1, x2)
    dt = _np.dtype(g.dtype)
    a, b = abs(astype(x1, dt)), abs(astype(x2, dt))  # noqa: F821
    return where(g == 0, 0, a * floor_divide(b, where(g == 0, 1, g)))  # noqa: F821


@_at_once
def fix(x):
    """jnp.fix: rounds toward zero (trunc)."""
    return where(x < 0, ceil(x), floor(x))  # noqa: F821


@_at_once
def copysign(x1, x2):
    """jnp.copysign: |x1| with the sign of x2 (negative zero's too: its
    reciprocal is -inf)."""
    neg = (x2 < 0) | ((x2 == 0) & (1 / where(x2 == 0, x2, 1) < 0))  # noqa: F821
    return where(neg, -abs(x1), abs(x1))  # noqa: F821


@_at_once
def modf(x):
    """jnp.modf: (the fractional part, the integral part), both of x's
    sign."""
    i = fix(x)
    return x - i, i


def real(x):
    """jnp.real of a real array: x (shmap has no complex dtypes)."""
    return x


@_at_once
def imag(x):
    """jnp.imag of a real array: zeros."""
    return zeros_like(x)  # noqa: F821


@_at_once
def isreal(x):
    """jnp.isreal of a real array: True everywhere."""
    return ones_like(x, dtype=_np.bool_)  # noqa: F821


@_at_once
def iscomplex(x):
    """jnp.iscomplex of a real array: False everywhere."""
    return zeros_like(x, dtype=_np.bool_)  # noqa: F821


__all__ += ["left_shift", "right_shift", "bitwise_left_shift", "bitwise_right_shift", "gcd",
            "lcm", "fix", "copysign", "modf", "real", "imag", "isreal", "iscomplex"]


# ---- more of numpy: sorting helpers, differences, polynomials, nan-quantiles --


@_at_once
def lexsort(keys, axis=-1):
    """jnp.lexsort: the positions that sort by the last key, ties broken by
    the one before, ... (stable sorts chained from the first key)."""
    keys = list(keys) if isinstance(keys, (list, tuple)) else \
        [keys[k] for k in range(keys.shape[0])]
    idx = argsort(keys[0], axis=axis)
    for k in keys[1:]:
        idx = take_along_axis(idx, argsort(take_along_axis(k, idx, axis=axis),  # noqa: F821
                                           axis=axis), axis=axis)
    return idx


@_at_once
def partition(a, kth, axis=-1):
    """jnp.partition: the kth element in its sorted place, smaller ones
    before and larger after (here: all sorted, one such arrangement)."""
    return sort(a, axis=axis)


@_at_once
def argpartition(a, kth, axis=-1):
    """jnp.argpartition: positions that partition a at kth (here: that sort
    it, one such arrangement)."""
    return argsort(a, axis=axis)


@_at_once
def ediff1d(ary, to_end=None, to_begin=None):
    """jnp.ediff1d: the differences of the flattened array, with to_begin
    and to_end around them."""
    d = diff(ravel(ary))  # noqa: F821
    parts = [ravel(asarray(to_begin, dtype=d.dtype))] if to_begin is not None else []  # noqa
    parts.append(d)
    if to_end is not None:
        parts.append(ravel(asarray(to_end, dtype=d.dtype)))  # noqa: F821
    return concatenate(parts) if len(parts) > 1 else d  # noqa: F821


@_at_once
def gradient(f, *varargs, axis=None, edge_order=1):
    """jnp.gradient: central differences inside, one-sided at the edges
    (edge_order 1), with scalar spacings; one array per axis."""
    if edge_order != 1:
        raise ValueError("gradient: only edge_order=1 is supported here")
    nd = len(f.shape)
    axes = tuple(range(nd)) if axis is None else \
        ((axis,) if isinstance(axis, numbers.Integral) else tuple(axis))
    axes = tuple(a % nd for a in axes)
    dx = list(varargs) if len(varargs) > 1 else list(varargs) * len(axes) if varargs else \
        [1.0] * len(axes)
    if len(dx) != len(axes):
        raise TypeError("invalid number of arguments")
    if not _np.issubdtype(f.dtype, _np.floating):
        f = astype(f, _np.float32)  # noqa: F821
    outs = []
    for ax, h in zip(axes, dx):
        if not isinstance(h, numbers.Number):
            raise TypeError("gradient: only scalar spacings are supported here")

        def sl(a, b, ax=ax):
            return f[(builtins.slice(None),) * ax + (builtins.slice(a, b),)]
        if f.shape[ax] < 2:
            raise ValueError("Shape of array too small to calculate a numerical gradient, at "
                             "least (edge_order + 1) elements are required.")
        parts = [(sl(1, 2) - sl(0, 1)) / h]
        if f.shape[ax] > 2:
            parts.append((sl(2, None) - sl(None, -2)) / (2 * h))
        parts.append((sl(-1, None) - sl(-2, -1)) / h)
        outs.append(concatenate(parts, axis=ax))  # noqa: F821
    return outs[0] if len(outs) == 1 else outs


@_at_once
def unwrap(p, discont=None, axis=-1, period=2 * math.pi):
    """jnp.unwrap: jumps between neighbours larger than discont (half the
    period by default) taken out by whole periods, numpy's algorithm."""
    if not _np.issubdtype(p.dtype, _np.floating):
        p = astype(p, _np.float32)  # noqa: F821
    half = period / 2
    discont = half if discont is None else builtins.max(discont, half)
    dd = diff(p, axis=axis)  # noqa: F821
    ddmod = mod(dd + half, period) - half  # noqa: F821
    ddmod = where((ddmod == -half) & (dd > 0), half, ddmod)  # noqa: F821
    corr = where(abs(dd) < discont, 0, ddmod - dd)  # noqa: F821
    ax = axis % len(p.shape)
    first = p[(builtins.slice(None),) * ax + (builtins.slice(0, 1),)]
    rest = p[(builtins.slice(None),) * ax + (builtins.slice(1, None),)] + \
        cumsum(corr, axis=ax)  # noqa: F821
    return concatenate([first, rest], axis=ax)  # noqa: F821


def _cumulative(name, scan, first, x, axis, dtype, include_initial):
    """The array API's cumulative_sum / cumulative_prod: scan along axis
    (required past one dimension), first (zeros_like, ones_like) of one
    slice in front with include_initial."""
    if axis is None:
        if len(x.shape) != 1:
            raise ValueError(f"{name}: axis is required for arrays of more than one dimension")
        axis = 0
    r = scan(x, axis=axis, dtype=dtype)
    if include_initial:
        ax = axis % len(x.shape)
        z = first(r[(builtins.slice(None),) * ax + (builtins.slice(0, 1),)])
        r = concatenate([z, r], axis=ax)  # noqa: F821
    return r


@_at_once
def cumulative_sum(x, axis=None, dtype=None, include_initial=False):
    """jnp.cumulative_sum: cumsum, a zero first with include_initial."""
    return _cumulative("cumulative_sum", cumsum, zeros_like, x, axis, dtype,  # noqa: F821
                       include_initial)


@_at_once
def cumulative_prod(x, axis=None, dtype=None, include_initial=False):
    """jnp.cumulative_prod: cumprod, a one first with include_initial."""
    return _cumulative("cumulative_prod", cumprod, ones_like, x, axis, dtype,  # noqa: F821
                       include_initial)


def unstack(x, axis=0):
    """jnp.unstack: the slices of x along axis, that axis dropped, as a tuple."""
    ax = axis % len(x.shape)
    from .lax import _unstack_sharding_rule
    _unstack_sharding_rule(x, ax)
    lead = (builtins.slice(None),) * ax
    return tuple(x[lead + (k,)] for k in range(x.shape[ax]))


def matrix_transpose(x):
    """jnp.matrix_transpose: the last two axes swapped."""
    if len(x.shape) < 2:
        raise ValueError(f"x must be at least two-dimensional for matrix_transpose; got "
                         f"ndim={len(x.shape)}")
    return swapaxes(x, -1, -2)  # noqa: F821


def concat(arrays, /, *, axis=0):
    """jnp.concat (the array API's concatenate)."""
    return concatenate(arrays, axis=axis)  # noqa: F821


@_at_once
def vander(x, N=None, increasing=False):
    """jnp.vander: the powers of x, columns decreasing (increasing=True:
    from x**0)."""
    n = x.shape[0] if N is None else N
    p = _np.arange(n) if increasing else _np.arange(n - 1, -1, -1)
    cols = [ones_like(x) if k == 0 else x ** int(k) for k in p]  # noqa: F821
    return stack(cols, axis=1) if cols else zeros((x.shape[0], 0), x.dtype)  # noqa: F821


@_at_once
def corrcoef(x, y=None, rowvar=True):
    """jnp.corrcoef: the covariance normalized by the standard deviations,
    clipped to [-1, 1] as numpy's."""
    c = cov(x, y, rowvar=rowvar)  # noqa: F821
    if len(c.shape) == 0:
        return c / c
    d = sqrt(diagonal(c))  # noqa: F821
    c = c / d[:, None] / d[None, :]
    return clip(c, -1, 1)  # noqa: F821


def _poly_pad(a1, a2):
    n1, n2 = a1.shape[0], a2.shape[0]
    if n1 < n2:
        a1 = pad(a1, ((n2 - n1, 0),))  # noqa: F821
    elif n2 < n1:
        a2 = pad(a2, ((n1 - n2, 0),))  # noqa: F821
    return a1, a2


@_at_once
def polyadd(a1, a2):
    """jnp.polyadd: coefficients, highest power first, added."""
    a1, a2 = _poly_pad(a1, a2)
    return a1 + a2


@_at_once
def polysub(a1, a2):
    """jnp.polysub: coefficients, highest power first, subtracted."""
    a1, a2 = _poly_pad(a1, a2)
    return a1 - a2


@_at_once
def polymul(a1, a2):
    """jnp.polymul: the product's coefficients (a full convolution)."""
    return convolve(a1, a2)  # noqa: F821


@_at_once
def nanquantile(a, q, axis=None, keepdims=False, method="linear"):
    """jnp.nanquantile: quantile of the elements that are not NaN (numpy's
    'linear' method; NaN for a slice of NaNs only): the sorted values (NaN
    last) at (count - 1) * q of each slice's own count."""
    if method != "linear":
        raise ValueError(f"nanquantile: method {method!r} is not supported (only 'linear')")
    if axis is None:
        a, axis = reshape(a, (-1,)), 0  # noqa: F821
    axis = axis % len(a.shape)
    if not _np.issubdtype(a.dtype, _np.floating):
        a = astype(a, _np.float32)  # noqa: F821
    s = sort(a, axis=axis)
    cnt = sum(logical_not(isnan(a)), axis=axis, keepdims=True)  # noqa: F821
    cnt = astype(cnt, a.dtype)  # noqa: F821
    n = a.shape[axis]
    outs = []
    for qv in _np.atleast_1d(_np.asarray(q, dtype=_np.float64)):
        pos = (cnt - 1) * float(qv)
        lo = floor(pos)  # noqa: F821
        lo_i = astype(clip(lo, 0, n - 1), _np.int32)  # noqa: F821
        hi_i = astype(clip(ceil(pos), 0, n - 1), _np.int32)  # noqa: F821
        vlo = take_along_axis(s, lo_i, axis=axis)  # noqa: F821
        vhi = take_along_axis(s, hi_i, axis=axis)  # noqa: F821
        v = where(cnt > 0, vlo + (vhi - vlo) * (pos - lo), _np.nan)  # noqa: F821
        outs.append(v if keepdims else squeeze(v, axis))  # noqa: F821
    return outs[0] if _np.ndim(q) == 0 else stack(outs)


@_at_once
def nanpercentile(a, q, axis=None, keepdims=False, method="linear"):
    """jnp.nanpercentile: nanquantile of q / 100."""
    return nanquantile(a, _np.asarray(q, dtype=_np.float64) / 100, axis=axis,
                       keepdims=keepdims, method=method)


@_at_once
def nanmedian(a, axis=None, keepdims=False):
    """jnp.nanmedian: nanquantile 0.5."""
    return nanquantile(a, 0.5, axis=axis, keepdims=keepdims)


__all__ += ["lexsort", "partition", "argpartition", "ediff1d", "gradient", "unwrap",
            "cumulative_sum", "cumulative_prod", "unstack", "matrix_transpose", "concat",
            "vander", "corrcoef", "polyadd", "polysub", "polymul",
            "nanquantile", "nanpercentile", "nanmedian"]


_round_op = round  # noqa: F821 (the op table's: half to even)


@_at_once
def round(a, decimals=0, out=None):  # noqa: A001 (jnp.round)
    """jnp.round: half to even at `decimals` digits, as JAX's (x * 10**d
    rounded, then divided back); integers stay as they are for d >= 0."""
    if decimals == 0:
        return _round_op(a)
    if not _np.issubdtype(a.dtype, _np.floating):
        if decimals > 0:
            return a
        f = 10 ** (-decimals)
        return astype(_round_op(astype(a, _np.float64) / f) * f, a.dtype)  # noqa: F821
    f = 10.0 ** decimals
    return _round_op(a * f) / f


around = round


def _weak_dtype(v):
    """A Python scalar's dtype under JAX's defaults (bool, int32, float32)."""
    return (_np.dtype(_np.bool_) if isinstance(v, bool) else
            _np.dtype(_np.int32) if isinstance(v, int) else _np.dtype(_np.float32))


def result_type(*args):
    """jnp.result_type: the dtype an operation on args gives, with JAX's
    weak Python scalars (they take the arrays' dtype: result_type(x_f64,
    1.0) is float64, result_type(1, 2.0) float32) and 32-bit defaults."""
    strong = [_np.dtype(a) if isinstance(a, (type, str, _np.dtype)) else _np.dtype(a.dtype)
              for a in args if not isinstance(a, (bool, int, float))]
    weak = [a for a in args if isinstance(a, (bool, int, float))]
    if not strong:
        return _jax_promote(*[_weak_dtype(a) for a in weak])
    dt = _jax_promote(*strong)
    for w in weak:  # a weak scalar of a higher kind lifts the kind, not the width
        if isinstance(w, float) and not isinstance(w, bool) and dt.kind in "biu":
            dt = _np.dtype(_np.float32)
        elif isinstance(w, int) and not isinstance(w, bool) and dt.kind == "b":
            dt = _np.dtype(_np.int32)
    return dt


def _jax_promote(*dts):
    """JAX's lattice where it differs from numpy's: an integer meeting a
    float gives the float (numpy: int64 with float32 is float64)."""
    dts = [_np.dtype(d) for d in dts]
    floats = [d for d in dts if d.kind == "f"]
    return _np.result_type(*floats) if floats else _np.result_type(*dts)


def promote_types(a, b):
    """jnp.promote_types: the dtype two dtypes promote to (JAX's lattice:
    an integer and a float give the float)."""
    return _jax_promote(a, b)


__all__ += ["result_type", "promote_types"]


# ---- vectorize, apply_along_axis: vmap ---------------------------------------------------


def _core_dims(signature):
    """numpy's gufunc signature '(m,n),(n)->(m)' as (inputs, outputs): lists
    of tuples of dimension names."""
    m = re.fullmatch(r"\s*((?:\([\w, ]*\)\s*,?\s*)*)->((?:\s*\([\w, ]*\)\s*,?)*)\s*", signature)
    if not m:
        raise ValueError(f"not a valid gufunc signature: {signature}")

    def parse(part):
        return [tuple(d.strip() for d in g.split(",") if d.strip())
                for g in re.findall(r"\(([\w, ]*)\)", part)]
    return parse(m.group(1)), parse(m.group(2))


def _loop_shape(shapes, ins, ctx):
    """jnp.vectorize's checks of arguments' shapes against their core
    dimensions ins (a gufunc signature's inputs; its sentences, ending with
    ctx): (the broadcast of their loop shapes, each core dimension's size)."""
    sizes, loops = {}, []
    for shape, core in zip(shapes, ins):
        shape = tuple(shape)
        if len(shape) < len(core):
            raise ValueError(f"input with shape {shape!r} does not have enough dimensions for "
                             f"all core dimensions {core!r} {ctx}")
        for d, n in zip(core, shape[len(shape) - len(core):]):
            if sizes.setdefault(d, n) != n:
                raise ValueError(f"inconsistent size for core dimension {d!r}: {n!r} vs "
                                 f"{sizes[d]!r} {ctx}")
        loops.append(shape[:len(shape) - len(core)])
    return (tuple(_np.broadcast_shapes(*loops)) if loops else ()), sizes


def vectorize(pyfunc, *, excluded=frozenset(), signature=None):
    """jnp.vectorize: pyfunc of one element (or, with a gufunc signature,
    of the core dimensions it names) over the broadcast of its arguments'
    other (loop) dimensions, by vmap over those flattened into one; excluded
    positions or names pass through as they are. Called outside a trace it
    runs at once as one jit program."""
    import functools
    from ._vmap import vmap

    @functools.wraps(pyfunc)
    def wrapped(*args, **kwargs):
        if getattr(_state, "builder", None) is None:
            return _eager(wrapped, args, kwargs)
        fixed = {i: a for i, a in enumerate(args) if i in excluded}
        kw = {k: v for k, v in kwargs.items() if k in excluded}
        vec = [asarray(a) for i, a in enumerate(args) if i not in fixed]
        if builtins.any(k not in excluded for k in kwargs):
            raise ValueError("vectorize: keyword arguments must be excluded (excluded=)")
        ins, outs = _core_dims(signature) if signature else ([()] * len(vec), None)
        if len(ins) != len(vec):
            raise TypeError(f"wrong number of positional arguments: expected {len(ins)}, got "
                            f"{len(vec)}")
        loop, _ = _loop_shape([a.shape for a in vec], ins,
                                  f"on vectorized function with excluded={excluded!r} and "
                                  f"signature={signature!r}")
        flat = []
        for a, core in zip(vec, ins):
            cs = tuple(a.shape)[len(a.shape) - len(core):] if core else ()
            b = broadcast_to(a, loop + cs)  # noqa: F821
            flat.append(reshape(b, (math.prod(loop),) + cs))  # noqa: F821

        def one(*xs):
            it = iter(xs)
            full = [fixed[i] if i in fixed else next(it) for i in range(len(args))]
            return pyfunc(*full, **kw)
        res = vmap(one)(*flat) if flat else one()
        multi = isinstance(res, tuple)
        rs = res if multi else (res,)
        rs = tuple(reshape(r, loop + tuple(r.shape)[1:]) for r in rs)  # noqa: F821
        return rs if multi else rs[0]
    return wrapped


def apply_along_axis(func1d, axis, arr, *args, **kwargs):
    """jnp.apply_along_axis, as JAX writes it: func1d of the 1-d slices
    along axis, by vmap over the other axes (its results' dimensions where
    that axis was)."""
    from ._vmap import vmap
    ndim = len(arr.shape)
    axis = axis % ndim

    def func(x):
        return func1d(x, *args, **kwargs)
    for i in range(1, ndim - axis):
        func = vmap(func, in_axes=i, out_axes=-1)
    for i in range(axis):
        func = vmap(func, in_axes=0, out_axes=0)
    return func(arr)


__all__ += ["vectorize", "apply_along_axis"]


def ix_(*args):
    """jnp.ix_: the open mesh of 1-D index sequences (each reshaped to lie
    along its own dimension; a boolean one is its True positions), for
    x[jnp.ix_(rows, cols)]; numpy sequences stay numpy (static indices)."""
    n = len(args)
    out = []
    for k, a in enumerate(args):
        shape = (1,) * k + (-1,) + (1,) * (n - k - 1)
        if hasattr(a, "type") or isinstance(a, _Array):
            if len(a.shape) != 1:
                raise ValueError(f"Arguments to jax.numpy.ix_ must be 1-dimensional, got "
                                 f"shape {tuple(a.shape)}")
            out.append(reshape(a, shape))  # noqa: F821
            continue
        v = _np.asarray(a)
        if v.ndim != 1:
            raise ValueError(f"Arguments to jax.numpy.ix_ must be 1-dimensional, got shape "
                             f"{v.shape}")
        if v.dtype == _np.bool_:
            v = v.nonzero()[0]
        out.append(v.astype(_np.int32 if v.size == 0 or v.dtype.kind in "iu" else v.dtype)
                   .reshape(shape))
    return tuple(out)


def put_along_axis(arr, indices, values, axis, inplace=True, *, mode=None):
    """jnp.put_along_axis (inplace=False, as JAX asks): values scattered
    into arr at indices along axis, the other dimensions' positions their
    own (take_along_axis's inverse)."""
    if inplace:
        raise ValueError("jax.numpy.put_along_axis cannot modify arrays in-place, because JAX "
                         "arrays are immutable. Pass inplace=False to instead return an "
                         "updated array.")
    if axis is None:
        return reshape(put_along_axis(reshape(arr, (-1,)), reshape(indices, (-1,)),  # noqa: F821
                                      values, 0, inplace=False, mode=mode), arr.shape)
    nd = len(arr.shape)
    axis = axis % nd
    if len(_np.shape(indices)) != nd:
        raise ValueError(f"indices and arr must have the same number of dimensions; "
                         f"{len(_np.shape(indices))} vs. {nd}")
    key = tuple(indices if d == axis else
                _np.arange(arr.shape[d], dtype=_np.int32).reshape(
                    (1,) * d + (-1,) + (1,) * (nd - d - 1)) for d in range(nd))
    return arr.at[key].set(values, mode=mode)


__all__ += ["ix_", "put_along_axis"]


def save(file, arr, allow_pickle=True):
    """jnp.save: numpy's, of the array's values (an Array fetched)."""
    _np.save(file, _np.asarray(arr), allow_pickle=allow_pickle)


def savez(file, *args, **kwds):
    """jnp.savez: numpy's, of the arrays' values."""
    _np.savez(file, *[_np.asarray(a) for a in args], **{k: _np.asarray(v) for k, v in
                                                          kwds.items()})


def load(file, *args, **kwargs):
    """jnp.load: numpy's, an array read as jnp.asarray makes it (numpy with
    no mesh set, a replicated Array on the context mesh); archives (.npz)
    as numpy's."""
    out = _np.load(file, *args, **kwargs)
    return asarray(out) if isinstance(out, _np.ndarray) else out  # noqa: F821


__all__ += ["save", "savez", "load"]


@_at_once
def divmod(x1, x2):  # noqa: A001 (jnp.divmod)
    """jnp.divmod: (floor_divide(x1, x2), remainder(x1, x2)), as Python's."""
    return floor_divide(x1, x2), mod(x1, x2)  # noqa: F821


__all__ += ["divmod"]

# the array API's names of the same functions, as jnp has them
acos, acosh, asin, asinh = arccos, arccosh, arcsin, arcsinh  # noqa: F821
atan, atan2, atanh, pow = arctan, arctan2, arctanh, power  # noqa: F821,A001
# numpy's type aliases (jnp.float_ is float64, jnp.int_ int64, as JAX's with x64)
float_, double, single = float64, float64, float32
int_, uint = int64, _scalar_type(_np.uint64)
s_, index_exp = _np.s_, _np.index_exp
printoptions, get_printoptions, set_printoptions = (_np.printoptions, _np.get_printoptions,
                                                    _np.set_printoptions)
__all__ += ["acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "pow", "float_",
            "double", "single", "int_", "uint", "s_", "index_exp", "printoptions",
            "get_printoptions", "set_printoptions"]


def top_k(operand, k):
    """jnp.top_k: lax.top_k."""
    from .lax import top_k as _top_k
    return _top_k(operand, k)


def isrealobj(x):
    """jnp.isrealobj: shmap's arrays are never complex."""
    return not iscomplexobj(x)


def iterable(y):
    """jnp.iterable: whether iter(y) works (an array of rank 0 is not)."""
    try:
        iter(y)
    except TypeError:
        return False
    return True


@_at_once
def array_equiv(a1, a2):
    """jnp.array_equiv: the shapes broadcast and the elements are equal."""
    try:
        shape_ = broadcast_shapes(_np.shape(a1), _np.shape(a2))
    except ValueError:
        return False
    return all(equal(broadcast_to(a1, shape_), broadcast_to(a2, shape_)))  # noqa: F821


@_at_once
def diagflat(v, k=0):
    """jnp.diagflat: v raveled as the k-th diagonal of a square matrix."""
    return diag(reshape(v, (-1,)), k)  # noqa: F821


def fromfunction(function, shape, *, dtype=float, **kwargs):
    """jnp.fromfunction: function of the index grids of shape (as JAX's, by
    vmap over each dimension; here of meshgrid's arrays, the same values)."""
    grids = indices(shape, dtype=_canon_dtype(dtype))  # noqa: F821
    return function(*grids, **kwargs)


@_at_once
def histogram_bin_edges(a, bins=10, range=None, weights=None):
    """jnp.histogram_bin_edges: histogram's edges."""
    dt = _inexact(a.dtype)
    return _bin_edges(astype(a, dt), bins, range, dt)  # noqa: F821


def apply_over_axes(func, a, axes):
    """jnp.apply_over_axes: func(a, axis) over each axis in turn, keeping
    its dimension (expand_dims when func drops it), as numpy's."""
    for axis in axes:
        b = func(a, axis)
        if len(b.shape) == len(a.shape):
            a = b
        elif len(b.shape) == len(a.shape) - 1:
            a = expand_dims(b, axis)  # noqa: F821
        else:
            raise ValueError("function is not returning an array of the correct shape")
    return a


def array_repr(arr, max_line_width=None, precision=None, suppress_small=None):
    """jnp.array_repr: numpy's of the values."""
    return _np.array_repr(_np.asarray(arr), max_line_width, precision, suppress_small)


def array_str(a, max_line_width=None, precision=None, suppress_small=None):
    """jnp.array_str: numpy's of the values."""
    return _np.array_str(_np.asarray(a), max_line_width, precision, suppress_small)


def einsum_path(subscripts, *operands, optimize="greedy"):
    """jnp.einsum_path: numpy's (shapes only matter)."""
    return _np.einsum_path(subscripts, *[_np.empty(_np.shape(o)) for o in operands],
                           optimize=optimize)


def frombuffer(buffer, dtype=float, count=-1, offset=0):
    """jnp.frombuffer: numpy's, as jnp.asarray makes it."""
    return asarray(_np.frombuffer(buffer, _canon_dtype(dtype), count, offset))  # noqa: F821


def fromiter(iterable_, dtype, count=-1):
    """jnp.fromiter: numpy's, as jnp.asarray makes it."""
    return asarray(_np.fromiter(iterable_, _canon_dtype(dtype), count))  # noqa: F821


def fromfile(*args, **kwargs):
    """jnp.fromfile: numpy's, as jnp.asarray makes it."""
    return asarray(_np.fromfile(*args, **kwargs))  # noqa: F821


def fromstring(string, dtype=float, count=-1, *, sep):
    """jnp.fromstring: numpy's (text with a separator), as jnp.asarray makes it."""
    return asarray(_np.fromstring(string, _canon_dtype(dtype), count, sep=sep))  # noqa: F821


@_at_once
def angle(z, deg=False):
    """jnp.angle of real values (shmap's are never complex): 0, or pi where
    negative (NaN stays NaN)."""
    z = astype(z, _inexact(z.dtype)) if not _np.issubdtype(z.dtype, _np.inexact) else z  # noqa
    r = _where(z < 0, _np.asarray(_np.pi, z.dtype), zeros_like(z))  # noqa: F821
    r = _where(isnan(z), z, r)
    return r * _np.asarray(180 / _np.pi, z.dtype) if deg else r


__all__ += ["top_k", "isrealobj", "iterable", "array_equiv", "diagflat", "fromfunction",
            "histogram_bin_edges", "apply_over_axes", "array_repr", "array_str",
            "einsum_path", "frombuffer", "fromiter", "fromfile", "fromstring", "angle"]


# ---- set operations, array helpers, floating-point bits ---------------------------------


def _arraylike(name, *args):
    """JAX's ensure_arraylike: arrays (Arrays, traced values, numpy arrays)
    and scalars, the scalars as numpy values; anything else (a list) its
    TypeError."""
    out = []
    for i, a in enumerate(args):
        if isinstance(a, (numbers.Number, _np.generic)):
            a = _np.asarray(a)
        elif not (hasattr(a, "shape") and hasattr(a, "dtype")):
            raise TypeError(f"{name} requires ndarray or scalar arguments, got {type(a)} at "
                            f"position {i}.")
        out.append(a)
    return tuple(out)


def _flat(a):
    """a (an array or a scalar) flattened and unsharded (sort and the set
    operations' uneven slices ask for it)."""
    return _unshard(ravel(asarray(a)))


def _flat_pair(ar1, ar2):
    """ar1 and ar2 flattened and unsharded, in the dtype they promote to."""
    a1, a2 = _flat(ar1), _flat(ar2)
    dt = _promote(a1.dtype, a2.dtype)
    return tuple(a if a.dtype == dt else astype(a, dt) for a in (a1, a2))  # noqa: F821


def _get_fill(arr, idx, fill):
    """JAX's arr.at[idx].get(mode='fill', fill_value=fill) for 1-D arr and
    indices that are not negative: fill where idx is past the end."""
    if arr.shape[0] == 0:
        return full(tuple(idx.shape), fill, dtype=arr.dtype)  # noqa: F821
    return where(idx < arr.shape[0], _gather(arr, idx), fill)  # noqa: F821


def _set_size(ar1, ar2, assume_unique, count):
    """The length of a set operation's result when no size= is given:
    count(m, ar1, ar2) computed now outside a trace (_static_int); inside
    one JAX's refusal: jnp.unique's ConcretizationTypeError, or with
    assume_unique the boolean mask JAX indexes with (x[mask], refused)."""
    if getattr(_state, "builder", None) is not None:
        x = ravel(asarray(ar1))
        if not assume_unique:
            unique(x)
        x[x == x]  # (the refusal of a traced boolean mask)
    return _static_int((ar1, ar2), count, "", "")


def _isin_impl(element, test_elements, invert, method, assume_unique):
    """JAX's _in1d, in element's shape: whether each element is in
    test_elements (both in the dtype they promote to) by method
    'compare_all' ('auto'), 'binary_search' or 'sort' (the same answers)."""
    if method not in ("auto", "compare_all", "binary_search", "sort"):
        raise ValueError(f"method={method!r} is not implemented; options are 'compare_all', "
                         f"'binary_search', 'sort', and 'auto'")
    a1, a2 = asarray(element), _flat(test_elements)
    dt = _promote(a1.dtype, a2.dtype)
    a1, a2 = (a if a.dtype == dt else astype(a, dt) for a in (a1, a2))  # noqa: F821
    shape = tuple(a1.shape)
    if math.prod(shape) == 0 or a2.shape[0] == 0:
        return full(shape, bool(invert), dtype=_np.bool_)  # noqa: F821
    if method in ("auto", "compare_all"):
        e = expand_dims(a1, -1)  # noqa: F821
        return all(e != a2, axis=-1) if invert else any(e == a2, axis=-1)  # noqa: F821
    if method == "binary_search":
        s = sort(a2)
        found = _gather(s, searchsorted(s, a1))  # (clamped, as JAX's gather)
        return a1 != found if invert else a1 == found
    a1 = _flat(a1)  # 'sort': the values sorted together, neighbours compared
    n1 = a1.shape[0]
    ind_out = None
    if not assume_unique:
        a1, ind_out = _unique_impl(a1, False, True, False, True, n1, max(a2))  # noqa: F821
    both = concatenate((a1, a2))  # noqa: F821
    perm = argsort(both)
    aux = _gather(both, perm)
    same = aux[1:] != aux[:-1] if invert else aux[1:] == aux[:-1]
    r = full((n1,), bool(invert), dtype=_np.bool_).at[perm[:-1]].set(same)  # noqa: F821
    return reshape(r if ind_out is None else _gather(r, ind_out), shape)  # noqa: F821


_isin_at_once = _at_once(_isin_impl)


def isin(element, test_elements, assume_unique=False, invert=False, *, method="auto"):
    """jnp.isin: a bool array of element's shape, whether each entry is
    among test_elements (JAX's _in1d: every pair compared by default;
    method 'binary_search' or 'sort' give the same answers)."""
    element, test_elements = _arraylike("isin", element, test_elements)
    return _isin_at_once(element, test_elements, bool(invert), method, bool(assume_unique))


def _unique_sized(a, return_index=False):
    """JAX's _unique(a, size=a.size, return_true_size=True) for the set
    operations: the sorted distinct values (NaNs one) padded to a's length,
    their first indices with return_index, and how many there are."""
    if a.shape[0] == 0:
        return (a, zeros((0,), _np.int32), 0) if return_index else (a, 0)  # noqa: F821
    return _unique_impl(a, return_index, False, False, True, a.shape[0], None, True)


def _set_fill(vals, num_results, size, fill_value):
    """The entries of vals past num_results as JAX's set operations fill
    them: fill_value, or by default the smallest result (vals' max, then
    the min of that, as JAX writes it)."""
    valid = arange(size, dtype=_np.int32) < num_results  # noqa: F821
    if fill_value is None:
        vals = where(valid, vals, max(vals))  # noqa: F821
        return where(valid, vals, min(vals))  # noqa: F821
    return where(valid, vals, _scalar(fill_value, vals.dtype))  # noqa: F821


def _setdiff1d_impl(ar1, ar2, assume_unique, size, fill_value, count=False):
    arr1 = _flat(ar1)
    n = arr1.shape[0]
    fill = _scalar(0 if fill_value is None else fill_value, arr1.dtype)
    if n == 0:
        return 0 if count else broadcast_to(fill, (size,))  # noqa: F821
    if not assume_unique:
        arr1, n_true = _unique_sized(arr1)
    mask = _isin_impl(arr1, ar2, True, "auto", assume_unique)
    iota = arange(n, dtype=_np.int32)  # noqa: F821
    if count:  # as without size: the distinct values not in ar2
        return sum(astype(mask if assume_unique else mask & (iota < n_true), _np.int32))  # noqa
    if not assume_unique:  # JAX's: unique's padding (copies of the first value) masked out
        n_unique = n + 1 - sum(astype(arr1 == arr1[0], _np.int32))  # noqa: F821
        mask = where(iota < n_unique, mask, False)  # noqa: F821
    found = _gather(arr1, _nonzero_impl(mask, size, None)[0])
    return where(arange(size, dtype=_np.int32) < sum(astype(mask, _np.int32)), found, fill)  # noqa


_setdiff1d_at_once = _at_once(_setdiff1d_impl)


def setdiff1d(ar1, ar2, assume_unique=False, *, size=None, fill_value=None):
    """jnp.setdiff1d: the sorted distinct values of ar1 (flattened) not in
    ar2, by JAX's algorithm: the first size of them, the rest fill_value
    (0 by default, as JAX's code has it). Inside a traced function size=
    is required (JAX's ConcretizationTypeError); outside one the count is
    computed first, as JAX computes eagerly."""
    ar1, ar2 = _arraylike("setdiff1d", ar1, ar2)
    if size is None:
        size = _static_int((ar1, ar2), lambda m, a, b: len(_np.setdiff1d(a, b, assume_unique))
                           if m is _np else _setdiff1d_impl(a, b, assume_unique, 0, None, True),
                           "The error arose in setdiff1d()", _short_type(ar1.dtype, ar1.shape))
    return _setdiff1d_at_once(ar1, ar2, bool(assume_unique), int(size), fill_value)


_flat_concat = _at_once(lambda ar1, ar2: concatenate(_flat_pair(ar1, ar2)))  # noqa: F821


def union1d(ar1, ar2, *, size=None, fill_value=None):
    """jnp.union1d: unique of both arrays' values (size=, fill_value= as
    unique's). Inside a traced function size= is required (JAX's error)."""
    ar1, ar2 = _arraylike("union1d", ar1, ar2)
    if size is None:
        for a in (ar1, ar2):
            _concrete(a, "The error arose in union1d()", _short_type(a.dtype, a.shape))
    return unique(_flat_concat(ar1, ar2), size=size, fill_value=fill_value)


def _setxor1d_impl(ar1, ar2, assume_unique, size, fill_value, count=False):
    arr1, arr2 = _flat_pair(ar1, ar2)
    n = arr1.shape[0] + arr2.shape[0]
    if n == 0:
        return 0 if count else _set_fill(zeros((size,), arr1.dtype), 0, size, fill_value)  # noqa
    true = full((1,), True, dtype=_np.bool_)  # noqa: F821
    if assume_unique:
        aux = sort(concatenate((arr1, arr2)))  # noqa: F821
        flag = concatenate((true, aux[1:] != aux[:-1], true))  # noqa: F821
    else:  # the distinct values of each, those of ar2 after those of ar1, sorted
        u1, n1 = _unique_sized(arr1)
        u2, n2 = _unique_sized(arr2)
        arr = dynamic_update_slice(concatenate((u1, zeros_like(u2))), u2, (n1,))  # noqa: F821
        num_unique = n1 + n2
        mask = arange(n + 1, dtype=_np.int32) < num_unique + 1  # noqa: F821
        aux = _gather(arr, lexsort((arr, logical_not(mask[1:]))))  # noqa: F821
        flag = concatenate((true, aux[1:] != aux[:-1], ~true))  # noqa: F821
        flag = mask & where(arange(n + 1, dtype=_np.int32) == num_unique, True, flag)  # noqa
    aux_mask = flag[1:] & flag[:-1]
    num_results = sum(astype(aux_mask, _np.int32))  # noqa: F821
    if count:
        return num_results
    vals = _get_fill(aux, _nonzero_impl(aux_mask, size, n)[0], 0)
    return _set_fill(vals, num_results, size, fill_value)


_setxor1d_at_once = _at_once(_setxor1d_impl)


def setxor1d(ar1, ar2, assume_unique=False, *, size=None, fill_value=None):
    """jnp.setxor1d: the sorted values in exactly one of the arrays, by
    JAX's algorithm: the first size of them, the rest fill_value (by
    default the smallest of them). Inside a traced function size= is
    required (JAX's error: jnp.unique's)."""
    ar1, ar2 = _arraylike("setxor1d", ar1, ar2)
    if size is None:
        size = _set_size(ar1, ar2, assume_unique, lambda m, a, b: len(
            _np.setxor1d(a.ravel(), b.ravel(), assume_unique)) if m is _np else
            _setxor1d_impl(a, b, assume_unique, 0, None, True))
    return _setxor1d_at_once(ar1, ar2, bool(assume_unique), int(size), fill_value)


def _intersect1d_impl(ar1, ar2, assume_unique, return_indices, size, fill_value, count=False):
    arr1, arr2 = _flat_pair(ar1, ar2)
    s1, s2 = arr1.shape[0], arr2.shape[0]
    n = s1 + s2
    if n == 0:
        if count:
            return 0
        vals = _set_fill(zeros((size,), arr1.dtype), 0, size, fill_value)  # noqa: F821
        none = zeros((size,), _np.int32)  # noqa: F821
        return (vals, none, none) if return_indices else vals
    if assume_unique:
        ind1, ind2, n1 = None, None, s1
        arr = concatenate((arr1, arr2))  # noqa: F821
        perm = argsort(arr)
        mask = full((n,), True, dtype=_np.bool_)  # noqa: F821
    else:  # the distinct values of each, those of ar2 after those of ar1, sorted
        arr1, ind1, n1 = _unique_sized(arr1, True)
        arr2, ind2, n2 = _unique_sized(arr2, True)
        arr = dynamic_update_slice(concatenate((arr1, zeros_like(arr2))), arr2, (n1,))  # noqa
        mask = arange(n, dtype=_np.int32) < n1 + n2  # noqa: F821
        perm = lexsort((arr, logical_not(mask)))
    aux = _gather(arr, perm)
    aux_mask = (aux[1:] == aux[:-1]) & mask[1:]
    num_results = sum(astype(aux_mask, _np.int32))  # noqa: F821
    if count:
        return num_results
    at = _nonzero_impl(aux_mask, size, n)[0]
    vals = _set_fill(_get_fill(aux, at, 0), num_results, size, fill_value)
    if not return_indices:
        return vals
    valid = arange(size, dtype=_np.int32) < num_results  # noqa: F821
    i1 = where(valid, _get_fill(perm, at, s1), s1)  # noqa: F821
    i2 = where(valid, _get_fill(perm, at + 1, s2) - n1, s2)  # noqa: F821
    if not assume_unique:
        i1, i2 = _get_fill(ind1, i1, s1), _get_fill(ind2, i2, s2)
    return vals, i1, i2


_intersect1d_at_once = _at_once(_intersect1d_impl)


def intersect1d(ar1, ar2, assume_unique=False, return_indices=False, *, size=None,
                fill_value=None):
    """jnp.intersect1d: the sorted values in both arrays, by JAX's
    algorithm: the first size of them, the rest fill_value (by default the
    smallest of them); with return_indices also where each first occurs in
    the flattened ar1 and ar2 (past the results: their lengths). Inside a
    traced function size= is required (JAX's error: jnp.unique's)."""
    ar1, ar2 = _arraylike("intersect1d", ar1, ar2)
    if size is None:
        size = _set_size(ar1, ar2, assume_unique, lambda m, a, b: len(
            _np.intersect1d(a.ravel(), b.ravel(), assume_unique)) if m is _np else
            _intersect1d_impl(a, b, assume_unique, False, 0, None, True))
    return _intersect1d_at_once(ar1, ar2, bool(assume_unique), bool(return_indices), int(size),
                                fill_value)


class _UniqueAllResult(typing.NamedTuple):
    """jnp.unique_all's result."""
    values: typing.Any
    indices: typing.Any
    inverse_indices: typing.Any
    counts: typing.Any


class _UniqueCountsResult(typing.NamedTuple):
    """jnp.unique_counts's result."""
    values: typing.Any
    counts: typing.Any


class _UniqueInverseResult(typing.NamedTuple):
    """jnp.unique_inverse's result."""
    values: typing.Any
    inverse_indices: typing.Any


def unique_values(x, /, *, size=None, fill_value=None):
    """jnp.unique_values: unique(x, equal_nan=False) (each NaN its own
    value)."""
    (x,) = _arraylike("unique_values", x)
    return unique(x, equal_nan=False, size=size, fill_value=fill_value)


def unique_counts(x, /, *, size=None, fill_value=None):
    """jnp.unique_counts: (values, counts) of unique(x, equal_nan=False)."""
    (x,) = _arraylike("unique_counts", x)
    values, counts = unique(x, return_counts=True, equal_nan=False, size=size,
                            fill_value=fill_value)
    return _UniqueCountsResult(values=values, counts=counts)


def unique_inverse(x, /, *, size=None, fill_value=None):
    """jnp.unique_inverse: (values, inverse_indices) of unique(x,
    equal_nan=False), the inverse in x's shape."""
    (x,) = _arraylike("unique_inverse", x)
    values, inverse = unique(x, return_inverse=True, equal_nan=False, size=size,
                             fill_value=fill_value)
    return _UniqueInverseResult(values=values, inverse_indices=reshape(inverse, shape(x)))  # noqa


def unique_all(x, /, *, size=None, fill_value=None):
    """jnp.unique_all: (values, indices, inverse_indices, counts) of
    unique(x, equal_nan=False), the inverse in x's shape."""
    (x,) = _arraylike("unique_all", x)
    values, indices, inverse, counts = unique(
        x, return_index=True, return_inverse=True, return_counts=True, equal_nan=False,
        size=size, fill_value=fill_value)
    return _UniqueAllResult(values=values, indices=indices,
                            inverse_indices=reshape(inverse, shape(x)), counts=counts)  # noqa


def _block(xs):
    """JAX's _block: (the array, its list depth)."""
    if isinstance(xs, tuple):
        raise ValueError(f"jax.numpy.block does not allow tuples, got {xs}")
    if not isinstance(xs, list):
        return asarray(xs), 1
    if not xs:
        raise ValueError("jax.numpy.block does not allow empty list arguments")
    parts, depths = zip(*[_block(x) for x in xs])
    if builtins.any(d != depths[0] for d in depths[1:]):
        raise ValueError("Mismatched list depths in jax.numpy.block")
    rank = builtins.max(depths[0], builtins.max(len(x.shape) for x in parts))
    parts = [reshape(x, (1,) * (rank - len(x.shape)) + tuple(x.shape))  # noqa: F821
             if len(x.shape) < rank else x for x in parts]
    return concatenate(parts, axis=-depths[0]), depths[0] + 1  # noqa: F821


@_at_once
def block(arrays):
    """jnp.block: nested lists of arrays joined, the innermost lists along
    the last axis, each outer level along the axis before (the blocks
    given leading 1s up to the deepest rank); tuples refused, as JAX's."""
    return _block(arrays)[0]


def _host_geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
    dt = dtype or _inexact(_promote(_dtype_of(start), _dtype_of(stop)))
    return _np.geomspace(start, stop, num, endpoint=endpoint, axis=axis).astype(dt)


@_creation(_host_geomspace)
def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
    """jnp.geomspace as JAX computes it: sign(start) * logspace of
    log10(start / sign) .. log10(stop / sign) (start and stop numbers or
    arrays), along a new axis; float32 unless the bounds or dtype say."""
    dt = _np.dtype(dtype) if dtype is not None else \
        _inexact(_promote(_dtype_of(start), _dtype_of(stop)))
    ct = _inexact(dt)
    start, stop = _scalar(start, ct), _scalar(stop, ct)
    sgn = sign(start)  # noqa: F821
    res = sgn * logspace(log10(start / sgn), log10(stop / sgn), num, endpoint=endpoint,
                         base=10.0, dtype=ct)
    return astype(moveaxis(res, 0, axis), dt)  # noqa: F821


@_at_once
def rollaxis(a, axis, start=0):
    """jnp.rollaxis: moveaxis of axis to start (to start - 1 when start
    lies past it), as JAX's."""
    nd = len(a.shape)
    if not -nd <= axis < nd:
        raise ValueError(f"axis {axis} is out of bounds for array of dimension {nd}")
    axis %= nd
    if not -nd <= start <= nd:
        raise ValueError(f"start={start} must satisfy {-nd}<=start<={nd}")
    if start < 0:
        start += nd
    if start > axis:
        start -= 1
    return moveaxis(a, axis, start)


_RAVEL_RAISE = ("The error occurred because ravel_multi_index was jit-compiled with "
                "mode='raise'. Use mode='wrap' or mode='clip' instead.")


@_at_once
def _ravel_multi_index_impl(multi_index, dims, mode, order, dtype):
    idx = [asarray(i) for i in multi_index]
    if mode == "clip":
        idx = [clip(i, 0, d - 1) for i, d in zip(idx, dims)]
    elif mode == "wrap":
        idx = [mod(i, d) for i, d in zip(idx, dims)]  # noqa: F821
    strides = _np.cumprod((1,) + dims[:-1]) if order == "F" else \
        _np.cumprod((1,) + dims[1:][::-1])[::-1]
    result = zeros((), dtype)  # noqa: F821
    for i, st in zip(idx, strides):
        result = result + astype(i, dtype) * int(st)  # noqa: F821
    return result


def ravel_multi_index(multi_index, dims, mode="raise", order="C", *, dtype=None):
    """jnp.ravel_multi_index: the flat indices of the coordinates in
    multi_index into an array of shape dims (order 'C' or 'F'); mode
    'raise' (coordinates checked now: inside a traced function JAX's
    ConcretizationTypeError), 'clip', 'wrap' or 'ignore'. The dtype is the
    indices' (a Python int weak), as JAX's."""
    assert len(multi_index) == len(dims), \
        f"len(multi_index)={len(multi_index)} != len(dims)={len(dims)}"
    dims = tuple(int(d) for d in dims)
    idx = [_to_device(i) if isinstance(i, _np.ndarray) else i for i in multi_index]
    _arraylike("ravel_multi_index", *idx)  # (checked; Python ints stay weak for the dtype)
    dt = result_type(0, *idx) if dtype is None else _np.dtype(dtype)
    if not _np.issubdtype(dt, _np.integer):
        raise ValueError(f"dtype={dt!r} is not an integer type.")
    if math.prod(dims) - 1 > _np.iinfo(dt).max:
        raise ValueError(f"jnp.ravel_multi_index: dtype={dt!r} not large enough to hold "
                         f"flattened index for dims={dims}. Use the dtype argument to pass a "
                         f"suitable dtype (e.g. dtype=np.min_scalar_type(prod(dims))).")
    idx = list(_arraylike("ravel_multi_index", *idx))
    for i in idx:
        if mode == "raise":
            _concrete(i, _RAVEL_RAISE, _short_type(i.dtype, i.shape))
        if not _np.issubdtype(i.dtype, _np.integer):
            raise TypeError("only int indices permitted")
    if mode == "raise":
        if _static_int(tuple(idx), lambda m, *ix: builtins.sum(
                m.sum(((i < 0) | (i >= d)) * 1) for i, d in zip(ix, dims)), _RAVEL_RAISE, ""):
            raise ValueError("invalid entry in coordinates array")
    elif mode not in ("clip", "wrap", "ignore"):
        raise ValueError(f"invalid mode={mode!r}. Expected 'raise', 'wrap', 'clip', or "
                         f"'ignore'.")
    if order not in ("C", "F"):
        raise ValueError(f"invalid order={order!r}. Expected 'C' or 'F'")
    return _ravel_multi_index_impl(idx, dims, mode, order, dt)


def _trim_bounds(m, x):
    """For each axis of x: whether any entry is nonzero there, and the first
    nonzero position from the front and from the back (trim_zeros's)."""
    out = []
    for ax in range(len(x.shape)):
        nz = x != 0
        others = tuple(d for d in range(len(x.shape)) if d != ax)
        mask = (m.any(nz, axis=others) if others else nz) * 1
        out += [m.max(mask), m.argmax(mask), m.argmax(m.flip(mask, 0))]
    return m.stack(out)


def trim_zeros(filt, trim="fb", axis=None):
    """jnp.trim_zeros: filt without its leading ('f' in trim) and trailing
    ('b') slices of zeros along axis (every axis by default). The result's
    shape depends on the values: filt must be concrete (inside a traced
    function JAX's ConcretizationTypeError), the bounds found now."""
    (filt,) = _arraylike("trim_zeros", filt)
    _concrete(filt, "Error arose in the `filt` argument of trim_zeros()",
              _short_type(filt.dtype, filt.shape))
    nd = len(filt.shape)
    axes = set(range(nd)) if axis is None else {
        a % nd for a in ((axis,) if isinstance(axis, numbers.Integral) else axis)}
    if not axes or ("f" not in trim.lower() and "b" not in trim.lower()):
        return filt
    b = _concrete_value(filt, _trim_bounds, "", "").reshape(nd, 3).tolist()
    key = []
    for ax, (nonzero_, front, back) in enumerate(b):
        if ax not in axes:
            key.append(builtins.slice(None))
        elif not nonzero_:
            key.append(builtins.slice(0, 0))
        else:
            key.append(builtins.slice(int(front) if "f" in trim.lower() else None,
                                      filt.shape[ax] - int(back) if "b" in trim.lower()
                                      else None))
    return filt[tuple(key)]


def _grid(key, sparse):
    """JAX's mgrid / ogrid of key (a slice or a tuple of them): each slice
    an arange (a complex step: a linspace of that many values), promoted
    together, on an 'ij' grid (sparse: each of shape 1 but along its axis).
    Numpy arrays outside a trace with no mesh (arange's and linspace's)."""
    def one(s):
        start, stop, step = s.start or 0, s.stop, s.step or 1
        if _np.iscomplex(step):
            return linspace(start, stop, int(builtins.abs(step)))
        return arange(start, stop, step)
    if isinstance(key, builtins.slice):
        return one(key)
    outs = [one(k) for k in key]
    if not outs:
        return [] if sparse else arange(0)
    dt = _jax_promote(*[o.dtype for o in outs])
    outs = [o if o.dtype == dt else o.astype(dt) for o in outs]
    n = len(outs)
    outs = [o.reshape(tuple(o.shape[0] if d == i else 1 for d in range(n)))
            for i, o in enumerate(outs)]
    if sparse:
        return outs
    shape = tuple(o.shape[i] for i, o in enumerate(outs))
    m = _np if isinstance(outs[0], _np.ndarray) else _this
    return m.stack([m.broadcast_to(o, shape) for o in outs])


_traced_grid = _creation(_grid)(_grid)


class _Grid:
    """jnp.mgrid (dense) and jnp.ogrid (sparse): grid[start:stop:step, ...]."""

    def __init__(self, sparse):
        self.sparse = sparse

    def __getitem__(self, key):
        return _traced_grid(key, self.sparse)


mgrid, ogrid = _Grid(False), _Grid(True)


def _frexp_abs(a):
    """frexp of a >= 0 where a is finite and not 0 (elsewhere meaningless):
    (mantissa in [0.5, 1), exponent int32). JAX reads the exponent's bits
    (a bitcast, which shmap has not); here lax's binade split scales a by
    powers of two, exactly, into [1, 2), a subnormal made normal first (as
    JAX's _normalize_float); half floats in float32."""
    from .lax import _FLOAT_BITS, _Binade, _dtype_name, _work
    se, sm = _FLOAT_BITS[_dtype_name(a)]
    w = _work(a)
    sub = w < 2.0 ** (2 - 2 ** (se - 1))  # below the smallest normal of a's dtype
    b = _Binade(where(sub, w * 2.0 ** sm, w), (se, sm))  # noqa: F821
    e = b.exponent() - astype(sub, _np.int32) * sm  # noqa: F821
    return astype(b.y * 0.5, a.dtype), e + 1  # noqa: F821


@_at_once
def frexp(x, /):
    """jnp.frexp: (mantissa, exponent), x = mantissa * 2**exponent with
    |mantissa| in [0.5, 1) (x itself, exponent 0, where x is 0, inf or
    NaN); float32 for integers, the exponent int32."""
    x = _scalar(x, _inexact(_dtype_of(x)))
    m, e = _frexp_abs(abs(x))  # noqa: F821
    special = isinf(x) | isnan(x) | (x == 0)
    return where(special, x, where(x < 0, -m, m)), where(special, 0, e)  # noqa: F821


@_at_once
def nextafter(x, y, /):
    """jnp.nextafter: lax.nextafter of x and y promoted to their float dtype
    (a Python number weak, as JAX's)."""
    from .lax import nextafter as _lax_nextafter
    dt = _inexact(result_type(x, y))
    return _lax_nextafter(_scalar(x, dt), _scalar(y, dt))


@_at_once
def spacing(x, /):
    """jnp.spacing: nextafter(x, copysign(inf, x)) - x, the smallest
    subnormal (signed as x) where that is 0; for float16 nextafter(x,
    inf) - x, as JAX's."""
    x = _scalar(x, _inexact(_dtype_of(x)))
    if x.dtype == _np.float16:
        return nextafter(x, _np.inf) - x
    r = nextafter(x, copysign(full_like(x, _np.inf), x)) - x
    return where(r == 0, copysign(full_like(x, _np.finfo(x.dtype).smallest_subnormal), x),  # noqa
                 r)


@_at_once
def bitwise_count(x, /):
    """jnp.bitwise_count: the set bits of |x| (lax.population_count), uint8;
    bool counts as int32."""
    x = _scalar(x, _np.int32) if _dtype_of(x) == _np.bool_ else x
    if not _np.issubdtype(x.dtype, _np.integer):
        raise TypeError(f"population_count does not accept dtype {_np.dtype(x.dtype).name}. "
                        f"Accepted dtypes are subtypes of integer.")
    from .lax import population_count
    return astype(population_count(abs(x)), _np.uint8)  # noqa: F821


def _bitorder(bitorder):
    if bitorder not in ("little", "big"):
        raise ValueError("'order' must be either 'little' or 'big'")
    bits = _np.arange(8, dtype=_np.uint8)
    return bits[::-1].copy() if bitorder == "big" else bits


@_at_once
def packbits(a, axis=None, bitorder="big"):
    """jnp.packbits: the entries' truth (a != 0) as bits, eight to a uint8
    along axis (the flattened array by default; zeros pad the last byte),
    the first the highest bit ('big') or the lowest ('little')."""
    if not (_np.issubdtype(a.dtype, _np.integer) or a.dtype == _np.bool_):
        raise TypeError("Expected an input array of integer or boolean data type")
    bits = asarray(_bitorder(bitorder))
    arr = astype(a != 0, _np.uint8)  # noqa: F821
    if axis is None:
        arr, axis = ravel(arr), 0
    arr = swapaxes(arr, axis, -1)
    rem = arr.shape[-1] % 8
    if rem:
        arr = pad(arr, ((0, 0),) * (len(arr.shape) - 1) + ((0, 8 - rem),))
    arr = reshape(arr, tuple(arr.shape[:-1]) + (arr.shape[-1] // 8, 8))  # noqa: F821
    packed = astype(sum(left_shift(arr, bits), axis=-1), _np.uint8)  # noqa: F821
    return swapaxes(packed, axis, -1)


@_at_once
def unpackbits(a, axis=None, count=None, bitorder="big"):
    """jnp.unpackbits: each uint8 entry as its eight bits (uint8 0 or 1)
    along axis (the flattened array by default), highest first ('big') or
    lowest; count keeps that many bits (negative: drops them from the end),
    zeros past the end."""
    if a.dtype != _np.uint8:
        raise TypeError("Expected an input array of unsigned byte data type")
    bits = asarray(1 << _bitorder(bitorder).astype(_np.int32))
    arr = a
    if axis is None:
        arr, axis = ravel(arr), 0
    arr = swapaxes(arr, axis, -1)
    unpacked = astype((expand_dims(arr, -1) & bits) > 0, _np.uint8)  # noqa: F821
    unpacked = reshape(unpacked, tuple(unpacked.shape[:-2]) + (-1,))  # noqa: F821
    if count is not None:
        n = unpacked.shape[-1]
        if count > n:
            unpacked = pad(unpacked, ((0, 0),) * (len(unpacked.shape) - 1) + ((0, count - n),))
        else:
            unpacked = unpacked[..., :count]
    return swapaxes(unpacked, axis, -1)


@_at_once
def polyfit(x, y, deg, rcond=None, full=False, w=None, cov=False):
    """jnp.polyfit as JAX computes it: least squares (linalg.lstsq) of the
    Vandermonde matrix of x (weighted rows with w), its columns scaled to
    unit norm; full: (p, residuals, rank, singular values, rcond); cov:
    (p, the covariance, scaled by residuals / (len(x) - deg - 1) unless
    'unscaled')."""
    deg = int(deg)
    order = deg + 1
    if deg < 0:
        raise ValueError("expected deg >= 0")
    if len(x.shape) != 1:
        raise TypeError("expected 1D vector for x")
    if x.shape[0] == 0:
        raise TypeError("expected non-empty vector for x")
    if len(y.shape) < 1 or len(y.shape) > 2:
        raise TypeError("expected 1D or 2D array for y")
    if x.shape[0] != y.shape[0]:
        raise TypeError("expected x and y to have same length")
    if rcond is None:
        rcond = x.shape[0] * float(_np.finfo(x.dtype).eps)
    rcond = float(rcond)
    lhs, rhs = vander(x, order), y
    if w is not None:
        w = _scalar(w, _inexact(_dtype_of(w)))
        if len(w.shape) != 1:
            raise TypeError("expected a 1-d array for weights")
        if w.shape[0] != y.shape[0]:
            raise TypeError("expected w and y to have the same length")
        lhs = lhs * w[:, None]
        rhs = rhs * w[:, None] if len(rhs.shape) == 2 else rhs * w
    sq = sum(lhs * lhs, axis=0)  # noqa: F821
    scale = sqrt(sq if _np.issubdtype(sq.dtype, _np.floating) else astype(sq, _np.float32))  # noqa
    lhs = lhs / scale[None, :]
    c, resids, rank, s = linalg.lstsq(lhs, rhs, rcond)
    c = transpose(transpose(c) / scale[None, :]) if len(c.shape) > 1 else c / scale  # noqa
    if full:
        return c, resids, rank, s, asarray(rcond)
    if not cov:
        return c
    vbase = linalg.inv(matmul(transpose(lhs), lhs)) / outer(scale, scale)  # noqa: F821
    if cov == "unscaled":
        fac = asarray(1.0)
    else:
        if x.shape[0] <= order:
            raise ValueError("the number of data points must exceed order to scale the "
                             "covariance matrix")
        fac = resids / (x.shape[0] - order)
    fac = reshape(atleast_1d(fac), (-1,))  # noqa: F821
    if len(y.shape) == 1:
        return c, vbase * fac[None, :]
    return c, vbase[:, :, None] * fac[None, None, :]


__all__ += ["isin", "setdiff1d", "union1d", "setxor1d", "intersect1d", "unique_values",
            "unique_counts", "unique_inverse", "unique_all", "block", "geomspace", "rollaxis",
            "ravel_multi_index", "trim_zeros", "mgrid", "ogrid", "frexp", "nextafter",
            "spacing", "bitwise_count", "packbits", "unpackbits", "polyfit"]


# ---- the tail of jnp: i0, vector products, nan-scans, windows, polynomials, compress and
# extract, choose, put and place, index helpers, histogram2d / histogramdd ----------------


def i0(x):
    """jnp.i0: the modified Bessel function of order 0 (integers and bools
    as float32), shmap.scipy.special.i0's."""
    from .scipy import special
    return special.i0(x)


def _asarrays(*xs):
    """xs as arrays (numpy values to the device, or kept as numpy with no
    mesh set); traced values and Arrays as they are."""
    return tuple(x if hasattr(x, "type") else _to_device(_np.asarray(x)) for x in xs)


@_at_once
def vecdot(x1, x2, /, *, axis=-1, precision=None, preferred_element_type=None):
    """jnp.vecdot: the dot products of the vectors along axis (the others
    broadcast), as JAX's vdot over them."""
    x1, x2 = _asarrays(x1, x2)
    if x1.shape[axis] != x2.shape[axis]:
        raise ValueError(f"axes must match; got shapes {tuple(x1.shape)} and "
                         f"{tuple(x2.shape)} with axis={axis}")
    if preferred_element_type is not None:
        x1 = astype(x1, preferred_element_type)  # noqa: F821
        x2 = astype(x2, preferred_element_type)  # noqa: F821
    return sum(moveaxis(x1, axis, -1) * moveaxis(x2, axis, -1), axis=-1)  # noqa: F821


def _core_mismatch(sig, *xs):
    dims = {}
    for x, core in zip(xs, sig):
        if len(x.shape) < len(core):
            raise ValueError(f"input with shape {tuple(x.shape)} does not have enough "
                             f"dimensions for all core dimensions {core}")
        for name, n in zip(core, tuple(x.shape)[len(x.shape) - len(core):]):
            if dims.setdefault(name, n) != n:
                raise ValueError(f"inconsistent size for core dimension {name!r}: {n} vs "
                                 f"{dims[name]}")


@_at_once
def matvec(x1, x2, /):
    """jnp.matvec: the matrix-vector products of x1's last two dimensions
    with x2's last (the others broadcast)."""
    x1, x2 = _asarrays(x1, x2)
    _core_mismatch((("n", "m"), ("m",)), x1, x2)
    return matmul(x1, expand_dims(x2, -1))[..., 0]  # noqa: F821


@_at_once
def vecmat(x1, x2, /):
    """jnp.vecmat: the vector-matrix products of x1's last dimension with
    x2's last two (the others broadcast)."""
    x1, x2 = _asarrays(x1, x2)
    _core_mismatch((("n",), ("n", "m")), x1, x2)
    return matmul(expand_dims(x1, -2), x2)[..., 0, :]  # noqa: F821


def _cumulative_op(name):
    op = globals()[name]

    def f(a, axis=None, dtype=None, out=None):
        if out is not None:
            raise NotImplementedError(f"The 'out' argument to jnp.{name} is not supported")
        if axis is None and "@" in getattr(a, "type", ""):
            raise InvalidArgument(f"The input should be fully replicated when axis is not "
                                  f"specified to {name}. Got input type={a.type}")
        kw = {} if dtype is None else {"dtype": dtype}
        return op(a, **kw) if axis is None else op(a, axis=axis, **kw)
    f.__name__ = name
    f.__doc__ = (f"jnp.{name}: the op's scan along axis; of the flattened a when axis is None, "
                 f"which must then be replicated (JAX's ShardingTypeError).")
    return f


_cumsum_op = cumsum  # noqa: F821 (the op table's, for a flat scan of a sharded 1-D value)
cumsum, cumprod = _cumulative_op("cumsum"), _cumulative_op("cumprod")


def _nan_scan(name, scan, fill, a, axis, dtype, out):
    if out is not None:
        raise NotImplementedError(f"The 'out' argument to jnp.{name} is not supported")
    if _np.issubdtype(a.dtype, _np.floating):
        a = where(isnan(a), _np.asarray(fill, a.dtype).item(), a)  # noqa: F821
    return scan(a, axis=axis, dtype=dtype)


@_at_once
def nancumsum(a, axis=None, dtype=None, out=None):
    """jnp.nancumsum: cumsum with NaNs taken as 0."""
    return _nan_scan("nancumsum", cumsum, 0, a, axis, dtype, out)  # noqa: F821


@_at_once
def nancumprod(a, axis=None, dtype=None, out=None):
    """jnp.nancumprod: cumprod with NaNs taken as 1."""
    return _nan_scan("nancumprod", cumprod, 1, a, axis, dtype, out)  # noqa: F821


def _window_len(M, name):
    """JAX's core.concrete_or_error(int, M, 'M argument of jnp.<name>')."""
    if hasattr(M, "type") and not hasattr(M, "sharding"):
        _concrete(M, f"M argument of jnp.{name}", _short_type(M.dtype, M.shape))
    return int(_np.asarray(M))


def _host_window(name):
    def host(M, *args):
        r = getattr(_np, name)(int(M), *[_np.asarray(a) for a in args])
        return _np.asarray(r, _np.float32)
    return host


def _window(name, formula):
    """A window of JAX's (float32, ones for M <= 1): formula(n, M) of
    n = arange(M) as float32."""
    @_creation(_host_window(name))
    def w(M, *args):
        M = _window_len(M, name)
        if M <= 1:
            return full((M,), 1, dtype=_np.float32)  # noqa: F821
        return formula(arange(M, dtype=_np.float32), M, *args)
    w.__name__ = w.__qualname__ = name
    return w


_PI = float(_np.pi)


def _blackman(n, M):
    return 0.42 - 0.5 * cos(2 * _PI * n / (M - 1)) + 0.08 * cos(4 * _PI * n / (M - 1))  # noqa


def _kaiser(n, M, beta):
    alpha = 0.5 * (M - 1)
    beta = _scalar(beta, _np.float32) if not isinstance(beta, float) else beta
    return i0(beta * sqrt(1 - ((n - alpha) / alpha) ** 2)) / i0(beta)  # noqa: F821


blackman = _window("blackman", _blackman)
bartlett = _window("bartlett", lambda n, M: 1 - abs(2 * n + 1 - M) / (M - 1))  # noqa: F821
hamming = _window("hamming", lambda n, M: 0.54 - 0.46 * cos(2 * _PI * n / (M - 1)))  # noqa
hanning = _window("hanning", lambda n, M: 0.5 * (1 - cos(2 * _PI * n / (M - 1))))  # noqa
_kaiser_w = _window("kaiser", _kaiser)


def kaiser(M, beta):
    """jnp.kaiser: i0(beta sqrt(1 - ((n - a) / a)^2)) / i0(beta), a = (M - 1) / 2."""
    return _kaiser_w(M, beta)


blackman.__doc__ = "jnp.blackman: 0.42 - 0.5 cos(2 pi n / (M-1)) + 0.08 cos(4 pi n / (M-1))."
bartlett.__doc__ = "jnp.bartlett: 1 - |2n + 1 - M| / (M - 1)."
hamming.__doc__ = "jnp.hamming: 0.54 - 0.46 cos(2 pi n / (M - 1))."
hanning.__doc__ = "jnp.hanning: 0.5 (1 - cos(2 pi n / (M - 1)))."


def _poly_inexact(*ps):
    """ps as arrays of their promoted inexact dtype (JAX's
    promote_dtypes_inexact)."""
    ps = _asarrays(*ps)
    dt = _inexact(_promote(*[p.dtype for p in ps]))
    return tuple(p if p.dtype == dt else astype(p, dt) for p in ps)  # noqa: F821


def _poly_order(m, what):
    if hasattr(m, "type") and not hasattr(m, "sharding"):
        _concrete(m, f"'m' argument of jnp.{what}", _short_type(m.dtype, m.shape))
    return int(m.__index__() if not hasattr(m, "shape") else _np.asarray(m).__index__())


@_at_once
def polyder(p, m=1):
    """jnp.polyder: the m-th derivative's coefficients (highest first)."""
    m = _poly_order(m, "polyder")
    p, = _poly_inexact(p)
    if m < 0:
        raise ValueError("Order of derivative must be positive")
    if m == 0:
        return p
    n = p.shape[0]
    coeff = _np.prod(_np.arange(m, n)[None] - _np.arange(m)[:, None], axis=0)[::-1]
    return p[:n - m] * _to_device(coeff.astype(p.dtype))


@_at_once
def polyint(p, m=1, k=None):
    """jnp.polyint: the m-th antiderivative's coefficients, k the constants
    of integration (a scalar, or one per order)."""
    m = _poly_order(m, "polyint")
    p, k = _poly_inexact(p, 0 if k is None else k)
    if m < 0:
        raise ValueError("Order of integral must be positive (see polyder)")
    k = atleast_1d(k)  # noqa: F821
    if k.shape[0] == 1:
        k = broadcast_to(k[0], (m,))  # noqa: F821
    if tuple(k.shape) != (m,):
        raise ValueError("k must be a scalar or a rank-1 array of length 1 or m.")
    if m == 0:
        return p
    grid = _np.arange(p.shape[0] + m)[None] - _np.arange(m)[:, None]
    coeff = _np.prod(_np.maximum(1, grid), axis=0)[::-1].astype(p.dtype)
    return concatenate((p, k)) / _to_device(coeff)  # noqa: F821


@_at_once
def poly(seq_of_zeros):
    """jnp.poly: the coefficients of the polynomial with these roots (a 1-D
    array; a square matrix's eigenvalues need complex numbers: refused)."""
    z, = _poly_inexact(seq_of_zeros)
    z = atleast_1d(z)  # noqa: F821
    sh = tuple(z.shape)
    if len(sh) == 2 and sh[0] == sh[1] and sh[0] != 0:
        raise NotImplementedError("jnp.poly of a square matrix needs jnp.linalg.eigvals (complex "
                                  "numbers), which shmap does not have")
    if len(sh) != 1:
        raise ValueError("input must be 1d or non-empty square 2d array.")
    if sh[0] == 0:
        return ones((), dtype=z.dtype)  # noqa: F821
    a = ones((1,), dtype=z.dtype)  # noqa: F821
    for k in range(sh[0]):
        a = convolve(a, concatenate((ones((1,), dtype=z.dtype), -z[k:k + 1])))  # noqa: F821
    return a


@_at_once
def polydiv(u, v, *, trim_leading_zeros=False):
    """jnp.polydiv: quotient and remainder of u / v by long division (the
    remainder as long as u); trim_leading_zeros is not supported here (its
    size depends on the values)."""
    u, v = _poly_inexact(u, v)
    if trim_leading_zeros:
        raise NotImplementedError("jnp.polydiv(..., trim_leading_zeros=True) is not "
                                  "supported here")
    m, n = u.shape[0] - 1, v.shape[0] - 1
    scale = 1.0 / v[0]
    q = []
    for k in range(0, m - n + 1):
        d = scale * u[k]
        q.append(reshape(d, (1,)))  # noqa: F821
        u = concatenate((u[:k], u[k:k + n + 1] - d * v, u[k + n + 1:]))  # noqa: F821
    q = concatenate(tuple(q)) if q else zeros((1,), dtype=u.dtype)  # noqa: F821
    return q, u


_COMPRESS_SIZE = ("The size argument of jnp.compress must be specified in order to use "
                  "jnp.compress within JAX transformations like jax.jit, jax.vmap, and "
                  "jax.grad. For more information, refer to the jnp.compress documentation.")


@_at_once
def _compress_sized(cond, arr, axis, size, fill_value):
    if axis is None:
        axis, arr = 0, reshape(arr, (-1,))  # noqa: F821
    else:
        arr = moveaxis(arr, axis, 0)
    cond = cond[:arr.shape[0]]
    arr = arr[:cond.shape[0]]
    if not 0 <= size <= arr.shape[0]:
        raise ValueError("size must be positive and not greater than the size of the array "
                         f"axis; got size={size} for a.shape[axis]={arr.shape[0]}")
    mask = reshape(cond, (cond.shape[0],) + (1,) * (len(arr.shape) - 1))  # noqa: F821
    arr = where(mask, arr, _scalar(fill_value, arr.dtype))  # noqa: F821
    order = argsort(_unshard(cond), stable=True, descending=True)[:size]
    return moveaxis(take(_unshard(arr, 0), order, axis=0), 0, axis)


def compress(condition, a, axis=None, *, size=None, fill_value=0, out=None):
    """jnp.compress: a's slices along axis (the flattened a when None)
    where the 1-D condition holds; with size= the first size of them, the
    rest fill_value, as JAX's (a stable descending argsort of condition).
    Inside a traced function size= is required (JAX's error)."""
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.compress is not supported.")
    if len(_np.shape(condition)) != 1:
        raise ValueError("condition must be a 1D array")
    cond = condition if hasattr(condition, "type") else _np.asarray(condition)
    if cond.dtype != _np.bool_:
        cond = cond != 0
    if size is not None:
        if isinstance(cond, _np.ndarray):
            cond = _to_device(cond)
        return _compress_sized(cond, a, axis, int(size), fill_value)
    n = math.prod(_np.shape(a)) if axis is None else _np.shape(a)[axis]
    c = _concrete_value(cond, lambda m, c: c, _COMPRESS_SIZE, _short_type(
        _np.bool_, cond.shape)).astype(bool)
    if c[n:].any():
        raise ValueError("condition contains entries that are out of bounds")
    c = c[:n]
    idx = _np.nonzero(c)[0]
    if not hasattr(a, "type"):
        a = _to_device(_np.asarray(a))
    return _static_compress(a, axis, tuple(int(i) for i in idx))


@_at_once
def _static_compress(a, axis, idx):
    if axis is None:
        a, axis = reshape(a, (-1,)), 0  # noqa: F821
    axis = axis % len(a.shape)
    return _static_take(_unshard(a, axis), idx, axis)


def extract(condition, arr, *, size=None, fill_value=0):
    """jnp.extract: compress of the flattened condition and arr."""
    flat = (lambda x: ravel(x) if hasattr(x, "type") else _np.ravel(x))
    return compress(flat(condition), flat(arr), size=size, fill_value=fill_value)


def choose(a, choices, out=None, mode="raise"):
    """jnp.choose: choices[a] elementwise (all broadcast together); mode
    'raise' checks a now (inside a traced function JAX's error), 'wrap'
    takes a mod len(choices), 'clip' clips it."""
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.choose is not supported.")
    a, = _asarrays(a)
    choices = _asarrays(*choices)
    if not _np.issubdtype(a.dtype, _np.integer):
        raise ValueError("`a` array must be integer typed")
    N = len(choices)
    if mode == "raise":
        bad = _concrete_value(a, lambda m, x: m.any((x < 0) | (x >= N)),
                              "The error occurred because jnp.choose was jit-compiled with "
                              "mode='raise'. Use mode='wrap' or mode='clip' instead.",
                              _short_type(a.dtype, a.shape))
        if bad:
            raise ValueError("invalid entry in choice array")
    elif mode not in ("wrap", "clip"):
        raise ValueError(f"mode={mode!r} not understood. Must be 'raise', 'wrap', or 'clip'")
    return _choose_impl(a, choices, mode)


@_at_once
def _choose_impl(a, choices, mode):
    N = len(choices)
    if mode == "wrap":
        a = mod(a, N)  # noqa: F821
    elif mode == "clip":
        a = clip(a, 0, N - 1)
    dt = result_type(*choices)
    a, *choices = broadcast_arrays(a, *[astype(c, dt) for c in choices])  # noqa: F821
    r = choices[0]
    for i in range(1, N):
        r = where(a == i, choices[i], r)  # noqa: F821
    return r


def _immutable(name, inplace):
    if inplace:
        raise ValueError(f"jax.numpy.{name} cannot modify arrays in-place, because JAX arrays "
                         f"are immutable. Pass inplace=False to instead return an updated "
                         f"array.")


def _tile_to_size(v, size):
    if v.shape[0] < size:
        v = tile(v, int(_np.ceil(size / v.shape[0])))  # noqa: F821
    return v[:size] if v.shape[0] > size else v


def _flat_set(arr, idx, v):
    """ravel(arr).at[idx].set(v) (out of range dropped), in arr's shape."""
    shape = tuple(arr.shape)
    flat = reshape(_unshard(arr), (-1,))  # noqa: F821
    if _is_jit_sharded(idx, v):
        from ._core import P
        r = flat.at[idx].set(astype(v, arr.dtype), out_sharding=P())  # noqa: F821
    else:
        r = flat.at[idx].set(astype(v, arr.dtype))  # noqa: F821
    return reshape(r, shape)  # noqa: F821


def put(a, ind, v, mode=None, *, inplace=True):
    """jnp.put with inplace=False (JAX's arrays are immutable: its error
    otherwise): a with the flat positions ind set to v (tiled to ind's
    length); mode None clips out-of-range positions as JAX's unravel_index
    does, 'clip' clips, 'wrap' takes them mod a.size; 'raise' is not
    supported (JAX's)."""
    _immutable("put", inplace)
    if mode not in (None, "clip", "wrap"):
        if mode == "raise":
            raise NotImplementedError("The 'raise' mode to jnp.put is not supported.")
        raise ValueError(f"mode should be one of 'wrap' or 'clip'; got mode={mode!r}")
    return _put_impl(*_asarrays(a, ind, v), mode)


@_at_once
def _put_impl(arr, ind, v, mode):
    ind, v = reshape(ind, (-1,)), reshape(v, (-1,))  # noqa: F821
    n = math.prod(arr.shape)
    if not n or not ind.shape[0] or not v.shape[0]:
        return arr
    v = _tile_to_size(_unshard(v), ind.shape[0])
    if mode == "clip":
        ind = clip(ind, 0, n - 1)
    elif mode == "wrap":
        ind = mod(ind, n)  # noqa: F821
    else:
        ind = ravel_multi_index(unravel_index(ind, tuple(arr.shape)), tuple(arr.shape),
                                mode="wrap")
    return _flat_set(arr, ind, v)


def place(arr, mask, vals, *, inplace=True):
    """jnp.place with inplace=False (JAX's error otherwise): arr with the
    positions where mask holds set to vals in order (repeated as needed)."""
    arr, mask, vals = _asarrays(arr, mask, vals)
    if inplace:
        _immutable("place", inplace)
    if math.prod(arr.shape) != math.prod(mask.shape):
        raise ValueError("place: arr and mask must be the same size")
    if not math.prod(vals.shape):
        raise ValueError("Cannot place values from an empty array")
    return _place_impl(arr, mask, vals)


@_at_once
def _place_impl(arr, mask, vals):
    n = math.prod(arr.shape)
    if not n:
        return arr
    idx = _nonzero_impl(reshape(mask, (-1,)), n, n)[0]  # noqa: F821
    vals = _tile_to_size(_unshard(reshape(vals, (-1,))), n)  # noqa: F821
    return _flat_set(arr, idx, vals)


def diag_indices_from(arr):
    """jnp.diag_indices_from: diag_indices of a square array's size and rank."""
    s = tuple(_np.shape(arr))
    if not len(s) >= 2:
        raise ValueError("input array must be at least 2-d")
    if len(set(s)) != 1:
        raise ValueError("All dimensions of input must be of equal length")
    return diag_indices(s[0], ndim=len(s))


def _tri_from(fn, arr, k):
    s = tuple(_np.shape(arr))
    if len(s) != 2:
        raise ValueError("Only 2-D inputs are accepted")
    return fn(s[0], k=k, m=s[1])


def tril_indices_from(arr, k=0):
    """jnp.tril_indices_from: tril_indices of arr's shape."""
    return _tri_from(tril_indices, arr, k)


def triu_indices_from(arr, k=0):
    """jnp.triu_indices_from: triu_indices of arr's shape."""
    return _tri_from(triu_indices, arr, k)


def mask_indices(n, mask_func, k=0, *, size=None):
    """jnp.mask_indices: nonzero(mask_func(ones((n, n)), k), size=size)."""
    i, j = nonzero(mask_func(ones((n, n)), k), size=size)  # noqa: F821
    return (i, j)


def _bin_edges(a, bins, range, dt):
    """JAX's histogram_bin_edges of a in dtype dt: bins itself when 1-D,
    else bins + 1 evenly spaced over range (or [min, max]; widened by 0.5
    each side when empty)."""
    if isinstance(bins, str):
        raise NotImplementedError("string values for `bins` not implemented.")
    if _np.ndim(bins) == 1 or (hasattr(bins, "shape") and len(bins.shape) == 1):
        return _to_device(bins, dt) if not hasattr(bins, "type") else astype(bins, dt)  # noqa
    nb = int(bins)
    if range is None:
        lo, hi = min(a), max(a)  # noqa: F821
    else:
        if _np.shape(range) != (2,):
            raise ValueError(f"`range` must be either None or a sequence of scalars, "
                             f"got {range}")
        lo, hi = _scalar(range[0], dt), _scalar(range[1], dt)
    same = equal(hi - lo, 0)  # noqa: F821
    lo, hi = where(same, lo - 0.5, lo), where(same, hi + 0.5, hi)  # noqa: F821
    t = arange(nb, dtype=dt) / _np.asarray(nb, dt).item()
    return concatenate((lo * (1 - t) + hi * t, reshape(hi, (1,))))  # noqa: F821


@_at_once
def histogramdd(sample, bins=10, range=None, weights=None, density=None):
    """jnp.histogramdd of the (N, D) sample, as JAX computes it: each
    dimension's edges (histogram's), bins by searchsorted 'right' (the last
    edge in the last bin), the counts a bincount of the flat bin indices
    (weights summed); density divides by the total and each bin's volume.
    Returns (hist, [edges per dimension])."""
    dt = _inexact(sample.dtype if weights is None else _promote(sample.dtype, weights.dtype))
    if weights is not None:
        if tuple(weights.shape) != tuple(sample.shape)[:1]:
            raise ValueError("should have one weight for each sample.")
        weights = astype(weights, dt)  # noqa: F821
    sample = astype(sample, dt)  # noqa: F821
    N, D = tuple(sample.shape)
    if range is not None and (len(range) != D or builtins.any(
            r is not None and _np.shape(r)[0] != 2 for r in range)):
        raise ValueError(f"For sample.shape={(N, D)}, range must be a sequence of {D} pairs "
                         f"or Nones; got range={range}")
    if isinstance(bins, numbers.Integral) or (hasattr(bins, "shape") and not bins.shape):
        per_dim = D * [bins]
    else:
        per_dim = list(bins)
        if len(per_dim) != D:
            raise ValueError("should be a bin for each dimension.")
    idxs, edges = [], []
    for i in builtins.range(D):
        col = sample[:, i]
        e = _bin_edges(col, per_dim[i], None if range is None else range[i], dt)
        b = searchsorted(e, col, side="right")
        idxs.append(where(col == e[-1], b - 1, b))  # noqa: F821
        edges.append(e)
    nbins = tuple(e.shape[0] + 1 for e in edges)
    xy = _ravel_multi_index_impl(idxs, nbins, "clip", "C", _np.int32)
    hist = reshape(_bincount_impl(xy, weights, math.prod(nbins), None), nbins)  # noqa: F821
    hist = hist[(builtins.slice(1, -1),) * D]
    if density:
        hist = astype(hist, dt)  # noqa: F821
        hist = hist / sum(hist)  # noqa: F821
        for i, e in enumerate(edges):
            hist = hist / reshape(diff(e), (1,) * i + (-1,) + (1,) * (D - i - 1))  # noqa: F821
    return hist, edges


@_at_once
def histogram2d(x, y, bins=10, range=None, weights=None, density=None):
    """jnp.histogram2d: histogramdd of the pairs (x, y). Returns (hist,
    x edges, y edges)."""
    try:
        N = len(bins)
    except TypeError:
        N = 1
    if N != 1 and N != 2:
        bins = [bins, bins]
    hist, edges = histogramdd(stack((x, y), axis=1), bins, range, weights, density)
    return hist, edges[0], edges[1]


__all__ += ["i0", "vecdot", "matvec", "vecmat", "nancumsum", "nancumprod", "bartlett",
            "blackman", "hamming", "hanning", "kaiser", "polyder", "polyint", "poly", "polydiv",
            "compress", "extract", "choose", "put", "place", "diag_indices_from",
            "tril_indices_from", "triu_indices_from", "mask_indices", "histogram2d",
            "histogramdd"]


def __getattr__(name):
    """jnp.bool: numpy's bool_ (a module global of that name would hide
    Python's bool in this module)."""
    if name == "bool":
        return bool_
    raise AttributeError(f"module 'shmap.numpy' has no attribute {name!r}")


# Python's float and int as dtype= (by keyword or position): JAX's float32 and int32
from ._core import _canon_module_dtypes  # noqa: E402
_canon_module_dtypes(globals(), __all__, ("dtype", "new_dtype"))
