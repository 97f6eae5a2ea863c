"""jax.scipy.optimize: minimize (method 'BFGS', and JAX's experimental
'l-bfgs-experimental-do-not-rely-on-this') returning OptimizeResults, as
JAX writes them (jax/_src/scipy/optimize/minimize.py, bfgs.py, _lbfgs.py,
line_search.py): the same steps, each iteration a turn of a
lax.while_loop of the program (the line search, and its zoom, loops inside
it), gradients by shmap.value_and_grad; Wright and Nocedal's BFGS
(Algorithm 6.1) with their strong-Wolfe line search (Algorithms 3.5 and
3.6: cubic, quadratic or bisection zoom). Called on Arrays, the whole
minimization is one jit program; fun(x, *args) of a 1-d x."""
from typing import NamedTuple

import numpy as _np

from .. import lax
from .. import linalg as _la
from .. import numpy as jnp

__all__ = ["minimize", "OptimizeResults"]


class OptimizeResults(NamedTuple):
    """jax.scipy.optimize.OptimizeResults: x (the solution), success, status
    (0 converged, 1 max BFGS iterations, 3 zoom failed, 4 saddle point, 5
    max line search iterations, -1 undefined), fun, jac, hess_inv (None for
    L-BFGS), nfev, njev, nit."""
    x: object
    success: object
    status: object
    fun: object
    jac: object
    hess_inv: object
    nfev: object
    njev: object
    nit: object


# ---- line search (line_search.py) -------------------------------------------------------


def _weak(v, *like):
    """A Python float of a loop's carry as JAX's weak type resolves it: in
    the dtype the body gives it, that of the arrays like."""
    return jnp.full((), v, jnp.result_type(*like))


def _cubicmin(a, fa, fpa, b, fb, c, fc):
    C = fpa
    db = b - a
    dc = c - a
    denom = (db * dc) ** 2 * (db - dc)
    d20, d21 = fb - fa - C * db, fc - fa - C * dc
    A = (dc ** 2 * d20 + (-db ** 2) * d21) / denom
    B = ((-dc ** 3) * d20 + db ** 3 * d21) / denom
    radical = B * B - 3. * A * C
    return a + (-B + jnp.sqrt(radical)) / (3. * A)


def _quadmin(a, fa, fpa, b, fb):
    D = fa
    C = fpa
    db = b - a
    B = (fb - D - C * db) / (db ** 2)
    return a - C / (2. * B)


def _binary_replace(replace_bit, original_dict, new_dict, keys=None):
    if keys is None:
        keys = new_dict.keys()
    return {key: jnp.where(replace_bit, new_dict[key], original_dict[key]) for key in keys}


class _ZoomState(NamedTuple):
    done: object
    failed: object
    j: object
    a_lo: object
    phi_lo: object
    dphi_lo: object
    a_hi: object
    phi_hi: object
    dphi_hi: object
    a_rec: object
    phi_rec: object
    a_star: object
    phi_star: object
    dphi_star: object
    g_star: object
    nfev: object
    ngev: object


