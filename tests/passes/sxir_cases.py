"""Reads the pass suite's `.sxir` files: cases separated by `// -----`, each with
`// CASE: name: intent`, `// RUN: <strategax-opt arguments>`, the input module, then either
FileCheck lines (`// CHECK:`, `CHECK-NEXT`, `CHECK-SAME`, `CHECK-LABEL`, `CHECK-NOT`,
`CHECK-DAG`, captures `%[[X:.*]]` and uses `%[[X]]`: LLVM FileCheck's rules, run by the
`filecheck` package on strategax-opt's output) or `// EXPECT-ERROR: ErrorType: text` (running
fails with an error of that type whose message contains the text)."""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).parent
_DIRECTIVE = re.compile(r"//\s*(CASE|RUN|EXPECT-ERROR):\s?(.*)$")
_CHECK = re.compile(r"//\s*CHECK(-[A-Z]+)?:")
_EXPECTED = re.compile(r"([A-Za-z_][A-Za-z0-9_]*):\s?(.*)$")


@dataclass
class Case:
    path: Path
    first_line: int  # 0-based line of the case's first line in the file
    name: str = ""
    intent: str = ""
    run: list[str] = field(default_factory=list)
    input_lines: list[str] = field(default_factory=list)
    input_start: int = 0  # 0-based file line where the module text starts
    check_lines: dict[int, str] = field(default_factory=dict)  # 0-based file line -> its text
    expect_error: tuple[str, str] | None = None  # (error type name, message text)

    @property
    def input(self) -> str:
        return "\n".join(self.input_lines) + "\n"

    def check_text(self) -> str:
        """The case's FileCheck lines at their own line numbers (so failures name the file's lines)."""
        last = max(self.check_lines, default=-1)
        return "\n".join(self.check_lines.get(i, "") for i in range(last + 1)) + "\n"


def read_cases(path: Path) -> list[Case]:
    lines = path.read_text(encoding="utf-8").splitlines()
    cases, current = [], Case(path, 0)
    for i, line in enumerate(lines):
        text = line.strip()
        if text == "// -----":
            cases.append(current)
            current = Case(path, i + 1)
            continue
        m = _DIRECTIVE.match(text)
        if m:
            kind, arg = m.groups()
            if kind == "CASE":
                name, _, intent = arg.partition(":")
                current.name, current.intent = name.strip(), intent.strip()
            elif kind == "RUN":
                current.run = shlex.split(arg)
            else:
                expected = _EXPECTED.match(arg.rstrip())
                current.expect_error = (expected.group(1), expected.group(2)) if expected else ("?", arg)
        elif _CHECK.match(text):
            current.check_lines[i] = text
        elif text.startswith("//"):
            continue
        elif text or current.input_lines:
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
