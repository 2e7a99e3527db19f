"""A digest of each stored array, checked on restore: orbax reads a flipped byte in a data
file back as a wrong value without complaint, and a silent wrong value is the worst outcome.

The digest is two sums over the array's bit pattern as 32-bit words, wrapping: the plain sum
changes whenever one word does, the sum weighted by odd numbers (invertible modulo 2**32)
catches words that trade places. It runs where the arrays are, dispatched before `save` returns
and waited for by the write, so an async save is not held up by it and no extra data moves
to the host.
"""
from __future__ import annotations

from typing import Callable

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


def start(arrays: list) -> Callable[[], list[list[int]]]:
    """Dispatch the digests of `arrays` (device work, queued behind what is already there; the
    arrays may be donated afterwards) and return the function that waits for them:
    [plain sum, weighted sum] of each. A replicated array is summed on one of its devices (not
    on every copy; the arrays spread over the devices); an array split over devices (or
    processes) by one program over all of them; host arrays on the default device."""
    groups: dict = {}
    for i, a in enumerate(arrays):
        if isinstance(a, np.ndarray):
            a = jnp.asarray(a)
        elif a.is_fully_replicated:  # one copy, the arrays spread over the devices holding copies
            shards = a.addressable_shards
            a = shards[i % len(shards)].data
        groups.setdefault(a.sharding, []).append((i, a))
    pending = [([i for i, _ in members], _digests([a for _, a in members])) for members in groups.values()]

    def result() -> list[list[int]]:
        out: list = [None] * len(arrays)
        for indices, sums in pending:
            for i, d in zip(indices, jax.device_get(sums)):
                out[i] = [int(x) for x in np.asarray(d)]
        return out
    return result


def digests(arrays: list) -> list[list[int]]:
    """The digests of `arrays`, waited for."""
    return start(arrays)()
