"""Model parallelism inside data parallelism: a 2-layer MLP whose hidden dimension is split
over each replica's logical devices, trained with gradients all-reduced over replicas only.

Run: python examples/model_parallel_mlp.py [REPLICAS] [LOGICAL]   (default 2 x 4)
"""
from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax
import jax.numpy as jnp
import numpy as np

import strategax as sx

LR = 0.1


def init_params(d_in: int = 16, hidden: int = 64, d_out: int = 8, seed: int = 0) -> dict:
    """Small random weights for the MLP."""
    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    return {"w1": jax.random.normal(k1, (d_in, hidden), jnp.float32) / np.sqrt(d_in),
            "b1": jnp.zeros((hidden,), jnp.float32),
            "w2": jax.random.normal(k2, (hidden, d_out), jnp.float32) / np.sqrt(hidden)}


def forward(params: dict, x, shard=lambda t, dims: t):
    """The MLP; `shard(t, dims)` annotates a tensor (identity on one device)."""
    w1 = shard(params["w1"], "hidden_cols")
    h = jax.nn.relu(x @ w1 + shard(params["b1"], "hidden"))
    h = shard(h, "hidden_cols")
    return h @ shard(params["w2"], "hidden_rows")


def loss_fn(params: dict, x, y, shard=lambda t, dims: t):
    """Mean squared error of the MLP."""
    return jnp.mean((forward(params, x, shard) - y) ** 2)


def make_train_step(strategy: sx.Strategy):
    """One SGD step: per-replica gradients, all-reduced (MEAN) over replicas, then the update."""
    n = strategy.logical_devices_per_replica
    splits = {"hidden_cols": [1, n], "hidden": [n], "hidden_rows": [n, 1]}

    def shard(t, which):
        return strategy.experimental_split_to_logical_devices(t, splits[which])

    def replica_step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y, shard)
        ctx = sx.get_replica_context()
        grads = ctx.all_reduce(sx.ReduceOp.MEAN, grads)
        new = jax.tree_util.tree_map(lambda p, g: p - LR * g, params, grads)
        return ctx.all_reduce(sx.ReduceOp.MEAN, loss), new

    @strategy.function
    def train_step(params, x, y):
        loss, new = strategy.run(replica_step, args=(params, x, y))
        return loss, new

    return train_step


def reference_step(params: dict, x, y):
    """The same step on one device in plain JAX (the whole global batch)."""
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return loss, jax.tree_util.tree_map(lambda p, g: p - LR * g, params, grads)


def make_batch(replicas: int, per_replica: int = 8, d_in: int = 16, d_out: int = 8, seed: int = 1):
    """A global batch (x, y) of replicas * per_replica examples."""
    kx, ky = jax.random.split(jax.random.PRNGKey(seed))
    n = replicas * per_replica
    return (np.asarray(jax.random.normal(kx, (n, d_in), jnp.float32)),
            np.asarray(jax.random.normal(ky, (n, d_out), jnp.float32)))


def distribute(strategy: sx.Strategy, array: np.ndarray):
    """Split a global batch along axis 0, one piece per replica."""
    pieces = np.split(array, strategy.num_replicas_in_sync)
    return strategy.experimental_distribute_values_from_function(
        lambda ctx: pieces[ctx.replica_id_in_sync_group])


def main(replicas: int = 2, logical: int = 4, steps: int = 5) -> None:
    strategy = sx.TPUStrategy(jax.devices()[:replicas * logical], logical_devices_per_replica=logical)
    step = make_train_step(strategy)
    params, ref = init_params(), init_params()
    x, y = make_batch(replicas)
    dx, dy = distribute(strategy, x), distribute(strategy, y)
    for i in range(steps):
        loss, params = step(params, dx, dy)
        ref_loss, ref = jax.jit(reference_step)(ref, x, y)
        loss = strategy.experimental_local_results(loss)[0]
        print(f"step {i}: loss {float(loss):.6f} (one-device JAX {float(ref_loss):.6f})")
    print(step.ir(params, dx, dy))


if __name__ == "__main__":
    main(*[int(a) for a in sys.argv[1:3]])
