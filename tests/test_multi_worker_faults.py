"""A worker lost outside any compiled step: during a metric's cross-worker read, an eager
reduce or a checkpoint save, the survivor raises `sx.WorkerLostError` naming the lost task
within the job's timeout and exits 1 (no raw gloo error, no abort of JAX's runtime). A worker
that never arrives at a save is named once the save's bound expires, and SIGTERM stops a worker
waiting in a save. Two real worker processes on loopback, every wait bounded."""
import signal
import time
from pathlib import Path

import pytest

from multi_worker_launch import Job

WORKER = Path(__file__).resolve().parent / "workers" / "fault_worker.py"
TIMEOUT = 5


def named(job, i: int) -> str:
    role = "chief/coordinator" if i == 0 else "worker"
    return f"worker {i} ({role}, task index {i}, {job.addresses[i]})"


@pytest.mark.parametrize("mode", ["metric", "reduce", "save"])
def test_a_worker_killed_outside_a_step_is_named_on_the_survivor(tmp_path, mode):
    # Intent: worker 1 dies (SIGKILL) while worker 0 reads a metric, reduces, or saves: worker 0
    # raises WorkerLostError naming worker 1 within TIMEOUT + a few seconds of the death, and exits 1.
    with Job(tmp_path, 2, 1, [mode, str(TIMEOUT), str(tmp_path / "ckpt")], script=WORKER) as job:
        exits = job.exit_times(timeout=120)
        out, err = job.outs[0].read_text(), job.stderr(0)
    (code, survivor_s), (victim_code, victim_s) = exits
    assert victim_code == -signal.SIGKILL, job.stderr(1)
    assert code == 1, err
    assert survivor_s - victim_s < TIMEOUT + 10, (exits, err)
    assert "caught WorkerLostError" in out and f"{named(job, 1)} was lost" in out, out + err
    assert "WorkerLostError" in err and "ValueError" not in err and "Terminating process" not in err, err


def test_a_worker_that_never_arrives_at_a_save_is_named_when_the_bound_expires(tmp_path):
    # Intent: worker 1 is alive but never calls save; worker 0's save waits timeout_seconds, then
    # raises WorkerLostError saying worker 1 did not arrive (it answers pings).
    with Job(tmp_path, 2, 1, ["absent", str(TIMEOUT), str(tmp_path / "ckpt")], script=WORKER) as job:
        job.wait_for_line(0, "absent 0", timeout=90)
        start = time.monotonic()
        code = job.procs[0].wait(TIMEOUT + 30)
        elapsed = time.monotonic() - start
        out = job.outs[0].read_text()
    assert code == 1 and TIMEOUT <= elapsed < TIMEOUT + 30, (code, elapsed)
    assert f"waited {TIMEOUT} s: {named(job, 1)} did not arrive" in out, out


def test_sigterm_stops_a_worker_waiting_in_a_save(tmp_path):
    # Intent: worker 0 waits in a save for worker 1 (which never comes; the bound is 60 s);
    # SIGTERM, which JAX's preemption service catches in a multi-worker job, stops it within
    # seconds with exit status 143 and a message saying what it waited for.
    with Job(tmp_path, 2, 1, ["absent", "60", str(tmp_path / "ckpt")], script=WORKER) as job:
        job.wait_for_line(0, "absent 0", timeout=90)
        time.sleep(1.5)  # in the wait
        job.procs[0].send_signal(signal.SIGTERM)
        start = time.monotonic()
        code = job.procs[0].wait(30)
        elapsed = time.monotonic() - start
        err = job.stderr(0)
    assert code == 143 and elapsed < 15, (code, elapsed, err)
    assert "a preemption notice (SIGTERM) came while this worker waited in saving checkpoint" in err, err
    assert named(job, 1) in err
