"""jax.scipy for shmap: special functions (shmap.scipy.special), the normal
distributions (shmap.scipy.stats), scipy.linalg's names over shmap.linalg
with LU, Hessenberg, real Schur, polar, matrix square root and the special
matrices (shmap.scipy.linalg), the iterative solvers
(shmap.scipy.sparse.linalg: cg, bicgstab), direct convolutions and
detrend (shmap.scipy.signal), BFGS and L-BFGS minimization
(shmap.scipy.optimize), the trapezoidal rule (shmap.scipy.integrate) and
map_coordinates (shmap.scipy.ndimage), as composites of the op table's
ops: `from shmap.scipy.special import logsumexp` as `from jax.scipy.special
import logsumexp`."""
from . import integrate, linalg, ndimage, optimize, signal, sparse, special, stats  # noqa: F401

__all__ = ["integrate", "linalg", "ndimage", "optimize", "signal", "sparse", "special", "stats"]
