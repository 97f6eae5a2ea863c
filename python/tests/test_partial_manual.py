"""shard_map(axis_names=...) Manual over some of the mesh's axes (JAX's
partial-auto shard_map, tests/shard_map_test.py test_partial_auto*): the
body sees blocks over those axes, its collectives name those alone, and
the other axes are left to the service, which runs the body replicated
over them; a sharding constraint over them leaves values as they are.
Values against numpy, in a jit and at once, under grad; JAX's sentences
where it refuses (in_specs / out_specs naming another axis, a collective
over one, a constraint naming a manual axis, axis_names not a set). An
argument sharded over an Explicit axis left out keeps that sharding in the
body's types, as JAX's. Runs on the cluster of conftest's c."""
import re

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
    assert y.sharding.spec == P("i", None)  # a jit's result: one entry per dimension
    assert seen == ["f32[1,8]{V:i}"]
    y2 = sm(g, mesh, P("i", None), P("i", None))(x)
    assert np.array_equal(np.asarray(y2), want)
    text = shmap.jit(lambda a: sm(g, mesh, P("i", None), P("i", None))(a)).lower(x).as_text()
    assert "-> P('i', None), axis_names={'i'}:" in text


def test_partial_explicit_types(c, mesh):
    """JAX's test_partial_auto_explicit: an argument sharded over the
    Explicit axis left out keeps that sharding in the body's types (each
    device holds its part of its block: nothing moves), the result is
    sharded over the out_spec's axes then the block's; at once too (a jit
    of the call, as JAX's); under grad."""
    seen = []

    def g(b):
        out = b * b
        seen.append((str(shmap.typeof(b)), str(shmap.typeof(out))))
        return out

    x = put(c, mesh, V, P("i", "j"))
    f = shmap.jit(lambda a: sm(g, mesh, P("i", None), P("i", None))(a))
    y = f(x)
    assert seen[-1] == ("f32[1,8@j]{V:i}", "f32[1,8@j]{V:i}")
    assert y.sharding.spec == P("i", "j")
    assert np.array_equal(np.asarray(y), V * V)
    y2 = sm(g, mesh, P("i", None), P("i", None))(x)
    assert y2.sharding.spec == P("i", "j") and np.array_equal(np.asarray(y2), V * V)
    low = f.lower(x).as_text()
    assert "all_gather" not in low.split("# lowered")[-1], low
    gr = shmap.jit(shmap.grad(lambda a: jnp.sum(f(a))))(x)
    assert np.array_equal(np.asarray(gr), 2 * V)


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
    """JAX's sentences and exception types; a collective along a dimension
    sharded over an Explicit axis left out."""
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
    with pytest.raises(shmap.ProgramError, match="must be whole over 'j'") as e:
        shmap.jit(lambda a: sm(lambda b: lax.all_gather(b, "i", axis=1, tiled=True), mesh,
                               P("i", None), P("i", None))(a))(put(c, mesh, V, P("i", "j")))
    assert "all_gather: the operand of type f32[1,8@j]{V:i} is sharded over 'j'" in str(e.value)


def test_partial_rules_in_body(c, mesh):
    """The jit rules hold over the axes left out, inside the body: a sum
    over a dimension sharded over 'j' (a psum over 'j' in the lowered
    program), a while loop whose carry keeps its sharding, a product
    contracting over 'j' with out_sharding= (without it, JAX's sentence),
    all beside collectives over 'i'."""
    v = np.arange(64.0, dtype=np.float32).reshape(8, 8)
    w = np.arange(64.0, dtype=np.float32).reshape(8, 8) / 8

    def body(b, u, out_sharding=P(None, None)):
        t = jnp.sum(b, axis=1)
        _, acc = lax.while_loop(lambda s: s[0] < 3,
                                lambda s: (s[0] + 1, s[1] * 2 + lax.psum(s[1], "i")), (0, b))
        m = jnp.dot(b, u.T, out_sharding=out_sharding)
        return acc + t[:, None] + m[:, :8]

    f = sm(body, mesh, (P("i"), P()), P("i"))
    x, u = put(c, mesh, v, P("i", "j")), put(c, mesh, w, P(None, "j"))
    y = f(x, u)
    blocks = v.reshape(4, 2, 8)
    acc = blocks.copy()
    for _ in range(3):
        acc = acc * 2 + acc.sum(axis=0, keepdims=True)
    want = (acc + blocks.sum(axis=2, keepdims=True)).reshape(8, 8) + v @ w.T
    assert y.sharding.spec == P("i", "j")
    assert np.allclose(np.asarray(y), want, rtol=1e-6)
    low = shmap.jit(lambda a, b: f(a, b)).lower(x, u).as_text().split("# lowered")[-1]
    assert re.search(r"= psum\(v\d+, 'j'\)", low), low  # the sum over the dimension on 'j'
    with pytest.raises(shmap.ProgramError, match="Contracting dimensions are sharded"):
        sm(lambda b, u: body(b, u, None), mesh, (P("i"), P()), P("i"))(x, u)


