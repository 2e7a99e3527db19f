"""`distribute_datasets_from_function`: `dataset_fn(InputContext)` is called once per input
pipeline and yields per-replica batches; each step deals consecutive elements to consecutive
replicas, and replicas left without one when the data runs out get an empty (0-row) batch
(an unbatched dataset of scalars drops that last, incomplete step), as in TensorFlow."""
from __future__ import annotations

from typing import Any, Callable, Generator

import jax
import numpy as np

from .context import InputContext
from .dataset import _Dataset, check_iterable, host_iterator, is_one_shot
from .place import place_pieces
from .split import batch_leaves


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

    def _produce(self) -> Generator:
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
            out.append([np.asarray(x) for x in leaves])
            continue
        leaves, treedef, _ = batch_leaves(element, treedef)
        out.append(leaves)
    return out, treedef
