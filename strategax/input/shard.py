"""`experimental_distribute_dataset` across the workers of a multi-worker job, as TensorFlow 2.21
shares it (its rebatch + auto-shard pipeline in tensorflow/python/distribute/input_lib.py;
recorded in tests/data/tf/multi_worker_input.json). W workers of R replicas each; replica
w*R + j is worker w's j-th. Each worker copies and places only its own replicas' rows.

- DATA (and AUTO: strategax's datasets read no files): every worker reads every global batch
  of b rows; the batch is split into N = W*R pieces of ceil(b/N) rows (the last fewer or none,
  the single-worker split) and worker w's j-th replica takes piece j*W + w (TensorFlow shards
  the stream of pieces by worker, so for R > 1 a worker's pieces interleave with the others').
- OFF: every worker reads every batch and the rows, as one stream, are cut into per-replica
  batches of TensorFlow's `batch_sizes_for_worker` sizes (B/N rounded up for the first B mod N
  replicas, down for the rest, rotated by w*R for worker w; B is the first batch's size);
  worker w's replicas take its pieces in turn. Every worker trains on the same data.
- FILE: shards the files a dataset reads; an iterable of batches has none, so it raises (as
  TensorFlow raises "Found an unshardable source dataset" for a dataset not read from files).
Every worker runs the same number of steps: a worker whose pieces run out gets empty batches
until the last worker's data ends (TensorFlow agrees on it with a collective; here every
worker knows every other's pieces, since they all read the same batches).
"""
from __future__ import annotations

import logging
from typing import Any, Iterator

import numpy as np

from ..errors import DistributionValueError
from .numpy_dataset import Dataset
from .options import AutoShardPolicy, parse_policy
from .place import place_local
from .split import batch_leaves, split_sizes

logger = logging.getLogger("strategax")
Step = tuple[list[list[np.ndarray]], list[int]]  # (per local replica: its leaves' rows, every replica's row count)


def dataset_policy(dataset: Any, options) -> AutoShardPolicy:
    """The policy in force: `InputOptions.auto_shard_policy` unless AUTO, else a tf.data.Dataset's
    (or an sx.data.Dataset's) own `options().experimental_distribute.auto_shard_policy`, else AUTO."""
    policy = options.auto_shard_policy
    own = isinstance(dataset, Dataset) or hasattr(dataset, "as_numpy_iterator")
    if policy is AutoShardPolicy.AUTO and own and hasattr(dataset, "options"):
        try:
            policy = parse_policy(dataset.options().experimental_distribute.auto_shard_policy)
        except AttributeError:
            pass
    return policy


def worker_policy(dataset: Any, options) -> AutoShardPolicy:
    """DATA or OFF for this dataset on a multi-worker job (FILE raises: there are no files)."""
    policy = dataset_policy(dataset, options)
    if policy is AutoShardPolicy.FILE:
        raise DistributionValueError(
            "auto_shard_policy FILE shards the files a dataset reads, but strategax reads this dataset as "
            "a sequence of batches: it has no files to shard (TensorFlow raises \"Found an unshardable "
            "source dataset\" for a dataset not read from files)",
            "use sx.AutoShardPolicy.DATA (each worker keeps its replicas' part of every batch) or OFF, or "
            "read each worker's own files in distribute_datasets_from_function")
    if policy is AutoShardPolicy.AUTO and hasattr(dataset, "as_numpy_iterator"):
        logger.warning("strategax shares this tf.data.Dataset between the workers by DATA: every worker "
                       "reads all of it (TensorFlow would shard a dataset read from files by file)")
    return AutoShardPolicy.OFF if policy is AutoShardPolicy.OFF else AutoShardPolicy.DATA