def _zoom(restricted_func_and_grad, wolfe_one, wolfe_two, a_lo, phi_lo, dphi_lo, a_hi, phi_hi,
          dphi_hi, g_0, pass_through):
    """Wright and Nocedal's zoom (Algorithm 3.6): cubic, quadratic or
    bisection steps into [a_lo, a_hi] until the strong Wolfe conditions
    hold; skipped where pass_through."""
    false = jnp.zeros((), bool)  # (JAX's carry is arrays from the start: ~ is not)
    state = _ZoomState(done=false, failed=false, j=0, a_lo=a_lo, phi_lo=phi_lo, dphi_lo=dphi_lo,
                       a_hi=a_hi, phi_hi=phi_hi, dphi_hi=dphi_hi, a_rec=(a_lo + a_hi) / 2.,
                       phi_rec=(phi_lo + phi_hi) / 2., a_star=_weak(1., a_lo, a_hi),
                       phi_star=phi_lo,
                       dphi_star=dphi_lo, g_star=g_0, nfev=0, ngev=0)
    delta1 = 0.2
    delta2 = 0.1

    def body(state):
        dalpha = state.a_hi - state.a_lo
        a = jnp.minimum(state.a_hi, state.a_lo)
        b = jnp.maximum(state.a_hi, state.a_lo)
        cchk = delta1 * dalpha
        qchk = delta2 * dalpha
        threshold = 1e-5 if _np.finfo(_np.dtype(dalpha.dtype)).bits < 64 else 1e-10
        state = state._replace(failed=state.failed | (dalpha <= threshold))
        a_j_cubic = _cubicmin(state.a_lo, state.phi_lo, state.dphi_lo, state.a_hi, state.phi_hi,
                              state.a_rec, state.phi_rec)
        use_cubic = (state.j > 0) & (a_j_cubic > a + cchk) & (a_j_cubic < b - cchk)
        a_j_quad = _quadmin(state.a_lo, state.phi_lo, state.dphi_lo, state.a_hi, state.phi_hi)
        use_quad = (~use_cubic) & (a_j_quad > a + qchk) & (a_j_quad < b - qchk)
        a_j_bisection = (state.a_lo + state.a_hi) / 2.
        use_bisection = (~use_cubic) & (~use_quad)
        a_j = jnp.where(use_cubic, a_j_cubic, state.a_rec)
        a_j = jnp.where(use_quad, a_j_quad, a_j)
        a_j = jnp.where(use_bisection, a_j_bisection, a_j)
        phi_j, dphi_j, g_j = restricted_func_and_grad(a_j)
        phi_j = jnp.astype(phi_j, state.phi_lo.dtype)
        dphi_j = jnp.astype(dphi_j, state.dphi_lo.dtype)
        g_j = jnp.astype(g_j, state.g_star.dtype)
        state = state._replace(nfev=state.nfev + 1, ngev=state.ngev + 1)
        hi_to_j = wolfe_one(a_j, phi_j) | (phi_j >= state.phi_lo)
        star_to_j = wolfe_two(dphi_j) & (~hi_to_j)
        hi_to_lo = (dphi_j * (state.a_hi - state.a_lo) >= 0.) & (~hi_to_j) & (~star_to_j)
        lo_to_j = (~hi_to_j) & (~star_to_j)
        state = state._replace(**_binary_replace(
            hi_to_j, state._asdict(),
            dict(a_hi=a_j, phi_hi=phi_j, dphi_hi=dphi_j, a_rec=state.a_hi,
                 phi_rec=state.phi_hi)))
        state = state._replace(done=star_to_j | state.done, **_binary_replace(
            star_to_j, state._asdict(),
            dict(a_star=a_j, phi_star=phi_j, dphi_star=dphi_j, g_star=g_j)))
        state = state._replace(**_binary_replace(
            hi_to_lo, state._asdict(),
            dict(a_hi=state.a_lo, phi_hi=state.phi_lo, dphi_hi=state.dphi_lo,
                 a_rec=state.a_hi, phi_rec=state.phi_hi)))
        state = state._replace(**_binary_replace(
            lo_to_j & ~hi_to_lo, state._asdict(), dict(a_rec=state.a_lo, phi_rec=state.phi_lo)))
        state = state._replace(**_binary_replace(
            lo_to_j, state._asdict(), dict(a_lo=a_j, phi_lo=phi_j, dphi_lo=dphi_j)))
        state = state._replace(j=state.j + 1)
        # a higher cutoff than SciPy's, as JAX's
        return state._replace(failed=state.failed | (state.j >= 30))

    return lax.while_loop(lambda state: (~state.done) & (~pass_through) & (~state.failed),
                          body, state)


class _LineSearchState(NamedTuple):
    done: object
    failed: object
    i: object
    a_i1: object
    phi_i1: object
    dphi_i1: object
    nfev: object
    ngev: object
    a_star: object
    phi_star: object
    dphi_star: object
    g_star: object


