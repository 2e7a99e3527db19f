"""`PerReplica` and `Mirrored`: one value per replica, as in tf.distribute.

A distributed value is in one of the `Form`s: outside a trace it holds its components (one
per replica, as built), one global `jax.Array` sharded over the replicas (what a compiled
program returns), or both (the components read from the array's shards, or the array
assembled from the components for a program, each made once, on first use); inside a trace it
holds the local (this replica's) tracer.
"""
from __future__ import annotations

import enum
from typing import Any, Self, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .. import _context
from .._markers import is_variable
from ..dialects import collectives
from ..errors import DistributionTypeError, DistributionValueError


class Form(enum.Enum):
    """What a distributed value holds (`DistributedValues.form`)."""

    COMPONENTS = "components"  # one value per (local) replica, as built (`_values`)
    GLOBAL = "global"  # one global array sharded over the replicas, with its layout (`_global`)
    BOTH = "both"  # components and the global array, the one made from the other
    TRACED = "traced"  # this replica's tracer, inside a trace (`_local`)

    @property
    def has_components(self) -> bool:
        return self in (Form.COMPONENTS, Form.BOTH)

    @property
    def has_global(self) -> bool:
        return self in (Form.GLOBAL, Form.BOTH)


class DistributedValues:
    """Base class: a value per replica. Not an array: reduce it or take its local results."""

    _kind = "DistributedValues"
    _values: tuple | None  # the components, or None: not made yet (a program's output) or traced
    _global: tuple[jax.Array, Any] | None  # (global jax.Array, layout) when made from a program's output
    _local: Any  # the local tracer while tracing, else None
    _identical: bool | None = None  # components_identical's answer, once asked

    def __init__(self, values: Sequence[Any]):
        if not isinstance(values, (list, tuple)):
            raise DistributionTypeError(
                f"{type(self).__name__} takes a list or tuple of per-replica values, not "
                f"{type(values).__name__} {values!r:.60}", "pass one value per replica: "
                f"sx.{type(self).__name__}([value_0, value_1, ...])")
        values = tuple(values)
        if not values:
            raise DistributionValueError(f"{type(self).__name__} needs at least one component",
                                         "pass one value per replica")
        missing = [i for i, v in enumerate(values) if v is None]
        if missing:
            raise DistributionValueError(
                f"component {missing[0]} of this {type(self).__name__} is None (TensorFlow keeps it and "
                "fails later, or hands None to the replica)", "give every replica a value (an array or a "
                "pytree of arrays)")
        self._values = values
        self._global = None  # (global jax.Array, layout) when made from a program's output
        self._local = None  # the local tracer while tracing

    # --- construction from a program's outputs or a trace ------------------------------
    @classmethod
    def from_global(cls, array: jax.Array, layout) -> Self:
        """The value a program output holds: one global array sharded over the replicas."""
        self = cls.__new__(cls)
        self._values, self._global, self._local = None, (array, layout), None
        return self

    @classmethod
    def from_tracer(cls, local) -> Self:
        """The value inside a trace: this replica's tracer."""
        self = cls.__new__(cls)
        self._values, self._global, self._local = None, None, local
        return self

    @property
    def form(self) -> Form:
        """Which of `_values` (components), `_global` (array, layout) and `_local` (tracer) it holds."""
        if self._local is not None:
            return Form.TRACED
        if self._values is None:
            return Form.GLOBAL
        return Form.COMPONENTS if self._global is None else Form.BOTH

    # --- what it holds (see `form`) --------------------------------------------------------
    @property
    def held_global(self) -> tuple[jax.Array, Any] | None:
        """(global array, its layout) when the value holds one (GLOBAL or BOTH), else None."""
        return self._global

    @property
    def global_array(self) -> jax.Array:
        """The global array a GLOBAL or BOTH value holds."""
        assert self._global is not None, "a GLOBAL or BOTH value holds a global array"
        return self._global[0]

    @property
    def layout(self):
        """The layout (`backends.ReplicaLayout`) of the global array a GLOBAL or BOTH value holds."""
        assert self._global is not None, "a GLOBAL or BOTH value holds a global array"
        return self._global[1]

    @property
    def tracer(self) -> Any:
        """This replica's tracer inside a trace (TRACED), else None."""
        return self._local

    def held_components(self) -> tuple:
        """The components a COMPONENTS or BOTH value holds (never read from the global array)."""
        assert self._values is not None, "a COMPONENTS or BOTH value holds its components"
        return self._values

    def keep_global(self, array: jax.Array, layout) -> None:
        """Keep the global array assembled from the components (COMPONENTS -> BOTH): values are
        immutable, so a program input is assembled once."""
        self._global = (array, layout)

    @property
    def values(self) -> tuple:
        """The per-replica components, in replica order (read from the global array's shards
        on first use: GLOBAL -> BOTH)."""
        form = self.form
        if form is Form.TRACED:
            raise DistributionValueError(
                "the components of a distributed value are not available while tracing",
                "use strategy.experimental_local_results(value), or return the value")
        values = self._values
        if form is Form.GLOBAL:
            assert self._global is not None, "a distributed value holds components, a global array or a tracer"
            array, layout = self._global
            values = self._values = layout.components(array)
        assert values is not None, "COMPONENTS and BOTH hold the components"
        return values

    @property
    def _num_components(self) -> int:
        if self.form is Form.GLOBAL:
            return self.layout.num_local_replicas
        return len(self.values)

    # --- not an array -------------------------------------------------------------------
    def _not_an_array(self, *args, **kwargs):
        raise DistributionValueError(
            f"a {type(self).__name__} value holds one value per replica and cannot be used as "
            "a single array",
            "reduce it with strategy.reduce(...), or take its components with "
            "strategy.experimental_local_results(...)")

    __jax_array__ = __array__ = __float__ = __int__ = __bool__ = __index__ = _not_an_array
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _not_an_array
    __truediv__ = __rtruediv__ = __matmul__ = __rmatmul__ = __neg__ = __pow__ = _not_an_array
    __getitem__ = _not_an_array

    def __repr__(self) -> str:
        if self.form is Form.TRACED:
            return f"{self._kind}(traced {self._local.aval.str_short()})"
        body = ",\n".join(f"  {i}: {v!r}" for i, v in enumerate(self.values))
        return f"{self._kind}:{{\n{body}\n}}"


