"""`sx.Variable`, and what it becomes inside `strategy.scope()`: `MirroredVariable` (ON_WRITE,
AUTO) or `SyncOnReadVariable` (ON_READ).

A variable owns one global buffer (see `var_buffers`). Outside a trace its methods act on the
buffer directly (cross-replica context). While a strategax program is traced they bind the
`sx.var_*` primitives (`dialects.variables`); the `insert-collectives` and `check-locality` passes then
apply TensorFlow's aggregation rules, so the compiled program does the communication.
"""
from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
from jax import core as jax_core

from .. import _context
from .._markers import VariableMarker
from ..dialects import collectives
from ..dialects import variables as var_ops
from ..errors import DistributionRuntimeError, DistributionTypeError, DistributionValueError, check_type
from ..ir import Locality, TensorType
from ..trace.distributed_values import DistributedValues, PerReplica, is_distributed
from . import buffers
from .enums import VariableAggregation, VariableSynchronization, parse_aggregation, parse_sync


def _context_name() -> str:
    return "replica" if _context.in_replica_context() else "cross_replica"


def _traced() -> bool:
    """Whether reads and updates become ops of a program being traced."""
    return _context.is_tracing() and _context.session() is not None


def _dtype(dtype):
    if dtype is None:
        return None
    try:
        return jnp.dtype(getattr(dtype, "as_numpy_dtype", dtype))
    except TypeError:
        raise DistributionTypeError(f"dtype {dtype!r:.40} is not a data type",
                                    "pass a NumPy/JAX dtype such as jnp.float32 or 'float32'") from None


def _initial_array(initial_value, dtype) -> jax.Array:
    dtype = _dtype(dtype)
    if callable(initial_value) and not isinstance(initial_value, Variable):
        initial_value = initial_value()
    value = initial_value.read_value() if isinstance(initial_value, Variable) else initial_value
    _check_numeric(value, "a variable's initial value")
    with jax.ensure_compile_time_eval():
        array = jnp.asarray(value, dtype=dtype)
    if isinstance(array, jax_core.Tracer):
        raise DistributionValueError(
            "a variable's initial value depends on a traced value",
            "create variables from concrete values, outside the compiled function (or on its first call)")
    return array


def _check_numeric(value, what: str) -> None:
    """`value` is an array, a number or a (nested) list of numbers: something with a numeric dtype."""
    leaves = jax.tree_util.tree_leaves(value)
    ok = value is not None and leaves and all(
        isinstance(x, (int, float, complex, bool, np.generic)) or hasattr(x, "dtype") for x in leaves)
    if ok:
        dtypes = [np.dtype(getattr(x, "dtype", type(x))) for x in leaves if hasattr(x, "dtype")]
        ok = all(d.kind in "biufc" for d in dtypes)
    if not ok:
        raise DistributionTypeError(f"{what} must be an array or a number, not {type(value).__name__} {value!r:.60}",
                                    "pass a number, a (nested) list of numbers, or an array")


