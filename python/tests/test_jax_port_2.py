"""JAX's shard_map tests (jax-ml/jax tests/shard_map_test.py, the middle of
the file: remat, vmap, abstract meshes, the replication rules of scan,
while_loop, cond and switch, custom_jvp / custom_vjp, axis_index,
device_put and PRNG keys in a body) against shmap's Python package on a
local cluster (conftest's c: 2 workers x 4 devices). Values are checked
against numpy, errors by JAX's exception types and sentences; where shmap
differs from JAX the test is a strict xfail reduced to a minimal
reproduction, its reason saying what differs."""
import functools

import numpy as np
import pytest

import shmap
from shmap import P, NamedSharding
from shmap import lax
from shmap import numpy as jnp

from _util import put


@pytest.fixture(scope="module")
def m4(c):
    """JAX's jtu.create_mesh((4,), ('x',))."""
    return c.make_mesh((4,), ("x",))


@pytest.fixture(scope="module")
def m22(c):
    """JAX's jtu.create_mesh((2, 2), ('x', 'y'))."""
    return c.make_mesh((2, 2), ("x", "y"))


@pytest.fixture(scope="module")
def m8(c):
    """JAX's Mesh(jax.devices(), ...) of 8 devices, one axis 'x'."""
    return c.make_mesh((8,), ("x",))


def sm(f, mesh, in_specs, out_specs, **kw):
    return shmap.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, **kw)


# ---- remat ----


def test_shmap_of_remat_basic(c, m4):
    """test_shmap_of_remat_basic: grad through a shard_map of a remat'd sin."""
    x = np.arange(4.0, dtype=np.float32)
    f2 = sm(shmap.remat(jnp.sin), m4, P("x"), P("x"))
    g2 = shmap.grad(lambda v: f2(v).sum())(put(c, m4, x))
    np.testing.assert_allclose(np.asarray(g2), np.cos(x), rtol=1e-6, atol=1e-6)


def test_checkpoint_policies():
    """test_shmap_of_remat_basic's policy: jax.checkpoint_policies.everything_saveable."""
    f = shmap.remat(jnp.sin, policy=shmap.checkpoint_policies.everything_saveable)
    assert callable(f)


def _g1(s):
    """d/ds sin(sin(sin(s)))."""
    return np.cos(np.sin(np.sin(s))) * np.cos(np.sin(s)) * np.cos(s)


def _remat_scalar_f(m4):
    return shmap.remat(sm(lambda b: jnp.sin(jnp.sin(jnp.sin(b.sum())))[None], m4,
                          P("x"), P("x")))


def test_remat_scalar_residuals(c, m4):
    """test_remat_scalar_residuals: remat of a shard_map whose residuals are
    scalars, its first derivative (the second: the xfail below)."""
    f = _remat_scalar_f(m4)
    x = np.arange(8.0, dtype=np.float32)
    xa = put(c, m4, x)
    want = np.repeat(_g1(x.reshape(4, 2).sum(axis=1).astype(np.float64)), 2)
    for g in (shmap.grad(lambda v: f(v).sum()), shmap.jit(shmap.grad(lambda v: f(v).sum()))):
        np.testing.assert_allclose(np.asarray(g(xa)), want, rtol=1e-5, atol=1e-5)


def test_remat_scalar_residuals_second_order(c, m4):
    """test_remat_scalar_residuals' check_grads(order=2): grad of grad."""
    f = _remat_scalar_f(m4)
    x = np.arange(8.0, dtype=np.float32)
    h = shmap.grad(lambda v: shmap.grad(lambda y: f(y).sum())(v).sum())(put(c, m4, x))
    s = x.reshape(4, 2).sum(axis=1).astype(np.float64)
    want = np.repeat(2 * (_g1(s + 1e-5) - _g1(s - 1e-5)) / 2e-5, 2)
    np.testing.assert_allclose(np.asarray(h), want, rtol=1e-2, atol=1e-2)


# ---- static (None) in_specs, out_specs prefixes ----


