"""jax.lax-style collectives for shard_map bodies (psum, pmean, all_gather,
psum_scatter, ppermute, all_to_all, axis_index, axis_size, ...), plus the
numpy ops under their lax names, made from the C op table at import."""
import numpy as _np

import _shmap

from ._grad import stop_gradient  # noqa: F401 (jax.lax.stop_gradient)
from ._trace import _fmt, make_op

__all__ = []
for _name, _sig, _mn, _mx, _jit_only in _shmap.op_table():
    if _name not in ("shard_map_in", "shard_map_out"):
        globals()[_name] = make_op(_name)
        __all__.append(_name)
# jax.lax.max and min are elementwise (the op table's max and min reduce, as jnp's)
max = make_op("maximum")  # noqa: A001
min = make_op("minimum")  # noqa: A001


def fori_loop(lower, upper, body_fun, init_val, *, unroll=None):
    """jax.lax.fori_loop: body_fun(i, val) for i in range(lower, upper).
    Static bounds (Python or numpy ints) unroll the loop here (i is a
    Python int); a traced bound makes it a while_loop of the program, with
    i a traced int32 counter (so, as JAX's, not reverse-differentiable)."""
    import numbers

    if isinstance(lower, numbers.Integral) and isinstance(upper, numbers.Integral):
        val = init_val
        for i in range(int(lower), int(upper)):
            val = body_fun(i, val)
        return val
    ld = getattr(lower, "dtype", None)
    ud = getattr(upper, "dtype", None)
    if ld is not None and ud is not None and _np.dtype(ld) != _np.dtype(ud):
        raise TypeError(f"lower and upper arguments to fori_loop must have equal types, got "
                        f"{_np.dtype(ld).name} and {_np.dtype(ud).name}")
    _, val = while_loop(lambda c: c[0] < upper,
                        lambda c: (c[0] + 1, body_fun(c[0], c[1])),
                        (_as_traced(lower, ud) if ld is None else lower, init_val))
    return val


__all__.append("fori_loop")


def _cumulative(name):
    def op(operand, axis=0, reverse=False):
        from . import numpy as jnp
        if not reverse:
            return getattr(jnp, name)(operand, axis=axis)
        return jnp.flip(getattr(jnp, name)(jnp.flip(operand, axis), axis=axis), axis)
    op.__name__ = name
    op.__doc__ = (f"jax.lax.{name}(operand, axis=0, reverse=False): the running {name[3:]} "
                  f"along axis (reverse: from the end).")
    return op


for _name in ("cumsum", "cumprod", "cummax", "cummin"):
    globals()[_name] = _cumulative(_name)


def argmax(operand, axis, index_dtype):
    """jax.lax.argmax: the index of the largest element along axis."""
    from . import numpy as jnp
    r = jnp.argmax(operand, axis=axis)
    return r if _np.dtype(index_dtype) == _np.int32 else jnp.astype(r, index_dtype)


def argmin(operand, axis, index_dtype):
    """jax.lax.argmin: the index of the smallest element along axis."""
    from . import numpy as jnp
    r = jnp.argmin(operand, axis=axis)
    return r if _np.dtype(index_dtype) == _np.int32 else jnp.astype(r, index_dtype)



# ---- control flow: traced values decide by selection, static ones by Python --


def _leaves(tree):
    """The leaves of a pytree (tuples, lists, dicts; anything else a leaf)
    and a function that rebuilds one of that structure from new leaves."""
    from ._trace import _tree_build, _tree_leaves
    return [v for v, _ in _tree_leaves(tree, "")], lambda vals: _tree_build(tree, iter(vals))


def _is_static(v):
    import numbers
    return isinstance(v, (bool, numbers.Number, _np.bool_, _np.number))


def select(pred, on_true, on_false):
    """jax.lax.select: on_true where pred, else on_false (jnp.where)."""
    from . import numpy as jnp
    return jnp.where(pred, on_true, on_false)


def cond(pred, true_fun, false_fun, *operands):
    """jax.lax.cond. A static predicate (a Python or numpy scalar) calls the
    branch it picks; a traced one runs only the branch it picks, in the
    program (each branch in a while loop that runs once or never). Under
    grad or vmap, or for branches whose results are not arrays of one type,
    both run and each result leaf is selected with where (the same values:
    branches have no effects)."""
    if _is_static(pred):
        return (true_fun if pred else false_fun)(*operands)
    once = _run_picked([pred, _not(pred)], [true_fun, false_fun], operands)
    if once is not None:
        return once
    t, f = true_fun(*operands), false_fun(*operands)
    tl, build = _leaves(t)
    fl, _ = _leaves(f)
    if len(tl) != len(fl):
        raise TypeError("cond branches must return the same structure of values")
    return build([select(pred, a, b) for a, b in zip(tl, fl)])


def switch(index, branches, *operands):
    """jax.lax.switch: branches[index](*operands), the index clamped into
    range as JAX's; a traced index selects among every branch's results."""
    branches = list(branches)
    if _is_static(index):
        return branches[builtins.min(builtins.max(int(index), 0), len(branches) - 1)](*operands)
    from . import numpy as jnp
    index = jnp.clip(index, 0, len(branches) - 1)
    once = _run_picked([index == k for k in range(len(branches))], branches, operands) \
        if len(branches) > 1 else None
    if once is not None:
        return once
    outs = [b(*operands) for b in branches]
    leaves = [_leaves(o)[0] for o in outs]
    _, build = _leaves(outs[0])
    res = leaves[-1]
    for k in range(len(branches) - 2, -1, -1):
        res = [select(index == k, a, b) for a, b in zip(leaves[k], res)]
    return build(res)


