"""jnp.linalg and lax.linalg (shmap.linalg) against numpy: solve (matrices
and vectors, batched), inv, det and slogdet (negative and tiny
determinants, row swaps), cholesky (lower, upper), triangular solves in
every orientation, matrix_power, the norms numpy defines, multi_dot,
trace and diagonal of batches; in float64 to 1e-10 and float32; the batch
dimension sharded and kept so, b's columns sharded and kept so; JAX's
linalg sharding rule and its sentences; the gradient of a solve and of a
log-determinant against their closed forms; the refusals of what needs an
iterative decomposition. Runs on the cluster of conftest's c."""
import numpy as np
import pytest

import shmap
from shmap import P
from shmap import lax
from shmap import numpy as jnp

from _util import put as _put


RNG = np.random.default_rng(11)
A = RNG.standard_normal((4, 6, 6))
A[1] = A[1][[3, 0, 5, 1, 2, 4]] * [[1], [1e-3], [1], [1], [1], [1]]  # pivots that must swap
A[2, 0, 0] = 1e-14  # a tiny first pivot: without row swaps the error grows by 1e14
B = RNG.standard_normal((4, 6, 4))
SPD = A @ A.transpose(0, 2, 1) + 6 * np.eye(6)


def test_solve_inv_det(c, mesh):
    a = _put(c, mesh, A, P("i"))
    b = _put(c, mesh, B, P("i", None, "j"))
    x = jnp.linalg.solve(a, b)
    assert x.type == "f64[4@i,6,4@j]"
    assert np.allclose(np.asarray(x), np.linalg.solve(A, B), rtol=1e-10, atol=1e-10)
    v = jnp.linalg.solve(a, _put(c, mesh, B[..., 0], P("i")))
    assert v.shape == (4, 6) and np.allclose(np.asarray(v), np.linalg.solve(A, B[..., :1])[..., 0],
                                             rtol=1e-10, atol=1e-10)
    assert np.allclose(np.asarray(jnp.linalg.inv(a)), np.linalg.inv(A), rtol=1e-9, atol=1e-9)
    assert np.allclose(np.asarray(jnp.linalg.det(a)), np.linalg.det(A), rtol=1e-10, atol=0)
    s, ld = jnp.linalg.slogdet(a)
    s0, ld0 = np.linalg.slogdet(A)
    assert np.array_equal(np.asarray(s), s0) and np.allclose(np.asarray(ld), ld0, rtol=1e-12)
    # singular matrices: det 0 and slogdet (0, -inf), as numpy's (no 0/0 in the elimination)
    sing = np.array([[1.0, 2, 3], [2, 4, 6], [1, 0, 1]])
    for m in (np.ones((3, 3)), sing, np.zeros((2, 2))):
        assert float(jnp.linalg.det(_put(c, mesh, m))) == 0.0
        s_, l_ = jnp.linalg.slogdet(_put(c, mesh, m))
        assert float(s_) == 0.0 and float(l_) == -np.inf
    # float32, 2-d, replicated, in a jit
    a32 = A[0].astype(np.float32)
    got = shmap.jit(lambda m, r: (jnp.linalg.solve(m, r), jnp.linalg.det(m)))(
        _put(c, mesh, a32), _put(c, mesh, B[0].astype(np.float32)))
    assert got[0].dtype == np.float32
    assert np.allclose(np.asarray(got[0]), np.linalg.solve(a32, B[0]), rtol=1e-4, atol=1e-4)
    assert np.allclose(float(got[1]), np.linalg.det(a32), rtol=1e-4)
    # integers are promoted to float32, as JAX's
    i2 = _put(c, mesh, np.array([[2, 1], [1, 3]], np.int32))
    assert jnp.linalg.det(i2).dtype == np.float32 and float(jnp.linalg.det(i2)) == 5.0


