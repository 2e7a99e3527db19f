"""A loop's batches as its program inputs: per `next(iterator)` site of an `sx.range` body, each
input (a leaf of the element, then its real row counts) stacked over the loop's steps, one
per-replica array of `[steps, ...]` per replica. The global array holds replica 0's steps,
then replica 1's, ...: the per-replica layout of any `[steps, ...]` value.

Elements split and padded on the host (`HostElement`) are stacked there and placed with one
transfer per input; elements that are already placed only (other pipelines) are stacked on
the devices by one small compiled program, without a round trip through the host.
"""
from __future__ import annotations

import functools
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ...backends import transfer
from .host_element import HostElement


def host_stacked(elements: Sequence[HostElement], shapes: Sequence[tuple], n: int) -> list[np.ndarray]:
    """Per input (each leaf, then the counts), the `k` elements' host copies stacked per replica:
    `(n * k, *shape)` for an input of per-replica shape `shape`."""
    k = len(elements)
    columns = [[*e.hosts, e.count_host()] for e in elements]
    out = []
    for p, shape in enumerate(shapes):
        stacked = transfer.host_array((n, k, *shape), columns[0][p].dtype)  # aligned: placed in place on the CPU
        for step, col in enumerate(columns):
            stacked[:, step] = np.reshape(col[p], (n, *shape))
        out.append(stacked.reshape((n * k, *shape)))
    return out


def put_host(hosts: list[np.ndarray], shardings: list) -> list[jax.Array] | None:
    """One transfer of each stacked host array onto its sharding; None when some sharding spans
    other processes' devices (the caller stacks on the devices then)."""
    if not all(s.is_fully_addressable for s in shardings):
        return None
    return transfer.device_put(hosts, shardings)


@functools.lru_cache(maxsize=64)
def _device_stacker(n: int, k: int, shapes: tuple, shardings: tuple):
    """A compiled program stacking `k` global arrays per input (as `host_stacked` stacks host
    copies); each replica's part stays on its devices."""
    def stack(groups):
        return [jnp.stack([x.reshape((n, *shape)) for x in group], axis=1).reshape((n * k, *shape))
                for group, shape in zip(groups, shapes)]
    return jax.jit(stack, out_shardings=list(shardings))


def device_stacked(groups: list[list[jax.Array]], shapes: Sequence[tuple], n: int, shardings: list) -> list:
    """Per input, its `k` placed global arrays stacked per replica on the devices."""
    stack = _device_stacker(n, len(groups[0]), tuple(map(tuple, shapes)), tuple(shardings))
    return list(stack(groups))


def all_host(elements: Sequence[Any]) -> bool:
    """Whether every element still has its host copy (so one transfer per input places them)."""
    return all(isinstance(e, HostElement) for e in elements)