class _LineSearchResults(NamedTuple):
    failed: object
    nit: object
    nfev: object
    ngev: object
    k: object
    a_k: object
    f_k: object
    g_k: object
    status: object


def _line_search(f, xk, pk, old_fval=None, old_old_fval=None, gfk=None, c1=1e-4, c2=0.9,
                 maxiter=20):
    """JAX's line_search: a step along pk meeting the strong Wolfe
    conditions (Wright and Nocedal's Algorithm 3.5), doubling the step from
    1 (or from SciPy's guess from the last decrease) and zooming once the
    interval brackets one."""
    from .. import value_and_grad
    dt = jnp.result_type(xk, pk)
    if not _np.issubdtype(dt, _np.floating):
        dt = _np.dtype(_np.float32)
    xk, pk = jnp.astype(xk, dt), jnp.astype(pk, dt)

    def restricted_func_and_grad(t):
        t = jnp.astype(jnp.asarray(t), pk.dtype) if hasattr(t, "dtype") else \
            jnp.full((), t, pk.dtype)
        phi, g = value_and_grad(f)(xk + t * pk)
        dphi = jnp.dot(g, pk)
        return phi, dphi, g

    if old_fval is None or gfk is None:
        phi_0, dphi_0, gfk = restricted_func_and_grad(0)
    else:
        phi_0 = old_fval
        dphi_0 = jnp.dot(gfk, pk)
    if old_old_fval is not None:
        candidate_start_value = 1.01 * 2 * (phi_0 - old_old_fval) / dphi_0
        start_value = jnp.where(candidate_start_value > 1, 1.0, candidate_start_value)
    else:
        start_value = 1

    def wolfe_one(a_i, phi_i):
        return phi_i > phi_0 + c1 * a_i * dphi_0        # the negation of W1

    def wolfe_two(dphi_i):
        return jnp.abs(dphi_i) <= -c2 * dphi_0

    fresh = old_fval is None or gfk is None
    state = _LineSearchState(done=jnp.zeros((), bool),
                             failed=jnp.zeros((), bool), i=1, a_i1=_weak(0., pk),
                             phi_i1=phi_0, dphi_i1=dphi_0, nfev=1 if fresh else 0,
                             ngev=1 if fresh else 0, a_star=_weak(0., pk), phi_star=phi_0,
                             dphi_star=dphi_0, g_star=gfk)

    def body(state):
        a_i = jnp.where(state.i == 1, start_value, state.a_i1 * 2.)
        phi_i, dphi_i, g_i = restricted_func_and_grad(a_i)
        state = state._replace(nfev=state.nfev + 1, ngev=state.ngev + 1)
        star_to_zoom1 = wolfe_one(a_i, phi_i) | ((phi_i >= state.phi_i1) & (state.i > 1))
        star_to_i = wolfe_two(dphi_i) & (~star_to_zoom1)
        star_to_zoom2 = (dphi_i >= 0.) & (~star_to_zoom1) & (~star_to_i)
        zoom1 = _zoom(restricted_func_and_grad, wolfe_one, wolfe_two, state.a_i1, state.phi_i1,
                      state.dphi_i1, a_i, phi_i, dphi_i, gfk, ~star_to_zoom1)
        state = state._replace(nfev=state.nfev + zoom1.nfev, ngev=state.ngev + zoom1.ngev)
        zoom2 = _zoom(restricted_func_and_grad, wolfe_one, wolfe_two, a_i, phi_i, dphi_i,
                      state.a_i1, state.phi_i1, state.dphi_i1, gfk, ~star_to_zoom2)
        state = state._replace(nfev=state.nfev + zoom2.nfev, ngev=state.ngev + zoom2.ngev)
        state = state._replace(
            done=star_to_zoom1 | state.done,
            failed=(star_to_zoom1 & zoom1.failed) | state.failed,
            **_binary_replace(star_to_zoom1, state._asdict(), zoom1._asdict(),
                              keys=["a_star", "phi_star", "dphi_star", "g_star"]))
        state = state._replace(
            done=star_to_i | state.done,
            **_binary_replace(star_to_i, state._asdict(),
                              dict(a_star=a_i, phi_star=phi_i, dphi_star=dphi_i, g_star=g_i)))
        state = state._replace(
            done=star_to_zoom2 | state.done,
            failed=(star_to_zoom2 & zoom2.failed) | state.failed,
            **_binary_replace(star_to_zoom2, state._asdict(), zoom2._asdict(),
                              keys=["a_star", "phi_star", "dphi_star", "g_star"]))
        return state._replace(i=state.i + 1, a_i1=a_i, phi_i1=phi_i, dphi_i1=dphi_i)

    state = lax.while_loop(lambda state: (~state.done) & (state.i <= maxiter) & (~state.failed),
                           body, state)
    status = jnp.where(state.failed, 1, jnp.where(state.i > maxiter, 3, 0))
    # step sizes too small leave the optimizer stuck below 64 bits: a floor on them
    alpha_k = state.a_star
    if _np.finfo(_np.dtype(alpha_k.dtype)).bits != 64:
        alpha_k = jnp.where(jnp.abs(alpha_k) < 1e-8, jnp.sign(alpha_k) * 1e-8, alpha_k)
    return _LineSearchResults(failed=state.failed | (~state.done), nit=state.i - 1,
                              nfev=state.nfev, ngev=state.ngev, k=state.i, a_k=alpha_k,
                              f_k=state.phi_star, g_k=state.g_star, status=status)