def test_multiple_result_primitive_with_none_sharding(c):
    """test_multiple_result_primitive_with_none_sharding: a static argument
    split in the body, a list of results under one out_spec."""
    xs = np.arange(20, dtype=np.int32).reshape(2, 10)
    mesh = c.make_mesh((2,), ("i",))
    y = sm(lambda x: jnp.split(x.squeeze(), 2), mesh, (None,), P("i"))(xs)
    want = np.repeat(xs, 2, axis=0).reshape(2, 2, 10)
    assert len(y) == 2
    for a, w in zip(y, want):
        assert np.array_equal(np.asarray(a), w)


def test_in_specs_none_error(c, m4):
    """test_in_specs_none_error: in_specs None, (None,) and P() with a float."""
    def f(x):
        return x

    assert float(np.asarray(sm(f, m4, P(), P())(3.0))) == 3.0
    assert float(np.asarray(sm(f, m4, None, P())(3.0))) == 3.0
    assert float(np.asarray(sm(f, m4, (None,), P())(3.0))) == 3.0


def test_out_specs_one_spec_for_a_tuple(c):
    """test_axis_index_twoaxes and test_scan_rep_rule write one out_spec for
    a tuple (a list) of results: a pytree prefix."""
    mesh = c.make_mesh((4, 2), ("i", "j"))
    outs = sm(lambda: (lax.axis_index("i")[None, None], lax.axis_index("j")[None, None]),
              mesh, (), P("i", "j"))()
    assert np.array_equal(np.asarray(outs[0]), np.repeat(np.arange(4)[:, None], 2, axis=1))


# ---- vmap, abstract meshes, reduced ----


def test_vmap_explicit_mesh_axis_single_axis(c):
    """test_vmap_explicit_mesh_axis_single_axis: jit(vmap(shard_map)) over
    an array sharded over the Explicit axis the vmap maps."""
    mesh = c.make_mesh((2, 2), ("data", "model"))
    v = np.arange(16, dtype=np.int32).reshape(4, 4)
    with shmap.sharding.use_mesh(mesh):
        x = shmap.device_put(v, P("data", "model"))
        f = shmap.shard_map(lambda b: b, in_specs=P("model"), out_specs=P("model"))
        out = shmap.jit(shmap.vmap(f))(x)
    assert out.sharding == NamedSharding(mesh, P("data", "model"))
    assert np.array_equal(np.asarray(out), v)


def test_shard_map_abstract_mesh(c):
    """test_shard_map_abstract_mesh: mesh=mesh.abstract_mesh, in a jit and at
    once (jtu.create_mesh's Auto axes: the results keep the out_spec)."""
    m22 = c.make_mesh((2, 2), ("x", "y"), axis_types=(shmap.Auto, shmap.Auto))
    v = np.arange(16, dtype=np.int32).reshape(8, 2)
    arr = put(c, m22, v, P("x", "y"))

    def f(x):
        return sm(lambda b: b, m22.abstract_mesh, P("x"), P("x"))(x)

    for out in (shmap.jit(f)(arr), f(arr)):
        assert np.array_equal(np.asarray(out), v)
        assert out.sharding == NamedSharding(m22, P("x"))


def test_shmap_bwd_rep_to_unreduced_check_vma_true(c):
    """test_shmap_bwd_rep_to_unreduced_check_vma_true: out_specs
    P(reduced={'x'}), whose cotangent is unreduced."""
    mesh = c.make_mesh((2,), ("x",))
    with shmap.sharding.use_mesh(mesh):
        arr = shmap.device_put(np.arange(8.0, dtype=np.float32), P(reduced={"x"}))
        f = shmap.jit(shmap.shard_map(lambda x: x * x, out_specs=P(reduced={"x"})))
        out = f(arr)
        assert out.sharding == NamedSharding(mesh, P(None, reduced={"x"}))
        out_g = shmap.jit(shmap.grad(lambda x: f(x).sum()))(arr)
        assert out_g.sharding == NamedSharding(mesh, P(None, unreduced={"x"}))
        assert np.array_equal(np.asarray(shmap.reshard(out_g, P())), 2 * np.arange(8.0))