def _not(p):
    from ._trace import Tracer
    return ~p if isinstance(p, Tracer) else not p


def _run_picked(flags, branches, operands):
    """The result of the one branch whose flag (a traced bool scalar) holds,
    the others not run: each branch in a while loop whose carry is its flag
    (made false by the turn) and the results (zeros of the branches' common
    types before). None where the branches must all run and be selected
    from: no traced flag, under grad or vmap, branches whose results are
    not arrays of one structure and types (nothing traced is left then)."""
    from . import _vmap
    from . import numpy as jnp
    from ._trace import Tracer, _state, _tree_sig
    b = getattr(_state, "builder", None)
    args = [v for o in operands for v in _leaves(o)[0]]
    if b is None or not builtins.all(isinstance(f, Tracer) for f in flags) or \
            builtins.any(isinstance(v, _vmap.BatchTracer) for v in args + list(flags)):
        return None
    mark = _Mark(b)
    if mark.differentiated(args):
        return None
    try:
        outs = [br(*operands) for br in branches]  # traced to learn their types, taken back
        leaves = [_leaves(o)[0] for o in outs]
        if builtins.any(_tree_sig(o) != _tree_sig(outs[0]) for o in outs) or \
                not builtins.all(isinstance(v, Tracer) and not isinstance(v, _vmap.BatchTracer)
                                 for lv in leaves for v in lv) or \
                builtins.any([v.type for v in lv] != [v.type for v in leaves[0]]
                             for lv in leaves) or \
                mark.taped():
            raise _Unroll()
        _, build = _leaves(outs[0])
        types = [(tuple(v.shape), v.dtype, v.type) for v in leaves[0]]
        mark.undo()
        res = []
        for shape, dt, ty in types:
            spec = jnp._spec_of_type(ty) if b.kind == "jit" else None
            z = jnp.zeros(shape, dtype=dt) if spec is None else \
                jnp.zeros(shape, dtype=dt, out_sharding=spec)
            varying = _varying(ty)
            res.append(pvary(z, tuple(varying)) if varying else z)  # noqa: F821 (op table)
        for flag, br in zip(flags, branches):
            def body(s, br=br):
                return s[0] & False, _leaves(br(*operands))[0]
            _, res = while_loop(lambda s: s[0], body, (flag, res))
        return build(res)
    except _Unroll:
        mark.undo()
        return None
    except BaseException:
        mark.undo()
        raise


def scan(f, init, xs=None, length=None, reverse=False, unroll=1):
    """jax.lax.scan: carry, y = f(carry, x) for each x = xs[i] (every leaf of
    xs indexed along its first axis; xs=None: length steps of x=None);
    returns the last carry and the ys stacked along a new first axis. In a
    traced function with traced values in the carry or xs it is a while
    loop of the program (one copy of f, its step's x and y moved by
    dynamic slices); under grad (which goes through no loop), or where the
    loop cannot be written (f returns no array ys, a traced xs sharded along
    its first axis), it is unrolled, as the text form unrolls its loops.
    unroll is accepted and ignored."""
    from . import numpy as jnp
    xl, xbuild = _leaves(xs) if xs is not None else ([], None)
    n = length if xs is None else (xl[0].shape[0] if xl else length)
    if n is None:
        raise ValueError("scan: give xs or length")
    looped = _scan_loop(f, init, xl, xbuild, n, reverse) if n > 1 else None
    if looped is not None:
        return looped
    carry, ys = init, []
    steps = range(n - 1, -1, -1) if reverse else range(n)
    for i in steps:
        x = xbuild([leaf[i] for leaf in xl]) if xs is not None else None
        carry, y = f(carry, x)
        ys.append(y)
    if reverse:
        ys.reverse()
    if not ys or ys[0] is None:
        return carry, None
    yl = [_leaves(y)[0] for y in ys]
    _, ybuild = _leaves(ys[0])
    return carry, ybuild([jnp.stack([row[k] for row in yl]) for k in range(len(yl[0]))])


def _scan_loop(f, init, xl, xbuild, n, reverse):
    """scan as a while loop of the program: (carry, ys), or None where it
    is to be unrolled (nothing traced, under grad, ys that are not arrays,
    or a step that cannot be written as one turn), with nothing traced
    left behind."""
    from . import _vmap
    from . import numpy as jnp
    from ._core import P
    from ._trace import Tracer, _state
    b = getattr(_state, "builder", None)
    leaves = _leaves(init)[0] + list(xl)
    if b is None or not builtins.any(isinstance(v, Tracer) for v in leaves):
        return None
    mark = _Mark(b)
    if mark.differentiated(leaves) or \
            builtins.any(isinstance(v, Tracer) and _sharded_first(v) for v in xl):
        return None
    try:
        # one step traced to learn what f returns, then taken back
        x0 = xbuild([dynamic_index_in_dim(v, n - 1 if reverse else 0, 0, False) for v in xl]) \
            if xbuild else None
        c1, y1 = f(init, x0)
        ys_l, ybuild = _leaves(y1) if y1 is not None else ([], None)
        if not builtins.all(isinstance(y, Tracer) and not isinstance(y, _vmap.BatchTracer)
                            for y in ys_l) or \
                mark.taped():
            raise _Unroll()
        yt = [(tuple(y.shape), y.dtype, jnp._spec_of_type(y.type)) for y in ys_l]
        mark.undo()
        none = init is None  # no carry: the loop carries an empty tuple
        if not none:  # a Python scalar in init takes the dtype the step gives it (JAX's)
            carry_dt = [getattr(c, "dtype", None) for c in _leaves(c1)[0]]
            init_l, ibuild = _leaves(init)
            init = ibuild([_as_traced(v, d) if _is_static(v) and not isinstance(v, _np.generic)
                           and d is not None else v for v, d in zip(init_l, carry_dt)])
        bufs = [jnp.zeros((n,) + sh, dtype=dt, out_sharding=None if sp is None else
                          P(None, *sp)) for sh, dt, sp in yt]

        def body(s):
            i, carry, bufs = s
            idx = (n - 1) - i if reverse else i
            x = xbuild([dynamic_index_in_dim(v, idx, 0, False) for v in xl]) if xbuild else None
            carry, y = f(None if none else carry, x)
            carry = () if none else carry
            ys = _leaves(y)[0] if y is not None else []
            return i + 1, carry, [dynamic_update_index_in_dim(buf, yv, idx, 0)
                                  for buf, yv in zip(bufs, ys)]
        _, carry, bufs = while_loop(lambda s: s[0] < n, body,
                                    (jnp.zeros((), dtype=_np.int32), () if none else init, bufs))
        carry = None if none else carry
    except (_Unroll, ValueError):
        mark.undo()
        return None
    except TypeError as e:
        mark.undo()
        raise TypeError(str(e).replace("while_loop body function carry",
                                       "scan body function carry")) from None
    except BaseException:
        mark.undo()
        raise
    return carry, (ybuild(bufs) if ybuild else None)


