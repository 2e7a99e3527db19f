"""Per-replica values whose components differ in shape ("ragged"), as TensorFlow allows them:
a `PerReplica` built from arrays of different lengths (or a dataset whose replicas get 2 and
3 rows). Outside a compiled function `gather` concatenates them and `reduce(op, v, axis=k)`
combines them on the host; `run` takes one that differs only along the batch axis as a padded
batch (the compiler masks its padded rows, see `input.padding`). Where the result has no
meaning (a reduction without axis, pieces that do not line up) it raises, as TensorFlow does.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import DistributionValueError
from ..dialects.collectives import check_axis
from ..input.place import place_pieces
from ..trace.distributed_values import PerReplica, is_distributed


def _components(x) -> list[np.ndarray] | None:
    comps = x._values
    if comps is None or not all(hasattr(c, "shape") and hasattr(c, "dtype") for c in comps):
        return None
    return comps


def is_ragged(x: Any) -> bool:
    """A PerReplica built from array components of one rank and dtype but different shapes."""
    if not is_distributed(x) or not isinstance(x, PerReplica) or x._local is not None:
        return False
    comps = _components(x)
    if comps is None or len({tuple(c.shape) for c in comps}) <= 1:
        return False
    if len({c.ndim for c in comps}) > 1 or len({np.dtype(c.dtype) for c in comps}) > 1:
        raise DistributionValueError(
            f"the components of this PerReplica differ in rank or dtype: "
            f"{[(tuple(c.shape), np.dtype(c.dtype).name) for c in comps]}",
            "give every replica an array of the same rank and dtype (lengths may differ)")
    return True


def _host(x) -> list[np.ndarray]:
    return [np.asarray(jax.device_get(c)) for c in x.values]


def _check_other_dims(comps: list[np.ndarray], axis: int, api: str) -> None:
    rest = {c.shape[:axis] + c.shape[axis + 1:] for c in comps}
    if len(rest) > 1:
        raise DistributionValueError(
            f"{api}(axis={axis}) of a PerReplica whose components differ in shape off that axis "
            f"({[c.shape for c in comps]}): the pieces do not line up (TensorFlow raises too)",
            "give the components the same shape except along the axis you gather or reduce over")


def gather(x, axis: int):
    """Every replica's component concatenated along `axis`."""
    comps = _host(x)
    axis = check_axis(axis, comps[0].ndim, "strategy.gather")
    _check_other_dims(comps, axis, "strategy.gather")
    return jnp.asarray(np.concatenate(comps, axis=axis))


def reduce(op: str, x, axis: int | None):
    """SUM (or MEAN: the sum divided by the total length) of every component over `axis`."""
    comps = _host(x)
    if axis is None:
        raise DistributionValueError(
            f"strategy.reduce without axis of a PerReplica whose components differ in shape "
            f"({[c.shape for c in comps]}): there is no element-wise combination (TensorFlow raises too)",
            "reduce over an axis along which the components differ (e.g. axis=0)")
    axis = check_axis(axis, comps[0].ndim, "strategy.reduce")
    _check_other_dims(comps, axis, "strategy.reduce")
    total = sum(np.sum(c, axis=axis) for c in comps)
    if op == "mean":
        total = total / sum(c.shape[axis] for c in comps)
    return jnp.asarray(np.asarray(total, comps[0].dtype))


def as_padded_batch(strategy, x):
    """`x` (differing only along axis 0) as a padded per-replica batch for `run`."""
    comps = _host(x)
    if comps[0].ndim == 0 or len({c.shape[1:] for c in comps}) > 1:
        axes = [k for k in range(1, comps[0].ndim) if len({c.shape[k] for c in comps}) > 1]
        raise DistributionValueError(
            f"strategy.run of a PerReplica whose components differ in shape along axis "
            f"{', '.join(map(str, axes)) or 0} ({[c.shape for c in comps]}): one compiled program runs every "
            "replica, and strategax pads only axis 0 (the rows) of per-replica values (TensorFlow runs "
            "each replica on its own shape)",
            "give the components the same shape except along axis 0; strategy.gather(v, axis=k), "
            "strategy.reduce(op, v, axis=k) and experimental_local_results take them as they are (outside "
            "compiled functions), or pad them to one shape (jnp.pad) and pass the real extents as another "
            "per-replica argument")
    if strategy._num_local_replicas != strategy.num_replicas_in_sync:
        raise DistributionValueError(
            "strategy.run of a PerReplica built by hand whose components differ in length, in a "
            "multi-worker job", "distribute the data with distribute_datasets_from_function")
    counts = [c.shape[0] for c in comps]
    return place_pieces(strategy._mesh, [comps], jax.tree_util.tree_structure(0), counts, max(counts))
