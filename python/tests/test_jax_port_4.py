"""JAX's shard_map tests (jax-ml/jax tests/shard_map_test.py, from
test_pmax_vma_in_types to the end: the varying-axes types of collectives,
shard_map over the context mesh, partial-manual shard_maps, unreduced
results, the errors JAX raises with its sentences, and a sample of the
systematic cases against a reference loop over the mesh) against numpy and
JAX's expected values and exception types. Tests that need what shmap does
not have (refs, eager shard_map, ...) are
strict xfails with the difference as reason. Runs on the cluster of
conftest's c (2 workers x 4 devices)."""
import itertools as it
import math

import numpy as np
import pytest

import shmap
from shmap import P, NamedSharding
from shmap import lax
from shmap import numpy as jnp

from _util import put


@pytest.fixture(scope="module")
def m4(c):
    """A mesh of one axis 'i' of 4 devices."""
    return c.make_mesh((4,), ("i",))


@pytest.fixture(scope="module")
def m2(c):
    """A mesh of one axis 'x' of 2 devices."""
    return c.make_mesh((2,), ("x",))


@pytest.fixture(scope="module")
def m22(c):
    """A (2, 2) mesh over Explicit axes x and y."""
    return c.make_mesh((2, 2), ("x", "y"))


@pytest.fixture(scope="module")
def m22auto(c):
    """A (2, 2) mesh over Auto axes x and y."""
    return c.make_mesh((2, 2), ("x", "y"), axis_types=(shmap.Auto, shmap.Auto))


@pytest.fixture(scope="module")
def m11(c):
    """A (1, 1) mesh over axes x and y."""
    return c.make_mesh((1, 1), ("x", "y"))


def vma(v):
    return set(shmap.typeof(v).vma)


# ---- varying axes in types ----


def test_pmax_vma_in_types(c, m4):
    """test_pmax_vma_in_types: pmax of an invariant block (pvary first, as
    JAX inserts it) runs, its result the block."""
    x = np.arange(8.0, dtype=np.float32)
    f = shmap.jit(shmap.shard_map(lambda x: lax.pmax(x, "i"), mesh=m4, in_specs=P(),
                                  out_specs=P()))
    assert np.array_equal(np.asarray(f(put(c, m4, x))), x)


def test_mul_with_vma_in_types(c, m2):
    """test_mul_with_vma_in_types: a block of P('x') varies over x, and so
    does its product with a Python number."""
    x = np.arange(8.0, dtype=np.float32)
    seen = []

    def f(x):
        seen.append(vma(x))
        out = x * 2
        seen.append(vma(out))
        return out

    g = shmap.jit(shmap.shard_map(f, mesh=m2, in_specs=P("x"), out_specs=P("x")))
    assert np.array_equal(np.asarray(g(put(c, m2, x, P("x")))), x * 2)
    assert seen == [{"x"}, {"x"}]


def test_all_gather_with_vma_in_types(c, m2):
    """test_all_gather_with_vma_in_types: all_gather of an invariant block
    varies over the axis."""
    x = np.arange(8.0, dtype=np.float32)
    seen = []

    def f(x):
        seen.append(vma(x))
        out = lax.all_gather(x, "x")
        seen.append(vma(out))
        return out

    g = shmap.jit(shmap.shard_map(f, mesh=m2, in_specs=P(), out_specs=P("x")))
    y = g(put(c, m2, x))
    assert seen == [set(), {"x"}]
    assert np.array_equal(np.asarray(y), np.tile(x, (4, 1)))


# ---- issues 26621, 24762, 26763 ----


def _expm(a):
    out, term = np.eye(len(a)), np.eye(len(a))
    for k in range(1, 30):
        term = term @ a / k
        out = out + term
    return out


def test_rep_none_canonicalization(c):
    """test_rep_none_canonicalization (real values: shmap has no complex
    dtypes): expm of a replicated argument, its sum times a sharded one."""
    mesh = c.make_mesh((2,), ("i",))
    n = 8
    xs = np.ones((8, n), np.int32)
    v = (np.random.default_rng(1).standard_normal((n, n)) * 0.1).astype(np.float32)

    def fun(v, xs):
        v = shmap.scipy.linalg.expm(v)
        v = v.sum()
        return v * xs.sum(axis=-1).astype(v.dtype)

    g = shmap.shard_map(fun, mesh=mesh, in_specs=(P(), P("i")), out_specs=P("i"))
    out = g(put(c, mesh, v), put(c, mesh, xs, P("i")))
    want = _expm(v.astype(np.float64)).sum() * xs.sum(axis=-1)
    assert np.allclose(np.asarray(out), want, rtol=1e-5)


def test_rep_none_canonicalization_again(c):
    """test_rep_none_canonicalization_again: jnp.insert in a block, a new
    leading axis laid out over i."""
    mesh = c.make_mesh((2,), ("i",))
    f = shmap.shard_map(lambda x: jnp.insert(x, 0, 0)[None], mesh=mesh, in_specs=P("i"),
                        out_specs=P("i"))
    x = np.arange(100, dtype=np.float32)
    want = np.stack([np.insert(x[:50], 0, 0), np.insert(x[50:], 0, 0)])
    assert np.array_equal(np.asarray(f(put(c, mesh, x, P("i")))), want)


def test_custom_jvp_symbolic_zeros(c, m4):
    """test_custom_jvp_symbolic_zeros: a custom_jvp rule with symbolic zeros,
    jvp through a shard_map calling it."""
    @shmap.custom_jvp
    def f(a, b):
        return a + b

    def f_jvp(primals, tangents):
        a, b = primals
        a_dot, b_dot = tangents
        y = f(a, b)
        return y, jnp.zeros_like(y) + a_dot + b_dot

    f.defjvp(f_jvp, symbolic_zeros=True)
    x = np.arange(80, dtype=np.float32).reshape(4, 20) / 80
    a = np.ones((4, 20), np.float32)
    g = shmap.shard_map(f, mesh=m4, in_specs=P("i"), out_specs=P("i"))
    xa = put(c, m4, x, P("i"))
    y, t = shmap.jvp(lambda x: g(x, put(c, m4, a, P("i"))), (xa,), (xa,))
    assert np.allclose(np.asarray(y), x + a) and np.allclose(np.asarray(t), x)


# ---- cond and scan: JAX's pcast sentences ----


