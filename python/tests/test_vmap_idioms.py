"""shmap.vmap's calling conventions as JAX's: out_axes and in_axes as pytree
prefixes (None entries, negative axes), keyword arguments mapped over their
first axis, None an empty subtree of the arguments and results, axis_size
with nothing mapped, and JAX's exception types and sentences for what vmap
refuses. At once, in a jit, and nested. Runs on the cluster of conftest's c."""
import collections

import numpy as np
import pytest

import shmap
from shmap import P, NamedSharding
from shmap import numpy as jnp


@pytest.fixture(scope="module")
def mesh(c):
    return c.make_mesh((2, 4), ("X", "Y"))


X = np.arange(24, dtype=np.float32).reshape(4, 6) / 7
Y = np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6)


def test_out_axes_tuple_prefix(c):
    """out_axes a tuple, one entry per result, each its own batch axis (0,
    1, negative): before, any tuple out_axes raised 'Inconsistent number of
    elements: 1 vs 2'."""
    a, s = shmap.vmap(lambda x: (x * 2, x.sum()), out_axes=(0, 0))(X)
    assert np.allclose(np.asarray(a), X * 2) and np.allclose(np.asarray(s), X.sum(1))
    a, b = shmap.vmap(lambda x: (x * 2, x[:, None] * 3), out_axes=(0, 1))(X)
    assert np.asarray(a).shape == (4, 6) and np.asarray(b).shape == (6, 4, 1)
    assert np.allclose(np.asarray(b), np.moveaxis(X[:, :, None] * 3, 0, 1))
    a, b = shmap.vmap(lambda x: (x * 2, x[:, None]), out_axes=(-1, -2))(X)
    assert np.allclose(np.asarray(a), (X * 2).T)
    assert np.allclose(np.asarray(b), np.moveaxis(X[:, :, None], 0, 1))
    # a list in a tuple: one entry for all the list's results
    r = shmap.vmap(lambda x: ([x, x + 1], x.sum()), out_axes=(1, 0))(X)
    assert isinstance(r[0], list) and np.allclose(np.asarray(r[0][1]), (X + 1).T)


def test_out_axes_none_unmapped_result(c):
    """out_axes None for a result that does not depend on the batch: given
    back once, without a batch axis (a value of an unmapped argument, a
    constant); before, the tuple out_axes was refused."""
    w = Y[0]
    a, t = shmap.vmap(lambda x, w: (x * w, w.sum()), in_axes=(0, None),
                      out_axes=(0, None))(X, w)
    assert np.allclose(np.asarray(a), X * w)
    assert np.asarray(t).shape == () and np.allclose(np.asarray(t), w.sum())
    a, k = shmap.vmap(lambda x: [x * 2, jnp.ones(3)], out_axes=[0, None])(X)
    assert np.asarray(k).shape == (3,) and np.allclose(np.asarray(k), 1)

    def outer(x, w):  # inside a jit, the unmapped result of an inner vmap
        return shmap.vmap(lambda r: (r + w, (w * 2).sum()), out_axes=(0, None))(x)
    a, t = shmap.jit(outer)(X, w)
    assert np.allclose(np.asarray(a), X + w) and np.allclose(np.asarray(t), 2 * w.sum())


def test_out_axes_none_of_mapped_result_refused(c):
    """out_axes None for a result that depends on the batch: JAX's
    ValueError (with axis_name: 'vmap has mapped output (axis_name=b) but
    out_axes is None'; without: the path of the result, 'at vmap
    out_axes[1], got axis spec None ...'); before, the tuple out_axes was
    refused, and out_axes=None alone raised an InvalidArgument that was not
    a ValueError."""
    with pytest.raises(ValueError, match=r"^at vmap out_axes\[1\], got axis spec None but "
                       r"output was batched on axis 0$"):
        shmap.vmap(lambda x: (x * 2, x), out_axes=(0, None))(X)
    with pytest.raises(ValueError, match=r"^vmap has mapped output \(axis_name=b\) but out_axes "
                       r"is None$"):
        shmap.vmap(lambda x: x, out_axes=None, axis_name="b")(X)
    with pytest.raises(ValueError, match=r"at vmap out_axes\['m'\], got axis spec None"):
        shmap.vmap(lambda x: {"m": x, "s": 1.0}, out_axes=None)(X)