# ---- BFGS (bfgs.py) -----------------------------------------------------------------------


class _BFGSResults(NamedTuple):
    converged: object
    failed: object
    k: object
    nfev: object
    ngev: object
    nhev: object
    x_k: object
    f_k: object
    g_k: object
    H_k: object
    old_old_fval: object
    status: object
    line_search_status: object


def _minimize_bfgs(fun, x0, maxiter=None, norm=_np.inf, gtol=1e-5, line_search_maxiter=10):
    """JAX's minimize_bfgs (Wright and Nocedal's Algorithm 6.1): the inverse
    Hessian estimate updated from each step and gradient change, until the
    gradient's norm (ord norm) is under gtol."""
    from .. import value_and_grad
    if maxiter is None:
        maxiter = int(_np.prod(x0.shape)) * 200
    d = x0.shape[0]
    initial_H = jnp.eye(d, dtype=x0.dtype)
    f_0, g_0 = value_and_grad(fun)(x0)
    state = _BFGSResults(converged=_la.norm(g_0, ord=norm) < gtol, failed=False, k=0, nfev=1,
                         ngev=1, nhev=0, x_k=x0, f_k=f_0, g_k=g_0, H_k=initial_H,
                         old_old_fval=f_0 + _la.norm(g_0) / 2, status=0,
                         line_search_status=0)

    def cond_fun(state):
        return jnp.logical_not(state.converged) & jnp.logical_not(state.failed) & \
            (state.k < maxiter)

    def body_fun(state):
        p_k = -jnp.dot(state.H_k, state.g_k)
        ls = _line_search(fun, state.x_k, p_k, old_fval=state.f_k,
                          old_old_fval=state.old_old_fval, gfk=state.g_k,
                          maxiter=line_search_maxiter)
        state = state._replace(nfev=state.nfev + ls.nfev, ngev=state.ngev + ls.ngev,
                               failed=ls.failed, line_search_status=ls.status)
        s_k = ls.a_k * p_k
        x_kp1 = state.x_k + s_k
        f_kp1 = ls.f_k
        g_kp1 = ls.g_k
        y_k = g_kp1 - state.g_k
        rho_k = jnp.reciprocal(jnp.dot(y_k, s_k))
        sy_k = s_k[:, None] * y_k[None, :]
        w = jnp.eye(d, dtype=rho_k.dtype) - rho_k * sy_k
        H_kp1 = jnp.matmul(jnp.matmul(w, state.H_k), jnp.swapaxes(w, 0, 1)) + \
            rho_k * s_k[:, None] * s_k[None, :]
        H_kp1 = jnp.where(jnp.isfinite(rho_k), H_kp1, state.H_k)
        converged = _la.norm(g_kp1, ord=norm) < gtol
        return state._replace(converged=converged, k=state.k + 1, x_k=x_kp1, f_k=f_kp1,
                              g_k=g_kp1, H_k=H_kp1, old_old_fval=state.f_k)

    state = lax.while_loop(cond_fun, body_fun, state)
    status = jnp.where(state.converged, 0,
                       jnp.where(state.k == maxiter, 1,
                                 jnp.where(state.failed, 2 + state.line_search_status, -1)))
    return state._replace(status=status)


