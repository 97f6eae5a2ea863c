"""jax.scipy.signal as JAX defines it (jax/_src/scipy/signal.py):
convolve and correlate (n-d) and convolve2d and correlate2d by the direct
method, lax.conv_general_dilated of the larger input with the flipped
smaller one ('full', 'same', 'valid'; integers promoted to float32), and
detrend ('constant': the mean removed; 'linear': a least-squares line,
piecewise between breakpoints bp).

method='fft' and fftconvolve, and the spectral functions (stft, istft,
csd, welch), need FFTs and complex numbers, which shmap lacks: not here
(method='fft' is refused with a sentence)."""
import numpy as _np

from .. import lax as _lax
from .. import linalg as _la
from .. import numpy as jnp
from ..numpy import _at_once

__all__ = ["convolve", "convolve2d", "correlate", "correlate2d", "detrend"]


def _inexact(*xs):
    """JAX's promote_dtypes_inexact."""
    dt = jnp.result_type(*xs)
    if not _np.issubdtype(dt, _np.floating):
        dt = _np.dtype(_np.float32)
    return tuple(x if _np.dtype(x.dtype) == dt else jnp.astype(x, dt) for x in xs)


def _convolve_nd(in1, in2, mode):
    """JAX's _convolve_nd: in2 (the smaller, after a swap if in1 is) flipped,
    conv_general_dilated with the padding of the mode."""
    if mode not in ["full", "same", "valid"]:
        raise ValueError("mode must be one of ['full', 'same', 'valid']")
    if len(in1.shape) != len(in2.shape):
        raise ValueError("in1 and in2 must have the same number of dimensions")
    if _np.prod(in1.shape) == 0 or _np.prod(in2.shape) == 0:
        raise ValueError(f"zero-size arrays not supported in convolutions, got shapes "
                         f"{tuple(in1.shape)} and {tuple(in2.shape)}.")
    in1, in2 = _inexact(in1, in2)
    no_swap = all(s1 >= s2 for s1, s2 in zip(in1.shape, in2.shape))
    swap = all(s1 <= s2 for s1, s2 in zip(in1.shape, in2.shape))
    if not (no_swap or swap):
        raise ValueError("One input must be smaller than the other in every dimension.")
    shape_o = tuple(in2.shape)
    if swap:
        in1, in2 = in2, in1
    shape = tuple(in2.shape)
    in2 = jnp.flip(in2)
    if mode == "valid":
        padding = [(0, 0) for _ in shape]
    elif mode == "same":
        padding = [(s - 1 - (s_o - 1) // 2, s - s_o + (s_o - 1) // 2)
                   for s, s_o in zip(shape, shape_o)]
    else:
        padding = [(s - 1, s - 1) for s in shape]
    strides = tuple(1 for _ in shape)
    lhs = jnp.reshape(in1, (1, 1) + tuple(in1.shape))
    rhs = jnp.reshape(in2, (1, 1) + shape)
    result = _lax.conv_general_dilated(lhs, rhs, strides, padding)
    return result[0, 0]


def convolve(in1, in2, mode="full", method="auto", precision=None):
    """scipy.signal.convolve: the n-d convolution of in1 and in2 (of equal
    rank; one no larger than the other in every dimension); 'same' is
    centered on in1. method 'auto' and 'direct' are JAX's direct method."""
    if method == "fft":
        raise NotImplementedError("scipy.signal.convolve: method='fft' (fftconvolve) needs "
                                  "FFTs, which shmap lacks; use method='direct'")
    if method not in ["direct", "auto"]:
        raise ValueError(f"Got method={method!r}; expected 'auto', 'fft', or 'direct'.")
    return _convolve(in1, in2, mode)


@_at_once
def _convolve(in1, in2, mode):
    return _convolve_nd(in1, in2, mode)


def convolve2d(in1, in2, mode="full", boundary="fill", fillvalue=0, precision=None):
    """scipy.signal.convolve2d: convolve of two 2-d arrays (boundary 'fill'
    with 0 only, as JAX's)."""
    if boundary != "fill" or fillvalue != 0:
        raise NotImplementedError("convolve2d() only supports boundary='fill', fillvalue=0")
    if _np.ndim(in1) != 2 or _np.ndim(in2) != 2:
        raise ValueError("convolve2d() only supports 2-dimensional inputs.")
    return _convolve(in1, in2, mode)


def correlate(in1, in2, mode="full", method="auto", precision=None):
    """scipy.signal.correlate: convolve with in2 flipped."""
    return convolve(in1, _flip(in2), mode, method=method)


@_at_once
def _flip(x):
    return jnp.flip(x)


def correlate2d(in1, in2, mode="full", boundary="fill", fillvalue=0, precision=None):
    """scipy.signal.correlate2d as JAX computes it: the convolution of
    flipped inputs, flipped back, with JAX's choice of which input to flip
    per mode."""
    if boundary != "fill" or fillvalue != 0:
        raise NotImplementedError("correlate2d() only supports boundary='fill', fillvalue=0")
    if _np.ndim(in1) != 2 or _np.ndim(in2) != 2:
        raise ValueError("correlate2d() only supports 2-dimensional inputs.")
    return _correlate2d(in1, in2, mode)


@_at_once
def _correlate2d(in1, in2, mode):
    swap = all(s1 <= s2 for s1, s2 in zip(in1.shape, in2.shape))
    same_shape = all(s1 == s2 for s1, s2 in zip(in1.shape, in2.shape))
    if mode == "same":
        return jnp.flip(_convolve_nd(jnp.flip(in1), in2, mode))
    if mode == "valid":
        if swap and not same_shape:
            return _convolve_nd(jnp.flip(in2), in1, mode)
        return jnp.flip(_convolve_nd(jnp.flip(in1), in2, mode))
    if swap:
        return _convolve_nd(jnp.flip(in2), in1, mode)
    return jnp.flip(_convolve_nd(jnp.flip(in1), in2, mode))


def detrend(data, axis=-1, type="linear", bp=0, overwrite_data=None):
    """scipy.signal.detrend: data less its mean ('constant') or less its
    least-squares line along axis ('linear'), piecewise between the
    breakpoints bp (static: numbers)."""
    if overwrite_data is not None:
        raise NotImplementedError("overwrite_data argument not implemented.")
    if type not in ["constant", "linear"]:
        raise ValueError("Trend type must be 'linear' or 'constant'.")
    return _detrend(data, axis, type, tuple(_np.ravel(bp).tolist()))


@_at_once
def _detrend(data, axis, type, bp):
    data, = _inexact(jnp.asarray(data))
    if type == "constant":
        return data - jnp.mean(data, axis=axis, keepdims=True)
    N = data.shape[axis]
    bp_arr = _np.sort(_np.unique(_np.r_[0, list(bp), N]))
    if bp_arr[0] < 0 or bp_arr[-1] > N:
        raise ValueError("Breakpoints must be non-negative and less than length of data along "
                         "given axis.")
    data = jnp.moveaxis(data, axis, 0)
    shape = tuple(data.shape)
    data = jnp.reshape(data, (N, -1))
    dt = _np.dtype(data.dtype)
    pieces = []
    for m in range(len(bp_arr) - 1):
        npts = int(bp_arr[m + 1] - bp_arr[m])
        a = jnp.stack([jnp.ones((npts,), dt),
                       jnp.arange(1, npts + 1, dtype=dt) / float(npts)], axis=1)
        seg = data[int(bp_arr[m]):int(bp_arr[m + 1])]
        if npts == 1:  # lstsq's minimum-norm line through one point: the point itself
            pieces.append(seg - seg)
            continue
        coef = _la.lstsq(a, seg)[0]
        pieces.append(seg - jnp.matmul(a, coef))
    data = jnp.concatenate(pieces, axis=0) if len(pieces) > 1 else pieces[0]
    return jnp.moveaxis(jnp.reshape(data, shape), 0, axis)
