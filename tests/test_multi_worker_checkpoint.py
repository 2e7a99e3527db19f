"""Faults and checkpoints: a worker killed mid-training leaves the chief's last checkpoint
intact, and a restarted job resumes from it to the numbers of uninterrupted training."""
import sys
import time
from pathlib import Path

import numpy as np

import strategax as sx

from multi_worker_launch import Job

sys.path.insert(0, str(Path(__file__).resolve().parent / "workers"))
from mlp import reference_training  # noqa: E402

WORKER = Path(__file__).resolve().parent / "workers" / "ckpt_worker.py"
STEPS, TIMEOUT = 8, 5


def test_restarted_job_resumes_from_the_checkpoint_written_before_the_failure(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    with Job(tmp_path / "first", 2, 2, ["0", str(TIMEOUT), str(ckpt)], script=WORKER) as job:
        job.wait_for_line(0, "step 3", timeout=90)
        job.procs[1].kill()  # worker 1 dies mid-training
        code = job.procs[0].wait(TIMEOUT + 30)
        assert code != 0 and "worker 1 (worker, task index 1" in job.stderr(0)
    latest = sx.latest_checkpoint(str(ckpt))
    assert latest is not None  # intact: it names a complete file
    with Job(tmp_path / "second", 2, 2, [str(STEPS), str(TIMEOUT), str(ckpt)], script=WORKER) as job:
        assert job.wait(timeout=90) == [0, 0], job.logs()
        results = [job.result(0), job.result(1)]
    _, ref_params = reference_training(STEPS)
    for r in results:
        assert 3 <= r["start"] < STEPS  # resumed, not restarted from scratch
        for k, want in ref_params.items():
            np.testing.assert_allclose(np.asarray(r["params"][k]), want, rtol=2e-5, atol=2e-6)
