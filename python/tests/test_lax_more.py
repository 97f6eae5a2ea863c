"""More of jax.lax made of the op table's ops: select_n, reduce (JAX's
monoids and general computations), reduce_and / or / xor, reduce_precision
(bit for bit against XLA's algorithm run on the bits in numpy), the
collectives pshuffle / pswapaxes / pbroadcast (against what JAX's
definitions give each device), approx_max_k / approx_min_k, lax's
comparison, trigonometry and rounding names, mulhi, nextafter, the shape
helpers and shape tuples, sort of several operands, platform_dependent.
Values against numpy, in a jit on sharded Arrays where the function allows
it and at once; JAX's sentences where it refuses arguments. Runs on the
cluster of conftest's c."""
import numpy as np
import pytest

import shmap
from shmap import P, NamedSharding
from shmap import lax
from shmap import numpy as jnp

from _util import put as _put


RNG = np.random.default_rng(7)
XA = RNG.standard_normal((8, 6)).astype(np.float32)
IA = RNG.integers(-50, 50, (8, 6)).astype(np.int32)


# ---- select_n ----------------------------------------------------------------------------


def test_select_n(c, mesh):
    """A bool which picks cases[1] where true; an integer one indexes the
    cases, below 0 the first and past the end the last (XLA's tree of
    selects); a scalar which; uint8 which; in a jit on sharded values and
    at once."""
    x, i = _put(c, mesh, XA, P("i", "j")), _put(c, mesh, IA, P("i", "j"))
    w = RNG.integers(-2, 5, (8, 6)).astype(np.int32)
    W = _put(c, mesh, w, P("i", "j"))
    got = shmap.jit(lambda w, x: (lax.select_n(w, x, x * 2, x * 3, x * 4),
                                  lax.select_n(w > 1, x, -x),
                                  lax.select_n(w.astype(np.uint8), x, x + 1, x + 2),
                                  lax.select_n(2, x, x * 2, x * 3),
                                  lax.select_n(w, x)))(W, x)
    cases = [XA * k for k in (1, 2, 3, 4)]
    want = (np.choose(np.clip(w, 0, 3), cases), np.where(w > 1, -XA, XA),
            np.choose(np.clip(w.astype(np.uint8), 0, 2), [XA, XA + 1, XA + 2]), XA * 3, XA)
    for g, e in zip(got, want):
        assert g.dtype == np.float32 and np.array_equal(np.asarray(g), e)
    # the uint8 index: -1 and -2 wrap to 255 and 254, past the end: the last case
    assert (np.asarray(got[2])[w < 0] == (XA + 2)[w < 0]).all()
    now = lax.select_n(_put(c, mesh, w == 3, P("i", "j")), i, i * 0)
    assert now.dtype == np.int32 and np.array_equal(np.asarray(now), np.where(w == 3, 0, IA))


def test_select_n_refusals(c, mesh):
    x = _put(c, mesh, XA, P())
    i = _put(c, mesh, IA, P())
    with pytest.raises(ValueError, match=r"^select_n\(\) must have at least one case$"):
        lax.select_n(x > 0)
    with pytest.raises(TypeError, match=r"^select cases must have the same shapes, got "
                       r"\[\(8, 6\), \(6,\)\]\.$"):
        shmap.jit(lambda x: lax.select_n(x > 0, x, x[0]))(x)
    with pytest.raises(TypeError, match=r"^select `which` must be scalar or have the same shape "
                       r"as cases, got `which` shape \(6,\) but case shape \(8, 6\)\.$"):
        shmap.jit(lambda x: lax.select_n(x[0] > 0, x, x))(x)
    with pytest.raises(TypeError, match=r"^lax\.select requires arguments to have the same "
                       r"dtypes, got float32, int32\. \(Tip: jnp\.where is a similar function "
                       r"that does automatic type promotion on inputs\)\.$"):
        shmap.jit(lambda x, i: lax.select_n(x > 0, x, i))(x, i)
    with pytest.raises(TypeError, match=r"^select `which` must be boolean or integer type, got "
                       r"float32\.$"):
        shmap.jit(lambda x: lax.select_n(x, x, x))(x)
    with pytest.raises(TypeError, match=r"^select with boolean `which` cannot have > 2 cases\.$"):
        shmap.jit(lambda x: lax.select_n(x > 0, x, x, x))(x)


# ---- reduce ------------------------------------------------------------------------------


def test_reduce_monoids(c, mesh):
    """The computations JAX recognizes with their identities (and jnp's
    same functions, logical and / or / xor of bools) as the reductions,
    over sharded dimensions in a jit, the operand's dtype kept."""
    x, i = _put(c, mesh, XA, P("i", "j")), _put(c, mesh, IA, P("i", "j"))
    b = _put(c, mesh, IA > 0, P("i", "j"))
    u = RNG.integers(0, 256, (8, 6)).astype(np.uint8)
    U = _put(c, mesh, u, P("i", "j"))
    f32min = np.iinfo(np.int32).min

    def f(x, i, b, u):
        return (lax.reduce(x, 0.0, lax.add, (1,)), lax.reduce(x, 0.0, jnp.add, (0, 1)),
                lax.reduce(x, 1.0, lax.mul, (0,)), lax.reduce(x, -np.inf, lax.max, (1,)),
                lax.reduce(x, np.inf, jnp.minimum, (0,)), lax.reduce(i, f32min, lax.max, (0, 1)),
                lax.reduce(i, 0, lax.bitwise_or, (0,)), lax.reduce(i, -1, lax.bitwise_and, (1,)),
                lax.reduce(i, 0, lax.bitwise_xor, (0,)),
                lax.reduce(b, True, jnp.logical_and, (1,)),
                lax.reduce(b, False, lax.bitwise_or, (0,)),
                lax.reduce(b, False, jnp.logical_xor, (1,)),
                lax.reduce(u, 0, lax.add, (1,)), lax.reduce(i, 1, lax.mul, (1,)))
    want = (XA.sum(1), XA.sum(), XA.prod(0), XA.max(1), XA.min(0), IA.max(),
            np.bitwise_or.reduce(IA, 0), np.bitwise_and.reduce(IA, 1),
            np.bitwise_xor.reduce(IA, 0), (IA > 0).all(1), (IA > 0).any(0),
            np.logical_xor.reduce(IA > 0, 1), u.sum(1, dtype=np.uint8),
            IA.prod(1, dtype=np.int32))
    for got in (shmap.jit(f)(x, i, b, U), f(x, i, b, U)):
        for k, (g, e) in enumerate(zip(got, want)):
            e = np.asarray(e)
            assert g.dtype == e.dtype and g.shape == e.shape, (k, g, e)
            assert np.allclose(np.asarray(g), e, rtol=1e-5, atol=1e-5), (k, g, e)