class _Unroll(Exception):
    """scan's step is to be unrolled (raised and caught in _scan_loop)."""


def _sharded_first(v):
    from . import numpy as jnp
    spec = jnp._spec_of_type(v.type)
    return spec is not None and len(tuple(spec)) > 0 and tuple(spec)[0] is not None


def top_k(operand, k):
    """jax.lax.top_k: the k largest elements along the last axis, largest
    first (ties: the lower position first), and their positions."""
    from . import numpy as jnp
    idx = jnp.argsort(operand, axis=-1, descending=True)[..., :k]
    return jnp.take_along_axis(operand, idx, axis=-1), idx


def sort(operand, dimension=-1, is_stable=True, num_keys=1):
    """jax.lax.sort of one operand: ascending along dimension."""
    from . import numpy as jnp
    return jnp.sort(operand, axis=dimension)


__all__ += ["select", "cond", "switch", "scan", "top_k"]


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None,
                out_sharding=None):
    """lax.dot_general as an einsum: dimension_numbers ((lhs_contracting,
    rhs_contracting), (lhs_batch, rhs_batch)); the result's dimensions are
    the batch ones, then lhs's free ones, then rhs's, as lax's."""
    from . import numpy as jnp
    (lc, rc), (lb, rb) = dimension_numbers
    lc, rc, lb, rb = (tuple(int(d) for d in v) for v in (lc, rc, lb, rb))
    if len(lc) != len(rc) or len(lb) != len(rb):
        raise ValueError("dot_general requires equal numbers of lhs and rhs contracting and "
                         "batch dimensions")
    letters = iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    ls = [next(letters) for _ in range(len(lhs.shape))]
    rs = [None] * len(rhs.shape)
    for a, b in zip(lc + lb, rc + rb):
        rs[b] = ls[a]
    rs = [c or next(letters) for c in rs]
    out = [ls[d] for d in lb] + [ls[d] for d in range(len(ls)) if d not in lc + lb] + \
        [rs[d] for d in range(len(rs)) if d not in rc + rb]
    kw = {} if out_sharding is None else {"out_sharding": out_sharding}
    r = jnp.einsum("".join(ls) + "," + "".join(rs) + "->" + "".join(out), lhs, rhs, **kw)
    return r if preferred_element_type is None else r.astype(preferred_element_type)


__all__.append("dot_general")


# ---- lax's names for the arithmetic, reductions, shapes and loops -----------


import builtins  # noqa: E402 (slice, abs: the op table's names here)


def _jnp():
    from . import numpy as jnp
    return jnp


def sub(x, y):
    """lax.sub: x - y."""
    return _jnp().subtract(x, y)


def mul(x, y):
    """lax.mul: x * y."""
    return _jnp().multiply(x, y)


def div(x, y):
    """lax.div: x / y; integers round toward zero (C's), not down."""
    jnp = _jnp()
    dt = x.dtype if hasattr(x, "dtype") else _np.asarray(y).dtype
    if not _np.issubdtype(dt, _np.integer):
        return jnp.divide(x, y)
    q = jnp.floor_divide(x, y)
    inexact = jnp.logical_and(jnp.mod(x, y) != 0, jnp.not_equal(x < 0, y < 0))
    return jnp.where(inexact, q + 1, q)


def neg(x):
    """lax.neg: -x."""
    return _jnp().negative(x)


def pow(x, y):
    """lax.pow: x ** y."""
    return _jnp().power(x, y)


def integer_pow(x, y):
    """lax.integer_pow: x ** y for a static int y, by the repeated squaring
    XLA's lowering does (1 / x**-y for y < 0)."""
    import numbers
    if not isinstance(y, numbers.Integral):
        raise TypeError(f"integer_pow: y must be a static int, got {y!r}")
    jnp = _jnp()
    if y == 0:
        return jnp.ones_like(x)
    n, acc, base = builtins.abs(int(y)), None, x
    while True:
        if n & 1:
            acc = base if acc is None else acc * base
        n >>= 1
        if not n:
            break
        base = base * base
    return 1 / acc if y < 0 else acc


def square(x):
    """lax.square: x * x."""
    return x * x


def _reducer(name):
    def op(operand, axes):
        return getattr(_jnp(), name)(operand, axis=tuple(int(a) for a in axes))
    op.__name__ = "reduce_" + name
    op.__doc__ = f"lax.reduce_{name}(operand, axes): jnp.{name} over axes."
    return op


