"""jax.image for shmap: resize and scale_and_translate by JAX's algorithm
(jax/_src/image/scale.py). Each resized dimension is a product with a
weight matrix of the kernel's values (triangle, Keys cubic, OpenCV's
cubic, Lanczos, area), computed here in float32 from the static sizes,
scale and translation, as JAX computes it; nearest is a gather of JAX's
offsets."""
import enum
import math

import numpy as np

__all__ = ["ResizeMethod", "resize", "scale_and_translate"]


class ResizeMethod(enum.Enum):
    """jax.image.ResizeMethod."""
    NEAREST = 0
    LINEAR = 1
    LANCZOS3 = 2
    LANCZOS5 = 3
    CUBIC = 4
    CUBIC_PYTORCH = 5
    AREA = 6

    @staticmethod
    def from_string(s):
        names = {"nearest": "NEAREST", "linear": "LINEAR", "bilinear": "LINEAR",
                 "trilinear": "LINEAR", "triangle": "LINEAR", "lanczos3": "LANCZOS3",
                 "lanczos5": "LANCZOS5", "cubic": "CUBIC", "bicubic": "CUBIC",
                 "tricubic": "CUBIC", "cubic-pytorch": "CUBIC_PYTORCH",
                 "bicubic-pytorch": "CUBIC_PYTORCH", "area": "AREA"}
        if s not in names:
            raise ValueError(f'Unknown resize method "{s}"')
        return ResizeMethod[names[s]]


def _lanczos(radius):
    def k(x):
        y = radius * np.sin(np.pi * x) * np.sin(np.pi * x / radius)
        with np.errstate(divide="ignore", invalid="ignore"):
            out = np.where(x > 1e-3, y / np.where(x != 0, np.pi ** 2 * x ** 2, 1), 1)
        return np.where(x > radius, 0.0, out)
    return k


def _keys_cubic(x):
    out = ((1.5 * x - 2.5) * x) * x + 1.0
    out = np.where(x >= 1.0, ((-0.5 * x + 2.5) * x - 4.0) * x + 2.0, out)
    return np.where(x >= 2.0, 0.0, out)


def _opencv_cubic(x):
    a = -0.75
    out = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    out = np.where(x >= 1.0, ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a, out)
    return np.where(x >= 2.0, 0.0, out)


def _triangle(x):
    return np.maximum(0, 1 - np.abs(x))


_AREA = object()
_KERNELS = {ResizeMethod.LINEAR: (1, _triangle), ResizeMethod.LANCZOS3: (3, _lanczos(3.0)),
            ResizeMethod.LANCZOS5: (5, _lanczos(5.0)), ResizeMethod.CUBIC: (2, _keys_cubic),
            ResizeMethod.CUBIC_PYTORCH: (2, _opencv_cubic), ResizeMethod.AREA: (1, _AREA)}


def _weight_mat(input_size, output_size, scale, translation, kernel, antialias,
                edge_padding, radius):
    """JAX's compute_weight_mat, in float32 numpy: (input_size, output_size)."""
    f32 = np.float32
    scale, translation = f32(scale), f32(translation)
    inv_scale = f32(1.0) / scale
    kernel_scale = max(inv_scale, f32(1.0)) if antialias else f32(1.0)
    sample_f = ((np.arange(output_size, dtype=f32) + f32(0.5)) * inv_scale -
                translation * inv_scale - f32(0.5))
    k = 0
    if edge_padding:
        k = math.ceil(radius * max(1.0 / float(scale), 1.0)) if antialias else radius
    expanded = np.arange(-k, input_size + k, dtype=f32)
    if kernel is _AREA:
        left = np.arange(output_size, dtype=f32) * inv_scale - translation * inv_scale
        right = left + inv_scale
        lj = np.arange(input_size, dtype=f32)
        weights = np.maximum(f32(0), np.minimum(right[None, :], lj[:, None] + 1) -
                             np.maximum(left[None, :], lj[:, None]))
    else:
        weights = kernel(np.abs(sample_f[None, :] - expanded[:, None]) / kernel_scale)
    weights = weights.astype(f32)
    eps = 1000.0 * float(np.finfo(np.float32).eps)
    if edge_padding:
        mat = np.zeros((input_size, output_size), f32)
        np.add.at(mat, np.clip(expanded.astype(np.int32), 0, input_size - 1), weights)
        total = mat.sum(axis=0, keepdims=True)
        return np.where(np.abs(total) > eps, mat / np.where(total != 0, total, 1), 0).astype(f32)
    total = weights.sum(axis=0, keepdims=True)
    weights = np.where(np.abs(total) > eps, weights / np.where(total != 0, total, 1), 0)
    inside = (sample_f >= -0.5) & (sample_f <= input_size - 0.5)
    return np.where(inside[None, :], weights, 0).astype(f32)


