"""JAX's sharding-in-types tests (jax-ml/jax tests/pjit_test.py, class
ShardingInTypesTest, from test_full_auto_outside_jit to
test_reshape_split_merge_error: auto_axes and explicit_axes outside a jit,
vmap over Explicit shardings, the shardings of iota, broadcast, cumsum,
dynamic slices, random numbers, convolutions, dots and reshapes, unreduced
einsums and JAX's sentences for the shardings it refuses) against numpy and
JAX's expected types and shardings. Where shmap differs, a strict xfail
says how. Runs on the cluster of conftest's c (2 workers x 4 devices)."""
# Not ported:
# - test_shaped_array_input_to_jit_no_sharding: the lowered HLO text only.
# - test_spmd_axis_name_explicit_mode_assert_remove_one_size: the config flag
#   remove_size_one_mesh_axis_from_type, which shmap does not have.
# - test_divisbility_aval_error: core.ShapedArray, a jax internal.
# - test_eval_shape_jitted_fun_cache_hit: tracing-cache counts only.
# - test_convert_element_type_vmap: bfloat16 and lax_internal.
# - test_extended_dtypes: a bfloat16 extended dtype (primal_tangent_dtype).
# (test_compilation_cache_miss_when_devices_change: its cache counts only.)
import math

import numpy as np
import pytest

import shmap
from shmap import P, NamedSharding
from shmap import lax
from shmap import numpy as jnp


@pytest.fixture(scope="module")
def m22(c):
    """A (2, 2) mesh over Explicit axes x and y."""
    return c.make_mesh((2, 2), ("x", "y"))


@pytest.fixture(scope="module")
def m22auto(c):
    """A (2, 2) mesh over Auto axes x and y."""
    return c.make_mesh((2, 2), ("x", "y"), axis_types=(shmap.Auto, shmap.Auto))


@pytest.fixture(scope="module")
def m21(c):
    """A (2, 1) mesh over Explicit axes x and y."""
    return c.make_mesh((2, 1), ("x", "y"))


@pytest.fixture(scope="module")
def m21auto(c):
    """A (2, 1) mesh over Auto axes x and y."""
    return c.make_mesh((2, 1), ("x", "y"), axis_types=(shmap.Auto, shmap.Auto))


@pytest.fixture(scope="module")
def m2(c):
    """A mesh of one Explicit axis 'x' of 2 devices."""
    return c.make_mesh((2,), ("x",))


@pytest.fixture(scope="module")
def m2auto(c):
    """A mesh of one Auto axis 'x' of 2 devices."""
    return c.make_mesh((2,), ("x",), axis_types=(shmap.Auto,))


@pytest.fixture(scope="module")
def m222(c):
    """A (2, 2, 2) mesh over Explicit axes x, y and z."""
    return c.make_mesh((2, 2, 2), ("x", "y", "z"))


@pytest.fixture(scope="module")
def m221(c):
    """A (2, 2, 1) mesh over Explicit axes x, y and z."""
    return c.make_mesh((2, 2, 1), ("x", "y", "z"))


@pytest.fixture(scope="module")
def m42(c):
    """A (4, 2) mesh over Explicit axes x and y."""
    return c.make_mesh((4, 2), ("x", "y"))


def spec(v):
    """The spec of a value's type (a traced value's too)."""
    return shmap.typeof(v).sharding.spec


def vspec(v):
    """The spec of the type of a value of a vmap body (whose typeof's
    .sharding is a bare spec: test_mul_vmap_typeof_sharding)."""
    s = shmap.typeof(v).sharding
    return s.spec if isinstance(s, NamedSharding) else s


def test_full_auto_outside_jit(c, m22):
    """test_full_auto_outside_jit: auto_axes over both axes of a jit
    function, called at once: Auto types inside, the result laid out as
    out_sharding."""
    np_inp = np.arange(16.).reshape(8, 2)
    seen = []

    @shmap.jit
    def f(x):
        y = x * 2
        seen.append(spec(y))
        z = jnp.sin(y)
        seen.append(spec(z))
        a = z @ z.T
        seen.append(spec(a))
        return a

    with shmap.use_mesh(m22):
        arr = shmap.device_put(np_inp, NamedSharding(m22, P("x", "y")))
        out = shmap.auto_axes(f, axes=("x", "y"), out_sharding=P("x", "y"))(arr)
    assert seen == [P(None, None)] * 3
    assert out.sharding == NamedSharding(m22, P("x", "y"))
    z = np.sin(np_inp * 2)
    np.testing.assert_allclose(np.asarray(out), z @ z.T, rtol=1e-12)


def test_full_visible_outside_jit(c, m22auto):
    """test_full_visible_outside_jit: explicit_axes over an Auto mesh,
    called at once: the Explicit types inside."""
    np_inp = np.arange(16.).reshape(8, 2)
    seen = []

    @shmap.jit
    def f(x):
        y = x * 2
        seen.append(spec(y))
        z = jnp.sin(y)
        seen.append(spec(z))
        return z

    with shmap.use_mesh(m22auto):
        arr = shmap.device_put(np_inp, NamedSharding(m22auto, P("x", "y")))
        out = shmap.explicit_axes(f, axes=("x", "y"), in_sharding=P("x", "y"))(arr)
    assert seen == [P("x", "y")] * 2
    assert out.sharding == NamedSharding(m22auto, P("x", "y"))
    np.testing.assert_allclose(np.asarray(out), np.sin(np_inp * 2), rtol=1e-12)


def test_compilation_cache_miss_when_devices_change(c):
    """test_compilation_cache_miss_when_devices_change (its device
    assignments; the cache counts not ported): a jit's result lies on its
    argument's mesh, for a mesh of the same devices in reverse order."""
    mesh1 = c.make_mesh((2, 2), ("x", "y"), axis_types=(shmap.Auto, shmap.Auto))
    devs = c.devices()[:4]
    mesh2 = shmap.Mesh(np.asarray(devs[::-1]).reshape(2, 2), ("x", "y"),
                       axis_types=(shmap.Auto, shmap.Auto))
    np_inp = np.arange(16, dtype=np.int32).reshape(8, 2)
    with shmap.use_mesh(mesh1):
        arr1 = shmap.device_put(np_inp, NamedSharding(mesh1, P("x", "y")))
    with shmap.use_mesh(mesh2):
        arr2 = shmap.device_put(np_inp, NamedSharding(mesh2, P("x", "y")))
    f = shmap.jit(lambda x: x)
    with shmap.use_mesh(mesh1):
        out1 = f(arr1)
    with shmap.use_mesh(mesh2):
        out2 = f(arr2)
    assert list(out1.sharding.mesh.devices.flat) == list(mesh1.devices.flat)
    assert list(out2.sharding.mesh.devices.flat) == list(mesh2.devices.flat)
    assert np.array_equal(np.asarray(out1), np_inp)
    assert np.array_equal(np.asarray(out2), np_inp)


def test_svd(c, m21):
    """test_svd: the 2-norm of a replicated 128x128 matrix (of zeros)."""
    with shmap.use_mesh(m21):
        arr = shmap.device_put(np.zeros([128, 128]), NamedSharding(m21, P(None, None)))
        out = shmap.jit(lambda x: jnp.linalg.norm(x, 2))(arr)
    assert float(np.asarray(out)) == 0.0


@pytest.mark.parametrize("use_jit", [True, False])
def test_mul_vmap(c, m22, use_jit):
    """test_mul_vmap: vmap over the first dimension of P('x', 'y'): the
    example's spec P('y'), the result and the gradient laid out as the
    input."""
    np_inp = np.arange(16.).reshape(8, 2)
    s = NamedSharding(m22, P("x", "y"))
    seen = []

    def f(x):
        seen.append(vspec(x))
        x = x * 2
        seen.append(vspec(x))
        x = x * x
        seen.append(vspec(x))
        return x

    with shmap.use_mesh(m22):
        arr = shmap.device_put(np_inp, s)
        if use_jit:
            f = shmap.jit(f)
        f = shmap.vmap(f)
        want = (np_inp * 2) * (np_inp * 2)
        out = f(arr)
        assert out.sharding == s
        assert np.array_equal(np.asarray(out), want)
        out = shmap.jit(f)(arr)
        assert out.sharding == s
        assert np.array_equal(np.asarray(out), want)

        def g(x):
            return jnp.sum(f(x))

        out = shmap.grad(g)(arr)
        assert out.sharding == arr.sharding
        assert np.array_equal(np.asarray(out), 8 * np_inp)
        out = shmap.jit(shmap.grad(g))(arr)
        assert out.sharding == arr.sharding
    assert set(seen) == {P("y")}


def test_mul_vmap_typeof_sharding(c, m22):
    """test_mul_vmap (its x.aval.sharding.spec in the vmapped body): the
    example's type has a NamedSharding."""
    seen = []

    def f(x):
        seen.append(shmap.typeof(x).sharding.spec)
        return x * 2

    with shmap.use_mesh(m22):
        arr = shmap.device_put(np.arange(16.).reshape(8, 2), P("x", "y"))
        shmap.vmap(f)(arr)
    assert seen == [P("y")]


