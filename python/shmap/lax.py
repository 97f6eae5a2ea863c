"""jax.lax-style collectives for shard_map bodies (psum, pmean, all_gather,
psum_scatter, ppermute, all_to_all, axis_index, axis_size, ...), plus the
numpy ops under their lax names, made from the C op table at import."""
import builtins  # (slice, abs, any: the op table's names here)
import enum
import functools

import numpy as _np

import _shmap

from ._grad import custom_jvp as _custom_jvp
from ._grad import stop_gradient  # noqa: F401 (jax.lax.stop_gradient)
from ._core import _short_type
from ._trace import _fmt, make_op

__all__ = []
for _name, _sig, _mn, _mx, _jit_only in _shmap.op_table():
    if _name not in ("shard_map_in", "shard_map_out"):
        globals()[_name] = make_op(_name)
        __all__.append(_name)
_reshape_op = reshape  # noqa: F821 (the op table's)


def reshape(operand, new_sizes, dimensions=None, *, out_sharding=None):  # noqa: F811
    """jax.lax.reshape: with dimensions=, operand transposed in that order
    first, as lax's."""
    if dimensions is not None and tuple(dimensions) != tuple(range(len(operand.shape))):
        operand = transpose(operand, tuple(dimensions))  # noqa: F821
    kw = {} if out_sharding is None else {"out_sharding": out_sharding}
    return _reshape_op(operand, tuple(new_sizes), **kw)


class GatherScatterMode(enum.StrEnum):
    """lax.GatherScatterMode: the modes of gathers and scatters (.at[],
    take), as the strings they also take."""
    CLIP = "clip"
    FILL_OR_DROP = "fill"
    PROMISE_IN_BOUNDS = "promise_in_bounds"
    ONE_HOT = "one_hot"

    @staticmethod
    def from_any(s):
        if isinstance(s, GatherScatterMode):
            return s
        if s == "drop":
            return GatherScatterMode.FILL_OR_DROP
        if s is None:
            return GatherScatterMode.FILL_OR_DROP
        return GatherScatterMode(s)


def real(x):
    """lax.real: shmap's values are real, so x."""
    return x


def conj(x):
    """lax.conj: shmap's values are real, so x."""
    return x


def imag(x):
    """lax.imag: shmap's values are real, so zeros of x's shape and dtype."""
    from . import numpy as jnp
    return jnp.zeros_like(x)


def igamma(a, x):
    """lax.igamma: scipy.special.gammainc (the regularized lower one)."""
    from .scipy.special import gammainc
    return gammainc(a, x)


def igammac(a, x):
    """lax.igammac: scipy.special.gammaincc."""
    from .scipy.special import gammaincc
    return gammaincc(a, x)


def betainc(a, b, x):
    """lax.betainc: scipy.special.betainc."""
    from .scipy.special import betainc as _betainc
    return _betainc(a, b, x)


def polygamma(m, x):
    """lax.polygamma: scipy.special.polygamma."""
    from .scipy.special import polygamma as _polygamma
    return _polygamma(m, x)


def zeta(x, q):
    """lax.zeta (Hurwitz's): scipy.special.zeta."""
    from .scipy.special import zeta as _zeta
    return _zeta(x, q)


__all__ += ["GatherScatterMode", "real", "conj", "imag", "igamma", "igammac", "betainc",
            "polygamma", "zeta"]


# jax.lax.max and min are elementwise (the op table's max and min reduce, as jnp's)
max = make_op("maximum")  # noqa: A001
min = make_op("minimum")  # noqa: A001


def dot(lhs, rhs, precision=None, preferred_element_type=None, out_sharding=None):
    """jax.lax.dot: jnp.dot's product, with precision= and
    preferred_element_type= (the result's dtype) as JAX takes them."""
    from . import numpy as jnp
    kw = {} if out_sharding is None else {"out_sharding": out_sharding}
    return jnp.dot(lhs, rhs, preferred_element_type=preferred_element_type, **kw)


def concatenate(operands, dimension):
    """jax.lax.concatenate: jnp.concatenate along dimension."""
    from . import numpy as jnp
    return jnp.concatenate(operands, axis=dimension)


def pad(operand, padding_value, padding_config):
    """jax.lax.pad: one (low, high, interior) per dimension: interior
    copies of padding_value between neighbouring elements, then low and
    high at the ends (negative ones crop). padding_value may be traced."""
    from . import numpy as jnp
    shape = tuple(operand.shape)
    cfg = [tuple(int(v) for v in c) for c in padding_config]
    if len(cfg) != len(shape) or builtins.any(len(c) != 3 for c in cfg):
        raise TypeError(f"length of padding_config must equal the number of axes of operand, "
                        f"got padding_config {padding_config} for operand shape {shape}")
    if builtins.any(i < 0 for _, _, i in cfg):
        raise ValueError(f"interior padding in padding_config must be nonnegative, got "
                         f"padding_config {padding_config}")
    x, ends = operand, []
    for d, (lo, hi, interior) in enumerate(cfg):
        n = x.shape[d]
        if interior and n > 1:  # each element then interior pads; the last one's are cut
            x = jnp.expand_dims(x, d + 1)
            x = jnp.pad(x, [(0, interior) if k == d + 1 else (0, 0) for k in range(x.ndim)],
                        constant_values=padding_value)
            x = jnp.reshape(x, x.shape[:d] + (n * (interior + 1),) + x.shape[d + 2:])
            n, hi = n * (interior + 1), hi - interior
        cut_lo, cut_hi = -lo if lo < 0 else 0, -hi if hi < 0 else 0
        if cut_lo or cut_hi:
            if n - cut_lo - cut_hi < 0:
                raise ValueError(f"Dimension size after padding is not at least 0, got result "
                                 f"shape {shape} with padding_config {padding_config}")
            x = x[(builtins.slice(None),) * d + (builtins.slice(cut_lo, n - cut_hi),)]
        ends.append((lo + cut_lo, hi + cut_hi))
    if builtins.any(lo or hi for lo, hi in ends):
        x = jnp.pad(x, ends, constant_values=padding_value)
    return x


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
    """The leaves of a pytree (tuples, lists, dicts; anything else a leaf;
    None an empty subtree, as JAX's) and a function that rebuilds one of
    that structure from new leaves."""
    from ._trace import _leaves_but_none, _tree_build
    return [v for v, _ in _leaves_but_none(tree, "")], \
        lambda vals: _tree_build(tree, iter(vals), none_empty=True)


def _is_static(v):
    import numbers
    return isinstance(v, (bool, numbers.Number, _np.bool_, _np.number))


def select(pred, on_true, on_false):
    """jax.lax.select: on_true where pred, else on_false (jnp.where)."""
    from . import numpy as jnp
    if _shape_of(on_true) == _shape_of(on_false):
        _select_sharding_rule(pred, (on_false, on_true))
    return jnp.where(pred, on_true, on_false)


def cond(pred, true_fun, false_fun, *operands):
    """jax.lax.cond. A static predicate (a Python or numpy scalar) calls the
    branch it picks; a traced one runs only the branch it picks, in the
    program (each branch in a while loop that runs once or never). Under
    grad or vmap, or for branches whose results are not arrays of one type,
    both run and each result leaf is selected with where (the same values:
    branches have no effects)."""
    names = ("true_fun", "false_fun")
    pred = _cond_pred(pred)
    if _is_static(pred):
        _check_untaken([true_fun, false_fun], 0 if pred else 1, operands, "cond", names)
        return (true_fun if pred else false_fun)(*operands)
    once = _run_picked([pred, _not(pred)], [true_fun, false_fun], operands, "cond", names)
    if once is not None:
        return once
    t, f = true_fun(*operands), false_fun(*operands)
    _check_branch_outputs("cond", names, [true_fun, false_fun], [t, f])
    tl, build = _leaves(t)
    fl, _ = _leaves(f)
    if len(tl) != len(fl):
        raise TypeError("cond branches must return the same structure of values")
    return build([select(pred, a, b) for a, b in zip(tl, fl)])


def _cond_pred(pred):
    """cond's predicate as JAX checks it: a scalar, boolean, or a number
    (an integer one compared with 0), with JAX's TypeErrors."""
    from collections.abc import Sequence
    if pred is None:
        raise TypeError("cond predicate is None")
    if isinstance(pred, Sequence) or _np.ndim(pred) != 0:
        raise TypeError(f"Pred must be a scalar, got {pred} of " +
                        (f"type {type(pred)}" if isinstance(pred, Sequence)
                         else f"shape {_np.shape(pred)}."))
    dt = _np.dtype(getattr(pred, "dtype", None) or _np.asarray(pred).dtype)
    if dt.kind == "b":
        return pred
    if dt.kind in "iu":
        return pred != 0
    raise TypeError(f"Pred type must be either boolean or number, got {dt.name}.")


def switch(index, branches, *operands):
    """jax.lax.switch: branches[index](*operands), the index clamped into
    range as JAX's; a traced index selects among every branch's results."""
    branches = list(branches)
    names = ["branch 0"] + [f"branch{k}" for k in range(1, len(branches))]  # JAX's names
    if _is_static(index):
        k = builtins.min(builtins.max(int(index), 0), len(branches) - 1)
        _check_untaken(branches, k, operands, "switch", names)
        return branches[k](*operands)
    from . import numpy as jnp
    index = jnp.clip(index, 0, len(branches) - 1)
    once = _run_picked([index == k for k in range(len(branches))], branches, operands,
                       "switch", names) if len(branches) > 1 else None
    if once is not None:
        return once
    outs = [b(*operands) for b in branches]
    _check_branch_outputs("switch", names, branches, outs)
    leaves = [_leaves(o)[0] for o in outs]
    _, build = _leaves(outs[0])
    res = leaves[-1]
    for k in range(len(branches) - 2, -1, -1):
        res = [select(index == k, a, b) for a, b in zip(leaves[k], res)]
    return build(res)


def _branch_types(out):
    """(shape, dtype, varying axes) of each leaf of a branch's results, or
    None where one is not a traced value of one example (nothing to
    compare then)."""
    from . import _vmap
    from ._trace import Tracer
    leaves = _leaves(out)[0]
    if builtins.any(isinstance(v, _vmap.BatchTracer) for v in leaves):
        return None
    types = []
    for v in leaves:
        if isinstance(v, Tracer):
            types.append((tuple(v.shape), v.dtype, tuple(_varying(v.type))))
        elif isinstance(v, (bool, numbers.Number, _np.ndarray, _np.generic)):
            # a constant: as the program holds it (JAX's default dtypes; a number weak)
            dt = _np.asarray(v).dtype
            dt = {"f": _np.float32, "i": _np.int32}.get(dt.kind, dt) if dt.itemsize == 8 \
                else dt
            types.append((tuple(_np.shape(v)), _np.dtype(dt), ()))
        else:
            return None
    return types


