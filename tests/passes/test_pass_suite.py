"""The pass suite: every case of every `tests/passes/*.sxir` file runs through strategax-opt's
code path; its output must verify, re-parse to the same text and satisfy the CHECK lines."""
from __future__ import annotations

import io

import pytest

from strategax import ir
from strategax.tools import strategax_opt

from .sxir_cases import Case, all_cases

CASES = all_cases()


def run_case(case: Case) -> str:
    args = strategax_opt.build_parser().parse_args(case.run + ["--verify-each"])
    text = "\n" * case.input_start + case.input  # so diagnostics name the file's own lines
    return strategax_opt.run(text, args, str(case.path.name), err=io.StringIO())


@pytest.mark.parametrize("case", CASES, ids=[f"{c.path.stem}:{c.name}" for c in CASES])
def test_case(case: Case):
    assert case.name and case.intent, f"{case.path}:{case.first_line + 1}: a case needs `// CASE: name: intent`"
    assert case.run, f"{case.path}:{case.first_line + 1}: a case needs `// RUN: -p ...`"
    if case.expect_error:
        with pytest.raises((ValueError, TypeError, RuntimeError)) as info:
            run_case(case)
        for want in case.expect_error:
            assert want in str(info.value), f"expected error containing {want!r}, got:\n{info.value}"
        return
    out = run_case(case)
    assert ir.print_module(ir.parse(out)) == out
    check_output(case, out)


def check_output(case: Case, out: str) -> None:
    """FileCheck's rules: each CHECK matches a line after the previous match; a CHECK-NOT must
    not occur between the matches of the CHECKs around it (before the first, after the last)."""
    lines = out.splitlines()
    at, pending = 0, []
    for kind, want in case.checks:
        if kind == "CHECK-NOT":
            pending.append(want)
            continue
        for j in range(at, len(lines)):
            if want in lines[j]:
                break
        else:
            raise AssertionError(f"CHECK {want!r} not found (after output line {at}) in:\n{out}")
        for bad in pending:
            assert not any(bad in line for line in lines[at:j]), f"CHECK-NOT {bad!r} found before {want!r} in:\n{out}"
        at, pending = j + 1, []
    for bad in pending:
        assert not any(bad in line for line in lines[at:]), f"CHECK-NOT {bad!r} found in:\n{out}"


@pytest.mark.parametrize("case", CASES, ids=[f"{c.path.stem}:{c.name}" for c in CASES])
def test_input_round_trips_unchanged(case: Case):
    # Intent: strategax-opt with no passes prints every suite input unchanged; an input that
    # does not even parse and verify must belong to a negative (EXPECT-ERROR) case.
    args = strategax_opt.build_parser().parse_args([])
    try:
        out = strategax_opt.run(case.input, args, "<case>")
    except (ValueError, TypeError) as e:
        assert case.expect_error, f"input does not parse/verify:\n{e}"
        return
    assert out == case.input
