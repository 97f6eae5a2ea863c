"""Arrays, meshes and shardings with JAX's names, over the _shmap extension."""
import atexit
import contextlib
import enum
import functools
import inspect
import math
import operator
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
import weakref

import numpy as np

import _shmap

# ---- errors ------------------------------------------------------------------


class ShmapError(Exception):
    """An error of the service or of a program: .code is the gRPC-style code
    name (INVALID_ARGUMENT, NOT_FOUND, ...), .message the service's sentence."""

    code = "UNKNOWN"

    def __init__(self, message, code=None, source_line=None):
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        self.source_line = source_line


# Sentences of the C core whose refusal JAX raises as a built-in exception:
# such an InvalidArgument (or ProgramError) is that exception too, so that
# code catching JAX's types catches shmap's.
_AS_BUILTIN = (
    ("varies over mesh ax", ValueError),                  # out_specs vs the value's vma
    ("require replication which can't be statically inferred", ValueError),
    ("entries but the array has rank", ValueError),       # in_specs / a sharding vs the rank
    ("entries but the value has rank", ValueError),       # out_specs vs the rank
    ("should be equal to the unreduced present", ValueError),
    ("should be equal to the reduced present", ValueError),  # reduced specs vs the value's
    ("The denominator cannot be unreduced", ValueError),  # div of partial sums
    ("can only contain unreduced of kind `sum`", ValueError),  # unreduced_kind=max
    ("cannot be more unreduced than the input", ValueError),
    ("The unreduced_kind of input and output sharding", ValueError),
    ("Expected unreduced_kind=", ValueError),
    ("equal to the unreduced_kind present", ValueError),
    ("Denominator should be reduced along the same axes", ValueError),
    ("must be reduced over the same mesh axes as operand", ValueError),  # reshape
    ("cannot contain reduced axes", ValueError),
    ("cannot be reduced. Got out_sharding", ValueError),  # reductions to reduced
    ("all_gather_reduced's input cannot be reduced", ValueError),
    ("pcast can only accept axis_name", ValueError),
    ("bwd rule attached to", ValueError),                 # a custom_vjp's cotangent types
    ("is a collective: it exists only in a shard_map body", NameError),  # psum in a jit
    ("unreduced rule for ", NotImplementedError),         # sin of a partial sum
    ("must be a pytree prefix", ValueError),              # in_specs / out_specs vs the values
    ("The context mesh cannot be empty", ValueError),     # a shard_map with no mesh
    ("in the same order as the axis_names declared on the mesh", RuntimeError),  # ppermute
    ("too large to convert to", OverflowError),           # a literal out of its dtype's range
    ("unbound axis name: ", NameError),                   # an axis left out of axis_names
    ("must refer to an axis marked as manual", ValueError),  # specs vs axis_names
    ("a manual axis of the shard_map", ValueError),       # a sharding naming a Manual axis
    ("if a PartitionSpec is passed to", ValueError),      # a bare P with no mesh set
    ("`with_sharding_constraint` acts as an assert", AssertionError),  # Explicit axes
    ("of an empty sequence", ValueError),                 # argmax of a size-0 array
    # shape errors, as JAX's shape rules and indexing raise them
    # (jnp's broadcasting raises ValueError, lax's shape rules TypeError: both)
    ("expected shapes that broadcast together", (ValueError, TypeError)),
    ("cannot be broadcast to shape", ValueError),         # broadcast_to
    ("expected equal shapes except along axis", TypeError),  # concatenate
    ("dtype must be a dtype", TypeError),                 # astype('foo')
    ("an index must be a static integer", TypeError),     # x[1.0]
    ("got an unexpected keyword argument", TypeError),    # a call's binding, as Python's
    ("missing a required argument", TypeError),
    ("cannot reshape ", TypeError),
    ("expected the last dimension of the first to equal", TypeError),  # dot, matmul
    ("shape must be a static integer", TypeError),        # JAX's ConcretizationTypeError
    ("is out of bounds for dimension", IndexError),       # x[5] of 3 rows
    ("too many indices for an array", IndexError),
    ("is out of range for an operand of rank", ValueError),  # axis=2 of a vector
    # grad's checks of its function (JAX's TypeErrors)
    ("Gradient only defined for scalar-output functions", TypeError),
    ("requires real- or complex-valued inputs", TypeError),
    ("requires real-valued inputs", TypeError),
    ("requires real-valued outputs", TypeError),
)
_BUILTIN_CLASSES = {}

# Sentences of JAX's sharding rules (its core.ShardingTypeError), the C core's
# (common/ir/sm_ir_shard.c, sm_ir_unreduced.c) and the package's: such an
# InvalidArgument (or ProgramError) is a ShardingTypeError.
_SHARDING_RULES = (
    "got incompatible shardings for broadcasting", "produces an illegally sharded result",
    "dot_general requires lhs batch dimensions and rhs batch dimensions",
    "Contracting dimensions are sharded", "contracting dims should be sharded identically",
    "out_sharding's unreduced axes should be", "Use `.at[...].get(out_sharding=)`",
    "Use `.at[...].set/add/mul/...(out_sharding=)`", "Arguments to sort must",
    "Input should be unsharded over the axis being reduced", "This reshape is not supported",
    "dynamic_update_slice operand sharding must be equal",
    "dynamic_update_slice operand and update must be", "on sharded dims where out dim",
    "All operands should have the same sharding", "All operands should be reduced along",
    "All operands should be unreduced along", "select cases must have the same shardings",
    "select `which` must be scalar or have the same sharding", "unstack operand cannot be sharded",
    "when the tiling is non-trivial", "must be unsharded on non-batch dimensions",
    "must have the same batch sharding", "should be unsharded i.e. the spec of that dim",
    "unsharded over the axis along which to compute the top_k", "is unreduced while",
    "cannot be unreduced since mul is bilinear", "should be reduced along the same axes",
    "passed to dot_general cannot be unreduced", "must be unreduced along the same mesh axes",
    "All inputs should be reduced across the same mesh axes", "Inputs cannot be replicated on",
    "Inputs cannot be sharded/varying on", "gather indices cannot be reduced",
    "scatter indices cannot be unreduced", "scatter operand and updates must be unreduced",
    "cannot be sharded on the axis being rolled over", "sharding rule for ",
    "The input should be fully replicated when axis is not specified",
    "can only be fully replicated or fully unreduced along all mesh axes",
)


def _builtin_class(cls, builtin):
    """The subclass of cls and of the built-in exception builtin (one per
    pair): code catching either catches it."""
    sub = _BUILTIN_CLASSES.get((cls, builtin))
    if sub is None:
        bases = (cls,) + (builtin if isinstance(builtin, tuple) else (builtin,))
        sub = type(cls.__name__, bases, {"__module__": cls.__module__})
        _BUILTIN_CLASSES[(cls, builtin)] = sub
    return sub


def _with_builtin(cls, message):
    """cls, or the subclass of cls and the built-in exception JAX raises for
    message (_AS_BUILTIN)."""
    for part, builtin in _AS_BUILTIN:
        if part in message:
            return _builtin_class(cls, builtin)
    return cls


class InvalidArgument(ShmapError):
    code = "INVALID_ARGUMENT"

    def __new__(cls, message="", *args, **kwargs):
        if cls is InvalidArgument or cls is ProgramError:
            if any(part in str(message) for part in _SHARDING_RULES):
                cls = ShardingTypeError
            cls = _with_builtin(cls, str(message))
        return super().__new__(cls, message, *args, **kwargs)


class ProgramError(InvalidArgument):
    """A program that does not parse or type-check (.source_line: the Python
    line of the offending op, when it was traced from Python). A Python int
    literal out of its array's dtype ('Python int 4294967295 too large to
    convert to int32') is an OverflowError too, as JAX's (_AS_BUILTIN)."""


class ShardingTypeError(ProgramError):
    """JAX's core.ShardingTypeError: a sharding rule's refusal of its
    operands' shardings (incompatible shardings for broadcasting, sharded
    contracting dimensions, a reshape or split of sharded dimensions, ...),
    the service's sentences of them (_SHARDING_RULES)."""


class ConcretizationTypeError(InvalidArgument, TypeError):
    """JAX's ConcretizationTypeError: a traced value where a static one is
    needed (int() or float() of it, a size= left out inside a traced
    function)."""


class TracerBoolConversionError(ConcretizationTypeError):
    """JAX's: bool() of a traced value (an `if` or `and` on it in a traced
    function; jnp.where or lax.cond decide by value)."""


class TracerIntegerConversionError(InvalidArgument, TypeError):
    """JAX's: a traced value used where Python needs an integer (__index__:
    an index of a list, range())."""


class UnexpectedTracerError(InvalidArgument):
    """JAX's UnexpectedTracerError: a traced value used after its trace
    ended (kept in a global or an object by a side effect)."""


class NonConcreteBooleanIndexError(InvalidArgument, IndexError):
    """JAX's NonConcreteBooleanIndexError: indexing with a traced boolean
    mask, whose result's shape would depend on its values."""


class KeyReuseError(InvalidArgument):
    """JAX's KeyReuseError (shmap does not check key reuse: never raised)."""


class TracerArrayConversionError(InvalidArgument, TypeError):
    """JAX's: a traced value given to numpy (np.asarray, a numpy function),
    which would need its values now."""


class NotFound(ShmapError):
    code = "NOT_FOUND"


class AlreadyExists(ShmapError):
    code = "ALREADY_EXISTS"


class FailedPrecondition(ShmapError):
    code = "FAILED_PRECONDITION"


class ResourceExhausted(ShmapError):
    code = "RESOURCE_EXHAUSTED"


class Unavailable(ShmapError):
    code = "UNAVAILABLE"


class DeadlineExceeded(ShmapError):
    code = "DEADLINE_EXCEEDED"


class DataLoss(ShmapError):
    code = "DATA_LOSS"


class Unauthenticated(ShmapError):
    code = "UNAUTHENTICATED"


class Cancelled(ShmapError):
    code = "CANCELLED"


class Unimplemented(ShmapError):
    code = "UNIMPLEMENTED"


class Internal(ShmapError):
    code = "INTERNAL"


