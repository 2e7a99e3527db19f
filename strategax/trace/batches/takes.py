"""`next(iterator)` and `for x in dataset` inside a `strategy.function`: batches are program inputs.

While a function is traced, `next()` on a stream (`streams.py`: an iterator argument, or a pass
over a dataset argument) binds `sx.take`, whose results are the element's local per-replica
arrays (and, for a padded batch, this replica's real row count, which the padding helpers then
use). `for x in <stream>` is `whole_loop`: an `sx.range` loop over the elements left, read ahead
on the host to count them (the count is part of the program's cache key). `outline.py` turns
every take into program inputs: one element for a take outside a loop, `n` elements (stacked
inside the program) for a take in the body of a loop of `n` steps. The program is cached by
the stream's element spec, not its identity, so a new iterator for the next epoch reuses it.

When the program runs, `InputPlan.pull` takes the elements from the call's streams in
program order. A loop whose iterator runs out runs the steps it has batches for (the
missing slots repeat the last batch and the loop's step count, an input, stops it there);
a take that gets no batch at all raises `OutOfRangeError` and puts back what the call had
taken, so a failed call consumes nothing.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import core as jax_core
from jax.extend import core as jex

from ... import _context
from ...dialects.effects import INPUT
from ...dialects.rows import mark_rows
from ...errors import DistributionTypeError, DistributionValueError, OutOfRangeError, user_location
from ...ir import Locality, TensorType
from . import loops, stacking, streams
from ..distributed_values import PerReplica, PerReplicaBatch, is_distributed
from .host_element import HostElement, placed

take_p = jex.Primitive("sx.take")
take_p.multiple_results = True
take_p.def_effectful_abstract_eval(
    lambda *, stream, types: ([jax_core.ShapedArray(s, d) for s, d in types], {INPUT}))

_COUNT = TensorType((), np.dtype(np.int32), Locality.PER_REPLICA)
_STEPS = TensorType((), np.dtype(np.int32), Locality.MIRRORED)
_END_FIX = ("the data has ended: make a new iterator (iter(dataset)) for the next epoch, or catch "
            "sx.OutOfRangeError to stop")


@dataclass(frozen=True)
class ElementSpec:
    """What one element of an iterator is: its pytree, each leaf's local per-replica type, and
    the padded row count when the leaves are padded batches (their real counts ride along)."""

    treedef: Any
    types: tuple[TensorType, ...]
    rows: int | None

    @property
    def input_types(self) -> list[TensorType]:
        """The program inputs one element becomes: its leaves, then its row counts if padded."""
        return [*self.types, *([_COUNT] if self.rows is not None else [])]

    @property
    def key(self) -> tuple:
        return (self.treedef, tuple((t.shape, t.dtype) for t in self.types), self.rows)


DIFFERING = "differing shapes"  # the key of an element whose replicas' values differ in shape


def element_key(element: Any) -> Any:
    """The cache key of `element`'s spec, or DIFFERING (`checked_key` raises for it)."""
    if isinstance(element, HostElement):  # from its host copy: not placed for this
        return element_spec(element).key
    leaves = jax.tree_util.tree_leaves(element, is_leaf=is_distributed)
    if any(getattr(x, "_global", None) is None for x in leaves):  # components of different shapes
        return DIFFERING
    return element_spec(element).key


def checked_key(key: Any) -> Any:
    """`key` (of `element_key`) for a compiled function that takes such elements inside."""
    if key == DIFFERING:
        raise DistributionValueError(
            "a dataset element whose per-replica values differ in shape across replicas, taken inside a "
            "compiled function (`next(iterator)` or `for x in dataset` there): its batches are taken on "
            "the device, in one shape", "iterate outside and pass each element to the function as an "
            "argument (`for x in dist_dataset: step(x)`: strategax pads such an argument to one shape), "
            "or give the dataset's elements one shape (padded_batch)")
    return key


def element_spec(element: Any) -> ElementSpec:
    if isinstance(element, HostElement):
        return ElementSpec(element.treedef, element.types, element.rows)
    leaves, treedef = jax.tree_util.tree_flatten(element, is_leaf=is_distributed)
    types = tuple(x.layout.type.with_locality(Locality.PER_REPLICA) for x in leaves)
    return ElementSpec(treedef, types, _rows(leaves))


