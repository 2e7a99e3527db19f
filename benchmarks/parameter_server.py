"""Steps per second of a small model trained on parameter servers (ParameterServerStrategy on a
local Ray cluster: 1, 2 and 4 workers of one CPU device each, 1 parameter server), against the
same step as a local `strategy.function` call (OneDeviceStrategy) and hand-written in JAX
(`jax.jit`, parameters kept on the device), all in this process's view, timed interleaved; and a
no-op Ray actor call (what each of a step's three messages cost before they moved to direct
channels, issue 36).

The model: an MLP 64-128-10 (9.6k parameters, 38 KB), a batch of 64, SGD. Each scheduled step
fetches the parameters from the server, runs the compiled step on the worker and sends the
update back (two round trips to the server and one to the worker, through the job's direct
TCP channels), so on a model this small the figures measure the per-step overhead of
`schedule`, not compute.

Against TensorFlow 2.21 (when an interpreter with it is found: TF_PYTHON, default
/work/tfvenv/bin/python; `--no-tf` skips it): benchmarks/parameter_server_tf.py runs the same
MLP step and a trivial step (`assign_add(1)`) on TF's ParameterServerStrategy (2 workers, 1 ps,
in-process servers) in a child process, right after this side's rounds; the summary sets both
side by side for 2 workers + 1 ps: steps per second of the MLP step, ms per trivial scheduled
step, and seconds to bring the cluster up (here: starting the local Ray cluster, then the
actors until the coordinator can schedule; TF: its servers, strategy and coordinator).

Run: PYTHONPATH=. python benchmarks/parameter_server.py [--steps 50] [--trivial 200] [--rounds 5]
     [--workers 1,2,4] [--no-tf]
"""
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
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


def make_cluster(workers: int):
    """A ParameterServerStrategy of `workers` workers and 1 ps, and its coordinator."""
    resolver = sx.cluster_resolver.RayClusterResolver(num_workers=workers, num_ps=1)
    strategy = sx.experimental.ParameterServerStrategy(resolver)
    return strategy, sx.experimental.coordinator.ClusterCoordinator(strategy)


def scheduled(coordinator, step, warm: int):
    """Schedule `step` n times and join; every worker runs (and compiles) it `warm` times first."""
    def run(n):
        for _ in range(n):
            coordinator.schedule(step)
        coordinator.join()
    run(warm)
    return run


def make_ps(workers: int, cluster=None):
    strategy, coordinator = cluster or make_cluster(workers)
    return scheduled(coordinator, make_step(strategy), 2 * workers)


def make_trivial(cluster):
    """The smallest scheduled step: one `assign_add(1)` of a variable on the server."""
    strategy, coordinator = cluster
    with strategy.scope():
        counter = sx.Variable(np.int32(0), name="counter")

    @strategy.function
    def trivial():
        counter.assign_add(1)
    return scheduled(coordinator, trivial, 10), counter


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


def cpu_seconds(processes: dict) -> dict:
    """CPU seconds (user + system) used so far by each group of processes ({} without psutil)."""
    try:
        import psutil
    except ImportError:
        return {}
    out = {}
    for name, pids in processes.items():
        total = 0.0
        for pid in pids:
            try:
                t = psutil.Process(pid).cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
        out[name] = total
    return out


def timed(run, n: int) -> float:
    start = time.perf_counter()
    run(n)
    return time.perf_counter() - start