def data_ranges(b: int, workers: int, per_worker: int) -> list[tuple[int, int]]:
    """DATA: the row range of each replica's piece of a batch of `b` rows."""
    n = workers * per_worker
    offsets = np.cumsum([0, *split_sizes(b, n)])
    pieces = [(r % per_worker) * workers + r // per_worker for r in range(n)]
    return [(int(offsets[p]), int(offsets[p + 1])) for p in pieces]


def off_sizes(batch: int, workers: int, per_worker: int, worker: int) -> list[int]:
    """OFF: TensorFlow's `batch_sizes_for_worker(batch, workers, per_worker, worker)`."""
    n = workers * per_worker
    floor, ceil_count = divmod(batch, n)
    first = [floor + 1] * ceil_count + [floor] * (n - ceil_count)
    return first[worker * per_worker:] + first[:worker * per_worker]


def _take(leaves: list[np.ndarray], lo: int, hi: int) -> list[np.ndarray]:
    return [x[lo:hi] for x in leaves]


def data_steps(batches: Iterator[tuple[list[np.ndarray], int]], workers: int, per_worker: int,
               worker: int) -> Iterator[Step]:
    """DATA: one step per global batch."""
    mine = range(worker * per_worker, (worker + 1) * per_worker)
    for leaves, b in batches:
        ranges = data_ranges(b, workers, per_worker)
        yield [_take(leaves, *ranges[r]) for r in mine], [hi - lo for lo, hi in ranges]


class _Rows:
    """The batches' rows as one stream, read as far as asked and forgotten once used."""

    def __init__(self, batches: Iterator[tuple[list[np.ndarray], int]]):
        self._batches, self._held = batches, []  # (first row, leaves, rows)
        self.end, self.done, self.first = 0, False, None

    def fill(self, row: int) -> None:
        """Read batches until the stream reaches `row` (or ends)."""
        while self.end < row and not self.done:
            try:
                leaves, b = next(self._batches)
            except StopIteration:
                self.done = True
                return
            if self.first is None:
                self.first = b
            self._held.append((self.end, leaves, b))
            self.end += b

    def take(self, lo: int, hi: int) -> list[np.ndarray]:
        parts = [_take(leaves, max(lo - start, 0), min(hi - start, b))
                 for start, leaves, b in self._held if start < hi and start + b > lo]
        if len(parts) == 1:
            return parts[0]  # within one batch: views
        if not parts:  # an empty piece: zero rows of the first batch's leaves
            return _take(self._held[0][1], 0, 0)
        return [np.concatenate(cols) for cols in zip(*parts)]

    def forget(self, row: int) -> None:
        """Drop the batches that end before `row` (keep one, for the leaves of empty pieces)."""
        while len(self._held) > 1 and self._held[0][0] + self._held[0][2] <= row:
            self._held.pop(0)


def off_steps(batches: Iterator[tuple[list[np.ndarray], int]], workers: int, per_worker: int,
              worker: int) -> Iterator[Step]:
    """OFF: every worker cuts the whole stream of rows with its own sizes (see the module doc)."""
    rows = _Rows(batches)
    rows.fill(1)
    if rows.first is None:
        return
    n = workers * per_worker
    sizes = [off_sizes(max(rows.first, 1), workers, per_worker, w) for w in range(workers)]
    cursor, piece = [0] * workers, [0] * workers  # per worker: next row, next piece
    while True:
        rows.fill(min(cursor) + 1)
        if rows.done and min(cursor) >= rows.end:
            return
        plan = []  # (worker, start, size) for every replica, in replica order
        for w in range(workers):
            start = cursor[w]
            for j in range(per_worker):
                size = sizes[w][(piece[w] + j) % n]
                plan.append((w, start, size))
                start += size
        rows.fill(max(start + size for _, start, size in plan))
        counts = [max(0, min(size, rows.end - start)) for _, start, size in plan]
        local = [rows.take(start, start + count) for (w, start, _), count in zip(plan, counts) if w == worker]
        for w in range(workers):
            cursor[w] += sum(c for (v, _, _), c in zip(plan, counts) if v == w)
            piece[w] += per_worker
        rows.forget(min(cursor))
        yield local, counts


def worker_steps(batches: Iterator[tuple[list[np.ndarray], int]], policy: AutoShardPolicy, workers: int,
                 per_worker: int, worker: int) -> Iterator[Step]:
    """This worker's share of each step under `policy` (DATA or OFF)."""
    steps = off_steps if policy is AutoShardPolicy.OFF else data_steps
    return steps(batches, workers, per_worker, worker)


def worker_batches(strategy, source: Iterator, policy: AutoShardPolicy) -> Iterator:
    """The placed elements of this worker's replicas, one per step (see the module doc)."""
    workers, worker = strategy._input_pipeline()
    local = list(strategy._local_replica_ids)
    per_worker = len(local)
    mine = list(range(worker * per_worker, (worker + 1) * per_worker))
    if strategy.num_replicas_in_sync != workers * per_worker or local != mine:
        raise DistributionValueError(
            f"every worker must hold the same number of replicas: this one holds {per_worker} of "
            f"{strategy.num_replicas_in_sync} over {workers} workers (TensorFlow requires it too)",
            "give every worker process the same number of devices")
    treedef = None

    def batches():
        nonlocal treedef
        for batch in source:
            leaves, treedef, b = batch_leaves(batch, treedef)
            yield leaves, b

    rows = 0
    for pieces, counts in worker_steps(batches(), policy, workers, per_worker, worker):
        rows = max(rows, *counts, 1)  # the first (full) batch fixes the static row count
        yield place_local(strategy._mesh, [list(leaf) for leaf in zip(*pieces)], treedef, counts, rows)
