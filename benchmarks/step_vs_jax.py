"""The data-parallel MLP step with strategax against the same step hand-written with
`jax.shard_map`, timed interleaved in one process: `--model small` (256-512-10, global batch
1024; the CPU figure), `--model large` (4096-8192-8192-1000, global batch 8192; a GPU's),
over 8 simulated CPU devices or every GPU (`--device`, benchmarks/bench_device.py). Prints the
median step-time ratio and the per-call dispatch overhead ratio of a cached strategax call
against a cached `jax.jit` call, each with an identical-JAX control.

Run: python benchmarks/step_vs_jax.py [--steps N] [--rounds R] [--model small|large] [--device auto|cpu|gpu]
"""
import bench_device as device  # noqa: E402 - sets JAX's flags: before jax

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import strategax as sx  # noqa: E402

LR = 0.05
MODELS = {"small": ((256, 512, 10), 1024), "large": ((4096, 8192, 8192, 1000), 8192)}  # layer sizes, global batch


def loss_fn(params, x, y):
    """Cross-entropy of an MLP with layers w1/b1, w2/b2, ... (ReLU between them)."""
    h, layers = x, len(params) // 2
    for i in range(1, layers + 1):
        h = h @ params[f"w{i}"] + params[f"b{i}"]
        if i < layers:
            h = jax.nn.relu(h)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(h), y[:, None], axis=1))


def sgd(params, grads):
    return jax.tree.map(lambda p, g: p - LR * g, params, grads)


def make_strategax_step(strategy, options=None):
    """The SGD step; `options` (sx.CommunicationOptions) for the gradients' all_reduce."""
    @strategy.function
    def step(params, batch):
        def replica_step(params, batch):
            loss, grads = jax.value_and_grad(loss_fn)(params, *batch)
            grads = sx.get_replica_context().all_reduce(sx.ReduceOp.MEAN, grads, options=options)
            return sgd(params, grads), loss
        params, loss = strategy.run(replica_step, args=(params, batch))
        return params, strategy.reduce(sx.ReduceOp.MEAN, loss)
    return step


def make_jax_step(mesh):
    def replica_step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        grads = lax.pmean(grads, "r")
        return sgd(params, grads), lax.pmean(loss, "r")
    mapped = jax.shard_map(replica_step, mesh=mesh, in_specs=(P(), P("r"), P("r")),
                           out_specs=(P(), P()), check_vma=False)
    return jax.jit(mapped)


def strategy_and_mesh():
    """A MirroredStrategy over the run's devices (8 CPU ones, or every GPU) and the
    hand-written code's mesh over the same ones; prints which devices they are."""
    devices = device.devices()
    print(device.describe(devices))
    return sx.MirroredStrategy(devices), Mesh(np.array(devices), ("r",))


def init_params(sizes=MODELS["small"][0]) -> dict:
    """The MLP's parameters (by default 256-512-10, the same in every benchmark)."""
    keys = jax.random.split(jax.random.key(0), len(sizes) - 1)
    params = {}
    for i, (key, d_in, d_out) in enumerate(zip(keys, sizes, sizes[1:]), 1):
        params[f"w{i}"], params[f"b{i}"] = jax.random.normal(key, (d_in, d_out)) * 0.05, jnp.zeros(d_out)
    return params


def global_array(value):
    """The one array behind a strategax output (with one replica the output is that array)."""
    return value._global[0] if isinstance(value, sx.DistributedValues) else value


def make_batch(sizes, batch: int):
    rng = np.random.default_rng(0)
    return (rng.normal(size=(batch, sizes[0])).astype(np.float32),
            rng.integers(0, sizes[-1], size=(batch,)).astype(np.int32))


def timed(fn, n, cpu: list | None = None):
    """Wall seconds per call of `fn` over n calls; with `cpu`, also appends the process CPU
    seconds per call (all threads: on a shared machine the steadier figure)."""
    out = None
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(n):
        out = fn()
    jax.block_until_ready(out)
    if cpu is not None:
        cpu.append((time.process_time() - cpu_start) / n)
    return (time.perf_counter() - start) / n


