"""What the padded-row masks cost on a full batch: the MLP training step (256-512-10, relu,
log-softmax cross-entropy as jnp.sum(...) / GLOBAL_BATCH, global batch 1024, 8 simulated CPU
devices, SGD with all-reduced gradients) on a batch from `experimental_distribute_dataset`
(so the program takes the real row counts and `mask-padding` masks every op that combines
rows), against the same step compiled with the default pipeline minus `mask-padding`
(padded rows would count; on a full batch there are none). Both take the same batch, are
checked to give the same parameters, and are timed interleaved in one process. Prints the
masks the pass inserted, XLA's cost analysis of both compiled programs (flops and bytes
accessed: deterministic, unlike times on a shared machine) and the median step-time ratio
(masked / unmasked).

Run: python benchmarks/padding_masks.py [--steps N] [--rounds R]
"""
import os

import bench_device as device  # noqa: E402 - sets JAX's flags: before jax

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strategax as sx  # noqa: E402
from optimizer_step import BATCH, loss_fn  # noqa: E402
from step_vs_jax import init_params, strategy_and_mesh, timed  # noqa: E402
from strategax.passes import manager  # noqa: E402

LR = 0.1


def make_step(strategy):
    @strategy.function
    def step(params, batch):
        def replica_step(params, batch):
            grads = jax.grad(loss_fn)(params, *batch)
            grads = sx.get_replica_context().all_reduce("sum", grads)
            return jax.tree.map(lambda p, g: p - LR * g, params, grads)
        return strategy.run(replica_step, args=(params, batch))
    return step


def compiled_without_masks(step, *args):
    """Compile `step` for `args` with the default pipeline minus mask-padding."""
    saved = manager.DEFAULT_PIPELINE
    manager.DEFAULT_PIPELINE = tuple(p for p in saved if p != "mask-padding")
    try:
        step(*args)
    finally:
        manager.DEFAULT_PIPELINE = saved


def main() -> None:
    parser = argparse.ArgumentParser()
    device.add_argument(parser)
    parser.add_argument("--steps", type=int, default=20, help="steps per timing round")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()

    strategy, _ = strategy_and_mesh()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(BATCH, 256)).astype(np.float32)
    y = rng.integers(0, 10, size=(BATCH,)).astype(np.int32)
    batch = next(iter(strategy.experimental_distribute_dataset([(x, y)])))
    params = jax.tree.map(np.asarray, init_params())

    masked, unmasked = make_step(strategy), make_step(strategy)
    compiled_without_masks(unmasked, params, batch)
    ir_masked, ir_plain = masked.ir(params, batch), unmasked.ir(params, batch)
    print(f"sx.mask_rows ops: masked program {ir_masked.count('sx.mask_rows')}, "
          f"unmasked program {ir_plain.count('sx.mask_rows')}")
    a, b = masked(params, batch), unmasked(params, batch)
    for k in a:
        np.testing.assert_allclose(np.asarray(strategy.experimental_local_results(a[k])[0]),
                                   np.asarray(strategy.experimental_local_results(b[k])[0]), rtol=1e-5, atol=1e-7)

    costs = []
    for fn in (masked, unmasked):
        cost = fn.lowered(params, batch).compile().cost_analysis()
        cost = cost[0] if isinstance(cost, (list, tuple)) else cost
        costs.append((cost.get("flops", 0.0), cost.get("bytes accessed", 0.0)))
    (fm, bm), (fp, bp) = costs
    print(f"XLA cost per replica: flops {fm:.4g} vs {fp:.4g} (ratio {fm / fp:.4f}), bytes accessed "
          f"{bm:.4g} vs {bp:.4g} (ratio {bm / bp:.4f})")

    ratios, t_masked, t_plain = [], [], []
    for _ in range(args.rounds):
        tm = timed(lambda: masked(params, batch), args.steps)
        tp = timed(lambda: unmasked(params, batch), args.steps)
        t_masked.append(tm)
        t_plain.append(tp)
        ratios.append(tm / tp)
    print(f"step: masked {statistics.median(t_masked) * 1e3:.2f} ms, unmasked "
          f"{statistics.median(t_plain) * 1e3:.2f} ms, median ratio {statistics.median(ratios):.3f} "
          f"(target <= 1.03)")


if __name__ == "__main__":
    main()
