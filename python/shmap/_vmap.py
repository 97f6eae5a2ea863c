"""shmap.vmap, as jax.vmap: a function of one example run on a batch.

The function runs once, under the trace of the jit or shard_map body it is
called in, on BatchTracers: each stands for one example, and holds the
batched value (a traced value with the batch first). Every op it is given
(the op table's functions, operators, indexing) goes through a batching
rule here, which emits the op on the batched values with the batch
dimension accounted for (moved axes, a batch letter in einsum, a None
prepended to out_sharding specs); values that do not depend on the batch
stay as they are and broadcast. Outside a trace, vmap(f)(arrays) runs as a
jit program."""
import collections
import inspect
import re

import numpy as np

from ._core import Array, InvalidArgument, P, PartitionSpec
from ._trace import Tracer, _builder, _node, _state, _tree_build, _tree_leaves, jit


class BatchTracer(Tracer):
    """One example of a batch: .shape, .dtype and .type are the example's;
    val is the batched value (the batch first), nbatch the batch's size,
    level the vmap it belongs to (nested vmaps: the inner one's is higher;
    its val may be a BatchTracer of an outer one)."""

    def __init__(self, val, size, level=None):
        self.val, self.nbatch = val, size
        self.level = _LEVELS[-1] if level is None else level  # which vmap it belongs to
        self.name = val.name  # never written into the program: rules use val
        self._builder = None

    @property
    def shape(self):
        return tuple(self.val.shape[1:])

    @property
    def _dtype(self):
        return self.val._dtype

    @property
    def type(self):
        """The batched type without its first dimension."""
        return re.sub(r"\[[^,\]]*,? ?", "[", self.val.type, count=1)

    @property
    def _ty(self):
        return self.val._ty

    @property
    def _owner(self):
        """The trace of the batched value (typeof reads its mesh)."""
        return getattr(self.val, "_owner", None)

    def _typed(self):
        self.val._typed()
        return self

    def __repr__(self):
        return f"BatchTraced<{self.type}>"


# The levels of the vmaps whose batching rules are running, innermost last:
# a rule treats values of an outer level as values that do not depend on its
# batch (their own ops go through their own level's rules).
_LEVELS = [0]
_DEPTH = [0]


_ACTIVE = []  # (level, size) of the vmaps whose functions are running, innermost last
_NAMES = []  # (axis_name, level, size) of those that name their axis, innermost last
_SPMD = []  # (level, spmd_axis_name or None) of the vmaps running, innermost last


def innermost():
    """(level, batch size) of the innermost vmap running, or None."""
    return _ACTIVE[-1] if _ACTIVE else None


def batch_of(v, level, size):
    """v, a value that does not depend on the batch of vmap `level`, as a
    BatchTracer of it (repeated along the batch)."""
    _LEVELS.append(level)
    try:
        return BatchTracer(_full(v, size), size, level)
    finally:
        _LEVELS.pop()


def _isb(v):
    """v is batched at the level of the rule running."""
    return isinstance(v, BatchTracer) and v.level == _LEVELS[-1]


def _jnp():
    from . import numpy as jnp
    return jnp


def _lax():
    from . import lax
    return lax


# ---- collectives over a vmap's named axis ------------------------------------

_NAMED_OPS = ("psum", "pmean", "pmax", "pmin", "all_gather", "psum_scatter", "ppermute",
              "all_to_all", "axis_index", "pvary")


def axis_sizes():
    """The named vmap axes running, and their sizes (innermost wins)."""
    return {n: size for n, _, size in _NAMES}


def named_axes(op, args, kwargs):
    """The axis names of collective op when one of them is a running
    vmap's (then named() runs it), else None."""
    if not _NAMES or op not in _NAMED_OPS:
        return None
    k = 0 if op == "axis_index" else 1
    ax = kwargs.get("axis_name", args[k] if len(args) > k else None)
    axes = (ax,) if isinstance(ax, str) else tuple(ax or ())
    return axes if any(a in axis_sizes() for a in axes) else None


