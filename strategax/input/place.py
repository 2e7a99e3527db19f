"""Placing input on the replicas: per-replica pieces padded to one row count become one global
array over the replica mesh (one transfer per leaf). What is transferred is always the
pipeline's own host copy, never the user's array: on the CPU, JAX's transfer may alias an
aligned host buffer instead of copying it (`may_alias=False` does not change that for NumPy
arrays), so a generator refilling the array it yielded would change batches already placed."""
from __future__ import annotations

import functools
import logging
from typing import Any, Sequence

import jax
import numpy as np

from ..backends import transfer
from ..backends.layout import ReplicaLayout
from ..errors import DistributionValueError
from ..ir import Locality, TensorType
from ..trace.batches.host_element import HostElement
from ..trace.distributed_values import PerReplica, PerReplicaBatch
from .split import BatchError

logger = logging.getLogger("strategax")


def put(hosts: list[np.ndarray], shardings: list) -> list[jax.Array]:
    """Global host arrays onto their shardings. Over several processes (a multi-worker job,
    every worker holding the same global batch) each process fills only its own shards:
    `jax.device_put` would check equality with a cross-process collective, which can
    deadlock against a step running at the same time on another thread."""
    if all(s.is_fully_addressable for s in shardings):
        return transfer.device_put(hosts, shardings)
    return [jax.make_array_from_callback(h.shape, s, lambda index, h=h: h[index])
            for h, s in zip(hosts, shardings)]


def _canonical(x: np.ndarray) -> np.ndarray:
    """`x` in the dtype JAX would give it (float64 becomes float32 unless x64 is enabled). 64-bit
    integers are narrowed only when every value fits (else it raises: a wrapped label or index
    would be a silent wrong value), with a note the first time."""
    dtype = np.dtype(jax.dtypes.canonicalize_dtype(x.dtype))
    if x.dtype == dtype:
        return x
    if x.dtype.kind in "iu" and x.size:
        info = np.iinfo(dtype)
        low, high = x.min(), x.max()
        if low < info.min or high > info.max:
            raise BatchError(DistributionValueError,
                f"an {x.dtype.name} input holds {low if low < info.min else high}, which {dtype.name} (JAX's "
                f"integer type unless jax_enable_x64 is set) cannot hold",
                "enable 64-bit values (jax.config.update('jax_enable_x64', True) at the start of the "
                "program) or bring the values into range")
        _note_narrowed(x.dtype, dtype)
    return x.astype(dtype)


@functools.cache
def _note_narrowed(source: np.dtype, target: np.dtype) -> None:
    logger.warning("strategax: %s input is narrowed to %s, JAX's default integer type (TensorFlow keeps %s); "
                   "every value fits. Set jax_enable_x64 to keep %s.", source.name, target.name, source.name,
                   source.name)


@functools.lru_cache(maxsize=256)
def _cached_layout(mesh, shape: tuple, dtype: np.dtype) -> ReplicaLayout:
    return ReplicaLayout(mesh, TensorType(shape, dtype, Locality.PER_REPLICA))


def _layout(mesh, shape: tuple, dtype) -> ReplicaLayout:
    """The per-replica layout of a [rows, ...] piece (one per shape: its sharding is reused)."""
    return _cached_layout(mesh, tuple(shape), np.dtype(dtype))


def padded_host(pieces: Sequence[np.ndarray], rows: int, pool: transfer.HostPool | None = None) -> np.ndarray:
    """The replicas' pieces, each padded with zero rows to `rows`, concatenated along axis 0
    (in a buffer of `pool` when given)."""
    first = pieces[0]
    make = transfer.host_array if pool is None else pool.array
    out = make((rows * len(pieces), *first.shape[1:]), first.dtype)
    for i, p in enumerate(pieces):
        out[i * rows:i * rows + p.shape[0]] = p
    return out


def owned(x: np.ndarray) -> np.ndarray:
    """`x` in JAX's dtype, as an array of the pipeline's own (a copy unless converting made one)."""
    canonical = _canonical(x)
    return transfer.host_array(canonical.shape, canonical.dtype, canonical) if canonical is x else canonical


def split_hosts(leaves: list[np.ndarray], counts: Sequence[int], rows: int,
                pool: transfer.HostPool | None = None) -> list[np.ndarray]:
    """Each leaf of a global batch split as `counts` (TensorFlow's split), every replica's piece
    padded to `rows` rows: the host copy of its global array (the pipeline's own, see above; in
    a buffer of `pool`, the dataset's, when given)."""
    n = len(counts)
    make = transfer.host_array if pool is None else pool.array
    hosts = []
    for x in leaves:
        canonical = _canonical(x)
        if canonical.shape[0] == rows * n:  # evenly split and full: one (aligned) copy of the batch
            hosts.append(make(canonical.shape, canonical.dtype, canonical))
        else:
            offsets = np.cumsum([0, *counts])
            hosts.append(padded_host([canonical[offsets[i]:offsets[i + 1]] for i in range(n)], rows, pool))
    return hosts


def place_split(mesh, leaves: list[np.ndarray], treedef, counts: Sequence[int], rows: int,
                pool: transfer.HostPool | None = None) -> Any:
    """A global batch split as `counts` (TensorFlow's split) into a pytree of PerReplicaBatch."""
    hosts = split_hosts(leaves, counts, rows, pool)
    return jax.tree_util.tree_unflatten(treedef, _place_all(mesh, hosts, rows, counts, place_counts(mesh, counts)))


