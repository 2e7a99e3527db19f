"""Distributed input: `experimental_distribute_dataset` splits each global batch across the
replicas as TensorFlow does (see `split`), pads the pieces to one static row count with a
hidden per-replica count (`padding`), and places them on the devices (`place`), ahead of use
in a background thread (`prefetch`)."""
from __future__ import annotations

from collections import deque
from typing import Any, Callable, Generator, Iterator

import jax
import numpy as np

from .. import _context
from .._markers import DistributedDatasetMarker, DistributedIteratorMarker
from ..backends.transfer import HostPool
from ..errors import DistributionTypeError, DistributionValueError
from ..trace.batches import streams, takes
from ..trace.batches.host_element import Placement, placed
from ..trace.distributed_values import is_distributed
from ..trace.signature import TensorSpec
from .optional import Optional
from .options import InputOptions
from .place import host_split, place_split
from .prefetch import Prefetcher, Synchronous
from .shard import worker_batches, worker_policy
from .split import BatchError, batch_leaves, split_sizes


def check_iterable(dataset: Any, what: str = "dataset") -> None:
    """Non-iterable input fails where the user hands it over; so does in-memory data that is not
    a sequence of batches (a tuple or dict of arrays), which iterating would silently take apart
    (`(x, y)` would give x, then y, as two "batches"); an array iterates its first axis: batches."""
    if hasattr(dataset, "as_numpy_iterator"):
        return
    if isinstance(dataset, (tuple, dict)) and dataset and all(
            isinstance(x, (np.ndarray, jax.Array)) for x in jax.tree_util.tree_leaves(dataset)):
        kind = f"a {type(dataset).__name__} of arrays"
        raise DistributionValueError(
            f"the {what} is {kind}, not a sequence of batches (each with a leading batch axis): "
            "iterating it would take it apart along its first level, not split it into batches "
            "of rows",
            "make a dataset of its rows and batch it: `sx.data.Dataset.from_tensor_slices((x, y))"
            ".shuffle(len(x)).batch(GLOBAL_BATCH_SIZE)` (or `strategy.experimental_make_numpy_dataset"
            "((x, y)).batch(GLOBAL_BATCH_SIZE)`); a list of batches works as is")
    try:
        iter(dataset)
    except TypeError:
        raise DistributionTypeError(
            f"the {what} is a {type(dataset).__name__}, which is not iterable",
            "pass an iterable of batches (a list, a generator function's result, a "
            "tf.data.Dataset)") from None


def host_iterator(dataset: Any) -> Iterator:
    """Iterate a tf.data.Dataset (duck-typed, TensorFlow never imported) or any iterable."""
    if hasattr(dataset, "as_numpy_iterator"):
        return iter(dataset.as_numpy_iterator())
    return iter(dataset)


def spec_of(element: Any) -> Any:
    """`element_spec` of a placed element: per-replica TensorSpecs with an unknown batch axis
    (and unknown extents where the replicas' values differ in shape)."""
    def one(v):
        if v.held_global is None:  # components of different shapes
            comps = v.values
            shape = tuple(c.shape[k] if len({d.shape[k] for d in comps}) == 1 else None
                          for k, c in ((k, comps[0]) for k in range(comps[0].ndim)))
            return TensorSpec(shape, np.dtype(comps[0].dtype))
        t = v.layout.type
        shape = (None, *t.shape[1:]) if t.shape and getattr(v, "_counts", None) is not None else t.shape
        return TensorSpec(tuple(shape), np.dtype(t.dtype))
    return jax.tree_util.tree_map(one, element, is_leaf=is_distributed)


