"""Memory per device before the first step: the program's inputs split by what they are
(variables, optimizer slots, other arguments), its outputs, XLA's temporaries and the peak,
from XLA's analysis of the compiled program (`compiled.memory_analysis()`)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MemoryStats:
    """Bytes on each device (one replica's device) for one step of a compiled program.

    `variables + optimizer_slots + arguments` is XLA's argument size; `donated` of it (the
    variables, updated in place) is aliased by outputs; `outputs` is what the program allocates
    for its results (XLA's output size less the aliased part, its output tuple included);
    `temporaries` is XLA's scratch; `peak` is XLA's peak estimate for the whole step."""
    variables: int
    optimizer_slots: int
    arguments: int
    outputs: int
    temporaries: int
    peak: int
    donated: int
    generated_code: int = 0

    @property
    def inputs(self) -> int:
        return self.variables + self.optimizer_slots + self.arguments

    def rows(self) -> list[tuple[str, int, str]]:
        """(what, bytes, note) in the order the table prints them."""
        return [("variables", self.variables, "model variables (donated: updated in place)"),
                ("optimizer slots", self.optimizer_slots, "sx.Optimizer's state (donated too)"),
                ("arguments", self.arguments, "the step's other inputs (batches, arrays)"),
                ("outputs", self.outputs, "results, not aliased to inputs"),
                ("XLA temporaries", self.temporaries, "scratch buffers of the compiled program"),
                ("peak", self.peak, "XLA's estimate of the most live at once")]

    def table(self) -> str:
        lines = ["memory per device (one replica), before running:"]
        lines += [f"  {what:<16} {nbytes:>14,} bytes  {note}" for what, nbytes, note in self.rows()]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _bytes_per_device(layout) -> int:
    shape = layout.sharding.shard_shape(layout.global_shape)
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(layout.type.dtype).itemsize


def memory_stats(analysis, in_layouts, variables) -> MemoryStats:
    """Split XLA's `analysis` (CompiledMemoryStats) by the program's inputs: `in_layouts` are the
    program's inputs in order, the last len(variables) of them the variables'."""
    nvars = len(variables)
    sizes = [_bytes_per_device(lay) for lay in in_layouts]
    arg_sizes, var_sizes = sizes[:len(sizes) - nvars], sizes[len(sizes) - nvars:]
    slots = sum(n for v, n in zip(variables, var_sizes) if getattr(v, "_optimizer_state", False))
    alias = int(analysis.alias_size_in_bytes)
    peak = getattr(analysis, "peak_memory_in_bytes", None)
    if peak is None:  # older jaxlib: everything live at once
        peak = (analysis.argument_size_in_bytes + analysis.output_size_in_bytes - alias
                + analysis.temp_size_in_bytes)
    return MemoryStats(variables=sum(var_sizes) - slots, optimizer_slots=slots, arguments=sum(arg_sizes),
                       outputs=int(analysis.output_size_in_bytes) - alias,
                       temporaries=int(analysis.temp_size_in_bytes), peak=int(peak), donated=alias,
                       generated_code=int(analysis.generated_code_size_in_bytes))
