"""JAX's sharding-in-types tests (jax-ml/jax tests/pjit_test.py, class
ShardingInTypesTest, from test_no_op_auto_axes_no_mesh to the end: unreduced
values through split, concatenate, reshape, reductions, slices and selects,
and their gradients; out_sharding= of jnp.ones, full, bincount, one_hot,
segment sums, matmul and top_k; vmap and grad over Explicit meshes, and the
errors JAX raises with its sentences) against numpy and JAX's expected
shardings, and reduced shardings (P(reduced=...)) with their unreduced
gradients, and unreduced values of the kinds max and min. Runs on the cluster of conftest's c
(2 workers x 4 devices)."""
# Not ported:
# test_config_remove_size_one_mesh_axis_roundtrip: a jax.config flag shmap does not have, and
#   core.eval_jaxpr of a traced jaxpr (jax internals).
# test_top_level_ag_basic, test_top_level_ag_no_one_size_mesh_axis, test_top_level_ag_multi,
#   test_top_level_ag_error: jax._src.shard_map.top_level_all_gather, a jax internal (a
#   shard_map of all_gather(..., to='reduced'); its parts are tested).
# test_xla_metadata_applied_to_op: set_xla_metadata and the HLO text only.
# test_abstract_mesh_context_trace: lowering for TPU and its HLO text only.
# test_abstract_mesh_context_mismatch_error: lowering for TPU under use_abstract_mesh (shmap
#   lowers for its own service only and has no use_abstract_mesh).
# test_to_pinned_host_error: memory kinds (pinned_host).
# test_rbg_impl_none_out_sharding: the 'rbg' PRNG implementation (a jax.config choice of PRNG
#   that shmap refuses).
import dataclasses

import numpy as np
import pytest

import shmap
from shmap import P, NamedSharding
from shmap.sharding import UnreducedKind
from shmap import lax
from shmap import numpy as jnp

@pytest.fixture(scope="module")
def m1(c):
    """A mesh of one Explicit axis 'x' of 1 device."""
    return c.make_mesh((1,), ("x",))


@pytest.fixture(scope="module")
def m2(c):
    """A mesh of one Explicit axis 'x' of 2 devices."""
    return c.make_mesh((2,), ("x",))


@pytest.fixture(scope="module")
def m4(c):
    """A mesh of one Explicit axis 'x' of 4 devices."""
    return c.make_mesh((4,), ("x",))


@pytest.fixture(scope="module")
def m22(c):
    """A (2, 2) mesh over Explicit axes x and y."""
    return c.make_mesh((2, 2), ("x", "y"))


@pytest.fixture(scope="module")
def m12(c):
    """A (1, 2) mesh over Explicit axes x and y."""
    return c.make_mesh((1, 2), ("x", "y"))


@pytest.fixture(scope="module")
def m11(c):
    """A (1, 1) mesh over Explicit axes x and y."""
    return c.make_mesh((1, 1), ("x", "y"))


def arange_f(n):
    return np.arange(n, dtype=np.float32)


def unreduced(mesh, a, axes=("x",)):
    """JAX's reshard(a, P(unreduced=axes)) of a replicated a, which shmap
    refuses (test_split_unreduced_reshard): an array unreduced over axes
    whose first device's block is a and the others' zeros, made by a
    shard_map's pcast to unreduced."""
    a = np.asarray(a)
    n = int(np.prod([mesh.shape[k] for k in axes]))
    blocks = np.concatenate([a] + [np.zeros_like(a)] * (n - 1))
    f = shmap.shard_map(lambda b: lax.pcast(b, axes, to="unreduced"), mesh=mesh,
                        in_specs=P(axes), out_specs=P(unreduced=set(axes)))
    return f(c_put(mesh, blocks, P(axes)))


def c_put(mesh, a, spec):
    return shmap.device_put(np.asarray(a), NamedSharding(mesh, spec))


def test_no_op_auto_axes_no_mesh(c):
    """test_no_op_auto_axes_no_mesh: auto_axes of the identity in a jit given
    a numpy argument and no mesh."""
    @shmap.auto_axes(out_sharding=P())
    def g(x):
        return x

    @shmap.jit
    def f(x):
        return g(x)

    assert np.array_equal(np.asarray(f(np.arange(8))), np.arange(8))


def test_vjp_unreduced_zeros(c, m2):
    """test_vjp_unreduced_zeros: the vjp of a function of reduced arguments
    pulls an unreduced cotangent back to unreduced zeros."""
    with shmap.use_mesh(m2):
        arr1 = shmap.reshard(arange_f(8), P(reduced={"x"}))
        arr2 = shmap.reshard(arange_f(8), P(reduced={"x"}))
        arr2_unr = unreduced(m2, arange_f(8))
        _, f_vjp = shmap.vjp(shmap.jit(lambda x, y: y), arr1, arr2)
        x_bar, y_bar = f_vjp(arr2_unr)
        assert shmap.typeof(x_bar).sharding.spec == P(None, unreduced={"x"})
        assert shmap.typeof(y_bar).sharding.spec == P(None, unreduced={"x"})


def _stage_loss(params, inputs, targets):
    def layer(carry, p):
        h = jnp.dot(carry, p["w_in"], out_sharding=P("fsdp"))
        return jnp.dot(h, p["w_out"], out_sharding=P("fsdp")), None

    x, _ = lax.scan(layer, inputs, params)
    return jnp.sum((x - targets) ** 2)


def test_microbatch_vmap_unreduced(c):
    """test_microbatch_vmap_unreduced: jit of vmap of value_and_grad of a
    scan of matmuls, params reduced over fsdp (the same with replicated
    params first, against numpy)."""
    mesh = c.make_mesh((2,), ("fsdp",))
    loss_fn = shmap.jit(shmap.vmap(shmap.value_and_grad(_stage_loss), in_axes=(None, 0, 0)))
    with shmap.use_mesh(mesh):
        inputs = shmap.device_put(jnp.ones((4, 8, 16)), P(None, "fsdp"))
        targets = shmap.device_put(jnp.ones((4, 8, 16)), P(None, "fsdp"))
        params = {"w_in": jnp.ones((2, 16, 64)), "w_out": jnp.ones((2, 64, 16))}
        loss, _ = loss_fn(shmap.device_put(params, P()), inputs, targets)
        x = np.ones((8, 16))
        for _ in range(2):
            x = x @ np.ones((16, 64)) @ np.ones((64, 16))
        assert np.allclose(np.asarray(loss), np.full(4, ((x - 1) ** 2).sum()), rtol=1e-5)
        params = shmap.device_put(params, P(reduced={"fsdp"}))
        loss_fn(params, inputs, targets)  # doesn't crash


def _bcast(x):
    return lax.broadcast_in_dim(x, (2, 8), broadcast_dimensions=[1], out_sharding=P("x", None))


def test_broadcast_reduced_inp_unreduced_out(c, m2):
    """test_broadcast_reduced_inp_unreduced_out: a broadcast of a reduced
    argument sharded over x; its gradient unreduced (the replicated
    argument's first, against numpy)."""
    f = shmap.jit(_bcast)
    with shmap.use_mesh(m2):
        arr2 = shmap.device_put(arange_f(8), P())
        out = f(arr2)
        assert out.sharding == NamedSharding(m2, P("x", None))
        assert np.array_equal(np.asarray(out), np.broadcast_to(arange_f(8), (2, 8)))
        exp_out_g = shmap.jit(shmap.grad(lambda x: f(x).sum()))(arr2)
        assert np.array_equal(np.asarray(exp_out_g), np.full(8, 2.0))
        arr = shmap.device_put(arange_f(8), P(reduced={"x"}))
        assert f(arr).sharding == NamedSharding(m2, P("x", None))
        out_g = shmap.jit(shmap.grad(lambda x: f(x).sum()))(arr)
        assert out_g.sharding == NamedSharding(m2, P(None, unreduced={"x"}))
        assert np.array_equal(np.asarray(shmap.reshard(out_g, P())), np.asarray(exp_out_g))


def test_concat_reduced_split_unreduced(c, m2):
    """test_concat_reduced_split_unreduced: grad through a concatenation of
    reduced weights (the replicated weights' first, against numpy)."""
    x_np = arange_f(8).reshape(2, 4)
    w_np = arange_f(32).reshape(4, 8)

    @shmap.jit
    def fn(x, w1, w2):
        w = jnp.concatenate([w1, w2], axis=-1)
        return (x @ w).sum()

    gfn = shmap.jit(shmap.grad(fn, argnums=(0, 1, 2)))
    with shmap.use_mesh(m2):
        x = shmap.device_put(x_np, P("x"))
        ew1 = shmap.device_put(w_np, P())
        ew2 = shmap.device_put(w_np, P())
        ex_o1, ex_o2, ex_o3 = gfn(x, ew1, ew2)
        assert ex_o1.sharding == NamedSharding(m2, P("x", None))
        w = np.concatenate([w_np, w_np], axis=-1)
        assert np.array_equal(np.asarray(ex_o1), np.ones((2, 16)) @ w.T)
        want_w = x_np.T @ np.ones((2, 8))
        assert np.array_equal(np.asarray(ex_o2), want_w)
        assert np.array_equal(np.asarray(ex_o3), want_w)
        w1 = shmap.device_put(w_np, P(reduced={"x"}))
        w2 = shmap.device_put(w_np, P(reduced={"x"}))
        out1, out2, out3 = gfn(x, w1, w2)
        assert out1.sharding == NamedSharding(m2, P("x", None))
        assert out2.sharding == NamedSharding(m2, P(None, None, unreduced={"x"}))
        assert out3.sharding == NamedSharding(m2, P(None, None, unreduced={"x"}))
        assert np.array_equal(np.asarray(out1), np.asarray(ex_o1))
        assert np.array_equal(np.asarray(shmap.reshard(out2, P())), want_w)
        assert np.array_equal(np.asarray(shmap.reshard(out3, P())), want_w)