def test_reduce_general_computations(c, mesh):
    """Other computations: applied to adjacent pairs (so an associative
    one that does not commute, the composition of affine maps, keeps its
    order), over several pytree operands (an argmax that keeps the first
    index of the maximum), init_values folded in once (a non-identity
    init of a known op too), a traced init, a zero-length dimension."""
    x = _put(c, mesh, XA, P("i", "j"))
    a = RNG.integers(1, 4, (8, 7)).astype(np.float32)
    bb = RNG.integers(-3, 4, (8, 7)).astype(np.float32)
    A, B = _put(c, mesh, a, P("i")), _put(c, mesh, bb, P("i"))

    def compose(p, q):  # x -> q.a * (p.a * x + p.b) + q.b
        return (p[0] * q[0], q[0] * p[1] + q[1])

    def argmax(p, q):
        take_q = (q[0] > p[0]) | ((q[0] == p[0]) & (q[1] < p[1]))
        return (jnp.where(take_q, q[0], p[0]), jnp.where(take_q, q[1], p[1]))

    def f(x, a, b):
        idx = lax.broadcasted_iota(np.int32, x.shape, 1)
        return (lax.reduce((a, b), (1.0, 0.0), compose, (1,)),
                lax.reduce((x, idx), (-np.inf, 0), argmax, (1,)),
                lax.reduce(x, 10.0, lax.add, (0,)),
                lax.reduce(x, 0.0, lambda p, q: p + q, (0, 1)),
                lax.reduce(x, x[0, 0], lambda p, q: jnp.maximum(p, q), (1,)),
                lax.reduce({"v": x}, {"v": 1.0}, lambda p, q: {"v": p["v"] * q["v"]}, (1,)))
    got = shmap.jit(f)(x, A, B)
    wa, wb = np.ones(8, np.float32), np.zeros(8, np.float32)
    for k in range(7):
        wa, wb = compose((wa, wb), (a[:, k], bb[:, k]))
    assert np.array_equal(np.asarray(got[0][0]), wa) and np.array_equal(np.asarray(got[0][1]), wb)
    assert np.array_equal(np.asarray(got[1][0]), XA.max(1))
    assert got[1][1].dtype == np.int32 and np.array_equal(np.asarray(got[1][1]), XA.argmax(1))
    assert np.allclose(np.asarray(got[2]), XA.sum(0) + 10, atol=1e-5)
    assert np.allclose(np.asarray(got[3]), XA.sum(), atol=1e-4)
    assert np.array_equal(np.asarray(got[4]), np.maximum(XA.max(1), XA[0, 0]))
    assert isinstance(got[5], dict) and np.allclose(np.asarray(got[5]["v"]), XA.prod(1), rtol=1e-5)
    # a zero-length dimension: init_values; at once on an Array
    z = _put(c, mesh, np.zeros((3, 0), np.float32), P())
    r = lax.reduce(z, 5.0, lambda p, q: p + q, (1,))
    assert np.array_equal(np.asarray(r), [5.0, 5.0, 5.0])
    assert np.array_equal(np.asarray(lax.reduce(x, 0.0, lambda p, q: jnp.maximum(p, q), (0,))),
                          np.maximum(XA.max(0), 0))


def test_reduce_refusals(c, mesh):
    x = _put(c, mesh, XA, P())
    with pytest.raises(ValueError, match=r"^Operands must have the same tree structure as "
                       r"init_values: PyTreeDef\(\(\*, \*\)\) vs\. PyTreeDef\(\*\)$"):
        lax.reduce((x, x), 0.0, lax.add, (0,))
    with pytest.raises(ValueError, match=r"^reduce found non-scalar initial value: \[\(6,\)\]$"):
        shmap.jit(lambda x: lax.reduce(x, x[0], lax.add, (0,)))(x)
    with pytest.raises(TypeError, match=r"^reduce operand dtypes should match corresponding "
                       r"initial value dtypes, got operands=\[ShapedArray\(float32\[8,6\]\)\] "
                       r"and initial_values=\[ShapedArray\(int32\[\]\)\]$"):
        shmap.jit(lambda x: lax.reduce(x, x[0, 0].astype(np.int32), lambda p, q: p + q,
                                       (0,)))(x)
    with pytest.raises(ValueError, match=r"^reduction axes \(2,\) contains out-of-bounds indices "
                       r"for float32\[8,6\]\.$"):
        lax.reduce(x, 0.0, lax.add, (2,))
    with pytest.raises(ValueError, match=r"^duplicate value in 'axes' of reduction: \(0, 0\)$"):
        lax.reduce(x, -np.inf, lax.max, (0, 0))
    with pytest.raises(TypeError, match=r"^reduce_sum does not accept dtype bool\. Accepted "
                       r"dtypes are subtypes of number\.$"):
        lax.reduce(x > 0, False, lax.add, (0,))
    with pytest.raises(TypeError, match=r"^logical reduction requires operand dtype bool or "
                       r"int, got float32\.$"):
        lax.reduce_xor(x, (0,))


def test_reduce_and_or_xor(c, mesh):
    """Bitwise for integers (their dtype kept, as JAX's), and / or / parity
    for bools."""
    i = _put(c, mesh, IA, P("i", "j"))
    u = RNG.integers(0, 256, (8, 6)).astype(np.uint8)
    b = IA % 3 == 0
    got = shmap.jit(lambda i, u, b: (lax.reduce_and(i, (0,)), lax.reduce_or(i, (0, 1)),
                                     lax.reduce_xor(i, (1,)), lax.reduce_xor(u, (0,)),
                                     lax.reduce_and(b, (1,)), lax.reduce_or(b, (0,)),
                                     lax.reduce_xor(b, (0, 1))))(
        i, _put(c, mesh, u, P("i", "j")), _put(c, mesh, b, P("i", "j")))
    want = (np.bitwise_and.reduce(IA, 0), np.bitwise_or.reduce(IA.ravel()),
            np.bitwise_xor.reduce(IA, 1), np.bitwise_xor.reduce(u, 0), b.all(1), b.any(0),
            np.logical_xor.reduce(b.ravel()))
    for g, e in zip(got, want):
        e = np.asarray(e)
        assert g.dtype == e.dtype and np.array_equal(np.asarray(g), e), (g, e)


# ---- reduce_precision --------------------------------------------------------------------


_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}
_BITS = {np.float16: (5, 10), np.float32: (8, 23), np.float64: (11, 52)}


def _xla_reduce_precision(x, exponent_bits, mantissa_bits):
    """XLA's ReducePrecision as its emitter does it on the bits: the
    rounding bias added and the low mantissa bits cleared, then the
    exponent checked (inf above the range, a signed zero at or below its
    lowest exponent), NaN kept (inf with no mantissa bits)."""
    ut = _UINT[x.dtype.itemsize]
    nbits = x.dtype.itemsize * 8
    se, sm = _BITS[x.dtype.type]
    b = x.view(ut).astype(np.uint64)
    full = (1 << nbits) - 1
    if mantissa_bits < sm:
        last = 1 << (sm - mantissa_bits)
        lastbit = (b & np.uint64(last)) >> np.uint64(sm - mantissa_bits)
        b = (b + lastbit + np.uint64((last >> 1) - 1)) & np.uint64(~(last - 1) & full)
    if exponent_bits < se:
        sign, expmask = np.uint64(1 << (nbits - 1)), np.uint64(((1 << se) - 1) << sm)
        bias, rbias = (1 << (se - 1)) - 1, (1 << (exponent_bits - 1)) - 1
        xe = b & expmask
        b = np.where(xe > np.uint64((bias + rbias) << sm), (b & sign) | expmask, b)
        b = np.where(xe <= np.uint64((bias - rbias) << sm), b & sign, b)
    r = (b & np.uint64(full)).astype(ut).view(x.dtype)
    return np.where(np.isnan(x), x if mantissa_bits > 0 else x.dtype.type(np.inf), r)