class DistributedIterator(DistributedIteratorMarker):
    """`iter(dist_dataset)`: yields placed elements; `next()` and `get_next()` work. Inside a
    `strategy.function` that takes it as an argument, `next()` is a program input (`trace.batches.takes`).
    Elements the pipeline left on the host (`HostElement`, while `placement.bulk`) are placed
    when taken one at a time, or stacked and placed together by a compiled loop."""

    def __init__(self, strategy, produce: Callable[[], Iterator], options: InputOptions,
                 placement: Placement | None = None):
        self._strategy = strategy
        self._placement = placement if placement is not None else Placement()
        ahead = self._placement.ahead if self._placement.bulk else 0  # compiled loops take that many at once
        self._source = (Prefetcher(produce, max(options.experimental_per_replica_buffer_size, ahead))
                        if options.experimental_fetch_to_device else Synchronous(produce))
        self._ahead: deque = deque()  # elements read but not yet consumed (peeked, or put back)
        self._spec = None  # the cache key of the last element seen (see _spec_key)
        self._last_spec = None  # the element_spec of the last element seen

    def __iter__(self):
        if _context.is_tracing() and streams.called_by_for():  # `for x in iterator` inside the function
            return takes.whole_loop(takes.iterator_stream(self))
        return self

    def __next__(self):
        if _context.is_tracing():
            return takes.take(takes.iterator_stream(self))
        element = self._pull()
        if element is None:
            raise StopIteration
        return self._strategy._finalize_outputs(element)

    # --- what compiled functions use (trace.batches.takes): placed elements, before finalizing ----
    def _pull(self, bulk: bool = False) -> Any:
        """The next element, or None at the end of the data: placed, or with `bulk` (a compiled
        loop taking several, to place them together) as the pipeline made it, and the pipeline
        then leaves the next ones on the host too."""
        self._placement.bulk = bulk
        element = self._next_raw()
        return element if bulk or element is None else placed(element)

    def _reserve(self, n: int) -> None:
        """A compiled loop is about to take `n` elements: let the pipeline run that far ahead
        (their host copies: the loop stacks them anyway), now and in later iterators."""
        self._placement.ahead = max(self._placement.ahead, n)
        self._source.reserve(n)

    def _next_raw(self) -> Any:
        if self._ahead:
            return self._ahead.popleft()
        try:
            return next(self._source)
        except StopIteration:
            return None

    def _peek(self) -> Any:
        """The next element (as the pipeline made it) without consuming it, or None at the end."""
        if not self._ahead:
            element = self._next_raw()
            if element is None:
                return None
            self._ahead.append(element)
        return self._ahead[0]

    def _push_back(self, element: Any) -> None:
        """Un-take `element`: it is the next one again."""
        self._ahead.appendleft(element)

    def _remaining(self) -> int:
        """How many elements are left (all read ahead, none consumed)."""
        while True:
            try:
                element = next(self._source)
            except StopIteration:
                return len(self._ahead)
            self._ahead.append(element)

    def _spec_key(self) -> Any:
        """What a compiled function's cache key holds for this iterator: its element spec (the
        last one seen once the data has ended, so the call that finds no batch needs no trace)."""
        element = self._peek()
        if element is not None:
            self._spec = takes.checked_key(takes.element_key(element))
        return self._spec

    def get_next(self):
        return next(self)

    def get_next_as_optional(self) -> Optional:
        """The next element as an `Optional`, empty at the end of the data (TensorFlow's
        `get_next_as_optional`); outside a `strategy.function`."""
        if _context.is_tracing():
            raise DistributionTypeError(
                "get_next_as_optional() inside a strategy.function",
                "call it outside, or take batches inside with next(iterator) in an "
                "`sx.range(n)` loop (the loop ends after the last batch)")
        element = self._pull()
        if element is None:
            return Optional.empty(self._last_spec)
        self._last_spec = spec_of(element)
        return Optional.from_value(self._strategy._finalize_outputs(element), self._last_spec)

    @property
    def element_spec(self) -> Any:
        """Per leaf, a TensorSpec with an unknown per-replica batch axis (from the next element,
        which stays the next one)."""
        element = self._peek()
        if element is not None:
            self._last_spec = spec_of(placed(element))
        elif self._last_spec is None:
            raise DistributionValueError("the iterator has no element, so it has no element_spec",
                                         "ask the dataset's element_spec, or give it at least one batch")
        return self._last_spec

    def close(self) -> None:
        self._source.close()

    def __del__(self):
        try:  # a dropped iterator stops its thread without waiting for it
            self._source.close(timeout=0)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _resume(first: Any, rest: Iterator) -> Iterator:
    yield first
    yield from rest


def is_one_shot(source: Any) -> bool:
    """A source that iterates only once (a generator, an iterator) rather than restarting."""
    return not hasattr(source, "as_numpy_iterator") and iter(source) is source