def _check_branch_outputs(api, names, funs, outs):
    """JAX's _check_branch_outputs: every branch's results have branch 0's
    pytree structure and, leaf by leaf, its shape, dtype and varying manual
    axes (in a shard_map body), else JAX's TypeError."""
    from ._trace import _tree_sig
    import inspect

    def info(f):
        try:
            f = inspect.unwrap(f)
            return f"{f.__name__} at {f.__code__.co_filename}:{f.__code__.co_firstlineno}"
        except AttributeError:
            return "<unknown>"

    def short(t):
        shape, dt, vma = t
        return _short_type(dt, shape) + \
            (f"{{V:{','.join(vma)}}}" if vma else "")
    from .tree_util import keystr, tree_flatten_with_path
    paths = [keystr(p) for p, _ in tree_flatten_with_path(outs[0])[0]]
    t0 = _branch_types(outs[0])
    for k in range(1, len(outs)):
        n1, n2 = names[0], names[k]
        head = f"{n1} is {info(funs[0])}\n{n2} is {info(funs[k])}\n\n"
        if _tree_sig(outs[k]) != _tree_sig(outs[0]):
            raise TypeError(f"{api} branch outputs must have the same pytree structure, but "
                            f"they differ:\n\n{head}Revise {n1} and/or {n2} so that they have "
                            f"the same pytree structure.")
        tk = _branch_types(outs[k])
        if t0 is None or tk is None or tk == t0:
            continue
        diffs, fixes = [], []
        for a1, a2, path in zip(t0, tk, paths):
            if a1 == a2:
                continue
            at = f" at path {path}" if path else ""
            why = [w for w, bad in (("the dtypes do not match", a1[1] != a2[1]),
                                    ("the shapes do not match", a1[0] != a2[0]),
                                    ("the manual axis types do not match", a1[2] != a2[2])) if bad]
            extra = "" if not why else ", so " + (why[0] if len(why) == 1 else
                                                  ", ".join(why[:-1]) + ", and " + why[-1])
            diffs.append(f"the output of {n1}{at} has type {short(a1)} but the corresponding "
                         f"output of {n2} has type {short(a2)}{extra}")
            for n, x, y in ((n1, a1, a2), (n2, a2, a1)):
                more = tuple(v for v in y[2] if v not in x[2])
                if more:
                    fixes.append(f"applying `jax.lax.pcast(..., {more}, to='varying')` to the "
                                 f"output of {n}{at}")
        diff = diffs[0][0].upper() + diffs[0][1:] + ".\n" if len(diffs) == 1 else \
            "\n".join(f"  * {d};" for d in diffs[:-1]) + f"\n  * {diffs[-1]}.\n"
        fix = "" if not fixes else (f"This might be fixed by {fixes[0]}.\n" if len(fixes) == 1
                                    else "This might be fixed by:\n" +
                                    "\n".join(f"  * {d};" for d in fixes[:-1]) +
                                    f"\n  * {fixes[-1]}.\n")
        if fix:
            fix += ("See https://docs.jax.dev/en/latest/notebooks/shard_map.html#scan-vma for "
                    "more information.\n\n")
        raise TypeError(f"{api} branches must have equal output types but they differ.\n\n"
                        f"{head}{diff}\n{fix}Revise {n1} and/or {n2} so that all output types "
                        f"match.")


def _check_untaken(branches, k, operands, api, names):
    """A static index picks branch k; JAX traces every branch and checks
    their results' types all the same: the others are traced here to learn
    theirs, then taken back (only inside a trace, where types exist)."""
    from ._trace import _state
    b = getattr(_state, "builder", None)
    if b is None or len(branches) < 2:
        return
    mark = _Mark(b)
    try:
        outs = [br(*operands) for br in branches]
    except Exception:  # a branch that fails to trace is JAX's error too, but only if taken
        mark.undo()
        return
    mark.undo()
    _check_branch_outputs(api, names, branches, outs)


def _not(p):
    from ._trace import Tracer
    return ~p if isinstance(p, Tracer) else not p


def _run_picked(flags, branches, operands, api, names):
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
        _check_branch_outputs(api, names, branches, outs)
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
    unroll is accepted and ignored. Called outside a trace it runs at once
    as one jit program of the scan (as JAX compiles it), its results
    Arrays."""
    from . import numpy as jnp
    from ._trace import _eager, _state
    if getattr(_state, "builder", None) is None:
        return _eager(scan, (f, init, xs), {"length": length, "reverse": reverse})
    xl, xbuild = _leaves(xs) if xs is not None else ([], None)
    n = _scan_length(xl, length)
    specs = [_spec_and_mesh(v) for v in xl]
    if builtins.any(sm is not None and sm[0] and sm[0][0] is not None for sm in specs):
        from ._core import P
        raise ValueError("0th dimension of all xs should be replicated. Got " + ", ".join(
            str(P(*sm[0]) if sm is not None else P()) for sm in specs))
    if n == 0:
        return _scan_empty(f, init, xl, xbuild)
    looped = _scan_loop(f, init, xl, xbuild, n, reverse) if n > 1 else None
    if looped is not None:
        return looped
    from ._trace import _is_constant, _numpy_constant
    xl = [_numpy_constant(v) if isinstance(v, _np.ndarray) and _is_constant(v) else v
          for v in xl]  # numpy xs: one constant, sliced by ops (not one constant per step)
    carry, ys = init, []
    steps = range(n - 1, -1, -1) if reverse else range(n)
    for i in steps:
        x = xbuild([leaf[i] for leaf in xl]) if xs is not None else None
        prev, (carry, y) = carry, f(carry, x)
        if i == steps[0]:
            _check_scan_carry(f, prev, carry)
        ys.append(y)
    if reverse:
        ys.reverse()
    if not ys or ys[0] is None:
        return carry, None
    yl = [_leaves(y)[0] for y in ys]
    _, ybuild = _leaves(ys[0])
    return carry, ybuild([jnp.stack([row[k] for row in yl]) for k in range(len(yl[0]))])


def _check_scan_carry(f, init, carry):
    """JAX's _check_carry_type for a scan step traced unrolled: the carry's
    traced leaves keep their types (shape, dtype, sharding, varying axes),
    else JAX's TypeError."""
    import inspect
    from ._trace import Tracer, _tree_sig
    from ._trace import _leaves_but_none as _tree_leaves
    from ._vmap import BatchTracer
    from .tree_util import keystr, tree_flatten_with_path
    if _tree_sig(init) != _tree_sig(carry):
        return  # (the loop's sentence; unrolled, a changed structure is the step's own)
    old, new = [v for v, _ in _tree_leaves(init, "")], [v for v, _ in _tree_leaves(carry, "")]
    bad = [(k, c, x) for k, (c, x) in enumerate(zip(old, new))
           if isinstance(c, Tracer) and isinstance(x, Tracer) and
           not isinstance(c, BatchTracer) and not isinstance(x, BatchTracer) and c.type != x.type]
    if bad:
        try:
            arg = list(inspect.signature(f).parameters)[0]
        except (ValueError, TypeError, IndexError):
            arg = "init"
        paths = [arg + keystr(k) for k, _ in tree_flatten_with_path(init)[0]]
        raise TypeError(_carry_type_error(bad, paths).replace("while_loop body", "scan body"))


def _scan_length(xl, length):
    """The number of a scan's steps: the xs' leading size, which length
    must agree with (JAX's ValueErrors)."""
    lengths = [int(v.shape[0]) if _np.ndim(v) else None for v in xl]
    if None in lengths:
        raise ValueError("scan got value with no leading axis to scan over: " + ", ".join(
            str(_np.shape(v)) for v in xl if not _np.ndim(v)))
    if length is not None:
        length = int(length)
        if builtins.any(n != length for n in lengths):
            raise ValueError(f"scan got `length` argument of {length} which disagrees with "
                             f"leading axis sizes {lengths}.")
        return length
    if len(set(lengths)) > 1:
        raise ValueError(f"scan got values with different leading axis sizes: "
                         f"{', '.join(builtins.map(str, lengths))}.")
    if not lengths:
        raise ValueError("scan got no values to scan over and `length` not provided.")
    return lengths[0]


def _scan_empty(f, init, xl, xbuild):
    """A scan of no steps: the carry as given, and ys of f's step (traced
    once on zeros, then taken back) with a leading dimension of 0, as
    JAX's."""
    from . import numpy as jnp
    from ._trace import _builder
    mark = _Mark(_builder())
    x0 = xbuild([jnp.zeros(tuple(v.shape[1:]), v.dtype) for v in xl]) if xbuild else None
    _, y = f(init, x0)
    yl, ybuild = _leaves(y) if y is not None else ([], None)
    shapes = [(tuple(_np.shape(v)), getattr(v, "dtype", None) or jnp.result_type(v))
              for v in yl]
    mark.undo()
    if y is None:
        return init, None
    return init, ybuild([jnp.zeros((0,) + sh, dtype=dt) for sh, dt in shapes])


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
        yt = [(tuple(y.shape), y.dtype, jnp._spec_of_type(y.type), _varying(y.type))
              for y in ys_l]
        mark.undo()
        none = init is None  # no carry: the loop carries an empty tuple
        if not none:  # a Python scalar in init takes the dtype the step gives it (JAX's)
            carry_dt = [getattr(c, "dtype", None) for c in _leaves(c1)[0]]
            init_l, ibuild = _leaves(init)
            init = ibuild([_as_traced(v, d) if _is_static(v) and not isinstance(v, _np.generic)
                           and d is not None else v for v, d in zip(init_l, carry_dt)])
        bufs = [jnp.zeros((n,) + sh, dtype=dt, out_sharding=None if sp is None else
                          P(None, *sp)) for sh, dt, sp, _ in yt]
        # in a shard_map body: varying over what the step's ys vary over
        bufs = [pvary(z, tuple(v)) if v else z  # noqa: F821 (op table)
                for z, (_, _, _, v) in zip(bufs, yt)]

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
    """jax.lax.sort: an array sorted along dimension (NaN last, -0.0 and
    0.0 equal), or a sequence of arrays of one shape sorted together by
    their first num_keys (lexicographically, the first primary; stable),
    returned as a tuple."""
    if isinstance(operand, (list, tuple)):
        ops = list(operand)
        if len(ops) == 0:
            raise TypeError("Sort requires at least one operand")
        if not 1 <= num_keys <= len(ops):
            raise ValueError(f"num_keys={num_keys} must be between 1 and "
                             f"len(operand)={len(ops)}")
        shapes = [_shape_of(o) for o in ops]
        if builtins.any(s != shapes[0] for s in shapes[1:]):
            raise TypeError(f"Arguments to sort must have equal shapes, got: "
                            f"{' '.join(str(s) for s in shapes)}")
        return _sort_many(ops, dimension, num_keys)
    if num_keys != 1:
        raise ValueError(f"num_keys={num_keys} must equal 1 for a single operand.")
    from . import numpy as jnp
    return jnp.sort(operand, axis=dimension)


def _sort_many(ops, dimension, num_keys):
    from .numpy import _at_once
    return _at_once(_sort_together)(ops, dimension, num_keys)


def _sort_together(ops, dimension, num_keys):
    from . import numpy as jnp
    order = jnp.lexsort(tuple(reversed(ops[:num_keys])), axis=dimension)
    return tuple(jnp.take_along_axis(o, order, axis=dimension) for o in ops)


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
    return jnp.einsum("".join(ls) + "," + "".join(rs) + "->" + "".join(out), lhs, rhs,
                      preferred_element_type=preferred_element_type, **kw)


__all__.append("dot_general")


# ---- lax's names for the arithmetic, reductions, shapes and loops -----------



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
    def op(operand, axes, **kw):
        if name in ("sum", "prod") and _lax_dtype(operand) == _np.uint8:
            kw["dtype"] = _np.uint8  # lax's keeps the operand's dtype (jnp's widens uint8)
        return getattr(_jnp(), name)(operand, axis=tuple(int(a) for a in axes), **kw)
    if name == "prod":
        op.__doc__ = "lax.reduce_prod(operand, axes): jnp.prod over axes, in its dtype."
        op.__name__ = "reduce_prod"
        return op

    def reduce_op(operand, axes, *, out_sharding=None):
        if out_sharding is None:
            return op(operand, axes)
        return _jnp()._at_once(_reduce_out)(name, op, operand, tuple(int(a) for a in axes),
                                            out_sharding)
    reduce_op.__name__ = "reduce_" + name
    reduce_op.__doc__ = (f"lax.reduce_{name}(operand, axes, out_sharding=None): jnp.{name} over "
                         f"axes, in its dtype; out_sharding= the result's sharding (JAX's "
                         f"unreduced rule: see _reduce_out).")
    return reduce_op