# ---- transposes, partial auto, partial eval ----


def test_psum_transpose_non_zero_cts(c, m8):
    """test_psum_transpose_non_zero_cts: a psum result the loss does not
    use; at once, in a jit, under grad."""
    f1 = sm(lambda b: (b, lax.psum(b, axis_name="x")), m8, P("x"), (P("x"), P()))
    x1 = np.arange(16.0, dtype=np.float32)
    y, s = f1(x1)
    assert np.array_equal(np.asarray(y), x1)
    assert np.array_equal(np.asarray(s), x1.reshape(8, 2).sum(axis=0))

    def f2(b):
        y, _ = f1(b)
        return y.sum()

    xa = put(c, m8, x1)
    assert np.array_equal(np.asarray(shmap.jit(shmap.grad(f2))(xa)), np.ones(16))
    assert np.array_equal(np.asarray(shmap.grad(f2)(xa)), np.ones(16))


def test_jit_of_shard_map_takes_its_mesh(c, m4):
    """test_psum_transpose_non_zero_cts, test_eager_custom_jvp_basic and
    test_jaxpr_shardings_with_no_outputs call jit / grad of a shard_map on
    jnp arrays of the default device, or on none: JAX runs it on the
    shard_map's mesh."""
    x = np.arange(4.0, dtype=np.float32)
    f = sm(jnp.sin, m4, P("x"), P("x"))
    np.testing.assert_allclose(np.asarray(shmap.jit(f)(x)), np.sin(x), rtol=1e-6)
    g = shmap.grad(lambda v: f(v).sum())(x)
    np.testing.assert_allclose(np.asarray(g), np.cos(x), rtol=1e-6)
    h = shmap.jit(sm(lambda: lax.iota(jnp.dtype("int32"), 4), m4, (), P("x")))
    assert np.array_equal(np.asarray(h()), np.tile(np.arange(4), 4))


def test_partial_auto_axis_index_eager(c):
    """test_partial_auto_axis_index_eager: axis_index over the Manual axis of
    a partial-auto shard_map of no arguments, at once and in a jit (run
    under use_mesh: see test_jit_of_shard_map_takes_its_mesh)."""
    mesh = c.make_mesh((2, 2, 1), ("i", "j", "k"))

    def g():
        return sm(lambda: lax.axis_index("i").reshape((1,)), mesh, (), P("i"),
                  axis_names={"i"}, check_vma=False)()

    out = g()
    with shmap.sharding.use_mesh(mesh):
        expected = shmap.jit(g)()
    assert np.array_equal(np.asarray(out), np.asarray(expected))
    assert np.array_equal(np.asarray(out), np.arange(2))


def test_partial_eval_custom_axis_env(c, m8):
    """test_partial_eval_custom_axis_env: eval_shape of grad of a remat'd
    shard_map whose scan reads axis_index."""
    def f(_):
        _, idx = lax.scan(lambda _, __: (None, lax.axis_index("x")), None, None, length=1)
        return idx

    g = sm(f, m8, P("x"), P("x"))
    xs = np.arange(16.0, dtype=np.float32)
    assert np.array_equal(np.asarray(g(xs)), np.arange(8))
    out = shmap.eval_shape(shmap.grad(lambda x: shmap.remat(g)(x).sum().astype("float32")),
                           put(c, m8, xs))
    assert out.shape == (16,) and out.dtype == np.float32


# ---- PRNG keys ----


def test_prngkeyarray_eager(c, m4):
    """test_prngkeyarray_eager: raw uint32 keys split over the mesh, randint
    of each block's key (numpy keys given to the shard_map: shmap arrays
    have no uint32, so they cannot be device_put first)."""
    rng = shmap.random.PRNGKey(0)
    keys = shmap.random.split(rng, num=4)

    def f(key):
        return shmap.random.randint(key[0], shape=(1, 16), minval=0, maxval=16,
                                    dtype=jnp.int32)

    out = sm(f, m4, (P("x", None),), P("x", None))(keys)
    want = np.concatenate([np.asarray(shmap.random.randint(k, (1, 16), 0, 16)) for k in keys])
    assert np.array_equal(np.asarray(out), want)