def _rows(leaves: list) -> int | None:
    padded = bool(leaves) and all(isinstance(x, PerReplicaBatch) for x in leaves)
    return leaves[0].padded_rows if padded else None


def element_arrays(element: Any, spec: ElementSpec) -> list[jax.Array] | None:
    """The global arrays of an element, as `spec.input_types` lists them (the key the spec of
    `element` would have is checked on the way: one flattening per batch a call takes)."""
    element = placed(element)
    leaves, treedef = jax.tree_util.tree_flatten(element, is_leaf=is_distributed)
    key = spec.key
    if treedef != key[0] or _rows(leaves) != key[2] or len(leaves) != len(key[1]) or any(
            (x.layout.type.shape, x.layout.type.dtype) != k for x, k in zip(leaves, key[1])):
        return None
    arrays = [x.global_array for x in leaves]
    if spec.rows is not None:
        arrays.append(leaves[0].count_value.global_array)
    return arrays


class TraceInputs:
    """The input streams of one trace: its iterator and dataset arguments, the element spec of
    each stream, how far the trace has taken from each, and the streams a `for` loop iterates
    to their end (their element counts are part of the program's cache key)."""

    def __init__(self, strategy, leaves: Sequence[Any], host: streams.Streams):
        self.strategy, self.leaves, self.host = strategy, leaves, host
        self._specs: dict[tuple, ElementSpec | None] = {}
        self._taken: dict[tuple, int] = {}  # stream -> elements this trace has taken from it
        self._passes: dict[int, int] = {}  # dataset leaf -> iter() calls so far
        self.whole: list[tuple] = []  # streams iterated to their end, in program order
        self.whole_loops: set[int] = set()  # the sx.loop_mark ids of `for` loops over streams
        self.ended: set[int] = set()  # those that reached their end

    @property
    def looping(self) -> bool:
        """Whether a `for` loop over a stream is being traced (or was left early)."""
        return bool(self.whole_loops - self.ended)

    def leaf_of(self, x) -> int | None:
        return next((i for i, y in enumerate(self.leaves) if y is x), None)

    def spec(self, stream: tuple) -> ElementSpec | None:
        """The element spec of `stream` (from its next element), None if it is empty."""
        if stream not in self._specs:
            element = self.host.source(stream)._peek()
            self._specs[stream] = None if element is None else element_spec(element)
        return self._specs[stream]

    def took(self, stream: tuple, n: int = 1) -> None:
        self._taken[stream] = self._taken.get(stream, 0) + n

    def remaining(self, stream: tuple) -> int:
        """Elements of `stream` not yet taken by the trace (the whole stream is read ahead)."""
        if stream not in self.whole:
            self.whole.append(stream)
        return max(0, self.host.count(stream) - self._taken.get(stream, 0))

    def open(self, leaf: int) -> tuple:
        """A new pass over dataset argument `leaf`."""
        k = self._passes.get(leaf, 0)
        self._passes[leaf] = k + 1
        return (streams.DATASET, leaf, k)


def _inputs_for(what: str, x, fix: str) -> tuple[TraceInputs, int]:
    """The trace's inputs and the argument leaf of `x`, or the error saying `x` is no argument."""
    inputs = _context.inputs()
    leaf = None if inputs is None else inputs.leaf_of(x)
    if inputs is None or leaf is None:
        raise DistributionTypeError(
            f"{what} that is not an argument of the strategy.function being traced (it is captured "
            "by closure, or made inside the function from a value that is not an argument)", fix)
    if x._strategy is not inputs.strategy:
        raise DistributionValueError(
            f"the {'dataset' if streams.is_dataset(x) else 'iterator'} belongs to {x._strategy!r}, but the "
            f"function is compiled for {inputs.strategy!r}", "distribute the dataset with the strategy that "
            "runs the function")
    return inputs, leaf


def iterator_stream(iterator) -> tuple:
    """The stream of an iterator argument of the function being traced."""
    _, leaf = _inputs_for("next() or a `for` loop on a distributed iterator", iterator,
                          "pass the iterator (or its dataset) to the function as an argument, as in "
                          "TensorFlow: `train(iterator)`")
    return (streams.ITERATOR, leaf)