def test_cond_pvary_errors(c, m11):
    """test_cond_pvary_errors: the branches of a cond return values varying
    over different axes."""
    def f(x, y):
        return lax.cond(True, lambda x, y: x, lambda x, y: y, x, y)

    x = np.arange(4.0, dtype=np.float32)
    with pytest.raises(TypeError, match=r"applying `jax.lax.pcast\(..., \('y',\).*to the "
                       r"output of true_fun"):
        shmap.shard_map(f, mesh=m11, in_specs=(P("x"), P("y")),
                        out_specs=P(("x", "y")))(x, x)


def test_cond_pvary_errors_pytree(c, m11):
    """test_cond_pvary_errors_pytree: the same, the branches returning
    pairs."""
    def f(x, y):
        return lax.cond(True, lambda x, y: (x, y), lambda x, y: (y, x), x, y)

    x = np.arange(4.0, dtype=np.float32)
    with pytest.raises(TypeError, match=r"applying `jax.lax.pcast\(..., \('y',\).*to the "
                       r"output of true_fun"):  # one P per result: see test_pvary_in_shmap_of_grad
        shmap.shard_map(f, mesh=m11, in_specs=(P("x"), P("y")),
                        out_specs=(P(("x", "y")),) * 2)(x, x)


def test_scan_pvary_errors(c, c_m11ij):
    """test_scan_pvary_errors: a scan whose step swaps a varying and an
    invariant carry; pcast of the invariant one fixes it."""
    mesh = c_m11ij
    x = np.arange(3.0, dtype=np.float32)

    def body(carry, _):
        c1, c2 = carry
        return (c2, c1), ()

    def f(x, y):
        (x_, y_), _ = lax.scan(body, (x, y), (), length=2)
        return x_, y_

    sm = shmap.shard_map(f, mesh=mesh, in_specs=(P("i"), P()), out_specs=P("i"))
    with pytest.raises(TypeError, match=r"This might be fixed by applying `jax.lax.pcast\(..., "
                       r"\('i',\).*to the initial"):
        sm(x, x)

    def g(x, y):
        y = lax.pcast(y, "i", to="varying")
        (x_, y_), _ = lax.scan(body, (x, y), (), length=2)
        return x_, y_

    # one P per result: a single P for a tuple is refused (test_pvary_in_shmap_of_grad)
    out = shmap.shard_map(g, mesh=mesh, in_specs=(P("i"), P()),
                          out_specs=(P("i"), P("i")))(x, x)
    assert all(np.array_equal(np.asarray(o), x) for o in out)


def test_scan_pvary_errors2(c, c_m11ij):
    """test_scan_pvary_errors2: three carries rotated, varying over i, none
    and (i, j): JAX's list of pcasts."""
    mesh = c_m11ij
    x = np.arange(3.0, dtype=np.float32)

    def body(carry, _):
        c1, c2, c3 = carry
        return (c3, c1, c2), ()

    def f(x, y, z):
        carry, _ = lax.scan(body, (x, y, z), (), length=2)
        return carry

    specs = dict(mesh=mesh, in_specs=(P("i"), P(), P(("i", "j"))), out_specs=P(("i", "j")))
    with pytest.raises(TypeError, match=r"This might be fixed by:\n  \* applying "
                       r"`jax.lax.pcast\(..., \('j',\)"):
        shmap.shard_map(f, **specs)(x, x, x)

    def g(x, y, z):
        x = lax.pcast(x, "j", to="varying")
        y = lax.pcast(y, ("i", "j"), to="varying")
        carry, _ = lax.scan(body, (x, y, z), (), length=2)
        return carry

    specs["out_specs"] = (P(("i", "j")),) * 3  # one P per result (see above)
    out = shmap.shard_map(g, **specs)(x, x, x)
    assert all(np.array_equal(np.asarray(o), x) for o in out)


@pytest.fixture(scope="module")
def c_m11ij(c):
    """A (1, 1) mesh over axes i and j."""
    return c.make_mesh((1, 1), ("i", "j"))


# ---- shard_map over the context mesh ----


def test_shmap_full_manual_context_explicit(c, m22):
    """test_shmap_full_manual_context_explicit: no mesh nor in_specs; the
    blocks vary over both axes; the result laid out by out_specs."""
    np_inp = np.arange(16, dtype=np.int32).reshape(8, 2)
    seen = []

    def f(x):
        seen.append(vma(x))
        out = x * 2
        seen.append(vma(out))
        return out

    with shmap.use_mesh(m22):
        arr = shmap.device_put(np_inp, P("x", "y"))
        g = shmap.shard_map(f, out_specs=P("x", "y"))
        out = g(arr)
        assert np.array_equal(np.asarray(out), np_inp * 2)
        assert out.sharding == NamedSharding(m22, P("x", "y"))
        assert np.array_equal(np.asarray(shmap.jit(g)(arr)), np_inp * 2)
    assert seen[:2] == [{"x", "y"}, {"x", "y"}]


def test_ppermute_different_axis_order_error(c, m22):
    """test_ppermute_different_axis_order_error: ppermute over ('y', 'x'),
    not the mesh's order: JAX's RuntimeError."""
    with shmap.use_mesh(m22):
        inp = shmap.device_put(np.arange(4, dtype=np.int32), P(("y", "x")))

        @shmap.jit
        @shmap.shard_map(mesh=m22, in_specs=P(("y", "x")), out_specs=P(("y", "x")))
        def f(x):
            return lax.ppermute(x, axis_name=("y", "x"), perm=[(0, 1), (1, 2), (2, 3), (3, 0)])

        with pytest.raises(RuntimeError, match="Make sure that the axis_name passed to "
                           "jax.lax.ppermute"):
            f(inp)


def test_shmap_partial_manual_explicit(c, m22):
    """test_shmap_partial_manual_explicit: Manual over x only, no in_specs:
    the block keeps its sharding over y in its type."""
    np_inp = np.arange(16, dtype=np.int32).reshape(8, 2)
    seen = []

    def f(x):
        seen.append((shmap.typeof(x).sharding.spec, vma(x)))
        out = x * 2
        seen.append((shmap.typeof(out).sharding.spec, vma(out)))
        return out

    with shmap.use_mesh(m22):
        arr = shmap.device_put(np_inp, P("x", "y"))
        g = shmap.shard_map(f, axis_names=frozenset("x"), out_specs=P("x"))
        out = shmap.jit(g)(arr)
        assert np.array_equal(np.asarray(out), np_inp * 2)
        assert out.sharding == NamedSharding(m22, P("x", "y"))
    assert seen == [(P(None, "y"), {"x"})] * 2