class PerReplica(DistributedValues):
    """Values that may differ across replicas (a replica function's results, input batches)."""

    _kind = "PerReplica"


class Mirrored(DistributedValues):
    """Values known to be identical on every replica (e.g. the result of an all_reduce).

    Unlike a PerReplica value, a Mirrored one may be used as a single array in cross-replica
    code (any replica's copy is the value), as in TensorFlow.
    """

    _kind = "Mirrored"

    def _value(self):
        return self._local if self.form is Form.TRACED else self.values[0]

    def __jax_array__(self):
        return jnp.asarray(self._value())

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self._value(), dtype=dtype)

    shape = property(lambda self: self._value().shape)
    dtype = property(lambda self: self._value().dtype)
    ndim = property(lambda self: self._value().ndim)
    __float__ = lambda self: float(self._value())  # noqa: E731  one line each, like the properties above
    __int__ = lambda self: int(self._value())  # noqa: E731  one line each, like the properties above
    __bool__ = lambda self: bool(self._value())  # noqa: E731  one line each, like the properties above
    __index__ = lambda self: int(self._value())  # noqa: E731  one line each, like the properties above
    __getitem__ = lambda self, i: jnp.asarray(self._value())[i]  # noqa: E731  one line each, like the properties above
    __neg__ = lambda self: -jnp.asarray(self._value())  # noqa: E731  one line each, like the properties above


def _mirrored_binary(name: str):
    def method(self, other):
        return getattr(jnp.asarray(self._value()), name)(other)
    return method


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
              "__rtruediv__", "__matmul__", "__rmatmul__", "__pow__"):
    setattr(Mirrored, _name, _mirrored_binary(_name))


class PerReplicaBatch(PerReplica):
    """A PerReplica input batch (or per-example output): components padded to `_rows` rows on
    the devices, of which the first `_counts[i]` are real on replica i. `values` gives the real
    rows, as TensorFlow does; the compiled program sees the padded ones plus the counts."""

    _kind = "PerReplica"
    _counts: tuple  # every replica's real row count
    _rows: int  # the padded row count of every replica's component
    _count_value: Any  # the counts as a per-replica int32 scalar (the program's hidden input)

    @classmethod
    def from_global_batch(cls, array: jax.Array, layout, counts: tuple, count_value) -> "PerReplicaBatch":
        """A batch a program holds padded: `counts` real rows per replica, `count_value` them on
        the devices."""
        self = cls.from_global(array, layout)
        self._counts, self._rows, self._count_value = counts, layout.type.shape[0], count_value
        return self

    @property
    def real_counts(self) -> tuple:
        """Every replica's real row count."""
        return self._counts

    @property
    def padded_rows(self) -> int:
        """The padded row count of every replica's component."""
        return self._rows

    @property
    def count_value(self) -> Any:
        """The real counts as a per-replica int32 scalar (a program's hidden input)."""
        return self._count_value

    @property
    def component_ndim(self) -> int:
        """The number of dimensions of each (padded) component."""
        assert self._global is not None, "a batch is made from a global array"
        return len(self._global[1].type.shape)

    @property
    def values(self) -> tuple:
        padded = super().values
        counts = self._counts  # every replica's; a multi-worker process holds only its own replicas
        if len(padded) != len(counts):
            assert self._global is not None, "a batch is made from a global array"
            counts = [counts[i] for i in self._global[1].local_replica_ids]
        return tuple(c if n == self._rows else c[:n] for c, n in zip(padded, counts))


