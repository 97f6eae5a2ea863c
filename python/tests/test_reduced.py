"""Reduced shardings (JAX's P(reduced=...)) beyond JAX's own tests (those run
in test_jax_sit_3/_4 and test_jax_port_*): the spec's API and errors, a
reduced array's shards and type, the gradient of reduced weights (FSDP's:
per-device partial sums and no all-reduce), and the refusals of a loop
changing its carry's reduced axes and of a reduced out_sharding of a
reduction. Runs on the cluster of conftest's c (2 workers x 4 devices)."""
import numpy as np
import pytest

import shmap
from shmap import P, NamedSharding, lax
from shmap import numpy as jnp


@pytest.fixture(scope="module")
def m2(c):
    """A mesh of one Explicit axis 'x' of 2 devices."""
    return c.make_mesh((2,), ("x",))


def test_spec_api():
    """P(reduced=) compares, hashes and prints as JAX's; an axis cannot be
    both reduced and partitioning or unreduced (JAX's ValueErrors)."""
    s = P(None, reduced={"x"})
    assert repr(s) == "P(None, reduced={'x'})"
    assert s.reduced == {"x"} and not s.unreduced
    assert s != P(None) and hash(s) != hash(P(None))
    assert s == P(None, reduced=("x",))
    assert repr(P(unreduced={"x"}, reduced={"y"})) == \
        "P(unreduced={'x'}, reduced={'y'}, unreduced_kind=sum)"
    with pytest.raises(ValueError, match="partitions cannot overlap with reduced axes"):
        P("x", reduced={"x"})
    with pytest.raises(ValueError, match="`unreduced` and `reduced` argument to PartitionSpec "
                       "cannot overlap"):
        P(unreduced={"x"}, reduced={"x"})


def test_unreduced_kind_api():
    """P(unreduced_kind=): JAX's UnreducedKind (or its name), sum by default
    with unreduced axes and None without; compared and printed (sum is not
    printed); none without unreduced axes (JAX's ValueError)."""
    from shmap.sharding import UnreducedKind
    s = P(None, unreduced={"x"}, unreduced_kind=UnreducedKind.max)
    assert s.unreduced_kind is UnreducedKind.max
    assert s == P(None, unreduced={"x"}, unreduced_kind="max")
    assert s != P(None, unreduced={"x"}) and hash(s) != hash(P(None, unreduced={"x"}))
    assert P(None, unreduced={"x"}).unreduced_kind is UnreducedKind.sum
    assert P(None).unreduced_kind is None
    assert repr(s) == "P(None, unreduced={'x'}, unreduced_kind=max)"
    with pytest.raises(ValueError, match="`unreduced_kind` should be `None` when `unreduced` is "
                       "an empty set"):
        P(None, unreduced_kind="max")


def test_reduced_array(c, m2):
    """A reduced array is laid out replicated (each device the whole value),
    its type says R:, and the service keeps its spec."""
    x = np.arange(8, dtype=np.float32)
    arr = shmap.device_put(x, NamedSharding(m2, P(None, reduced={"x"})))
    assert arr.type == "f32[8]{R:x}"
    assert arr.sharding == NamedSharding(m2, P(None, reduced={"x"}))
    assert len(arr.addressable_shards) == 2
    for s in arr.addressable_shards:
        assert np.array_equal(s.data, x)
    assert np.array_equal(np.asarray(arr), x)
    back = shmap.reshard(arr, NamedSharding(m2, P("x")))
    assert back.sharding == NamedSharding(m2, P("x")) and np.array_equal(np.asarray(back), x)


def test_fsdp_weight_gradient(c, m2):
    """The gradient of weights reduced over the batch's axis holds each
    device's own partial sums (its block's contribution), with no all-reduce
    in the program; their sum is the replicated weights' gradient."""
    xs = np.arange(8, dtype=np.float32).reshape(4, 2)
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    with shmap.use_mesh(m2):
        x = shmap.device_put(xs, P("x"))
        f = shmap.jit(shmap.grad(lambda w, x: (x @ w).sum()))
        wr = shmap.device_put(w, P(reduced={"x"}))
        g = f(wr, x)
        assert g.sharding == NamedSharding(m2, P(None, None, unreduced={"x"}))
        for s, rows in zip(g.addressable_shards, (xs[:2], xs[2:])):
            assert np.allclose(s.data, rows.T @ np.ones((2, 3)))
        want = f(shmap.device_put(w, P()), x)
        assert want.sharding == NamedSharding(m2, P(None, None))
        assert np.allclose(np.asarray(shmap.reshard(g, P())), np.asarray(want))
        assert np.allclose(np.asarray(want), xs.T @ np.ones((4, 3)))

        def collectives(arg):
            text = f.lower(arg, x).as_text().split("# lowered:")[1]
            return text.count("psum(") + text.count("all_gather(")
        # the replicated weights' gradient is all-reduced; the reduced ones' is not
        assert collectives(wr) < collectives(shmap.device_put(w, P()))


def test_loop_keeps_reduced(c, m2):
    """A loop (of a traced trip count: a while loop) whose body changes a
    carry's reduced axes is refused (JAX's TypeError)."""
    with shmap.use_mesh(m2):
        w = shmap.device_put(np.ones(4, np.float32), P(reduced={"x"}))
        n = shmap.device_put(np.int32(2), P())
        f = shmap.jit(lambda w, n: lax.fori_loop(0, n, lambda i, c: shmap.reshard(c, P()), w))
        with pytest.raises(TypeError, match="carry input and carry output must have equal types"):
            f(w, n)
        ok = shmap.jit(lambda w, n: lax.fori_loop(0, n, lambda i, c: c * 2, w))(w, n)
        assert ok.sharding == NamedSharding(m2, P(None, reduced={"x"}))
        assert np.array_equal(np.asarray(ok), np.full(4, 4.0))


def test_reduce_out_sharding_not_reduced(c, m2):
    """A reduction's out_sharding cannot be reduced (JAX's ValueError); its
    operand's reduced axes are kept."""
    with shmap.use_mesh(m2):
        w = shmap.device_put(np.arange(8, dtype=np.float32), P(reduced={"x"}))
        with pytest.raises(ValueError, match="out_sharding passed to reduce_sum cannot be "
                           "reduced"):
            shmap.jit(lambda w: lax.reduce_sum(w, axes=[0], out_sharding=P(reduced={"x"})))(w)
        s = shmap.jit(lambda w: jnp.sum(w))(w)
        assert s.sharding == NamedSharding(m2, P(reduced={"x"}))
        assert float(np.asarray(s)) == 28.0


def test_shard_map_reduced_needs_explicit_axes(c):
    """A shard_map's specs may name reduced axes of Explicit mesh axes only
    (JAX's ValueError for an Auto one)."""
    mesh = c.make_mesh((2,), ("x",), axis_types=(shmap.Auto,))
    f = shmap.shard_map(lambda w: w * 2, mesh=mesh, in_specs=P(reduced={"x"}),
                        out_specs=P(reduced={"x"}))
    with pytest.raises(ValueError, match="reduced in in_specs .* can only be used when the mesh "
                       "passed to shard_map contains axis names all of type `Explicit`"):
        f(np.ones(4, np.float32))
