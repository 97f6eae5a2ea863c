"""jax.scipy for shmap: special functions (shmap.scipy.special), the normal
distributions (shmap.scipy.stats) and scipy.linalg's names over
shmap.linalg (shmap.scipy.linalg), as composites of the op table's ops:
`from shmap.scipy.special import logsumexp` as `from jax.scipy.special
import logsumexp`."""
from . import linalg, special, stats  # noqa: F401

__all__ = ["linalg", "special", "stats"]
