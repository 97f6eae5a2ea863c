"""jax.scipy.ndimage: map_coordinates as JAX defines it
(jax/_src/scipy/ndimage.py): the input sampled at the coordinates by
nearest-neighbour (order 0: coordinates rounded half away from zero) or
linear (order 1) interpolation, the product of the 1-d weights over every
corner; indices outside the input fixed by mode: 'constant' (cval there),
'nearest', 'wrap', 'mirror' or 'reflect' (as SciPy documents them, so
'wrap' and 'constant' are SciPy's 'grid-wrap' and 'grid-constant').
Integer inputs are rounded back half away from zero."""
import functools
import itertools
import operator

import numpy as _np

from .. import lax as _lax
from .. import numpy as jnp
from ..numpy import _at_once

__all__ = ["map_coordinates"]


def _mirror_index_fixer(index, size):
    s = size - 1  # half-wavelength of the triangular wave
    return jnp.abs((index + s) % (2 * s) - s)


def _reflect_index_fixer(index, size):
    return jnp.floor_divide(_mirror_index_fixer(2 * index + 1, 2 * size + 1) - 1, 2)


_INDEX_FIXERS = {
    "constant": lambda index, size: index,
    "nearest": lambda index, size: jnp.clip(index, 0, size - 1),
    "wrap": lambda index, size: index % size,
    "mirror": _mirror_index_fixer,
    "reflect": _reflect_index_fixer,
}


def _round_half_away_from_zero(a):
    return a if _np.issubdtype(a.dtype, _np.integer) else _lax.round(a)


def _nearest_indices_and_weights(coordinate):
    index = jnp.astype(_round_half_away_from_zero(coordinate), _np.int32)
    return [(index, _np.dtype(coordinate.dtype).type(1))]


def _linear_indices_and_weights(coordinate):
    lower = jnp.floor(coordinate)
    upper_weight = coordinate - lower
    lower_weight = 1 - upper_weight
    index = jnp.astype(lower, _np.int32)
    return [(index, lower_weight), (index + 1, upper_weight)]


def _cval(cval, dt):
    """cval as an array of the input's dtype (jnp.asarray(cval, dtype))."""
    if hasattr(cval, "type"):
        return jnp.astype(cval, dt)
    return jnp.full((), cval, dt)


def map_coordinates(input, coordinates, order, mode="constant", cval=0.0):
    """scipy.ndimage.map_coordinates (order 0 or 1): the interpolated values
    of input at the points coordinates (a sequence of input.ndim arrays of
    one shape), JAX's modes and its result dtype (input's)."""
    return _map_coordinates(input, list(coordinates), order, mode, cval)


@_at_once
def _map_coordinates(input, coordinates, order, mode, cval):
    input_arr = jnp.asarray(input)
    coordinate_arrs = [jnp.asarray(c) for c in coordinates]
    if len(coordinates) != len(input_arr.shape):
        raise ValueError("coordinates must be a sequence of length input.ndim, but "
                         "{} != {}".format(len(coordinates), len(input_arr.shape)))
    index_fixer = _INDEX_FIXERS.get(mode)
    if index_fixer is None:
        raise NotImplementedError(
            "jax.scipy.ndimage.map_coordinates does not yet support mode {}. "
            "Currently supported modes are {}.".format(mode, set(_INDEX_FIXERS)))
    if mode == "constant":
        def is_valid(index, size):
            return (0 <= index) & (index < size)
    else:
        def is_valid(index, size):
            return True
    if order == 0:
        interp_fun = _nearest_indices_and_weights
    elif order == 1:
        interp_fun = _linear_indices_and_weights
    else:
        raise NotImplementedError(
            "jax.scipy.ndimage.map_coordinates currently requires order<=1")
    dt = _np.dtype(input_arr.dtype)
    valid_1d_interpolations = []
    for coordinate, size in zip(coordinate_arrs, input_arr.shape):
        valid_interp = []
        for index, weight in interp_fun(coordinate):
            valid_interp.append((index_fixer(index, size), is_valid(index, size), weight))
        valid_1d_interpolations.append(valid_interp)
    outputs = []
    for items in itertools.product(*valid_1d_interpolations):
        indices, validities, weights = zip(*items)
        if all(valid is True for valid in validities):
            contribution = input_arr[tuple(indices)]
        else:
            all_valid = functools.reduce(operator.and_, validities)
            contribution = jnp.where(all_valid, input_arr[tuple(indices)], _cval(cval, dt))
        outputs.append(functools.reduce(operator.mul, weights) * contribution)
    result = functools.reduce(operator.add, outputs[1:], outputs[0])
    if _np.issubdtype(dt, _np.integer):
        result = _round_half_away_from_zero(result)
    return jnp.astype(result, dt)
