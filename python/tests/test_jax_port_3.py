"""JAX's shard_map tests (tests/shard_map_test.py, from test_rewrite_process_call
to test_pmax_vma_in_types) run against shmap: custom_jvp / custom_vjp in a
shard_map body, transposes of collectives, varying axes (vma) in the types,
unreduced values, partial-manual (partial-auto) shard_maps, in_specs of None,
grad, jacrev and vmap through shard_map, and JAX's exception types and
sentences where it refuses. Values against numpy, exactly where JAX's tests
are exact. Runs on the cluster of conftest's c."""
import math

import numpy as np
import pytest

import shmap
from shmap import P, NamedSharding
from shmap import lax
from shmap import numpy as jnp

from _util import put


AUTO, EXPLICIT = shmap.Auto, shmap.Explicit


@pytest.fixture(scope="module")
def meshes(c):
    """meshes(shape, names, explicit=False): a mesh of the cluster's default
    order, its axes Auto (jtu.create_mesh's) unless explicit; made once."""
    made = {}

    def get(shape, names, explicit=False):
        key = (tuple(shape), tuple(names), explicit)
        if key not in made:
            t = EXPLICIT if explicit else AUTO
            made[key] = c.make_mesh(tuple(shape), tuple(names), axis_types=(t,) * len(shape))
        return made[key]
    return get


def sm(f, mesh, in_specs, out_specs, **kw):
    return shmap.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, **kw)


X4 = np.arange(4.0, dtype=np.float32)


@pytest.mark.parametrize("jit", [True, False])
def test_rewrite_process_custom_jvp_call(c, meshes, jit):
    """test_rewrite_process_custom_jvp_call."""
    @shmap.custom_jvp
    def foo(x):
        return 2. * x

    @foo.defjvp
    def foo_jvp(primals, tangents):
        (x,), (x_dot,) = primals, tangents
        return foo(x), 2. * x_dot

    mesh = meshes((4,), ("x",))
    g = sm(lambda x: foo(x) * x, mesh, (P("x"),), P("x"))
    if jit:
        g = shmap.jit(g)
    x = put(c, mesh, X4)
    assert np.array_equal(np.asarray(g(x)), 2 * X4 * X4)
    # its jvp: test_jvp_through_shard_map below


def test_jvp_through_shard_map(c, meshes):
    """test_rewrite_process_custom_jvp_call's jax.jvp(g, (x,), (3 * x,)),
    reduced to a shard_map without custom_jvp."""
    mesh = meshes((4,), ("x",))
    g = sm(lambda x: 2. * x * x, mesh, (P("x"),), P("x"))
    x = put(c, mesh, X4)
    y2, y_dot = shmap.jvp(g, (x,), (put(c, mesh, 3 * X4),))
    assert np.array_equal(np.asarray(y2), 2 * X4 * X4)
    assert np.array_equal(np.asarray(y_dot), 2 * 2 * 3 * X4 * X4)


def _foo_vjp(bwd):
    @shmap.custom_vjp
    def foo(x):
        return 2. * x

    foo.defvjp(lambda x: (foo(x), None), bwd)
    return foo


def _value_and_grad_x4(c, meshes, body, jit, x_bar):
    """A shard_map of body over 4 devices (a jit of it when jit) on X4: its
    value 2 * X4 * X4, and the gradient of its sum x_bar."""
    mesh = meshes((4,), ("x",))
    g = sm(body, mesh, (P("x"),), P("x"))
    if jit:
        g = shmap.jit(g)
    x = put(c, mesh, X4)
    assert np.array_equal(np.asarray(g(x)), 2 * X4 * X4)
    y_, got = shmap.value_and_grad(lambda x: g(x).sum())(x)
    assert float(y_) == (2 * X4 * X4).sum()
    assert np.array_equal(np.asarray(got), x_bar)


@pytest.mark.parametrize("jit", [True, False])
def test_rewrite_process_custom_vjp_call(c, meshes, jit):
    """test_rewrite_process_custom_vjp_call."""
    foo = _foo_vjp(lambda _, y_bar: (2. * y_bar,))
    _value_and_grad_x4(c, meshes, lambda x: foo(x) * x, jit, 2 * 2 * X4)


@pytest.mark.parametrize("jit", [True, False])
def test_rewrite_process_custom_vjp_call_match_more_replicated(c, meshes, jit):
    """test_rewrite_process_custom_vjp_call_match_more_replicated: a bwd
    whose cotangent is more replicated than the primal."""
    foo = _foo_vjp(lambda _, y_bar: (jnp.ones_like(y_bar),))
    _value_and_grad_x4(c, meshes, lambda x: foo(x) * x, jit, np.ones(4) + 2 * X4)


def test_same_pspec_eager_shard_map(c, meshes):
    """test_same_pspec_eager_shard_map: the result's spec is the in_spec,
    size-1 axes kept."""
    mesh = meshes((1, 4, 1), ("data", "seq", "model"))
    spec = P("data", "seq", "model")
    x = put(c, mesh, np.ones((2, 16, 4), np.float32), spec)
    y = sm(lambda x: x * x + 2, mesh, spec, spec)(x)
    assert y.sharding.spec == spec
    assert np.array_equal(np.asarray(y), np.full((2, 16, 4), 3, np.float32))


@pytest.mark.parametrize("jit", [True, False])
def test_rewrite_custom_vjp_call_jaxpr(c, meshes, jit):
    """test_rewrite_custom_vjp_call_jaxpr: a custom_vjp function in a scan
    in the body."""
    foo = _foo_vjp(lambda _, y_bar: (2. * y_bar,))

    def foo_scan(x):
        y, _ = lax.scan(lambda x, _: (foo(x), None), x, None, length=1)
        return y

    _value_and_grad_x4(c, meshes, lambda x: foo_scan(x) * x, jit, 2 * 2 * X4)


def test_pvary(c, meshes):
    """test_pvary: pcast(to='varying') makes the value vary over 'x'; its
    transpose sums the cotangents of the four devices."""
    mesh = meshes((4,), ("x",))
    seen = []

    def body(x):
        y = lax.pcast(x, "x", to="varying")
        seen.append(shmap.typeof(y).vma)
        return y

    f = sm(body, mesh, P(), P("x"))
    x = put(c, mesh, np.arange(8.0, dtype=np.float32))
    assert np.array_equal(np.asarray(f(x)), np.tile(np.arange(8.0), 4))
    assert seen[-1] == {"x"}
    g = shmap.grad(lambda x: f(x).sum())(x)
    assert np.array_equal(np.asarray(g), np.full(8, 4.0))