def test_sharded_random_bits(c, m4):
    """test_sharded_random_bits (threefry2x32; shmap has no rbg): bits of
    each block's key (the keys given to the shard_map: device_put of a key
    array is refused)."""
    keys = shmap.random.split(shmap.random.key(0), num=4)

    def f(key):
        return shmap.random.bits(key[0], shape=(4,), dtype=jnp.uint8)

    out = sm(f, m4, P("x"), P("x"))(keys)
    want = np.concatenate([np.asarray(shmap.random.bits(k, (4,), jnp.uint8)) for k in keys])
    assert np.array_equal(np.asarray(out), want)


def test_key_array_with_replicated_last_tile_dim(c):
    """test_key_array_with_replicated_last_tile_dim: keys split in a jit,
    sharded over 'i' of a (2, 4) mesh, jnp.array([normal(key)]) per block
    (under use_mesh: see test_jit_of_shard_map_takes_its_mesh)."""
    mesh = c.make_mesh((2, 4), ("i", "j"))

    def f(rng):
        g = sm(lambda r: jnp.array([shmap.random.normal(r[0])]), mesh, P("i"), P("i"),
               check_vma=False)
        return g(shmap.random.split(rng, 4))

    with shmap.sharding.use_mesh(mesh):
        out = shmap.jit(f)(shmap.random.key(0))
    keys = shmap.random.split(shmap.random.key(0), 4)
    want = [float(shmap.random.normal(keys[0])), float(shmap.random.normal(keys[2]))]
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-6)


# ---- replication (vma) checks ----


def test_vma_out_specs_error_check(c):
    """test_vma_out_specs_error_check: an output varying over axes its
    out_spec leaves out."""
    mesh = c.make_mesh((2, 2, 2), ("x", "y", "z"))
    f = sm(lambda x: x * 2, mesh, P("x", "y", "z"), P("x"))
    with pytest.raises(ValueError, match=r".*out_specs is P\('x',\) which implies that the.*"
                       r" output value is only varying across mesh axes \{x\} and not \{y,z\},"
                       r" but it was inferred to be possibly varying over \{x,y,z\}.*"):
        f(np.arange(16, dtype=np.int32).reshape(4, 2, 2))


def test_replication_error_is_jax_value_error(c, m22):
    """The refusal test_scan_rep_rule, test_while_rep_rule and
    test_cond_rep_rule expect: ValueError, 'require replication'."""
    with pytest.raises(ValueError, match="require replication"):
        sm(lambda x: x, m22, P("x"), P(None))(np.arange(4, dtype=np.int32))


def test_functools_partial_rank_error(c, m4):
    """test_functools_partial_rank_error: in_specs P('x', None) for a 1-d
    argument, the function a functools.partial."""
    g = sm(functools.partial(lambda x: x), m4, (P("x", None),), P("x"))
    with pytest.raises(ValueError):
        g(np.arange(4, dtype=np.int32))


NOT_REPLICATED = r"varies over mesh ax"  # shmap's sentence (JAX's: the xfail above)
X = np.arange(4, dtype=np.int32)
IN3 = (P(None), P("x"), P(("x", "y")))


def _sums():
    """x, y, z's sums per device under IN3 on m22: 6 everywhere, per
    x-block, per device."""
    return np.full(4, 6), np.array([1, 1, 5, 5]), np.arange(4)


