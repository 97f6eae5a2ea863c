"""jax.scipy for shmap: special functions (shmap.scipy.special), the normal
distributions (shmap.scipy.stats), scipy.linalg's names over
shmap.linalg (shmap.scipy.linalg) and the iterative solvers
(shmap.scipy.sparse.linalg: cg, bicgstab), as composites of the op table's ops:
`from shmap.scipy.special import logsumexp` as `from jax.scipy.special
import logsumexp`."""
from . import linalg, sparse, special, stats  # noqa: F401

__all__ = ["linalg", "sparse", "special", "stats"]
