"""Input pipeline: the data-parallel MLP step (256-512-10, global batch 1024, 8 simulated CPU
devices) fed by `experimental_distribute_dataset` from host NumPy batches (split, placed and
prefetched by the background thread) against the same step fed batches already placed on
the devices, and against the step hand-written with `jax.shard_map` fed pre-placed global
arrays. Timed interleaved in one process; prints median ratios of wall-clock time and of
process CPU time (all threads: the prefetch thread's placement included; on a shared machine
the less noisy figure).

Run: python benchmarks/input_pipeline.py [--steps N] [--rounds R]
"""
import os

import bench_device as device  # noqa: E402 - sets JAX's flags: before jax

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strategax as sx  # noqa: E402
from step_vs_jax import init_params, make_jax_step, make_strategax_step, strategy_and_mesh  # noqa: E402


CPU: list[float] = []  # the process CPU time of each `epoch` / `jax_epoch`, in order


def epoch(step, params, elements) -> float:
    """Seconds for one pass of `step` over `elements` (an iterable), waiting for the last step."""
    start, cpu = time.perf_counter(), time.process_time()
    loss = None
    for element in elements:
        params, loss = step(params, element)
    jax.block_until_ready(loss)
    CPU.append(time.process_time() - cpu)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    device.add_argument(parser)
    parser.add_argument("--steps", type=int, default=20, help="batches per timing round")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--buffer", type=int, default=2, help="experimental_per_replica_buffer_size")
    args = parser.parse_args()

    strategy, mesh = strategy_and_mesh()
    rng = np.random.default_rng(0)
    host = [(rng.normal(size=(1024, 256)).astype(np.float32),
             rng.integers(0, 10, size=(1024,)).astype(np.int32)) for _ in range(args.steps)]
    params0 = init_params()
    options = sx.InputOptions(experimental_per_replica_buffer_size=args.buffer)
    dataset = strategy.experimental_distribute_dataset(host, options)

    sx_step = make_strategax_step(strategy)
    placed = list(dataset)  # the same elements, placed before the clock starts
    jax_step = make_jax_step(mesh)
    sharded = NamedSharding(mesh, P("r"))
    jax_placed = [(jax.device_put(x, sharded), jax.device_put(y, sharded)) for x, y in host]
    jax_params = jax.device_put(params0, NamedSharding(mesh, P()))

    def jax_epoch() -> float:
        start, cpu = time.perf_counter(), time.process_time()
        params, loss = jax_params, None
        for x, y in jax_placed:
            params, loss = jax_step(params, x, y)
        jax.block_until_ready(loss)
        CPU.append(time.process_time() - cpu)
        return time.perf_counter() - start

    # Same numbers first, then warm up every path.
    _, l_sx = sx_step(params0, placed[0])
    _, l_jax = jax_step(jax_params, *jax_placed[0])
    np.testing.assert_allclose(float(l_sx), float(l_jax), rtol=1e-5)
    for _ in range(2):
        epoch(sx_step, params0, dataset), epoch(sx_step, params0, placed), jax_epoch()

    t_fed, t_placed, t_jax, r_placed, r_jax, cpu_placed = [], [], [], [], [], []
    for _ in range(args.rounds):
        CPU.clear()
        a = epoch(sx_step, params0, dataset)
        b = epoch(sx_step, params0, placed)
        c = jax_epoch()
        t_fed.append(a), t_placed.append(b), t_jax.append(c)
        r_placed.append(a / b), r_jax.append(a / c), cpu_placed.append(CPU[0] / CPU[1])
    per = 1e3 / args.steps
    print(f"strategax fed by experimental_distribute_dataset (host NumPy, prefetch {args.buffer}): "
          f"{statistics.median(t_fed) * per:7.3f} ms/step")
    print(f"strategax fed pre-placed device batches:                            "
          f"{statistics.median(t_placed) * per:7.3f} ms/step")
    print(f"hand-written jax.shard_map fed pre-placed global arrays:            "
          f"{statistics.median(t_jax) * per:7.3f} ms/step")
    print(f"median ratio dataset-fed / pre-placed (strategax): {statistics.median(r_placed):.3f}  (target <= 1.03)"
          f"   CPU time {statistics.median(cpu_placed):.3f}")
    print(f"median ratio dataset-fed strategax / pre-placed hand-written JAX: {statistics.median(r_jax):.3f}")


if __name__ == "__main__":
    main()
