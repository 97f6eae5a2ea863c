"""Reverse-mode differentiation of traced functions: shmap.grad and
shmap.value_and_grad, as JAX's.

While the function runs under a trace, every op whose operands depend on
the differentiated arguments is put on a tape (the op, its operands, its
result); the cotangents are then traced backwards into the same program, op
by op, from the op table's own ops. The backward ops get JAX's sharding
rules like any other: a product's cotangent is laid out as its primal
operand (JAX's transpose of dot_general passes the operand's sharding as
out_sharding), a reshard's goes back to its operand's sharding, and a sum
over a broadcast dimension completes across devices where that dimension
was sharded. Outside a trace, grad(f)(arrays) runs as a jit program.

Each differentiation being traced is a level of a stack of tapes: a grad
inside a differentiated function records on every level its operands
depend on, and its backward pass, emitted through the same choke points,
is recorded by the outer levels, which differentiate it (higher
derivatives, jacrev of jacrev). custom_vjp and custom_jvp calls are one
entry of the innermost level their arguments depend on, their rules' own
ops recorded by the outer ones."""
import functools
import inspect
import numbers
import re
import types

import numpy as np

from ._core import (Array, InvalidArgument, PartitionSpec, Unimplemented, _padded, _spec_axes,
                    _type_axes)
from ._trace import (Tracer, _builder, _call_op, _entries, _is_tree, _leaves_but_none, _state,
                     _tree_sig, jit)
from ._trace import _tree_build as _build_all


# Pytrees here as JAX's: None an empty subtree (no leaf; given back as None)
_tree_leaves = _leaves_but_none


def _tree_build(v, it):
    return _build_all(v, it, none_empty=True)


# Ops whose results carry no derivative (integers, booleans, piecewise
# constants): they never become part of what is differentiated.
_NONDIFF = {
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "==", "!=", "<",
    "<=", ">", ">=", "&", "|", "^", "//", "%", "bitwise_and", "bitwise_or", "bitwise_xor",
    "bitwise_not", "logical_and", "logical_or", "logical_xor", "logical_not", "argmax",
    "argmin", "argsort", "sign", "floor", "ceil", "round", "floor_divide", "mod", "any", "all",
    "zeros", "ones", "full", "arange", "axis_index", "axis_size",
}


def _jnp():
    from . import numpy as jnp
    return jnp


def _spec(t):
    """The PartitionSpec of traced value t, or None when nothing is sharded."""
    return _jnp()._spec_of_type(t.type)


def _ur(t):
    """(unreduced, reduced): the mesh axes of t's type's {U:...} and {R:...}."""
    axes = _type_axes(t)
    return frozenset(axes["U"]), frozenset(axes["R"])


def _ct_sharding(t):
    """The spec of the cotangent of primal t (JAX's to_ct_spec): t's
    dimensions, unreduced over the axes t is reduced over (replicated,
    whose cotangent each device holds a part of) and reduced over those t
    is unreduced over; None when the cotangent is replicated."""
    u, r = _ur(t)
    spec = _spec(t)
    if not u and not r:
        return spec
    return _padded(spec, len(t.shape), unreduced=r, reduced=u)


def _zeros_typed(g):
    """Zeros of g's type: its sharding, unreduced and reduced axes included
    (zeros are partial sums of zero)."""
    z = _jnp().zeros_like(g)
    u, r = _ur(g)
    if not u and not r:
        return z
    return _jnp().reshard(z, _padded(_spec(g), len(g.shape), unreduced=u, reduced=r))


def _laid_out_as(t):
    """out_sharding= for a cotangent laid out as primal t (as JAX's
    transposes pass the operand's sharding): t's spec, P() when t is
    unsharded; nothing on a mesh of Auto axes only, whose layouts the
    service chooses, nor in a shard_map body (blocks are local)."""
    from ._core import Auto, P
    b = _builder()
    if b.kind == "shard_map":
        return {}
    mesh = getattr(b, "mesh", None)
    if mesh is not None and all(a == Auto for a in mesh.axis_types):
        return {}
    spec = _spec(t)
    return {"out_sharding": spec if spec is not None else P()}


def _is_float(t):
    return np.dtype(t.dtype).kind == "f"


# ---- recording ----------------------------------------------------------------


def _tracers_in(args):
    for a in args:
        if isinstance(a, Tracer):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from _tracers_in(a)


class _Level:
    """One differentiation being traced (a grad, a vjp, a custom rule's
    own): its tape, the names of the values that depend on what it
    differentiates, and whether it is paused (it records nothing while a
    custom rule's forward runs, nor for stop_gradient)."""

    def __init__(self, names):
        self.tape, self.active, self.paused = [], set(names), 0


def _levels(b):
    """The differentiations being traced by builder b, outermost first."""
    return getattr(b, "levels", None) or []


def _push(b, names):
    lv = _Level(names)
    if getattr(b, "levels", None) is None:
        b.levels = []
    b.levels.append(lv)
    b.tape = lv.tape  # the builder calls record while any level is on
    return lv


def _pop(b, lv):
    b.levels.remove(lv)
    b.tape = b.levels[-1].tape if b.levels else None


class _paused:
    """with _paused(levels): those levels record nothing."""

    def __init__(self, levels):
        self.levels = list(levels)

    def __enter__(self):
        for lv in self.levels:
            lv.paused += 1

    def __exit__(self, *exc):
        for lv in self.levels:
            lv.paused -= 1


def _as_params(b, args):
    """args with each traced value of another trace that a parameter of b
    stands for (b.closed_as) replaced by that parameter, in lists and tuples
    too."""
    def one(a):
        if isinstance(a, Tracer) and id(a) in b.closed_as:
            return b.closed_as[id(a)]
        if type(a) in (list, tuple):
            return type(a)(one(e) for e in a)
        return a
    return type(args)(one(a) for a in args)


def record(b, prim, args, kwargs, out):
    """Called by the builder for every op it emits while a tape is on: puts
    the op on the tape of each level where an operand depends on what that
    level differentiates (then so does its result)."""
    if b.closed_as:  # values of another trace standing for parameters (_with_closed)
        args = _as_params(b, args)
    names = {t.name for t in _tracers_in(args)}
    for lv in _levels(b):
        if lv.paused or not names & lv.active:
            continue
        if prim in _NONDIFF:
            return
        if prim in ("pmax", "pmin"):  # JAX defines no JVP for them: its sentence, when traced
            raise Unimplemented(f"Differentiation rule for '{prim}' not implemented")
        if prim == "scatter_mul" and isinstance(args[2], Tracer) and args[2].name in lv.active:
            raise Unimplemented("scatter_mul gradients are only implemented if "
                                "`unique_indices=True`")
        if prim == "vjp":
            raise InvalidArgument("grad: a higher derivative through a shard_map function "
                                  "called from a jit body is not supported (its backward is "
                                  "a function of the program grad has no rule for); take it "
                                  "inside the shard_map body")
        if isinstance(out, tuple):  # a call of a function with several results
            lv.active.update(o.name for o in out if _is_float(o))
        else:
            lv.active.add(out.name)
        lv.tape.append((prim, args, kwargs, out))


# ---- rules: the cotangents of an op's operands from its result's ------------


def _pending(t):
    """t's type is not known yet (asking for it type-checks the program)."""
    return t._ty is None


def _sum_to(c, like, shape=None, dtype=None):
    """c summed down to the shape of like (numpy broadcasting undone), in
    like's dtype. shape and dtype: c's, when the caller knows them (so that
    a long program is not type-checked to learn them)."""
    jnp = _jnp()
    target = tuple(like.shape)
    cs = tuple(c.shape) if shape is None else tuple(shape)
    if cs != target:
        lead = len(cs) - len(target)
        axes = tuple(range(lead)) + tuple(lead + d for d, n in enumerate(target)
                                          if n == 1 and cs[lead + d] != 1)
        if axes:
            c = jnp.sum(c, axis=axes, keepdims=True)
        c = jnp.reshape(c, target)
    if (c.dtype if dtype is None else np.dtype(dtype)) != like.dtype:
        c = c.astype(like.dtype)
    return c


def _vma(t):
    """The varying and the unreduced mesh axes of a shard_map block's type
    ('f32[2,4]{V:i,j, U:k}')."""
    axes = _type_axes(t)
    return axes["V"], axes["U"]


def _laid_like(c, a):
    """Cotangent c with primal a's type, sharding included, as JAX's
    cotangents always have (a broadcast or a product may lay it out
    otherwise): resharded where it differs, on a mesh with Explicit axes.
    In a shard_map body, c varies over the mesh axes a varies over: where
    a is invariant and c is not, c is summed over those axes (the
    transpose of the pvary JAX inserts where invariant meets varying), and
    pvary'd where a varies and c does not."""
    b = _builder()
    if b.kind != "shard_map":
        ur = _ur(a)
        if ur[0] or ur[1]:  # JAX's to_ct_spec: reduced and unreduced swap
            want = _ct_sharding(a)
            if _pending(c) or _spec(c) != _spec(a) or _ur(c) != (ur[1], ur[0]):
                return _jnp().reshard(c, want)
            return c
    if b.kind != "shard_map" and _pending(c):
        # past the first ops of a long program a type is learnt by checking
        # the program: a reshard to a's sharding is emitted without asking
        # (a no-op where c has it already)
        kw = _laid_out_as(a)
        return _jnp().reshard(c, kw["out_sharding"]) if kw else c
    if c.type == a.type:
        return c
    if b.kind == "shard_map":
        # JAX's to_ct: where a is unreduced, c is the same on every device,
        # reduced over those axes; where a is reduced, c holds partial sums
        from . import lax
        (cv, cu), (av, au) = _vma(c), _vma(a)
        cr, ar = _ur(c)[1], _ur(a)[1]
        if cu - ar:
            raise InvalidArgument("grad: a cotangent holding partial sums (unreduced axes) is "
                                  "not supported")
        order = [n for n in b.mesh.axis_names]

        def axes(s):
            t = tuple(n for n in order if n in s)
            return t if len(t) > 1 else t[0]
        extra = tuple(n for n in order if n in cv - av - ar)
        missing = tuple(n for n in order if n in av - cv)
        if extra and getattr(b, "check_vma", True):  # (with check_vma=False, not summed)
            c = lax.psum(c, extra if len(extra) > 1 else extra[0])
        if missing:
            c = lax.pvary(c, missing if len(missing) > 1 else missing[0])
        if ar - cu:  # partial sums: the first device along them keeps c, the others 0
            new = ar - cu
            if not new <= cv:
                first = lax.axis_index(axes(new - cv)) == 0
                c = _jnp().where(first, c, _jnp().zeros_like(c))
            c = lax.pcast(c, axes(new), to="unreduced")
        if au - cr:
            c = lax.pcast(c, axes(au - cr), to="reduced")
        return c
    if not _laid_out_as(a):
        return c
    from ._core import P
    spec = _spec(a)
    return _jnp().reshard(c, spec if spec is not None else P())


def _expand_reduced(g, a, axis, keepdims):
    """g (a reduction's cotangent) broadcast back to a's shape."""
    jnp = _jnp()
    n = len(a.shape)
    axes = tuple(range(n)) if axis is None else \
        tuple(ax % n for ax in (axis if isinstance(axis, (tuple, list)) else (axis,)))
    if not keepdims and axes:
        g = jnp.expand_dims(g, axes)
    return jnp.broadcast_to(g, tuple(a.shape)), axes


def _count(a, axes):
    n = 1
    for ax in axes:
        n *= a.shape[ax]
    return n


