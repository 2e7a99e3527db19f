"""`next(iterator)` inside a `strategy.function`: the next batch is a program input.

While a function is traced, `next()` on a distributed iterator that is one of its arguments
binds `sx.take`, whose results are the element's local per-replica arrays (and, for a padded
batch, this replica's real row count, which the padding helpers then use). `outline.py`
turns every take into program inputs: one element for a take outside a loop, `n` elements
(stacked inside the program) for a take in the body of an `sx.range(n)` loop. The program is
cached by the iterator's element spec, not its identity, so a new iterator for the next
epoch reuses it.

When the program runs, `InputPlan.pull` takes the elements from the call's iterators in
program order. A loop whose iterator runs out runs the steps it has batches for (the
missing slots repeat the last batch and the loop's step count, an input, stops it there);
a take that gets no batch at all raises `OutOfRangeError` and puts back what the call had
taken, so a failed call consumes nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import core as jax_core
from jax.extend import core as jex

from .. import _context
from ..dialects.effects import INPUT
from ..dialects.rows import mark_rows
from ..errors import DistributionTypeError, DistributionValueError, OutOfRangeError, user_location
from ..ir import Locality, TensorType
from .distributed_values import PerReplica, PerReplicaBatch, is_distributed

take_p = jex.Primitive("sx.take")
take_p.multiple_results = True
take_p.def_effectful_abstract_eval(
    lambda *, iterator, types: ([jax_core.ShapedArray(s, d) for s, d in types], {INPUT}))

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


def element_spec(element: Any) -> ElementSpec:
    leaves, treedef = jax.tree_util.tree_flatten(element, is_leaf=is_distributed)
    types = tuple(x._global[1].type.with_locality(Locality.PER_REPLICA) for x in leaves)
    return ElementSpec(treedef, types, _rows(leaves))


def _rows(leaves: list) -> int | None:
    padded = bool(leaves) and all(isinstance(x, PerReplicaBatch) for x in leaves)
    return leaves[0]._rows if padded else None


def element_arrays(element: Any, spec: ElementSpec) -> list[jax.Array] | None:
    """The global arrays of an element, as `spec.input_types` lists them (the key the spec of
    `element` would have is checked on the way: one flattening per batch a call takes); None when
    it differs."""
    leaves, treedef = jax.tree_util.tree_flatten(element, is_leaf=is_distributed)
    key = spec.key
    if treedef != key[0] or _rows(leaves) != key[2] or len(leaves) != len(key[1]) or any(
            (x._global[1].type.shape, x._global[1].type.dtype) != k for x, k in zip(leaves, key[1])):
        return None
    arrays = [x._global[0] for x in leaves]
    if spec.rows is not None:
        arrays.append(leaves[0]._count_value._global[0])
    return arrays


class TraceInputs:
    """The iterator arguments of one trace (by argument leaf) and their element specs."""

    def __init__(self, strategy, leaves: Sequence[Any]):
        self.strategy = strategy
        self.iterators = {i: x for i, x in enumerate(leaves) if getattr(x, "_is_distributed_iterator", False)}
        self._specs: dict[int, ElementSpec | None] = {}

    def index(self, iterator) -> int | None:
        return next((i for i, x in self.iterators.items() if x is iterator), None)

    def spec(self, index: int) -> ElementSpec | None:
        """The element spec of argument `index` (from its next element), None if it is exhausted."""
        if index not in self._specs:
            element = self.iterators[index]._peek()
            self._specs[index] = None if element is None else element_spec(element)
        return self._specs[index]


def take(iterator) -> Any:
    """`next(iterator)` while a strategy.function is traced: the element as traced values."""
    inputs = _context.inputs()
    index = None if inputs is None else inputs.index(iterator)
    if inputs is None or index is None:
        raise DistributionTypeError(
            "next() on a distributed iterator that is not an argument of the strategy.function "
            "being traced", "pass the iterator to the function as an argument, as in TensorFlow: "
            "`train(iterator)`")
    if iterator._strategy is not inputs.strategy:
        raise DistributionValueError(
            f"the iterator belongs to {iterator._strategy!r}, but the function is compiled for "
            f"{inputs.strategy!r}", "distribute the dataset with the strategy that runs the function")
    spec = inputs.spec(index)
    if spec is None:
        raise OutOfRangeError("next(iterator): the input iterator has no batch left", _END_FIX)
    outs = take_p.bind(iterator=index, types=tuple((t.shape, t.dtype) for t in spec.input_types))
    leaves = outs[:len(spec.types)]
    if spec.rows is not None:  # mask-padding follows this batch's rows; the helpers see its count
        leaves = [mark_rows(v, outs[-1]) for v in leaves]
        _context.set_batch((outs[-1], spec.rows))
    if inputs.strategy.num_replicas_in_sync == 1:  # TensorFlow hands back plain values
        return jax.tree_util.tree_unflatten(spec.treedef, leaves)
    return jax.tree_util.tree_unflatten(spec.treedef, [PerReplica._traced(v) for v in leaves])


# --- the plan: which batches a call takes, in program order --------------------------------
@dataclass
class Site:
    """One `next(iterator)` of the program: which argument, its element spec, the user's line."""

    iterator: int
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
        """Per site, `steps` elements; then the number of steps that have batches."""
        return [t for s in self.sites for _ in range(self.steps) for t in s.spec.input_types] + [_STEPS]