def _random_floats(dtype, n):
    """Random bit patterns (every binade, subnormals, infs, NaNs) and exact
    ties of every rounding, as dtype."""
    ut = _UINT[np.dtype(dtype).itemsize]
    bits = RNG.integers(0, np.iinfo(ut).max, n, dtype=ut, endpoint=True)
    _, sm = _BITS[np.dtype(dtype).type]
    k = RNG.integers(1, sm + 1, n)  # a tie at bit k: bit k-1 set, those below clear
    ties = (bits >> k.astype(ut) << k.astype(ut)) | (ut(1) << (k - 1).astype(ut))
    v = np.concatenate([bits, ties.astype(ut)]).view(dtype)
    with np.errstate(over="ignore"):
        return np.concatenate([v, np.array([0.0, -0.0, np.inf, -np.inf, 1.0, 65504, 65520,
                                            1e-8, np.finfo(dtype).max], dtype)])


def _same_bits(g, w):
    g, w = np.asarray(g), np.asarray(w)
    nan = np.isnan(w)
    ut = _UINT[w.dtype.itemsize]
    return g.dtype == w.dtype and np.array_equal(np.isnan(g), nan) and \
        np.array_equal(g[~nan].view(ut), w[~nan].view(ut))


@pytest.mark.parametrize("dtype,formats", [
    (np.float32, [(5, 10), (8, 7), (4, 3), (1, 0), (8, 0), (11, 30), (6, 22), (8, 22)]),
    (np.float64, [(8, 23), (5, 10), (11, 7), (15, 60), (3, 51)]),
    (np.float16, [(5, 3), (4, 10), (3, 1), (8, 7), (5, 9)])])
def test_reduce_precision_bits(c, mesh, dtype, formats):
    """Every result bit for bit as XLA's emitter computes it on the bits,
    on random bit patterns and exact ties, in a jit on sharded values."""
    v = _random_floats(dtype, 2000)
    v = np.concatenate([v, np.zeros(-len(v) % 8, dtype)])
    x = _put(c, mesh, v, P("i"))
    got = shmap.jit(lambda x: [lax.reduce_precision(x, e, m) for e, m in formats])(x)
    for (e, m), g in zip(formats, got):
        with np.errstate(all="ignore"):
            want = _xla_reduce_precision(v, e, m)
        assert _same_bits(g, want), (e, m, v[np.asarray(g).view(_UINT[v.itemsize]) !=
                                               want.view(_UINT[v.itemsize])][:5])


def test_reduce_precision_as_float16_and_bfloat16(c, mesh):
    """(5, 10) is float16's rounding where float16 has normal values (XLA
    flushes its subnormals to zero); (8, 7) rounds float32 to bfloat16
    (the upper 16 bits, ties to even); NaN stays NaN, and a Python number
    is a float32 scalar; grad gives reduce_precision of the cotangent."""
    v = (RNG.standard_normal(4000) * np.exp2(RNG.integers(-30, 20, 4000))).astype(np.float32)
    got = np.asarray(lax.reduce_precision(_put(c, mesh, v, P()), 5, 10))
    with np.errstate(over="ignore"):
        h = v.astype(np.float16).astype(np.float32)
    normal = np.abs(v) >= 2.0 ** -14
    assert np.array_equal(got[normal], h[normal])
    assert (got[~normal] == 0).all() and np.array_equal(np.signbit(got[~normal]),
                                                        np.signbit(v[~normal]))
    assert (~normal).sum() > 100 and np.isinf(got).sum() > 10
    b = np.asarray(lax.reduce_precision(_put(c, mesh, v, P()), 8, 7)).view(np.uint32)
    u = v.view(np.uint32).astype(np.uint64)
    bf = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16).astype(np.uint32)
    assert np.array_equal(b, bf)
    assert float(np.asarray(lax.reduce_precision(np.pi, 8, 7))) == 3.140625
    nan = _put(c, mesh, np.array([np.nan, 1.0], np.float32), P())
    assert np.isnan(np.asarray(lax.reduce_precision(nan, 5, 2))[0])
    assert np.asarray(lax.reduce_precision(nan, 5, 0)).tolist() == [np.inf, 1.0]
    cc = RNG.standard_normal(8).astype(np.float32) * 100
    g = shmap.grad(lambda x, w: (lax.reduce_precision(x, 5, 3) * w).sum())(
        _put(c, mesh, v[:8], P()), _put(c, mesh, cc, P()))
    assert np.array_equal(np.asarray(g), _xla_reduce_precision(cc, 5, 3))


def test_bfloat16_operands(c, mesh):
    """bfloat16 values (made in the program: numpy has no bfloat16 here):
    reduce_precision to (8, m) and (5, m) bit for bit as XLA's algorithm
    on the same values as float32 (bfloat16 is float32's upper half);
    nextafter steps of bfloat16's spacing; results stay bfloat16."""
    v = np.concatenate([_random_floats(np.float32, 500)[:1000], [1.0, 0.0, 3.3895314e38]])
    v = v[np.isfinite(v)]
    v = np.concatenate([v, np.ones(-len(v) % 8, np.float32)]).astype(np.float32)
    u = v.view(np.uint32).astype(np.uint64)
    b16 = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16).astype(np.uint32).view(np.float32)
    b16 = np.where(np.isnan(v), v, b16)
    formats = [(8, 3), (5, 4), (6, 7), (8, 0)]

    def f(x):
        b = x.astype("bfloat16")
        outs = [lax.reduce_precision(b, e, m) for e, m in formats]
        assert all(o.type.startswith("bf16") for o in outs)
        return [b.astype(np.float32)] + [o.astype(np.float32) for o in outs]
    got = shmap.jit(f)(_put(c, mesh, v, P("i")))
    assert _same_bits(got[0], b16)
    for (e, m), g in zip(formats, got[1:]):
        with np.errstate(all="ignore"):
            assert _same_bits(g, _xla_reduce_precision(b16, e, m)), (e, m)
    big = np.float32(3.3895314e38)  # bfloat16's largest finite value
    x = np.array([1.0, 1.0, 0.0, big, -2.0, 3.0, 0.0, 1.5], np.float32)
    y = np.array([0.0, 2.0, 1.0, np.inf, 0.0, 3.0, -1.0, 9.0], np.float32)
    got = shmap.jit(lambda x, y: lax.nextafter(x.astype("bfloat16"), y.astype(
        "bfloat16")).astype(np.float32))(_put(c, mesh, x, P()), _put(c, mesh, y, P()))
    assert np.asarray(got).tolist() == [1 - 2.0 ** -8, 1 + 2.0 ** -7, 2.0 ** -133, np.inf,
                                        -2 + 2.0 ** -7, 3.0, -(2.0 ** -133), 1.5 + 2.0 ** -7]


def test_reduce_precision_refusals(c, mesh):
    x = _put(c, mesh, XA, P())
    with pytest.raises(TypeError, match=r"^reduce_precision does not accept dtype int32\. "
                       r"Accepted dtypes are subtypes of floating\.$"):
        lax.reduce_precision(_put(c, mesh, IA, P()), 5, 10)
    with pytest.raises(ValueError, match=r"^reduce_precision: exponent_bits must be positive; "
                       r"got 0$"):
        lax.reduce_precision(x, 0, 10)
    with pytest.raises(ValueError, match=r"^reduce_precision: mantissa_bits must be "
                       r"non-negative; got -1$"):
        lax.reduce_precision(x, 5, -1)
    with pytest.raises(TypeError):
        lax.reduce_precision(x, 5.0, 10)