def components_identical(x: DistributedValues) -> bool:
    """Whether a value built from components (not a program's output) has the same value in
    every component (checked once, on the host): a `Mirrored` built from differing components
    gives replica i component i, as in TensorFlow."""
    known = x._identical
    if known is None:
        comps = x.values
        first = np.asarray(comps[0])  # a distributed value has at least one component
        known = all(c is comps[0] or (np.shape(c) == first.shape and np.array_equal(np.asarray(c), first))
                    for c in comps[1:])
        x._identical = known
    return known


def is_distributed(x: Any) -> bool:
    """A PerReplica or Mirrored value (distributed variables are DistributedValues too, but
    they are state, passed by reference, not values)."""
    return isinstance(x, DistributedValues) and not is_variable(x)


def local_value(x: DistributedValues) -> Any:
    """This replica's value of `x` in the program being traced: its tracer, or, for a value
    built outside the function and captured by closure, its components as constants of the
    program, replica i taking component i (TensorFlow captures values by value, and gives
    replica i component i of a captured `Mirrored` too)."""
    if x.form is Form.TRACED:
        return x._local
    strategy = _context.strategy()
    n = strategy.num_replicas_in_sync
    if strategy._num_local_replicas != n:
        raise DistributionValueError(
            f"a {type(x).__name__} built outside this function was captured by it in a multi-worker job "
            "(this worker holds only its own replicas' components)",
            "pass the distributed value to the function as an argument")
    check_components(x, n)
    comps = [jnp.asarray(c) for c in x.values]
    if n == 1:
        return comps[0]
    return jnp.stack(comps)[collectives.replica_id()]


def regroup(per_replica: Sequence[Any], cls=PerReplica, what: str = "value") -> Any:
    """Turn a list of per-replica pytrees into one pytree of `cls` values (TF's regroup)."""
    treedefs = [jax.tree_util.tree_structure(v) for v in per_replica]
    for i, t in enumerate(treedefs[1:], 1):
        if t != treedefs[0]:
            raise DistributionTypeError(
                f"mismatched pytree structures across replicas: replica 0's {what} is "
                f"{treedefs[0]} but replica {i}'s is {t}",
                "return the same structure (same keys, same nesting) on every replica")
    leaves = [jax.tree_util.tree_leaves(v) for v in per_replica]
    grouped = [cls(tuple(vals)) for vals in zip(*leaves)]
    return jax.tree_util.tree_unflatten(treedefs[0], grouped)


def check_components(value: DistributedValues, num_replicas: int, num_local: int | None = None) -> None:
    """A distributed value given to a strategy must have one component per replica (per local
    replica, `num_local`, in a multi-process job)."""
    if value.form.has_global:
        n = value.layout.num_replicas
        if n == num_replicas:
            return
    n = value._num_components
    expected = num_replicas if num_local is None or num_local == num_replicas else num_local
    if n != expected:
        where = "" if expected == num_replicas else " on this worker"
        raise DistributionValueError(
            f"this {type(value).__name__} has {n} components but the strategy has "
            f"{expected} replicas{where}",
            "build it with one value per replica (strategy.experimental_distribute_values_"
            "from_function does this for you)")
    if value.form.has_components:
        comps = value.held_components()
        structs = [jax.tree_util.tree_structure(c) for c in comps]
        if any(s != structs[0] for s in structs):
            bad = next(i for i, s in enumerate(structs) if s != structs[0])
            raise DistributionTypeError(
                f"mismatched pytree structures across replicas: component 0 is {structs[0]} "
                f"but component {bad} is {structs[bad]}",
                "give every replica a value of the same structure")
        shapes = {(np.shape(c), str(c.dtype if hasattr(c, 'dtype') else np.result_type(c))) for c in comps}
        if jax.tree_util.treedef_is_leaf(structs[0]) and len(shapes) > 1:
            raise _differing_components_error(type(value).__name__, comps, shapes)


def _differing_components_error(kind: str, comps, shapes) -> DistributionValueError:
    """The error for components of different ranks or dtypes, or of a Mirrored value of
    different shapes (a PerReplica's may differ: trace/extents.py pads them), naming the axes."""
    dims = {np.ndim(c) for c in comps}
    if len({d for _, d in shapes}) > 1 or len(dims) > 1:
        return DistributionValueError(
            f"the components of this {kind} differ in rank or dtype: {sorted(map(str, shapes))}",
            "give every replica an array of the same rank and dtype")
    axes = [k for k in range(dims.pop()) if len({np.shape(c)[k] for c in comps}) > 1]
    return DistributionValueError(
        f"the components of this {kind} differ in shape along axis {', '.join(map(str, axes))} "
        f"({[tuple(np.shape(c)) for c in comps]}): a {kind} holds one value on every replica",
        "pass values whose shapes differ across replicas as a PerReplica "
        "(strategy.experimental_distribute_values_from_function)")
