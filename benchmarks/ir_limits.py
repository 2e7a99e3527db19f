"""Bounded cost of reading IR text (issue 15): `strategax-opt -p default` on a module with a
1e9-element splat constant (target: under 5 s and 1 GiB), and the parser's peak memory per
input byte on large inputs of several shapes (target: under 50x), measured with tracemalloc.

    PYTHONPATH=. python benchmarks/ir_limits.py [--size 2000000]
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from strategax import ir

BIG = 1_000_000_000
SPLAT = f"""module @m attributes {{num_replicas = 2}} {{
  func @main(%x: f32[{BIG}] per_replica) -> (f32[{BIG}] mirrored) {{
    %c = sx.constant {{value = dense<f32[{BIG}]: splat 0.0>}} : f32[{BIG}] mirrored
    %a = jax.add %x, %c : f32[{BIG}] per_replica
    %r = sx.all_reduce %a {{op = "sum", reason = "r"}} : f32[{BIG}] mirrored
    return %r
  }}
}}
"""


def splat_run() -> tuple[float, float, int]:
    """Wall seconds, peak RSS in MiB and exit code of strategax-opt -p default on SPLAT."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "splat.sxir"
        path.write_text(SPLAT)
        env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(Path(__file__).resolve().parent.parent))
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "strategax.tools.strategax_opt", str(path), "-p", "default"],
                              capture_output=True, text=True, env=env)
        wall = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux
    return wall, rss, done.returncode


def inputs(size: int) -> dict[str, str]:
    """Texts of about `size` bytes, each a different shape of input."""
    def module(body: str, attrs: str = "") -> str:
        return (f"module @m attributes {{{attrs}}} {{\n  func @f(%x: f32[3]) -> () {{\n{body}"
                "    return\n  }\n}\n")
    ops = size // 40
    n = size // 2
    return {
        "many ops": module("".join(f'    %a{i} = jax.neg %x : f32[3] loc("t.py":{i})\n' for i in range(ops))),
        "long i8 dense": module(f"    %c = sx.constant {{value = dense<i8[{n}]: " + ",".join("1" * n)
                                + f">}} : i8[{n}]\n"),
        "long f32 dense": module(f"    %c = sx.constant {{value = dense<f32[{n // 2}]: "
                                 + ", ".join(["1.5"] * (n // 2)) + f">}} : f32[{n // 2}]\n"),
        "long tuple": module("", "t = (" + ",".join("1" * n) + ")"),
        "long string": module("", 't = "' + "a" * size + '"'),
        "commas (an error)": module("    " + "," * size + "\n"),
    }


def parse_memory(text: str) -> tuple[float, float]:
    """Peak bytes per input byte and seconds to parse `text` (a ParseError counts as done)."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        ir.parse(text)
    except ir.ParseError:
        pass
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / len(text), seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto",
                    help="accepted as by every benchmark; this one runs no device program")
    ap.add_argument("--size", type=int, default=2_000_000, help="bytes of each parse-memory input")
    args = ap.parse_args()
    wall, rss, code = splat_run()
    print(f"strategax-opt -p default, 1e9-element splat: {wall:.2f} s wall, peak RSS {rss:.0f} MiB, exit {code}")
    ir.parse(SPLAT)  # load primitives once, outside the measurements
    for name, text in inputs(args.size).items():
        ratio, seconds = parse_memory(text)
        print(f"parse {name:<18} {len(text) / 1e6:5.2f} MB: peak {ratio:5.1f} bytes per input byte "
              f"({seconds:.2f} s under tracemalloc)")


if __name__ == "__main__":
    main()