def test_scan_rep_rule(c, m22):
    """test_scan_rep_rule: a scan rotating carries of different varying axes
    (out_specs one per result: see test_out_specs_one_spec_for_a_tuple)."""
    def f(x, y, z):
        x, y, z = x.sum(), y.sum(), z.sum()

        def body(c_, _):
            c_, *cs = c_
            return (*cs, c_), None
        x = lax.pcast(x, ("x", "y"), to="varying")
        y = lax.pcast(y, "y", to="varying")
        out, _ = lax.scan(body, (x, y, z), None, length=3)
        return [jnp.expand_dims(a, 0) for a in out]

    outs = sm(f, m22, IN3, [P(("x", "y"))] * 3)(X, X, X)
    for o, w in zip(outs, _sums()):  # three turns: back where they started
        assert np.array_equal(np.asarray(o), w)
    for bad in (P("x"), P("y"), P(None)):
        with pytest.raises(shmap.ProgramError, match=NOT_REPLICATED):
            sm(f, m22, IN3, [bad] * 3)(X, X, X)

    def g(x, y, z):
        x, y, z = x.sum(), y.sum(), z.sum()
        out, _ = lax.scan(lambda c_, _: (c_, None), (x, y, z), None, length=1)
        return [jnp.expand_dims(a, 0) for a in out]

    outs = sm(g, m22, IN3, [P(None), P("x"), P(("x", "y"))])(X, X, X)
    for o, w in zip(outs, ([6], [1, 5], [0, 1, 2, 3])):
        assert np.array_equal(np.asarray(o), w)
    with pytest.raises(shmap.ProgramError, match=NOT_REPLICATED):
        sm(g, m22, IN3, [P(None), P(None), P(("x", "y"))])(X, X, X)


def test_while_rep_rule(c, m22):
    """test_while_rep_rule: a while_loop rotating carries of different
    varying axes."""
    def f(x, y, z):
        x, y, z = x.sum(), y.sum(), z.sum()

        def body(c_):
            i, c_, *cs = c_
            return (i + 1, *cs, c_)
        x = lax.pcast(x, ("x", "y"), to="varying")
        y = lax.pcast(y, "y", to="varying")
        _, *out = lax.while_loop(lambda c_: c_[0] < 5, body, (0, x, y, z))
        return [jnp.expand_dims(a, 0) for a in out]

    outs = sm(f, m22, IN3, [P(("x", "y"))] * 3)(X, X, X)
    s = _sums()
    for o, w in zip(outs, (s[2], s[0], s[1])):  # five turns: rotated twice
        assert np.array_equal(np.asarray(o), w)
    for bad in (P("x"), P("y"), P(None)):
        with pytest.raises(shmap.ProgramError, match=NOT_REPLICATED):
            sm(f, m22, IN3, [bad] * 3)(X, X, X)

    def g(x, y, z):
        x, y, z = x.sum(), y.sum(), z.sum()

        def body(c_):
            i, *cs = c_
            return (i + 1, *cs)
        _, *out = lax.while_loop(lambda c_: c_[0] < 1, body, (0, x, y, z))
        return [jnp.expand_dims(a, 0) for a in out]

    outs = sm(g, m22, IN3, [P(None), P("x"), P(("x", "y"))])(X, X, X)
    for o, w in zip(outs, ([6], [1, 5], [0, 1, 2, 3])):
        assert np.array_equal(np.asarray(o), w)
    with pytest.raises(shmap.ProgramError, match=NOT_REPLICATED):
        sm(g, m22, IN3, [P(None), P(None), P(("x", "y"))])(X, X, X)


