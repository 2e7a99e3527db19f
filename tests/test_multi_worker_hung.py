"""A worker that hangs without dying (SIGSTOP): every survivor names it ("worker N stopped
responding (no heartbeat for T s)") within the heartbeat timeout and exits 1, before JAX's own
heartbeat check would abort it (SIGABRT, a C++ stack trace). A worker that never starts is named
once the join timeout (`join_timeout_seconds`) expires. Real worker processes on loopback."""
import signal
import time

import pytest

from multi_worker_launch import Job, free_ports

HEARTBEAT = 4  # seconds (the default is 10)


@pytest.mark.parametrize("victim", [1, 0], ids=["worker", "coordinator"])
def test_a_stopped_worker_is_named_by_every_survivor_within_the_heartbeat_timeout(tmp_path, victim):
    # Intent: 3 workers train without a step bound; one is SIGSTOPped mid-training (worker 1, or
    # worker 0 whose port is JAX's coordination service); both others print WorkerLostError
    # naming it as stopped responding and exit 1 within HEARTBEAT + a few seconds (pings every
    # second, 2 s each): no abort, no "Check failure" stack trace from JAX's heartbeat.
    with Job(tmp_path, 3, 1, ["0", "none", str(HEARTBEAT)]) as job:
        for w in range(3):
            job.wait_for_line(w, "step 3", timeout=120)
        job.procs[victim].send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        survivors = [w for w in range(3) if w != victim]
        exits = {}
        while len(exits) < 2 and time.monotonic() - stopped < HEARTBEAT + 40:
            for w in survivors:
                if w not in exits and job.procs[w].poll() is not None:
                    exits[w] = (job.procs[w].returncode, time.monotonic() - stopped)
            time.sleep(0.05)
        errs = {w: job.stderr(w) for w in survivors}
    role = "chief/coordinator" if victim == 0 else "worker"
    named = (f"WorkerLostError: strategax: worker {{}} of 3: worker {victim} stopped responding (no heartbeat for "
             f"{HEARTBEAT} s): worker {victim} ({role}, task index {victim}, {job.addresses[victim]}) is hung or "
             "stopped.")
    for w in survivors:
        assert w in exits, (exits, errs[w])
        code, seconds = exits[w]
        assert code == 1, errs[w]
        # heartbeat + one ping round (1 s) + a ping's 2 s timeout, with slack for a loaded machine
        assert HEARTBEAT <= seconds < HEARTBEAT + 15, (seconds, errs[w])
        assert named.format(w) in errs[w], errs[w]
        assert "Check failure" not in errs[w] and "Terminating process" not in errs[w], errs[w]


def test_a_worker_that_never_starts_is_named_when_the_join_timeout_expires(tmp_path):
    # Intent: a 2-worker cluster of which only worker 0 starts; with join_timeout_seconds=3 it
    # raises ClusterStartError naming worker 1 after 3 s (not the default 120) and exits 1.
    addresses = [f"127.0.0.1:{p}" for p in free_ports(2)]
    with Job(tmp_path, 1, 1, ["3", "none", "none", "3"], addresses=addresses) as job:
        (code, _), = job.exit_times(timeout=90)
        err = job.stderr(0)
    assert code == 1, err
    assert "ClusterStartError" in err
    assert f"strategax: worker 0 of 2: worker 1 (worker, task index 1, {addresses[1]}) did not start within 3 s" in err
    assert "join_timeout_seconds" in err