# ---- collectives -------------------------------------------------------------------------


def test_pshuffle_pswapaxes_pbroadcast(c, mesh):
    """In a shard_map body, against what JAX's definitions give each
    device: pshuffle's device k receives from perm[k]; pswapaxes is
    all_to_all(x, name, axis, axis) (device r's row s is device s's row
    r); pbroadcast copies the source's block (bit for bit: -0.0, bools,
    a pytree, over two axes), leaving a leaf that does not vary as it is;
    grad of pbroadcast: the sum of the cotangents at the source."""
    x = np.arange(64, dtype=np.float32).reshape(16, 4)
    x[5, 1] = -0.0
    X = _put(c, mesh, x, P("i"))
    blocks = x.reshape(4, 4, 4)
    perm = [2, 0, 3, 1]
    sm = shmap.shard_map(lambda b: (lax.pshuffle(b, "i", perm), lax.pswapaxes(b, "i", 0),
                                    lax.pbroadcast(b, "i", 1), lax.pshuffle((b, b * 2), "i",
                                                                            perm)[1]),
                         mesh=mesh, in_specs=P("i"), out_specs=(P("i"), P("i"), P("i"), P("i")))
    got = [np.asarray(g) for g in sm(X)]
    assert np.array_equal(got[0], np.concatenate([blocks[p] for p in perm]))
    assert np.array_equal(got[1], np.concatenate([blocks[:, r] for r in range(4)]))
    assert np.array_equal(got[2].view(np.uint32), np.tile(blocks[1], (4, 1)).view(np.uint32))
    assert np.array_equal(got[3], 2 * got[0])
    # over both axes (rank = 2 i + j), a pytree of a float and a bool leaf, and an
    # invariant leaf returned as it is
    Y = _put(c, mesh, x[:8], P("i", "j"))
    sm2 = shmap.shard_map(lambda b, s: (lambda r: (r[0], r[1]["m"], r[2]))(
        lax.pbroadcast((b, {"m": b > 20}, s), ("i", "j"), 5)), mesh=mesh,
        in_specs=(P("i", "j"), P()), out_specs=(P("i", "j"), P("i", "j"), P()))
    s = _put(c, mesh, np.float32([3.5]), P())
    f, m, inv = sm2(Y, s)
    src = x[:8].reshape(4, 2, 2, 2).transpose(0, 2, 1, 3)[2, 1]  # i=2, j=1
    assert np.array_equal(np.asarray(f), np.tile(src, (4, 2)))
    assert m.dtype == np.bool_ and np.array_equal(np.asarray(m), np.tile(src > 20, (4, 2)))
    assert np.asarray(inv).tolist() == [3.5]
    g = shmap.grad(lambda v: (shmap.shard_map(lambda b: lax.pbroadcast(b, "i", 2), mesh=mesh,
                                              in_specs=P("i"), out_specs=P("i"))(v) *
                              np.arange(16, dtype=np.float32)[:, None]).sum())(X)
    rows = np.arange(16, dtype=np.float32).reshape(4, 4).sum(0)
    want = np.zeros((16, 4), np.float32)
    want[8:12] = rows[:, None]
    assert np.array_equal(np.asarray(g), want)
    with pytest.raises(ValueError, match=r"^`perm` does not represent a permutation: "
                       r"\[0, 0, 1, 2\]$"):
        shmap.shard_map(lambda b: lax.pshuffle(b, "i", [0, 0, 1, 2]), mesh=mesh,
                        in_specs=P("i"), out_specs=P("i"))(X)


# ---- approx top-k ------------------------------------------------------------------------


def test_approx_max_min_k(c, mesh):
    """Exact top-k (as JAX off TPU): the k largest (smallest) along the
    reduction dimension, in order, with int32 positions; aggregate_to_topk
    =False keeps XLA's computed number of them (256 of 2000 for k=10,
    recall 0.95, rank 2; all when the dimension fits one tile)."""
    q = RNG.standard_normal((8, 300)).astype(np.float32)
    Q = _put(c, mesh, q, P("i"))
    got = shmap.jit(lambda q: (lax.approx_max_k(q, 5), lax.approx_min_k(q, 4),
                               lax.approx_max_k(q, 3, reduction_dimension=0),
                               lax.approx_max_k(q, 1)))(_put(c, mesh, q, P()))
    order = np.argsort(-q, axis=1, kind="stable")
    (v, i), (vm, im), (v0, i0), (v1, i1) = got
    assert i.dtype == np.int32 and np.array_equal(np.asarray(i), order[:, :5])
    assert np.array_equal(np.asarray(v), np.take_along_axis(q, order[:, :5], 1))
    assert np.array_equal(np.asarray(im), np.argsort(q, 1, kind="stable")[:, :4])
    assert np.array_equal(np.asarray(v0), -np.sort(-q, 0)[:3])
    assert np.array_equal(np.asarray(i0), np.argsort(-q, 0, kind="stable")[:3])
    assert np.array_equal(np.asarray(v1)[:, 0], q.max(1))
    big = _put(c, mesh, RNG.standard_normal((2, 2000)).astype(np.float32), P())
    v, i = lax.approx_max_k(big, 10, aggregate_to_topk=False)
    assert v.shape == (2, 256) and i.shape == (2, 256)
    assert np.array_equal(np.asarray(v), -np.sort(-np.asarray(big), 1)[:, :256])
    assert lax.approx_min_k(Q, 10, aggregate_to_topk=False)[0].shape == (8, 300)
    v, _ = lax.approx_min_k(_put(c, mesh, RNG.standard_normal(3000).astype(np.float32), P()),
                            10, recall_target=0.9, aggregate_to_topk=False)
    assert v.shape == (2048,)  # ceil(ceil(3000 / 1024) / 2**1) * 1024


def test_approx_top_k_refusals(c, mesh):
    q = _put(c, mesh, XA, P())
    with pytest.raises(ValueError, match=r"^k must be positive, got 0$"):
        lax.approx_max_k(q, 0)
    with pytest.raises(ValueError, match=r"^k must be smaller than the size of reduction_dim 6, "
                       r"got 7$"):
        lax.approx_max_k(q, 7)
    with pytest.raises(ValueError, match=r"^operand must be a floating type$"):
        lax.approx_min_k(_put(c, mesh, IA, P()), 2)
    with pytest.raises(shmap.InvalidArgument, match=r"^reduction dimension 1 in operand "
                       r"float32\[8@i,6@j\] should be unsharded i\.e\. the spec of that dim "
                       r"should be `None`\.$"):
        shmap.jit(lambda q: lax.approx_max_k(q, 2, 1))(_put(c, mesh, XA, P("i", "j")))
    with pytest.raises(shmap.InvalidArgument, match=r"reduction_input_size_override: 1000 should "
                       r"be greater equals to operands\[reduction_dim\]: 2000"):
        lax.approx_max_k(_put(c, mesh, np.zeros((2, 2000), np.float32), P()), 10,
                         reduction_input_size_override=1000, aggregate_to_topk=False)


# ---- lax's names: comparisons, trigonometry, rounding, mulhi, nextafter -----------------


