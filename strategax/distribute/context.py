"""Which strategy is current and whether code runs in replica or cross-replica context, as
in TensorFlow: `strategy.scope()` enters cross-replica context, `strategy.run` replica
context while the replica function is traced. The state itself lives in `strategax._context`.
"""
from __future__ import annotations

from .. import _context
from ..errors import DistributionRuntimeError, DistributionTypeError, DistributionValueError


def get_strategy():
    """The current strategy: the one whose scope or replica function we are in, else the default."""
    return _context.strategy()


def has_strategy() -> bool:
    """True inside any non-default strategy's scope or replica function."""
    return _context.has_strategy()


def get_replica_context():
    """The ReplicaContext inside `run`, the default one outside any scope, None in cross-replica context."""
    entry = _context.current()
    if entry is None:
        return get_strategy()._default_replica_context()
    return entry.replica_context


def in_cross_replica_context() -> bool:
    entry = _context.current()
    return entry is not None and entry.replica_context is None


def get_cross_replica_context():
    """The current strategy in cross-replica context, else None (also outside every scope, as
    in TensorFlow: the default strategy is in its replica context there)."""
    entry = _context.current()
    if entry is None:
        return None
    return entry.strategy if entry.replica_context is None else None


def require_cross_replica(api: str) -> None:
    if _context.in_replica_context():
        raise DistributionRuntimeError(
            f"`{api}` was called in replica context (inside the function given to strategy.run)",
            f"call `{api}` outside `strategy.run`, on the values `run` returns; inside the replica "
            "function use `sx.get_replica_context().all_reduce(...)`")


def experimental_set_strategy(strategy) -> None:
    """Make `strategy` current for the rest of this thread (None resets to the default)."""
    if strategy is not None and not hasattr(strategy, "num_replicas_in_sync"):
        raise DistributionTypeError(
            f"experimental_set_strategy takes a strategy or None, not {type(strategy).__name__} {strategy!r:.40}",
            "pass a strategy (e.g. sx.MirroredStrategy()), or None to go back to the default")
    if not _context.set_global(strategy):
        raise DistributionValueError("experimental_set_strategy called inside a strategy scope",
                                     "call it at the top level, outside any `with scope()`")
