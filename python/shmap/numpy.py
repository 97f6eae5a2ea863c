"""jnp-style functions for traced programs, one per op of the C op table
(all but the collectives, which are in shmap.lax), made at import: a new op
in the table appears here with no Python edit."""
import _shmap

from ._trace import make_op

_COLLECTIVES = {"psum", "pmean", "pmax", "pmin", "all_gather", "psum_scatter", "ppermute",
                "all_to_all", "axis_index", "axis_size", "pvary", "shard_map_in",
                "shard_map_out"}

__all__ = []
for _name, _sig, _mn, _mx, _jit_only in _shmap.op_table():
    if _name not in _COLLECTIVES:
        globals()[_name] = make_op(_name)
        __all__.append(_name)


def square(x):
    """x * x (jnp.square)."""
    return x * x


__all__.append("square")