def test_cholesky_and_triangular_solves(c, mesh):
    s = _put(c, mesh, SPD, P("i"))
    lo = jnp.linalg.cholesky(s)
    assert lo.type == "f64[4@i,6,6]"
    assert np.allclose(np.asarray(lo), np.linalg.cholesky(SPD), rtol=1e-12, atol=1e-12)
    up = jnp.linalg.cholesky(s, upper=True)
    assert np.allclose(np.asarray(up), np.linalg.cholesky(SPD).transpose(0, 2, 1), atol=1e-12)
    assert np.isnan(np.asarray(jnp.linalg.cholesky(_put(c, mesh, -np.eye(3))))).any()
    L = np.linalg.cholesky(SPD)
    U = L.transpose(0, 2, 1)
    Lp, Up = _put(c, mesh, L, P("i")), _put(c, mesh, U, P("i"))
    bl = _put(c, mesh, B, P("i"))
    cases = [
        (Lp, dict(left_side=True, lower=True), np.linalg.solve(L, B)),
        (Up, dict(left_side=True, lower=False), np.linalg.solve(U, B)),
        (Lp, dict(left_side=True, lower=True, transpose_a=True),
         np.linalg.solve(U, B)),
        (Up, dict(left_side=True, lower=False, transpose_a=True),
         np.linalg.solve(L, B)),
    ]
    for a, kw, want in cases:
        got = lax.linalg.triangular_solve(a, bl, **kw)
        assert np.allclose(np.asarray(got), want, rtol=1e-10, atol=1e-10), kw
    bt = B.transpose(0, 2, 1)  # x @ op(a) = b, b (4, 4, 6)
    for a, m, kw in [(Lp, L, dict(lower=True)), (Up, U, dict(lower=False)),
                     (Lp, L, dict(lower=True, transpose_a=True))]:
        op = m.transpose(0, 2, 1) if kw.get("transpose_a") else m
        want = np.linalg.solve(op.transpose(0, 2, 1), bt.transpose(0, 2, 1)).transpose(0, 2, 1)
        got = lax.linalg.triangular_solve(a, _put(c, mesh, bt, P("i")), left_side=False, **kw)
        assert np.allclose(np.asarray(got), want, rtol=1e-10, atol=1e-10), kw
    unit = np.tril(L[0], -1) + np.eye(6)
    got = lax.linalg.triangular_solve(_put(c, mesh, L[0]), _put(c, mesh, B[0]), left_side=True,
                                      lower=True, unit_diagonal=True)
    assert np.allclose(np.asarray(got), np.linalg.solve(unit, B[0]), rtol=1e-10, atol=1e-10)


def test_norms_and_the_rest(c, mesh):
    x = RNG.standard_normal((4, 6))
    xs = _put(c, mesh, x)
    for ord in (None, "fro", 1, -1, np.inf, -np.inf):
        assert np.isclose(float(jnp.linalg.norm(xs, ord=ord)), np.linalg.norm(x, ord=ord),
                          rtol=1e-13), ord
    for ord in (None, 1, 2, 3, 0, np.inf, -np.inf, -1):
        for axis in (0, 1):
            assert np.allclose(np.asarray(jnp.linalg.norm(xs, ord=ord, axis=axis)),
                               np.linalg.norm(x, ord=ord, axis=axis), rtol=1e-13), (ord, axis)
    assert np.allclose(np.asarray(jnp.linalg.norm(xs, axis=1, keepdims=True)),
                       np.linalg.norm(x, axis=1, keepdims=True))
    a = _put(c, mesh, A, P("i"))
    assert np.allclose(np.asarray(jnp.linalg.matrix_norm(a, ord=1)),
                       np.linalg.norm(A, ord=1, axis=(1, 2)), rtol=1e-13)
    assert np.allclose(np.asarray(jnp.linalg.vector_norm(a, axis=(1, 2))),
                       np.sqrt((A * A).sum(axis=(1, 2))), rtol=1e-13)
    for n in (0, 1, 3, -2):
        assert np.allclose(np.asarray(jnp.linalg.matrix_power(a, n)),
                           np.linalg.matrix_power(A, n), rtol=1e-8, atol=1e-8), n
    assert np.allclose(np.asarray(jnp.linalg.trace(a)), np.trace(A, axis1=1, axis2=2))
    assert np.allclose(np.asarray(jnp.linalg.diagonal(a, offset=1)),
                       np.diagonal(A, offset=1, axis1=1, axis2=2))
    m = [RNG.standard_normal(s) for s in ((3, 4), (4, 5), (5, 2))]
    assert np.allclose(np.asarray(jnp.linalg.multi_dot([_put(c, mesh, v) for v in m])),
                       np.linalg.multi_dot(m))
    with pytest.raises(shmap.InvalidArgument, match=r"jnp.linalg.eig \(a non-symmetric "):
        jnp.linalg.eig(a)
    for ord in (2, -2, "nuc"):
        assert np.isclose(float(jnp.linalg.norm(xs, ord=ord)), np.linalg.norm(x, ord=ord),
                          rtol=1e-12), ord


