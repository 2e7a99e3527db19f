"""Faults as TensorFlow promises them: a worker killed mid-run costs only its in-flight step,
which runs again on another worker (every scheduled step runs exactly once and join()
returns), and the worker is started again; a killed parameter server makes join() and fetch()
raise ParameterServerLostError promptly, never hang."""
import os
import signal
import threading
import time

import numpy as np
import pytest

import strategax as sx
from parameter_servers import counting_steps, job, shared

STEPS = 40


def wait_for(condition, what: str, timeout: float = 120.0) -> None:
    """Poll until `condition()` (a hang guard, not a timing check)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def join_in_time(coordinator, seconds: float = 30.0):
    """coordinator.join() in a thread: what it raised, or a failure if it did not return."""
    outcome = []

    def target():
        try:
            coordinator.join()
            outcome.append(None)
        except BaseException as e:  # noqa: BLE001
            outcome.append(e)
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"join() did not return within {seconds} s"
    return outcome[0]


def test_a_killed_worker_costs_nothing(ray_cluster):
    # Intent: step i adds one_hot(i) to `hits` (a Python step that sleeps a little around a
    # compiled update, so steps are in flight when the kill lands); worker 0's process is
    # killed mid-run. join() returns, every step ran exactly once (hits is all ones), and the
    # worker, started again, runs the next round too.
    strategy = shared("2 workers, 1 ps", 2, 1)
    coordinator = sx.experimental.coordinator.ClusterCoordinator(strategy)
    hits, step = counting_steps(strategy, STEPS, 0.05, 0.05)

    for i in range(STEPS):
        coordinator.schedule(step, args=(np.int32(i),))
    wait_for(lambda: int(hits.numpy().sum()) >= 4, "the first steps")
    killed = strategy._cluster.worker_pids[0]
    os.kill(killed, signal.SIGKILL)
    assert join_in_time(coordinator, 300.0) is None
    np.testing.assert_array_equal(hits.numpy(), np.ones(STEPS, np.int32))
    assert coordinator._rescheduled >= 1  # the step worker 0 had in flight ran again

    wait_for(lambda: strategy._cluster.worker_pids[0] != killed, "worker 0 to start again", 300.0)
    for i in range(STEPS):
        coordinator.schedule(step, args=(np.int32(i),))
    assert join_in_time(coordinator, 300.0) is None
    np.testing.assert_array_equal(hits.numpy(), np.full(STEPS, 2, np.int32))


def test_a_killed_parameter_server_is_a_named_error(ray_cluster):
    # Intent: parameter server 1 of 2 is killed while steps that use both run; join() raises
    # ParameterServerLostError (a RuntimeError naming the fix) within 30 s, and so do fetch()
    # of a step still queued and a read on the coordinator.
    with job(num_workers=1, num_ps=2) as strategy:
        coordinator = sx.experimental.coordinator.ClusterCoordinator(strategy)
        with strategy.scope():
            a = sx.Variable(0.0, name="a")
            b = sx.Variable(0.0, name="b")

        @strategy.function
        def add():
            a.assign_add(1.0)
            b.assign_add(1.0)

        def step():
            time.sleep(0.02)
            add()

        values = [coordinator.schedule(step) for _ in range(400)]
        wait_for(lambda: float(a.numpy()) >= 3, "the first steps")
        os.kill(strategy._cluster.server_pids[1], signal.SIGKILL)
        error = join_in_time(coordinator, 30.0)
        assert isinstance(error, sx.ParameterServerLostError) and isinstance(error, RuntimeError)
        assert "parameter server 1" in str(error) and "checkpoint" in str(error)
        with pytest.raises(sx.ParameterServerLostError):
            values[-1].fetch()
        with pytest.raises(sx.ParameterServerLostError):
            b.numpy()
