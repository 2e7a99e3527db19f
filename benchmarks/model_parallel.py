"""Model-parallel MLP step: strategax TPUStrategy vs the same step hand-written with
`jax.jit` and `NamedSharding` constraints. Interleaved timing; prints the median ratio.

Run: python benchmarks/model_parallel.py [--replicas 2] [--logical 4] [--iters 30] [--device auto|cpu|gpu]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import bench_device as device  # noqa: E402 - sets JAX's flags: before jax
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import model_parallel_mlp as mlp  # noqa: E402
import strategax as sx  # noqa: E402


def hand_written_step(mesh, logical_axes: tuple[str, ...]):
    """The same SGD step in plain JAX: jit over the (replica, logical) mesh with constraints."""
    la = logical_axes if len(logical_axes) > 1 else logical_axes[0]
    ns = lambda *spec: NamedSharding(mesh, P(*spec))  # noqa: E731
    wsc = jax.lax.with_sharding_constraint
    shardings = {"w1": ns(None, la), "b1": ns(la), "w2": ns(la, None)}

    def shard(t, which):
        return wsc(t, {"hidden_cols": ns(None, la), "hidden": ns(la), "hidden_rows": ns(la, None),
                       "batch_hidden": ns("replica", la)}[which])

    def loss_fn(params, x, y):
        h = jax.nn.relu(x @ shard(params["w1"], "hidden_cols") + shard(params["b1"], "hidden"))
        h = shard(h, "batch_hidden")
        return jnp.mean((h @ shard(params["w2"], "hidden_rows") - y) ** 2)

    def step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return loss, jax.tree_util.tree_map(lambda p, g: p - mlp.LR * g, params, grads)

    data = ns("replica")
    return jax.jit(step, in_shardings=(shardings, data, data), out_shardings=(ns(), shardings),
                   donate_argnums=(0,)), shardings, data


def main() -> None:
    ap = argparse.ArgumentParser()
    device.add_argument(ap)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--logical", type=int, default=4)
    ap.add_argument("--batch", type=int, default=64, help="per replica")
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--iters", type=int, default=30)
    a = ap.parse_args()

    needed = a.replicas * a.logical
    found = jax.devices("gpu") if device.platform() == "gpu" else jax.devices("cpu")[:device.CPU_DEVICES]
    if a.logical < 2:
        device.not_run("model_parallel", "a replica of one device is not model-parallel: pass --logical 2 or more")
    if len(found) < needed:
        device.not_run("model_parallel", f"{a.replicas} replicas x {a.logical} logical devices need {needed} "
                       f"devices, this machine has {len(found)} (pass --replicas and --logical to fit)")
    devices = found[:needed]
    print(device.describe(devices))
    strategy = sx.TPUStrategy(devices, logical_devices_per_replica=a.logical)
    sx_step = mlp.make_train_step(strategy)
    params = mlp.init_params(a.d, a.hidden, a.d)
    x, y = mlp.make_batch(a.replicas, a.batch, a.d, a.d)
    place = strategy.function(lambda v: strategy.run(lambda t: t, args=(v,)))  # data on devices once
    dx, dy = place(mlp.distribute(strategy, x)), place(mlp.distribute(strategy, y))

    logical_axes = tuple(strategy._mesh.axis_names[1:])
    hand, shardings, data = hand_written_step(strategy._mesh, logical_axes)
    hp = {k: jax.device_put(v, shardings[k]) for k, v in mlp.init_params(a.d, a.hidden, a.d).items()}
    hx, hy = jax.device_put(x, data), jax.device_put(y, data)

    sp = params
    for _ in range(3):  # compile and warm up both
        sl, sp = sx_step(sp, dx, dy)
        hl, hp = hand(hp, hx, hy)
    jax.block_until_ready((strategy.experimental_local_results(sl), hp))
    np.testing.assert_allclose(np.asarray(strategy.experimental_local_results(sl)[0]), np.asarray(hl), rtol=1e-4)

    ratios, t_sx, t_hand = [], [], []
    for _ in range(a.iters):
        t0 = time.perf_counter()
        sl, sp = sx_step(sp, dx, dy)
        jax.block_until_ready(strategy.experimental_local_results(sl))  # one program: all outputs
        t1 = time.perf_counter()
        hl, hp = hand(hp, hx, hy)
        jax.block_until_ready(hp)
        t2 = time.perf_counter()
        t_sx.append(t1 - t0)
        t_hand.append(t2 - t1)
        ratios.append((t1 - t0) / (t2 - t1))
    print(f"model-parallel MLP step, {a.replicas} replicas x {a.logical} logical devices, "
          f"batch {a.batch}/replica, {a.d}-{a.hidden}-{a.d}, {devices[0].platform}")
    print(f"strategax   median {statistics.median(t_sx) * 1e3:.2f} ms")
    print(f"hand-written median {statistics.median(t_hand) * 1e3:.2f} ms")
    print(f"median ratio strategax / hand-written: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