reduce_sum, reduce_max = _reducer("sum"), _reducer("max")
reduce_min, reduce_prod = _reducer("min"), _reducer("prod")


def reduce_and(operand, axes):
    """lax.reduce_and: all over axes."""
    return _jnp().all(operand, axis=tuple(axes))


def reduce_or(operand, axes):
    """lax.reduce_or: any over axes."""
    return _jnp().any(operand, axis=tuple(axes))


def convert_element_type(operand, new_dtype):
    """lax.convert_element_type: astype (a Python scalar: a rank-0 array)."""
    jnp = _jnp()
    if not hasattr(operand, "dtype") or isinstance(operand, (_np.ndarray, _np.generic)):
        return jnp.full((), _np.asarray(operand).astype(new_dtype).item(), dtype=new_dtype)
    return jnp.astype(operand, new_dtype)


def broadcast(operand, sizes):
    """lax.broadcast: operand with new leading dimensions sizes."""
    sizes = tuple(int(s) for s in sizes)
    return _jnp().broadcast_to(operand, sizes + tuple(operand.shape))


def broadcast_in_dim(operand, shape, broadcast_dimensions, out_sharding=None):
    """lax.broadcast_in_dim: operand's dimension i becomes shape's
    broadcast_dimensions[i] (of its size or 1), the others broadcast."""
    jnp = _jnp()
    shape = tuple(int(s) for s in shape)
    dims = tuple(int(d) for d in broadcast_dimensions)
    if len(dims) != len(operand.shape) or list(dims) != sorted(dims):
        raise TypeError(f"broadcast_in_dim broadcast_dimensions must be strictly increasing and "
                        f"one per operand dimension; got {dims} for shape {operand.shape}")
    mid = [1] * len(shape)
    for d, n in zip(dims, operand.shape):
        if n not in (1, shape[d]):
            raise TypeError(f"broadcast_in_dim operand dimension sizes must either be 1, or be "
                            f"equal to their corresponding dimensions in the target broadcast "
                            f"shape; got operand of shape {tuple(operand.shape)}, target "
                            f"broadcast shape {shape}, broadcast_dimensions {dims} ")
        mid[d] = n
    r = jnp.reshape(operand, tuple(mid)) if tuple(mid) != tuple(operand.shape) else operand
    r = jnp.broadcast_to(r, shape) if tuple(r.shape) != shape else r
    return r if out_sharding is None else jnp.reshard(r, out_sharding)


def clamp(min, x, max):
    """lax.clamp(min, x, max): x limited to [min, max]."""
    jnp = _jnp()
    return jnp.minimum(jnp.maximum(x, min), max)


def iota(dtype, size, dimension=0, sharding=None):
    """lax.iota(dtype, size): 0, 1, ..., size - 1 as dtype."""
    kw = {} if sharding is None else {"out_sharding": getattr(sharding, "spec", sharding)}
    return _jnp().arange(int(size), dtype=dtype, **kw)


def full_like(x, fill_value, dtype=None, shape=None, sharding=None):
    """lax.full_like: fill_value in x's dtype (or dtype), of x's shape (or
    shape); x's sharding when the shape is x's, as JAX's."""
    jnp = _jnp()
    if shape is None or tuple(shape) == tuple(x.shape):
        return jnp.full_like(x, fill_value, dtype=dtype or x.dtype)
    return jnp.full(tuple(shape), fill_value, dtype=dtype or x.dtype)


def map(f, xs, *, batch_size=None):
    """lax.map: f applied to each row of xs (every leaf indexed along its
    leading axis), the results stacked, as a scan. batch_size is taken; it
    changes how JAX runs f (vmap over batches), not the values."""
    if batch_size is not None and int(batch_size) < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size}")
    _, ys = scan(lambda c, x: (c, f(x)), None, xs)
    return ys


def _interleave(a, b, axis):
    """JAX's _interleave: a's and b's entries alternating along axis (a
    first; a one longer, or as long)."""
    jnp = _jnp()
    na, nb = a.shape[axis], b.shape[axis]
    if na == nb + 1:
        padw = [(0, 0)] * len(b.shape)
        padw[axis] = (0, 1)
        b = jnp.pad(b, tuple(padw))
    s = list(a.shape)
    r = jnp.stack([a, b], axis=axis + 1)
    s[axis] = 2 * a.shape[axis]
    r = jnp.reshape(r, tuple(s))
    if na == nb + 1:
        r = r[(builtins.slice(None),) * axis + (builtins.slice(0, na + nb),)]
    return r


def associative_scan(fn, elems, reverse=False, axis=0):
    """lax.associative_scan by JAX's algorithm (the same combinations in the
    same order, so the same values, rounding included): fn combines
    adjacent pairs, the odd positions are a scan of those (recursively),
    the even ones fn(previous odd result, element); elems a pytree of
    arrays of equal length along axis."""
    jnp = _jnp()
    leaves, build = _leaves(elems)
    if not leaves:
        raise ValueError("associative_scan needs at least one array")
    axis = axis % len(leaves[0].shape)
    n = leaves[0].shape[axis]
    if builtins.any(e.shape[axis] != n for e in leaves[1:]):
        raise ValueError("Array inputs to associative_scan must have the same first dimension. "
                         f"(saw: {[tuple(e.shape) for e in leaves]})")
    leaves = [jnp._unshard(e, axis) for e in leaves]  # strided slices along axis
    if reverse:
        leaves = [jnp.flip(e, axis) for e in leaves]

    def sl(e, start, stop, step=1):
        return e[(builtins.slice(None),) * axis + (builtins.slice(start, stop, step),)]

    def combine(a, b):
        return _leaves(fn(build(a), build(b)))[0]

    def scan_(es):
        m = es[0].shape[axis]
        if m < 2:
            return es
        reduced = combine([sl(e, 0, m - 1, 2) for e in es], [sl(e, 1, None, 2) for e in es])
        odd = scan_(reduced)
        if m % 2 == 0:
            even = combine([sl(e, 0, e.shape[axis] - 1) for e in odd],
                           [sl(e, 2, None, 2) for e in es])
        else:
            even = combine(odd, [sl(e, 2, None, 2) for e in es])
        even = [jnp.concatenate((sl(e, 0, 1), r), axis=axis) for e, r in zip(es, even)]
        return [_interleave(e, o, axis) for e, o in zip(even, odd)]

    out = scan_(leaves)
    if reverse:
        out = [jnp.flip(e, axis) for e in out]
    return build(out)


