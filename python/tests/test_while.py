"""lax.while_loop with a predicate on traced values, and fori_loop with
traced bounds: loops of the program the service runs (the number of turns
is the data's), in jit bodies, shard_map bodies and under vmap, checked
against the same loop run by numpy; JAX's sentences for what it refuses."""
import collections
import re
import threading

import numpy as np
import pytest

import shmap
from shmap import P, NamedSharding
from shmap import lax
from shmap import numpy as jnp

from _util import put as _put

RNG = np.random.default_rng(17)
XA = RNG.standard_normal((8, 6)).astype(np.float32)


def test_jit_loop_until_converged(c, mesh):
    """Newton's square root until every element converges: the condition
    reads a reduction over the sharded array (a collective inside the
    loop), the counter is a Python int in the carry."""
    a = np.abs(XA) * 10 + 1

    def newton(a):
        def cond(s):
            y, it = s
            return (jnp.max(jnp.abs(y * y - a) / a) > 1e-6) & (it < 50)

        def body(s):
            y, it = s
            return 0.5 * (y + a / y), it + 1
        return lax.while_loop(cond, body, (a, 0))
    y, it = shmap.jit(newton)(_put(c, mesh, a, P("i", "j")))
    wy, wit = a.copy(), 0
    while np.max(np.abs(wy * wy - a) / a) > 1e-6 and wit < 50:
        wy, wit = (0.5 * (wy + a / wy)).astype(np.float32), wit + 1
    assert int(np.asarray(it)) == wit and 3 < wit < 50
    assert np.array_equal(np.asarray(y), wy)
    assert y.sharding.spec == P("i", "j")
    # the loop is the program's, not unrolled
    text = shmap.jit(newton).lower(_put(c, mesh, a, P("i", "j"))).as_text()
    jit_text, lowered = text.split("# lowered")
    assert jit_text.count("while ") == 1 and jit_text.count("0.5 *") == 1
    assert "pmax" in lowered.split("while ")[1]  # the condition's reduction, every turn


def test_pytree_carry_nested_loops_and_zero_turns(c, mesh):
    Carry = collections.namedtuple("Carry", "x count")

    def f(x):
        def outer_body(s):
            def inner(t):  # doubles x until its norm passes a bound that grows with count
                return lax.while_loop(lambda u: jnp.sum(u * u) < 10.0 * (s.count + 1),
                                      lambda u: u * 2, t)
            return Carry(inner(s.x), s.count + 1)
        r = lax.while_loop(lambda s: s.count < 3, outer_body, Carry(x, jnp.int32(0)))
        never = lax.while_loop(lambda d: d["v"].sum() > 1e30, lambda d: {"v": d["v"] * 0},
                               {"v": x})
        return r, never
    x = XA / 100
    r, never = shmap.jit(f)(_put(c, mesh, x, P("i", None)))
    want = x.copy()
    for count in range(3):
        while np.sum(want * want) < 10.0 * (count + 1):
            want = want * 2
    assert isinstance(r, Carry)
    assert np.array_equal(np.asarray(r.x), want) and int(np.asarray(r.count)) == 3
    assert np.array_equal(np.asarray(never["v"]), x)


def test_fori_loop_traced_bounds(c, mesh):
    x = _put(c, mesh, XA, P("i", "j"))
    f = shmap.jit(lambda n, x: lax.fori_loop(0, n, lambda i, v: v * 0.5 + i, x))
    for n in (0, 1, 7):
        want = XA.copy()
        for i in range(n):
            want = want * np.float32(0.5) + np.float32(i)
        got = f(c.device_put(np.int32(n), NamedSharding(mesh, P())), x)
        assert np.array_equal(np.asarray(got), want), n
    with pytest.raises(TypeError, match="lower and upper arguments to fori_loop must have "
                                        "equal types, got int32 and int64"):
        shmap.jit(lambda n, x: lax.fori_loop(n, n.astype(jnp.int64), lambda i, v: v, x))(
            c.device_put(np.int32(1), NamedSharding(mesh, P())), x)