def test_comparisons_trig_round(c, mesh):
    x, y = _put(c, mesh, XA, P("i", "j")), _put(c, mesh, np.round(XA), P("i", "j"))
    t = _put(c, mesh, np.tanh(XA), P("i", "j"))

    def f(x, y, t):
        return (lax.eq(x, y), lax.ne(x, y), lax.lt(x, y), lax.le(x, 0.5), lax.gt(x, y),
                lax.ge(y, x), lax.acos(t), lax.asin(t), lax.atan(x), lax.acosh(x * x + 1),
                lax.asinh(x), lax.atanh(t), lax.atan2(x, y), lax.reciprocal(x))
    r = np.round(XA)
    th = np.tanh(XA)
    want = (XA == r, XA != r, XA < r, XA <= 0.5, XA > r, r >= XA, np.arccos(th), np.arcsin(th),
            np.arctan(XA), np.arccosh(XA * XA + 1), np.arcsinh(XA), np.arctanh(th),
            np.arctan2(XA, r), 1 / XA)
    for got in (shmap.jit(f)(x, y, t), f(x, y, t)):
        for k, (g, e) in enumerate(zip(got, want)):
            assert g.dtype == e.dtype and np.allclose(np.asarray(g), e, rtol=2e-6, atol=2e-6), k
    v = np.array([0.5, -0.5, 1.5, 2.5, -2.5, 0.49999997, -3.7, np.inf, -0.2, 8388609.0],
                 np.float32)
    V = _put(c, mesh, v, P())
    afz = np.asarray(shmap.jit(lax.round)(V))
    assert afz.tolist() == [1.0, -1.0, 2.0, 3.0, -3.0, 0.0, -4.0, np.inf, -0.0, 8388609.0]
    assert np.signbit(afz[8])
    even = np.asarray(lax.round(V, lax.RoundingMethod.TO_NEAREST_EVEN))
    assert np.array_equal(even, np.round(v))
    assert np.array_equal(np.asarray(lax.round(V, 1)), np.round(v))


def test_lax_name_refusals(c, mesh):
    x, i = _put(c, mesh, XA, P()), _put(c, mesh, IA, P())
    with pytest.raises(TypeError, match=r"^lax\.eq requires arguments to have the same dtypes, "
                       r"got float32, int32\. \(Tip: jnp\.equal is a similar function that does "
                       r"automatic type promotion on inputs\)\.$"):
        lax.eq(x, i)
    with pytest.raises(TypeError, match=r"^lax\.lt requires arguments to have the same dtypes, "
                       r"got int32, float32\.$"):
        lax.lt(i, 0.5)
    assert np.array_equal(np.asarray(lax.lt(i, 3)), IA < 3)  # a Python int with integers
    with pytest.raises(TypeError, match=r"^acos does not accept dtype int32\. Accepted dtypes "
                       r"are subtypes of floating, complexfloating\.$"):
        lax.acos(i)
    with pytest.raises(TypeError, match=r"^atan2 does not accept dtype int32 at position 1\. "
                       r"Accepted dtypes at position 1 are subtypes of floating, "
                       r"complexfloating\.$"):
        lax.atan2(x, i)
    with pytest.raises(TypeError, match=r"^Integers cannot be raised to negative powers, got "
                       r"integer_pow\(int32\[8,6\], -1\)$"):
        lax.reciprocal(i)
    with pytest.raises(TypeError, match=r"^round does not accept dtype int32\. Accepted dtypes "
                       r"are subtypes of floating\.$"):
        lax.round(i)
    with pytest.raises(TypeError, match=r"^mulhi does not accept dtype float32 at position 0\. "
                       r"Accepted dtypes at position 0 are subtypes of integer\.$"):
        lax.mulhi(x, i)
    with pytest.raises(TypeError, match=r"^lax\.mulhi requires arguments to have the same "
                       r"dtypes, got int32, int64\.$"):
        lax.mulhi(i, _put(c, mesh, IA.astype(np.int64), P()))


