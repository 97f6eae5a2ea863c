"""JAX's jax.errors: the errors a traced value raises where Python needs
its value (bool(), int(), an index, numpy)."""
from ._core import (ConcretizationTypeError, TracerArrayConversionError,
                    TracerBoolConversionError, TracerIntegerConversionError)

__all__ = ["ConcretizationTypeError", "TracerArrayConversionError", "TracerBoolConversionError",
           "TracerIntegerConversionError"]
