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
