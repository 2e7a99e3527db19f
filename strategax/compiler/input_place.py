"""Placing input on the replicas: per-replica pieces padded to one row count become one global
array over the replica mesh (one transfer per leaf; a full, evenly split batch is used as is,
without a host copy)."""
from __future__ import annotations

from typing import Any, Sequence

import jax
import numpy as np

from ..backends.layout import ReplicaLayout
from ..ir import Locality, TensorType
from .distributed_values import PerReplica
from .input_mask import PerReplicaBatch


def _canonical(x: np.ndarray) -> np.ndarray:
    """`x` in the dtype JAX would give it (float64 becomes float32 unless x64 is enabled)."""
    dtype = np.dtype(jax.dtypes.canonicalize_dtype(x.dtype))
    return x if x.dtype == dtype else x.astype(dtype)


def _layout(mesh, shape: tuple, dtype) -> ReplicaLayout:
    return ReplicaLayout(mesh, TensorType(tuple(shape), np.dtype(dtype), Locality.PER_REPLICA))


def padded_host(pieces: Sequence[np.ndarray], rows: int) -> np.ndarray:
    """The replicas' pieces, each padded with zero rows to `rows`, concatenated along axis 0."""
    first = pieces[0]
    out = np.zeros((rows * len(pieces), *first.shape[1:]), first.dtype)
    for i, p in enumerate(pieces):
        out[i * rows:i * rows + p.shape[0]] = p
    return out


def place_split(mesh, leaves: list[np.ndarray], treedef, counts: Sequence[int], rows: int) -> Any:
    """A global batch split as `counts` (TensorFlow's split) into a pytree of PerReplicaBatch."""
    n = len(counts)
    count_value = place_counts(mesh, counts)
    out = []
    for x in leaves:
        x = _canonical(x)
        if x.shape[0] == rows * n:
            host = x  # evenly split and full: the batch is the global array already
        else:
            offsets = np.cumsum([0, *counts])
            host = padded_host([x[offsets[i]:offsets[i + 1]] for i in range(n)], rows)
        out.append(_place(mesh, host, rows, counts, count_value))
    return jax.tree_util.tree_unflatten(treedef, out)


def place_pieces(mesh, pieces: list[list[np.ndarray]], treedef, counts: Sequence[int] | None,
                 rows: int | None) -> Any:
    """Per-replica pieces (`pieces[leaf][replica]`) into a pytree of PerReplica values: padded
    PerReplicaBatch values when `counts` is given, stacked per-replica scalars otherwise."""
    count_value = place_counts(mesh, counts) if counts is not None else None
    out = []
    for leaf in pieces:
        leaf = [_canonical(np.asarray(p)) for p in leaf]
        if counts is None:
            lay = _layout(mesh, (), leaf[0].dtype)
            out.append(PerReplica._from_global(jax.device_put(np.stack(leaf), lay.sharding), lay))
        else:
            out.append(_place(mesh, padded_host(leaf, rows), rows, counts, count_value))
    return jax.tree_util.tree_unflatten(treedef, out)


def place_counts(mesh, counts: Sequence[int]) -> PerReplica:
    """The per-replica real row counts as a per-replica int32 scalar (the hidden input)."""
    lay = _layout(mesh, (), np.int32)
    return PerReplica._from_global(jax.device_put(np.asarray(counts, np.int32), lay.sharding), lay)


def _place(mesh, host: np.ndarray, rows: int, counts, count_value) -> PerReplicaBatch:
    lay = _layout(mesh, (rows, *host.shape[1:]), host.dtype)
    return PerReplicaBatch._from_global_batch(jax.device_put(host, lay.sharding), lay,
                                              tuple(int(c) for c in counts), count_value)
