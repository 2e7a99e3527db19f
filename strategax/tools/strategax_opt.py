"""`strategax-opt [FILE|-] -p PASS[,PASS...]`: run passes over textual IR and print the result.

Errors print `FILE:LINE:COL: message`, the input line and a caret, and exit 1 without a
traceback. Options: `pass{opt=value}`, `-p default` (the default pipeline), `--print-after-all`,
`--verify-each`.
"""
from __future__ import annotations

import argparse
import sys
from typing import Sequence, TextIO

from ..ir import ParseError, parse, print_module, verify
from ..passes import PassManager, parse_pipeline

ERRORS = (ValueError, TypeError, RuntimeError)


# a constant, not __doc__: `python -OO` strips docstrings
DESCRIPTION = "run passes over textual IR and print the result"

def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="strategax-opt", description=DESCRIPTION)
    ap.add_argument("file", nargs="?", default="-", help="IR text to read ('-' or absent: stdin)")
    ap.add_argument("-p", "--passes", default="", help="comma-separated passes, e.g. cse,dce or default")
    ap.add_argument("--print-after-all", action="store_true", help="print the IR after every pass")
    ap.add_argument("--verify-each", action="store_true", help="verify the IR after every pass")
    ap.add_argument("-o", "--output", default="-", help="where to write the result ('-': stdout)")
    return ap


def diagnostic(text: str, filename: str, pos: int, message: str) -> str:
    """`FILE:LINE:COL: message`, then the line and a caret under the column."""
    return ParseError(message, text, pos, filename).format()


def run(text: str, args: argparse.Namespace, filename: str, err: TextIO = sys.stderr) -> str:
    """Parse, run the passes, verify, and return the printed result (errors propagate)."""
    positions: dict[int, int] = {}
    module = parse(text, filename, positions)
    verify_error_at(text, filename, positions, lambda: verify(module))
    pm = PassManager(parse_pipeline(args.passes), verify_each=args.verify_each,
                     print_after_all=args.print_after_all, printer=lambda s: print(s, file=err))
    module = verify_error_at(text, filename, positions, lambda: pm.run(module))
    verify(module)
    return print_module(module)


class Diagnostic(ValueError):
    """An error located in the input text (its message is the formatted diagnostic)."""


def verify_error_at(text: str, filename: str, positions: dict[int, int], thunk):
    """Run thunk; an error naming an op of the input is re-raised pointing at that op's text."""
    try:
        return thunk()
    except ERRORS as e:
        op = getattr(e, "op", None)
        if op is not None and id(op) in positions:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise Diagnostic(diagnostic(text, filename, positions[id(op)], first) + "\n" + str(e)) from e
        raise


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    filename = "<stdin>" if args.file == "-" else args.file
    try:
        if args.file == "-":
            text = sys.stdin.read()
        else:
            with open(args.file, encoding="utf-8") as f:
                text = f.read()
        out = run(text, args, filename)
    except OSError as e:
        print(f"strategax-opt: error: {e}", file=sys.stderr)
        return 1
    except ParseError as e:
        print(e.format(), file=sys.stderr)
        return 1
    except ERRORS as e:
        message = str(e) if isinstance(e, Diagnostic) else f"{filename}: error: {e}"
        print(message, file=sys.stderr)
        return 1
    if args.output == "-":
        sys.stdout.write(out)
    else:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