def test_shard_map_loop_per_device(c, mesh):
    """In a shard_map body each device runs its own number of turns (no
    collective in the loop); with a psum in the condition, all the same."""
    x = _put(c, mesh, np.abs(XA) * 100 + 1, P("i", "j"))

    def body(b):
        halvings = lax.while_loop(lambda s: jnp.max(s[0]) > 1, lambda s: (s[0] / 2, s[1] + 1),
                                  (b, lax.pvary(jnp.int32(0), ("i", "j"))))[1]
        together = lax.while_loop(lambda s: lax.pmax(jnp.max(s), ("i", "j")) > 1,
                                  lambda s: s / 2, b)
        return halvings.reshape(1, 1), together
    h, t = shmap.jit(shmap.shard_map(body, mesh=mesh, in_specs=P("i", "j"),
                                     out_specs=(P("i", "j"), P("i", "j"))))(x)
    a = np.abs(XA) * 100 + 1
    want_h = np.zeros((4, 2), np.int32)
    for i in range(4):
        for j in range(2):
            blk = a[2 * i:2 * i + 2, 3 * j:3 * j + 3]
            while blk.max() > 1:
                blk, want_h[i, j] = blk / 2, want_h[i, j] + 1
    assert np.array_equal(np.asarray(h), want_h) and len(set(want_h.ravel())) > 1
    want_t = a.copy()
    while want_t.max() > 1:
        want_t = want_t / 2
    assert np.array_equal(np.asarray(t), want_t)
    # a carry that starts invariant and becomes varying: JAX's sentence
    with pytest.raises(TypeError, match=re.escape(
            "The input carry component s[1] has type f32[] but the corresponding output carry "
            "component has type f32[]{V:i,j}, so the varying manual axes do not match.\n\nThis "
            "might be fixed by applying `jax.lax.pcast(..., ('i', 'j'), to='varying')`, to the "
            "initial carry value corresponding to the input carry component s[1].")):
        shmap.jit(shmap.shard_map(
            lambda b: lax.while_loop(lambda s: s[0] < 3, lambda s: (s[0] + 1, s[1] + b.sum()),
                                     (0, jnp.zeros(())))[1].reshape(1, 1),
            mesh=mesh, in_specs=P("i", "j"), out_specs=P("i", "j")))(x)


