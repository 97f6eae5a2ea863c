"""shmap.experimental: the names older JAX code imports from
jax.experimental (shard_map, mesh_utils), for code written against them."""
from . import mesh_utils, shard_map

__all__ = ["mesh_utils", "shard_map"]