def test_split_unreduced(c, m2):
    """test_split_unreduced: lax.split of an unreduced array keeps each
    device's partial sums (the array made by a shard_map: see
    test_split_unreduced_reshard)."""
    @shmap.jit
    def f(x):
        return lax.split(x, sizes=[4, 4])

    with shmap.use_mesh(m2):
        arr = unreduced(m2, np.arange(8.))
        out1, out2 = f(arr)
        assert out1.sharding == NamedSharding(m2, P(None, unreduced={"x"}))
        assert out2.sharding == NamedSharding(m2, P(None, unreduced={"x"}))
        for s, ex in zip(out1.addressable_shards, [np.arange(4.), np.zeros((4,))]):
            assert np.array_equal(s.data, ex)
        for s, ex in zip(out2.addressable_shards, [np.arange(4., 8.), np.zeros((4,))]):
            assert np.array_equal(s.data, ex)


def test_split_unreduced_reshard(c, m2):
    """test_split_unreduced, its start: a replicated array resharded to
    unreduced over x, each device's block the array on the first, zeros
    on the others."""
    with shmap.use_mesh(m2):
        arr = shmap.reshard(jnp.arange(8.), P(unreduced={"x"}))
        assert arr.sharding == NamedSharding(m2, P(None, unreduced={"x"}))
        for s, ex in zip(arr.addressable_shards, [np.arange(8.), np.zeros((8,))]):
            assert np.array_equal(s.data, ex)


def test_split_unreduced_grad(c, m2):
    """test_split_unreduced, its gradient: reduced over x (shmap's: the
    same values, replicated)."""
    @shmap.jit
    def f(x):
        return lax.split(x, sizes=[4, 4])

    def g(x):
        o1, o2 = f(x)
        return shmap.reshard((o1 + o2), P()).sum()

    with shmap.use_mesh(m2):
        out_g = shmap.jit(shmap.grad(g))(unreduced(m2, np.arange(8.)))
        assert np.array_equal(np.asarray(out_g), np.ones(8))
        assert out_g.sharding == NamedSharding(m2, P(None, reduced={"x"}))


def test_reduce_sum_unreduced_inp(c, m2):
    """test_reduce_sum_unreduced_inp: reduce_sum of an unreduced array sums
    each device's block (the array made by a shard_map, see
    test_split_unreduced_reshard; its gradient: below)."""
    f = shmap.jit(lambda x: lax.reduce_sum(x, axes=[0]))
    with shmap.use_mesh(m2):
        out = f(unreduced(m2, np.arange(4.)))
        assert out.ndim == 0
        for s, es in zip(out.addressable_shards, [np.array(6.), np.array(0.)]):
            assert np.array_equal(s.data, es)
        assert np.asarray(shmap.reshard(out, P())) == 6.0
        ex_out_g = shmap.jit(shmap.grad(f))(shmap.reshard(jnp.arange(4.), P("x")))
        assert np.array_equal(np.asarray(ex_out_g), np.ones(4))


def test_reduce_sum_unreduced_inp_grad(c, m2):
    """test_reduce_sum_unreduced_inp, its gradient: the values those of the
    sharded argument's, replicated (JAX's is reduced over x: below)."""
    f = shmap.jit(lambda x: lax.reduce_sum(x, axes=[0]))
    with shmap.use_mesh(m2):
        out_g = shmap.jit(shmap.grad(f))(unreduced(m2, np.arange(4.)))
        assert np.array_equal(np.asarray(out_g), np.ones(4))
        assert out_g.sharding.is_fully_replicated


def test_reduce_sum_unreduced_inp_grad_reduced(c, m2):
    """test_reduce_sum_unreduced_inp, its gradient's sharding: reduced over x."""
    f = shmap.jit(lambda x: lax.reduce_sum(x, axes=[0]))
    with shmap.use_mesh(m2):
        out_g = shmap.jit(shmap.grad(f))(unreduced(m2, np.arange(4.)))
        assert out_g.sharding == NamedSharding(m2, P(None, reduced={"x"}))


@pytest.mark.parametrize("axes,out_s,eq_out_s", [
    ([0], None, P(None, unreduced={"y"})),
    pytest.param([0], P(unreduced={"x", "y"}), P(None, unreduced={"x", "y"})),
    pytest.param([0], P(unreduced={"x"}), P(None, unreduced={"x"})),
    ([0, 1], None, P(unreduced={"y"})),
    pytest.param([0, 1], P(unreduced={"x", "y"}), P(unreduced={"x", "y"})),
    pytest.param([0, 1], P(unreduced={"x"}), P(unreduced={"x"})),
])
def test_reduce_sum_unreduced_inp_multi_mesh(c, m22, axes, out_s, eq_out_s):
    """test_reduce_sum_unreduced_inp_multi_mesh: reduce_sum of a product
    unreduced over y, its result's spec (the sums against numpy too)."""
    np1 = np.arange(16).reshape(8, 2)
    np2 = np.arange(8).reshape(2, 4)
    seen = []

    @shmap.jit
    def f(x):
        kw = {} if out_s is None else {"out_sharding": out_s}
        out = lax.reduce_sum(x, axes=axes, **kw)
        seen.append(shmap.typeof(out).sharding.spec)
        return out

    with shmap.use_mesh(m22):
        inp1 = shmap.device_put(np1, P("x", "y"))
        inp2 = shmap.device_put(np2, P("y", None))
        arr = jnp.dot(inp1, inp2, out_sharding=P("x", unreduced={"y"}))
        out = f(arr)
        assert seen == [eq_out_s]
        assert out.sharding == NamedSharding(m22, eq_out_s)
        assert np.array_equal(np.asarray(shmap.reshard(out, P())), (np1 @ np2).sum(tuple(axes)))


def test_split_reduced_concat_unreduced(c, m2):
    """test_split_reduced_concat_unreduced: grad through a split of reduced
    weights (the replicated weights' first, against numpy)."""
    x_np = arange_f(8).reshape(2, 4)
    w_np = arange_f(64).reshape(4, 16)

    @shmap.jit
    def fn(x, w):
        w1, w2 = jnp.split(w, 2, axis=-1)
        return (x @ w1).sum()

    gfn = shmap.jit(shmap.grad(fn, argnums=(0, 1)))
    with shmap.use_mesh(m2):
        x = shmap.device_put(x_np, P("x"))
        ex_o1, ex_o2 = gfn(x, shmap.device_put(w_np, P()))
        assert ex_o1.sharding == NamedSharding(m2, P("x", None))
        assert np.array_equal(np.asarray(ex_o1), np.ones((2, 8)) @ w_np[:, :8].T)
        want_w = np.concatenate([x_np.T @ np.ones((2, 8)), np.zeros((4, 8))], axis=1)
        assert np.array_equal(np.asarray(ex_o2), want_w)
        w = shmap.device_put(w_np, P(reduced={"x"}))
        out1, out2 = gfn(x, w)
        assert out1.sharding == NamedSharding(m2, P("x", None))
        assert out2.sharding == NamedSharding(m2, P(None, None, unreduced={"x"}))
        assert np.array_equal(np.asarray(out1), np.asarray(ex_o1))
        assert np.array_equal(np.asarray(shmap.reshard(out2, P())), want_w)


def test_concat_unreduced(c, m2):
    """test_concat_unreduced: concatenate of two unreduced arrays keeps each
    device's partial sums (the arrays made by a shard_map: see
    test_split_unreduced_reshard; the gradient, reduced, is refused as in
    test_split_unreduced_grad)."""
    f = shmap.jit(lambda x1, x2: jnp.concatenate([x1, x2], axis=0))
    with shmap.use_mesh(m2):
        arr1 = unreduced(m2, np.arange(8.))
        arr2 = unreduced(m2, np.arange(8.))
        out = f(arr1, arr2)
        assert out.sharding == NamedSharding(m2, P(None, unreduced={"x"}))
        for s, ex in zip(out.addressable_shards,
                         [np.concatenate([np.arange(8.), np.arange(8.)]), np.zeros((16,))]):
            assert np.array_equal(s.data, ex)


