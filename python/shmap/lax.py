"""jax.lax-style collectives for shard_map bodies (psum, pmean, all_gather,
psum_scatter, ppermute, all_to_all, axis_index, axis_size, ...), plus the
numpy ops under their lax names, made from the C op table at import."""
import numpy as _np

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
