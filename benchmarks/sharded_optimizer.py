"""sx.Optimizer(optax.adam, shard_state=True) (ZeRO 1/2) against the unsharded optimizer (the
control), same MLP (256-2048-2048-2048-256 by default: about 9.5 M parameters), same batches,
8 simulated CPU devices, timed interleaved in one process. Checks first that both give the same
parameters after 2 steps, then prints each step's memory per device (f.stats().memory and XLA's
own analysis) and the median step-time ratio sharded / unsharded.

Run: python benchmarks/sharded_optimizer.py [--hidden 2048] [--batch 256] [--steps N] [--rounds R]
"""
import os

import bench_device as device  # noqa: E402 - sets JAX's flags: before jax

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strategax as sx  # noqa: E402
from step_vs_jax import abba  # noqa: E402


def init_params(hidden: int, width: int = 256, layers: int = 3) -> dict:
    rng = np.random.default_rng(0)
    dims = [width] + [hidden] * layers + [width]
    return {f"w{i}": (rng.normal(size=(a, b)) / np.sqrt(a)).astype(np.float32)
            for i, (a, b) in enumerate(zip(dims[:-1], dims[1:]))} | \
        {f"b{i}": np.zeros(b, np.float32) for i, b in enumerate(dims[1:])}


def loss_fn(params, x, y, batch):
    h = x
    n = len(params) // 2
    for i in range(n):
        h = h @ params[f"w{i}"] + params[f"b{i}"]
        h = jax.nn.relu(h) if i < n - 1 else h
    return jnp.sum((h - y) ** 2) / batch


def make_step(strategy, params0, shard_state: bool, batch: int):
    names = sorted(params0)
    with strategy.scope():
        variables = {k: sx.Variable(v, name=k) for k, v in params0.items()}
        optimizer = sx.Optimizer(optax.adam(1e-3), shard_state=shard_state)

    @strategy.function
    def step(x, y):
        def replica(x, y):
            values = {k: variables[k].read_value() for k in names}
            loss, grads = jax.value_and_grad(loss_fn)(values, x, y, batch)
            optimizer.apply_gradients([(grads[k], variables[k]) for k in names])
            return loss
        return strategy.reduce("SUM", strategy.run(replica, args=(x, y)))
    return step, variables


def main() -> None:
    parser = argparse.ArgumentParser()
    device.add_argument(parser)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=256, help="global batch")
    parser.add_argument("--steps", type=int, default=5, help="steps per timing round")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()

    devs = device.devices()
    print(device.describe(devs))
    strategy = sx.MirroredStrategy(devs)
    params0 = init_params(args.hidden)
    print(f"{sum(v.size for v in params0.values()) / 1e6:.2f} M parameters, global batch {args.batch}, "
          f"{len(devs)} replicas")
    rng = np.random.default_rng(1)
    x = rng.normal(size=(args.batch, 256)).astype(np.float32)
    y = rng.normal(size=(args.batch, 256)).astype(np.float32)
    batch = next(iter(strategy.experimental_distribute_dataset([(x, y)])))

    sharded, sharded_vars = make_step(strategy, params0, True, args.batch)
    plain, plain_vars = make_step(strategy, params0, False, args.batch)
    for _ in range(2):  # same numbers first
        np.testing.assert_allclose(float(sharded(*batch)), float(plain(*batch)), rtol=1e-5)
    for k in params0:
        np.testing.assert_allclose(sharded_vars[k].numpy(), plain_vars[k].numpy(), rtol=1e-5, atol=1e-6)

    for name, f in (("unsharded", plain), ("sharded", sharded)):
        stats = f.stats(*batch)
        xla = f.lowered(*batch).compile().memory_analysis()
        m = stats.memory
        print(f"{name:>9}: optimizer slots {m.optimizer_slots / 2**20:8.2f} MiB/device, variables "
              f"{m.variables / 2**20:7.2f} MiB, peak {m.peak / 2**20:8.2f} MiB (XLA: arguments "
              f"{xla.argument_size_in_bytes / 2**20:.2f} MiB, peak {xla.peak_memory_in_bytes / 2**20:.2f} MiB); "
              f"{stats.count} collectives, {stats.bytes_per_replica / 2**20:.2f} MiB "
              "moved per replica")

    t_sharded, t_plain, ratios = abba(lambda: sharded(*batch), lambda: plain(*batch), args.rounds, args.steps)
    print(f"Adam step  sharded {statistics.median(t_sharded) * 1e3:8.2f} ms   unsharded "
          f"{statistics.median(t_plain) * 1e3:8.2f} ms   median ratio {statistics.median(ratios):.3f}"
          "  (target <= 1.05)")


if __name__ == "__main__":
    main()