def test_linalg_sharding_rule(c, mesh):
    """JAX's linalg_sharding_rule and triangular solve rule: matrix
    dimensions unsharded, batch dimensions alike."""
    sq = RNG.standard_normal((8, 8))
    with pytest.raises(shmap.ProgramError, match=r"Input 0 to lu must be unsharded on non-batch "
                       r"dimensions, but got P\('i', None\)\."):
        jnp.linalg.solve(_put(c, mesh, sq, P("i")), _put(c, mesh, sq))
    with pytest.raises(shmap.ProgramError, match=r"Input 0 to cholesky must be unsharded on "
                       r"non-batch dimensions, but got P\(None, 'j'\)\."):
        jnp.linalg.cholesky(_put(c, mesh, sq, P(None, "j")))
    with pytest.raises(shmap.ProgramError, match=r"triangular solve input `b` must be unsharded "
                       r"on the contracting axis, but got P\('i', None\) with left_side=True "
                       r"and transpose_a=False\."):
        jnp.linalg.solve(_put(c, mesh, sq), _put(c, mesh, sq, P("i")))
    with pytest.raises(shmap.ProgramError, match=r"All inputs to triangular_solve must have the "
                       r"same batch sharding, but got \('i',\) and \(None,\)\."):
        jnp.linalg.solve(_put(c, mesh, A, P("i")), _put(c, mesh, B))


def test_linalg_gradients(c, mesh):
    """grad of sum(solve(a, b)**2) and of slogdet against their closed
    forms: dL/db = a^-T 2x, dL/da = -a^-T 2x x^T; d logdet/da = a^-T."""
    a, b = A[0], B[0]
    x = np.linalg.solve(a, b)
    ga, gb = shmap.grad(lambda m, r: jnp.sum(jnp.linalg.solve(m, r) ** 2), argnums=(0, 1))(
        _put(c, mesh, a), _put(c, mesh, b))
    lam = np.linalg.solve(a.T, 2 * x)
    assert np.allclose(np.asarray(gb), lam, rtol=1e-9, atol=1e-9)
    assert np.allclose(np.asarray(ga), -lam @ x.T, rtol=1e-9, atol=1e-9)
    gl = shmap.grad(lambda m: jnp.linalg.slogdet(m)[1])(_put(c, mesh, a))
    assert np.allclose(np.asarray(gl), np.linalg.inv(a).T, rtol=1e-9, atol=1e-9)


def test_qr_and_lstsq(c, mesh):
    """QR by Householder reflections against numpy's (LAPACK's signs: the
    same Q and R), in every mode, tall, wide and batched; lstsq through it
    against numpy's x, residuals and rank."""
    for shape in ((6, 4), (4, 6), (5, 5)):
        a = RNG.standard_normal(shape)
        for mode in ("reduced", "complete"):
            q, r = jnp.linalg.qr(_put(c, mesh, a), mode=mode)
            q0, r0 = np.linalg.qr(a, mode=mode)
            assert np.allclose(np.asarray(q), q0, atol=1e-12), (shape, mode)
            assert np.allclose(np.asarray(r), r0, atol=1e-12), (shape, mode)
        assert np.allclose(np.asarray(jnp.linalg.qr(_put(c, mesh, a), mode="r")),
                           np.linalg.qr(a, mode="r"), atol=1e-12)
    batch = RNG.standard_normal((4, 5, 3))
    q, r = jnp.linalg.qr(_put(c, mesh, batch, P("i")))
    assert q.type == "f64[4@i,5,3]"
    for k in range(4):
        q0, r0 = np.linalg.qr(batch[k])
        assert np.allclose(np.asarray(q)[k], q0) and np.allclose(np.asarray(r)[k], r0)
    a = RNG.standard_normal((7, 3))
    b = RNG.standard_normal((7, 2))
    x, res, rank, s = jnp.linalg.lstsq(_put(c, mesh, a), _put(c, mesh, b))
    x0, res0, rank0, _ = np.linalg.lstsq(a, b, rcond=None)
    assert np.allclose(np.asarray(x), x0) and np.allclose(np.asarray(res), res0)
    assert int(rank) == rank0 and np.allclose(np.asarray(s), np.linalg.svd(a, compute_uv=False))
    xv = jnp.linalg.lstsq(_put(c, mesh, a), _put(c, mesh, b[:, 0]))[0]
    assert xv.shape == (3,) and np.allclose(np.asarray(xv), x0[:, 0])
    # underdetermined: the minimum-norm solution, as JAX's (through the SVD)
    xu = jnp.linalg.lstsq(_put(c, mesh, a.T), _put(c, mesh, b[:3]))[0]
    assert np.allclose(np.asarray(xu), np.linalg.lstsq(a.T, b[:3], rcond=None)[0])