def test_vmap_of_while(c, mesh):
    """A batched predicate: the loop runs while any example's holds, each
    example keeping its carry once its own is false (JAX's batching)."""
    xs = np.array([1, 2, 9, 40, 3, 7, 100, 1000], np.int32)

    def collatz_steps(n):
        step = lambda s: (jnp.where(s[0] % 2 == 0, s[0] // 2, 3 * s[0] + 1), s[1] + 1)
        return lax.while_loop(lambda s: s[0] != 1, step, (n, 0))[1]

    def ref(n):
        k = 0
        while n != 1:
            n, k = (n // 2 if n % 2 == 0 else 3 * n + 1), k + 1
        return k
    m8 = c.make_mesh((8,), ("b",))
    got = shmap.jit(shmap.vmap(collatz_steps))(c.device_put(xs, NamedSharding(m8, P("b"))))
    assert np.asarray(got).tolist() == [ref(int(v)) for v in xs]
    # an unbatched carry the body batches (it closes over the batched bound)
    fa = np.array([1, 3, 10, 100, 0.5, 2, 7, 64], np.float32)
    got = shmap.jit(shmap.vmap(lambda a: lax.while_loop(lambda t: t < a, lambda t: t * 2.0,
                                                        1.0)))(
        c.device_put(fa, NamedSharding(m8, P("b"))))
    want = []
    for a in fa:
        t = np.float32(1.0)
        while t < a:
            t = t * 2
        want.append(t)
    assert np.array_equal(np.asarray(got), np.array(want, np.float32))


def test_refusals(c, mesh):
    x = _put(c, mesh, XA, P("i", "j"))
    with pytest.raises(TypeError, match=r"while_loop body function carry input and carry output "
                                        r"must have equal types, but they differ:\n\nThe input "
                                        r"carry component v has type f32\[8@i,6\] but the "
                                        r"corresponding output carry component has type "
                                        r"f32\[8@i,3\]\."):
        shmap.jit(lambda x: lax.while_loop(lambda v: v.sum() < 3, lambda v: v[:, :3], x))(
            _put(c, mesh, XA, P("i", None)))
    with pytest.raises(TypeError, match="must have the same pytree structure"):
        shmap.jit(lambda x: lax.while_loop(lambda v: v[0].sum() < 3, lambda v: v[0], (x, x)))(x)
    with pytest.raises(TypeError, match=r"cond_fun must return a boolean scalar, but got output "
                                        r"type\(s\) \[f32\[\]\]"):
        shmap.jit(lambda x: lax.while_loop(lambda v: v.sum(), lambda v: v, x))(x)
    loss = lambda x: lax.while_loop(lambda v: v.sum() < 30, lambda v: v * 2, x).sum()
    with pytest.raises(ValueError, match="Reverse-mode differentiation does not work for "
                                         "lax.while_loop"):
        shmap.grad(loss)(x)
    # a loop that does not read what grad differentiates is fine
    g = shmap.grad(lambda x: (x * lax.while_loop(lambda k: k < 4, lambda k: k + 1,
                                                  jnp.int32(0) + (x.sum() > 1e9))).sum())(x)
    assert np.array_equal(np.asarray(g), np.full(XA.shape, 4, np.float32))


def test_endless_loop_is_cancelled(c, mesh):
    """A loop with no collective still ends when the job is cancelled."""
    x = _put(c, mesh, np.ones((8, 6), np.float32), P("i", "j"))
    fut = shmap.jit(lambda x: lax.while_loop(lambda v: v.sum() > 0, lambda v: v + 1, x)).submit(x)
    threading.Event().wait(0.3)
    assert not fut.done()
    fut.cancel()
    with pytest.raises(shmap.ShmapError, match="cancel"):
        fut.result(timeout=20)


def test_scan_is_a_loop(c, mesh):
    """lax.scan over traced values: one copy of the step in a while loop
    (200 steps: the unrolled form stacked its ys in one concatenate, at
    most 64), ys written at each step's index, reverse; lax.map through it;
    JAX's sentence for a carry whose type changes; under grad it unrolls."""
    w0 = (np.eye(6) * 0.9 + 0.01).astype(np.float32)
    xa = RNG.standard_normal((200, 6)).astype(np.float32)
    w, xs = _put(c, mesh, w0, P()), _put(c, mesh, xa, P())

    def run(w, xs, reverse):
        return lax.scan(lambda h, x: (jnp.tanh(h @ w + x), (h.sum(), h * 2)), jnp.zeros(6), xs,
                        reverse=reverse)
    for reverse in (False, True):
        f = shmap.jit(lambda w, xs: run(w, xs, reverse))
        jit_text = f.lower(w, xs).as_text().split("# lowered")[0]
        assert jit_text.count("while ") == 1 and jit_text.count("tanh") == 1
        h, (s, h2) = f(w, xs)
        wh, ws, wh2 = np.zeros(6, np.float32), [None] * 200, [None] * 200
        for i in (range(199, -1, -1) if reverse else range(200)):
            ws[i], wh2[i] = wh.sum(), wh * 2
            wh = np.tanh(wh @ w0 + xa[i])
        np.testing.assert_allclose(np.asarray(h), wh, atol=1e-6)
        np.testing.assert_allclose(np.asarray(s), np.array(ws), atol=1e-5)
        np.testing.assert_allclose(np.asarray(h2), np.array(wh2), atol=1e-6)
    rows = shmap.jit(lambda xs: lax.map(lambda r: jnp.sum(r * r), xs))(xs)
    np.testing.assert_allclose(np.asarray(rows), (xa * xa).sum(1), rtol=1e-6)
    with pytest.raises(TypeError, match="scan body function carry input and carry output must "
                                        "have equal types"):
        shmap.jit(lambda xs: lax.scan(lambda h, x: (h[:3], None), jnp.zeros(6), xs))(xs)
    # under grad: unrolled (and its 200 ys joined in groups of 64)
    g = shmap.grad(lambda w: run(w, xs, False)[1][0].sum())(w)
    assert np.all(np.isfinite(np.asarray(g))) and np.asarray(g).shape == (6, 6)
    stacked = shmap.jit(lambda xs: jnp.stack([xs[i] for i in range(100)]))(xs)
    assert np.array_equal(np.asarray(stacked), xa[:100])


def test_debug_print_in_a_loop_is_refused(c, mesh):
    x = _put(c, mesh, XA, P("i", "j"))

    def f(x):
        def body(v):
            shmap.debug.print("{}", v.sum())
            return v * 2
        return lax.while_loop(lambda v: v.sum() < 100, body, x)
    with pytest.raises(shmap.InvalidArgument, match="debug.print of traced values inside a "
                                                    "traced while_loop"):
        shmap.jit(f)(x)


def test_cond_runs_one_branch(c, mesh):
    """lax.cond / switch on a traced predicate run only the branch picked
    (each in a loop that runs once or never): a branch that would never
    end is not run when not picked. Per device in a shard_map body."""
    x = _put(c, mesh, np.abs(XA) + 1, P("i", "j"))

    def endless(v):  # never ends if run (v stays positive)
        return lax.while_loop(lambda u: u.sum() > 0, lambda u: u + 1, v)
    f = shmap.jit(lambda x: lax.cond(x.sum() > 0, lambda v: v * 2, endless, x))
    fut = f.submit(x)
    try:
        out = fut.result(timeout=30)
    finally:
        if not fut.done():
            fut.cancel()
    assert np.allclose(np.asarray(out), (np.abs(XA) + 1) * 2)
    g = shmap.jit(lambda x, i: lax.switch(i, [endless, lambda v: v - 1, endless], x))
    out = g(x, c.device_put(np.int32(1), NamedSharding(mesh, P()))).to_numpy()
    assert np.allclose(out, np.abs(XA))
    text = f.lower(x).as_text().split("# lowered")[0]
    assert text.count("while ") == 3  # the two branches' and endless's own
    # each device picks its branch (a predicate varying over the mesh)
    sm = shmap.jit(shmap.shard_map(lambda b: lax.cond(b[0, 0] > 2, lambda v: v * 0, lambda v: v,
                                                      b),
                                   mesh=mesh, in_specs=P("i", "j"), out_specs=P("i", "j")))
    a = np.abs(XA) + 1
    want = a.copy()
    for i in range(4):
        for j in range(2):
            blk = want[2 * i:2 * i + 2, 3 * j:3 * j + 3]
            if blk[0, 0] > 2:
                blk[...] = 0
    assert np.array_equal(np.asarray(sm(x)), want)