def test_reshape_unreduced_fwd_reduced_bwd(c, m22):
    """test_reshape_unreduced_fwd_reduced_bwd, its second part: a reshape in
    a jit of a product unreduced over y keeps the partial sums; the
    gradient of the summed product (its first part and the gradient of
    the unreduced one: below)."""
    np1 = arange_f(16).reshape(8, 2)
    np2 = arange_f(8).reshape(2, 4)
    f = shmap.jit(lambda x: jnp.reshape(x, (4, 2, 4)))
    with shmap.use_mesh(m22):
        inp1 = shmap.device_put(np1, P("x", "y"))
        inp2 = shmap.device_put(np2, P("y", None))
        arr2 = jnp.dot(inp1, inp2, out_sharding=P("x", unreduced={"y"}))
        re_arr2 = f(arr2)
        assert re_arr2.sharding == NamedSharding(m22, P("x", None, None, unreduced={"y"}))
        assert np.array_equal(np.asarray(shmap.reshard(re_arr2, P("x"))),
                              (np1 @ np2).reshape(4, 2, 4))
        ex_arr2 = jnp.dot(inp1, inp2, out_sharding=P("x"))
        ex_out_g = shmap.jit(shmap.grad(lambda x: shmap.reshard(f(x), P()).sum()))(ex_arr2)
        assert ex_out_g.sharding == NamedSharding(m22, P("x", None))
        assert np.array_equal(np.asarray(ex_out_g), np.ones((8, 4)))


def test_reshape_unreduced_fwd_reduced_bwd_eager(c, m22):
    """test_reshape_unreduced_fwd_reduced_bwd, its first part: an array
    unreduced over x and y (made by a shard_map: see
    test_split_unreduced_reshard), reshaped at once."""
    inp1 = np.arange(16.).reshape(8, 2)
    with shmap.use_mesh(m22):
        arr = unreduced(m22, inp1, ("x", "y"))
        re_arr = jnp.reshape(arr, (2, 8))
        assert re_arr.sharding == NamedSharding(m22, P(None, None, unreduced={"x", "y"}))
        zeros = np.zeros((2, 8))
        for s, ex_s in zip(re_arr.addressable_shards, [inp1.reshape(2, 8), zeros, zeros, zeros]):
            assert np.array_equal(s.data, ex_s)


def test_reshape_unreduced_fwd_reduced_bwd_grad(c, m22):
    """test_reshape_unreduced_fwd_reduced_bwd, its gradient: the cotangent
    of an argument unreduced over y is reduced over y (shmap's: the same
    values, replicated over y)."""
    np1 = arange_f(16).reshape(8, 2)
    np2 = arange_f(8).reshape(2, 4)
    f = shmap.jit(lambda x: jnp.reshape(x, (4, 2, 4)))
    with shmap.use_mesh(m22):
        inp1 = shmap.device_put(np1, P("x", "y"))
        inp2 = shmap.device_put(np2, P("y", None))
        arr2 = jnp.dot(inp1, inp2, out_sharding=P("x", unreduced={"y"}))
        out_g = shmap.jit(shmap.grad(lambda x: shmap.reshard(f(x), P()).sum()))(arr2)
        assert np.array_equal(np.asarray(out_g), np.ones((8, 4)))
        assert out_g.sharding == NamedSharding(m22, P("x", None, reduced={"y"}))


def test_reshape_reduced_fwd_unreduced_bwd(c, m22):
    """test_reshape_reduced_fwd_unreduced_bwd: a reshape of a reduced array,
    its gradient unreduced (the replicated array's first, against numpy)."""
    f = shmap.jit(lambda x: jnp.reshape(x, (4, 2)))
    with shmap.use_mesh(m22):
        ex_out_g = shmap.jit(shmap.grad(lambda x: f(x).sum()))(
            shmap.device_put(arange_f(8), P()))
        assert np.array_equal(np.asarray(ex_out_g), np.ones(8))
        arr = shmap.device_put(arange_f(8), P(reduced={"x", "y"}))
        assert f(arr).sharding == NamedSharding(m22, P(None, None, reduced={"x", "y"}))


def test_reshape_unreduced_out_sharding_error(c, m2):
    """test_reshape_unreduced_out_sharding_error: an unreduced out_sharding
    of a reshape (its reduced cases need reduced shardings, see
    test_vjp_unreduced_zeros; its unreduced operand: the _operand test)."""
    with shmap.use_mesh(m2):
        with pytest.raises(ValueError, match="cannot contain unreduced"):
            jnp.reshape(np.arange(8), (4, 2), out_sharding=P(unreduced={"x"}))


def test_reshape_unreduced_out_sharding_error_operand(c, m2):
    """test_reshape_unreduced_out_sharding_error, its third case: the
    operand unreduced over x (made by a shard_map: see
    test_split_unreduced_reshard), the out_sharding not."""
    with shmap.use_mesh(m2):
        arr = unreduced(m2, np.arange(8))
        with pytest.raises(ValueError, match="must be unreduced over the same mesh axes as "
                           "operand"):
            jnp.reshape(arr, (4, 2), out_sharding=P("x"))


def test_gather_reduced_fwd_unreduced_bwd(c, m2):
    """test_gather_reduced_fwd_unreduced_bwd: a gather of a reduced operand,
    its gradient unreduced (the replicated operand's first, against
    numpy)."""
    f = shmap.jit(lambda op, idx: op.at[idx].get())

    def loss(op, idx):
        return f(op, idx).sum()

    with shmap.use_mesh(m2):
        indices = shmap.device_put(jnp.arange(4), P())
        ex_operand = shmap.device_put(arange_f(16).reshape(8, 2), P())
        ex_out_g = shmap.jit(shmap.grad(loss))(ex_operand, indices)
        assert np.array_equal(np.asarray(ex_out_g), np.repeat([1., 0.], 4)[:, None] * [1, 1])
        operand = shmap.device_put(arange_f(16).reshape(8, 2), P(None, None, reduced={"x"}))
        assert f(operand, indices).sharding == NamedSharding(m2, P(None, None, reduced={"x"}))


def test_scatter_unreduced_fwd_reduced_bwd(c, m2):
    """test_scatter_unreduced_fwd_reduced_bwd: a scatter-add of unreduced
    updates into an unreduced operand (made by a shard_map: see
    test_split_unreduced_reshard; the gradient, reduced: see
    test_split_unreduced_grad); the replicated one's gradient first."""
    f = shmap.jit(lambda op, idx, upd: op.at[idx].add(upd))

    def loss(op, idx, upd):
        return f(op, idx, upd).sum()

    with shmap.use_mesh(m2):
        indices = shmap.device_put(np.array([1, 3, 5]), P())
        ex_grad_op, ex_grad_upd = shmap.jit(shmap.grad(loss, argnums=(0, 2)))(
            shmap.device_put(np.zeros((8, 2), np.float32), P()), indices,
            shmap.device_put(arange_f(6).reshape(3, 2), P()))
        assert np.array_equal(np.asarray(ex_grad_op), np.ones((8, 2)))
        assert np.array_equal(np.asarray(ex_grad_upd), np.ones((3, 2)))
        operand = unreduced(m2, np.zeros((8, 2), np.float32))
        updates = unreduced(m2, arange_f(6).reshape(3, 2))
        out = f(operand, indices, updates)
        assert out.sharding == NamedSharding(m2, P(None, None, unreduced={"x"}))


def test_broadcast_transpose_unit_dims(c, m1):
    """test_broadcast_transpose_unit_dims: gradients over a mesh of one
    device keep the argument's sharding."""
    with shmap.use_mesh(m1):
        x = jnp.ones((1,), out_sharding=P("x"))
        y = shmap.jit(shmap.grad(lambda x: jnp.expand_dims(x, -1).sum()))(x)
        assert y.sharding == NamedSharding(m1, P("x"))
        assert np.array_equal(np.asarray(y), [1.0])

        x = jnp.ones((1, 4), out_sharding=P("x"))

        def g(x):
            out = x * lax.rsqrt(jnp.mean(x ** 2, axis=-1, keepdims=True))
            return out.sum()

        y = shmap.jit(shmap.grad(g))(x)
        assert y.sharding == NamedSharding(m1, P("x", None))
        assert np.allclose(np.asarray(y), np.zeros((1, 4)), atol=1e-6)


def test_reshard_replicated_to_sharded_unreduced(c, m22):
    """test_reshard_replicated_to_sharded_unreduced: reshard of a replicated
    array to sharded over one axis and unreduced over the other, and
    back."""
    inp = np.arange(16).reshape(8, 2)
    with shmap.use_mesh(m22):
        arr = shmap.reshard(jnp.arange(16).reshape(8, 2), P("x", unreduced={"y"}))
        assert np.array_equal(np.asarray(shmap.reshard(arr, P("x"))), inp)
        arr = shmap.reshard(jnp.arange(16).reshape(8, 2), P("y", unreduced={"x"}))
        assert np.array_equal(np.asarray(shmap.reshard(arr, P("y"))), inp)


def test_reduced_mul_scalar_fwd(c, m2):
    """test_reduced_mul_scalar_fwd: a reduced array times a number stays
    reduced; times a replicated array is JAX's ShardingTypeError."""
    with shmap.use_mesh(m2):
        arr = shmap.device_put(jnp.arange(4), P(reduced={"x"}))
        out = shmap.jit(lambda x: x * 2)(arr)
        assert out.sharding == NamedSharding(m2, P(None, reduced={"x"}))


def test_unreduced_mul_scalar_fwd(c, m2):
    """test_unreduced_mul_scalar_fwd: an unreduced array (made by a
    shard_map: see test_split_unreduced_reshard) times a number: JAX's
    sentence (its ShardingTypeError is shmap's InvalidArgument)."""
    with shmap.use_mesh(m2):
        arr = unreduced(m2, np.arange(4))
        with pytest.raises(shmap.InvalidArgument,
                           match="RHS should be reduced along the same axes LHS is unreduced on"):
            shmap.jit(lambda x: x * 2)(arr)