class Variable(VariableMarker):
    """A mutable tensor; distributed when created in a strategy's scope (like tf.Variable)."""

    _local = _global = None  # never a traced or program-output distributed value
    _optimizer_state = False  # an optimizer's slot or counter: f.stats().memory counts it as such
    _strategax_key_by_identity = True  # read at run time: an eager run's function may capture it (fn_key)

    def __new__(cls, *args, **kwargs):
        kind: type[Variable] = cls
        if cls is Variable:
            strategy = _context.strategy() if _context.has_strategy() else None
            if strategy is not None:
                # a strategy may make something else (ParameterServerStrategy: a ShardedVariable)
                made = getattr(strategy, "_make_variable", lambda a, k: None)(args, kwargs)
                if made is not None:
                    return made
                sync = parse_sync(kwargs.get("synchronization", VariableSynchronization.AUTO))
                kind = SyncOnReadVariable if sync is VariableSynchronization.ON_READ else MirroredVariable
        return object.__new__(kind)

    def __reduce_ex__(self, protocol):
        """A variable stored elsewhere pickles as its storage says (a parameter server's variable
        becomes a worker's copy of it); others pickle as usual."""
        reduced = self._store.reduce_variable() if "_store" in self.__dict__ else None
        return reduced if reduced is not None else super().__reduce_ex__(protocol)

    def __init__(self, initial_value, trainable: bool | None = None, name: str | None = None,
                 dtype=None, synchronization=VariableSynchronization.AUTO,
                 aggregation=VariableAggregation.NONE):
        if "_store" in self.__dict__:  # made whole by its strategy's _make_variable
            return
        if _context.in_replica_context() and _context.has_strategy():
            raise DistributionRuntimeError(
                "a variable was created in replica context (inside the function given to strategy.run)",
                "create variables in `with strategy.scope():` outside run (or in a merge_call)")
        self._strategy = _context.strategy() if _context.has_strategy() else None
        if self._strategy is None and isinstance(self, _DistributedVariable):  # it would have no replicas
            raise DistributionRuntimeError(
                f"sx.{type(self).__name__} was created outside a strategy's scope",
                "create sx.Variable(...) in `with strategy.scope():`, where it becomes a mirrored or "
                "sync-on-read variable (outside any scope it is a plain single-device variable)")
        check_type(name, str, "a variable's name", "pass a string name, e.g. name='kernel'", allow_none=True)
        check_type(trainable, bool, "trainable", "pass trainable=True or False", allow_none=True)
        self._sync = parse_sync(synchronization)
        self._aggregation = parse_aggregation(aggregation)
        self._trainable = (self._sync is not VariableSynchronization.ON_READ) if trainable is None else trainable
        self._name = name or "Variable"  # TensorFlow's default (IR symbols are made unique)
        array = _initial_array(initial_value, dtype)
        self._shape, self._dtype = tuple(array.shape), array.dtype
        if self._strategy is not None and self._aggregation is VariableAggregation.MEAN \
                and not jnp.issubdtype(self._dtype, jnp.floating):
            raise DistributionValueError(
                f"a distributed variable with aggregation=MEAN and the non-floating dtype "
                f"{np.dtype(self._dtype).name} (TensorFlow 2.21 raises too: a mean would be truncated)",
                "use a float dtype, or aggregation=SUM or ONLY_FIRST_REPLICA")
        self._store = self._make_store(array)
        self._symbol = var_ops.new_symbol(self)  # its name in IR modules

    def _make_store(self, array):
        make = getattr(self._strategy, "_var_buffer", None)  # a strategy may store variables its way
        return make(self, array) if make is not None else buffers.VarBuffer(self, array)

    # --- description -------------------------------------------------------------------
    name = property(lambda self: self._name)
    shape = property(lambda self: self._shape)
    dtype = property(lambda self: self._dtype)
    ndim = property(lambda self: len(self._shape))
    trainable = property(lambda self: self._trainable)
    aggregation = property(lambda self: self._aggregation)

    @property
    def synchronization(self) -> VariableSynchronization:
        if self._sync is VariableSynchronization.AUTO:
            return VariableSynchronization.ON_WRITE
        return self._sync

    @property
    def _per_replica(self) -> bool:
        return False

    @property
    def _sync_name(self) -> str:
        return "on_read" if self._per_replica else "on_write"

    def _ir_type(self) -> TensorType:
        return TensorType(self._shape, jnp.dtype(self._dtype),
                          Locality.PER_REPLICA if self._per_replica else Locality.MIRRORED)

    def _ir_attrs(self) -> dict:
        return {"sync": self._sync_name, "agg": self._aggregation.ir_name}

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} name={self._name!r} shape={self._shape} "
                f"dtype={np.dtype(self._dtype).name}, numpy={np.asarray(self.read_value())!r}>")

    # --- reads ------------------------------------------------------------------------
    def read_value(self):
        """The value: this replica's copy in replica context, the aggregate in cross-replica."""
        if _traced():
            ctx = _context_name()
            self._check_read(ctx)
            return var_ops.read(self, ctx)
        return self._store.eager_read()

    value = read_value

    def _check_read(self, ctx: str) -> None:
        pass

    def numpy(self) -> np.ndarray:
        return np.asarray(self.read_value())

    def __jax_array__(self):
        return self.read_value()

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.read_value(), dtype=dtype)

    @property
    def values(self) -> tuple:
        """One component per replica, each knowing its container (`value_container`)."""
        return tuple(VariableComponent(c, self) for c in self._store.components())

    # --- updates -----------------------------------------------------------------------
    def assign(self, value, use_locking=False, name=None, read_value=True):
        return self._update("assign", value)

    def assign_add(self, delta, use_locking=False, name=None, read_value=True):
        return self._update("assign_add", delta)

    def assign_sub(self, delta, use_locking=False, name=None, read_value=True):
        return self._update("assign_sub", delta)

    def _coerce(self, value, kind: str):
        if isinstance(value, PerReplica):
            raise DistributionValueError(
                f"{kind} of a PerReplica value to variable {self._name!r} in cross-replica context "
                "(TensorFlow would give copy i component i, so the copies would differ)",
                "reduce the value first (strategy.reduce / extended.reduce_to), or update the "
                "variable inside strategy.run")
        if is_distributed(value):
            value = value.tracer if value.tracer is not None else value.values[0]
        if isinstance(value, Variable):
            value = value.read_value()
        return self._checked_value(value, kind)

    def _checked_value(self, value, kind: str):
        """`value` as this variable's dtype, checked as TensorFlow checks `assign`: the same shape
        (no broadcasting), and no float-to-integer truncation."""
        _check_numeric(value, f"the value given to {kind}")
        target = np.dtype(self._dtype)
        source = getattr(value, "dtype", None)
        if source is None:  # a Python value: TensorFlow converts it to the variable's dtype
            if target.kind in "iub" and any(isinstance(x, float) and not float(x).is_integer()
                                            for x in jax.tree_util.tree_leaves(value)):
                raise DistributionTypeError(
                    f"{kind} of {value!r} to {target.name} variable {self._name!r} would truncate it "
                    "(TensorFlow: cannot convert to the variable's dtype)",
                    "pass an integer value, or create the variable with a float dtype")
            array = jnp.asarray(value, target)
        else:
            source = np.dtype(source)
            if source != target and (target.kind in "iub" and source.kind in "fc"
                                     or target.kind == "f" and source.kind == "c"):
                raise DistributionTypeError(
                    f"{kind} of a {source.name} value to {target.name} variable {self._name!r} would "
                    "drop its fraction (TensorFlow raises on a dtype mismatch)",
                    f"cast the value yourself (e.g. jnp.round(x).astype('{target.name}')), or create the "
                    "variable with the value's dtype")
            array = jnp.asarray(value).astype(target) if source != target else jnp.asarray(value)
        if tuple(array.shape) != tuple(self._shape):
            raise DistributionValueError(
                f"{kind} of a value of shape {tuple(array.shape)} to variable {self._name!r} of shape "
                f"{tuple(self._shape)} (TensorFlow: shapes are incompatible; there is no broadcasting)",
                f"give a value of shape {tuple(self._shape)} (e.g. jnp.full({tuple(self._shape)}, x))")
        return array

    def _update(self, kind: str, value):
        ctx = _context_name()
        self._check_update(kind, ctx)
        if ctx == "replica" and is_distributed(value):
            value = value.tracer  # a distributed value seen inside the replica function
        value = self._coerce(value, kind)
        value = self._cross_replica_value(kind, value) if ctx == "cross_replica" else value
        if _traced():
            var_ops.update(self, kind, value, ctx)
            self._store.traced_update(kind, value, ctx)  # a worker's copy records its updates
            return self.read_value()
        self._store.eager_update(kind, value)
        return self.read_value()

    def _check_update(self, kind: str, ctx: str) -> None:
        pass

    def _cross_replica_value(self, kind: str, value):
        return value

    # --- arithmetic: act on the value ---------------------------------------------------
    def __getitem__(self, index):
        return jnp.asarray(self.read_value())[index]

    def __neg__(self):
        return -jnp.asarray(self.read_value())

    def __float__(self):
        return float(self.read_value())

    def __int__(self):
        return int(self.read_value())

    def __bool__(self):
        return bool(self.read_value())

    __hash__ = object.__hash__