def test_out_axes_dict_and_nested(c):
    """A dict of results with a dict out_axes (its own axis, None, for
    each key), and a nested dict of results with a prefix of it: before,
    a dict out_axes was refused."""
    def f(x):
        return {"a": x * 2, "b": {"m": x[:2], "n": x.sum()}, "k": jnp.zeros(2)}
    r = shmap.vmap(f, out_axes={"a": 1, "b": 0, "k": None})(X)
    assert np.allclose(np.asarray(r["a"]), (X * 2).T)
    assert np.allclose(np.asarray(r["b"]["m"]), X[:, :2])
    assert np.allclose(np.asarray(r["b"]["n"]), X.sum(1))
    assert np.asarray(r["k"]).shape == (2,)
    r = shmap.vmap(f, out_axes={"a": -1, "b": {"m": 1, "n": 0}, "k": 0})(X)
    assert np.allclose(np.asarray(r["b"]["m"]), X[:, :2].T)
    assert np.asarray(r["k"]).shape == (4, 2)


def test_out_axes_not_a_prefix(c):
    """out_axes that is not a prefix of the results, or an axis out of
    range: JAX's ValueError sentences (flatten_axes', canonicalize_axis');
    before: 'Inconsistent number of elements' or shmap's own refusal."""
    with pytest.raises(ValueError, match=r"vmap out_axes specification must be a tree prefix of "
                       r"the corresponding value; \n  Mismatch details \(1 found\):\n  pytree "
                       r"structure error: different lengths of tuple at key path\n    vmap "
                       r"out_axes\n"):
        shmap.vmap(lambda x: (x, x, x), out_axes=(0, 0))(X)
    with pytest.raises(ValueError, match=r"different types at key path\n    vmap out_axes"):
        shmap.vmap(lambda x: [x, x], out_axes=(0, 0))(X)
    with pytest.raises(ValueError, match=r"^axis 2 is out of bounds for array of dimension 2$"):
        shmap.vmap(lambda x: x * 2, out_axes=2)(X)
    with pytest.raises(TypeError, match=r"^vmap out_axes must be an int, None, or \(nested\) "
                       r"container with those types as leaves, but got \(0, 'a'\)\.$"):
        shmap.vmap(lambda x: x, out_axes=(0, "a"))


def test_keyword_arguments_mapped_over_axis_0(c):
    """Keyword arguments are mapped over their first axis, whatever in_axes
    says (it is for the positional ones), at once, in a jit and nested;
    a keyword argument of None is passed as None. Before: TypeError
    'call() got an unexpected keyword argument'."""
    r = shmap.vmap(lambda x, *, y: x + y)(X, y=Y)
    assert np.allclose(np.asarray(r), X + Y)
    r = shmap.vmap(lambda x, y: x * y, in_axes=None)(X[0], y=Y)
    assert np.allclose(np.asarray(r), X[0] * Y)
    r = shmap.vmap(lambda x, y: x - y, in_axes=(1,))(X, y=Y.T)
    assert np.allclose(np.asarray(r), X.T - Y.T)
    r = shmap.vmap(lambda x, y=None, s=1.0: x * s if y is None else x)(X, y=None)
    assert np.allclose(np.asarray(r), X)
    r = shmap.jit(lambda a, b: shmap.vmap(lambda p, *, q: p * q)(a, q={"v": b}["v"]))(X, Y)
    assert np.allclose(np.asarray(r), X * Y)
    r = shmap.vmap(lambda row: shmap.vmap(lambda p, *, q: p * q)(row, q=row + 1))(X)
    assert np.allclose(np.asarray(r), X * (X + 1))
    r = shmap.vmap(lambda x, **kw: x + kw["p"]["w"])(X, p={"w": Y})
    assert np.allclose(np.asarray(r), X + Y)


