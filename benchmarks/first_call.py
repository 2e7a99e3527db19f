"""First call of the data-parallel MLP step (trace, passes, lowering, XLA compilation and one
run) with strategax against the same step hand-written with `jax.shard_map` under `jax.jit`,
each built fresh per round, timed interleaved in one process. Prints the median ratio
(target <= 1.3) and, with --profile, the strategax first call's top functions (cProfile).

Run: python benchmarks/first_call.py [--rounds N] [--profile]
"""
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import argparse  # noqa: E402
import cProfile  # noqa: E402
import logging  # noqa: E402
import subprocess  # noqa: E402
import pstats  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_vs_jax import init_params, make_jax_step, make_strategax_step, strategy_and_mesh  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--profile", action="store_true", help="print where strategax's first call spends its time")
    parser.add_argument("--cold", action="store_true",
                        help="also time each first call in a fresh process (after imports), alternating")
    parser.add_argument("--one", choices=["sx", "jax"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.getLogger("strategax").setLevel(logging.ERROR)  # each round makes a new function on purpose

    strategy, mesh = strategy_and_mesh()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1024, 256)).astype(np.float32)
    y = rng.integers(0, 10, size=(1024,)).astype(np.int32)
    params = init_params()
    batch = next(iter(strategy.experimental_distribute_dataset([(x, y)])))
    gx = jax.device_put(x, NamedSharding(mesh, P("r")))
    gy = jax.device_put(y, NamedSharding(mesh, P("r")))
    jax_params = jax.device_put(params, NamedSharding(mesh, P()))

    def first_sx():
        step = make_strategax_step(strategy)  # a new function: nothing cached
        start = time.perf_counter()
        jax.block_until_ready(step(params, batch))
        return time.perf_counter() - start

    def first_jax():
        step = make_jax_step(mesh)
        start = time.perf_counter()
        jax.block_until_ready(step(jax_params, gx, gy))
        return time.perf_counter() - start

    if args.one:  # one cold first call in this fresh process
        print((first_sx if args.one == "sx" else first_jax)())
        return
    first_sx(), first_jax()  # warm both libraries' own one-time work (imports, backends)
    t_sx, t_jax, ratios = [], [], []
    for _ in range(args.rounds):
        a, b = first_sx(), first_jax()
        t_sx.append(a), t_jax.append(b), ratios.append(a / b)
    print(f"first call strategax {statistics.median(t_sx) * 1e3:8.1f} ms   "
          f"jax.jit {statistics.median(t_jax) * 1e3:8.1f} ms   "
          f"median ratio {statistics.median(ratios):.3f}  (target <= 1.3; "
          f"ratios {min(ratios):.2f}-{max(ratios):.2f})")
    if args.cold:
        def cold(which):
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", which],
                                 capture_output=True, text=True, check=True)
            return float(out.stdout.split()[-1])
        c_sx, c_jax, c_ratios = [], [], []
        for _ in range(args.rounds):
            a, b = cold("sx"), cold("jax")
            c_sx.append(a), c_jax.append(b), c_ratios.append(a / b)
        print(f"cold first strategax {statistics.median(c_sx) * 1e3:8.1f} ms   "
              f"jax.jit {statistics.median(c_jax) * 1e3:8.1f} ms   "
              f"median ratio {statistics.median(c_ratios):.3f}  (fresh process each; "
              f"ratios {min(c_ratios):.2f}-{max(c_ratios):.2f})")
    if args.profile:
        step = make_strategax_step(strategy)
        profile = cProfile.Profile()
        profile.enable()
        jax.block_until_ready(step(params, batch))
        profile.disable()
        pstats.Stats(profile).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
