"""jax.lax-style collectives for shard_map bodies (psum, pmean, all_gather,
psum_scatter, ppermute, all_to_all, axis_index, axis_size, ...), plus the
numpy ops under their lax names, made from the C op table at import."""
import numpy as _np

import _shmap

from ._grad import stop_gradient  # noqa: F401 (jax.lax.stop_gradient)
from ._trace import make_op

__all__ = []
for _name, _sig, _mn, _mx, _jit_only in _shmap.op_table():
    if _name not in ("shard_map_in", "shard_map_out"):
        globals()[_name] = make_op(_name)
        __all__.append(_name)


def fori_loop(lower, upper, body_fun, init_val):
    """jax.lax.fori_loop with static bounds: body_fun(i, val) for i in
    range(lower, upper), unrolled as the text form unrolls every loop (i is
    a Python int)."""
    import numbers

    from ._core import InvalidArgument
    if not (isinstance(lower, numbers.Integral) and isinstance(upper, numbers.Integral)):
        raise InvalidArgument("fori_loop needs static integer bounds here: programs unroll "
                              "their loops")
    val = init_val
    for i in range(int(lower), int(upper)):
        val = body_fun(i, val)
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
    branch it picks; a traced one runs both branches and selects each
    result leaf with where (the same results: branches have no effects;
    both are computed)."""
    if _is_static(pred):
        return (true_fun if pred else false_fun)(*operands)
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
        return branches[min(max(int(index), 0), len(branches) - 1)](*operands)
    from . import numpy as jnp
    index = jnp.clip(index, 0, len(branches) - 1)
    outs = [b(*operands) for b in branches]
    leaves = [_leaves(o)[0] for o in outs]
    _, build = _leaves(outs[0])
    res = leaves[-1]
    for k in range(len(branches) - 2, -1, -1):
        res = [select(index == k, a, b) for a, b in zip(leaves[k], res)]
    return build(res)


def scan(f, init, xs=None, length=None, reverse=False, unroll=1):
    """jax.lax.scan, unrolled as the text form unrolls every loop: carry, y =
    f(carry, x) for each x = xs[i] (every leaf of xs indexed along its first
    axis; xs=None: length steps of x=None); returns the last carry and the
    ys stacked along a new first axis."""
    from . import numpy as jnp
    xl, xbuild = _leaves(xs) if xs is not None else ([], None)
    n = length if xs is None else (xl[0].shape[0] if xl else length)
    if n is None:
        raise ValueError("scan: give xs or length")
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