def dataset_stream(dataset) -> tuple:
    """A new pass over a dataset argument of the function being traced (`iter(dataset)`)."""
    inputs, leaf = _inputs_for("iterating a distributed dataset", dataset,
                               "pass the dataset to the function as an argument, as in TensorFlow: "
                               "`train_epoch(dist_dataset)`; `for x in dataset` inside is then one "
                               "on-device loop over its batches")
    return inputs.open(leaf)


class TracedIterator:
    """`iter(dataset)` inside a strategy.function (not in a `for` statement): `next()` takes the
    next batch of that pass; a `for` loop over it takes the rest."""

    def __init__(self, stream: tuple):
        self._stream = stream

    def __next__(self):
        return take(self._stream)

    def get_next(self):
        return take(self._stream)

    def __iter__(self):
        return whole_loop(self._stream) if streams.called_by_for() else self


def whole_loop(stream: tuple) -> Iterator:
    """`for x in <dataset or iterator>` inside a strategy.function: every element left, as one
    on-device loop (`sx.range`'s markers around two traced steps, `outline.py`); the stream's
    count of elements is known (read ahead) and part of the program's cache key. A loop of
    zero or one element is plain Python iteration; a loop left early (`break`) is unrolled.

    Python numbers the body changes (`num_batches += 1`) would keep their traced values: as
    AutoGraph makes them tensors, the first step runs on its own, those numbers become JAX
    values in the caller's frame, and the loop carries them over the steps that follow."""
    inputs = _context.inputs()
    if jax.process_count() > 1:
        raise DistributionTypeError(
            "`for x in dataset` inside a strategy.function on a multi-worker strategy: the workers' "
            "element counts would have to agree before the program runs",
            "loop over a fixed number of steps: `for _ in sx.range(n): step(next(iterator))`")
    n = inputs.remaining(stream)
    frame, where = sys._getframe(1), user_location()
    if n <= 1:
        if n:
            yield take(stream)
        return
    before = streams.python_numbers(frame)
    loop = _begin(inputs, n)
    yield take(stream)
    changed = streams.changed_numbers(before, streams.python_numbers(frame))
    if changed:  # the first step stands alone (its loop is left, `outline._left_early`); carry the rest
        inputs.ended.add(loop)
        streams.set_locals(frame, {k: streams.as_tensor(v) for k, _, v in changed})
        n -= 1
        if n == 1:
            yield take(stream)
            return
        before = streams.python_numbers(frame)
        loop = _begin(inputs, n)
        yield take(stream)
    middle = streams.python_numbers(frame)
    loops.loop_mark_p.bind(loop=loop, kind=loops.NEXT)
    yield take(stream)
    loops.loop_mark_p.bind(loop=loop, kind=loops.END)
    inputs.ended.add(loop)
    inputs.took(stream, n - 2)
    changed = streams.changed_numbers(before, middle) or streams.changed_numbers(middle, streams.python_numbers(frame))
    if changed:
        name, a, b = changed[0]
        raise DistributionValueError(
            f"the Python {type(b).__name__} `{name}` changes from step to step of the loop over the data "
            f"({a!r}, then {b!r}) in a way the first step did not show: the loop's body is traced as one "
            "on-device step, so a Python value keeps what the trace gave it",
            f"make it a JAX value before the loop (`{name} = jnp.asarray({a!r})`), so that it is carried "
            "from step to step on the device (for `enumerate(dataset)`, count in such a value yourself)",
            location=where)


def _begin(inputs: TraceInputs, steps: int) -> int:
    """Open a loop of `steps` steps over a stream (its first marker); its id."""
    loop = next(loops._loop_ids)
    inputs.whole_loops.add(loop)
    bounds = [jnp.asarray(x, jnp.int32) for x in (0, steps, 1)]
    loops.loop_mark_p.bind(*bounds, loop=loop, kind=loops.BEGIN)
    return loop


def take(stream: tuple) -> Any:
    """The next element of `stream` while a strategy.function is traced, as traced values."""
    inputs = _context.inputs()
    spec = inputs.spec(stream)
    if spec is None:
        raise OutOfRangeError("next(iterator): the input iterator has no batch left", _END_FIX)
    inputs.took(stream)
    outs = take_p.bind(stream=stream, types=tuple((t.shape, t.dtype) for t in spec.input_types))
    leaves = outs[:len(spec.types)]
    if spec.rows is not None:  # mask-padding follows this batch's rows; the helpers see its count
        leaves = [mark_rows(v, outs[-1]) for v in leaves]
        _context.set_batch((outs[-1], spec.rows))
    if inputs.strategy.num_replicas_in_sync == 1:  # TensorFlow hands back plain values
        return jax.tree_util.tree_unflatten(spec.treedef, leaves)
    return jax.tree_util.tree_unflatten(spec.treedef, [PerReplica.from_tracer(v) for v in leaves])


