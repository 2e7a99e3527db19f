"""Checkpoint saves during training: the MLP step of optimizer_step.py (sx.Optimizer(adam),
8 simulated CPU devices) widened to HIDDEN units, plus a HIDDEN x HIDDEN matrix the step does
not train (default 2048: 22 MiB of parameters and Adam state in the checkpoint), saved through
sx.CheckpointManager synchronously and with async_save, against orbax alone saving the same arrays (`ocp.Checkpointer` /
`ocp.AsyncCheckpointer` of a plain dict of jax arrays: the same work without strategax).

Prints, as medians over ROUNDS saves: the step time without a save; the time a save blocks
the training loop (sync, and async until `save()` returns) and the time until it is on disk
(training steps run meanwhile in the async case), strategax against orbax alone; the time of
the steps that run while an async write is in flight, against the step without a save.

Run: python benchmarks/checkpoint_save.py [--hidden H] [--rounds R]
"""
import os

import bench_device as device  # noqa: E402 - sets JAX's flags: before jax

import argparse  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
import orbax.checkpoint as ocp  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strategax as sx  # noqa: E402
from optimizer_step import BATCH, make_strategax_step  # noqa: E402
from step_vs_jax import strategy_and_mesh  # noqa: E402


def wide_params(hidden: int) -> dict:
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    return {"w1": np.asarray(jax.random.normal(k1, (256, hidden)) * 0.05), "b1": np.zeros(hidden, np.float32),
            "w2": np.asarray(jax.random.normal(k2, (hidden, 10)) * 0.05), "b2": np.zeros(10, np.float32),
            "w3": np.asarray(jax.random.normal(k1, (hidden, hidden)) * 0.01)}


def main() -> None:
    parser = argparse.ArgumentParser()
    device.add_argument(parser)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    strategy, _ = strategy_and_mesh()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(BATCH, 256)).astype(np.float32)
    y = rng.integers(0, 10, size=(BATCH,)).astype(np.int32)
    params0 = wide_params(args.hidden)
    step, variables, optimizer = make_strategax_step(strategy, params0, optax.adam(1e-3))
    batch = next(iter(strategy.experimental_distribute_dataset([(x, y)])))

    def run_step() -> float:
        start = time.perf_counter()
        jax.block_until_ready(step(*batch))
        return time.perf_counter() - start

    for _ in range(3):
        run_step()
    plain = statistics.median(run_step() for _ in range(30))
    root = tempfile.mkdtemp(dir=os.environ.get("BENCH_DIR"))
    checkpoint = sx.Checkpoint(params=variables, optimizer=optimizer)
    stored = {"params": variables, "optimizer": {"iterations": optimizer.iterations,
                                                 "slots": [s for _, _, s in optimizer.slot_variables()]}}

    def current_arrays() -> dict:  # what a JAX program would hand orbax: its arrays of now
        return jax.tree_util.tree_map(lambda v: v._store.global_value(), stored,
                                      is_leaf=lambda v: isinstance(v, sx.Variable))
    nbytes = sum(a.nbytes for a in jax.tree_util.tree_leaves(current_arrays()))

    def steps_until(landed) -> list[float]:
        """Train while an async write is in flight: the step times."""
        during = []
        while not landed():
            during.append(run_step())
        return during

    def orbax_alone(asynchronous: bool) -> tuple[float, float, list[float]]:
        handler = ocp.StandardCheckpointHandler()
        ckptr = ocp.AsyncCheckpointer(handler) if asynchronous else ocp.Checkpointer(handler)
        path = os.path.join(tempfile.mkdtemp(dir=root), "ckpt")
        start = time.perf_counter()
        ckptr.save(path, args=ocp.args.StandardSave(current_arrays()))
        blocked = time.perf_counter() - start
        during = steps_until(lambda: os.path.exists(path)) if asynchronous else []
        if asynchronous:
            ckptr.wait_until_finished()
        landed = time.perf_counter() - start
        ckptr.close()
        return blocked, landed, during

    def strategax(asynchronous: bool) -> tuple[float, float, list[float]]:
        manager = sx.CheckpointManager(checkpoint, tempfile.mkdtemp(dir=root), max_to_keep=1,
                                       async_save=asynchronous)
        start = time.perf_counter()
        manager.save()
        blocked = time.perf_counter() - start
        during = steps_until(lambda: manager.checkpoints) if asynchronous else []
        manager.sync()
        return blocked, time.perf_counter() - start, during

    rows = {}
    for name, fn in (("sync", lambda: (strategax(False), orbax_alone(False))),
                     ("async", lambda: (strategax(True), orbax_alone(True)))):
        fn()  # warm-up (compiles the digest and aggregation programs)
        rows[name] = [fn() for _ in range(args.rounds)]
    shutil.rmtree(root, ignore_errors=True)

    med = statistics.median
    print(f"{nbytes / 2**20:.0f} MiB stored (parameters {args.hidden} wide, Adam state), "
          f"{strategy.num_replicas_in_sync} replicas; "
          f"step without a save {plain * 1e3:.1f} ms")
    for name in ("sync", "async"):
        sx_block = med(r[0][0] for r in rows[name])
        ob_block = med(r[1][0] for r in rows[name])
        sx_land = med(r[0][1] for r in rows[name])
        ob_land = med(r[1][1] for r in rows[name])
        print(f"{name:5s} save blocks training {sx_block * 1e3:7.1f} ms (orbax alone {ob_block * 1e3:7.1f} ms, "
              f"ratio {sx_block / ob_block:.2f}); on disk after {sx_land * 1e3:7.1f} ms "
              f"(orbax alone {ob_land * 1e3:7.1f} ms, ratio {sx_land / ob_land:.2f})")
    for who, i in (("strategax", 0), ("orbax alone", 1)):
        during = [t for r in rows["async"] for t in r[i][2]]
        if during:
            print(f"steps while an async write is in flight ({who}): {len(during)} over {args.rounds} saves, "
                  f"median {med(during) * 1e3:.1f} ms = {med(during) / plain:.2f}x the step without a save")


if __name__ == "__main__":
    main()
