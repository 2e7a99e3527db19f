"""Training functions that Ray Train's workers run in tests/test_ray_train.py (they import this
module by name: tests/ is on the session Ray cluster's path)."""
import json
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def devices(config: dict) -> None:
    """This worker's simulated CPU devices (config["devices"]), set before JAX starts its backend
    (a runtime_env would do too, but makes Ray start fresh worker processes: seconds each)."""
    import os

    os.environ.update(JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={config['devices']}")


def tutorial(config: dict) -> None:
    """The multi-worker tutorial's script (examples/multi_worker_custom_training.py) as it is."""
    devices(config)
    sys.path.insert(0, str(EXAMPLES))
    from multi_worker_custom_training import train_loop_per_worker

    train_loop_per_worker(config)


def fit(trainer, timeout: float) -> None:
    """`trainer.fit()`, failing the test if it takes longer than `timeout` seconds (the run is
    left to the session's Ray shutdown)."""
    import threading

    errors: list = []

    def run() -> None:
        try:
            trainer.fit()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            errors.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise AssertionError(f"the Ray Train job did not finish within {timeout} s")
    if errors:
        raise errors[0]


def histories(out: Path, workers: int) -> list[dict]:
    return [json.loads((out / f"worker{w}.json").read_text()) for w in range(workers)]


WORKERS_DIR = Path(__file__).resolve().parent / "workers"


def resumable(config: dict) -> None:
    """The MLP trained for config["steps"] steps with sx.Variables and sx.Optimizer, saved every
    config["every"] steps by an sx.CheckpointManager in config["ckpt"], which is also all it does
    to survive a restart (`restore_or_initialize`). For the test it logs, per worker and attempt,
    its pid, where it resumed and each step (with the time), and writes its final state."""
    import os
    import time

    devices(config)
    import strategax as sx

    strategy = sx.MultiWorkerMirroredStrategy()

    import numpy as np

    sys.path.insert(0, str(WORKERS_DIR))
    from mlp import data, make_variable_training

    rank, steps, every = strategy.cluster_resolver.task_id, config["steps"], config["every"]
    log = Path(config["out"], f"worker{rank}.log")
    with open(log, "a") as f:
        f.write(f"pid {os.getpid()}\n")
    variables, optimizer, train_step, seen = make_variable_training(strategy)
    manager = sx.CheckpointManager(sx.Checkpoint(params=variables, optimizer=optimizer, seen=seen),
                                   config["ckpt"], max_to_keep=2)
    manager.restore_or_initialize()
    start = int(np.asarray(optimizer.iterations.read_value()))
    with open(log, "a") as f:
        f.write(f"resumed {start} {time.time()}\n")
    x, y = data(steps)
    losses = []
    for i, batch in enumerate(strategy.experimental_distribute_dataset(list(zip(x[start:], y[start:]))), start + 1):
        losses.append(float(train_step(*batch)))
        if i % every == 0:
            manager.save(checkpoint_number=i)
        with open(log, "a") as f:
            f.write(f"step {i} {time.time()}\n")
    Path(config["out"], f"worker{rank}.json").write_text(json.dumps({
        "start": start, "losses": losses, "iterations": int(np.asarray(optimizer.iterations.read_value())),
        "seen": float(np.asarray(seen.read_value())),
        "params": {k: np.asarray(v.read_value()).tolist() for k, v in variables.items()}}))


def exception_recorder(path: str):
    """A Ray Train callback (it runs in Ray Train's controller) writing each worker exception
    Ray Train sees, by world rank, to the file at `path`: what the workers stopped with."""
    from ray.train import UserCallback

    class Recorder(UserCallback):
        def after_exception(self, run_context, worker_exceptions) -> None:
            with open(path, "a") as f:
                for rank, error in sorted(worker_exceptions.items()):
                    f.write(json.dumps({"rank": rank, "error": f"{type(error).__name__}: {error}"}) + "\n")

    return Recorder()
