"""The pass suite: every case of every `tests/passes/*.sxir` file runs through strategax-opt's
code path; its output must verify, re-parse to the same text and pass the case's FileCheck
lines (the `filecheck` package: LLVM FileCheck's rules); a negative case must fail with the
error type and message it names."""
from __future__ import annotations

import io

import pytest
from filecheck.finput import FInput
from filecheck.matcher import Matcher
from filecheck.options import Options
from filecheck.parser import Parser, pattern_for_opts

from strategax import ir
from strategax.tools import strategax_opt

from .sxir_cases import Case, all_cases

CASES = all_cases()


def run_case(case: Case) -> str:
    args = strategax_opt.build_parser().parse_args(case.run + ["--verify-each"])
    text = "\n" * case.input_start + case.input  # so diagnostics name the file's own lines
    return strategax_opt.run(text, args, str(case.path.name), err=io.StringIO())


def filecheck(output: str, case: Case) -> tuple[int, str]:
    """Run the case's check lines over `output`: (exit code, FileCheck's report)."""
    opts = Options(match_filename=str(case.path), input_file="<strategax-opt output>",
                   comment_prefixes="COM,RUN,CASE")
    checks = Parser(opts, io.StringIO(case.check_text()), *pattern_for_opts(opts))
    matcher = Matcher(opts, FInput(opts.input_file, FInput.canonicalize_line_ends(output)), checks)
    matcher.stderr = io.StringIO()
    return matcher.run(), matcher.stderr.getvalue()


def error_type(e: BaseException) -> str:
    """The failing error's type (strategax-opt wraps verifier errors to point at the input)."""
    if isinstance(e, strategax_opt.Diagnostic) and e.__cause__ is not None:
        e = e.__cause__
    return type(e).__name__


@pytest.mark.parametrize("case", CASES, ids=[f"{c.path.stem}:{c.name}" for c in CASES])
def test_case(case: Case):
    where = f"{case.path}:{case.first_line + 1}"
    assert case.name and case.intent, f"{where}: a case needs `// CASE: name: intent`"
    assert case.run, f"{where}: a case needs `// RUN: -p ...`"
    assert bool(case.expect_error) != bool(case.check_lines), \
        f"{where}: a case has CHECK lines or one EXPECT-ERROR, not both or neither"
    if case.expect_error:
        kind, want = case.expect_error
        with pytest.raises((ValueError, TypeError, RuntimeError)) as info:
            run_case(case)
        assert error_type(info.value) == kind, f"expected a {kind}, got a {error_type(info.value)}: {info.value}"
        assert want in str(info.value), f"expected error containing {want!r}, got:\n{info.value}"
        return
    out = run_case(case)
    assert ir.print_module(ir.parse(out)) == out
    code, report = filecheck(out, case)
    assert code == 0, f"FileCheck failed:\n{report}\noutput:\n{out}"


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


def test_filecheck_rules_are_enforced():
    # Intent: the checker itself fails where FileCheck would: a CHECK-NEXT that is not on the
    # next line, a capture used with another value, a CHECK-NOT between its neighbours.
    out = "%a = jax.neg %x\n%b = jax.neg %a\nreturn %b\n"

    def run(*checks: str) -> int:
        case = Case(HERE_PATH, 0, check_lines=dict(enumerate(checks)))
        return filecheck(out, case)[0]

    assert run("// CHECK: %[[A:.*]] = jax.neg %x", "// CHECK-NEXT: jax.neg %[[A]]") == 0
    assert run("// CHECK: %a = jax.neg", "// CHECK-NEXT: return") != 0
    assert run("// CHECK: %[[A:.*]] = jax.neg %x", "// CHECK-NEXT: jax.neg %[[A]]", "// CHECK-SAME: %x") != 0
    assert run("// CHECK: %a", "// CHECK-NOT: jax.neg", "// CHECK: return") != 0
    assert run("// CHECK-LABEL: %b", "// CHECK-NEXT: return %b") == 0


HERE_PATH = CASES[0].path
