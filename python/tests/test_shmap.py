"""The shmap Python package against a real local cluster (2 workers x 4
devices): shardings, arrays, traced shard_map and jit functions, errors and
garbage collection. Run by ctest (python_shmap) with the build tree's
PYTHONPATH and SHMAP_COORDINATOR_BIN; python_shmap_secure runs it with
SM_TEST_SECURE=1: the cluster of tests/cluster.py with TLS and tenants, the
client a tenant with the CA alone."""
import gc
import os
import inspect
import sys

import numpy as np
import pytest

import shmap
from shmap import P, NamedSharding, Mesh
from shmap import numpy as jnp
from shmap import lax

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests"))
import cluster  # noqa: E402


@pytest.fixture(scope="module")
def admin(c, secure):
    """A client with the cluster's own credential (checkpoint directories
    are the cluster's to name); c itself outside secure mode."""
    if not secure:
        yield c
        return
    target, f = secure
    client = shmap.connect(target, token=cluster.CLUSTER_TOKEN, tls_ca=f["ca"],
                           tls_cert=f["client_cert"], tls_key=f["client_key"])
    shmap.connect.__globals__["_default"][:] = [c]  # the tenant stays the default client
    yield client
    client.close()


def ids(c):
    return {a.id for a in c.arrays()}


# ---- offline sharding math ----


def test_devices_indices_map_offline():
    mesh = Mesh((4, 2), ("i", "j"), devices=range(8))
    s = NamedSharding(mesh, P("i"))
    m = s.devices_indices_map((8, 16))
    assert m[0] == (slice(0, 2), slice(0, 16))
    assert m[1] == m[0]  # replicated along j
    assert m[6] == (slice(6, 8), slice(0, 16))
    assert s.shard_shape((8, 16)) == (2, 16)
    assert not s.is_fully_replicated
    assert NamedSharding(mesh, P()).is_fully_replicated
    assert s.addressable_devices == set(range(8))
    assert repr(P(("x", "y"), None)) == "P(('x', 'y'), None)"


def test_sharding_errors_offline():
    mesh = Mesh((4, 2), ("i", "j"), devices=range(8))
    with pytest.raises(shmap.InvalidArgument, match="not divisible|divisible"):
        NamedSharding(mesh, P("i")).shard_shape((6, 16))
    with pytest.raises(shmap.InvalidArgument):
        NamedSharding(mesh, P("k")).shard_shape((8, 16))


# ---- arrays ----


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint8,
                                   np.bool_, np.float16])
def test_round_trip_every_dtype(c, dtype):
    mesh = c.make_mesh((4, 2), ("i", "j"))
    rng = np.random.default_rng(7)
    x = rng.integers(-100, 100, size=(8, 6)).astype(dtype)
    a = c.device_put(x, NamedSharding(mesh, P("i", "j")))
    y = np.asarray(a)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert y.tobytes() == x.tobytes()  # bit-exact
    assert shmap.typeof(a).endswith("[8@i,6@j]")


def test_scalars_empty_arrays_and_byte_order(c):
    """A 0-d array stays 0-d (np.ascontiguousarray made it f32[1]), an array
    with a dimension of size 0 goes up and down (the upload divided by zero,
    SIGFPE), a big-endian one is stored in native order, and an unsupported
    dtype raises InvalidArgument before any byte moves."""
    mesh = c.make_mesh((4, 2), ("i", "j"))
    for v in (np.float32(3.5), np.array(2.0, np.float32), 7):
        a = c.device_put(v, NamedSharding(mesh, P()))
        assert a.shape == () and np.asarray(a).shape == ()
        assert np.asarray(a) == np.asarray(v)
    assert shmap.typeof(c.device_put(np.float32(1), NamedSharding(mesh, P()))) == "f32[]"
    for shape, spec in (((0, 8), P(None, "j")), ((0, 8), P("i", "j")), ((4, 0), P("i"))):
        e = c.device_put(np.zeros(shape, np.float32), NamedSharding(mesh, spec))
        assert np.asarray(e).shape == shape
        assert np.asarray(shmap.jit(lambda a: a + 1)(e)).shape == shape
        assert np.asarray(e.reshard(NamedSharding(mesh, P()))).shape == shape
    x = np.arange(48, dtype=">i4").reshape(8, 6)
    b = c.device_put(x, NamedSharding(mesh, P("i", "j")))
    assert np.asarray(b).dtype == np.int32 and np.array_equal(np.asarray(b), x)
    with pytest.raises(shmap.InvalidArgument, match="is not one shmap supports"):
        c.device_put(np.array([object()] * 8), NamedSharding(mesh, P("i")))


def test_to_numpy_into_buffer(c):
    mesh = c.make_mesh((8,), ("i",))
    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    a = c.device_put(x, NamedSharding(mesh, P("i")))
    out = np.zeros((8, 8), np.float32)
    r = a.to_numpy(out=out)
    assert r is out and np.array_equal(out, x)
    with pytest.raises(shmap.InvalidArgument, match="writable C-contiguous"):
        a.to_numpy(out=np.zeros((8, 8), np.float64))


def test_reshard_name_get_delete(c):
    mesh = c.make_mesh((4, 2), ("x", "y"))
    x = np.arange(64 * 128, dtype=np.float32).reshape(64, 128)
    a = c.device_put(x, NamedSharding(mesh, P("x", "y")), name="py-grid")
    b = a.reshard(NamedSharding(mesh, P(None, "y")))
    assert shmap.typeof(b) == "f32[64,128@y]"
    assert np.array_equal(np.asarray(b), x)
    g = c.get("py-grid")
    assert g.id == a.id and g.name == "py-grid"
    assert [s.data.shape for s in g.addressable_shards][:2] == [(16, 64), (16, 64)]
    assert np.array_equal(g.addressable_shards[3].data, x[16:32, 64:128])
    a.delete()
    with pytest.raises(shmap.NotFound):
        c.get("py-grid")
    with pytest.raises(shmap.FailedPrecondition):
        a.to_numpy()


def test_replicas(c):
    mesh = c.make_mesh((4, 2), ("x", "y"))
    x = np.arange(64 * 128, dtype=np.float32).reshape(64, 128)
    a = c.device_put(x, NamedSharding(mesh, P("x", "y")), replicas=2)
    # every block is on one worker only: each gets a copy on the other
    assert len(a.copies) == 8
    def key(idx):
        return tuple((s.start, s.stop) for s in idx)
    want = NamedSharding(mesh, P("x", "y")).devices_indices_map(x.shape).values()
    assert sorted(key(idx) for _, idx in a.copies) == sorted(key(i) for i in want)
    assert np.array_equal(np.asarray(a), x)
    assert a.replicate(1).copies == []
    with pytest.raises(shmap.InvalidArgument, match="replicas must be 1"):
        a.replicate(3)
    a.delete()


def test_save_load_checkpoint(admin, tmp_path):
    c = admin
    mesh = c.make_mesh((4, 2), ("x", "y"))
    x = np.arange(32 * 16, dtype=np.float64).reshape(32, 16)
    a = c.device_put(x, NamedSharding(mesh, P("x", "y")))
    d = tmp_path / "ck"
    assert c.save(a, d) == (8, 8 * (128 + 8 * 8 * 8))
    m8 = c.make_mesh((8,), ("i",))
    b = c.load(d, NamedSharding(m8, P("i")), name="py-loaded")
    assert shmap.typeof(b) == "f64[32@i,16]" and b.name == "py-loaded"
    assert np.array_equal(np.asarray(b), x)
    b.delete()
    # by hand, as the manifest says
    import json
    m = json.loads((d / "manifest.json").read_text())
    y = np.empty(m["shape"], m["dtype"])
    for s in m["shards"]:
        y[tuple(slice(lo, hi) for lo, hi in s["index"])] = np.load(d / s["file"])
    assert np.array_equal(y, x)
    with pytest.raises(shmap.AlreadyExists):
        c.save(a, d)
    os.truncate(d / m["shards"][1]["file"], 100)
    with pytest.raises(shmap.DataLoss, match=m["shards"][1]["file"]):
        c.load(d, NamedSharding(m8, P("i")))


def test_gc_frees_unnamed_arrays(c):
    mesh = c.make_mesh((8,), ("i",))
    before = ids(c)
    a = c.device_put(np.ones(8, np.float32), NamedSharding(mesh, P("i")))
    n = c.device_put(np.ones(8, np.float32), NamedSharding(mesh, P("i")), name="py-kept")
    aid, nid = a.id, n.id
    assert aid in ids(c)
    del a, n
    gc.collect()
    now = ids(c)
    assert aid not in now  # freed on the service
    assert nid in now      # a named array lives until deleted
    c.get("py-kept").delete()
    assert ids(c) == before


def test_make_array_from_callback_and_single_device_arrays(c):
    mesh = c.make_mesh((4, 2), ("i", "j"))
    x = np.arange(8 * 16, dtype=np.int32).reshape(8, 16)
    s = NamedSharding(mesh, P("i"))
    calls = []

    def cb(index):
        calls.append(index)
        return x[index]

    a = c.make_array_from_callback(x.shape, s, cb)
    assert np.array_equal(np.asarray(a), x)
    assert len(calls) == 4  # one call per distinct index
    idx = s.devices_indices_map(x.shape)
    b = c.make_array_from_single_device_arrays(
        x.shape, s, {d: x[i] for d, i in idx.items()})
    assert np.array_equal(np.asarray(b), x)


def test_make_array_from_process_local_data(c):
    # the data-loading guide's layout: each worker process sends the rows of
    # its own devices
    mesh = c.make_mesh((4, 2), ("x", "y"))
    x = np.arange(64 * 128, dtype=np.float32).reshape(64, 128)
    s = NamedSharding(mesh, P("x", "y"))
    parts = [c.make_array_from_process_local_data(s, x[32 * p:32 * (p + 1)], x.shape,
                                                  process=p, name="py-local")
             for p in (0, 1)]
    a = c.get("py-local")
    for _ in range(100):
        if a._info["state"] == "ready":
            break
        a = c.get("py-local")
    assert np.array_equal(np.asarray(a), x)
    a.delete()
    del parts


# ---- programs ----


def test_shard_map_matmul_basic_equals_the_shmap_file(c):
    mesh = c.make_mesh((4, 2), ("i", "j"))
    xa = np.arange(128, dtype=np.float32).reshape(8, 16)
    xb = np.arange(512, dtype=np.float32).reshape(16, 32)
    a = c.device_put(xa, NamedSharding(mesh, P("i", "j")))
    b = c.device_put(xb, NamedSharding(mesh, P("j", None)))

    @shmap.shard_map(mesh=mesh, in_specs=(P("i", "j"), P("j", None)), out_specs=P("i", None))
    def matmul_basic(a, b):
        z = shmap.numpy.dot(a, b)
        return shmap.lax.psum(z, "j")

    r = matmul_basic(a, b)
    assert shmap.typeof(r) == "f32[8@i,32]"
    assert np.array_equal(np.asarray(r), xa @ xb)
    # the same program from examples/, submitted as text
    text = open(os.path.join(ROOT, "examples", "matmul_basic.shmap")).read()
    job = c._c.submit(text, "matmul_basic.shmap", None, [a.id, b.id], [], True)
    info = c._c.wait(job, -1)
    f = shmap.Array(c, info["outputs"][0])
    assert np.asarray(f).tobytes() == np.asarray(r).tobytes()


def test_shard_map_numpy_arguments_loops_and_future(c):
    mesh = c.make_mesh((4, 2), ("X", "Y"))
    x = np.arange(512 * 8, dtype=np.int32).reshape(512, 8)

    @shmap.shard_map(mesh=mesh, in_specs=P("X", "Y"), out_specs=P("X", "Y"))
    def shift(x):
        for _ in range(5):  # unrolled, as under tracing
            x = shmap.numpy.roll(x, 1, axis=0)
        return x

    fut = shift.submit(x)
    r = fut.result(timeout=60)
    assert fut.done()
    want = np.roll(x.reshape(4, 128, 8), 5, axis=1).reshape(512, 8)
    assert np.array_equal(np.asarray(r), want)
    text = shift.lower(x).as_text()
    assert text.count("roll(") == 5


def test_jit_types_and_results(c):
    mesh = c.make_mesh((2, 4), ("X", "Y"))
    x = c.device_put(np.arange(4, dtype=np.int32).reshape(4, 1), NamedSharding(mesh, P("X", None)))
    y = c.device_put(np.arange(8, dtype=np.int32).reshape(1, 8), NamedSharding(mesh, P(None, "Y")))
    seen = []

    @shmap.jit
    def add_arrays(x, y):
        ans = x + y
        seen.append(shmap.typeof(ans))
        return ans

    r = add_arrays(x, y)
    assert seen == ["i32[4@X,8@Y]"]
    assert shmap.typeof(r) == "i32[4@X,8@Y]"
    assert np.array_equal(np.asarray(r), np.arange(4)[:, None] + np.arange(8)[None, :])
    assert "collective" not in add_arrays.lower(x, y).as_text()


def test_jit_einsum_out_sharding_and_the_ambiguity_error(c):
    mesh = c.make_mesh((2, 2), ("X", "Y"))
    xi = np.arange(8 * 64, dtype=np.float32).reshape(8, 64) % 7
    xw = np.arange(64 * 32, dtype=np.float32).reshape(64, 32) % 5
    In = c.device_put(xi, NamedSharding(mesh, P("X", "Y")))
    W = c.device_put(xw, NamedSharding(mesh, P("Y", None)))

    @shmap.jit
    def rs(In, W):
        return shmap.numpy.einsum("bd,df->bf", shmap.numpy.square(In), W,
                                  out_sharding=P("X", "Y"))

    r = rs(In, W)
    assert shmap.typeof(r) == "f32[8@X,32@Y]"
    assert np.array_equal(np.asarray(r), (xi * xi) @ xw)
    assert "psum_scatter" in rs.lower(In, W).as_text()

    @shmap.jit
    def ambiguous(In, W):
        return shmap.numpy.einsum("bd,df->bf", In, W)

    line = inspect.getsourcelines(ambiguous.f)[1] + 2
    with pytest.raises(shmap.ProgramError) as e:
        ambiguous(In, W)
    assert "Contracting dimensions are sharded and it is ambiguous" in str(e.value)
    assert e.value.source_line.endswith(f"test_shmap.py:{line}")
    assert e.value.code == "INVALID_ARGUMENT"


def test_lambdas_and_names_beyond_the_text_form(c):
    """jax.jit(lambda ...) works, so does shmap.jit: a Python name that is no
    name of the text form ('<lambda>', non-ASCII) is made one, and a message
    that quotes a non-ASCII character arrives whole."""
    mesh = c.make_mesh((4, 2), ("X", "Y"))
    xa = np.arange(64, dtype=np.float32).reshape(8, 8)
    x = c.device_put(xa, NamedSharding(mesh, P("X", "Y")))
    double = shmap.jit(lambda a: a * 2)
    assert np.array_equal(np.asarray(double(x)), xa * 2)
    assert double.lower(x).as_text().splitlines()[1].startswith("jit lambda(a: f32[8,8]")
    assert double.__name__ == "<lambda>"
    colsum = shmap.jit(lambda a: shmap.numpy.sum(a, axis=0))
    r = colsum(x)
    assert shmap.typeof(r) == "f32[8@Y]"
    assert np.array_equal(np.asarray(r), xa.sum(0))

    def σ(ä, b):
        return ä + b

    assert np.array_equal(np.asarray(shmap.jit(σ)(x, x)), xa + xa)
    sm = shmap.shard_map(lambda a: shmap.lax.psum(a, "Y"), mesh=mesh, in_specs=P("X", "Y"),
                         out_specs=P("X", None))
    assert np.array_equal(np.asarray(sm(x)), xa[:, :4] + xa[:, 4:])
    with pytest.raises(shmap.ProgramError) as e:
        shmap.jit(lambda a: shmap.numpy.einsum("ié->i", a))(x)
    assert "unexpected character 'é'" in e.value.message
    for pre in ("", "a"):  # one of the two has its quote cut inside a character
        with pytest.raises(shmap.ProgramError) as e:
            shmap.shard_map(lambda a: shmap.lax.psum(a, pre + "é" * 3000), mesh=mesh,
                            in_specs=P("X", "Y"), out_specs=P("X", "Y"))(x)
        assert "éé" in e.value.message