def _einsum_parts(subscripts, ops):
    s = subscripts.replace(" ", "")
    if "..." in s:
        raise InvalidArgument("grad: einsum with '...' is not supported; name every dimension")
    if "->" in s:
        ins, out = s.split("->")
    else:  # numpy's implicit output: the letters seen once, sorted
        ins = s
        letters = [c for c in ins if c.isalpha()]
        out = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    terms = ins.split(",")
    if len(terms) != len(ops):
        raise InvalidArgument(f"grad: einsum '{subscripts}' names {len(terms)} operands, "
                              f"got {len(ops)}")
    return terms, out


def _contracted_axes(subscripts, ops):
    """The mesh axes the contracted letters of einsum(subscripts, *ops) are
    sharded over, when every operand shards each alike (else None)."""
    ins, out = subscripts.split("->")
    seen = {}
    for term, o in zip(ins.split(","), ops):
        spec = tuple(_spec(o) or ())
        for d, c in enumerate(term):
            e = spec[d] if d < len(spec) else None
            axes = () if e is None else ((e,) if isinstance(e, str) else tuple(e))
            if c in seen and seen[c] != axes:
                return None
            seen[c] = axes
    return frozenset(a for c, axes in seen.items() if c not in out for a in axes)


def _einsum_ct(subscripts, ops, g, k):
    """The cotangent of operand k of einsum(subscripts, *ops) from g."""
    jnp = _jnp()
    terms, out = _einsum_parts(subscripts, ops)
    tk = terms[k]
    if len(set(tk)) != len(tk):
        raise InvalidArgument(f"grad: einsum operand '{tk}' repeats an index (a diagonal); "
                              f"not supported")
    others = [t for j, t in enumerate(terms) if j != k]
    seen = set(out) | set("".join(others))
    kept = "".join(c for c in tk if c in seen)
    kw = _laid_out_as(ops[k]) if kept == tk else {}
    red = _ur(ops[k])[1]
    if kw and red and _contracted_axes(",".join([out] + others) + "->" + kept,
                                       [g] + [o for j, o in enumerate(ops) if j != k]) == red:
        # a reduced operand's cotangent: the contraction's partial sums
        # over the axes it is reduced over stay unreduced (no all-reduce;
        # JAX's transpose with the cotangent's out_sharding)
        kw = {"out_sharding": _padded(kw["out_sharding"], len(kept), unreduced=red)}
    r = jnp.einsum(",".join([out] + others) + "->" + kept, g,
                   *[o for j, o in enumerate(ops) if j != k], **kw)
    if kept != tk:  # indices summed within operand k alone: broadcast back
        lone = tuple(d for d, c in enumerate(tk) if c not in seen)
        r = jnp.broadcast_to(jnp.expand_dims(r, lone), tuple(ops[k].shape))
    return r


def _matmul_subscripts(a, b, dot):
    """The einsum of a @ b (dot: jnp.dot's rule for N-d operands)."""
    ra, rb = len(a.shape), len(b.shape)
    if ra == 0 or rb == 0:
        return None
    if ra == 1 and rb == 1:
        return "i,i->"
    if dot and rb >= 2:  # the last axis of a with the second to last of b
        lead_a, lead_b = "abcdefgh"[:ra - 1], "mnopqrst"[:rb - 2]
        return f"{lead_a}j,{lead_b}jk->{lead_a}{lead_b}k"
    if ra == 1:
        return "j,jk->k" if rb == 2 else None
    if rb == 1:
        lead = "abcdefgh"[:ra - 1]
        return f"{lead}j,j->{lead}"
    if rb == 2 or (dot and ra <= 2):
        lead = "abcdefgh"[:ra - 1]
        return f"{lead}j,jk->{lead}k"
    if not dot and ra == rb and tuple(a.shape[:-2]) == tuple(b.shape[:-2]):
        lead = "abcdef"[:ra - 2]
        return f"{lead}ij,{lead}jk->{lead}ik"
    return None


def _matmul_rule(name, g, out, a, b, out_sharding=None, **kw):
    s = _matmul_subscripts(a, b, name == "dot")
    if s is None:
        raise InvalidArgument(f"grad: {name} of shapes {tuple(a.shape)} and {tuple(b.shape)} "
                              f"(batched with broadcasting) is not supported; write it as einsum")
    return [_einsum_ct(s, [a, b], g, k) if isinstance(x, Tracer) else None
            for k, x in enumerate((a, b))]


def _binary(op, g, out, a, b):
    jnp = _jnp()
    if op in ("+", "add"):
        return [g, g]
    if op in ("-", "subtract"):
        return [g, -g]
    if op in ("*", "multiply"):
        return [g * b, g * a]
    if op in ("/", "divide"):
        return [g / b, None if not isinstance(b, Tracer) else -(g * out) / b]
    if op in ("**", "power"):
        da = None
        if isinstance(a, Tracer):  # JAX's: an integer exponent's 0 has a derivative of 0
            if isinstance(b, numbers.Integral) and not isinstance(b, bool):
                da = None if b == 0 else g if b == 1 else g * b * a ** (b - 1)
            elif np.issubdtype(np.dtype(getattr(b, "dtype", np.float32)), np.integer):
                da = g * jnp.where(b == 0, jnp.zeros_like(out), b * a ** (b - 1))
            else:
                da = g * b * a ** (b - 1)
        db = g * out * jnp.log(a) if isinstance(b, Tracer) else None
        return [da, db]
    if op == "arctan2":  # arctan2(a, b): d/da = b / r2, d/db = -a / r2
        r2 = a * a + b * b
        return [g * b / r2, -(g * a) / r2]
    if op in ("maximum", "minimum"):  # lax.max/min: ties share the cotangent
        pick = (a > b) if op == "maximum" else (a < b)
        w = jnp.astype(pick, out.dtype) + 0.5 * jnp.astype(a == b, out.dtype)
        return [g * w, g * (1 - w)]
    raise KeyError(op)


# The ops whose operands broadcast to their result (their rules give each
# operand a cotangent of the result's shape).
_ELEMENTWISE = {"+", "-", "*", "/", "**", "add", "subtract", "multiply", "divide", "power",
                "maximum", "minimum", "arctan2", "where"}

_UNARY = {
    "negative": lambda g, out, x: -g,
    "exp": lambda g, out, x: g * out,
    "log": lambda g, out, x: g / x,
    "log1p": lambda g, out, x: g / (1 + x),
    "expm1": lambda g, out, x: g * (out + 1),
    "sin": lambda g, out, x: g * _jnp().cos(x),
    "cos": lambda g, out, x: -(g * _jnp().sin(x)),
    "tan": lambda g, out, x: g * (1 + out * out),
    "tanh": lambda g, out, x: g * (1 - out * out),
    "sqrt": lambda g, out, x: g * 0.5 / out,
    "rsqrt": lambda g, out, x: g * -0.5 * out / x,
    "logistic": lambda g, out, x: g * out * (1 - out),
    "abs": lambda g, out, x: _jnp().where(x >= 0, g, -g),  # JAX's: g at 0
    "erf": lambda g, out, x: g * (2 / np.sqrt(np.pi)) * _jnp().exp(-(x * x)),
    "arcsin": lambda g, out, x: g / _jnp().sqrt(1 - x * x),
    "arccos": lambda g, out, x: -(g / _jnp().sqrt(1 - x * x)),
    "arctan": lambda g, out, x: g / (1 + x * x),
    "sinh": lambda g, out, x: g * _jnp().cosh(x),
    "cosh": lambda g, out, x: g * _jnp().sinh(x),
    "arcsinh": lambda g, out, x: g / _jnp().sqrt(x * x + 1),
    "arccosh": lambda g, out, x: g / _jnp().sqrt((x - 1) * (x + 1)),
    "arctanh": lambda g, out, x: g / (1 - x * x),
    "cbrt": lambda g, out, x: g / (3 * out * out),
}


def _getitem_rule(g, out, x, key):
    """x[key] for integers, slices and None: g padded with zeros back to x's
    shape (a strided slice's with zeros between its elements too, a
    reversed one's flipped first)."""
    from ._conv import _dilate, _gather_dims
    jnp = _jnp()
    shape = tuple(x.shape)
    pads, gshape, d = [], [], 0
    flips, strides = [], []
    for k in key:
        if k is None:
            continue
        n = shape[d]
        if isinstance(k, numbers.Integral) and not isinstance(k, bool):
            i = int(k) + n if k < 0 else int(k)
            pads.append((i, n - i - 1))
            gshape.append(1)
        elif isinstance(k, slice) and k.step in (None, 1):
            a, e, _ = k.indices(n)
            e = max(e, a)
            pads.append((a, n - e))
            gshape.append(e - a)
        elif isinstance(k, slice):
            a, e, st = k.indices(n)
            o = len(range(a, e, st))
            if st < 0:  # the same elements in x's order, g flipped
                flips.append(len(gshape))
                a, st = a + (o - 1) * st if o else 0, -st
            if o and st > 1:
                strides.append((len(gshape), st))
            span = (o - 1) * st + 1 if o else 0
            pads.append((a, n - a - span))
            gshape.append(o)
        else:
            raise InvalidArgument(f"grad: indexing with {k!r} is not supported")
        d += 1
    for n in shape[d:]:
        pads.append((0, 0))
        gshape.append(n)
    g = jnp.reshape(g, tuple(gshape))
    if flips:
        g = jnp.flip(g, tuple(flips))
    if strides:  # spread where no sharding splits the dimension (resharded back after)
        g = _gather_dims(g, _entries(g), {ax for ax, _ in strides})
    for ax, st in strides:
        g = _dilate(g, ax, st)
    return [jnp.pad(g, tuple(pads)) if any(p != (0, 0) for p in pads) else g]


def _take_rule(g, out, a, idx, axis=None, mode=None, out_sharding=None):
    """take(a, idx, axis): every position of a gets the sum of the
    cotangents of the results that took it: a segment_sum of g's rows by
    the indices (out of range: dropped, as 'fill' takes nothing there)."""
    jnp = _jnp()
    if not isinstance(a, Tracer):
        return [None, None]
    if axis is None:
        raise InvalidArgument("grad: take without an axis (of the flattened array) is not "
                              "supported; give axis=")
    n = len(a.shape)
    axis %= n
    size = a.shape[axis]
    if mode == "wrap":
        idx = idx % size
    else:  # as the kernel: negative indices from the end, then clipped or dropped
        idx = jnp.where(idx < 0, idx + size, idx)
        if mode in ("clip", "promise_in_bounds"):
            idx = jnp.clip(idx, 0, size - 1)
    ri = len(idx.shape)
    # g: a's dims before axis, idx's, a's after: idx's first, then the rest
    perm = tuple(range(axis, axis + ri)) + tuple(range(axis)) + \
        tuple(range(axis + ri, axis + ri + n - axis - 1))
    rows = jnp.transpose(g, perm) if axis else g
    c = jnp.segment_sum(rows, idx, size)  # (size, a's dims before axis, after)
    if axis:
        c = jnp.transpose(c, tuple(range(1, axis + 1)) + (0,) +
                          tuple(range(axis + 1, n)))
    return [c, None]


def _segment_sum_rule(g, out, data, ids, num_segments=None):
    """segment_sum: each row of data gets its segment's cotangent (none for
    an id out of range)."""
    jnp = _jnp()
    n = out.shape[0]
    rows = jnp.take(g, jnp.clip(ids, 0, max(n - 1, 0)), axis=0)
    keep = jnp.astype((ids >= 0) & (ids < n), out.dtype)
    keep = jnp.reshape(keep, tuple(ids.shape) + (1,) * (len(data.shape) - len(ids.shape)))
    return [rows * keep, None, None]


