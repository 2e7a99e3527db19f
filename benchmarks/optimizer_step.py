"""The MLP training step (256-512-10, global batch 1024, 8 simulated CPU devices) through
`sx.Optimizer(optax.adam)` with parameters and optimizer state in strategax variables,
against the same step hand-written in JAX (`jax.shard_map`, `lax.psum` of the gradients,
`optax.adam`, parameters and state donated), timed interleaved in one process. Prints the
median step-time ratio.

Run: python benchmarks/optimizer_step.py [--steps N] [--rounds R]
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
from jax import lax  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strategax as sx  # noqa: E402
from step_vs_jax import init_params, strategy_and_mesh, timed  # noqa: E402

BATCH = 1024
NAMES = ("b1", "b2", "w1", "w2")


def loss_fn(params, x, y):
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"] + params["b2"]
    picked = jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1)
    return -jnp.sum(picked) / BATCH


def make_strategax_step(strategy, params0, tx):
    with strategy.scope():
        variables = {k: sx.Variable(v, name=k) for k, v in params0.items()}
        optimizer = sx.Optimizer(tx)

    @strategy.function
    def step(x, y):
        def replica_step(x, y):
            values = {k: variables[k].read_value() for k in NAMES}
            loss, grads = jax.value_and_grad(loss_fn)(values, x, y)
            optimizer.apply_gradients([(grads[k], variables[k]) for k in NAMES])
            return loss
        return strategy.reduce("SUM", strategy.run(replica_step, args=(x, y)))
    return step, variables, optimizer


def make_jax_step(mesh, tx):
    def replica_step(params, state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        grads = lax.psum(grads, "r")
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state, lax.psum(loss, "r")
    mapped = jax.shard_map(replica_step, mesh=mesh, in_specs=(P(), P(), P("r"), P("r")),
                           out_specs=(P(), P(), P()), check_vma=False)
    return jax.jit(mapped, donate_argnums=(0, 1))


def main() -> None:
    parser = argparse.ArgumentParser()
    device.add_argument(parser)
    parser.add_argument("--steps", type=int, default=20, help="steps per timing round")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()

    strategy, mesh = strategy_and_mesh()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(BATCH, 256)).astype(np.float32)
    y = rng.integers(0, 10, size=(BATCH,)).astype(np.int32)
    params0 = init_params()
    tx = optax.adam(1e-3)

    sx_step, variables, _ = make_strategax_step(strategy, params0, tx)
    batch = next(iter(strategy.experimental_distribute_dataset([(x, y)])))

    jax_step = make_jax_step(mesh, tx)
    gx = jax.device_put(x, NamedSharding(mesh, P("r")))
    gy = jax.device_put(y, NamedSharding(mesh, P("r")))
    replicated = NamedSharding(mesh, P())
    params = jax.device_put(params0, replicated)
    fresh = lambda tree: jax.tree.map(lambda a: jnp.array(a, copy=True), tree)  # noqa: E731 (donated: no shared buffers)
    jax_state = {"params": params, "opt": jax.device_put(fresh(tx.init(params0)), replicated)}

    def run_sx():
        return sx_step(*batch)

    def run_jax():
        jax_state["params"], jax_state["opt"], loss = jax_step(jax_state["params"], jax_state["opt"], gx, gy)
        return loss

    # Same numbers first: three steps of each from the same start.
    for _ in range(3):
        l_sx, l_jax = float(run_sx()), float(run_jax())
        np.testing.assert_allclose(l_sx, l_jax, rtol=1e-5)
    for k in NAMES:
        np.testing.assert_allclose(np.asarray(variables[k].values[0]), np.asarray(jax_state["params"][k]),
                                   rtol=1e-4, atol=1e-6)

    ratios, t_sx, t_jax = [], [], []
    for _ in range(args.rounds):
        a = timed(run_sx, args.steps)
        b = timed(run_jax, args.steps)
        t_sx.append(a), t_jax.append(b), ratios.append(a / b)
    print(f"optax step  strategax {statistics.median(t_sx) * 1e3:8.3f} ms   "
          f"hand-written JAX {statistics.median(t_jax) * 1e3:8.3f} ms   "
          f"median ratio {statistics.median(ratios):.3f}  (target <= 1.05)")


if __name__ == "__main__":
    main()
