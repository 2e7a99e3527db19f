"""Reads the pass suite's `.sxir` files: cases separated by `// -----`, each with
`// CASE: name: intent`, `// RUN: <strategax-opt arguments>`, the input module, then
`// CHECK: s` (in order, each on a later output line), `// CHECK-NOT: s` (nowhere in the
output) or `// EXPECT-ERROR: s` (running fails with a message containing s)."""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).parent
_DIRECTIVE = re.compile(r"//\s*(CASE|RUN|CHECK|CHECK-NOT|EXPECT-ERROR):\s?(.*)$")


@dataclass
class Case:
    path: Path
    first_line: int  # 0-based line of the case's first line in the file
    name: str = ""
    intent: str = ""
    run: list[str] = field(default_factory=list)
    input_lines: list[str] = field(default_factory=list)
    input_start: int = 0  # 0-based file line where the module text starts
    checks: list[tuple[str, str]] = field(default_factory=list)  # (kind, text)

    @property
    def input(self) -> str:
        return "\n".join(self.input_lines) + "\n"

    @property
    def expect_error(self) -> list[str]:
        return [t for k, t in self.checks if k == "EXPECT-ERROR"]


def read_cases(path: Path) -> list[Case]:
    lines = path.read_text(encoding="utf-8").splitlines()
    cases, current = [], Case(path, 0)
    for i, line in enumerate(lines):
        if line.strip() == "// -----":
            cases.append(current)
            current = Case(path, i + 1)
            continue
        m = _DIRECTIVE.match(line.strip())
        if m:
            kind, text = m.groups()
            if kind == "CASE":
                current.name, _, current.intent = text.partition(":")
                current.name, current.intent = current.name.strip(), current.intent.strip()
            elif kind == "RUN":
                current.run = shlex.split(text)
            else:
                current.checks.append((kind, text.rstrip()))
        elif line.strip().startswith("//"):
            continue
        elif line.strip() or current.input_lines:
            if not current.input_lines:
                current.input_start = i
            current.input_lines.append(line)
    cases.append(current)
    for c in cases:
        while c.input_lines and not c.input_lines[-1].strip():
            c.input_lines.pop()
    return [c for c in cases if c.input_lines or c.name]


def all_cases() -> list[Case]:
    return [c for path in sorted(HERE.glob("*.sxir")) for c in read_cases(path)]