@pytest.mark.parametrize("use_jit", [True, False])
def test_dot_general_vmap(c, m22, use_jit):
    """test_dot_general_vmap: vmap of an einsum with out_sharding, in_axes
    (0, 1) and out_axes 2."""
    np_inp1 = np.arange(16.).reshape(4, 2, 2)
    np_inp2 = np.arange(16.).reshape(2, 4, 2)

    def f(x, y):
        return jnp.einsum("xy,yz->xz", x, y, out_sharding=P(None, "y"))

    with shmap.use_mesh(m22):
        arr1 = shmap.device_put(np_inp1, NamedSharding(m22, P("x", None, "y")))
        arr2 = shmap.device_put(np_inp2, NamedSharding(m22, P(None, "x", "y")))
        if use_jit:
            f = shmap.jit(f)
        out = shmap.vmap(f, in_axes=(0, 1), out_axes=2)(arr1, arr2)
    assert out.shape == (2, 2, 4)
    assert out.sharding == NamedSharding(m22, P(None, "y", "x"))
    want = np.einsum("bxy,ybz->xzb", np_inp1, np_inp2)
    assert np.array_equal(np.asarray(out), want)


def test_reshape_vmap(c, m22):
    """test_reshape_vmap: lax.reshape with out_sharding under vmap over
    in_axes=1."""
    np_inp = np.arange(16).reshape(2, 8)
    seen = []

    def f(x):
        y = lax.reshape(x, (1, 2), out_sharding=P(None, "y"))
        y = y * 2
        seen.append(vspec(y))
        return y

    with shmap.use_mesh(m22):
        arr = shmap.device_put(np_inp, NamedSharding(m22, P(None, "x")))
        out = shmap.jit(shmap.vmap(f, in_axes=1))(arr)
    assert seen == [P(None, "y")]
    assert out.shape == (8, 1, 2)
    assert out.sharding == NamedSharding(m22, P("x", None, "y"))
    assert np.array_equal(np.asarray(out), (np_inp.T * 2).reshape(8, 1, 2))


@pytest.mark.parametrize("use_jit", [True, False])
def test_shit_vmap_error_check(c, m22, use_jit):
    """test_shit_vmap_error_check: the mapped dimensions of vmap's
    arguments sharded over different axes: JAX's ValueError (its
    spmd_axis_name case first: test_spmd_axis_name_explicit_mode_assert)."""
    np_inp = np.arange(16, dtype=np.int32).reshape(8, 2)

    def f(x, y):
        return x @ y

    if use_jit:
        f = shmap.jit(f)
    with shmap.use_mesh(m22):
        arr = shmap.device_put(np_inp, NamedSharding(m22, P("x", None)))
        arr2 = shmap.device_put(np_inp.T, NamedSharding(m22, P(None, "y")))
        with pytest.raises(ValueError, match="Only one of spmd_axis_name or arrays sharded on"):
            shmap.vmap(f, spmd_axis_name="y")(arr, arr)
        with pytest.raises(ValueError, match="Mapped away dimension of inputs passed to vmap "
                           "should be sharded the same"):
            shmap.vmap(f, in_axes=(0, 1))(arr, arr2)
        with pytest.raises(ValueError, match="Mapped away dimension of inputs passed to vmap "
                           "should be sharded the same"):
            shmap.jit(shmap.vmap(f, in_axes=(0, 1)))(arr, arr2)


@pytest.mark.parametrize("spmd_axis_name", ["x", "y"])
def test_spmd_axis_name_explicit_mode_assert(c, m22, spmd_axis_name):
    """test_spmd_axis_name_explicit_mode_assert: vmap with spmd_axis_name
    the batch's own axis runs; another axis is JAX's ValueError."""
    np_inp = np.arange(16, dtype=np.int32).reshape(8, 2)

    with shmap.use_mesh(m22):
        arr = shmap.device_put(np_inp, NamedSharding(m22, P("x", "y")))

        @shmap.jit
        def f(x):
            return shmap.vmap(lambda x: x * 2, spmd_axis_name=spmd_axis_name)(x)

        if spmd_axis_name == "x":
            out = f(arr)
            assert out.sharding == NamedSharding(m22, P("x", "y"))
            assert np.array_equal(np.asarray(out), np_inp * 2)
        else:
            with pytest.raises(ValueError, match="Only one of spmd_axis_name or arrays "
                               "sharded on.*spmd_axis_name"):
                f(arr)


def test_histogram_sharded_error(c, m2):
    """test_histogram_sharded_error: a histogram with weights of a sharded
    array: JAX's ShardingTypeError (shmap's InvalidArgument)."""
    with shmap.use_mesh(m2):
        arr = shmap.device_put(jnp.arange(64, dtype=jnp.float32).reshape(16, 4), P("x", None))

        @shmap.jit
        def f(x):
            return jnp.histogram(x.flatten(), bins=4, range=(0, 8),
                                 weights=jnp.ones_like(x.flatten(), dtype=jnp.float32))

        with pytest.raises(shmap.InvalidArgument):
            f(arr)


def test_unmapped_last_vmap(c, m2):
    """test_unmapped_last_vmap: a result that does not depend on the batch,
    out_axes=-1: the batch's sharding on the last dimension."""
    with shmap.use_mesh(m2):
        arr = shmap.device_put(np.arange(8, dtype=np.int32), NamedSharding(m2, P("x")))
        out = shmap.vmap(lambda x: jnp.zeros((4,)), out_axes=-1)(arr)
    assert out.shape == (4, 8)
    assert np.array_equal(np.asarray(out), np.zeros((4, 8)))
    assert out.sharding == NamedSharding(m2, P(None, "x"))


def test_shmap_close_over(c, m2auto):
    """test_shmap_close_over: a shard_map with no arguments closing over an
    Array of the context mesh, at once and in a jit."""
    with shmap.use_mesh(m2auto):
        const = jnp.arange(8)

        def f():
            return const * 2

        shmap_f = shmap.shard_map(f, mesh=m2auto, in_specs=(), out_specs=P("x"))
        want = np.tile(np.arange(8) * 2, 2)
        assert np.array_equal(np.asarray(shmap_f()), want)
        assert np.array_equal(np.asarray(shmap.jit(shmap_f)()), want)


def test_shmap_close_over_partial_auto(c, m22auto):
    """test_shmap_close_over_partial_auto: the same, Manual over x only (its
    jaxpr's reshard: not ported)."""
    with shmap.use_mesh(m22auto):
        const = jnp.arange(8)

        def f():
            return const * 2

        shmap_f = shmap.shard_map(f, mesh=m22auto, in_specs=(), out_specs=P("x"),
                                  axis_names={"x"})
        out = shmap.jit(shmap_f)()
    assert np.array_equal(np.asarray(out), np.tile(np.arange(8) * 2, 2))


def test_wsc_error(c, m21):
    """test_wsc_error: with_sharding_constraint as an assert over Explicit
    axes (refused with JAX's sentence; its AssertionError type:
    test_wsc_error_assertion_type), then P.UNCONSTRAINED over Explicit
    axes: JAX's ValueError."""
    with shmap.use_mesh(m21):
        f = shmap.jit(lambda x: lax.with_sharding_constraint(x, P("x")))
        with pytest.raises(shmap.InvalidArgument, match="`with_sharding_constraint` acts as "
                           "an assert when all axes of mesh are of type `Explicit`"):
            f(shmap.device_put(np.arange(8, dtype=np.int32), P()))
        out = f(shmap.device_put(np.arange(8, dtype=np.int32), P("x")))
    assert np.array_equal(np.asarray(out), np.arange(8))
    with pytest.raises(ValueError, match="P.*cannot contain `P.UNCONSTRAINED` when no mesh "
                       "axis_types are `Auto`"):
        NamedSharding(m21, P(P.UNCONSTRAINED))


def test_wsc_error_assertion_type(c, m21):
    """test_wsc_error (its AssertionError): with_sharding_constraint acts as
    an assert over Explicit axes."""
    with shmap.use_mesh(m21):
        f = shmap.jit(lambda x: lax.with_sharding_constraint(x, P("x")))
        with pytest.raises(AssertionError, match="`with_sharding_constraint` acts as an "
                           "assert when all axes of mesh are of type `Explicit`"):
            f(shmap.device_put(np.arange(8, dtype=np.int32), P()))


@pytest.mark.xfail(strict=True, reason="a bare spec as an einsum's out_sharding with no "
                   "context mesh is taken over the arguments' mesh, where JAX raises "
                   "ValueError")
def test_pspec_einsum_no_context_mesh(c):
    """test_pspec_einsum_no_context_mesh: an einsum's out_sharding a bare
    spec with no context mesh: JAX's ValueError."""
    mesh = c.make_mesh((1, 1), ("x", "y"))
    np_inp = np.arange(16, dtype=np.int32).reshape(8, 2)
    arr = shmap.device_put(np_inp, NamedSharding(mesh, P("x", "y")))
    arr2 = shmap.device_put(np_inp.T, NamedSharding(mesh, P("y", None)))

    @shmap.jit
    def f(x, y):
        return jnp.einsum("xy,yz->xz", x, y, out_sharding=P("x", "y"))

    with pytest.raises(ValueError, match="Using PartitionSpec when.*not under a mesh "
                       "context.*is not allowed"):
        f(arr, arr2)


