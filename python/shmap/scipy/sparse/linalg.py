"""jax.scipy.sparse.linalg's iterative solvers, cg and bicgstab, as JAX
writes them (jax/_src/scipy/sparse/linalg.py): the same steps in a
lax.while_loop, so each is one loop of the program that runs until the
residual meets the tolerance (`norm(r) <= max(tol * norm(b), atol)`, SciPy's
non-legacy rule) or maxiter turns (10 times b's size by default). A is a
matrix, or a function computing A @ x (a matvec over sharded arrays: its
collectives run every turn); b and x0 may be pytrees. As JAX's, the second
result (info) is None. Differentiating through them is refused (JAX
differentiates them implicitly, with another solve: not here)."""
import functools
import operator

import numpy as _np

from ... import lax
from ... import numpy as jnp
from ...tree_util import tree_leaves, tree_map, tree_structure

__all__ = ["cg", "bicgstab"]


def _vdot_real(x, y):
    return jnp.sum(x * y)


def _vdot_tree(x, y):
    return sum(tree_leaves(tree_map(_vdot_real, x, y)))


def _mul(scalar, tree):
    return tree_map(functools.partial(operator.mul, scalar), tree)


def _add(x, y):
    return tree_map(operator.add, x, y)


def _sub(x, y):
    return tree_map(operator.sub, x, y)


def _identity(x):
    return x


def _normalize_matvec(f):
    """A matrix-vector product from A: a function as it is, a square matrix
    as a product with it (JAX's sentences otherwise)."""
    if callable(f):
        return f
    shape = getattr(f, "shape", None)
    if shape is not None:
        if len(shape) != 2 or shape[0] != shape[1]:
            raise ValueError(f"linear operator must be a square matrix, but has shape: "
                             f"{tuple(shape)}")
        return functools.partial(jnp.dot, f)
    raise TypeError(f"linear operator must be either a function or ndarray: {f}")


def _cg_solve(A, b, x0, *, maxiter, tol, atol, M):
    bs = _vdot_tree(b, b)
    atol2 = jnp.maximum(tol * tol * bs, atol * atol)

    def cond_fun(value):
        _, r, gamma, _, k = value
        rs = gamma if M is _identity else _vdot_tree(r, r)
        return (rs > atol2) & (k < maxiter)

    def body_fun(value):
        x, r, gamma, p, k = value
        Ap = A(p)
        alpha = gamma / _vdot_tree(p, Ap)
        x_ = _add(x, _mul(alpha, p))
        r_ = _sub(r, _mul(alpha, Ap))
        z_ = M(r_)
        gamma_ = _vdot_tree(r_, z_)
        beta_ = gamma_ / gamma
        p_ = _add(z_, _mul(beta_, p))
        return x_, r_, gamma_, p_, k + 1

    r0 = _sub(b, A(x0))
    p0 = z0 = M(r0)
    gamma0 = _vdot_tree(r0, z0)
    x_final, *_ = lax.while_loop(cond_fun, body_fun, (x0, r0, gamma0, p0, 0))
    return x_final


def _bicgstab_solve(A, b, x0, *, maxiter, tol, atol, M):
    bs = _vdot_tree(b, b)
    atol2 = jnp.maximum(tol * tol * bs, atol * atol)

    def cond_fun(value):
        x, r, *_, k = value
        rs = _vdot_tree(r, r)
        return (rs > atol2) & (k < maxiter) & (k >= 0)  # k < 0: a breakdown

    def body_fun(value):
        x, r, rhat, alpha, omega, rho, p, q, k = value
        rho_ = _vdot_tree(rhat, r)
        beta = rho_ / rho * alpha / omega
        p_ = _add(r, _mul(beta, _sub(p, _mul(omega, q))))
        phat = M(p_)
        q_ = A(phat)
        alpha_ = rho_ / _vdot_tree(rhat, q_)
        s = _sub(r, _mul(alpha_, q_))
        exit_early = _vdot_tree(s, s) < atol2
        shat = M(s)
        t = A(shat)
        omega_ = _vdot_tree(t, s) / _vdot_tree(t, t)
        x_ = tree_map(functools.partial(jnp.where, exit_early),
                      _add(x, _mul(alpha_, phat)),
                      _add(x, _add(_mul(alpha_, phat), _mul(omega_, shat))))
        r_ = tree_map(functools.partial(jnp.where, exit_early), s, _sub(s, _mul(omega_, t)))
        k_ = jnp.where((omega_ == 0) | (alpha_ == 0), -11, k + 1)
        k_ = jnp.where(rho_ == 0, -10, k_)
        return x_, r_, rhat, alpha_, omega_, rho_, p_, q_, k_

    r0 = _sub(b, A(x0))
    dt = jnp.result_type(*tree_leaves(b))
    one = jnp.ones((), dtype=dt)
    x_final, *_ = lax.while_loop(cond_fun, body_fun,
                                 (x0, r0, r0, one, one, one, r0, r0, jnp.zeros((), jnp.int32)))
    return x_final


def _isolve(solve, A, b, x0=None, *, tol=1e-5, atol=0.0, maxiter=None, M=None):
    from ..._trace import _run_now
    if _run_now((A, b, x0, M), {}):
        from ... import jit  # at once: one jit program of the whole solve
        return jit(lambda b, x0: _isolve(solve, A, b, x0, tol=tol, atol=atol, maxiter=maxiter,
                                         M=M))(b, x0 if x0 is not None else
                                               tree_map(jnp.zeros_like, b))
    if x0 is None:
        x0 = tree_map(jnp.zeros_like, b)
    if maxiter is None:
        maxiter = 10 * sum(int(_np.prod(x.shape)) for x in tree_leaves(b))  # scipy's
    A = _normalize_matvec(A)
    M = _identity if M is None else _normalize_matvec(M)
    if tree_structure(x0) != tree_structure(b):
        raise ValueError(f"x0 and b must have matching tree structure: {tree_structure(x0)} vs "
                         f"{tree_structure(b)}")
    shapes = lambda t: [tuple(x.shape) for x in tree_leaves(t)]
    if shapes(x0) != shapes(b):
        raise ValueError(f"arrays in x0 and b must have matching shapes: {shapes(x0)} vs "
                         f"{shapes(b)}")
    return solve(A, b, x0, maxiter=maxiter, tol=tol, atol=atol, M=M), None


def cg(A, b, x0=None, *, tol=1e-5, atol=0.0, maxiter=None, M=None):
    """jax.scipy.sparse.linalg.cg: Conjugate Gradient iteration for A x = b,
    A hermitian positive definite (a matrix or a function computing A @ x),
    preconditioner M (likewise, approximating A's inverse). Returns (x,
    None)."""
    return _isolve(_cg_solve, A, b, x0, tol=tol, atol=atol, maxiter=maxiter, M=M)


def bicgstab(A, b, x0=None, *, tol=1e-5, atol=0.0, maxiter=None, M=None):
    """jax.scipy.sparse.linalg.bicgstab: BiCGSTAB iteration for A x = b
    with any nonsingular A (a matrix or a function computing A @ x). Returns
    (x, None)."""
    return _isolve(_bicgstab_solve, A, b, x0, tol=tol, atol=atol, maxiter=maxiter, M=M)
