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
    check_lines(out, case.checks)


def check_lines(out: str, checks) -> None:
    """FileCheck's rules, by substring: each CHECK matches a later line, in order; a CHECK-NOT
    holds for the lines between the previous CHECK's match and the next one's (or the end)."""
    lines = out.splitlines()
    at, pending = 0, []

    def assert_absent(upto: int) -> None:
        for want in pending:
            hit = next((ln for ln in lines[at:upto] if want in ln), None)
            assert hit is None, f"CHECK-NOT {want!r} found in line {hit!r} of:\n{out}"
        pending.clear()

    for kind, want in checks:
        if kind == "CHECK-NOT":
            pending.append(want)
            continue
        j = next((j for j in range(at, len(lines)) if want in lines[j]), None)
        if j is None:
            raise AssertionError(f"CHECK {want!r} not found (after output line {at}) in:\n{out}")
        assert_absent(j)
        at = j + 1
    assert_absent(len(lines))


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
