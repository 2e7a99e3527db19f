"""`VariableSynchronization` and `VariableAggregation`, as in TensorFlow."""
from __future__ import annotations

import enum


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


def parse_sync(value) -> VariableSynchronization:
    if isinstance(value, str):
        return VariableSynchronization[value.upper()]
    return VariableSynchronization(value) if not isinstance(value, VariableSynchronization) else value


def parse_aggregation(value) -> VariableAggregation:
    if isinstance(value, str):
        return VariableAggregation[value.upper()]
    if value is None:
        return VariableAggregation.NONE
    if not isinstance(value, VariableAggregation):
        name = getattr(value, "name", None)  # a ReduceOp
        if name in VariableAggregation.__members__:
            return VariableAggregation[name]
        raise ValueError(f"unknown aggregation {value!r}")
    return value