def _binary(name: str):
    def method(self, other):
        if isinstance(other, Variable):
            other = other.read_value()
        return getattr(jnp.asarray(self.read_value()), name)(other)
    method.__name__ = name
    return method


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
              "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pow__",
              "__rpow__", "__matmul__", "__rmatmul__", "__lt__", "__le__", "__gt__", "__ge__"):
    setattr(Variable, _name, _binary(_name))


def _component_repr(var: Variable, i: int, value) -> str:
    array = np.asarray(value)
    shown = repr(array.item()) if array.ndim == 0 else repr(array)
    name = var.name if i == 0 else f"{var.name}/replica_{i}"
    return (f"<sx.Variable '{name}:0' shape={tuple(array.shape)} dtype={array.dtype.name}, "
            f"numpy={shown}>")


class _DistributedVariable(Variable, DistributedValues):
    def __repr__(self) -> str:
        body = ",\n".join(f"  {i}: {_component_repr(self, i, c)}" for i, c in enumerate(self._store.components()))
        return f"{self._kind}:{{\n{body}\n}}"


class MirroredVariable(_DistributedVariable):
    """A variable kept identical on every replica (ON_WRITE): updates in replica context are
    aggregated with its `aggregation` (NONE: only a value identical on every replica)."""

    _kind = "MirroredVariable"


