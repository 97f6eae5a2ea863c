"""jax.scipy.sparse for shmap: the iterative solvers of
shmap.scipy.sparse.linalg (cg, bicgstab), whose matrix is a function."""
from . import linalg  # noqa: F401

__all__ = ["linalg"]