# --- the plan: which batches a call takes, in program order --------------------------------
@dataclass
class Site:
    """One `next(iterator)` of the program: which stream, its element spec, the user's line."""

    stream: tuple
    spec: ElementSpec
    where: str


@dataclass
class Loop:
    """An `sx.range(steps)` loop whose body takes from iterators at `sites`, once per step."""

    steps: int
    sites: list[Site]
    where: str

    @property
    def input_types(self) -> list[TensorType]:
        """Per site, each input of its element stacked over the `steps` steps (`stacking.py`);
        then the number of steps that have batches."""
        return [TensorType((self.steps, *t.shape), t.dtype, t.locality)
                for s in self.sites for t in s.spec.input_types] + [_STEPS]


@dataclass
class InputPlan:
    segments: list[Site | Loop] = field(default_factory=list)
    _steps: dict = field(default_factory=dict)
    _taken: dict = field(default_factory=dict)  # id(inputs of a call) -> what it took, until it ran

    @property
    def input_types(self) -> list[TensorType]:
        return [t for seg in self.segments for t in
                (seg.spec.input_types if isinstance(seg, Site) else seg.input_types)]

    def constants(self) -> dict[int, np.ndarray]:
        """Per loop, its inputs a call holding every step's batch, each full, gives known values:
        position among the plan's inputs -> value (per replica): each site's row counts (every
        row real: the row masks fold away) and the steps count (XLA then knows the loop's trip
        count, and its GPU runtime queues the steps without reading the loop's condition back to
        the host after each one). The program holds them as constants for such calls (`full`)."""
        out, position = {}, 0
        for seg in self.segments:
            if isinstance(seg, Site):
                position += len(seg.spec.input_types)
                continue
            for site in seg.sites:
                position += len(site.spec.input_types)
                if site.spec.rows is not None:
                    out[position - 1] = np.full((seg.steps,), site.spec.rows, np.int32)
            out[position] = np.asarray(seg.steps, np.int32)
            position += 1
        return out

    def abstract(self, layouts: Sequence) -> list[jax.ShapeDtypeStruct]:
        """Stand-ins for the inputs (to lower the program without taking batches)."""
        return [jax.ShapeDtypeStruct(lay.global_shape, lay.type.dtype, sharding=lay.sharding) for lay in layouts]

    def pull(self, host: streams.Streams, layouts: Sequence) -> tuple[list[jax.Array], list]:
        """Take this call's batches from its streams: the global arrays of the inputs, in order
        (`layouts` are the inputs' layouts), and the element each single take got."""
        taken: list[tuple[Any, Any]] = []  # (iterator, element), put back if the call fails
        sites: list = []
        try:
            out = self._pull(host, layouts, taken, sites)
        except BaseException:
            self._give_back(taken)
            raise
        self._taken[id(out)] = taken
        return out, sites

    def put_back(self, sig) -> None:
        """Un-take the batches the call of `sig` took (it failed after taking them)."""
        if sig.inputs is not None:
            self._give_back(self._taken.pop(id(sig.inputs), []))
            sig.inputs = None

    def taken(self, sig) -> list:
        """The (iterator, element) pairs the call of `sig` has taken."""
        return self._taken.get(id(sig.inputs), []) if sig.inputs is not None else []

    def done(self, sig) -> None:
        """The call of `sig` ran: forget what it took."""
        if sig.inputs is not None:
            self._taken.pop(id(sig.inputs), None)

    @staticmethod
    def _give_back(taken: list) -> None:
        for iterator, element in reversed(taken):
            iterator._push_back(element)

    def _next(self, host: streams.Streams, site: Site, taken: list) -> tuple[Any, list[jax.Array]] | None:
        """The next element at `site` (placed) and its arrays, or None when the stream has ended."""
        iterator = host.source(site.stream)
        element = iterator._pull()
        if element is None:
            return None
        taken.append((iterator, element))
        arrays = element_arrays(element, site.spec)
        if arrays is None:
            raise _differs(site)
        return element, arrays

    @staticmethod
    def _next_raw(host: streams.Streams, site: Site, taken: list) -> Any:
        """The next element at `site` for a loop, as the iterator holds it (a HostElement is not
        placed: the loop's elements are stacked and placed together), or None at the end."""
        iterator = host.source(site.stream)
        element = iterator._pull(bulk=True)
        if element is None:
            return None
        taken.append((iterator, element))
        if element_key(element) != site.spec.key:
            raise _differs(site)
        return element

    def _pull(self, host: streams.Streams, layouts, taken: list, sites: list) -> list[jax.Array]:
        out = Inputs()
        for seg in self.segments:
            if isinstance(seg, Site):
                got = self._next(host, seg, taken)
                if got is None:
                    raise OutOfRangeError(f"next(iterator) at {seg.where}: the input iterator has no batch left",
                                          _END_FIX, location=user_location())
                sites.append(got[0])
                out.extend(got[1])
                continue
            for site in seg.sites:  # the pipelines may run the loop's steps ahead
                reserve = getattr(host.source(site.stream), "_reserve", None)
                if reserve is not None:
                    reserve(seg.steps)
            rows: list[list] = []  # per step, one element per site
            while len(rows) < seg.steps:
                row = []
                for site in seg.sites:
                    got = self._next_raw(host, site, taken)
                    if got is None:
                        break
                    row.append(got)
                if len(row) < len(seg.sites):  # ran out mid-step: that step does not run
                    for _ in row:
                        iterator, element = taken.pop()
                        iterator._push_back(element)
                    break
                rows.append(row)
            if not rows:
                raise OutOfRangeError(
                    f"the sx.range loop at {seg.where}: the input iterator has no batch left",
                    _END_FIX, location=user_location())
            out.full = out.full and len(rows) == seg.steps and all(_full_rows(e) for row in rows for e in row)
            full = rows + [rows[-1]] * (seg.steps - len(rows))  # unused slots repeat the last batch
            for k, site in enumerate(seg.sites):
                width = len(site.spec.input_types)
                out.extend(_stacked(site, [row[k] for row in full], layouts[len(out):len(out) + width]))
            out.append(self._steps_array(len(rows), layouts[len(out)]))
        return out

    def _steps_array(self, steps: int, layout) -> jax.Array:
        array = self._steps.get(steps)
        if array is None:
            array = self._steps[steps] = jax.device_put(jnp.int32(steps), layout.sharding)
        return array