def erf_inv(x):
    """lax.erf_inv as XLA computes it (chlo.erf_inv): float32 (and float16,
    in float32) Giles' single-precision polynomials in w = -log1p(-x*x),
    float64 the three double-precision ones; the coefficients and the
    order of operations of shmap.random's host versions, so the values
    match them and JAX's."""
    from . import random as _random
    jnp = _jnp()
    dt = x.dtype
    if dt == _np.float64:  # constants made float64 (a bare float in where would be float32)
        return _random._erf_inv64_with(jnp, x, lambda v: jnp.full(tuple(x.shape), v,
                                                                  dtype=_np.float64))
    x32 = x if dt == _np.float32 else jnp.astype(x, _np.float32)
    w = -jnp.log1p(x32 * -x32)
    lt = w < 5.0
    w = jnp.where(lt, w - 2.5, jnp.sqrt(w) - 3.0)
    lo, hi = _random._ERFINV32_LT5, _random._ERFINV32_GE5
    p = jnp.where(lt, float(lo[0]), float(hi[0]))
    for i in range(1, 9):
        p = jnp.where(lt, float(lo[i]), float(hi[i])) + p * w
    r = jnp.where(jnp.abs(x32) == 1.0, x32 * _np.inf, p * x32)
    return r if dt == _np.float32 else jnp.astype(r, dt)


_NO_REVERSE = ("Reverse-mode differentiation does not work for lax.while_loop or "
               "lax.fori_loop with dynamic start/stop values. Try using lax.scan, or using "
               "fori_loop with static start/stop.")


def while_loop(cond_fun, body_fun, init_val):
    """jax.lax.while_loop: body_fun applied to the carry while cond_fun of
    it holds. In a traced function a carry with traced values (or a
    predicate on them) makes a loop of the program (`while` in its text,
    run by the service: the number of turns is the data's); a carry of
    concrete values only (Python or numpy values, or Arrays outside a
    trace) is looped over here. As JAX's: the carry keeps its
    pytree structure and types (a Python scalar in init_val takes the
    dtype the body gives it), and reverse-mode differentiation through a
    traced loop is refused."""
    from ._core import Array
    from ._trace import Tracer
    if not (callable(body_fun) and callable(cond_fun)):
        raise TypeError("lax.while_loop: body_fun and cond_fun arguments should be callable.")
    val = init_val
    traced = builtins.any(isinstance(v, Tracer) for v in _leaves(val)[0])
    while True:
        p = cond_fun(val)
        if isinstance(p, Tracer) or traced:  # a traced carry: a loop, even on a counter
            return _traced_while(cond_fun, body_fun, val,
                                 p if isinstance(p, Tracer) else _as_traced(bool(p)))
        if isinstance(p, Array):
            p = p.to_numpy()
        if _np.shape(p) != ():
            raise TypeError(f"cond_fun must return a boolean scalar, but got output type(s) "
                            f"{_np.shape(p)}.")
        if not bool(p):
            return val
        val = body_fun(val)


def _as_traced(x, dtype=None):
    """A leaf of a loop's carry as a traced value of the program."""
    from . import numpy as jnp
    from ._trace import Tracer
    if isinstance(x, Tracer) and dtype is None:
        return x
    if dtype is None and _is_static(x) and not isinstance(x, _np.generic):
        dtype = (_np.bool_ if isinstance(x, bool) else
                 _np.int32 if isinstance(x, int) else _np.float32)
    if dtype is None:
        dtype = getattr(x, "dtype", None) or _np.asarray(x).dtype
    if isinstance(x, Tracer):
        return x.astype(dtype)
    return jnp.full(_np.shape(x), jnp.asarray(x), dtype=dtype) if not _is_static(x) else \
        jnp.full((), x, dtype=dtype)


def _check_pred(p, what):
    from ._trace import Tracer
    if not isinstance(p, Tracer) or p.shape != () or p.dtype != _np.bool_:
        ty = p.type if isinstance(p, Tracer) else repr(p)
        raise TypeError(f"cond_fun must return a boolean scalar, but got output type(s) "
                        f"[{ty}].")