def test_cond_rep_rule(c, m22):
    """test_cond_rep_rule: cond's result varies over its operands' axes (a
    static predicate, a varying one, pcast branches, Python int branches)."""
    ins = (P("x"), P("y"))
    per_xy = np.array([0, 1, 0, 1, 2, 3, 2, 3])  # x's blocks, over ('x', 'y')

    def f(x, y):
        return lax.cond(True, lambda x, y: x, lambda x, y: x + 1, x, y)

    assert np.array_equal(np.asarray(sm(f, m22, ins, P("x"))(X, X)), X)
    with pytest.raises(shmap.ProgramError, match=NOT_REPLICATED):
        sm(f, m22, ins, P(None))(X, X)

    def f(x, y):
        return lax.cond(True, lambda x, y: lax.pcast(x, "y", to="varying"),
                        lambda x, y: lax.pcast(y, "x", to="varying"), x, y)

    assert np.array_equal(np.asarray(sm(f, m22, ins, P(("x", "y")))(X, X)), per_xy)
    with pytest.raises(shmap.ProgramError, match=NOT_REPLICATED):
        sm(f, m22, ins, P("x"))(X, X)

    def f(x, y):
        return lax.cond(jnp.any(x > 0), lambda x, y: x, lambda x, y: x + 1, x, y)

    assert np.array_equal(np.asarray(sm(f, m22, ins, P("x"))(X, X)), X)  # any() of each block
    with pytest.raises(shmap.ProgramError, match=NOT_REPLICATED):
        sm(f, m22, ins, P(None))(X, X)

    def f(x, y):
        return lax.cond(jnp.any(y > 0), lambda x, y: x, lambda x, y: x + 1, x, y)

    assert np.array_equal(np.asarray(sm(f, m22, ins, P(("x", "y")))(X, X)), per_xy)
    assert np.array_equal(np.asarray(sm(f, m22, ins, P("x"))(X, X)), X)

    def f(a):
        c_ = lax.cond(jnp.any(a), lambda: 1, lambda: 0)
        return jnp.reshape(c_, a.shape)

    mesh = c.make_mesh((2,), ("x",))
    out = sm(f, mesh, P("x"), P("x"))(np.array([True, False]))
    assert np.array_equal(np.asarray(out), [1, 0])


def test_switch_rep_rule(c, m22):
    """test_switch_rep_rule: switch on a replicated index."""
    def f(n, x, y):
        return lax.switch(n, [lambda x, _: x, lambda x, _: x + 1, lambda x, _: x + 2], x, y)

    out = sm(f, m22, (P(), P("x"), P("y")), P("x"))(1, X, X)
    assert np.array_equal(np.asarray(out), X + 1)


# ---- custom rules, axis_index ----


def test_eager_custom_jvp_basic(c, m4):
    """test_eager_custom_jvp_basic: value_and_grad through a shard_map of a
    custom_jvp function: the rule's derivative (3), not the body's (2)."""
    @shmap.custom_jvp
    def foo(x):
        return 2.0 * x

    @foo.defjvp
    def foo_jvp(primals, tangents):
        (x,), (x_dot,) = primals, tangents
        return foo(x), 3.0 * x_dot

    g = sm(foo, m4, (P("x"),), P("x"))
    y, x_bar = shmap.value_and_grad(lambda x: g(x).sum())(put(c, m4, np.arange(4.0)))
    np.testing.assert_allclose(np.asarray(y), 12.0)
    np.testing.assert_allclose(np.asarray(x_bar), 3.0 * np.ones(4))


def test_eager_custom_vjp_basic(c, m4):
    """test_eager_custom_vjp_basic: value_and_grad through a shard_map of a
    custom_vjp function."""
    @shmap.custom_vjp
    def foo(x):
        return 2.0 * x

    foo.defvjp(lambda x: (foo(x), None), lambda _, y_bar: (3.0 * y_bar,))
    g = sm(foo, m4, (P("x"),), P("x"))
    y, x_bar = shmap.value_and_grad(lambda x: g(x).sum())(put(c, m4, np.arange(4.0)))
    np.testing.assert_allclose(np.asarray(y), 12.0)
    np.testing.assert_allclose(np.asarray(x_bar), 3.0 * np.ones(4))


@pytest.mark.parametrize("jit", [True, False])
def test_axis_index_basic(c, m4, jit):
    """test_axis_index_basic: axis_index in a body of no arguments (a jit in it too)."""
    def foo():
        return lax.axis_index("x")[None]

    if jit:
        foo = shmap.jit(foo)
    ans = sm(foo, m4, (), P("x"))()
    assert np.array_equal(np.asarray(ans), np.arange(4))


