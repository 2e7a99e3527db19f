"""`strategax-dump [--out DIR] [--platforms tpu,cuda] [--html] SCRIPT.py [ARGS...]`: run a script
and write, for every function it compiles, the IR before and after each pass, the lowered
StableHLO, the compiled HLO, the program exported for each of `--platforms` (no such hardware
needed), `summary.txt`, with `--html` the report page `report.html`, and a DOT graph (see
`strategax.trace.dump`)."""
from __future__ import annotations

import argparse
import os
import runpy
import sys
import tempfile
from pathlib import Path
from typing import Sequence

from ..trace.dump import ENV, HTML_ENV, PLATFORMS_ENV, check_platforms


# a constant, not __doc__: `python -OO` strips docstrings
DESCRIPTION = "run a script and write every stage of each function it compiles"

def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="strategax-dump", description=DESCRIPTION)
    ap.add_argument("--out", default="strategax-dump", help="folder to write (default ./strategax-dump)")
    ap.add_argument("--platforms", default="",
                    help="also export each program for these platforms, comma-separated (e.g. tpu,cuda)")
    ap.add_argument("--html", action="store_true",
                    help="also write report.html per function: one self-contained page (f.report's)")
    ap.add_argument("script", help="the Python script to run")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    args = ap.parse_args(argv)
    out = Path(args.out).resolve()
    try:  # a folder we can write to, or stop before running the script
        out.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=out).close()
    except OSError as e:
        print(f"strategax-dump: error: --out {args.out} is not a folder strategax-dump can write "
              f"to ({e.strerror or e})", file=sys.stderr)
        return 1
    try:
        platforms = check_platforms(args.platforms) if args.platforms.strip() else ()
    except ValueError as e:
        print(f"strategax-dump: error: --platforms: {e}", file=sys.stderr)
        return 1
    os.environ[ENV] = str(out)
    os.environ[PLATFORMS_ENV] = ",".join(platforms)
    os.environ[HTML_ENV] = "1" if args.html else ""
    sys.argv = [args.script, *args.args]
    sys.path.insert(0, str(Path(args.script).resolve().parent))
    try:
        runpy.run_path(args.script, run_name="__main__")
    except FileNotFoundError as e:
        print(f"strategax-dump: error: {e}", file=sys.stderr)
        return 1
    except SystemExit as e:
        if e.code not in (None, 0):
            return e.code if isinstance(e.code, int) else 1
    folders = sorted(p.name for p in out.iterdir() if p.is_dir())
    print(f"strategax-dump: {len(folders)} compiled function(s) written to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
