"""shmap for Python: JAX's sharding model as a service.

    import numpy as np, shmap
    from shmap import P, NamedSharding

    with shmap.local_cluster(workers=2, devices_per_worker=4) as c:
        mesh = c.make_mesh((4, 2), ('i', 'j'))
        a = c.device_put(np.ones((8, 16), np.float32), NamedSharding(mesh, P('i', 'j')))
        print(shmap.typeof(a))            # f32[8@i,16@j]

        @shmap.shard_map(mesh=mesh, in_specs=(P('i', 'j'),), out_specs=P('i', None))
        def f(x):
            return shmap.lax.psum(x.sum(axis=1, keepdims=True), 'j')

        print(np.asarray(f(a)))

See docs/python.md. The ops of shmap.numpy and shmap.lax come from the C op
table at import."""
from . import ad_checkpoint, debug, errors, lax, nn, numpy, ops, random, scipy, tree_util
from . import dtypes, experimental, image, profiler, sharding
from ._config import (checking_leaks, config, debug_infs, debug_nans, default_matmul_precision,
                      disable_jit, enable_x64, explain_cache_misses, log_compiles,
                      numpy_dtype_promotion, numpy_rank_promotion, transfer_guard,
                      transfer_guard_device_to_device, transfer_guard_device_to_host,
                      transfer_guard_host_to_device)
from ._core import PublicArray as Array  # (isinstance: traced values too, as JAX's)
from ._core import (AlreadyExists, Auto, AxisType, Cancelled, Client, DataLoss,
                    DeadlineExceeded, Device, Explicit, FailedPrecondition, Internal,
                    InvalidArgument, Mesh, NamedSharding, NotFound, P, PartitionSpec,
                    ProgramError, ResourceExhausted, Shard, ShapeDtypeStruct, ShmapError,
                    Unauthenticated, Unavailable, Unimplemented, block_until_ready, connect,
                    default_backend, default_device, device_count, device_get, device_put,
                    devices, get_mesh, local_cluster, local_device_count, local_devices,
                    make_array_from_callback, make_array_from_process_local_data,
                    make_array_from_single_device_arrays, make_mesh, process_count,
                    process_index, set_mesh, typeof, use_mesh, visualize_array_sharding)
from ._grad import (checkpoint, checkpoint_policies, closure_convert, custom_gradient,
                    custom_jvp, custom_vjp, grad, hessian, jacfwd, jacobian, jacrev, jvp,
                    linear_transpose, linearize, remat, value_and_grad, vjp)
from ._vmap import vmap
from ._trace import (Future, Lowered, Tracer, auto_axes, clear_caches, ensure_compile_time_eval,
                     eval_shape, explicit_axes, jit, make_jaxpr, named_call, named_scope, pmap,
                     pure_callback, shard_map, smap)
from .tree_util import tree

reshard = numpy.reshard
host_id, host_count = process_index, process_count  # JAX's older names


def host_ids(backend=None):
    """jax.host_ids: [0] (one Python process drives the cluster)."""
    return [0]


process_indices = host_ids
with_sharding_constraint = numpy.with_sharding_constraint

__all__ = [
    "ad_checkpoint", "AlreadyExists", "Array", "Auto", "auto_axes", "AxisType",
    "block_until_ready", "Cancelled", "checking_leaks", "checkpoint", "checkpoint_policies",
    "clear_caches", "Client", "closure_convert", "config", "connect", "custom_gradient",
    "custom_jvp", "custom_vjp", "DataLoss", "DeadlineExceeded", "debug", "debug_infs",
    "debug_nans", "default_backend", "default_device", "default_matmul_precision", "Device",
    "device_count", "device_get", "device_put", "devices", "disable_jit", "dtypes", "enable_x64",
    "ensure_compile_time_eval", "errors", "eval_shape", "experimental", "explain_cache_misses",
    "Explicit", "explicit_axes", "FailedPrecondition", "Future", "get_mesh", "grad", "hessian",
    "host_count", "host_id", "host_ids", "image", "Internal", "InvalidArgument", "jacfwd",
    "jacobian", "jacrev", "jit", "jvp", "lax", "linear_transpose", "linearize", "local_cluster",
    "local_device_count", "local_devices", "log_compiles", "Lowered", "make_array_from_callback",
    "make_array_from_process_local_data", "make_array_from_single_device_arrays", "make_jaxpr",
    "make_mesh", "Mesh", "named_call", "named_scope", "NamedSharding", "nn", "NotFound", "numpy",
    "numpy_dtype_promotion", "numpy_rank_promotion", "ops", "P", "PartitionSpec", "pmap",
    "process_count", "process_index", "process_indices", "profiler", "ProgramError",
    "pure_callback", "random", "remat", "reshard", "ResourceExhausted", "scipy", "set_mesh",
    "ShapeDtypeStruct", "Shard", "shard_map", "sharding", "ShmapError", "smap", "Tracer",
    "transfer_guard", "transfer_guard_device_to_device", "transfer_guard_device_to_host",
    "transfer_guard_host_to_device", "tree", "tree_util", "typeof", "Unauthenticated",
    "Unavailable", "Unimplemented", "use_mesh", "value_and_grad", "visualize_array_sharding",
    "vjp", "vmap", "with_sharding_constraint",
]