def test_error_on_canonicalize_under_auto_mode(c, m21auto):
    """test_error_on_canonicalize_under_auto_mode: an einsum's out_sharding
    naming Auto axes: JAX's ValueError."""
    np_inp = np.arange(16, dtype=np.int32).reshape(8, 2)
    with shmap.use_mesh(m21auto):
        arr = shmap.device_put(np_inp, NamedSharding(m21auto, P("x", "y")))
        arr2 = shmap.device_put(np_inp.T, NamedSharding(m21auto, P("y", None)))

        @shmap.jit
        def f(x, y):
            return jnp.einsum("xy,yz->xz", x, y,
                              out_sharding=NamedSharding(m21auto, P("x", "y")))

        with pytest.raises(ValueError, match="PartitionSpec passed to einsum cannot contain "
                           "axis names.*Auto.*Manual"):
            f(arr, arr2)


def test_broadcasted_iota_mix_axes(c):
    """test_broadcasted_iota_mix_axes: broadcasted_iota laid out over two
    Explicit axes of a mesh whose first axis is Auto."""
    mesh = c.make_mesh((2, 2, 2), ("x", "y", "z"),
                       axis_types=(shmap.Auto, shmap.Explicit, shmap.Explicit))
    yz_sharding = NamedSharding(mesh, P(("y", "z"), None))
    seen = []

    @shmap.jit
    def iota():
        out = lax.broadcasted_iota(dtype=jnp.int32, shape=(16, 24), dimension=1,
                                   out_sharding=yz_sharding)
        seen.append(spec(out))
        return out

    with shmap.use_mesh(mesh):
        out = iota()
    assert seen == [P(("y", "z"), None)]
    assert out.sharding == yz_sharding
    assert np.array_equal(np.asarray(out), np.broadcast_to(np.arange(24), (16, 24)))


def test_broadcast_to(c, m222):
    """test_broadcast_to: jnp.broadcast_to with out_sharding."""
    seen = []
    with shmap.use_mesh(m222):
        x = shmap.device_put(np.arange(24, dtype=np.int32).reshape((1, 24)),
                             P(None, ("y", "z")))

        @shmap.jit
        def f(x):
            out = jnp.broadcast_to(x, (8, 24), out_sharding=P("x", ("y", "z")))
            seen.append(spec(out))
            return out

        out = f(x)
    assert seen == [P("x", ("y", "z"))]
    assert out.sharding == NamedSharding(m222, P("x", ("y", "z")))
    assert np.array_equal(np.asarray(out), np.broadcast_to(np.arange(24), (8, 24)))


def test_cumsum(c, m2):
    """test_cumsum: cumsum of a replicated array, flattened; and along an
    unsharded dimension of a sharded one."""
    np_inp = np.arange(16, dtype=np.int32).reshape(8, 2)
    seen = []
    with shmap.use_mesh(m2):
        arr = shmap.device_put(np_inp, NamedSharding(m2, P()))
        out = shmap.jit(lambda x: jnp.cumsum(x))(arr)
        assert np.array_equal(np.asarray(out), np.cumsum(np_inp))
        assert out.sharding == NamedSharding(m2, P(None))

        @shmap.jit
        def f(x):
            x = jnp.expand_dims(x, 1)
            seen.append(spec(x))
            out = jnp.cumsum(x, axis=1)
            seen.append(spec(out))
            return out

        out = f(shmap.device_put(np.arange(8, dtype=np.int32), P("x")))
    assert seen == [P("x", None)] * 2
    assert out.sharding == NamedSharding(m2, P("x", None))
    assert np.array_equal(np.asarray(out), np.arange(8)[:, None])


def test_cumsum_sharded(c, m2):
    """test_cumsum_sharded: cumsum along a sharded dimension, and of a
    sharded array flattened: JAX's ShardingTypeError sentences (shmap's
    InvalidArgument)."""
    np_inp = np.arange(16, dtype=np.int32).reshape(2, 8)
    f = shmap.jit(lambda x: jnp.cumsum(x, axis=0))
    g = shmap.jit(lambda x: jnp.cumsum(x))
    with shmap.use_mesh(m2):
        arr = shmap.device_put(np_inp, NamedSharding(m2, P("x", None)))
        with pytest.raises(shmap.InvalidArgument, match="Input should be unsharded over the "
                           "axis being reduced"):
            f(arr)
        arr = shmap.device_put(np_inp, NamedSharding(m2, P(None, "x")))
        out = f(arr)
        assert out.sharding == NamedSharding(m2, P(None, "x"))
        assert np.array_equal(np.asarray(out), np.cumsum(np_inp, axis=0))
        with pytest.raises(shmap.InvalidArgument, match="The input should be fully "
                           "replicated"):
            g(arr)


def test_device_put_under_set_mesh(c, m22auto):
    """test_device_put_under_set_mesh: device_put of an Array and of a numpy
    array under the mesh, then to another sharding."""
    x = jnp.zeros((4, 4), dtype=jnp.int32)
    x_np = np.zeros((4, 4), dtype=np.int32)
    s = NamedSharding(m22auto, P("x", "y"))
    with shmap.use_mesh(m22auto):
        y = shmap.device_put(x, s)
        assert np.array_equal(np.asarray(y), np.asarray(x))
        assert y.sharding == s
        y2 = shmap.device_put(x_np, s)
        assert np.array_equal(np.asarray(y2), x_np)
        assert y2.sharding == s
        s2 = NamedSharding(m22auto, P("x"))
        z = shmap.device_put(y, s2)
        assert np.array_equal(np.asarray(z), x_np)
        assert z.sharding == s2


@pytest.mark.parametrize("sharded_inp", [True, False])
def test_wsc_pspec_set_mesh(c, m22auto, sharded_inp):
    """test_wsc_pspec_set_mesh: with_sharding_constraint with a bare spec
    under the mesh, at once and in a jit (its jaxpr's abstract mesh: not
    ported)."""
    np_inp = np.zeros((4, 4), dtype=np.int32)
    arr = shmap.device_put(np_inp, NamedSharding(m22auto, P())) if sharded_inp else np_inp
    with shmap.use_mesh(m22auto):
        out = shmap.with_sharding_constraint(arr, P("x", "y"))
        assert np.array_equal(np.asarray(out), np_inp)
        assert out.sharding == NamedSharding(m22auto, P("x", "y"))
        f = shmap.jit(lambda x: shmap.with_sharding_constraint(x, P("x", "y")))
        out = f(arr)
        assert np.array_equal(np.asarray(out), np_inp)
        assert out.sharding == NamedSharding(m22auto, P("x", "y"))
        arr2 = shmap.device_put(np_inp, NamedSharding(m22auto, P("x")))
        out2 = f(arr2)
        assert np.array_equal(np.asarray(out2), np_inp)
        assert out2.sharding == NamedSharding(m22auto, P("x", "y"))


def test_axes_api_error_manual_to_auto_explicit(c, m21auto):
    """test_axes_api_error_manual_to_auto_explicit: auto_axes in a
    shard_map body: JAX's NotImplementedError."""
    def g(x):
        return shmap.auto_axes(lambda a: a * 2, axes=("x", "y"), out_sharding=P("x", "y"))(x)

    with shmap.use_mesh(m21auto):
        with pytest.raises(NotImplementedError, match="Going from `Manual`.*to.*`Auto`.*"
                           "`Explicit`"):
            shmap.jit(shmap.shard_map(g, mesh=m21auto, in_specs=P("x", "y"),
                                      out_specs=P("x", "y")))(
                np.arange(16, dtype=np.int32).reshape(8, 2))


def test_auto_axes_numpy_array(c, m2):
    """test_auto_axes_numpy_array: auto_axes of a jit function given a numpy
    array: every axis Auto inside, the result laid out as out_sharding."""
    seen = []

    @shmap.jit
    def f(x):
        seen.append(shmap.typeof(x).sharding.mesh.axis_types)
        return x * 2

    with shmap.use_mesh(m2):
        out = shmap.auto_axes(f, out_sharding=P("x"))(np.arange(8, dtype=np.int32))
    assert out.sharding == NamedSharding(m2, P("x"))
    assert np.array_equal(np.asarray(out), np.arange(8) * 2)
    assert seen == [(shmap.Auto,)]


@pytest.mark.parametrize("from_dtype,to_dtype", [
    (np.float32, np.int32), (np.int32, np.float32), (np.float64, np.int64)])
@pytest.mark.parametrize("shape_and_spec", [((), P()), ((2,), P("x")), ((2, 4), P("x", "y"))])
def test_bitcast_convert_type(c, m22, from_dtype, to_dtype, shape_and_spec):
    """test_bitcast_convert_type (the dtypes shmap has, of one width): the
    result's shape, dtype and sharding the input's."""
    shape, sp = shape_and_spec
    x = np.arange(math.prod(shape), dtype=from_dtype).reshape(shape)
    seen = []

    @shmap.jit
    def f(x):
        out = lax.bitcast_convert_type(x, to_dtype)
        seen.append((out.shape, spec(out)))
        return out

    with shmap.use_mesh(m22):
        out = f(shmap.device_put(x, NamedSharding(m22, sp)))
    assert seen == [(shape, sp)]
    assert out.dtype == to_dtype and out.shape == shape
    assert out.sharding == NamedSharding(m22, sp)
    assert np.array_equal(np.asarray(out), x.view(to_dtype))


