"""`ShardedVariable`: one variable stored as shards split along axis 0 (TensorFlow's
`tf.distribute.experimental.partitioners` under ParameterServerStrategy). Reading it
concatenates the shards; an update is split by rows and applied to each shard; a checkpoint
stores the whole value, so it restores into any other sharding, or into an unsharded variable."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._markers import VariableMarker, is_variable
from ..errors import DistributionTypeError, DistributionValueError


def shard_rows(rows: int, num_shards: int) -> list[int]:
    """TensorFlow's split of `rows` into `num_shards`: the first `rows % num_shards` shards one longer."""
    base, extra = divmod(rows, num_shards)
    return [base + (1 if i < extra else 0) for i in range(num_shards)]


class _WholeValue:
    """What a checkpoint asks a variable's storage for: the whole value."""

    def __init__(self, sharded: "ShardedVariable"):
        self._sharded = sharded

    def global_value(self):
        return self._sharded.read_value()


class ShardedVariable(VariableMarker):
    """A variable made of `variables` (its shards), concatenated along axis 0."""

    _strategax_key_by_identity = True
    _local = _global = None

    def __init__(self, variables: list, name: str = "ShardedVariable"):
        if not variables or not all(is_variable(v) for v in variables):
            raise DistributionTypeError("ShardedVariable takes a non-empty list of variables",
                                        "pass the shards: ShardedVariable([v0, v1, ...])")
        first = variables[0]
        if any(v.ndim == 0 or v.shape[1:] != first.shape[1:] or v.dtype != first.dtype for v in variables):
            raise DistributionValueError(
                "the shards of a ShardedVariable must have one dtype and the same shape after axis 0, "
                f"got {[(tuple(v.shape), np.dtype(v.dtype).name) for v in variables]}",
                "shard a variable along its first axis only")
        self._variables = list(variables)
        self._rows = [v.shape[0] for v in variables]
        self._name = name
        self._store = _WholeValue(self)

    # --- description ------------------------------------------------------------------------
    variables = property(lambda self: list(self._variables))
    name = property(lambda self: self._name)
    dtype = property(lambda self: self._variables[0].dtype)
    shape = property(lambda self: (sum(self._rows), *self._variables[0].shape[1:]))
    ndim = property(lambda self: self._variables[0].ndim)
    trainable = property(lambda self: self._variables[0].trainable)
    aggregation = property(lambda self: self._variables[0].aggregation)
    synchronization = property(lambda self: self._variables[0].synchronization)
    _strategy = property(lambda self: self._variables[0]._strategy)

    def __repr__(self) -> str:
        return (f"<ShardedVariable name={self._name!r} shape={self.shape} dtype={np.dtype(self.dtype).name} "
                f"shards={[tuple(v.shape) for v in self._variables]}>")

    def _check_read(self, ctx: str) -> None:
        for v in self._variables:
            v._check_read(ctx)

    # --- reads --------------------------------------------------------------------------------
    def read_value(self):
        return jnp.concatenate([jnp.asarray(v.read_value()) for v in self._variables], axis=0)

    value = read_value

    def numpy(self) -> np.ndarray:
        return np.asarray(self.read_value())

    def __jax_array__(self):
        return self.read_value()

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.read_value(), dtype=dtype)

    def __getitem__(self, index):
        return self.read_value()[index]

    # --- updates: split by rows ----------------------------------------------------------------
    def split(self, value) -> list:
        """`value` (of this variable's shape) cut into the shards' pieces."""
        value = value.read_value() if is_variable(value) else value
        value = jnp.asarray(value)
        if tuple(value.shape) != tuple(self.shape):
            raise DistributionValueError(
                f"a value of shape {tuple(value.shape)} for sharded variable {self._name!r} of shape "
                f"{tuple(self.shape)}", f"give a value of shape {tuple(self.shape)}")
        offsets = np.cumsum([0] + self._rows)
        return [jax.lax.slice_in_dim(value, int(a), int(b), axis=0) for a, b in zip(offsets[:-1], offsets[1:])]

    def _update(self, kind: str, value):
        for v, piece in zip(self._variables, self.split(value)):
            getattr(v, kind)(piece)
        return self.read_value()

    def assign(self, value, use_locking=False, name=None, read_value=True):
        return self._update("assign", value)

    def assign_add(self, delta, use_locking=False, name=None, read_value=True):
        return self._update("assign_add", delta)

    def assign_sub(self, delta, use_locking=False, name=None, read_value=True):
        return self._update("assign_sub", delta)

    __hash__ = object.__hash__


def _binary(name: str):
    def method(self, other):
        return getattr(self.read_value(), name)(other)
    method.__name__ = name
    return method


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
              "__rtruediv__", "__matmul__", "__rmatmul__", "__neg__"):
    setattr(ShardedVariable, _name, _binary(_name) if _name != "__neg__" else lambda self: -self.read_value())