def _traced_while(cond_fun, body_fun, val, p):
    """The loop as the text form writes one (docs/programs.md): each leaf
    of the carry a name bound to its first value, `while P:` on the
    predicate, the body, then every carry and the predicate rebound to
    their next values in one assignment."""
    from . import _vmap
    from ._trace import Tracer, _builder, _tree_leaves, _tree_sig
    from .tree_util import keystr, tree_flatten_with_path, tree_structure
    b = _builder()
    leaves, build = _leaves(val)
    bts = [x for x in leaves + [p] if isinstance(x, _vmap.BatchTracer)]
    if bts:
        return _batched_while(cond_fun, body_fun, val, bts)
    _check_pred(p, "cond_fun")
    sig = _tree_sig(val)
    import inspect
    try:  # as JAX names the carry: body_fun's first parameter
        arg = list(inspect.signature(body_fun).parameters)[0]
    except (ValueError, TypeError, IndexError):
        arg = "init_val"
    paths = [arg + keystr(k) for k, _ in tree_flatten_with_path(val)[0]]
    dtypes = [None] * len(leaves)
    rebatch = None
    for attempt in range(2):
        mark = _Mark(b)
        init = [_as_traced(x, d) for x, d in zip(leaves, dtypes)]
        if mark.differentiated(init):
            raise ValueError(_NO_REVERSE)
        p0 = p if attempt == 0 else cond_fun(build(init))
        names = [b.fresh() for _ in init]
        pname = b.fresh()
        # typed before the loop's first line (asking a type checks the text so far)
        carries = [Tracer(nm, x.type, x._dtype, x.shape) for nm, x in zip(names, init)]
        for nm, x in zip(names, init):
            b.statement(f"{nm} = {_fmt(x)}")
        b.statement(f"{pname} = {_fmt(p0)}")
        b.statement(f"while {pname}:")
        outer = b.indent
        b.indent = outer + "    "
        b.loops.append((outer, names + [pname]))
        try:
            new = body_fun(build(carries))
            new_leaves = [v for v, _ in _tree_leaves(new, "")]
            if _tree_sig(new) != sig:
                raise TypeError(
                    "while_loop body function carry input and carry output must have the same "
                    "pytree structure, but they differ:\n\n"
                    f"the input tree structure is:\n{tree_structure(val)}\n"
                    f"the output tree structure is:\n{tree_structure(new)}\n\n"
                    "Revise the function so that the carry output has the same pytree "
                    "structure as the carry input.")
            rebatch = [x for x in new_leaves if isinstance(x, _vmap.BatchTracer)]
            if rebatch:  # the body batches a carry (it closes over a batched value)
                break
            new_leaves = [_as_traced(x) for x in new_leaves]
            redo = [k for k, (x, c) in enumerate(zip(leaves, carries))
                    if _is_static(x) and not isinstance(x, _np.generic) and attempt == 0 and
                    new_leaves[k]._dtype != c._dtype]
            if redo:  # a weakly typed Python scalar takes the body's dtype (JAX's)
                for k in redo:
                    dtypes[k] = new_leaves[k].dtype
                mark.undo()
                continue
            bad = [(k, c, x) for k, (c, x) in enumerate(zip(carries, new_leaves))
                   if c.type != x.type]
            if bad:
                raise TypeError(_carry_type_error(bad, paths))
            p2 = cond_fun(build(new_leaves))
            if not isinstance(p2, Tracer):
                p2 = _as_traced(p2)
            _check_pred(p2, "cond_fun")
            b.statement(f"{', '.join(names + [pname])} = "
                        f"{', '.join(_fmt(x) for x in new_leaves + [p2])}")
        except BaseException:
            rebatch = None
            mark.undo()  # no half-written loop left behind
            raise
        finally:
            b.loops.pop()
            b.indent = outer
            if rebatch:
                mark.undo()
        if mark.taped():
            raise ValueError(_NO_REVERSE)  # the loop reads what a grad differentiates
        return build([Tracer(nm, c.type, c._dtype, c.shape) for nm, c in zip(names, carries)])
    return _batched_while(cond_fun, body_fun, val, rebatch)


def _varying(ty):
    """The varying manual axes of a type string (f32[4]{V:i,j} -> ['i', 'j'])."""
    import re
    m = re.search(r"\{V:([^,}]+(?:,[^,}:]+)*)", ty)
    return m.group(1).split(",") if m else []


def _carry_type_error(bad, paths):
    """JAX's sentence (_check_carry_type) for carries whose type the body
    changed: (index, carry, next value) triples."""
    import re
    diffs, fixes = [], []
    for k, c, x in bad:
        d = (f"the input carry component {paths[k]} has type {c.type} but the corresponding "
             f"output carry component has type {x.type}")
        extra = [a for a in _varying(x.type) if a not in _varying(c.type)]
        if re.sub(r"\{.*\}$", "", c.type) == re.sub(r"\{.*\}$", "", x.type) and extra:
            d += ", so the varying manual axes do not match"
            fixes.append(f"applying `jax.lax.pcast(..., {tuple(extra)}, to='varying')`, to the "
                         f"initial carry value corresponding to the input carry component "
                         f"{paths[k]}")
        diffs.append(d)
    text = ("while_loop body function carry input and carry output must have equal types, but "
            "they differ:\n\n" +
            (diffs[0][0].upper() + diffs[0][1:] + ".\n" if len(diffs) == 1 else
             "".join(f"  * {d};\n" for d in diffs[:-1]) + f"  * {diffs[-1]}.\n") + "\n")
    if fixes:
        text += ("This might be fixed by " + fixes[0] + ".\n" if len(fixes) == 1 else
                 "This might be fixed by:\n" + "".join(f"  * {f};\n" for f in fixes[:-1]) +
                 f"  * {fixes[-1]}.\n")
        text += ("See https://docs.jax.dev/en/latest/notebooks/shard_map.html#scan-vma for more "
                 "information.\n\n")
    return text + ("Revise the function so that all output types match the corresponding input "
                   "types.")