def tf_figures(steps: int, trivial: int, rounds: int) -> dict | None:
    """TensorFlow's side (benchmarks/parameter_server_tf.py in a child process), or None."""
    python = os.environ.get("TF_PYTHON", "/work/tfvenv/bin/python")
    if not os.path.exists(python):
        print(f"TensorFlow: not run ({python} not found; set TF_PYTHON to an interpreter with tensorflow 2.21)")
        return None
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "parameter_server_tf.py")
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS", "PYTHONPATH")}
    p = subprocess.run([python, script, "--steps", str(steps), "--trivial", str(trivial), "--rounds", str(rounds)],
                       capture_output=True, text=True, env=env, timeout=1800)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    if p.returncode or not lines:
        print(f"TensorFlow: failed ({p.stderr.strip().splitlines()[-1:]})")
        return None
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--trivial", type=int, default=200, help="trivial steps a round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--no-tf", action="store_true", help="skip TensorFlow's side")
    args = parser.parse_args()
    from strategax.cluster.ray import connect

    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    connect(None)  # what RayClusterResolver(address=None) does: a local Ray cluster
    ray_up = time.perf_counter() - start
    start = time.perf_counter()
    pair = make_cluster(2)  # the actors, until the coordinator can schedule
    actors_up = time.perf_counter() - start
    runs = {"jax.jit, one device": make_jax(), "strategy.function, one device": make_local(),
            "a no-op Ray actor call": make_ray_round_trip()}
    for w in [int(w) for w in args.workers.split(",")]:
        runs[f"schedule, {w} worker{'s' if w > 1 else ''} + 1 ps"] = make_ps(w, pair if w == 2 else None)
    trivial, counter = make_trivial(pair)
    for run in runs.values():
        run(3)
    times: dict[str, list] = {name: [] for name in runs}
    trivial_times, trivial_cpu = [], []
    cluster = pair[0]._cluster
    processes = {"coordinator": [os.getpid()], "workers": cluster.worker_pids, "ps": cluster.server_pids}
    for _ in range(args.rounds):
        for name, run in runs.items():
            times[name].append(timed(run, args.steps) / args.steps)
        before = cpu_seconds(processes)
        trivial_times.append(timed(trivial, args.trivial) / args.trivial)
        after = cpu_seconds(processes)
        trivial_cpu.append({k: (after[k] - before[k]) / args.trivial for k in after} if after and before else {})
    assert int(counter.numpy()) == 10 + args.rounds * args.trivial  # every scheduled step ran once
    load_after = os.getloadavg()[0]
    jax_time = statistics.median(times["jax.jit, one device"])
    local = statistics.median(times["strategy.function, one device"])
    print(f"{os.cpu_count()} cores, load {load_before:.1f} -> {load_after:.1f}; {args.steps} steps x "
          f"{args.rounds} rounds; median per-step time")
    print(f"{'configuration':<34} {'ms/step':>8} {'steps/s':>8} {'/ jax.jit':>10} {'/ local call':>13}")
    for name, ts in times.items():
        t = statistics.median(ts)
        print(f"{name:<34} {t * 1e3:8.2f} {1 / t:8.0f} {t / jax_time:10.1f} {t / local:13.1f}")
    one = [k for k in times if k.startswith("schedule, 1 worker")]
    if one:
        overhead = statistics.median(times[one[0]]) - local
        print(f"per-step overhead of schedule (1 worker) over a local call: {overhead * 1e3:.2f} ms")

    ours = {"steps/s": 1 / statistics.median(times["schedule, 2 workers + 1 ps"]) if "schedule, 2 workers + 1 ps"
            in times else None, "trivial ms": statistics.median(trivial_times) * 1e3, "up s": ray_up + actors_up}
    tf = None if args.no_tf else tf_figures(args.steps, args.trivial, args.rounds)
    theirs = None if tf is None else {"steps/s": 1 / statistics.median(tf["step"]),
                                      "trivial ms": statistics.median(tf["trivial"]) * 1e3, "up s": tf["up_s"]}
    print(f"\n2 workers + 1 ps, {args.rounds} rounds, medians (trivial: {args.trivial} scheduled assign_add a round)")
    print(f"{'':<28} {'strategax':>10} {'TF ' + tf['tf'] if tf else 'TF':>10} {'ratio':>7}")
    for key, label in (("steps/s", "MLP steps/s"), ("trivial ms", "trivial step, ms"), ("up s", "cluster up, s")):
        mine = ours[key]
        other = None if theirs is None else theirs[key]
        ratio = f"{mine / other:7.2f}" if mine is not None and other else ""
        print(f"{label:<28} {mine if mine is None else f'{mine:10.2f}':>10} "
              f"{'' if other is None else f'{other:10.2f}':>10} {ratio}")
    print(f"cluster up here: Ray {ray_up:.2f} s + actors {actors_up:.2f} s"
          + ("" if tf is None else f"; TF: import {tf['import_s']:.2f} s (not counted), load {tf['load']:.1f}"))
    if trivial_cpu and trivial_cpu[0]:
        print("CPU time per trivial step (median of rounds, ms): " + ", ".join(
            f"{k} {statistics.median(c[k] for c in trivial_cpu) * 1e3:.2f}" for k in trivial_cpu[0]))
    print("per-round ms, trivial: strategax " + " ".join(f"{t * 1e3:.2f}" for t in trivial_times)
          + ("" if tf is None else "; TF " + " ".join(f"{t * 1e3:.2f}" for t in tf["trivial"])))


if __name__ == "__main__":
    main()
