"""Eager calls outside a `strategy.function` (MirroredStrategy, 8 simulated CPU devices or `--device gpu`):
`strategy.run` of a fresh lambda per call against the same function every call, eager
`strategy.gather` and `strategy.reduce`, and the same work hand-written in JAX (a cached
`jax.jit` of a `shard_map`). Prints the median time per call of each, and the ratios.
A fresh lambda of the same code and captured values reuses the first one's program, so its
ratio to the same-function call stays near 1 (it compiled every call, ~150x, before).

    PYTHONPATH=. python benchmarks/eager_cache.py [--calls 50] [--rounds 5] [--device auto|cpu|gpu]
"""

import bench_device as device  # noqa: E402 - sets JAX's flags: before jax

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import strategax as sx  # noqa: E402


def per_call(fn, calls: int, rounds: int) -> float:
    """Median over rounds of the seconds per call of `fn` (results waited for)."""
    jax.block_until_ready(fn())
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            out = fn()
        jax.block_until_ready(out)
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    device.add_argument(ap)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    strategy = sx.MirroredStrategy(device.devices())
    n = strategy.num_replicas_in_sync
    print(device.describe(strategy.extended.worker_devices))
    values = strategy.experimental_distribute_values_from_function(
        lambda ctx: jnp.full((256,), ctx.replica_id_in_sync_group + 1.0))
    scale = 2.0

    def step(x):
        return jnp.tanh(x * scale) + 1.0

    def unwrap(out):
        return out.values[0] if isinstance(out, sx.PerReplica) else out

    same = per_call(lambda: unwrap(strategy.run(step, args=(values,))), args.calls, args.rounds)
    fresh = per_call(lambda: unwrap(strategy.run(lambda x: jnp.tanh(x * scale) + 1.0, args=(values,))),
                     args.calls, args.rounds)
    gather = per_call(lambda: strategy.gather(values, 0), args.calls, args.rounds)
    reduce = per_call(lambda: strategy.reduce("SUM", values, axis=None), args.calls, args.rounds)

    mesh = strategy._mesh
    placed = jax.device_put(jnp.concatenate([jax.device_get(v) for v in strategy.experimental_local_results(values)]),
                            jax.sharding.NamedSharding(mesh, P(mesh.axis_names[0])))
    hand = jax.jit(jax.shard_map(lambda x: jnp.tanh(x * scale) + 1.0, mesh=mesh,
                                 in_specs=P(mesh.axis_names[0]), out_specs=P(mesh.axis_names[0])))
    jax_run = per_call(lambda: hand(placed), args.calls, args.rounds)
    print(f"replicas {n}, {args.calls} calls x {args.rounds} rounds (median us per call)")
    print(f"  run, same function        {same * 1e6:9.1f}")
    print(f"  run, fresh lambda         {fresh * 1e6:9.1f}   fresh / same {fresh / same:6.2f}")
    print(f"  gather                    {gather * 1e6:9.1f}")
    print(f"  reduce                    {reduce * 1e6:9.1f}")
    print(f"  hand-written jit(shard_map) {jax_run * 1e6:7.1f}   same / jax {same / jax_run:6.2f}")


if __name__ == "__main__":
    main()
