"""jax.random for shmap: JAX's default PRNG (threefry2x32, with JAX's
default jax_threefry_partitionable=True since 0.5) and its samplers, bit
for bit, computed here with numpy's uint32 arithmetic.

    key = shmap.random.key(0)
    key, sub = shmap.random.split(key)
    w = shmap.random.normal(sub, (784, 512)) * 0.01   # the values JAX gives

Keys are numpy data here (key(seed) a KeyArray, PRNGKey(seed) JAX's raw
uint32[2]), and the samplers return what shmap.numpy's creation functions
return: numpy arrays outside a trace with no mesh set, replicated Arrays
on the mesh of set_mesh / use_mesh, an Array of that sharding with
out_sharding=, and inside a jit body a constant of the program (as a numpy
constant is). The op table has no uint32, so a key passed to a jit enters
it as int64 key data: split, fold_in, uniform, normal, bernoulli, randint
and permutation then run the same hash with int64 ops in the program (the
_t_ functions);
the other samplers refuse a traced key with InvalidArgument.

Dtypes as JAX's defaults (jax_enable_x64 off): float32 and int32 unless
dtype= says; an explicit float64 or int64 draws as JAX does with x64 on
(64-bit bits). Seeds keep their low 32 bits, and numpy values whose dtype
becomes the result's (bernoulli's p, categorical's logits, the arrays of
permutation and choice) are canonicalised as JAX's x64-off jnp.asarray
does (float64 -> float32, int64 -> int32)."""
import contextlib
import math
import numbers
import threading
from collections.abc import Sequence

import numpy as np

from . import _trace
from ._core import (Array, InvalidArgument, NamedSharding, P, ProgramError, _NAMES,
                    _dtype_name, _sharding_of, device_put, get_mesh)

__all__ = ["KeyArray", "PRNGKey", "bernoulli", "bits", "categorical", "cauchy", "choice",
           "clone", "exponential", "fold_in", "gumbel", "key", "key_data", "key_impl",
           "laplace", "logistic", "normal", "permutation", "rademacher", "randint",
           "shuffle", "split", "threefry_partitionable", "truncated_normal", "uniform",
           "wrap_key_data"]

_U32 = np.uint32
_U64 = np.uint64
_UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}

# ---- the threefry2x32 hash ---------------------------------------------------

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _threefry2x32(k1, k2, x0, x1):
    """JAX's threefry2x32_p (Random123's Threefry-2x32, 20 rounds) on
    broadcast uint32 arrays: the hashes of the pairs (x0, x1) under the key
    (k1, k2), as two arrays."""
    shape = np.broadcast_shapes(np.shape(k1), np.shape(k2), np.shape(x0), np.shape(x1))
    k1, k2 = (np.broadcast_to(np.asarray(k, _U32), shape).reshape(-1) for k in (k1, k2))
    x0, x1 = (np.array(np.broadcast_to(np.asarray(x, _U32), shape).reshape(-1)) for x in (x0, x1))
    ks = (k1, k2, k1 ^ k2 ^ _U32(0x1BD11BDA))
    x0 += ks[0]
    x1 += ks[1]
    tmp = np.empty_like(x1)
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x0 += x1
            np.left_shift(x1, _U32(r), out=tmp)
            x1 >>= _U32(32 - r)
            x1 |= tmp
            x1 ^= x0
        x0 += ks[(i + 1) % 3]
        x1 += ks[(i + 2) % 3]
        x1 += _U32(i + 1)
    return x0.reshape(shape), x1.reshape(shape)


def _threefry_2x32(keypair, count):
    """JAX's threefry_2x32(keypair, count): count (uint32, any shape) read
    flat, padded to even length, its first half paired with its second."""
    count = np.asarray(count, _U32)
    flat = count.reshape(-1)
    odd = flat.size % 2
    if odd:
        flat = np.concatenate([flat, np.zeros(1, _U32)])
    half = flat.size // 2
    y0, y1 = _threefry2x32(keypair[0], keypair[1], flat[:half], flat[half:])
    out = np.concatenate([y0, y1])
    return (out[:-1] if odd else out).reshape(count.shape)


def _iota_2x32(shape):
    """JAX's iota_2x32_shape: the row-major index of each element of shape
    as a uint64, in two uint32 arrays (high word, low word)."""
    n = math.prod(shape)
    idx = np.arange(n, dtype=_U64).reshape(shape)
    return (idx >> _U64(32)).astype(_U32), (idx & _U64(0xFFFFFFFF)).astype(_U32)


# ---- jax_threefry_partitionable --------------------------------------------------

_mode = threading.local()
_default_mode = [True]  # config.update('jax_threefry_partitionable', ...)


def _partitionable():
    return getattr(_mode, "on", _default_mode[0])


@contextlib.contextmanager
def threefry_partitionable(value=True):
    """jax.threefry_partitionable(value), as a context manager of this
    module: with False, split and the random bits are JAX's from before
    0.5 (threefry_2x32 over an iota of counts); fold_in is the same in
    both. True is JAX's default, and this module's."""
    prev = getattr(_mode, "on", None)
    _mode.on = bool(value)
    try:
        yield
    finally:
        if prev is None:  # back to config's jax_threefry_partitionable
            del _mode.on
        else:
            _mode.on = prev


def _split_data(k, shape):
    if _partitionable():
        hi, lo = _iota_2x32(shape)
        b1, b2 = _threefry2x32(k[0], k[1], hi, lo)
        return np.stack([b1, b2], axis=b1.ndim)
    num = math.prod(shape)
    return _threefry_2x32(k, np.arange(num * 2, dtype=_U32)).reshape(*shape, 2)


def _fold_in_data(k, d):
    return _threefry_2x32(k, np.array([0, d], _U32))


def _random_bits(k, bit_width, shape):
    """JAX's threefry_random_bits: uint{bit_width} of shape from key data k."""
    shape = tuple(shape)
    if _partitionable():
        if not shape:
            hi = lo = np.zeros((), _U32)
        else:
            hi, lo = _iota_2x32(shape)
        b1, b2 = _threefry2x32(k[0], k[1], hi, lo)
        if bit_width == 64:
            return (b1.astype(_U64) << _U64(32)) | b2.astype(_U64)
        return (b1 ^ b2).astype(_UINT[bit_width])
    size = math.prod(shape)
    max_count = -(-bit_width * size // 32)
    if max_count >= np.iinfo(_U32).max:
        raise NotImplementedError("random bits of more than 2**32 words in the "
                                  "non-partitionable mode")
    words = _threefry_2x32(k, np.arange(max_count, dtype=_U32))
    if bit_width == 64:
        hi, lo = np.split(words, 2)
        out = (hi.astype(_U64) << _U64(32)) | lo.astype(_U64)
    elif bit_width == 32:
        out = words
    else:  # each word's bit_width-bit pieces, the low ones first
        per = 32 // bit_width
        shifts = (np.arange(per, dtype=_U32) * _U32(bit_width))[None, :]
        out = ((words[:, None] >> shifts) & _U32((1 << bit_width) - 1)).reshape(-1)
        out = out.astype(_UINT[bit_width])[:size]
    return out.reshape(shape)


# ---- keys --------------------------------------------------------------------


class _KeyDType:
    """The dtype of a KeyArray, printed as JAX prints it."""
    name = "key<fry>"

    def __repr__(self):
        return self.name

    __str__ = __repr__

    def __eq__(self, other):
        return isinstance(other, _KeyDType) or other == self.name

    def __hash__(self):
        return hash(self.name)


_KEY_DTYPE = _KeyDType()


class KeyArray:
    """An array of threefry2x32 keys (JAX's typed key array, key<fry>): the
    shape of the keys, over key data of shape (*shape, 2), as JAX's key
    arrays are laid over theirs. The data is uint32 numpy on the host (what
    key(seed) and split make), and int64 on the devices (an Array: a key
    device_put, resharded or returned by a jit) and in programs (a traced
    value: a key passed to a jit, closed over, or made there), as shmap's
    arrays hold no uint32; a sharding's spec covers the keys' dimensions,
    the trailing 2 replicated. Indexing, iteration (key, sub = split(key)),
    reshape, squeeze, == and the shape and layout ops of shmap.numpy
    (broadcast_to, where, concatenate, reshard, device_put, ...) work as on
    JAX's; arithmetic refuses keys, and key_data(keys) is the data."""

    __slots__ = ("_data",)
    __hash__ = None

    def __init__(self, data):
        if isinstance(data, np.ndarray) and data.dtype != _U32:  # int64 data back on the host
            data = data.astype(_U32)
        self._data = data

    @property
    def shape(self):
        return tuple(self._data.shape)[:-1]

    @property
    def ndim(self):
        return len(self._data.shape) - 1

    @property
    def size(self):
        return math.prod(self.shape)

    @property
    def dtype(self):
        return _KEY_DTYPE

    @property
    def type(self):
        """The type string JAX prints for it, key<fry>[8@x]: its data's
        without the trailing 2."""
        d = self._data
        if isinstance(d, np.ndarray):
            return f"key<fry>[{','.join(map(str, self.shape))}]"
        t = d.type
        dims = _trace._dims(t)
        return f"key<fry>[{','.join(dims[:-1])}]{t[t.rindex(']') + 1:]}"

    @property
    def name(self):
        """A traced key's name in the program (its data's): what makes
        shmap.numpy take it as a traced value."""
        if not _is_traced(self):
            raise AttributeError("a key array that is not traced has no name")
        return self._data.name

    @property
    def _owner(self):
        return getattr(self._data, "_owner", None)

    @property
    def weak_type(self):
        return False

    @property
    def sharding(self):
        """Its data's sharding with the spec over the keys' dimensions (JAX's
        key array's: P() for a key on the devices); a traced key has none,
        as JAX's."""
        d = self._data
        if isinstance(d, np.ndarray):
            raise AttributeError("a key array on the host has no sharding: "
                                 "shmap.device_put(key, sharding) places it")
        s = d.sharding
        spec = tuple(s.spec)[:self.ndim]
        return NamedSharding(s.mesh, P(*spec, *(None,) * (self.ndim - len(spec)),
                                       unreduced=s.spec.unreduced))

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d key array")
        return (self[i] for i in range(self.shape[0]))

    def __getitem__(self, idx):
        idx = idx if isinstance(idx, tuple) else (idx,)
        if any(isinstance(i, KeyArray) for i in idx):
            raise TypeError("a key array cannot index")
        return KeyArray(self._data[idx + (slice(None),)])

    def reshape(self, *shape, out_sharding=None):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        if isinstance(self._data, np.ndarray):
            return KeyArray(self._data.reshape(tuple(shape) + (2,)))
        return _jnp().reshape(self, tuple(shape), out_sharding=out_sharding)

    def ravel(self):
        return self.reshape(-1)

    flatten = ravel

    def squeeze(self, axis=None):
        return _jnp().squeeze(self, axis)

    def transpose(self, *axes):
        axes = axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes
        return _jnp().transpose(self, tuple(axes) if axes else None)

    @property
    def T(self):
        return self.transpose()

    def copy(self):
        d = self._data
        return KeyArray(d.copy() if isinstance(d, np.ndarray) else d)

    def block_until_ready(self):
        return self

    def __eq__(self, other):
        if not isinstance(other, KeyArray):
            return NotImplemented
        if isinstance(self._data, np.ndarray) and isinstance(other._data, np.ndarray):
            return np.all(self._data == other._data, axis=-1)
        return _jnp().equal(self, other)

    def __ne__(self, other):
        if not isinstance(other, KeyArray):
            return NotImplemented
        if isinstance(self._data, np.ndarray) and isinstance(other._data, np.ndarray):
            return np.any(self._data != other._data, axis=-1)
        return _jnp().not_equal(self, other)

    def __bool__(self):
        raise TypeError("key array cannot be converted to boolean.")

    def __array__(self, dtype=None, copy=None):
        raise TypeError("JAX array with PRNGKey dtype cannot be converted to a NumPy array. "
                        "Use jax.random.key_data(arr) if you wish to extract the underlying "
                        "integer array.")

    def __repr__(self):
        d = self._data
        if _is_traced(self):
            return f"Traced<{self.type}>"
        data = d if isinstance(d, np.ndarray) else d.to_numpy().astype(_U32)
        return f"Array({self.shape}, dtype={self.dtype.name}) overlaying:\n{data}"


def _key_arith(op):
    def refuse(self, *other):
        raise TypeError(f"{op} does not accept dtype key<fry>. Accepted dtypes are subtypes of "
                        f"number, bool.")
    return refuse


for _m, _op in (("add", "add"), ("sub", "sub"), ("mul", "mul"), ("truediv", "div"),
                ("floordiv", "floor_divide"), ("mod", "rem"), ("pow", "pow"), ("and", "and"),
                ("or", "or"), ("xor", "xor"), ("lshift", "shift_left"),
                ("rshift", "shift_right_arithmetic"), ("matmul", "dot_general")):
    setattr(KeyArray, f"__{_m}__", _key_arith(_op))
    setattr(KeyArray, f"__r{_m}__", _key_arith(_op))
for _m, _op in (("lt", "lt"), ("le", "le"), ("gt", "gt"), ("ge", "ge"), ("neg", "neg"),
                ("pos", "pos"), ("abs", "abs"), ("invert", "not")):
    setattr(KeyArray, f"__{_m}__", _key_arith(_op))


def _key_flatten(k):
    """A key array as a pytree node of its data (how jit, vmap, scan and
    shard_map take and return keys, and reshard and device_put place
    them): host data as int64 (in a program, a constant of it, uploaded
    once per trace, as a numpy constant is)."""
    d = k._data
    if isinstance(d, np.ndarray):
        b = _in_trace()
        if b is None:
            return (d.astype(np.int64),), None
        got = b.constants.get(id(d))
        if got is None or got[0] is not d:
            got = b.constants[id(d)] = (d, _trace._constant(d.astype(np.int64)))
        return (got[1],), None
    return (d,), None


_trace._NODES[KeyArray] = (_key_flatten, lambda _, data: KeyArray(data[0]))
KeyArray._pytree_leaf = True  # ... but a leaf to tree_util's users, as JAX's key arrays


# ---- ops on key arrays -------------------------------------------------------
# JAX's key arrays take the ops that move, select and lay out elements; they
# act on the key data with its trailing 2 left in place (an axis of the keys
# is the same axis of the data). _trace._call_op hands them any op given a
# KeyArray: on the host, numpy's on the uint32 data; else the op's on the
# int64 data (run at once on Arrays, or traced).


def _key_axes(axis, nd, name):
    axes = (axis,) if isinstance(axis, numbers.Integral) else tuple(axis)
    for a in axes:
        if not -nd <= a < nd:
            raise ValueError(f"{name}: axis {a} is out of bounds for a key array of rank {nd}")
    return tuple(int(a) % nd for a in axes)


def _k_broadcast_to(run, nd, array, shape):
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(d) for d in shape)
    return run("broadcast_to", array, shape + (2,))


