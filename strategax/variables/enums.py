"""`VariableSynchronization` and `VariableAggregation`, as in TensorFlow."""
from __future__ import annotations

import enum

from ..errors import DistributionTypeError, DistributionValueError


class VariableSynchronization(enum.Enum):
    """When a distributed variable's copies are made identical."""
    AUTO = 0
    NONE = 1
    ON_WRITE = 2
    ON_READ = 3


class VariableAggregation(enum.Enum):
    """How replicas' updates (ON_WRITE) or copies (ON_READ) are combined."""
    NONE = 0
    SUM = 1
    MEAN = 2
    ONLY_FIRST_REPLICA = 3

    @property
    def ir_name(self) -> str:
        return self.name.lower()


def _parse(enum_cls, value, what: str):
    """An `enum_cls` member from a member, its name (any case) or its int value."""
    if isinstance(value, enum_cls):
        return value
    names = ", ".join(f"sx.{enum_cls.__name__}.{m}" for m in enum_cls.__members__)
    if isinstance(value, str):
        if value.upper() in enum_cls.__members__:
            return enum_cls[value.upper()]
        raise DistributionValueError(f"unknown {what} {value!r}", f"use one of {names}")
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return enum_cls(value)
        except ValueError:
            raise DistributionValueError(f"unknown {what} {value!r}", f"use one of {names}") from None
    name = getattr(value, "name", None)  # TensorFlow's enum, or a ReduceOp for an aggregation
    if isinstance(name, str) and name in enum_cls.__members__:
        return enum_cls[name]
    raise DistributionTypeError(f"{what} must be a {enum_cls.__name__}, not {type(value).__name__} {value!r}",
                                f"use one of {names}")


def parse_sync(value) -> VariableSynchronization:
    """A VariableSynchronization from a member, a name ("on_read") or TensorFlow's enum."""
    return _parse(VariableSynchronization, value, "synchronization")


def parse_aggregation(value) -> VariableAggregation:
    """A VariableAggregation from a member, a name ("sum"), None (NONE) or a ReduceOp."""
    if value is None:
        return VariableAggregation.NONE
    return _parse(VariableAggregation, value, "aggregation")
