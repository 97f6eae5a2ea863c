"""Tracing Python functions into shmap programs, as jax.jit and
jax.shard_map trace: the function runs once on tracers, every op it calls
becomes one line of the program's text form (docs/programs.md), and the C
core (the _shmap extension: the text parser, the verifier with JAX's type and
sharding rules) types each value as it is traced, so x.shape works in the
body and a type error points at the Python line of the op that caused it.
Python `for` loops unroll, as under tracing."""
import collections
import concurrent.futures
import functools
import inspect
import math
import numbers
import os
import re
import threading
import weakref

import numpy as np

import _shmap

from ._core import use_mesh as _use_mesh
from ._core import (ConcretizationTypeError, NonConcreteBooleanIndexError,
                    TracerArrayConversionError, TracerBoolConversionError,
                    TracerIntegerConversionError, UnexpectedTracerError)
from ._core import AbstractMesh, _padded, _short_type, _spec_axes, _spec_of, _type_axes
from ._core import (Array, InvalidArgument, NamedSharding, P, PartitionSpec, ProgramError,
                    Unimplemented, Explicit, Mesh,
                    ShapeDtypeStruct, ShmapError, _DTYPES, _At, _Shaped, _canon_dtype, _default,
                    _dtype_name,
                    _default_mesh, _raise, get_mesh)

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_state = threading.local()


def _builder():
    b = getattr(_state, "builder", None)
    if b is None:
        raise InvalidArgument("shmap ops take traced values, inside a function traced by "
                              "shmap.shard_map or shmap.jit, or Arrays, outside them (they run "
                              "at once)")
    return b


def _user_line():
    """The line of the caller outside this package (for error messages)."""
    f = inspect.currentframe()
    while f is not None:
        if not os.path.abspath(f.f_code.co_filename).startswith(_PKG_DIR):
            return f"{f.f_code.co_filename}:{f.f_lineno}"
        f = f.f_back
    return None


def _fmt(v):
    """A Python value in the text form."""
    if isinstance(v, Tracer):
        if getattr(_state, "builder", None) is None:  # kept past its trace
            raise UnexpectedTracerError(
                f"Encountered an unexpected tracer. A function transformed by shmap had a side "
                f"effect, allowing for a reference to an intermediate value with type "
                f"{v._error_repr()} to escape the scope of the transformation. shmap's "
                f"transformations, as JAX's, require that functions explicitly return their "
                f"outputs, and disallow saving intermediate values to global state.")
        if isinstance(v, _vmap.BatchTracer):
            raise InvalidArgument("vmap: an op without a batching rule was given a mapped "
                                  "value")
        b = _builder()
        if v._owner is not None and v._owner is not b:
            return b.close_over(v)
        return v.name
    if isinstance(v, Array):  # closed over by the function being traced
        return _capture_closed(_builder(), v)
    if isinstance(v, np.ndarray):  # a numpy array operand: a constant, as JAX embeds it
        return _fmt(_numpy_constant(v))
    if isinstance(v, PartitionSpec):
        return repr(v)
    if isinstance(v, NamedSharding):
        return repr(v.spec)
    if isinstance(v, bool) or v is None:
        return repr(v)
    if isinstance(v, numbers.Integral):
        return str(int(v))
    if isinstance(v, numbers.Real):
        f = float(v)
        return "inf" if f == math.inf else "-inf" if f == -math.inf else "nan" if f != f \
            else repr(f)
    if isinstance(v, str):
        return repr(str(v))  # (an enum of strings, lax.GatherScatterMode: its value)
    if isinstance(v, (tuple, list)):
        inner = ", ".join(_fmt(e) for e in v)
        if isinstance(v, list):
            return "[" + inner + "]"
        return "(" + inner + ("," if len(v) == 1 else "") + ")"
    if isinstance(v, slice):
        return (("" if v.start is None else _fmt(v.start)) + ":" +
                ("" if v.stop is None else _fmt(v.stop)) +
                ("" if v.step is None else ":" + _fmt(v.step)))
    if isinstance(v, type) or isinstance(v, np.dtype):
        return _dtype_name(v)
    raise InvalidArgument(f"cannot use a value of type {type(v).__name__} in a traced program")


class _Builder:
    """The text of the program being traced, typed as it grows."""

    def __init__(self, header_lines, kind, param_names):
        self.header = header_lines  # mesh line(s) and the function header
        self.kind = kind
        self.lines = []  # (text, python line)
        self.n = 0
        self.params = param_names
        self.prelude = []  # jit: the shard_map functions its body calls, as text lines
        self.defined = {}  # (function, argument types) -> _Traced._define's
        self.fnames = set()  # the names of the functions defined in prelude
        self.captured = []  # jit: Arrays the body closes over, parameters after its own
        self.pending = []  # traced values whose type is still to be checked
        self.capture_names = {}  # id(Array) -> its parameter's name
        self.constants = {}  # id(numpy array) -> (it, its Array): a constant uploaded once
        self.debug = []  # jit: the debug.prints of the body (shmap.debug)
        self.tape = None  # inside grad: the ops that depend on what it differentiates
        self.active = set()  # ... and the names of those values (_grad)
        self.indent = ""  # inside while loops' bodies: their indentation
        self.loops = []  # the while loops being traced: (indentation, carry names)
        # what the checks so far found (_learn): name -> (type, dtype, shape,
        # weak); and how many of the lines they covered (_check_new)
        self.known = {}
        self.checked = 0
        self.outer = None  # a shard_map function's body traced in a jit body: that builder
        # the parameters added for what the body closes over, in order:
        # ("array", Array) and, in a function traced in a jit body, ("value",
        # a traced value of that body), passed by its calls (_define)
        self.extra = []
        self.closed = {}  # id(traced value of outer) -> its parameter's name
        self.closed_as = {}  # id(traced value of outer) -> the parameter for it (grad)
        # a shard_map Manual over some mesh axes only (axis_names=): those
        # axes, and the header's text naming them; None and "" otherwise
        self.manual_axes = None
        self.axis_suffix = ""
        # ... called from a jit body: its parameters' declarations in a jit
        # caller that types it (_check), the jit body's shardings over the
        # other axes kept; None otherwise
        self.caller_decls = None
        # ... called from the body of another (nested): its header's axis_names
        # while it is typed on its own, the axes Manual around it included
        self.check_suffix = None
        self.outer_vma = {}  # ... its parameters' varying axes there: name -> "x,y"
        # a shard_map called at once: (its _Traced, client, argument Arrays,
        # mesh), with which a value the same on every device is had at once
        # for Python (_eager_value); concretized once one was
        self.eager = None
        self.concretized = False

    def capture(self, a):
        """The name of Array a in the program: a body that closes over an
        Array (as JAX embeds it) gets it as one more parameter, laid out as
        it is in a jit body, replicated (in_spec P(), so invariant) in a
        shard_map body, as JAX's shard_map takes what its body closes over."""
        if id(a) in self.capture_names:
            return self.capture_names[id(a)]
        mesh = getattr(self, "mesh", None)
        am = a.sharding.mesh
        if mesh is not None and (tuple(am.axis_names) != tuple(mesh.axis_names) or
                                 tuple(am.axis_sizes) != tuple(mesh.axis_sizes)):
            if getattr(self, "mesh_default", False):  # a jit given no Arrays: on a's mesh
                raise _OnMesh(am)
            raise InvalidArgument(f"an Array the function closes over lies on mesh "
                                  f"{am._text()!r}, not the function's {mesh._text()!r}")
        k = len(self.captured)
        name = f"captured{k}"
        while name in self.params:
            k += 1
            name = f"captured{k}"
        a._check()
        decl = f"{name}: {_type_decl(a, a.sharding.spec if self.kind == 'jit' else P())}"
        self._add_param(decl, name)
        self.captured.append(a)
        self.capture_names[id(a)] = name
        self.extra.append(("array", a))
        return name

    def _add_param(self, decl, name):
        sep = ")%OUT%:" if self.kind == "jit" else ") -> %OUT%:"
        head, tail = self.header[-1].rsplit(sep, 1)
        self.header[-1] = f"{head}{', ' if not head.endswith('(') else ''}{decl}{sep}{tail}"
        self.params = list(self.params) + [name]
        if self.caller_decls is not None:
            self.caller_decls[name] = decl

    def close_over(self, v):
        """The name of a traced value v of another trace in this one: a
        shard_map function traced in a jit body that closes over a value of
        that body gets it as one more parameter, replicated (P(), as JAX's
        shard_map takes what it closes over); any other is a value that
        escaped its own trace."""
        if id(v) in self.closed:
            return self.closed[id(v)]
        if self.outer is None or v._owner is not self.outer:
            raise UnexpectedTracerError(f"a traced value ({v.name}) of another trace is used "
                                        f"here: a value of a jit or shard_map function exists "
                                        f"only while that function is traced; return it, or "
                                        f"pass it as an argument")
        k = len(self.closed)
        while f"closed{k}" in self.params:
            k += 1
        name = f"closed{k}"
        self._add_param(f"{name}: {v._dtype}[{','.join(map(str, v.shape))}] @ P()", name)
        self.closed[id(v)] = name
        self.extra.append(("value", v))
        return name

    def text(self, ret=None, out=None):
        """The program returning ret; out is the final out_specs text (None
        while tracing: P() for shard_map, no -> for jit)."""
        head = list(self.header)
        if out is None:
            out = "P()" if self.kind == "shard_map" else ""
        head[-1] = head[-1].replace("%OUT%", out + self.axis_suffix)
        head[-1:-1] = self.prelude
        body = [f"    {t}" for t, _ in self.lines]
        for ind, names in reversed(self.loops):  # open while loops: closed, carries unchanged
            body.append(f"    {ind}    {', '.join(names)} = {', '.join(names)}")
        if ret is not None:
            if self.loops:  # the types of the body's values come with any result
                ret = self.loops[0][1][0]
            body.append(f"    return {ret}")
        return "\n".join(head + body) + "\n"

    def _check(self, text):
        ins, at = [], 0
        if self.check_suffix is not None:  # nested: the axes around it bound too, and its
            lines = text.split("\n")       # parameters varying over what their blocks did
            k = len(self.header) + len(self.prelude) - 1
            head = lines[k][:-1]
            if self.axis_suffix and head.endswith(self.axis_suffix):
                head = head[:-len(self.axis_suffix)]
            lines[k] = head + self.check_suffix + ":"
            ins = [n for n in self.params if n in self.outer_vma]
            axes = {n: "".join(repr(a) + ", " for a in self.outer_vma[n].split(",")) for n in ins}
            lines[k + 1:k + 1] = [f"    {n} = pvary({n}, ({axes[n]}))" for n in ins]
            at = k + 1  # (1-based) the header's line; the pvary lines follow it
            text = "\n".join(lines)
        wrap = self.caller_decls is not None
        if wrap:  # typed as called from the jit body (the types' other axes)
            fn_lines = text.count("\n")
            head_line = len(self.header) + len(self.prelude)
            fname = self.header[-1].split()[1].split("(")[0]
            text += (f"jit {fname}__types("
                     f"{', '.join(self.caller_decls[n] for n in self.params)}):\n"
                     f"    return {fname}({', '.join(self.params)})\n")
        try:  # types only: the lowering runs once, on the finished program
            info = _shmap.program_check(text, "<traced>", None, False, True)
            if wrap:  # as the function's own check lists them: parameters, then its values
                named = {t[5]: t for t in info["types"] if t[3] > fn_lines and t[5]}
                info["types"] = [named[n] for n in self.params] + \
                    [t for t in info["types"] if head_line < t[3] <= fn_lines]
            if ins:  # the pvary lines' values are the parameters' types; lines as written
                ty = info["types"]
                added = {t[5]: t for t in ty if at < t[3] <= at + len(ins)}
                info["types"] = [added.get(n, t) if t[5] == n else t
                                 for n, t in zip(self.params, ty)] + \
                    [t[:3] + (t[3] - len(ins) if t[3] > at else t[3],) + tuple(t[4:])
                     for t in ty[len(self.params):] if not at < t[3] <= at + len(ins)]
            return info
        except _shmap.Error as e:
            name, msg = e.args
            m = re.match(r"<traced>:(\d+):\d+: (.*)", msg, re.S)
            src = None
            if m:
                k = int(m.group(1)) - len(self.header) - len(self.prelude) - 1
                k -= len(ins) if int(m.group(1)) > at + len(ins) else 0
                if 0 <= k < len(self.lines):
                    src = self.lines[k][1]
                msg = m.group(2)
            if src:
                msg = f"{src}: {msg}"
            err = ProgramError(msg, source_line=src)
            raise err from None

    def _check_ret(self, name):
        """Types the program returning name; a shard_map block that holds
        partial sums or is reduced (U: or R: in its type) is returned with
        the out_spec that says so, as its real out_specs will."""
        try:
            info = self._check(self.text(ret=name))
        except ProgramError as e:
            m = re.search(r"should be equal to the (?:un)?reduced present on the out_aval\. Got "
                          r"out_specs=P\(\) and out_aval=\S*?(\{[^}]*\})", str(e))
            if self.kind != "shard_map" or not m:
                raise
            sets = []
            for tag, kw in (("U", "unreduced"), ("R", "reduced")):
                t = re.search(tag + r":([A-Za-z0-9_,]+)", m.group(1))
                if t:
                    sets.append(f"{kw}={{{', '.join(repr(a) for a in t.group(1).split(','))}}}")
            info = self._check(self.text(ret=name, out=f"P({', '.join(sets)})"))
        self._learn(info, True)
        return info

    def _learn(self, info, whole):
        """Records the named values' types of a check (_check_new reads
        them); a whole program's check covers every line."""
        for t in info["types"]:
            if t[5] is not None and (whole or t[3]):
                self.known[t[5]] = (t[0], t[1], tuple(t[2]), t[4])
        if whole and not self.loops:
            self.checked = len(self.lines)

    _NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

    def _check_new(self, name):
        """(info, first line) of a check returning name: for a jit body with
        no open loop, only the lines since the last check, in a program
        whose parameters are the values they read, declared with the types
        the checks found (so a trace that asks a type after every op, as
        vmap's rules do, costs the length of its program, not its square);
        the whole program (first line 0) when that cannot say the same: a
        value read that is weakly typed or holds partial sums, a loop among
        the lines, or any error (the whole program's check words it)."""
        from .numpy import _spec_of_type
        start = self.checked = min(self.checked, len(self.lines))
        if self.kind == "jit" and not self.loops and start and start < len(self.lines):
            new = [t for t, _ in self.lines[start:]]
            defined, declared, decls = set(), set(), []
            for line in new:
                if line[:1] in (" ", "\t") or line.startswith("while "):
                    decls = None
                    break
                lhs, _, rhs = line.partition(" = ")
                for nm in dict.fromkeys(self._NAME.findall(rhs)):
                    k = self.known.get(nm)
                    if k is None or nm in defined or nm in declared:
                        continue
                    declared.add(nm)
                    ty, dt, sh, weak = k
                    if weak or "{" in ty:
                        decls = None
                        break
                    spec = _spec_of_type(ty) or P()
                    decls.append(f"{nm}: {dt}[{','.join(map(str, sh))}] @ {spec!r}")
                if decls is None:
                    break
                defined.update(n.strip() for n in lhs.split(","))
            if decls is not None:
                head = f"jit {self.header[-1].split()[1].split('(')[0]}({', '.join(decls)}):"
                text = "\n".join(self.header[:-1] + self.prelude + [head] +
                                  [f"    {t}" for t in new] + [f"    return {name}"]) + "\n"
                try:
                    info = _shmap.program_check(text, "<traced>", None, False, True)
                except _shmap.Error:
                    pass  # the whole program's check says what is wrong
                else:
                    self._learn(info, False)
                    self.checked = len(self.lines)
                    return info, start
        return self._check_ret(name), 0

    # A program of up to this many lines is type-checked after each op, so
    # that an error is raised by the op that makes it; a longer one only
    # when a value's type is asked for (its shape, dtype, type string) and
    # when it is finished, one check for every op since the last: a trace
    # then costs the length of the program, not its square.
    EAGER_LINES = 64

    def emit(self, expr, prim, args=(), kwargs=None):
        """name = expr; prim, args and kwargs say which op it is, for grad's
        tape (_grad.record)."""
        name = f"v{self.n}"
        self.n += 1
        self.lines.append((f"{self.indent}{name} = {expr}", _user_line()))
        t = Tracer(name, None, None, _elementwise_shape(prim, args), self)
        t._line = len(self.lines) - 1
        t._alias = args[0] if prim == "getitem" and args else None
        self.pending.append(t)
        if len(self.lines) <= self.EAGER_LINES:
            try:
                self.resolve()
            except ProgramError:
                self.lines.pop()
                self.pending.remove(t)
                raise
        if self.tape is not None:
            _grad.record(self, prim, args, kwargs or {}, t)
        return t

    def resolve(self):
        """Types every traced value still without one, with one check of
        the program so far; each takes the type of the last value its line
        defines (not the program's last value: a line may define none,
        x[:, :] aliasing x). A ProgramError names the first bad line."""
        if not self.pending:
            return
        info, start = self._check_new(self.pending[-1].name)
        base = len(self.header) + len(self.prelude) + 1  # the text line of body line `start`
        by_line = {}
        for t in info["types"]:
            by_line[t[3]] = t
        for tr in self.pending:
            t = by_line.get(base + tr._line - start)
            a = getattr(tr, "_alias", None)
            if t is None and a is not None and a._ty is not None:
                t = (a._ty, a._dt, a._sh)  # a slice of all of it (x[:n] of n rows): x
                if a.name in self.known:
                    self.known[tr.name] = self.known[a.name]
            if t is None:
                raise InvalidArgument(f"internal: '{self.lines[tr._line][0]}' defines no value "
                                      f"in the traced program")
            tr._ty, tr._dt, tr._sh, tr._builder = t[0], t[1], tuple(t[2]), None
        self.pending = []

    def fresh(self):
        """A new value name."""
        self.n += 1
        return f"v{self.n - 1}"

    def statement(self, text):
        """A line that defines no value (a while loop's aliases, its header)."""
        self.lines.append((f"{self.indent}{text}", _user_line()))

    def emit_multi(self, expr, n, prim, args=(), kwargs=None):
        """names of n results = expr (a call of a function with n results)."""
        names = [f"v{self.n + k}" for k in range(n)]
        self.n += n
        self.lines.append((f"{self.indent}{', '.join(names)} = {expr}", _user_line()))
        try:
            info = self._check_ret(names[-1])
        except ProgramError:
            self.lines.pop()
            raise
        # the values before those of the open loops' closing lines (text)
        ty = info["types"][:len(info["types"]) - sum(2 * len(c) for _, c in self.loops)]
        outs = tuple(Tracer(nm, *ty[k - n][:2], tuple(ty[k - n][2]))
                     for k, nm in enumerate(names))
        if self.tape is not None:
            _grad.record(self, prim, args, kwargs or {}, outs)
        return outs


def _elementwise_shape(prim, args):
    """The shape of an elementwise op's result, known without typing the
    program when every operand's is (traced values already typed or with
    one known so, Python and numpy scalars): numpy's broadcast of them.
    None otherwise (an Array or numpy array operand: its shape may not be
    the block's), and for any other op: the check says."""
    if _vmap._SYMBOLS.get(prim, prim) not in _vmap._ELEMENTWISE:
        return None
    shapes = []
    for a in args:
        if isinstance(a, Tracer) and not isinstance(a, _vmap.BatchTracer):
            if a._sh is None:
                return None
            shapes.append(a._sh)
        elif isinstance(a, (numbers.Number, np.generic)):
            shapes.append(())
        else:
            return None
    try:
        return tuple(np.broadcast_shapes(*shapes)) if shapes else None
    except ValueError:  # the check's sentence says it
        return None


