"""Step time of the data-parallel MLP (256-512-10, global batch 1024, SGD, MEAN all_reduce)
on W worker processes x D simulated CPU devices (MultiWorkerMirroredStrategy over
jax.distributed + gloo on loopback; 2 x 4 and 4 x 2 by default) against 1 process x 8 devices
(MirroredStrategy), each next to the same step hand-written with `jax.shard_map` + `lax.pmean`
in the same process(es). Every step waits for its result (the multi-worker runtime bounds each
step). Prints median step times, ratios, and the bytes each worker sends per step.

Run: PYTHONPATH=. python benchmarks/multi_worker.py [--steps N] [--rounds R] [--layouts 2x4,4x2]
"""
import os
import sys

WORKER = os.environ.get("STRATEGAX_BENCH_WORKER") == "1"
import bench_device as device  # noqa: E402 - sets JAX's flags (a worker's are in its environment): before jax

import argparse  # noqa: E402
import json  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

import strategax as sx  # noqa: E402

if WORKER:  # join the cluster before any JAX computation
    STRATEGY = sx.MultiWorkerMirroredStrategy()

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_vs_jax import loss_fn, make_strategax_step, sgd  # noqa: E402


def make_jax_step(mesh):
    def replica_step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return sgd(params, lax.pmean(grads, "replica")), lax.pmean(loss, "replica")
    return jax.jit(jax.shard_map(replica_step, mesh=mesh, in_specs=(P(), P("replica"), P("replica")),
                                 out_specs=(P(), P()), check_vma=False))


def inputs():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1024, 256)).astype(np.float32)
    y = rng.integers(0, 10, size=(1024,)).astype(np.int32)
    r = np.random.default_rng(1)
    params = {"w1": (r.normal(size=(256, 512)) * 0.05).astype(np.float32), "b1": np.zeros(512, np.float32),
              "w2": (r.normal(size=(512, 10)) * 0.05).astype(np.float32), "b2": np.zeros(10, np.float32)}
    return x, y, params


def global_array(mesh, value, spec):
    """A global array over `mesh` from a value every process holds whole."""
    sharding = NamedSharding(mesh, spec)
    return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])


def measure(strategy, steps: int, rounds: int) -> dict:
    """Median step time of strategax and of the hand-written step, interleaved, and the bytes."""
    x, y, params0 = inputs()
    mesh = Mesh(np.array(strategy._devices), ("replica",))
    sx_step = make_strategax_step(strategy)
    batch = next(iter(strategy.experimental_distribute_dataset([(x, y)])))
    jax_step = make_jax_step(mesh)
    gx, gy = global_array(mesh, x, P("replica")), global_array(mesh, y, P("replica"))
    state = {"sx": params0, "jax": jax.tree.map(lambda v: global_array(mesh, v, P()), params0)}

    def run_sx():
        state["sx"], loss = sx_step(state["sx"], batch)
        return jax.block_until_ready(loss)

    def run_jax():
        state["jax"], loss = jax_step(state["jax"], gx, gy)
        return jax.block_until_ready(loss)

    _, l_sx = sx_step(params0, batch)
    _, l_jax = jax_step(state["jax"], gx, gy)
    np.testing.assert_allclose(float(l_sx), float(np.asarray(l_jax.addressable_shards[0].data)), rtol=1e-5)
    for _ in range(3):
        run_sx(), run_jax()
    t_sx, t_jax = [], []
    for _ in range(rounds):
        for fn, out in ((run_sx, t_sx), (run_jax, t_jax)):
            start = time.perf_counter()
            for _ in range(steps):
                fn()
            out.append((time.perf_counter() - start) / steps)
    stats = sx_step.stats(state["sx"], batch)
    local = strategy._num_local_replicas
    return {"sx": statistics.median(t_sx), "jax": statistics.median(t_jax),
            "ratio": statistics.median(a / b for a, b in zip(t_sx, t_jax)),
            "bytes_per_replica": stats.bytes_per_replica, "collectives": stats.count,
            "local_replicas": local, "bytes_per_worker": stats.bytes_per_replica * local}


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def loopback_tx_bytes() -> int:
    with open("/proc/net/dev") as f:
        for line in f:
            if line.strip().startswith("lo:"):
                return int(line.split(":", 1)[1].split()[8])
    return 0


def run_workers(num_workers: int, devices: int, args) -> list[dict]:
    addresses = [f"127.0.0.1:{p}" for p in free_ports(num_workers)]
    procs = []
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        for i in range(num_workers):
            env = dict(os.environ, STRATEGAX_BENCH_WORKER="1", JAX_PLATFORMS="cpu",
                       XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
                       PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
                       TF_CONFIG=json.dumps({"cluster": {"worker": addresses},
                                             "task": {"type": "worker", "index": i}}))
            procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--steps", str(args.steps),
                                           "--rounds", str(args.rounds)], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
        outs = [p.communicate(timeout=600)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return [json.loads(o.strip().splitlines()[-1]) for o in outs]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10, help="steps per timing round")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--layouts", default="2x4,4x2", help="WORKERSxDEVICES,... (8 devices in all)")
    device.add_argument(parser)
    args = parser.parse_args()
    if not WORKER and device.platform() != "cpu":
        device.not_run("multi_worker", "its workers are processes over simulated CPU devices (gloo collectives)")
    if WORKER:
        tx0 = loopback_tx_bytes()
        result = measure(STRATEGY, args.steps, args.rounds)
        result["loopback_tx"] = loopback_tx_bytes() - tx0
        result["timed_steps"] = 2 * args.rounds * args.steps + 8
        print(json.dumps(result), flush=True)
        return
    print(device.describe(device.devices()))
    one = measure(sx.MirroredStrategy(device.devices()), args.steps, args.rounds)
    print(f"1 process x 8 devices   strategax {one['sx'] * 1e3:8.2f} ms  hand-written {one['jax'] * 1e3:8.2f} ms  "
          f"ratio {one['ratio']:.3f}")
    for layout in args.layouts.split(","):
        workers, devices = (int(v) for v in layout.split("x"))
        results = run_workers(workers, devices, args)
        w = results[0]
        print(f"{workers} processes x {devices} devices strategax {w['sx'] * 1e3:8.2f} ms  hand-written "
              f"{w['jax'] * 1e3:8.2f} ms  ratio {w['ratio']:.3f}   (workers 1..: "
              + ", ".join(f"{r['sx'] * 1e3:.2f} / {r['jax'] * 1e3:.2f} ms" for r in results[1:]) + ")")
        print(f"  multi-process / single-process step time: strategax {w['sx'] / one['sx']:.2f}x, "
              f"hand-written {w['jax'] / one['jax']:.2f}x")
        print(f"  collectives per step {w['collectives']}; bytes sent per replica per step (ring model) "
              f"{w['bytes_per_replica']}; per worker ({w['local_replicas']} replicas, each a gloo rank) "
              f"{w['bytes_per_worker']}")
        per_step = sum(r["loopback_tx"] for r in results) / workers / w["timed_steps"]
        print(f"  loopback bytes per worker per step, measured (/proc/net/dev, whole machine, both programs): "
              f"{per_step:.0f}")

if __name__ == "__main__":
    main()
