"""jax.debug for shmap: print, visualize_array_sharding,
inspect_array_sharding.

debug.print in a jit body prints the values of the job it is part of: the
traced values it names become extra results of the program, downloaded
when the job ends and formatted (str.format, as JAX's) before the call
returns, in the order the prints were traced; the trace is reused as any,
so every call prints. In a shard_map body each device prints its blocks
(a row per device of an extra result laid out over every mesh axis), in
mesh order. Outside a trace it prints at once."""
import builtins

from ._core import (InvalidArgument, NamedSharding, P, _sharding_picture, device_get,
                    visualize_array_sharding)
from ._trace import Tracer, _dims, _spec_entry, _state
from .tree_util import tree_flatten

__all__ = ["print", "callback", "visualize_array_sharding", "inspect_array_sharding",
           "visualize_sharding"]


def print(fmt, *args, ordered=False, **kwargs):  # noqa: A001 (jax.debug.print)
    """jax.debug.print(fmt, *args, **kwargs): fmt.format of the values (numpy
    arrays). In a jit body they are printed when the job ends; in a
    shard_map body once per device (its blocks), in mesh order."""
    del ordered
    _later(fmt, "print", args, kwargs)


def callback(callback, *args, ordered=False, partitioned=False, **kwargs):
    """jax.debug.callback(callback, *args, **kwargs): callback of the values
    (numpy arrays) for its effects, returning nothing: in a jit body called
    when the job ends, with the values it computed (in a shard_map body once
    per device, its blocks, in mesh order); outside a trace at once."""
    del ordered, partitioned
    if not callable(callback):
        raise TypeError(f"debug.callback takes a callable, got {type(callback).__name__}")
    _later(callback, "callback", args, kwargs)


def _later(fmt, name, args, kwargs):
    """fmt (a format string or a callable) of args and kwargs: at once
    outside a trace, else when the job ends (_outputs, _emit)."""
    b = getattr(_state, "builder", None)
    if b is None:
        args, kwargs = device_get(list(args)), device_get(dict(kwargs))
        if callable(fmt):
            fmt(*args, **kwargs)
        else:
            builtins.print(fmt.format(*args, **kwargs))
        return
    if b.loops and builtins.any(isinstance(v, Tracer) for v in tree_flatten((args, kwargs))[0]):
        from ._core import InvalidArgument
        raise InvalidArgument(f"shmap.debug.{name} of traced values inside a traced while_loop "
                              "(or scan) is not supported: its values are taken when the job "
                              "ends, and a loop's values do not outlive the loop; print the "
                              "loop's results after it")
    leaves, tree = tree_flatten((args, kwargs))
    leaves = [getattr(v, "val", v) if not isinstance(v, Tracer) and hasattr(v, "val") else v
              for v in leaves]  # a vmap'd value: the whole batch
    if b.kind != "jit":  # a shard_map body: each device's block, as a row of a result
        from . import numpy as jnp
        leaves = [jnp.expand_dims(v, 0) if isinstance(v, Tracer) else v for v in leaves]
    b.debug.append((fmt, tree, leaves))


def _outputs(b):
    """The traced values a body's debug.prints name (extra results of its
    program), and what the prints need to format them after the job."""
    extra, entries = [], []
    for fmt, tree, leaves in getattr(b, "debug", ()):
        slots = []
        for v in leaves:
            if isinstance(v, Tracer):
                slots.append(("out", len(extra)))
                extra.append(v)
            else:
                slots.append(("const", v))
        entries.append((fmt, tree, slots))
    return extra, entries


def _emit(entries, arrays, per_device=False):
    """Prints the entries of _outputs with the extra results' values (of a
    shard_map: one row per device, each device's line in mesh order)."""
    vals = [a.to_numpy() for a in arrays]
    rows = max((v.shape[0] for v in vals), default=1) if per_device else 1
    for fmt, tree, slots in entries:
        for d in range(rows):
            leaves = [(vals[x][d] if per_device else vals[x]) if kind == "out" else
                      device_get(x) for kind, x in slots]
            args, kwargs = tree.unflatten(leaves)
            if callable(fmt):
                fmt(*args, **kwargs)
            else:
                builtins.print(fmt.format(*args, **kwargs))


def inspect_array_sharding(value, *, callback):
    """jax.debug.inspect_array_sharding: callback(the value's sharding) — at
    trace time in a jit body (its type carries the sharding), at once for
    an Array."""
    b = getattr(_state, "builder", None)
    if isinstance(value, Tracer) and b is not None and b.kind == "jit":
        spec = P(*[_spec_entry(d) for d in _dims(value.type)])
        callback(NamedSharding(b.mesh, spec))
        return
    if hasattr(value, "sharding"):
        callback(value.sharding)
        return
    raise InvalidArgument("inspect_array_sharding: the value has no sharding here (a value of "
                          "a shard_map body is a per-device block)")


def visualize_sharding(shape, sharding, use_color=False):
    """jax.debug.visualize_sharding: prints (and returns) the layout diagram
    of an array of shape laid out by sharding (a NamedSharding), without
    the array."""
    d = _sharding_picture(tuple(int(n) for n in shape), sharding)
    builtins.print(d, end="")
    return d