class Tracer(_Shaped):
    """A value of the program being traced: its block (shard_map) or global
    (jit) shape, its dtype and its type string."""

    __array_priority__ = 1000
    # a Python number's value (a jit's argument, or made of such values only
    # by elementwise ops): it takes the dtype of the arrays it meets (_weak_args)
    weak_type = False

    def __init__(self, name, type_str, dtype, shape, builder=None):
        self.name, self._ty, self._dt = name, type_str, dtype
        self._sh = None if shape is None else tuple(shape)
        self._builder = builder  # set while the type is still to be checked
        self._owner = getattr(_state, "builder", None)  # the trace it is a value of

    def _typed(self):
        if self._ty is None:
            self._builder.resolve()
        return self

    @property
    def type(self):
        return self._typed()._ty

    @property
    def _dtype(self):
        return self._typed()._dt

    @property
    def shape(self):
        if self._sh is not None:  # known before the check (_elementwise_shape)
            return self._sh
        return self._typed()._sh

    @property
    def dtype(self):
        from ._core import _DTYPES
        return np.dtype(_DTYPES.get(self._dtype, np.float32))

    @property
    def sharding(self):
        """JAX's: a traced value has no concrete sharding (typeof(x).sharding
        is its type's)."""
        raise AttributeError(f"The 'sharding' attribute is not available on traced array with "
                             f"shape {_short_type(self.dtype, self.shape)}: "
                             f"shmap.typeof(x).sharding is its type's sharding")

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def _error_repr(self):
        return f"traced array with shape {_short_type(self.dtype, self.shape)}"

    # A traced value has no value yet: Python's conversions of it raise JAX's
    # errors (without __bool__, bool() would take __len__ and say True).
    def __bool__(self):
        v = _eager_value(self)
        if v is not None:
            return bool(v)
        raise TracerBoolConversionError(f"Attempted boolean conversion of {self._error_repr()}.")

    def __index__(self):
        v = _eager_value(self)
        if v is not None and np.issubdtype(v.dtype, np.integer):
            return int(v)
        raise TracerIntegerConversionError(
            f"The __index__() method was called on {self._error_repr()}")

    def _concretization(self, fn):
        raise ConcretizationTypeError(
            f"Abstract tracer value encountered where concrete value is expected: "
            f"{self._error_repr()}\nThe problem arose with the `{fn}` function. If trying to "
            f"convert the data type of a value, try using `x.astype({fn})` or "
            f"`jnp.array(x, {fn})` instead.\n")

    def __int__(self):
        v = _eager_value(self)
        if v is not None:
            return int(v)
        self._concretization("int")

    def __float__(self):
        v = _eager_value(self)
        if v is not None:
            return float(v)
        self._concretization("float")

    def __complex__(self):
        self._concretization("complex")

    def __array__(self, *args, **kwargs):
        raise TracerArrayConversionError(
            f"The numpy.ndarray conversion method __array__() was called on "
            f"{self._error_repr()}")

    def __iter__(self):  # as a JAX tracer: its rows
        for i in range(len(self)):
            yield self[i]

    def __repr__(self):
        return f"Traced<{self.type}>"

    def _bin(self, op, other, rev=False):
        a, b = (other, self) if rev else (self, other)
        if isinstance(a, _vmap.BatchTracer) or isinstance(b, _vmap.BatchTracer):
            return _vmap.apply(op, (a, b), {})
        (a, b), weak = _weak_args(op, (a, b))
        text = f"{_fmt(a)} {op} {_fmt(b)}"  # (a value kept past its trace: _fmt's error)
        r = _builder().emit(text, op, (a, b))
        if weak and op not in _COMPARISONS:
            r.weak_type = True
        return r

    def __add__(self, o): return self._bin("+", o)
    def __radd__(self, o): return self._bin("+", o, True)
    def __sub__(self, o): return self._bin("-", o)
    def __rsub__(self, o): return self._bin("-", o, True)
    def __mul__(self, o): return self._bin("*", o)
    def __rmul__(self, o): return self._bin("*", o, True)
    def __truediv__(self, o): return self._bin("/", o)
    def __rtruediv__(self, o): return self._bin("/", o, True)
    def __floordiv__(self, o): return self._bin("//", o)
    def __rfloordiv__(self, o): return self._bin("//", o, True)
    def __mod__(self, o): return self._bin("%", o)
    def __rmod__(self, o): return self._bin("%", o, True)
    def __pow__(self, o): return self._bin("**", o)
    def __rpow__(self, o): return self._bin("**", o, True)
    def __divmod__(self, o): return self // o, self % o
    def __rdivmod__(self, o): return o // self, o % self
    def __matmul__(self, o): return self._bin("@", o)
    def __rmatmul__(self, o): return self._bin("@", o, True)
    def __lt__(self, o): return self._bin("<", o)
    def __le__(self, o): return self._bin("<=", o)
    def __gt__(self, o): return self._bin(">", o)
    def __ge__(self, o): return self._bin(">=", o)
    def __eq__(self, o): return self._bin("==", o)
    def __ne__(self, o): return self._bin("!=", o)
    def __and__(self, o): return self._bin("&", o)
    def __rand__(self, o): return self._bin("&", o, True)
    def __or__(self, o): return self._bin("|", o)
    def __ror__(self, o): return self._bin("|", o, True)
    def __xor__(self, o): return self._bin("^", o)
    def __rxor__(self, o): return self._bin("^", o, True)
    def __lshift__(self, o): return self._shift("left_shift", o)
    def __rlshift__(self, o): return self._shift("left_shift", o, True)
    def __rshift__(self, o): return self._shift("right_shift", o)
    def __rrshift__(self, o): return self._shift("right_shift", o, True)
    def __invert__(self): return _call_op("bitwise_not", self)

    def _shift(self, fn, other, rev=False):  # jnp's shifts (XLA's for a shift of the width)
        from . import numpy as jnp
        a, b = (other, self) if rev else (self, other)
        return getattr(jnp, fn)(a, b)
    def __neg__(self):
        if isinstance(self, _vmap.BatchTracer):
            return _vmap.apply("neg", (self,), {})
        r = _builder().emit(f"-{_fmt(self)}", "neg", (self,))
        r.weak_type = self.weak_type
        return r

    def __pos__(self): return self
    def __abs__(self): return _call_op("abs", self)
    __hash__ = object.__hash__

    def __setitem__(self, key, value):
        from ._core import _IMMUTABLE
        raise TypeError(_IMMUTABLE)

    def __getitem__(self, key, out_sharding=None):
        key = key if isinstance(key, tuple) else (key,)
        if any(k is Ellipsis for k in key):  # as many ':' as the dims it stands for
            at = next(j for j, k in enumerate(key) if k is Ellipsis)
            rest = key[:at] + key[at + 1:]
            if any(k is Ellipsis for k in rest):
                raise InvalidArgument("an index can only have a single ellipsis ('...')")
            n = len(self.shape) - sum(k is not None for k in rest)
            key = key[:at] + (slice(None),) * max(n, 0) + key[at + 1:]
        key = _clamped_ints(_static_key(key, self.shape), self.shape)
        if any(isinstance(k, np.ndarray) and k.dtype == np.bool_ and k.ndim for k in key):
            # a concrete mask: the integer indices of its True elements, as JAX's
            key = sum(((tuple(k.nonzero()) if isinstance(k, np.ndarray) and k.dtype == np.bool_
                        and k.ndim else (k,)) for k in key), ())
        arrays = [j for j, k in enumerate(key) if isinstance(k, (np.ndarray, list, Tracer, Array))]
        if arrays:
            return self._take(key, arrays, out_sharding)
        if all(isinstance(k, slice) and k == slice(None) for k in key):
            return self  # x[:, :] and x[...] are x
        if isinstance(self, _vmap.BatchTracer):
            return _vmap.apply("getitem", (self,), {"key": key})
        return _builder().emit(f"{_fmt(self)}[{', '.join(_fmt(k) for k in key)}]", "getitem",
                               (self,), {"key": key})

    def _take(self, key, arrays, out_sharding):
        """numpy's indexing with one integer array among basic indices: the
        basic ones first, then a take along the array's dimension (indices
        clamped, as JAX's indexing has them). The array's dimensions go
        where numpy puts them: in its place, or first when an integer index
        stands apart from it."""
        if len(arrays) > 1:
            return self._take_many(key, out_sharding)
        p = arrays[0]
        idx = _index_value(key[p])
        if idx.dtype == np.bool_:
            raise NonConcreteBooleanIndexError(
                f"Array boolean indices must be concrete; got {idx._error_repr()}: indexing with "
                f"a traced boolean mask gives a result of data-dependent shape; use "
                f"jnp.where(mask, x, 0), or jnp.nonzero(mask, size=n)")
        y = self[key[:p] + (slice(None),) + key[p + 1:]]
        ax = sum(1 for k in key[:p] if k is None or isinstance(k, slice))
        r = _call_op("take", y, idx, axis=ax, mode="clip", out_sharding=out_sharding)
        adv = sorted([p] + [j for j, k in enumerate(key) if isinstance(k, numbers.Integral)
                            and not isinstance(k, bool)])
        if ax and adv != list(range(adv[0], adv[-1] + 1)):
            n = len(idx.shape)  # numpy: apart from an integer index, the array's dims lead
            perm = list(range(ax, ax + n)) + [d for d in range(len(r.shape))
                                               if not ax <= d < ax + n]
            r = _call_op("transpose", r, tuple(perm))
        return r

    def _take_many(self, key, out_sharding):
        """numpy's advanced indexing with several integer arrays (and
        integers beside them), as JAX's gather with clamped indices: the
        basic indices first; the indexed dimensions merged into one (moved
        to the front when they stand apart, as numpy puts the broadcast
        indices' dimensions first then) and one take of the indices'
        broadcast linear positions. x[jnp.arange(n), labels]."""
        from . import numpy as jnp
        adv = [j for j, k in enumerate(key) if isinstance(k, (np.ndarray, list, Tracer, Array))
               or (isinstance(k, numbers.Integral) and not isinstance(k, bool))]
        idx = [_index_value(key[j]) if not isinstance(key[j], numbers.Integral)
               else _index_value(np.asarray(key[j], np.int32)) for j in adv]
        if any(i.dtype == np.bool_ for i in idx):
            raise InvalidArgument("indexing with a boolean mask (a result of data-dependent "
                                  "shape) is not supported: use jnp.where(mask, x, 0)")
        y = self[tuple(slice(None) if j in adv else k for j, k in enumerate(key))]
        dims = adv  # every entry left in y's key (slices, None, the advanced ones) is a dim
        together = dims == list(range(dims[0], dims[0] + len(dims)))
        shape = tuple(y.shape)
        sizes = [shape[d] for d in dims]
        bshape = tuple(np.broadcast_shapes(*[tuple(i.shape) for i in idx]))
        lin = None
        for i, n in zip(idx, sizes):
            i = jnp.clip(jnp.where(i < 0, i + n, i), 0, max(n - 1, 0))
            i = _broadcast_to(jnp.astype(i, np.int32), bshape)
            lin = i if lin is None else lin * n + i
        at = dims[0] if together else 0
        if not together:
            y = _call_op("transpose", y, tuple(dims) + tuple(d for d in range(len(shape))
                                                             if d not in dims))
            shape = tuple(y.shape)
        merged = shape[:at] + (int(np.prod(sizes)),) + shape[at + len(dims):]
        y = _call_op("reshape", y, merged)
        kw = {} if out_sharding is None else {"out_sharding": out_sharding}
        return _call_op("take", y, lin, axis=at, mode="clip", **kw)

    @property
    def T(self):
        return _call_op("transpose", self)

    @property
    def at(self):
        """JAX's x.at[index].set(v) (also add, multiply, divide, power, min,
        max, get): a new value with the box of index updated."""
        return _At(self, _AtIndex)

    def reshape(self, *shape, out_sharding=None):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        kw = {} if out_sharding is None else {"out_sharding": out_sharding}
        return _call_op("reshape", self, tuple(shape), **kw)

    def transpose(self, *axes):
        axes = axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes
        return _call_op("transpose", self, tuple(axes)) if axes else _call_op("transpose", self)

    def astype(self, dtype):
        return _call_op("astype", self, _canon_dtype(dtype))

    def sum(self, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
        if initial is not None or where is not None:
            return _masked_reduce("sum", self, axis, keepdims, dtype, initial, where)
        return _reduce("sum", self, axis, keepdims, dtype)

    def prod(self, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
        if initial is not None or where is not None:
            return _masked_reduce("prod", self, axis, keepdims, dtype, initial, where)
        return _reduce("prod", self, axis, keepdims, dtype)

    def mean(self, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
        if where is not None:
            return _masked_reduce("mean", self, axis, keepdims, dtype, None, where)
        return _reduce("mean", self, axis, keepdims, dtype)

    def max(self, axis=None, out=None, keepdims=False, initial=None, where=None):
        if initial is not None or where is not None:
            return _masked_reduce("max", self, axis, keepdims, None, initial, where)
        return _reduce("max", self, axis, keepdims)

    def min(self, axis=None, out=None, keepdims=False, initial=None, where=None):
        if initial is not None or where is not None:
            return _masked_reduce("min", self, axis, keepdims, None, initial, where)
        return _reduce("min", self, axis, keepdims)

    def any(self, axis=None, out=None, keepdims=False, *, where=None):
        if where is not None:
            return _masked_reduce("any", self, axis, keepdims, None, None, where)
        return _reduce("any", self, axis, keepdims)

    def all(self, axis=None, out=None, keepdims=False, *, where=None):
        if where is not None:
            return _masked_reduce("all", self, axis, keepdims, None, None, where)
        return _reduce("all", self, axis, keepdims)

    def argmax(self, axis=None, out=None, keepdims=False):
        return _reduce("argmax", self, axis, keepdims)

    def argmin(self, axis=None, out=None, keepdims=False):
        return _reduce("argmin", self, axis, keepdims)

    def cumsum(self, axis=None, dtype=None):
        return _call_op("cumsum", self, axis=axis, dtype=dtype)

    def sort(self, axis=-1, **kw):
        from . import numpy as jnp
        return jnp.sort(self, axis, **kw)

    def argsort(self, axis=-1, **kw):
        from . import numpy as jnp
        return jnp.argsort(self, axis, **kw)

    def ravel(self):
        return _call_op("reshape", self, (-1,))

    flatten = ravel

    def squeeze(self, axis=None):
        return _call_op("squeeze", self, axis=axis)

    def swapaxes(self, axis1, axis2):
        from . import numpy as jnp
        return jnp.swapaxes(self, axis1, axis2)

    def cumprod(self, axis=None, dtype=None):
        return _call_op("cumprod", self, axis=axis, dtype=dtype)

    def var(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
        from . import numpy as jnp
        return jnp.var(self, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims)

    def std(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
        from . import numpy as jnp
        return jnp.std(self, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims)

    # the rest of jax.Array's methods, as jnp's functions
    def clip(self, min=None, max=None):  # noqa: A002 (numpy's names)
        from . import numpy as jnp
        return jnp.clip(self, min, max)

    def round(self, decimals=0):
        from . import numpy as jnp
        return jnp.round(self, decimals)

    def dot(self, b):
        from . import numpy as jnp
        return jnp.dot(self, b)

    def take(self, indices, axis=None, mode=None):
        from . import numpy as jnp
        return jnp.take(self, indices, axis=axis, mode=mode)

    def repeat(self, repeats, axis=None):
        from . import numpy as jnp
        return jnp.repeat(self, repeats, axis=axis)

    def diagonal(self, offset=0, axis1=0, axis2=1):
        from . import numpy as jnp
        return jnp.diagonal(self, offset=offset, axis1=axis1, axis2=axis2)

    def trace(self, offset=0, axis1=0, axis2=1, dtype=None):
        from . import numpy as jnp
        return jnp.trace(self, offset=offset, axis1=axis1, axis2=axis2, dtype=dtype)

    def searchsorted(self, v, side="left", sorter=None):
        from . import numpy as jnp
        return jnp.searchsorted(self, v, side=side, sorter=sorter)

    def nonzero(self, size=None, fill_value=None):
        from . import numpy as jnp
        return jnp.nonzero(self, size=size, fill_value=fill_value)

    def ptp(self, axis=None, out=None, keepdims=False):
        from . import numpy as jnp
        return jnp.ptp(self, axis=axis, keepdims=keepdims)

    def argpartition(self, kth, axis=-1, kind="introselect", order=None):
        from . import numpy as jnp
        return jnp.argpartition(self, kth, axis=axis)

    def compress(self, condition, axis=None, *, size=None, fill_value=0):
        from . import numpy as jnp
        return jnp.compress(condition, self, axis=axis, size=size, fill_value=fill_value)

    def choose(self, choices, out=None, mode="raise"):
        from . import numpy as jnp
        return jnp.choose(self, choices, mode=mode)

    def to_device(self, device, *, stream=None):
        """The array API's to_device: in a trace, the value itself (JAX's
        device_put of a device in jit)."""
        from ._core import device_put
        return device_put(self, device)

    @property
    def nbytes(self):
        return self.size * np.dtype(self.dtype).itemsize

    def item(self, *args):
        """JAX's: a traced value has no Python value (ConcretizationTypeError),
        but in an eager shard_map a replicated one does (_eager_value)."""
        if args:
            return self[args].item()
        v = _eager_value(self)
        if v is not None:
            return v.item()
        raise ConcretizationTypeError(f"Abstract tracer value encountered where concrete "
                                      f"value is expected: {self._error_repr()}\nThe "
                                      f"problem arose with the `item` function.")

    def __array_namespace__(self, *, api_version=None):
        from . import numpy as jnp
        return jnp

    def tolist(self):
        """JAX's: a traced value has no Python value."""
        raise ConcretizationTypeError(f"Abstract tracer value encountered where concrete value "
                                      f"is expected: {self._error_repr()}\nThe problem arose "
                                      f"with the `tolist` function.")

    def copy(self):
        return self

    def conj(self):
        return self  # real dtypes only

    conjugate = conj

    @property
    def mT(self):
        from . import numpy as jnp
        return jnp.swapaxes(self, -1, -2)

    @property
    def real(self):
        return self

    @property
    def imag(self):
        from . import numpy as jnp
        return jnp.zeros_like(self)

    @property
    def itemsize(self):
        return np.dtype(self.dtype).itemsize


class _AtIndex:
    """x.at[key]: updates of the box key names (integers, slices of step 1,
    '...'), as dynamic_update_slice at static starts; with an integer array
    or a strided slice in key, JAX's scatter (_scatter_one, _scatter_many)."""

    def __init__(self, x, key):
        self.x, self.key = x, key

    def _full_key(self, shape):
        """The key, one entry per dimension of shape: '...' expanded, ':' for
        the dimensions left out at the end."""
        key = self.key if isinstance(self.key, tuple) else (self.key,)
        if any(k is Ellipsis for k in key):
            at = next(j for j, k in enumerate(key) if k is Ellipsis)
            key = key[:at] + (slice(None),) * (len(shape) - len(key) + 1) + key[at + 1:]
        if len(key) > len(shape):
            raise InvalidArgument(f"x.at[...]: {len(key)} indices for an array of rank "
                                  f"{len(shape)}")
        return key + (slice(None),) * (len(shape) - len(key))

    def _box(self):
        shape = self.x.shape
        key = self._full_key(shape)
        starts, sizes, kept = [], [], []
        for d, (k, n) in enumerate(zip(key, shape)):
            if isinstance(k, numbers.Integral) and not isinstance(k, bool):
                i = int(k) + n if k < 0 else int(k)
                starts.append(i if 0 <= i < n else 0)
                sizes.append(1 if 0 <= i < n else 0)  # out of bounds: dropped, as JAX's
            elif isinstance(k, slice) and k.step in (None, 1):
                a, b, _ = k.indices(n)
                starts.append(a)
                sizes.append(max(b - a, 0))
                kept.append(d)
            else:
                raise InvalidArgument(f"x.at[...] takes integers, slices of step 1 and '...' "
                                      f"here, got {k!r}")
        return starts, sizes, kept

    def apply(self, func, *, indices_are_sorted=False, unique_indices=False, mode=None):
        """x.at[idx].apply(func): func (a unary elementwise function) at the
        indexed elements, as a set of func of their values (an index given
        twice takes it once)."""
        return self.set(func(self.get()))

    def get(self, out_sharding=None, mode=None, fill_value=None, indices_are_sorted=False,
            unique_indices=False):
        """x.at[key].get(): x[key]; with an integer array in key,
        out_sharding= says how the gather's result is sharded (JAX's)."""
        key = self.key if isinstance(self.key, tuple) else (self.key,)
        if mode == "fill" or fill_value is not None:
            return self._get_filled(key, out_sharding, fill_value)
        if out_sharding is None or all(_scalar_index(k) for k in key):
            return self.x[self.key]  # a static or dynamic slice: JAX takes no out_sharding
        return self.x.__getitem__(self.key, out_sharding=out_sharding)

    def _get_filled(self, key, out_sharding, fill_value):
        """get(mode='fill'): x[key] with fill_value (JAX's default for the
        dtype when None) where the integer array in key is out of range; key
        one integer array among slices (and '...')."""
        from .numpy import _filled
        nd = len(self.x.shape)
        if Ellipsis in [k for k in key if not hasattr(k, "shape")]:
            i = [k is Ellipsis for k in key].index(True)
            key = key[:i] + (slice(None),) * (nd - len(key) + 1) + key[i + 1:]
        arrays = [d for d, k in enumerate(key) if not isinstance(k, slice)]
        if len(arrays) != 1 or not hasattr(key[arrays[0]], "shape") and \
                not isinstance(key[arrays[0]], (list, numbers.Integral)) or \
                any(k != slice(None) for k in key if isinstance(k, slice)):
            raise NotImplementedError("x.at[...].get(mode='fill') takes one integer array "
                                      "among full slices (':' or '...') here")
        d = arrays[0]
        kw = {} if out_sharding is None else {"out_sharding": out_sharding}
        r = self.x.__getitem__(self.key, **kw)
        return _filled(r, key[d], self.x.shape[d], d, fill_value)

    def set(self, v, *, indices_are_sorted=False, unique_indices=False, mode=None,
            out_sharding=None):
        if self._scatters():
            return self._scatter("scatter", v, out_sharding)
        if out_sharding is not None:
            return self._auto("set", v, out_sharding)
        starts, sizes, kept = self._box()
        x = self.x
        if 0 in sizes:  # an empty box (an index out of bounds: JAX drops the update)
            return x
        if isinstance(v, (list, tuple)) or isinstance(v, Array) or np.ndim(v) > 0:
            v = _as_operand(np.asarray(v) if isinstance(v, (list, tuple)) else v)  # an array
        if isinstance(v, Tracer):
            upd = _broadcast_to(v, tuple(sizes[d] for d in kept)).reshape(tuple(sizes))
            if upd.dtype != x.dtype:
                upd = upd.astype(x.dtype)
        else:
            upd = _call_op("full", tuple(sizes), v, dtype=x.dtype)
        ents = self._laid_out(sizes, kept)
        if ents and _dims(upd.type) != _dims(x.type):
            upd = _call_op("reshard", upd, P(*ents))
        return _call_op("dynamic_update_slice", x, upd, tuple(starts))

    def _laid_out(self, sizes, kept):
        """In a jit body, the entries of x's spec an update of the box is
        laid out with (None when x is unsharded): JAX's scatter rule, whose
        sentence refuses a box cutting a sharded dimension (out_sharding=
        says how to lay the result out instead)."""
        x = self.x
        if _builder().kind != "jit":
            return None
        ents = [_spec_entry(d) for d in _dims(x.type)]
        shape = tuple(x.shape)
        if any(e is not None and sizes[d] != shape[d] for d, e in enumerate(ents)):
            nidx = sum(1 for d in range(len(shape)) if sizes[d] != shape[d] or d not in kept)
            view = ",".join(str(sizes[d]) for d in kept)
            e = scatter_refused(x.type, f"i32[{nidx - 1}]" if nidx > 1 else "i32[]",
                                f"{x.type.split('[')[0]}[{view}]")
            src = _user_line()
            raise ProgramError(f"{src}: {e}" if src else str(e), source_line=src)
        return ents if any(e is not None for e in ents) else None

    def _auto(self, how, v, out_sharding):
        """x.at[key].how(v, out_sharding=...) with static indices: JAX's, the
        update computed under auto_axes and its result resharded."""
        key = self.key
        return auto_axes(lambda a, u: getattr(_AtIndex(a, key), how)(u),
                         out_sharding=out_sharding)(self.x, v)

    def _scatters(self):
        """The key needs JAX's scatter: it is one integer array (x.at[idx]),
        or has an integer array (x.at[rows, cols]) or a slice of a step
        other than 1 (x.at[::2]) among its indices."""
        if isinstance(self.key, (np.ndarray, list, Tracer, Array)):
            return True
        key = self.key if isinstance(self.key, tuple) else (self.key,)
        return any(isinstance(k, (np.ndarray, list, Tracer, Array)) or
                   (isinstance(k, slice) and k.step not in (None, 1)) for k in key)

    def _scatter(self, op, v, out_sharding):
        if isinstance(self.key, np.ndarray) and self.key.dtype == np.bool_ and self.key.ndim > 1:
            self.key = tuple(self.key.nonzero())  # a concrete mask: its True elements' indices
        if isinstance(self.key, (tuple, slice)):
            return self._scatter_many(op, v, out_sharding)
        return self._scatter_one(op, v, out_sharding)

    def _scatter_many(self, op, v, out_sharding):
        """x.at[key].op(v) for a key of integer arrays, integers and slices
        of any step (with '...'), as JAX's scatter: numpy's indexing, the
        dimensions the arrays, integers and slices of a part index (a
        slice's positions: an array on a dimension of its own) moved to the
        front and merged into one, each position of their broadcast shape a
        linear index (one out of range in any dimension: dropped; negative
        ones from the end); v broadcast to x[key]'s shape and ordered as
        that dimension's rows. In a jit body JAX's scatter rule lays it out:
        the result has x's sharding, refused (its sentence) where x is
        sharded along an indexed dimension or the indices are sharded;
        out_sharding= computes it with the indexed dimensions whole and
        lays the result out as it says."""
        from . import numpy as jnp
        x = self.x
        key = self.key if isinstance(self.key, tuple) else (self.key,)
        shape = tuple(x.shape)
        if any(k is None for k in key):
            raise InvalidArgument("x.at[...] with an index array or a strided slice takes "
                                  "integers, index arrays, slices and '...', not None")
        key = self._full_key(shape)
        arrs = [j for j, k in enumerate(key) if isinstance(k, (np.ndarray, list, Tracer, Array))]
        ints = [j for j, k in enumerate(key)
                if isinstance(k, numbers.Integral) and not isinstance(k, bool)]
        for d, k in enumerate(key):
            if d not in arrs and d not in ints and not isinstance(k, slice):
                raise InvalidArgument(f"x.at[...] takes integers, slices, index arrays and "
                                      f"'...', got {k!r}")
        rng = {d: range(*k.indices(n)) for d, (k, n) in enumerate(zip(key, shape))
               if isinstance(k, slice)}
        part = [d for d, r in rng.items() if r != range(shape[d])]
        whole = [d for d in rng if d not in part]
        idx = {d: _index_value(key[d]) if not isinstance(key[d], (np.ndarray, list))
               else np.asarray(key[d]) for d in arrs}
        if any(i.dtype == np.bool_ for i in idx.values()):
            raise InvalidArgument("x.at[...] with a boolean mask beside other indices: use "
                                  "jnp.where")
        bA = tuple(np.broadcast_shapes(*[tuple(i.shape) for i in idx.values()]))
        adv = sorted(arrs + ints)  # numpy's advanced indices: their dims in one block
        together = not arrs or adv == list(range(adv[0], adv[0] + len(adv)))
        labels = [] if together else [("a", k) for k in range(len(bA))]
        for d in range(len(shape)):
            if d in rng:
                labels.append(("d", d))
            elif together and d == adv[0]:
                labels += [("a", k) for k in range(len(bA))]
        size = {("a", k): n for k, n in enumerate(bA)}
        size.update({("d", d): len(r) for d, r in rng.items()})
        view = tuple(size[lb] for lb in labels)  # x[key]'s shape, as numpy orders it
        if 0 in view:
            return x  # nothing to update (JAX's)
        sdims = sorted(adv + part)  # the dimensions merged into the scatter's
        bshape = bA + tuple(len(rng[d]) for d in part)
        ones = (1,) * len(part)
        comp = {}  # each merged dimension's index at each position of bshape
        for d in sdims:
            if d in ints:
                comp[d] = np.int32(key[d])
            elif d in part:
                comp[d] = np.asarray(rng[d], np.int32).reshape(
                    tuple(len(rng[e]) if e == d else 1 for e in part))
            elif isinstance(idx[d], np.ndarray):
                comp[d] = idx[d].astype(np.int32).reshape(idx[d].shape + ones)
            else:
                i = idx[d] if idx[d].dtype == "int32" else jnp.astype(idx[d], np.int32)
                comp[d] = _call_op("reshape", i, tuple(i.shape) + ones) if ones else i
        static = all(isinstance(c, (np.ndarray, np.integer)) for c in comp.values())
        lib = np if static else jnp
        n_all = int(np.prod([shape[d] for d in sdims]))
        lin, ok = None, None
        for d in sdims:
            n = shape[d]
            i = comp[d] if static else (comp[d] if isinstance(comp[d], Tracer)
                                        else _index_value(comp[d]))
            i = lib.where(i < 0, i + n, i)
            good = (i >= 0) & (i < n)
            ok = good if ok is None else ok & good
            lin = i if lin is None else lin * n + i
        lin = lib.where(ok, lin, n_all)  # out of range somewhere: dropped
        lin = _index_value(np.broadcast_to(lin, bshape)) if static else \
            _broadcast_to(jnp.astype(lin, np.int32), bshape)
        ents = _entries(x)
        kw, final = {}, None
        if out_sharding is not None:
            sp = out_sharding.spec if isinstance(out_sharding, NamedSharding) else out_sharding
            oents = list(sp) + [None] * (len(shape) - len(sp))
            inner = P(None, *[oents[d] for d in whole])
            kw["out_sharding"] = NamedSharding(out_sharding.mesh, inner) \
                if isinstance(out_sharding, NamedSharding) else inner
            if len(sp) > len(shape) or any(oents[d] is not None for d in sdims) or \
                    getattr(sp, "unreduced", None):
                final = out_sharding
            if ents is not None and any(ents[d] is not None for d in sdims):
                x = _call_op("reshard", x, P(*[None if d in sdims else e
                                               for d, e in enumerate(ents)]))
        elif ents is not None:
            self._check_rule(ents, idx, key, labels, view, adv, part, together)
        perm = tuple(sdims) + tuple(whole)
        xm = x if perm == tuple(range(len(shape))) else _call_op("transpose", x, perm)
        tshape = tuple(xm.shape)
        xm = _call_op("reshape", xm, (n_all,) + tshape[len(sdims):])
        upd = _updates(x, v, view)
        order = [("a", k) for k in range(len(bA))] + [("d", d) for d in part + whole]
        uperm = tuple(labels.index(lb) for lb in order)
        if uperm != tuple(range(len(view))):
            upd = _call_op("transpose", upd, uperm)
        if ents is not None and out_sharding is None:
            want = [None] * len(bshape) + [ents[d] for d in whole]
            if [_spec_entry(t) for t in _dims(upd.type)] != want:
                upd = _call_op("reshard", upd, P(*want))
        out = _call_op(op, xm, lin, upd, **kw)
        out = _call_op("reshape", out, tshape)
        if perm != tuple(range(len(shape))):
            out = _call_op("transpose", out, tuple(int(k) for k in np.argsort(perm)))
        if final is not None:
            out = _call_op("reshard", out, final)
        return out

    def _check_rule(self, ents, idx, key, labels, view, adv, part, together):
        """JAX's scatter rule for x.at[key] without out_sharding (x's spec
        entries ents): refused, with its sentence, where x is sharded along
        a dimension the key indexes (an inserted window dimension or a slice
        of a part) or an index array is sharded. The sentence's types are
        JAX's: the indices as its gather builds them (the arrays' broadcast
        dimensions and a strided slice's, then one per index), the updates
        laid out as x[key]."""
        first = idx[min(idx)] if idx else None  # JAX lays the block out as the first array
        nA = sum(1 for lb in labels if lb[0] == "a")
        ia = (_entries(first) or []) if isinstance(first, Tracer) else []
        ia = [None] * (nA - len(ia)) + list(ia)
        if all(e is None for i in idx.values() if isinstance(i, Tracer)
               for e in _entries(i) or []) and all(ents[d] is None for d in adv + part):
            return
        ishape, ients = [], []
        for d in range(len(key)):
            if idx and d == (adv[0] if together else 0):
                ishape += [view[j] for j, lb in enumerate(labels) if lb[0] == "a"]
                ients += ia
            if d in part and key[d].step not in (None, 1):
                ishape.append(view[labels.index(("d", d))])
                ients.append(None)
        uents = [ia[lb[1]] if lb[0] == "a" else ents[lb[1]] for lb in labels]
        dt = self.x.type.split("[")[0]
        e = scatter_refused(self.x.type, _type_str("i32", ishape, ients),
                            _type_str(dt, view, uents), len(adv) + len(part))
        src = _user_line()
        raise ProgramError(f"{src}: {e}" if src else str(e), source_line=src)

    def _scatter_one(self, op, v, out_sharding):
        """x.at[idx].op(v) with an index array: the scatter op of the op
        table over x's first dimension (negative indices from the end, out of
        range dropped, repeated ones applied in order). As JAX does, v is
        broadcast to x[idx]'s shape and laid out as x[idx] would be (the
        indices' sharding, then x's other dimensions'); JAX's scatter rule
        then decides, or out_sharding= (refusals: its sentence)."""
        key = self.key
        if isinstance(key, (np.ndarray, list)) and np.asarray(key).dtype == bool:
            key = np.nonzero(np.asarray(key))[0]
        x, idx = self.x, _index_value(key)
        rows = tuple(idx.shape) + tuple(x.shape[1:])
        upd = _updates(x, v, rows)
        if _builder().kind == "jit":
            want = _dims(idx.type) + _dims(x.type)[1:]
            if _dims(upd.type) != want:
                upd = _call_op("reshard", upd, P(*map(_spec_entry, want)))
        kw = {} if out_sharding is None else {"out_sharding": out_sharding}
        return _call_op(op, x, idx, upd, **kw)

    def add(self, v, *, indices_are_sorted=False, unique_indices=False, mode=None,
            out_sharding=None):
        if self._scatters():
            return self._scatter("scatter_add", v, out_sharding)
        if out_sharding is not None:
            return self._auto("add", v, out_sharding)
        self._laid_out(*self._box()[1:])
        return self.set(self.get() + v)

    def subtract(self, v, *, indices_are_sorted=False, unique_indices=False, mode=None,
                 out_sharding=None):
        """x[key] -= v: JAX's scatter_sub as a scatter-add of -v (a - b is
        a + -b, to the bit)."""
        if self._scatters():
            neg = -v if isinstance(v, Tracer) else np.negative(v)
            return self._scatter("scatter_add", neg, out_sharding)
        if out_sharding is not None:
            return self._auto("subtract", v, out_sharding)
        self._laid_out(*self._box()[1:])
        return self.set(self.get() - v)

    def multiply(self, v, *, indices_are_sorted=False, unique_indices=False, mode=None,
                 out_sharding=None):
        key = self.key if isinstance(self.key, tuple) else (self.key,)
        if self._scatters() and out_sharding is None and \
                not any(isinstance(k, (np.ndarray, list, Tracer, Array)) for k in key):
            # slices' indices are unique (JAX's unique_indices): x times v set into ones,
            # the same values, and differentiable in v as scatter_mul is not here
            return self.x * _AtIndex(_ones_like(self.x), self.key).set(v)
        if self._scatters():
            return self._scatter("scatter_mul", v, out_sharding)
        if out_sharding is not None:
            return self._auto("multiply", v, out_sharding)
        self._laid_out(*self._box()[1:])
        return self.set(self.get() * v)

    mul = multiply

    def divide(self, v, **kw):
        if self._scatters():  # JAX's: x over a scatter-mul of v into ones
            return self.x / _AtIndex(_ones_like(self.x), self.key).multiply(v, **kw)
        if kw.get("out_sharding") is not None:
            return self._auto("divide", v, kw["out_sharding"])
        return self.set(self.get() / v)

    def power(self, v, **kw):
        if self._scatters():  # JAX's: x to a scatter-mul of v into ones
            return self.x ** _AtIndex(_ones_like(self.x), self.key).multiply(v, **kw)
        if kw.get("out_sharding") is not None:
            return self._auto("power", v, kw["out_sharding"])
        return self.set(self.get() ** v)

    def min(self, v, *, indices_are_sorted=False, unique_indices=False, mode=None,
            out_sharding=None):
        if self._scatters():
            return self._scatter("scatter_min", v, out_sharding)
        if out_sharding is not None:
            return self._auto("min", v, out_sharding)
        self._laid_out(*self._box()[1:])
        return self.set(_call_op("minimum", self.get(), v))

    def max(self, v, *, indices_are_sorted=False, unique_indices=False, mode=None,
            out_sharding=None):
        if self._scatters():
            return self._scatter("scatter_max", v, out_sharding)
        if out_sharding is not None:
            return self._auto("max", v, out_sharding)
        self._laid_out(*self._box()[1:])
        return self.set(_call_op("maximum", self.get(), v))


def _updates(x, v, shape):
    """The updates of a scatter into x: v (a traced value, a number, or a
    numpy array: a constant) in x's dtype, broadcast to shape."""
    if isinstance(v, Tracer):
        upd = v
    elif np.ndim(v) == 0:
        upd = _call_op("full", shape, v, dtype=x.dtype)
    else:
        upd = _constant(np.asarray(v).astype(x.dtype))
    if upd.dtype != x.dtype:
        upd = upd.astype(x.dtype)
    return _broadcast_to(upd, shape)


def _ones_like(x):
    """ones of x's type (its sharding too, in a jit body)."""
    kw = {}
    if _builder().kind == "jit":
        kw["out_sharding"] = P(*map(_spec_entry, _dims(x.type)))
    return _call_op("ones", tuple(x.shape), dtype=x.dtype, **kw)


def _spec_entry(dim):
    """The PartitionSpec entry of one dimension of a type: '8@i' -> 'i',
    '8@(i,j)' -> ('i', 'j'), '8' -> None."""
    if "@" not in dim:
        return None
    a = dim.split("@", 1)[1]
    return tuple(a[1:-1].split(",")) if a.startswith("(") else a


def _entries(v):
    """v's PartitionSpec entries over Explicit mesh axes, one per dimension
    (None where unsharded): of an Array or a value of a jit body; None in a
    shard_map body (values are blocks) or for a value without a type."""
    b = getattr(_state, "builder", None)
    t = getattr(v, "type", None)
    if (b is not None and b.kind != "jit") or not isinstance(t, str) or "[" not in t:
        return None
    return [_spec_entry(d) for d in _dims(t)]


def _explicit_dims(v):
    """The dimensions of v's type sharded over Explicit mesh axes (_entries'
    that are not None)."""
    ents = _entries(v)
    return set() if ents is None else {d for d, e in enumerate(ents) if e is not None}


def _dims(t):
    """The dimensions of type string t: f32[8@i,4] -> ['8@i', '4'],
    f32[8@(i,j),4] -> ['8@(i,j)', '4']."""
    inner = t[t.index("[") + 1:t.rindex("]")]
    return re.findall(r"[^,(]+(?:\([^)]*\))?", inner)


def _type_str(dtype, shape, ents):
    """The type string of shape laid out as PartitionSpec entries ents:
    f32[8@x,4], f32[8@(x,y)]."""
    def one(n, e):
        if e is None:
            return str(n)
        return f"{n}@{e}" if isinstance(e, str) else f"{n}@({','.join(e)})"
    return f"{dtype}[{','.join(one(n, e) for n, e in zip(shape, ents))}]"


def scatter_refused(operand, indices, updates, nvec=1):
    """JAX's sentence for a scatter its sharding rule cannot lay out
    without out_sharding= (_scatter_sharding_rule), given the three type
    strings (indices' without JAX's trailing index-vector dimension, of
    nvec entries)."""
    close = indices.index("]")  # the dimensions end here (an unreduced {U:..} may follow)
    t = indices[:close] + ("," if _dims(indices) else "") + str(nvec) + indices[close:]
    return ProgramError("Use `.at[...].set/add/mul/...(out_sharding=)` to provide output "
                        "PartitionSpec for the scatter update as out sharding could not be "
                        "resolved unambiguously (or would require collectives on inputs). Got "
                        f"operand={operand}, indices={t}, updates={updates}")


def _index_value(k):
    """An index array as a traced value: a Tracer as it is, an Array or a
    numpy array / list (uploaded replicated on the program's mesh, as JAX
    embeds a constant) captured by the jit being traced."""
    if isinstance(k, Tracer):
        return k
    if isinstance(k, Array):
        return Tracer(_builder().capture(k), k.type, _dtype_name(k.dtype), k.shape)
    a = np.asarray(k)
    if a.dtype.kind not in "iub":
        raise InvalidArgument(f"indices must be integers, got {a.dtype}")
    return _constant(a if a.dtype.kind == "b" else a.astype(np.int32))


def _constant(a):
    """numpy array a as a value of the function being traced: uploaded
    replicated on its mesh and closed over, as JAX embeds a constant."""
    b = _builder()
    mesh = getattr(b, "mesh", None)
    if mesh is None:
        raise InvalidArgument("a numpy constant in a function with no mesh: pass it as an "
                              "argument")
    k = _client_of([], mesh).device_put(a, NamedSharding(mesh, P()))
    return Tracer(b.capture(k), k.type, _dtype_name(k.dtype), k.shape)


def _numpy_constant(a):
    """A numpy array met as an operand (x @ W, x + mask, a closed-over
    table) as JAX takes one: with JAX's default dtypes (float64 as float32,
    int64 as int32, without x64) and not weak, a constant of the program
    (_constant), uploaded once per array and trace."""
    b = _builder()
    got = b.constants.get(id(a))
    if got is None or got[0] is not a:
        from .numpy import _to_device
        got = b.constants[id(a)] = (a, _to_device(a))
    return got[1]


def _broadcast_to(v, shape):
    return v if tuple(v.shape) == tuple(shape) else _call_op("broadcast_to", v, tuple(shape))


def _masked_reduce(op, x, axis, keepdims, dtype, initial, where):
    """x.sum(where=..., initial=...) and the like: jnp's reduction."""
    from . import numpy as jnp
    kw = {"axis": axis, "keepdims": keepdims, "where": where}
    if dtype is not None:
        kw["dtype"] = dtype
    if initial is not None:
        kw["initial"] = initial
    return getattr(jnp, op)(x, **kw)


def _reduce(op, x, axis, keepdims, dtype=None):
    kw = {}
    if axis is not None:
        kw["axis"] = axis
    if dtype is not None:
        kw["dtype"] = dtype
    if keepdims:
        kw["keepdims"] = True
    return _call_op(op, x, **kw)


# (KeyArray, its op rule): shmap.random's key arrays, which _call_op hands
# the ops given one (set when shmap.random is imported)
_key_op = None


def _call_op(name, *args, **kwargs):
    if _key_op is not None and any(isinstance(a, _key_op[0]) or type(a) in (list, tuple) and
                                   any(isinstance(e, _key_op[0]) for e in a) for a in args):
        return _key_op[1](name, args, kwargs)
    axes = _vmap.named_axes(name, args, kwargs)
    if axes is not None:  # a collective over a vmap's axis_name
        return _vmap.named(name, args, kwargs, axes)
    if _vmap.batched(args, kwargs):  # inside vmap: the op's batching rule
        return _vmap.apply(name, args, kwargs)
    weak = False
    if name in _elementwise_ops():
        args, weak = _weak_args(name, args)
    parts = [_fmt(a) for a in args] + [f"{k}={_fmt(v)}" for k, v in kwargs.items()
                                       if v is not None]
    r = _builder().emit(f"{name}({', '.join(parts)})", name, args, kwargs)
    if weak and name not in _COMPARISONS and isinstance(r, Tracer):
        r.weak_type = True
    return r


_COMPARISONS = {"<", "<=", ">", ">=", "==", "!=", "equal", "not_equal", "less", "less_equal",
                "greater", "greater_equal", "logical_and", "logical_or", "logical_xor",
                "logical_not", "sign"}
_ELEMENTWISE = []


def _elementwise_ops():
    """The op table's elementwise ops (of operands x, y, or where's): a
    weakly typed operand takes their other operands' dtype (_weak_args)."""
    if not _ELEMENTWISE:
        _ELEMENTWISE.append({n for n, sig, *_ in _shmap.op_table()
                             if sig in ("x:v", "x:v y:v", "condition:v x:v y:v")})
    return _ELEMENTWISE[0]


def _is_weak(a):
    return isinstance(a, Tracer) and a.weak_type


_KIND = {"b": 0, "i": 1, "u": 1, "f": 2}


def _weak_args(name, args):
    """(args, whether the result is weak) of an elementwise op, as JAX's
    promotion of weak types has them: a weakly typed value (a Python
    number a jit was given) meeting arrays of a dtype of its kind or a
    higher one takes theirs (lr * w of float16 is float16, n + pixels of
    uint8 uint8); one of a higher kind keeps its own (2.5 * an int32 array
    is float32). The result is weak when every array operand is."""
    if not any(_is_weak(a) for a in args):
        return args, False
    vals = args[1:] if name == "where" else args
    strong = [np.dtype(a.dtype) for a in vals
              if isinstance(a, (Tracer, Array, np.ndarray)) and not _is_weak(a)]
    if not strong:
        return args, True
    sdt = np.result_type(*strong)

    def cast(a):
        if not _is_weak(a):
            return a
        wdt = np.dtype(a.dtype)
        if wdt != sdt and _KIND.get(wdt.kind, 2) <= _KIND.get(sdt.kind, 2):
            return _call_op("astype", a, sdt)
        return a
    return tuple(cast(a) if k or name != "where" else a for k, a in enumerate(args)), False


def _axes_size(axes):
    b = _builder()
    axes = (axes,) if isinstance(axes, str) else tuple(axes)
    sizes = dict(zip(b.mesh.axis_names, b.mesh.axis_sizes))
    vm = _vmap.axis_sizes()
    for a in axes:
        if b.manual_axes is not None and a in sizes and a not in b.manual_axes and a not in vm:
            raise NameError(f"unbound axis name: {a}")
    sizes.update(vm)  # vmap's named axes
    try:
        return math.prod(sizes[a] for a in axes)
    except KeyError as e:
        raise InvalidArgument(f"unknown axis name {e.args[0]!r}: the mesh has "
                              f"{b.mesh.axis_names}") from None


def _scalar_as_jax(a):
    """A jit argument as an array: Python's bool, int and float as JAX
    takes them without x64 (bool, int32, float32); numpy values keep their
    dtype, but uint32 (raw PRNG keys), which becomes int64 key data
    (shmap.random takes it traced; a KeyArray is a pytree node of its data,
    which comes here as int64)."""
    if isinstance(a, bool):
        return np.asarray(a)
    if isinstance(a, int):
        return np.asarray(a, np.int32)
    if isinstance(a, float):
        return np.asarray(a, np.float32)
    a = np.asarray(a)
    return a.astype(np.int64) if a.dtype == np.uint32 else a


def _eager_value(t):
    """The value of t, a value of the body of a shard_map called at once that
    is the same on every device (its type varies over no axis and holds no
    partial sums), as a numpy array: the program traced so far is run,
    returning it (out_specs P()), as JAX's eager shard_map has it at hand
    for Python's control flow. None where it cannot be had so (a jit body,
    a loop being traced, a varying value, a size other than 1)."""
    b = getattr(t, "_owner", None) or getattr(_state, "builder", None)
    e = getattr(b, "eager", None)
    if e is None or b.loops or getattr(_state, "builder", None) is not b or \
            isinstance(t, _vmap.BatchTracer) or math.prod(t.shape) != 1:
        return None
    b.resolve()
    if re.search(r"\{[^}]*\b(?:V|U|U_max|U_min):", t.type):
        return None
    traced, client, arrays, mesh = e
    text = b.text(ret=t.name, out="P()")
    try:
        job = client._c.submit(text, f"{traced._name}.shmap", None,
                               [a.id for a in list(arrays) + b.captured], [], True)
    except _shmap.Error as err:
        _raise(err, program=True)
    b.concretized = True
    out = Future(client, job, traced._finish(client, False, mesh)).result()
    return out.to_numpy().reshape(())


def _capture_closed(b, a):
    """b.capture(a) for an Array the user's function closes over (not one of
    shmap's own constants): one of a mesh with Explicit axes in a shard_map
    body Manual over them is JAX's NotImplementedError (core's
    canonicalization of a call's arguments in that body)."""
    mesh = getattr(b, "mesh", None)
    if b.kind != "shard_map" or mesh is None or \
            not any(t == Explicit for t in a.sharding.mesh.axis_types):
        return b.capture(a)
    manual = b.manual_axes or mesh.axis_names
    if all(t != Explicit or n in manual for n, t in zip(mesh.axis_names, mesh.axis_types)):
        raise NotImplementedError(
            f"Closing over inputs to shard_map where the input is sharded on `Explicit` axes "
            f"is not implemented. As a workaround, please pass those inputs as an argument to "
            f"shard_map. Got input with shape {a.type}")
    return b.capture(a)


def _as_operand(a):
    """An argument of a call inside a traced function: a numpy value or
    number a constant of the program, an Array the one the function closes
    over (as JAX embeds both), anything else as it is."""
    if isinstance(a, Array):
        return Tracer(_capture_closed(_builder(), a), a.type, _dtype_name(a.dtype), a.shape)
    return _numpy_constant(np.asarray(a)) if _is_constant(a) else a


def _is_constant(v):
    """v is a number or numpy array of a dtype a program holds (a constant
    of it, as JAX embeds one)."""
    return isinstance(v, (numbers.Real, np.generic, np.ndarray)) and \
        np.asarray(v).dtype.kind in "biuf"


def _constant_results(res):
    """res, a traced function's pytree of results, with the numbers and
    numpy arrays among them made constants of the program (arrays, as JAX
    returns them), and the Arrays it closes over its parameters (a model's
    state returned unchanged)."""
    def traced(v):
        if isinstance(v, Array):
            return Tracer(_capture_closed(_builder(), v), v.type, _dtype_name(v.dtype), v.shape)
        return _numpy_constant(np.asarray(v)) if _is_constant(v) else v
    if _is_constant(res) or isinstance(res, Array):
        return traced(res)
    leaves = _tree_leaves(res, "r")
    if not any(_is_constant(v) or isinstance(v, Array) for v, _ in leaves):
        return res
    return _tree_build(res, iter(traced(v) for v, _ in leaves))


def _flatten(v, who):
    """The traced values of a pytree of results (tuples, lists, dicts,
    namedtuples and registered classes of them, None for an empty subtree)
    in order, and its structure."""
    if isinstance(v, Tracer):
        return [v], "*"
    if v is None:
        return [], None
    n = _node(v)
    if n is not None:
        leaves, subs = [], []
        for e in n[0]:
            lv, d = _flatten(e, who)
            leaves += lv
            subs.append(d)
        return leaves, (n[2], subs)
    raise InvalidArgument(f"{who} must return traced values (or tuples, lists and dicts of "
                          f"them), got {type(v).__name__}")


def _prefix_leaves(prefix, tree, who):
    """One entry of prefix, a pytree prefix of tree, per leaf of tree: a
    leaf of prefix (a PartitionSpec, a NamedSharding, None) stands for
    every leaf of the subtree it meets, as JAX reads in_specs, out_specs
    and shardings."""
    if not _is_tree(prefix):
        return [prefix] * len(_leaves_but_none(tree, "t"))  # (None: an empty subtree)
    n, m = _node(prefix), _node(tree)
    if m is None or n[3] != m[3] or len(n[0]) != len(m[0]):
        raise InvalidArgument(f"{who} must be a pytree prefix of its arrays (one sharding for a "
                              f"subtree), got {prefix!r} for arrays of structure "
                              f"{m[3] if m else type(tree).__name__}")
    return [s for a, r in zip(n[0], m[0]) for s in _prefix_leaves(a, r, who)]


def _prefix_specs(specs, res, who):
    """The out_specs of each leaf of res, a pytree of results, from specs,
    a pytree prefix of it, as JAX's shard_map reads out_specs."""
    return [getattr(s, "spec", s) for s in _prefix_leaves(specs, res, f"{who}: out_specs")]


def _unflatten(tree, it):
    if tree == "*":
        return next(it)
    if tree is None:
        return None
    rebuild, subs = tree
    return rebuild([_unflatten(d, it) for d in subs])


class _Slot:
    """Where an Array stood among an eager call's arguments."""

    def __init__(self, i):
        self.i = i


def _eager(fn, args, kwargs):
    """fn(*args, **kwargs) now, outside any trace, as JAX dispatches an op
    outside jit: a jit program of that call, the Arrays among the arguments
    (also inside lists and tuples) its parameters, numpy arrays uploaded
    replicated on their mesh, everything else static. Returns what the
    program returns: Arrays. Inside a traced function (one that closes over
    the Arrays), the call is traced there instead."""
    arrays, mesh = [], None
    for v in list(args) + list(kwargs.values()):
        for a in (v if isinstance(v, (list, tuple)) else (v,)):
            if isinstance(a, Array) and mesh is None:
                mesh = a.sharding.mesh
    if mesh is None and getattr(_state, "builder", None) is None:  # numpy arrays only
        mesh = get_mesh() or _default_mesh()

    def strip(v):
        if isinstance(v, np.ndarray) and v.ndim == 0:
            return v.item()
        if isinstance(v, np.ndarray) and mesh is not None:
            v = _client_of(args, mesh).device_put(v, NamedSharding(mesh, P()))
        if isinstance(v, Array):
            arrays.append(v)
            return _Slot(len(arrays) - 1)
        if type(v) in (list, tuple):  # not a PartitionSpec
            return type(v)(strip(e) for e in v)
        return v

    def put(v, tracers):
        if isinstance(v, _Slot):
            return tracers[v.i]
        if type(v) in (list, tuple):
            return type(v)(put(e, tracers) for e in v)
        return v

    sargs = [strip(a) for a in args]
    skw = {k: strip(v) for k, v in kwargs.items()}
    b = getattr(_state, "builder", None)
    if b is not None:  # inside a traced function that closes over the Arrays: traced there
        tracers = [Tracer(_capture_closed(b, a), a.type, _dtype_name(a.dtype), a.shape)
                   for a in arrays]
        return fn(*[put(a, tracers) for a in sargs], **{k: put(v, tracers) for k, v in skw.items()})

    def call(*tracers):
        return fn(*[put(a, tracers) for a in sargs], **{k: put(v, tracers) for k, v in skw.items()})

    call.__name__ = getattr(fn, "__name__", "f")
    return _Traced(call, "jit")(*arrays)


def _is_number(a):
    """A Python or numpy number, or a 0-d numpy array."""
    return isinstance(a, (numbers.Number, np.generic)) and not isinstance(a, type) or \
        isinstance(a, np.ndarray) and a.ndim == 0


def _scalars_now(name, args):
    """An op of the op table called outside a trace on numbers only (no
    arrays; jnp.sqrt(2.0), jnp.maximum(1.0, 2.0)) runs at once, its first
    operand as JAX's array of it (the others numbers, as with an array), when
    there is a cluster (the mesh set, else the default
    device); collectives and creation ops are not computations of them."""
    return getattr(_state, "builder", None) is None and name not in _CREATION and \
        name not in ("axis_size", "axis_index", "psum", "pmean", "pmax", "pmin") and \
        bool(args) and _is_number(args[0]) and \
        not any(isinstance(a, (np.ndarray, Array, list, tuple)) and not _is_number(a)
                for a in args) and (get_mesh() is not None or bool(_default))


def _holds_array(args, kwargs):
    return any(isinstance(a, Array) or (isinstance(a, (list, tuple)) and
                                        any(isinstance(e, Array) for e in a))
               for a in list(args) + list(kwargs.values()))


def _run_now(args, kwargs):
    """An op or jnp function called outside any trace runs at once (_eager)
    on Arrays among its arguments, or on numpy arrays when there is a mesh
    for them: set_mesh's, else the default device (JAX's jnp.sin(x) of a
    numpy x)."""
    if getattr(_state, "builder", None) is not None:
        return False
    if _holds_array(args, kwargs):
        return True
    numpy_arg = any(isinstance(a, np.ndarray) and a.ndim or (
        isinstance(a, (list, tuple)) and any(isinstance(e, np.ndarray) and e.ndim for e in a))
        for a in list(args) + list(kwargs.values()))
    return bool(numpy_arg) and (get_mesh() is not None or bool(_default))


# Ops that make an array from nothing: outside a trace they run at once on the
# mesh of set_mesh / use_mesh (jnp.zeros((4, 1), out_sharding=P('X', None))).
_CREATION = {"zeros", "ones", "full", "arange"}


def _host_create(name, *args, dtype=None, out_sharding=None, **kw):
    """zeros, ones, full and arange outside a trace with no mesh set: a numpy
    array here, with JAX's default dtypes (float32, int32), which a call or
    device_put then uploads (as JAX's array on its default device)."""
    if out_sharding is not None:
        raise InvalidArgument(f"{name}(..., out_sharding=...) outside a traced function needs a "
                              f"mesh: shmap.set_mesh(mesh) or `with shmap.use_mesh(mesh):`")
    at = {"zeros": 1, "ones": 1, "full": 2, "arange": 3}[name]  # a positional dtype
    if len(args) > at:
        args, dtype = args[:at], args[at]
    if name == "arange":
        vals = [v for v in args[:3] if v is not None]
        dt = dtype or (np.int32 if all(isinstance(v, numbers.Integral) for v in vals)
                       else np.float32)
        return np.arange(*vals, dtype=dt)
    if name == "full":
        fill = args[1] if len(args) > 1 else kw["fill_value"]
        dt = dtype or (np.bool_ if isinstance(fill, bool) else
                       np.int32 if isinstance(fill, numbers.Integral) else np.float32)
        return np.full(args[0], fill, dtype=dt)
    return (np.zeros if name == "zeros" else np.ones)(args[0], dtype=dtype or np.float32)


def _on_device(create, args, kwargs):
    """jnp.zeros/ones/full/arange(..., device=): a NamedSharding is the
    result's sharding (on its mesh, JAX's out_sharding), a Device the one
    device it lives on (made here, then put there; nothing under a
    trace, as JAX's device_put of a device in jit)."""
    from ._core import Device, device_put
    dev = kwargs.pop("device")
    if kwargs.get("out_sharding") is not None:
        raise ValueError("Only one of `device` or `out_sharding` can be set.")
    if isinstance(dev, Device):
        x = create(*args, **kwargs)
        return x if getattr(_state, "builder", None) is not None else device_put(x, dev)
    if not isinstance(dev, NamedSharding):
        raise TypeError(f"device= takes a Device or a NamedSharding, got {type(dev).__name__}")
    if getattr(_state, "builder", None) is not None:
        return create(*args, out_sharding=dev, **kwargs)
    with _use_mesh(dev.mesh):
        return create(*args, out_sharding=dev.spec, **kwargs)


def make_op(name):
    """The Python function of op `name` (from the C op table): traced inside
    shard_map and jit functions; called on Arrays outside them, run now
    (_eager)."""
    def op(*args, **kwargs):
        if "dtype" in kwargs:  # Python's float and int: JAX's float32 and int32
            kwargs["dtype"] = _canon_dtype(kwargs["dtype"])
        if any(a in (float, int) for a in args if isinstance(a, type)):
            args = tuple(_canon_dtype(a) if isinstance(a, type) else a for a in args)
        if name in _CREATION and kwargs.get("device") is not None:
            return _on_device(op, args, kwargs)
        if name in _CREATION:
            kwargs.pop("device", None)
        if getattr(_state, "builder", None) is None and name in _CREATION and \
                not _holds_array(args, kwargs) and get_mesh() is None:
            return _host_create(name, *args, **kwargs)
        if _run_now(args, kwargs) or (getattr(_state, "builder", None) is None and
                                      name in _CREATION and get_mesh() is not None):
            return _eager(op, args, kwargs)  # at once; creation on the mesh of set_mesh
        if _scalars_now(name, args):  # jnp.sqrt(2.0): numbers as JAX's arrays, at once
            from .numpy import asarray
            return _eager(lambda: op(asarray(args[0]), *args[1:], **kwargs), (), {})
        if name == "axis_size":  # a static number, as in JAX
            return _axes_size(args[0] if args else kwargs["axis_name"])
        if name in ("psum", "pmean", "pmax", "pmin") and args and \
                isinstance(args[0], numbers.Number):
            n = _axes_size(args[1] if len(args) > 1 else kwargs["axis_name"])
            return args[0] * n if name == "psum" else args[0]
        return _call_op(name, *args, **kwargs)
    op.__name__ = name
    return op


# ---- shard_map and jit -----------------------------------------------------


def _client_of(args, mesh):
    for a in args:
        if isinstance(a, Array):
            return a._client
    if mesh is not None and mesh._client is not None:
        return mesh._client
    if _default:
        return _default[0]
    raise InvalidArgument("no client: call shmap.connect() or use shmap.local_cluster(), or "
                          "pass Arrays")


# pytree node classes registered with tree_util.register_pytree_node:
# type -> (flatten(v) -> (children, aux), unflatten(aux, children) -> v)
_NODES = {}


def _node(v):
    """A pytree node's (children, keys, rebuild, tag), or None for a leaf:
    tuples, lists, dicts (children in sorted key order, as JAX flattens
    them; rebuilt in the dict's own order), namedtuples (their fields) and
    classes of register_pytree_node; a PartitionSpec is a leaf. tag names
    the node's structure (the class, dict keys, registered aux data)."""
    t = type(v)
    if t is tuple or t is list:
        return list(v), list(range(len(v))), t, t.__name__
    if isinstance(v, dict):
        keys = sorted(v)
        order = list(v)
        factory = getattr(v, "default_factory", None)

        def rebuild(cs, keys=keys, order=order, t=t, factory=factory):
            got = dict(zip(keys, cs))
            pairs = [(k, got[k]) for k in order]
            if t is dict:
                return dict(pairs)
            try:  # OrderedDict, defaultdict: their own class back
                return t(factory, pairs) if isinstance(v, collections.defaultdict) else t(pairs)
            except TypeError:
                return dict(pairs)
        return [v[k] for k in keys], keys, rebuild, ("dict", tuple(keys))
    if t in _NODES:
        flat, unflat = _NODES[t]
        children, aux = flat(v)
        children = list(children)
        return children, list(range(len(children))), \
            (lambda cs, aux=aux: unflat(aux, list(cs))), (t, aux)
    if isinstance(v, tuple) and hasattr(t, "_fields"):  # a namedtuple
        return list(v), list(t._fields), (lambda cs: t(*cs)), t
    return None


def _is_tree(v):
    """A pytree node: a tuple, list, dict, namedtuple or registered class
    (a PartitionSpec is a leaf)."""
    return _node(v) is not None


def _tree_leaves(v, name):
    """(leaf, path name) pairs of a pytree, depth first, dict keys sorted (as
    JAX flattens them)."""
    n = _node(v)
    if n is None:
        return [(v, name)]
    return [x for c, k in zip(n[0], n[1]) for x in _tree_leaves(c, f"{name}_{k}")]


def _static_key(key, shape):
    """JAX's checks of an index's static parts: slices' bounds static (an
    IndexError naming lax.dynamic_slice), a scalar True a new axis (False,
    an empty one, refused), a boolean mask of the shape it covers."""
    out, d = [], 0
    for j, k in enumerate(key):
        if isinstance(k, slice) and any(hasattr(b, "type") or isinstance(b, Array)
                                        for b in (k.start, k.stop, k.step)):
            raise IndexError(f"Array slice indices must have static start/stop/step to be used "
                             f"with NumPy indexing syntax. Found {k}. To index a statically "
                             f"sized array at a dynamic position, try lax.dynamic_slice/"
                             f"dynamic_update_slice (JAX does not support dynamically sized "
                             f"arrays within JIT compiled functions).")
        if isinstance(k, (bool, np.bool_)):
            if not k:
                raise NotImplementedError("indexing with a scalar False (a new axis of size 0) "
                                          "is not supported")
            out.append(None)  # numpy's and JAX's: a new axis of size 1
            continue
        if isinstance(k, (list, np.ndarray)) and np.asarray(k).dtype == np.bool_ and \
                np.ndim(k):
            k = np.asarray(k)
            want = tuple(shape[d:d + k.ndim])
            if k.shape != want:
                raise IndexError(f"boolean index did not match shape of indexed array in index "
                                 f"{j}: got {k.shape}, expected {want}")
            d += k.ndim
        elif k is not None:
            d += 1
        out.append(k)
    return tuple(out)


def _clamped_ints(key, shape):
    """An index's static integers as JAX's indexing reads them: a negative
    one counts from the end, then each is clamped into its dimension (JAX
    returns the edge for an index out of bounds where numpy raises)."""
    out, d = [], 0
    for k in key:
        if isinstance(k, (numbers.Integral, np.integer)) and not isinstance(k, (bool, np.bool_)) \
                and d < len(shape):
            n = shape[d]
            i = int(k) + n if k < 0 else int(k)
            k = min(max(i, 0), n - 1) if n else k
        if k is not None:
            d += 1
        out.append(k)
    return tuple(out)


def _scalar_index(k):
    """k indexes as a slice does (JAX's static or dynamic slice, not a
    gather): a slice, None, Ellipsis, an int or a 0-d integer value."""
    if k is None or k is Ellipsis or isinstance(k, (slice, numbers.Integral)):
        return not isinstance(k, bool)
    if isinstance(k, (Tracer, Array, np.ndarray)):
        return tuple(k.shape) == () and np.issubdtype(np.dtype(k.dtype), np.integer)
    return False


def _leaves_but_none(v, name):
    """_tree_leaves with None an empty subtree (JAX's, for a jit's arguments:
    {'w': w, 'b': None})."""
    return [(x, n) for x, n in _tree_leaves(v, name) if x is not None]


def _tree_sig(v):
    """A pytree's structure (containers, dict keys) with its leaves left out."""
    n = _node(v)
    if n is None:
        return "*"
    return (n[3], tuple(_tree_sig(c) for c in n[0]))


def _tree_build(v, it, none_empty=False):
    """v's structure with its leaves taken from it, in _tree_leaves' order;
    with none_empty, None stays None and takes no leaf (_leaves_but_none's)."""
    n = _node(v)
    if n is None:
        return None if none_empty and v is None else next(it)
    return n[2]([_tree_build(c, it, none_empty) for c in n[0]])


def _param_names(f, n):
    try:
        names = [p.name for p in inspect.signature(f).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        names = []
    names = names[:n] + [f"arg{k}" for k in range(len(names), n)]
    out = []
    for name in names:  # names of the text form, not a value's (v1, ...), each once
        m = name if name.isascii() and name.isidentifier() and not name.startswith("v") else \
            f"a_{_ascii_name(name)}"
        k, base = 2, m
        while m in out:
            m, k = f"{base}_{k}", k + 1
        out.append(m)
    return out


# Names a program's body may call or read: a function of the file by one of
# them would stand for it there (a jit function named sum calling jnp.sum).
_TEXT_NAMES = ({row[0] for row in _shmap.op_table()} | set(_DTYPES) |
               {"P", "range", "auto_axes", "explicit_axes", "jax", "jnp", "lax", "numpy", "np", "float32",
                "float64", "int32", "int64", "uint8", "float16", "bool_", "True", "False",
                "None"})


def _ascii_name(name):
    """A name of the text form (ASCII letters, digits and '_') for a Python
    function's: '<lambda>' becomes 'lambda', non-ASCII letters 'f', and one
    its body could mean otherwise (an op's, 'sum') gets a '_fn' suffix."""
    n = re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_")
    n = n if n and not n[0].isdigit() else "f" + (f"_{n}" if n else "")
    return n + "_fn" if n in _TEXT_NAMES else n


def _type_decl(a, spec):
    return f"{_dtype_name(a.dtype)}[{','.join(map(str, a.shape))}] @ {spec!r}"


class Lowered:
    """jit(f).lower(*args): the program, its text (as_text), its input
    types (in_avals, JAX's: shapes, dtypes and shardings on the abstract
    mesh) and compile() (a Compiled: the same, callable)."""

    def __init__(self, text, info, fn=None, nargs=0):
        self._text, self._info, self._fn, self._nargs = text, info, fn, nargs

    @property
    def in_avals(self):
        """((one ShapeDtypeStruct per array argument, in order), {}), as
        JAX's lowered.in_avals."""
        from ._core import _spec_of
        mesh = self._info.get("mesh_obj")
        am = mesh.abstract_mesh if mesh is not None else None
        avals = tuple(ShapeDtypeStruct(tuple(shape), _DTYPES[dt],
                                       NamedSharding(am, _spec_of(sp)) if am is not None else None)
                      for _, dt, shape, sp in self._info.get("params", [])[:self._nargs])
        return (avals, {})

    def compile(self):
        """JAX's lowered.compile(): the program checked already; calling the
        result runs it."""
        return Compiled(self)

    def as_text(self):
        """The program's text form (for jit: the shard_map program it lowers to
        follows under `# lowered:`)."""
        if self._info["kind"] == "jit":
            return self._text + "\n# lowered:\n" + self._info["lowered"]
        return self._text

    __str__ = as_text  # make_jaxpr's result prints as a jaxpr does


class Compiled:
    """What Lowered.compile() gives: in_avals and as_text as the Lowered's,
    and a call that runs the function (the service compiles nothing ahead:
    a job runs the checked program)."""

    def __init__(self, lowered):
        self._lowered = lowered
        self.in_avals = lowered.in_avals

    def as_text(self):
        return self._lowered.as_text()

    def __call__(self, *args, **kwargs):
        if self._lowered._fn is None:
            raise InvalidArgument("this lowered program has no function to call")
        return self._lowered._fn(*args, **kwargs)


class Future:
    """A submitted job: .result(timeout), .cancel(), .done()."""

    def __init__(self, client, job, finish):
        self._client, self.job, self._finish = client, job, finish
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        self._fut = self._pool.submit(self._wait)

    def _wait(self):
        try:
            info = self._client._c.wait(self.job, -1)
        except _shmap.Error as e:
            _raise(e)
        return self._finish(info)

    def result(self, timeout=None):
        try:
            return self._fut.result(timeout)
        finally:
            if self._fut.done():
                self._pool.shutdown(wait=False)

    def done(self):
        return self._fut.done()

    def cancel(self):
        try:
            self._client._c.cancel(self.job)
        except _shmap.Error as e:
            _raise(e)
        return True


def _spec_key(spec, ndim):
    """A PartitionSpec's entries for an array of ndim dimensions (trailing
    Nones added, one-axis tuples as the axis), for comparing two."""
    out = []
    for e in tuple(spec) + (None,) * (ndim - len(tuple(spec))):
        e = tuple(e) if isinstance(e, (tuple, list)) else (e,) if e is not None else ()
        out.append(e)
    return tuple(out), tuple(sorted(getattr(spec, "unreduced", ()) or ()))


def _spec_rank_message(name, prefix, msgs, scalar):
    """JAX's _spec_rank_error: specs (prefix 'in' or 'out') longer than
    their values' ranks, one bullet of msgs each (scalar: one is rank 0)."""
    if len(msgs) == 1:
        msgs = [msgs[0][2:]]
    msg = (f"shard_map applied to the function '{name}' was given an {prefix}_specs entry which "
           f"is too long to be compatible with the corresponding {prefix}put value from the "
           f"function:\n\n" + "\n\n".join(msgs) + f"\n\nEntries in {prefix}_specs must be of "
           f"length no greater than the number of axes in the corresponding {prefix}put "
           f"value.\n\nEither revise the spec to be shorter, or modify '{name}' so that its "
           f"{prefix}puts have sufficient rank.")
    if scalar:
        msg += (f"\n\nFor scalar values (rank 0), consider using an {prefix}_specs entry of "
                f"`P()`, where `P = jax.sharding.PartitionSpec`.")
    return msg


class _NoOutputs(Exception):
    """A jit function whose results hold no array (None, (), {}): nothing to
    run; its call returns that structure, as JAX's."""

    def __init__(self, name, value):
        super().__init__(f"{name} must return at least one traced value")
        self.value = value


class _Done:
    """The Future of a call with nothing to run: its result, now."""

    def __init__(self, value):
        self.value = value

    def result(self, timeout=None):
        return self.value

    def done(self):
        return True

    def cancel(self):
        return False


def _to_sharding_mesh(sharding):
    """In a jit given no Arrays and no mesh (on the default device), a
    NamedSharding of another mesh given to with_sharding_constraint or
    device_put decides where it runs, as it decides JAX's device
    assignment: traced again on that mesh (_OnMesh)."""
    b = getattr(_state, "builder", None)
    if getattr(b, "mesh_default", False) and isinstance(sharding, NamedSharding) and \
            sharding.mesh != b.mesh:
        raise _OnMesh(sharding.mesh)


def _named_shardings(tree):
    """The meshes of the NamedShardings in a jit's in_ or out_shardings (a
    sharding, or tuples, lists and dicts of them), in order."""
    if isinstance(tree, NamedSharding):
        yield tree.mesh
    elif isinstance(tree, (tuple, list)) and not isinstance(tree, PartitionSpec):
        for t in tree:
            yield from _named_shardings(t)
    elif isinstance(tree, dict):
        for t in tree.values():
            yield from _named_shardings(t)


class _OnMesh(Exception):
    """Raised by a shard_map function called in the trace of a jit given no
    Arrays and no mesh (run on the default device): the jit runs on the
    shard_map's mesh instead, as JAX's does, traced again under it."""

    def __init__(self, mesh):
        super().__init__(mesh)
        self.mesh = mesh


_ALL_TRACED = weakref.WeakSet()  # every traced function, for clear_caches


def clear_caches():
    """jax.clear_caches: every jit and shard_map function forgets its traces."""
    for t in list(_ALL_TRACED):
        t._cache.clear()


def named_call(fun, *, name=None):
    """jax.named_call: fun itself (a name of the profiler's; programs have
    no names of calls)."""
    return fun


def pure_callback(callback, result_shape_dtypes, *args, vmap_method=None, **kwargs):
    """jax.pure_callback: at once outside a trace, callback of the values
    (numpy); in a traced function refused: the program runs on the
    service's workers, which cannot call back into this Python process."""
    if getattr(_state, "builder", None) is None:
        from ._core import device_get
        return callback(*device_get(list(args)), **device_get(dict(kwargs)))
    raise NotImplementedError("pure_callback inside a jit or shard_map: the program runs on "
                              "the service's workers, which cannot call into this Python "
                              "process; compute the callback's values outside the jit and pass "
                              "them in (jax.debug.callback runs after the job, for effects)")


class _Traced:
    """A function traced into a program when called."""

    def __init__(self, f, kind, mesh=None, in_specs=None, out_specs=None, check_vma=True,
                 out_shardings=None, static_argnums=(), static_argnames=(), axis_names=None):
        self._varkw = None
        f = self._positional(f)
        self.f, self.kind, self.mesh = f, kind, mesh
        self.axis_names = axis_names  # shard_map: a frozenset of mesh axes, or None (all)
        self.in_specs, self.out_specs, self.check_vma = in_specs, out_specs, check_vma
        self.out_shardings = out_shardings
        static = {static_argnums} if isinstance(static_argnums, int) else set(static_argnums)
        names = {static_argnames} if isinstance(static_argnames, str) else set(static_argnames)
        if names:
            params = list(inspect.signature(f).parameters)
            static |= {params.index(n) for n in names if n in params}
        self.static = static
        self.__name__ = getattr(f, "__name__", "f")
        self.__doc__ = getattr(f, "__doc__", None)
        self._name = _ascii_name(self.__name__)  # in the program's text
        self._cache = {}  # traces by signature (_trace_key), as jax.jit keeps them
        _ALL_TRACED.add(self)

    def __get__(self, obj, objtype=None):
        """A jit function defined in a class is a method, as JAX's (self its
        first argument: static_argnums=0 for a hashable self)."""
        if obj is None:
            return self
        return functools.partial(self, obj)

    def eval_shape(self, *args, **kwargs):
        """jit(f).eval_shape(*args): shmap.eval_shape of this function."""
        return eval_shape(self, *args, **kwargs)

    def trace(self, *args, **kwargs):
        """jit(f).trace(*args): JAX's Traced stage: .jaxpr (the program, as
        make_jaxpr gives it), .out_info (the results' ShapeDtypeStructs),
        .lower() (the Lowered)."""
        return _TracedStage(self, args, kwargs)

    def clear_cache(self):
        """Forgets this function's traces (JAX's jit(f).clear_cache())."""
        self._cache.clear()

    def _positional(self, f):
        """f, or for a function with keyword-only parameters or **kwargs (a
        model's apply(params, x, *, train)), one taking them positionally
        after the others, **kwargs as one dict (a pytree) last, which calls
        f with them as keywords: the traces take positional arguments."""
        try:
            params = list(inspect.signature(f).parameters.values())
        except (TypeError, ValueError):
            return f
        kinds = {p.kind for p in params}
        if inspect.Parameter.VAR_POSITIONAL in kinds or not kinds & {
                inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD}:
            return f
        pos = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        kwonly = [p for p in params if p.kind == p.KEYWORD_ONLY]
        varkw = next((p for p in params if p.kind == p.VAR_KEYWORD), None)
        self._varkw = varkw.name if varkw is not None else None

        def positional(*a):
            kw = {p.name: v for p, v in zip(kwonly, a[len(pos):len(pos) + len(kwonly)])}
            if varkw is not None and len(a) > len(pos) + len(kwonly):
                kw.update(a[len(pos) + len(kwonly)] or {})
            return f(*a[:len(pos)], **kw)
        P_ = inspect.Parameter
        sig = [p.replace(kind=P_.POSITIONAL_OR_KEYWORD) for p in pos + kwonly]
        if varkw is not None:
            sig.append(P_(varkw.name, P_.POSITIONAL_OR_KEYWORD, default=None))
        seen_default = False  # (a parameter without a default after one with it: given None)
        for k, p in enumerate(sig):
            seen_default = seen_default or p.default is not P_.empty
            if seen_default and p.default is P_.empty:
                sig[k] = p.replace(default=_REQUIRED)
        positional.__signature__ = inspect.Signature(sig)
        functools.update_wrapper(positional, f, assigned=("__name__", "__qualname__",
                                                          "__doc__", "__module__"))
        return positional

    def _args(self, args):
        """Arrays for the arguments (numpy values uploaded) and their specs."""
        specs = self.in_specs
        given = self.mesh
        if isinstance(given, AbstractMesh):  # the Arrays' mesh of its axes, or the context's
            given = given._concrete([a.sharding.mesh for a in args if isinstance(a, Array)] +
                                    [get_mesh()], self.__name__)
        if self.kind == "shard_map" and given is not None and not given.axis_names:
            raise ValueError(f"shard_map requires a non-empty mesh. Got {given!r}")
        if given is None and self.kind == "jit" and specs is not None:  # in_shardings' mesh
            given = next(_named_shardings(specs), None)
        if given is None and self.kind == "jit" and self.out_shardings is not None and \
                get_mesh() is None and not any(isinstance(a, Array) for a in args):
            given = next(_named_shardings(self.out_shardings), None)  # as JAX's device assignment
        client = _client_of(args, given or get_mesh())
        if self.kind == "shard_map":
            if specs is _INFER:
                m = given or get_mesh() or next((a.sharding.mesh for a in args
                                                 if isinstance(a, Array)), None)
                specs = self._inferred_specs(args, m)
            if isinstance(specs, PartitionSpec):
                specs = (specs,) * len(args)
            if len(specs) != len(args):
                raise InvalidArgument(f"{self.__name__} has {len(specs)} in_specs for "
                                      f"{len(args)} arguments")
        arrays, mesh = [], given
        if mesh is None and (self.kind == "shard_map" or
                             not any(isinstance(a, Array) for a in args)):
            mesh = get_mesh()  # the mesh of set_mesh / use_mesh (jit: numpy arguments only)
        if mesh is None:  # the Arrays' mesh, for numpy arguments before the first Array too
            mesh = next((a.sharding.mesh for a in args if isinstance(a, Array)), None)
        if mesh is None:  # ... or a ShapeDtypeStruct's
            mesh = next((a.sharding.mesh for a in args if isinstance(a, ShapeDtypeStruct)
                         and a.sharding is not None), None)
        if mesh is None and self.kind == "jit":  # JAX's default device: one device
            mesh = _default_mesh()
        if self.kind == "jit" and specs is not None:  # in_shardings
            specs = (specs,) * len(args) if isinstance(specs, (PartitionSpec, NamedSharding)) \
                else tuple(specs)
            if len(specs) != len(args):
                raise InvalidArgument(f"{self.__name__} has {len(specs)} in_shardings for "
                                      f"{len(args)} arguments")
        if self.kind == "shard_map":
            self._check_unreduced_axes(mesh, specs, "in")
            if not callable(self.out_specs):
                self._check_unreduced_axes(mesh, self.out_specs, "out")
            self._check_specs_vs_args(mesh, args, specs)
        for k, a in enumerate(args):
            want = specs[k] if self.kind == "jit" and specs is not None else None
            if isinstance(a, Array):
                am = a.sharding.mesh
                if mesh is None:
                    mesh = am
                elif self.kind == "jit" and (am.axis_names, am.axis_sizes, am._devices) != \
                        (mesh.axis_names, mesh.axis_sizes, mesh._devices or am._devices):
                    raise InvalidArgument(f"Mesh for all inputs should be equal. Got one mesh: "
                                          f"{mesh!r} and another mesh: {am!r}")
                if want is not None and _spec_key(getattr(want, "spec", want), a.ndim) != \
                        _spec_key(a.sharding.spec, a.ndim):
                    raise InvalidArgument(
                        f"Sharding passed to pjit does not match the sharding on the respective "
                        f"arg. Got pjit sharding: "
                        f"{NamedSharding(mesh, getattr(want, 'spec', want))!r},\narg sharding: "
                        f"{a.sharding!r} for arg shape: {a.dtype.name}"
                        f"[{','.join(map(str, a.shape))}]")
                arrays.append(a)
                continue
            if mesh is None and self.kind == "shard_map":  # JAX's sentence (a ValueError)
                raise InvalidArgument("The context mesh cannot be empty. Use `jax.set_mesh(mesh)` "
                                      "to enter into a mesh context (shmap.set_mesh / "
                                      "shmap.use_mesh), or pass mesh= or Arrays")
            if mesh is None:
                raise InvalidArgument("a jit function given numpy arguments needs a mesh: pass "
                                      "Arrays, decorate with shmap.jit(mesh=...), or set one "
                                      "with shmap.set_mesh / shmap.use_mesh")
            spec = specs[k] if self.kind == "shard_map" else \
                P() if want is None else getattr(want, "spec", want)
            if isinstance(a, ShapeDtypeStruct):  # a type without values: traced, never run
                if a.sharding is None or self.kind == "shard_map":
                    a = ShapeDtypeStruct(a.shape, a.dtype, NamedSharding(
                        mesh, getattr(a.sharding, "spec", spec) if self.kind == "jit"
                        else spec))
                arrays.append(a)
                continue
            arr = client.device_put(_scalar_as_jax(a), NamedSharding(mesh, spec))
            if self.kind == "jit" and isinstance(a, (int, float)) and not isinstance(a, bool):
                arr._weak = True  # a Python number: weakly typed in the trace, as JAX's
            arrays.append(arr)
        if mesh is None:
            raise InvalidArgument(f"{self.__name__}: a {self.kind} function called without "
                                  f"Arrays needs a mesh: "
                                  f"{'pass mesh=, or ' if self.kind == 'shard_map' else ''}"
                                  f"call it under shmap.sharding.use_mesh(mesh) or after "
                                  f"set_mesh(mesh)")
        if mesh._devices is None:
            client._mesh_c(mesh)
        return client, mesh, arrays, specs

    def _trace_key(self, bound, mesh, arrays, specs):
        """What a trace depends on besides the function: the static
        arguments' values, the other arguments' pytree structure, each
        array's type (dtype, shape, sharding) and the mesh, axis types
        included; None when a static argument cannot be hashed (no cache)."""
        statics = tuple((i, bound[i]) for i in sorted(self.static) if i < len(bound))
        for _, v in statics:
            try:
                hash(v)
            except TypeError as e:  # JAX's: a static argument is part of the trace's key
                raise ValueError(f"Non-hashable static arguments are not supported. An error "
                                 f"occurred while trying to hash an object of type {type(v)}, "
                                 f"{v}. The error was:\nTypeError: {e}") from None
        tree = tuple(_tree_sig(a) for i, a in enumerate(bound) if i not in self.static)
        key = (statics, tree, tuple((a.type, getattr(a, "_weak", False)) for a in arrays),
               (mesh._text(), tuple(mesh._devices or ())),
               tuple(map(repr, specs)) if self.kind == "shard_map" else None)
        try:
            hash(key)  # a registered pytree node's aux data may not hash: no cache then
        except TypeError:
            return None
        return key

    def _trace(self, args, prepared=None):
        client, mesh, arrays, specs = prepared or self._args(args)
        names = _param_names(self.f, len(arrays))
        if self.kind == "shard_map":
            params = [f"{n}: {_type_decl(a, s)}" for n, a, s in zip(names, arrays, specs)]
            head = f"shard_map {self._name}({', '.join(params)}) -> %OUT%:"
        else:
            params = [f"{n}: {_type_decl(a, a.sharding.spec)}" for n, a in zip(names, arrays)]
            head = f"jit {self._name}({', '.join(params)})%OUT%:"
        b = _Builder([mesh._text(), head], self.kind, names)
        b.mesh = mesh
        # a jit given no Arrays and no mesh runs on the default device, unless
        # it calls a shard_map function of a mesh of its own (_OnMesh)
        b.mesh_default = self.kind == "jit" and mesh is getattr(client, "_default_mesh", None) \
            and not any(isinstance(a, Array) for a in args)
        if self.kind == "shard_map":
            self._partial(b, mesh, True)
            self._unchecked(b)
        prev = getattr(_state, "builder", None)
        if prepared is not None and prev is None and self.kind == "shard_map" and \
                self.check_vma:  # called at once: JAX's eager shard_map (_eager_value)
            b.eager = (self, client, arrays, mesh)
        _state.builder = b
        try:
            tracers = []
            if names:
                info = b._check_ret(names[0])
                for k, n in enumerate(names):
                    ty, dt, shape = info["types"][k][:3]
                    tracers.append(Tracer(n, ty, dt, tuple(shape)))
                    if getattr(arrays[k], "_weak", False):
                        tracers[-1].weak_type = True
            res = _constant_results(self.f(*tracers))
            b.resolve()  # a bad op of a long program is found here, named by its line
        finally:
            _state.builder = prev
        if self.kind == "jit":  # a pytree of results: tuples, lists and dicts of them
            outs, multi = _flatten(res, self.__name__)
            if not outs:  # None, (), {}: nothing to compute, as JAX's returns them
                raise _NoOutputs(self.__name__, _unflatten(multi, iter(())))
        elif isinstance(res, tuple) and all(isinstance(o, Tracer) for o in res):
            multi = True
            outs = list(res)
        elif isinstance(res, Tracer):
            multi, outs = False, [res]
        else:  # a pytree of results (dicts, nested tuples): its out_specs a prefix of it
            outs, tree = _flatten(res, self.__name__)
            multi = ("tree", tree, res)
        for o in outs:
            if not isinstance(o, Tracer):
                raise InvalidArgument(f"{self.__name__} must return traced values, got "
                                      f"{type(o).__name__}")
        debug, extra = None, []
        if b.debug:  # the values debug.print names: results too
            from . import debug as _debug
            extra, entries = _debug._outputs(b)
            debug = (len(outs), entries, self.kind == "shard_map")
        out_text = None
        if self.kind == "shard_map" and not outs:  # (), {}: nothing to compute, as JAX's
            raise _NoOutputs(self.__name__, res)
        if self.kind == "shard_map":
            os_ = self.out_specs
            if callable(os_):  # pmap's: one spec per result, however many it has
                os_ = os_(len(outs))
            if isinstance(multi, tuple):
                os_ = _prefix_specs(os_, multi[2], self.__name__)
            if isinstance(os_, PartitionSpec):  # a prefix: one spec for every result
                os_ = (os_,) * (len(outs) if multi is True else 1)
            if len(os_) != len(outs):
                raise InvalidArgument(f"{self.__name__} returns {len(outs)} values but has "
                                      f"{len(os_)} out_specs")
            self._out_rank_check(outs, os_, multi is False)
            # debug rows: one per device, over every mesh axis
            os_ = tuple(os_) + (P(tuple(mesh.axis_names)),) * len(extra)
            out_text = repr(os_[0]) if len(os_) == 1 else "(" + ", ".join(map(repr, os_)) + ")"
        else:
            out_text = self._out_shardings_text(res, outs, extra)
        outs = outs + extra
        text = b.text(ret=", ".join(o.name for o in outs), out=out_text)
        try:
            info = _shmap.program_check(text, f"{self._name}.shmap", None, self.check_vma)
        except _shmap.Error as e:
            msg = e.args[1]
            if self.kind == "shard_map" and "varies over mesh ax" in msg:
                msg = self._vma_error(text, outs, os_, mesh, b.manual_axes, msg)
            raise ProgramError(msg) from None
        info["mesh_obj"] = mesh  # the results' mesh, axis types included
        info["debug"] = debug
        info["concretized"] = b.concretized  # its trace read values: not reused
        return client, arrays + b.captured, text, info, multi

    def _out_shardings_text(self, res, outs, extra):
        """The jit header's out specs from out_shardings, a pytree prefix of
        the results res (one sharding for all, a tuple or dict of them; a
        None entry leaves its results as the program lays them out, as
        JAX's), and P() for the results debug.print adds; "" without."""
        o = self.out_shardings
        if o is None:
            return ""
        if isinstance(o, (PartitionSpec, NamedSharding)) and len(outs) == 1 and not extra:
            return " -> " + repr(getattr(o, "spec", o))
        from .numpy import _spec_of_type
        given = _prefix_leaves(o, res, f"{self.__name__}: out_shardings")
        specs = [_spec_of_type(v.type) or P() if s is None else getattr(s, "spec", s)
                 for s, v in zip(given, outs)] + [P()] * len(extra)
        return " -> (" + ", ".join(map(repr, specs)) + ")"

    def _inline(self, outer, args):
        """A shard_map function called inside a jit body: its text becomes a
        shard_map function of the jit program's file, which the body calls
        (as a jit function of the text form calls one; the service lowers
        both into one per-device program). A jit function called there, or
        in a shard_map body, is traced into the caller's body (jax.jit
        inside jax.jit), its results resharded to its out_shardings (in a
        shard_map body over the axes it leaves out)."""
        if self.kind == "jit":  # traced into the caller's body, jit or shard_map (JAX inlines it)
            res = self.f(*args)
            o = self.out_shardings
            if o is None:
                return res
            leaves, tree = _flatten(res, self.__name__)
            specs = [o] * len(leaves) if isinstance(o, (PartitionSpec, NamedSharding)) else o
            if len(specs) != len(leaves):
                raise InvalidArgument(f"{self.__name__} returns {len(leaves)} values but has "
                                      f"{len(specs)} out_shardings")
            specs = [getattr(x, "spec", x) for x in specs]
            if outer.kind == "shard_map" and outer.manual_axes is None:
                # a body Manual over every axis: replicated only, nothing to move
                if any(n is not None for sp in specs for n in sp):
                    raise InvalidArgument(f"{self.__name__}: out_shardings {specs[0]} inside a "
                                          f"shard_map body Manual over every mesh axis")
                return res
            outs = [_call_op("reshard", v, sp) for v, sp in zip(leaves, specs)]
            return _unflatten(tree, iter(outs))
        if self.kind != "shard_map" or outer.kind not in ("jit", "shard_map"):
            raise InvalidArgument(f"{self.__name__}: only a shmap.jit function may call a "
                                  f"traced function, and only a shmap.shard_map one")
        t, args = self._split_trees(args)
        if t is not self:
            return t._inline(outer, args)
        args = tuple(_as_operand(a) for a in args)  # numpy values and Arrays: constants
        if not all(isinstance(a, Tracer) for a in args):
            raise InvalidArgument(f"{self.__name__}: inside a jit function, pass traced values "
                                  f"(the jit function's arguments or results of its ops)")
        if _vmap.batched(args):
            return self._batched_call(outer, args)
        mesh = getattr(outer, "mesh", None)
        if self.mesh is not None and mesh is not None and (
                tuple(self.mesh.axis_names) != tuple(mesh.axis_names) or
                tuple(self.mesh.axis_sizes) != tuple(mesh.axis_sizes)):
            if getattr(outer, "mesh_default", False):
                raise _OnMesh(self.mesh)
            raise InvalidArgument(f"{self.__name__}'s mesh {self.mesh._text()!r} is not the "
                                  f"jit function's {mesh._text()!r}")
        specs = self.in_specs
        if specs is _INFER:
            specs = self._inferred_specs(args, mesh or self.mesh)
        if isinstance(specs, PartitionSpec):
            specs = (specs,) * len(args)
        if len(specs) != len(args):
            raise InvalidArgument(f"{self.__name__} has {len(specs)} in_specs for "
                                  f"{len(args)} arguments")
        self._check_specs_vs_args(mesh or self.mesh, args, specs)
        key = (id(self), tuple(a.type for a in args))
        if key not in outer.defined:
            try:
                outer.defined[key] = self._define(outer, self._name, args, specs,
                                                  _param_names(self.f, len(args)),
                                                  lambda tracers: self.f(*tracers))
            except _NoOutputs as e:
                return e.value
        fname, nout, extra, (tree, flat_os, closed) = outer.defined[key]
        if extra:  # what the body closes over may differ at the next call: traced again then
            del outer.defined[key]
        call = f"{fname}({', '.join([a.name for a in args] + extra)})"
        kw = {"fn": self, "in_specs": tuple(specs), "out_specs": flat_os}
        ops = tuple(args)
        if any(v.name in lv.active for lv in _grad._levels(outer) if not lv.paused
               for v in closed):
            # values of the jit body it closes over that grad differentiates: for
            # grad, they are more arguments (in_spec P()) of the same body
            kw = {"fn": self._with_closed(closed, specs),
                  "in_specs": tuple(specs) + (P(),) * len(closed), "out_specs": flat_os}
            ops = ops + tuple(closed)
        res = outer.emit(call, "call", ops, kw) if nout == 1 else \
            outer.emit_multi(call, nout, "call", ops, kw)
        if tree is None:
            return res
        return _unflatten(tree, iter(res if isinstance(res, tuple) else (res,)))

    def _with_closed(self, closed, specs):
        """This shard_map function with the traced values closed (of the jit
        body that calls it) as more parameters, replicated: its body run with
        each of them standing for its parameter (in the program's text and
        on grad's tapes), for the backward pass of a call of it."""
        m = len(closed)

        def f(*ts):
            b = _builder()
            for v, t in zip(closed, ts[len(ts) - m:]):
                b.closed[id(v)] = t.name
                b.closed_as[id(v)] = t
            try:
                return self.f(*ts[:len(ts) - m])
            finally:
                for v in closed:
                    b.closed.pop(id(v), None)
                    b.closed_as.pop(id(v), None)
        f.__name__ = self.__name__
        return _Traced(f, "shard_map", self.mesh, tuple(specs) + (P(),) * m, self.out_specs,
                       self.check_vma, axis_names=self.axis_names)

    def _inferred_specs(self, args, mesh):
        """JAX's in_specs left out (its axes all Explicit): each argument's
        sharding over the Manual axes (JAX's _manual_spec)."""
        if mesh is None:
            raise InvalidArgument(f"{self.__name__}: shard_map without in_specs needs a mesh "
                                  f"(mesh=, set_mesh, or Array arguments)")
        from .numpy import _spec_of_type
        names = self.axis_names or frozenset(mesh.axis_names)
        types = dict(zip(mesh.axis_names, mesh.axis_types))
        other = [n for n in mesh.axis_names if n in names and types[n] != Explicit]
        if other:
            raise TypeError(f"shard_map in_specs argument must be a pytree of "
                            f"`jax.sharding.PartitionSpec` instances, but it was `None` when "
                            f"axis_names={names} are of type "
                            f"{', '.join('AxisType.' + types[n] for n in other)}")
        out = []
        for a in args:
            spec = a.sharding.spec if isinstance(a, Array) else \
                (_spec_of_type(a.type) or P()) if isinstance(a, Tracer) else P()
            entries = []
            for e in spec:
                if isinstance(e, tuple):
                    t = [n if n in names else None for n in e]
                    while t and t[-1] is None:
                        t.pop()
                    if None in t:
                        raise ValueError(f"Invalid spec: {spec}")
                    entries.append(tuple(t) if t else None)
                else:
                    entries.append(e if e in names else None)
            # and its pending sums over them (JAX's _manual_spec keeps
            # unreduced and reduced)
            u = getattr(spec, "unreduced", frozenset())
            r = getattr(spec, "reduced", frozenset())
            if isinstance(a, Tracer):
                axes = _type_axes(a)
                u, r = axes["U"], axes["R"]
            out.append(P(*entries, unreduced=[n for n in mesh.axis_names if n in u and n in names],
                         reduced=[n for n in mesh.axis_names if n in r and n in names]))
        return tuple(out)

    def _check_unreduced_axes(self, mesh, specs, prefix):
        """JAX's _check_unreduced: unreduced and reduced axes of specs (in or
        out) must be Explicit ones of the mesh (JAX's ValueError)."""
        if mesh is None or specs is None or specs is _INFER:
            return
        types = dict(zip(mesh.axis_names, mesh.axis_types))
        for sp in _tree_leaves(specs, "s"):
            sp = sp[0]
            for what in ("unreduced", "reduced"):
                axes = getattr(sp, what, None) if isinstance(sp, PartitionSpec) else None
                if axes and not all(types.get(u) == Explicit for u in axes):
                    raise ValueError(f"{what} in {prefix}_specs {sp!r} can only be used when "
                                     f"the mesh passed to shard_map contains axis names all of "
                                     f"type `Explicit`. Got mesh {mesh!r}")

    def _check_specs_vs_args(self, mesh, args, specs):
        """JAX's _check_specs_vs_args: an in_spec longer than its argument's
        rank, or naming mesh axes whose sizes do not divide the dimension,
        is refused with JAX's ValueError sentences (before anything moves)."""
        if mesh is None:
            return
        name = self.__name__
        single = isinstance(self.in_specs, PartitionSpec)
        sizes = dict(zip(mesh.axis_names, mesh.axis_sizes))

        def parameters():  # (JAX's _try_infer_args: none when the arguments do not bind)
            try:
                sig = inspect.signature(self.f)
                sig.bind(*[None] * len(args))
                return [p for p in sig.parameters.values()
                        if p.kind not in (p.KEYWORD_ONLY, p.VAR_KEYWORD)]
            except (TypeError, ValueError):
                return None

        def where(k):  # (only when refusing: a signature costs more than the checks)
            params = parameters()
            if params is None:
                return ""
            if k >= len(params) or params[k].kind == params[k].VAR_POSITIONAL:
                return (f", where args[{k}] is the index {k - len(params) + 1} component of "
                        f"{name}'s varargs parameter '{params[-1].name}',")
            return f", where args[{k}] is bound to {name}'s parameter '{params[k].name}',"

        def short(a):
            shape = tuple(np.shape(a)) if not hasattr(a, "shape") else tuple(a.shape)
            dt = getattr(a, "dtype", None)
            try:
                return shape, _short_type(dt if dt is not None else np.asarray(a).dtype, shape)
            except TypeError:  # a key array's dtype (key<fry>)
                return shape, f"{dt}[{','.join(map(str, shape))}]"
        long_, uneven = [], []
        for k, (a, sp) in enumerate(zip(args, specs)):
            if not isinstance(sp, PartitionSpec) or isinstance(a, ShapeDtypeStruct) and \
                    a.shape is None:
                continue
            shape, ty = short(a)
            key = "" if single else f"[{k}]"
            if len(sp) > len(shape):
                long_.append(f"* in_specs{key} is {sp!r} which has length {len(sp)}, but the "
                             f"passed args[{k}]{where(k)} has shape {ty}, which has rank "
                             f"{len(shape)} (and {len(shape)} < {len(sp)})")
                continue
            for d, e in enumerate(sp):
                ns = () if e is None else (e,) if isinstance(e, str) else tuple(e)
                if not ns or any(n not in sizes for n in ns):
                    continue
                sz = math.prod(sizes[n] for n in ns)
                if shape[d] % sz:
                    axis = f"axes {ns}" if len(ns) > 1 else f"axis '{ns[0]}'"
                    total = "total " if len(ns) > 1 else ""
                    uneven.append(f"* the passed args[{k}] of shape {ty}{where(k)} corresponds "
                                  f"to in_specs{key} of value {sp!r}, which maps array axis "
                                  f"{d} (of size {shape[d]}) to mesh {axis} (of {total}size "
                                  f"{sz}), but {sz} does not evenly divide {shape[d]}")
        if long_:
            raise ValueError(_spec_rank_message(name, "in", long_, any(
                not len(short(a)[0]) for a, sp in zip(args, specs)
                if isinstance(sp, PartitionSpec) and len(sp) > len(short(a)[0]))))
        if uneven:
            msgs = [uneven[0][2:]] if len(uneven) == 1 else uneven
            raise ValueError(
                f"shard_map applied to the function '{name}' was given argument arrays with "
                f"axis sizes that are not evenly divisible by the corresponding mesh axis "
                f"sizes:\n\nThe mesh given has shape {tuple(mesh.axis_sizes)} with "
                f"corresponding axis names {tuple(mesh.axis_names)}.\n\n" +
                "\n\n".join(msgs) + "\n\nArray arguments' axis sizes must be evenly "
                f"divisible by the mesh axis or axes indicated by the corresponding elements "
                f"of the argument's in_specs entry. Consider checking that in_specs are "
                f"correct, and if so consider changing the mesh axis sizes or else padding "
                f"the input and adapting '{name}' appropriately.")

    def _batched_call(self, outer, args):
        """A call under vmap (JAX's batching rule of shard_map): a shard_map
        of the vmap of the body, each batched argument passed with its batch
        first and its in_spec the batch's entry (None, or the Explicit axes
        the batch is sharded over) before its own, each result's out_spec
        likewise; its results are the batch."""
        bts = [a for a in args if isinstance(a, _vmap.BatchTracer)]
        level = max(a.level for a in bts)
        size = next(a.nbatch for a in bts if a.level == level)
        if any(isinstance(a.val, _vmap.BatchTracer) for a in bts) or \
                any(a.level != level for a in bts) or self.in_specs is _INFER or \
                any(_is_tree(a) for a in args):
            raise InvalidArgument(f"vmap of a call of the shard_map function {self.__name__}: "
                                  f"only of one vmap, on array arguments and with in_specs, is "
                                  f"supported")
        specs = self.in_specs
        specs = (specs,) * len(args) if isinstance(specs, PartitionSpec) else tuple(specs)
        if len(specs) != len(args):
            raise InvalidArgument(f"{self.__name__} has {len(specs)} in_specs for "
                                  f"{len(args)} arguments")

        # the batch keeps the sharding its values have over Explicit axes (as
        # JAX's vmap over an explicitly sharded dimension), if they agree and
        # the vmap names no axis of its own; else it is whole on every device
        on = [isinstance(a, _vmap.BatchTracer) for a in args]
        firsts = {_spec_entry(_dims(a.val.type)[0]) for a, b in zip(args, on) if b}
        batch = firsts.pop() if len(firsts) == 1 and \
            not any(lvl == level for _, lvl, _ in _vmap._NAMES) else None
        if batch is not None and self.axis_names and not set(
                (batch,) if isinstance(batch, str) else batch) <= set(self.axis_names):
            batch = None  # over axes left out of axis_names: their sharding stays in the types

        def lead(sp):  # the batch before each spec's dimensions (a pytree of them)
            return _tree_build(sp, iter(P(batch, *x, **x._ur())
                                        if isinstance(x, PartitionSpec) else x
                                        for x, _ in _tree_leaves(sp, "s")))
        f = _vmap.vmap(self.f, in_axes=tuple(0 if b else None for b in on))
        f.__name__ = self.__name__
        out_specs = self.out_specs
        t = _Traced(f, "shard_map", self.mesh,
                    tuple(lead(sp) if b else sp for sp, b in zip(specs, on)),
                    out_specs if callable(out_specs) else lead(out_specs), self.check_vma,
                    axis_names=self.axis_names)
        res = t._inline(outer, tuple(a.val if b else a for a, b in zip(args, on)))
        leaves = _tree_leaves(res, "r")
        return _tree_build(res, iter(_vmap.BatchTracer(v, size, level) if isinstance(v, Tracer)
                                     else v for v, _ in leaves))

    def _vma_error(self, text, outs, specs, mesh, manual, why):
        """JAX's sentence (_inout_vma_error) for the results of this
        shard_map that vary over axes their out_specs leave out, every one
        of them, then the service's (why, the first, with its remedy)."""
        try:
            types = _shmap.program_check(text, f"{self._name}.shmap", None, False)["types"]
        except _shmap.Error:
            return why
        by_name = {t[5]: t[0] for t in types if t[5]}
        msg = self._vma_message([by_name.get(o.name, "") for o in outs], specs, mesh, manual)
        return why if msg is None else f"{msg}\n\n{why}"

    def _out_rank_check(self, outs, specs, single):
        """JAX's _spec_rank_error for out_specs: an entry longer than its
        result's rank, JAX's ValueError (single: one result, no path)."""
        name, msgs, scalar = self.__name__, [], False
        for k, (o, sp) in enumerate(zip(outs, specs)):
            shape = tuple(o.shape)
            if not isinstance(sp, PartitionSpec) or len(sp) <= len(shape):
                continue
            key = "" if single else f"[{k}]"
            scalar |= not shape
            msgs.append(f"* out_specs{key} is {sp!r} which has length {len(sp)}, but "
                        f"{name}(*args){key} has shape {_short_type(o.dtype, shape)}, which "
                        f"has rank {len(shape)} (and "
                        f"{len(shape)} < {len(sp)})")
        if msgs:
            raise ValueError(_spec_rank_message(name, "out", msgs, scalar))

    def _vma_message(self, types, specs, mesh, manual):
        """JAX's _inout_vma_error for results of the type strings types under
        out_specs specs (Manual over manual, None: every axis), or None when
        none varies over an axis its out_spec leaves out."""
        from .lax import _varying
        names = [n for n in mesh.axis_names if manual is None or n in manual]
        msgs = []
        for k, (ty, sp) in enumerate(zip(types, specs)):
            vary = set(_varying(ty))
            named = set(_spec_axes(sp))
            left = [n for n in names if n not in named and n not in sp.unreduced]
            if not vary & set(left):
                continue
            key = f"[{k}]" if len(specs) > 1 else ""
            if len(left) > 1:
                need = ",".join(n for n in names if n in named)
                got = ",".join(n for n in names if n in vary)
                diff = ",".join(n for n in left if n in vary)
                msgs.append(f"* out_specs{key} is {sp!r} which implies that the corresponding "
                            f"output value is only varying across mesh axes {{{need}}} and not "
                            f"{{{diff}}}, but it was inferred to be possibly varying over "
                            f"{{{got}}}")
            else:
                msgs.append(f"* out_specs{key} is {sp!r} which implies that the corresponding "
                            f"output value is replicated across mesh axis '{left[0]}', but "
                            f"could not infer replication over any axes")
        if not msgs:
            return None
        if len(msgs) == 1:
            msgs = [msgs[0][2:]]
        return (f"shard_map applied to the function '{self.__name__}' was given out_specs which "
                f"require replication which can't be statically inferred given the mesh:\n\n"
                f"The mesh given has shape {tuple(mesh.axis_sizes)} with corresponding axis "
                f"names {tuple(mesh.axis_names)}.\n\n" + "\n\n".join(msgs) + "\n\n"
                "Check if these output values are meant to be replicated over those mesh axes. "
                "If not, consider revising the corresponding out_specs entries. If so, consider "
                "disabling the check by passing the check_vma=False argument to "
                "`jax.shard_map`.")

    def _unchecked(self, b):
        """check_vma=False: written in the header of b, the builder of the
        body (no replication check of this function's results, not of the
        others' of the program), and known to grad (a cotangent is not
        summed over the axes its primal does not vary over: the values carry
        no such types then, as in JAX)."""
        b.check_vma = self.check_vma
        if not self.check_vma:
            b.axis_suffix += ", check_vma=False"

    def _partial(self, b, mesh, check_specs):
        """A shard_map Manual over some of mesh's axes (axis_names=): JAX's
        checks of axis_names and (check_specs) of its in_specs and out_specs
        against it; b, the builder of its body, learns those axes and writes
        them in its header (the text form's axis_names=)."""
        names = self.axis_names
        if not names or mesh is None:
            return
        if not names <= frozenset(mesh.axis_names):
            raise ValueError(f"jax.shard_map requires axis_names={names} to be a subset of "
                             f"mesh.axis_names={frozenset(mesh.axis_names)}")
        if names == frozenset(mesh.axis_names):
            return
        for what, specs in (("in", self.in_specs), ("out", self.out_specs)):
            if not check_specs or specs is None or specs is _INFER or callable(specs):
                continue
            flat = [((), specs)] if isinstance(specs, PartitionSpec) else \
                [((k,), s) for k, s in enumerate(specs) if isinstance(s, PartitionSpec)]
            msgs = []
            for key, sp in flat:
                if getattr(sp, "unreduced", None):
                    raise NotImplementedError(
                        f"unreduced/reduced can only be passed to {what}_specs when shard_map "
                        f"is in full manual mode. Got mesh axis names {tuple(mesh.axis_names)}, "
                        f"manual_axes: {names}, specs: {sp}. Please file a bug at "
                        f"https://github.com/jax-ml/jax/issues.")
                for entry in sp:
                    for n in (entry if isinstance(entry, tuple) else (entry,)):
                        if n is not None and n not in names:
                            at = "".join(f"[{k}]" for k in key)
                            msgs.append(f"  {what}_specs{at} refers to {n!r}")
            if msgs:
                raise ProgramError(
                    f"shard_map {what}_specs argument must refer to an axis marked as manual "
                    f"({names}), but:\n\n" + "\n\n".join(msgs) + "\n\n"
                    f"Check the {what}_specs values passed to shard_map.")
        b.manual_axes = names
        b.axis_suffix = _axis_names_text(mesh, names)

    def _out_specs(self, n=1):
        """The out_specs of n results (one PartitionSpec is a prefix: every
        result's)."""
        os_ = self.out_specs
        return (os_,) * n if isinstance(os_, PartitionSpec) else tuple(os_)

    def _define(self, outer, base, args, specs, names, body, out_specs=None):
        """Defines a shard_map function of the jit program being traced
        (outer): parameters names, typed as the traced values args under
        specs; its body traced by body(block tracers) -> its results (a
        pytree of them: out_specs a prefix), with out_specs (this
        function's when None). Returns (its name, its
        number of results, the names in outer of the Arrays its body closes
        over: parameters after args, which a call passes after them)."""
        mesh = getattr(outer, "mesh", None)
        params = [f"{n}: {_type_decl(a, s)}" for n, a, s in zip(names, args, specs)]
        nested = outer.kind == "shard_map"  # called from the body of a partial-manual one
        root = outer
        while root.kind == "shard_map" and root.outer is not None:
            root = root.outer  # the jit body: function names are the file's
        fname = base
        k = 2
        while fname in root.fnames or root.header[-1].startswith(f"jit {fname}("):
            fname = f"{base}_{k}"
            k += 1
        root.fnames.add(fname)
        head = f"shard_map {fname}({', '.join(params)}) -> %OUT%:"
        inner = _Builder([outer.header[0], head], "shard_map", names)
        inner.mesh = mesh
        self._partial(inner, mesh, out_specs is None)
        self._unchecked(inner)
        if nested:
            if outer.manual_axes is None:
                raise InvalidArgument(f"{self.__name__}: a shard_map function Manual over every "
                                      f"mesh axis cannot call another one (no axis is left "
                                      f"for it)")
            own = self.axis_names or frozenset(mesh.axis_names) - outer.manual_axes
            if own & outer.manual_axes:
                raise ValueError(f"{self.__name__}: its axis_names {set(own)} name axes already "
                                 f"Manual in the shard_map around it "
                                 f"(axis_names={set(outer.manual_axes)})")
            bound = own | outer.manual_axes
            full = bound == frozenset(mesh.axis_names)
            inner.manual_axes = None if full else bound
            for n, a in zip(names, args):
                v = re.search(r"\{V:([A-Za-z0-9_,]+)", a.type)
                if v:
                    inner.outer_vma[n] = v.group(1)
            inner.check_suffix = "" if full else _axis_names_text(mesh, bound)
        elif inner.manual_axes is not None and not any("{" in a.type for a in args):
            from .numpy import _spec_of_type
            inner.caller_decls = {
                n: f"{n}: {a._dtype}[{','.join(map(str, a.shape))}] @ "
                   f"{_spec_of_type(a.type) or P()!r}" for n, a in zip(names, args)}
        inner.outer = outer
        _state.builder = inner
        try:
            tracers = []
            if names:  # (a function of no arguments has no types to learn first)
                info = inner._check_ret(names[0])
                tracers = [Tracer(n, *info["types"][j][:2], tuple(info["types"][j][2]))
                           for j, n in enumerate(names)]
            res = _constant_results(body(tracers))
            inner.resolve()
        finally:
            _state.builder = outer
        if inner.debug:
            raise InvalidArgument(f"debug.print in the shard_map function {self.__name__} "
                                  f"called from a jit body is not supported here: print from "
                                  f"the jit body, or call the shard_map function on its own")
        tree = None
        if isinstance(res, tuple) and all(isinstance(o, Tracer) for o in res) or \
                isinstance(res, Tracer) or out_specs is not None:
            outs = list(res) if isinstance(res, (tuple, list)) else [res]
            os_ = self._out_specs(len(outs)) if out_specs is None else tuple(out_specs)
        else:  # a pytree of results: out_specs a prefix of it
            outs, tree = _flatten(res, self.__name__)
            os_ = tuple(_prefix_specs(self.out_specs, res, self.__name__))
        if not outs and not os_ and out_specs is None:  # (), {}: nothing to compute
            raise _NoOutputs(self.__name__, res)
        if len(os_) != len(outs) or not all(isinstance(o, Tracer) for o in outs):
            raise InvalidArgument(f"{self.__name__} must return {len(os_)} traced values, "
                                  f"one per out_spec")
        if out_specs is None:
            self._out_rank_check(outs, os_, not isinstance(res, (tuple, list)) and tree is None)
        if self.check_vma and out_specs is None and not nested and mesh is not None:
            # the replication check, with JAX's sentence (the program's check
            # would say it of the jit's program, without the function's name)
            msg = self._vma_message([o.type for o in outs], os_, mesh, inner.manual_axes)
            if msg is not None:
                raise ProgramError(msg)
        out_text = repr(os_[0]) if len(os_) == 1 else "(" + ", ".join(map(repr, os_)) + ")"
        text = inner.text(ret=", ".join(o.name for o in outs), out=out_text)
        outer.prelude.extend(text.rstrip("\n").split("\n")[1:])
        return fname, len(outs), [outer.capture(x) if kind == "array" else x.name
                                  for kind, x in inner.extra], \
            (tree, os_, [x for kind, x in inner.extra if kind == "value"])

    def _split_static(self, args):
        """For static_argnums / static_argnames: a function of the other
        arguments alone, with the static ones closed over (Python values its
        body may branch or loop on, as under jax.jit), and those others."""
        if not self.static:
            return self, args
        fixed = {i: args[i] for i in self.static if i < len(args)}
        dyn = [a for i, a in enumerate(args) if i not in fixed]
        return _Traced(self._closing(fixed, len(args)), self.kind, self.mesh,
                       out_shardings=self.out_shardings, check_vma=self.check_vma), tuple(dyn)

    def _closing(self, fixed, n):
        """self.f as a function of its n arguments but those of fixed
        (position -> value), which it closes over; with self.f's name and
        the signature of the others."""
        def g(*d):
            it = iter(d)
            return self.f(*[fixed[i] if i in fixed else next(it) for i in range(n)])

        g.__name__ = self.__name__
        try:
            params = list(inspect.signature(self.f).parameters.values())
            g.__signature__ = inspect.Signature([p for i, p in enumerate(params[:n])
                                                 if i not in fixed])
        except (TypeError, ValueError):
            pass
        return g

    def _split_none_specs(self, args):
        """A shard_map's in_specs entry None (or in_specs=None, every
        argument): that argument is not split but closed over by the body,
        as JAX's static arguments (a Python value; an array, a replicated
        constant): a function of the others with their in_specs."""
        specs = (None,) * len(args) if self.in_specs is None else tuple(self.in_specs)
        if len(specs) != len(args):
            raise InvalidArgument(f"{self.__name__} has {len(specs)} in_specs for "
                                  f"{len(args)} arguments")
        fixed = {i: a for i, (a, sp) in enumerate(zip(args, specs)) if sp is None}
        t = _Traced(self._closing(fixed, len(args)), self.kind, self.mesh,
                    tuple(sp for sp in specs if sp is not None), self.out_specs, self.check_vma,
                    axis_names=self.axis_names)
        t2, dyn = t._split_trees(tuple(a for i, a in enumerate(args) if i not in fixed))
        return t2, dyn

    def _split_trees(self, args):
        """Arguments that are pytrees (tuples, lists, dicts of arrays, as a
        params dict): a function of their leaves, each one parameter of the
        program named by its path (params_emb, xs_0), which rebuilds them
        for the body; a shard_map's in_specs entry for such an argument is
        one P for every leaf or a pytree of them."""
        if self.kind == "shard_map" and (self.in_specs is None or isinstance(
                self.in_specs, (tuple, list)) and not isinstance(self.in_specs, PartitionSpec)
                and any(s is None for s in self.in_specs)):
            return self._split_none_specs(args)
        jit = self.kind == "jit"  # None: an empty subtree of a jit's arguments, as JAX's
        if not any(_is_tree(a) or (jit and a is None) for a in args):
            return self, args
        leaves_of = _leaves_but_none if jit else _tree_leaves
        build = functools.partial(_tree_build, none_empty=jit)
        names = _param_names(self.f, len(args))
        specs = self.in_specs
        if specs is _INFER:
            specs = None
        if isinstance(specs, (PartitionSpec, NamedSharding)):
            specs = (specs,) * len(args)
        leaves, flat_specs = [], []
        for k, a in enumerate(args):
            ls = leaves_of(a, names[k])
            leaves += ls
            if specs is not None:
                sp = specs[k] if k < len(specs) else None
                sl = [x for x, _ in _tree_leaves(sp, "")] if _is_tree(sp) else [sp] * len(ls)
                if len(sl) != len(ls):
                    raise InvalidArgument(f"shard_map in_specs[{k}] must be a pytree prefix of "
                                          f"the argument: {self.__name__}'s in_specs[{k}] has "
                                          f"{len(sl)} specs for an argument of {len(ls)} arrays")
                flat_specs += sl

        def g(*flat):
            it = iter(flat)
            return self.f(*[build(a, it) for a in args])

        g.__name__ = self.__name__
        g.__signature__ = inspect.Signature(
            [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for _, n in leaves])
        in_specs = tuple(flat_specs) if specs is not None else \
            _INFER if self.in_specs is _INFER else None
        t = _Traced(g, self.kind, self.mesh, in_specs, self.out_specs, self.check_vma,
                    self.out_shardings, axis_names=self.axis_names)
        return t, tuple(v for v, _ in leaves)

    def lower(self, *args, **kwargs):
        t, args = self._split_static(self._bind(args, kwargs))
        t2, args = t._split_trees(args)
        if t2 is not self:
            low = t2.lower(*args)
            low._fn = self  # a Compiled is called as this function is
            return low
        try:
            _, _, text, info, _ = t._trace(args)
        except _OnMesh as e:
            with _use_mesh(e.mesh):
                return self.lower(*args)
        except _NoOutputs as e:
            raise InvalidArgument(str(e)) from None
        return Lowered(text, info, self, len(args))

    def _finish(self, client, multi, mesh=None, debug=None, first=None):
        def finish(info):
            if info["state"] != "done":
                raise ShmapError(f"job {info['job']} {info['state']}: {info['error']}",
                                 code="CANCELLED" if info["state"] == "cancelled" else "ABORTED")
            outs = [Array(client, o, mesh=mesh) for o in info["outputs"]]
            if self.kind == "jit" and self.out_shardings is None and mesh is not None:
                _result_specs(outs, mesh, first)
            if debug is not None:  # the values of the body's debug.prints, printed now
                from . import debug as _debug
                n, entries, per_device = debug
                outs, extra = outs[:n], outs[n:]
                _debug._emit(entries, extra, per_device)
            if self.kind == "jit":
                return _unflatten(multi, iter(outs))
            if isinstance(multi, tuple):  # a shard_map's pytree of results
                return _unflatten(multi[1], iter(outs))
            return tuple(outs) if multi else outs[0]
        return finish

    def _bind(self, args, kwargs):
        """The arguments in order of the parameters, for a call with
        keywords (a parameter left out before a given one takes its
        default)."""
        if not kwargs:
            return args
        try:
            sig = inspect.signature(self.f)
            if self._varkw is not None:  # **kwargs: the keywords no parameter names, one dict
                extra = {k: v for k, v in kwargs.items() if k not in sig.parameters}
                kwargs = {k: v for k, v in kwargs.items() if k in sig.parameters}
                if extra:
                    kwargs[self._varkw] = extra
            bound = sig.bind(*args, **kwargs)
        except (TypeError, ValueError) as e:
            raise InvalidArgument(f"{self.__name__}: {e}") from None
        params = list(sig.parameters.values())
        last = max(k for k, p in enumerate(params) if p.name in bound.arguments)
        out = []
        for p in params[:last + 1]:
            if p.kind == p.VAR_POSITIONAL:
                out.extend(bound.arguments.get(p.name, ()))
            elif p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                v = bound.arguments.get(p.name, p.default)
                if v is _REQUIRED:
                    raise InvalidArgument(f"{self.__name__}: missing a required argument: "
                                          f"{p.name!r}")
                out.append(v)
            else:
                raise InvalidArgument(f"{self.__name__}: keyword-only parameter {p.name!r} "
                                      f"cannot be passed to a traced function")
        return tuple(out)

    def submit(self, *args, **kwargs):
        """Runs the function as a job; its trace is reused for arguments of
        the same signature (static values, pytree structure, array types,
        mesh), as jax.jit reuses its: the body's Python runs once per
        signature, and closed-over Arrays are those of that first trace."""
        bound = self._bind(args, kwargs)
        t, flat = self._split_static(bound)
        t, flat = t._split_trees(flat)
        prepared = t._args(flat)
        client, mesh, arrays, specs = prepared
        key = self._trace_key(bound, mesh, arrays, specs)
        hit = self._cache.get(key) if key is not None else None
        if hit is None:
            try:
                _, all_arrays, text, info, multi = t._trace(flat, prepared)
            except _OnMesh as e:
                with _use_mesh(e.mesh):
                    return self.submit(*args, **kwargs)
            except _NoOutputs as e:
                return _Done(e.value)
            hit = (text, info, multi, all_arrays[len(arrays):])
            if key is not None and not info.get("concretized"):
                if len(self._cache) >= 64:  # the oldest trace goes
                    self._cache.pop(next(iter(self._cache)))
                self._cache[key] = hit
        text, info, multi, captured = hit
        if any(isinstance(a, ShapeDtypeStruct) for a in arrays):
            raise InvalidArgument(f"{self.__name__}: a ShapeDtypeStruct has no values to run "
                                  f"on: pass Arrays or numpy arrays (or call .lower(...) or "
                                  f"shmap.eval_shape)")
        arrays = arrays + captured
        try:
            job = client._c.submit(text, f"{self._name}.shmap", None,
                                   [a.id for a in arrays], [], self.check_vma)
        except _shmap.Error as e:
            _raise(e, program=True)
        first = next((a for a in flat if isinstance(a, Array)), None)
        fut = Future(client, job, self._finish(client, multi, info.get("mesh_obj"),
                                               info.get("debug"), first))
        fut._keep = arrays  # uploaded arguments live until the job ends
        return fut

    def __call__(self, *args, **kwargs):
        outer = getattr(_state, "builder", None)
        if self.kind == "shard_map" and self.out_specs is None:
            return self._no_results(outer, args, kwargs)
        if self.kind == "shard_map" and isinstance(self.mesh, (Mesh, AbstractMesh)):
            from ._core import _context_mesh
            ctx = _context_mesh()
            if ctx is not None and self.mesh.abstract_mesh != ctx:  # JAX's (shard_map's)
                raise ValueError(f"The context mesh {ctx} should match the mesh passed to "
                                 f"shard_map {self.mesh}")
        if outer is not None:  # called while a jit function is traced
            return self._inline(outer, self._bind(args, kwargs))
        return self.submit(*args, **kwargs).result()

    def _no_results(self, outer, args, kwargs):
        """out_specs=None, as JAX's: the function returns None; it is traced
        (its checks, JAX's ValueError if it returns something) and nothing
        runs."""
        f, name = self.f, self.__name__

        def g(*a):
            r = f(*a)
            if r is not None:
                raise ValueError(f"shard_map out_specs is None, a pytree prefix of no value: "
                                 f"{name} must return None, got {type(r).__name__}")
            from . import numpy as jnp
            return jnp.zeros((), dtype=np.int32)
        g.__name__ = name
        t = _Traced(g, "shard_map", self.mesh, self.in_specs, P(), self.check_vma,
                    axis_names=self.axis_names)
        if outer is None:
            t.lower(*args, **kwargs)
            return None
        from .lax import _Mark
        mark = _Mark(outer)
        try:
            t._inline(outer, self._bind(args, kwargs))
        finally:
            mark.undo()
        return None


def _result_specs(outs, mesh, first):
    """The spelling of a jit's results' specs where out_shardings left them
    to the program, as JAX's (_concretize_abstract_out_shardings,
    maybe_recover_user_shardings): on an Explicit mesh each the type's, one
    entry per dimension; on a mixed mesh the type's where the layout is it
    (names no Auto axis), else the layout's without trailing Nones; on an
    Auto mesh the first Array argument's sharding as given where the result
    has its rank, mesh and layout, else the layout's without trailing
    Nones (the C core's spelling)."""
    if all(t == Explicit for t in mesh.axis_types):
        for a in outs:
            a._full_spec = True
        return
    if any(t == Explicit for t in mesh.axis_types):
        auto = {n for n, t in zip(mesh.axis_names, mesh.axis_types) if t != Explicit}
        for a in outs:
            a._full_spec = not auto.intersection(_spec_axes(_spec_of(a._info["spec"])))
        return
    if first is None:
        return
    given = first.sharding
    gm = given.mesh
    if tuple(gm.axis_names) != tuple(mesh.axis_names) or \
            tuple(gm.axis_sizes) != tuple(mesh.axis_sizes) or \
            tuple(gm.axis_types) != tuple(mesh.axis_types):
        return
    for a in outs:
        spec = _spec_of(a._info["spec"])
        if a.ndim == first.ndim and not (spec.unreduced or spec.reduced) and \
                not (given.spec.unreduced or given.spec.reduced) and \
                _padded(spec, a.ndim) == _padded(given.spec, a.ndim):
            a._given_spec = given.spec


class _TracedStage:
    """JAX's jit(f).trace(*args): what the trace gives before lowering."""

    def __init__(self, fn, args, kwargs):
        self._fn, self._args, self._kwargs = fn, args, kwargs

    def lower(self):
        return self._fn.lower(*self._args, **self._kwargs)

    @property
    def jaxpr(self):
        return self.lower()

    @property
    def out_info(self):
        return eval_shape(self._fn, *self._args, **self._kwargs)


def make_jaxpr(fun, static_argnums=()):
    """jax.make_jaxpr: a function of fun's arguments giving its program as
    traced (printed: the text form, and for a jit the shard_map program it
    lowers to), from its trace alone; what a jaxpr shows, in shmap's form."""
    t = fun if isinstance(fun, _Traced) else jit(fun, static_argnums=static_argnums)
    return lambda *args, **kwargs: t.lower(*args, **kwargs)


class named_scope:
    """jax.named_scope: a name for the ops traced inside it in JAX's
    profiles; shmap's programs keep each op's Python line instead, so it
    changes nothing."""

    def __init__(self, name):
        if not isinstance(name, str):
            raise TypeError("named_scope name must be a string.")
        self.name = name

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class ensure_compile_time_eval(named_scope):
    """jax.ensure_compile_time_eval: JAX evaluates the ops inside it at once
    while tracing where their inputs are concrete; shmap already does for
    numpy and Python values, so it changes nothing."""

    def __init__(self):
        super().__init__("ensure_compile_time_eval")


def eval_shape(fun, *args, **kwargs):
    """jax.eval_shape: fun's results as ShapeDtypeStructs (shape, dtype,
    sharding), from its trace alone: the C core types the program, nothing
    runs and nothing is uploaded. Arguments: Arrays, ShapeDtypeStructs,
    numpy arrays or Python numbers (pytrees of them); fun may be a
    shmap.jit or shmap.shard_map function, else it is traced as a jit.
    Given traced values (in a jit or shard_map body), fun is traced there
    and taken back: the results' types, varying axes included."""
    b = getattr(_state, "builder", None)
    if b is not None and any(isinstance(v, Tracer) for v, _ in _tree_leaves((args, kwargs), "a")):
        from .lax import _Mark
        mark = _Mark(b)
        try:
            res = fun(*args, **kwargs)
            leaves = [v for v, _ in _tree_leaves(res, "r")]
            out = [ShapeDtypeStruct(v.shape, v.dtype, _type=v.type) if isinstance(v, Tracer)
                   else v for v in leaves]
        finally:
            mark.undo()
        return _tree_build(res, iter(out))
    if isinstance(fun, _Traced):
        t = fun
    else:
        def concrete_too(*a, **k):  # Python numbers among the results: arrays, as JAX's
            from . import numpy as jnp
            res = fun(*a, **k)
            leaves = [v for v, _ in _tree_leaves(res, "r")]
            if all(isinstance(v, Tracer) or v is None for v in leaves):
                return res
            return _tree_build(res, iter(v if isinstance(v, Tracer) or v is None else
                                         jnp.asarray(v) for v in leaves))
        concrete_too.__name__ = getattr(fun, "__name__", "f")
        t = jit(concrete_too)

    def abstract(v):
        n = _node(v)
        if n is not None:  # containers, registered classes (a key array: its data)
            return n[2]([abstract(e) for e in n[0]])
        if isinstance(v, np.ndarray) or isinstance(v, (np.generic, bool, int, float)):
            v = np.asarray(_scalar_as_jax(v))
            return ShapeDtypeStruct(v.shape, v.dtype)
        return v

    bound = t._bind(args, kwargs)
    bound = tuple(a if i in t.static else abstract(a) for i, a in enumerate(bound))
    t2, flat = t._split_static(bound)
    t2, flat = t2._split_trees(flat)
    try:
        _, _, _, info, multi = t2._trace(flat)
    except _OnMesh as e:
        with _use_mesh(e.mesh):
            return eval_shape(fun, *args, **kwargs)
    except _NoOutputs as e:
        return e.value
    mesh = info["mesh_obj"].abstract_mesh  # JAX's: the types' (abstract) mesh
    outs = [ShapeDtypeStruct(shape, _DTYPES[dt], NamedSharding(
        mesh, P(*[_spec_entry(d) for d in _dims(ty)]))) for ty, dt, shape, _ in info["outputs"]]
    if t2.kind == "jit":
        return _unflatten(multi, iter(outs))
    if isinstance(multi, tuple):
        return _unflatten(multi[1], iter(outs))
    return tuple(outs) if multi else outs[0]


def _axis_names_text(mesh, names):
    """A shard_map header's ", axis_names={'i', ...}" (mesh order)."""
    return ", axis_names={" + ", ".join(repr(n) for n in mesh.axis_names if n in names) + "}"


_INFER = type("Infer", (), {"__repr__": lambda self: "Infer"})()  # jax.shard_map's in_specs default
_REQUIRED = type("Required", (), {"__repr__": lambda self: "<required>"})()  # (_positional)


def shard_map(f=None, *, mesh=None, in_specs=_INFER, out_specs, check_vma=True,
              axis_names=None):
    """jax.shard_map: f runs once per device on blocks; as a decorator
    (@shmap.shard_map(mesh=..., in_specs=..., out_specs=...)) or a call.
    Without mesh: the mesh of set_mesh / use_mesh, else its Arrays'.
    axis_names (a set, as JAX's): the axes made Manual (every axis of the
    mesh when left out or empty). in_specs left out (its axes all
    Explicit, as JAX's): each argument's sharding over those axes. Over
    some of them only, in_specs and
    out_specs and the body's collectives name those alone, and the body's
    values keep their shardings over the others in their types (JAX's
    partial-manual shard_map; it runs as a jit of the call, as JAX's)."""
    if axis_names is not None and not isinstance(axis_names, (set, frozenset)):
        raise TypeError(f"`axis_names` argument of shard_map should be of type `frozenset` or "
                        f"`set`. Got type: {type(axis_names)}")
    names = frozenset(axis_names) if axis_names else None

    def wrap(g):
        t = _Traced(g, "shard_map", mesh, in_specs, out_specs, check_vma, axis_names=names)
        if names is None:
            return t

        def call(*args):  # as jax.jit(jax.shard_map(...)): the body's types keep the
            return t(*args)  # arguments' shardings over the other axes

        call.__name__ = t.__name__
        jt = jit(call)

        def run(*args, **kwargs):  # on the shard_map's mesh (a call without Arrays)
            m = mesh or get_mesh()
            if m is not None and frozenset(m.axis_names) == names:  # Manual over every axis
                return t(*args, **kwargs)
            if mesh is None or get_mesh() is not None or \
                    getattr(_state, "builder", None) is not None:
                return jt(*args, **kwargs)
            with _use_mesh(mesh):
                return jt(*args, **kwargs)

        run.__name__, run.__doc__, run.__wrapped__ = t.__name__, t.__doc__, g
        return run
    return wrap if f is None else wrap(f)


def _axes_to_pspec(axis_name, axis):
    return P() if axis is None else P(*[None] * axis + [axis_name])


def _axes_tree(axis_name, axes):
    """in_axes / out_axes (an int, None, or containers of them) as specs."""
    if axes is None or isinstance(axes, int):
        return _axes_to_pspec(axis_name, axes)
    if isinstance(axes, dict):
        return type(axes)((k, _axes_tree(axis_name, v)) for k, v in axes.items())
    return type(axes)(_axes_tree(axis_name, v) for v in axes)


def _int_leaves(axes):
    if axes is None or isinstance(axes, int):
        return True
    if isinstance(axes, dict):
        return all(_int_leaves(v) for v in axes.values())
    return isinstance(axes, (tuple, list)) and all(_int_leaves(v) for v in axes)


def smap(f=None, /, *, in_axes=_INFER, out_axes, axis_name):
    """jax.smap: a shard_map Manual over the one mesh axis axis_name (the
    context mesh's), each argument split along its in_axes (an int, None:
    whole, or one per argument; left out: each argument's sharding, as
    shard_map's in_specs), each result laid out along its out_axes."""
    if isinstance(axis_name, (list, tuple)):
        raise TypeError(f"smap axis_name should be a `str` or a `Hashable`, but got {axis_name}")
    if in_axes is not None and in_axes is not _INFER and not isinstance(in_axes, (int, tuple)):
        raise TypeError(f"smap in_axes must be an int, None, jax.sharding.Infer, or a tuple of "
                        f"entries corresponding to the positional arguments passed to the "
                        f"function, but got {in_axes}.")
    if in_axes is not _INFER and not _int_leaves(in_axes):
        raise TypeError(f"smap in_axes must be an int, None, jax.sharding.Infer, or (nested) "
                        f"container with those types as leaves, but got {in_axes}.")
    if not _int_leaves(out_axes):
        raise TypeError(f"smap out_axes must be an int, None, or (nested) container with those "
                        f"types as leaves, but got {out_axes}.")
    in_specs = _INFER if in_axes is _INFER else _axes_tree(axis_name, in_axes)
    out_specs = _axes_tree(axis_name, out_axes)

    def wrap(g):
        return shard_map(g, mesh=None, in_specs=in_specs, out_specs=out_specs,
                         axis_names={axis_name})
    return wrap if f is None else wrap(f)


def auto_axes(f=None, /, *, axes=None, out_sharding=None):
    """jax.sharding.auto_axes: f computed with every mesh axis Auto (the
    service chooses the layouts inside it, never refusing an op as the
    Explicit rules may), its results resharded to out_sharding (one spec
    or NamedSharding for every result, or a pytree of them), as JAX's. In a
    jit body it is the text form's auto_axes(g, out_sharding=...)(args):
    f is traced once into a helper g of the program. Outside a trace it
    runs at once, as a jit function of its arguments. axes= names the
    axes made Auto (every axis of the mesh by default)."""
    if f is None:
        return lambda g: auto_axes(g, axes=axes, out_sharding=out_sharding)
    return _axes_fn(f, axes, out_sharding, False)


def _axes_fn(f, axes, spec, explicit):
    """What auto_axes(f, ...) (explicit_axes(f, ...) with explicit) gives:
    spec, its out_sharding (in_sharding), given there or at the call (JAX's
    TypeError without it); in a trace _auto_call, outside one a jit of the
    call."""
    kw = "in_sharding" if explicit else "out_sharding"
    what = "explicit_axes" if explicit else "auto_axes"

    def call(*args, **kwargs):
        sp = spec
        if sp is None:
            if kw not in kwargs:
                raise TypeError(f"Missing required keyword argument: '{kw}'")
            sp = kwargs.pop(kw)
        b = getattr(_state, "builder", None)
        if b is None:  # at once: as a jit function (JAX traces it too)
            def run(*a):
                return _axes_fn(f, axes, sp, explicit)(*a, **kwargs)
            run.__name__ = getattr(f, "__name__", what)
            return jit(run)(*args)
        return _auto_call(b, f, axes, sp, args, kwargs, explicit=explicit)

    call.__name__ = getattr(f, "__name__", what)
    call.__doc__ = getattr(f, "__doc__", None)
    call.__wrapped__ = f
    return call


def _auto_call(b, f, axes, os_, args, kwargs, explicit=False):
    """auto_axes(f, out_sharding=os_)(*args, **kwargs) in the body of b; with
    explicit, explicit_axes(f, in_sharding=os_)(...)."""
    what = "explicit_axes" if explicit else "auto_axes"
    name = getattr(f, "__name__", what)
    if b.kind != "jit":
        manual = set(getattr(b, "manual_axes", None) or b.mesh.axis_names)
        asked = set(b.mesh.axis_names) if axes is None else \
            {axes} if isinstance(axes, str) else set(axes)
        if asked & manual:  # JAX's (pjit's _get_new_mesh)
            raise NotImplementedError(
                "Going from `Manual` AxisType to `Auto` or `Explicit` AxisType is not allowed. "
                "Please file a bug at https://github.com/jax-ml/jax/issues with your use case")
        raise InvalidArgument(f"{what}({name}) in a partial-manual shard_map body over axes "
                              f"it leaves alone is not supported; call it from a jit function")
    if _vmap.batched(args, kwargs):  # vmap of auto_axes: auto_axes of vmap, batch first
        return _auto_batched(f, axes, os_, args, kwargs, explicit)
    mesh = b.mesh
    auto = set(mesh.axis_names)  # the axes the call makes Auto (explicit: Explicit)
    if axes is not None:
        auto = {axes} if isinstance(axes, str) else set(axes)
        for a in auto:
            if a not in mesh.axis_names:
                raise InvalidArgument(f"{what}: {a!r} is not an axis of the mesh "
                                      f"{tuple(mesh.axis_names)}")
        if not auto:
            raise InvalidArgument(f"{what}: axes names no axis")
    subset = auto != set(mesh.axis_names)
    pairs = [x for k, a in enumerate(args) for x in _tree_leaves(a, f"a{k}")]
    params = [v for v, _ in pairs if isinstance(v, Tracer)]
    names = [f"a{k}" for k in range(len(params))]
    if explicit:  # in_sharding: one spec for every array argument, or one per argument
        ins = _in_sharding_leaves(name, os_, args, len(pairs))
        ins = [getattr(x, "spec", x) for (v, _), x in zip(pairs, ins) if isinstance(v, Tracer)]
    base = _ascii_name(name) + ("_explicit" if explicit else "_auto")
    fname, k = base, 2
    while fname in b.fnames or any(h.startswith(f"jit {fname}(") for h in b.header):
        fname, k = f"{base}_{k}", k + 1
    b.fnames.add(fname)
    from .numpy import _spec_of_type
    if explicit:
        types = ["Explicit" if a in auto else t for a, t in zip(mesh.axis_names, mesh.axis_types)]
        decl_specs = ins
    else:
        types = ["Auto" if a in auto or t == "Auto" else "Explicit"
                 for a, t in zip(mesh.axis_names, mesh.axis_types)]
        decl_specs = [(_spec_of_type(v.type) or P()) if subset else P() for v in params]
    mline = re.sub(r" axis_types=\([^)]*\)", "", b.header[0]) + \
        " axis_types=(" + ", ".join(types) + ")"
    decls = [f"{n}: {_dtype_name(v.dtype)}[{','.join(map(str, v.shape))}] @ {sp!r}"
             for n, v, sp in zip(names, params, decl_specs)]
    inner = _Builder([mline, f"jit {fname}({', '.join(decls)})%OUT%:"], "jit", names)
    inner.mesh, inner.outer, inner.axis_types = mesh, b, tuple(types)
    _state.builder = inner
    try:
        if names:
            info = inner._check_ret(names[0])
            tracers = iter([Tracer(n, *info["types"][j][:2], tuple(info["types"][j][2]))
                            for j, n in enumerate(names)])
        else:
            tracers = iter(())
        leaves = iter([next(tracers) if isinstance(v, Tracer) else v for v, _ in pairs])
        res = f(*[_tree_build(a, leaves) for a in args], **kwargs)
        inner.resolve()
    finally:
        _state.builder = b
    if inner.debug:
        raise InvalidArgument(f"debug.print inside {what}({name}) is not supported: print "
                              f"from the jit body")
    outs, tree = _flatten(res, f"{what}({name})")
    if not outs:
        raise InvalidArgument(f"{what}({name}) must return traced values")
    if explicit:
        specs = [_spec_of_type(o.type) or P() for o in outs]  # the results' inside the call
    elif isinstance(os_, (PartitionSpec, NamedSharding)):
        specs = [os_] * len(outs)
    else:
        specs = [x for x, _ in _tree_leaves(os_, "s")]
        if len(specs) == 1 and len(outs) > 1:
            specs = specs * len(outs)
        if len(specs) != len(outs) or not all(isinstance(x, (PartitionSpec, NamedSharding))
                                              for x in specs):
            raise InvalidArgument(f"auto_axes({name}): out_sharding must be a PartitionSpec or "
                                  f"NamedSharding, or a pytree of them, one per result "
                                  f"({len(outs)})")
    specs = [getattr(x, "spec", x) for x in specs]
    levels = [lvl for lvl in _grad._levels(b) if not lvl.paused]
    closed = [x for kind, x in inner.extra if kind == "value" and
              any(x.name in lvl.active for lvl in levels)]
    if closed:  # values of b it closes over that grad differentiates: more arguments
        if explicit:
            raise InvalidArgument(f"{what}({name}) closes over a value that grad "
                                  f"differentiates: pass it as an argument")
        b.fnames.discard(fname)
        return _auto_call(b, _closing_over(f, closed, len(args)), axes, os_,
                          tuple(args) + tuple(closed), kwargs)
    b.prelude.extend(inner.prelude)
    b.prelude.append(f"def {fname}({', '.join(inner.params)}):")
    b.prelude.extend(f"    {t}" for t, _ in inner.lines)
    b.prelude.append(f"    return {', '.join(o.name for o in outs)}")
    extra = [b.capture(x) if kind == "array" else x.name for kind, x in inner.extra]
    shown = specs
    if explicit:  # the closed-over values keep the layouts their parameters declare
        shown = ins + [x.sharding.spec if kind == "array" else P() for kind, x in inner.extra]
    spec_text = repr(shown[0]) if len(shown) == 1 else \
        "(" + ", ".join(repr(x) for x in shown) + ")"
    if subset:
        spec_text += ", axes=" + _fmt(tuple(a for a in mesh.axis_names if a in auto))
    call = f"{what}({fname}, {'in' if explicit else 'out'}_sharding={spec_text})(" \
           f"{', '.join([v.name for v in params] + extra)})"
    lv = _grad._target(b, params)
    with _grad._paused(_grad._levels(b)[lv:] if lv is not None else []):
        got = b.emit(call, what, tuple(params)) if len(outs) == 1 else \
            b.emit_multi(call, len(outs), what, tuple(params))
    got = (got,) if len(outs) == 1 else tuple(got)
    if lv is not None:
        def backward(gs):
            # the arguments' cotangents: f run again with a tape, and its
            # backward pass, in a second helper of the program, of the same kind
            n = len(params)
            in_specs = [_spec_of_type(v.type) or P() for v in params]

            def vjp(*xc):
                xs, cs = list(xc[:n]), list(xc[n:])
                it = iter(xs)
                lvs = iter([next(it) if isinstance(v, Tracer) else v for v, _ in pairs])
                rebuilt = [_tree_build(a, lvs) for a in args]
                r, tape, active = _grad._taped(_builder(), xs, lambda: f(*rebuilt, **kwargs))
                rl, _ = _flatten(r, f"{what}({name})")
                return tuple(_grad._backward(tape, active, _grad._seeds(rl, cs, active), xs))
            vjp.__name__ = f"{base}_vjp"
            if explicit:
                cts = explicit_axes(vjp, axes=axes, in_sharding=tuple(ins + specs))(*params, *gs)
            else:
                cts = auto_axes(vjp, axes=axes, out_sharding=tuple(in_specs))(*params, *gs)
            cts = cts if isinstance(cts, tuple) else (cts,)
            return [c if _grad._is_float(v) else None for c, v in zip(cts, params)]
        _grad._record_custom(b, lv, params, got, backward)
    return _unflatten(tree, iter(got))


def _in_sharding_leaves(name, in_sharding, args, nleaves):
    """explicit_axes' in_sharding, one entry per leaf of args (nleaves):
    one spec or NamedSharding for all, or one (or a pytree of them) per
    argument."""
    if isinstance(in_sharding, (PartitionSpec, NamedSharding)):
        return [in_sharding] * nleaves
    per = list(in_sharding) if isinstance(in_sharding, (tuple, list)) else [in_sharding]
    if len(per) != len(args):
        raise InvalidArgument(f"explicit_axes({name}): in_sharding has {len(per)} entries for "
                              f"{len(args)} arguments")
    return [x for a, sp in zip(args, per) for x in
            ([sp] * len(_tree_leaves(a, "a")) if isinstance(sp, (PartitionSpec, NamedSharding))
             else [y for y, _ in _tree_leaves(sp, "s")])]


def _closing_over(f, closed, n):
    """f taking the traced values it closes over (closed) as n more
    arguments after its own n: in its trace each stands for its parameter
    (in the program's text and on grad's tapes), so that grad reaches
    them through the call."""
    def g(*a):
        b = _builder()
        for v, t in zip(closed, a[n:]):
            b.closed[id(v)] = t.name
            b.closed_as[id(v)] = t
        try:
            return f(*a[:n])
        finally:
            for v in closed:
                b.closed.pop(id(v), None)
                b.closed_as.pop(id(v), None)
    g.__name__ = getattr(f, "__name__", "f")
    return g


def explicit_axes(f=None, /, *, axes=None, in_sharding=None):
    """jax.sharding.explicit_axes: in a mesh of Auto axes, f computed with
    axes (all by default) Explicit: its array arguments resharded to
    in_sharding (one spec or NamedSharding for all, or one per argument),
    its ops typed by the Explicit rules on them, its results' types hiding
    them again (their data where it lies), as JAX's. In a jit body the text
    form's explicit_axes(g, in_sharding=...)(args); at once outside a
    trace, as a jit function."""
    if f is None:
        return lambda g: explicit_axes(g, axes=axes, in_sharding=in_sharding)
    return _axes_fn(f, axes, in_sharding, True)


def _auto_batched(f, axes, os_, args, kwargs, explicit=False):
    """auto_axes(f)(args) with args batched by the innermost vmap among
    them: auto_axes of vmap(f) on the batched values (the batch first, as
    each BatchTracer holds it), each result spec with the batch's entry
    first (the first mapped argument's, as JAX's batching keeps it), its
    results batched again. explicit_axes (explicit): the same, its
    in_sharding's specs of the mapped arguments with the batch's entry
    first (JAX's reshard batching rule)."""
    what = "explicit_axes" if explicit else "auto_axes"
    if _vmap.batched([kwargs]):
        raise Unimplemented(f"vmap of {what} with a batched keyword argument is not "
                            f"supported: pass it positionally")
    pairs = [x for k, a in enumerate(args) for x in _tree_leaves(a, f"a{k}")]
    level = max(v.level for v, _ in pairs if isinstance(v, _vmap.BatchTracer))
    mapped = [isinstance(v, _vmap.BatchTracer) and v.level == level for v, _ in pairs]
    size = next(v.nbatch for (v, _), m in zip(pairs, mapped) if m)
    flat = [v.val if m else v for (v, _), m in zip(pairs, mapped)]
    first = next(x for x, m in zip(flat, mapped) if m)
    entry = _spec_entry(_dims(first.type)[0]) if isinstance(first, Tracer) else None

    def per_example(*xs):
        it = iter(xs)
        return f(*[_tree_build(a, it) for a in args], **kwargs)

    def batch_first(spec):
        spec = getattr(spec, "spec", spec)
        return P(entry, *spec, **spec._ur()) if isinstance(spec, PartitionSpec) \
            else P(entry, *spec)
    if explicit:  # one in_sharding per leaf, the mapped ones with the batch first
        ins = _in_sharding_leaves(getattr(f, "__name__", what), os_, args, len(pairs))
        specs = tuple(batch_first(x) if m else x for x, m in zip(ins, mapped))
    elif isinstance(os_, (PartitionSpec, NamedSharding)):
        specs = batch_first(os_)
    else:
        leaves = [x for x, _ in _tree_leaves(os_, "s")]
        specs = _tree_build(os_, iter([batch_first(x) for x in leaves]))
    g = _vmap.vmap(per_example, in_axes=tuple(0 if m else None for m in mapped))
    g.__name__ = getattr(f, "__name__", what)
    res = explicit_axes(g, axes=axes, in_sharding=specs)(*flat) if explicit else \
        auto_axes(g, axes=axes, out_sharding=specs)(*flat)
    outs, tree = _flatten(res, f"{what}({g.__name__})")
    return _unflatten(tree, iter([_vmap.BatchTracer(o, size, level) for o in outs]))


def pmap(fun=None, axis_name=None, *, in_axes=0, out_axes=0, static_broadcasted_argnums=(),
         devices=None, backend=None, axis_size=None, donate_argnums=()):
    """jax.pmap, as JAX now runs it: a shard_map over a mesh of one axis
    (axis_name) as long as the mapped arguments' leading axis, one device
    per index (the cluster's first, or devices); fun sees one index's slice
    (the mapped axis dropped) and its collectives name axis_name. in_axes
    an int (the mapped axis, negative from the end) or None per argument (a
    pytree argument: for all its leaves), out_axes an int (where the
    results are stacked) or None (one device's, which must not vary:
    shard_map's check); static_broadcasted_argnums reach fun as they are."""
    if isinstance(fun, str) and axis_name is None:  # pmap("i") as a decorator factory
        fun, axis_name = None, fun

    def wrap(f):
        name = axis_name or "pmap"
        statics = ((static_broadcasted_argnums,) if isinstance(static_broadcasted_argnums, int)
                   else tuple(static_broadcasted_argnums))
        traced = {}

        def call(*args):
            if getattr(_state, "builder", None) is not None:
                raise InvalidArgument(f"pmap of {getattr(f, '__name__', 'f')} inside a traced "
                                      f"function is not supported: use shard_map or vmap")
            fixed = {i: args[i] for i in statics if i < len(args)}
            dyn = [a for i, a in enumerate(args) if i not in fixed]
            axes = in_axes if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(dyn)
            if len(axes) != len(dyn):
                raise ValueError(f"pmap in_axes specification must be a tree prefix of the "
                                 f"corresponding value, got {len(axes)} entries for "
                                 f"{len(dyn)} arguments")
            sizes = set()
            for a, ax in zip(dyn, axes):
                if ax is not None and not isinstance(ax, int):
                    raise InvalidArgument(f"pmap: in_axes entries are ints or None (one per "
                                          f"argument, for all its leaves), got {ax!r}")
                for leaf, _ in _tree_leaves(a, "a"):
                    if ax is None:
                        continue
                    nd = np.ndim(leaf)
                    if not -nd <= ax < nd:
                        raise ValueError(f"pmap in_axes {ax} is out of bounds for an argument "
                                         f"of rank {nd}" if nd else
                                         "pmap requires at least one argument with a mapped "
                                         "axis of rank 1 or more")
                    sizes.add(np.shape(leaf)[ax])
            if out_axes is not None and not isinstance(out_axes, int):
                raise InvalidArgument(f"pmap: out_axes is an int or None, got {out_axes!r}")
            if not sizes:
                raise ValueError("pmap requires at least one argument with a mapped axis (in_axes "
                                 "not None) of rank 1 or more")
            if len(sizes) > 1:
                raise ValueError(f"pmap got inconsistent sizes for array axes to be mapped: "
                                 f"{sorted(sizes)}")
            n = sizes.pop()
            leaves = [leaf for a in dyn for leaf, _ in _tree_leaves(a, "a")]
            key = (n, tuple(_tree_sig(a) for a in dyn),
                   tuple((np.shape(x), str(getattr(x, "dtype", type(x)))) for x in leaves),
                   tuple((i, repr(v)) for i, v in sorted(fixed.items())))
            if key not in traced:
                client = _client_of(leaves, get_mesh())
                mesh = client.make_mesh((n,), (name,), devices=None if devices is None
                                        else list(devices)[:n])
                out, ranks = [], []

                def at(k, nd):  # the mapped axis k of a value of rank nd
                    return k + nd if k < 0 else k

                def body(*blocks):
                    it = iter(blocks)
                    full = [fixed[i] if i in fixed else next(it) for i in range(len(args))]
                    ax = iter(axes)
                    full = [v if i in fixed else _unmap(v, next(ax)) for i, v in enumerate(full)]
                    res = f(*full)
                    out[:] = [res]
                    ls = [v for v, _ in _tree_leaves(res, "r")]
                    ranks[:] = [len(v.shape) for v in ls]
                    if out_axes is None:
                        return tuple(ls)
                    return tuple(_expand(v, at(out_axes, len(v.shape) + 1)) for v in ls)

                def _unmap(v, k):  # one index's slice: the mapped axis dropped
                    if k is None:
                        return v
                    return _tree_build(v, iter([b[(slice(None),) * at(k, len(b.shape)) + (0,)]
                                                for b, _ in _tree_leaves(v, "a")]))

                def _expand(v, k):
                    return v.reshape(tuple(v.shape[:k]) + (1,) + tuple(v.shape[k:]))

                body.__name__ = getattr(f, "__name__", "pmap")
                specs = tuple(P() if ax is None else
                              _tree_build(a, iter([P(*(None,) * at(ax, np.ndim(leaf)), name)
                                                   for leaf, _ in _tree_leaves(a, "a")]))
                              for a, ax in zip(dyn, axes))

                def out_specs(k):
                    if out_axes is None:
                        return (P(),) * k
                    return tuple(P(*(None,) * at(out_axes, r + 1), name) for r in ranks)
                sm = _Traced(body, "shard_map", mesh, specs, out_specs, True)
                traced[key] = (sm, out)
            sm, out = traced[key]
            res = sm(*dyn)
            res = res if isinstance(res, tuple) else (res,)
            return _tree_build(out[0], iter(res))

        call.__name__ = getattr(f, "__name__", "pmap")
        call.__wrapped__ = f
        return call
    return wrap if fun is None else wrap(fun)


def jit(f=None, *, in_shardings=None, out_shardings=None, mesh=None, static_argnums=(),
        static_argnames=(), donate_argnums=(), donate_argnames=()):
    """jax.jit with explicit sharding: f sees whole arrays whose types carry
    their shardings; the service lowers it to per-device code. in_shardings
    (one sharding, or one per argument; a pytree argument takes one for all
    its leaves or a pytree of them; None: unspecified) places numpy
    arguments, and must match an Array's own sharding (JAX's sentence
    otherwise: reshard it first). Static arguments (static_argnums,
    static_argnames) reach f as the Python values they are. donate_argnums
    / donate_argnames are taken and change nothing (a job's outputs are new
    arrays; its inputs stay)."""
    def wrap(g):
        return _Traced(g, "jit", mesh, in_specs=in_shardings, out_shardings=out_shardings,
                       static_argnums=static_argnums, static_argnames=static_argnames)
    return wrap if f is None else wrap(f)


from . import _grad, _vmap  # noqa: E402 (they import this module's names)
