"""jax.tree_util (and jax.tree) for the pytrees shmap takes: tuples, lists
and dicts (keys in sorted order, as JAX flattens them) of leaves; None is
an empty subtree, as in JAX. What a training step needs:

    params = shmap.tree.map(lambda p, g: p - lr * g, params, grads)
"""
from ._trace import _is_tree


class PyTreeDef:
    """A pytree's structure without its leaves (jax.tree_util.PyTreeDef)."""

    def __init__(self, kind, children=(), keys=None):
        self._kind, self._children, self._keys = kind, tuple(children), keys

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

    def _build(self, it):
        if self._kind == "*":
            v = next(it, _END)
            if v is _END:
                raise ValueError(f"Too few leaves for PyTreeDef; expected {self.num_leaves}.")
            return v
        if self._kind == "None":
            return None
        built = [c._build(it) for c in self._children]
        if self._kind == "dict":
            return dict(zip(self._keys, built))
        return tuple(built) if self._kind == "tuple" else list(built)

    def __eq__(self, other):
        return isinstance(other, PyTreeDef) and (self._kind, self._children, self._keys) == \
            (other._kind, other._children, other._keys)

    def __hash__(self):
        return hash((self._kind, self._children, self._keys))

    def __repr__(self):
        return f"PyTreeDef({self._text()})"

    def _text(self):
        if self._kind in ("*", "None"):
            return self._kind
        if self._kind == "dict":
            return "{" + ", ".join(f"{k!r}: {c._text()}"
                                   for k, c in zip(self._keys, self._children)) + "}"
        inner = ", ".join(c._text() for c in self._children)
        if self._kind == "list":
            return "[" + inner + "]"
        return "(" + inner + ("," if len(self._children) == 1 else "") + ")"


_END = object()


def _flatten(tree, is_leaf, leaves):
    if is_leaf is not None and is_leaf(tree):
        leaves.append(tree)
        return PyTreeDef("*")
    if tree is None:
        return PyTreeDef("None")
    if not _is_tree(tree):
        leaves.append(tree)
        return PyTreeDef("*")
    if isinstance(tree, dict):
        keys = tuple(sorted(tree))
        return PyTreeDef("dict", [_flatten(tree[k], is_leaf, leaves) for k in keys], keys)
    return PyTreeDef(type(tree).__name__, [_flatten(e, is_leaf, leaves) for e in tree])


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


class _Tree:
    """jax.tree: the same functions under their short names."""
    map = staticmethod(tree_map)
    leaves = staticmethod(tree_leaves)
    structure = staticmethod(tree_structure)
    flatten = staticmethod(tree_flatten)
    unflatten = staticmethod(tree_unflatten)


tree = _Tree()