def _method(method):
    return ResizeMethod.from_string(method) if isinstance(method, str) else method


def _inexact(x):
    from . import numpy as jnp
    return x if np.issubdtype(np.dtype(x.dtype), np.inexact) else jnp.astype(x, np.float32)


def _scale_and_translate(x, shape, spatial_dims, scale, translation, method, antialias):
    from . import numpy as jnp
    if method == ResizeMethod.CUBIC_PYTORCH and antialias:
        method = ResizeMethod.CUBIC
    radius, kernel = _KERNELS[method]
    edge_padding = method == ResizeMethod.CUBIC_PYTORCH and not antialias
    x = _inexact(x)
    letters = "abcdefghijklmnopqrstuvwxyz"
    for d, s, t in zip(spatial_dims, scale, translation):
        d = d % len(x.shape)
        w = _weight_mat(x.shape[d], shape[d], s, t, kernel, antialias, edge_padding, radius)
        ins = letters[:len(x.shape)]
        out = ins[:d] + "Z" + ins[d + 1:]
        x = jnp.einsum(f"{ins},{ins[d]}Z->{out}", x, w.astype(np.dtype(x.dtype)))
    return x


def scale_and_translate(image, shape, spatial_dims, scale, translation, method,
                        antialias=True, precision=None):
    """jax.image.scale_and_translate (scale and translation static)."""
    shape = tuple(int(n) for n in shape)
    if len(shape) != len(image.shape):
        raise ValueError(f"shape must have length equal to the number of dimensions of x;  "
                         f"{shape} vs {tuple(image.shape)}")
    method = _method(method)
    if method == ResizeMethod.NEAREST:
        raise ValueError("Nearest neighbor resampling is not currently supported for "
                         "scale_and_translate.")
    return _scale_and_translate(image, shape, tuple(spatial_dims), [float(s) for s in scale],
                                [float(t) for t in translation], method, antialias)


def resize(image, shape, method, antialias=True, precision=None):
    """jax.image.resize: every dimension whose size changes resampled by
    method (nearest, linear, cubic, cubic-pytorch, lanczos3, lanczos5,
    area), as JAX's."""
    shape = tuple(int(n) for n in shape)
    if len(shape) != len(image.shape):
        raise ValueError(f"shape must have length equal to the number of dimensions of x;  "
                         f"{shape} vs {tuple(image.shape)}")
    method = _method(method)
    dims = [d for d in range(len(shape)) if image.shape[d] != shape[d]]
    if method == ResizeMethod.NEAREST:
        x = image
        for d in dims:
            m, n = image.shape[d], shape[d]
            offsets = np.floor(((np.arange(n, dtype=np.float32) + 0.5) * np.float32(m) /
                                np.float32(n)).astype(np.float32)).astype(np.int32)
            x = x[(slice(None),) * d + (offsets,)]
        return x
    scale = [1.0 if shape[d] == 0 else shape[d] / image.shape[d] for d in dims]
    return _scale_and_translate(image, shape, dims, scale, [0.0] * len(dims), method,
                                antialias)