class SyncOnReadVariable(_DistributedVariable):
    """A variable each replica reads and writes locally (ON_READ); reading it in cross-replica
    context aggregates the copies with its `aggregation`."""

    _kind = "SyncOnReadVariable"

    @property
    def _per_replica(self) -> bool:
        return True

    def _check_read(self, ctx: str) -> None:
        if ctx == "cross_replica" and self._aggregation is VariableAggregation.NONE:
            raise DistributionValueError(
                f"sync-on-read variable {self._name!r} has aggregation NONE and cannot be read in "
                "cross-replica context (there is no rule to combine its copies)",
                "give it aggregation=SUM, MEAN or ONLY_FIRST_REPLICA, or read it inside strategy.run")

    def _check_update(self, kind: str, ctx: str) -> None:
        if ctx != "cross_replica":
            return
        if self._aggregation is VariableAggregation.NONE:
            raise DistributionValueError(
                f"{kind} on sync-on-read variable {self._name!r} with aggregation NONE in "
                "cross-replica context", "give it an aggregation, or update it inside strategy.run")
        if kind != "assign" and self._aggregation is VariableAggregation.SUM:
            raise DistributionValueError(
                f"SyncOnReadVariable does not support `{kind}` in cross-replica context when "
                f"aggregation is SUM (variable {self._name!r})",
                "use assign(...) (the value is divided among the replicas), or update it inside "
                "strategy.run")

    def _cross_replica_value(self, kind: str, value):
        if kind == "assign" and self._aggregation is VariableAggregation.SUM:
            # the copies the value is divided among (a parameter server keeps one)
            assert self._strategy is not None, "a sync-on-read variable is made in a strategy's scope"
            n = self._store.num_copies or self._strategy.num_replicas_in_sync
            if not jnp.issubdtype(self._dtype, jnp.integer):
                return (value / n).astype(self._dtype)
            # an integer total divided exactly: every copy gets value // n, replica 0 the remainder
            # as well, so the copies still sum to the value (TensorFlow's copies sum to less)
            share = value // n
            first = value - share * (n - 1)
            if _traced():
                return jnp.where(collectives.replica_id() == 0, first, share)
            return buffers.PerCopy(share, first)
        return value

    def read_value(self):
        if not _traced() and _context_name() == "cross_replica":
            self._check_read("cross_replica")
        return super().read_value()


class VariableComponent:
    """One replica's copy of a distributed variable (an element of `var.values`)."""

    def __init__(self, array, container: Variable):
        self._array, self._container = array, container

    shape = property(lambda self: self._array.shape)
    dtype = property(lambda self: self._array.dtype)
    device = property(lambda self: next(iter(self._array.devices())))

    def numpy(self) -> np.ndarray:
        return np.asarray(self._array)

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self._array, dtype=dtype)

    def __jax_array__(self):
        return self._array

    def __float__(self):
        return float(self._array)

    def __eq__(self, other):
        return np.asarray(self._array) == np.asarray(other)

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"<VariableComponent of {self._container.name!r}: {np.asarray(self._array)!r}>"