def test_shmap_full_manual_context_auto(c, m22auto):
    """test_shmap_full_manual_context_auto: the same over Auto axes, with
    in_specs."""
    np_inp = np.arange(16, dtype=np.int32).reshape(8, 2)
    seen = []

    def f(x):
        seen.append(vma(x))
        out = x * 2
        seen.append(vma(out))
        return out

    with shmap.use_mesh(m22auto):
        arr = shmap.device_put(np_inp, P("x", "y"))
        g = shmap.shard_map(f, in_specs=P("x", "y"), out_specs=P("x", "y"))
        out = g(arr)
        assert np.array_equal(np.asarray(out), np_inp * 2)
        assert out.sharding == NamedSharding(m22auto, P("x", "y"))
        assert np.array_equal(np.asarray(shmap.jit(g)(arr)), np_inp * 2)
    assert seen[:2] == [{"x", "y"}, {"x", "y"}]


def test_shmap_partial_manual_auto(c, m22auto):
    """test_shmap_partial_manual_auto: Manual over x of an Auto mesh."""
    np_inp = np.arange(16, dtype=np.int32).reshape(8, 2)
    seen = []

    def f(x):
        seen.append(vma(x))
        return x * 2

    with shmap.use_mesh(m22auto):
        arr = shmap.device_put(np_inp, P("x", "y"))
        g = shmap.shard_map(f, axis_names=frozenset("x"), in_specs=P("x"), out_specs=P("x"))
        assert np.array_equal(np.asarray(shmap.jit(g)(arr)), np_inp * 2)
    assert seen == [{"x"}]


def test_no_mesh_context_error(c):
    """test_no_mesh_context_error: no mesh given nor set: JAX's
    ValueError."""
    with pytest.raises(ValueError, match="The context mesh cannot be empty"):
        shmap.shard_map(lambda x: x, in_specs=P(), out_specs=P())(np.arange(8))


def test_pvary_in_shmap_of_grad(c, m2):
    """test_pvary_in_shmap_of_grad: value_and_grad of a block's mean of
    squares."""
    def g(x):
        return jnp.mean(x ** 2)

    def f(x):
        val, grad = shmap.value_and_grad(g)(x)
        return jnp.atleast_1d(val), jnp.atleast_1d(grad)

    val, grad = shmap.shard_map(f, mesh=m2, in_specs=P("x"), out_specs=P("x"))(
        put(c, m2, np.ones(2, np.float32), P("x")))
    assert np.array_equal(np.asarray(val), [1.0, 1.0])
    assert np.array_equal(np.asarray(grad), [2.0, 2.0])


def test_jnp_histogram(c):
    """test_jnp_histogram: vmap of jnp.histogram over a block's rows, in a
    shard_map at once and in a jit."""
    mesh = c.make_mesh((2,), ("data",))
    x_np = np.arange(8 * 4 * 2, dtype=np.float32).reshape(8, 4, 2)

    def f(x, bin_edges):
        hist, _ = shmap.vmap(lambda q: jnp.histogram(q, bins=bin_edges))(x)
        return hist

    with shmap.use_mesh(mesh):
        x = shmap.device_put(x_np, P("data"))
        bin_edges = np.histogram_bin_edges(x_np, bins=100).astype(np.float32)
        g = shmap.shard_map(f, in_specs=(P("data"), P()), out_specs=P("data"))
        want = np.stack([np.histogram(q, bins=bin_edges)[0] for q in x_np])
        assert np.array_equal(np.asarray(g(x, bin_edges)), want)
        assert np.array_equal(np.asarray(shmap.jit(g)(x, bin_edges)), want)


def test_argmax_pvary(c, m22auto):
    """test_argmax_pvary: argmax with keepdims of a block over Auto axes."""
    x = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)

    with shmap.use_mesh(m22auto):
        @shmap.shard_map(in_specs=P("x", "y"), out_specs=P("x", "y"))
        def argmax_impl(x):
            return x.argmax(axis=-1, keepdims=True)

        out = argmax_impl(shmap.device_put(x, P("x", "y")))
    blocks = [x[:, :4].argmax(-1)[:, None], x[:, 4:].argmax(-1)[:, None]]
    assert np.array_equal(np.asarray(out), np.concatenate(blocks, axis=1))


# ---- unreduced results ----


def test_eager_unreduced_out(c, m2):
    """test_eager_unreduced_out: pcast to unreduced, returned with
    out_specs unreduced: the devices' blocks are the partial sums (its grad
    and its error: below)."""
    x = np.arange(8.0, dtype=np.float32)
    with shmap.use_mesh(m2):
        arr = shmap.device_put(x, P("x"))

        @shmap.shard_map(out_specs=P(unreduced={"x"}))
        def f(x):
            return lax.pcast(x, "x", to="unreduced")

        out = f(arr)
        assert out.sharding == NamedSharding(m2, P(unreduced={"x"}))
        assert np.array_equal(np.asarray(shmap.reshard(out, P())), x[:4] + x[4:])


def test_eager_unreduced_out_sin_error(c, m2):
    """test_eager_unreduced_out, its error: sin of an unreduced value."""
    with shmap.use_mesh(m2):
        arr = shmap.device_put(np.arange(8.0, dtype=np.float32), P("x"))

        @shmap.shard_map(out_specs=P(unreduced={"x"}))
        def g(x):
            return jnp.sin(lax.pcast(x, "x", to="unreduced"))

        with pytest.raises(NotImplementedError, match="unreduced rule for sin is not "
                           "implemented"):
            g(arr)


def test_eager_unreduced_out_grad(c, m2):
    """test_eager_unreduced_out, its grad: the cotangent of a pcast to
    unreduced, laid out as the argument."""
    x = np.arange(8.0, dtype=np.float32)
    with shmap.use_mesh(m2):
        arr = shmap.device_put(x, P("x"))
        f = shmap.shard_map(lambda x: lax.pcast(x, "x", to="unreduced"),
                            out_specs=P(unreduced={"x"}))
        out_g = shmap.grad(lambda x: f(x).sum())(arr)
        assert out_g.sharding == NamedSharding(m2, P("x"))
        assert np.array_equal(np.asarray(out_g), np.ones(8))


