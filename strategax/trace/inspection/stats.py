"""What `f.stats(...)` returns: the module's collectives (`ir.analysis.CollectiveStats`) and the
compiled program's memory per device, computed on first use (it needs XLA's compilation)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from ...ir.analysis import CollectiveStats
from .memory import MemoryStats


@dataclass
class StepStats(CollectiveStats):
    """Collectives per step (`count`, `bytes_per_replica`, `collectives`, `table()`) and
    `memory` (a `MemoryStats`: variables, optimizer slots, arguments, outputs, temporaries, peak)."""
    memory_of: Callable[[], MemoryStats] | None = field(default=None, repr=False, compare=False)

    @cached_property
    def memory(self) -> MemoryStats:
        if self.memory_of is None:
            raise ValueError("these statistics were built without a compiled program")
        return self.memory_of()

    def __str__(self) -> str:
        return self.table() + "\n" + self.memory.table()
