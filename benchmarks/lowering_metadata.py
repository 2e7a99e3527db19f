"""What naming every lowered op costs: lowering (to StableHLO) and compiling examples/digits.py's
training step with and without `backends/metadata.py`'s name scope and source line per op, in
rotating order, in one process. Prints medians and the ratio.

Run: python benchmarks/lowering_metadata.py [--rounds 7]
"""
import argparse
import contextlib
import os
import statistics
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

import digits  # noqa: E402

import strategax as sx  # noqa: E402
from strategax.backends import jax_backend  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    strategy = sx.MirroredStrategy()
    (x, y), _ = digits.load_data()
    train_step = digits.make_training(strategy)[4]
    batch = next(iter(strategy.experimental_distribute_dataset(digits.batches(x, y))))
    compiled, global_args = train_step._lowering_args((batch,), {})
    modes = {"with metadata": jax_backend.op_metadata, "without": lambda op: contextlib.nullcontext()}
    lower, compile_ = {m: [] for m in modes}, {m: [] for m in modes}
    try:
        for _ in range(args.rounds):
            for mode, scope in modes.items():
                jax_backend.op_metadata = scope
                executable = jax_backend.Executable(compiled.module, compiled.executable.mesh)
                start = time.perf_counter()
                lowered = executable.lower(*global_args)
                lower[mode].append(time.perf_counter() - start)
                start = time.perf_counter()
                lowered.compile()
                compile_[mode].append(time.perf_counter() - start)
    finally:
        jax_backend.op_metadata = modes["with metadata"]
    ops = sum(1 for _ in compiled.module.walk())
    for name, times in (("lower", lower), ("compile", compile_)):
        med = {m: statistics.median(t) * 1e3 for m, t in times.items()}
        print(f"{name:>8} ({ops} ops): with metadata {med['with metadata']:.1f} ms, without {med['without']:.1f} ms, "
              f"ratio {med['with metadata'] / med['without']:.2f}x (median of {args.rounds})")


if __name__ == "__main__":
    main()
