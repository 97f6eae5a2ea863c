"""shard_map(axis_names=...) Manual over some of the mesh's axes (JAX's
partial-auto shard_map, tests/shard_map_test.py test_partial_auto*): the
body sees blocks over those axes, its collectives name those alone, and
the other axes are left to the service, which runs the body replicated
over them; a sharding constraint over them leaves values as they are.
Values against numpy, in a jit and at once, under grad; JAX's sentences
where it refuses (in_specs / out_specs naming another axis, a collective
over one, a constraint naming a manual axis, axis_names not a set); an
argument sharded over an Explicit axis left out is refused (JAX keeps that
sharding in the body's types). Runs on the cluster of conftest's c."""
import numpy as np
import pytest

import shmap
from shmap import P, NamedSharding
from shmap import lax
from shmap import numpy as jnp

from _util import put


V = np.arange(32.0, dtype=np.float32).reshape(4, 8)


def sm(f, mesh, in_specs, out_specs, names=frozenset({"i"}), **kw):
    return shmap.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                           axis_names=names, **kw)


def test_partial_in_jit_values_and_types(c, mesh):
    """In a jit: blocks over 'i' (their types vary over it alone), replicated
    over 'j'; psum and axis_index over 'i'; the result laid out by
    out_specs; at once the same."""
    seen = []

    def g(b):
        seen.append(str(shmap.typeof(b)))
        return b * b - lax.psum(b, "i") + lax.axis_index("i") + lax.axis_size("i")

    x = put(c, mesh, V, P("i", None))
    want = V * V - V.sum(axis=0) + np.arange(4)[:, None] + 4
    f = shmap.jit(lambda a: sm(g, mesh, P("i", None), P("i", None))(a) * 1)
    y = f(x)
    assert np.array_equal(np.asarray(y), want)
    assert y.sharding.spec == P("i")
    assert seen == ["f32[1,8]{V:i}"]
    y2 = sm(g, mesh, P("i", None), P("i", None))(x)
    assert np.array_equal(np.asarray(y2), want)
    text = shmap.jit(lambda a: sm(g, mesh, P("i", None), P("i", None))(a)).lower(x).as_text()
    assert "-> P('i', None), axis_names={'i'}:" in text


def test_partial_auto_constraint(c):
    """JAX's test_partial_auto: a mesh of Auto axes, an argument sharded
    over both, a with_sharding_constraint over 'j' in the body; and
    test_partial_auto_ppermute's ring over 'i'."""
    mesh = c.make_mesh((4, 2), ("i", "j"), axis_types=(shmap.Auto, shmap.Auto))

    def g(b):
        b = lax.with_sharding_constraint(b, P(None, "j"))
        return b * b

    @shmap.jit
    def f(a):
        a = sm(g, mesh, P("i", None), P("i", None))(a)
        return lax.with_sharding_constraint(a, NamedSharding(mesh, P("i", "j")))

    x = put(c, mesh, V, P("i", "j"))
    assert np.array_equal(np.asarray(f(x)), V * V)

    def ring(b):
        b = lax.with_sharding_constraint(b, NamedSharding(mesh, P("j")))
        return lax.ppermute(b, "i", [(0, 1), (1, 2), (2, 3), (3, 0)])

    h = shmap.jit(lambda a: sm(ring, mesh, P("i"), P("i"), check_vma=False)(a))
    y = h(put(c, mesh, np.arange(8.0, dtype=np.float32), P()))
    assert np.array_equal(np.asarray(y), [6., 7., 0., 1., 2., 3., 4., 5.])


def test_partial_under_grad(c, mesh):
    """grad through a jit calling a partial-manual shard_map (JAX's
    test_partial_auto_explicit: `jax.grad(h)(v)  # doesn't crash`), here
    against its value."""
    f = sm(lambda b: b * b * (lax.axis_index("i") + 1), mesh, P("i", None), P("i", None))
    x = put(c, mesh, V, P("i", None))
    g = shmap.jit(shmap.grad(lambda a: jnp.sum(f(a))))(x)
    assert np.allclose(np.asarray(g), 2 * V * (np.arange(4) + 1)[:, None])


def test_partial_refusals(c, mesh):
    """JAX's sentences and exception types; and the Explicit axis left out
    of axis_names that an argument is sharded over."""
    x = put(c, mesh, V, P("i", None))
    with pytest.raises(ValueError, match=r"in_specs refers to 'j'") as e:
        sm(lambda b: b, mesh, P("i", "j"), P("i", None))(x)
    assert str(e.value).startswith("shard_map in_specs argument must refer to an axis marked as "
                                   "manual (frozenset({'i'})), but:\n\n  in_specs refers to 'j'")
    with pytest.raises(ValueError, match=r"out_specs\[1\] refers to 'j'"):
        sm(lambda b: (b, b), mesh, P("i", None), (P("i"), P("j")))(x)
    with pytest.raises(NameError, match="unbound axis name: j"):
        sm(lambda b: lax.psum(b, "j"), mesh, P("i", None), P("i", None))(x)
    with pytest.raises(NameError, match="unbound axis name: j"):
        sm(lambda b: b * lax.axis_size("j"), mesh, P("i", None), P("i", None))(x)
    with pytest.raises(NameError, match="unbound axis name: j"):
        shmap.jit(lambda a: sm(lambda b: lax.all_gather(b, "j"), mesh, P("i", None),
                               P("i", None))(a))(x)
    with pytest.raises(ValueError, match="manual"):  # test_partial_auto_error_wsc_manual
        shmap.jit(lambda a: sm(lambda b: lax.with_sharding_constraint(b, P("i", "j")), mesh,
                               P("i", None), P("i", None), check_vma=False)(a))(x)
    with pytest.raises(TypeError, match="`axis_names` argument of shard_map should be of type "
                                        "`frozenset` or `set`. Got type: <class 'tuple'>"):
        shmap.shard_map(lambda b: b, mesh=mesh, in_specs=P("i"), out_specs=P("i"),
                        axis_names=("i",))
    with pytest.raises(ValueError, match=r"requires axis_names=frozenset\(\{'k'\}\) to be a "
                                         r"subset of mesh.axis_names"):
        sm(lambda b: b, mesh, P("i"), P("i"), names={"k"})(x)
    xe = put(c, mesh, V, P("i", "j"))
    for run in (lambda: sm(lambda b: b * 2, mesh, P("i", None), P("i", None))(xe),
                lambda: shmap.jit(lambda a: sm(lambda b: b * 2, mesh, P("i", None),
                                               P("i", None))(a))(xe)):
        with pytest.raises(shmap.ShmapError, match=r"an argument of type f32\[4@i,8@j\] is "
                                                   r"sharded over 'j', an Explicit mesh axis"):
            run()
    ok = sm(lambda b: b * 2, mesh, P("i", None), P("i", None))(
        shmap.reshard(xe, P("i", None)))
    assert np.array_equal(np.asarray(ok), V * 2)