@dataclass
class InputPlan:
    segments: list[Site | Loop] = field(default_factory=list)
    _steps: dict = field(default_factory=dict)
    _taken: dict = field(default_factory=dict)  # id(inputs of a call) -> what it took, until it ran

    @property
    def input_types(self) -> list[TensorType]:
        return [t for seg in self.segments for t in
                (seg.spec.input_types if isinstance(seg, Site) else seg.input_types)]

    def abstract(self, layouts: Sequence) -> list[jax.ShapeDtypeStruct]:
        """Stand-ins for the inputs (to lower the program without taking batches)."""
        return [jax.ShapeDtypeStruct(lay.global_shape, lay.type.dtype, sharding=lay.sharding) for lay in layouts]

    def pull(self, leaves: Sequence[Any], layouts: Sequence) -> list[jax.Array]:
        """Take this call's batches from the iterators among the argument `leaves`; the global
        arrays of the inputs, in order (`layouts` are the inputs' layouts)."""
        taken: list[tuple[Any, Any]] = []  # (iterator, element), put back if the call fails
        try:
            out = self._pull(leaves, layouts, taken)
        except BaseException:
            self._give_back(taken)
            raise
        self._taken[id(out)] = taken
        return out

    def put_back(self, sig) -> None:
        """Un-take the batches the call of `sig` took (it failed after taking them)."""
        if sig.inputs is not None:
            self._give_back(self._taken.pop(id(sig.inputs), []))
            sig.inputs = None

    def done(self, sig) -> None:
        """The call of `sig` ran: forget what it took."""
        if sig.inputs is not None:
            self._taken.pop(id(sig.inputs), None)

    @staticmethod
    def _give_back(taken: list) -> None:
        for iterator, element in reversed(taken):
            iterator._push_back(element)

    def _next(self, leaves, site: Site, taken: list) -> list[jax.Array] | None:
        """The next element's arrays at `site`, or None when the iterator has ended."""
        iterator = leaves[site.iterator]
        element = iterator._pull()
        if element is None:
            return None
        taken.append((iterator, element))
        arrays = element_arrays(element, site.spec)
        if arrays is None:
            raise DistributionValueError(
                f"a batch taken by next(iterator) at {site.where} differs in structure, shape or "
                "dtype from the one the function was compiled for",
                "give every batch of the dataset the same structure and shapes (a partial last "
                "batch is padded for you)")
        return arrays

    def _pull(self, leaves, layouts, taken: list) -> list[jax.Array]:
        out: list[jax.Array] = []
        for seg in self.segments:
            if isinstance(seg, Site):
                arrays = self._next(leaves, seg, taken)
                if arrays is None:
                    raise OutOfRangeError(f"next(iterator) at {seg.where}: the input iterator has no batch left",
                                          _END_FIX, location=user_location())
                out.extend(arrays)
                continue
            rows: list[list] = []  # per step, one element's arrays per site
            while len(rows) < seg.steps:
                row = []
                for site in seg.sites:
                    arrays = self._next(leaves, site, taken)
                    if arrays is None:
                        break
                    row.append(arrays)
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
            full = rows + [rows[-1]] * (seg.steps - len(rows))  # unused slots repeat the last batch
            for k in range(len(seg.sites)):
                for row in full:
                    out.extend(row[k])
            out.append(self._steps_array(len(rows), layouts[len(out)]))
        return out

    def _steps_array(self, steps: int, layout) -> jax.Array:
        array = self._steps.get(steps)
        if array is None:
            array = self._steps[steps] = jax.device_put(jnp.int32(steps), layout.sharding)
        return array
