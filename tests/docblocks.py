"""Extract the runnable code blocks of a Markdown page and the output each one promises.

Convention (docs/porting.md): an HTML comment on the line before a ```python fence names the
block and its side, `<!-- sx: NAME -->` (strategax, run by the tests) or `<!-- tf: NAME -->`
(TensorFlow, shown only; tools/tf_record/porting_tf.py runs it where TensorFlow is installed).
`<!-- sx setup -->` / `<!-- tf setup -->` blocks run before every block of their side. The
first ```text fence after a block, before the next ```python fence, is what the block prints
(no ```text fence: it prints nothing).
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import re
from pathlib import Path

_MARKER = re.compile(r"^<!--\s*(sx|tf)(?:\s+setup|:\s*([\w-]+))\s*-->\s*$")
_FENCE = re.compile(r"^```(\w*)\s*$")


@dataclasses.dataclass(frozen=True)
class Block:
    """One runnable block: its side (sx/tf), name (None for setup), code, expected output."""

    side: str
    name: str | None
    code: str
    first_line: int  # 1-based line of the code's first line in the page
    expected: str | None  # None when no ```text block follows

    @property
    def last_line(self) -> int:
        return self.first_line + self.code.count("\n")


def _fences(lines: list[str]):
    """(kind, start index of the fence line, body lines) for each fenced block."""
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m:
            j = i + 1
            while j < len(lines) and lines[j].rstrip() != "```":
                j += 1
            yield m.group(1), i, lines[i + 1:j]
            i = j + 1
        else:
            i += 1


def extract(path: Path) -> list[Block]:
    """All marked blocks of the page, in page order."""
    lines = Path(path).read_text().splitlines()
    fences = list(_fences(lines))
    blocks = []
    for k, (kind, start, body) in enumerate(fences):
        if kind != "python" or start == 0:
            continue
        m = _MARKER.match(lines[start - 1].strip())
        if not m:
            continue
        expected = None
        for kind2, _, body2 in fences[k + 1:]:
            if kind2 == "python":
                break
            if kind2 == "text":
                expected = "\n".join(body2)
                break
        blocks.append(Block(m.group(1), m.group(2), "\n".join(body) + "\n", start + 2, expected))
    names = [(b.side, b.name) for b in blocks if b.name]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"{path}: block names used twice on one side: {sorted(dup)}")
    return blocks


def padded(block: Block) -> str:
    """The block's code preceded by blank lines, so tracebacks name the page's line numbers."""
    return "\n" * (block.first_line - 1) + block.code


def normalise(text: str) -> str:
    """Whitespace-insensitive form: lines stripped on the right, blank edges dropped, runs of
    spaces inside a line collapsed."""
    lines = [re.sub(r"[ \t]+", " ", line.rstrip()) for line in text.strip("\n").splitlines()]
    return "\n".join(lines).strip()


def run_block(block: Block, setup: list[Block], page: Path) -> str:
    """Run the page's setup blocks and then `block` in a fresh namespace; return its stdout,
    with error locations in the page rewritten to `<page name>:<line>` once checked."""
    namespace = {"__name__": "__porting__"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for b in [*setup, block]:
            exec(compile(padded(b), str(page), "exec"), namespace)
    text = out.getvalue()
    location = rf"[^\s:]*{re.escape(page.name)}:(\d+)"  # the page's path, absolute or relative, and a line
    for line in re.findall(location, text):
        assert block.first_line <= int(line) <= block.last_line, (
            f"an error names line {line} of the page, outside block {block.name}")
    return re.sub(location, f"{page.name}:<line>", text)
