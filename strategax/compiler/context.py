"""Which strategy is current and whether code runs in replica or cross-replica context.

A thread-local stack, as in TensorFlow: `strategy.scope()` pushes a cross-replica entry,
`strategy.run` pushes a replica entry while the replica function is traced.
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any

from .errors import DistributionRuntimeError, DistributionValueError


@dataclass
class _Entry:
    strategy: Any
    replica_context: Any  # a ReplicaContext, or None in cross-replica context
    in_merge: bool = False


class _State(threading.local):
    def __init__(self):
        self.stack: list[_Entry] = []
        self.tracing = 0  # depth of strategax traces in progress


_state = _State()


def current() -> _Entry | None:
    return _state.stack[-1] if _state.stack else None


@contextlib.contextmanager
def push(strategy, replica_context=None, in_merge: bool = False):
    _state.stack.append(_Entry(strategy, replica_context, in_merge))
    try:
        yield
    finally:
        _state.stack.pop()


@contextlib.contextmanager
def tracing():
    """Marks that a strategax program is being traced (so `run` inlines rather than compiles)."""
    _state.tracing += 1
    try:
        yield
    finally:
        _state.tracing -= 1


def is_tracing() -> bool:
    return _state.tracing > 0


def get_strategy():
    """The current strategy: the one whose scope or replica function we are in, else the default."""
    entry = current()
    if entry is not None:
        return entry.strategy
    from .default_strategy import default_strategy

    return default_strategy()


def has_strategy() -> bool:
    """True inside any non-default strategy's scope or replica function."""
    from .default_strategy import DefaultStrategy

    entry = current()
    return entry is not None and not isinstance(entry.strategy, DefaultStrategy)


def get_replica_context():
    """The ReplicaContext inside `run`, the default one outside any scope, None in cross-replica context."""
    entry = current()
    if entry is None:
        return get_strategy()._default_replica_context()
    return entry.replica_context


def in_cross_replica_context() -> bool:
    entry = current()
    return entry is not None and entry.replica_context is None


def get_cross_replica_context():
    """The current strategy in cross-replica context, else None."""
    entry = current()
    if entry is None:
        return get_strategy()
    return entry.strategy if entry.replica_context is None else None


def require_cross_replica(api: str) -> None:
    entry = current()
    if entry is not None and entry.replica_context is not None:
        raise DistributionRuntimeError(
            f"`{api}` was called in replica context (inside the function given to strategy.run)",
            f"call `{api}` outside `strategy.run`, on the values `run` returns; inside the replica "
            "function use `sx.get_replica_context().all_reduce(...)`")


def experimental_set_strategy(strategy) -> None:
    """Make `strategy` current for the rest of this thread (None resets to the default)."""
    while _state.stack and getattr(_state.stack[0], "_global", False):
        _state.stack.pop(0)
    if strategy is not None:
        if _state.stack:
            raise DistributionValueError("experimental_set_strategy called inside a strategy scope",
                                         "call it at the top level, outside any `with scope()`")
        entry = _Entry(strategy, None)
        entry._global = True
        _state.stack.insert(0, entry)