# ---- L-BFGS (_lbfgs.py) ------------------------------------------------------------------


class _LBFGSResults(NamedTuple):
    converged: object
    failed: object
    k: object
    nfev: object
    ngev: object
    x_k: object
    f_k: object
    g_k: object
    s_history: object
    y_history: object
    rho_history: object
    gamma: object
    status: object
    ls_status: object


def _minimize_lbfgs(fun, x0, maxiter=None, norm=_np.inf, maxcor=10, ftol=2.220446049250313e-09,
                    gtol=1e-05, maxfun=None, maxgrad=None, maxls=20):
    """JAX's _minimize_lbfgs (Wright and Nocedal's Algorithm 7.5): the last
    maxcor steps and gradient changes in place of the inverse Hessian,
    applied by the two-loop recursion; status 0 nominal, 1 max iterations,
    2 max function, 3 max gradient evaluations, 4 insufficient progress
    (ftol), 5 line search failed."""
    from .. import value_and_grad
    d = len(x0)
    dtype = _np.dtype(x0.dtype)
    if maxiter is None and maxfun is None and maxgrad is None:
        maxiter = d * 200
    maxiter = _np.inf if maxiter is None else maxiter
    maxfun = _np.inf if maxfun is None else maxfun
    maxgrad = _np.inf if maxgrad is None else maxgrad
    f_0, g_0 = value_and_grad(fun)(x0)
    state_initial = _LBFGSResults(
        converged=jnp.zeros((), bool), failed=jnp.zeros((), bool), k=0,
        nfev=1, ngev=1, x_k=x0, f_k=f_0, g_k=g_0, s_history=jnp.zeros((maxcor, d), dtype),
        y_history=jnp.zeros((maxcor, d), dtype), rho_history=jnp.zeros((maxcor,), dtype),
        gamma=_weak(1., g_0), status=0, ls_status=0)

    def cond_fun(state):
        return (~state.converged) & (~state.failed)

    def body_fun(state):
        p_k = _two_loop_recursion(state)
        ls = _line_search(f=fun, xk=state.x_k, pk=p_k, old_fval=state.f_k, gfk=state.g_k,
                          maxiter=maxls)
        s_k = jnp.astype(ls.a_k, p_k.dtype) * p_k
        x_kp1 = state.x_k + s_k
        f_kp1 = ls.f_k
        g_kp1 = ls.g_k
        y_k = g_kp1 - state.g_k
        rho_k_inv = jnp.dot(y_k, s_k)
        rho_k = jnp.astype(jnp.reciprocal(rho_k_inv), y_k.dtype)
        gamma = rho_k_inv / jnp.dot(y_k, y_k)
        status = jnp.zeros((), jnp.int32)
        status = jnp.where(state.f_k - f_kp1 < ftol, 4, status)
        status = jnp.where(state.ngev >= maxgrad, 3, status)
        status = jnp.where(state.nfev >= maxfun, 2, status)
        status = jnp.where(state.k >= maxiter, 1, status)
        status = jnp.where(ls.failed, 5, status)
        converged = _la.norm(g_kp1, ord=norm) < gtol
        return state._replace(
            converged=converged, failed=(status > 0) & (~converged), k=state.k + 1,
            nfev=state.nfev + ls.nfev, ngev=state.ngev + ls.ngev,
            x_k=jnp.astype(x_kp1, state.x_k.dtype), f_k=jnp.astype(f_kp1, state.f_k.dtype),
            g_k=jnp.astype(g_kp1, state.g_k.dtype),
            s_history=_update_history_vectors(history=state.s_history, new=s_k),
            y_history=_update_history_vectors(history=state.y_history, new=y_k),
            rho_history=_update_history_scalars(history=state.rho_history, new=rho_k),
            gamma=jnp.astype(gamma, state.g_k.dtype), status=jnp.where(converged, 0, status),
            ls_status=ls.status)

    return lax.while_loop(cond_fun, body_fun, state_initial)