def _rows_taken(g, idx, dtype):
    """g's rows at idx as the scatters name them (negative from the end,
    out of range: zero rows), with g's first dimension and idx made whole
    in a jit body (as a gather's rule asks)."""
    jnp = _jnp()
    from ._core import P
    from ._trace import _dims, _spec_entry
    n = g.shape[0]
    if _builder().kind == "jit":
        gd, idd = _dims(g.type), _dims(idx.type)
        if "@" in gd[0]:
            g = jnp.reshard(g, P(None, *map(_spec_entry, gd[1:])))
        if any("@" in d for d in idd):
            idx = jnp.reshard(idx, P())
    i = jnp.where(idx < 0, idx + n, idx)
    keep = jnp.astype((i >= 0) & (i < n), dtype)
    rows = jnp.take(g, jnp.clip(i, 0, max(n - 1, 0)), axis=0)
    return rows * jnp.reshape(keep, tuple(idx.shape) + (1,) * (len(g.shape) - 1)), i, keep


def _scatter_rule(prim, g, out, x, idx, u, out_sharding=None):
    """scatter_add: the operand's cotangent passes, each update gets its
    row's. scatter (set): rows written get none in the operand, and only
    the update that won a row (the last of repeated indices) gets its
    row's. scatter_mul: the operand's is g times the product of its row's
    updates (the updates' is refused as JAX does, when recorded)."""
    jnp = _jnp()
    n, r = x.shape[0], len(x.shape)
    kw = {} if out_sharding is None else {"out_sharding": out_sharding}
    if prim == "scatter_mul":
        from ._trace import _ones_like
        return [g * _call_op("scatter_mul", _ones_like(x), idx, u, **kw), None, None]
    du = None
    if isinstance(u, Tracer):
        du, i, keep = _rows_taken(g, idx, g.dtype)
        if prim == "scatter":
            nq = int(np.prod(idx.shape))
            pos = jnp.reshape(jnp.arange(nq, dtype=np.int32), tuple(idx.shape))
            w = _call_op("scatter", jnp.full((n,), -1, dtype=np.int32), i, pos)
            won = jnp.take(w, jnp.clip(i, 0, max(n - 1, 0)), axis=0) == pos
            du = du * jnp.reshape(jnp.astype(won, g.dtype), tuple(idx.shape) + (1,) * (r - 1))
    dx = g
    if prim == "scatter":
        hit = _call_op("scatter", jnp.zeros((n,), dtype=g.dtype), idx,
                       jnp.ones(tuple(idx.shape), dtype=g.dtype))
        dx = g * jnp.reshape(1 - hit, (n,) + (1,) * (r - 1))
    return [dx, None, du]


def _scatter_extremal_rule(prim, g, out, x, idx, u, out_sharding=None):
    """scatter_min / scatter_max, the transpose of JAX's JVP
    (_scatter_extremal_jvp): an element of a row that updates reached
    shares its cotangent equally among the updates equal to the result and,
    when the result is the operand's own value, the operand; an element no
    update reached passes its cotangent to the operand."""
    jnp = _jnp()
    from ._trace import _ones_like
    r = len(x.shape)
    kw = {} if out_sharding is None else {"out_sharding": out_sharding}
    zeros = _ones_like(x) * 0
    target, i, keep = _rows_taken(out, idx, out.dtype)  # out's row of each update
    keep = jnp.reshape(keep, tuple(idx.shape) + (1,) * (r - 1)) > 0
    won = (u == target) & keep
    won_f = jnp.astype(won, g.dtype)
    reach = jnp.astype(keep, g.dtype) + won_f * 0  # (broadcast, and laid out as the updates)
    hit = _call_op("scatter_add", zeros, idx, reach, **kw) > 0
    n_won = _call_op("scatter_add", zeros, idx, won_f, **kw)  # per element of the operand
    kept = x == out
    dx = g * jnp.where(hit, jnp.where(kept, 1 / (n_won + 1), 0.0), 1.0)
    du = None
    if isinstance(u, Tracer):
        initial, _, _ = _rows_taken(x, idx, x.dtype)
        n_q, _, _ = _rows_taken(n_won, idx, g.dtype)
        share = jnp.where(initial == target, 1 / (n_q + 1), 1 / jnp.maximum(n_q, 1))
        gq, _, _ = _rows_taken(g, idx, g.dtype)
        du = gq * jnp.where(won, share, 0.0)
    return [dx, None, du]


def _take_along_rule(g, out, arr, idx, axis=None, mode=None, out_sharding=None):
    """take_along_axis(arr, idx, axis): as take's, one index per position."""
    jnp = _jnp()
    if not isinstance(arr, Tracer):
        return [None, None]
    n = len(arr.shape)
    if axis is None or len(idx.shape) != n or any(
            idx.shape[d] != arr.shape[d] for d in range(n) if d != axis % n):
        raise InvalidArgument("grad: take_along_axis needs an axis and indices of the array's "
                              "shape but along that axis; not supported otherwise")
    axis %= n
    size = arr.shape[axis]
    if mode == "wrap":
        idx = idx % size
    elif mode != "fill":
        idx = jnp.clip(idx, 0, size - 1)
    from . import nn
    oh = nn.one_hot(idx, size, dtype=out.dtype)  # idx's shape + (size,)
    dims = "abcdefghijklmnopqrstuvwxy"[:n]
    res = dims[:axis] + "z" + dims[axis + 1:]
    return [jnp.einsum(f"{dims},{dims}z->{res}", g, oh, **_laid_out_as(arr)), None]


def _others_product(a, axes):
    """For each element of a, the product of the others over axes (no
    division: exclusive running products from both ends, so zeros are
    right)."""
    jnp = _jnp()
    n = len(a.shape)
    rest = [d for d in range(n) if d not in axes]
    perm = rest + list(axes)
    m = 1
    for d in axes:
        m *= a.shape[d]
    lead = tuple(a.shape[d] for d in rest)
    y = jnp.reshape(jnp.transpose(a, tuple(perm)), lead + (m,))
    if _laid_out_as(a):  # the running products need the reduced elements whole (as the
        from ._core import P  # forward prod gathers them)
        y = jnp.reshard(y, P())
    one = jnp.ones(lead + (1,), dtype=a.dtype)
    left = jnp.concatenate([one, jnp.cumprod(y, axis=-1)[..., :-1]], axis=-1)
    right = jnp.flip(jnp.cumprod(jnp.flip(y, -1), axis=-1), -1)
    right = jnp.concatenate([right[..., 1:], one], axis=-1)
    o = jnp.reshape(left * right, lead + tuple(a.shape[d] for d in axes))
    return jnp.transpose(o, tuple(int(i) for i in np.argsort(perm)))


def _reduce_rule(name, g, out, a, axis=None, dtype=None, keepdims=False):
    jnp = _jnp()
    ge, axes = _expand_reduced(g, a, axis, keepdims)
    if name == "prod":
        return [ge * _others_product(a, axes)]
    if name == "sum":
        return [ge]
    if name == "mean":
        return [ge / _count(a, axes)]
    # max, min: the positions holding the extreme share its cotangent
    oe, _ = _expand_reduced(out, a, axis, keepdims)
    m = jnp.astype(a == oe, out.dtype)
    return [ge * m / jnp.sum(m, axis=axes, keepdims=True)]


def _scan_last(op, e):
    """JAX's associative_scan of op (lax.associative_scan, the parallel
    prefix scan its cumprod, cummax and cummin are differentiated through)
    along the last axis of e: adjacent pairs combined, the pairs' scan
    taken recursively (the odd positions), the even positions from those
    and the elements between; strided slices written as a reshape to
    (..., pairs, 2), whose ops all have rules."""
    jnp = _jnp()
    n = e.shape[-1]
    if n < 2:
        return e
    m = n // 2
    lead = tuple(e.shape[:-1])
    pairs = _reshape_lead(e[..., :2 * m] if n % 2 else e, lead + (m, 2))
    first, second = pairs[..., 0], pairs[..., 1]  # e[0:-1:2], e[1::2]
    odd = _scan_last(op, op(first, second))
    if n % 2 == 0:
        even = e[..., :1] if m == 1 else \
            jnp.concatenate([e[..., :1], op(odd[..., :-1], first[..., 1:])], axis=-1)
        return _reshape_lead(jnp.stack([even, odd], axis=-1), lead + (n,))
    rest = jnp.concatenate([first[..., 1:], e[..., n - 1:]], axis=-1) if m > 1 else e[..., 2:]
    even = jnp.concatenate([e[..., :1], op(odd, rest)], axis=-1)
    inter = _reshape_lead(jnp.stack([even[..., :-1], odd], axis=-1), lead + (n - 1,))
    return jnp.concatenate([inter, even[..., -1:]], axis=-1)


def _reshape_lead(v, shape):
    """v reshaped where only its last dimensions change (its leading ones
    keep their sharding)."""
    jnp = _jnp()
    if not _laid_out_as(v):
        return jnp.reshape(v, shape)
    from ._core import P
    spec = tuple(_spec(v) or ())
    k = len(v.shape) - 1  # the dimensions before the last are kept
    spec = (spec + (None,) * len(v.shape))[:k]
    return jnp.reshape(v, shape, out_sharding=P(*(spec + (None,) * (len(shape) - k))))


def _cumulative_rule(prim, g, out, a, axis=None, dtype=None):
    """cumsum's cotangent is the reverse running sum of g. cumprod, cummax
    and cummin have JAX's (their JVP is associative_scan's, each combine a
    lax.mul, max or min): the cotangent is the VJP of that very scan,
    traced here on a tape of its own, so that a product with zeros is
    right and tied extremes share as JAX's balanced max/min does (half to
    each side of every tied combine)."""
    jnp = _jnp()
    shape = tuple(a.shape)
    if axis is None:  # numpy's: over the flattened array (g has its shape)
        a = jnp.reshape(a, (-1,))
        axis = 0
    n = len(a.shape)
    axis %= n
    if g.dtype != a.dtype:
        g = g.astype(a.dtype)
    if prim == "cumsum":
        c = jnp.flip(jnp.cumsum(jnp.flip(g, axis), axis=axis), axis)
    else:
        op = {"cumprod": jnp.multiply, "cummax": jnp.maximum, "cummin": jnp.minimum}[prim]
        perm = tuple(d for d in range(n) if d != axis) + (axis,)
        back = tuple(int(i) for i in np.argsort(perm))
        moved = axis != n - 1

        def scan():
            x = jnp.transpose(a, perm) if moved else a
            y = _scan_last(op, x)
            return jnp.transpose(y, back) if moved else y
        res, tape, active = _taped(_builder(), [a], scan)
        c = _backward(tape, active, _seeds([res], [g], active), [a])[0]
    return [jnp.reshape(c, shape) if tuple(c.shape) != shape else c]


def _params_of(op):
    """The parameter names of op, in order, from the op table's signature."""
    if not _PARAMS:
        import _shmap
        for name, sig, *_ in _shmap.op_table():
            _PARAMS[name] = tuple(p.split(":")[0].lstrip("?") for p in sig.split())
    return _PARAMS[op]


_PARAMS = {}
_COLLECTIVES = ("psum", "pmean", "pvary", "pcast", "all_gather", "psum_scatter", "ppermute",
                "all_to_all")


def _bind(prim, args, kwargs):
    """op prim's arguments by parameter name."""
    a = dict(zip(_params_of(prim), args))
    a.update(kwargs)
    return a


def _names(axis_name):
    return (axis_name,) if isinstance(axis_name, str) else tuple(axis_name)


