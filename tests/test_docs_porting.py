"""Every strategax block of docs/porting.md runs and prints what the page says it prints.

The page's TensorFlow blocks are shown, not run here (tools/tf_record/porting_tf.py checks
them against real TensorFlow). Blocks are found by the convention in tests/docblocks.py. The
parameter-server blocks (`ps-*`) run in tests/test_ps_tutorial.py, on the session's Ray cluster.
"""
from pathlib import Path

import pytest

from docblocks import extract, normalise, run_block

PAGE = Path(__file__).resolve().parent.parent / "docs" / "porting.md"
BLOCKS = extract(PAGE)
SETUP = [b for b in BLOCKS if b.side == "sx" and b.name is None]
RUNNABLE = [b for b in BLOCKS if b.side == "sx" and b.name is not None]
# §7's parameter-server blocks start Ray actors: tests/test_ps_tutorial.py runs them on the session's Ray
PARAMETER_SERVER = [b for b in RUNNABLE if b.name.startswith("ps-")]
LOCAL = [b for b in RUNNABLE if b not in PARAMETER_SERVER]


def test_page_has_blocks():
    # Intent: the convention is in use (a typo in the markers would silently test nothing).
    assert SETUP and len(RUNNABLE) >= 20
    assert PAGE.read_text().count("```python") == len(BLOCKS), "a python block without a marker"
    assert all(b.expected is not None for b in RUNNABLE if "print(" in b.code)


@pytest.mark.parametrize("block", LOCAL, ids=[b.name for b in LOCAL])
def test_block_prints_what_the_page_shows(block):
    # Intent: a reader who runs the block sees exactly the ```text block under it.
    assert normalise(run_block(block, SETUP, PAGE)) == normalise(block.expected or "")
