"""XLA compile time and step time of the flax Transformer LM step (`transformer_lm.py`) against
the gradient bucket size (`CommunicationOptions(bytes_per_pack=...)`): one buffer of every
gradient, buckets of 100 MB down to 16 KB, one all-reduce per tensor, and strategax's default,
each against the same step hand-written with `jax.jit(jax.shard_map(...))` and per-tensor
`lax.pmean`. One process, the compilation cache off. Both figures are CPU time of the process
(`time.process_time`: every thread's), which a machine shared with other jobs inflates far less
than wall time: XLA's compile of the lowered program (`lowered.compile()`; the hand-written
step's is compiled before, between and after the strategax variants and its median is the
reference) and a step (medians of rounds that alternate each variant with the hand-written step).

On a GPU the step figures are wall time (the host only queues the work there).

Run: python benchmarks/bucket_size.py [--layers 8] [--steps 10] [--rounds 5] [--only NAME ...]
     [--size small|xl] [--device auto|cpu|gpu]
"""
import os
import sys

import bench_device as device  # noqa: E402 - sets JAX's flags: before jax

os.environ["STRATEGAX_COMPILATION_CACHE"] = "0"  # every variant compiles

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh  # noqa: E402

import strategax as sx  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import transformer_lm as lm  # noqa: E402


def cpu_timed(fn, n: int) -> float:
    """Seconds per call of `fn` over `n` calls: the process's CPU time on the CPU platform; wall
    time on a GPU, where the host only queues the work."""
    clock = time.perf_counter if device.platform() == "gpu" else time.process_time
    jax.block_until_ready(fn())
    start = clock()
    out = None
    for _ in range(n):
        out = fn()
    jax.block_until_ready(out)
    return (clock() - start) / n

ONE_BUFFER = 1 << 50  # larger than any model: every gradient in one bucket
VARIANTS = [("one buffer", ONE_BUFFER), ("100 MB", 100 << 20), ("25 MB", 25 << 20), ("4 MB", 4 << 20),
            ("1 MB", 1 << 20), ("256 KB", 256 << 10), ("64 KB", 64 << 10), ("16 KB", 16 << 10),
            ("per tensor", 1), ("default", None)]


def main() -> None:
    parser = argparse.ArgumentParser()
    device.add_argument(parser)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10, help="steps per timing round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", nargs="+", choices=[name for name, _ in VARIANTS], help="these variants only")
    lm.add_argument(parser)
    args = parser.parse_args()
    variants = [v for v in VARIANTS if not args.only or v[0] in args.only]
    devices = device.devices()
    strategy, mesh = sx.MirroredStrategy(devices), Mesh(np.array(devices), ("r",))
    model, params, pieces, gx, gy, jparams = lm.setup(strategy, mesh, args.layers, args.size)

    def compile_cpu(lowered) -> float:
        """CPU seconds of XLA compiling `lowered`."""
        start = time.process_time()
        lowered.compile()
        return time.process_time() - start

    def jax_variant():
        step = lm.make_jax_step(mesh, model)
        secs = compile_cpu(step.lower(jparams, gx, gy))
        p, _ = jax.block_until_ready(step(jparams, gx, gy))
        return step, p, secs

    jax_compiles, results = [], {}
    jstep, jp, secs = jax_variant()
    jax_compiles.append(secs)
    for k, (name, size) in enumerate(variants):
        step = lm.make_strategax_step(strategy, model, size)
        secs = compile_cpu(step.lowered(params, pieces))
        p, _ = jax.block_until_ready(step(params, pieces))
        stats = step.stats(params, pieces)
        state = {"sx": p, "jax": jp}

        def run_sx(step=step, state=state):
            state["sx"], loss = step(state["sx"], pieces)
            return loss

        def run_jax(jstep=jstep, state=state):
            state["jax"], loss = jstep(state["jax"], gx, gy)
            return loss

        run_sx(), run_jax()
        ratios = []
        for r in range(args.rounds):
            a, b = (run_sx, run_jax) if r % 2 == 0 else (run_jax, run_sx)
            ta, tb = cpu_timed(a, args.steps), cpu_timed(b, args.steps)
            ratios.append(ta / tb if a is run_sx else tb / ta)
        ms = statistics.median(cpu_timed(run_sx, args.steps) for _ in range(3)) * 1e3
        results[name] = (len(stats.collectives), secs, statistics.median(ratios), ms)
        if k in (len(variants) // 2, len(variants) - 1):  # the hand-written step compiled again
            jstep, jp, secs = jax_variant()
            jax_compiles.append(secs)
    ref = statistics.median(jax_compiles)
    print(device.describe(devices))
    print(f"Transformer LM, {args.layers} layers, {lm.SIZES[args.size].describe()}, {len(devices)} replicas; "
          f"jax.jit XLA compile {ref:.2f} CPU s (runs {', '.join(f'{c:.2f}' for c in jax_compiles)})")
    print(f"{'bucket':>12} {'collectives':>11} {'XLA compile CPU s':>17} {'/ jax.jit':>9} {'step ms':>11} "
          f"{'step / jax.jit':>14}")
    for name, (count, secs, ratio, ms) in results.items():
        print(f"{name:>12} {count:>11} {secs:>17.2f} {secs / ref:>9.2f} {ms:>11.2f} {ratio:>14.3f}", flush=True)


if __name__ == "__main__":
    main()
