"""The one owner of thread-local state: the stack of strategy contexts (which strategy is
current, replica or cross-replica), how deep strategax traces are nested, the variable
session of the trace in progress, and the padded batch it traces. `tracing(...)` pushes
everything a trace needs at once; the public context functions live in `distribute.context`.
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from ._markers import is_default_strategy


@dataclass
class Entry:
    """One level of the context stack."""

    strategy: Any
    replica_context: Any = None  # a ReplicaContext, or None in cross-replica context
    in_merge: bool = False  # inside merge_call's merge_fn
    is_global: bool = False  # set by experimental_set_strategy, not by a `with` block


class _State(threading.local):
    def __init__(self):
        self.stack: list[Entry] = []
        self.depth = 0  # strategax traces in progress
        self.sessions: list[Any] = []  # the variable session of each trace in progress
        self.batches: list[tuple[Any, int | None]] = []  # (real row count, padded rows) per trace
        self.inputs: list[Any] = []  # the input iterators of each trace in progress (trace.batches.takes)
        self.extents: list[bool] = []  # per trace: whether it takes values padded to one shape


_state = _State()
_default_factory: Callable[[], Any] | None = None
_scope_hooks: list[Callable[[Any], None]] = []


# --- the strategy stack ------------------------------------------------------------------
def current() -> Entry | None:
    """The innermost context entry, or None outside every scope."""
    return _state.stack[-1] if _state.stack else None


@contextlib.contextmanager
def push(strategy, replica_context=None, in_merge: bool = False) -> Iterator[None]:
    """Enter `strategy`'s replica context (given one) or its cross-replica context."""
    _state.stack.append(Entry(strategy, replica_context, in_merge))
    try:
        yield
    finally:
        _state.stack.pop()


def enter(strategy) -> None:
    """Enter `strategy`'s cross-replica context until `leave` (a `scope()` object's entry)."""
    _state.stack.append(Entry(strategy))
    for hook in _scope_hooks:
        hook(strategy)


def add_scope_hook(hook: Callable[[Any], None]) -> None:
    """Call `hook(strategy)` whenever a strategy's scope is entered (`strategax.keras` installs
    its Keras adapter there once Keras is imported, so importing strategax never imports Keras)."""
    if hook not in _scope_hooks:
        _scope_hooks.append(hook)


def leave(strategy) -> None:
    """Leave the context `enter` entered (the innermost one, which must be `strategy`'s)."""
    if _state.stack and _state.stack[-1].strategy is strategy and _state.stack[-1].replica_context is None:
        _state.stack.pop()


def set_global(strategy) -> bool:
    """Make `strategy` current below every scope (None: drop it); False inside a scope."""
    while _state.stack and _state.stack[0].is_global:
        _state.stack.pop(0)
    if strategy is None:
        return True
    if _state.stack:
        return False
    _state.stack.insert(0, Entry(strategy, is_global=True))
    for hook in _scope_hooks:
        hook(strategy)
    return True


def set_default_strategy_factory(factory: Callable[[], Any]) -> None:
    """Who makes the default strategy (`distribute.default_strategy` registers itself)."""
    global _default_factory
    _default_factory = factory


def strategy() -> Any:
    """The current strategy: the innermost entry's, else the default one."""
    entry = current()
    if entry is not None:
        return entry.strategy
    assert _default_factory is not None, "importing strategax.distribute registers the default strategy"
    return _default_factory()


def has_strategy() -> bool:
    """True inside any non-default strategy's scope or replica function."""
    entry = current()
    return entry is not None and not is_default_strategy(entry.strategy)


def in_replica_context() -> bool:
    entry = current()
    return entry is not None and entry.replica_context is not None


# --- traces ------------------------------------------------------------------------------
@contextlib.contextmanager
def tracing(strategy, session, batch: tuple[Any, int | None] = (None, None), inputs=None,
            extents: bool = False) -> Iterator[None]:
    """While a strategax program is traced: `strategy` in cross-replica context, the trace's
    variable `session`, its padded batch (this replica's real row count, padded rows), the
    input iterators it may take batches from, and whether it takes per-replica values whose
    shapes differ (`extents`: padded to one shape)."""
    _state.stack.append(Entry(strategy))
    _state.depth += 1
    _state.sessions.append(session)
    _state.batches.append(batch)
    _state.inputs.append(inputs)
    _state.extents.append(extents)
    try:
        yield
    finally:
        _state.extents.pop()
        _state.inputs.pop()
        _state.batches.pop()
        _state.sessions.pop()
        _state.depth -= 1
        _state.stack.pop()


def is_tracing() -> bool:
    """Whether a strategax program is being traced (so `run` inlines rather than compiles)."""
    return _state.depth > 0


def session() -> Any:
    """The variable session of the innermost trace, or None."""
    return _state.sessions[-1] if _state.sessions else None


def has_extents() -> bool:
    """Whether the innermost trace takes per-replica values padded to one shape."""
    return bool(_state.extents and _state.extents[-1])


def batch() -> tuple[Any, int | None]:
    """(real row count, padded rows) of the batch being traced, or (None, None)."""
    return _state.batches[-1] if _state.batches else (None, None)


def set_batch(batch: tuple[Any, int | None]) -> None:
    """The innermost trace's batch is now `batch` (a batch just taken from an iterator)."""
    _state.batches[-1] = batch


def inputs() -> Any:
    """The input iterators of the innermost trace (`trace.batches.TraceInputs`), or None."""
    return _state.inputs[-1] if _state.inputs else None