def _reduce_out(name, op, operand, axes, out_sharding):
    """JAX's reduce_{sum,max,min} with out_sharding: its unreduced rule
    (the unreduced axes among those the reduced dimensions are sharded
    over), the partial results a shard_map body keeps, a psum over the
    other sharded reduced axes."""
    jnp = _jnp()
    spec = getattr(out_sharding, "spec", out_sharding)
    if getattr(spec, "reduced", None):
        raise ValueError(f"out_sharding passed to reduce_{name} cannot be reduced. Got "
                         f"out_sharding={out_sharding}")
    if not spec.unreduced:
        return jnp.reshard(op(operand, axes), spec)
    ents = jnp._spec_of_type(operand.type) if hasattr(operand, "type") else None
    ents = list(ents or ()) + [None] * (len(operand.shape) - len(ents or ()))
    op_u = sorted(jnp._unreduced_of(operand))
    used = [a for i, e in enumerate(ents) if i in axes and e is not None
            for a in ((e,) if isinstance(e, str) else e)] + op_u
    kind = spec.unreduced_kind.name
    if kind != name:
        from ._core import ShardingTypeError
        raise ShardingTypeError(f"reduce_{name} requires `out_sharding`'s unreduced_kind to be "
                                f"UnreducedKind.{name} but got {spec}")
    if name != "sum" and op_u:
        raise NotImplementedError(f"reduce_{name} of an unreduced operand to an unreduced "
                                  f"out_sharding is not implemented")
    from ._core import P
    red = set(jnp._reduced_of(operand))  # kept through the sum (JAX's reduce rule)
    return _partial_results(f"reduce_{name}", lambda b: op(b, axes), (operand,),
                            (P(*ents, unreduced=set(op_u), reduced=red),), used,
                            [e for i, e in enumerate(ents) if i not in axes], out_sharding,
                            op_u, red, axes)


def _partial_results(name, local, args, in_specs, used, kept, out_sharding, op_u=(),
                     red=frozenset(), axes=None):
    """A reduction over mesh axes used (those its operands' reduced
    dimensions are sharded over, and op_u, those they hold partial sums
    over) to an unreduced out_sharding, as JAX's: a shard_map whose body
    runs local on the blocks (each device's own result), completes it over
    the axes out_sharding leaves out (psum, pmax or pmin by its kind) and
    leaves it partial over the others; kept: the result's spec entries,
    resharded to out_sharding's where they differ; axes: the reduced
    dimensions, for the message."""
    from ._core import P, ProgramError
    from ._trace import _state, shard_map
    from .numpy import get_mesh
    spec = getattr(out_sharding, "spec", out_sharding)
    if not builtins.all(u in used for u in spec.unreduced):
        raise ProgramError(f"out_sharding's unreduced axes should be in operand's specs that "
                           f"were {name} over. Got operand={args[0].type}, "
                           f"{'' if axes is None else f'axes={axes}, '}"
                           f"unreduced_spec={set(spec.unreduced)}")
    kind = spec.unreduced_kind.name
    mesh = getattr(out_sharding, "mesh", None) or \
        getattr(getattr(_state, "builder", None), "mesh", None) or get_mesh()
    unred = tuple(a for a in used if a in spec.unreduced)
    rest = tuple(a for a in used if a not in spec.unreduced)
    new = tuple(a for a in unred if a not in op_u)

    def body(*blocks):
        r = local(*blocks)
        if kind != "sum":  # each device's max (min) is its partial result
            return (pmax if kind == "max" else pmin)(r, rest) if rest else r  # noqa: F821
        r = psum(r, rest) if rest else r  # noqa: F821 (the collectives, below)
        return pcast(r, new, to="unreduced") if new else r  # noqa: F821

    # partial maxima (minima) have no cast of their own: the blocks varying
    # over the unreduced axes are taken as they are (check_vma=False)
    out = shard_map(body, mesh=mesh, in_specs=in_specs,
                    out_specs=P(*kept, unreduced=set(unred), reduced=red, unreduced_kind=kind),
                    check_vma=kind == "sum")(*args)
    want = list(spec) + [None] * (len(kept) - len(spec))
    return out if want == kept else reshard(out, P(*want, unreduced=spec.unreduced,
                                                   unreduced_kind=kind))


reduce_sum, reduce_max = _reducer("sum"), _reducer("max")
reduce_min, reduce_prod = _reducer("min"), _reducer("prod")


def convert_element_type(operand, new_dtype):
    """lax.convert_element_type: astype (a Python scalar: a rank-0 array; a
    numpy array: converted, as jnp.asarray takes it)."""
    jnp = _jnp()
    if isinstance(operand, _np.ndarray) and operand.ndim:
        return jnp.asarray(operand.astype(new_dtype))
    if not hasattr(operand, "dtype") or isinstance(operand, (_np.ndarray, _np.generic)):
        return jnp.full((), _np.asarray(operand).astype(new_dtype).item(), dtype=new_dtype)
    return jnp.astype(operand, new_dtype)


def broadcast(operand, sizes, *, out_sharding=None):
    """lax.broadcast: operand with new leading dimensions sizes;
    out_sharding= the result's sharding (jnp.broadcast_to's check)."""
    sizes = tuple(int(s) for s in sizes)
    return _jnp().broadcast_to(operand, sizes + tuple(_shape_of(operand)),
                               out_sharding=out_sharding)


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


def _erf_inv_values(x):
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


def _erf_inv_jvp(primals, tangents):
    """JAX's derivative of erf_inv: sqrt(pi)/2 exp(erf_inv(x)**2) (the
    polynomials' own would be NaN: 0 * inf at |x| = 1, sqrt at 0)."""
    ans = erf_inv(primals[0])
    return ans, (_np.sqrt(_np.pi) / 2) * (tangents[0] * _jnp().exp(ans * ans))


erf_inv = _custom_jvp(_erf_inv_values)
erf_inv.defjvp(_erf_inv_jvp)


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
    from ._trace import Tracer, _builder, _tree_sig
    from ._trace import _leaves_but_none as _tree_leaves
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
    from ._trace import _leaves_but_none
    return _leaves_but_none(tree, "")


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


_dynamic_slice_op = dynamic_slice  # noqa: F821 (the op table's: starts clamped)
_dynamic_slice_in_dim_op = dynamic_slice_in_dim  # noqa: F821
_dynamic_update_slice_op = dynamic_update_slice  # noqa: F821


def _wrap_start(s, n):
    """A dynamic start as lax takes it (allow_negative_indices): a negative
    one counts from the end once (n added), then the op clamps it."""
    if isinstance(s, (numbers.Integral, _np.integer)) and not isinstance(s, bool):
        return int(s) + n if s < 0 else int(s)
    if hasattr(s, "type") or isinstance(s, _np.ndarray):
        from . import numpy as jnp
        return jnp.where(s < 0, s + n, s)
    return s


def dynamic_slice(operand, start_indices, slice_sizes, *, allow_negative_indices=True):
    """lax.dynamic_slice: the slice of slice_sizes from start_indices (a
    negative start counts from the end once, as lax's; then clamped into
    the operand)."""
    if allow_negative_indices:
        start_indices = [_wrap_start(s, n) for s, n in zip(start_indices, operand.shape)]
    return _dynamic_slice_op(operand, start_indices, slice_sizes)


def dynamic_slice_in_dim(operand, start_index, slice_size=1, axis=0, *,
                         allow_negative_indices=True):
    """lax.dynamic_slice_in_dim: dynamic_slice along axis."""
    if allow_negative_indices:
        start_index = _wrap_start(start_index, operand.shape[axis])
    return _dynamic_slice_in_dim_op(operand, start_index, slice_size, axis)


def dynamic_update_slice(operand, update, start_indices, *, allow_negative_indices=True):
    """lax.dynamic_update_slice: update written into operand from
    start_indices (negative ones from the end once, then clamped)."""
    if allow_negative_indices:
        start_indices = [_wrap_start(s, n) for s, n in zip(start_indices, operand.shape)]
    return _dynamic_update_slice_op(operand, update, start_indices)


@_now
def dynamic_update_slice_in_dim(operand, update, start_index, axis, *,
                                allow_negative_indices=True):
    """lax.dynamic_update_slice_in_dim: update written into operand from
    start_index along axis (0 along the others)."""
    axis = axis % len(operand.shape)
    starts = [0] * len(operand.shape)
    starts[axis] = start_index
    return dynamic_update_slice(operand, update, starts,
                                allow_negative_indices=allow_negative_indices)


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


# ---- select_n, reduce, reduce_precision, lax's other names ------------------


import numbers  # noqa: E402
import operator  # noqa: E402

# jnp's name for a lax function, for the tip JAX's check_same_dtypes adds
_JNP_EQUIVALENT = {"eq": "equal", "ne": "not_equal", "select": "where", "atan2": "arctan2",
                   "nextafter": "nextafter", "add": "add", "sub": "subtract", "mul": "multiply",
                   "div": "divide", "max": "maximum", "min": "minimum",
                   "shift_left": "left_shift", "shift_right_logical": "right_shift",
                   "shift_right_arithmetic": "right_shift"}


def _lax_dtype(v):
    """The dtype lax gives an argument: an array's own; a Python scalar's
    under JAX's defaults (bool, int32, float32)."""
    if hasattr(v, "dtype"):
        return _np.dtype(v.dtype)
    return _np.dtype(_np.bool_ if isinstance(v, (bool, _np.bool_)) else
                     _np.int32 if isinstance(v, numbers.Integral) else _np.float32)


def _shape_of(v):
    return tuple(v.shape) if hasattr(v, "shape") else tuple(_np.shape(v))


def _aval_str(x):
    """An array's type as JAX prints an aval (float32[8,6])."""
    from ._trace import _dims
    t = getattr(x, "type", None)
    dims = _dims(t) if isinstance(t, str) and "[" in t else [str(d) for d in _shape_of(x)]
    return f"{_lax_dtype(x).name}[{','.join(dims)}]"


def _same_dtypes(name, *args):
    """JAX's check_same_dtypes: lax's n-ary ops do not promote. A Python
    scalar passes with arrays of its kind (as a weakly typed value of
    their dtype does with x64 on)."""
    strong = {_lax_dtype(a) for a in args if hasattr(a, "dtype")}
    kinds = {"b": "b", "i": "iu", "u": "iu", "f": "f"}
    ok = len(strong) <= 1 and builtins.all(
        hasattr(a, "dtype") or not strong or
        _lax_dtype(a).kind in kinds.get(next(iter(strong)).kind, "") for a in args)
    if not ok:
        msg = (f"lax.{name} requires arguments to have the same dtypes, got "
               f"{', '.join(_lax_dtype(a).name for a in args)}.")
        if name in _JNP_EQUIVALENT:
            msg += (f" (Tip: jnp.{_JNP_EQUIVALENT[name]} is a similar function that does "
                    f"automatic type promotion on inputs).")
        raise TypeError(msg)


def _accept(name, x, kinds, what, position=None):
    """JAX's unop / naryop dtype rule: x's dtype must be of kinds ('f',
    'iu', ...), named `what` in the sentence."""
    dt = _lax_dtype(x)
    if dt.kind in kinds:
        return
    if position is None:
        raise TypeError(f"{name} does not accept dtype {dt.name}. Accepted dtypes are subtypes "
                        f"of {what}.")
    raise TypeError(f"{name} does not accept dtype {dt.name} at position {position}. Accepted "
                    f"dtypes at position {position} are subtypes of {what}.")


def _select_sharding_rule(which, cases):
    """JAX's _select_sharding_rule: the cases (of a sharding: traced values,
    Arrays) of one sharding, a non-scalar `which` of their partitions
    (ShardingTypeError)."""
    from ._core import ShardingTypeError, typeof
    shs = [typeof(c).sharding for c in cases if hasattr(c, "type")]
    if builtins.any(s != shs[0] for s in shs[1:]):
        raise ShardingTypeError("select cases must have the same shardings, got [{}].".format(
            ", ".join(str(s) for s in shs)))
    if shs and _shape_of(which) and hasattr(which, "type"):
        ws = typeof(which).sharding
        if tuple(ws.spec) != tuple(shs[0].spec):
            raise ShardingTypeError(f"select `which` must be scalar or have the same sharding "
                                    f"as cases, got `which` sharding {ws} but case sharding "
                                    f"{shs[0]}.")


