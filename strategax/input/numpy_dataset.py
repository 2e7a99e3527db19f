"""`experimental_make_numpy_dataset`: the rows of in-memory NumPy data, batched on the host."""
from __future__ import annotations

import math
from typing import Any, Iterator

import jax
import numpy as np

from .split import BatchError, batch_leaves


class NumpyDataset:
    """Iterates the rows of `data` (an array or pytree of arrays sharing a leading axis), or
    global batches of them after `.batch(n)`; iterable any number of times."""

    def __init__(self, data: Any, batch_size: int | None = None, drop_remainder: bool = False):
        try:
            self._leaves, self._treedef, self._size = batch_leaves(jax.tree_util.tree_map(np.asarray, data))
        except BatchError as e:
            raise e.user_error() from None
        self._data, self._batch_size, self._drop = data, batch_size, drop_remainder

    def batch(self, batch_size: int, drop_remainder: bool = False) -> "NumpyDataset":
        """Global batches of `batch_size` rows (the last one partial unless `drop_remainder`)."""
        return NumpyDataset(self._data, batch_size, drop_remainder)

    def __len__(self) -> int:
        if self._batch_size is None:
            return self._size
        f = math.floor if self._drop else math.ceil
        return f(self._size / self._batch_size)

    def __iter__(self) -> Iterator:
        step = self._batch_size or 1
        for i in range(len(self)):
            lo = i * step
            if self._batch_size is None:
                part = [x[lo] for x in self._leaves]
            else:
                part = [x[lo:lo + step] for x in self._leaves]
            yield jax.tree_util.tree_unflatten(self._treedef, part)
