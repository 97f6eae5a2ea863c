"""jax.profiler for shmap: the annotations and trace calls a training loop
makes, taken and doing nothing (the service's work is timed by its
metrics and job records, docs/service.md; no profiler trace is written)."""
import contextlib

__all__ = ["TraceAnnotation", "StepTraceAnnotation", "annotate_function", "start_trace",
           "stop_trace", "trace", "start_server", "stop_server", "device_memory_profile",
           "save_device_memory_profile"]


class TraceAnnotation(contextlib.ContextDecorator):
    """jax.profiler.TraceAnnotation(name, **kwargs): a context (or
    decorator) that marks nothing here."""

    def __init__(self, name="", **kwargs):
        self.name, self.kwargs = name, kwargs

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class StepTraceAnnotation(TraceAnnotation):
    """jax.profiler.StepTraceAnnotation(name, step_num=...)."""


def annotate_function(func=None, name=None, **kwargs):
    """jax.profiler.annotate_function: func itself."""
    if func is None:
        return lambda f: f
    return func


def start_trace(log_dir, create_perfetto_link=False, create_perfetto_trace=False, **kwargs):
    """jax.profiler.start_trace: nothing is traced (see the module's note)."""


def stop_trace():
    """jax.profiler.stop_trace."""


@contextlib.contextmanager
def trace(log_dir, create_perfetto_link=False, create_perfetto_trace=False, **kwargs):
    """jax.profiler.trace: a context that traces nothing."""
    yield


def start_server(port):
    """jax.profiler.start_server: no profiler server here."""


def stop_server():
    """jax.profiler.stop_server."""


def device_memory_profile(backend=None):
    """jax.profiler.device_memory_profile: no pprof profile here (b"")."""
    return b""


def save_device_memory_profile(filename, backend=None):
    """jax.profiler.save_device_memory_profile: writes an empty profile."""
    with open(filename, "wb") as f:
        f.write(device_memory_profile(backend))
