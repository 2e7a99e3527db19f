"""Creating unnamed variables under MirroredStrategy (8 simulated CPU devices), a thousand at
a time, against the same work hand-written in JAX (a copy of the value placed replicated on
the mesh, which is what a mirrored variable's buffer is). Prints each thousand's CPU time and
the ratio of the last thousand to the first: linear creation keeps it near 1 (it was 9x at the
8,000th thousand when each new name scanned the names issued before it).

    PYTHONPATH=. python benchmarks/variable_creation.py [--thousands 8] [--device auto|cpu|gpu]
"""

import bench_device as device  # noqa: E402 - sets JAX's flags: before jax

import argparse  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import strategax as sx  # noqa: E402


def per_thousand(make, thousands: int) -> list[float]:
    """CPU seconds of each thousand calls of `make` (everything made is kept alive)."""
    kept, out = [], []
    for _ in range(thousands):
        start = time.process_time()
        kept.extend(make() for _ in range(1000))
        out.append(time.process_time() - start)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    device.add_argument(ap)
    ap.add_argument("--thousands", type=int, default=8)
    args = ap.parse_args()
    strategy = sx.MirroredStrategy(device.devices())
    print(device.describe(strategy.extended.worker_devices))
    replicated = NamedSharding(strategy._mesh, P())
    value = np.float32(0.0)
    with strategy.scope():
        sx.Variable(value)  # warm up
        ours = per_thousand(lambda: sx.Variable(value), args.thousands)
    jax_only = per_thousand(lambda: jax.device_put(jnp.array(value, copy=True), replicated), args.thousands)
    print("thousand  strategax ms  jax ms  ratio")
    for k, (a, b) in enumerate(zip(ours, jax_only), 1):
        print(f"{k:>8}  {a * 1000:12.0f}  {b * 1000:6.0f}  {a / b:5.2f}")
    print(f"last / first thousand: strategax {ours[-1] / ours[0]:.2f}, jax {jax_only[-1] / jax_only[0]:.2f}")


if __name__ == "__main__":
    main()