def test_in_specs_inferred(c, mesh):
    """JAX's in_specs left out (every axis of axis_names Explicit): each
    argument's sharding over those axes, as JAX's test_partial_auto_explicit
    writes it; a full-manual one too; Auto axes: JAX's TypeError."""
    x = put(c, mesh, V, P("i", "j"))
    f = shmap.shard_map(lambda b: b * 2, mesh=mesh, out_specs=P("i", None), axis_names={"i"})
    y = f(x)
    assert y.sharding.spec == P("i", "j") and np.array_equal(np.asarray(y), V * 2)
    y = shmap.jit(lambda a: f(a) + 1)(x)
    assert np.array_equal(np.asarray(y), V * 2 + 1)
    full = shmap.shard_map(lambda b: lax.psum(b, "j"), mesh=mesh, out_specs=P("i"))
    want = V.reshape(4, 8)[:, :4] + V.reshape(4, 8)[:, 4:]
    assert np.array_equal(np.asarray(full(x)), want)
    am = c.make_mesh((4, 2), ("i", "j"), axis_types=(shmap.Auto, shmap.Explicit))
    with pytest.raises(TypeError, match=r"in_specs argument must be a pytree of "
                                        r"`jax.sharding.PartitionSpec` instances, but it was "
                                        r"`None` when axis_names=frozenset\(\{'i'\}\) are of "
                                        r"type AxisType.Auto"):
        shmap.shard_map(lambda b: b, mesh=am, out_specs=P("i"), axis_names={"i"})(
            put(c, am, V, P("i")))


def test_partial_without_arguments(c, mesh):
    """JAX's test_partial_auto_of_pjit (a jit inside the body, its
    out_shardings over the other axes) and test_partial_auto_axis_index: a
    shard_map of no arguments, at once and in a jit run under use_mesh; a
    jit of no arguments and no mesh runs on the shard_map's mesh, as JAX's
    (test_outer_jit_detects_shard_map_mesh)."""
    def h():
        y = shmap.jit(lambda: jnp.zeros(()), out_shardings=NamedSharding(mesh, P()))()
        return y.reshape((1,))

    def f():
        return sm(h, mesh, (), P("i"), check_vma=False)()

    assert np.array_equal(np.asarray(f()), np.zeros(4))
    with shmap.sharding.use_mesh(mesh):
        assert np.array_equal(np.asarray(shmap.jit(f)()), np.zeros(4))
        g = shmap.jit(lambda: sm(lambda: lax.axis_index("i").reshape(1, 1), mesh, (),
                                 P("i", None), check_vma=False)(),
                      out_shardings=NamedSharding(mesh, P("i", None)))
        assert np.array_equal(np.asarray(g()), np.arange(4).reshape(-1, 1))
    assert np.array_equal(np.asarray(shmap.jit(f)()), np.zeros(4))


def test_nested(c, mesh):
    """JAX's test_nested_partial_auto (and its grad): a shard_map over the
    axes left (none named) called from the body of one over 'i'; and
    test_nested_partial_auto_1d's layout, with a psum over the outer axis
    inside the inner body. An inner shard_map naming an outer axis, given
    the mesh (not the context's, whose outer axes are Manual), or called from
    a body Manual over every axis, is refused."""
    m = c.make_mesh((2, 2), ("i", "j"))
    v = np.arange(32.0, dtype=np.float32).reshape(4, 8)
    x = put(c, m, v, P("i", "j"))

    def h(b):
        return shmap.shard_map(lambda y: y * y, in_specs=P(None, "j"),
                               out_specs=P(None, "j"))(b)

    f = shmap.jit(lambda a: sm(h, m, P("i", None), P("i", None), check_vma=False)(a))
    with shmap.sharding.use_mesh(m):
        assert np.array_equal(np.asarray(f(x)), v * v)
        g = shmap.grad(lambda a: f(a).sum())(x)
        assert np.array_equal(np.asarray(g), 2 * v)
    m3 = c.make_mesh((2, 2, 2), ("x", "y", "z"))
    seen = []

    def g3(b):
        seen.append(str(shmap.typeof(b)))  # JAX's inner_vma: the outer axis too
        return b * b + lax.psum(b, "x")

    def h3(b):
        out = shmap.shard_map(g3, in_specs=P(None, "y"), out_specs=P(None, "y"),
                              axis_names={"y"})(b)  # the context mesh's (given m3: JAX's error)
        seen.append(str(shmap.typeof(out)))
        return out

    f3 = shmap.jit(lambda a: shmap.shard_map(h3, mesh=m3, in_specs=P("x", None),
                                             out_specs=P("x", None), axis_names={"x"})(a))
    y = f3(put(c, m3, v, P("x", "y")))
    assert np.array_equal(np.asarray(y), v * v + np.concatenate([v[:2] + v[2:]] * 2))
    assert seen[-2:] == ["f32[2,4]{V:x,y}", "f32[2,8@y]{V:x}"] and y.sharding.spec == P("x", "y")
    def inner(b, names=None):  # on the context mesh, as JAX's nested shard_maps
        return shmap.shard_map(lambda q: q, in_specs=P() if names else P("i"),
                               out_specs=P() if names else P("i"), axis_names=names)(b)
    with pytest.raises(shmap.ProgramError, match=r"in_specs argument must refer to an axis "
                                                 r"marked as manual \(frozenset\(\{'j'\}\)\)"):
        shmap.jit(lambda a: sm(inner, m, P("i"), P("i"))(a))(x)  # 'i' is the outer one's
    with pytest.raises(ValueError, match=r"The context mesh .*'i': 2, 'j': 2, axis_types="
                                         r"\(Manual, Explicit\)\) should match the mesh passed "
                                         r"to shard_map"):  # given the mesh: JAX's refusal
        shmap.jit(lambda a: sm(lambda b: sm(lambda q: q, m, P("i"), P("i"))(b), m,
                               P("i"), P("i"))(a))(x)
    with pytest.raises(shmap.InvalidArgument, match="Manual over every mesh axis cannot call "
                                                    "another one"):
        shmap.jit(lambda a: shmap.shard_map(lambda b: inner(b, {"j"}),
                                            mesh=m, in_specs=P("i"), out_specs=P("i"))(a))(x)