def test_unreduced_add_jaxvals(c, m2):
    """test_unreduced_add_jaxvals: the gradient of (x + x).sum() of a
    reduced argument (the replicated one's first, against numpy)."""
    f = shmap.jit(lambda x: (x + x).sum())
    with shmap.use_mesh(m2):
        out2 = shmap.jit(shmap.grad(f))(shmap.device_put(np.ones((2, 2), np.float32), P()))
        assert np.array_equal(np.asarray(out2), np.full((2, 2), 2.0))
        arr = shmap.reshard(np.ones((2, 2), np.float32), P(reduced={"x"}))
        out = shmap.jit(shmap.grad(f))(arr)
        assert np.array_equal(np.asarray(shmap.reshard(out, P())), np.asarray(out2))


def test_triu_tril(c, m22):
    """test_triu_tril: triu and tril keep the operand's sharding."""
    with shmap.use_mesh(m22):
        one = jnp.ones((8, 8), out_sharding=P("x"))
        w = 4
        lo = jnp.triu(one, -w + 1)
        assert lo.sharding == one.sharding
        assert np.array_equal(np.asarray(lo), np.triu(np.ones((8, 8)), -w + 1))
        r = jnp.tril(one, w - 1)
        assert r.sharding == one.sharding
        assert np.array_equal(np.asarray(r), np.tril(np.ones((8, 8)), w - 1))

        one2 = jnp.ones((8, 8, 4), out_sharding=P(None, "x", None))
        lo = jnp.triu(one2, -w + 1)
        assert lo.sharding == one2.sharding
        assert np.array_equal(np.asarray(lo), np.triu(np.ones((8, 8, 4)), -w + 1))

        one3 = jnp.ones((8, 8, 4), out_sharding=P("x"))
        lo = jnp.triu(one3, -w + 1)
        assert lo.sharding == one3.sharding


def test_argsort_error(c, m2):
    """test_argsort_error: argsort over a sharded dimension is JAX's
    sentence (its ShardingTypeError is shmap's InvalidArgument); over an
    unsharded one the sharding stays."""
    with shmap.use_mesh(m2):
        x = shmap.device_put(np.array([4, 3, 2, 5, 6, 0]), P("x"))
        with pytest.raises(shmap.InvalidArgument, match="Arguments to sort must be unsharded"):
            jnp.argsort(x)

        x_np = np.array([4, 3, 2, 5, 6, 0]).reshape(3, 2)
        x = shmap.device_put(x_np, P(None, "x"))
        out = jnp.argsort(x, axis=0)
        assert out.sharding == x.sharding
        assert np.array_equal(np.asarray(out), np.argsort(x_np, axis=0, kind="stable"))


def test_cond_lowering_constraint(c, m2):
    """test_cond_lowering_constraint (its result; the count of sharding
    constraints in the HLO text is not ported): a cond of two arrays
    sharded over x, doubled."""
    @shmap.jit
    def f(x, y):
        out = lax.cond(True, lambda x, y: x, lambda x, y: y, x, y)
        return out * 2

    with shmap.use_mesh(m2):
        arr1 = shmap.device_put(np.arange(8), P("x"))
        arr2 = shmap.device_put(np.arange(8), P("x"))
        out = f(arr1, arr2)
        assert out.sharding == NamedSharding(m2, P("x"))
        assert np.array_equal(np.asarray(out), np.arange(8) * 2)


def test_cet_unreduced(c, m2):
    """test_cet_unreduced: jnp.array of an array with an unreduced
    out_sharding: the first device holds it, the other zeros."""
    with shmap.use_mesh(m2):
        x = jnp.array([[1, 2], [3, 4]])
        out = jnp.array(x, out_sharding=P(unreduced={"x"}))
        assert out.sharding == NamedSharding(m2, P(None, None, unreduced={"x"}))
        for s, es in zip(out.addressable_shards, [np.asarray(x), [[0, 0], [0, 0]]]):
            assert np.array_equal(s.data, es)


def test_set_mesh_none(c, m2):
    """test_set_mesh_none: `with set_mesh(None):` inside a context mesh
    (that the jit then runs on the default device, no mesh set: the _jit
    test)."""
    with shmap.use_mesh(m2):
        with shmap.set_mesh(None):
            assert shmap.get_mesh() is None
        assert shmap.get_mesh() == m2


def test_set_mesh_none_jit(c, m2):
    """test_set_mesh_none, its jit: with no mesh set (use_mesh(None): see
    test_set_mesh_none) a jit of a numpy argument runs on the first
    device."""
    with shmap.use_mesh(m2):
        with shmap.use_mesh(None):
            assert shmap.get_mesh() is None
            assert shmap.sharding.get_abstract_mesh() is None
            inp = jnp.arange(8)
            out = shmap.jit(lambda x: x * 2)(inp)
            assert list(out.sharding.mesh.devices.flat) == [shmap.devices()[0]]
            assert np.array_equal(np.asarray(out), np.asarray(inp) * 2)
        assert shmap.get_mesh() == m2


def test_topk(c, m22):
    """test_topk: top_k keeps the operand's sharding, as does its
    gradient."""
    seen = []

    @shmap.jit
    def f(w):
        vals, _ = lax.top_k(w, 6)
        seen.append(shmap.typeof(vals).sharding.spec)
        return vals

    with shmap.use_mesh(m22):
        arr = jnp.ones((4, 32, 32), out_sharding=P("x", None, None))
        out = f(arr)
        assert seen[0] == P("x", None, None)
        assert out.sharding == NamedSharding(m22, P("x", None, None))
        assert np.array_equal(np.asarray(out), np.ones((4, 32, 6)))
        out_g = shmap.jit(shmap.grad(lambda x: f(x).mean()))(arr)
        assert out_g.sharding == NamedSharding(m22, P("x", None, None))


def test_identity_jit_out_unreduced(c, m2):
    """test_identity_jit_out_unreduced: the identity with an unreduced
    out_shardings: the first device holds a replicated input, the others
    zeros (device_put to unreduced: test_device_put_unreduced_via_jit)."""
    with shmap.use_mesh(m2):
        out = shmap.jit(lambda x: x, out_shardings=P(unreduced={"x"}))(jnp.arange(4))
        assert out.sharding == NamedSharding(m2, P(unreduced={"x"}))
        for s, es in zip(out.addressable_shards, [np.arange(4), np.zeros((4,))]):
            assert np.array_equal(s.data, es)


def test_vmap_random_categorical_sample(c, m22):
    """test_vmap_random_categorical_sample: a jit of vmap of categorical over
    keys and logits sharded over x."""
    with shmap.use_mesh(m22):
        keys = shmap.random.split(shmap.random.key(0), 2)
        keys = shmap.device_put(keys, NamedSharding(m22, P("x")))
        logits = shmap.device_put(jnp.ones((2, 10)), NamedSharding(m22, P("x")))
        out = shmap.jit(lambda k, lg: shmap.vmap(shmap.random.categorical)(k, lg))(keys, logits)
        assert np.all((np.asarray(out) >= 0) & (np.asarray(out) < 10))


def test_scatter_bool_index(c, m22):
    """test_scatter_bool_index: x.at[:, -1].set(False) with the operand's
    sharding as out_sharding."""
    x_np = np.arange(16).reshape(8, 2)
    with shmap.use_mesh(m22):
        arr = shmap.device_put(x_np, P("x", "y"))
        out = shmap.jit(lambda x: x.at[:, -1].set(False, out_sharding=shmap.typeof(x).sharding))(
            arr)
        want = x_np.copy()
        want[:, -1] = 0
        assert np.array_equal(np.asarray(out), want)


def test_broadcast_like(c, m2):
    """test_broadcast_like: a numpy operand broadcast like an array takes its
    sharding (an operand sharded otherwise: the _error test)."""
    with shmap.use_mesh(m2):
        like_arr = shmap.device_put(np.arange(16).reshape(8, 2), P("x", None))
        out = lax.broadcast_like(np.arange(2), like_arr)
        assert np.array_equal(np.asarray(out), np.broadcast_to(np.arange(2), (8, 2)))
        assert out.sharding == NamedSharding(m2, P("x", None))


def test_broadcast_like_error(c, m2):
    """test_broadcast_like, its error: the operand's sharding does not fit
    the like array's."""
    with shmap.use_mesh(m2):
        like_arr = shmap.device_put(np.arange(16).reshape(8, 2), P("x", None))
        arr = shmap.device_put(np.arange(2), P("x"))
        with pytest.raises(ValueError, match="Incompatible.*broadcasting"):
            lax.broadcast_like(arr, like_arr)


def test_unreduced_is_fully_replicated(c, m22):
    """test_unreduced_is_fully_replicated: an unreduced sharding is not
    fully replicated (the arrays made by a shard_map: see
    test_split_unreduced_reshard)."""
    with shmap.use_mesh(m22):
        arr = unreduced(m22, np.arange(8), ("x", "y"))
        assert not arr.sharding.is_fully_replicated
        arr = unreduced(m22, np.arange(8), ("x",))
        assert not arr.sharding.is_fully_replicated


