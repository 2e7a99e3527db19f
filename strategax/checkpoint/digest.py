"""A digest of each stored array, checked on restore: orbax reads a flipped byte in a data
file back as a wrong value without complaint, and a silent wrong value is the worst outcome.

The digest is two sums over the array's bit pattern as 32-bit words, wrapping: the plain sum
changes whenever one word does, the sum weighted by odd numbers (invertible modulo 2**32)
catches words that trade places. It runs where the arrays are (one small program; over every
process of a multi-worker job) so saving moves no extra data to the host.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

_WORDS = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint32}


def _digest(a: jax.Array) -> jax.Array:
    if a.dtype == jnp.bool_:
        a = a.astype(jnp.uint8)
    words = jax.lax.bitcast_convert_type(a, _WORDS[a.dtype.itemsize]).astype(jnp.uint32).reshape(-1)
    odd = jnp.arange(words.size, dtype=jnp.uint32) * jnp.uint32(2) + jnp.uint32(1)
    return jnp.stack([words.sum(dtype=jnp.uint32), (words * odd).sum(dtype=jnp.uint32)])


_digests = jax.jit(lambda arrays: [_digest(a) for a in arrays])


def digests(arrays: list) -> list[list[int]]:
    """[plain sum, weighted sum] of each array: device arrays where they are (one program, over
    every process for arrays spanning a job), host arrays on this process's default device."""
    out: list = [None] * len(arrays)
    for on_host in (False, True):
        picked = [i for i, a in enumerate(arrays) if isinstance(a, np.ndarray) == on_host]
        if picked:
            group = [jnp.asarray(arrays[i]) if on_host else arrays[i] for i in picked]
            for i, d in zip(picked, _digests(group)):
                out[i] = [int(x) for x in np.asarray(d)]
    return out