def test_mulhi(c, mesh):
    """The high half of the double-width product, for int32 (and int64,
    against Python's integers; uint8), in a jit on sharded values."""
    a = RNG.integers(-2 ** 31, 2 ** 31, 64, dtype=np.int64).astype(np.int32)
    b = RNG.integers(-2 ** 31, 2 ** 31, 64, dtype=np.int64).astype(np.int32)
    a[:3], b[:3] = [-2 ** 31, 2 ** 31 - 1, -1], [-2 ** 31, 2 ** 31 - 1, 7]
    a64 = RNG.integers(-2 ** 63, 2 ** 63 - 1, 64, dtype=np.int64)
    b64 = RNG.integers(-2 ** 63, 2 ** 63 - 1, 64, dtype=np.int64)
    a64[:4], b64[:4] = [-2 ** 63, 2 ** 63 - 1, -1, 2 ** 32], [-2 ** 63, 2 ** 63 - 1, -1, -3]
    u = RNG.integers(0, 256, 64).astype(np.uint8)
    v = RNG.integers(0, 256, 64).astype(np.uint8)
    args = [_put(c, mesh, t, P("i")) for t in (a, b, a64, b64, u, v)]
    g32, g64, g8, gs = shmap.jit(lambda a, b, a64, b64, u, v: (
        lax.mulhi(a, b), lax.mulhi(a64, b64), lax.mulhi(u, v), lax.mulhi(a, 3)))(*args)
    assert g32.dtype == np.int32 and np.array_equal(np.asarray(g32), (a.astype(np.int64) * b) >> 32)
    assert g64.dtype == np.int64 and np.asarray(g64).tolist() == [
        (int(p) * int(q)) >> 64 for p, q in zip(a64, b64)]
    assert g8.dtype == np.uint8 and np.array_equal(np.asarray(g8), (u.astype(np.int32) * v) >> 8)
    assert np.array_equal(np.asarray(gs), (a.astype(np.int64) * 3) >> 32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_nextafter(c, mesh, dtype):
    """numpy's nextafter: powers of two toward zero, zeros to the smallest
    subnormal, the largest finite to inf and inf back, subnormals, NaN,
    equal arguments."""
    fi = np.finfo(dtype)
    special = np.array([1.0, -1.0, 0.0, -0.0, fi.tiny, -fi.tiny, fi.smallest_subnormal,
                        fi.max, np.inf, -np.inf, np.nan, 2.0, 2.0, 1.5, fi.tiny * 4, 3.0],
                       dtype)
    toward = np.array([2.0, 0.0, 1.0, -1.0, 0.0, 0.0, 0.0, np.inf, 0.0, 0.0, 1.0, 0.0, 3.0,
                       -5.0, 0.0, 3.0], dtype)
    ut = _UINT[np.dtype(dtype).itemsize]
    rand = RNG.integers(0, np.iinfo(ut).max, 64, dtype=ut, endpoint=True).view(dtype)
    rand[~np.isfinite(rand)] = 1.0
    x = np.concatenate([special, rand])
    y = np.concatenate([toward, RNG.standard_normal(64).astype(dtype) * rand[::-1]])
    got = shmap.jit(lax.nextafter)(_put(c, mesh, x, P("i")), _put(c, mesh, y, P("i")))
    with np.errstate(all="ignore"):
        want = np.nextafter(x, y)
    assert _same_bits(got, want), (x, np.asarray(got), want)


# ---- shapes ------------------------------------------------------------------------------


def test_shape_helpers(c, mesh):
    x = _put(c, mesh, XA, P("i", "j"))
    s = RNG.standard_normal((4, 5, 3)).astype(np.float32)
    S = _put(c, mesh, s, P())
    i0 = np.array([0, 3, -1, 5], np.int32)
    i1 = np.array([2, 4, 1, -2], np.int32)

    def f(x, row, s, i0, i1):
        return (lax.broadcast_to_rank(row, 3), lax.broadcast_like(row, x),
                lax.broadcasted_iota(np.int32, (3, 4), 1),
                lax.broadcasted_iota(np.float32, (2, 3), 0),
                lax.collapse(s, 1), lax.collapse(s, 0, 2), *lax.split(x, (2, 0, 4), 1),
                lax.stack([x, x * 2], 1), *lax.unstack(s, 2), lax.index_take(s, (i0, i1), (0, 2)))
    got = shmap.jit(f)(x, _put(c, mesh, XA[0], P()), S, _put(c, mesh, i0, P()),
                       _put(c, mesh, i1, P()))
    assert got[1].sharding.spec == P("i", "j")  # laid out as like_arr
    got = [np.asarray(g) for g in got]
    want = [XA[0][None, None], np.broadcast_to(XA[0], (8, 6)),
            np.broadcast_to(np.arange(4, dtype=np.int32), (3, 4)),
            np.broadcast_to(np.arange(2, dtype=np.float32)[:, None], (2, 3)),
            s.reshape(4, 15), s.reshape(20, 3), XA[:, :2], XA[:, 2:2], XA[:, 2:],
            np.stack([XA, XA * 2], 1), s[:, :, 0], s[:, :, 1], s[:, :, 2],
            s[i0 % 4, :, i1 % 3]]
    for k, (g, e) in enumerate(zip(got, want)):
        assert g.shape == e.shape and g.dtype == e.dtype and np.array_equal(g, e), k
    assert lax.broadcast_shapes((3, 1), (4,), (5, 1, 1)) == (5, 3, 4)
    with pytest.raises(ValueError, match=r"^Incompatible shapes for broadcasting: "
                       r"shapes=\[\(3, 1\), \(4, 1\)\]$"):
        lax.broadcast_shapes((3, 1), (4, 1))
    with pytest.raises(ValueError, match=r"^Sum of sizes 5 must be equal to dimension 1 of the "
                       r"operand shape \[8, 6\]$"):
        lax.split(x, (2, 3), 1)
    with pytest.raises(ValueError, match=r"^All input arrays must have the same shape\. Got "
                       r"\(8, 6\), \(4, 6\)\.$"):
        shmap.jit(lambda x: lax.stack([x, x[:4]]))(_put(c, mesh, XA, P()))
    with pytest.raises(ValueError, match=r"^Cannot stack arrays with different numbers of "
                       r"dimensions: got \(8, 6\), \(6,\)\.$"):
        shmap.jit(lambda x: lax.stack([x, x[0]]))(_put(c, mesh, XA, P()))
    with pytest.raises(ValueError, match=r"^Invalid dimension range passed to collapse: "
                       r"\(4, 5, 3\)\[2:1\]$"):
        lax.collapse(S, 2, 1)
    assert lax.dtype(1) == np.int32 and lax.dtype(2.5) == np.float32 and lax.dtype(True) == np.bool_
    assert lax.dtype(float) == np.float32 and lax.dtype(np.float64) == np.float64
    assert lax.dtype(x) == np.float32 and lax.dtype("uint8") == np.uint8
    with pytest.raises(ValueError, match=r"^Invalid argument to dtype: None\.$"):
        lax.dtype(None)
    e = shmap.jit(lambda x: lax.empty((8, 6), np.int32) + x.astype(np.int32))(x)
    assert e.shape == (8, 6) and e.dtype == np.int32 and lax.empty(3, np.uint8).shape == (3,)


def test_shape_tuples_match_the_ops(c, mesh):
    """conv_shape_tuple, conv_general_shape_tuple, conv_transpose_shape_tuple
    and reduce_window_shape_tuple give the shapes the ops produce."""
    lhs = _put(c, mesh, RNG.standard_normal((2, 9, 10, 3)).astype(np.float32), P())
    rhs = _put(c, mesh, RNG.standard_normal((3, 2, 3, 4)).astype(np.float32), P())
    dn = ("NHWC", "HWIO", "NHWC")
    for strides, padding in (((1, 1), "SAME"), ((2, 3), "VALID"), ((2, 1), [(1, 2), (0, 3)])):
        out = lax.conv_general_dilated(lhs, rhs, strides, padding, dimension_numbers=dn)
        assert lax.conv_general_shape_tuple(lhs.shape, rhs.shape, strides, padding,
                                            dn) == out.shape, (strides, padding)
        t = lax.conv_transpose(lhs, _put(c, mesh, RNG.standard_normal((3, 2, 3, 5)).astype(
            np.float32), P()), strides, padding if isinstance(padding, str) else "SAME",
            dimension_numbers=dn)
        assert lax.conv_transpose_shape_tuple(lhs.shape, (3, 2, 3, 5), strides, padding if
                                              isinstance(padding, str) else "SAME",
                                              dn) == t.shape, (strides, padding)
    assert lax.conv_shape_tuple((2, 3, 9, 10), (4, 3, 3, 2), (2, 3), "VALID") == (2, 4, 4, 3)
    assert lax.conv_shape_tuple((4, 3, 9, 10), (4, 3, 3, 2), (1, 1), [(1, 1), (0, 0)],
                                batch_group_count=2) == (2, 4, 9, 9)
    with pytest.raises(TypeError, match=r"^Wrong number of explicit pads for convolution: "
                       r"expected 2, got 1\.$"):
        lax.conv_shape_tuple((2, 3, 9, 10), (4, 3, 3, 2), (1, 1), [(0, 0)])
    x = _put(c, mesh, XA, P())
    pads = ((1, 0), (2, 1))
    r = lax.reduce_window(x, -np.inf, lax.max, (3, 2), (2, 2), pads, window_dilation=(1, 2))
    assert lax.reduce_window_shape_tuple(XA.shape, (3, 2), (2, 2), pads,
                                         window_dilation=(1, 2)) == r.shape
    assert lax.reduce_window_shape_tuple((8, 6), (3, 2), (1, 1), ((0, 0), (0, 0)),
                                         base_dilation=(2, 1)) == (13, 5)


# ---- sort of several operands, staging helpers -------------------------------------------


def test_sort_several_operands(c, mesh):
    """Sorted together by the first num_keys lexicographically (stable),
    the rest carried along; NaN last; a single operand as before."""
    k1 = RNG.integers(0, 3, (4, 10)).astype(np.int32)
    k2 = RNG.standard_normal((4, 10)).astype(np.float32)
    k2[0, 3] = np.nan
    v = np.arange(40.0).reshape(4, 10)
    args = [_put(c, mesh, t, P("i")) for t in (k1, k2, v)]
    one, two, alone = shmap.jit(lambda a, b, v: (lax.sort((a, v), num_keys=1),
                                                 lax.sort([a, b, v], 1, num_keys=2),
                                                 lax.sort(b)))(*args)
    o1 = np.argsort(k1, 1, kind="stable")
    assert isinstance(one, tuple) and len(one) == 2
    assert np.array_equal(np.asarray(one[0]), np.take_along_axis(k1, o1, 1))
    assert np.array_equal(np.asarray(one[1]), np.take_along_axis(v, o1, 1))
    o2 = np.lexsort((k2, k1), axis=1)
    for g, w in zip(two, (k1, k2, v)):
        assert np.array_equal(np.asarray(g), np.take_along_axis(w, o2, 1), equal_nan=True)
    assert np.array_equal(np.asarray(alone), np.sort(k2, 1), equal_nan=True)
    with pytest.raises(ValueError, match=r"^num_keys=3 must be between 1 and len\(operand\)=2$"):
        lax.sort((args[0], args[2]), num_keys=3)
    with pytest.raises(ValueError, match=r"^num_keys=2 must equal 1 for a single operand\.$"):
        lax.sort(args[0], num_keys=2)
    with pytest.raises(TypeError, match=r"^Arguments to sort must have equal shapes, got: "
                       r"\(4, 10\) \(10,\)$"):
        shmap.jit(lambda a: lax.sort((a, a[0])))(_put(c, mesh, k1, P()))


def test_platform_dependent_composite_stage(c, mesh):
    """platform_dependent runs the 'cpu' branch (shmap's devices), else
    default, else JAX's error; composite runs its decomposition; stage
    makes a Python number a traced value."""
    x = _put(c, mesh, XA, P("i", "j"))

    def f(x):
        a = lax.platform_dependent(x, cpu=lambda v: v * 2, tpu=lambda v: v * 3)
        b = lax.platform_dependent(x, cuda=lambda v: v * 5, default=lambda v: v - 1)
        tan = lax.composite(lambda v, *, k: jnp.sin(v) / jnp.cos(v) * k, name="my.tangent")
        s = lax.stage(2.0)
        lax.dce_sink(a)
        return a, b, tan(x, k=2.0), s * x
    a, b, t, s = shmap.jit(f)(x)
    assert np.array_equal(np.asarray(a), XA * 2) and np.array_equal(np.asarray(b), XA - 1)
    assert np.allclose(np.asarray(t), np.tan(XA) * 2, rtol=1e-5, atol=1e-5)
    assert np.array_equal(np.asarray(s), XA * 2)
    with pytest.raises(NotImplementedError, match=r"^MLIR translation rule for primitive "
                       r"'platform_index\(platforms=\(\('tpu', 'rocm'\),\)\)' not found for "
                       r"platform cpu$"):
        lax.platform_dependent(x, tpu=jnp.sin, rocm=jnp.sin)
    with pytest.raises(ValueError, match=r"^Use 'cuda' or 'rocm' for lax\.platform_dependent\.$"):
        lax.platform_dependent(x, gpu=jnp.sin, cpu=jnp.cos)
    with pytest.raises(TypeError, match=r"^lax\.platform_dependent: the 'cpu' branch must be a "
                       r"callable\.$"):
        lax.platform_dependent(x, cpu=3)


def test_names_exported():
    names = ["select_n", "reduce", "reduce_xor", "reduce_precision", "pshuffle", "pswapaxes",
             "pbroadcast", "approx_max_k", "approx_min_k", "eq", "ne", "lt", "le", "gt", "ge",
             "acos", "asin", "atan", "acosh", "asinh", "atanh", "atan2", "reciprocal",
             "RoundingMethod", "Precision", "mulhi", "nextafter", "broadcast_shapes",
             "broadcast_to_rank", "broadcast_like", "broadcasted_iota", "collapse", "split",
             "stack", "unstack", "index_take", "empty", "dtype", "conv_shape_tuple",
             "conv_general_shape_tuple", "conv_transpose_shape_tuple",
             "reduce_window_shape_tuple", "stage", "dce_sink", "composite",
             "platform_dependent"]
    assert all(n in lax.__all__ and callable(getattr(lax, n)) for n in names)
    assert len(lax.__all__) == len(set(lax.__all__))
    assert lax.Precision.HIGHEST.name == "HIGHEST" and int(lax.RoundingMethod.TO_NEAREST_EVEN) == 1


# ---- Bessel functions, patches, local convolutions, ragged_dot ---------------------------


def _bessel_series(x, order):
    """exp(-|x|) I_order(x) by the power series, in float64."""
    x = np.asarray(x, np.float64)
    term = (x / 2) ** order / (1.0 if order == 0 else 1.0)
    total = term.copy()
    for k in range(1, 200):
        term = term * (x / 2) ** 2 / (k * (k + order))
        total = total + term
    return total * np.exp(-np.abs(x))


def test_bessel_i0e_i1e(c, mesh):
    """Cephes' series as JAX and XLA evaluate them, against the power
    series (float32, float64; float16 through float32)."""
    v = np.concatenate([np.linspace(-30, 30, 61), [0.0, 7.99, 8.0, 8.01, -0.3, 1e-3]])
    v = np.concatenate([v, np.zeros(-len(v) % 8)])
    for dt, tol in ((np.float32, 3e-6), (np.float64, 1e-13)):
        x = _put(c, mesh, v.astype(dt), P("i"))
        g0, g1 = shmap.jit(lambda x: (lax.bessel_i0e(x), lax.bessel_i1e(x)))(x)
        assert g0.dtype == dt and g1.dtype == dt
        assert np.allclose(np.asarray(g0), _bessel_series(v.astype(dt), 0), rtol=tol, atol=0)
        assert np.allclose(np.asarray(g1), _bessel_series(v.astype(dt), 1), rtol=tol, atol=1e-300)
    h = lax.bessel_i1e(_put(c, mesh, v.astype(np.float16), P()))
    assert h.dtype == np.float16 and np.allclose(np.asarray(h).astype(np.float64),
                                                 _bessel_series(v.astype(np.float16), 1),
                                                 rtol=2e-3, atol=1e-4)
    with pytest.raises(TypeError, match=r"^bessel_i0e does not accept dtype int32\. Accepted "
                       r"dtypes are subtypes of floating\.$"):
        lax.bessel_i0e(_put(c, mesh, IA, P()))


def _np_patches(x, filt, strides, pads, dil):
    """NCHW patches by hand: feature c * prod(filt) + i * filt[1] + j of output
    position (y, x) is the padded input at (y * s0 + i * d0, x * s1 + j * d1)."""
    n, ch, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), pads[0], pads[1]))
    oh = (xp.shape[2] - (filt[0] - 1) * dil[0] - 1) // strides[0] + 1
    ow = (xp.shape[3] - (filt[1] - 1) * dil[1] - 1) // strides[1] + 1
    out = np.zeros((n, ch * filt[0] * filt[1], oh, ow), x.dtype)
    for cc in range(ch):
        for i in range(filt[0]):
            for j in range(filt[1]):
                out[:, cc * filt[0] * filt[1] + i * filt[1] + j] = xp[
                    :, cc, i * dil[0]:i * dil[0] + strides[0] * (oh - 1) + 1:strides[0],
                    j * dil[1]:j * dil[1] + strides[1] * (ow - 1) + 1:strides[1]]
    return out


