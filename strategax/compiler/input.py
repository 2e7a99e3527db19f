"""Distributed input: global batches split across the replicas, as TensorFlow splits them.

A global batch of B elements becomes per-replica batches of ceil(B / N) elements, the last
replicas getting fewer (or none) for a partial batch.
"""
from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np

from .distributed_values import PerReplica
from .errors import DistributionTypeError, DistributionValueError


def split_batch(batch: Any, num_replicas: int) -> list[Any]:
    """TensorFlow's split of one global batch (a pytree with a leading batch axis)."""
    leaves, treedef = jax.tree_util.tree_flatten(batch)
    if not leaves:
        raise DistributionValueError("a batch has no arrays", "yield arrays or pytrees of arrays")
    sizes = {np.shape(x)[0] if np.ndim(x) else None for x in leaves}
    if None in sizes:
        raise DistributionValueError("a batch holds a scalar; every leaf needs a leading batch axis",
                                     "batch your data (shape [batch, ...])")
    if len(sizes) > 1:
        raise DistributionValueError(f"the leaves of a batch disagree on the batch size: {sorted(sizes)}",
                                     "give every array of a batch the same leading dimension")
    (b,) = sizes
    per = math.ceil(b / num_replicas) if b else 0
    out = []
    for i in range(num_replicas):
        lo, hi = min(i * per, b), min((i + 1) * per, b)
        out.append(jax.tree_util.tree_unflatten(treedef, [np.asarray(x)[lo:hi] for x in leaves]))
    return out


class DistributedDataset:
    """Iterating yields, per global batch, a pytree of PerReplica values placed on the devices."""

    def __init__(self, strategy, dataset: Any, options=None):
        try:
            iter(dataset)
        except TypeError:
            raise DistributionTypeError(f"a {type(dataset).__name__} is not iterable",
                                        "pass an iterable of global batches (a list, a generator "
                                        "function's result, a tf.data.Dataset)") from None
        self._strategy, self._dataset, self._options = strategy, dataset, options

    def __iter__(self):
        devices = self._strategy._devices
        for batch in self._dataset:
            batch = jax.tree_util.tree_map(np.asarray, batch)
            pieces = split_batch(batch, len(devices))
            placed = [jax.tree_util.tree_map(lambda x, d=d: jax.device_put(x, d), p)
                      for p, d in zip(pieces, devices)]
            leaves = [jax.tree_util.tree_leaves(p) for p in placed]
            treedef = jax.tree_util.tree_structure(placed[0])
            yield self._strategy._finalize_outputs(
                jax.tree_util.tree_unflatten(treedef, [PerReplica(c) for c in zip(*leaves)]))
