"""Faults and checkpoints: a worker killed mid-training (every worker saving after every step)
leaves the last checkpoint intact, and a job restarted on another number of workers resumes
from it to the numbers of uninterrupted training."""
import sys
from pathlib import Path

import numpy as np

import strategax as sx

from multi_worker_launch import Job

sys.path.insert(0, str(Path(__file__).resolve().parent / "workers"))
from mlp import reference_training  # noqa: E402

WORKER = Path(__file__).resolve().parent / "workers" / "ckpt_worker.py"
STEPS, TIMEOUT = 8, 5


def test_restarted_job_resumes_from_the_checkpoint_written_before_the_failure(tmp_path):
    # Intent: worker 1 killed mid-training: worker 0 names it and exits non-zero, the latest
    # checkpoint (written by both workers) is complete, and one worker of 4 replicas resumes
    # from it to the parameters of uninterrupted one-device training.
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    with Job(tmp_path / "first", 2, 2, ["0", str(TIMEOUT), str(ckpt)], script=WORKER) as job:
        job.wait_for_line(0, "step 3", timeout=90)
        job.procs[1].kill()  # worker 1 dies mid-training
        code = job.procs[0].wait(TIMEOUT + 30)
        assert code != 0 and "worker 1 (worker, task index 1" in job.stderr(0)
    latest = sx.latest_checkpoint(str(ckpt))
    assert latest is not None  # intact: it names a complete file
    with Job(tmp_path / "second", 1, 4, [str(STEPS), str(TIMEOUT), str(ckpt)], script=WORKER) as job:
        assert job.wait(timeout=90) == [0], job.logs()  # one worker of 4 replicas now
        results = [job.result(0)]
    _, ref_params = reference_training(STEPS)
    for r in results:
        assert 3 <= r["start"] < STEPS  # resumed, not restarted from scratch
        for k, want in ref_params.items():
            np.testing.assert_allclose(np.asarray(r["params"][k]), want, rtol=2e-5, atol=2e-6)