def _collective(prim, g, out, args, kwargs):
    """The transposes of the collectives, as JAX's: psum's (and pmean's)
    is pvary (left to _laid_like), pvary's is psum (the same), all_gather's
    is psum_scatter and back, ppermute's the inverse permutation,
    all_to_all's the one with split and concat axes swapped. pcast to
    unreduced (varying to partial sums) has JAX's reduced_vary_cast: the
    cotangent, the same on every device along those axes (JAX's reduced),
    made varying; a psum of partial sums (JAX's unreduced_psum) has
    preduced: the cotangent as it is."""
    from . import lax
    from ._trace import _axes_size
    a = _bind(prim, args, kwargs)
    if prim == "pcast" and a.get("to") in (None, "varying"):  # pcast(x, axes) is pvary
        prim, a = "pvary", {k: v for k, v in a.items() if k != "to"}
    if prim == "pcast" and a.get("to") == "unreduced" and a.get("axis_index_groups") is None:
        return [lax.pvary(g, a["axis_name"])]
    invariant = prim == "all_gather" and a.get("to") == "invarying"
    if a.get("axis_index_groups") is not None or (a.get("to") is not None and not invariant):
        raise InvalidArgument(f"grad: {prim} with axis_index_groups or to= is not supported")
    x, name = a["x"], a["axis_name"]
    tiled = bool(a.get("tiled", False))
    if invariant:  # all_gather_invariant's transpose: this device's slice (JAX's dynamic_slice)
        ax, idx = a.get("axis", 0), lax.axis_index(name)
        if tiled:
            n = x.shape[ax]
            return [lax.dynamic_slice_in_dim(g, idx * n, n, ax)]
        return [lax.dynamic_index_in_dim(g, idx, ax, keepdims=False)]
    if prim in ("psum", "pmean"):
        varying, unreduced = _vma(x)
        # over an axis x does not vary on, psum adds that many equal copies
        # (not of partial sums: it completes them)
        fixed = tuple(ax for ax in _names(name) if ax not in varying and ax not in unreduced)
        ct = g * _axes_size(fixed) if fixed else g
        return [ct / _axes_size(name) if prim == "pmean" else ct]
    if prim == "pvary":
        return [g]
    if prim == "all_gather":
        return [lax.psum_scatter(g, name, scatter_dimension=a.get("axis", 0), tiled=tiled)]
    if prim == "psum_scatter":
        return [lax.all_gather(g, name, axis=a.get("scatter_dimension", 0), tiled=tiled)]
    if prim == "ppermute":
        return [lax.ppermute(g, name, [(d, s) for s, d in a["perm"]])]
    return [lax.all_to_all(g, name, a["concat_axis"], a["split_axis"], tiled=tiled)]


def _cts(n, **by_position):
    """A rule's result list of n entries, from {position: cotangent}."""
    out = [None] * n
    for k, v in by_position.items():
        out[int(k[1:])] = v
    return out


def _slice_rule(g, out, a, n):
    x = a["operand"]
    strides = a.get("strides")
    if strides is not None and any(st != 1 for st in strides):
        raise InvalidArgument("grad: slice with strides other than 1 is not supported")
    pads = tuple((lo, dim - hi) for lo, hi, dim in zip(a["start_indices"], a["limit_indices"],
                                                       x.shape))
    return _cts(n, p0=_jnp().pad(g, pads))


def _pad_rule(g, out, a, n):
    """g without the padding: numpy's pad_width forms (an int, (lo, hi),
    one pair per axis) broadcast to a pair per axis."""
    x = a["array"]
    width = np.broadcast_to(np.asarray(a["pad_width"], dtype=np.int64), (len(x.shape), 2))
    return _cts(n, p0=g[tuple(slice(int(lo), int(lo) + d) for (lo, _), d in zip(width, x.shape))])


def _roll_rule(g, out, a, n):
    shift = a["shift"]
    neg = tuple(-s for s in shift) if isinstance(shift, (tuple, list)) else -shift
    return _cts(n, p0=_jnp().roll(g, neg, axis=a.get("axis")))


def _tile_rule(g, out, a, n):
    """The sum of g's tiles: g reshaped to (reps, size) pairs, summed over
    the reps."""
    jnp = _jnp()
    x = a["A"]
    reps = a["reps"]
    reps = (reps,) if isinstance(reps, numbers.Integral) else tuple(reps)
    shape = tuple(x.shape)
    rank = max(len(shape), len(reps))
    shape = (1,) * (rank - len(shape)) + shape
    reps = (1,) * (rank - len(reps)) + reps
    split = tuple(v for r, d in zip(reps, shape) for v in (r, d))
    c = jnp.sum(jnp.reshape(g, split), axis=tuple(range(0, 2 * rank, 2)))
    return _cts(n, p0=jnp.reshape(c, tuple(x.shape)))


def _dynamic_slice_rule(g, out, a, n):
    jnp = _jnp()
    x = a["operand"]
    z = _laid_like(jnp.zeros_like(x), x)
    return _cts(n, p0=jnp.dynamic_update_slice(z, g, a["start_indices"]))


def _dynamic_slice_in_dim_rule(g, out, a, n):
    """lax.dynamic_slice_in_dim: dynamic_slice's, the start on one axis."""
    jnp = _jnp()
    x = a["operand"]
    starts = [0] * len(x.shape)
    starts[a.get("axis", 0) % len(x.shape)] = a["start_index"]
    z = _laid_like(jnp.zeros_like(x), x)
    return _cts(n, p0=jnp.dynamic_update_slice(z, g, tuple(starts)))


def _dynamic_update_slice_rule(g, out, a, n):
    from . import lax
    jnp = _jnp()
    u = a["update"]
    starts = a["start_indices"]
    zu = jnp.zeros_like(u)
    return _cts(n, p0=jnp.dynamic_update_slice(g, zu, starts),
                p1=lax.dynamic_slice(g, starts, tuple(u.shape)))


def _rev_rule(g, out, a, n):
    return _cts(n, p0=_jnp().flip(g, tuple(a["dimensions"])))


_SHIFTS = {  # the ops that move, cut or repeat blocks: (g, out, bound args, n args)
    "slice": _slice_rule,
    "pad": _pad_rule,
    "roll": _roll_rule,
    "tile": _tile_rule,
    "dynamic_slice": _dynamic_slice_rule,
    "dynamic_slice_in_dim": _dynamic_slice_in_dim_rule,
    "dynamic_update_slice": _dynamic_update_slice_rule,
    "rev": _rev_rule,
}


def _rule(prim, g, out, args, kwargs):
    jnp = _jnp()
    if prim in ("+", "-", "*", "/", "**", "add", "subtract", "multiply", "divide", "power",
                "maximum", "minimum", "arctan2"):
        return _binary(prim, g, out, *args)
    if prim in ("@", "matmul", "dot"):
        return _matmul_rule("dot" if prim == "dot" else "matmul", g, out, *args, **kwargs)
    if prim in _COLLECTIVES:
        return _collective(prim, g, out, args, kwargs)
    if prim in _SHIFTS:
        return _SHIFTS[prim](g, out, _bind(prim, args, kwargs), len(args))
    if prim == "neg":
        return [-g]
    if prim in _UNARY:
        return [_UNARY[prim](g, out, args[0])]
    if prim == "getitem":
        return _getitem_rule(g, out, args[0], kwargs["key"])
    if prim in ("sum", "mean", "max", "min", "prod"):
        return _reduce_rule(prim, g, out, *args, **kwargs)
    if prim == "einsum":
        ops = list(args[1:])
        return [None] + [_einsum_ct(args[0], ops, g, k) if isinstance(o, Tracer) else None
                         for k, o in enumerate(ops)]
    x = args[0] if args else None
    if prim == "where":
        c = args[0]
        if any(_ur(g)):  # partial sums (or reduced): a select, linear in g
            z = _zeros_typed(g)
            return [None, jnp.where(c, g, z), jnp.where(c, z, g)]
        keep = jnp.astype(c, out.dtype)
        return [None, g * keep, g * (1 - keep)]
    if prim == "astype":
        # to an integer or bool: no derivative flows back (JAX's float0)
        return [g.astype(x.dtype) if _is_float(x) and _is_float(out) else None, None]
    if prim == "reshape":
        kw = _laid_out_as(x)
        u, r = _ur(g)
        if kw and (u or r):  # g's partial sums (or reduced axes) stay: reshape is linear
            kw = {"out_sharding": _padded(kw["out_sharding"], len(x.shape), unreduced=u,
                                          reduced=r)}
        return [jnp.reshape(g, tuple(x.shape), **kw), None]
    if prim == "squeeze":
        return [jnp.reshape(g, tuple(x.shape))]
    if prim == "expand_dims":
        ax = args[1] if len(args) > 1 else kwargs["axis"]
        return [jnp.squeeze(g, ax), None]
    if prim == "broadcast_to":
        return [_sum_to(g, x), None]
    if prim == "transpose":
        axes = args[1] if len(args) > 1 else kwargs.get("axes")
        n = len(x.shape)
        axes = tuple(reversed(range(n))) if axes is None else tuple(a % n for a in axes)
        return [jnp.transpose(g, tuple(int(i) for i in np.argsort(axes))), None]
    if prim in ("reshard", "with_sharding_constraint"):
        # to the operand's cotangent sharding (a reduced operand's is
        # unreduced: each device's block of g put in place, no data moved)
        spec = _ct_sharding(x)
        from ._core import P
        return [jnp.reshard(g, spec if spec is not None else P()), None]
    if prim == "take":
        return _take_rule(g, out, *args, **kwargs)
    if prim == "segment_sum":
        return _segment_sum_rule(g, out, *args, **kwargs)
    if prim in ("scatter", "scatter_add", "scatter_mul"):
        return _scatter_rule(prim, g, out, *args, **kwargs)
    if prim in ("scatter_min", "scatter_max"):
        return _scatter_extremal_rule(prim, g, out, *args, **kwargs)
    if prim == "take_along_axis":
        return _take_along_rule(g, out, *args, **kwargs)
    if prim == "sort":  # sort(x) is x taken along argsort(x) (both stable)
        a = _bind(prim, args, kwargs)
        axis = a.get("axis")
        axis = len(x.shape) - 1 if axis is None else axis
        idx = jnp.argsort(x, axis=axis)
        return [_take_along_rule(g, out, x, idx, axis=axis, mode="clip")[0]] + \
            [None] * (len(args) - 1)
    if prim == "concatenate":
        arrays = args[0]
        axis = args[1] if len(args) > 1 else kwargs.get("axis", 0)
        axis %= len(out.shape)
        cts, at = [], 0
        for a in arrays:
            n = a.shape[axis]
            key = tuple(slice(None) for _ in range(axis)) + (slice(at, at + n),)
            cts.append(g[key] if isinstance(a, Tracer) else None)
            at += n
        return [cts]
    if prim in ("cumsum", "cumprod", "cummax", "cummin"):
        return _cumulative_rule(prim, g, out, *args, **kwargs)
    raise InvalidArgument(f"grad: shmap has no differentiation rule for '{prim}'")


def _taped(b, leaves, thunk):
    """thunk() traced with a tape on (a level of its own), leaves (traced
    values) the ones differentiated: (its result, the tape, the names of
    the values that depend on leaves). That tape records nothing
    afterwards."""
    lv = _push(b, {t.name for t in leaves if _is_float(t)})
    try:
        res = thunk()
    finally:
        _pop(b, lv)
    return res, lv.tape, lv.active


def _left_out(b):
    """spec -> the Manual mesh axes of shard_map body b that spec does not
    name, in mesh order."""
    manual = b.manual_axes or frozenset(b.mesh.axis_names)

    def left(sp):
        named = set(_spec_axes(sp))
        return tuple(a for a in b.mesh.axis_names if a in manual and a not in named)
    return left