def test_pcast_axis_name_is_not_set(c, meshes):
    """test_pcast_axis_name_is_not_set: a set of axis names is refused with
    JAX's TypeError (its out_specs=None: test_out_specs_none below)."""
    mesh = meshes((2,), ("x",), explicit=True)

    def f(x):
        with pytest.raises(TypeError, match="must be a tuple or a str"):
            lax.pcast(x, {"x"}, to="varying")
        return x

    sm(f, mesh, P(), P())(np.arange(8.))


def test_out_specs_none(c, meshes):
    """test_pcast_axis_name_is_not_set's shard_map: out_specs=None, the
    body returning None, at once and in a jit."""
    mesh = meshes((2,), ("x",), explicit=True)
    x = np.arange(8.)
    assert sm(lambda x: None, mesh, P(), None)(x) is None
    assert shmap.jit(sm(lambda x: None, mesh, P(), None))(x) is None


def test_check_rep_false_grads(c, meshes):
    """test_check_rep_false_grads: grads through a shard_map with
    check_vma=False whose replicated inputs broadcast against a sharded one."""
    mesh = meshes((4,), ("heads",))
    q_spec, kv_spec = P("heads", None), P(None)

    def f(q, k, v):
        out = sm(lambda q, k, v: q * k[None, :] + v[None, :], mesh, (q_spec, kv_spec, kv_spec),
                 q_spec, check_vma=False)(q, k, v)
        return out.sum()

    qv, kv = np.arange(32.0, dtype=np.float32).reshape(4, 8), np.arange(8.0, dtype=np.float32)
    q, k, v = put(c, mesh, qv, q_spec), put(c, mesh, kv, kv_spec), put(c, mesh, kv, kv_spec)
    assert float(f(q, k, v)) == (qv * kv + kv).sum()
    dq, dk, dv = shmap.grad(f, argnums=(0, 1, 2))(q, k, v)
    assert np.array_equal(np.asarray(dq), np.broadcast_to(kv, (4, 8)))
    assert np.array_equal(np.asarray(dk), qv.sum(axis=0))
    assert np.array_equal(np.asarray(dv), np.full(8, 4.0))


def test_axis_env_extension_regression(c, meshes):
    """test_axis_env_extension_regression: grad of a remat'd shard_map
    (a policy given) with axis_index in the body."""
    mesh = meshes((8,), ("x",))

    def foo(x):
        return jnp.exp(x) + lax.axis_index("x").astype(x.dtype)

    @shmap.remat(policy=lambda *args, **kwargs: True)
    def bar(x):
        return sm(foo, mesh, (P("x"),), P("x"), check_vma=False)(x)

    x = np.arange(8.0, dtype=np.float32)
    g = shmap.jit(shmap.grad(lambda x: bar(x).sum()))(put(c, mesh, x))
    assert np.allclose(np.asarray(g), np.exp(x), rtol=1e-6)


def test_res_forwarding_optimization_2(c, meshes):
    """test_res_forwarding_optimization_2: grad of a remat'd function of the
    second of two shard_map results."""
    mesh = meshes((4,), ("i",))
    f = sm(lambda x: (lax.exp(x), lax.exp(x)), mesh, P("i"), P("i"))
    g = shmap.remat(lambda x: f(x)[1].sum(),
                    policy=lambda *_, **__: True)
    x = np.arange(16.0, dtype=np.float32)
    assert np.allclose(np.asarray(shmap.grad(g)(put(c, mesh, x))), np.exp(x), rtol=1e-6)


@pytest.mark.parametrize("jit", [True, False])
def test_check_rep_failure_inside_rule(c, meshes, jit):
    """test_check_rep_failure_inside_rule: grad with respect to a value the
    shard_map function closes over."""
    mesh = meshes((4,), ("i",))

    def loss(w, x):
        f = sm(lambda x: lax.psum(((w * x) ** 2).sum(), "i"), mesh, P("i"), P())
        return f(x)

    if jit:
        loss = shmap.jit(loss)
    x = np.arange(8.0, dtype=np.float32)
    g = shmap.grad(loss)(3.0, put(c, mesh, x))
    assert float(g) == 2 * 3.0 * (x * x).sum()


def test_conv_general_dilated(c, meshes):
    """test_conv_general_dilated: a convolution of no spatial dimensions
    (a product) over blocks, summed."""
    mesh = meshes((4,), ("i",))
    dot = lambda x, y: lax.conv_general_dilated(  # noqa: E731
        x, y, window_strides=(), padding="VALID", dimension_numbers=("NC", "IO", "NC"))
    f = sm(lambda x, y: lax.psum(dot(x, y), "i"), mesh, (P(None, "i"), P("i", None)),
           P(None, None))
    a, b = np.ones((16, 32), np.float32), np.ones((32, 8), np.float32)
    y = f(put(c, mesh, a, P(None, "i")), put(c, mesh, b, P("i", None)))
    assert np.array_equal(np.asarray(y), a @ b)


def test_cumsum(c, meshes):
    """test_cumsum: jnp.cumsum as the body: each block's running sum."""
    mesh = meshes((4,), ("i",))
    y = sm(jnp.cumsum, mesh, P("i"), P("i"))(np.arange(8.0, dtype=np.float32))
    assert np.array_equal(np.asarray(y), np.cumsum(np.arange(8.0).reshape(4, 2), 1).ravel())


def test_custom_jvp_inside_jit(c, meshes):
    """test_custom_jvp_inside_jit: a jit of nn.relu (a custom_jvp in JAX) as
    the body."""
    mesh = meshes((4,), ("batch",))
    x = np.arange(16.0, dtype=np.float32) - 8
    y = sm(shmap.jit(shmap.nn.relu), mesh, P("batch"), P("batch"))(x)
    assert np.array_equal(np.asarray(y), np.maximum(x, 0))


