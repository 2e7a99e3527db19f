"""Read back what `backends/metadata.py` wrote into the compiled HLO: per instruction, the IR
op it came from and the user's file:line (XLA's text keeps source locations in tables of
file names, locations and stack frames at the top of the module)."""
from __future__ import annotations

import re
from dataclasses import dataclass

_ENTRY = re.compile(r'^(\d+) (.*)$')
_FIELDS = re.compile(r'(\w+)=(\d+)')
_INSTRUCTION = re.compile(r'^\s*(?:ROOT )?%([\w.\-]+) = .*?(?<=[\]})] )([a-z][\w\-]*)\(')  # name, opcode
_OP_NAME = re.compile(r'op_name="((?:[^"\\]|\\.)*)"')
_FRAME = re.compile(r'stack_frame_id=(\d+)')
_SOURCE = re.compile(r'source_file="((?:[^"\\]|\\.)*)" source_line=(\d+)')
_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")


@dataclass(frozen=True)
class OpMetadata:
    """One HLO instruction's metadata: XLA's op_name, the IR op it was lowered from (`sx.all_reduce
    (reason)`, "" for XLA's own instructions) and the user's file and line (None when unknown)."""
    op_name: str
    ir_op: str
    file: str | None
    line: int | None
    opcode: str = ""  # XLA's: all-reduce, fusion, dot, ...

    @property
    def ir_kind(self) -> str:
        """The IR op's name without its reason: `sx.all_reduce`."""
        return self.ir_op.split(" (", 1)[0]


def ir_op_of(op_name: str) -> str:
    """The innermost IR op in an op_name (`jit(f)/shard_map/sx.all_reduce (why)/psum`)."""
    for part in reversed(op_name.split("/")):
        if part.startswith(("sx.", "jax.")):
            return part
    return ""


def _tables(text: str) -> dict[str, dict[int, str]]:
    tables: dict[str, dict[int, str]] = {name: {} for name in _TABLES}
    current = None
    for line in text.splitlines():
        if line in _TABLES:
            current = tables[line]
        elif not line.strip() or line.startswith(("%", "ENTRY", "HloModule")):
            current = None
        elif current is not None and (m := _ENTRY.match(line)):
            current[int(m.group(1))] = m.group(2)
    return tables


def hlo_metadata(text: str) -> dict[str, OpMetadata]:
    """Each named instruction of compiled HLO text -> its metadata."""
    tables = _tables(text)
    files = {k: v.strip('"') for k, v in tables["FileNames"].items()}
    locations = {k: {f: int(n) for f, n in _FIELDS.findall(v)} for k, v in tables["FileLocations"].items()}
    frames = {k: {f: int(n) for f, n in _FIELDS.findall(v)} for k, v in tables["StackFrames"].items()}
    out = {}
    for line in text.splitlines():
        m = _INSTRUCTION.match(line)
        if not m:
            continue
        meta = line.partition("metadata={")[2]  # XLA's own rewrites may leave an instruction none
        named = _OP_NAME.search(meta)
        op_name = named.group(1).replace('\\"', '"') if named else ""
        file = lineno = None
        if (src := _SOURCE.search(meta)) is not None:
            file, lineno = src.group(1), int(src.group(2))
        elif (fr := _FRAME.search(meta)) is not None:
            loc = locations.get(frames.get(int(fr.group(1)), {}).get("file_location_id", -1))
            if loc is not None:
                file, lineno = files.get(loc.get("file_name_id", -1)), loc.get("line")
        out[m.group(1)] = OpMetadata(op_name, ir_op_of(op_name), file, lineno, m.group(2))
    return out