def host_split(mesh, leaves: list[np.ndarray], treedef, counts: Sequence[int], rows: int,
               pool: transfer.HostPool | None = None) -> HostElement:
    """A global batch split and padded on the host (its own copy), placed when first used as a
    value: a compiled loop that takes several stacks them and places them together."""
    counts = tuple(int(c) for c in counts)
    return HostElement(split_hosts(leaves, counts, rows, pool), treedef, counts, rows,
                       functools.partial(_place_host, mesh))


def _place_host(mesh, element: HostElement) -> Any:
    count_value = place_counts(mesh, element.counts)
    return jax.tree_util.tree_unflatten(
        element.treedef, _place_all(mesh, element.hosts, element.rows, element.counts, count_value))


def place_pieces(mesh, pieces: list[list[np.ndarray]], treedef, counts: Sequence[int] | None,
                 rows: int | None) -> Any:
    """Per-replica pieces (`pieces[leaf][replica]`) into a pytree of PerReplica values: padded
    PerReplicaBatch values when `counts` is given, stacked per-replica scalars otherwise."""
    count_value = place_counts(mesh, counts) if counts is not None else None
    hosts = [[_canonical(np.asarray(p)) for p in leaf] for leaf in pieces]
    if counts is None:
        lays = [_layout(mesh, (), leaf[0].dtype) for leaf in hosts]
        arrays = put([np.stack(leaf) for leaf in hosts], [lay.sharding for lay in lays])
        out = [PerReplica.from_global(a, lay) for a, lay in zip(arrays, lays)]
    else:
        assert rows is not None, "counts come with rows"
        out = _place_all(mesh, [padded_host(leaf, rows) for leaf in hosts], rows, counts, count_value)
    return jax.tree_util.tree_unflatten(treedef, out)


def place_local(mesh, pieces: list[list[np.ndarray]], treedef, counts: Sequence[int] | None,
                rows: int | None) -> Any:
    """This process's replicas' pieces (`pieces[leaf][local replica]`) into a pytree of
    PerReplicaBatch over every process's replicas: in a multi-worker job each worker holds,
    pads and transfers only its own; `counts` are every replica's real row counts (None:
    per-replica scalars, no batch axis)."""
    if counts is None:
        hosts = [[owned(np.asarray(p)) for p in leaf] for leaf in pieces]
        lays = [_layout(mesh, (), leaf[0].dtype) for leaf in hosts]
        return jax.tree_util.tree_unflatten(treedef, [PerReplica.from_global(lay.assemble(leaf, owned=True), lay)
                                                      for leaf, lay in zip(hosts, lays)])
    assert rows is not None, "counts come with rows"
    count_value = place_counts(mesh, counts)
    out = []
    for leaf in pieces:
        padded = [owned(p) if p.shape[0] == rows else padded_host([_canonical(p)], rows) for p in map(np.asarray, leaf)]
        lay = _layout(mesh, (rows, *padded[0].shape[1:]), padded[0].dtype)
        out.append(PerReplicaBatch.from_global_batch(lay.assemble(padded, owned=True), lay,
                                                      tuple(int(c) for c in counts), count_value))
    return jax.tree_util.tree_unflatten(treedef, out)


def place_ragged(devices, pieces: list[list[np.ndarray]], treedef) -> Any:
    """Per-replica pieces (`pieces[leaf][replica]`) whose shapes differ beyond the row axis, as
    plain PerReplica values of one component per device (no padded batch: `gather` and
    `reduce(axis=...)` combine them outside compiled functions, as `experimental_distribute_values_from_function`'s)."""
    out = [PerReplica([jax.device_put(owned(np.asarray(p)), d) for p, d in zip(leaf, devices)])
           for leaf in pieces]
    return jax.tree_util.tree_unflatten(treedef, out)


_COUNTS: dict = {}  # (mesh, counts) -> placed counts: full batches reuse one (immutable) array


def place_counts(mesh, counts: Sequence[int]) -> PerReplica:
    """The per-replica real row counts as a per-replica int32 scalar (the hidden input)."""
    key = (id(mesh), tuple(int(c) for c in counts))
    hit = _COUNTS.get(key)
    if hit is not None and hit[0] is mesh:
        return hit[1]
    lay = _layout(mesh, (), np.int32)
    value = PerReplica.from_global(put([np.asarray(counts, np.int32)], [lay.sharding])[0], lay)
    if len(_COUNTS) > 256:
        _COUNTS.clear()
    _COUNTS[key] = (mesh, value)
    return value


def _place_all(mesh, hosts: list[np.ndarray], rows: int, counts, count_value) -> list[PerReplicaBatch]:
    """One batched transfer of every leaf's padded global host array."""
    lays = [_layout(mesh, (rows, *h.shape[1:]), h.dtype) for h in hosts]
    arrays = put(hosts, [lay.sharding for lay in lays])
    counts = tuple(int(c) for c in counts)
    return [PerReplicaBatch.from_global_batch(a, lay, counts, count_value) for a, lay in zip(arrays, lays)]