def test_indexing_as_numpy_does(c):
    """Steps (negative ones too: rev first), None and ... index a traced
    array as numpy's do; a step keeps a sharded dimension's sharding where
    its new size divides (JAX's slicing rule); jnp.flip is rev."""
    mesh = c.make_mesh((4, 2), ("X", "Y"))
    xa = np.arange(8 * 12, dtype=np.float32).reshape(8, 12)
    x = c.device_put(xa, NamedSharding(mesh, P("X", "Y")))
    r = c.device_put(xa, NamedSharding(mesh, P()))
    f = shmap.jit(lambda a: a[::2, 1::2])
    assert shmap.typeof(f(x)) == "f32[4@X,6@Y]"
    assert np.array_equal(np.asarray(f(x)), xa[::2, 1::2])
    assert "strides=(2, 2)" in f.lower(x).as_text()
    for index in [np.s_[1:7:3], np.s_[::4, ::3], np.s_[..., 1], np.s_[None, ::2, None],
                  np.s_[::2, 1], np.s_[2:, 5:11:2], np.s_[...], np.s_[None, ...]]:
        got = shmap.jit(lambda a: a[index])(r)
        assert np.array_equal(np.asarray(got), xa[index]), index
    got = shmap.jit(lambda a: a[None, ::2, None])(x)
    assert shmap.typeof(got) == "f32[1,4@X,1,12@Y]"
    assert np.array_equal(np.asarray(got), xa[None, ::2, None])
    sm = shmap.shard_map(lambda a: a[::2, 1::2], mesh=mesh, in_specs=P("X", "Y"),
                         out_specs=P("X", "Y"))
    blocks = [[xa[i * 2:i * 2 + 2, j * 6:j * 6 + 6][::2, 1::2] for j in range(2)]
              for i in range(4)]
    assert np.array_equal(np.asarray(sm(x)), np.block(blocks))
    with pytest.raises(shmap.ProgramError, match=r"could not be resolved unambiguously .* "
                       r"Got operand=f32\[8@X,12@Y\], indices=i32\[2\]"):
        shmap.jit(lambda a: a[np.array([0, 2])])(x)  # a gather along a sharded dimension
    with pytest.raises(shmap.ProgramError) as e:
        shmap.jit(lambda a: a[::3])(x)
    assert "slicing on sharded dims where out dim (3) is not divisible by mesh axes (4)" in \
        e.value.message
    back = shmap.jit(lambda a: a[::-1])(x)  # rev, then the slice; the sharding kept
    assert shmap.typeof(back) == "f32[8@X,12@Y]" and np.array_equal(np.asarray(back), xa[::-1])
    for index in [np.s_[::-1, 10:1:-3], np.s_[-2::-2], np.s_[5:-9:-1, ::-5]]:
        assert np.array_equal(np.asarray(shmap.jit(lambda a: a[index])(r)), xa[index]), index
    assert np.array_equal(np.asarray(jnp.flip(x, 1)), np.flip(xa, 1))
    assert np.array_equal(np.asarray(jnp.flip(r)), np.flip(xa))


