"""Typed PRNG keys (`jax.random.key`, and the keys `jax.random.PRNGKey` wraps inside JAX's
random functions) as plain arrays: the IR holds a key array of shape S as its key data, a
uint32 array of shape S + the implementation's key shape (threefry: (2,)), exactly what
`jax.random.key_data` gives. Each random primitive is replaced by the computation JAX's own
implementation runs on that data, and any other primitive applied to keys (slicing the result
of `split`, broadcasting, selecting) by the same primitive mapped over the trailing key-data
axes, so the numbers are bit for bit those of plain JAX."""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import core as jax_core

# JAX's implementations on key data; JAX exports no public per-primitive rule for them.
from jax._src.random import prng as _prng


def is_key(aval) -> bool:
    """Whether `aval` (an abstract value or an array) holds typed PRNG keys."""
    dtype = getattr(aval, "dtype", None)
    return dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key)


def _impl(aval):
    return aval.dtype._impl


def physical_aval(aval):
    """The abstract value of `aval`'s key data (`aval` itself when it holds no keys)."""
    if not is_key(aval):
        return aval
    return jax_core.ShapedArray(tuple(aval.shape) + tuple(_impl(aval).key_shape), np.dtype(np.uint32))


def key_data(x):
    """A key array's data (anything else unchanged)."""
    return jax.random.key_data(x) if is_key(x) else x


def _identity(x):
    return x


def physical_rule(eqn) -> Callable | None:
    """A function of the equation's operands' key data computing its results' key data, or
    None when the equation involves no keys."""
    name, params = eqn.primitive.name, eqn.params
    avals_in = [v.aval for v in eqn.invars]
    if name == "random_seed":
        return lambda seeds: _prng.random_seed_impl_base(seeds, impl=params["impl"])
    if name in ("random_wrap", "random_unwrap", "random_clone"):
        return _identity
    if name == "random_bits":
        keys = avals_in[0]
        return lambda data: _prng.random_bits_impl_base(
            _impl(keys), data, keys.ndim, bit_width=params["bit_width"], shape=params["shape"])
    if name == "random_split":
        keys = avals_in[0]
        return lambda data: _prng.random_split_impl_base(_impl(keys), data, keys.ndim, shape=params["shape"])
    if name == "random_fold_in":
        keys = avals_in[0]
        return lambda data, msgs: _prng.random_fold_in_impl_base(_impl(keys), data, msgs, keys.shape)
    avals_out = [v.aval for v in eqn.outvars]
    key_avals = [a for a in avals_in + avals_out if is_key(a)]
    if not key_avals:
        return None
    if not all(is_key(a) for a in avals_out):
        raise TypeError(f"`{name}` of PRNG keys gives a result that is not a key")
    return _mapped(eqn.primitive, params, [is_key(a) for a in avals_in], len(_impl(key_avals[0]).key_shape))


def _mapped(prim, params: dict, keyed: list[bool], depth: int) -> Callable:
    """`prim` applied to each component of the key data: mapped over its trailing axes."""
    def apply(*xs):
        return prim.bind(*xs, **params)

    in_axes = tuple(-1 if k else None for k in keyed)
    for _ in range(depth):
        apply = jax.vmap(apply, in_axes=in_axes, out_axes=-1)
    return apply
