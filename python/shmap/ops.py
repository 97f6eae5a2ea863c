"""jax.ops: segment_sum, a row of the op table (each device sums its rows;
a psum completes the sums where the rows are sharded), and segment_max,
segment_min, segment_prod, as JAX's: scatters into the reduction's
identity."""
import numpy as np

from ._core import InvalidArgument
from ._trace import _dims, _explicit_dims, _state, jit, make_op, scatter_refused

_segment_sum = make_op("segment_sum")
_reshard = make_op("reshard")


def segment_sum(data, segment_ids, num_segments=None, indices_are_sorted=False,
                unique_indices=False, bucket_size=None, mode=None, out_sharding=None):
    """jax.ops.segment_sum: the rows of data summed by segment id (ids of
    data's leading dimensions); ids outside [0, num_segments) dropped.
    num_segments must be given (a static int: the result's shape cannot
    depend on the ids' values). As JAX's (a scatter-add into replicated
    zeros), data and segment_ids sharded over Explicit mesh axes need
    out_sharding= (a P or a NamedSharding): the rows are then summed where
    they lie, completed by a psum, and the result laid out as it says."""
    if num_segments is None:
        raise InvalidArgument("segment_sum: give num_segments (a static int): the result's "
                              "shape cannot depend on the values of segment_ids here")
    n = int(num_segments)
    if out_sharding is None:
        if _explicit_dims(data) or _explicit_dims(segment_ids):
            dt = data.type
            k = len(segment_ids.shape)
            sizes = [s.split("@")[0] for s in _dims(dt)[k:]]
            it = getattr(segment_ids, "type", None) or \
                f"i32[{','.join(map(str, segment_ids.shape))}]"
            raise scatter_refused(f"{dt[:dt.index('[')]}[{','.join([str(n)] + sizes)}]", it,
                                  dt)
        return _segment_sum(data, segment_ids, n)
    if getattr(_state, "builder", None) is None:  # at once: one job
        return jit(lambda d, s: segment_sum(d, s, n, out_sharding=out_sharding))(data,
                                                                                 segment_ids)
    if getattr(getattr(out_sharding, "spec", out_sharding), "unreduced", None):
        return _segment_sum_unreduced(data, segment_ids, n, out_sharding)
    return _reshard(_segment_sum(data, segment_ids, n), out_sharding)


def _segment_sum_unreduced(data, segment_ids, n, out_sharding):
    """segment_sum to an unreduced out_sharding, as JAX's: each device sums
    the rows it holds (its partial sums over the unreduced axes, which the
    rows and ids must be sharded over), a psum over the other axes they
    are sharded over."""
    from ._core import P, ProgramError
    from .lax import _partial_results
    from .numpy import _spec_of_type
    k = len(segment_ids.shape)
    ents = list(_spec_of_type(data.type) or ())
    ents += [None] * (len(data.shape) - len(ents))
    ids = list(_spec_of_type(getattr(segment_ids, "type", "")) or ()) + [None] * k
    if ids[:k] != ents[:k]:
        raise ProgramError(f"segment_sum: the ids are sharded as {P(*ids[:k])!r}, the data's "
                           f"leading dimensions as {P(*ents[:k])!r}: shard them alike")
    used = [a for e in ents[:k] if e is not None for a in ((e,) if isinstance(e, str) else e)]
    return _partial_results("segment_sum", lambda d, s: _segment_sum(d, s, n),
                            (data, segment_ids), (P(*ents), P(*ids[:k])), used,
                            [None] + ents[k:], out_sharding)


def _segment_scatter(name, op, data, segment_ids, num_segments, out_sharding):
    """JAX's segment_max/min/prod: a full array of the reduction's identity
    (-inf / the integer minimum for max, ...) updated by a scatter of data
    at the ids (empty segments keep the identity; ids out of range
    dropped); its sharding rule (the C op's) decides, or out_sharding=
    (not an unreduced one: JAX's NotImplementedError)."""
    if num_segments is None:
        raise InvalidArgument(f"{name}: give num_segments (a static int): the result's shape "
                              f"cannot depend on the values of segment_ids here")
    if getattr(getattr(out_sharding, "spec", out_sharding), "unreduced", None):
        raise NotImplementedError(f"unreduced for {name[len('segment_'):]} is not yet "
                                  f"supported.")
    n = int(num_segments)

    def f(d, s):
        dt = np.dtype(d.dtype)
        if op == "scatter_mul":
            ident = 1
        elif dt.kind == "f":
            ident = -np.inf if op == "scatter_max" else np.inf
        elif dt.kind == "b":
            ident = op != "scatter_max"
        else:
            ident = np.iinfo(dt).min if op == "scatter_max" else np.iinfo(dt).max
        k = len(s.shape)
        base = _full((n,) + tuple(d.shape[k:]), ident, dtype=dt)
        s = _where(s < 0, n, s)  # dropped, as the ids are not normalised (the scatter's are)
        kw = {} if out_sharding is None else {"out_sharding": out_sharding}
        return make_op(op)(base, s, d, **kw)

    if getattr(_state, "builder", None) is None:
        return jit(f)(data, segment_ids)
    return f(data, segment_ids)


_full = make_op("full")
_where = make_op("where")


def segment_max(data, segment_ids, num_segments=None, indices_are_sorted=False,
                unique_indices=False, bucket_size=None, mode=None, out_sharding=None):
    """jax.ops.segment_max: the largest row of each segment (-inf, or the
    integer minimum, where none)."""
    return _segment_scatter("segment_max", "scatter_max", data, segment_ids, num_segments,
                            out_sharding)


def segment_min(data, segment_ids, num_segments=None, indices_are_sorted=False,
                unique_indices=False, bucket_size=None, mode=None, out_sharding=None):
    """jax.ops.segment_min: the smallest row of each segment (inf, or the
    integer maximum, where none)."""
    return _segment_scatter("segment_min", "scatter_min", data, segment_ids, num_segments,
                            out_sharding)


def segment_prod(data, segment_ids, num_segments=None, indices_are_sorted=False,
                 unique_indices=False, bucket_size=None, mode=None, out_sharding=None):
    """jax.ops.segment_prod: the product of each segment's rows (1 where
    none)."""
    return _segment_scatter("segment_prod", "scatter_mul", data, segment_ids, num_segments,
                            out_sharding)


__all__ = ["segment_max", "segment_min", "segment_prod", "segment_sum"]