def test_operations_on_arrays_run_at_once(c):
    """Outside jit an Array takes operators, methods and jnp functions as a
    JAX array does: each runs now as a jit program of that one operation,
    with JAX's sharding rules (and sentences); a function named after an op
    (sum) still calls the op inside."""
    mesh = c.make_mesh((4, 2), ("X", "Y"))
    xa = np.arange(64, dtype=np.float32).reshape(8, 8)
    x = c.device_put(xa, NamedSharding(mesh, P("X", "Y")))
    assert shmap.typeof(x + 1) == "f32[8@X,8@Y]"
    assert np.array_equal(np.asarray(2 - x * x / 4), 2 - xa * xa / 4)
    assert np.array_equal(np.asarray(x + np.ones((8, 8), np.float32)), xa + 1)
    assert shmap.typeof(x.T) == "f32[8@Y,8@X]"
    assert shmap.typeof(x[::2]) == "f32[4@X,8@Y]"
    assert float(x.sum()) == xa.sum() and len(x) == 8 and x.item is not None
    assert np.array_equal(np.asarray(x > 10), xa > 10)
    assert np.array_equal(np.asarray(x // 3), xa // 3)  # floor_divide, as numpy
    n = c.device_put(np.arange(-8, 8, dtype=np.int32).reshape(4, 4), NamedSharding(mesh, P("X")))
    na = np.arange(-8, 8, dtype=np.int32).reshape(4, 4)
    assert np.array_equal(np.asarray(n // 3), na // 3)
    assert np.array_equal(np.asarray(shmap.jit(lambda a: 7 // (a + 100))(n)), 7 // (na + 100))
    assert np.array_equal(np.asarray(x == x), np.ones((8, 8), bool))
    assert {x: 1}[x] == 1  # hashed by identity, as before
    assert str(x) == str(xa) and x.nbytes == 256 and x.block_until_ready() is x
    assert not x.is_fully_replicated and x.reshard(NamedSharding(mesh, P())).is_fully_replicated
    assert np.array_equal(np.asarray(jnp.sum(x, axis=0)), xa.sum(0))
    assert shmap.typeof(jnp.concatenate([x, x], axis=0)) == "f32[16@X,8@Y]"
    assert shmap.typeof(shmap.reshard(x, P("Y", "X"))) == "f32[8@Y,8@X]"
    assert [np.asarray(r).tolist() for r in x.reshard(NamedSharding(mesh, P()))[:2]] == \
        xa[:2].tolist()
    with pytest.raises(ValueError, match="ambiguous"):
        bool(x)
    rows = shmap.jit(lambda a: jnp.stack([row * k for k, row in enumerate(a)]))(
        x.reshard(NamedSharding(mesh, P())))  # a traced value iterates over its rows
    assert np.array_equal(np.asarray(rows), np.stack([row * k for k, row in enumerate(xa)]))
    # lax.fori_loop with static bounds unrolls (as the text form's loops do)
    loop = shmap.jit(lambda a: shmap.lax.fori_loop(0, 3, lambda i, v: v * 2 + i, a))
    assert np.array_equal(np.asarray(loop(x)), ((xa * 2) * 2 + 1) * 2 + 2)
    with pytest.raises(TypeError, match="cond_fun must return a boolean scalar"):
        shmap.lax.fori_loop(0, x, lambda i, v: v, x)  # bounds of shape (8, 8)
    with pytest.raises(shmap.ProgramError, match="Contracting dimensions are sharded"):
        x @ x.T

    @shmap.jit
    def sum(a):  # noqa: A001 (named as the op it calls)
        return jnp.sum(a, axis=1)

    assert np.array_equal(np.asarray(sum(x)), xa.sum(1))


def test_jit_calls_as_jax_takes_them(c):
    """Keyword arguments, results in tuples, lists and dicts, a jit function
    called inside another (traced into it, resharded to its out_shardings),
    Arrays a jit body closes over (parameters of the program, as JAX embeds
    them), and static_argnums / static_argnames."""
    mesh = c.make_mesh((4, 2), ("X", "Y"))
    xa = np.arange(64, dtype=np.float32).reshape(8, 8)
    x = c.device_put(xa, NamedSharding(mesh, P("X", "Y")))
    add = shmap.jit(lambda a, b, k=1: a + b * k)
    assert np.array_equal(np.asarray(add(x, b=x)), xa * 2)
    assert np.array_equal(np.asarray(add(x, k=3, b=x)), xa * 4)
    with pytest.raises(shmap.InvalidArgument, match="unexpected keyword argument 'c'"):
        add(x, x, c=x)
    r = shmap.jit(lambda a: {"y": a + 1, "zs": (a * 2, [a.T])})(x)
    assert sorted(r) == ["y", "zs"] and isinstance(r["zs"][1], list)
    assert np.array_equal(np.asarray(r["zs"][1][0]), xa.T)
    inner = shmap.jit(lambda a: a * 2, out_shardings=P(None, "X"))
    outer = shmap.jit(lambda a: inner(a) + 1)
    assert shmap.typeof(outer(x)) == "f32[8,8@X]"
    assert np.array_equal(np.asarray(outer(x)), xa * 2 + 1)
    assert "reshard" in outer.lower(x).as_text()
    w = c.device_put(np.ones((8, 8), np.float32), NamedSharding(mesh, P("X", "Y")))
    closes = shmap.jit(lambda a: a + w * 2 + w)
    assert np.array_equal(np.asarray(closes(x)), xa + 3)
    assert "captured0: f32[8,8] @ P('X', 'Y')" in closes.lower(x).as_text()
    other = c.device_put(xa, NamedSharding(c.make_mesh((8,), ("i",)), P("i")))
    with pytest.raises(shmap.InvalidArgument, match="Mesh for all inputs should be equal. Got "
                                                     "one mesh: Mesh\\('X': 4, 'Y': 2\\) and "
                                                     "another mesh: Mesh\\('i': 8\\)"):
        add(x, other)
    # a shard_map body takes what it closes over replicated, as JAX's does, from a mesh
    # of Auto axes; of Explicit ones it is JAX's NotImplementedError
    sm = shmap.shard_map(lambda a: a + w.sum(), mesh=mesh, in_specs=P("X", "Y"),
                         out_specs=P("X", "Y"))
    with pytest.raises(NotImplementedError, match="Closing over inputs to shard_map where the "
                                                  "input is sharded on `Explicit` axes"):
        sm(x)
    auto = c.make_mesh((4, 2), ("X", "Y"), axis_types=(shmap.Auto, shmap.Auto))
    w = c.device_put(np.ones((8, 8), np.float32), NamedSharding(auto, P("X", "Y")))
    sm = shmap.shard_map(lambda a: a + w.sum(), mesh=mesh, in_specs=P("X", "Y"),
                         out_specs=P("X", "Y"))
    assert np.array_equal(np.asarray(sm(x)), xa + 64)
    assert "captured0: f32[8,8] @ P()" in sm.lower(x).as_text()
    # results of no array (None, (), {}): nothing to run, the structure back, as JAX's
    assert shmap.jit(lambda a: None)(x) is None
    assert shmap.jit(lambda a: ((), {}))(x) == ((), {})
    with pytest.raises(shmap.InvalidArgument, match="at least one traced value"):
        shmap.jit(lambda a: None).lower(x)

    def powk(a, k, mode="times"):  # k and mode: Python values the body loops and branches on
        out = a
        for _ in range(k - 1):
            out = out * a if mode == "times" else out + a
        return out

    static = shmap.jit(powk, static_argnums=1, static_argnames="mode", donate_argnums=0)
    assert np.array_equal(np.asarray(static(x, 3)), xa ** 3)
    assert np.array_equal(np.asarray(static(x, 3, mode="plus")), xa * 3)
    assert static.lower(x, 2).as_text().splitlines()[1].startswith("jit powk(a: f32[8,8]")


def test_module_level_calls_as_jax(c):
    """shmap.make_mesh, shmap.device_put (also of an Array: a reshard, and
    of a pytree), shmap.device_get and shmap.block_until_ready, with the
    client of connect() or local_cluster(), and set_mesh / use_mesh, as
    jax's functions are called."""
    mesh = shmap.make_mesh((4, 2), ("X", "Y"))
    assert mesh._client is c
    # jax.sharding.Mesh(devices laid out as the mesh, names): Auto axes, as JAX's
    # (the type does not show them; make_mesh's are Explicit)
    jm = shmap.Mesh(np.array(c.devices()).reshape(4, 2), ("X", "Y"))
    assert jm.shape == {"X": 4, "Y": 2} and jm.devices.shape == (4, 2)
    assert jm.axis_types == (shmap.Auto, shmap.Auto) and mesh.axis_types == (shmap.Explicit,) * 2
    ja = shmap.device_put(np.ones((8, 8), np.float32), NamedSharding(jm, P("X", "Y")))
    assert shmap.typeof(ja) == "f32[8,8]" and ja.sharding.spec == P("X", "Y")
    xa = np.arange(64, dtype=np.float32).reshape(8, 8)
    x = shmap.device_put(xa, NamedSharding(mesh, P("X", "Y")))
    assert shmap.typeof(x) == "f32[8@X,8@Y]"
    y = shmap.device_put(x, NamedSharding(mesh, P(None, "X")))
    assert shmap.typeof(y) == "f32[8,8@X]"
    tree = shmap.device_put({"a": xa, "b": [xa, xa]}, NamedSharding(mesh, P()))
    got = shmap.device_get(shmap.block_until_ready(tree))
    assert np.array_equal(got["b"][1], xa) and isinstance(got["a"], np.ndarray)
    # a bare PartitionSpec means one over the mesh of use_mesh / set_mesh
    with pytest.raises(shmap.InvalidArgument, match="needs a mesh"):
        shmap.device_put(xa, P("X"))
    with shmap.use_mesh(mesh):
        assert shmap.get_mesh() is mesh
        assert shmap.typeof(shmap.device_put(xa, P("X"))) == "f32[8@X,8]"
        assert shmap.typeof(c.device_put(xa, P(None, "Y"))) == "f32[8,8@Y]"
        assert shmap.typeof(x.reshard(P("Y"))) == "f32[8@Y,8]"
        assert shmap.typeof(shmap.jit(lambda a: a + 1)(xa)) == "f32[8,8]"
        sm = shmap.shard_map(lambda a: shmap.lax.psum(a, "Y"), in_specs=P("X", "Y"),
                             out_specs=P("X"))  # no mesh=: use_mesh's
        assert np.array_equal(np.asarray(sm(xa)), xa[:, :4] + xa[:, 4:])
    assert shmap.get_mesh() is None
    shmap.set_mesh(mesh)
    try:
        assert shmap.typeof(shmap.device_put(xa, P("Y", "X"))) == "f32[8@Y,8@X]"
        # the explicit-sharding guide's first lines: arrays made at once on that mesh
        a0 = jnp.zeros((4, 1), out_sharding=P("X", None))
        a1 = jnp.zeros((1, 8), out_sharding=P(None, "Y"))
        assert shmap.typeof(shmap.jit(lambda x, y: x + y)(a0, a1)) == "f32[4@X,8@Y]"
        assert np.array_equal(np.asarray(jnp.arange(8, out_sharding=P("X"))), np.arange(8))
        assert np.array_equal(np.asarray(jnp.arange(10, 0, -2)), np.arange(10, 0, -2))
        fl = jnp.arange(8 * 4.).reshape(8, 4)  # the sharding guide's first array
        assert shmap.typeof(fl) == "f32[8,4]" and np.array_equal(np.asarray(fl),
                                                                  np.arange(32.).reshape(8, 4))
        assert np.allclose(np.asarray(jnp.arange(0, 1, 0.125)), np.arange(0, 1, 0.125))
    finally:
        shmap.set_mesh(None)
    # no mesh set: a numpy array with JAX's default dtype, which calls upload
    host = jnp.arange(8 * 16.).reshape(8, 16)
    assert isinstance(host, np.ndarray) and host.dtype == np.float32
    assert jnp.zeros((4, 1)).dtype == np.float32 and jnp.arange(3).dtype == np.int32
    blocks = shmap.shard_map(lambda a: shmap.lax.psum(a, "Y"), mesh=mesh, in_specs=P("X", "Y"),
                             out_specs=P("X"))(host)
    assert np.array_equal(np.asarray(blocks), host[:, :8] + host[:, 8:])
    with pytest.raises(shmap.InvalidArgument, match="needs a mesh"):
        jnp.zeros((4, 1), out_sharding=P("X"))


def test_default_device(c):
    """With no mesh set, what names none goes where JAX's default device
    is: a mesh of the cluster's first device (jit and grad of numpy
    arguments, device_put(x) without a sharding, ops and jnp functions on
    numpy arrays outside a trace), made once per client. With a mesh set,
    device_put(x) and such ops replicate over it."""
    assert shmap.get_mesh() is None
    xa = np.arange(6, dtype=np.float32)
    y = shmap.jit(lambda x: x * 2)(xa)
    assert np.array_equal(np.asarray(y), xa * 2)
    m = y.sharding.mesh
    assert m.axis_sizes == (1,) and list(m.devices.flat) == [min(shmap.devices())]
    g = shmap.grad(lambda x: (x ** 2).sum())(xa)
    assert np.array_equal(np.asarray(g), 2 * xa) and g.sharding.mesh is m
    d = shmap.device_put(xa)
    assert d.sharding.mesh is m and shmap.typeof(d) == "f32[6]"
    s = jnp.sin(xa)  # an op on numpy arrays outside a trace, and a jnp function
    assert s.sharding.mesh is m and np.allclose(np.asarray(s), np.sin(xa))
    v = jnp.var(xa.reshape(2, 3), axis=1)
    assert v.sharding.mesh is m and np.allclose(np.asarray(v), xa.reshape(2, 3).var(1))
    mesh = c.make_mesh((4, 2), ("X", "Y"))
    with shmap.use_mesh(mesh):
        assert shmap.device_put(xa).sharding.mesh is mesh
        assert jnp.cos(xa).sharding.mesh is mesh


def test_like_functions_and_clip(c):
    """jnp.zeros_like, ones_like and full_like keep the array's sharding (as
    JAX's do in explicit mode) and take its dtype unless given; clip bounds
    either side; stack joins along a new axis; all of them traced, inside
    shard_map, and at once."""
    mesh = c.make_mesh((4, 2), ("X", "Y"))
    xa = np.arange(64, dtype=np.float32).reshape(8, 8)
    x = c.device_put(xa, NamedSharding(mesh, P("X", "Y")))
    z = shmap.jit(lambda a: jnp.zeros_like(a) + a)(x)
    assert shmap.typeof(z) == "f32[8@X,8@Y]" and np.array_equal(np.asarray(z), xa)
    o = shmap.jit(lambda a: jnp.ones_like(a, dtype=np.int32))(x)
    assert shmap.typeof(o) == "i32[8@X,8@Y]" and np.asarray(o).sum() == 64
    assert np.array_equal(np.asarray(jnp.full_like(x, 2.5)), np.full((8, 8), 2.5, np.float32))
    assert np.array_equal(np.asarray(jnp.clip(x, 3, 40)), np.clip(xa, 3, 40))
    assert np.array_equal(np.asarray(jnp.clip(x, a_max=5)), np.minimum(xa, 5))
    sm = shmap.shard_map(lambda a: jnp.ones_like(a) * 2, mesh=mesh, in_specs=P("X", "Y"),
                         out_specs=P("X", "Y"))
    assert np.asarray(sm(x)).sum() == 128
    cast = shmap.jit(lambda a: (a * jnp.pi).astype(jnp.int32)[:, jnp.newaxis])(x)
    assert shmap.typeof(cast) == "i32[8@X,1,8@Y]"
    assert np.array_equal(np.asarray(cast), (xa * np.pi).astype(np.int32)[:, None])
    st = shmap.jit(lambda a: jnp.stack([a, a * 2], axis=-1))(x)
    assert shmap.typeof(st) == "f32[8@X,8@Y,2]"
    assert np.array_equal(np.asarray(st), np.stack([xa, xa * 2], axis=-1))
    assert np.array_equal(np.asarray(jnp.stack([x, x])), np.stack([xa, xa]))


def test_at_updates(c):
    """x.at[index].set / add / multiply / max ... as JAX's, traced, at once and
    in shard_map bodies: the box of ints, slices of step 1 and ... updated
    (a dynamic_update_slice at static starts)."""
    mesh = c.make_mesh((4, 2), ("X", "Y"))
    xa = np.arange(64, dtype=np.float32).reshape(8, 8)
    r = c.device_put(xa, NamedSharding(mesh, P()))
    want = xa.copy()
    want[1:3, 2] += 10
    assert np.array_equal(np.asarray(shmap.jit(lambda a: a.at[1:3, 2].add(10))(r)), want)
    want = xa.copy()
    want[2:5] = xa[0]
    assert np.array_equal(np.asarray(shmap.jit(lambda a: a.at[2:5].set(a[0]))(r)), want)
    want = xa.copy()
    want[..., -1] *= 2
    assert np.array_equal(np.asarray(r.at[..., -1].multiply(2)), want)  # at once
    assert np.array_equal(np.asarray(r.at[:, 1:3].max(30))[:, 1:3], np.maximum(xa[:, 1:3], 30))
    x = c.device_put(xa, NamedSharding(mesh, P("X", "Y")))
    sm = shmap.shard_map(lambda a: a.at[0, 0].set(-1), mesh=mesh, in_specs=P("X", "Y"),
                         out_specs=P("X", "Y"))
    assert (np.asarray(sm(x)) == -1).sum() == 8  # one per device's block
    want = xa.copy()  # a strided slice (was refused)
    want[::2] = 0
    assert np.array_equal(np.asarray(shmap.jit(lambda a: a.at[::2].set(0))(r)), want)


def test_nn_softmax_and_basic_activations(c):
    """shmap.nn's relu, sigmoid, silu, softplus, softmax and log_softmax
    against numpy, traced over a sharded axis (the reductions lowered with
    the sums across devices) and at once."""
    mesh = c.make_mesh((4, 2), ("X", "Y"))
    xa = (np.arange(64, dtype=np.float32).reshape(8, 8) - 30) / 7
    x = c.device_put(xa, NamedSharding(mesh, P("X", "Y")))
    e = np.exp(xa - xa.max(axis=-1, keepdims=True))
    soft = e / e.sum(axis=-1, keepdims=True)
    sig = 1 / (1 + np.exp(-xa))
    checks = [(shmap.nn.relu, np.maximum(xa, 0)), (shmap.nn.sigmoid, sig),
              (shmap.nn.silu, xa * sig), (shmap.nn.softplus, np.log1p(np.exp(xa))),
              (shmap.nn.softmax, soft), (shmap.nn.log_softmax, np.log(soft))]
    for fn, want in checks:
        got = shmap.jit(fn)(x)
        assert shmap.typeof(got) == "f32[8@X,8@Y]", fn.__name__
        assert np.allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5), fn.__name__
    assert np.allclose(np.asarray(shmap.nn.softmax(x, axis=0)),
                       np.exp(xa) / np.exp(xa).sum(axis=0), rtol=1e-5)
    assert "psum" in shmap.jit(shmap.nn.softmax).lower(x).as_text()


def test_reductions_logic_and_ml_helpers(c):
    """argmax/argmin, prod, any/all, cumsum and the other running
    reductions, the bitwise and logical ops (with & | ^ ~), var/std, sum's
    dtype=, and shmap.nn's gelu, logsumexp and one_hot, against numpy:
    traced over sharded axes (argmax and prod gather the reduced dimension,
    any completes with a pmax) and at once; a cumsum along a sharded axis
    is refused with JAX's sentence."""
    mesh = c.make_mesh((4, 2), ("X", "Y"))
    xa = np.random.default_rng(3).standard_normal((8, 16)).astype(np.float32)
    xa[2, 5] = xa[2, 9] = xa[2].max() + 1  # a tie: the first index wins
    x = c.device_put(xa, NamedSharding(mesh, P("X", "Y")))
    xr = c.device_put(xa, NamedSharding(mesh, P(None, "Y")))
    na = np.arange(-64, 64, dtype=np.int32).reshape(8, 16)
    n = c.device_put(na, NamedSharding(mesh, P("X", "Y")))
    am = shmap.jit(lambda a: jnp.argmax(a, axis=1))(x)
    assert shmap.typeof(am) == "i32[8@X]" and np.array_equal(np.asarray(am), xa.argmax(1))
    assert np.asarray(am)[2] == 5
    assert np.array_equal(np.asarray(x.argmin(axis=0, keepdims=True)), xa.argmin(0)[None])
    assert int(x.argmax()) == xa.argmax()
    assert np.allclose(np.asarray(jnp.prod(x / 4 + 1, axis=1)), (xa / 4 + 1).prod(1), rtol=1e-5)
    assert np.array_equal(np.asarray((x > 1).any(axis=1)), (xa > 1).any(1))
    assert bool(jnp.all(x < 10)) and not bool(jnp.any(x > 10))
    assert np.allclose(np.asarray(jnp.cumsum(xr, axis=0)), xa.cumsum(0), rtol=1e-5, atol=1e-5)
    assert np.array_equal(np.asarray(jnp.cummax(xr, axis=0)), np.maximum.accumulate(xa, 0))
    assert np.allclose(np.asarray(xr.cumprod(axis=0)), xa.cumprod(0), rtol=1e-4, atol=1e-6)
    assert np.allclose(np.asarray(shmap.lax.cumsum(xr, axis=0, reverse=True)),
                       xa[::-1].cumsum(0)[::-1], rtol=1e-5, atol=1e-5)
    with pytest.raises(shmap.ProgramError, match=r"Input should be unsharded over the axis "
                       r"being reduced\. Got input type=f32\[8@X,16@Y\] and axis=1"):
        jnp.cumsum(x, axis=1)
    assert np.array_equal(np.asarray((n & 6) | (n ^ 3)), (na & 6) | (na ^ 3))
    assert np.array_equal(np.asarray(~n), ~na)
    assert np.array_equal(np.asarray(~(x > 0) & (n > 0)), ~(xa > 0) & (na > 0))
    assert np.array_equal(np.asarray(jnp.logical_xor(x, n)), np.logical_xor(xa, na))
    assert np.array_equal(np.asarray(jnp.logical_not(n)), np.logical_not(na))
    with pytest.raises(shmap.ProgramError, match="bitwise_and does not accept dtype float32"):
        x & x
    assert np.allclose(np.asarray(x.var(axis=1)), xa.var(1), rtol=1e-5)
    assert np.allclose(float(jnp.std(x, ddof=1)), xa.std(ddof=1), rtol=1e-5)
    assert np.allclose(np.asarray(jnp.log1p(abs(x))), np.log1p(abs(xa)), rtol=1e-6)
    s = jnp.sum(n, axis=0, dtype=jnp.float64)
    assert shmap.typeof(s) == "f64[16@Y]" and np.array_equal(np.asarray(s), na.sum(0))
    from math import erf, sqrt, pi, tanh
    exact = np.vectorize(lambda v: v * 0.5 * (1 + erf(v / sqrt(2))))(xa.astype(np.float64))
    tanh_form = np.vectorize(
        lambda v: v * 0.5 * (1 + tanh(sqrt(2 / pi) * (v + 0.044715 * v ** 3))))(xa)
    assert np.allclose(np.asarray(shmap.nn.gelu(x, approximate=False)), exact, atol=1e-6)
    assert np.allclose(np.asarray(shmap.jit(shmap.nn.gelu)(x)), tanh_form, atol=1e-6)
    lse = shmap.jit(lambda a: shmap.nn.logsumexp(a, axis=1))(x)
    assert np.allclose(np.asarray(lse), np.log(np.exp(xa).sum(1)), rtol=1e-5)
    labels = c.device_put(np.array([1, 0, 3, 2, 1, 1, 0, 3], np.int32), NamedSharding(mesh, P("X")))
    oh = shmap.nn.one_hot(labels, 4)
    assert shmap.typeof(oh) == "f32[8@X,4]"
    assert np.array_equal(np.asarray(oh), np.eye(4, dtype=np.float32)[[1, 0, 3, 2, 1, 1, 0, 3]])

    @shmap.jit
    def loss_and_accuracy(logits, labels):  # a classifier's two numbers, as JAX code has them
        lp = shmap.nn.log_softmax(logits)
        nll = -jnp.mean(jnp.sum(lp * shmap.nn.one_hot(labels, logits.shape[-1]), axis=-1))
        return nll, jnp.mean(jnp.argmax(logits, axis=-1) == labels)

    la = xa[:, :4].copy()
    lg = c.device_put(la, NamedSharding(mesh, P("X")))
    nll, acc = loss_and_accuracy(lg, labels)
    e = np.exp(la - la.max(1, keepdims=True))
    lp = np.log(e / e.sum(1, keepdims=True))
    want = -lp[np.arange(8), [1, 0, 3, 2, 1, 1, 0, 3]].mean()
    assert np.isclose(float(nll), want, rtol=1e-5)
    assert float(acc) == np.mean(la.argmax(1) == [1, 0, 3, 2, 1, 1, 0, 3])


def test_sort_argsort_top_k(c):
    """jnp.sort / argsort (stable, NaN last; descending as JAX's), the
    methods, lax.top_k (ties: the lower position first) against numpy; a
    sort along a sharded dimension is refused with JAX's sentence."""
    mesh = c.make_mesh((4, 2), ("X", "Y"))
    xa = np.array([[3, 1, np.nan, 1, 2, 5], [0, 0, -1, 7, 7, 2], [4, 4, 4, 4, 1, 1],
                   [9, 8, 7, 6, 5, 4]], np.float32)
    x = c.device_put(xa, NamedSharding(mesh, P("X")))
    assert np.array_equal(np.asarray(jnp.sort(x)), np.sort(xa), equal_nan=True)
    assert np.array_equal(np.asarray(x.argsort()), np.argsort(xa, kind="stable"))
    desc = np.argsort(-np.nan_to_num(xa, nan=np.inf), kind="stable")  # NaN first, ties in order
    assert np.array_equal(np.asarray(jnp.argsort(x, descending=True)), desc)
    assert np.array_equal(np.asarray(jnp.sort(x, descending=True)), np.take_along_axis(xa, desc, 1),
                          equal_nan=True)
    r = c.device_put(xa, NamedSharding(mesh, P()))
    assert np.array_equal(np.asarray(jnp.sort(r, axis=None)), np.sort(xa, axis=None), equal_nan=True)
    assert np.array_equal(np.asarray(jnp.argsort(r, axis=0)), np.argsort(xa, axis=0, kind="stable"))
    v, i = lax.top_k(x, 2)
    assert np.array_equal(np.asarray(i), desc[:, :2])
    assert np.array_equal(np.asarray(v), np.take_along_axis(xa, desc[:, :2], 1), equal_nan=True)
    with pytest.raises(shmap.ProgramError, match=r"Arguments to sort must be unsharded over the "
                       r"sorting dimension\. Got arg sharding=NamedSharding\(mesh=Mesh\('X': 4, "
                       r"'Y': 2\), spec=P\('X',?\)\) and sorting dimension=0"):
        jnp.sort(x, axis=0)


def test_nan_reductions_and_quantiles(c):
    """nansum, nanmean, nanmax, nanmin (a row of NaNs gives NaN, as numpy),
    median, quantile and percentile (numpy's 'linear' method, built on
    sort) against numpy."""
    import warnings
    mesh = c.make_mesh((4, 2), ("X", "Y"))
    xa = np.random.default_rng(1).standard_normal((8, 7)).astype(np.float32)
    xa[1, 3], xa[2, :] = np.nan, np.nan
    x = c.device_put(xa, NamedSharding(mesh, P("X")))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy warns on the all-NaN row
        for got, want in [(jnp.nansum(x, axis=1), np.nansum(xa, axis=1)),
                          (jnp.nanmean(x, axis=1), np.nanmean(xa, axis=1)),
                          (jnp.nanmax(x, axis=1), np.nanmax(xa, axis=1)),
                          (jnp.nanmin(x, axis=0), np.nanmin(xa, axis=0)),
                          (jnp.nansum(x), np.nansum(xa))]:
            assert np.allclose(np.asarray(got), want, equal_nan=True, rtol=1e-5)
    ya = np.random.default_rng(2).standard_normal((8, 7)).astype(np.float32)
    y = c.device_put(ya, NamedSharding(mesh, P("X")))
    r = c.device_put(ya, NamedSharding(mesh, P()))
    for got, want in [(jnp.median(y, axis=1), np.median(ya, axis=1)),
                      (jnp.quantile(y, [0.1, 0.9], axis=1), np.quantile(ya, [0.1, 0.9], axis=1)),
                      (jnp.percentile(y, 30, axis=1, keepdims=True),
                       np.percentile(ya, 30, axis=1, keepdims=True)),
                      (jnp.median(r), np.median(ya)),
                      (jnp.median(c.device_put(np.arange(8, dtype=np.int32),
                                               NamedSharding(mesh, P()))), 3.5)]:
        g = np.asarray(got)
        assert g.shape == np.shape(want) and np.allclose(g, want, rtol=1e-5)


def test_jnp_compositions(c):
    """jnp functions made of the op table's (eye, identity, linspace, tril,
    triu, ravel, swapaxes, moveaxis, vstack, hstack, split, log2, log10,
    exp2, reciprocal, einsum of three operands, outer, tensordot, inner,
    linalg.norm) against numpy, at once and traced; creation functions give
    numpy arrays with no mesh set and Arrays on the context mesh."""
    assert isinstance(jnp.eye(3), np.ndarray) and jnp.eye(3).dtype == np.float32
    assert np.allclose(jnp.linspace(0, 1, 5), np.linspace(0, 1, 5))
    mesh = c.make_mesh((4, 2), ("X", "Y"))
    xa = np.arange(64, dtype=np.float32).reshape(8, 8) / 8
    x = c.device_put(xa, NamedSharding(mesh, P("X", "Y")))
    xr = c.device_put(xa, NamedSharding(mesh, P("X")))
    with shmap.use_mesh(mesh):
        e = jnp.eye(8, out_sharding=P("X", "Y"))
        assert shmap.typeof(e) == "f32[8@X,8@Y]"
        assert np.array_equal(np.asarray(e), np.eye(8, dtype=np.float32))
        assert np.array_equal(np.asarray(jnp.eye(4, 6, k=1)), np.eye(4, 6, 1, dtype=np.float32))
        assert np.array_equal(np.asarray(jnp.identity(3, dtype=jnp.int32)), np.identity(3))
        for args in ((0, 1, 8), (2, 3, 5, False), (-1, 1, 1), (0, 10, 0)):
            got = np.asarray(jnp.linspace(*args))
            want = np.linspace(*args[:3], endpoint=args[3] if len(args) > 3 else True)
            assert got.shape == want.shape and np.allclose(got, want), args
    assert np.array_equal(np.asarray(jnp.tril(x)), np.tril(xa))
    assert np.array_equal(np.asarray(jnp.triu(x, 1)), np.triu(xa, 1))
    assert shmap.typeof(jnp.swapaxes(x, 0, 1)) == "f32[8@Y,8@X]"
    assert np.array_equal(np.asarray(jnp.moveaxis(x[None], 0, -1)), np.moveaxis(xa[None], 0, -1))
    assert shmap.typeof(x.ravel()) == "f32[64@(X,Y)]"
    assert np.array_equal(np.asarray(jnp.vstack([xr, xr])), np.vstack([xa, xa]))
    assert np.array_equal(np.asarray(jnp.hstack([xr, xr])), np.hstack([xa, xa]))
    for got, want in zip(jnp.split(xr, [3, 5], axis=1), np.split(xa, [3, 5], axis=1)):
        assert np.array_equal(np.asarray(got), want)
    assert [shmap.typeof(p) for p in jnp.split(xr, 2, axis=1)] == ["f32[8@X,4]"] * 2
    with pytest.raises(ValueError, match="equal division"):
        jnp.split(xr, 3, axis=1)
    assert np.allclose(np.asarray(jnp.log2(x + 1)), np.log2(xa + 1), rtol=1e-6)
    assert np.allclose(np.asarray(jnp.log10(x + 1)), np.log10(xa + 1), rtol=1e-6)
    assert np.allclose(np.asarray(jnp.exp2(x)), np.exp2(xa), rtol=1e-6)
    assert np.allclose(np.asarray(jnp.reciprocal(x + 1)), 1 / (xa + 1), rtol=1e-6)
    rng = np.random.default_rng(5)
    aa, ba, ca = (rng.random(s, dtype=np.float32) for s in ((8, 4), (4, 6), (6, 5)))
    a = c.device_put(aa, NamedSharding(mesh, P("X")))
    b = c.device_put(ba, NamedSharding(mesh, P()))
    cc = c.device_put(ca, NamedSharding(mesh, P()))
    r = shmap.jit(lambda a, b, cc: jnp.einsum("ij,jk,kl->il", a, b, cc))(a, b, cc)
    assert shmap.typeof(r) == "f32[8@X,5]" and np.allclose(np.asarray(r), aa @ ba @ ca, rtol=1e-5)
    assert np.allclose(np.asarray(jnp.einsum("ij,jk,kl", a, b, cc)), aa @ ba @ ca, rtol=1e-5)
    assert np.allclose(np.asarray(jnp.outer(a[:, 0], b[0])), np.outer(aa[:, 0], ba[0]), rtol=1e-6)
    assert np.allclose(np.asarray(jnp.tensordot(a, b, 1)), aa @ ba, rtol=1e-5)
    assert np.allclose(np.asarray(jnp.tensordot(b, cc, ([1], [0]))), ba @ ca, rtol=1e-5)
    assert np.allclose(np.asarray(jnp.inner(a, b.T)), aa @ ba, rtol=1e-5)
    assert np.isclose(float(jnp.linalg.norm(x)), np.linalg.norm(xa), rtol=1e-6)
    assert np.allclose(np.asarray(jnp.linalg.norm(x, axis=1)), np.linalg.norm(xa, axis=1))
    v = c.device_put(xa[0] - 3, NamedSharding(mesh, P("Y")))
    assert np.isclose(float(jnp.linalg.norm(v, ord=1)), np.linalg.norm(xa[0] - 3, ord=1))
    assert np.isclose(float(jnp.linalg.norm(v, ord=np.inf)), np.linalg.norm(xa[0] - 3, np.inf))


def test_array_constructors_and_predicates(c):
    """jnp.array / asarray: numpy with no mesh set (JAX's default dtypes),
    replicated Arrays on the context mesh, constants inside a jit;
    jnp.ndarray for isinstance; shape/ndim/size; isclose, allclose,
    array_equal against numpy."""
    assert jnp.array([1.5]).dtype == np.float32 and jnp.array([1, 2]).dtype == np.int32
    assert jnp.array([1, 2], dtype=jnp.int64).dtype == np.int64
    mesh = c.make_mesh((4, 2), ("X", "Y"))
    with shmap.use_mesh(mesh):
        a = jnp.array([[1., 2.], [3., 4.]])
        assert isinstance(a, jnp.ndarray) and shmap.typeof(a) == "f32[2,2]"
        x = shmap.device_put(np.arange(8, dtype=np.float32), P("X"))
        f = shmap.jit(lambda x: x * jnp.array(np.arange(1, 9), jnp.float32) + jnp.asarray(0.5))
        assert np.array_equal(np.asarray(f(x)), np.arange(8) * np.arange(1, 9) + 0.5)
        near = np.arange(8, dtype=np.float32) + np.array([0, 1e-6, 0, 0, 0, 0, 0, 1], np.float32)
        y = shmap.device_put(near, P("X"))
        assert np.array_equal(np.asarray(jnp.isclose(x, y)), np.isclose(np.arange(8.), near))
        assert not bool(jnp.allclose(x, y)) and bool(jnp.allclose(x, x * (1 + 1e-6)))
        assert bool(jnp.array_equal(x, x)) and not bool(jnp.array_equal(x, y))
        assert jnp.array_equal(x, a) is False
        assert (jnp.shape(x), jnp.ndim(x), jnp.size(x)) == ((8,), 1, 8)


def test_control_flow(c):
    """lax.cond, switch and select on traced predicates select each result
    (both branches run), on static ones call the branch; lax.scan unrolls,
    carrying a sharded value and stacking the ys."""
    mesh = c.make_mesh((4, 2), ("X", "Y"))
    xa = np.arange(64, dtype=np.float32).reshape(8, 8) / 10
    x = c.device_put(xa, NamedSharding(mesh, P("X", "Y")))
    f = shmap.jit(lambda x, t: lax.cond(jnp.sum(x) > t, lambda v: v * 2, lambda v: (v - 1), x))
    assert np.allclose(np.asarray(f(x, c.device_put(np.float32(10), NamedSharding(mesh, P())))),
                       xa * 2)
    assert np.allclose(np.asarray(f(x, c.device_put(np.float32(1e6), NamedSharding(mesh, P())))),
                       xa - 1)
    assert lax.cond(False, lambda a: a + 1, lambda a: a - 1, 3) == 2
    g = shmap.jit(lambda x, i: lax.switch(i, [lambda v: v + 1, lambda v: v * 3, lambda v: -v], x))
    for i, want in ((1, xa * 3), (0, xa + 1), (7, -xa), (-2, xa + 1)):
        got = g(x, c.device_put(np.int32(i), NamedSharding(mesh, P())))
        assert np.allclose(np.asarray(got), want), i
    pair = shmap.jit(lambda x: lax.cond(x[0, 0] > 0, lambda v: (v, v.sum()),
                                        lambda v: (-v, v.max()), x))(x)
    assert np.allclose(np.asarray(pair[0]), -xa) and float(pair[1]) == xa.max()
    seq_a = np.arange(24, dtype=np.float32).reshape(6, 4)
    seq = c.device_put(seq_a, NamedSharding(mesh, P(None, "X")))

    @shmap.jit
    def decay(seq):
        def step(carry, xt):
            carry = carry * 0.5 + xt
            return carry, {"total": carry.sum()}
        return lax.scan(step, jnp.zeros((4,), jnp.float32, out_sharding=P("X")), seq)

    carry, ys = decay(seq)
    want_c, want_y = np.zeros(4, np.float32), []
    for row in seq_a:
        want_c = want_c * 0.5 + row
        want_y.append(want_c.sum())
    assert shmap.typeof(carry) == "f32[4@X]" and np.allclose(np.asarray(carry), want_c)
    assert np.allclose(np.asarray(ys["total"]), want_y)
    rev = shmap.jit(lambda s: lax.scan(lambda cy, xt: (cy + xt, cy), jnp.zeros((4,)), s,
                                       reverse=True))(c.device_put(seq_a, NamedSharding(mesh, P())))
    assert np.allclose(np.asarray(rev[1]), np.cumsum(seq_a[::-1], 0)[::-1] - seq_a)


def test_gathers_and_array_indexing(c):
    """jnp.take and take_along_axis, and numpy's indexing with one integer
    array among basic indices (clamped, as JAX's indexing), against numpy:
    an embedding lookup keeps the table's sharding, a cross-entropy picks
    each row's label, the array's dimensions land where numpy puts them;
    sharded indices need out_sharding=, as JAX's sentence says."""
    mesh = c.make_mesh((4, 2), ("X", "Y"))
    ea = np.arange(64, dtype=np.float32).reshape(16, 4)
    e = c.device_put(ea, NamedSharding(mesh, P(None, "Y")))
    ta = np.array([[3, 1, 15], [0, 20, -1]], np.int32)
    t = c.device_put(ta, NamedSharding(mesh, P()))
    got = e[t]
    assert shmap.typeof(got) == "f32[2,3,4@Y]"
    assert np.array_equal(np.asarray(got), ea[np.clip(np.where(ta < 0, ta + 16, ta), 0, 15)])
    filled = np.asarray(jnp.take(e, t, axis=0))  # jnp.take's default: fill (NaN)
    assert np.isnan(filled[1, 1]).all() and np.array_equal(filled[0], ea[[3, 1, 15]])
    assert np.array_equal(np.asarray(jnp.take(e, t, axis=0, mode="wrap")), ea[ta % 16])
    assert np.array_equal(np.asarray(e[np.array([2, 5])]), ea[[2, 5]])
    assert np.array_equal(np.asarray(e[[1, 2], 1:3]), ea[[1, 2], 1:3])
    xa = np.arange(120, dtype=np.float32).reshape(2, 3, 4, 5)
    x = c.device_put(xa, NamedSharding(mesh, P()))
    i = np.array([0, 2, 1])
    for key in [(0, slice(None), i), (slice(None), 1, i), (0, i), (i % 2, 0),
                (slice(None), i, slice(None), 2), (Ellipsis, i)]:
        got, want = np.asarray(x[key]), xa[key]
        assert got.shape == want.shape and np.array_equal(got, want), key
    la = np.random.default_rng(2).random((8, 5), dtype=np.float32)
    ya = np.array([1, 0, 4, 2, 3, 3, 1, 0], np.int32)
    lg = c.device_put(la, NamedSharding(mesh, P("X")))
    y = c.device_put(ya, NamedSharding(mesh, P("X")))
    ce = shmap.jit(lambda lg, y: -jnp.mean(
        jnp.take_along_axis(shmap.nn.log_softmax(lg), y[:, None], axis=1)))
    e2 = np.exp(la - la.max(1, keepdims=True))
    assert np.isclose(float(ce(lg, y)), -np.log(e2 / e2.sum(1, keepdims=True))[np.arange(8), ya].mean(),
                      rtol=1e-5)
    g = shmap.jit(lambda e, t: e.at[t].get(out_sharding=P("X", "Y")))(e, y)
    assert shmap.typeof(g) == "f32[8@X,4@Y]" and np.array_equal(np.asarray(g), ea[ya])
    with pytest.raises(shmap.ProgramError, match=r"Use `\.at\[\.\.\.\]\.get\(out_sharding=\)` to "
                       r"provide output PartitionSpec .* Got operand=f32\[16,4@Y\], "
                       r"indices=i32\[8@X\]"):
        shmap.jit(lambda e, t: e[t])(e, y)
    assert np.array_equal(np.asarray(x[i, i]), xa[np.minimum(i, len(xa) - 1), i])  # clamped


def test_pytree_arguments(c):
    """jit and shard_map take pytrees of arrays (a params dict, tuples,
    lists), as JAX's: each leaf one parameter named by its path; a
    shard_map's in_specs entry is one P for every leaf or a pytree of them."""
    mesh = c.make_mesh((4, 2), ("X", "Y"))
    wa, ba = np.arange(32, dtype=np.float32).reshape(8, 4), np.ones(8, np.float32)
    xa = np.arange(64, dtype=np.float32).reshape(16, 4) / 10
    params = {"w": c.device_put(wa.T.copy(), NamedSharding(mesh, P())),
              "b": c.device_put(ba, NamedSharding(mesh, P()))}
    x = c.device_put(xa, NamedSharding(mesh, P("X")))

    @shmap.jit
    def layer(params, x, extra=(None,)):
        return jnp.dot(x, params["w"]) + params["b"]

    got = layer(params, x)
    assert shmap.typeof(got) == "f32[16@X,8]"
    assert np.allclose(np.asarray(got), xa @ wa.T + ba)
    assert "params_w: f32[4,8]" in layer.lower(params, x).as_text()
    pair = shmap.jit(lambda ab, s: (ab[0] + ab[1]) * s["k"][0])(
        [x, x], {"k": (c.device_put(np.float32(3), NamedSharding(mesh, P())),)})
    assert np.allclose(np.asarray(pair), 6 * xa)
    sm = shmap.shard_map(lambda p, x: jnp.dot(x, p["w"]) + p["b"], mesh=mesh,
                         in_specs=({"w": P(), "b": P()}, P("X")), out_specs=P("X"))
    assert np.allclose(np.asarray(sm(params, x)), xa @ wa.T + ba)
    sm2 = shmap.shard_map(lambda p, x: x * p[0] + p[1], mesh=mesh, in_specs=(P(), P("X")),
                          out_specs=P("X"))
    assert np.allclose(np.asarray(sm2((c.device_put(np.float32(2), NamedSharding(mesh, P())),
                                       c.device_put(np.float32(1), NamedSharding(mesh, P()))), x)),
                       xa * 2 + 1)


def test_traced_full_slice_keeps_its_type(c):
    """x[:, :] and x[...] are x (the text form defines no value for them):
    before, such a traced value took the type of the last value the program
    had made (here the sum's, shape (4,))."""
    mesh = c.make_mesh((4, 2), ("X", "Y"))
    shapes = []

    @shmap.jit
    def f(x):
        y = x.sum(0)
        z, w = x[:, :], x[...]
        shapes.append((z.shape, w.shape, shmap.typeof(z)))
        return z + 1, y

    xa = np.ones((8, 4), np.float32)
    z, _ = f(c.device_put(xa, NamedSharding(mesh, P("X"))))
    assert shapes == [((8, 4), (8, 4), "f32[8@X,4]")]
    assert np.array_equal(np.asarray(z), xa + 1)


def test_numpy_operands_are_constants(c):
    """A numpy array given to an op in a jit body (x @ W, a mask, a closed-
    over table) is a constant of the program, as JAX embeds one: float64 as
    float32 and int64 as int32 (JAX's defaults without x64), not weakly
    typed, one parameter per array however often it is used; grad goes
    through it. Before, such an operand was refused ("cannot use a value of
    type ndarray"). A shard_map body takes one replicated."""
    mesh = c.make_mesh((4, 2), ("X", "Y"))
    rng = np.random.default_rng(3)
    wa = rng.standard_normal((4, 3))  # float64
    mask = rng.random(3) > 0.5
    table = np.arange(3, dtype=np.int64)
    xa = rng.standard_normal((8, 4)).astype(np.float32)
    x = c.device_put(xa, NamedSharding(mesh, P("X")))

    def f(x):
        h = jnp.tanh(x @ wa) + table
        return jnp.sum(jnp.where(mask, h, 0.0) ** 2) + jnp.sum(x @ wa)

    got = shmap.jit(f)(x)
    assert got.dtype == np.float32
    text = shmap.jit(f).lower(x).as_text()
    assert text.split("\n")[1].count("captured") == 3, text.split("\n")[1]
    assert "f32[4,3] @ P()" in text and "i32[3] @ P()" in text and "bool[3] @ P()" in text
    w32 = wa.astype(np.float32)
    h = np.tanh(xa @ w32) + table
    assert np.allclose(float(np.asarray(got)), np.sum(np.where(mask, h, 0) ** 2) +
                       np.sum(xa @ w32), rtol=1e-4)
    g = np.asarray(shmap.jit(shmap.grad(f))(x))
    t = np.tanh(xa @ w32)
    want = (np.where(mask, 2 * h * (1 - t ** 2), 0) + 1) @ w32.T
    assert np.allclose(g, want, rtol=1e-4, atol=1e-5)
    sm = shmap.shard_map(lambda b: b @ wa, mesh=mesh, in_specs=P("X"), out_specs=P("X"))
    assert np.allclose(np.asarray(sm(x)), xa @ w32, rtol=1e-5, atol=1e-5)
    assert np.allclose(np.asarray(shmap.jit(lambda x: sm(x) * 2)(x)), xa @ w32 * 2, rtol=1e-5,
                       atol=1e-5)


def test_shard_map_closes_over_values_of_its_jit(c):
    """A shard_map function called in a jit body may close over values of
    that body: each is one more parameter, replicated (P()), passed by the
    call; a second call traces the body again (what it closes over may
    have changed). Before, the body's text named the jit's value, which the
    function did not have ("name 'v0' is not defined") or, when the body
    had made a value of that name, silently read its own. A value used
    after its trace ended is refused with a sentence (it read whatever
    value the new trace had of that name). grad follows a closed-over value
    as an argument replicated over the mesh."""
    mesh = c.make_mesh((4, 2), ("X", "Y"))
    xa = np.arange(8, dtype=np.float32)
    x = c.device_put(xa, NamedSharding(mesh, P("X")))

    @shmap.jit
    def f(x):
        y = x * 2.0
        z = x - 1.0

        def body(b):
            t = b * 3.0  # the body's v0, as y is the jit's
            return t + y[:2] * lax.axis_index("X")
        sm = shmap.shard_map(body, mesh=mesh, in_specs=P("X"), out_specs=P("X"))
        outs = [sm(x)]
        y = z  # the next call closes over another value
        outs.append(sm(x * 0))
        return outs[0] + outs[1]

    blocks = [(b, k) for k, b in enumerate(np.split(xa, 4))]
    want = np.concatenate([b * 3 + (xa * 2)[:2] * k for b, k in blocks]) + \
        np.concatenate([b * 0 + (xa - 1)[:2] * k for b, k in blocks])
    assert np.array_equal(np.asarray(f(x)), want)
    text = f.lower(x).as_text()
    assert "closed0: f32[8] @ P()" in text and "body_2(" in text
    # grad follows a value the body closes over as it does an argument
    sm = shmap.shard_map(lambda b, y: b * y[0], mesh=mesh, in_specs=(P("X"), P()),
                         out_specs=P("X"))

    def loss(x, closes):
        y = x * 2.0
        if closes:
            return shmap.shard_map(lambda b: b * y[0], mesh=mesh, in_specs=P("X"),
                                   out_specs=P("X"))(x).sum()
        return sm(x, y).sum()
    g = shmap.jit(shmap.grad(loss), static_argnums=1)(x, False)
    want = np.full(8, 2 * xa[0], np.float32)  # loss = 2 x0 sum(x)
    want[0] += 2 * xa.sum()
    assert np.array_equal(np.asarray(g), want)
    g2 = shmap.jit(shmap.grad(loss), static_argnums=1)(x, True)
    assert np.array_equal(np.asarray(g2), want)
    leaked = []

    @shmap.jit
    def keep(x):
        leaked.append(x * 1.0)
        return x
    keep(x)
    with pytest.raises(shmap.InvalidArgument, match=r"a traced value \(v0\) of another trace "
                       r"is used here"):
        shmap.jit(lambda x: x + leaked[0])(x)


def test_long_traces(c):
    """A function of many ops traces in time linear in its length (past 64
    lines each op is typed when a type is asked for, or at the end, in one
    check for all since the last): shapes are right midway, a bad op is
    named by its own source line, the result equals numpy."""
    import inspect
    mesh = c.make_mesh((4, 2), ("X", "Y"))
    xa = np.ones((8, 4), np.float32)
    x = c.device_put(xa, NamedSharding(mesh, P("X")))
    seen = []

    def long(x):
        for _ in range(300):
            x = x * 1.001 + 0.5
        seen.append((x.shape, shmap.typeof(x)))
        return x.sum(axis=1)

    got = shmap.jit(long)(x)
    want = xa.copy()
    for _ in range(300):
        want = want * np.float32(1.001) + np.float32(0.5)
    assert seen == [((8, 4), "f32[8@X,4]")]
    assert np.allclose(np.asarray(got), want.sum(1), rtol=1e-5)

    def bad(x):
        for _ in range(100):
            x = x + 1
        y = x @ x  # (8, 4) @ (8, 4)
        return y + 1

    bad_line = inspect.getsourcelines(bad)[1] + 3
    with pytest.raises(shmap.ProgramError, match=rf"test_shmap.py:{bad_line}: matmul: operands "
                       r"f32\[8,4\] and f32\[8,4\]"):
        shmap.jit(bad)(x)


def test_long_traces_asking_types(c, monkeypatch):
    """A trace that asks a type after every op (as vmap's rules do) checks
    only the ops made since the last check, in a program of their own: the
    lines checked in all grow with the program's length, not its square,
    and every type found so is the one the whole program's check gives
    (explicit shardings that change, reductions, products, transposes,
    reshards, an alias of a value, y[:, :], read by the next ops). Checking
    the whole program each time checked 30,746 lines here, 72 times the
    program's 425."""
    import _shmap
    from shmap import _trace
    mesh = c.make_mesh((4, 2), ("X", "Y"))
    xa = np.arange(32, dtype=np.float32).reshape(8, 4) / 32
    x = c.device_put(xa, NamedSharding(mesh, P("X")))
    w = c.device_put(np.eye(4, dtype=np.float32) * 0.5, NamedSharding(mesh, P()))
    checked = []
    real = _shmap.program_check

    def counting(text, *a):
        checked.append(text.count("\n"))
        return real(text, *a)

    monkeypatch.setattr(_trace._shmap, "program_check", counting)
    seen = []

    def f(x, w):
        half = jnp.asarray(0.5) * 1
        for k in range(60):
            y = jnp.einsum("ij,jk->ik", x, w, out_sharding=P(None, "Y"))
            y = jnp.sin(y) + x.mean(axis=1, keepdims=True) * half
            z = y.T
            x = shmap.reshard(z.T, P("X")) if k % 2 else y[:, :]
            for v in (y, z, x):
                seen.append((v.name, shmap.typeof(v), v.shape))
        return x

    got = shmap.jit(f)(x, w)
    text = shmap.jit(f).lower(x, w).as_text().split("\n# lowered:")[0] + "\n"
    monkeypatch.setattr(_trace._shmap, "program_check", real)
    whole = {t[5]: (t[0], tuple(t[2])) for t in real(text, "<t>", None, False, True)["types"]
             if t[5]}
    assert len(seen) % 180 == 0 and seen[:180] == seen[-180:]  # jit, then lower: a trace each
    for name, ty, shape in seen:
        if name in whole:  # y[:, :] is y: no value of its own
            assert whole[name] == (ty, shape), (name, whole[name], ty, shape)
    lines = text.count("\n")
    assert sum(checked) < 12 * lines, (sum(checked), lines, len(checked))
    want = xa.copy()
    for k in range(60):
        y = np.sin(want @ (np.eye(4, dtype=np.float32) * 0.5)) + \
            want.mean(axis=1, keepdims=True) * 0.5
        want = y
    assert np.allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)


def test_jit_reuses_its_trace(c):
    """A jit function is traced once per signature (static values, pytree
    structure, array types and shardings, mesh), as jax.jit: its Python runs
    again only for a new one; results stay right."""
    mesh = c.make_mesh((4, 2), ("X", "Y"))
    traced = []

    @shmap.jit
    def f(x, scale):
        traced.append(x.shape)
        return x * scale["k"]

    xa = np.arange(32, dtype=np.float32).reshape(8, 4)
    x = c.device_put(xa, NamedSharding(mesh, P("X")))
    k2 = {"k": c.device_put(np.float32(2), NamedSharding(mesh, P()))}
    for _ in range(3):
        assert np.array_equal(np.asarray(f(x, k2)), xa * 2)
    assert len(traced) == 1
    k3 = {"k": c.device_put(np.float32(3), NamedSharding(mesh, P()))}
    assert np.array_equal(np.asarray(f(x, k3)), xa * 3) and len(traced) == 1  # same types
    xr = c.device_put(xa, NamedSharding(mesh, P(None, "Y")))
    assert np.array_equal(np.asarray(f(xr, k2)), xa * 2) and len(traced) == 2  # new sharding
    y = c.device_put(xa[:4], NamedSharding(mesh, P("X")))
    assert np.array_equal(np.asarray(f(y, k2)), xa[:4] * 2) and len(traced) == 3  # new shape

    g = shmap.jit(lambda x, n: x * n, static_argnums=1)
    assert np.array_equal(np.asarray(g(x, 2)), xa * 2)
    assert np.array_equal(np.asarray(g(x, 5)), xa * 5)  # a new static value: a new trace


def test_transformer_block_forward(c):
    """A decoder block as JAX code writes it (embedding lookup, layer norm,
    causal attention with einsum, tril and softmax, a gelu MLP, tied logits,
    a cross-entropy with take_along_axis), params as a dict, tokens sharded
    over the batch: one jit program, equal to numpy."""
    B, T, D, H, V = 4, 8, 16, 2, 32
    rng = np.random.default_rng(0)
    shapes = dict(emb=(V, D), wq=(D, D), wk=(D, D), wv=(D, D), wo=(D, D), w1=(D, 4 * D),
                  w2=(4 * D, D))
    pn = {k: (rng.standard_normal(v) * 0.1).astype(np.float32) for k, v in shapes.items()}
    pn["g"], pn["b"] = np.ones(D, np.float32), np.zeros(D, np.float32)
    tok_np = rng.integers(0, V, (B, T)).astype(np.int32)

    def model(p, tok, xp):
        x = p["emb"][tok] if xp is np else p["emb"].at[tok].get(out_sharding=P("X", None, None))

        def ln(x):
            m = x.mean(-1, keepdims=True)
            v = ((x - m) ** 2).mean(-1, keepdims=True)
            return (x - m) / xp.sqrt(v + 1e-5) * p["g"] + p["b"]

        h = ln(x)
        q, k, v = ((h @ p[w]).reshape(B, T, H, D // H) for w in ("wq", "wk", "wv"))
        s = xp.einsum("bthd,bshd->bhts", q, k) / np.sqrt(D // H)
        s = xp.where(xp.tril(xp.ones((T, T), np.float32)) > 0, s, -1e9)
        if xp is np:
            a = np.exp(s - s.max(-1, keepdims=True))
            a = a / a.sum(-1, keepdims=True)
        else:
            a = shmap.nn.softmax(s, axis=-1)
        x = x + xp.einsum("bhts,bshd->bthd", a, v).reshape(B, T, D) @ p["wo"]
        u = ln(x) @ p["w1"]
        u = u * 0.5 * (1 + xp.tanh(np.sqrt(2 / np.pi) * (u + 0.044715 * u ** 3))) if xp is np \
            else shmap.nn.gelu(u)
        return x + u @ p["w2"]

    with shmap.use_mesh(c.make_mesh((2, 2), ("X", "Y"))):
        params = {k: shmap.device_put(v, P()) for k, v in pn.items()}
        tok = shmap.device_put(tok_np, P("X"))
        labels = shmap.device_put(np.roll(tok_np, -1, 1), P("X"))
        out = shmap.jit(lambda p, t: model(p, t, jnp))(params, tok)
        assert shmap.typeof(out) == "f32[4@X,8,16]"
        want = model(pn, tok_np, np)
        assert np.allclose(np.asarray(out), want, atol=1e-5)

        @shmap.jit
        def loss(p, tok, labels):
            logits = model(p, tok, jnp) @ p["emb"].T
            lp = shmap.nn.log_softmax(logits)
            return -jnp.mean(jnp.take_along_axis(lp, labels[..., None], axis=-1))

        lg = want @ pn["emb"].T
        lg = lg - lg.max(-1, keepdims=True)
        lp = lg - np.log(np.exp(lg).sum(-1, keepdims=True))
        want_loss = -np.take_along_axis(lp, np.roll(tok_np, -1, 1)[..., None], -1).mean()
        assert np.isclose(float(loss(params, tok, labels)), want_loss, rtol=1e-5)


def test_auto_mesh_from_python(c):
    """An Array keeps the mesh it was made on, axis types included, so a jit
    of Arrays on a mesh of Auto axes runs as JAX's automatic mode (before:
    their rebuilt mesh was Explicit, and the MLP below failed with the
    explicit-mode sentence about sharded contracting dimensions). The
    service keeps the types too: another handle (Client.get, another
    process) sees them, on the arrays put and on a jit's results."""
    mesh = shmap.make_mesh((2, 2), ("X", "Y"), axis_types=(shmap.Auto, shmap.Auto))
    rng = np.random.default_rng(0)
    xa, w1a, w2a = (rng.standard_normal(s).astype(np.float32)
                    for s in ((8, 16), (16, 32), (32, 16)))
    x = c.device_put(xa, NamedSharding(mesh, P("X", None)))
    w1 = c.device_put(w1a, NamedSharding(mesh, P(None, "Y")))
    w2 = c.device_put(w2a, NamedSharding(mesh, P("Y", None)))
    assert x.sharding.mesh.axis_types == ("Auto", "Auto")

    @shmap.jit(out_shardings=P("X", None))
    def mlp(x, w1, w2):
        h = shmap.nn.relu(jnp.dot(x, w1))
        h = shmap.with_sharding_constraint(h, P("X", "Y"))
        return jnp.dot(h, w2)

    out = mlp(x, w1, w2)
    assert np.allclose(np.asarray(out), np.maximum(xa @ w1a, 0) @ w2a, atol=1e-4)
    assert out.sharding.mesh.axis_types == ("Auto", "Auto")
    assert x.reshard(NamedSharding(mesh, P())).sharding.mesh.axis_types == ("Auto", "Auto")
    # what the service keeps, through handles made from its answers alone
    for a in (x, out):
        seen = c.get(a.id).sharding.mesh
        assert seen.axis_types == ("Auto", "Auto") and seen == mesh, seen
        assert repr(seen) == "Mesh('X': 2, 'Y': 2, axis_types=(Auto, Auto))"
    @shmap.shard_map(mesh=mesh, in_specs=P("X"), out_specs=P("X"))
    def double(b):
        return b * 2
    assert c.get(double(x).id).sharding.mesh.axis_types == ("Auto", "Auto")
    # the same devices as Explicit axes: another mesh, as JAX's meshes compare
    explicit = shmap.Mesh(mesh.devices, ("X", "Y"), axis_types=(shmap.Explicit,) * 2)
    e = c.device_put(xa, NamedSharding(explicit, P("X", None)))
    assert c.get(e.id).sharding.mesh == explicit != mesh
    assert e._info["mesh_id"] != x._info["mesh_id"]


def test_jit_reshard_and_out_shardings(c):
    mesh = c.make_mesh((2, 4), ("X", "Y"))
    x = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)
    a = c.device_put(x, NamedSharding(mesh, P("X", None)))

    @shmap.jit(out_shardings=P(None, "Y"))
    def f(a):
        b = shmap.reshard(a, P(None, "X"))
        return b * 2

    r = f(a)
    assert shmap.typeof(r) == "f32[8,16@Y]"
    assert np.array_equal(np.asarray(r), x * 2)


def test_auto_axes_from_python(c):
    """jax.sharding.auto_axes: f computed with every axis Auto, its results
    resharded to out_sharding; in a jit body a helper of the program called
    by the text form's auto_axes (it was in the text form only), at once
    outside one, and differentiated by grad (its backward a second helper)."""
    from shmap.sharding import NamedSharding as NS, PartitionSpec as PS, auto_axes
    mesh = c.make_mesh((2, 2), ("X", "Y"))
    rng = np.random.default_rng(3)
    xa, ya = (rng.standard_normal((4, 4)).astype(np.float32) for _ in range(2))
    x = c.device_put(xa, NS(mesh, PS("X", None)))
    y = c.device_put(ya, NS(mesh, PS(None, "X")))
    # SEMANTICS' example: f32[4@X,4] + f32[4,4@X] names X twice; under auto_axes it is computed
    with pytest.raises(shmap.ProgramError, match="duplicate entries for X"):
        shmap.jit(lambda a, b: a + b)(x, y)
    f = shmap.jit(lambda a, b: auto_axes(jnp.add, out_sharding=PS("X", None))(a, b))
    r = f(x, y)
    assert shmap.typeof(r) == "f32[4@X,4]" and np.allclose(np.asarray(r), xa + ya)
    text = f.lower(x, y).as_text()
    assert "def add_fn_auto(a0, a1):" in text and \
        "auto_axes(add_fn_auto, out_sharding=P('X', None))(a, b)" in text, text

    # several results: a spec each, or one for all; the decorator form; a closure over an Array
    @auto_axes(out_sharding=(PS(None, "Y"), PS("Y")))
    def two(a, b):
        return a @ b + x, jnp.tanh(a) * b.sum()
    s, t = shmap.jit(two)(x, y)
    assert (shmap.typeof(s), shmap.typeof(t)) == ("f32[4,4@Y]", "f32[4@Y,4]")
    assert np.allclose(np.asarray(s), xa @ ya + xa, atol=1e-5)
    assert np.allclose(np.asarray(t), np.tanh(xa) * ya.sum(), atol=1e-5)
    both = auto_axes(lambda a, b: {"p": a * b, "q": a - b}, out_sharding=PS("Y"))(x, y)  # at once
    assert shmap.typeof(both["p"]) == shmap.typeof(both["q"]) == "f32[4@Y,4]"
    assert np.allclose(np.asarray(both["q"]), xa - ya)

    # grad through it: the cotangents as numpy's, laid out as the arguments
    def loss(a, b):
        h = auto_axes(lambda u, v: jnp.sin(u) * v + u @ v, out_sharding=PS("X", None))(a, b)
        return (h * h).sum()
    ga, gb = shmap.jit(shmap.grad(loss, argnums=(0, 1)))(x, y)
    h = np.sin(xa) * ya + xa @ ya
    want_a = 2 * h * np.cos(xa) * ya + (2 * h) @ ya.T
    want_b = 2 * h * np.sin(xa) + xa.T @ (2 * h)
    assert shmap.typeof(ga) == "f32[4@X,4]" and shmap.typeof(gb) == "f32[4,4@X]"
    assert np.allclose(np.asarray(ga), want_a, atol=1e-3)
    assert np.allclose(np.asarray(gb), want_b, atol=1e-3)

    # vmap of it: auto_axes of the vmapped function, the batch first (None in its specs)
    zs = rng.standard_normal((3, 4, 4)).astype(np.float32)
    z = c.device_put(zs, NS(mesh, PS(None, "X", None)))
    h = auto_axes(lambda u, v: jnp.sin(u) + v * 2, out_sharding=PS("X", None))
    r = shmap.jit(shmap.vmap(h, in_axes=(0, None)))(z, y)
    assert shmap.typeof(r) == "f32[3,4@X,4]"
    assert np.allclose(np.asarray(r), np.sin(zs) + 2 * ya, atol=1e-6)
    gy = shmap.jit(shmap.grad(lambda a, b: shmap.vmap(h, in_axes=(0, None))(a, b).sum(),
                              argnums=1))(z, y)
    assert np.allclose(np.asarray(gy), np.full((4, 4), 6.0))

    # JAX's refusals
    with pytest.raises(TypeError, match="Missing required keyword argument: 'out_sharding'"):
        auto_axes(jnp.add)(x, y)
    with pytest.raises(shmap.InvalidArgument, match="'Z' is not an axis of the mesh"):
        shmap.jit(lambda a: auto_axes(jnp.sin, axes="Z", out_sharding=PS())(a))(x)
    # axes=: only those axes Auto, the Explicit rules on the others (X Auto: Y on dimension 1
    # wins over unsharded, as JAX's once X is dropped from the arguments' specs)
    u = c.device_put(xa, NS(mesh, PS("X", "Y")))
    with pytest.raises(shmap.ProgramError, match="incompatible shardings"):
        shmap.jit(lambda a, b: a + b)(u, y)

    inner = []

    def add_seen(p, q):
        t = p + q
        inner.append(shmap.typeof(t))
        return t
    part = shmap.jit(lambda a, b: auto_axes(add_seen, axes="X", out_sharding=PS("Y", "X"))(a, b))
    r = part(u, y)
    assert inner == ["f32[4,4@Y]"], inner  # X is Auto: not in the type
    assert shmap.typeof(r) == "f32[4@Y,4@X]" and np.allclose(np.asarray(r), xa + ya)
    assert "axes=('X',))(a, b)" in part.lower(u, y).as_text()
    g = shmap.jit(shmap.grad(lambda a, b: (auto_axes(lambda p, q: p * q, axes=("X",),
                                                     out_sharding=PS("X"))(a, b) ** 2).sum()))
    assert np.allclose(np.asarray(g(u, y)), 2 * xa * ya * ya, atol=1e-4)
    sm = shmap.shard_map(lambda a: auto_axes(jnp.sin, out_sharding=PS())(a), mesh=mesh,
                         in_specs=PS("X"), out_specs=PS("X"))
    with pytest.raises(NotImplementedError, match="Going from `Manual` AxisType"):
        sm(x)  # JAX's refusal: a shard_map body's axes are Manual
    seen = []  # the traced function's mesh
    shmap.jit(lambda a: seen.append(shmap.sharding.get_abstract_mesh()) or a * 1)(x)
    assert tuple(seen[0].axis_names) == ("X", "Y") and tuple(seen[0].axis_sizes) == (2, 2)


def test_jax_idioms_in_jit(c):
    """What JAX code does with shardings inside jit: device_put is a
    reshard; typeof(x) has the aval's shape, dtype and sharding (it was a
    bare string); a tracer's .sharding raises JAX's AttributeError; a static
    .at[].set into a sharded array lays the update out as the array (it was
    refused), or gives JAX's scatter sentence and takes out_sharding=;
    with_sharding_constraint's two sentences are JAX's."""
    mesh = c.make_mesh((2, 2), ("X", "Y"))
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    x = c.device_put(a, NamedSharding(mesh, P("X", None)))
    r = shmap.jit(lambda v: shmap.device_put(v, NamedSharding(mesh, P(None, "X"))))(x)
    assert shmap.typeof(r) == "f32[4,4@X]" and np.array_equal(np.asarray(r), a)
    seen = {}

    def look(v):
        t = shmap.typeof(v)
        seen.update(shape=t.shape, dtype=t.dtype, spec=t.sharding.spec, mesh=t.sharding.mesh)
        with pytest.raises(AttributeError, match="The 'sharding' attribute is not available "
                           "on traced array with shape float32\\[4,4\\]"):
            v.sharding
        return v * 2
    shmap.jit(look)(x)
    assert seen == {"shape": (4, 4), "dtype": np.float32, "spec": P("X", None),
                    "mesh": mesh.abstract_mesh}  # JAX's type: the abstract mesh
    t = shmap.typeof(x)
    assert t == "f32[4@X,4]" and t.shape == (4, 4) and \
        t.sharding == NamedSharding(x.sharding.mesh.abstract_mesh, x.sharding.spec)
    sm = shmap.shard_map(lambda b: (seen.update(vma=shmap.typeof(b).vma), b)[1], mesh=mesh,
                         in_specs=P("X"), out_specs=P("X"))
    sm(x)
    assert seen["vma"] == frozenset({"X"})
    # .at[] with static indices into a sharded array
    r = shmap.jit(lambda v: v.at[:, 1].set(-1.0))(x)
    want = a.copy()
    want[:, 1] = -1
    assert shmap.typeof(r) == "f32[4@X,4]" and np.array_equal(np.asarray(r), want)
    with pytest.raises(shmap.ProgramError, match=r"test_shmap.py:\d+: Use `.at\[...\]"
                       r".set/add/mul/...\(out_sharding=\)` .*Got operand=f32\[4@X,4\], "
                       r"indices=i32\[1\], updates=f32\[4\]"):
        shmap.jit(lambda v: v.at[0].set(1.0))(x)
    with pytest.raises(shmap.ProgramError, match=r"Use `.at\[...\].set/add/mul/...\("):
        shmap.jit(lambda v: v.at[1:3].multiply(2.0))(x)
    r = shmap.jit(lambda v: v.at[0].add(5.0, out_sharding=P("X", None)))(x)
    want = a.copy()
    want[0] += 5
    assert shmap.typeof(r) == "f32[4@X,4]" and np.array_equal(np.asarray(r), want)
    with pytest.raises(shmap.ProgramError, match="acts as an assert when all axes of mesh are "
                       "of type `Explicit`"):
        shmap.jit(lambda v: shmap.with_sharding_constraint(v, P(None, "Y")))(x)


def test_jit_unreduced_partial_sums(c):
    """dot_general with out_sharding=P(unreduced=...) keeps the partial sums
    (no collective), add keeps them, reshard sums them; arrays are never
    unreduced."""
    mesh = c.make_mesh((2, 2), ("X", "Y"))
    x_np = np.arange(8, dtype=np.float32).reshape(2, 4)
    y_np = np.arange(24, dtype=np.float32).reshape(4, 6)
    x = c.device_put(x_np, NamedSharding(mesh, P(None, "X")))
    y = c.device_put(y_np, NamedSharding(mesh, P("X", None)))
    seen = []

    @shmap.jit
    def g(x, y):
        z = shmap.numpy.einsum("ab,bc->ac", x, y, out_sharding=P(unreduced={"X"}))
        seen.append(shmap.typeof(z))
        return shmap.reshard(z + z, P(None, "Y"))

    r = g(x, y)
    assert seen == ["f32[2,6]{U:X}"]
    assert shmap.typeof(r) == "f32[2,6@Y]"
    assert np.array_equal(np.asarray(r), 2 * (x_np @ y_np))
    assert g.lower(x, y).as_text().count("psum(") == 1
    assert repr(P("x", None, unreduced={"y"})) == \
        "P('x', None, unreduced={'y'}, unreduced_kind=sum)"
    assert P("x", unreduced={"y"}) != P("x")
    with pytest.raises(shmap.Unimplemented, match="only a program's results hold partial sums"):
        c.device_put(x_np, NamedSharding(mesh, P(None, None, unreduced={"X"})))

    # an unreduced result: each device holds its partial sum
    @shmap.jit
    def returns_partial_sums(x, y):
        return shmap.numpy.einsum("ab,bc->ac", x, y, out_sharding=P(unreduced={"X"}))

    u = returns_partial_sums(x, y)
    assert shmap.typeof(u) == "f32[2,6]{U:X}"
    with pytest.raises(shmap.FailedPrecondition, match="is unreduced"):
        np.asarray(u)
    parts = {s.device: s.data for s in u.addressable_shards}
    x_col = {0: slice(0, 2), 1: slice(0, 2), 2: slice(2, 4), 3: slice(2, 4)}  # X is mesh axis 0
    for dev, part in parts.items():
        assert np.array_equal(part, x_np[:, x_col[dev]] @ y_np[x_col[dev], :])
    assert np.array_equal(parts[0] + parts[2], x_np @ y_np)
    r2 = u.reshard(NamedSharding(mesh, P(None, "Y")))
    assert np.array_equal(np.asarray(r2), x_np @ y_np)


def test_jit_calls_shard_map_as_jax_test_matmul_unreduced(c):
    """jax.jit over a function calling a shard_map function: the shard_map
    becomes a function of the jit program, and JAX's test_matmul_unreduced
    runs as written (its shards, then reshard sums them)."""
    mesh = c.make_mesh((2, 2), ("x", "y"))
    a_np = np.arange(8, dtype=np.float32).reshape(2, 4)
    b_np = np.arange(8, dtype=np.float32).reshape(4, 2)
    a = c.device_put(a_np, NamedSharding(mesh, P("x", "y")))
    b = c.device_put(b_np, NamedSharding(mesh, P("y", None)))
    seen = []

    @shmap.shard_map(mesh=mesh, in_specs=(P("x", "y"), P("y", None)),
                     out_specs=P("x", None, unreduced={"y"}))
    def f(a, b):
        c_ = shmap.numpy.einsum("ab,bc->ac", a, b)
        seen.append(shmap.typeof(c_))
        c_ = shmap.lax.pcast(c_, "y", to="unreduced")
        seen.append(shmap.typeof(c_))
        return c_

    @shmap.jit
    def g(a, b):
        return f(a, b)

    out = g(a, b)
    assert seen == ["f32[1,2]{V:x,y}", "f32[1,2]{V:x, U:y}"]
    assert shmap.typeof(out) == "f32[2@x,2]{U:y}"
    expected_shards = [[[2., 3.]], [[26., 31.]], [[10., 19.]], [[66., 79.]]]
    for s, es in zip(sorted(out.addressable_shards, key=lambda s: s.device), expected_shards):
        assert np.array_equal(s.data, np.array(es, dtype=np.float32))
    r = out.reshard(NamedSharding(mesh, P("x", None)))
    assert np.array_equal(np.asarray(r), a_np @ b_np)

    @shmap.jit
    def h(a, b):
        return shmap.reshard(f(a, b), P("x", None)) * 2

    assert np.array_equal(np.asarray(h(a, b)), 2 * (a_np @ b_np))
    text = h.lower(a, b).as_text()
    assert "shard_map f(" in text and text.count("psum(") == 1


def test_errors_carry_codes(c):
    with pytest.raises(shmap.NotFound) as e:
        c.get("no-such-array")
    assert e.value.code == "NOT_FOUND" and "no-such-array" in e.value.message
    mesh = c.make_mesh((8,), ("i",))
    with pytest.raises(shmap.InvalidArgument):
        c.device_put(np.ones(6, np.float32), NamedSharding(mesh, P("i")))
    with pytest.raises(shmap.errors.UnexpectedTracerError,
                       match="Encountered an unexpected tracer"):
        shmap.lax.psum(shmap.Tracer("x", "f32[1]", "f32", (1,)), "i")


def test_op_table_is_the_c_one():
    import _shmap
    names = {row[0] for row in _shmap.op_table()}
    assert {"psum", "all_to_all", "einsum", "reshard"} <= names
    assert not {"while_carry", "while_test"} & names  # written as `while`, not called
    assert all(hasattr(shmap.lax, n) for n in ("psum", "ppermute", "axis_index"))
    assert all(hasattr(shmap.numpy, n) for n in ("dot", "einsum", "reshape", "reshard"))


# ---- TLS ----


# ---- transfers through shared memory ----


def test_shared_arrays(c):
    """Client.empty/zeros: numpy arrays in the client's shared memory,
    zero-filled, uploaded (whole or a contiguous view) and downloaded into
    (to_numpy(shared=True)) bit-exact, their segments freed with them. (In
    secure mode c is a tenant's: the same calls, through the streams.)"""
    prefix = "shmap-c%07x-" % (os.getpid() & 0xfffffff)
    mine = lambda: {f for f in os.listdir("/dev/shm") if f.startswith(prefix)}  # noqa: E731
    before = mine()
    mesh = c.make_mesh((4, 2), ("i", "j"))
    for dt in (np.float32, np.float64, np.int32, np.uint8):
        z = c.zeros((16, 6), dt)
        assert z.dtype == dt and z.shape == (16, 6) and z.flags.writeable
        assert not z.any()
        x = (np.arange(96) * 7 - 40).astype(dt).reshape(16, 6)
        z[...] = x
        a = c.device_put(z, NamedSharding(mesh, P("i", None)))
        y = a.to_numpy(shared=True)
        assert y.dtype == dt and y.tobytes() == x.tobytes()
        assert np.asarray(a).tobytes() == x.tobytes()
        v = c.device_put(z[4:12], NamedSharding(mesh, P(None, "j")))  # a view at an offset
        assert np.asarray(v).tobytes() == x[4:12].tobytes()
    assert len(mine() - before) >= 2
    del z, y, a, v
    gc.collect()
    assert mine() <= before, "shared arrays left their segments behind"


def _metrics_cluster(tmp_path, tag, cluster_log, env=()):
    """A cluster of 2 workers x 4 devices whose workers serve metrics;
    returns (process, target, the workers' metrics ports)."""
    import re
    import time
    env = dict(os.environ, SHMAP_WORKER_METRICS_LISTEN="127.0.0.1:0", **dict(env))
    p, target, log = cluster.start_cluster(str(tmp_path), 2, 4, env=env, tag=tag)
    cluster_log.keep(log)
    deadline = time.time() + 10
    while len(ports := re.findall(r"Prometheus metrics on \S+ \(port (\d+)\)",
                                  open(log).read())) < 2:
        assert time.time() < deadline, "the workers serve no metrics"
        time.sleep(0.05)
    return p, target, ports


def _shm_bytes(ports):
    """shmap_worker_shm_transfer_bytes_total summed over the workers."""
    import re
    import urllib.request
    total = 0
    for port in ports:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        for m in re.finditer(r"^shmap_worker_shm_transfer_bytes_total\{[^}]*\} (\d+)$",
                             text.decode(), re.M):
            total += int(m.group(1))
    return total


def _client_of(target, tenant=False):
    if not cluster.SECURE:
        return shmap.connect(target)
    f = cluster.secure_files()
    if tenant:
        return shmap.connect(target, token=cluster.TENANT_TOKEN, tls_ca=f["ca"])
    return shmap.connect(target, token=cluster.CLUSTER_TOKEN, tls_ca=f["ca"],
                         tls_cert=f["client_cert"], tls_key=f["client_key"])


def _shm_moves(client, ports):
    """Bytes through shared memory for: an upload of a shared array, a
    download into one, a view of it, an upload and a download of a plain
    8 MiB array (the staging segments), and of a plain 1 MiB one (under
    the staging threshold); every result checked bit-exact."""
    mesh = client.make_mesh((8,), ("i",))
    s = NamedSharding(mesh, P("i"))
    x = np.random.default_rng(7).standard_normal((1024, 2048)).astype(np.float32)
    small = x[:128].copy()
    xs = client.empty(x.shape, x.dtype)
    xs[...] = x
    moved, keep = [], []

    def step(fn):
        before = _shm_bytes(ports)
        r = fn()
        moved.append(_shm_bytes(ports) - before)
        keep.append(r)
        return r

    a = step(lambda: client.device_put(xs, s))
    assert step(lambda: a.to_numpy(shared=True)).tobytes() == x.tobytes()
    v = step(lambda: client.device_put(xs[256:768], s))
    assert np.asarray(v).tobytes() == x[256:768].tobytes()
    b = step(lambda: client.device_put(x, s))
    assert step(lambda: b.to_numpy()).tobytes() == x.tobytes()
    t = step(lambda: client.device_put(small, s))
    assert step(lambda: t.to_numpy()).tobytes() == small.tobytes()
    del keep, a, v, b, t, xs
    gc.collect()
    return moved


def test_transfers_through_shared_memory(tmp_path, monkeypatch, cluster_log):
    """Against a cluster whose workers serve metrics: a client on their
    host moves shared arrays (no staging copy) and plain ones of 4 MiB and
    more (through its staging segments) through shared memory, which
    shmap_worker_shm_transfer_bytes_total proves; nothing moves so with
    SHMAP_TRANSPORT=grpc (the client's, or the workers'), or for a
    tenant's client. /dev/shm holds none of the client's segments after
    close."""
    prefix = "shmap-c%07x-" % (os.getpid() & 0xfffffff)
    mine = lambda: {f for f in os.listdir("/dev/shm") if f.startswith(prefix)}  # noqa: E731
    before = mine()
    nbytes = 1024 * 2048 * 4
    p, target, ports = _metrics_cluster(tmp_path, "shm", cluster_log)
    try:
        client = _client_of(target)
        moved = _shm_moves(client, ports)
        assert all(m >= nbytes for m in moved[:2]), moved
        assert moved[2] >= nbytes // 2, moved
        assert all(m >= nbytes for m in moved[3:5]), moved
        assert moved[5:] == [0, 0], moved
        client.close()
        gc.collect()
        assert mine() <= before, "the client left segments in /dev/shm"
        monkeypatch.setenv("SHMAP_TRANSPORT", "grpc")
        client = _client_of(target)
        monkeypatch.delenv("SHMAP_TRANSPORT")
        assert _shm_moves(client, ports) == [0] * 7
        client.close()
        if cluster.SECURE:
            client = _client_of(target, tenant=True)
            assert _shm_moves(client, ports) == [0] * 7
            client.close()
    finally:
        cluster.stop_cluster(p)
    p, target, ports = _metrics_cluster(tmp_path, "grpc", cluster_log,
                                     {"SHMAP_TRANSPORT": "grpc"})
    try:
        client = _client_of(target)
        assert _shm_moves(client, ports) == [0] * 7
        client.close()
    finally:
        cluster.stop_cluster(p)
    gc.collect()
    assert mine() <= before, "the client left segments in /dev/shm"


def test_killed_client_segments_swept(tmp_path, cluster_log):
    """A client killed with SIGKILL leaves its staging segment in /dev/shm
    (nothing of it runs to unlink it); the workers' periodic sweep of the
    host (--shm-sweep-s, here 1 s) removes it once it is 10 s old, since no
    process holds its lock any more: no worker has to start, no job to
    fail."""
    import signal
    import subprocess
    import time
    env = dict(os.environ, SHMAP_SHM_SWEEP_S="1")
    p, target, log = cluster.start_cluster(str(tmp_path), 1, 4, env=env, tag="killed")
    cluster_log.keep(log)
    try:
        code = ("import os, signal, sys, numpy as np, shmap\n"
                "from shmap import P, NamedSharding\n"
                "c = shmap.connect(sys.argv[1])\n"
                "s = NamedSharding(c.make_mesh((4,), ('i',)), P('i'))\n"
                "a = c.device_put(np.ones((1024, 2048), np.float32), s)\n"
                "print(os.getpid(), flush=True)\n"
                "os.kill(os.getpid(), signal.SIGKILL)\n")
        child = subprocess.run([sys.executable, "-c", code, target], capture_output=True,
                               text=True, timeout=60, env=cluster.client_env(cluster=True))
        assert child.returncode == -signal.SIGKILL, child.stderr
        prefix = "shmap-c%07x-" % (int(child.stdout) & 0xfffffff)
        left = [f for f in os.listdir("/dev/shm") if f.startswith(prefix)]
        assert left, "the killed client left no staging segment (was it staged?)"
        # the age the sweep reads: the segments' ctime (the client may have taken a
        # while, on a loaded machine, between making them and being gone)
        born = min(os.stat("/dev/shm/" + f).st_ctime for f in left)
        deadline = time.time() + 10 + 15  # SM_SHM_SWEEP_AGE_S, then a sweep every second
        while any(os.path.exists("/dev/shm/" + f) for f in left):
            assert time.time() < deadline, f"{left} are still in /dev/shm"
            time.sleep(0.1)
        # not before they were 10 s old: a segment in the making is never swept
        assert time.time() - born > 9, "swept before SM_SHM_SWEEP_AGE_S"
        end = time.time() + 10  # the sweep logs after it unlinks: wait for the line
        while "left by processes that ended" not in open(log).read():
            assert time.time() < end, "the sweep logged nothing"
            time.sleep(0.1)
    finally:
        cluster.stop_cluster(p)


def test_local_cluster_goes_with_its_process(tmp_path):
    """A Python process killed with SIGKILL inside `with local_cluster()`
    takes its cluster with it (the coordinator runs with --exit-with-parent
    and stops its workers): before, the coordinator and its workers kept
    running with nobody to stop them."""
    import signal
    import subprocess
    import time
    code = ("import os, signal, shmap\n"
            "with shmap.local_cluster(workers=1, devices_per_worker=2) as c:\n"
            "    cl = [o for o in __import__('gc').get_objects()\n"
            "          if isinstance(o, shmap._core.local_cluster)][0]\n"
            "    print(cl.proc.pid, flush=True)\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n")
    env = {k: v for k, v in cluster.client_env(cluster=True).items()
           if not k.startswith("SHMAP_TLS") and k != "SHMAP_TOKEN"}  # its own plain cluster
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=60, env=env)
    assert child.returncode == -signal.SIGKILL, child.stderr
    pid = int(child.stdout)
    deadline = time.time() + 20
    try:
        while os.path.exists(f"/proc/{pid}") and \
                "zombie" not in open(f"/proc/{pid}/status").read().lower():
            assert time.time() < deadline, f"the coordinator {pid} outlived its process"
            time.sleep(0.1)
    finally:
        if os.path.exists(f"/proc/{pid}"):  # this test's failure leaves no cluster behind
            os.kill(pid, signal.SIGTERM)


def test_local_cluster_that_cannot_start(tmp_path, monkeypatch):
    """A coordinator that exits at once: Unavailable with its log's last
    words (before: a FileNotFoundError, the log read after its directory
    was removed)."""
    fake = tmp_path / "coordinator"
    fake.write_text("#!/bin/sh\necho 'cannot bind: no such luck' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("SHMAP_COORDINATOR_BIN", str(fake))
    with pytest.raises(shmap.Unavailable, match="no such luck"):
        with shmap.local_cluster(workers=1, devices_per_worker=1, timeout=10):
            pass


def test_connect_tls(tmp_path):
    """shmap.connect with tls_ca against a coordinator serving TLS (the
    certificates made by scripts/tls_certs.sh); without the CA, or with
    another CA, it is refused."""
    import shutil
    import signal
    import subprocess
    import time
    if not shutil.which("openssl"):
        pytest.skip("openssl is not installed")
    script = os.path.join(ROOT, "scripts", "tls_certs.sh")
    for d in ("ours", "theirs"):
        subprocess.run(["bash", script, str(tmp_path / d)], check=True, capture_output=True)
    ca, cert, key = (str(tmp_path / "ours" / f) for f in ("ca.pem", "cluster.pem", "cluster.key"))
    port_file = tmp_path / "port"
    proc = subprocess.Popen(
        [shmap._core._find_coordinator(), "--listen", "127.0.0.1:0", "--port-file",
         str(port_file), "--local-workers", "2", "--devices-per-worker", "2",
         "--tls-cert", cert, "--tls-key", key, "--tls-ca", ca],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 30
        while not (port_file.exists() and port_file.read_text().endswith("\n")):
            assert time.time() < deadline and proc.poll() is None, "the coordinator did not start"
            time.sleep(0.05)
        target = "127.0.0.1:" + port_file.read_text().strip()
        client = shmap.connect(target, tls_ca=ca)
        while len(client.devices()) < 4:
            assert time.time() < deadline, "the workers did not register over mutual TLS"
            time.sleep(0.05)
        x = np.arange(32, dtype=np.float32).reshape(8, 4)
        a = client.device_put(x, NamedSharding(client.make_mesh((4,), ("i",)), P("i")))
        assert np.asarray(a).tobytes() == x.tobytes()
        del a
        client.close()
        with pytest.raises(shmap.Unavailable, match="tls-ca"):
            shmap.connect(target, tls_ca="")  # plaintext
        with pytest.raises(shmap.Unavailable):
            shmap.connect(target, tls_ca=str(tmp_path / "theirs" / "ca.pem"))
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


MORE_NUMPY = [
    ("arcsin", lambda m, x, y: m.arcsin(x / 5)), ("arccos", lambda m, x, y: m.arccos(y / 5)),
    ("arctan", lambda m, x, y: m.arctan(x)), ("sinh", lambda m, x, y: m.sinh(x / 2)),
    ("arctan2", lambda m, x, y: m.arctan2(y, x - 0.25) + m.arctan2(x.astype(np.int32), 3)),
    ("cosh", lambda m, x, y: m.cosh(y / 2)), ("arcsinh", lambda m, x, y: m.arcsinh(x)),
    ("arccosh", lambda m, x, y: m.arccosh(m.abs(x) + 1)),
    ("arctanh", lambda m, x, y: m.arctanh(y / 5)), ("cbrt", lambda m, x, y: m.cbrt(x)),
    ("absolute", lambda m, x, y: m.absolute(x) + m.fabs(y) + m.positive(x)),
    ("amax_amin", lambda m, x, y: m.amax(x, axis=1) - m.amin(y, axis=1)),
    ("around_rint_trunc", lambda m, x, y: m.around(x * 1.3) + m.rint(y / 3) + m.trunc(x / 3)),
    ("true_divide_remainder", lambda m, x, y: m.true_divide(x, y + 9) + m.remainder(x, 3)),
    ("degrees", lambda m, x, y: m.deg2rad(x) + m.rad2deg(y) + m.radians(x) + m.degrees(y)),
    ("hypot", lambda m, x, y: m.hypot(x, y) + m.hypot(x * 1e30, y * 1e30) / 1e30),
    ("logaddexp", lambda m, x, y: m.logaddexp(x * 40, y * 40) + m.logaddexp2(x, y)),
    ("sinc_heaviside", lambda m, x, y: m.sinc(x / 2) + m.heaviside(x, 0.5)),
    ("fmax_fmin", lambda m, x, y: m.fmax(m.log(x), y) + m.fmin(x, m.log(y))),
    ("nan_to_num", lambda m, x, y: m.nan_to_num(m.log(x) / y, nan=-1.0)),
    ("ptp_count", lambda m, x, y: m.ptp(x, axis=0) + m.count_nonzero(y, axis=0)),
    ("average", lambda m, x, y: m.average(x, axis=1, weights=m.abs(y) + 1) + m.average(y, 1)),
    ("average_1d_weights", lambda m, x, y: m.average(x, axis=1, weights=m.arange(16.0) + 1)),
    ("diff", lambda m, x, y: m.diff(x, axis=1) + m.diff(y, n=2, axis=0).sum()),
    ("flips", lambda m, x, y: m.fliplr(x) + m.flipud(y)),
    ("repeat", lambda m, x, y: m.repeat(x, 2, axis=0)[:, :4] + m.repeat(y[0], 3)[:4]),
    ("diagonals", lambda m, x, y: m.diagonal(x, 3)[:6] * m.trace(y) + m.diag(x[:, :8], -2)),
    ("diag_matrix", lambda m, x, y: m.diag(x[0, :5], 2) + m.diag(y[1, :7], -1)[:7, :7]),
    ("vdot", lambda m, x, y: m.vdot(x, y)),
    ("broadcast_arrays", lambda m, x, y: m.broadcast_arrays(x[:, :1], y[:1])[0] * 2),
    ("meshgrid", lambda m, x, y: m.meshgrid(x[0, :3], y[0, :5])[0] + m.meshgrid(
        x[0, :3], y[0, :5], indexing="ij")[1].T),
    ("stacks", lambda m, x, y: m.column_stack([x[0], y[0]]) + m.dstack([x[:2], y[:2]])[0]),
    ("splits", lambda m, x, y: m.hsplit(x, 4)[1][:4] + m.vsplit(y, 2)[0][:, :4]),
    ("nanvar", lambda m, x, y: m.nanvar(m.where(x > 3, m.nan, y), axis=1) +
     m.nanstd(m.where(y > 3, m.nan, x), axis=1, ddof=1)),
    ("atleast", lambda m, x, y: m.atleast_3d(x).sum(axis=2) + m.atleast_2d(y[0])),
    ("tri", lambda m, x, y: x[:, :5] * m.tri(8, 5, 1)),
]


@pytest.mark.parametrize("name,f", MORE_NUMPY, ids=[u[0] for u in MORE_NUMPY])
def test_more_numpy_functions(c, name, f):
    """numpy's other names and functions, made of the op table's ops (and
    nine more elementwise rows: arcsin ... cbrt), in a jit, against numpy
    (replicated inputs: the rows index single rows and columns freely)."""
    mesh = c.make_mesh((4, 2), ("i", "j"))
    rng = np.random.default_rng(12)
    xa = rng.integers(-4, 5, (8, 16)).astype(np.float32) + 0.25
    ya = rng.integers(-4, 5, (8, 16)).astype(np.float32)
    x = c.device_put(xa, NamedSharding(mesh, P()))
    y = c.device_put(ya, NamedSharding(mesh, P()))
    with np.errstate(all="ignore"):
        want = f(np, xa, ya)
    got = np.asarray(shmap.jit(lambda x, y: f(jnp, x, y))(x, y))
    assert got.shape == np.shape(want)
    assert np.allclose(got, want, rtol=2e-5, atol=1e-5, equal_nan=True), (got, want)


def test_jit_in_shardings(c):
    """jax.jit's in_shardings: numpy arguments are placed as they say (one
    for all, one per argument, a pytree of them for a params dict); an
    Array with another sharding is refused with JAX's sentence."""
    mesh = c.make_mesh((4, 2), ("i", "j"))
    xa = np.arange(32, dtype=np.float32).reshape(8, 4)
    r = shmap.jit(lambda x, y: (x * 2, y + 1),
                  in_shardings=(NamedSharding(mesh, P("i", "j")), NamedSharding(mesh, P())))(
        xa, xa)
    assert r[0].type == "f32[8@i,4@j]" and r[1].type == "f32[8,4]"
    assert np.array_equal(np.asarray(r[0]), xa * 2)
    both = shmap.jit(lambda p: p["a"] + p["b"],
                     in_shardings=NamedSharding(mesh, P("i")))({"a": xa, "b": xa})
    assert both.type == "f32[8@i,4]" and np.array_equal(np.asarray(both), 2 * xa)
    ok = c.device_put(xa, NamedSharding(mesh, P("i", None)))
    g = shmap.jit(lambda x: x + 1, in_shardings=NamedSharding(mesh, P("i")))
    assert g(ok).type == "f32[8@i,4]"  # P('i') and P('i', None) are one sharding
    bad = c.device_put(xa, NamedSharding(mesh, P(None, "j")))
    with pytest.raises(shmap.InvalidArgument,
                       match=r"Sharding passed to pjit does not match the sharding on the "
                             r"respective arg\. Got pjit sharding: NamedSharding\(.*spec=P\('i',\)"
                             r"\),\narg sharding: NamedSharding\(.*spec=P\(None, 'j'\)\) for arg "
                             r"shape: float32\[8,4\]"):
        g(bad)


def test_segment_sum_and_scatter_add(c):
    """jax.ops.segment_sum (a row of the op table) over rows sharded on the
    mesh (each device sums its rows, a psum completes), at once and in a
    jit, and x.at[idx].add(v) with an index array (numpy's np.add.at:
    repeated indices add up, negative ones count from the end)."""
    mesh = c.make_mesh((4, 2), ("i", "j"))
    rng = np.random.default_rng(13)
    data = rng.standard_normal((8, 3, 4)).astype(np.float32)
    ids = rng.integers(-1, 6, (8, 3)).astype(np.int32)  # -1 and 5 dropped
    d = c.device_put(data, NamedSharding(mesh, P("i", None, "j")))
    s = c.device_put(ids, NamedSharding(mesh, P("i")))
    want = np.zeros((5, 4), np.float32)
    for (r, q), k in np.ndenumerate(ids):
        if 0 <= k < 5:
            want[k] += data[r, q]
    # as JAX's: a scatter-add into replicated zeros, which its sharding rule
    # lays out only with out_sharding= when the data or the ids are sharded
    refusal = (r"^Use `\.at\[\.\.\.\]\.set/add/mul/\.\.\.\(out_sharding=\)` to provide output "
               r"PartitionSpec for the scatter update as out sharding could not be resolved "
               r"unambiguously \(or would require collectives on inputs\)\. Got "
               r"operand=f32\[5,4\], indices=i32\[8@i,3,1\], updates=f32\[8@i,3,4@j\]$")
    with pytest.raises(shmap.ProgramError, match=refusal):
        shmap.ops.segment_sum(d, s, num_segments=5)
    with pytest.raises(shmap.ProgramError, match=refusal):
        shmap.jit(lambda d, s: shmap.ops.segment_sum(d, s, 5))(d, s)
    got = shmap.ops.segment_sum(d, s, num_segments=5, out_sharding=P(None, "j"))
    assert got.type == "f32[5,4@j]"
    assert np.allclose(np.asarray(got), want, atol=1e-5)
    f = shmap.jit(lambda d, s: shmap.ops.segment_sum(
        d, s, 5, out_sharding=NamedSharding(mesh, P())))
    assert "psum(" in f.lower(d, s).as_text().split("# lowered:")[1]
    assert np.allclose(np.asarray(f(d, s)), want, atol=1e-5)
    # unsharded, or sharded over Auto axes only (not in the type): no out_sharding
    assert np.allclose(np.asarray(shmap.ops.segment_sum(
        c.device_put(data, NamedSharding(mesh, P())), c.device_put(ids, NamedSharding(mesh, P())),
        5)), want, atol=1e-5)
    am = c.make_mesh((4, 2), ("i", "j"), axis_types=(shmap.Auto, shmap.Auto))
    da = c.device_put(data, NamedSharding(am, P("i", None, "j")))
    got = shmap.ops.segment_sum(da, c.device_put(ids, NamedSharding(am, P("i"))), 5)
    assert (da.type, got.type) == ("f32[8,3,4]", "f32[5,4]")
    assert np.allclose(np.asarray(got), want, atol=1e-5)
    table = np.arange(12, dtype=np.float32).reshape(6, 2)
    t = c.device_put(table, NamedSharding(mesh, P()))
    idx = np.array([0, 5, 5, -1, 2], np.int32)
    out = shmap.jit(lambda t: t.at[idx].add(1.5))(t)
    want = table.copy()
    np.add.at(want, idx, 1.5)
    assert np.array_equal(np.asarray(out), want)
    with pytest.raises(shmap.InvalidArgument, match=r"give num_segments"):
        shmap.ops.segment_sum(d, s)
    # x.at[idx].add: its updates laid out as x[idx]; x's first dimension and
    # the indices sharded need out_sharding=
    rows = c.device_put(table, NamedSharding(mesh, P(None, "j")))
    si = c.device_put(np.array([0, 1, 5, 3, 0, 1, 5, 3], np.int32), NamedSharding(mesh, P("i")))
    with pytest.raises(shmap.ProgramError, match=r"\.py:\d+: Use `\.at\[\.\.\.\]\.set/add/mul.* "
                       r"Got operand=f32\[6,2@j\], indices=i32\[8@i,1\], "
                       r"updates=f32\[8@i,2@j\]$"):
        rows.at[si].add(1.0)
    out = rows.at[si].add(1.0, out_sharding=P(None, "j"))
    want = table.copy()
    np.add.at(want, np.asarray(si), 1.0)
    assert out.type == "f32[6,2@j]" and np.array_equal(np.asarray(out), want)
    assert np.array_equal(np.asarray(rows.at[idx].add(1.5)), table + np.bincount(
        idx % 6, minlength=6)[:, None] * np.float32(1.5))


def test_jit_numpy_argument_before_an_array(c):
    """A jit given a numpy argument before its first Array takes the Array's
    mesh for it (it asked for a mesh before: set_mesh or jit(mesh=))."""
    mesh = c.make_mesh((4, 2), ("i", "j"))
    x = c.device_put(np.ones((8, 4), np.float32), NamedSharding(mesh, P("i")))
    got = shmap.jit(lambda s, x: x * s)(np.float32(3), x)
    assert got.type == "f32[8@i,4]" and np.array_equal(np.asarray(got), np.full((8, 4), 3))


def test_lax_max_min_switch_and_whole_slices(c):
    """lax.max / lax.min are elementwise, as JAX's (they were the op table's
    reductions); lax.switch with a static index clamps it into range (it
    called those ops); slicing a traced value over its whole length is the
    value (x[:8] of 8 rows failed to trace)."""
    mesh = c.make_mesh((4, 2), ("i", "j"))
    xa = np.arange(24, dtype=np.float32).reshape(8, 3) - 10
    x = c.device_put(xa, NamedSharding(mesh, P("i")))
    got = shmap.jit(lambda x: (lax.max(x, 0.0), lax.min(x, -x), x[:8], x[:, :3] * 2,
                               x[0:8, 0:3] + x[:8, :], lax.switch(7, [jnp.sin, jnp.cos], x),
                               lax.switch(-2, [jnp.sin, jnp.cos], x)))(x)
    want = (np.maximum(xa, 0), np.minimum(xa, -xa), xa, xa * 2, xa + xa, np.cos(xa), np.sin(xa))
    for g, w in zip(got, want):
        assert g.type == "f32[8@i,3]" and np.allclose(np.asarray(g), w, atol=1e-6)


def test_int_literals_beyond_int32(c):
    """A Python int beyond int32 in a traced expression is a weak int64, so
    masking and adding to int64 values keep every bit (it wrapped to int32
    before: x & 4294967295 was x & -1)."""
    mesh = c.make_mesh((8,), ("i",))
    v = np.array([2 ** 33 + 5, 3, -7, 2 ** 40, 0, 1, 2 ** 31, 2 ** 32 - 1], np.int64)
    x = c.device_put(v, NamedSharding(mesh, P("i")))
    got = shmap.jit(lambda x: ((x + 4294967295) & 4294967295, x * 4294967296, x - 2 ** 35))(x)
    assert [g.type for g in got] == ["i64[8@i]"] * 3
    assert np.array_equal(np.asarray(got[0]), (v + 4294967295) & 4294967295)
    assert np.array_equal(np.asarray(got[1]), v * 4294967296)
    assert np.array_equal(np.asarray(got[2]), v - 2 ** 35)
    # with an int32 array it takes int32, and does not fit: JAX's sentence
    x32 = c.device_put(np.arange(8, dtype=np.int32), NamedSharding(mesh, P("i")))
    with pytest.raises(shmap.ProgramError, match=r"Python int 4294967295 too large to convert "
                       r"to int32$"):
        shmap.jit(lambda x: x & 4294967295)(x32)
    with pytest.raises(OverflowError, match=r"Python int 1099511627776 too large to convert "
                       r"to int32$"):  # JAX's exception class; where's branches too
        shmap.jit(lambda x: jnp.where(x > 2, x, 2 ** 40))(x32)


def test_advanced_indexing_with_several_arrays(c):
    """numpy's advanced indexing with several integer arrays (broadcast
    together; integers beside them are indices too; their dimensions in
    place when adjacent, first when apart), as x[key] (JAX clamps indices
    out of range) and x.at[key].set/add/max (out of range dropped), against
    numpy; the cross-entropy idiom logp[jnp.arange(B), labels] and its
    gradient."""
    mesh = c.make_mesh((4, 2), ("i", "j"))
    X = np.arange(4 * 6 * 5, dtype=np.float32).reshape(4, 6, 5)
    x = c.device_put(X, NamedSharding(mesh, P()))
    lab = np.array([1, 5, 0, 2], np.int32)
    a4 = np.arange(4)
    keys = [(a4, lab), (a4, lab, 1), (a4, slice(None), lab % 5), (slice(None), lab, lab[::-1] % 5),
            (a4[:, None], lab[None, :]), (2, slice(None), lab % 5), (None, a4, lab),
            (Ellipsis, lab[:2], lab[:2] % 5), (a4, -1 - lab % 3)]
    for k in keys:
        want = X[k]
        got = shmap.jit(lambda a: a[k])(x)
        assert got.shape == want.shape and np.array_equal(np.asarray(got), want), k
    got = shmap.jit(lambda a: a[np.array([0, -1]), np.array([[1], [7]])])(x)  # clamped
    assert np.array_equal(np.asarray(got), X[np.array([0, -1]), np.array([[1], [5]])])
    for k in keys[:6] + [(np.array([0, -1, 9]), np.array([1, 7, 2]))]:
        ok = np.ones(np.broadcast_shapes(*[np.shape(e) for e in k
                                           if not isinstance(e, slice)]), bool)
        kk = tuple(np.asarray(e) if not isinstance(e, slice) else e for e in k)
        if len(kk) == 2 and not isinstance(kk[1], slice) and np.ndim(kk[0]) == 1 and \
                np.asarray(kk[0]).max() > 3:  # the one with indices out of range
            ok = (kk[0] >= -4) & (kk[0] < 4) & (kk[1] >= -6) & (kk[1] < 6)
            kk = (kk[0][ok], kk[1][ok])
        for how, ref in (("set", None), ("add", np.add), ("max", np.maximum)):
            want = X.copy()
            if ref is None:
                want[kk] = 7
            else:
                ref.at(want, kk, 7)
            got = shmap.jit(lambda a: getattr(a.at[k], how)(7.0))(x)
            assert np.array_equal(np.asarray(got), want), (k, how)
    k = (a4, slice(None), lab % 5)
    V = np.arange(24, dtype=np.float32).reshape(X[k].shape)
    want = X.copy()
    want[k] = V
    assert np.array_equal(np.asarray(shmap.jit(lambda a: a.at[k].set(V))(x)), want)
    # cross-entropy as JAX code often writes it, and its gradient
    rng = np.random.default_rng(9)
    logits = rng.standard_normal((8, 10)).astype(np.float32)
    labels = rng.integers(0, 10, 8).astype(np.int32)
    la = c.device_put(logits, NamedSharding(mesh, P()))

    def nll(z):
        return -shmap.nn.log_softmax(z)[jnp.arange(8), labels].mean()

    g = shmap.jit(shmap.grad(nll))(la)
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    want = p.copy()
    want[np.arange(8), labels] -= 1
    assert np.allclose(np.asarray(g), want / 8, atol=1e-6)


def test_segment_max_min_prod(c):
    """jax.ops.segment_max / segment_min / segment_prod, as JAX's: scatters
    into the reduction's identity (empty segments keep it: -inf, the
    integer minimum, ...), ids out of range (negative ones too) dropped;
    data sharded needs out_sharding= (JAX's scatter rule)."""
    mesh = c.make_mesh((4, 2), ("i", "j"))
    rng = np.random.default_rng(3)
    data = rng.standard_normal((8, 2, 4)).astype(np.float32)
    ids = np.array([[0, 2], [2, -1], [0, 7], [2, 0], [5, 5], [0, 0], [1, 2], [-3, 2]], np.int32)
    ok = (ids >= 0) & (ids < 5)
    s = c.device_put(ids, NamedSharding(mesh, P()))
    for name, uf, ident in [("segment_max", np.maximum, -np.inf),
                            ("segment_min", np.minimum, np.inf),
                            ("segment_prod", np.multiply, 1)]:
        for dt, x in ((np.float32, data), (np.int32, np.round(data * 3).astype(np.int32))):
            d = c.device_put(x, NamedSharding(mesh, P()))
            got = getattr(shmap.ops, name)(d, s, num_segments=5)
            fill = ident if dt == np.float32 or ident == 1 else \
                (np.iinfo(dt).min if ident < 0 else np.iinfo(dt).max)
            want = np.full((5, 4), fill, dt)
            uf.at(want, ids[ok], x[ok])
            assert got.type == f"{'f32' if dt == np.float32 else 'i32'}[5,4]"
            assert np.array_equal(np.asarray(got), want), (name, dt)
    ds = c.device_put(data, NamedSharding(mesh, P("i")))
    with pytest.raises(shmap.ProgramError, match=r"could not be resolved unambiguously .* Got "
                       r"operand=f32\[5,4\], indices=i32\[8,2,1\], updates=f32\[8@i,2,4\]$"):
        shmap.ops.segment_max(ds, s, 5)
    d2 = c.device_put(data, NamedSharding(mesh, P(("i", "j"))))  # a tuple entry in the types
    with pytest.raises(shmap.ProgramError, match=r"could not be resolved unambiguously .* Got "
                       r"operand=f32\[5,4\], indices=i32\[8,2,1\], "
                       r"updates=f32\[8@\(i,j\),2,4\]$"):
        shmap.ops.segment_sum(d2, s, 5)
    got = shmap.ops.segment_min(ds, s, 5, out_sharding=P(None, "j"))
    want = np.full((5, 4), np.inf, np.float32)
    np.minimum.at(want, ids[ok], data[ok])
    assert got.type == "f32[5,4@j]" and np.array_equal(np.asarray(got), want)


def test_scatters(c):
    """x.at[idx].set/add/multiply/divide/power/min/max with an index array:
    the scatter rows of the op table over x's first dimension, against
    numpy's x[idx] = v (the last of repeated indices wins) and np.add.at,
    np.multiply.at, ...: negative indices from the end, those out of range
    dropped (JAX's FILL_OR_DROP); v a scalar, an array, a broadcast row; x
    replicated or sharded on its other dimension; JAX's scatter rule (an
    index array sharded needs out_sharding=); a 1-d boolean mask."""
    mesh = c.make_mesh((4, 2), ("i", "j"))
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 4)).astype(np.float32)
    idx = np.array([0, 5, 5, -1, 2, 9, -9, 3], np.int32)
    keep = idx[(idx >= -6) & (idx < 6)]
    v = rng.standard_normal((8, 4)).astype(np.float32)
    vk = v[(idx >= -6) & (idx < 6)]

    def np_set(a, i, u):
        a = a.copy()
        for k, r in zip(i, np.broadcast_to(u, (len(i),) + a.shape[1:])):
            a[k] = r
        return a

    def np_at(uf):
        def f(a, i, u):
            a = a.copy()
            uf.at(a, i, u)
            return a
        return f

    cases = [("set", np_set), ("add", np_at(np.add)), ("multiply", np_at(np.multiply)),
             ("min", np_at(np.minimum)), ("max", np_at(np.maximum))]
    for spec in (P(), P(None, "j")):
        xa = c.device_put(x, NamedSharding(mesh, spec))
        va = c.device_put(v, NamedSharding(mesh, P()))
        for how, ref in cases:
            got = getattr(xa.at[idx], how)(va)  # at once on Arrays
            assert got.type == xa.type
            assert np.array_equal(np.asarray(got), ref(x, keep, vk)), (spec, how)
            got = shmap.jit(lambda a: getattr(a.at[idx], how)(1.5))(xa)
            assert np.array_equal(np.asarray(got), ref(x, keep, np.float32(1.5))), (spec, how)
        row = np.arange(4, dtype=np.float32)
        got = shmap.jit(lambda a: a.at[idx].add(row))(xa)
        assert np.array_equal(np.asarray(got), np_at(np.add)(x, keep, row))
        got = np.asarray(xa.at[idx].divide(2.0))
        assert np.allclose(got, np_at(np.divide)(x, keep, np.float32(2.0)))
        got = np.asarray(xa.at[idx[:3]].power(2.0))
        assert np.allclose(got, np_at(np.power)(x, idx[:3], np.float32(2.0)))
    xi = rng.integers(-9, 9, (6, 4)).astype(np.int32)
    xia = c.device_put(xi, NamedSharding(mesh, P(None, "j")))
    assert np.array_equal(np.asarray(xia.at[idx].add(7)), np_at(np.add)(xi, keep, 7))
    mask = np.array([True, False, True, False, False, True])
    assert np.array_equal(np.asarray(shmap.jit(lambda a: a.at[mask].set(0.0))(
        c.device_put(x, NamedSharding(mesh, P())))), np.where(mask[:, None], 0, x))
    # an index array sharded: JAX's rule asks for out_sharding=
    si = c.device_put(np.array([0, 1, 5, 3, 0, 1, 5, 3], np.int32), NamedSharding(mesh, P("i")))
    xa = c.device_put(x, NamedSharding(mesh, P(None, "j")))
    with pytest.raises(shmap.ProgramError, match=r"Use `\.at\[\.\.\.\]\.set/add/mul/\.\.\."
                       r"\(out_sharding=\)` .* Got operand=f32\[6,4@j\], indices=i32\[8@i,1\], "
                       r"updates=f32\[8@i,4@j\]$"):
        xa.at[si].set(1.0)
    got = xa.at[si].max(1.0, out_sharding=P(None, "j"))
    assert got.type == "f32[6,4@j]"
    assert np.array_equal(np.asarray(got), np_at(np.maximum)(x, np.asarray(si), np.float32(1)))
    # a numpy mask of two dimensions is concrete: its True elements' indices, as JAX's
    # (JAX's scatter rule then refuses the sharded operand as for any index arrays)
    with pytest.raises(shmap.ProgramError, match=r"Use `\.at\[\.\.\.\]\.set/add"):
        shmap.jit(lambda a: a.at[x > 0].set(0.0))(xa)
    got = shmap.jit(lambda a: a.at[x > 0].set(0.0))(c.device_put(x, NamedSharding(mesh, P())))
    assert np.array_equal(np.asarray(got), np.where(x > 0, 0, x))


def _np_sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _np_softplus(x):
    return np.logaddexp(x, 0)


NN = [
    ("relu6", lambda x: np.clip(x, 0, 6)),
    ("leaky_relu", lambda x: np.where(x >= 0, x, 0.01 * x)),
    ("elu", lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0)))),
    ("celu", lambda x: np.maximum(x, 0) + np.expm1(np.minimum(x, 0))),
    ("selu", lambda x: 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 *
                                                      np.expm1(np.minimum(x, 0)))),
    ("log_sigmoid", lambda x: -_np_softplus(-x)),
    ("soft_sign", lambda x: x / (np.abs(x) + 1)),
    ("hard_tanh", lambda x: np.clip(x, -1, 1)),
    ("hard_sigmoid", lambda x: np.clip(x + 3, 0, 6) / 6),
    ("hard_silu", lambda x: x * np.clip(x + 3, 0, 6) / 6),
    ("mish", lambda x: x * np.tanh(_np_softplus(x))),
    ("glu", lambda x: x[:, :8] * _np_sigmoid(x[:, 8:])),
    ("standardize", lambda x: (x - x.mean(-1, keepdims=True)) /
     np.sqrt(x.var(-1, keepdims=True) + 1e-5)),
]


@pytest.mark.parametrize("name,ref", NN, ids=[u[0] for u in NN])
def test_nn_activations(c, name, ref):
    mesh = c.make_mesh((4, 2), ("i", "j"))
    xa = np.random.default_rng(14).standard_normal((8, 16)).astype(np.float32) * 4
    x = c.device_put(xa, NamedSharding(mesh, P("i", None)))
    got = np.asarray(shmap.jit(getattr(shmap.nn, name))(x))
    assert np.allclose(got, ref(xa.astype(np.float64)), rtol=1e-5, atol=1e-5)


def test_dot_general_and_attention(c):
    """lax.dot_general (as an einsum) and nn.dot_product_attention (causal,
    masked) against numpy."""
    mesh = c.make_mesh((4, 2), ("i", "j"))
    rng = np.random.default_rng(15)
    a = rng.standard_normal((4, 3, 5)).astype(np.float32)
    b = rng.standard_normal((4, 5, 2)).astype(np.float32)
    x = c.device_put(a, NamedSharding(mesh, P("i")))
    y = c.device_put(b, NamedSharding(mesh, P("i")))
    got = shmap.jit(lambda x, y: lax.dot_general(x, y, (((2,), (1,)), ((0,), (0,)))))(x, y)
    assert np.allclose(np.asarray(got), np.einsum("bij,bjk->bik", a, b), atol=1e-5)
    got = shmap.jit(lambda x, y: lax.dot_general(x, y, (((0, 2), (0, 1)), ((), ())),
                                                 out_sharding=P()))(x, y)  # the batch summed
    assert np.allclose(np.asarray(got), np.einsum("bij,bjk->ik", a, b), atol=1e-4)
    q, k, v = (rng.standard_normal((2, 6, 2, 4)).astype(np.float32) for _ in range(3))
    qa, ka, va = (c.device_put(t, NamedSharding(mesh, P())) for t in (q, k, v))
    mask = np.ones((6, 6), bool)
    mask[:, 0] = False

    def ref(causal, m):
        s = np.einsum("btnh,bsnh->bnts", q, k) / 2.0
        allowed = np.ones((6, 6), bool) if m is None else m
        if causal:
            allowed = allowed & np.tril(np.ones((6, 6), bool))
        s = np.where(allowed, s, -1e30)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        return np.einsum("bnts,bsnh->btnh", p, v)
    for causal, m in ((False, None), (True, None), (False, mask)):
        got = shmap.jit(lambda q, k, v: shmap.nn.dot_product_attention(
            q, k, v, mask=None if m is None else jnp.asarray(m), is_causal=causal))(qa, ka, va)
        assert np.allclose(np.asarray(got), ref(causal, m), atol=1e-5), (causal, m is None)


def test_explicit_axes_from_python(c):
    """jax.sharding.explicit_axes: in a mesh of Auto axes, f's ops typed by
    the Explicit rules on the axes named (its arguments resharded to
    in_sharding first), its results' types hiding them again; at once, in a
    jit body (the text form's explicit_axes), under grad; JAX's refusals."""
    from shmap.sharding import PartitionSpec as PS, explicit_axes
    mesh = c.make_mesh((2, 2), ("X", "Y"), axis_types=(shmap.Auto, shmap.Auto))
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    x = c.device_put(a, NamedSharding(mesh, PS("X", None)))
    y = c.device_put(a + 10, NamedSharding(mesh, PS(None, "X")))
    seen = []

    def h(u, v):
        w = u + v
        seen.append(shmap.typeof(w))
        return w
    f = shmap.jit(lambda u, v: explicit_axes(h, axes="X", in_sharding=PS("X", None))(u, v) * 2)
    r = f(x, y)
    assert seen == ["f32[4@X,4]"] and shmap.typeof(r) == "f32[4,4]"
    assert np.array_equal(np.asarray(r), (2 * a + 10) * 2)
    assert "explicit_axes(h_explicit, in_sharding=(P('X', None), P('X', None)), axes=('X',))" \
        in f.lower(x, y).as_text()
    with pytest.raises(shmap.ProgramError, match="duplicate entries for X"):
        shmap.jit(lambda u, v: explicit_axes(jnp.add, axes="X", in_sharding=(
            PS("X", None), PS(None, "X")))(u, v))(x, y)
    g = shmap.jit(shmap.grad(lambda u, v: (explicit_axes(lambda p, q: p * q, in_sharding=PS(
        "X"))(u, v) ** 2).sum()))(x, y)
    assert np.allclose(np.asarray(g), 2 * a * (a + 10) ** 2)
    r = explicit_axes(jnp.sin, in_sharding=PS(None, "Y"))(x)  # at once
    assert shmap.typeof(r) == "f32[4,4]" and np.allclose(np.asarray(r), np.sin(a))
    with pytest.raises(TypeError, match="Missing required keyword argument: 'in_sharding'"):
        explicit_axes(jnp.sin)(x)