def test_dynamic_slice(c, m2):
    """test_dynamic_slice: dynamic_slice_in_dim of a sharded array keeps
    its sharding, as its gradient does."""
    np_inp = np.arange(16., dtype=np.float32)
    s = NamedSharding(m2, P("x"))
    seen = []

    @shmap.jit
    def f(x):
        y = lax.dynamic_slice_in_dim(x, jnp.array(1, dtype=np.int32), 2)
        seen.append(spec(y))
        return y

    def g(x):
        return jnp.sum(f(x))

    with shmap.use_mesh(m2):
        arr = shmap.device_put(np_inp, s)
        out = f(arr)
        assert out.sharding == s
        assert np.array_equal(np.asarray(out), np_inp[1:3])
        want = np.zeros(16, np.float32)
        want[1:3] = 1
        out = shmap.jit(shmap.grad(g))(arr)
        assert out.sharding == arr.sharding
        assert np.array_equal(np.asarray(out), want)
        out = shmap.grad(g)(arr)
        assert out.sharding == arr.sharding
    assert seen[0] == P("x")


def test_gather_with_full_slice_in_index_start_map(c, m22):
    """test_gather_with_full_slice_in_index_start_map: vmap of a
    dynamic_slice whole along a sharded dimension."""
    np_inp = np.arange(32, dtype=np.float32).reshape(2, 4, 4)
    s = NamedSharding(m22, P("x", "y", None))
    seen = []

    @shmap.jit
    @shmap.vmap
    def f(x):
        zero = jnp.array(0, dtype=jnp.int32)
        y = lax.dynamic_slice(x, (zero, zero), (4, 1))
        seen.append(vspec(y))
        return y

    def g(x):
        return jnp.sum(f(x))

    with shmap.use_mesh(m22):
        arr = shmap.device_put(np_inp, s)
        out = f(arr)
        assert out.sharding == s
        assert np.array_equal(np.asarray(out), np_inp[:, :, :1])
        want = np.zeros_like(np_inp)
        want[:, :, 0] = 1
        out = shmap.jit(shmap.grad(g))(arr)
        assert out.sharding == arr.sharding
        assert np.array_equal(np.asarray(out), want)
        out = shmap.grad(g)(arr)
        assert out.sharding == arr.sharding
    assert seen[0] == P("y", None)


def test_dynamic_update_slice(c, m2):
    """test_dynamic_update_slice: dynamic_update_slice of sharded arrays
    keeps the operand's sharding, as its gradient does."""
    seen = []

    @shmap.jit
    def f(arr, update):
        y = lax.dynamic_update_slice(arr, update, (3,))
        seen.append(spec(y))
        return y

    def g(x, y):
        return f(x, y).sum()

    with shmap.use_mesh(m2):
        arr = shmap.device_put(np.arange(16., dtype=np.float32), P("x"))
        update = shmap.device_put(np.arange(8., dtype=np.float32), P("x"))
        out = f(arr, update)
        assert out.sharding == NamedSharding(m2, P("x"))
        want = np.arange(16., dtype=np.float32)
        want[3:11] = np.arange(8.)
        assert np.array_equal(np.asarray(out), want)
        out = shmap.jit(shmap.grad(g))(arr, update)
        assert out.sharding == arr.sharding
        want = np.ones(16, np.float32)
        want[3:11] = 0
        assert np.array_equal(np.asarray(out), want)
        out = shmap.grad(g)(arr, update)
        assert out.sharding == arr.sharding
    assert seen[0] == P("x")


def test_auto_axes_computation_follows_data(c, m2):
    """test_auto_axes_computation_follows_data: auto_axes with no context
    mesh, on an Array's mesh."""
    s = NamedSharding(m2, P("x"))
    arr = shmap.device_put(np.arange(8, dtype=np.int32), s)
    out = shmap.auto_axes(shmap.jit(lambda x: x * 2), out_sharding=s)(arr)
    assert out.sharding == s
    assert np.array_equal(np.asarray(out), np.arange(8) * 2)


def test_scan_unroll(c, m22):
    """test_scan_unroll: a scan with unroll=2 over rows sharded over y."""
    np_inp = np.arange(64, dtype=np.float32).reshape(8, 8)

    @shmap.jit
    def f(carry, xs):
        def body(carry, x):
            return carry + x, x
        return lax.scan(body, carry, xs, unroll=2)

    with shmap.use_mesh(m22):
        arr = shmap.device_put(np_inp, NamedSharding(m22, P(None, "y")))
        carry = jnp.ones((8,), dtype=jnp.float32, out_sharding=P("y"))
        out, ys = f(carry, arr)
    assert np.array_equal(np.asarray(out), 1 + np_inp.sum(0))
    assert np.array_equal(np.asarray(ys), np_inp)


def test_reshard_with_np_array(c, m2):
    """test_reshard_with_np_array: reshard of a numpy array, at once and in
    a jit."""
    with shmap.use_mesh(m2):
        out = shmap.reshard(np.arange(8), P("x"))
        assert out.sharding == NamedSharding(m2, P("x"))
        out = shmap.jit(lambda x: shmap.reshard(x, P("x")))(np.arange(8))
        assert out.sharding == NamedSharding(m2, P("x"))
    assert np.array_equal(np.asarray(out), np.arange(8))


def test_set_mesh(c, m2):
    """test_set_mesh: set_mesh, then reshard with a bare spec and
    get_mesh."""
    try:
        shmap.set_mesh(m2)
        out = shmap.reshard(np.arange(8), P("x"))
        assert out.sharding == NamedSharding(m2, P("x"))
        assert shmap.sharding.get_mesh() == m2
    finally:
        shmap.set_mesh(None)


def test_auto_axes_late_bind(c, m2):
    """test_auto_axes_late_bind: out_sharding given at the call."""
    @shmap.auto_axes
    def f(x):
        return x * 2

    with shmap.use_mesh(m2):
        out = f(np.arange(8, dtype=np.int32), out_sharding=P("x"))
    assert out.sharding == NamedSharding(m2, P("x"))
    assert np.array_equal(np.asarray(out), np.arange(8) * 2)


def test_explicit_axes_late_bind(c, m2auto):
    """test_explicit_axes_late_bind: in_sharding given at the call."""
    @shmap.explicit_axes
    def f(x):
        return x * 2

    with shmap.use_mesh(m2auto):
        out = f(np.arange(8, dtype=np.int32), in_sharding=P("x"))
    assert out.sharding == NamedSharding(m2auto, P("x"))
    assert np.array_equal(np.asarray(out), np.arange(8) * 2)


@pytest.mark.xfail(strict=True, reason="shmap.lax has no rng_bit_generator")
def test_rng_bit_generator(c, m2):
    """test_rng_bit_generator: its state replicated, its bits laid out as
    out_sharding, at once and in a jit alike."""
    seen = []

    def f(key):
        out = lax.rng_bit_generator(key, shape=(4, 8), out_sharding=P("x"))
        seen.append((spec(out[0]), spec(out[1])))
        return out

    key = np.array((1, 2, 3, 4)).astype(np.uint32)
    with shmap.use_mesh(m2):
        out1 = f(key)
        out2 = shmap.jit(f)(key)
    assert seen[-1] == (P(None), P("x", None))
    assert out1[0].shape == (4,) and out1[1].shape == (4, 8)
    assert out2[0].sharding == NamedSharding(m2, P())
    assert out2[1].sharding == NamedSharding(m2, P("x", None))
    assert out1[0].sharding == out2[0].sharding and out1[1].sharding == out2[1].sharding
    assert np.array_equal(np.asarray(out1[0]), np.asarray(out2[0]))
    assert np.array_equal(np.asarray(out1[1]), np.asarray(out2[1]))


def test_fold_in(c, m2):
    """test_fold_in: fold_in of a replicated key in a jit: its key_data
    typed P(None) inside, the key returned replicated (P()), its data
    fold_in's on the host."""
    seen = []

    @shmap.jit
    def f(key):
        f1 = shmap.random.fold_in(key, 1)
        seen.append(spec(shmap.random.key_data(f1)))
        return f1

    want = shmap.random.key_data(shmap.random.fold_in(shmap.random.key(72), 1))
    with shmap.use_mesh(m2):
        key = shmap.device_put(shmap.random.key(72), NamedSharding(m2, P()))
        out = f(key)
    assert seen == [P(None)]
    assert out.sharding == NamedSharding(m2, P())
    assert np.array_equal(np.asarray(shmap.random.key_data(out)), np.asarray(want))


def test_fold_in_device_put(c, m2):
    """test_fold_in (its key placed by device_put, replicated)."""
    f = shmap.jit(lambda key: shmap.random.fold_in(key, 1))
    with shmap.use_mesh(m2):
        key = shmap.device_put(shmap.random.key(72), NamedSharding(m2, P()))
        out = f(key)
    assert out.sharding == NamedSharding(m2, P())


_RANDOM = [
    ("bits", lambda key, **kw: shmap.random.bits(key, shape=(8, 12), **kw), P("x", "y")),
    ("uniform", lambda key, **kw: shmap.random.uniform(key, shape=(8, 12), **kw), P("x", "y")),
    ("normal", lambda key, **kw: shmap.random.normal(key, shape=(8, 12), **kw), P("x", "y")),
    ("gumbel", lambda key, **kw: shmap.random.gumbel(key, shape=(8, 12), **kw), P("x", "y")),
    ("randint", lambda key, **kw: shmap.random.randint(key, shape=(8, 12), minval=0, maxval=10,
                                                       **kw), P("x", "y")),
    ("permutation_1d", lambda key, **kw: shmap.random.permutation(key, x=8, **kw), P("x")),
    ("permutation_2d", lambda key, **kw: shmap.random.permutation(
        key, x=np.arange(8 * 12).reshape(8, 12), **kw), P("x", "y")),
]


