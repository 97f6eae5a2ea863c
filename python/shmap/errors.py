"""JAX's jax.errors: the errors a traced value raises where Python needs
its value (bool(), int(), an index, numpy), and JAX's core.ShardingTypeError
(a sharding rule's refusal)."""
from ._core import (ConcretizationTypeError, KeyReuseError, NonConcreteBooleanIndexError,
                    ShardingTypeError, ShmapError, TracerArrayConversionError,
                    TracerBoolConversionError, TracerIntegerConversionError,
                    UnexpectedTracerError)

JaxRuntimeError = ShmapError  # a failure of the service or of a job

__all__ = ["ConcretizationTypeError", "JaxRuntimeError", "KeyReuseError",
           "NonConcreteBooleanIndexError", "ShardingTypeError", "TracerArrayConversionError",
           "TracerBoolConversionError", "TracerIntegerConversionError", "UnexpectedTracerError"]