@pytest.mark.parametrize("jit", [True, False])
def test_axis_index_twoaxes(c, jit):
    """test_axis_index_twoaxes: axis_index of 'i', 'j' and ('i', 'j')
    (out_specs one per result: see test_out_specs_one_spec_for_a_tuple)."""
    def foo():
        out1 = lax.axis_index("i")[None, None]
        out2 = lax.axis_index("j")[None, None]
        out3 = lax.axis_index(("i", "j"))[None, None]
        return out1, out2, out3

    if jit:
        foo = shmap.jit(foo)
    mesh = c.make_mesh((4, 2), ("i", "j"))
    ans1, ans2, ans3 = sm(foo, mesh, (), (P("i", "j"),) * 3)()
    assert np.array_equal(np.asarray(ans1), np.arange(4)[:, None] + np.zeros((4, 2)))
    assert np.array_equal(np.asarray(ans2), np.arange(2)[None, :] + np.zeros((4, 2)))
    assert np.array_equal(np.asarray(ans3), np.arange(8).reshape(4, 2))


def test_axis_index_eager(c, m4):
    """test_axis_index_eager: Python control flow on a replicated value in a
    shard_map called at once, returning a Python float."""
    @functools.partial(shmap.shard_map, mesh=m4, in_specs=(), out_specs=P())
    def foo():
        val = lax.psum(lax.axis_index("x"), "x")
        return 1.0 if val > 0 else -1.0

    assert float(np.asarray(foo())) == 1.0


def test_jaxpr_shardings_with_no_outputs(c):
    """test_jaxpr_shardings_with_no_outputs: iota in a jit of a shard_map of
    no arguments (under use_mesh: see test_jit_of_shard_map_takes_its_mesh);
    arange of the block's length plus an int64 block."""
    mesh = c.make_mesh((4,), ("i",))
    f = shmap.jit(sm(lambda: lax.iota(jnp.dtype("int32"), 4), mesh, (), P("i")))
    with shmap.sharding.use_mesh(mesh):
        assert np.array_equal(np.asarray(f()), np.tile(np.arange(4), 4))
    g = sm(lambda a: jnp.arange(a.shape[0]) + a, mesh, (P("i"),), P("i"))
    a = np.arange(32)
    assert np.array_equal(np.asarray(g(a)), a + np.tile(np.arange(8), 4))


def test_device_put(c):
    """test_device_put: device_put(1) without a device in a body, at once
    and in a jit (with a device: the xfail below)."""
    mesh = c.make_mesh((4,), ("i",))
    f = sm(lambda x: x + shmap.device_put(1), mesh, P("i"), P("i"))
    x = np.arange(32.0, dtype=np.float32)
    assert np.array_equal(np.asarray(f(x)), x + 1)
    assert np.array_equal(np.asarray(shmap.jit(f)(put(c, mesh, x, P("i")))), x + 1)


def test_device_put_with_device(c):
    """test_device_put: with an explicit device, JAX's ValueError at once
    ('... but got device ...') and nothing under jit."""
    mesh = c.make_mesh((4,), ("i",))
    g = sm(lambda x: x + shmap.device_put(1, c.devices()[0]), mesh, P("i"), P("i"))
    x = np.arange(32.0, dtype=np.float32)
    with pytest.raises(ValueError, match="got device"):
        g(x)
    assert np.array_equal(np.asarray(shmap.jit(g)(put(c, mesh, x, P("i")))), x + 1)


def test_returned_out_sharding(c):
    """test_returned_out_sharding: the result's sharding on a (1, 2) mesh."""
    mesh = c.make_mesh((1, 2), ("x", "y"))
    s = NamedSharding(mesh, P("x", "y"))
    inp = c.device_put(np.zeros((2, 2), np.float32), s)
    out = sm(lambda x: x, mesh, P("x", "y"), P("x", "y"))(inp)
    assert out.sharding == s
    assert np.array_equal(np.asarray(out), np.asarray(inp))


def test_post_process_partial_eval_with_scalar_res(c):
    """test_post_process_partial_eval_with_scalar_res: grad through a
    shard_map of no arguments closing over the differentiated scalar."""
    mesh = c.make_mesh((4, 2), ("i", "j"))
    x = put(c, mesh, np.float32(2.0))
    g = shmap.grad(lambda x: sm(lambda: jnp.sin(x), mesh, P(), P())())(x)
    np.testing.assert_allclose(np.asarray(g), np.cos(2.0), rtol=1e-6)
