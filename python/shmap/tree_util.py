"""jax.tree_util (and jax.tree) for the pytrees shmap takes: tuples, lists,
dicts (keys in sorted order, as JAX flattens them), namedtuples and the
classes of register_pytree_node / register_pytree_node_class /
register_dataclass, of leaves; None is an empty subtree, as in JAX. What a
training step needs:

    params = shmap.tree.map(lambda p, g: p - lr * g, params, grads)
"""
from ._trace import _NODES, _node as _any_node


def _node(v):
    """_trace._node as JAX's tree_util sees it: a PRNG key array is a leaf
    (shmap's transformations flatten it to its data inside)."""
    return None if getattr(type(v), "_pytree_leaf", False) else _any_node(v)


class PyTreeDef:
    """A pytree's structure without its leaves (jax.tree_util.PyTreeDef)."""

    def __init__(self, kind, children=(), tag=None, rebuild=None):
        self._kind, self._children, self._tag, self._rebuild = kind, tuple(children), tag, rebuild

    @property
    def num_leaves(self):
        if self._kind == "*":
            return 1
        return sum(c.num_leaves for c in self._children)

    def unflatten(self, leaves):
        it = iter(leaves)
        out = self._build(it)
        if next(it, _END) is not _END:
            raise ValueError(f"Too many leaves for PyTreeDef; expected {self.num_leaves}.")
        return out

    def children(self):
        """The structures of the node's children (jax's treedef.children())."""
        return list(self._children) if self._kind == "node" else []

    @property
    def num_nodes(self):
        return 1 + sum(c.num_nodes for c in self._children)

    def flatten_up_to(self, xs):
        """The subtrees of xs where this structure has its leaves (xs has
        this structure down to them: JAX's ValueError otherwise)."""
        if self._kind == "*":
            return [xs]
        if self._kind == "None":
            if xs is not None:
                raise ValueError(f"Expected None, got {xs!r}.")
            return []
        n = _node(xs)
        tag = None if n is None else n[3]
        if n is None or tag != self._tag or len(n[0]) != len(self._children):
            raise ValueError(f"Tuple arity mismatch or node type mismatch: expected a node "
                             f"of {self._text()}, got {xs!r}.")
        return [v for c, x in zip(self._children, n[0]) for v in c.flatten_up_to(x)]

    def _build(self, it):
        if self._kind == "*":
            v = next(it, _END)
            if v is _END:
                raise ValueError(f"Too few leaves for PyTreeDef; expected {self.num_leaves}.")
            return v
        if self._kind == "None":
            return None
        return self._rebuild([c._build(it) for c in self._children])

    def __eq__(self, other):
        return isinstance(other, PyTreeDef) and (self._kind, self._tag, self._children) == \
            (other._kind, other._tag, other._children)

    def __hash__(self):
        return hash((self._kind, self._tag, self._children))

    def __repr__(self):
        return f"PyTreeDef({self._text()})"

    def _text(self):
        if self._kind in ("*", "None"):
            return self._kind
        inner = ", ".join(c._text() for c in self._children)
        tag = self._tag
        if isinstance(tag, tuple) and tag and tag[0] == "dict":
            return "{" + ", ".join(f"{k!r}: {c._text()}"
                                   for k, c in zip(tag[1], self._children)) + "}"
        if tag == "list":
            return "[" + inner + "]"
        if tag == "tuple":
            return "(" + inner + ("," if len(self._children) == 1 else "") + ")"
        cls = tag[0] if isinstance(tag, tuple) else tag
        return f"CustomNode({getattr(cls, '__name__', cls)}[{inner}])" \
            if isinstance(tag, tuple) else f"{getattr(cls, '__name__', cls)}({inner})"


_END = object()


def _flatten(tree, is_leaf, leaves):
    if is_leaf is not None and is_leaf(tree):
        leaves.append(tree)
        return PyTreeDef("*")
    if tree is None:
        return PyTreeDef("None")
    n = _node(tree)
    if n is None:
        leaves.append(tree)
        return PyTreeDef("*")
    children, _, rebuild, tag = n
    return PyTreeDef("node", [_flatten(c, is_leaf, leaves) for c in children], tag, rebuild)