_BY_ERR = {
    "SM_EINVAL": InvalidArgument, "SM_EFORMAT": InvalidArgument, "SM_EOVERFLOW": InvalidArgument,
    "SM_ENOTFOUND": NotFound, "SM_EEXIST": AlreadyExists, "SM_EPRECONDITION": FailedPrecondition,
    "SM_ENOMEM": ResourceExhausted, "SM_ERESOURCE": ResourceExhausted,
    "SM_EUNAVAILABLE": Unavailable, "SM_ETIMEOUT": DeadlineExceeded, "SM_EDATALOSS": DataLoss,
    "SM_EAUTH": Unauthenticated, "SM_EPERM": Unauthenticated, "SM_ECANCELLED": Cancelled,
    "SM_EUNSUPPORTED": Unimplemented, "SM_EUNIMPLEMENTED": Unimplemented,
}


def _raise(e, program=False):
    """Re-raises an _shmap.Error as the matching ShmapError subclass."""
    name, msg = e.args if len(e.args) == 2 else ("SM_EINTERNAL", str(e))
    cls = _BY_ERR.get(name, Internal)
    if program and cls is InvalidArgument:
        cls = ProgramError
    raise cls(msg) from None


def _call(fn, *args):
    try:
        return fn(*args)
    except _shmap.Error as e:
        _raise(e)


def _spec_axes(spec):
    """The mesh axes a PartitionSpec's entries name, in order (its unreduced
    axes not among them; P.UNCONSTRAINED names none)."""
    return [a for e in spec if isinstance(e, (str, tuple))
            for a in ((e,) if isinstance(e, str) else e)]


def _short_type(dtype, shape):
    """JAX's aval.str_short of an array: float32[2,3]."""
    return f"{np.dtype(dtype).name}[{','.join(str(int(d)) for d in shape)}]"


# ---- dtypes ------------------------------------------------------------------

_DTYPES = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64,
           "u8": np.uint8, "bool": np.bool_, "f16": np.float16}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


# Python's types (and numpy's names of them) as dtypes, as JAX canonicalizes them
# without jax_enable_x64: float32 and int32 (an explicit numpy float64 or int64
# stays 64-bit here, as numpy arrays do)
_PY_DTYPES = {float: np.float32, int: np.int32, "float": np.float32, "int": np.int32}


def _canon_dtype(dt):
    """dt, with Python's float and int (or 'float', 'int') as JAX's 32-bit
    dtypes."""
    try:
        return _PY_DTYPES.get(dt, dt)
    except TypeError:  # (an unhashable value: not a dtype; refused where it is used)
        return dt


