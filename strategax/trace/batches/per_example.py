"""Per-example values leaving a compiled function, trimmed to each replica's real rows.

One program serves full and partial batches, so a value that carries a padded batch's rows
has no static shape in the program; as an output it needs none: the program returns the
padded rows and the call drops the padded ones afterwards (`PerReplicaBatch`). The
`mask-padding` pass says which outputs carry rows (`per_example_results`); `sources` says
whose rows they are (the padded batch argument, or the batch of one `next(iterator)`), and
`LocalResult` is what `experimental_local_results` hands out for such a value inside the
function: replica *i*'s rows, which the call cuts from the output after the program runs.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import jax

from ...errors import DistributionValueError
from ...ir import Block
from ..distributed_values import PerReplicaBatch, is_distributed
from ..kinds import Kind, LocalOutput, Output, OutputEntry, Source, TakenOutput

BATCH = "batch"  # the rows of the padded batch passed as an argument (Signature.batch)
_USE_FIX = ("return it from the function (strategax keeps replica i's real rows there), or call "
            "experimental_local_results outside the compiled function")


class LocalResult:
    """Replica `replica`'s component of the per-example value `value` inside a compiled function
    (`experimental_local_results`): it has as many rows as that replica got real ones, which the
    program does not know, so it can only be returned, not computed with."""

    def __init__(self, value: Any, replica: int):
        self.value, self.replica = value, replica

    def __jax_array__(self):
        raise DistributionValueError(
            f"replica {self.replica}'s local result of a per-example value used inside a compiled "
            "function: the program serves partial batches too, whose replicas hold different numbers of "
            "real rows, so that result has no static shape (TensorFlow raises for differing shapes too)",
            _USE_FIX)

    def __repr__(self) -> str:
        return f"<local result {self.replica} of a per-example value (padded rows dropped when returned)>"


def sources(body: Block, results: tuple[int, ...], inputs: dict[int, Any]) -> dict[int, Any]:
    """For each result index in `results`, the one source among `inputs` (argument index ->
    source) its value is computed from; None where it reaches several or none."""
    deps: dict[int, frozenset] = {id(body.args[i]): frozenset([s]) for i, s in inputs.items()}
    empty: frozenset = frozenset()
    for op in body.ops:
        used = set(op.operands)
        for region in op.regions:  # values a region reads from outside it count too
            used.update(v for inner in region.walk() for v in inner.operands)
        found = frozenset().union(*(deps.get(id(v), empty) for v in used))
        for r in op.results:
            deps[id(r)] = found
    out = {}
    for i in results:
        found = deps.get(id(body.results[i]), empty)
        out[i] = next(iter(found)) if len(found) == 1 else None
    return out


def trimmed(array: jax.Array, layout, source: Any) -> PerReplicaBatch:
    """A program's per-example output, keeping the real rows of `source`'s batch (a PerReplicaBatch)."""
    return PerReplicaBatch.from_global_batch(array, layout, source.real_counts, source.count_value)


def batch_of(element: Any) -> Any:
    """The padded batch an element taken from an iterator carries (its first leaf), if any."""
    leaves = jax.tree_util.tree_leaves(element, is_leaf=is_distributed)
    return leaves[0] if leaves and isinstance(leaves[0], PerReplicaBatch) else None


def padded_inputs(sig, dynamic: list[int], plan) -> dict[int, Source]:
    """Program argument index -> the padded batch it is a leaf of: BATCH for the padded batch
    argument, the ordinal of the `next(iterator)` (among the plan's single takes) for a taken one."""
    out: dict[int, Source] = {k: BATCH for k, i in enumerate(dynamic)
                           if isinstance(sig.leaves[i], PerReplicaBatch) and i < len(sig.leaves) - 1}
    if plan is None:
        return out
    offset, site = len(dynamic), 0
    for seg in plan.segments:
        types = getattr(seg, "spec", None)
        if types is None:  # a loop: its batches' rows cannot leave it (mask-padding says so)
            offset += len(seg.input_types)
            continue
        if seg.spec.rows is not None:
            out.update((offset + j, site) for j in range(len(seg.spec.types)))
        offset += len(seg.spec.input_types)
        site += 1
    return out


def output_plan(module, plan: list[OutputEntry], padded: dict[int, Source]) -> list[OutputEntry]:
    """`plan` with the per-replica results mask-padding found per-example marked by whose rows
    they keep: PER_EXAMPLE for the padded batch argument's, a TakenOutput for a taken batch's; a
    LocalOutput gets its source (None: not per-example, returned as it is)."""
    per_example = tuple(module.attrs.get("per_example_results", ())) if padded else ()
    found = sources(module.main.body, per_example, padded)
    kinds = set(padded.values())

    def source(index: int) -> Source:
        s = found.get(index)
        if s is None and len(kinds) == 1:
            s = next(iter(kinds))
        if s is None:
            raise DistributionValueError(
                f"result {index} of the function carries the rows of a padded batch, but it is computed "
                "from several batches and strategax cannot tell whose real rows to keep",
                "return per-example values computed from one batch each")
        return s

    out: list[OutputEntry] = []
    for entry in plan:
        if isinstance(entry, LocalOutput):
            out.append(replace(entry, source=source(entry.index) if entry.index in per_example else None))
        elif isinstance(entry, Output) and entry.kind is Kind.PER_REPLICA and entry.index in per_example:
            s = source(entry.index)
            out.append(Output(Kind.PER_EXAMPLE, entry.index) if s == BATCH else TakenOutput(entry.index, s))
        else:
            out.append(entry)
    return out