def _two_loop_recursion(state):
    dtype = state.rho_history.dtype
    his_size = len(state.rho_history)
    curr_size = jnp.where(state.k < his_size, state.k, his_size)
    q = -state.g_k
    a_his = jnp.zeros_like(state.rho_history)

    def body_fun1(j, carry):
        i = his_size - 1 - j
        _q, _a_his = carry
        a_i = jnp.astype(state.rho_history[i] * jnp.dot(state.s_history[i], _q), dtype)
        _a_his = _a_his.at[i].set(a_i)
        _q = _q - a_i * state.y_history[i]
        return _q, _a_his

    q, a_his = lax.fori_loop(0, curr_size, body_fun1, (q, a_his))
    q = state.gamma * q

    def body_fun2(j, _q):
        i = his_size - curr_size + j
        b_i = jnp.astype(state.rho_history[i] * jnp.dot(state.y_history[i], _q), dtype)
        return _q + (a_his[i] - b_i) * state.s_history[i]

    return lax.fori_loop(0, curr_size, body_fun2, q)


def _update_history_vectors(history, new):
    return jnp.roll(history, -1, axis=0).at[-1, :].set(new)


def _update_history_scalars(history, new):
    return jnp.roll(history, -1, axis=0).at[-1].set(new)


# ---- minimize (minimize.py) ------------------------------------------------------------------


def minimize(fun, x0, args=(), *, method, tol=None, options=None):
    """jax.scipy.optimize.minimize: the minimum of fun(x, *args) (a scalar
    of a 1-d x) from x0, by method 'BFGS' (options maxiter, norm, gtol,
    line_search_maxiter) or 'l-bfgs-experimental-do-not-rely-on-this'
    (maxiter, norm, maxcor, ftol, gtol, maxfun, maxgrad, maxls); tol is
    taken and unused, as JAX's. Returns OptimizeResults."""
    from .._trace import _run_now
    if options is None:
        options = {}
    if not isinstance(args, tuple):
        msg = "args argument to jax.scipy.optimize.minimize must be a tuple, got {}"
        raise TypeError(msg.format(args))
    if method.lower() not in ("bfgs", "l-bfgs-experimental-do-not-rely-on-this"):
        raise ValueError(f"Method {method} not recognized")
    if _run_now((x0, args), {}):
        from .. import jit  # at once: one jit program of the whole minimization
        return jit(lambda x0, args: minimize(fun, x0, args, method=method, tol=tol,
                                             options=options))(x0, args)

    def fun_with_args(x):
        return fun(x, *args)

    if method.lower() == "bfgs":
        results = _minimize_bfgs(fun_with_args, x0, **options)
        success = results.converged & jnp.logical_not(results.failed)
        return OptimizeResults(x=results.x_k, success=success, status=results.status,
                               fun=results.f_k, jac=results.g_k, hess_inv=results.H_k,
                               nfev=results.nfev, njev=results.ngev, nit=results.k)
    if method.lower() == "l-bfgs-experimental-do-not-rely-on-this":
        results = _minimize_lbfgs(fun_with_args, x0, **options)
        success = results.converged & jnp.logical_not(results.failed)
        return OptimizeResults(x=results.x_k, success=success, status=results.status,
                               fun=results.f_k, jac=results.g_k, hess_inv=None,
                               nfev=results.nfev, njev=results.ngev, nit=results.k)
    raise ValueError(f"Method {method} not recognized")