def test_ppermute_zip_error(c, m2):
    """test_ppermute_zip_error: a perm that is a zip, not a list: JAX's
    TypeError."""
    with shmap.use_mesh(m2):
        arr = shmap.device_put(np.arange(8, dtype=np.int32), P("x"))
        perm = zip([0, 1], [1, 0])

        @shmap.shard_map(out_specs=P("x"))
        def f(x):
            return lax.ppermute(x, "x", perm)

        with pytest.raises(TypeError, match="`perm` passed to `jax.lax.ppermute` must be a "
                           "list"):
            f(arr)


def test_linalg_inv(c, m2):
    """test_linalg_inv: lax.map of jnp.linalg.inv over a block of
    matrices."""
    a = np.random.default_rng(123).uniform(size=(4, 5, 5)).astype(np.float32)
    a = a + 5 * np.eye(5, dtype=np.float32)
    with shmap.use_mesh(m2):
        arr = shmap.device_put(a, P("x"))

        @shmap.shard_map(out_specs=P("x"))
        def f(x):
            return lax.map(jnp.linalg.inv, x)

        assert np.allclose(np.asarray(f(arr)), np.linalg.inv(a), atol=1e-5)


def test_pcast_to_unreduced(c, m22):
    """test_pcast_to_unreduced: a block's product made unreduced over y and
    returned so (its error: below)."""
    a = np.arange(8, dtype=np.float32).reshape(4, 2)
    b = np.arange(8, dtype=np.float32).reshape(2, 4)
    with shmap.use_mesh(m22):
        arr1 = shmap.device_put(a, P("x", "y"))
        arr2 = shmap.device_put(b, P("y", None))

        @shmap.jit
        @shmap.shard_map(out_specs=P("x", unreduced={"y"}))
        def f(x, y):
            return lax.pcast(jnp.dot(x, y), "y", to="unreduced")

        out = f(arr1, arr2)
        assert np.array_equal(np.asarray(shmap.reshard(out, P())), a @ b)


def test_pcast_to_unreduced_mixed_error(c, m22):
    """test_pcast_to_unreduced, its error: pcast over x (varying) and y
    (unreduced) at once."""
    a = np.arange(8, dtype=np.float32).reshape(4, 2)
    b = np.arange(8, dtype=np.float32).reshape(2, 4)
    with shmap.use_mesh(m22):
        arr1 = shmap.device_put(a, P("x", "y"))
        arr2 = shmap.device_put(b, P("y", None))

        @shmap.jit
        @shmap.shard_map(out_specs=P("x", unreduced={"y"}))
        def g(x, y):
            z = lax.pcast(jnp.dot(x, y), "y", to="unreduced")
            return lax.pcast(z, ("x", "y"), to="reduced")

        with pytest.raises(ValueError, match="jax.lax.pcast can only accept axis_name which"):
            g(arr1, arr2)


@pytest.mark.parametrize("out_spec,axis_name,aval_spec", [
    (P("x"), {"x"}, P(None, "y")),
    (P(None, "y"), {"y"}, P("x", None)),
])
def test_partial_manual_explicit_shmap(c, m22, out_spec, axis_name, aval_spec):
    """test_partial_manual_explicit_shmap: the block's type keeps the
    sharding over the axis left out; at once and in a jit alike."""
    seen = []

    def f(x):
        seen.append(shmap.typeof(x).sharding.spec)
        return x * 2

    np_inp = np.arange(16, dtype=np.int32).reshape(8, 2)
    with shmap.use_mesh(m22):
        g = shmap.shard_map(f, out_specs=out_spec, axis_names=axis_name)
        arr = shmap.device_put(np_inp, P("x", "y"))
        out = g(arr)
        out2 = shmap.jit(g)(arr)
    assert out.sharding == out2.sharding
    assert np.array_equal(np.asarray(out), np_inp * 2)
    assert seen[0] == aval_spec


def test_axis_index_explicit_mesh_eager_shmap(c):
    """test_axis_index_explicit_mesh_eager_shmap: each device's axis
    indices, at once and in a jit, with check_vma=False too."""
    mesh = c.make_mesh((1, 2, 2), ("x", "y", "z"))

    def f():  # jnp.stack: jnp.array of traced values is test_jnp_array_of_traced_values
        return jnp.stack([lax.axis_index(n) for n in mesh.axis_names])

    with shmap.use_mesh(mesh):
        want = np.array([[0, y, z] for y in range(2) for z in range(2)]).ravel()
        g = shmap.shard_map(f, out_specs=P(mesh.axis_names))
        assert np.array_equal(np.asarray(g()), want)
        assert np.array_equal(np.asarray(shmap.jit(g)()), want)
        h = shmap.shard_map(f, out_specs=P(), check_vma=False)
        assert np.array_equal(np.asarray(h()), [0, 0, 0])
        # jit(h) is test_axis_index_unmapped's difference: check_vma=False lost in a jit


def test_jnp_array_of_traced_values(c, m2):
    """test_axis_index_explicit_mesh_eager_shmap's body: jnp.array of a list
    of axis indices."""
    with shmap.use_mesh(m2):
        g = shmap.shard_map(lambda: jnp.array([lax.axis_index("x")]), out_specs=P("x"))
        assert np.array_equal(np.asarray(g()), [0, 1])


def test_varargs_error(c, m2):
    """test_varargs_error: one in_spec for three positional arguments of
    size 3 over an axis of 2: ValueError (not an AssertionError), naming the
    varargs parameter; of size 4, nothing to return: () back."""
    with shmap.use_mesh(m2):
        @shmap.shard_map(in_specs=P("x"), out_specs=())
        def f(*foos, **kwargs):
            return ()

        x = np.arange(3.0, dtype=np.float32)
        with pytest.raises(ValueError, match="varargs parameter 'foos'"):
            f(x, x, x)
        x = np.arange(4.0, dtype=np.float32)
        assert f(x, x, x) == ()


def test_split_with_unused_result_in_shardmap(c, m2):
    """test_split_with_unused_result_in_shardmap: grad through a jnp.split
    whose second part is unused."""
    with shmap.use_mesh(m2):
        arr = shmap.device_put(np.ones(8, np.float32), P("x"))

        @shmap.shard_map(in_specs=P("x"), out_specs=P("x"))
        def f(x):
            a, _ = jnp.split(x, 2, axis=0)
            return a

        def g(x):
            b = 0.1 * f(x).mean(keepdims=True)
            return b.squeeze(0)

        out = shmap.jit(shmap.grad(g))(arr)
    want = np.array([0.025, 0.025, 0, 0, 0.025, 0.025, 0, 0], np.float32)
    assert np.allclose(np.asarray(out), want)