def _k_reshape(run, nd, a, shape, out_sharding=None):
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(d) for d in shape)
    if -1 in shape:  # the data's own -1 would take the trailing 2 in
        n, known = math.prod(a.shape[:-1]), -math.prod(shape)
        shape = tuple(n // known if d == -1 else d for d in shape)
    return run("reshape", a, shape + (2,), out_sharding=out_sharding)


def _k_transpose(run, nd, a, axes=None):
    axes = tuple(reversed(range(nd))) if axes is None else _key_axes(axes, nd, "transpose")
    return run("transpose", a, axes + (nd,))


def _k_expand_dims(run, nd, a, axis):
    n = 1 if isinstance(axis, numbers.Integral) else len(axis)
    return run("expand_dims", a, _key_axes(axis, nd + n, "expand_dims"))


def _k_squeeze(run, nd, a, axis=None):
    shape = a.shape[:-1]
    axes = tuple(d for d, n in enumerate(shape) if n == 1) if axis is None else \
        _key_axes(axis, nd, "squeeze")
    return run("squeeze", a, axes)


def _k_where(run, nd, condition, x, y):
    if not (isinstance(x, _KeyData) and isinstance(y, _KeyData)):
        raise TypeError("where: x and y must both be key arrays (key<fry>), or neither")
    if not hasattr(condition, "shape"):
        condition = np.asarray(condition)
    if condition.shape:
        condition = run("expand_dims", condition, len(condition.shape))  # against the 2
    return run("where", condition, x, y)


def _k_concatenate(run, nd, arrays, axis=0):
    arrays = tuple(arrays)
    if any(not isinstance(a, _KeyData) for a in arrays):
        raise TypeError("concatenate: key arrays are joined with key arrays only")
    if axis is None:
        arrays, axis = tuple(run("reshape", a, (-1, 2)) for a in arrays), 0
    return run("concatenate", arrays, axis=_key_axes(axis, nd, "concatenate")[0])


def _k_take(run, nd, a, indices, axis=None, mode=None, out_sharding=None):
    if axis is None:
        a, axis, nd = run("reshape", a, (-1, 2)), 0, 1
    return run("take", a, indices, axis=_key_axes(axis, nd, "take")[0], mode=mode,
               out_sharding=out_sharding)


def _k_dynamic_slice(run, nd, operand, start_indices, slice_sizes):
    return run("dynamic_slice", operand, list(start_indices) + [0],
               tuple(slice_sizes) + (2,))


def _k_dynamic_update_slice(run, nd, operand, update, start_indices):
    if not isinstance(update, _KeyData):
        raise TypeError("dynamic_update_slice: a key array is updated with keys")
    return run("dynamic_update_slice", operand, update, list(start_indices) + [0])


def _k_layout(op):
    def rule(run, nd, x, spec, *args, **kwargs):
        return run(op, x, spec, *args, **kwargs)  # the spec covers the keys' dimensions
    return rule


def _k_pvary(run, nd, x, axis_name):
    return run("pvary", x, axis_name)


def _k_all_gather(run, nd, x, axis_name, axis=0, tiled=False, **kw):
    return run("all_gather", x, axis_name, axis=_key_axes(axis, nd + (not tiled),
                                                          "all_gather")[0], tiled=tiled, **kw)


def _k_compare(op, red):
    def rule(run, nd, x, y):
        if not (isinstance(x, _KeyData) and isinstance(y, _KeyData)):
            raise TypeError(f"{op}: a key array is compared with key arrays only")
        return run(red, run(op, x, y), axis=nd)
    return rule


_KEY_RULES = {
    "broadcast_to": _k_broadcast_to, "reshape": _k_reshape, "transpose": _k_transpose,
    "expand_dims": _k_expand_dims, "squeeze": _k_squeeze, "where": _k_where,
    "concatenate": _k_concatenate, "take": _k_take, "dynamic_slice": _k_dynamic_slice,
    "dynamic_update_slice": _k_dynamic_update_slice, "reshard": _k_layout("reshard"),
    "with_sharding_constraint": _k_layout("with_sharding_constraint"), "pvary": _k_pvary,
    "all_gather": _k_all_gather, "equal": _k_compare("equal", "all"),
    "not_equal": _k_compare("not_equal", "any"),
}


_ON_DEVICES = {"reshard", "with_sharding_constraint", "pvary", "all_gather"}


class _KeyData:
    """A key array's data standing in for it among an op's arguments."""

    def __init__(self, data):
        self.data = data
        self.shape = tuple(data.shape)


def _key_op(name, args, kwargs):
    """op name of the op table given key arrays (from _trace._call_op): the
    op of _KEY_RULES on their data, a key array of its result (equal and
    not_equal: a bool array); any other op refuses keys with JAX's
    TypeError."""
    rule = _KEY_RULES.get(name)
    if rule is None:
        raise TypeError(f"{name} does not accept dtype key<fry>. Accepted dtypes are subtypes "
                        f"of number, bool.")
    leaves = [a for v in list(args) + list(kwargs.values())
              for a in (v if type(v) in (list, tuple) else (v,))]
    keys = [a for a in leaves if isinstance(a, KeyArray)]
    host = name not in _ON_DEVICES and _in_trace() is None and \
        all(isinstance(k._data, np.ndarray) for k in keys) and \
        not any(isinstance(a, (Array, _trace.Tracer)) for a in leaves)

    def data(v):
        if type(v) in (list, tuple):
            return type(v)(data(e) for e in v)
        if not isinstance(v, KeyArray):
            return v
        d = v._data
        return _KeyData(d if host or not isinstance(d, np.ndarray) else _key_flatten(v)[0][0])

    def raw(v):
        if type(v) in (list, tuple):
            return type(v)(raw(e) for e in v)
        return v.data if isinstance(v, _KeyData) else v

    def run(op, *a, **kw):
        a, kw = raw(a), {k: raw(v) for k, v in kw.items() if v is not None}
        if not host:
            return _KeyData(_trace.make_op(op)(*a, **kw))
        if op == "take":
            return _KeyData(np.take(a[0], a[1], axis=kw["axis"], mode=kw.get("mode", "raise")))
        return _KeyData(getattr(np, op)(*a, **kw))

    out = rule(run, keys[0].ndim, *data(tuple(args)), **{k: data(v) for k, v in kwargs.items()})
    return KeyArray(out.data) if name not in ("equal", "not_equal") else out.data


_trace._key_op = (KeyArray, _key_op)


def _traced_refusal(name, what="key"):
    return InvalidArgument(
        f"shmap.random.{name}: the {what} is a traced value, and {name} draws on the host: "
        f"draw the values outside the jit and pass them as arguments, or use a concrete key "
        f"(a closed-over or static one), whose draws become constants of the program")


def _key_data_of(name, key, allow_batched=False):
    """(uint32 data of shape (..., 2), whether key is a KeyArray), with JAX's
    checks of a key."""
    if isinstance(key, KeyArray):
        data, typed = key._data, True
        if isinstance(data, _trace.Tracer):
            raise _traced_refusal(name)
        if isinstance(data, Array):  # on the devices: fetched, as key data a jit returned
            data = data.to_numpy().astype(_U32)
    elif isinstance(key, _trace.Tracer):
        raise _traced_refusal(name)
    elif isinstance(key, Array):  # key data a jit returned (int64, as jit arguments take it)
        if key.dtype not in (np.int64, np.int32) or tuple(key.shape[-1:]) != (2,):
            raise InvalidArgument(f"shmap.random.{name}: an Array as a key is key data a jit "
                                  f"returned: int64 of shape (..., 2), got {key.type}")
        data, typed = key.to_numpy().astype(np.int64), False
        if ((data < 0) | (data > 0xFFFFFFFF)).any():
            raise InvalidArgument(f"shmap.random.{name}: key data out of uint32's range")
        data = data.astype(_U32)
    elif isinstance(key, (np.ndarray, np.generic)):
        data, typed = np.asarray(key), False
        if data.ndim < 1:
            raise TypeError(f"JAX encountered invalid PRNG key data: expected key_data.ndim "
                            f">= 1; got ndim={data.ndim}")
        if data.shape[-1:] != (2,):
            raise TypeError(f"JAX encountered invalid PRNG key data: expected key_data.shape "
                            f"to end with (2,); got shape={data.shape} for threefry2x32")
        if data.dtype != _U32:
            raise TypeError(f"JAX encountered invalid PRNG key data: expected key_data.dtype "
                            f"= uint32; got dtype={data.dtype}")
    else:
        raise TypeError(f"unexpected PRNG key type {type(key)}")
    if not allow_batched and data.ndim > 1:
        raise ValueError(f"{name} accepts a single key, but was given a key array of shape "
                         f"{data.shape[:-1]} != (): draw from each key in turn")
    return data, typed


def _seed_data(name, seed):
    if isinstance(seed, KeyArray):
        raise TypeError(f"{name} accepts a scalar seed, but was given a PRNG key.")
    if isinstance(seed, _trace.Tracer):  # JAX's threefry_seed in the program (int64 data)
        if tuple(seed.shape):
            raise TypeError(f"{name} accepts a scalar seed, but was given an array of shape "
                            f"{tuple(seed.shape)} != (). Use jax.vmap for batching")
        if not np.issubdtype(np.dtype(seed.dtype), np.integer):
            raise TypeError(f"PRNG key seed must be an integer; got {seed!r}")
        jnp = _jnp()
        low = jnp.astype(seed, np.int64) & 0xFFFFFFFF
        return jnp.stack([jnp.zeros_like(low), low])
    if isinstance(seed, Array):
        seed = seed.to_numpy()
    if np.ndim(seed):
        raise TypeError(f"{name} accepts a scalar seed, but was given an array of shape "
                        f"{np.shape(seed)} != (): make one key per seed")
    if isinstance(seed, numbers.Integral) and not isinstance(seed, np.generic):
        np.int64(seed)  # JAX's OverflowError beyond int64
    elif not np.issubdtype(np.asarray(seed).dtype, np.integer):
        raise TypeError(f"PRNG key seed must be an integer; got {seed!r}")
    # JAX's threefry_seed of the seed canonicalised to int32 (jax_enable_x64 off):
    # the high word 0, the low one the seed's low 32 bits
    return np.array([0, int(seed) & 0xFFFFFFFF], _U32)


def _check_impl(impl):
    if impl is not None and str(impl) not in ("threefry2x32", "key<fry>"):
        raise ValueError(f'unrecognized PRNG implementation "{impl}": shmap has '
                         f'"threefry2x32", JAX\'s default')


def key(seed, *, impl=None):
    """jax.random.key: a key (a KeyArray of shape ()) from an integer seed."""
    _check_impl(impl)
    return KeyArray(_seed_data("key", seed))


def PRNGKey(seed, *, impl=None):
    """jax.random.PRNGKey: a raw key, uint32[2] (numpy)."""
    _check_impl(impl)
    return _seed_data("PRNGKey", seed)


def key_data(keys):
    """jax.random.key_data: the uint32 data of keys (shape (*keys.shape, 2));
    a raw key as it is. Keys on the devices or traced give their int64 data
    (an Array, a traced value), as shmap's arrays hold no uint32."""
    if isinstance(keys, KeyArray) and not isinstance(keys._data, np.ndarray):
        return keys._data
    if isinstance(keys, _trace.Tracer):
        return _t_key("key_data", keys, allow_batched=True)
    data, typed = _key_data_of("key_data", keys, allow_batched=True)
    return data.copy() if typed else data


def wrap_key_data(key_bits_array, *, impl=None):
    """jax.random.wrap_key_data: a KeyArray over uint32 data of shape (..., 2)."""
    _check_impl(impl)
    if isinstance(key_bits_array, KeyArray):
        raise TypeError("wrap_key_data takes uint32 key data, got a key array")
    if isinstance(key_bits_array, _trace.Tracer):
        return KeyArray(_t_key("wrap_key_data", key_bits_array, allow_batched=True))
    if isinstance(key_bits_array, Array):  # int64 data on the devices (key_data's)
        _key_data_of("wrap_key_data", key_bits_array, allow_batched=True)
        return KeyArray(key_bits_array if key_bits_array.dtype == np.int64 else
                        _jnp().astype(key_bits_array, np.int64))
    bits_ = key_bits_array if isinstance(key_bits_array, (_trace.Tracer, Array)) else \
        np.asarray(key_bits_array)
    data, _ = _key_data_of("wrap_key_data", bits_, allow_batched=True)
    return KeyArray(np.array(data))


def key_impl(keys):
    """jax.random.key_impl: 'threefry2x32' (the only one here)."""
    if isinstance(keys, _trace.Tracer):
        _t_key("key_impl", keys, allow_batched=True)
    elif not isinstance(keys, KeyArray):
        _key_data_of("key_impl", keys, allow_batched=True)
    return "threefry2x32"


def clone(key):
    """jax.random.clone: the key itself (no key-reuse checking here)."""
    return key


def split(key, num=2):
    """jax.random.split: num new keys (num an int or a shape); split(key, n)[i]
    is fold_in(key, i), as in JAX's partitionable mode."""
    shape = tuple(int(n) for n in num) if isinstance(num, Sequence) else (int(num),)
    if _is_traced(key):
        out = _t_split(_t_key("split", key), shape)
        return KeyArray(out) if isinstance(key, KeyArray) else out
    data, typed = _key_data_of("split", key)
    out = _split_data(data, shape)
    return KeyArray(out) if typed else out


def fold_in(key, data):
    """jax.random.fold_in: a new key from key and a 32-bit integer."""
    if _is_traced(key) or (isinstance(data, _trace.Tracer) and _in_trace() is not None):
        if np.ndim(data) if not isinstance(data, _trace.Tracer) else data.shape:
            raise TypeError(f"fold_in accepts a scalar, but was given an array of shape "
                            f"{tuple(np.shape(data))} != (): fold in one integer at a time")
        out = _t_fold_in(_t_data("fold_in", key), data)
        return KeyArray(out) if isinstance(key, KeyArray) else out
    k, typed = _key_data_of("fold_in", key)
    if isinstance(data, Array):
        data = data.to_numpy()
    if np.ndim(data):
        raise TypeError(f"fold_in accepts a scalar, but was given an array of shape "
                        f"{np.shape(data)} != (): fold in one integer at a time")
    out = _fold_in_data(k, int(data) & 0xFFFFFFFF)
    return KeyArray(out) if typed else out


# ---- results ---------------------------------------------------------------------


def _in_trace():
    return getattr(_trace._state, "builder", None)


def _place(name, a, out_sharding):
    """A host draw where shmap's creation functions put their results: a
    numpy array outside a trace with no mesh set, a replicated Array on the
    context mesh, an Array of out_sharding, a constant of the jit being
    traced."""
    a = np.asarray(a)
    b = _in_trace()
    if b is None and out_sharding is None and get_mesh() is None:
        return a
    supported = a.dtype in _NAMES
    if not supported:
        if b is None and out_sharding is None:
            return a  # uint32 bits and the like stay numpy, as shmap has no such arrays
        raise InvalidArgument(f"shmap.random.{name} gives {a.dtype}, which shmap arrays cannot "
                              f"hold: draw it outside the traced function (a numpy array) and "
                              f"convert it, or ask for a dtype shmap has")
    if b is None:  # typed as JAX's draws are: one spec entry per dimension
        sharding = _sharding_of(out_sharding) if out_sharding is not None else \
            NamedSharding(get_mesh(), P())
        from .numpy import _full_spec
        return _full_spec(device_put(a, sharding))
    mesh = getattr(b, "mesh", None)
    if b.kind != "jit" or mesh is None:
        raise InvalidArgument(f"shmap.random.{name} in a shard_map body: its values would be a "
                              f"constant, which a shard_map body cannot hold: draw them outside "
                              f"(or in the calling jit) and pass them as an argument")
    spec = P() if out_sharding is None else getattr(out_sharding, "spec", out_sharding)
    k = _trace._client_of([], mesh).device_put(a, NamedSharding(mesh, spec))
    return _trace.Tracer(b.capture(k), k.type, _dtype_name(k.dtype), k.shape)


def _placed(name, x, out_sharding):
    """A result made by shmap ops (a Tracer or an Array) resharded to out_sharding."""
    if out_sharding is None:
        return x
    from . import numpy as jnp
    if isinstance(x, _trace.Tracer) and isinstance(out_sharding, NamedSharding):
        jnp._check_device_count(out_sharding, x)
    return jnp.reshard(x, getattr(out_sharding, "spec", out_sharding)) \
        if isinstance(x, _trace.Tracer) else jnp._full_spec(device_put(x, out_sharding))


def _on_device(v):
    return isinstance(v, (_trace.Tracer, Array))


def _concrete(name, v, what, canon=False):
    """A parameter's value on the host: Arrays fetched, traced values refused;
    with canon, numpy and Python values as JAX's x64-off jnp.asarray makes
    them (float64 -> float32, int64 -> int32), for parameters whose dtype is
    the result's."""
    if isinstance(v, _trace.Tracer):
        raise InvalidArgument(
            f"shmap.random.{name}: {what} is a traced value, and this sampler draws on the host: "
            f"compute {what} outside the jit, or draw the uniform values (shmap.random.uniform, "
            f"a constant of the program) and transform them in the body")
    if isinstance(v, Array):
        return v.to_numpy()
    a = np.asarray(v)
    if not canon:
        return a
    if a.dtype == np.float64:
        return a.astype(np.float32)
    if a.dtype == np.int64:
        return a.astype(np.int32)
    return a


def _shape(shape):
    if shape is None:
        return None
    if isinstance(shape, numbers.Integral):
        return (int(shape),)
    return tuple(int(d) for d in shape)


def _float_dtype(name, dtype):
    from ._core import _canon_dtype
    dt = np.dtype(np.float32 if dtype is None else _canon_dtype(dtype))
    if not np.issubdtype(dt, np.floating):
        raise ValueError(f"dtype argument to `{name}` must be a float dtype, got {dt}")
    return dt


# ---- XLA's float approximations (CHLO's decompositions, as JAX lowers them) -------

_ERFINV32_LT5 = np.array([2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06,
                          0.00021858087, -0.00125372503, -0.00417768164, 0.246640727,
                          1.50140941], np.float32)
_ERFINV32_GE5 = np.array([-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844,
                          0.00573950773, -0.0076224613, 0.00943887047, 1.00167406,
                          2.83297682], np.float32)


def _erf_inv32(x):
    """lax.erf_inv in float32 as XLA computes it (chlo.erf_inv: Giles'
    single-precision polynomials in w = -log1p(-x*x), in that order)."""
    x = np.asarray(x, np.float32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        w = -np.log1p(x * -x)
        lt = w < np.float32(5)
        w = np.where(lt, w - np.float32(2.5), np.sqrt(w) - np.float32(3))
        p = np.where(lt, _ERFINV32_LT5[0], _ERFINV32_GE5[0])
        for i in range(1, 9):
            p = np.where(lt, _ERFINV32_LT5[i], _ERFINV32_GE5[i]) + p * w
        r = p * x
        return np.where(np.abs(x) == np.float32(1), x * np.float32(np.inf), r).astype(np.float32)


_ERFINV64_LT625 = (
    -3.6444120640178196996e-21, -1.685059138182016589e-19, 1.2858480715256400167e-18,
    1.115787767802518096e-17, -1.333171662854620906e-16, 2.0972767875968561637e-17,
    6.6376381343583238325e-15, -4.0545662729752068639e-14, -8.1519341976054721522e-14,
    2.6335093153082322977e-12, -1.2975133253453532498e-11, -5.4154120542946279317e-11,
    1.051212273321532285e-09, -4.1126339803469836976e-09, -2.9070369957882005086e-08,
    4.2347877827932403518e-07, -1.3654692000834678645e-06, -1.3882523362786468719e-05,
    0.0001867342080340571352, -0.00074070253416626697512, -0.0060336708714301490533,
    0.24015818242558961693, 1.6536545626831027356)
_ERFINV64_LT16 = (
    2.2137376921775787049e-09, 9.0756561938885390979e-08, -2.7517406297064545428e-07,
    1.8239629214389227755e-08, 1.5027403968909827627e-06, -4.013867526981545969e-06,
    2.9234449089955446044e-06, 1.2475304481671778723e-05, -4.7318229009055733981e-05,
    6.8284851459573175448e-05, 2.4031110387097893999e-05, -0.0003550375203628474796,
    0.00095328937973738049703, -0.0016882755560235047313, 0.0024914420961078508066,
    -0.0037512085075692412107, 0.005370914553590063617, 1.0052589676941592334,
    3.0838856104922207635)
_ERFINV64_GE16 = (
    -2.7109920616438573243e-11, -2.5556418169965252055e-10, 1.5076572693500548083e-09,
    -3.7894654401267369937e-09, 7.6157012080783393804e-09, -1.4960026627149240478e-08,
    2.9147953450901080826e-08, -6.7711997758452339498e-08, 2.2900482228026654717e-07,
    -9.9298272942317002539e-07, 4.5260625972231537039e-06, -1.9681778105531670567e-05,
    7.5995277030017761139e-05, -0.00021503011930044477347, -0.00013871931833623122026,
    1.0103004648645343977, 4.8499064014085844221)


def _erf_inv64_with(xp, x, const):
    """erf_inv in float64 as XLA computes it (chlo.erf_inv's three
    polynomials of Giles' double-precision approximation), written once for
    two array libraries: xp numpy (the host's draws) or shmap.numpy
    (lax.erf_inv, traced); const(v) is the float64 constant v of x's
    shape in xp."""
    w = -xp.log1p(x * -x)
    lt625, lt16 = w < 6.25, w < 16.0

    def coef(i):
        c = const(_ERFINV64_LT625[i])
        if i < 19:
            c = xp.where(lt625, c, const(_ERFINV64_LT16[i]))
        if i < 17:
            c = xp.where(lt16, c, const(_ERFINV64_GE16[i]))
        return c
    w = xp.where(lt625, w - 3.125, xp.sqrt(w) - xp.where(lt16, const(3.25), const(5.0)))
    p = coef(0)
    for i in range(1, 17):
        p = coef(i) + p * w
    for i in range(17, 19):
        p = xp.where(lt16, coef(i) + p * w, p)
    for i in range(19, 23):
        p = xp.where(lt625, coef(i) + p * w, p)
    return xp.where(xp.abs(x) == 1.0, x * np.inf, p * x)


def _erf_inv64(x):
    """lax.erf_inv in float64 on the host (_erf_inv64_with in numpy)."""
    x = np.asarray(x, np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return _erf_inv64_with(np, x, lambda v: np.full(x.shape, v))


def _erf_inv(x):
    x = np.asarray(x)
    if x.dtype == np.float64:
        return _erf_inv64(x)
    return _erf_inv32(x).astype(x.dtype)  # float16 upcast to float32, as XLA does


_ERF32_ALPHA = np.array([-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
                         -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
                         -1.60960333262415e-02], np.float32)
_ERF32_BETA = np.array([-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
                        -7.37332916720468e-03, -1.42647390514189e-02], np.float32)


def _erf(x):
    """lax.erf: in float32 (and float16, upcast) CHLO's rational approximation
    x * alpha(x^2) / beta(x^2) on x clamped to [-4, 4]; float64 libm's."""
    x = np.asarray(x)
    if x.dtype == np.float64:
        return np.vectorize(math.erf, otypes=[np.float64])(x)
    dt = x.dtype
    x = np.clip(x.astype(np.float32), np.float32(-4), np.float32(4))
    x2 = x * x
    a = np.full(x.shape, _ERF32_ALPHA[0])
    for c in _ERF32_ALPHA[1:]:
        a = a * x2 + c
    b = np.full(x.shape, _ERF32_BETA[0])
    for c in _ERF32_BETA[1:]:
        b = b * x2 + c
    return np.clip(x * a / b, np.float32(-1), np.float32(1)).astype(dt)


# ---- the samplers, on key data (JAX's _uniform, _randint, ... ) ------------------


def _uniform(k, shape, dt, minval, maxval):
    finfo = np.finfo(dt)
    nbits, nmant = finfo.bits, finfo.nmant
    rng_bits = 8 if nmant < 8 else nbits
    bits = _random_bits(k, rng_bits, shape).astype(_UINT[nbits])
    ut = _UINT[nbits]
    one = np.array(1.0, dt).view(ut)
    floats = ((bits >> ut(rng_bits - nmant)) | one).view(dt) - dt.type(1)
    minval = np.asarray(minval).astype(dt)
    maxval = np.asarray(maxval).astype(dt)
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.maximum(minval, np.asarray(floats) * (maxval - minval) + minval)
    if out.shape != tuple(shape):
        raise ValueError(f"uniform: minval and maxval of shapes {minval.shape} and "
                         f"{maxval.shape} do not broadcast to shape {tuple(shape)}")
    return out.astype(dt)


def _normal(k, shape, dt):
    lo = np.nextafter(np.array(-1.0, dt), np.array(0.0, dt))
    u = _uniform(k, shape, dt, lo, np.array(1.0, dt))
    return (np.array(np.sqrt(2), dt) * _erf_inv(u)).astype(dt)


def _gumbel(k, shape, dt, mode):
    info = np.finfo(dt)
    with np.errstate(divide="ignore"):
        if mode == "high":
            high, low = _uniform(k, (2,) + tuple(shape), dt, 0.0, 1.0)
            x = np.where(high >= dt.type(0.5), high,
                         high + dt.type(2.0 ** -info.nmant) * low +
                         dt.type(max(2.0 ** -(2 * info.nmant + 1), float(info.tiny))))
            return (-np.log(-np.log1p(-x))).astype(dt)
        u = _uniform(k, shape, dt, info.tiny, 1.0)
        return (-np.log(-np.log(u))).astype(dt)


def _gumbel_mode(mode):
    mode = "low" if mode is None else mode
    if mode == "highest":
        raise NotImplementedError("gumbel mode='highest' is not implemented here (use 'low' "
                                  "or 'high')")
    if mode not in ("high", "low"):
        raise ValueError(f"Must provide valid mode for gumbel got: {mode}")
    return mode


def _urem(a, b):
    """XLA's unsigned remainder: x % 0 is x."""
    z = b == 0
    return np.where(z, a, a % np.where(z, b.dtype.type(1), b))


def _clip_to(v, dt):
    """JAX's _convert_and_clip_integer: v in dt, clipped to dt's range."""
    lo = max(np.iinfo(dt).min, np.iinfo(v.dtype).min)
    hi = min(np.iinfo(dt).max, np.iinfo(v.dtype).max)
    return np.clip(v, lo, hi).astype(dt)


def _bound(v, dt):
    """randint's minval/maxval as JAX's jnp.asarray makes them: a Python int
    in the default int (int32, or int64 for a 64-bit dtype; OverflowError
    outside it), floats cast to it."""
    wide = np.int64 if np.iinfo(dt).bits == 64 else np.int32
    if isinstance(v, numbers.Integral) and not isinstance(v, np.generic):
        info = np.iinfo(wide)
        if not info.min <= int(v) <= info.max:
            raise OverflowError(f"Python int {v} too large to convert to {np.dtype(wide).name}")
        return np.asarray(int(v), wide)
    a = np.asarray(v)
    if not np.issubdtype(a.dtype, np.integer):
        a = a.astype(wide)
    return a


def _randint(k, shape, minval, maxval, dt):
    nbits = np.iinfo(dt).bits
    ut = _UINT[nbits]
    big = _clip_to(np.asarray(np.iinfo(dt).max, dt), maxval.dtype)
    out_of_range = maxval > big
    minval = np.broadcast_to(_clip_to(minval, dt), shape)
    maxval = np.broadcast_to(_clip_to(maxval, dt), shape)
    k1, k2 = _split_data(k, (2,))
    higher = _random_bits(k1, nbits, shape)
    lower = _random_bits(k2, nbits, shape)
    with np.errstate(over="ignore"):
        span = maxval.astype(ut) - minval.astype(ut)
        span = np.where(maxval <= minval, ut(1), span).astype(ut)
        span = np.where(out_of_range & (maxval > minval), span + ut(1), span).astype(ut)
        mult = _urem(np.full(shape, 2 ** (nbits // 2), ut), span)
        mult = _urem(mult * mult, span)
        off = _urem(higher, span) * mult + _urem(lower, span)
        off = _urem(off.astype(ut), span)
        return (minval.astype(ut) + off).astype(dt).reshape(shape)


def _shuffle(k, x, axis):
    """JAX's _shuffle: rounds of a stable sort along axis by fresh uint32 keys."""
    exponent = 3
    rounds = int(np.ceil(exponent * np.log(max(1, x.size)) / np.log(np.iinfo(_U32).max)))
    for _ in range(rounds):
        sub = _split_data(k, (2,))
        k, sub = sub[0], sub[1]
        sort_keys = _random_bits(sub, 32, x.shape)
        order = np.argsort(sort_keys, axis=axis, kind="stable")
        x = np.take_along_axis(x, order, axis)
    return x


def _top_k_indices(g, k):
    """lax.top_k's indices along the last axis: largest first, ties in index
    order."""
    return np.argsort(-g, axis=-1, kind="stable")[..., :k]


# ---- keys traced in a jit: the hash in int64 ops ---------------------------------
#
# A key passed to a jit is uploaded as int64 data (..., 2) (the service has no
# uint32); here threefry2x32 runs on it with the op table's int64 ops: a sum
# modulo 2**32 is (a + b) & 0xFFFFFFFF, a rotation ((x * 2**r) & 0xFFFFFFFF)
# | (x // 2**(32 - r)) (every value stays below 2**62). The bits are JAX's;
# float32 uniforms come from their top 23 bits times 2**-23 (JAX's bitcast of
# 1.m minus 1, exactly), then the same float32 arithmetic as on the host.

_MASK = 0xFFFFFFFF


def _is_traced(key):
    return isinstance(key._data if isinstance(key, KeyArray) else key, _trace.Tracer)


def _jnp():
    from . import numpy as jnp
    return jnp


def _t_key(name, key, allow_batched=False):
    """A traced key's data, with JAX's checks (int64 data here)."""
    if isinstance(key, KeyArray):
        key = key._data
    shape = tuple(key.shape)
    if not shape or shape[-1] != 2:
        raise TypeError(f"JAX encountered invalid PRNG key data: expected key_data.shape to "
                        f"end with (2,); got shape={shape} for threefry2x32")
    if np.dtype(key.dtype) not in (np.dtype(np.int64), np.dtype(np.int32)):
        raise TypeError(f"shmap.random.{name}: traced key data must be int64 (as a jit takes "
                        f"a key argument), got {key.type}")
    if not allow_batched and len(shape) > 1:
        raise ValueError(f"{name} accepts a single key, but was given a key array of shape "
                         f"{shape[:-1]} != (): draw from each key in turn")
    if not _partitionable():
        raise InvalidArgument(f"shmap.random.{name}: keys traced in a jit draw JAX's "
                              f"partitionable bits only (threefry_partitionable(True))")
    return key if np.dtype(key.dtype) == np.dtype(np.int64) else _jnp().astype(key, np.int64)


def _t_data(name, key):
    """A key's int64 data in the program being traced: a traced key's, a
    key on the devices closed over (captured), a host key a constant; with
    JAX's checks."""
    if _is_traced(key):
        return _t_key(name, key)
    if not isinstance(key, KeyArray):
        key = KeyArray(key) if isinstance(key, Array) else KeyArray(_key_data_of(name, key)[0])
    d = key._data
    return _t_key(name, _trace._as_operand(d) if isinstance(d, Array) else _key_flatten(key)[0][0])


def _t_hash(k1, k2, x0, x1):
    """_threefry2x32 on int64 values in [0, 2**32): traced, or Python ints."""
    def add(a, b):
        return (a + b) & _MASK

    def rotl(x, r):
        return ((x * (1 << r)) & _MASK) | (x // (1 << (32 - r)))
    ks = (k1, k2, k1 ^ k2 ^ 0x1BD11BDA)
    x0, x1 = add(x0, ks[0]), add(x1, ks[1])
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x0 = add(x0, x1)
            x1 = rotl(x1, r) ^ x0
        x0 = add(x0, ks[(i + 1) % 3])
        x1 = add(x1, ks[(i + 2) % 3] + (i + 1))
    return x0, x1


def _t_bits(k, shape):
    """JAX's partitionable threefry bits (the two hash words of each element's
    row-major index), as two traced int64 arrays."""
    jnp = _jnp()
    n = math.prod(shape)
    if n >= 2 ** 32:
        raise InvalidArgument("shmap.random: more than 2**32 values from one traced key")
    lo = jnp.reshape(jnp.arange(n, dtype=np.int64), shape) if shape else \
        jnp.zeros((), dtype=np.int64)
    return _t_hash(k[0], k[1], jnp.zeros(shape, dtype=np.int64), lo)


def _t_split(k, shape):
    b1, b2 = _t_bits(k, shape)
    return _jnp().stack([b1, b2], axis=len(shape))


def _t_fold_in(k, d):
    jnp = _jnp()
    if isinstance(d, _trace.Tracer):
        if not np.issubdtype(np.dtype(d.dtype), np.integer):
            raise TypeError(f"fold_in: the data folded in must be an integer, got {d.type}")
        d = jnp.astype(d, np.int64) & _MASK
    else:
        d = int(d) & _MASK
    y0, y1 = _t_hash(k[0], k[1], jnp.zeros((), dtype=np.int64), d)
    return jnp.stack([y0, y1])


def _t_uniform(name, k, shape, dt, minval, maxval):
    """JAX's _uniform in float32 from traced bits."""
    jnp = _jnp()
    if dt != np.dtype(np.float32):
        raise InvalidArgument(f"shmap.random.{name}: a key traced in a jit draws float32 "
                              f"(got {dt}): draw {dt} outside the jit")
    b1, b2 = _t_bits(k, shape)
    m = (b1 ^ b2) // (1 << 9)  # the top 23 bits
    floats = jnp.astype(m, np.float32) * np.float32(2.0 ** -23)
    lo = minval if isinstance(minval, _trace.Tracer) else np.float32(minval)
    hi = maxval if isinstance(maxval, _trace.Tracer) else np.float32(maxval)
    span = hi - lo
    out = jnp.maximum(lo, floats * span + lo)
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"uniform: minval and maxval of shapes {np.shape(minval)} and "
                         f"{np.shape(maxval)} do not broadcast to shape {tuple(shape)}")
    return out


def _t_normal(k, shape, dt):
    u = _t_uniform("normal", k, shape, dt, np.nextafter(np.float32(-1), np.float32(0)),
                   np.float32(1))
    from . import lax
    return np.float32(np.sqrt(2)) * lax.erf_inv(u)  # the host's _erf_inv32, traced


def _t_bits32(k, shape):
    b1, b2 = _t_bits(k, shape)
    return b1 ^ b2


def _t_split2(k):
    ks = _t_split(k, (2,))
    return ks[0], ks[1]


def _t_urem(x, span):
    """XLA's unsigned remainder by a host span (x % 0 is x)."""
    return x if span == 0 else x % span




def _t_randint(k, shape, minval, maxval):
    """JAX's _randint in int32 for a traced key and host bounds: the span and
    its multiplier computed here as _randint does, the two draws reduced in
    the program."""
    jnp = _jnp()
    dt, ut = np.dtype(np.int32), _U32
    big = _clip_to(np.asarray(np.iinfo(dt).max, dt), maxval.dtype)
    out_of_range = bool(maxval > big)
    lo, hi = _clip_to(minval, dt), _clip_to(maxval, dt)
    with np.errstate(over="ignore"):
        span = ut(hi.astype(ut) - lo.astype(ut))
        span = ut(1) if hi <= lo else span
        span = ut(span + ut(1)) if out_of_range and hi > lo else span
        mult = int(_urem(np.asarray(2 ** 16, ut), np.asarray(span)))
        mult = int(_urem(np.asarray(ut(mult) * ut(mult)), np.asarray(span)))
    span = int(span)
    # (2**16 mod span)**2 wraps to 0 in uint32 once span > 2**16, as in JAX, so the
    # multiplier is below 2**16 and a product with it stays below 2**48
    assert mult < 2 ** 16
    k1, k2 = _t_split2(k)
    off = ((_t_urem(_t_bits32(k1, shape), span) * mult) & _MASK) + \
        _t_urem(_t_bits32(k2, shape), span)
    off = _t_urem(off & _MASK, span)
    r = (off + int(lo.astype(ut))) & _MASK
    return jnp.astype(jnp.where(r >= 2 ** 31, r - 2 ** 32, r), np.int32)


def _t_shuffle(k, x, axis):
    """_shuffle with a traced key: rounds of a stable argsort along axis by
    fresh bits, the values carried by take_along_axis."""
    jnp = _jnp()
    exponent = 3
    size = math.prod(x.shape)
    rounds = int(np.ceil(exponent * np.log(max(1, size)) / np.log(np.iinfo(_U32).max)))
    for _ in range(rounds):
        k, sub = _t_split2(k)
        order = jnp.argsort(_t_bits32(sub, tuple(x.shape)), axis=axis)
        x = jnp.take_along_axis(x, order, axis=axis)
    return x


def _t_gumbel(k, shape, dt, mode):
    """_gumbel (mode 'low') with a traced key: -log(-log(u)), u in [tiny, 1)."""
    jnp = _jnp()
    if mode != "low":
        raise InvalidArgument("shmap.random.gumbel: mode='high' with a key traced in a jit is "
                              "not supported")
    u = _t_uniform("gumbel", k, shape, dt, np.finfo(dt).tiny, 1.0)
    return -jnp.log(-jnp.log(u))


# ---- the public samplers ---------------------------------------------------------


def bits(key, shape=(), dtype=None, *, out_sharding=None):
    """jax.random.bits: uniform unsigned integers (uint32 by default; uint8,
    uint16, uint64). shmap arrays hold none but uint8, so host draws stay
    numpy arrays (out_sharding refuses them); with a key traced in a jit,
    the program's values of the narrowest dtype that holds them: uint8,
    int32 for uint16, int64 for uint32 (uint64 refused)."""
    dt = np.dtype(_U32 if dtype is None else dtype)
    if not np.issubdtype(dt, np.unsignedinteger):
        raise ValueError(f"dtype argument to `bits` must be an unsigned int dtype, got {dt}")
    if _is_traced(key):
        if dt.itemsize == 8:
            raise InvalidArgument("shmap.random.bits: uint64 bits of a key traced in a jit do "
                                  "not fit shmap's int64: draw them outside the jit")
        b = _t_bits32(_t_key("bits", key), _shape(shape)) & ((1 << (8 * dt.itemsize)) - 1)
        held = {1: np.uint8, 2: np.int32, 4: np.int64}[dt.itemsize]
        return _placed("bits", _jnp().astype(b, held) if held != np.int64 else b, out_sharding)
    k, _ = _key_data_of("bits", key)
    return _place("bits", _random_bits(k, dt.itemsize * 8, _shape(shape)), out_sharding)


def uniform(key, shape=(), dtype=None, minval=0., maxval=1., *, out_sharding=None):
    """jax.random.uniform: floats in [minval, maxval) (float32 by default;
    float16, float64), from the mantissa bits as JAX makes them."""
    dt = _float_dtype("uniform", dtype)
    if _is_traced(key):
        return _placed("uniform", _t_uniform("uniform", _t_key("uniform", key), _shape(shape),
                                              dt, minval, maxval), out_sharding)
    k, _ = _key_data_of("uniform", key)
    lo = _concrete("uniform", minval, "minval")
    hi = _concrete("uniform", maxval, "maxval")
    return _place("uniform", _uniform(k, _shape(shape), dt, lo, hi), out_sharding)


def normal(key, shape=(), dtype=None, *, out_sharding=None):
    """jax.random.normal: sqrt(2) * erf_inv(u), u uniform in (-1, 1) (JAX's
    construction, with XLA's erf_inv polynomial)."""
    dt = _float_dtype("normal", dtype)
    if _is_traced(key):
        return _placed("normal", _t_normal(_t_key("normal", key), _shape(shape), dt),
                       out_sharding)
    k, _ = _key_data_of("normal", key)
    return _place("normal", _normal(k, _shape(shape), dt), out_sharding)


def truncated_normal(key, lower, upper, shape=None, dtype=None, *, out_sharding=None):
    """jax.random.truncated_normal: normal values in the open interval
    (lower, upper), by inverting erf between erf(lower/sqrt 2) and
    erf(upper/sqrt 2)."""
    dt = _float_dtype("truncated_normal", dtype)
    if _is_traced(key) or (_in_trace() is not None and
                           any(isinstance(v, _trace.Tracer) for v in (lower, upper))):
        return _placed("truncated_normal",
                       _t_truncated_normal(key, lower, upper, _shape(shape), dt), out_sharding)
    lower = _concrete("truncated_normal", lower, "lower").astype(dt)
    upper = _concrete("truncated_normal", upper, "upper").astype(dt)
    shape = np.broadcast_shapes(lower.shape, upper.shape) if shape is None else _shape(shape)
    sqrt2 = np.array(np.sqrt(2), dt)
    a = _erf(lower / sqrt2)
    b = _erf(upper / sqrt2)
    k, _ = _key_data_of("truncated_normal", key)
    u = _uniform(k, shape, dt, a, b)
    out = sqrt2 * _erf_inv(u)
    out = np.minimum(np.maximum(out, np.nextafter(lower, np.array(np.inf, dt))),
                     np.nextafter(upper, np.array(-np.inf, dt))).astype(dt)
    return _place("truncated_normal", out, out_sharding)


def _t_truncated_normal(key, lower, upper, shape, dt):
    """truncated_normal in the program being traced (the key's data traced or
    a constant): a host bound's erf and neighbour toward the other computed
    on the host, as the host's draw does, a traced bound's in the program."""
    from . import lax
    jnp = _jnp()
    sqrt2 = np.array(np.sqrt(2), dt)

    def bound(v, what, toward):  # (erf(v / sqrt 2), the float next to v toward the inside)
        if isinstance(v, _trace.Tracer):
            v = jnp.astype(v, dt)
            return jnp.erf(v / dt.type(sqrt2)), jnp.nextafter(v, jnp.full(v.shape, toward, dt))
        v = _concrete("truncated_normal", v, what).astype(dt)
        def const(c):  # a host value in the program: a scalar, or an array constant
            return dt.type(c) if np.ndim(c) == 0 else jnp.asarray(c)
        return const(_erf(v / sqrt2)), const(np.nextafter(v, np.array(toward, dt)))

    a, lo = bound(lower, "lower", np.inf)
    b, hi = bound(upper, "upper", -np.inf)
    if shape is None:
        shape = np.broadcast_shapes(tuple(np.shape(lo)), tuple(np.shape(hi)))
    u = _t_uniform("truncated_normal", _t_data("truncated_normal", key), shape, dt, a, b)
    return jnp.minimum(jnp.maximum(dt.type(sqrt2) * lax.erf_inv(u), lo), hi)


def randint(key, shape, minval, maxval, dtype=None, *, out_sharding=None):
    """jax.random.randint: integers in [minval, maxval) by JAX's algorithm
    (two draws of random bits reduced modulo the span; int32 by default,
    int64 with 64-bit bits; narrower ones sampled in int32)."""
    dt = np.dtype(np.int32 if dtype is None else dtype)
    if not np.issubdtype(dt, np.integer):
        raise TypeError(f"randint only accepts integer dtypes, got {dt}")
    shape = _shape(shape)
    if _is_traced(key):
        k = _t_key("randint", key)
        lo, hi = (_concrete("randint", v, what) for v, what in ((minval, "minval"),
                                                                 (maxval, "maxval")))
        if dt != np.dtype(np.int32) or np.ndim(lo) or np.ndim(hi):
            raise InvalidArgument("shmap.random.randint with a key traced in a jit draws int32 "
                                  "between scalar bounds: draw others outside the jit")
        return _placed("randint", _t_randint(k, shape, _bound(lo.item(), dt),
                                             _bound(hi.item(), dt)), out_sharding)
    k, _ = _key_data_of("randint", key)
    for v, what in ((minval, "minval"), (maxval, "maxval")):
        if isinstance(v, _trace.Tracer):
            _concrete("randint", v, what)
    minval = minval.to_numpy() if isinstance(minval, Array) else minval
    maxval = maxval.to_numpy() if isinstance(maxval, Array) else maxval
    info = np.iinfo(dt)
    if info.bits < 32:  # sampled in 32 bits, as JAX avoids the bias of narrow ones
        lo = np.clip(_bound(minval, np.int32).astype(np.int32), info.min, info.max)
        hi = np.clip(_bound(maxval, np.int32).astype(np.int32), info.min,
                     info.max + 1)
        out = _randint(k, shape, lo, hi, np.dtype(np.int32)).astype(dt)
    else:
        out = _randint(k, shape, _bound(minval, dt), _bound(maxval, dt), dt)
    return _place("randint", out, out_sharding)


def bernoulli(key, p=0.5, shape=None, mode="low", *, out_sharding=None):
    """jax.random.bernoulli: uniform(key, shape, p's dtype) < p (mode='high':
    two uniforms, for tiny p). A traced p works: the uniform values are the
    constant, the comparison is traced (dropout: bernoulli(key, 1 - rate,
    x.shape))."""
    if mode not in ("high", "low"):
        raise ValueError(f"got mode={mode!r}, expected 'high' or 'low'")
    traced = isinstance(p, _trace.Tracer)
    if _is_traced(key):
        dt = np.dtype(p.dtype) if traced else np.dtype(np.float32)
        if not np.issubdtype(dt, np.floating):
            raise TypeError(f"bernoulli probability `p` must have a floating dtype, got {dt}.")
        shape = tuple(np.shape(p)) if shape is None else _shape(shape)
        if mode == "high":
            raise InvalidArgument("shmap.random.bernoulli: mode='high' with a key traced in a "
                                  "jit is not supported")
        k = _t_key("bernoulli", key)
        return _placed("bernoulli", _t_uniform("bernoulli", k, shape, dt, 0.0, 1.0) < p,
                       out_sharding)
    k, _ = _key_data_of("bernoulli", key)
    pa = p if traced else _concrete("bernoulli", p, "p", canon=True)
    dt = np.dtype(pa.dtype)
    if not np.issubdtype(dt, np.floating):
        raise TypeError(f"bernoulli probability `p` must have a floating dtype, got {dt}.")
    shape = tuple(pa.shape) if shape is None else _shape(shape)
    if mode == "high":
        u1, u2 = _uniform(k, (2,) + shape, dt, 0.0, 1.0)
        u2 = u2 * dt.type(2.0 ** -np.finfo(dt).nmant)
        if traced:
            return _placed("bernoulli", _place("bernoulli", u2, None) <
                           p - _place("bernoulli", u1, None), out_sharding)
        return _place("bernoulli", u2 < pa - u1, out_sharding)
    u = _uniform(k, shape, dt, 0.0, 1.0)
    if traced:
        return _placed("bernoulli", _place("bernoulli", u, None) < p, out_sharding)
    return _place("bernoulli", u < pa, out_sharding)


def rademacher(key, shape=(), dtype=None, *, out_sharding=None):
    """jax.random.rademacher: -1 or 1, each with probability 1/2 (int32)."""
    dt = np.dtype(np.int32 if dtype is None else dtype)
    if _is_traced(key):
        jnp = _jnp()
        u = _t_uniform("rademacher", _t_key("rademacher", key), _shape(shape),
                       np.dtype(np.float32), 0.0, 1.0)
        return _placed("rademacher", 2 * jnp.astype(u < np.float32(0.5), dt) - 1, out_sharding)
    k, _ = _key_data_of("rademacher", key)
    b = (_uniform(k, _shape(shape), np.dtype(np.float32), 0.0, 1.0) < np.float32(0.5))
    return _place("rademacher", (2 * b.astype(dt) - 1).astype(dt), out_sharding)


def exponential(key, shape=(), dtype=None, *, out_sharding=None):
    """jax.random.exponential: -log1p(-u)."""
    dt = _float_dtype("exponential", dtype)
    if _is_traced(key):
        u = _t_uniform("exponential", _t_key("exponential", key), _shape(shape), dt, 0.0, 1.0)
        return _placed("exponential", -_jnp().log1p(-u), out_sharding)
    k, _ = _key_data_of("exponential", key)
    u = _uniform(k, _shape(shape), dt, 0.0, 1.0)
    return _place("exponential", (-np.log1p(-u)).astype(dt), out_sharding)


def gumbel(key, shape=(), dtype=None, mode=None, *, out_sharding=None):
    """jax.random.gumbel: -log(-log(u)), u uniform in [tiny, 1) (mode='high':
    two uniforms for a wider range)."""
    dt = _float_dtype("gumbel", dtype)
    if _is_traced(key):
        return _placed("gumbel", _t_gumbel(_t_key("gumbel", key), _shape(shape), dt,
                                           _gumbel_mode(mode)), out_sharding)
    k, _ = _key_data_of("gumbel", key)
    return _place("gumbel", _gumbel(k, _shape(shape), dt, _gumbel_mode(mode)), out_sharding)


def laplace(key, shape=(), dtype=None, *, out_sharding=None):
    """jax.random.laplace: sign(u) * log1p(-|u|), u uniform in (-1, 1)."""
    dt = _float_dtype("laplace", dtype)
    if _is_traced(key):
        jnp = _jnp()
        u = _t_uniform("laplace", _t_key("laplace", key), _shape(shape), dt,
                       np.float32(-1.0 + float(np.finfo(dt).epsneg)), 1.0)
        return _placed("laplace", jnp.sign(u) * jnp.log1p(-jnp.abs(u)), out_sharding)
    k, _ = _key_data_of("laplace", key)
    u = _uniform(k, _shape(shape), dt, -1.0 + float(np.finfo(dt).epsneg), 1.0)
    return _place("laplace", (np.sign(u) * np.log1p(-np.abs(u))).astype(dt), out_sharding)


def logistic(key, shape=(), dtype=None, *, out_sharding=None):
    """jax.random.logistic: log(u) - log1p(-u)."""
    dt = _float_dtype("logistic", dtype)
    if _is_traced(key):
        jnp = _jnp()
        u = _t_uniform("logistic", _t_key("logistic", key), _shape(shape), dt,
                       np.finfo(dt).tiny, 1.0)
        return _placed("logistic", jnp.log(u) - jnp.log1p(-u), out_sharding)
    k, _ = _key_data_of("logistic", key)
    u = _uniform(k, _shape(shape), dt, np.finfo(dt).tiny, 1.0)
    return _place("logistic", (np.log(u) - np.log1p(-u)).astype(dt), out_sharding)


def cauchy(key, shape=(), dtype=None, *, out_sharding=None):
    """jax.random.cauchy: tan(pi * (u - 0.5))."""
    dt = _float_dtype("cauchy", dtype)
    if _is_traced(key):
        u = _t_uniform("cauchy", _t_key("cauchy", key), _shape(shape), dt, np.finfo(dt).eps,
                       1.0)
        return _placed("cauchy", _jnp().tan(dt.type(np.pi) * (u - dt.type(0.5))), out_sharding)
    k, _ = _key_data_of("cauchy", key)
    u = _uniform(k, _shape(shape), dt, np.finfo(dt).eps, 1.0)
    return _place("cauchy", np.tan(dt.type(np.pi) * (u - dt.type(0.5))).astype(dt),
                  out_sharding)


def _x64_off(a):
    """numpy data as JAX's x64-off jnp.asarray makes it."""
    a = np.asarray(a)
    return a.astype(np.float32) if a.dtype == np.float64 else \
        a.astype(np.int32) if a.dtype == np.int64 else a


def _take(name, x, idx, axis, out_sharding=None, along=False):
    """x's entries at the integer indices idx along axis (along: numpy's
    take_along_axis), by shmap's take (traced, or at once on an Array) with
    out_sharding's spec; numpy's for numpy x."""
    from . import numpy as jnp
    idx = np.asarray(idx, np.int32)
    if not _on_device(x):
        return np.take_along_axis(x, idx, axis) if along else np.take(x, idx, axis=axis)
    op = jnp.take_along_axis if along else jnp.take
    kw = {} if out_sharding is None else {"out_sharding": getattr(out_sharding, "spec",
                                                                  out_sharding)}
    try:
        return op(x, jnp.asarray(idx) if isinstance(x, _trace.Tracer) else idx, axis=axis, **kw)
    except ProgramError as e:
        if out_sharding is not None:
            raise
        raise ProgramError(f"shmap.random.{name}: {e.message} (here: give {name} "
                           f"out_sharding=)", source_line=e.source_line) from None


def permutation(key, x, axis=0, independent=False, *, out_sharding=None):
    """jax.random.permutation: arange(x) or x shuffled along axis (JAX's
    rounds of sort by random uint32 keys; independent=True shuffles each
    slice on its own). An Array or traced x stays on the devices: only
    the indices are drawn here (a take)."""
    if _is_traced(key):
        return _t_permutation(_t_key("permutation", key), x, axis, independent, out_sharding)
    k, _ = _key_data_of("permutation", key)
    if _on_device(x) and not x.shape:  # a number of entries: concrete
        x = _concrete("permutation", x, "x").item()
    if _on_device(x):
        nd = len(x.shape)
        axis = _axis(axis, nd)
        n = x.shape[axis]
        if independent and nd > 1:
            idx = np.broadcast_to(np.arange(n, dtype=np.int32).reshape(
                [n if d == axis else 1 for d in range(nd)]), tuple(x.shape))
            idx = _shuffle(k, np.array(idx), axis)
            return _take("permutation", x, idx, axis, out_sharding, along=True)
        ind = _shuffle(k, np.arange(n, dtype=np.int32), 0)
        return _take("permutation", x, ind, axis, out_sharding)
    if not np.ndim(x):
        if not np.issubdtype(np.asarray(x).dtype, np.integer):
            raise TypeError("x must be an integer or at least 1-dimensional")
        out = _shuffle(k, np.arange(int(x), dtype=np.int32), 0)
    else:
        x = _x64_off(x)
        axis = _axis(axis, x.ndim)
        if independent or x.ndim == 1:
            out = _shuffle(k, x, axis)
        else:
            out = np.take(x, _shuffle(k, np.arange(x.shape[axis], dtype=np.int32), 0), axis)
    return _place("permutation", out, out_sharding)


def _t_permutation(k, x, axis, independent, out_sharding):
    """permutation with a traced key: the shuffle in the program (of the
    indices, then a take, unless each slice is shuffled on its own)."""
    jnp = _jnp()
    if not _on_device(x) and not np.ndim(x):
        if not np.issubdtype(np.asarray(x).dtype, np.integer):
            raise TypeError("x must be an integer or at least 1-dimensional")
        return _placed("permutation", _t_shuffle(k, jnp.arange(int(x), dtype=np.int32), 0),
                       out_sharding)
    if not _on_device(x):
        x = jnp.asarray(_x64_off(np.asarray(x)))
    elif isinstance(x, Array):
        raise InvalidArgument("shmap.random.permutation: an Array in a jit body is an argument "
                              "of the jit (a traced value), not the Array itself")
    nd = len(x.shape)
    axis = _axis(axis, nd)
    if independent or nd == 1:
        return _placed("permutation", _t_shuffle(k, x, axis), out_sharding)
    idx = _t_shuffle(k, jnp.arange(x.shape[axis], dtype=np.int32), 0)
    kw = {} if out_sharding is None else {"out_sharding": getattr(out_sharding, "spec",
                                                                  out_sharding)}
    return jnp.take(x, idx, axis=axis, **kw)


def shuffle(key, x, axis=0):
    """jax.random.shuffle, as JAX had it before removing it: each slice along
    axis shuffled on its own (permutation(key, x, axis, independent=True))."""
    return permutation(key, x, axis, independent=True)


def _axis(axis, nd):
    if not -nd <= axis < nd:
        raise ValueError(f"axis {axis} is out of bounds for array of dimension {nd}")
    return axis % nd


def choice(key, a, shape=(), replace=True, p=None, axis=0, mode=None, *, out_sharding=None):
    """jax.random.choice: a sample of arange(a) or of a's entries along axis:
    with replacement uniform (randint) or by p's cumulative sums; without,
    a permutation's first entries or, with p, the Gumbel top-k of log(p).
    An Array or traced a stays on the devices (a take of drawn indices); a
    key traced in a jit draws the indices in the program (float32 p)."""
    traced = _is_traced(key)
    k = None if traced else _key_data_of("choice", key)[0]
    if not isinstance(shape, Sequence):
        raise TypeError(f"shape argument of jax.random.choice must be a sequence, got {shape}")
    shape = tuple(int(d) for d in shape)
    if _on_device(a) and not a.shape:  # a number of entries: concrete
        a = _concrete("choice", a, "a").item()
    dev = _on_device(a)
    arr = a if dev else _x64_off(a)
    nd = len(arr.shape)
    if nd == 0:
        n_inputs = int(arr)
    else:
        axis = _axis(axis, nd)
        n_inputs = arr.shape[axis]
    n_draws = math.prod(shape)
    if n_draws == 0:
        return _place("choice", np.zeros(shape, np.int32 if nd == 0 else arr.dtype),
                      out_sharding)
    if n_inputs <= 0:
        raise ValueError("a must be greater than 0 unless no samples are taken")
    if not replace and n_draws > n_inputs:
        raise ValueError(f"Cannot take a larger sample (size {n_draws}) than population "
                         f"(size {n_inputs}) when 'replace=False'")
    if traced:
        jnp = _jnp()
        ind = jnp.reshape(_t_choice(_t_data("choice", key), shape, n_inputs, n_draws, replace,
                                    p, mode), shape)
        if nd == 0:
            return _placed("choice", ind, out_sharding)
        kw = {} if out_sharding is None else {"out_sharding": getattr(out_sharding, "spec",
                                                                      out_sharding)}
        return jnp.take(arr if dev else jnp.asarray(arr), ind, axis=axis, **kw)
    if p is None:
        if replace:
            ind = _randint(k, shape, np.asarray(0, np.int32), np.asarray(n_inputs, np.int32),
                           np.dtype(np.int32))
        else:
            ind = _shuffle(k, np.arange(n_inputs, dtype=np.int32), 0)[:n_draws]
    else:
        pa = _concrete("choice", p, "p", canon=True)
        if not np.issubdtype(pa.dtype, np.inexact):
            pa = pa.astype(np.float32)
        if pa.shape != (n_inputs,):
            raise ValueError(f"p must be None or a 1D vector with the same size as "
                             f"a.shape[axis]. p has shape {pa.shape} and a.shape[axis] is "
                             f"{n_inputs}.")
        if replace:
            cum = np.cumsum(pa, dtype=pa.dtype)
            r = cum[-1] * (pa.dtype.type(1) - _uniform(k, shape, pa.dtype, 0.0, 1.0))
            ind = np.searchsorted(cum, r, side="left").astype(np.int32)
        else:
            with np.errstate(divide="ignore"):
                g = _gumbel(k, (n_inputs,), pa.dtype, _gumbel_mode(mode)) + np.log(pa)
            ind = _top_k_indices(g, n_draws).astype(np.int32)
    ind = np.asarray(ind).reshape(-1)
    if nd == 0:
        return _place("choice", ind.reshape(shape), out_sharding)
    out_shape = tuple(arr.shape[:axis]) + shape + tuple(arr.shape[axis + 1:])
    if not dev:
        return _place("choice", np.take(arr, ind, axis=axis).reshape(out_shape), out_sharding)
    return _take("choice", arr, ind.reshape(shape), axis, out_sharding)


def _t_choice(k, shape, n, n_draws, replace, p, mode):
    """choice's indices (flat) from traced key data k, as the host draws them:
    randint, the first of a permutation, p's cumulative sums searched at
    uniform draws, or the Gumbel top-k of log(p)."""
    jnp = _jnp()
    if p is None:
        if replace:
            return _t_randint(k, shape, np.asarray(0, np.int32), np.asarray(n, np.int32))
        return _t_shuffle(k, jnp.arange(n, dtype=np.int32), 0)[:n_draws]
    if isinstance(p, _trace.Tracer):
        pa = jnp.astype(p, np.float32) if p.dtype != np.float32 else p
    else:
        pa = _concrete("choice", p, "p", canon=True).astype(np.float32)
    if tuple(pa.shape) != (n,):
        raise ValueError(f"p must be None or a 1D vector with the same size as a.shape[axis]. "
                         f"p has shape {tuple(pa.shape)} and a.shape[axis] is {n}.")
    dt = np.dtype(np.float32)
    if replace:
        cum = jnp.cumsum(pa) if isinstance(pa, _trace.Tracer) else \
            jnp.asarray(np.cumsum(pa, dtype=dt))
        r = cum[-1] * (np.float32(1) - _t_uniform("choice", k, shape, dt, 0.0, 1.0))
        return jnp.astype(jnp.searchsorted(cum, jnp.reshape(r, (-1,)), side="left"), np.int32)
    logp = jnp.log(pa) if isinstance(pa, _trace.Tracer) else jnp.asarray(np.log(pa))
    from . import lax
    return jnp.astype(lax.top_k(_t_gumbel(k, (n,), dt, _gumbel_mode(mode)) + logp, n_draws)[1],
                      np.int32)


def _categorical_shapes(logits_in, ax, shape):
    """categorical's shapes, with JAX's check: (the samples' shape, its
    leading dims beyond the logits' batch dims, the Gumbel noise's shape
    after them: the logits' with the batch dims as the samples')."""
    batch_shape = tuple(d for i, d in enumerate(logits_in) if i != ax)
    shape = batch_shape if shape is None else _shape(shape)
    if np.broadcast_shapes(shape, batch_shape) != shape:
        raise ValueError(f"categorical parameter shapes must be broadcast-compatible with "
                         f"shape argument, and the result of broadcasting the shapes must "
                         f"equal the shape argument, but got result "
                         f"{np.broadcast_shapes(shape, batch_shape)} for shape argument "
                         f"{shape}.")
    prefix = shape[:len(shape) - len(batch_shape)]
    logits_shape = list(shape[len(shape) - len(batch_shape):])
    logits_shape.insert(ax, logits_in[ax])
    return shape, prefix, tuple(logits_shape)


def categorical(key, logits, axis=-1, shape=None, replace=True, mode=None, *,
                out_sharding=None):
    """jax.random.categorical: argmax(logits + Gumbel noise) along axis (with
    replacement), or the Gumbel top-k (without). Traced logits work with
    replacement: the noise is the constant, the argmax is traced."""
    mode = _gumbel_mode(mode)
    if _is_traced(key):
        return _t_categorical(_t_key("categorical", key), logits, axis, shape, replace, mode,
                              out_sharding)
    k, _ = _key_data_of("categorical", key)
    traced = isinstance(logits, _trace.Tracer)
    la = logits if traced else _concrete("categorical", logits, "logits", canon=True)
    nd = len(la.shape)
    ax = _axis(axis, nd)
    dt = np.dtype(la.dtype)
    shape, prefix, logits_shape = _categorical_shapes(tuple(la.shape), ax, shape)
    if replace:
        g = _gumbel(k, prefix + logits_shape, dt, mode)
        lead = len(prefix)
        if traced:
            from . import numpy as jnp
            lt = la
            for d in range(lead):
                lt = jnp.expand_dims(lt, 0)
            return _placed("categorical",
                           jnp.argmax(_place("categorical", g, None) + lt, axis=ax + lead),
                           out_sharding)
        out = np.argmax(g + la.reshape((1,) * lead + la.shape), axis=ax + lead)
        return _place("categorical", out.astype(np.int32), out_sharding)
    if traced:
        raise InvalidArgument("shmap.random.categorical(replace=False): logits is a traced "
                              "value: give its values, or draw shmap.random.gumbel noise and "
                              "take lax.top_k of logits + noise in the body")
    n = la.shape[ax]
    kk = math.prod(prefix)
    if kk > n:
        raise ValueError(f"Number of samples without replacement ({kk}) cannot exceed number "
                         f"of categories ({n}).")
    z = la + _gumbel(k, la.shape, dt, mode)
    idx = _top_k_indices(np.moveaxis(z, ax, -1), kk)  # batch_shape + (kk,)
    idx = np.moveaxis(idx, -1, 0).reshape(shape)
    return _place("categorical", idx.astype(np.int32), out_sharding)


def _t_categorical(k, logits, axis, shape, replace, mode, out_sharding):
    """categorical with a traced key (with replacement): the argmax of
    logits plus Gumbel noise drawn in the program."""
    jnp = _jnp()
    if not replace:
        raise InvalidArgument("shmap.random.categorical(replace=False) with a key traced in a "
                              "jit is not supported: take lax.top_k of logits plus "
                              "shmap.random.gumbel noise in the body")
    lt = logits if isinstance(logits, _trace.Tracer) else \
        jnp.asarray(_concrete("categorical", logits, "logits", canon=True))
    nd = len(lt.shape)
    ax = _axis(axis, nd)
    _, prefix, logits_shape = _categorical_shapes(tuple(lt.shape), ax, shape)
    g = _t_gumbel(k, prefix + logits_shape, np.dtype(lt.dtype), mode)
    for _ in range(len(prefix)):
        lt = jnp.expand_dims(lt, 0)
    return _placed("categorical", jnp.argmax(g + lt, axis=ax + len(prefix)), out_sharding)


# ---- gamma and the distributions made from it --------------------------------------
#
# JAX's rejection sampler (Marsaglia and Tsang, jax/_src/random/core.py's
# _gamma_one), each element from its own key of split(key, size): one
# algorithm (_gamma_many) over all the elements at once, on the host in dt's
# arithmetic or in a program as nested while loops (a traced key or
# parameter), as JAX's vmap of _gamma_one runs it.


class _HostKeys:
    """The steps of the gamma sampler on the host, for n keys at once
    ((n, 2) uint32 data): each key's split and scalar draws as JAX makes
    them (either threefry mode), in dt's arithmetic; loops are Python's."""
    xp = np

    def __init__(self, dt):
        self.dt = dt

    def split(self, k1, k2, m):
        if _partitionable():
            hi, lo = _iota_2x32((m,))
            b1, b2 = _threefry2x32(k1[:, None], k2[:, None], hi[None, :], lo[None, :])
            return [(b1[:, i], b2[:, i]) for i in range(m)]
        c = np.arange(2 * m, dtype=_U32)  # threefry_2x32 over iota(2m): halves paired
        y0, y1 = _threefry2x32(k1[:, None], k2[:, None], c[None, :m], c[None, m:])
        words = np.concatenate([y0, y1], axis=1).reshape(-1, m, 2)
        return [(words[:, i, 0], words[:, i, 1]) for i in range(m)]

    def uniform(self, k1, k2, lo, hi):
        dt = self.dt
        wide = dt.itemsize == 8
        if _partitionable():
            b1, b2 = _threefry2x32(k1, k2, _U32(0), _U32(0))
            bits = (b1.astype(_U64) << _U64(32)) | b2.astype(_U64) if wide else b1 ^ b2
        else:  # threefry_2x32 over iota(1) (padded to 2) or iota(2)
            y0, y1 = _threefry2x32(k1, k2, _U32(0), _U32(1 if wide else 0))
            bits = (y0.astype(_U64) << _U64(32)) | y1.astype(_U64) if wide else y0
        ut = _UINT[dt.itemsize * 8]
        floats = ((bits.astype(ut) >> ut(dt.itemsize * 8 - np.finfo(dt).nmant)) |
                  np.array(1.0, dt).view(ut)).view(dt) - dt.type(1)
        lo, hi = dt.type(lo), dt.type(hi)
        return np.maximum(lo, floats * (hi - lo) + lo).astype(dt)

    def normal(self, k1, k2):
        dt = self.dt
        u = self.uniform(k1, k2, np.nextafter(dt.type(-1), dt.type(0)), 1.0)
        return (dt.type(np.sqrt(2)) * _erf_inv(u)).astype(dt)

    @staticmethod
    def loop(cond, body, init):
        s = init
        while cond(s):
            s = body(s)
        return s


class _TracedKeys:
    """The same steps in a program (float32; int64 key data)."""

    def __init__(self, dt):
        self.dt, self.xp = dt, _jnp()

    def split(self, k1, k2, m):
        jnp = self.xp
        n = k1.shape[0]
        b1, b2 = _t_hash(jnp.reshape(k1, (n, 1)), jnp.reshape(k2, (n, 1)),
                         jnp.zeros((1, m), dtype=np.int64),
                         jnp.reshape(jnp.arange(m, dtype=np.int64), (1, m)))
        return [(b1[:, i], b2[:, i]) for i in range(m)]

    def uniform(self, k1, k2, lo, hi):
        b1, b2 = _t_hash(k1, k2, 0, 0)
        f = np.float32
        floats = self.xp.astype((b1 ^ b2) // (1 << 9), f) * f(2.0 ** -23)
        lo, hi = f(lo), f(hi)
        return self.xp.maximum(lo, floats * (hi - lo) + lo)

    def normal(self, k1, k2):
        from . import lax
        f = np.float32
        return f(np.sqrt(2)) * lax.erf_inv(self.uniform(k1, k2, np.nextafter(f(-1), f(0)), 1.0))

    @staticmethod
    def loop(cond, body, init):
        from . import lax
        return lax.while_loop(cond, body, init)


def _gamma_many(ops, k1, k2, alpha, log_space):
    """JAX's _gamma_one (Marsaglia and Tsang) for each element: keys (k1,
    k2) and alpha (n,) vectors; each loop runs while any element's would,
    an element keeping its state once its own ends (what JAX's vmap of
    _gamma_one computes), so each element's value is its own sampler's."""
    xp, dt = ops.xp, ops.dt
    f = dt.type
    zero, one, third = f(0), f(1), f(1.0 / 3.0)
    boost = alpha >= one
    alpha_orig = alpha
    alpha = xp.where(boost, alpha, alpha + one)
    d = alpha - third
    c = third / xp.sqrt(d)
    (k1, k2), sub = ops.split(k1, k2, 2)

    def more(X, V, U):
        with np.errstate(divide="ignore", invalid="ignore"):
            return (U >= one - f(0.0331) * (X * X)) & \
                (xp.log(U) >= X * f(0.5) + d * ((one - V) + xp.log(V)))

    def body(s):
        k1, k2, X, V, U = s
        on = more(X, V, U)
        (n1, n2), (x1, x2), (u1, u2) = ops.split(k1, k2, 3)

        def next_x(t):
            a1, a2, x, v = t
            neg = v <= zero
            (m1, m2), (s1, s2) = ops.split(a1, a2, 2)
            xn = ops.normal(s1, s2)
            return (xp.where(neg, m1, a1), xp.where(neg, m2, a2), xp.where(neg, xn, x),
                    xp.where(neg, one + xn * c, v))
        _, _, x, v = ops.loop(lambda t: xp.any(t[3] <= zero), next_x,
                              (x1, x2, xp.zeros_like(alpha), xp.full_like(alpha, -1.0)))
        new = (n1, n2, x * x, (v * v) * v, ops.uniform(u1, u2, 0.0, 1.0))
        return tuple(xp.where(on, a, b) for a, b in zip(new, s))
    _, _, _, V, _ = ops.loop(lambda s: xp.any(more(*s[2:])), body,
                             (k1, k2, xp.zeros_like(alpha), xp.ones_like(alpha),
                              xp.full_like(alpha, 2.0)))
    u = ops.uniform(sub[0], sub[1], 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        if log_space:
            log_samples = xp.log1p(-u)  # -exponential(sub): -(-log1p(-u))
            log_boost = xp.where(boost | (log_samples == 0), zero,
                                 log_samples * (one / alpha_orig))
            return (xp.log(d) + xp.log(V)) + log_boost
        return (d * V) * xp.where(boost, one, xp.power(one - u, one / alpha_orig))


def _in_program(name, key, dt, *params):
    """A loop sampler's traced path: the key's int64 data (a host key a
    constant of the program) and each (value, what) parameter as a traced
    value of dt (a host one a constant), with the dtype check."""
    jnp = _jnp()
    if dt != np.dtype(np.float32):
        raise InvalidArgument(f"shmap.random.{name}: a traced key or parameter draws float32 "
                              f"(got {dt}): draw {dt} outside the jit")
    out = [_t_data(name, key)]
    for v, what in params:
        if isinstance(v, _trace.Tracer):
            out.append(jnp.astype(v, dt))
            continue
        a = np.asarray(_concrete(name, v, what), dt)
        out.append(jnp.full(a.shape, dt.type(a)) if a.ndim == 0 else jnp.asarray(a))
    return out


def _gamma(name, key, a, shape, dtype, log_space, out_sharding=None):
    dt = _float_dtype(name, dtype)
    traced = _is_traced(key) or isinstance(a, _trace.Tracer)
    if not traced:
        k, _ = _key_data_of(name, key)
        a = _concrete(name, a, "a").astype(dt)
        shape = a.shape if shape is None else _shape(shape)
        if np.broadcast_shapes(a.shape, shape) != shape:
            raise ValueError(f"{name} parameter shapes must be broadcast-compatible with shape "
                             f"argument, and the result of broadcasting the shapes must equal "
                             f"the shape argument, but got result {np.broadcast_shapes(a.shape, shape)} "
                             f"for shape argument {shape}.")
        if dt.itemsize not in (4, 8):
            raise InvalidArgument(f"shmap.random.{name}: float32 and float64 only, got {dt}")
        a = np.broadcast_to(a, shape).reshape(-1)
        keys = _split_data(k, (a.size,))
        out = _gamma_many(_HostKeys(dt), keys[:, 0], keys[:, 1], a, log_space)
        return _place(name, np.asarray(out, dt).reshape(shape), out_sharding)
    jnp = _jnp()
    k, a = _in_program(name, key, dt, (a, "a"))
    shape = tuple(a.shape) if shape is None else _shape(shape)
    n = math.prod(shape)
    keys = _t_split(k, (n,))
    alphas = jnp.reshape(jnp.broadcast_to(a, shape), (n,))
    spec = jnp._spec_of_type(alphas.type) if isinstance(alphas, _trace.Tracer) else None
    if spec is not None:  # the elements' keys where their parameters lie
        keys = jnp.reshard(keys, P(tuple(spec)[0], None))
    out = _gamma_many(_TracedKeys(dt), keys[:, 0], keys[:, 1], alphas, log_space)
    return _placed(name, jnp.reshape(out, shape), out_sharding)


def gamma(key, a, shape=None, dtype=None, *, method="exact", out_sharding=None):
    """jax.random.gamma: Gamma(a, 1) values by JAX's rejection sampler
    (Marsaglia and Tsang; each element from its key of split(key, size)), on
    the host for a concrete key and a, or in the program (a loop batched
    over the elements) for a traced one."""
    if method not in ("exact", "approximate"):
        raise ValueError(f"method argument to `gamma` must be one of {{'exact', "
                         f"'approximate'}}, got {method!r}")
    if method == "approximate":
        raise InvalidArgument("shmap.random.gamma: method='approximate' is not implemented "
                              "here; the default 'exact' sampler is")
    return _gamma("gamma", key, a, shape, dtype, False, out_sharding)


def loggamma(key, a, shape=None, dtype=None, *, method="exact", out_sharding=None):
    """jax.random.loggamma: log of Gamma(a, 1) values, sampled in log space
    (precise for small a)."""
    if method != "exact":
        raise InvalidArgument("shmap.random.loggamma: only method='exact' is implemented")
    return _gamma("loggamma", key, a, shape, dtype, True, out_sharding)


def _xp_of(*vs):
    return _jnp() if any(isinstance(v, (_trace.Tracer, Array)) for v in vs) else np


def _key_pair(name, key):
    """split(key) as two keys of the key's kind (traced or host data)."""
    if _is_traced(key):
        return _t_split2(_t_key(name, key))
    k, _ = _key_data_of(name, key)
    ks = _split_data(k, (2,))
    return ks[0], ks[1]


def beta(key, a, b, shape=None, dtype=None, *, method="exact", out_sharding=None):
    """jax.random.beta: Beta(a, b) as JAX makes it, from two log-gamma
    draws (of split(key)) scaled by their maximum."""
    dt = _float_dtype("beta", dtype)
    if shape is None:
        shape = np.broadcast_shapes(np.shape(a), np.shape(b))
    key_a, key_b = _key_pair("beta", key)
    xp = _xp_of(key_a, a, b)
    lga = loggamma(key_a, xp.broadcast_to(a if xp is not np else np.asarray(a, dt), shape),
                   shape, dt)
    lgb = loggamma(key_b, xp.broadcast_to(b if xp is not np else np.asarray(b, dt), shape),
                   shape, dt)
    xp = _xp_of(lga, lgb)
    m = xp.maximum(lga, lgb)
    ga, gb = xp.exp(lga - m), xp.exp(lgb - m)
    out = ga / (ga + gb)
    return _placed("beta", out, out_sharding) if xp is not np else _place("beta", out,
                                                                         out_sharding)


def dirichlet(key, alpha, shape=None, dtype=None, *, out_sharding=None):
    """jax.random.dirichlet: the softmax of log-gamma draws of alpha over
    its last axis."""
    dt = _float_dtype("dirichlet", dtype)
    ashape = tuple(np.shape(alpha)) if not hasattr(alpha, "shape") else tuple(alpha.shape)
    if len(ashape) < 1:
        raise ValueError(f"dirichlet requires alpha.ndim >= 1, got alpha.ndim == {len(ashape)}")
    shape = ashape[:-1] if shape is None else _shape(shape)
    lg = loggamma(key, alpha, tuple(shape) + ashape[-1:], dt)
    xp = _xp_of(lg)
    e = xp.exp(lg - xp.max(lg, axis=-1, keepdims=True))
    out = e / xp.sum(e, axis=-1, keepdims=True)
    return _placed("dirichlet", out, out_sharding) if xp is not np else \
        _place("dirichlet", out.astype(dt), out_sharding)


def chisquare(key, df, shape=None, dtype=None, *, method="exact", out_sharding=None):
    """jax.random.chisquare: 2 exp(loggamma(df / 2))."""
    dt = _float_dtype("chisquare", dtype)
    xp = _xp_of(key, df)
    half = (df / 2) if xp is not np else (np.asarray(df, dt) / dt.type(2))
    lg = loggamma(key, half, shape, dt)
    xp = _xp_of(lg)
    out = xp.exp(lg) * dt.type(2)
    return _placed("chisquare", out, out_sharding) if xp is not np else \
        _place("chisquare", out.astype(dt), out_sharding)


def t(key, df, shape=None, dtype=None, *, out_sharding=None):
    """jax.random.t: Student's t, n * sqrt(df / 2 / gamma(df / 2)) with n
    normal (keys of split(key))."""
    dt = _float_dtype("t", dtype)
    shape = tuple(np.shape(df)) if shape is None and not hasattr(df, "shape") else \
        (tuple(df.shape) if shape is None else _shape(shape))
    key_n, key_g = _key_pair("t", key)
    xp = _xp_of(key_n, df)
    if xp is np:
        n = _normal(key_n, shape, dt)
        half = np.asarray(df, dt) / dt.type(2)
        g = _gamma("t", key_g, half, shape, dt, False)
        return _place("t", (n * np.sqrt(half / np.asarray(g))).astype(dt), out_sharding)
    n = _t_normal(key_n, shape, dt) if _is_traced(key_n) else \
        _jnp().asarray(_normal(key_n, shape, dt))
    half = df / dt.type(2)
    g = _gamma("t", key_g, half, shape, dt, False)
    return _placed("t", n * _jnp().sqrt(half / g), out_sharding)


__all__ += ["gamma", "loggamma", "beta", "dirichlet", "chisquare", "t"]


# ---- poisson ------------------------------------------------------------------------


def _poisson_ops(name, key, traced):
    """(xp, split(key, n) -> keys, uniform(key, shape, dt), lgamma, loop) for
    the poisson sampler: on the host, or in a program for a traced key."""
    if not traced:
        def split(k, n):
            return list(_split_data(k, (n,)))

        def uni(k, shape, dt):
            return _uniform(k, shape, np.dtype(dt), 0.0, 1.0)

        def lg(v):  # XLA's lgamma: inf at the poles (0, -1, ...), math's raises
            return math.inf if v <= 0 and v == math.floor(v) else math.lgamma(v)

        def lgamma(x):
            return np.vectorize(lg, otypes=[np.float64])(x).astype(x.dtype)
        return np, split, uni, lgamma, _HostKeys.loop
    from . import lax

    def split(k, n):
        ks = _t_split(k, (n,))
        return [ks[i] for i in range(n)]

    def uni(k, shape, dt):
        return _t_uniform(name, k, shape, dt, 0.0, 1.0)
    return _jnp(), split, uni, lax.lgamma, _TracedKeys.loop


def _poisson_many(ops, key, lam, shape, dt):
    """JAX's _poisson: Knuth's algorithm for lam < 10, Hormann's transformed
    rejection otherwise, both over all of shape from one key, selected per
    element (numpy's and TensorFlow's choice of algorithms)."""
    xp, split, uni, lgamma, loop = ops  # (carries made like lam: laid out as it)
    f32 = np.float32
    big = np.iinfo(dt).max
    use_knuth = (lam != lam) | (lam < 10)
    lam_k = xp.where(use_knuth, lam, f32(0))
    lam_r = xp.where(use_knuth, f32(1e5), lam)

    def knuth_body(c):
        i, k, rng, log_prod = c
        rng, sub = split(rng, 2)
        k = xp.where(log_prod > -lam_k, k + 1, k)
        return i + 1, k, rng, log_prod + xp.log(uni(sub, shape, f32))
    with np.errstate(divide="ignore", invalid="ignore"):
        k_knuth = loop(lambda c: xp.any(c[3] > -lam_k) & (c[0] < big), knuth_body,
                       (xp.zeros((), dtype=np.int32) if xp is not np else 0,
                        xp.full_like(lam, 0, dtype=dt), key, xp.full_like(lam_k, 0.0)))[1] - 1
        log_lam = xp.log(lam_r)
        b = f32(0.931) + f32(2.53) * xp.sqrt(lam_r)
        a = f32(-0.059) + f32(0.02483) * b
        inv_alpha = f32(1.1239) + f32(1.1328) / (b - f32(3.4))
        v_r = f32(0.9277) - f32(3.6224) / (b - f32(2))

        def rej_body(c):
            i, k_out, accepted, rng = c
            rng, s0, s1 = split(rng, 3)
            u = uni(s0, shape, f32) - f32(0.5)
            v = uni(s1, shape, f32)
            us = f32(0.5) - xp.abs(u)
            k = xp.floor((f32(2) * a / us + b) * u + lam_r + f32(0.43))
            s = xp.log(v * inv_alpha / (a / (us * us) + b))
            t = -lam_r + k * log_lam - lgamma(k + f32(1))
            accept1 = (us >= f32(0.07)) & (v <= v_r)
            reject = (k < 0) | ((us < f32(0.013)) & (v > us))
            accept = accept1 | (~reject & (s <= t))
            return i + 1, xp.where(accept, k, k_out), accepted | accept, rng
        k_rej = loop(lambda c: xp.any(~c[2]) & (c[0] < big), rej_body,
                     (xp.zeros((), dtype=np.int32) if xp is not np else 0,
                      xp.full_like(lam_r, -1.0), xp.full_like(lam, False, dtype=bool), key))[1]
    result = xp.where(use_knuth, k_knuth, xp.astype(k_rej, dt) if xp is not np else
                      k_rej.astype(dt))
    return xp.where(lam == 0, xp.zeros_like(result), result)


def poisson(key, lam, shape=None, dtype=None, *, method="exact", out_sharding=None):
    """jax.random.poisson: Poisson(lam) integers (int32 by default) by JAX's
    exact sampler (Knuth's algorithm below lam = 10, Hormann's transformed
    rejection above), on the host, or as while loops of the program for a
    traced key or lam."""
    if method != "exact":
        raise InvalidArgument("shmap.random.poisson: only method='exact' is implemented")
    dt = np.dtype(np.int32 if dtype is None else dtype)
    if not np.issubdtype(dt, np.integer):
        raise ValueError(f"dtype argument to `poisson` must be an int dtype, got {dt}")
    traced = _is_traced(key) or isinstance(lam, _trace.Tracer)
    if not traced:
        k, _ = _key_data_of("poisson", key)
        lam = np.asarray(_concrete("poisson", lam, "lam"), np.float32)
        shape = lam.shape if shape is None else _shape(shape)
        out = _poisson_many(_poisson_ops("poisson", k, False), k,
                            np.broadcast_to(lam, shape), shape, dt)
        return _place("poisson", np.asarray(out, dt), out_sharding)
    jnp = _jnp()
    k, lam = _in_program("poisson", key, np.dtype(np.float32), (lam, "lam"))
    shape = tuple(lam.shape) if shape is None else _shape(shape)
    out = _poisson_many(_poisson_ops("poisson", k, True), k, jnp.broadcast_to(lam, shape),
                        shape, dt)
    return _placed("poisson", out, out_sharding)


__all__ += ["poisson"]


# ---- samplers that transform the draws above (JAX's constructions) -----------------------
#
# Each is JAX's formula over the samplers above, which place their values (numpy, an
# Array, or a traced value): the arithmetic runs where they are (_xp_of).


def _param(xp, v, dt):
    """A parameter in the draws' dtype: a traced or device value as it is (its
    dtype), a host one converted."""
    if isinstance(v, (_trace.Tracer, Array)):
        return v if np.dtype(v.dtype) == dt else _jnp().astype(v, dt)
    a = np.asarray(_concrete("random", v, "a parameter"), dt)
    return a if xp is np else (dt.type(a) if a.ndim == 0 else _jnp().asarray(a))


def _done(name, xp, out, dt, out_sharding):
    if xp is np:
        return _place(name, np.asarray(out, dt), out_sharding)
    return _placed(name, out, out_sharding)


def _pshape(shape, *params):
    if shape is not None:
        return _shape(shape)
    return tuple(np.broadcast_shapes(*[tuple(getattr(p, "shape", np.shape(p))) for p in params]))


def pareto(key, b, shape=None, dtype=None, *, out_sharding=None):
    """jax.random.pareto: exp(exponential / b)."""
    dt = _float_dtype("pareto", dtype)
    shape = _pshape(shape, b)
    e = exponential(key, shape, dt)
    xp = _xp_of(e, b)
    return _done("pareto", xp, xp.exp(e / _param(xp, b, dt)), dt, out_sharding)


def maxwell(key, shape=(), dtype=None, *, out_sharding=None):
    """jax.random.maxwell: the norm of three normal values."""
    dt = _float_dtype("maxwell", dtype)
    z = normal(key, _shape(shape) + (3,), dt)
    xp = _xp_of(z)
    return _done("maxwell", xp, xp.sqrt(xp.sum(z * z, axis=-1)), dt, out_sharding)


def double_sided_maxwell(key, loc, scale, shape=(), dtype=None):
    """jax.random.double_sided_maxwell: a Maxwell value with a random sign,
    scaled and shifted (shape followed by the parameters' shape)."""
    dt = _float_dtype("double_sided_maxwell", dtype)
    pshape = _pshape(None, loc, scale)
    shape = (tuple(_shape(shape)) or pshape) + pshape
    k1, k2 = _key_pair("double_sided_maxwell", key)
    m = maxwell(k1, shape, dt)
    sign = rademacher(k2, shape, dt)
    xp = _xp_of(m, sign, loc, scale)
    return _done("double_sided_maxwell", xp,
                 sign * m * _param(xp, scale, dt) + _param(xp, loc, dt), dt, None)


def weibull_min(key, scale, concentration, shape=(), dtype=None):
    """jax.random.weibull_min: the inverse Weibull CDF of a uniform value."""
    dt = _float_dtype("weibull_min", dtype)
    u = uniform(key, _shape(shape), dt, 0.0, 1.0)
    xp = _xp_of(u, scale, concentration)
    return _done("weibull_min", xp,
                 xp.power(-xp.log1p(-u), dt.type(1.0) / _param(xp, concentration, dt)) *
                 _param(xp, scale, dt), dt, None)


def lognormal(key, sigma=np.float32(1), shape=None, dtype=None, *, out_sharding=None):
    """jax.random.lognormal: exp(normal * sigma)."""
    dt = _float_dtype("lognormal", dtype)
    z = normal(key, _pshape(shape, sigma), dt)
    xp = _xp_of(z, sigma)
    return _done("lognormal", xp, xp.exp(z * _param(xp, sigma, dt)), dt, out_sharding)


def rayleigh(key, scale, shape=None, dtype=None, *, out_sharding=None):
    """jax.random.rayleigh: scale * sqrt(-2 log u)."""
    dt = _float_dtype("rayleigh", dtype)
    u = uniform(key, _pshape(shape, scale), dt, 0.0, 1.0)
    xp = _xp_of(u, scale)
    with np.errstate(divide="ignore"):
        return _done("rayleigh", xp, _param(xp, scale, dt) * xp.sqrt(xp.log(u) * dt.type(-2)),
                     dt, out_sharding)


def wald(key, mean, shape=None, dtype=None, *, out_sharding=None):
    """jax.random.wald: the inverse Gaussian by Michael, Schucany and Haas's
    transformation of a normal and a uniform value (keys of split(key))."""
    dt = _float_dtype("wald", dtype)
    shape = _pshape(shape, mean)
    k1, k2 = _key_pair("wald", key)
    v, z = normal(k1, shape, dt), uniform(k2, shape, dt, 0.0, 1.0)
    xp = _xp_of(v, z, mean)
    m = _param(xp, mean, dt)
    y = v * v
    ysq, msq = y * y, m * m
    x = m + msq * y / dt.type(2) - m / dt.type(2) * xp.sqrt(dt.type(4) * m * y + msq * ysq)
    return _done("wald", xp, xp.where(z <= m / (m + x), x, msq / x), dt, out_sharding)


def geometric(key, p, shape=None, dtype=None, *, out_sharding=None):
    """jax.random.geometric: floor(log u / log1p(-p)) + 1 (int32 by default;
    u = 0 taken as 1, as JAX's)."""
    it = np.dtype(np.int32 if dtype is None else dtype)
    if not np.issubdtype(it, np.integer):
        raise ValueError(f"dtype argument to `geometric` must be an int dtype, got {it}")
    pd = np.dtype(getattr(p, "dtype", np.float32))
    ft = pd if np.issubdtype(pd, np.floating) else np.dtype(np.float32)
    u = uniform(key, _pshape(shape, p), ft, 0.0, 1.0)
    xp = _xp_of(u, p)
    u = xp.where(u == 0, ft.type(1), u)
    g = xp.floor(xp.log(u) / xp.log1p(-_param(xp, p, ft))) + ft.type(1)
    return _done("geometric", xp, g.astype(it) if xp is np else xp.astype(g, it), it,
                 out_sharding)


def triangular(key, left, mode, right, shape=None, dtype=None, *, out_sharding=None):
    """jax.random.triangular: the inverse CDF of a uniform value, on either
    side of mode."""
    dt = _float_dtype("triangular", dtype)
    u = uniform(key, _pshape(shape, left, mode, right), dt, 0.0, 1.0)
    xp = _xp_of(u, left, mode, right)
    lo, md, hi = (_param(xp, v, dt) for v in (left, mode, right))
    fc = (md - lo) / (hi - lo)
    out1 = lo + xp.sqrt(u * (hi - lo) * (md - lo))
    out2 = hi - xp.sqrt((dt.type(1) - u) * (hi - lo) * (hi - md))
    return _done("triangular", xp, xp.where(u < fc, out1, out2), dt, out_sharding)


def f(key, dfnum, dfden, shape=None, dtype=None, *, out_sharding=None):
    """jax.random.f: the ratio of two chi-square values over their degrees
    of freedom (keys of split(key): the denominator's first)."""
    dt = _float_dtype("f", dtype)
    k_den, k_num = _key_pair("f", key)
    num = chisquare(k_num, dfnum, shape, dt)
    den = chisquare(k_den, dfden, shape, dt)
    xp = _xp_of(num, den)
    return _done("f", xp, (num / _param(xp, dfnum, dt)) / (den / _param(xp, dfden, dt)), dt,
                 out_sharding)


def generalized_normal(key, p, shape=(), dtype=None, *, out_sharding=None):
    """jax.random.generalized_normal: a random sign times gamma(1 / p) ** (1 / p)."""
    dt = _float_dtype("generalized_normal", dtype)
    k1, k2 = _key_pair("generalized_normal", key)
    g = gamma(k1, 1 / p, _shape(shape), dt)
    r = rademacher(k2, _shape(shape), dt)
    xp = _xp_of(g, r)
    return _done("generalized_normal", xp, r * g ** (1 / p), dt, out_sharding)


def multivariate_normal(key, mean, cov, shape=None, dtype=None, method="cholesky", *,
                        out_sharding=None):
    """jax.random.multivariate_normal: mean + factor @ normal values, factor
    cov's Cholesky factor (method='cholesky'), or from its eigh or svd."""
    dt = _float_dtype("multivariate_normal", dtype)
    if method not in ("svd", "eigh", "cholesky"):
        raise ValueError("method must be one of {'svd', 'eigh', 'cholesky'}")
    mshape = tuple(getattr(mean, "shape", np.shape(mean)))
    cshape = tuple(getattr(cov, "shape", np.shape(cov)))
    if len(mshape) < 1:
        raise ValueError(f"multivariate_normal requires mean.ndim >= 1, got mean.ndim == "
                         f"{len(mshape)}")
    if len(cshape) < 2:
        raise ValueError(f"multivariate_normal requires cov.ndim >= 2, got cov.ndim == "
                         f"{len(cshape)}")
    n = mshape[-1]
    if cshape[-2:] != (n, n):
        raise ValueError(f"multivariate_normal requires cov.shape == (..., n, n) for n={n}, "
                         f"but got cov.shape == {cshape}.")
    shape = tuple(np.broadcast_shapes(mshape[:-1], cshape[:-2])) if shape is None else \
        _shape(shape)
    z = normal(key, shape + (n,), dt)
    xp = _xp_of(z, mean, cov)
    c = _param(xp, cov, dt)
    if xp is np:
        if method == "svd":
            u, s, _ = np.linalg.svd(c)
            factor = u * np.sqrt(s[..., None, :])
        elif method == "eigh":
            w, v = np.linalg.eigh(c)
            factor = v * np.sqrt(w[..., None, :])
        else:
            factor = np.linalg.cholesky(c)
        out = _param(xp, mean, dt) + np.einsum("...ij,...j->...i", factor, z)
        return _place("multivariate_normal", out.astype(dt), out_sharding)
    from . import linalg
    if method == "svd":
        u, s, _ = linalg.svd(c)
        factor = u * _jnp().sqrt(_jnp().expand_dims(s, -2))
    elif method == "eigh":
        w, v = linalg.eigh(c)
        factor = v * _jnp().sqrt(_jnp().expand_dims(w, -2))
    else:
        factor = linalg.cholesky(c)
    return _placed("multivariate_normal",
                   _param(xp, mean, dt) + _jnp().einsum("...ij,...j->...i", factor, z),
                   out_sharding)


__all__ += ["pareto", "maxwell", "double_sided_maxwell", "weibull_min", "lognormal", "rayleigh",
            "wald", "geometric", "triangular", "f", "generalized_normal", "multivariate_normal"]


def orthogonal(key, n, shape=(), dtype=None, m=None, *, out_sharding=None):
    """jax.random.orthogonal: the Q of a normal matrix's QR, each column's
    sign the sign of R's diagonal ((n, m) matrices, m = n by default)."""
    dt = _float_dtype("orthogonal", dtype)
    m = n if m is None else m
    z = normal(key, _shape(shape) + (max(n, m), min(n, m)), dt)
    xp = _xp_of(z)
    if xp is np:
        q, r = np.linalg.qr(z)
        x = q * np.expand_dims(np.sign(np.diagonal(r, axis1=-2, axis2=-1)), -2)
        return _place("orthogonal", (np.swapaxes(x, -1, -2) if n < m else x).astype(dt),
                      out_sharding)
    from . import linalg
    q, r = linalg.qr(z)
    x = q * xp.expand_dims(xp.sign(linalg.diagonal(r)), -2)
    return _placed("orthogonal", xp.swapaxes(x, -1, -2) if n < m else x, out_sharding)


def ball(key, d, p=2, shape=(), dtype=None):
    """jax.random.ball: points of the unit p-norm ball in d dimensions (a
    generalized normal vector over its p-norm with an exponential value)."""
    dt = _float_dtype("ball", dtype)
    k1, k2 = _key_pair("ball", key)
    g = generalized_normal(k1, p, _shape(shape) + (d,), dt)
    e = exponential(k2, _shape(shape), dt)
    xp = _xp_of(g, e)
    return _done("ball", xp, g / xp.expand_dims((xp.sum(xp.abs(g) ** p, axis=-1) + e) ** (1 / p),
                                                -1), dt, None)


__all__ += ["orthogonal", "ball"]


# ---- binomial -----------------------------------------------------------------------

_STIRLING_TAIL = np.array([0.0810614667953272, 0.0413406959554092, 0.0276779256849983,
                           0.02079067210376509, 0.0166446911898211, 0.0138761288230707,
                           0.0118967099458917, 0.0104112652619720, 0.00925546218271273,
                           0.00833056343336287])


def _binomial_many(ops, key, count, prob, shape, dt):
    """JAX's _binomial: the inversion algorithm where count * q <= 10 (q
    the smaller of p and 1 - p), Hormann's BTRS otherwise, both over all of
    shape from one key, selected per element; NaN for a NaN or negative
    count or a bad p, inf for an infinite count (TensorFlow's choices)."""
    xp, split, uni, _, loop = ops
    f = dt.type

    def tail(k):  # _stirling_approx_tail
        vals = _STIRLING_TAIL.astype(dt)
        use = k <= f(9)
        k = xp.clip(k, f(0), f(9))
        kp1sq = (k + f(1)) * (k + f(1))
        approx = (f(1.0 / 12) - (f(1.0 / 360) - f(1.0 / 1260) / kp1sq) / kp1sq) / (k + f(1))
        k = xp.floor(k)
        if xp is np:  # the table's entry (an index from NaN clamped, as XLA's gather)
            table = vals[np.clip(np.nan_to_num(k, nan=0.0).astype(np.int32), 0, 9)]
        else:  # the same by selects: elementwise, so laid out as k
            table = xp.full_like(k, vals[0])
            for j in range(1, 10):
                table = xp.where(k == f(j), vals[j], table)
        return xp.where(use, table, approx)

    p_lt_half = prob < f(0.5)
    q = xp.where(p_lt_half, prob, f(1) - prob)
    count_bad = (count != count) | (count < f(0))
    count_inf = xp.isinf(count)
    q_nan, q_neg = q != q, q < f(0)
    q = xp.where(q_nan | q_neg, f(0.01), q)
    use_inv = count_bad | (count * q <= f(10))
    count = xp.floor(count)
    like = xp.where(use_inv, f(0), f(0))  # zeros laid out as count and p together
    c_inv = xp.where(use_inv, count, f(0))
    c_b = xp.where(use_inv, f(1e4), count)
    q_b = xp.where(use_inv, f(0.5), q)
    big = np.finfo(dt).max
    zero_i = 0 if xp is np else xp.zeros((), dtype=np.int32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log1mq = xp.log1p(-q)

        def inv_body(c):
            i, num, gsum, k = c
            sub, k = split(k, 2)
            num = xp.where(gsum <= c_inv, num + f(1), num)
            geom = xp.ceil(xp.log(uni(sub, shape, dt)) / log1mq)
            return i + 1, num, gsum + geom, k
        k_inv = loop(lambda c: xp.any(c[2] <= c_inv) & (c[0] < big), inv_body,
                     (zero_i, like, like, key))[1] - f(1)
        sd = xp.sqrt(c_b * q_b * (f(1) - q_b))
        b = f(1.15) + f(2.53) * sd
        a = f(-0.0873) + f(0.0248) * b + f(0.01) * q_b
        cc = c_b * q_b + f(0.5)
        v_r = f(0.92) - f(4.2) / b
        r = q_b / (f(1) - q_b)
        alpha = (f(2.83) + f(5.1) / b) * sd
        m = xp.floor((c_b + f(1)) * q_b)

        def btrs_body(c):
            i, k_out, accepted, k = c
            k, s0, s1 = split(k, 3)
            u = uni(s0, shape, dt) - f(0.5)
            v = uni(s1, shape, dt)
            us = f(0.5) - xp.abs(u)
            accept1 = (us >= f(0.07)) & (v <= v_r)
            kk = xp.floor((f(2) * a / us + b) * u + cc)
            reject = (kk < 0) | (kk > c_b)
            v = xp.log(v * alpha / (a / (us * us) + b))
            ub = ((m + f(0.5)) * xp.log((m + f(1)) / (r * (c_b - m + f(1)))) +
                  (c_b + f(1)) * xp.log((c_b - m + f(1)) / (c_b - kk + f(1))) +
                  (kk + f(0.5)) * xp.log(r * (c_b - kk + f(1)) / (kk + f(1))) +
                  tail(m) + tail(c_b - m) - tail(kk) - tail(c_b - kk))
            accept = accept1 | (~reject & (v <= ub))
            return i + 1, xp.where(accept, kk, k_out), accepted | accept, k
        k_btrs = loop(lambda c: xp.any(~c[2]) & (c[0] < big), btrs_body,
                      (zero_i, like - f(1), like != like, key))[1]
        out = xp.where(use_inv, k_inv, k_btrs)
        invalid = q_neg | q_nan | count_bad
        out = xp.where(invalid, f(np.nan), out)
        out = xp.where(count_inf & ~invalid, f(np.inf), out)
        return xp.where(p_lt_half | count_bad | q_nan | count_inf, out, count - out)


def binomial(key, n, p, shape=None, dtype=None):
    """jax.random.binomial: Binomial(n, p) counts as floats (float32 by
    default), by JAX's algorithms (inversion for small n * min(p, 1 - p),
    transformed rejection otherwise), on the host or as while loops of the
    program for a traced key, n or p."""
    dt = _float_dtype("binomial", dtype)
    traced = _is_traced(key) or isinstance(n, _trace.Tracer) or isinstance(p, _trace.Tracer)
    if not traced:
        k, _ = _key_data_of("binomial", key)
        n = np.asarray(_concrete("binomial", n, "n"), dt)
        p = np.asarray(_concrete("binomial", p, "p"), dt)
        shape = np.broadcast_shapes(n.shape, p.shape) if shape is None else _shape(shape)
        out = _binomial_many(_poisson_ops("binomial", k, False), k,
                             np.broadcast_to(n, shape), np.broadcast_to(p, shape), shape, dt)
        return _place("binomial", np.asarray(out, dt), None)
    jnp = _jnp()
    k, n, p = _in_program("binomial", key, dt, (n, "n"), (p, "p"))
    shape = tuple(np.broadcast_shapes(tuple(n.shape), tuple(p.shape))) if shape is None else \
        _shape(shape)
    return _binomial_many(_poisson_ops("binomial", k, True), k, jnp.broadcast_to(n, shape),
                          jnp.broadcast_to(p, shape), shape, dt)


__all__ += ["binomial"]


# Python's float and int as dtype= (by keyword or position): JAX's float32 and int32
from ._core import _canon_module_dtypes  # noqa: E402
_canon_module_dtypes(globals(), __all__, ("dtype", "new_dtype"))