def test_keyword_arguments_errors(c):
    """A tuple in_axes of the wrong length with keyword arguments: JAX's
    ValueError and its note on keywords; a keyword argument of another
    size: JAX's inconsistent-sizes sentence naming kwargs['y']."""
    with pytest.raises(ValueError, match=r"but got len\(in_axes\)=2, len\(args\)=1\. Note that "
                       r"the function was called with keyword arguments \['y'\], which the "
                       r"entries of a tuple in_axes never correspond to"):
        shmap.vmap(lambda x, y: x + y, in_axes=(0, None))(X, y=Y)
    with pytest.raises(ValueError, match=r"vmap got inconsistent sizes for array axes to be "
                       r"mapped:\n  \* one axis had size 4: axis 0 of argument x of type "
                       r"float32\[4,6\];\n  \* one axis had size 6: axis 0 of kwargs\['y'\] of "
                       r"type float32\[6,4\]$"):
        shmap.vmap(lambda x, *, y: x)(X, y=Y.T)


def test_none_leaves_of_arguments(c):
    """None in the arguments is an empty subtree: passed to the function as
    None (a dict entry, a whole argument, under a dict in_axes); before,
    vmap tried to map it ('dtype dtype('O') is not one shmap supports')."""
    w = np.ones(3, np.float32)
    r = shmap.vmap(lambda p: p["w"] * 2)({"w": w, "f": None})
    assert np.allclose(np.asarray(r), 2)
    seen = []

    def f(x, cfg, p):
        seen.append((cfg, p["f"]))
        return x + p["b"]
    r = shmap.vmap(f, in_axes=(0, None, {"b": None, "f": 0}))(X, None, {"b": Y[0], "f": None})
    assert np.allclose(np.asarray(r), X + Y[0])
    assert seen and all(s == (None, None) for s in seen)
    r = shmap.vmap(lambda a, b: a * 3, in_axes=(0, 0))(X, None)
    assert np.allclose(np.asarray(r), X * 3)


def test_none_leaves_of_results(c):
    """None in the results is an empty subtree: given back as None, with
    out_axes a prefix that has an entry for it or not; before, vmap tried
    to batch it ('full: fill_value must be a static number')."""
    a, n = shmap.vmap(lambda x: (x * 2, None))(np.ones(3, np.float32))
    assert n is None and np.allclose(np.asarray(a), 2)
    r = shmap.vmap(lambda x: {"a": x.sum(), "g": None, "h": [None, x]},
                   out_axes={"a": 0, "g": 1, "h": -1})(X)
    assert r["g"] is None and r["h"][0] is None
    assert np.allclose(np.asarray(r["h"][1]), X.T) and np.allclose(np.asarray(r["a"]), X.sum(1))
    assert shmap.vmap(lambda x: None)(X) is None


def test_inconsistent_sizes_is_value_error(c):
    """Mapped axes of different sizes: JAX's ValueError and its sentence
    (the sizes most common first, each with an argument that has it, by
    its parameter name, and the axis_size argument when given); before,
    an InvalidArgument that was not a ValueError, its lines naming
    args[k] by shape."""
    with pytest.raises(ValueError, match=r"^vmap got inconsistent sizes for array axes to be "
                       r"mapped:\n  \* one axis had size 3: axis 0 of argument a of type "
                       r"float32\[3\];\n  \* one axis had size 4: axis 0 of argument b of type "
                       r"float32\[4\]$") as e:
        shmap.vmap(lambda a, b: a + b)(np.ones(3, np.float32), np.ones(4, np.float32))
    assert isinstance(e.value, shmap.InvalidArgument)
    with pytest.raises(ValueError, match=r"mapped:\n  \* most axes \(2 of them\) had size 4, "
                       r"e\.g\. axis 0 of argument a of type float32\[4,6\];\n  \* one axis had "
                       r"size 6: axis -1 of argument c\['k'\] of type float32\[4,6\]$"):
        shmap.vmap(lambda a, b, c: a, in_axes=(0, 0, -1))(X, Y, {"k": X})
    with pytest.raises(ValueError, match=r"mapped:\n  \* the `axis_size` argument was 5;\n  \* "
                       r"one axis had size 4: axis 0 of argument x of type float32\[4,6\]$"):
        shmap.vmap(lambda x: x, axis_size=5)(X)