@_now
def select_n(which, *cases):
    """jax.lax.select_n: cases[which] elementwise. A bool which picks
    cases[0] where false and cases[1] where true; an integer one goes
    down the tree of selects XLA's lowering makes (which < mid), so an
    index below 0 takes cases[0] and one past the end the last case.
    which is a scalar or of the cases' shape; the cases of one shape and
    dtype (JAX's checks and sentences)."""
    if len(cases) == 0:
        raise ValueError("select_n() must have at least one case")
    shapes = [_shape_of(c) for c in cases]
    if builtins.any(s != shapes[0] for s in shapes[1:]):
        raise TypeError("select cases must have the same shapes, got [{}].".format(
            ", ".join(str(s) for s in shapes)))
    wshape = _shape_of(which)
    if wshape and wshape != shapes[0]:
        raise TypeError(f"select `which` must be scalar or have the same shape as cases, got "
                        f"`which` shape {wshape} but case shape {shapes[0]}.")
    _same_dtypes("select", *cases)
    wdt = _lax_dtype(which)
    if wdt.kind not in "biu":
        raise TypeError(f"select `which` must be boolean or integer type, got {wdt.name}.")
    if wdt.kind == "b" and len(cases) > 2:
        raise TypeError("select with boolean `which` cannot have > 2 cases.")
    _select_sharding_rule(which, cases)
    if len(cases) == 1:
        return cases[0]
    jnp = _jnp()
    if wdt.kind == "b":
        return jnp.where(which, cases[1], cases[0])

    def pick(offset, cs):
        if len(cs) == 1:
            return cs[0]
        mid = len(cs) // 2
        return jnp.where(which < offset + mid, pick(offset, cs[:mid]),
                         pick(offset + mid, cs[mid:]))
    return pick(0, list(cases))


def _check_axes(axes, x):
    """JAX's _reduce_op_shape_rule: axes unique and in range."""
    if len(axes) != len(set(axes)):
        raise ValueError(f"duplicate value in 'axes' of reduction: {axes}")
    if not builtins.all(0 <= a < len(x.shape) for a in axes):
        raise ValueError(f"reduction axes {axes} contains out-of-bounds indices for "
                         f"{_aval_str(x)}.")


def _pairwise(leaves, axes, combine):
    """leaves reduced over axes with combine(list, list) -> list, adjacent
    elements paired (so an associative combine need not commute), one
    axis at a time from the last: a tree of log2(n) steps, as a reduction
    of XLA's may be ordered."""
    jnp = _jnp()
    cur = list(leaves)
    for ax in sorted(axes, reverse=True):
        cur = [jnp._unshard(c, ax) for c in cur]

        def sl(e, start, stop, step=1, ax=ax):
            return e[(builtins.slice(None),) * ax + (builtins.slice(start, stop, step),)]
        while cur[0].shape[ax] > 1:
            n = cur[0].shape[ax]
            h = n // 2
            r = combine([sl(c, 0, 2 * h, 2) for c in cur], [sl(c, 1, 2 * h, 2) for c in cur])
            if n % 2:
                r = [jnp.concatenate((a, sl(c, n - 1, n)), axis=ax) for a, c in zip(r, cur)]
            cur = r
        cur = [jnp.squeeze(c, ax) for c in cur]
    return cur


def _bitwise_reduce(name, operand, axes):
    """reduce_and / reduce_or / reduce_xor: bool or integer operands, the
    result of their dtype (bitwise for integers, as JAX's)."""
    jnp = _jnp()
    axes = tuple(int(a) for a in axes)
    dt = _lax_dtype(operand)
    if dt.kind not in "biu":
        raise TypeError(f"logical reduction requires operand dtype bool or int, got {dt.name}.")
    _check_axes(axes, operand)
    if dt.kind == "b" and name != "xor":
        return (jnp.all if name == "and" else jnp.any)(operand, axis=axes)
    if builtins.any(operand.shape[a] == 0 for a in axes):
        keep = [d for k, d in enumerate(operand.shape) if k not in axes]
        return jnp.full(tuple(keep), -1 if name == "and" else 0, dtype=dt)
    op = getattr(jnp, "bitwise_" + name)
    return _pairwise([operand], axes, lambda a, b: [op(a[0], b[0])])[0]


@_now
def reduce_and(operand, axes):
    """lax.reduce_and: all over axes for bools, the bitwise and of
    integers (of their dtype), as JAX's."""
    return _bitwise_reduce("and", operand, axes)


@_now
def reduce_or(operand, axes):
    """lax.reduce_or: any over axes for bools, the bitwise or of
    integers (of their dtype), as JAX's."""
    return _bitwise_reduce("or", operand, axes)


@_now
def reduce_xor(operand, axes):
    """lax.reduce_xor: the parity over axes for bools, the bitwise xor of
    integers (of their dtype)."""
    return _bitwise_reduce("xor", operand, axes)


def _monoid(computation, init, dtype):
    """The reduction (jnp's name, or and / or / xor) that computation with
    init amounts to, as JAX's _get_monoid_reducer finds it (lax.add with
    0, lax.mul with 1, lax.max with -inf or the integer minimum, lax.min,
    the bitwise and / or / xor of integers and bools with their
    identities), also for jnp's same functions and jnp.logical_and / or
    / xor of bools; None where init is not a concrete scalar or not the
    identity (a fold of init then follows)."""
    from ._conv import _identity, _is
    from ._trace import Tracer
    if isinstance(init, Tracer) or _np.shape(init) != ():
        return None
    v = _np.asarray(init)
    dt = _np.dtype(dtype)
    intlike = dt.kind in "biu"
    if _is(computation, "add"):
        return "sum" if _identity(computation, v, _np.zeros((), dt)) else None
    if _is(computation, "mul", "multiply"):
        return "prod" if _identity(computation, v, _np.zeros((), dt)) else None
    if _is(computation, "max", "maximum"):
        return "max" if _identity(computation, v, _np.zeros((), dt)) else None
    if _is(computation, "min", "minimum"):
        return "min" if _identity(computation, v, _np.zeros((), dt)) else None
    for name, ident in (("or", 0), ("and", -1), ("xor", 0)):
        if (_is(computation, "bitwise_" + name) and intlike) or \
                (_is(computation, "logical_" + name) and dt.kind == "b"):
            return name if _np.equal(v, _np.array(ident).astype(dt)) else None
    return None


@_now
def reduce(operands, init_values, computation, dimensions, out_sharding=None):
    """jax.lax.reduce: operands (a pytree of arrays) reduced over
    dimensions with computation, started from init_values (scalars, the
    same pytree). The monoids JAX recognizes (lax.add with 0, lax.mul with
    1, lax.max / lax.min with their identities, lax.bitwise_and / or /
    xor), and jnp's same functions and logical_and / or / xor of bools,
    are the reductions of those names. Any other computation (a Python
    function of two pytrees of arrays, elementwise, associative, as XLA
    asks) is applied to adjacent pairs of elements, log2(n) times per
    dimension, then to init_values and the result."""
    from ._trace import Tracer, _tree_sig
    from .tree_util import tree_structure
    jnp = _jnp()
    if _tree_sig(operands) != _tree_sig(init_values):
        raise ValueError(f"Operands must have the same tree structure as init_values: "
                         f"{tree_structure(operands)} vs. {tree_structure(init_values)}")
    ops, _ = _leaves(operands)
    inits, ibuild = _leaves(init_values)
    dims = tuple(operator.index(d) for d in dimensions)
    kind = _monoid(computation, inits[0], _lax_dtype(ops[0])) if len(ops) == 1 else None
    if kind is not None:
        x = ops[0]
        if kind in ("sum", "prod"):
            _accept(f"reduce_{kind}", x, "iuf", "number")
        if kind in ("and", "or", "xor"):
            return _bitwise_reduce(kind, x, dims)
        _check_axes(dims, x)
        if out_sharding is not None and kind != "sum":
            raise NotImplementedError
        r = getattr(jnp, kind)(x, axis=dims)
        r = r if r.dtype == x.dtype else jnp.astype(r, x.dtype)
        return r if out_sharding is None else jnp.reshard(r, getattr(out_sharding, "spec",
                                                                     out_sharding))
    if builtins.any(_np.shape(v) != () for v in inits):
        raise ValueError(f"reduce found non-scalar initial value: "
                         f"{[_shape_of(v) for v in inits]}")
    if not builtins.all(_lax_dtype(v) == _lax_dtype(x) or (  # a Python number of x's kind
            not hasattr(v, "dtype") and _lax_dtype(v).kind == _lax_dtype(x).kind)
            for v, x in zip(inits, ops)):
        raise TypeError(
            f"reduce operand dtypes should match corresponding initial value dtypes, got "
            f"operands=[{', '.join(f'ShapedArray({_aval_str(x)})' for x in ops)}] and "
            f"initial_values=[{', '.join(f'ShapedArray({_aval_str(v)})' for v in inits)}]")
    for x in ops:
        _check_axes(dims, x)
    out_shape = tuple(d for k, d in enumerate(ops[0].shape) if k not in dims)
    out_tree = []

    def combine(a, b):
        r = computation(ibuild(a), ibuild(b))
        rl, rbuild = _leaves(r)
        if len(rl) != len(a) or builtins.any(
                not hasattr(v, "dtype") or _lax_dtype(v) != _lax_dtype(w) for v, w in zip(rl, a)):
            raise TypeError(f"reduce: computation must return values of the operands' "
                            f"structure and dtypes "
                            f"({', '.join(_lax_dtype(w).name for w in a)}), got {r!r}")
        out_tree[:] = [rbuild]
        return rl

    def full(v, x):
        if isinstance(v, Tracer):
            v = v if v.dtype == x.dtype else jnp.astype(v, x.dtype)
            return jnp.broadcast_to(v, out_shape)
        return jnp.full(out_shape, _np.asarray(v).item(), dtype=_lax_dtype(x))
    if builtins.any(ops[0].shape[d] == 0 for d in dims):
        return ibuild([full(v, x) for v, x in zip(inits, ops)])
    res = combine([full(v, x) for v, x in zip(inits, ops)], _pairwise(ops, dims, combine))
    return (out_tree[0] if out_tree else ibuild)(res)


# exponent and mantissa bits of each float dtype
_FLOAT_BITS = {"float16": (5, 10), "bfloat16": (8, 7), "float32": (8, 23), "float64": (11, 52)}


def _dtype_name(x):
    """x's dtype's name; bfloat16 from a traced value's type (its numpy
    dtype stands in as float32 where numpy has no bfloat16)."""
    t = getattr(x, "type", None)
    if isinstance(t, str) and t.startswith("bf16"):
        return "bfloat16"
    dt = getattr(x, "dtype", None)
    return getattr(dt, "name", str(dt))


def _as_dtype_of(r, like):
    """r (computed in float32 or float64) in like's dtype."""
    name = _dtype_name(like)
    return r if _dtype_name(r) == name else _jnp().astype(r, name)


class _Binade:
    """|w| (w float32 or float64, the values of a float of `bits`
    exponent and mantissa bits) split exactly into y * 2**e, y in [1, 2)
    (and, where |w| is below the format's smallest normal, y = |w| /
    2**emin in [0, 1)) by comparisons and power-of-two scalings, since no
    bitcast is at hand; scale(v) multiplies v by 2**e back; odd_exponent:
    where e is odd (the biased exponent, of an odd bias, even)."""

    def __init__(self, w, bits):
        jnp = _jnp()
        se, _ = bits
        emax = 2 ** (se - 1) - 1
        self.emin = 1 - emax
        a = jnp.abs(w)
        self.tiny = a < 2.0 ** self.emin
        steps = [2 ** j for j in range(emax.bit_length() - 1, -1, -1)]
        y = jnp.where(self.tiny, 1.0, a)
        self.ups, self.downs = [], []
        for k in steps:  # down to y < 2
            m = y >= 2.0 ** k
            y = jnp.where(m, y * 2.0 ** -k, y)
            self.ups.append((k, m))
        for k in steps:  # up to y >= 1 (at most to the smallest normal)
            m = y < 2.0 ** (1 - k)
            y = jnp.where(m, y * 2.0 ** k, y)
            self.downs.append((k, m))
        self.y = jnp.where(self.tiny, a * 2.0 ** -self.emin, y)
        # e is odd where one of the two scalings by 2 applied (the other steps are even)
        self.odd_exponent = self.ups[-1][1] ^ self.downs[-1][1]

    def exponent(self):
        """e as int32 (emin where |w| is below the smallest normal)."""
        jnp = _jnp()
        e = jnp.zeros(self.tiny.shape, _np.int32)
        for k, m in self.ups:
            e = e + jnp.astype(m, _np.int32) * k
        for k, m in self.downs:
            e = e - jnp.astype(m, _np.int32) * k
        return jnp.where(self.tiny, self.emin, e)

    def scale(self, v):
        jnp = _jnp()
        r = v
        for k, m in reversed(self.downs):
            r = jnp.where(m, r * 2.0 ** -k, r)
        for k, m in reversed(self.ups):
            r = jnp.where(m, r * 2.0 ** k, r)
        return jnp.where(self.tiny, v * 2.0 ** self.emin, r)


