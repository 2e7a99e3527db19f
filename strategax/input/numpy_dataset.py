"""In-memory input as `tf.data` spells it: `sx.data.Dataset.from_tensor_slices((x, y))
.shuffle(n).batch(b).repeat()` (also what `experimental_make_numpy_dataset` returns). A dataset
iterates any number of times; `shuffle` draws a new order each time (TensorFlow's buffered
shuffle, with NumPy's generator: the same seed gives the same order here, not TensorFlow's);
`shard` keeps TensorFlow's element order."""
from __future__ import annotations

import itertools
import math
from typing import Any, Callable, Iterator, cast

import jax
import numpy as np

from ..errors import DistributionValueError
from .split import BatchError, batch_leaves


class Dataset:
    """A host-side dataset of elements (pytrees of NumPy arrays); iterate it for its elements."""

    def __init__(self, make: Callable[[tuple], Iterator], length: int | None):
        self._make = make  # make(epoch) -> an iterator of the elements; epoch: a tuple of ints
        self._length = length  # None: infinite
        self._epochs = itertools.count()

    @staticmethod
    def from_tensor_slices(tensors: Any) -> "Dataset":
        """The rows of `tensors` (an array or a pytree of arrays sharing a leading axis) as elements."""
        try:
            leaves, treedef, size = batch_leaves(jax.tree_util.tree_map(np.asarray, tensors))
        except BatchError as e:
            raise e.user_error() from None

        def rows(epoch: tuple) -> Iterator:
            for i in range(size):
                yield jax.tree_util.tree_unflatten(treedef, [x[i] for x in leaves])
        return Dataset(rows, size)

    def __iter__(self) -> Iterator:
        def run():
            yield from self._make((next(self._epochs),))
        return run()

    def __len__(self) -> int:
        if self._length is None:
            raise TypeError("the dataset repeats forever, so it has no length")
        return self._length

    def cardinality(self) -> int:
        """The number of elements (-1 when infinite), as `tf.data.Dataset.cardinality`."""
        return -1 if self._length is None else self._length

    def batch(self, batch_size: int, drop_remainder: bool = False) -> "Dataset":
        """Global batches of `batch_size` consecutive elements (the last one partial unless
        `drop_remainder`); each leaf gains a leading batch axis."""
        if int(batch_size) < 1:
            raise DistributionValueError(f"batch size {batch_size}", "give a batch size of at least 1")
        n = int(batch_size)

        def batches(epoch: tuple) -> Iterator:
            it = self._make(epoch)
            while True:
                group = list(itertools.islice(it, n))
                if not group or (drop_remainder and len(group) < n):
                    return
                yield jax.tree_util.tree_map(lambda *xs: np.stack(xs), *group)
        length = None if self._length is None else (math.floor if drop_remainder else math.ceil)(self._length / n)
        return Dataset(batches, length)

    def shuffle(self, buffer_size: int, seed: int | None = None,
                reshuffle_each_iteration: bool = True) -> "Dataset":
        """Elements in a random order drawn from a buffer of `buffer_size` (the whole dataset
        when it is at least its length); a new order on each iteration unless told otherwise."""
        if int(buffer_size) < 1:
            raise DistributionValueError(f"shuffle buffer size {buffer_size}", "give a buffer size of at least 1")
        size = int(buffer_size)
        entropy = cast(int, np.random.SeedSequence(seed).entropy)  # an int: `seed` is one or None

        def shuffled(epoch: tuple) -> Iterator:
            rng = np.random.default_rng([entropy, *(epoch if reshuffle_each_iteration else ())])
            it = self._make(epoch)
            buffer = list(itertools.islice(it, size))
            for element in it:
                k = int(rng.integers(len(buffer)))
                yield buffer[k]
                buffer[k] = element
            for k in rng.permutation(len(buffer)):
                yield buffer[k]
        return Dataset(shuffled, self._length)

    def repeat(self, count: int | None = None) -> "Dataset":
        """The elements `count` times over (forever when None or -1)."""
        times = None if count is None or count == -1 else int(count)  # None: forever

        def repeated(epoch: tuple) -> Iterator:
            if self._length == 0:
                return
            for k in itertools.count() if times is None else range(times):
                yield from self._make((*epoch, k))  # each repetition its own (shuffled) order
        if times is None:
            length = None if self._length != 0 else 0
        else:
            length = 0 if times == 0 else None if self._length is None else self._length * times
        return Dataset(repeated, length)

    def take(self, count: int) -> "Dataset":
        """The first `count` elements."""
        n = int(count)
        return Dataset(lambda epoch: itertools.islice(self._make(epoch), n),
                       n if self._length is None else min(n, self._length))

    def shard(self, num_shards: int, index: int) -> "Dataset":
        """Every `num_shards`-th element from the `index`-th on (tf.data's `shard`: element i is
        kept when i % num_shards == index), e.g. one worker's part in a `dataset_fn`."""
        for value, what in ((num_shards, "num_shards"), (index, "index")):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise DistributionValueError(f"Dataset.shard's {what} is {value!r}, not an integer",
                                             "pass input_context.num_input_pipelines, input_context.input_pipeline_id")
        shards, mine = int(num_shards), int(index)
        if shards < 1:
            raise DistributionValueError(f"Dataset.shard's num_shards is {shards}; it must be at least 1",
                                         "pass the number of shards, e.g. input_context.num_input_pipelines")
        if not 0 <= mine < shards:
            raise DistributionValueError(f"Dataset.shard's index is {mine}, out of range for {shards} shards "
                                         f"(0 to {shards - 1})", "pass input_context.input_pipeline_id")
        length = None if self._length is None else max(0, -(-(self._length - mine) // shards))
        return Dataset(lambda epoch: itertools.islice(self._make(epoch), mine, None, shards), length)

    def map(self, fn: Callable) -> "Dataset":
        """`fn(element)` for each element (on the host, with NumPy values)."""
        def mapped(epoch: tuple) -> Iterator:
            for element in self._make(epoch):
                yield fn(*element) if isinstance(element, tuple) else fn(element)
        return Dataset(mapped, self._length)


NumpyDataset = Dataset  # the name experimental_make_numpy_dataset's result had before