class _Mark:
    """A point of the trace to come back to: the builder's lines and pending
    values, and the tapes of the grads being traced (not paused), at it."""

    def __init__(self, b):
        from . import _grad
        self.b = b
        self.levels = [lv for lv in _grad._levels(b) if not lv.paused]
        self.lines, self.pending = len(b.lines), len(b.pending)
        self.tapes = [len(lv.tape) for lv in self.levels]

    def differentiated(self, values):
        """Some of values depend on what a grad being traced differentiates."""
        return builtins.any(getattr(v, "name", None) in lv.active
                            for lv in self.levels for v in values)

    def taped(self):
        """An op traced since the mark went on a grad's tape."""
        return builtins.any(len(lv.tape) > t for lv, t in zip(self.levels, self.tapes))

    def undo(self):
        """Takes back what was traced since the mark (its value names are
        not reused)."""
        del self.b.lines[self.lines:]
        del self.b.pending[self.pending:]
        self.b.checked = builtins.min(self.b.checked, self.lines)  # lines checked that went
        for lv, t in zip(self.levels, self.tapes):
            del lv.tape[t:]


def _batched_while(cond_fun, body_fun, val, bts):
    """while_loop under vmap, as JAX batches it: every leaf of the carry
    batched, the loop runs while the predicate holds for any example, and
    each turn keeps the carry of the examples whose predicate is false
    (a select). The loop itself is written on the batched values; cond_fun
    and body_fun still see one example (BatchTracers of the same vmap), so
    what they close over batches as in the rest of the function."""
    from . import _core, _vmap
    from . import numpy as jnp
    level = builtins.max(x.level for x in bts)
    size = next(x.nbatch for x in bts if x.level == level)
    leaves, build = _leaves(val)
    _vmap._LEVELS.append(level)
    try:
        entry = _vmap._entry(bts)
        raws = [_vmap._full(x if isinstance(x, _vmap.Tracer) or not _is_static(x)
                            else _as_traced(x), size, entry) for x in leaves]
    finally:
        _vmap._LEVELS.pop()

    def examples(rs):
        return build([_vmap.BatchTracer(r, size, level) for r in rs])

    def raw(v):
        _vmap._LEVELS.append(level)
        try:
            return _vmap._full(v if not _is_static(v) else _as_traced(v), size, entry)
        finally:
            _vmap._LEVELS.pop()

    def pred(rs):
        q = cond_fun(examples(rs))
        if not isinstance(q, _vmap.BatchTracer):
            q = _as_traced(q)
            _check_pred(q, "cond_fun")
        elif q.shape != () or q.dtype != _np.bool_:
            raise TypeError(f"cond_fun must return a boolean scalar, but got output type(s) "
                            f"[{q.type}].")
        return raw(q)

    def cond_raw(rs):
        return jnp.any(pred(rs))

    def body_raw(rs):
        keep = pred(rs)
        new = body_fun(examples(rs))
        out = []
        for n, r in zip([v for v, _ in _tree_leaves_of(new)], rs):
            n = raw(n)
            k = jnp.reshape(keep, (size,) + (1,) * (len(r.shape) - 1))
            o = jnp.where(k, n, r).astype(r.dtype)
            if o.type != r.type and _vmap._explicit():  # laid out as the carry, which it is
                o = jnp.reshard(o, jnp._spec_of_type(r.type) or _core.P())
            out.append(o)
        return out

    res = while_loop(cond_raw, body_raw, raws)
    return build([_vmap.BatchTracer(r, size, level) for r in res])


def _tree_leaves_of(tree):
    from ._trace import _tree_leaves
    return _tree_leaves(tree, "")


__all__ += ["sub", "mul", "div", "neg", "pow", "integer_pow", "square", "reduce_sum",
            "reduce_max", "reduce_min", "reduce_prod", "reduce_and", "reduce_or",
            "convert_element_type", "broadcast", "broadcast_in_dim", "clamp", "iota",
            "full_like", "map", "associative_scan", "erf_inv", "while_loop"]

from . import numpy as _numpy  # noqa: E402,F401 (loads _conv, which it imports at its end)
from ._conv import (ConvDimensionNumbers, conv, conv_dimension_numbers,  # noqa: E402
                    conv_general_dilated, conv_general_permutations, conv_transpose,
                    conv_with_general_padding, padtype_to_pads, reduce_window)

__all__ += ["ConvDimensionNumbers", "conv", "conv_dimension_numbers", "conv_general_dilated",
            "conv_general_permutations", "conv_transpose", "conv_with_general_padding",
            "padtype_to_pads", "reduce_window"]

import types as _types  # noqa: E402

from . import linalg as _la  # noqa: E402

linalg = _types.SimpleNamespace(
    cholesky=lambda x, *, symmetrize_input=True: _la.cholesky(
        x, symmetrize_input=symmetrize_input),
    triangular_solve=_la.triangular_solve)
linalg.__doc__ = "jax.lax.linalg: cholesky and triangular_solve (shmap.linalg's)."
__all__ += ["linalg"]


from .numpy import _at_once as _now  # noqa: E402 (run at once on Arrays outside a trace)


def shift_left(x, y):
    """lax.shift_left: jnp.left_shift (0 past the width)."""
    return _jnp().left_shift(x, y)


def shift_right_arithmetic(x, y):
    """lax.shift_right_arithmetic: the sign filling in."""
    return _jnp().right_shift(x, y)


@_now
def shift_right_logical(x, y):
    """lax.shift_right_logical: zeros filling in, for signed integers too
    (the arithmetic shift masked to its width minus the shift)."""
    jnp = _jnp()
    nbits = _np.dtype(x.dtype).itemsize * 8
    if _np.dtype(x.dtype).kind != "i":
        return jnp.right_shift(x, y)
    y = jnp.astype(y, x.dtype)
    big = (y >= nbits) | (y < 0)
    safe = jnp.where(big, 0, y)
    mask = jnp.power(jnp.astype(2, x.dtype), nbits - safe) - 1  # wraps to -1 for a shift of 0
    return jnp.where(big, 0, jnp.right_shift(x, safe) & mask)


def rem(x, y):
    """lax.rem: C's remainder, the sign of x (jnp.fmod)."""
    return _jnp().fmod(x, y)