def _call_vjp(fn, args, in_specs, outs, gs, out_specs=None):
    """The cotangents of the arguments of a shard_map function called from
    the jit being differentiated: a second shard_map function of the
    program, taking the arguments and the results' cotangents (under the
    in_specs and out_specs), runs the body again with a tape and then its
    backward pass block by block (the collectives' transposes included),
    and returns the arguments' cotangents under the in_specs, as JAX's
    transpose of shard_map does (here recomputing what JAX keeps)."""
    from ._trace import _flatten, _param_names
    b = _builder()
    n = len(args)
    # cotangents are never partial sums: where a spec is unreduced, its
    # cotangent's is not (JAX's reduced; shmap has no reduced types)
    ct_in_specs = [_ct_spec(sp) for sp in in_specs]
    key = ("vjp", id(fn), tuple(a.type for a in args))
    if key not in b.defined:
        names = _param_names(fn.f, n)
        taken = set(names)
        ct_names = []
        for k in range(len(outs)):
            nm = f"ct{k}"
            while nm in taken:
                nm += "_"
            taken.add(nm)
            ct_names.append(nm)

        def body(tracers):
            xs, cs = tracers[:n], tracers[n:]
            res, tape, active = _taped(_builder(), xs, lambda: fn.f(*xs))
            res = _flatten(res, fn.__name__)[0]  # its results (a pytree) as the call's
            if fn.check_vma:
                return _backward(tape, active, _seeds(res, cs, active), xs)
            # check_vma=False: no varying axes tell the backward pass where to
            # sum, so (JAX's shard_map transpose without check_vma) each result's
            # cotangent is divided by the size of the axes its out_spec leaves
            # out, and each argument's summed over those its in_spec leaves out
            from . import lax
            from ._trace import _axes_size
            left = _left_out(_builder())
            cs = [ct / _axes_size(left(sp)) if left(sp) else ct
                  for ct, sp in zip(cs, list(out_specs or fn._out_specs(len(outs))))]
            cts = _backward(tape, active, _seeds(res, cs, active), xs)
            return [lax.psum(ct, left(sp) if len(left(sp)) > 1 else left(sp)[0]) if left(sp)
                    else ct for ct, sp in zip(cts, in_specs)]
        all_specs = list(in_specs) + [_ct_spec(sp) for sp in
                                      list(out_specs or fn._out_specs(len(outs)))]
        b.defined[key] = fn._define(b, fn._name + "_vjp", list(args) + list(outs), all_specs,
                                    names + ct_names, body, out_specs=ct_in_specs)
        # the backward as a shard_map function of its own (its body: body), so
        # that an outer grad differentiates its call as any other's
        from ._trace import _Traced

        def backward(*ts):
            return body(list(ts))
        backward.__name__ = f"{fn.__name__}_vjp"
        b.defined[("vjp_fn",) + key[1:]] = (_Traced(
            backward, "shard_map", fn.mesh, tuple(all_specs), tuple(ct_in_specs), fn.check_vma,
            axis_names=fn.axis_names), fn, tuple(all_specs))
    fname, nres, extra, _ = b.defined[key]
    bfn, _, all_specs = b.defined[("vjp_fn",) + key[1:]]
    if extra:  # what the body closes over may differ at the next call: traced again then
        del b.defined[key]
    call = f"{fname}({', '.join([a.name for a in list(args) + list(gs)] + extra)})"
    ops = tuple(args) + tuple(gs)  # an outer grad's tape records the call (a second order)
    kw = {"fn": bfn, "in_specs": all_specs, "out_specs": tuple(ct_in_specs)}
    if extra and any(nm in lv.active for lv in _levels(b) if not lv.paused for nm in extra):
        kw = None  # closing over a differentiated value: refused if an outer grad records it
    res = b.emit(call, "call" if kw else "vjp", ops, kw) if nres == 1 else \
        b.emit_multi(call, nres, "call" if kw else "vjp", ops, kw)
    return list(res) if isinstance(res, tuple) else [res]


def _ct_spec(sp):
    """The spec (or pytree of specs) of the cotangent of a value of spec
    sp: JAX's to_ct_spec, its unreduced and reduced axes swapped."""
    from ._core import P

    def plain(x):
        if isinstance(x, PartitionSpec) and (x.unreduced or x.reduced):
            return P(*x, unreduced=x.reduced, reduced=x.unreduced)
        return x
    return _tree_build(sp, iter(plain(x) for x, _ in _tree_leaves(sp, "s")))


def _seeds(outs, cts, active):
    """The cotangents of the results outs (name -> value, laid out as
    each; one result returned twice gets their sum)."""
    seeds = {}
    for o, c in zip(outs, cts):
        if isinstance(o, Tracer) and o.name in active:
            c = _laid_like(c, o)
            seeds[o.name] = seeds[o.name] + c if o.name in seeds else c
    return seeds


def _backward(tape, active, seeds, leaves):
    """The cotangents of leaves (traced values) from seeds, the cotangents
    of the results (name -> value), through the ops of tape; active: the
    names of the values that depend on the leaves."""
    jnp = _jnp()
    ct = dict(seeds)
    for prim, args, kwargs, res in reversed(tape):
        if prim in ("call", "custom"):
            outs = res if isinstance(res, tuple) else (res,)
            gs = [ct.pop(o.name, None) if o is not None else None for o in outs]
            if all(g is None for g in gs):
                continue
            gs = [g if g is not None or o is None else _laid_like(jnp.zeros_like(o), o)
                  for g, o in zip(gs, outs)]
            cts = kwargs["backward"](gs) if prim == "custom" else \
                _call_vjp(kwargs["fn"], args, kwargs["in_specs"], outs, gs,
                          kwargs.get("out_specs"))
        else:
            g = ct.pop(res.name, None)
            if g is None:
                continue
            cts = _rule(prim, g, res, args, kwargs)
        flat_args, flat_cts = [], []
        for a, c in zip(args, cts):
            if isinstance(a, (list, tuple)) and isinstance(c, list):
                flat_args += list(a)
                flat_cts += c
            else:
                flat_args.append(a)
                flat_cts.append(c)
        for a, c in zip(flat_args, flat_cts):
            if c is None or not isinstance(a, Tracer) or a.name not in active:
                continue
            # an elementwise op's cotangents have its result's shape (then
            # summed to the operand's); every other rule's, its operand's
            same = prim not in _ELEMENTWISE or isinstance(res, tuple)
            shape = a.shape if same else res.shape
            dtype = a.dtype if prim in ("astype", "call", "custom") else \
                (res[0] if isinstance(res, tuple) else res).dtype
            c = _laid_like(_sum_to(c, a, shape, dtype), a)
            ct[a.name] = ct[a.name] + c if a.name in ct else c
    return [ct[t.name] if t.name in ct else _laid_like(jnp.zeros_like(t), t) for t in leaves]


def _as_traced(v):
    """A differentiated leaf as a traced value."""
    if isinstance(v, Tracer):
        return v
    from ._core import _dtype_name
    if isinstance(v, Array):  # closed over by the jit being traced
        return Tracer(_builder().capture(v), v.type, _dtype_name(v.dtype), v.shape)
    if isinstance(v, np.ndarray) or isinstance(v, numbers.Real):
        a = np.asarray(v, dtype=np.float32 if isinstance(v, numbers.Real) else None)
        if a.ndim == 0:
            return _call_op("full", (), float(a), dtype=a.dtype)
        from ._trace import _constant
        return _constant(a)
    raise InvalidArgument(f"grad: cannot differentiate with respect to a "
                          f"{type(v).__name__}")


def _copy(t):
    """t as a value of its own: t + 0, or a reshard to its own type where t
    holds partial sums (adding 0 to them is refused, as JAX's add)."""
    from ._core import P
    unreduced = _jnp()._unreduced_of(t)
    if not unreduced:
        return t + 0
    spec = tuple(_spec(t) or ())
    return _jnp().reshard(t, P(*spec, *[None] * (len(t.shape) - len(spec)),
                               unreduced=unreduced))


def _diff_args(args, nums, who):
    """args with the leaves of those at nums traced, and those leaves. A
    leaf that is a value of the program already (a traced value, an Array)
    is differentiated as a copy of its own, so that the function sees the
    argument apart from any other use of the same value (a closure over
    it, an outer grad's variable: JAX's distinct tracers)."""
    args = list(args)
    flat = []
    for k in nums:
        leaves = [_copy(_as_traced(v)) if isinstance(v, (Tracer, Array)) and _is_float(v) else
                  _as_traced(v) for v, _ in _tree_leaves(args[k], "a")]
        for t in leaves:
            if np.dtype(t.dtype).kind != "f":
                raise InvalidArgument(f"{who} requires real- or complex-valued inputs (input "
                                      f"dtype that is a sub-dtype of np.inexact), but got "
                                      f"{np.dtype(t.dtype).name}. If you want to use "
                                      f"Boolean- or integer-valued inputs, use vjp or set "
                                      f"allow_int to True.")
        args[k] = _tree_build(args[k], iter(leaves))
        flat += leaves
    return args, flat


def _split_aux(res, has_aux, who):
    if not has_aux:
        return res, None
    if not (isinstance(res, (tuple, list)) and len(res) == 2):
        raise InvalidArgument(f"{who} with has_aux=True needs the function to return a pair "
                              f"(output, aux)")
    return res[0], res[1]


def _argnums(argnums, nargs):
    """(argnums is one int, the argument positions it names), with JAX's
    sentence for a position past the arguments."""
    single = isinstance(argnums, int)
    nums = (argnums,) if single else tuple(argnums)
    for k in nums:
        if not -nargs <= k < nargs:
            raise InvalidArgument(f"differentiating with respect to argnums={argnums} requires "
                                  f"at least {k + 1} positional arguments to be passed by the "
                                  f"caller, but got only {nargs} positional arguments.")
    return single, tuple(k % nargs for k in nums)


def _grad_call(fun, argnums, has_aux, with_value, args, kwargs):
    b = _builder()
    single, nums = _argnums(argnums, len(args))
    args, flat = _diff_args(args, nums, "grad")
    from . import _vmap
    batch = _vmap.innermost()  # inside vmap: (its level, its size), else None
    if batch is not None:
        # per-example gradients (as JAX's vmap of grad): every differentiated
        # value is batched, and the tape holds the batched ops
        flat = [t if isinstance(t, _vmap.BatchTracer) and t.level == batch[0] else
                _vmap.batch_of(t, *batch) for t in flat]
        it = iter(flat)
        args = [_tree_build(a, it) if k in nums else a for k, a in enumerate(args)]
    vals = [t.val if batch is not None else t for t in flat]
    res, tape, active = _taped(b, vals, lambda: fun(*args, **kwargs))
    out, aux = _split_aux(res, has_aux, "grad")
    if not isinstance(out, Tracer):
        raise InvalidArgument(f"grad: the function's output is a {type(out).__name__}, not "
                              f"a value computed from its arguments")
    if tuple(out.shape) != ():
        raise InvalidArgument(f"Gradient only defined for scalar-output functions. Output "
                              f"had shape: {tuple(out.shape)}.")
    if np.dtype(out.dtype).kind != "f":
        raise InvalidArgument(f"grad requires real-valued outputs (output dtype that is a "
                              f"sub-dtype of np.floating), but got "
                              f"{np.dtype(out.dtype).name}. For holomorphic "
                              f"differentiation, pass holomorphic=True. For differentiation "
                              f"of non-holomorphic functions involving complex outputs, use "
                              f"jax.vjp directly.")
    o = out.val if batch is not None and getattr(out, "level", None) == batch[0] else out
    seeds = _seeds([o], [_jnp().full(tuple(o.shape), 1.0, dtype=o.dtype)], active)
    cts = _backward(tape, active, seeds, vals)
    if batch is not None:
        cts = [_vmap.BatchTracer(c, batch[1], batch[0]) for c in cts]
    cts = iter(cts)
    grads = tuple(_tree_build(args[k], cts) for k in nums)
    g = grads[0] if single else grads
    if with_value:
        return ((out, aux) if has_aux else out), g
    return (g, aux) if has_aux else g


