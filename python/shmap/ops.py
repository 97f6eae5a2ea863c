"""jax.ops: segment_sum, a row of the op table (each device sums its rows;
a psum completes the sums where the rows are sharded)."""
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
        return jit(lambda d, s: _reshard(_segment_sum(d, s, n), out_sharding))(data,
                                                                                segment_ids)
    return _reshard(_segment_sum(data, segment_ids, n), out_sharding)


__all__ = ["segment_sum"]