class Inputs(list):
    """A call's inputs (`InputPlan.pull`); `full` when each loop got every step's batch and
    every row of them is real (the values `InputPlan.constants` gives)."""

    full = True


def _full_rows(element: Any) -> bool:
    """Whether every replica's rows of `element` are real (no padding)."""
    if isinstance(element, HostElement):
        return min(element.counts) == element.rows
    leaves = [x for x in jax.tree_util.tree_leaves(element, is_leaf=is_distributed) if isinstance(x, PerReplicaBatch)]
    return not leaves or min(leaves[0].real_counts) == leaves[0].padded_rows


def _differs(site: Site) -> DistributionValueError:
    return DistributionValueError(
        f"a batch taken by next(iterator) at {site.where} differs in structure, shape or "
        "dtype from the one the function was compiled for",
        "give every batch of the dataset the same structure and shapes (a partial last "
        "batch is padded for you)")


def _stacked(site: Site, elements: list, layouts: Sequence) -> list[jax.Array]:
    """The inputs of `site` for a loop taking `elements` (one per step), stacked over the steps:
    from the host copies with one transfer per input when every element has one, else on the
    devices from the placed arrays."""
    shapes = [t.shape for t in site.spec.input_types]
    n = layouts[0].num_replicas
    shardings = [lay.sharding for lay in layouts]
    if stacking.all_host(elements):
        arrays = stacking.put_host(stacking.host_stacked(elements, shapes, n), shardings)
        if arrays is not None:
            return arrays
    columns = [element_arrays(e, site.spec) for e in elements]
    if any(c is None for c in columns):
        raise _differs(site)
    return stacking.device_stacked([list(g) for g in zip(*columns)], shapes, n, shardings)