def abba(a, b, rounds: int, n: int) -> tuple[list, list, list]:
    """Times `a` and `b` (n calls each) `rounds` times, alternating which goes first; returns
    both sides' per-call times and the per-round ratios a/b."""
    t_a, t_b = [], []
    for i in range(rounds):
        if i % 2:
            t_b.append(timed(b, n)), t_a.append(timed(a, n))
        else:
            t_a.append(timed(a, n)), t_b.append(timed(b, n))
    return t_a, t_b, [x / y for x, y in zip(t_a, t_b)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20, help="steps per timing round")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--model", choices=sorted(MODELS), default="small")
    device.add_argument(parser)
    args = parser.parse_args()

    strategy, mesh = strategy_and_mesh()
    n = strategy.num_replicas_in_sync
    sizes, global_batch = MODELS[args.model]
    x, y = make_batch(sizes, global_batch)
    params0 = init_params(sizes)
    rtol = 1e-5 if device.platform() == "cpu" else 2e-3  # GPUs multiply float32 in TF32 by default

    # strategax: the batch as a distributed dataset element, parameters as returned by the step.
    sx_step = make_strategax_step(strategy)
    batch = next(iter(strategy.experimental_distribute_dataset([(x, y)])))
    # the same batch as per-replica pieces: no padded rows to mask, the hand-written program
    rows = global_batch // n
    pieces = strategy.experimental_distribute_values_from_function(
        lambda c: (x[c.replica_id_in_sync_group * rows:][:rows], y[c.replica_id_in_sync_group * rows:][:rows]))
    sx_state = {"params": params0, "unmasked": params0}

    # hand-written: global arrays already sharded over the replicas.
    jax_step = make_jax_step(mesh)
    gx = jax.device_put(x, NamedSharding(mesh, P("r")))
    gy = jax.device_put(y, NamedSharding(mesh, P("r")))
    jax_state = {"params": jax.device_put(params0, NamedSharding(mesh, P()))}
    jax_twin = make_jax_step(mesh)  # the control: an identical hand-written step
    jax_state["twin"] = jax_state["params"]

    def run_sx():
        sx_state["params"], loss = sx_step(sx_state["params"], batch)
        return loss

    def run_unmasked():
        sx_state["unmasked"], loss = sx_step(sx_state["unmasked"], pieces)
        return loss

    def run_jax():
        jax_state["params"], loss = jax_step(jax_state["params"], gx, gy)
        return loss

    def run_twin():
        jax_state["twin"], loss = jax_twin(jax_state["twin"], gx, gy)
        return loss

    # Same numbers first: one step of each from the same start.
    p_sx, l_sx = sx_step(params0, batch)
    p_jax, l_jax = jax_step(jax_state["params"], gx, gy)
    np.testing.assert_allclose(float(l_sx), float(l_jax), rtol=rtol)
    np.testing.assert_allclose(float(sx_step(params0, pieces)[1]), float(l_jax), rtol=rtol)
    for _ in range(3):
        run_sx(), run_jax(), run_unmasked(), run_twin()

    ratios, t_sx, t_jax, ratios_u, t_u, control = [], [], [], [], [], []
    cpu_ratios, cpu_ratios_u = [], []
    order = [run_sx, run_jax, run_unmasked, run_twin]
    for r in range(args.rounds):  # each round starts with a different one of the four
        cpu: dict = {fn: [] for fn in order}
        times = {fn: timed(fn, args.steps, cpu[fn]) for fn in order[r % 4:] + order[:r % 4]}
        a, b, c = times[run_sx], times[run_jax], times[run_unmasked]
        t_sx.append(a), t_jax.append(b), ratios.append(a / b), t_u.append(c), ratios_u.append(c / b)
        control.append(times[run_twin] / b)
        cpu_ratios.append(cpu[run_sx][0] / cpu[run_jax][0]), cpu_ratios_u.append(cpu[run_unmasked][0] / cpu[run_jax][0])
    name = f"MLP step ({'-'.join(map(str, sizes))}, batch {global_batch})"
    print(f"{name}  strategax {statistics.median(t_sx) * 1e3:8.3f} ms   "
          f"jax.shard_map {statistics.median(t_jax) * 1e3:8.3f} ms   "
          f"median ratio {statistics.median(ratios):.3f}  (target <= 1.05; dataset batch, padded rows masked)"
          f"  CPU time {statistics.median(cpu_ratios):.3f}")
    print(f"{name}  strategax {statistics.median(t_u) * 1e3:8.3f} ms   "
          f"(per-replica batch, no masks: the hand-written program)  "
          f"median ratio {statistics.median(ratios_u):.3f}  (target <= 1.02; "
          f"control: two identical hand-written steps {statistics.median(control):.3f})"
          f"  CPU time {statistics.median(cpu_ratios_u):.3f}")

    # Dispatch overhead: a trivial cached program, called many times. Blocks of 100 calls in
    # ABBA order (the order alternates, so neither side always runs first); the same comparison
    # of two identical jax.jit functions is the control: how far apart equal costs measure here.
    small = strategy.experimental_distribute_values_from_function(lambda ctx: jnp.float32(ctx.replica_id_in_sync_group))
    sx_tiny = strategy.function(lambda v: strategy.run(lambda a: a + 1.0, args=(v,)))
    g_small = jax.device_put(np.arange(n, dtype=np.float32), NamedSharding(mesh, P("r")))

    def tiny():
        return jax.jit(jax.shard_map(lambda a: a + 1.0, mesh=mesh, in_specs=P("r"), out_specs=P("r"),
                                     check_vma=False))
    jax_tiny, jax_twin = tiny(), tiny()
    np.testing.assert_allclose(np.asarray(global_array(sx_tiny(small))).reshape(-1), np.asarray(jax_tiny(g_small)))
    sx_call = (lambda: sx_tiny(small)) if n == 1 else (lambda: sx_tiny(small)._global[0])
    calls = {"sx": sx_call, "jax": lambda: jax_tiny(g_small), "twin": lambda: jax_twin(g_small)}
    for call in calls.values():
        for _ in range(100):
            call()
    d_sx, d_jax, d_ratios = abba(calls["sx"], calls["jax"], args.rounds * 4, 100)
    _, _, control = abba(calls["twin"], calls["jax"], args.rounds * 4, 100)
    print(f"dispatch   strategax {statistics.median(d_sx) * 1e6:8.1f} us   "
          f"jax.jit       {statistics.median(d_jax) * 1e6:8.1f} us   "
          f"median ratio {statistics.median(d_ratios):.3f}  (target <= 1.05; "
          f"control: two identical jax.jit functions {statistics.median(control):.3f})")

    # strategax's own Python per cached call: the same call with the jax.jit function stubbed
    # out (it returns a ready result), CPU time of this thread.
    names = sx_tiny._fast.call.__globals__  # what the generated call reads (trace/fast_call.py)
    real = names["jitted"]
    ready = real(global_array(small))
    names["jitted"] = lambda *a: ready
    own = []
    for _ in range(7):
        start = time.thread_time()
        for _ in range(20000):
            sx_tiny(small)
        own.append((time.thread_time() - start) / 20000)
    names["jitted"] = real
    print(f"python     strategax {statistics.median(own) * 1e6:8.2f} us per cached call, "
          f"min {min(own) * 1e6:.2f}  (target < 3 us)")


if __name__ == "__main__":
    main()