def vjp(fun, *primals, has_aux=False):
    """jax.vjp inside a traced function: (fun(*primals), vjp_fn), where
    vjp_fn(cotangent) returns the primals' cotangents (a tuple, one per
    primal, pytrees as they are) for a cotangent of fun's output (its
    structure, each leaf of its leaf's shape); with has_aux, (out, vjp_fn,
    aux). vjp_fn traces into the same program, and may be called more than
    once. Outside a traced function (at once): fun runs as a jit, and each
    call of vjp_fn as a jit of fun's vjp taking the primals and the
    cotangent (fun traced again; nothing is kept between them)."""
    b = getattr(_state, "builder", None)
    if b is None:
        return _vjp_at_once(fun, primals, has_aux)
    args, flat = _diff_args(primals, range(len(primals)), "vjp")
    from . import _vmap
    batch = _vmap.innermost()  # inside vmap: the tape holds the batched ops, as grad's
    if batch is not None:
        flat = [t if isinstance(t, _vmap.BatchTracer) and t.level == batch[0] else
                _vmap.batch_of(t, *batch) for t in flat]
        it = iter(flat)
        args = [_tree_build(a, it) for a in args]
    vals = [t.val if batch is not None else t for t in flat]
    res, tape, active = _taped(b, vals, lambda: fun(*args))
    out, aux = _split_aux(res, has_aux, "vjp")
    out_leaves = [v for v, _ in _tree_leaves(out, "o")]
    from ._trace import _tree_sig

    def raw(v):
        """A value of this vmap as its batched value (the tape's terms)."""
        if batch is None:
            return v
        if not (isinstance(v, _vmap.BatchTracer) and v.level == batch[0]):
            v = _vmap.batch_of(v, *batch)
        return v.val

    def vjp_fn(ct):
        if _builder() is not b:
            raise InvalidArgument("vjp_fn: call it in the traced function that called vjp")
        if _tree_sig(ct) != _tree_sig(out):
            raise InvalidArgument("vjp_fn: the cotangent has another structure than the output")
        cts = [v for v, _ in _tree_leaves(ct, "c")]
        for o, c in zip(out_leaves, cts):
            if isinstance(o, Tracer) and tuple(getattr(c, "shape", ())) != tuple(o.shape):
                raise InvalidArgument(f"vjp_fn: a cotangent of shape {tuple(c.shape)} for an "
                                      f"output of shape {tuple(o.shape)}")
        outs = [raw(o) if isinstance(o, Tracer) else o for o in out_leaves]
        got = _backward(tape, active, _seeds(outs, [raw(c) for c in cts], active), vals)
        if batch is not None:
            got = [_vmap.BatchTracer(g, batch[1], batch[0]) for g in got]
        got = iter(got)
        return tuple(_tree_build(a, got) for a in args)
    return (out, vjp_fn, aux) if has_aux else (out, vjp_fn)


def _vjp_at_once(fun, primals, has_aux):
    """vjp outside a traced function (JAX's eager vjp): fun(*primals) as a
    jit, and vjp_fn a jit of the traced vjp's pullback."""
    n = len(primals)
    res = jit(fun)(*primals)

    def pullback(*xs):
        return vjp(fun, *xs[:n], has_aux=has_aux)[1](xs[n])

    def vjp_fn(ct):
        return jit(pullback)(*primals, ct)
    if has_aux:
        out, aux = res
        return out, vjp_fn, aux
    return res, vjp_fn


def _jvp_check(primals, tangents):
    """JAX's checks of jvp's arguments, with its sentences."""
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError("primal and tangent arguments to jax.jvp must be tuples or lists; "
                        f"found {type(primals).__name__} and {type(tangents).__name__}.")
    from ._trace import _tree_sig
    if _tree_sig(tuple(primals)) != _tree_sig(tuple(tangents)):
        raise TypeError("primal and tangent arguments to jax.jvp must have the same tree "
                        f"structure; primals have tree structure {_tree_sig(tuple(primals))} "
                        f"whereas tangents have tree structure {_tree_sig(tuple(tangents))}.")
    for (p, _), (t, _) in zip(_tree_leaves(tuple(primals), "p"), _tree_leaves(tuple(tangents),
                                                                                 "t")):
        if np.shape(p) != np.shape(t):
            raise ValueError("jvp called with different primal and tangent shapes;"
                             f"Got primal shape {np.shape(p)} and tangent shape as "
                             f"{np.shape(t)}")


def _linearized(fun, primals, has_aux):
    """(out, the JVP as a function of the tangents, aux): no forward mode
    here, so the JVP is the transpose of fun's pullback, taken as the VJP
    of vjp_fn (linear in its cotangent) at a zero cotangent; grad's levels
    nest, so the same program holds both. Values are JAX's; the work is
    that of two backward passes."""
    jnp = _jnp()
    if has_aux:
        out, pullback, aux = vjp(fun, *primals, has_aux=True)
    else:
        (out, pullback), aux = vjp(fun, *primals), None
    zeros = _tree_build(out, iter(jnp.zeros_like(v) if isinstance(v, Tracer) else 0.0 * v
                                  for v, _ in _tree_leaves(out, "o")))
    _, transpose = vjp(pullback, zeros)

    def f_jvp(*tangents):
        return transpose(tuple(tangents))[0]
    return out, f_jvp, aux


def _as_shard_map(fun):
    """fun, a shard_map function or a jit of one (nothing else in it), as
    that shard_map function; else None."""
    from ._trace import _Traced
    while isinstance(fun, _Traced) and fun.kind == "jit" and fun.out_shardings is None and \
            not fun.static and isinstance(fun.f, _Traced):
        fun = fun.f
    return fun if isinstance(fun, _Traced) and fun.kind == "shard_map" else None


def _shard_map_jvp(t, primals, tangents):
    """jvp of shard_map function t, as JAX's jvp rule of shard_map: a
    shard_map of the jvp of its body, the tangents split as the primals
    (their in_specs), the output tangents laid out as the outputs."""
    from ._trace import _INFER, _Traced
    specs = t.in_specs
    if specs is _INFER or specs is None:
        raise InvalidArgument(f"jvp of the shard_map function {t.__name__}: give its in_specs")
    specs = (specs,) * len(primals) if isinstance(specs, PartitionSpec) else tuple(specs)
    n = len(primals)

    def body(*xs):
        return jvp(t.f, xs[:n], xs[n:])
    body.__name__ = f"{t.__name__}_jvp"
    g = _Traced(body, "shard_map", t.mesh, specs + specs, (t.out_specs, t.out_specs),
                t.check_vma, axis_names=t.axis_names)
    out, tan = g(*primals, *tangents)
    return out, tan


def jvp(fun, primals, tangents, has_aux=False):
    """jax.jvp: (fun(*primals), the Jacobian-vector product along
    tangents) (and aux), with JAX's checks. Computed as the transpose of
    the pullback (see _linearized): the values JAX's forward mode gives;
    of a shard_map function, inside its body (_shard_map_jvp)."""
    _jvp_check(primals, tangents)
    if getattr(_state, "builder", None) is None:  # at once: as a jit of the call
        return jit(lambda p, t: jvp(fun, p, t, has_aux))(tuple(primals), tuple(tangents))
    sm = _as_shard_map(fun)
    if sm is not None and not has_aux:
        return _shard_map_jvp(sm, tuple(primals), tuple(tangents))
    out, f_jvp, aux = _linearized(fun, tuple(primals), has_aux)
    t = f_jvp(*tangents)
    return (out, t, aux) if has_aux else (out, t)


def linearize(fun, *primals, has_aux=False):
    """jax.linearize inside a traced function: (fun(*primals), f_jvp) with
    f_jvp(*tangents) the JVP at primals (and aux); as jvp."""
    if getattr(_state, "builder", None) is None:  # at once: the value, then a jvp per call
        res = jit(fun)(*primals)

        def f_jvp(*tangents):
            return jvp(fun, tuple(primals), tuple(tangents), has_aux=has_aux)[1]
        return (res[0], f_jvp, res[1]) if has_aux else (res, f_jvp)
    sm = _as_shard_map(fun)
    if sm is not None and not has_aux:
        out = sm(*primals)  # the JVP: a shard_map of the body's jvp at each call
        return out, lambda *tangents: _shard_map_jvp(sm, tuple(primals), tangents)[1]
    out, f_jvp, aux = _linearized(fun, primals, has_aux)
    return (out, f_jvp, aux) if has_aux else (out, f_jvp)


def _transform(fun, argnums, has_aux, with_value):
    def call(*args, **kwargs):
        if getattr(_state, "builder", None) is None:  # at once: as a jit of the call
            return jit(call)(*args, **kwargs)
        return _grad_call(fun, argnums, has_aux, with_value, args, kwargs)
    call.__name__ = getattr(fun, "__name__", "f")
    call.__doc__ = fun.__doc__
    return call


def grad(fun, argnums=0, has_aux=False):
    """jax.grad: a function that returns the gradient of fun (a scalar) with
    respect to the arguments argnums (an int or a tuple; pytrees of arrays).
    Traced into the jit it is called in; called on Arrays, it runs now."""
    return _transform(fun, argnums, has_aux, False)


def value_and_grad(fun, argnums=0, has_aux=False):
    """jax.value_and_grad: (fun's value, its gradient), as grad."""
    return _transform(fun, argnums, has_aux, True)


def stop_gradient(x):
    """jax.lax.stop_gradient: x's value, through which grad sees no
    dependence on what x was computed from."""
    if not isinstance(x, Tracer):
        if _is_tree(x):  # a pytree: each leaf
            return _tree_build(x, iter(stop_gradient(v) for v, _ in _tree_leaves(x, "x")))
        return x
    on = [lv for lv in _levels(_builder()) if not lv.paused]
    if not any(x.name in lv.active for lv in on):
        return x
    with _paused(on):
        return x + 0  # a new value, off the tapes


def checkpoint(fun=None, *, prevent_cse=True, policy=None, static_argnums=()):
    """jax.checkpoint (jax.remat): fun as it is. JAX recomputes the
    function's values in the backward pass instead of keeping them, which
    changes memory, never results; shmap's backward pass reads the forward
    values from the program, so there is nothing to recompute. Taken so
    that model code written with it runs."""
    if fun is None:
        return lambda f: f
    return fun


remat = checkpoint


def checkpoint_name(x, name):
    """jax.ad_checkpoint.checkpoint_name: x, named for a policy of
    checkpoint (which keeps every value here, see checkpoint)."""
    return x


def _names_policy(*names):
    return lambda *_, **__: False


def _both_policies(policy_1, policy_2):
    return lambda *a, **k: policy_1(*a, **k) or policy_2(*a, **k)


# jax.checkpoint_policies: the policies checkpoint takes (policy=). shmap's
# backward pass keeps every forward value, whatever the policy says.
checkpoint_policies = types.SimpleNamespace(
    everything_saveable=lambda *_, **__: True,
    nothing_saveable=lambda *_, **__: False,
    dots_saveable=lambda *_, **__: False,
    checkpoint_dots=lambda *_, **__: False,
    dots_with_no_batch_dims_saveable=lambda *_, **__: False,
    checkpoint_dots_with_no_batch_dims=lambda *_, **__: False,
    offload_dot_with_no_batch_dims=lambda src, dst: (lambda *_, **__: False),
    save_anything_except_these_names=lambda *names: (lambda *_, **__: True),
    save_any_names_but_these=_names_policy,
    save_only_these_names=_names_policy,
    save_from_both_policies=_both_policies,
    save_and_offload_only_these_names=lambda **kw: (lambda *_, **__: False))


# ---- custom_vjp and custom_jvp ----------------------------------------------


