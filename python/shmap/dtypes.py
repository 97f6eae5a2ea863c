"""jax.dtypes for shmap: dtype queries as JAX's (shmap's dtypes are
numpy's; jax_enable_x64 changes nothing, so canonicalize_dtype keeps a
64-bit dtype, and Python's float and int are float32 and int32)."""
import numpy as np

from ._core import _canon_dtype

__all__ = ["canonicalize_dtype", "issubdtype", "result_type", "finfo", "iinfo",
           "is_weakly_typed", "scalar_type_of", "prng_key", "extended"]

finfo, iinfo = np.finfo, np.iinfo


def canonicalize_dtype(dtype, allow_extended_dtype=False):
    """The dtype shmap computes dtype in: numpy's, Python's float and int
    as float32 and int32."""
    return np.dtype(_canon_dtype(dtype))


def issubdtype(a, b):
    """jax.dtypes.issubdtype: numpy's (a key's dtype is of prng_key)."""
    if b is prng_key or b is extended:
        return str(a).startswith("key<")
    if a is prng_key or a is extended:
        return False
    return np.issubdtype(_canon_dtype(a), _canon_dtype(b))


def result_type(*args, return_weak_type_flag=False):
    """jax.dtypes.result_type: jnp.result_type (weak Python numbers)."""
    from .numpy import result_type as _result_type
    dt = _result_type(*args)
    if return_weak_type_flag:
        weak = all(isinstance(a, (int, float)) and not isinstance(a, bool) or
                   getattr(a, "weak_type", False) for a in args)
        return dt, weak
    return dt


def is_weakly_typed(x):
    """Whether x is weakly typed: a Python number, or a value made of the
    Python numbers a jit was given."""
    return isinstance(x, (int, float, complex)) and not isinstance(x, bool) or \
        bool(getattr(x, "weak_type", False))


def scalar_type_of(x):
    """The Python scalar type of x's dtype (bool, int, float)."""
    kind = np.dtype(getattr(x, "dtype", None) or np.asarray(x).dtype).kind
    return {"b": bool, "i": int, "u": int, "f": float, "c": complex}[kind]


class _Abstract:
    """An abstract dtype family (issubdtype's second argument)."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name


extended = _Abstract("extended")
prng_key = _Abstract("prng_key")


def __getattr__(name):
    if name in ("bfloat16", "float0"):
        raise AttributeError(f"shmap has no {name} dtype (docs/python.md: no ml_dtypes; no "
                             f"float0 cotangents)")
    raise AttributeError(f"module 'shmap.dtypes' has no attribute {name!r}")