@pytest.mark.parametrize("name,fun,out_spec", _RANDOM, ids=[r[0] for r in _RANDOM])
def test_random_functions(c, m22, name, fun, out_spec):
    """test_random_functions: random draws from a key passed to a jit, laid
    out as out_sharding (the lowered text: not ported); the values the
    host's."""
    seen = []

    @shmap.jit
    def f(key):
        out = fun(key, out_sharding=out_spec)
        seen.append(spec(out))
        return out

    key = shmap.random.key(1)
    with shmap.use_mesh(m22):
        out = f(key)
    assert seen == [out_spec]
    assert out.sharding == NamedSharding(m22, out_spec)
    want = np.asarray(fun(key))
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-5, atol=1e-6)


def test_random_truncated_normal(c, m22):
    """test_random_truncated_normal: a traced lower bound, the draw laid out
    as out_sharding."""
    seen = []

    @shmap.jit
    def f(key, lower):
        out = shmap.random.truncated_normal(key, lower, 2., shape=(8, 12),
                                            out_sharding=P("x", "y"))
        seen.append(spec(out))
        return out

    with shmap.use_mesh(m22):
        out = f(shmap.random.key(1), -1.)
    assert seen == [P("x", "y")]
    assert out.sharding == NamedSharding(m22, P("x", "y"))
    v = np.asarray(out)
    assert ((v >= -1) & (v <= 2)).all()


def test_random_bernoulli(c, m22):
    """test_random_bernoulli: bernoulli draws laid out as out_sharding."""
    seen = []

    @shmap.jit
    def f(key):
        out = shmap.random.bernoulli(key, shape=(8, 12), out_sharding=P("x", "y"))
        seen.append(spec(out))
        return out

    key = shmap.random.key(1)
    with shmap.use_mesh(m22):
        out = f(key)
    assert seen == [P("x", "y")]
    assert out.sharding == NamedSharding(m22, P("x", "y"))
    assert np.array_equal(np.asarray(out), np.asarray(shmap.random.bernoulli(key, shape=(8, 12))))


def test_random_normal_wo_mesh_context_error(c, m22):
    """test_random_normal_wo_mesh_context_error: a draw laid out over a
    NamedSharding in a jit of no arrays and no context mesh: JAX's
    ValueError."""
    s = NamedSharding(m22, P("x", "y"))

    @shmap.jit
    def f(key):
        return shmap.random.normal(key, shape=(8, 12), out_sharding=s)

    with pytest.raises(ValueError, match="Length of device assignment.*is not equal to the "
                       "size of the mesh"):
        f(shmap.random.key(1))


def test_random_normal_wo_mesh_context(c, m22):
    """test_random_normal_wo_mesh_context: the same, added to an Array of
    that mesh."""
    s = NamedSharding(m22, P("x", "y"))
    seen = []

    @shmap.jit
    def f(arr, key):
        out = shmap.random.normal(key, shape=(8, 12), out_sharding=s)
        seen.append(spec(out))
        return arr + out

    key = shmap.random.key(1)
    np_inp = np.arange(8 * 12.).reshape(8, 12)
    out = f(shmap.device_put(np_inp, s), key)
    assert seen == [P("x", "y")]
    assert out.sharding == NamedSharding(m22, P("x", "y"))
    want = np_inp + np.asarray(shmap.random.normal(key, shape=(8, 12)))
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-6)


def test_auto_axes_no_context_mesh(c, m22):
    """test_auto_axes_no_context_mesh: auto_axes over x with a
    NamedSharding, no context mesh, in a jit and at once."""
    np_inp = np.arange(16.).reshape(8, 2)
    s = NamedSharding(m22, P("x", "y"))
    arr = shmap.device_put(np_inp, s)
    seen = []

    @shmap.auto_axes(axes="x", out_sharding=NamedSharding(m22, P("x", "y")))
    def h(y):
        seen.append(spec(y))
        z = jnp.sin(y)
        seen.append(spec(z))
        return z

    out = shmap.jit(h)(arr)
    assert out.sharding == NamedSharding(m22, P("x", "y"))
    out = h(arr)
    assert out.sharding == NamedSharding(m22, P("x", "y"))
    np.testing.assert_allclose(np.asarray(out), np.sin(np_inp), rtol=1e-12)
    assert set(seen) == {P(None, "y")}


def test_scan_with_random_key_inside_jit(c):
    """test_scan_with_random_key_inside_jit: a scan whose carry is a batch
    of keys, fold_in under vmap, on numpy and on a sharded input."""
    mesh = c.make_mesh((2,), ("x",), axis_types=(shmap.Auto,))
    sharding = NamedSharding(mesh, P(None, "x"))

    @shmap.jit
    def scan(xs):
        def step(carry, x):
            next_carry = shmap.vmap(shmap.random.fold_in)(carry, x)
            next_carry = jnp.where(x % 2 == 0, carry, next_carry)
            return next_carry, None
        rng = jnp.broadcast_to(shmap.random.key(0), xs.shape[1:])
        rng, _ = lax.scan(step, rng, xs)
        return rng

    xs = np.arange(8, dtype=np.int32).reshape(2, 4)
    out1 = scan(xs)
    out2 = scan(shmap.device_put(xs, sharding))
    assert np.array_equal(np.asarray(shmap.random.key_data(out1)),
                          np.asarray(shmap.random.key_data(out2)))


def test_select_batch(c, m22):
    """test_select_batch: vmap of an indexing .at[b].get with out_sharding,
    the batch sharded over x and y."""
    y_sharding = NamedSharding(m22, P("y", None))
    xy_sharding = NamedSharding(m22, P("x", "y", None))
    out_s = NamedSharding(m22, P("x", "y", None, None))
    seen = []

    def select(a, b):
        return a.at[b].get(out_sharding=y_sharding)

    @shmap.jit
    def vmap_select(batch_a, batch_b):
        out = shmap.vmap(select)(batch_a, batch_b)
        seen.append(spec(out))
        return out

    with shmap.use_mesh(m22):
        batch_a = shmap.device_put(jnp.ones((4, 2, 3), dtype=jnp.float32), xy_sharding)
        batch_b = shmap.device_put(jnp.ones((4, 2, 2), dtype=jnp.int32), xy_sharding)
        out = vmap_select(batch_a, batch_b)
    assert seen == [out_s.spec]
    assert out.sharding == out_s
    assert np.array_equal(np.asarray(out), np.ones((4, 2, 2, 3)))


def test_where_vmap(c, m22):
    """test_where_vmap: vmap of jnp.where keeps the batch's sharding."""
    xy_sharding = NamedSharding(m22, P("x", "y", None))
    seen = []

    @shmap.jit
    def vmap_where(batch_a, batch_b):
        out = shmap.vmap(lambda a, b: jnp.where(b, a, 0))(batch_a, batch_b)
        seen.append(spec(out))
        return out

    with shmap.use_mesh(m22):
        batch_a = shmap.device_put(jnp.ones((4, 2, 3), dtype=jnp.float32), xy_sharding)
        batch_b = shmap.device_put(jnp.ones((4, 2, 3), dtype=jnp.bool_), xy_sharding)
        out = vmap_where(batch_a, batch_b)
    assert seen == [xy_sharding.spec]
    assert out.sharding == xy_sharding
    assert np.array_equal(np.asarray(out), np.ones((4, 2, 3)))


def test_jnp_repeat(c, m2):
    """test_jnp_repeat: repeat in a jit and of a range first, then with
    numpy repeats per entry of a numpy array, of a replicated Array and of a
    sharded one with out_sharding."""
    with shmap.use_mesh(m2):
        a = shmap.device_put(jnp.eye(16).reshape(16, 16), P("x"))
        out = shmap.jit(lambda x: jnp.repeat(x, 3, axis=-1))(a)
        assert np.array_equal(np.asarray(out), np.repeat(np.eye(16), 3, axis=-1))
        out = jnp.repeat(jnp.arange(4), 2)
        assert out.sharding == NamedSharding(m2, P(None))
        assert np.array_equal(np.asarray(out), np.repeat(np.arange(4), 2))
        out = jnp.repeat(np.eye(3), np.array((2, 2, 2,)) - 1, axis=0)
        assert out.sharding == NamedSharding(m2, P(None, None))
        assert np.array_equal(np.asarray(out), np.eye(3))
        a = jnp.eye(3)
        out = jnp.repeat(a, np.array((2, 2, 2,)) - 1, axis=0)
        assert out.sharding == a.sharding
        a = shmap.device_put(jnp.eye(4), P("x"))
        out = jnp.repeat(a, np.array((2, 2, 2, 2)) - 1, axis=0, out_sharding=P("x"))
        assert out.sharding == NamedSharding(m2, P("x", None))