def _fname(f):
    return getattr(f, "__name__", None) or type(f).__name__


def _resolve(fun, args, kwargs, who):
    """The arguments as positional ones (JAX's resolve_kwargs)."""
    if not kwargs:
        return tuple(args)
    try:
        bound = inspect.signature(fun).bind(*args, **kwargs)
        bound.apply_defaults()
    except (TypeError, ValueError) as e:
        raise InvalidArgument(f"The input arguments to the {who}-decorated function "
                              f"{_fname(fun)} could not be resolved to positional-only "
                              f"arguments. Binding failed with the error:\n{e}") from None
    if bound.kwargs:
        raise InvalidArgument(f"The input arguments to the {who}-decorated function "
                              f"{_fname(fun)} could not be resolved to positional-only "
                              f"arguments: keyword-only parameters "
                              f"{sorted(bound.kwargs)}")
    return tuple(bound.args)


def _nondiff(fun, nums, names):
    """nondiff_argnums and nondiff_argnames as sorted positions."""
    out = {int(n) for n in ((nums,) if isinstance(nums, int) else nums)}
    if names:
        params = list(inspect.signature(fun).parameters)
        out |= {params.index(n) for n in ((names,) if isinstance(names, str) else names)}
    return tuple(sorted(out))


def _at_once(fn, args, static):
    """fn(*args) outside a trace: as a jit of the call (the static
    arguments closed over)."""
    dyn = [a for i, a in enumerate(args) if i not in static]

    def call(*d):
        it = iter(d)
        return fn(*[args[i] if i in static else next(it) for i in range(len(args))])
    call.__name__ = _fname(fn)
    return jit(call)(*dyn)


def _layers(v):
    """The vmaps a value is batched by, the innermost vmap's first: [(level,
    size)] (empty for a value of no vmap)."""
    from ._vmap import BatchTracer
    out = []
    while isinstance(v, BatchTracer):
        out.append((v.level, v.nbatch))
        v = v.val
    return out


def _plain(v):
    """The traced value of the program behind a value of vmaps (the one the
    tapes hold)."""
    from ._vmap import BatchTracer
    while isinstance(v, BatchTracer):
        v = v.val
    return v


def _wrap(g, layers):
    """Program value g as a value of the vmaps of layers."""
    from ._vmap import BatchTracer
    for level, size in reversed(layers):
        g = BatchTracer(g, size, level)
    return g


def _relayer(r, want):
    """r (a value of an example, batched by some vmaps) batched by exactly
    the vmaps of want: summed over a batch want does not have (the
    transpose of the broadcast that made it), repeated along one r lacks."""
    from ._vmap import BatchTracer, batch_of
    top = r.level if isinstance(r, BatchTracer) else -1
    wtop = want[0][0] if want else -1
    if top > wtop:
        return _relayer(_jnp().sum(r.val, axis=0), want)
    if wtop > top:
        return batch_of(_relayer(r, want[1:]), *want[0])
    if top < 0:
        return r
    return BatchTracer(_relayer(r.val, want[1:]), r.nbatch, r.level)


def _target(b, leaves):
    """The innermost level (its index) recording now at which one of leaves
    depends on what it differentiates, or None: the one a custom rule
    stands in for (outer ones differentiate the rule's own ops)."""
    names = {t.name for t in leaves if isinstance(t, Tracer)}
    lvs = _levels(b)
    for k in range(len(lvs) - 1, -1, -1):
        if not lvs[k].paused and names & lvs[k].active:
            return k
    return None


def _fresh(vals, n0):
    """vals, each that is not a value emitted since the builder's counter
    was n0 (an argument, a value from before, returned as it is) replaced
    by a copy: a custom rule's result is a value of its own on the tape."""
    def new(v):
        m = re.fullmatch(r"v(\d+)", v.name)
        return m is not None and int(m.group(1)) >= n0
    return [v + 0 if isinstance(v, Tracer) and not new(v) else v for v in vals]


def _leaf_cts(r, arg, who):
    """The cotangent leaves of argument arg from r, a bwd rule's entry for
    it: None for zeros (of the whole subtree), a pytree of arg's structure
    (None at a subtree for its zeros)."""
    if r is None:
        return [None] * len(_tree_leaves(arg, "a"))
    if _is_tree(arg):
        if isinstance(arg, dict) and isinstance(r, dict) and sorted(arg) == sorted(r):
            return [c for k in sorted(arg) for c in _leaf_cts(r[k], arg[k], who)]
        if type(arg) in (tuple, list) and type(r) in (tuple, list) and len(r) == len(arg):
            return [c for e, a in zip(r, arg) for c in _leaf_cts(e, a, who)]
        raise ValueError
    if _is_tree(r):
        raise ValueError
    return [r]


def _custom_ct(c, v, name, k):
    """A custom rule's cotangent c for input leaf v (the k-th), as a value
    of the program (v's vmaps undone), or None. Its shape, and in a
    shard_map body its varying axes, must be v's (JAX's check of a bwd
    rule's output, a ValueError)."""
    from . import _vmap
    if c is None or not isinstance(v, Tracer) or not _is_float(v):
        return None
    jnp = _jnp()
    if not isinstance(c, Tracer):
        c = np.asarray(c, dtype=v.dtype)
        c = jnp.full(tuple(v.shape), float(c), dtype=v.dtype) if c.ndim == 0 else _as_traced(c)
    b = _builder()
    why = "" if tuple(c.shape) != tuple(v.shape) else None
    if why is None and b.kind == "shard_map" and getattr(b, "check_vma", True) and \
            not isinstance(c, _vmap.BatchTracer) and not isinstance(v, _vmap.BatchTracer) and \
            _vma(c)[0] != _vma(v)[0]:
        why = ", so the manual axis types do not match"
    if why is not None:
        raise InvalidArgument(f"Custom VJP bwd rule attached to {name} must produce an output "
                              f"with the same type as the args tuple of the primal function, "
                              f"but at output[{k}] the bwd rule produced an output of type "
                              f"{c.type} corresponding to an input of type {v.type}{why}")
    return _plain(_relayer(c, _layers(v)))


def _record_custom(b, k, leaves, outs, backward):
    """One tape entry at level k for a custom rule's call: inputs leaves,
    results outs; backward(cotangents of outs) -> cotangents of leaves."""
    ins = tuple(_plain(v) if isinstance(v, Tracer) else None for v in leaves)
    res = tuple(_plain(o) if isinstance(o, Tracer) else None for o in outs)
    lv = _levels(b)[k]
    lv.active.update(o.name for o in res if o is not None and _is_float(o))
    lv.tape.append(("custom", ins, {"backward": backward}, res))


class custom_vjp:
    """jax.custom_vjp: f with the reverse-mode rule given by f.defvjp(fwd,
    bwd). fwd(*args) -> (output, residuals); bwd(*nondiff_args, residuals,
    output cotangent) -> a tuple of cotangents, one per other argument
    (None: zeros; pytrees as the arguments). Under grad / vjp a call is one
    entry of the tape: its forward is fwd's (its ops not differentiated),
    its backward bwd on the residuals, run when the backward pass reaches
    it. Otherwise (no grad following the arguments, vmap alone) it is f's
    body; called on Arrays, it runs now as a jit."""

    def __init__(self, fun, nondiff_argnums=(), nondiff_argnames=()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = _nondiff(fun, nondiff_argnums, nondiff_argnames)
        self.fwd = self.bwd = None

    def defvjp(self, fwd, bwd, symbolic_zeros=False, optimize_remat=False):
        if symbolic_zeros:
            raise InvalidArgument("custom_vjp: symbolic_zeros=True is not supported")
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args, **kwargs):
        name = _fname(self.fun)
        if self.fwd is None or self.bwd is None:
            raise InvalidArgument(f"No VJP defined for custom_vjp function {name} using "
                                  f"defvjp.")
        args = _resolve(self.fun, args, kwargs, "custom_vjp")
        nd = self.nondiff_argnums
        if getattr(_state, "builder", None) is None:
            return _at_once(self, args, nd)
        for i in nd:
            if any(isinstance(v, Tracer) for v, _ in _tree_leaves(args[i], "a")):
                raise InvalidArgument(
                    "Found a JAX Tracer object passed as an argument to a custom_vjp function "
                    "in a position indicated by nondiff_argnums as non-differentiable. Tracers "
                    "cannot be passed as non-differentiable arguments to custom_vjp functions; "
                    "instead, nondiff_argnums should only be used for arguments that can't be "
                    "or contain JAX tracers, e.g. function-valued arguments. In particular, "
                    "array-valued arguments should typically not be indicated as "
                    "nondiff_argnums.")
        b = _builder()
        diff = [i for i in range(len(args)) if i not in nd]
        leaves = [v for i in diff for v, _ in _tree_leaves(args[i], "a")]
        k = _target(b, leaves)
        if k is None:
            return self.fun(*args)
        n0 = b.n
        with _paused(_levels(b)[k:]):
            pair = self.fwd(*args)
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
                raise InvalidArgument(
                    f"Custom VJP fwd rule {_fname(self.fwd)} for function {name} must produce "
                    f"a pair (list or tuple of length two) where the first element represents "
                    f"the primal output (equal to those of the custom_vjp-decorated function "
                    f"{name}) and the second element represents residuals (i.e. values stored "
                    f"from the forward pass for use on the backward pass), but instead of a "
                    f"pair the fwd rule {_fname(self.fwd)} produced {pair}.")
            out, residuals = pair
            outs = _fresh([v for v, _ in _tree_leaves(out, "o")], n0)
        out = _tree_build(out, iter(outs))
        statics = [args[i] for i in nd]
        bwd = self.bwd

        def backward(gs):
            cts = [_wrap(g, _layers(o)) if g is not None else None for g, o in zip(gs, outs)]
            r = bwd(*statics, residuals, _tree_build(out, iter(cts)))
            if isinstance(r, list) and len(r) == len(diff):
                r = tuple(r)
            try:
                if not (isinstance(r, tuple) and len(r) == len(diff)):
                    raise ValueError
                flat = [c for i, ri in zip(diff, r) for c in _leaf_cts(ri, args[i], name)]
            except ValueError:
                from .tree_util import tree_structure
                raise InvalidArgument(
                    f"Custom VJP bwd rule must produce an output with the same container "
                    f"(pytree) structure as the args tuple of the primal function, and in "
                    f"particular must produce a tuple of length equal to the number of "
                    f"arguments to the primal function, but got bwd output structure "
                    f"{tree_structure(r)} for primal input structure "
                    f"{tree_structure(tuple(args[i] for i in diff))}.") from None
            return [_custom_ct(c, v, name, k) for k, (c, v) in enumerate(zip(flat, leaves))]
        _record_custom(b, k, leaves, outs, backward)
        return out


