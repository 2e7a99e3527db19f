"""Step 6 of mask-padding: how the entry function's results are trimmed after the program runs
(`per_example_results`, `padded_results`)."""
from __future__ import annotations

from ...ir import Func, Value
from ..rewrite import BlockRewriter
from .gaps import Gaps, PaddedResult
from .rows import Rows


def trims(func: Func, rows: Rows, batch_counts: set[Value], home: dict, gaps: Gaps,
          producer: dict) -> tuple[tuple[int, ...], tuple[PaddedResult, ...]]:
    """(per_example_results, padded_results) of `func`; appends the counts that are not
    arguments to its results."""
    body = func.body
    args = {a: i for i, a in enumerate(body.args)}
    per_example: list[int] = []
    padded: list[PaddedResult] = []
    out: dict[Value, int] = {}
    for i, v in enumerate(list(body.results)):
        axes = rows.axes(v)
        if axes == [0] and rows.of(v, 0) in batch_counts and rows.of(v, 0) in args:
            per_example.append(i)  # also in `padded`: a result that is not per-replica is cut by it
        for axis in axes:
            count = rows.of(v, axis)
            assert count is not None  # `axes` are the axes that have one
            if count in args:
                padded.append(PaddedResult(i, axis, "arg", args[count]))
            elif home.get(count) is body:
                if count not in out:
                    out[count] = BlockRewriter(body).add_result(count)
                padded.append(PaddedResult(i, axis, "out", out[count]))
            else:
                gaps.add(producer.get(v) or producer.get(count), f"a result ({v.type}) carries padded entries along "
                         f"axis {axis} whose real count is made inside a loop or branch, so they cannot be trimmed",
                         "return values whose padded axis comes from the function's inputs")
    return tuple(per_example), tuple(padded)