def test_scatter_gather(c, m2):
    """test_scatter_gather: gathers and scatters of sharded arrays at sharded
    indices with out_sharding, in a jit and under vmap."""
    rng = np.random.default_rng(0)
    x_np = rng.uniform(size=(m2.size * 2, 3))
    i_np = rng.integers(0, x_np.shape[1], len(x_np)).astype(np.int32)
    j_np = rng.integers(0, x_np.shape[1], len(x_np)).astype(np.int32)

    @shmap.jit
    def f1(x, i, j):
        x_a_j = x.at[:, j].get(out_sharding=shmap.typeof(i).sharding)
        return x.at[:, i].set(x_a_j, out_sharding=shmap.typeof(x).sharding)

    @shmap.jit
    @shmap.vmap
    def f2(x, i, j):
        x_j = x.at[j].get(out_sharding=shmap.typeof(x).sharding)
        return x.at[i].set(x_j, out_sharding=shmap.typeof(x).sharding)

    with shmap.use_mesh(m2):
        x = shmap.device_put(x_np, P("x"))
        i = shmap.device_put(i_np, P("x"))
        j = shmap.device_put(j_np, P("x"))
        f1(x, i, j)
        f2(x, i, j)


def test_conv_general_dilated(c, m42):
    """test_conv_general_dilated: a 1-d convolution and a max pooling along
    a dimension sharded over y keep the input's sharding, as its gradient
    runs; a sharded feature dimension: JAX's ShardingTypeError (shmap's
    InvalidArgument); the lowered text's constraint: not ported. First with
    the kernel a replicated Array, then a numpy array as JAX's test has
    it."""
    seen = []

    def make(kernel):
        @shmap.jit
        def f(x):
            out = lax.conv_general_dilated(
                x, kernel, window_strides=(1,), padding="SAME",
                feature_group_count=1, lhs_dilation=(1,), rhs_dilation=(1,),
                dimension_numbers=("NWC", "WIO", "NWC"))
            seen.append(spec(out))
            out2 = lax.reduce_window(out, -np.inf, lax.max, (1, 2, 1), (1, 2, 1), "SAME")
            seen.append(spec(out2))
            return out2
        return f

    with shmap.use_mesh(m42):
        arr = shmap.device_put(np.zeros((16, 128, 8)), P("x", "y"))
        for kernel in (shmap.device_put(np.zeros((5, 8, 10)), P()), np.zeros((5, 8, 10))):
            f = make(kernel)
            out = f(arr)
            assert out.sharding == NamedSharding(m42, P("x", "y", None))
            assert np.array_equal(np.asarray(out), np.zeros((16, 64, 10)))
            assert seen[-2:] == [P("x", "y", None)] * 2
            shmap.jit(shmap.grad(lambda x: f(x).sum()))(arr)
            with pytest.raises(shmap.InvalidArgument):
                arr2 = shmap.device_put(np.zeros((16, 128, 8)), P("x", None, "y"))
                f(arr2)


@pytest.mark.parametrize("sp", [P("x", "y", None), P("x", None, "y"), P(None, "x", "y"),
                                P(("x", "y"), None, None)],
                         ids=["spec1", "spec2", "spec3", "spec4"])
def test_reduce_window(c, m42, sp):
    """test_reduce_window: max pooling keeps the input's sharding, and its
    gradient runs (the lowered text's constraint: not ported)."""
    seen = []
    x = np.random.default_rng(0).standard_normal((16, 128, 8))

    @shmap.jit
    def f(x):
        out = lax.reduce_window(x, -np.inf, lax.max, (1, 2, 1), (1, 2, 1), "SAME")
        seen.append(spec(out))
        return out

    with shmap.use_mesh(m42):
        arr = shmap.device_put(x, sp)
        out = f(arr)
        assert out.sharding == NamedSharding(m42, sp)
        assert np.array_equal(np.asarray(out), x.reshape(16, 64, 2, 8).max(2))
        shmap.jit(shmap.grad(lambda x: f(x).sum()))(arr)
    assert seen[0] == sp


def test_jnp_dot(c, m22):
    """test_jnp_dot: jnp.dot with out_sharding."""
    np_inp1 = np.arange(16, dtype=np.int32).reshape(8, 2)
    np_inp2 = np.arange(16, dtype=np.int32).reshape(2, 8)
    seen = []

    @shmap.jit
    def f(x, y):
        out = jnp.dot(x, y, out_sharding=P("x"))
        seen.append(spec(out))
        return out

    with shmap.use_mesh(m22):
        out = f(shmap.device_put(np_inp1, P("x", "y")), shmap.device_put(np_inp2, P("x", "y")))
    assert seen == [P("x", None)]
    assert out.sharding == NamedSharding(m22, P("x", None))
    assert np.array_equal(np.asarray(out), np.dot(np_inp1, np_inp2))


def test_jnp_matmul(c, m22):
    """test_jnp_matmul: jnp.matmul with out_sharding."""
    np_inp1 = np.arange(16, dtype=np.int32).reshape(8, 2)
    np_inp2 = np.arange(16, dtype=np.int32).reshape(2, 8)
    seen = []

    @shmap.jit
    def f(x, y):
        out = jnp.matmul(x, y, out_sharding=P("x"))
        seen.append(spec(out))
        return out

    with shmap.use_mesh(m22):
        out = f(shmap.device_put(np_inp1, P("x", "y")), shmap.device_put(np_inp2, P("x", "y")))
    assert seen == [P("x", None)]
    assert out.sharding == NamedSharding(m22, P("x", None))
    assert np.array_equal(np.asarray(out), np.dot(np_inp1, np_inp2))


def test_jnp_tensordot(c, m22):
    """test_jnp_tensordot: jnp.tensordot with out_sharding."""
    np_inp1 = np.arange(16, dtype=np.int32).reshape(8, 2)
    np_inp2 = np.arange(12, dtype=np.int32).reshape(2, 6)
    seen = []

    @shmap.jit
    def f(x, y):
        out = jnp.tensordot(x, y, axes=([1], [0]), out_sharding=P("x", None))
        seen.append(spec(out))
        return out

    with shmap.use_mesh(m22):
        out = f(shmap.device_put(np_inp1, P("x", "y")), shmap.device_put(np_inp2, P("x", "y")))
    assert seen == [P("x", None)]
    assert out.sharding == NamedSharding(m22, P("x", None))
    assert np.array_equal(np.asarray(out), np.dot(np_inp1, np_inp2))


def test_jnp_ravel(c, m22):
    """test_jnp_ravel: jnp.ravel with out_sharding."""
    np_inp = np.arange(16, dtype=np.int32).reshape(8, 2)
    seen = []

    @shmap.jit
    def f(x):
        out = jnp.ravel(x, out_sharding=P("x"))
        seen.append(spec(out))
        return out

    with shmap.use_mesh(m22):
        out = f(shmap.device_put(np_inp, P("x", "y")))
    assert seen == [P("x")]
    assert out.sharding == NamedSharding(m22, P("x"))
    assert np.array_equal(np.asarray(out), np.ravel(np_inp))


def test_broadcast_forwarding(c, m42):
    """test_broadcast_forwarding: lax.full_like of a replicated scalar has
    its sharding, at once and in a jit."""
    seen = []

    def f(x):
        out = lax.full_like(x, 1.0)
        seen.append(shmap.typeof(out).sharding == shmap.typeof(x).sharding)
        return out

    with shmap.use_mesh(m42):
        arr = shmap.device_put(np.zeros(()), P())
        assert float(np.asarray(f(arr))) == 1.0
        assert float(np.asarray(shmap.jit(f)(arr))) == 1.0
    assert seen == [True, True]


def test_unreduced_einsum_basic(c, m2):
    """test_unreduced_einsum_basic: an einsum left unreduced over x: each
    device's partial sums, then reshard sums them."""
    np_inp = np.arange(4, dtype=np.int32).reshape(2, 2)
    seen = []

    @shmap.jit
    def f(x, y):
        out = jnp.einsum("ab,bc->ac", x, y, out_sharding=P(None, None, unreduced={"x"}))
        seen.append(spec(out))
        return out

    with shmap.use_mesh(m2):
        out = f(shmap.device_put(np_inp, P(None, "x")), shmap.device_put(np_inp, P("x", None)))
        assert seen == [P(None, None, unreduced={"x"})]
        assert out.sharding == NamedSharding(m2, P(None, None, unreduced={"x"}))
        assert out.shape == (2, 2)
        assert out.sharding.shard_shape(out.shape) == (2, 2)
        expected_shards = [np.array([[0, 0], [0, 2]]), np.array([[2, 3], [6, 9]])]
        for s, es in zip(out.addressable_shards, expected_shards):
            assert s.data.shape == (2, 2)
            assert np.array_equal(np.asarray(s.data), es)
        reshard_out = shmap.reshard(out, P(None, None))
    assert np.array_equal(np.asarray(reshard_out), np_inp @ np_inp)


