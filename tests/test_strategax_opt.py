"""strategax-opt: the command line (files, stdin, options, diagnostics with a caret, exit
codes), the pass manager's --verify-each/--print-after-all, and the parser's robustness on
1000 malformed inputs."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from typing import ClassVar
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import strategax as sx
from strategax import ir
from strategax.ir import Module
from strategax.passes import PASSES
from strategax.tools import strategax_opt

from passes.sxir_cases import all_cases  # tests/ is on sys.path (rootdir conftest)

REPO = Path(__file__).resolve().parent.parent
GOOD = """module @m attributes {num_replicas = 2} {
  func @main(%x: f32[3] per_replica) -> (f32[3] mirrored) {
    %a = jax.neg %x : f32[3] per_replica loc("train.py":3)
    %b = jax.neg %x : f32[3] per_replica loc("train.py":4)
    %r = sx.all_reduce %a {op = "sum", reason = "r"} : f32[3] mirrored
    return %r
  }
}
"""


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu")
    return subprocess.run([sys.executable, "-m", "strategax.tools.strategax_opt", *args], input=stdin,
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=120)


def test_cli_reads_a_file_and_stdin_and_runs_passes(tmp_path):
    # Intent: `strategax-opt FILE -p cse,dce` and `... -` (stdin) print the optimised IR.
    path = tmp_path / "in.sxir"
    path.write_text(GOOD)
    from_file = run_cli(str(path), "-p", "cse,dce")
    from_stdin = run_cli("-", "-p", "cse,dce", stdin=GOOD)
    assert from_file.returncode == 0 and from_stdin.returncode == 0, from_file.stderr
    assert from_file.stdout == from_stdin.stdout
    assert "%b" not in from_file.stdout and "sx.all_reduce %a" in from_file.stdout


def test_cli_error_points_at_file_line_col_with_caret_and_no_traceback(tmp_path):
    # Intent: a malformed input prints FILE:LINE:COL: message, the line and a caret; exit 1.
    path = tmp_path / "bad.sxir"
    path.write_text(GOOD.replace("jax.neg %x : f32[3] per_replica loc(\"train.py\":4)",
                                 "jax.neg %q : f32[3] per_replica"))
    result = run_cli(str(path), "-p", "cse")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == f"{path}:4:18: use of undefined value %q"
    assert lines[1] == "    %b = jax.neg %q : f32[3] per_replica"
    assert lines[2] == " " * 17 + "^"


def test_cli_unknown_pass_exits_1_without_traceback():
    result = run_cli("-", "-p", "nope", stdin=GOOD)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "unknown pass 'nope'" in result.stderr


@pytest.mark.parametrize("spec, message", [
    ("fuse-collectives{bytes_per_pack=abc}",
     "pass 'fuse-collectives': option 'bytes_per_pack' takes int values, not 'abc'"),
    ("fuse-collectives{bytes_per_pack=1.5}", "option 'bytes_per_pack' takes int values, not '1.5'"),
    ("fuse-collectives{bytes=4}", "pass 'fuse-collectives' has no option 'bytes'; its options: bytes_per_pack"),
    ("cse{anything=1}", "pass 'cse' has no option 'anything'; its options: none"),
])
def test_cli_bad_pass_option_exits_1_naming_it(spec, message):
    # Intent: options are converted to the pass dataclass's declared types when the pipeline is
    # read; a bad one names the pass and the option, with no traceback.
    result = run_cli("-", "-p", spec, stdin=GOOD)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert message in result.stderr, result.stderr


def test_print_after_all_prints_each_stage(capsys):
    args = strategax_opt.build_parser().parse_args(["-p", "cse,dce", "--print-after-all"])
    out = strategax_opt.run(GOOD, args, "<t>", err=sys.stdout)
    printed = capsys.readouterr().out
    assert printed.index("IR after cse") < printed.index("IR after dce")
    assert out.count("jax.neg") == 1


@dataclass(frozen=True)
class BreakIt:
    """A broken pass: it makes the all_reduce use a value defined after it."""

    name: ClassVar[str] = "break-it"
    requires: ClassVar[tuple[str, ...]] = ()

    def apply(self, module: Module) -> bool:
        body = module.main.body
        body.ops.append(body.ops.pop(0))  # move %a's definition after its use
        return True


def test_verify_each_names_the_pass_those_before_it_and_the_bad_op(monkeypatch):
    # Intent: --verify-each stops at the first pass that breaks the module and says which.
    monkeypatch.setitem(PASSES, "break-it", f"{__name__}:BreakIt")
    args = strategax_opt.build_parser().parse_args(["-p", "cse,break-it,dce", "--verify-each"])
    with pytest.raises(ValueError) as info:
        strategax_opt.run(GOOD, args, "in.sxir")
    text = str(info.value)
    # a pass that breaks the module is a strategax bug (sx.InternalError), shown at the op's input line
    assert "internal error in pass 'break-it' (passes before it: cse) at sx.all_reduce" in text, text
    assert "the module it left does not verify" in text and "please report it" in text, text
    assert isinstance(info.value.__cause__, sx.InternalError), repr(info.value.__cause__)
    assert "in.sxir:5:5: " in text  # the op whose operand is now undefined, at its input position
    assert "%r = sx.all_reduce %a" in text and "^^^^" in text


def test_pipeline_options_parse():
    from strategax.passes import parse_pipeline

    passes = parse_pipeline("canonicalize, fuse-collectives{bytes_per_pack=4096},dce")
    assert [p.name for p in passes] == ["canonicalize", "fuse-collectives", "dce"]
    assert passes[1].bytes_per_pack == 4096


# --- robustness: 1000 malformed inputs -----------------------------------------------------
SEEDS = [c.input for c in all_cases() if not c.expect_error] + [GOOD]
_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
BAD_CHARS = "$;?!~`'|&*"
_DEFINES = re.compile(r"\s*(%[\w.]+(, %[\w.]+)* = |var @)")  # a line defining values or a symbol


def _outside_strings(text: str) -> list[int]:
    inside = set()
    for m in _STRING.finditer(text):
        inside.update(range(m.start() + 1, m.end()))
    return [i for i in range(len(text) + 1) if i not in inside]


@st.composite
def malformed(draw) -> str:
    """Valid suite modules broken in ways that are malformed by construction."""
    text = draw(st.sampled_from(SEEDS))
    how = draw(st.sampled_from(["truncate", "bad-char", "duplicate-line", "garbage"]))
    if how == "truncate":  # the module's closing brace is gone
        return text[:draw(st.integers(0, text.rindex("}") - 1))]
    if how == "bad-char":  # a character no token starts with, outside string literals
        at = draw(st.sampled_from(_outside_strings(text)))
        return text[:at] + draw(st.sampled_from(BAD_CHARS)) + text[at:]
    if how == "duplicate-line":  # a value (or symbol) defined twice
        lines = text.splitlines(keepends=True)
        k = draw(st.sampled_from([i for i, line in enumerate(lines) if _DEFINES.match(line)]))
        return "".join(lines[:k + 1] + [lines[k]] + lines[k + 1:])
    return "x" + draw(st.text(max_size=60))  # not a module at all


@settings(max_examples=1000, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(malformed())
def test_malformed_inputs_raise_parse_error_with_caret(text):
    with pytest.raises(ir.ParseError) as info:
        ir.parse(text, "fuzz.sxir")
    e = info.value
    lines = str(e).splitlines()
    assert lines[0].startswith(f"fuzz.sxir:{e.line}:{e.col}: ")
    assert lines[-1] == " " * (e.col - 1) + "^"
    assert 1 <= e.line <= text.count("\n") + 1


# --- the docs' examples stay true ----------------------------------------------------------
_DOC_PAIR = re.compile(r"`strategax-opt ([^`]*)`:\n\n```sxir\n(.*?)```\n\nbecomes\n\n```sxir\n(.*?)```", re.S)


def test_passes_md_examples_are_what_the_passes_do():
    # Intent: every before/after pair in docs/passes.md is what strategax-opt prints today.
    text = (REPO / "docs" / "passes.md").read_text()
    pairs = _DOC_PAIR.findall(text)
    assert len(pairs) >= 9
    for run, before, after in pairs:
        args = strategax_opt.build_parser().parse_args(run.split())
        assert strategax_opt.run(before, args, "doc", err=sys.stderr) == after, run


def test_ir_md_example_round_trips():
    text = (REPO / "docs" / "ir.md").read_text()
    example = re.search(r"## An example\n\n```\n(.*?)```", text, re.S).group(1)
    module = ir.parse(example)
    ir.verify(module)
    assert ir.print_module(module) == example
