"""jax.config for shmap: config.update(name, value) and the options as
attributes (shmap.config.jax_enable_x64), for scripts that set them at the
top as JAX's do.

Options that change what a program computes act or are refused:
jax_threefry_partitionable selects shmap.random's mode (as JAX's);
jax_default_prng_impl takes only 'threefry2x32'; jax_debug_nans,
jax_debug_infs and jax_disable_jit take only False, and
jax_numpy_rank_promotion only 'allow' (shmap implements none of those
checks). jax_enable_x64 is taken and changes nothing: numpy arguments keep
their dtype (JAX's behaviour with x64 enabled) and Python numbers are
float32 / int32 (JAX's without). The others (platforms, caches, logging)
are taken and have no meaning here."""
import contextlib

from ._core import InvalidArgument

_DEFAULTS = {
    "jax_enable_x64": False,
    "jax_threefry_partitionable": True,
    "jax_default_prng_impl": "threefry2x32",
    "jax_debug_nans": False,
    "jax_debug_infs": False,
    "jax_disable_jit": False,
    "jax_numpy_rank_promotion": "allow",
    "jax_numpy_dtype_promotion": "standard",
    "jax_default_matmul_precision": None,
    "jax_platforms": None,
    "jax_platform_name": "",
    "jax_compilation_cache_dir": None,
    "jax_persistent_cache_min_compile_time_secs": 1.0,
    "jax_persistent_cache_min_entry_size_bytes": 0,
    "jax_log_compiles": False,
    "jax_traceback_filtering": "auto",
    "jax_explain_cache_misses": False,
    "jax_check_tracer_leaks": False,
    "jax_transfer_guard": None,
    "jax_transfer_guard_host_to_device": None,
    "jax_transfer_guard_device_to_host": None,
    "jax_transfer_guard_device_to_device": None,
}

# option -> the values shmap implements (others refused)
_ONLY = {
    "jax_default_prng_impl": ("threefry2x32",),
    "jax_debug_nans": (False,),
    "jax_debug_infs": (False,),
    "jax_disable_jit": (False,),
    "jax_numpy_rank_promotion": ("allow",),
    "jax_numpy_dtype_promotion": ("standard",),
}


class Config:
    """jax.config: update(name, value), read(name), and each option as an
    attribute."""

    def __init__(self):
        object.__setattr__(self, "_values", dict(_DEFAULTS))

    def update(self, name, value):
        if name not in _DEFAULTS:
            raise AttributeError(f"Unrecognized config option: {name}")
        if name in _ONLY and value not in _ONLY[name]:
            raise InvalidArgument(f"config {name}={value!r} is not implemented by shmap (it "
                                  f"takes {', '.join(map(repr, _ONLY[name]))})")
        if name == "jax_threefry_partitionable":
            from . import random
            random._default_mode[0] = bool(value)
        self._values[name] = value

    def read(self, name):
        if name not in _DEFAULTS:
            raise AttributeError(f"Unrecognized config option: {name}")
        return self._values[name]

    def __getattr__(self, name):
        values = object.__getattribute__(self, "_values")
        if name in values:
            return values[name]
        raise AttributeError(f"Unrecognized config option: {name}")

    def __setattr__(self, name, value):
        raise AttributeError("use config.update(name, value)")


config = Config()


def _option_context(name, doc):
    """jax's context manager of option name: the option set for the block,
    as config.update would (values shmap does not implement refused), then
    put back."""
    @contextlib.contextmanager
    def ctx(new_val=True):
        old = config.read(name)
        config.update(name, new_val)
        try:
            yield
        finally:
            config._values[name] = old
    ctx.__doc__ = doc
    return ctx


# jax's context managers of options: name -> (option, what it does here)
_CONTEXTS = {
    "enable_x64": ("jax_enable_x64", "taken; changes nothing"),
    "debug_nans": ("jax_debug_nans", "only False: no NaN checks"),
    "debug_infs": ("jax_debug_infs", "only False: no inf checks"),
    "disable_jit": ("jax_disable_jit", "refused: programs run on the service"),
    "numpy_rank_promotion": ("jax_numpy_rank_promotion", "only 'allow'"),
    "numpy_dtype_promotion": ("jax_numpy_dtype_promotion", "only 'standard'"),
    "default_matmul_precision": ("jax_default_matmul_precision",
                                 "no effect: CPU products are full precision"),
    "log_compiles": ("jax_log_compiles", "no effect"),
    "explain_cache_misses": ("jax_explain_cache_misses", "no effect"),
    "checking_leaks": ("jax_check_tracer_leaks",
                       "no effect: a value used outside its trace is refused anyway"),
    "transfer_guard": ("jax_transfer_guard", "no effect: transfers are not guarded"),
    "transfer_guard_host_to_device": ("jax_transfer_guard_host_to_device", "no effect"),
    "transfer_guard_device_to_host": ("jax_transfer_guard_device_to_host", "no effect"),
    "transfer_guard_device_to_device": ("jax_transfer_guard_device_to_device", "no effect"),
}
for _name, (_option, _what) in _CONTEXTS.items():
    globals()[_name] = _option_context(_option, f"jax.{_name} ({_what}).")