def register_pytree_node(nodetype, flatten_func, unflatten_func):
    """jax.tree_util.register_pytree_node: instances of nodetype are pytree
    nodes; flatten_func(v) -> (children, aux_data) (aux_data hashable, as
    JAX's), unflatten_func(aux_data, children) -> v. They then work
    wherever pytrees do: tree_map, jit arguments and results, grad, vmap."""
    _NODES[nodetype] = (flatten_func, unflatten_func)
    return nodetype


def register_pytree_node_class(cls):
    """jax.tree_util.register_pytree_node_class: a class with
    tree_flatten(self) and classmethod tree_unflatten(aux, children)."""
    register_pytree_node(cls, lambda v: v.tree_flatten(), cls.tree_unflatten)
    return cls


def register_static(cls):
    """jax.tree_util.register_static: instances of cls are pytree nodes with
    no children, the instance itself their static aux data (hashable, as
    JAX asks): they pass through tree_map and a jit as part of its trace."""
    register_pytree_node(cls, lambda v: ((), v), lambda aux, _: aux)
    return cls


def register_dataclass(nodetype, data_fields=None, meta_fields=None, drop_fields=()):
    """jax.tree_util.register_dataclass: a dataclass whose data_fields are
    children and meta_fields static aux data (both taken from the
    dataclass's fields when not given: those marked
    field(metadata=dict(static=True)) meta, the others children, as JAX's)."""
    import dataclasses
    if data_fields is None and meta_fields is None:  # JAX's: static=True metadata marks meta
        fields = [f for f in dataclasses.fields(nodetype) if f.init]
        data_fields = [f.name for f in fields if not f.metadata.get("static", False)]
        meta_fields = [f.name for f in fields if f.metadata.get("static", False)]
    data_fields, meta_fields = list(data_fields or ()), list(meta_fields or ())

    def flat(v):
        return [getattr(v, f) for f in data_fields], tuple(getattr(v, f) for f in meta_fields)

    def unflat(aux, children):
        return nodetype(**dict(zip(data_fields, children)), **dict(zip(meta_fields, aux)))
    register_pytree_node(nodetype, flat, unflat)
    return nodetype


def tree_flatten(tree, is_leaf=None):
    """(leaves, treedef): the leaves depth first, dict keys sorted."""
    leaves = []
    return leaves, _flatten(tree, is_leaf, leaves)


def tree_unflatten(treedef, leaves):
    return treedef.unflatten(leaves)


def tree_leaves(tree, is_leaf=None):
    return tree_flatten(tree, is_leaf)[0]


def tree_structure(tree, is_leaf=None):
    return tree_flatten(tree, is_leaf)[1]


def tree_map(f, tree, *rest, is_leaf=None):
    """f applied leaf by leaf to tree and the trees of rest, which have
    tree's structure (JAX's sentence when one does not)."""
    leaves, treedef = tree_flatten(tree, is_leaf)
    others = []
    for r in rest:
        rl, rd = tree_flatten(r, is_leaf)
        if rd != treedef:
            raise ValueError(f"tree_map: a tree of structure {rd._text()} where "
                             f"{treedef._text()} was expected")
        others.append(rl)
    return treedef.unflatten([f(x, *xs) for x, *xs in zip(leaves, *others)])


# ---- key paths ------------------------------------------------------------------


class _Key:
    """One step of a key path: its value under the attribute _field, printed
    by _fmt; equal to a key of the same class and value."""
    _field, _fmt = "key", "[{!r}]"

    def __init__(self, value):
        setattr(self, self._field, value)

    def _value(self):
        return getattr(self, self._field)

    def __str__(self):
        return self._fmt.format(self._value())

    def __repr__(self):
        return f"{type(self).__name__}({self._field}={self._value()!r})"

    def __eq__(self, other):
        return type(other) is type(self) and other._value() == self._value()

    def __hash__(self):
        return hash((type(self).__name__, self._value()))


class DictKey(_Key):
    """A dict entry on a key path: ['key']."""


class SequenceKey(_Key):
    """A tuple or list entry on a key path: [idx]."""
    _field = "idx"


class GetAttrKey(_Key):
    """A namedtuple field on a key path: .name."""
    _field, _fmt = "name", ".{}"