class _Dataset(DistributedDatasetMarker):
    """What the distributed datasets share: iterating restarts; `element_spec` from the first element."""

    def __init__(self, strategy, options: InputOptions | None):
        self._strategy = strategy
        self._options = options or InputOptions()
        self._first_read = None  # ((element_spec, key) of the first element, or None,) once read
        self._placement = Placement()  # shared with its iterators: whether compiled loops read them
        self._pending = None  # (first element, rest) read by element_spec from a one-shot source
        self._iterated = False  # a one-shot source can be iterated once

    def _produce(self) -> Generator:
        raise NotImplementedError

    def _one_shot(self) -> bool:
        raise NotImplementedError

    def __iter__(self):
        if _context.is_tracing():  # inside a strategy.function: a stream of the program's inputs
            stream = takes.dataset_stream(self)
            return takes.whole_loop(stream) if streams.called_by_for() else takes.TracedIterator(stream)
        return self._host_iterator()

    def _host_iterator(self) -> DistributedIterator:
        """A new pass over the data, placed on the devices."""
        if self._one_shot():
            if self._iterated:
                raise DistributionValueError(
                    "this distributed dataset reads a generator (or another one-shot iterator), which "
                    "was already iterated: a second pass would silently yield nothing or skip batches",
                    "distribute a re-iterable source (a list, a tf.data.Dataset, or an object whose "
                    "__iter__ makes a new generator), or distribute a new generator for each epoch")
            self._iterated = True
        pending, self._pending = self._pending, None
        produce = self._produce if pending is None else (lambda: _resume(*pending))
        return DistributedIterator(self._strategy, produce, self._options, self._placement)

    def _first(self) -> tuple | None:
        """(element_spec, cache key) of the first element, None for an empty dataset; read once
        (a one-shot source keeps what was read for its iteration)."""
        if self._first_read is None:
            it = self._produce()
            try:
                first = next(it)
            except BatchError as e:
                raise e.user_error() from None
            except StopIteration:
                first = None
            if first is not None and self._one_shot():  # the next iteration starts with it
                self._pending = (first, it)
            else:
                it.close()
            self._first_read = (None if first is None else (spec_of(placed(first)), takes.element_key(first)),)
        return self._first_read[0]

    @property
    def element_spec(self) -> Any:
        """Per leaf, a TensorSpec with an unknown per-replica batch axis (from the first element)."""
        first = self._first()
        if first is None:
            raise DistributionValueError("the dataset is empty, so it has no element_spec",
                                         "give the dataset at least one batch")
        return first[0]

    def _spec_key(self) -> Any:
        """What a compiled function's cache key holds for this dataset: its element spec."""
        first = self._first()
        return None if first is None else takes.checked_key(first[1])


class DistributedDataset(_Dataset):
    """Iterating yields, per global batch, a pytree of PerReplica values placed on the devices."""

    def __init__(self, strategy, dataset: Any, options: InputOptions | None = None):
        check_iterable(dataset)
        super().__init__(strategy, options)
        self._dataset = dataset
        workers = getattr(strategy, "_input_pipeline", lambda: (1, 0))()[0]
        self._policy = worker_policy(dataset, self._options) if workers > 1 else None  # shared per worker
        self._pool = HostPool()  # the host copies of its batches, reused once placed arrays are gone

    def _one_shot(self) -> bool:
        return is_one_shot(self._dataset)

    def _produce(self) -> Generator:
        if self._policy is not None:
            yield from worker_batches(self._strategy, host_iterator(self._dataset), self._policy)
            return
        mesh, n = self._strategy._mesh, self._strategy.num_replicas_in_sync
        treedef, rows = None, 0
        for batch in host_iterator(self._dataset):
            leaves, tree, b = batch_leaves(batch, treedef)
            treedef = tree
            counts = split_sizes(b, n)
            rows = max(rows, counts[0], 1)  # the first (full) batch fixes the static row count
            if self._placement.bulk:  # compiled loops read the iterators: they place several at once
                yield host_split(mesh, leaves, treedef, counts, rows, self._pool)
            else:  # placed ahead of use (in the prefetch thread)
                yield place_split(mesh, leaves, treedef, counts, rows, self._pool)