@_now
def population_count(x):
    """lax.population_count: the set bits of each integer."""
    jnp = _jnp()
    nbits = _np.dtype(x.dtype).itemsize * 8
    out = jnp.zeros_like(x)
    for k in range(nbits):
        out = out + (shift_right_logical(x, k) & 1)
    return out


@_now
def clz(x):
    """lax.clz: the leading zero bits of each integer."""
    jnp = _jnp()
    nbits = _np.dtype(x.dtype).itemsize * 8
    out, seen = jnp.zeros_like(x), jnp.zeros_like(x) != 0
    for k in range(nbits - 1, -1, -1):
        seen = seen | ((shift_right_logical(x, k) & 1) != 0)
        out = out + jnp.where(seen, 0, 1)
    return out


__all__ += ["shift_left", "shift_right_arithmetic", "shift_right_logical", "rem",
            "population_count", "clz"]


@_now
def dynamic_update_slice_in_dim(operand, update, start_index, axis):
    """lax.dynamic_update_slice_in_dim: update written into operand from
    start_index along axis (0 along the others)."""
    jnp = _jnp()
    axis = axis % len(operand.shape)
    starts = [0] * len(operand.shape)
    starts[axis] = start_index
    return jnp.dynamic_update_slice(operand, update, starts)


@_now
def dynamic_index_in_dim(operand, index, axis=0, keepdims=True):
    """lax.dynamic_index_in_dim: the slice at index along axis (kept as a
    dimension of 1 with keepdims)."""
    jnp = _jnp()
    r = dynamic_slice_in_dim(operand, index, 1, axis)  # noqa: F821 (the op table's)
    return r if keepdims else jnp.squeeze(r, axis)


@_now
def dynamic_update_index_in_dim(operand, update, index, axis):
    """lax.dynamic_update_index_in_dim: update (without the axis, or with it
    of size 1) written at index along axis."""
    jnp = _jnp()
    axis = axis % len(operand.shape)
    if len(update.shape) == len(operand.shape) - 1:
        update = jnp.expand_dims(update, axis)
    return dynamic_update_slice_in_dim(operand, update, index, axis)


@_now
def sort_key_val(keys, values, dimension=-1, is_stable=True):
    """lax.sort_key_val: keys sorted along dimension, values carried along."""
    jnp = _jnp()
    order = jnp.argsort(keys, axis=dimension)
    return (jnp.take_along_axis(keys, order, axis=dimension),
            jnp.take_along_axis(values, order, axis=dimension))


def optimization_barrier(operand):
    """lax.optimization_barrier: the operand (shmap does not reorder across
    it: programs run their ops in order)."""
    return operand


def exp2(x):
    """lax.exp2: 2 ** x."""
    return _jnp().exp2(x)


def is_finite(x):
    """lax.is_finite."""
    return _jnp().isfinite(x)


def erfc(x):
    """lax.erfc (shmap.scipy.special.erfc)."""
    from .scipy import special
    return special.erfc(x)


def lgamma(x):
    """lax.lgamma (shmap.scipy.special.gammaln)."""
    from .scipy import special
    return special.gammaln(x)


def digamma(x):
    """lax.digamma (shmap.scipy.special.digamma)."""
    from .scipy import special
    return special.digamma(x)


__all__ += ["dynamic_update_slice_in_dim", "dynamic_index_in_dim",
            "dynamic_update_index_in_dim", "sort_key_val", "optimization_barrier", "exp2",
            "is_finite", "erfc", "lgamma", "digamma"]


def slice_in_dim(operand, start_index, limit_index, stride=1, axis=0):
    """lax.slice_in_dim: lax.slice along one axis (None: its start or end;
    negative indices count from the end), the other axes whole."""
    shape = tuple(operand.shape)
    axis = axis % len(shape)
    n = shape[axis]
    start = 0 if start_index is None else int(start_index)
    limit = n if limit_index is None else int(limit_index)
    start, limit = start + n if start < 0 else start, limit + n if limit < 0 else limit
    starts = [0] * len(shape)
    limits = list(shape)
    strides = [1] * len(shape)
    starts[axis], limits[axis], strides[axis] = start, limit, int(stride)
    return slice(operand, tuple(starts), tuple(limits),  # noqa: F821 (the op table's)
                 None if stride == 1 else tuple(strides))


def index_in_dim(operand, index, axis=0, keepdims=True):
    """lax.index_in_dim: the slice at a static index along axis (kept as a
    dimension of 1 with keepdims; negative from the end)."""
    axis = axis % len(operand.shape)
    index = int(index)
    if index < 0:
        index += operand.shape[axis]
    r = slice_in_dim(operand, index, index + 1, 1, axis)
    return r if keepdims else _jnp().squeeze(r, axis)


def batch_matmul(lhs, rhs, precision=None):
    """lax.batch_matmul: matrix products over equal leading (batch) axes."""
    if len(lhs.shape) != len(rhs.shape) or len(lhs.shape) < 2:
        raise TypeError(f"batch_matmul requires arguments of equal rank >= 2, got shapes "
                        f"{tuple(lhs.shape)} and {tuple(rhs.shape)}")
    return _jnp().einsum("...ij,...jk->...ik", lhs, rhs)


def cumlogsumexp(operand, axis=0, reverse=False):
    """lax.cumlogsumexp: log of the running sum of exp along axis, each
    step jnp.logaddexp (so no prefix underflows against a later maximum),
    combined as associative_scan combines."""
    return associative_scan(_jnp().logaddexp, operand, reverse=reverse, axis=axis)


__all__ += ["slice_in_dim", "index_in_dim", "batch_matmul", "cumlogsumexp"]