def test_shmap_primal_type_match_ct_type(c, m2):
    """test_shmap_primal_type_match_ct_type: the cotangent of a shard_map's
    argument is laid out as the argument."""
    with shmap.use_mesh(m2):
        arr = shmap.device_put(np.arange(8.0, dtype=np.float32), P("x"))

        @shmap.jit
        @shmap.shard_map(in_specs=P("x"), out_specs=P("x"))
        def f(x):
            return x * 2

        assert f(arr).sharding == NamedSharding(m2, P("x"))
        out_g = shmap.jit(shmap.grad(lambda x: f(x).sum()))(arr)
        assert out_g.sharding == NamedSharding(m2, P("x"))
        assert np.array_equal(np.asarray(out_g), np.full(8, 2.0))


def test_mix_manual_explicit_partial(c, m22):
    """test_mix_manual_explicit_partial: an argument sharded over (x, y),
    Manual over x: the block is sharded over y in its type."""
    np_inp = np.arange(16, dtype=np.int32).reshape(8, 2)
    seen = []
    with shmap.use_mesh(m22):
        arr = shmap.device_put(np_inp, P(("x", "y"), None))

        @shmap.jit
        @shmap.shard_map(out_specs=P("x"), axis_names={"x"})
        def f(x):
            seen.append((x.shape, shmap.typeof(x).sharding.spec, vma(x)))
            return x * 2

        out = f(arr)
    assert seen == [((4, 2), P("y", None), {"x"})]
    assert np.array_equal(np.asarray(out), np_inp * 2)
    assert out.sharding == NamedSharding(m22, P(("x", "y"), None))


def test_result_spec_one_per_dim(c, m22):
    """test_mix_manual_explicit_partial's and test_unreduced_replicated_bitcast's
    sharding asserts: a jit result's spec has an entry per dimension."""
    with shmap.use_mesh(m22):
        arr = shmap.device_put(np.ones((4, 2), np.float32), P("x", None))
        assert shmap.jit(lambda a: a * 2)(arr).sharding == NamedSharding(m22, P("x", None))


def test_zero_cotangent_sharding(c, m2):
    """test_zero_cotangent_sharding: a custom_vjp whose backward returns
    None (a zero cotangent) in a shard_map, under grad at once and in a
    jit."""
    @shmap.custom_vjp
    def inner(x):
        return x

    inner.defvjp(lambda x: (x, None), lambda _, g: (None,))

    with shmap.use_mesh(m2):
        @shmap.shard_map(out_specs=P("x"), check_vma=False)
        def f(x):
            return inner(x)

        x = shmap.device_put(np.arange(8.0, dtype=np.float32), P("x"))
        g1 = shmap.grad(lambda x: f(x).sum())(x)
        g2 = shmap.jit(shmap.grad(lambda x: f(x).sum()))(x)
    assert np.array_equal(np.asarray(g1), np.zeros(8))
    assert np.array_equal(np.asarray(g2), np.zeros(8))


def test_vmap_shmap_psum(c, m22):
    """test_vmap_shmap_psum: vmap of a shard_map with a psum: the batch
    stays sharded over x."""
    a = np.arange(16, dtype=np.int32).reshape(2, 8)
    with shmap.use_mesh(m22):
        arr = shmap.device_put(a, P("x", "y"))

        @shmap.shard_map(in_specs=P("y"), out_specs=P(None))
        def f(x):
            return lax.psum(x, axis_name="y")

        out = shmap.vmap(f)(arr)
        assert out.sharding == NamedSharding(m22, P("x", None))
        assert np.array_equal(np.asarray(out), a[:, :4] + a[:, 4:])
        out = shmap.jit(shmap.vmap(f))(arr)
        assert out.sharding == NamedSharding(m22, P("x", None))


