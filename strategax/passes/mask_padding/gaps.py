"""What mask-padding records for the runtime: the gaps (places it cannot follow the rows, which
a call bringing padded rows raises for) and how results are trimmed after a run."""
from __future__ import annotations

from typing import NamedTuple

from ...errors import DistributionValueError
from ...ir import Module, Operation

REASON = "padded rows"
FIX = ("mask the padded rows yourself before it, e.g. `x = jnp.where(sx.nn.batch_mask(x)[:, None], "
       "x, 0)` (sx.nn.batch_mask(x) is True on this replica's real rows), or keep the row axis "
       "first and use row-wise operations")

GAPS = "padding_gaps"  # module attribute: the Gap entries, as plain tuples
# when a gap raises: a call with any padded row, or only one whose real counts differ across replicas
PADDED, UNEVEN = "padded", "uneven"
PADDED_RESULTS = "padded_results"  # module attribute: the PaddedResult entries, as plain tuples


class Gap(NamedTuple):
    """A place the analysis cannot follow the rows: the user's line, what happens there, the fix,
    and when a call raises for it (PADDED: any padded row; UNEVEN: real counts that differ)."""

    file: str
    line: int
    message: str
    fix: str
    when: str


class PaddedResult(NamedTuple):
    """Result `result` of the entry function is padded along `axis`; its real extent is argument
    `index` (`source` "arg") or the function's result `index` (`source` "out")."""

    result: int
    axis: int
    source: str
    index: int


def padding_gaps(module: Module) -> tuple[Gap, ...]:
    """The module's `padding_gaps` (after the pass, or read back from IR text)."""
    return tuple(Gap(*g) for g in module.attrs.get(GAPS, ()))


def padded_results(module: Module) -> tuple[PaddedResult, ...]:
    """The module's `padded_results` (after the pass, or read back from IR text)."""
    return tuple(PaddedResult(*p) for p in module.attrs.get(PADDED_RESULTS, ()))


def _where(op: Operation | None) -> tuple[str, int]:
    return (op.loc.file, op.loc.line) if op is not None and op.loc is not None else ("<unknown>", 0)


class Gaps(list[Gap]):
    """The places the analysis cannot follow the rows, as `padding_gaps` entries."""

    def add(self, op: Operation | None, message: str, fix: str = FIX, when: str = PADDED) -> None:
        entry = Gap(*_where(op), message, fix, when)
        if entry not in self:
            self.append(entry)


def gaps_raised(gaps: tuple[Gap, ...], padded: bool, uneven: bool) -> tuple[Gap, ...]:
    """The gaps a call meets: those of any padding where it brings padded rows, the others only
    where its real counts differ across replicas."""
    return tuple(g for g in gaps if uneven or (padded and g.when == PADDED))


def padding_gap_error(gaps: tuple[Gap, ...], extents: bool = False) -> DistributionValueError:
    """The error a call with a partial batch (`extents`: with values whose shapes differ across
    replicas) raises for the `padding_gaps` it meets."""
    file, line, message, fix, _ = gaps[0]
    more = f" (and {len(gaps) - 1} more place(s) the analysis cannot follow)" if len(gaps) > 1 else ""
    if extents:
        return DistributionValueError(
            f"this call's per-replica values differ in shape across replicas (each is padded to the largest "
            f"extent), and {message}{more}; padded entries would count", fix + "; or give every replica "
            "values of one shape", location=(file, line))
    return DistributionValueError(
        f"this call's batch is partial (some replicas hold padded rows), and {message}{more}; "
        "full batches run, a partial one would let padded rows count", fix + "; or drop the partial "
        "batch: `dataset.batch(n, drop_remainder=True)`", location=(file, line))