class custom_jvp:
    """jax.custom_jvp: f with the derivative rule given by f.defjvp(jvp),
    jvp(*nondiff_args, primals, tangents) -> (primal output, tangent
    output), linear in the tangents (or f.defjvps, one rule per argument).
    shmap has reverse mode only: under grad / vjp the rule is linearised
    and transposed, as JAX does. The rule runs once in the forward pass on
    tangents that stand for variables (zeros), its ops on them recorded on
    a tape of their own; the call is one entry of grad's tape whose
    backward pulls the output's cotangent back through that tape (the
    transpose of the rule's linear map), and its output is the rule's
    primal output. Otherwise it is f's body; called on Arrays, it runs now
    as a jit."""

    def __init__(self, fun, nondiff_argnums=(), nondiff_argnames=()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = _nondiff(fun, nondiff_argnums, nondiff_argnames)
        self.jvp = None

    def defjvp(self, jvp, symbolic_zeros=False):
        """symbolic_zeros=True: JAX may pass SymbolicZero objects for the
        tangents known to be zero; shmap passes every tangent as zeros
        made (as JAX's shard_map does with its body's), which such a rule
        takes as it takes any tangent."""
        self.jvp = jvp
        self.symbolic_zeros = bool(symbolic_zeros)
        return jvp

    def defjvps(self, *jvps):
        """One rule per argument, jvp_k(tangent_k, primal_out, *primals) ->
        its part of the tangent output (None: the argument has none); the
        parts are summed."""
        if self.nondiff_argnums:
            raise InvalidArgument("Can't use ``defjvps`` with ``nondiff_argnums``.")

        def jvp(primals, tangents):
            out = self(*primals)
            parts = [rule(t, out, *primals) for t, rule in zip(tangents, jvps) if rule]
            leaves = [v for v, _ in _tree_leaves(out, "o")]
            total = [_jnp().zeros_like(v) if isinstance(v, Tracer) else 0.0 for v in leaves]
            for part in parts:
                total = [t + v for t, (v, _) in zip(total, _tree_leaves(part, "o"))]
            return out, _tree_build(out, iter(total))
        self.defjvp(jvp)

    def __call__(self, *args, **kwargs):
        name = _fname(self.fun)
        if self.jvp is None:
            raise InvalidArgument(f"No JVP defined for custom_jvp function {name} using "
                                  f"defjvp.")
        args = _resolve(self.fun, args, kwargs, "custom_jvp")
        nd = self.nondiff_argnums
        if getattr(_state, "builder", None) is None:
            return _at_once(self, args, nd)
        b = _builder()
        diff = [i for i in range(len(args)) if i not in nd]
        leaves = [v for i in diff for v, _ in _tree_leaves(args[i], "a")]
        k = _target(b, leaves)
        if k is None:
            return self.fun(*args)
        jnp = _jnp()
        statics = [stop_gradient(args[i]) for i in nd]
        n0 = b.n
        with _paused(_levels(b)[k:]):
            tans = []
            for v in leaves:
                if isinstance(v, Tracer):
                    p = _plain(v)
                    tans.append(_wrap(_laid_like(jnp.zeros_like(p), p), _layers(v)))
                else:
                    tans.append(np.zeros_like(v) if isinstance(v, np.ndarray) else 0.0)
            it = iter(tans)
            tangents = tuple(_tree_build(args[i], it) for i in diff)
            varying = [_plain(t) for t in tans if isinstance(t, Tracer) and _is_float(t)]
            sub = _push(b, {t.name for t in varying})
            try:
                pair = self.jvp(*statics, tuple(args[i] for i in diff), tangents)
                if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
                    raise InvalidArgument(
                        f"Custom JVP rule {_fname(self.jvp)} for function {name} must produce "
                        f"a pair (list or tuple of length two) representing primal and "
                        f"tangent outputs, but got {pair}.")
                out, tout = pair
                if _tree_sig(out) != _tree_sig(tout):
                    from .tree_util import tree_structure
                    raise InvalidArgument(
                        f"Custom JVP rule {_fname(self.jvp)} for function {name} must produce "
                        f"primal and tangent outputs with equal container (pytree) "
                        f"structures, but got {tree_structure(out)} and "
                        f"{tree_structure(tout)} respectively.")
                outs = [v for v, _ in _tree_leaves(out, "o")]
                touts = [_relayer(t, _layers(o)) if isinstance(t, Tracer) else None
                         for t, o in zip([v for v, _ in _tree_leaves(tout, "t")], outs)]
            finally:
                _pop(b, sub)
            outs = _fresh(outs, n0)

        def backward(gs):
            pairs = [(_plain(t), g) for t, g in zip(touts, gs)
                     if t is not None and g is not None]
            seeds = _seeds([t for t, _ in pairs], [g for _, g in pairs], sub.active)
            cts = iter(_backward(sub.tape, sub.active, seeds, varying))
            return [next(cts) if isinstance(t, Tracer) and _is_float(t) else None for t in tans]
        _record_custom(b, k, leaves, outs, backward)
        return _tree_build(out, iter(outs))


# ---- Jacobians and Hessians ---------------------------------------------------


def _reshape_first(v, lead):
    """v (n, *rest) reshaped to lead + rest, rest keeping its sharding."""
    jnp = _jnp()
    shape = tuple(lead) + tuple(v.shape[1:])
    if tuple(v.shape) == shape:
        return v
    if not _laid_out_as(v):
        return jnp.reshape(v, shape)
    from ._core import P
    spec = tuple(_spec(v) or ())
    spec = (spec + (None,) * len(v.shape))[1:len(v.shape)]
    return jnp.reshape(v, shape, out_sharding=P(*((None,) * len(lead) + spec)))


def _columns_layout(block, y, who):
    """A jacfwd block (y's shape + an argument's) laid out as JAX's: JAX
    pushes the columns of the identity (whole on every device) forward,
    so y's dimensions are sharded as y and the argument's not; the rows
    computed here (reverse mode) have jacrev's layout, the argument's
    dimensions sharded as its cotangent."""
    if who != "jacfwd" or not _laid_out_as(block):
        return block
    from ._core import P
    ys = tuple(_spec(y) or ())
    ys = ys + (None,) * (len(y.shape) - len(ys))
    return _jnp().reshard(block, P(*ys, *(None,) * (len(block.shape) - len(ys))))


def _jacobian(fun, argnums, has_aux, who, allow_int=False):
    """jacrev and jacfwd: vjp of fun at the arguments, then its pullback
    mapped by vmap over the rows of the identity (one per element of the
    output), as JAX's jacrev; each Jacobian block (an output leaf's shape
    followed by an input leaf's) cut from the rows."""
    def call(*args, **kwargs):
        if getattr(_state, "builder", None) is None:  # at once: as a jit of the call
            return jit(call)(*args, **kwargs)
        from . import _vmap
        jnp = _jnp()
        inside_vmap = _vmap.innermost() is not None
        single, nums = _argnums(argnums, len(args))
        for k in nums:
            for v, _ in _tree_leaves(args[k], "a"):
                kind = np.dtype(getattr(v, "dtype", np.float32)).kind
                if kind != "f" and not (allow_int and kind in "iub"):
                    name = np.dtype(v.dtype).name
                    raise InvalidArgument(
                        f"jacrev requires real- or complex-valued inputs (input dtype that is "
                        f"a sub-dtype of np.inexact), but got {name}. If you want to use "
                        f"Boolean- or integer-valued inputs, use vjp or set allow_int to True."
                        if who == "jacrev" else
                        f"jacfwd requires real-valued inputs (input dtype that is a sub-dtype "
                        f"of np.floating), but got {name}. For holomorphic differentiation, "
                        f"pass holomorphic=True. For differentiation of non-holomorphic "
                        f"functions involving complex inputs or integer inputs, use jax.jvp "
                        f"directly.")

        def partial_fun(*dyn):
            full = list(args)
            for k, v in zip(nums, dyn):
                full[k] = v
            return fun(*full, **kwargs)
        res = vjp(partial_fun, *[args[k] for k in nums], has_aux=has_aux)
        y, pull = res[0], res[1]
        ys = [v for v, _ in _tree_leaves(y, "y")]
        for v in ys:
            if not isinstance(v, Tracer) or not _is_float(v):
                raise InvalidArgument(
                    f"{who} requires real-valued outputs (output dtype that is a sub-dtype of "
                    f"np.floating), but got {np.dtype(getattr(v, 'dtype', type(v))).name}. "
                    f"For differentiation of functions with integer outputs, use jax.vjp "
                    f"directly.")
        sizes = [int(np.prod(v.shape)) for v in ys]
        m = sum(sizes)
        eye = jnp.eye(m, dtype=np.result_type(*[v.dtype for v in ys]))
        basis, at = [], 0
        for v, n in zip(ys, sizes):
            rows = eye if n == m else eye[:, at:at + n]
            basis.append(jnp.reshape(rows, (m,) + tuple(v.shape)) if tuple(v.shape) != (n,)
                         else rows)
            at += n
        if not inside_vmap:
            from ._vmap import vmap as vmap_
            jac = vmap_(pull)(_tree_build(y, iter(basis)))  # one per argument at nums
        else:  # under an outer vmap: the pullback row by row (m backward passes), stacked
            rows = [pull(_tree_build(y, iter(b[r] for b in basis))) for r in range(m)]
            per_row = [[v for v, _ in _tree_leaves(r, "j")] for r in rows]
            jac = _tree_build(rows[0], iter(jnp.stack([pr[i] for pr in per_row])
                                            for i in range(len(per_row[0]))))
        example = args[nums[0]] if single else tuple(args[k] for k in nums)
        cols = [v for v, _ in _tree_leaves(jac[0] if single else jac, "j")]
        blocks = []
        for v, n in zip(ys, sizes):
            at = sum(sizes[:len(blocks)])
            blocks.append(_tree_build(example, iter(
                _columns_layout(_reshape_first(col if n == m else col[at:at + n],
                                               tuple(v.shape)), v, who)
                for col in cols)))
        out = _tree_build(y, iter(blocks))
        return (out, res[2]) if has_aux else out
    call.__name__ = getattr(fun, "__name__", "f")
    call.__doc__ = fun.__doc__
    return call


def jacrev(fun, argnums=0, has_aux=False, holomorphic=False, allow_int=False):
    """jax.jacrev: the Jacobian of fun with respect to the arguments
    argnums, row by row in reverse mode (vjp's pullback vmapped over the
    identity's rows), as a pytree of the output's structure whose leaves
    are pytrees of the arguments' (output leaf shape + argument leaf
    shape)."""
    if holomorphic:
        raise InvalidArgument("jacrev: holomorphic=True (complex differentiation) is not "
                              "supported")
    return _jacobian(fun, argnums, has_aux, "jacrev", allow_int)


jacobian = jacrev


def jacfwd(fun, argnums=0, has_aux=False, holomorphic=False):
    """jax.jacfwd: the same Jacobian as jacrev (shmap has no forward mode:
    it is computed row by row in reverse mode; JAX computes it column by
    column, with the same values), laid out as JAX's (_columns_layout)."""
    if holomorphic:
        raise InvalidArgument("jacfwd: holomorphic=True (complex differentiation) is not "
                              "supported")
    return _jacobian(fun, argnums, has_aux, "jacfwd")


def hessian(fun, argnums=0, has_aux=False, holomorphic=False):
    """jax.hessian: jacfwd(jacrev(fun)), the second derivatives (a grad of
    a grad: the outer pass differentiates the inner backward pass's ops)."""
    return jacfwd(jacrev(fun, argnums, has_aux=has_aux, holomorphic=holomorphic), argnums,
                  has_aux=has_aux, holomorphic=holomorphic)


def custom_gradient(fun):
    """jax.custom_gradient: fun(*args) returns (value, vjp) with vjp(g) the
    cotangents of args; a custom_vjp whose rule calls fun again in the
    backward pass for its vjp (the closure is no residual here)."""
    f = custom_vjp(lambda *args: fun(*args)[0])

    def fwd(*args):
        return fun(*args)[0], args

    def bwd(args, g):
        ct = fun(*args)[1](g)
        return tuple(ct) if isinstance(ct, (tuple, list)) else (ct,)
    f.defvjp(fwd, bwd)
    return functools.wraps(fun)(f) if hasattr(f, "__dict__") else f


def linear_transpose(fun, *primals, reduce_axes=()):
    """jax.linear_transpose: the transpose of linear fun at primals' shapes
    (its pullback, as fun is linear)."""
    _, pullback = vjp(fun, *primals)
    return pullback


def closure_convert(fun, *example_args):
    """jax.closure_convert: (fun, []) — a traced function's closed-over
    values are its parameters already, so none is hoisted."""
    return fun, []
