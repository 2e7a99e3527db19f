"""Multi-worker jobs on Ray Train: `MultiWorkerMirroredStrategy()` made inside a JaxTrainer's
`train_loop_per_worker` takes its cluster from Ray Train (rank, world size; strategax starts
`jax.distributed` itself on CPU), no TF_CONFIG. The same script (the multi-worker tutorial's,
examples/multi_worker_custom_training.py) trains with the numbers of the same job under
TF_CONFIG on loopback, of one machine's run with as many replicas, and of plain JAX.
One local Ray cluster for the session (conftest's `ray_cluster`)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import strategax as sx

from ray_train_jobs import exception_recorder, fit, histories, resumable, tutorial
from test_multi_worker_tutorial import ARGS, BATCH, EXAMPLE, WORKERS, reference

EPOCHS = 2


def args(batch: int, checkpoint_dir) -> list[str]:
    out = list(ARGS)
    out[out.index("--per-worker-batch") + 1] = str(batch)
    out[out.index("--checkpoint-dir") + 1] = str(checkpoint_dir)
    return out + ["--epochs", str(EPOCHS)]


def one_machine(tmp_path, replicas: int) -> subprocess.Popen:
    """The script with no TF_CONFIG, started: one worker of `replicas` devices (its output in
    tmp_path/one.out and one.err)."""
    environ = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    environ.update(XLA_FLAGS=f"--xla_force_host_platform_device_count={replicas}", JAX_PLATFORMS="cpu")
    with open(tmp_path / "one.out", "w") as out, open(tmp_path / "one.err", "w") as err:
        return subprocess.Popen([sys.executable, str(EXAMPLE), *args(BATCH * WORKERS, tmp_path / "one_ckpt")],
                                stdout=out, stderr=err, env=environ, cwd=tmp_path)


def test_the_tutorial_on_ray_trains_as_under_tf_config_and_on_one_machine(ray_cluster, tutorial_first_run, tmp_path):
    # Intent: one call (JaxTrainer.fit) starts 2 workers of the tutorial's script on the local Ray
    # cluster, 1 CPU device each; their losses and accuracy per epoch equal the same script's
    # under TF_CONFIG on loopback (2 workers), on one machine with 2 devices (the same global
    # batches), and plain JAX on one device.
    from ray.train import RunConfig, ScalingConfig
    from ray.train.v2.jax import JaxTrainer

    out = tmp_path / "ray_out"
    out.mkdir()
    _, under_tf_config = tutorial_first_run  # the same arguments (checkpoints in its own directory)
    alone = one_machine(tmp_path, WORKERS)  # at the same time as the Ray job
    try:
        fit(JaxTrainer(tutorial, train_loop_config={"argv": args(BATCH, tmp_path / "ray_ckpt"), "out": str(out),
                                                    "devices": 1},
                       scaling_config=ScalingConfig(num_workers=WORKERS),
                       run_config=RunConfig(name="tutorial", storage_path=str(tmp_path / "ray_storage"))), timeout=300)
        alone.wait(timeout=300)
    finally:
        alone.kill()
    assert alone.returncode == 0, (tmp_path / "one.err").read_text()[-3000:]
    alone = json.loads((tmp_path / "one.out").read_text().splitlines()[-1])
    on_ray = histories(out, WORKERS)
    want = reference(EPOCHS)
    assert alone["epochs"] == [0, 1]
    np.testing.assert_allclose(alone["loss"], want["loss"], rtol=1e-5)
    np.testing.assert_allclose(alone["accuracy"], want["accuracy"], rtol=1e-6)
    for w in range(WORKERS):
        assert on_ray[w]["restored"] is None and on_ray[w]["epochs"] == [0, 1]
        np.testing.assert_allclose(on_ray[w]["loss"], under_tf_config[w]["loss"], rtol=1e-6)
        np.testing.assert_allclose(on_ray[w]["accuracy"], under_tf_config[w]["accuracy"], rtol=1e-6)
        np.testing.assert_allclose(on_ray[w]["loss"], alone["loss"], rtol=1e-5)
        np.testing.assert_allclose(on_ray[w]["loss"], want["loss"], rtol=1e-5)


STEPS, EVERY, KILL_AFTER = 12, 3, 7


def test_a_killed_worker_restarts_the_job_from_the_last_checkpoint(ray_cluster, tmp_path):
    # Intent: 2 Ray Train workers train the MLP for STEPS steps, an sx.CheckpointManager saving
    # every EVERY steps into Ray Train's storage path (restore_or_initialize is their only
    # fault-tolerance code); worker 1's process is SIGKILLed once it has done step KILL_AFTER.
    # The group stops (worker 0 with WorkerLostError), Ray Train
    # (FailureConfig) starts it again, both workers resume from the last complete checkpoint
    # (a step number that is a multiple of EVERY, at most KILL_AFTER + a step or two), train
    # the rest, and end with plain JAX's parameters and final loss over all STEPS steps and
    # STEPS steps counted (the optimizer's iterations, every example seen once).
    import signal
    import threading
    import time

    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.v2.jax import JaxTrainer

    sys.path.insert(0, str(EXAMPLE.parent.parent / "tests" / "workers"))
    from mlp import GLOBAL_BATCH, reference_training

    out = tmp_path / "out"
    out.mkdir()
    killed: list[float] = []

    def kill_worker_1() -> None:
        log = out / "worker1.log"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            lines = log.read_text().splitlines() if log.exists() else []
            if f"step {KILL_AFTER}" in " ".join(line.rsplit(" ", 1)[0] for line in lines if line.startswith("step")):
                pid = int(next(line for line in lines if line.startswith("pid")).split()[1])
                os.kill(pid, signal.SIGKILL)
                killed.append(time.time())
                return
            time.sleep(0.02)

    killer = threading.Thread(target=kill_worker_1, daemon=True)
    killer.start()
    storage = tmp_path / "ray_storage"  # the checkpoints in Ray Train's storage, in the run's folder
    config = {"steps": STEPS, "every": EVERY, "ckpt": str(storage / "restart" / "ckpt"), "out": str(out), "devices": 1}
    fit(JaxTrainer(resumable, train_loop_config=config,
                   scaling_config=ScalingConfig(num_workers=2),
                   run_config=RunConfig(name="restart", storage_path=str(storage),
                                        failure_config=FailureConfig(max_failures=2),
                                        callbacks=[exception_recorder(str(tmp_path / "errors.jsonl"))])), timeout=500)
    killer.join(timeout=1)
    assert killed, "worker 1 was never killed"
    # what Ray Train saw the group stop with: worker 0's WorkerLostError naming worker 1, or, when
    # Ray Train's health check (every 2 s) finds worker 1's process gone before worker 0's error
    # reaches it, that (it then stops worker 0 itself)
    errors = [json.loads(line) for line in (tmp_path / "errors.jsonl").read_text().splitlines()]
    survivor = [e["error"] for e in errors if e["rank"] == 0]
    victim = [e["error"] for e in errors if e["rank"] == 1]
    assert len(errors) <= 2 and (survivor or victim), errors
    if survivor:
        assert "WorkerLostError" in survivor[0] and "worker 1 (worker, task index 1, " in survivor[0] \
            and "was lost (its process is gone)" in survivor[0], errors
    else:
        assert victim[0].startswith("WorkerHealthCheckFailedError"), errors
    ref_losses, ref_params = reference_training(STEPS)
    for w in range(2):
        lines = (out / f"worker{w}.log").read_text().splitlines()
        resumed = [line.split() for line in lines if line.startswith("resumed")]
        assert [int(r[1]) for r in resumed][0] == 0 and len(resumed) == 2, lines  # one restart
        start = int(resumed[1][1])
        assert start % EVERY == 0 and 0 < start <= KILL_AFTER + 2, lines
        final = json.loads((out / f"worker{w}.json").read_text())
        assert final["start"] == start and final["iterations"] == STEPS and len(final["losses"]) == STEPS - start
        assert final["seen"] == STEPS * GLOBAL_BATCH
        np.testing.assert_allclose(final["losses"], ref_losses[start:], rtol=1e-6, atol=1e-7)
        for k, v in ref_params.items():
            np.testing.assert_allclose(np.asarray(final["params"][k]), v, rtol=1e-6, atol=1e-6)
    times = {line.split()[0] + " " + line.split()[1]: float(line.split()[2])
             for line in (out / "worker0.log").read_text().splitlines() if len(line.split()) == 3}
    print(f"kill to restored: {times[f'resumed {start}'] - killed[0]:.1f} s; to the first step after it: "
          f"{times[f'step {start + 1}'] - killed[0]:.1f} s")


def test_the_ray_train_resolver_outside_a_ray_train_worker_says_where_it_belongs():
    with pytest.raises(sx.cluster_resolver.ClusterStartError, match="inside a Ray Train worker"):
        sx.cluster_resolver.RayTrainClusterResolver()