def test_conv_patches_and_local(c, mesh):
    """conv_general_dilated_patches against patches cut by hand (NCHW, and
    NHWC the same values transposed); conv_general_dilated_local against
    the patches contracted with a kernel per output position."""
    x = RNG.standard_normal((2, 3, 7, 9)).astype(np.float32)
    X = _put(c, mesh, x, P())
    filt, strides, dil = (2, 3), (2, 1), (1, 2)
    pads = lax.padtype_to_pads((7, 9), ((2 - 1) * 1 + 1, (3 - 1) * 2 + 1), strides, "SAME")
    want = _np_patches(x, filt, strides, pads, dil)
    got = shmap.jit(lambda x: lax.conv_general_dilated_patches(
        x, filt, strides, "SAME", rhs_dilation=dil))(X)
    assert got.shape == want.shape and np.allclose(np.asarray(got), want, atol=1e-6)
    xh = _put(c, mesh, x.transpose(0, 2, 3, 1), P())
    gh = lax.conv_general_dilated_patches(xh, filt, strides, "SAME", rhs_dilation=dil,
                                          dimension_numbers=("NHWC", "HWIO", "NHWC"))
    assert np.allclose(np.asarray(gh), want.transpose(0, 2, 3, 1), atol=1e-6)
    oh, ow = want.shape[2:]
    k = RNG.standard_normal((4, want.shape[1], oh, ow)).astype(np.float32)
    local = shmap.jit(lambda x, k: lax.conv_general_dilated_local(
        x, k, strides, "SAME", filt, rhs_dilation=dil))(X, _put(c, mesh, k, P()))
    assert np.allclose(np.asarray(local), np.einsum("npyx,opyx->noyx", want, k), atol=1e-4)


