"""Steps per second of a small model trained on parameter servers (ParameterServerStrategy on a
local Ray cluster: 1, 2 and 4 workers of one CPU device each, 1 parameter server), against the
same step as a local `strategy.function` call (OneDeviceStrategy) and hand-written in JAX
(`jax.jit`, parameters kept on the device), all in this process's view, timed interleaved; and a
no-op Ray actor call, the unit of the scheduled step's cost.

The model: an MLP 64-128-10 (9.6k parameters, 38 KB), a batch of 64, SGD. Each scheduled step
fetches the parameters from the server, runs the compiled step on the worker and sends the
update back (two round trips to the server and one to the worker), so on a model this small the
figures measure the per-step overhead of `schedule`, not compute.

Run: PYTHONPATH=. python benchmarks/parameter_server.py [--steps 50] [--rounds 5] [--workers 1,2,4]
"""
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

import strategax as sx  # noqa: E402

RNG = np.random.default_rng(0)
X = RNG.normal(size=(64, 64)).astype(np.float32)
Y = RNG.integers(0, 10, size=(64,)).astype(np.int32)
INIT = {"w1": (RNG.normal(size=(64, 128)) * 0.1).astype(np.float32), "b1": np.zeros(128, np.float32),
        "w2": (RNG.normal(size=(128, 10)) * 0.1).astype(np.float32), "b2": np.zeros(10, np.float32)}


def loss_fn(params, x, y):
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(h @ params["w2"] + params["b2"], y))


def make_jax():
    @jax.jit
    def step(params):
        loss, grads = jax.value_and_grad(loss_fn)(params, X, Y)
        return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), loss

    state = {"params": jax.tree.map(jnp.asarray, INIT)}

    def run(n):
        for _ in range(n):
            state["params"], loss = step(state["params"])
        jax.block_until_ready(loss)
    return run


def make_step(strategy):
    """The same step as a strategax program of `strategy`: variables, optax SGD."""
    with strategy.scope():
        params = {k: sx.Variable(v, name=k) for k, v in INIT.items()}
        optimizer = sx.Optimizer(optax.sgd(0.01))

    @strategy.function
    def step():
        def replica():
            values = {k: v.read_value() for k, v in params.items()}
            loss, grads = jax.value_and_grad(loss_fn)(values, X, Y)
            optimizer.apply_gradients([(grads[k], params[k]) for k in params])
            return loss
        return strategy.reduce("MEAN", strategy.run(replica), axis=None)
    return step


def make_local():
    step = make_step(sx.OneDeviceStrategy("CPU:0"))

    def run(n):
        for _ in range(n):
            loss = step()
        jax.block_until_ready(loss)
    return run


def make_ps(workers: int):
    resolver = sx.cluster_resolver.RayClusterResolver(num_workers=workers, num_ps=1)
    strategy = sx.experimental.ParameterServerStrategy(resolver)
    coordinator = sx.experimental.coordinator.ClusterCoordinator(strategy)
    step = make_step(strategy)

    def run(n):
        for _ in range(n):
            coordinator.schedule(step)
        coordinator.join()
    run(2 * workers)  # every worker compiles the step once
    return run


def make_ray_round_trip():
    """A no-op Ray actor call: the unit a scheduled step pays several of."""
    import ray

    @ray.remote(num_cpus=0)
    class Echo:
        def echo(self, x=None):
            return x

    echo = Echo.remote()

    def run(n):
        for _ in range(n):
            ray.get(echo.echo.remote())
    return run


def timed(run, n: int) -> float:
    start = time.perf_counter()
    run(n)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", default="1,2,4")
    args = parser.parse_args()
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    runs = {"jax.jit, one device": make_jax(), "strategy.function, one device": make_local(),
            "a no-op Ray actor call": make_ray_round_trip()}
    for w in [int(w) for w in args.workers.split(",")]:
        runs[f"schedule, {w} worker{'s' if w > 1 else ''} + 1 ps"] = make_ps(w)
    for run in runs.values():
        run(3)
    times = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, run in runs.items():
            times[name].append(timed(run, args.steps) / args.steps)
    jax_time = statistics.median(times["jax.jit, one device"])
    local = statistics.median(times["strategy.function, one device"])
    print(f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; {args.steps} steps x {args.rounds} rounds; "
          "median per-step time")
    print(f"{'configuration':<34} {'ms/step':>8} {'steps/s':>8} {'/ jax.jit':>10} {'/ local call':>13}")
    for name, ts in times.items():
        t = statistics.median(ts)
        print(f"{name:<34} {t * 1e3:8.2f} {1 / t:8.0f} {t / jax_time:10.1f} {t / local:13.1f}")
    one = [k for k in times if k.startswith("schedule, 1 worker")]
    if one:
        overhead = statistics.median(times[one[0]]) - local
        print(f"per-step overhead of schedule (1 worker) over a local call: {overhead * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
