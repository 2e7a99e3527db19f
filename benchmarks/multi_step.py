"""Many steps per call: 20 steps of a small MLP (16-32-4, global batch 64, 8 simulated CPU
devices or every GPU, SGD on MEAN all-reduced gradients) as ONE strategax program (`for _ in
sx.range(20): strategy.run(step, args=(next(iterator),))`) against 20 one-step strategax
calls (`step(next(iterator))`), against the epoch written as TensorFlow's tutorial writes it
(`for batch in iterator: strategy.run(step, args=(batch,))` inside one function, issue 25),
and against the same 20 steps hand-written in JAX (one
`jax.jit(shard_map(lax.scan))` over pre-stacked batches, the gradients all-reduced as one
flat vector as strategax's fuse-collectives does), and against strategax's loop program alone
(its compiled program called on one call's batches, stacked and placed before the clock as the
scan's are: the program without the input pipeline). Every strategax side reads a new
iterator over the same host batches made inside the clock (`iter(dist_dataset)`, the default
prefetch buffer), so producing the batches (split, pad, place) and every `next()` is counted
on every side; `--prefilled` times the older protocol instead (the iterators' prefetch buffers
filled before the clock starts: the batches' placement not counted). Checks that all end with
the same weights, then prints median wall-clock times, ratios, and the ratios of process CPU
time (all threads; on a shared machine the less noisy figure).

Run: python benchmarks/multi_step.py [--rounds R] [--steps N] [--prefilled] [--device auto|cpu|gpu]
"""

import bench_device as device  # noqa: E402 - sets JAX's flags: before jax

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import jax  # noqa: E402
import jax.flatten_util  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import strategax as sx  # noqa: E402

LR, GLOBAL_BATCH, SIZES = 0.05, 64, (16, 32, 4)


def loss_fn(params, x, y):
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"] + params["b2"]
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))


def init_params() -> dict:
    k1, k2 = jax.random.split(jax.random.key(0))
    d_in, d_h, d_out = SIZES
    return {"w1": np.asarray(jax.random.normal(k1, (d_in, d_h)) * 0.1), "b1": np.zeros(d_h, np.float32),
            "w2": np.asarray(jax.random.normal(k2, (d_h, d_out)) * 0.1), "b2": np.zeros(d_out, np.float32)}


def strategax_model(strategy, steps: int):
    """Variables, the one-step function and the `steps`-step function."""
    with strategy.scope():
        params = {k: sx.Variable(v, name=k) for k, v in init_params().items()}

    def replica_step(batch):
        values = {k: v.read_value() for k, v in params.items()}
        loss, grads = jax.value_and_grad(loss_fn)(values, *batch)
        grads = sx.get_replica_context().all_reduce(sx.ReduceOp.MEAN, grads)
        for k, v in params.items():
            v.assign_sub(LR * grads[k])
        return loss

    @strategy.function
    def one_step(batch):
        return strategy.reduce(sx.ReduceOp.MEAN, strategy.run(replica_step, args=(batch,)))

    @strategy.function
    def many_steps(iterator):
        for _ in sx.range(steps):
            loss = strategy.run(replica_step, args=(next(iterator),))
        return strategy.reduce(sx.ReduceOp.MEAN, loss)

    @strategy.function
    def epoch(iterator):  # every batch left: one on-device loop
        for batch in iterator:
            loss = strategy.run(replica_step, args=(batch,))
        return strategy.reduce(sx.ReduceOp.MEAN, loss)

    return params, one_step, many_steps, epoch


def jax_scan(mesh, steps: int):
    """The same `steps` steps hand-written: jit(shard_map(scan)) over stacked batches."""
    def run(params, xs, ys):
        def body(p, xy):
            loss, grads = jax.value_and_grad(loss_fn)(p, *xy)
            flat, unravel = jax.flatten_util.ravel_pytree(grads)
            grads = unravel(lax.pmean(flat, "r"))
            return jax.tree.map(lambda a, g: a - LR * g, p, grads), lax.pmean(loss, "r")
        params, losses = lax.scan(body, params, (xs, ys))
        return params, losses[-1]
    mapped = jax.shard_map(run, mesh=mesh, in_specs=(P(), P(None, "r"), P(None, "r")),
                           out_specs=(P(), P()), check_vma=False)
    return jax.jit(mapped, donate_argnums=0)