def named(op, args, kwargs, axes):
    """Collective op over a vmap's axis (JAX's vmap with axis_name): over
    the batch of that vmap. Reductions (psum pmean pmax pmin) sum, average
    or compare the examples (an unbatched value counts size times for
    psum) and give every example the result; all_gather stacks them;
    psum_scatter gives example b the b-th part of the sum; ppermute moves
    examples (those receiving nothing get zeros); axis_index is each
    example's position. Mesh axes named with it (reductions only) are
    reduced first, by the op itself."""
    jnp = _jnp()
    lax = _lax()
    names = {n: (lvl, size) for n, lvl, size in _NAMES}
    mine = [a for a in axes if a in names]
    mesh = tuple(a for a in axes if a not in names)
    if op == "axis_index":
        if len(mine) != 1 or mesh:
            raise InvalidArgument("vmap: axis_index of several axes, one of them a vmap's, is "
                                  "not supported")
        level, size = names[mine[0]]
        return BatchTracer(jnp.arange(size, dtype=np.int32), size, level)
    x = args[0] if args else kwargs.get("x")
    rest = {k: v for k, v in kwargs.items() if k not in ("x", "axis_name")}
    extra = tuple(args[2:])
    if op == "pvary":
        return x if not mesh else lax.pvary(x, mesh)
    if op in ("all_to_all",) or (mesh and op not in ("psum", "pmean", "pmax", "pmin")):
        raise InvalidArgument(f"vmap: {op} over a vmap's axis_name"
                              f"{' together with mesh axes' if mesh else ''} is not supported")
    if rest.get("axis_index_groups") is not None:
        raise InvalidArgument(f"vmap: {op} over a vmap's axis with axis_index_groups is not "
                              f"supported")
    if mesh:
        x = getattr(lax, op)(x, mesh)
    for a in mine:
        level, size = names[a]
        if isinstance(x, BatchTracer) and x.level > level:
            raise InvalidArgument(f"vmap: {op} over the axis {a!r} of an outer vmap, of a value "
                                  f"batched by an inner one, is not supported")
        bat = isinstance(x, BatchTracer) and x.level == level
        if op in ("psum", "pmean", "pmax", "pmin"):
            if bat:
                x = {"psum": jnp.sum, "pmean": jnp.mean, "pmax": jnp.max,
                     "pmin": jnp.min}[op](x.val, axis=0)
            elif op == "psum":
                x = x * size
            continue
        v = x.val if bat else batch_of(x, level, size).val  # (size, example)
        ex = tuple(x.shape)
        if op == "all_gather":
            axis = rest.get("axis", extra[0] if extra else 0)
            tiled = rest.get("tiled", extra[1] if len(extra) > 1 else False)
            axis %= len(ex) + (0 if tiled else 1)
            g = jnp.moveaxis(v, 0, axis)
            if tiled:
                g = jnp.reshape(g, ex[:axis] + (size * ex[axis],) + ex[axis + 1:])
            return g
        if op == "psum_scatter":
            sd = rest.get("scatter_dimension", extra[0] if extra else 0)
            tiled = rest.get("tiled", extra[1] if len(extra) > 1 else False)
            sd %= len(ex)
            total = jnp.sum(v, axis=0)
            if tiled:
                if ex[sd] % size:
                    raise InvalidArgument(f"psum_scatter: dimension {sd} of size {ex[sd]} is "
                                          f"not divisible by the axis size {size}")
                total = jnp.reshape(total, ex[:sd] + (size, ex[sd] // size) + ex[sd + 1:])
            elif ex[sd] != size:
                raise InvalidArgument(f"psum_scatter: dimension {sd} has size {ex[sd]}, not the "
                                      f"axis size {size}")
            return BatchTracer(jnp.moveaxis(total, sd, 0), size, level)
        if op == "ppermute":
            perm = rest.get("perm", extra[0] if extra else None)
            src = np.full(size, -1, np.int64)
            for a_, b_ in perm:
                src[b_] = a_
            from ._trace import _dims, _index_value, _spec_entry
            kw = {}
            if _builder().kind == "jit":  # the examples keep their layout
                kw["out_sharding"] = P(*map(_spec_entry, _dims(v.type)))
            got = jnp.take(v, _index_value(np.maximum(src, 0).astype(np.int32)), axis=0, **kw)
            keep = (src >= 0).reshape((size,) + (1,) * len(ex))
            if not keep.all():
                got = jnp.where(_index_value(keep), got, 0)
            return BatchTracer(got, size, level)
    return x


def batched(args, kwargs=None):
    """Whether an op's arguments hold a BatchTracer (then its rule runs)."""
    def has(v):
        if isinstance(v, BatchTracer):
            return True
        return isinstance(v, (list, tuple)) and any(has(e) for e in v)
    return any(has(a) for a in args) or any(has(v) for v in (kwargs or {}).values())


def _top(args):
    """The innermost level among the BatchTracers of args."""
    best = 0
    for a in args:
        if isinstance(a, BatchTracer):
            best = max(best, a.level)
        elif isinstance(a, (list, tuple)):
            best = max(best, _top(a))
    return best


def _size(args):
    for a in args:
        if _isb(a):
            return a.nbatch
        if isinstance(a, (list, tuple)):
            s = _size(a)
            if s is not None:
                return s
    return None


def _rank(v):
    return len(v.shape) if hasattr(v, "shape") else 0


def _explicit():
    """Shardings are spelled out here: a jit body over a mesh with an
    Explicit axis (not a shard_map body, nor a mesh of Auto axes)."""
    from ._core import Auto
    b = _builder()
    mesh = getattr(b, "mesh", None)
    return b.kind == "jit" and not (mesh is not None and
                                    all(t == Auto for t in mesh.axis_types))


def _entry(args):
    """The sharding of the batch dimension of the batched values among args
    (the first one's), or None."""
    if not _explicit():
        return None
    for a in args:
        if _isb(a):
            from .numpy import _spec_of_type
            spec = _spec_of_type(a.val.type)
            return None if spec is None else tuple(spec)[0]
        if isinstance(a, (list, tuple)):
            e = _entry(a)
            if e is not None:
                return e
    return None


def _spec_plus(spec, entry=None):
    """An out_sharding for the batched value: the example's with the batch
    dimension in front, sharded as the batch is (entry)."""
    if spec is None:
        return None
    spec = getattr(spec, "spec", spec)
    return P(entry, *tuple(spec)) if isinstance(spec, PartitionSpec) else spec


def _align(v, rank):
    """v as an operand of an elementwise op on examples of rank `rank`: a
    BatchTracer's batched value with 1s after the batch dimension up to that
    rank (numpy's broadcasting of the examples); anything else as it is (it
    broadcasts against the trailing dimensions)."""
    if not _isb(v):
        return v
    r = len(v.shape)
    if r == rank:
        return v.val
    return _jnp().reshape(v.val, (v.nbatch,) + (1,) * (rank - r) + tuple(v.shape))


def _full(v, size, entry=None):
    """v (an example's value, batched or not) batched: an unbatched one
    repeated along a new first dimension, sharded along it as entry says
    (the other batched values' batch sharding)."""
    jnp = _jnp()
    if _isb(v):
        return v.val
    shape = tuple(getattr(v, "shape", ()))
    if isinstance(v, (np.ndarray, Array)):  # closed over: a constant, an Array's parameter
        v = jnp.asarray(v)
    elif not isinstance(v, Tracer):
        v = jnp.full(shape, v)
    b = jnp.broadcast_to(jnp.expand_dims(v, 0), (size,) + shape)
    if entry is not None:
        b = jnp.reshard(b, P(entry, *([None] * len(shape))))
    return b


def _axes(axis, rank):
    """Per-example axes (None: all) as batched ones."""
    if axis is None:
        return tuple(range(1, rank + 1))
    if isinstance(axis, (tuple, list)):
        return tuple(a % rank + 1 for a in axis)
    return axis % rank + 1


_SYMBOLS = {"+": "add", "-": "subtract", "*": "multiply", "/": "divide", "//": "floor_divide",
            "%": "mod", "**": "power", "<": "less", "<=": "less_equal", ">": "greater",
            ">=": "greater_equal", "==": "equal", "!=": "not_equal", "&": "bitwise_and",
            "|": "bitwise_or", "^": "bitwise_xor", "@": "matmul", "neg": "negative"}

_ELEMENTWISE = {
    "add", "subtract", "multiply", "divide", "mod", "floor_divide", "maximum", "minimum",
    "power", "arctan2", "negative", "abs", "exp", "log", "sin", "cos", "tanh", "sqrt", "rsqrt",
    "logistic", "log1p", "expm1", "tan", "erf", "arcsin", "arccos", "arctan", "sinh", "cosh",
    "arcsinh", "arccosh", "arctanh", "cbrt", "sign", "floor", "ceil", "round", "equal",
    "not_equal", "less", "less_equal", "greater", "greater_equal", "bitwise_and", "bitwise_or",
    "bitwise_xor", "bitwise_not", "logical_and", "logical_or", "logical_xor", "logical_not",
    "where", "astype", "pvary", "psum", "pmean", "pmax", "pmin", "ppermute",
}
_REDUCTIONS = {"sum", "mean", "max", "min", "prod", "any", "all"}
_FLATTENING = {"argmax", "argmin", "cumsum", "cumprod", "cummax", "cummin"}


def apply(prim, args, kwargs):
    """The batched form of op prim on args (some of them BatchTracers), by
    the rule of the innermost vmap among them."""
    _LEVELS.append(_top(list(args) + list(kwargs.values())))
    try:
        return _apply(prim, args, kwargs)
    finally:
        _LEVELS.pop()


def _apply(prim, args, kwargs):
    jnp = _jnp()
    op = _SYMBOLS.get(prim, prim)
    size = _size(list(args) + list(kwargs.values()))
    if op in _ELEMENTWISE:  # needs no entry: asking it types the program so far

        # every operand with a shape (closed-over Arrays and numpy arrays
        # too) sets the examples' rank the batched ones are aligned to
        arrays = [a for a in args if isinstance(a, (Tracer, Array, np.ndarray, np.generic))]
        rank = max(_rank(a) for a in arrays)
        out = getattr(_lax() if op in ("pvary", "psum", "pmean", "pmax", "pmin", "ppermute")
                      else jnp, op)(*[_align(a, rank) for a in args], **kwargs)
        return BatchTracer(out, size)
    entry = _entry(list(args) + list(kwargs.values()))
    if op == "getitem":
        x = args[0]
        key = kwargs["key"]
        if any(isinstance(k, Tracer) for k in key):
            raise InvalidArgument("vmap: indexing with traced values is not supported; use "
                                  "jnp.take")
        return BatchTracer(_full(x, size, entry)[(slice(None),) + tuple(key)], size)
    if op in ("matmul", "dot"):
        from ._grad import _matmul_subscripts
        a, b = args[0], args[1]
        s = _matmul_subscripts(a, b, op == "dot")
        if s is None:
            raise InvalidArgument(f"vmap: {op} of examples of shapes {tuple(a.shape)} and "
                                  f"{tuple(b.shape)} is not supported; write it as einsum")
        return _einsum(s, [a, b], kwargs.get("out_sharding"), size, entry)
    if op == "einsum":
        return _einsum(args[0], list(args[1:]), kwargs.get("out_sharding"), size, entry)
    from ._grad import _bind
    a = _bind(op, args, kwargs)
    x = args[0]
    rank = _rank(x)
    if op in _REDUCTIONS:
        kw = {k: v for k, v in a.items() if k not in ("a", "axis")}
        return BatchTracer(getattr(jnp, op)(x.val, axis=_axes(a.get("axis"), rank), **kw), size)
    if op in _FLATTENING or op in ("sort", "argsort"):
        axis = a.get("axis")
        kw = {k: v for k, v in a.items() if k not in ("a", "axis", "operand")}
        v = x.val
        if axis is None and op in _FLATTENING:
            v, axis1 = jnp.reshape(v, (size, -1)), 1
        elif axis is None:
            axis1 = rank  # sort: the last axis
        else:
            axis1 = _axes(axis, rank)
        return BatchTracer(getattr(jnp, op)(v, axis=axis1, **kw), size)
    if op == "reshape":
        shape = a["shape"]
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        spec = a.get("out_sharding")
        if spec is None and entry is not None:  # the batch keeps its sharding
            spec = P(*([None] * len(shape)))
        kw = {} if spec is None else {"out_sharding": _spec_plus(spec, entry)}
        return BatchTracer(jnp.reshape(x.val, (size,) + shape, **kw), size)
    if op == "transpose":
        axes = a.get("axes")
        axes = tuple(reversed(range(rank))) if axes is None else tuple(axes)
        return BatchTracer(jnp.transpose(x.val, (0,) + tuple(d % rank + 1 for d in axes)),
                           size)
    if op == "expand_dims":
        axis = a["axis"]
        axis = axis if isinstance(axis, (tuple, list)) else (axis,)
        n = rank + len(axis)
        return BatchTracer(jnp.expand_dims(x.val, tuple(d % n + 1 for d in axis)), size)
    if op == "squeeze":
        axis = a.get("axis")
        if axis is None:
            axis = tuple(d for d, n in enumerate(x.shape) if n == 1)
        return BatchTracer(jnp.squeeze(x.val, _axes(axis, rank)), size)
    if op == "broadcast_to":
        shape = tuple(a["shape"])
        return BatchTracer(jnp.broadcast_to(_align(x, len(shape)), (size,) + shape), size)
    if op == "slice":
        strides = a.get("strides")
        return BatchTracer(_lax().slice(x.val, (0,) + tuple(a["start_indices"]),
                                        (size,) + tuple(a["limit_indices"]),
                                        None if strides is None else (1,) + tuple(strides)),
                           size)
    if op == "pad":
        width = np.broadcast_to(np.asarray(a["pad_width"], dtype=np.int64), (rank, 2))
        return BatchTracer(jnp.pad(x.val, ((0, 0),) + tuple((int(lo), int(hi))
                                                            for lo, hi in width)), size)
    if op == "tile":
        reps = a["reps"]
        reps = (reps,) if isinstance(reps, int) else tuple(reps)
        v = x.val
        if len(reps) > rank:
            v = jnp.reshape(v, (size,) + (1,) * (len(reps) - rank) + tuple(x.shape))
        reps = (1,) * (max(rank, len(reps)) - len(reps)) + reps
        return BatchTracer(jnp.tile(v, (1,) + reps), size)
    if op == "roll":
        axis = a.get("axis")
        if isinstance(a["shift"], Tracer):
            return _roll_dynamic(x, a["shift"], axis)
        if axis is None:
            flat = jnp.roll(jnp.reshape(x.val, (size, -1)), a["shift"], axis=1)
            return BatchTracer(jnp.reshape(flat, (size,) + tuple(x.shape)), size)
        return BatchTracer(jnp.roll(x.val, a["shift"], axis=_axes(axis, rank)), size)
    if op == "rev":
        return BatchTracer(jnp.flip(x.val, _axes(tuple(a["dimensions"]), rank)), size)
    if op == "concatenate":
        arrays = list(a["arrays"])
        axis = a.get("axis", 0)
        return BatchTracer(jnp.concatenate([_full(v, size, entry) for v in arrays],
                                           axis=_axes(axis, _rank(arrays[0]))), size)
    if op in ("dynamic_slice", "dynamic_slice_in_dim", "dynamic_update_slice"):
        return _dynamic(op, a, size, entry)
    if op in ("take", "take_along_axis"):
        return _take(op, a, size, entry)
    if op == "segment_sum":
        return _segment_sum(a, size)
    if op in ("scatter", "scatter_add", "scatter_mul", "scatter_min", "scatter_max"):
        return _scatter(op, a, size, entry)
    if op in ("reshard", "with_sharding_constraint"):
        key = "out_shardings" if op == "reshard" else "shardings"
        spmd = spmd_name() if op == "with_sharding_constraint" else None
        if spmd is not None:  # JAX's sharding_constraint batcher: the batch over spmd_axis_name
            spec = getattr(a[key], "spec", a[key])
            used = {n for e in tuple(spec) for n in ((e,) if isinstance(e, str) else e or ())}
            if set(spmd) & used:
                raise ValueError(f"vmap spmd_axis_name {spmd} cannot appear in "
                                 f"with_sharding_constraint spec, but got spec {spec}")
            entry = spmd[0] if len(spmd) == 1 else spmd
        return BatchTracer(getattr(jnp, op)(x.val, _spec_plus(a[key], entry)), size)
    if op == "all_gather":
        kw = {k: v for k, v in a.items() if k not in ("x", "axis_name", "axis")}
        return BatchTracer(_lax().all_gather(x.val, a["axis_name"],
                                             axis=_axes(a.get("axis", 0), rank + 1
                                                        if not a.get("tiled") else rank),
                                             **kw), size)
    if op == "psum_scatter":
        kw = {k: v for k, v in a.items() if k not in ("x", "axis_name", "scatter_dimension")}
        return BatchTracer(_lax().psum_scatter(x.val, a["axis_name"],
                                               scatter_dimension=_axes(
                                                   a.get("scatter_dimension", 0), rank), **kw),
                           size)
    if op == "all_to_all":
        return BatchTracer(_lax().all_to_all(x.val, a["axis_name"],
                                             _axes(a["split_axis"], rank),
                                             _axes(a["concat_axis"], rank),
                                             tiled=a.get("tiled", False)), size)
    raise InvalidArgument(f"vmap: shmap has no batching rule for '{prim}'")


def _einsum(subscripts, ops, out_sharding, size, entry):
    """einsum of examples: a batch letter in front of every batched
    operand's term and of the result's."""
    from ._grad import _einsum_parts
    terms, out = _einsum_parts(subscripts, ops)
    used = set("".join(terms) + out)
    z = next(c for c in "zyxwvutsrqponmlkjihgfedcbaZYXWVUTSRQPONMLKJIHGFEDCBA" if c not in used)
    terms = [z + t if _isb(o) else t for t, o in zip(terms, ops)]
    kw = {} if out_sharding is None else {"out_sharding": _spec_plus(out_sharding, entry)}
    vals = [o.val if _isb(o) else o for o in ops]
    return BatchTracer(_jnp().einsum(",".join(terms) + "->" + z + out, *vals, **kw), size)


def _take(op, a, size, entry):
    jnp = _jnp()
    from ._trace import _index_value
    src = a["a"] if op == "take" else a["arr"]
    idx = a["indices"]
    if not isinstance(idx, Tracer):
        idx = _index_value(idx)
    axis = a.get("axis")
    kw = {k: v for k, v in a.items() if k in ("mode",) and v is not None}
    if axis is None:  # of the flattened example
        src = _flatten_example(src, size)
        idx = _flatten_example(idx, size) if op == "take_along_axis" else idx
        axis = 0
    spec = a.get("out_sharding")
    rank = _rank(src)
    axis %= rank
    if op == "take_along_axis":
        if spec is None and entry is not None:
            spec = P(*([None] * rank))
        if spec is not None:
            kw["out_sharding"] = _spec_plus(spec, entry)
        out = jnp.take_along_axis(_full(src, size, entry), _full(idx, size, entry),
                                  axis=axis + 1, **kw)
        return BatchTracer(out, size)
    if _isb(idx) and _isb(src):
        return _take_both(src, idx, axis, rank, kw.get("mode"), spec, size, entry)
    if _isb(src):
        if spec is not None:
            kw["out_sharding"] = _spec_plus(spec, entry)
        return BatchTracer(jnp._take_op(src.val, idx, axis=axis + 1, **kw), size)
    # the indices batched: the batch lands where the taken axis was
    n = rank - 1 + len(idx.shape) + 1
    if spec is None and entry is not None:
        spec = P(*([None] * (n - 1)))
    if spec is not None:
        s = tuple(getattr(spec, "spec", spec))
        s = s + (None,) * (n - 1 - len(s))
        kw["out_sharding"] = P(*(s[:axis] + (entry,) + s[axis:]))
    out = jnp._take_op(src, idx.val, axis=axis, **kw)
    if axis:
        out = jnp.transpose(out, (axis,) + tuple(d for d in range(n) if d != axis))
    return BatchTracer(out, size)


def _take_both(src, idx, axis, rank, mode, spec, size, entry):
    """take of examples whose arrays and indices are both batched: the
    taken axis moved behind the batch and the two merged, so one take picks
    each example's rows from its own (an index out of range stays out of
    range, for 'fill'); then the example's dimensions in take's order. A
    batch sharded in a jit body is gathered for the take and laid out again."""
    jnp = _jnp()
    v = jnp.moveaxis(src.val, axis + 1, 1)  # (B, n, before, after)
    n, rest = v.shape[1], tuple(v.shape[2:])
    i, q = idx.val, len(idx.shape)
    if mode == "wrap":
        i = i % n
    else:
        i = jnp.where(i < 0, i + n, i)
        if mode in ("clip", "promise_in_bounds"):
            i = jnp.clip(i, 0, n - 1)
    rows = i + jnp.reshape(jnp.arange(size, dtype=np.int32) * n, (size,) + (1,) * q)
    rows = jnp.where((i >= 0) & (i < n), rows, size * n)
    kw = {} if mode is None else {"mode": mode}
    if entry is not None:  # the other dimensions keep their sharding (JAX's gather rule)
        from .numpy import _spec_of_type
        vs = tuple(_spec_of_type(v.type) or (None,) * (2 + len(rest)))
        if vs[1] is not None:
            v = jnp.reshard(v, P(vs[0], None, *vs[2:]))
        kw["out_sharding"] = P(entry, *([None] * q), *vs[2:])
    out = jnp._take_op(jnp.reshape(v, (size * n,) + rest), rows, axis=0, **kw)  # (B, q, ...)
    perm = (0,) + tuple(range(q + 1, q + 1 + axis)) + tuple(range(1, q + 1)) + \
        tuple(range(q + 1 + axis, q + 1 + len(rest)))
    out = jnp.transpose(out, perm)
    if spec is not None:
        out = jnp.reshard(out, _spec_plus(spec, entry))
    return BatchTracer(out, size)


def _dynamic(op, a, size, entry):
    """dynamic_slice (and dynamic_slice_in_dim) and dynamic_update_slice of
    examples, as JAX batches them: starts the same for every example (static
    or traced) are the op's on the batched values; along a dimension whose
    start is batched (one per example, clamped as the op clamps it) the
    slice is a take of each example's own rows (JAX's gather) and the
    update a scatter of them (JAX's scatter), one such dimension at a time."""
    jnp = _jnp()
    x = a["operand"]
    rank = _rank(x)
    if op == "dynamic_slice_in_dim":
        ax = a.get("axis", 0) % rank
        starts, sizes = [0] * rank, list(x.shape)
        starts[ax], sizes[ax] = a["start_index"], a["slice_size"]
        op = "dynamic_slice"
    else:
        starts = list(a["start_indices"])
        sizes = list(a["slice_sizes"] if op == "dynamic_slice" else a["update"].shape)
    bat = [d for d, s in enumerate(starts) if _isb(s)]
    plain = tuple(0 if _isb(s) else s for s in starts)
    if op == "dynamic_slice":
        box = tuple(x.shape[d] if d in bat else sizes[d] for d in range(rank))
        out = BatchTracer(_lax().dynamic_slice(_full(x, size, entry), (0,) + plain,
                                               (size,) + box), size)
        for d in bat:
            out = _take_both(out, _window(starts[d], x.shape[d], sizes[d], size), d, rank,
                             None, None, size, entry)
        return out
    u = a["update"]
    if not bat:
        return BatchTracer(jnp.dynamic_update_slice(_full(x, size, entry), _full(u, size, entry),
                                                    (0,) + plain), size)
    d = bat[0]
    win = _window(starts[d], x.shape[d], sizes[d], size)
    xs = BatchTracer(_full(x, size, entry), size)
    # the rows of x the update lands in, updated at the other starts
    part = _take_both(xs, win, d, rank, None, None, size, entry)
    part = _dynamic("dynamic_update_slice", {"operand": part, "update": u,
                                             "start_indices": starts[:d] + [0] + starts[d + 1:]},
                    size, entry)
    # written back: the rows scattered along d (moved first in the examples)
    out = _scatter("scatter", {"operand": BatchTracer(jnp.moveaxis(xs.val, d + 1, 1), size),
                               "indices": win,
                               "updates": BatchTracer(jnp.moveaxis(part.val, d + 1, 1), size)},
                   size, entry)
    return BatchTracer(jnp.moveaxis(out.val, 1, d + 1), size)


def _roll_dynamic(x, shift, axis):
    """jnp.roll of examples by a traced shift (one per example, or the
    same for all), as JAX's _roll_dynamic: per shift and axis, x twice
    along the axis, and the slice of its length at the length minus the
    shift (its remainder); the rolled axes must not be sharded (JAX's
    sentence)."""
    jnp = _jnp()
    from ._trace import _dims, _spec_entry
    if axis is None:
        return jnp.reshape(_roll_dynamic(jnp.reshape(x, (-1,)), shift, 0), tuple(x.shape))
    rank = _rank(x)
    axis = tuple(d % rank for d in (axis if isinstance(axis, (tuple, list)) else (axis,)))
    if isinstance(x, Tracer) and any(_spec_entry(_dims(x.type)[d]) is not None for d in axis):
        raise InvalidArgument(f"`a` cannot be sharded on the axis being rolled over. Got arr "
                              f"type={x.type} and axis={axis}")
    n_b = np.broadcast_shapes(tuple(shift.shape), (len(axis),))
    if len(n_b) != 1:
        raise ValueError("'shift' and 'axis' arguments to roll must be scalars or 1D arrays")
    shifts = [shift if not shift.shape else shift[k if shift.shape[0] > 1 else 0]
              for k in range(n_b[0])]
    for s, d in zip(shifts, np.broadcast_to(np.asarray(axis), n_b)):
        d, n = int(d), x.shape[int(d)]
        s = jnp.remainder(jnp.astype(s, np.int32), max(n, 1))
        x = _lax().dynamic_slice_in_dim(jnp.concatenate((x, x), axis=d), n - s, n, axis=d)
    return x


def _window(start, n, k, size):
    """The rows of a slice of k of n at a batched start: each example's
    start clamped to [0, n - k] (as dynamic_slice clamps it), then k
    consecutive rows, as a batched index."""
    jnp = _jnp()
    s = jnp.minimum(jnp.maximum(jnp.astype(start.val, np.int32), 0), n - k)
    return BatchTracer(jnp.reshape(s, (size, 1)) + jnp.arange(k, dtype=np.int32), size)


def _scatter(op, a, size, entry):
    """A scatter of examples. Indices the same for every example: the batch
    moved behind the rows (operand (n, B, ...), updates (indices', B,
    ...)), so one scatter updates every example's rows, the batch staying
    sharded as it was (a window dimension). Indices batched: rows of
    (example, row) in one operand of B * n rows (an index out of range
    stays out of range); a batch sharded in a jit body is then gathered
    for the scatter, and out_sharding= lays the result out as the operand
    (JAX's scatter rule). The call's out_sharding= (JAX's auto_axes around
    the scatter) lays the batched result out, the batch in front."""
    jnp = _jnp()
    from ._trace import _index_value
    x, idx, u = a["operand"], a["indices"], a["updates"]
    if a.get("out_sharding") is not None:  # the examples' result laid out so, the batch
        out = _scatter(op, {**a, "out_sharding": None}, size, entry)  # in front (JAX's
        return BatchTracer(jnp.reshard(out.val, _spec_plus(a["out_sharding"], entry)), size)
    if not isinstance(idx, Tracer):
        idx = _index_value(idx)
    n, rest = x.shape[0], tuple(x.shape[1:])
    q, r = len(idx.shape), len(rest)
    xs, us = _full(x, size, entry), _full(u, size, entry)
    if not _isb(idx):
        xs = jnp.transpose(xs, (1, 0) + tuple(range(2, r + 2)))
        us = jnp.transpose(us, tuple(range(1, q + 1)) + (0,) + tuple(range(q + 1, q + r + 1)))
        out = getattr(jnp, op)(xs, idx, us)
        return BatchTracer(jnp.transpose(out, (1, 0) + tuple(range(2, r + 2))), size)
    i = idx.val
    i = jnp.where(i < 0, i + n, i)
    rows = i + jnp.reshape(jnp.arange(size, dtype=np.int32) * n, (size,) + (1,) * q)
    rows = jnp.where((i >= 0) & (i < n), rows, size * n)  # dropped stays dropped
    nq = int(np.prod(idx.shape))
    rows = jnp.reshape(rows, (size * nq,))
    kw, spec = {}, None
    if entry is not None:  # the result laid out as the operand (JAX's scatter rule)
        from .numpy import _spec_of_type
        spec = tuple(_spec_of_type(xs.type) or (None,) * (r + 2))
        kw["out_sharding"] = P(spec[0], *spec[2:])
        if spec[1] is not None:
            xs = jnp.reshard(xs, P(spec[0], None, *spec[2:]))
        # whole, as the scatter makes them: so do the scatters of its gradient
        rows = jnp.reshard(rows, P(None))
    xs = jnp.reshape(xs, (size * n,) + rest)
    us = jnp.reshape(us, (size * nq,) + rest)
    if op == "scatter_mul" and not q:
        # one row per example: unique indices (JAX's scalar index), whose
        # product is the row times its update, written by a scatter
        got = jnp._take_op(xs, jnp.minimum(rows, size * n - 1), axis=0, **kw)
        out = jnp.scatter(xs, rows, got * us, **kw)
    else:
        out = getattr(jnp, op)(xs, rows, us, **kw)
    out = jnp.reshape(out, (size, n) + rest)
    if spec is not None and spec[1] is not None:
        out = jnp.reshard(out, P(*spec))
    return BatchTracer(out, size)


def _segment_sum(a, size):
    """segment_sum of examples: batched data with the ids of the example's
    rows (moved behind them); batched ids as ids of (example, segment)."""
    jnp = _jnp()
    data, ids, n = a["data"], a["segment_ids"], a["num_segments"]
    k = len(ids.shape)
    if _isb(ids):
        ids_b = ids.val + jnp.reshape(jnp.arange(size, dtype=np.int32) * n,
                                      (size,) + (1,) * k)
        ids_b = jnp.where((ids.val >= 0) & (ids.val < n), ids_b, -1)  # dropped stays dropped
        out = jnp.segment_sum(_full(data, size), ids_b, n * size)
        return BatchTracer(jnp.reshape(out, (size, n) + tuple(out.shape[1:])), size)
    x = data.val  # (B, ids' dims, rest): ids' dims first, then the batch
    r = len(x.shape)
    x = jnp.transpose(x, tuple(range(1, k + 1)) + (0,) + tuple(range(k + 1, r)))
    out = jnp.segment_sum(x, ids, n)  # (n, B, rest)
    return BatchTracer(jnp.transpose(out, (1, 0) + tuple(range(2, len(out.shape)))), size)


def _flatten_example(v, size):
    jnp = _jnp()
    if _isb(v):
        return BatchTracer(jnp.reshape(v.val, (size, -1)), size)
    return jnp.reshape(v, (-1,))


def _batched_input(v, axis):
    """A leaf of a mapped argument: (its batched value with the batch first,
    the batch's size)."""
    jnp = _jnp()
    from ._core import Array
    if isinstance(v, Array):
        from ._grad import _as_traced
        v = _as_traced(v)
    if not isinstance(v, Tracer):
        v = jnp.asarray(v)
    n = len(v.shape)
    if not -n <= axis < n:  # JAX's _mapped_axis_size
        raise _error(ValueError, f"vmap was requested to map its argument along axis {axis}, "
                     f"which implies that its rank should be at least "
                     f"{axis + 1 if axis >= 0 else -axis}, but is only {n} (its shape is "
                     f"{tuple(v.shape)})")
    axis %= n
    if axis:
        v = jnp.moveaxis(v, axis, 0)
    return v, v.shape[0]


def _error(builtin, message):
    """An InvalidArgument that is JAX's built-in exception too (as _core's
    _AS_BUILTIN makes the C core's refusals): code catching either catches
    it."""
    from ._core import _builtin_class
    return _builtin_class(InvalidArgument, builtin)(message)


# ---- pytrees of axes (in_axes, out_axes), as JAX's flatten_axes -------------

def _leaves(v):
    """A pytree's leaves, None an empty subtree (JAX's pytrees)."""
    return [x for x, _ in _tree_leaves(v, "a") if x is not None]


def _key(v, k):
    """One step of a key path (child k of node v), as JAX's keystr prints it."""
    if isinstance(v, dict):
        return f"[{k!r}]"
    if isinstance(v, tuple) and hasattr(type(v), "_fields"):
        return f".{k}"
    if type(v) in (tuple, list):
        return f"[{k}]"
    return f"[<flat index {k}>]"


def _paths(v, path=""):
    """(key path, leaf) of a pytree's leaves (None an empty subtree)."""
    n = _node(v)
    if n is None:
        return [] if v is None else [(path, v)]
    return [x for c, k in zip(n[0], n[1]) for x in _paths(c, path + _key(v, k))]


def _check_spec(what, spec):
    """in_axes / out_axes: ints and Nones in containers (JAX's TypeError)."""
    if not all(type(a) is int or a is None for a, _ in _tree_leaves(spec, "a")):
        raise _error(TypeError, f"vmap {what} must be an int, None, or (nested) container with "
                     f"those types as leaves, but got {spec}.")


def _prefix(name, value, spec, path, out, errors):
    """The axes of spec (a pytree prefix of value; None a leaf of it) for
    each of value's leaves, appended to out; JAX's sentences of where spec
    is not a prefix appended to errors."""
    if _node(spec) is None:  # a leaf: an axis, or None, for the whole subtree
        out.extend([spec] * len(_leaves(value)))
        return
    where = f"    {name}{path}\n"
    if type(spec) is not type(value):
        errors.append(f"pytree structure error: different types at key path\n{where}At that "
                      f"key path, the prefix pytree {name} has a subtree of type\n    "
                      f"{type(spec)}\nbut at the same key path the full pytree has a subtree "
                      f"of different type\n    {type(value)}.")
        return
    ns, nv = _node(spec), _node(value)
    if isinstance(spec, (list, tuple)) and len(spec) != len(value):
        ty = type(spec).__name__
        errors.append(f"pytree structure error: different lengths of {ty} at key path\n{where}"
                      f"At that key path, the prefix pytree {name} has a subtree of type {ty} "
                      f"of length {len(spec)}, but the full pytree has a subtree of the same "
                      f"type but of length {len(value)}.")
        return
    ks, kv = [_key(spec, k) for k in ns[1]], [_key(value, k) for k in nv[1]]
    if len(ks) != len(kv):
        diff = " ".join(sorted(set(ks) ^ set(kv)))
        errors.append(f"pytree structure error: different numbers of pytree children at key "
                      f"path\n{where}At that key path, the prefix pytree {name} has a subtree "
                      f"of type\n    {type(spec)}\nwith {len(ks)} child keys\n    "
                      f"{' '.join(ks)}\nbut at the same key path the full pytree has a subtree "
                      f"of the same type but with {len(kv)} child keys\n    {' '.join(kv)}\n"
                      f"so the symmetric difference on key sets is\n    {diff}")
        return
    if ns[3] != nv[3]:  # dict keys, a registered class's aux data
        ms, mv = (str(list(n[1]) if isinstance(spec, dict) else n[3][1]) for n in (ns, nv))
        errors.append(f"pytree structure error: different pytree metadata at key path\n"
                      f"{where}At that key path, the prefix pytree {name} has a subtree of "
                      f"type\n    {type(spec)}\nwith metadata\n    {ms}\nbut at the same key "
                      f"path the full pytree has a subtree of the same type but with metadata"
                      f"\n    {mv}")
        return
    for cs, cv, k in zip(ns[0], nv[0], ns[1]):
        _prefix(name, cv, cs, path + _key(spec, k), out, errors)


def _flatten_axes(name, value, spec):
    """spec, a pytree prefix of value, as one axis (or None) per leaf of
    value (JAX's flatten_axes: None a leaf of spec, an empty subtree of
    value); JAX's ValueError where it is not a prefix."""
    out, errors = [], []
    _prefix(name, value, spec, "", out, errors)
    if errors:
        raise _error(ValueError, f"{name} specification must be a tree prefix of the "
                     f"corresponding value; \n  Mismatch details ({len(errors)} found):\n  " +
                     "\n  ".join(errors))
    return out


def _short_type(v):
    """A value's type as JAX's str_short prints it: float32[3,4]."""
    try:
        dt = np.dtype(v.dtype).name
    except (AttributeError, TypeError):
        dt = type(v).__name__
    return f"{dt}[{','.join(str(d) for d in getattr(v, 'shape', ()))}]"


def _inconsistent(fun, args, kwargs, paths, sizes, axes, axis_size):
    """JAX's ValueError of _mapped_axis_size: the mapped axes' sizes, most
    common first, each with an argument that has it."""
    try:
        names = list(inspect.signature(fun).bind(*args, **kwargs).signature.parameters)
    except (TypeError, ValueError):
        names = None

    def where(path, v):
        if path.startswith("args"):
            m = re.match(r"args\[(\d+)\]", path)
            i = int(m.group(1))
            if names is not None and i < len(names):
                path = f"argument {names[i]}" + path[m.end():]
        return f"{path} of type {_short_type(v)}"
    mapped = [(s, p, v, a) for s, (p, v), a in zip(sizes, paths, axes) if s is not None]
    counts = collections.Counter(s for s, _, _, _ in mapped).most_common()
    msg = ["vmap got inconsistent sizes for array axes to be mapped:\n"]
    if axis_size is not None:
        msg.append(f"  * the `axis_size` argument was {axis_size};\n")
    for k, (sz, ct) in enumerate(counts):
        _, p, v, a = next(m for m in mapped if m[0] == sz)
        if ct == 1:
            msg.append(f"  * one axis had size {sz}: axis {a} of {where(p, v)};\n")
        else:
            msg.append(f"  * {'most' if k == 0 else 'some'} axes ({ct} of them) had size {sz}, "
                       f"e.g. axis {a} of {where(p, v)};\n")
    return _error(ValueError, "".join(msg)[:-2])


def _mapped_axis_spec(batched, unmapped):
    """The spec entry of the mapped dimension of the batched inputs (their
    first), as JAX's _mapped_axis_spec: the same for all of them (JAX's
    ValueError otherwise), and no mesh axis of it sharding an unmapped
    input (JAX's _check_ema_unmapped_args)."""
    from ._trace import _dims, _spec_entry
    ema, seen = None, False
    for v in batched:
        e = _spec_entry(_dims(v.type)[0]) if isinstance(v, Tracer) else None
        if seen and e != ema:
            raise ValueError(f"Mapped away dimension of inputs passed to vmap should be sharded "
                             f"the same. Got inconsistent axis specs: {ema} vs {e}")
        ema, seen = e, True
    if ema is None:
        return None

    def names(e):
        return () if e is None else (e,) if isinstance(e, str) else tuple(e)
    axes = names(ema)
    for v in unmapped:
        if isinstance(v, Tracer) and {a for d in _dims(v.type) for a in
                                      names(_spec_entry(d))} & set(axes):
            raise ValueError(f"Unmapped values passed to vmap cannot be sharded along the mesh "
                             f"axis you are vmapping over. Got type: {v.type}, in_axes: None "
                             f"and vmapped mesh axis: {axes}")
    return ema


def _spmd_name(spmd, ema):
    """The spmd_axis_name a vmap's rules use, as JAX's vmap decides it:
    none when the batch is sharded over Explicit axes (ema), which must then
    be the same axes (JAX's ValueError otherwise)."""
    if spmd is None or ema is None:
        return spmd
    ema = (ema,) if isinstance(ema, str) else tuple(ema)
    if spmd != ema:
        raise ValueError(f"Only one of spmd_axis_name or arrays sharded on `Explicit` mesh axis "
                         f"type is allowed. Got spmd_axis_name={spmd} and arrays sharded on "
                         f"explicit_mesh_axis={ema}")
    return None


def spmd_name(level=None):
    """The spmd_axis_name (a tuple) of the vmap of `level` (the rule
    running's), or None."""
    level = _LEVELS[-1] if level is None else level
    return next((n for lvl, n in reversed(_SPMD) if lvl == level), None)


def vmap(fun, in_axes=0, out_axes=0, axis_name=None, axis_size=None, spmd_axis_name=None):
    """jax.vmap: fun of one example, mapped over axis in_axes of its
    positional arguments (an int, None for an argument passed whole, or a
    tuple of one per argument, each a pytree prefix of its argument: an
    int or None for all its leaves, or a pytree of them; negative axes
    count from the end) and over the first axis of its keyword arguments;
    the results' batch at out_axes (a pytree prefix of the results; None:
    a result that does not depend on the batch, given back as it is; JAX's
    ValueError if it does). None in arguments and results is an empty
    subtree, passed through. axis_size: the batch's size, needed when no
    argument is mapped. In a jit or shard_map body, or at once on Arrays.
    spmd_axis_name: the mesh axes the batch is partitioned over where a
    rule lays it out (with_sharding_constraint, as JAX's batching rule);
    a batch already sharded over Explicit axes must be sharded over these
    (JAX's ValueError otherwise), and keeps its sharding."""
    if spmd_axis_name is not None and not isinstance(spmd_axis_name, tuple):
        spmd_axis_name = (spmd_axis_name,)
    if axis_name is not None and not isinstance(axis_name, str):
        raise InvalidArgument(f"vmap: axis_name must be a string, got {axis_name!r}")
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    if not (in_axes is None or type(in_axes) in (int, tuple)):
        raise _error(TypeError, f"vmap in_axes must be an int, None, or a tuple of entries "
                     f"corresponding to the positional arguments passed to the function, but "
                     f"got {in_axes}.")
    _check_spec("in_axes", in_axes)
    _check_spec("out_axes", out_axes)

    def at_once(args, kwargs):
        return call(*args, **kwargs)

    def call(*args, **kwargs):
        if getattr(_state, "builder", None) is None:  # at once: as a jit of the call
            return jit(at_once)(args, kwargs) if kwargs else jit(call)(*args)
        if isinstance(in_axes, tuple) and len(in_axes) != len(args):
            msg = (f"vmap in_axes must be an int, None, or a tuple of entries corresponding to "
                   f"the positional arguments passed to the function, but got "
                   f"len(in_axes)={len(in_axes)}, len(args)={len(args)}.")
            if kwargs:
                msg += (f" Note that the function was called with keyword arguments "
                        f"{list(kwargs)}, which the entries of a tuple in_axes never "
                        f"correspond to: keyword arguments are always mapped along their "
                        f"leading axis (axis 0). If that is the intended mapping, make in_axes "
                        f"correspond to the positional arguments only; otherwise pass the "
                        f"arguments positionally, or bind unmapped keyword arguments with "
                        f"functools.partial before applying vmap.")
            raise _error(ValueError, msg)
        _DEPTH[0] += 1
        try:
            return run(args, kwargs, _DEPTH[0])
        finally:
            _DEPTH[0] -= 1

    def run(args, kwargs, level):
        # the leaves of the arguments (None an empty subtree), each with its
        # axis: in_axes a prefix of the positional ones, 0 for keywords
        axes = _flatten_axes("vmap in_axes", args, in_axes) + \
            _flatten_axes("vmap in_axes", kwargs, 0)
        paths = _paths(args, "args") + _paths(kwargs, "kwargs")
        sizes, vals = [], []
        for (_, leaf), ax in zip(paths, axes):
            if ax is None:
                sizes.append(None)
                vals.append(leaf)
                continue
            val, n = _batched_input(leaf, ax)
            sizes.append(n)
            vals.append(BatchTracer(val, None, level))
        given = [n for n in sizes if n is not None]
        if not paths and axis_size is None:
            raise _error(ValueError, f"vmap wrapped function must be passed at least one "
                         f"argument containing an array or axis_size must be specified, got "
                         f"empty *args={args} and **kwargs={kwargs}")
        if not given and axis_size is None:
            raise _error(ValueError, "vmap must have at least one non-None value in in_axes or "
                         "axis_size must be specified")
        size = axis_size if axis_size is not None else given[0]
        if any(n != size for n in given):
            raise _inconsistent(fun, args, kwargs, paths, sizes, axes, axis_size)
        mapped = [v for v in vals if isinstance(v, BatchTracer) and v.nbatch is None]
        for v in mapped:
            v.nbatch = size
        ema = _mapped_axis_spec([v.val for v in mapped],
                                [v for v, ax in zip(vals, axes) if ax is None])
        spmd = _spmd_name(spmd_axis_name, ema)
        real_args, real_kwargs = _tree_build((args, kwargs), iter(vals), none_empty=True)
        _ACTIVE.append((level, size))
        _SPMD.append((level, spmd))
        if axis_name is not None:
            _NAMES.append((axis_name, level, size))
        try:
            res = fun(*real_args, **real_kwargs)
        finally:
            _ACTIVE.pop()
            _SPMD.pop()
            if axis_name is not None:
                _NAMES.pop()
        outs = _paths(res)
        dests = _flatten_axes("vmap out_axes", res, out_axes)
        jnp = _jnp()
        done = []
        for (path, v), d in zip(outs, dests):
            bat = isinstance(v, BatchTracer) and v.level == level
            if d is None:  # given back as it is: it must not depend on the batch
                if bat and axis_name is not None:
                    raise _error(ValueError, f"vmap has mapped output (axis_name={axis_name}) "
                                 f"but out_axes is None")
                if bat:
                    raise _error(ValueError, f"at vmap out_axes{path}, got axis spec None but "
                                 f"output was batched on axis 0")
                done.append(v)
                continue
            _LEVELS.append(level)
            try:  # a result that does not depend on the batch: laid out as the batch is
                b = _full(v, size, ema)
            finally:
                _LEVELS.pop()
            n = len(b.shape)
            if not -n <= d < n:
                raise _error(ValueError, f"axis {d} is out of bounds for array of dimension {n}")
            if d % n:
                b = jnp.moveaxis(b, 0, d % n)
            done.append(b)
        return _tree_build(res, iter(done), none_empty=True)
    call.__name__ = getattr(fun, "__name__", "f")
    call.__doc__ = fun.__doc__
    return call
