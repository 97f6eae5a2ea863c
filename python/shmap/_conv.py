"""Convolutions and windowed reductions, as JAX's: lax.conv_general_dilated
(and conv, conv_with_general_padding, conv_transpose), lax.reduce_window,
jnp.convolve and jnp.correlate.

Each is a composite of the op table's ops, so grad and vmap see ordinary
ops: the windows are strided slices of the padded (and dilated) operand,
one per tap of the window in row-major order; a convolution concatenates
its windows along the features and takes one product with the kernel laid
out to match (im2col), a windowed reduction folds its windows with the
computation. Shapes, padding strings, dimension numbers and their errors
are JAX's (jax/_src/lax/convolution.py, windowed_reductions.py), and so
are the result's sharding and the refusals of its sharding rule: the
input's spec, dimension by dimension, where the new size still divides;
a kernel sharded or an input's feature dimension sharded needs
out_sharding=. A sharded dimension the window runs along is gathered for
the computation and laid out as the rule says afterwards (XLA exchanges
halos instead; the values are the same).

A window's max or min differentiates to the first element of the window
that holds it, as JAX's select_and_scatter_add (not shared between ties,
as lax.max's own rule shares them)."""
import collections
import itertools
import math
import numbers
import operator

import numpy as _np

from . import numpy as jnp
from ._core import P, ProgramError
from ._trace import _entries, _state, make_op
from .numpy import _at_once

_reshard = make_op("reshard")

ConvDimensionNumbers = collections.namedtuple("ConvDimensionNumbers",
                                              ["lhs_spec", "rhs_spec", "out_spec"])
ConvDimensionNumbers.__doc__ = """jax.lax.ConvDimensionNumbers: for the
input, the kernel and the output, the dimension indices of (batch or output
feature, feature or input feature, spatial dimensions...)."""


# ---- JAX's shape logic ---------------------------------------------------


def conv_general_permutations(dimension_numbers):
    """jax.lax.conv_general_permutations: the (lhs, rhs, out) permutations of
    dimension-number strings such as ('NHWC', 'HWIO', 'NHWC')."""
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    charpairs = ("N", "C"), ("O", "I"), ("N", "C")
    for i, (a, b) in enumerate(charpairs):
        if not dimension_numbers[i].count(a) == dimension_numbers[i].count(b) == 1:
            raise TypeError(f"convolution dimension_numbers[{i}] must contain the characters "
                            f"'{a}' and '{b}' exactly once, got {dimension_numbers[i]}.")
        if len(dimension_numbers[i]) != len(set(dimension_numbers[i])):
            raise TypeError(f"convolution dimension_numbers[{i}] cannot have duplicate "
                            f"characters, got {dimension_numbers[i]}.")
    if not (set(lhs_spec) - set(charpairs[0]) == set(rhs_spec) - set(charpairs[1])
            == set(out_spec) - set(charpairs[2])):
        raise TypeError("convolution dimension_numbers elements must each have the same "
                        f"set of spatial characters, got {dimension_numbers}.")

    def getperm(spec, charpair):
        spatial = [i for i, c in enumerate(spec) if c not in charpair]
        if spec is not rhs_spec:
            spatial = sorted(spatial, key=lambda i: rhs_spec.index(spec[i]))
        return (spec.index(charpair[0]), spec.index(charpair[1])) + tuple(spatial)

    return tuple(map(getperm, dimension_numbers, charpairs))


def conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers):
    """jax.lax.conv_dimension_numbers: dimension_numbers (None, three strings
    or a ConvDimensionNumbers) as a ConvDimensionNumbers."""
    if isinstance(dimension_numbers, ConvDimensionNumbers):
        return dimension_numbers
    if len(lhs_shape) != len(rhs_shape):
        raise TypeError(f"convolution requires lhs and rhs ndim to be equal, got "
                        f"{len(lhs_shape)} and {len(rhs_shape)}.")
    if dimension_numbers is None:
        iota = tuple(range(len(lhs_shape)))
        return ConvDimensionNumbers(iota, iota, iota)
    if isinstance(dimension_numbers, (list, tuple)):
        if len(dimension_numbers) != 3:
            raise TypeError(f"convolution dimension_numbers list/tuple must be length 3, got "
                            f"{len(dimension_numbers)}.")
        if not all(isinstance(e, str) for e in dimension_numbers):
            raise TypeError(f"convolution dimension_numbers elements must be strings, got "
                            f"{tuple(map(type, dimension_numbers))}.")
        for i, e in enumerate(dimension_numbers):
            if len(e) != len(lhs_shape):
                raise TypeError(f"convolution dimension_numbers[{i}] must have len equal to "
                                f"the ndim of lhs and rhs, got {len(e)} for lhs and rhs shapes "
                                f"{tuple(lhs_shape)} and {tuple(rhs_shape)}.")
        return ConvDimensionNumbers(*conv_general_permutations(dimension_numbers))
    raise TypeError(f"convolution dimension_numbers must be tuple/list or None, got "
                    f"{type(dimension_numbers)}.")


