"""Every strategax block of docs/porting.md runs and prints what the page says it prints.

The page's TensorFlow blocks are shown, not run here (tools/tf_record/porting_tf.py checks
them against real TensorFlow). Blocks are found by the convention in tests/docblocks.py.
"""
import contextlib
import io
import re
from pathlib import Path

import pytest

from docblocks import extract, normalise, padded

PAGE = Path(__file__).resolve().parent.parent / "docs" / "porting.md"
BLOCKS = extract(PAGE)
SETUP = [b for b in BLOCKS if b.side == "sx" and b.name is None]
RUNNABLE = [b for b in BLOCKS if b.side == "sx" and b.name is not None]


def run_block(block) -> str:
    """Run the page's setup blocks and then `block` in a fresh namespace; return its stdout,
    with error locations in the page rewritten to `porting.md:<line>` once checked."""
    namespace = {"__name__": "__porting__"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for b in [*SETUP, block]:
            exec(compile(padded(b), str(PAGE), "exec"), namespace)
    text = out.getvalue()
    location = r"[^\s:]*porting\.md:(\d+)"  # the page's path, absolute or relative, and a line
    for line in re.findall(location, text):
        assert block.first_line <= int(line) <= block.last_line, (
            f"an error names line {line} of the page, outside block {block.name}")
    return re.sub(location, "porting.md:<line>", text)


def test_page_has_blocks():
    # Intent: the convention is in use (a typo in the markers would silently test nothing).
    assert SETUP and len(RUNNABLE) >= 20
    assert PAGE.read_text().count("```python") == len(BLOCKS), "a python block without a marker"
    assert all(b.expected is not None for b in RUNNABLE if "print(" in b.code)


@pytest.mark.parametrize("block", RUNNABLE, ids=[b.name for b in RUNNABLE])
def test_block_prints_what_the_page_shows(block):
    # Intent: a reader who runs the block sees exactly the ```text block under it.
    assert normalise(run_block(block)) == normalise(block.expected or "")
