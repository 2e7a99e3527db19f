"""Run the TensorFlow blocks of docs/porting.md in real TensorFlow and check what they print.

Each `<!-- tf: NAME -->` block runs in its own process (after the page's `<!-- tf setup -->`
blocks) with the TensorFlow interpreter; its stdout is compared with the page's ```text block.

    /work/tfvenv/bin/python tools/tf_record/porting_tf.py            # check every block
    /work/tfvenv/bin/python tools/tf_record/porting_tf.py -k NAME    # some blocks
    /work/tfvenv/bin/python tools/tf_record/porting_tf.py --write    # paste TF's output in

Blocks marked `<!-- tf: NAME -->` whose setup needs hardware we do not have (a TPU) carry
`# not run: ...` on their first line and are skipped.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
from docblocks import extract, normalise, padded  # noqa: E402

PAGE = REPO / "docs" / "porting.md"


def run_one(python: str, setup: list, block, timeout: float) -> str:
    code = "".join(padded(b) + "\n" for b in setup) + padded(block)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONWARNINGS="ignore")
    # A file, not `python -c`: tf.function's autograph needs the source to convert loops.
    with tempfile.NamedTemporaryFile("w", suffix=f"_{block.name}.py", delete=False) as f:
        f.write(code)
    try:
        proc = subprocess.run([python, f.name], capture_output=True, text=True, env=env,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"<<timed out after {timeout} s>>"
    finally:
        os.unlink(f.name)
    if proc.returncode:
        return proc.stdout + "\n<<exit %d>>\n%s" % (proc.returncode, proc.stderr[-2000:])
    return proc.stdout


def write_outputs(outputs: dict) -> None:
    """Replace (or add) the ```text block after each named tf block with its output."""
    lines = PAGE.read_text().splitlines()
    blocks = {b.name: b for b in extract(PAGE) if b.side == "tf" and b.name in outputs}
    for block in sorted(blocks.values(), key=lambda b: -b.first_line):
        end = block.last_line  # 1-based line of the closing fence
        text = outputs[block.name].rstrip("\n").splitlines()
        j = end
        while j < len(lines) and not lines[j].strip():
            j += 1
        if j < len(lines) and lines[j].strip() == "```text":
            k = j + 1
            while lines[k].rstrip() != "```":
                k += 1
            lines[j + 1:k] = text
        else:
            lines[end:end] = ["", "```text", *text, "```"]
    PAGE.write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", action="append", help="only blocks whose name contains this")
    parser.add_argument("--write", action="store_true", help="write TF's output into the page")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=180, help="seconds per block")
    args = parser.parse_args()
    blocks = extract(PAGE)
    setup = [b for b in blocks if b.side == "tf" and b.name is None]
    todo = [b for b in blocks if b.side == "tf" and b.name
            and not b.code.startswith("# not run")
            and (not args.k or any(k in b.name for k in args.k))]
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        outputs = dict(zip([b.name for b in todo],
                           pool.map(lambda b: run_one(args.python, setup, b, args.timeout), todo)))
    bad = 0
    for b in todo:
        same = normalise(outputs[b.name]) == normalise(b.expected or "")
        bad += not same
        print(f"{'ok  ' if same else 'DIFF'} {b.name}")
        if not same:
            print("  page:\n    " + (b.expected or "").replace("\n", "\n    "))
            print("  tf:\n    " + outputs[b.name].replace("\n", "\n    "))
    if args.write:
        write_outputs({k: v for k, v in outputs.items() if "<<" not in v})
    return 1 if bad and not args.write else 0


if __name__ == "__main__":
    sys.exit(main())