def test_unreduced_einsum_add_basic(c, m22):
    """test_unreduced_einsum_add_basic: two einsums unreduced over y added,
    then summed by reshard; its gradient runs (the lowered text and the
    gradient's jaxpr: not ported)."""
    np_inp = np.arange(16.).reshape(8, 2)
    seen = []

    @shmap.jit
    def f(x, y, a, b):
        m1 = jnp.einsum("xy,yz->xz", x, y, out_sharding=P("x", unreduced={"y"}))
        seen.append(spec(m1))
        m2 = jnp.einsum("xy,yz->xz", a, b, out_sharding=P("x", unreduced={"y"}))
        seen.append(spec(m2))
        s = m1 + m2
        seen.append(spec(s))
        out = shmap.reshard(s, P("x"))
        seen.append(spec(out))
        return out

    with shmap.use_mesh(m22):
        x = shmap.device_put(np_inp, P("x", "y"))
        y = shmap.device_put(np_inp.T, P("y", None))
        a = shmap.device_put(np_inp, P("x", "y"))
        b = shmap.device_put(np_inp.T, P("y", None))
        out = f(x, y, a, b)
        assert np.array_equal(np.asarray(out), (np_inp @ np_inp.T) + (np_inp @ np_inp.T))
        f_bar = shmap.jit(shmap.grad(lambda x, y, a, b: f(x, y, a, b).sum(),
                                     argnums=(0, 1, 2, 3)))
        gx, gy, _, _ = f_bar(x, y, a, b)
    assert seen[:4] == [P("x", None, unreduced={"y"})] * 3 + [P("x", None)]
    np.testing.assert_allclose(np.asarray(gx), np.ones((8, 8)) @ np_inp, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(gy), np_inp.T @ np.ones((8, 8)), rtol=1e-12)


def test_einsum_unreduced_with_transpose(c, m22):
    """test_einsum_unreduced_with_transpose: a batched einsum unreduced over
    y, its result's dimensions permuted."""
    n1 = np.arange(192, dtype=np.int32).reshape(6, 4, 8)
    n2 = np.arange(320, dtype=np.int32).reshape(4, 8, 10)
    seen = []

    @shmap.jit
    def f(arr1, arr2):
        out = jnp.einsum("heb,eba->hea", arr1, arr2,
                         out_sharding=P(None, "x", None, unreduced={"y"}))
        seen.append(spec(out))
        return out

    with shmap.use_mesh(m22):
        arr1 = shmap.device_put(n1, P(None, "x", "y"))
        arr2 = shmap.device_put(n2, P("x", "y", None))
        out = f(arr1, arr2)
        assert out.sharding == NamedSharding(m22, P(None, "x", None, unreduced={"y"}))
        reshard_out = shmap.sharding.reshard(out, P(None, "x", None))
        expected_out = jnp.einsum("heb,eba->hea", arr1, arr2, out_sharding=P(None, "x", None))
        assert np.array_equal(np.asarray(reshard_out), np.asarray(expected_out))
    assert seen == [P(None, "x", None, unreduced={"y"})]
    assert np.array_equal(np.asarray(reshard_out), np.einsum("heb,eba->hea", n1, n2))


def test_unreduced_multi_axes_einsum(c, m22):
    """test_unreduced_multi_axes_einsum: a contraction over a dimension
    sharded over (x, y), unreduced over both."""
    seen = []

    @shmap.jit
    def f(x, y):
        out = jnp.einsum("ij,i->j", x, y, out_sharding=P(None, unreduced={"x", "y"}))
        seen.append(spec(out).unreduced)
        return out

    with shmap.use_mesh(m22):
        x = shmap.device_put(np.arange(16.).reshape(8, 2), P(("x", "y"), None))
        y = shmap.device_put(np.arange(8.), P(("x", "y")))
        out = f(x, y)
        assert out.sharding == NamedSharding(m22, P(None, unreduced={"x", "y"}))
        reshard_out = shmap.reshard(out, P(None))
        expected_out = jnp.einsum("ij,i->j", x, y, out_sharding=P(None))
        assert np.array_equal(np.asarray(reshard_out), np.asarray(expected_out))
    assert seen == [{"x", "y"}]
    assert np.array_equal(np.asarray(reshard_out), np.arange(16.).reshape(8, 2).T @ np.arange(8.))


def test_unreduced_multi_axes_none_einsum(c, m22):
    """test_unreduced_multi_axes_none_einsum: contractions over dimensions
    sharded over x and over y, unreduced over both."""
    np_inp = np.arange(64.).reshape(4, 4, 2, 2)
    seen = []

    @shmap.jit
    def f(x, y):
        out = jnp.einsum("bxyz,bxyz->b", x, y, out_sharding=P(None, unreduced={"x", "y"}))
        seen.append(spec(out).unreduced)
        return out

    with shmap.use_mesh(m22):
        x = shmap.device_put(np_inp, P(None, "x", None, "y"))
        y = shmap.device_put(np_inp, P(None, "x", None, "y"))
        out = f(x, y)
        assert out.sharding == NamedSharding(m22, P(None, unreduced={"x", "y"}))
        reshard_out = shmap.reshard(out, P(None))
        expected_out = jnp.einsum("bxyz,bxyz->b", x, y, out_sharding=P(None))
        assert np.array_equal(np.asarray(reshard_out), np.asarray(expected_out))
    assert seen == [{"x", "y"}]
    assert np.array_equal(np.asarray(reshard_out), np.einsum("bxyz,bxyz->b", np_inp, np_inp))


def test_dot_general_unreduced_error(c, m221):
    """test_dot_general_unreduced_error: JAX's ShardingTypeError sentences
    (shmap's InvalidArgument) for unreduced axes that are not the
    contraction's, contractions sharded differently and an unreduced
    operand."""
    np_inp = np.arange(16, dtype=np.int32).reshape(8, 2)
    sds = shmap.ShapeDtypeStruct

    def arg(a, sp):
        return sds(a.shape, a.dtype, sharding=NamedSharding(m221, sp))

    f = shmap.jit(lambda x, y: jnp.einsum("xy,yz->xz", x, y,
                                          out_sharding=P("x", unreduced={"z"})))
    with pytest.raises(shmap.InvalidArgument, match="unreduced axes should be equal to the "
                       "contracting specs"):
        f.lower(arg(np_inp, P("x", "y")), arg(np_inp.T, P("y", None)))
    g = shmap.jit(lambda x, y: jnp.einsum("xy,yz->xz", x, y,
                                          out_sharding=P("x", unreduced={"y"})))
    with pytest.raises(shmap.InvalidArgument, match="lhs and rhs contracting dims should be "
                       "sharded identically"):
        g.lower(arg(np_inp, P("x", "y")), arg(np_inp.T, P(None, None)))
    with pytest.raises(shmap.InvalidArgument, match="unreduced axes should be equal to the "
                       "contracting specs"):
        g.lower(arg(np_inp, P("x", None)), arg(np_inp.T, P(None, None)))

    @shmap.jit
    def k(x, y):
        z = jnp.einsum("xy,yz->xz", x, y, out_sharding=P("x", unreduced={"y"}))
        return jnp.einsum("xy,yz->xz", z, x)

    with pytest.raises(shmap.InvalidArgument, match="lhs or rhs passed to dot_general cannot "
                       "be unreduced"):
        k.lower(arg(np_inp, P("x", "y")), arg(np_inp.T, P("y", None)))


def test_three_operand_einsum_unreduced(c, m22):
    """test_three_operand_einsum_unreduced: a three-operand einsum
    unreduced over x (the lowered text: not ported)."""
    n1, n2, n3 = (np.arange(2, dtype=np.int32), np.arange(8, dtype=np.int32).reshape(2, 4),
                  np.arange(2, dtype=np.int32))
    seen = []

    @shmap.jit
    def f(arr1, arr2, arr3):
        out = jnp.einsum("d,dh,d->h", arr1, arr2, arr3, out_sharding=P("y", unreduced={"x"}))
        seen.append(spec(out))
        return out

    with shmap.use_mesh(m22):
        out = f(shmap.device_put(n1, P("x")), shmap.device_put(n2, P("x", "y")),
                shmap.device_put(n3, P("x")))
        assert out.sharding == NamedSharding(m22, P("y", unreduced={"x"}))
        reshard_out = shmap.reshard(out, P("y"))
    assert seen == [P("y", unreduced={"x"})]
    assert np.array_equal(np.asarray(reshard_out), np.einsum("d,dh,d->h", n1, n2, n3))


def test_add_unreduced_error(c, m221):
    """test_add_unreduced_error: adding values unreduced over different
    axes, or an unreduced and a reduced one: JAX's ShardingTypeError
    sentences (shmap's InvalidArgument)."""
    np_inp = np.arange(16, dtype=np.int32).reshape(8, 2)

    @shmap.jit
    def f(x, y, a, b):
        m1 = jnp.einsum("xy,yz->xz", x, y, out_sharding=P("x", unreduced={"y"}))
        m2 = jnp.einsum("xy,yz->xz", a, b, out_sharding=P("x", unreduced={"z"}))
        return m1 + m2

    with shmap.use_mesh(m221):
        x = shmap.device_put(np_inp, P("x", "y"))
        y = shmap.device_put(np_inp.T, P("y", None))
        a = shmap.device_put(np_inp, P("x", "z"))
        b = shmap.device_put(np_inp.T, P("z", None))
        with pytest.raises(shmap.InvalidArgument, match="lhs and rhs to `add` must be "
                           "unreduced along the same mesh axes"):
            f.lower(x, y, a, b)

        @shmap.jit
        def g(x, y):
            m1 = jnp.einsum("xy,yz->xz", x, y, out_sharding=P("x", unreduced={"y"}))
            m2 = jnp.einsum("xy,yz->xz", a, b, out_sharding=P("x"))
            return m1 + m2

        with pytest.raises(shmap.InvalidArgument, match="lhs is unreduced while rhs is not"):
            g.lower(x, y)