def test_reshard_on_scalar_reduced(c, m2):
    """test_reshard_on_scalar_reduced: a reduced array times a number stays
    reduced, its gradient unreduced (the replicated array's first)."""
    with shmap.use_mesh(m2):
        ex_out = shmap.jit(shmap.grad(lambda x: (x * 2).sum()))(
            shmap.device_put(arange_f(4), P()))
        assert np.array_equal(np.asarray(ex_out), np.full(4, 2.0))
        arr = shmap.device_put(arange_f(4), P(reduced={"x"}))
        out = shmap.jit(lambda x: x * 2)(arr)
        assert out.sharding == NamedSharding(m2, P(None, reduced={"x"}))


def test_singleton_explicit_axis_multi_auto_axes(c):
    """test_singleton_explicit_axis_multi_auto_axes: jnp.ones over a (1, 2)
    mesh of an Explicit and an Auto axis, at once and in a jit."""
    mesh = c.make_mesh((1, 2), ("x", "y"), axis_types=(shmap.Explicit, shmap.Auto))
    with shmap.use_mesh(mesh):
        a = jnp.ones((2, 2), jnp.int32, out_sharding=P("x", None))
        assert shmap.typeof(a).sharding.spec == P("x", None)
        out = shmap.jit(lambda: jnp.ones((2, 2), jnp.int32, out_sharding=P("x", None)))()
        assert shmap.typeof(out).sharding.spec == P("x", None)
        b = jnp.ones((2,), jnp.int32, out_sharding=P("x"))
        assert shmap.typeof(b).sharding.spec == P("x")
        assert shmap.typeof(a).sharding == NamedSharding(mesh.abstract_mesh, P("x", None))


def test_dot_lhs_rhs_mesh_empty(c, m2):
    """test_dot_lhs_rhs_mesh_empty: the gradient with respect to a numpy
    weight of a dot with an array sharded over x is replicated."""
    x = shmap.device_put(np.ones((32, 128), np.float32), NamedSharding(m2, P("x")))
    w = jnp.ones((128, 64))

    def f(w, x):
        return lax.dot(x, w).sum()

    with shmap.use_mesh(m2):
        dw = shmap.jit(shmap.grad(f))(w, x)
        assert dw.sharding == NamedSharding(m2, P(None, None))
        assert np.array_equal(np.asarray(dw), np.full((128, 64), 32.0))


def test_vmap_select_const_broadcast(c, m1):
    """test_vmap_select_const_broadcast: vmap of grad of maximum(0, x)."""
    with shmap.use_mesh(m1):
        arr = jnp.ones((1,), out_sharding=P("x"))
        f = shmap.vmap(shmap.grad(lambda x: jnp.maximum(0.0, x)))
        assert np.array_equal(np.asarray(f(arr)), [1.0])


def test_vmap_grad_cet_dot(c, m2):
    """test_vmap_grad_cet_dot (float32 where JAX's x is bfloat16, a smaller
    batch): vmap over w of the gradients of a jit's matmul sum."""
    with shmap.use_mesh(m2):
        x = shmap.random.normal(shmap.random.key(0), (64, 8, 128), out_sharding=P("x"))
        w = shmap.random.normal(shmap.random.key(1), (2, 128, 1), dtype=jnp.float32,
                                out_sharding=P())

        @shmap.jit
        def f(x, w):
            x = x.astype(jnp.float32)
            return jnp.sum(x @ w)

        dx, dw = shmap.vmap(shmap.grad(f, argnums=(0, 1)), in_axes=(None, 0))(x, w)
        assert dx.sharding == NamedSharding(m2, P(None, "x", None, None))
        assert dw.sharding == NamedSharding(m2, P(None, None, None))
        x_np, w_np = np.asarray(x), np.asarray(w)
        assert np.allclose(np.asarray(dx), np.broadcast_to(w_np[:, None, None, :, 0],
                                                           (2, 64, 8, 128)), rtol=1e-5)
        assert np.allclose(np.asarray(dw), np.broadcast_to(x_np.sum((0, 1))[None, :, None],
                                                           (2, 128, 1)), rtol=1e-4, atol=1e-3)


def test_reduce_precision(c, m2):
    """test_reduce_precision: reduce_precision of a reduced array stays
    reduced (the replicated array's gradient first)."""
    f = shmap.jit(lambda x: lax.reduce_precision(x, 8, 7))
    with shmap.use_mesh(m2):
        rep_arr = shmap.device_put(arange_f(8), P())
        assert np.array_equal(np.asarray(f(rep_arr)), arange_f(8))
        ex_out_g = shmap.jit(shmap.grad(lambda x: f(x).sum()))(rep_arr)
        assert np.array_equal(np.asarray(ex_out_g), np.ones(8))
        arr = shmap.device_put(arange_f(8), P(reduced={"x"}))
        assert f(arr).sharding == NamedSharding(m2, P(None, reduced={"x"}))


def test_sds_closed_over_to_zeros_like_propagates_sharding_jit(c, m2):
    """test_sds_closed_over_to_zeros_like_propagates_sharding_jit (eval_shape
    of the jit under the concrete mesh: shmap has no use_abstract_mesh nor
    jit(...).trace): zeros_like of a closed-over ShapeDtypeStruct sharded
    over x."""
    am = m2.abstract_mesh
    with shmap.use_mesh(m2):
        val = shmap.ShapeDtypeStruct((32,), dtype=jnp.float32, sharding=NamedSharding(am, P("x")))
        out = shmap.eval_shape(shmap.jit(lambda: jnp.zeros_like(val)))
        assert out.sharding.spec == P("x")
        assert out.shape == (32,)


def test_jnp_full(c, m2):
    """test_jnp_full: jnp.full with out_sharding, a number as fill value (an
    array: the _array test)."""
    with shmap.use_mesh(m2):
        out = jnp.full((8,), 0, out_sharding=P("x"))
        assert out.sharding == NamedSharding(m2, P("x"))
        assert np.array_equal(np.asarray(out), np.zeros((8,)))


def test_jnp_full_array(c, m2):
    """test_jnp_full, its second case: a numpy array as fill value."""
    with shmap.use_mesh(m2):
        out = jnp.full((8,), np.arange(8), out_sharding=P("x"))
        assert out.sharding == NamedSharding(m2, P("x"))
        assert np.array_equal(np.asarray(out), np.arange(8))


def test_select_reduced(c, m2):
    """test_select_reduced: select of reduced operands, gradients unreduced
    (the replicated operands' first)."""
    np_inp = arange_f(16).reshape(8, 2)
    f = shmap.jit(lambda p, t, e: lax.select(p, t, e))
    g = shmap.jit(shmap.grad(lambda x, y, z: f(x, y, z).sum(), argnums=(1, 2)))
    with shmap.use_mesh(m2):
        rep1 = shmap.device_put(np_inp, P())
        rep2 = shmap.device_put(np_inp, P())
        exg2, exg3 = g(rep1 == rep2, rep1, rep2)
        assert np.array_equal(np.asarray(exg2), np.ones((8, 2)))
        assert np.array_equal(np.asarray(exg3), np.zeros((8, 2)))
        arr1 = shmap.device_put(np_inp, P(reduced={"x"}))
        arr2 = shmap.device_put(np_inp, P(reduced={"x"}))
        out = f(arr1 == arr2, arr1, arr2)
        assert out.sharding == NamedSharding(m2, P(None, None, reduced={"x"}))


def test_remat_reduced_transpose(c, m2):
    """test_remat_reduced_transpose: the gradient through remat of the
    identity of a reduced argument (the replicated one's first)."""
    f = shmap.remat(lambda x: x)
    g = shmap.jit(shmap.grad(lambda x: f(x).sum()))
    with shmap.use_mesh(m2):
        assert np.array_equal(np.asarray(g(shmap.device_put(arange_f(8), P()))), np.ones(8))
        g1 = g(shmap.device_put(arange_f(8), P(reduced={"x"})))
        assert g1.sharding == NamedSharding(m2, P(None, unreduced={"x"}))


def test_select_unreduced(c, m2):
    """test_select_unreduced: select of unreduced operands (made by a
    shard_map: see test_split_unreduced_reshard; the gradients, reduced: see
    test_split_unreduced_grad)."""
    np_inp = arange_f(16).reshape(8, 2)
    f = shmap.jit(lambda p, t, e: lax.select(p, t, e))
    with shmap.use_mesh(m2):
        arr1 = unreduced(m2, np_inp)
        arr2 = unreduced(m2, np_inp)
        out = f(True, arr1, arr2)
        assert out.sharding == NamedSharding(m2, P(None, None, unreduced={"x"}))
        assert np.array_equal(np.asarray(shmap.reshard(out, P())), np_inp)


def test_bincount(c, m2):
    """test_bincount: bincount with a replicated out_sharding (unreduced and
    sharded: the tests below)."""
    with shmap.use_mesh(m2):
        a = jnp.ones((4,), dtype=jnp.int32, out_sharding=P("x"))
        out = shmap.jit(lambda x: jnp.bincount(x, length=2, out_sharding=P()))(a)
        assert out.sharding == NamedSharding(m2, P(None))
        assert np.array_equal(np.asarray(out), [0, 4])


def test_bincount_unreduced(c, m2):
    """test_bincount, its unreduced out_sharding: each device counts its
    block."""
    with shmap.use_mesh(m2):
        a = jnp.ones((4,), dtype=jnp.int32, out_sharding=P("x"))
        out = shmap.jit(lambda x: jnp.bincount(x, length=2, out_sharding=P(unreduced={"x"})))(a)
        assert out.sharding == NamedSharding(m2, P(None, unreduced={"x"}))
        for s in out.addressable_shards:
            assert np.array_equal(s.data, [0, 2])


