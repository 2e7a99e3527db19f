"""In-memory input as `tf.data` spells it: `sx.data.Dataset.from_tensor_slices((x, y))
.map(f).cache().shuffle(n).batch(b).prefetch(sx.data.AUTOTUNE)` (also what
`experimental_make_numpy_dataset` returns). A dataset iterates any number of times; `shuffle`
draws a new order each time (TensorFlow's buffered shuffle, with NumPy's generator: the same seed
gives the same order here, not TensorFlow's); `shard` keeps TensorFlow's element order;
`cardinality()` is TensorFlow's, unknown (-2) included (recorded in tests/data/tf/dataset_ops.json)."""
from __future__ import annotations

import itertools
import math
from typing import Any, Callable, Iterator, cast

import jax
import numpy as np

from ..errors import DistributionTypeError, DistributionValueError
from .dataset_cache import CacheStore
from .dataset_options import AUTOTUNE, INFINITE_CARDINALITY as INFINITE, UNKNOWN_CARDINALITY as UNKNOWN, Options
from .split import BatchError, batch_leaves


def _count(value: Any, what: str) -> int:
    """An int argument (`batch_size`, `count`...), or the error naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise DistributionTypeError(f"{what} is {value!r:.40}, not an integer", f"pass an integer {what}")
    return int(value)


def _unbatched(element: Any) -> Iterator:
    """The rows of one element (every leaf split along its leading axis)."""
    leaves, treedef = jax.tree_util.tree_flatten(element)
    leaves = [np.asarray(x) for x in leaves]
    if any(x.ndim == 0 for x in leaves):
        raise DistributionValueError("Dataset.unbatch(): an element has a scalar component, which has "
                                     "no batch axis to split (TensorFlow: \"Cannot unbatch an input with "
                                     "scalar components\")", "unbatch a dataset of batches (after `.batch(n)`)")
    sizes = sorted({len(x) for x in leaves})
    if len(sizes) > 1:
        raise DistributionValueError(
            f"Dataset.unbatch(): an element's components have leading axes of {sizes[0]} and {sizes[1]} "
            "rows; every component must have the same number of rows", "give every component one batch size")
    for i in range(sizes[0] if sizes else 0):
        yield jax.tree_util.tree_unflatten(treedef, [x[i] for x in leaves])


class Dataset:
    """A host-side dataset of elements (pytrees of NumPy arrays); iterate it for its elements."""

    def __init__(self, make: Callable[[tuple], Iterator], length: int, options: Options | None = None):
        self._make = make  # make(epoch) -> an iterator of the elements; epoch: a tuple of ints
        self._length = length  # tf.data's cardinality: a count, INFINITE (-1) or UNKNOWN (-2)
        self._options = options or Options()
        self._epochs = itertools.count()

    def _derive(self, make: Callable[[tuple], Iterator], length: int) -> "Dataset":
        """A dataset made from this one (keeping its options)."""
        return Dataset(make, length, self._options)

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
        if self._length == INFINITE:
            raise TypeError("The dataset is infinite.")
        if self._length == UNKNOWN:
            raise TypeError("The dataset length is unknown.")
        return self._length

    def cardinality(self) -> int:
        """The number of elements, -1 when infinite, -2 when unknown (after `filter` or `unbatch`),
        as `tf.data.Dataset.cardinality`."""
        return self._length

    def batch(self, batch_size: int, drop_remainder: bool = False) -> "Dataset":
        """Global batches of `batch_size` consecutive elements (the last one partial unless
        `drop_remainder`); each leaf gains a leading batch axis."""
        n = _count(batch_size, "batch_size")
        if n < 1:
            raise DistributionValueError(f"batch size {batch_size}", "give a batch size of at least 1")

        def batches(epoch: tuple) -> Iterator:
            it = self._make(epoch)
            while True:
                group = list(itertools.islice(it, n))
                if not group or (drop_remainder and len(group) < n):
                    return
                yield jax.tree_util.tree_map(lambda *xs: np.stack(xs), *group)
        length = self._length if self._length < 0 else (
            (math.floor if drop_remainder else math.ceil)(self._length / n))
        return self._derive(batches, length)

    def unbatch(self) -> "Dataset":
        """Each element's rows as elements (every component split along its leading axis, which
        they must share): the inverse of `batch`. Its length is unknown, as in TensorFlow."""
        def rows(epoch: tuple) -> Iterator:
            for element in self._make(epoch):
                yield from _unbatched(element)
        return self._derive(rows, INFINITE if self._length == INFINITE else UNKNOWN)

    def shuffle(self, buffer_size: int, seed: int | None = None,
                reshuffle_each_iteration: bool = True) -> "Dataset":
        """Elements in a random order drawn from a buffer of `buffer_size` (the whole dataset
        when it is at least its length); a new order on each iteration unless told otherwise."""
        size = _count(buffer_size, "buffer_size")
        if size < 1:
            raise DistributionValueError(f"shuffle buffer size {buffer_size}", "give a buffer size of at least 1")
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
        return self._derive(shuffled, self._length)

    def repeat(self, count: int | None = None) -> "Dataset":
        """The elements `count` times over (forever when None or negative; a repetition that yields
        nothing ends it, as in TensorFlow)."""
        times = None if count is None else _count(count, "count")
        times = None if times is not None and times < 0 else times  # None: forever (TensorFlow: any count < 0)

        def repeated(epoch: tuple) -> Iterator:
            if self._length == 0:
                return
            for k in itertools.count() if times is None else range(times):
                empty = True
                for element in self._make((*epoch, k)):  # each repetition its own (shuffled) order
                    empty = False
                    yield element
                if empty:
                    return
        n = self._length
        if times is None:
            length = 0 if n == 0 else INFINITE
        else:
            length = 0 if times <= 0 else n if n < 0 else n * times
        return self._derive(repeated, length)

    def take(self, count: int) -> "Dataset":
        """The first `count` elements (all of them when -1)."""
        n = _count(count, "count")
        if n < 0:
            return self._derive(self._make, self._length)
        length = UNKNOWN if self._length == UNKNOWN else n if self._length == INFINITE else min(n, self._length)
        return self._derive(lambda epoch: itertools.islice(self._make(epoch), n), length)

    def skip(self, count: int) -> "Dataset":
        """All but the first `count` elements (none when `count` is negative, as in TensorFlow)."""
        n = _count(count, "count")
        if n < 0:
            return self._derive(lambda epoch: iter(()), 0)
        length = self._length if self._length < 0 else max(0, self._length - n)
        return self._derive(lambda epoch: itertools.islice(self._make(epoch), n, None), length)

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
        length = self._length if self._length < 0 else max(0, -(-(self._length - mine) // shards))
        return self._derive(lambda epoch: itertools.islice(self._make(epoch), mine, None, shards), length)

    def map(self, fn: Callable) -> "Dataset":
        """`fn(element)` for each element (on the host, with NumPy values)."""
        def mapped(epoch: tuple) -> Iterator:
            for element in self._make(epoch):
                yield fn(*element) if isinstance(element, tuple) else fn(element)
        return self._derive(mapped, self._length)

    def filter(self, predicate: Callable) -> "Dataset":
        """The elements for which `predicate(element)` is true (its length is unknown)."""
        def kept(epoch: tuple) -> Iterator:
            for element in self._make(epoch):
                if bool(predicate(*element) if isinstance(element, tuple) else predicate(element)):
                    yield element
        return self._derive(kept, UNKNOWN)

    def cache(self, filename: str = "") -> "Dataset":
        """The elements of the first complete pass, kept (in memory, or in `filename` + a strategax
        suffix) and read back by every later pass: what comes before (a `map`) runs once. A pass
        stopped early keeps nothing, as in TensorFlow; a file left by an earlier run is read."""
        store = CacheStore(str(filename))

        def cached(epoch: tuple) -> Iterator:
            kept = store.read()
            if kept is not None:
                yield from kept
                return
            seen = []
            for element in self._make(epoch):
                seen.append(element)
                yield element
            store.write(seen)  # reached only when the pass ran to its end
        return self._derive(cached, self._length)

    def prefetch(self, buffer_size: int) -> "Dataset":
        """The same elements: distributed input already reads ahead in a background thread
        (`sx.InputOptions`); `buffer_size` is checked as TensorFlow checks it (>= 0, or AUTOTUNE)."""
        n = _count(buffer_size, "buffer_size")
        if n < AUTOTUNE:
            raise DistributionValueError(f"prefetch buffer_size is {n}; it must be >= 0, or sx.data.AUTOTUNE (-1)",
                                         "pass sx.data.AUTOTUNE")
        return self._derive(self._make, self._length)

    def with_options(self, options: Options) -> "Dataset":
        """This dataset with `options` (an `sx.data.Options`) merged over its own."""
        if not isinstance(options, Options):
            raise DistributionTypeError(f"with_options takes an sx.data.Options, not a {type(options).__name__}",
                                        "make one with sx.data.Options() and set its fields")
        return Dataset(self._make, self._length, self._options.merge(options))

    def options(self) -> Options:
        """The options set with `with_options` (TensorFlow's `Dataset.options()`)."""
        return self._options


NumpyDataset = Dataset  # the name experimental_make_numpy_dataset's result had before