def program_alone(fn, iterator):
    """A callable running `fn`'s compiled program on the batches of one call taken from
    `iterator` and placed once (stacked over the steps, as the hand-written scan is fed): the
    program alone, without the input pipeline. Reaches into strategax's internals (the
    specialization, its executable); the variables' new values are written back as a call
    writes them."""
    compiled, sig = fn._specialization((iterator,), {})
    args = compiled.global_args(sig)
    executable, first_var = compiled.executable_for(sig), len(args) - compiled.num_vars

    def run():
        outs = executable(*args[:first_var], *(store.argument(lay) for store, lay in compiled.var_slots))
        for (store, _), array in zip(compiled.var_slots, outs[len(outs) - compiled.num_vars:]):
            store.set(array)
        return outs[0]
    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    device.add_argument(parser)
    parser.add_argument("--steps", type=int, default=20, help="steps per program / per round")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--prefilled", action="store_true",
                        help="fill the iterators' prefetch buffers before the clock starts (placement not counted)")
    args = parser.parse_args()
    n = args.steps

    devices = device.devices()
    strategy, mesh = sx.MirroredStrategy(devices), Mesh(np.array(devices), ("r",))
    print(device.describe(devices))
    rng = np.random.default_rng(0)
    host = [(rng.normal(size=(GLOBAL_BATCH, SIZES[0])).astype(np.float32),
             rng.integers(0, SIZES[2], size=(GLOBAL_BATCH,)).astype(np.int32)) for _ in range(n)]
    options = sx.InputOptions(experimental_per_replica_buffer_size=n) if args.prefilled else None
    datasets = {name: strategy.experimental_distribute_dataset(host, options) for name in ("loop", "calls", "epoch")}

    def filled_iterator(name: str):
        """A fresh iterator over the n batches with all of them prefetched (--prefilled)."""
        iterator: Any = iter(datasets[name])
        iterator._peek()
        while iterator._source._queue.qsize() < n - 1:
            time.sleep(0.001)
        return iterator

    def fresh(name: str):
        """The iterator a timed side reads: made inside the clock unless --prefilled."""
        return filled_iterator_for[name] if args.prefilled else iter(datasets[name])

    loop_params, _, many_steps, _ = strategax_model(strategy, n)
    call_params, one_step, _, _ = strategax_model(strategy, n)
    epoch_params, _, _, epoch = strategax_model(strategy, n)

    def run_loop():
        return many_steps(fresh("loop"))

    def run_epoch():
        return epoch(fresh("epoch"))

    def run_calls():
        iterator = fresh("calls")
        for _ in range(n):
            loss = one_step(next(iterator))
        return loss

    # Same weights: one round of each from the same start.
    filled_iterator_for = {name: filled_iterator(name) for name in datasets} if args.prefilled else {}
    jax.block_until_ready(run_loop()), jax.block_until_ready(run_calls()), jax.block_until_ready(run_epoch())
    for k in loop_params:
        np.testing.assert_allclose(loop_params[k].numpy(), call_params[k].numpy(), rtol=2e-5, atol=1e-6)
        np.testing.assert_allclose(epoch_params[k].numpy(), call_params[k].numpy(), rtol=2e-5, atol=1e-6)
    print(f"same weights after {n} steps: max |difference| "
          f"{max(float(np.abs(loop_params[k].numpy() - call_params[k].numpy()).max()) for k in loop_params):.2e}")

    scan = jax_scan(mesh, n)
    stacked = NamedSharding(mesh, P(None, "r"))
    xs = jax.device_put(np.stack([x for x, _ in host]), stacked)
    ys = jax.device_put(np.stack([y for _, y in host]), stacked)
    jax_params = {"p": jax.device_put(init_params(), NamedSharding(mesh, P()))}

    def run_scan():
        jax_params["p"], loss = scan(jax_params["p"], xs, ys)
        return loss

    jax.block_until_ready(run_scan())
    run_program = program_alone(many_steps, iter(datasets["loop"]))
    jax.block_until_ready(run_program())
    t_loop, t_calls, t_epoch, t_scan, t_program = [], [], [], [], []
    c_loop, c_calls, c_epoch = [], [], []
    for _ in range(args.rounds):
        for name, fn, out, cpu in (("loop", run_loop, t_loop, c_loop), ("calls", run_calls, t_calls, c_calls),
                                   ("epoch", run_epoch, t_epoch, c_epoch), (None, run_scan, t_scan, None),
                                   (None, run_program, t_program, None)):
            if name is not None and args.prefilled:
                filled_iterator_for[name] = filled_iterator(name)
            start, start_cpu = time.perf_counter(), time.process_time()
            jax.block_until_ready(fn())
            out.append(time.perf_counter() - start)
            if cpu is not None:
                cpu.append(time.process_time() - start_cpu)
    ratio = statistics.median(a / b for a, b in zip(t_loop, t_calls))
    cpu_ratio = statistics.median(a / b for a, b in zip(c_loop, c_calls))
    vs_jax = statistics.median(a / b for a, b in zip(t_loop, t_scan))
    ms = lambda ts: statistics.median(ts) * 1e3  # noqa: E731
    print(f"{n} steps   one program {ms(t_loop):7.3f} ms   {n} one-step calls {ms(t_calls):7.3f} ms   "
          f"median ratio {ratio:.3f}  (target <= 0.6)   CPU time {cpu_ratio:.3f}")
    how = "prefilled before the clock" if args.prefilled else "made inside the clock: every batch placed, taken counted"
    print(f"iterator {how}")
    print(f"{n} steps   one program {ms(t_loop):7.3f} ms   hand-written jit(shard_map(scan)) "
          f"{ms(t_scan):7.3f} ms   median ratio {vs_jax:.3f}")
    program_vs_jax = statistics.median(a / b for a, b in zip(t_program, t_scan))
    print(f"{n} steps   the program alone (batches stacked and placed before the clock, as the scan's) "
          f"{ms(t_program):7.3f} ms   hand-written scan {ms(t_scan):7.3f} ms   median ratio {program_vs_jax:.3f}"
          "  (target <= 1.1 on a GPU)")
    epoch_vs_calls = statistics.median(a / b for a, b in zip(t_epoch, t_calls))
    epoch_vs_jax = statistics.median(a / b for a, b in zip(t_epoch, t_scan))
    epoch_cpu = statistics.median(a / b for a, b in zip(c_epoch, c_calls))
    print(f"{n} steps   `for batch in iterator` {ms(t_epoch):7.3f} ms   ratio to {n} one-step calls "
          f"{epoch_vs_calls:.3f} (CPU time {epoch_cpu:.3f})   to hand-written scan {epoch_vs_jax:.3f}")


if __name__ == "__main__":
    main()