def test_bincount_sharded_error(c, m2):
    """test_bincount, its error: an out_sharding neither replicated nor
    unreduced."""
    with shmap.use_mesh(m2):
        a = jnp.ones((4,), dtype=jnp.int32, out_sharding=P("x"))
        with pytest.raises(shmap.InvalidArgument, match="only be fully replicated or fully "
                           "unreduced"):
            shmap.jit(lambda x: jnp.bincount(x, length=2, out_sharding=P("x")))(a)


def _segment(m4, op, out_s):
    a = c_put(m4, np.arange(8, dtype=np.int32), P("x"))
    b = c_put(m4, np.array([0, 0, 1, 1, 1, 2, 2, 3]), P("x"))
    fn = getattr(shmap.ops, op)
    return shmap.jit(lambda x, y: fn(x, y, num_segments=4, out_sharding=out_s))(a, b)


def test_segment_sum(c, m4):
    """test_segment_sum: a replicated out_sharding (unreduced: below)."""
    with shmap.use_mesh(m4):
        out = _segment(m4, "segment_sum", P())
        assert out.sharding == NamedSharding(m4, P(None))
        assert np.array_equal(np.asarray(out), [1, 9, 11, 7])


def test_segment_sum_unreduced(c, m4):
    """test_segment_sum, its unreduced out_sharding: each device's sums of
    its block."""
    with shmap.use_mesh(m4):
        out = _segment(m4, "segment_sum", P(unreduced={"x"}))
        assert out.sharding == NamedSharding(m4, P(None, unreduced={"x"}))
        for s, ex in zip(out.addressable_shards, [[1, 0, 0, 0], [0, 5, 0, 0], [0, 4, 5, 0],
                                                  [0, 0, 6, 7]]):
            assert np.array_equal(s.data, ex)
        assert np.array_equal(np.asarray(shmap.reshard(out, P())), [1, 9, 11, 7])


@pytest.mark.parametrize("op,want", [("segment_max", [1, 4, 6, 7]),
                                     ("segment_prod", [0, 24, 30, 7])])
def test_segment_max_prod(c, m4, op, want):
    """test_segment_max, test_segment_prod: a replicated out_sharding (an
    unreduced one: below)."""
    with shmap.use_mesh(m4):
        out = _segment(m4, op, P())
        assert out.sharding == NamedSharding(m4, P(None))
        assert np.array_equal(np.asarray(out), want)


def test_segment_max(c, m4):
    """test_segment_max: an unreduced out_sharding is JAX's
    NotImplementedError (a replicated one: test_segment_max_prod)."""
    with shmap.use_mesh(m4):
        with pytest.raises(NotImplementedError):
            _segment(m4, "segment_max", P(unreduced={"x"}))


def test_segment_prod(c, m4):
    """test_segment_prod: an unreduced out_sharding is JAX's
    NotImplementedError (a replicated one: test_segment_max_prod)."""
    with shmap.use_mesh(m4):
        with pytest.raises(NotImplementedError):
            _segment(m4, "segment_prod", P(unreduced={"x"}))


def test_cond_fori_reduced_fwd(c, m2):
    """test_cond_fori_reduced_fwd: grad through a fori_loop of a cond over a
    dataclass of reduced arrays."""
    @shmap.tree_util.register_dataclass
    @dataclasses.dataclass
    class KV:
        k: object
        v: object

    with shmap.use_mesh(m2):
        k = shmap.device_put(np.arange(8.0, dtype=np.float32), P("x"))
        v = shmap.device_put(np.arange(8.0, dtype=np.float32), P("x"))
        kv_obj = KV(shmap.reshard(k, P(reduced={"x"})), shmap.reshard(v, P(reduced={"x"})))

        @shmap.jit
        def f(p1, kv_obj, k, v):
            def body(_, kv_store):
                return lax.cond(p1, lambda: KV(shmap.reshard(k, P(reduced={"x"})),
                                               shmap.reshard(v, P(reduced={"x"}))),
                                lambda: kv_store)
            return lax.fori_loop(0, 10, body, kv_obj)

        shmap.jit(shmap.grad(lambda *x: f(*x).k.sum(), argnums=(1, 2, 3)))(
            jnp.array(True), kv_obj, k, v)  # doesn't crash


def test_triangular_solve_vmap(c, m2):
    """test_triangular_solve_vmap: vmap of solve over rows sharded over x, at
    once and in a jit."""
    with shmap.use_mesh(m2):
        cz = shmap.random.normal(shmap.random.key(0), (32, 32))
        cz = cz + 8 * jnp.eye(32)
        x = shmap.random.normal(shmap.random.key(1), (1024, 32), out_sharding=P("x"))
        want = np.linalg.solve(np.asarray(cz), np.asarray(x).T).T
        out = shmap.vmap(jnp.linalg.solve, in_axes=(None, 0))(cz, x)
        assert np.allclose(np.asarray(out), want, rtol=1e-4, atol=1e-5)
        out = shmap.jit(shmap.vmap(jnp.linalg.solve, in_axes=(None, 0)))(cz, x)
        assert np.allclose(np.asarray(out), want, rtol=1e-4, atol=1e-5)


def test_jnp_matmul_out_sharding_3d(c, m12):
    """test_jnp_matmul_out_sharding_3d: a batched matmul with out_sharding
    P('x'), at once and in a jit."""
    with shmap.use_mesh(m12):
        x = shmap.reshard(jnp.ones((1, 1, 4)), P("x", None, "y"))
        y = shmap.reshard(jnp.ones((1, 4, 2)), P("x", "y", None))

        def f(a, b):
            return jnp.matmul(a, b, out_sharding=P("x"))

        z = f(x, y)
        assert z.sharding == NamedSharding(m12, P("x", None, None))
        assert np.array_equal(np.asarray(z), np.full((1, 1, 2), 4.0))
        z2 = shmap.jit(f)(x, y)
        assert z2.sharding == NamedSharding(m12, P("x", None, None))


def test_jnp_matmul_out_sharding_unreduced(c, m12):
    """test_jnp_matmul_out_sharding_unreduced (the product's type in the
    trace, not the jaxpr's equations nor the compiled HLO text): a batched
    matmul left unreduced over y."""
    np1 = np.ones((1, 1, 4), np.float32)
    np2 = np.ones((1, 4, 2), np.float32)
    seen = []

    @shmap.jit
    def f(a, b):
        out = jnp.matmul(a, b, out_sharding=P("x", unreduced={"y"}))
        seen.append(shmap.typeof(out).sharding.spec)
        return out

    with shmap.use_mesh(m12):
        x = shmap.reshard(np1, P("x", None, "y"))
        y = shmap.reshard(np2, P("x", "y", None))
        z = f(x, y)
        assert z.sharding == NamedSharding(m12, P("x", None, None, unreduced={"y"}))
        assert np.array_equal(np.asarray(shmap.reshard(z, P("x"))), np1 @ np2)
        assert seen == [P("x", None, None, unreduced={"y"})]


def test_slice_unreduced(c, m2):
    """test_slice_unreduced: lax.slice of an unreduced array (made by a
    shard_map: see test_split_unreduced_reshard; its gradient, reduced: see
    test_split_unreduced_grad)."""
    np_inp = np.arange(16.).reshape(4, 4)
    f = shmap.jit(lambda x: lax.slice(x, (0, 0), (4, 3)))
    with shmap.use_mesh(m2):
        out = f(unreduced(m2, np_inp))
        assert out.sharding == NamedSharding(m2, P(None, None, unreduced={"x"}))
        assert np.array_equal(np.asarray(shmap.reshard(out, P())), np_inp[:, :3])


def test_slice_reduced(c, m2):
    """test_slice_reduced: lax.slice of a reduced array (the replicated
    array's gradient first)."""
    np_inp = arange_f(16).reshape(4, 4)
    f = shmap.jit(lambda x: lax.slice(x, (0, 0), (4, 3)))
    with shmap.use_mesh(m2):
        expected = shmap.jit(shmap.grad(lambda x: f(x).sum()))(jnp.arange(16.).reshape(4, 4))
        assert np.array_equal(np.asarray(expected), np.repeat([[1., 1., 1., 0.]], 4, axis=0))
        out = f(shmap.device_put(np_inp, P(reduced={"x"})))
        assert out.sharding == NamedSharding(m2, P(None, None, reduced={"x"}))


def test_percentile(c, m2):
    """test_percentile: the median of an array sharded over x, replicated by
    out_sharding."""
    with shmap.use_mesh(m2):
        arr = shmap.device_put(np.arange(100), P("x"))
        out = shmap.jit(lambda x: jnp.percentile(x, 50, axis=0, out_sharding=P()))(arr)
        assert out.sharding == NamedSharding(m2, P())
        assert np.asarray(out) == np.percentile(np.arange(100), 50)


