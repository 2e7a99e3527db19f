"""First call of the data-parallel MLP step (trace, passes, lowering, XLA compilation and one
run) with strategax against the same step hand-written with `jax.shard_map` under `jax.jit`,
each built fresh per round, timed interleaved in one process (the compilation cache off, so
every round compiles). Prints the median ratio (target <= 1.3); with --cold, the same with
each first call in a fresh process; with --cached, strategax's first call in a fresh process
whose program an earlier process compiled into the compilation cache against a fresh process
with the cache off (target <= 0.5 on CPU); with --profile, the strategax first call's top
functions (cProfile).

Run: python benchmarks/first_call.py [--rounds N] [--cold] [--cached] [--profile] [--model small|large]
     [--device auto|cpu|gpu]
"""
import os
import sys

import bench_device as device  # noqa: E402 - sets JAX's flags: before jax

if "--one" not in sys.argv:  # this process compiles every round: no compilation cache
    os.environ["STRATEGAX_COMPILATION_CACHE"] = "0"

import argparse  # noqa: E402
import cProfile  # noqa: E402
import logging  # noqa: E402
import pstats  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_vs_jax import MODELS, init_params, make_batch, make_jax_step, make_strategax_step, strategy_and_mesh  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    device.add_argument(parser)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--model", choices=sorted(MODELS), default="small")
    parser.add_argument("--profile", action="store_true", help="print where strategax's first call spends its time")
    parser.add_argument("--cold", action="store_true",
                        help="also time each first call in a fresh process (after imports), alternating")
    parser.add_argument("--cached", action="store_true",
                        help="also time strategax's first call in a fresh process that finds the program in the "
                             "compilation cache, against one with the cache off")
    parser.add_argument("--one", choices=["sx", "jax"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.getLogger("strategax").setLevel(logging.ERROR)  # each round makes a new function on purpose

    strategy, mesh = strategy_and_mesh()
    sizes, global_batch = MODELS[args.model]
    x, y = make_batch(sizes, global_batch)
    params = init_params(sizes)
    batch = next(iter(strategy.experimental_distribute_dataset([(x, y)])))
    gx = jax.device_put(x, NamedSharding(mesh, P("r")))
    gy = jax.device_put(y, NamedSharding(mesh, P("r")))
    jax_params = jax.device_put(params, NamedSharding(mesh, P()))

    def first_sx():
        step = make_strategax_step(strategy)  # a new function: nothing cached in this process
        start = time.perf_counter()
        jax.block_until_ready(step(params, batch))
        return time.perf_counter() - start

    def first_jax():
        step = make_jax_step(mesh)
        start = time.perf_counter()
        jax.block_until_ready(step(jax_params, gx, gy))
        return time.perf_counter() - start

    if args.one:  # one first call in this fresh process
        print((first_sx if args.one == "sx" else first_jax)())
        return

    def fresh(which: str, cache: str = "0") -> float:
        """One first call in a fresh process; `cache`: its STRATEGAX_COMPILATION_CACHE."""
        env = dict(os.environ, STRATEGAX_COMPILATION_CACHE=cache)
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", which, "--model", args.model,
                              "--device", device.REQUESTED, "--cpu-devices", str(device.CPU_DEVICES)],
                             capture_output=True, text=True, check=True, env=env)
        return float(out.stdout.split()[-1])

    def report(name: str, a: list, b: list, other: str, target: str) -> None:
        ratios = [p / q for p, q in zip(a, b)]
        print(f"{name} strategax {statistics.median(a) * 1e3:8.1f} ms   {other} {statistics.median(b) * 1e3:8.1f} ms   "
              f"median ratio {statistics.median(ratios):.3f}  ({target}ratios {min(ratios):.2f}-{max(ratios):.2f})")

    first_sx(), first_jax()  # warm both libraries' own one-time work (imports, backends)
    t_sx, t_jax = [], []
    for _ in range(args.rounds):
        t_sx.append(first_sx()), t_jax.append(first_jax())
    report("first call", t_sx, t_jax, "jax.jit", "target <= 1.3; ")
    if args.cold:
        c_sx, c_jax = [], []
        for _ in range(args.rounds):
            c_sx.append(fresh("sx")), c_jax.append(fresh("jax"))
        report("cold first", c_sx, c_jax, "jax.jit", "fresh process each; ")
    if args.cached:
        cached, cold = [], []
        for _ in range(args.rounds):
            with tempfile.TemporaryDirectory(prefix="strategax-bench-cache-") as folder:
                fresh("sx", folder)  # an earlier process compiles the step into the cache
                cached.append(fresh("sx", folder))
            cold.append(fresh("sx"))
        report("cached first", cached, cold, "cache off", "target <= 0.5 on CPU; fresh process each; ")
    if args.profile:
        step = make_strategax_step(strategy)
        profile = cProfile.Profile()
        profile.enable()
        jax.block_until_ready(step(params, batch))
        profile.disable()
        pstats.Stats(profile).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
