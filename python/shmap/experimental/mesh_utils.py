"""jax.experimental.mesh_utils: a device array of a mesh's shape, for
Mesh(devices, names)."""
import math

import numpy as np


def create_device_mesh(mesh_shape, devices=None, *, contiguous_submeshes=False,
                       allow_split_physical_axes=False):
    """The devices (shmap.devices() unless given) as an array of
    mesh_shape, in id order (the cluster's devices have no physical
    topology to follow); JAX's ValueError when the counts differ."""
    del contiguous_submeshes, allow_split_physical_axes
    if devices is None:
        from .._core import devices as _devices
        devices = _devices()
    devices = list(np.asarray(devices, dtype=object).ravel())
    shape = tuple(int(n) for n in mesh_shape)
    if math.prod(shape) != len(devices):
        raise ValueError(f"Number of devices {len(devices)} must equal the product of "
                         f"mesh_shape {shape}")
    out = np.empty(len(devices), dtype=object)
    out[:] = devices
    return out.reshape(shape)


def create_hybrid_device_mesh(mesh_shape, dcn_mesh_shape, devices=None, **kw):
    """The per-host mesh_shape times dcn_mesh_shape, as one device array
    (one Python process drives every device here)."""
    shape = tuple(a * b for a, b in zip(mesh_shape, dcn_mesh_shape))
    return create_device_mesh(shape, devices)


__all__ = ["create_device_mesh", "create_hybrid_device_mesh"]
