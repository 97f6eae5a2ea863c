"""jax.ops: segment_sum, a row of the op table (each device sums its rows;
a psum completes the sums where the rows are sharded)."""
from ._core import InvalidArgument
from ._trace import make_op

_segment_sum = make_op("segment_sum")


def segment_sum(data, segment_ids, num_segments=None, indices_are_sorted=False,
                unique_indices=False, bucket_size=None, mode=None):
    """jax.ops.segment_sum: the rows of data summed by segment id (ids of
    data's leading dimensions); ids outside [0, num_segments) dropped.
    num_segments must be given (a static int: the result's shape cannot
    depend on the ids' values)."""
    if num_segments is None:
        raise InvalidArgument("segment_sum: give num_segments (a static int): the result's "
                              "shape cannot depend on the values of segment_ids here")
    return _segment_sum(data, segment_ids, int(num_segments))


__all__ = ["segment_sum"]
