"""`distribute_datasets_from_function`: `dataset_fn(InputContext)` is called once per input
pipeline and yields per-replica batches; each step deals consecutive elements to consecutive
replicas, and replicas left without one when the data runs out get an empty (0-row) batch
(an unbatched dataset of scalars drops that last, incomplete step), as in TensorFlow. In a
multi-worker job each worker runs its own pipeline for its own replicas (`across_workers`)."""
from __future__ import annotations

import itertools
import json
from typing import Any, Callable, Iterator

import jax
import numpy as np

from ..errors import DistributionValueError
from .context import InputContext
from .dataset import _Dataset, check_iterable, host_iterator, is_one_shot
from .place import place_local, place_pieces, place_ragged
from .split import BatchError, batch_leaves, check_dtypes


class DatasetsFromFunction(_Dataset):
    """The distributed dataset of `strategy.distribute_datasets_from_function(dataset_fn)`."""

    def __init__(self, strategy, dataset_fn: Callable, options=None):
        super().__init__(strategy, options)
        n = strategy.num_replicas_in_sync
        # One pipeline per process; a multi-worker strategy says which it is (hook, default (1, 0)).
        pipelines, pipeline_id = getattr(strategy, "_input_pipeline", lambda: (1, 0))()
        self._contexts = [InputContext(num_input_pipelines=pipelines, input_pipeline_id=pipeline_id,
                                       num_replicas_in_sync=n)]
        self._datasets = [dataset_fn(ctx) for ctx in self._contexts]
        for d in self._datasets:
            check_iterable(d, "result of dataset_fn")

    def _one_shot(self) -> bool:
        return is_one_shot(self._datasets[0])

    def _produce(self) -> Iterator:
        exchange = getattr(self._strategy, "_input_exchange", lambda: None)()  # a multi-worker strategy's
        if exchange is not None:
            return across_workers(self._strategy, host_iterator(self._datasets[0]), exchange)
        return self._in_one_process()

    def _in_one_process(self) -> Iterator:
        mesh, n = self._strategy._mesh, self._strategy.num_replicas_in_sync
        it = host_iterator(self._datasets[0])
        treedef, rows = None, 0
        while True:
            step = []
            for _ in range(n):
                try:
                    element = next(it)
                except StopIteration:
                    break
                step.append(element)
            if not step:
                return
            leaves, treedef = _element_leaves(step, treedef)
            scalars = leaves[0][0].ndim == 0
            if scalars:
                if len(step) < n:
                    return  # no empty scalar to give the remaining replicas: TF drops the step
                yield place_pieces(mesh, [list(p) for p in zip(*leaves)], treedef, None, None)
                continue
            counts = [len(ls[0]) for ls in leaves] + [0] * (n - len(step))
            rows = max(rows, *counts, 1)
            pieces = []
            for j in range(len(leaves[0])):
                real = [ls[j] for ls in leaves]
                empty = np.zeros((0, *real[0].shape[1:]), real[0].dtype)
                pieces.append(real + [empty] * (n - len(step)))
            if _differ_beyond_rows(leaves):  # TensorFlow's replicas may get batches of other widths
                yield place_ragged(self._strategy._devices, pieces, treedef)
            else:
                yield place_pieces(mesh, pieces, treedef, counts, rows)
            if len(step) < n:
                return


def _element_leaves(step: list, treedef) -> tuple[list[list[np.ndarray]], Any]:
    """Per element, its host leaves (checked like a global batch); the common structure."""
    out = []
    for element in step:
        leaves, tree = jax.tree_util.tree_flatten(element)
        if leaves and all(np.ndim(x) == 0 for x in leaves):
            if treedef is not None and tree != treedef:
                batch_leaves(element, treedef)  # raises the structure error
            treedef = tree
            leaves = [np.asarray(x) for x in leaves]
            check_dtypes(element, leaves)
            out.append(leaves)
            continue
        leaves, treedef, _ = batch_leaves(element, treedef)
        out.append(leaves)
    return out, treedef


def across_workers(strategy, it: Iterator, exchange: Callable[[str], list[str]]) -> Iterator:
    """This worker's pipeline dealt to its own replicas, step by step in agreement with the other
    workers (`exchange` gives every worker's line for the step): every replica's row count, one
    static row count, one element structure; a worker whose data has ended gives its replicas
    empty batches until every worker's has (TensorFlow agrees on it with a collective)."""
    k, n = strategy._num_local_replicas, strategy.num_replicas_in_sync
    treedef, rows, template, ended = None, 0, None, False
    while True:
        step = [] if ended else list(itertools.islice(it, k))
        ended = ended or len(step) < k
        mine: dict = {"counts": [], "leaves": None}
        if step:
            leaves, treedef = _element_leaves(step, treedef)
            if _differ_beyond_rows(leaves):
                raise BatchError(
                    DistributionValueError, "this worker's dataset_fn elements differ in shape beyond the batch "
                    f"axis ({[[x.shape for x in ls] for ls in leaves]}) in a multi-worker job",
                    "give every element of a multi-worker dataset_fn one shape beyond the batch axis (pad "
                    "them to one width), or run it in one process")
            template = [np.zeros((0, *x.shape[1:]), x.dtype) if x.ndim else x for x in leaves[0]]
            scalars = leaves[0][0].ndim == 0
            mine = {"counts": [None if scalars else len(ls[0]) for ls in leaves],
                    "leaves": [[str(x.dtype), list(x.shape[1 - scalars:])] for x in leaves[0]]}
        every = [json.loads(line) for line in exchange(json.dumps(mine))]
        if k * len(every) != n:
            raise BatchError(  # named at the user's loop line, in the consumer's thread
                DistributionValueError, f"every worker must hold the same number of replicas: this one holds "
                f"{k} of {n} over {len(every)} workers (TensorFlow requires it too)",
                "give every worker process the same number of devices")
        if not any(w["counts"] for w in every):
            return
        _check_alike(every)
        if any(None in w["counts"] for w in every):  # unbatched scalars
            if any(len(w["counts"]) < k for w in every):
                return  # no empty scalar to give the remaining replicas: TF drops the step
            yield place_local(strategy._mesh, [list(p) for p in zip(*leaves)], treedef, None, None)
            continue
        if template is None:
            raise BatchError(
                DistributionValueError, "this worker's dataset_fn gave no element, but the other workers' did: "
                "it has nothing to make its replicas' empty batches of",
                "give every worker's dataset at least one element")
        counts = [c for w in every for c in w["counts"] + [0] * (k - len(w["counts"]))]
        rows = max(rows, *counts, 1)
        local = [list(ls) for ls in zip(*leaves)] if step else [[] for _ in template]
        pieces = [real + [empty] * (k - len(real)) for real, empty in zip(local, template)]
        yield place_local(strategy._mesh, pieces, treedef, counts, rows)


def _differ_beyond_rows(leaves: list[list[np.ndarray]]) -> bool:
    """Whether the step's elements (`leaves[element][leaf]`) differ in shape beyond axis 0."""
    return any(len({x.shape[1:] for x in same}) > 1 for same in zip(*leaves))


def _check_alike(every: list[dict]) -> None:
    """One element structure on every worker (else their programs would differ)."""
    seen = {json.dumps(w["leaves"]) for w in every if w["leaves"] is not None}
    if len(seen) > 1:
        raise BatchError(
            DistributionValueError, "the workers' dataset_fn elements differ in dtype or shape beyond the batch "
            f"axis: {sorted(seen)}", "make every worker's dataset_fn give elements of one structure, dtype and shape")