def test_ragged_dot(c, mesh):
    """Each row group of lhs times its group's matrix; rows past the
    groups give zeros; empty groups; preferred_element_type; JAX's
    refusals."""
    lhs = RNG.standard_normal((10, 4)).astype(np.float32)
    rhs = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    sizes = np.array([3, 0, 5], np.int32)
    L, R = _put(c, mesh, lhs, P()), _put(c, mesh, rhs, P())
    got = shmap.jit(lambda l, r, s: (lax.ragged_dot(l, r, s),
                                     lax.ragged_dot(l, r, s, preferred_element_type=np.float64)))(
        L, R, _put(c, mesh, sizes, P()))
    want = np.zeros((10, 5), np.float32)
    want[:3] = lhs[:3] @ rhs[0]
    want[3:8] = lhs[3:8] @ rhs[2]
    assert got[0].dtype == np.float32 and np.allclose(np.asarray(got[0]), want, atol=1e-5)
    assert got[1].dtype == np.float64 and np.allclose(np.asarray(got[1]), want, atol=1e-5)
    assert (np.asarray(got[0])[8:] == 0).all()
    with pytest.raises(TypeError, match=r"^expected rhs group dimension size to be 2, got 3\.$"):
        lax.ragged_dot(L, R, _put(c, mesh, sizes[:2], P()))
    with pytest.raises(TypeError, match=r"^ragged_dot_general requires that group_sizes\.dtype "
                       r"is subtype of np\.integer\.$"):
        lax.ragged_dot(L, R, _put(c, mesh, sizes.astype(np.float32), P()))
    with pytest.raises(NotImplementedError, match=r"^Unimplemented group_offset support\.$"):
        lax.ragged_dot(L, R, _put(c, mesh, sizes, P()), group_offset=_put(c, mesh, sizes[:1],
                                                                            P()))
    assert lax.shape_as_value((3, 4)).tolist() == [3, 4]
    assert lax.shape_as_value((3, 4)).dtype == np.int32


def test_convert_element_type_of_numpy(c, mesh):
    """lax.convert_element_type of a numpy array (it called .item(): only
    scalars worked), at once and as a constant of a traced function."""
    a = np.array([[0.5, 1.7], [-2.2, 3.9]])
    got = lax.convert_element_type(a, np.int32)
    assert got.dtype == np.int32 and np.array_equal(np.asarray(got), a.astype(np.int32))
    x = _put(c, mesh, np.ones((2, 2), np.int32), P())
    got = shmap.jit(lambda v: v + lax.convert_element_type(a, np.int32))(x)
    assert np.array_equal(np.asarray(got), 1 + a.astype(np.int32))


def test_all_gather_invariant_and_axis_names(c):
    """lax.all_gather_invariant (the text form's all_gather(..., to=
    'invarying')): an invariant result, which out_specs P() takes without
    a psum, and grad's transpose, a dynamic_slice (this device's part of the
    cotangent, as JAX's); shard_map(axis_names=) naming every axis of the
    mesh is a shard_map without it (test_partial_manual.py: some of them)."""
    mesh = c.make_mesh((2, 2), ("X", "Y"))
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    x = c.device_put(a, NamedSharding(mesh, P("X", None)))
    f = shmap.shard_map(lambda b: lax.all_gather_invariant(b, "X", tiled=True), mesh=mesh,
                        in_specs=P("X"), out_specs=P())
    assert np.array_equal(np.asarray(f(x)), a)
    with pytest.raises(shmap.ProgramError, match="varies over mesh axis 'X'"):
        shmap.shard_map(lambda b: lax.all_gather(b, "X", tiled=True), mesh=mesh,
                        in_specs=P("X"), out_specs=P())(x)
    g = shmap.jit(shmap.grad(lambda v: (f(v) ** 2).sum()))(x)
    assert np.allclose(np.asarray(g), 2 * a)
    f2 = shmap.shard_map(lambda b: lax.all_gather_invariant(b, "X", axis=1), mesh=mesh,
                         in_specs=P("X"), out_specs=P())
    assert np.array_equal(np.asarray(f2(x)), np.stack([a[:2], a[2:]], axis=1))
    w = np.arange(2.0, dtype=np.float32)[None, :, None]
    g2 = shmap.jit(shmap.grad(lambda v: (f2(v) * w).sum()))(x)
    assert np.array_equal(np.asarray(g2), np.repeat([0.0, 1.0], 2)[:, None] * np.ones((4, 4)))
    same = shmap.shard_map(lambda b: b * 2, mesh=mesh, in_specs=P("X"), out_specs=P("X"),
                           axis_names={"X", "Y"})
    assert np.array_equal(np.asarray(same(x)), a * 2)


def test_sharding_type_error(c):
    """JAX's core.ShardingTypeError (shmap.errors.ShardingTypeError, a
    ProgramError) for the sharding rules' refusals, the primitive named as
    JAX names it; lax.select of one sharding runs, of two is refused; a
    scan step's carry keeps its sharding (JAX's TypeError)."""
    mesh = c.make_mesh((2, 2), ("X", "Y"))
    a = np.arange(8, dtype=np.float32)
    x = c.device_put(a, NamedSharding(mesh, P("X")))
    y = c.device_put(a, NamedSharding(mesh, P("Y")))
    with pytest.raises(shmap.errors.ShardingTypeError, match="^.*: mul got incompatible "
                       "shardings for broadcasting"):
        shmap.jit(lambda u, v: u * v)(x, y)
    with pytest.raises(shmap.ProgramError, match="sub got incompatible shardings"):
        shmap.jit(lambda u, v: u - v)(x, y)
    out = shmap.jit(lambda p, u, v: lax.select(p, u, v))(x > 3, x, x * 2)
    assert np.array_equal(np.asarray(out), np.where(a > 3, a, a * 2))
    with pytest.raises(shmap.errors.ShardingTypeError, match="select cases must have the same "
                       "shardings"):
        shmap.jit(lambda p, u, v: lax.select(p, u, v))(x > 3, x, y)
    with pytest.raises(shmap.errors.ShardingTypeError, match="split on sharded dims"):
        shmap.jit(lambda u: lax.split(u, (3, 5)))(x)
    with pytest.raises(TypeError, match="scan body function carry input and carry output "
                       "must have equal types"):
        shmap.jit(lambda u: lax.scan(lambda k, _: (shmap.reshard(k, P()), None), u, None,
                                     length=1)[0])(x)