def test_eigh_svd_pinv(c, mesh):
    """eigh and svd by Jacobi rotations: eigenvalues and singular values as
    numpy's, the decompositions reconstructing the input with orthonormal
    vectors (signs are the rotations' own), odd and even orders, tall and
    wide, batched with the batch sharded; eigvalsh, svdvals, pinv and
    matrix_rank (a rank-deficient matrix) against numpy's."""
    for n in (1, 2, 5, 6):
        m = RNG.standard_normal((n, n))
        a = m + m.T
        w, v = jnp.linalg.eigh(_put(c, mesh, a))
        w, v = np.asarray(w), np.asarray(v)
        assert np.allclose(w, np.linalg.eigvalsh(a), atol=1e-12), n
        assert np.allclose(a @ v, v * w, atol=1e-12) and np.allclose(v.T @ v, np.eye(n))
    batch = RNG.standard_normal((4, 5, 5))
    batch = batch + batch.transpose(0, 2, 1)
    w = jnp.linalg.eigvalsh(_put(c, mesh, batch, P("i")))
    assert w.type == "f64[4@i,5]" and np.allclose(np.asarray(w), np.linalg.eigvalsh(batch))
    for shape in ((6, 3), (3, 6), (4, 4), (5, 1)):
        a = RNG.standard_normal(shape)
        u, s, vh = map(np.asarray, jnp.linalg.svd(_put(c, mesh, a), full_matrices=False))
        assert np.allclose(s, np.linalg.svd(a, compute_uv=False), atol=1e-12), shape
        k = min(shape)
        assert u.shape == (shape[0], k) and vh.shape == (k, shape[1])
        assert np.allclose((u * s) @ vh, a, atol=1e-12)
        assert np.allclose(u.T @ u, np.eye(k)) and np.allclose(vh @ vh.T, np.eye(k))
        assert np.allclose(np.asarray(jnp.linalg.svdvals(_put(c, mesh, a))), s)
    # swept in a loop of the program until converged: larger orders trace
    # quickly, float32 is swept in float64 (numpy's float32 values), and
    # under vmap the batch's matrices sweep together
    m = RNG.standard_normal((40, 40))
    a = m + m.T
    jit_text = shmap.jit(jnp.linalg.eigh).lower(_put(c, mesh, a)).as_text().split("# lowered")[0]
    assert jit_text.count("while ") == 1
    w, v = map(np.asarray, jnp.linalg.eigh(_put(c, mesh, a)))
    assert np.allclose(w, np.linalg.eigvalsh(a), atol=1e-12) and np.allclose(a @ v, v * w)
    w32 = np.asarray(jnp.linalg.eigvalsh(_put(c, mesh, a.astype(np.float32))))
    assert w32.dtype == np.float32
    assert np.allclose(w32, np.linalg.eigvalsh(a.astype(np.float32)), rtol=0, atol=2e-6)
    s32 = np.asarray(jnp.linalg.svdvals(_put(c, mesh, a[:, :7].astype(np.float32))))
    assert np.allclose(s32, np.linalg.svd(a[:, :7].astype(np.float32), compute_uv=False),
                       rtol=0, atol=2e-6)
    wv = shmap.vmap(jnp.linalg.eigvalsh)(_put(c, mesh, batch, P("i")))
    assert np.allclose(np.asarray(wv), np.linalg.eigvalsh(batch), atol=1e-12)
    # grad goes through no loop: a fixed number of sweeps, unrolled
    gw = shmap.grad(lambda x: jnp.linalg.eigvalsh(x)[-1])(_put(c, mesh, batch[0]))
    vtop = np.linalg.eigh(batch[0])[1][:, -1]
    assert np.allclose(np.asarray(gw), np.outer(vtop, vtop), atol=1e-9)
    low = RNG.standard_normal((6, 2)) @ RNG.standard_normal((2, 5))  # rank 2
    assert int(jnp.linalg.matrix_rank(_put(c, mesh, low))) == 2
    assert np.allclose(np.asarray(jnp.linalg.pinv(_put(c, mesh, low))), np.linalg.pinv(low),
                       atol=1e-10)