def test_in_axes_pytree_prefix(c, mesh):
    """in_axes as a pytree prefix: a dict per dict argument with None and
    negative entries, a list given for the arguments (JAX's tuple), on
    sharded Arrays in a jit; a structure that is not a prefix: JAX's
    ValueError naming the path (before: shmap's own InvalidArgument
    sentence)."""
    x = c.device_put(X, NamedSharding(mesh, P("X")))
    y = c.device_put(Y, NamedSharding(mesh, P("X")))

    def f(p, s):
        return p["a"] * s + p["b"].sum()
    spec = ({"a": -1, "b": None}, 0)
    r = shmap.vmap(f, in_axes=spec)({"a": x, "b": y}, X[0])
    assert np.allclose(np.asarray(r), X.T * X[0][:, None] + Y.sum())
    r = shmap.jit(lambda a, b: shmap.vmap(f, in_axes=[spec[0], None])({"a": a, "b": b}, 2.0))(x, y)
    assert np.allclose(np.asarray(r), X.T * 2 + Y.sum())
    with pytest.raises(ValueError, match=r"^vmap in_axes specification must be a tree prefix of "
                       r"the corresponding value; \n  Mismatch details \(1 found\):\n  pytree "
                       r"structure error: different pytree metadata at key path\n    vmap "
                       r"in_axes\[0\]\n"):
        shmap.vmap(f, in_axes=({"a": 0, "c": None}, 0))({"a": X, "b": Y}, X[0])
    with pytest.raises(ValueError, match=r"different lengths of tuple at key path\n    vmap "
                       r"in_axes\[1\]\[0\]\n"):
        shmap.vmap(lambda a, b: a, in_axes=(0, ((0, 0),)))(X, ((X, X, X),))
    nt = collections.namedtuple("NT", "u v")
    r = shmap.vmap(lambda t: t.u + t.v, in_axes=(nt(0, None),))(nt(X, Y[0]))
    assert np.allclose(np.asarray(r), X + Y[0])


def test_in_axes_refusals_as_jax(c):
    """in_axes of another type, of the wrong length, or mapping past an
    argument's rank (a negative axis counts its minimum rank as JAX's:
    -axis): JAX's TypeError / ValueError sentences (before: shmap's
    InvalidArgument alone, TypeError 'float object is not iterable', and
    a minimum rank of axis + 1 for negative axes)."""
    with pytest.raises(TypeError, match=r"^vmap in_axes must be an int, None, or a tuple of "
                       r"entries corresponding to the positional arguments passed to the "
                       r"function, but got 1\.0\.$"):
        shmap.vmap(lambda x: x, in_axes=1.0)
    with pytest.raises(TypeError, match=r"vmap in_axes must be an int, None, or a tuple"):
        shmap.vmap(lambda x: x, in_axes={"a": 0})
    with pytest.raises(ValueError, match=r"^vmap in_axes must be an int, None, or a tuple of "
                       r"entries .* but got len\(in_axes\)=1, len\(args\)=2\.$"):
        shmap.vmap(lambda a, b: a, in_axes=(0,))(X, X)
    with pytest.raises(ValueError, match=r"^vmap was requested to map its argument along axis "
                       r"-3, which implies that its rank should be at least 3, but is only 2 "
                       r"\(its shape is \(4, 6\)\)$"):
        shmap.vmap(lambda a: a, in_axes=-3)(X)


def test_axis_size_without_mapped_arguments(c):
    """axis_size with nothing mapped: the results repeated axis_size
    times (no arguments at all, or only unmapped ones); without it JAX's
    two ValueError sentences (before: an InvalidArgument that was not a
    ValueError, one sentence for both)."""
    r = shmap.vmap(lambda: jnp.arange(3.0), axis_size=2)()
    assert np.allclose(np.asarray(r), np.tile(np.arange(3.0), (2, 1)))
    r = shmap.vmap(lambda w: w * 2, in_axes=None, axis_size=3)(Y[0])
    assert np.allclose(np.asarray(r), np.tile(Y[0] * 2, (3, 1)))
    with pytest.raises(ValueError, match=r"^vmap wrapped function must be passed at least one "
                       r"argument containing an array or axis_size must be specified, got empty "
                       r"\*args=\(\) and \*\*kwargs=\{\}$"):
        shmap.vmap(lambda: 1.0)()
    with pytest.raises(ValueError, match=r"^vmap must have at least one non-None value in "
                       r"in_axes or axis_size must be specified$"):
        shmap.vmap(lambda w: w, in_axes=None)(Y[0])
