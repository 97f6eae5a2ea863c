"""shmap.sharding: the names of jax.sharding, for code that imports them
from there (from jax.sharding import PartitionSpec as P, NamedSharding,
AxisType, auto_axes)."""
from ._core import (AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec, Sharding,
                    SingleDeviceSharding, UnreducedKind, get_mesh, set_mesh, use_mesh)
from ._trace import auto_axes, explicit_axes


def reshard(x, out_sharding):
    """jax.sharding.reshard (shmap.reshard)."""
    from .numpy import reshard as _reshard
    return _reshard(x, out_sharding)


def get_abstract_mesh():
    """The mesh of the function being traced, else set_mesh's (None when
    there is none): its axis names, sizes and types, as JAX's abstract
    mesh gives them."""
    from ._trace import _state
    b = getattr(_state, "builder", None)
    mesh = getattr(b, "mesh", None) if b is not None else None
    return mesh if mesh is not None else get_mesh()


__all__ = [
    "AbstractMesh", "AxisType", "Mesh", "NamedSharding", "PartitionSpec", "Sharding", "SingleDeviceSharding",
    "UnreducedKind",
    "auto_axes",
    "explicit_axes", "get_abstract_mesh", "get_mesh", "reshard", "set_mesh", "use_mesh"
]