def _canon_dtypes(fn, names=("dtype",)):
    """fn, its dtype parameter (by keyword or position) canonicalized by
    _canon_dtype; fn itself when it has none."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return fn
    found = [(p.name, i if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) else None)
             for i, p in enumerate(params) if p.name in names]
    if not found:
        return fn
    name, pos = found[0]

    @functools.wraps(fn)
    def f(*args, **kwargs):
        if name in kwargs:
            kwargs[name] = _canon_dtype(kwargs[name])
        elif pos is not None and len(args) > pos:
            args = args[:pos] + (_canon_dtype(args[pos]),) + args[pos + 1:]
        return fn(*args, **kwargs)
    return f


def _canon_module_dtypes(namespace, names, params=("dtype",)):
    """Every function of names in a module's namespace with its dtype
    parameter canonicalized (_canon_dtypes)."""
    for n in names:
        v = namespace.get(n)
        if inspect.isfunction(v):
            namespace[n] = _canon_dtypes(v, params)


def _dtype_name(dt):
    dt = _canon_dtype(dt)
    if isinstance(dt, str) and dt in _DTYPES:
        return dt
    try:
        return _NAMES[np.dtype(dt)]
    except (KeyError, TypeError):
        raise InvalidArgument(f"dtype {dt!r} is not one shmap supports "
                              f"({', '.join(_DTYPES)})") from None


def _host_array(x):
    """x as a C-contiguous numpy array in native byte order with its shape
    kept (np.ascontiguousarray would make a 0-d array 1-d)."""
    a = np.asarray(x)
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    _dtype_name(a.dtype)  # a dtype shmap has, or InvalidArgument
    return np.require(a, requirements="C")


def _bytes(a):
    """The bytes of a C-contiguous array, 0-d and empty ones too (which
    memoryview.cast refuses)."""
    return memoryview(a.reshape(-1).view(np.uint8))


# ---- PartitionSpec, Mesh, NamedSharding --------------------------------------


class UnreducedKind(enum.Enum):
    """jax.sharding.UnreducedKind: how the devices' partial results of an
    unreduced value make it (their sum, max or min)."""
    sum = 1
    max = 2
    min = 3


class _Unconstrained:
    """P.UNCONSTRAINED: a dimension whose sharding is left to the service
    (JAX's; over Auto axes only)."""

    def __repr__(self):
        return "UNCONSTRAINED"

    def __reduce__(self):
        return (_unconstrained, ())


def _unconstrained():
    return PartitionSpec.UNCONSTRAINED


class PartitionSpec(tuple):
    """JAX's PartitionSpec: P('i', None), P(('x', 'y'),), P(),
    P('x', None, unreduced={'y'}) (each device holds a partial sum over y;
    unreduced_kind=UnreducedKind.max (or 'max'): a partial max)
    and P(None, reduced={'x'}) (replicated over x, its gradient unreduced
    over x)."""

    def __new__(cls, *entries, unreduced=frozenset(), reduced=frozenset(),
                unreduced_kind=None):
        for e in entries:
            ok = e is None or isinstance(e, str) or e is PartitionSpec.UNCONSTRAINED or (
                isinstance(e, tuple) and all(isinstance(a, str) for a in e))
            if not ok:
                raise InvalidArgument(f"a PartitionSpec entry is None, an axis name or a tuple "
                                      f"of axis names, got {e!r}")
        for name, axes in (("unreduced", unreduced), ("reduced", reduced)):
            if isinstance(axes, str) or not all(isinstance(a, str) for a in axes):
                raise InvalidArgument(f"{name} is a set of axis names, got {axes!r}")
        if set(unreduced) & set(reduced):
            raise ValueError(f"`unreduced` and `reduced` argument to PartitionSpec cannot "
                             f"overlap. Got unreduced: {set(unreduced)} and reduced: "
                             f"{set(reduced)}")
        named = {a for e in entries if isinstance(e, (str, tuple))
                 for a in ((e,) if isinstance(e, str) else e)}
        if named & set(reduced):
            raise ValueError(f"partitions cannot overlap with reduced axes passed to "
                             f"PartitionSpec. Got partitions: {entries} and reduced axes: "
                             f"{set(reduced)}")
        if isinstance(unreduced_kind, str):
            if unreduced_kind not in UnreducedKind.__members__:
                raise ValueError(f"unreduced_kind is one of sum, max, min, got "
                                 f"{unreduced_kind!r}")
            unreduced_kind = UnreducedKind[unreduced_kind]
        if unreduced_kind is not None and not isinstance(unreduced_kind, UnreducedKind):
            raise ValueError(f"Expected unreduced_kind to be of type "
                             f"`jax.sharding.UnreducedKind` but got {type(unreduced_kind)}")
        if not unreduced and unreduced_kind is not None:
            raise ValueError(f"`unreduced_kind` should be `None` when `unreduced` is an empty "
                             f"set. Got unreduced_kind={unreduced_kind} and "
                             f"unreduced={set(unreduced)}")
        obj = super().__new__(cls, entries)
        obj._unreduced = tuple(dict.fromkeys(unreduced))
        obj._reduced = tuple(dict.fromkeys(reduced))
        obj._kind = (unreduced_kind or UnreducedKind.sum) if unreduced else None
        return obj

    @property
    def unreduced_kind(self):
        return self._kind

    @property
    def partitions(self):
        """The entries, one per dimension from the first (JAX's)."""
        return tuple(self)

    @property
    def unreduced(self):
        return frozenset(self._unreduced)

    @property
    def reduced(self):
        return frozenset(self._reduced)

    def _ur(self):
        """The keywords of a spec like this one: unreduced=, reduced=,
        unreduced_kind=."""
        return {"unreduced": self.unreduced, "reduced": self.reduced,
                "unreduced_kind": self._kind}

    def __eq__(self, other):
        return tuple.__eq__(self, other) and self.unreduced == getattr(
            other, "unreduced", frozenset()) and self.reduced == getattr(
            other, "reduced", frozenset()) and self._kind == getattr(other, "_kind", None)

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash((tuple(self), self.unreduced, self.reduced, self._kind))

    def __repr__(self):
        def one(e):
            if e is None:
                return "None"
            if isinstance(e, (str, _Unconstrained)):
                return repr(e)
            return "(" + ", ".join(map(repr, e)) + ("," if len(e) == 1 else "") + ")"
        parts = [one(e) for e in self]
        if len(parts) == 1 and not self._unreduced and not self._reduced:
            return f"P({parts[0]},)"  # a tuple's repr, as JAX's: P('i',)
        if self._unreduced:
            parts.append("unreduced={" + ", ".join(map(repr, self._unreduced)) + "}")
        if self._reduced:
            parts.append("reduced={" + ", ".join(map(repr, self._reduced)) + "}")
        if self._kind is not None:  # JAX's: the kind of any unreduced spec, sum too
            parts.append(f"unreduced_kind={self._kind.name}")
        return "P(" + ", ".join(parts) + ")"

    __str__ = __repr__


PartitionSpec.UNCONSTRAINED = _Unconstrained()
P = PartitionSpec


class AxisType:
    """jax.sharding.AxisType: Explicit (in the types), Auto (the service's
    choice) or Manual (a shard_map body's, where each device has a block)."""
    Explicit = "Explicit"
    Auto = "Auto"
    Manual = "Manual"


Explicit, Auto = AxisType.Explicit, AxisType.Auto


class Mesh:
    """A device mesh: axis names with sizes and the device ids in row-major
    mesh order (None: the service's default order, chosen at first use)."""

    def __init__(self, axis_sizes, axis_names, devices=None, axis_types=None, client=None):
        if isinstance(axis_names, str):
            axis_names = (axis_names,)
        if isinstance(axis_sizes, np.ndarray) and devices is None:
            # jax.sharding.Mesh(np.array(devices).reshape(4, 2), ('x', 'y')): the devices,
            # laid out as the mesh
            devices, axis_sizes = axis_sizes, axis_sizes.shape
        self.axis_names = tuple(axis_names)
        self.axis_sizes = tuple(int(s) for s in axis_sizes)
        if len(self.axis_names) != len(self.axis_sizes):
            raise InvalidArgument("a mesh needs one size per axis name")
        self._devices = None if devices is None else tuple(int(d) for d in np.ravel(devices))
        # JAX's defaults: Mesh(...) Auto axes; make_mesh and AbstractMesh Explicit ones
        default = Explicit if client is not None or isinstance(self, AbstractMesh) else Auto
        if isinstance(axis_types, str):
            axis_types = (axis_types,)
        self.axis_types = tuple(axis_types) if axis_types else (default,) * len(self.axis_names)
        if not all(t in (Explicit, Auto, AxisType.Manual) for t in self.axis_types):
            raise ValueError(f"axis_types must be of AxisType (Explicit, Auto, Manual), got "
                             f"{axis_types!r}")
        self._client = client

    @property
    def shape(self):
        return dict(zip(self.axis_names, self.axis_sizes))

    def _axes_of(self, t):
        return tuple(n for n, k in zip(self.axis_names, self.axis_types) if k == t)

    # JAX's predicates and axis lists of a mesh's types
    are_all_axes_manual = property(lambda self: all(t == AxisType.Manual
                                                    for t in self.axis_types))
    are_all_axes_auto = property(lambda self: all(t == Auto for t in self.axis_types))
    are_all_axes_explicit = property(lambda self: all(t == Explicit for t in self.axis_types))
    auto_axes = property(lambda self: self._axes_of(Auto))
    explicit_axes = property(lambda self: self._axes_of(Explicit))
    manual_axes = property(lambda self: self._axes_of(AxisType.Manual))

    @property
    def size(self):
        return int(np.prod(self.axis_sizes))

    @property
    def devices(self):
        if self._devices is None:
            return None
        return np.array(self._devices).reshape(self.axis_sizes)

    def _c(self):
        return (self.axis_names, self.axis_sizes, self._devices, self._auto_mask())

    def _auto_mask(self):
        return sum(1 << a for a, t in enumerate(self.axis_types) if t == Auto)

    @classmethod
    def _of(cls, c, client=None):
        """The Mesh of a service's (names, sizes, devices, auto_axes)."""
        names, sizes, devs, auto = c
        return cls(sizes, names, devs, tuple(Auto if auto >> a & 1 else Explicit
                                             for a in range(len(names))), client=client)

    def _text(self):
        s = "mesh " + " ".join(f"{n}={z}" for n, z in zip(self.axis_names, self.axis_sizes))
        if self._devices is not None:
            s += " devices=[" + ", ".join(map(str, self._devices)) + "]"
        if any(t == Auto for t in self.axis_types):
            s += " axis_types=(" + ", ".join(self.axis_types) + ")"
        return s

    def __eq__(self, other):
        return (isinstance(other, Mesh) and self.axis_names == other.axis_names and
                self.axis_sizes == other.axis_sizes and self._devices == other._devices and
                self.axis_types == other.axis_types)

    def __hash__(self):
        return hash((self.axis_names, self.axis_sizes, self._devices, self.axis_types))

    def __repr__(self):
        s = ", ".join(f"'{n}': {z}" for n, z in zip(self.axis_names, self.axis_sizes))
        if any(t != Explicit for t in self.axis_types):  # as the service's sentences write it
            s += ", axis_types=(" + ", ".join(self.axis_types) + ")"
        return "Mesh(" + s + ")"

    def update(self, devices=None, axis_names=None, axis_types=None, axis_sizes=None):
        """JAX's mesh.update: this mesh with other axis names, types, sizes
        or devices (the rest kept)."""
        names = self.axis_names if axis_names is None else axis_names
        names = (names,) if isinstance(names, str) else tuple(names)
        sizes = self.axis_sizes if axis_sizes is None else tuple(axis_sizes)
        types = self.axis_types if axis_types is None else axis_types
        if isinstance(self, AbstractMesh):
            return AbstractMesh(sizes, names, types)
        devs = self._devices if devices is None else devices
        return Mesh(sizes, names, devs, types, client=self._client)

    @property
    def abstract_mesh(self):
        """jax's mesh.abstract_mesh: its axis names, sizes and types, no
        devices (AbstractMesh)."""
        return AbstractMesh(self.axis_sizes, self.axis_names, self.axis_types)


class AbstractMesh(Mesh):
    """jax.sharding.AbstractMesh: a mesh's axis names, sizes and types
    without its devices. A shard_map given one runs on the mesh of its
    Array arguments, or the context mesh, of those names and sizes."""

    def __init__(self, axis_sizes, axis_names, axis_types=None):
        super().__init__(axis_sizes, axis_names, None, axis_types)

    def __repr__(self):
        return "Abstract" + super().__repr__()

    def _concrete(self, meshes, who):
        """The first of meshes (None skipped) of these names and sizes, as
        JAX's context; JAX's ValueError when there is none."""
        for m in meshes:
            if m is not None and (m.axis_names, m.axis_sizes) == (self.axis_names,
                                                                  self.axis_sizes):
                return m
        raise ValueError(f"{who}: the abstract mesh {self!r} has no concrete mesh here: pass "
                         f"Arrays on a mesh of its axes, or set one (shmap.use_mesh)")


class Sharding:
    """jax.sharding.Sharding: the base of shmap's shardings (for
    isinstance)."""


class NamedSharding(Sharding):
    """JAX's NamedSharding(mesh, P(...)); the index math is the C core's."""

    def __init__(self, mesh, spec=None, *, memory_kind=None):
        self.mesh = mesh
        self.memory_kind = memory_kind  # JAX's (None: the device's memory)
        self.spec = spec if spec is not None else P()
        if not isinstance(self.spec, PartitionSpec):
            self.spec = P(*self.spec)
        types = getattr(mesh, "axis_types", None)
        if P.UNCONSTRAINED in tuple(self.spec) and types is not None and \
                AxisType.Auto not in tuple(types):
            raise ValueError(f"{self.spec} cannot contain `P.UNCONSTRAINED` when no mesh "
                             f"axis_types are `Auto`. Got mesh axis_types: {tuple(types)}")

    def _info(self, shape):
        if self.mesh._devices is None:
            raise FailedPrecondition("the mesh has no device order yet: make it with "
                                     "Client.make_mesh, or give devices=")
        return _call(_shmap.sharding_info, self.mesh._c(), repr(self.spec), tuple(shape))

    def devices_indices_map(self, shape):
        """{device id: tuple of slices} of each device's block."""
        return {d["device"]: tuple(slice(a, b) for a, b in d["index"])
                for d in self._info(shape)["devices"]}

    def shard_shape(self, shape):
        return tuple(self._info(shape)["shard_shape"])

    @property
    def is_fully_replicated(self):
        """JAX's: a one-device mesh, or a spec whose axes are all of size 1
        and that holds no partial sums (unreduced)."""
        if math.prod(self.mesh.shape.values()) == 1:
            return True
        if getattr(self.spec, "unreduced", None):
            return False
        return all(self.mesh.shape.get(a, 1) == 1 for a in _spec_axes(self.spec))

    @property
    def addressable_devices(self):
        return set(self.mesh._devices or ())

    @property
    def device_set(self):
        return self.addressable_devices

    @property
    def num_devices(self):
        return math.prod(self.mesh.shape.values())

    def with_memory_kind(self, kind):
        """This sharding with another memory_kind (JAX's; every kind is the
        device's memory here)."""
        return NamedSharding(self.mesh, self.spec, memory_kind=kind)

    def is_equivalent_to(self, other, ndim):
        """JAX's: both place the same blocks of an ndim-dimensional array on
        the same devices (a spec padded with None is the same sharding)."""
        return (isinstance(other, NamedSharding) and self.mesh == other.mesh and
                _padded(self.spec, ndim) == _padded(other.spec, ndim))

    def __eq__(self, other):
        return (isinstance(other, NamedSharding) and self.mesh == other.mesh and
                self.spec == other.spec)  # unreduced axes too, as JAX's

    def __hash__(self):  # (a static argument, a dict key, as JAX's)
        return hash((self.mesh, self.spec))

    def __repr__(self):
        return f"NamedSharding(mesh={self.mesh!r}, spec={self.spec!r})"


def _spec_of(text):
    """P(...) from the C core's text of a spec."""
    # the C formatter's own output (unreduced_kind=max: the kind's name)
    return eval(text, {"P": P, "None": None, "sum": "sum", "max": "max", "min": "min",
                       "__builtins__": {}})


# ---- arrays ------------------------------------------------------------------


class Shard:
    """One device's block of an Array; .data is fetched on first use."""

    def __init__(self, array, device, index, replica_id):
        self._array, self.device, self.index, self.replica_id = array, device, index, replica_id
        self._data = None

    @property
    def data(self):
        if self._data is None:
            buf, dt, shape = _call(self._array._client._c.get_shard, self._array.id, self.device)
            self._data = np.frombuffer(buf, dtype=_DTYPES[dt]).reshape(shape)
        return self._data


class _Shaped:
    """What a value with a .shape tuple derives from it, as numpy does."""

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape))