def test_random_normal_rules(c, meshes):
    """test_random_normal_rules: keys sharded over the mesh, a normal draw
    from each block's key."""
    mesh = meshes((4,), ("i",))
    keys = shmap.random.split(shmap.random.key(0), 4)
    y = sm(lambda k: shmap.random.normal(k[0], (1,)), mesh, P("i"), P("i"))(keys)
    want = np.concatenate([np.asarray(shmap.random.normal(keys[i], (1,))) for i in range(4)])
    assert np.allclose(np.asarray(y), want, rtol=1e-6)


def test_erf_rules(c, meshes):
    """test_erf_rules: lax.erf as the body."""
    mesh = meshes((4,), ("i",))
    x = np.arange(16.0, dtype=np.float32) / 8 - 1
    y = sm(lax.erf, mesh, P("i"), P("i"))(x)
    assert np.allclose(np.asarray(y), [math.erf(v) for v in x], rtol=1e-6, atol=1e-7)


def test_error_for_variable_num_args(c, meshes):
    """test_error_for_variable_num_args: in_specs longer than the rank of
    a function of *args, JAX's ValueError naming the function."""
    mesh = meshes((2, 2), ("x", "y"))

    def f(*args):
        return args[0] @ args[1]

    shard_f = sm(f, mesh, (P("x", "y", None), P("x", "y", None)), P("x", "y"))
    with pytest.raises(ValueError, match="shard_map applied to the function 'f'"):
        shard_f(np.ones((8, 8), np.float32), np.ones((8, 8), np.float32))


def test_custom_vjp_replication_error_message_hint(c, meshes):
    """test_custom_vjp_replication_error_message_hint: a bwd rule whose
    cotangent does not vary as its primal input does."""
    mesh = meshes((4,), ("i",))

    @shmap.custom_vjp
    def f(x):
        return lax.psum(x, "i")

    f.defvjp(lambda x: (f(x), None), lambda _, g: (lax.psum(g, "i"),))
    g = sm(lambda x: f(f(x)), mesh, P("i"), P())
    with pytest.raises(ValueError, match=r"Custom VJP bwd rule attached to f.*must produce an "
                                         r"output with the same type"):
        shmap.value_and_grad(lambda x: g(x).sum())(put(c, mesh, np.ones(4, np.float32)))


def test_repeated_psum_allowed(c, meshes):
    """test_repeated_psum_allowed: a psum of a psum (jax-ml/jax#19175)."""
    mesh = meshes((4,), ("i",))
    y = sm(lambda x: lax.psum(lax.psum(x, "i"), "i"), mesh, P("i"), P())(X4)
    assert np.array_equal(np.asarray(y), [X4.sum() * 4])


def test_approx_top_k(c):
    """test_approx_top_k: approx_max_k of each block, on a mesh of 2 devices."""
    mesh = c.make_mesh((2,), ("i",), axis_types=(AUTO,))
    x = np.array([3.0, 1.0, 4.0, 2.0], np.float32)
    vals, idx = sm(lambda x: lax.approx_max_k(x, 2), mesh, P("i"), P("i"))(x)
    assert np.array_equal(np.asarray(vals), [3, 1, 4, 2])
    assert np.array_equal(np.asarray(idx), [0, 1, 0, 1])


