"""The default strategy: what is current outside any scope. One replica, no communication."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp

from .. import _context
from .._markers import DefaultStrategyMarker
from ..dialects import collectives
from .reduce_op import ReduceOp
from .replica_context import DefaultReplicaContext
from .strategy import Strategy


class DefaultStrategy(Strategy, DefaultStrategyMarker):
    """A single-replica no-op strategy on the default device; `run` just calls `fn`."""

    def __init__(self):
        super().__init__([jax.devices()[0]])

    def run(self, fn: Callable, args: Sequence = (), kwargs: dict | None = None, options=None):
        with _context.push(self, DefaultReplicaContext(self)):
            return fn(*args, **(kwargs or {}))

    def reduce(self, reduce_op, value: Any, axis: int | None = None):
        op = ReduceOp.parse(reduce_op)
        collectives.check_axis_type(axis, "strategy.reduce", allow_none=True)
        if axis is None:
            return value
        reducer = jnp.mean if op is ReduceOp.MEAN else jnp.sum
        return jax.tree_util.tree_map(
            lambda x: reducer(x, axis=collectives.check_axis(axis, jnp.ndim(x), "strategy.reduce")), value)

    def gather(self, value: Any, axis: int):
        collectives.check_axis_type(axis, "strategy.gather")
        jax.tree_util.tree_map(lambda x: collectives.check_axis(axis, jnp.ndim(x), "strategy.gather"), value)
        return value

    def experimental_local_results(self, value: Any) -> tuple:
        return (value,)

    def scope(self) -> "_DefaultScope":
        return _DefaultScope(self)


class _DefaultScope:
    """The default strategy's scope: changes nothing, may be entered any number of times."""

    def __init__(self, strategy):
        self._strategy = strategy

    def __enter__(self):
        return self._strategy

    def __exit__(self, *exc) -> None:
        return None


_DEFAULT: DefaultStrategy | None = None


def default_strategy() -> DefaultStrategy:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = DefaultStrategy()
    return _DEFAULT


_context.set_default_strategy_factory(default_strategy)