def test_shmap_empty_mesh_error(c):
    """test_shmap_empty_mesh_error: a mesh of no axes: JAX's ValueError."""
    mesh = shmap.Mesh((), (), devices=[])

    @shmap.shard_map(mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    def f(x):
        return x

    with pytest.raises(ValueError, match="shard_map requires a non-empty mesh"):
        f(np.arange(8, dtype=np.float32))


def test_axis_index_unmapped(c, m2):
    """test_axis_index_unmapped: vmap in a shard_map body of axis_index,
    check_vma=False."""
    arr = np.arange(8, dtype=np.int32)

    def f(x):
        return lax.axis_index("x")

    with shmap.use_mesh(m2):
        out = shmap.jit(shmap.shard_map(shmap.vmap(f), in_specs=P(), out_specs=P(),
                                        check_vma=False))(arr)
    assert np.array_equal(np.asarray(out), np.zeros(8, np.int32))


def test_replicated_unreduced_bitcast_check_vma_false(c, m2):
    """test_replicated_unreduced_bitcast_check_vma_false (without grad: its
    cotangents are reduced shardings): a replicated block returned as
    unreduced, each device's shard the whole array; taken back as
    unreduced, each block the device's shard."""
    x = np.arange(8.0, dtype=np.float32)
    with shmap.use_mesh(m2):
        arr = shmap.device_put(x, P())

        @shmap.jit
        @shmap.shard_map(in_specs=P(), out_specs=P(unreduced={"x"}), check_vma=False)
        def f(x):
            return x

        out = f(arr)
        assert out.sharding == NamedSharding(m2, P(None, unreduced={"x"}))
        for s in out.addressable_shards:
            assert np.array_equal(s.data, x)

        @shmap.jit
        @shmap.shard_map(in_specs=P(unreduced={"x"}), out_specs=P(), check_vma=False)
        def g(x):
            return x

        out2 = g(out)
        assert out2.sharding == NamedSharding(m2, P(None))
        for s in out2.addressable_shards:
            assert np.array_equal(s.data, x)


def test_unreduced_replicated_bitcast(c, m2):
    """test_unreduced_replicated_bitcast: a sharded block pcast to unreduced
    (the global shape halves), each device's shard its block (its g1, g2:
    below)."""
    x = np.arange(4, dtype=np.int32)
    with shmap.use_mesh(m2):
        arr = shmap.device_put(x, P("x"))

        @shmap.jit
        @shmap.shard_map(in_specs=P("x"), out_specs=P(unreduced={"x"}))
        def f(x):
            return lax.pcast(x, "x", to="unreduced")

        out = f(arr)
        assert out.shape == (2,)
        assert out.sharding == NamedSharding(m2, P(None, unreduced={"x"}))
        for o, a in zip(out.addressable_shards, arr.addressable_shards):
            assert np.array_equal(o.data, a.data)


def test_unreduced_replicated_bitcast_in(c, m2):
    """test_unreduced_replicated_bitcast, its g1 and g2: an unreduced
    argument summed by psum; taken as replicated with check_vma=False, each
    block its shard."""
    x = np.arange(4, dtype=np.int32)
    with shmap.use_mesh(m2):
        arr = shmap.device_put(x, P("x"))
        out = shmap.jit(shmap.shard_map(lambda x: lax.pcast(x, "x", to="unreduced"),
                                        in_specs=P("x"), out_specs=P(unreduced={"x"})))(arr)

        @shmap.jit
        @shmap.shard_map(in_specs=P(unreduced={"x"}), out_specs=P())
        def g1(x):
            return lax.psum(x, "x")

        out2 = g1(out)
        assert out2.shape == (2,) and out2.sharding == NamedSharding(m2, P(None))
        for s in out2.addressable_shards:
            assert np.array_equal(s.data, [2, 4])

        @shmap.jit
        @shmap.shard_map(in_specs=P(unreduced={"x"}), out_specs=P(), check_vma=False)
        def g2(x):
            return x

        out3 = g2(out)
        assert out3.shape == (2,) and out3.sharding == NamedSharding(m2, P(None))
        for o, a in zip(out3.addressable_shards, arr.addressable_shards):
            assert np.array_equal(o.data, a.data)


def test_sharded_unreduced_roundtrip_check_vma_false(c, m2):
    """test_sharded_unreduced_roundtrip_check_vma_false (without grad): a
    sharded block returned as unreduced with check_vma=False (the global
    shape halves) and taken back as P('x') (it doubles)."""
    x = np.arange(4.0, dtype=np.float32)
    with shmap.use_mesh(m2):
        arr = shmap.device_put(x, P("x"))

        @shmap.jit
        @shmap.shard_map(in_specs=P("x"), out_specs=P(unreduced={"x"}), check_vma=False)
        def f(x):
            return x

        out = f(arr)
        assert out.shape == (2,)
        assert out.sharding == NamedSharding(m2, P(None, unreduced={"x"}))
        for o, a in zip(out.addressable_shards, arr.addressable_shards):
            assert np.array_equal(o.data, a.data)

        @shmap.jit
        @shmap.shard_map(in_specs=P(unreduced={"x"}), out_specs=P("x"), check_vma=False)
        def g(x):
            return x

        out2 = g(out)
        assert out2.shape == (4,) and out2.sharding == NamedSharding(m2, P("x"))
        for o, a in zip(out2.addressable_shards, arr.addressable_shards):
            assert np.array_equal(o.data, a.data)


def test_pvary_eager(c, m2):
    """test_pvary_eager: pcast to varying of a replicated argument, at once
    and under grad (its error: below)."""
    inp = np.arange(8.0, dtype=np.float32)

    def f(x):
        return lax.pcast(x, "x", to="varying")

    with shmap.use_mesh(m2):
        f_shmap = shmap.shard_map(f, in_specs=P(), out_specs=P("x"))
        out = f_shmap(inp)
        assert np.array_equal(np.asarray(out), np.concatenate([inp, inp]))
        assert out.sharding == NamedSharding(m2, P("x"))
        g = shmap.jit(shmap.grad(lambda x: f_shmap(x).sum()))(inp)
        assert np.array_equal(np.asarray(g), np.full(8, 2.0))


def test_pvary_eager_error(c, m2):
    """test_pvary_eager, its error: pcast called at once, outside a
    shard_map."""
    with shmap.use_mesh(m2):
        with pytest.raises(ValueError, match="pvary should be called under jax.shard_map"):
            lax.pcast(np.arange(8.0, dtype=np.float32), "x", to="varying")


def test_pvary_explicit_axes_error(c, m22):
    """test_pvary_explicit_axes_error: pcast over an axis the partial-manual
    shard_map leaves out: JAX's NameError."""
    with shmap.use_mesh(m22):
        @shmap.jit
        @shmap.shard_map(in_specs=P(), out_specs=P("x"), axis_names={"x"}, check_vma=False)
        def f(x):
            return lax.pcast(x, "y", to="varying")

        with pytest.raises(NameError, match="Found an unbound axis name"):
            f(np.arange(8, dtype=np.int32))


@pytest.mark.parametrize("axis_type", ["Auto", "Explicit"])
def test_slice_oob_shmap(c, axis_type):
    """test_slice_oob_shmap: a slice past the end of a block is empty; in a
    shard_map and in a jit."""
    mesh = c.make_mesh((2,), ("x",), axis_types=(getattr(shmap, axis_type),))
    with shmap.use_mesh(mesh):
        arr = shmap.device_put(np.ones((32, 32), np.float32), P(None, "x"))

        def f(x):
            return x[:, 100:116]

        out = shmap.jit(shmap.shard_map(f, in_specs=P(None, "x"), out_specs=P(None, "x")))(arr)
        assert out.shape == (32, 0)
        out = shmap.jit(f)(arr)
        assert out.shape == (32, 0)


def test_full_like_pvary_existing(c, m2):
    """test_full_like_pvary_existing: full_like of a varying array with a
    varying fill value."""
    with shmap.use_mesh(m2):
        @shmap.shard_map(out_specs=P("x"))
        def f():
            res = lax.pcast(jnp.array([10, 11]), "x", to="varying")
            fill_value = lax.pcast(jnp.array(-1), "x", to="varying")
            return jnp.full_like(res, fill_value)

        assert np.array_equal(np.asarray(f()), [-1] * 4)
        assert np.array_equal(np.asarray(shmap.jit(f)()), [-1] * 4)


@pytest.mark.xfail(strict=True, reason="a shard_map nested two deep in partial-manual ones "
                   "is refused: 'only a jit body calls shard_map and jit functions'")
def test_nested_shmap_innermost_no_axis_names(c):
    """test_nested_shmap_innermost_no_axis_names: shard_maps nested over x,
    then y, then the rest (z) of an Auto mesh."""
    mesh = c.make_mesh((2, 2, 2), ("x", "y", "z"), axis_types=(shmap.Auto,) * 3)
    arr = np.ones(4, np.float32)

    def h(x):
        return shmap.shard_map(lambda y: y * 2, in_specs=P(), out_specs=P())(x)

    def g(x):
        return shmap.shard_map(h, in_specs=P(), out_specs=P(), axis_names={"y"})(x)

    with shmap.use_mesh(mesh):
        @shmap.jit
        def f(x):
            return shmap.shard_map(g, in_specs=P(), out_specs=P(), axis_names={"x"})(x)

        assert np.array_equal(np.asarray(f(arr)), arr * 2)


def test_partially_sharded_dim_with_auto(c):
    """CustomPartitionerTest.test_partially_sharded_dim_with_auto: a
    dimension sharded over (i, j), Manual over i only."""
    mesh = c.make_mesh((4, 2), ("i", "j"), axis_types=(shmap.Auto, shmap.Auto))

    def g(x):
        return jnp.sum(x)[None]

    @shmap.jit
    def f(x):
        x = lax.with_sharding_constraint(x, NamedSharding(mesh, P(("i", "j"))))
        re = shmap.shard_map(g, mesh=mesh, in_specs=P("i"), out_specs=P("i"),
                             check_vma=False, axis_names={"i"})(x)
        return lax.with_sharding_constraint(re, NamedSharding(mesh, P(("i", "j"))))

    with shmap.use_mesh(mesh):
        out = f(np.arange(8.0, dtype=np.float32))
    assert np.array_equal(np.asarray(out), [1.0, 5.0, 9.0, 13.0])


# ---- what shmap does not have ----


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_smap(c, jit):
    """test_smap: smap over 'x' of smap over 'y', each along the rows, on a
    (2, 2, 2) mesh; the blocks vary over the axes Manual around them."""
    mesh = c.make_mesh((2, 2, 2), ("x", "y", "z"))
    np_inp = np.arange(32.0, dtype=np.float32).reshape(4, 8)
    arr = put(c, mesh, np_inp, P("x", "y"))
    seen = []

    def g(x):
        seen.append(("g", shmap.typeof(x).vma))
        out = x * x
        seen.append(("g out", shmap.typeof(out).vma))
        return out

    def h(x):
        seen.append(("h", shmap.typeof(x).vma))
        out = shmap.smap(g, in_axes=0, out_axes=0, axis_name="y")(x)
        seen.append(("h out", shmap.typeof(out).vma))
        return out

    def f(x):
        return shmap.smap(h, in_axes=0, out_axes=0, axis_name="x")(x)

    with shmap.use_mesh(mesh):
        out = (shmap.jit(f) if jit else f)(arr)
    assert np.array_equal(np.asarray(out), np_inp * np_inp)
    assert dict(seen) == {"h": {"x"}, "g": {"x", "y"}, "g out": {"x", "y"}, "h out": {"x"}}
    with pytest.raises(TypeError, match="smap axis_name should be a `str`"):
        shmap.smap(g, in_axes=0, out_axes=0, axis_name=("x", "y"))
    with pytest.raises(TypeError, match="smap out_axes must be an int, None"):
        shmap.smap(g, in_axes=0, out_axes="x", axis_name="x")


def test_smap_replicated(c, m2):
    """test_smap_replicated: smap with in_axes and out_axes None."""
    with shmap.use_mesh(m2):
        f = shmap.smap(lambda x: x * 2, in_axes=None, out_axes=None, axis_name="x")
        out = f(np.arange(8, dtype=np.int32))
    assert np.array_equal(np.asarray(out), np.arange(8) * 2)
    assert out.sharding == NamedSharding(m2, P())


def test_eager_reduced_in(c, m2):
    """test_eager_reduced_in: a reduced argument pcast to varying."""
    x = np.arange(8.0, dtype=np.float32)
    with shmap.use_mesh(m2):
        arr = shmap.device_put(x, P(reduced={"x"}))
        f = shmap.shard_map(lambda x: lax.pcast(x, "x", to="varying"), out_specs=P("x"))
        out = f(arr)
    assert out.sharding == NamedSharding(m2, P("x"))
    assert np.array_equal(np.asarray(out), np.concatenate([x, x]))


def test_random_beta_vma(c):
    """test_random_beta_vma: random.beta in a shard_map body, with a key
    pcast to varying (both halves equal: the key reused) and with a key per
    device."""
    mesh = c.make_mesh((2,), ("dp",))
    ones = np.ones((64, 1), np.float32)
    key = shmap.random.key_data(shmap.random.key(42))
    f = shmap.shard_map(lambda k, y, z: shmap.random.beta(lax.pcast(k, ("dp",), to="varying"),
                                                           y, z),
                        mesh=mesh, in_specs=(P(), P("dp"), P("dp")), out_specs=P("dp"))
    a, b = np.asarray(f(key, ones, ones)).reshape(2, 32)
    assert np.allclose(a, b)
    keys = shmap.random.key_data(shmap.random.split(shmap.random.key(42), 2))
    g = shmap.shard_map(lambda k, y, z: shmap.random.beta(k[0], y, z), mesh=mesh,
                        in_specs=(P("dp"), P("dp"), P("dp")), out_specs=P("dp"))
    assert np.asarray(g(keys, ones, ones)).shape == (64, 1)


# ---- ShardMapSystematicTest: a sample of its cases against its reference ----


SYS_FUNS = {  # name: (shmap body, numpy body)
    "id": (lambda x: x, lambda x: x),
    "flip": (lambda x, y: (y, x), lambda x, y: (y, x)),
    "transpose": (lambda x: x.T, lambda x: x.T),
    "dot": (jnp.dot, np.dot),
    "sin_dot_sin": (lambda a, b: jnp.sin(jnp.dot(jnp.sin(a), b)),
                    lambda a, b: np.sin(np.dot(np.sin(a), b))),
    "relu": (lambda x: shmap.nn.relu(x + 1) - 1, lambda x: np.maximum(x + 1, 0) - 1),
}

# (fun, mesh shape, block shapes of the arguments, in_specs, out_specs)
SYS_CASES = [
    ("id", {"i": 4, "j": 2}, [(2, 3)], (P("i", "j"),), P("j", "i")),
    ("transpose", {"i": 2, "j": 2}, [(2, 3)], (P("i", None),), P(None, "i")),
    ("dot", {"i": 1, "j": 2}, [(2, 3), (3, 1)], (P(None, "j"), P()), P("j", None)),
    ("sin_dot_sin", {"i": 2, "j": 4}, [(1, 3), (3, 2)], (P("j", None), P(None, "i")),
     P("j", "i")),
    ("flip", {"i": 2}, [(3,), (2, 1)], (P("i"), P()), (P(), P("i"))),
    ("relu", {"i": 2, "j": 2}, [(3, 2)], (P(None, ("i", "j")),), P(None, ("j", "i"))),
]
SYS_IDS = [case[0] for case in SYS_CASES]


def _sys_mesh(c, shape):  # jtu.create_mesh's: Auto axes
    return c.make_mesh(tuple(shape.values()), tuple(shape),
                       axis_types=(shmap.Auto,) * len(shape))


def _dilate(shape, spec, block):
    return tuple(d * math.prod(shape[a] for a in ((e,) if isinstance(e, str) else e or ()))
                 for d, e in zip(block, tuple(spec) + (None,) * (len(block) - len(spec))))


def _indexer(shape, spec, block):
    """The block of device idx (a tuple of mesh indices) under spec: JAX's
    make_indexer."""
    names = list(shape)

    def index(idx):
        out = []
        for k, size in enumerate(block):
            e = spec[k] if k < len(spec) else None
            e = (e,) if isinstance(e, str) else e or ()
            start = 0
            for a in e:
                start = start * shape[a] + idx[names.index(a)]
            out.append(slice(start * size, (start + 1) * size))
        return tuple(out)
    return index


def _sys_args(shape, blocks, in_specs):
    args = []
    for b, s in zip(blocks, in_specs):
        g = _dilate(shape, s, b)
        args.append((np.arange(math.prod(g), dtype=np.float32).reshape(g) / math.prod(g)))
    return args


def _sys_reference(shape, fun, in_specs, out_specs, args):
    """JAX's shmap_reference: the body on each device's blocks, its results
    written where out_specs put them."""
    blocks = [tuple(d // math.prod(shape[n] for n in ((e,) if isinstance(e, str) else e or ()))
                    for d, e in zip(a.shape, tuple(s) + (None,) * a.ndim))
              for a, s in zip(args, in_specs)]
    multi = isinstance(out_specs, tuple) and not isinstance(out_specs, P)
    outs_spec = out_specs if multi else (out_specs,)
    outs = None
    for idx in it.product(*[range(n) for n in shape.values()]):
        shards = [a[_indexer(shape, s, b)(idx)] for a, s, b in zip(args, in_specs, blocks)]
        res = fun(*[x.astype(np.float64) for x in shards])
        res = res if multi else (res,)
        if outs is None:
            outs = [np.zeros(_dilate(shape, s, r.shape)) for s, r in zip(outs_spec, res)]
        for o, s, r in zip(outs, outs_spec, res):
            o[_indexer(shape, s, r.shape)(idx)] = r
    return tuple(outs) if multi else outs[0]


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("case", SYS_CASES, ids=SYS_IDS)
def test_systematic_against_ref(c, case, jit):
    """ShardMapSystematicTest.test_eager_against_ref and
    test_jit_against_ref: a shard_map at once and in a jit against the
    reference loop over the mesh."""
    name, shape, blocks, in_specs, out_specs = case
    mesh = _sys_mesh(c, shape)
    args = _sys_args(shape, blocks, in_specs)
    f = shmap.shard_map(SYS_FUNS[name][0], mesh=mesh, in_specs=in_specs, out_specs=out_specs)
    out = (shmap.jit(f) if jit else f)(*[put(c, mesh, a) for a in args])
    want = _sys_reference(shape, SYS_FUNS[name][1], in_specs, out_specs, args)
    for o, w in zip(out if isinstance(want, tuple) else (out,),
                    want if isinstance(want, tuple) else (want,)):
        assert np.allclose(np.asarray(o), w, rtol=1e-5, atol=1e-6)


def _numeric_grad(fn, args, k, eps=1e-4):
    a = args[k].astype(np.float64)
    g = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        hi, lo = a.copy(), a.copy()
        hi[i] += eps
        lo[i] -= eps
        g[i] = (fn(*args[:k], hi, *args[k + 1:]) - fn(*args[:k], lo, *args[k + 1:])) / (2 * eps)
    return g


@pytest.mark.parametrize("check_vma", [True, False])
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("case", SYS_CASES[1:4], ids=SYS_IDS[1:4])
def test_systematic_grads(c, case, jit, check_vma):
    """ShardMapSystematicTest.test_grads (first order, against central
    differences of the reference): the gradient of a weighted sum of the
    results with respect to each argument."""
    name, shape, blocks, in_specs, out_specs = case
    mesh = _sys_mesh(c, shape)
    args = _sys_args(shape, blocks, in_specs)
    want0 = _sys_reference(shape, SYS_FUNS[name][1], in_specs, out_specs, args)
    w = np.random.default_rng(0).standard_normal(want0.shape).astype(np.float32)
    f = shmap.shard_map(SYS_FUNS[name][0], mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                        check_vma=check_vma)
    if jit:
        f = shmap.jit(f)

    def ref_loss(*a):
        return float((_sys_reference(shape, SYS_FUNS[name][1], in_specs, out_specs,
                                     list(a)) * w).sum())

    for k in range(len(args)):
        g = shmap.grad(lambda *a: jnp.sum(f(*a) * w), argnums=k)(
            *[put(c, mesh, a) for a in args])
        assert np.allclose(np.asarray(g), _numeric_grad(ref_loss, args, k), atol=1e-2,
                           rtol=1e-2)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_systematic_grads_closure(c, jit):
    """ShardMapSystematicTest.test_grads_closure (the dot case: the
    replicated argument closed over): the derivative with respect to a
    scalar scaling the sharded argument."""
    name, shape, blocks, in_specs, out_specs = SYS_CASES[2]
    mesh = _sys_mesh(c, shape)
    a, b = _sys_args(shape, blocks, in_specs)
    a_arr, b_arr = put(c, mesh, a), put(c, mesh, b)

    def f(x):
        @shmap.shard_map(mesh=mesh, in_specs=(in_specs[0],), out_specs=out_specs)
        def g(a):
            return jnp.dot(x * a, b_arr)
        if jit:
            g = shmap.jit(g)
        return jnp.sum(g(a_arr))

    def ref(x):
        return _sys_reference(shape, np.dot, in_specs, out_specs, [x * a, b]).sum()

    got = shmap.grad(f)(np.float32(0.2))
    want = (ref(0.2 + 1e-3) - ref(0.2 - 1e-3)) / 2e-3
    assert np.allclose(np.asarray(got), want, rtol=1e-3)