def _work(x):
    """x in the dtype its bit tricks are done in (half floats in float32)."""
    return x if _dtype_name(x) in ("float32", "float64") else _jnp().astype(x, _np.float32)


def _reduce_precision_impl(operand, exponent_bits, mantissa_bits):
    jnp = _jnp()
    se, sm = _FLOAT_BITS[_dtype_name(operand)]
    w = _work(operand)
    r = jnp.abs(w)
    if mantissa_bits < sm:  # round to mantissa_bits, ties to even, the exponent unbounded
        b = _Binade(w, (se, sm))
        q = jnp.round(b.y * 2.0 ** mantissa_bits)
        if mantissa_bits == 0:  # the last bit kept is the exponent's: a tie rounds to an
            q = jnp.where((b.y == 1.5) & b.odd_exponent, 1.0, q)  # even biased exponent
        r = b.scale(q * 2.0 ** -mantissa_bits)
    if exponent_bits < se:  # out of the exponent range: inf above, zero below (no subnormals)
        rb = 2 ** (exponent_bits - 1) - 1
        r = jnp.where(r >= 2.0 ** (rb + 1), jnp.inf, r)
        r = jnp.where(r < 2.0 ** (1 - rb), 0.0, r)
    r = jnp.copysign(r, w)
    r = jnp.where(jnp.isinf(w), w, r)
    r = jnp.where(jnp.isnan(w), w if mantissa_bits > 0 else jnp.inf, r)
    return _as_dtype_of(r, operand)


def _make_reduce_precision():
    from ._grad import custom_vjp
    f = custom_vjp(_reduce_precision_impl, nondiff_argnums=(1, 2))
    f.defvjp(lambda x, e, m: (_reduce_precision_impl(x, e, m), None),
             lambda e, m, _, g: (reduce_precision(g, e, m),))
    return f


_reduce_precision_vjp = _make_reduce_precision()


def reduce_precision(operand, exponent_bits, mantissa_bits):
    """jax.lax.reduce_precision: operand rounded to a float of
    exponent_bits and mantissa_bits and back, as XLA's ReducePrecision:
    the mantissa rounded to nearest, ties to even; then, with fewer
    exponent bits than the dtype's, a magnitude past the format's largest
    finite value becomes inf and one below its smallest normal value a
    zero of its sign (XLA flushes that format's subnormals); NaN stays
    NaN (inf with no mantissa bits). Made of comparisons and exact
    power-of-two scalings; reverse-mode differentiation gives
    reduce_precision of the cotangent, as JAX's rule."""
    e = operator.index(exponent_bits)
    m = operator.index(mantissa_bits)
    if e < 1:
        raise ValueError(f"reduce_precision: exponent_bits must be positive; got {e}")
    if m < 0:
        raise ValueError(f"reduce_precision: mantissa_bits must be non-negative; got {m}")
    if isinstance(operand, (_np.ndarray, _np.generic)):
        operand = _jnp().asarray(operand)
    elif not hasattr(operand, "dtype"):  # a Python number: a float32 scalar
        operand = _jnp().asarray(_np.float32(operand))
    if _dtype_name(operand) not in _FLOAT_BITS:
        _accept("reduce_precision", operand, "f", "floating")
    se, sm = _FLOAT_BITS[_dtype_name(operand)]
    if e >= se and m >= sm:
        return operand
    return _reduce_precision_vjp(operand, e, m)


__all__ += ["select_n", "reduce", "reduce_xor", "reduce_precision"]


# ---- collectives made of others: pshuffle, pswapaxes, pbroadcast ------------


def _tree_map(f, tree):
    leaves, build = _leaves(tree)
    return build([f(v) for v in leaves])


def pshuffle(x, axis_name, perm):
    """jax.lax.pshuffle: ppermute with the permutation given by sources
    (device i of axis_name receives from perm[i]); x a pytree."""
    if set(perm) != set(range(len(perm))):
        raise ValueError(f"`perm` does not represent a permutation: {perm}")
    pairs = list(zip(perm, range(len(perm))))
    return _tree_map(lambda v: ppermute(v, axis_name, pairs), x)  # noqa: F821 (op table)


def pswapaxes(x, axis_name, axis, *, axis_index_groups=None):
    """jax.lax.pswapaxes: all_to_all(x, axis_name, axis, axis), the device
    axis swapped with x's dimension axis (of the axis' size); x a pytree."""
    if axis_index_groups is not None:
        from ._core import Unimplemented
        raise Unimplemented("pswapaxes: axis_index_groups is not implemented by shmap "
                            "(all_to_all takes none)")
    return _tree_map(lambda v: all_to_all(v, axis_name, axis, axis), x)  # noqa: F821


def all_gather_invariant(x, axis_name, *, axis=0, tiled=False):
    """jax.lax.all_gather_invariant: all_gather whose result is invariant
    over axis_name (all_gather's is varying), the text form's all_gather(...,
    to='invarying'); grad transposes it to a dynamic_slice, as JAX's; x a
    pytree."""
    return _tree_map(lambda v: all_gather(v, axis_name, axis=axis, tiled=tiled,  # noqa: F821
                                          to="invarying"), x)


__all__ += ["all_gather_invariant"]


def pbroadcast(x, axis_name, source):
    """jax.lax.pbroadcast: every device of axis_name gets the value of the
    one at index source (JAX's definition: the psum of x masked to the
    source), the type kept (varying over the axes where x varies, as
    JAX's abstract eval: a leaf that varies over none of them is
    returned as it is, one varying over some of them comes out varying
    over all); an all_gather of the varying leaves, so bit for bit, -0.0
    and bool included; x a pytree."""
    names = tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)
    if not isinstance(source, numbers.Integral):
        raise TypeError(f"pbroadcast: source must be a static int, got {source!r}")
    n = axis_size(names if len(names) > 1 else names[0])  # noqa: F821 (op table)
    if not 0 <= int(source) < n:
        raise ValueError(f"pbroadcast: source {source} is out of range for axis {axis_name} "
                         f"of size {n}")

    def one(v):
        varying = _varying(v.type) if hasattr(v, "type") else []
        if not builtins.any(a in varying for a in names):
            return v  # the same on every device of the axes
        missing = tuple(a for a in names if a not in varying)
        if missing:
            v = pvary(v, missing if len(missing) > 1 else missing[0])  # noqa: F821
        return all_gather(v, axis_name, axis=0)[int(source)]  # noqa: F821
    return _tree_map(one, x)


__all__ += ["pshuffle", "pswapaxes", "pbroadcast"]


# ---- approximate top-k: exact on CPU, as JAX's fallback ---------------------