def test_jacrev_explicit(c, meshes):
    """test_jacrev_explicit: jacrev in a shard_map body (its mesh the
    context's, an Explicit one), each block's Jacobian."""
    mesh = meshes((2,), ("x",), explicit=True)
    B, N, H = 20, 6, 8
    wv = np.arange(N * H, dtype=np.float32).reshape(N, H)
    xv = np.arange(B * N, dtype=np.float32).reshape(B, N)

    def f(w, x):
        return jnp.sum(x @ w, axis=-1)

    with shmap.use_mesh(mesh):
        w, x = shmap.device_put(wv, P()), shmap.device_put(xv, P("x"))
        f_jac_sharded = shmap.jit(shmap.shard_map(lambda w, x: shmap.jacrev(f, argnums=1)(w, x),
                                                  in_specs=(P(), P("x", None)),
                                                  out_specs=P("x", None)))
        jac = np.asarray(f_jac_sharded(w, x))
    want = np.einsum("ab,n->abn", np.tile(np.eye(B // 2), (2, 1)), wv.sum(axis=1))
    assert jac.shape == (B, B // 2, N) and np.array_equal(jac, want)


def test_jacrev_explicit_complex(c, meshes):
    """test_jacrev_explicit_complex: jacrev of a pytree of two arguments
    varying over different axes; each block varies as its input does."""
    mesh = meshes((2, 2), ("x", "y"), explicit=True)
    B, N, H = 20, 6, 8
    wv = np.arange(N * H, dtype=np.float32).reshape(N, H)
    xv = np.arange(B * N, dtype=np.float32).reshape(B, N)
    seen = []

    def f(w, xs):
        return shmap.tree.map(lambda z: jnp.sum(z @ w, axis=-1), xs)

    def body(w, x, y):
        ret = shmap.jacrev(f, argnums=1)(w, (x, y))
        seen.append([shmap.typeof(ret[i][j]).vma for i in (0, 1) for j in (0, 1)])
        return ret[0][0], ret[0][1], ret[1][0], ret[1][1]

    with shmap.use_mesh(mesh):
        w, x, y = (shmap.device_put(wv, P()), shmap.device_put(xv, P("x")),
                   shmap.device_put(xv, P("y")))
        g = shmap.jit(shmap.shard_map(body, in_specs=(P(), P("x"), P("y")),
                                      out_specs=(P("x"), P("y"), P("x"), P("y"))))
        outs = [np.asarray(o) for o in g(w, x, y)]
    assert seen[-1] == [{"x"}, {"y"}, {"x"}, {"y"}]
    diag = np.einsum("ab,n->abn", np.tile(np.eye(B // 2), (2, 1)), wv.sum(axis=1))
    assert np.array_equal(outs[0], diag) and np.array_equal(outs[3], diag)
    assert not outs[1].any() and not outs[2].any()


def test_random_choice_pvary(c, meshes):
    """test_random_choice_pvary, reduced: random.choice of each block's key
    in a shard_map body."""
    mesh = meshes((2,), ("x",), explicit=True)
    keys = shmap.random.split(shmap.random.key(0), 8)
    out = sm(lambda k: shmap.random.choice(k[0], 3, (1,)), mesh, P("x"), P("x"))(keys)
    assert np.asarray(out).shape == (2,)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("num_input_fwd", range(4))
@pytest.mark.parametrize("num_output_fwd", range(4))
def test_forwarding_correctness(c, seed, num_input_fwd, num_output_fwd):
    """test_forwarding_correctness: inputs forwarded to outputs, exp and sin
    of others, permuted; their grad."""
    num_args = 3
    rng = np.random.RandomState(seed)
    mesh = c.make_mesh((1,), ("i",), axis_types=(AUTO,))
    in_perm, out_perm = rng.permutation(num_args), rng.permutation(num_args)

    def fn(inputs, m):
        inputs = [inputs[i] for i in in_perm]
        outputs = inputs[:num_input_fwd] + [
            m.exp(inputs[i]) if i < num_output_fwd else m.sin(inputs[i])
            for i in range(num_args - num_input_fwd)]
        return [outputs[i] for i in out_perm]

    f = sm(lambda inputs: fn(inputs, jnp), mesh, P("i"), P("i"))
    xs = [np.array([float(k)], np.float32) for k in range(num_args)]
    wts = [np.float32(k + 2) for k in range(num_args)]
    args = [put(c, mesh, x, P("i")) for x in xs]
    outs = f(args)
    for o, r in zip(outs, fn(xs, np)):
        assert np.allclose(np.asarray(o), r, rtol=1e-6)
    gs = shmap.grad(lambda a: sum(w * o.sum() for w, o in zip(wts, f(a))))(args)
    eps = 1e-3
    for k in range(num_args):  # central differences of the weighted sum, in float64
        hi = [x.astype(np.float64) + (eps if j == k else 0) for j, x in enumerate(xs)]
        lo = [x.astype(np.float64) - (eps if j == k else 0) for j, x in enumerate(xs)]
        num = sum(w * (a - b).sum() for w, a, b in zip(wts, fn(hi, np), fn(lo, np))) / (2 * eps)
        assert np.allclose(np.asarray(gs[k]), num, rtol=1e-3, atol=1e-3)


def test_unreduced_psum_fwd_preduced_bwd(c, meshes):
    """test_unreduced_psum_fwd_preduced_bwd, reduced to its forward pass: an
    unreduced product passed to a shard_map with in_specs
    P(unreduced={'x'}) and psum'd there."""
    mesh = meshes((2,), ("x",), explicit=True)
    a1, a2 = np.arange(8.).reshape(2, 4), np.arange(24.).reshape(4, 6)
    ar = sm(lambda x: lax.psum(x, "x"), mesh, P(unreduced={"x"}), P())

    @shmap.jit
    def f(x, y):
        return ar(jnp.einsum("ab,bc->ac", x, y, out_sharding=P(unreduced={"x"}))).sum()

    out = f(put(c, mesh, a1, P(None, "x")), put(c, mesh, a2, P("x", None)))
    assert float(out) == np.sum(a1 @ a2)


@pytest.mark.parametrize("collective", ["psum", "psum_scatter"])
def test_unreduced_in_spec_fwd(c, meshes, collective):
    """test_unreduced_psum_fwd_preduced_bwd's and
    test_unreduced_psum_scatter_fwd_all_gather_reduced_bwd's forward
    passes, the unreduced argument after another one: the body's types
    (vma, unreduced) before and after the collective, and the values."""
    mesh = meshes((2,), ("x",), explicit=True)
    a1, a2 = np.arange(8.).reshape(2, 4), np.arange(24.).reshape(4, 6)
    seen = []

    def body(d, x):
        out = lax.psum(x, "x") if collective == "psum" else \
            lax.psum_scatter(x, axis_name="x", tiled=True)
        seen.append((shmap.typeof(x).vma, shmap.typeof(x).sharding.spec.unreduced,
                     shmap.typeof(out).vma, shmap.typeof(out).sharding.spec.unreduced))
        return out + d

    out_spec = P() if collective == "psum" else P("x", None)
    ar = sm(body, mesh, (P(), P(unreduced={"x"})), out_spec)

    @shmap.jit
    def f(x, y):
        z = jnp.einsum("ab,bc->ac", x, y, out_sharding=P(unreduced={"x"}))
        return ar(jnp.zeros(()), z).sum()

    out = f(put(c, mesh, a1, P(None, "x")), put(c, mesh, a2, P("x", None)))
    vma_out = frozenset() if collective == "psum" else {"x"}
    assert seen[-1] == (frozenset(), {"x"}, vma_out, frozenset())
    assert float(out) == np.sum(a1 @ a2) and out.sharding == NamedSharding(mesh, P())


def test_unreduced_in_spec_grad(c, meshes):
    """test_unreduced_psum_fwd_preduced_bwd's grad (the unreduced argument
    second): JAX transposes the psum of an unreduced value to a
    pcast(to='reduced')."""
    mesh = meshes((2,), ("x",), explicit=True)
    a1, a2 = np.arange(8.).reshape(2, 4), np.arange(24.).reshape(4, 6)
    ar = sm(lambda d, x: lax.psum(x, "x") + d, mesh, (P(), P(unreduced={"x"})), P())

    def f(x, y):
        z = jnp.einsum("ab,bc->ac", x, y, out_sharding=P(unreduced={"x"}))
        return ar(jnp.zeros(()), z).sum()

    arr1, arr2 = put(c, mesh, a1, P(None, "x")), put(c, mesh, a2, P("x", None))
    out1, out2 = shmap.jit(shmap.grad(f, argnums=(0, 1)))(arr1, arr2)
    assert out1.sharding == NamedSharding(mesh, P(None, "x"))
    assert out2.sharding == NamedSharding(mesh, P("x", None))
    assert np.allclose(np.asarray(out1), np.ones((2, 6)) @ a2.T, rtol=2e-4)
    assert np.allclose(np.asarray(out2), a1.T @ np.ones((2, 6)), rtol=2e-4)


def test_unreduced_psum_scatter_fwd_all_gather_reduced_bwd(c, meshes):
    """test_unreduced_psum_scatter_fwd_all_gather_reduced_bwd, reduced to its
    forward pass: an unreduced product psum_scatter'd in a shard_map."""
    mesh = meshes((2,), ("x",), explicit=True)
    a1, a2 = np.arange(8.).reshape(4, 2), np.arange(12.).reshape(2, 6)
    rs = sm(lambda a: lax.psum_scatter(a, axis_name="x", tiled=True), mesh,
            P(unreduced={"x"}), P("x", None))

    @shmap.jit
    def f(x, y):
        return rs(jnp.einsum("ab,bc->ac", x, y, out_sharding=P(unreduced={"x"}))).sum()

    out = f(put(c, mesh, a1, P(None, "x")), put(c, mesh, a2, P("x", None)))
    assert float(out) == np.sum(a1 @ a2)


def test_sin_unreduced_error(c, meshes):
    """test_sin_unreduced_error: sin of an unreduced value in a shard_map
    body (in_specs left out), JAX's NotImplementedError."""
    mesh = meshes((2,), ("x",), explicit=True)
    a1, a2 = np.arange(8.).reshape(4, 2), np.arange(12.).reshape(2, 6)

    @shmap.jit
    def f(x, y):
        z = jnp.einsum("ab,bc->ac", x, y, out_sharding=P(unreduced={"x"}))
        return shmap.shard_map(lambda x: jnp.sin(x), out_specs=P())(z)

    with shmap.use_mesh(mesh):
        with pytest.raises(NotImplementedError, match="unreduced rule for sin"):
            f(put(c, mesh, a1, P(None, "x")), put(c, mesh, a2, P("x", None)))


def test_eval_shape_vma(c, meshes):
    """test_eval_shape_vma, reduced: eval_shape in a shard_map body keeps the
    varying axes, and lax.full_like of its result too."""
    mesh = meshes((2,), ("x",), explicit=True)
    seen = []

    def g(x):
        y = shmap.eval_shape(lambda v: jnp.sum(v), x)
        one = lax.full_like(y, 1)
        seen.append((shmap.typeof(y).vma, shmap.typeof(one).vma))
        return x * one

    x = np.arange(8.0, dtype=np.float32)
    assert np.array_equal(np.asarray(sm(g, mesh, P("x"), P("x"))(x)), x)
    assert seen[-1] == ({"x"}, {"x"})


def test_psum_not_under_shmap_error(c, meshes):
    """test_psum_not_under_shmap_error: psum in a jit outside any shard_map,
    JAX's NameError (the fix: test_psum_under_shmap_fixes_it)."""
    f = shmap.jit(lambda x: lax.psum(x, "x"))
    with pytest.raises(NameError, match="Found an unbound axis name: x. To fix this, please "
                                        "call psum under `jax.shard_map`"):
        f(np.arange(8.0, dtype=np.float32))


def test_psum_under_shmap_fixes_it(c, meshes):
    """test_psum_not_under_shmap_error's fix: the same jit function as a
    shard_map body."""
    mesh = meshes((2,), ("x",))
    x = np.arange(8.0, dtype=np.float32)
    y = sm(shmap.jit(lambda x: lax.psum(x, "x")), mesh, P("x"), P())(x)
    assert np.array_equal(np.asarray(y), x[:4] + x[4:])


def test_shmap_auto_unreduced_error(c, meshes):
    """test_shmap_auto_unreduced_error: unreduced in_specs over an Auto
    axis (ValueError), or in a partial-manual shard_map
    (NotImplementedError)."""
    mesh = meshes((2, 1), ("x", "y"))
    x = np.arange(8)
    with pytest.raises(ValueError, match="unreduced.*can only be used when the mesh passed to "
                                         "shard_map contains axis names all of type `Explicit`"):
        sm(lambda x: x, mesh, P(unreduced={"x"}), P())(x)
    with pytest.raises(NotImplementedError, match="unreduced.*can only be passed to in_specs "
                                                  "when shard_map is in full manual mode"):
        sm(lambda x: x, mesh, P(unreduced={"x"}), P(), axis_names={"x"})(x)


V = np.arange(32.0, dtype=np.float32).reshape(4, 8)


def test_partial_auto_explicit_multi_explicit(c, meshes):
    """test_partial_auto_explicit_multi_explicit: Manual over 'i' and 'j',
    the body's block keeps its sharding over 'k' and 'l' (a transpose moves
    it), the result sharded over the out_specs' axes then those."""
    mesh = meshes((2, 1, 2, 2), ("i", "j", "k", "l"), explicit=True)
    seen = []

    def g(x):
        out = x.T
        seen.append((shmap.typeof(x).sharding.spec, shmap.typeof(out).sharding.spec))
        return out

    @shmap.jit
    def f(x):
        x = shmap.shard_map(g, out_specs=P("i", "j", None, None),
                            axis_names=frozenset({"i", "j"}))(x)
        seen.append(shmap.typeof(x).sharding.spec)
        return x

    v = np.arange(64.0, dtype=np.float32).reshape(4, 2, 2, 4)
    out = f(put(c, mesh, v, P("i", "j", "k", "l")))
    assert seen[0] == (P(None, None, "k", "l"), P("l", "k", None, None))
    assert seen[1] == P(("i", "l"), ("j", "k"), None, None)
    assert np.array_equal(np.asarray(out), np.concatenate([v[:2].T, v[2:].T]))
    assert out.sharding == NamedSharding(mesh, P(("i", "l"), ("j", "k"), None, None))


def test_partial_auto_propagate_through(c, meshes):
    """test_partial_auto_propagate_through: Manual over 'j' and 'k', a
    sharding constraint over the Auto axis 'i' in the body (the result's
    sharding: test_partial_auto_propagate_through_sharding)."""
    mesh = meshes((2, 2, 2), ("i", "j", "k"))
    sharding = NamedSharding(mesh, P("i"))

    @shmap.jit
    def f(x):
        return sm(lambda x: lax.with_sharding_constraint(x * x, sharding), mesh, P(), P(),
                  check_vma=False, axis_names=frozenset({"j", "k"}))(x)

    actual = f(put(c, mesh, V, P("i")))
    assert np.array_equal(np.asarray(actual), V * V)
    assert actual.sharding.spec[0] == "i"


def test_partial_auto_propagate_through_sharding(c, meshes):
    """test_partial_auto_propagate_through's actual.sharding == sharding,
    reduced to a jit of a constraint on an Auto mesh."""
    mesh = meshes((2, 2, 2), ("i", "j", "k"))
    sharding = NamedSharding(mesh, P("i"))
    actual = shmap.jit(lambda x: lax.with_sharding_constraint(x * x, sharding))(
        put(c, mesh, V, P("i")))
    assert actual.sharding == sharding


def test_shmap_close_over_unused_params(c, meshes):
    """test_shmap_close_over_unused_params: a shard_map body in a jit takes
    the grad of a loss with respect to a jit value it closes over and does
    not use."""
    mesh = meshes((2,), ("data",))

    def loss_fn(_, batch):
        return jnp.sum(batch)

    @shmap.jit
    def update_fn(params, batch):
        def grad_fn(batch):
            return shmap.value_and_grad(loss_fn)(params, batch)
        return sm(grad_fn, mesh, P("data"), P(), check_vma=False)(batch)

    arr = put(c, mesh, V, P())
    value, grads = update_fn(put(c, mesh, V, P()), arr)
    assert float(value) == V[:2].sum() and not np.asarray(grads).any()


def test_close_over_explicit_sharded_input_error(c, meshes):
    """test_close_over_explicit_sharded_input_error: passed as an argument
    the value is fine; closed over, JAX refuses it."""
    mesh = meshes((2,), ("x",), explicit=True)

    def simple_func(w, x):
        return jnp.sum(w * x, axis=-1)

    with shmap.use_mesh(mesh):
        w = jnp.ones((2, 4), dtype=np.float32)
        x = shmap.device_put(np.ones((4, 4), np.float32), P("x"))
        y = shmap.shard_map(simple_func, in_specs=(P(), P("x")), out_specs=P("x"))(w, x)
        assert np.array_equal(np.asarray(y), np.full(4, 4.0))
        with pytest.raises(NotImplementedError, match="Closing over inputs to shard_map where "
                                                      "the input is sharded on `Explicit` axes "
                                                      "is not implemented"):
            shmap.shard_map(lambda xi: simple_func(w, xi), in_specs=P("x"), out_specs=P("x"))(x)


def test_check_vma_false_grad(c, meshes):
    """test_shmap_close_over_unused_params_vmap's difference, reduced: with
    check_vma=False JAX tracks no varying axes, so a grad in the body is
    each device's own."""
    mesh = meshes((2,), ("data",))
    w, b = np.ones(3, np.float32), np.arange(6.0, dtype=np.float32)
    f = sm(lambda w, b: shmap.grad(lambda w: jnp.sum(w) * jnp.sum(b))(w), mesh,
           (P(), P("data")), P("data"), check_vma=False)
    assert np.array_equal(np.asarray(f(w, b)), [3, 3, 3, 12, 12, 12])


def test_close_over_input_explict_ctx_mesh(c, meshes):
    """test_close_over_input_explict_ctx_mesh: with no context mesh a value
    of no mesh may be closed over."""
    mesh = meshes((2,), ("x",), explicit=True)
    w = jnp.ones((2, 4), dtype=np.float32)
    x = put(c, mesh, np.ones((4, 4), np.float32), P("x"))

    def simple_func(w, x):
        return jnp.sum(w * x, axis=-1)

    y1 = sm(simple_func, mesh, (P(), P("x")), P("x"))(w, x)
    y2 = sm(lambda xi: simple_func(w, xi), mesh, P("x"), P("x"))(x)
    assert np.array_equal(np.asarray(y1), np.full(4, 4.0))
    assert np.array_equal(np.asarray(y2), np.full(4, 4.0))


def test_shmap_close_over_unused_params_vmap(c, meshes):
    """test_shmap_close_over_unused_params_vmap: vmap of a value_and_grad
    with respect to a closed-over jit value, in a shard_map body."""
    mesh = meshes((2,), ("data",))

    def loss_fn(params, batch):
        return jnp.sum(params) + jnp.sum(batch)

    @shmap.jit
    def update_fn(params, batch):
        def grad_fn(batch):
            return shmap.value_and_grad(loss_fn)(params, batch)
        return sm(shmap.vmap(grad_fn), mesh, P("data"), P("data"), check_vma=False)(batch)

    arr = put(c, mesh, V, P())
    value, grads = update_fn(put(c, mesh, V, P()), arr)
    assert np.array_equal(np.asarray(value), V.sum() + V.sum(axis=1))
    assert np.array_equal(np.asarray(grads), np.ones((4, 4, 8)))


def test_partial_auto_error_invalid_auto(c, meshes):
    """test_partial_auto_error_invalid_auto: Manual over every axis, a
    sharding constraint naming them in the body: JAX's ValueError."""
    mesh = meshes((2, 2), ("i", "j"))

    def g(x):
        return lax.with_sharding_constraint(x, NamedSharding(mesh, P("i", "j"))) ** 2

    @shmap.jit
    def f(x):
        x = sm(g, mesh, P("i", None), P("i", None), check_vma=False,
               axis_names=frozenset({"i", "j"}))(x)
        return lax.with_sharding_constraint(x, NamedSharding(mesh, P("i", "j")))

    with pytest.raises(ValueError, match="contains a manual axes.*of mesh"):
        f(put(c, mesh, V, P("i", "j")))


def test_partial_auto_mismatch_mesh_error(c, meshes):
    """test_partial_auto_mismatch_mesh_error: a shard_map given the mesh
    whose 'i' the shard_map around it made Manual: JAX's ValueError."""
    mesh = meshes((2, 2), ("i", "j"))

    def h(x):
        return sm(lambda x: x * x, mesh, P(None, "j"), P(None, "j"))(x)

    @shmap.jit
    def f(x):
        return sm(h, mesh, P("i", None), P("i", None), check_vma=False,
                  axis_names=frozenset({"i"}))(x)

    with pytest.raises(ValueError, match=r"context mesh.*should match the mesh passed to "
                                         r"shard_map"):
        f(put(c, mesh, V, P("i", "j")))


@pytest.mark.parametrize("dim1, dim2, outer_vma, inner_vma", [
    ("x", "y", {"x"}, {"x", "y"}), (None, "y", frozenset(), {"y"}),
    ("x", None, {"x"}, {"x"}), (None, None, frozenset(), frozenset())])
def test_nested_partial_auto_1d(c, meshes, dim1, dim2, outer_vma, inner_vma):
    """test_nested_partial_auto_1d: a shard_map over 'y' (its mesh the
    context's) in the body of one over 'x'; the varying axes inside each."""
    mesh = meshes((2, 2, 2), ("x", "y", "z"))
    seen = []

    def g(x):
        out = x * x
        seen.append(("inner", shmap.typeof(x).vma, shmap.typeof(out).vma))
        return out

    def h(x):
        out = shmap.shard_map(g, in_specs=P(None, dim2), out_specs=P(None, dim2),
                              axis_names={"y"})(x)
        seen.append(("outer", shmap.typeof(x).vma, shmap.typeof(out).vma))
        return out

    @shmap.jit
    def f(x):
        return shmap.shard_map(h, in_specs=P(dim1, None), out_specs=P(dim1, None),
                               axis_names={"x"})(x)

    with shmap.use_mesh(mesh):
        out = f(put(c, mesh, V, P(dim1, dim2)))
    assert np.array_equal(np.asarray(out), V * V)
    assert seen[-2:] == [("inner", inner_vma, inner_vma), ("outer", outer_vma, outer_vma)]


def test_grad_nested_partial_auto_with_residuals(c, meshes):
    """test_grad_nested_partial_auto_with_residuals: grad through nested
    shard_maps (the inner one over the axis left) of x * x * x."""
    mesh = meshes((2, 2), ("i", "j"))

    def h(x):
        return shmap.shard_map(lambda x: x * x * x, in_specs=P(None, "j"),
                               out_specs=P(None, "j"))(x)

    @shmap.jit
    def f(x):
        return sm(h, mesh, P("i", None), P("i", None), check_vma=False,
                  axis_names=frozenset({"i"}))(x).sum()

    with shmap.use_mesh(mesh):
        out = shmap.grad(f)(put(c, mesh, V, P("i", "j")))
    assert np.array_equal(np.asarray(out), V * V * 3)


def test_axis_size_1_partial_auto(c, meshes):
    """test_axis_size_1_partial_auto: Manual over an axis of size 1."""
    mesh = meshes((1, 2, 2), ("i", "j", "k"))
    f = shmap.jit(sm(lambda x: x * x, mesh, P("i", None), P("i", None), check_vma=False,
                     axis_names=frozenset({"i"})))
    assert np.array_equal(np.asarray(f(put(c, mesh, V, P("i", "j")))), V * V)


def test_partial_auto_axis_index_degenerated_axis(c, meshes):
    """test_partial_auto_axis_index_degenerated_axis: axis_index over an axis
    of size 1, a shard_map of no arguments (in_specs one P)."""
    mesh = meshes((1, 2), ("i", "j"))
    f = shmap.jit(sm(lambda: lax.axis_index("i").reshape(1, 1), mesh, P("i", None),
                     P("i", None), check_vma=False, axis_names=frozenset({"i"})),
                  out_shardings=NamedSharding(mesh, P("i", None)))
    assert np.array_equal(np.asarray(f()), np.zeros((1, 1), np.int32))


def test_partial_auto_of_random_keys(c, meshes):
    """test_partial_auto_of_random_keys: keys through a partial-manual
    shard_map unchanged (the jit closes over them)."""
    mesh = meshes((4, 2), ("i", "j"))
    keys = shmap.random.split(shmap.random.key(0), 8)

    @shmap.jit
    def f(x):
        return sm(lambda k: k, mesh, P("i"), P("i"), check_vma=False,
                  axis_names=frozenset({"i"}))(keys)

    y = f(keys)
    assert np.array_equal(np.asarray(shmap.random.key_data(y)),
                          np.asarray(shmap.random.key_data(keys)))


def test_partial_auto_of_random_keys_slice(c, meshes):
    """test_partial_auto_of_random_keys_slice: a slice of each block of keys
    in a partial-manual shard_map."""
    mesh = meshes((4, 2), ("i", "j"))
    keys = shmap.random.split(shmap.random.key(0), 8).reshape(4, 2)
    f = shmap.jit(sm(lambda k: k[0], mesh, P("i"), P("i"), check_vma=False,
                     axis_names=frozenset({"i"})))
    y = f(keys)
    assert np.array_equal(np.asarray(shmap.random.key_data(y)),
                          np.asarray(shmap.random.key_data(keys)).reshape(8, 2))


def test_grad_remat(c, meshes):
    """test_grad_remat: grad of a remat'd (a policy given) shard_map of a
    dot of a matrix and a batch of matrices, on a mesh of 1 x 1."""
    mesh = meshes((1, 1), ("i", "j"))
    xv, yv = np.arange(6.).reshape(3, 2), np.arange(6.).reshape(3, 2, 1)

    @shmap.remat(policy=lambda *_, **__: True)
    def f(x, y):
        return sm(jnp.dot, mesh, (P("j"), P("i")), P("i", "j"))(x, y)

    g = shmap.grad(lambda x, y: f(x, y).sum())(put(c, mesh, xv), put(c, mesh, yv))
    assert np.array_equal(np.asarray(g), np.broadcast_to(yv[..., 0].sum(axis=0), (3, 2)))


def test_vmap_grad_shmap_spmd_axis_name_residuals(c, meshes):
    """test_vmap_grad_shmap_spmd_axis_name_residuals (jax-ml/jax#21032):
    vmap with spmd_axis_name of a grad through a shard_map."""
    mesh = meshes((4, 2), ("i", "j"))
    f = sm(jnp.sin, mesh, P("j"), P("j"))
    xs = np.arange(4 * 16.0, dtype=np.float32).reshape(4, 16)
    g = shmap.vmap(shmap.grad(lambda x: f(x).sum()), spmd_axis_name="i")(put(c, mesh, xs))
    assert np.allclose(np.asarray(g), np.cos(xs), rtol=1e-6)


def test_dynamic_slice_transpose(c, meshes):
    """test_dynamic_slice_transpose: dynamic_slice_in_dim in the body, at
    once, in a jit, and its grad."""
    mesh = meshes((2,), ("x",))
    arr = np.arange(16., dtype=np.float32)
    f = sm(lambda x: lax.dynamic_slice_in_dim(x, jnp.array(1, dtype=np.int32), 2), mesh,
           P("x"), P("x"))
    want = np.array([1., 2., 9., 10.])
    assert np.array_equal(np.asarray(f(arr)), want)
    assert np.array_equal(np.asarray(shmap.jit(f)(arr)), want)
    g = lambda x: jnp.sum(f(x))  # noqa: E731
    gw = np.zeros(16)
    gw[[1, 2, 9, 10]] = 1
    assert np.array_equal(np.asarray(shmap.grad(g)(arr)), gw)
    assert np.array_equal(np.asarray(shmap.jit(shmap.grad(g))(arr)), gw)


@pytest.mark.parametrize("specs", [P(), P("x"), P(("x", "y"))])
def test_print_inside_shard_map(c, meshes, specs, capsys):
    """test_print_inside_shard_map: Python's print of a traced block."""
    mesh = meshes((2, 2), ("x", "y"))

    def f(x):
        print(x)
        return 2 * x

    y = sm(f, mesh, specs, specs)(np.arange(4.0, dtype=np.float32))
    assert np.array_equal(np.asarray(y), 2 * np.arange(4.0))
    assert capsys.readouterr().out


def test_in_spec_none(c, meshes):
    """test_in_spec_none, reduced: an argument of in_spec None reaches the
    body as it is."""
    mesh = meshes((4, 2), ("i", "j"))
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    obj = object()

    def f(o, x):
        assert o is obj
        return jnp.sin(x)

    y = sm(f, mesh, (None, P("i")), P("i"))(obj, x)
    assert np.allclose(np.asarray(y), np.sin(x), rtol=1e-6)


def test_in_spec_none_divisibility_errors(c, meshes):
    """test_in_spec_none_divisibility_errors, without its None entries
    (test_in_spec_none): JAX's ValueError."""
    mesh = meshes((4, 2), ("i", "j"))
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    with pytest.raises(ValueError, match="divisible"):
        sm(lambda x: x, mesh, P("i"), P("i"))(x)


def test_custom_linear_solve_rep_rules(c, meshes):
    """test_custom_linear_solve_rep_rules (jax-ml/jax#20162): linalg.solve
    of integer blocks in a shard_map body."""
    mesh = meshes((1,), ("i",))
    a, b = np.array(1, np.int32).reshape(1, 1), np.array(1, np.int32).reshape(1)
    y = sm(jnp.linalg.solve, mesh, P("i"), P("i"))(a, b)
    assert np.array_equal(np.asarray(y), [1.0])


@pytest.mark.parametrize("use_axis_name", [True, False])
def test_explicit_vmap_grad_shmap(c, meshes, use_axis_name):
    """test_explicit_vmap_grad_shmap: jit(vmap(grad(g))) where g reshards an
    example and calls a shard_map over 'y' on it."""
    mesh = meshes((2, 2), ("x", "y"), explicit=True)
    np_inp = np.arange(6 * 24, dtype=np.float32).reshape(6, 24)

    def g(x):
        x = shmap.reshard(x, P("y"))
        kw = {"axis_names": {"y"}} if use_axis_name else {}
        out = shmap.shard_map(jnp.cos, in_specs=P("y"), out_specs=P("y"), **kw)(x)
        return out.sum()

    with shmap.use_mesh(mesh):
        out = shmap.jit(shmap.vmap(shmap.grad(g)))(shmap.device_put(np_inp, P("x", None)))
    assert out.sharding == NamedSharding(mesh, P("x", None))
    assert np.allclose(np.asarray(out), -np.sin(np_inp), rtol=1e-5, atol=1e-6)


def test_get_check_rep(c, meshes):
    """test_get_check_rep: psum over one axis or both takes them out of the
    varying axes; at once and in a jit."""
    mesh = meshes((2, 2), ("x", "y"))
    seen = []

    def f(x, reduce_along, use_jit):
        out_spec = P(*(n for n in ("x", "y") if n not in reduce_along))

        def g(x):
            result = lax.psum(x, axis_name=reduce_along)
            seen.append(shmap.typeof(result).vma == shmap.typeof(x).vma - set(reduce_along))
            return result

        h = sm(g, mesh, P("x", "y"), out_spec)
        return shmap.jit(h)(x) if use_jit else h(x)

    xv = np.arange(64.0, dtype=np.float32).reshape(8, 8)
    x = xv
    blocks = xv.reshape(2, 4, 2, 4)
    for use_jit in [True, False]:
        y = f(x, ("y",), use_jit)
        assert np.array_equal(np.asarray(y), (blocks[:, :, 0] + blocks[:, :, 1]).reshape(8, 4))
        y = f(x, ("x",), use_jit)
        want = (blocks[0] + blocks[1]).transpose(1, 0, 2).reshape(8, 4)
        assert np.array_equal(np.asarray(y), want)
        y = f(x, ("x", "y"), use_jit)
        assert np.array_equal(np.asarray(y), blocks.sum(axis=(0, 2)))
    assert seen and all(seen)


def test_pmin(c, meshes):
    """test_pmin."""
    mesh = meshes((4,), ("i",))
    y = sm(lambda x: lax.pmin(x, "i"), mesh, P("i"), P())(np.arange(8., dtype=np.float32))
    assert np.array_equal(np.asarray(y), np.array([0, 1], dtype=np.float32))


def test_pmax(c, meshes):
    """test_pmax."""
    mesh = meshes((4,), ("i",))
    y = sm(lambda x: lax.pmax(x, "i"), mesh, P("i"), P())(np.arange(8., dtype=np.float32))
    assert np.array_equal(np.asarray(y), np.array([6, 7], dtype=np.float32))


def test_pmax_vma_in_types(c, meshes):
    """test_pmax_vma_in_types (its values; the jaxpr's pvary aside): pmax of
    a value that does not vary, in a jit."""
    mesh = meshes((4,), ("i",))
    f = shmap.jit(sm(lambda x: lax.pmax(x, "i"), mesh, P(), P()))
    x = np.arange(8., dtype=np.float32)
    assert np.array_equal(np.asarray(f(x)), x)
