"""jax.experimental.shard_map: shmap.shard_map under its older module
(from jax.experimental.shard_map import shard_map)."""
from .._trace import shard_map

__all__ = ["shard_map"]