class FlattenedIndexKey(_Key):
    """A child of a registered class on a key path."""
    _fmt = "[<flat index {}>]"


def _path_key(tree, key):
    if isinstance(tree, dict):
        return DictKey(key)
    if type(tree) in (tuple, list):
        return SequenceKey(key)
    if isinstance(tree, tuple) and hasattr(type(tree), "_fields"):
        return GetAttrKey(key)
    return FlattenedIndexKey(key)


def _with_path(tree, is_leaf, path, out):
    if is_leaf is not None and is_leaf(tree):
        out.append((path, tree))
        return
    if tree is None:
        return
    n = _node(tree)
    if n is None:
        out.append((path, tree))
        return
    for child, key in zip(n[0], n[1]):
        _with_path(child, is_leaf, path + (_path_key(tree, key),), out)


def tree_flatten_with_path(tree, is_leaf=None):
    """jax.tree_util.tree_flatten_with_path: ([(key path, leaf)], treedef);
    a path is a tuple of DictKey, SequenceKey, GetAttrKey (namedtuple
    fields) and FlattenedIndexKey (registered classes)."""
    out = []
    _with_path(tree, is_leaf, (), out)
    return out, tree_structure(tree, is_leaf)


def tree_leaves_with_path(tree, is_leaf=None):
    return tree_flatten_with_path(tree, is_leaf)[0]


def tree_map_with_path(f, tree, *rest, is_leaf=None):
    """jax.tree_util.tree_map_with_path: f(path, leaf, *others)."""
    pairs, treedef = tree_flatten_with_path(tree, is_leaf)
    others = [tree_flatten(r, is_leaf)[0] for r in rest]
    return treedef.unflatten([f(p, x, *xs) for (p, x), *xs in zip(pairs, *others)])


def keystr(keys, *, simple=False, separator=""):
    """jax.tree_util.keystr: a key path as text (['a'][0].mu), or with
    simple=True its bare keys joined by separator."""
    if not simple:
        return "".join(str(k) for k in keys)
    return separator.join(str(k._value() if isinstance(k, _Key) else k) for k in keys)


def tree_reduce(function, tree, initializer=_END, is_leaf=None):
    """jax.tree_util.tree_reduce: functools.reduce over the leaves."""
    import functools
    leaves = tree_leaves(tree, is_leaf)
    if initializer is _END:
        return functools.reduce(function, leaves)
    return functools.reduce(function, leaves, initializer)


def tree_all(tree, *, is_leaf=None):
    """jax.tree_util.tree_all: whether every leaf is truthy."""
    return all(bool(x) for x in tree_leaves(tree, is_leaf))


def _up_to(treedef, tree, out):
    """The subtrees of tree at treedef's leaves, in order."""
    if treedef._kind == "*":
        out.append(tree)
        return
    if treedef._kind == "None":
        return
    n = _node(tree)
    if n is None or len(n[0]) != len(treedef._children):
        raise TypeError(f"Tree structure mismatch: {tree!r} is not a {treedef!r}")
    for c, d in zip(n[0], treedef._children):
        _up_to(d, c, out)


def tree_transpose(outer_treedef, inner_treedef, pytree_to_transpose):
    """jax.tree_util.tree_transpose: a tree of outer_treedef's structure
    whose leaves are trees of inner_treedef's (None: the first one's), as a
    tree of inner's structure whose leaves are trees of outer's."""
    subs = []
    _up_to(outer_treedef, pytree_to_transpose, subs)
    if inner_treedef is None:
        inner_treedef = tree_structure(subs[0]) if subs else PyTreeDef("None")
    rows = []
    for sub in subs:
        leaves, d = tree_flatten(sub)
        if d != inner_treedef:
            raise TypeError(f"Tree structure mismatch; expected {inner_treedef}, got {d}")
        rows.append(leaves)
    cols = [outer_treedef.unflatten([r[j] for r in rows])
            for j in range(inner_treedef.num_leaves)]
    return inner_treedef.unflatten(cols)