class Array(_Shaped):
    """A sharded array held by the service. Freed there when this handle is
    garbage-collected, unless it has a name (a named array lives until
    deleted), as a JAX array's buffers are."""

    def __init__(self, client, info, owned=True, mesh=None):
        self._client = client
        self._info = info
        # the Mesh it was made on, when it is the service's (the same
        # object, so that meshes compare as the caller's do)
        names, sizes, devs, _ = info["mesh"]
        same = mesh is not None and tuple(mesh.axis_names) == tuple(names) and \
            tuple(mesh.axis_sizes) == tuple(sizes) and \
            (mesh._devices is None or tuple(mesh._devices) == tuple(devs))
        self._mesh = mesh if same else None
        self.id = info["id"]
        self.name = info["name"] or None
        self._owned = owned and not self.name
        self._deleted = False
        if self._owned:
            self._finalizer = weakref.finalize(self, _free, weakref.ref(client), self.id)

    @property
    def shape(self):
        return tuple(self._info["shape"])

    @property
    def dtype(self):
        return np.dtype(_DTYPES[self._info["dtype"]])

    @property
    def sharding(self):
        mesh = self._mesh or Mesh._of(self._info["mesh"], client=self._client)
        spec = getattr(self, "_given_spec", None)  # an argument's, as JAX's (_trace._finish)
        if spec is not None:
            return NamedSharding(mesh, spec)
        spec = _spec_of(self._info["spec"])
        if getattr(self, "_full_spec", False):
            spec = _padded(spec, self.ndim)
        return NamedSharding(mesh, spec)

    @property
    def type(self):
        return self._info["type"]

    @property
    def addressable_shards(self):
        return [Shard(self, s["device"], tuple(slice(a, b) for a, b in s["index"]),
                      s["replica_id"]) for s in self._info["shards"]]

    def addressable_data(self, index):
        """The block of the index-th addressable shard (numpy)."""
        return self.addressable_shards[index].data

    def on_device_size_in_bytes(self):
        """The bytes its blocks take on the devices, every device's counted."""
        return sum(math.prod(len(range(*sl.indices(n))) for sl, n in zip(s.index, self.shape))
                   for s in self.addressable_shards) * self.dtype.itemsize

    def copy_to_host_async(self):
        """JAX's prefetch of the values: nothing to start here (np.asarray
        fetches them)."""

    def __array_namespace__(self, *, api_version=None):
        """The array API's namespace of an Array: shmap.numpy."""
        from . import numpy as jnp
        return jnp

    @property
    def global_shards(self):
        """Every device's block: the addressable ones (one Python process
        drives the cluster)."""
        return self.addressable_shards

    @property
    def committed(self):
        """True: an Array stays on the devices it was placed on, as a JAX
        array given a sharding or a device does."""
        return True

    def __reduce__(self):  # pickled as its values; unpickled onto the default device
        return (_unpickle_array, (self.to_numpy(),))

    def to_numpy(self, out=None, shared=False):
        """The whole array; with out, written into that buffer (C-contiguous,
        writable, same shape and dtype) with no extra copy. shared=True: into
        a new array in shared memory (Client.empty), which workers on this
        host write themselves with no copy on the client's side; an upload
        of it later goes the same way."""
        self._check()
        if out is None:
            out = (self._client.empty(self.shape, self.dtype) if shared
                   else np.empty(self.shape, self.dtype))
        elif (out.shape != self.shape or out.dtype != self.dtype or
              not out.flags.c_contiguous or not out.flags.writeable):
            raise InvalidArgument(f"out must be a writable C-contiguous {self.dtype}"
                                  f"{list(self.shape)} array")
        self._client._progress_get(self, out)
        return out

    def __array__(self, dtype=None, copy=None):
        a = self.to_numpy()
        return a if dtype is None else a.astype(dtype)

    def reshard(self, sharding, name=None):
        sharding = _sharding_of(sharding, "reshard")
        self._check()
        c = self._client
        return Array(c, _call(c._c.reshard, self.id, c._mesh_c(sharding.mesh),
                              repr(sharding.spec), name), mesh=sharding.mesh)

    def replicate(self, replicas=2):
        """Keeps a copy of every block one worker alone holds on another
        worker (replicas=2), so the array survives the loss of either; 1
        drops the copies. Returns self once the copies are made."""
        self._check()
        self._info = _call(self._client._c.replicate, self.id, replicas)
        return self

    @property
    def copies(self):
        """The copies Replicate keeps on other workers: (device, index) of
        each, index a tuple of slices of the global array."""
        return [(s["device"], tuple(slice(a, b) for a, b in s["index"]))
                for s in self._info.get("copies", [])]

    def delete(self):
        if not self._deleted:
            _call(self._client._c.delete, self.id)
            self._deleted = True
            if self._owned:
                self._finalizer.detach()

    def is_deleted(self):
        return self._deleted

    def _check(self):
        if self._deleted:
            raise FailedPrecondition(f"array {self.id} was deleted")

    def __repr__(self):
        return f"Array({self.type}, id={self.id}{', name=' + repr(self.name) if self.name else ''})"

    def __str__(self):  # print(x) shows the values, as a JAX array's does
        return str(self.to_numpy())

    def __format__(self, spec):  # f"{loss:.4f}": a scalar's value formatted, as JAX's
        v = self.to_numpy()
        return format(v[()] if self.ndim == 0 else v, spec)

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize

    @property
    def is_fully_replicated(self):
        """Every device holds the whole array (its sharding's, as JAX's)."""
        return self.sharding.is_fully_replicated

    @property
    def is_fully_addressable(self):
        """True: a client reaches every shard (through the service)."""
        return True

    def block_until_ready(self):
        """self: an Array is ready once made."""
        return self

    # ---- operations now, outside jit, as a JAX array has them: each runs on
    # the service as a jit program of that one operation (shmap._trace._eager)

    def _now(self, f, *args):
        from ._trace import _eager
        return _eager(f, (self,) + args, {})

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __iter__(self):
        """The rows, as JAX's: of an array sharded along its first dimension
        each fetched and placed on the default device (JAX's slicing rule
        refuses the rows of a sharded dimension)."""
        if not self.shape:
            raise TypeError("iteration over a 0-d array")
        spec = self.sharding.spec
        if len(spec) and spec[0] is not None and not self.is_fully_replicated:
            v = self.to_numpy()
            for i in range(len(self)):
                yield device_put(v[i])
            return
        for i in range(len(self)):
            yield self[i]

    def item(self):
        if self.size != 1:
            raise ValueError("can only convert an array of size 1 to a Python scalar")
        return self.to_numpy().item()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __setitem__(self, key, value):
        raise TypeError(_IMMUTABLE)

    def __index__(self):  # [10, 20, 30][i] of an integer scalar Array, as JAX's
        if self.ndim or not np.issubdtype(self.dtype, np.integer):
            raise TypeError("only integer scalar arrays can be converted to a scalar index")
        return int(self.item())

    def __bool__(self):
        if self.size != 1:
            raise ValueError(f"the truth value of an array with {self.size} elements is "
                             f"ambiguous")
        return bool(self.item())

    @property
    def T(self):
        return self._now(lambda a: a.T)

    @property
    def at(self):
        """x.at[index].set(v) and the other updates, at once (as traced)."""
        return _At(self, _ArrayAtIndex)

    def __getitem__(self, key):
        key = _concrete_masks(key)
        return self._now(lambda a: a[key])

    def reshape(self, *shape, out_sharding=None):
        return self._now(lambda a: a.reshape(*shape, out_sharding=out_sharding))

    def transpose(self, *axes):
        return self._now(lambda a: a.transpose(*axes))

    def astype(self, dtype):
        dtype = _canon_dtype(dtype)
        return self._now(lambda a: a.astype(dtype))

    def sum(self, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
        return self._now(lambda a, w: a.sum(axis, dtype, keepdims=keepdims, initial=initial,
                                            where=w), where)

    def prod(self, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
        return self._now(lambda a, w: a.prod(axis, dtype, keepdims=keepdims, initial=initial,
                                             where=w), where)

    def mean(self, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
        return self._now(lambda a, w: a.mean(axis, dtype, keepdims=keepdims, where=w), where)

    def max(self, axis=None, out=None, keepdims=False, initial=None, where=None):
        return self._now(lambda a, w: a.max(axis, keepdims=keepdims, initial=initial, where=w),
                         where)

    def min(self, axis=None, out=None, keepdims=False, initial=None, where=None):
        return self._now(lambda a, w: a.min(axis, keepdims=keepdims, initial=initial, where=w),
                         where)

    def any(self, axis=None, out=None, keepdims=False, *, where=None):
        return self._now(lambda a, w: a.any(axis, keepdims=keepdims, where=w), where)

    def all(self, axis=None, out=None, keepdims=False, *, where=None):
        return self._now(lambda a, w: a.all(axis, keepdims=keepdims, where=w), where)

    def argmax(self, axis=None, out=None, keepdims=False):
        return self._now(lambda a: a.argmax(axis, keepdims=keepdims))

    def argmin(self, axis=None, out=None, keepdims=False):
        return self._now(lambda a: a.argmin(axis, keepdims=keepdims))

    def cumsum(self, axis=None, dtype=None):
        return self._now(lambda a: a.cumsum(axis, dtype))

    def sort(self, axis=-1, **kw):
        return self._now(lambda a: a.sort(axis, **kw))

    def argsort(self, axis=-1, **kw):
        return self._now(lambda a: a.argsort(axis, **kw))

    def ravel(self):
        return self._now(lambda a: a.ravel())

    flatten = ravel

    def squeeze(self, axis=None):
        return self._now(lambda a: a.squeeze(axis))

    def swapaxes(self, axis1, axis2):
        return self._now(lambda a: a.swapaxes(axis1, axis2))

    def cumprod(self, axis=None, dtype=None):
        return self._now(lambda a: a.cumprod(axis, dtype))

    def var(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
        return self._now(lambda a: a.var(axis, dtype, ddof=ddof, keepdims=keepdims))

    def std(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
        return self._now(lambda a: a.std(axis, dtype, ddof=ddof, keepdims=keepdims))

    def clip(self, min=None, max=None):  # noqa: A002 (numpy's names)
        return self._now(lambda a: a.clip(min, max))

    def round(self, decimals=0):
        return self._now(lambda a: a.round(decimals))

    def dot(self, b):
        return self._now(lambda a, b: a.dot(b), b)

    def take(self, indices, axis=None, mode=None):
        return self._now(lambda a, i: a.take(i, axis=axis, mode=mode), indices)

    def repeat(self, repeats, axis=None):
        return self._now(lambda a: a.repeat(repeats, axis=axis))

    def diagonal(self, offset=0, axis1=0, axis2=1):
        return self._now(lambda a: a.diagonal(offset, axis1, axis2))

    def trace(self, offset=0, axis1=0, axis2=1, dtype=None):
        return self._now(lambda a: a.trace(offset, axis1, axis2, dtype))

    def searchsorted(self, v, side="left", sorter=None):
        return self._now(lambda a, v: a.searchsorted(v, side=side, sorter=sorter), v)

    def nonzero(self, size=None, fill_value=None):
        from . import numpy as jnp
        return jnp.nonzero(self, size=size, fill_value=fill_value)

    def ptp(self, axis=None, out=None, keepdims=False):
        return self._now(lambda a: a.ptp(axis, keepdims=keepdims))

    def argpartition(self, kth, axis=-1, kind="introselect", order=None):
        return self._now(lambda a: a.argpartition(kth, axis=axis))

    def compress(self, condition, axis=None, *, size=None, fill_value=0):
        from . import numpy as jnp
        return jnp.compress(condition, self, axis=axis, size=size, fill_value=fill_value)

    def choose(self, choices, out=None, mode="raise"):
        from . import numpy as jnp
        return jnp.choose(self, choices, mode=mode)

    def to_device(self, device, *, stream=None):
        """The array API's to_device: device_put(x, device)."""
        return device_put(self, device)

    def copy(self):
        return self._now(lambda a: a * 1)

    def conj(self):
        return self  # real dtypes only

    conjugate = conj

    @property
    def mT(self):
        return self._now(lambda a: a.mT)

    @property
    def real(self):
        return self

    @property
    def imag(self):
        return self._now(lambda a: a.imag)

    @property
    def itemsize(self):
        return np.dtype(self.dtype).itemsize

    def tolist(self):
        """The values as nested Python lists (fetched)."""
        return self.to_numpy().tolist()

    def devices(self):
        """The set of devices holding a block of the array."""
        return set(self.sharding.mesh._devices or ())

    def __invert__(self):
        return self._now(lambda a: ~a)

    def __neg__(self):
        return self._now(lambda a: -a)

    def __pos__(self):
        return self

    def __abs__(self):
        return self._now(lambda a: abs(a))

    __hash__ = object.__hash__


class _At:
    """x.at: x.at[key] is make(x, key), the updates of that box (traced
    values' and Arrays' alike)."""

    def __init__(self, x, make):
        self.x, self.make = x, make

    def __getitem__(self, key):
        return self.make(self.x, key)


def _concrete_masks(key):
    """An index of an Array at once with its boolean Arrays fetched: a mask
    is concrete outside a trace, as JAX's eager indexing takes it (traced,
    it would be JAX's NonConcreteBooleanIndexError)."""
    def one(k):
        return k.to_numpy() if isinstance(k, Array) and k.dtype == np.bool_ else k
    return tuple(one(k) for k in key) if isinstance(key, tuple) else one(key)


class _ArrayAtIndex:
    def __init__(self, x, key):
        self.x, self.key = x, _concrete_masks(key)

    def __getattr__(self, how):
        if how not in ("set", "add", "subtract", "multiply", "mul", "divide", "power", "min",
                       "max", "get", "apply"):
            raise AttributeError(how)
        key = self.key
        return lambda *v, **kw: self.x._now(lambda a, *t: getattr(a.at[key], how)(*t, **kw),
                                            *v)


def _array_binary(op):
    def fwd(self, other):
        return self._now(lambda a, b: op(a, b), other)

    def rev(self, other):
        return self._now(lambda a, b: op(b, a), other)

    return fwd, rev


for _name, _op in (("add", operator.add), ("sub", operator.sub), ("mul", operator.mul),
                   ("truediv", operator.truediv), ("floordiv", operator.floordiv),
                   ("mod", operator.mod), ("pow", operator.pow),
                   ("matmul", operator.matmul), ("and", operator.and_), ("or", operator.or_),
                   ("xor", operator.xor), ("lshift", operator.lshift),
                   ("rshift", operator.rshift), ("divmod", divmod)):
    _f, _r = _array_binary(_op)
    setattr(Array, f"__{_name}__", _f)
    setattr(Array, f"__r{_name}__", _r)
for _name, _op in (("lt", operator.lt), ("le", operator.le), ("gt", operator.gt),
                   ("ge", operator.ge), ("eq", operator.eq), ("ne", operator.ne)):
    setattr(Array, f"__{_name}__", _array_binary(_op)[0])


def _free(client_ref, array_id):
    client = client_ref()
    if client is not None and client._c is not None:
        try:
            client._c.delete(array_id)
        except Exception:
            pass


_IMMUTABLE = ("JAX arrays are immutable and do not support in-place item assignment. Instead "
              "of x[idx] = y, use x = x.at[idx].set(y) or another .at[] method: "
              "https://docs.jax.dev/en/latest/_autosummary/jax.numpy.ndarray.at.html")


class _ArrayMeta(type):
    """jax.Array's isinstance: a concrete Array, a traced value and a key
    array are all arrays (library code tests isinstance(x, jax.Array) under
    jit and grad, as JAX's tracers are jax.Arrays)."""

    def __instancecheck__(cls, v):
        from ._trace import Tracer
        from .random import KeyArray
        return isinstance(v, (Array, Tracer, KeyArray))

    def __subclasscheck__(cls, c):
        from ._trace import Tracer
        from .random import KeyArray
        return issubclass(c, (Array, Tracer, KeyArray))

    def __call__(cls, *args, **kwargs):  # shmap.Array(client, info): the Array itself
        return Array(*args, **kwargs)


class PublicArray(metaclass=_ArrayMeta):
    """shmap.Array (jax.Array, jnp.ndarray) for isinstance and annotations:
    concrete Arrays, values traced in a jit, grad or vmap, and key arrays."""


def _unpickle_array(value):
    """A pickled Array: its values on the default device (the cluster of
    the last connect() or local_cluster()), or the numpy array without one."""
    return device_put(value) if _default or get_mesh() is not None else value


class Device(int):
    """A device id, with its worker and process; JAX's platform and
    device_kind ('cpu': the workers' blocks are in host memory)."""
    platform = device_kind = "cpu"

    def __new__(cls, id, worker, process, address):
        d = super().__new__(cls, id)
        d.id, d.worker, d.process_index, d.address = id, worker, process, address
        return d

    def __repr__(self):
        return f"Device(id={self.id}, process={self.process_index})"


class Client:
    """A connection to a coordinator (shmap.connect)."""

    def __init__(self, target=None, token=None, tls_ca=None, tls_cert=None, tls_key=None):
        self.target = target or os.environ.get("SHMAP_TARGET", "localhost:7070")
        token = token if token is not None else os.environ.get("SHMAP_TOKEN")
        tls = [v if v is not None else os.environ.get(env) or None
               for v, env in ((tls_ca, "SHMAP_TLS_CA"), (tls_cert, "SHMAP_TLS_CERT"),
                              (tls_key, "SHMAP_TLS_KEY"))]
        try:
            self._c = _shmap.Client(self.target, token, 0, _Progress(), *tls)
        except _shmap.Error as e:
            _raise(e)
        _open_clients.add(self)

    def close(self):
        if self._c is not None:
            self._c.close()
            self._c = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def devices(self):
        out = []
        for w in _call(self._c.devices):
            if w["alive"]:
                out += [Device(d, w["worker"], w["process"], w["address"]) for d in w["devices"]]
        return sorted(out)

    def make_mesh(self, axis_shapes, axis_names, devices=None, axis_types=None):
        """jax.make_mesh: the service's default device order unless devices
        are given (whole workers first, the minor axis inside one worker)."""
        m = Mesh(axis_shapes, axis_names, devices, axis_types, client=self)
        if devices is None:
            m._devices = tuple(_call(self._c.mesh_create, m._c())[2])
        return m

    def empty(self, shape, dtype=np.float32):
        """A numpy array whose memory is a shared-memory segment of this
        client (sm_client_alloc), zero-filled. Uploads of it (or of a
        C-contiguous view into it) and downloads into it (to_numpy(out=...))
        with workers on this host are copied by the worker straight between
        it and the shard, with no staging copy and no bytes streamed; with
        other workers they stream as usual. The segment is freed when the
        array (and every view of it) is garbage-collected; the client's
        connection stays open until then even after close(). Plain numpy
        arrays of 4 MiB and more move through the client's staging segments
        instead (one copy on the client's side; SHMAP_CLIENT_STAGE_MB)."""
        dtype = np.dtype(dtype)
        shape = tuple(int(d) for d in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        buf = _call(self._c.alloc, n)
        return np.frombuffer(buf, dtype, n // dtype.itemsize if dtype.itemsize else 0).reshape(shape)

    def zeros(self, shape, dtype=np.float32):
        """Client.empty: its memory is zero-filled."""
        return self.empty(shape, dtype)

    def _mesh_c(self, mesh):
        if mesh._devices is None:
            mesh._devices = tuple(_call(self._c.mesh_create, mesh._c())[2])
        return mesh._c()

    def device_put(self, x, sharding, name=None, replicas=1):
        sharding = _sharding_of(sharding)
        a = _host_array(x)
        info = _call(self._c.put, _bytes(a), _dtype_name(a.dtype), a.shape,
                     self._mesh_c(sharding.mesh), repr(sharding.spec), name)
        arr = Array(self, info, mesh=sharding.mesh)
        return arr.replicate(replicas) if replicas != 1 else arr

    def make_array_from_callback(self, shape, sharding, data_callback, name=None):
        """One call of data_callback(index) per distinct index (a tuple of slices)."""
        blocks, shards = {}, []
        for dev, idx in sharding.devices_indices_map(shape).items():
            key = tuple((s.start, s.stop) for s in idx)
            if key not in blocks:
                blocks[key] = _host_array(data_callback(idx))
            shards.append((dev, blocks[key]))
        dt = _dtype_name(shards[0][1].dtype)
        info = _call(self._c.put_shards, dt, tuple(shape), self._mesh_c(sharding.mesh),
                     repr(sharding.spec), name,
                     [(d, _bytes(b), b.shape) for d, b in shards])
        return Array(self, info, mesh=sharding.mesh)

    def make_array_from_single_device_arrays(self, shape, sharding, arrays, name=None):
        """arrays: one per device of the mesh, in mesh order (or a dict by device id)."""
        devs = list(self._mesh_c(sharding.mesh)[2])
        if isinstance(arrays, dict):
            arrays = [arrays[d] for d in devs]
        if len(arrays) != len(devs):
            raise InvalidArgument(f"{len(arrays)} arrays for a mesh of {len(devs)} devices")
        arrs = [_host_array(a) for a in arrays]
        info = _call(self._c.put_shards, _dtype_name(arrs[0].dtype), tuple(shape),
                     self._mesh_c(sharding.mesh), repr(sharding.spec), name,
                     [(d, _bytes(a), a.shape) for d, a in zip(devs, arrs)])
        return Array(self, info, mesh=sharding.mesh)

    def make_array_from_process_local_data(self, sharding, local_data, global_shape=None,
                                           process=0, name=None):
        """This process's part (worker process index `process`); the array is
        ready once every process's part has arrived (all must use one name)."""
        a = _host_array(local_data)
        name = name or "local-" + uuid.uuid4().hex[:12]
        info = _call(self._c.put_local, process, _bytes(a), _dtype_name(a.dtype),
                     a.shape, self._mesh_c(sharding.mesh), repr(sharding.spec), name,
                     None if global_shape is None else tuple(global_shape))
        return Array(self, info, owned=False, mesh=sharding.mesh)

    def save(self, x, directory):
        """Saves x (an Array, or a name or id) as a checkpoint in directory:
        the workers write its distinct shards there themselves, so it must be
        a path they see (the same host or a shared filesystem); a relative
        one is made absolute here. Returns (files, bytes) of the .npy files.
        A directory holding a checkpoint already raises AlreadyExists."""
        ref = x.id if isinstance(x, Array) else x
        if isinstance(x, Array):
            x._check()
        return _call(self._c.save, ref, os.path.abspath(os.fspath(directory)))

    def load(self, directory, sharding, name=None):
        """A new Array from the checkpoint in directory, with any sharding
        that fits its shape. A damaged checkpoint raises DataLoss naming the
        file."""
        info = _call(self._c.load, os.path.abspath(os.fspath(directory)),
                     self._mesh_c(sharding.mesh), repr(sharding.spec), name)
        return Array(self, info, mesh=sharding.mesh)

    def get(self, name_or_id):
        """Attaches to an array by name or id (not freed when collected)."""
        return Array(self, _call(self._c.describe, name_or_id), owned=False)

    def arrays(self):
        return [Array(self, i, owned=False) for i in _call(self._c.list)]

    def _progress_get(self, array, out):
        buf = _bytes(out)
        _call(self._c.get_into, array.id, buf)


_open_clients = weakref.WeakSet()


@atexit.register
def _close_at_exit():
    """Closes the clients left open at exit, so their staging segments
    leave /dev/shm with them (the interpreter does not free every object at
    exit); a client with shared arrays (Client.empty) still alive keeps its
    segments until the next sweep of the host (docs/service.md)."""
    for c in list(_open_clients):
        c.close()


class _Progress:
    """A progress bar on a terminal for transfers over a few MB: tqdm when
    Debian's python3-tqdm is installed, a plain one otherwise; silent when
    stderr is not a terminal."""

    MIN_BYTES = 8 << 20

    def __init__(self):
        import sys
        self.bar = None
        self.tty = sys.stderr.isatty()

    def __call__(self, done, total):
        import sys
        if not self.tty or total < self.MIN_BYTES:
            return
        if self.bar is None:
            try:
                import tqdm
                self.bar = tqdm.tqdm(total=total, unit="B", unit_scale=True, desc="shmap")
            except ImportError:
                self.bar = "plain"
                self.t0 = time.time()
        if self.bar == "plain":
            now = time.time()
            if done < total and now - getattr(self, "last", 0) < 0.1:
                return
            self.last = now
            width = 30
            k = int(width * done / total)
            rate = done / max(time.time() - self.t0, 1e-9) / 1e6
            sys.stderr.write(f"\rshmap [{'#' * k}{'.' * (width - k)}] "
                             f"{done / 1e6:.0f}/{total / 1e6:.0f} MB {rate:.0f} MB/s")
            if done >= total:
                sys.stderr.write("\n")
                self.bar = None
            sys.stderr.flush()
        else:
            self.bar.update(done - self.bar.n)
            if done >= total:
                self.bar.close()
                self.bar = None


_default = []


def connect(target=None, token=None, tls_ca=None, tls_cert=None, tls_key=None):
    """A Client for target (default $SHMAP_TARGET, else localhost:7070) with
    token (default $SHMAP_TOKEN). TLS: tls_ca (default $SHMAP_TLS_CA), the CA
    file that signs the coordinator's certificate; tls_cert and tls_key
    (default $SHMAP_TLS_CERT, $SHMAP_TLS_KEY), a client certificate of the
    cluster's CA for direct transfers to workers. None of them: plaintext."""
    c = Client(target, token, tls_ca, tls_cert, tls_key)
    _default[:] = [c]
    return c


_mesh_state = threading.local()


def get_mesh():
    """The mesh set by set_mesh or use_mesh on this thread, or None."""
    stack = getattr(_mesh_state, "stack", None)
    return stack[-1] if stack else None


class _MeshSet:
    """What set_mesh returns: `with shmap.set_mesh(m):` puts back the mesh
    (and the use_mesh blocks around it) that was set before."""

    def __init__(self, prev, mesh):
        self._prev, self._mesh = prev, mesh

    def __enter__(self):
        return self._mesh

    def __exit__(self, *exc):
        _mesh_state.stack = self._prev
        return False


def set_mesh(mesh):
    """jax.set_mesh: the mesh that device_put with a bare PartitionSpec, and
    jit functions given numpy arguments, use on this thread (None unsets),
    in place of the one set now (inside a use_mesh block, until its end);
    as a context manager, until the with block's end."""
    _check_context_mesh(mesh, "jax.set_mesh")
    stack = getattr(_mesh_state, "stack", None) or []
    _mesh_state.stack = stack[:-1] + [mesh]
    return _MeshSet(stack, mesh)


def _check_context_mesh(mesh, what):
    if mesh is not None and AxisType.Manual in getattr(mesh, "axis_types", ()):
        raise ValueError(f"mesh {mesh} contains manual axes which is not allowed when using "
                         f"`{what}`. Please use `jax.shard_map` to enter into `Manual` mode "
                         f"instead.")


@contextlib.contextmanager
def use_mesh(mesh):
    """jax.sharding.use_mesh: set_mesh for the with block."""
    _check_context_mesh(mesh, "jax.sharding.use_mesh")
    prev = getattr(_mesh_state, "stack", None) or []
    _mesh_state.stack = prev + [mesh]
    try:
        yield mesh
    finally:
        _mesh_state.stack = prev


def _sharding_of(sharding, name="device_put"):
    """A NamedSharding for sharding, a bare PartitionSpec meaning one over
    the mesh of set_mesh / use_mesh (none: JAX's ValueError, name the API
    given it)."""
    if isinstance(sharding, PartitionSpec):
        mesh = get_mesh()
        if mesh is None:
            raise InvalidArgument(f"Please set a mesh via `jax.set_mesh` if a PartitionSpec is "
                                  f"passed to {name}: a bare {sharding!r} needs a mesh: "
                                  f"shmap.set_mesh(mesh), or `with shmap.use_mesh(mesh):`, or "
                                  f"a NamedSharding")
        return NamedSharding(mesh, sharding)
    if isinstance(sharding, Device):  # JAX's SingleDeviceSharding: a mesh of that device
        c = _client_for()
        meshes = c.__dict__.setdefault("_device_meshes", {})
        if sharding.id not in meshes:
            meshes[sharding.id] = c.make_mesh((1,), ("d",), devices=[sharding])
        return NamedSharding(meshes[sharding.id], P())
    return sharding


def _client_for(mesh=None):
    """The client of mesh (one made by Client.make_mesh), else that of the
    mesh set by set_mesh / use_mesh, else the last one connect() or
    local_cluster() made."""
    for m in (mesh, get_mesh()):
        if m is not None and getattr(m, "_client", None) is not None:
            return m._client
    if _default:
        return _default[0]
    raise InvalidArgument("no client: call shmap.connect() or use shmap.local_cluster(), or "
                          "make the mesh with Client.make_mesh")


def make_mesh(axis_shapes, axis_names, devices=None, axis_types=None):
    """jax.make_mesh, with the client of connect() or local_cluster()."""
    return _client_for().make_mesh(axis_shapes, axis_names, devices, axis_types)


def devices(backend=None):
    """jax.devices: the devices of the cluster of connect() or
    local_cluster() (those of live workers), in id order."""
    del backend
    return _client_for().devices()


def device_count(backend=None):
    """jax.device_count: how many devices the cluster has."""
    return len(devices(backend))


local_devices = devices  # one Python process drives every device of the cluster
local_device_count = device_count


@contextlib.contextmanager
def default_device(device):
    """jax.default_device: values that name no device go to device in the
    block (a Device; None or a platform name changes nothing), as
    device_put(x) and a jit of numpy arguments place them."""
    if not isinstance(device, Device) or not _default:
        yield
        return
    c = _default[0]
    old = getattr(c, "_default_mesh", None)
    c._default_mesh = _sharding_of(device).mesh
    try:
        yield
    finally:
        c._default_mesh = old


def process_index(backend=None):
    """jax.process_index: 0 (this Python process drives the whole cluster)."""
    return 0


def process_count(backend=None):
    """jax.process_count: 1 (this Python process drives the whole cluster)."""
    return 1


def default_backend():
    """jax.default_backend: 'cpu' (the workers compute on CPUs)."""
    return "cpu"


def _default_mesh():
    """Where values go that name no mesh when none is set, as JAX's default
    device: a mesh of one device (axis 'd'), the first of the cluster of
    the last connect() or local_cluster(); None without one."""
    if not _default:
        return None
    c = _default[0]
    if getattr(c, "_default_mesh", None) is None:
        c._default_mesh = c.make_mesh((1,), ("d",))
    return c._default_mesh


def _padded(spec, ndim, **ur):
    """spec (None: P()) with one entry per dimension (None the rest), its
    unreduced=, reduced=, unreduced_kind= or those of ur."""
    spec = P() if spec is None else spec
    return P(*spec, *(None,) * (ndim - len(spec)), **{**spec._ur(), **ur})


def _move_unreduced(x, sharding):
    """An unreduced Array onto another mesh of the same axes, each device's
    partial sums to the device at its mesh position (JAX's runtime transfer
    of the shards): the blocks stacked along a new leading dimension sharded
    over the unreduced axes (a shard_map on x's mesh), that array moved as
    any other, and taken back as partial sums on the new mesh."""
    from ._trace import shard_map
    spec, src, dst = x.sharding.spec, x.sharding.mesh, sharding.mesh
    if (tuple(src.axis_names), tuple(src.axis_sizes)) != \
            (tuple(dst.axis_names), tuple(dst.axis_sizes)):
        raise Unimplemented(f"an unreduced array moves only to a mesh of the same axes "
                            f"({src._text()!r}, not {dst._text()!r}): reshard it first")
    axes = tuple(a for a in src.axis_names if a in spec.unreduced)
    ents = tuple(spec) + (None,) * (x.ndim - len(spec))
    kw = {"reduced": spec.reduced, "unreduced_kind": spec.unreduced_kind}
    stacked = P(axes if len(axes) > 1 else axes[0], *ents, reduced=spec.reduced)
    blocks = shard_map(lambda b: b[None], mesh=src, in_specs=P(*ents, unreduced=axes, **kw),
                       out_specs=stacked, check_vma=False)(x)
    moved = device_put(blocks, NamedSharding(dst, stacked))
    return shard_map(lambda b: b[0], mesh=dst, in_specs=stacked,
                     out_specs=P(*ents, unreduced=axes, **kw), check_vma=False)(moved)


def device_put(x, sharding=None, name=None, replicas=1, *, donate=False, may_alias=None,
               src=None, device=None):
    """jax.device_put: x onto sharding's mesh (its client, or the default
    one); a pytree (tuples, lists, dicts) of arrays goes leaf by leaf; a bare
    PartitionSpec is one over the mesh of set_mesh / use_mesh; no sharding:
    replicated over that mesh, or without one on the default device (a mesh
    of the cluster's first device, as JAX's device_put(x)). Inside a traced
    function it is a reshard (x as it is without a sharding), as JAX's.
    donate= and may_alias= are taken (a new Array is made either way);
    device= is JAX's older name of the sharding."""
    from . import _trace
    del donate, may_alias, src
    if sharding is None and device is not None:
        sharding = device
    if _trace._is_tree(x) and (_trace._is_tree(sharding) or not isinstance(x, (dict, list,
                                                                             tuple))):
        # a pytree of shardings (a prefix), or a registered node (a key array) leaf by leaf
        shs = _trace._prefix_leaves(sharding, x, "device_put's shardings")
        leaves = [v for v, _ in _trace._tree_leaves(x, "x")]
        return _trace._tree_build(x, iter([device_put(v, s, name, replicas)
                                           for v, s in zip(leaves, shs)]))
    b = getattr(_trace._state, "builder", None)
    if b is not None:
        if isinstance(sharding, Device):  # JAX: refused in a shard_map run at once, else nothing
            if b.kind == "shard_map" and b.outer is None:
                raise ValueError(f"device_put with explicit device not allowed within "
                                 f"shard_map-decorated functions, but got device {sharding}")
            return x
        if isinstance(x, dict):
            return type(x)((k, device_put(v, sharding)) for k, v in x.items())
        if type(x) in (tuple, list):
            return type(x)(device_put(v, sharding) for v in x)
        if sharding is None:
            return x
        _trace._to_sharding_mesh(sharding)
        from .numpy import reshard
        return reshard(x, getattr(sharding, "spec", sharding))
    if sharding is None and isinstance(x, Array):  # already placed: kept there, as JAX's
        return x
    if sharding is None:
        mesh = get_mesh() or _default_mesh()
        if mesh is None:
            raise InvalidArgument("device_put without a sharding needs a mesh or a cluster: "
                                  "shmap.connect() or shmap.local_cluster(), or pass a "
                                  "NamedSharding")
        sharding = NamedSharding(mesh, P())
    sharding = _sharding_of(sharding)
    if isinstance(x, dict):
        return type(x)((k, device_put(v, sharding)) for k, v in x.items())
    if type(x) in (tuple, list):
        return type(x)(device_put(v, sharding) for v in x)
    unreduced = getattr(getattr(sharding, "spec", None), "unreduced", None)
    if isinstance(x, Array) and x.sharding.spec.unreduced and name is None and \
            isinstance(sharding, NamedSharding) and getattr(sharding.mesh, "_devices", None) and \
            x.sharding.mesh._devices != sharding.mesh._devices and \
            _padded(x.sharding.spec, x.ndim) == _padded(sharding.spec, x.ndim):
        return _move_unreduced(x, sharding)
    if unreduced and name is None and replicas == 1 and not (
            isinstance(x, Array) and set(x.sharding.spec.unreduced or ()) >= set(unreduced)):
        # to partial sums: placed without them, then a program's reshard (JAX's:
        # the first device along the unreduced axes holds the value, the others zeros)
        from .numpy import reshard
        spec = sharding.spec
        if spec.unreduced_kind is not UnreducedKind.sum:
            raise NotImplementedError(f"device_put to an unreduced sharding of kind "
                                      f"{spec.unreduced_kind.name}: only partial sums are made "
                                      f"of a whole value (got {spec})")
        base = x if isinstance(x, Array) else device_put(
            x, NamedSharding(sharding.mesh, P(*spec)), name, replicas)
        return reshard(base, sharding)
    if isinstance(x, Array):
        return x.reshard(sharding, name)
    return _client_for(sharding.mesh).device_put(x, sharding, name, replicas)


def device_get(x):
    """jax.device_get: the Arrays of a pytree as numpy arrays (anything else
    as it is)."""
    if isinstance(x, dict):
        return type(x)((k, device_get(v)) for k, v in x.items())
    if type(x) in (tuple, list):
        return type(x)(device_get(v) for v in x)
    return x.to_numpy() if isinstance(x, Array) else x


def make_array_from_callback(shape, sharding, data_callback, dtype=None):
    """jax.make_array_from_callback: an Array of shape laid out by sharding,
    each device's block data_callback(index) (index: the block's tuple of
    slices of the whole array), called once per distinct block."""
    sharding = _sharding_of(sharding, "make_array_from_callback")
    shape = tuple(int(n) for n in shape)
    full, seen = None, set()
    for index in sharding.devices_indices_map(shape).values():
        key = tuple((sl.start, sl.stop) for sl in index)
        if key in seen:
            continue
        seen.add(key)
        block = np.asarray(data_callback(index))
        if full is None:
            full = np.empty(shape, dtype or block.dtype)
        want = tuple(len(range(*sl.indices(n))) for sl, n in zip(index, shape))
        if block.shape != want:
            raise ValueError(f"Expected shard shape {want} doesn't match the single device "
                             f"array shape {block.shape}. Shape of Array is {shape} with "
                             f"sharding {sharding}")
        full[index] = block
    return device_put(full, sharding)


def make_array_from_single_device_arrays(shape, sharding, arrays, *, dtype=None):
    """jax.make_array_from_single_device_arrays: an Array of shape laid out
    by sharding from each device's block (numpy arrays or Arrays), in the
    order of the sharding's devices (the mesh's, flattened), as
    addressable_shards lists them."""
    sharding = _sharding_of(sharding, "make_array_from_single_device_arrays")
    shape = tuple(int(n) for n in shape)
    index = sharding.devices_indices_map(shape)
    order = list(getattr(sharding.mesh, "_devices", None) or index)
    if len(arrays) != len(order):
        raise ValueError(f"The number of arrays ({len(arrays)}) does not match the number of "
                         f"devices of the sharding ({len(order)})")
    full = None
    for dev, block in zip(order, arrays):
        block = np.asarray(block)
        if full is None:
            full = np.empty(shape, dtype or block.dtype)
        full[index[dev]] = block
    return device_put(full, sharding)


def make_array_from_process_local_data(sharding, local_data, global_shape=None):
    """jax.make_array_from_process_local_data: one Python process drives the
    cluster, so its data is the whole array."""
    local_data = np.asarray(local_data)
    if global_shape is not None and tuple(global_shape) != local_data.shape:
        raise ValueError(f"global_shape {tuple(global_shape)} is not the data's shape "
                         f"{local_data.shape}: one process holds the whole array here")
    return device_put(local_data, sharding)


class SingleDeviceSharding(NamedSharding):
    """jax.sharding.SingleDeviceSharding(device): the whole array on that
    device (a mesh of it alone, as device_put(x, device) places it)."""

    def __init__(self, device, *, memory_kind=None):
        s = _sharding_of(device if isinstance(device, Device) else
                         next(d for d in devices() if d == device))
        super().__init__(s.mesh, s.spec, memory_kind=memory_kind)
        self._device = device

    def __repr__(self):
        return f"SingleDeviceSharding(device={self._device!r})"


def block_until_ready(x):
    """jax.block_until_ready: x itself, as an Array is ready once made (a
    job's results when the call returns)."""
    return x


def _find_coordinator():
    for cand in (os.environ.get("SHMAP_COORDINATOR_BIN"),
                 os.path.join(os.environ.get("SHMAP_BIN_DIR", ""), "shmap-coordinator"),
                 os.path.join(os.path.dirname(_shmap.__file__), "..", "server",
                              "shmap-coordinator"),
                 shutil.which("shmap-coordinator")):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    raise FailedPrecondition("shmap-coordinator not found: set SHMAP_COORDINATOR_BIN or "
                             "SHMAP_BIN_DIR, or put it on the PATH")


def _read_text(path):
    with open(path) as f:
        return f.read()


class local_cluster:
    """The embedded default as a context manager: a coordinator with local
    workers on a free loopback port, stopped on exit.

        with shmap.local_cluster(workers=2, devices_per_worker=4) as c:
            x = c.device_put(np.arange(8.), NamedSharding(c.make_mesh((8,), ('i',)), P('i')))

    The coordinator's log (its workers' lines too) goes to a file removed on
    exit; with log=PATH it goes to PATH instead, which is kept (appended to).
    """

    def __init__(self, workers=2, devices_per_worker=4, timeout=30, log=None):
        self.workers, self.devices_per_worker, self.timeout = workers, devices_per_worker, timeout
        self._log = os.fspath(log) if log is not None else None
        self.log_path = self.proc = self.client = None

    def __enter__(self):
        self.dir = tempfile.mkdtemp(prefix="shmap-py-")
        port_file = os.path.join(self.dir, "port")
        self.log_path = self._log or os.path.join(self.dir, "coordinator.log")
        self.log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [_find_coordinator(), "--listen", "127.0.0.1:0", "--port-file", port_file,
             "--local-workers", str(self.workers), "--devices-per-worker",
             str(self.devices_per_worker),
             # a Python process killed (or crashed) inside the with block takes the
             # cluster with it: nothing else would ever stop it
             "--exit-with-parent"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + self.timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                break
            port = _read_text(port_file).strip() if os.path.exists(port_file) else ""
            if port:
                try:
                    c = Client("127.0.0.1:" + port)
                    if len(c.devices()) == self.workers * self.devices_per_worker:
                        self.client = c
                        _default[:] = [c]
                        return c
                    c.close()
                except ShmapError:
                    pass
            time.sleep(0.05)
        self.log.flush()
        text = _read_text(self.log_path)  # before _stop removes it
        self._stop()
        raise Unavailable("the local cluster did not start:\n" + text)

    def _stop(self):
        if self.client:
            self.client.close()
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __exit__(self, *exc):
        self._stop()


def _type_axes(t):
    """{'V': {...}, 'U': {...}, 'R': {...}, 'kind': 'sum'}: the mesh axes of
    a type string's {V:..., U:..., R:...} (U_max:..., U_min:...: unreduced
    of that kind); t a type string or a value with a .type."""
    out = {"U": set(), "V": set(), "R": set(), "kind": "sum"}
    m = re.search(r"\{(.*)\}\s*$", str(t if isinstance(t, str) else getattr(t, "type", "") or ""))
    for part in (m.group(1).split(", ") if m else ()):
        k, _, axes = part.partition(":")
        if k.startswith("U_"):
            k, out["kind"] = "U", k[2:]
        if k in out:
            out[k].update(a for a in axes.split(",") if a)
    return out


class _Type(str):
    """What jax.typeof gives: the type string it prints (f32[8@i,16@j],
    compared as a string) with the aval's attributes: shape, dtype, ndim,
    sharding (a NamedSharding of the value's mesh and the spec over its
    Explicit axes, with its unreduced axes), vma (the mesh axes a shard_map
    block varies over) and weak_type."""

    def __new__(cls, text, mesh=None, shape=None, dtype=None, weak=False):
        t = super().__new__(cls, text)
        t._mesh, t._shape, t._dtype, t.weak_type = mesh, shape, dtype, bool(weak)
        return t

    @property
    def shape(self):
        if self._shape is not None:
            return tuple(self._shape)
        from ._trace import _dims
        return tuple(int(d.split("@")[0]) for d in _dims(self)) if "[" in self else ()

    @property
    def dtype(self):
        return np.dtype(self._dtype if self._dtype is not None else
                        _DTYPES.get(self.split("[")[0], self.split("[")[0]))

    ndim = property(lambda self: len(self.shape))

    def _attrs(self):
        return _type_axes(self)

    @property
    def vma(self):
        return frozenset(self._attrs()["V"])

    @property
    def sharding(self):
        from ._trace import _spec_entry, _dims
        entries = [_spec_entry(d) for d in _dims(self)] if "[" in self else []  # one per dim
        attrs = self._attrs()
        spec = P(*entries, unreduced=frozenset(attrs["U"]), reduced=frozenset(attrs["R"]),
                 unreduced_kind=attrs["kind"] if attrs["U"] else None)
        return NamedSharding(self._mesh, spec) if self._mesh is not None else spec


def _builder_mesh(b):
    """The abstract mesh of the function b traces, its axis types as they are
    there (Auto in an auto_axes body, Manual over a shard_map body's manual
    axes), as JAX's get_abstract_mesh() in that trace; None with no mesh."""
    mesh = getattr(b, "mesh", None)
    if mesh is None:
        return None
    types = getattr(b, "axis_types", None) or mesh.axis_types
    if getattr(b, "kind", None) == "shard_map":
        manual = b.manual_axes or mesh.axis_names
        types = [AxisType.Manual if a in manual else t for a, t in zip(mesh.axis_names, types)]
    return AbstractMesh(mesh.axis_sizes, mesh.axis_names, tuple(types))


def _context_mesh():
    """JAX's context mesh (get_abstract_mesh()) where an out_sharding= is
    canonicalized: an auto_axes or shard_map body's mesh (_builder_mesh),
    else the mesh of set_mesh / use_mesh (a jit's arguments set none), as
    an AbstractMesh; None when there is none (JAX's empty mesh)."""
    from ._trace import _state
    b = getattr(_state, "builder", None)
    if b is not None and (getattr(b, "axis_types", None) or b.kind == "shard_map"):
        return _builder_mesh(b)
    m = get_mesh()
    return None if m is None else m.abstract_mesh


def _canonicalize_sharding(sharding, api_name, check_mesh_consistency=True):
    """JAX's canonicalize_sharding of an out_sharding= given to api_name: a
    NamedSharding's mesh must be the context's (unless both are all Auto),
    and neither it nor a PartitionSpec may name Auto or Manual axes (JAX's
    ValueErrors). Returns the NamedSharding, on the context mesh for a
    PartitionSpec; a bare spec with no context mesh, which JAX refuses, is
    returned unchecked (taken over the arguments' mesh); None for None."""
    if sharding is None:
        return None
    if not isinstance(sharding, (NamedSharding, PartitionSpec)):
        raise TypeError(f"`out_sharding` argument of {api_name} only supports instances of "
                        f"`NamedSharding` or `PartitionSpec`. Got {sharding} of type: "
                        f"{type(sharding)}")
    cur = _context_mesh()
    if isinstance(sharding, PartitionSpec):
        if cur is None:  # (JAX's ValueError; shmap takes it over the arguments' mesh)
            return sharding
        sharding = NamedSharding(cur, sharding)
    else:
        mesh = sharding.mesh.abstract_mesh
        if mesh.are_all_axes_auto and (cur is None or cur.are_all_axes_auto):
            check_mesh_consistency = False
        if check_mesh_consistency and cur is not None and mesh != cur:
            raise ValueError(f"Context mesh {cur} should match the mesh of sharding {mesh} "
                             f"passed to {api_name}.")
    types = dict(zip(sharding.mesh.axis_names, sharding.mesh.axis_types))
    for a in _spec_axes(sharding.spec) + sorted(sharding.spec.unreduced):
        if types.get(a) in (Auto, AxisType.Manual):
            raise ValueError(f"PartitionSpec passed to {api_name} cannot contain axis names "
                             f"that are of type Auto or Manual. Got PartitionSpec: "
                             f"{sharding.spec} with axis name: {a} of type: "
                             f"AxisType.{types[a]}.")
    return sharding


def typeof(x):
    """jax.typeof: the value's type, which prints (and compares) as the
    string JAX prints, f32[8@i,16@j], and has the aval's shape, dtype,
    sharding and vma."""
    t = getattr(x, "type", None)
    if t is None:
        raise InvalidArgument(f"typeof takes a shmap Array or a traced value, got {type(x)}")
    mesh = None
    if isinstance(x, Array):
        mesh = x.sharding.mesh.abstract_mesh
    else:
        mesh = _builder_mesh(getattr(x, "_owner", None))
    try:
        shape = tuple(x.shape)
    except Exception:  # noqa: BLE001 (a value whose shape is not known: parsed from t)
        shape = None
    return _Type(t, mesh, shape, None, getattr(x, "weak_type", False))


class ShapeDtypeStruct:
    """jax.ShapeDtypeStruct: an array's shape, dtype and (optionally)
    sharding without its values, for shmap.eval_shape and for tracing
    with .lower() (a call needs values: Arrays or numpy arrays)."""

    def __init__(self, shape, dtype, sharding=None, weak_type=False, _type=None):
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)
        if isinstance(sharding, PartitionSpec):
            sharding = _sharding_of(sharding, "ShapeDtypeStruct")
        self.sharding = sharding
        self.weak_type = weak_type
        self._type = _type  # eval_shape of traced values: their type, varying axes too

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))

    @property
    def type(self):
        """The type string (f32[8@i,4]), given a sharding; replicated
        without."""
        if self._type is not None:
            return self._type
        name = _dtype_name(self.dtype)
        if self.sharding is None:
            return f"{name}[{','.join(map(str, self.shape))}]"
        t = _call(_shmap.sharding_info, self.sharding.mesh._c(), repr(self.sharding.spec),
                  self.shape)["type"]
        return name + t[t.index("["):]

    def __repr__(self):
        sh = f", sharding={self.sharding!r}" if self.sharding is not None else ""
        return f"ShapeDtypeStruct(shape={self.shape}, dtype={self.dtype.name}{sh})"

    def __eq__(self, other):
        return (isinstance(other, ShapeDtypeStruct) and
                (self.shape, self.dtype, self.sharding) ==
                (other.shape, other.dtype, other.sharding))

    __hash__ = None


def _sharding_picture(shape, sharding):
    """The layout diagram of an array of shape laid out by sharding."""
    return _call(_shmap.sharding_info, sharding.mesh._c(), repr(sharding.spec), shape)["diagram"]


def visualize_array_sharding(x, use_color=False):
    """Prints the layout diagram of an Array (and returns it)."""
    d = _sharding_picture(x.shape, x.sharding)
    print(d, end="")
    return d