def _approx_output_size(n, rank, k, recall_target, aggregate, override):
    """XLA's ApproxTopKReductionOutputSize: how many elements the
    approximate pass keeps (k when aggregating to top-k)."""
    from ._core import InvalidArgument
    if aggregate:
        return k
    tiling = 1024 if rank == 1 else 128
    if n <= tiling:
        return n
    if override >= 0 and n > override:
        raise InvalidArgument(f"reduction_input_size_override: {override} should be greater "
                              f"equals to operands[reduction_dim]: {n}")
    logical = override if override >= 0 else n
    if k == 1:
        return tiling
    recall = _np.float32(recall_target)
    if recall == 1.0:
        return n
    if recall <= 0 or recall > 1:
        raise InvalidArgument("recall_target should range in (0,1]")
    m = builtins.min(builtins.max(int((1.0 - k) / _np.log(_np.float64(recall))), tiling), n)
    red = (logical // m).bit_length() - 1 if logical // m else 0
    if red == 0:
        return n
    q = n // tiling
    red = builtins.min(red, (q - 1).bit_length() if q else 0)  # log2 ceiling
    chunks = -(-n // tiling)
    return -(-chunks // (1 << red)) * tiling


def _approx_top_k(operand, k, reduction_dimension, recall_target, is_max_k,
                  reduction_input_size_override, aggregate_to_topk):
    from ._trace import _entries
    jnp = _jnp()
    shape = _shape_of(operand)
    if k <= 0:
        raise ValueError(f"k must be positive, got {k}")
    if len(shape) == 0:
        raise TypeError(f"approx_top_k operand must have >= 1 dimension, got {shape}")
    if shape[reduction_dimension] < k:
        raise ValueError(f"k must be smaller than the size of reduction_dim "
                         f"{shape[reduction_dimension]}, got {k}")
    if _lax_dtype(operand).kind != "f":
        raise ValueError("operand must be a floating type")
    size = _approx_output_size(shape[reduction_dimension], len(shape), k, recall_target,
                               aggregate_to_topk, reduction_input_size_override)
    ents = _entries(operand)
    if ents is not None and ents[reduction_dimension] is not None:
        from ._core import InvalidArgument
        raise InvalidArgument(f"reduction dimension {reduction_dimension} in operand "
                              f"{_aval_str(operand)} should be unsharded i.e. the spec of "
                              f"that dim should be `None`.")
    axis = reduction_dimension % len(shape)
    x = operand if axis == len(shape) - 1 else jnp.moveaxis(operand, axis, -1)
    idx = jnp.argsort(x, axis=-1, descending=is_max_k)[..., :size]
    vals = jnp.take_along_axis(x, idx, axis=-1)
    if axis != len(shape) - 1:
        vals, idx = jnp.moveaxis(vals, -1, axis), jnp.moveaxis(idx, -1, axis)
    return vals, idx


@_now
def approx_max_k(operand, k, reduction_dimension=-1, recall_target=0.95,
                 reduction_input_size_override=-1, aggregate_to_topk=True):
    """jax.lax.approx_max_k as JAX runs it off TPU: the exact k largest
    along reduction_dimension, largest first (ties: the lower position
    first), and their int32 positions; with aggregate_to_topk=False the
    XLA-computed number of them, sorted likewise."""
    return _approx_top_k(operand, k, reduction_dimension, recall_target, True,
                         reduction_input_size_override, aggregate_to_topk)


@_now
def approx_min_k(operand, k, reduction_dimension=-1, recall_target=0.95,
                 reduction_input_size_override=-1, aggregate_to_topk=True):
    """jax.lax.approx_min_k as JAX runs it off TPU: the exact k smallest,
    smallest first, and their int32 positions."""
    return _approx_top_k(operand, k, reduction_dimension, recall_target, False,
                         reduction_input_size_override, aggregate_to_topk)


__all__ += ["approx_max_k", "approx_min_k"]


# ---- lax's names for comparisons, inverse trigonometry, rounding ------------


def _compare(name, jname):
    def op(x, y):
        _same_dtypes(name, x, y)
        return getattr(_jnp(), jname)(x, y)
    op.__name__ = name
    op.__doc__ = (f"lax.{name}: jnp.{jname} of two arguments of one dtype (lax does not "
                  f"promote).")
    return op


eq, ne = _compare("eq", "equal"), _compare("ne", "not_equal")
lt, le = _compare("lt", "less"), _compare("le", "less_equal")
gt, ge = _compare("gt", "greater"), _compare("ge", "greater_equal")


def _float_unop(name, jname):
    def op(x):
        _accept(name, x, "f", "floating, complexfloating")
        return getattr(_jnp(), jname)(x)
    op.__name__ = name
    op.__doc__ = f"lax.{name}: jnp.{jname} of a float."
    return op


acos, asin, atan = _float_unop("acos", "arccos"), _float_unop("asin", "arcsin"), \
    _float_unop("atan", "arctan")
acosh, asinh, atanh = _float_unop("acosh", "arccosh"), _float_unop("asinh", "arcsinh"), \
    _float_unop("atanh", "arctanh")


def _pair(name, x, y, kinds, what):
    """The operands of binary lax op name, checked as JAX's (dtypes of
    kinds, one dtype), a Python number made an array like the other: (x, y,
    an operand that was an array)."""
    for i, v in enumerate((x, y)):
        _accept(name, v, kinds, what, position=i)
    _same_dtypes(name, x, y)
    like = x if hasattr(x, "dtype") else y
    x, y = (v if hasattr(v, "dtype") else _jnp().full_like(like, v) for v in (x, y))
    return x, y, like


def atan2(x, y):
    """lax.atan2(x, y): the arc tangent of x / y in its quadrant (jnp.arctan2)."""
    x, y, _ = _pair("atan2", x, y, "f", "floating, complexfloating")
    return _jnp().arctan2(x, y)


def reciprocal(x):
    """lax.reciprocal: integer_pow(x, -1) (so refused for integers)."""
    dt = _lax_dtype(x)
    if dt.kind in "iu":
        raise TypeError(f"Integers cannot be raised to negative powers, got "
                        f"integer_pow({_aval_str(x)}, -1)")
    _accept("integer_pow", x, "iuf", "integer, floating, complexfloating")
    return integer_pow(x, -1)


class RoundingMethod(enum.IntEnum):
    """jax.lax.RoundingMethod: how lax.round breaks ties."""
    AWAY_FROM_ZERO = 0
    TO_NEAREST_EVEN = 1


_round_even = round  # noqa: F821 (the op table's: ties to even, jnp.round's)


@_now
def round(x, rounding_method=RoundingMethod.AWAY_FROM_ZERO):  # noqa: A001
    """lax.round: to the nearest integer, ties away from zero (JAX's
    default, XLA's round_nearest_afz) or, with TO_NEAREST_EVEN, to even.
    Floats only."""
    rounding_method = RoundingMethod(rounding_method)
    _accept("round", x, "f", "floating")
    if rounding_method is RoundingMethod.TO_NEAREST_EVEN:
        return _round_even(x)
    jnp = _jnp()
    t = jnp.trunc(x)
    return jnp.where(jnp.abs(x - t) >= 0.5, t + jnp.sign(x), t)


class Precision(enum.Enum):
    """jax.lax.Precision: accepted by the products' precision= and changes
    nothing (shmap's products run in their dtype)."""
    DEFAULT = 0
    HIGH = 1
    HIGHEST = 2

    def __str__(self):
        return self.name


__all__ += ["eq", "ne", "lt", "le", "gt", "ge", "acos", "asin", "atan", "acosh", "asinh",
            "atanh", "atan2", "reciprocal", "RoundingMethod", "Precision"]


# ---- mulhi, nextafter -------------------------------------------------------


@_now
def mulhi(x, y):
    """lax.mulhi: the high half of the double-width product of integers of
    one dtype (int32 through int64, uint8 through int32; int64 by 32-bit
    halves, Hacker's Delight's mulhs, in wrapping int64 arithmetic)."""
    jnp = _jnp()
    x, y, like = _pair("mulhi", x, y, "iu", "integer")
    dt = _lax_dtype(like)
    if dt == _np.uint8:
        p = jnp.astype(x, _np.int32) * jnp.astype(y, _np.int32)
        return jnp.astype(jnp.right_shift(p, 8), dt)
    if dt == _np.int32:
        p = jnp.astype(x, _np.int64) * jnp.astype(y, _np.int64)
        return jnp.astype(jnp.right_shift(p, 32), dt)
    lo = 0xFFFFFFFF
    x0, x1 = x & lo, jnp.right_shift(x, 32)
    y0, y1 = y & lo, jnp.right_shift(y, 32)
    t = x1 * y0 + shift_right_logical(x0 * y0, 32)
    w1 = x0 * y1 + (t & lo)
    return x1 * y1 + jnp.right_shift(t, 32) + jnp.right_shift(w1, 32)


@_now
def nextafter(x1, x2):
    """lax.nextafter: the float next to x1 in the direction of x2 (x2 where
    they are equal, NaN where either is; from zero the smallest subnormal
    of x2's sign), the step found by splitting |x1| into its binade as
    reduce_precision does."""
    jnp = _jnp()
    x1, x2, like = _pair("nextafter", x1, x2, "f", "floating")
    se, sm = _FLOAT_BITS[_dtype_name(like)]
    a, b = _work(x1), _work(x2)
    bn = _Binade(a, (se, sm))
    ulp = bn.scale(jnp.ones_like(a) * 2.0 ** -sm)  # the spacing of |a|'s binade
    up = (b > a) == (a > 0)  # away from zero
    # toward zero from a power of two (not the smallest normal): half the spacing
    half = ~up & (bn.y == 1.0) & ~bn.tiny & (jnp.abs(a) > 2.0 ** bn.emin)
    step = jnp.where(half, ulp * 0.5, ulp)
    r = jnp.where(up, jnp.sign(a) * (jnp.abs(a) + step), jnp.sign(a) * (jnp.abs(a) - step))
    tiny = 2.0 ** (bn.emin - sm)
    r = jnp.where(a == 0, jnp.sign(b) * tiny, r)  # (b == 0 is a == b below)
    big = (2.0 - 2.0 ** -sm) * 2.0 ** (1 - bn.emin)  # the largest finite value
    r = jnp.where(jnp.isinf(a), jnp.sign(a) * big, r)
    r = jnp.where(a == b, b, r)
    r = jnp.where(jnp.isnan(a) | jnp.isnan(b), a + b, r)
    return _as_dtype_of(r, like)


__all__ += ["mulhi", "nextafter"]


# ---- shapes: broadcasting, splitting, stacking, shape tuples ---------------


def broadcast_shapes(*shapes):
    """lax.broadcast_shapes: the shape numpy's broadcasting of shapes gives."""
    shapes = [tuple(int(d) for d in s) for s in shapes]
    try:
        return tuple(int(d) for d in _np.broadcast_shapes(*shapes))
    except ValueError:
        raise ValueError(f"Incompatible shapes for broadcasting: shapes={shapes}") from None


def broadcast_to_rank(x, rank):
    """lax.broadcast_to_rank: leading dimensions of 1 up to rank."""
    n = len(_shape_of(x))
    return x if n == rank else broadcast(x, (1,) * (rank - n))


def broadcast_like(arr, like_arr):
    """lax.broadcast_like: arr broadcast to like_arr's shape and sharding
    (JAX's broadcast_to with like_arr's sharding: arr's sharded dimensions
    must be like_arr's, else ValueError)."""
    from ._core import typeof
    jnp = _jnp()
    sh = getattr(like_arr, "sharding", None)  # an Array's, a ShapeDtypeStruct's (a traced
    if sh is None and hasattr(like_arr, "type"):  # value has none: its type's)
        sh = typeof(like_arr).sharding
    spec = getattr(sh, "spec", None)
    if spec is None or (builtins.all(e is None for e in spec) and not spec.unreduced):
        return jnp.broadcast_to(arr, tuple(_shape_of(like_arr)))
    return jnp.broadcast_to(arr, tuple(like_arr.shape), out_sharding=spec)


def broadcasted_iota(dtype, shape, dimension, *, out_sharding=None):
    """lax.broadcasted_iota: the index along dimension, of shape."""
    jnp = _jnp()
    shape = tuple(int(d) for d in shape)
    dimension = int(dimension)
    if _np.dtype(dtype).kind not in "iuf":
        raise TypeError(f"iota does not accept dtype {_np.dtype(dtype).name}. Accepted dtypes "
                        f"are subtypes of integer, floating, complexfloating.")
    if not 0 <= dimension < len(shape):
        raise ValueError(f"iota dimension must be between 0 and len(shape), got "
                         f"dimension={dimension} for shape={shape}")
    r = jnp.arange(shape[dimension], dtype=dtype)
    r = jnp.reshape(r, tuple(n if k == dimension else 1 for k, n in enumerate(shape)))
    r = jnp.broadcast_to(r, shape)
    if out_sharding is not None:
        r = jnp.reshard(r, getattr(out_sharding, "spec", out_sharding))
    return r


def collapse(operand, start_dimension, stop_dimension=None):
    """lax.collapse: dimensions [start, stop) merged into one."""
    import math
    shape = _shape_of(operand)
    lo, hi, _ = builtins.slice(start_dimension, stop_dimension).indices(len(shape))
    if hi < lo:
        raise ValueError(f"Invalid dimension range passed to collapse: {shape}"
                         f"[{start_dimension}:{stop_dimension}]")
    return _jnp().reshape(operand, shape[:lo] + (math.prod(shape[lo:hi]),) + shape[hi:])


def _spec_and_mesh(x):
    """The PartitionSpec of x's type (one entry per dimension) and its mesh's
    axis sizes; None for a value of no sharding (numpy, a Python number)."""
    from ._core import typeof
    if not hasattr(x, "type"):
        return None
    sh = typeof(x).sharding
    return (tuple(sh.spec), sh.mesh.shape) if hasattr(sh, "mesh") and sh.mesh is not None \
        else None


def _varying_out_shape_rule(operand, out_shape, name):
    """JAX's _get_sharding_for_varying_out_shape: a dimension that changes
    size keeps its sharding only when the new size divides by the mesh
    axes it is sharded over (ShardingTypeError)."""
    from ._core import ShardingTypeError
    sm = _spec_and_mesh(operand)
    if sm is None:
        return
    spec, sizes = sm
    for op_sh, out_sh, e in zip(_shape_of(operand), out_shape, spec):
        axes = () if e is None else (e,) if isinstance(e, str) else e
        n = _np.prod([sizes[a] for a in axes], dtype=int)
        if op_sh != out_sh and axes and out_sh % n:
            spec_str = e if isinstance(e, str) else tuple(e)
            raise ShardingTypeError(
                f"{name} on sharded dims where out dim ({out_sh}) is not divisible by mesh axes "
                f"({n}) with spec ({spec_str}) is not implemented. Got input "
                f"type={getattr(operand, 'type', _aval_str(operand))} and output "
                f"shape={list(out_shape)}")


def _unstack_sharding_rule(x, axis):
    """JAX's _unstack_sharding_rule: x not sharded along axis
    (ShardingTypeError)."""
    from ._core import ShardingTypeError
    sm = _spec_and_mesh(x)
    if sm is not None and sm[0][axis] is not None:
        raise ShardingTypeError(f"unstack operand cannot be sharded on the unstacking axis "
                                f"{axis}. Got operand type={getattr(x, 'type', _aval_str(x))}")


def split(operand, sizes, axis=0):
    """lax.split: the pieces of sizes along axis (sizes summing to its length)."""
    shape = _shape_of(operand)
    axis = axis % len(shape)
    sizes = [int(s) for s in sizes]
    if builtins.any(s < 0 for s in sizes):
        raise ValueError(f"Sizes passed to split must be nonnegative, got {sizes}")
    if shape[axis] != builtins.sum(sizes):
        raise ValueError(f"Sum of sizes {builtins.sum(sizes)} must be equal to dimension "
                         f"{axis} of the operand shape {list(shape)}")
    for s in sizes:
        _varying_out_shape_rule(operand, shape[:axis] + (s,) + shape[axis + 1:], "split")
    out, at = [], 0
    for s in sizes:
        out.append(slice_in_dim(operand, at, at + s, 1, axis))
        at += s
    return out


def stack(operands, axis=0):
    """lax.stack: operands of one shape joined along a new axis."""
    ops = list(operands)
    if not ops:
        raise ValueError("stack expects at least one operand, got 0.")
    shapes = [_shape_of(o) for o in ops]
    if len({len(s) for s in shapes}) != 1:
        raise ValueError("Cannot stack arrays with different numbers of dimensions: got "
                         f"{', '.join(str(s) for s in shapes)}.")
    if len(set(shapes)) != 1:
        raise ValueError(f"All input arrays must have the same shape. Got "
                         f"{', '.join(str(s) for s in shapes)}.")
    return _jnp().stack(ops, axis=axis)


def unstack(x, axis=0):
    """lax.unstack: the slices of x along axis, as a tuple."""
    shape = _shape_of(x)
    if not shape:
        raise ValueError(f"unstack requires arrays with rank > 0, however a scalar array of "
                         f"shape {shape} was passed.")
    axis = axis % len(shape)
    _unstack_sharding_rule(x, axis)
    return tuple(index_in_dim(x, k, axis, keepdims=False) for k in range(shape[axis]))


@_now
def index_take(src, idxs, axes):
    """lax.index_take: src at the index vectors idxs (one 1-D array per
    axis of axes, taken modulo the axis' size), the other dimensions
    after the index one."""
    import math
    jnp = _jnp()
    axes = [int(a) % len(src.shape) for a in axes]
    rest = [d for d in range(len(src.shape)) if d not in axes]
    t = jnp.transpose(src, tuple(axes + rest))
    sizes = [src.shape[a] for a in axes]
    t = jnp.reshape(t, (math.prod(sizes),) + tuple(src.shape[d] for d in rest))
    flat = None
    for i, n in zip(idxs, sizes):
        i = jnp.astype(i, _np.int32) % n
        flat = i if flat is None else flat * n + i
    return jnp.take(t, flat, axis=0)


def empty(shape, dtype, *, out_sharding=None):
    """lax.empty: an array whose values are not to be read (zeros here)."""
    kw = {} if out_sharding is None else {"out_sharding": getattr(out_sharding, "spec",
                                                                  out_sharding)}
    shape = (int(shape),) if isinstance(shape, numbers.Integral) else tuple(shape)
    return _jnp().zeros(shape, dtype=dtype, **kw)


def dtype(x):
    """lax.dtype: the dtype of a value, a dtype or a type (Python scalars
    and their types: bool, int32, float32, JAX's defaults)."""
    if x is None:
        raise ValueError(f"Invalid argument to dtype: {x}.")
    py = {bool: _np.bool_, int: _np.int32, float: _np.float32}
    if isinstance(x, type) and x in py:
        return _np.dtype(py[x])
    if type(x) in py:
        return _np.dtype(py[type(x)])
    dt = _np.dtype(x.dtype if hasattr(x, "dtype") and not isinstance(x, type) else x)
    if dt.kind not in "biuf":
        raise TypeError(f"Value '{x}' with dtype {dt} is not a valid JAX array type. Only "
                        f"arrays of numeric types are supported by JAX.")
    return dt


def shape_as_value(shape):
    """lax.shape_as_value: a shape as an int32 array (int64 where a
    dimension needs it)."""
    dims = [int(d) for d in shape]
    big = builtins.any(d > _np.iinfo(_np.int32).max for d in dims)
    return _np.asarray(dims, dtype=_np.int64 if big else _np.int32)


def _conv_stride_dim(d, window, stride):
    return builtins.max((d - window) // stride + 1, 0)


def conv_shape_tuple(lhs_shape, rhs_shape, strides, pads, batch_group_count=1):
    """lax.conv_shape_tuple: a convolution's output shape, operands in
    canonical (NC..., OI...) order."""
    if isinstance(pads, str):
        pads = padtype_to_pads(lhs_shape[2:], rhs_shape[2:], strides, pads)
    if len(pads) != len(lhs_shape) - 2:
        raise TypeError(f"Wrong number of explicit pads for convolution: expected "
                        f"{len(lhs_shape) - 2}, got {len(pads)}.")
    padded = [int(n) + int(lo) + int(hi) for n, (lo, hi) in zip(lhs_shape[2:], pads)]
    if builtins.any(p < 0 for p in padded):
        raise ValueError(f"Negative padding is larger than the size of the corresponding "
                         f"dimension: got padding={pads} for lhs_shape[2:]={lhs_shape[2:]}")
    space = tuple(_conv_stride_dim(p, int(k), int(s))
                  for p, k, s in zip(padded, rhs_shape[2:], strides))
    n0 = lhs_shape[0] // batch_group_count if batch_group_count > 1 else lhs_shape[0]
    return (int(n0), int(rhs_shape[0])) + space


def conv_general_shape_tuple(lhs_shape, rhs_shape, window_strides, padding, dimension_numbers):
    """lax.conv_general_shape_tuple: conv_shape_tuple in dimension_numbers'
    layouts."""
    lp, rp, op = conv_general_permutations(dimension_numbers)
    out = conv_shape_tuple(tuple(_np.take(lhs_shape, lp)), tuple(_np.take(rhs_shape, rp)),
                           window_strides, padding)
    return tuple(int(d) for d in _np.take(out, _np.argsort(op)))


def conv_transpose_shape_tuple(lhs_shape, rhs_shape, window_strides, padding,
                               dimension_numbers):
    """lax.conv_transpose_shape_tuple: conv_transpose's output shape."""
    from ._conv import _conv_transpose_padding
    lp, rp, op = conv_general_permutations(dimension_numbers)
    lt, rt = _np.take(lhs_shape, lp), _np.take(rhs_shape, rp)
    if isinstance(padding, str):
        padding = [_conv_transpose_padding(int(k), int(s), padding)
                   for k, s in zip(rt[2:], window_strides)]
    padding = [int(_np.sum(p)) for p in padding]
    space = [(int(i) - 1) * int(s) - int(k) + 2 + p
             for i, k, s, p in zip(lt[2:], rt[2:], window_strides, padding)]
    out = (int(lt[0]), int(rt[0])) + tuple(space)
    return tuple(int(d) for d in _np.take(out, _np.argsort(op)))


def reduce_window_shape_tuple(operand_shape, window_dimensions, window_strides, padding,
                              base_dilation=None, window_dilation=None):
    """lax.reduce_window_shape_tuple: reduce_window's output shape."""
    from ._conv import _dilate_shape
    if base_dilation is not None:
        operand_shape = _dilate_shape(operand_shape, base_dilation)
    if window_dilation is not None:
        window_dimensions = _dilate_shape(window_dimensions, window_dilation)
    padded = [int(d) + int(lo) + int(hi) for d, (lo, hi) in zip(operand_shape, padding)]
    return tuple(_conv_stride_dim(p, int(w), int(s))
                 for p, w, s in zip(padded, window_dimensions, window_strides))


__all__ += ["broadcast_shapes", "broadcast_to_rank", "broadcast_like", "broadcasted_iota",
            "collapse", "split", "stack", "unstack", "index_take", "empty", "dtype",
            "shape_as_value", "conv_shape_tuple", "conv_general_shape_tuple",
            "conv_transpose_shape_tuple", "reduce_window_shape_tuple"]


# ---- sort of several operands; staging helpers ------------------------------


def stage(x):
    """lax.stage: x as a value of the trace (a Python or numpy value
    becomes an array)."""
    from ._core import Array
    from ._trace import Tracer
    return x if isinstance(x, (Tracer, Array)) else _jnp().asarray(x)


def dce_sink(val, *, prevent_mlir_dce=False):
    """lax.dce_sink: keeps val alive against dead-code elimination; shmap
    eliminates none, so nothing to do."""
    return None


def composite(decomposition, name, version=0):
    """lax.composite: decomposition under a name a compiler may recognize;
    here the decomposition itself runs."""
    import functools

    @functools.wraps(decomposition)
    def call(*args, **kwargs):
        return decomposition(*args, **kwargs)
    return call


def platform_dependent(*args, default=None, **per_platform):
    """lax.platform_dependent: the branch for 'cpu' (shmap's devices are
    CPUs), else default, called on args; JAX's checks of the branches."""
    for pname, branch in per_platform.items():
        if not callable(branch):
            raise TypeError(f"lax.platform_dependent: the '{pname}' branch must be a callable.")
        if pname == "gpu":
            raise ValueError("Use 'cuda' or 'rocm' for lax.platform_dependent.")
    if default is not None and not callable(default):
        raise TypeError("lax.platform_dependent: the 'default' branch must be a callable.")
    branch = per_platform.get("cpu", default)
    if branch is None:
        groups = []
        for pname, b in per_platform.items():
            for g in groups:
                if g[1] == b:
                    g[0].append(pname)
                    break
            else:
                groups.append(([pname], b))
        platforms = tuple(tuple(ps) for ps, _ in groups)
        raise NotImplementedError(f"MLIR translation rule for primitive "
                                  f"'platform_index(platforms={platforms})' not found for "
                                  f"platform cpu")
    return branch(*args)


__all__ += ["stage", "dce_sink", "composite", "platform_dependent"]


# ---- Bessel functions, patches and local convolutions, ragged_dot ----------


# Cephes' Chebyshev coefficients of i0e and i1e: for |x| <= 8 (A) and above (B), float32
# and float64 (JAX's _i0e_impl32 / 64, XLA's chlo.bessel_i1e lowering)
_I0E_A64 = (
    -4.41534164647933937950E-18, 3.33079451882223809783E-17, -2.43127984654795469359E-16,
    1.71539128555513303061E-15, -1.16853328779934516808E-14, 7.67618549860493561688E-14,
    -4.85644678311192946090E-13, 2.95505266312963983461E-12, -1.72682629144155570723E-11,
    9.67580903537323691224E-11, -5.18979560163526290666E-10, 2.65982372468238665035E-9)
_I0E_A = (
    -1.30002500998624804212E-8, 6.04699502254191894932E-8, -2.67079385394061173391E-7,
    1.11738753912010371815E-6, -4.41673835845875056359E-6, 1.64484480707288970893E-5,
    -5.75419501008210370398E-5, 1.88502885095841655729E-4, -5.76375574538582365885E-4,
    1.63947561694133579842E-3, -4.32430999505057594430E-3, 1.05464603945949983183E-2,
    -2.37374148058994688156E-2, 4.93052842396707084878E-2, -9.49010970480476444210E-2,
    1.71620901522208775349E-1, -3.04682672343198398683E-1, 6.76795274409476084995E-1)
_I0E_B64 = (
    -7.23318048787475395456E-18, -4.83050448594418207126E-18, 4.46562142029675999901E-17,
    3.46122286769746109310E-17, -2.82762398051658348494E-16, -3.42548561967721913462E-16,
    1.77256013305652638360E-15, 3.81168066935262242075E-15, -9.55484669882830764870E-15,
    -4.15056934728722208663E-14, 1.54008621752140982691E-14, 3.85277838274214270114E-13,
    7.18012445138366623367E-13, -1.79417853150680611778E-12, -1.32158118404477131188E-11,
    -3.14991652796324136454E-11, 1.18891471078464383424E-11, 4.94060238822496958910E-10)
_I0E_B = (
    3.39623202570838634515E-9, 2.26666899049817806459E-8, 2.04891858946906374183E-7,
    2.89137052083475648297E-6, 6.88975834691682398426E-5, 3.36911647825569408990E-3,
    8.04490411014108831608E-1)
_I1E_A64 = (
    2.77791411276104639959E-18, -2.11142121435816608115E-17, 1.55363195773620046921E-16,
    -1.10559694773538630805E-15, 7.60068429473540693410E-15, -5.04218550472791168711E-14,
    3.22379336594557470981E-13, -1.98397439776494371520E-12, 1.17361862988909016308E-11,
    -6.66348972350202774223E-11, 3.62559028155211703701E-10, -1.88724975172282928790E-9)
_I1E_A = (
    9.38153738649577178388E-9, -4.44505912879632808065E-8, 2.00329475355213526229E-7,
    -8.56872026469545474066E-7, 3.47025130813767847674E-6, -1.32731636560394358279E-5,
    4.78156510755005422638E-5, -1.61760815825896745588E-4, 5.12285956168575772895E-4,
    -1.51357245063125314899E-3, 4.15642294431288815669E-3, -1.05640848946261981558E-2,
    2.47264490306265168283E-2, -5.29459812080949914269E-2, 1.02643658689847095384E-1,
    -1.76416518357834055153E-1, 2.52587186443633654823E-1)
_I1E_B64 = (
    7.51729631084210481353E-18, 4.41434832307170791151E-18, -4.65030536848935832153E-17,
    -3.20952592199342395980E-17, 2.96262899764595013876E-16, 3.30820231092092828324E-16,
    -1.88035477551078244854E-15, -3.81440307243700780478E-15, 1.04202769841288027642E-14,
    4.27244001671195135429E-14, -2.10154184277266431302E-14, -4.08355111109219731823E-13,
    -7.19855177624590851209E-13, 2.03562854414708950722E-12, 1.41258074366137813316E-11,
    3.25260358301548823856E-11, -1.89749581235054123450E-11, -5.58974346219658380687E-10)
_I1E_B = (
    -3.83538038596423702205E-9, -2.63146884688951950684E-8, -2.51223623787020892529E-7,
    -3.88256480887769039346E-6, -1.10588938762623716291E-4, -9.76109749136146840777E-3,
    7.78576235018280120474E-1)


def _chebyshev(x, coefficients):
    """Cephes' chbevl as JAX and XLA evaluate it: b0 = x * b1 - b2 + c."""
    jnp = _jnp()
    b0 = b1 = b2 = jnp.zeros_like(x)
    for cf in coefficients:
        b2, b1 = b1, b0
        b0 = x * b1 - b2 + cf
    return 0.5 * (b0 - b2)


def _bessel(name, x, a32, b32, a64, b64, odd):
    jnp = _jnp()
    _accept(name, x, "f", "floating")
    f64 = _dtype_name(x) == "float64"
    w = x if f64 else _work(x)
    z = jnp.abs(w)
    a, b = (a64 + a32, b64 + b32) if f64 else (a32, b32)
    le8 = _chebyshev(z * 0.5 - 2.0, a)
    gt8 = _chebyshev(32.0 / z - 2.0, b) / jnp.sqrt(z)
    if odd:
        r = jnp.sign(w) * jnp.where(z <= 8.0, z * le8, gt8)
    else:
        r = jnp.where(z <= 8.0, le8, gt8)
    return _as_dtype_of(r, x)


@_now
def bessel_i0e(x):
    """lax.bessel_i0e: exp(-|x|) I0(x), by Cephes' Chebyshev series as JAX
    evaluates them (half floats in float32)."""
    return _bessel("bessel_i0e", x, _I0E_A, _I0E_B, _I0E_A64, _I0E_B64, False)


@_now
def bessel_i1e(x):
    """lax.bessel_i1e: exp(-|x|) I1(x), by Cephes' Chebyshev series as
    XLA's lowering evaluates them (half floats in float32)."""
    return _bessel("bessel_i1e", x, _I1E_A, _I1E_B, _I1E_A64, _I1E_B64, True)


def _move(x, src, dst):
    """x with dimensions src (a sequence) moved to positions dst."""
    n = len(x.shape)
    src, dst = [d % n for d in src], [d % n for d in dst]
    order = [d for d in range(n) if d not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return x if order == list(range(n)) else _jnp().transpose(x, tuple(order))


@_now
def conv_general_dilated_patches(lhs, filter_shape, window_strides, padding, lhs_dilation=None,
                                 rhs_dilation=None, dimension_numbers=None, precision=None,
                                 preferred_element_type=None):
    """lax.conv_general_dilated_patches: the patches conv_general_dilated
    would see, flattened into the output's feature dimension (channel
    major, then the filter's spatial positions in rhs_spec order), made
    as JAX makes them: a depthwise convolution with a one-hot kernel."""
    import math
    jnp = _jnp()
    filter_shape = tuple(int(d) for d in filter_shape)
    dn = conv_dimension_numbers(tuple(lhs.shape), (1, 1) + filter_shape, dimension_numbers)
    lhs_spec, rhs_spec, _ = dn
    spatial = math.prod(filter_shape)
    channels = lhs.shape[lhs_spec[1]]
    rhs = jnp.eye(spatial, dtype=lhs.dtype)
    rhs = broadcast_in_dim(rhs, (channels, spatial, spatial), (1, 2))
    rhs = jnp.reshape(rhs, (channels * spatial, 1) + filter_shape)
    rhs = _move(rhs, (0, 1), (rhs_spec[0], rhs_spec[1]))
    return conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=lhs_dilation,
                                rhs_dilation=rhs_dilation, dimension_numbers=dn,
                                feature_group_count=channels,
                                preferred_element_type=preferred_element_type)


@_now
def conv_general_dilated_local(lhs, rhs, window_strides, padding, filter_shape,
                               lhs_dilation=None, rhs_dilation=None, dimension_numbers=None,
                               precision=None):
    """lax.conv_general_dilated_local: a convolution with a separate
    kernel at each output position (rhs holds one per position, in
    rhs_spec's layout with the output's spatial sizes), as JAX computes it:
    the patches dotted with rhs over the patch dimension, batched over
    the spatial positions."""
    filter_shape = tuple(int(d) for d in filter_shape)
    patches = conv_general_dilated_patches(lhs, filter_shape, window_strides, padding,
                                           lhs_dilation, rhs_dilation, dimension_numbers)
    _, rhs_spec, out_spec = conv_dimension_numbers(tuple(lhs.shape), (1, 1) + filter_shape,
                                                   dimension_numbers)
    lhs_b = list(out_spec[2:])
    rhs_b = list(rhs_spec[2:])
    rhs_b = [rhs_b[i] for i in sorted(range(len(rhs_b)), key=lambda k: lhs_b[k])]
    lhs_b = sorted(lhs_b)
    out = dot_general(patches, rhs, (([out_spec[1]], [rhs_spec[1]]), (lhs_b, rhs_b)))
    return _move(out, (-2, -1), (out_spec[0], out_spec[1]))


@_now
def ragged_dot(lhs, rhs, group_sizes, precision=None, preferred_element_type=None,
               group_offset=None, out_sharding=None):
    """lax.ragged_dot: lhs (m, k) in row groups of group_sizes (g,), each
    group's rows times its matrix of rhs (g, k, n); rows past the groups
    give zeros. As JAX's implementation: lhs spread into (g, m, k) with
    the rows of other groups zeroed, contracted with rhs over g and k."""
    jnp = _jnp()
    if group_offset is not None:
        raise NotImplementedError("Unimplemented group_offset support.")
    gshape = _shape_of(group_sizes)
    if len(gshape) == 0:
        raise TypeError("expected rank of group_sizes to be >=1.")
    if len(gshape) != 1:
        raise TypeError(f"expected group_sizes to have shape {(gshape[-1],)}, got {gshape}.")
    if _lax_dtype(group_sizes).kind not in "iu":
        raise TypeError("ragged_dot_general requires that group_sizes.dtype is subtype of "
                        "np.integer.")
    g = gshape[0]
    if len(rhs.shape) != 3 or len(lhs.shape) != 2:
        raise TypeError(f"ragged_dot takes lhs (m, k) and rhs (g, k, n), got shapes "
                        f"{tuple(lhs.shape)} and {tuple(rhs.shape)}")
    if rhs.shape[0] != g:
        raise TypeError(f"expected rhs group dimension size to be {g}, got {rhs.shape[0]}.")
    m, k = lhs.shape
    ends = jnp.cumsum(group_sizes)
    starts = ends - group_sizes
    shape = (g, m, k)
    rows = broadcasted_iota(_lax_dtype(group_sizes), shape, 1)
    inside = (broadcast_in_dim(starts, shape, (0,)) <= rows) & \
        (rows < broadcast_in_dim(ends, shape, (0,)))
    spread = jnp.where(inside, broadcast_in_dim(lhs, shape, (1, 2)), 0)
    return dot_general(spread, rhs, (([0, 2], [0, 1]), ([], [])),
                       preferred_element_type=preferred_element_type, out_sharding=out_sharding)


__all__ += ["bessel_i0e", "bessel_i1e", "conv_general_dilated_patches",
            "conv_general_dilated_local", "ragged_dot"]


def _over_trees(op):
    """op(x, ...) over a pytree x (tuples, lists, dicts of arrays), leaf by
    leaf, as JAX's collectives take one."""
    from ._trace import _is_tree

    @functools.wraps(op)
    def f(x, *args, **kwargs):
        if _is_tree(x):
            return _tree_map(lambda v: op(v, *args, **kwargs), x)
        return op(x, *args, **kwargs)
    return f


def _one_dtype(op, name):
    """op(x, y) checked as JAX's binary lax ops are (_same_dtypes)."""
    @functools.wraps(op)
    def f(x, y, *args, **kwargs):
        _same_dtypes(name, x, y)
        return op(x, y, *args, **kwargs)
    return f


# the arithmetic and bitwise ones under JAX's primitive names (the
# comparisons, atan2 and nextafter check for themselves)
for _name, _prim in (("add", "add"), ("sub", "sub"), ("mul", "mul"), ("div", "div"),
                     ("rem", "rem"), ("max", "max"), ("min", "min"), ("bitwise_and", "and"),
                     ("bitwise_or", "or"), ("bitwise_xor", "xor"), ("shift_left", "shift_left"),
                     ("shift_right_logical", "shift_right_logical"),
                     ("shift_right_arithmetic", "shift_right_arithmetic")):
    if _name in globals():
        globals()[_name] = _one_dtype(globals()[_name], _prim)

for _name in ("psum", "pmean", "pmax", "pmin", "all_gather", "psum_scatter", "ppermute",
              "all_to_all", "pvary", "pcast"):
    if _name in globals():
        globals()[_name] = _over_trees(globals()[_name])


def _under_shard_map(op, name):
    """Collective op checked as JAX's outside a shard_map: at once, pvary's
    ValueError; in a jit body, for an axis no vmap names, JAX's NameError
    (_check_axis_names); ppermute's perm a list or tuple, pcast's and
    pvary's axis_name a name or a tuple, not a set (JAX's TypeErrors)."""
    from . import _vmap
    from ._trace import _state

    @functools.wraps(op)
    def f(x, *args, **kwargs):
        if name == "ppermute":
            perm = kwargs.get("perm", args[1] if len(args) > 1 else None)
            if perm is not None and not isinstance(perm, (list, tuple)):
                raise TypeError(f"`perm` passed to `jax.lax.ppermute` must be a list or a tuple. "
                                f"Got perm of type {type(perm)}")
        b = getattr(_state, "builder", None)
        axis = kwargs.get("axis_name", args[0] if args else None)
        if name in ("pvary", "pcast") and isinstance(axis, (set, frozenset)):
            raise TypeError(f"axis_name={axis!r} must be a tuple or a str. Got {axis}")
        axes = (axis,) if isinstance(axis, str) else tuple(axis or ())
        if b is None and name in ("pvary", "pcast") and not _vmap.axis_sizes():
            raise ValueError("pvary should be called under jax.shard_map.")
        unbound = []
        if b is not None and b.kind == "jit" and getattr(b, "outer", None) is None:
            unbound = [a for a in axes if a not in _vmap.axis_sizes()]
        elif b is not None and b.kind == "shard_map" and name in ("pvary", "pcast") and \
                b.manual_axes is not None:  # an axis a partial-manual body leaves out
            unbound = [a for a in axes if a not in b.manual_axes and a not in _vmap.axis_sizes()]
        if unbound:
            raise NameError(f"Found an unbound axis name: {unbound[0]}. To fix this, please "
                            f"call {name} under `jax.shard_map`.")
        return op(x, *args, **kwargs)
    return f


for _name in ("psum", "pmean", "pmax", "pmin", "all_gather", "psum_scatter", "ppermute",
              "all_to_all", "pvary", "pcast"):
    if _name in globals():
        globals()[_name] = _under_shard_map(globals()[_name], _name)

# jax.lax.with_sharding_constraint and reshard: jnp's (pytrees, JAX's checks in a body)
from .numpy import reshard, with_sharding_constraint  # noqa: E402,F811


# Python's float and int as dtype= (by keyword or position): JAX's float32 and int32
from ._core import _canon_module_dtypes  # noqa: E402
_canon_module_dtypes(globals(), __all__, ("dtype", "new_dtype"))
