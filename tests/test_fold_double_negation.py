"""fold-double-negation, the example pass of docs/passes.md ("Adding a pass"): the pass runs and
changes no number (compiled and interpreted, against NumPy), the page's code is this repository's
code, and the page's default pipeline is DEFAULT_PIPELINE."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

import strategax as sx
from strategax.passes import DEFAULT_PIPELINE, PassManager, get_pass

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "passes.md"

TEXT = """module @m attributes {num_replicas = 2} {
  func @main(%x: f32[3] per_replica) -> (f32[3] per_replica) {
    %a = jax.neg %x : f32[3] per_replica
    %b = jax.neg %a : f32[3] per_replica
    %c = jax.mul %b, %b : f32[3] per_replica
    return %c
  }
}
"""


def test_folded_program_computes_what_numpy_does():
    # Intent: after the pass no neg is left (with dce) and the program still computes x * x,
    # compiled for two replicas and in the reference interpreter, against NumPy.
    module = sx.ir.parse(TEXT)
    PassManager([get_pass("fold-double-negation"), get_pass("dce")], verify_each=True).run(module)
    assert "jax.neg" not in sx.ir.print_module(module)
    x = np.array([1.5, -2.0, 3.0, 0.5, -1.0, 4.0], np.float32)  # two replicas' f32[3]
    mesh = sx.MirroredStrategy(["CPU:0", "CPU:1"])._mesh
    (got,) = sx.backends.Executable(module, mesh)(x)
    np.testing.assert_array_equal(np.asarray(got), x * x)
    (per_replica,) = sx.backends.run_reference(module, np.split(x, 2), num_replicas=2)
    np.testing.assert_array_equal(np.concatenate(per_replica), x * x)


def _block_after(marker: str) -> str:
    """The fenced block right after `<!-- marker -->` on the page."""
    m = re.search(rf"<!-- {re.escape(marker)} -->\n```\w*\n(.*?)```", PAGE.read_text(), re.S)
    assert m, f"docs/passes.md has no block marked {marker!r}"
    return m.group(1)


def test_the_page_shows_the_repository_code():
    # Intent: the pass and the test the page tells a reader to copy are the files that run here.
    assert _block_after("file: strategax/passes/examples/fold_double_negation.py") == \
        (REPO / "strategax/passes/examples/fold_double_negation.py").read_text()
    assert _block_after("excerpt: tests/test_fold_double_negation.py") in Path(__file__).read_text()


def test_the_page_lists_the_default_pipeline():
    # Intent: the pipeline docs/passes.md shows is the one the compiler runs.
    m = re.search(r"## The default pipeline\n\n```\n(.*?)```", PAGE.read_text(), re.S)
    assert m, "docs/passes.md has no default pipeline block"
    assert tuple(p.strip() for p in m.group(1).split(",")) == DEFAULT_PIPELINE