def register_pytree_with_keys(nodetype, flatten_with_keys, unflatten_func, flatten_func=None):
    """jax.tree_util.register_pytree_with_keys: flatten_with_keys(v) ->
    ((key, child) pairs, aux_data); the keys are taken and not kept (paths
    name such children by position)."""
    def flat(v):
        if flatten_func is not None:
            return flatten_func(v)
        pairs, aux = flatten_with_keys(v)
        return [c for _, c in pairs], aux
    return register_pytree_node(nodetype, flat, unflatten_func)


def all_leaves(iterable, is_leaf=None):
    """jax.tree_util.all_leaves: whether every element is a leaf."""
    return all(tree_structure(x, is_leaf) == PyTreeDef("*") for x in iterable)


def treedef_is_leaf(treedef):
    """jax.tree_util.treedef_is_leaf: the structure of a single leaf (or of
    None, which has no children either)."""
    return treedef._kind in ("*", "None")


class Partial:
    """jax.tree_util.Partial: functools.partial as a pytree whose leaves are
    its arguments and whose function is static, so it can be passed to a
    jit function and returned from one."""

    def __init__(self, func, *args, **keywords):
        if isinstance(func, Partial):
            args, keywords = func.args + args, {**func.keywords, **keywords}
            func = func.func
        self.func, self.args, self.keywords = func, tuple(args), dict(keywords)

    def __call__(self, *args, **keywords):
        return self.func(*self.args, *args, **{**self.keywords, **keywords})

    def __repr__(self):
        return f"Partial({self.func!r}, {', '.join(map(repr, self.args))})"


register_pytree_node(
    Partial,
    lambda p: ((p.args, p.keywords), p.func),
    lambda func, children: Partial(func, *children[0], **children[1]))


def register_pytree_with_keys_class(cls):
    """jax.tree_util.register_pytree_with_keys_class: a class with
    tree_flatten_with_keys(self) and classmethod tree_unflatten."""
    flat = getattr(cls, "tree_flatten", None)
    return register_pytree_with_keys(
        cls, lambda v: v.tree_flatten_with_keys(), cls.tree_unflatten,
        (lambda v: v.tree_flatten()) if flat is not None else None)


def treedef_children(treedef):
    """jax.tree_util.treedef_children: the structures of its children."""
    return treedef.children()


def treedef_tuple(treedefs):
    """jax.tree_util.treedef_tuple: the structure of a tuple of those."""
    return PyTreeDef("node", list(treedefs), "tuple", tuple)


def is_tree_node(x):
    """Whether x is a pytree node (not a leaf; None is a node of no children)."""
    return x is None or _node(x) is not None


def flatten_one_level(tree):
    """jax.tree_util.flatten_one_level: (children, aux data) of a node (JAX's
    ValueError for a leaf)."""
    if tree is None:
        return [], None
    n = _node(tree)
    if n is None:
        raise ValueError(f"can't tree-flatten type: {type(tree)}")
    return list(n[0]), n[3]


def tree_broadcast(prefix_tree, full_tree, is_leaf=None):
    """jax.tree.broadcast: prefix_tree's leaves repeated over the subtrees of
    full_tree they stand for (full_tree's structure)."""
    def go(p, f):
        if (is_leaf is not None and is_leaf(p)) or p is None or _node(p) is None:
            return tree_map(lambda _: p, f, is_leaf=is_leaf)
        n, m = _node(p), _node(f)
        if m is None or n[3] != m[3]:
            raise ValueError(f"prefix_tree {prefix_tree!r} is not a prefix of {full_tree!r}")
        return m[2]([go(a, b) for a, b in zip(n[0], m[0])])
    return go(prefix_tree, full_tree)


class _Tree:
    """jax.tree: the same functions under their short names."""
    broadcast = staticmethod(tree_broadcast)
    map = staticmethod(tree_map)
    leaves = staticmethod(tree_leaves)
    structure = staticmethod(tree_structure)
    flatten = staticmethod(tree_flatten)
    unflatten = staticmethod(tree_unflatten)
    map_with_path = staticmethod(tree_map_with_path)
    flatten_with_path = staticmethod(tree_flatten_with_path)
    leaves_with_path = staticmethod(tree_leaves_with_path)
    reduce = staticmethod(tree_reduce)
    all = staticmethod(tree_all)
    transpose = staticmethod(tree_transpose)


tree = _Tree()