def padtype_to_pads(in_shape, window_shape, window_strides, padding):
    """jax.lax.padtype_to_pads: 'SAME', 'SAME_LOWER' or 'VALID' as (low,
    high) pairs, one per dimension."""
    p = padding.upper() if isinstance(padding, str) else padding
    if p not in ("SAME", "SAME_LOWER", "VALID"):
        raise RuntimeError(f"Unrecognized padding type: expected 'VALID', 'SAME', or "
                           f"'SAME_LOWER', got {padding}.")
    if p == "VALID":
        return [(0, 0)] * len(in_shape)
    pads = []
    for n, w, s in zip(in_shape, window_shape, window_strides):
        size = max(((n + s - 1) // s - 1) * s + w - n, 0)
        lo = size // 2 if p == "SAME" else size - size // 2
        pads.append((lo, size - lo))
    return pads



def _dilate_shape(shape, dilation):
    return tuple(0 if d == 0 else 1 + r * (d - 1) for d, r in zip(shape, dilation))


def _out_size(padded, window, stride):
    return max(0, (padded - window) // stride + 1)


def _pairs(padding, what):
    try:
        return tuple((operator.index(lo), operator.index(hi)) for lo, hi in padding)
    except (ValueError, TypeError) as e:
        raise ValueError(f"padding argument to {what} should be a string or a sequence of "
                         f"(low, high) pairs, got {padding}") from e


# ---- windows ---------------------------------------------------------------


def _dilate(x, ax, d):
    """x with d - 1 zeros between its elements along ax."""
    n = x.shape[ax]
    if d == 1 or n <= 1:
        return x
    y = jnp.expand_dims(x, ax + 1)
    widths = [(0, 0)] * y.ndim
    widths[ax + 1] = (0, d - 1)
    y = jnp.pad(y, tuple(widths))
    y = jnp.reshape(y, x.shape[:ax] + (n * d,) + x.shape[ax + 1:])
    idx = [slice(None)] * x.ndim
    idx[ax] = slice(0, (n - 1) * d + 1)
    return y[tuple(idx)]


def _spread(x, axes, pads, dilation):
    """x dilated and padded with zeros along axes (negative pads crop)."""
    for ax, d in zip(axes, dilation):
        x = _dilate(x, ax, d)
    if any(lo > 0 or hi > 0 for lo, hi in pads):
        widths = [(0, 0)] * x.ndim
        for ax, (lo, hi) in zip(axes, pads):
            widths[ax] = (max(lo, 0), max(hi, 0))
        x = jnp.pad(x, tuple(widths))
    if any(lo < 0 or hi < 0 for lo, hi in pads):
        idx = [slice(None)] * x.ndim
        for ax, (lo, hi) in zip(axes, pads):
            idx[ax] = slice(max(-lo, 0), x.shape[ax] - max(-hi, 0))
        x = x[tuple(idx)]
    return x


def _windows(x, axes, window, strides, pads, base_dilation, window_dilation, fill):
    """The windows of x along axes, one array per tap of the window in
    row-major order, each of x's shape but the output sizes along axes:
    x dilated by base_dilation and padded with fill (a Python number)."""
    xp = _spread(x, axes, pads, base_dilation)
    if fill != 0 and (any(lo > 0 or hi > 0 for lo, hi in pads) or
                      any(d > 1 for d in base_dilation)):
        mask = _spread(jnp.ones_like(x), axes, pads, base_dilation)
        xp = jnp.where(mask != 0, xp, fill)
    outs = [_out_size(xp.shape[ax], (k - 1) * r + 1, s)
            for ax, k, r, s in zip(axes, window, window_dilation, strides)]
    taps = []
    for tap in itertools.product(*(range(k) for k in window)):
        idx = [slice(None)] * x.ndim
        for ax, t, r, s, o in zip(axes, tap, window_dilation, strides, outs):
            idx[ax] = slice(t * r, t * r + (o - 1) * s + 1, s) if o else slice(0, 0)
        taps.append(xp[tuple(idx)])
    return taps, outs


# ---- sharding --------------------------------------------------------------


def _entry_size(e):
    sizes = _state.builder.mesh.shape
    return math.prod(sizes[a] for a in ((e,) if isinstance(e, str) else e))


def _entry_str(e):
    return e if isinstance(e, str) else str(tuple(e))


def _varying_out(x, ents, out_shape, name):
    """JAX's _get_sharding_for_varying_out_shape: x's spec where sizes
    still divide (its sentence otherwise); P() for an all-ones shape."""
    if not out_shape or all(o == 1 for o in out_shape):
        return [None] * len(out_shape)
    for n, o, e in zip(x.shape, out_shape, ents):
        if n != o and e is not None and o % _entry_size(e):
            raise ProgramError(
                f"{name} on sharded dims where out dim ({o}) is not divisible by mesh axes "
                f"({_entry_size(e)}) with spec ({_entry_str(e)}) is not implemented. Got input "
                f"type={x.type} and output shape=[{','.join(map(str, out_shape))}]")
    return list(ents)


def _gather_dims(x, ents, dims):
    """x resharded so that none of dims is sharded (the others kept)."""
    if ents is None or all(ents[d] is None for d in dims):
        return x
    return _reshard(x, P(*[None if d in dims else e for d, e in enumerate(ents)]))


def _lay_out(y, want):
    """y resharded to the spec entries want, unless it has them already."""
    have = _entries(y)
    if want is None or have is None or list(have) == list(want):
        return y
    return _reshard(y, P(*want))


def _out_spec(out_sharding):
    if out_sharding is None:
        return None
    spec = getattr(out_sharding, "spec", out_sharding)
    return list(spec)


# ---- convolutions ----------------------------------------------------------


@_at_once
def conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=None,
                         rhs_dilation=None, dimension_numbers=None, feature_group_count=1,
                         batch_group_count=1, precision=None, preferred_element_type=None,
                         out_sharding=None):
    """jax.lax.conv_general_dilated: an n-d convolution (a cross-correlation,
    as XLA's) with strides, padding ('SAME', 'SAME_LOWER', 'VALID' or
    (low, high) pairs), input (transposed convolution) and kernel (atrous)
    dilation, dimension numbers (None: NCHW / OIHW / NCHW; strings such as
    ('NHWC', 'HWIO', 'NHWC')) and feature groups (depthwise). Sharding:
    JAX's rule (the input's spec; a sharded kernel or input feature
    dimension needs out_sharding=). batch_group_count > 1 is refused.
    precision is taken and changes nothing (products run in the dtype)."""
    del precision
    dn = conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
    nsp = len(lhs.shape) - 2
    if lhs_dilation is None:
        lhs_dilation = (1,) * nsp
    elif isinstance(padding, str) and not len(lhs_dilation) == tuple(lhs_dilation).count(1):
        raise ValueError("String padding is not implemented for transposed convolution using "
                         "this op. Please either exactly specify the required padding or use "
                         "conv_transpose.")
    if rhs_dilation is None:
        rhs_dilation = (1,) * nsp
    lhs_t = [lhs.shape[d] for d in dn.lhs_spec]
    rhs_t = [rhs.shape[d] for d in dn.rhs_spec]
    if isinstance(padding, str):
        padding = padtype_to_pads(lhs_t[2:], _dilate_shape(rhs_t[2:], rhs_dilation),
                                  window_strides, padding)
    pads = _pairs(padding, "conv_general_dilated")
    if lhs.dtype != rhs.dtype and preferred_element_type is None:
        raise TypeError(f"lax.conv_general_dilated requires arguments to have the same "
                        f"dtypes, got {_np.dtype(lhs.dtype).name}, {_np.dtype(rhs.dtype).name}.")
    _check_conv_shapes(lhs, rhs, dn, window_strides, feature_group_count, batch_group_count)
    if batch_group_count != 1:
        raise NotImplementedError("conv_general_dilated: batch_group_count > 1 is not "
                                  "implemented here")
    if len(pads) != nsp:
        raise TypeError(f"Wrong number of explicit pads for convolution: expected {nsp}, got "
                        f"{len(pads)}.")
    lhs_d = _dilate_shape(lhs_t, (1, 1) + tuple(lhs_dilation))
    rhs_d = _dilate_shape(rhs_t, (1, 1) + tuple(rhs_dilation))
    padded = [n + lo + hi for n, (lo, hi) in zip(lhs_d[2:], pads)]
    if any(n < 0 for n in padded):
        raise ValueError("Negative padding is larger than the size of the corresponding "
                         f"dimension: got padding={pads} for lhs_shape[2:]={tuple(lhs_d[2:])}")
    out_t = [lhs_t[0], rhs_t[0]] + [_out_size(n, k, s)
                                    for n, k, s in zip(padded, rhs_d[2:], window_strides)]
    out_shape = [0] * len(out_t)
    for j, d in enumerate(dn.out_spec):
        out_shape[d] = out_t[j]
    if preferred_element_type is not None:
        lhs, rhs = jnp.astype(lhs, preferred_element_type), jnp.astype(rhs, preferred_element_type)

    # the sharding rule, and the layouts the computation runs in
    le, re_ = _entries(lhs), _entries(rhs)
    if le is not None or re_ is not None:  # a numpy operand (a constant) is replicated
        le = le or [None] * len(lhs.shape)
        re_ = re_ or [None] * len(rhs.shape)
    want = _out_spec(out_sharding)
    if le is not None:
        if want is None:
            if any(e is not None for e in re_) or le[dn.lhs_spec[1]] is not None:
                raise ProgramError("Please specify the output sharding via `out_sharding` "
                                   "parameter of `conv_general_dilated`")
            want = _varying_out(lhs, le, out_shape, "conv_general_dilated")
        lhs = _gather_dims(lhs, le, set(dn.lhs_spec[1:]))
        rhs = _gather_dims(rhs, re_, set(range(len(rhs.shape))))

    # input as [N, spatial..., C], kernel as [spatial..., I, O]
    x = jnp.transpose(lhs, (dn.lhs_spec[0],) + tuple(dn.lhs_spec[2:]) + (dn.lhs_spec[1],))
    w = jnp.transpose(rhs, tuple(dn.rhs_spec[2:]) + (dn.rhs_spec[1], dn.rhs_spec[0]))
    taps, outs = _windows(x, range(1, nsp + 1), rhs_t[2:], window_strides, pads, lhs_dilation,
                          rhs_dilation, 0)
    g = feature_group_count
    c, o, k = lhs_t[1], rhs_t[0], math.prod(rhs_t[2:])
    sp = "".join(chr(ord("h") + i) for i in range(nsp))
    if g == 1:
        cols = taps[0] if len(taps) == 1 else jnp.concatenate(taps, axis=-1)
        y = jnp.einsum(f"n{sp}c,co->n{sp}o", cols, jnp.reshape(w, (k * c, o)))
    else:
        cg, og = c // g, o // g
        taps = [jnp.reshape(t, tuple(t.shape[:-1]) + (g, cg)) for t in taps]
        cols = taps[0] if len(taps) == 1 else jnp.concatenate(taps, axis=-1)
        wg = jnp.transpose(jnp.reshape(w, (k, cg, g, og)), (2, 0, 1, 3))
        y = jnp.einsum(f"n{sp}gc,gco->n{sp}go", cols, jnp.reshape(wg, (g, k * cg, og)))
        y = jnp.reshape(y, (lhs_t[0],) + tuple(outs) + (o,))
    pos = (dn.out_spec[0],) + tuple(dn.out_spec[2:]) + (dn.out_spec[1],)
    y = jnp.transpose(y, tuple(int(i) for i in _np.argsort(pos)))
    return _lay_out(y, want)


def _check_conv_shapes(lhs, rhs, dn, window_strides, g, bg):
    """JAX's _conv_general_dilated_shape_rule checks, its sentences."""
    if len(lhs.shape) != len(rhs.shape):
        raise ValueError(f"conv_general_dilated lhs and rhs must have the same number of "
                         f"dimensions, but got {tuple(lhs.shape)} and {tuple(rhs.shape)}.")
    if not g > 0:
        raise ValueError(f"conv_general_dilated feature_group_count must be a positive "
                         f"integer, got {g}.")
    c = lhs.shape[dn.lhs_spec[1]]
    if c % g:
        raise ValueError(f"conv_general_dilated feature_group_count must divide lhs feature "
                         f"dimension size, but {g} does not divide {c}.")
    if c // g != rhs.shape[dn.rhs_spec[1]]:
        raise ValueError(f"conv_general_dilated lhs feature dimension size divided by "
                         f"feature_group_count must equal the rhs input feature dimension "
                         f"size, but {c} // {g} != {rhs.shape[dn.rhs_spec[1]]}.")
    if rhs.shape[dn.rhs_spec[0]] % g:
        raise ValueError(f"conv_general_dilated rhs output feature dimension size must be a "
                         f"multiple of feature_group_count, but {rhs.shape[dn.rhs_spec[0]]} "
                         f"is not a multiple of {g}.")
    if not bg > 0:
        raise ValueError(f"conv_general_dilated batch_group_count must be a positive integer, "
                         f"got {bg}.")
    if bg > 1 and g > 1:
        raise ValueError(f"At most one of batch_group_count and feature_group_count may be > "
                         f"1, got batch_group_count={bg} and feature_group_count={g}")
    if len(dn.rhs_spec) - 2 != len(window_strides):
        raise ValueError(f"conv_general_dilated window and window_strides must have the same "
                         f"number of dimensions, but got {len(dn.rhs_spec) - 2} and "
                         f"{len(window_strides)}")


def conv(lhs, rhs, window_strides, padding, precision=None, preferred_element_type=None):
    """jax.lax.conv: conv_general_dilated with NCHW / OIHW layouts."""
    return conv_general_dilated(lhs, rhs, window_strides, padding, precision=precision,
                                preferred_element_type=preferred_element_type)


def conv_with_general_padding(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation,
                              precision=None, preferred_element_type=None):
    """jax.lax.conv_with_general_padding: conv_general_dilated with NCHW /
    OIHW layouts and dilations."""
    return conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=lhs_dilation,
                                rhs_dilation=rhs_dilation, precision=precision,
                                preferred_element_type=preferred_element_type)


def _conv_transpose_padding(k, s, padding):
    if padding == "SAME":
        pad_len = k + s - 2
        pad_a = k - 1 if s > k - 1 else int(_np.ceil(pad_len / 2))
    elif padding == "VALID":
        pad_len = k + s - 2 + max(k - s, 0)
        pad_a = k - 1
    elif isinstance(padding, tuple):
        pads = tuple(k - p - 1 for p in padding)
        pad_a, pad_len = pads[0], sum(pads)
    else:
        raise ValueError(f"Invalid padding mode: {padding}")
    return pad_a, pad_len - pad_a


def conv_transpose(lhs, rhs, strides, padding, rhs_dilation=None, dimension_numbers=None,
                   transpose_kernel=False, precision=None, preferred_element_type=None,
                   use_consistent_padding=False):
    """jax.lax.conv_transpose: the gradient-shaped (fractionally strided)
    convolution, as JAX computes it (conv_general_dilated with the input
    dilated by strides); default layouts NHWC / HWIO / NHWC."""
    assert len(lhs.shape) == len(rhs.shape) and len(lhs.shape) >= 2
    ndims = len(lhs.shape)
    one = (1,) * (ndims - 2)
    if dimension_numbers is None:
        defaults = {2: ("NC", "IO", "NC"), 3: ("NHC", "HIO", "NHC"),
                    4: ("NHWC", "HWIO", "NHWC"), 5: ("NHWDC", "HWDIO", "NHWDC")}
        if ndims not in defaults:
            raise ValueError("No 4+ dimensional dimension_number defaults.")
        dimension_numbers = defaults[ndims]
    dn = conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
    k_sdims = [rhs.shape[d] for d in dn.rhs_spec[2:]]
    if rhs_dilation is None:
        rhs_dilation = (1,) * (ndims - 2)
    if use_consistent_padding or (isinstance(padding, str) and padding in ("SAME", "VALID")):
        eff = _dilate_shape(k_sdims, rhs_dilation)
        rep = [padding] * len(strides) if isinstance(padding, str) else padding
        pads = tuple(_conv_transpose_padding(k, s, p) for k, s, p in zip(eff, strides, rep))
    else:
        pads = padding
    if transpose_kernel:
        rhs = jnp.flip(rhs, tuple(dn.rhs_spec[2:]))
        rhs = jnp.swapaxes(rhs, dn.rhs_spec[0], dn.rhs_spec[1])
    return conv_general_dilated(lhs, rhs, one, pads, strides, rhs_dilation, dn,
                                precision=precision,
                                preferred_element_type=preferred_element_type)


# ---- windowed reductions -------------------------------------------------


def _is(fn, *names):
    from . import lax
    return any(fn is getattr(lax, n, None) or fn is getattr(jnp, n, None) for n in names)


@_at_once
def _reduce_window(operand, init_value, computation, window_dimensions, window_strides,
                   padding, base_dilation, window_dilation):
    x = operand
    nd = len(x.shape)
    if len(window_dimensions) != nd:
        raise TypeError(f"reduce_window: window_dimensions {tuple(window_dimensions)} must "
                        f"have one entry per dimension of the operand, shape "
                        f"{tuple(x.shape)}")
    init = init_value.item() if isinstance(init_value, _np.ndarray) else init_value
    if not isinstance(init, numbers.Number):
        raise TypeError("reduce_window: init_value must be a Python or numpy scalar here")
    axes = [d for d in range(nd)
            if window_dimensions[d] != 1 or window_strides[d] != 1 or padding[d] != (0, 0)
            or base_dilation[d] != 1 or window_dilation[d] != 1]
    ents = _entries(x)
    want = None
    if ents is not None:
        dil = _dilate_shape(x.shape, base_dilation)
        out_shape = [_out_size(n + lo + hi, (k - 1) * r + 1, s) for n, (lo, hi), k, r, s in
                     zip(dil, padding, window_dimensions, window_dilation, window_strides)]
        want = _varying_out(x, ents, out_shape, "reduce_window")
        x = _gather_dims(x, ents, set(axes))
    taps, _ = _windows(x, axes, [window_dimensions[d] for d in axes],
                       [window_strides[d] for d in axes], [padding[d] for d in axes],
                       [base_dilation[d] for d in axes], [window_dilation[d] for d in axes],
                       init)
    if len(taps) > 1 and (_is(computation, "max", "maximum") or
                          _is(computation, "min", "minimum")):
        # the first element holding the extremum, as select_and_scatter_add
        st = jnp.stack(taps, axis=-1)
        pick = jnp.argmax(st, axis=-1) if _is(computation, "max", "maximum") else \
            jnp.argmin(st, axis=-1)
        r = jnp.take_along_axis(st, jnp.expand_dims(pick, -1), axis=-1)[..., 0]
    else:
        r = taps[0]
        for t in taps[1:]:
            r = computation(r, t)
    if not _identity(computation, init, r):
        r = computation(r, init) if not _is(computation, "add") else r + init
    return _lay_out(r, want)


def _identity(computation, init, x):
    """Whether init is computation's identity for x's dtype (JAX's monoid
    test), so that folding it in changes nothing."""
    dt = _np.dtype(x.dtype)
    if _is(computation, "add"):
        return init == 0
    if _is(computation, "mul", "multiply"):
        return init == 1
    if _is(computation, "max", "maximum"):
        lo = -_np.inf if dt.kind == "f" else (False if dt.kind == "b" else _np.iinfo(dt).min)
        return init == lo
    if _is(computation, "min", "minimum"):
        hi = _np.inf if dt.kind == "f" else (True if dt.kind == "b" else _np.iinfo(dt).max)
        return init == hi
    return False


def reduce_window(operand, init_value, computation, window_dimensions, window_strides=None,
                  padding="VALID", base_dilation=None, window_dilation=None):
    """jax.lax.reduce_window of one array: computation (lax.add, lax.max,
    lax.min, lax.mul or any binary function of arrays) over each window,
    started from init_value, which also fills the padding. Pooling:
    reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1),
    'VALID'). Sharding: JAX's rule (the operand's spec where sizes still
    divide)."""
    nd = len(window_dimensions)
    if isinstance(padding, str):
        dil = window_dimensions if window_dilation is None else \
            _dilate_shape(window_dimensions, window_dilation)
        padding = tuple(padtype_to_pads(operand.shape, dil, window_strides or (1,) * nd,
                                        padding))
    else:
        padding = tuple((int(a), int(b)) for a, b in padding)
    window_strides = tuple(window_strides) if window_strides is not None else (1,) * nd
    base_dilation = tuple(base_dilation) if base_dilation is not None else (1,) * nd
    window_dilation = tuple(window_dilation) if window_dilation is not None else (1,) * nd
    return _reduce_window(operand, init_value, computation, tuple(window_dimensions),
                          window_strides, padding, base_dilation, window_dilation)


# ---- numpy's 1-d convolutions ----------------------------------------------


def _conv1d(x, y, mode, op, precision, preferred_element_type):
    if len(x.shape) != 1 or len(y.shape) != 1:
        raise ValueError(f"{op}() only support 1-dimensional inputs.")
    if preferred_element_type is None:
        dt = _np.result_type(x.dtype, y.dtype)
        if dt.kind not in "fc":
            dt = _np.dtype(_np.float32)
        x, y = jnp.astype(x, dt), jnp.astype(y, dt)
    if x.shape[0] == 0 or y.shape[0] == 0:
        raise ValueError(f"{op}: inputs cannot be empty, got shapes {tuple(x.shape)} and "
                         f"{tuple(y.shape)}.")
    flip_out = False
    if op == "correlate":
        if x.shape[0] < y.shape[0]:
            x, y, flip_out = y, x, True
    else:
        if x.shape[0] < y.shape[0]:
            x, y = y, x
        y = jnp.flip(y, 0)
    m = y.shape[0]
    if mode == "valid":
        padding = [(0, 0)]
    elif mode == "same":
        padding = [(m // 2, m - m // 2 - 1)]
    elif mode == "full":
        padding = [(m - 1, m - 1)]
    else:
        raise ValueError("mode must be one of ['full', 'same', 'valid']")
    r = conv_general_dilated(x[None, None, :], y[None, None, :], (1,), padding,
                             precision=precision, preferred_element_type=preferred_element_type)
    r = r[0, 0]
    return jnp.flip(r, 0) if flip_out else r


@_at_once
def convolve(a, v, mode="full", *, precision=None, preferred_element_type=None):
    """jnp.convolve: numpy's 1-d convolution ('full', 'same', 'valid'), as
    JAX computes it (conv_general_dilated of the flipped shorter input;
    integers promoted to float32)."""
    return _conv1d(a, v, mode, "convolve", precision, preferred_element_type)


@_at_once
def correlate(a, v, mode="valid", *, precision=None, preferred_element_type=None):
    """jnp.correlate: numpy's 1-d cross-correlation ('valid', 'same',
    'full'), as JAX computes it."""
    return _conv1d(a, v, mode, "correlate", precision, preferred_element_type)