def test_jnp_roll(c, m22):
    """test_jnp_roll: vmap of a jit rolling by a batched shift; the rolled
    axis sharded: JAX's sentence."""
    x_np = np.arange(64).reshape(8, 4, 2)
    gap_np = np.arange(16).reshape(8, 2)
    shift_right = shmap.jit(lambda x, gap: jnp.roll(x, gap, axis=1))
    with shmap.use_mesh(m22):
        arr = shmap.device_put(x_np, P("x", "y", None))
        arr2 = shmap.device_put(gap_np, P("x", None))
        out = shmap.vmap(shift_right)(arr, arr2)
        want = np.stack([np.roll(x_np[i], tuple(gap_np[i]), axis=(1, 1)) for i in range(8)])
        assert np.array_equal(np.asarray(out), want)
        assert np.array_equal(np.asarray(shmap.jit(shmap.vmap(shift_right))(arr, arr2)), want)
        with pytest.raises(shmap.InvalidArgument,
                           match="`a` cannot be sharded on the axis being rolled over"):
            arr3 = shmap.device_put(x_np, P("x", None, "y"))
            shmap.vmap(shift_right)(arr3, arr2)


def test_vmap_dot_out_sharding_hessian(c, m11):
    """test_vmap_dot_out_sharding_hessian: the hessian of a summed einsum
    with out_sharding, at once and in a jit."""
    def g(q, k):
        return jnp.sum(jnp.einsum("blhd,bmhd->bhlm", q, k, out_sharding=P()))

    def hess_g(q, k):
        return shmap.hessian(g, argnums=0)(q, k)

    with shmap.use_mesh(m11):
        q = jnp.ones((1, 7, 3, 4))
        k = jnp.ones((1, 7, 3, 4))
        h1 = hess_g(q, k)
        h2 = shmap.jit(hess_g)(q, k)
        assert np.array_equal(np.asarray(h1), np.zeros((1, 7, 3, 4, 1, 7, 3, 4)))
        assert np.array_equal(np.asarray(h2), np.asarray(h1))


def test_sort_grad(c, m2):
    """test_sort_grad: grad of sum(argsort(x) * x), rows sharded over x, at
    once and in a jit: the argsort's indices."""
    with shmap.use_mesh(m2):
        x = shmap.random.normal(shmap.random.key(1), (1024, 32), out_sharding=P("x"))

        @shmap.grad
        def f(x):
            xi = jnp.argsort(x, axis=1)
            return jnp.sum(xi * x)

        want = np.argsort(np.asarray(x), axis=1)
        assert np.array_equal(np.asarray(f(x)), want)
        assert np.array_equal(np.asarray(shmap.jit(f)(x)), want)


def test_device_put_unreduced_via_runtime_transfer(c, m2):
    """test_device_put_unreduced_via_runtime_transfer: a product unreduced
    over x put on another mesh of two devices, unreduced, its shards
    copied."""
    mesh2 = shmap.Mesh((2,), ("x",), c.devices()[4:6], axis_types=(shmap.Explicit,))
    with shmap.use_mesh(m2):
        arr1 = shmap.device_put(np.arange(8).reshape(2, 4), NamedSharding(m2, P(None, "x")))
        arr2 = shmap.device_put(np.arange(8).reshape(4, 2), NamedSharding(m2, P("x", None)))
        x = jnp.dot(arr1, arr2, out_sharding=NamedSharding(m2, P(unreduced={"x"})))
        out = shmap.device_put(x, NamedSharding(mesh2, P(unreduced={"x"})))
        assert out.sharding.mesh == mesh2 and out.sharding.spec.unreduced == {"x"}
        for s1, s2 in zip(x.addressable_shards, out.addressable_shards):
            assert np.array_equal(s1.data, s2.data)
        assert not np.array_equal(out.addressable_shards[0].data, out.addressable_shards[1].data)
        assert np.array_equal(np.asarray(shmap.reshard(x, NamedSharding(m2, P()))),
                              np.asarray(shmap.reshard(out, NamedSharding(mesh2, P()))))


def test_device_put_unreduced_via_jit(c, m2):
    """test_device_put_unreduced_via_jit: device_put of a replicated array
    to unreduced: the first device holds it, the other zeros; to the kind
    max: JAX's NotImplementedError."""
    with shmap.use_mesh(m2):
        arr = jnp.arange(4)
        out = shmap.device_put(arr, P(unreduced={"x"}))
        for s, ex_s in zip(out.addressable_shards, [np.arange(4), np.zeros((4,))]):
            assert np.array_equal(s.data, ex_s)
        with pytest.raises(NotImplementedError):
            shmap.device_put(arr, P(unreduced={"x"}, unreduced_kind=UnreducedKind.max))


def test_one_hot_out_sharding(c, m22):
    """test_one_hot_out_sharding: one_hot with out_sharding, the input's
    part of the spec checked."""
    oh = shmap.jit(lambda x, s: shmap.nn.one_hot(x, 4, out_sharding=s), static_argnums=1)
    with shmap.use_mesh(m22):
        arr = shmap.device_put(np.arange(4).reshape(2, 2), P("x"))
        out = oh(arr, P("x", None, "y"))
        assert out.sharding == NamedSharding(m22, P("x", None, "y"))
        assert np.array_equal(np.asarray(out), np.eye(4)[np.arange(4).reshape(2, 2)])
        with pytest.raises(shmap.InvalidArgument, match="The input part of spec in "
                           "out_sharding should match the spec of `x`"):
            oh(arr, P("y", None, None))


def test_slice_fully_replicated(c, m2):
    """test_slice_fully_replicated: x[0, 0] of an array sharded over x is
    replicated."""
    with shmap.use_mesh(m2):
        arr = shmap.device_put(np.arange(8).reshape(4, 2), P("x", None))
        out = shmap.jit(lambda x: x[0, 0])(arr)
        assert out.sharding == NamedSharding(m2, P())
        assert np.asarray(out) == 0


def test_dot_unreduced_max_error(c, m2):
    """test_dot_unreduced_max_error: a dot's out_sharding unreduced with
    the kind max: JAX's ValueError."""
    np_inp = np.arange(16).reshape(8, 2)
    with shmap.use_mesh(m2):
        x = shmap.device_put(np_inp, P(None, "x"))
        y = shmap.device_put(np_inp.T, P("x", None))
        with pytest.raises(ValueError, match="`out_sharding` passed to `dot_general`"):
            jnp.dot(x, y, out_sharding=P(unreduced={"x"}, unreduced_kind=UnreducedKind.max))


MAX_MIN = [pytest.param("max", UnreducedKind.max, [[2, 3], [6, 7]], id="max"),
           pytest.param("min", UnreducedKind.min, [[0, 1], [4, 5]], id="min")]


@pytest.mark.parametrize("op,u_kind,unreduced_vals", MAX_MIN)
def test_reduce_max_min_unreduced_basic(c, m2, op, u_kind, unreduced_vals):
    """test_reduce_max_min_unreduced_basic: reduce_max (min) over a
    dimension sharded over x, its result unreduced of the kind max (min):
    each device's block the max (min) of its rows; resharded, the max."""
    np_inp = np.arange(8.).reshape(4, 2)
    lax_op = getattr(lax, f"reduce_{op}")
    out_spec = P(None, unreduced={"x"}, unreduced_kind=u_kind)
    seen = []

    @shmap.jit
    def f(x):
        out = lax_op(x, axes=(0,), out_sharding=out_spec)
        seen.append(shmap.typeof(out).sharding.spec)
        return out

    with shmap.use_mesh(m2):
        arr = shmap.device_put(np_inp, P("x", None))
        out = f(arr)
        assert seen == [out_spec]
        assert out.sharding == NamedSharding(m2, out_spec)
        for s, ex_s in zip(out.addressable_shards, unreduced_vals):
            assert s.data.shape == (2,)
            assert np.array_equal(s.data, ex_s)
        reshard_out = shmap.reshard(out, P())
        assert np.array_equal(np.asarray(reshard_out), getattr(np_inp, op)(axis=0))


@pytest.mark.parametrize("op,u_kind,unreduced_vals", MAX_MIN)
def test_reduce_max_min_unreduced_complex(c, m22, op, u_kind, unreduced_vals):
    """test_reduce_max_min_unreduced_complex: reduce_max (min) over two
    dimensions sharded over x and y, unreduced over x."""
    np_inp = np.arange(16).reshape(4, 2, 2)
    lax_op = getattr(lax, f"reduce_{op}")
    out_spec = P(None, unreduced={"x"}, unreduced_kind=u_kind)
    seen = []

    @shmap.jit
    def f(x):
        out = lax_op(x, axes=(0, 1), out_sharding=out_spec)
        seen.append(shmap.typeof(out).sharding.spec)
        return out

    with shmap.use_mesh(m22):
        arr = shmap.device_put(np_inp, P("x", "y", None))
        out = f(arr)
        assert seen == [out_spec]
        assert out.sharding == NamedSharding(m22, out_spec)
        for s in out.addressable_shards:
            assert s.data.shape == (2,)
        reshard_out = shmap.reshard(out, P(None))
        assert np.array_equal(np.asarray(reshard_out), getattr(np_inp, op)(axis=(0, 1)))