def test_eval_shape(c, m22):
    """test_eval_shape: eval_shape of a jit function: a ShapeDtypeStruct
    with the result's sharding."""
    with shmap.use_mesh(m22):
        arr = shmap.device_put(np.arange(16, dtype=np.int32).reshape(8, 2), P("x", "y"))
        out = shmap.eval_shape(shmap.jit(lambda x: x * 2), arr)
    assert isinstance(out, shmap.ShapeDtypeStruct)
    assert out.sharding.spec == P("x", "y")
    assert out.sharding == NamedSharding(m22.abstract_mesh, P("x", "y"))


def test_he_normal(c, m2):
    """test_he_normal: an initializer's draw laid out as out_sharding."""
    init = shmap.nn.initializers.he_normal(in_axis=0, out_axis=1)
    with shmap.use_mesh(m2):
        out = init(shmap.random.key(0), (8, 2), jnp.float32, out_sharding=P("x"))
    assert out.sharding == NamedSharding(m2, P("x", None))


def test_nn_uniform(c, m2):
    """test_nn_uniform: the same for uniform."""
    init = shmap.nn.initializers.uniform()
    with shmap.use_mesh(m2):
        out = init(shmap.random.key(0), (8, 2), jnp.float32, out_sharding=P("x"))
    assert out.sharding == NamedSharding(m2, P("x", None))


def test_nn_constant(c, m2):
    """test_nn_constant: the same for constant, its values."""
    init = shmap.nn.initializers.constant(-7)
    with shmap.use_mesh(m2):
        out = init(shmap.random.key(0), (8, 2), jnp.float32, out_sharding=P("x"))
    assert np.array_equal(np.asarray(out), np.full((8, 2), -7, dtype=np.float32))
    assert out.sharding.mesh == m2
    assert out.sharding == NamedSharding(m2, P("x", None))


def test_lax_map(c, m22):
    """test_lax_map: lax.map over rows sharded over y, with a batch_size
    too."""
    w_np = np.arange(4, dtype=np.float32)
    x_np = np.ones((4, 2, 4), dtype=np.float32)
    with shmap.use_mesh(m22):
        w = shmap.device_put(w_np, P("x"))
        x = shmap.device_put(x_np, P(None, "y", None))
        out = lax.map(lambda _x: jnp.sum(w * _x, axis=-1), x)
        out2 = lax.map(lambda _x: jnp.sum(w * _x, axis=-1), x, batch_size=2)
    assert np.array_equal(np.asarray(out), (w_np * x_np).sum(-1))
    assert np.array_equal(np.asarray(out2), (w_np * x_np).sum(-1))


def test_lax_map_remainder(c, m2):
    """test_lax_map_remainder: a batch_size that does not divide the rows."""
    w_np = np.arange(4, dtype=np.float32)
    x_np = np.ones((5, 2, 4), dtype=np.float32)
    with shmap.use_mesh(m2):
        w = shmap.device_put(w_np, P())
        x = shmap.device_put(x_np, P(None, "x", None))
        out = lax.map(lambda _x: jnp.sum(w * _x, axis=-1), x, batch_size=2)
    assert np.array_equal(np.asarray(out), (w_np * x_np).sum(-1))


def test_dot_empty_mesh_lhs_rhs(c, m2):
    """test_dot_empty_mesh_lhs_rhs: a dot of a numpy array and a sharded
    Array, either way round, and its gradient."""
    np_inp = np.ones((2, 2))

    @shmap.jit
    def f(x, y):
        return jnp.dot(x, y)

    def g(x, y):
        return jnp.sum(f(x, y))

    with shmap.use_mesh(m2):
        arr = shmap.device_put(np.ones((2, 2)), P("x"))
        out = f(np_inp, arr)
        assert out.sharding == NamedSharding(m2, P(None, None))
        assert np.array_equal(np.asarray(out), np.full((2, 2), 2.))
        shmap.jit(shmap.grad(g))(np_inp, arr)
        out2 = f(arr, np_inp)
        assert out2.sharding == NamedSharding(m2, P("x", None))
        shmap.jit(shmap.grad(g))(arr, np_inp)


@pytest.mark.parametrize("axis_sizes", [(1, 4), (2, 2)], ids=["mesh1", "mesh2"])
def test_reshape_merge_replicated(c, axis_sizes):
    """test_reshape_merge_replicated: merging two replicated dimensions in
    front of one sharded over x."""
    mesh = c.make_mesh(axis_sizes, ("x", "y"))
    with shmap.use_mesh(mesh):
        arr = shmap.device_put(np.ones((8, 4, 4)), P(None, None, "x"))
        out = jnp.reshape(arr, (-1, arr.shape[-1]))
    assert out.sharding == NamedSharding(mesh, P(None, "x"))
    assert np.array_equal(np.asarray(out), np.ones((32, 4)))


def _reshape_check(mesh, in_shape, in_spec, out_shape, out_spec):
    np_inp = np.arange(math.prod(in_shape), dtype=np.float32).reshape(in_shape)
    f = shmap.jit(lambda x: jnp.reshape(x, out_shape))
    with shmap.use_mesh(mesh):
        arr = shmap.device_put(np_inp, in_spec)
        out = f(arr)
        assert np.array_equal(np.asarray(out), np_inp.reshape(out_shape))
        assert out.sharding == NamedSharding(mesh, out_spec)
        out_g = shmap.jit(shmap.grad(lambda x: f(x).sum()))(arr)
        assert out_g.sharding == NamedSharding(mesh, in_spec)
        assert np.array_equal(np.asarray(out_g), np.ones(in_shape))


@pytest.mark.parametrize("in_shape,in_spec,out_shape,out_spec", [
    ((4,), P(("x", "y")), (2, 2), P("x", "y")),
    ((8,), P(("x", "y")), (2, 4), P("x", "y")),
    ((8,), P(("x", "y")), (4, 2), P(("x", "y"), None)),
])
def test_reshape_split_one_dim_multi_axes(c, m22, in_shape, in_spec, out_shape, out_spec):
    """test_reshape_split_one_dim_multi_axes: a dimension sharded over
    (x, y) split in two, and the gradient laid out back."""
    _reshape_check(m22, in_shape, in_spec, out_shape, out_spec)


@pytest.mark.parametrize("in_shape,in_spec,out_shape,out_spec", [
    ((8,), P(("x", "y", "z")), (2, 2, 2), P("x", "y", "z")),
    ((8,), P(("x", "y", "z")), (2, 4), P("x", ("y", "z"))),
    ((8,), P(("x", "y", "z")), (4, 2), P(("x", "y"), "z")),
    ((4, 2), P(("x", "y"), "z"), (2, 2, 2), P("x", "y", "z")),
    ((16,), P(("x", "y", "z")), (2, 2, 2, 2), P("x", "y", "z", None)),
])
def test_reshape_split_one_dim_multi_axes_3_mesh_axes(c, m222, in_shape, in_spec, out_shape,
                                                      out_spec):
    """test_reshape_split_one_dim_multi_axes_3_mesh_axes: the same over
    three mesh axes."""
    _reshape_check(m222, in_shape, in_spec, out_shape, out_spec)


@pytest.mark.parametrize("in_shape,in_spec,out_shape,out_spec", [
    ((2, 2), P("x", "y"), (4,), P(("x", "y"))),
    ((2, 4), P("x", "y"), (8,), P(("x", "y"))),
    ((4, 2), P(("x", "y"), None), (8,), P(("x", "y"))),
])
def test_reshape_merge_one_dim_multi_axes(c, m22, in_shape, in_spec, out_shape, out_spec):
    """test_reshape_merge_one_dim_multi_axes: dimensions sharded over x and
    y merged into one sharded over (x, y)."""
    _reshape_check(m22, in_shape, in_spec, out_shape, out_spec)


@pytest.mark.parametrize("in_shape,in_spec,out_shape,out_spec", [
    ((2, 2, 2), P("x", "y", "z"), (8,), P(("x", "y", "z"))),
    ((2, 4), P("x", ("y", "z")), (8,), P(("x", "y", "z"))),
    ((4, 2), P(("x", "y"), "z"), (8,), P(("x", "y", "z"))),
    ((2, 2, 2), P("x", "y", "z"), (4, 2), P(("x", "y"), "z")),
    ((2, 2, 2, 2), P("x", "y", "z", None), (16,), P(("x", "y", "z"))),
])
def test_reshape_merge_one_dim_multi_axes_3_mesh_axes(c, m222, in_shape, in_spec, out_shape,
                                                      out_spec):
    """test_reshape_merge_one_dim_multi_axes_3_mesh_axes: the same over
    three mesh axes."""
    _reshape_check(m222, in_shape, in_spec, out_shape, out_spec)


@pytest.mark.parametrize("in_shape,in_spec,out_shape", [
    ((2, 2, 2), P("x", None, "y"), (8,)),
    ((12,), P(("x", "y")), (3, 4)),
])
def test_reshape_split_merge_error(c, m22, in_shape, in_spec, out_shape):
    """test_reshape_split_merge_error: reshapes the shardings cannot follow:
    JAX's ShardingTypeError (shmap's InvalidArgument)."""
    np_inp = np.arange(math.prod(in_shape), dtype=np.float32).reshape(in_shape)
    with shmap.use_mesh(m22):
        arr = shmap.device_put(np_inp, in_spec)
        with pytest.raises(shmap.InvalidArgument):
            shmap.jit(lambda x: jnp.reshape(x, out_shape))(arr)
