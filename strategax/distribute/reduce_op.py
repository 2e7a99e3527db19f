"""`ReduceOp`: how values from several replicas combine (SUM or MEAN)."""
from __future__ import annotations

import enum

from ..errors import DistributionValueError


class ReduceOp(enum.Enum):
    SUM = "SUM"
    MEAN = "MEAN"

    @classmethod
    def parse(cls, op) -> "ReduceOp":
        """A ReduceOp from a ReduceOp or a string in any case ("sum", "MEAN")."""
        if isinstance(op, cls):
            return op
        if isinstance(op, str) and op.upper() in cls.__members__:
            return cls[op.upper()]
        raise DistributionValueError(f"unknown reduce op {op!r}",
                                     "use sx.ReduceOp.SUM or sx.ReduceOp.MEAN (or 'SUM'/'MEAN')")

    @property
    def ir_name(self) -> str:
        return self.value.lower()
