"""JAX's jax.errors: the errors a traced value raises where Python needs
its value (bool(), int(), an index, numpy), and JAX's core.ShardingTypeError
(a sharding rule's refusal)."""
from ._core import (ConcretizationTypeError, ShardingTypeError, TracerArrayConversionError,
                    TracerBoolConversionError, TracerIntegerConversionError)

__all__ = ["ConcretizationTypeError", "ShardingTypeError", "TracerArrayConversionError",
           "TracerBoolConversionError", "TracerIntegerConversionError"]
