"""What an object is, for the layers below the one that defines it: `trace/` takes variables
and distributed inputs as arguments, `_context` asks whether a strategy is the default one.
Each such class derives from its marker here, and code asks through these functions (one
`isinstance` each), never by probing for an attribute."""
from __future__ import annotations

from typing import Any


class VariableMarker:
    """Base of every strategax variable (`variables/`): state, passed by reference."""

    __slots__ = ()


class DistributedIteratorMarker:
    """Base of `iter(distributed_dataset)` (`input/`): a call's `next()` is a program input."""

    __slots__ = ()


class DistributedDatasetMarker:
    """Base of a distributed dataset (`input/`): `iter()` inside a function makes inputs."""

    __slots__ = ()


class DefaultStrategyMarker:
    """Base of the default (no-op, one-replica) strategy (`distribute/`)."""

    __slots__ = ()


def is_variable(x: Any) -> bool:
    """A strategax variable (a Variable, a distributed or sharded one)."""
    return isinstance(x, VariableMarker)


def is_distributed_iterator(x: Any) -> bool:
    return isinstance(x, DistributedIteratorMarker)


def is_distributed_dataset(x: Any) -> bool:
    return isinstance(x, DistributedDatasetMarker)


def is_distributed_input(x: Any) -> bool:
    """A distributed dataset or an iterator of one."""
    return isinstance(x, (DistributedIteratorMarker, DistributedDatasetMarker))


def is_default_strategy(x: Any) -> bool:
    return isinstance(x, DefaultStrategyMarker)