def test_reduce_max_unreduced_partial_reduction(c, m22):
    """test_reduce_max_unreduced_partial_reduction: reduce_max unreduced of
    the kind max over x and y, resharded to over x only (a pmax over y);
    to a kind of sum: JAX's ValueError; over one dimension, unreduced over
    one axis and sharded over the other, and resharded."""
    inp = np.arange(8).reshape(4, 2)
    with shmap.use_mesh(m22):
        arr = shmap.device_put(inp, P("x", "y"))

        @shmap.jit
        def f(x):
            y = lax.reduce_max(x, axes=[0, 1], out_sharding=P(unreduced={"x", "y"},
                                                              unreduced_kind=UnreducedKind.max))
            return shmap.reshard(y, P(unreduced={"x"}, unreduced_kind=UnreducedKind.max))

        out = f(arr)
        assert out.sharding == NamedSharding(m22, P(unreduced={"x"},
                                                    unreduced_kind=UnreducedKind.max))
        for s, ex_s in zip(out.addressable_shards, [3, 3, 7, 7]):
            assert np.array_equal(s.data, ex_s)
        assert np.array_equal(np.asarray(shmap.reshard(out, P())), inp.max())

        @shmap.jit
        def f2(x):
            y = lax.reduce_max(x, axes=[0, 1], out_sharding=P(unreduced={"x", "y"},
                                                              unreduced_kind=UnreducedKind.max))
            return shmap.reshard(y, P(unreduced={"x"}))

        with pytest.raises(ValueError, match="The unreduced_kind of input and output sharding "
                           "passed to `jax.reshard` should be the same"):
            f2(arr)

        @shmap.jit
        def g(x):
            return lax.reduce_max(x, axes=[0], out_sharding=P("y", unreduced={"x"},
                                                              unreduced_kind=UnreducedKind.max))

        out = g(arr)
        for s, ex_s in zip(out.addressable_shards, [[2], [3], [6], [7]]):
            assert np.array_equal(s.data, ex_s)
        resharded_out = shmap.reshard(out, P("y"))
        for s, ex_s in zip(resharded_out.addressable_shards, [[6], [7], [6], [7]]):
            assert np.array_equal(s.data, ex_s)
        assert np.array_equal(np.asarray(resharded_out), inp.max(axis=0))

        @shmap.jit
        def h(x):
            return lax.reduce_max(x, axes=[1], out_sharding=P("x", unreduced={"y"},
                                                              unreduced_kind=UnreducedKind.max))

        out = h(arr)
        for s, ex_s in zip(out.addressable_shards, [[0, 2], [1, 3], [4, 6], [5, 7]]):
            assert np.array_equal(s.data, ex_s)
        resharded_out = shmap.reshard(out, P("x"))
        for s, ex_s in zip(resharded_out.addressable_shards, [[1, 3], [1, 3], [5, 7], [5, 7]]):
            assert np.array_equal(s.data, ex_s)
        assert np.array_equal(np.asarray(resharded_out), inp.max(axis=1))


def test_reduce_max_unreduced_reduce_scatter(c, m2):
    """test_reduce_max_unreduced_reduce_scatter: reduce_max unreduced of the
    kind max, resharded to P('x')."""
    with shmap.use_mesh(m2):
        arr = shmap.device_put(np.arange(8).reshape(4, 2), P("x"))

        @shmap.jit
        def f(x):
            y = lax.reduce_max(x, axes=[0], out_sharding=P(unreduced={"x"},
                                                           unreduced_kind=UnreducedKind.max))
            return shmap.reshard(y, P("x"))

        out = f(arr)
        assert out.sharding == NamedSharding(m2, P("x"))
        for s, ex_s in zip(out.addressable_shards, [[6], [7]]):
            assert np.array_equal(s.data, ex_s)
        assert np.array_equal(np.asarray(out), [6, 7])


def test_reshard_unreduced_max_error(c, m2):
    """test_reshard_unreduced_max_error: a reshard to unreduced of the kind
    max: JAX's ValueError (of a replicated and of a sharded array)."""
    with shmap.use_mesh(m2):
        with pytest.raises(ValueError, match="out_sharding.*cannot be more unreduced than the "
                           "input"):
            shmap.reshard(jnp.arange(8), P(unreduced={"x"}, unreduced_kind=UnreducedKind.max))
        arr2 = shmap.device_put(np.arange(8), P("x"))
        with pytest.raises(ValueError, match="out_sharding.*cannot be more unreduced than the "
                           "input"):
            shmap.reshard(arr2, P(unreduced={"x"}, unreduced_kind=UnreducedKind.max))


def test_reshape_preserve_singleton_dim_spec(c, m12):
    """test_reshape_preserve_singleton_dim_spec: a reshape keeps the spec of
    a dimension of size 1, through an empty slice and a concatenate, and
    back."""
    seen = []

    @shmap.jit
    def f(x):
        y = x.reshape(1, 4, 128)
        seen.append(shmap.typeof(y).sharding.spec)
        z = y[..., :0]
        seen.append(shmap.typeof(z).sharding.spec)
        out = jnp.concatenate([y, z], axis=-1)
        seen.append(shmap.typeof(out).sharding.spec)
        return out

    @shmap.jit
    def merge(x):
        out = x.reshape(1, 512)
        seen.append(shmap.typeof(out).sharding.spec)
        return out

    with shmap.use_mesh(m12):
        arr = shmap.device_put(np.ones((1, 512), np.float32), P("x", "y"))
        out = f(arr)
        assert out.sharding == NamedSharding(m12, P("x", "y", None))
        assert seen == [P("x", "y", None)] * 3
        out2 = merge(out)
        assert out2.sharding == NamedSharding(m12, P("x", "y"))
        assert seen[3] == P("x", "y")
        assert np.array_equal(np.asarray(out2), np.ones((1, 512)))


def test_reduce_max_reduced_shmap(c, m2):
    """test_reduce_max_reduced_shmap: max of an all_gather to reduced in a
    shard_map (the invariant all_gather's gradient first)."""
    with shmap.use_mesh(m2):
        arr = shmap.device_put(arange_f(8), P("x"))

        @shmap.jit
        @shmap.shard_map(out_specs=P())
        def g(x):
            y = lax.all_gather(x, axis_name="x", axis=0, tiled=True, to="invarying")
            return jnp.max(y, axis=0)

        ex_out_g = shmap.jit(shmap.grad(g))(arr)
        assert np.array_equal(np.asarray(ex_out_g), np.eye(8)[7])

        @shmap.jit
        @shmap.shard_map(out_specs=P(reduced={"x"}))
        def f(x):
            y = lax.all_gather(x, axis_name="x", axis=0, tiled=True, to="reduced")
            return jnp.max(y, axis=0)

        assert f(arr).sharding == NamedSharding(m2, P(reduced={"x"}))


def test_reduce_max_reduced_reshard(c, m2):
    """test_reduce_max_reduced_reshard: max of an array resharded to reduced
    (the replicated reshard's gradient first)."""
    with shmap.use_mesh(m2):
        arr = shmap.device_put(arange_f(8), P("x"))
        g = shmap.jit(lambda x: jnp.max(shmap.reshard(x, P()), axis=0))
        ex_out_g = shmap.jit(shmap.grad(g))(arr)
        assert ex_out_g.sharding == NamedSharding(m2, P("x"))
        assert np.array_equal(np.asarray(ex_out_g), np.eye(8)[7])
        f = shmap.jit(lambda x: jnp.max(shmap.reshard(x, P(reduced={"x"})), axis=0))
        assert f(arr).sharding == NamedSharding(m2, P(reduced={"x"}))


def test_div_reduced_fwd_unreduced_bwd(c, m2):
    """test_div_reduced_fwd_unreduced_bwd: a quotient of reduced arrays (the
    replicated arrays' gradient first)."""
    a1, a2 = arange_f(8), np.arange(1, 9, dtype=np.float32)
    f = shmap.jit(lambda x, y: x / y)
    loss = shmap.jit(lambda x, y: f(x, y).sum())
    with shmap.use_mesh(m2):
        ex_out_g1 = shmap.jit(shmap.grad(loss))(shmap.device_put(a1, P()),
                                                shmap.device_put(a2, P()))
        assert np.allclose(np.asarray(ex_out_g1), 1 / a2)
        out = f(shmap.device_put(a1, P(reduced={"x"})), shmap.device_put(a2, P(reduced={"x"})))
        assert out.sharding == NamedSharding(m2, P(None, reduced={"x"}))


def test_div_unreduced_fwd_reduced_bwd(c, m2):
    """test_div_unreduced_fwd_reduced_bwd: an unreduced array (made by a
    shard_map: see test_split_unreduced_reshard) divided by a reduced one
    (the replicated arrays' gradient first)."""
    a1, a2 = arange_f(8), np.arange(1, 9, dtype=np.float32)
    f = shmap.jit(lambda x, y: x / y)
    loss = shmap.jit(lambda x, y: f(x, y).sum())
    with shmap.use_mesh(m2):
        ex_out_g1 = shmap.jit(shmap.grad(loss))(shmap.device_put(a1, P()),
                                                shmap.device_put(a2, P()))
        assert np.allclose(np.asarray(ex_out_g1), 1 / a2)
        arr1 = unreduced(m2, a1)
        arr2 = shmap.device_put(a2, P(reduced={"x"}))
        out = f(arr1, arr2)
        assert out.sharding == NamedSharding(m2, P(None, unreduced={"x"}))


def test_div_unreduced_fwd_reduced_bwd_error(c, m2):
    """test_div_unreduced_fwd_reduced_bwd, its error: an unreduced
    denominator."""
    with shmap.use_mesh(m2):
        arr1 = unreduced(m2, arange_f(8))
        with pytest.raises(ValueError, match="The denominator cannot be unreduced passed to "
                           "`div`"):
            shmap.jit(lambda x, y: x / y)(arr1, arr1)
