"""sx.PreemptionCheckpointHandler: a training script sent SIGTERM mid-run saves at the next
step boundary and exits with TensorFlow's restart code (42); restarted, it resumes from the
saved step and ends with the weights of an uninterrupted run (plain JAX + optax on one device),
as one process and as a 2-worker job (where both workers save at the same step). A sync-on-read
SUM counter of the examples seen is saved as its sum over all replicas of all workers and
divided among the replicas of the restarted job (the seed's rule). The script's regular
checkpoints go through an async CheckpointManager: the one still being written when the
restarted run ends is completed at exit, with the run count of its step."""
import signal
import sys
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

import strategax as sx

from multi_worker_launch import Job

sys.path.insert(0, str(Path(__file__).resolve().parent / "workers"))
from mlp import GLOBAL_BATCH, reference_training  # noqa: E402

WORKER = Path(__file__).resolve().parent / "workers" / "preempt_worker.py"
STEPS = 20


@pytest.fixture(scope="module")
def reference():
    return reference_training(STEPS)[1]


def last_step(stdout: str) -> int:
    return max(int(line.split()[1]) for line in stdout.splitlines() if line.startswith("step "))


def preempt_and_resume(tmp_path, workers: int, devices: tuple[int, int], reference):
    """Run, SIGTERM worker `workers - 1` after step 3, check every worker saved and exited
    with 42, restart (on `devices[1]` devices per worker) and compare with `reference`."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    with Job(tmp_path / "first", workers, devices[0], [str(STEPS), str(ckpt), "0.15"], script=WORKER) as job:
        job.wait_for_line(workers - 1, "step 3", timeout=120)
        job.procs[workers - 1].send_signal(signal.SIGTERM)
        assert job.wait(timeout=120) == [42] * workers, job.logs()
        saved = [last_step(job.outs[w].read_text()) for w in range(workers)]
    assert len(set(saved)) == 1 and 3 <= saved[0] < STEPS, saved  # one step, agreed by all
    latest = sx.latest_checkpoint(str(ckpt))
    # orbax alone, on this process's devices (not the job's): its fallback_sharding option
    one_device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    with ocp.Checkpointer(ocp.StandardCheckpointHandler()) as orbax:
        stored = orbax.restore(latest, args=ocp.args.StandardRestore(fallback_sharding=one_device))
    assert float(stored["seen"]) == saved[0] * GLOBAL_BATCH  # the sum over every replica of every worker
    # the workers named one folder: the chief alone wrote the checkpoint (every value is the
    # same on every worker)
    assert any((Path(latest) / "ocdbt.process_0" / "d").iterdir())
    assert not list(Path(latest).glob("ocdbt.process_[1-9]*"))
    with Job(tmp_path / "second", workers, devices[1], [str(STEPS), str(ckpt), "0"], script=WORKER) as job:
        assert job.wait(timeout=120) == [0] * workers, job.logs()
        results = [job.result(w) for w in range(workers)]
        errors = job.errs[0].read_text()
    # the async save of the last step, still being written at exit, was completed, not lost;
    # from Python 3.12 no thread may start at exit (orbax's last steps start some): that save
    # stays unpublished, the one before it is the latest, and stderr says how to keep it
    with ocp.Checkpointer(ocp.StandardCheckpointHandler()) as orbax:
        final = orbax.restore(sx.latest_checkpoint(str(ckpt)),
                              args=ocp.args.StandardRestore(fallback_sharding=one_device))
    last = STEPS if sys.version_info < (3, 12) or "manager.sync()" not in errors else STEPS - 5
    assert (int(final["checkpointed_runs"]), float(final["seen"])) == (last, last * GLOBAL_BATCH), errors[-2000:]
    for r in results:
        assert r["start"] == saved[0]  # resumed where the preempted run stopped
        # the SUM rule on the new replica count: each of this worker's copies holds its share
        assert r["restored_seen"] == [saved[0] * GLOBAL_BATCH / (workers * devices[1])] * devices[1]
        for k, want in reference.items():
            np.testing.assert_allclose(np.asarray(r["params"][k]), want, rtol=1e-5, atol=1e-6)


def test_sigterm_saves_and_restart_matches_uninterrupted_run(tmp_path, reference):
    # Intent: one process (2 replicas), SIGTERM after step 3: it saves and exits 42; restarted
    # on 4 replicas it resumes from the saved step and ends with the reference weights.
    preempt_and_resume(tmp_path, 1, (2, 4), reference)


def test_sigterm_to_one_worker_saves_on_all_and_restart_matches(tmp_path, reference):
    # Intent: a 2-worker job (2 replicas each), SIGTERM to worker 1: both workers save at the
    # same step (one checkpoint, in the folder both name, written by the chief) and exit 42; restarted with 1
    # replica per worker it ends with the reference weights.
    preempt_and_resume(tmp_path, 2, (2, 1), reference)
