"""jax.lax-style collectives for shard_map bodies (psum, pmean, all_gather,
psum_scatter, ppermute, all_to_all, axis_index, axis_size, ...), plus the
numpy ops under their lax names, made from the C op table at import."""
import _shmap

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
